"""golden.timing, the constraint table, in the style of Ramulator 2.1's
device-timing tests: for every constraint a directed case where a
following command is blocked one cycle before its earliest cycle and
allowed at it (golden here; the RTL's BankTiming on the same cases in
tests/test_hw_banks.py). A constraint without a case fails the test."""

import dataclasses

import pytest

from golden.banks import BankTimer, kind_of
from golden.config import OPTIONAL_TIMING, Timing
from golden.isa import Opcode
from golden.timing import RULES, Constraint, constraints, table

T = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2, t_faw=30,
           t_rc=16, t_rtp=7, t_wr=9, t_wtr=6, t_ccd_l=4, t_rrd_s=3, t_rrd_l=5, t_modch=11,
           t_refi=200, t_rfc=13, t_ccd_reg=3, t_wtr_reg=8, t_rtw_reg=4)
UNITS, GROUPS = 8, 2  # banks 0-3 in group 0, 4-7 in group 1

#: per constraint key: the commands issued (cycle, kind, bank, row) and the
#: probe (kind, bank, row) with the cycle the constraint sets for it (every
#: other constraint allows the probe earlier)
CASES = {
    "t_ras": ([(0, "ACT", 0, 1)], ("PRE", 0, 2), 9),
    "t_rp": ([(0, "ACT", 0, 1), (20, "PRE", 0, 2)], ("ACT", 0, 2), 20 + 4),
    "t_rc": ([(0, "ACT", 0, 1), (9, "PRE", 0, 2)], ("ACT", 0, 2), 16),
    "t_rcd": ([(0, "ACT", 0, 1)], ("RD", 0, 1), 5),
    "t_rtp": ([(0, "ACT", 0, 1), (5, "RD", 0, 1)], ("PRE", 0, 2), 5 + 7),
    "t_wr": ([(0, "ACT", 0, 1), (5, "WR", 0, 1)], ("PRE", 0, 2), 5 + 9),
    "t_ccd": ([(0, "ACT", 0, 1), (3, "ACT", 4, 1), (7, "RD", 0, 1)], ("RD", 4, 1), 7 + 2),
    "t_ccd_l": ([(0, "ACT", 0, 1), (5, "ACT", 1, 1), (10, "RD", 0, 1)], ("RD", 1, 1), 10 + 4),
    "t_wtr": ([(0, "ACT", 0, 1), (3, "ACT", 4, 1), (7, "WR", 0, 1)], ("RD", 4, 1), 7 + 6),
    "t_rrd_s": ([(0, "ACT", 0, 1)], ("ACT", 4, 1), 3),
    "t_rrd_l": ([(0, "ACT", 0, 1)], ("ACT", 1, 1), 5),
    "t_faw": ([(0, "ACT", 0, 1), (3, "ACT", 4, 1), (6, "ACT", 1, 1), (9, "ACT", 5, 1)],
              ("ACT", 2, 1), 30),
    "t_ccd_reg": ([(5, "REG", 0, 0)], ("REG", 0, 0), 5 + 3),
    "t_wtr_reg": ([(5, "GB", 0, 0)], ("REG", 0, 0), 5 + 8),
    "t_rtw_reg": ([(5, "REG", 0, 0)], ("GB", 0, 0), 5 + 4),
    "t_modch": ([(0, "MODE", 0, 0)], ("ACT", 0, 1), 11),
    "t_rfc": ([(0, "REF", 0, 0)], ("ACT", 0, 1), 13),
}
#: a refresh waits the bank rules of an ACT: (issued, probe, earliest)
REF_CASES = {
    "t_rp": ([(0, "ACT", 0, 1), (20, "PRE", 0, 2)], ("REF", 0, 0), 20 + 4),
    "t_rc": ([(0, "ACT", 0, 1), (9, "PRE", 0, 2)], ("REF", 0, 0), 16),
    "t_rfc": ([(0, "REF", 0, 0)], ("REF", 0, 0), 13),
}
#: the mode switch holds back every kind, the register accesses included
MODE_FOLLOWERS = ("PRE", "ACT", "RD", "WR", "GB", "REG", "MODE", "REF")


def golden_earliest(key: str, timing: Timing = T, cases=CASES) -> int:
    issued, (kind, bank, _row), _ = cases[key]
    timer = BankTimer(UNITS, timing, bank_groups=GROUPS)
    for cycle, k, b, row in issued:
        assert timer.earliest(k, [b]) <= cycle, (key, cycle, k)
        timer.apply(k, [b], cycle, row)
    return timer.earliest(kind, [bank])


def test_every_constraint_has_a_case():
    assert {c.key for c in constraints(T)} == set(CASES) == {r[0] for r in RULES}


@pytest.mark.parametrize("key", sorted(CASES))
def test_constraint_blocks_until_its_latency(key):
    assert golden_earliest(key) == CASES[key][2]


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_case_depends_on_its_constraint(key):
    """One cycle more of the constraint's latency moves the earliest cycle
    by one: the case measures that constraint, not another."""
    longer = dataclasses.replace(T, **{key: getattr(T, key) + 1})
    assert golden_earliest(key, longer) == CASES[key][2] + 1


@pytest.mark.parametrize("key", sorted(REF_CASES))
def test_a_refresh_waits_like_an_act(key):
    """REF (at every bank) waits tRP after a PRE and tRC after an ACT of
    any bank, and tRFC after the last REF; one cycle more moves it by one."""
    assert golden_earliest(key, cases=REF_CASES) == REF_CASES[key][2]
    longer = dataclasses.replace(T, **{key: getattr(T, key) + 1})
    assert golden_earliest(key, longer, REF_CASES) == REF_CASES[key][2] + 1


@pytest.mark.parametrize("kind", MODE_FOLLOWERS)
def test_a_mode_switch_holds_back_every_kind(kind):
    timer = BankTimer(UNITS, T, bank_groups=GROUPS)
    timer.apply("MODE", [], 4, 0)
    banks = [] if kind in ("GB", "REG", "MODE") else [0]
    assert timer.earliest(kind, banks) == 4 + T.t_modch


def test_modes_decide_the_next_action():
    """A device with modes starts in normal mode; WR-INP and RD-OUT need
    register-access mode, the rest normal mode: the next action is a MODE
    switch when the device is in the other one."""
    from golden.streams import mac, rd_out, wr_inp

    timer = BankTimer(UNITS, T, bank_groups=GROUPS)
    assert timer.next_action(Opcode.WR_INP, wr_inp(0)) == (Opcode.MODE, [])
    assert timer.next_action(Opcode.MAC, mac(1, 0, 0, 0))[0] == Opcode.ACT
    timer.apply(Opcode.MODE, [], 0, 0)
    assert timer.next_action(Opcode.RD_OUT, rd_out(0)) is None
    assert timer.next_action(Opcode.MAC, mac(1, 0, 0, 0)) == (Opcode.MODE, [])
    no_modes = BankTimer(UNITS, dataclasses.replace(T, t_modch=0), bank_groups=GROUPS)
    assert no_modes.next_action(Opcode.WR_INP, wr_inp(0)) is None


def test_optional_constraints_leave_the_table_when_zero():
    off = dataclasses.replace(T, **dict.fromkeys(OPTIONAL_TIMING, 0))
    assert [r["key"] for r in table(off)] == ["t_ras", "t_rp", "t_rcd", "t_ccd"]
    assert [r["key"] for r in table(T)] == [r[0] for r in RULES]


def test_opcodes_map_to_kinds():
    ops = (Opcode.PRE, Opcode.ACT, Opcode.WR, Opcode.RD, Opcode.MAC, Opcode.WR_INP,
           Opcode.RD_OUT, Opcode.MODE, Opcode.REF)
    assert [kind_of(op) for op in ops] == ["PRE", "ACT", "WR", "RD", "RD", "GB", "REG", "MODE",
                                           "REF"]
    with pytest.raises(ValueError, match="command kind 'COL'"):
        kind_of("COL")


def test_bad_constraints_are_refused():
    with pytest.raises(ValueError, match="level 'rank'"):
        Constraint("t_x", "rank", ("ACT",), ("PRE",), 3)
    with pytest.raises(ValueError, match="command kind 'REFRESH'"):
        Constraint("t_x", "bank", ("REFRESH",), ("ACT",), 3)
    with pytest.raises(ValueError, match="level 'rank'"):
        Constraint("t_x", "rank", ("ACT",), ("ACT",), 3)
    with pytest.raises(ValueError, match="latency and window"):
        Constraint("t_x", "bank", ("ACT",), ("PRE",), 0)


def test_channel_level_cases_of_every_rule():
    """tb.stimulus.device_rule_cases, on the golden channel of the dual-path
    test channel (every rule on): each case's event moves one cycle later
    with one cycle more of its rule, and every rule of that table has a case
    (tb/test_dex.py runs them on the RTL under both simulators)."""
    from golden.channel import ChannelModel
    from sim.generate import dex_test_config
    from tb.stimulus import device_rule_cases, writes_of

    cfg = dex_test_config()
    cases = device_rule_cases()
    assert set(cases) == {c.key for c in constraints(cfg.timing)}

    def placed(c, cmds, op, k):
        trace = ChannelModel(c).run(cmds, writes_of(cmds)).trace
        return [e.cycle for e in trace if e.opcode == op][k]

    for key, (cmds, op, k, split) in cases.items():
        at = cfg.replace(slice_rows=split)
        longer = at.replace(**{key: getattr(cfg.timing, key) + 1})
        assert placed(longer, cmds, op, k) == placed(at, cmds, op, k) + 1, key
