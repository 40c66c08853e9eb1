"""Bank timing of a channel (the specification of ``hw/banks.py``): open
rows, and the constraint table of ``golden.timing`` (per bank, per bank
group and per channel), shared by every controller policy
(``golden.channel``, ``golden.dcs``) and the ALU channel."""

from __future__ import annotations

from golden.isa import Opcode
from golden.streams import Command
from golden.timing import COLUMN, KINDS, REGISTER_KINDS, bank_group_of, constraints


def kind_of(op) -> str:
    """The constraint table's command kind of an action: PRE, ACT, MODE, WR
    (a write's column access), GB (WR-INP), REG (RD-OUT), RD (any other
    column access); a kind name is itself."""
    if isinstance(op, str):
        if op not in KINDS:
            raise ValueError(f"command kind {op!r} is not one of {KINDS}")
        return op
    return {Opcode.PRE: "PRE", Opcode.ACT: "ACT", Opcode.MODE: "MODE", Opcode.REF: "REF",
            Opcode.WR: "WR", Opcode.WR_INP: "GB", Opcode.RD_OUT: "REG"}.get(op, "RD")


class BankTimer:
    """Open rows and the timing constraints of the banks.

    A MAC needs its row open in every bank: if any bank is open and not all
    are at the row, an all-bank PRE closes every open bank, then an all-bank
    ACT. RD/WR (and ACT-AHEAD) need their row open in their bank: PRE if
    another row is open there, then ACT.

    Dual-path banks sliced at ``slice_rows`` (docs/dual-path.md) have two
    partitions each, rows below the split and the rest, every partition with
    its own open row and tRAS/tRCD/tRP: the rules above apply per partition
    (the partition of the command's row), so a RD and a MAC in different
    partitions of one bank keep both rows open. Column commands stay tCCD
    apart on the channel (one command bus; the RDs share the data bus).

    Timing: every constraint of ``golden.timing.constraints(timing)``; per
    constraint and level instance (the channel, each bank group, or each
    unit) the cycles of the last ``window`` preceding commands. A command is
    at every instance of the units it touches (an all-bank ACT is one
    command at the channel level: tFAW counts it once; at every bank group).
    A column access that touches no unit (WR-INP, RD-OUT) is not a bank
    command, unless ``ccd_every_column`` (the ALU channel: every column
    command is). Bank ``b`` (both partitions) is in group
    ``b // (n_banks / bank_groups)``.

    Modes (a device with ``t_modch`` > 0, docs/timing.md): the device is in
    normal mode or register-access mode, normal after reset. WR-INP and
    RD-OUT (kinds GB and REG) need register-access mode, every other
    command normal mode; a command in the wrong mode first needs a MODE
    switch (``next_action``), after which nothing issues for t_modch."""

    def __init__(self, n_banks: int, timing, slice_rows: int = 0,
                 ccd_every_column: bool = False, bank_groups: int = 1):
        self.n, self.tm, self.split = n_banks, timing, slice_rows
        self.every_column = ccd_every_column
        units = n_banks * (2 if slice_rows else 1)
        self.group = bank_group_of(units, n_banks, bank_groups)
        self.open_row: list[int | None] = [None] * units
        self.modes = timing.t_modch > 0
        self.register_mode = False  # normal mode after reset
        self.t_refi = timing.t_refi
        #: the cycle the next refresh falls due (every t_refi from reset)
        self.refresh_due = timing.t_refi if timing.t_refi else None
        self.rules = constraints(timing)
        count = {"channel": 1, "bankgroup": bank_groups, "bank": units}
        #: per constraint, per level instance: the last ``window`` preceding cycles
        self.recent = [[[] for _ in range(count[c.level])] for c in self.rules]
        self._waits = {k: [(i, c) for i, c in enumerate(self.rules) if k in c.following]
                       for k in KINDS}
        self._starts = {k: [(i, c) for i, c in enumerate(self.rules) if k in c.preceding]
                        for k in KINDS}

    def unit(self, bank: int, row: int) -> int:
        """The row-buffer unit (bank, partition) holding ``row`` of ``bank``."""
        return bank + self.n if self.split and row >= self.split else bank

    def touched(self, op: Opcode, cmd: Command) -> list[int]:
        if op == Opcode.MAC:
            return [self.unit(b, cmd.row) for b in range(self.n)]
        if op in (Opcode.RD, Opcode.WR, Opcode.ACT_AHEAD):
            return [self.unit(cmd.bank, cmd.row)]
        return []

    def refresh_pending(self, cycle: int) -> bool:
        """A refresh is due at ``cycle`` and has not issued: it has the
        command bus until its REF issues."""
        return self.refresh_due is not None and cycle >= self.refresh_due

    def refresh_action(self, served: bool = False) -> tuple[Opcode, list[int]]:
        """The pending refresh's next action: a switch to normal mode, the
        PRE of every open unit (one all-bank command), or the REF of every
        unit. ``served``: the action after the switch, whatever the mode."""
        if self.modes and self.register_mode and not served:
            return Opcode.MODE, []
        open_units = [u for u, r in enumerate(self.open_row) if r is not None]
        if open_units:
            return Opcode.PRE, open_units
        return Opcode.REF, list(range(len(self.open_row)))

    def refresh_switch_ready(self) -> int:
        """Earliest cycle of what a refresh's mode switch switches for (its
        PRE, else its REF); 0 when no switch is needed."""
        if not (self.modes and self.register_mode):
            return 0
        return self.earliest(*self.refresh_action(served=True))

    def needs_mode_switch(self, op) -> bool:
        """The device is in the other mode than ``op`` needs."""
        return self.modes and self.register_mode != (kind_of(op) in REGISTER_KINDS)

    def next_action(self, op: Opcode, cmd: Command) -> tuple[Opcode, list[int]] | None:
        """The MODE switch, PRE or ACT ``cmd`` needs next, or None when the
        device is in its mode and its row is open."""
        if self.needs_mode_switch(op):
            return Opcode.MODE, []
        return self.served_action(op, cmd)

    def served_action(self, op: Opcode, cmd: Command) -> tuple[Opcode, list[int]] | None:
        """The PRE or ACT ``cmd`` needs next whatever the mode, or None when
        its row is open: what a mode switch for it switches for (the switch
        issues only once that, or the access, could)."""
        return self.action_for(self.touched(op, cmd), cmd.row, as_set=op == Opcode.MAC)

    def action_for(self, touched: list[int], row: int,
                   as_set: bool) -> tuple[Opcode, list[int]] | None:
        """The PRE or ACT that opens ``row`` in the ``touched`` banks, or None.
        ``as_set``: the banks open together (any off the row: precharge every
        open one of them), else each on its own."""
        if not touched:
            return None
        if as_set:
            off = any(self.open_row[b] != row for b in touched)
            pre = [b for b in touched if self.open_row[b] is not None] if off else []
        else:
            pre = [b for b in touched if self.open_row[b] not in (None, row)]
        if pre:
            return Opcode.PRE, pre
        act = [b for b in touched if self.open_row[b] is None]
        return (Opcode.ACT, act) if act else None

    def _bank_command(self, kind: str, banks: list[int]) -> bool:
        return bool(banks) or kind not in COLUMN or self.every_column

    def _instances(self, level: str, banks: list[int]):
        if level == "channel":
            return (0,)
        if level == "bankgroup":
            return sorted({self.group[u] for u in banks})
        return banks

    def earliest(self, kind, banks: list[int]) -> int:
        """Earliest cycle (>= 0) the constraints allow ``kind`` (an opcode or
        a kind name) on ``banks``."""
        k = kind_of(kind)
        if not self._bank_command(k, banks):
            return 0
        t = 0
        for i, c in self._waits[k]:
            for u in self._instances(c.level, banks):
                recent = self.recent[i][u]
                if len(recent) == c.window:
                    t = max(t, recent[0] + c.latency)
        return t

    def apply(self, kind, banks: list[int], cycle: int, row: int) -> None:
        k = kind_of(kind)
        if k == "MODE":
            self.register_mode = not self.register_mode
        elif k == "REF":
            assert cycle < self.refresh_due + self.t_refi, "two refreshes due at once"
            self.refresh_due += self.t_refi
        for b in banks:
            if k == "PRE":
                self.open_row[b] = None
            elif k == "ACT":
                self.open_row[b] = row
        if not self._bank_command(k, banks):
            return
        for i, c in self._starts[k]:
            for u in self._instances(c.level, banks):
                recent = self.recent[i][u]
                recent.append(cycle)
                if len(recent) > c.window:
                    del recent[0]
