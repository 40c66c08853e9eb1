"""Bank timing of a channel (specification: ``golden.banks.BankTimer``):
open rows and the constraint table of ``golden.timing`` (per bank, per bank
group and per channel), shared by every controller of the
channel (``hw/channel.py``, ``hw/dcs.py``) and by the ALU channel
(``hw/alu.py``).

The counters are generated from the table: per constraint and level
instance (the channel, each bank group, or each unit) a down-counter loaded with
``latency - 1`` when a preceding command issues there, and met at zero (a
windowed constraint keeps a chain of ``window`` counters, one per recent
preceding command). The controller presents the command that may use the
banks (its row, the banks it touches, whether they open together);
``BankTiming`` answers what it needs next (``pre_mask``, ``act_mask``: PRE,
ACT, or neither: the column access) and whether the timing allows it now
(``pre_ok``, ``act_ok``, ``col_ok``); the controller's choice (``choose``)
comes back as ``do_pre`` / ``do_act`` / ``do_col`` and updates the counters.
On a device with modes (``t_modch`` > 0) it also holds the mode (normal
after reset; ``reg_mode`` for register access) and says whether the
presented command needs a MODE switch first (``mode_switch``).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.config import Timing
from golden.isa import FIELDS
from golden.timing import COLUMN, KINDS, bank_group_of, constraints
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
        The profile's timing; its constraint table (``golden.timing``)
        generates the counters.
    ccd_every_column : bool
        The channel-level column rules separate every column command (the
        ALU channel), not only those that touch the banks.
    bank_groups, banks : int
        Bank groups, and the banks they split evenly (unit ``u`` is bank
        ``u % banks``; default: every unit a bank).

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
    col_write : In(1)
        The column access writes the banks (WR; the constraint table's WR
        kind), else it reads (RD, MAC: RD).
    col_gb, col_reg : In(1)
        The column access is a WR-INP (kind GB) / a RD-OUT (kind REG): a
        register access, in register-access mode, touching no bank.
    do_pre, do_act, do_col, do_mode, do_gb, do_reg : In(1)
        What issues this cycle: PRE of ``pre_mask``, ACT of ``act_mask``,
        the column access, a MODE switch, a WR-INP, a RD-OUT (the last two
        from any queue of the controller, not only the presented command).
    pre_mask, act_mask : Out(units)
        The units the command needs precharged, then activated.
    pre_ok, act_ok, col_ok, mode_ok : Out(1)
        Every constraint whose following kind is a PRE, an ACT, the column
        access (its RD, WR, GB or REG kind), a MODE switch is met.
    gb_ok, reg_ok : Out(1)
        The same for a WR-INP and a RD-OUT whatever the presented command
        (they touch no bank; the DCS controller's I/O head).
    reg_mode : Out(1)
        The device is in register-access mode (always 0 without modes).
    mode_switch : Out(1)
        The presented command needs the other mode: a MODE switch first.
    open : Out(units)
        Units with a row open.
    """

    def __init__(self, units: int, rows: int, timing: Timing, ccd_every_column: bool = False,
                 bank_groups: int = 1, banks: int | None = None):
        self.units, self.rows, self.timing = units, rows, timing
        self.ccd_every_column = ccd_every_column
        self.group = bank_group_of(units, banks or units, bank_groups)
        self.bank_groups = bank_groups
        super().__init__({
            "row": In(FIELDS["row"].width), "touched": In(units), "as_set": In(1),
            "col_write": In(1), "col_gb": In(1), "col_reg": In(1), "do_pre": In(1),
            "do_act": In(1), "do_col": In(1), "do_mode": In(1), "do_gb": In(1),
            "do_reg": In(1), "do_ref": In(1),
            "pre_mask": Out(units), "act_mask": Out(units),
            "pre_ok": Out(1), "act_ok": Out(1), "col_ok": Out(1), "mode_ok": Out(1),
            "gb_ok": Out(1), "reg_ok": Out(1), "reg_mode": Out(1), "mode_switch": Out(1),
            "ref_pending": Out(1), "ref_ok": Out(1),
            "open": Out(units),
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
        cmd_pre = Mux(self.as_set, Mux((row_hit & touched) != touched, open_ & touched, 0),
                      touched & open_ & ~row_hit)
        cmd_act = touched & ~open_
        if self.timing.t_refi:  # a due refresh: its PRE closes every open unit, no ACT
            m.d.comb += [pre_mask.eq(Mux(self.ref_pending, open_, cmd_pre)),
                         act_mask.eq(Mux(self.ref_pending, 0, cmd_act))]
            # one falls due every t_refi cycles from reset, pending until its REF
            refi = Signal(range(self.timing.t_refi), name="refi_cnt", init=self.timing.t_refi - 1)
            with m.If(refi == 0):
                m.d.sync += [refi.eq(self.timing.t_refi - 1), self.ref_pending.eq(1)]
            with m.Else():
                m.d.sync += refi.eq(refi - 1)
                with m.If(self.do_ref):
                    m.d.sync += self.ref_pending.eq(0)
        else:
            m.d.comb += [pre_mask.eq(cmd_pre), act_mask.eq(cmd_act)]
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
        col = self.do_col & col_cmd
        none = Const(0, B)  # the register accesses and MODE touch no unit
        units = {"PRE": pre_mask, "ACT": act_mask, "RD": touched, "WR": touched,
                 "GB": none, "REG": none, "MODE": none, "REF": Const((1 << B) - 1, B)}
        issues = {"PRE": self.do_pre, "ACT": self.do_act, "RD": col & ~self.col_write,
                  "WR": col & self.col_write, "GB": self.do_gb, "REG": self.do_reg,
                  "MODE": self.do_mode, "REF": self.do_ref}
        ok = {kind: [] for kind in KINDS}
        for c in constraints(self.timing):
            self._constraint(m, c, units, issues, ok, col_cmd)

        def met(kind):
            return Cat(*ok[kind], 1).all()

        m.d.comb += [self.pre_ok.eq(met("PRE")), self.act_ok.eq(met("ACT")),
                     self.col_ok.eq(Mux(self.col_gb, met("GB"), Mux(self.col_reg, met("REG"),
                                    Mux(self.col_write, met("WR"), met("RD"))))),
                     self.mode_ok.eq(met("MODE")), self.gb_ok.eq(met("GB")),
                     self.reg_ok.eq(met("REG")), self.ref_ok.eq(met("REF"))]
        if self.timing.t_modch:  # the device's modes (golden.banks.BankTimer)
            with m.If(self.do_mode):
                m.d.sync += self.reg_mode.eq(~self.reg_mode)
            m.d.comb += self.mode_switch.eq((self.col_gb | self.col_reg) != self.reg_mode)
        return m

    def refresh(self, m, do_mode, do_pre, do_ref):
        """In the controller's module, while ``ref_pending``: drive the
        refresh's next action (``golden.banks.BankTimer.refresh_action``):
        a switch to normal mode, the PRE of every open unit, or the REF."""
        branch = m.If
        if self.timing.t_modch:  # once its PRE (or REF) could issue
            with m.If(self.reg_mode):
                m.d.comb += do_mode.eq(self.mode_ok & Mux(self.open != 0, self.pre_ok,
                                                          self.ref_ok))
            branch = m.Elif
        with branch(self.open != 0):
            m.d.comb += do_pre.eq(self.pre_ok)
        with m.Else():
            m.d.comb += do_ref.eq(self.ref_ok)

    def _constraint(self, m, c, units, issues, ok, col_cmd):
        """The counters of constraint ``c``: per level instance, loaded where
        a preceding command issues, checked where a following one would."""
        name = c.key.removeprefix("t_")
        if c.level == "channel":
            masks = [None]
        elif c.level == "bankgroup":
            masks = [sum(1 << u for u in range(self.units) if self.group[u] == g)
                     for g in range(self.bank_groups)]
        else:
            masks = [1 << u for u in range(self.units)]
        chains = []
        for i in range(len(masks)):
            idx = "" if c.level == "channel" else f"{i}_" if c.window > 1 else f"{i}"
            chain = [counter(c.latency, f"{name}_cnt{idx}{k if c.window > 1 else ''}")
                     for k in range(c.window)]
            chains.append(chain)
            for cnt in chain:
                with m.If(cnt != 0):
                    m.d.sync += cnt.eq(cnt - 1)

        def here(kind, mask):
            return Const(1) if mask is None else (units[kind] & mask) != 0

        for kind in c.preceding:
            for mask, chain in zip(masks, chains, strict=True):
                with m.If(issues[kind] & here(kind, mask)):
                    m.d.sync += chain[0].eq(c.latency - 1)
                    for k in range(1, c.window):
                        m.d.sync += chain[k].eq(Mux(chain[k - 1] != 0, chain[k - 1] - 1, 0))
        for kind in c.following:
            met = Cat((~here(kind, mask)) | (chain[-1] == 0)
                      for mask, chain in zip(masks, chains, strict=True)).all()
            ok[kind].append(~col_cmd | met if c.level == "channel" and kind in COLUMN else met)


def choose(m, banks: BankTiming, do_pre, do_act, do_col, col_cond, col_free=None,
           do_mode=None, switch_ok=1):
    """In the controller's module: drive the next action the command needs,
    a MODE switch (into ``do_mode``, when ``switch_ok`` and the action it
    switches for would be allowed but for the mode), PRE, ACT, or the
    column access once ``col_cond`` also holds (with ``col_free``: at once,
    no column rules; the command ends when its row is open)."""
    col = banks.col_ok & col_cond
    col = col if col_free is None else Mux(col_free, col_cond, col)
    branch = m.If
    if banks.timing.t_modch:  # no branch on a constant: Verilator's CASEOVERLAP
        with m.If(banks.mode_switch):
            if do_mode is not None:  # once what it switches for could issue
                served = Mux(banks.pre_mask != 0, banks.pre_ok,
                             Mux(banks.act_mask != 0, banks.act_ok, col))
                m.d.comb += do_mode.eq(banks.mode_ok & switch_ok & served)
        branch = m.Elif
    with branch(banks.pre_mask != 0):
        m.d.comb += do_pre.eq(banks.pre_ok)
    with m.Elif(banks.act_mask != 0):
        m.d.comb += do_act.eq(banks.act_ok)
    with m.Else():
        m.d.comb += do_col.eq(col)


def bank_timing(m, name: str, units: int, rows: int, timing: Timing, row, touched, as_set,
                col_write, ccd_every_column: bool = False, bank_groups: int = 1,
                banks: int | None = None, col_gb=0, col_reg=0) -> BankTiming:
    """Add a BankTiming submodule ``name`` to ``m`` for the command at
    ``row`` touching ``touched`` (its column access a write when
    ``col_write``, a WR-INP when ``col_gb``, a RD-OUT when ``col_reg``); the
    caller drives ``do_pre`` / ``do_act`` / ``do_col`` / ``do_mode``
    (``choose``, then ``issued``)."""
    timer = BankTiming(units, rows, timing, ccd_every_column, bank_groups, banks)
    m.submodules[name] = timer
    m.d.comb += [timer.row.eq(row), timer.touched.eq(touched), timer.as_set.eq(as_set),
                 timer.col_write.eq(col_write), timer.col_gb.eq(col_gb),
                 timer.col_reg.eq(col_reg)]
    return timer


def issued(m, banks: BankTiming, do_pre, do_act, do_col, do_mode=0, do_gb=0,
           do_reg=0, do_ref=0) -> None:
    """What issued this cycle, for the counters, open rows, mode and refresh."""
    m.d.comb += [banks.do_pre.eq(do_pre), banks.do_act.eq(do_act), banks.do_col.eq(do_col),
                 banks.do_mode.eq(do_mode), banks.do_gb.eq(do_gb), banks.do_reg.eq(do_reg),
                 banks.do_ref.eq(do_ref)]
