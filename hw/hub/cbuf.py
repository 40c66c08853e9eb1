"""The HUB's configuration buffer (specification: ``golden.hub``, the host
operations and ``Hub.translate``): per request its state, fault, T_cur,
GPR base, chunk count and VA2PA table (virtual chunk -> physical chunk).

The host changes it with ASSIGN, GROW, RELEASE and CLEAR and reads it with
STATUS, each answered in the cycle it is accepted; the decoder reads one
request at a time through ``lookup`` (and translates through its VA2PA
table) and records faults; a finished STEP advances T_cur of every request
that ran."""

from amaranth import Array, Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from golden.config import HubConfig
from golden.isa import FIELDS, Fault, HostOp, HostStatus, ReqState
from hw.hub.ports import Sizes, config_port, request_port


class ConfigBuffer(wiring.Component):
    """Members
    -------
    host : In(config_port)
        The host interface's port (``hw.hub.ports.config_port``): a host
        operation of ``OPS`` accepted this cycle and its response in the
        same cycle; T_cur advances at a STEP's end.
    lookup : In(request_port)
        The decoder's port (``hw.hub.ports.request_port``).
    """

    OPS = (HostOp.ASSIGN, HostOp.GROW, HostOp.RELEASE, HostOp.STATUS, HostOp.CLEAR)

    def __init__(self, hub: HubConfig):
        self.hub = hub
        super().__init__({"host": In(config_port(hub)), "lookup": In(request_port(hub))})

    def elaborate(self, platform):
        hub = self.hub
        s, R = Sizes(hub), hub.requests
        m = Module()

        def regs(width, name, n=1 << s.req_bits):
            return Array(Signal(width, name=f"{name}{r}") for r in range(n))

        st = regs(FIELDS["req_state"].width, "state")
        flt = regs(FIELDS["fault"].width, "fault")
        tcur = regs(FIELDS["t_cur"].width, "t_cur")
        gbase = regs(FIELDS["gpr_base"].width, "gpr_base")
        nch = regs(FIELDS["n_chunks"].width, "n_chunks")
        va2pa = Array(regs(s.pchunk, f"va2pa{r}_", 1 << s.chunk_bits)
                      for r in range(1 << s.req_bits))

        # ---- the decoder's port -------------------------------------------
        lk = self.lookup
        m.d.comb += [lk.state.eq(st[lk.req]), lk.t_cur.eq(tcur[lk.req]),
                     lk.gpr_base.eq(gbase[lk.req]), lk.n_chunks.eq(nch[lk.req]),
                     lk.pchunk.eq(va2pa[lk.req][lk.vchunk])]
        with m.If(lk.set_fault):
            m.d.sync += [st[lk.req].eq(ReqState.FAULTED), flt[lk.req].eq(lk.fault_code)]
        for r in range(R):
            with m.If(self.host.advance[r]):
                m.d.sync += tcur[r].eq(tcur[r] + 1)

        # ---- host operations ----------------------------------------------
        hp = self.host.payload
        hr = hp.req_id[:s.req_bits]
        req_ok = hp.req_id < R

        def respond(code, value=0):
            m.d.comb += [self.host.rsp_code.eq(code), self.host.rsp_data.eq(value)]

        with m.If(self.host.valid):
            with m.Switch(hp.host_op):
                with m.Case(HostOp.ASSIGN):
                    with m.If(req_ok & (st[hr] == ReqState.FREE) & (hp.arg_b < hub.gpr_entries)):
                        m.d.sync += [st[hr].eq(ReqState.ACTIVE), flt[hr].eq(0),
                                     tcur[hr].eq(hp.arg_a), gbase[hr].eq(hp.arg_b),
                                     nch[hr].eq(0)]
                        respond(HostStatus.OK)
                    with m.Else():
                        respond(HostStatus.BAD_ARG)
                with m.Case(HostOp.GROW):
                    with m.If(~req_ok | (st[hr] == ReqState.FREE)
                              | (hp.arg_a >= hub.physical_chunks)):
                        respond(HostStatus.BAD_ARG)
                    with m.Elif(nch[hr] == hub.chunks_per_request):
                        m.d.sync += [st[hr].eq(ReqState.FAULTED), flt[hr].eq(Fault.TABLE_FULL)]
                        respond(HostStatus.FAULT, Fault.TABLE_FULL)
                    with m.Else():
                        m.d.sync += [va2pa[hr][nch[hr][:s.chunk_bits]].eq(hp.arg_a),
                                     nch[hr].eq(nch[hr] + 1)]
                        respond(HostStatus.OK)
                with m.Case(HostOp.RELEASE):
                    with m.If(req_ok):
                        m.d.sync += [st[hr].eq(ReqState.FREE), flt[hr].eq(0), tcur[hr].eq(0),
                                     gbase[hr].eq(0), nch[hr].eq(0)]
                        respond(HostStatus.OK)
                    with m.Else():
                        respond(HostStatus.BAD_ARG)
                with m.Case(HostOp.STATUS):
                    with m.If(req_ok):
                        respond(HostStatus.OK, Cat(st[hr], flt[hr], tcur[hr], nch[hr]))
                    with m.Else():
                        respond(HostStatus.BAD_ARG)
                with m.Case(HostOp.CLEAR):
                    with m.If(req_ok):
                        with m.If(st[hr] == ReqState.FAULTED):
                            m.d.sync += [st[hr].eq(ReqState.ACTIVE), flt[hr].eq(0)]
                        respond(HostStatus.OK)
                    with m.Else():
                        respond(HostStatus.BAD_ARG)
        return m
