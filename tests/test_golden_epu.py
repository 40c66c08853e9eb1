"""The HUB's EPU in the golden model (golden/hub/epu.py): its numerics
against exact and float64 oracles and numpy float32 softmax, special
values, the reduction against exact rational arithmetic, and the EPU
instructions in DPA programs (commit checks, faults, the wait for read
beats, cycles)."""

import math

import numpy as np
import pytest

from golden import energy, numerics
from golden.config import small_hub_config
from golden.hub import Hub, QktLayout, check_program, epu, instr, qkt_session
from golden.isa import LANES, Fault, HostOp, HostStatus, Opcode, ReqState
from tests import fp_oracle

HUB = small_hub_config().replace(epu=True)


def padded(values, n=None):
    """BF16 bits of ``values`` in whole words (+0 past the end)."""
    bits = numerics.float_to_bf16(values) if np.asarray(values).dtype.kind == "f" else values
    n = len(bits) if n is None else n
    out = np.zeros(epu.softmax_words(n) * LANES, np.uint16)
    out[:n] = bits[:n]
    return out.reshape(-1, LANES)


def bf16_ulp(v: np.ndarray) -> np.ndarray:
    """One BF16 unit in the last place of each (positive) value."""
    return np.exp2(np.floor(np.log2(np.maximum(v, 2.0 ** -126))) - 7)


# ---- exp ------------------------------------------------------------------

def exp_spec(bits: int) -> int:
    """The module doc's exp algorithm, scalar, in Python integers."""
    exp, sig = (bits >> 23) & 0xFF, (bits & 0x7FFFFF) | 1 << 23
    if exp == 0:
        fixed = 0
    elif exp >= 134:
        return 0
    else:
        fixed = sig >> (134 - exp) if 134 - exp < 24 else 0
    y = fixed * round(math.log2(math.e) * 2 ** 24) >> 24
    k, frac = -((y + 0xFFFF) >> 16), (-y) & 0xFFFF
    table = round(2 ** ((frac >> 8) / 256) * 2 ** 23)
    man = table * ((1 << 24) + ((frac & 0xFF) * round(math.log(2) * 2 ** 16) >> 8)) >> 24
    assert 1 << 23 <= man < 1 << 24
    return 0 if k + 127 <= 0 else (k + 127) << 23 | (man - (1 << 23))


def test_exp_matches_its_scalar_specification():
    rng = np.random.default_rng(0)
    bits = np.concatenate([np.arange(0x8000, 0xFF81, dtype=np.uint32) << 16,
                           rng.integers(0x80000000, 0xC3800000, 20000, dtype=np.uint64)
                           .astype(np.uint32), np.array([0, 0x80000000, 0xFF800000], np.uint32)])
    got = epu.exp_f32(bits)
    assert [int(g) for g in got] == [exp_spec(int(b)) for b in bits]


def test_exp_error_bound_over_every_bf16_difference_and_fp32_samples():
    """Relative error below EXP_ERROR wherever exp(d) is a normal FP32
    number; 0 below 2**-126 (flush to zero); exp(0) = 1 and exp(-inf) = 0
    exactly."""
    rng = np.random.default_rng(1)
    d = np.concatenate([np.arange(0x8000, 0xFF80, dtype=np.uint32) << 16,
                        rng.integers(0x80000000, 0xC3800000, 500_000, dtype=np.uint64)
                        .astype(np.uint32)])
    got = epu.exp_f32(d).view(np.float32).astype(np.float64)
    dv = np.where((d >> 23) & 0xFF == 0, 0.0, d.view(np.float32).astype(np.float64))
    true = np.exp(dv)
    normal = true >= 2.0 ** -126 * (1 + 2 * epu.EXP_ERROR)
    rel = np.abs(got[normal] - true[normal]) / true[normal]
    assert rel.max() < epu.EXP_ERROR
    assert rel.max() > epu.EXP_ERROR / 4  # the bound is tight, not vacuous
    assert (got[true < 2.0 ** -126] == 0).all()
    one, zero = epu.exp_f32(np.array([0x80000000, 0, 0xFF800000], np.uint32))[[0, 1, 2]][:2], \
        epu.exp_f32(np.array([0xFF800000], np.uint32))
    assert (one == 0x3F800000).all() and zero[0] == 0


# ---- softmax ----------------------------------------------------------------

def softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 1000, 4096])
@pytest.mark.parametrize("scale", [0.1, 1.0, 8.0, 60.0])
def test_softmax_within_one_bf16_ulp_of_the_exact_softmax(n, scale):
    """The documented bound: every result within one BF16 ulp of the exact
    softmax of the BF16 scores (docs/epu.md derives it)."""
    rng = np.random.default_rng(n * 7 + int(scale))
    x = numerics.float_to_bf16(rng.standard_normal(n) * scale)
    p = epu.softmax(padded(x), n).reshape(-1)
    assert (p[n:] == 0).all()
    got = numerics.bf16_to_float(p[:n]).astype(np.float64)
    exact = softmax64(numerics.bf16_to_float(x).astype(np.float64))
    small = exact < 2.0 ** -126
    assert (np.abs(got - exact) <= bf16_ulp(exact))[~small].all()
    assert (got[small] <= 2.0 ** -126).all()


def test_softmax_against_numpy_float32_softmax():
    """numpy float32 softmax rounded to BF16 and the EPU agree to one BF16
    step everywhere, and exactly on most elements."""
    rng = np.random.default_rng(5)
    same = total = 0
    for n in (64, 333, 2048):
        x = numerics.float_to_bf16(rng.standard_normal(n) * 4)
        xf = numerics.bf16_to_float(x)
        e = np.exp(xf - xf.max(), dtype=np.float32)
        ref = numerics.float_to_bf16(e / e.sum(dtype=np.float32)).astype(np.int64)
        got = epu.softmax(padded(x), n).reshape(-1)[:n].astype(np.int64)
        assert np.abs(got - ref).max() <= 1  # adjacent BF16 patterns (all positive)
        same += int((got == ref).sum())
        total += n
    assert same / total > 0.9


def test_softmax_of_64k_scores_keeps_the_bound():
    """T = 65,536 tokens (4,096 words): the lane accumulators still hold
    the one-ulp bound."""
    rng = np.random.default_rng(7)
    x = numerics.float_to_bf16(rng.standard_normal(1 << 16) * 3)
    got = numerics.bf16_to_float(epu.softmax(padded(x), 1 << 16).reshape(-1)).astype(np.float64)
    exact = softmax64(numerics.bf16_to_float(x).astype(np.float64))
    ok = exact >= 2.0 ** -126
    assert (np.abs(got - exact) <= bf16_ulp(exact))[ok].all()


def test_softmax_exact_cases():
    one = epu.softmax(padded(np.array([3.5], np.float32)), 1).reshape(-1)
    assert one[0] == 0x3F80 and (one[1:] == 0).all()
    equal = epu.softmax(padded(np.full(16, -2.0, np.float32)), 16).reshape(-1)
    assert (equal == numerics.float_to_bf16(np.float32(1 / 16))).all()
    # scaled by a common offset: the same result (max subtraction)
    x = numerics.float_to_bf16(np.arange(20, dtype=np.float32) / 4)
    y = numerics.float_to_bf16(np.arange(20, dtype=np.float32) / 4 + 8)
    assert (epu.softmax(padded(x), 20) == epu.softmax(padded(y), 20)).all()


@pytest.mark.parametrize("special,expect", [
    (0x7FC0, "nan"), (0xFFC1, "nan"), (0x7F80, "nan"),  # NaN, another NaN, +inf
    (0xFF80, "zero"),  # -inf among finite scores: that element is 0
    (0x0001, "subnormal"),  # read as 0
])
def test_softmax_special_values(special, expect):
    x = numerics.float_to_bf16(np.array([1.0, 0.5, -3.0, 2.0, 0.0], np.float32))
    x[2] = special
    p = epu.softmax(padded(x), 5).reshape(-1)
    if expect == "nan":
        assert (p[:5] == numerics.BF16_QNAN).all() and (p[5:] == 0).all()
    elif expect == "zero":
        assert p[2] == 0
        ref = epu.softmax(padded(np.delete(x, 2)), 4).reshape(-1)
        assert (np.delete(p[:5], 2) == ref[:4]).all()
    else:
        x0 = x.copy()
        x0[2] = 0
        assert (p == epu.softmax(padded(x0), 5).reshape(-1)).all()


def test_softmax_all_minus_infinity_is_nan_and_bad_shapes_raise():
    x = np.full(3, 0xFF80, np.uint16)
    assert (epu.softmax(padded(x), 3).reshape(-1)[:3] == numerics.BF16_QNAN).all()
    assert (epu.softmax(np.zeros((0, LANES), np.uint16), 0) == 0).all()
    with pytest.raises(ValueError, match="do not fill"):
        epu.softmax(np.zeros((2, LANES), np.uint16), 5)
    with pytest.raises(ValueError, match="do not fill"):
        epu.softmax(np.zeros((1, LANES), np.uint16), -1)


# ---- reduction ----------------------------------------------------------------

def reduce_oracle(words: np.ndarray, span: int) -> list[int]:
    out = []
    for group in words.reshape(-1, span, LANES):
        for lane in range(LANES):
            acc = int(group[0, lane]) << 16
            if (acc >> 23) & 0xFF == 0:
                acc &= 0x80000000
            if (acc >> 23) & 0xFF == 0xFF and acc & 0x7FFFFF:
                acc = 0x7FC00000
            for c in range(1, span):
                acc = fp_oracle.add_f32(acc, int(group[c, lane]) << 16)
            out.append(fp_oracle.f32_to_bf16(acc))
    return out


@pytest.mark.parametrize("span", [1, 2, 3, 8])
def test_reduce_matches_exact_rational_arithmetic(span):
    rng = np.random.default_rng(span)
    words = numerics.float_to_bf16(rng.standard_normal((4 * span, LANES))
                                   * rng.choice([1e-3, 1.0, 1e3], (4 * span, LANES)))
    got = epu.reduce(words, span)
    assert got.shape == (4, LANES)
    assert [int(g) for g in got.reshape(-1)] == reduce_oracle(words, span)


def test_reduce_overflow_and_nan_policy():
    big = numerics.float_to_bf16(np.float32(3e38))
    words = np.zeros((2, LANES), np.uint16)
    words[:, 0] = big  # overflow: +inf
    words[0, 1], words[1, 1] = 0x7F80, 0xFF80  # inf - inf: NaN
    words[0, 2] = 0xFFC1  # a NaN: canonical NaN
    words[0, 3], words[1, 3] = 0x8000, 0x8000  # -0 + -0 = -0
    got = epu.reduce(words, 2)[0]
    assert got[0] == 0x7F80 and got[1] == 0x7FC0 and got[2] == 0x7FC0 and got[3] == 0x8000
    assert [int(g) for g in got] == reduce_oracle(words, 2)


def test_cycles():
    assert epu.cycles(Opcode.EPU_SOFTMAX, 0) == 0
    assert epu.cycles(Opcode.EPU_SOFTMAX, 16) == 3 + epu.SOFTMAX_FIXED
    assert epu.cycles(Opcode.EPU_SOFTMAX, 17) == 6 + epu.SOFTMAX_FIXED
    assert epu.cycles(Opcode.EPU_REDUCE, op_size=4, span=3) == 12 + epu.PASS_TAIL
    with pytest.raises(ValueError, match="not an EPU"):
        epu.cycles(Opcode.MAC)
    # padding: the third pass also runs over the zero words after the scores
    assert epu.padded_words(17, 4) == 4 and epu.padded_words(64, 4) == 4
    assert epu.padded_words(0, 8) == 0 and epu.padded_words(17, 1) == 2
    assert epu.cycles(Opcode.EPU_SOFTMAX, 17, op_size=4) == 2 * 2 + 4 + epu.SOFTMAX_FIXED
    assert epu.cycles(Opcode.EPU_SOFTMAX, 64, op_size=4) == 12 + epu.SOFTMAX_FIXED
    with pytest.raises(ValueError, match="power of two"):
        epu.padded_words(17, 3)


def test_softmax_pads_with_zero_words():
    """op_size 4 over 5 words of scores: words 5..7 written +0, word 8
    untouched; the reads and the datapath count the padding once."""
    h = Hub(HUB, strict=True)
    h.host(HostOp.ASSIGN, 0, 70, 0)
    h.host(HostOp.GROW, 0, 0)
    rng = np.random.default_rng(5)
    before = numerics.float_to_bf16(rng.standard_normal((12, LANES)))
    for i, w in enumerate(before):
        h.host(HostOp.GPR_WRITE, arg_a=i, data=numerics.lanes_to_word(w))
    assert h.load_program([instr(Opcode.EPU_SOFTMAX, op_size=4, gpr_addr=0, span=1)],
                          1000).code == HostStatus.OK
    reads, r = h.gpr_reads, h.step()
    assert (h.gpr[:5] == epu.softmax(before[:5], 70)).all()
    assert not h.gpr[5:8].any() and (h.gpr[8:12] == before[8:12]).all()
    assert h.gpr_reads - reads == 2 * 5 + 8 and h.epu_words == 18
    (_, _, _, n), = r.epu_runs
    assert n == 2 * 5 + 8 + epu.SOFTMAX_FIXED
    # the datapath's operations over the 5 score words, none for the padding:
    # max pass 5 compares; sum pass 5 subtracts, exps and adds; scale pass 5
    # subtracts, exps and multiplies; the max and sum trees; 25 division steps
    assert h.epu_ops == {"vec": 5 + 10 + 10, "exp": 10, "tree": 2, "div": 25}


def test_epu_operations_and_their_energy_by_hand():
    """A softmax over 33 scores (3 words) and a reduction of 2 words over
    span 4: the operations each does, their sum in the HUB, and
    ``golden.energy.hub_energy`` pricing them in ``other``."""
    assert epu.softmax_ops(33) == {"vec": 15, "exp": 6, "tree": 2, "div": epu.RECIP_BITS}
    assert epu.softmax_ops(0) == dict.fromkeys(epu.OPS, 0)
    assert epu.reduce_ops(2, 4) == {"vec": 6, "exp": 0, "tree": 0, "div": 0}
    assert epu.reduce_ops(3, 1) == dict.fromkeys(epu.OPS, 0)  # one source word: widened, rounded
    vec = epu.softmax_ops(np.array([0, 16, 33]))  # the system model's arrays
    assert vec["vec"].tolist() == [0, 5, 15] and vec["div"].tolist() == [0, 25, 25]
    h = Hub(HUB, strict=True)
    h.host(HostOp.ASSIGN, 0, 33, 0)
    h.host(HostOp.GROW, 0, 0)
    assert h.load_program([instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=0, span=1),
                           instr(Opcode.EPU_REDUCE, op_size=2, gpr_addr=0, dst_addr=16, span=4)],
                          1000).code == HostStatus.OK
    h.step()
    assert h.epu_ops == {"vec": 15 + 6, "exp": 6, "tree": 2, "div": 25}
    params = energy.energy_params("gddr6-aim")
    by_hand = (21 * params.epu_vec_pj + 6 * params.epu_exp_pj + 2 * params.epu_tree_pj
               + 25 * params.epu_div_pj)
    assert by_hand == pytest.approx(21 * 0.1905 + 6 * 0.29695 + 2 * 0.1441 + 25 * 0.1905 / 16,
                                    rel=1e-4)
    e = energy.hub_energy(params, [], h.gpr_reads, h.gpr_writes, h.epu_ops)
    assert e["epu_pj"] == pytest.approx(by_hand)
    assert e["breakdown"]["other"] == pytest.approx(by_hand)
    gpr = h.gpr_reads * params.gpr_rd_pj + h.gpr_writes * params.gpr_wr_pj
    assert e["total_pj"] == pytest.approx(by_hand + gpr)
    assert e["counts"]["epu_ops"] == h.epu_ops
    assert energy.hub_energy(params, [], 0, 0)["epu_pj"] == 0  # no EPU run: nothing


# ---- in DPA programs ------------------------------------------------------------

def test_epu_instructions_need_an_epu_and_stay_outside_loops():
    sm = instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=16, span=1)
    assert check_program([sm], HUB).ok
    no_epu = check_program([sm], HUB.replace(epu=False))
    assert no_epu.fault == Fault.BAD_OPCODE and "without an EPU" in no_epu.message
    mac = instr(Opcode.MAC, ch_mask=1, op_size=1)
    looped = check_program([instr(Opcode.DYN_LOOP, body_len=2, t_div=1), mac, sm], HUB)
    assert (looped.fault, looped.index) == (Fault.BAD_LOOP, 2)
    assert check_program([instr(Opcode.EPU_SOFTMAX, gpr_addr=16)], HUB).fault == Fault.BAD_FIELD
    for pad, ok in ((0, False), (1, True), (3, False), (64, True), (96, False)):
        got = check_program([instr(Opcode.EPU_SOFTMAX, op_size=pad, gpr_addr=16, span=1)], HUB)
        assert got.ok == ok, (pad, got)
    red = dict(op_size=2, gpr_addr=8, span=4)
    assert check_program([instr(Opcode.EPU_REDUCE, dst_addr=8, **red)], HUB).ok  # in place
    assert check_program([instr(Opcode.EPU_REDUCE, dst_addr=0, **red)], HUB).ok  # before
    assert check_program([instr(Opcode.EPU_REDUCE, dst_addr=16, **red)], HUB).ok  # after
    inside = check_program([instr(Opcode.EPU_REDUCE, dst_addr=9, **red)], HUB)
    assert inside.fault == Fault.BAD_FIELD and "overwrite" in inside.message
    zero = check_program([instr(Opcode.EPU_REDUCE, op_size=0, gpr_addr=8, dst_addr=0, span=1)],
                         HUB)
    assert zero.fault == Fault.BAD_FIELD


def qkt_softmax_session(t0, steps=2, seed=0):
    """The QK^T session with an EPU softmax over the scores after the loop."""
    s = qkt_session(HUB, d_head=32, t0=t0, steps=steps, seed=seed)
    layout = s.layout
    prog = layout.program() + [instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=layout.scores,
                                     span=1)]
    calls = [c for c in s.calls if c.op not in (HostOp.PROG_WRITE, HostOp.PROG_COMMIT)]
    head = [(HostOp.PROG_WRITE, i, w) for i, w in enumerate(prog)]
    return s, prog, head, calls


def run_session(prog, calls, tokens_per_chunk, landed=None):
    h = Hub(HUB, strict=True)
    assert h.load_program(prog, tokens_per_chunk).code == HostStatus.OK
    results, reads = [], {}
    for c in calls:
        if c.op == HostOp.STEP:
            results.append(h.step(landed=landed))
            continue
        rsp = h.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        if c.op == HostOp.GPR_READ:
            reads[(len(results), c.arg_a)] = rsp.data
    return h, results, reads


def test_softmax_after_qkt_in_one_program_equals_the_epu_on_the_scores():
    """QK^T then EPU_SOFTMAX in one program: the GPR holds the softmax of
    the very scores the program without it leaves there, every step, for
    requests of unequal length."""
    t0 = {0: 40, 1: 23}
    s, prog, _, calls = qkt_softmax_session(t0)
    tpc = s.layout.tokens_per_chunk
    _, plain, plain_reads = run_session(s.layout.program(), calls, tpc)
    h, with_epu, epu_reads = run_session(prog, calls, tpc)
    for step in range(2):
        runs = with_epu[step].epu_runs
        assert [r for r, *_ in runs] == [0, 1]
        for r, t in t0.items():
            n = t + step
            base = s.gpr_base[r] + s.layout.scores
            words = np.stack([numerics.words_to_lanes(plain_reads[(step + 1, base + i)])
                              for i in range(epu.softmax_words(n))])
            got = np.stack([numerics.words_to_lanes(epu_reads[(step + 1, base + i)])
                            for i in range(epu.softmax_words(n))])
            assert (got == epu.softmax(words, n)).all()
            assert abs(numerics.bf16_to_float(got).sum() - 1) < 0.02
        # each run starts after the request's last command was taken and
        # takes the documented cycles
        for (r, op, start, n), nxt in zip(runs, [*runs[1:], None], strict=True):
            assert op == Opcode.EPU_SOFTMAX and n == epu.cycles(op, t0[r] + step)
            last = max(e.cycle for e in with_epu[step].emissions if e.request == r)
            assert start > last
            if nxt is not None:
                first_next = min(e.decoded for e in with_epu[step].emissions
                                 if e.request == nxt[0])
                assert first_next >= start + n  # the decoder waited for the EPU
    assert h.epu_words == 3 * sum(epu.softmax_words(t + k) for t in t0.values() for k in range(2))


def test_softmax_waits_for_the_last_read_beat():
    """``landed`` late: the EPU starts exactly then, and the decoder goes
    on after its cycles."""
    s, prog, _, calls = qkt_softmax_session({0: 20}, steps=1)
    tpc = s.layout.tokens_per_chunk
    _, early, _ = run_session(prog, calls, tpc)
    (_, _, start, n), = early[0].epu_runs
    _, late, _ = run_session(prog, calls, tpc, landed=lambda k: start + 50)
    (_, _, start2, n2), = late[0].epu_runs
    assert (start2, n2) == (start + 50, n)
    assert late[0].decode_end - early[0].decode_end == 50


def test_softmax_gpr_range_faults_only_its_request():
    """A softmax whose score words run past the GPR faults its request
    (CMD_RANGE) and writes nothing; the other request's runs."""
    layout = QktLayout(HUB, 32)
    span = HUB.gpr_entries // 8
    prog = layout.program() + [instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=layout.scores,
                                     span=span)]
    s = qkt_session(HUB, d_head=32, t0={0: 200, 1: 10}, steps=1, seed=2)
    calls = [c for c in s.calls if c.op not in (HostOp.PROG_WRITE, HostOp.PROG_COMMIT)]
    hubs = []
    for p in (layout.program(), prog):
        h = Hub(HUB)
        h.load_program(p, layout.tokens_per_chunk)
        for c in calls:
            if c.op == HostOp.STEP:
                r = h.step()
                break
            h.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        hubs.append(h)
    assert r.faulted == [0] and r.ran == [1]
    assert h.requests[0].state == ReqState.FAULTED and h.requests[0].fault == Fault.CMD_RANGE
    assert [req for req, *_ in r.epu_runs] == [1]
    (plain, faulted), base1 = hubs, s.gpr_base[1] + layout.scores
    assert (faulted.gpr[:s.gpr_base[1]] == plain.gpr[:s.gpr_base[1]]).all()
    assert (faulted.gpr[base1] == epu.softmax(plain.gpr[base1:base1 + 1], 10)).all()


def test_reduce_in_a_program_sums_each_channels_word():
    """EPU_REDUCE over RAW-read beats: the channels' words at gpr + u*N + c
    summed over c, as golden.hub.epu.reduce does."""
    h = Hub(HUB, strict=True)
    n = HUB.n_channels
    h.host(HostOp.ASSIGN, 0, 0, 0)  # T_cur 0: no chunk needed
    rng = np.random.default_rng(3)
    src = numerics.float_to_bf16(rng.standard_normal((2 * n, LANES)))
    for i, w in enumerate(src):
        h.host(HostOp.GPR_WRITE, arg_a=8 + i, data=numerics.lanes_to_word(w))
    prog = [instr(Opcode.EPU_REDUCE, op_size=2, gpr_addr=8, dst_addr=0, span=n)]
    assert h.load_program(prog, 1).code == HostStatus.OK
    r = h.step()
    (_, op, start, cyc), = r.epu_runs
    # STEP in 0, the request checked in 1, the word visited in 2
    assert cyc == 2 * n + epu.PASS_TAIL and start == 3
    assert (h.gpr[:2] == epu.reduce(src, n)).all()
    got = [numerics.bf16_to_float(h.gpr[u]) for u in range(2)]
    want = [numerics.bf16_to_float(src[u * n:(u + 1) * n]).sum(axis=0) for u in range(2)]
    np.testing.assert_allclose(got, want, rtol=2 ** -7)


def test_epu_accuracy_study():
    from golden.system.studies import epu_accuracy

    out = epu_accuracy(sizes=(16, 300), seed=1)
    for row in out["softmax"]:
        assert row["max_error_ulp"] <= 1 and row["max_steps_from_float32"] <= 1
        assert row["cycles"] == epu.cycles(Opcode.EPU_SOFTMAX, row["scores"])
    assert out["reduce"]["max_error_ulp"] <= 1
