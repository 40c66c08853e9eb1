"""The seed of a cocotb run, as the run's replay line prints it.

cocotb 2 reseeds each test with its regression seed plus a hash of the
test's name and shows that sum as ``cocotb.RANDOM_SEED``; passing the sum
back as the seed does not replay the test. ``sim/runner.py`` therefore
always chooses the run's seed itself (a random one unless given) and
passes it as ``PIMORCH_SEED`` too: the testbenches draw from that seed, and
``pimorch sim --seed N`` with the printed N replays the run exactly."""

import os


def run_seed() -> int:
    """The seed the run was started with (``PIMORCH_SEED``; outside the
    project's runner, cocotb's seed)."""
    text = os.environ.get("PIMORCH_SEED")
    if text:
        return int(text)
    import cocotb

    return int(cocotb.RANDOM_SEED)
