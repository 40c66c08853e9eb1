"""Host-call sessions of the PIM module and their checks, shared by the
cocotb tests (tb/test_hub.py) and the standalone player (tb/play_tests.py
``hub_*``): a QK^T decode session checked against numpy, the same with the
EPU's softmax and reduction after it, one scenario per fault code, the
EPU's faults, and bad host operations; and (tb/test_decode.py, ``hub_decode``)
a small transformer's decode, every host call of it, on the module it was
lowered for."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.channel import Command
from golden.config import HubConfig
from golden.hub import (
    COMMIT_INDEX_SHIFT,
    STEP_MASK_BITS,
    HostCall,
    QktLayout,
    QktSession,
    epu,
    instr,
    program_calls,
    qkt_session,
    status_fields,
)
from golden.hub.decode import (
    LOGIT_BOUND,
    TinyModel,
    compare,
    decode,
    decode_hub,
    random_sequences,
)
from golden.isa import Fault, HostOp, HostStatus, ModiField, Opcode
from tb.hub_scoreboard import check_responses

#: the two requests' T_cur at the first step: request 0 crosses a chunk
#: boundary within four steps (the host grows it between steps)
QKT_T0 = {0: 254, 1: 120}
IDLE_STEPS = 2


@dataclass
class QktCase:
    session: QktSession
    calls: list[HostCall]
    steps: int


def qkt_case(hub: HubConfig, steps: int = 4, seed: int = 0) -> QktCase:
    """QK^T for two requests whose keys sit in non-contiguous, interleaved
    chunks, over ``steps`` decode steps, then IDLE_STEPS more back to back
    with no host writes before them (their lag is the decoder's alone; the
    keys of their new tokens are not written)."""
    s = qkt_session(hub, d_head=32, t0=QKT_T0, steps=steps, seed=seed)
    grows = sum(c.op == HostOp.GROW and c.req_id == 0 for c in s.calls)
    if steps >= 4 and grows < 2:
        raise AssertionError(f"request 0 grew {grows} times; the session must cross a chunk")
    return QktCase(s, s.calls + [HostCall(HostOp.STEP, note="idle host")] * IDLE_STEPS, steps)


def check_qkt_scores(hub: HubConfig, case: QktCase, rsp: list[tuple[int, int]]) -> None:
    """The scores the host read back equal K q (numpy, BF16 tolerance)."""
    s = case.session
    for r, t_start in QKT_T0.items():
        for step in range(case.steps):
            t = t_start + step
            words = [numerics.words_to_lanes(rsp[i][1])[:hub.channel.banks]
                     for i, rr, tt, _ in s.reads if rr == r and tt == t]
            got = numerics.bf16_to_float(np.concatenate(words)[:t])
            ref = numerics.bf16_to_float(s.keys[r][:t]) @ numerics.bf16_to_float(s.queries[r])
            np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=1e-2,
                                       err_msg=f"request {r}, step {step}")


def _setup(hub, program, t_cur, chunks, tpc=None):
    calls = program_calls(program, tpc or QktLayout(hub, 32).tokens_per_chunk)
    for r, (t, cs) in enumerate(zip(t_cur, chunks, strict=True)):
        calls.append(HostCall(HostOp.ASSIGN, r, t, 64 * r))
        calls += [HostCall(HostOp.GROW, r, c) for c in cs]
    return calls


def _status(r):
    return HostCall(HostOp.STATUS, r)


#: per fault: the request that faults, and the one that must still run in
#: the scenario's first step (None: no such check)
FAULT_WHO = {Fault.T_RANGE: (0, 1), Fault.UNMAPPED: (0, 1), Fault.TABLE_FULL: (0, 1),
             Fault.CMD_RANGE: (1, 0), Fault.BAD_LOOP: (1, None), Fault.BAD_FIELD: (0, None),
             Fault.BAD_OPCODE: (0, None)}


def fault_scenarios(hub: HubConfig) -> dict[Fault, list[HostCall]]:
    """One host session per fault code; each ends by releasing both
    requests, and the next loads its own program, so they run one after
    another on one module."""
    layout = QktLayout(hub, 32)
    every = (1 << hub.n_channels) - 1
    prog = layout.program()
    tpc = layout.tokens_per_chunk
    scenarios = {}
    # T_RANGE: request 0 needs two chunks and has one; then grow, clear, run
    scenarios[Fault.T_RANGE] = _setup(hub, prog, (tpc + 1, 5), ((0,), (1,))) + [
        HostCall(HostOp.STEP), _status(0), _status(1), HostCall(HostOp.GROW, 0, 5),
        HostCall(HostOp.CLEAR, 0), HostCall(HostOp.STEP), _status(0)]
    # UNMAPPED, mid-accumulation: OBuf 0 is dirty when the slot-1 MAC faults -> drained
    bad = list(prog)
    bad[-3] = instr(Opcode.RD_OUT, ch_mask=every, op_size=1, gpr_addr=16, out_idx=1)
    bad[-2] = instr(Opcode.MAC, ch_mask=every, op_size=2, row=2, col=0, gbuf_idx=0, out_idx=1)
    # The drain's RD-OUT beats have no destination: GPR words 0..N-1 (where
    # the drain's gpr field, 0, would put them) keep what the host wrote.
    marks = [HostCall(HostOp.GPR_WRITE, arg_a=c, data=0x5A5A0000 + c)
             for c in range(hub.n_channels)]
    scenarios[Fault.UNMAPPED] = _setup(hub, bad, (20, 0), ((0,), (1,))) + marks + [
        HostCall(HostOp.STEP), _status(0), _status(1)] + [
        HostCall(HostOp.GPR_READ, arg_a=c) for c in range(hub.n_channels)]
    # TABLE_FULL
    scenarios[Fault.TABLE_FULL] = _setup(hub, prog, (8, 8), ((0,), (1,))) + [
        HostCall(HostOp.GROW, 0, 2 + i) for i in range(hub.chunks_per_request)] + [
        HostCall(HostOp.STEP), _status(0), _status(1), HostCall(HostOp.CLEAR, 0),
        HostCall(HostOp.STEP, data=0b10, note="request 1 skipped"), _status(0), _status(1),
        HostCall(HostOp.STEP)]
    # CMD_RANGE: request 1's scores run past the GPR
    scenarios[Fault.CMD_RANGE] = _setup(hub, prog, (20, 20), ((0,), (1,))) + [
        HostCall(HostOp.RELEASE, 1), HostCall(HostOp.ASSIGN, 1, 20, hub.gpr_entries - 4),
        HostCall(HostOp.GROW, 1, 3), HostCall(HostOp.STEP), _status(1), _status(0)]
    # invalid programs: loop without end, unknown field, bad opcode
    scenarios[Fault.BAD_LOOP] = _setup(hub, [instr(Opcode.DYN_LOOP, body_len=3, t_div=8),
                                             instr(Opcode.MAC, ch_mask=every, op_size=1)],
                                       (8, 8), ((0,), (1,))) + [HostCall(HostOp.STEP), _status(1)]
    scenarios[Fault.BAD_FIELD] = _setup(hub, [
        instr(Opcode.DYN_LOOP, body_len=2, t_div=8),
        instr(Opcode.DYN_MODI, target=1, field_sel=ModiField.GBUF_IDX, stride=1),
        instr(Opcode.RD_OUT, ch_mask=every, op_size=1)], (8, 8), ((0,), (1,))) + [
        HostCall(HostOp.STEP), _status(0)]
    scenarios[Fault.BAD_OPCODE] = _setup(hub, [instr(Opcode.WR_INP, ch_mask=every, op_size=1), 0],
                                         (8, 8), ((0,), (1,))) + [
        HostCall(HostOp.STEP), _status(0)]
    return {code: calls + [HostCall(HostOp.RELEASE, r) for r in range(2)]
            for code, calls in scenarios.items()}


def check_fault(code: Fault, calls: list[HostCall], rsp: list[tuple[int, int]]) -> None:
    """The faulting request reads ``code`` in its status and did not run
    in the first step; the other request ran."""
    bad, good = FAULT_WHO[code]
    status = next(d for (_, d), c in zip(rsp, calls, strict=True)
                  if c.op == HostOp.STATUS and c.req_id == bad)
    got = status_fields(status)["fault"]
    assert got == code, f"{code.name}: request {bad} reads fault {got}"
    step = next(d for (_, d), c in zip(rsp, calls, strict=True) if c.op == HostOp.STEP)
    assert not step >> bad & 1, f"{code.name}: faulting request {bad} ran"
    if good is not None:
        assert step >> good & 1, f"{code.name}: request {good} did not run"


def host_error_calls(hub: HubConfig) -> list[HostCall]:
    """Bad host operations (BAD_OP, BAD_ARG) among good ones."""
    return [HostCall(0), HostCall(15), HostCall(HostOp.ASSIGN, hub.requests, 1, 0),
            HostCall(HostOp.GROW, 0, 1), HostCall(HostOp.STEP, data=1 << hub.requests),
            HostCall(HostOp.ASSIGN, 0, 1, 0),
            HostCall(HostOp.ASSIGN, 0, 1, 0), HostCall(HostOp.GROW, 0, hub.physical_chunks),
            HostCall(HostOp.GPR_READ, arg_a=hub.gpr_entries),
            HostCall(HostOp.PROG_WRITE, arg_a=hub.instr_depth),
            HostCall(HostOp.RAW, arg_a=1, data=Command(Opcode.WR, bank=hub.channel.banks).pack()),
            HostCall(HostOp.RAW, arg_a=1 << hub.n_channels, data=Command(Opcode.WR).pack()),
            HostCall(HostOp.PROG_COMMIT, arg_a=0, arg_b=0), _status(0),
            HostCall(HostOp.RELEASE, 0), _status(0),
            # good: a GPR word written to channel 0 with a RAW WR
            HostCall(HostOp.GPR_WRITE, arg_a=0, data=0x1234),
            HostCall(HostOp.RAW, arg_a=1, arg_b=0, data=Command(Opcode.WR).pack())]


def check_host_errors(rsp: list[tuple[int, int]]) -> None:
    """The first five are refused: two unknown operations, three bad
    arguments (the last a STEP skipping a request the HUB does not have)."""
    codes = [c for c, _ in rsp][:5]
    assert codes == [HostStatus.BAD_OP, HostStatus.BAD_OP, HostStatus.BAD_ARG,
                     HostStatus.BAD_ARG, HostStatus.BAD_ARG], codes


#: the EPU session's requests, T_cur at the first step: both end in a
#: partial score word
EPU_T0 = {0: 40, 1: 23}
EPU_STEPS = 2
EPU_REDUCE_DST = 2  # relative GPR entry of the reduction's two results (after the query)
EPU_PAD = 4  # the softmax writes whole groups of 4 words (zeros after the last score)


def epu_program(layout: QktLayout) -> list[int]:
    """QK^T, then the softmax over the score words in place (padded with
    zero words to a multiple of EPU_PAD), then a reduction of score words
    0-1 and 2-3 into two words before them."""
    return layout.program() + [
        instr(Opcode.EPU_SOFTMAX, op_size=EPU_PAD, gpr_addr=layout.scores, span=1),
        instr(Opcode.EPU_REDUCE, op_size=2, gpr_addr=layout.scores, dst_addr=EPU_REDUCE_DST,
              span=2)]


def epu_case(hub: HubConfig, seed: int = 0) -> QktCase:
    """The QK^T session of two requests of unequal length with the EPU's
    softmax and reduction in its program; after each STEP the host reads
    the reduction's words, then the score words."""
    s = qkt_session(hub, d_head=32, t0=EPU_T0, steps=EPU_STEPS, seed=seed)
    calls = program_calls(epu_program(s.layout), s.layout.tokens_per_chunk)
    for c in s.calls:
        if c.op in (HostOp.PROG_WRITE, HostOp.PROG_COMMIT):
            continue
        calls.append(c)
        if c.op == HostOp.STEP:
            calls += [HostCall(HostOp.GPR_READ, arg_a=s.gpr_base[r] + EPU_REDUCE_DST + u)
                      for r in EPU_T0 for u in range(2)]
    return QktCase(s, calls, EPU_STEPS)


def check_epu(hub: HubConfig, case: QktCase, rsp: list[tuple[int, int]]) -> None:
    """After each STEP: the first T_cur scores, read as the EPU lays them
    out (word i, lane j: score 16 i + j), are a distribution (each in
    [0, 1], their sum 1 within BF16 rounding), the words after them up to
    a multiple of EPU_PAD are zero, and each reduction word is its two
    score words' sum (BF16 tolerance)."""
    s, calls = case.session, case.calls
    steps = [i for i, c in enumerate(calls) if c.op == HostOp.STEP]
    for step, first in enumerate(steps):
        last = steps[step + 1] if step + 1 < len(steps) else len(calls)
        got = {c.arg_a: numerics.bf16_to_float(numerics.words_to_lanes(d))
               for c, (_, d) in zip(calls[first:last], rsp[first:last], strict=True)
               if c.op == HostOp.GPR_READ}
        for r, t0 in EPU_T0.items():
            n, base = t0 + step, s.gpr_base[r] + s.layout.scores
            w = epu.softmax_words(n)
            p = np.concatenate([got[base + i] for i in range(w)])
            assert not p[n:].any() and not any(got[base + i].any()
                                               for i in range(w, epu.padded_words(n, EPU_PAD)))
            p = p[:n]
            assert ((p >= 0) & (p <= 1)).all(), f"request {r}, step {step}: {p}"
            assert abs(p.sum() - 1) < 0.02, f"request {r}, step {step}: sum {p.sum()}"
            for u in range(2):
                want = got[base + 2 * u] + got[base + 2 * u + 1]
                np.testing.assert_allclose(got[s.gpr_base[r] + EPU_REDUCE_DST + u], want,
                                           rtol=2 ** -7, atol=1e-30,
                                           err_msg=f"request {r}, step {step}, word {u}")


#: the EPU fault session's commit checks, in order: (program, fault)
def _epu_bad_programs(hub: HubConfig) -> list[tuple[list[int], Fault]]:
    every = (1 << hub.n_channels) - 1
    return [
        ([instr(Opcode.DYN_LOOP, body_len=2, t_div=8),
          instr(Opcode.MAC, ch_mask=every, op_size=1),
          instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=16, span=1)], Fault.BAD_LOOP),
        ([instr(Opcode.EPU_REDUCE, op_size=2, gpr_addr=8, dst_addr=9, span=2)], Fault.BAD_FIELD),
        ([instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=16, span=0)], Fault.BAD_FIELD),
        ([instr(Opcode.EPU_SOFTMAX, op_size=3, gpr_addr=16, span=1)], Fault.BAD_FIELD),
    ]


def epu_fault_calls(hub: HubConfig) -> list[HostCall]:
    """The EPU's faults: a softmax whose score words run past the GPR
    faults its request (CMD_RANGE) and the other request runs; a softmax
    at T_cur 0 does nothing; each of ``_epu_bad_programs`` is refused at
    PROG-COMMIT. It starts by releasing requests 0 and 1 (after
    ``epu_case``, on the same module)."""
    layout = QktLayout(hub, 32)
    far = layout.program() + [instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=layout.scores,
                                    span=255)]
    near = layout.program() + [instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=layout.scores,
                                     span=1)]
    calls = [HostCall(HostOp.RELEASE, r) for r in range(2)]
    calls += _setup(hub, far, (20, 5), ((0,), (1,))) + [
        HostCall(HostOp.STEP), _status(0), _status(1)]
    calls += [HostCall(HostOp.RELEASE, r) for r in range(2)]
    calls += _setup(hub, near, (0, 5), ((0,), (1,))) + [HostCall(HostOp.STEP), _status(0)]
    calls += [HostCall(HostOp.RELEASE, r) for r in range(2)]
    for prog, _ in _epu_bad_programs(hub):
        calls += program_calls(prog, 1)
    return calls


def check_epu_faults(hub: HubConfig, calls: list[HostCall], rsp: list[tuple[int, int]]) -> None:
    """What ``epu_fault_calls`` must give: request 0 faults with CMD_RANGE
    while request 1 runs; both run at T_cur 0 and 5; each bad program's
    commit fault code."""
    steps = [d for c, (_, d) in zip(calls, rsp, strict=True) if c.op == HostOp.STEP]
    assert steps[0] == 0b10 | 0b01 << STEP_MASK_BITS, f"first STEP: {steps[0]:#x}"
    assert steps[1] == 0b11, f"second STEP: {steps[1]:#x}"
    status = next(d for c, (_, d) in zip(calls, rsp, strict=True) if c.op == HostOp.STATUS)
    assert status_fields(status)["fault"] == Fault.CMD_RANGE
    commits = [(code, d) for c, (code, d) in zip(calls, rsp, strict=True)
               if c.op == HostOp.PROG_COMMIT][-len(_epu_bad_programs(hub)):]
    for (code, d), (_, want) in zip(commits, _epu_bad_programs(hub), strict=True):
        assert code == HostStatus.FAULT and d & ((1 << COMMIT_INDEX_SHIFT) - 1) == want, \
            (code, d, want)


# ---- a decode on the module ------------------------------------------------------

#: the transformer the RTL decodes: two layers (each STEPs its own requests
#: with the others skipped), GQA (two query heads share a KV head), and
#: d_head 16 over two channels, so SV's partial sums come from two token
#: groups and the EPU's reduction adds them (docs/lowering.md)
DECODE_MODEL = TinyModel(layers=2, d_model=32, heads=2, kv_heads=1, d_head=16, d_ff=32,
                         vocab=16)
DECODE_SLOTS = 2
#: the player's decode: three sequences over the two slots (the third takes
#: the first freed slot and its chunks), prompts of ``longest``, 2 and 3
#: tokens, then these many greedy tokens each
DECODE_SHORT_PROMPTS = (2, 3)
DECODE_NEW_TOKENS = (1, 2, 1)


def decode_rtl_hub() -> HubConfig:
    """The module the RTL decode runs on: ``decode_hub`` for DECODE_MODEL
    with 32 rows a bank (the weights' 4 chunks and the KV caches') and DCS
    channels."""
    hub = decode_hub(DECODE_MODEL, DECODE_SLOTS, rows=32)
    return hub.replace(channel=hub.channel.replace(policy="dcs"))


@dataclass
class DecodeCase:
    calls: list[HostCall]  # every host call of the decode, weights first
    responses: list[tuple[int, int]]  # what the golden decoder got for each
    rows: list[dict]  # per sequence, against the float32 reference (golden.hub.decode.compare)
    grants: list[tuple[int, int, int]]  # (sequence, request, chunk) of every GROW
    tokens_per_chunk: int


def decode_case(hub: HubConfig, prompts: list[int], new_tokens: list[int],
                seed: int = 0) -> DecodeCase:
    """DECODE_MODEL decoded on the golden ``hub``: random sequences
    (``seed``) with prompts of these lengths and these many greedy tokens,
    ``DECODE_SLOTS`` at a time, every host call recorded (the weights'
    writes first)."""
    seqs = random_sequences(DECODE_MODEL, prompts, new_tokens, seed)
    dec = decode(DECODE_MODEL, seqs, DECODE_SLOTS,
                 max_tokens=max(len(q.prompt) + q.new_tokens for q in seqs), hub=hub)
    return DecodeCase(dec.h.calls, dec.h.responses, compare(DECODE_MODEL, seqs), dec.grants,
                      dec.att.tokens_per_chunk)


def player_decode_case(hub: HubConfig, longest: int, seed: int = 0) -> DecodeCase:
    """The player's decode: a ``longest``-token prompt (longer than a
    chunk's tokens: its KV heads GROW mid-decode) and DECODE_SHORT_PROMPTS."""
    return decode_case(hub, [longest, *DECODE_SHORT_PROMPTS], list(DECODE_NEW_TOKENS), seed)


def check_decode(case: DecodeCase, rsp: list[tuple[int, int]]) -> None:
    """The module's response to every call is what the golden decoder got
    (so the module decoded the same logits and tokens), and the decode is
    within LOGIT_BOUND of the float32 reference."""
    check_responses(case.calls, rsp, case.responses)
    for k, row in enumerate(case.rows):
        assert row["max_error"] < LOGIT_BOUND, f"sequence {k}: logit error {row['max_error']}"
