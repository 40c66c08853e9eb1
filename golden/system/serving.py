"""The serving loop behind DPA (PIMphony §VI, DESIGN.md §2.3; docs/pimphony.md).

The incremental study times one decode step of a full batch of fixed
lengths. Here requests live: they arrive, are admitted while their KV
fits, decode one token a step with their KV growing by one token, and
release everything when their last token is out. The KV pool is the HUB's
host-side allocator (:class:`golden.hub.session.ChunkAllocator`): DPA takes
chunks lazily as a request's tokens outgrow its chunks (GROW); the static
baseline reserves the context window at admission.

One allocation unit is a *chunk row*: one chunk of ``chunk_bytes`` for
every K and V stream of the request (``2 x layers x kv_heads`` of them),
so a request holding ``n`` rows holds ``n x streams x chunk_bytes``, as
:func:`golden.system.model.kv_allocation` counts it.

A step, in order:

1. requests that have arrived join the queue (first come, first served);
2. queued requests are admitted (ASSIGN, and a GROW per chunk it maps)
   while the head of the queue fits; one that cannot fit an empty pool is
   rejected;
3. every running request makes room for the token it writes this step
   (GROW where it crosses a chunk). Where the pool is empty, the youngest
   running request is preempted: its chunks are released and it goes back
   to the head of the queue, keeping its generated tokens. Its KV leaves
   with its chunks and comes back on readmission, as
   ``assumptions.preemption`` says: rebuilt by a prefill of its tokens
   (:func:`recompute_s`, at readmission) or swapped out to host memory at
   the preemption and back in at readmission (:func:`swap_s`); either
   stalls every module;
4. the step is timed with :func:`golden.system.model.decode_step` on the
   running requests' lengths, plus the host operations of the step on each
   module's HUB host interface, one at a time (``host_op_cycles`` each):
   the HUB answers STEP only once every command has drained, so the host's
   ASSIGN/GROW/RELEASE sit between steps; and the dispatcher's lead before
   each STEP's first command (:func:`hub_step_lead`), for a STEP per layer
   and attention kernel;
5. every running request has one more token; a request with all its output
   tokens releases its chunks (RELEASE).
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass

import numpy as np

from golden.config import ChannelConfig, ConfigError, HubConfig
from golden.hub import Hub
from golden.hub.session import CapacityError, ChunkAllocator, QktLayout
from golden.isa import HostOp
from golden.system.kernel_timing import KernelTimer
from golden.system.model import Assumptions, Step, check_preemption, decode_step, system_link
from golden.system.reference import GB, Model, System


@dataclass
class Request:
    idx: int
    prompt: int
    output: int
    arrival: float
    generated: int = 0
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None
    preempted: int = 0
    rejected: bool = False
    restore: str | None = None  # how its KV comes back: recompute or swap

    @property
    def length(self) -> int:
        """Tokens in its KV before this step's token."""
        return self.prompt + self.generated


def arrivals(n: int, rate: float, seed: int) -> np.ndarray:
    """Arrival times of ``n`` requests: all at 0 (``rate`` 0, a closed
    queue) or a Poisson process of ``rate`` requests a second."""
    if rate == 0:
        return np.zeros(n)
    gaps = np.random.default_rng(seed + 1).exponential(1.0 / rate, n)
    return np.cumsum(gaps) - gaps[0]


@functools.cache
def hub_step_lead(cfg: ChannelConfig, d_head: int) -> int:
    """Cycles from a STEP's acceptance until the HUB offers its first
    command to the channels, from the cycle-exact golden HUB running the
    QK^T DPA program (``golden.hub.session.QktLayout``) for one request:
    the decoder's request check and the walk to the first channel
    instruction, then the multicast register's load. Later decode cycles
    hide behind the decoded-command FIFO (docs/dpa.md)."""
    hub = HubConfig(channel=cfg.replace(obuf_entries=max(2, cfg.obuf_entries)), n_channels=2)
    layout = QktLayout(hub, d_head, 1)
    h = Hub(hub)
    h.load_program(layout.program(), layout.tokens_per_chunk)
    h.host(HostOp.ASSIGN, 0, layout.tokens_per_chunk, 0)
    h.host(HostOp.GROW, 0, 0, 0)
    return h.step(0).emissions[0].cycle + 1  # offered the cycle after its load


def recompute_s(model: Model, system: System, modules: int, tokens: int) -> float:
    """Seconds to rebuild ``tokens`` tokens of one request's KV by a
    prefill on the compute of all ``modules`` modules (the xPU's matrix
    units or the near-memory processors at ``system.tflops``): the
    decoder layers' weights once per token (2 FLOPs a weight) and causal
    attention, QK^T and SV over half the square of the tokens. The rate is
    the peak's: a lower bound on the stall."""
    fc = 2 * (model.weight_bytes // 2) * tokens
    attn = 2 * model.layers * model.heads * model.d_head * tokens * tokens
    return (fc + attn) / (modules * system.tflops * 1e12)


def swap_s(model: Model, system: System, asm: Assumptions, tp: int, pp: int,
           tokens: int) -> float:
    """Seconds to move ``tokens`` tokens of one request's KV between the
    modules and host memory one way: each module sends its share (its
    :func:`module_streams`) through its own link port
    (:func:`golden.system.model.system_link`), the modules in parallel."""
    return system_link(system, asm).transfer_s(tokens * module_streams(model, tp, pp)
                                               * model.d_head * 2)


def module_streams(model: Model, tp: int, pp: int) -> int:
    """K and V streams of one request that the fullest module holds: its
    stage's layers times its share of the KV heads, K and V each."""
    stage_layers = model.layers // pp + (model.layers % pp > 0)
    return 2 * stage_layers * (model.kv_heads // tp)


def serve(model: Model, system: System, capacity_gb: int, step: Step, timer: KernelTimer,
          t_ck_ns: float, asm: Assumptions, prompts, outputs, arrive, tp: int, pp: int,
          k: int = 1, sub: int = 1, max_steps: int = 1_000_000) -> dict:
    """Run the serving loop (module docstring) until every request has
    finished or was rejected, or ``max_steps`` steps; the outputs, and the
    allocator's ledger (``chunks``): rows granted and released, most rows
    in use, and the pool's size."""
    prompts, outputs = np.asarray(prompts), np.asarray(outputs)
    if len(prompts) != len(outputs) or len(prompts) != len(arrive):
        raise ConfigError("prompts, outputs and arrivals must have one entry per request")
    if len(outputs) and outputs.min() < 1:
        raise ConfigError("every request must generate at least one token")
    streams = 2 * model.layers * model.kv_heads
    tpc = asm.chunk_bytes // (model.d_head * 2)
    if tpc < 1:
        raise ConfigError(f"chunk_bytes={asm.chunk_bytes} holds no token of d_head "
                          f"{model.d_head}")
    kv_cap = capacity_gb * GB - model.weight_bytes
    rows = max(0, kv_cap // (streams * asm.chunk_bytes))
    pool = ChunkAllocator(int(rows), tpc, lazy=step.kv == "dpa", max_tokens=model.window)
    per_module = module_streams(model, tp, pp)
    tck = t_ck_ns * 1e-9
    reqs = [Request(i, int(p), int(o), float(a))
            for i, (p, o, a) in enumerate(zip(prompts, outputs, arrive, strict=True))]
    pending = deque(sorted(reqs, key=lambda r: (r.arrival, r.idx)))
    queue: deque[Request] = deque()
    running: list[Request] = []
    t, steps, tokens = 0.0, 0, 0
    ledger = {"granted_rows": 0, "released_rows": 0, "max_rows_in_use": 0, "pool_rows": int(rows)}
    ops = {"assign": 0, "grow": 0, "release": 0}
    busy = {"decode_s": 0.0, "host_s": 0.0, "dispatch_s": 0.0, "restore_s": 0.0}
    modules = capacity_gb // system.module_gb
    check_preemption(asm)
    restores = {"recompute": 0, "swap": 0}

    # a STEP per layer and kernel (QK^T, SV) on each stage's modules: every
    # stage runs all its micro-batches' STEPs, 2 x layers per decode step
    dispatch_s = 2 * model.layers * hub_step_lead(timer.cfg, model.d_head) * tck
    batch_sizes = []

    def restore_cost(how: str, tokens: int) -> float:
        """Seconds of one rebuild, or of one way of a swap."""
        if how == "recompute":
            return recompute_s(model, system, modules, tokens)
        return swap_s(model, system, asm, tp, pp, tokens)

    def stall(how: str, tokens: int) -> float:
        seconds = restore_cost(how, tokens)
        busy["restore_s"] += seconds
        return seconds

    def restore_of(tokens: int) -> str | None:
        if asm.preemption in ("recompute", "swap"):
            return asm.preemption
        if asm.preemption == "free":
            return None
        swap = 2 * restore_cost("swap", tokens)
        return "swap" if swap < restore_cost("recompute", tokens) else "recompute"

    def release(r: Request, step_ops: dict) -> None:
        ledger["released_rows"] += len(pool.owned[r.idx])
        pool.release(r.idx)
        step_ops["release"] += 1

    def settle(t: float, step_ops: dict) -> float:
        """Each module's HUB serves its share of the step's host operations,
        one at a time, between steps (the modules in parallel)."""
        host_s = sum(step_ops.values()) * per_module * asm.host_op_cycles * tck
        busy["host_s"] += host_s
        for name in ops:
            ops[name] += step_ops[name]
        return t + host_s

    while (pending or queue or running) and steps < max_steps:
        while pending and pending[0].arrival <= t:
            queue.append(pending.popleft())
        if not running and not queue:
            t = pending[0].arrival
            continue
        step_ops = dict.fromkeys(ops, 0)
        while queue:  # first come, first served: stop at the first that does not fit
            r = queue[0]
            try:
                got = pool.assign(r.idx, r.length + 1)
            except CapacityError:
                if not running and pool.used == 0:  # larger than the whole pool
                    r.rejected = True
                    queue.popleft()
                    continue
                break
            queue.popleft()
            running.append(r)
            if r.admitted is None:
                r.admitted = t
            elif r.restore:  # readmitted: its KV is rebuilt, or comes back in
                t += stall(r.restore, r.length)
                restores[r.restore] += 1
            ledger["granted_rows"] += len(got)
            ledger["max_rows_in_use"] = max(ledger["max_rows_in_use"], pool.used)
            step_ops["assign"] += 1
            step_ops["grow"] += len(got)
        i = 0
        while i < len(running):  # room for this step's token, oldest first
            r = running[i]
            try:
                new = pool.grow(r.idx, r.length + 1)
            except CapacityError:
                victim = running.pop()  # the youngest
                victim.restore = restore_of(victim.length)
                if victim.restore == "swap":  # out before its chunks go to others
                    t += stall("swap", victim.length)
                release(victim, step_ops)
                victim.preempted += 1
                queue.appendleft(victim)
                continue  # retry r (or stop, if r was the victim)
            ledger["granted_rows"] += len(new)
            ledger["max_rows_in_use"] = max(ledger["max_rows_in_use"], pool.used)
            step_ops["grow"] += len(new)
            i += 1
        if not running:  # every running request was preempted
            t = settle(t, step_ops)
            continue
        lengths = np.array([r.length + 1 for r in running], dtype=np.int64)
        d = decode_step(model, system, lengths, tp, pp, step.partition, timer, t_ck_ns, asm,
                        sub, k)
        t += d["step_s"] + dispatch_s
        busy["decode_s"] += d["step_s"]
        busy["dispatch_s"] += dispatch_s
        steps += 1
        batch_sizes.append(len(running))
        for r in running:
            r.generated += 1
            tokens += 1
            if r.first_token is None:
                r.first_token = t
        done = [r for r in running if r.generated >= r.output]
        running = [r for r in running if r.generated < r.output]
        for r in done:
            r.finished = t
            release(r, step_ops)
        t = settle(t, step_ops)
    finished = [r for r in reqs if r.finished is not None]
    latency = np.array([r.finished - r.arrival for r in finished]) if finished else np.zeros(1)
    return {
        "steps": steps, "tokens": tokens, "time_s": t,
        "tokens_per_s": tokens / t if t else 0.0,
        "requests": len(reqs), "finished": len(finished),
        "rejected": sum(r.rejected for r in reqs),
        "unfinished": len(reqs) - len(finished) - sum(r.rejected for r in reqs),
        "preemptions": sum(r.preempted for r in reqs),
        "mean_batch": float(np.mean(batch_sizes)) if batch_sizes else 0.0,
        "max_batch": max(batch_sizes, default=0),
        "latency_s": {"mean": float(latency.mean()), "p50": float(np.percentile(latency, 50)),
                      "p99": float(np.percentile(latency, 99))},
        "host_ops": ops, "host_s": busy["host_s"], "decode_s": busy["decode_s"],
        "dispatch_s": busy["dispatch_s"], "restore_s": busy["restore_s"],
        "restores": restores,
        "chunks": {**ledger, "rows_in_use_at_end": pool.used, "streams": streams,
                   "row_bytes": streams * asm.chunk_bytes},
        "tp": tp, "pp": pp, "stages_per_module": k,
    }

