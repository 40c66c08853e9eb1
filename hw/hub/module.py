"""The PIM module: the HUB over N channels (DESIGN.md §2.1, §2.3;
docs/dpa.md, docs/architecture.md).

The specification is ``golden.hub`` (its docstring lists the program
format, the sequencer's address rules, translation, faults and the cycle
timing); the blocks implement it cycle for cycle::

    host ──► host interface ──┬── instruction buffer (ibuf.py)
       ◄── (host.py)          ├── configuration buffer + VA2PA (cbuf.py)
                              ├── GPR (gpr.py) ◄── EPU (epu.py)
                              └── decoder (decoder.py, sequencer.py) ──► EPU
                                      │ decoded-command FIFO
                                      ▼
                              multicast register (multicast.py) ──► channel c cmd / wdata
                                                                ◄── channel c rdata ─► GPR

This module only instantiates the blocks and connects their ports; the
host interface (``host.py``) answers the host.
"""

from amaranth import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import FIELDS, WORD_BITS
from hw.channel import Channel
from hw.hub.cbuf import ConfigBuffer
from hw.hub.decoder import Decoder
from hw.hub.epu import Epu
from hw.hub.gpr import Gpr
from hw.hub.host import HostInterface
from hw.hub.ibuf import InstructionBuffer
from hw.hub.multicast import Multicast
from hw.hub.ports import HostLayout, ResponseLayout, entry_layout
from hw.streams import CommandLayout, TraceSignature


class PimModule(wiring.Component):
    """HUB + ``n_channels`` channels.

    Members
    -------
    host : In(stream.Signature(HostLayout))
        Host operations (``golden.isa.HostOp``); one at a time: the next is
        accepted after the previous one's response.
    rsp : Out(stream.Signature(ResponseLayout))
        One response per operation (``HostStatus`` and data).
    trace_<c> : Out(TraceSignature)
        Channel ``c``'s issue trace.
    cycle : Out(32)
        Cycle counter since reset (all channels share it).
    dbg_load : Out(1)
        The multicast register loads a command this cycle.
    dbg_cmd, dbg_mask, dbg_discard : Out
        The multicast register: command, channel mask, drain flag.
    dbg_cmd_acc, dbg_wdata_acc, dbg_rdata_pop : Out(n_channels)
        Per channel: command, write beat or read beat handshake this cycle.
    cmd_<c>, wdata_<c> : Out(stream.Signature), ``channels=False`` only
        Channel ``c``'s command and write-beat streams, in place of the
        channel (and of ``trace_<c>``).
    rdata_<c> : In(stream.Signature(256)), ``channels=False`` only
        Channel ``c``'s read beats.

    ``channels=False`` builds the HUB alone, its channel ports brought out:
    ``make synth`` (``sim/synth.py``) counts the HUB's cells this way.
    ``cycle`` then stays 0 (the channels count the cycles).
    """

    def __init__(self, hub: HubConfig, channels: bool = True):
        if not isinstance(hub, HubConfig):
            raise TypeError(f"hub must be a HubConfig, not {hub!r}")
        self.hub = hub
        self.channels = channels
        n = hub.n_channels
        members = {
            "host": In(stream.Signature(HostLayout)),
            "rsp": Out(stream.Signature(ResponseLayout)),
            "cycle": Out(FIELDS["cycle"].width),
            "dbg_load": Out(1), "dbg_cmd": Out(CommandLayout), "dbg_mask": Out(n),
            "dbg_discard": Out(1),
            "dbg_cmd_acc": Out(n), "dbg_wdata_acc": Out(n), "dbg_rdata_pop": Out(n),
        }
        for c in range(n):
            if channels:
                members[f"trace_{c}"] = Out(TraceSignature)
            else:
                members.update({f"cmd_{c}": Out(stream.Signature(CommandLayout)),
                                f"wdata_{c}": Out(stream.Signature(WORD_BITS)),
                                f"rdata_{c}": In(stream.Signature(WORD_BITS))})
        super().__init__(members)

    def elaborate(self, platform):
        hub = self.hub
        N = hub.n_channels
        m = Module()
        m.submodules.ibuf = ibuf = InstructionBuffer(hub)
        m.submodules.cbuf = cbuf = ConfigBuffer(hub)
        m.submodules.gpr = gpr = Gpr(hub)
        m.submodules.decoder = dec = Decoder(hub)
        m.submodules.decoded = dq = fifo.SyncFIFO(width=entry_layout(N).size,
                                                  depth=hub.decode_depth)
        m.submodules.multicast = mc = Multicast(hub)
        wiring.connect(m, dec.program, ibuf.program)
        wiring.connect(m, dec.lookup, cbuf.lookup)
        wiring.connect(m, mc.gpr_rd, gpr.beat_rd)
        wiring.connect(m, mc.gpr_wr, gpr.beat_wr)
        if hub.epu:  # started by the decoder once settled; the GPR's ports while busy
            m.submodules.epu = epu = Epu(hub)
            wiring.connect(m, dec.epu, epu.ctrl)
            wiring.connect(m, epu.rd, gpr.epu_rd)
            wiring.connect(m, epu.wr, gpr.epu_wr)
            m.d.comb += [gpr.epu_busy.eq(epu.busy | epu.ctrl.start),
                         dec.settled.eq(mc.settled & ~dq.r_rdy)]
        m.d.comb += [gpr.beat_busy.eq(mc.gpr_wr_busy),
                     dq.w_data.eq(dec.push.payload), dq.w_en.eq(dec.push.valid),
                     dec.push.ready.eq(dq.w_rdy),
                     mc.entry.payload.eq(dq.r_data), mc.entry.valid.eq(dq.r_rdy),
                     dq.r_en.eq(mc.entry.ready)]
        for c in range(N):
            if not self.channels:  # the HUB alone: the channels' streams are ports
                wiring.connect(m, mc.cmd[c], wiring.flipped(getattr(self, f"cmd_{c}")))
                wiring.connect(m, mc.wdata[c], wiring.flipped(getattr(self, f"wdata_{c}")))
                wiring.connect(m, wiring.flipped(getattr(self, f"rdata_{c}")), mc.rdata[c])
                continue
            m.submodules[f"channel{c}"] = ch = Channel(hub.channel)
            wiring.connect(m, mc.cmd[c], ch.cmd)
            wiring.connect(m, mc.wdata[c], ch.wdata)
            wiring.connect(m, ch.rdata, mc.rdata[c])
            wiring.connect(m, wiring.flipped(getattr(self, f"trace_{c}")), ch.trace)
            if c == 0:
                m.d.comb += self.cycle.eq(ch.cycle)
        m.d.comb += [self.dbg_load.eq(mc.loaded), self.dbg_cmd.eq(mc.held.cmd),
                     self.dbg_mask.eq(mc.held.mask), self.dbg_discard.eq(mc.held.discard),
                     self.dbg_cmd_acc.eq(mc.cmd_acc), self.dbg_wdata_acc.eq(mc.wdata_acc),
                     self.dbg_rdata_pop.eq(mc.rdata_pop)]
        m.submodules.host = host = HostInterface(hub)
        wiring.connect(m, wiring.flipped(self.host), host.host)
        wiring.connect(m, host.rsp, wiring.flipped(self.rsp))
        wiring.connect(m, host.prog_write, ibuf.write)
        wiring.connect(m, host.prog_commit, ibuf.commit)
        wiring.connect(m, host.config, cbuf.host)
        wiring.connect(m, host.gpr_rd, gpr.host_rd)
        wiring.connect(m, host.gpr_wr, gpr.host_wr)
        wiring.connect(m, host.decoder, dec.ctrl)
        wiring.connect(m, host.raw, mc.raw)
        m.d.comb += host.drained.eq(~mc.busy & ~mc.pending & ~dq.r_rdy)
        return m
