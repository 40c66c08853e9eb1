"""cocotb tests of the JIT-Q ALU channel (``hw/alu.py``) against
``golden.jitq``.

One coroutine, woken at every falling edge, drives the command and
write-data streams (random idle cycles) and the read-data sink (random
backpressure) from pre-built lists, and samples the handshakes and the issue
trace. The golden channel then runs on the observed arrival and pop cycles:
the trace must match cycle for cycle and the read beats bit for bit. The
kernel tests load tiles with host WRs, run a quantization kernel, read the
outputs back with RDs and compare them with the MX quantizer."""

from __future__ import annotations

import json
import logging
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from golden import numerics
from golden.config import Timing
from golden.isa import STATUS_FIELDS, TRACE_FIELDS, Opcode, unpack
from golden.jitq import (
    AluChannel,
    AluConfig,
    KernelLayout,
    alu,
    host_load,
    host_rd,
    host_readback,
    host_wr,
    kernel,
    parse_readback,
)
from golden.mx import FORMATS, quantize
from tb.alu_stimulus import random_beat, random_program

CLOCK_NS = 10
IDLE, BACKPRESSURE = 0.2, 0.2


def config_from_env() -> AluConfig:
    data = json.loads(os.environ["PIMORCH_CONFIG"])
    data["timing"] = Timing(**data["timing"])
    return AluConfig(**data)


def ref_reads(ref) -> list[int]:
    """Command ID of every RD, in order."""
    return [t.cmd_id for t in ref.trace if t.opcode == Opcode.RD]


class AluTB:
    def __init__(self, dut):
        self.dut = dut
        self.cfg = config_from_env()
        self.seed = int(cocotb.RANDOM_SEED)
        self.rng = np.random.default_rng(self.seed)
        self.log = logging.getLogger("cocotb.tb")
        self.log.info("seed %d (SEED=%d replays)", self.seed, self.seed)

    async def reset(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        dut.rst.value = 1
        dut.cmd__valid.value = 0
        dut.wdata__valid.value = 0
        dut.rdata__ready.value = 0
        dut.err_clear.value = 0
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await FallingEdge(dut.clk)

    async def run(self, words, beats, tail=80):
        """Play ``words``/``beats``; return what was observed. At each falling
        edge: sample the outputs (state of this cycle), then drive this
        cycle's inputs; a handshake seen there completes at the next rising
        edge."""
        dut = self.dut
        expect = AluChannel(self.cfg).run(words, beats, execute=False)
        limit = int(expect.cycles / ((1 - IDLE) * (1 - BACKPRESSURE))) * 2 + 2000
        idle = self.rng.random(limit) < IDLE
        stall = self.rng.random(limit) < BACKPRESSURE
        obs = {"cmd": [], "wdata": [], "pops": [], "rdata": [], "trace": []}
        ci = wi = 0
        end = None
        falling = FallingEdge(dut.clk)
        while True:
            await falling
            now = dut.cycle.value.to_unsigned()
            assert now < limit, f"timeout at cycle {now}: {ci}/{len(words)} commands accepted"
            if dut.trace__valid.value:
                t = unpack(TRACE_FIELDS, dut.trace__payload.value.to_unsigned())
                obs["trace"].append((t["cmd_id"], Opcode(t["opcode"]), t["cycle"]))
            ready = not stall[now]
            dut.rdata__ready.value = int(ready)
            if ready and dut.rdata__valid.value:
                obs["pops"].append(now)
                obs["rdata"].append(dut.rdata__payload.value.to_unsigned())
            if ci < len(words) and not idle[now]:
                dut.cmd__valid.value = 1
                dut.cmd__payload.value = words[ci]
                if dut.cmd__ready.value:
                    obs["cmd"].append(now)
                    ci += 1
            else:
                dut.cmd__valid.value = 0
            if wi < len(beats) and not idle[(now + 7) % limit]:
                dut.wdata__valid.value = 1
                dut.wdata__payload.value = beats[wi]
                if dut.wdata__ready.value:
                    obs["wdata"].append(now)
                    wi += 1
            else:
                dut.wdata__valid.value = 0
            if end is None and ci == len(words) and len(obs["trace"]) >= len(expect.trace) \
                    and len(obs["rdata"]) >= len(expect.rdata):
                end = now + tail  # linger: anything issued now would be a mismatch
            if end is not None and now >= end:
                break
        dut.cmd__valid.value = 0
        dut.wdata__valid.value = 0
        st = unpack(STATUS_FIELDS, dut.status.value.to_unsigned())
        obs["status"] = (st["err_code"], st["err_id"], st["err_count"])
        return obs

    def check(self, words, beats, obs):
        ref = AluChannel(self.cfg).run(words, beats, obs["cmd"], obs["wdata"], obs["pops"])
        test_dir = os.environ.get("PIMORCH_TEST_DIR")
        if test_dir:  # make sim's summary line
            with open(os.path.join(test_dir, "metrics.json"), "w") as f:
                json.dump({"commands": len(words), "cycles": ref.cycles}, f)
        want = [(t.cmd_id, t.opcode, t.cycle) for t in ref.trace]
        for i, (got, exp) in enumerate(zip(obs["trace"], want, strict=False)):
            assert got == exp, f"trace entry {i}: RTL {got}, golden {exp} (seed {self.seed})"
        assert len(obs["trace"]) == len(want), f"{len(obs['trace'])} vs {len(want)} entries"
        assert len(obs["rdata"]) == len(ref.rdata), f"{len(obs['rdata'])} read beats, golden " \
                                                    f"{len(ref.rdata)} (seed {self.seed})"
        for i, (got, exp) in enumerate(zip(obs["rdata"], ref.rdata, strict=True)):
            assert got == exp, (f"read beat {i} (command {ref_reads(ref)[i]}): RTL "
                                f"{numerics.words_to_lanes(got).tolist()}, golden "
                                f"{numerics.words_to_lanes(exp).tolist()} (seed {self.seed})")
        st = ref.status
        assert obs["status"] == (st.err_code, st.err_id, st.err_count), obs["status"]
        return ref


async def _kernel(dut, placement, direction, fmt_name, source="bf16"):
    tb = AluTB(dut)
    await tb.reset()
    cfg = tb.cfg
    lay = KernelLayout(placement, 1, cfg.cols, cfg.rows, source)
    n = cfg.banks
    x = (tb.rng.standard_normal((n, 16, 16)) *
         np.exp2(tb.rng.integers(-8, 8, (n, 16, 1)))).astype(np.float32)
    bits = x.view(np.uint32) if source == "fp32" else (x.view(np.uint32) >> 16).astype(np.uint16)
    if source == "bf16":
        bits[0, 3, 5] = 0x7F80  # Inf: a NaN block
        bits[1 % n, 7] = 0  # a zero row
    load, beats = host_load(cfg, lay, bits)
    program = kernel(lay, direction, FORMATS[fmt_name])
    back = host_readback(cfg, lay, direction)
    words = load + program + back
    obs = await tb.run(words, beats)
    ref = tb.check(words, beats, obs)
    codes, es, micro = parse_readback(cfg, lay, direction, obs["rdata"])
    src = bits.reshape(n, 1, 16, 16)
    if direction == "col":
        src = src.transpose(0, 1, 3, 2)
    q = quantize(src, FORMATS[fmt_name], source)
    assert np.array_equal(codes, q.codes.reshape(codes.shape)), "codes differ from mx.quantize"
    assert np.array_equal(es, q.shared.reshape(es.shape)), "shared exponents differ"
    assert np.array_equal(micro, q.micro.reshape(micro.shape)), "micro bits differ"
    kernel_cycles = [t.cycle for t in ref.trace if t.cmd_id >= len(load)]
    tb.log.info("%s %s %s %s: %d kernel commands, %d cycles (RTL = golden)", placement,
                direction, fmt_name, source, len(program),
                kernel_cycles[-1] - kernel_cycles[0] if kernel_cycles else 0)


@cocotb.test()
async def random_alu_program(dut):
    """Every ALU operation, loads, stores and host traffic under flow control."""
    tb = AluTB(dut)
    await tb.reset()
    words, beats = random_program(tb.rng, int(os.environ.get("PIMORCH_ALU_OPS", "1500")), tb.cfg)
    obs = await tb.run(words, beats)
    tb.check(words, beats, obs)


@cocotb.test()
async def bad_commands(dut):
    """Dropped commands leave no trace; a bad WR still takes its beat."""
    from golden.isa import AluAdd, AluMov

    tb = AluTB(dut)
    await tb.reset()
    words = [alu(Opcode.ALU_ADD, AluAdd.SUB + 4), host_wr(tb.cfg.banks, 0, 0),
             alu(Opcode.ALU_MOV, AluMov.ST, bank=2), host_rd(0, tb.cfg.rows, 0),
             host_wr(0, 1, 1), host_rd(0, 1, 1), alu(Opcode.MAC, 0)]
    beats = [random_beat(tb.rng), random_beat(tb.rng)]
    obs = await tb.run(words, beats)
    tb.check(words, beats, obs)
    assert obs["status"][2] == 5 and obs["rdata"] == [beats[1]]


@cocotb.test()
async def kernel_tiled_row_mx4(dut):
    await _kernel(dut, "tiled", "row", "MX4")


@cocotb.test()
async def kernel_tiled_col_mx6(dut):
    await _kernel(dut, "tiled", "col", "MX6")


@cocotb.test()
async def kernel_strided_row_mx9(dut):
    await _kernel(dut, "strided", "row", "MX9")


@cocotb.test()
async def kernel_strided_counter_col_mx4(dut):
    await _kernel(dut, "strided-counter", "col", "MX4")


@cocotb.test()
async def kernel_strided_counter_row_fp32_mx6(dut):
    await _kernel(dut, "strided-counter", "row", "MX6", source="fp32")
