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
beyond: the streams repeat unit by unit, so after the first unit the
cycles grow by a constant step per unit, or (a stream whose units
alternate) by a constant step per two units. The period is 1 when the
last two measured steps agree, else 2 (:meth:`KernelTimer.period`).
``tests/test_golden_system.py`` compares fast with exact on every shape the
studies use and fails above 2 %.

Every run is split into cycle labels (each cycle counted once, in this
priority): ``mac`` (a MAC in flight: issue to issue + tCCD), ``act_pre``
(inside an ACT's tRCD or a PRE's tRP window), ``io`` (everything else:
WR-INP / RD-OUT bursts and waits). The labels sum to the cycles.

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

from golden.channel import ChannelModel
from golden.config import ChannelConfig
from golden.isa import LANES, Opcode
from golden.kernels import Kernel, fc, qkt, sv

KINDS = ("qkt", "sv", "fc")
LABELS = ("cycles", "mac", "act_pre", "io")
#: Units run cycle-exactly per shape in fast mode; beyond, linear.
CALIBRATE = {"qkt": 4, "sv": 4, "fc": 3}
MODES = ("fast", "exact")


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


def labels(cfg: ChannelConfig, kernel: Kernel) -> dict[str, int]:
    """Run ``kernel`` cycle-exactly; its cycles split into labels."""
    r = ChannelModel(cfg).run(kernel.commands, kernel.wdata)
    tm = cfg.timing
    mac = np.zeros(r.cycles + tm.t_ccd + 1, dtype=bool)
    row = np.zeros_like(mac)
    for e in r.trace:
        if e.opcode == Opcode.MAC:
            mac[e.cycle:e.cycle + tm.t_ccd] = True
        elif e.opcode == Opcode.ACT:
            row[e.cycle:e.cycle + tm.t_rcd] = True
        elif e.opcode == Opcode.PRE:
            row[e.cycle:e.cycle + tm.t_rp] = True
    mac, row = mac[:r.cycles], row[:r.cycles]
    n_mac = int(mac.sum())
    n_row = int((row & ~mac).sum())
    return {"cycles": r.cycles, "mac": n_mac, "act_pre": n_row,
            "io": r.cycles - n_mac - n_row}


def _source_digest() -> str:
    h = hashlib.sha1()
    golden = Path(__file__).resolve().parent.parent
    for name in ("channel.py", "streams.py", "banks.py", "dcs.py", "kernels.py",
                 "system/kernel_timing.py", "config.py"):
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
        self.table: dict[str, list[dict[str, int]]] = dict(table or {})
        self._exact: dict[tuple[str, int], dict[str, int]] = {}

    # -- calibration -------------------------------------------------------

    def calibration(self, shape: Shape) -> list[dict[str, int]]:
        """Labels for 1 .. CALIBRATE[kind] units (cached)."""
        k = shape.key()
        if k not in self.table:
            disk = _disk_cache()
            dk = f"{_source_digest()}|{config_key(self.cfg)}|{k}"
            if disk is not None and dk in disk["entries"]:
                self.table[k] = disk["entries"][dk]
            else:
                self.table[k] = [labels(self.cfg, shape.build(self.cfg, u))
                                 for u in range(1, CALIBRATE[shape.kind] + 1)]
                if disk is not None:
                    disk["entries"][dk] = self.table[k]
                    _disk_save(disk)
        return self.table[k]

    # -- evaluation --------------------------------------------------------

    def exact(self, shape: Shape, units: int) -> dict[str, int]:
        key = (shape.key(), int(units))
        if key not in self._exact:
            self._exact[key] = labels(self.cfg, shape.build(self.cfg, int(units)))
        return self._exact[key]

    def fast(self, shape: Shape, units) -> dict[str, np.ndarray]:
        """Labels for an array of unit counts (0 units: 0 cycles)."""
        cal = self.calibration(shape)
        u = np.asarray(units, dtype=np.int64)
        n = len(cal)
        period = self.period(cal)
        # beyond n: k whole periods past a measured unit of the same phase
        k = np.maximum(-(-(u - n) // period), 0)
        base = np.minimum(u - k * period, n)
        out = {}
        for lab in LABELS:
            measured = np.array([0] + [c[lab] for c in cal], dtype=np.int64)
            out[lab] = measured[base] + k * (measured[n] - measured[n - period])
        return out

    @staticmethod
    def period(cal: list[dict[str, int]]) -> int:
        """Units after which the stream's cycles repeat their steps: 1, or 2
        when the last two steps differ (a stream whose units alternate, such as
        one that takes turns on two buffer halves)."""
        c = [0] + [x["cycles"] for x in cal]
        return 1 if c[-1] - c[-2] == c[-2] - c[-3] else 2

    def __call__(self, shape: Shape, units) -> dict[str, np.ndarray]:
        if self.mode == "fast":
            return self.fast(shape, units)
        u = np.asarray(units, dtype=np.int64)
        out = {lab: np.zeros(u.shape, dtype=np.int64) for lab in LABELS}
        for value in np.unique(u):
            if value > 0:
                lab = self.exact(shape, int(value))
                for name in LABELS:
                    out[name][u == value] = lab[name]
        return out


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
