"""The serving loop behind DPA (golden/system/serving.py): requests arrive,
grow their KV chunk by chunk, are preempted when the pool runs dry, finish
and release; every chunk granted is released once and the pool is never
exceeded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from golden.config import ConfigError, load_profile
from golden.system.model import STEPS, Assumptions
from golden.system.reference import GB
from golden.system.serving import (
    arrivals,
    hub_step_lead,
    module_streams,
    recompute_s,
    serve,
    swap_s,
)
from tests.test_golden_system import TINY, XPU, LinearTimer

#: TINY (3 layers, 2 KV heads: 12 K/V streams) with 8 MB chunks of 32,768
#: tokens: a 1 GB system holds 10 chunk rows beside the weights.
ASM = Assumptions(chunk_bytes=1 << 23, xpu_bandwidth_tbs=1e9, link_gbs=1e12, xpu_subbatches=1)
TPC = (1 << 23) // (TINY.d_head * 2)


def run(prompts, outputs, step="+DPA", asm=ASM, arrive=None, **kw):
    cfg = load_profile()
    n = len(prompts)
    return serve(TINY, XPU, 1, STEPS[step], LinearTimer(cfg), 1.0, asm, prompts, outputs,
                 np.zeros(n) if arrive is None else arrive, 1, 1, **kw)


def ledger_holds(r, outputs) -> None:
    c = r["chunks"]
    assert c["granted_rows"] == c["released_rows"] > 0
    assert c["rows_in_use_at_end"] == 0
    assert c["max_rows_in_use"] <= c["pool_rows"]
    assert r["finished"] + r["rejected"] + r["unfinished"] == r["requests"]
    assert r["host_ops"]["assign"] == r["host_ops"]["release"]  # each admission released once


def test_pool_size_is_whole_chunk_rows():
    r = run([100], [1])
    streams = 2 * TINY.layers * TINY.kv_heads
    assert r["chunks"]["pool_rows"] == (GB - TINY.weight_bytes) // (streams << 23) == 10


def test_growth_and_preemption_conserve_chunks():
    """Four requests of 3 rows that grow to 4 after 10 tokens in a pool of
    10 rows: three are admitted, the fourth waits; when the first two grow
    the pool runs dry and the youngest is preempted, re-queued at the head
    and resumed later with its generated tokens. Every request finishes,
    every row granted is released once, and the pool is never exceeded."""
    prompts = [3 * TPC - 10] * 4
    outputs = [20] * 4
    r = run(prompts, outputs)
    ledger_holds(r, outputs)
    assert r["finished"] == 4 and r["preemptions"] >= 1
    assert r["tokens"] == sum(outputs)  # a preempted request keeps its tokens
    assert r["max_batch"] == 3 and r["chunks"]["max_rows_in_use"] == 10
    # GROW maps each row: 3 per admission (4 admissions + re-admissions) and the growth
    assert r["host_ops"]["grow"] == r["chunks"]["granted_rows"]
    assert r["host_ops"]["assign"] == 4 + r["preemptions"]


def test_a_preempted_request_pays_for_its_kv():
    """A preempted request's KV goes with its chunks. ``recompute``: on
    readmission a prefill of its tokens (FC weights once a token, causal
    attention) on the system's compute stalls the loop. ``swap``: its
    share leaves through each module's link port at the preemption and
    comes back at readmission. ``cheaper`` picks the smaller of the two
    per request; ``free`` charges nothing. Arrivals all at once, so the
    runs take the same steps and differ by the stalls alone."""
    prompts, outputs = [3 * TPC - 10] * 4, [20] * 4
    runs = {how: run(prompts, outputs, asm=dataclasses.replace(ASM, preemption=how))
            for how in ("free", "recompute", "swap", "cheaper")}
    free = runs["free"]
    assert free["preemptions"] >= 1 and free["restore_s"] == 0
    for how in ("recompute", "swap", "cheaper"):
        r = runs[how]
        assert r["steps"] == free["steps"] and r["tokens"] == free["tokens"]
        assert r["restore_s"] > 0
        assert r["time_s"] - free["time_s"] == pytest.approx(r["restore_s"])
        assert sum(r["restores"].values()) == r["preemptions"]
    assert runs["recompute"]["restores"]["recompute"] == runs["recompute"]["preemptions"]
    assert runs["swap"]["restores"]["swap"] == runs["swap"]["preemptions"]
    assert runs["cheaper"]["restore_s"] == pytest.approx(
        min(runs["recompute"]["restore_s"], runs["swap"]["restore_s"]))
    # each rebuild is of at least the prompt: 2 FLOPs a weight a token, and
    # QK^T + SV (2 x 2 FLOPs a d_head element) over half the square
    tokens = prompts[0]
    flops = (TINY.weight_bytes * tokens
             + 4 * TINY.layers * TINY.heads * TINY.d_head * tokens * tokens / 2)
    one = flops / (XPU.tflops * 1e12)
    assert recompute_s(TINY, XPU, 1, tokens) == pytest.approx(one)
    n = runs["recompute"]["preemptions"]
    assert n * one <= runs["recompute"]["restore_s"] < n * recompute_s(TINY, XPU, 1, tokens + 20)
    # a swap moves the request's K and V (12 streams of d_head BF16) out and in
    kv = tokens * 2 * TINY.layers * TINY.kv_heads * TINY.d_head * 2
    assert swap_s(TINY, XPU, ASM, 1, 1, tokens) == pytest.approx(kv / (ASM.link_gbs * 1e9))


def test_an_unknown_preemption_is_refused():
    with pytest.raises(ConfigError, match="preemption must be one of"):
        run([100], [1], asm=dataclasses.replace(ASM, preemption="drop"))


def test_static_allocation_reserves_the_window():
    """The static step reserves max(window, tokens) at admission: requests
    of 1,000 tokens hold one row each (window 4,096 < a chunk's 32,768),
    never grow, and all 10 run at once."""
    r = run([1000] * 12, [5] * 12, step="+DCS")
    ledger_holds(r, [5] * 12)
    assert r["max_batch"] == 10 and r["preemptions"] == 0
    assert r["host_ops"]["grow"] == 12  # one row mapped per admission, none grown


def test_a_request_larger_than_the_pool_is_rejected():
    r = run([11 * TPC, 100], [3, 3])
    assert r["rejected"] == 1 and r["finished"] == 1
    ledger_holds(r, [3, 3])


def test_host_operations_are_charged_between_steps():
    """Each module's HUB serves the step's ASSIGN, GROW and RELEASE one at a
    time, ``host_op_cycles`` each, for every K/V stream it holds."""
    prompts, outputs = [3 * TPC - 10] * 4, [20] * 4
    free = run(prompts, outputs, asm=dataclasses.replace(ASM, host_op_cycles=0))
    paid = run(prompts, outputs, asm=dataclasses.replace(ASM, host_op_cycles=7))
    ops = sum(paid["host_ops"].values())
    assert free["host_s"] == 0.0
    assert paid["host_s"] == pytest.approx(ops * module_streams(TINY, 1, 1) * 7 * 1e-9)
    assert paid["time_s"] == pytest.approx(free["time_s"] + paid["host_s"])


def test_requests_arrive_over_time():
    """Poisson arrivals far apart: each request runs alone, and the loop
    waits for the next one."""
    arrive = arrivals(4, 10.0, 0)  # 0.1 s apart on average: far longer than a request
    assert arrive[0] == 0 and np.all(np.diff(arrive) > 0)
    r = run([100] * 4, [3] * 4, arrive=arrive)
    assert r["max_batch"] == 1 and r["time_s"] > arrive[-1]
    assert np.all(arrivals(3, 0.0, 0) == 0)


def test_bad_inputs_are_refused():
    with pytest.raises(ConfigError, match="at least one token"):
        run([100], [0])
    with pytest.raises(ConfigError, match="one entry per request"):
        run([100, 100], [1])


def test_a_request_that_outgrows_the_pool_alone_is_dropped_and_released():
    """One request fills the pool and must grow: it is preempted (nothing
    younger to evict), cannot be readmitted to an empty pool and is
    rejected; its rows are released once."""
    r = run([10 * TPC - 2], [5])
    assert r["rejected"] == 1 and r["preemptions"] == 1 and r["tokens"] == 2
    ledger_holds(r, [5])


def test_dispatcher_lead_is_charged_per_step_and_kernel():
    """The golden HUB: STEP accepted in cycle 0, the request's check in 1,
    its first command (WR-INP) decoded into the FIFO in 2, loaded into the
    multicast register in 3 and offered in 4. The loop charges that lead
    for a STEP per layer and attention kernel, each decode step."""
    cfg = load_profile()
    assert hub_step_lead(cfg, TINY.d_head) == 4
    r = run([100] * 3, [4] * 3)
    assert r["dispatch_s"] == pytest.approx(r["steps"] * 2 * TINY.layers * 4 * 1e-9)
    assert r["time_s"] == pytest.approx(r["decode_s"] + r["host_s"] + r["dispatch_s"])
