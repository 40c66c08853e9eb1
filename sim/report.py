"""CSV tables and matplotlib figures of the system studies (``pimorch run
pimphony|pimphony-scaling|tcp-activation --csv FILE --plot DIR``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def flatten(row: dict, prefix: str = "") -> dict:
    """One CSV record: nested dicts as dotted columns, lists as JSON."""
    out = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def _records(result: dict) -> list[dict]:
    """The CSV's rows: the study's rows, or (hetero-training) one per
    workload and mode."""
    if result.get("study") == "hetero-training":
        return [flatten({"workload": r["workload"], "batch": r["batch"], "mode": mode, **m})
                for r in result["rows"] for mode, m in r["modes"].items()]
    return [flatten(r) for r in result["rows"]]


def write_csv(result: dict, path: str) -> None:
    records = _records(result)
    columns: list[str] = []
    for r in records:
        columns += [c for c in r if c not in columns]
    if path == "-":
        import sys

        f = sys.stdout
        _write(f, columns, records)
    else:
        from sim.outputs import atomic

        with atomic(path, "--csv", newline="") as f:
            _write(f, columns, records)


def _write(f, columns, records) -> None:
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    w.writerows(records)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path) -> str:
    from sim.outputs import atomic

    fig.tight_layout()
    with atomic(path, "--plot", mode="wb") as f:  # no partial PNG on a failure
        fig.savefig(f, dpi=120, format="png")
    plt.close(fig)
    return str(path)


def plot(result: dict, out_dir: str) -> list[str]:
    """The study's figures as PNG files in ``out_dir``; returns their paths."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from golden.config import ConfigError

        raise ConfigError(f"--plot {out_dir}: {e.strerror or e}") from None
    return {"pimphony": _plot_pimphony, "pimphony-scaling": _plot_scaling,
            "pimphony-gpu": _plot_gpu, "pimphony-serving": _plot_serving,
            "tcp-activation": _plot_tcp,
            "librapim": _plot_librapim, "hetero-training": _plot_hetero,
            "pimphony-energy": _plot_energy}[result["study"]](result, out)


def _plot_pimphony(result: dict, out: Path) -> list[str]:
    plt = _pyplot()
    rows = result["rows"]
    steps = list(result["steps"])
    systems = list(dict.fromkeys(r["system"] for r in rows))
    groups = list(dict.fromkeys((r["model"], r["dataset"]) for r in rows))
    files = []
    for metric, label, name in (
            (f"speedup_over_{steps[0]}", f"decode throughput over {steps[0]}", "throughput"),
            ("mac_utilization", "MAC utilization", "mac-utilization"),
            ("channel_utilization", "channel utilization", "channel-utilization")):
        fig, axes = plt.subplots(1, len(systems), figsize=(6 * len(systems), 4), squeeze=False)
        width = 0.8 / len(steps)
        for ax, system in zip(axes[0], systems, strict=True):
            for i, step in enumerate(steps):
                values = [next((r[metric] or 0) for r in rows if r["system"] == system
                               and r["step"] == step and (r["model"], r["dataset"]) == g)
                          for g in groups]
                ax.bar([k + i * width for k in range(len(groups))], values, width, label=step)
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(groups))])
            ax.set_xticklabels([f"{m}\n{d}" for m, d in groups], fontsize=7)
            ax.set_title(system)
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
        files.append(_save(plt, fig, out / f"pimphony-{name}.png"))
    # latency breakdown of the last step, per point
    n = max(len(rows) // max(len(systems), 1), 1)
    fig, axes = plt.subplots(len(systems), 1, figsize=(max(6.0, 0.3 * n), 4.5 * len(systems)),
                             squeeze=False)
    for ax, system in zip(axes[:, 0], systems, strict=True):
        sel = [r for r in rows if r["system"] == system]
        labels = [f"{r['model'].removeprefix('LLM-')} {r['dataset']} {r['step']}" for r in sel]
        bottom = [0.0] * len(sel)
        for comp in sel[0]["breakdown_share"] if sel else []:
            vals = [r["breakdown_share"][comp] for r in sel]
            ax.bar(range(len(sel)), vals, bottom=bottom, label=comp)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels(labels, fontsize=6, rotation=90)
        ax.set_ylabel("share of the decode step")
        ax.set_title(f"{system}: decode-step breakdown")
        ax.legend(fontsize=6)
    files.append(_save(plt, fig, out / "pimphony-breakdown.png"))
    files.append(_plot_parallel(plt, rows, groups, systems, steps, out))
    return files


def _option_label(o: dict) -> str:
    """``TPxPP``, and ``/k`` where ``k`` stages share a module."""
    k = o.get("stages_per_module", 1)
    return f"{o['tp']}x{o['pp']}" + (f"/{k}" if k > 1 else "")


def _plot_parallel(plt, rows, groups, systems, steps, out: Path) -> str:
    """The TP/PP sweep: tokens/s of every (tp, pp) option, one panel per
    (model, dataset) and system, one line per step."""
    fig, axes = plt.subplots(len(groups), len(systems), squeeze=False,
                             figsize=(5 * len(systems), 3 * len(groups)))
    for gi, g in enumerate(groups):
        for si, system in enumerate(systems):
            ax = axes[gi][si]
            for step in steps:
                r = next((r for r in rows if r["system"] == system and r["step"] == step
                          and (r["model"], r["dataset"]) == g), None)
                if r is None:
                    continue
                ax.plot([_option_label(o) for o in r["options"]],
                        [o["tokens_per_s"] for o in r["options"]], marker="o", label=step)
            ax.set_title(f"{g[0]} {g[1]}, {system}", fontsize=8)
            ax.set_xlabel("TP x PP (/k: k stages a module)", fontsize=7)
            ax.tick_params(axis="x", labelrotation=90, labelsize=6)
            ax.set_ylabel("tokens/s", fontsize=7)
            ax.legend(fontsize=6)
    return _save(plt, fig, out / "pimphony-parallel.png")


def _plot_gpu(result: dict, out: Path) -> list[str]:
    """Tokens/s over the GPU baseline per (model, dataset), one bar per PIM
    system and step (log scale; 1 = the GPU)."""
    plt = _pyplot()
    rows = result["rows"]
    labels = [f"{r['model']}\n{r['dataset']}" for r in rows]
    series = list(dict.fromkeys(k for r in rows for k in r["pim"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    width = 0.8 / max(1, len(series))
    for i, name in enumerate(series):
        ax.bar([x + i * width for x in range(len(rows))],
               [r["pim"][name]["over_gpu"] or 0 for r in rows], width, label=name)
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], labels, fontsize=7)
    ax.set_ylabel(f"tokens/s over {result['gpu']['name']} GPUs")
    ax.legend(fontsize=7)
    return [_save(plt, fig, out / "pimphony-gpu.png")]


def _plot_energy(result: dict, out: Path) -> list[str]:
    """Energy per token per (model, dataset, system), one stacked bar per
    step: attention's MAC, I/O, background and else, then the FC layers',
    over the first step's total."""
    plt = _pyplot()
    rows = result["rows"]
    steps = list(result["steps"])
    groups = list(dict.fromkeys((r["model"], r["dataset"], r["system"]) for r in rows))
    parts = [*result["attention_energy"], "fc"]
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(groups)), 4))
    width = 0.8 / len(steps)
    for g, group in enumerate(groups):
        mine = {r["step"]: r for r in rows if (r["model"], r["dataset"], r["system"]) == group}
        base = mine[steps[0]]["energy_per_token_j"] or 1.0
        for i, step in enumerate(steps):
            r, bottom = mine[step], 0.0
            for k, part in enumerate(parts):
                v = (r["fc_per_token_j"] if part == "fc"
                     else r["attention_per_token_j"][part]) / base
                ax.bar(g + i * width, v, width, bottom=bottom, color=f"C{k}",
                       label=("attention " + part if part != "fc" else "FC")
                       if g == 0 and i == 0 else None)
                bottom += v
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))],
                  [f"{m}\n{d}\n{s}" for m, d, s in groups], fontsize=7)
    ax.set_ylabel(f"energy per token over {steps[0]}")
    ax.set_title(f"bars per group: {', '.join(steps)}", fontsize=8)
    ax.legend(fontsize=7)
    return [_save(plt, fig, out / "pimphony-energy.png")]


def _plot_serving(result: dict, out: Path) -> list[str]:
    """Served tokens/s per (model, dataset), one bar per system and step,
    with the snapshot step's tokens/s as a marker."""
    plt = _pyplot()
    rows = result["rows"]
    groups = list(dict.fromkeys((r["model"], r["dataset"]) for r in rows))
    series = list(dict.fromkeys((r["system"], r["step"]) for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 4))
    width = 0.8 / max(1, len(series))
    for i, (system, step) in enumerate(series):
        sel = [next((r for r in rows if (r["model"], r["dataset"]) == g
                     and (r["system"], r["step"]) == (system, step)), None) for g in groups]
        xs = [x + i * width for x in range(len(groups))]
        ax.bar(xs, [r["tokens_per_s"] if r else 0 for r in sel], width,
               label=f"{system} {step}")
        ax.plot(xs, [r["snapshot_tokens_per_s"] if r else 0 for r in sel], "k_", markersize=10)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))],
                  [f"{m}\n{d}" for m, d in groups], fontsize=7)
    ax.set_ylabel("served tokens/s (-: one step of the snapshot)")
    ax.legend(fontsize=7)
    return [_save(plt, fig, out / "pimphony-serving.png")]


def _plot_scaling(result: dict, out: Path) -> list[str]:
    plt = _pyplot()
    rows = result["rows"]
    files = []
    for axis, x_key, xlabel in (("context", "context", "context (tokens)"),
                                ("capacity", "capacity_gb", "capacity (GB)")):
        sel = [r for r in rows if r["axis"] == axis]
        systems = list(dict.fromkeys(r["system"] for r in sel))
        fig, axes = plt.subplots(1, len(systems), figsize=(6 * len(systems), 4), squeeze=False)
        for ax, system in zip(axes[0], systems, strict=True):
            for step in dict.fromkeys(r["step"] for r in sel):
                pts = [(r[x_key], r["tokens_per_s"]) for r in sel
                       if r["system"] == system and r["step"] == step]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=step)
            ax.set_xscale("log", base=2)
            ax.set_yscale("symlog", linthresh=1)
            ax.set_ylim(bottom=0)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("decode tokens/s")
            ax.set_title(f"{result['scenario']['model']} on {system}")
            ax.legend(fontsize=7)
        files.append(_save(plt, fig, out / f"pimphony-scaling-{axis}.png"))
    return files


def _plot_tcp(result: dict, out: Path) -> list[str]:
    plt = _pyplot()
    rows = result["rows"]
    tokens = [r["tokens"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for kind in ("qkt", "sv"):
        for part in ("hfp", "tcp"):
            axes[0].plot(tokens, [r[kind][part]["active_channels"] for r in rows], marker="o",
                         label=f"{kind.upper()} {part.upper()}")
            axes[1].plot(tokens, [r[kind][part]["mac_utilization"] for r in rows], marker="o",
                         label=f"{kind.upper()} {part.upper()}")
    for ax, ylabel in zip(axes, ("active channels", "module MAC utilization"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens of the (request, KV head) pair")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    axes[0].set_title(result["module"])
    return [_save(plt, fig, out / "tcp-activation.png")]


def _plot_librapim(result: dict, out: Path) -> list[str]:
    plt = _pyplot()
    rows = result["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    inputs = list(dict.fromkeys(r["input"] for r in rows))
    arrays = list(dict.fromkeys(r.get("npu_array", 64) for r in rows))
    base = [r for r in rows if r.get("npu_array", 64) == arrays[0]]  # the first NPU size
    files = []
    for model in models:
        fig, axes = plt.subplots(1, len(inputs), figsize=(3.2 * len(inputs), 3.4),
                                 squeeze=False, sharey=True)
        for ax, inp in zip(axes[0], inputs, strict=True):
            sel = [r for r in base if r["model"] == model and r["input"] == inp]
            for system in sel[0]["systems"] if sel else []:
                ax.plot([r["batch"] for r in sel],
                        [r["systems"][system]["tokens_per_s"] for r in sel], marker="o",
                        label=system)
            ax.set_title(f"input {inp}", fontsize=9)
            ax.set_xlabel("batch")
            ax.set_xscale("log", base=2)
        axes[0][0].set_ylabel("tokens/s")
        axes[0][-1].legend(fontsize=6)
        fig.suptitle(model)
        files.append(_save(plt, fig, out / f"librapim-{model}.png"))
    # Figure 20: NPU and PIM utilization of each system at one batch (128
    # if run, else the largest) over the input lengths
    batches = sorted({r["batch"] for r in base})
    batch = 128 if 128 in batches else batches[-1]
    fig, axes = plt.subplots(2, len(models), figsize=(5 * len(models), 6), squeeze=False)
    for col, model in enumerate(models):
        sel = [r for r in base if r["model"] == model and r["batch"] == batch]
        systems = list(sel[0]["systems"]) if sel else []
        for row, key in enumerate(("npu_utilization", "pim_utilization")):
            ax = axes[row][col]
            for k, system in enumerate(systems):
                ax.bar([i + k / (len(systems) + 1) for i in range(len(sel))],
                       [r["systems"][system][key] for r in sel], 1 / (len(systems) + 1),
                       label=system)
            ax.set_xticks(range(len(sel)))
            ax.set_xticklabels([str(r["input"]) for r in sel], fontsize=7)
            ax.set_ylabel(key.replace("_", " "))
            ax.set_xlabel("input length")
        axes[0][col].set_title(f"{model}, batch {batch}")
    axes[0][-1].legend(fontsize=6)
    files.append(_save(plt, fig, out / "librapim-utilization.png"))
    if len(arrays) > 1:  # Figure 21: tokens/s over the NPU's size, per batch
        fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.6), squeeze=False)
        for ax, model in zip(axes[0], models, strict=True):
            for b in batches:
                for inp in inputs:
                    sel = [r for r in rows if r["model"] == model and r["batch"] == b
                           and r["input"] == inp]
                    for system in ("LibraPIM", "LibraPIM-noDBO"):
                        if sel and system in sel[0]["systems"]:
                            ax.plot([r["npu_array"] for r in sel],
                                    [r["systems"][system]["tokens_per_s"] for r in sel],
                                    marker="o", label=f"{system} B{b} L{inp}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("systolic array side (8 arrays)")
            ax.set_ylabel("tokens/s")
            ax.set_title(model)
            ax.legend(fontsize=6)
        files.append(_save(plt, fig, out / "librapim-npu.png"))
    files += _plot_librapim_energy(plt, base, models, inputs, batch, out)
    return files


def _plot_librapim_energy(plt, rows, models, inputs, batch, out: Path) -> list[str]:
    """Energy per token: per model, a stacked bar per system and input
    length at one batch, in the breakdown's parts."""
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        sel = [r for r in rows if r["model"] == model and r["batch"] == batch]
        systems = list(sel[0]["systems"]) if sel else []
        parts = list(sel[0]["systems"][systems[0]]["energy_breakdown_per_token_j"]) \
            if systems else []
        width = 0.8 / max(1, len(systems))
        for i, r in enumerate(sel):
            for k, system in enumerate(systems):
                bottom = 0.0
                for c, part in enumerate(parts):
                    v = r["systems"][system]["energy_breakdown_per_token_j"][part]
                    ax.bar(i + k * width, v, width, bottom=bottom, color=f"C{c}",
                           label=part if i == 0 and k == 0 else None)
                    bottom += v
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sel))],
                      [str(r["input"]) for r in sel], fontsize=7)
        ax.set_xlabel(f"input length (bars: {', '.join(systems)})", fontsize=7)
        ax.set_ylabel("J per token")
        ax.set_title(f"{model}, batch {batch}")
    axes[0][-1].legend(fontsize=6)
    return [_save(plt, fig, out / "librapim-energy.png")]


def _plot_hetero(result: dict, out: Path) -> list[str]:
    """Per workload and mode: step time, dynamic energy and energy-delay
    product over the CPU's, and the average power."""
    plt = _pyplot()
    rows = result["rows"]
    modes = list(rows[0]["modes"]) if rows else []
    metrics = (("speedup_vs_cpu", "speedup over CPU"),
               ("dynamic_energy_vs_cpu", "dynamic energy over CPU"),
               ("edp_vs_cpu", "EDP over CPU"), ("power_w", "average power (W)"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8), squeeze=False)
    width = 0.8 / max(1, len(modes))
    for ax, (key, label) in zip(axes[0], metrics, strict=True):
        for k, mode in enumerate(modes):
            ax.bar([i + k * width for i in range(len(rows))],
                   [r["modes"][mode][key] for r in rows], width, label=mode)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))],
                      [r["workload"] for r in rows], fontsize=7)
        ax.set_ylabel(label)
        if key != "power_w":
            ax.set_yscale("log")
    axes[0][-1].legend(fontsize=6)
    return [_save(plt, fig, out / "hetero-training.png")]
