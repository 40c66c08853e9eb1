"""The xPU's weight reads beside PIM attention on dual-row-buffer banks
(the NeuPIMs-like xPU+PIM system, docs/pimphony.md).

NeuPIMs gives every bank a second row buffer: the xPU's normal reads (the
FC weights) keep their own row open while the PIM's all-bank MACs (the KV)
keep theirs, so the two proceed in one bank at the same time. They still
share the channel's command bus (one command per cycle) and every
channel- and bank-group-level rule of the constraint table
(``golden.timing``): tCCD between any two column commands (a MAC and a RD
alike), tRRD between ACTs, tFAW, and the device's modes (a RD needs normal
mode, so none issues while the PIM is in register-access mode for its
WR-INP / RD-OUT; once the PIM has no command left, the reads switch the
device back themselves).

**Arbitration (an assumption: NeuPIMs' controller gives no figure).** The
PIM stream comes first: it runs exactly as it runs alone (its commands at
the cycles of :class:`golden.channel.ChannelModel`'s trace, any
controller policy), and a weight read, or the PRE/ACT that opens its row,
takes a cycle only where it delays no PIM command: the command bus is free
in that cycle and no rule from it to a later PIM command would push that
command. The reads are the weights laid out bank-interleaved, one DRAM row
(``cols`` words of 32 B) per bank in turn; the next bank's row is opened
ahead while the current one streams (as ``ACT_AHEAD`` does on a dual-path
channel).

:func:`fill` is the cycle-exact merge. The system model composes with two
figures measured on it: a kernel's **read slots** (reads that fit beside it,
the read supply unlimited) and the **read period** (cycles per read when the
reads run alone). A channel with PIM work of ``p`` cycles and ``s`` slots
serving ``r`` reads then takes ``p + max(0, r - s) x period`` cycles
(:func:`segment_cycles`), which ``tests/test_golden_overlap.py`` checks
against :func:`fill` on the merged stream.

Two bank variants (``BANKS``):

* ``dual``: NeuPIMs' dual row buffer, and LibraPIM's dual-path banks
  (DEX; docs/dual-path.md) with the weights and the KV in different
  partitions. Both are modelled as the dual-path channel's two row-buffer
  units per bank (``golden.banks.BankTimer`` with two partitions): the
  reads use one unit of each bank, the PIM the other. The column rules
  (tCCD, tCCD_L) still space a read from a MAC, as on the RTL-verified
  sliced channel.
* ``conventional``: one row buffer and one set of local I/O lines per bank
  (AiM, AttAcc): a bank either serves a read or the PIM. The reads share
  the PIM's units; a read's row opens only in a bank the PIM has closed,
  and only when its ACT, a read and its PRE fit before the PIM's next
  command (the PIM's next ACT then finds the bank closed, tRP and tRC
  after the reads' commands). In a kernel the PIM closes its rows only for
  tRP between two rows, so almost no reads fit beside it: the channel
  serves the two in turn.

Refresh is left out here, as in :mod:`golden.system.kernel_timing` (which
adds it on its own clock).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from golden.banks import BankTimer, kind_of
from golden.channel import ChannelModel
from golden.config import ChannelConfig, ConfigError, check_one_of
from golden.isa import LANES
from golden.kernels import Kernel

#: Bytes one RD moves: one 256-bit word.
READ_BYTES = LANES * 2
#: Reads the read period is measured over: whole rows of every bank, twice.
PERIOD_ROWS = 2
#: Bank variants of the merge (module docstring).
BANKS = ("dual", "conventional")
#: Row marker of a row the PIM opened (conventional banks): no read's row.
PIM_ROW = -1
#: Cycles a read's PRE keeps in hand before the deadline the PIM's next
#: command sets (conventional banks), for the command bus.
PRE_MARGIN = 4


def without_refresh(cfg: ChannelConfig) -> ChannelConfig:
    """The channel with refresh off (refresh is added on its own clock)."""
    return cfg.replace(t_refi=0, t_rfc=0) if cfg.timing.t_refi else cfg


def pim_trace(cfg: ChannelConfig, kernel: Kernel) -> tuple[list[tuple[int, str]], int]:
    """``([(cycle, kind)], cycles)`` of ``kernel`` run alone on the channel
    without refresh, each command as its constraint kind."""
    r = ChannelModel(without_refresh(cfg)).run(kernel.commands, kernel.wdata)
    return [(e.cycle, kind_of(e.opcode)) for e in r.trace], r.cycles


class _Pim:
    """The PIM's commands, fixed in time: per kind, their sorted cycles."""

    def __init__(self, events: list[tuple[int, str]]):
        self.events = sorted(events)
        self.cycles = {c for c, _ in self.events}
        self.by_kind: dict[str, list[int]] = {}
        for c, k in self.events:
            self.by_kind.setdefault(k, []).append(c)


def check_banks(banks: str) -> None:
    check_one_of("banks", banks, BANKS)


def fill(cfg: ChannelConfig, events: list[tuple[int, str]], reads: int | None,
         stop: int | None = None, banks: str = "dual") -> dict:
    """Issue ``reads`` weight reads (``None``: unlimited) beside the PIM
    commands ``events`` (``(cycle, kind)``, as :func:`pim_trace` gives
    them) on ``banks`` (``BANKS``), never delaying one. Stops when the
    reads are done or at cycle ``stop``. Returns ``reads`` (issued),
    ``last`` (the cycle after the last read, 0 if none) and ``acts`` (rows
    the reads opened)."""
    if reads is None and stop is None:
        raise ValueError("fill: unlimited reads need a stop cycle")
    check_banks(banks)
    shared = banks == "conventional"
    tm = cfg.timing
    n = cfg.banks
    timer = BankTimer(n, tm, slice_rows=0 if shared else 1, bank_groups=cfg.bank_groups)
    pim = _Pim(events)
    pim_units = list(range(n)) if shared else list(range(n, 2 * n))
    # rules from a read's command to a later PIM command (channel and bank-group
    # level; on conventional banks the bank's own rules too: the units are shared)
    levels = ("channel", "bankgroup", "bank") if shared else ("channel", "bankgroup")
    after = [(c.following, c.preceding, c.latency, c.window) for c in timer.rules
             if c.level in levels]
    # the PIM's commands that need a conventional bank closed, or its own row open
    bank_cycles = sorted(c for c, k in pim.events if k in ("PRE", "ACT", "RD", "MODE"))
    mine: dict[str, list[int]] = {}  # the reads' own commands, per kind, in order
    applied = 0
    done = acts = 0
    last = 0
    block = 0  # the block (bank, row) being read; each is ``cols`` reads
    in_block = 0
    t = 0

    def catch_up(until: int) -> None:
        nonlocal applied
        while applied < len(pim.events) and pim.events[applied][0] < until:
            c, k = pim.events[applied]
            units = pim_units if k in ("PRE", "ACT", "RD") else []
            timer.apply(k, units, c, PIM_ROW if shared else 1)
            applied += 1

    def count(kinds, lo: int, hi: int, extra: int) -> int:
        """Commands of ``kinds`` in cycles (lo, hi), PIM and reads, plus ``extra``."""
        total = extra
        for k in kinds:
            for cyc in (pim.by_kind.get(k, ()), mine.get(k, ())):
                total += bisect_left(cyc, hi) - bisect_right(cyc, lo)
        return total

    def delays_pim(kind: str, c: int) -> bool:
        for following, preceding, latency, window in after:
            if kind not in preceding:
                continue
            for k in following:
                cyc = pim.by_kind.get(k, ())
                i = bisect_right(cyc, c)
                while i < len(cyc) and cyc[i] < c + latency:
                    # a PIM command of kind k at cyc[i]: the rule holds if fewer than
                    # ``window`` preceding commands fall in (cyc[i] - latency, cyc[i])
                    if count(preceding, cyc[i] - latency, cyc[i], 1) >= window:
                        return True
                    i += 1
        return False

    # the weights' layout: a block is one row in each of ``groups`` banks of
    # different bank groups, its reads alternating them (tCCD_S apart), where
    # the device spaces reads in one group further (tCCD_L > tCCD); else one
    # row of one bank
    groups = cfg.bank_groups if tm.t_ccd_l > tm.t_ccd and n % cfg.bank_groups == 0 else 1
    per = n // groups
    size = cfg.cols * groups  # reads a block

    def action(b: int, i: int) -> tuple[str, int, int]:
        """(kind, unit, row) read ``i`` of block ``b`` needs next: PRE, ACT or RD."""
        bank, row = (i % groups) * per + b % per, b // per
        open_row = timer.open_row[bank]
        if open_row is None:
            return "ACT", bank, row
        if open_row != row:
            return "PRE", bank, row
        return "RD", bank, row

    # conventional banks: the cycles a read's ACT, RD and PRE need before the
    # PIM's next bank command (its ACT finds the bank closed, tRC and tRP after
    # ours), besides one cycle for the PRE of each row the reads hold open
    act_room = max(tm.t_rc, max(tm.t_ras, tm.t_rcd + tm.t_rtp) + tm.t_rp) + 1 + PRE_MARGIN
    rd_room = tm.t_rtp + tm.t_rp + PRE_MARGIN

    def fits(kind: str, unit: int, t: int) -> bool:
        """Conventional banks: ``kind`` on ``unit`` at ``t`` leaves the bank
        as the PIM's next command needs it."""
        i = bisect_left(bank_cycles, t)
        room = bank_cycles[i] - t if i < len(bank_cycles) else None
        if kind == "PRE":  # the PIM's row closes only once the PIM is done with the banks
            return timer.open_row[unit] != PIM_ROW or room is None
        held = sum(r not in (None, PIM_ROW) for r in timer.open_row)
        return room is None or room >= (act_room if kind == "ACT" else rd_room) + held

    def closing(t: int) -> list[tuple[str, int, int]]:
        """Conventional banks: PREs of the reads' rows that can take no more
        reads before the PIM needs the banks."""
        return [("PRE", u, 0) for u, r in enumerate(timer.open_row)
                if r not in (None, PIM_ROW) and not fits("RD", u, t)]

    while (reads is None or done < reads) and (stop is None or t < stop):
        catch_up(t)
        left = None if reads is None else reads - done
        options = [action(block, in_block)]
        # the rows of the block's other banks open beside it; the next block's
        # first row ahead, once the current read's row is open
        for j in range(1, min(groups, size - in_block)):
            a = action(block, in_block + j)
            if a[0] != "RD":
                options.append(a)
        if options[0][0] == "RD" and (left is None or left > size - in_block) and n > 1:
            for j in range(groups):
                a = action(block + 1, j)
                if a[0] != "RD":
                    options.append(a)
                    break
        if shared:
            options = closing(t) or [o for o in options if fits(o[0], o[1], t)]
            if not options:  # nothing fits before the PIM's next bank command: after it
                i = bisect_left(bank_cycles, t)
                t = bank_cycles[i] + 1 if i < len(bank_cycles) else t + 1
                continue
        ready = [max(t, timer.earliest(k, [u])) for k, u, _ in options]
        c = min(ready)
        if c > t:  # nothing can issue before c: move there (and apply the PIM up to it)
            t = c
            continue
        if timer.register_mode:  # reads need normal mode: the PIM's switch back, or ours
            modes = pim.by_kind.get("MODE", [])
            i = bisect_left(modes, t)
            if i < len(modes):
                t = modes[i] + 1
                continue
            if pim.events and pim.events[-1][0] >= t:  # the PIM still has register accesses
                t = pim.events[-1][0] + 1
                continue
            c = max(t, timer.earliest("MODE", []))
            if stop is not None and c >= stop:
                break
            timer.apply("MODE", [], c, 0)
            mine.setdefault("MODE", []).append(c)
            t = c + 1
            continue
        if t not in pim.cycles:
            for (kind, unit, row), r in zip(options, ready, strict=True):
                if r <= t and not delays_pim(kind, t):
                    timer.apply(kind, [unit], t, row)
                    mine.setdefault(kind, []).append(t)
                    if kind == "RD":
                        done += 1
                        in_block += 1
                        last = t + 1
                        if in_block == size:
                            block, in_block = block + 1, 0
                    elif kind == "ACT":
                        acts += 1
                    break
        t += 1
    return {"reads": done, "last": last, "acts": acts}


def read_slots(cfg: ChannelConfig, kernel: Kernel, banks: str = "dual") -> int:
    """Reads that fit beside ``kernel`` on ``banks`` (the read supply unlimited)."""
    events, cycles = pim_trace(cfg, kernel)
    return fill(cfg, events, None, stop=cycles, banks=banks)["reads"]


def read_period(cfg: ChannelConfig) -> float:
    """Cycles per weight read with the channel to the reads alone."""
    n = PERIOD_ROWS * cfg.banks * cfg.cols
    return fill(cfg, [], n)["last"] / n


def merged_cycles(cfg: ChannelConfig, kernel: Kernel, reads: int, banks: str = "dual") -> int:
    """Cycle-exact: ``kernel`` with ``reads`` weight reads beside it on
    ``banks``, the cycle after the later of the two."""
    events, cycles = pim_trace(cfg, kernel)
    return max(cycles, fill(cfg, events, reads, banks=banks)["last"])


def segment_cycles(pim_cycles, slots, reads, period: float):
    """A channel's PIM work of ``pim_cycles`` with ``slots`` read slots
    serving ``reads`` weight reads: the reads beyond the slots run after
    the PIM, alone (numpy arrays or numbers)."""
    return pim_cycles + np.maximum(0, np.asarray(reads) - slots) * period


def reads_for(weight_bytes: int, channels: int) -> int:
    """Reads per channel for ``weight_bytes`` spread evenly over ``channels``."""
    if channels < 1:
        raise ConfigError(f"channels must be at least 1, not {channels}")
    return -(-int(weight_bytes) // (channels * READ_BYTES))
