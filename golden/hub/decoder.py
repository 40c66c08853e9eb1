"""The HUB's decoder (twin of ``hw/hub/decoder.py``): the walk of one STEP
over every active request's program, in cycles. Dyn-Loop repeats its body,
Dyn-Modi offsets one field of one body word per iteration, the sequencer
(``golden.hub.sequencer``) makes each command, which is pushed into the
decoded-command FIFO and loaded into the multicast register
(``golden.hub.multicast``); a faulting command stops its request and the
decoder drains the dirty OBuf entries."""

from __future__ import annotations

from collections.abc import Callable

from golden.hub.multicast import Emission, Multicast
from golden.hub.ports import DpaFault
from golden.hub.sequencer import command
from golden.isa import Fault, ModiField, Opcode, unpack_instruction
from golden.streams import Command


class Decoder:
    """The decoder walking the program for one step of ``hub`` (a
    ``golden.hub.Hub``: its instruction buffer, configuration buffer and
    dirty OBuf entries)."""

    def __init__(self, hub, accept: Callable[[int, int], int]):
        self.h = hub
        self.multicast = Multicast(accept)
        self.emissions: list[Emission] = []
        self.error: DpaFault | None = None

    def emit(self, t: int, req: int | None, mask: int, cmd: Command, gpr: int,
             discard: bool = False) -> int:
        """Push a command in the first cycle from ``t`` with room in the
        decoded-command FIFO; return the decoder's next cycle."""
        k, depth = len(self.emissions), self.h.hub.decode_depth
        e = t if k < depth else max(t, self.emissions[k - depth].cycle + 1)
        load = self.multicast.load(k, e + 1)
        self.emissions.append(Emission(load, req, mask, cmd, gpr, discard, e))
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
                        try:
                            h.cbuf.fault(req, fault, msg)
                        except DpaFault as e:
                            self.error = e
                        return self._drain(t + 1)
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
