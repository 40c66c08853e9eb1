"""``pimorch run jitq``: PIM quantization time, GPU GEMM time, slack,
memory capacity and the interference estimate (DESIGN.md §2.6,
REFERENCE.md JIT-Q).

PIM time
    Every kernel shape (placement x direction x format x master precision)
    runs once through the cycle-exact golden ALU channel (timing only) on
    16 tiles per bank; a block's time scales that by its element count over
    the GPU's ALUs (4 stacks x 256, each with two banks), at the profile's
    clock. Kernel time is linear in tiles (checked in the tests). The CU
    that issues a pseudo-channel's commands (one of 16, one per two HBM
    channels: 8 pseudo-channels each) must issue every command of the
    kernel to each; a copy takes the longer of the channel's time and the
    issue's (``gpu.pim_commands_per_cu_clock`` at ``gpu.cu_clock_ghz``).

GPU GEMM time per transformer block, per GPU (1/TP of the block): the
forward GEMMs (weight GEMMs on the row-quantized copy, attention GEMMs)
and the backward ones (twice the work: data gradients on the
column-quantized copy, weight gradients), each ``max(FLOP / the format's
throughput, bytes / (0.9 x bandwidth))`` with the MXn weights and 16 sbh
one-byte activations read per pass.

Schedule and slack
    The next block's row copy is quantized during this block's forward
    GEMMs, the previous block's column copy during its backward GEMMs;
    each slack is GEMM time minus PIM time. With FP32 masters, where a
    slack is negative, the fallback quantizes two blocks ahead. What stays
    exposed the GPU waits for.

Capacity per GPU (GB; embeddings not counted)
    Per parameter, BF16 masters: weights 2 B, gradients 2 B, Adam state
    4 B; FP32 masters: 4 + 2 + 8 B; MXn activations for the GEMM inputs (7 sbh per layer) and
    FP8 for the rest (10 sbh) with selective recomputation (17 sbh in all,
    split by TP); plus the quantized weights: both MXn copies of every layer
    (``two-copies``), one (``single-copy``), or with JIT-Q the temporary
    copies (row and column) of the block it quantizes ahead (two blocks
    with the FP32 fallback).

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
    GEMM), 16 of 104 CUs issue PIM commands and the banks serve the PIM's
    all-bank commands: ``t' = max(t_compute (1 + f 16 / 88), t_memory +
    t_pim)`` plus the exposed time; loss = ``t' / t_gemm - 1``.
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
                                 "elements_per_alu": elements, "t_ck_ns": t_ck,
                                 "pj_per_element": e["total_pj"] / per,
                                 "pj_per_element_breakdown": {
                                     k: v / per for k, v in e["breakdown"].items()},
                                 **command_counts(words)})
    return rows


def pcs_per_cu(profile: str, gpu: JitqGpu) -> int:
    """Pseudo-channels one command-issuing CU drives: the GPU's ALUs over a
    pseudo-channel's (the profile's ALU channel), over its ``pim_cus``
    (one CU per two HBM channels)."""
    pcs = gpu.stacks * gpu.alus_per_stack // AluConfig.from_profile(profile).pairs
    return -(-pcs // gpu.pim_cus)


def _pim_seconds(table: list[dict], fmt: str, source: str, placement: str, elements: float,
                 gpu: JitqGpu, pcs: int) -> dict[str, dict[str, float]]:
    """Seconds to quantize ``elements`` along each direction on the GPU's
    ALUs: per direction the channel's time (the cycle-exact kernel), the
    time its CU takes to issue the commands to its ``pcs`` pseudo-channels
    (a kernel's commands are broadcast within a pseudo-channel, issued to
    each), and the larger, the PIM's."""
    alus = gpu.stacks * gpu.alus_per_stack
    rate = gpu.cu_clock_ghz * gpu.pim_commands_per_cu_clock  # commands per ns per CU
    out = {}
    for r in table:
        if (r["format"], r["source"], r["placement"]) != (fmt, source, placement):
            continue
        runs = elements / alus / r["elements_per_alu"]  # kernel runs per ALU
        channel = runs * r["cycles"] * r["t_ck_ns"] * 1e-9
        issue = runs * r["total"] * pcs / rate * 1e-9
        out[r["direction"]] = {"channel": channel, "issue": issue,
                               "seconds": max(channel, issue)}
    return out


def _per_direction(table: list[dict], fmt: str, source: str, placement: str,
                   key: str) -> dict[str, float]:
    return {r["direction"]: r[key] for r in table if r["format"] == fmt
            and r["source"] == source and r["placement"] == placement}


def gemm_seconds(m: JitqModel, fmt: MxFormat, gpu: JitqGpu = JITQ_GPU) -> dict:
    """A block's GEMMs per GPU: the forward pass (the weight GEMMs on the
    row-quantized copy and the attention GEMMs) and the backward pass
    (twice its work: the data gradients on the column-quantized copy and
    the weight gradients), each ``max(compute at the format's throughput,
    bytes at 90 % of the bandwidth)``, MXn weights and 16 sbh one-byte
    activations read per pass."""
    s, b, h = m.seq, m.batch, m.hidden
    flops = (2 * s * b * m.block_params + 4 * s * s * b * h) / m.tp
    nbytes = m.block_params / m.tp * fmt.bits_per_element / 8 + 16 * s * b * h / m.tp
    out = {}
    for name, passes in (("forward", 1), ("backward", 2)):
        compute = passes * flops / (gpu.mx_tflops(fmt.name) * 1e12)
        memory = passes * nbytes / (gpu.memory_efficiency * gpu.bandwidth_gbs * GB)
        out[name] = {"seconds": max(compute, memory), "compute": compute, "memory": memory}
    out.update({k: out["forward"][k] + out["backward"][k]
                for k in ("seconds", "compute", "memory")})
    return out


def schedule(g: dict, pim: dict, source: str) -> dict:
    """JIT-Q's schedule of one block's quantization against the GEMMs:
    the next block's row-quantized copy during this block's forward
    GEMMs, the previous block's column-quantized copy during its backward
    ones (each slack: GEMM time minus PIM time). With FP32 masters, where
    the PIM is slower than the GPU (a slack below zero), it quantizes two
    blocks ahead (the paper's fallback): each copy has two blocks' GEMM
    time, and two blocks' copies are held. What stays exposed the GPU
    waits for."""
    ahead = 1
    slack = {p: g[p]["seconds"] - pim[d]["seconds"]
             for p, d in (("forward", "row"), ("backward", "col"))}
    if source == "fp32" and min(slack.values()) < 0:
        ahead = 2
        slack = {p: 2 * g[p]["seconds"] - pim[d]["seconds"]
                 for p, d in (("forward", "row"), ("backward", "col"))}
    return {"ahead": ahead, "slack": slack,
            "exposed": sum(max(0.0, -v) for v in slack.values())}


def interference(g: dict, pim: dict, gpu: JitqGpu) -> float:
    """The GEMMs' time with the PIM quantizing beside them: while it runs
    (a share ``f`` of the GEMMs) the 16 command-issuing CUs do no GEMM
    work, and the HBM's banks serve the PIM's all-bank commands for the
    whole of its kernels (the GEMMs' reads wait): ``max(t_compute (1 + f
    16 / 88), t_memory + t_pim)``."""
    t_pim = sum(d["seconds"] for d in pim.values())
    f = min(1.0, t_pim / g["seconds"])
    return max(g["compute"] * (1 + f * gpu.pim_cus / (gpu.cus - gpu.pim_cus)),
               g["memory"] + t_pim)


#: bytes per parameter of master weights + gradients + Adam state
STATE_BYTES = {"bf16": 2 + 2 + 4, "fp32": 4 + 2 + 8}


def capacity_gb(m: JitqModel, fmt: MxFormat, source: str = "bf16", ahead: int = 1) -> dict:
    """GB per GPU: the master state and activations, and the quantized
    weights: both copies of every layer (``two-copies``), one
    (``single-copy``), or JIT-Q's temporary copies (row and column) of the
    ``ahead`` blocks it quantizes ahead."""
    layers = m.layers / m.pp
    params = layers * m.block_params / m.tp
    mx = fmt.bits_per_element / 8
    sbh = m.seq * m.batch * m.hidden / m.tp
    base = STATE_BYTES[source] * params + layers * sbh * (7 * mx + 10)
    block = m.block_params / m.tp
    out = {"two-copies": base + 2 * mx * params, "single-copy": base + mx * params,
           "jitq": base + ahead * 2 * mx * block}
    return {k: round(v / GB, 3) for k, v in out.items()}


def jitq_study(models=tuple(JITQ_MODELS), profile: str = "hbm-jitq",
               gpu: JitqGpu = JITQ_GPU, scale: dict | None = None) -> dict:
    """The study (module docstring); ``scale``: factors on energy table
    keys (:func:`energy_tables`)."""
    table = kernel_table(profile, scale=scale)
    pcs = pcs_per_cu(profile, gpu)
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
                   "forward_ms": round(1e3 * g["forward"]["seconds"], 4),
                   "backward_ms": round(1e3 * g["backward"]["seconds"], 4),
                   "gemm_bound": "compute" if g["compute"] >= g["memory"] else "memory",
                   "sources": {}}
            for source in SOURCES:
                pl = {}
                for placement in PLACEMENTS:
                    dirs = _pim_seconds(table, fname, source, placement,
                                        m.block_params / m.tp, gpu, pcs)
                    t_pim = sum(d["seconds"] for d in dirs.values())  # both copies
                    pj = _per_direction(table, fname, source, placement, "pj_per_element")
                    e_pim = sum(pj.values()) * 1e-12 * m.block_params / m.tp
                    sch = schedule(g, dirs, source)
                    t2 = interference(g, dirs, gpu) + sch["exposed"]
                    pl[placement] = {"row_ms": round(1e3 * dirs["row"]["seconds"], 4),
                                     "col_ms": round(1e3 * dirs["col"]["seconds"], 4),
                                     "quant_ms": round(1e3 * t_pim, 4),
                                     "issue_bound": {d: v["issue"] > v["channel"]
                                                     for d, v in dirs.items()},
                                     "issue_ms": round(1e3 * sum(
                                         v["issue"] for v in dirs.values()), 4),
                                     "quant_energy_mj": round(1e3 * e_pim, 4),
                                     "quant_power_w": round(e_pim / t_pim, 3),
                                     "ahead_blocks": sch["ahead"],
                                     "forward_slack_ms": round(1e3 * sch["slack"]["forward"], 4),
                                     "backward_slack_ms": round(
                                         1e3 * sch["slack"]["backward"], 4),
                                     "hidden": sch["exposed"] == 0,
                                     "throughput_loss": round(t2 / g["seconds"] - 1, 4),
                                     "jitq_gb": capacity_gb(m, fmt, source,
                                                            sch["ahead"])["jitq"]}
                ahead = pl["strided-counter"]["ahead_blocks"]
                cap = capacity_gb(m, fmt, source, ahead)
                per["sources"][source] = {"placements": pl, "capacity_gb": cap,
                                          "capacity_ahead_blocks": ahead,
                                          "fits_hbm": {k: v <= gpu.hbm_gb for k, v in cap.items()}}
            entry["formats"][fname] = per
        rows.append(entry)
    return {"profile": profile, "gpu": gpu.__dict__, "energy_scale": dict(scale or {}),
            "alus_per_gpu": gpu.stacks * gpu.alus_per_stack, "pcs_per_cu": pcs,
            "kernels": table, "shift_reduction": reduction, "models": rows}
