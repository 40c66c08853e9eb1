"""Heterogeneous PIM for NN training: fixed-function PIMs, a programmable
PIM and the CPU under one runtime (DESIGN.md §2.7, REFERENCE.md).

Workloads (``build_graph``, ``golden/system/hetero_nets.py``)
    Training steps of the seven workloads as operation graphs
    (TensorFlow-style op types) written from the networks' layer shapes.

Profile (``profile``)
    One step on the CPU: each op at the CPU's roofline (its multiply/adds,
    its other work and its bytes at the CPU's assumed rates); memory
    accesses are the op's bytes in 64 B lines. The shares REFERENCE.md
    publishes for three workloads are a check on it (``profile_check``).
    ``profile="published"`` instead scales the profiled op types to their
    published shares (the other types together to the remainder), in the
    shortest step where no type beats its roofline: a sensitivity case.

Devices (``Devices``, the low-level API)
    ``pim_fix(op, units)`` runs an op's multiply/add work on ``units``
    idle fixed-function PIMs; ``pim_prog(op, fix_units)`` runs it on the
    programmable PIM, which hands the multiply/add part to ``fix_units``
    fixed-function PIMs (a recursive kernel) when given any;
    ``pim_status(handle)`` says whether it has finished; ``work_query()``
    lists the idle resources; ``work_info(handle)`` gives a run's record.
    The CPU runs an op in its profiled time. A PIM op's time is operation
    (compute, or streaming its bytes through the banks, whichever is
    longer) + data movement (bytes its units read from other banks, and
    flushing CPU-produced inputs from the caches) + synchronization (launch
    and completion polling).

Runtime (``run``)
    Rank op types by profiled time and by memory accesses, add the ranks,
    offload the best-ranked types until they cover ``offload_fraction`` of
    the step (90 %). An offloaded op goes to fixed-function PIMs when it is
    pure multiply/add and units are idle (idle units are split over the
    ready candidates by work), else to the programmable PIM when idle (with
    idle fixed-function units as a recursive kernel for the multiply/add
    part), else to the CPU when idle; other ops run on the CPU. Ops start
    in dependency order; with pipelining, multiply/add ops of later steps
    (offloaded or not) start on idle fixed-function PIMs as soon as their
    inputs are ready, otherwise a step waits for the previous one.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field, replace

from golden.energy import energy_params
from golden.system.hetero_nets import NETWORKS, Op, build_graph  # noqa: F401 (re-exported)
from golden.system.reference import (
    HETERO_BANK_GRID,
    HETERO_BANKS,
    HETERO_BATCH,
    HETERO_FIXED_HZ,
    HETERO_FIXED_UNITS,
    HETERO_PROFILE,
    HETERO_PROG_CORES,
    HETERO_PROG_HZ,
)

WORKLOADS = tuple(NETWORKS)
MODES = ("cpu-only", "prog-only", "fixed-only", "hetero")
#: Where the CPU profile comes from: the ops at the CPU's roofline, or
#: scaled to the published shares (VGG-19, AlexNet, DCGAN only).
PROFILES = ("model", "published")
LINE = 64
#: The stack's DRAM, from the hbm2-pim profile's energy table (an
#: assumption: an HMC vault taken to cost what an HBM2 pseudo-channel
#: does; docs/energy.md has the table's sources): a byte read or written
#: in the array (a 32 B word from the cell to the TSVs, 814.08 pJ), and a
#: vault's precharged standby (24 mW).
_HBM2 = energy_params("hbm2-pim")
DRAM_PJ_PER_BYTE = _HBM2.rd_pj / 32
VAULT_STANDBY_W = _HBM2.pre_standby_mw * 1e-3
#: The energy breakdown of a run (:func:`run_energy`).
ENERGY = ("cpu", "prog", "fixed", "dram", "link", "network", "static")


@dataclass(frozen=True)
class HeteroConfig:
    """Device figures. From REFERENCE.md: banks, fixed-function units and
    clock, programmable cores and clock. The rest are project assumptions
    (no published figure), named here once."""

    fixed_units: int = HETERO_FIXED_UNITS
    fixed_hz: float = HETERO_FIXED_HZ
    prog_cores: int = HETERO_PROG_CORES
    prog_hz: float = HETERO_PROG_HZ
    placement: str = "edge"  # "edge": corner 3 : edge 2 : centre 1 units; "uniform"
    profile: str = "model"  # the CPU profile (PROFILES)
    # assumptions
    prog_muladd_per_cycle: float = 4.0  # per core (two-lane FP32 SIMD multiply-add)
    prog_other_per_cycle: float = 1.0  # per core
    bank_gbs: float = 10.0  # per bank (vault) internal bandwidth
    network_gbs: float = 120.0  # logic-layer network between banks
    cpu_gflops: float = 200.0  # sustained FP32 multiply/add on the host CPU
    cpu_other_gflops: float = 25.0  # compares, exponentials
    cpu_gbs: float = 60.0  # host memory bandwidth (and cache flushes)
    fix_sync_s: float = 2e-6  # pim_fix launch + pim_status completion
    prog_sync_s: float = 5e-6  # pim_prog launch + completion
    min_units: int = 8  # smallest fixed-function allocation
    # energy (docs/hetero.md, "Energy"). A fixed-function unit's FP32
    # multiply or add, per FLOP: Horowitz, "Computing's energy problem",
    # ISSCC 2014, 45 nm (multiply 3.7 pJ, add 0.9 pJ), their mean.
    fixed_pj_per_flop: float = 2.3
    # assumptions (no published figure for this system)
    prog_core_w: float = 0.5  # one Cortex-A9 core busy at 2 GHz
    cpu_dynamic_w: float = 60.0  # the host CPU busy, above its idle power
    cpu_idle_w: float = 20.0  # the host CPU's idle power, over the whole step
    link_pj_per_byte: float = 40.0  # host <-> stack serial link (5 pJ/bit)
    network_pj_per_byte: float = 8.0  # the logic layer's network between vaults (1 pJ/bit)
    dram_pj_per_byte: float = DRAM_PJ_PER_BYTE
    stack_static_w: float = HETERO_BANKS * VAULT_STANDBY_W
    #: the logic-layer area of one programmable core (a Cortex-A9 with its
    #: caches) in fixed-function units (an FP32 multiplier and adder each):
    #: what a core more or less takes or frees at constant area (the sweeps)
    core_area_units: int = 16

    def __post_init__(self):
        if self.placement not in ("edge", "uniform"):
            raise ValueError(f"placement must be 'edge' or 'uniform', not {self.placement!r}")
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, "
                             f"not {self.profile!r}")
        for name in ("fixed_units", "prog_cores", "min_units"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


#: The HeteroConfig keys ``pimorch run hetero-training --set KEY=VALUE``
#: overrides: the energy figures (numbers >= 0; docs/hetero.md) and the
#: sweeps' core area.
ENERGY_KEYS = ("fixed_pj_per_flop", "prog_core_w", "cpu_dynamic_w", "cpu_idle_w",
               "link_pj_per_byte", "network_pj_per_byte", "dram_pj_per_byte",
               "stack_static_w")
#: The device assumptions that set the step times (rates must be > 0).
TIMING_KEYS = ("cpu_gflops", "cpu_other_gflops", "cpu_gbs", "bank_gbs", "network_gbs",
               "prog_muladd_per_cycle", "prog_other_per_cycle", "fix_sync_s", "prog_sync_s")
SET_KEYS = (*ENERGY_KEYS, *TIMING_KEYS, "core_area_units")


def config_with(pairs) -> HeteroConfig:
    """The default HeteroConfig with ``KEY=VALUE`` pairs of
    :data:`SET_KEYS` (each a number in [0, 1e6]; a rate of
    :data:`TIMING_KEYS` above 0; ``core_area_units`` an integer)."""
    from golden.config import ConfigError, number_setting

    usage = f"hetero-training takes KEY=VALUE with KEY one of {', '.join(SET_KEYS)}"
    values = dict(number_setting(pair, SET_KEYS.__contains__, usage, 1e6,
                                 "a number in [0, 1e6]") for pair in pairs)
    for key in TIMING_KEYS:
        if key in values and values[key] <= 0 and not key.endswith("_sync_s"):
            raise ConfigError(f"--set {key}: a rate must be > 0, not {values[key]:g}")
    if "core_area_units" in values:
        v = values["core_area_units"]
        if v != int(v):
            raise ConfigError(f"--set core_area_units: {v:g} is not a whole number of units")
        values["core_area_units"] = int(v)
    return replace(HeteroConfig(), **values)


def placement(units: int = HETERO_FIXED_UNITS, policy: str = "edge") -> list[int]:
    """Fixed-function units per bank (row-major over the 4 x 8 grid).
    ``edge``: weights 3 (corner), 2 (edge), 1 (centre), largest-remainder
    rounding; ``uniform``: as even as possible."""
    rows, cols = HETERO_BANK_GRID
    weights = []
    for r in range(rows):
        for c in range(cols):
            border = (r in (0, rows - 1)) + (c in (0, cols - 1))
            weights.append(1 + border if policy == "edge" else 1)
    total = sum(weights)
    exact = [units * w / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[:units - sum(counts)]:
        counts[i] += 1
    return counts


def take_units(idle: list[int], units: int) -> list[int]:
    """Take ``units`` fixed-function units from the banks' ``idle`` counts
    (updated), as the runtime does: one at a time from the bank with the
    most idle (the lowest-numbered of equals). Returns the units taken
    per bank."""
    if units < 1 or units > sum(idle):
        raise ValueError(f"{units} fixed-function units requested, {sum(idle)} idle")
    held = [0] * len(idle)
    heap = [(-n, i) for i, n in enumerate(idle) if n]  # the most idle, then the lowest bank
    heapq.heapify(heap)
    for _ in range(units):
        n, b = heap[0]
        idle[b] -= 1
        held[b] += 1
        if idle[b]:
            heapq.heapreplace(heap, (n + 1, b))
        else:
            heapq.heappop(heap)
    return held


def conv_mapping(k: int = 11, cfg: HeteroConfig | None = None) -> dict:
    """The mapping check: one output of a ``k x k`` convolution, ``k^2``
    multiplications and ``k^2 - 1`` additions, on the fixed-function
    units. A unit is a multiplier and an adder: each takes one product,
    and the sum is an adder tree on the adders of all but one of them
    (``ceil(log2 k^2)`` levels). Placed as the runtime takes units
    (``take_units``: spread, one at a time from the bank with the most
    idle) and, beside it, packed into the fewest banks (the banks with the
    most units first)."""
    cfg = cfg or HeteroConfig()
    if k < 1:
        raise ValueError(f"a k x k convolution needs k >= 1, not {k}")
    mults, adds = k * k, k * k - 1
    per_bank = placement(cfg.fixed_units, cfg.placement)
    if mults > cfg.fixed_units:
        raise ValueError(f"a {k} x {k} convolution needs {mults} units, the stack has "
                         f"{cfg.fixed_units}")
    spread = take_units(list(per_bank), mults)
    packed, left = [0] * len(per_bank), mults
    for b in sorted(range(len(per_bank)), key=lambda i: (-per_bank[i], i)):
        packed[b] = min(per_bank[b], left)
        left -= packed[b]

    def where(held):
        return {"banks": {b: n for b, n in enumerate(held) if n},
                "banks_spanned": sum(1 for n in held if n)}

    return {"k": k, "multiplications": mults, "additions": adds, "units": mults,
            "fixed_units": cfg.fixed_units, "share_of_units": round(mults / cfg.fixed_units, 4),
            "adder_tree_levels": math.ceil(math.log2(mults)) if mults > 1 else 0,
            "largest_bank_units": max(per_bank), "runtime": where(spread),
            "packed": where(packed)}


# ---- profile and ranking ----------------------------------------------------


def profile(ops: list[Op], workload: str, cfg: HeteroConfig = HeteroConfig()) -> dict:
    """Set ``cpu_s`` and ``accesses`` of every op; returns per-type totals
    of step 0. ``cfg.profile`` says how (:data:`PROFILES`)."""
    for op in ops:
        op.cpu_s = max(op.muladd / (cfg.cpu_gflops * 1e9) + op.other / (cfg.cpu_other_gflops
                                                                        * 1e9),
                       op.nbytes / (cfg.cpu_gbs * 1e9))
        op.accesses = -(-op.nbytes // LINE)
    step0 = [op for op in ops if op.step == 0]
    if cfg.profile == "published":
        if workload not in HETERO_PROFILE:
            raise ValueError(f"{workload} has no published profile (only "
                             f"{', '.join(HETERO_PROFILE)}): use profile=model")
        shares = HETERO_PROFILE[workload]
        missing = set(shares) - {op.kind for op in ops}
        if missing:
            raise ValueError(f"{workload}: the graph has no {sorted(missing)} ops")
        raw: dict[str, float] = {}
        for op in step0:
            raw[op.kind] = raw.get(op.kind, 0.0) + op.cpu_s
        rest = sum(t for k, t in raw.items() if k not in shares)
        rest_share = 1 - sum(shares.values())
        # the smallest step in which no op type beats its roofline
        total = max([rest / rest_share] + [raw[k] / shares[k] for k in shares])
        scale = {k: shares[k] * total / raw[k] for k in shares}
        for op in ops:
            op.cpu_s *= scale.get(op.kind, rest_share * total / rest)
    types: dict[str, dict] = {}
    for op in step0:
        t = types.setdefault(op.kind, {"time_s": 0.0, "accesses": 0, "ops": 0,
                                       "fixed_ok": True})
        t["time_s"] += op.cpu_s
        t["accesses"] += op.accesses
        t["ops"] += 1
        t["fixed_ok"] &= op.fixed_ok
    return types


def profile_check(types: dict[str, dict], workload: str) -> dict:
    """The profile's shares of the op types REFERENCE.md profiles for
    ``workload`` beside the published ones (empty when none are)."""
    total = sum(t["time_s"] for t in types.values())
    return {k: {"model": round(types[k]["time_s"] / total, 4) if k in types else 0.0,
                "published": share}
            for k, share in HETERO_PROFILE.get(workload, {}).items()}


def rank_offload(types: dict[str, dict], fraction: float = 0.9) -> list[str]:
    """Op types to offload: rank by time and by accesses (1 = largest), add
    the ranks, take the best sums (ties: more time first) until they cover
    ``fraction`` of the step time."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"offload fraction must be in [0, 1], not {fraction}")
    by_time = sorted(types, key=lambda k: -types[k]["time_s"])
    by_acc = sorted(types, key=lambda k: -types[k]["accesses"])
    score = {k: by_time.index(k) + by_acc.index(k) + 2 for k in types}
    order = sorted(types, key=lambda k: (score[k], -types[k]["time_s"], k))
    total = sum(t["time_s"] for t in types.values())
    chosen, covered = [], 0.0
    for k in order:
        if covered >= fraction * total - 1e-12 * total:
            break
        chosen.append(k)
        covered += types[k]["time_s"]
    return chosen


# ---- the simulated devices and the low-level API ------------------------------


@dataclass
class Run:
    handle: int
    op: int
    device: str  # "cpu", "fixed", "prog"
    start: float
    end: float
    units: list[int]  # fixed-function units per bank held
    operation: float
    movement: float
    sync: float
    recursive: bool = False
    remote_bytes: float = 0.0  # read from other vaults over the network
    flush_bytes: float = 0.0  # CPU-produced inputs written back from its caches
    unit_seconds: float = 0.0  # fixed-function units held x time
    shared: int = 0  # units handed to it while it ran (preemptive sharing)
    #: (from time, units per bank) at its start and at each share
    history: list = field(default_factory=list)

    def units_at(self, t: float) -> list[int]:
        """The units per bank it holds at time ``t`` (within its run)."""
        held = self.history[0][1] if self.history else self.units
        for since, units in self.history:
            if since <= t:
                held = units
        return held


def stream_seconds(op: Op, cfg: HeteroConfig) -> float:
    """Time to stream an op's bytes through every bank of the stack."""
    return op.nbytes / (HETERO_BANKS * cfg.bank_gbs * 1e9)


class Devices:
    """The CPU, the fixed-function PIM pool and the programmable PIM."""

    def __init__(self, cfg: HeteroConfig, ops: list[Op], fixed: bool = True,
                 prog: bool = True):
        self.cfg, self.ops = cfg, ops
        self.per_bank = placement(cfg.fixed_units, cfg.placement) if fixed else [0] * \
            HETERO_BANKS
        self.idle_bank = list(self.per_bank)
        self.has_prog = prog and cfg.prog_cores > 0
        self.prog_busy = self.cpu_busy = False
        self.now = 0.0
        self.runs: dict[int, Run] = {}
        self.live: dict[int, Run] = {}  # runs not yet released by ``advance``
        self.where: dict[int, str] = {}  # op -> device it ran on

    # API ------------------------------------------------------------------
    def work_query(self) -> dict:
        return {"fixed_idle": sum(self.idle_bank), "prog_idle": self.has_prog and not
                self.prog_busy, "cpu_idle": not self.cpu_busy}

    def pim_fix(self, op: Op, units: int) -> int:
        if not op.fixed_ok:
            raise ValueError(f"{op.name}: {op.kind} is not a multiply/add kernel")
        held = self._take(units)
        operation, movement = self._fixed_time(op, held)
        return self._start(op, "fixed", held, operation, movement, self.cfg.fix_sync_s)

    # runtime-side estimates (no placement: remote reads not known yet)
    def estimate_fixed(self, op: Op, units: int) -> float:
        held = [units] + [0] * (HETERO_BANKS - 1)
        operation, _ = self._fixed_time(op, held)
        return operation + self._flush(op) + self.cfg.fix_sync_s

    def estimate_prog(self, op: Op, fix_units: int = 0) -> float:
        held = [fix_units] + [0] * (HETERO_BANKS - 1)
        operation, _, sync = self._prog_time(op, held)
        return operation + self._flush(op) + sync

    def fixed_releases(self) -> list[tuple[float, int]]:
        """(end time, units idle by then beyond the idle ones) of the
        running runs holding fixed-function units, by end time."""
        out, freed = [], 0
        for r in sorted((r for r in self.live.values() if sum(r.units)), key=lambda r: r.end):
            freed += sum(r.units)
            out.append((r.end, freed))
        return out

    def pim_prog(self, op: Op, fix_units: int = 0) -> int:
        if not self.has_prog or self.prog_busy:
            raise ValueError("the programmable PIM is busy or absent")
        held = self._take(fix_units) if fix_units and op.muladd else [0] * HETERO_BANKS
        operation, movement, sync = self._prog_time(op, held)
        self.prog_busy = True
        h = self._start(op, "prog", held, operation, movement, sync)
        self.runs[h].recursive = bool(sum(held))
        return h

    def pim_status(self, handle: int) -> str:
        run = self.runs[handle]
        return "done" if run.end <= self.now else "running"

    def work_info(self, handle: int) -> dict:
        r = self.runs[handle]
        return {"op": self.ops[r.op].name, "device": r.device, "start": r.start, "end": r.end,
                "units": sum(r.units), "operation": r.operation, "movement": r.movement,
                "sync": r.sync, "recursive": r.recursive}

    def share(self, useful) -> int:
        """Preemptive sharing: hand the idle fixed-function units to running
        fixed-function kernels, the one with the most multiply/add work left
        first, each up to ``useful(op)`` units. A kernel's operation so far
        is done at its old rate; the rest of its work (linear progress)
        runs on its units from now, so its end moves earlier. Returns the
        units handed over."""
        cfg, given = self.cfg, 0
        if not sum(self.idle_bank):
            return 0

        def left(r: Run) -> float:
            done = min(1.0, (self.now - r.start) / r.operation) if r.operation else 1.0
            return (1 - done) * self.ops[r.op].muladd

        for r in sorted((r for r in self.live.values()
                         if r.device == "fixed" and self.now < r.start + r.operation),
                        key=lambda r: (-left(r), r.handle)):
            op, units = self.ops[r.op], sum(r.units)
            extra = min(sum(self.idle_bank), useful(op) - units)
            if extra <= 0:
                continue
            done = (self.now - r.start) / r.operation
            held = self._take(extra)
            r.units = [a + b for a, b in zip(r.units, held, strict=True)]
            r.history.append((self.now, r.units))
            rest = max((1 - done) * op.muladd / (2 * (units + extra) * cfg.fixed_hz),
                       (1 - done) * stream_seconds(op, cfg))
            old_end = r.end
            r.operation = (self.now - r.start) + rest
            r.end = r.start + r.operation + r.movement + r.sync
            r.unit_seconds += (units + extra) * (r.end - self.now) - units * (old_end - self.now)
            r.shared += extra
            given += extra
            if not sum(self.idle_bank):
                break
        return given

    # the CPU and the clock ---------------------------------------------------
    def cpu_run(self, op: Op) -> int:
        if self.cpu_busy:
            raise ValueError("the CPU is busy")
        self.cpu_busy = True
        return self._start(op, "cpu", [0] * HETERO_BANKS, op.cpu_s, 0.0, 0.0)

    def advance(self, t: float) -> list[Run]:
        """Move the clock to ``t``; release and return the runs ended by then."""
        self.now = t
        ended = [r for r in self.live.values() if r.end <= t]
        for r in ended:
            del self.live[r.handle]
            for b, u in enumerate(r.units):
                self.idle_bank[b] += u
            if r.device == "prog":
                self.prog_busy = False
            elif r.device == "cpu":
                self.cpu_busy = False
        return ended

    # internals -------------------------------------------------------------
    def _take(self, units: int) -> list[int]:
        return take_units(self.idle_bank, units)

    def _dirty(self, op: Op) -> int:
        """Bytes of ``op``'s inputs produced on the CPU (in its caches)."""
        return sum(self.ops[d].out_bytes for d in op.deps if self.where.get(d) == "cpu")

    def _flush(self, op: Op) -> float:
        """Inputs produced on the CPU are written back from its caches."""
        return self._dirty(op) / (self.cfg.cpu_gbs * 1e9)

    @staticmethod
    def _remote(op: Op, held: list[int]) -> float:
        """Bytes ``op``'s units read from other vaults: its work is spread
        over the units, its data evenly over all banks, so a bank whose
        units take more than 1/32 of the work reads the rest remotely."""
        units = sum(held)
        return sum(max(0.0, u / units - 1 / HETERO_BANKS) for u in held) * op.nbytes \
            if units else 0.0

    def _prog_time(self, op: Op, held: list[int]) -> tuple[float, float, float]:
        cfg = self.cfg
        other = op.other / (cfg.prog_cores * cfg.prog_hz * cfg.prog_other_per_cycle)
        if sum(held):  # recursive kernel: the multiply/add part on held units
            fix_op, movement = self._fixed_time(op, held)
            return max(other, fix_op), movement, cfg.prog_sync_s + cfg.fix_sync_s
        muladd = op.muladd / (cfg.prog_cores * cfg.prog_hz * cfg.prog_muladd_per_cycle)
        return max(muladd + other, stream_seconds(op, cfg)), self._flush(op), cfg.prog_sync_s

    def _fixed_time(self, op: Op, held: list[int]) -> tuple[float, float]:
        cfg, units = self.cfg, sum(held)
        compute = op.muladd / (2 * units * cfg.fixed_hz)
        return (max(compute, stream_seconds(op, cfg)),
                self._remote(op, held) / (cfg.network_gbs * 1e9) + self._flush(op))

    def _start(self, op, device, held, operation, movement, sync) -> int:
        h = len(self.runs)
        end = self.now + operation + movement + sync
        pim = device != "cpu"
        self.runs[h] = self.live[h] = Run(h, op.id, device, self.now, end, held, operation,
                                          movement, sync, remote_bytes=self._remote(op, held),
                                          flush_bytes=self._dirty(op) if pim else 0,
                                          unit_seconds=sum(held) * (end - self.now),
                                          history=[(self.now, held)])
        self.where[op.id] = device
        return h


# ---- the runtime ----------------------------------------------------------------


def useful_units(op: Op, cfg: HeteroConfig) -> int:
    """Fixed-function units beyond which ``op`` is bound by streaming its
    bytes through the banks (more would sit idle)."""
    stream = stream_seconds(op, cfg)
    if stream <= 0:
        return max(1, cfg.fixed_units)
    return max(1, min(cfg.fixed_units, math.ceil(op.muladd / (2 * cfg.fixed_hz * stream))))


def run(ops: list[Op], offload: list[str], cfg: HeteroConfig = HeteroConfig(),
        fixed: bool = True, prog: bool = True, pipelining: bool = True,
        recursive: bool = True, concurrent: bool = True, sharing: bool = True) -> dict:
    """Schedule the profiled graph through the device API.

    At every event the ready ops are visited in (step, id) order. Each
    gets the options its class allows (an offloaded multiply/add op:
    fixed-function PIMs now, or after running ones release units; an
    offloaded op: the programmable PIM if idle; an op of the current step:
    the CPU if idle) with an estimated finish from ``work_query`` and
    ``work_info``; the earliest wins, ties going to the preferred device
    (fixed-function, programmable, CPU): a device counts as busy when
    waiting for it would finish later than the next device. Units now are
    the op's share of the idle units by work among the ready
    fixed-function candidates, capped by ``useful_units``.

    With ``sharing`` (preemptive), the fixed-function units still idle
    after the ops that could start have started go to the running
    fixed-function kernels (``Devices.share``).

    Not ``concurrent`` (the single-kind baselines, without the runtime's
    scheduling): one op at a time in (step, id) order, an offloaded op on
    the PIM that can run it (fixed-function: as many idle units as are
    useful), every other op on the CPU; nothing overlaps."""
    dev = Devices(cfg, ops, fixed=fixed, prog=prog)
    offloaded = set(offload)
    waiting = {op.id: len(op.deps) for op in ops}
    users: dict[int, list[int]] = {op.id: [] for op in ops}
    for op in ops:
        for d in op.deps:
            users[d].append(op.id)
    ready = sorted(i for i, n in waiting.items() if n == 0)
    left_in_step: dict[int, int] = {}
    for op in ops:
        left_in_step[op.step] = left_in_step.get(op.step, 0) + 1
    running: dict[int, int] = {}  # handle -> op
    done = pipelined = shared = 0
    while done < len(ops):
        current = min(s for s, n in left_in_step.items() if n)

        def to_fixed(op, current=current):
            if not op.fixed_ok or not fixed:
                return False
            if op.step > current:  # pipelined onto idle fixed-function PIMs
                return pipelining
            return op.kind in offloaded

        work = sum(ops[i].muladd for i in ready if to_fixed(ops[i]))
        started = []
        for i in ready:
            op = ops[i]
            later = op.step > current
            q = dev.work_query()
            options = []  # (estimated finish from now, preference, action, units)
            useful = useful_units(op, cfg)
            if not concurrent:
                if running or started or later:
                    break
                action = ("fixed" if to_fixed(op) else
                          "prog" if prog and op.kind in offloaded else "cpu")
                options = [(0.0, 0, action, min(q["fixed_idle"], useful))]
            elif to_fixed(op):
                share = math.floor(q["fixed_idle"] * op.muladd / work) if work else 0
                units = min(q["fixed_idle"], useful, max(cfg.min_units, share))
                work -= op.muladd
                if units >= min(cfg.min_units, useful):
                    options.append((dev.estimate_fixed(op, units), 0, "fixed", units))
                for end, freed in dev.fixed_releases():
                    more = min(useful, q["fixed_idle"] + freed)
                    options.append((end - dev.now + dev.estimate_fixed(op, more), 1, "wait", 0))
            if not later and concurrent:
                if op.kind in offloaded and q["prog_idle"]:
                    spare = 0  # a recursive kernel's units: as many as useful, not
                    # more than an even split of the idle ones with the other candidates
                    if recursive and op.muladd and q["fixed_idle"] >= cfg.min_units:
                        spare = min(q["fixed_idle"], useful)
                        if op.fixed_ok and to_fixed(op):
                            spare = min(spare, units)
                    options.append((dev.estimate_prog(op, spare), 2, "prog", spare))
                if q["cpu_idle"]:
                    options.append((op.cpu_s, 3, "cpu", 0))
            if not options:
                continue
            _, _, action, units = min(options)
            if action == "wait":
                continue
            if action == "fixed":
                running[dev.pim_fix(op, units)] = i
                pipelined += later
            elif action == "prog":
                running[dev.pim_prog(op, units)] = i
            else:
                running[dev.cpu_run(op)] = i
            started.append(i)
        for i in started:
            ready.remove(i)
        if sharing and concurrent and fixed:
            shared += dev.share(lambda op: useful_units(op, cfg))
        if not running:
            raise RuntimeError("deadlock: nothing running and nothing can start")
        t = min(dev.work_info(h)["end"] for h in running)
        for r in dev.advance(t):
            if r.handle not in running:
                continue
            assert dev.pim_status(r.handle) == "done"
            i = running.pop(r.handle)
            done += 1
            left_in_step[ops[i].step] -= 1
            for u in users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    ready.append(u)
        ready.sort(key=lambda i: (ops[i].step, i))
    return {"devices": dev, "pipelined_ops": pipelined, "shared_units": shared}


def critical_path(ops: list[Op], runs: list[Run]) -> dict:
    """Walk back from the last run: each run's predecessor is the
    dependency that ended last if it ended at the run's start, otherwise
    the run that ended last before the start (the device it waited for).
    Returns seconds per category; they add up to the makespan."""
    by_op = {r.op: r for r in runs}
    ends = sorted(runs, key=lambda r: r.end)
    end_times = [r.end for r in ends]
    cats = {"cpu": 0.0, "fixed": 0.0, "prog": 0.0, "movement": 0.0, "sync": 0.0, "wait": 0.0}
    r = max(runs, key=lambda r: (r.end, r.handle))
    while r is not None:
        cats[r.device] += r.operation
        cats["movement"] += r.movement
        cats["sync"] += r.sync
        deps = [by_op[d] for d in ops[r.op].deps]
        prev = max(deps, key=lambda d: d.end, default=None)
        if prev is None or prev.end < r.start - 1e-15:
            k = bisect.bisect_right(end_times, r.start + 1e-15) - 1
            while k >= 0 and ends[k] is r:
                k -= 1
            prev = ends[k] if k >= 0 else None
        if prev is None:
            cats["wait"] += r.start
        else:
            cats["wait"] += max(0.0, r.start - prev.end)
        r = prev
    return cats


def run_energy(ops: list[Op], runs: list[Run], makespan: float, cfg: HeteroConfig) -> dict:
    """Energy (J) of a schedule, by :data:`ENERGY`: the host CPU busy at
    ``cpu_dynamic_w`` for each of its runs; the programmable PIM's cores at
    ``prog_core_w`` each for a run's operation (a recursive kernel's
    multiply/add part goes to its fixed-function units); the fixed-function
    units' FLOPs at ``fixed_pj_per_flop``; every op's bytes in the stack's
    DRAM at ``dram_pj_per_byte``, and the CPU-produced inputs a PIM run
    flushes written there too; the bytes crossing the host link (a CPU
    run's, a flush's) at ``link_pj_per_byte``; remote vault reads at
    ``network_pj_per_byte``; static: the CPU's idle power and the stack's
    standby over the makespan. ``dynamic`` is all but ``static``."""
    e = dict.fromkeys(ENERGY, 0.0)
    for r in runs:
        op = ops[r.op]
        e["dram"] += (op.nbytes + r.flush_bytes) * cfg.dram_pj_per_byte * 1e-12
        e["network"] += r.remote_bytes * cfg.network_pj_per_byte * 1e-12
        if r.device == "cpu":
            e["cpu"] += cfg.cpu_dynamic_w * (r.end - r.start)
            e["link"] += op.nbytes * cfg.link_pj_per_byte * 1e-12
            continue
        e["link"] += r.flush_bytes * cfg.link_pj_per_byte * 1e-12
        if r.device == "fixed" or r.recursive:
            e["fixed"] += op.muladd * cfg.fixed_pj_per_flop * 1e-12
        if r.device == "prog":
            e["prog"] += cfg.prog_core_w * cfg.prog_cores * r.operation
    e["static"] = (cfg.cpu_idle_w + cfg.stack_static_w) * makespan
    return {"total": sum(e.values()), "dynamic": sum(v for k, v in e.items() if k != "static"),
            "breakdown": e}


def scenario(workload: str, mode: str, steps: int = 4, fraction: float = 0.9,
             cfg: HeteroConfig = HeteroConfig(), pipelining: bool = True,
             recursive: bool = True, sharing: bool = True) -> dict:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    ops = build_graph(workload, steps)
    types = profile(ops, workload, cfg)
    offload = [] if mode == "cpu-only" else rank_offload(types, fraction)
    fixed = mode in ("fixed-only", "hetero")
    prog = mode in ("prog-only", "hetero")
    if mode != "hetero":  # the baselines: no pipelining, recursion, sharing or concurrency
        pipelining = recursive = sharing = False
    out = run(ops, offload, cfg, fixed=fixed, prog=prog, pipelining=pipelining,
              recursive=recursive, concurrent=mode == "hetero", sharing=sharing)
    dev: Devices = out["devices"]
    runs = list(dev.runs.values())
    makespan = max(r.end for r in runs)
    busy = {"cpu": 0.0, "prog": 0.0}
    unit_s = 0.0
    count = {"cpu": 0, "fixed": 0, "prog": 0}
    for r in runs:
        count[r.device] += 1
        if r.device in busy:
            busy[r.device] += r.end - r.start
        unit_s += r.unit_seconds
    cats = critical_path(ops, runs)
    spent = run_energy(ops, runs, makespan, cfg)
    step_s = makespan / steps
    total = spent["total"] / steps
    return {
        "workload": workload, "mode": mode, "steps": steps,
        "step_ms": round(1e3 * makespan / steps, 4),
        "breakdown_ms": {k: round(1e3 * v / steps, 4) for k, v in cats.items()},
        "utilization": {"cpu": round(busy["cpu"] / makespan, 4),
                        "prog": round(busy["prog"] / makespan, 4),
                        "fixed": round(unit_s / (cfg.fixed_units * makespan), 4)
                        if cfg.fixed_units else 0.0},
        "ops_on": count,
        "recursive_calls": sum(r.recursive for r in runs),
        "pipelined_ops": out["pipelined_ops"],
        "shared_units": out["shared_units"],
        "offloaded": offload,
        "pipelining": pipelining, "recursive": recursive, "sharing": sharing,
        # energy per step (docs/hetero.md, "Energy")
        "energy_j": float(f"{total:.6g}"),
        "dynamic_energy_j": float(f"{spent['dynamic'] / steps:.6g}"),
        "energy_breakdown_j": {k: float(f"{v / steps:.6g}")
                               for k, v in spent["breakdown"].items()},
        "power_w": float(f"{total / step_s:.6g}"),
        "edp_js": float(f"{total * step_s:.6g}"),
    }


#: The GPU baseline (a GTX 1080 Ti class part): NVIDIA's published FP32
#: peak at boost clock (11.34 TFLOPS) and memory bandwidth (484 GB/s).
GPU_FLOPS = 11.34e12
GPU_GBS = 484.0
#: Sweeps: fixed-function clock multiples, programmable cores at constant
#: logic-layer area, the co-run pair.
FREQUENCY_SCALES = (1, 2, 4)
CORE_COUNTS = (1, 4, 16)
CORUN = ("AlexNet", "DCGAN")
def gpu_step_seconds(ops: list[Op], steps: int = 1, flops: float = GPU_FLOPS,
                     gbs: float = GPU_GBS) -> float:
    """The GPU baseline: every op a kernel at the roofline, ``max(FLOPs /
    peak, bytes / bandwidth)``, one after another (a step's ops are a chain
    of dependent kernels); per step."""
    return sum(max((op.muladd + op.other) / flops, op.nbytes / (gbs * 1e9))
               for op in ops) / steps


def corun_graph(workloads: tuple[str, str], steps: int, cfg: HeteroConfig
                ) -> tuple[list[Op], list[str]]:
    """Two workloads' graphs as one (ids of the second after the first's,
    each profiled on its own) and the union of their offloaded op types."""
    ops, offload = [], []
    for w in workloads:
        g = build_graph(w, steps)
        offload += [k for k in rank_offload(profile(g, w, cfg)) if k not in offload]
        base = len(ops)
        ops += [replace(op, id=op.id + base, deps=[d + base for d in op.deps],
                        layer=f"{w}/{op.layer}") for op in g]
    return ops, offload


def _makespan_ms(ops: list[Op], offload: list[str], cfg: HeteroConfig, steps: int) -> float:
    runs = run(ops, offload, cfg)["devices"].runs.values()
    return round(1e3 * max(r.end for r in runs) / steps, 4)


def sweeps(workloads=WORKLOADS, steps: int = 4, fraction: float = 0.9,
           cfg: HeteroConfig = HeteroConfig(), known: dict | None = None) -> dict:
    """The heterogeneous runtime's step time (ms) against CPU-only as the
    hardware changes: the fixed-function clock x1, x2, x4; 1, 4 and 16
    programmable cores at constant logic-layer area (each core more or
    less takes or frees ``cfg.core_area_units`` fixed-function units); the GPU
    baseline's step; and two workloads co-run on one stack against one
    after the other (``known``: {(workload, mode, configuration): step
    ms} already run)."""
    core_area_units = cfg.core_area_units
    out = {"frequency": {}, "cores": {}, "gpu": {}, "core_area_units": core_area_units,
           "gpu_tflops": GPU_FLOPS / 1e12, "gpu_gbs": GPU_GBS}
    # the default configuration recurs (x1, 4 cores, alone): run it once;
    # ``known``: step times the caller has, by (workload, mode, configuration)
    runs: dict = dict(known or {})

    def step_ms(w: str, mode: str, c: HeteroConfig) -> float:
        if (w, mode, c) not in runs:
            runs[w, mode, c] = scenario(w, mode, steps, fraction, c)["step_ms"]
        return runs[w, mode, c]

    for w in workloads:
        cpu = step_ms(w, "cpu-only", cfg)
        het = step_ms(w, "hetero", cfg)
        out["frequency"][w] = {}
        for f in FREQUENCY_SCALES:
            ms = step_ms(w, "hetero", replace(cfg, fixed_hz=f * cfg.fixed_hz))
            out["frequency"][w][f"x{f}"] = {"step_ms": ms, "speedup_vs_cpu": round(cpu / ms, 4)}
        out["cores"][w] = {}
        for n in CORE_COUNTS:
            units = cfg.fixed_units + (cfg.prog_cores - n) * core_area_units
            if units < 0:
                raise ValueError(f"{n} cores of {core_area_units} units each do not fit the "
                                 f"area of {cfg.prog_cores} cores and {cfg.fixed_units} units")
            ms = step_ms(w, "hetero", replace(cfg, prog_cores=n, fixed_units=units))
            out["cores"][w][str(n)] = {"fixed_units": units, "step_ms": ms,
                                       "speedup_vs_cpu": round(cpu / ms, 4)}
        ops = build_graph(w, 1)
        gpu = 1e3 * gpu_step_seconds(ops)
        out["gpu"][w] = {"step_ms": round(gpu, 4), "hetero_step_ms": het,
                         "hetero_over_gpu": round(het / gpu, 4),
                         "speedup_vs_cpu": round(cpu / gpu, 4)}
    ops, offload = corun_graph(CORUN, steps, cfg)
    alone = {w: step_ms(w, "hetero", cfg) for w in CORUN}
    together = _makespan_ms(ops, offload, cfg, steps)
    out["corun"] = {"workloads": list(CORUN), "alone_step_ms": alone,
                    "one_after_the_other_ms": round(sum(alone.values()), 4),
                    "together_ms": together,
                    "saving": round(1 - together / sum(alone.values()), 4)}
    return out


def hetero_study(workloads=WORKLOADS, steps: int = 4, fraction: float = 0.9,
                 cfg: HeteroConfig = HeteroConfig()) -> dict:
    """``pimorch run hetero-training``."""
    rows = []
    known = {}  # the sweeps' default points, run here already
    for w in workloads:
        ops = build_graph(w, 1)
        types = profile(ops, w, cfg)
        total = sum(t["time_s"] for t in types.values())
        runs = {m: scenario(w, m, steps, fraction, cfg) for m in MODES}
        runs["hetero-no-pipelining"] = scenario(w, "hetero", steps, fraction, cfg,
                                                pipelining=False)
        runs["hetero-no-recursion"] = scenario(w, "hetero", steps, fraction, cfg,
                                               recursive=False)
        runs["hetero-neither"] = scenario(w, "hetero", steps, fraction, cfg,
                                          pipelining=False, recursive=False)
        runs["hetero-no-sharing"] = scenario(w, "hetero", steps, fraction, cfg,
                                             sharing=False)
        runs["hetero-uniform-placement"] = scenario(w, "hetero", steps, fraction,
                                                    replace(cfg, placement="uniform"))
        known.update({(w, m, cfg): runs[m]["step_ms"] for m in ("cpu-only", "hetero")})
        base, cpu = runs["cpu-only"]["step_ms"], runs["cpu-only"]
        for r in runs.values():
            r["speedup_vs_cpu"] = round(base / r["step_ms"], 4)
            r["dynamic_energy_vs_cpu"] = round(r["dynamic_energy_j"] / cpu["dynamic_energy_j"], 4)
            r["edp_vs_cpu"] = round(r["edp_js"] / cpu["edp_js"], 4)
        rows.append({
            "workload": w, "batch": HETERO_BATCH[w], "ops_per_step": len(ops),
            "profile": {k: {"share": round(t["time_s"] / total, 4), "accesses": t["accesses"],
                            "ops": t["ops"], "fixed_function": t["fixed_ok"]}
                        for k, t in sorted(types.items(), key=lambda kv: -kv[1]["time_s"])},
            # the published shares (where there are any) beside the profile's
            "profile_check": profile_check(types, w),
            "modes": runs,
        })
    return {"study": "hetero-training", "config": {k: v for k, v in cfg.__dict__.items()},
            "fixed_units_per_bank": placement(cfg.fixed_units, cfg.placement),
            "mapping_check": conv_mapping(11, cfg),
            "sweeps": sweeps(workloads, steps, fraction, cfg, known),
            "offload_fraction": fraction, "rows": rows}

