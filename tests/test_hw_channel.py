"""hw.channel under the Amaranth simulator against the golden model.

A small configuration and short streams: quick block-level checks before
the cocotb runs of the generated Verilog."""

import numpy as np
import pytest

from golden import numerics as nm
from golden.channel import ChannelModel, Command, mac, rd, rd_out, wr, wr_inp
from golden.config import POLICIES, ChannelConfig, Timing
from golden.isa import ErrorCode, Opcode
from hw.channel import Channel
from tb.scoreboard import refresh_tail
from tb.stimulus import dex_stream, random_stream
from tests.stream_driver import drive_streams

TIMING = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2)
CFG = ChannelConfig(banks=2, rows=4, cols=4, gbuf_entries=4, obuf_entries=2, cmd_depth=2,
                    wdata_depth=2, rdata_depth=2, timing=TIMING)


@pytest.fixture(params=POLICIES)
def cfg(request):
    return CFG.replace(policy=request.param)


def simulate(config, commands, wdata, idle=(), stall=(), clear_at=None, max_cycles=4000):
    """Drive the streams cycle by cycle; return what the golden model needs
    (arrival and pop cycles) and what the DUT produced."""
    return drive_streams(Channel(config), [c.pack() for c in commands], wdata, idle, stall,
                         clear_at, max_cycles)


def check_against_golden(config, commands, wdata, **kw):
    got = simulate(config, commands, wdata, **kw)
    model = ChannelModel(config)
    ref = model.run(commands, wdata, got["cmd_arr"], got["wdata_arr"], got["pops"])
    want = [(t.cmd_id, t.opcode, t.cycle) for t in ref.trace]
    assert refresh_tail(got["trace"], want) == want
    assert got["rdata"] == ref.rdata
    return got, ref


def beats(n, seed=0):
    rng = np.random.default_rng(seed)
    return [nm.lanes_to_word(nm.float_to_bf16(rng.standard_normal(16))) for _ in range(n)]


def test_row_hit_miss_and_normal_access_timing(cfg):
    cmds = [wr(0, 1, 0), wr(1, 1, 1), wr_inp(2), mac(1, 0, 2, 0), mac(1, 1, 2, 0), rd_out(0),
            rd(1, 1, 1), wr(0, 3, 2), mac(2, 0, 2, 1), rd_out(1), rd(0, 3, 2)]
    got, ref = check_against_golden(cfg, cmds, beats(4))
    kinds = [k for _, k, _ in got["trace"]]
    assert kinds.count(Opcode.PRE) >= 2 and kinds.count(Opcode.ACT) >= 3


def test_backpressure_and_idle_cycles(cfg):
    cmds = [wr_inp(0), wr(0, 0, 0), wr(1, 0, 0), mac(0, 0, 0, 0)] + [rd_out(0), rd(0, 0, 0)] * 3
    check_against_golden(cfg, cmds, beats(3, 1), idle=range(3, 40, 3), stall=range(20, 70))


@pytest.mark.parametrize("bad, code", [
    (Command(0), ErrorCode.BAD_OPCODE),
    (Command(Opcode.ACT), ErrorCode.BAD_OPCODE),
    (wr(2, 0, 0), ErrorCode.BANK_RANGE),
    (rd(0, 4, 0), ErrorCode.ROW_RANGE),
    (mac(0, 4, 0, 0), ErrorCode.COL_RANGE),
    (wr_inp(4), ErrorCode.GBUF_RANGE),
    (rd_out(2), ErrorCode.OBUF_RANGE),
])
def test_bad_command_sets_sticky_error_and_is_dropped(cfg, bad, code):
    wdata = beats(2)
    cmds = [wr_inp(1), bad, mac(0, 0, 1, 0), rd_out(0)]
    if bad.opcode not in (Opcode.WR, Opcode.WR_INP):
        wdata = wdata[:1]
    got, ref = check_against_golden(cfg, cmds, wdata)
    assert got["status"] == (code, 1, 1) == (ref.status.err_code, ref.status.err_id,
                                             ref.status.err_count)


def test_err_clear_clears_status():
    got = simulate(CFG, [Command(0)], [], clear_at=30)
    assert got["status"] == (ErrorCode.NONE, 0, 0)


@pytest.mark.parametrize("seed", range(2))
def test_random_streams_every_policy(cfg, seed):
    """Random commands (a few malformed), random idle and backpressure."""
    rng = np.random.default_rng(seed)
    cmds, wdata = random_stream(cfg, 150, rng, bad=0.04)
    idle = [c for c in range(3000) if rng.random() < 0.2]
    stall = [c for c in range(3000) if rng.random() < 0.3]
    got, ref = check_against_golden(cfg, cmds, wdata, idle=idle, stall=stall, max_cycles=6000)
    assert got["status"] == (ref.status.err_code, ref.status.err_id, ref.status.err_count)


#: every optional device rule on (docs/timing.md), two bank groups, modes
RULES_CFG = CFG.replace(banks=4, bank_groups=2, t_rc=16, t_rtp=7, t_wr=9, t_wtr=6, t_ccd_l=4,
                        t_rrd_s=3, t_rrd_l=5, t_faw=30, t_modch=11)


@pytest.mark.parametrize("policy", POLICIES)
def test_random_streams_with_every_device_rule(policy):
    """The constraint table's optional rows and the bank-group level through
    each controller (reads and writes, all-bank MACs): RTL trace and data
    equal golden's."""
    config = RULES_CFG.replace(policy=policy)
    rng = np.random.default_rng(5)
    cmds, wdata = random_stream(config, 150, rng, bad=0.02)
    idle = [c for c in range(3000) if rng.random() < 0.1]
    got, ref = check_against_golden(config, cmds, wdata, idle=idle, max_cycles=20000)
    assert sum(t.opcode == Opcode.WR for t in ref.trace) > 5  # writes, for tWR and tWTR
    assert sum(t.opcode == Opcode.MODE for t in ref.trace) > 10  # mode switches


@pytest.mark.parametrize("policy", POLICIES)
def test_random_streams_with_refresh(policy):
    """Periodic refresh (tREFI 150, tRFC 20 here) with every device rule and
    modes on, idle cycles between commands (refreshes of an idle channel):
    RTL trace and data equal golden's, several REFs in the trace."""
    config = RULES_CFG.replace(policy=policy, t_refi=150, t_rfc=20)
    rng = np.random.default_rng(8)
    cmds, wdata = random_stream(config, 120, rng, bad=0.02)
    idle = [c for c in range(3000) if rng.random() < 0.3]
    got, ref = check_against_golden(config, cmds, wdata, idle=idle, max_cycles=20000)
    refs = [t.cycle for t in ref.trace if t.opcode == Opcode.REF]
    assert len(refs) >= 5, refs


DEX_CFG = CFG.replace(rows=8, dual_path=True, t_faw=60)


@pytest.mark.parametrize("policy", ["static", "pingpong"])
@pytest.mark.parametrize("split", [0, 3])
def test_dual_path_streams(policy, split):
    """Mixed xPU-read / PIM-MAC streams with ACT-AHEADs and a few bad
    commands on dual-path banks, unsliced and sliced (the slice_rows port),
    with tFAW binding, idle and backpressure: trace and beats as golden."""
    cfg = DEX_CFG.replace(policy=policy)
    rng = np.random.default_rng(split)
    cmds, wdata = dex_stream(cfg, 6, rng, split=3, bad=0.1)
    idle = [c for c in range(4000) if rng.random() < 0.2]
    stall = [c for c in range(4000) if rng.random() < 0.3]
    got = drive_streams(Channel(cfg), [c.pack() for c in cmds], wdata, idle, stall,
                        max_cycles=6000, ports={"slice_rows": split})
    golden = cfg.replace(slice_rows=split)
    ref = ChannelModel(golden).run(cmds, wdata, got["cmd_arr"], got["wdata_arr"], got["pops"])
    assert got["trace"] == [(t.cmd_id, t.opcode, t.cycle) for t in ref.trace]
    assert got["rdata"] == ref.rdata and ref.errors
    # tFAW decides some ACT: without it the same arrivals give another trace
    loose = ChannelModel(golden.replace(t_faw=0)).run(cmds, wdata, got["cmd_arr"],
                                                      got["wdata_arr"], got["pops"])
    assert [t.cycle for t in loose.trace] != [t.cycle for t in ref.trace]


def test_mode_switch_for_an_act_ahead_on_its_open_row():
    """Regression: an ACT-AHEAD whose row is open has no access, so its mode
    switch waits for nothing (golden once held it for the RD rules, here
    tWTR after the WR: MODE at 23 instead of 16, the RTL's cycle)."""
    from golden.channel import act_ahead

    cfg = DEX_CFG.replace(policy="static", t_modch=8, t_wtr=17)
    cmds = [wr(0, 0, 0), wr_inp(0), act_ahead(0, 0), rd(1, 0, 0)]
    got = drive_streams(Channel(cfg), [c.pack() for c in cmds], [0, 0], [], [],
                        max_cycles=2000, ports={"slice_rows": 0})
    ref = ChannelModel(cfg).run(cmds, [0, 0], got["cmd_arr"], got["wdata_arr"], got["pops"])
    assert got["trace"] == [(t.cmd_id, t.opcode, t.cycle) for t in ref.trace]
    modes = [t.cycle for t in ref.trace if t.opcode == Opcode.MODE]
    wr_cycle = next(t.cycle for t in ref.trace if t.opcode == Opcode.WR)
    assert modes[1] < wr_cycle + cfg.timing.t_wtr  # not held by the WR-to-RD rule

