"""cocotb testbench for one channel: driver, monitors, golden model, scoreboard.

Per-cycle Python work is kept small: the stimulus and the idle/backpressure
patterns are pre-built arrays, and one coroutine, woken at every falling
edge, drives all input streams and samples all output streams (valid/ready
are stable mid-cycle; a handshake seen there completes at the next rising
edge). The scoreboard runs the golden model on the observed arrival and pop
cycles and compares the issue trace cycle-exact and read data bit-exact.
"""

from __future__ import annotations

import copy
import json
import logging
import os

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

from golden.channel import ChannelModel, Command, RunResult
from golden.config import ChannelConfig, Timing
from golden.isa import TRACE_FIELDS, unpack
from tb import scoreboard
from tb.scoreboard import Observed, ScoreboardError  # noqa: F401 (the testbenches' names)
from tb.seeds import run_seed

CLOCK_NS = 10


def config_from_env() -> ChannelConfig:
    data = json.loads(os.environ["PIMORCH_CONFIG"])
    data["timing"] = Timing(**data["timing"])
    return ChannelConfig(**data)


class ChannelTB:
    """Owns the clock, the stream driver/monitor loop and the golden model.

    ``idle`` is the probability that the command and write-data sources hold
    valid low in a cycle; ``backpressure`` that the read-data sink holds
    ready low. Both default to 0.25 so every test is a flow-control test."""

    def __init__(self, dut, config: ChannelConfig | None = None, idle: float = 0.25,
                 backpressure: float = 0.25):
        self.dut = dut
        self.config = config or config_from_env()
        self.log = logging.getLogger("cocotb.tb")
        self.seed = run_seed()
        self.rng = np.random.default_rng(self.seed)
        self.idle, self.backpressure = idle, backpressure
        # The golden model's GBuf and bank contents carry over between streams,
        # as the RTL's memories do through a reset (registers, OBuf included,
        # are reset).
        self.model = ChannelModel(self.config)
        self.log.info("seed %d (replay: pimorch sim --test <name> --seed %d, SEED=%d make "
                      "sim, or pytest --seed %d); %s", self.seed, self.seed, self.seed,
                      self.seed, self.config.describe())

    async def start(self) -> None:
        dut = self.dut
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        for name in ("cmd__valid", "wdata__valid", "rdata__ready", "err_clear", "play", "load",
                     "load_index", "n_cmd", "n_wdata", "n_rdata", "n_trace", "idle_level",
                     "stall_level", "lfsr_seed", "hold_beat", "hold_until", "quiet_cycles",
                     "flush"):
            getattr(dut, name).value = 0
        dut.slice_rows.value = self.config.slice_rows
        dut.cmd__payload.value = 0
        dut.wdata__payload.value = 0
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await RisingEdge(dut.clk)

    def slice(self, rows: int) -> None:
        """Split every dual-path bank at ``rows`` (0: unsliced) for the next
        runs: the channel's slice_rows input and the golden model's config
        (its memories carry over). A bad split raises ConfigError."""
        self.config = self.config.replace(slice_rows=rows)
        self.model.config = self.config
        self.dut.slice_rows.value = rows

    async def reset(self) -> None:
        """Reset the channel between streams (the clock keeps running)."""
        await FallingEdge(self.dut.clk)
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def run(self, commands: list[Command], wdata: list[int], *,
                  err_clear_after: int | None = None, max_cycles: int | None = None,
                  offer_at: list[int] | None = None) -> Observed:
        """Drive the streams until the expected trace and read data are in.
        ``offer_at[i]``: command i is not offered before that cycle."""
        expect = copy.deepcopy(self.model).run(commands, wdata)  # counts, not timing
        n_trace, n_rdata = len(expect.trace), len(expect.rdata)
        slow = 1.0 / max(0.05, (1 - self.idle) * (1 - self.backpressure))
        limit = max_cycles or int(expect.cycles * slow * 2) + 2000 + max(offer_at or [0])
        offer = offer_at or [0] * len(commands)
        idle = self.rng.random(limit) < self.idle
        stall = self.rng.random(limit) < self.backpressure
        words = [c.pack() for c in commands]
        dut, obs = self.dut, Observed()
        cmd_valid, cmd_payload, cmd_ready = dut.cmd__valid, dut.cmd__payload, dut.cmd__ready
        w_valid, w_payload, w_ready = dut.wdata__valid, dut.wdata__payload, dut.wdata__ready
        r_valid, r_payload, r_ready = dut.rdata__valid, dut.rdata__payload, dut.rdata__ready
        t_valid, t_payload, cycle = dut.trace__valid, dut.trace__payload, dut.cycle
        ci = wi = 0
        n_cmd, n_w = len(words), len(wdata)
        tail = None
        falling = FallingEdge(dut.clk)
        while True:
            await falling
            now = cycle.value.to_unsigned()
            if now >= limit:
                raise ScoreboardError(
                    f"timeout at cycle {now}: {ci}/{n_cmd} commands accepted, "
                    f"{len(obs.trace)}/{n_trace} trace entries, {len(obs.rdata)}/{n_rdata} beats")
            if t_valid.value:
                e = unpack(TRACE_FIELDS, t_payload.value.to_unsigned())
                obs.trace.append((e["cmd_id"], e["opcode"], e["cycle"]))
            ready = not stall[now]
            r_ready.value = ready
            if ready and r_valid.value:
                obs.rdata.append(r_payload.value.to_unsigned())
                obs.rdata_pops.append(now)
            # the inputs for this cycle: the handshake completes at the next rising edge
            if ci < n_cmd and not idle[now] and now >= offer[ci]:
                cmd_valid.value = 1
                cmd_payload.value = words[ci]
                if cmd_ready.value:
                    obs.cmd_arrivals.append(now)
                    ci += 1
            else:
                cmd_valid.value = 0
            if wi < n_w and not idle[(now + 7) % limit]:
                w_valid.value = 1
                w_payload.value = wdata[wi]
                if w_ready.value:
                    obs.wdata_arrivals.append(now)
                    wi += 1
            else:
                w_valid.value = 0
            dut.err_clear.value = 1 if err_clear_after is not None and now == err_clear_after else 0
            if tail is None and ci == n_cmd and len(obs.trace) >= n_trace and \
                    len(obs.rdata) >= n_rdata:
                tail = now + 16  # linger: anything issued now would be a mismatch
            if tail is not None and now >= tail:
                break
        cmd_valid.value = 0
        w_valid.value = 0
        obs.status = scoreboard.status_tuple(dut.status.value.to_unsigned())
        obs.cycles = now
        return obs

    def check(self, commands: list[Command], wdata: list[int], obs: Observed) -> RunResult:
        """Scoreboard (tb/scoreboard.py): golden model on the observed timing vs the DUT."""
        ref = scoreboard.check(self.model, commands, wdata, obs, self.seed)
        self.log.info("scoreboard: %d trace entries, %d read beats, %d cycles match golden",
                      len(ref.trace), len(ref.rdata), obs.cycles)
        self.write_metrics(commands=len(commands), cycles=obs.cycles, trace_entries=len(ref.trace),
                           read_beats=len(ref.rdata), seed=self.seed)
        return ref

    @staticmethod
    def write_metrics(**metrics) -> None:
        """Leave the run's figures in the run folder (for make bench)."""
        folder = os.environ.get("PIMORCH_TEST_DIR")
        if folder:
            with open(os.path.join(folder, "metrics.json"), "w") as f:
                json.dump(metrics, f, indent=2)
