"""The Dynamic Command Scheduling controller (DESIGN.md §2.2; specified by
``golden.dcs``, whose docstring lists the rules).

Its parts, named in the generated Verilog as here:

* the **D-Table** (``dtab_g<e>`` / ``dtab_o<e>``: valid, ID), per GBuf and
  OBuf entry: the last command decoded that touches it;
* the **S-Table** (``stab_g<e>`` / ``stab_o<e>``: valid, ID, completion
  counter; OBuf entries also whether it was a MAC and its tCCD counter):
  the last command issued on it and when it completes;
* the **compute queue** (``compute_q``: MACs) and the **I/O queue**
  (``io_q``: WR-INP, RD-OUT, RD, WR and dropped writes), in-order shift
  registers of ``EntryLayout``;
* decode (the FIFO head into a queue, with its dependencies from the
  tables), and issue (the compute head first, else the I/O head), with the
  bank timing of ``hw/banks.py``.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.wiring import Out

from golden.config import ChannelConfig
from golden.dcs import WINDOW
from hw.banks import choose, issued
from hw.controller import Controller, OpDecode, command_error
from hw.streams import ID_BITS, CommandLayout
from hw.util import counter, select

#: A DCS queue entry: the command, its ID, its dependency IDs (valid + ID) on
#: the GBuf and OBuf entries it touches, and the discard flag of a rejected
#: write whose beat must still be consumed in stream order.
EntryLayout = data.StructLayout({
    "cmd": CommandLayout, "cmd_id": ID_BITS, "discard": 1,
    "dg_valid": 1, "dg_id": ID_BITS, "do_valid": 1, "do_id": ID_BITS,
})


class Tables:
    """The D-Table (decode side: the last command decoded on each GBuf
    entry ``g`` and OBuf entry ``o``) and the S-Table (issue side: the last
    command issued there, its completion counter, and for OBuf entries
    whether it was a MAC and its tCCD counter). Specification:
    ``golden.dcs.Tables``."""

    def __init__(self, m, cfg: ChannelConfig):
        tm = cfg.timing
        G, O = cfg.gbuf_entries, cfg.obuf_entries
        self.dg_valid = [Signal(name=f"dtab_g{e}_valid") for e in range(G)]
        self.dg_id = [Signal(ID_BITS, name=f"dtab_g{e}_id") for e in range(G)]
        self.do_valid = [Signal(name=f"dtab_o{e}_valid") for e in range(O)]
        self.do_id = [Signal(ID_BITS, name=f"dtab_o{e}_id") for e in range(O)]
        done_max = max(tm.t_wr_inp, tm.t_mac, tm.t_rd_out)
        self.sg_valid = [Signal(name=f"stab_g{e}_valid") for e in range(G)]
        self.sg_id = [Signal(ID_BITS, name=f"stab_g{e}_id") for e in range(G)]
        self.sg_cnt = [counter(done_max, f"stab_g{e}_cnt") for e in range(G)]
        self.so_valid = [Signal(name=f"stab_o{e}_valid") for e in range(O)]
        self.so_id = [Signal(ID_BITS, name=f"stab_o{e}_id") for e in range(O)]
        self.so_cnt = [counter(done_max, f"stab_o{e}_cnt") for e in range(O)]
        self.so_mac = [Signal(name=f"stab_o{e}_mac") for e in range(O)]
        self.so_ccd = [counter(tm.t_ccd, f"stab_o{e}_ccd") for e in range(O)]
        for cnt in [*self.sg_cnt, *self.so_cnt, *self.so_ccd]:
            with m.If(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)

    def s_done(self, idx, gbuf):
        """S-Table at ``idx``: (valid, id, completed)."""
        if gbuf:
            return (select(idx, self.sg_valid), select(idx, self.sg_id),
                    select(idx, [c == 0 for c in self.sg_cnt]))
        return (select(idx, self.so_valid), select(idx, self.so_id),
                select(idx, [c == 0 for c in self.so_cnt]))


class DcsController(Controller):
    """The controller interface (``hw.controller.Controller``) plus the
    queues' occupancy and pops, which the formal harness observes
    (``compute_count``, ``io_count``, ``pop_compute``, ``pop_io``)."""

    def __init__(self, config: ChannelConfig):
        super().__init__(config, {
            "compute_count": Out(range(config.compute_depth + 1)),
            "io_count": Out(range(config.io_depth + 1)), "pop_compute": Out(1),
            "pop_io": Out(1)})

    @staticmethod
    def _queue(m, depth, name, push, entry, pop):
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

    def _issue(self, m, banks, ih, io_op, c_valid, io_valid, c_deps, io_deps, c_waits_issue):
        """The issue choice between the two queue heads: the compute head
        first (its mode switch, PRE, ACT or MAC), else the I/O head; returns
        what issued."""
        tm = self.config.timing
        # Modes (a device with t_modch > 0; golden.dcs): the compute head does
        # not switch the mode while the I/O head's access is in the current
        # mode and waits only for the device's spacing, and the I/O head
        # switches it only while the compute queue is empty or its head waits
        # for an unissued command.
        io_data_ok = (~io_op.write | self.wbeat_valid) & (~io_op.read | self.credit)
        io_reg = io_op.wr_inp | io_op.rd_out  # register accesses: no bank
        io_switch = Signal()  # the I/O head's register access needs the other mode
        if tm.t_modch:
            m.d.comb += io_switch.eq(io_reg & ~banks.reg_mode)
        # the I/O head holds the mode: a register access in the current mode
        # that waits for nothing but the device's spacing (golden.dcs)
        io_holds_mode = io_valid & Mux(ih.discard, self.wbeat_valid,
                                       io_reg & ~io_switch & io_deps & io_data_ok)

        # A due refresh has the bus until its REF (golden.dcs): the heads wait.
        r_mode, r_pre, do_ref = Signal(), Signal(), Signal(name="do_ref")
        if tm.t_refi:
            with m.If(banks.ref_pending):
                banks.refresh(m, r_mode, r_pre, do_ref)
        free = ~banks.ref_pending

        c_mode, c_pre, c_act, c_col = Signal(), Signal(), Signal(), Signal()
        with m.If(c_valid & free):
            choose(m, banks, c_pre, c_act, c_col, c_deps, do_mode=c_mode,
                   switch_ok=~io_holds_mode)
        c_issue = c_mode | c_pre | c_act | c_col

        io_mode, io_pre, io_act, io_col, io_discard = (Signal() for _ in range(5))
        with m.If(io_valid & ~c_issue & free):
            with m.If(ih.discard):
                m.d.comb += io_discard.eq(self.wbeat_valid)
            if tm.t_modch:  # no branch on a constant: Verilator's CASEOVERLAP
                with m.Elif(io_switch):
                    m.d.comb += io_mode.eq(banks.mode_ok & (~c_valid | c_waits_issue) &
                                           io_deps & io_data_ok &
                                           Mux(io_op.wr_inp, banks.gb_ok, banks.reg_ok))
            with m.Elif(~io_op.normal):  # WR-INP, RD-OUT: no bank
                m.d.comb += io_col.eq(io_deps & io_data_ok &
                                      Mux(io_op.wr_inp, banks.gb_ok, banks.reg_ok))
            with m.Else():  # RD/WR: the banks serve it (the compute queue is empty)
                choose(m, banks, io_pre, io_act, io_col, io_data_ok, do_mode=io_mode)

        do_mode, do_pre, do_act, do_col = (Signal(name=n) for n in
                                           ("do_mode", "do_pre", "do_act", "do_col"))
        m.d.comb += [do_mode.eq(c_mode | io_mode | r_mode), do_pre.eq(c_pre | io_pre | r_pre),
                     do_act.eq(c_act | io_act), do_col.eq(c_col | io_col)]
        issued(m, banks, do_pre, do_act, c_col | (io_col & io_op.normal), do_mode,
               io_col & io_op.wr_inp, io_col & io_op.rd_out, do_ref)
        return c_issue, c_col, io_col, io_discard, do_pre, do_act, do_col, do_mode, do_ref

    def elaborate(self, platform):
        m = Module()
        cfg, tm = self.config, self.config.timing
        G, O = cfg.gbuf_entries, cfg.obuf_entries
        next_id = self.head_id

        t = Tables(m, cfg)
        dg_valid, dg_id, do_valid, do_id = t.dg_valid, t.dg_id, t.do_valid, t.do_id
        sg_valid, sg_id, sg_cnt = t.sg_valid, t.sg_id, t.sg_cnt
        so_valid, so_id, so_cnt, so_mac, so_ccd = t.so_valid, t.so_id, t.so_cnt, t.so_mac, t.so_ccd
        s_done = t.s_done

        # ---- issue side: the two queue heads -----------------------------
        push_c, push_io, pop_c, pop_io = (Signal(name=n) for n in
                                          ("push_compute", "push_io", "pop_compute", "pop_io"))
        new_entry = Signal(EntryLayout)
        c_count, ch = self._queue(m, cfg.compute_depth, "compute_q", push_c, new_entry, pop_c)
        io_count, ih = self._queue(m, cfg.io_depth, "io_q", push_io, new_entry, pop_io)
        c_valid, io_valid = c_count != 0, io_count != 0
        io_op = OpDecode(m, ih.cmd.opcode, "io_head")

        def deps_ok(e, is_mac):
            """(the dependencies of ``e`` are met, one of them names a
            command that has not issued)"""
            g_valid, g_id, g_done = s_done(e.cmd.gbuf_idx, True)
            o_valid, o_id, o_done = s_done(e.cmd.out_idx, False)
            o_ccd = select(e.cmd.out_idx, [c == 0 for c in so_ccd])
            o_mac = select(e.cmd.out_idx, so_mac)
            if is_mac:  # MAC after MAC on one OBuf entry: tCCD
                o_done = Mux(o_mac, o_ccd, o_done)
            g_issued, o_issued = g_valid & (g_id == e.dg_id), o_valid & (o_id == e.do_id)
            return ((~e.dg_valid | (g_issued & g_done)) & (~e.do_valid | (o_issued & o_done)),
                    (e.dg_valid & ~g_issued) | (e.do_valid & ~o_issued))

        c_deps, io_deps, c_waits_issue = Signal(), Signal(), Signal()
        c_ok, c_waits = deps_ok(ch, True)
        m.d.comb += [c_deps.eq(c_ok), io_deps.eq(deps_ok(ih, False)[0]),
                     c_waits_issue.eq(c_waits)]

        # The banks serve the compute head, or an RD/WR at the I/O head (RD/WR
        # are fences: the compute queue is empty while one waits).
        cand = data.View(CommandLayout, Mux(c_valid, ch.cmd.as_value(), ih.cmd.as_value()))
        cand_op = OpDecode(m, cand.opcode, "bank_cmd")
        banks = self.bank_timing(m, cand, cand_op, c_valid | (io_valid & ~ih.discard))

        c_issue, c_col, io_col, io_discard, do_pre, do_act, do_col, do_mode, do_ref = self._issue(
            m, banks, ih, io_op, c_valid, io_valid, c_deps, io_deps, c_waits_issue)
        iss_entry = data.View(EntryLayout, Mux(c_issue, ch.as_value(), ih.as_value()))
        iss_op = OpDecode(m, iss_entry.cmd.opcode, "issue")
        m.d.comb += [pop_c.eq(c_col), pop_io.eq(io_col | io_discard),
                     self.wbeat_pop.eq((io_col & io_op.write) | io_discard)]

        # ---- decode: the command FIFO head -> a queue --------------------
        head = self.head
        op = OpDecode(m, head.opcode, "head")
        err = command_error(m, cfg, head, op, "head_err")
        fence = Signal()
        fence_now = fence & ~(io_col & io_op.normal)  # cleared by the fence's issue
        window_ok = ~((c_valid & (next_id - ch.cmd_id)[ID_BITS - 1]) |
                      (io_valid & (next_id - ih.cmd_id)[ID_BITS - 1]))
        assert WINDOW == 1 << (ID_BITS - 1)
        can = self.head_valid & ~fence_now & window_ok
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
        m.d.comb += self.head_pop.eq(dec_good | dec_bad)
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

        # the queues, as the formal harness (tb/formal.py) observes them
        m.d.comb += [self.compute_count.eq(c_count), self.io_count.eq(io_count),
                     self.pop_compute.eq(pop_c), self.pop_io.eq(pop_io)]
        self.drive_issue(m, do_pre, do_act, do_col, iss_entry.cmd, iss_entry.cmd_id, iss_op,
                         dec_bad, err, do_mode, do_ref, banks)
        return m


