"""Verilator lint of the generated Verilog (targeted waivers only) and ruff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sim.generate import CONFIGS, TOPLEVEL, generate, kind
from sim.tools import VERILATOR_WAIVERS, use_verilator


def lint_verilog(path: Path, top: str = TOPLEVEL) -> subprocess.CompletedProcess:
    verilator = use_verilator()
    return subprocess.run([verilator, "--lint-only", "-Wall", *VERILATOR_WAIVERS,
                           "--top-module", top, str(path)], capture_output=True, text=True)


def lint(configs: list[str] | None = None, ruff: bool = True) -> int:
    failures = 0
    for name in configs or list(CONFIGS):
        config = CONFIGS[name]()
        path = generate(config)
        result = lint_verilog(path, kind(config)[0])
        ok = result.returncode == 0
        failures += not ok
        print(f"verilator lint {name:7} {'clean' if ok else 'FAILED'}  ({path})")
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
