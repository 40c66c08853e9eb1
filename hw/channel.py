"""One PIM channel and its controller (DESIGN.md §2.1, §2.2, §3).

The specification is ``golden.channel`` (static and ping-pong) and
``golden.dcs`` (Dynamic Command Scheduling); their docstrings list the
issue rules, and this module implements them cycle for cycle. Structure::

    cmd ──► cmd FIFO ──► check ──► controller ──────────► trace (id, kind, cycle)
    wdata ─► wdata FIFO ─────────────┘ │ in order: the FIFO head issues
                                       │ dcs: decode (D-Table) -> compute / I/O
                                       │      queues -> issue (S-Table)
                                issue (c)
              GBuf / bank memories: sync read ports, addressed in cycle c
                                   stage 1 (c + 1): MAC tree -> OBuf,
                                   RD / RD-OUT beat -> rdata FIFO ──► rdata

Timing constraints are down-counters that reach zero when the constraint is
met (tRAS, tRCD, tRP per bank; tCCD per channel; the static gap per buffer
half; the S-Table completion and tCCD counters per buffer entry). At most
one command issues per cycle under every policy, so the datapath is shared:
its effects happen in issue order, as in the golden model.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import ChannelConfig
from golden.dcs import WINDOW
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
ID_BITS = FIELDS["cmd_id"].width
#: A DCS queue entry: the command, its ID, its dependency IDs (valid + ID) on
#: the GBuf and OBuf entries it touches, and the discard flag of a rejected
#: write whose beat must still be consumed in stream order.
EntryLayout = data.StructLayout({
    "cmd": CommandLayout, "cmd_id": ID_BITS, "discard": 1,
    "dg_valid": 1, "dg_id": ID_BITS, "do_valid": 1, "do_id": ID_BITS,
})


def select(index, items):
    """``items[index]`` as a mux chain: no incomplete case for item counts
    that are not a power of two (an index past the end gives item 0)."""
    out = items[0]
    for i, item in enumerate(items[1:], start=1):
        out = Mux(index == i, item, out)
    return out


class _Op:
    """Opcode decode of one command view."""

    OPS = (Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR, Opcode.ACT_AHEAD)

    def __init__(self, m, opcode, name):
        self.is_ = {o: Signal(name=f"{name}_is_{o.name.lower()}") for o in self.OPS}
        m.d.comb += [s.eq(opcode == o) for o, s in self.is_.items()]
        i = self.is_
        self.wr_inp, self.mac, self.rd_out = i[Opcode.WR_INP], i[Opcode.MAC], i[Opcode.RD_OUT]
        self.normal = i[Opcode.RD] | i[Opcode.WR]
        self.act_ahead = i[Opcode.ACT_AHEAD]
        self.write = i[Opcode.WR_INP] | i[Opcode.WR]
        self.read = i[Opcode.RD_OUT] | i[Opcode.RD]
        self.uses_bank = i[Opcode.MAC] | self.normal
        self.touches_gbuf = i[Opcode.WR_INP] | i[Opcode.MAC]
        self.touches_obuf = i[Opcode.MAC] | i[Opcode.RD_OUT]


def command_error(m, cfg, cmd, op, name):
    """Error code of ``cmd`` (0: good) on a channel of ``cfg``, in the
    priority of ``golden.channel.ChannelModel.check``."""
    err = Signal(FIELDS["err_code"].width, name=name)
    ahead = op.act_ahead if cfg.dual_path else Const(0)  # ACT-AHEAD: dual-path banks only
    with m.If(~(op.write | op.read | op.mac | ahead)):
        m.d.comb += err.eq(ErrorCode.BAD_OPCODE)
    with m.Elif((op.normal | ahead) & (cmd.bank >= cfg.banks)):
        m.d.comb += err.eq(ErrorCode.BANK_RANGE)
    with m.Elif((op.uses_bank | ahead) & (cmd.row >= cfg.rows)):
        m.d.comb += err.eq(ErrorCode.ROW_RANGE)
    with m.Elif(op.uses_bank & (cmd.col >= cfg.cols)):
        m.d.comb += err.eq(ErrorCode.COL_RANGE)
    with m.Elif(op.touches_gbuf & (cmd.gbuf_idx >= cfg.gbuf_entries)):
        m.d.comb += err.eq(ErrorCode.GBUF_RANGE)
    with m.Elif(op.touches_obuf & (cmd.out_idx >= cfg.obuf_entries)):
        m.d.comb += err.eq(ErrorCode.OBUF_RANGE)
    return err


def _counter(limit, name):
    return Signal(range(max(limit, 2)), name=name)


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


def bank_rules(m, B, rows, tm, row, touched, as_set, ccd_every_column=False):
    """Open rows and bank timing (tRAS, tRCD, tRP per bank; tCCD per channel;
    tFAW when ``tm.t_faw``) for a command that touches the banks in mask
    ``touched`` at ``row``: what it needs next (PRE, ACT or the column access)
    and whether the timing allows it now. ``as_set``: the banks open together,
    like the channel's all-bank MAC (if any touched bank is off the row,
    precharge every open touched bank); otherwise each touched bank on its
    own. tCCD separates column accesses to the banks, or with
    ``ccd_every_column`` every column command. ``update`` applies an issue;
    ``choose`` drives the next action. B counts row-buffer units: banks, or
    bank partitions of dual-path banks."""
    open_ = Signal(B)
    open_row = [Signal(range(max(2, rows)), name=f"open_row{b}") for b in range(B)]
    ras = [_counter(tm.t_ras, f"ras_cnt{b}") for b in range(B)]
    rcd = [_counter(tm.t_rcd, f"rcd_cnt{b}") for b in range(B)]
    rp = [_counter(tm.t_rp, f"rp_cnt{b}") for b in range(B)]
    ccd = _counter(tm.t_ccd, "ccd_cnt")
    t_faw = tm.t_faw
    faw = [_counter(t_faw, f"faw_cnt{k}") for k in range(4)] if t_faw else []
    for cnt in [*ras, *rcd, *rp, ccd, *faw]:
        with m.If(cnt != 0):
            m.d.sync += cnt.eq(cnt - 1)

    row_hit = Signal(B)
    m.d.comb += row_hit.eq(Cat(open_[b] & (open_row[b] == row) for b in range(B)))
    pre_mask = Signal(B)
    with m.If(as_set):
        m.d.comb += pre_mask.eq(Mux((row_hit & touched) != touched, open_ & touched, 0))
    with m.Else():
        m.d.comb += pre_mask.eq(touched & open_ & ~row_hit)
    act_mask = Signal(B)
    m.d.comb += act_mask.eq(touched & ~open_)

    def all_zero(cnts, mask):
        return Cat((~mask[b]) | (cnts[b] == 0) for b in range(B)).all()

    class Rules:
        pass

    r = Rules()
    r.pre_mask, r.act_mask, r.touched = pre_mask, act_mask, touched
    r.pre_ok = all_zero(ras, pre_mask)
    # tFAW: the fourth ACT back is t_faw cycles old
    r.act_ok = all_zero(rp, act_mask) & ((faw[3] == 0) if faw else 1)
    ccd_ok = (ccd == 0) if ccd_every_column else ((touched == 0) | (ccd == 0))
    r.col_ok = all_zero(rcd, touched) & ccd_ok
    r.open_ = open_

    def update(do_pre, do_act, do_col):
        with m.If(do_pre):
            m.d.sync += open_.eq(open_ & ~pre_mask)
            for b in range(B):
                with m.If(pre_mask[b]):
                    m.d.sync += rp[b].eq(tm.t_rp - 1)
        with m.If(do_act):
            m.d.sync += open_.eq(open_ | act_mask)
            for b in range(B):
                with m.If(act_mask[b]):
                    m.d.sync += [open_row[b].eq(row), ras[b].eq(tm.t_ras - 1),
                                 rcd[b].eq(tm.t_rcd - 1)]
            if faw:
                m.d.sync += faw[0].eq(t_faw - 1)
                for k in range(1, 4):
                    m.d.sync += faw[k].eq(Mux(faw[k - 1] != 0, faw[k - 1] - 1, 0))
        with m.If(do_col & (1 if ccd_every_column else (touched != 0))):
            m.d.sync += ccd.eq(tm.t_ccd - 1)

    def choose(do_pre, do_act, do_col, col_cond, col_free=None):
        """Drive the next action the command needs: PRE, ACT, or the
        column access once ``col_cond`` also holds (with ``col_free``: at
        once, no column rules: the command ends when its row is open)."""
        with m.If(pre_mask != 0):
            m.d.comb += do_pre.eq(r.pre_ok)
        with m.Elif(act_mask != 0):
            m.d.comb += do_act.eq(r.act_ok)
        with m.Else():
            col = r.col_ok & col_cond
            m.d.comb += do_col.eq(col if col_free is None else Mux(col_free, col_cond, col))

    r.update, r.choose = update, choose
    return r


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

    # ---- pieces shared by every policy ----------------------------------
    def _check(self, m, cmd, op, name):
        return command_error(m, self.config, cmd, op, name)

    def _bank_rules(self, m, cmd, op, enable):
        """Open rows and bank timing for the command that may use the banks
        (``bank_rules``): a MAC touches every bank, RD/WR (ACT-AHEAD) their
        bank. Dual-path banks are two units each, ``b`` (rows below
        ``slice_rows``) and ``B + b`` (the rest); unsliced, only the first."""
        cfg = self.config
        B = cfg.banks
        bank_onehot = Signal(B)
        m.d.comb += bank_onehot.eq(Const(1, B) << cmd.bank[:max(1, (B - 1).bit_length())])
        touched = Signal(B)
        m.d.comb += touched.eq(Mux(enable & op.mac, (1 << B) - 1,
                                   Mux(enable & (op.normal | op.act_ahead), bank_onehot, 0)))
        if not cfg.dual_path:
            return bank_rules(m, B, cfg.rows, cfg.timing, cmd.row, touched, op.mac)
        sliced = Signal()
        upper = Signal()  # the command's row is in the second partition
        m.d.comb += [sliced.eq(self.slice_rows != 0),
                     upper.eq(sliced & (cmd.row >= self.slice_rows))]
        units = Signal(2 * B)
        m.d.comb += units.eq(Mux(upper, Cat(Const(0, B), touched), touched))
        return bank_rules(m, 2 * B, cfg.rows, cfg.timing, cmd.row, units, op.mac)

    def elaborate(self, platform):
        cfg = self.config
        m = Module()

        cmd_fifo, wdata_fifo, rdata_fifo = stream_fifos(
            m, self, CommandLayout.size, WORD_BITS if self.datapath else 1)

        # The controller's interface to the rest of the channel.
        self._next_id = next_id = Signal(ID_BITS)  # ID of the command at the FIFO head
        with m.If(cmd_fifo.r_en):
            m.d.sync += next_id.eq(next_id + 1)
        outstanding = Signal(range(cfg.rdata_depth + 1))
        self._credit = outstanding < cfg.rdata_depth
        self._wbeat = wdata_fifo.r_rdy

        if cfg.policy == "dcs":
            iss = self._dcs(m, cmd_fifo, wdata_fifo)
        else:
            iss = self._in_order(m, cmd_fifo, wdata_fifo)

        # ---- the trace ----------------------------------------------------
        issued = iss.do_pre | iss.do_act | iss.do_col
        m.d.comb += [
            self.trace.valid.eq(issued),
            self.trace.payload.cmd_id.eq(iss.cmd_id),
            self.trace.payload.opcode.eq(Mux(iss.do_pre, Opcode.PRE,
                                             Mux(iss.do_act, Opcode.ACT, iss.cmd.opcode))),
            self.trace.payload.cycle.eq(self.cycle),
        ]
        read_issue = iss.do_col & iss.op.read
        read_pop = rdata_fifo.r_en & rdata_fifo.r_rdy
        m.d.sync += outstanding.eq(outstanding + read_issue - read_pop)

        # ---- errors -------------------------------------------------------
        with m.If(self.err_clear):
            m.d.sync += [self.status.err_code.eq(0), self.status.err_count.eq(0)]
        with m.Elif(iss.err_record):
            with m.If(self.status.err_code == ErrorCode.NONE):
                m.d.sync += [self.status.err_code.eq(iss.err_code),
                             self.status.err_id.eq(next_id)]
            with m.If(self.status.err_count != (1 << FIELDS["err_count"].width) - 1):
                m.d.sync += self.status.err_count.eq(self.status.err_count + 1)

        if self.datapath:
            self._datapath(m, iss, wdata_fifo, rdata_fifo)
        else:  # read beats still enter the FIFO the cycle after issue
            m.d.sync += rdata_fifo.w_en.eq(iss.do_col & iss.op.read)
        return m

    # ---- static and ping-pong: the FIFO head issues, in order ------------
    def _in_order(self, m, cmd_fifo, wdata_fifo):
        cfg, tm = self.config, self.config.timing
        head = data.View(CommandLayout, cmd_fifo.r_data)
        op = _Op(m, head.opcode, "head")
        err = self._check(m, head, op, "head_err")
        banks = self._bank_rules(m, head, op, Const(1))

        # Static gaps per buffer half (static: both halves always).
        max_gap = max(tm.t_wr_inp, tm.t_mac, tm.t_rd_out, tm.t_ccd, 1)
        gaps = [_counter(max_gap, f"gap{h}_cnt") for h in range(2)]
        for g in gaps:
            with m.If(g != 0):
                m.d.sync += g.eq(g - 1)
        halves = Signal(2)
        wait = Signal(2)
        if cfg.policy == "pingpong":
            g_half = Const(1, 2) << (head.gbuf_idx >= cfg.gbuf_entries // 2)
            o_half = Const(1, 2) << (head.out_idx >= cfg.obuf_entries // 2)
            m.d.comb += halves.eq(Mux(op.wr_inp, g_half, Mux(op.mac, g_half | o_half,
                                                                Mux(op.rd_out, o_half, 0b11))))
            mac_half = Signal(2)  # halves of the last MAC (0: none yet)
            handoff = op.mac & (mac_half != 0) & (mac_half != halves)
            m.d.comb += wait.eq(Mux(handoff, 0b11, halves))
        else:
            m.d.comb += [halves.eq(0b11), wait.eq(0b11)]
        gap_ok = Cat(~wait[h] | (gaps[h] == 0) for h in range(2)).all()

        data_ok = (~op.write | self._wbeat) & (~op.read | self._credit)
        do_pre, do_act, do_step, do_drop = (Signal(name=n) for n in
                                            ("do_pre", "do_act", "do_step", "do_drop"))
        with m.If(cmd_fifo.r_rdy):
            with m.If(err != 0):
                m.d.comb += do_drop.eq(~op.write | wdata_fifo.r_rdy)
            with m.Elif(gap_ok):
                banks.choose(do_pre, do_act, do_step, data_ok, col_free=op.act_ahead)
        # ACT-AHEAD ends, untraced, once its row is open; the rest issue
        do_col, do_done = Signal(name="do_col"), Signal(name="do_done")
        m.d.comb += [do_col.eq(do_step & ~op.act_ahead), do_done.eq(do_step & op.act_ahead)]
        banks.update(do_pre, do_act, do_col)

        gap_after = Const(0, gaps[0].shape())
        for o, sel in op.is_.items():
            gap_after = Mux(sel, tm.gap(o) - 1, gap_after)
        for h in range(2):
            with m.If(halves[h] & (do_pre | do_act)):
                m.d.sync += gaps[h].eq(0)
            with m.If(halves[h] & do_col):
                m.d.sync += gaps[h].eq(gap_after)
        if cfg.policy == "pingpong":
            with m.If(do_col & op.mac):
                m.d.sync += mac_half.eq(halves)

        pop = do_col | do_done | do_drop
        m.d.comb += [cmd_fifo.r_en.eq(pop), wdata_fifo.r_en.eq(pop & op.write)]
        return _Issue(do_pre=do_pre, do_act=do_act, do_col=do_col, cmd=head, op=op,
                      cmd_id=self._next_id, err_record=do_drop, err_code=err,
                      open_=banks.open_)

    # ---- Dynamic Command Scheduling ------------------------------------
    def _queue(self, m, depth, name, push, entry, pop):
        """An in-order queue of EntryLayout, head in slot 0 (a shift register)."""
        count = Signal(range(depth + 1), name=f"{name}_count")
        slots = [Signal(EntryLayout, name=f"{name}{k}") for k in range(depth)]
        for k in range(depth):
            with m.If(pop):
                if k + 1 < depth:
                    m.d.sync += slots[k].eq(slots[k + 1])
            with m.If(push & (count - pop == k)):
                m.d.sync += slots[k].eq(entry)
        m.d.sync += count.eq(count + push - pop)
        return count, slots[0]

    def _dcs(self, m, cmd_fifo, wdata_fifo):
        cfg, tm = self.config, self.config.timing
        G, O = cfg.gbuf_entries, cfg.obuf_entries
        next_id = self._next_id

        # D-Table (decode side) and S-Table (issue side), per buffer entry.
        dg_valid = [Signal(name=f"dtab_g{e}_valid") for e in range(G)]
        dg_id = [Signal(ID_BITS, name=f"dtab_g{e}_id") for e in range(G)]
        do_valid = [Signal(name=f"dtab_o{e}_valid") for e in range(O)]
        do_id = [Signal(ID_BITS, name=f"dtab_o{e}_id") for e in range(O)]
        done_max = max(tm.t_wr_inp, tm.t_mac, tm.t_rd_out)
        sg_valid = [Signal(name=f"stab_g{e}_valid") for e in range(G)]
        sg_id = [Signal(ID_BITS, name=f"stab_g{e}_id") for e in range(G)]
        sg_cnt = [_counter(done_max, f"stab_g{e}_cnt") for e in range(G)]
        so_valid = [Signal(name=f"stab_o{e}_valid") for e in range(O)]
        so_id = [Signal(ID_BITS, name=f"stab_o{e}_id") for e in range(O)]
        so_cnt = [_counter(done_max, f"stab_o{e}_cnt") for e in range(O)]
        so_mac = [Signal(name=f"stab_o{e}_mac") for e in range(O)]
        so_ccd = [_counter(tm.t_ccd, f"stab_o{e}_ccd") for e in range(O)]
        for cnt in [*sg_cnt, *so_cnt, *so_ccd]:
            with m.If(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)

        def s_done(idx, gbuf):
            """S-Table at ``idx``: (valid, id, completed)."""
            if gbuf:
                return (select(idx, sg_valid), select(idx, sg_id),
                        select(idx, [c == 0 for c in sg_cnt]))
            return (select(idx, so_valid), select(idx, so_id),
                    select(idx, [c == 0 for c in so_cnt]))

        # ---- issue side: the two queue heads -----------------------------
        push_c, push_io, pop_c, pop_io = (Signal(name=n) for n in
                                          ("push_compute", "push_io", "pop_compute", "pop_io"))
        new_entry = Signal(EntryLayout)
        c_count, ch = self._queue(m, cfg.compute_depth, "compute_q", push_c, new_entry, pop_c)
        io_count, ih = self._queue(m, cfg.io_depth, "io_q", push_io, new_entry, pop_io)
        c_valid, io_valid = c_count != 0, io_count != 0
        io_op = _Op(m, ih.cmd.opcode, "io_head")

        def deps_ok(e, is_mac):
            g_valid, g_id, g_done = s_done(e.cmd.gbuf_idx, True)
            o_valid, o_id, o_done = s_done(e.cmd.out_idx, False)
            o_ccd = select(e.cmd.out_idx, [c == 0 for c in so_ccd])
            o_mac = select(e.cmd.out_idx, so_mac)
            if is_mac:  # MAC after MAC on one OBuf entry: tCCD
                o_done = Mux(o_mac, o_ccd, o_done)
            return ((~e.dg_valid | (g_valid & (g_id == e.dg_id) & g_done)) &
                    (~e.do_valid | (o_valid & (o_id == e.do_id) & o_done)))

        c_deps, io_deps = Signal(), Signal()
        m.d.comb += [c_deps.eq(deps_ok(ch, True)), io_deps.eq(deps_ok(ih, False))]

        # The banks serve the compute head, or an RD/WR at the I/O head (RD/WR
        # are fences: the compute queue is empty while one waits).
        cand = data.View(CommandLayout, Mux(c_valid, ch.cmd.as_value(), ih.cmd.as_value()))
        cand_op = _Op(m, cand.opcode, "bank_cmd")
        banks = self._bank_rules(m, cand, cand_op, c_valid | (io_valid & ~ih.discard))

        c_pre, c_act, c_col = Signal(), Signal(), Signal()
        with m.If(c_valid):
            banks.choose(c_pre, c_act, c_col, c_deps)
        c_issue = c_pre | c_act | c_col

        io_pre, io_act, io_col, io_discard = Signal(), Signal(), Signal(), Signal()
        io_data_ok = (~io_op.write | self._wbeat) & (~io_op.read | self._credit)
        with m.If(io_valid & ~c_issue):
            with m.If(ih.discard):
                m.d.comb += io_discard.eq(self._wbeat)
            with m.Elif(~io_op.normal):  # WR-INP, RD-OUT: no bank
                m.d.comb += io_col.eq(io_deps & io_data_ok)
            with m.Else():  # RD/WR: the banks serve it
                banks.choose(io_pre, io_act, io_col, io_data_ok)

        do_pre, do_act, do_col = (Signal(name=n) for n in ("do_pre", "do_act", "do_col"))
        m.d.comb += [do_pre.eq(c_pre | io_pre), do_act.eq(c_act | io_act),
                     do_col.eq(c_col | io_col)]
        banks.update(do_pre, do_act, c_col | (io_col & io_op.normal))
        iss_entry = data.View(EntryLayout, Mux(c_issue, ch.as_value(), ih.as_value()))
        iss_op = _Op(m, iss_entry.cmd.opcode, "issue")
        m.d.comb += [pop_c.eq(c_col), pop_io.eq(io_col | io_discard),
                     wdata_fifo.r_en.eq((io_col & io_op.write) | io_discard)]

        # ---- decode: the command FIFO head -> a queue --------------------
        head = data.View(CommandLayout, cmd_fifo.r_data)
        op = _Op(m, head.opcode, "head")
        err = self._check(m, head, op, "head_err")
        fence = Signal()
        fence_now = fence & ~(io_col & io_op.normal)  # cleared by the fence's issue
        window_ok = ~((c_valid & (next_id - ch.cmd_id)[ID_BITS - 1]) |
                      (io_valid & (next_id - ih.cmd_id)[ID_BITS - 1]))
        assert WINDOW == 1 << (ID_BITS - 1)
        can = cmd_fifo.r_rdy & ~fence_now & window_ok
        io_room, c_room = io_count < cfg.io_depth, c_count < cfg.compute_depth
        dec_good, dec_bad = Signal(), Signal()
        with m.If(can):
            with m.If(err != 0):
                m.d.comb += dec_bad.eq(~op.write | io_room)
                m.d.comb += push_io.eq(op.write & io_room)
            with m.Elif(op.normal):
                m.d.comb += [dec_good.eq(~c_valid & ~io_valid), push_io.eq(~c_valid & ~io_valid)]
            with m.Elif(op.mac):
                m.d.comb += [dec_good.eq(c_room), push_c.eq(c_room)]
            with m.Else():
                m.d.comb += [dec_good.eq(io_room), push_io.eq(io_room)]
        m.d.comb += cmd_fifo.r_en.eq(dec_good | dec_bad)
        with m.If(dec_good & op.normal):
            m.d.sync += fence.eq(1)
        with m.Elif(io_col & io_op.normal):
            m.d.sync += fence.eq(0)

        # Dependencies: the D-Table's last decoder, unless the S-Table shows
        # it issued and complete; a stale S-Table alias of the new ID is cleared.
        gidx, oidx = head.gbuf_idx, head.out_idx
        dg_cur_valid, dg_cur_id = select(gidx, dg_valid), select(gidx, dg_id)
        do_cur_valid, do_cur_id = select(oidx, do_valid), select(oidx, do_id)
        sgv, sgi, sgd = s_done(gidx, True)
        sov, soi, sod = s_done(oidx, False)
        m.d.comb += [
            new_entry.cmd.eq(head), new_entry.cmd_id.eq(next_id),
            new_entry.discard.eq(err != 0),
            new_entry.dg_valid.eq(op.touches_gbuf & dg_cur_valid &
                                  ~(sgv & (sgi == dg_cur_id) & sgd)),
            new_entry.dg_id.eq(dg_cur_id),
            new_entry.do_valid.eq(op.touches_obuf & do_cur_valid &
                                  ~(sov & (soi == do_cur_id) & sod)),
            new_entry.do_id.eq(do_cur_id),
        ]
        for e in range(G):
            with m.If(dec_good & op.touches_gbuf & (gidx == e)):
                m.d.sync += [dg_valid[e].eq(1), dg_id[e].eq(next_id)]
                with m.If(sg_id[e] == next_id):
                    m.d.sync += sg_valid[e].eq(0)
        for e in range(O):
            with m.If(dec_good & op.touches_obuf & (oidx == e)):
                m.d.sync += [do_valid[e].eq(1), do_id[e].eq(next_id)]
                with m.If(so_id[e] == next_id):
                    m.d.sync += so_valid[e].eq(0)

        # ---- S-Table writes at issue (after the clears: an issue wins) -----
        c_g, c_o = ch.cmd.gbuf_idx, ch.cmd.out_idx
        for e in range(G):
            with m.If(c_col & (c_g == e)):
                m.d.sync += [sg_valid[e].eq(1), sg_id[e].eq(ch.cmd_id), sg_cnt[e].eq(0)]
            with m.If(io_col & io_op.wr_inp & (ih.cmd.gbuf_idx == e)):
                m.d.sync += [sg_valid[e].eq(1), sg_id[e].eq(ih.cmd_id),
                             sg_cnt[e].eq(tm.t_wr_inp - 1)]
        for e in range(O):
            with m.If(c_col & (c_o == e)):
                m.d.sync += [so_valid[e].eq(1), so_id[e].eq(ch.cmd_id),
                             so_cnt[e].eq(tm.t_mac - 1), so_mac[e].eq(1),
                             so_ccd[e].eq(tm.t_ccd - 1)]
            with m.If(io_col & io_op.rd_out & (ih.cmd.out_idx == e)):
                m.d.sync += [so_valid[e].eq(1), so_id[e].eq(ih.cmd_id),
                             so_cnt[e].eq(tm.t_rd_out - 1), so_mac[e].eq(0)]

        #: Internal nets the formal harness (tb/formal.py) observes.
        self.probes = {"compute_count": c_count, "io_count": io_count, "pop_compute": pop_c,
                       "pop_io": pop_io}
        return _Issue(do_pre=do_pre, do_act=do_act, do_col=do_col, cmd=iss_entry.cmd, op=iss_op,
                      cmd_id=iss_entry.cmd_id, err_record=dec_bad, err_code=err,
                      open_=banks.open_)

    # ---- datapath, driven by the issuing command ---------------------------
    def _datapath(self, m, iss, wdata_fifo, rdata_fifo):
        cfg = self.config
        B = cfg.banks
        cmd, op, do_col = iss.cmd, iss.op, iss.do_col
        addr = Signal(range(max(2, cfg.rows * cfg.cols)))
        m.d.comb += addr.eq(cmd.row * cfg.cols + cmd.col)
        m.submodules.gbuf = gbuf = memory.Memory(shape=WORD_BITS, depth=cfg.gbuf_entries, init=[])
        gbuf_w, gbuf_r = gbuf.write_port(), gbuf.read_port()
        m.d.comb += [gbuf_w.addr.eq(cmd.gbuf_idx), gbuf_w.data.eq(wdata_fifo.r_data),
                     gbuf_w.en.eq(do_col & op.wr_inp), gbuf_r.addr.eq(cmd.gbuf_idx),
                     gbuf_r.en.eq(do_col & op.mac)]
        # Read ports only read for the command that needs them: the MAC trees
        # then see stable inputs between MACs (less simulator activity).
        bank_read = do_col & (op.mac | op.is_[Opcode.RD])
        bank_data = []
        for b in range(B):
            mem = memory.Memory(shape=WORD_BITS, depth=cfg.rows * cfg.cols, init=[])
            m.submodules[f"bank{b}"] = mem
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(addr), w.data.eq(wdata_fifo.r_data),
                         w.en.eq(do_col & op.is_[Opcode.WR] & (cmd.bank == b)), r.addr.eq(addr),
                         r.en.eq(bank_read)]
            bank_data.append(r.data)

        # stage 1: the cycle after issue, when the read ports deliver
        s1_mac, s1_rd_out, s1_rd = Signal(), Signal(), Signal()
        s1_out = Signal(range(max(2, cfg.obuf_entries)))  # never zero-width
        s1_bank = Signal(range(max(2, B)))
        m.d.sync += [s1_mac.eq(do_col & op.mac), s1_rd_out.eq(do_col & op.rd_out),
                     s1_rd.eq(do_col & op.is_[Opcode.RD])]
        # Captured only at an issue: the OBuf read mux, and the MAC trees and
        # BF16 rounding behind it, stay still while a queue head waits.
        with m.If(do_col):
            m.d.sync += [s1_out.eq(cmd.out_idx), s1_bank.eq(cmd.bank)]

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


class _Issue:
    """What the controller issues this cycle, for the trace, errors and datapath."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
