"""The project's command streams as AiM simulator traces, and the comparison.

The AiM simulator (github.com/arkhadem/aim_simulator, a Ramulator 2 fork
that models GDDR6-AiM) reads a trace of AiM ISR instructions. One channel
command becomes one instruction on channel 0 (mask 0x1):

* WR-INP -> ``AiM WR_GB 1 0 0x1`` (opsize 1, GPR 0): one WRGB;
* MAC -> ``AiM MAC_ABK 1 0x1 ROW``: one MAC16 on the open row (the
  simulator opens and closes rows itself, ACT16 / PREA);
* RD-OUT -> ``AiM RD_MAC 0 0x1``: one RDMAC16;
* ``AiM EOC`` ends the trace.

The simulator numbers a MAC's column from 0 and its GBuf entry by the
column; only the timing is compared, which depends on the row alone.
``aim_config`` writes the simulator's configuration with the profile's
timing values (``AIM_KEYS``); ``compare`` runs both sides and reports the
cycles (docs/timing.md, "The AiM simulator"). The simulator is built
outside the project and is never needed by the tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from golden.config import ChannelConfig
from golden.isa import Opcode
from golden.kernels import fc, qkt, sv
from golden.streams import Command

#: Project timing key -> the AiM simulator's GDDR6 timing name. Its
#: composite rules (WR to PRE, WR to RD) and the register-access latencies
#: keep the simulator's preset values.
AIM_KEYS = {"t_rcd": "nRCDRDMAC", "t_rp": "nRP", "t_ras": "nRAS", "t_ccd": "nCCDS",
            "t_ccd_l": "nCCDL", "t_rc": "nRC", "t_rtp": "nRTP", "t_rrd_s": "nRRDS",
            "t_rrd_l": "nRRDL", "t_modch": "nMODCH", "t_faw": "nFAW"}

_ISR = {Opcode.WR_INP: "AiM WR_GB 1 0 0x1",
        Opcode.MAC: "AiM MAC_ABK 1 0x1 {row}",
        Opcode.RD_OUT: "AiM RD_MAC 0 0x1"}


def trace_lines(commands: list[Command]) -> list[str]:
    """The AiM trace of a channel command stream (WR-INP, MAC, RD-OUT)."""
    lines = ["# project command stream, one channel command per AiM instruction"]
    for i, cmd in enumerate(commands):
        op = Opcode(cmd.opcode)
        if op not in _ISR:
            raise ValueError(f"command {i} ({op.name}): the AiM trace takes only "
                             f"WR_INP, MAC and RD_OUT")
        lines.append(_ISR[op].format(row=cmd.row))
    lines.append("AiM EOC")
    return lines


def aim_config(cfg: ChannelConfig, trace: Path) -> str:
    """The simulator's YAML configuration: GDDR6_AiM presets, the profile's
    values for every key of ``AIM_KEYS`` it sets (0: the key is off in the
    profile; the simulator gets 1 for nMODCH, as it always issues TMOD)."""
    t = cfg.timing
    timing = {}
    for key, name in AIM_KEYS.items():
        value = getattr(t, key)
        if key == "t_modch":
            value = max(value, 1)
        elif key == "t_ccd_l" and not value:
            value = t.t_ccd
        elif not value:
            continue
        timing[name] = value
    lines = "\n".join(f"      {name}: {value}" for name, value in timing.items())
    return f"""Frontend:
  impl: AiMTrace
  path: {trace}
  clock_ratio: 1
  Translation:
    impl: NoTranslation
    max_addr: 2147483648
MemorySystem:
  impl: AiMDRAM
  clock_ratio: 1
  DRAM:
    impl: GDDR6
    org:
      preset: GDDR6_AiM_org
    timing:
      preset: GDDR6_AiM_timing
{lines}
  Controller:
    impl: AiM
    clock_ratio: 1
    Scheduler:
      impl: FRFCFS
    RefreshManager:
      impl: AllBank
    plugins:
  AddrMapper:
    impl: RoBaRaCoCh
"""


#: The longest one kernel's AiM simulator run may take.
RUN_TIMEOUT_S = 3600


def check_binary(binary: str | Path) -> Path:
    """``binary`` is an executable file (ValueError naming --aim-sim)."""
    binary = Path(binary)
    if not binary.is_file():
        raise ValueError(f"--aim-sim {binary}: no such file (build the AiM simulator, "
                         f"docs/timing.md)")
    if not os.access(binary, os.X_OK):
        raise ValueError(f"--aim-sim {binary}: not executable")
    return binary


def run_aim(binary: Path, cfg: ChannelConfig, commands: list[Command],
            workdir: Path | None = None) -> dict:
    """Run the AiM simulator on ``commands``: memory-system cycles and the
    channel's command counts."""
    binary = check_binary(binary)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        trace = Path(tmp) / "stream.trace"
        trace.write_text("\n".join(trace_lines(commands)) + "\n")
        conf = Path(tmp) / "aim.yaml"
        conf.write_text(aim_config(cfg, trace))
        try:
            out = subprocess.run([str(binary), "-f", str(conf)], capture_output=True,
                                 text=True, check=False, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ValueError(f"--aim-sim {binary}: no result within {RUN_TIMEOUT_S} s") from None
        except OSError as e:
            raise ValueError(f"--aim-sim {binary}: cannot run it ({e.strerror or e})") from None
    if out.returncode:
        raise ValueError(f"AiM simulator failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    cycles = re.search(r"memory_system_cycles: (\d+)", out.stdout)
    if not cycles:
        raise ValueError("AiM simulator output has no memory_system_cycles")
    counts: dict[str, int] = {}  # over every channel (mask 0x1 is the simulator's channel 31)
    for m in re.finditer(r"CH\d+_num_(\w+)_commands: (\d+)", out.stdout):
        if int(m[2]):
            counts[m[1]] = counts.get(m[1], 0) + int(m[2])
    return {"cycles": int(cycles[1]), "commands": counts}


#: The comparison's kernels: name -> builder (golden.kernels) on a config.
KERNELS = {
    "gemv-4096": lambda cfg: fc(cfg, 4096, 4096),
    "qkt-d128-16k": lambda cfg: qkt(cfg, 128, 1, 16 * 1024),
    "qkt-d128-128k": lambda cfg: qkt(cfg, 128, 1, 128 * 1024),
    "sv-d128-16k": lambda cfg: sv(cfg, 128, 1, 16 * 1024),
    "sv-d128-128k": lambda cfg: sv(cfg, 128, 1, 128 * 1024),
}
#: The simulator issues no refresh (its GDDR6_AiM_org has no rank level, and
#: its all-bank refresh manager refreshes per rank), so both sides run
#: without; every other value is the profile's.
NO_REFRESH = {"t_refi": 0, "t_rfc": 0}


def compare(profile: str, overrides: dict, kernels: list[str], policy: str = "static",
            binary: Path | None = None, out_dir: Path | None = None) -> dict:
    """The project's cycles (``policy``, one OBuf entry as the device) for
    each kernel, and with ``binary`` the AiM simulator's on the same trace;
    with ``out_dir`` the traces and configurations are kept there."""
    import time

    from golden.channel import ChannelModel
    from golden.config import load_profile
    from sim import outputs

    cfg = load_profile(profile, **{"obuf_entries": 1, **NO_REFRESH, **overrides})
    unknown = [name for name in kernels if name not in KERNELS]
    if unknown:
        raise ValueError(f"unknown kernel(s) {', '.join(map(repr, unknown))} "
                         f"(known: {', '.join(KERNELS)})")
    if binary is not None:
        binary = check_binary(binary)
    rows, files = [], {}
    for name in kernels:
        k = KERNELS[name](cfg)
        start = time.perf_counter()
        r = ChannelModel(cfg.replace(policy=policy)).run(k.commands, k.wdata)
        row = {"kernel": name, "commands": len(k.commands), "project_cycles": r.cycles,
               "mode_switches": r.mode_switches, "golden_wall_s": round(
                   time.perf_counter() - start, 2)}
        if out_dir is not None:
            trace = out_dir / f"{name}.trace"
            files[trace] = "\n".join(trace_lines(k.commands)) + "\n"
            files[out_dir / f"{name}.yaml"] = aim_config(cfg, trace.resolve())
        if binary is not None:
            aim = run_aim(binary, cfg, k.commands)
            row.update(aim_cycles=aim["cycles"], ratio=round(r.cycles / aim["cycles"], 4),
                       aim_commands=aim["commands"])
        rows.append(row)
    if out_dir is not None:  # written once every kernel has run, each file atomically
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"--out {out_dir}: {e.strerror or e}") from None
        for path, text in files.items():
            outputs.write_text(path, text, "--out")
    return {"profile": profile, "config": cfg.describe(), "policy": policy,
            "refresh": "off on both sides (the AiM simulator issues none)", "rows": rows}
