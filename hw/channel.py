"""One PIM channel and its controller (DESIGN.md §2.1, §2.2, §3).

The specification is ``golden.channel`` (static and ping-pong) and
``golden.dcs`` (Dynamic Command Scheduling); their docstrings list the
issue rules, and this module implements them cycle for cycle. Structure
(each block a component or a named part of this one)::

    cmd ──► cmd FIFO ──► check ──► controller ──────────► trace (id, kind, cycle)
    wdata ─► wdata FIFO ─────────────┘ │ in order: the FIFO head issues
             (hw/streams.py)           │ dcs: decode (D-Table) -> compute / I/O
                                       │      queues -> issue (S-Table)
                                       │ banks: open rows, tRAS/tRCD/tRP/tCCD/tFAW
                                       │        (hw/banks.py BankTiming)
                                issue (c)
              datapath (hw/datapath.py): GBuf / bank memories, sync read
              ports addressed in cycle c; stage 1 (c + 1): MAC tree -> OBuf,
              RD / RD-OUT beat -> rdata FIFO ──► rdata

Timing constraints are down-counters that reach zero when the constraint is
met (tRAS, tRCD, tRP per bank; tCCD per channel; the static gap per buffer
half; the S-Table completion and tCCD counters per buffer entry). At most
one command issues per cycle under every policy, so the datapath is shared:
its effects happen in issue order, as in the golden model.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from golden.config import ChannelConfig
from golden.isa import (
    FIELDS,
    WORD_BITS,
    ErrorCode,
    Opcode,
)
from hw.controller import InOrderController
from hw.datapath import Datapath
from hw.dcs import DcsController
from hw.streams import (
    ID_BITS,
    CommandLayout,
    stream_fifos,
    stream_ports,
)

#: A DCS queue entry: the command, its ID, its dependency IDs (valid + ID) on
#: the GBuf and OBuf entries it touches, and the discard flag of a rejected
#: write whose beat must still be consumed in stream order.
EntryLayout = data.StructLayout({
    "cmd": CommandLayout, "cmd_id": ID_BITS, "discard": 1,
    "dg_valid": 1, "dg_id": ID_BITS, "do_valid": 1, "do_id": ID_BITS,
})


class Channel(wiring.Component):
    """A PIM channel: GBuf, B banks with 16-lane BF16 MACs, per-bank OBuf.

    Parameters
    ----------
    config : golden.config.ChannelConfig
        Geometry, buffer depths, timing and controller policy (``static``,
        ``pingpong`` or ``dcs``); the same object parameterises the golden
        model.

    Members
    -------
    cmd : In(stream.Signature(CommandLayout))
        Channel commands (``golden.isa.COMMAND_FIELDS``).
    wdata : In(stream.Signature(256))
        One 32 B beat per WR-INP and WR, in command order.
    rdata : Out(stream.Signature(256))
        One 32 B beat per RD and RD-OUT, in issue order.
    trace : Out(TraceSignature)
        Every issued command (including the implicit PRE/ACT): ID, opcode,
        cycle. Observation only: it cannot stall the channel.
    status : Out(StatusLayout)
        Sticky first error code and its command ID, and the error count.
    err_clear : In(1)
        Clears the sticky error and the count.
    cycle : Out(32)
        Controller cycle counter since reset (the trace's time base).
    slice_rows : In(range(rows)), dual-path channels only
        Rows of each bank's first partition, set before a run and held
        (0: unsliced, a conventional bank); ``ChannelConfig.slice_rows`` in
        the golden model.
    """

    def __init__(self, config: ChannelConfig, datapath: bool = True):
        if not isinstance(config, ChannelConfig):
            raise TypeError(f"config must be a ChannelConfig, not {config!r}")
        self.config = config
        #: False: the controller only (write beats dropped, read beats zero);
        #: the formal harness checks control, and this keeps its model small.
        self.datapath = datapath
        super().__init__({
            **stream_ports(CommandLayout),
            **({"slice_rows": In(range(config.rows))} if config.dual_path else {}),
        })

    def elaborate(self, platform):
        cfg = self.config
        m = Module()

        cmd_fifo, wdata_fifo, rdata_fifo = stream_fifos(
            m, self, CommandLayout.size, WORD_BITS if self.datapath else 1)

        # The controller and its interface to the rest of the channel.
        next_id = Signal(ID_BITS)  # ID of the command at the FIFO head
        with m.If(cmd_fifo.r_en):
            m.d.sync += next_id.eq(next_id + 1)
        outstanding = Signal(range(cfg.rdata_depth + 1))
        ctrl = DcsController(cfg) if cfg.policy == "dcs" else InOrderController(cfg)
        m.submodules.controller = ctrl
        m.d.comb += [ctrl.head.eq(cmd_fifo.r_data), ctrl.head_valid.eq(cmd_fifo.r_rdy),
                     ctrl.head_id.eq(next_id), cmd_fifo.r_en.eq(ctrl.head_pop),
                     ctrl.wbeat_valid.eq(wdata_fifo.r_rdy), wdata_fifo.r_en.eq(ctrl.wbeat_pop),
                     ctrl.credit.eq(outstanding < cfg.rdata_depth)]
        if cfg.dual_path:
            m.d.comb += ctrl.slice_rows.eq(self.slice_rows)
        if cfg.policy == "dcs":
            #: Internal nets the formal harness (tb/formal.py) observes.
            self.probes = {k: getattr(ctrl, k)
                           for k in ("compute_count", "io_count", "pop_compute", "pop_io")}
        iss = ctrl.issue

        # ---- the trace ----------------------------------------------------
        m.d.comb += [
            self.trace.valid.eq(iss.mode | iss.pre | iss.act | iss.col | iss.ref),
            self.trace.payload.cmd_id.eq(iss.cmd_id),
            self.trace.payload.opcode.eq(Mux(iss.ref, Opcode.REF, Mux(iss.mode, Opcode.MODE, Mux(
                iss.pre, Opcode.PRE, Mux(iss.act, Opcode.ACT, iss.cmd.opcode))))),
            self.trace.payload.cycle.eq(self.cycle),
        ]
        read_issue = iss.col & (iss.rd_out | iss.rd)
        read_pop = rdata_fifo.r_en & rdata_fifo.r_rdy
        m.d.sync += outstanding.eq(outstanding + read_issue - read_pop)

        # ---- errors -------------------------------------------------------
        with m.If(self.err_clear):
            m.d.sync += [self.status.err_code.eq(0), self.status.err_count.eq(0)]
        with m.Elif(iss.err):
            with m.If(self.status.err_code == ErrorCode.NONE):
                m.d.sync += [self.status.err_code.eq(iss.err_code),
                             self.status.err_id.eq(next_id)]
            with m.If(self.status.err_count != (1 << FIELDS["err_count"].width) - 1):
                m.d.sync += self.status.err_count.eq(self.status.err_count + 1)

        if self.datapath:
            m.submodules.datapath = dp = Datapath(cfg)
            m.d.comb += [dp.col.eq(iss.col), dp.cmd.eq(iss.cmd), dp.wbeat.eq(wdata_fifo.r_data),
                         dp.wr_inp.eq(iss.wr_inp), dp.mac.eq(iss.mac), dp.rd_out.eq(iss.rd_out),
                         dp.rd.eq(iss.rd), dp.wr.eq(iss.wr),
                         rdata_fifo.w_en.eq(dp.rbeat_valid), rdata_fifo.w_data.eq(dp.rbeat)]
        else:  # read beats still enter the FIFO the cycle after issue
            m.d.sync += rdata_fifo.w_en.eq(read_issue)
        return m
