"""One PIM channel with the static in-order controller (DESIGN.md §2.1, §3).

The specification is ``golden.channel`` (its docstring lists the issue
rules); this module implements it cycle for cycle. Structure::

    cmd ──► cmd FIFO ──► decode/check ──► controller ──► trace (id, kind, cycle)
    wdata ─► wdata FIFO ──────────────┘        │
                                   issue (c)   ▼
              GBuf / bank memories: sync read ports, addressed in cycle c
                                   stage 1 (c + 1): MAC tree -> OBuf,
                                   RD / RD-OUT beat -> rdata FIFO ──► rdata

Timing constraints are down-counters that reach zero when the constraint is
met (tRAS, tRCD, tRP per bank; tCCD and the static gap per channel).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import ChannelConfig
from golden.isa import (
    COMMAND_FIELDS,
    FIELDS,
    LANES,
    STATUS_FIELDS,
    TRACE_FIELDS,
    WORD_BITS,
    ErrorCode,
    Opcode,
    layout_widths,
)
from hw.fp import f32_to_bf16, mac_tree

CommandLayout = data.StructLayout(layout_widths(COMMAND_FIELDS))
TraceLayout = data.StructLayout(layout_widths(TRACE_FIELDS))
#: A valid/payload stream with no ready: the trace may not stall the channel.
TraceSignature = wiring.Signature({"valid": Out(1), "payload": Out(TraceLayout)})
StatusLayout = data.StructLayout(layout_widths(STATUS_FIELDS))


def select(index, items):
    """``items[index]`` as a mux chain: no incomplete case for item counts
    that are not a power of two (an index past the end gives item 0)."""
    out = items[0]
    for i, item in enumerate(items[1:], start=1):
        out = Mux(index == i, item, out)
    return out


class Channel(wiring.Component):
    """A PIM channel: GBuf, B banks with 16-lane BF16 MACs, per-bank OBuf.

    Parameters
    ----------
    config : golden.config.ChannelConfig
        Geometry, buffer depths and timing; the same object parameterises
        the golden model.

    Members
    -------
    cmd : In(stream.Signature(CommandLayout))
        Channel commands (``golden.isa.COMMAND_FIELDS``).
    wdata : In(stream.Signature(256))
        One 32 B beat per WR-INP and WR, in command order.
    rdata : Out(stream.Signature(256))
        One 32 B beat per RD and RD-OUT, in command order.
    trace : Out(TraceSignature)
        Every issued command (including the implicit PRE/ACT): ID, opcode,
        cycle. Observation only: it cannot stall the channel.
    status : Out(StatusLayout)
        Sticky first error code and its command ID, and the error count.
    err_clear : In(1)
        Clears the sticky error and the count.
    cycle : Out(32)
        Controller cycle counter since reset (the trace's time base).
    """

    def __init__(self, config: ChannelConfig):
        if not isinstance(config, ChannelConfig):
            raise TypeError(f"config must be a ChannelConfig, not {config!r}")
        if config.policy != "static":
            raise ValueError(f"hw.Channel implements policy 'static' only, not "
                             f"{config.policy!r}; the golden model has the others")
        self.config = config
        super().__init__({
            "cmd": In(stream.Signature(CommandLayout)),
            "wdata": In(stream.Signature(WORD_BITS)),
            "rdata": Out(stream.Signature(WORD_BITS)),
            "trace": Out(TraceSignature),
            "status": Out(StatusLayout),
            "err_clear": In(1),
            "cycle": Out(FIELDS["cycle"].width),
        })

    def elaborate(self, platform):
        cfg, tm = self.config, self.config.timing
        B = cfg.banks
        m = Module()

        m.submodules.cmd_fifo = cmd_fifo = fifo.SyncFIFO(width=CommandLayout.size,
                                                         depth=cfg.cmd_depth)
        m.submodules.wdata_fifo = wdata_fifo = fifo.SyncFIFO(width=WORD_BITS,
                                                             depth=cfg.wdata_depth)
        m.submodules.rdata_fifo = rdata_fifo = fifo.SyncFIFO(width=WORD_BITS,
                                                             depth=cfg.rdata_depth)
        m.d.comb += [
            cmd_fifo.w_data.eq(self.cmd.payload), cmd_fifo.w_en.eq(self.cmd.valid),
            self.cmd.ready.eq(cmd_fifo.w_rdy),
            wdata_fifo.w_data.eq(self.wdata.payload), wdata_fifo.w_en.eq(self.wdata.valid),
            self.wdata.ready.eq(wdata_fifo.w_rdy),
            self.rdata.payload.eq(rdata_fifo.r_data), self.rdata.valid.eq(rdata_fifo.r_rdy),
            rdata_fifo.r_en.eq(self.rdata.ready),
        ]
        m.d.sync += self.cycle.eq(self.cycle + 1)

        # ---- decode and check the head command -------------------------
        head = data.View(CommandLayout, cmd_fifo.r_data)
        op = head.opcode
        is_ = {o: Signal(name=f"is_{o.name.lower()}") for o in
               (Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR)}
        m.d.comb += [s.eq(op == o) for o, s in is_.items()]
        is_normal = is_[Opcode.RD] | is_[Opcode.WR]
        is_write = is_[Opcode.WR_INP] | is_[Opcode.WR]
        is_read = is_[Opcode.RD_OUT] | is_[Opcode.RD]
        uses_bank = is_[Opcode.MAC] | is_normal

        err = Signal(FIELDS["err_code"].width)
        # Same priority as golden.channel.ChannelModel.check.
        with m.If(~(is_write | is_read | is_[Opcode.MAC])):
            m.d.comb += err.eq(ErrorCode.BAD_OPCODE)
        with m.Elif(is_normal & (head.bank >= B)):
            m.d.comb += err.eq(ErrorCode.BANK_RANGE)
        with m.Elif(uses_bank & (head.row >= cfg.rows)):
            m.d.comb += err.eq(ErrorCode.ROW_RANGE)
        with m.Elif(uses_bank & (head.col >= cfg.cols)):
            m.d.comb += err.eq(ErrorCode.COL_RANGE)
        with m.Elif((is_[Opcode.WR_INP] | is_[Opcode.MAC]) & (head.gbuf_idx >= cfg.gbuf_entries)):
            m.d.comb += err.eq(ErrorCode.GBUF_RANGE)
        with m.Elif((is_[Opcode.MAC] | is_[Opcode.RD_OUT]) & (head.out_idx >= cfg.obuf_entries)):
            m.d.comb += err.eq(ErrorCode.OBUF_RANGE)

        # ---- controller state ------------------------------------------
        def counter(limit, name):
            return Signal(range(max(limit, 2)), name=name)

        open_ = Signal(B)
        open_row = [Signal(range(max(2, cfg.rows)), name=f"open_row{b}") for b in range(B)]
        ras = [counter(tm.t_ras, f"ras_cnt{b}") for b in range(B)]
        rcd = [counter(tm.t_rcd, f"rcd_cnt{b}") for b in range(B)]
        rp = [counter(tm.t_rp, f"rp_cnt{b}") for b in range(B)]
        max_gap = max(tm.t_wr_inp, tm.t_mac, tm.t_rd_out, tm.t_ccd, 1)
        gap = counter(max_gap, "gap_cnt")
        ccd = counter(tm.t_ccd, "ccd_cnt")
        outstanding = Signal(range(cfg.rdata_depth + 1))
        head_id = Signal(FIELDS["cmd_id"].width)

        for cnt in [*ras, *rcd, *rp, gap, ccd]:
            with m.If(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)

        # Banks the head command touches, and what it needs next.
        bank_onehot = Signal(B)
        m.d.comb += bank_onehot.eq(Const(1, B) << head.bank[:max(1, (B - 1).bit_length())])
        touched = Signal(B)
        m.d.comb += touched.eq(Mux(is_[Opcode.MAC], (1 << B) - 1,
                                   Mux(is_normal, bank_onehot, 0)))
        row_hit = Signal(B)
        m.d.comb += row_hit.eq(Cat(open_[b] & (open_row[b] == head.row) for b in range(B)))
        pre_mask = Signal(B)
        with m.If(is_[Opcode.MAC]):
            # any bank off the row: precharge every open bank
            m.d.comb += pre_mask.eq(Mux((row_hit & touched) != touched, open_, 0))
        with m.Else():
            m.d.comb += pre_mask.eq(touched & open_ & ~row_hit)
        act_mask = Signal(B)
        m.d.comb += act_mask.eq(touched & ~open_)

        def all_zero(cnts, mask):
            return Cat((~mask[b]) | (cnts[b] == 0) for b in range(B)).all()

        pre_ok = all_zero(ras, pre_mask)
        act_ok = all_zero(rp, act_mask)
        col_ok = all_zero(rcd, touched) & ((touched == 0) | (ccd == 0))
        data_ok = (~is_write | wdata_fifo.r_rdy) & (~is_read | (outstanding < cfg.rdata_depth))

        do_pre, do_act, do_col, do_drop = (Signal(name=n) for n in
                                           ("do_pre", "do_act", "do_col", "do_drop"))
        with m.If(cmd_fifo.r_rdy):
            with m.If(err != 0):
                m.d.comb += do_drop.eq(~is_write | wdata_fifo.r_rdy)
            with m.Elif(gap == 0):
                with m.If(pre_mask != 0):
                    m.d.comb += do_pre.eq(pre_ok)
                with m.Elif(act_mask != 0):
                    m.d.comb += do_act.eq(act_ok)
                with m.Else():
                    m.d.comb += do_col.eq(col_ok & data_ok)

        pop = do_col | do_drop
        m.d.comb += [cmd_fifo.r_en.eq(pop), wdata_fifo.r_en.eq(pop & is_write)]
        with m.If(pop):
            m.d.sync += head_id.eq(head_id + 1)

        # ---- issue: state updates and the trace -------------------------
        issued = do_pre | do_act | do_col
        kind = Signal(FIELDS["opcode"].width)
        m.d.comb += kind.eq(Mux(do_pre, Opcode.PRE, Mux(do_act, Opcode.ACT, op)))
        m.d.comb += [
            self.trace.valid.eq(issued),
            self.trace.payload.cmd_id.eq(head_id),
            self.trace.payload.opcode.eq(kind),
            self.trace.payload.cycle.eq(self.cycle),
        ]
        with m.If(do_pre):
            m.d.sync += [open_.eq(open_ & ~pre_mask), gap.eq(0)]
            for b in range(B):
                with m.If(pre_mask[b]):
                    m.d.sync += rp[b].eq(tm.t_rp - 1)
        with m.If(do_act):
            m.d.sync += [open_.eq(open_ | act_mask), gap.eq(0)]
            for b in range(B):
                with m.If(act_mask[b]):
                    m.d.sync += [open_row[b].eq(head.row), ras[b].eq(tm.t_ras - 1),
                                 rcd[b].eq(tm.t_rcd - 1)]
        with m.If(do_col):
            gap_after = Const(0, gap.shape())
            for o, sel in is_.items():
                gap_after = Mux(sel, tm.gap(o) - 1, gap_after)
            m.d.sync += gap.eq(gap_after)
            with m.If(uses_bank):
                m.d.sync += ccd.eq(tm.t_ccd - 1)

        read_issue = do_col & is_read
        read_pop = rdata_fifo.r_en & rdata_fifo.r_rdy
        m.d.sync += outstanding.eq(outstanding + read_issue - read_pop)

        # ---- errors -----------------------------------------------------
        with m.If(self.err_clear):
            m.d.sync += [self.status.err_code.eq(0), self.status.err_count.eq(0)]
        with m.Elif(do_drop):
            with m.If(self.status.err_code == ErrorCode.NONE):
                m.d.sync += [self.status.err_code.eq(err), self.status.err_id.eq(head_id)]
            with m.If(self.status.err_count != (1 << FIELDS["err_count"].width) - 1):
                m.d.sync += self.status.err_count.eq(self.status.err_count + 1)

        # ---- datapath ---------------------------------------------------
        addr = Signal(range(max(2, cfg.rows * cfg.cols)))
        m.d.comb += addr.eq(head.row * cfg.cols + head.col)
        m.submodules.gbuf = gbuf = memory.Memory(shape=WORD_BITS, depth=cfg.gbuf_entries, init=[])
        gbuf_w, gbuf_r = gbuf.write_port(), gbuf.read_port()
        m.d.comb += [gbuf_w.addr.eq(head.gbuf_idx), gbuf_w.data.eq(wdata_fifo.r_data),
                     gbuf_w.en.eq(do_col & is_[Opcode.WR_INP]), gbuf_r.addr.eq(head.gbuf_idx),
                     gbuf_r.en.eq(do_col & is_[Opcode.MAC])]
        # Read ports only read for the command that needs them: the MAC trees
        # then see stable inputs between MACs (less simulator activity).
        bank_read = do_col & (is_[Opcode.MAC] | is_[Opcode.RD])
        bank_data = []
        for b in range(B):
            mem = memory.Memory(shape=WORD_BITS, depth=cfg.rows * cfg.cols, init=[])
            m.submodules[f"bank{b}"] = mem
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(addr), w.data.eq(wdata_fifo.r_data),
                         w.en.eq(do_col & is_[Opcode.WR] & (head.bank == b)), r.addr.eq(addr),
                         r.en.eq(bank_read)]
            bank_data.append(r.data)

        # stage 1: the cycle after issue, when the read ports deliver
        s1_mac, s1_rd_out, s1_rd = Signal(), Signal(), Signal()
        s1_out = Signal(range(max(2, cfg.obuf_entries)))  # never zero-width
        s1_bank = Signal(range(max(2, B)))
        m.d.sync += [s1_mac.eq(do_col & is_[Opcode.MAC]), s1_rd_out.eq(do_col & is_[Opcode.RD_OUT]),
                     s1_rd.eq(do_col & is_[Opcode.RD]), s1_out.eq(head.out_idx),
                     s1_bank.eq(head.bank)]

        obuf = [[Signal(32, name=f"obuf{e}_bank{b}") for b in range(B)]
                for e in range(cfg.obuf_entries)]
        acc = [select(s1_out, [obuf[e][b] for e in range(cfg.obuf_entries)]) for b in range(B)]

        def lanes(word):
            return [word[16 * i:16 * (i + 1)] for i in range(LANES)]

        mac_out = [mac_tree(m, lanes(bank_data[b]), lanes(gbuf_r.data), acc[b], name=f"mac{b}")
                   for b in range(B)]
        rd_out_word = Cat(*[f32_to_bf16(m, acc[b], name=f"rdout{b}") for b in range(B)],
                          Const(0, 16 * (LANES - B)))
        for e in range(cfg.obuf_entries):
            with m.If(s1_out == e):
                for b in range(B):
                    with m.If(s1_mac):
                        m.d.sync += obuf[e][b].eq(mac_out[b])
                    with m.If(s1_rd_out):
                        m.d.sync += obuf[e][b].eq(0)
        m.d.comb += [
            rdata_fifo.w_en.eq(s1_rd_out | s1_rd),
            rdata_fifo.w_data.eq(Mux(s1_rd_out, rd_out_word, select(s1_bank, bank_data))),
        ]
        return m
