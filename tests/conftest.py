import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--seed", action="store", default=None,
                     help="cocotb random seed for the RTL tests (replays a failing run)")
    parser.addoption("--stream-commands", action="store", type=int, default=None,
                     help="commands per long_* player test (tests/test_fast.py; default: "
                          "20000 under Verilator, 3000 under Icarus); raise for long runs")
    parser.addoption("--full", action="store_true", default=False,
                     help="also the long runs make test leaves out (make test-full); "
                          "also PIMORCH_FULL=1")


def seed_option(request) -> int | None:
    """The seed of an RTL test: pytest --seed, else SEED, else a new one."""
    seed = request.config.getoption("--seed", default=None) or os.environ.get("SEED")
    return int(seed) if seed else None


def full_run(request) -> bool:
    """pytest --full or PIMORCH_FULL=1: the long runs make test leaves out."""
    return request.config.getoption("--full") or os.environ.get("PIMORCH_FULL") == "1"


def build_group(label: str):
    """Tests that share one configuration's generated Verilog and simulator
    models run on one pytest-xdist worker (make test: --dist loadgroup), so
    the other worker never waits on a build lock; the first test of a group
    builds, the rest reuse."""
    return pytest.mark.xdist_group(label)
