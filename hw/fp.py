"""Combinational BF16/FP32 units, bit-exact with ``golden.numerics``.

Each builder adds its logic to ``m.d.comb`` and returns the result signal,
so a 16-lane MAC tree stays one flat module. ``F32Add``, ``BF16Mul`` and
``F32ToBF16`` wrap them as components for unit tests.

Adder: align with guard, round and sticky bits, add or subtract, normalise
(leading-one detect), round to nearest even; exponent overflow gives
infinity, a result below 2**-126 a zero of the result's sign (flush to
zero); NaN operands, and inf - inf, give the canonical NaN.
"""


from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.isa import LANES, WORD_BITS

F32_QNAN = 0x7FC00000
BF16_QNAN = 0x7FC0


def _fields32(x):
    return x[31], x[23:31], x[0:23]


def f32_add(m: Module, a, b, name: str = "add") -> Signal:
    sa, ea, fa = _fields32(a)
    sb, eb, fb = _fields32(b)
    y = Signal(32, name=f"{name}_y")

    a_nan = (ea == 0xFF) & (fa != 0)
    b_nan = (eb == 0xFF) & (fb != 0)
    a_inf = (ea == 0xFF) & (fa == 0)
    b_inf = (eb == 0xFF) & (fb == 0)

    # Magnitudes with subnormals flushed: (exponent, fraction), zero if e == 0.
    mag_a = Signal(31, name=f"{name}_mag_a")
    mag_b = Signal(31, name=f"{name}_mag_b")
    m.d.comb += [mag_a.eq(Mux(ea == 0, 0, Cat(fa, ea))), mag_b.eq(Mux(eb == 0, 0, Cat(fb, eb)))]
    swap = mag_b > mag_a
    big = Signal(31, name=f"{name}_big")
    small = Signal(31, name=f"{name}_small")
    big_s = Signal(name=f"{name}_big_s")
    m.d.comb += [big.eq(Mux(swap, mag_b, mag_a)), small.eq(Mux(swap, mag_a, mag_b)),
                 big_s.eq(Mux(swap, sb, sa))]
    big_e, small_e = big[23:31], small[23:31]
    big_m = Mux(big_e == 0, 0, Cat(big[0:23], Const(1, 1)))  # 24-bit significands
    small_m = Mux(small_e == 0, 0, Cat(small[0:23], Const(1, 1)))

    # Align: 24 significand bits + guard, round, sticky = 27 bits.
    d = Signal(8, name=f"{name}_d")
    m.d.comb += d.eq(big_e - small_e)
    small_x = Signal(27, name=f"{name}_small_x")
    m.d.comb += small_x.eq(small_m << 3)
    shifted = Signal(27, name=f"{name}_shifted")
    sticky = Signal(name=f"{name}_sticky")
    m.d.comb += [
        shifted.eq(Mux(d >= 27, 0, small_x >> d)),
        # bits lost by the shift: shifting back does not restore them
        sticky.eq(Mux(d >= 27, small_x != 0, (shifted << d)[0:27] != small_x)),
    ]
    aligned = Cat(shifted[0] | sticky, shifted[1:27])
    big_x = Cat(Const(0, 3), big_m)

    subtract = sa ^ sb
    total = Signal(28, name=f"{name}_sum")
    m.d.comb += total.eq(Mux(subtract, big_x - aligned, big_x + aligned))

    # Normalise so the leading one sits at bit 26.
    lz = Signal(5, name=f"{name}_lz")
    for i in range(27):  # later (higher) bits take priority
        with m.If(total[i]):
            m.d.comb += lz.eq(26 - i)
    norm = Signal(27, name=f"{name}_norm")
    big_e_s = Signal(signed(10), name=f"{name}_big_e_s")
    m.d.comb += big_e_s.eq(big_e)
    exp = Signal(range(-32, 512), name=f"{name}_exp")
    with m.If(total[27]):
        m.d.comb += [norm.eq(Cat(total[0] | total[1], total[2:28])), exp.eq(big_e_s + 1)]
    with m.Else():
        m.d.comb += [norm.eq((total << lz)[0:27]), exp.eq(big_e_s - lz)]

    keep = norm[3:27]
    guard, rest = norm[2], norm[0:2] != 0
    round_up = guard & (rest | keep[0])
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(keep + round_up)
    frac = Signal(23, name=f"{name}_frac")
    exp_r = Signal(range(-32, 512), name=f"{name}_exp_r")
    with m.If(rounded[24]):
        m.d.comb += [frac.eq(rounded[1:24]), exp_r.eq(exp + 1)]
    with m.Else():
        m.d.comb += [frac.eq(rounded[0:23]), exp_r.eq(exp)]

    with m.If(a_nan | b_nan | (a_inf & b_inf & (sa != sb))):
        m.d.comb += y.eq(F32_QNAN)
    with m.Elif(a_inf):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(0xFF, 8), sa))
    with m.Elif(b_inf):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(0xFF, 8), sb))
    with m.Elif(total == 0):
        m.d.comb += y.eq(Cat(Const(0, 31), sa & sb))  # x + (-x) = +0, -0 + -0 = -0
    with m.Elif(exp_r >= 0xFF):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(0xFF, 8), big_s))
    with m.Elif(exp_r <= 0):
        m.d.comb += y.eq(Cat(Const(0, 31), big_s))  # flush to zero
    with m.Else():
        m.d.comb += y.eq(Cat(frac, exp_r[0:8], big_s))
    return y


def bf16_mul(m: Module, a, b, name: str = "mul") -> Signal:
    """BF16 x BF16 -> FP32, exact except overflow (inf) and underflow (zero)."""
    sa, ea, fa = a[15], a[7:15], a[0:7]
    sb, eb, fb = b[15], b[7:15], b[0:7]
    y = Signal(32, name=f"{name}_y")
    s = sa ^ sb
    a_nan, b_nan = (ea == 0xFF) & (fa != 0), (eb == 0xFF) & (fb != 0)
    a_inf, b_inf = (ea == 0xFF) & (fa == 0), (eb == 0xFF) & (fb == 0)
    a_zero, b_zero = ea == 0, eb == 0
    prod = Signal(16, name=f"{name}_prod")
    m.d.comb += prod.eq(Cat(fa, Const(1, 1)) * Cat(fb, Const(1, 1)))
    ea_s = Signal(signed(11), name=f"{name}_ea_s")
    exp = Signal(signed(11), name=f"{name}_exp")
    m.d.comb += [ea_s.eq(ea), exp.eq(ea_s + eb - 127 + prod[15])]
    frac = Mux(prod[15], Cat(Const(0, 8), prod[0:15]), Cat(Const(0, 9), prod[0:14]))
    with m.If(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)):
        m.d.comb += y.eq(F32_QNAN)
    with m.Elif(a_inf | b_inf):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(0xFF, 8), s))
    with m.Elif(a_zero | b_zero | (exp <= 0)):
        m.d.comb += y.eq(Cat(Const(0, 31), s))
    with m.Elif(exp >= 0xFF):
        m.d.comb += y.eq(Cat(Const(0, 23), Const(0xFF, 8), s))
    with m.Else():
        m.d.comb += y.eq(Cat(frac, exp[0:8], s))
    return y


def f32_to_bf16(m: Module, x, name: str = "cvt") -> Signal:
    """FP32 -> BF16, round to nearest even, FTZ, canonical NaN."""
    y = Signal(16, name=f"{name}_y")
    e, f = x[23:31], x[0:23]
    rounded = Signal(33, name=f"{name}_rounded")
    m.d.comb += rounded.eq(x + 0x7FFF + x[16])
    with m.If((e == 0xFF) & (f != 0)):
        m.d.comb += y.eq(BF16_QNAN)
    with m.Elif(e == 0):
        m.d.comb += y.eq(Cat(Const(0, 15), x[31]))
    with m.Else():
        m.d.comb += y.eq(rounded[16:32])
    return y


def mac_tree(m: Module, weights, inputs, acc, name: str) -> Signal:
    """``acc + tree(weights[i] * inputs[i])`` over 16 lanes (golden.numerics.mac)."""
    level = [bf16_mul(m, w, x, name=f"{name}_mul{i}") for i, (w, x) in
             enumerate(zip(weights, inputs, strict=True))]
    depth = 0
    while len(level) > 1:
        level = [f32_add(m, level[i], level[i + 1], name=f"{name}_t{depth}_{i // 2}")
                 for i in range(0, len(level), 2)]
        depth += 1
    return f32_add(m, acc, level[0], name=f"{name}_acc")


class MacUnit(wiring.Component):
    """One bank's MAC unit alone (``mac_tree`` over 16 lanes): ``make synth``
    counts its cells (``sim/synth.py``); the datapath inlines the same tree."""
    w: In(WORD_BITS)
    x: In(WORD_BITS)
    acc: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()

        def lanes(word):
            return [word[16 * i:16 * (i + 1)] for i in range(LANES)]

        m.d.comb += self.y.eq(mac_tree(m, lanes(self.w), lanes(self.x), self.acc, name="mac"))
        return m


class F32Add(wiring.Component):
    a: In(32)
    b: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(f32_add(m, self.a, self.b))
        return m


class BF16Mul(wiring.Component):
    a: In(16)
    b: In(16)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(bf16_mul(m, self.a, self.b))
        return m


class F32ToBF16(wiring.Component):
    a: In(32)
    y: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(f32_to_bf16(m, self.a))
        return m
