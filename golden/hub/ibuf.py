"""The HUB's instruction buffer (twin of ``hw/hub/ibuf.py``): the DPA
program's words, the committed program's length, tokens per chunk and
fault; the program format's commit check (``check_program``, the decoder's
commit walk in the RTL) and program tools (``instr``, ``disassemble``,
sizes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from golden.config import HubConfig
from golden.hub.ports import COMMIT_INDEX_SHIFT, Response
from golden.isa import (
    EPU_OPCODES,
    INSTR_BITS,
    MODI_FIELDS,
    EncodingError,
    Fault,
    HostStatus,
    ModiField,
    Opcode,
    pack_instruction,
    program_opcodes,
    unpack_instruction,
)

INSTR_BYTES = INSTR_BITS // 8


class InstructionBuffer:
    """PROG-WRITE and PROG-COMMIT."""

    def __init__(self, hub: HubConfig):
        self.hub = hub
        self.words = [0] * hub.instr_depth
        self.length = 0  # 0: nothing committed, steps run nothing
        self.fault = Fault.NONE
        self.tokens_per_chunk = 1

    def write(self, index: int, data: int) -> Response:
        if not 0 <= index < self.hub.instr_depth:
            return Response(HostStatus.BAD_ARG)
        self.words[index] = data & ((1 << INSTR_BITS) - 1)
        self.length, self.fault = 0, Fault.NONE  # uncommitted: steps run nothing
        return Response(HostStatus.OK)

    def commit(self, length: int, tokens_per_chunk: int) -> Response:
        if not 0 <= length <= self.hub.instr_depth or tokens_per_chunk < 1:
            return Response(HostStatus.BAD_ARG)
        check = check_program(self.words[:length], self.hub)
        self.length, self.fault = length, check.fault
        #: words the commit walk visited (one a cycle) before it answered
        self.walked = check.index
        self.tokens_per_chunk = tokens_per_chunk
        if not check.ok:
            return Response(HostStatus.FAULT, int(check.fault) | check.index << COMMIT_INDEX_SHIFT)
        return Response(HostStatus.OK)

    def program(self) -> list[int]:
        """The committed program."""
        return self.words[:self.length]


@dataclass(frozen=True)
class ProgramCheck:
    fault: Fault
    index: int  # first bad instruction (len(program) for a loop without end)
    message: str

    @property
    def ok(self) -> bool:
        return self.fault == Fault.NONE


def check_program(words: list[int], hub: HubConfig) -> ProgramCheck:
    """The first error of a DPA program, in word order, as the RTL's commit
    walk finds it (one word per cycle)."""
    n_mask = (1 << hub.n_channels) - 1
    loop_end = None  # index past the current loop body
    body0 = 0  # index of the body's first word
    header = False  # still in the body's DYN-MODI prefix
    modis: list[tuple[int, ModiField]] = []  # (absolute target, field)
    body_instr = 0
    for i, word in enumerate(words):
        if loop_end is not None and i == loop_end:
            if body_instr == 0:
                return ProgramCheck(Fault.BAD_LOOP, i, "loop body has no channel instruction")
            loop_end = None
        try:
            op, f = unpack_instruction(word)
        except EncodingError as e:
            return ProgramCheck(Fault.BAD_OPCODE, i, str(e))
        if op not in program_opcodes(hub.epu):
            return ProgramCheck(Fault.BAD_OPCODE, i, f"{op.name} is not implemented by the HUB"
                                + (" (built without an EPU)" if op in EPU_OPCODES else ""))
        if op == Opcode.DYN_LOOP:
            if loop_end is not None:
                return ProgramCheck(Fault.BAD_LOOP, i, "nested DYN-LOOP")
            if f["body_len"] == 0 or f["t_div"] == 0:
                return ProgramCheck(Fault.BAD_LOOP, i, "DYN-LOOP with body_len 0 or t_div 0")
            loop_end, header, modis, body_instr = i + 1 + f["body_len"], True, [], 0
            body0 = i + 1
            continue
        if op == Opcode.DYN_MODI:
            if loop_end is None or not header:
                return ProgramCheck(Fault.BAD_LOOP, i, "DYN-MODI outside a loop header")
            if len(modis) == hub.max_modis:
                return ProgramCheck(Fault.BAD_LOOP, i, f"more than {hub.max_modis} DYN-MODIs")
            if any(target == i for target, _ in modis):
                return ProgramCheck(Fault.BAD_FIELD, i, "a DYN-MODI targets this DYN-MODI")
            if f["field_sel"] not in list(ModiField):
                return ProgramCheck(Fault.BAD_FIELD, i, f"field_sel={f['field_sel']} unknown")
            target = body0 + f["target"]
            if target >= loop_end or target <= i:
                return ProgramCheck(Fault.BAD_FIELD, i, f"target={f['target']} is not a "
                                    f"channel instruction after it in the body")
            modis.append((target, ModiField(f["field_sel"])))
            continue
        header = False
        if op in EPU_OPCODES:
            if loop_end is not None:
                return ProgramCheck(Fault.BAD_LOOP, i, f"{op.name} inside a DYN-LOOP body")
            bad = _epu_field(op, f)
            if bad:
                return ProgramCheck(Fault.BAD_FIELD, i, bad)
            continue
        if loop_end is not None:
            body_instr += 1
        for target, fsel in modis:
            if target == i and op not in MODI_FIELDS[fsel]:
                return ProgramCheck(Fault.BAD_FIELD, i, f"{op.name} has no field {fsel.name} "
                                    f"for a DYN-MODI")
        if f["ch_mask"] == 0 or f["ch_mask"] & ~n_mask:
            return ProgramCheck(Fault.BAD_FIELD, i, f"ch_mask={f['ch_mask']:#x} selects no "
                                f"channel or one past {hub.n_channels}")
        if "op_size" in f and f["op_size"] == 0:
            return ProgramCheck(Fault.BAD_FIELD, i, "op_size=0")
        if op in (Opcode.RD, Opcode.WR) and f["bank"] >= hub.channel.banks:
            return ProgramCheck(Fault.BAD_FIELD, i, f"bank={f['bank']} >= {hub.channel.banks}")
    if loop_end is not None:
        if loop_end > len(words):
            return ProgramCheck(Fault.BAD_LOOP, len(words), "loop body runs past the program end")
        if body_instr == 0:
            return ProgramCheck(Fault.BAD_LOOP, len(words), "loop body has no channel instruction")
    return ProgramCheck(Fault.NONE, len(words), "")


def _epu_field(op: Opcode, f: dict[str, int]) -> str:
    """What is wrong with an EPU instruction's fields ('' if nothing)."""
    if f["span"] == 0:
        return f"{op.name} span=0"
    if f["op_size"] == 0:
        return "op_size=0"
    if op == Opcode.EPU_SOFTMAX and f["op_size"] & (f["op_size"] - 1):
        return f"EPU_SOFTMAX op_size={f['op_size']} is not a power of two"
    if op == Opcode.EPU_REDUCE:
        src, dst, n = f["gpr_addr"], f["dst_addr"], f["op_size"]
        if src < dst < src + n * f["span"]:
            return (f"EPU_REDUCE dst_addr={dst} inside its sources [{src}, "
                    f"{src + n * f['span']}) after their start: a result would overwrite a "
                    f"word not yet read")
    return ""


def instr(opcode: Opcode, **fields: int) -> int:
    """One instruction word (``golden.isa.pack_instruction``)."""
    return pack_instruction(opcode, **fields)


def disassemble(words: list[int]) -> list[str]:
    """One line per instruction word: index, hex word, mnemonic and fields
    (loop bodies indented; undefined words shown as such)."""
    lines, body_end = [], -1
    for i, word in enumerate(words):
        try:
            op, f = unpack_instruction(word)
            text = f"{op.name} " + " ".join(
                f"{k}={ModiField(v).name if k == 'field_sel' and v in list(ModiField) else v:}"
                if k != "ch_mask" else f"ch_mask={v:#x}" for k, v in f.items())
        except EncodingError as e:
            op, f, text = None, {}, f"?? ({e})"
        indent = "    " if i < body_end else ""
        lines.append(f"{i:3}  {word:032x}  {indent}{text}")
        if op == Opcode.DYN_LOOP:
            body_end = i + 1 + f["body_len"]
    return lines


def program_bytes(words: list[int]) -> int:
    return len(words) * INSTR_BYTES


def unrolled_instructions(words: list[int], t_cur: int) -> int:
    """Instructions of the equivalent static stream (every DYN-LOOP
    expanded for ``t_cur`` tokens, no DYN-MODI), for the size study."""
    total, pc = 0, 0
    while pc < len(words):
        op, f = unpack_instruction(words[pc])
        if op == Opcode.DYN_LOOP:
            body = words[pc + 1: pc + 1 + f["body_len"]]
            n_body = sum(unpack_instruction(w)[0] != Opcode.DYN_MODI for w in body)
            total += math.ceil(t_cur / f["t_div"]) * n_body
            pc += 1 + f["body_len"]
        else:
            total += 1
            pc += 1
    return total
