"""Verilator lint of the generated Verilog and of the standalone players
around it (targeted waivers only), and ruff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from golden.config import HubConfig
from sim.generate import (
    CONFIGS,
    HUB_PLAY_TOPLEVEL,
    TOPLEVEL,
    generate,
    hub_play_source,
    kind,
    testbench_source,
)
from sim.tools import VERILATOR_WAIVERS, use_verilator


def lint_verilog(path: Path, top: str = TOPLEVEL, *more: Path) -> subprocess.CompletedProcess:
    verilator = use_verilator()
    # the players' build passes the same timescale (sim/fast.py)
    return subprocess.run([verilator, "--lint-only", "-Wall", "--timescale", "1ns/1ps",
                           *VERILATOR_WAIVERS, "--top-module", top, str(path),
                           *map(str, more)], capture_output=True, text=True)


def player(config, rtl: Path) -> tuple[str, Path]:
    """The standalone player toplevel around ``rtl`` and its source."""
    if isinstance(config, HubConfig):
        return HUB_PLAY_TOPLEVEL, hub_play_source(rtl, config)
    return "pim_play", testbench_source(rtl, config)


def lint(configs: list[str] | None = None, ruff: bool = True) -> int:
    failures = 0
    for name in configs or list(CONFIGS):
        config = CONFIGS[name]()
        path = generate(config)
        top, tb = player(config, path)
        for label, result in ((name, lint_verilog(path, kind(config)[0])),
                              (f"{name} {top}", lint_verilog(path, top, tb))):
            ok = result.returncode == 0
            failures += not ok
            print(f"verilator lint {label:7} {'clean' if ok else 'FAILED'}  ({path})")
            if not ok:
                print(result.stderr[-4000:], file=sys.stderr)
    if ruff:
        root = Path(__file__).resolve().parent.parent
        result = subprocess.run([sys.executable, "-m", "ruff", "check", str(root)],
                                capture_output=True, text=True)
        ok = result.returncode == 0
        failures += not ok
        print(f"ruff            {'clean' if ok else 'FAILED'}")
        if not ok:
            print(result.stdout[-4000:], file=sys.stderr)
    return 1 if failures else 0
