"""Device timing as data (docs/timing.md): the bank-timing rules of a
channel as a table of constraints, in the form of Ramulator 2's device
models: ``(level, preceding command kinds, following command kinds,
latency)``, "at ``level``, a following command waits ``latency`` cycles
after the ``window``-th most recent preceding one".

One table drives the golden bank timer (``golden.banks.BankTimer``) and
the RTL's timing counters (``hw.banks.BankTiming``: one down-counter per
constraint and level instance, a chain of ``window`` counters for a
windowed one, generated from the table). The latencies come from the
device profile's timing keys (``golden.config.Timing``; their sources are
in the profile).

Command kinds: ``PRE`` and ``ACT`` (of the banks a command needs closed or
opened; an all-bank ACT is one command), ``RD`` and ``WR`` (the column
access of a command that touches banks: MAC, RD and the ALU channel's LD
read; WR and the ALU channel's ST write), ``GB`` and ``REG`` (WR-INP's
global-buffer write and RD-OUT's read of the MAC results: the device's
register accesses, which touch no bank) and ``MODE`` (the switch between
the device's normal and register-access modes, on a device that has them:
``t_modch`` > 0) and ``REF`` (an all-bank refresh, at every unit, on a
device with ``t_refi`` > 0). Levels: ``channel`` (one instance), ``bankgroup`` (one per
bank group) and ``bank`` (one per row-buffer unit: a bank, or a partition
of a dual-path bank).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("PRE", "ACT", "RD", "WR", "GB", "REG", "MODE", "REF")
COLUMN = ("RD", "WR")
#: Kinds that need the device's register-access mode (the rest but MODE
#: need normal mode), on a device with modes.
REGISTER_KINDS = ("GB", "REG")
LEVELS = ("channel", "bankgroup", "bank")


@dataclass(frozen=True)
class Constraint:
    """At ``level``, a command of a ``following`` kind waits ``latency``
    cycles after the ``window``-th most recent command of a ``preceding``
    kind at the same level instance. ``key``: the profile's timing key the
    latency comes from."""

    key: str
    level: str
    preceding: tuple[str, ...]
    following: tuple[str, ...]
    latency: int
    window: int = 1

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"constraint {self.key}: level {self.level!r} is not one of {LEVELS}")
        for kind in (*self.preceding, *self.following):
            if kind not in KINDS:
                raise ValueError(f"constraint {self.key}: command kind {kind!r} is not one of "
                                 f"{KINDS}")
        if self.latency < 1 or self.window < 1:
            raise ValueError(f"constraint {self.key}: latency and window must be >= 1")


#: The rules, (key, level, preceding, following, window). A key whose value
#: is 0 in the profile (an optional one, ``golden.config.OPTIONAL_TIMING``)
#: leaves its row out of the table.
RULES = (
    ("t_ras", "bank", ("ACT",), ("PRE",), 1),  # ACT to PRE of the same bank
    ("t_rp", "bank", ("PRE",), ("ACT", "REF"), 1),  # PRE to ACT (or REF) of the same bank
    ("t_rc", "bank", ("ACT",), ("ACT", "REF"), 1),  # ACT to ACT (or REF) of the same bank
    ("t_rcd", "bank", ("ACT",), COLUMN, 1),  # ACT to a column access of the bank
    ("t_rtp", "bank", ("RD",), ("PRE",), 1),  # a read to PRE of the bank
    ("t_wr", "bank", ("WR",), ("PRE",), 1),  # a write to PRE of the bank (write recovery)
    ("t_ccd", "channel", COLUMN, COLUMN, 1),  # column to column on the channel
    ("t_ccd_l", "bankgroup", COLUMN, COLUMN, 1),  # column to column in a bank group
    ("t_wtr", "channel", ("WR",), ("RD",), 1),  # write to read turnaround
    ("t_rrd_s", "channel", ("ACT",), ("ACT",), 1),  # ACT to ACT on the channel
    ("t_rrd_l", "bankgroup", ("ACT",), ("ACT",), 1),  # ACT to ACT in a bank group
    ("t_faw", "channel", ("ACT",), ("ACT",), 4),  # at most four ACTs in a window
    ("t_ccd_reg", "channel", REGISTER_KINDS, REGISTER_KINDS, 1),  # register to register
    ("t_wtr_reg", "channel", ("GB",), ("REG",), 1),  # GBuf write to register read
    ("t_rtw_reg", "channel", ("REG",), ("GB",), 1),  # register read to GBuf write
    ("t_modch", "channel", ("MODE",), KINDS, 1),  # a mode switch, then nothing for t_modch
    ("t_rfc", "channel", ("REF",), ("ACT", "REF"), 1),  # a refresh, then no ACT for t_rfc
)


def constraints(timing) -> tuple[Constraint, ...]:
    """The constraint table of a ``golden.config.Timing``."""
    out = []
    for key, level, preceding, following, window in RULES:
        latency = getattr(timing, key)
        if latency:
            out.append(Constraint(key, level, preceding, following, latency, window))
    return tuple(out)


def bank_group_of(units: int, banks: int, bank_groups: int) -> list[int]:
    """The bank group of every row-buffer unit (unit ``u`` is bank
    ``u % banks``; banks split evenly over the groups)."""
    return [(u % banks) // (banks // bank_groups) for u in range(units)]


def table(timing) -> list[dict]:
    """The table as rows for docs and JSON."""
    return [{"key": c.key, "level": c.level, "preceding": "/".join(c.preceding),
             "following": "/".join(c.following), "latency": c.latency, "window": c.window}
            for c in constraints(timing)]
