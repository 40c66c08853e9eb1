"""golden.isa, the encoding table every layer builds from: every word
format packs and unpacks losslessly at its field limits, a value that does
not fit or a field not in the format raises EncodingError naming it, and
instruction decode refuses undefined and controller-internal opcodes."""

import numpy as np
import pytest

from golden.isa import (
    ALU_COMMAND_FIELDS,
    COMMAND_FIELDS,
    FIELDS,
    HOST_FIELDS,
    INSTR_BITS,
    ISA,
    REQ_STATUS_FIELDS,
    RESPONSE_FIELDS,
    STATUS_FIELDS,
    TRACE_FIELDS,
    EncodingError,
    Level,
    Opcode,
    pack,
    pack_instruction,
    unpack,
    unpack_instruction,
    word_width,
)
from golden.streams import Command

FORMATS = {"command": COMMAND_FIELDS, "alu": ALU_COMMAND_FIELDS, "trace": TRACE_FIELDS,
           "status": STATUS_FIELDS, "host": HOST_FIELDS, "response": RESPONSE_FIELDS,
           "req_status": REQ_STATUS_FIELDS}


def _values(rng, fields):
    """Random values, each field at 0, at its maximum or in between."""
    out = {}
    for name in fields:
        top = (1 << FIELDS[name].width) - 1
        out[name] = int(rng.choice([0, top, int(rng.integers(0, top + 1, dtype=np.uint64))
                                    if FIELDS[name].width < 64 else top >> 1]))
    return out


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_round_trip_at_their_limits(name):
    fields = FORMATS[name]
    rng = np.random.default_rng(len(name))
    for _ in range(200):
        values = _values(rng, fields)
        word = pack(fields, values)
        assert word < 1 << word_width(fields)
        assert unpack(fields, word) == values


@pytest.mark.parametrize("op", [op for op, info in ISA.items() if info.level is not Level.INTERNAL])
def test_instructions_round_trip(op):
    rng = np.random.default_rng(int(op))
    for _ in range(50):
        values = _values(rng, ISA[op].fields)
        word = pack_instruction(op, **values)
        assert word < 1 << INSTR_BITS
        assert unpack_instruction(word) == (op, values)


def test_bad_values_name_the_field():
    top = 1 << FIELDS["row"].width
    with pytest.raises(EncodingError, match=f"field row={top} does not fit"):
        pack(COMMAND_FIELDS, {"row": top})
    with pytest.raises(EncodingError, match="field bank=-1 does not fit"):
        pack(COMMAND_FIELDS, {"bank": -1})
    with pytest.raises(EncodingError, match=r"field\(s\) \['stride'\] not in format"):
        pack_instruction(Opcode.MAC, stride=1)


def test_instruction_decode_refuses_undefined_and_internal_opcodes():
    defined = {int(op) for op in Opcode}
    undefined = next(v for v in range(1 << FIELDS["opcode"].width) if v not in defined)
    with pytest.raises(EncodingError, match=f"opcode={undefined} is not a defined opcode"):
        unpack_instruction(undefined)
    with pytest.raises(EncodingError, match="controller-internal"):
        unpack_instruction(int(Opcode.ACT))
    with pytest.raises(EncodingError, match="controller-internal"):
        pack_instruction(Opcode.PRE)


def test_command_words_round_trip():
    rng = np.random.default_rng(5)
    for _ in range(200):
        v = _values(rng, COMMAND_FIELDS)
        v["opcode"] = int(rng.choice([Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD,
                                      Opcode.WR]))
        cmd = Command(Opcode(v.pop("opcode")), **v)
        assert Command.unpack(cmd.pack()) == cmd
