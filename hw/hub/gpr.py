"""The HUB's global register file (GPR): 32 B words that hold the queries
the host writes, the scores the channels' read beats bring back and what
the EPU makes of them (specification: ``golden.hub``, ``Hub.gpr``).

One memory with two read ports, one for the multicast register (the write
beat of a WR-INP or WR, read when the command loads) and one for the host
(GPR-READ), and one write port shared by the channels' read beats and the
host's GPR-WRITE. A read beat takes the write port first: while one holds
it (``beat_busy``) a host write waits, and a dropped beat (the fault drain)
holds it without writing. While the EPU runs (``epu_busy``) it has the
multicast register's read port and the write port: the decoder starts it
only once the register is idle and every read beat is in."""

from amaranth import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import WORD_BITS
from hw.hub.ports import gpr_read_port, gpr_write_port


class Gpr(wiring.Component):
    """Members
    -------
    beat_rd : Out(ReadPort.Signature)
        The multicast register's read port (write beats).
    host_rd : Out(ReadPort.Signature)
        The host's read port (GPR-READ; data the cycle after the address).
    beat_wr : Out(WritePort.Signature)
        Read beats from the channels; ``beat_busy`` marks a beat this cycle,
        ``beat_wr.en`` whether it is written.
    host_wr : Out(WritePort.Signature)
        GPR-WRITE, when no read beat holds the port.
    epu_rd, epu_wr : Out(ReadPort.Signature), Out(WritePort.Signature)
        The EPU's, in place of ``beat_rd`` and ``beat_wr`` while
        ``epu_busy``.
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        rd, wr = gpr_read_port(hub), gpr_write_port(hub)
        super().__init__({"beat_rd": Out(rd), "host_rd": Out(rd), "beat_wr": Out(wr),
                          "beat_busy": In(1), "host_wr": Out(wr),
                          "epu_rd": Out(rd), "epu_wr": Out(wr), "epu_busy": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=WORD_BITS, depth=self.hub.gpr_entries,
                                               init=[])
        shared = mem.read_port()
        m.d.comb += [self.beat_rd.data.eq(shared.data), self.epu_rd.data.eq(shared.data)]
        with m.If(self.epu_busy):
            m.d.comb += [shared.addr.eq(self.epu_rd.addr), shared.en.eq(self.epu_rd.en)]
        with m.Else():
            m.d.comb += [shared.addr.eq(self.beat_rd.addr), shared.en.eq(self.beat_rd.en)]
        wiring.connect(m, wiring.flipped(self.host_rd), mem.read_port())
        wr = mem.write_port()
        with m.If(self.epu_busy):
            m.d.comb += [wr.addr.eq(self.epu_wr.addr), wr.data.eq(self.epu_wr.data),
                         wr.en.eq(self.epu_wr.en)]
        with m.Elif(self.beat_busy):
            m.d.comb += [wr.addr.eq(self.beat_wr.addr), wr.data.eq(self.beat_wr.data),
                         wr.en.eq(self.beat_wr.en)]
        with m.Else():
            m.d.comb += [wr.addr.eq(self.host_wr.addr), wr.data.eq(self.host_wr.data),
                         wr.en.eq(self.host_wr.en)]
        return m
