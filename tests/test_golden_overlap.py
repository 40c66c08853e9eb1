"""The xPU's weight reads beside PIM attention on dual-row-buffer banks
(golden/system/overlap.py) and NeuPIMs' sub-batch interleaving in the
xPU+PIM decode step (golden/system/model.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from golden.banks import BankTimer
from golden.config import ConfigError, load_profile
from golden.system import overlap
from golden.system.kernel_timing import KernelTimer, Shape
from golden.system.model import Assumptions, decode_step, neupims_segments
from golden.timing import REGISTER_KINDS

CFG = load_profile("gddr6-aim").replace(t_refi=0, t_rfc=0)
SHAPES = [Shape("qkt", 128, 1), Shape("sv", 128, 1), Shape("qkt", 128, 4), Shape("sv", 128, 4)]


class _Recorder(BankTimer):
    """A BankTimer that records what the reads issue (for the replay)."""

    log: list

    def apply(self, kind, banks, cycle, row):
        self.log.append((cycle, kind, list(banks), row))
        super().apply(kind, banks, cycle, row)


def _merged(cfg, kernel, reads, banks="dual", events=None, stop=None):
    """Every command of the merge, PIM and reads, as (cycle, kind, units, row)."""
    cycles = None
    if events is None:
        events, cycles = overlap.pim_trace(cfg, kernel)
    log: list = []
    _Recorder.log = log
    real = overlap.BankTimer
    overlap.BankTimer = _Recorder
    try:
        out = overlap.fill(cfg, events, reads, stop=stop, banks=banks)
    finally:
        overlap.BankTimer = real
    return log, out, cycles


@pytest.mark.parametrize("shape", SHAPES, ids=Shape.key)
def test_merged_schedule_keeps_every_rule(shape):
    """Replayed through a fresh timer, the merge of the PIM's commands and
    the reads breaks no rule of the constraint table, puts one command per
    cycle on the bus, issues no read in register-access mode, and moves
    no PIM command from where it ran alone."""
    kernel = shape.build(CFG, 3)
    events, _ = overlap.pim_trace(CFG, kernel)
    log, out, _ = _merged(CFG, kernel, 400)
    assert out["reads"] == 400
    fixed = set(events)
    pim = [e for e in log if (e[0], e[1]) in fixed and not (e[2] and e[2][0] < CFG.banks)]
    reads = [e for e in log if e not in pim]  # the reads' commands (their own units, a MODE)
    assert all(k == "MODE" or units[0] < CFG.banks for _, k, units, _ in reads)
    assert [(c, k) for c, k, *_ in pim] == sorted(events)
    assert sum(k == "RD" for _, k, *_ in reads) == 400
    cycles = [c for c, *_ in log]
    assert len(cycles) == len(set(cycles)), "two commands in one cycle"
    replay = BankTimer(CFG.banks, CFG.timing, slice_rows=1, bank_groups=CFG.bank_groups)
    mine = {id(e) for e in reads}
    for e in sorted(log, key=lambda e: e[0]):
        c, k, units, row = e
        assert replay.earliest(k, units) <= c, f"{k} at {c} breaks a rule"
        if id(e) in mine and k != "MODE":
            assert not replay.register_mode, f"read-side {k} at {c} in register mode"
        replay.apply(k, units, c, row)
    assert not any(k in REGISTER_KINDS for _, k, *_ in reads)


def _hbm():
    from golden.system.librapim import pim_config

    return overlap.without_refresh(pim_config())


def _replay_conventional(cfg, events, log):
    """Replay a conventional-bank merge: no rule broken, one command a
    cycle, the PIM's commands where they ran alone, and every bank in the
    state each command needs (the PIM's MACs on its own open rows, its ACTs
    on closed banks, each read on its own row)."""
    fixed = set(events)
    pim = [e for e in log if (e[0], e[1]) in fixed and (not e[2] or e[3] == overlap.PIM_ROW)]
    assert [(c, k) for c, k, *_ in pim] == sorted(events)
    cycles = [c for c, *_ in log]
    assert len(cycles) == len(set(cycles)), "two commands in one cycle"
    replay = BankTimer(cfg.banks, cfg.timing, bank_groups=cfg.bank_groups)
    for c, k, units, row in sorted(log, key=lambda e: e[0]):
        assert replay.earliest(k, units) <= c, f"{k} at {c} breaks a rule"
        for u in units:
            if k == "ACT":
                assert replay.open_row[u] is None, f"ACT at {c} on an open bank {u}"
            elif k == "RD":
                assert replay.open_row[u] == row, f"RD at {c}: bank {u} has another row open"
        replay.apply(k, units, c, row)
    return [e for e in log if e not in pim]


@pytest.mark.parametrize("shape", [Shape("qkt", 128, 1), Shape("sv", 128, 1),
                                   Shape("fc", 1024)], ids=Shape.key)
def test_conventional_banks_serve_the_pim_and_the_reads_in_turn(shape):
    """A conventional bank (one row buffer, one set of I/O lines) serves
    either the PIM or a read: beside a kernel no read fits (the PIM closes
    its rows only for tRP between two rows), so the reads run after it,
    at the read period, and the merge takes as long as the two in turn.
    The same reads beside the same kernel on dual row buffers / dual-path
    banks finish earlier by the slots they find there."""
    cfg = _hbm()
    kernel = shape.build(cfg, 3)
    events, cycles = overlap.pim_trace(cfg, kernel)
    assert overlap.read_slots(cfg, kernel, "conventional") == 0
    reads = 300
    log, out, _ = _merged(cfg, kernel, reads, "conventional")
    mine = _replay_conventional(cfg, events, log)
    assert out["reads"] == reads and sum(k == "RD" for _, k, *_ in mine) == reads
    alone = overlap.fill(cfg, [], reads)["last"]
    conventional = overlap.merged_cycles(cfg, kernel, reads, "conventional")
    assert conventional >= cycles + alone - cfg.timing.t_rcd
    assert conventional <= cycles + alone + cfg.timing.t_rp + cfg.timing.t_rcd
    dual = overlap.merged_cycles(cfg, kernel, reads, "dual")
    slots = overlap.read_slots(cfg, kernel, "dual")
    assert slots > 0
    assert dual == pytest.approx(overlap.segment_cycles(cycles, slots, reads,
                                                        overlap.read_period(cfg)), rel=0.01)
    assert dual < conventional


def test_conventional_reads_use_a_bank_the_pim_leaves_closed():
    """Between the PIM's PRE at 40 and its next ACT at 600 the banks are
    closed: reads open their rows there, and close them in time for the
    PIM's ACT (tRP before it); none issues where its PRE would not fit."""
    cfg = _hbm()
    tm = cfg.timing
    events = [(0, "ACT"), (20, "RD"), (40, "PRE"), (600, "ACT"), (620, "RD"), (640, "PRE")]
    log, out, _ = _merged(cfg, None, None, "conventional", events=events, stop=700)
    mine = _replay_conventional(cfg, events, log)
    rds = [c for c, k, *_ in mine if k == "RD"]
    assert out["reads"] == len(rds)
    before = [c for c in rds if c < 600]
    assert len(before) > 100 and all(40 < c < 600 - tm.t_rp - tm.t_rtp for c in before)
    assert all(c > 640 for c in rds if c >= 600)  # after the PIM's last PRE: free again
    pres = [c for c, k, *_ in mine if k == "PRE" and c < 600]
    assert pres and max(pres) <= 600 - tm.t_rp


def test_reads_alternate_bank_groups_where_tccd_l_is_longer():
    """On hbm2-pim (tCCD_L 4 > tCCD_S 2) the weights' rows lie in banks of
    different bank groups and the reads alternate them: the stream runs at
    tCCD_S, the channel's ``read_ccd``, not at tCCD_L."""
    cfg = _hbm()
    assert cfg.timing.t_ccd_l > cfg.timing.t_ccd == cfg.read_ccd
    period = overlap.read_period(cfg)
    assert cfg.timing.t_ccd <= period < cfg.timing.t_ccd * 1.02


def test_an_unknown_bank_variant_is_refused():
    with pytest.raises(ConfigError, match="banks must be one of dual, conventional"):
        overlap.fill(CFG, [], 4, banks="shared")


def test_reads_alone_stream_at_the_column_spacing():
    """With the next bank's row opened ahead, the reads stream one per tCCD
    (2 cycles on gddr6-aim), the first row's tRCD aside."""
    period = overlap.read_period(CFG)
    rows = overlap.PERIOD_ROWS * CFG.banks
    assert CFG.timing.t_ccd <= period <= CFG.timing.t_ccd + (CFG.timing.t_rcd + 2) / (
        rows * CFG.cols) + 1e-9


@pytest.mark.parametrize("shape", SHAPES, ids=Shape.key)
def test_segment_formula_matches_the_merged_run(shape):
    """PIM cycles + the reads beyond the kernel's slots at the read period:
    within 1 % of the cycle-exact merge, for reads below, at and well above
    the slots."""
    kernel = shape.build(CFG, 4)
    slots = overlap.read_slots(CFG, kernel)
    events, cycles = overlap.pim_trace(CFG, kernel)
    period = overlap.read_period(CFG)
    assert 0 < slots < cycles / CFG.timing.t_ccd
    for reads in (slots // 2, slots, slots + 500, 4 * slots + 3000):
        exact = overlap.merged_cycles(CFG, kernel, reads)
        formula = float(overlap.segment_cycles(cycles, slots, reads, period))
        assert exact == pytest.approx(formula, rel=0.01), reads
        if reads <= slots:
            assert exact == cycles  # hidden: the PIM is never delayed


def test_fast_slots_follow_exact_slots():
    """Fast mode's slots (two calibration points, then linear), at unit
    counts off the calibration points, move a segment by under 1 % of the
    kernel's cycles from the merge run's: reads past the slots cost the
    read period each."""
    cfg = load_profile("gddr6-aim")
    fast, exact = KernelTimer(cfg, "fast"), KernelTimer(cfg, "exact")
    period = exact.read_period()
    for shape in SHAPES[:2]:
        units = np.array([3, 9, 20])
        f, e = fast.slots(shape, units), exact.slots(shape, units)
        cycles = exact(shape, units)["cycles"]
        assert np.all(np.abs(f - e) * period <= 0.01 * cycles), (shape.key(), f, e)


def _slot_shapes():
    from golden.system.model import slot_shapes
    from golden.system.reference import MODELS, SYSTEMS

    shapes = {s for m in MODELS.values() for s in slot_shapes(m, SYSTEMS["xPU+PIM"],
                                                               Assumptions())}
    return [(p, s) for p in ("static", "pingpong", "dcs") for s in sorted(shapes, key=Shape.key)]


@pytest.mark.parametrize("policy,shape", _slot_shapes(),
                         ids=[f"{p}-{s.key()}" for p, s in _slot_shapes()])
def test_fast_slots_match_exact_on_every_study_shape(policy, shape, monkeypatch):
    """Every attention shape the xPU+PIM studies interleave, under every
    policy: fast mode's slots beyond the calibration move a segment by
    under 2 % of the kernel's cycles from the merge run's."""
    from golden.system.model import channel_config

    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    cfg = channel_config("gddr6-aim", policy, Assumptions())
    fast, exact = KernelTimer(cfg, "fast"), KernelTimer(cfg, "exact")
    period = exact.read_period()
    units = np.array([14])
    f, e = fast.slots(shape, units), exact.slots(shape, units)
    cycles = exact(shape, units)["cycles"]
    assert np.all(e > 0)
    assert np.all(np.abs(f - e) * period <= 0.02 * cycles), (f, e)


# ---- NeuPIMs' interleaving in the decode step -------------------------------

from tests.test_golden_system import TINY, XPU, LinearTimer  # noqa: E402

FC = {"pre": [(256, 768)], "post": [(256, 256), (256, 512), (256, 512), (512, 256)]}


def test_neupims_schedule_by_hand():
    """Two requests on one module, TCP over 4 channels, a timer of 10 cycles
    and 3 read slots per unit, 2 cycles per read alone: the step is the
    NeuPIMs schedule's segments, each the longest of the xPU's FLOPs and
    the channel (attention, then the reads that did not fit)."""
    cfg = load_profile()
    asm = Assumptions(epu_lanes=1 << 30, xpu_bandwidth_tbs=1e9, link_gbs=1e12, xpu_subbatches=2)
    lengths = np.array([256, 640])  # sub-batch 0 = [256], 1 = [640]
    r = decode_step(TINY, XPU, lengths, 1, 1, "tcp", LinearTimer(cfg, 2.0, 3), 1.0, asm)
    # per channel: 64 and 160 tokens -> 1 and 2 units per kernel, 2 KV heads
    att = {0: (2 * 2 * 10, 2 * 2 * 3), 1: (2 * 4 * 10, 2 * 4 * 3)}  # (cycles, slots)
    epu = {0: 2 * (256 + 3 * 128) / 2 ** 30, 1: 2 * (640 + 3 * 128) / 2 ** 30}

    def reads(parts):
        return sum(-(-2 * i * o // (4 * 32)) for p in parts for i, o in FC[p])

    def flops(parts):
        return sum(2 * i * o for p in parts for i, o in FC[p]) / 1e12

    segments = [(("pre",), 0, None), (("pre",), 1, 0)]
    for layer in (1, 2, 3):
        segments += [(("post", "pre") if layer < 3 else ("post",), 0, 1),
                     (("post", "pre") if layer < 3 else ("post",), 1, 0 if layer < 3 else None)]
    assert neupims_segments(3) == segments
    total = 0.0
    for parts, _x, y in segments:
        r_ = -(-2 * sum(i * o for p in parts for i, o in FC[p]) // (4 * 32))
        assert r_ == reads(parts)
        if y is None:
            chan = r_ * 2.0
        else:
            cyc, slots = att[y]
            phase = cyc + epu[y]
            chan = phase + max(0, r_ - slots - epu[y] / 2.0) * 2.0
        total += max(flops(parts), chan * 1e-9)
    assert r["step_s"] == pytest.approx(total, rel=1e-9)
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_s"], rel=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_neupims_never_slower_than_its_sub_batches_in_turn(seed):
    """Interleaved, the two sub-batches take no longer than the same two
    run one after the other (each its FC, then its attention), on the
    gddr6-aim timer, compute- and memory-bound xPUs."""
    from golden.system.reference import MODELS, SYSTEMS

    rng = np.random.default_rng(seed)
    model = MODELS["LLM-7B-32K"]
    timer = KernelTimer(load_profile("gddr6-aim"))
    lengths = rng.integers(500, 40_000, size=int(rng.integers(2, 24)))
    system = dataclasses.replace(SYSTEMS["xPU+PIM"], tflops=float(rng.choice([2.0, 256.0])))
    for partition in ("tcp",):  # (HFP places a request by its index in the batch)
        on = Assumptions(xpu_subbatches=2)
        off = dataclasses.replace(on, xpu_subbatches=1)
        tp = 1
        inter = decode_step(model, system, lengths, tp, 1, partition, timer, 0.5, on, sub=2)
        turn = sum(decode_step(model, system, lengths[h::2], tp, 1, partition, timer, 0.5,
                               off, sub=2)["step_s"] for h in (0, 1))
        assert inter["step_s"] <= turn * (1 + 1e-9)
        assert sum(inter["breakdown_s"].values()) == pytest.approx(inter["step_s"])
        assert inter["interleaved"] == 1.0


@pytest.mark.parametrize("pp", [1, 2])
def test_auto_takes_the_faster_schedule_per_stage(pp):
    """``xpu_subbatches = 0`` times each (micro-batch, stage) both ways and
    keeps the faster: never slower than either, and with one stage
    exactly the faster of the two. A compute-bound xPU beside long
    attention interleaves; a weight-bound one at a small batch does not."""
    from golden.system.reference import MODELS, SYSTEMS

    model = MODELS["LLM-7B-32K"]
    timer = KernelTimer(load_profile("gddr6-aim"))
    lengths = np.array([15_000, 14_000, 15_500, 14_500, 13_500, 15_250] * 2)
    for tflops, expect in ((0.5, 1.0), (256.0, 0.0)):
        system = dataclasses.replace(SYSTEMS["xPU+PIM"], tflops=tflops)
        got = {n: decode_step(model, system, lengths, 1, pp, "tcp", timer, 0.5,
                              Assumptions(xpu_subbatches=n), sub=2) for n in (0, 1, 2)}
        fastest = min(got[1]["step_s"], got[2]["step_s"])
        assert got[0]["step_s"] <= fastest * (1 + 1e-9)
        if pp == 1:
            assert got[0]["step_s"] == pytest.approx(fastest, rel=1e-12)
        assert got[0]["interleaved"] == expect, tflops
        assert (got[1]["interleaved"], got[2]["interleaved"]) == (0.0, 1.0)
