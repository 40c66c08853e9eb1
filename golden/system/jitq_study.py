"""``pimorch run jitq``: PIM quantization time, GPU GEMM time, slack,
memory capacity and the interference estimate (DESIGN.md §2.6,
REFERENCE.md JIT-Q).

PIM time
    Every kernel shape (placement x direction x format x master precision)
    runs once through the cycle-exact golden ALU channel (timing only) on
    16 tiles per bank; a block's time scales that by its element count over
    the GPU's ALUs (4 stacks x 256, each with two banks), at the profile's
    clock. Kernel time is linear in tiles (checked in the tests).

GPU GEMM time per transformer block (training step: forward and two
backward GEMMs per weight GEMM, and the attention GEMMs), per GPU (1/TP of
the block): ``max(FLOP / peak, bytes / (0.9 x bandwidth))`` with the MXn
weights and 16 sbh one-byte activations read per GEMM pass.

Slack
    GEMM time of a block minus the PIM time to quantize the next block's
    weights both ways (row- and column-quantized copies). Positive: JIT-Q
    hides behind the GPU.

Capacity per GPU (GB; embeddings not counted)
    Per parameter, BF16 masters: weights 2 B, gradients 2 B, Adam state
    4 B; FP32 masters: 4 + 2 + 8 B; MXn activations for the GEMM inputs (7 sbh per layer) and
    FP8 for the rest (10 sbh) with selective recomputation (17 sbh in all,
    split by TP); plus the quantized weights: both MXn copies of every layer
    (``two-copies``), one (``single-copy``), or with JIT-Q only both copies
    of the block in use and the next.

Energy
    Every kernel run's trace priced by ``golden.energy`` (the ALU
    channel's ``[alu_energy]`` table and the profile's ``[energy]``),
    for a whole pseudo-channel: the one-ALU run's per-bank and per-ALU
    counts times the channel's ALUs (the timing is the same at every ALU
    count: every command is broadcast), its refresh and background once.
    A block's quantization energy per GPU is the energy per element times
    the block's elements per GPU in each direction; its power is that
    energy over the PIM time.

Interference
    While the PIM quantizes (a share ``f = min(1, t_pim / t_gemm)`` of the
    GEMM), 16 of 104 CUs issue PIM commands and the banks serve the PIM:
    ``t' = max(t_compute (1 + f 16 / 88), t_memory + t_pim)``; loss =
    ``t' / t_gemm - 1``.
"""

from __future__ import annotations

from dataclasses import replace

from golden import energy
from golden.alu import (
    DIRECTIONS,
    PLACEMENTS,
    AluChannel,
    AluConfig,
    KernelLayout,
    command_counts,
    kernel,
)
from golden.config import ConfigError, load_profile_data
from golden.mx import FORMATS, MxFormat
from golden.mx import SOURCES as MX_SOURCES
from golden.system.reference import JITQ_GPU, JITQ_MODELS, JitqGpu, JitqModel

SOURCES = tuple(MX_SOURCES)
KERNEL_TILES = 16
GB = 1e9


def rows_needed(placement: str, tiles: int, cols: int, source: str) -> int:
    """Rows a kernel layout uses, its constants row included."""
    return -(-KernelLayout(placement, tiles, cols, 1 << 20, source).end_word // cols) + 1


def energy_tables(profile: str = "hbm-jitq", scale: dict | None = None):
    """``(params, alu params)`` of ``profile``, each key of ``scale`` (a
    factor: ``--set energy.KEY=FACTOR``) applied to the table that has it."""
    scale = dict(scale or {})
    unknown = sorted(set(scale) - set(energy.KEYS) - set(energy.ALU_KEYS))
    if unknown:
        raise ConfigError(f"unknown key energy.{unknown[0]} (valid: "
                          f"{', '.join(energy.KEYS + energy.ALU_KEYS)})")
    return (energy.scaled(energy.energy_params(profile),
                          {k: v for k, v in scale.items() if k in energy.KEYS}),
            energy.scaled(energy.alu_energy_params(profile),
                          {k: v for k, v in scale.items() if k in energy.ALU_KEYS}))


def channel_energy(counts: dict, cycles: int, pairs: int, params, alu, t_ck: float) -> dict:
    """Energy (pJ, :func:`golden.energy.alu_priced`) of a pseudo-channel of
    ``pairs`` ALUs running what a one-ALU run counted (``counts``, over
    ``cycles``): the per-bank and per-ALU counts times ``pairs``."""
    whole = {k: v * pairs if k in energy.ALU_UNIT_COUNTS else v for k, v in counts.items()}
    return energy.alu_priced(params, alu, t_ck, whole, cycles)


def kernel_table(profile: str = "hbm-jitq", tiles: int = KERNEL_TILES,
                 scale: dict | None = None) -> list[dict]:
    """Cycles and command counts of every kernel shape on one ALU (both
    banks, ``tiles`` tiles each), and its energy per element on a whole
    pseudo-channel (:func:`channel_energy`)."""
    base = AluConfig.from_profile(profile, pairs=1, rows=2)
    pairs = AluConfig.from_profile(profile, rows=2).pairs
    t_ck = load_profile_data(profile)["t_ck_ns"]
    params, alu = energy_tables(profile, scale)
    rows = []
    for source in SOURCES:
        for name, fmt in FORMATS.items():
            for placement in PLACEMENTS:
                for direction in DIRECTIONS:
                    cfg = replace(base, rows=rows_needed(placement, tiles, base.cols, source))
                    lay = KernelLayout(placement, tiles, cfg.cols, cfg.rows, source)
                    words = kernel(lay, direction, fmt)
                    r = AluChannel(cfg).run(words, execute=False)
                    elements = 2 * tiles * 256
                    counts = energy.alu_trace_counts(cfg, words, r.trace, r.cycles)
                    e = channel_energy(counts, r.cycles, pairs, params, alu, t_ck)
                    per = pairs * elements
                    rows.append({"source": source, "format": name, "placement": placement,
                                 "direction": direction, "cycles": r.cycles,
                                 "ns_per_element": r.cycles * t_ck / elements,
                                 "pj_per_element": e["total_pj"] / per,
                                 "pj_per_element_breakdown": {
                                     k: v / per for k, v in e["breakdown"].items()},
                                 **command_counts(words)})
    return rows


def _pim_seconds(table: list[dict], fmt: str, source: str, placement: str, elements: float,
                 gpu: JitqGpu) -> dict[str, float]:
    """Seconds to quantize ``elements`` along each direction on the GPU's ALUs."""
    alus = gpu.stacks * gpu.alus_per_stack
    per = _per_direction(table, fmt, source, placement, "ns_per_element")
    return {d: per[d] * 1e-9 * elements / alus for d in DIRECTIONS}


def _per_direction(table: list[dict], fmt: str, source: str, placement: str,
                   key: str) -> dict[str, float]:
    return {r["direction"]: r[key] for r in table if r["format"] == fmt
            and r["source"] == source and r["placement"] == placement}


def gemm_seconds(m: JitqModel, fmt: MxFormat, gpu: JitqGpu = JITQ_GPU) -> dict:
    s, b, h = m.seq, m.batch, m.hidden
    flops = 3 * (2 * s * b * m.block_params + 4 * s * s * b * h) / m.tp
    weight_bytes = m.block_params / m.tp * fmt.bits_per_element / 8
    act_bytes = 16 * s * b * h / m.tp
    nbytes = 3 * (weight_bytes + act_bytes)
    compute = flops / (gpu.bf16_tflops * 1e12)
    memory = nbytes / (gpu.memory_efficiency * gpu.bandwidth_gbs * GB)
    return {"seconds": max(compute, memory), "compute": compute, "memory": memory}


#: bytes per parameter of master weights + gradients + Adam state
STATE_BYTES = {"bf16": 2 + 2 + 4, "fp32": 4 + 2 + 8}


def capacity_gb(m: JitqModel, fmt: MxFormat, source: str = "bf16") -> dict:
    layers = m.layers / m.pp
    params = layers * m.block_params / m.tp
    mx = fmt.bits_per_element / 8
    sbh = m.seq * m.batch * m.hidden / m.tp
    base = STATE_BYTES[source] * params + layers * sbh * (7 * mx + 10)
    block = m.block_params / m.tp
    out = {"two-copies": base + 2 * mx * params, "single-copy": base + mx * params,
           "jitq": base + 2 * 2 * mx * block}
    return {k: round(v / GB, 3) for k, v in out.items()}


def jitq_study(models=tuple(JITQ_MODELS), profile: str = "hbm-jitq",
               gpu: JitqGpu = JITQ_GPU, scale: dict | None = None) -> dict:
    """The study (module docstring); ``scale``: factors on energy table
    keys (:func:`energy_tables`)."""
    table = kernel_table(profile, scale=scale)
    reduction = {}
    for name, fmt in FORMATS.items():
        pick = {(r["placement"]): r for r in table if r["format"] == name
                and r["source"] == "bf16" and r["direction"] == "row"}
        plain, counted = pick["strided"], pick["strided-counter"]
        reduction[name] = {
            "variable_shift_commands": plain["variable_shift"],
            "with_counter": counted["variable_shift"],
            "ratio": round(plain["variable_shift"] / counted["variable_shift"], 3),
            "cycles_ratio": round(plain["cycles"] / counted["cycles"], 3),
            "per_bit_without_counter": 3, "per_bit_with_counter": 1, "bits": fmt.m + 1}
    rows = []
    for name in models:
        m = JITQ_MODELS[name]
        entry = {"model": name, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                 "seq": m.seq, "batch": m.batch, "tp": m.tp, "pp": m.pp, "formats": {}}
        for fname, fmt in FORMATS.items():
            g = gemm_seconds(m, fmt, gpu)
            per = {"gemm_ms": round(1e3 * g["seconds"], 4),
                   "gemm_bound": "compute" if g["compute"] >= g["memory"] else "memory",
                   "sources": {}}
            for source in SOURCES:
                pl = {}
                for placement in PLACEMENTS:
                    dirs = _pim_seconds(table, fname, source, placement,
                                        m.block_params / m.tp, gpu)
                    t_pim = sum(dirs.values())  # both copies: row- and column-quantized
                    pj = _per_direction(table, fname, source, placement, "pj_per_element")
                    e_pim = sum(pj.values()) * 1e-12 * m.block_params / m.tp
                    f = min(1.0, t_pim / g["seconds"])
                    t2 = max(g["compute"] * (1 + f * gpu.pim_cus / (gpu.cus - gpu.pim_cus)),
                             g["memory"] + t_pim)
                    pl[placement] = {"row_ms": round(1e3 * dirs["row"], 4),
                                     "col_ms": round(1e3 * dirs["col"], 4),
                                     "quant_ms": round(1e3 * t_pim, 4),
                                     "quant_energy_mj": round(1e3 * e_pim, 4),
                                     "quant_power_w": round(e_pim / t_pim, 3),
                                     "slack_ms": round(1e3 * (g["seconds"] - t_pim), 4),
                                     "hidden": t_pim <= g["seconds"],
                                     "throughput_loss": round(t2 / g["seconds"] - 1, 4)}
                cap = capacity_gb(m, fmt, source)
                per["sources"][source] = {"placements": pl, "capacity_gb": cap,
                                          "fits_hbm": {k: v <= gpu.hbm_gb for k, v in cap.items()}}
            entry["formats"][fname] = per
        rows.append(entry)
    return {"profile": profile, "gpu": gpu.__dict__, "energy_scale": dict(scale or {}),
            "alus_per_gpu": gpu.stacks * gpu.alus_per_stack,
            "kernels": table, "shift_reduction": reduction, "models": rows}
