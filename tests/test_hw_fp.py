"""hw.fp units under the Amaranth simulator against golden.numerics."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden import numerics as nm
from hw.fp import BF16Mul, F32Add, F32ToBF16

SPECIAL_EXP = [0, 1, 2, 24, 25, 26, 27, 28, 126, 127, 128, 253, 254, 255]
SPECIAL_MAN = [0, 1, 2, 3, 0x400000, 0x7FFFFF, 0x7FFFFE, 0x3FFFFF, 0x200001]


def f32_vectors(n, seed):
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2**32, (n, 2), dtype=np.uint64).astype(np.uint32)
    s = rng.integers(0, 2, (n, 2)).astype(np.uint32)
    e = rng.choice(SPECIAL_EXP, (n, 2)).astype(np.uint32)
    man = rng.choice(SPECIAL_MAN, (n, 2)).astype(np.uint32)
    crafted = (s << 31) | (e << 23) | man
    # near-cancellation: b = -(a +- a few ulps), and equal/adjacent exponents
    a = rand[:, 0]
    near = np.stack([a, (a ^ 0x80000000) + rng.integers(-3, 4, n).astype(np.uint32)], axis=1)
    adj = np.stack([a, (a ^ (rng.integers(0, 2, n).astype(np.uint32) << 31))
                    + (rng.integers(-2, 3, n).astype(np.uint32) << 23)], axis=1)
    return np.concatenate([rand, crafted, near.astype(np.uint32), adj.astype(np.uint32)])


def run_comb(dut, inputs, outputs, vectors):
    got = []

    async def bench(ctx):
        for vec in vectors:
            for port, v in zip(inputs, vec, strict=True):
                ctx.set(port, int(v))
            await ctx.delay(1e-9)
            got.append(ctx.get(outputs))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.uint64)


def test_f32_add_matches_golden():
    dut = F32Add()
    vec = f32_vectors(1500, seed=11)
    got = run_comb(dut, [dut.a, dut.b], dut.y, vec)
    expect = nm.f32_add(vec[:, 0], vec[:, 1])
    bad = np.nonzero(got != expect)[0]
    assert bad.size == 0, [f"{vec[i,0]:#010x}+{vec[i,1]:#010x}: rtl {int(got[i]):#010x} "
                           f"golden {int(expect[i]):#010x}" for i in bad[:5]]


def test_bf16_mul_matches_golden():
    dut = BF16Mul()
    rng = np.random.default_rng(12)
    rand = rng.integers(0, 2**16, (2000, 2)).astype(np.uint16)
    e = rng.choice([0, 1, 2, 63, 64, 126, 127, 128, 190, 191, 192, 254, 255], (1000, 2))
    crafted = ((rng.integers(0, 2, (1000, 2)) << 15) | (e << 7)
               | rng.choice([0, 1, 0x40, 0x7F], (1000, 2))).astype(np.uint16)
    vec = np.concatenate([rand, crafted])
    got = run_comb(dut, [dut.a, dut.b], dut.y, vec)
    expect = nm.bf16_mul(vec[:, 0], vec[:, 1])
    bad = np.nonzero(got != expect)[0]
    assert bad.size == 0, [f"{vec[i,0]:#06x}*{vec[i,1]:#06x}: rtl {int(got[i]):#010x} "
                           f"golden {int(expect[i]):#010x}" for i in bad[:5]]


@pytest.mark.parametrize("seed", [13])
def test_f32_to_bf16_matches_golden(seed):
    dut = F32ToBF16()
    vec = f32_vectors(1000, seed)[:, :1]
    got = run_comb(dut, [dut.a], dut.y, vec)
    expect = nm.f32_to_bf16(vec[:, 0])
    assert np.array_equal(got, expect)
