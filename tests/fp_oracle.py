"""Independent FP32/BF16 oracle: exact rational arithmetic, then rounding.

Shares no code with golden/numerics.py (which relies on numpy float32)."""

from __future__ import annotations

from fractions import Fraction

NAN = "nan"


def decode_f32(bits: int):
    """-> Fraction, ('inf', sign) or NAN. Subnormals read as signed zero."""
    sign = bits >> 31
    exp = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    if exp == 0xFF:
        return NAN if man else ("inf", sign)
    if exp == 0:
        return ("zero", sign)
    value = Fraction(man | (1 << 23)) * Fraction(2) ** (exp - 127 - 23)
    return -value if sign else value


def decode_bf16(bits: int):
    return decode_f32(bits << 16)


def encode_f32(value, sign_hint: int = 0) -> int:
    """Round an exact rational to FP32 bits: RNE on 24 significant bits with
    an unbounded exponent, then overflow -> inf, magnitude < 2**-126 -> 0."""
    if value == 0:
        return sign_hint << 31
    sign = 1 if value < 0 else 0
    mag = -value if sign else value
    exp = mag.numerator.bit_length() - mag.denominator.bit_length()
    while Fraction(2) ** exp > mag:
        exp -= 1
    while Fraction(2) ** (exp + 1) <= mag:
        exp += 1
    scaled = mag / Fraction(2) ** (exp - 23)  # in [2**23, 2**24)
    q, r = divmod(scaled.numerator, scaled.denominator)
    half = Fraction(r, scaled.denominator)
    if half > Fraction(1, 2) or (half == Fraction(1, 2) and q & 1):
        q += 1
    if q == 1 << 24:
        q >>= 1
        exp += 1
    if exp > 127:
        return (sign << 31) | 0x7F800000
    if exp < -126:
        return sign << 31
    return (sign << 31) | ((exp + 127) << 23) | (q & 0x7FFFFF)


def _special(x):
    return x == NAN or isinstance(x, tuple)


def add_f32(a_bits: int, b_bits: int) -> int:
    a, b = decode_f32(a_bits), decode_f32(b_bits)
    if a == NAN or b == NAN:
        return 0x7FC00000
    a_inf = isinstance(a, tuple) and a[0] == "inf"
    b_inf = isinstance(b, tuple) and b[0] == "inf"
    if a_inf and b_inf:
        return 0x7FC00000 if a[1] != b[1] else (a[1] << 31) | 0x7F800000
    if a_inf or b_inf:
        s = a[1] if a_inf else b[1]
        return (s << 31) | 0x7F800000
    av = Fraction(0) if _special(a) else a
    bv = Fraction(0) if _special(b) else b
    total = av + bv
    if total == 0:
        both_neg = (a_bits >> 31) and (b_bits >> 31)
        return 0x80000000 if both_neg else 0
    return encode_f32(total)


def mul_bf16(a_bits: int, b_bits: int) -> int:
    a, b = decode_bf16(a_bits), decode_bf16(b_bits)
    sign = ((a_bits ^ b_bits) >> 15) & 1
    if a == NAN or b == NAN:
        return 0x7FC00000
    a_inf = isinstance(a, tuple) and a[0] == "inf"
    b_inf = isinstance(b, tuple) and b[0] == "inf"
    a_zero = isinstance(a, tuple) and a[0] == "zero"
    b_zero = isinstance(b, tuple) and b[0] == "zero"
    if (a_inf and b_zero) or (b_inf and a_zero):
        return 0x7FC00000
    if a_inf or b_inf:
        return (sign << 31) | 0x7F800000
    if a_zero or b_zero:
        return sign << 31
    return encode_f32(a * b, sign)


def f32_to_bf16(bits: int) -> int:
    x = decode_f32(bits)
    if x == NAN:
        return 0x7FC0
    if isinstance(x, tuple):
        return (x[1] << 15) | (0x7F80 if x[0] == "inf" else 0)
    sign = 1 if x < 0 else 0
    mag = -x if sign else x
    exp = ((bits >> 23) & 0xFF) - 127
    scaled = mag / Fraction(2) ** (exp - 7)  # in [2**7, 2**8)
    q, r = divmod(scaled.numerator, scaled.denominator)
    half = Fraction(r, scaled.denominator)
    if half > Fraction(1, 2) or (half == Fraction(1, 2) and q & 1):
        q += 1
    if q == 1 << 8:
        q >>= 1
        exp += 1
    if exp > 127:
        return (sign << 15) | 0x7F80
    return (sign << 15) | ((exp + 127) << 7) | (q & 0x7F)


def mac(acc: int, weights, inputs) -> int:
    level = [mul_bf16(int(w), int(x)) for w, x in zip(weights, inputs, strict=True)]
    while len(level) > 1:
        level = [add_f32(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return add_f32(acc, level[0])
