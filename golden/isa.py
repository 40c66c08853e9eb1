"""The instruction and command encodings: the one table every layer uses.

DESIGN.md §2.1. Two levels share one opcode space:

* **Instructions** (HUB level) carry Ch-mask, Op-size, GPR-addr, GBuf-idx,
  Row/Col, Out-idx; each opcode has its own format (the list of fields it
  uses), packed LSB-first after the opcode into an ``INSTR_BITS`` word.
* **Commands** (channel level) are what the sequencer and multicast deliver
  to one channel's controller. Every command uses the same flat layout
  ``COMMAND_FIELDS``; an opcode simply ignores the fields it does not use.

``hw`` builds its Amaranth layouts from :func:`layout_widths`, ``tb`` packs
and unpacks with :func:`pack` / :func:`unpack`. No width is typed anywhere
else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Field:
    name: str
    width: int
    doc: str


#: Every field of every format, with its one width.
FIELDS: dict[str, Field] = {
    f.name: f
    for f in [
        Field("opcode", 5, "operation, see Opcode"),
        Field("ch_mask", 32, "one bit per channel of the module (multicast)"),
        Field("op_size", 8, "number of commands the sequencer unrolls (Op-size)"),
        Field("gpr_addr", 14, "32 B entry of the HUB's global register file (512 KB)"),
        Field("bank", 4, "bank of a normal RD/WR (MAC and RD-OUT address all banks)"),
        Field("row", 16, "DRAM row"),
        Field("col", 8, "32 B column word within the row"),
        Field("gbuf_idx", 8, "global buffer entry (32 B = 16 BF16 inputs)"),
        Field("out_idx", 4, "output buffer entry (one FP32 accumulator per bank)"),
        Field("body_len", 8, "DYN-LOOP: number of instructions in the loop body"),
        Field("t_div", 16, "DYN-LOOP: tokens per iteration; bound = ceil(T_cur / t_div)"),
        Field("target", 8, "DYN-MODI: body offset of the instruction it modifies"),
        Field("field_sel", 3, "DYN-MODI: which operand field to advance (ModiField)"),
        Field("stride", 16, "DYN-MODI: signed stride added per iteration"),
        Field("dst_reg", 4, "ALU: destination register"),
        Field("src_reg", 4, "ALU: source register"),
        Field("imm", 16, "ALU: immediate (shift amount, lane count, compare value)"),
        Field("alu_fn", 3, "ALU: function within the opcode, see ALU_FUNCTIONS"),
        Field("src2_reg", 4, "ALU: second source register (operand B unless use_imm)"),
        Field("use_imm", 1, "ALU: operand B is imm broadcast to every lane"),
        Field("dst_addr", 14, "EPU: destination GPR entry (relative to the request's base)"),
        Field("span", 8, "EPU: softmax: GPR entries between score words; reduce: words "
                         "summed into each result word"),
        # issue-trace and status fields (channel outputs)
        Field("cmd_id", 16, "command ID: acceptance order, wraps at 2**16"),
        Field("cycle", 32, "controller cycle counter since reset"),
        Field("err_code", 4, "sticky first error (ErrorCode)"),
        Field("err_id", 16, "command ID of the first error"),
        Field("err_count", 16, "dropped commands since reset or clear (saturates)"),
        # HUB host protocol (DPA, docs/dpa.md)
        Field("host_op", 4, "host operation, see HostOp"),
        Field("req_id", 8, "request (configuration buffer entry)"),
        Field("arg_a", 32, "first host argument (see HOST_OPS)"),
        Field("arg_b", 32, "second host argument (see HOST_OPS)"),
        Field("data", 256, "host data: a GPR word, an instruction or a channel command"),
        Field("rsp_code", 4, "host response status, see HostStatus"),
        Field("fault", 4, "request fault code, see Fault"),
        Field("req_state", 2, "request state, see ReqState"),
        Field("t_cur", 32, "request token length (DYN-LOOP bound)"),
        Field("n_chunks", 8, "mapped virtual chunks of a request"),
        Field("gpr_base", 14, "request's GPR base: added to every gpr_addr of its commands"),
    ]
}


class Opcode(enum.IntEnum):
    """Opcode space shared by instructions and commands. 0 is never valid,
    so an all-zero (uninitialised) word is always rejected."""

    WR_INP = 1  # GPR -> GBuf entry (32 B)
    MAC = 2  # every bank: 16 BF16 weights at (row, col) x GBuf entry -> OBuf[out]
    RD_OUT = 3  # OBuf[out] of all banks -> GPR, as BF16; the entry is cleared
    RD = 4  # normal read of one bank word (host/xPU)
    WR = 5  # normal write of one bank word (host/xPU)
    DYN_LOOP = 6  # repeat a body; bound from the request's T_cur
    DYN_MODI = 7  # add a stride to an operand field of a body instruction per iteration
    ALU_MOV = 8  # JIT-Q PIM ALU: bank <-> register
    ALU_ADD = 9
    ALU_MUL = 10
    ALU_CMP = 11
    ALU_MAX = 12
    ALU_BITSHIFT = 13
    ALU_LANESHIFT = 14
    ALU_LOGIC = 15
    ACT_AHEAD = 16  # dual-path xPU side: open (bank, row) in its partition ahead of RDs
    EPU_SOFTMAX = 17  # HUB EPU: softmax over the request's T_cur scores in the GPR, in place
    EPU_REDUCE = 18  # HUB EPU: sum groups of GPR words (TCP partial sums) into one word each
    # Generated by the controller, never accepted on the command stream.
    REF = 28
    MODE = 29
    PRE = 30
    ACT = 31


class Level(enum.Enum):
    HUB = "hub"  # instruction only, decoded in the HUB
    EPU = "epu"  # instruction only, run by the HUB's EPU on the GPR
    CHANNEL = "channel"  # instruction and channel command
    INTERNAL = "internal"  # issued by the controller itself (trace only)


_ALU = ("ch_mask", "op_size", "bank", "row", "col", "alu_fn", "dst_reg", "src_reg", "src2_reg",
        "use_imm", "imm")
_ALU_CMD = ("alu_fn", "bank", "row", "col", "dst_reg", "src_reg", "src2_reg", "use_imm", "imm")


@dataclass(frozen=True)
class OpInfo:
    opcode: Opcode
    level: Level
    fields: tuple[str, ...]  # instruction format after the opcode
    command_fields: tuple[str, ...]  # channel command fields the opcode reads
    doc: str


ISA: dict[Opcode, OpInfo] = {
    i.opcode: i
    for i in [
        OpInfo(Opcode.WR_INP, Level.CHANNEL, ("ch_mask", "op_size", "gpr_addr", "gbuf_idx"),
               ("gbuf_idx",), "GPR -> GBuf entry; data from the write-data stream"),
        OpInfo(Opcode.MAC, Level.CHANNEL,
               ("ch_mask", "op_size", "row", "col", "gbuf_idx", "out_idx"),
               ("row", "col", "gbuf_idx", "out_idx"),
               "all banks: word (row, col) x GBuf[gbuf_idx], accumulate into OBuf[out_idx]"),
        OpInfo(Opcode.RD_OUT, Level.CHANNEL, ("ch_mask", "op_size", "gpr_addr", "out_idx"),
               ("out_idx",), "OBuf[out_idx] of all banks -> read-data stream as BF16"),
        OpInfo(Opcode.RD, Level.CHANNEL, ("ch_mask", "bank", "row", "col", "gpr_addr"),
               ("bank", "row", "col"), "bank word -> read-data stream"),
        OpInfo(Opcode.WR, Level.CHANNEL, ("ch_mask", "bank", "row", "col", "gpr_addr"),
               ("bank", "row", "col"), "write-data stream -> bank word"),
        OpInfo(Opcode.DYN_LOOP, Level.HUB, ("body_len", "t_div"), (),
               "repeat the next body_len instructions ceil(T_cur / t_div) times"),
        OpInfo(Opcode.DYN_MODI, Level.HUB, ("target", "field_sel", "stride"), (),
               "per iteration, add stride to field_sel of body instruction target"),
        *[OpInfo(op, Level.CHANNEL, _ALU, _ALU_CMD,
                 "JIT-Q SIMD PIM ALU operation (golden/alu.py)") for op in (
            Opcode.ALU_MOV, Opcode.ALU_ADD, Opcode.ALU_MUL, Opcode.ALU_CMP, Opcode.ALU_MAX,
            Opcode.ALU_BITSHIFT, Opcode.ALU_LANESHIFT, Opcode.ALU_LOGIC)],
        OpInfo(Opcode.ACT_AHEAD, Level.CHANNEL, ("ch_mask", "bank", "row"), ("bank", "row"),
               "open (bank, row) in its partition now, no column access: the xPU's "
               "activate-ahead, so later RDs to it stream back to back (LibraPIM DEX)"),
        OpInfo(Opcode.EPU_SOFTMAX, Level.EPU, ("op_size", "gpr_addr", "span"), (),
               "softmax, in place, over the request's T_cur BF16 scores: element j in GPR "
               "entry gpr_addr + (j // 16) * span, lane j % 16; the words written rounded up "
               "to a multiple of op_size (a power of two), +0 past the last score "
               "(golden/hub/epu.py)"),
        OpInfo(Opcode.EPU_REDUCE, Level.EPU, ("op_size", "gpr_addr", "dst_addr", "span"), (),
               "for u < op_size: GPR[dst_addr + u] = sum of the span words from "
               "gpr_addr + u * span, FP32 in order, rounded once to BF16"),
        OpInfo(Opcode.REF, Level.INTERNAL, (), (),
               "all-bank refresh (implicit, controller-issued every tREFI; docs/timing.md)"),
        OpInfo(Opcode.MODE, Level.INTERNAL, (), (),
               "switch between the device's normal and register-access modes (implicit, "
               "controller-issued; docs/timing.md)"),
        OpInfo(Opcode.PRE, Level.INTERNAL, (), (), "precharge (implicit, controller-issued)"),
        OpInfo(Opcode.ACT, Level.INTERNAL, (), (), "activate (implicit, controller-issued)"),
    ]
}


class ModiField(enum.IntEnum):
    ROW = 0
    COL = 1
    GBUF_IDX = 2
    OUT_IDX = 3
    GPR_ADDR = 4


class ErrorCode(enum.IntEnum):
    """Sticky status codes of a channel (DESIGN.md §6). The first error is
    kept until cleared; the faulting command is dropped with no side effect."""

    NONE = 0
    BAD_OPCODE = 1  # not a channel opcode this channel implements
    BANK_RANGE = 2
    ROW_RANGE = 3
    COL_RANGE = 4
    GBUF_RANGE = 5
    OBUF_RANGE = 6



class HostOp(enum.IntEnum):
    """Operations on the HUB's host interface (docs/dpa.md). 0 is invalid."""

    PROG_WRITE = 1  # arg_a: instruction index; data[:INSTR_BITS]: the instruction
    PROG_COMMIT = 2  # arg_a: program length; arg_b: tokens per chunk; validates
    GPR_WRITE = 3  # arg_a: GPR entry; data: the 32 B word
    GPR_READ = 4  # arg_a: GPR entry; response data: the word
    ASSIGN = 5  # req_id; arg_a: initial T_cur; arg_b: GPR base. Request must be FREE
    GROW = 6  # req_id; arg_a: physical chunk, mapped to the next virtual chunk
    RELEASE = 7  # req_id: back to FREE, its VA2PA entries dropped
    STATUS = 8  # req_id; response data: REQ_STATUS_FIELDS
    CLEAR = 9  # req_id: clear the fault, the request runs again from the next step
    STEP = 10  # a decode step of the ACTIVE requests not in data (skip mask); rsp: STEP masks
    RAW = 11  # arg_a: ch_mask; arg_b: GPR entry; data: a physical channel command


class HostStatus(enum.IntEnum):
    OK = 0
    BAD_OP = 1  # not a HostOp
    BAD_ARG = 2  # an index out of range, or a request in the wrong state
    FAULT = 3  # the operation faulted a request (data: the Fault code)


class Fault(enum.IntEnum):
    """Per-request fault codes of the DPA dispatcher (DESIGN.md §2.3, §6).
    A faulted request issues nothing more until the host clears it."""

    NONE = 0
    BAD_OPCODE = 1  # program: an undefined, controller-internal or unimplemented opcode
    BAD_LOOP = 2  # program: loop without end, nested loop, empty body, t_div 0, stray DYN-MODI
    BAD_FIELD = 3  # program: unknown DYN-MODI field, target not a body instruction or
    #                without that field, ch_mask 0 or past the channels, op_size 0, bank
    T_RANGE = 4  # T_cur beyond the request's mapped chunks (checked before the request runs)
    UNMAPPED = 5  # a virtual row in an unmapped virtual chunk (or negative)
    TABLE_FULL = 6  # GROW with every VA2PA entry of the request in use
    CMD_RANGE = 7  # a translated command or GPR address out of range


class ReqState(enum.IntEnum):
    FREE = 0
    ACTIVE = 1
    FAULTED = 2


#: Channel command word, LSB first.
COMMAND_FIELDS = ("opcode", "bank", "row", "col", "gbuf_idx", "out_idx")
#: Issue-trace entry, LSB first.
TRACE_FIELDS = ("cmd_id", "opcode", "cycle")
#: Channel status word, LSB first.
STATUS_FIELDS = ("err_code", "err_id", "err_count")
#: HUB host interface: one operation, and its response.
HOST_FIELDS = ("host_op", "req_id", "arg_a", "arg_b", "data")
RESPONSE_FIELDS = ("rsp_code", "data")
#: STATUS response data, LSB first.
REQ_STATUS_FIELDS = ("req_state", "fault", "t_cur", "n_chunks")
#: HUB-level opcodes (DPA programs); the rest of a program is channel opcodes.
HUB_OPCODES = (Opcode.DYN_LOOP, Opcode.DYN_MODI)
#: Fields a DYN-MODI may advance, per target opcode. ROW and COL both move
#: the virtual word address ``row * cols + col`` (ROW by ``stride * cols``).
MODI_FIELDS = {
    ModiField.ROW: (Opcode.MAC, Opcode.RD, Opcode.WR),
    ModiField.COL: (Opcode.MAC, Opcode.RD, Opcode.WR),
    ModiField.GBUF_IDX: (Opcode.WR_INP, Opcode.MAC),
    ModiField.OUT_IDX: (Opcode.MAC, Opcode.RD_OUT),
    ModiField.GPR_ADDR: (Opcode.WR_INP, Opcode.RD_OUT, Opcode.RD, Opcode.WR),
}
class AluMov(enum.IntEnum):
    LD = 0  # dst <- bank word (bank, row, col)
    ST = 1  # bank word (bank, row, col) <- src
    COPY = 2  # dst <- src
    IMM = 3  # dst <- imm in every lane
    SETCNT = 4  # shift counters <- src (per lane)
    GETCNT = 5  # dst <- shift counters


class AluAdd(enum.IntEnum):
    ADD = 0  # a + b mod 2^16
    SUB = 1  # a - b mod 2^16


class AluMul(enum.IntEnum):
    MULLO = 0  # low 16 bits of a * b


class AluCmp(enum.IntEnum):  # unsigned; 0xFFFF where true, else 0
    LT = 0
    EQ = 1
    NE = 2
    GT = 3


class AluMax(enum.IntEnum):  # unsigned
    MAX = 0
    MIN = 1


class AluShift(enum.IntEnum):
    SHR = 0  # every lane right by imm bits (logical)
    SHL = 1  # every lane left by imm bits
    SHR1_MASK = 2  # lanes where b != 0 right by one bit, others hold
    SHR1_COUNT = 3  # lanes whose shift counter is > 0 right by one bit and decrement it


class AluLane(enum.IntEnum):
    ROT = 0  # dst[i] = src[(i + imm) mod 16]


class AluLogic(enum.IntEnum):
    AND = 0
    OR = 1
    XOR = 2
    ANDN = 3  # a & ~b


#: ALU opcode -> its functions (the alu_fn values it accepts).
ALU_FUNCTIONS = {
    Opcode.ALU_MOV: AluMov, Opcode.ALU_ADD: AluAdd, Opcode.ALU_MUL: AluMul,
    Opcode.ALU_CMP: AluCmp, Opcode.ALU_MAX: AluMax, Opcode.ALU_BITSHIFT: AluShift,
    Opcode.ALU_LANESHIFT: AluLane, Opcode.ALU_LOGIC: AluLogic,
}
#: ALU command word (the JIT-Q ALU channel's command stream), LSB first.
ALU_COMMAND_FIELDS = ("opcode", *_ALU_CMD)
ALU_REGS = 16  # register file entries (REFERENCE.md: 16 registers per ALU)

#: Opcodes the foundation channel executes.
CHANNEL_OPCODES = (Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR)
#: Trace entries of what the controller issues for the device, not a
#: command's own access: mode switch, precharge, activate (on behalf of a
#: command, or of a refresh) and refresh.
DEVICE_ACTIONS = (Opcode.MODE, Opcode.PRE, Opcode.ACT, Opcode.REF)
#: The ID a refresh's own MODE, PRE and REF carry in the trace.
REFRESH_ID = 0
#: Commands only the xPU sends a channel directly, and only a channel with
#: dual-path banks accepts (never in a DPA program).
XPU_OPCODES = (Opcode.ACT_AHEAD,)
#: Everything a DPA program may contain (the commit walk rejects the rest).
PROGRAM_OPCODES = (*CHANNEL_OPCODES, *HUB_OPCODES)
#: The HUB's EPU instructions: in a program of a HUB built with an EPU
#: (``HubConfig.epu``), outside loops.
EPU_OPCODES = (Opcode.EPU_SOFTMAX, Opcode.EPU_REDUCE)


def program_opcodes(epu: bool) -> tuple[Opcode, ...]:
    """What a DPA program may contain on a HUB built with an EPU or without."""
    return (*PROGRAM_OPCODES, *EPU_OPCODES) if epu else PROGRAM_OPCODES


INSTR_BITS = 128
LANES = 16  # BF16 lanes per 32 B word
WORD_BITS = 16 * LANES


def layout_widths(fields: tuple[str, ...]) -> dict[str, int]:
    """Field name -> width, in packing order (for Amaranth StructLayout)."""
    return {name: FIELDS[name].width for name in fields}


def word_width(fields: tuple[str, ...]) -> int:
    return sum(FIELDS[name].width for name in fields)


COMMAND_BITS = word_width(COMMAND_FIELDS)
TRACE_BITS = word_width(TRACE_FIELDS)


class EncodingError(ValueError):
    pass


def _integer(value) -> int | None:
    """``value`` if an int (or an IntEnum), a numpy integer as an int; None
    for a float, a bool or anything else (the caller names it)."""
    if type(value) is int:
        return value
    if isinstance(value, np.integer):
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value


def field_value(name: str, value, what: str = "field") -> int:
    """``value`` as the integer of field ``name``: an int (or an IntEnum or
    a numpy integer) in [0, 2**width). A float, a bool, a string or a value
    that does not fit raises EncodingError naming the field; nothing is
    truncated, wrapped or aliased."""
    as_int = _integer(value)
    if as_int is None:
        raise EncodingError(f"{what} {name} must be an integer, not {value!r}")
    value, width = as_int, FIELDS[name].width
    if not 0 <= value < (1 << width):
        top = 1 << width if width <= 32 else f"2**{width}"
        raise EncodingError(f"{what} {name}={_show(value)} does not fit its {width}-bit field "
                            f"[0, {top})")
    return int(value)


def _show(value: int) -> str:
    """An integer for a message: in full when short, else its sign and size."""
    text = str(value)
    if len(text) <= 24:
        return text
    return f"{'-' if value < 0 else ''}<{abs(value).bit_length()}-bit integer>"


def pack(fields: tuple[str, ...], values: dict[str, int]) -> int:
    """Pack ``values`` into a word laid out as ``fields`` (LSB first).
    Missing fields are zero; a value that is not an integer or does not
    fit raises (``field_value``), naming it."""
    unknown = set(values) - set(fields)
    if unknown:
        raise EncodingError(f"field(s) {sorted(unknown)} not in format {fields}")
    word, shift = 0, 0
    for name in fields:
        if name in values:
            word |= field_value(name, values[name]) << shift
        shift += FIELDS[name].width
    return word


def as_word(word, bits: int, what: str = "word") -> int:
    """``word`` as an int in [0, 2**bits) (EncodingError naming ``what``
    otherwise)."""
    as_int = _integer(word)
    if as_int is None:
        raise EncodingError(f"{what}: a {bits}-bit word must be an integer, not {word!r}")
    word = as_int
    if not 0 <= word < (1 << bits):
        raise EncodingError(f"{what} {_show(word)} does not fit {bits} bits")
    return int(word)


def unpack(fields: tuple[str, ...], word: int) -> dict[str, int]:
    """The fields of ``word``, an integer in [0, 2**width of ``fields``)."""
    word = as_word(word, word_width(fields))
    out, shift = {}, 0
    for name in fields:
        width = FIELDS[name].width
        out[name] = (word >> shift) & ((1 << width) - 1)
        shift += width
    return out


def pack_alu(**values: int) -> int:
    return pack(ALU_COMMAND_FIELDS, values)


def unpack_alu(word: int) -> dict[str, int]:
    return unpack(ALU_COMMAND_FIELDS, word)


def pack_command(**values: int) -> int:
    return pack(COMMAND_FIELDS, values)


def unpack_command(word: int) -> dict[str, int]:
    return unpack(COMMAND_FIELDS, word)


def pack_instruction(opcode: Opcode, **values: int) -> int:
    info = ISA[Opcode(opcode)]
    if info.level is Level.INTERNAL:
        raise EncodingError(f"opcode {info.opcode.name} is controller-internal, not an instruction")
    fields = ("opcode", *info.fields)
    word = pack(fields, {"opcode": int(opcode), **values})
    assert word < (1 << INSTR_BITS)
    return word


def unpack_instruction(word: int) -> tuple[Opcode, dict[str, int]]:
    """Opcode and fields of a 128-bit instruction word; bits above the
    opcode's fields are not decoded (as in the HUB's decoder)."""
    word = as_word(word, INSTR_BITS, "instruction word")
    raw = word & ((1 << FIELDS["opcode"].width) - 1)
    try:
        opcode = Opcode(raw)
    except ValueError:
        raise EncodingError(f"opcode={raw} is not a defined opcode") from None
    info = ISA[opcode]
    if info.level is Level.INTERNAL:
        raise EncodingError(f"opcode={raw} ({opcode.name}) is controller-internal")
    fields = ("opcode", *info.fields)
    fields = unpack(fields, word & ((1 << word_width(fields)) - 1))
    del fields["opcode"]
    return opcode, fields


def _check_table() -> None:
    opw = FIELDS["opcode"].width
    assert max(Opcode) < (1 << opw)
    for info in ISA.values():
        assert word_width(("opcode", *info.fields)) <= INSTR_BITS, info.opcode
        assert set(info.command_fields) <= set(COMMAND_FIELDS) | set(ALU_COMMAND_FIELDS)
    assert set(ISA) == set(Opcode)
    assert max(ErrorCode) < (1 << FIELDS["err_code"].width)
    assert FIELDS["err_id"].width == FIELDS["cmd_id"].width
    assert max(HostOp) < (1 << FIELDS["host_op"].width)
    assert max(HostStatus) < (1 << FIELDS["rsp_code"].width)
    assert max(Fault) < (1 << FIELDS["fault"].width)
    assert max(ReqState) < (1 << FIELDS["req_state"].width)
    assert FIELDS["data"].width == WORD_BITS >= max(INSTR_BITS, word_width(COMMAND_FIELDS))
    assert FIELDS["gpr_base"].width == FIELDS["gpr_addr"].width == FIELDS["dst_addr"].width
    assert max(ModiField) < (1 << FIELDS["field_sel"].width) and set(MODI_FIELDS) == set(ModiField)
    assert all(max(fns) < (1 << FIELDS["alu_fn"].width) for fns in ALU_FUNCTIONS.values())
    assert ALU_REGS == 1 << FIELDS["dst_reg"].width


_check_table()
