"""The system model's attention timed on the module itself
(golden/system/module_timing.py): against the executable decode's every
attention STEP on the small model, by hand on its parts, and its bad
input."""

from __future__ import annotations

import numpy as np
import pytest

from golden.config import ConfigError
from golden.hub.decode import decode, random_sequences
from golden.isa import HostOp
from golden.system.kernel_timing import KernelTimer
from golden.system.model import _attention
from golden.system.module_timing import AttentionModule, attention_step
from golden.system.reference import Model
from tb.hub_stimulus import DECODE_MODEL, DECODE_SLOTS, decode_rtl_hub

MAX_TOKENS = 32


def _system_model(m) -> Model:
    return Model("tiny", m.layers, m.heads, m.d_head, m.d_model, m.d_ff, m.group, MAX_TOKENS,
                 "the decode tests' TinyModel", (), 1)


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
    10 % at some step."""
    hub, m = decode_rtl_hub(), DECODE_MODEL
    seqs = random_sequences(m, [20, 9], [2, 2], seed=0)
    dec = decode(m, seqs, DECODE_SLOTS, max_tokens=MAX_TOKENS, hub=hub)
    steps = [r for c, r in zip(dec.h.calls, dec.h.timings, strict=True) if c.op == HostOp.STEP]
    att = [r.responded - r.accepted for (name, *_), r in zip(dec.steps, steps, strict=True)
           if name.startswith("attention")]
    lengths = [len(q.prompt) + q.new_tokens for q in seqs]
    want = [tuple(t for n in lengths if n >= t) for t in range(1, max(lengths) + 1)
            for _ in range(m.layers)]
    assert len(att) == len(want) == 2 * 22
    model, module = _system_model(m), AttentionModule(hub, MAX_TOKENS)
    worst = kernels = 0.0
    for cycles, lens in zip(att, want, strict=True):
        a = _phase(hub, model, lens, module)
        worst = max(worst, abs(a["phase"] / cycles - 1))
        assert abs(a["phase"] / cycles - 1) <= 0.02, (lens, a["phase"], cycles)
        assert sum(a["labels"].values()) == pytest.approx(a["phase"])
        kernels = max(kernels, abs(_phase(hub, model, lens, None)["phase"] / cycles - 1))
    assert 0 < worst <= 0.02 < 0.1 < kernels  # (the isolated STEP is not the decode's own run)


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
        _attention(_system_model(m), np.array([3]), np.arange(1), 1, "tcp",
                   KernelTimer(hub.channel, "exact"), 1.0, 4, 1, False, epu_k=1,
                   module=AttentionModule(hub, MAX_TOKENS))
