"""The system model's attention timed on the module itself
(golden/system/module_timing.py): against the executable decode's every
attention STEP on the small model, by hand on its parts, and its bad
input."""

from __future__ import annotations

import numpy as np
import pytest

from golden.config import ConfigError
from golden.hub.decode import TinyModel, decode, random_sequences
from golden.system.decode_timing import against_decode, system_model_of
from golden.system.kernel_timing import KernelTimer
from golden.system.model import _attention
from golden.system.module_timing import AttentionModule, attention_step
from tb.hub_stimulus import DECODE_MODEL, DECODE_SLOTS, decode_rtl_hub

MAX_TOKENS = 32


def _phase(hub, model, lens, module):
    return _attention(model, np.array(lens), np.arange(len(lens)), model.kv_heads, "tcp",
                      KernelTimer(hub.channel, "exact"), 1.0, hub.n_channels, 1, False,
                      epu_k=1, module=module)


def test_system_model_attention_agrees_with_the_executable_decode():
    """Every attention STEP of a decode of two sequences of unequal
    lengths (lock steps with both, then the longer alone) on the small
    model's module: the system model's phase with the module within 2 %
    of the STEP's cycles in the executable path (the golden closed loop,
    which the RTL player tests hold to the RTL); the kernels alone, which
    charge no append and a row activation per kernel, are off by more than
    10 % at some step. An HFP decode is refused."""
    hub, m = decode_rtl_hub(), DECODE_MODEL
    seqs = random_sequences(m, [20, 9], [2, 2], seed=0)
    dec = decode(m, seqs, DECODE_SLOTS, max_tokens=MAX_TOKENS, hub=hub)
    r = against_decode(dec)
    rows = r["steps"]
    assert len(rows) == 2 * 22 and rows[0]["t_curs"] == [1, 1] and rows[-1]["t_curs"] == [22]
    assert rows[2 * 11]["t_curs"] == [12]  # the shorter sequence done after 11 tokens
    for row in rows:
        assert abs(row["module"] / row["cycles"] - 1) <= 0.02, row
        assert row["cycles"] in [t.responded - t.accepted for t in dec.h.timings]
    assert 0.98 <= r["module"]["min"] and r["module"]["max"] <= 1.02
    assert r["module"]["max"] > 1  # the isolated STEP is not the decode's own run
    assert r["kernels"]["min"] < 0.9
    gqa = TinyModel(heads=4, kv_heads=2)  # a request per (sequence, KV head)
    r = against_decode(decode(gqa, random_sequences(gqa, [6], [1], seed=1), 1, max_tokens=16))
    assert [row["t_curs"] for row in r["steps"][::gqa.layers]] == [[t, t] for t in range(1, 8)]
    assert 0.98 <= r["module"]["min"] and r["module"]["max"] <= 1.02
    model = system_model_of(m, MAX_TOKENS)
    a = _phase(hub, model, [5, 5], AttentionModule(hub, MAX_TOKENS))
    assert sum(a["labels"].values()) == pytest.approx(a["phase"])
    hfp = decode(m, random_sequences(m, [2], [1], seed=0), DECODE_SLOTS,
                 max_tokens=MAX_TOKENS, hub=hub, partition="hfp")
    with pytest.raises(ValueError, match="under TCP only"):
        against_decode(hfp)


def test_module_step_parts():
    """By hand on one STEP: the cycles split into labels that sum to them,
    the EPU's cycles are the decoder's EPU runs', and a request longer by
    a 32-token iteration costs more; bad input is refused."""
    hub, m = decode_rtl_hub(), DECODE_MODEL
    one = attention_step(hub, m.d_head, m.group, (5,), MAX_TOKENS)
    assert sum(one.labels.values()) == one.cycles and one.labels["reduction"] == one.epu_cycles
    assert one.epu_cycles > 0 and one.labels["act_pre"] > 0
    assert attention_step(hub, m.d_head, m.group, (5 + 32,), 64).cycles > one.cycles
    two = attention_step(hub, m.d_head, m.group, (5, 5), MAX_TOKENS)
    assert one.cycles < two.cycles < 2 * one.cycles  # the appends overlap the host's calls
    for bad in ((), (0,)):
        with pytest.raises(ValueError, match="t_curs"):
            attention_step(hub, m.d_head, m.group, bad, MAX_TOKENS)
    with pytest.raises(ValueError, match="requests, the HUB has"):
        attention_step(hub, m.d_head, m.group, (1,) * (hub.requests + 1), MAX_TOKENS)
    with pytest.raises(ConfigError, match="channels, the stage"):
        _attention(system_model_of(m, MAX_TOKENS), np.array([3]), np.arange(1), 1, "tcp",
                   KernelTimer(hub.channel, "exact"), 1.0, 4, 1, False, epu_k=1,
                   module=AttentionModule(hub, MAX_TOKENS))
