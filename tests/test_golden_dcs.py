"""Dynamic Command Scheduling in the golden model (golden/dcs.py)."""

import numpy as np
import pytest

from golden.channel import ChannelModel, Command, mac, rd, rd_out, wr, wr_inp
from golden.config import ChannelConfig, ConfigError, Timing, small_config
from golden.isa import DEVICE_ACTIONS, ErrorCode, Opcode
from tb.stimulus import gemv_problem, random_stream

T = Timing(t_rcd=10, t_rp=6, t_ras=12, t_ccd=2, t_wr_inp=5, t_mac=7, t_rd_out=3)
CFG = ChannelConfig(banks=2, rows=8, cols=8, gbuf_entries=4, obuf_entries=4, timing=T,
                    policy="dcs")


def run(cmds, wdata=None, cfg=CFG, later=0):
    """With ``later``, commands from that index on arrive at cycle 40, after
    the earlier ones (opening the row) have finished."""
    n_w = sum(c.opcode in (Opcode.WR_INP, Opcode.WR) for c in cmds)
    arrivals = [0 if later == 0 or i < later else 40 for i in range(len(cmds))]
    return ChannelModel(cfg).run(cmds, wdata if wdata is not None else list(range(1, n_w + 1)),
                                 arrivals)


def cycle_of(result, cmd_id, opcode):
    return next(e.cycle for e in result.trace if e.cmd_id == cmd_id and e.opcode == opcode)


# A MAC on row 0 first, so later MACs find the row open and only the
# dependency rules set their timing.
OPEN = [mac(0, 0, 3, 3)]


def test_raw_gbuf_mac_waits_for_wr_inp_completion():
    r = run(OPEN + [wr_inp(0), mac(0, 1, 0, 0)], later=1)
    assert cycle_of(r, 2, Opcode.MAC) == cycle_of(r, 1, Opcode.WR_INP) + T.t_wr_inp


def test_war_gbuf_wr_inp_waits_for_the_mac_read_and_others_overtake():
    # MAC 1 waits for the ACT (tRCD); WR-INP 2 to another entry goes first,
    # WR-INP 3 to the MAC's entry must wait until the MAC has read it.
    r = run([mac(0, 0, 0, 0), wr_inp(1), wr_inp(0)])
    m = cycle_of(r, 0, Opcode.MAC)
    assert cycle_of(r, 1, Opcode.WR_INP) < m  # out of program order
    assert cycle_of(r, 2, Opcode.WR_INP) == max(m + 1, cycle_of(r, 1, Opcode.WR_INP) + 1)


def test_raw_obuf_rd_out_waits_for_mac_latency():
    r = run(OPEN + [mac(0, 1, 0, 1), rd_out(1)], later=1)
    assert cycle_of(r, 2, Opcode.RD_OUT) == cycle_of(r, 1, Opcode.MAC) + T.t_mac


def test_war_obuf_mac_waits_for_rd_out():
    r = run(OPEN + [rd_out(1), mac(0, 1, 0, 1)], later=1)
    assert cycle_of(r, 2, Opcode.MAC) == cycle_of(r, 1, Opcode.RD_OUT) + T.t_rd_out


def test_mac_after_mac_on_one_obuf_entry_issues_at_tccd():
    r = run(OPEN + [mac(0, c, 0, 1) for c in range(1, 6)])
    macs = [e.cycle for e in r.trace if e.opcode == Opcode.MAC]
    assert np.all(np.diff(macs) == T.t_ccd)
    # the static policy too: a MAC after a MAC waits only the device
    s = run(OPEN + [mac(0, c, 0, 1) for c in range(1, 6)], cfg=CFG.replace(policy="static"))
    assert np.all(np.diff([e.cycle for e in s.trace if e.opcode == Opcode.MAC]) == T.t_ccd)


def test_command_ids_wrap_and_dependencies_still_hold():
    n = (1 << 16) + 40
    cmds = [wr_inp(i % 2) if i % 3 else rd_out(i % 4) for i in range(n)]
    r = run(cmds, cfg=CFG.replace(io_depth=2))
    ids = [e.cmd_id for e in r.trace]
    assert max(ids) == (1 << 16) - 1 and ids[-1] == (n - 1) % (1 << 16)
    static = run(cmds, cfg=CFG.replace(policy="static"))
    assert r.rdata == static.rdata


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depths", [(1, 1), (2, 3), (4, 4)])
def test_data_and_errors_do_not_depend_on_the_policy(seed, depths):
    """Any stream, any arrival timing: DCS returns what static returns."""
    cfg = small_config().replace(io_depth=depths[0], compute_depth=depths[1])
    rng = np.random.default_rng(seed)
    cmds, wdata = random_stream(cfg, 400, rng, bad=0.03)
    arrivals = np.cumsum(rng.integers(0, 3, len(cmds))).tolist()
    w_arrivals = np.cumsum(rng.integers(0, 4, len(wdata))).tolist()
    runs = {p: ChannelModel(cfg.replace(policy=p)).run(cmds, wdata, arrivals, w_arrivals)
            for p in ("static", "pingpong", "dcs")}
    static = runs.pop("static")
    for policy, r in runs.items():
        assert r.rdata == static.rdata, policy
        assert r.errors == static.errors and r.status == static.status, policy
        # every good command issues exactly once
        issued = sorted(e.cmd_id for e in r.trace if e.opcode not in DEVICE_ACTIONS)
        assert issued == sorted(e.cmd_id for e in static.trace
                                if e.opcode not in DEVICE_ACTIONS), policy


def test_dcs_is_faster_than_static_on_a_gemv():
    cfg = small_config()
    _, _, cmds, beats = gemv_problem(64, 512, 0, cfg)
    static = ChannelModel(cfg).run(cmds, beats)
    dcs = ChannelModel(cfg.replace(policy="dcs")).run(cmds, beats)
    assert dcs.rdata == static.rdata
    assert dcs.cycles < static.cycles


def test_normal_access_is_a_fence():
    r = run(OPEN + [wr(1, 2, 0), mac(2, 0, 0, 0), rd(1, 2, 0)])
    order = [(e.cmd_id, e.opcode) for e in r.trace if e.opcode not in DEVICE_ACTIONS]
    assert order == [(0, Opcode.MAC), (1, Opcode.WR), (2, Opcode.MAC), (3, Opcode.RD)]


def test_rejected_write_consumes_its_beat_in_stream_order():
    r = run([wr_inp(0), Command(Opcode.WR, bank=5), wr_inp(1), mac(0, 0, 1, 0), rd_out(0)],
            wdata=[11, 22, 33])
    assert r.errors == [(1, ErrorCode.BANK_RANGE)]
    s = run([wr_inp(0), Command(Opcode.WR, bank=5), wr_inp(1), mac(0, 0, 1, 0), rd_out(0)],
            wdata=[11, 22, 33], cfg=CFG.replace(policy="static"))
    assert r.rdata == s.rdata


def test_policy_is_validated():
    with pytest.raises(ConfigError, match="policy must be one of"):
        ChannelConfig(policy="fastest")
    with pytest.raises(ConfigError, match="two halves"):
        ChannelConfig(policy="pingpong", obuf_entries=1)


PP = CFG.replace(policy="pingpong")  # halves: GBuf {0,1} | {2,3}, OBuf {0,1} | {2,3}


def test_pingpong_overlaps_io_on_the_other_half_only():
    """Within a half the static rules hold; across halves nothing waits."""
    r = run(OPEN + [wr_inp(0), mac(0, 1, 0, 0), rd_out(2), wr_inp(2), wr_inp(1)], cfg=PP,
            later=1)
    w0, m = cycle_of(r, 1, Opcode.WR_INP), cycle_of(r, 2, Opcode.MAC)
    assert m == w0 + T.t_wr_inp  # same GBuf half
    assert cycle_of(r, 3, Opcode.RD_OUT) == m + 1  # OBuf half 1: not the MAC's
    assert cycle_of(r, 4, Opcode.WR_INP) == m + 2  # GBuf half 1: not w0's
    # GBuf half 0 again: waits w0's completion only (passed), not the others
    assert cycle_of(r, 5, Opcode.WR_INP) == m + 3
    s = run(OPEN + [wr_inp(0), mac(0, 1, 0, 0), rd_out(2), wr_inp(2), wr_inp(1)],
            cfg=CFG.replace(policy="static"), later=1)  # one region: they wait
    assert cycle_of(s, 3, Opcode.RD_OUT) == cycle_of(s, 2, Opcode.MAC) + T.t_mac


def test_pingpong_hands_over_only_when_both_halves_are_idle():
    """OPEN is a MAC on GBuf and OBuf half 1. A MAC on half 0 is a hand-off:
    it waits for every access of both halves, the other half's write and
    the previous MAC's update included; on half 1 again it waits tCCD."""
    r = run(OPEN + [wr_inp(2), mac(0, 1, 0, 0)], cfg=PP, later=1)
    assert cycle_of(r, 2, Opcode.MAC) == cycle_of(r, 1, Opcode.WR_INP) + T.t_wr_inp
    r = run(OPEN + [mac(0, 1, 0, 0)], cfg=PP)
    assert cycle_of(r, 1, Opcode.MAC) == cycle_of(r, 0, Opcode.MAC) + T.t_mac
    same = run(OPEN + [mac(0, 1, 2, 2)], cfg=PP)
    assert cycle_of(same, 1, Opcode.MAC) == cycle_of(same, 0, Opcode.MAC) + T.t_ccd
    static = run(OPEN + [wr_inp(2), mac(0, 1, 0, 0)], cfg=CFG.replace(policy="static"),
                 later=1)  # one region: the same wait, by the static rule
    assert cycle_of(static, 2, Opcode.MAC) == cycle_of(static, 1, Opcode.WR_INP) + T.t_wr_inp


def test_dcs_groups_commands_by_mode():
    """A device with modes (t_modch 5): WR-INP and RD-OUT need register
    mode, MACs normal mode. The I/O head switches to register mode because
    the compute head waits for it (an unissued WR-INP); the compute head
    then does not switch back while the I/O head can still issue: three
    more register accesses go first, and one switch serves them all."""
    cfg = small_config().replace(t_modch=5, policy="dcs")
    cmds = [mac(3, 0, 1, 1), wr_inp(0), mac(3, 1, 0, 0), wr_inp(2), wr_inp(3), rd_out(1)]
    r = ChannelModel(cfg).run(cmds, [0, 0, 0], cmd_arrivals=[0] + [100] * 5)
    assert [(e.cmd_id, e.opcode.name, e.cycle) for e in r.trace] == [
        (0, "ACT", 2), (0, "MAC", 58),
        (1, "MODE", 102), (1, "WR_INP", 107),  # t_modch after the switch
        (3, "WR_INP", 108), (4, "WR_INP", 109), (5, "RD_OUT", 110),  # still register mode
        (2, "MODE", 111), (2, "MAC", 116)]  # the WR-INP completes at 107 + t_wr_inp = 111
    # the I/O head does not switch while the compute head only waits for time
    r = ChannelModel(cfg.replace(t_modch=32)).run(
        [wr_inp(0), mac(3, 0, 0, 0), mac(3, 1, 0, 0), rd_out(0)], [0])
    assert [(e.opcode.name, e.cycle) for e in r.trace] == [
        ("MODE", 2), ("WR_INP", 34), ("MODE", 35), ("ACT", 67), ("MAC", 123), ("MAC", 125),
        ("MODE", 133), ("RD_OUT", 165)]  # no switch while the MACs wait tRCD and tCCD,
    # nor before the RD-OUT's dependency on the last MAC is met (125 + t_mac)


def test_stale_s_table_id_is_not_taken_for_a_new_command_with_the_same_id():
    """Command 0 (a MAC into OBuf 1) leaves its ID in the S-Table; 2^16
    commands later MAC P reuses ID 0 on that entry and waits for PRE/ACT.
    RD-OUT X behind it depends on P: it must not see the stale ID 0 as P."""
    filler = [rd_out(2 + i % 2) for i in range((1 << 16) - 1)]
    cmds = [mac(0, 0, 0, 1)] + filler + [mac(1, 0, 0, 1), rd_out(1)]
    r = run(cmds)
    p, x = len(cmds) - 2, len(cmds) - 1
    assert p % (1 << 16) == 0
    last_mac = [e.cycle for e in r.trace if e.opcode == Opcode.MAC][-1]
    assert r.trace[-1].opcode == Opcode.RD_OUT and r.trace[-1].cmd_id == x % (1 << 16)
    assert r.trace[-1].cycle == last_mac + T.t_mac
    assert r.rdata == run(cmds, cfg=CFG.replace(policy="static")).rdata


def test_decode_waits_while_a_queue_head_is_half_the_id_space_old():
    """A WR-INP whose beat arrives very late stalls the I/O head while MACs
    keep decoding and issuing: decode stops WINDOW IDs past it."""
    from golden.dcs import WINDOW

    n_mac = WINDOW + 2
    cmds = [mac(0, 0, 0, 0), wr_inp(1)] + [mac(0, i % 8, 0, 0) for i in range(n_mac)]
    late = 200_000
    r = ChannelModel(CFG).run(cmds, [7], wdata_arrivals=[late])
    first = {}
    for e in r.trace:
        first.setdefault(e.cmd_id, e.cycle)
    assert first[1] == late + 1
    assert first[WINDOW] < late < first[1 + WINDOW]
    assert r.rdata == ChannelModel(CFG.replace(policy="static")).run(
        cmds, [7], wdata_arrivals=[late]).rdata


def test_table_storage_in_both_forms():
    """The project's form (valid bits, down-counters) and the paper's (IDs
    and expiration timestamps) at the reference buffers: the paper's form
    with its assumed widths is REFERENCE.md's 576 B plus the is-MAC bits."""
    from golden.config import load_profile
    from golden.dcs import paper_table_bits, table_bits

    cfg = load_profile("gddr6-aim", gbuf_entries=64, obuf_entries=8, policy="dcs")
    paper = paper_table_bits(cfg)
    assert paper["bits"] == 72 * (16 + 16 + 32) + 8 and paper["bytes"] == 577
    assert paper["bits"] - cfg.obuf_entries == 576 * 8
    assert table_bits(cfg)["bytes"] < paper["bytes"]  # down-counters instead of timestamps
    assert paper_table_bits(cfg, timestamp_bits=16)["bits"] == 72 * 48 + 8
