"""hw.dcs, the DCS controller, under the Amaranth simulator against its
specification golden.dcs: hazard-dense streams (few GBuf and OBuf entries,
so nearly every command depends on one before it), MACs into the same OBuf
entry at tCCD, and the D-Table and S-Table storage the RTL holds against
golden.dcs.table_bits. The controller runs inside the channel
(hw.channel.Channel), which gives it its FIFOs, banks and datapath;
tests/test_hw_channel.py runs it beside the other policies."""

import numpy as np
import pytest
from amaranth import Module

from golden.channel import mac, rd_out, wr_inp
from golden.config import ChannelConfig, Timing
from golden.dcs import table_bits
from golden.isa import DEVICE_ACTIONS, Opcode
from hw.dcs import Tables
from tb.stimulus import random_stream
from tests.test_hw_channel import beats, check_against_golden

TIMING = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=3, t_mac=4, t_rd_out=3)
CFG = ChannelConfig(banks=2, rows=4, cols=4, gbuf_entries=2, obuf_entries=2, cmd_depth=4,
                    wdata_depth=4, rdata_depth=2, timing=TIMING, policy="dcs")


@pytest.mark.parametrize("seed", range(3))
def test_hazard_dense_streams(seed):
    """Two GBuf and two OBuf entries: RAW, WAR and WAW through the tables on
    almost every command; random idle cycles and backpressure."""
    rng = np.random.default_rng(seed)
    cmds, wdata = random_stream(CFG, 120, rng, bad=0.0, shape="dense")
    idle = [c for c in range(2000) if rng.random() < 0.15]
    stall = [c for c in range(2000) if rng.random() < 0.2]
    got, ref = check_against_golden(CFG, cmds, wdata, idle=idle, stall=stall, max_cycles=6000)
    order = [e.cmd_id for e in ref.trace if e.opcode not in DEVICE_ACTIONS]
    assert order != sorted(order), "nothing issued out of order"


@pytest.mark.parametrize("seed", range(3))
def test_hazard_dense_streams_with_modes(seed):
    """The same with the device's modes (t_modch): the compute head does not
    switch while the I/O head can issue, the I/O head switches only while
    the compute head waits for an unissued command (golden.dcs); trace and
    data as golden (tests/test_golden_dcs.py has the rule by hand)."""
    cfg = CFG.replace(t_modch=7)
    rng = np.random.default_rng(seed)
    cmds, wdata = random_stream(cfg, 120, rng, bad=0.02, shape="dense")
    idle = [c for c in range(6000) if rng.random() < 0.15]
    stall = [c for c in range(6000) if rng.random() < 0.2]
    got, ref = check_against_golden(cfg, cmds, wdata, idle=idle, stall=stall,
                                    max_cycles=12000)
    assert sum(e.opcode == Opcode.MODE for e in ref.trace) > 10
    order = [e.cmd_id for e in ref.trace if e.opcode not in DEVICE_ACTIONS]
    assert order != sorted(order), "nothing issued out of order"


def test_macs_into_one_obuf_entry_issue_at_tccd():
    """DCS's rule for accumulation: consecutive MACs into the same OBuf
    entry wait tCCD, not the MAC latency; the RD-OUT after them waits the
    MAC latency."""
    cmds = [wr_inp(0), mac(1, 0, 0, 0), mac(1, 1, 0, 0), mac(1, 2, 0, 0), rd_out(0)]
    got, ref = check_against_golden(CFG, cmds, beats(1))
    macs = [e.cycle for e in ref.trace if e.opcode == Opcode.MAC]
    assert np.diff(macs).tolist() == [TIMING.t_ccd] * 2
    out = next(e.cycle for e in ref.trace if e.opcode == Opcode.RD_OUT)
    assert out - macs[-1] == TIMING.t_mac


@pytest.mark.parametrize("gbuf, obuf", [(2, 2), (64, 8), (5, 3)])
def test_table_storage_matches_golden(gbuf, obuf):
    """The flip-flops of hw.dcs.Tables are the bits golden.dcs.table_bits
    reports (docs/scheduling.md, make synth)."""
    cfg = CFG.replace(gbuf_entries=gbuf, obuf_entries=obuf)
    m = Module()
    t = Tables(m, cfg)
    m._MustUse__silence = True  # built to count its signals, never elaborated
    bits = sum(len(s) for name in ("dg_valid", "dg_id", "do_valid", "do_id", "sg_valid",
                                   "sg_id", "sg_cnt", "so_valid", "so_id", "so_cnt", "so_mac",
                                   "so_ccd")
               for s in getattr(t, name))
    assert bits == table_bits(cfg)["bits"]
