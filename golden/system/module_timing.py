"""Attention timed on the PIM module itself: the golden module in closed
loop (``golden.hub.fabric.TimedHub``) runs the lowered TCP attention
program (``golden.hub.lowering.AttentionLayout``) as the executable decode
(``golden.hub.decode``) does, and the system model charges a module's
attention (``_attention`` with a ``module``) its STEP's cycles instead of
its kernels' (``golden.system.kernel_timing``).

One STEP of a layer's attention for requests at ``t_curs``, on a module
fresh from reset, after what the decode does before it:

1. the banks hold another row open, as the layer's FC GEMV leaves them
   (a RAW MAC on every channel's last row, its output read back);
2. per request in turn: its chunks (ASSIGN at its T_cur, GROW), its
   token's K/V append (the key words' RAW WRs, then each V word through
   the GPR's staging entry, as ``golden.hub.decode.write_words``), its
   query's GPR writes;
3. the attention program's load (PROG-WRITEs, PROG-COMMIT) and the STEP.

The STEP's cycles run from its acceptance to its response popped: the
tail of the append still in the channels, the decoder's expansion, the
channels' MACs and RD-OUTs, the read beats' return, the EPU's softmax and
reduction. Its labels split the busiest channel's cycles in the STEP as
``kernel_timing.labels`` splits a kernel's, with ``reduction`` the EPU's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from golden.config import HubConfig
from golden.hub.decode import _ok, _raw_write, write_words
from golden.hub.fabric import TimedHub
from golden.hub.lowering import AttentionLayout
from golden.hub.session import ChunkAllocator
from golden.isa import LANES, HostOp, Opcode
from golden.streams import Command
from golden.system.kernel_timing import trace_labels


@dataclass(frozen=True)
class AttentionModule:
    """The module a system model times attention on (``_attention``'s
    ``module``): its configuration and the layout's ``max_tokens`` (the
    softmax's GPR region, which the EPU's passes span)."""

    hub: HubConfig
    max_tokens: int


@dataclass(frozen=True)
class ModuleStep:
    cycles: int  # STEP accepted to its response popped
    labels: dict  # kernel_timing's labels of the busiest channel, and ``reduction``
    epu_cycles: int


@functools.lru_cache(maxsize=4096)
def attention_step(hub: HubConfig, d_head: int, group: int, t_curs: tuple[int, ...],
                   max_tokens: int | None = None) -> ModuleStep:
    """One attention STEP of requests at ``t_curs`` (module docstring) on
    the golden module ``hub`` in closed loop; ``max_tokens`` sizes the
    layout (default: the longest request)."""
    if not t_curs or min(t_curs) < 1:
        raise ValueError(f"t_curs must be one or more T_cur >= 1, not {t_curs!r}")
    if len(t_curs) > hub.requests:
        raise ValueError(f"{len(t_curs)} requests, the HUB has {hub.requests}")
    lay = AttentionLayout(hub, d_head, group=group, max_tokens=max_tokens or max(t_curs))
    if len(t_curs) * lay.gpr_words > hub.gpr_entries - 1:
        raise ValueError(f"{len(t_curs)} requests of {lay.gpr_words} GPR words do not fit the "
                         f"HUB's {hub.gpr_entries}")
    h = TimedHub(hub, strict=True)
    try:
        every = (1 << hub.n_channels) - 1
        last_row = hub.channel.rows - 1
        _ok(h.host(HostOp.RAW, arg_a=every, arg_b=0,
                   data=Command(Opcode.MAC, row=last_row).pack()))
        _ok(h.host(HostOp.RAW, arg_a=every, arg_b=0, data=Command(Opcode.RD_OUT).pack()))
        alloc = ChunkAllocator(hub.physical_chunks, lay.tokens_per_chunk)
        zero = np.zeros(LANES, np.uint16)
        for r, t in enumerate(t_curs):
            _ok(h.host(HostOp.ASSIGN, r, t, r * lay.gpr_words))
            alloc.assign(r, 0)
            for c in alloc.grow(r, t):
                _ok(h.host(HostOp.GROW, r, c))
            for w, (c, b, va) in enumerate(lay.key_words(t - 1)):
                _raw_write(h, r, c, b, va, r * lay.gpr_words + w)
            for dim in range(d_head):
                c, b, va, _lane = lay.value_word(t - 1, dim)
                write_words(h, r, {(c, b, va): zero})
            for w in range(group * d_head // LANES):
                _ok(h.host(HostOp.GPR_WRITE, arg_a=r * lay.gpr_words + lay.query(0) + w))
        _ok(h.load_program(lay.program(), lay.tokens_per_chunk))
        skip = ((1 << hub.requests) - 1) & ~((1 << len(t_curs)) - 1)
        _ok(h.host(HostOp.STEP, data=skip))
        step, timing = h.last_step, h.timings[-1]
        runs = h.close()
    finally:
        h.fabric.stop()
    lo, hi = timing.accepted, timing.responded
    per = [trace_labels(hub.channel, r.trace, lo, hi) for r in runs]
    busiest = max(per, key=lambda x: x["cycles"] - x["io"])
    epu = sum(n for *_, n in step.epu_runs)
    labels = {k: busiest[k] for k in ("mac", "refresh", "mode", "act_pre")}
    labels["reduction"] = epu  # the channels wait for the EPU: not their I/O
    labels["io"] = (hi - lo) - sum(labels.values())
    return ModuleStep(hi - lo, labels, epu)

