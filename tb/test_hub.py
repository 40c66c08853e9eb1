"""cocotb tests of the PIM module (HUB + channels, ``hw/hub/``) against
the golden HUB (``golden/hub/``).

Every host operation's response is compared with the golden model's; every
command the multicast register loads is compared (cycle, command, mask)
with the golden decoder's, given the acceptance cycles the testbench saw;
and each channel's issue trace is compared, cycle for cycle, with a golden
channel model fed the observed handshake cycles. The checks are
tb/hub_scoreboard.py's, shared with the standalone player (the same tests
run there: tb/play_tests.py ``hub_*``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly

from golden.config import ChannelConfig, HubConfig, Timing
from golden.hub import HostCall
from golden.isa import (
    HOST_FIELDS,
    RESPONSE_FIELDS,
    TRACE_FIELDS,
    pack,
    unpack,
)
from tb import hub_scoreboard, scoreboard
from tb.hub_scoreboard import CallRecord, HubCheck, HubRecord
from tb.hub_stimulus import (
    FAULT_WHO,
    check_epu,
    check_epu_faults,
    check_fault,
    check_host_errors,
    check_qkt_scores,
    epu_case,
    epu_fault_calls,
    fault_scenarios,
    host_error_calls,
    qkt_case,
)
from tb.seeds import run_seed

CLOCK_NS = 10
MAX_WAIT = 200_000  # cycles for one host operation


def config_from_env() -> HubConfig:
    data = json.loads(os.environ["PIMORCH_CONFIG"])
    ch = data.pop("channel")
    ch["timing"] = Timing(**ch["timing"])
    return HubConfig(channel=ChannelConfig(**ch), **data)


class HubTB:
    """Drives host calls and records what the module does (a HubRecord);
    the checks are tb/hub_scoreboard.py's, shared with the standalone
    player."""

    def __init__(self, dut, name: str):
        self.dut, self.name = dut, name  # the test's name names its record file
        self.hub = config_from_env()
        self.log = logging.getLogger("cocotb.tb")
        self.seed = run_seed()
        self.rng = np.random.default_rng(self.seed)
        self.rec = HubRecord(self.hub.n_channels)
        self.loads = self.rec.loads  # cycle, command, mask, discard
        self.all_calls: list[HostCall] = []
        self.result: HubCheck | None = None
        self.log.info("seed %d; %s", self.seed, self.hub.describe())

    @property
    def cycle(self) -> int:
        return self.rec.cycle

    async def start(self) -> None:
        dut = self.dut
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        dut.host__valid.value = 0
        dut.rsp__ready.value = 1
        dut.rst.value = 1
        await ClockCycles(dut.clk, 2)
        dut.rst.value = 0
        await FallingEdge(dut.clk)

    def sample(self, load_prev: bool) -> bool:
        """At a falling edge: record this cycle's handshakes and traces."""
        dut, n, rec = self.dut, self.hub.n_channels, self.rec
        c = int(dut.cycle.value)
        rec.cycle = c
        if load_prev:  # the register now holds what was loaded in c - 1
            rec.loads.append((c - 1, int(dut.dbg_cmd.value), int(dut.dbg_mask.value),
                              int(dut.dbg_discard.value)))
        for name, log in (("dbg_cmd_acc", rec.acc), ("dbg_wdata_acc", rec.wacc),
                          ("dbg_rdata_pop", rec.pops)):
            bits = int(getattr(dut, name).value)
            if bits:
                for ch in range(n):
                    if bits >> ch & 1:
                        log[ch].append(c)
        for ch in range(n):
            if int(getattr(dut, f"trace_{ch}__valid").value):
                t = unpack(TRACE_FIELDS, int(getattr(dut, f"trace_{ch}__payload").value))
                rec.traces[ch].append((t["cmd_id"], t["opcode"], t["cycle"]))
        return bool(int(dut.dbg_load.value))

    async def call(self, c: HostCall) -> tuple[int, int, int]:
        """Drive one host operation; return (code, data, accept cycle)."""
        dut = self.dut
        dut.host__payload.value = pack(HOST_FIELDS, {"host_op": int(c.op), "req_id": c.req_id,
                                                     "arg_a": c.arg_a, "arg_b": c.arg_b,
                                                     "data": c.data})
        dut.host__valid.value = 1
        accepted = None
        for _ in range(MAX_WAIT):
            # sample once this cycle's inputs have settled: a load the call
            # causes in its accept cycle (RAW) is visible only then
            await ReadOnly()
            self._load = self.sample(self._load)
            if accepted is None and int(dut.host__ready.value):
                accepted = self.cycle
                await FallingEdge(dut.clk)
                dut.host__valid.value = 0
                continue
            if accepted is not None and int(dut.rsp__valid.value):
                rsp = unpack(RESPONSE_FIELDS, int(dut.rsp__payload.value))
                self.rec.calls.append(CallRecord(accepted, self.cycle, rsp["rsp_code"],
                                                 rsp["data"]))
                await FallingEdge(dut.clk)
                return rsp["rsp_code"], rsp["data"], accepted
            await FallingEdge(dut.clk)
        raise AssertionError(f"host operation {c} got no response in {MAX_WAIT} cycles")

    _load = False
    lag: list[int] | None = None  # decode_stall(), when a test measured it

    async def drain(self) -> None:
        """After the last call: record until the module has been quiet (no
        load, handshake or trace entry) for the player's quiet cycles, so
        commands still in the channels are checked too."""
        quiet, rec = 0, self.rec
        limit = scoreboard.quiet_cycles(self.hub.channel)
        def events():
            return [len(log) for logs in (rec.acc, rec.wacc, rec.pops, rec.traces)
                    for log in logs]

        while quiet <= limit:  # stop at the (limit + 1)-th quiet cycle, as hub_play does
            await ReadOnly()
            before = events()
            self._load = self.sample(self._load)
            quiet = 0 if self._load or events() != before else quiet + 1
            await FallingEdge(self.dut.clk)

    async def replay(self, calls: list[HostCall]) -> list[tuple[int, int]]:
        """Run ``calls`` on the RTL, then check every call so far against
        the golden model (responses and every multicast load)."""
        for c in calls:
            await self.call(c)
        self.all_calls += calls
        self.result = hub_scoreboard.check(self.hub, self.all_calls, self.rec, channels=False)
        return self.result.responses[-len(calls):] if calls else []

    @property
    def bubbles(self) -> list[int]:
        return self.result.bubbles if self.result else []

    def check_channels(self) -> int:
        """Each channel's trace against a golden channel model fed the
        observed handshake cycles; returns the number of commands checked."""
        return hub_scoreboard.check_channels(self.hub, self.result.model, self.rec)

    def decode_stall(self) -> list[int]:
        return hub_scoreboard.decode_stall(self.hub, self.result, self.rec)

    def write_metrics(self) -> None:
        folder = os.environ.get("PIMORCH_TEST_DIR")
        if folder:
            with open(os.path.join(folder, "metrics.json"), "w") as f:
                json.dump({"commands": sum(len(a) for a in self.rec.acc), "cycles": self.cycle,
                           "host_calls": len(self.all_calls), "step_bubbles": self.bubbles,
                           "step_lag_vs_ideal_feed": self.lag}, f)
            # the record, to compare with the standalone player's (tests/test_fast.py)
            with open(os.path.join(folder, f"hub_record_{self.name}.json"), "w") as f:
                json.dump(dataclasses.asdict(self.rec), f)


async def _run(dut, calls, name):
    tb = HubTB(dut, name)
    await tb.start()
    rsp = await tb.replay(calls)
    await tb.drain()
    checked = tb.check_channels()
    tb.write_metrics()
    tb.log.info("%d host calls, %d channel commands checked, %d cycles", len(calls), checked,
                tb.cycle)
    return tb, rsp


@cocotb.test()
async def qkt_two_requests(dut):
    """QK^T for two requests whose keys sit in non-contiguous, interleaved
    chunks, over decode steps in which request 0 crosses a chunk boundary
    (the host grows it between steps). Every response equals the golden
    model's; the scores are also checked against numpy."""
    hub = config_from_env()
    case = qkt_case(hub, steps=4, seed=run_seed() % 1000)
    tb, rsp = await _run(dut, case.calls, "qkt_two_requests")
    if os.environ.get("PIMORCH_HUB_LAG") == "1":  # make sim, make bench: golden reruns per step
        tb.lag = tb.decode_stall()
    tb.log.info("per step: multicast-register bubbles %s; last command later than with an "
                "ideal feed by %s cycles (worst channel)", tb.bubbles, tb.lag)
    tb.write_metrics()
    check_qkt_scores(hub, case, rsp)


@cocotb.test()
async def faults(dut):
    """One scenario per fault code; each checks the code the host reads,
    that the other request ran, and (via the golden comparison of every
    multicast load) that nothing was sent for the faulting request."""
    hub = config_from_env()
    tb = HubTB(dut, "faults")
    await tb.start()
    for code, calls in fault_scenarios(hub).items():
        # one golden model follows the RTL through all the scenarios
        first = len(tb.loads)
        rsp = await tb.replay(calls)
        check_fault(code, calls, rsp)
        tb.log.info("%s: request %d faulted, %d commands sent", code.name, FAULT_WHO[code][0],
                    len(tb.loads) - first)
    await tb.drain()
    tb.log.info("%d channel commands checked", tb.check_channels())
    tb.write_metrics()


@cocotb.test()
async def epu(dut):
    """QK^T, then the EPU's softmax and reduction in the same program, for
    two requests of unequal length over two steps; then the EPU's faults
    (a GPR range overrun, T_cur 0, the commit checks). Every response and
    multicast load equals golden's (which waits for the observed read
    beats before each EPU run); the softmax is a distribution and the
    reduction a sum."""
    hub = config_from_env()
    tb = HubTB(dut, "epu")
    await tb.start()
    case = epu_case(hub, seed=run_seed() % 1000)
    check_epu(hub, case, await tb.replay(case.calls))
    calls = epu_fault_calls(hub)
    check_epu_faults(hub, calls, await tb.replay(calls))
    await tb.drain()
    tb.log.info("%d channel commands checked", tb.check_channels())
    tb.write_metrics()


@cocotb.test()
async def host_errors(dut):
    """Bad host operations get BAD_OP / BAD_ARG and change nothing."""
    hub = config_from_env()
    calls = host_error_calls(hub)
    _, rsp = await _run(dut, calls, "host_errors")
    check_host_errors(rsp)
