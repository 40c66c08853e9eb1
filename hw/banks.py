"""Bank timing of a channel (specification: ``golden.banks.BankTimer``):
open rows and the tRAS / tRCD / tRP (per bank), tCCD (per channel) and tFAW
constraints, shared by every controller of the channel (``hw/channel.py``,
``hw/dcs.py``) and by the ALU channel (``hw/alu.py``).

Each constraint is a down-counter that reaches zero when it is met. The
controller presents the command that may use the banks (its row, the banks
it touches, whether they open together); ``BankTiming`` answers what it
needs next (``pre_mask``, ``act_mask``: PRE, ACT, or neither: the column
access) and whether the timing allows it now (``pre_ok``, ``act_ok``,
``col_ok``); the controller's choice (``choose``) comes back as
``do_pre`` / ``do_act`` / ``do_col`` and updates the counters.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import Timing
from golden.isa import FIELDS
from hw.util import counter


class BankTiming(wiring.Component):
    """Open rows and bank timing of ``units`` row buffers (banks, or bank
    partitions of dual-path banks).

    Parameters
    ----------
    units : int
        Row-buffer units.
    rows : int
        Rows per bank (the width of the open-row registers).
    timing : golden.config.Timing
        tRAS, tRCD, tRP, tCCD and tFAW (tFAW 0: not enforced).
    ccd_every_column : bool
        tCCD separates every column command (the ALU channel), not only
        those that touch the banks.

    Members
    -------
    row : In(row field)
        The row of the command that may use the banks.
    touched : In(units)
        The units it uses (0: none).
    as_set : In(1)
        They open together, like the channel's all-bank MAC: if any touched
        unit is off the row, every open touched unit is precharged.
        Otherwise each touched unit on its own.
    do_pre, do_act, do_col : In(1)
        What issues this cycle: PRE of ``pre_mask``, ACT of ``act_mask``,
        the column access.
    pre_mask, act_mask : Out(units)
        The units the command needs precharged, then activated.
    pre_ok, act_ok, col_ok : Out(1)
        tRAS allows the PRE; tRP (and tFAW) the ACT; tRCD and tCCD the
        column access.
    open : Out(units)
        Units with a row open.
    """

    def __init__(self, units: int, rows: int, timing: Timing, ccd_every_column: bool = False):
        self.units, self.rows, self.timing = units, rows, timing
        self.ccd_every_column = ccd_every_column
        super().__init__({
            "row": In(FIELDS["row"].width), "touched": In(units), "as_set": In(1),
            "do_pre": In(1), "do_act": In(1), "do_col": In(1),
            "pre_mask": Out(units), "act_mask": Out(units),
            "pre_ok": Out(1), "act_ok": Out(1), "col_ok": Out(1), "open": Out(units),
        })

    def elaborate(self, platform):
        m = Module()
        B, tm = self.units, self.timing
        row, touched = self.row, self.touched
        open_ = self.open
        open_row = [Signal(range(max(2, self.rows)), name=f"open_row{b}") for b in range(B)]
        ras = [counter(tm.t_ras, f"ras_cnt{b}") for b in range(B)]
        rcd = [counter(tm.t_rcd, f"rcd_cnt{b}") for b in range(B)]
        rp = [counter(tm.t_rp, f"rp_cnt{b}") for b in range(B)]
        ccd = counter(tm.t_ccd, "ccd_cnt")
        t_faw = tm.t_faw
        faw = [counter(t_faw, f"faw_cnt{k}") for k in range(4)] if t_faw else []
        for cnt in [*ras, *rcd, *rp, ccd, *faw]:
            with m.If(cnt != 0):
                m.d.sync += cnt.eq(cnt - 1)

        row_hit = Signal(B)
        m.d.comb += row_hit.eq(Cat(open_[b] & (open_row[b] == row) for b in range(B)))
        pre_mask, act_mask = self.pre_mask, self.act_mask
        with m.If(self.as_set):
            m.d.comb += pre_mask.eq(Mux((row_hit & touched) != touched, open_ & touched, 0))
        with m.Else():
            m.d.comb += pre_mask.eq(touched & open_ & ~row_hit)
        m.d.comb += act_mask.eq(touched & ~open_)

        def all_zero(cnts, mask):
            return Cat((~mask[b]) | (cnts[b] == 0) for b in range(B)).all()

        # tFAW: the fourth ACT back is t_faw cycles old
        ccd_ok = (ccd == 0) if self.ccd_every_column else ((touched == 0) | (ccd == 0))
        m.d.comb += [self.pre_ok.eq(all_zero(ras, pre_mask)),
                     self.act_ok.eq(all_zero(rp, act_mask) & ((faw[3] == 0) if faw else 1)),
                     self.col_ok.eq(all_zero(rcd, touched) & ccd_ok)]

        with m.If(self.do_pre):
            m.d.sync += open_.eq(open_ & ~pre_mask)
            for b in range(B):
                with m.If(pre_mask[b]):
                    m.d.sync += rp[b].eq(tm.t_rp - 1)
        with m.If(self.do_act):
            m.d.sync += open_.eq(open_ | act_mask)
            for b in range(B):
                with m.If(act_mask[b]):
                    m.d.sync += [open_row[b].eq(row), ras[b].eq(tm.t_ras - 1),
                                 rcd[b].eq(tm.t_rcd - 1)]
            if faw:
                m.d.sync += faw[0].eq(t_faw - 1)
                for k in range(1, 4):
                    m.d.sync += faw[k].eq(Mux(faw[k - 1] != 0, faw[k - 1] - 1, 0))
        with m.If(self.do_col & (1 if self.ccd_every_column else (touched != 0))):
            m.d.sync += ccd.eq(tm.t_ccd - 1)
        return m


def choose(m, banks: BankTiming, do_pre, do_act, do_col, col_cond, col_free=None):
    """In the controller's module: drive the next action the command needs,
    PRE, ACT, or the column access once ``col_cond`` also holds (with
    ``col_free``: at once, no column rules; the command ends when its row is
    open)."""
    with m.If(banks.pre_mask != 0):
        m.d.comb += do_pre.eq(banks.pre_ok)
    with m.Elif(banks.act_mask != 0):
        m.d.comb += do_act.eq(banks.act_ok)
    with m.Else():
        col = banks.col_ok & col_cond
        m.d.comb += do_col.eq(col if col_free is None else Mux(col_free, col_cond, col))


def bank_timing(m, name: str, units: int, rows: int, timing: Timing, row, touched, as_set,
                ccd_every_column: bool = False) -> BankTiming:
    """Add a BankTiming submodule ``name`` to ``m`` for the command at
    ``row`` touching ``touched``; the caller drives ``do_pre`` / ``do_act``
    / ``do_col`` (``choose``, then ``issued``)."""
    banks = BankTiming(units, rows, timing, ccd_every_column)
    m.submodules[name] = banks
    m.d.comb += [banks.row.eq(row), banks.touched.eq(touched), banks.as_set.eq(as_set)]
    return banks


def issued(m, banks: BankTiming, do_pre, do_act, do_col) -> None:
    """What issued this cycle, for the counters and open rows."""
    m.d.comb += [banks.do_pre.eq(do_pre), banks.do_act.eq(do_act), banks.do_col.eq(do_col)]
