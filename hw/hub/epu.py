"""The HUB's EPU (specification: ``golden.hub.epu``, docs/epu.md): softmax
over score words in the GPR and the TCP reduction, sixteen lanes, one GPR
word read a cycle.

Softmax, ``W`` words: three passes of ``W + 2`` cycles (MAX, SUM, SCALE),
the lane-sum tree (4 cycles) and the reciprocal (25 cycles, one quotient
bit each): ``3 W + 35`` cycles from ``start``. In a pass, word ``i`` is
addressed in the pass's cycle ``i``, its data arrive in ``i + 1`` and are
used there; SCALE registers the result word and writes it in ``i + 2``.
Reduction, ``op_size x span`` words: one pass, ``op_size x span + 2``
cycles, a result word written two cycles after its group's last read.
``done`` is high in the last cycle.

Each lane has an FP32 adder for ``x - max``, the exp unit, an FP32
accumulator adder (also the lane tree's adders and the reduction's) and
the scaling multiplier (``exp_unit`` and ``scale_unit``, bit-exact with
``golden.hub.epu.exp_f32`` and its rounding)."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.hub import epu as spec
from golden.isa import FIELDS, LANES, Opcode
from hw.fp import BF16_QNAN, f32_add, f32_to_bf16
from hw.hub.ports import epu_port, gpr_read_port, gpr_write_port


def exp_unit(m: Module, d, name: str) -> Signal:
    """``exp(d)`` for FP32 ``d <= 0``: FP32 bits (``golden.hub.epu.exp_f32``)."""
    e, sig = d[23:31], Cat(d[0:23], Const(1, 1))
    shift = Signal(9, name=f"{name}_shift")
    fixed = Signal(23, name=f"{name}_fixed")  # |d| * 2**16, truncated
    m.d.comb += shift.eq(134 - e)
    with m.If((e == 0) | (e >= 134) | (e <= 110)):
        m.d.comb += fixed.eq(0)
    with m.Else():
        m.d.comb += fixed.eq(sig >> shift[:5])
    y = Signal(24, name=f"{name}_y")  # -d log2 e, 16 fraction bits
    m.d.comb += y.eq((fixed * spec.LOG2E_Q24) >> 24)
    frac = Signal(16, name=f"{name}_frac")
    m.d.comb += frac.eq(-y)
    k_neg = Signal(9, name=f"{name}_kneg")  # -k
    m.d.comb += k_neg.eq((y + 0xFFFF) >> 16)
    m.submodules[f"{name}_rom"] = rom = memory.Memory(
        shape=24, depth=len(spec.EXP2_TABLE), init=spec.EXP2_TABLE.tolist())
    port = rom.read_port(domain="comb")
    table = port.data
    m.d.comb += port.addr.eq(frac[8:16])
    lin = Signal(25, name=f"{name}_lin")
    m.d.comb += lin.eq((1 << 24) + ((frac[0:8] * spec.LN2_Q16) >> 8))
    man = Signal(24, name=f"{name}_man")
    m.d.comb += man.eq((table * lin) >> 24)
    y_out = Signal(32, name=f"{name}_out")
    with m.If((e >= 134) | (k_neg >= 127)):
        m.d.comb += y_out.eq(0)
    with m.Else():
        m.d.comb += y_out.eq(Cat(man[0:23], (127 - k_neg)[:8], Const(0, 1)))
    return y_out


def scale_unit(m: Module, e, q, exp_s, name: str) -> Signal:
    """BF16 of ``e * q * 2**(103 - exp_s)`` rounded once (nearest even),
    flushed to zero below 2**-126; ``e`` FP32 bits, 0 or normal."""
    ee = e[23:31]
    prod = Signal(49, name=f"{name}_prod")
    m.d.comb += prod.eq(Cat(e[0:23], Const(1, 1)) * q)
    top = prod[47]  # bit length 48, else 47
    keep = Mux(top, prod[40:48], prod[39:47])
    half = Mux(top, prod[39], prod[38])
    sticky = Mux(top, prod[0:39] != 0, prod[0:38] != 0)
    keep9 = Signal(9, name=f"{name}_keep9")
    m.d.comb += keep9.eq(keep + (half & (sticky | keep[0])))
    carry = keep9[8]
    biased = Signal(range(-512, 512), name=f"{name}_biased")
    m.d.comb += biased.eq(ee + 79 + 47 + top + carry - exp_s)
    y = Signal(16, name=f"{name}_y")
    with m.If((ee == 0) | (biased <= 0)):
        m.d.comb += y.eq(0)
    with m.Else():
        m.d.comb += y.eq(Cat(Mux(carry, 0, keep9[0:7]), biased[:8], Const(0, 1)))
    return y


def score_words(n):
    """GPR words of ``n`` scores (``golden.hub.epu.softmax_words``)."""
    return (n + LANES - 1) >> 4


def padded_words(words, group):
    """``words`` rounded up to a multiple of ``group``, a power of two
    (``golden.hub.epu.padded_words``): a mask, not a division."""
    return words + ((0 - words) & (group - 1))


def _widen(m: Module, x, name: str) -> Signal:
    """BF16 -> FP32 bits, subnormals flushed, NaN canonical
    (``golden.numerics.bf16_to_f32``)."""
    y = Signal(32, name=f"{name}_w")
    e, f = x[7:15], x[0:7]
    with m.If((e == 0xFF) & (f != 0)):
        m.d.comb += y.eq(0x7FC00000)
    with m.Elif(e == 0):
        m.d.comb += y.eq(Cat(Const(0, 31), x[15]))
    with m.Else():
        m.d.comb += y.eq(Cat(Const(0, 16), x))
    return y


def _key(x):
    """An unsigned key ordered as the FP value of BF16 ``x`` (no NaN)."""
    return Mux(x[15], ~x, Cat(x[0:15], Const(1, 1)))


def _max_of(m: Module, values) -> Signal:
    """The largest of BF16 ``values`` (no NaN), the first on a tie: one
    comparator after another, each result a signal of its own."""
    best = values[0]
    for j, v in enumerate(values[1:], 1):
        nxt = Signal(16, name=f"max_upto{j}")
        m.d.comb += nxt.eq(Mux(_key(v) > _key(best), v, best))
        best = nxt
    return best


class Epu(wiring.Component):
    """Members
    -------
    ctrl : In(epu_port)
        The decoder's port (``hw.hub.ports.epu_port``): ``start`` the
        instruction on its other members (read only in this cycle, which is
        the first of the run: word 0 is addressed in it): ``op``
        (``Opcode.EPU_SOFTMAX`` or ``Opcode.EPU_REDUCE``), ``src`` and
        ``dst`` (absolute GPR entries, the request's base added), ``span``,
        ``n`` (a softmax's scores, T_cur > 0) and ``op_size`` (a
        reduction's result words, > 0); ``done`` in the run's last cycle.
    rd, wr : In(GPR ports)
        A GPR read port (data the cycle after the address) and write port,
        as ``hw.hub.multicast.Multicast`` takes them.
    busy : Out(1)
        Running (from the cycle after ``start``).
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        super().__init__({
            "ctrl": In(epu_port(hub)),
            "rd": In(gpr_read_port(hub)),
            "wr": In(gpr_write_port(hub)),
            "busy": Out(1),
        })

    @staticmethod
    def _lanes(m, x, valid, tree, is_red, group, acc, mx, q, exp_s):
        """The lanes' datapath: (widened scores, accumulator adders' sums,
        scaled BF16 results, reduced BF16 results)."""
        xs = [_widen(m, x[lane], f"x{lane}") for lane in range(LANES)]
        neg_m = Signal(32, name="neg_m")
        m.d.comb += neg_m.eq(_widen(m, mx, "negm") ^ (1 << 31))
        es = [exp_unit(m, f32_add(m, xs[lane], neg_m, f"d{lane}"), f"exp{lane}")
              for lane in range(LANES)]
        add_a = [Signal(32, name=f"add_a{lane}") for lane in range(LANES)]
        add_b = [Signal(32, name=f"add_b{lane}") for lane in range(LANES)]
        sums = [f32_add(m, add_a[lane], add_b[lane], f"sum{lane}") for lane in range(LANES)]
        for lane in range(LANES):
            with m.If(tree):
                if lane < LANES // 2:
                    m.d.comb += [add_a[lane].eq(acc[2 * lane]), add_b[lane].eq(acc[2 * lane + 1])]
            with m.Elif(is_red):
                m.d.comb += [add_a[lane].eq(acc[lane]), add_b[lane].eq(xs[lane])]
            with m.Else():
                m.d.comb += [add_a[lane].eq(acc[lane]),
                             add_b[lane].eq(Mux(valid[lane], es[lane], 0))]
        scaled = [scale_unit(m, es[lane], q, exp_s, f"scale{lane}") for lane in range(LANES)]
        reduced = [f32_to_bf16(m, Mux(group == 0, xs[lane], sums[lane]), f"red{lane}")
                   for lane in range(LANES)]
        return xs, sums, scaled, reduced

    def elaborate(self, platform):
        m, c, aw = Module(), self.ctrl, len(self.ctrl.src)
        wbits = FIELDS["t_cur"].width - 4 + 1
        words = Signal(max(wbits, 17), name="words")  # W (P in SCALE), or op_size * span
        pwords = Signal.like(words, name="pwords")  # P: W padded to the softmax's op_size
        n_reg = Signal.like(c.n, name="n_reg")
        span = Signal.like(c.span, name="span_r")
        i = Signal(len(words) + 1, name="i")  # cycle within the pass
        raddr, waddr, base = (Signal(aw, name="raddr"), Signal(aw, name="waddr"),
                              Signal(aw, name="base"))
        rvalid, ridx = Signal(name="rvalid"), Signal.like(words, name="ridx")
        group = Signal.like(c.span, name="group")  # word within a reduction's group
        is_red = Signal(name="is_reduce")
        idle = Signal(name="idle")

        x = [self.rd.data[16 * lane:16 * lane + 16] for lane in range(LANES)]
        tail = n_reg[0:4]  # scores in a partial last word
        valid = Signal(LANES, name="lane_valid")  # lanes of the word read that hold a score
        w_sc = Signal.like(words, name="score_words")  # W (words is P in SCALE)
        m.d.comb += [w_sc.eq(score_words(n_reg)),
                     valid.eq(Mux(is_red, (1 << LANES) - 1, Mux(
                         ridx >= w_sc, 0, Mux((ridx + 1 == w_sc) & (tail != 0),
                                              (Const(1, LANES + 1) << tail) - 1,
                                              (1 << LANES) - 1))))]

        lane_max = [Signal(16, name=f"max{lane}", init=0xFF80) for lane in range(LANES)]
        mx = Signal(16, name="mx")
        special, finite_seen = Signal(name="special"), Signal(name="finite_seen")
        acc = [Signal(32, name=f"acc{lane}") for lane in range(LANES)]
        q, rem, exp_s = Signal(25, name="q"), Signal(25, name="rem"), Signal(8, name="exp_s")
        out, out_valid = Signal(16 * LANES, name="out"), Signal(name="out_valid")

        tree = Signal(name="tree")  # the accumulator adders sum lane pairs
        xs, sums, scaled, reduced = self._lanes(m, x, valid, tree, is_red, group, acc, mx, q,
                                                exp_s)

        # ---- reads: word i of a pass addressed in its cycle i ------------------
        reading = Signal(name="reading")
        step = Mux(is_red, 1, span)
        m.d.comb += [self.rd.en.eq(1), self.rd.addr.eq(raddr),
                     self.wr.addr.eq(waddr), self.wr.data.eq(out), self.wr.en.eq(out_valid)]
        m.d.sync += [rvalid.eq(reading), out_valid.eq(0)]
        with m.If(out_valid):
            m.d.sync += waddr.eq(waddr + step)

        last = Signal(name="pass_last")
        m.d.comb += last.eq(i == words + 1)

        def run_pass():
            """Cycle i of a pass of ``words + 2`` cycles."""
            m.d.comb += reading.eq(i < words)
            m.d.sync += i.eq(i + 1)
            with m.If(reading):
                m.d.sync += [raddr.eq(raddr + step), ridx.eq(i)]

        def next_pass():
            m.d.sync += [i.eq(0), raddr.eq(base)]

        with m.FSM(name="epu"):
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                red = c.op == Opcode.EPU_REDUCE
                with m.If(c.start):  # cycle 0 of the first pass: word 0 addressed now
                    m.d.comb += [self.rd.addr.eq(c.src), reading.eq(1)]
                    m.d.sync += [is_red.eq(red), n_reg.eq(c.n), span.eq(c.span),
                                 base.eq(c.src), raddr.eq(c.src + Mux(red, 1, c.span)),
                                 ridx.eq(0), i.eq(1), group.eq(0),
                                 waddr.eq(Mux(red, c.dst, c.src)),
                                 words.eq(Mux(red, c.op_size * c.span,
                                              score_words(c.n))),
                                 pwords.eq(padded_words(score_words(c.n), c.op_size)),
                                 special.eq(0), finite_seen.eq(0),
                                 *[v.eq(0xFF80) for v in lane_max], *[a.eq(0) for a in acc]]
                    with m.If(red):
                        m.next = "RED"
                    with m.Else():
                        m.next = "MAX"

            with m.State("MAX"):
                run_pass()
                with m.If(rvalid):
                    for lane in range(LANES):
                        v = x[lane]
                        ftz = Mux(v[7:15] == 0, Cat(Const(0, 15), v[15]), v)
                        with m.If(valid[lane]):
                            with m.If(_key(ftz) > _key(lane_max[lane])):
                                m.d.sync += lane_max[lane].eq(ftz)
                            with m.If((v[7:15] == 0xFF) & ((v[0:7] != 0) | ~v[15])):
                                m.d.sync += special.eq(1)  # NaN or +inf
                            with m.If(v != 0xFF80):
                                m.d.sync += finite_seen.eq(1)
                with m.If(last):
                    m.d.sync += mx.eq(_max_of(m, lane_max))
                    next_pass()
                    m.next = "SUM"

            with m.State("SUM"):
                run_pass()
                with m.If(rvalid):
                    m.d.sync += [a.eq(s) for a, s in zip(acc, sums, strict=True)]
                with m.If(last):
                    m.d.sync += i.eq(0)
                    m.next = "TREE"

            with m.State("TREE"):  # one adder level a cycle
                m.d.comb += tree.eq(1)
                m.d.sync += [acc[lane].eq(sums[lane]) for lane in range(LANES // 2)]
                m.d.sync += i.eq(i + 1)
                with m.If(i == spec.TREE_LEVELS - 1):
                    m.d.sync += [i.eq(0), rem.eq(1 << 23), q.eq(0)]
                    m.next = "RECIP"

            with m.State("RECIP"):  # restoring division, one quotient bit a cycle
                s = acc[0]
                sig = Cat(s[0:23], Const(1, 1))
                ge = rem >= sig
                m.d.sync += [q.eq(Cat(ge, q[0:24])), rem.eq(Mux(ge, rem - sig, rem) << 1),
                             exp_s.eq(s[23:31]), i.eq(i + 1)]
                with m.If(i == spec.RECIP_BITS - 1):
                    next_pass()
                    m.d.sync += words.eq(pwords)  # the scores and the padding after them
                    m.next = "SCALE"

            with m.State("SCALE"):
                run_pass()
                nan = special | ~finite_seen
                with m.If(rvalid):
                    m.d.sync += [out.eq(Cat(Mux(~valid[lane], 0,
                                                Mux(nan, BF16_QNAN, scaled[lane]))
                                            for lane in range(LANES))), out_valid.eq(1)]
                with m.If(last):
                    m.d.comb += c.done.eq(1)
                    m.d.sync += i.eq(0)
                    m.next = "IDLE"

            with m.State("RED"):
                run_pass()
                with m.If(rvalid):
                    m.d.sync += [a.eq(Mux(group == 0, xv, sv))
                                 for a, xv, sv in zip(acc, xs, sums, strict=True)]
                    m.d.sync += group.eq(Mux(group + 1 == span, 0, group + 1))
                    with m.If(group + 1 == span):
                        m.d.sync += [out.eq(Cat(reduced)), out_valid.eq(1)]
                with m.If(last):
                    m.d.comb += c.done.eq(1)
                    m.d.sync += i.eq(0)
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~idle)
        return m
