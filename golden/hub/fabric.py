"""The PIM module in time, its loop closed (twin of the RTL's handshakes:
``hw/hub/multicast.py``, ``hw/hub/host.py``, the channels' stream FIFOs in
``hw/streams.py``): the golden HUB and channels predict every cycle the
module takes, where ``golden.hub.Hub`` alone takes the channels' handshake
cycles as given (``tb/hub_scoreboard.py`` feeds it the RTL's).

``TimedHub`` is a ``Hub`` whose channels run live: each channel's
controller (``golden.channel``, ``golden.dcs``) runs over the whole session
on streams that answer as the module decides them, and the module decides,
cycle by cycle (``Fabric``):

* the multicast register, loaded in cycle ``m``, offers its command (and
  write beat) from ``m + 1``; channel ``c`` takes the command in the first
  cycle its command FIFO has room (fewer than ``cmd_depth`` commands taken
  and not yet popped by its controller before that cycle) and the beat in
  the first cycle its write-data FIFO has room; the register is free in the
  cycle its last channel takes it, and may load again in that cycle;
* a write beat is read from the GPR in the cycle its command loads;
* read beats return one a cycle, lowest channel first, each from
  ``RDATA_POP_LATENCY`` cycles after its read issued; it is in the GPR
  from the next cycle (a beat of the fault drain is dropped).

The host interface answers one call at a time; a call accepted in cycle
``a`` loads the response register in cycle ``r``:

* PROG-WRITE, GPR-WRITE, the configuration buffer's operations, and every
  refused call (BAD_OP, BAD_ARG): ``r = a``; GPR-READ: ``a + 1``;
* PROG-COMMIT: ``a + 1 +`` the words its commit walk visits, one a cycle
  (all of them, or those up to the first bad one);
* STEP: the first cycle from the decoder's end (``StepResult.decode_end``)
  in which the module is drained: the register free, every read beat in
  the GPR;
* RAW: its command loads in ``a``; the first drained cycle after ``a``.

The host (tb/hub_play.v.in's player, as the cocotb testbench) pops the
response in ``r + 1`` and offers its next call, accepted in ``r + 2``; the
first call is accepted in cycle ``FIRST_CALL``.

How it runs: each channel's controller runs on a thread of its own, one
thread at a time (a coroutine; the run is deterministic). When it asks for
a cycle the module has not decided (a command's arrival, a write beat's, a
read beat's pop) it waits; with the cycle it asks in (DCS), it gets a lower
bound as soon as the module has decided the cycle before, which is all a
controller that looks at the cycle needs. The module decides cycle ``t``
once every channel's events before ``t`` are known, which holds when every
controller waits: every answer is at least a cycle old when the other side
uses it (a command taken in ``a`` is visible from ``a + 1``; a FIFO's room
in ``t`` counts pops before ``t``).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.config import HubConfig
from golden.hub.module import Hub
from golden.hub.multicast import Emission
from golden.hub.ports import READS, WRITES, Response
from golden.isa import HostOp, HostStatus
from golden.streams import RDATA_POP_LATENCY, Command, RunResult, Streams

#: the player's first call is accepted in this module cycle
FIRST_CALL = 0


class _Stop(BaseException):
    """Ends a live channel's thread when its module is closed or dropped."""


class _Process:
    """A channel controller's run on a thread of its own, as a coroutine:
    ``resume`` runs it until it waits (``wait``) or ends."""

    def __init__(self, target, name: str):
        self._go = threading.Semaphore(0)
        self._back = threading.Semaphore(0)
        self.cond = lambda: True  # may resume when this holds
        self.done = self.stopped = False
        self.error: BaseException | None = None
        self.result = None
        self._thread = threading.Thread(target=self._main, args=(target,), name=name,
                                        daemon=True)
        self._thread.start()

    def _main(self, target) -> None:
        self._go.acquire()
        try:
            if not self.stopped:
                self.result = target()
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            self.error = e
        finally:
            self.done = True
            self._back.release()

    def wait(self, cond) -> None:
        """(In the process.) Give control back until ``cond()`` holds."""
        self.cond = cond
        self._back.release()
        self._go.acquire()
        if self.stopped:
            raise _Stop

    def runnable(self) -> bool:
        return not self.done and self.cond()

    def resume(self) -> None:
        """(In the caller.) Run the process until it waits or ends."""
        self._go.release()
        self._back.acquire()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        if not self.done:
            self.stopped = True
            self._go.release()
            self._back.acquire()


class LiveStreams(Streams):
    """A channel's streams as the module runs: commands and write beats
    appear as the multicast register's offers are taken, read beats leave
    as the HUB pops them (``Fabric``)."""

    def __init__(self, fabric: Fabric, channel: int):
        super().__init__(fabric.hub.channel, [], [], None, None, None)
        self.fabric, self.channel = fabric, channel
        self.rdata_pops: list[int] = []
        self.cmd_pops: list[int] = []  # cycle each command left the command FIFO
        self.wdata_pops: list[int] = []  # cycle each write beat left its FIFO
        self.closed = False
        self.proc: _Process | None = None
        self.waiting_now: int | None = None  # the cycle of a bounded query it waits in

    def _wait(self, cond, now: int | None) -> None:
        """Wait until ``cond()``; ``now``: the cycle the controller asks in
        (the module may decide every cycle before it without this answer)."""
        self.waiting_now = now
        self.proc.wait(cond)
        self.waiting_now = None

    def _decided_before(self, now: int | None) -> bool:
        """The module has decided every cycle before ``now``."""
        return now is not None and self.fabric.decided >= now - 1

    def _bound(self) -> int:
        return self.fabric.decided + 1

    def more(self, i: int) -> bool:
        return i < len(self.commands) or not self.closed

    def command(self, i: int) -> Command | None:
        if i >= len(self.commands) and not self.closed:
            self._wait(lambda: i < len(self.commands) or self.closed, None)
        return self.commands[i] if i < len(self.commands) else None

    def arrival(self, i: int, now: int | None = None) -> int | None:
        while True:
            if i < len(self.cmd_arrivals):
                return self.cmd_arrivals[i]
            if self.closed:
                return None
            if self._decided_before(now):
                return self._bound()
            self._wait(lambda: i < len(self.cmd_arrivals) or self.closed
                       or self._decided_before(now), now)

    def popped(self, i: int, cycle: int) -> None:
        self.cmd_pops.append(cycle)

    def wdata_ready(self, now: int | None = None) -> int:
        k = self.wbeat
        while k >= len(self.wdata_arrivals):
            if self.closed:
                raise ValueError(f"channel {self.channel}: a command needs write-data beat {k} "
                                 f"but the module has closed")
            if self._decided_before(now):
                return self._bound() + 1
            self._wait(lambda: k < len(self.wdata_arrivals) or self.closed
                       or self._decided_before(now), now)
        return self.wdata_arrivals[k] + 1

    def take_wdata(self, cycle: int | None = None) -> tuple[int, np.ndarray]:
        self.wdata_pops.append(cycle)
        return super().take_wdata()

    def read_credit_ready(self, now: int | None = None) -> int:
        j = len(self.read_issue) - self.config.rdata_depth
        if j < 0:
            return 0
        while j >= len(self.rdata_pops):
            if self._decided_before(now):
                return self._bound() + 1
            self._wait(lambda: j < len(self.rdata_pops) or self._decided_before(now), now)
        return self.rdata_pops[j] + 1


@dataclass
class Register:
    """The multicast register's content while it is held."""

    emission: Emission
    beat: int | None  # the write beat, read from the GPR when it loaded
    cmd_taken: set = field(default_factory=set)
    beat_taken: set = field(default_factory=set)


class Fabric:
    """The multicast register's handshakes with the live channels and the
    read beats' return, decided cycle by cycle (module docstring)."""

    def __init__(self, hub: Hub):
        self.h = weakref.proxy(hub)  # the HUB's finalizer stops the threads
        self.hub: HubConfig = hub.hub
        n = self.hub.n_channels
        self.streams = [LiveStreams(self, c) for c in range(n)]
        self.procs: list[_Process] = []
        for c, (model, s) in enumerate(zip(hub.channels, self.streams, strict=True)):
            s.proc = _Process(lambda m=model, s=s: m.run_streams(s), f"channel{c}")
            self.procs.append(s.proc)
        self.decided = -1  # every cycle through this one is decided
        self.reg: Register | None = None
        self.freed = -1  # the cycle the register was last freed (its last take)
        #: per channel: (GPR word, dropped) of each read command taken whose
        #: beat has not come back
        self.dest: list[deque] = [deque() for _ in range(n)]
        self.gpr_writes: deque = deque()  # (cycle, word, lanes) of popped beats
        self.last_pop = -1
        #: every load of the register: (cycle, command word, mask, discard)
        self.loads: list[tuple[int, int, int, int]] = []
        self.acc: list[list[int]] = [s.cmd_arrivals for s in self.streams]
        self.wacc: list[list[int]] = [s.wdata_arrivals for s in self.streams]
        self.pops: list[list[int]] = [s.rdata_pops for s in self.streams]
        self.results: list[RunResult] | None = None
        #: the write beat (or None) of each load not yet delivered (``TimedHub._deliver``)
        self.beats: deque = deque()

    # ---- the channels' side ------------------------------------------------
    def _settle(self) -> None:
        """Run every channel whose wait is over until none is."""
        progressed = True
        while progressed:
            progressed = False
            for p in self.procs:
                if p.runnable():
                    p.resume()
                    progressed = True

    # ---- the module's side -------------------------------------------------
    @staticmethod
    def _room_from(taken: list[int], popped: list[int], depth: int, t: int) -> int | None:
        """The first cycle from ``t`` a FIFO has room, from the pops known
        (None: it waits for a pop not yet known)."""
        first = bisect.bisect_left(popped, t)
        need = len(taken) - first - depth  # pops from t on before there is room
        if need < 0:
            return t
        return popped[first + need] + 1 if first + need < len(popped) else None

    def _earliest(self, t: int) -> int:
        """The first cycle from ``t`` in which the HUB can do anything, as
        far as the channels' known events tell: a FIFO with room for the
        register's offer, a read beat to pop; no later than the cycle
        before one a waiting controller asks in (its answer may make more
        happen). ``t`` when it cannot tell."""
        cfg, best = self.hub.channel, None
        for s in self.streams:
            for x in ((s.waiting_now - 1) if s.waiting_now is not None else None,
                      (s.read_issue[len(s.rdata_pops)] + RDATA_POP_LATENCY
                       if len(s.rdata_pops) < len(s.read_issue) else None)):
                if x is not None:
                    best = x if best is None else min(best, x)
        reg = self.reg
        if reg is not None:
            e = reg.emission
            start = max(t, e.cycle + 1)
            write = e.command.opcode in WRITES
            for c, s in enumerate(self.streams):
                if not e.ch_mask >> c & 1:
                    continue
                for free, fifo in ((c not in reg.cmd_taken,
                                    (s.cmd_arrivals, s.cmd_pops, cfg.cmd_depth)),
                                   (write and c not in reg.beat_taken,
                                    (s.wdata_arrivals, s.wdata_pops, cfg.wdata_depth))):
                    if free:
                        x = self._room_from(*fifo, start)
                        if x is None:
                            continue
                        best = x if best is None else min(best, x)
        return t if best is None else max(t, best)

    def _cycle(self, limit: float = float("inf")) -> None:
        """Decide the next cycle in which anything can happen, or ``limit``
        if that comes first (the cycles before it decided with nothing in
        them)."""
        self._settle()
        self.decided = int(min(self._earliest(self.decided + 1), limit)) - 1
        t = self.decided + 1
        cfg = self.hub.channel
        reg = self.reg
        if reg is not None and reg.emission.cycle < t:
            e = reg.emission
            read, write = e.command.opcode in READS, e.command.opcode in WRITES
            done = True
            for c, s in enumerate(self.streams):
                if not e.ch_mask >> c & 1:
                    continue
                if c not in reg.cmd_taken and self._room_from(
                        s.cmd_arrivals, s.cmd_pops, cfg.cmd_depth, t) == t:
                    s.commands.append(e.command)
                    s.cmd_arrivals.append(t)
                    reg.cmd_taken.add(c)
                    if read:
                        self.dest[c].append((e.gpr + c, e.discard))
                if write and c not in reg.beat_taken and self._room_from(
                        s.wdata_arrivals, s.wdata_pops, cfg.wdata_depth, t) == t:
                    s.wdata.append(reg.beat)
                    s.wdata_arrivals.append(t)
                    reg.beat_taken.add(c)
                done &= c in reg.cmd_taken and (not write or c in reg.beat_taken)
            if done:
                self.reg, self.freed = None, t
        for c, s in enumerate(self.streams):  # one read beat a cycle, lowest channel first
            j = len(s.rdata_pops)
            if j < len(s.read_issue) and s.read_issue[j] + RDATA_POP_LATENCY <= t:
                s.rdata_pops.append(t)
                word, dropped = self.dest[c].popleft()
                if not dropped:
                    self.gpr_writes.append((t, word, numerics.words_to_lanes(s.rdata[j])))
                self.last_pop = t
                break
        self.decided = t

    def _gpr_sync(self, before: float = float("inf")) -> None:
        """Write the popped beats into the GPR (those popped before ``before``)."""
        while self.gpr_writes and self.gpr_writes[0][0] < before:
            _, word, lanes = self.gpr_writes.popleft()
            self.h.gpr[word] = lanes

    def run_until(self, t: int) -> None:
        """Decide every cycle through ``t``. With the register free and no
        read beat to come, nothing happens at the HUB until then: those
        cycles are decided at once (a controller asking gets its bound)."""
        if self.reg is None and not any(self.dest):
            self.decided = max(self.decided, t)
        while self.decided < t:
            self._cycle(t)

    def busy(self) -> bool:
        """The register holds a command or a read beat is still to come."""
        return self.reg is not None or any(self.dest)

    def drain(self) -> int:
        """Decide cycles until the register is free and every read beat is
        in the GPR; return the first cycle that holds in (the HUB's
        ``drained``)."""
        while self.busy():
            self._cycle()
        self._gpr_sync()
        return max(self.freed, self.last_pop) + 1

    def accept(self, k: int, load: int) -> int:
        """``Multicast.load``'s ``accept``: load the HUB's offer (``Hub.offer``)
        in cycle ``load``; return the cycle its last channel takes it."""
        if self.reg is not None:
            raise RuntimeError(f"emission {k} loads into a held register")
        self.run_until(load - 1)
        self._gpr_sync(load)
        e = self.h.offer
        e = Emission(load, e.request, e.ch_mask, e.command, e.gpr, e.discard, e.decoded)
        beat = (numerics.lanes_to_word(self.h.gpr[e.gpr]) if e.command.opcode in WRITES
                else None)
        self.reg = Register(e, beat)
        self.loads.append((load, e.command.pack(), e.ch_mask, int(e.discard)))
        self.beats.append(beat)
        while self.reg is not None:
            self._cycle()
        return self.freed

    def landed(self, k: int) -> int:
        """``Decoder``'s ``landed``: every read beat taken so far is in the
        GPR from the returned cycle (-1: none was ever read)."""
        while any(self.dest):
            self._cycle()
        self._gpr_sync()
        return self.last_pop + 1 if self.last_pop >= 0 else -1

    def close(self) -> list[RunResult]:
        """End the streams and run every channel to its end (the module
        keeps popping read beats); return each channel's run."""
        if self.results is None:
            for s in self.streams:
                s.closed = True
            while not all(p.done for p in self.procs):
                self._settle()
                if not all(p.done for p in self.procs):
                    self._cycle()
            self._gpr_sync()
            self.results = [p.result for p in self.procs]
        return self.results

    def stop(self) -> None:
        """End every channel's thread (the module is dropped unfinished)."""
        for p in self.procs:
            p.stop()


@dataclass
class CallTiming:
    accepted: int  # the cycle the host operation was accepted
    responded: int  # the cycle the host popped its response


class TimedHub(Hub):
    """The golden HUB with its channels live (``Fabric``): every host call
    is timed as the RTL module, driven by the player of tb/hub_play.v.in,
    takes it. ``timings`` holds each call's accept and response cycles;
    ``close`` ends the session (each channel runs to its end) and returns
    the channels' runs."""

    def __init__(self, hub: HubConfig, strict: bool = False):
        super().__init__(hub, strict)
        self.fabric = Fabric(self)
        self._finalizer = weakref.finalize(self, Fabric.stop, self.fabric)
        self.timings: list[CallTiming] = []  # per host call
        self.responses: list[tuple[int, int]] = []  # (code, data) of each call
        self.next_call = FIRST_CALL  # the cycle the next host call is accepted

    def host(self, op: int, req_id: int = 0, arg_a: int = 0, arg_b: int = 0,
             data: int = 0, accept=None, cycle: int = 0, landed=None) -> Response:
        """One host call, accepted in ``next_call`` (``Hub.host``; the
        timing arguments are the module's own here)."""
        a = self.next_call
        f = self.fabric
        if op == HostOp.STEP:
            rsp = super().host(op, req_id, arg_a, arg_b, data, accept=f.accept, cycle=a,
                               landed=f.landed)
            r = a
            if rsp.code == HostStatus.OK:
                r = max(self.last_step.decode_end, f.drain())
        elif op == HostOp.RAW:
            rsp = super().host(op, req_id, arg_a, arg_b, data)
            r = a if rsp.code != HostStatus.OK else max(a + 1, f.drain())
        else:
            rsp = super().host(op, req_id, arg_a, arg_b, data)
            r = a
            if rsp.code == HostStatus.OK and op == HostOp.GPR_READ:
                r = a + 1
            elif op == HostOp.PROG_COMMIT and rsp.code != HostStatus.BAD_ARG:
                r = a + 1 + self.ibuf.walked
        self.timings.append(CallTiming(a, r + 1))
        self.responses.append((int(rsp.code), rsp.data))
        self.next_call = r + 2
        return rsp

    def _raw(self, ch_mask, gpr, data) -> Response:
        emission = self.raw_emission(ch_mask, gpr, data)
        if emission is None:
            return Response(HostStatus.BAD_ARG)
        self.offer = emission
        self.fabric.accept(0, self.next_call)
        self.send([emission])
        return Response(HostStatus.OK)

    def _deliver(self, emissions: list[Emission]) -> None:
        """The channels already run the emissions live: only the history."""
        for e in emissions:
            beat = self.fabric.beats.popleft()
            for c, st in enumerate(self.streams):
                if e.ch_mask >> c & 1:
                    st.append((e.command, beat))

    def close(self) -> list[RunResult]:
        """End the session: every channel runs to its end."""
        return self.fabric.close()
