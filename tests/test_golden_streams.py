"""golden.streams, the channel's stream interfaces as the controllers see
them: write beats visible the cycle after they arrive, read credits (a read
waits until fewer than rdata_depth beats are unpopped), the sticky status
(first error kept, count saturating), and the command builders."""

import numpy as np
import pytest

from golden.config import small_config
from golden.isa import COMMAND_FIELDS, FIELDS, ErrorCode, Opcode
from golden.streams import (
    ERR_COUNT_MAX,
    RDATA_POP_LATENCY,
    Command,
    Streams,
    act_ahead,
    mac,
    rd,
    rd_out,
    wr,
    wr_inp,
)

CFG = small_config()  # rdata_depth 4


def test_write_beats_are_visible_the_cycle_after_they_arrive():
    s = Streams(CFG, [wr_inp(0), wr_inp(1)], [0x11, 0x22], [0, 0], [3, 9], None)
    assert s.wdata_ready() == 4
    assert s.take_wdata()[0] == 4
    assert s.take_wdata()[0] == 10
    with pytest.raises(ValueError, match="needs write-data beat 2 but only 2 given"):
        s.wdata_ready()


def test_read_credits_follow_the_pops():
    pops = [20, 21, 30, 31, 40]
    s = Streams(CFG, [], [], None, None, pops)
    for cycle in range(CFG.rdata_depth):
        assert s.read_credit_ready() == 0
        s.issue(cycle, 0)
    assert s.read_credit_ready() == pops[0] + 1  # the fifth read waits for the first pop
    s.issue(21, 0)
    assert s.read_credit_ready() == pops[1] + 1
    free = Streams(CFG, [], [], None, None, None)  # no pops given: popped at once
    for cycle in range(CFG.rdata_depth):
        free.issue(cycle, 0)
    assert free.read_credit_ready() == 0 + RDATA_POP_LATENCY + 1


def test_sticky_status_keeps_the_first_error_and_saturates():
    s = Streams(CFG, [], [], None, None, None)
    s.record_error(7, ErrorCode.ROW_RANGE)
    s.record_error(9, ErrorCode.BAD_OPCODE)
    assert (s.status.err_code, s.status.err_id, s.status.err_count) == (ErrorCode.ROW_RANGE, 7, 2)
    for i in range(ERR_COUNT_MAX + 5):
        s.record_error(i, ErrorCode.BANK_RANGE)
    assert s.status.err_count == ERR_COUNT_MAX and s.status.err_id == 7
    assert len(s.errors) == ERR_COUNT_MAX + 7


def test_stream_cycles_and_beats_are_checked():
    """Arrival and pop cycles: one per command or beat, integers, from 0,
    in order; write beats: 256-bit words (a negative one would alias)."""
    with pytest.raises(ValueError, match="cmd_arrivals has 2 cycles for 1"):
        Streams(CFG, [wr_inp(0)], [], [0, 1], None, None)
    with pytest.raises(ValueError, match="wdata_arrivals must be non-negative and in order"):
        Streams(CFG, [wr_inp(0), wr_inp(1)], [1, 2], None, [3, 2], None)
    with pytest.raises(ValueError, match="cmd_arrivals must be non-negative"):
        Streams(CFG, [wr_inp(0)], [1], [-1], None, None)
    with pytest.raises(ValueError, match="rdata_pops must be a list of integer cycles"):
        Streams(CFG, [wr_inp(0)], [1], None, None, [1.5])
    with pytest.raises(ValueError, match="write-data beat 1 -1 does not fit 256 bits"):
        Streams(CFG, [wr_inp(0)], [1, -1], None, None, None)
    with pytest.raises(ValueError, match="write-data beat 0: a 256-bit word must be an integer"):
        Streams(CFG, [wr_inp(0)], [1.0], None, None, None)
    s = Streams(CFG, [wr_inp(0)], [np.uint64(7)], [4], [5], [])
    assert (s.wdata, s.cmd_arrivals, s.wdata_arrivals) == ([7], [4], [5])


def test_builders_make_the_commands_they_name():
    assert wr_inp(3) == Command(Opcode.WR_INP, gbuf_idx=3)
    assert mac(5, 6, 1, 2) == Command(Opcode.MAC, row=5, col=6, gbuf_idx=1, out_idx=2)
    assert rd_out(2) == Command(Opcode.RD_OUT, out_idx=2)
    assert rd(1, 5, 6) == Command(Opcode.RD, bank=1, row=5, col=6)
    assert wr(1, 5, 6) == Command(Opcode.WR, bank=1, row=5, col=6)
    assert act_ahead(2, 9) == Command(Opcode.ACT_AHEAD, bank=2, row=9)


@pytest.mark.parametrize("field", COMMAND_FIELDS)
def test_every_command_field_rejects_what_its_encoding_cannot_hold(field):
    """A negative index (which would alias a real entry through Python's
    indexing), a value wider than the field, a float or a bool cannot make
    a Command; the field's largest value and a numpy integer can."""
    width = FIELDS[field].width
    base = {"opcode": int(Opcode.RD)}
    for bad in (-1, 1 << width, 1.5, True, "1"):
        with pytest.raises(ValueError, match=f"command field {field}"):
            Command(**{**base, field: bad})
    ok = Command(**{**base, field: (1 << width) - 1})
    assert getattr(ok, field) == (1 << width) - 1
    assert type(getattr(Command(**{**base, field: np.int64(1)}), field)) is int
