"""The HUB's multicast register and read-beat return (specification:
``golden.hub``, ``Emission`` and ``Hub._send``).

The register loads one decoded command per cycle at most, from the decoded
command FIFO or (in IDLE) a host RAW command, and holds it until every
channel in its mask has taken it: the command and, for WR-INP and WR, the
write beat read from the GPR when the command loaded. Each channel takes
it on its own handshake. A read command is offered to a channel only while
that channel's destination FIFO has room: read beats come back per channel
in issue order, and the FIFO holds each beat's GPR word (``gpr + c``) and
whether it is dropped (the fault drain). Beats return to the GPR one per
cycle, lowest channel first. ``settled``: the register is free and every
read beat of every command taken is in the GPR (a count of the beats
still to come), which is when the decoder may start the EPU."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import WORD_BITS
from hw.controller import OpDecode
from hw.hub.ports import entry_layout, gpr_read_port, gpr_write_port, raw_signature
from hw.streams import CommandLayout


class Multicast(wiring.Component):
    """Members
    -------
    entry : In(stream.Signature(entry_layout))
        The decoded-command FIFO's head.
    raw : In(raw_signature)
        A host RAW command to load now (the host interface sends it only
        while the register is empty).
    cmd, wdata : Out(stream.Signature).array(n_channels)
        Per channel: commands and write beats.
    rdata : In(stream.Signature).array(n_channels)
        Per channel: read beats.
    gpr_rd, gpr_wr, gpr_wr_busy :
        The GPR's multicast read port and read-beat write port (``hw.hub.gpr``).
    busy, pending : Out(1)
        The register holds a command; read beats are still to come back.
    settled : Out(1)
        The register is free (or its last channel takes it now) and no
        read beat is due: none outstanding, none taken this cycle.
    loaded, held, cmd_acc, wdata_acc, rdata_pop : Out
        For the testbenches: the register loads this cycle, what it holds,
        and per channel the command, write-beat and read-beat handshakes.
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        n, entry = hub.n_channels, entry_layout(hub.n_channels)
        super().__init__({
            "entry": In(stream.Signature(entry)),
            "raw": In(raw_signature(n)),
            "cmd": Out(stream.Signature(CommandLayout)).array(n),
            "wdata": Out(stream.Signature(WORD_BITS)).array(n),
            "rdata": In(stream.Signature(WORD_BITS)).array(n),
            "gpr_rd": In(gpr_read_port(hub)), "gpr_wr": In(gpr_write_port(hub)),
            "gpr_wr_busy": Out(1),
            "busy": Out(1), "pending": Out(1), "settled": Out(1),
            "loaded": Out(1), "held": Out(entry),
            "cmd_acc": Out(n), "wdata_acc": Out(n), "rdata_pop": Out(n),
        })

    def elaborate(self, platform):
        hub = self.hub
        cfg, N = hub.channel, hub.n_channels
        m = Module()

        # ---- the register -------------------------------------------------
        reg = Signal(entry_layout(N), name="mc")
        valid = Signal(name="mc_valid")
        cmd_taken, w_taken = Signal(N, name="mc_cmd_taken"), Signal(N, name="mc_w_taken")
        op = OpDecode(m, reg.cmd.opcode, "mc")
        cmd_acc, w_acc, done = Signal(N), Signal(N), Signal(N)
        depth = cfg.cmd_depth + cfg.io_depth + cfg.compute_depth + cfg.rdata_depth + 4
        dests = []
        gpr_bits = len(reg.gpr)
        for c in range(N):
            dest = fifo.SyncFIFOBuffered(width=gpr_bits + 1, depth=depth)
            m.submodules[f"dest{c}"] = dest
            dests.append(dest)
            cmd, wdata = self.cmd[c], self.wdata[c]
            m.d.comb += [
                cmd.payload.eq(reg.cmd),
                cmd.valid.eq(valid & reg.mask[c] & ~cmd_taken[c] & (~op.read | dest.w_rdy)),
                wdata.payload.eq(self.gpr_rd.data),
                wdata.valid.eq(valid & reg.mask[c] & op.write & ~w_taken[c]),
                cmd_acc[c].eq(cmd.valid & cmd.ready),
                w_acc[c].eq(wdata.valid & wdata.ready),
                done[c].eq(~reg.mask[c] | ((cmd_taken[c] | cmd_acc[c])
                                           & (~op.write | w_taken[c] | w_acc[c]))),
                dest.w_en.eq(cmd_acc[c] & op.read),
                dest.w_data.eq(Cat((reg.gpr + c)[:gpr_bits], reg.discard)),
            ]
        free = Signal()
        m.d.comb += [free.eq(~valid | done.all()), self.busy.eq(valid), self.held.eq(reg),
                     self.cmd_acc.eq(cmd_acc), self.wdata_acc.eq(w_acc)]

        # ---- loading: a host RAW first, else the decoded FIFO's head --------
        load = Signal()
        ld = Signal.like(reg)
        m.d.comb += [load.eq(self.raw.valid | (self.entry.valid & free)),
                     self.entry.ready.eq(~self.raw.valid & free),
                     ld.eq(Mux(self.raw.valid, self.raw.payload, self.entry.payload)),
                     self.loaded.eq(load), self.gpr_rd.addr.eq(ld.gpr), self.gpr_rd.en.eq(load)]
        with m.If(load):
            m.d.sync += [valid.eq(1), reg.eq(ld), cmd_taken.eq(0), w_taken.eq(0)]
        with m.Elif(valid & done.all()):
            m.d.sync += valid.eq(0)
        with m.Else():
            m.d.sync += [cmd_taken.eq(cmd_taken | cmd_acc), w_taken.eq(w_taken | w_acc)]

        # ---- read beats -> GPR (lowest channel first) -----------------------
        grant = Signal(N)
        m.d.comb += self.pending.eq(Cat(d.r_rdy for d in dests).any())
        taken = Const(0)
        for c, dest in enumerate(dests):
            rdata = self.rdata[c]
            m.d.comb += grant[c].eq(rdata.valid & dest.r_rdy & ~taken)
            taken = taken | (rdata.valid & dest.r_rdy)
            m.d.comb += [rdata.ready.eq(grant[c]), dest.r_en.eq(grant[c])]
        m.d.comb += [self.rdata_pop.eq(grant), self.gpr_wr_busy.eq(grant.any())]

        # ---- beats due: + one per read command taken, - one per beat popped
        due = Signal(range(N * depth + 1), name="beats_due")
        reads_taken = Signal(range(N + 1))
        m.d.comb += reads_taken.eq(sum(Mux(op.read, cmd_acc[c], 0) for c in range(N)))
        m.d.sync += due.eq(due + reads_taken - grant.any())
        m.d.comb += self.settled.eq(free & (due == 0) & (reads_taken == 0))
        for c in reversed(range(N)):
            with m.If(grant[c]):
                head = dests[c].r_data
                m.d.comb += [self.gpr_wr.addr.eq(head[:gpr_bits]),
                             self.gpr_wr.data.eq(self.rdata[c].payload),
                             self.gpr_wr.en.eq(~head[gpr_bits])]
        return m
