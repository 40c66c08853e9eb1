"""The cocotb testbenches under BOTH Verilator and Icarus, one build per
(simulator, configuration) reused by every test, one run folder per test."""

import json
import re

import pytest
from vcdvcd import VCDVCD

from golden.config import POLICIES, small_config, small_hub_config
from golden.isa import DEVICE_ACTIONS, Opcode
from sim import runner, waves
from sim.tools import ToolError, require_simulator
from tests.conftest import build_group, full_run, seed_option

SIMS = ["verilator", "icarus"]
WAVE_TESTS = ("act_to_mac_waveform", "dcs_out_of_order_waveform", "wrong_golden_waveform")
pytestmark = pytest.mark.cocotb


def cases():
    """(simulator, policy, test). Parallel workers share the simulator
    models: ``runner.build`` builds each once, under a lock."""
    for sim in SIMS:
        for policy in POLICIES:
            for test in runner.list_tests(policy):
                if test not in WAVE_TESTS:
                    yield pytest.param(sim, policy, test, id=f"{sim}-{policy}-{test}",
                                       marks=build_group(policy))


def need(sim):
    try:
        require_simulator(sim)
    except ToolError as e:
        pytest.fail(str(e))


def run_passes(sim, test, config, request, name, **kw):
    """Run one cocotb test (``runner.run``) and fail with its message and
    log when it does not pass."""
    need(sim)
    results, test_dir = runner.run(sim, [test], config=config, seed=seed_option(request),
                                   run_name=f"pytest-{name}", **kw)
    failed = [r for r in results if not r.passed]
    assert results and not failed, f"{failed[0].message if failed else 'no result'} " \
                                    f"(log: {test_dir / 'sim.log'})"


#: cocotb models make test builds under Verilator: the DCS channel (its
#: waveform test needs a model with tracing anyway). The other channel
#: configurations run their cocotb tests under Icarus here and their long
#: streams under Verilator through the standalone player (tests/test_fast.py);
#: make test-full adds their cocotb runs under Verilator (a model build of
#: about a minute each).
VERILATOR_COCOTB = ("dcs",)
#: commands of random_stream_flow_control (the interactive driver) per simulator
RANDOM_COMMANDS = {"verilator": 3000, "icarus": 1500}


def skip_unless_full(sim, label, request):
    if sim == "verilator" and label not in VERILATOR_COCOTB and not full_run(request):
        pytest.skip(f"cocotb under Verilator for {label} runs in make test-full; Icarus runs "
                    f"these tests, the standalone player runs its long streams under Verilator")


@pytest.mark.parametrize("sim, policy, test", list(cases()))
def test_rtl_matches_golden(sim, policy, test, request):
    skip_unless_full(sim, policy, request)
    env = {"PIMORCH_RANDOM_COMMANDS": str(RANDOM_COMMANDS[sim])}
    run_passes(sim, test, small_config().replace(policy=policy), request, f"{policy}-{test}",
               extra_env=env)


#: The PIM module's cocotb tests run under Icarus in make test; under
#: Verilator (the cocotb model with DCS channels is the longest build of
#: the suite, about 5 minutes on two busy cores) in make sim and make
#: test-full. The same sessions run through the standalone player under
#: Verilator in make test (tests/test_fast.py; its model builds in about a
#: minute).


@pytest.mark.parametrize("sim, policy, test", [
    pytest.param(sim, policy, test, id=f"{sim}-hub-{policy}-{test}",
                 marks=build_group(f"hub-{policy}"))
    for sim in SIMS for policy in runner.HUB_POLICIES
    for test in runner.list_tests(module_name=runner.HUB_TB_MODULE)])
def test_hub_rtl_matches_golden(sim, policy, test, request):
    skip_unless_full(sim, f"hub-{policy}", request)
    run_passes(sim, test, small_hub_config(policy), request, f"hub-{policy}-{test}")


#: The PIM module at the decode configuration (two channels of 16 banks,
#: tb/test_decode.py): one decode step of a small transformer under Icarus
#: here, under Verilator in make sim and make test-full. The longer decode
#: runs through the standalone player under both (tests/test_fast.py).
@pytest.mark.parametrize("sim, test", [
    pytest.param(sim, test, id=f"{sim}-decode-{test}", marks=build_group("decode"))
    for sim in SIMS for test in runner.list_tests(module_name=runner.DECODE_TB_MODULE)])
def test_decode_rtl_matches_golden(sim, test, request):
    from tb.hub_stimulus import decode_rtl_hub

    skip_unless_full(sim, "decode", request)
    run_passes(sim, test, decode_rtl_hub(), request, f"decode-{test}",
               module=runner.DECODE_TB_MODULE)


#: The ALU channel's cocotb tests (the bad-command stream and one kernel):
#: under Icarus here, under Verilator in make test-full. The long random
#: program and every kernel run through the standalone player under both
#: simulators (tests/test_fast.py).
@pytest.mark.parametrize("sim, test", [
    pytest.param(sim, test, id=f"{sim}-alu-{test}", marks=build_group("alu"))
    for sim in SIMS for test in runner.list_tests(module_name=runner.ALU_TB_MODULE)])
def test_alu_rtl_matches_golden(sim, test, request):
    from sim.generate import ALU_TEST_CONFIG

    skip_unless_full(sim, "alu", request)
    run_passes(sim, test, ALU_TEST_CONFIG, request, f"alu-{test}")


@pytest.mark.parametrize("sim, test", [
    pytest.param(sim, test, id=f"{sim}-dex-{test}", marks=build_group("dex"))
    for sim in SIMS for test in runner.list_tests(module_name=runner.DEX_TB_MODULE)])
def test_dex_rtl_matches_golden(sim, test, request):
    """Dual-path banks (tb/test_dex.py) under both simulators."""
    from sim.generate import dex_test_config

    skip_unless_full(sim, "dex", request)
    run_passes(sim, test, dex_test_config(), request, f"dex-{test}")


def wave_run(sim, test):
    """Run ``test`` on the DCS model with waveforms; its run folder."""
    need(sim)
    results, test_dir = runner.run(sim, [test], config=small_config().replace(policy="dcs"),
                                   waves=True, run_name=f"pytest-waves-{test}")
    assert results and all(r.passed for r in results), results
    assert (test_dir / "waves.vcd").is_file(), f"no VCD in {test_dir}"
    return test_dir


def wave_trace(sim, test):
    """Run ``test`` on the DCS model with waveforms; return the issue trace
    read back from the VCD's decoded trace port (sim/waves.py) as (opcode,
    cmd_id, clock period index), checking each entry's cycle field against
    its clock edge, and the run folder."""
    test_dir = wave_run(sim, test)
    issued = []
    for e in waves.decode(test_dir / "waves.vcd"):
        assert e["edge"] - e["cycle"] == issued[0][3] if issued else True
        issued.append((Opcode[e["opcode"]], e["cmd_id"], e["edge"], e["edge"] - e["cycle"]))
    return [i[:3] for i in issued], test_dir


@build_group("dcs")
@pytest.mark.parametrize("wave_sim", SIMS)
def test_waveform_shows_act_to_mac_equal_trcd(wave_sim):
    """WAVES=1 flow: a VCD per test; in it, the first MAC on a freshly
    activated row issues exactly tRCD clock periods after the ACT."""
    issued, _ = wave_trace(wave_sim, "act_to_mac_waveform")
    act = next(t for op, _, t in issued if op == Opcode.ACT)
    first_mac = next(t for op, _, t in issued if op == Opcode.MAC)
    assert first_mac - act == small_config().timing.t_rcd


@build_group("dcs")
@pytest.mark.parametrize("wave_sim", SIMS)
def test_waveform_shows_dcs_issue_out_of_program_order(wave_sim):
    """In the VCD of the DCS model: WR-INP 1 (an I/O command) issues while
    MAC 0, earlier in program order, still waits for its row; then the MAC.
    The run folder (docs/waveforms.md): a view per block whose every signal
    is in the VCD, the translate filters and the golden trace; the command
    port's decoded fields show the MACs, and the decoded trace port holds
    the golden trace entry for entry, each at its cycle."""
    issued, test_dir = wave_trace(wave_sim, "dcs_out_of_order_waveform")
    when = {(op, i): t for op, i, t in issued}
    assert when[(Opcode.WR_INP, 1)] < when[(Opcode.MAC, 0)]
    assert when[(Opcode.MAC, 0)] - when[(Opcode.ACT, 0)] == small_config().timing.t_rcd
    order = [(op, i) for op, i, _ in issued if op not in DEVICE_ACTIONS]
    assert order != sorted(order, key=lambda e: e[1])  # not program order
    vcd = test_dir / "waves.vcd"
    names = set(VCDVCD(str(vcd), only_sigs=True).signals)
    views = sorted(p.name for p in test_dir.glob("*.gtkw"))
    assert views == ["channel.gtkw", "controller.gtkw", "dcs.gtkw"]
    for view in views:
        for line in (test_dir / view).read_text().splitlines():
            if line.startswith("#{"):
                used = set(re.findall(r"\(\d+\)(\S+)", line))
            elif line.startswith("+{"):
                used = {line.split("} ", 1)[1]}
            elif line[:1] in ("@", "-", "^", "[", "*") or not line:
                continue
            else:
                used = {line}
            assert used <= names, (view, used - names)
    assert (test_dir / "filter_opcode.txt").is_file()
    accepted = waves.decode(vcd, "cmd__payload", "cmd__valid", ready="cmd__ready")
    assert [c["opcode"] for c in accepted] == ["MAC", "WR_INP", "WR_INP", "MAC", "RD_OUT"]
    assert (accepted[3]["row"], accepted[3]["col"], accepted[3]["gbuf_idx"]) == (0, 1, 1)
    golden = (test_dir / "golden_trace.txt").read_text().splitlines()[1:]
    trace = waves.decode(vcd)
    assert [(e["cycle"], e["cmd_id"], e["opcode"]) for e in trace] == \
        [(int(c), int(i), op) for c, i, op, *_ in (line.split() for line in golden)]


@build_group("dcs")
@pytest.mark.parametrize("wave_sim", SIMS)
def test_a_mismatch_leaves_the_waveform_and_names_the_cycle(wave_sim):
    """A deliberately wrong golden expectation (tb/test_channel.py,
    wrong_golden_waveform): the scoreboard's message names the first
    differing cycle and the waveform, which is written with its views and
    both traces; at that cycle the waveform's trace port shows the RTL's
    entry."""
    test_dir = wave_run(wave_sim, "wrong_golden_waveform")
    message = (test_dir / "mismatch.txt").read_text()
    cycle = int(re.search(r"first differing cycle (\d+)", message)[1])
    assert f"waveform: {test_dir}/waves.vcd" in message
    assert all((test_dir / f"{v}.gtkw").is_file() for v in ("channel", "controller", "dcs"))
    rtl = (test_dir / "rtl_trace.txt").read_text()
    golden = (test_dir / "golden_trace.txt").read_text()
    assert rtl != golden
    at = [e for e in waves.decode(test_dir / "waves.vcd") if e["cycle"] == cycle]
    assert at and all(f"{cycle:>8} {e['cmd_id']:>6} {e['opcode']}" in rtl for e in at)


def test_the_printed_seed_replays_a_cocotb_run():
    """The seed a cocotb test prints replays it exactly: the same seed gives
    the same run (cycles, trace, read beats), another seed another run."""
    sim = "icarus"
    need(sim)
    env = {"PIMORCH_RANDOM_COMMANDS": "300"}

    def run(seed):
        results, test_dir = runner.run(sim, ["random_stream_flow_control"], seed=seed,
                                       run_name=f"pytest-seed-{seed}", extra_env=env)
        assert results and results[0].passed, results
        log = (test_dir / "sim.log").read_text()
        assert f"seed {seed} (replay: pimorch sim --test <name> --seed {seed}" in log
        return json.loads((test_dir / "metrics.json").read_text())

    first, again, other = run(7), run(7), run(8)
    assert first == again and first["seed"] == 7
    assert (other["cycles"], other["trace_entries"]) != (first["cycles"], first["trace_entries"])
