"""The cocotb testbenches under BOTH Verilator and Icarus, one build per
(simulator, configuration) reused by every test, one run folder per test."""

import os

import pytest
from vcdvcd import VCDVCD

from golden.config import small_config
from golden.isa import TRACE_FIELDS, Opcode, unpack
from sim import runner
from sim.tools import ToolError, require_simulator

SIMS = ["verilator", "icarus"]
TESTS = runner.list_tests()
pytestmark = pytest.mark.cocotb


def seed_option(request):
    seed = request.config.getoption("--seed", default=None) or os.environ.get("SEED")
    return int(seed) if seed else None


@pytest.fixture(scope="session", params=SIMS)
def sim(request):
    try:
        require_simulator(request.param)
    except ToolError as e:
        pytest.fail(str(e))
    runner.build(request.param, small_config())
    return request.param


@pytest.mark.parametrize("test", [t for t in TESTS if t != "act_to_mac_waveform"])
def test_rtl_matches_golden(sim, test, request):
    results, test_dir = runner.run(sim, [test], seed=seed_option(request),
                                   run_name=f"pytest-{test}")
    failed = [r for r in results if not r.passed]
    assert results and not failed, f"{failed[0].message if failed else 'no result'} " \
                                    f"(log: {test_dir / 'sim.log'})"


@pytest.mark.parametrize("wave_sim", SIMS)
def test_waveform_shows_act_to_mac_equal_trcd(wave_sim, tmp_path):
    """WAVES=1 flow: a VCD per test; in it, the first MAC on a freshly
    activated row issues exactly tRCD clock periods after the ACT."""
    results, test_dir = runner.run(wave_sim, ["act_to_mac_waveform"], waves=True,
                                   run_name="pytest-waves")
    assert results and all(r.passed for r in results), results
    vcd_path = test_dir / "waves.vcd"
    assert vcd_path.is_file(), f"no VCD in {test_dir}"
    vcd = VCDVCD(str(vcd_path), signals=None, store_tvs=True)

    def signal(suffix):
        names = [n for n in vcd.signals if n.split(".")[-1].split("[")[0] == suffix
                 and n.count(".") == 1 + n.startswith("TOP.") + n.startswith("top.")]
        assert names, f"{suffix} not in {vcd_path}"
        return vcd[names[0]]

    clk, valid, payload = signal("clk"), signal("trace__valid"), signal("trace__payload")
    rising = [t for t, v in clk.tv if v == "1"]
    period = rising[1] - rising[0]
    issued = []
    for t in rising:
        # sample just before the edge: the value the flops capture
        if valid[t - 1] == "1":
            entry = unpack(TRACE_FIELDS, int(payload[t - 1], 2))
            issued.append((Opcode(entry["opcode"]), t))
    act = next(t for op, t in issued if op == Opcode.ACT)
    first_mac = next(t for op, t in issued if op == Opcode.MAC)
    assert (first_mac - act) // period == small_config().timing.t_rcd
    assert (first_mac - act) % period == 0
