"""cocotb tests of the generated channel Verilog against the golden model.

Run through ``sim.runner`` (``make sim``, ``make test``); the configuration
comes from PIMORCH_CONFIG, the seed from cocotb (COCOTB_RANDOM_SEED). These
are the tests that need Python in the loop (directed timing, the
interactive driver, waveforms); the long streams, the GEMV, the ID wrap
and the kernel run through the standalone player (tb/play_tests.py)."""

from __future__ import annotations

import os

import cocotb
import numpy as np

from golden.channel import Command, mac, rd, rd_out, wr, wr_inp
from golden.isa import ErrorCode, Opcode
from tb.bench import ChannelTB
from tb.stimulus import random_stream, random_word

#: Tests for one controller policy only; the others run under every policy.
ONLY = {"dcs_hazards": ("dcs",), "dcs_out_of_order_waveform": ("dcs",),
        "wrong_golden_waveform": ("dcs",),
        "player_loads": (), "driver_loads": ()}  # by name only (make bench, tests/test_fast.py)


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
    assert macs[1] - macs[0] == t.t_ccd  # every policy: a MAC after a MAC waits the device
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
async def act_to_mac_waveform(dut):
    """A short stream for the waveform check: WR-INP, then a MAC that opens a row."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    cmds = [wr_inp(0), mac(3, 0, 0, 0), mac(3, 1, 0, 0), rd_out(0)]
    wdata = [random_word(rng)]
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)


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
async def dcs_out_of_order_waveform(dut):
    """A short DCS stream for the waveform check: MAC 0 waits for its ACT
    and tRCD, WR-INP 1 (another GBuf entry) issues before it."""
    tb, cmds, wdata, obs = await _out_of_order_run(dut)
    tb.check(cmds, wdata, obs)
    assert _cycle(obs, 1, Opcode.WR_INP) < _cycle(obs, 0, Opcode.MAC)


async def _out_of_order_run(dut):
    """MAC 0, WR-INP 1, WR-INP 2 (GBuf 0), MAC 3, RD-OUT 4 on the DCS
    channel without idle or backpressure: (tb, commands, beats, observed)."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    rng = np.random.default_rng(tb.seed)
    cmds = [mac(0, 0, 0, 0), wr_inp(1), wr_inp(0), mac(0, 1, 1, 0), rd_out(0)]
    wdata = [random_word(rng) for _ in range(2)]
    return tb, cmds, wdata, await tb.run(cmds, wdata)


@cocotb.test()
async def wrong_golden_waveform(dut):
    """The mismatch-to-waveform path: the DCS stream of the waveform check
    scored against a deliberately wrong golden expectation (tRCD one cycle
    longer than the RTL's) must fail, naming the first differing cycle and
    the waveform (or how to rewrite it with waves). The message is left in
    ``mismatch.txt`` in the run folder."""
    from golden.channel import ChannelModel
    from tb import scoreboard

    tb, cmds, wdata, obs = await _out_of_order_run(dut)
    wrong = ChannelModel(tb.config.replace(t_rcd=tb.config.timing.t_rcd + 1))
    try:
        scoreboard.check(wrong, cmds, wdata, obs, tb.seed)
    except scoreboard.ScoreboardError as exc:
        message = str(exc)
    else:
        raise AssertionError("a wrong golden expectation passed the scoreboard")
    assert "first differing cycle" in message, message
    assert "waveform:" in message or "rewrite it with waves:" in message, message
    folder = os.environ.get("PIMORCH_TEST_DIR")
    if folder:
        with open(os.path.join(folder, "mismatch.txt"), "w") as f:
            f.write(message + "\n")
    tb.log.info("scoreboard caught the wrong expectation: %s", message.splitlines()[0])


@cocotb.test()
async def player_loads(dut):
    """The standalone player's loads (written by sim.fast.write_loads into
    PIMORCH_PLAY_DIR) played from cocotb instead of pim_play's sequencer:
    the same flow-control generators, so the same records and cycles, with
    the cocotb runner's costs (VPI, public signals, Python at every load).
    Leaves each load's record (play_record_<k>*) and play_summary.txt in the
    run folder."""
    import shutil
    from pathlib import Path

    from cocotb.clock import Clock
    from cocotb.triggers import ClockCycles, FallingEdge, First, RisingEdge, Timer

    from tb.bench import CLOCK_NS

    folder = Path(os.environ["PIMORCH_PLAY_DIR"])
    loads = int(os.environ.get("PIMORCH_PLAY_LOADS", "1"))
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    for name in ("cmd__valid", "wdata__valid", "rdata__ready", "err_clear", "cmd__payload",
                 "wdata__payload", "flush"):
        getattr(dut, name).value = 0
    dut.slice_rows.value = int(os.environ.get("PIMORCH_PLAY_SLICE_ROWS", "0"))
    names = ("n_cmd", "n_wdata", "n_rdata", "n_trace", "idle_level", "stall_level",
             "lfsr_seed", "hold_beat", "hold_until", "quiet_cycles")
    with open("play_summary.txt", "w") as summary:
        for k in range(loads):
            for kind in ("cmds", "wdata"):
                shutil.copy(folder / f"play_{kind}_{k}.bin", f"play_{kind}_{k}.bin")
            par = [int(x, 16) for x in (folder / f"play_par_{k}.hex").read_text().split()]
            dut.play.value = 0
            dut.rst.value = 1
            dut.load_index.value = k
            for name, value in zip(names, par, strict=False):
                getattr(dut, name).value = value
            dut.load.value = 1
            await ClockCycles(dut.clk, 3)
            dut.load.value = 0
            dut.rst.value = 0
            dut.play.value = 1
            done = RisingEdge(dut.done)
            if await First(done, Timer(par[10] * CLOCK_NS, unit="ns")) is not done:
                await FallingEdge(dut.clk)
                summary.write(f"X {k} {dut.cycle.value.to_unsigned()}\n")
                dut.flush.value = 1  # pim_tb writes the record at the next edge
                await RisingEdge(dut.clk)
                await FallingEdge(dut.clk)
                return
            await FallingEdge(dut.clk)
            summary.write(f"D {k} {dut.status.value.to_unsigned():x} "
                          f"{dut.cycle.value.to_unsigned()}\n")
            await RisingEdge(dut.clk)  # pim_tb writes the record here
            await FallingEdge(dut.clk)


@cocotb.test()
async def driver_loads(dut):
    """Load 0 of PIMORCH_PLAY_DIR (sim.fast.write_loads) through the per-cycle
    Python driver (ChannelTB), with the load's idle and backpressure
    probabilities: the cocotb way of running a long stream, timed against
    the standalone player on the same stream by make bench."""
    from pathlib import Path

    from sim.fast import read_load
    from tb.bench import config_from_env

    config = config_from_env()
    par, words, wdata = read_load(config, Path(os.environ["PIMORCH_PLAY_DIR"]), 0)
    cmds = [Command.unpack(w) for w in words]
    tb = ChannelTB(dut, config, idle=par[4] / 65536, backpressure=par[5] / 65536)
    await tb.start()
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)
