"""MX9 / MX6 / MX4: block formats with shared microexponents (DESIGN.md §2.6).

A block is 16 elements. It stores an 8-bit shared exponent ``Es``, eight
micro-exponent bits (one per pair of elements) and per element a sign and
an ``m``-bit magnitude code (``m`` = 7, 4, 2 for MX9, MX6, MX4, the explicit
leading one included): 9, 6 and 4 bits per element.

Quantizing (BF16 or FP32 input, bit patterns):

* ``E`` is an element's biased exponent. Zeros and subnormals (``E = 0``)
  flush to zero: code 0, their sign kept.
* ``Es`` = max ``E`` of the block; micro bit ``u`` of a pair is 1 iff both
  exponents of the pair are below ``Es``.
* The magnitude ``M`` = 1.frac as an integer (8 bits for BF16, 24 for FP32)
  is shifted right by ``s = Es - u - E + w - m`` (``w`` = 8 or 24), rounded
  to nearest, ties to even, and saturated at ``2^m - 1`` (no carry into
  the exponent).
* Stored code = ``sign << m | magnitude``.

Dequantized value = ``(-1)^sign * magnitude * 2^(Es - 127 - u + 1 - m)``,
exact in FP32 (``magnitude`` < 2^7 and the exponent >= -134).

Inf/NaN policy: a block holding any Inf or NaN (``E = 255``) is a NaN block:
``Es = 255``, micro bits 0, codes 0; it dequantizes to canonical NaN in every
element. Finite blocks never have ``Es = 255``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import numerics

BLOCK = 16
NAN_EXP = 0xFF
CANONICAL_NAN_F32 = np.uint32(0x7FC00000)


@dataclass(frozen=True)
class MxFormat:
    name: str
    m: int  # magnitude bits including the explicit leading one

    @property
    def bits_per_element(self) -> float:
        return (8 + BLOCK // 2 + BLOCK * (1 + self.m)) / BLOCK

    @property
    def max_code(self) -> int:
        return (1 << self.m) - 1


MX9, MX6, MX4 = MxFormat("MX9", 7), MxFormat("MX6", 4), MxFormat("MX4", 2)
FORMATS = {f.name: f for f in (MX9, MX6, MX4)}

#: source -> (sign shift, exponent shift, fraction bits)
SOURCES = {"bf16": (15, 7, 7), "fp32": (31, 23, 23)}


def fields(bits: np.ndarray, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, biased exponent, 1.frac magnitude or 0) of BF16/FP32 patterns."""
    sign_at, exp_at, frac = SOURCES[source]
    b = numerics.as_bits(bits, sign_at + 1, f"{source} patterns").astype(np.int64)
    sign = (b >> sign_at) & 1
    exp = (b >> exp_at) & 0xFF
    mag = np.where(exp == 0, 0, (b & ((1 << frac) - 1)) | (1 << frac))
    return sign, exp, mag


@dataclass
class MxTensor:
    """Quantized blocks: ``shared`` (n,), ``micro`` (n,) with bit p for pair
    p, ``codes`` (n, 16) as ``sign << m | magnitude``."""

    fmt: MxFormat
    shared: np.ndarray
    micro: np.ndarray
    codes: np.ndarray


def quantize(bits, fmt: MxFormat, source: str = "bf16") -> MxTensor:
    """Quantize blocks of 16 along the last axis of ``bits`` (uint16 BF16 or
    uint32 FP32 patterns; the last axis a multiple of 16)."""
    if not isinstance(fmt, MxFormat):
        raise ValueError(f"format must be one of {', '.join(FORMATS)} (an MxFormat), "
                         f"not {fmt!r}")
    if not isinstance(source, str) or source not in SOURCES:
        raise ValueError(f"source must be one of {list(SOURCES)}, not {source!r}")
    b = np.asarray(bits)
    if b.ndim == 0 or b.shape[-1] % BLOCK:
        raise ValueError(f"the last axis ({b.shape[-1] if b.ndim else 'none: a scalar'}) "
                         f"must be a multiple of {BLOCK}")
    sign, exp, mag = fields(b.reshape(-1, BLOCK), source)
    w = SOURCES[source][2] + 1
    special = (exp == 0xFF).any(axis=1)
    es = np.where(special, NAN_EXP, exp.max(axis=1))
    pair_max = exp.reshape(-1, BLOCK // 2, 2).max(axis=2)
    u_pair = (pair_max < es[:, None]).astype(np.int64)
    u = np.repeat(u_pair, 2, axis=1)
    s = es[:, None] - u - exp + w - fmt.m  # >= w - m >= 1 for every element
    s = np.minimum(s, w + 2)  # beyond w + 1 everything rounds to 0
    q = mag >> s
    rem = mag & ((1 << s) - 1)
    half = 1 << (s - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    code = np.minimum(q + up, fmt.max_code)
    codes = (sign << fmt.m) | code
    micro = (u_pair << np.arange(BLOCK // 2)).sum(axis=1)
    codes = np.where(special[:, None], 0, codes)
    micro = np.where(special, 0, micro)
    lead = b.shape[:-1] + (b.shape[-1] // BLOCK,)
    return MxTensor(fmt, es.astype(np.uint8).reshape(lead), micro.astype(np.uint8).reshape(lead),
                    codes.astype(np.uint16).reshape(lead + (BLOCK,)))


def dequantize(t: MxTensor) -> np.ndarray:
    """FP32 values (exact) of the quantized blocks, shape (..., blocks * 16)."""
    fmt = t.fmt
    codes = t.codes.astype(np.int64)
    es = t.shared.astype(np.int64)[..., None]
    u = (t.micro.astype(np.int64)[..., None] >> (np.arange(BLOCK) // 2)) & 1
    mag = codes & fmt.max_code
    sign = np.where((codes >> fmt.m) & 1, -1.0, 1.0)
    values = sign * np.ldexp(mag.astype(np.float64), es - 127 - u + 1 - fmt.m)
    out = values.astype(np.float32)
    out = np.where(es == NAN_EXP, CANONICAL_NAN_F32.view(np.float32), out)
    return out.reshape(out.shape[:-2] + (-1,))
