"""The LibraPIM system model and Dynamic Batch Offloading (golden/system/librapim.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden.config import ConfigError, load_profile
from golden.system import pimphony, scenario, sweep
from golden.system.kernel_timing import KernelTimer
from golden.system.librapim import (
    PLANS,
    Device,
    dbo,
    layer_time,
    predicted_time,
)
from golden.system.reference import LIBRA_MODELS, LIBRA_PIM


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
    """Serial: NPU FC then PIM attention. Pipelined: two sub-batches,
    max(NPU total, PIM total, each sub-batch's NPU + PIM)."""
    dev = device()
    m = dev.model
    mats = m.attn_matrices() + m.ffn_matrices_shapes()
    lengths = np.array([300, 200, 900, 50] * 16)
    serial = layer_time(dev, "NPU+AiM", lengths)
    assert serial["layer_s"] == pytest.approx(dev.npu_fc(64, mats) + dev.pim_mha(lengths)[0])
    a, b = lengths[0::2], lengths[1::2]
    n = [dev.npu_fc(32, mats)] * 2
    p = [dev.pim_mha(a)[0], dev.pim_mha(b)[0]]
    piped = layer_time(dev, "NeuPIMs-like", lengths)
    assert piped["layer_s"] == pytest.approx(max(sum(n), sum(p), n[0] + p[0], n[1] + p[1]))
    # each sub-batch reads the FC weights again: memory-bound FC costs twice
    assert dev.npu_fc(32, mats) == pytest.approx(dev.npu_fc(64, mats))
    # moving attention to the NPU shifts work from PIM to the NPU
    moved = layer_time(dev, "LibraPIM", lengths, ("mha-to-npu", 16))
    assert moved["pim_s"] < piped["pim_s"] and moved["npu_s"] > piped["npu_s"]
    with pytest.raises(ConfigError, match="system must be one of"):
        layer_time(dev, "GPU", lengths)


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
    all-bank MAC spacing; the NPU phase of a sub-batch lasts the longer of
    its stream and the PIM's MAC rounds on it, and the MAC rounds add to
    the PIM's busy time beside the sub-batches' attention."""
    dev = device("GPT3-175B")
    m, cfg = dev.model, dev.cfg
    attn, ffn = m.attn_matrices(), m.ffn_matrices_shapes()
    elems = sum(i * o for i, o in ffn) // dev.tp
    words = -(-elems // (LIBRA_PIM.channels * 16))
    assert dev.ffn_words() == words
    for k, rounds in ((1, 1), (16, 1), (17, 2), (128, 8)):
        assert dev.pim_ffn_broadcast(k) == pytest.approx(
            words * rounds * cfg.timing.mac_ccd * 1e-9)
    lengths = np.full(256, 16)
    k = 40  # 20 longest per sub-batch (all equal: the first 40 by index)
    t = layer_time(dev, "LibraPIM", lengths, ("ffn-to-pim", k))
    moved = np.zeros(256, dtype=bool)
    moved[np.argsort(-lengths, kind="stable")[:k]] = True
    n, p, f = [], [], []
    for sub, mv in ((lengths[0::2], moved[0::2]), (lengths[1::2], moved[1::2])):
        kk = int(mv.sum())
        f.append(dev.pim_ffn_broadcast(kk))
        n.append(dev.npu_fc(len(sub), attn) + max(dev.npu_fc(len(sub) - kk, ffn), f[-1]))
        p.append(dev.pim_mha(sub)[0])
    assert t["layer_s"] == pytest.approx(max(sum(n), sum(p) + sum(f), n[0] + p[0],
                                             n[1] + p[1]))
    assert t["pim_s"] == pytest.approx(sum(p) + sum(f))


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
        assert set(s) == {"NPU+AiM", "AttAcc-like", "NeuPIMs-like", "LibraPIM"}
        assert len(s["LibraPIM"]["decisions"]) == 3
        assert all(x["tokens_per_s"] > 0 for x in s.values())
        for d in s["LibraPIM"]["decisions"]:
            if d["plan"] != "all-pim":  # a small group moves with no veto
                assert d["predicted_s"] <= d["predicted_no_offload_s"]
        assert 0 < s["LibraPIM"]["pim_utilization"] <= 1
    small = next(r for r in rows if r["batch"] == 32)
    assert {d["plan"] for d in small["systems"]["LibraPIM"]["decisions"]} == {"all-pim"}
