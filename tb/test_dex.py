"""cocotb tests of a channel with dual-path banks (docs/dual-path.md) against
the golden model: mixed xPU-read / PIM-MAC streams, sliced and unsliced,
with ACT-AHEADs and tFAW. Run on the ``dex`` configuration
(``sim.generate.dex_test_config``)."""

from __future__ import annotations

import copy

import cocotb

from golden.channel import ChannelModel, act_ahead, rd
from golden.config import ConfigError, slice_rows_for
from tb.bench import ChannelTB, ScoreboardError
from tb.stimulus import device_rule_cases, dex_stream, writes_of

GROUPS = 24


def _split(tb: ChannelTB) -> int:
    return slice_rows_for(tb.config.rows, 1, 1)


async def _checked(tb: ChannelTB, cmds, wdata, rows: int):
    tb.slice(rows)
    await tb.reset()
    obs = await tb.run(cmds, wdata)
    tb.check(cmds, wdata, obs)
    return obs


@cocotb.test()
async def dex_mixed_sliced(dut):
    """A random mixed stream (ACT-AHEADs, RD/WR on weight rows, MACs on KV
    rows, bad commands) on banks split 1:1, with idle and backpressure."""
    tb = ChannelTB(dut)
    await tb.start()
    cmds, wdata = dex_stream(tb.config, GROUPS, tb.rng, split=_split(tb), bad=0.05)
    await _checked(tb, cmds, wdata, _split(tb))


@cocotb.test()
async def dex_mixed_unsliced(dut):
    """The same kind of stream with slicing off: a conventional bank."""
    tb = ChannelTB(dut)
    await tb.start()
    cmds, wdata = dex_stream(tb.config, GROUPS, tb.rng, split=_split(tb), bad=0.05)
    await _checked(tb, cmds, wdata, 0)


@cocotb.test()
async def dex_sliced_faster(dut):
    """One stream, unsliced then sliced, streams always ready: sliced is
    faster, by exactly the cycles the golden model predicts on the same
    arrivals."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    split = _split(tb)
    cmds, wdata = dex_stream(tb.config, GROUPS, tb.rng, split=split)
    predicted, measured = {}, {}
    for rows in (0, split):
        obs = await _checked(tb, cmds, wdata, rows)
        measured[rows] = obs.trace[-1][2]
        # the golden model on the same arrivals: refresh falls due at fixed
        # cycles from reset, so a shifted start does not shift both runs alike
        model = copy.deepcopy(tb.model)
        model.config = tb.config.replace(slice_rows=rows)
        predicted[rows] = model.run(cmds, wdata, obs.cmd_arrivals, obs.wdata_arrivals,
                                    obs.rdata_pops).trace[-1].cycle
    tb.log.info("last issue: unsliced %d, sliced %d cycles (golden %d, %d)",
                measured[0], measured[split], predicted[0], predicted[split])
    saved = measured[0] - measured[split]
    if saved != predicted[0] - predicted[split]:
        raise ScoreboardError(f"slicing saves {saved} cycles (last issue {measured}); golden "
                              f"predicts {predicted[0] - predicted[split]} ({predicted})")
    if not measured[split] < measured[0]:
        raise ScoreboardError(f"sliced ({measured[split]}) is not faster than unsliced "
                              f"({measured[0]})")
    tb.write_metrics(commands=len(cmds), cycles=measured[split], unsliced_cycles=measured[0],
                     saved_cycles=saved, seed=tb.seed)


@cocotb.test()
async def dex_act_ahead_tfaw(dut):
    """ACT-AHEAD to every bank and partition, then reads: the fifth ACT
    waits for tFAW; a bad split is rejected before anything runs."""
    tb = ChannelTB(dut)
    await tb.start()
    for bad in (tb.config.rows, -1):
        try:
            tb.slice(bad)
        except ConfigError as e:
            tb.log.info("slice(%d) rejected: %s", bad, e)
        else:
            raise ScoreboardError(f"slice({bad}) was accepted")
    split = _split(tb)
    cmds = [act_ahead(b, 1) for b in range(tb.config.banks)]
    cmds += [act_ahead(b, split + 2) for b in range(tb.config.banks)]
    cmds += [rd(b, r, c) for c in range(2) for r in (1, split + 2)
             for b in range(tb.config.banks)]
    await _checked(tb, cmds, [], split)
    loose = ChannelModel(tb.config.replace(t_faw=0)).run(cmds)
    tight = ChannelModel(tb.config).run(cmds)
    if loose.cycles >= tight.cycles:
        raise ScoreboardError("tFAW did not bind in this stream")


@cocotb.test()
async def dex_device_rules(dut):
    """Every device rule of the table, one directed stream each
    (tb.stimulus.device_rule_cases), streams always ready: the RTL issues
    every action in golden's cycle, and on the run's own arrivals the rule
    places the case's event (one cycle more of it: one cycle later)."""
    tb = ChannelTB(dut, idle=0.0, backpressure=0.0)
    await tb.start()
    for key, (cmds, op, k, split) in device_rule_cases().items():
        wdata = writes_of(cmds)
        obs = await _checked(tb, cmds, wdata, split)
        placed = []
        for extra in (0, 1):
            model = copy.deepcopy(tb.model)
            model.config = tb.config.replace(slice_rows=split,
                                             **{key: getattr(tb.config.timing, key) + extra})
            trace = model.run(cmds, wdata, obs.cmd_arrivals, obs.wdata_arrivals,
                              obs.rdata_pops).trace
            placed.append([e.cycle for e in trace if e.opcode == op][k])
        rtl = [t for _, o, t in obs.trace if o == op][k]
        if not rtl == placed[0] == placed[1] - 1:
            raise ScoreboardError(f"{key}: {op.name} #{k} issued at {rtl}; golden {placed[0]}, "
                                  f"{placed[1]} with {key} + 1")
        tb.log.info("%s: %s #%d at cycle %d", key, op.name, k, rtl)
