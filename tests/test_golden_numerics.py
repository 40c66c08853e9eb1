"""golden.numerics against exact rational arithmetic and ml_dtypes."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from golden import numerics as nm
from tests import fp_oracle as ref

u32 = st.integers(0, 2**32 - 1)
u16 = st.integers(0, 2**16 - 1)
# Bias towards interesting exponents: near zero, near overflow, equal exponents.
interesting_f32 = st.one_of(
    u32,
    st.builds(lambda s, e, m: (s << 31) | (e << 23) | m,
              st.integers(0, 1),
              st.sampled_from([0, 1, 2, 3, 24, 25, 126, 127, 128, 253, 254, 255]),
              st.sampled_from([0, 1, 0x400000, 0x7FFFFF, 0x3FFFFF, 0x000001 << 22])),
)


@settings(max_examples=3000, deadline=None)
@given(interesting_f32, interesting_f32)
@example(0x3F800000, 0x33800000)  # 1 + 2**-24: tie, rounds to even (1.0)
@example(0x3F800001, 0x33800000)  # tie, rounds up to even
@example(0x7F7FFFFF, 0x73800000)  # max + half ulp: overflow to inf
@example(0x00800000, 0x80800001)  # result below 2**-126: flush to -0
@example(0x7F800000, 0xFF800000)  # inf - inf = NaN
@example(0x80000000, 0x80000000)  # -0 + -0 = -0
@example(0x3F800000, 0xBF800000)  # x - x = +0
@example(0x00000001, 0x3F800000)  # subnormal input reads as zero
def test_f32_add_matches_exact_arithmetic(a, b):
    got = int(nm.f32_add(np.uint32(a), np.uint32(b)))
    assert got == ref.add_f32(a, b), f"{a:#010x} + {b:#010x}: {got:#010x}"


@settings(max_examples=3000, deadline=None)
@given(u16, u16)
@example(0x7F80, 0x0000)  # inf x 0 = NaN
@example(0x7F00, 0x7F00)  # overflow to inf
@example(0x0080, 0x0080)  # underflow: flush to zero
@example(0x8080, 0x3F80)  # negative min normal x 1
@example(0x0001, 0x3F80)  # subnormal input reads as zero
def test_bf16_mul_matches_exact_arithmetic(a, b):
    got = int(nm.bf16_mul(np.uint16(a), np.uint16(b)))
    assert got == ref.mul_bf16(a, b), f"{a:#06x} * {b:#06x}: {got:#010x}"


def test_f32_to_bf16_matches_ml_dtypes_exhaustively_on_a_grid():
    rng = np.random.default_rng(1)
    bits = np.concatenate([
        rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
        # every tie and near-tie pattern in the low half-word
        (np.arange(0x3F80, 0x3F90, dtype=np.uint32)[:, None] << 16
         | np.array([0x7FFF, 0x8000, 0x8001, 0x0000, 0xFFFF], dtype=np.uint32)).ravel(),
        np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001, 0x00800000],
                 dtype=np.uint32),
    ])
    got = nm.f32_to_bf16(bits)
    f = bits.view(np.float32)
    normal = ((bits >> 23) & 0xFF) != 0
    with np.errstate(invalid="ignore"):
        expect = f.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(f)
    assert np.array_equal(got[normal & ~nan], expect[normal & ~nan])
    assert np.all(got[nan] == 0x7FC0)
    assert np.all((got[~normal] & 0x7FFF) == 0)  # FTZ


def test_f32_to_bf16_matches_exact_arithmetic_sample():
    rng = np.random.default_rng(2)
    for b in rng.integers(0, 2**32, 3000, dtype=np.uint64).tolist():
        assert int(nm.f32_to_bf16(np.uint32(b))) == ref.f32_to_bf16(b), hex(b)


def test_bf16_to_f32_all_patterns_match_ml_dtypes():
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    got = nm.bf16_to_f32(bits)
    expect = bits.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    exp = (bits >> 7) & 0xFF
    man = bits & 0x7F
    normal = (exp != 0) & ~((exp == 0xFF) & (man != 0))
    assert np.array_equal(got[normal], expect[normal])
    assert np.all(got[exp == 0] == (bits[exp == 0].astype(np.uint32) & 0x8000) << 16)


def test_tree_order_is_pairwise_not_sequential():
    w = nm.float_to_bf16([2.0**30, 1.0, -(2.0**30), 1.0] + [0.0] * 12)
    x = nm.float_to_bf16(np.ones(16))
    got = nm.mac(np.zeros(1, np.uint32), w[None, :], x)
    # pairwise: (2**30 + 1) rounds to 2**30, (-2**30 + 1) likewise -> 0; sequential would give 1
    assert nm.f32_bits_to_float(got)[0] == 0.0
    assert int(got[0]) == ref.mac(0, w, x)


@settings(max_examples=300, deadline=None)
@given(st.lists(u16, min_size=16, max_size=16), st.lists(u16, min_size=16, max_size=16),
       interesting_f32)
def test_mac_matches_exact_arithmetic(w, x, acc):
    got = int(nm.mac(np.array([acc], np.uint32), np.array([w], np.uint16),
                     np.array(x, np.uint16))[0])
    assert got == ref.mac(acc, w, x)


def test_mac_close_to_float32_dot_product():
    rng = np.random.default_rng(3)
    w = nm.float_to_bf16(rng.standard_normal((64, 16)))
    x = nm.float_to_bf16(rng.standard_normal(16))
    got = nm.f32_bits_to_float(nm.mac(np.zeros(64, np.uint32), w, x))
    expect = nm.bf16_to_float(w) @ nm.bf16_to_float(x)
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_tree_sum_rejects_wrong_lane_count():
    with pytest.raises(ValueError, match="16 lanes"):
        nm.tree_sum(np.zeros(8, np.uint32))


def test_f32_add_canonical_equals_f32_add_on_results():
    """The accumulation shortcut: on bit patterns this module produces (tree
    sums and sums of them, with zeros, infinities and NaN among them) it
    gives f32_add's bits; on a subnormal operand (never produced) it would
    not, so the general add stays for everything else."""
    rng = np.random.default_rng(7)
    w = nm.float_to_bf16(rng.standard_normal((4000, 16)) * 2.0 ** rng.integers(-60, 60, (4000, 1)))
    w[rng.random(w.shape) < 0.01] = nm.BF16_QNAN
    w[rng.random(w.shape) < 0.01] = 0x7F80
    trees = nm.tree_sum(nm.bf16_mul(w, w[::-1]))
    a, b = trees[:2000], trees[2000:]
    assert np.array_equal(nm.f32_add_canonical(a, b), nm.f32_add(a, b))
    sums = nm.f32_add(a, b)
    assert np.array_equal(nm.f32_add_canonical(sums, b), nm.f32_add(sums, b))
    normal, subnormal = np.array([0x00800000], np.uint32), np.array([0x00400000], np.uint32)
    assert nm.f32_add(normal, subnormal) == normal  # the subnormal operand reads as zero
    assert nm.f32_add_canonical(normal, subnormal) == 0x00C00000


@pytest.mark.parametrize("bad", [[1.5], [-1], [1 << 32], [True], [1 << 70]])
def test_bit_patterns_out_of_their_width_are_refused_not_wrapped(bad):
    """f32_to_bf16 takes FP32 bit patterns: a float, a negative or a value
    wider than 32 bits is an error naming the function, never wrapped."""
    with pytest.raises(ValueError, match="f32_to_bf16: bit patterns must be"):
        nm.f32_to_bf16(bad)
