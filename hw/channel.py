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

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from golden.config import ChannelConfig
from golden.dcs import WINDOW
from golden.isa import (
    FIELDS,
    WORD_BITS,
    ErrorCode,
    Opcode,
)
from hw.banks import bank_timing, choose, issued
from hw.datapath import Datapath
from hw.streams import (
    ID_BITS,
    CommandLayout,
    stream_fifos,
    stream_ports,
)
from hw.util import counter, select

#: A DCS queue entry: the command, its ID, its dependency IDs (valid + ID) on
#: the GBuf and OBuf entries it touches, and the discard flag of a rejected
#: write whose beat must still be consumed in stream order.
EntryLayout = data.StructLayout({
    "cmd": CommandLayout, "cmd_id": ID_BITS, "discard": 1,
    "dg_valid": 1, "dg_id": ID_BITS, "do_valid": 1, "do_id": ID_BITS,
})


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
        (``hw.banks.BankTiming``): a MAC touches every bank, RD/WR (ACT-AHEAD) their
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
            return bank_timing(m, "banks", B, cfg.rows, cfg.timing, cmd.row, touched, op.mac)
        sliced = Signal()
        upper = Signal()  # the command's row is in the second partition
        m.d.comb += [sliced.eq(self.slice_rows != 0),
                     upper.eq(sliced & (cmd.row >= self.slice_rows))]
        units = Signal(2 * B)
        m.d.comb += units.eq(Mux(upper, Cat(Const(0, B), touched), touched))
        return bank_timing(m, "banks", 2 * B, cfg.rows, cfg.timing, cmd.row, units, op.mac)

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
            m.submodules.datapath = dp = Datapath(cfg)
            m.d.comb += [dp.col.eq(iss.do_col), dp.cmd.eq(iss.cmd), dp.wbeat.eq(wdata_fifo.r_data),
                         dp.wr_inp.eq(iss.op.wr_inp), dp.mac.eq(iss.op.mac),
                         dp.rd_out.eq(iss.op.rd_out), dp.rd.eq(iss.op.is_[Opcode.RD]),
                         dp.wr.eq(iss.op.is_[Opcode.WR]),
                         rdata_fifo.w_en.eq(dp.rbeat_valid), rdata_fifo.w_data.eq(dp.rbeat)]
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
        gaps = [counter(max_gap, f"gap{h}_cnt") for h in range(2)]
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
                choose(m, banks, do_pre, do_act, do_step, data_ok, col_free=op.act_ahead)
        # ACT-AHEAD ends, untraced, once its row is open; the rest issue
        do_col, do_done = Signal(name="do_col"), Signal(name="do_done")
        m.d.comb += [do_col.eq(do_step & ~op.act_ahead), do_done.eq(do_step & op.act_ahead)]
        issued(m, banks, do_pre, do_act, do_col)

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
                      open_=banks.open)

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
        sg_cnt = [counter(done_max, f"stab_g{e}_cnt") for e in range(G)]
        so_valid = [Signal(name=f"stab_o{e}_valid") for e in range(O)]
        so_id = [Signal(ID_BITS, name=f"stab_o{e}_id") for e in range(O)]
        so_cnt = [counter(done_max, f"stab_o{e}_cnt") for e in range(O)]
        so_mac = [Signal(name=f"stab_o{e}_mac") for e in range(O)]
        so_ccd = [counter(tm.t_ccd, f"stab_o{e}_ccd") for e in range(O)]
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
            choose(m, banks, c_pre, c_act, c_col, c_deps)
        c_issue = c_pre | c_act | c_col

        io_pre, io_act, io_col, io_discard = Signal(), Signal(), Signal(), Signal()
        io_data_ok = (~io_op.write | self._wbeat) & (~io_op.read | self._credit)
        with m.If(io_valid & ~c_issue):
            with m.If(ih.discard):
                m.d.comb += io_discard.eq(self._wbeat)
            with m.Elif(~io_op.normal):  # WR-INP, RD-OUT: no bank
                m.d.comb += io_col.eq(io_deps & io_data_ok)
            with m.Else():  # RD/WR: the banks serve it
                choose(m, banks, io_pre, io_act, io_col, io_data_ok)

        do_pre, do_act, do_col = (Signal(name=n) for n in ("do_pre", "do_act", "do_col"))
        m.d.comb += [do_pre.eq(c_pre | io_pre), do_act.eq(c_act | io_act),
                     do_col.eq(c_col | io_col)]
        issued(m, banks, do_pre, do_act, c_col | (io_col & io_op.normal))
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
                      open_=banks.open)


class _Issue:
    """What the controller issues this cycle, for the trace, errors and datapath."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
