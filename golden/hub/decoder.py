"""The HUB's decoder (twin of ``hw/hub/decoder.py``): the walk of one STEP
over every active request's program, in cycles. Dyn-Loop repeats its body,
Dyn-Modi offsets one field of one body word per iteration, the sequencer
(``golden.hub.sequencer``) makes each command, which is pushed into the
decoded-command FIFO and loaded into the multicast register
(``golden.hub.multicast``); a faulting command stops its request and the
decoder drains the dirty OBuf entries. An EPU instruction waits until
every command before it has been taken and its read beats are in the GPR,
then holds the decoder while the EPU runs (``golden.hub.epu``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from golden.hub import epu
from golden.hub.multicast import Emission, Multicast
from golden.hub.ports import DpaFault
from golden.hub.sequencer import command
from golden.isa import EPU_OPCODES, Fault, ModiField, Opcode, ReqState, unpack_instruction
from golden.streams import Command


class Decoder:
    """The decoder walking the program for one step of ``hub`` (a
    ``golden.hub.Hub``: its instruction buffer, configuration buffer and
    dirty OBuf entries)."""

    def __init__(self, hub, accept: Callable[[int, int], int],
                 landed: Callable[[int], int] | None = None):
        self.h = hub
        self.multicast = Multicast(accept)
        #: ``landed(k)``: the first cycle every read beat of emissions 0 ..
        #: k-1 is in the GPR (default: as soon as its command is taken)
        self.landed = landed or (lambda k: -1)
        self.emissions: list[Emission] = []
        self.sent = 0  # emissions delivered to the channels (before an EPU instruction)
        self.error: DpaFault | None = None
        #: per EPU instruction run: (request, opcode, first cycle, cycles)
        self.epu_runs: list[tuple[int, Opcode, int, int]] = []

    def emit(self, t: int, req: int | None, mask: int, cmd: Command, gpr: int,
             discard: bool = False) -> int:
        """Push a command in the first cycle from ``t`` with room in the
        decoded-command FIFO; return the decoder's next cycle."""
        k, depth = len(self.emissions), self.h.hub.decode_depth
        e = t if k < depth else max(t, self.emissions[k - depth].cycle + 1)
        # what the register loads next (a timed HUB's channels take it)
        self.h.offer = Emission(-1, req, mask, cmd, gpr, discard, e)
        load = self.multicast.load(k, e + 1)
        self.emissions.append(dataclasses.replace(self.h.offer, cycle=load))
        op = cmd.opcode
        if op == Opcode.MAC:
            self.h.dirty[cmd.out_idx] = True
        elif op == Opcode.RD_OUT:
            self.h.dirty[cmd.out_idx] = False
        return e + 1

    def request(self, req: int, t: int) -> int:
        """Run ``req``'s program from cycle ``t``; return the decoder's next cycle."""
        h = self.h
        r, cols = h.requests[req], h.hub.channel.cols
        program = h.ibuf.program()
        pc = 0
        loop = None  # (body_end, t_div, tok, body_start, modis)
        while pc < len(program):
            op, f = unpack_instruction(program[pc])
            nxt = pc + 1
            if op == Opcode.DYN_LOOP:
                if r.t_cur > 0:
                    loop = {"end": pc + 1 + f["body_len"], "t_div": f["t_div"], "tok": 0,
                            "body0": pc + 1, "start": None, "modis": []}
                else:
                    nxt = pc + 1 + f["body_len"]
                t += 1
            elif op in EPU_OPCODES:
                t = self._epu(req, op, f, t)
                if r.state == ReqState.FAULTED:
                    return t
            elif op == Opcode.DYN_MODI:
                stride = f["stride"] - (1 << 16 if f["stride"] >> 15 else 0)
                if f["field_sel"] == ModiField.ROW:
                    stride *= cols
                loop["modis"].append(
                    [loop["body0"] + f["target"], ModiField(f["field_sel"]), stride, 0])
                t += 1
            else:
                if loop is not None and loop["start"] is None:
                    loop["start"] = pc
                mods = {fs: 0 for fs in ModiField}
                for target, fs, _stride, acc in (loop["modis"] if loop else []):
                    if target == pc:
                        mods[ModiField.ROW if fs == ModiField.COL else fs] += acc
                for u in range(f.get("op_size", 1)):
                    cmd, gpr, fault, msg = command(h.cbuf, req, op, f, u, mods)
                    if fault != Fault.NONE:
                        return self._fault(req, fault, msg, t)
                    t = self.emit(t, req, f["ch_mask"], cmd, gpr)
                if loop is not None and pc == loop["end"] - 1:
                    loop["tok"] += loop["t_div"]
                    for m in loop["modis"]:
                        m[3] += m[2]
                    if loop["tok"] < r.t_cur:
                        nxt = loop["start"]
                    else:
                        loop = None
            pc = nxt
        return t

    def _epu(self, req: int, op: Opcode, f: dict[str, int], t: int) -> int:
        """The EPU instruction ``(op, f)`` of ``req``, visited in cycle ``t``:
        its range check, the wait for the commands before it and their read
        beats, the run; returns the decoder's next cycle."""
        h = self.h
        r = h.requests[req]
        bad = epu.range_fault(h.hub.gpr_entries, r.gpr_base, op, f, r.t_cur)
        if bad:
            return self._fault(req, Fault.CMD_RANGE, f"request {req}: {bad}", t)
        n = epu.cycles(op, r.t_cur, f.get("op_size", 0), f["span"])
        if n == 0:
            return t + 1
        start = max(t + 1, self.multicast.free, self.landed(len(self.emissions)))
        self.flush()
        h.run_epu(req, op, f)
        self.epu_runs.append((req, op, start, n))
        return start + n

    def flush(self) -> None:
        """Deliver the emissions not yet delivered (their data effects)."""
        self.h.send(self.emissions[self.sent:])
        self.sent = len(self.emissions)

    def _fault(self, req: int, code: Fault, message: str, t: int) -> int:
        """``req`` faults (``code``) at the word visited in cycle ``t``:
        recorded (kept as ``error`` in strict mode), then the drain."""
        try:
            self.h.cbuf.fault(req, code, message)
        except DpaFault as e:
            self.error = e
        return self._drain(t + 1)

    def _drain(self, t: int) -> int:
        """After a fault: an RD-OUT to every channel, beats dropped, for each
        dirty OBuf entry (one cycle per entry)."""
        every = (1 << self.h.hub.n_channels) - 1
        for o in range(self.h.hub.channel.obuf_entries):
            if self.h.dirty[o]:
                t = self.emit(t, None, every, Command(Opcode.RD_OUT, out_idx=o), 0, True)
            else:
                t += 1
        return t
