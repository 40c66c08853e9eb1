"""The system model (golden/system/model.py), its kernel timing in fast and exact
modes (golden/system/kernel_timing.py), scenarios and Dask sweeps."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from golden import energy
from golden.channel import ChannelModel
from golden.config import ConfigError, load_profile
from golden.hub import epu
from golden.system import pimphony, scenario, sweep
from golden.system.kernel_timing import CALIBRATE, LABELS, KernelTimer, Shape
from golden.system.model import (
    ATTENTION_COMPONENTS,
    COMPONENTS,
    STEPS,
    Assumptions,
    admit,
    channel_config,
    decode_step,
    hfp_admit,
    hfp_channels,
    hfp_kv_channels,
    kernel_shapes,
    kv_allocation,
    module_channels,
    parallel_options,
)
from golden.system.reference import DATASETS, GB, MODELS, SYSTEMS, Model, System
from tests.conftest import full_run

ASM = Assumptions()
AIM = energy.params_for(channel_config("gddr6-aim", "static", ASM))


def study_shapes() -> list[tuple[str, Shape]]:
    """(policy, shape) for every kernel shape the three studies' default
    scenarios run, under every policy a step or baseline can use."""
    shapes = {s for m in MODELS.values() for n in SYSTEMS.values() for s in kernel_shapes(m, n)}
    tcp = scenario.defaults("tcp-activation")
    shapes |= {Shape("qkt", tcp["d_head"], tcp["group"]), Shape("sv", tcp["d_head"], tcp["group"])}
    return [(p, s) for p in ("static", "pingpong", "dcs") for s in sorted(shapes, key=Shape.key)]


def quick_shape(policy: str, shape: Shape) -> bool:
    """The shapes ``make test`` checks (every one in ``make test-full``):
    under each policy the smallest of each kind (a GQA group of 4 for the
    attention kernels), and the largest FC under DCS (the longest
    extrapolation beyond the calibration)."""
    if shape.kind == "fc":
        return shape.key() == "fc:4096:1" or (policy, shape.key()) == ("dcs", "fc:28672:1")
    return shape.group == 4


@pytest.mark.parametrize("policy,shape", study_shapes(),
                         ids=[f"{p}-{s.key()}" for p, s in study_shapes()])
def test_fast_matches_exact_on_every_study_shape(policy, shape, monkeypatch, request):
    """Fast mode (calibrated on 1..CALIBRATE units, linear beyond) against
    the cycle-exact channel model: within 2 % on every label total."""
    if not (quick_shape(policy, shape) or full_run(request)):
        pytest.skip("this shape runs in make test-full (pytest --full)")
    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    cfg = channel_config("gddr6-aim", policy, ASM)
    fast, exact = KernelTimer(cfg, "fast"), KernelTimer(cfg, "exact")
    n = CALIBRATE[shape.kind]
    for units in (n + 1, n + 4) if shape.kind == "fc" else (n + 1, n + 4, 12):
        f, e = fast(shape, [units]), exact(shape, [units])
        assert e["cycles"][0] == sum(e[lab][0] for lab in LABELS[1:])
        for lab in LABELS:
            diff = abs(int(f[lab][0]) - int(e[lab][0]))
            assert diff <= 0.02 * max(int(e["cycles"][0]), 1), (lab, units, f[lab], e[lab])
        # energy from the counts (docs/energy.md): the total and every
        # category within 2 % of the exact total
        fe, ee = fast.energy(shape, [units], *AIM), exact.energy(shape, [units], *AIM)
        total = ee["total_pj"][0]
        assert abs(fe["total_pj"][0] - total) <= 0.02 * total, (units, fe, ee)
        for cat in energy.CATEGORIES:
            assert abs(fe["breakdown"][cat][0] - ee["breakdown"][cat][0]) <= 0.02 * total, cat


def test_kernel_energy_is_the_traces_energy(monkeypatch):
    """Without refresh, a kernel's exact-mode energy is the energy of its
    cycle-exact trace (golden.energy.trace_energy), and fast mode equals it
    within the calibration."""
    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    cfg = channel_config("gddr6-aim", "dcs", ASM).replace(t_refi=0, t_rfc=0)
    shape = Shape("sv", 128, 4)
    kernel = shape.build(cfg, 3)
    r = ChannelModel(cfg).run(kernel.commands, kernel.wdata)
    want = energy.trace_energy(cfg, *AIM, kernel.commands, r.trace, r.cycles)
    for mode in ("exact", "fast"):
        got = KernelTimer(cfg, mode).energy(shape, [3], *AIM)
        assert got["total_pj"][0] == pytest.approx(want["total_pj"])
        for cat in energy.CATEGORIES:
            assert got["breakdown"][cat][0] == pytest.approx(want["breakdown"][cat])
    # a different table prices the same counts differently
    doubled = dataclasses.replace(AIM[0], mac_pj=2 * AIM[0].mac_pj)
    got = KernelTimer(cfg, "exact").energy(shape, [3], doubled, AIM[1])
    assert got["breakdown"]["mac"][0] == pytest.approx(2 * want["breakdown"]["mac"])


def test_fast_mode_is_exact_up_to_the_calibration_and_zero_at_zero(monkeypatch):
    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    cfg = channel_config("gddr6-aim", "dcs", ASM)
    shape = Shape("qkt", 128, 4)
    fast, exact = KernelTimer(cfg, "fast"), KernelTimer(cfg, "exact")
    got = fast(shape, [0, 1, 2, 3, 4])
    assert got["cycles"][0] == 0
    for u in (1, 2, 3, 4):
        assert all(got[lab][u] == exact.exact(shape, u)[lab] for lab in LABELS)


def test_fast_mode_extrapolates_over_the_streams_period(monkeypatch):
    """The fast mode extrapolates over the stream's period: 1 when every unit
    adds the same cycles, 2 when the steps alternate, longer where mode and
    row switches fall out of step (DCS's QK^T on gddr6-aim: 5 units); such
    streams (without refresh) stay exact far beyond their calibration."""
    assert KernelTimer.period([{"cycles": c} for c in (10, 20, 30, 40)]) == 1
    assert KernelTimer.period([{"cycles": c} for c in (10, 25, 35, 50, 60, 75)]) == 2
    assert KernelTimer.period([{"cycles": c} for c in (10, 25, 35, 50)]) == 2  # half of 4
    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    for policy, kind, period in (("pingpong", "sv", 1), ("dcs", "qkt", 5)):
        cfg = channel_config("gddr6-aim", policy, ASM).replace(t_refi=0, t_rfc=0)
        shape = Shape(kind, 128, 1)
        fast, exact = KernelTimer(cfg, "fast"), KernelTimer(cfg, "exact")
        assert fast.period(fast.calibration(shape)["units"]) == period
        for u in (CALIBRATE[kind] + 7, CALIBRATE[kind] + 8):
            assert fast(shape, [u])["cycles"][0] == exact.exact(shape, u)["cycles"]


def test_kernel_cache_on_disk_is_reused(tmp_path, monkeypatch):
    import golden.system.kernel_timing as kt

    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", str(tmp_path / "cache.json"))
    cfg = channel_config("gddr6-aim", "static", ASM)
    first = KernelTimer(cfg).calibration(Shape("sv", 128, 1))
    assert (tmp_path / "cache.json").is_file()
    kt.KernelTimer._disk = None  # a new process: read the file

    def fail(*_):
        raise AssertionError("calibrated again despite the cache")

    monkeypatch.setattr(kt, "labels", fail)
    assert KernelTimer(cfg).calibration(Shape("sv", 128, 1)) == first
    # another configuration is another key
    with pytest.raises(AssertionError, match="calibrated again"):
        KernelTimer(cfg.replace(t_rcd=60)).calibration(Shape("sv", 128, 1))


def test_units_count_rows_and_groups():
    cfg = load_profile()  # 16 banks, 64 columns
    assert Shape("qkt", 128).tokens_per_unit(cfg) == 16 * 8
    assert Shape("sv", 128).tokens_per_unit(cfg) == 16 * 8
    assert list(Shape("qkt", 128).units(cfg, [0, 1, 128, 129])) == [0, 1, 1, 2]
    assert list(Shape("fc", 4096).units(cfg, [16, 17])) == [1, 2]
    with pytest.raises(ValueError, match="d=100"):
        Shape("qkt", 100)
    with pytest.raises(ValueError, match="kind"):
        Shape("gemm", 128)


# ---- admission ----------------------------------------------------------------


def test_admission_static_reserves_the_window_dpa_the_length():
    m = MODELS["LLM-7B-32K"]
    tpc = (1 << 20) // (128 * 2)  # 4096 tokens per 1 MB chunk
    streams = 2 * m.layers * m.kv_heads
    lengths = np.array([5000, 100, 40000])
    assert list(kv_allocation(m, lengths, "dpa", 1 << 20)) == [
        streams * 2 << 20, streams << 20, streams * 10 << 20]
    window_chunks = 32768 // tpc
    assert list(kv_allocation(m, lengths, "static", 1 << 20)) == [
        streams * window_chunks << 20] * 3
    adm = admit(m, DATASETS["QMSum"].sample(512, 0), "static", 128, 1 << 20)
    kv_cap = 128 * GB - m.weight_bytes
    assert adm["batch"] == kv_cap // (streams * 8 << 20)
    dpa = admit(m, DATASETS["QMSum"].sample(512, 0), "dpa", 128, 1 << 20)
    assert dpa["batch"] > adm["batch"] and dpa["allocated_bytes"] <= kv_cap
    with pytest.raises(ConfigError, match="kv scheme"):
        kv_allocation(m, lengths, "paged", 1 << 20)


def test_parallel_options_respect_kv_heads():
    assert parallel_options(MODELS["LLM-72B-128K"], 16) == [(1, 16), (2, 8), (4, 4), (8, 2)]
    assert (16, 1) in parallel_options(MODELS["LLM-72B-32K"], 16)


# ---- the decode step, by hand ---------------------------------------------------


class LinearTimer:
    """Labels linear in units: cycles 10 u = mac 4 u + act_pre 2 u + io 4 u."""

    def __init__(self, cfg, period=1e-6, slots=3):
        self.cfg, self.period, self.per_unit = cfg, period, slots

    def read_period(self):
        return self.period  # cycles per weight read (default: negligible)

    def slots(self, shape, units):
        return self.per_unit * np.asarray(units, dtype=np.float64)

    def __call__(self, shape, units):
        u = np.asarray(units, dtype=np.int64)
        return {"cycles": 10 * u, "mac": 4 * u, "act_pre": 2 * u, "io": 4 * u, "mode": 0 * u,
                "refresh": 0 * u, **{c: n * u for c, n in self.COUNTS.items()}}

    #: energy counts per unit (golden.energy.COUNTS)
    COUNTS = {"acts": 16, "pres": 16, "macs": 64, "rds": 0, "wrs": 0, "wr_inps": 2,
              "rd_outs": 1, "refreshes": 1, "active": 8}


TINY = Model("tiny", layers=3, heads=2, d_head=128, d_model=256, d_ff=512, group=1,
             window=4096, like="-", datasets=(), capacity_gb=1)
XPU = System("x", 1, 4, tflops=1.0, internal_tbs=1.0, fc_on="xpu", note="")
PIM = dataclasses.replace(XPU, fc_on="pim")


def test_decode_step_hfp_by_hand():
    cfg = load_profile()  # qkt and sv: 128 tokens per unit
    asm = Assumptions(epu_lanes=1 << 30, xpu_bandwidth_tbs=1e9, link_gbs=1e12,
                      xpu_subbatches=1)
    lengths = np.array([256, 128, 640])  # pairs: 2 per request (2 KV heads, tp 1)
    r = decode_step(TINY, XPU, lengths, 1, 1, "hfp", LinearTimer(cfg), 1.0, asm)
    # pair units (qkt + sv): 2+2, 2+2, 1+1, 1+1, 5+5, 5+5 -> x10 cycles, round-robin on 4 channels
    load = [40 + 100, 40 + 100, 20, 20]
    fc_s = sum(2 * 3 * i * o / 1e12 for i, o in [(256, 768), (256, 256), (256, 512),
                                                 (256, 512), (512, 256)])
    # the EPU (2^26 words a cycle): each pair's softmax is its fixed cost and
    # three one-cycle passes; the phase is the longer of the busiest channel
    # with its pairs' softmaxes and the EPU's total
    soft = 3 + epu.SOFTMAX_FIXED
    pairs = [2, 2, 1, 1]
    att = max(max(c + n * soft for c, n in zip(load, pairs, strict=True)), 6 * soft) * 1e-9
    assert r["step_s"] == pytest.approx(3 * (att + fc_s), rel=1e-6)
    assert r["breakdown_s"]["attention_mac"] == pytest.approx(3 * 56e-9)
    assert r["breakdown_s"]["act_pre"] == pytest.approx(3 * 28e-9)
    assert r["tokens_per_s"] == pytest.approx(3 / r["step_s"])
    assert r["channel_utilization"] == pytest.approx(3 * sum(load) * 1e-9 / (4 * r["step_s"]))
    assert r["mac_utilization"] == pytest.approx(3 * 0.4 * sum(load) * 1e-9 / (4 * r["step_s"]))


def test_hfp_placement_is_request_major_and_fixed_across_micro_batches():
    """Pairs go to channels in request order, whichever micro-batch a
    request is in: micro-batch 1 of pp 2 (requests 1 and 3) lands where
    those requests' KV lives."""
    assert list(hfp_channels(np.arange(3), 2, 4)) == [0, 1, 2, 3, 0, 1]
    assert list(hfp_channels(np.array([1, 3]), 2, 4)) == [2, 3, 2, 3]
    cfg = load_profile()
    asm = Assumptions(epu_lanes=1 << 30, xpu_bandwidth_tbs=1e9, link_gbs=1e12,
                      xpu_subbatches=1)
    lengths = np.array([128, 128, 128, 640])
    r = decode_step(TINY, XPU, lengths, 1, 2, "hfp", LinearTimer(cfg), 1.0, asm)
    # a pair of 128 tokens: qkt + sv 1 unit each = 20 cycles, 8 MAC; of 640: 100, 40.
    # micro-batch 0 = requests 0, 2 -> channels 0, 1, 0, 1: busiest 40 cycles, 16 MAC;
    # micro-batch 1 = requests 1, 3 -> channels 2, 3, 2, 3: busiest 120 cycles, 48 MAC
    # (numbered from channel 0 per micro-batch it would be 100 cycles, 40 MAC)
    assert r["breakdown_s"]["attention_mac"] == pytest.approx((16 + 48) * 1e-9 * 3 / 2)
    assert r["breakdown_s"]["act_pre"] == pytest.approx((8 + 24) * 1e-9 * 3 / 2)


def test_module_channels_match_table_iv_on_gddr6_aim():
    """A gddr6-aim channel: 16 banks x 32 B per 2 cycles of 0.5 ns = 512 GB/s
    and 512 MB. PIM-only (16 TB/s, 16 GB over 32 channels) is one profile
    channel per channel; xPU+PIM (32 TB/s, 32 GB) two."""
    cfg = load_profile("gddr6-aim")
    pim = module_channels(SYSTEMS["PIM-only"], cfg, 0.5)
    xpu = module_channels(SYSTEMS["xPU+PIM"], cfg, 0.5)
    assert pim.channel_gbs == xpu.channel_gbs == 512.0
    assert (pim.sub_channels, pim.timed, pim.profile_gb) == (1, 32, 16.0)
    assert (xpu.sub_channels, xpu.timed, xpu.profile_gb) == (2, 64, 32.0)
    for mc, system in ((pim, SYSTEMS["PIM-only"]), (xpu, SYSTEMS["xPU+PIM"])):
        assert mc.internal_tbs == pytest.approx(system.internal_tbs, rel=0.05)
        assert mc.profile_gb == system.module_gb
    # a slower profile gets more sub-channels for the same Table IV bandwidth
    slow = module_channels(SYSTEMS["PIM-only"], load_profile("hbm2-pim"), 1.0)
    assert slow.sub_channels == 4 and slow.internal_tbs == pytest.approx(16.384)


def test_decode_step_energy_by_hand():
    """A step's energy (docs/energy.md): the kernels' counts and the xPU's
    weight reads priced with the profile's table, the background over
    every channel for the whole step, refresh on the channel clock, the
    xPU's MACs, the vector elements and the link bytes at the scenario's
    figures."""
    cfg = load_profile()  # gddr6-aim
    params, tck = energy.params_for(cfg)
    asm = Assumptions(epu_lanes=1 << 30, xpu_bandwidth_tbs=1e9, link_gbs=1e12,
                      xpu_subbatches=1, vector_pj_per_element=2.0)
    lengths = np.array([256, 128, 640])
    timer = LinearTimer(cfg, period=3.0)
    r = decode_step(TINY, XPU, lengths, 1, 1, "hfp", timer, tck, asm)
    units = 32  # every pair's qkt + sv units (test_decode_step_hfp_by_hand)
    mats = [(256, 768), (256, 256), (256, 512), (256, 512), (512, 256)]
    words = 4 * -(-sum(2 * i * o for i, o in mats) // (4 * 32))  # weight reads, 4 channels
    n = {c: 3 * units * k for c, k in LinearTimer.COUNTS.items()}  # x 3 layers
    n["rds"] += 3 * words
    n["acts"] += 3 * words / cfg.cols
    n["pres"] += 3 * words / cfg.cols
    n["active"] += 3 * words * 3.0
    span = 4 * r["step_s"] / (tck * 1e-9)
    n["refreshes"] = span / cfg.timing.t_refi  # the channel clock's, not the kernels'
    want = energy.priced(params, tck, n, span)["breakdown"]
    got = r["breakdown_j"]
    for cat in energy.CATEGORIES:
        assert got[f"pim_{cat}"] == pytest.approx(want[cat] * 1e-12), cat
    assert got["pim_mac"] == pytest.approx(3 * units * 64 * params.mac_pj * 1e-12)
    assert got["xpu"] == pytest.approx(3 * 3 * sum(i * o for i, o in mats) * 0.32e-12)
    # the HUB's EPU (not vector_pj_per_element, the near-memory processors'):
    # per (request, KV head) pair one softmax (group 1), no reduction (HFP
    # on one sub-channel), priced by the profile's epu_*_pj
    epu_pj = sum(energy.epu_pj(params, epu.softmax_ops(int(t))) for t in lengths) * 2
    assert epu_pj > 0
    assert got["vector"] == pytest.approx(3 * epu_pj * 1e-12)
    assert got["link"] == 0  # one module
    assert r["energy_j"] == pytest.approx(sum(got.values()))
    assert r["energy_per_token_j"] == pytest.approx(r["energy_j"] / 3)
    # attention's part (PIMphony's breakdown): its kernels' MACs and I/O,
    # the background by its share of the busy time, the rest to the FC
    a, bd = r["attention_j"], r["breakdown_s"]
    share = 1 - bd["fc"] / (bd["fc"] + sum(bd[c] for c in ATTENTION_COMPONENTS))
    assert a["mac"] == pytest.approx(got["pim_mac"])  # the xPU runs the FC
    kernel_io = 3 * units * (3 * params.beat_pj + 2 * params.gbuf_wr_pj + params.obuf_rd_pj)
    assert a["io"] == pytest.approx(kernel_io * 1e-12)
    assert a["background"] == pytest.approx(share * got["pim_background"])
    assert sum(a.values()) + r["fc_j"] == pytest.approx(r["energy_j"])
    assert r["fc_j"] > got["xpu"] + got["pim_other"]  # the weight reads are the FC's
    # refresh on the channel clock, and the link under TP
    refreshing = cfg.replace(t_refi=1000, t_rfc=100)
    two = decode_step(TINY, XPU, lengths, 2, 1, "tcp", LinearTimer(refreshing, period=3.0),
                      tck, asm)
    assert two["breakdown_j"]["pim_refresh"] == pytest.approx(
        2 * 4 * two["step_s"] / (tck * 1e-9) / 1000 * params.ref_pj * 1e-12)
    link = 3 * 2 * 2 * 3 * 256 * 2 * (2 - 1) / 2  # layers x modules x all-gathers x bytes
    assert two["breakdown_j"]["link"] == pytest.approx(link * asm.link_pj_per_byte * 1e-12)
    # the scenario's [energy] factors scale their own table value only
    halved = decode_step(TINY, XPU, lengths, 1, 1, "hfp", timer, tck,
                         dataclasses.replace(asm, energy_scale=(("mac_pj", 0.5),
                                                                ("pre_standby_mw", 0.0))))
    for k, v in halved["breakdown_j"].items():
        if k == "pim_mac":
            assert v == pytest.approx(got[k] / 2)
        elif k == "pim_background":
            assert v == pytest.approx(n["active"] * params.act_standby_mw * tck * 1e-12)
        else:
            assert v == pytest.approx(got[k]), k


def test_sub_channels_split_a_pair_under_hfp_and_add_channels_under_tcp():
    """HFP on channels of 2 sub-channels runs each pair's tokens halved on
    both (and reduces its SV partial sums); TCP sees twice the channels."""
    cfg = load_profile()
    asm = Assumptions(epu_lanes=1 << 30, xpu_bandwidth_tbs=1e9, link_gbs=1e12,
                      xpu_subbatches=1)
    lengths = np.array([256, 512, 1024])
    two = decode_step(TINY, XPU, lengths, 1, 1, "hfp", LinearTimer(cfg), 1.0, asm, sub=2)
    half = decode_step(TINY, XPU, -(-lengths // 2), 1, 1, "hfp", LinearTimer(cfg), 1.0, asm)
    mac = "attention_mac"
    assert two["breakdown_s"][mac] == pytest.approx(half["breakdown_s"][mac])
    # the same MAC work; the EPU adds each pair's reduction of its two
    # sub-channels' partial sums
    assert two["mac_utilization"] * two["step_s"] == pytest.approx(
        half["mac_utilization"] * half["step_s"], rel=1e-6)
    assert two["breakdown_s"]["reduction"] > half["breakdown_s"]["reduction"]
    wide = dataclasses.replace(XPU, channels_per_module=2 * XPU.channels_per_module)
    t2 = decode_step(TINY, XPU, lengths, 1, 1, "tcp", LinearTimer(cfg), 1.0, asm, sub=2)
    tw = decode_step(TINY, wide, lengths, 1, 1, "tcp", LinearTimer(cfg), 1.0, asm)
    assert t2["step_s"] == pytest.approx(tw["step_s"])
    assert t2["mac_utilization"] == pytest.approx(tw["mac_utilization"])


def test_hfp_admits_only_what_fits_in_each_pairs_channel():
    """A channel holds its share of the KV capacity; a (request, KV head)
    pair keeps every layer of its stage in one channel. A pair larger than
    a channel is never admitted, whatever the pooled capacity says."""
    m = MODELS["LLM-7B-128K"]  # 8 KV heads, 32 layers, window 128K
    pim = SYSTEMS["PIM-only"]  # 16 GB, 32 channels
    lengths = np.full(64, 1000)
    kv_cap = 128 * GB - m.weight_bytes
    per_channel = kv_cap // (8 * 32)
    pair = lambda layers: 2 * layers * m.window * m.d_head * 2  # noqa: E731
    # tp 8, pp 1: one KV head per module, 32 layers: a 2 GB pair in a 0.44 GB channel
    assert pair(32) > per_channel
    a = hfp_admit(m, lengths, "static", 128, pim, 8, 1)
    assert a["batch"] == 0 and a["largest_pair_bytes"] == pair(32)
    # the pooled rule would admit requests
    assert admit(m, lengths, "static", 128, 1 << 20)["batch"] > 0
    # tp 1, pp 8: 8 KV heads per module, 4 layers: 256 MB pairs, one per channel (0.44 GB);
    # 8 pairs per request over 32 channels: 4 requests fill every channel once
    assert pair(4) <= per_channel < 2 * pair(4)
    b = hfp_admit(m, lengths, "static", 128, pim, 1, 8)
    assert b["batch"] == 4
    # DPA-length pairs (1,000 tokens, 2 MB): many per channel, up to the channel's room
    c = hfp_admit(m, lengths, "dpa", 128, pim, 8, 1)
    assert c["batch"] == 64  # 64 pairs of 2 MB over 32 channels: 4 MB per channel
    assert c["allocated_bytes"] == 64 * 1000 * m.kv_bytes_per_token


def test_hfp_packed_weights_leave_whole_channels_to_the_kv():
    """With the weights packed (xPU+PIM), a module's share of them fills
    whole channels first; the pairs go round-robin to the rest, each of a
    full Table IV channel's bytes, and no attention runs on a weight
    channel. PIM-only keeps them spread (its FC GEMVs use every channel)."""
    m = MODELS["LLM-7B-128K"]
    xpu, pim = SYSTEMS["xPU+PIM"], SYSTEMS["PIM-only"]
    packed = Assumptions(hfp_weights="packed", xpu_subbatches=1)
    channel = xpu.module_gb * GB // xpu.channels_per_module  # 1 GB
    weight_channels = -(-m.weight_bytes // (4 * channel))  # 4 modules of 32 GB at 128 GB
    kv = hfp_kv_channels(m, xpu, 4, packed)
    assert kv == xpu.channels_per_module - weight_channels == 28
    assert hfp_kv_channels(m, pim, 8, packed) == pim.channels_per_module
    assert hfp_kv_channels(m, xpu, 4, ASM) == xpu.channels_per_module
    lengths = np.full(64, 1000)
    a = hfp_admit(m, lengths, "dpa", 128, xpu, 4, 1, kv_channels=kv)
    assert a["channel_bytes"] == channel
    pair = 2 * m.layers * 1000 * m.d_head * 2
    per_request = (m.kv_heads // 4) * pair  # 2 pairs of a request on 2 of the 28 channels
    assert a["batch"] == 64 and 64 * per_request <= kv * channel
    # the decode step puts no pair on the first weight_channels channels
    cfg = load_profile()
    r = decode_step(TINY, dataclasses.replace(XPU, module_gb=1), np.array([128] * 4), 1, 1,
                    "hfp", LinearTimer(cfg), 1.0, packed)
    spread = decode_step(TINY, dataclasses.replace(XPU, module_gb=1), np.array([128] * 4), 1,
                         1, "hfp", LinearTimer(cfg), 1.0, dataclasses.replace(packed,
                                                                             hfp_weights="spread"))
    # TINY's weights take one whole channel of a 1 GB module's four (256 MB each)
    assert hfp_kv_channels(TINY, dataclasses.replace(XPU, module_gb=1), 1, packed) == 3
    # 8 pairs on 3 channels (3, 3, 2) against 4 channels (2 each): the busiest runs 3 pairs
    assert r["breakdown_s"]["attention_mac"] == pytest.approx(
        1.5 * spread["breakdown_s"]["attention_mac"])


def test_hfp_study_points_report_the_channel_limit():
    """The baseline (HFP) of LLM-7B-128K cannot place a 128K-token pair in a
    channel at TP 4 or 8: those options admit nothing, and the point says
    how much the placement admits against pooled capacity."""
    from golden.system.model import evaluate

    m, system = MODELS["LLM-7B-128K"], SYSTEMS["PIM-only"]
    cfg = channel_config("gddr6-aim", "static", ASM)
    lengths = DATASETS["multifieldqa"].sample(256, 0)
    r = evaluate(m, system, lengths, 128, STEPS["baseline"], LinearTimer(cfg), 0.5, ASM)
    by = {(o["tp"], o["pp"]): o["batch"] for o in r["options"]}
    assert by[(8, 1)] == by[(4, 2)] == 0 and by[(1, 8)] > 0
    assert r["hfp"]["largest_pair_gb"] > r["hfp"]["channel_gb"] or r["batch"] > 0
    assert r["batch"] <= r["hfp"]["pooled_batch"]
    tcp = evaluate(m, system, lengths, 128, STEPS["+TCP"], LinearTimer(cfg), 0.5, ASM)
    assert "hfp" not in tcp and all(o["batch"] == tcp["batch"] for o in tcp["options"])


def test_decode_step_tcp_and_pipeline_by_hand():
    cfg = load_profile()
    asm = Assumptions(epu_lanes=16, xpu_bandwidth_tbs=1e9, link_gbs=1e12,
                      xpu_subbatches=1)
    lengths = np.array([1024, 128])  # pp 2: micro-batch 0 = [1024], 1 = [128]
    r = decode_step(TINY, XPU, lengths, 1, 2, "tcp", LinearTimer(cfg), 1.0, asm)
    # TCP over 4 channels: 256 and 32 tokens per channel -> 2 and 1 units per kernel
    att = [2 * (2 + 2) * 10, 2 * (1 + 1) * 10]  # two KV heads per micro-batch
    # the EPU (one word a cycle): a softmax over W score words padded to the
    # 4 channels' words (2 W + P + 35), then the reduction of the 8 result
    # words over G = max(1, 16 x 4 / 128) = 1 token group (8 + 2)
    epu = [2 * (2 * 64 + 64 + 35 + 8 + 2), 2 * (2 * 8 + 8 + 35 + 8 + 2)]
    fc = sum(2 * i * o / 1e12 for i, o in [(256, 768), (256, 256), (256, 512), (256, 512),
                                           (512, 256)])
    per_layer = [(a + e) * 1e-9 + fc for a, e in zip(att, epu, strict=True)]
    hand = [256 * 2 / 1e21] * 2
    t = np.array([[per_layer[m] * n + hand[m] for n in (2, 1)] for m in range(2)])
    period = max(t.sum(axis=0).max(), t.sum(axis=1).max())
    assert r["step_s"] == pytest.approx(period, rel=1e-9)
    assert r["breakdown_s"]["pipeline_bubbles"] == pytest.approx(period - t.sum() / 2, rel=1e-6)
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_s"], rel=1e-9)
    assert r["breakdown_s"]["reduction"] == pytest.approx(sum(epu) * 3e-9 / 2)


def test_fc_on_pim_is_one_gemv_per_token():
    cfg = load_profile()
    asm = Assumptions(epu_lanes=1 << 30, link_gbs=1e12)
    one = decode_step(TINY, PIM, np.array([128]), 1, 1, "tcp", LinearTimer(cfg), 1.0, asm)
    two = decode_step(TINY, PIM, np.array([128, 128]), 1, 1, "tcp", LinearTimer(cfg), 1.0, asm)
    # d_out per channel: 768/4, 256/4, 512/4, 512/4, 256/4 -> units of 16 outputs
    units = 192 // 16 + 64 // 16 + 128 // 16 + 128 // 16 + 64 // 16
    assert one["breakdown_s"]["fc"] == pytest.approx(3 * units * 10e-9)
    assert two["breakdown_s"]["fc"] == pytest.approx(2 * one["breakdown_s"]["fc"])


def test_decode_step_rejects_bad_partition():
    with pytest.raises(ConfigError, match="partition"):
        decode_step(TINY, XPU, np.array([1]), 1, 1, "rr", LinearTimer(load_profile()), 1.0, ASM)


# ---- the studies ----------------------------------------------------------------


@pytest.fixture(scope="module")
def small_study():
    data = scenario.load("pimphony", sets=["models=LLM-72B-128K", "datasets=Loogle-SD",
                                           "requests=512"])
    with sweep.Sweep("serial") as sw:
        return pimphony.pimphony(data, sw)


def test_study_invariants(small_study):
    rows = small_study["rows"]
    assert len(rows) == 2 * len(STEPS)
    by = {(r["system"], r["step"]): r for r in rows}
    for r in rows:
        assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_s"], rel=1e-5)  # 6 digits
        assert set(r["breakdown_s"]) == {*COMPONENTS, "pipeline_bubbles"}
        assert 0 < r["mac_utilization"] <= r["channel_utilization"] <= 1
        assert r["tokens_per_s"] == pytest.approx(r["batch"] / r["step_s"], rel=1e-5)
        best = max(o["tokens_per_s"] for o in r["options"])
        assert r["tokens_per_s"] == best
    for system in SYSTEMS:
        # TCP spreads the few (request, KV head) pairs over every channel
        assert (by[(system, "+TCP")]["channel_utilization"]
                > 2 * by[(system, "baseline")]["channel_utilization"])
        # DCS speeds the same kernels; DPA admits more requests
        assert by[(system, "+DCS")]["tokens_per_s"] > by[(system, "+TCP")]["tokens_per_s"]
        assert by[(system, "+DPA")]["batch"] > by[(system, "+DCS")]["batch"]
        # the baseline's HFP placement admits at most what pooled static capacity does
        base = by[(system, "baseline")]
        assert base["batch"] <= base["hfp"]["pooled_batch"] == by[(system, "+DCS")]["batch"]


def test_exact_mode_equals_fast_mode_on_a_small_point(monkeypatch):
    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    sets = ["contexts=2048", "capacities_gb=512", "capacity_context=1024", "requests=4",
            "systems=xPU+PIM", "steps=+TCP,+DCS"]
    got = {}
    for mode in ("fast", "exact"):
        data = scenario.load("pimphony-scaling", sets=[*sets, f"mode={mode}"])
        with sweep.Sweep("serial") as sw:
            got[mode] = pimphony.pimphony_scaling(data, sw)["rows"]
    for f, e in zip(got["fast"], got["exact"], strict=True):
        assert f["tokens_per_s"] == pytest.approx(e["tokens_per_s"], rel=0.02)


def test_dask_sweep_equals_serial():
    """The default local cluster and a running scheduler given by address
    both give the serial run's JSON, byte for byte."""
    from distributed import LocalCluster

    sets = ["models=LLM-7B-128K", "datasets=multifieldqa", "requests=256",
            "steps=baseline,+DPA"]
    out = {}
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:
        for scheduler in ("serial", "local", cluster.scheduler_address):
            result = pimphony.run("pimphony", sets=sets, scheduler=scheduler)
            result.pop("wall_s")
            out[scheduler] = json.dumps(result, sort_keys=True)
    assert len(set(out.values())) == 1, list(out)


def test_tcp_activation_shape():
    data = scenario.load("tcp-activation", sets=["tokens=16,4096,65536"])
    with sweep.Sweep("serial") as sw:
        rows = pimphony.tcp_activation(data, sw)["rows"]
    assert [r["qkt"]["tcp"]["active_channels"] for r in rows] == [1, 16, 16]
    assert all(r[k]["hfp"]["active_channels"] == 1 for r in rows for k in ("qkt", "sv"))
    assert rows[-1]["qkt"]["speedup"] > 15  # long pairs: ~16x over one channel


def test_tcp_activation_thresholds():
    """Full activation of 16 channels x 16 banks: QK^T takes a key per
    bank, so 16 tokens a channel; SV's word holds 16 tokens of one output
    dimension (the MAC's adder tree), so 16 too. Both reach all 16 channels
    past 240 tokens, and SV at the paper's 32 tokens keeps 2 busy
    (docs/pimphony.md, "SV's threshold")."""
    data = scenario.load("tcp-activation", sets=["tokens=32,240,241,256"])
    with sweep.Sweep("serial") as sw:
        rows = pimphony.tcp_activation(data, sw)["rows"]
    for kind in ("qkt", "sv"):
        assert [r[kind]["tcp"]["active_channels"] for r in rows] == [2, 15, 16, 16]


# ---- scenarios ------------------------------------------------------------------


def test_scenario_file_and_set_overrides(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('models = ["LLM-7B-32K"]\nseed = 3\n[assumptions]\nlink_gbs = 100\n')
    data = scenario.load("pimphony", str(f), ["seed=4", "systems=PIM-only",
                                              "assumptions.epu_lanes=64"])
    assert data["models"] == ["LLM-7B-32K"] and data["seed"] == 4
    assert data["systems"] == ["PIM-only"]
    assert data["assumptions"]["link_gbs"] == 100.0
    assert data["assumptions"]["epu_lanes"] == 64
    assert scenario.load("pimphony", sets=['steps=["baseline", "+DPA"]'])["steps"] == [
        "baseline", "+DPA"]


@pytest.mark.parametrize("sets,message", [
    (["colour=red"], "unknown key 'colour'"),
    (["assumptions.speed=1"], "unknown key 'assumptions.speed'"),
    (["seed=x"], "seed must be an integer"),
    (["assumptions=3"], "assumptions must be a table"),
    (["models=1,2"], r"models\[0\] must be a string"),
    (["seed"], "expected key=value"),
])
def test_scenario_errors_name_the_key(sets, message):
    with pytest.raises(ConfigError, match=message):
        scenario.load("pimphony", sets=sets)


def test_scenario_semantic_errors_name_the_key(tmp_path):
    for sets, message in ((["models=LLM-1B"], "models: unknown name 'LLM-1B'"),
                          (["mode=turbo"], "mode must be one of"),
                          (["assumptions.baseline_policy=fifo"], "baseline_policy"),
                          (["assumptions.preemption=drop"], "preemption must be one of"),
                          (["assumptions.link_gbs=0"], r"link_gbs must be in \[0.001,"),
                          (["systems="], "systems: the list is empty")):
        with pytest.raises(ConfigError, match=message):
            pimphony.run("pimphony", sets=sets)
    bad = tmp_path / "bad.toml"
    bad.write_text("models = [\n")
    with pytest.raises(ConfigError, match="scenario"):
        scenario.load("pimphony", str(bad))
    with pytest.raises(ConfigError, match="does not exist"):
        scenario.load("pimphony", str(tmp_path / "none.toml"))


def test_scenario_ranges_hold_the_defaults_and_refuse_past_each_edge():
    """Every numeric key of RANGES: the defaults lie inside; a value just
    past either edge is refused naming the key (in a list, its index), from
    --set, from a file and from a dict given to a study directly."""
    checked = set()
    for study in scenario.SCENARIO_STUDIES:
        data = scenario.defaults(study)
        scenario.check_all(data)
        flat = {**{k: v for k, v in data.items() if not isinstance(v, dict)},
                **{f"{t}.{k}": v for t in ("assumptions", "energy")
                   for k, v in data.get(t, {}).items()}}
        for key, rng in scenario.RANGES.items():
            if key not in flat or isinstance(flat[key], list) and (
                    not flat[key] or isinstance(flat[key][0], str)):
                continue
            checked.add(key)
            is_list, is_int = isinstance(flat[key], list), isinstance(
                flat[key][0] if isinstance(flat[key], list) else flat[key], int)
            step = 1 if is_int else 1e-9 * max(1, abs(rng.hi))
            for bad in (rng.lo - (1 if is_int else abs(rng.lo) * 1e-3 + 1e-12),
                        rng.hi if rng.open_hi else rng.hi + step):
                value = f"{bad!r}" if not is_int else str(int(bad))
                label = f"{key}[0]" if is_list else key
                with pytest.raises(ConfigError, match=re.escape(f"--set: {label} must be in")):
                    scenario.load(study, sets=[f"{key}={value}"])
            good = scenario.load(study, sets=[f"{key}={rng.lo!r}" if not is_int
                                              else f"{key}={int(rng.lo)}"])
            assert good is not None
    assert checked == set(scenario.RANGES)  # every range belongs to some study's key


def test_study_functions_check_ranges_of_a_dict_given_directly():
    data = scenario.load("librapim")
    data["inputs"] = [1 << 40]
    with pytest.raises(ConfigError, match=r"scenario: inputs\[0\] must be in \[1, 1,048,576\]"):
        from golden.system.librapim import librapim
        librapim(data, sweep.Sweep("serial"))


def test_labels_count_refresh_and_mode_switch_windows(monkeypatch):
    """gddr6-aim refreshes (tREFI 3,333, tRFC 210) and switches modes (nMODCH
    32): a kernel long enough to refresh labels each REF's tRFC window as
    refresh (no MAC can run in it: the refresh closed every row), and the
    mode label is at most nMODCH per switch."""
    from golden.system.kernel_timing import labels

    cfg = channel_config("gddr6-aim", "static", ASM)
    k = Shape("qkt", 128, 1).build(cfg, 30)
    lab = labels(cfg, k)
    assert lab["refreshes"] >= 2 and lab["refresh"] == lab["refreshes"] * cfg.timing.t_rfc
    switches = ChannelModel(cfg).run(k.commands, k.wdata).mode_switches
    assert 0 < lab["mode"] <= switches * cfg.timing.t_modch
    assert lab["cycles"] == sum(lab[x] for x in LABELS[1:])


def test_refresh_runs_on_the_channels_own_clock(monkeypatch):
    """The system model's kernels run back to back, so refresh falls due on
    the channel's clock, not t_refi after each kernel starts: a kernel of b
    cycles without refresh takes b t_refi / (t_refi - r), its refresh label
    the difference, even one shorter than a refresh interval (a cycle-exact
    run of it from reset has no refresh at all)."""
    from golden.system.kernel_timing import labels

    monkeypatch.setenv("PIMORCH_KERNEL_CACHE", "off")
    cfg = channel_config("gddr6-aim", "static", ASM)
    shape = Shape("qkt", 128, 1)
    timer = KernelTimer(cfg, "exact")
    r = timer.calibration(shape)["per_refresh"]["cycles"]
    assert 200 < r < 400  # tRFC 210 and the rows reopened after it
    plain = labels(timer.plain, shape.build(timer.plain, 1))
    assert plain["cycles"] < cfg.timing.t_refi
    assert labels(cfg, shape.build(cfg, 1))["refreshes"] == 0
    got = timer(shape, [1])
    t_refi = cfg.timing.t_refi
    assert got["cycles"][0] == pytest.approx(plain["cycles"] * t_refi / (t_refi - r))
    assert got["refresh"][0] > 0 and got["cycles"][0] == pytest.approx(
        sum(got[x][0] for x in LABELS[1:]))


# ---- the GPU baseline ------------------------------------------------------------


def test_gpu_step_is_the_roofline_by_hand():
    """FC: the longer of FLOPs and weight bytes; FlashDecoding: every K and
    V byte of the GPU's KV heads once, at the HBM rate; two all-reduces."""
    from golden.system.model import gpu_step
    from golden.system.reference import Gpu

    gpu = Gpu("g", 80, 1000.0, 100.0, 50.0, "test")
    asm = Assumptions(gpu_bandwidth_efficiency=0.5, gpu_flops_efficiency=0.25)
    bw, fl = 1000e9 * 0.5, 100e12 * 0.25
    lengths = np.array([1000, 3000])
    r = gpu_step(TINY, gpu, lengths, 2, 1, asm)
    mats = [(256, 768), (256, 256), (256, 512), (256, 512), (512, 256)]
    fc = sum(max(2 * 2 * i * o / 2 / fl, 2 * i * o / 2 / bw) for i, o in mats)
    att = 4000 * 1 * 2 * 128 * 2 / bw  # one KV head per GPU at tp 2
    link = 2 * 2 * 256 * 2 * 2 * (2 - 1) / 2 / 50e9
    assert r["step_s"] == pytest.approx(3 * (fc + att + link), rel=1e-9)
    assert r["breakdown_s"]["attention"] == pytest.approx(3 * att)
    assert r["tokens_per_s"] == pytest.approx(2 / r["step_s"])
    # energy: the weights once and every K/V byte from HBM and once
    # through L2/L1/registers, the MACs, the all-reduces, static power
    hbm = 3 * (sum(2 * i * o for i, o in mats) + 4000 * 2 * 2 * 128 * 2)
    macs = 3 * (2 * sum(i * o for i, o in mats) + 4000 * 2 * 2 * 1 * 128)
    sent = 3 * 2 * 2 * 2 * 256 * 2 * (2 - 1)  # both GPUs' all-reduce bytes
    e = r["breakdown_j"]
    assert e["hbm"] == pytest.approx(hbm * 28.72e-12)
    assert e["sram"] == pytest.approx(hbm * 3.7475e-12)
    assert e["mac"] == pytest.approx(macs * 0.32e-12)
    assert e["link"] == pytest.approx(sent * 10.4e-12)
    assert e["static"] == pytest.approx(2 * 50.0 * r["step_s"])
    assert r["energy_per_token_j"] == pytest.approx(sum(e.values()) / 2)
    # two pipeline stages: each micro-batch reads the weights, one hand-off
    pp = gpu_step(TINY, gpu, lengths, 1, 2, asm)
    assert pp["breakdown_j"]["link"] == pytest.approx(2 * 256 * 2 * 10.4e-12)
    assert pp["breakdown_j"]["hbm"] == pytest.approx(
        (2 * 3 * sum(2 * i * o for i, o in mats) + 3 * 4000 * 2 * 2 * 128 * 2) * 28.72e-12)


def test_gpu_baseline_is_memory_matched_with_paged_admission():
    from golden.system.model import evaluate_gpu
    from golden.system.reference import GPUS

    a100 = GPUS["A100-80GB"]
    m = MODELS["LLM-72B-128K"]  # 8 KV heads; 512 GB -> 7 GPUs hold it, 8 form a TP group
    lengths = DATASETS["Loogle-SD"].sample(512, 0)
    r = evaluate_gpu(m, a100, lengths, 512, ASM)
    assert (r["gpus"], r["memory_gb"], r["tp"], r["pp"]) == (8, 640, 8, 1)
    # PagedAttention: 16-token pages for the current length, beside the weights
    page = ASM.gpu_page_tokens * m.d_head * 2
    assert r["batch"] == admit(m, lengths, "dpa", 640, page)["batch"]
    assert evaluate_gpu(m, a100, lengths, 512, ASM, gpus=7)["pp"] == 7
    # the roofline scales with the bandwidth efficiency on an attention-bound point
    slow = evaluate_gpu(m, a100, lengths, 512,
                        dataclasses.replace(ASM, gpu_bandwidth_efficiency=0.4))
    assert slow["tokens_per_s"] == pytest.approx(r["tokens_per_s"] / 2, rel=0.01)


def test_pimphony_energy_study(tmp_path):
    """pimphony-energy (docs/energy.md): every step's energy per token is
    attention's four parts plus the FC's; a faster step spends less
    background per token; the first step is the reference."""
    data = scenario.load("pimphony-energy", None, ['models=["LLM-7B-128K"]',
                                                   'datasets=["Loogle-SD"]', "requests=256"])
    with sweep.Sweep("serial") as sw:
        out = pimphony.STUDIES["pimphony-energy"](data, sw, False)
    rows = {r["step"]: r for r in out["rows"]}
    assert list(rows) == list(STEPS) and {r["system"] for r in out["rows"]} == {"PIM-only"}
    for r in rows.values():
        parts = sum(r["attention_per_token_j"].values()) + r["fc_per_token_j"]
        assert parts == pytest.approx(r["energy_per_token_j"], rel=1e-4)
        assert r["average_power_w"] == pytest.approx(
            r["energy_per_token_j"] * r["tokens_per_s"], rel=1e-4)
    base = rows["baseline"]
    assert base["energy_over_baseline"] == 1 and base["attention_total_over_baseline"] == 1
    for step in ("+TCP", "+DCS", "+DPA"):
        r = rows[step]
        assert r["speedup_over_baseline"] > 1
        assert (r["attention_per_token_j"]["background"]
                < base["attention_per_token_j"]["background"])
        assert r["energy_over_baseline"] == pytest.approx(
            r["energy_per_token_j"] / base["energy_per_token_j"], rel=1e-4)
    from sim import report

    assert [p.endswith("pimphony-energy.png") for p in report.plot(out, str(tmp_path))] == [True]
