"""The channel's controllers (DESIGN.md §2.2): what every policy shares,
and the in-order controllers (static and ping-pong, specified by
``golden.channel``). The DCS controller is ``hw/dcs.py``.

A controller sees the command FIFO's head (``head``, its ID ``head_id``),
whether a write beat waits (``wbeat_valid``) and a read credit is free
(``credit``); it pops them (``head_pop``, ``wbeat_pop``) and reports one
issue per cycle (``issue``: PRE, ACT or the column action of a command,
with the command, its ID and its decoded opcode; or a dropped command and
its error code). It owns the bank timing (``hw/banks.py``). The channel
(``hw/channel.py``) turns ``issue`` into the trace, the status, the read
credits and the datapath's work.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from golden.config import ChannelConfig
from golden.isa import FIELDS, REFRESH_ID, ErrorCode, Opcode
from hw.banks import bank_timing, choose, issued
from hw.streams import ID_BITS, CommandLayout
from hw.util import counter

#: One cycle's issue: the action (at most one of pre / act / col), the
#: command it serves and its ID, the command's opcode decoded, and a command
#: dropped at decode (``err``) with its error code.
IssueLayout = data.StructLayout({
    "mode": 1, "pre": 1, "act": 1, "col": 1, "ref": 1, "cmd": CommandLayout, "cmd_id": ID_BITS,
    "wr_inp": 1, "mac": 1, "rd_out": 1, "rd": 1, "wr": 1,
    "err": 1, "err_code": FIELDS["err_code"].width,
})


class OpDecode:
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


class Controller(wiring.Component):
    """The interface of every policy's controller (module docstring).

    Members
    -------
    head : In(CommandLayout)
        The command FIFO's head.
    head_valid : In(1)
        The FIFO is not empty.
    head_id : In(16)
        The head's command ID.
    head_pop : Out(1)
        Take the head (decoded, issued or dropped).
    wbeat_valid, wbeat_pop : In(1), Out(1)
        A write beat waits; take it.
    credit : In(1)
        A read beat may issue (fewer than ``rdata_depth`` unpopped).
    issue : Out(IssueLayout)
        This cycle's issue.
    slice_rows : In(range(rows)), dual-path channels only
        Rows of each bank's first partition (0: unsliced).
    """

    def __init__(self, config: ChannelConfig, extra: dict | None = None):
        self.config = config
        super().__init__({
            "head": In(CommandLayout), "head_valid": In(1), "head_id": In(ID_BITS),
            "head_pop": Out(1), "wbeat_valid": In(1), "wbeat_pop": Out(1), "credit": In(1),
            "issue": Out(IssueLayout),
            **({"slice_rows": In(range(config.rows))} if config.dual_path else {}),
            **(extra or {}),
        })

    def bank_timing(self, m, cmd, op, enable):
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
        write = op.is_[Opcode.WR]  # the constraint table's WR kind; the rest read
        if not cfg.dual_path:
            return bank_timing(m, "banks", B, cfg.rows, cfg.timing, cmd.row, touched, op.mac,
                               write, bank_groups=cfg.bank_groups, col_gb=op.wr_inp,
                               col_reg=op.rd_out)
        sliced = Signal()
        upper = Signal()  # the command's row is in the second partition
        m.d.comb += [sliced.eq(self.slice_rows != 0),
                     upper.eq(sliced & (cmd.row >= self.slice_rows))]
        units = Signal(2 * B)
        m.d.comb += units.eq(Mux(upper, Cat(Const(0, B), touched), touched))
        return bank_timing(m, "banks", 2 * B, cfg.rows, cfg.timing, cmd.row, units, op.mac,
                           write, bank_groups=cfg.bank_groups, banks=B, col_gb=op.wr_inp,
                           col_reg=op.rd_out)

    def drive_issue(self, m, do_pre, do_act, do_col, cmd, cmd_id, op, err, err_code, do_mode=0,
                    do_ref=0, banks=None):
        """The issue port; while a refresh is pending (``banks.ref_pending``)
        what issues is the refresh's, with ``REFRESH_ID``."""
        i = self.issue
        if banks is not None and self.config.timing.t_refi:
            cmd_id = Mux(banks.ref_pending, REFRESH_ID, cmd_id)
        m.d.comb += [i.mode.eq(do_mode), i.pre.eq(do_pre), i.act.eq(do_act), i.col.eq(do_col),
                     i.ref.eq(do_ref), i.cmd.eq(cmd),
                     i.cmd_id.eq(cmd_id), i.wr_inp.eq(op.wr_inp), i.mac.eq(op.mac),
                     i.rd_out.eq(op.rd_out), i.rd.eq(op.is_[Opcode.RD]),
                     i.wr.eq(op.is_[Opcode.WR]), i.err.eq(err), i.err_code.eq(err_code)]


class InOrderController(Controller):
    """Static and ping-pong (``config.policy``): the FIFO head issues, in
    order; its column access waits for the buffer accesses it depends on to
    complete (``golden.channel``: the last WR-INP's GBuf write before a
    MAC, the last MAC's OBuf update before a RD-OUT, the last
    RD-OUT before a MAC or RD-OUT), per buffer half under ping-pong, with a
    MAC's hand-off to other halves waiting for both halves to be idle.
    PRE and ACT wait only for the device rules."""

    def elaborate(self, platform):
        m = Module()
        cfg, tm = self.config, self.config.timing
        head = self.head
        op = OpDecode(m, head.opcode, "head")
        err = command_error(m, cfg, head, op, "head_err")
        banks = self.bank_timing(m, head, op, Const(1))

        # Completion counters per buffer half (static: one half, the whole
        # buffer), loaded with latency - 1 at an issue, met at zero.
        halves = 2 if cfg.policy == "pingpong" else 1
        gbuf_write = [counter(tm.t_wr_inp, f"gbuf_write{h}_cnt") for h in range(halves)]
        obuf_mac = [counter(tm.t_mac, f"obuf_mac{h}_cnt") for h in range(halves)]
        obuf_read = [counter(tm.t_rd_out, f"obuf_read{h}_cnt") for h in range(halves)]
        counters = [*gbuf_write, *obuf_mac, *obuf_read]
        for cnt in counters:
            with m.If(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)
        g, o = Signal(name="gbuf_half"), Signal(name="obuf_half")
        if halves == 2:
            m.d.comb += [g.eq(head.gbuf_idx >= cfg.gbuf_entries // 2),
                         o.eq(head.out_idx >= cfg.obuf_entries // 2)]

        def done(cnts, half):
            return (cnts[0] == 0) if halves == 1 else (Mux(half, cnts[1], cnts[0]) == 0)

        mac_ok = done(gbuf_write, g) & done(obuf_read, o)
        if halves == 2:  # the hand-off: a MAC on other halves than the last MAC's
            mac_halves, mac_seen = Signal(2, name="mac_halves"), Signal(name="mac_seen")
            idle = Cat(c == 0 for c in counters).all()
            mac_ok &= ~mac_seen | (mac_halves == Cat(g, o)) | idle
        gap_ok = Signal(name="gap_ok")
        m.d.comb += gap_ok.eq(Mux(op.mac, mac_ok,
                                  Mux(op.rd_out, done(obuf_mac, o) & done(obuf_read, o), 1)))

        data_ok = (~op.write | self.wbeat_valid) & (~op.read | self.credit)
        do_mode, do_pre, do_act, do_step, do_drop, do_ref = (Signal(name=n) for n in (
            "do_mode", "do_pre", "do_act", "do_step", "do_drop", "do_ref"))
        refresh = tm.t_refi > 0  # a due refresh has the bus until its REF
        if refresh:
            with m.If(banks.ref_pending):
                banks.refresh(m, do_mode, do_pre, do_ref)
        with m.If(self.head_valid):
            with m.If(err != 0):
                m.d.comb += do_drop.eq(~op.write | self.wbeat_valid)
            with (m.Elif(~banks.ref_pending) if refresh else m.Else()):
                choose(m, banks, do_pre, do_act, do_step, data_ok & gap_ok,
                       col_free=op.act_ahead, do_mode=do_mode)
        # ACT-AHEAD ends, untraced, once its row is open; the rest issue
        do_col, do_done = Signal(name="do_col"), Signal(name="do_done")
        m.d.comb += [do_col.eq(do_step & ~op.act_ahead), do_done.eq(do_step & op.act_ahead)]
        issued(m, banks, do_pre, do_act, do_col, do_mode, do_col & op.wr_inp,
               do_col & op.rd_out, do_ref)

        for h in range(halves):
            mine_g = (g == h) if halves == 2 else Const(1)
            mine_o = (o == h) if halves == 2 else Const(1)
            with m.If(do_col & op.wr_inp & mine_g):
                m.d.sync += gbuf_write[h].eq(tm.t_wr_inp - 1)
            with m.If(do_col & op.mac & mine_o):
                m.d.sync += obuf_mac[h].eq(tm.t_mac - 1)
            with m.If(do_col & op.rd_out & mine_o):
                m.d.sync += obuf_read[h].eq(tm.t_rd_out - 1)
        if halves == 2:
            with m.If(do_col & op.mac):
                m.d.sync += [mac_halves.eq(Cat(g, o)), mac_seen.eq(1)]

        pop = do_col | do_done | do_drop
        m.d.comb += [self.head_pop.eq(pop), self.wbeat_pop.eq(pop & op.write)]
        self.drive_issue(m, do_pre, do_act, do_col, head, self.head_id, op, do_drop, err,
                         do_mode, do_ref, banks)
        return m
