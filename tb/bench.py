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
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, First, RisingEdge, Timer

from golden.channel import ChannelModel, Command, RunResult
from golden.config import ChannelConfig, Timing
from golden.isa import STATUS_FIELDS, TRACE_FIELDS, ErrorCode, Opcode, unpack

CLOCK_NS = 10


def config_from_env() -> ChannelConfig:
    data = json.loads(os.environ["PIMORCH_CONFIG"])
    data["timing"] = Timing(**data["timing"])
    return ChannelConfig(**data)


@dataclass
class Observed:
    """What the testbench saw, in DUT cycles (the DUT's ``cycle`` output)."""

    cmd_arrivals: list[int] = field(default_factory=list)
    wdata_arrivals: list[int] = field(default_factory=list)
    rdata_pops: list[int] = field(default_factory=list)
    rdata: list[int] = field(default_factory=list)
    trace: list[tuple[int, int, int]] = field(default_factory=list)
    status: tuple[int, int, int] = (0, 0, 0)
    cycles: int = 0


class ScoreboardError(AssertionError):
    pass


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
        self.seed = int(cocotb.RANDOM_SEED)
        self.rng = np.random.default_rng(self.seed)
        self.idle, self.backpressure = idle, backpressure
        # The golden model's GBuf and bank contents carry over between streams,
        # as the RTL's memories do through a reset (registers, OBuf included,
        # are reset).
        self.model = ChannelModel(self.config)
        self.log.info("seed %d (replay: SEED=%d make sim, or pytest --seed %d); %s",
                      self.seed, self.seed, self.seed, self.config.describe())

    async def start(self) -> None:
        dut = self.dut
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        for name in ("cmd__valid", "wdata__valid", "rdata__ready", "err_clear", "play", "load",
                     "n_cmd", "n_wdata", "n_rdata", "n_trace", "idle_level", "stall_level",
                     "lfsr_seed", "hold_beat", "hold_until"):
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
        st = unpack(STATUS_FIELDS, dut.status.value.to_unsigned())
        obs.status = (st["err_code"], st["err_id"], st["err_count"])
        obs.cycles = now
        return obs

    async def play(self, commands: list[Command], wdata: list[int], *, idle: float | None = None,
                   backpressure: float | None = None,
                   hold: tuple[int, int] | None = None) -> Observed:
        """Run a stream through the player (reset first); return the record.
        ``hold = (k, cycle)`` holds write beat k back until that cycle."""
        from sim.generate import PLAY_MAX

        if len(commands) > PLAY_MAX or len(wdata) > PLAY_MAX:
            raise ValueError(f"the player holds {PLAY_MAX} commands and beats per load; "
                             f"split the stream ({len(commands)} commands, {len(wdata)} beats)")
        idle = self.idle if idle is None else idle
        backpressure = self.backpressure if backpressure is None else backpressure
        expect = copy.deepcopy(self.model).run(commands, wdata)  # counts, not timing
        with open("play_cmds.hex", "w") as f:
            f.write("".join(f"{c.pack():x}\n" for c in commands))
        with open("play_wdata.hex", "w") as f:
            f.write("".join(f"{w:x}\n" for w in wdata))
        dut = self.dut
        dut.play.value = 0
        dut.rst.value = 1
        dut.n_cmd.value, dut.n_wdata.value = len(commands), len(wdata)
        dut.n_rdata.value, dut.n_trace.value = len(expect.rdata), len(expect.trace)
        dut.idle_level.value = min(65535, int(idle * 65536))
        dut.stall_level.value = min(65535, int(backpressure * 65536))
        dut.lfsr_seed.value = int(self.rng.integers(1, 1 << 32))
        dut.hold_beat.value, dut.hold_until.value = hold or (0, 0)
        dut.load.value = 1
        await ClockCycles(dut.clk, 3)
        dut.load.value = 0
        dut.rst.value = 0
        dut.play.value = 1
        slow = 1.0 / max(0.05, (1 - idle) * (1 - backpressure))
        limit = int(expect.cycles * slow * 2) + 2000 + (hold[1] if hold else 0)
        done = RisingEdge(dut.done)
        if await First(done, Timer(limit * CLOCK_NS, unit="ns")) is not done:
            raise ScoreboardError(f"player: not done after {limit} cycles; "
                                  f"record in {os.path.abspath('play_record.txt')}")
        await FallingEdge(dut.clk)
        obs = Observed()
        with open("play_record.txt") as f:
            for line in f:
                kind, *rest = line.split()
                if kind == "C":
                    obs.cmd_arrivals.append(int(rest[0]))
                elif kind == "W":
                    obs.wdata_arrivals.append(int(rest[0]))
                elif kind == "R":
                    obs.rdata_pops.append(int(rest[0]))
                    obs.rdata.append(int(rest[1], 16))
                else:
                    e = unpack(TRACE_FIELDS, int(rest[0], 16))
                    obs.trace.append((e["cmd_id"], e["opcode"], e["cycle"]))
        st = unpack(STATUS_FIELDS, dut.status.value.to_unsigned())
        obs.status = (st["err_code"], st["err_id"], st["err_count"])
        obs.cycles = dut.cycle.value.to_unsigned()
        dut.play.value = 0
        return obs

    def check(self, commands: list[Command], wdata: list[int], obs: Observed) -> RunResult:
        """Scoreboard: golden model on the observed timing vs the DUT."""
        self.model.obuf[:] = 0  # reset state: OBuf registers cleared, memories kept
        ref = self.model.run(commands, wdata, obs.cmd_arrivals,
                                            obs.wdata_arrivals, obs.rdata_pops)
        want = [(t.cmd_id, int(t.opcode), t.cycle) for t in ref.trace]
        for i, (g, w) in enumerate(zip(obs.trace, want, strict=False)):
            if g != w:
                ctx = "\n".join(f"  {j}: rtl {obs.trace[j]} golden {want[j]}"
                                for j in range(max(0, i - 3), min(i + 3, len(want),
                                                                  len(obs.trace))))
                raise ScoreboardError(
                    f"issue trace differs at entry {i} (id, opcode, cycle): rtl {g} "
                    f"({Opcode(g[1]).name}) golden {w} ({Opcode(w[1]).name}); seed {self.seed}\n"
                    f"{ctx}")
        if len(obs.trace) != len(want):
            raise ScoreboardError(f"trace length: rtl {len(obs.trace)}, golden {len(want)}")
        for j, (g, w) in enumerate(zip(obs.rdata, ref.rdata, strict=False)):
            if g != w:
                raise ScoreboardError(f"read beat {j}: rtl {g:#066x} golden {w:#066x}; "
                                      f"seed {self.seed}")
        if len(obs.rdata) != len(ref.rdata):
            raise ScoreboardError(f"read beats: rtl {len(obs.rdata)}, golden {len(ref.rdata)}")
        want_status = (int(ref.status.err_code), ref.status.err_id, ref.status.err_count)
        if obs.status != want_status:
            raise ScoreboardError(f"status (code, id, count): rtl {obs.status} "
                                  f"golden {want_status} ({ErrorCode(want_status[0]).name})")
        self.log.info("scoreboard: %d trace entries, %d read beats, %d cycles match golden",
                      len(want), len(ref.rdata), obs.cycles)
        self.write_metrics(commands=len(commands), cycles=obs.cycles, trace_entries=len(want),
                           read_beats=len(ref.rdata), seed=self.seed)
        return ref

    @staticmethod
    def write_metrics(**metrics) -> None:
        """Leave the run's figures in the run folder (for make bench)."""
        folder = os.environ.get("PIMORCH_TEST_DIR")
        if folder:
            with open(os.path.join(folder, "metrics.json"), "w") as f:
                json.dump(metrics, f, indent=2)
