"""hw.datapath.Datapath under the Amaranth simulator against its
specification, the data rules of golden.channel: random WR, WR-INP, MAC,
RD-OUT and RD commands issued back to back or with gaps (MACs into the
same OBuf entry in consecutive cycles, a RD right after the WR of its
word); every read beat equals the golden channel's, in order."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden import numerics
from golden.channel import ChannelModel
from golden.config import small_config
from golden.isa import LANES, Opcode
from golden.streams import Command
from hw.datapath import Datapath

CFG = small_config().replace(policy="static", rows=8)
FLAGS = {Opcode.WR_INP: "wr_inp", Opcode.MAC: "mac", Opcode.RD_OUT: "rd_out",
         Opcode.RD: "rd", Opcode.WR: "wr"}
SPECIALS = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F]  # incl. Inf, NaN, subnormal


def _word(rng, specials: bool) -> int:
    lanes = numerics.float_to_bf16(rng.standard_normal(LANES) * 4)
    if specials:
        pick = rng.random(LANES) < 0.2
        lanes[pick] = rng.choice(SPECIALS, pick.sum())
    return numerics.lanes_to_word(lanes)


def _stream(rng, n: int, specials: bool):
    """(command, write beat or None, idle cycles before it)."""
    out, hot = [], (0, 0, 0)
    for _ in range(n):
        op = rng.choice([Opcode.WR, Opcode.WR_INP, Opcode.MAC, Opcode.MAC, Opcode.MAC,
                         Opcode.RD_OUT, Opcode.RD])
        if rng.random() < 0.5:  # reuse the last bank / row / column: hits and forwarding
            bank, row, col = hot
        else:
            bank, row, col = (int(rng.integers(CFG.banks)), int(rng.integers(CFG.rows)),
                              int(rng.integers(CFG.cols)))
        hot = (bank, row, col)
        cmd = Command(op, bank=bank if op in (Opcode.RD, Opcode.WR) else 0, row=row, col=col,
                      gbuf_idx=int(rng.integers(min(4, CFG.gbuf_entries))),
                      out_idx=int(rng.integers(CFG.obuf_entries)))
        beat = _word(rng, specials) if op in (Opcode.WR, Opcode.WR_INP) else None
        out.append((cmd, beat, int(rng.choice([0, 0, 0, 1, 3]))))
    return out


@pytest.mark.parametrize("seed, specials", [(1, False), (2, True)])
def test_datapath_against_golden(seed, specials):
    rng = np.random.default_rng(seed)
    stream = _stream(rng, 300, specials)
    ref = ChannelModel(CFG).run([c for c, _, _ in stream],
                               [b for _, b, _ in stream if b is not None])
    assert not ref.errors
    dut = Datapath(CFG)
    got = []

    async def bench(ctx):
        def sample():
            if ctx.get(dut.rbeat_valid):
                got.append(ctx.get(dut.rbeat))

        for cmd, beat, idle in stream:
            for _ in range(idle):
                await ctx.tick()
                sample()
            ctx.set(dut.col, 1)
            ctx.set(dut.cmd, {"opcode": cmd.opcode, "bank": cmd.bank, "row": cmd.row,
                              "col": cmd.col, "gbuf_idx": cmd.gbuf_idx,
                              "out_idx": cmd.out_idx})
            for op, flag in FLAGS.items():
                ctx.set(getattr(dut, flag), int(cmd.opcode == op))
            ctx.set(dut.wbeat, beat or 0)
            await ctx.tick()
            ctx.set(dut.col, 0)
            sample()
        for _ in range(2):
            await ctx.tick()
            sample()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert len(ref.rdata) > 50
    assert got == list(ref.rdata)
