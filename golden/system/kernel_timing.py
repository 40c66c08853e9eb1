"""Kernel timings for the system model: cycle-exact or fast (DESIGN.md §4).

A kernel shape is one of the channel command streams of
:mod:`golden.kernels` (QK^T, SV, FC) under one channel configuration
(profile, geometry, controller policy). Its size is counted in *units*, the
period of the stream:

* ``qkt``: one DRAM row of keys per bank, ``banks x cols / (d_head / 16)``
  tokens;
* ``sv``: one DRAM row of values, ``16 x cols / (d_head / banks)`` tokens;
* ``fc``: one group of ``banks`` outputs (one output per bank).

**Exact mode** builds the stream of ``units`` units and runs it through
:class:`golden.channel.ChannelModel`. **Fast mode** runs the cycle-exact
model once per shape on ``1 .. CALIBRATE[kind]`` units and extrapolates
beyond: the streams repeat, so after the first units the cycles grow by
a repeating pattern of steps: one step per unit, or per two units (a
stream whose units alternate buffer halves), or a longer pattern where
mode switches and row switches fall out of step. The period is the
shortest whose last two repeats of steps agree (:meth:`KernelTimer.period`;
half the calibration if none does).
``tests/test_golden_system.py`` compares fast with exact on every shape the
studies use and fails above 2 %.

Refresh (a profile with ``t_refi``) runs on the channel's own clock: in
a system the kernels run back to back and a refresh falls due every
``t_refi`` cycles whatever kernel runs, not ``t_refi`` after each kernel
starts (as in one cycle-exact run from reset). Both modes therefore time
a kernel on the channel without refresh and add its expected refreshes:
``b / (t_refi - r)`` for ``b`` cycles without refresh, each adding to
every label what one refresh added, per shape, on a cycle-exact run of
about eight refresh intervals with and without refresh (``r`` cycles).

Every run is split into cycle labels (each cycle counted once, in this
priority): ``mac`` (a MAC in flight: issue to issue + tCCD), ``refresh``
(inside a REF's tRFC window), ``mode`` (inside a mode switch's nMODCH
window), ``act_pre`` (inside an ACT's tRCD or a PRE's tRP window), ``io``
(everything else: WR-INP / RD-OUT bursts and waits). The labels sum to
the cycles.

Energy (docs/energy.md) comes the same way: every run also counts what
its energy is priced from (:data:`golden.energy.COUNTS`: bank
activations, precharges and MACs, column commands, refreshes, cycles
with a row open), the fast mode extrapolates the counts like the labels,
and :meth:`KernelTimer.energy` prices them with the profile's table
(:func:`golden.energy.priced`, the pricing of a cycle-exact trace).

Calibrations are cached in memory and, keyed by the channel model's source
and the configuration, on disk (``PIMORCH_KERNEL_CACHE``, default
``build/kernel-cache.json``; ``PIMORCH_KERNEL_CACHE=off`` disables it).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from golden import energy as energy_model
from golden.channel import ChannelModel
from golden.config import ChannelConfig
from golden.isa import LANES, Opcode
from golden.kernels import Kernel, fc, qkt, sv
from golden.system import overlap

KINDS = ("qkt", "sv", "fc")
LABELS = ("cycles", "mac", "refresh", "mode", "act_pre", "io")
#: Everything a timing carries: the cycle labels and the energy counts.
ALL = LABELS + energy_model.COUNTS
#: Refresh intervals the per-refresh calibration run spans, about.
REFRESH_RUN = 8
#: Units run cycle-exactly per shape in fast mode; beyond, linear.
CALIBRATE = {"qkt": 12, "sv": 12, "fc": 6}
MODES = ("fast", "exact")
#: Units at which fast mode measures a shape's weight-read slots.
SLOT_UNITS = (6, 12)


@dataclass(frozen=True)
class Shape:
    """One kernel shape: ``kind`` with ``d`` (d_head for attention, d_in for
    FC) and ``group`` (GQA queries sharing a KV head; 1 for FC)."""

    kind: str
    d: int
    group: int = 1

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kernel kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.d < LANES or self.d % LANES:
            raise ValueError(f"{self.kind}: d={self.d} must be a positive multiple of {LANES}")

    def tokens_per_unit(self, cfg: ChannelConfig) -> int:
        """Tokens one unit of an attention kernel covers (one DRAM row)."""
        if self.kind == "qkt":
            return cfg.banks * (cfg.cols // (self.d // LANES))
        if self.kind == "sv":
            return LANES * (cfg.cols // max(1, self.d // cfg.banks))
        raise ValueError("fc kernels are counted in output groups, not tokens")

    def units(self, cfg: ChannelConfig, n) -> np.ndarray:
        """Units covering ``n`` tokens (attention) or ``n`` outputs (FC)."""
        per = cfg.banks if self.kind == "fc" else self.tokens_per_unit(cfg)
        return -(-np.asarray(n, dtype=np.int64) // per)

    def build(self, cfg: ChannelConfig, units: int) -> Kernel:
        if self.kind == "fc":
            return fc(cfg, self.d, units * cfg.banks)
        make = qkt if self.kind == "qkt" else sv
        return make(cfg, self.d, self.group, units * self.tokens_per_unit(cfg))

    def key(self) -> str:
        return f"{self.kind}:{self.d}:{self.group}"


def trace_labels(cfg: ChannelConfig, trace, lo: int, hi: int) -> dict[str, int]:
    """The cycles ``lo .. hi - 1`` of a channel's ``trace`` split into labels
    (the module docstring's, in its priority)."""
    tm = cfg.timing
    span = hi - lo
    windows = {lab: np.zeros(span, dtype=bool) for lab in ("mac", "refresh", "mode", "act_pre")}
    width = {Opcode.MAC: ("mac", tm.mac_ccd), Opcode.REF: ("refresh", tm.t_rfc),
             Opcode.MODE: ("mode", tm.t_modch), Opcode.ACT: ("act_pre", tm.t_rcd),
             Opcode.PRE: ("act_pre", tm.t_rp)}
    for e in trace:
        if e.opcode in width:
            lab, n = width[e.opcode]
            windows[lab][max(e.cycle - lo, 0):max(e.cycle + n - lo, 0)] = True
    out, taken = {"cycles": span}, np.zeros(span, dtype=bool)
    for lab, w in windows.items():  # in priority order
        mine = w & ~taken
        out[lab] = int(mine.sum())
        taken |= mine
    out["io"] = span - int(taken.sum())
    return out


def labels(cfg: ChannelConfig, kernel: Kernel) -> dict[str, int]:
    """Run ``kernel`` cycle-exactly; its cycles split into labels."""
    r = ChannelModel(cfg).run(kernel.commands, kernel.wdata)
    out = trace_labels(cfg, r.trace, 0, r.cycles)
    # the energy counts, refreshes among them
    return {**out, **energy_model.trace_counts(cfg, kernel.commands, r.trace, r.cycles)}


def _source_digest() -> str:
    h = hashlib.sha1()
    golden = Path(__file__).resolve().parent.parent
    for name in ("channel.py", "energy.py", "streams.py", "banks.py", "dcs.py", "kernels.py",
                 "system/kernel_timing.py", "system/overlap.py", "config.py", "timing.py"):
        h.update((golden / name).read_bytes())
    return h.hexdigest()[:12]


def config_key(cfg: ChannelConfig) -> str:
    return f"{cfg.describe()} io{cfg.io_depth} cq{cfg.compute_depth}"


class KernelTimer:
    """Cycle labels of kernel shapes on one channel configuration, per
    number of units, in ``mode`` ``fast`` or ``exact``."""

    _disk: dict | None = None

    def __init__(self, cfg: ChannelConfig, mode: str = "fast", table: dict | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.cfg, self.mode = cfg, mode
        #: the channel without refresh (refresh is added on its own clock)
        self.plain = overlap.without_refresh(cfg)
        self.table: dict[str, list[dict[str, int]]] = dict(table or {})
        self._exact: dict[tuple[str, int], dict[str, int]] = {}

    # -- calibration -------------------------------------------------------

    def _cached(self, key: str, make):
        """``self.table[key]``, else from the disk cache (keyed by the channel
        model's source and the configuration), else ``make()``, stored in both."""
        if key not in self.table:
            disk = _disk_cache()
            dk = f"{_source_digest()}|{config_key(self.cfg)}|{key}"
            if disk is not None and dk in disk["entries"]:
                self.table[key] = disk["entries"][dk]
            else:
                self.table[key] = make()
                if disk is not None:
                    disk["entries"][dk] = self.table[key]
                    _disk_save(disk)
        return self.table[key]

    def calibration(self, shape: Shape) -> dict:
        """Labels for 1 .. CALIBRATE[kind] units (``units``); with refresh
        also without it (``base``) and what one refresh adds to each label
        (``per_refresh``). Cached."""
        return self._cached(shape.key(), lambda: self._calibrate(shape))

    def _calibrate(self, shape: Shape) -> dict:
        n = CALIBRATE[shape.kind]
        plain = self.plain
        cal: dict = {"units": [labels(plain, shape.build(plain, u)) for u in range(1, n + 1)]}
        tm = self.cfg.timing
        if tm.t_refi:
            base = cal["units"]
            step = max(1, base[-1]["cycles"] - base[-2]["cycles"] if n > 1
                       else base[-1]["cycles"])
            run = max(n + 1, REFRESH_RUN * tm.t_refi // step)
            with_ref = labels(self.cfg, shape.build(self.cfg, run))
            without = labels(plain, shape.build(plain, run))
            count = max(1, with_ref["refreshes"])
            cal["per_refresh"] = {lab: (with_ref[lab] - without[lab]) / count for lab in ALL}
        return cal

    def _refreshed(self, shape: Shape, out: dict) -> dict:
        """``out`` (labels without refresh) with the kernel's expected
        refreshes on the channel's own refresh clock (module docstring)."""
        per = self.calibration(shape).get("per_refresh")
        if per is None:
            return out
        count = out["cycles"] / max(1.0, self.cfg.timing.t_refi - per["cycles"])
        out = {lab: out[lab] + count * per[lab] for lab in ALL}
        out["io"] = out["cycles"] - sum(out[lab] for lab in LABELS[1:-1])
        return out

    # -- weight-read slots (golden.system.overlap) -------------------------

    def read_period(self) -> float:
        """Cycles per weight read with the channel to the reads alone."""
        return self._cached("read-period", lambda: overlap.read_period(self.plain))

    @staticmethod
    def _slot_key(shape: Shape, banks: str) -> str:
        overlap.check_banks(banks)
        return f"slots|{shape.key()}" if banks == "dual" else f"slots|{banks}|{shape.key()}"

    def slot_calibration(self, shape: Shape, banks: str = "dual") -> list[int]:
        """Read slots beside ``SLOT_UNITS`` units of ``shape`` on ``banks``
        (``overlap.BANKS``). Cached."""
        return self._cached(self._slot_key(shape, banks), lambda: [
            overlap.read_slots(self.plain, shape.build(self.plain, u), banks)
            for u in SLOT_UNITS])

    def slots(self, shape: Shape, units, banks: str = "dual") -> np.ndarray:
        """Weight reads that fit beside ``units`` units of ``shape`` on
        ``banks`` (array). Fast: linear through the calibration points (0,
        0), (6, s6), (12, s12) and on with the last slope; exact: the merge
        run at each count."""
        u = np.asarray(units, dtype=np.int64)
        if self.mode == "exact":
            out = np.zeros(u.shape, dtype=np.float64)
            for value in np.unique(u):
                if value > 0:
                    key = (self._slot_key(shape, banks), int(value))
                    if key not in self._exact:
                        self._exact[key] = overlap.read_slots(
                            self.plain, shape.build(self.plain, int(value)), banks)
                    out[u == value] = self._exact[key]
            return out
        cal = self.slot_calibration(shape, banks)
        xs, ys = [0, *SLOT_UNITS], [0, *cal]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return np.where(u <= xs[-1], np.interp(u, xs, ys), ys[-1] + (u - xs[-1]) * slope)

    # -- evaluation --------------------------------------------------------

    def exact(self, shape: Shape, units: int) -> dict:
        key = (shape.key(), int(units))
        if key not in self._exact:
            lab = labels(self.plain, shape.build(self.plain, int(units)))
            self._exact[key] = self._refreshed(shape, {x: lab[x] for x in ALL})
        return self._exact[key]

    def fast(self, shape: Shape, units) -> dict[str, np.ndarray]:
        """Labels for an array of unit counts (0 units: 0 cycles)."""
        steps = self.calibration(shape)["units"]
        u = np.asarray(units, dtype=np.int64)
        n = len(steps)
        period = self.period(steps)
        # beyond n: k whole periods past a measured unit of the same phase
        k = np.maximum(-(-(u - n) // period), 0)
        at = np.minimum(u - k * period, n)
        out = {lab: np.array([0] + [c[lab] for c in steps], dtype=np.int64)[at]
                    + k * (steps[n - 1][lab] - (steps[n - 1 - period][lab] if n > period else 0))
               for lab in ALL}
        return self._refreshed(shape, out)

    @staticmethod
    def period(cal: list[dict[str, int]]) -> int:
        """Units after which the stream's steps repeat: the shortest period
        whose last two repeats agree (1: a constant step; 2: a stream whose
        units alternate), else half the calibration."""
        c = [0] + [x["cycles"] for x in cal]
        steps = [b - a for a, b in zip(c[1:], c[2:], strict=False)]  # from the second unit
        for p in range(1, len(steps) // 2 + 1):
            if steps[-p:] == steps[-2 * p:-p]:
                return p
        return max(1, len(cal) // 2)

    def __call__(self, shape: Shape, units) -> dict[str, np.ndarray]:
        if self.mode == "fast":
            return self.fast(shape, units)
        u = np.asarray(units, dtype=np.int64)
        out = {lab: np.zeros(u.shape, dtype=np.float64) for lab in ALL}
        for value in np.unique(u):
            if value > 0:
                lab = self.exact(shape, int(value))
                for name in ALL:
                    out[name][u == value] = lab[name]
        return out

    def energy(self, shape: Shape, units, params: energy_model.EnergyParams,
               t_ck_ns: float) -> dict:
        """Energy (pJ) of ``units`` (array) of ``shape``: ``total_pj`` and
        ``breakdown`` (arrays per :data:`golden.energy.CATEGORIES`), the
        counts of this mode priced with ``params``."""
        got = self(shape, units)
        return energy_model.priced(params, t_ck_ns, got, got["cycles"])


def _cache_path() -> Path | None:
    where = os.environ.get("PIMORCH_KERNEL_CACHE", "build/kernel-cache.json")
    return None if where.lower() in ("off", "0", "") else Path(where)


def _disk_cache() -> dict | None:
    path = _cache_path()
    if path is None:
        return None
    if KernelTimer._disk is None or KernelTimer._disk.get("path") != str(path):
        entries = {}
        if path.is_file():
            try:
                entries = json.loads(path.read_text()).get("entries", {})
            except (OSError, ValueError):
                entries = {}
        KernelTimer._disk = {"path": str(path), "entries": entries}
    return KernelTimer._disk


def _disk_save(disk: dict) -> None:
    """Write the cache, merged with what other processes (Dask workers)
    wrote meanwhile, through a rename so readers never see half a file."""
    path = Path(disk["path"])
    try:
        if path.is_file():
            try:
                disk["entries"] = {**json.loads(path.read_text()).get("entries", {}),
                                   **disk["entries"]}
            except ValueError:
                pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"entries": disk["entries"]}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only checkout: calibrate again next time
