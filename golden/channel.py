"""Cycle-exact model of one PIM channel with the static in-order controller.

This is the specification the RTL (``hw/channel.py``) meets: the same
command issued in the same cycle, the same data. Rules (docs/channel.md has
the prose and a worked timing example):

Interfaces and latencies
    A command, or a write-data beat, accepted on its stream in cycle ``a``
    is visible to the controller from cycle ``a + 1``. A read beat (RD or
    RD-OUT issued in cycle ``c``) enters the read-data FIFO in ``c + 1`` and
    can be popped from ``c + 2``. RD and RD-OUT need a read credit: they may
    issue in cycle ``c`` only while fewer than ``rdata_depth`` beats issued
    before ``c`` are still unpopped before ``c``.

Controller (one command-bus slot per cycle, strictly in order)
    The head command may start in ``max(a + 1, previous command done + 1)``.
    Its actions issue in order, each in the earliest cycle that satisfies
    every rule, one action per cycle:

    * a MAC needs the same row open in every bank: if any bank is open, an
      all-bank PRE; then, all banks closed, an all-bank ACT. A RD/WR needs
      its row open in its bank: PRE if another row is open, then ACT.
    * PRE: ``>= t_act + tRAS`` for each bank it closes.
      ACT: ``>= t_pre + tRP`` for each bank it opens.
      MAC/RD/WR: ``>= t_act + tRCD`` for each bank they touch and
      ``>= last MAC/RD/WR + tCCD``.
    * static gaps: every action waits ``gap(kind)`` after the previous
      action (``Timing.gap``: t_wr_inp, t_mac, t_rd_out, tCCD for RD/WR,
      1 for PRE/ACT).
    * WR-INP and WR wait for their write-data beat; RD and RD-OUT for a credit.

Bad commands
    An opcode the channel does not implement, or an index out of range, is
    dropped in the cycle it reaches the head (after its write-data beat, for
    WR and WR-INP, so the streams stay aligned). Nothing else changes; the
    first error's code and command ID are kept (sticky) and counted.

Data
    WR-INP writes a GBuf entry; WR a bank word; MAC updates OBuf[out] of every
    bank with ``numerics.mac``; RD-OUT returns ``f32_to_bf16(OBuf[out])`` of
    bank ``b`` in lane ``b`` (lanes >= banks are zero) and clears the entry
    to +0; RD returns the bank word. Command IDs count accepted commands,
    wrapping at 2**16; PRE and ACT carry the ID of the command they serve.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.config import ChannelConfig
from golden.isa import (
    CHANNEL_OPCODES,
    COMMAND_FIELDS,
    FIELDS,
    LANES,
    ErrorCode,
    Opcode,
    pack_command,
    unpack_command,
)

CMD_ID_MOD = 1 << FIELDS["cmd_id"].width
ERR_COUNT_MAX = (1 << FIELDS["err_count"].width) - 1
RDATA_POP_LATENCY = 2  # issue in c -> poppable from c + 2


class CommandError(ValueError):
    """Raised in strict mode for a command the channel would reject."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    opcode: int
    bank: int = 0
    row: int = 0
    col: int = 0
    gbuf_idx: int = 0
    out_idx: int = 0

    def pack(self) -> int:
        return pack_command(**dataclasses.asdict(self))

    @classmethod
    def unpack(cls, word: int) -> Command:
        return cls(**unpack_command(word))

    def __str__(self) -> str:
        try:
            name = Opcode(self.opcode).name
        except ValueError:
            name = f"opcode{self.opcode}"
        args = {f: getattr(self, f) for f in COMMAND_FIELDS[1:] if getattr(self, f)}
        return f"{name}({', '.join(f'{k}={v}' for k, v in args.items())})"


def wr_inp(gbuf_idx: int) -> Command:
    return Command(Opcode.WR_INP, gbuf_idx=gbuf_idx)


def mac(row: int, col: int, gbuf_idx: int, out_idx: int) -> Command:
    return Command(Opcode.MAC, row=row, col=col, gbuf_idx=gbuf_idx, out_idx=out_idx)


def rd_out(out_idx: int) -> Command:
    return Command(Opcode.RD_OUT, out_idx=out_idx)


def rd(bank: int, row: int, col: int) -> Command:
    return Command(Opcode.RD, bank=bank, row=row, col=col)


def wr(bank: int, row: int, col: int) -> Command:
    return Command(Opcode.WR, bank=bank, row=row, col=col)


@dataclass(frozen=True)
class TraceEntry:
    cmd_id: int
    opcode: Opcode
    cycle: int

    def __str__(self) -> str:
        return f"cycle {self.cycle:>7}: id {self.cmd_id:>5} {self.opcode.name}"


@dataclass
class Status:
    err_code: ErrorCode = ErrorCode.NONE
    err_id: int = 0
    err_count: int = 0


@dataclass
class RunResult:
    trace: list[TraceEntry]
    rdata: list[int]  # 256-bit read beats, in order
    errors: list[tuple[int, ErrorCode]]  # (cmd_id, code) of every dropped command
    status: Status
    cycles: int  # cycle after the last command finished

    @property
    def mac_count(self) -> int:
        return sum(1 for t in self.trace if t.opcode == Opcode.MAC)


_WRITES = (Opcode.WR_INP, Opcode.WR)
_READS = (Opcode.RD_OUT, Opcode.RD)


@dataclass
class ChannelModel:
    config: ChannelConfig
    strict: bool = False  # raise CommandError instead of recording the error
    gbuf: np.ndarray = field(init=False)
    obuf: np.ndarray = field(init=False)
    rows: dict = field(init=False)  # (bank, row) -> (cols, 16) uint16

    def __post_init__(self):
        c = self.config
        self.gbuf = np.zeros((c.gbuf_entries, LANES), np.uint16)
        self.obuf = np.zeros((c.obuf_entries, c.banks), np.uint32)
        self.rows = {}

    # ---- data ---------------------------------------------------------
    def _row(self, bank: int, row: int) -> np.ndarray:
        key = (bank, row)
        if key not in self.rows:
            self.rows[key] = np.zeros((self.config.cols, LANES), np.uint16)
        return self.rows[key]

    def bank_word(self, bank: int, row: int, col: int) -> np.ndarray:
        return self._row(bank, row)[col]

    def load_matrix(self, bank: int, row: int, words: np.ndarray) -> None:
        """Backdoor: place words (cols, 16) in a bank row (for studies)."""
        self._row(bank, row)[: len(words)] = words

    # ---- decoding -----------------------------------------------------
    def check(self, cmd: Command) -> tuple[ErrorCode, str]:
        c = self.config
        if cmd.opcode not in CHANNEL_OPCODES:
            return ErrorCode.BAD_OPCODE, f"opcode={cmd.opcode} is not a channel command"
        op = Opcode(cmd.opcode)
        checks = {
            Opcode.WR_INP: [("gbuf_idx", c.gbuf_entries, ErrorCode.GBUF_RANGE)],
            Opcode.MAC: [("row", c.rows, ErrorCode.ROW_RANGE), ("col", c.cols, ErrorCode.COL_RANGE),
                         ("gbuf_idx", c.gbuf_entries, ErrorCode.GBUF_RANGE),
                         ("out_idx", c.obuf_entries, ErrorCode.OBUF_RANGE)],
            Opcode.RD_OUT: [("out_idx", c.obuf_entries, ErrorCode.OBUF_RANGE)],
        }.get(op, [("bank", c.banks, ErrorCode.BANK_RANGE), ("row", c.rows, ErrorCode.ROW_RANGE),
                   ("col", c.cols, ErrorCode.COL_RANGE)])
        for name, limit, code in checks:
            value = getattr(cmd, name)
            if value >= limit:
                return code, f"{op.name}: {name}={value} out of range (< {limit})"
        return ErrorCode.NONE, ""

    # ---- the controller ------------------------------------------------
    def run(self, commands: Sequence[Command | int], wdata: Sequence[int] = (),
            cmd_arrivals: Sequence[int] | None = None,
            wdata_arrivals: Sequence[int] | None = None,
            rdata_pops: Sequence[int] | None = None) -> RunResult:
        """Run a command stream from reset.

        ``cmd_arrivals[i]`` / ``wdata_arrivals[k]`` are the cycles the RTL
        accepted command i / write beat k (default: all at cycle 0, i.e.
        always available). ``rdata_pops[j]`` is the cycle read beat j was
        popped (default: as soon as possible)."""
        cfg, tm = self.config, self.config.timing
        cmds = [Command.unpack(c) if isinstance(c, int) else c for c in commands]
        n = len(cmds)
        cmd_arrivals = list(cmd_arrivals) if cmd_arrivals is not None else [0] * n
        wdata = list(wdata)
        wdata_arrivals = list(wdata_arrivals) if wdata_arrivals is not None else [0] * len(wdata)
        if len(cmd_arrivals) != n or len(wdata_arrivals) != len(wdata):
            raise ValueError("arrival lists must match the command and write-data lists")
        banks = cfg.banks
        never = -(1 << 40)
        open_row = [None] * banks
        t_act = [never] * banks
        t_pre = [never] * banks
        t_col = never
        gap_until = 0
        trace: list[TraceEntry] = []
        rdata: list[int] = []
        read_issue: list[int] = []
        errors: list[tuple[int, ErrorCode]] = []
        status = Status()
        wbeat = 0
        free = 0  # first cycle the controller can work on the next command

        def wdata_ready(k: int) -> int:
            if k >= len(wdata):
                raise ValueError(f"command needs write-data beat {k} but only {len(wdata)} given")
            return wdata_arrivals[k] + 1

        def read_credit_ready() -> int:
            j = len(read_issue) - cfg.rdata_depth  # this beat waits for beat j's pop
            if j < 0:
                return 0
            if rdata_pops is not None:
                if j >= len(rdata_pops):
                    raise ValueError(f"read beat {j} was never popped; the run cannot complete")
                return rdata_pops[j] + 1
            return read_issue[j] + RDATA_POP_LATENCY + 1

        for i, cmd in enumerate(cmds):
            cmd_id = i % CMD_ID_MOD
            t = max(cmd_arrivals[i] + 1, free)
            code, message = self.check(cmd)
            if code != ErrorCode.NONE:
                if self.strict:
                    raise CommandError(code, message)
                if cmd.opcode in _WRITES:
                    t = max(t, wdata_ready(wbeat))
                    wbeat += 1
                errors.append((cmd_id, code))
                if status.err_code == ErrorCode.NONE:
                    status.err_code, status.err_id = code, cmd_id
                status.err_count = min(status.err_count + 1, ERR_COUNT_MAX)
                free = t + 1
                continue
            op = Opcode(cmd.opcode)
            touched = range(banks) if op == Opcode.MAC else [cmd.bank] if op in (
                Opcode.RD, Opcode.WR) else []

            def issue(kind: Opcode, earliest: int, cmd_id: int = cmd_id) -> int:
                nonlocal gap_until, t
                c = max(t, gap_until, earliest)
                trace.append(TraceEntry(cmd_id, kind, c))
                gap_until = c + tm.gap(kind)
                t = c + 1
                return c

            if touched:
                if op == Opcode.MAC:
                    need_pre = [b for b in touched if open_row[b] is not None] if any(
                        open_row[b] != cmd.row for b in touched) else []
                else:
                    need_pre = [b for b in touched if open_row[b] not in (None, cmd.row)]
                if need_pre:
                    c = issue(Opcode.PRE, max(t_act[b] + tm.t_ras for b in need_pre))
                    for b in need_pre:
                        open_row[b], t_pre[b] = None, c
                need_act = [b for b in touched if open_row[b] is None]
                if need_act:
                    c = issue(Opcode.ACT, max(t_pre[b] + tm.t_rp for b in need_act))
                    for b in need_act:
                        open_row[b], t_act[b] = cmd.row, c
                col_ready = max(max(t_act[b] + tm.t_rcd for b in touched), t_col + tm.t_ccd)
            else:
                col_ready = 0

            if op in _WRITES:
                col_ready = max(col_ready, wdata_ready(wbeat))
                beat = numerics.words_to_lanes(wdata[wbeat])
                wbeat += 1
            if op in _READS:
                col_ready = max(col_ready, read_credit_ready())
            c = issue(op, col_ready)
            if touched:
                t_col = c
            if op in _READS:
                read_issue.append(c)

            if op == Opcode.WR_INP:
                self.gbuf[cmd.gbuf_idx] = beat
            elif op == Opcode.WR:
                self._row(cmd.bank, cmd.row)[cmd.col] = beat
            elif op == Opcode.MAC:
                weights = np.stack([self._row(b, cmd.row)[cmd.col] for b in range(banks)])
                self.obuf[cmd.out_idx] = numerics.mac(self.obuf[cmd.out_idx], weights,
                                                      self.gbuf[cmd.gbuf_idx])
            elif op == Opcode.RD_OUT:
                lanes = np.zeros(LANES, np.uint16)
                lanes[:banks] = numerics.f32_to_bf16(self.obuf[cmd.out_idx])
                rdata.append(numerics.lanes_to_word(lanes))
                self.obuf[cmd.out_idx] = 0
            elif op == Opcode.RD:
                rdata.append(numerics.lanes_to_word(self._row(cmd.bank, cmd.row)[cmd.col]))
            free = t
        return RunResult(trace, rdata, errors, status, free)


def gemv_stream(matrix_bf16: np.ndarray, config: ChannelConfig,
                ) -> tuple[list[Command], list[int], list[tuple[int, int]]]:
    """Command and write-data streams for y = W x on one channel.

    W (n_out, n_in) BF16 bits is written with normal WRs: matrix row ``r``
    lives in bank ``r % banks``, DRAM row ``r // banks``, one 32 B word per
    16 inputs. The input (appended later by ``gemv_input``) goes to GBuf
    entries 0.. via WR-INP. Each group of ``banks`` outputs is a row of MACs
    into OBuf entry ``group % obuf_entries`` followed by an RD-OUT.

    Returns (commands, write beats for the matrix, [(group, out_idx)])."""
    n_out, n_in = matrix_bf16.shape
    banks = config.banks
    words = n_in // LANES
    if n_in % LANES or n_out % banks:
        raise ValueError(f"GEMV {n_out}x{n_in}: n_in must be a multiple of {LANES} and "
                         f"n_out of banks={banks}")
    if words > config.cols or words > config.gbuf_entries or n_out // banks > config.rows:
        raise ValueError(f"GEMV {n_out}x{n_in} does not fit {config.describe()}")
    cmds: list[Command] = []
    beats: list[int] = []
    for r in range(n_out):
        for w in range(words):
            cmds.append(wr(r % banks, r // banks, w))
            beats.append(numerics.lanes_to_word(matrix_bf16[r, w * LANES:(w + 1) * LANES]))
    return cmds, beats, [(g, g % config.obuf_entries) for g in range(n_out // banks)]


def gemv_commands(matrix_bf16: np.ndarray, x_bf16: np.ndarray, config: ChannelConfig,
                  ) -> tuple[list[Command], list[int]]:
    """The full GEMV: matrix load, input load, MACs and RD-OUTs."""
    cmds, beats, groups = gemv_stream(matrix_bf16, config)
    words = matrix_bf16.shape[1] // LANES
    for w in range(words):
        cmds.append(wr_inp(w))
        beats.append(numerics.lanes_to_word(x_bf16[w * LANES:(w + 1) * LANES]))
    for g, out in groups:
        cmds.extend(mac(g, w, w, out) for w in range(words))
        cmds.append(rd_out(out))
    return cmds, beats


def gemv_result(rdata: Iterable[int], n_out: int, banks: int) -> np.ndarray:
    """Read beats of the RD-OUTs -> y as BF16 bits (n_out,)."""
    y = [numerics.words_to_lanes(word)[:banks] for word in rdata]
    return np.concatenate(y)[:n_out] if y else np.zeros(0, np.uint16)
