"""The HUB's global register file (GPR): 32 B words that hold the queries
the host writes and the scores the channels' read beats bring back
(specification: ``golden.hub``, ``Hub.gpr``).

One memory with two read ports, one for the multicast register (the write
beat of a WR-INP or WR, read when the command loads) and one for the host
(GPR-READ), and one write port shared by the channels' read beats and the
host's GPR-WRITE. A read beat takes the write port first: while one holds
it (``beat_busy``) a host write waits, and a dropped beat (the fault drain)
holds it without writing."""

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
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        rd, wr = gpr_read_port(hub), gpr_write_port(hub)
        super().__init__({"beat_rd": Out(rd), "host_rd": Out(rd), "beat_wr": Out(wr),
                          "beat_busy": In(1), "host_wr": Out(wr)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=WORD_BITS, depth=self.hub.gpr_entries,
                                               init=[])
        wiring.connect(m, wiring.flipped(self.beat_rd), mem.read_port())
        wiring.connect(m, wiring.flipped(self.host_rd), mem.read_port())
        wr = mem.write_port()
        with m.If(self.beat_busy):
            m.d.comb += [wr.addr.eq(self.beat_wr.addr), wr.data.eq(self.beat_wr.data),
                         wr.en.eq(self.beat_wr.en)]
        with m.Else():
            m.d.comb += [wr.addr.eq(self.host_wr.addr), wr.data.eq(self.host_wr.data),
                         wr.en.eq(self.host_wr.en)]
        return m
