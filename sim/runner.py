"""Build and run the cocotb testbenches under Verilator or Icarus.

One simulator build per (simulator, configuration, waves) in
``build/sim/<sim>-<config key>[-waves]``, reused across tests; each test run
gets its own folder under ``build/sim/runs/`` so waveforms never collide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import os
import secrets
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from golden.alu import AluConfig
from golden.config import ChannelConfig, HubConfig, small_config
from sim.generate import (
    ALU_TOPLEVEL,
    BUILD,
    HUB_TOPLEVEL,
    TB_TOPLEVEL,
    config_key,
    generate,
    icarus_source,
    kind,
    testbench_source,
)
from sim.tools import VERILATOR_WAIVERS, require_simulator

TB_MODULE = "tb.test_channel"
HUB_TB_MODULE = "tb.test_hub"
ALU_TB_MODULE = "tb.test_alu"
DEX_TB_MODULE = "tb.test_dex"
#: the PIM module at the decode configuration (tb/hub_stimulus.py decode_rtl_hub)
DECODE_TB_MODULE = "tb.test_decode"
#: Channel policies the PIM module (HUB + channels) is tested with.
HUB_POLICIES = ("static", "dcs")


@dataclass
class TestResult:
    name: str
    passed: bool
    sim_time_ns: float
    wall_s: float
    message: str = ""


@contextlib.contextmanager
def _waves_env(waves: bool):
    """cocotb's runner lets a WAVES environment variable override its
    ``waves`` argument; pin it to the argument for the call. The runner's
    own progress prints are dropped (its tools' output goes to log files)."""
    saved = os.environ.get("WAVES")
    os.environ["WAVES"] = "1" if waves else "0"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        if saved is None:
            del os.environ["WAVES"]
        else:
            os.environ["WAVES"] = saved


def _get_runner(sim: str):
    """cocotb's runner for ``sim``. Under Icarus, waveforms are VCD (the
    runner asks vvp for FST, which needs gtkwave's fst2vcd to read back):
    vvp takes the last of its ``-fst`` / ``-vcd`` arguments."""
    from cocotb_tools.runner import Icarus, get_runner

    if sim != "icarus":
        return get_runner(sim)

    class IcarusVcd(Icarus):
        def _test_command(self):
            cmds = super()._test_command()
            return [[*cmd, "-vcd"] if "-fst" in cmd else cmd for cmd in cmds]

    return IcarusVcd()


def build_dir(sim: str, config, waves: bool) -> Path:
    prefix = kind(config)[1]
    return BUILD / "sim" / f"{sim}-{prefix}{config_key(config)}{'-waves' if waves else ''}"


def _toplevel(config) -> tuple[str, str]:
    """(HDL toplevel, cocotb test module) of a channel, HUB or ALU configuration."""
    if isinstance(config, HubConfig):
        return HUB_TOPLEVEL, HUB_TB_MODULE
    if isinstance(config, AluConfig):
        return ALU_TOPLEVEL, ALU_TB_MODULE
    if config.dual_path:
        return TB_TOPLEVEL, DEX_TB_MODULE
    return TB_TOPLEVEL, TB_MODULE


def build(sim: str, config: ChannelConfig | HubConfig | None = None, waves: bool = False):
    """Generate Verilog and build the simulator model (skipped when current).
    A ChannelConfig builds the channel with the stimulus player (``pim_tb``);
    a HubConfig the PIM module (``pim_module``)."""
    config = config or small_config()
    require_simulator(sim)
    rtl = generate(config)
    sources = [icarus_source(rtl) if sim == "icarus" else rtl]
    if isinstance(config, ChannelConfig):
        sources.append(testbench_source(rtl, config))
    runner = _get_runner(sim)
    args = []
    if sim == "verilator":
        args = [*VERILATOR_WAIVERS, "--x-assign", "fast", "--x-initial", "fast"]
    folder = build_dir(sim, config, waves)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # One build at a time per folder: parallel test workers share the models.
    with open(folder.with_name(folder.name + ".lock"), "w") as lock, _waves_env(waves):
        fcntl.flock(lock, fcntl.LOCK_EX)
        runner.build(sources=[s.resolve() for s in sources], hdl_toplevel=_toplevel(config)[0],
                     build_dir=build_dir(sim, config, waves), build_args=args, waves=waves,
                     timescale=("1ns", "1ps"), always=False,
                     log_file=build_dir(sim, config, waves) / "build.log")
    return runner


def config_policy(config) -> str:
    """The controller policy of a channel or HUB configuration ('' for the
    ALU channel's)."""
    return getattr(config, "policy", None) or getattr(
        getattr(config, "channel", None), "policy", None) or ""


def run(sim: str, testcases: list[str] | None = None,
        config: ChannelConfig | HubConfig | None = None,
        waves: bool = False, seed: int | None = None, run_name: str | None = None,
        extra_env: dict[str, str] | None = None,
        module: str | None = None) -> tuple[list[TestResult], Path]:
    """Run cocotb tests (of ``module``, default the configuration's test
    module); return their results and the run folder."""
    config = config or small_config()
    runner = build(sim, config, waves)
    name = run_name or "-".join(testcases or ["all"])
    test_dir = (BUILD / "sim" / "runs" / f"{sim}{'-waves' if waves else ''}" / name).resolve()
    if test_dir.exists():
        shutil.rmtree(test_dir)
    test_dir.mkdir(parents=True)
    toplevel, default = _toplevel(config)
    module = module or default
    if seed is None:  # the run's seed, chosen here so the testbench can print it (tb/seeds.py)
        seed = secrets.randbelow(1 << 32)
    policy = config_policy(config)
    env = {"PIMORCH_CONFIG": json.dumps(dataclasses.asdict(config)),
           "PIMORCH_TEST_DIR": str(test_dir), "PIMORCH_SEED": str(seed),
           # what a failing check needs to say how to rewrite the run with waves
           "PIMORCH_SIM": sim, "PIMORCH_WAVES": "1" if waves else "0",
           "PIMORCH_TESTS": ",".join(testcases or []), "PIMORCH_POLICY": policy or "",
           **(extra_env or {})}
    plusargs = [f"+dumpfile_path={test_dir / 'waves.vcd'}"] if waves and sim == "icarus" else []
    started = time.perf_counter()
    with _waves_env(waves):
        xml = runner.test(test_module=module, hdl_toplevel=toplevel, testcase=testcases,
                          build_dir=build_dir(sim, config, waves), test_dir=test_dir,
                          waves=waves, seed=seed, extra_env=env, plusargs=plusargs,
                          results_xml=str(test_dir / "results.xml"),
                          log_file=test_dir / "sim.log")
    results = parse_results(Path(xml))
    if not results:
        results = [TestResult(name, False, 0.0, time.perf_counter() - started,
                              f"no results; see {test_dir / 'sim.log'}")]
    if waves:
        convert_waves(sim, test_dir)
    return results, test_dir


def list_tests(policy: str | None = None, module_name: str = TB_MODULE) -> list[str]:
    """The cocotb tests in ``module_name``, in file order; with ``policy``,
    those that apply to it (``ONLY`` in the module names the policy-specific ones)."""
    import importlib

    module = importlib.import_module(module_name)
    only = getattr(module, "ONLY", {})
    return [name for name, obj in vars(module).items()
            if type(obj).__module__.startswith("cocotb") and type(obj).__name__ == "TestGenerator"
            and (policy is None or policy in only.get(name, (policy,)))]


def parse_results(xml: Path) -> list[TestResult]:
    if not xml.is_file():
        return []
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        out.append(TestResult(
            name=case.get("name", "?"),
            passed=failure is None and case.find("skipped") is None,
            sim_time_ns=float(case.get("sim_time_ns", 0) or 0),
            wall_s=float(case.get("time", 0) or 0),
            message="" if failure is None else (failure.get("message") or "failed"),
        ))
    return out


def convert_waves(sim: str, test_dir: Path) -> Path | None:
    """Leave ``waves.vcd`` in the run folder (Icarus writes it there;
    Verilator writes ``dump.vcd``) with a GTKWave view per block and the
    translate filters beside it (sim/waves.py)."""
    from sim.waves import write_views

    vcd = test_dir / "waves.vcd"
    if sim == "verilator":
        dump = test_dir / "dump.vcd"
        if dump.is_file():
            escape_vcd_names(dump, vcd)
            dump.unlink()
    if vcd.is_file():
        write_views(vcd)
        return vcd
    return None


def escape_vcd_names(src: Path, dst: Path) -> None:
    """Copy a VCD, escaping (as Icarus does, with a backslash) the variable
    names that start with ``$``: Verilator writes Amaranth's internal nets
    (``$auto$verilog_backend.cc:...``, ``$1``) bare, and GTKWave's parser
    takes a leading ``$`` for a keyword and gives up on the file."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        for line in f:
            if line.lstrip().startswith(b"$var "):
                parts = line.split(b" ")
                i = next(k for k, p in enumerate(parts) if p == b"$var") + 4
                if i < len(parts) and parts[i].startswith(b"$") and parts[i] != b"$end\n":
                    parts[i] = b"\\" + parts[i]
                    line = b" ".join(parts)
            out.write(line)
            if line.startswith(b"$enddefinitions"):
                break
        shutil.copyfileobj(f, out, 1 << 20)


def waves_enabled() -> bool:
    return os.environ.get("WAVES", "0") not in ("", "0", "false", "no")
