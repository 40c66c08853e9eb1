"""Fuzz the command line against its bad-input contract (docs/bad-input.md):
every run either exits 0 with valid JSON where JSON was asked for, or
exits 2 with exactly one line on stderr, no traceback and no output file.
Random argument vectors over the quick commands, random scenario and
profile files, malformed environment variables; hypothesis with a fixed
example budget and a per-example deadline, so the suite's time stays
bounded."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.cli import main

FUZZ = settings(max_examples=120, deadline=20_000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])

#: Values an option may get: numbers at and past every edge, non-numbers,
#: lists, and paths that cannot be written.
NUMBERS = st.sampled_from(["0", "-1", "1", "2", "7", "16", "32", "100", "512", "4096",
                           "65536", "1000000000000", "-99999999999999", "1.5", "nan", "inf",
                           "-inf", "1e3", "0x10"])
WORDS = st.sampled_from(["", " ", "x", "fast", "gddr6-aim", "hbm2-pim", "static", "dcs",
                         "1,2", "a,b", "7,16", "16,32", "1,,2", "é", "\x00"])
VALUES = st.one_of(NUMBERS, WORDS, st.text(max_size=12))

#: The quick commands and their options (nothing here runs for long at any
#: value the bounds let through).
QUICK = {
    ("gemv",): ["--n-out", "--n-in", "--profile", "--set", "--seed", "--json"],
    ("run", "gemv"): ["--n-out", "--n-in", "--profile", "--set", "--seed", "--json",
                      "--tokens", "--steps", "--csv"],
    ("run", "dpa-program-size"): ["--d-head", "--json", "--tokens"],
    ("run", "pimphony"): ["--set", "--show-scenario", "--csv", "--plot", "--json"],
    ("run", "librapim"): ["--set", "--show-scenario", "--json"],
    ("dpa-program",): ["--d-head", "--unroll"],
    ("timing",): ["--profile", "--set", "--json"],
}
SET_KEYS = st.sampled_from(["banks", "rows", "t_rcd", "t_faw", "policy", "bank_groups",
                            "t_refi", "n_out", "tp", "steps", "assumptions.link_gbs",
                            "assumptions.epu_lanes", "batches", "systems", "models", "x.y"])


@st.composite
def argvs(draw, out_dir: Path):
    command = draw(st.sampled_from(sorted(QUICK)))
    argv = list(command)
    for flag in draw(st.lists(st.sampled_from(QUICK[command]), max_size=4, unique=True)):
        if flag == "--show-scenario":
            argv.append(flag)
        elif flag == "--set":
            argv += [flag, f"{draw(SET_KEYS)}={draw(VALUES)}"]
        elif flag in ("--json", "--csv"):
            argv += [flag, draw(st.sampled_from(
                ["-", str(out_dir / "out.json"), str(out_dir / "missing" / "o.json"),
                 str(out_dir), "", "/dev/full"]))]
        elif flag == "--plot":
            argv += [flag, draw(st.sampled_from([str(out_dir / "plots"), "", "/dev/full/x"]))]
        else:
            argv += [flag, draw(VALUES)]
    if command[0] == "run" and command[1] in ("pimphony", "librapim") \
            and "--show-scenario" not in argv:
        argv.append("--show-scenario")  # the studies themselves take minutes
    return argv


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def check_contract(argv, code, out, err, files_before: set, out_dir: Path) -> None:
    made = {p for p in out_dir.rglob("*")} - files_before
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pimorch: error:"), (argv, err)
        assert not [p for p in made if p.is_file()], (argv, made)
        return
    assert code == 0, (argv, code, err)
    assert "Traceback" not in err
    text = None
    if "--show-scenario" in argv:
        text = out  # the scenario, as JSON
    elif "--json" in argv:
        target = argv[argv.index("--json") + 1]
        text = out if target == "-" else None if target == "/dev/full" else \
            Path(target).read_text()
    if text is not None:
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{argv}: bare {c} in JSON"))


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(data=st.data())
def test_random_command_lines_keep_the_contract(data, out_dir):
    argv = data.draw(argvs(out_dir))
    for p in sorted(out_dir.rglob("*"), reverse=True):  # a fresh folder per example
        p.unlink() if p.is_file() else p.rmdir()
    before = set(out_dir.rglob("*"))
    code, out, err = run_cli(argv)
    event(f"{argv[0]} {argv[1] if argv[0] == 'run' else ''}: exit {code}")
    check_contract(argv, code, out, err, before, out_dir)


#: TOML documents: valid, mistyped, non-finite, deep, long, not UTF-8.
TOML_BODIES = st.sampled_from([
    b'name = "x"\n[timing]\nt_rcd = 1\n',
    b'name = "x"\n[timing]\nt_rcd = {a = 1}\nt_rp = 1\nt_ras = 1\nt_ccd = 2\n'
    b't_wr_inp = 1\nt_mac = 1\nt_rd_out = 1\n',
    b'name = "x"\n[timing]\nt_rcd = "fast"\nt_rp = 1\nt_ras = 1\nt_ccd = 2\n'
    b't_wr_inp = 1\nt_mac = 1\nt_rd_out = 1\n',
    b'name = "x"\n[timing]\nt_rcd = nan\nt_rp = 1\nt_ras = 1\nt_ccd = 2\n'
    b't_wr_inp = 1\nt_mac = 1\nt_rd_out = 1\n',
    b'name = "x"\ntiming = 3\n',
    b'[geometry]\nbanks = 1e400\n',
    b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n",
    b'name = "\xff\xfe"\n',
    b"x" * 4000 + b" = 1\n",
    b"[assumptions]\nlink_gbs = nan\n",
    b"[assumptions]\nlink_gbs = -inf\n",
    b"[assumptions]\nlink_gbs = \"fast\"\n",
    b"seed = -1\n",
    b"steps = 0\n",
    b"requests = 1000000000000\n",
    b"batches = [" + b"1, " * 2000 + b"1]\n",
    b"tp = 0\n",
    b"models = []\n",
    b"this is not toml\n",
    b"",
])


@FUZZ
@given(body=TOML_BODIES, extra=st.binary(max_size=40))
def test_random_scenario_and_profile_files_keep_the_contract(body, extra, out_dir):
    path = out_dir / "input.toml"
    path.write_bytes(body + extra)
    for argv in (["gemv", "--profile", str(path)], ["timing", "--profile", str(path)],
                 ["run", "pimphony", "--scenario", str(path), "--show-scenario"],
                 ["run", "librapim", "--scenario", str(path), "--show-scenario"]):
        before = set(out_dir.rglob("*"))
        code, out, err = run_cli(argv)
        event(f"{argv[0]}: exit {code}")
        check_contract(argv, code, out, err, before, out_dir)


@pytest.mark.parametrize("env", [{"SEED": "x"}, {"SEED": "-1"}, {"SEED": "1e9"},
                                 {"SEED": str(1 << 40)}, {"STREAM_COMMANDS": "abc"},
                                 {"STREAM_COMMANDS": "0"}, {"STREAM_COMMANDS": "10" * 10},
                                 {"SIM": "modelsim"}])
def test_malformed_environment_variables_are_one_line(env, monkeypatch):
    """A bad SEED, STREAM_COMMANDS or SIM: one line naming it, exit 2,
    before anything builds or runs."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, out, err = run_cli(["sim", "--no-player"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"environment variable {next(iter(env))}=" in lines[0]


def test_a_closed_pipe_ends_quietly(tmp_path):
    """``pimorch ... --json - | head -1``: the reader leaves; no traceback."""
    import subprocess
    import sys

    script = ("import sys; from sim.cli import main; sys.exit(main(['timing', '--json', '-']))")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    p.stdout.readline()
    p.stdout.close()  # the reader leaves after one line
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and "Traceback" not in err and "Error" not in err


#: The commands that build and run simulators, with their options. The
#: fuzz runs them with the builds and simulations stubbed (``stubs``): what
#: it checks is that every argument is validated before any work starts.
BUILDING = {
    ("sim",): ["--sim", "--test", "--seed", "--waves", "--policy", "--no-hub", "--no-alu",
               "--no-dex", "--no-player", "--stream-commands"],
    ("regress",): ["--commands", "--policy", "--shape", "--sim", "--seed", "--segment",
                   "--segment-size", "--jobs", "--json"],
    ("verilog",): ["--config", "--out"],
    ("aim-compare",): ["--aim-sim", "--profile", "--set", "--policy", "--kernels", "--out",
                       "--json"],
    ("bench",): ["--json", "--sim"],
}
SWITCHES = {"--waves", "--no-hub", "--no-alu", "--no-dex", "--no-player"}
NAMES = st.sampled_from(["verilator", "icarus", "modelsim", "static", "dcs", "pingpong",
                         "dense", "sparse", "mixed", "small", "full16", "gemv", "hub_qkt",
                         "long_dense", "alu_random", "nope", "gemv-4096", "qkt-d128-16k,x",
                         "sv-d128-16k", "gddr6-aim", "hbm3-pim"])


@st.composite
def building_argvs(draw, out_dir: Path, aim: dict):
    command = draw(st.sampled_from(sorted(BUILDING)))
    argv = list(command)
    for flag in draw(st.lists(st.sampled_from(BUILDING[command]), max_size=4, unique=True)):
        if flag in SWITCHES:
            argv.append(flag)
        elif flag == "--set":
            argv += [flag, f"{draw(SET_KEYS)}={draw(VALUES)}"]
        elif flag == "--json":
            argv += [flag, draw(st.sampled_from(
                ["-", str(out_dir / "out.json"), str(out_dir / "missing" / "o.json"),
                 str(out_dir), ""]))]
        elif flag == "--out":
            argv += [flag, draw(st.sampled_from([str(out_dir / "o"), "", "/dev/full/x",
                                                 str(out_dir / "f.txt" / "x")]))]
        elif flag == "--aim-sim":
            argv += [flag, draw(st.sampled_from([*aim.values(), str(out_dir / "none")]))]
        elif flag in GOOD and draw(st.booleans()):
            argv += [flag, draw(st.sampled_from(GOOD[flag]))]
        else:
            argv += [flag, draw(st.one_of(NAMES, NUMBERS, VALUES))]
    return argv


#: Values each option accepts (half the options get one).
GOOD = {"--sim": ["verilator", "icarus"], "--test": ["gemv", "hub_qkt", "bad_commands"],
        "--seed": ["0", "12345"], "--policy": ["static", "dcs", "pingpong"],
        "--stream-commands": ["1", "5000"], "--commands": ["1", "1000", "100000000"],
        "--shape": ["dense", "mixed"], "--segment": ["0", "3"],
        "--segment-size": ["1", "1000", "262144"], "--jobs": ["1", "2"],
        "--config": ["small", "full16"], "--profile": ["gddr6-aim", "hbm3-pim"],
        "--kernels": ["gemv-4096", "qkt-d128-16k,sv-d128-16k"]}


@pytest.fixture
def stubs(monkeypatch, tmp_path):
    """Builds, simulations and Verilog generation replaced by recorders;
    the AiM comparison's kernels by small ones."""
    from golden import kernels
    from sim import aim, fast, generate, regress, runner
    from tb import play_tests

    calls = []
    verilog = tmp_path / "top.v"
    verilog.write_text("module top; endmodule\n")
    monkeypatch.setattr(runner, "build", lambda *a, **k: calls.append("build"))
    monkeypatch.setattr(runner, "run", lambda sim, names, **k: (
        calls.append("run") or [runner.TestResult(names[0], True, 1.0, 0.1)], tmp_path))
    monkeypatch.setattr(play_tests, "run_test", lambda sim, config, name, run_dir, **k: (
        calls.append("play") or play_tests.PlayResult(name, True, k.get("seed") or 1, 0.1)))
    monkeypatch.setattr(generate, "generate", lambda config: calls.append("generate") or verilog)
    monkeypatch.setattr(fast, "build", lambda *a, **k: calls.append("build"))
    monkeypatch.setattr(regress, "_run_all", lambda jobs_list, jobs: (
        calls.append("run") or [{"segment": s.index, "seed": s.seed, "passed": True,
                                 "message": "", "commands": s.commands, "cycles": 1,
                                 "wall_s": 0.1, "sim_wall_s": 0.1, "check_wall_s": 0.1}
                                for _, _, _, s, _ in jobs_list]))
    monkeypatch.setattr(aim, "KERNELS", {name: (lambda cfg: kernels.fc(cfg, 64, 64))
                                         for name in aim.KERNELS})
    import sim.bench
    monkeypatch.setattr(sim.bench, "bench", lambda sims, study_dir: (
        calls.append("bench") or {"rtl": {}}))
    for var in ("SEED", "STREAM_COMMANDS", "SIM", "WAVES"):
        monkeypatch.delenv(var, raising=False)
    return calls


@pytest.fixture(scope="module")
def aim_binaries(tmp_path_factory):
    """An AiM simulator stand-in, one that fails and one not executable."""
    d = tmp_path_factory.mktemp("aim")
    good, bad, plain = d / "aim-ok", d / "aim-fails", d / "aim-plain"
    good.write_text("#!/bin/sh\necho 'memory_system_cycles: 1000'\n")
    bad.write_text("#!/bin/sh\necho 'no' >&2\nexit 3\n")
    plain.write_text("not a program\n")
    good.chmod(0o755)
    bad.chmod(0o755)
    return {"ok": str(good), "fails": str(bad), "plain": str(plain)}


@settings(max_examples=150, deadline=20_000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_building_commands_validate_before_any_work(data, out_dir, stubs, aim_binaries):
    """sim, regress, verilog, aim-compare and bench: a bad argument, value
    or output path is one line and exit 2 before anything is built or
    run; otherwise the stubbed work runs and the command exits 0."""
    argv = data.draw(building_argvs(out_dir, aim_binaries))
    for p in sorted(out_dir.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (out_dir / "f.txt").write_text("a file, not a folder\n")
    before = set(out_dir.rglob("*"))
    stubs.clear()
    code, out, err = run_cli(argv)
    event(f"{argv[0]}: exit {code}")
    if code == 2:
        assert not stubs, (argv, stubs, err)  # refused before any build or run
        assert "aim-ok" not in err or "--aim-sim" not in err, err
    if argv[0] == "aim-compare" and code == 2 and aim_binaries["ok"] in argv:
        event("aim-compare with a working stand-in refused")
    check_contract(argv, code, out, err, before, out_dir)
