def pytest_addoption(parser):
    parser.addoption("--seed", action="store", default=None,
                     help="cocotb random seed for the RTL tests (replays a failing run)")
