"""cocotb tests of the JIT-Q ALU channel (``hw/alu.py``) against
``golden.alu``.

One coroutine, woken at every falling edge, drives the command and
write-data streams (random idle cycles) and the read-data sink (random
backpressure) from pre-built lists, and samples the handshakes and the issue
trace. The golden channel then runs on the observed arrival and pop cycles:
the trace must match cycle for cycle and the read beats bit for bit. The
kernel test loads tiles with host WRs, runs a quantization kernel, reads the
outputs back with RDs and compares them with the MX quantizer.

The long random program and the other kernels need no per-cycle Python:
they run through the standalone player (tb/play_tests.py ``alu_random``,
``alu_kernels``)."""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from golden import numerics
from golden.alu import AluChannel, AluConfig, alu, host_rd, host_wr
from golden.config import Timing
from golden.isa import STATUS_FIELDS, TRACE_FIELDS, Opcode, unpack
from tb.alu_stimulus import check_kernel, kernel_case, random_beat
from tb.scoreboard import check_energy, refresh_tail
from tb.seeds import run_seed

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
        self.seed = run_seed()
        self.rng = np.random.default_rng(self.seed)
        self.log = logging.getLogger("cocotb.tb")
        self.log.info("seed %d (pimorch sim --seed %d, or SEED=%d, replays)", self.seed,
                      self.seed, self.seed)

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
        trace = refresh_tail(obs["trace"], want)  # the RTL refreshes on after the end
        for i, (got, exp) in enumerate(zip(trace, want, strict=False)):
            assert got == exp, f"trace entry {i}: RTL {got}, golden {exp} (seed {self.seed})"
        assert len(trace) == len(want), f"{len(trace)} vs {len(want)} entries"
        assert len(obs["rdata"]) == len(ref.rdata), f"{len(obs['rdata'])} read beats, golden " \
                                                    f"{len(ref.rdata)} (seed {self.seed})"
        for i, (got, exp) in enumerate(zip(obs["rdata"], ref.rdata, strict=True)):
            assert got == exp, (f"read beat {i} (command {ref_reads(ref)[i]}): RTL "
                                f"{numerics.words_to_lanes(got).tolist()}, golden "
                                f"{numerics.words_to_lanes(exp).tolist()} (seed {self.seed})")
        st = ref.status
        assert obs["status"] == (st.err_code, st.err_id, st.err_count), obs["status"]
        # the energy from the RTL's trace equals golden's (golden.energy)
        check_energy(self.cfg, words, SimpleNamespace(trace=trace), ref, f"; seed {self.seed}")
        return ref


async def _kernel(dut, placement, direction, fmt_name, source="bf16"):
    tb = AluTB(dut)
    await tb.reset()
    case = kernel_case(tb.cfg, tb.rng, placement, direction, fmt_name, source)
    obs = await tb.run(case.words, case.beats)
    ref = tb.check(case.words, case.beats, obs)
    check_kernel(tb.cfg, case, obs["rdata"])
    kernel_cycles = [t.cycle for t in ref.trace if t.cmd_id >= case.n_load]
    refreshes = sum(t.opcode == Opcode.REF for t in ref.trace)
    tb.log.info("%s: %d kernel commands, %d cycles, %d refreshes (RTL = golden)", case.name,
                case.n_kernel, kernel_cycles[-1] - kernel_cycles[0] if kernel_cycles else 0,
                refreshes)
    t_refi = tb.cfg.timing.t_refi
    assert not t_refi or refreshes >= ref.cycles // t_refi - 1, "refresh missing"


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
