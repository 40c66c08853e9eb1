"""The standalone player (sim/fast.py, tb/play_tests.py) under BOTH
Verilator and Icarus: the long streams, the GEMV, the ID wrap, the kernel
and the dual-path stream, scored against golden; and the player's own
mechanics (done condition, hang detection, replay, a scoreboard that
fails on a corrupted record)."""

from pathlib import Path

import numpy as np
import pytest

from golden.alu import AluConfig
from golden.channel import ChannelModel
from golden.config import POLICIES, ChannelConfig, HubConfig, small_config, small_hub_config
from sim import fast
from sim.generate import ALU_TEST_CONFIG, BUILD, CONFIGS, dex_test_config
from tb import play_tests, scoreboard
from tb.alu_stimulus import random_program
from tb.hub_stimulus import decode_rtl_hub
from tb.stimulus import dex_stream, random_stream
from tests.conftest import build_group, full_run, seed_option

SIMS = ["verilator", "icarus"]
#: sizes under Icarus (about 2,400 cycles per second there); Verilator runs
#: each test at its own size (tb/play_tests.py)
ICARUS_SIZE = {"long_dense": 3000, "long_sparse": 3000, "dex_long": 200, "dcs_kernel": 64,
               "gemv": 64, "alu_random": 1500,
               "alu_kernels": 4,  # every placement; the FP32-source kernel in Verilator
               "hub_qkt": 4,
               "hub_decode": 3}  # prompts of 3, 2 and 3 tokens: no chunk grown mid-decode
#: 2 x 65,600 commands, and the PIM module's sessions (about 500 cycles per
#: second; its cocotb tests run under Icarus in make test): under Icarus
#: only in make test-full
ICARUS_FULL_ONLY = ("id_wrap", "hub_qkt", "hub_faults", "hub_host_errors", "hub_decode")
pytestmark = [pytest.mark.cocotb, build_group("dcs")]  # the tests below use the DCS models


def cases():
    for sim in SIMS:
        for policy in POLICIES:
            for test in play_tests.list_tests(policy):
                yield pytest.param(sim, small_config().replace(policy=policy), test,
                                   id=f"{sim}-{policy}-{test}", marks=build_group(policy))
        for test in play_tests.list_tests(kind="dex"):
            yield pytest.param(sim, dex_test_config(), test, id=f"{sim}-dex-{test}",
                               marks=build_group("dex"))
        for test in play_tests.list_tests(kind="alu"):
            yield pytest.param(sim, ALU_TEST_CONFIG, test, id=f"{sim}-alu-{test}",
                               marks=build_group("alu"))
        for policy in ("static", "dcs"):
            for test in play_tests.list_tests(policy, kind="hub"):
                yield pytest.param(sim, small_hub_config(policy), test,
                                   id=f"{sim}-hub-{policy}-{test}",
                                   marks=build_group(f"hub-{policy}"))
        for test in play_tests.list_tests(kind="decode"):
            yield pytest.param(sim, decode_rtl_hub(), test, id=f"{sim}-decode-{test}",
                               marks=build_group("decode"))
    # the gddr6-aim geometry (16 banks x 64 words per row, 64 rows): make test-full
    yield pytest.param("verilator", CONFIGS["full16"](), "long_sparse",
                       id="verilator-full16-long_sparse", marks=build_group("full16"))


@pytest.mark.parametrize("sim, config, test", list(cases()))
def test_player_matches_golden(sim, config, test, request):
    if sim == "icarus" and test in ICARUS_FULL_ONLY and not full_run(request):
        pytest.skip("under Icarus in make test-full (pytest --full); Verilator runs it here")
    if isinstance(config, ChannelConfig) and config.banks == 16 and not full_run(request):
        pytest.skip("the 16-bank channel runs in make test-full (pytest --full)")
    size = None
    if sim == "icarus":
        size = ICARUS_SIZE.get(test)
    if test in play_tests.SCALED:
        size = request.config.getoption("--stream-commands") or size
    if isinstance(config, AluConfig):
        name = f"alu-{config.banks}b-{test}"
    elif isinstance(config, HubConfig):
        name = f"hub-{config.channel.policy}-{config.channel.banks}b-{test}"
    else:
        name = f"{config.policy}{'-dex' if config.dual_path else ''}-{config.banks}b-{test}"
    r = play_tests.run_test(sim, config, test, BUILD / "fast" / "runs" / sim / f"pytest-{name}",
                            seed=seed_option(request), size=size)
    assert r.passed, f"{r.message} (seed {r.seed}; run folder {r.run_dir})"
    assert r.metrics["cycles"] > 0
    assert r.metrics["commands"] > 0 or r.metrics.get("host_calls", 0) > 0


def _small_run(sim, tmp_path, n=300, policy="dcs", seed=11):
    cfg = small_config().replace(policy=policy)
    rng = np.random.default_rng(seed)
    cmds, wdata = random_stream(cfg, n, rng, bad=0.05, shape="sparse")
    loads = [fast.Load(cmds, wdata, 0.2, 0.3, 12345)]
    return cfg, loads, fast.run(sim, cfg, loads, tmp_path / "run")


@pytest.mark.parametrize("sim", SIMS)
def test_corrupted_record_fails_the_scoreboard(sim, tmp_path):
    """The scoreboard passes the record as played, and fails it with one
    read beat flipped, one trace entry a cycle late, or the status changed."""
    cfg, loads, (obs,) = _small_run(sim, tmp_path)
    ld = loads[0]
    scoreboard.check(ChannelModel(cfg), ld.commands, ld.wdata, obs)
    assert obs.rdata and obs.status[2] > 0  # the stream reads and has bad commands
    bad = scoreboard.Observed(**{**obs.__dict__, "rdata": [obs.rdata[0] ^ 1, *obs.rdata[1:]]})
    with pytest.raises(scoreboard.ScoreboardError, match="read beat 0"):
        scoreboard.check(ChannelModel(cfg), ld.commands, ld.wdata, bad)
    i, op, c = obs.trace[5]
    late = scoreboard.Observed(**{**obs.__dict__,
                                  "trace": [*obs.trace[:5], (i, op, c + 1), *obs.trace[6:]]})
    with pytest.raises(scoreboard.ScoreboardError, match="differs at entry 5"):
        scoreboard.check(ChannelModel(cfg), ld.commands, ld.wdata, late)
    status = scoreboard.Observed(**{**obs.__dict__, "status": (0, 0, 0)})
    with pytest.raises(scoreboard.ScoreboardError, match="status"):
        scoreboard.check(ChannelModel(cfg), ld.commands, ld.wdata, status)


def test_hung_load_is_reported(tmp_path, monkeypatch):
    """A load whose done condition can never hold (one read beat more than
    the stream returns) stops at its cycle limit with a message naming
    the load and its record; the run does not hang."""
    real = scoreboard.expected_counts

    def one_more(model, commands):
        n_rdata, n_trace = real(model, commands)
        return n_rdata + 1, n_trace

    monkeypatch.setattr(scoreboard, "expected_counts", one_more)
    monkeypatch.setattr(scoreboard, "cycle_limit", lambda *a, **k: 5000)
    with pytest.raises(scoreboard.ScoreboardError, match="load 0 not done"):
        _small_run("verilator", tmp_path, n=50)
    # the hung load's record is written too (pim_tb's flush), whole
    obs = scoreboard.read_record(tmp_path / "run", 0)
    assert len(obs.cmd_arrivals) == 50 and obs.trace and obs.rdata


@pytest.mark.parametrize("sim", SIMS)
def test_record_files_are_checked(sim, tmp_path):
    """The record's counts must match its files: a file cut short, or a
    count past what the player's arrays hold, is an error naming the file."""
    _small_run(sim, tmp_path)
    run = tmp_path / "run"
    head = (run / "play_record_0.txt").read_text().split()
    assert head[0] == "N" and int(head[1]) == 300
    trace = run / "play_record_0_trace.hex"
    lines = trace.read_text().splitlines()
    trace.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(scoreboard.ScoreboardError, match="play_record_0_trace.hex: .* the count"):
        fast.collect(run, 1)
    bits = int(head[5])
    assert bits == scoreboard.PLAY_SMALL_BITS  # 300 commands: the small build
    (run / "play_record_0.txt").write_text(f"N 300 {head[2]} {head[3]} {(4 << bits) + 1} {bits}\n")
    with pytest.raises(scoreboard.ScoreboardError, match="more than the player's"):
        fast.collect(run, 1)


def test_cocotb_driver_runs_the_load_files(tmp_path):
    """make bench's per-cycle cocotb path (tb/test_channel.py driver_loads)
    runs the player's load files, checked against golden inside the test,
    with the load's idle and backpressure (a cycle count near the
    standalone player's)."""
    cfg, loads, (obs,) = _small_run("icarus", tmp_path, n=200)
    metrics, wall = fast.run_cocotb_driver("icarus", cfg, loads, tmp_path / "driver")
    assert metrics["commands"] == 200 and wall > 0
    assert 0.8 * obs.cycles < metrics["cycles"] < 1.25 * obs.cycles


def test_seed_replays_a_run():
    """The seed a run reports replays it: the same stream, the same cycles."""
    cfg = small_config().replace(policy="dcs")
    runs = [play_tests.run_test("verilator", cfg, "long_sparse",
                                BUILD / "fast" / "runs" / "pytest-replay" / str(i),
                                seed=4242, size=2000) for i in range(2)]
    other = play_tests.run_test("verilator", cfg, "long_sparse",
                                BUILD / "fast" / "runs" / "pytest-replay" / "other",
                                seed=4243, size=2000)
    assert all(r.passed for r in runs + [other])
    assert runs[0].metrics == runs[1].metrics
    assert other.metrics["cycles"] != runs[0].metrics["cycles"]


def test_expected_counts_match_golden():
    """The player's done condition, known from the stream alone, equals
    what the golden model issues and returns: random streams with bad
    commands under every policy, and dual-path streams with ACT-AHEADs."""
    rng = np.random.default_rng(3)
    for policy in POLICIES:
        cfg = small_config().replace(policy=policy)
        cmds, wdata = random_stream(cfg, 2000, rng, bad=0.05)
        _check_counts(cfg, cmds, wdata)
    cfg = dex_test_config()
    split = cfg.rows // 2
    cmds, wdata = dex_stream(cfg, 50, rng, split=split, bad=0.1)
    _check_counts(cfg.replace(slice_rows=split), cmds, wdata)


def _check_counts(cfg, cmds, wdata):
    from golden.isa import DEVICE_ACTIONS

    ref = ChannelModel(cfg).run(cmds, wdata)
    n_rdata, n_trace = scoreboard.expected_counts(ChannelModel(cfg), cmds)
    assert n_rdata == len(ref.rdata)
    assert n_trace == sum(e.opcode not in DEVICE_ACTIONS for e in ref.trace)
    assert n_trace < len(ref.trace)  # the stream opens rows: PRE/ACT are not counted


def test_alu_expected_counts_match_golden():
    """The same done condition for the ALU channel: random programs with
    bad commands (a malformed word every 20) count the read beats and trace
    entries the golden ALU channel gives."""
    from golden.alu import AluChannel
    from golden.isa import DEVICE_ACTIONS

    rng = np.random.default_rng(5)
    words, beats = random_program(rng, 600, ALU_TEST_CONFIG)
    words = [w ^ (int(rng.integers(1, 1 << 20)) << 20) if i % 20 == 7 else w
             for i, w in enumerate(words)]
    ref = AluChannel(ALU_TEST_CONFIG).run(words, beats)
    assert ref.status.err_count > 0
    n_rdata, n_trace = scoreboard.expected_counts(AluChannel(ALU_TEST_CONFIG), words)
    assert n_rdata == len(ref.rdata)
    assert n_trace == sum(e.opcode not in DEVICE_ACTIONS for e in ref.trace)


@build_group("alu")
@pytest.mark.parametrize("sim", SIMS)
def test_alu_record_checked(sim, tmp_path):
    """The ALU channel through the player: a kernel's record passes the
    scoreboard and the quantizer check, and inverted read beats fail both;
    a second load (registers reset, banks carried over) passes too."""
    from golden.alu import AluChannel
    from tb.alu_stimulus import KERNEL_CASES, check_kernel, kernel_case

    rng = np.random.default_rng(8)
    case = kernel_case(ALU_TEST_CONFIG, rng, *KERNEL_CASES[0])
    words, beats = random_program(rng, 200, ALU_TEST_CONFIG)
    loads = [fast.Load(case.words, case.beats, 0.2, 0.2, 99), fast.Load(words, beats, 0.2, 0.2, 7)]
    obs_k, obs_r = fast.run(sim, ALU_TEST_CONFIG, loads, tmp_path / "run")
    model = AluChannel(ALU_TEST_CONFIG)
    scoreboard.check(model, case.words, case.beats, obs_k)
    check_kernel(ALU_TEST_CONFIG, case, obs_k.rdata)
    bad = scoreboard.Observed(**{**obs_k.__dict__,
                                 "rdata": [r ^ ((1 << 256) - 1) for r in obs_k.rdata]})
    with pytest.raises(scoreboard.ScoreboardError, match="read beat"):
        scoreboard.check(AluChannel(ALU_TEST_CONFIG), case.words, case.beats, bad)
    with pytest.raises(AssertionError, match="differ"):
        check_kernel(ALU_TEST_CONFIG, case, bad.rdata)
    scoreboard.check(model, words, beats, obs_r)  # the banks carried over from the kernel


@pytest.mark.parametrize("sim", SIMS)
def test_standalone_and_cocotb_players_agree(sim, tmp_path):
    """The same loads (two, memories carried over) played by the standalone
    toplevel and from cocotb give identical records, status and cycles:
    the standalone sequencer plays them as the cocotb testbench does."""
    cfg = small_config().replace(policy="dcs")
    rng = np.random.default_rng(21)
    loads = []
    for _ in range(2):
        cmds, wdata = random_stream(cfg, 400, rng, bad=0.03, shape="dense")
        loads.append(fast.Load(cmds, wdata, 0.2, 0.3, int(rng.integers(1, 1 << 32))))
    alone = fast.run(sim, cfg, loads, tmp_path / "alone")
    under, _ = fast.run_under_cocotb(sim, cfg, loads, tmp_path / "cocotb")
    assert alone == under
    model = ChannelModel(cfg)
    for ld, obs in zip(loads, alone, strict=True):
        scoreboard.check(model, ld.commands, ld.wdata, obs)


@build_group("hub-static")
def test_hub_standalone_and_cocotb_agree(tmp_path):
    """The PIM module's fault scenarios and bad host operations (RAW
    commands among them) played by the standalone toplevel and by the cocotb
    testbench under Icarus give the same records (every call's cycles and
    response, multicast load, handshake and trace entry); a record with
    one response changed fails the scoreboard."""
    import dataclasses
    import json

    from sim import runner
    from tb import hub_scoreboard
    from tb.hub_stimulus import fault_scenarios, host_error_calls

    hub = small_hub_config("static")
    sessions = {"faults": [c for cs in fault_scenarios(hub).values() for c in cs],
                "host_errors": host_error_calls(hub)}
    results, test_dir = runner.run("icarus", list(sessions), config=hub, seed=1,
                                   run_name="pytest-hub-agree")
    assert len(results) == 2 and all(r.passed for r in results), [r.message for r in results]
    for name, calls in sessions.items():
        alone = fast.run_hub("icarus", hub, calls, tmp_path / name)
        under = json.loads((test_dir / f"hub_record_{name}.json").read_text())
        assert json.loads(json.dumps(dataclasses.asdict(alone))) == under, name
        hub_scoreboard.check(hub, calls, alone)
    assert any(load for load in alone.loads)  # host_errors: a RAW loads the register
    i = next(k for k, c in enumerate(alone.calls) if c.data)
    alone.calls[i].data ^= 1
    with pytest.raises(hub_scoreboard.HubScoreboardError, match=f"call {i} "):
        hub_scoreboard.check(hub, sessions["host_errors"], alone)


def test_player_array_size_follows_the_loads():
    """Loads that fit 2**PLAY_SMALL_BITS entries get the small build, any
    larger one the full build; a load larger than a forced size is refused
    before anything runs."""
    small, full = scoreboard.PLAY_SMALL_BITS, scoreboard.PLAY_ADDR_BITS
    assert fast.play_bits_for(1 << small) == small and fast.play_bits_for((1 << small) + 1) == full
    loads = [fast.Load([0] * 10, []), fast.Load([0] * 5, [0] * ((1 << small) + 1))]
    assert fast.play_bits(loads) == full and fast.play_bits(loads[:1]) == small
    assert fast.build_dir("verilator", small_config(), small) != fast.build_dir(
        "verilator", small_config(), full)
    with pytest.raises(ValueError, match="does not fit the player's 2\\*\\*15 entries"):
        fast.run("verilator", small_config(), loads, Path("unused"), bits=small)


@build_group("decode")
def test_play_decode_reports_the_modules_cycles(tmp_path):
    """``pimorch decode --rtl``'s replay (sim/fast.py ``play_decode``): a
    golden decode's every host call on the RTL module of its configuration
    (here the decode tests' ``decode_rtl_hub``, two sequences of one new
    token), scored against golden; per program kind its STEPs and their
    cycles, per lock step its cycles, within the run's cycles. A module
    that answers one call differently fails with that call named."""
    from golden.hub.decode import decode, random_sequences
    from tb import hub_scoreboard
    from tb.hub_stimulus import DECODE_MODEL, DECODE_SLOTS

    seqs = random_sequences(DECODE_MODEL, [3, 2], [1, 1], 0)
    dec = decode(DECODE_MODEL, seqs, DECODE_SLOTS, max_tokens=4, hub=decode_rtl_hub())
    t = fast.play_decode("verilator", dec, tmp_path / "run")
    att, fc = t["programs"]["attention"], t["programs"]["fc"]
    names = [name for name, *_ in dec.steps]
    assert att["steps"] == sum(n == "attention" for n in names) > 0
    assert fc["steps"] == len(names) - att["steps"]
    assert 0 < att["max_step_cycles"] * att["steps"] and att["cycles"] >= att["max_step_cycles"]
    assert len(t["lock_step_cycles"]) == len(dec.step_calls) == 4  # 3 + 1 tokens, lock step
    assert sum(t["lock_step_cycles"]) <= t["module_cycles"]
    assert att["cycles"] + fc["cycles"] < sum(t["lock_step_cycles"])  # the host's calls too
    dec.h.responses[-1] = (dec.h.responses[-1][0], dec.h.responses[-1][1] ^ 1)
    with pytest.raises(hub_scoreboard.HubScoreboardError, match=f"call {len(dec.h.calls) - 1} "):
        fast.play_decode("verilator", dec, tmp_path / "bad")
