"""The HUB's host interface (specification: ``golden.hub.module``,
``Hub.host``): it accepts one host operation at a time and answers each
with one response from the response register.

PROG-WRITE, GPR-WRITE and GPR-READ it serves itself (the instruction
buffer's and the GPR's host ports); ASSIGN, GROW, RELEASE, STATUS and
CLEAR go to the configuration buffer, which answers in the same cycle;
PROG-COMMIT and STEP start the decoder and are answered when it is done (a
STEP once every command has also left the multicast register and every
read beat has come back: ``drained``); a RAW command that passes the
channel's checks loads the multicast register at once and is answered when
it has drained."""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.hub import STEP_MASK_BITS
from golden.isa import HostOp, HostStatus
from hw.controller import OpDecode, command_error
from hw.hub.cbuf import ConfigBuffer
from hw.hub.ports import (
    HostLayout,
    ResponseLayout,
    commit_signature,
    config_port,
    decoder_control,
    gpr_read_port,
    gpr_write_port,
    program_write_port,
    raw_signature,
)
from hw.streams import CommandLayout


class HostInterface(wiring.Component):
    """Members
    -------
    host : In(stream.Signature(HostLayout)), rsp : Out(stream.Signature(ResponseLayout))
        The PIM module's host streams.
    prog_write : In(WritePort.Signature), prog_commit : Out(commit_signature)
        The instruction buffer.
    config : Out(config_port)
        The configuration buffer.
    gpr_rd : In(ReadPort.Signature), gpr_wr : In(WritePort.Signature)
        The GPR's host ports.
    decoder : Out(decoder_control)
        The decoder.
    raw : Out(raw_signature)
        The multicast register.
    drained : In(1)
        No command in the decoded-command FIFO or the multicast register,
        no read beat still to come back.
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        super().__init__({
            "host": In(stream.Signature(HostLayout)),
            "rsp": Out(stream.Signature(ResponseLayout)),
            "prog_write": In(program_write_port(hub)),
            "prog_commit": Out(commit_signature(hub)),
            "config": Out(config_port(hub)),
            "gpr_rd": In(gpr_read_port(hub)), "gpr_wr": In(gpr_write_port(hub)),
            "decoder": Out(decoder_control(hub)),
            "raw": Out(raw_signature(hub.n_channels)),
            "drained": In(1),
        })

    def elaborate(self, platform):
        hub = self.hub
        N, R = hub.n_channels, hub.requests
        m = Module()
        hp, dec = self.host.payload, self.decoder

        # ---- the response register -------------------------------------
        rsp_load = Signal()
        rsp_code = Signal.like(self.rsp.payload.rsp_code)
        rsp_data = Signal.like(self.rsp.payload.data)
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

        # ---- what each operation drives --------------------------------
        raw_cmd = data.View(CommandLayout, hp.data[:CommandLayout.size])
        raw_op = OpDecode(m, raw_cmd.opcode, "raw")
        raw_err = command_error(m, hub.channel, raw_cmd, raw_op, "raw_err")
        m.d.comb += [self.config.payload.eq(hp), self.prog_write.addr.eq(hp.arg_a),
                     self.prog_write.data.eq(hp.data), self.prog_commit.length.eq(hp.arg_a),
                     self.prog_commit.tokens_per_chunk.eq(hp.arg_b),
                     self.gpr_wr.addr.eq(hp.arg_a), self.gpr_wr.data.eq(hp.data),
                     self.raw.payload.cmd.eq(raw_cmd), self.raw.payload.mask.eq(hp.arg_a),
                     self.raw.payload.gpr.eq(hp.arg_b), dec.skip.eq(hp.data[:R])]

        def prog_write():
            m.d.comb += self.prog_write.en.eq(1)
            respond(HostStatus.OK)

        def prog_commit():
            m.d.comb += [self.prog_commit.en.eq(1), dec.commit.eq(1)]
            m.next = "COMMIT"

        def step():
            m.d.comb += dec.step.eq(1)
            m.next = "STEP"

        def gpr_write():
            m.d.comb += self.gpr_wr.en.eq(1)
            respond(HostStatus.OK)

        def gpr_read():
            m.d.comb += [self.gpr_rd.addr.eq(hp.arg_a), self.gpr_rd.en.eq(1)]
            m.next = "GPR_RSP"

        def raw():
            m.d.comb += self.raw.valid.eq(1)
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
                            m.d.comb += self.config.valid.eq(1)
                            respond(self.config.rsp_code, self.config.rsp_data)
                        with m.Case(HostOp.STEP):  # data: the requests it skips
                            check((hp.data >> R) == 0, step)
                        with m.Case(HostOp.RAW):
                            check((raw_err == 0) & (hp.arg_a != 0) & ((hp.arg_a >> N) == 0)
                                  & (gpr_top < hub.gpr_entries), raw)
                        with m.Default():
                            respond(HostStatus.BAD_OP)

            with m.State("GPR_RSP"):
                respond(HostStatus.OK, self.gpr_rd.data)
                m.next = "IDLE"

            with m.State("COMMIT"):  # the decoder's commit walk
                with m.If(dec.done):
                    respond(dec.rsp_code, dec.rsp_data)
                    m.next = "IDLE"

            with m.State("STEP"):  # the decoder walks every active request
                with m.If(dec.done):
                    m.next = "STEP_DRAIN"

            with m.State("STEP_DRAIN"):
                with m.If(self.drained):
                    m.d.comb += self.config.advance.eq(dec.ran)
                    respond(HostStatus.OK, Cat(dec.ran, Const(0, STEP_MASK_BITS - R), dec.faulted))
                    m.next = "IDLE"

            with m.State("RAW_DRAIN"):
                with m.If(self.drained):
                    respond(HostStatus.OK)
                    m.next = "IDLE"
        return m
