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
    * execution-time gaps between dependent commands (PIMphony's static
      controller): the controller knows command kinds, not buffer entries,
      so it treats two commands that touch the same buffer as dependent and
      waits for the earlier one's access to complete, with the completion
      times DCS uses per entry (``golden.dcs``):

      ==========  =========================================  ================
      buffer      the last access there                      completes
      ==========  =========================================  ================
      GBuf        WR-INP (next MAC waits)                    ``c + t_wr_inp``
      OBuf        MAC (next RD-OUT waits; a MAC only tCCD)   ``c + t_mac``
      OBuf        RD-OUT (next MAC or RD-OUT waits)          ``c + t_rd_out``
      ==========  =========================================  ================

      A MAC's GBuf read completes the cycle it issues, so a WR-INP may
      follow it at once. As a MAC after a MAC waits only tCCD, a WR-INP
      after a WR-INP waits only the device (``t_ccd_reg``, its write beat);
      RD/WR, PRE and ACT wait only for the device rules.
    * a mode switch (on a device with modes) issues only in a cycle where
      the action it switches for (PRE, ACT or the access) would be allowed
      but for the mode, as the AiM simulator's controller issues TMOD; a
      refresh's switch likewise waits for its PRE or REF.
    * ping-pong: each buffer is two halves (entries below and above the
      middle), and the gaps apply per half: commands on different halves
      overlap. A MAC on other halves than the previous MAC (the hand-off)
      waits until every access in both halves has completed.
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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.banks import BankTimer
from golden.config import ChannelConfig
from golden.dcs import run_dynamic
from golden.isa import CHANNEL_OPCODES, LANES, REFRESH_ID, ErrorCode, Opcode
from golden.streams import (
    CMD_ID_MOD,
    ERR_COUNT_MAX,
    RDATA_POP_LATENCY,
    Command,
    CommandError,
    RunResult,
    Status,
    Streams,
    TraceEntry,
    act_ahead,
    mac,
    rd,
    rd_out,
    wr,
    wr_inp,
)

#: the channel's stream types and command builders, importable from here
__all__ = ["CMD_ID_MOD", "ERR_COUNT_MAX", "RDATA_POP_LATENCY", "BankTimer", "ChannelModel",
           "Command", "CommandError", "RunResult", "Status", "Streams", "TraceEntry",
           "act_ahead", "check_gemv_shape", "gemv_commands", "gemv_result", "gemv_stream",
           "issue_refresh", "mac", "rd", "rd_out", "wr", "wr_inp"]

_WRITES = (Opcode.WR_INP, Opcode.WR)
_READS = (Opcode.RD_OUT, Opcode.RD)


def issue_refresh(banks: BankTimer, streams: Streams) -> int:
    """Issue the due refresh of an in-order controller from its due cycle
    (nothing else issues while it is pending): a switch to normal mode, the
    PRE of the open rows, the REF, each at its earliest. Returns the cycle
    after the REF."""
    t = banks.refresh_due
    while True:
        kind, targets = banks.refresh_action()
        c = max(t, banks.earliest(kind, targets), banks.refresh_switch_ready())
        banks.apply(kind, targets, c, 0)
        streams.trace.append(TraceEntry(REFRESH_ID, kind, c))
        t = c + 1
        if kind == Opcode.REF:
            return t


@dataclass
class ChannelModel:
    config: ChannelConfig
    strict: bool = False  # raise CommandError instead of recording the error
    gbuf: np.ndarray = field(init=False)
    rows: dict = field(init=False)  # (bank, row) -> (cols, 16) uint16
    _obuf: np.ndarray = field(init=False, repr=False)
    #: Per OBuf entry, the MACs issued into it but not yet accumulated:
    #: (weights, inputs) as read at issue. Their products and trees are
    #: computed together (one numpy call per step for many MACs), then
    #: accumulated in issue order, before anything reads the entry: the
    #: result is the same, bit for bit, as one numerics.mac per issue.
    _pending: list = field(init=False, repr=False)

    PENDING_MAX = 4096  # MACs an entry holds before they are settled anyway

    def __post_init__(self):
        c = self.config
        self.gbuf = np.zeros((c.gbuf_entries, LANES), np.uint16)
        self._obuf = np.zeros((c.obuf_entries, c.banks), np.uint32)
        self._pending = [[] for _ in range(c.obuf_entries)]
        self.rows = {}

    @property
    def obuf(self) -> np.ndarray:
        """The OBuf, FP32 bits (entries, banks), with every issued MAC in it."""
        for out in range(len(self._pending)):
            self._settle(out)
        return self._obuf

    @obuf.setter
    def obuf(self, value: np.ndarray) -> None:
        for p in self._pending:
            p.clear()
        self._obuf = value

    def _settle(self, out: int) -> None:
        pending = self._pending[out]
        if not pending:
            return
        weights, inputs = zip(*pending, strict=True)
        pending.clear()
        trees = numerics.mac_trees(np.stack(weights), np.stack(inputs))  # (n, banks)
        acc = numerics.f32_add(self._obuf[out], trees[0])  # the entry may hold any bits
        for tree in trees[1:]:
            acc = numerics.f32_add_canonical(acc, tree)
        self._obuf[out] = acc

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
        if cmd.opcode not in CHANNEL_OPCODES and not (c.dual_path and
                                                      cmd.opcode == Opcode.ACT_AHEAD):
            return ErrorCode.BAD_OPCODE, f"opcode={cmd.opcode} is not a channel command" + (
                " (ACT_AHEAD needs dual-path banks)" if cmd.opcode == Opcode.ACT_AHEAD else "")
        op = Opcode(cmd.opcode)
        checks = {
            Opcode.WR_INP: [("gbuf_idx", c.gbuf_entries, ErrorCode.GBUF_RANGE)],
            Opcode.MAC: [("row", c.rows, ErrorCode.ROW_RANGE), ("col", c.cols, ErrorCode.COL_RANGE),
                         ("gbuf_idx", c.gbuf_entries, ErrorCode.GBUF_RANGE),
                         ("out_idx", c.obuf_entries, ErrorCode.OBUF_RANGE)],
            Opcode.RD_OUT: [("out_idx", c.obuf_entries, ErrorCode.OBUF_RANGE)],
            Opcode.ACT_AHEAD: [("bank", c.banks, ErrorCode.BANK_RANGE),
                               ("row", c.rows, ErrorCode.ROW_RANGE)],
        }.get(op, [("bank", c.banks, ErrorCode.BANK_RANGE), ("row", c.rows, ErrorCode.ROW_RANGE),
                   ("col", c.cols, ErrorCode.COL_RANGE)])
        for name, limit, code in checks:
            value = getattr(cmd, name)
            if value >= limit:
                return code, f"{op.name}: {name}={value} out of range (< {limit})"
        return ErrorCode.NONE, ""

    # ---- data effects, shared by every policy ---------------------------
    def _execute(self, cmd: Command, beat: np.ndarray | None) -> int | None:
        """Apply ``cmd`` at its issue; return its read beat, if any."""
        op = Opcode(cmd.opcode)
        if op == Opcode.WR_INP:
            self.gbuf[cmd.gbuf_idx] = beat
        elif op == Opcode.WR:
            self._row(cmd.bank, cmd.row)[cmd.col] = beat
        elif op == Opcode.MAC:  # numerics.mac, settled later (_settle)
            banks = self.config.banks
            weights = np.stack([self._row(b, cmd.row)[cmd.col] for b in range(banks)])
            pending = self._pending[cmd.out_idx]
            pending.append((weights, self.gbuf[cmd.gbuf_idx].copy()))
            if len(pending) >= self.PENDING_MAX:
                self._settle(cmd.out_idx)
        elif op == Opcode.RD_OUT:
            lanes = np.zeros(LANES, np.uint16)
            self._settle(cmd.out_idx)
            lanes[:self.config.banks] = numerics.f32_to_bf16(self._obuf[cmd.out_idx])
            self._obuf[cmd.out_idx] = 0
            return numerics.lanes_to_word(lanes)
        elif op == Opcode.RD:
            return numerics.lanes_to_word(self._row(cmd.bank, cmd.row)[cmd.col])
        return None

    # ---- the controller ------------------------------------------------
    def run(self, commands: Sequence[Command | int], wdata: Sequence[int] = (),
            cmd_arrivals: Sequence[int] | None = None,
            wdata_arrivals: Sequence[int] | None = None,
            rdata_pops: Sequence[int] | None = None) -> RunResult:
        """Run a command stream from reset under ``config.policy``.

        ``cmd_arrivals[i]`` / ``wdata_arrivals[k]`` are the cycles the RTL
        accepted command i / write beat k (default: all at cycle 0, i.e.
        always available). ``rdata_pops[j]`` is the cycle read beat j was
        popped (default: as soon as possible)."""
        cmds = [c if isinstance(c, Command) else Command.unpack(c) for c in commands]
        return self.run_streams(Streams(self.config, cmds, list(wdata), cmd_arrivals,
                                        wdata_arrivals, rdata_pops))

    def run_streams(self, streams: Streams) -> RunResult:
        """Run the controller on ``streams`` (``run``; a live run's streams,
        ``golden.hub.fabric``, answer as the module runs)."""
        if self.config.policy in ("static", "pingpong"):
            return self._run_in_order(streams)

        return run_dynamic(self, streams)

    def _record_error(self, streams: Streams, cmd_id: int, code: ErrorCode,
                      message: str) -> None:
        """A rejected command: raise in strict mode, else record it (sticky)."""
        if self.strict:
            raise CommandError(code, message)
        streams.record_error(cmd_id, code)

    def _drop(self, streams: Streams, cmd_id: int, cmd: Command, code: ErrorCode,
              message: str, t: int) -> int:
        """Static policy: drop a rejected command (after its write beat, if
        it has one); return the cycle it is dropped in."""
        self._record_error(streams, cmd_id, code, message)
        if cmd.opcode in _WRITES:
            t = max(t, streams.wdata_ready())
            streams.take_wdata(t)
        return t

    def _halves(self, cmd: Command) -> tuple[int, int]:
        """(GBuf half, OBuf half) of a command: its entries' halves under
        ping-pong, (0, 0) under static (one region, the whole buffer)."""
        cfg = self.config
        if cfg.policy == "static":
            return 0, 0
        return int(cmd.gbuf_idx >= cfg.gbuf_entries // 2), int(cmd.out_idx >= cfg.obuf_entries // 2)

    @staticmethod
    def _in_order_wait(op, g, o, gbuf_write, obuf_mac, obuf_read, mac_halves, streams) -> int:
        """The cycle the in-order controllers' access rules (and its write
        beat, its read credit) allow the access of ``op``."""
        earliest = 0
        if op == Opcode.MAC:
            earliest = max(gbuf_write[g], obuf_read[o])
            if mac_halves is not None and (g, o) != mac_halves:  # hand-off: both idle
                earliest = max(earliest, *gbuf_write, *obuf_mac, *obuf_read)
        elif op == Opcode.RD_OUT:
            earliest = max(obuf_mac[o], obuf_read[o])
        if op in _WRITES:
            earliest = max(earliest, streams.wdata_ready())
        if op in _READS:
            earliest = max(earliest, streams.read_credit_ready())
        return earliest

    def _run_in_order(self, streams: Streams) -> RunResult:
        """The static and ping-pong policies: strictly in order, each
        command's column action waiting for the accesses it depends on (the
        module docstring's table, per buffer half under ping-pong), and the
        device rules; ping-pong hands the MAC over to other halves only when
        both halves are idle."""
        tm = self.config.timing
        banks = BankTimer(self.config.banks, tm, self.config.slice_rows,
                          bank_groups=self.config.bank_groups)
        gbuf_write = [0, 0]  # per GBuf half: the last WR-INP completes here
        obuf_mac = [0, 0]  # per OBuf half: the last MAC's update completes here
        obuf_read = [0, 0]  # per OBuf half: the last RD-OUT completes here
        mac_halves: tuple[int, int] | None = None
        free = 0  # first cycle the controller can work on the next command
        i = -1
        while (cmd := streams.command(i := i + 1)) is not None:
            cmd_id = i % CMD_ID_MOD
            t = max(streams.arrival(i) + 1, free)
            code, message = self.check(cmd)
            if code != ErrorCode.NONE:
                free = self._drop(streams, cmd_id, cmd, code, message, t)
                streams.popped(i, free)
                free += 1
                continue
            op = Opcode(cmd.opcode)
            g, o = self._halves(cmd)
            while True:  # the actions, then the access; a due refresh goes first
                action = banks.next_action(op, cmd)
                if action is not None:
                    kind, targets = action
                    c = max(t, banks.earliest(kind, targets))
                    if kind == Opcode.MODE:  # when what it switches for could issue
                        served = banks.served_action(op, cmd)
                        if served:
                            c = max(c, banks.earliest(*served))
                        elif op != Opcode.ACT_AHEAD:  # (on its open row it has no access)
                            c = max(c, banks.earliest(op, banks.touched(op, cmd)),
                                    self._in_order_wait(op, g, o, gbuf_write, obuf_mac,
                                                        obuf_read, mac_halves, streams))
                elif op == Opcode.ACT_AHEAD:  # the row is open: it ends in cycle t, untraced
                    c = t
                else:
                    kind, targets = op, banks.touched(op, cmd)
                    c = max(t, banks.earliest(op, targets), self._in_order_wait(
                        op, g, o, gbuf_write, obuf_mac, obuf_read, mac_halves, streams))
                if banks.refresh_pending(c):
                    t = max(t, issue_refresh(banks, streams))
                    continue
                if action is None:
                    break
                banks.apply(kind, targets, c, cmd.row)
                streams.trace.append(TraceEntry(cmd_id, kind, c))
                t = c + 1
            if op == Opcode.ACT_AHEAD:
                streams.popped(i, c)
                free = t + 1
                continue
            if op == Opcode.MAC:
                mac_halves = (g, o)
            streams.popped(i, c)
            beat = streams.take_wdata(c)[1] if op in _WRITES else None
            banks.apply(op, banks.touched(op, cmd), c, cmd.row)
            streams.trace.append(TraceEntry(cmd_id, op, c))
            if op == Opcode.WR_INP:
                gbuf_write[g] = c + tm.t_wr_inp
            elif op == Opcode.MAC:
                obuf_mac[o] = c + tm.t_mac
            elif op == Opcode.RD_OUT:
                obuf_read[o] = c + tm.t_rd_out
            streams.issue(c, self._execute(cmd, beat))
            free = c + 1
        return streams.result(free)


def check_gemv_shape(n_out: int, n_in: int, config: ChannelConfig) -> None:
    """Raise ValueError naming the shape unless a GEMV of ``n_out`` x
    ``n_in`` fits one channel of ``config`` (checked before anything is
    allocated)."""
    banks = config.banks
    for name, v in (("n_out", n_out), ("n_in", n_in)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"GEMV {name} must be a positive integer, not {v!r}")
    if n_in % LANES or n_out % banks:
        raise ValueError(f"GEMV {n_out}x{n_in}: n_in must be a multiple of {LANES} and "
                         f"n_out of banks={banks}")
    words = n_in // LANES
    if words > config.cols or words > config.gbuf_entries or n_out // banks > config.rows:
        raise ValueError(f"GEMV {n_out}x{n_in} does not fit {config.describe()}")


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
    check_gemv_shape(n_out, n_in, config)
    banks = config.banks
    words = n_in // LANES
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
