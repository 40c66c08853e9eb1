"""The LibraPIM system model and Dynamic Batch Offloading (golden/system/librapim.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden import energy
from golden.config import ConfigError, load_profile
from golden.system import librapim, overlap, pimphony, scenario, sweep
from golden.system.kernel_timing import KernelTimer, Shape
from golden.system.librapim import (
    PLANS,
    Device,
    dbo,
    layer_time,
    pim_config,
    predicted_time,
    segment,
)
from golden.system.model import neupims_segments
from golden.system.reference import LIBRA_MODELS, LIBRA_PIM, LibraNpu


def device(model: str = "Llama3-70B", tp: int = 8) -> Device:
    cfg = load_profile(LIBRA_PIM.profile, policy="static")
    return Device(LIBRA_MODELS[model], tp, KernelTimer(cfg), 1.0)


@settings(max_examples=400, deadline=None)
@given(model=st.sampled_from(sorted(LIBRA_MODELS)), batch=st.integers(1, 512),
       longest=st.integers(1, 1 << 17))
def test_dbo_never_picks_a_plan_its_model_predicts_slower(model, batch, longest):
    dev = device(model)
    plan, count, pred, base = dbo(dev, batch, longest)
    assert plan in PLANS and 0 <= count <= batch
    if batch < LIBRA_PIM.channels:  # Algorithm 1 lines 10-12: no veto
        assert (plan, count) == ("all-pim", batch)
        return
    assert pred <= base
    if plan != "none":
        assert pred < base and count > 0
    # the chosen count is no worse than its neighbours under the same model
    p = dev.predict(batch, longest)
    if plan in ("ffn-to-pim", "mha-to-npu"):
        for c in (count - 1, count + 1):
            if 0 <= c <= batch:
                assert pred <= predicted_time(p, batch, plan, c) + 1e-15


def test_dbo_rules_by_hand():
    dev = device("GPT3-175B")
    # a small group goes to PIM whole (Algorithm 1 lines 10-12), even where
    # the model predicts it slower: the prediction is reported, not a veto
    for batch, longest in ((8, 64), (14, 1)):
        plan, count, pred, base = dbo(dev, batch, longest)
        p = dev.predict(batch, longest)
        assert (plan, count) == ("all-pim", batch)
        assert pred == pytest.approx(batch * (p["mha_pim"] + p["fc_pim"]))
    assert dbo(dev, 8, 64)[2] < dbo(dev, 8, 64)[3] and dbo(dev, 14, 1)[2] > dbo(dev, 14, 1)[3]
    # short contexts: the NPU is busier; eq. (1) moves FFN work to PIM
    p = dev.predict(384, 16)
    t_npu = max(384 * p["attn_npu"], p["attn_bytes_s"]) + max(384 * p["ffn_npu"],
                                                              p["ffn_bytes_s"])
    assert t_npu > 384 * p["mha_pim"]
    plan, count, pred, _ = dbo(dev, 384, 16)
    x = (t_npu - 384 * p["mha_pim"]) / (p["ffn_npu"] + p["ffn_pim"])
    assert plan == "ffn-to-pim" and count in (int(np.floor(x)), int(np.ceil(x)))
    # long contexts: PIM is busier; eq. (2) moves attention to the NPU
    p = dev.predict(256, 65536)
    t_npu = max(256 * p["attn_npu"], p["attn_bytes_s"]) + max(256 * p["ffn_npu"],
                                                              p["ffn_bytes_s"])
    assert 256 * p["mha_pim"] > t_npu
    plan, count, _, _ = dbo(dev, 256, 65536)
    x = (256 * p["mha_pim"] - t_npu) / (p["mha_pim"] + p["mha_npu"])
    assert plan == "mha-to-npu" and count in (int(np.floor(x)), int(np.ceil(x)))


def test_k_ffn_is_16_for_gpt3():
    m = LIBRA_MODELS["GPT3-175B"]
    assert m.k(m.ffn_matrices_shapes()) == 16


def test_layer_times_by_hand():
    """Serial NPU+AiM: the NPU's FC alone (its reads at the read period),
    then the PIM's attention alone. Pipelined: NeuPIMs' segments, each the
    longer of the NPU's FLOPs and the slowest channel, whose reads take the
    attention's slots and run on after it."""
    dev = device()
    m = dev.model
    mats = m.attn_matrices() + m.ffn_matrices_shapes()
    lengths = np.array([300, 200, 900, 50] * 16)
    tck = 1e-9
    period = dev.timer.read_period()
    serial = layer_time(dev, "NPU+AiM", lengths)
    fc = dev.npu_work(64, mats)
    att = dev.attention(lengths, "conventional")
    assert att["slots"].sum() == 0  # conventional banks: no read beside a kernel
    assert serial["layer_s"] == pytest.approx(max(fc["flops_s"], fc["reads"] * period * tck)
                                              + att["load"].max() * tck)
    piped = layer_time(dev, "NeuPIMs-like", lengths)
    subs = [lengths[0::2], lengths[1::2]]
    qkv = [dev.npu_work(32, mats[:1])] * 2
    post = [dev.npu_work(32, mats[1:])] * 2
    atts = [dev.attention(sub, "dual") for sub in subs]
    total = 0.0
    for parts, x, y in neupims_segments(m.layers):
        reads = (post[x]["reads"] if "post" in parts else 0) + (
            qkv[x]["reads"] if "pre" in parts else 0)
        flops = (post[x]["flops_s"] if "post" in parts else 0) + (
            qkv[x]["flops_s"] if "pre" in parts else 0)
        if y is None:
            chan = reads * period
        else:
            load, slots = atts[y]["load"], atts[y]["slots"]
            phase = load.max()
            chan = max(phase + max(0.0, reads - sl - (phase - ld) / period) * period
                       for ld, sl in zip(load, slots, strict=True))
        total += max(flops, chan * tck)
    assert piped["layer_s"] * m.layers == pytest.approx(total)
    # each sub-batch reads the FC weights again
    assert piped["weight_bytes"] == 2 * serial["weight_bytes"]
    # moving attention to the NPU shifts work from PIM to the NPU
    moved = layer_time(dev, "LibraPIM", lengths, ("mha-to-npu", 16))
    assert moved["pim_s"] < piped["pim_s"] and moved["npu_s"] > piped["npu_s"]
    with pytest.raises(ConfigError, match="system must be one of"):
        layer_time(dev, "GPU", lengths)


def _concat(cfg, kernels):
    from golden.kernels import Kernel

    return Kernel("pairs", [c for k in kernels for c in k.commands],
                  [w for k in kernels for w in k.wdata], [], [])


def test_pipelined_step_equals_the_channels_merged_by_hand():
    """A small model on the cycle-exact channel: every NeuPIMs segment
    composed by hand from the merge of each channel's real command stream
    (its pairs' QK^T and SV kernels, back to back) with the NPU's weight
    reads (``overlap.fill``), the segment lasting the longer of the NPU's
    FLOPs and the slowest channel. The system timing (kernel cycles, read
    slots and the read period) agrees within 2 %."""
    from golden.system.reference import LibraModel

    cfg = overlap.without_refresh(pim_config())
    tiny = LibraModel("tiny", layers=2, heads=2, kv_heads=2, d_head=128, d_model=1024,
                      d_ff=2048, ffn_matrices=2)
    dev = Device(tiny, 1, KernelTimer(cfg, "exact"), 1.0)
    lengths = np.array([40, 500, 300, 20])
    got = layer_time(dev, "NeuPIMs-like", lengths)["layer_s"] * tiny.layers
    mats = tiny.attn_matrices() + tiny.ffn_matrices_shapes()
    q, s = Shape("qkt", 128, 1), Shape("sv", 128, 1)
    streams = []  # per sub-batch: each used channel's events and PIM cycles
    for sub in (lengths[0::2], lengths[1::2]):
        chans = []
        for n in np.repeat(sub, tiny.kv_heads):  # one pair a channel (4 pairs, 64 channels)
            k = _concat(cfg, [q.build(cfg, int(q.units(cfg, n))),
                              s.build(cfg, int(s.units(cfg, n)))])
            chans.append(overlap.pim_trace(cfg, k))
        streams.append(chans)
    hand = 0.0
    for parts, _, y in neupims_segments(tiny.layers):
        chosen = ([mats[0]] if "pre" in parts else []) + (mats[1:] if "post" in parts else [])
        work = dev.npu_work(2, chosen)
        alone = overlap.fill(cfg, [], work["reads"])["last"]
        cycles = [alone] + ([max(c, overlap.fill(cfg, ev, work["reads"])["last"])
                             for ev, c in streams[y]] if y is not None else [])
        hand += max(work["flops_s"], max(cycles) * 1e-9)
    assert got == pytest.approx(hand, rel=0.02)
    # the reads do not all fit: the NPU's stream sets some segments
    assert any(dev.npu_work(2, mats[1:])["reads"] > sl for sl in
               dev.attention(lengths[0::2], "dual")["slots"])


def test_broadcast_ffn_adds_no_weight_reads():
    """DBO's FFN offload computes the moved requests' FFN on PIM from the
    weight stream the NPU reads anyway (the global buffer sends each word
    to both): the layer reads the same weight bytes as with no offload.
    AttAcc's co-processing and the whole-group offload run PIM GEMVs that
    read the FFN weights again for every token."""
    dev = device("GPT3-175B")
    m = dev.model
    attn, ffn = m.attn_matrices(), m.ffn_matrices_shapes()
    w = dev.weight_bytes(attn) + dev.weight_bytes(ffn)
    lengths = np.full(256, 16)
    none = layer_time(dev, "LibraPIM", lengths)
    assert none["weight_bytes"] == 2 * w  # once per sub-batch
    for k in (1, 40, 128, 256):  # up to every request's FFN
        moved = layer_time(dev, "LibraPIM", lengths, ("ffn-to-pim", k))
        assert moved["weight_bytes"] == none["weight_bytes"]
    gemv = layer_time(dev, "LibraPIM", lengths, ("all-pim", 256))
    assert gemv["weight_bytes"] == 256 * w
    attacc = layer_time(dev, "AttAcc-like", lengths)
    assert attacc["weight_bytes"] > w


def test_broadcast_ffn_timing_by_hand():
    """A word of the FFN stream feeds one request per bank's MAC unit per
    all-bank MAC spacing; the rounds run on the channel after the other
    sub-batch's attention, the stream's reads beside both, and they add to
    the PIM's busy time."""
    dev = device("GPT3-175B")
    m, cfg = dev.model, dev.cfg
    ffn = m.ffn_matrices_shapes()
    elems = sum(i * o for i, o in ffn) // dev.tp
    words = -(-elems // (LIBRA_PIM.channels * 16))
    assert dev.ffn_words() == words
    for k, rounds in ((1, 1), (16, 1), (17, 2), (128, 8)):
        assert dev.pim_ffn_broadcast(k) == pytest.approx(
            words * rounds * cfg.timing.mac_ccd * 1e-9)
    # a segment with the FFN moved: the channel runs the other sub-batch's
    # attention and the rounds; the FFN stream's reads take the attention's
    # slots, its idle cycles and the rounds' cycles, the rest run after
    lengths = np.full(256, 16)
    att = dev.attention(lengths[1::2], "dual")
    period = dev.timer.read_period()
    work = dev.npu_work(108, ffn, stream=True)
    rounds = dev.broadcast_cycles(20)
    assert rounds == pytest.approx(words * 2 * cfg.timing.mac_ccd)
    seg = segment(dev, "NeuPIMs-like", work, att, rounds)
    load = att["load"] + rounds
    phase = load.max()
    chan = max(phase + max(0.0, work["reads"] - sl - (rounds + phase - ld) / period) * period
               for ld, sl in zip(load, att["slots"], strict=True))
    assert seg["s"] == pytest.approx(max(work["flops_s"], chan * 1e-9))
    assert seg["pim_s"] == pytest.approx(phase * 1e-9)
    # the whole step: each sub-batch's 20 moved requests' rounds once a layer on the PIM
    none = layer_time(dev, "LibraPIM", lengths)
    t = layer_time(dev, "LibraPIM", lengths, ("ffn-to-pim", 40))
    assert t["pim_s"] == pytest.approx(none["pim_s"] + 2 * rounds * 1e-9)
    assert t["npu_s"] < none["npu_s"] and t["layer_s"] > none["layer_s"]


def test_tp_must_divide_the_kv_heads():
    with pytest.raises(ConfigError, match="tp=3"):
        device("Llama3-70B", 3)


def test_study_small():
    data = scenario.load("librapim", sets=["models=Llama3-70B", "batches=32,256",
                                           "inputs=64,4096", "steps=3"])
    with sweep.Sweep("serial") as sw:
        result = pimphony.STUDIES["librapim"](data, sw)
    rows = result["rows"]
    assert len(rows) == 4
    for r in rows:
        s = r["systems"]
        assert set(s) == {"NPU+AiM", "AttAcc-like", "NeuPIMs-like", "LibraPIM", "LibraPIM-noDBO"}
        assert r["capacity"]["device_gb"] == 16 and r["npu_array"] == 64
        n, m = (int(x) for x in r["dex"]["split"].split(":"))
        assert n + m == 32 and n >= 1 and m >= 1
        assert len(s["LibraPIM"]["decisions"]) == 3
        assert all(x["tokens_per_s"] > 0 for x in s.values())
        for d in s["LibraPIM"]["decisions"]:
            if d["plan"] != "all-pim":  # a small group moves with no veto
                assert d["predicted_s"] <= d["predicted_no_offload_s"]
        assert 0 < s["LibraPIM"]["pim_utilization"] <= 1
        for x in s.values():  # energy beside time
            assert x["energy_per_token_j"] == pytest.approx(
                sum(x["energy_breakdown_per_token_j"].values()), rel=1e-5)
            assert x["power_w"] == pytest.approx(x["energy_per_token_j"] * x["tokens_per_s"],
                                                 rel=1e-4)
        assert s["NPU+AiM"]["energy_over_NPU+AiM"] == 1
    small = next(r for r in rows if r["batch"] == 32)
    assert {d["plan"] for d in small["systems"]["LibraPIM"]["decisions"]} == {"all-pim"}


def test_latency_table_follows_the_measured_step():
    """With the runtime's latency table, each step's DBO times are its
    formulas scaled per side by the last step's measured busy time over
    the formulas' prediction for the plan taken; with ``formula`` they are
    the formulas alone. The first step has no measurement (factors 1)."""
    dev = device()
    lengths = np.full(256, 4096)
    table = librapim.generate(dev, "LibraPIM", lengths, 3, "table")["decisions"]
    formula = librapim.generate(dev, "LibraPIM", lengths, 3, "formula")["decisions"]
    assert table[0]["table_npu"] == table[0]["table_pim"] == 1.0
    assert "table_npu" not in formula[0]
    assert (table[0]["plan"], table[0]["requests"]) == (formula[0]["plan"], formula[0]["requests"])
    # step 1's factors from step 0 by hand
    cur = lengths
    plan = (table[0]["plan"], table[0]["requests"])
    t = layer_time(dev, "LibraPIM", cur, plan)
    want = librapim.predicted_sides(dev.predict(256, 4096), 256, *plan)
    assert table[1]["table_npu"] == pytest.approx(t["npu_s"] / want[0])
    assert table[1]["table_pim"] == pytest.approx(t["pim_s"] / want[1])
    scaled = dev.predict(256, 4097, {"npu": 2.0, "pim": 0.5})
    plain = dev.predict(256, 4097)
    assert scaled["ffn_npu"] == 2 * plain["ffn_npu"] and scaled["mha_pim"] == 0.5 * plain["mha_pim"]
    with pytest.raises(ConfigError, match="dbo_latency must be one of table, formula"):
        librapim.generate(dev, "LibraPIM", lengths, 1, "guess")


def test_capacity_per_device():
    """Weights and the group's KV per device against 16 GB: GPT3-175B over
    8 devices does not fit (43.5 GB of weights each); over 32 it does."""
    m = LIBRA_MODELS["GPT3-175B"]
    lengths = np.full(64, 100)
    c8, c32 = librapim.capacity(m, 8, lengths), librapim.capacity(m, 32, lengths)
    w = sum(2 * i * o for i, o in m.attn_matrices() + m.ffn_matrices_shapes()) * m.layers
    kv = 64 * 100 * 2 * m.kv_heads * m.d_head * 2 * m.layers
    assert c8["weights_gb"] == pytest.approx(w / 8 / 1e9, abs=1e-3)
    assert c8["kv_gb"] == pytest.approx(kv / 8 / 1e9, abs=1e-3)
    assert not c8["fits"] and c32["fits"]
    assert c8["devices_needed"] == c32["devices_needed"] == -(-(w + kv) // 16e9)


def test_npu_size_and_dbo_ablation():
    """A larger NPU shortens its FLOP-bound FC; LibraPIM-noDBO runs the
    dual-path segments with no plan (equal to LibraPIM's ``none``)."""
    small = Device(LIBRA_MODELS["Llama3-70B"], 8, device().timer, 1.0, npu_flops=LibraNpu(
        array_dim=32).flops)
    big = Device(LIBRA_MODELS["Llama3-70B"], 8, device().timer, 1.0, npu_flops=LibraNpu(
        array_dim=256).flops)
    lengths = np.full(384, 512)
    assert layer_time(big, "NeuPIMs-like", lengths)["layer_s"] < \
        layer_time(small, "NeuPIMs-like", lengths)["layer_s"]
    dev = device()
    a = layer_time(dev, "LibraPIM-noDBO", lengths)
    b = layer_time(dev, "LibraPIM", lengths, ("none", 0))
    assert np.array_equal(a.pop("use"), b.pop("use")) and a == b
    assert "decisions" not in {k for k, v in librapim.generate(
        dev, "LibraPIM-noDBO", lengths, 1).items() if v}


def test_dex_split_from_the_data():
    """``auto`` gives the weight partition the fewest subarrays that hold
    the weights and the KV partition the rest, so nothing spills; data
    beyond the bank is split in proportion. A fixed split that does not
    match the data places the excess in the other partition."""
    cell = librapim.subarray_bytes()
    rows = pim_config().rows
    assert rows // librapim.SUBARRAY_ROWS == 32
    assert librapim.dex_split("auto", rows, 5 * cell, 10 * cell) == (5, 27)
    assert librapim.dex_split("auto", rows, 4.2 * cell, 10 * cell) == (5, 27)
    assert librapim.spills((5, 27), 5 * cell, 10 * cell) == {"weight_spill": 0.0,
                                                            "kv_spill": 0.0}
    # beyond the bank (64 subarrays of data): in proportion, 1:3 -> 8:24
    assert librapim.dex_split("auto", rows, 16 * cell, 48 * cell) == (8, 24)
    # fixed halves: 24 subarrays of KV, 16 hold it, 8 spill (a third)
    assert librapim.dex_split("16:16", rows, 8 * cell, 24 * cell) == (16, 16)
    assert librapim.spills((16, 16), 8 * cell, 24 * cell) == pytest.approx(
        {"weight_spill": 0.0, "kv_spill": 1 / 3})
    assert librapim.spills((16, 16), 20 * cell, 4 * cell) == pytest.approx(
        {"weight_spill": 0.2, "kv_spill": 0.0})
    # beyond the bank, the fixed split against the data's proportion
    assert librapim.spills((16, 16), 16 * cell, 48 * cell) == pytest.approx(
        {"weight_spill": 0.0, "kv_spill": 1 / 3})
    for bad in ("3", "0:4", "a:b", "1:2:3", 7):
        with pytest.raises(ConfigError, match="dex_split must be"):
            librapim.check_dex_split(bad)
    with pytest.raises(ConfigError, match="does not split"):
        librapim.dex_split("5:7", rows, cell, cell)


def test_spilled_data_loses_the_dual_path():
    """On dual-path banks, KV held in the weight partition leaves its
    kernels no read slots (the RD and the MAC want the same partition's row,
    tests/test_golden_channel.py::test_dual_path_same_partition_serializes);
    weights held in the KV partition take only the idle cycles. By hand on
    one segment, against NeuPIMs' dual row buffer, which has no split."""
    lengths = np.array([300, 200, 900, 50] * 16)
    base = device()
    att = base.attention(lengths, "dual")
    npu = base.npu_work(32, base.model.ffn_matrices_shapes())
    period, tck = base.period("LibraPIM"), base.t_ck_ns * 1e-9
    load, slots = att["load"], att["slots"]
    phase = load.max()
    idle = (phase - load) / period
    reads = npu["reads"]
    assert reads > slots.max()  # the reads outlast the slots

    def by_hand(ws, ks):
        kept = reads * (1 - ws)
        left = np.maximum(0, kept - slots * (1 - ks)) + reads - kept
        return max(npu["flops_s"], float(np.max(phase + np.maximum(0, left - idle) * period)) * tck)

    got = {}
    for ws, ks in ((0, 0), (0, 0.25), (0.25, 0), (0, 1)):
        dev = Device(base.model, 8, base.timer, 1.0, weight_spill=ws, kv_spill=ks)
        got[ws, ks] = segment(dev, "LibraPIM", npu, att)["s"]
        assert got[ws, ks] == pytest.approx(by_hand(ws, ks))
        # NeuPIMs' dual row buffer holds any row beside any other: no spill
        assert segment(dev, "NeuPIMs-like", npu, att)["s"] == segment(
            base, "NeuPIMs-like", npu, att)["s"]
    assert got[0, 0] < got[0, 0.25] < got[0, 1]
    # reads beyond the slots run after the kernels anyway: spilled weights
    # cost nothing more; fewer reads than slots, they do
    assert got[0.25, 0] == pytest.approx(got[0, 0])
    few = {"flops_s": 0.0, "macs": 0.0, "reads": int(slots.min() // 2)}
    whole = Device(base.model, 8, base.timer, 1.0, weight_spill=1.0)
    assert segment(base, "LibraPIM", few, att)["s"] == pytest.approx(phase * tck)
    assert segment(whole, "LibraPIM", few, att)["s"] == pytest.approx(
        (phase + few["reads"] * period) * tck)
    # every slot lost: the channel serves the reads only where no kernel runs
    assert got[0, 1] == pytest.approx(max(npu["flops_s"], float(np.max(
        phase + np.maximum(0, reads - idle) * period)) * tck))


def pricing(**kw) -> librapim.Pricing:
    return librapim.Pricing(energy.scaled_params(LIBRA_PIM.profile, kw), 0.32, 5.12)


def test_energy_of_a_serial_step_by_hand():
    """NPU+AiM's energy (docs/energy.md, "LibraPIM"): every layer's weight
    stream as whole-row reads, the attention kernels' counts, both priced
    with hbm2-pim's table; the background of every channel over the whole
    step and refresh on the channel clock; the NPU's MACs at 0.32 pJ; all
    ``tp`` devices, per token."""
    dev = device()
    m, cfg = dev.model, dev.cfg
    params = energy.energy_params(LIBRA_PIM.profile)
    lengths = np.array([300, 200, 900, 50] * 16)
    got = librapim.generate(dev, "NPU+AiM", lengths, 1, pricing=pricing())
    mats = m.attn_matrices() + m.ffn_matrices_shapes()
    words = dev.npu_work(64, mats)["reads"] * LIBRA_PIM.channels
    period = dev.timer.read_period()
    pairs = np.repeat(lengths, m.kv_heads // dev.tp)
    n = dict.fromkeys(energy.COUNTS, 0.0)
    for kind in ("qkt", "sv"):
        sh = Shape(kind, m.d_head, m.group)
        t = dev.timer(sh, sh.units(cfg, pairs))
        for c in energy.COUNTS:
            n[c] += m.layers * float(t[c].sum())
    n["rds"] += m.layers * words
    n["acts"] += m.layers * words / cfg.cols
    n["pres"] += m.layers * words / cfg.cols
    n["active"] += m.layers * words * period
    span = LIBRA_PIM.channels * got["step_s"] / 1e-9  # tCK 1 ns here
    n["active"] = min(n["active"], span)
    n["refreshes"] = span / cfg.timing.t_refi
    want = energy.priced(params, 1.0, n, span)["breakdown"]
    b = got["energy_breakdown_per_token_j"]
    for cat in energy.CATEGORIES:
        assert b[f"pim_{cat}"] == pytest.approx(want[cat] * dev.tp * 1e-12 / 64), cat
    npu_macs = m.layers * 64 * sum(i * o for i, o in mats) / dev.tp
    assert b["npu"] == pytest.approx(npu_macs * 0.32e-12 * dev.tp / 64)
    assert b["pim_broadcast"] == 0
    assert got["energy_per_token_j"] == pytest.approx(sum(b.values()))
    assert got["power_w"] == pytest.approx(got["energy_per_token_j"] * 64 / got["step_s"])


def test_broadcast_ffn_energy_is_mac_units_only():
    """DBO's FFN offload charges the moved requests' MAC rounds at the MAC
    unit's figure on every bank, and no array read: the weight stream the
    NPU reads anyway is the same; the whole-group offload's GEMVs read the
    weights through the banks' MACs for every token."""
    dev = device("GPT3-175B")
    cfg = dev.cfg
    lengths = np.full(256, 16)
    none = layer_time(dev, "LibraPIM", lengths)
    moved = layer_time(dev, "LibraPIM", lengths, ("ffn-to-pim", 40))
    rds = energy.COUNTS.index("rds")
    assert moved["use"][rds] == none["use"][rds]
    rounds = 2 * dev.broadcast_cycles(20) / dev.broadcast_ccd  # each sub-batch's 20, a layer
    assert moved["broadcast_macs"] == pytest.approx(rounds * cfg.banks * LIBRA_PIM.channels)
    assert none["broadcast_macs"] == 0
    gemv = layer_time(dev, "LibraPIM", lengths, ("all-pim", 256))
    assert gemv["use"][rds] == 0 and gemv["broadcast_macs"] == 0  # no NPU stream
    macs = energy.COUNTS.index("macs")
    assert gemv["use"][macs] > 100 * moved["use"][macs]
    r = librapim.generate(dev, "LibraPIM", lengths[:64], 1, pricing=pricing())
    assert r["energy_per_token_j"] > 0


def test_energy_scale_keys():
    """The scenario's [energy] factors scale one table value each; a
    factor out of range or an unknown key is refused, naming it."""
    dev = device()
    lengths = np.array([300, 200, 900, 50] * 16)
    base = librapim.generate(dev, "NeuPIMs-like", lengths, 1, pricing=pricing())
    double = librapim.generate(dev, "NeuPIMs-like", lengths, 1, pricing=pricing(ref_pj=2.0))
    for k, v in double["energy_breakdown_per_token_j"].items():
        want = base["energy_breakdown_per_token_j"][k] * (2 if k == "pim_refresh" else 1)
        assert v == pytest.approx(want), k
    with pytest.raises(ConfigError, match="energy.ref_pj must be in"):
        scenario.load("librapim", sets=["energy.ref_pj=-1"])
    with pytest.raises(ConfigError, match="unknown key 'energy.ref'"):
        scenario.load("librapim", sets=["energy.ref=1"])
    data = scenario.load("librapim", sets=["energy.act_standby_mw=2"])
    assert data["energy"]["act_standby_mw"] == 2.0 and data["energy"]["ref_pj"] == 1.0
    with pytest.raises(ConfigError, match="energy.mac_pj is a factor"):
        energy.scaled_params(LIBRA_PIM.profile, {"mac_pj": True})


def test_alpaca_lengths():
    """``lengths = alpaca``: Alpaca prompts (the table's distribution), cut
    to the sequence length, decoded in lock step so the longest sequence
    holds exactly ``input`` tokens; ``uniform`` keeps its range."""
    from golden.system.reference import ALPACA_PROMPT_TOKENS as table

    tokens = np.array(list(table))
    counts = np.array(list(table.values()))
    mean = (tokens * counts).sum() / counts.sum()
    for n, batch in ((16, 384), (64, 32), (4096, 256)):
        got = librapim.input_lengths(n, batch, 0, 0.5, "alpaca")
        assert got.max() == n and got.min() >= 1 and len(got) == batch
        assert n - got.min() <= tokens.max() - tokens.min()  # the prompts' spread at most
    short = librapim.input_lengths(16, 384, 0, 0.5, "alpaca")
    share = counts[tokens >= 16].sum() / counts.sum()  # prompts cut to 16 tokens
    assert abs((short == 16).mean() - share) < 0.06
    # a long sequence: length - (n - longest prompt) is the prompt; its mean the table's
    many = librapim.input_lengths(1 << 16, 20_000, 1, 0.5, "alpaca")
    prompts = many - ((1 << 16) - tokens.max())
    assert prompts.min() >= tokens.min() and abs(prompts.mean() - mean) < 0.5
    assert set(np.unique(prompts)) <= set(tokens.tolist())
    uni = librapim.input_lengths(1000, 500, 0, 0.5, "uniform")
    assert uni.min() >= 500 and uni.max() <= 1000
    with pytest.raises(ConfigError, match="lengths must be one of alpaca, uniform"):
        librapim.input_lengths(16, 4, 0, 0.5, "sharegpt")
