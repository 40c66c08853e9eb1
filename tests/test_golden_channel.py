"""The golden channel model: closed-form timing, data, bad input."""

import numpy as np
import pytest

from golden import numerics as nm
from golden.channel import (
    ChannelModel,
    Command,
    CommandError,
    act_ahead,
    gemv_commands,
    gemv_result,
    mac,
    rd,
    rd_out,
    wr,
    wr_inp,
)
from golden.config import (
    ChannelConfig,
    Timing,
    small_config,
)
from golden.isa import DEVICE_ACTIONS, ErrorCode, Opcode
from tb.stimulus import dex_stream

T = Timing(t_rcd=10, t_rp=7, t_ras=20, t_ccd=2, t_wr_inp=3, t_mac=4, t_rd_out=5)
CFG = ChannelConfig(banks=2, rows=8, cols=4, gbuf_entries=4, obuf_entries=2, timing=T)


def issue_cycles(result, opcode):
    return [e.cycle for e in result.trace if e.opcode == opcode]


def test_first_mac_waits_trcd_after_act():
    r = ChannelModel(CFG).run([mac(0, 0, 0, 0)])
    assert [(e.opcode, e.cycle) for e in r.trace] == [(Opcode.ACT, 1), (Opcode.MAC, 1 + T.t_rcd)]


def test_row_hit_macs_issue_at_tccd_and_row_miss_obeys_tras_trp_trcd():
    """A MAC after a MAC waits only the device (tCCD), not the MAC's
    execution time; the row miss's PRE waits tRAS, not the MAC either."""
    r = ChannelModel(CFG).run([mac(0, 0, 0, 0), mac(0, 1, 0, 0), mac(3, 0, 0, 0)])
    act0, m0, m1, pre, act1, m2 = [e.cycle for e in r.trace]
    assert m1 - m0 == T.t_ccd
    assert pre == max(m1 + 1, act0 + T.t_ras)
    assert act1 == pre + T.t_rp
    assert m2 == act1 + T.t_rcd


def _open_then(cfg, cmds, wdata=()):
    """``cmds`` arriving at cycle 100, long after a MAC that opened row 0
    (the row stays open, every access of the MAC has completed)."""
    return ChannelModel(cfg).run([mac(0, 0, 3, 1)] + cmds, list(wdata),
                                 cmd_arrivals=[0] + [100] * len(cmds))


@pytest.mark.parametrize("first, second, gap", [
    (wr_inp(0), mac(0, 1, 2, 0), T.t_wr_inp),  # GBuf: the write completes first (any entry)
    (wr_inp(0), wr_inp(2), 1),  # write after write: pipelined, as MAC after MAC (device only)
    (mac(0, 1, 0, 0), rd_out(1), T.t_mac),  # OBuf: the MAC's update (any entry)
    (rd_out(0), mac(0, 1, 0, 1), T.t_rd_out),  # OBuf: read and cleared before a MAC
    (rd_out(0), rd_out(1), T.t_rd_out),
    (mac(0, 1, 0, 0), wr_inp(0), 1),  # the MAC read the GBuf at issue
    (mac(0, 1, 0, 0), mac(0, 2, 1, 1), T.t_ccd),  # device only
    (wr_inp(0), rd_out(0), 1),  # no shared buffer
    (rd_out(0), wr_inp(0), 1),
])
def test_static_waits_the_execution_time_of_a_dependent_kind_only(first, second, gap):
    """PIMphony's static controller: in order, and a command waits for the
    last access of each kind it shares a buffer with to complete; it knows
    kinds, not entries. Each gap moves with its own execution time."""
    cmds = [first, second]
    wdata = [0] * sum(c.opcode == Opcode.WR_INP for c in cmds)
    r = _open_then(CFG, cmds, wdata)
    a, b = r.trace[-2].cycle, r.trace[-1].cycle
    assert b - a == gap
    if gap > 1 and gap != T.t_ccd:  # one cycle more of the rule, one cycle later
        key = {T.t_wr_inp: "t_wr_inp", T.t_mac: "t_mac", T.t_rd_out: "t_rd_out"}[gap]
        slower = _open_then(CFG.replace(**{key: gap + 1}), cmds, wdata)
        assert slower.trace[-1].cycle - slower.trace[-2].cycle == gap + 1


def test_tras_binds_when_gaps_are_short():
    t = Timing(t_rcd=2, t_rp=3, t_ras=30, t_ccd=1, t_wr_inp=1, t_mac=1, t_rd_out=1)
    r = ChannelModel(ChannelConfig(banks=1, rows=4, cols=4, timing=t)).run(
        [mac(0, 0, 0, 0), mac(1, 0, 0, 0)])
    act0, _, pre, act1, _ = [e.cycle for e in r.trace]
    assert pre == act0 + t.t_ras and act1 == pre + t.t_rp


def test_normal_access_opens_only_its_bank_and_mac_then_closes_all():
    r = ChannelModel(CFG).run([wr(1, 2, 0), mac(2, 0, 0, 0)], wdata=[0])
    kinds = [e.opcode for e in r.trace]
    # WR opened bank 1 at row 2; the MAC needs all banks at row 2: PRE bank 1, ACT all
    assert kinds == [Opcode.ACT, Opcode.WR, Opcode.PRE, Opcode.ACT, Opcode.MAC]


def test_arrival_and_write_data_delay_issue():
    r = ChannelModel(CFG).run([wr_inp(0)], wdata=[0], cmd_arrivals=[5], wdata_arrivals=[9])
    assert issue_cycles(r, Opcode.WR_INP) == [10]


def test_read_credits_limit_outstanding_reads():
    cfg = CFG.replace(rdata_depth=1, t_rd_out=1)
    r = ChannelModel(cfg).run([rd_out(0), rd_out(0)], rdata_pops=[20, 21])
    assert issue_cycles(r, Opcode.RD_OUT) == [1, 21]


def test_mac_accumulates_and_rd_out_clears():
    rng = np.random.default_rng(0)
    w = nm.float_to_bf16(rng.standard_normal((2, 16)))
    x = nm.float_to_bf16(rng.standard_normal(16))
    beats = [nm.lanes_to_word(w[0]), nm.lanes_to_word(w[1]), nm.lanes_to_word(x)]
    r = ChannelModel(CFG).run([wr(0, 0, 0), wr(1, 0, 0), wr_inp(1), mac(0, 0, 1, 1),
                               mac(0, 0, 1, 1), rd_out(1), rd_out(1)], wdata=beats)
    once = nm.mac(np.zeros(2, np.uint32), w, x)
    twice = nm.mac(once, w, x)
    assert nm.words_to_lanes(r.rdata[0])[:2].tolist() == nm.f32_to_bf16(twice).tolist()
    assert r.rdata[1] == 0


def test_rd_returns_written_word():
    r = ChannelModel(CFG).run([wr(1, 7, 3), rd(1, 7, 3), rd(0, 7, 3)], wdata=[0xABCDEF << 40])
    assert r.rdata == [0xABCDEF << 40, 0]


@pytest.mark.parametrize("cmd, code", [
    (Command(0), ErrorCode.BAD_OPCODE),
    (Command(Opcode.DYN_LOOP), ErrorCode.BAD_OPCODE),
    (Command(Opcode.PRE), ErrorCode.BAD_OPCODE),
    (Command(31 - 2), ErrorCode.BAD_OPCODE),
    (wr(2, 0, 0), ErrorCode.BANK_RANGE),
    (rd(0, 8, 0), ErrorCode.ROW_RANGE),
    (rd(0, 0, 4), ErrorCode.COL_RANGE),
    (wr_inp(4), ErrorCode.GBUF_RANGE),
    (mac(0, 0, 0, 2), ErrorCode.OBUF_RANGE),
    (rd_out(2), ErrorCode.OBUF_RANGE),
])
def test_bad_command_is_dropped_recorded_and_later_commands_run(cmd, code):
    wdata = [1] if cmd.opcode in (Opcode.WR, Opcode.WR_INP) else []
    model = ChannelModel(CFG)
    r = model.run([cmd, wr_inp(0), rd_out(0)], wdata=wdata + [2])
    assert r.status.err_code == code and r.status.err_id == 0 and r.errors == [(0, code)]
    assert [e.opcode for e in r.trace] == [Opcode.WR_INP, Opcode.RD_OUT]
    assert not model.rows and (model.gbuf[0] == nm.words_to_lanes(2)).all()
    with pytest.raises(CommandError, match="out of range|not a channel command") as e:
        ChannelModel(CFG, strict=True).run([cmd], wdata=wdata)
    assert e.value.code == code


def test_first_error_is_sticky():
    r = ChannelModel(CFG).run([rd_out(3), Command(0)])
    assert r.status.err_code == ErrorCode.OBUF_RANGE and r.status.err_count == 2


def test_gemv_matches_numpy():
    cfg = small_config()
    rng = np.random.default_rng(7)
    W = nm.float_to_bf16(rng.standard_normal((32, 64)))
    x = nm.float_to_bf16(rng.standard_normal(64))
    cmds, beats = gemv_commands(W, x, cfg)
    r = ChannelModel(cfg).run(cmds, beats)
    y = nm.bf16_to_float(gemv_result(r.rdata, 32, cfg.banks))
    expect = nm.bf16_to_float(W) @ nm.bf16_to_float(x)
    np.testing.assert_allclose(y, expect, rtol=2**-7, atol=1e-3)
    assert r.mac_count == 32 // cfg.banks * 64 // 16


def test_docs_worked_example():
    """docs/channel.md, 'Worked example': the table is this run."""
    r = ChannelModel(small_config()).run(
        [wr_inp(0), mac(3, 0, 0, 0), mac(3, 1, 0, 0), rd_out(0)], wdata=[0])
    assert [(e.opcode.name, e.cycle) for e in r.trace] == [
        ("WR_INP", 1), ("ACT", 2), ("MAC", 58), ("MAC", 60), ("RD_OUT", 68)]


def test_mode_switches_by_hand():
    """A device with modes (docs/timing.md): WR-INP and RD-OUT in register
    mode, the rest in normal mode; each switch is a MODE entry, after which
    nothing issues for t_modch. A switch issues only once what it switches
    for could (the RD-OUT's switch waits the MAC's execution time, 124 + 8).
    The worked example above, with t_modch 32."""
    r = ChannelModel(small_config().replace(t_modch=32)).run(
        [wr_inp(0), mac(3, 0, 0, 0), mac(3, 1, 0, 0), rd_out(0)], wdata=[0])
    assert [(e.opcode.name, e.cycle) for e in r.trace] == [
        ("MODE", 1), ("WR_INP", 33),
        ("MODE", 34), ("ACT", 66), ("MAC", 122), ("MAC", 124),
        ("MODE", 132), ("RD_OUT", 164)]


def _refresh_checks(cfg, r):
    """The trace of a run with refresh: the k-th REF within the bound after
    k * tREFI, only the refresh's own MODE/PRE from its due cycle to its
    REF, every row closed at the REF, no ACT within tRFC after it."""
    from golden.banks import BankTimer
    from golden.config import refresh_bound
    from golden.isa import REFRESH_ID

    tm = cfg.timing
    refs = [e.cycle for e in r.trace if e.opcode == Opcode.REF]
    assert refs and all(e.cmd_id == REFRESH_ID for e in r.trace if e.opcode == Opcode.REF)
    for k, cycle in enumerate(refs, start=1):
        assert k * tm.t_refi <= cycle < k * tm.t_refi + refresh_bound(tm)
        inside = [e for e in r.trace if k * tm.t_refi <= e.cycle < cycle]
        assert all(e.cmd_id == REFRESH_ID and e.opcode in (Opcode.MODE, Opcode.PRE)
                   for e in inside), inside
        acts = [e.cycle for e in r.trace if e.opcode == Opcode.ACT and e.cycle > cycle]
        assert not acts or acts[0] >= cycle + tm.t_rfc
    open_rows = BankTimer(cfg.banks, tm)  # replay the open rows: all closed at a REF
    for e in r.trace:
        if e.opcode == Opcode.REF:
            assert all(row is None for row in open_rows.open_row), e
        elif e.opcode == Opcode.PRE and e.cmd_id == REFRESH_ID and e.cycle >= tm.t_refi:
            open_rows.open_row = [None] * cfg.banks
        elif e.opcode in (Opcode.PRE, Opcode.ACT):
            open_rows.open_row = [None if e.opcode == Opcode.PRE else 0] * cfg.banks
    return refs


@pytest.mark.parametrize("policy", ["static", "pingpong", "dcs"])
@pytest.mark.parametrize("modch", [0, 16])
def test_refresh_closes_the_rows_and_holds_the_banks(policy, modch):
    """Periodic all-bank refresh (docs/timing.md): on a GEMV long enough for
    several refreshes, every REF is on time and alone on the bus, the rows
    are closed before it and stay closed tRFC after it; the results are the
    run's without refresh, later."""
    cfg = small_config().replace(policy=policy, t_modch=modch)
    rng = np.random.default_rng(3)
    W = nm.float_to_bf16(rng.standard_normal((64, 128)))
    x = nm.float_to_bf16(rng.standard_normal(128))
    cmds, beats = gemv_commands(W, x, cfg)
    plain = ChannelModel(cfg).run(cmds, beats)
    ref_cfg = cfg.replace(t_refi=700, t_rfc=60)
    r = ChannelModel(ref_cfg).run(cmds, beats)
    refs = _refresh_checks(ref_cfg, r)
    assert len(refs) == (r.trace[-1].cycle) // 700 >= 3
    assert r.rdata == plain.rdata and r.cycles > plain.cycles
    assert [e.cmd_id for e in r.trace if e.opcode not in DEVICE_ACTIONS] == \
        [e.cmd_id for e in plain.trace if e.opcode not in DEVICE_ACTIONS]


def test_refresh_config_is_checked():
    from golden.config import ConfigError

    with pytest.raises(ConfigError, match="t_refi and timing.t_rfc go together"):
        small_config().replace(t_refi=700)
    with pytest.raises(ConfigError, match="t_refi=100 must exceed"):
        small_config().replace(t_refi=100, t_rfc=60)


# ---- dual-path banks (LibraPIM DEX, docs/dual-path.md) ---------------------------

DEX_TIMING = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2)
DEX = ChannelConfig(banks=2, rows=8, cols=4, gbuf_entries=4, obuf_entries=2,
                    timing=DEX_TIMING, dual_path=True)


def _trace(cfg, cmds, wdata=()):
    r = ChannelModel(cfg).run(cmds, list(wdata))
    return [(t.opcode.name, t.cycle) for t in r.trace], r.cycles


def test_dual_path_read_beside_mac_by_hand():
    """MAC (row 5), RD (bank 0, row 1), MAC (row 5): unsliced, the RD closes
    bank 0's MAC row and the second MAC reopens it; sliced at row 4, the
    read's partition has its own row and the MACs keep theirs."""
    cmds = [mac(5, 0, 0, 0), rd(0, 1, 0), mac(5, 1, 0, 0)]
    assert _trace(DEX, cmds) == ([
        ("ACT", 1), ("MAC", 6),  # ACT all, tRCD 5
        ("PRE", 10), ("ACT", 14), ("RD", 19),  # tRAS from 1; tRP 4; tRCD 5
        ("PRE", 23), ("ACT", 27), ("MAC", 32)], 33)  # tRAS from bank 0's ACT at 14
    assert _trace(DEX.replace(slice_rows=4), cmds) == ([
        ("ACT", 1), ("MAC", 6),
        ("ACT", 7), ("RD", 12),  # bank 0's weight partition: no wait on the MAC
        ("MAC", 14)], 15)  # tCCD after the RD; its row stayed open


def test_dual_path_same_partition_serializes():
    """A RD into the MAC's partition conflicts exactly like an unsliced bank."""
    cmds = [mac(5, 0, 0, 0), rd(0, 6, 0), mac(5, 1, 0, 0)]
    assert _trace(DEX.replace(slice_rows=4), cmds) == _trace(DEX, cmds)


def test_act_ahead_and_tfaw_by_hand():
    """ACT-AHEAD opens a row and ends the cycle after (no column access);
    the fifth ACT waits for tFAW after the first."""
    cfg = DEX.replace(banks=4, slice_rows=4)
    cmds = [act_ahead(b, 0) for b in range(4)] + [act_ahead(0, 5), rd(0, 5, 0)]
    assert _trace(cfg, cmds) == ([("ACT", 1), ("ACT", 3), ("ACT", 5), ("ACT", 7), ("ACT", 9),
                                  ("RD", 14)], 15)
    assert _trace(cfg.replace(t_faw=20), cmds) == ([
        ("ACT", 1), ("ACT", 3), ("ACT", 5), ("ACT", 7), ("ACT", 21), ("RD", 26)], 27)
    # an open row: ACT-AHEAD ends at once and the RD needs nothing more
    assert _trace(cfg, [act_ahead(1, 2), act_ahead(1, 2), rd(1, 2, 3)]) == (
        [("ACT", 1), ("RD", 6)], 7)


def test_act_ahead_needs_dual_path_banks():
    r = ChannelModel(DEX.replace(dual_path=False)).run([act_ahead(0, 1)])
    assert [code for _, code in r.errors] == [ErrorCode.BAD_OPCODE]
    r = ChannelModel(DEX).run([act_ahead(2, 1), act_ahead(0, 8)])
    assert [code for _, code in r.errors] == [ErrorCode.BANK_RANGE, ErrorCode.ROW_RANGE]


def test_dual_path_data_is_the_same_sliced_or_not():
    """Slicing changes timing only: the read beats are identical."""
    rng = np.random.default_rng(3)
    cmds, wdata = dex_stream(DEX, 6, rng, split=4, bad=0.1)
    a = ChannelModel(DEX).run(cmds, wdata)
    b = ChannelModel(DEX.replace(slice_rows=4)).run(cmds, wdata)
    assert a.rdata == b.rdata and a.errors == b.errors
    assert b.cycles < a.cycles


@pytest.mark.parametrize("policy", ["static", "dcs"])
def test_batched_macs_equal_one_mac_per_issue(policy):
    """The model settles MACs in batches (golden.channel.ChannelModel._settle);
    replaying its issue trace with one numerics.mac per MAC, at issue, with
    the bank and GBuf contents of that moment, gives the same read beats
    and the same OBuf."""
    from tb.stimulus import random_stream

    cfg = ChannelConfig(policy=policy)
    rng = np.random.default_rng(5)
    cmds, wdata = random_stream(cfg, 3000, rng, bad=0.0, shape="dense")
    model = ChannelModel(cfg)
    result = model.run(cmds, wdata)
    gbuf = np.zeros((cfg.gbuf_entries, 16), np.uint16)
    obuf = np.zeros((cfg.obuf_entries, cfg.banks), np.uint32)
    rows: dict = {}
    beats = iter(wdata)
    rdata = []
    for e in result.trace:
        if e.opcode in DEVICE_ACTIONS:
            continue
        c = cmds[e.cmd_id]
        if e.opcode == Opcode.WR_INP:
            gbuf[c.gbuf_idx] = nm.words_to_lanes(next(beats))
        elif e.opcode == Opcode.WR:
            rows.setdefault((c.bank, c.row), np.zeros((cfg.cols, 16), np.uint16))[c.col] = \
                nm.words_to_lanes(next(beats))
        elif e.opcode == Opcode.MAC:
            w = np.stack([rows.get((b, c.row), np.zeros((cfg.cols, 16), np.uint16))[c.col]
                          for b in range(cfg.banks)])
            obuf[c.out_idx] = nm.mac(obuf[c.out_idx], w, gbuf[c.gbuf_idx])
        elif e.opcode == Opcode.RD_OUT:
            lanes = np.zeros(16, np.uint16)
            lanes[:cfg.banks] = nm.f32_to_bf16(obuf[c.out_idx])
            obuf[c.out_idx] = 0
            rdata.append(nm.lanes_to_word(lanes))
        elif e.opcode == Opcode.RD:
            word = rows.get((c.bank, c.row), np.zeros((cfg.cols, 16), np.uint16))[c.col]
            rdata.append(nm.lanes_to_word(word))
    assert sum(e.opcode == Opcode.MAC for e in result.trace) > 1000
    assert rdata == result.rdata
    assert np.array_equal(obuf, model.obuf)
