"""The PIM module: the HUB over N channels (DESIGN.md §2.1, §2.3;
docs/dpa.md, docs/architecture.md).

The specification is ``golden.hub`` (its docstring lists the program
format, the sequencer's address rules, translation, faults and the cycle
timing); the blocks implement it cycle for cycle::

    host ──► host interface ──┬── instruction buffer (ibuf.py)
       ◄── response register  ├── configuration buffer + VA2PA (cbuf.py)
                              ├── GPR (gpr.py)
                              └── decoder (decoder.py, sequencer.py)
                                      │ decoded-command FIFO
                                      ▼
                              multicast register (multicast.py) ──► channel c cmd / wdata
                                                                ◄── channel c rdata ─► GPR

The host interface (this module) accepts one host operation at a time and
answers each with one response: it serves PROG-WRITE, GPR-WRITE and
GPR-READ itself, hands ASSIGN, GROW, RELEASE, STATUS and CLEAR to the
configuration buffer, starts the decoder for PROG-COMMIT and STEP, loads a
RAW command straight into the multicast register, and answers a STEP or a
RAW once every command has left and every read beat has come back.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.hub import STEP_MASK_BITS
from golden.isa import FIELDS, HostOp, HostStatus
from hw.channel import Channel
from hw.controller import OpDecode, command_error
from hw.hub.cbuf import ConfigBuffer
from hw.hub.decoder import Decoder
from hw.hub.gpr import Gpr
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
    """

    def __init__(self, hub: HubConfig):
        if not isinstance(hub, HubConfig):
            raise TypeError(f"hub must be a HubConfig, not {hub!r}")
        self.hub = hub
        n = hub.n_channels
        members = {
            "host": In(stream.Signature(HostLayout)),
            "rsp": Out(stream.Signature(ResponseLayout)),
            "cycle": Out(FIELDS["cycle"].width),
            "dbg_load": Out(1), "dbg_cmd": Out(CommandLayout), "dbg_mask": Out(n),
            "dbg_discard": Out(1),
            "dbg_cmd_acc": Out(n), "dbg_wdata_acc": Out(n), "dbg_rdata_pop": Out(n),
        }
        members.update({f"trace_{c}": Out(TraceSignature) for c in range(n)})
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
        m.d.comb += [gpr.beat_busy.eq(mc.gpr_wr_busy),
                     dq.w_data.eq(dec.push.payload), dq.w_en.eq(dec.push.valid),
                     dec.push.ready.eq(dq.w_rdy),
                     mc.entry.payload.eq(dq.r_data), mc.entry.valid.eq(dq.r_rdy),
                     dq.r_en.eq(mc.entry.ready)]
        for c in range(N):
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
        self._host_interface(m, ibuf, cbuf, gpr, dec, dq, mc)
        return m

    def _host_interface(self, m, ibuf, cbuf, gpr, dec, dq, mc):
        """The host FSM and the response register."""
        hub = self.hub
        N, R = hub.n_channels, hub.requests
        hp = self.host.payload
        rsp_load = Signal()
        rsp_code = Signal(FIELDS["rsp_code"].width)
        rsp_data = Signal(len(self.rsp.payload.data))
        with m.If(rsp_load):
            m.d.sync += [self.rsp.valid.eq(1), self.rsp.payload.rsp_code.eq(rsp_code),
                         self.rsp.payload.data.eq(rsp_data)]
        with m.Elif(self.rsp.ready):
            m.d.sync += self.rsp.valid.eq(0)

        def respond(code, value=0):
            m.d.comb += [rsp_load.eq(1), rsp_code.eq(code), rsp_data.eq(value)]

        def check(cond, then):
            """``then()`` when ``cond``, else answer BAD_ARG."""
            with m.If(cond):
                then()
            with m.Else():
                respond(HostStatus.BAD_ARG)

        raw_cmd = data.View(CommandLayout, hp.data[:CommandLayout.size])
        raw_op = OpDecode(m, raw_cmd.opcode, "raw")
        raw_err = command_error(m, hub.channel, raw_cmd, raw_op, "raw_err")
        m.d.comb += [cbuf.host.payload.eq(hp), ibuf.write.addr.eq(hp.arg_a),
                     ibuf.write.data.eq(hp.data), ibuf.commit.length.eq(hp.arg_a),
                     ibuf.commit.tokens_per_chunk.eq(hp.arg_b),
                     gpr.host_wr.addr.eq(hp.arg_a), gpr.host_wr.data.eq(hp.data),
                     mc.raw.payload.cmd.eq(raw_cmd), mc.raw.payload.mask.eq(hp.arg_a),
                     mc.raw.payload.gpr.eq(hp.arg_b)]

        def prog_write():
            m.d.comb += ibuf.write.en.eq(1)
            respond(HostStatus.OK)

        def prog_commit():
            m.d.comb += [ibuf.commit.en.eq(1), dec.commit.eq(1)]
            m.next = "COMMIT"

        def gpr_write():
            m.d.comb += gpr.host_wr.en.eq(1)
            respond(HostStatus.OK)

        def gpr_read():
            m.d.comb += [gpr.host_rd.addr.eq(hp.arg_a), gpr.host_rd.en.eq(1)]
            m.next = "GPR_RSP"

        def raw():
            m.d.comb += mc.raw.valid.eq(1)
            m.next = "RAW_DRAIN"

        gpr_top = hp.arg_b + Mux(raw_op.read, N - 1, 0)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.host.ready.eq(~self.rsp.valid)
                with m.If(self.host.valid & self.host.ready):
                    with m.Switch(hp.host_op):
                        with m.Case(HostOp.PROG_WRITE):
                            check(hp.arg_a < hub.instr_depth, prog_write)
                        with m.Case(HostOp.PROG_COMMIT):
                            check((hp.arg_a <= hub.instr_depth) & (hp.arg_b != 0), prog_commit)
                        with m.Case(HostOp.GPR_WRITE):
                            check(hp.arg_a < hub.gpr_entries, gpr_write)
                        with m.Case(HostOp.GPR_READ):
                            check(hp.arg_a < hub.gpr_entries, gpr_read)
                        with m.Case(*ConfigBuffer.OPS):
                            m.d.comb += cbuf.host.valid.eq(1)
                            respond(cbuf.rsp_code, cbuf.rsp_data)
                        with m.Case(HostOp.STEP):
                            m.d.comb += dec.step.eq(1)
                            m.next = "STEP"
                        with m.Case(HostOp.RAW):
                            check((raw_err == 0) & (hp.arg_a != 0) & ((hp.arg_a >> N) == 0)
                                  & (gpr_top < hub.gpr_entries), raw)
                        with m.Default():
                            respond(HostStatus.BAD_OP)

            with m.State("GPR_RSP"):
                respond(HostStatus.OK, gpr.host_rd.data)
                m.next = "IDLE"

            with m.State("COMMIT"):  # the decoder's commit walk
                with m.If(dec.done):
                    respond(dec.rsp_code, dec.rsp_data)
                    m.next = "IDLE"

            with m.State("STEP"):  # the decoder walks every active request
                with m.If(dec.done):
                    m.next = "STEP_DRAIN"

            drained = ~mc.busy & ~mc.pending & ~dq.r_rdy
            with m.State("STEP_DRAIN"):
                with m.If(drained):
                    m.d.comb += cbuf.advance.eq(dec.ran)
                    respond(HostStatus.OK,
                            Cat(dec.ran, Const(0, STEP_MASK_BITS - R), dec.faulted))
                    m.next = "IDLE"

            with m.State("RAW_DRAIN"):
                with m.If(drained):
                    respond(HostStatus.OK)
                    m.next = "IDLE"
