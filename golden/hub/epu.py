"""The HUB's EPU: softmax over scores gathered in the GPR and the TCP
reduction of partial sums (DESIGN.md §2, §2.4; docs/epu.md). Bit-exact
numerics and the cycle count of each instruction; ``golden.hub.Hub`` runs
them on its GPR (``Hub.run_epu``).

Values travel as bit patterns (BF16 ``uint16``, FP32 ``uint32``), under
the policy of ``golden.numerics`` (flush to zero, round to nearest even,
canonical NaN).

Softmax of ``n`` BF16 scores ``x`` (BF16 in and out, FP32 inside)
    1. ``m = max x`` (an input value, exact).
    2. ``d = x - m`` in FP32 (``numerics.f32_add``), so ``d <= 0``.
    3. ``e = exp(d)`` as an FP32 value, by ``exp_f32``: ``|d|`` to fixed
       point with 16 fraction bits (truncated; ``|d| >= 128`` gives 0),
       times ``log2 e`` (24 fraction bits, truncated to 16): ``d log2 e =
       k + f`` with integer ``k <= 0`` and ``f`` in [0, 1) of 16 bits;
       ``2**f = T[f >> 8] * (1 + (f & 255) * ln2 / 2**16)`` from a
       256-entry table of ``2**(j/256)`` (24-bit) and a linear term
       (product truncated to 24 bits); the exponent is ``k``, and a result
       below ``2**-126`` is 0. Relative error below ``2**-15``
       (``EXP_ERROR``; tests/test_golden_epu.py checks it exhaustively
       over BF16 differences and on FP32 samples).
    4. ``s = sum e`` in FP32: one accumulator per lane, each adding its
       lane of the score words in word order from +0, then the pairwise
       tree of ``numerics.tree_sum`` over the 16 lane sums. ``s >= 1``.
    5. ``r = 1/s`` by restoring division of the significands, one quotient
       bit per cycle: ``q = floor(2**47 / sig(s))`` (25 bits), ``r = q *
       2**(103 - exp(s))`` (truncated, relative error below ``2**-23``).
    6. ``p = e * r``, the exact product rounded once to BF16 (nearest
       even; below ``2**-126``: +0).

    Any NaN or +inf among the scores, or every score -inf, makes every
    result the canonical NaN (as float32 softmax does: ``inf - inf``);
    a -inf score among finite ones gives +0. Lanes past the ``n``-th
    score in its last word are written +0, and so are the words after it
    up to a whole number of ``op_size`` words (``padded_words``: an SV
    loop's iterations then read zeros, not stale scores, past T_cur).

Reduction (TCP: SV partial sums from every channel's RD-OUT beats)
    Each result word is ``span`` consecutive GPR words summed lane by lane
    in FP32, in word order (the first widened exactly, the next added with
    ``numerics.f32_add``), then rounded once to BF16. Overflow gives
    infinity with its sign, ``inf - inf`` and NaN inputs the canonical NaN,
    as every FP32 addition here; the EPU raises no fault for them.

Timing (cycles, one GPR word read per cycle)
    Softmax over ``W`` score words, padded to ``P`` words, is three passes
    (max and exp-and-sum over the ``W`` words; exp again and scale over
    the ``P``, writing each result word), each ``PASS_TAIL`` cycles longer
    than its words, the lane-sum tree (``TREE_LEVELS``, one level a cycle)
    and the reciprocal (``RECIP_BITS``, one quotient bit a cycle): ``2 W +
    P + 3 PASS_TAIL + TREE_LEVELS + RECIP_BITS``. Exp is recomputed in the
    third pass, so the EPU holds no FP32 copy of the scores.
    A reduction of ``op_size`` words of ``span`` is ``op_size * span +
    PASS_TAIL``. ``T_cur = 0`` leaves a softmax nothing to do: it costs
    the decoder's one cycle and touches nothing."""

from __future__ import annotations

import math

import numpy as np

from golden import numerics
from golden.isa import LANES, Opcode

#: log2(e) with 24 fraction bits
LOG2E_Q24 = round(math.log2(math.e) * (1 << 24))
#: ln(2) with 16 fraction bits
LN2_Q16 = round(math.log(2) * (1 << 16))
#: 2**(j / 256) with 23 fraction bits, j = 0 .. 255
EXP2_TABLE = np.array([round(2 ** (j / 256) * (1 << 23)) for j in range(256)], np.uint64)
#: bound on the relative error of ``exp_f32`` (checked by the tests)
EXP_ERROR = 2.0 ** -15

PASS_TAIL = 2  # a pass's last read: one cycle to the data, one to its result
TREE_LEVELS = 4  # the 16 lane sums, one adder level a cycle
RECIP_BITS = 25  # quotient bits of the reciprocal, one a cycle
SOFTMAX_FIXED = 3 * PASS_TAIL + TREE_LEVELS + RECIP_BITS


def exp_f32(d: np.ndarray) -> np.ndarray:
    """``exp(d)`` for FP32 bit patterns ``d`` that are <= 0 (or -0, or
    -inf): FP32 bits, by the fixed-point algorithm of the module doc."""
    d = np.asarray(d, dtype=np.uint32).astype(np.int64)
    exp = (d >> 23) & 0xFF
    sig = (d & 0x7FFFFF) | (1 << 23)
    shift = 134 - exp  # |d| * 2**16 = sig >> shift; exp >= 134: |d| >= 128
    big = shift <= 0
    fixed = np.where((exp == 0) | big | (shift >= 24), 0,
                     sig >> np.clip(shift, 0, 63))  # |d| * 2**16, truncated
    y = (fixed * LOG2E_Q24) >> 24  # -d log2 e, 16 fraction bits
    frac = (-y) & 0xFFFF  # f, 16 bits
    k = -((y + 0xFFFF) >> 16)
    lin = (1 << 24) + ((frac & 0xFF) * LN2_Q16 >> 8)
    man = (EXP2_TABLE[frac >> 8].astype(np.int64) * lin) >> 24  # in [2**23, 2**24)
    biased = 127 + k
    bits = (biased << 23) | (man - (1 << 23))
    return np.where(big | (biased <= 0), 0, bits).astype(np.uint32)


def _recip(s: int) -> tuple[int, int]:
    """(q, shift): ``1/s ~ q * 2**-shift`` for FP32 bits ``s >= 1``."""
    exp, sig = (s >> 23) & 0xFF, (s & 0x7FFFFF) | (1 << 23)
    return (1 << 47) // sig, exp - 103


def _scale_bf16(e: np.ndarray, q: int, shift: int) -> np.ndarray:
    """BF16 of ``e * q * 2**-shift``, rounded once (nearest even), FTZ.
    ``e``: FP32 bits >= 0 (0 or normal)."""
    e = np.asarray(e, dtype=np.uint32).astype(np.int64)
    exp = (e >> 23) & 0xFF
    man = (e & 0x7FFFFF) | (1 << 23)
    prod = man.astype(np.uint64) * np.uint64(q)  # < 2**48: exact
    top = np.where(prod >> np.uint64(47), 48, 47).astype(np.int64)  # bit length
    cut = (top - 8).astype(np.uint64)
    keep = (prod >> cut).astype(np.int64)
    rem = prod & ((np.uint64(1) << cut) - np.uint64(1))
    half = np.uint64(1) << (cut - np.uint64(1))
    up = (rem > half) | ((rem == half) & ((keep & 1) == 1))
    keep = keep + up
    carry = keep >> 8
    keep, top = np.where(carry, keep >> 1, keep), top + carry
    # value = keep * 2**(top - 8 + exp - 150 - shift); keep in [128, 256)
    unbiased = top - 1 + exp - 150 - shift
    biased = unbiased + 127
    bits = (biased << 7) | (keep - 128)
    return np.where((exp == 0) | (biased <= 0), 0, bits).astype(np.uint16)


def softmax(scores: np.ndarray, n: int) -> np.ndarray:
    """Softmax of the first ``n`` elements of ``scores`` (BF16 bits, shape
    ``(W, 16)``, element ``j`` in word ``j // 16``, lane ``j % 16``):
    BF16 bits of the same shape, +0 past the ``n``-th element."""
    words = np.asarray(scores, dtype=np.uint16).reshape(-1, LANES)
    if n < 0 or softmax_words(n) != len(words):
        raise ValueError(f"{n} scores do not fill {len(words)} words of {LANES} lanes")
    valid = (np.arange(words.size) < n).reshape(words.shape)
    out = np.zeros(words.shape, np.uint16)
    if n == 0:
        return out
    x = numerics.bf16_to_f32(words)
    xs = x[valid]
    special = (xs == numerics.F32_QNAN) | (xs == 0x7F800000)  # NaN (canonical) or +inf
    if special.any() or (xs == 0xFF800000).all():
        out[valid] = numerics.BF16_QNAN
        return out
    m = xs.view(np.float32).max()
    neg_m = np.float32(-m).view(np.uint32)
    e = np.where(valid, exp_f32(numerics.f32_add(x, neg_m)), 0).astype(np.uint32)
    lanes = np.add.accumulate(e.view(np.float32), axis=0, dtype=np.float32)[-1]
    s = int(numerics.tree_sum(lanes.view(np.uint32)))
    q, shift = _recip(s)
    out[valid] = _scale_bf16(e[valid], q, shift)
    return out


def reduce(words: np.ndarray, span: int) -> np.ndarray:
    """``len(words) // span`` BF16 words: each the FP32 sum of ``span``
    consecutive words (BF16 bits, shape ``(op_size * span, 16)``), in word
    order, rounded once."""
    words = np.asarray(words, dtype=np.uint16).reshape(-1, span, LANES)
    acc = numerics.bf16_to_f32(words[:, 0])
    for c in range(1, span):
        acc = numerics.f32_add(acc, numerics.bf16_to_f32(words[:, c]))
    return numerics.f32_to_bf16(acc)


def _ceil_div(n, d: int):
    """``ceil(n / d)`` of an integer or an integer array."""
    return -(-np.asarray(n) // d)


def softmax_words(n: int) -> int:
    """GPR words of ``n`` scores."""
    return int(_ceil_div(n, LANES))


def _padded(words, group: int):
    """``words`` rounded up to a multiple of ``group`` (0 or 1: as they are)."""
    g = max(1, group)
    return _ceil_div(words, g) * g


def padded_words(n: int, group: int = 1) -> int:
    """GPR words a softmax over ``n`` scores writes: its score words rounded
    up to a multiple of ``group`` (a power of two; 0 or 1: no padding)."""
    if group > 1 and group & (group - 1):
        raise ValueError(f"softmax op_size={group} is not a power of two")
    return int(_padded(softmax_words(n), group))


def cycles(op: Opcode, n: int = 0, op_size: int = 0, span: int = 1) -> int:
    """EPU cycles of one instruction: a softmax over ``n`` scores padded to
    whole groups of ``op_size`` words, a reduction of ``op_size`` words of
    ``span`` (0: nothing to do)."""
    if op == Opcode.EPU_SOFTMAX:
        padded_words(n, op_size)  # op_size a power of two
        return int(softmax_cycles(n, op_size))
    if op == Opcode.EPU_REDUCE:
        return int(reduce_cycles(op_size, span))
    raise ValueError(f"{op!r} is not an EPU instruction")


def softmax_cycles(n, op_size: int = 1, words_per_cycle: int = 1):
    """``cycles`` of a softmax over ``n`` scores (an integer or an array),
    padded to whole groups of ``op_size`` words, on an EPU that reads
    ``words_per_cycle`` GPR words a cycle in each pass (the RTL's and this
    model's EPU: 1; a wider EPU is the system model's assumption, its
    passes shorter and its tail, tree and reciprocal the same)."""
    w = _ceil_div(n, LANES)
    k = words_per_cycle
    return np.where(w > 0, 2 * _ceil_div(w, k) + _ceil_div(_padded(w, op_size), k)
                    + SOFTMAX_FIXED, 0)


def reduce_cycles(op_size: int, span: int = 1, words_per_cycle: int = 1) -> int:
    """``cycles`` of a reduction of ``op_size`` words of ``span``, on an EPU
    reading ``words_per_cycle`` words a cycle (``softmax_cycles``)."""
    return int(_ceil_div(op_size * span, words_per_cycle)) + PASS_TAIL if op_size else 0


#: The EPU datapath's operations, each on one GPR word's sixteen lanes
#: (docs/energy.md prices them): ``vec`` sixteen FP32 adds, compares or
#: multiplies; ``exp`` sixteen exps; ``tree`` one sixteen-to-one tree (the
#: max's or the sum's); ``div`` one step of the reciprocal's division.
OPS = ("vec", "exp", "tree", "div")


def softmax_ops(n) -> dict:
    """:data:`OPS` of a softmax over ``n`` scores (an integer or an array),
    as the datapath does them over its ``W`` score words: the max pass
    compares each word with the lane maxima (``W`` vec) and the max tree
    takes their maximum (1 tree); the sum pass subtracts the max, takes
    exp and accumulates (``2 W`` vec, ``W`` exp); the lane tree sums (1
    tree); the reciprocal takes ``RECIP_BITS`` division steps; the scale
    pass subtracts, takes exp again and multiplies (``2 W`` vec, ``W``
    exp). The padding words are written +0 with no operation. ``T_cur``
    0: nothing."""
    w = _ceil_div(n, LANES)
    some = (w > 0).astype(np.int64) if np.ndim(w) else int(w > 0)
    return {"vec": 5 * w, "exp": 2 * w, "tree": 2 * some, "div": RECIP_BITS * some}


def reduce_ops(op_size: int, span: int = 1) -> dict:
    """:data:`OPS` of a reduction of ``op_size`` words of ``span``: one
    FP32 add per source word after each result's first (widened exactly)."""
    return {"vec": op_size * max(0, span - 1), "exp": 0, "tree": 0, "div": 0}


def gpr_words(op: Opcode, f: dict[str, int], t_cur: int) -> tuple[np.ndarray, np.ndarray]:
    """(entries read, entries written) of an EPU instruction word's fields
    ``f``, relative to the request's GPR base, for a request at ``t_cur``."""
    if op == Opcode.EPU_SOFTMAX:
        src = f["gpr_addr"] + np.arange(padded_words(t_cur, f["op_size"])) * f["span"]
        return src, src
    if op == Opcode.EPU_REDUCE:
        return (f["gpr_addr"] + np.arange(f["op_size"] * f["span"]),
                f["dst_addr"] + np.arange(f["op_size"]))
    raise ValueError(f"{op!r} is not an EPU instruction")


def range_fault(gpr_entries: int, base: int, op: Opcode, f: dict[str, int],
                t_cur: int) -> str:
    """Why the instruction would touch a GPR entry outside the GPR ('' if
    it does not): the request's CMD_RANGE fault."""
    for what, words in zip(("reads", "writes"), gpr_words(op, f, t_cur), strict=True):
        if len(words) and base + int(words[-1]) >= gpr_entries:
            return (f"{op.name} {what} GPR entry {base + int(words[-1])} out of range "
                    f"(< {gpr_entries}) at T_cur={t_cur}")
    return ""
