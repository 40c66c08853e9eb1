"""hw.banks.BankTiming under the Amaranth simulator against its
specification, golden.banks.BankTimer: random commands (all-bank sets and
single banks, row hits and misses), each issued as soon as the RTL allows;
every PRE / ACT names the banks golden names, and every action issues in
the earliest cycle golden allows."""

import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden.banks import BankTimer
from golden.config import Timing
from golden.isa import Opcode
from hw.banks import BankTiming
from tests import test_golden_timing as timing_cases

TIMING = Timing(t_rcd=5, t_rp=4, t_ras=9, t_ccd=2, t_wr_inp=2, t_mac=3, t_rd_out=2)


def _bits(mask: int, n: int) -> list[int]:
    return [b for b in range(n) if mask >> b & 1]


def play(units: int, rows: int, timing: Timing, commands, ref_timing: Timing | None = None,
         groups: int = 1):
    """Issue ``commands`` ((touched mask, row, as_set, first cycle[, write]))
    one after another on the RTL, each action as soon as it is allowed;
    check each against golden (at ``ref_timing``, by default the same);
    return the (kind, banks, cycle) issued."""
    dut = BankTiming(units, rows, timing, bank_groups=groups)
    ref = BankTimer(units, ref_timing or timing, bank_groups=groups)
    log = []

    async def bench(ctx):
        cycle = 0
        for touched, row, as_set, start, *write in commands:
            write = bool(write and write[0])
            ctx.set(dut.touched, touched)
            ctx.set(dut.row, row)
            ctx.set(dut.as_set, as_set)
            ctx.set(dut.col_write, write)
            banks = _bits(touched, units)
            while cycle < start:
                await ctx.tick()
                cycle += 1
            while True:
                want = ref.action_for(banks, row, as_set)
                pre, act = ctx.get(dut.pre_mask), ctx.get(dut.act_mask)
                got = (Opcode.PRE, _bits(pre, units)) if pre else \
                    (Opcode.ACT, _bits(act, units)) if act else None
                assert got == want, (cycle, got, want)
                kind, which = want if want else (Opcode.RD, banks)  # the column access
                ok = ctx.get({Opcode.PRE: dut.pre_ok, Opcode.ACT: dut.act_ok}
                             .get(kind, dut.col_ok))
                ref_kind = ("WR" if write else "RD") if kind == Opcode.RD else kind
                allowed = ref.earliest(ref_kind, which) <= cycle
                assert bool(ok) == allowed, (cycle, kind, which, ok)
                ctx.set(dut.do_pre, ok and kind == Opcode.PRE)
                ctx.set(dut.do_act, ok and kind == Opcode.ACT)
                ctx.set(dut.do_col, ok and kind == Opcode.RD)
                if ok:
                    ref.apply(ref_kind, which, cycle, row)
                    log.append((kind, which, cycle))
                await ctx.tick()
                cycle += 1
                ctx.set(dut.do_pre, 0)
                ctx.set(dut.do_act, 0)
                ctx.set(dut.do_col, 0)
                if ok and kind == Opcode.RD:
                    break

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return log


def random_commands(rng, units, rows, n, all_bank_share=0.4):
    out, start = [], 0
    for _ in range(n):
        if rng.random() < all_bank_share:
            touched, as_set = (1 << units) - 1, True
        else:
            touched, as_set = 1 << int(rng.integers(units)), False
        row = int(rng.integers(rows)) if rng.random() < 0.6 else 0  # many row hits
        start += int(rng.integers(0, 4))
        write = not as_set and rng.random() < 0.4
        out.append((touched, row, as_set, start, write))
    return out


@pytest.mark.parametrize("faw", [0, 20])
def test_bank_timing_matches_golden(faw):
    rng = np.random.default_rng(7 + faw)
    timing = dataclasses.replace(TIMING, t_faw=faw)
    log = play(4, 8, timing, random_commands(rng, 4, 8, 120))
    kinds = [k for k, _, _ in log]
    assert kinds.count(Opcode.PRE) > 10 and kinds.count(Opcode.ACT) > 10  # misses happened
    assert kinds.count(Opcode.RD) == 120


def test_every_rule_and_bank_groups_match_golden():
    """Every optional rule on (tRC, tRTP, tWR, tWTR, tCCD_L, tRRD_S,
    tRRD_L, tFAW), two bank groups, reads and writes: the RTL against
    golden on random commands. Refresh is the controllers' (it takes the
    bus: tests/test_hw_channel.py), so it is off here."""
    rng = np.random.default_rng(11)
    no_refresh = dataclasses.replace(timing_cases.T, t_refi=0, t_rfc=0)
    log = play(8, 8, no_refresh, random_commands(rng, 8, 8, 150, all_bank_share=0.2),
               groups=timing_cases.GROUPS)
    assert [k for k, _, _ in log].count(Opcode.RD) == 150


def test_tfaw_holds_back_the_fifth_act():
    """Row misses rotating over the banks put ACTs back to back: the fifth
    waits for tFAW after the first, in the RTL as in golden."""
    timing = dataclasses.replace(TIMING, t_faw=40)  # longer than four ACTs and their RDs
    cmds = [(1 << (k % 4), 1 + k % 7, False, 0) for k in range(24)]
    log = play(4, 8, timing, cmds)
    acts = [c for k, _, c in log if k == Opcode.ACT]
    assert any(acts[i + 4] - acts[i] == 40 for i in range(len(acts) - 4))  # tFAW bound


def test_partitioned_units():
    """Eight units (four dual-path banks, two partitions each), one
    command at a time on any unit: the rules hold per unit."""
    rng = np.random.default_rng(3)
    log = play(8, 8, TIMING, random_commands(rng, 8, 8, 80, all_bank_share=0.1))
    assert len({tuple(b) for k, b, _ in log if k == Opcode.ACT}) > 4


def test_a_broken_rule_fails():
    """The check can fail: against a golden model with tRCD one cycle
    longer, the RTL's column access comes a cycle early."""
    rng = np.random.default_rng(1)
    slow = dataclasses.replace(TIMING, t_rcd=TIMING.t_rcd + 1)
    with pytest.raises(AssertionError):
        play(4, 8, TIMING, random_commands(rng, 4, 8, 10), ref_timing=slow)


@pytest.mark.parametrize("key", sorted(timing_cases.CASES))
def test_every_constraint_blocks_until_its_latency(key):
    """tests/test_golden_timing.py's directed case of each constraint on the
    RTL: the probe is refused one cycle before the constraint's earliest
    cycle and allowed at it (Ramulator 2.1's device-timing form)."""
    _run_case(*timing_cases.CASES[key])


@pytest.mark.parametrize("kind", timing_cases.MODE_FOLLOWERS)
def test_a_mode_switch_holds_back_every_kind(kind):
    """After a MODE switch at cycle 0 nothing issues for t_modch, the
    register accesses (GB: WR-INP, REG: RD-OUT) and another switch included."""
    bank = 0 if kind in ("PRE", "RD", "WR") else 1
    opened = [(0, "ACT", bank, 3)] if kind in ("PRE", "RD", "WR") else []
    switch = 30  # past every rule of the ACT
    row = {"PRE": 4, "RD": 3, "WR": 3}.get(kind, 2)  # PRE: a miss; RD, WR: the open row
    _run_case([*opened, (switch, "MODE", 0, 0)], (kind, bank, row),
              switch + timing_cases.T.t_modch)


def _run_case(issued, probe, expect):
    """Issue ``issued`` (cycle, kind, unit, row) on BankTiming and check that
    the probe (kind, unit, row) is refused one cycle before ``expect`` and
    allowed at it."""
    kind, bank, row = probe
    dut = BankTiming(timing_cases.UNITS, 8, timing_cases.T, bank_groups=timing_cases.GROUPS)
    flag = {"PRE": dut.pre_ok, "ACT": dut.act_ok, "RD": dut.col_ok, "WR": dut.col_ok,
            "GB": dut.gb_ok, "REG": dut.reg_ok, "MODE": dut.mode_ok, "REF": dut.ref_ok}
    do = {"PRE": dut.do_pre, "ACT": dut.do_act, "RD": dut.do_col, "WR": dut.do_col,
          "GB": dut.do_gb, "REG": dut.do_reg, "MODE": dut.do_mode, "REF": dut.do_ref}
    seen = {}

    async def bench(ctx):
        def present(k, b, r):
            unitless = k in ("GB", "REG", "MODE", "REF")
            ctx.set(dut.touched, 0 if unitless else 1 << b)
            ctx.set(dut.row, r)
            ctx.set(dut.as_set, 0)
            ctx.set(dut.col_write, k == "WR")
            ctx.set(dut.col_gb, k == "GB")
            ctx.set(dut.col_reg, k == "REG")
            want = {"PRE": dut.pre_mask, "ACT": dut.act_mask}
            if k in want:
                assert ctx.get(want[k]) == 1 << b, (k, b, r)
            else:
                assert ctx.get(dut.pre_mask) == 0 and ctx.get(dut.act_mask) == 0

        cycle = 0
        for at, k, b, r in issued:
            while cycle < at:
                await ctx.tick()
                cycle += 1
            present(k, b, r)
            assert ctx.get(flag[k]), (issued, cycle, k)
            ctx.set(do[k], 1)
            await ctx.tick()
            cycle += 1
            for s in do.values():
                ctx.set(s, 0)
        while cycle <= expect:
            present(kind, bank, row)
            seen[cycle] = ctx.get(flag[kind])
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen[expect - 1] == 0 and seen[expect] == 1, seen
