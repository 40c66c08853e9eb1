"""The system model against the executable decode: its attention phase
(``golden.system.model._attention`` under TCP, timed on the module,
``golden.system.module_timing``, and by its kernels) beside every
attention STEP of a decode on the golden module in closed loop
(``golden.hub.decode``); ``pimorch decode --system-model``
(docs/lowering.md)."""

from __future__ import annotations

import numpy as np

from golden.hub.decode import program_kind
from golden.isa import HostOp
from golden.system.kernel_timing import KernelTimer
from golden.system.model import _attention
from golden.system.module_timing import AttentionModule
from golden.system.reference import Model


def system_model_of(model, window: int) -> Model:
    """The system model's description (``golden.system.reference.Model``) of
    a decode's ``golden.hub.decode.TinyModel``, its context ``window``."""
    return Model("tiny", model.layers, model.heads, model.d_head, model.d_model, model.d_ff,
                 model.group, window, "a golden.hub.decode.TinyModel", (), 1)


def against_decode(dec) -> dict:
    """The system model's attention phase (``golden.system.model._attention``
    under TCP on ``dec``'s module) against every attention STEP of the
    executable decode ``dec`` (``golden.hub.decode.PimDecoder``, the golden
    module in closed loop): per STEP its requests' T_cur, its cycles, and
    the phase timed on the module (``attention_step``) and by the kernels;
    the ratios' min, median and max."""
    if dec.partition != "tcp":
        raise ValueError("the system model times a module's attention under TCP only "
                         f"(the decode placed it {dec.partition.upper()})")
    hub, window = dec.hub, dec.att.max_tokens
    model, module = system_model_of(dec.m, window), AttentionModule(hub, window)
    timer = KernelTimer(hub.channel, "exact")
    steps = [r for c, r in zip(dec.h.calls, dec.h.timings, strict=True) if c.op == HostOp.STEP]
    rows = []
    for (name, *_), t_curs, r in zip(dec.steps, dec.step_t_curs, steps, strict=True):
        if program_kind(name) != "attention":
            continue
        lens = np.array(t_curs[::model.kv_heads])  # a request per (sequence, KV head)
        phase = {key: _attention(model, lens, np.arange(len(lens)), model.kv_heads, "tcp",
                                 timer, 1.0, hub.n_channels, 1, False, epu_k=1,
                                 module=m)["phase"]
                 for key, m in (("module", module), ("kernels", None))}
        rows.append({"t_curs": list(t_curs), "cycles": r.responded - r.accepted, **phase})
    out = {"steps": rows}
    for key in ("module", "kernels"):
        ratio = [row[key] / row["cycles"] for row in rows]
        out[key] = {"min": round(min(ratio), 4), "median": round(float(np.median(ratio)), 4),
                    "max": round(max(ratio), 4)} if ratio else None
    return out
