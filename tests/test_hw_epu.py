"""The HUB's EPU block (hw/hub/epu.py) under the Amaranth simulator against
golden.hub.epu: every result word bit-exact and the run's length in cycles,
for softmax (full and partial last words, spans, special values) and the
reduction (spans 1 to 4, in place, before and after its sources). One
simulation runs every case (elaborating the block is most of the cost)."""

import numpy as np
from amaranth import Module
from amaranth.lib import memory
from amaranth.sim import Simulator

from golden import numerics
from golden.config import small_hub_config
from golden.hub import epu
from golden.isa import LANES, WORD_BITS, Opcode
from hw.hub.epu import Epu

HUB = small_hub_config().replace(epu=True)
ENTRIES = 64


def run_epu(cases: list[dict]) -> list[tuple[np.ndarray, int]]:
    """Per case (``gpr`` and the instruction's ports): the GPR after the
    run and its cycles (start to done, inclusive)."""
    m = Module()
    m.submodules.mem = mem = memory.Memory(shape=WORD_BITS, depth=ENTRIES, init=[])
    m.submodules.epu = dut = Epu(HUB)
    rd, wr = mem.read_port(), mem.write_port()
    m.d.comb += [rd.addr.eq(dut.rd.addr), rd.en.eq(dut.rd.en), dut.rd.data.eq(rd.data),
                 wr.addr.eq(dut.wr.addr), wr.data.eq(dut.wr.data), wr.en.eq(dut.wr.en)]
    results = []

    async def bench(ctx):
        for case in cases:
            for k, w in enumerate(case["gpr"]):
                ctx.set(mem.data[k], numerics.lanes_to_word(w))
            await ctx.tick()
            for name in ("op", "src", "dst", "span", "n", "op_size"):
                ctx.set(getattr(dut.ctrl, name), int(case.get(name, 0)))
            ctx.set(dut.ctrl.start, 1)
            cycles = 0
            while True:
                done = ctx.get(dut.ctrl.done)
                await ctx.tick()
                ctx.set(dut.ctrl.start, 0)
                cycles += 1
                if done:
                    break
                assert cycles < 100_000
            results.append((np.stack([numerics.words_to_lanes(ctx.get(mem.data[k]))
                                      for k in range(ENTRIES)]), cycles))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


def gpr_of(seed, scale=3.0):
    rng = np.random.default_rng(seed)
    return numerics.float_to_bf16(rng.standard_normal((ENTRIES, LANES)) * scale)


def softmax_case(seed, n, span, src=5, poke=None, pad=1):
    gpr = gpr_of(seed)
    if poke == "all_neg_inf":
        gpr[src:src + epu.softmax_words(n) * span] = 0xFF80
    elif poke is not None:
        gpr[src + span, 2] = poke
    w = epu.softmax_words(n)
    idx = src + np.arange(epu.padded_words(n, pad)) * span
    want = gpr.copy()
    want[idx] = 0
    want[idx[:w]] = epu.softmax(gpr[idx[:w]], n)
    return ({"gpr": gpr, "op": Opcode.EPU_SOFTMAX, "src": src, "span": span, "n": n,
             "op_size": pad}, want, epu.cycles(Opcode.EPU_SOFTMAX, n, op_size=pad))


def reduce_case(seed, span, op_size, src, dst):
    gpr = gpr_of(seed)
    gpr[src + 1, 0], gpr[src + op_size * span - 1, 1] = 0x7F80, 0xFF80  # inf, and inf - inf
    want = gpr.copy()
    want[dst:dst + op_size] = epu.reduce(gpr[src:src + op_size * span], span)
    return ({"gpr": gpr, "op": Opcode.EPU_REDUCE, "src": src, "dst": dst, "span": span,
             "op_size": op_size}, want, epu.cycles(Opcode.EPU_REDUCE, op_size=op_size, span=span))


def test_epu_block_matches_golden_bit_and_cycle_exact():
    cases = [softmax_case(1, 1, 1), softmax_case(2, 16, 1), softmax_case(3, 37, 1),
             softmax_case(4, 70, 3), softmax_case(5, 20, 1, poke=0x7FC0),
             softmax_case(6, 20, 1, poke=0x7F80), softmax_case(7, 20, 1, poke=0xFF80),
             softmax_case(8, 20, 1, poke=0x0001), softmax_case(9, 20, 2, poke="all_neg_inf"),
             softmax_case(13, 37, 1, pad=4), softmax_case(14, 64, 2, pad=4),
             softmax_case(15, 20, 3, poke=0x7FC0, pad=8),
             reduce_case(10, 1, 3, 4, 20), reduce_case(11, 2, 4, 8, 8),
             reduce_case(12, 4, 2, 16, 3)]
    results = run_epu([c for c, _, _ in cases])
    for k, ((case, want, cycles), (got, got_cycles)) in enumerate(zip(cases, results,
                                                                       strict=True)):
        what = f"case {k} ({Opcode(case['op']).name} n={case.get('n')} span={case['span']})"
        assert got_cycles == cycles, f"{what}: {got_cycles} cycles, golden {cycles}"
        bad = np.nonzero((got != want).any(axis=1))[0]
        assert not len(bad), f"{what}: GPR {bad[0]} RTL {got[bad[0]]} golden {want[bad[0]]}"
