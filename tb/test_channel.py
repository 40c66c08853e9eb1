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
CHUNK = 100_000  # commands per player load
#: Tests for one controller policy only; the others run under every policy.
ONLY = {"gemv": ("static", "dcs"), "dcs_hazards": ("dcs",), "id_wrap": ("dcs",),
        "dcs_out_of_order_waveform": ("dcs",)}


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
    same_entry = t.t_ccd if tb.config.policy == "dcs" else max(t.t_mac, t.t_ccd)
    assert macs[1] - macs[0] == same_entry
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


async def _long(dut, shape: str) -> None:
    n = int(os.environ.get("PIMORCH_STREAM_COMMANDS", "20000"))
    tb = ChannelTB(dut, idle=0.2, backpressure=0.3)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    total_cycles, done = 0, 0
    while done < n:
        k = min(n - done, CHUNK)
        cmds, wdata = random_stream(tb.config, k, rng, bad=0.01, shape=shape)
        obs = await tb.play(cmds, wdata)
        tb.check(cmds, wdata, obs)
        done, total_cycles = done + k, total_cycles + obs.cycles
    tb.log.info("%s: %d commands in %d cycles match golden", shape, done, total_cycles)
    tb.write_metrics(commands=done, cycles=total_cycles, seed=tb.seed)


@cocotb.test()
async def long_dense(dut):
    """PIMORCH_STREAM_COMMANDS (default 20,000) random commands on two GBuf
    and two OBuf entries (dependency chains), through the stimulus player."""
    await _long(dut, "dense")


@cocotb.test()
async def long_sparse(dut):
    """The same over every buffer entry (independent commands overlap)."""
    await _long(dut, "sparse")


OPEN = [mac(0, 0, 3, 3)]  # opens row 0: later MACs are timed by dependencies


def _cycle(obs, cmd_id, opcode):
    return next(c for i, o, c in obs.trace if i == cmd_id and o == opcode)


@cocotb.test()
async def dcs_hazards(dut):
    """One directed stream per hazard: the dependent command issues in the
    exact cycle the D-/S-Table rules give; independent ones overtake."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    t = tb.config.timing
    rng = np.random.default_rng(tb.seed)

    async def run(cmds, later=0):
        await tb.reset()
        n_w = sum(c.opcode in (Opcode.WR_INP, Opcode.WR) for c in cmds)
        wdata = [random_word(rng) for _ in range(n_w)]
        offer = [0 if i < later or later == 0 else 80 for i in range(len(cmds))]
        obs = await tb.run(cmds, wdata, offer_at=offer)
        tb.check(cmds, wdata, obs)
        return obs

    obs = await run(OPEN + [wr_inp(0), mac(0, 1, 0, 0)], later=1)  # RAW GBuf
    assert _cycle(obs, 2, Opcode.MAC) == _cycle(obs, 1, Opcode.WR_INP) + t.t_wr_inp
    obs = await run([mac(0, 0, 0, 0), wr_inp(1), wr_inp(0)])  # WAR GBuf
    m = _cycle(obs, 0, Opcode.MAC)
    assert _cycle(obs, 1, Opcode.WR_INP) < m  # out of program order
    assert _cycle(obs, 2, Opcode.WR_INP) == max(m + 1, _cycle(obs, 1, Opcode.WR_INP) + 1)
    obs = await run(OPEN + [mac(0, 1, 0, 1), rd_out(1)], later=1)  # RAW OBuf
    assert _cycle(obs, 2, Opcode.RD_OUT) == _cycle(obs, 1, Opcode.MAC) + t.t_mac
    obs = await run(OPEN + [rd_out(1), mac(0, 1, 0, 1)], later=1)  # WAR OBuf
    assert _cycle(obs, 2, Opcode.MAC) == _cycle(obs, 1, Opcode.RD_OUT) + t.t_rd_out
    obs = await run(OPEN + [mac(0, c, 0, 1) for c in range(1, 6)])  # MAC after MAC
    macs = [c for _, o, c in obs.trace if o == Opcode.MAC][1:]
    assert np.all(np.diff(macs) == t.t_ccd), macs
    # Full queues: MACs behind a slow row switch fill the compute queue, the
    # command FIFO fills behind it and cmd.ready drops (gaps in the arrivals).
    cmds = [mac(1 + i // 12, i % 4, i % 2, i % 2) for i in range(36)]
    obs = await run(cmds)
    gaps = np.diff(obs.cmd_arrivals)
    assert gaps.max() > 1, gaps
    tb.log.info("hazards: RAW/WAR GBuf, RAW/WAR OBuf, MAC after MAC, full queues match golden")


@cocotb.test()
async def id_wrap(dut):
    """Through the player: 2**16 + 64 commands wrap the 16-bit IDs; a stale
    S-Table ID equal to a new command's ID is not taken for it; decode
    stops 2**15 IDs past an I/O head that waits for its write beat."""
    from golden.dcs import WINDOW

    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    t = tb.config.timing
    n = (1 << 16) + 64
    cmds = [wr_inp(i % 2) if i % 3 else rd_out(i % 4) for i in range(n)]
    wdata = [i & 0xFFFF for i in range(sum(c.opcode == Opcode.WR_INP for c in cmds))]
    obs = await tb.play(cmds, wdata, idle=0.1, backpressure=0.2)
    tb.check(cmds, wdata, obs)
    assert obs.trace[-1][0] == (n - 1) % (1 << 16)

    filler = [rd_out(2 + i % 2) for i in range((1 << 16) - 1)]
    cmds = [mac(0, 0, 0, 1)] + filler + [mac(1, 0, 0, 1), rd_out(1)]
    obs = await tb.play(cmds, [], idle=0.0, backpressure=0.0)
    tb.check(cmds, [], obs)
    last_mac = [c for _, o, c in obs.trace if o == Opcode.MAC][-1]
    assert obs.trace[-1][1] == Opcode.RD_OUT and obs.trace[-1][2] == last_mac + t.t_mac

    late = WINDOW * t.t_ccd * 5 // 4  # after MAC WINDOW would issue, before its wait ends
    cmds = [mac(0, 0, 0, 0), wr_inp(1)] + [mac(0, i % 4, 0, 0) for i in range(WINDOW + 2)]
    wdata = [random_word(np.random.default_rng(tb.seed))]
    obs = await tb.play(cmds, wdata, idle=0.0, backpressure=0.0, hold=(0, late))
    tb.check(cmds, wdata, obs)
    first = {}
    for i, _, c in obs.trace:
        first.setdefault(i, c)
    assert first[WINDOW] < late < first[1 + WINDOW]
    tb.write_metrics(commands=2 * n + len(cmds), cycles=obs.cycles, seed=tb.seed)


@cocotb.test()
async def dcs_out_of_order_waveform(dut):
    """A short DCS stream for the waveform check: MAC 0 waits for its ACT
    and tRCD, WR-INP 1 (another GBuf entry) issues before it."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    cmds = [mac(0, 0, 0, 0), wr_inp(1), wr_inp(0), mac(0, 1, 1, 0), rd_out(0)]
    wdata = [random_word(rng) for _ in range(2)]
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)
    assert _cycle(obs, 1, Opcode.WR_INP) < _cycle(obs, 0, Opcode.MAC)


@cocotb.test()
async def dcs_kernel(dut):
    """A QK^T kernel (d_head 128, GQA group 2, PIMORCH_KERNEL_TOKENS tokens,
    default 256) through the player without idle or backpressure: the cycle
    count is the policy's, cycle-exact with golden (make bench times it)."""
    from golden.kernels import qkt

    tokens = int(os.environ.get("PIMORCH_KERNEL_TOKENS", "256"))
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    k = qkt(tb.config, 128, 2, tokens)
    obs = await tb.play(k.commands, k.wdata)
    ref = tb.check(k.commands, k.wdata, obs)
    tb.log.info("%s under %s: %d commands, %d MACs in %d cycles", k.name, tb.config.policy,
                len(k.commands), ref.mac_count, ref.cycles)
    tb.write_metrics(commands=len(k.commands), cycles=ref.cycles, macs=ref.mac_count,
                     kernel=k.name, policy=tb.config.policy, seed=tb.seed)
