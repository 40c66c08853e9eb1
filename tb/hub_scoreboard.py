"""The PIM module scoreboard: the golden HUB (golden/hub/) and golden
channels on what the RTL did. One scoreboard for both ways the module is
simulated: the cocotb testbench (tb/test_hub.py) and the standalone player
(sim/fast.py ``run_hub``, toplevel ``hub_play`` in tb/hub_play.v.in).

Both record the same things (a ``HubRecord``): per host call its accept
and response cycles and the response; every load of the multicast register
(the cycle it was loaded, command, channel mask, discard flag); per channel
the cycles of every command and write-beat handshake and read-beat pop, and
the issue trace. ``check`` then replays the calls on the golden HUB:

* every response equals golden's;
* every STEP's multicast loads equal the golden decoder's, given the
  cycles the channels took them and (for an EPU instruction, which waits
  for them) the cycles their read beats came back;
* each channel's trace equals a golden channel fed the observed handshake
  cycles, cycle for cycle.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from golden import energy
from golden.channel import ChannelModel, Command
from golden.config import HubConfig
from golden.hub import HostCall, Hub
from golden.hub.fabric import TimedHub
from golden.hub.ports import READS
from golden.isa import HostOp, HostStatus, Opcode
from golden.streams import TraceEntry
from tb import scoreboard


class HubScoreboardError(AssertionError):
    pass


@dataclass
class CallRecord:
    accepted: int  # cycle the host operation was accepted
    responded: int  # cycle its response was popped
    code: int
    data: int


@dataclass
class HubRecord:
    """What a testbench saw of the PIM module, in the module's cycles."""

    n_channels: int
    calls: list[CallRecord] = field(default_factory=list)
    #: (cycle the register was loaded, command word, channel mask, discard)
    loads: list[tuple[int, int, int, int]] = field(default_factory=list)
    acc: list[list[int]] = field(default_factory=list)  # per channel: command handshakes
    wacc: list[list[int]] = field(default_factory=list)  # per channel: write-beat handshakes
    pops: list[list[int]] = field(default_factory=list)  # per channel: read-beat pops
    traces: list[list[tuple[int, int, int]]] = field(default_factory=list)  # (id, opcode, cycle)
    cycle: int = 0  # the last cycle seen

    def __post_init__(self):
        for name in ("acc", "wacc", "pops", "traces"):
            if not getattr(self, name):
                setattr(self, name, [[] for _ in range(self.n_channels)])


@dataclass
class HubCheck:
    """What ``check`` found (all equal to golden)."""

    model: Hub
    responses: list[tuple[int, int]]
    #: per STEP: (accept cycle, per channel (first, end) command index)
    steps: list[tuple[int, list[tuple[int, int]]]]
    #: per STEP: cycles the multicast register sat empty between the step's
    #: first and last command (the decoder had nothing ready)
    bubbles: list[int]
    channel_commands: int = 0
    epu_runs: int = 0  # EPU instructions run, every STEP
    #: the run's energy (golden.energy.hub_energy: each channel's trace as
    #: the RTL issued it, over its own run, and the GPR's accesses); None
    #: without the channels' check or an energy table
    energy: dict | None = None


def _fmt(items, i):
    if i >= len(items) or items[i] is None:
        return "(none)"
    cyc, word, mask, discard = items[i]
    return f"cycle {cyc} {Command.unpack(word)} mask {mask:#x}{' discard' if discard else ''}"


def _acceptances(rec: HubRecord, loads, until: int) -> list[int]:
    """Per load: the cycle its last channel took it (the last command or
    beat handshake after the load and up to the next load, and no later
    than ``until``, the step's response)."""
    out = []
    logs = (*rec.acc, *rec.wacc)
    for i, load in enumerate(loads):
        lo = load[0]
        hi = loads[i + 1][0] if i + 1 < len(loads) else until
        last = [log[j - 1] for log in logs
                if (j := bisect.bisect_right(log, hi)) and log[j - 1] > lo]
        out.append(max(last))
    return out


def _landing(rec: HubRecord, model: Hub, observed):
    """``landed(k)`` for ``Hub.step``: the cycle after the last pop of a
    read beat of any command before the step's ``k``-th load (the earlier
    steps' and host RAW commands too), from the observed pops."""
    before = [sum(cmd.opcode in READS for cmd, _ in st) for st in model.streams]
    reads = [Command.unpack(word).opcode in READS for _, word, _, _ in observed]

    def landed(k: int) -> int:
        t = -1
        for c, pops in enumerate(rec.pops):
            n = before[c] + sum(1 for (_, _, mask, _), rd in zip(observed[:k], reads[:k],
                                                                strict=True)
                                if rd and mask >> c & 1)
            if n > len(pops):
                raise HubScoreboardError(f"channel {c}: read beat {n - 1} was never popped")
            if n:
                t = max(t, pops[n - 1] + 1)
        return t
    return landed


def check(hub: HubConfig, calls: list[HostCall], rec: HubRecord,
          channels: bool = True, closed_loop: bool = False) -> HubCheck:
    """Replay ``calls`` on the golden HUB against ``rec``; raise
    HubScoreboardError at the first difference. ``channels`` also checks
    every channel's trace (``check_channels``); ``closed_loop``, for a
    record of the player's whole session, also that the golden module in
    closed loop predicts every cycle of it (``predict``)."""
    if len(rec.calls) != len(calls):
        raise HubScoreboardError(f"{len(rec.calls)} of {len(calls)} host calls answered")
    model = Hub(hub)
    out = HubCheck(model, [], [], [])
    prev = -1  # the response cycle of the call before
    for k, (c, r) in enumerate(zip(calls, rec.calls, strict=True)):
        # the register loads of this call: loaded after the previous
        # response and before this one
        lo = bisect.bisect_left(rec.loads, (prev,))
        hi = bisect.bisect_left(rec.loads, (r.responded,))
        if c.op == HostOp.STEP:
            observed = rec.loads[lo:hi]
            before = [len(st) for st in model.streams]
            accept = _acceptances(rec, observed, r.responded)
            out.bubbles.append(sum(observed[i + 1][0] - accept[i]
                                   for i in range(len(observed) - 1)))
            ref = model.host(c.op, data=c.data, cycle=r.accepted,
                             accept=lambda i, e, a=accept: (a[i] if i < len(a) else e + 1),
                             landed=_landing(rec, model, observed))
            ran = model.last_step if ref.code == HostStatus.OK else None  # None: refused
            want = [(e.cycle, e.command.pack(), e.ch_mask, int(e.discard))
                    for e in (ran.emissions if ran else [])]
            out.epu_runs += len(ran.epu_runs) if ran else 0
            if observed != want:
                diff = next(i for i, (a, b) in enumerate(zip(observed + [None] * len(want),
                                                             want + [None] * len(observed),
                                                             strict=False)) if a != b)
                raise HubScoreboardError(
                    f"call {k} ({c.op.name} {c.note}): multicast load {diff} differs: RTL "
                    f"{_fmt(observed, diff)} golden {_fmt(want, diff)}")
            out.steps.append((r.accepted, list(zip(before, [len(st) for st in model.streams],
                                                   strict=True))))
        else:
            ref = model.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        if (r.code, r.data) != (int(ref.code), ref.data):
            raise HubScoreboardError(
                f"call {k} ({c.op.name} req {c.req_id} a {c.arg_a} b {c.arg_b} {c.note}): RTL "
                f"response ({r.code}, {r.data:#x}), golden ({int(ref.code)}, {ref.data:#x})")
        out.responses.append((r.code, r.data))
        prev = r.responded
    if channels:
        energies: list[dict] = []
        out.channel_commands = check_channels(hub, model, rec, energies)
        known = energy.params_for(hub.channel)
        if known is not None:
            out.energy = energy.hub_energy(known[0], energies, model.gpr_reads,
                                           model.gpr_writes, model.epu_ops)
    if closed_loop:
        predict(hub, calls, rec)
    return out


def record_of(model: TimedHub, runs) -> HubRecord:
    """What the golden module in closed loop (``golden.hub.fabric``) did, as
    a record: every call's cycles and response, load, handshake and trace
    entry (``runs``: its channels' runs, ``TimedHub.close``)."""
    f = model.fabric
    rec = HubRecord(model.hub.n_channels)
    rec.calls = [CallRecord(t.accepted, t.responded, code, data)
                 for t, (code, data) in zip(model.timings, model.responses, strict=True)]
    rec.loads = list(f.loads)
    rec.acc, rec.wacc, rec.pops = ([list(x) for x in logs] for logs in (f.acc, f.wacc, f.pops))
    rec.traces = [[(t.cmd_id, int(t.opcode), t.cycle) for t in r.trace] for r in runs]
    rec.cycle = max((t.cycle for r in runs for t in r.trace), default=0)
    return rec


def predict(hub: HubConfig, calls: list[HostCall], rec: HubRecord) -> HubRecord:
    """The golden module in closed loop (``golden.hub.fabric.TimedHub``) on
    ``calls``, as the player drives them; raise HubScoreboardError at the
    first cycle it does not predict in ``rec``: a call's accept or
    response cycle, a multicast load, a command, write-beat or read-beat
    handshake of a channel, a channel's trace entry. Returns its record."""
    model = TimedHub(hub)
    try:
        for c in calls:
            model.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        got = record_of(model, model.close())
    finally:
        model.fabric.stop()

    def first(name, a, b, show=lambda x: x):
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                     min(len(a), len(b)))
            raise HubScoreboardError(
                f"the golden module in closed loop differs from the RTL at {name} {i}: golden "
                f"{show(a[i]) if i < len(a) else '(none)'}, RTL "
                f"{show(b[i]) if i < len(b) else '(none)'}")

    first("call", [(c.accepted, c.responded) for c in got.calls],
          [(c.accepted, c.responded) for c in rec.calls],
          lambda x: f"accepted in cycle {x[0]}, response popped in {x[1]}")
    first("multicast load", got.loads, rec.loads)
    for c in range(hub.n_channels):
        first(f"channel {c} command handshake", got.acc[c], rec.acc[c])
        first(f"channel {c} write-beat handshake", got.wacc[c], rec.wacc[c])
        first(f"channel {c} read-beat pop", got.pops[c], rec.pops[c])
        first(f"channel {c} trace entry", got.traces[c], rec.traces[c])
    return got


def check_responses(calls: list[HostCall], got: list[tuple[int, int]],
                    want: list[tuple[int, int]]) -> None:
    """Every response ``(code, data)`` the module gave (``got``) is what a
    golden run of ``calls`` got (``want``, e.g. the golden decoder's)."""
    if len(got) != len(want):
        raise HubScoreboardError(f"{len(got)} responses, {len(want)} calls")
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a != b:
            raise HubScoreboardError(f"call {i} ({calls[i]}): response {a}, the golden "
                                     f"decoder got {b}")


def check_channels(hub: HubConfig, model: Hub, rec: HubRecord,
                   energies: list[dict] | None = None) -> int:
    """Each channel's trace against a golden channel model fed the observed
    handshake cycles; returns the number of commands checked. With a list
    ``energies`` and a profile with an energy table, appends each channel's
    energy (``golden.energy.trace_energy`` of the RTL's trace, over the
    golden channel's run)."""
    known = energy.params_for(hub.channel) if energies is not None else None
    total = 0
    for c, stream in enumerate(model.streams):
        cmds = [cmd for cmd, _ in stream]
        beats = [b for _, b in stream if b is not None]
        if len(cmds) != len(rec.acc[c]):
            raise HubScoreboardError(f"channel {c}: golden sent {len(cmds)} commands, the RTL "
                                     f"channel took {len(rec.acc[c])}")
        ref = ChannelModel(hub.channel).run(cmds, beats, rec.acc[c], rec.wacc[c], rec.pops[c])
        want = [(t.cmd_id, int(t.opcode), t.cycle) for t in ref.trace]
        got = rec.traces[c]
        folder = os.environ.get("PIMORCH_TEST_DIR")
        if folder:
            scoreboard.write_traces(folder, want, got, cmds, f"_ch{c}")
        if want != got:
            i = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                     min(len(want), len(got)))
            cycle = min(e[2] for e in (want[i:i + 1] + got[i:i + 1]))
            raise HubScoreboardError(f"channel {c} trace entry {i}: RTL {got[i:i + 1]} "
                                     f"golden {want[i:i + 1]}; first differing cycle {cycle}"
                                     f"{scoreboard.rewrite_hint(None, f'_ch{c}')}")
        if known is not None:
            trace = [TraceEntry(i, Opcode(op), t) for i, op, t in got]
            energies.append(energy.trace_energy(hub.channel, *known, cmds, trace, ref.cycles))
        total += len(cmds)
    return total


def decode_stall(hub: HubConfig, result: HubCheck, rec: HubRecord) -> list[int]:
    """Per STEP: cycles the step's last command issued later than with an
    ideal feed (every command of the step, and its beat, available to its
    channel from the cycle the step's first command reached it), worst
    channel. 0 means that once a step is under way, the decoder, sequencer
    and multicast never held a channel up."""
    out = []
    for _accepted, ranges in result.steps:
        worst = 0
        for c, (lo, hi) in enumerate(ranges):
            if lo == hi:
                continue
            stream = result.model.streams[c][:hi]
            cmds = [cmd for cmd, _ in stream]
            beats = [b for _, b in stream if b is not None]
            w_lo = sum(b is not None for _, b in stream[:lo])
            ideal = list(rec.acc[c][:hi])
            start = rec.acc[c][lo]
            ideal[lo:hi] = [start] * (hi - lo)
            w_ideal = list(rec.wacc[c][:len(beats)])
            w_ideal[w_lo:] = [start] * (len(beats) - w_lo)

            def last(arrivals, w_arrivals, cmds=cmds, beats=beats, c=c, lo=lo):
                r = ChannelModel(hub.channel).run(cmds, beats, arrivals, w_arrivals, rec.pops[c])
                return max(t.cycle for t in r.trace if t.cmd_id >= lo)

            worst = max(worst, last(rec.acc[c][:hi], rec.wacc[c][:len(beats)])
                        - last(ideal, w_ideal))
        out.append(worst)
    return out
