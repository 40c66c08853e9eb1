"""The golden PIM module in closed loop (golden/hub/fabric.py): the same
answers and data as the golden HUB, its own record replayed by the
scoreboard, the handshake rules on hand-computed cases, and its threads
released. Against the RTL: tests/test_fast.py (the hub and decode player
tests score every cycle the closed loop predicts)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from golden.config import small_hub_config
from golden.hub import Hub
from golden.hub.fabric import FIRST_CALL, TimedHub
from golden.isa import HostOp, HostStatus, Opcode
from golden.streams import RDATA_POP_LATENCY, Command
from tb import hub_scoreboard
from tb.hub_stimulus import epu_case, epu_fault_calls, fault_scenarios, qkt_case


def _play(model, calls):
    return [(int(r.code), r.data) for r in
            (model.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data) for c in calls)]


def _sessions(hub):
    return {"qkt": qkt_case(hub, steps=3, seed=2).calls,
            "epu": epu_case(hub, seed=4).calls + epu_fault_calls(hub),
            "faults": [c for cs in fault_scenarios(hub).values() for c in cs]}


@pytest.mark.parametrize("policy", ["static", "dcs"])
def test_closed_loop_answers_as_the_hub(policy):
    """The closed loop changes when things happen, not what: every
    response and the GPR at the end equal the golden HUB's."""
    hub = small_hub_config(policy)
    for name, calls in _sessions(hub).items():
        ref, timed = Hub(hub), TimedHub(hub)
        assert _play(timed, calls) == _play(ref, calls), name
        timed.close()
        assert np.array_equal(timed.gpr, ref.gpr), name
        assert [len(s) for s in timed.streams] == [len(s) for s in ref.streams], name
        assert timed.gpr_reads == ref.gpr_reads and timed.gpr_writes == ref.gpr_writes, name


@pytest.mark.parametrize("policy", ["static", "dcs"])
def test_closed_loop_record_passes_the_scoreboard(policy):
    """The closed loop's own record, replayed by the scoreboard on the
    golden HUB fed its handshake cycles, gives the same loads and traces;
    a record with one response a cycle late fails the prediction, naming
    the call."""
    hub = small_hub_config(policy)
    calls = _sessions(hub)["qkt"]
    model = TimedHub(hub)
    _play(model, calls)
    rec = hub_scoreboard.record_of(model, model.close())
    assert sum(map(len, rec.acc)) > len(calls) // 2 and rec.pops[0] and rec.wacc[0]
    result = hub_scoreboard.check(hub, calls, rec, closed_loop=True)
    assert result.channel_commands == sum(map(len, rec.acc))
    k = len(calls) - 1
    rec.calls[k].responded += 1
    with pytest.raises(hub_scoreboard.HubScoreboardError, match=f"at call {k}: golden"):
        hub_scoreboard.check(hub, calls, rec, closed_loop=True)


def test_read_beats_return_lowest_channel_first():
    """A RAW RD to both channels of a fresh module, by hand: accepted and
    loaded in cycle 0, taken by both in 1, visible in 2 (the ACT), the RD
    tRCD later; channel 0's beat is popped RDATA_POP_LATENCY cycles after
    it, channel 1's the cycle after (one beat a cycle); the module is
    drained the cycle after that, the response popped the next."""
    hub = small_hub_config("static")
    model = TimedHub(hub)
    rsp = model.host(HostOp.RAW, arg_a=0b11, arg_b=8,
                     data=Command(Opcode.RD, bank=1, row=3, col=2).pack())
    assert rsp.code == HostStatus.OK
    runs = model.close()
    f, t_rcd = model.fabric, hub.channel.timing.t_rcd
    rd = 2 + t_rcd
    assert FIRST_CALL == 0 and f.loads == [(0, Command(Opcode.RD, 1, 3, 2).pack(), 0b11, 0)]
    assert f.acc == [[1], [1]] and f.wacc == [[], []]
    for r in runs:
        assert [(int(t.opcode), t.cycle) for t in r.trace] == [(Opcode.ACT, 2), (Opcode.RD, rd)]
    assert f.pops == [[rd + RDATA_POP_LATENCY], [rd + RDATA_POP_LATENCY + 1]]
    drained = rd + RDATA_POP_LATENCY + 2
    assert (model.timings[0].accepted, model.timings[0].responded) == (0, drained + 1)
    # the next call is accepted the cycle after the response is popped
    model2 = TimedHub(hub)
    model2.host(HostOp.GPR_WRITE, arg_a=1, data=5)
    model2.host(HostOp.GPR_READ, arg_a=1)
    model2.host(HostOp.GPR_READ, arg_a=hub.gpr_entries)  # refused: answered at once
    assert [(t.accepted, t.responded) for t in model2.timings] == [(0, 1), (2, 4), (5, 6)]
    model2.close()


def _cmd_pops(cmds, trace) -> list[int]:
    """Static controller: each command leaves its FIFO at its access (the
    trace entry of its own opcode and ID)."""
    at = {(t.cmd_id, int(t.opcode)): t.cycle for t in trace}
    return [at[i % (1 << 16), int(c.opcode)] for i, c in enumerate(cmds)]


def test_command_fifo_backpressure():
    """A channel takes an offered command in the first cycle its command
    FIFO has room: with a two-entry FIFO, every command taken after the
    cycle it was offered from finds the FIFO full (two commands taken and
    not yet issued) in every cycle before, and room in the cycle it is
    taken; the multicast register loads again in the cycle of its last take."""
    hub = small_hub_config("static")
    hub = hub.replace(channel=hub.channel.replace(cmd_depth=2))
    calls = qkt_case(hub, steps=2, seed=1).calls
    model = TimedHub(hub)
    _play(model, calls)
    runs = model.close()
    f = model.fabric
    late = 0
    for c, run in enumerate(runs):
        cmds = f.streams[c].commands
        pops = _cmd_pops(cmds, run.trace)
        offers = [load + 1 for load, _, mask, _ in f.loads if mask >> c & 1]
        assert len(offers) == len(f.acc[c]) == len(cmds)

        def level(t, c=c, pops=pops):
            return sum(a < t for a in f.acc[c]) - sum(p < t for p in pops)
        for offer, taken in zip(offers, f.acc[c], strict=True):
            assert taken >= offer and level(taken) < 2
            for t in range(offer, taken):
                assert level(t) == 2, (c, offer, taken, t)
            late += taken > offer
    assert late > 10  # the case does exercise backpressure
    takes = [max(f.acc[c][sum(1 for x in f.loads[:k] if x[2] >> c & 1)] for c in range(2)
                 if load[2] >> c & 1) for k, load in enumerate(f.loads)]
    assert any(f.loads[k + 1][0] == takes[k] for k in range(len(takes) - 1))
    assert all(f.loads[k + 1][0] >= takes[k] for k in range(len(takes) - 1))


def test_threads_end_with_the_module():
    """A closed module's threads have ended; a module dropped unfinished
    ends its threads when collected."""
    hub = small_hub_config("dcs")
    before = threading.active_count()
    model = TimedHub(hub)
    assert threading.active_count() == before + hub.n_channels
    _play(model, qkt_case(hub, steps=1).calls[:40])
    model.close()
    assert threading.active_count() == before
    model = TimedHub(hub)
    _play(model, qkt_case(hub, steps=1).calls[:40])
    del model
    gc.collect()
    assert threading.active_count() == before
