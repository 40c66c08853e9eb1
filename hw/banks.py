"""Bank timing of a channel (specification: ``golden.banks.BankTimer``):
open rows and the constraint table of ``golden.timing`` (tRAS / tRCD / tRP
per bank, tCCD and tFAW per channel), shared by every controller of the
channel (``hw/channel.py``, ``hw/dcs.py``) and by the ALU channel
(``hw/alu.py``).

The counters are generated from the table: per constraint and level
instance (the channel, or each unit) a down-counter loaded with
``latency - 1`` when a preceding command issues there, and met at zero (a
windowed constraint keeps a chain of ``window`` counters, one per recent
preceding command). The controller presents the command that may use the
banks (its row, the banks it touches, whether they open together);
``BankTiming`` answers what it needs next (``pre_mask``, ``act_mask``: PRE,
ACT, or neither: the column access) and whether the timing allows it now
(``pre_ok``, ``act_ok``, ``col_ok``); the controller's choice (``choose``)
comes back as ``do_pre`` / ``do_act`` / ``do_col`` and updates the counters.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import Timing
from golden.isa import FIELDS
from golden.timing import constraints
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
        B = self.units
        row, touched = self.row, self.touched
        open_ = self.open
        open_row = [Signal(range(max(2, self.rows)), name=f"open_row{b}") for b in range(B)]

        row_hit = Signal(B)
        m.d.comb += row_hit.eq(Cat(open_[b] & (open_row[b] == row) for b in range(B)))
        pre_mask, act_mask = self.pre_mask, self.act_mask
        with m.If(self.as_set):
            m.d.comb += pre_mask.eq(Mux((row_hit & touched) != touched, open_ & touched, 0))
        with m.Else():
            m.d.comb += pre_mask.eq(touched & open_ & ~row_hit)
        m.d.comb += act_mask.eq(touched & ~open_)
        with m.If(self.do_pre):
            m.d.sync += open_.eq(open_ & ~pre_mask)
        with m.If(self.do_act):
            m.d.sync += open_.eq(open_ | act_mask)
            for b in range(B):
                with m.If(act_mask[b]):
                    m.d.sync += open_row[b].eq(row)

        # what issues, and where: the units of each kind (a column access that
        # touches no unit is not a bank command, unless ccd_every_column)
        col_cmd = Const(1) if self.ccd_every_column else (touched != 0)
        units = {"PRE": pre_mask, "ACT": act_mask, "COL": touched}
        issues = {"PRE": self.do_pre, "ACT": self.do_act, "COL": self.do_col & col_cmd}
        ok = {"PRE": [], "ACT": [], "COL": []}
        for c in constraints(self.timing):
            self._constraint(m, c, units, issues, ok, col_cmd)
        m.d.comb += [self.pre_ok.eq(Cat(*ok["PRE"], 1).all()),
                     self.act_ok.eq(Cat(*ok["ACT"], 1).all()),
                     self.col_ok.eq(Cat(*ok["COL"], 1).all())]
        return m

    def _constraint(self, m, c, units, issues, ok, col_cmd):
        """The counters of constraint ``c``: loaded where a preceding command
        issues, checked where a following one would."""
        name = c.key.removeprefix("t_")
        instances = 1 if c.level == "channel" else self.units
        chains = []
        for i in range(instances):
            idx = "" if c.level == "channel" and c.window == 1 else (
                f"{i}" if c.window == 1 else f"{i}_" if c.level == "bank" else "")
            chain = [counter(c.latency, f"{name}_cnt{idx}{k if c.window > 1 else ''}")
                     for k in range(c.window)]
            chains.append(chain)
            for cnt in chain:
                with m.If(cnt != 0):
                    m.d.sync += cnt.eq(cnt - 1)
        for kind in c.preceding:
            for i, chain in enumerate(chains):
                here = issues[kind] if c.level == "channel" else issues[kind] & units[kind][i]
                with m.If(here):
                    m.d.sync += chain[0].eq(c.latency - 1)
                    for k in range(1, c.window):
                        m.d.sync += chain[k].eq(Mux(chain[k - 1] != 0, chain[k - 1] - 1, 0))
        for kind in c.following:
            if c.level == "channel":
                met = chains[0][-1] == 0
                ok[kind].append(met if kind != "COL" else (~col_cmd | met))
            else:
                ok[kind].append(Cat((~units[kind][i]) | (chain[-1] == 0)
                                    for i, chain in enumerate(chains)).all())


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
