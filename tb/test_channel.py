"""cocotb tests of the generated channel Verilog against the golden model.

Run through ``sim.runner`` (``make sim``, ``make test``); the configuration
comes from PIMORCH_CONFIG, the seed from cocotb (COCOTB_RANDOM_SEED)."""

from __future__ import annotations

import os

import cocotb
import numpy as np

from golden import numerics as nm
from golden.channel import Command, gemv_result, mac, rd, rd_out, wr, wr_inp
from golden.isa import ErrorCode, Opcode
from tb.bench import ChannelTB
from tb.stimulus import gemv_problem, random_stream, random_word

GEMV_SHAPE = (256, 512)


@cocotb.test()
async def directed_timing(dut):
    """Row hits and misses, normal access between MACs, read-outs: no idle
    cycles, so every issue cycle is set by the timing rules alone."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    cmds = [wr(0, 1, 0), wr(1, 1, 0), wr_inp(0), mac(1, 0, 0, 0), mac(1, 0, 0, 0),
            mac(2, 3, 0, 1), rd_out(0), rd(1, 1, 0), wr(2, 5, 1), mac(5, 1, 0, 0),
            rd_out(0), rd_out(1), rd(2, 5, 1)]
    wdata = [random_word(rng) for _ in range(4)]
    obs = await tb.run(cmds, wdata)
    ref = tb.check(cmds, wdata, obs)
    t = tb.config.timing
    acts = [e.cycle for e in ref.trace if e.opcode == Opcode.ACT]
    macs = [e.cycle for e in ref.trace if e.opcode == Opcode.MAC]
    assert macs[1] - macs[0] == max(t.t_mac, t.t_ccd)
    assert macs[0] - acts[2] == t.t_rcd  # third ACT opens row 1 in all banks


@cocotb.test()
async def bad_commands(dut):
    """Each malformed command is dropped with a sticky code; later commands run;
    err_clear clears the status."""
    tb = ChannelTB(dut)
    await tb.start()
    cfg = tb.config
    rng = np.random.default_rng(tb.seed)
    bad = [Command(0), Command(Opcode.DYN_LOOP), Command(Opcode.PRE), wr(cfg.banks, 0, 0),
           rd(0, cfg.rows, 0), mac(0, cfg.cols, 0, 0), wr_inp(cfg.gbuf_entries),
           rd_out(cfg.obuf_entries)]
    cmds, wdata = [], []
    for b in bad:
        cmds += [b, wr_inp(1), mac(0, 0, 1, 0), rd_out(0)]
        wdata += [random_word(rng)] * (2 if b.opcode in (Opcode.WR, Opcode.WR_INP) else 1)
    obs = await tb.run(cmds, wdata)
    ref = tb.check(cmds, wdata, obs)
    assert [code for _, code in ref.errors] == [ErrorCode.BAD_OPCODE] * 3 + [
        ErrorCode.BANK_RANGE, ErrorCode.ROW_RANGE, ErrorCode.COL_RANGE, ErrorCode.GBUF_RANGE,
        ErrorCode.OBUF_RANGE]
    assert obs.status == (ErrorCode.BAD_OPCODE, 0, len(bad))
    obs = await tb.run([rd_out(0)], [], err_clear_after=tb.dut.cycle.value.to_unsigned() + 2)
    assert obs.status == (ErrorCode.NONE, 0, 0), obs.status


@cocotb.test()
async def random_stream_flow_control(dut):
    """Constrained-random commands with idle and backpressure on every stream."""
    n = int(os.environ.get("PIMORCH_RANDOM_COMMANDS", "3000"))
    tb = ChannelTB(dut, idle=0.3, backpressure=0.4)
    await tb.start()
    cmds, wdata = random_stream(tb.config, n, np.random.default_rng(tb.seed))
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)


@cocotb.test()
async def gemv(dut):
    """y = W x, W 256 x 512 BF16 written by normal WRs: bit-exact with golden
    and within BF16 rounding of numpy float32."""
    tb = ChannelTB(dut, idle=0.1, backpressure=0.1)
    await tb.start()
    n_out, n_in = GEMV_SHAPE
    w, x, cmds, beats = gemv_problem(n_out, n_in, tb.seed, tb.config)
    obs = await tb.run(cmds, beats)
    ref = tb.check(cmds, beats, obs)
    y = nm.bf16_to_float(gemv_result(obs.rdata, n_out, tb.config.banks))
    wf, xf = nm.bf16_to_float(w).astype(np.float32), nm.bf16_to_float(x).astype(np.float32)
    expect = wf @ xf
    scale = np.abs(wf) @ np.abs(xf)
    err = np.abs(y - expect)
    # BF16 output rounding (2**-8 relative) plus FP32 accumulation error
    assert np.all(err <= np.abs(expect) * 2.0**-8 + scale * 2.0**-20), float(err.max())
    tb.log.info("GEMV %dx%d: %d commands, %d MACs, %d cycles; max |err| %.3g",
                n_out, n_in, len(cmds), ref.mac_count, obs.cycles, float(err.max()))


@cocotb.test()
async def act_to_mac_waveform(dut):
    """A short stream for the waveform check: WR-INP, then a MAC that opens a row."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    cmds = [wr_inp(0), mac(3, 0, 0, 0), mac(3, 1, 0, 0), rd_out(0)]
    wdata = [random_word(rng)]
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)
