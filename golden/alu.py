"""JIT-Q: a SIMD PIM ALU channel and MX quantization kernels on it
(DESIGN.md §2.6, REFERENCE.md). The quantizer the kernels must equal bit for
bit is ``golden/mx.py``.

The ALU channel
    ``pairs`` ALUs, ALU ``a`` shared by banks ``2a`` (bank select 0) and
    ``2a + 1`` (bank select 1). Every command is broadcast to every ALU: a
    LD with bank select 0 reads the same (row, col) of every even bank, each
    into its own ALU. An ALU has 16 registers of 16 lanes x 16 bits and a
    16-bit shift counter per lane. Commands use ``golden.isa``'s ALU
    format (``pack_alu``): opcode, ``alu_fn``, ``dst_reg``, ``src_reg``
    (operand A), ``src2_reg`` or ``imm`` (operand B, ``use_imm``), and for
    LD/ST ``bank`` (0 or 1), ``row``, ``col``.

    ============  =========  ===================================================
    opcode        alu_fn     effect (per lane unless stated; unsigned 16 bits)
    ============  =========  ===================================================
    ALU_MOV       LD         dst <- word (row, col) of the selected bank
    ALU_MOV       ST         word (row, col) of the selected bank <- A
    ALU_MOV       COPY/IMM   dst <- A / dst <- imm
    ALU_MOV       SETCNT     shift counters <- A;   GETCNT: dst <- counters
    ALU_ADD       ADD/SUB    dst <- A + B / A - B (mod 2^16)
    ALU_MUL       MULLO      dst <- low 16 bits of A x B
    ALU_CMP       LT/EQ/NE/GT dst <- 0xFFFF where A op B holds, else 0
    ALU_MAX       MAX/MIN    dst <- max / min (A, B)
    ALU_LOGIC     AND/OR/XOR/ANDN  dst <- A & B, A | B, A ^ B, A & ~B
    ALU_BITSHIFT  SHR/SHL    dst <- A >> imm / A << imm (every lane, logical)
    ALU_BITSHIFT  SHR1_MASK  dst <- A >> 1 where B != 0, else A
    ALU_BITSHIFT  SHR1_COUNT dst <- A >> 1 where counter > 0 (and the counter
                             decrements), else A: the counter-based
                             conditional shift
    ALU_LANESHIFT ROT        dst[i] <- A[(i + imm) mod 16] (cross-lane)
    RD            (none)     host read of word (row, col) of physical bank
                             ``bank``: one beat on the read-data stream
    WR            (none)     host write of one write-data beat to that word
    ============  =========  ===================================================

Timing (controller cycles, one action per cycle, strictly in order)
    The streams behave as the channel's (``golden.channel``): a command or
    write beat accepted in cycle ``a`` is visible from ``a + 1``; a WR waits
    for its beat; a RD needs a read credit. Every command is a column
    command: it issues ``>= the previous column command + tCCD``. LD and ST
    need their row open in every bank of the selected parity (all even or
    all odd banks), opened like the channel's all-bank MAC: if any of them
    is off the row, PRE every open one (``>= t_act + tRAS``), then ACT the
    closed ones (``>= t_pre + tRP``); RD and WR open their one bank. The
    access waits ``tRCD`` after the ACT. PRE and ACT take a bus cycle each.
    Bad commands (an opcode or function the ALU channel lacks, bank select
    > 1 for LD/ST or a bank past the channel for RD/WR, row or column out of
    range) are dropped without side effect (a bad WR still consumes its
    beat), with the channel's sticky status; strict mode raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from golden import numerics
from golden.channel import (
    CMD_ID_MOD,
    BankTimer,
    CommandError,
    RunResult,
    Streams,
    TraceEntry,
    issue_refresh,
)
from golden.config import ChannelConfig, ConfigError, Timing, check_int, load_profile
from golden.isa import (
    ALU_FUNCTIONS,
    ALU_REGS,
    FIELDS,
    LANES,
    AluAdd,
    AluCmp,
    AluLane,
    AluLogic,
    AluMax,
    AluMov,
    AluMul,
    AluShift,
    ErrorCode,
    Opcode,
    pack_alu,
    unpack_alu,
)
from golden.mx import BLOCK, SOURCES, MxFormat

MASK16 = 0xFFFF


@dataclass(frozen=True)
class AluConfig:
    pairs: int = 2  # ALUs per channel
    rows: int = 64
    cols: int = 32
    timing: Timing = field(default_factory=lambda: load_profile("hbm-jitq").timing)
    profile: str = "hbm-jitq"
    #: Bank groups (the constraint table's ``bankgroup`` level); the banks
    #: split evenly, bank ``b`` in group ``b // (banks / bank_groups)``.
    bank_groups: int = 1
    cmd_depth: int = 4  # command FIFO entries (RTL)
    wdata_depth: int = 4  # write-data FIFO entries (RTL)
    rdata_depth: int = 4  # read-data credits

    def __post_init__(self):
        banks_max = 1 << FIELDS["bank"].width
        for name, lo, hi in (("pairs", 1, banks_max // 2), ("rows", 2, 1 << FIELDS["row"].width),
                             ("cols", 1, 1 << FIELDS["col"].width), ("cmd_depth", 1, 1024),
                             ("wdata_depth", 1, 1024), ("rdata_depth", 1, 1024),
                             ("bank_groups", 1, banks_max)):
            check_int(name, getattr(self, name), lo, hi)
        if not isinstance(self.timing, Timing):
            raise ConfigError(f"timing must be a Timing, not {self.timing!r}")
        if self.timing.t_ccd < 2:
            raise ValueError("t_ccd must be >= 2: a LD's register write lands the cycle "
                             "after its issue, before the next column command")
        if self.timing.t_modch:
            raise ValueError("the ALU channel has no mode switching (t_modch must be 0)")
        if self.banks % self.bank_groups:
            raise ValueError(f"bank_groups={self.bank_groups} does not divide {self.banks} banks")
        # the channel's checks of the timing (ranges, refresh interval)
        ChannelConfig(banks=self.banks, rows=self.rows, cols=self.cols, timing=self.timing)

    @property
    def banks(self) -> int:
        return 2 * self.pairs

    @classmethod
    def from_profile(cls, profile: str = "hbm-jitq", pairs: int | None = None,
                     rows: int | None = None) -> AluConfig:
        ch: ChannelConfig = load_profile(profile)
        pairs = pairs or ch.banks // 2
        # a channel with fewer banks than the profile keeps the groups its
        # banks divide into
        return cls(pairs=pairs, rows=rows or ch.rows, cols=ch.cols, timing=ch.timing,
                   profile=profile, bank_groups=math.gcd(ch.bank_groups, 2 * pairs))


class AluError(CommandError):
    """A command the ALU channel rejects (strict mode)."""


@lru_cache(maxsize=4096, typed=True)
def _decode(word: int) -> dict:
    return unpack_alu(word)


def _encode(opcode, fn, dst, src, src2, use_imm, imm, bank, row, col) -> int:
    return pack_alu(opcode=opcode, alu_fn=fn, dst_reg=dst, src_reg=src, src2_reg=src2,
                    use_imm=use_imm, imm=imm, bank=bank, row=row, col=col)


_encode_cached = lru_cache(maxsize=65536, typed=True)(_encode)  # typed: 1.0 is not 1


def alu(opcode: Opcode, fn, *, dst_reg=0, src_reg=0, src2_reg=0, use_imm=0, imm=0, bank=0,
        row=0, col=0) -> int:
    """One ALU command word (``golden.isa.pack_alu``; a field that is not
    an integer of its width raises EncodingError naming it)."""
    args = (opcode, fn, dst_reg, src_reg, src2_reg, use_imm, imm, bank, row, col)
    try:
        return _encode_cached(*args)
    except TypeError:  # an unhashable value: pack_alu names the field
        return _encode(*args)


def host_rd(bank: int, row: int, col: int) -> int:
    return pack_alu(opcode=int(Opcode.RD), bank=bank, row=row, col=col)


def host_wr(bank: int, row: int, col: int) -> int:
    return pack_alu(opcode=int(Opcode.WR), bank=bank, row=row, col=col)


_ALU_MOV, _LD_ST = int(Opcode.ALU_MOV), (int(AluMov.LD), int(AluMov.ST))
_RD, _WR = int(Opcode.RD), int(Opcode.WR)


class _AluBanks(BankTimer):
    """LD/ST touch the same (row, col) of every bank of one parity and open
    it like the channel's MAC opens all banks; RD/WR touch one bank."""

    def __init__(self, cfg: AluConfig):
        super().__init__(cfg.banks, cfg.timing, ccd_every_column=True,
                         bank_groups=cfg.bank_groups)
        self.parity = [list(range(s, cfg.banks, 2)) for s in (0, 1)]

    def touched(self, op, c) -> list[int]:
        if op == _ALU_MOV and c["alu_fn"] in _LD_ST:
            return self.parity[c["bank"]]
        if op in (_RD, _WR):
            return [c["bank"]]
        return []

    def next_action(self, op, c):
        return self.action_for(self.touched(op, c), c["row"], as_set=op == _ALU_MOV)


def check_command(cfg: AluConfig, c: dict) -> ErrorCode:
    """Error code of a decoded command on ``cfg`` (NONE: good), in this
    priority: opcode/function, bank, row, column."""
    op = c["opcode"]
    if op in (_RD, _WR):
        if c["bank"] >= cfg.banks:
            return ErrorCode.BANK_RANGE
    elif op not in ALU_FUNCTIONS or c["alu_fn"] not in set(ALU_FUNCTIONS[Opcode(op)]):
        return ErrorCode.BAD_OPCODE
    elif not (op == _ALU_MOV and c["alu_fn"] in _LD_ST):
        return ErrorCode.NONE
    elif c["bank"] > 1:
        return ErrorCode.BANK_RANGE
    if c["row"] >= cfg.rows:
        return ErrorCode.ROW_RANGE
    if c["col"] >= cfg.cols:
        return ErrorCode.COL_RANGE
    return ErrorCode.NONE


class AluChannel:
    """Cycle-exact model of the ALU channel (module docstring)."""

    def __init__(self, cfg: AluConfig, strict: bool = False):
        self.cfg, self.strict = cfg, strict
        self.banks = np.zeros((cfg.banks, cfg.rows, cfg.cols, LANES), np.uint16)
        self.regs = np.zeros((cfg.pairs, ALU_REGS, LANES), np.uint16)
        self.counters = np.zeros((cfg.pairs, LANES), np.uint16)

    def bank_view(self, select: int) -> np.ndarray:
        """(pairs, rows, cols, lanes) view of every even (0) or odd (1) bank."""
        return self.banks[select::2]

    def check(self, c: dict) -> ErrorCode:
        """Error code of a decoded command (:func:`check_command`)."""
        return check_command(self.cfg, c)

    def run(self, words: Sequence[int], wdata: Sequence[int] = (),
            cmd_arrivals: Sequence[int] | None = None,
            wdata_arrivals: Sequence[int] | None = None,
            rdata_pops: Sequence[int] | None = None, execute: bool = True) -> RunResult:
        """Issue ``words`` (with write beats ``wdata`` for the WRs) under the
        channel's stream rules (``golden.channel``: a command or beat
        accepted in cycle a is visible from a + 1; reads need a credit).
        ``execute=False`` computes the timing only (it does not depend on
        data)."""
        streams = Streams(self.cfg, list(words), list(wdata), cmd_arrivals, wdata_arrivals,
                          rdata_pops)
        timer = _AluBanks(self.cfg)
        checked: dict[int, ErrorCode] = {}
        free = 0
        for i, word in enumerate(words):
            cmd_id = i % CMD_ID_MOD
            t = max(streams.cmd_arrivals[i] + 1, free)
            c = _decode(word)
            code = checked.get(word)
            if code is None:
                code = checked[word] = self.check(c)
            op = c["opcode"]
            if code is not ErrorCode.NONE:
                if self.strict:
                    raise AluError(code, f"command {i}: {code.name} ({c})")
                streams.record_error(cmd_id, code)
                if op == _WR:  # the beat is consumed, the streams stay aligned
                    t = max(t, streams.take_wdata()[0])
                free = t + 1
                continue
            touched = timer.touched(op, c)
            # the column access: WR and ST write the banks, the rest read
            col = "WR" if op == _WR or (op == _ALU_MOV and c["alu_fn"] == AluMov.ST) else "RD"
            while True:  # the actions, then the access; a due refresh goes first
                action = timer.next_action(op, c)
                if action is not None:
                    kind, targets = action
                    at = max(t, timer.earliest(kind, targets))
                else:
                    at = max(t, timer.earliest(col, touched))
                    if op == _WR:
                        at = max(at, streams.wdata_ready())
                    if op == _RD:
                        at = max(at, streams.read_credit_ready())
                if timer.refresh_pending(at):
                    t = max(t, issue_refresh(timer, streams))
                    continue
                if action is None:
                    break
                timer.apply(kind, targets, at, c["row"])
                streams.trace.append(TraceEntry(cmd_id, kind, at))
                t = at + 1
            beat = streams.take_wdata()[1] if op == _WR else None
            timer.apply(col, touched, at, c["row"])
            streams.trace.append(TraceEntry(cmd_id, Opcode(op), at))
            out = None
            if op == _RD:
                out = numerics.lanes_to_word(self.banks[c["bank"], c["row"], c["col"]])
            elif execute:
                if op == _WR:
                    self.banks[c["bank"], c["row"], c["col"]] = beat
                else:
                    self._execute(Opcode(op), c["alu_fn"], c)
            streams.issue(at, out)
            free = at + 1
        return streams.result(free)

    def _execute(self, op: Opcode, fn: int, c: dict) -> None:
        regs, cnt = self.regs, self.counters
        a = regs[:, c["src_reg"]].astype(np.int64)
        b = (np.full_like(a, c["imm"]) if c["use_imm"]
             else regs[:, c["src2_reg"]].astype(np.int64))
        imm = c["imm"]
        out = None
        if op is Opcode.ALU_MOV:
            if fn == AluMov.LD:
                out = self.bank_view(c["bank"])[:, c["row"], c["col"]].astype(np.int64)
            elif fn == AluMov.ST:
                self.bank_view(c["bank"])[:, c["row"], c["col"]] = a.astype(np.uint16)
            elif fn == AluMov.COPY:
                out = a
            elif fn == AluMov.IMM:
                out = np.full_like(a, imm)
            elif fn == AluMov.SETCNT:
                cnt[:] = a.astype(np.uint16)
            elif fn == AluMov.GETCNT:
                out = cnt.astype(np.int64)
        elif op is Opcode.ALU_ADD:
            out = a + b if fn == AluAdd.ADD else a - b
        elif op is Opcode.ALU_MUL:
            assert fn == AluMul.MULLO
            out = a * b
        elif op is Opcode.ALU_CMP:
            hit = {AluCmp.LT: a < b, AluCmp.EQ: a == b, AluCmp.NE: a != b,
                   AluCmp.GT: a > b}[AluCmp(fn)]
            out = np.where(hit, MASK16, 0)
        elif op is Opcode.ALU_MAX:
            out = np.maximum(a, b) if fn == AluMax.MAX else np.minimum(a, b)
        elif op is Opcode.ALU_LOGIC:
            out = {AluLogic.AND: a & b, AluLogic.OR: a | b, AluLogic.XOR: a ^ b,
                   AluLogic.ANDN: a & ~b}[AluLogic(fn)]
        elif op is Opcode.ALU_BITSHIFT:
            if fn == AluShift.SHR:
                out = a >> min(imm, 16)
            elif fn == AluShift.SHL:
                out = a << min(imm, 16)
            elif fn == AluShift.SHR1_MASK:
                out = np.where(b != 0, a >> 1, a)
            else:
                live = cnt > 0
                out = np.where(live, a >> 1, a)
                cnt[:] = np.where(live, cnt - 1, cnt).astype(np.uint16)
        elif op is Opcode.ALU_LANESHIFT:
            assert fn == AluLane.ROT
            out = np.roll(a, -(imm % LANES), axis=1)
        if out is not None:
            regs[:, c["dst_reg"]] = (out & MASK16).astype(np.uint16)


# ---- kernels -------------------------------------------------------------------

PLACEMENTS = ("tiled", "strided", "strided-counter")
DIRECTIONS = ("row", "col")
TILE = BLOCK  # 16 x 16 tiles


class Asm:
    """Builds a command list; registers are named, allocated on first use."""

    def __init__(self):
        self.words: list[int] = []
        self.names: dict[str, int] = {}

    def r(self, name: str) -> int:
        if name not in self.names:
            if len(self.names) == ALU_REGS:
                raise RuntimeError(f"out of registers at {name!r}: {sorted(self.names)}")
            self.names[name] = len(self.names)
        return self.names[name]

    def emit(self, op, fn, dst=None, a=None, b=None, imm=None, bank=0, row=0, col=0):
        self.words.append(alu(
            op, fn, dst_reg=0 if dst is None else self.r(dst),
            src_reg=0 if a is None else self.r(a),
            src2_reg=self.r(b) if b is not None and imm is None else 0,
            use_imm=int(imm is not None), imm=0 if imm is None else imm & MASK16,
            bank=bank, row=row, col=col))

    # shorthands: dst <- a (op) b|imm
    def ld(self, dst, bank, row, col):
        self.emit(Opcode.ALU_MOV, AluMov.LD, dst=dst, bank=bank, row=row, col=col)

    def st(self, src, bank, row, col):
        self.emit(Opcode.ALU_MOV, AluMov.ST, a=src, bank=bank, row=row, col=col)

    def imm(self, dst, value):
        self.emit(Opcode.ALU_MOV, AluMov.IMM, dst=dst, imm=value)

    def op(self, opcode, fn, dst, a, b=None, imm=None):
        self.emit(opcode, fn, dst=dst, a=a, b=b, imm=imm)


@dataclass(frozen=True)
class KernelLayout:
    """Where a bank's tiles, codes and metadata live (word addresses from
    row 0; ``cols`` words per row). Inputs: ``tiles`` 16 x 16 BF16 tiles.
    ``tiled``: tile t row r is word ``16 t + r`` (lanes = columns).
    ``strided``: tile ``16 g + l`` element (r, c) is lane l of word
    ``256 g + 16 r + c`` (a last, partial group leaves lanes unused: the
    kernel costs the same per group). FP32 inputs are two planes: the high halves
    (sign, exponent, 7 fraction bits: a BF16 pattern) at those offsets, the
    low 16 fraction bits at the same offsets from ``lo_base``. Codes go to
    the same offsets from ``out_base``;
    metadata (``Es << 8 | micro``) to ``meta_base``: strided, one word per
    group and block (lane = tile); tiled, one word per tile and block
    (every lane the same). The last row holds the tiled kernel's constants."""

    placement: str
    tiles: int
    cols: int
    rows: int
    source: str = "bf16"  # fp32: the low halves in a second plane from lo_base

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, not {self.placement!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {list(SOURCES)}, not {self.source!r}")
        if self.tiles < 1:
            raise ValueError(f"tiles must be >= 1, not {self.tiles}")
        if self.end_word > (self.rows - 1) * self.cols:
            raise ValueError(f"{self.tiles} tiles do not fit {self.rows} rows")

    @property
    def end_word(self) -> int:
        """One past the last word the layout uses below its constants row."""
        return self.lo_base + self.in_words if self.source == "fp32" else \
            self.meta_base + self.meta_words

    @property
    def lo_base(self) -> int:
        """FP32 only: the low 16 bits of element at offset w are at lo_base + w."""
        return -(-(self.meta_base + self.meta_words) // self.cols) * self.cols

    @property
    def groups(self) -> int:
        """Strided: groups of 16 tiles across the lanes (the last may be partial)."""
        return -(-self.tiles // LANES)

    @property
    def in_words(self) -> int:
        return self.tiles * TILE if self.placement == "tiled" else self.groups * TILE * TILE

    @property
    def out_base(self) -> int:
        return -(-self.in_words // self.cols) * self.cols

    @property
    def meta_base(self) -> int:
        return self.out_base * 2

    @property
    def meta_words(self) -> int:
        return self.tiles * TILE if self.placement == "tiled" else self.groups * TILE

    @property
    def const_row(self) -> int:
        return self.rows - 1

    def addr(self, word: int) -> tuple[int, int]:
        return divmod(word, self.cols)

    def tile_row(self, flat_bank: np.ndarray, base: int, t: int, r: int) -> np.ndarray:
        """View of row ``r`` of tile ``t`` (16 elements) in a bank's words
        ``flat_bank`` (words, 16 lanes), from word offset ``base``."""
        if self.placement == "tiled":
            return flat_bank[base + 16 * t + r]
        g, lane = divmod(t, LANES)
        w = base + 256 * g + 16 * r
        return flat_bank[w:w + 16, lane]

    def blocks(self, direction: str) -> list[tuple[list[int], int, bool]]:
        """(16 input word offsets, metadata word, lane-wise?) per block group:
        lane-wise groups hold one block per lane; cross-lane ones a block
        in one word (then the 16 offsets are that word repeated)."""
        out = []
        if self.placement == "tiled":
            for t in range(self.tiles):
                for i in range(TILE):
                    if direction == "row":  # a tile row: one word, across lanes
                        out.append(([16 * t + i], 16 * t + i, False))
                if direction == "col":  # all 16 columns at once, down the words
                    out.append(([16 * t + r for r in range(TILE)], 16 * t, True))
        else:
            for g in range(self.groups):
                for i in range(TILE):
                    if direction == "row":  # row i of every tile of the group
                        words = [256 * g + 16 * i + c for c in range(TILE)]
                    else:  # column i
                        words = [256 * g + 16 * r + i for r in range(TILE)]
                    out.append((words, g * TILE + i, True))
        return out


CONST_EVEN = 0  # constants row: word 0 = 0xFFFF in even lanes
CONST_WEIGHTS = 1  # word 1 = 1 << (lane // 2)


def constants_row(cols: int) -> np.ndarray:
    row = np.zeros((cols, LANES), np.uint16)
    row[CONST_EVEN] = [MASK16 if i % 2 == 0 else 0 for i in range(LANES)]
    row[CONST_WEIGHTS] = [1 << (i // 2) for i in range(LANES)]
    return row


def _exponent(asm: Asm, dst: str, x: str) -> None:
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR, dst, x, imm=7)
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, dst, dst, imm=0xFF)


def _element(asm: Asm, fmt: MxFormat, counter: bool, x: str, e: str, u1: str, q: str,
             lo: str | None = None) -> None:
    """Code of element(s) ``x`` (exponent ``e``, micro bit ``u1`` as 0/1)
    into ``q``. Registers ES and SPECIAL hold the shared exponent and the
    NaN-block mask. FP32: ``x`` is the high half and ``lo`` the low 16
    fraction bits, which only feed the sticky bit (an FP32 shift is 16 more
    than the BF16 one, so guard and integer bits all lie in the high half)."""
    m = fmt.m
    # variable shift v = Es - u - E beyond the fixed 8 - m, clamped at m + 1
    # (everything rounds to 0 from there); zero/subnormal inputs: v = m + 1
    asm.op(Opcode.ALU_ADD, AluAdd.SUB, "v", "ES", e)
    asm.op(Opcode.ALU_ADD, AluAdd.SUB, "v", "v", u1)
    asm.op(Opcode.ALU_MAX, AluMax.MIN, "v", "v", imm=m + 1)
    asm.op(Opcode.ALU_CMP, AluCmp.EQ, "t", e, imm=0)
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "t", "t", imm=m + 1)
    asm.op(Opcode.ALU_MAX, AluMax.MAX, "v", "v", "t")
    # magnitude 1.frac << 8, pre-shifted right by 8 - m: (0x80 | frac) << m
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, q, x, imm=0x7F)
    asm.op(Opcode.ALU_LOGIC, AluLogic.OR, q, q, imm=0x80)
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHL, q, q, imm=m)
    if counter:
        asm.emit(Opcode.ALU_MOV, AluMov.SETCNT, a="v")
        for _ in range(m + 1):
            asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR1_COUNT, q, q)
    else:  # CMP, bitSHIFT, ADD per bit
        for _ in range(m + 1):
            asm.op(Opcode.ALU_CMP, AluCmp.GT, "t", "v", imm=0)
            asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR1_MASK, q, q, "t")
            asm.op(Opcode.ALU_ADD, AluAdd.ADD, "v", "v", "t")  # 0xFFFF = -1
    # round to nearest even: integer part q >> 8, guard bit 7, sticky bits 6..0
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR, "g", q, imm=7)
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "g", "g", imm=1)
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "t", q, imm=0x7F)
    if lo is not None:
        asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "t", "t", lo)
    asm.op(Opcode.ALU_CMP, AluCmp.NE, "t", "t", imm=0)
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR, q, q, imm=8)
    asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "t", "t", q)  # sticky | lsb (bit 0)
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "g", "g", "t")
    asm.op(Opcode.ALU_ADD, AluAdd.ADD, q, q, "g")
    asm.op(Opcode.ALU_MAX, AluMax.MIN, q, q, imm=fmt.max_code)  # saturate, no carry
    # sign above the magnitude; a NaN block's codes are 0
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHR, "t", x, imm=15)
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHL, "t", "t", imm=m)
    asm.op(Opcode.ALU_LOGIC, AluLogic.OR, q, q, "t")
    asm.op(Opcode.ALU_LOGIC, AluLogic.ANDN, q, q, "SPECIAL")


def _low_half(asm: Asm, bank: int, lay: KernelLayout, word: int) -> str | None:
    """FP32: load the low 16 bits of the elements at ``word``; their register."""
    if lay.source != "fp32":
        return None
    asm.ld("lo", bank, *lay.addr(lay.lo_base + word))
    return "lo"


def _special(asm: Asm) -> None:
    asm.op(Opcode.ALU_CMP, AluCmp.EQ, "SPECIAL", "ES", imm=0xFF)


def _meta(asm: Asm, bank: int, lay: KernelLayout, word: int) -> None:
    asm.op(Opcode.ALU_LOGIC, AluLogic.ANDN, "MICRO", "MICRO", "SPECIAL")
    asm.op(Opcode.ALU_BITSHIFT, AluShift.SHL, "t", "ES", imm=8)
    asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "t", "t", "MICRO")
    asm.st("t", bank, *lay.addr(lay.meta_base + word))


def _lane_wise(asm: Asm, fmt: MxFormat, counter: bool, bank: int, lay: KernelLayout,
               words: list[int], meta: int) -> None:
    """16 blocks, one per lane, block element k in word ``words[k]``."""
    asm.imm("ES", 0)
    for w in words:  # pass 1: shared exponents
        asm.ld("x", bank, *lay.addr(w))
        _exponent(asm, "e", "x")
        asm.op(Opcode.ALU_MAX, AluMax.MAX, "ES", "ES", "e")
    _special(asm)
    asm.imm("MICRO", 0)
    for p in range(TILE // 2):  # pass 2: pairs
        asm.ld("x", bank, *lay.addr(words[2 * p]))
        asm.ld("y", bank, *lay.addr(words[2 * p + 1]))
        _exponent(asm, "e", "x")
        _exponent(asm, "f", "y")
        asm.op(Opcode.ALU_MAX, AluMax.MAX, "u", "e", "f")
        asm.op(Opcode.ALU_CMP, AluCmp.LT, "u", "u", "ES")
        asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "t", "u", imm=1 << p)
        asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "MICRO", "MICRO", "t")
        asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "u", "u", imm=1)
        for x, e, k in (("x", "e", 2 * p), ("y", "f", 2 * p + 1)):
            _element(asm, fmt, counter, x, e, "u", "q", _low_half(asm, bank, lay, words[k]))
            asm.st("q", bank, *lay.addr(lay.out_base + words[k]))
    _meta(asm, bank, lay, meta)


def _cross_lane(asm: Asm, fmt: MxFormat, counter: bool, bank: int, lay: KernelLayout,
                word: int, meta: int) -> None:
    """One block in one word (lane = element)."""
    asm.ld("x", bank, *lay.addr(word))
    _exponent(asm, "e", "x")
    asm.op(Opcode.ALU_MOV, AluMov.COPY, "ES", "e")
    for k in (8, 4, 2, 1):  # butterfly: every lane ends with the maximum
        asm.op(Opcode.ALU_LANESHIFT, AluLane.ROT, "t", "ES", imm=k)
        asm.op(Opcode.ALU_MAX, AluMax.MAX, "ES", "ES", "t")
    _special(asm)
    # pair maximum on even lanes, copied to the odd lane of the pair
    asm.op(Opcode.ALU_LANESHIFT, AluLane.ROT, "t", "e", imm=1)
    asm.op(Opcode.ALU_MAX, AluMax.MAX, "u", "e", "t")
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "u", "u", "EVEN")
    asm.op(Opcode.ALU_LANESHIFT, AluLane.ROT, "t", "u", imm=LANES - 1)
    asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "u", "u", "t")
    asm.op(Opcode.ALU_CMP, AluCmp.LT, "u", "u", "ES")
    # micro byte: lane i contributes 1 << (i // 2); OR across lanes
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "MICRO", "u", "WEIGHTS")
    for k in (8, 4, 2, 1):
        asm.op(Opcode.ALU_LANESHIFT, AluLane.ROT, "t", "MICRO", imm=k)
        asm.op(Opcode.ALU_LOGIC, AluLogic.OR, "MICRO", "MICRO", "t")
    asm.op(Opcode.ALU_LOGIC, AluLogic.AND, "u", "u", imm=1)
    _element(asm, fmt, counter, "x", "e", "u", "q", _low_half(asm, bank, lay, word))
    asm.st("q", bank, *lay.addr(lay.out_base + word))
    _meta(asm, bank, lay, meta)


def kernel(lay: KernelLayout, direction: str, fmt: MxFormat) -> list[int]:
    """The command list quantizing every tile of both banks of every ALU
    along ``direction``."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    counter = lay.placement == "strided-counter"
    asm = Asm()
    groups = lay.blocks(direction)
    for bank in (0, 1):
        if any(not lane_wise for _, _, lane_wise in groups):
            asm.ld("EVEN", bank, lay.const_row, CONST_EVEN)
            asm.ld("WEIGHTS", bank, lay.const_row, CONST_WEIGHTS)
        for words, meta, lane_wise in groups:
            if lane_wise:
                _lane_wise(asm, fmt, counter, bank, lay, words, meta)
            else:
                _cross_lane(asm, fmt, counter, bank, lay, words[0], meta)
    return asm.words


def load_tiles(ch: AluChannel, lay: KernelLayout, tiles: np.ndarray) -> None:
    """Write tiles (2 * pairs * tiles, 16, 16) of BF16 (uint16) or FP32
    (uint32) patterns into the banks: bank ``2a + s`` gets tiles
    ``(2a + s) * lay.tiles ...``."""
    cfg = ch.cfg
    per_bank = np.asarray(tiles).reshape(2 * cfg.pairs, lay.tiles, TILE, TILE).astype(np.int64)
    planes = [(0, per_bank >> 16 if lay.source == "fp32" else per_bank)]
    if lay.source == "fp32":
        planes.append((lay.lo_base, per_bank & MASK16))
    flat = ch.banks.reshape(2 * cfg.pairs, cfg.rows * cfg.cols, LANES)
    for bank in range(2 * cfg.pairs):
        flat[bank] = 0
        for base, plane in planes:
            for t in range(lay.tiles):
                for r in range(TILE):
                    lay.tile_row(flat[bank], base, t, r)[:] = plane[bank, t, r]
        ch.banks[bank, lay.const_row] = constants_row(cfg.cols)


def _used_words(lay: KernelLayout, outputs: bool, direction: str = "row") -> list[int]:
    """Word offsets a layout's inputs (and constants row) use, or the ones a
    kernel along ``direction`` writes."""
    if outputs:
        metas = sorted({meta for _, meta, _ in lay.blocks(direction)})
        return [*range(lay.out_base, lay.out_base + lay.in_words),
                *(lay.meta_base + w for w in metas)]
    words = [*range(lay.in_words), *range(lay.const_row * lay.cols,
                                          lay.const_row * lay.cols + lay.cols)]
    if lay.source == "fp32":
        words += range(lay.lo_base, lay.lo_base + lay.in_words)
    return words


def host_load(cfg: AluConfig, lay: KernelLayout, tiles: np.ndarray) -> tuple[list[int],
                                                                           list[int]]:
    """WR commands and beats that place ``tiles`` (as ``load_tiles``) and
    the constants row in every bank, through the host path."""
    scratch = AluChannel(cfg)
    load_tiles(scratch, lay, tiles)
    words, beats = [], []
    for bank in range(cfg.banks):
        for w in _used_words(lay, outputs=False):
            row, col = lay.addr(w)
            words.append(host_wr(bank, row, col))
            beats.append(numerics.lanes_to_word(scratch.banks[bank, row, col]))
    return words, beats


def host_readback(cfg: AluConfig, lay: KernelLayout, direction: str) -> list[int]:
    """RD commands for every word a kernel along ``direction`` writes, in
    every bank (codes, metadata)."""
    return [host_rd(bank, *lay.addr(w)) for bank in range(cfg.banks)
            for w in _used_words(lay, True, direction)]


def parse_readback(cfg: AluConfig, lay: KernelLayout, direction: str, rdata: Sequence[int]):
    """``read_results`` of the beats ``host_readback``'s RDs returned."""
    scratch = AluChannel(cfg)
    beats = iter(rdata)
    for bank in range(cfg.banks):
        for w in _used_words(lay, True, direction):
            scratch.banks[bank, w // lay.cols, w % lay.cols] = numerics.words_to_lanes(
                next(beats))
    return read_results(scratch, lay, direction)


def read_results(ch: AluChannel, lay: KernelLayout, direction: str):
    """(codes (banks, tiles, 16 blocks, 16), shared (banks, tiles, 16),
    micro (banks, tiles, 16)) as the kernel wrote them; block i of a tile is
    its row i (direction row) or column i."""
    cfg = ch.cfg
    nb = 2 * cfg.pairs
    flat = ch.banks.reshape(nb, cfg.rows * cfg.cols, LANES)
    codes = np.zeros((nb, lay.tiles, TILE, TILE), np.uint16)
    meta = np.zeros((nb, lay.tiles, TILE), np.uint16)
    for bank in range(nb):
        for t in range(lay.tiles):
            for r in range(TILE):
                codes[bank, t, r] = lay.tile_row(flat[bank], lay.out_base, t, r)
            for i in range(TILE):
                if lay.placement == "tiled":
                    word = 16 * t + i if direction == "row" else 16 * t
                    lane = 0 if direction == "row" else i
                else:
                    g, lane = divmod(t, LANES)
                    word = g * TILE + i
                meta[bank, t, i] = flat[bank, lay.meta_base + word, lane]
    if direction == "col":
        codes = codes.transpose(0, 1, 3, 2)
    return codes, (meta >> 8).astype(np.uint8), (meta & 0xFF).astype(np.uint8)


def command_counts(words: Sequence[int]) -> dict[str, int]:
    """Commands by kind, counted from a kernel's list."""
    out = {"total": len(words), "bitshift_1": 0, "shift_cmp": 0, "shift_add": 0,
           "ld": 0, "st": 0, "laneshift": 0}
    prev = None
    for w in words:
        c = _decode(w)
        op, fn = c["opcode"], c["alu_fn"]
        if op == Opcode.ALU_BITSHIFT and fn in (AluShift.SHR1_MASK, AluShift.SHR1_COUNT):
            out["bitshift_1"] += 1
            if prev is not None and prev["opcode"] == Opcode.ALU_CMP:
                out["shift_cmp"] += 1
        if op == Opcode.ALU_ADD and prev is not None and prev["opcode"] == Opcode.ALU_BITSHIFT \
                and prev["alu_fn"] == AluShift.SHR1_MASK:
            out["shift_add"] += 1
        if op == Opcode.ALU_MOV and fn == AluMov.LD:
            out["ld"] += 1
        if op == Opcode.ALU_MOV and fn == AluMov.ST:
            out["st"] += 1
        if op == Opcode.ALU_LANESHIFT:
            out["laneshift"] += 1
        prev = c
    out["variable_shift"] = out["bitshift_1"] + out["shift_cmp"] + out["shift_add"]
    return out


