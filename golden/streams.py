"""The channel's stream interfaces (mirrors the stream ports and FIFOs of
``hw/channel.py``): commands and their encoding, the issue trace, the
sticky status, and ``Streams``, what the controller sees of the command,
write-data and read-data streams (arrival cycles, read credits) and what
comes out of them. Shared by the channel's controllers (``golden.channel``,
``golden.dcs``) and the ALU channel (``golden.alu``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.config import ChannelConfig
from golden.isa import (
    COMMAND_FIELDS,
    FIELDS,
    WORD_BITS,
    ErrorCode,
    Opcode,
    as_word,
    field_value,
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


#: Each command field's exclusive upper bound, from the encoding table.
_FIELD_LIMITS = {name: 1 << FIELDS[name].width for name in COMMAND_FIELDS}
_WORD_LIMIT = 1 << WORD_BITS


@dataclass(frozen=True)
class Command:
    """One channel command. Every field is an integer that fits its field
    of the encoding table (golden.isa.FIELDS): a negative index, a float or
    a value wider than the field cannot be built (ValueError naming the
    field), so nothing aliases a real entry. Whether a value is in range
    for a configuration is the channel's check (ChannelModel.check)."""

    opcode: int
    bank: int = 0
    row: int = 0
    col: int = 0
    gbuf_idx: int = 0
    out_idx: int = 0

    def __post_init__(self):
        for name in COMMAND_FIELDS:
            v = getattr(self, name)
            if type(v) is not int or not 0 <= v < _FIELD_LIMITS[name]:
                object.__setattr__(self, name, field_value(name, v, "command field"))

    def pack(self) -> int:
        return pack_command(**{name: getattr(self, name) for name in COMMAND_FIELDS})

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


def act_ahead(bank: int, row: int) -> Command:
    return Command(Opcode.ACT_AHEAD, bank=bank, row=row)


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

    @property
    def mode_switches(self) -> int:
        """Switches between the device's normal and register-access modes
        (docs/timing.md): 0 on a device without modes."""
        return sum(1 for t in self.trace if t.opcode == Opcode.MODE)




def cycles(name: str, values, n: int | None = None) -> list[int]:
    """A stream's cycles (arrivals, pops): non-negative integers in order,
    ``n`` of them if given (all 0, always available, when ``values`` is
    None). ValueError naming ``name`` otherwise."""
    if values is None:
        return [0] * (n or 0)
    a = np.asarray(values)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a list of integer cycles, not {a.dtype} {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name} has {a.size} cycles for {n} beats or commands")
    if a.size and (a[0] < 0 or (a.size > 1 and (np.diff(a) < 0).any())):
        raise ValueError(f"{name} must be non-negative and in order (a stream's beats "
                         f"arrive and leave in order)")
    return a.tolist()


class Streams:
    """The channel's stream interfaces as the controller sees them: command
    and write-beat arrival cycles, read credits, and what comes out."""

    def __init__(self, config: ChannelConfig, commands: list[Command], wdata: list[int],
                 cmd_arrivals, wdata_arrivals, rdata_pops):
        n = len(commands)
        self.config, self.commands = config, commands
        self.wdata = [w if type(w) is int and 0 <= w < _WORD_LIMIT  # the common case, no label
                      else as_word(w, WORD_BITS, f"write-data beat {k}")
                      for k, w in enumerate(wdata)]
        self.cmd_arrivals = cycles("cmd_arrivals", cmd_arrivals, n)
        self.wdata_arrivals = cycles("wdata_arrivals", wdata_arrivals, len(wdata))
        self.rdata_pops = None if rdata_pops is None else cycles("rdata_pops", rdata_pops)
        self.wbeat = 0
        self.read_issue: list[int] = []
        self.trace: list[TraceEntry] = []
        self.rdata: list[int] = []
        self.errors: list[tuple[int, ErrorCode]] = []
        self.status = Status()

    # ---- what a controller asks of its streams. ``now``: the controller's
    # cycle when it asks. Here every cycle is given in advance; a live run
    # (``golden.hub.fabric``) answers as the module's other blocks decide
    # them: an exact cycle, or, without ``now``, once it is decided; with
    # ``now``, a lower bound at least ``now`` while it is not yet decided.
    def more(self, i: int) -> bool:
        """Command ``i`` is in the stream or may still come."""
        return i < len(self.commands)

    def command(self, i: int) -> Command | None:
        """Command ``i`` (None: the stream has ended before it)."""
        return self.commands[i] if i < len(self.commands) else None

    def arrival(self, i: int, now: int | None = None) -> int | None:
        """The cycle command ``i`` was accepted (None: the stream has ended
        before it)."""
        return self.cmd_arrivals[i] if i < len(self.cmd_arrivals) else None

    def popped(self, i: int, cycle: int) -> None:
        """Command ``i`` leaves the command FIFO in ``cycle`` (the in-order
        controllers: at its access, or its drop; DCS: at its decode)."""

    def wdata_ready(self, now: int | None = None) -> int:
        """Cycle from which the next write beat is visible."""
        k = self.wbeat
        if k >= len(self.wdata):
            raise ValueError(f"command needs write-data beat {k} but only "
                             f"{len(self.wdata)} given")
        return self.wdata_arrivals[k] + 1

    def take_wdata(self, cycle: int | None = None) -> tuple[int, np.ndarray]:
        """Pop the next write beat (in ``cycle``, for a live run's FIFO)."""
        ready = self.wdata_ready()
        beat = numerics.words_to_lanes(self.wdata[self.wbeat])
        self.wbeat += 1
        return ready, beat

    def read_credit_ready(self, now: int | None = None) -> int:
        """Earliest cycle a new read may issue: fewer than rdata_depth beats
        issued before it may still be unpopped."""
        j = len(self.read_issue) - self.config.rdata_depth  # waits for beat j's pop
        if j < 0:
            return 0
        if self.rdata_pops is not None:
            if j >= len(self.rdata_pops):
                raise ValueError(f"read beat {j} was never popped; the run cannot complete")
            return self.rdata_pops[j] + 1
        return self.read_issue[j] + RDATA_POP_LATENCY + 1

    def record_error(self, cmd_id: int, code: ErrorCode) -> None:
        """A dropped command: listed, and the sticky status updated."""
        self.errors.append((cmd_id, code))
        st = self.status
        if st.err_code == ErrorCode.NONE:
            st.err_code, st.err_id = code, cmd_id
        st.err_count = min(st.err_count + 1, ERR_COUNT_MAX)

    def issue(self, cycle: int, beat: int | None) -> None:
        if beat is not None:
            self.read_issue.append(cycle)
            self.rdata.append(beat)

    def result(self, cycles: int) -> RunResult:
        return RunResult(self.trace, self.rdata, self.errors, self.status, cycles)

