def pytest_addoption(parser):
    parser.addoption("--seed", action="store", default=None,
                     help="cocotb random seed for the RTL tests (replays a failing run)")
    parser.addoption("--stream-commands", action="store", type=int, default=None,
                     help="commands per long_* player test and simulator (default: "
                          "20000 under Verilator, 3000 under Icarus); raise for long runs")
    parser.addoption("--full", action="store_true", default=False,
                     help="also the long regressions make test leaves to make sim (the PIM "
                          "module with DCS channels under Verilator); also PIMORCH_FULL=1")
