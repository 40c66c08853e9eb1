"""BF16 MAC numerics, bit-exact (DESIGN.md §3).

All values travel as raw bit patterns: BF16 as ``uint16``, FP32 as ``uint32``.

Policy (the RTL implements exactly this):

* **Flush to zero.** A subnormal input (BF16 or FP32) is read as a zero of
  the same sign. A result whose magnitude, rounded, is below 2**-126 becomes
  a zero of the result's sign.
* **Products** BF16 x BF16 are exact in FP32 (8 x 8 significand bits); a
  product of magnitude >= 2**128 is infinity.
* **Additions** are FP32, round to nearest even. ``x + (-x)`` is ``+0``;
  ``(-0) + (-0)`` is ``-0``.
* **Reduction** of the 16 lane products is a fixed pairwise tree: lanes
  (0+1), (2+3), ... then pairs of those, four levels; the tree sum is then
  added to the FP32 accumulator: ``acc + tree``.
* **FP32 -> BF16** (RD-OUT) rounds to nearest even; a carry out of the
  largest finite value gives infinity.
* **NaN and infinity** follow IEEE 754: NaN operands, ``inf - inf`` and
  ``0 x inf`` give NaN; infinities otherwise propagate with their sign;
  overflow gives infinity. Every NaN produced is the canonical quiet NaN
  (FP32 ``0x7FC00000``, BF16 ``0x7FC0``); payloads and signs of NaN are not
  preserved.

The implementation leans on numpy's IEEE float32 arithmetic and fixes up
subnormals and NaNs; ``tests/test_golden_numerics.py`` checks it against exact
rational arithmetic and ml_dtypes.
"""

from __future__ import annotations

import numpy as np

F32_QNAN = np.uint32(0x7FC00000)
BF16_QNAN = np.uint16(0x7FC0)
LANES = 16


def _canon_f32(x: np.ndarray) -> np.ndarray:
    """float32 array -> uint32 bits with FTZ and canonical NaN."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exp = (bits >> 23) & 0xFF
    bits = np.where(exp == 0, bits & 0x80000000, bits)
    bits = np.where(np.isnan(x), F32_QNAN, bits)
    return bits.astype(np.uint32)


def _ftz_f32(bits: np.ndarray) -> np.ndarray:
    """uint32 bits -> float32 values with subnormal inputs read as zero."""
    bits = np.asarray(bits, dtype=np.uint32)
    exp = (bits >> 23) & 0xFF
    return np.where(exp == 0, bits & 0x80000000, bits).astype(np.uint32).view(np.float32)


def bf16_to_f32(bf: np.ndarray) -> np.ndarray:
    """BF16 bits -> FP32 bits (exact widening), flushing subnormals."""
    bits = np.asarray(bf, dtype=np.uint16).astype(np.uint32) << 16
    return _canon_f32(bits.view(np.float32))


def f32_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 addition on bit patterns (RNE, FTZ, canonical NaN)."""
    with np.errstate(all="ignore"):
        return _canon_f32(_ftz_f32(a) + _ftz_f32(b))


def f32_add_canonical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``f32_add`` for operands that are results of this module (no
    subnormal bit patterns: every result is flushed), so the input flush
    is the identity and is skipped. Same bits as ``f32_add`` there."""
    with np.errstate(all="ignore"):
        return _canon_f32(a.view(np.float32) + b.view(np.float32))


def bf16_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """BF16 x BF16 -> FP32 bits. float32 multiply is exact here (16-bit
    significand product) except in overflow and underflow, which the policy
    turns into infinity and zero."""
    with np.errstate(all="ignore"):
        return _canon_f32(_ftz_f32(bf16_to_f32(a)) * _ftz_f32(bf16_to_f32(b)))


def tree_sum(products: np.ndarray) -> np.ndarray:
    """Pairwise tree over the last axis (16 lanes) of FP32 bit patterns."""
    level = np.asarray(products, dtype=np.uint32)
    if level.shape[-1] != LANES:
        raise ValueError(f"tree_sum expects {LANES} lanes on the last axis, not {level.shape[-1]}")
    while level.shape[-1] > 1:
        level = f32_add(level[..., 0::2], level[..., 1::2])
    return level[..., 0]


def mac(acc: np.ndarray, weights: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """One MAC step per bank: ``acc + tree(weights * inputs)``.

    acc: FP32 bits, shape (banks,); weights: BF16 bits (banks, 16);
    inputs: BF16 bits (16,) broadcast to every bank."""
    return f32_add(acc, mac_trees(weights, inputs))


def mac_trees(weights: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """``tree(weights * inputs)`` per bank, the product half of ``mac``;
    leading axes batch many MACs: weights (..., banks, 16), inputs
    (..., 16) broadcast to every bank -> FP32 bits (..., banks)."""
    inputs = np.asarray(inputs)[..., None, :]
    return tree_sum(bf16_mul(weights, np.broadcast_to(inputs, np.shape(weights))))


def as_bits(x, width: int, what: str) -> np.ndarray:
    """``x`` as an array of ``width``-bit patterns: unsigned integers that
    fit pass through; signed integers must lie in [0, 2**width); floats,
    bools and anything else are refused (ValueError naming ``what``), never
    wrapped or truncated."""
    a = np.asarray(x)
    if a.dtype.kind == "u" and a.dtype.itemsize * 8 <= width:
        return a
    if a.dtype.kind not in "iu":
        raise ValueError(f"{what}: bit patterns must be integers, not {a.dtype} values")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= 1 << width):
        raise ValueError(f"{what}: bit patterns must be in [0, 2**{width}), not "
                         f"{int(a.min())} .. {int(a.max())}")
    return a


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """FP32 bits -> BF16 bits, round to nearest even, canonical NaN, FTZ."""
    x = as_bits(x, 32, "f32_to_bf16")
    bits = np.asarray(x, dtype=np.uint32).astype(np.uint64)
    exp = (bits >> 23) & 0xFF
    bits = np.where(exp == 0, bits & 0x80000000, bits)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)
    is_nan = (exp == 0xFF) & ((np.asarray(x, dtype=np.uint32) & 0x7FFFFF) != 0)
    return np.where(is_nan, BF16_QNAN, rounded).astype(np.uint16)


# Convenience conversions for workloads and tests -------------------------


def float_to_bf16(values) -> np.ndarray:
    """Python/numpy floats -> BF16 bits, RNE (via FP32), FTZ, canonical NaN."""
    with np.errstate(all="ignore"):
        f = np.asarray(values, dtype=np.float32)
    return f32_to_bf16(_canon_f32(f))


def bf16_to_float(bits) -> np.ndarray:
    return bf16_to_f32(bits).view(np.float32)


def f32_bits_to_float(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def words_to_lanes(word: int) -> np.ndarray:
    """A 256-bit word (int) -> 16 uint16 lanes, lane 0 in the low bits."""
    return np.array([(word >> (16 * i)) & 0xFFFF for i in range(LANES)], dtype=np.uint16)


def lanes_to_word(lanes) -> int:
    word = 0
    for i, v in enumerate(np.asarray(lanes, dtype=np.uint16).tolist()):
        word |= int(v) << (16 * i)
    return word
