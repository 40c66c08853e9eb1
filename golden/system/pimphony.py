"""The PIMphony system studies behind ``pimorch run``: ``pimphony``,
``pimphony-scaling``, ``pimphony-gpu``, ``pimphony-serving`` and
``tcp-activation`` (docs/pimphony.md).

Each takes a scenario (:mod:`golden.system.scenario`) and a Dask scheduler
(:mod:`golden.system.sweep`). Fast mode first calibrates every kernel shape the
scenario needs (one task per shape and policy), then times the points
(one task per point) with those calibrations.
"""

from __future__ import annotations

import time
from itertools import product

import numpy as np

from golden.config import ConfigError
from golden.hub.epu import reduce_cycles
from golden.hub.lowering import attention_epu_ops
from golden.isa import LANES
from golden.system import scenario as sc
from golden.system import sweep
from golden.system.kernel_timing import KernelTimer, Shape
from golden.system.librapim import librapim
from golden.system.model import (
    ATTENTION_ENERGY,
    COMPONENTS,
    STEPS,
    Assumptions,
    Step,
    calibrate,
    channel_config,
    check_mode,
    evaluate,
    evaluate_gpu,
    hub_epu_words,
    kernel_shapes,
    module_channels,
    slot_shapes,
    stage_splits,
    step_policy,
    system_link,
    t_ck_ns,
)
from golden.system.reference import DATASETS, GPUS, MODELS, SYSTEMS, Model
from golden.system.serving import arrivals, serve


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def _common(data: dict) -> tuple[Assumptions, float]:
    sc.check_all(data)
    check_mode(data)
    asm = sc.assumptions(data)
    return asm, t_ck_ns(data["profile"])


def _modules(data: dict, systems: list[str], asm: Assumptions, t_ck: float) -> dict:
    """Each system's module as modelled: Table IV against the profile."""
    cfg = channel_config(data["profile"], "static", asm)
    out = {}
    for name in systems:
        system, mc = SYSTEMS[name], module_channels(SYSTEMS[name], cfg, t_ck)
        out[name] = {"channels": mc.channels, "sub_channels": mc.sub_channels,
                     "timed_channels": mc.timed, "profile_channel_gbs": _r(mc.channel_gbs),
                     "internal_tbs": _r(mc.internal_tbs), "table_iv_internal_tbs":
                     system.internal_tbs, "profile_gb": _r(mc.profile_gb),
                     "module_gb": system.module_gb, "tflops": system.tflops,
                     "fc_on": system.fc_on, "vector_on": system.vector_on,
                     "link": vars(system_link(system, asm)),
                     "stage_splits": list(stage_splits(system))}
    return out


def _result(r: dict) -> dict:
    out = {k: (_r(v) if isinstance(v, float) else v) for k, v in r.items()
           if k not in ("breakdown_s", "options", "breakdown_j", "attention_j")}
    for key in ("breakdown_j", "attention_j"):
        if key in r:
            out[key] = {k: _r(v) for k, v in r[key].items()}
    out["breakdown_s"] = {k: _r(v) for k, v in r["breakdown_s"].items()}
    out["breakdown_share"] = {k: _r(v / r["step_s"]) if r["step_s"] else 0.0
                              for k, v in r["breakdown_s"].items()}
    out["options"] = [{**o, "tokens_per_s": _r(o["tokens_per_s"])} for o in r["options"]]
    if "hfp" in r:
        out["hfp"] = {k: _r(v) if isinstance(v, float) else v for k, v in r["hfp"].items()}
    return out


def _timer(p: dict, step: Step) -> KernelTimer:
    """The kernel timer of a point's step, on the study's calibrations."""
    asm = p["asm"]
    return KernelTimer(channel_config(p["profile"], step_policy(step, asm), asm), p["mode"],
                       p["table"])


def _point(p: dict) -> dict:
    """One (model, lengths, system, capacity, step) point: the best TP/PP."""
    model, system, step = MODELS[p["model"]], SYSTEMS[p["system"]], STEPS[p["step"]]
    asm = p["asm"]
    policy = step_policy(step, asm)
    timer = _timer(p, step)
    lengths = p["lengths"]
    window = max(model.window, int(lengths.max())) if len(lengths) else model.window
    r = evaluate(model, system, lengths, p["capacity_gb"], step, timer, p["t_ck"], asm, window)
    return {**{k: p[k] for k in p["keys"]}, "partition": step.partition, "policy": policy,
            "kv": step.kv, **_result(r)}


def _models(data: dict) -> list[Model]:
    return [MODELS[n] for n in sc.choose(data, "models", MODELS)]


def _calibrated(data: dict, sw: sweep.Sweep, progress: bool | None) -> tuple:
    """A model x dataset x system x step study's checked choices and its
    kernels' calibrations: ``(asm, t_ck, models, systems, steps, shapes,
    tables)``, ``tables`` per controller policy."""
    asm, t_ck = _common(data)
    models = _models(data)
    systems = sc.choose(data, "systems", SYSTEMS)
    steps = sc.choose(data, "steps", STEPS)
    if data["datasets"]:
        sc.choose(data, "datasets", DATASETS)
    policies = sorted({step_policy(STEPS[s], asm) for s in steps})
    shapes = sorted({s for m in models for n in systems for s in kernel_shapes(m, SYSTEMS[n])},
                    key=Shape.key)
    slots = {s for m in models for n in systems for s in slot_shapes(m, SYSTEMS[n], asm)}
    tables = calibrate(data["profile"], policies, shapes, asm, data["mode"], sw, progress, slots)
    return asm, t_ck, models, systems, steps, shapes, tables


def pimphony(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Tokens/s, utilization, batch and latency breakdown per model x dataset
    x system x step, each at its best TP/PP."""
    started = time.perf_counter()
    asm, t_ck, models, systems, steps, shapes, tables = _calibrated(data, sw, progress)
    points = []
    for model in models:
        for task in data["datasets"] or model.datasets:
            lengths = DATASETS[task].sample(data["requests"], data["seed"])
            for system, step in product(systems, steps):
                policy = step_policy(STEPS[step], asm)
                points.append({"model": model.name, "dataset": task, "system": system,
                               "step": step, "capacity_gb": model.capacity_gb,
                               "lengths": lengths, "profile": data["profile"],
                               "mode": data["mode"], "asm": asm, "t_ck": t_ck,
                               "table": tables[policy],
                               "keys": ("model", "dataset", "system", "step", "capacity_gb")})
    bar = sweep.Progress(len(points), "pimphony", progress)
    rows = sw.map(_point, points, bar)
    base = {(r["model"], r["dataset"], r["system"]): r["tokens_per_s"] for r in rows
            if r["step"] == steps[0]}
    for r in rows:
        b = base[(r["model"], r["dataset"], r["system"])]
        r[f"speedup_over_{steps[0]}"] = _r(r["tokens_per_s"] / b) if b else None
    return {"study": "pimphony", "scenario": data, "modules": _modules(data, systems, asm, t_ck),
            "kernel_shapes": [s.key() for s in shapes],
            "steps": {s: vars(STEPS[s]) for s in steps}, "components": list(COMPONENTS),
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}


def scaling_lengths(context: int, n: int, variation: float, seed: int) -> np.ndarray:
    """``n`` lengths, normal around ``context`` with sigma ``variation x
    context``, clipped to +-3 sigma and to at least 1 token."""
    rng = np.random.default_rng(seed)
    sigma = variation * context
    x = np.clip(rng.normal(context, sigma, n), context - 3 * sigma, context + 3 * sigma)
    return np.maximum(np.rint(x), 1).astype(np.int64)


def pimphony_scaling(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Tokens/s per step against context (at ``context_capacity_gb``) and
    against capacity (at ``capacity_context``)."""
    started = time.perf_counter()
    asm, t_ck = _common(data)
    if data["model"] not in MODELS:
        raise ConfigError(f"model: unknown name {data['model']!r} (known: {', '.join(MODELS)})")
    model = MODELS[data["model"]]
    systems = sc.choose(data, "systems", SYSTEMS)
    steps = sc.choose(data, "steps", STEPS)
    for key in ("contexts", "capacities_gb"):  # each value's range: scenario.RANGES
        if not data[key]:
            raise ConfigError(f"{key}: the list is empty")
    policies = sorted({step_policy(STEPS[s], asm) for s in steps})
    shapes = sorted({s for n in systems for s in kernel_shapes(model, SYSTEMS[n])},
                    key=Shape.key)
    slots = {s for n in systems for s in slot_shapes(model, SYSTEMS[n], asm)}
    tables = calibrate(data["profile"], policies, shapes, asm, data["mode"], sw, progress, slots)
    sweeps = [("context", c, data["context_capacity_gb"]) for c in data["contexts"]]
    sweeps += [("capacity", data["capacity_context"], g) for g in data["capacities_gb"]]
    points = []
    for (axis, context, cap), system, step in product(sweeps, systems, steps):
        module = SYSTEMS[system].module_gb
        if cap % module:
            raise ConfigError(f"capacities_gb: {cap} GB is not a whole number of {module} GB "
                              f"{system} modules")
        points.append({"axis": axis, "context": context, "capacity_gb": cap,
                       "model": model.name, "system": system, "step": step,
                       "lengths": scaling_lengths(context, data["requests"], data["variation"],
                                                  data["seed"]),
                       "profile": data["profile"], "mode": data["mode"], "asm": asm,
                       "t_ck": t_ck, "table": tables[step_policy(STEPS[step], asm)],
                       "keys": ("axis", "context", "capacity_gb", "model", "system", "step")})
    bar = sweep.Progress(len(points), "pimphony-scaling", progress)
    rows = sw.map(_point, points, bar)
    return {"study": "pimphony-scaling", "scenario": data,
            "modules": _modules(data, systems, asm, t_ck),
            "weights_gb": _r(model.weight_bytes / (1 << 30)),
            "lengths": "normal(context, variation x context) clipped to +-3 sigma; static "
                       "allocation reserves max(window, longest drawn) per request",
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}


def _serve_point(p: dict) -> dict:
    """One (model, dataset, system, step) of the serving study: the
    incremental study's best split for the admitted snapshot, then the
    loop on it."""
    model, system, step = MODELS[p["model"]], SYSTEMS[p["system"]], STEPS[p["step"]]
    asm, timer = p["asm"], _timer(p, step)
    best = evaluate(model, system, p["prompts"], model.capacity_gb, step, timer, p["t_ck"], asm)
    sub = module_channels(system, timer.cfg, p["t_ck"]).sub_channels
    r = serve(model, system, model.capacity_gb, step, timer, p["t_ck"], asm, p["prompts"],
              p["outputs"], p["arrivals"], best["tp"], best["pp"], best["stages_per_module"],
              sub)
    return {"model": model.name, "dataset": p["dataset"], "system": system.name,
            "step": p["step"], "snapshot_tokens_per_s": best["tokens_per_s"],
            "snapshot_batch": best["batch"], **r}


def pimphony_serving(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Tokens/s, batch, latency and the KV ledger of the serving loop
    (``golden.system.serving``) per model x dataset x system x step."""
    started = time.perf_counter()
    asm, t_ck, models, systems, steps, _, tables = _calibrated(data, sw, progress)
    n = data["requests"]
    points = []
    for model in models:
        for task in data["datasets"] or model.datasets:
            prompts = DATASETS[task].sample(n, data["seed"])
            arrive = arrivals(n, data["arrival_rate"], data["seed"])
            for system, s in product(systems, steps):
                points.append({"model": model.name, "dataset": task, "system": system,
                               "step": s, "prompts": prompts,
                               "outputs": np.full(n, data["output_tokens"]),
                               "arrivals": arrive, "profile": data["profile"],
                               "mode": data["mode"], "asm": asm, "t_ck": t_ck,
                               "table": tables[step_policy(STEPS[s], asm)]})
    bar = sweep.Progress(len(points), "pimphony-serving", progress)
    rows = sw.map(_serve_point, points, bar)
    return {"study": "pimphony-serving", "scenario": data, "rows": rows,
            "wall_s": round(time.perf_counter() - started, 2)}


def tcp_activation(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Active channels, cycles and MAC utilization of one (request, KV head)
    pair's QK^T and SV against its token length, HFP vs TCP."""
    started = time.perf_counter()
    asm, t_ck = _common(data)
    ch = data["channels"]
    if not data["tokens"]:  # each value's range: scenario.RANGES
        raise ConfigError("tokens: the list is empty")
    cfg = channel_config(data["profile"], data["policy"], asm)
    shapes = {"qkt": Shape("qkt", data["d_head"], data["group"]),
              "sv": Shape("sv", data["d_head"], data["group"])}
    tables = calibrate(data["profile"], [data["policy"]], list(shapes.values()), asm,
                       data["mode"], sw, progress)
    timer = KernelTimer(cfg, data["mode"], tables[data["policy"]])
    granule = {"qkt": cfg.banks, "sv": LANES}  # tokens one channel takes per MAC column
    rows = []
    for t in data["tokens"]:
        row = {"tokens": t}
        for kind, shape in shapes.items():
            hfp = timer(shape, shape.units(cfg, [t]))
            per = -(-t // ch)
            tcp = timer(shape, shape.units(cfg, [per]))
            active = min(ch, -(-t // granule[kind]))
            red = reduce_cycles(*attention_epu_ops(ch, data["d_head"], data["group"])[-1][1:],
                                hub_epu_words(asm)) if kind == "sv" else 0
            tcp_cycles = int(tcp["cycles"][0]) + red
            row[kind] = {
                "hfp": {"active_channels": 1, "cycles": int(hfp["cycles"][0]),
                        "mac_utilization": _r(int(hfp["mac"][0]) / (ch * int(hfp["cycles"][0])))},
                "tcp": {"active_channels": active, "tokens_per_channel": per,
                        "cycles": _r(tcp_cycles), "reduction_cycles": _r(red),
                        "mac_utilization": _r(active * int(tcp["mac"][0]) / (ch * tcp_cycles))},
                "speedup": _r(int(hfp["cycles"][0]) / tcp_cycles)}
        rows.append(row)
    return {"study": "tcp-activation", "scenario": data, "config": cfg.describe(),
            "t_ck_ns": t_ck, "module": f"{ch} channels x {cfg.banks} banks",
            "mac_utilization": "MAC-busy cycles over the module's channel-cycles",
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}


def pimphony_gpu(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Tokens/s of the GPU baseline (memory-matched A100s, FlashDecoding with
    PagedAttention, a roofline) per model x dataset, beside the PIM
    systems' steps on the same lengths and capacity."""
    started = time.perf_counter()
    if data["gpu"] not in GPUS:
        raise ConfigError(f"gpu: unknown name {data['gpu']!r} (known: {', '.join(GPUS)})")
    gpu = GPUS[data["gpu"]]
    pim = pimphony({k: v for k, v in data.items() if k not in ("gpu", "gpus")}, sw, progress)
    asm = sc.assumptions(data)
    by = {(r["model"], r["dataset"]): [] for r in pim["rows"]}
    for r in pim["rows"]:
        by[(r["model"], r["dataset"])].append(r)
    rows = []
    for (name, task), pim_rows in by.items():
        model = MODELS[name]
        lengths = DATASETS[task].sample(data["requests"], data["seed"])
        g = evaluate_gpu(model, gpu, lengths, model.capacity_gb, asm, data["gpus"])
        rows.append({"model": name, "dataset": task, "capacity_gb": model.capacity_gb,
                     "gpu": _result(g), "pim": {f"{r['system']} {r['step']}": {
                         "tokens_per_s": r["tokens_per_s"], "batch": r["batch"],
                         "over_gpu": _r(r["tokens_per_s"] / g["tokens_per_s"])
                         if g["tokens_per_s"] else None,
                         **({"energy_per_token_j": _r(r["energy_per_token_j"]),
                             "energy_over_gpu": _r(r["energy_per_token_j"]
                                                   / g["energy_per_token_j"])}
                            if "energy_per_token_j" in r and g["energy_per_token_j"] else {})}
                         for r in pim_rows}})
    return {"study": "pimphony-gpu", "scenario": data, "gpu": vars(gpu),
            "modules": pim["modules"], "rows": rows,
            "wall_s": round(time.perf_counter() - started, 2)}


def pimphony_energy(data: dict, sw: sweep.Sweep, progress: bool | None = None) -> dict:
    """Energy per token of each step on the pimphony study's points
    (docs/energy.md): attention's MAC, I/O, background and else, the FC
    layers', each against the first step's."""
    started = time.perf_counter()
    pim = pimphony(data, sw, progress)
    steps = list(pim["steps"])
    rows = []
    for r in pim["rows"]:
        if "attention_j" not in r:
            raise ConfigError(f"profile {data['profile']!r} has no [energy] table "
                              f"(docs/energy.md)")
        n = max(r["batch"], 1)
        attention = {k: _r(v / n) for k, v in r["attention_j"].items()}
        rows.append({**{k: r[k] for k in ("model", "dataset", "system", "step", "batch",
                                          "tokens_per_s", "step_s", "energy_per_token_j")},
                     "attention_per_token_j": attention,
                     "attention_total_per_token_j": _r(sum(r["attention_j"].values()) / n),
                     "fc_per_token_j": _r(r["fc_j"] / n),
                     "average_power_w": _r(r["energy_j"] / r["step_s"]) if r["step_s"] else 0.0,
                     f"speedup_over_{steps[0]}": r[f"speedup_over_{steps[0]}"]})
    base = {(r["model"], r["dataset"], r["system"]): r for r in rows if r["step"] == steps[0]}
    for r in rows:
        b = base[(r["model"], r["dataset"], r["system"])]
        for key in ("energy_per_token_j", "attention_total_per_token_j"):
            r[f"{key.removesuffix('_per_token_j')}_over_{steps[0]}"] = (
                _r(r[key] / b[key]) if b[key] else None)
    return {"study": "pimphony-energy", "scenario": data, "modules": pim["modules"],
            "steps": pim["steps"], "attention_energy": list(ATTENTION_ENERGY),
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}


STUDIES = {"pimphony": pimphony, "pimphony-scaling": pimphony_scaling,
           "pimphony-gpu": pimphony_gpu, "pimphony-serving": pimphony_serving,
           "tcp-activation": tcp_activation, "librapim": librapim,
           "pimphony-energy": pimphony_energy}


def run(study: str, path: str | None = None, sets=(), scheduler: str = "serial",
        progress: bool | None = None) -> dict:
    """Run ``study`` on its scenario (defaults, ``path``, ``sets``)."""
    data = sc.load(study, path, sets)
    with sweep.Sweep(scheduler) as sw:
        return STUDIES[study](data, sw, progress)
