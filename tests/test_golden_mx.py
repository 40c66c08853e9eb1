"""MX9/MX6/MX4 quantizer (golden/mx.py): hand vectors, an exact-rational
oracle, error bounds and idempotence."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from golden.mx import BLOCK, FORMATS, MX4, MX6, MX9, dequantize, quantize


def bf16(*values):
    """BF16 patterns of exactly representable floats."""
    f = np.asarray(values, dtype=np.float32)
    bits = f.view(np.uint32)
    assert not np.any(bits & 0xFFFF), "not exact in BF16"
    return (bits >> 16).astype(np.uint16)


def block(*head, fill=0.0):
    return bf16(*(list(head) + [fill] * (BLOCK - len(head))))


def test_one_and_zeros_mx9():
    t = quantize(block(1.0), MX9)
    assert t.shared[0] == 127 and t.micro[0] == 0b11111110  # zero pairs are below Es
    assert t.codes[0, 0] == 64 and not t.codes[0, 1:].any()  # 0x80 >> 1
    assert dequantize(t)[0] == 1.0


def test_ties_to_even_and_saturation_mx4():
    # Es = 127: shift 6; 1.25 = 0xA0 -> 2 r 32 (tie, even) -> 2; 1.5 -> 3;
    # 1.75 = 0xE0 -> 3 r 32 (tie, odd) -> 4, saturated at 3 (no carry)
    t = quantize(block(1.0, 1.25, 1.5, 1.75), MX4)
    assert list(t.codes[0, :4]) == [2, 2, 3, 3]
    assert list(dequantize(t)[:4]) == [1.0, 1.0, 1.5, 1.5]


def test_micro_exponent_buys_a_bit():
    # pair 0 holds Es (2.0); pair 1 both below: u = 1, shift 6, 1.5 exact.
    t = quantize(block(2.0, 0.0, 1.5, 1.5), MX4)
    assert t.shared[0] == 128 and t.micro[0] == 0b11111110  # pairs 1..7 (zeros too)
    assert list(dequantize(t)[:4]) == [2.0, 0.0, 1.5, 1.5]
    # without the micro bit 1.5 would round (tie, odd) to 2.0: check the
    # pair that shares Es gets no micro bit and keeps the coarse scale
    t2 = quantize(block(2.0, 1.5), MX4)
    assert t2.micro[0] & 1 == 0 and dequantize(t2)[1] == 2.0


def test_negative_values_and_signed_zero():
    t = quantize(block(-1.0, -0.0, 0.5), MX6)
    assert t.codes[0, 0] == (1 << 4) | 8 and t.codes[0, 1] == 1 << 4
    out = dequantize(t)
    assert out[0] == -1.0 and out[1] == 0 and math.copysign(1, out[1]) == -1 and out[2] == 0.5


def test_zero_block_and_subnormal_inputs_flush():
    t = quantize(np.array([0x0001, 0x8040] + [0] * 14, np.uint16), MX9)  # subnormals
    assert t.shared[0] == 0 and t.micro[0] == 0 and not (t.codes[0] & 0x7F).any()
    assert not dequantize(t).any()


def test_small_elements_round_to_zero_or_one_ulp():
    # Es = 127 (1.0); pair 0 shares Es: 2^-7 is half a code step (2^-6),
    # a tie, to even: 0; 1.75 * 2^-7 is above half: 1. Pair 1 is below Es
    # (u = 1, step 2^-7): 1.5 * 2^-7 is a tie between 1 and 2, to even: 2
    t = quantize(block(1.0, 2.0 ** -7, 1.5 * 2.0 ** -7), MX9)
    assert list(t.codes[0, :3]) == [64, 0, 2] and t.micro[0] & 0b11 == 0b10
    t = quantize(block(1.0, 1.75 * 2.0 ** -7), MX9)
    assert list(t.codes[0, :2]) == [64, 1]


def test_fp32_source():
    x = np.zeros(BLOCK, np.float32)
    x[0], x[1] = 1.0 + 2.0 ** -23, 3.0
    t = quantize(x.view(np.uint32), MX9, source="fp32")
    assert t.shared[0] == 128  # 3.0
    assert list(dequantize(t)[:2]) == [1.0, 3.0]


def test_inf_and_nan_make_a_nan_block():
    for special in (0x7F80, 0xFF80, 0x7FC1):  # +Inf, -Inf, NaN
        bits = block(1.0, 2.0)
        bits[5] = special
        t = quantize(bits, MX9)
        assert t.shared[0] == 0xFF and t.micro[0] == 0 and not t.codes.any()
        assert np.isnan(dequantize(t)).all()
    # the neighbouring block is untouched
    bits = np.concatenate([block(1.0), block(1.0)])
    bits[3] = 0x7F80
    assert dequantize(quantize(bits, MX9))[16] == 1.0


def test_bad_input():
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize(np.zeros(15, np.uint16), MX9)
    with pytest.raises(ValueError, match="source"):
        quantize(np.zeros(16, np.uint16), MX9, source="fp16")


def test_bits_per_element():
    assert [f.bits_per_element for f in (MX9, MX6, MX4)] == [9, 6, 4]


# ---- the exact-rational oracle ------------------------------------------------


def oracle(values: list[float], m: int) -> tuple[int, int, list[int]]:
    """Shared exponent, micro bits and signed codes from exact arithmetic:
    no shifts, Fraction division and Python's round (ties to even)."""
    def biased(x):
        if x == 0 or abs(x) < 2.0 ** -126:
            return 0
        return math.frexp(abs(x))[1] - 1 + 127

    exps = [biased(x) for x in values]
    es = max(exps)
    micro, codes = 0, []
    for p in range(BLOCK // 2):
        u = int(exps[2 * p] < es and exps[2 * p + 1] < es)
        micro |= u << p
        for x, e in ((values[2 * p], exps[2 * p]), (values[2 * p + 1], exps[2 * p + 1])):
            mag = 0
            if e:
                scale = Fraction(2) ** (es - 127 - u + 1 - m)
                mag = min(round(Fraction(abs(x)) / scale), (1 << m) - 1)
            codes.append((int(math.copysign(1, x) < 0) << m) | mag)
    return es, micro, codes


finite_bf16 = st.integers(0, 0xFFFF).filter(lambda b: (b >> 7) & 0xFF != 0xFF)
finite_fp32 = st.integers(0, 0xFFFFFFFF).filter(lambda b: (b >> 23) & 0xFF != 0xFF)
# blocks of clustered exponents exercise micro bits and rounding more than
# uniform patterns (whose exponents are mostly far apart)
clustered = st.tuples(st.integers(1, 254), st.lists(
    st.tuples(st.integers(0, 1), st.integers(-3, 0), st.integers(0, 127)),
    min_size=BLOCK, max_size=BLOCK)).map(lambda t: [
        (s << 15) | (max(0, min(254, t[0] + d)) << 7) | f for s, d, f in t[1]])


def _to_float(bits, source):
    if source == "bf16":
        return np.asarray(bits, np.uint32).astype(np.uint32) << 16
    return np.asarray(bits, np.uint32)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.lists(finite_bf16, min_size=BLOCK, max_size=BLOCK), clustered),
       st.sampled_from(list(FORMATS)))
def test_matches_the_exact_oracle_bf16(bits, name):
    fmt = FORMATS[name]
    t = quantize(np.array(bits, np.uint16), fmt)
    values = [float(v) for v in _to_float(bits, "bf16").view(np.float32)]
    es, micro, codes = oracle(values, fmt.m)
    assert (int(t.shared[0]), int(t.micro[0]), [int(c) for c in t.codes[0]]) == (
        es, micro, codes)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite_fp32, min_size=BLOCK, max_size=BLOCK), st.sampled_from(list(FORMATS)))
def test_matches_the_exact_oracle_fp32(bits, name):
    fmt = FORMATS[name]
    t = quantize(np.array(bits, np.uint32), fmt, source="fp32")
    values = [float(v) for v in np.array(bits, np.uint32).view(np.float32)]
    assert (int(t.shared[0]), int(t.micro[0]), [int(c) for c in t.codes[0]]) == oracle(
        values, fmt.m)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.lists(finite_bf16, min_size=BLOCK, max_size=BLOCK), clustered),
       st.sampled_from(list(FORMATS)))
def test_error_bound_and_idempotence(bits, name):
    fmt = FORMATS[name]
    x = _to_float(bits, "bf16").view(np.float32).astype(np.float64)
    x = np.where(np.abs(x) < 2.0 ** -126, 0.0, x)  # flushed inputs
    t = quantize(np.array(bits, np.uint16), fmt)
    y = dequantize(t).astype(np.float64)
    es = int(t.shared[0])
    u = (int(t.micro[0]) >> (np.arange(BLOCK) // 2)) & 1
    step = np.ldexp(1.0, es - 127 - u + 1 - fmt.m)
    saturated = (t.codes[0] & fmt.max_code) == fmt.max_code
    err = np.abs(y - x)
    # half a code step, or one step where the code saturated
    assert np.all(err <= np.where(saturated, step, step / 2))
    # requantizing the dequantized block gives the same block (when every
    # dequantized value is zero or normal: subnormals would flush)
    assume(np.all((y == 0) | (np.abs(y) >= 2.0 ** -126)))
    y_bits = (y.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert not np.any(y.astype(np.float32).view(np.uint32) & 0xFFFF)  # exact in BF16
    t2 = quantize(y_bits, fmt)
    assert t2.shared[0] == t.shared[0] and t2.micro[0] == t.micro[0]
    assert np.array_equal(t2.codes & fmt.max_code, t.codes & fmt.max_code)


def test_many_blocks_and_shapes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    t = quantize(bits, MX6)
    assert t.shared.shape == (3, 4) and t.codes.shape == (3, 4, 16)
    y = dequantize(t)
    assert y.shape == (3, 64)
    for r in range(3):
        for b in range(4):
            one = quantize(bits[r, 16 * b:16 * b + 16], MX6)
            assert np.array_equal(one.codes[0], t.codes[r, b])


@pytest.mark.parametrize("source, bad", [("bf16", 1.0), ("bf16", 1 << 16), ("bf16", -1),
                                         ("fp32", 1 << 32), ("fp32", 0.5)])
def test_quantize_refuses_what_is_not_a_bit_pattern_of_its_source(source, bad):
    """Floats are not bit patterns, and patterns wider than the source
    format are not masked into range."""
    with pytest.raises(ValueError, match=f"{source} patterns: bit patterns must be"):
        quantize(np.array([bad] * 16), MX4, source)
