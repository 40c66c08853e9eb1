"""Bank timing of a channel (the specification of ``hw/banks.py``):
open rows and the tRAS / tRP / tRCD / tCCD / tFAW bookkeeping, shared by
every controller policy (``golden.channel``, ``golden.dcs``)."""

from __future__ import annotations

from golden.isa import Opcode
from golden.streams import Command


class BankTimer:
    """Open rows and the tRAS/tRP/tRCD/tCCD/tFAW bookkeeping of the banks.

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

    tFAW (``timing.t_faw`` > 0): an ACT waits until ``t_faw`` cycles after
    the fourth ACT before it (an all-bank ACT counts once)."""

    NEVER = -(1 << 40)

    def __init__(self, n_banks: int, timing, slice_rows: int = 0):
        self.n, self.tm, self.split = n_banks, timing, slice_rows
        units = n_banks * (2 if slice_rows else 1)
        self.open_row: list[int | None] = [None] * units
        self.t_act = [self.NEVER] * units
        self.t_pre = [self.NEVER] * units
        self.t_col = self.NEVER
        self.acts: list[int] = []  # ACT cycles, for tFAW

    def unit(self, bank: int, row: int) -> int:
        """The row-buffer unit (bank, partition) holding ``row`` of ``bank``."""
        return bank + self.n if self.split and row >= self.split else bank

    def touched(self, op: Opcode, cmd: Command) -> list[int]:
        if op == Opcode.MAC:
            return [self.unit(b, cmd.row) for b in range(self.n)]
        if op in (Opcode.RD, Opcode.WR, Opcode.ACT_AHEAD):
            return [self.unit(cmd.bank, cmd.row)]
        return []

    def next_action(self, op: Opcode, cmd: Command) -> tuple[Opcode, list[int]] | None:
        """The PRE or ACT ``cmd`` needs next, or None when its row is open."""
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

    def earliest(self, kind: Opcode, banks: list[int]) -> int:
        """Earliest cycle the bank rules allow ``kind`` on ``banks``."""
        tm = self.tm
        if kind == Opcode.PRE:
            return max(self.t_act[b] + tm.t_ras for b in banks)
        if kind == Opcode.ACT:
            faw = tm.t_faw
            window = self.acts[-4] + faw if faw and len(self.acts) >= 4 else 0
            return max(window, *(self.t_pre[b] + tm.t_rp for b in banks))
        if not banks:
            return 0
        return max(max(self.t_act[b] + tm.t_rcd for b in banks), self.t_col + tm.t_ccd)

    def apply(self, kind: Opcode, banks: list[int], cycle: int, row: int) -> None:
        for b in banks:
            if kind == Opcode.PRE:
                self.open_row[b], self.t_pre[b] = None, cycle
            elif kind == Opcode.ACT:
                self.open_row[b], self.t_act[b] = row, cycle
        if kind == Opcode.ACT:
            self.acts.append(cycle)
            del self.acts[:-4]
        elif kind != Opcode.PRE and banks:
            self.t_col = cycle

