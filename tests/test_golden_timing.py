"""golden.timing, the constraint table, in the style of Ramulator 2.1's
device-timing tests: for every constraint a directed case where a
following command is blocked one cycle before its earliest cycle and
allowed at it (golden here; the RTL's BankTiming on the same cases in
tests/test_hw_banks.py). A constraint without a case fails the test."""

import dataclasses

import pytest

from golden.banks import BankTimer
from golden.config import Timing
from golden.isa import Opcode
from golden.timing import RULES, Constraint, constraints, table

T = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=3, t_wr_inp=2, t_mac=3, t_rd_out=2, t_faw=20)
KIND = {"PRE": Opcode.PRE, "ACT": Opcode.ACT, "COL": Opcode.RD}

#: per constraint key: the commands issued (cycle, kind, bank, row) and the
#: probe (kind, bank, row) with the cycle the constraint sets for it
CASES = {
    "t_ras": ([(0, "ACT", 0, 1)], ("PRE", 0, 2), T.t_ras),
    "t_rp": ([(0, "ACT", 0, 1), (9, "PRE", 0, 2)], ("ACT", 0, 2), 9 + T.t_rp),
    "t_rcd": ([(0, "ACT", 0, 1)], ("COL", 0, 1), T.t_rcd),
    "t_ccd": ([(0, "ACT", 0, 1), (1, "ACT", 1, 1), (6, "COL", 1, 1)], ("COL", 0, 1),
              6 + T.t_ccd),
    "t_faw": ([(i, "ACT", i, 1) for i in range(4)], ("ACT", 4, 1), T.t_faw),
}
UNITS = 8


def golden_earliest(key: str, timing: Timing = T) -> int:
    issued, (kind, bank, _row), _ = CASES[key]
    timer = BankTimer(UNITS, timing)
    for cycle, k, b, row in issued:
        assert timer.earliest(KIND[k], [b]) <= cycle, (key, cycle, k)
        timer.apply(KIND[k], [b], cycle, row)
    return timer.earliest(KIND[kind], [bank])


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


def test_optional_constraints_leave_the_table_when_zero():
    assert "t_faw" not in {c.key for c in constraints(dataclasses.replace(T, t_faw=0))}
    assert [r["key"] for r in table(T)] == ["t_ras", "t_rp", "t_rcd", "t_ccd", "t_faw"]


def test_bad_constraints_are_refused():
    with pytest.raises(ValueError, match="level 'rank'"):
        Constraint("t_x", "rank", ("ACT",), ("PRE",), 3)
    with pytest.raises(ValueError, match="command kind 'REF'"):
        Constraint("t_x", "bank", ("REF",), ("ACT",), 3)
    with pytest.raises(ValueError, match="latency and window"):
        Constraint("t_x", "bank", ("ACT",), ("PRE",), 0)
