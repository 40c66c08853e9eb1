"""Standalone player runs: the channel at the simulator's own speed.

The ``pim_play`` toplevel (tb/pim_tb.v.in) plays loads of commands and
write beats from hex files into the channel (or the JIT-Q ALU channel, for
an AluConfig) and records every handshake and trace entry; no VPI, no
cocotb, no Python in the simulation loop.
Python writes the stimulus, runs the simulator once for all loads, and
scores each load's record against the golden model with the same
scoreboard as the cocotb testbench (tb/scoreboard.py).

Builds: ``build/fast/[alu-]<sim>-<config key>-<recipe>/``: under Verilator
a C++ model built without ``--vpi`` and ``--public-flat-rw`` around
tb/pim_play_main.cpp, under Icarus a ``vvp`` file. Runs: one folder per run, given by the caller.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from golden.alu import AluConfig
from golden.channel import Command
from golden.config import ChannelConfig, HubConfig
from sim.generate import (
    BUILD,
    HUB_PLAY_TOPLEVEL,
    PLAY_ADDR_BITS,
    PLAY_MAX,
    config_key,
    generate,
    hub_play_source,
    icarus_source,
    kind,
    play_cmd_bytes,
    testbench_source,
)
from sim.tools import COCOTB_MAKEFLAGS, VERILATOR_WAIVERS, ToolError, require_simulator
from tb import scoreboard
from tb.scoreboard import PLAY_SMALL_BITS, Observed, ScoreboardError

MAIN_CPP = Path(__file__).resolve().parent.parent / "tb" / "pim_play_main.cpp"
TOP = "pim_play"
FAST_MAKEFLAGS = "OPT_FAST=-O2 OPT_SLOW=-O0 OPT_GLOBAL=-O2"
_RECIPE = hashlib.sha256(MAIN_CPP.read_bytes() + Path(__file__).read_bytes()).hexdigest()[:6]


@dataclass
class Load:
    """One stream through the player, after a reset (memories carry over)."""

    commands: list[Command] | list[int]  # ALU command words for the ALU channel
    wdata: list[int]
    idle: float = 0.0
    backpressure: float = 0.0
    lfsr_seed: int = 1
    hold: tuple[int, int] | None = None  # (write beat, cycle): hold the beat back until then


@dataclass
class BuildInfo:
    path: Path  # the executable (Verilator) or the vvp file (Icarus)
    built: bool  # False: an up-to-date build was reused
    wall_s: float


def build_dir(sim: str, config: ChannelConfig | AluConfig | HubConfig,
              play_bits: int = PLAY_ADDR_BITS) -> Path:
    """One folder per simulator, configuration (RTL and testbench sources
    included), player array size and build recipe (this file and the
    Verilator clock loop)."""
    bits = "" if play_bits == PLAY_ADDR_BITS else f"-b{play_bits}"
    return BUILD / "fast" / f"{kind(config)[1]}{sim}-{config_key(config)}-{_RECIPE}{bits}"


def play_bits_for(entries: int) -> int:
    """The player array size (log2 entries) for loads of up to ``entries``
    commands and beats: the small build when they fit it, else the full one."""
    return PLAY_SMALL_BITS if entries <= 1 << PLAY_SMALL_BITS else PLAY_ADDR_BITS


def _largest(loads: list[Load]) -> int:
    """The most commands or beats any of ``loads`` holds."""
    return max(max(len(ld.commands), len(ld.wdata)) for ld in loads)


def play_bits(loads: list[Load]) -> int:
    """``play_bits_for`` the largest of ``loads``."""
    return play_bits_for(_largest(loads))


def build(sim: str, config: ChannelConfig | AluConfig | HubConfig, jobs: int = 2,
          play_bits: int = PLAY_ADDR_BITS) -> BuildInfo:
    """Build the standalone player model of ``config`` (reused when current):
    ``pim_play`` around a channel or ALU channel, its arrays holding
    ``2**play_bits`` commands, or ``hub_play`` around the PIM module for a
    HubConfig. The model class is Vpim_play either way (one clock loop,
    tb/pim_play_main.cpp)."""
    require_simulator(sim)
    started = time.perf_counter()
    rtl = generate(config)
    if isinstance(config, HubConfig):
        tb, top = hub_play_source(rtl, config), HUB_PLAY_TOPLEVEL
        play_bits = PLAY_ADDR_BITS
    else:
        tb, top = testbench_source(rtl, config, play_bits), TOP
    folder = build_dir(sim, config, play_bits)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / ("Vpim_play" if sim == "verilator" else "pim_play.vvp")
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers share one build
        if target.is_file():
            return BuildInfo(target, False, time.perf_counter() - started)
        log = folder / "build.log"
        if sim == "verilator":
            obj = folder / "obj"
            cmd = [shutil.which("verilator"), "--cc", "--exe", "--build", "-j", str(jobs),
                   "--top-module", top, "--prefix", "Vpim_play",
                   "--x-assign", "fast", "--x-initial", "fast",
                   "--no-timing", "--timescale", "1ns/1ps", *VERILATOR_WAIVERS,
                   "-Mdir", str(obj), "-o", "Vpim_play",
                   str(rtl.resolve()), str(tb.resolve()), str(MAIN_CPP)]
        else:
            cmd = ["iverilog", "-g2012", "-s", top, "-o", str(target.with_suffix(".tmp")),
                   str(icarus_source(rtl).resolve()), str(tb.resolve())]
        env = dict(os.environ)
        if sim == "verilator":
            # -O2 on the per-cycle code (Verilator's default -Os runs 1.3x slower)
            env["MAKEFLAGS"] = env.get("MAKEFLAGS", "").replace(COCOTB_MAKEFLAGS, FAST_MAKEFLAGS)
        with open(log, "w") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        if done.returncode != 0:
            raise ToolError(f"{sim} build of {top} failed; see {log}")
        if sim == "verilator":
            (folder / "obj" / "Vpim_play").replace(target)
        else:
            target.with_suffix(".tmp").replace(target)
    return BuildInfo(target, True, time.perf_counter() - started)


def _hex_lines(values) -> str:
    return "".join(f"{v:x}\n" for v in values)


def write_loads(config: ChannelConfig | AluConfig, loads: list[Load], run_dir: Path,
                slice_rows: int = 0) -> None:
    """Write the loads' files into ``run_dir``: parameters (hex words),
    commands and beats (binary, big-endian, as pim_tb's $fread takes them)."""
    checker = scoreboard.model_for(config, slice_rows)
    cmd_bytes = play_cmd_bytes(config)
    for k, ld in enumerate(loads):
        if len(ld.commands) > PLAY_MAX or len(ld.wdata) > PLAY_MAX:
            raise ValueError(f"the player holds {PLAY_MAX} commands and beats per load; "
                             f"split the stream ({len(ld.commands)} commands, "
                             f"{len(ld.wdata)} beats)")
        n_rdata, n_trace = scoreboard.expected_counts(checker, ld.commands)
        hold_beat, hold_until = ld.hold or (0, 0)
        par = [len(ld.commands), len(ld.wdata), n_rdata, n_trace,
               min(65535, int(ld.idle * 65536)), min(65535, int(ld.backpressure * 65536)),
               ld.lfsr_seed & 0xFFFFFFFF, hold_beat, hold_until,
               scoreboard.quiet_cycles(config),
               scoreboard.cycle_limit(config, len(ld.commands), ld.idle, ld.backpressure,
                                      hold_until)]
        (run_dir / f"play_par_{k}.hex").write_text(_hex_lines(par))
        (run_dir / f"play_cmds_{k}.bin").write_bytes(b"".join(
            (c if isinstance(c, int) else c.pack()).to_bytes(cmd_bytes, "big")
            for c in ld.commands))
        (run_dir / f"play_wdata_{k}.bin").write_bytes(b"".join(
            w.to_bytes(32, "big") for w in ld.wdata))


def read_load(config: ChannelConfig | AluConfig, run_dir: Path, k: int):
    """Load ``k`` of ``run_dir`` as write_loads wrote it: (parameter words,
    command words, write beats)."""
    run_dir = Path(run_dir)
    par = [int(x, 16) for x in (run_dir / f"play_par_{k}.hex").read_text().split()]
    n = play_cmd_bytes(config)
    raw = (run_dir / f"play_cmds_{k}.bin").read_bytes()
    words = [int.from_bytes(raw[i:i + n], "big") for i in range(0, len(raw), n)]
    raw = (run_dir / f"play_wdata_{k}.bin").read_bytes()
    beats = [int.from_bytes(raw[i:i + 32], "big") for i in range(0, len(raw), 32)]
    return par, words, beats


def collect(run_dir: Path, n_loads: int, what: str = "the simulator") -> list[Observed]:
    """Each load's record and final status (play_summary.txt) from ``run_dir``."""
    summary = run_dir / "play_summary.txt"
    lines = summary.read_text().split("\n") if summary.is_file() else []
    out = []
    for line in filter(None, lines):
        kind, k, *rest = line.split()
        if kind == "X":
            raise ScoreboardError(f"player: load {k} not done after its cycle limit "
                                  f"(cycle {rest[0]}); record in "
                                  f"{run_dir / f'play_record_{k}.txt'}")
        obs = scoreboard.read_record(run_dir, int(k))
        obs.status = scoreboard.status_tuple(int(rest[0], 16))
        obs.cycles = int(rest[1])
        out.append(obs)
    if len(out) != n_loads:
        raise ScoreboardError(f"{what} stopped after {len(out)} of {n_loads} loads; "
                              f"see {run_dir / 'sim.log'}")
    return out


def _fresh(run_dir: Path) -> Path:
    """An empty run folder (a previous run's files removed)."""
    run_dir = Path(run_dir)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return run_dir


def _simulate(sim: str, exe: Path, run_dir: Path, plusargs=()) -> int:
    """Run the built player in ``run_dir`` (output in sim.log); its exit status."""
    cmd = [str(exe.resolve())] if sim == "verilator" else ["vvp", "-n", str(exe.resolve())]
    with open(run_dir / "sim.log", "w") as log:
        return subprocess.run([*cmd, *plusargs], cwd=run_dir, stdout=log,
                              stderr=subprocess.STDOUT).returncode


def run(sim: str, config: ChannelConfig | AluConfig, loads: list[Load], run_dir: Path,
        slice_rows: int = 0, times: dict | None = None, bits: int | None = None
        ) -> list[Observed]:
    """Play ``loads`` in order in one simulation; return each load's record.
    Raises ScoreboardError when a load hangs (its cycle limit) or the
    simulator stops early. ``times`` receives the wall seconds of writing
    the loads, of the simulator process and of reading the records.
    ``bits``: the player's array size (default: ``play_bits(loads)``)."""
    if not loads:
        raise ValueError("no loads to play")
    bits = bits or play_bits(loads)
    if _largest(loads) > 1 << bits:
        raise ValueError(f"a load does not fit the player's 2**{bits} entries")
    exe = build(sim, config, play_bits=bits).path
    run_dir = _fresh(run_dir)
    t0 = time.perf_counter()
    write_loads(config, loads, run_dir, slice_rows)
    t1 = time.perf_counter()
    status = _simulate(sim, exe, run_dir, [f"+loads={len(loads)}", f"+slice_rows={slice_rows}"])
    t2 = time.perf_counter()
    out = collect(run_dir, len(loads), f"{sim} (exit status {status})")
    if times is not None:
        times.update(write_s=t1 - t0, simulator_s=t2 - t1, read_s=time.perf_counter() - t2)
    return out


def _cocotb_loads(sim: str, config: ChannelConfig, loads: list[Load], run_dir: Path, test: str,
                  slice_rows: int = 0):
    """Write ``loads`` into ``run_dir``/loads and run the cocotb ``test`` on
    them (tb/test_channel.py); its run folder. Raises ScoreboardError when
    the test fails."""
    from sim import runner

    run_dir = _fresh(run_dir)
    (run_dir / "loads").mkdir()
    write_loads(config, loads, run_dir / "loads", slice_rows)
    env = {"PIMORCH_PLAY_DIR": str((run_dir / "loads").resolve()),
           "PIMORCH_PLAY_LOADS": str(len(loads)), "PIMORCH_PLAY_SLICE_ROWS": str(slice_rows)}
    results, test_dir = runner.run(sim, [test], config=config, extra_env=env,
                                   run_name=f"{test.split('_')[0]}-{run_dir.name}")
    if not results or not results[0].passed:
        raise ScoreboardError(f"cocotb {test} failed: "
                              f"{results[0].message if results else 'no result'}; "
                              f"see {test_dir / 'sim.log'}")
    return test_dir, results[0].wall_s


def run_under_cocotb(sim: str, config: ChannelConfig, loads: list[Load], run_dir: Path,
                     slice_rows: int = 0) -> tuple[list[Observed], float]:
    """The same loads through the cocotb runner (tb/test_channel.py
    ``player_loads``: cocotb drives the player in pim_tb, as the long tests
    did before the standalone toplevel). Returns the records and the
    test's wall time as cocotb reports it (for make bench)."""
    test_dir, wall = _cocotb_loads(sim, config, loads, run_dir, "player_loads", slice_rows)
    return collect(test_dir, len(loads), what="cocotb"), wall


def run_cocotb_driver(sim: str, config: ChannelConfig, loads: list[Load],
                      run_dir: Path) -> tuple[dict, float]:
    """The first load through the cocotb testbench's per-cycle Python driver
    (tb/test_channel.py ``driver_loads``: tb/bench.py ChannelTB, as the
    long tests ran before the standalone player), with the load's idle and
    backpressure probabilities but Python's own random patterns (so its
    cycle count differs a little). The test checks the run against golden;
    returns its metrics (commands, cycles, ...) and wall time (make bench)."""
    import json

    test_dir, wall = _cocotb_loads(sim, config, loads[:1], run_dir, "driver_loads")
    return json.loads((test_dir / "metrics.json").read_text()), wall


def run_hub(sim: str, config: HubConfig, calls: list, run_dir: Path,
            max_wait: int = 200_000, times: dict | None = None):
    """Play host calls (golden.hub.HostCall) on the PIM module in one
    standalone simulation; return its HubRecord (tb/hub_scoreboard.py).
    Raises HubScoreboardError when a call gets no response in ``max_wait``
    cycles or the simulator stops early."""
    from golden.isa import HOST_FIELDS, RESPONSE_FIELDS, pack, unpack
    from tb.hub_scoreboard import CallRecord, HubRecord, HubScoreboardError

    if not calls:
        raise ValueError("no host calls to play")
    if len(calls) > PLAY_MAX:
        raise ValueError(f"the hub player holds {PLAY_MAX} host calls, not {len(calls)}")
    exe = build(sim, config).path
    run_dir = _fresh(run_dir)
    t0 = time.perf_counter()
    (run_dir / "hub_par.hex").write_text(_hex_lines([len(calls), max_wait,
                                                     scoreboard.quiet_cycles(config.channel)]))
    (run_dir / "hub_calls.hex").write_text(_hex_lines(
        pack(HOST_FIELDS, {"host_op": int(c.op), "req_id": c.req_id, "arg_a": c.arg_a,
                           "arg_b": c.arg_b, "data": c.data}) for c in calls))
    t1 = time.perf_counter()
    status = _simulate(sim, exe, run_dir)
    t2 = time.perf_counter()
    rec = HubRecord(config.n_channels)
    accepted = None
    path = run_dir / "hub_record.txt"
    ended = False
    with open(path) as f:
        for line in f:
            kind, *rest = line.split()
            if kind == "H":
                c, bits = int(rest[0]), [int(x, 16) for x in rest[1:]]
                for log_, b in zip((rec.acc, rec.wacc, rec.pops), bits, strict=True):
                    for ch in range(config.n_channels):
                        if b >> ch & 1:
                            log_[ch].append(c)
            elif kind == "T":
                word = int(rest[1], 16)
                rec.traces[int(rest[0])].append(scoreboard.trace_tuple(word))
            elif kind == "L":
                rec.loads.append((int(rest[0]), int(rest[1], 16), int(rest[2], 16),
                                  int(rest[3])))
            elif kind == "A":
                accepted = int(rest[0])
            elif kind == "P":
                rsp = unpack(RESPONSE_FIELDS, int(rest[1], 16))
                rec.calls.append(CallRecord(accepted, int(rest[0]), rsp["rsp_code"],
                                            rsp["data"]))
            elif kind == "E":
                rec.cycle, ended = int(rest[0]), True
            elif kind == "X":
                raise HubScoreboardError(f"hub player: call {rest[0]} ({calls[int(rest[0])]}) "
                                         f"got no response in {max_wait} cycles (cycle "
                                         f"{rest[1]}); record in {path}")
            else:
                raise HubScoreboardError(f"{path}: unknown record line {line.strip()!r}")
    if not ended:
        raise HubScoreboardError(f"{sim} (exit status {status}) stopped after "
                                 f"{len(rec.calls)} of {len(calls)} calls; see "
                                 f"{run_dir / 'sim.log'}")
    if times is not None:
        times.update(write_s=t1 - t0, simulator_s=t2 - t1, read_s=time.perf_counter() - t2)
    return rec


def play_decode(sim: str, dec, run_dir: Path) -> dict:
    """Replay a golden decode (``golden.hub.decode.PimDecoder``: every host
    call it made) on the RTL PIM module of its configuration in one
    standalone simulation; score the record against the golden HUB and
    channels (tb/hub_scoreboard.py), every cycle of it against the golden
    module in closed loop, and every response against what the golden
    decoder got. Returns the module's cycles as the RTL took them
    (``golden.hub.decode.module_cycles``: per program kind its STEPs' cycles,
    per lock step its cycles) and the run's."""
    from golden.hub.decode import module_cycles
    from tb import hub_scoreboard

    times: dict = {}
    calls = dec.h.calls
    rec = run_hub(sim, dec.hub, calls, run_dir, times=times)
    t0 = time.perf_counter()
    hub_scoreboard.check_responses(calls, [(c.code, c.data) for c in rec.calls],
                                   dec.h.responses)
    check = hub_scoreboard.check(dec.hub, calls, rec, closed_loop=True)
    check_s = time.perf_counter() - t0
    return {"simulator": sim, "module_cycles": rec.cycle, "host_calls": len(calls),
            "channel_commands": check.channel_commands, "epu_runs": check.epu_runs,
            **module_cycles(dec, rec.calls),
            "simulator_s": round(times["simulator_s"], 2), "check_s": round(check_s, 2)}
