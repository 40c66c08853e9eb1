"""The stream interface of a channel (specification: ``golden.streams``):
the command, write-data and read-data streams with their FIFOs, the issue
trace, the sticky status and the cycle counter. The PIM channel
(``hw/channel.py``) and the ALU channel (``hw/alu.py``) share it; the
payload layouts come from the encoding table (``golden.isa``)."""

from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.isa import (
    COMMAND_FIELDS,
    FIELDS,
    STATUS_FIELDS,
    TRACE_FIELDS,
    WORD_BITS,
    layout_widths,
)

CommandLayout = data.StructLayout(layout_widths(COMMAND_FIELDS))
TraceLayout = data.StructLayout(layout_widths(TRACE_FIELDS))
#: A valid/payload stream with no ready: the trace may not stall the channel.
TraceSignature = wiring.Signature({"valid": Out(1), "payload": Out(TraceLayout)})
StatusLayout = data.StructLayout(layout_widths(STATUS_FIELDS))
ID_BITS = FIELDS["cmd_id"].width


def stream_ports(cmd_layout) -> dict:
    """The stream interface a channel and the ALU channel share: commands of
    ``cmd_layout``, write and read beats, the trace, the sticky status, its
    clear and the cycle counter."""
    return {
        "cmd": In(stream.Signature(cmd_layout)),
        "wdata": In(stream.Signature(WORD_BITS)),
        "rdata": Out(stream.Signature(WORD_BITS)),
        "trace": Out(TraceSignature),
        "status": Out(StatusLayout),
        "err_clear": In(1),
        "cycle": Out(FIELDS["cycle"].width),
    }


def stream_fifos(m, top, cmd_width, data_width):
    """The command, write-data and read-data FIFOs behind ``top``'s
    ``cmd``/``wdata``/``rdata`` streams (depths from ``top.config``), and
    its ``cycle`` counter."""
    cfg = top.config
    m.submodules.cmd_fifo = cmd_fifo = fifo.SyncFIFO(width=cmd_width, depth=cfg.cmd_depth)
    m.submodules.wdata_fifo = wdata_fifo = fifo.SyncFIFO(width=data_width,
                                                         depth=cfg.wdata_depth)
    m.submodules.rdata_fifo = rdata_fifo = fifo.SyncFIFO(width=data_width,
                                                         depth=cfg.rdata_depth)
    m.d.comb += [
        cmd_fifo.w_data.eq(top.cmd.payload), cmd_fifo.w_en.eq(top.cmd.valid),
        top.cmd.ready.eq(cmd_fifo.w_rdy),
        wdata_fifo.w_data.eq(top.wdata.payload), wdata_fifo.w_en.eq(top.wdata.valid),
        top.wdata.ready.eq(wdata_fifo.w_rdy),
        top.rdata.payload.eq(rdata_fifo.r_data), top.rdata.valid.eq(rdata_fifo.r_rdy),
        rdata_fifo.r_en.eq(top.rdata.ready),
    ]
    m.d.sync += top.cycle.eq(top.cycle + 1)
    return cmd_fifo, wdata_fifo, rdata_fifo
