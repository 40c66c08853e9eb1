"""The HUB's multicast register (twin of ``hw/hub/multicast.py``): one
emission per command, loaded when the register is free and held until its
last channel takes it; and the data effects of a list of emissions: each
channel model runs its commands, write beats come from the GPR and read
beats land in it in order (a drained beat is dropped)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.channel import ChannelModel
from golden.hub.ports import READS, WRITES
from golden.streams import Command


@dataclass(frozen=True)
class Emission:
    """One command in the multicast register."""

    cycle: int  # loaded into the multicast register in this cycle, offered from the next
    request: int | None  # None: a RAW host command
    ch_mask: int
    command: Command
    gpr: int  # GPR source (writes) or destination base (reads)
    discard: bool = False  # drain RD-OUT after a fault: the beats are dropped
    decoded: int = 0  # pushed into the decoded-command FIFO in this cycle


class Multicast:
    """When each emission loads: ``accept(k, load)`` gives the cycle
    emission ``k`` (loaded in ``load``) was taken by its last channel; the
    register is free again from then."""

    def __init__(self, accept: Callable[[int, int], int]):
        self.accept = accept
        self.free = -1  # the register is free from this cycle

    def load(self, k: int, ready: int) -> int:
        """Load emission ``k``, ready in the decoded-command FIFO from
        ``ready``: its load cycle."""
        load = max(ready, self.free)
        self.free = self.accept(k, load)
        if self.free <= load:
            raise ValueError(f"emission {k} accepted in cycle {self.free}, not after its "
                             f"load in {load}")
        return load


def deliver(emissions: list[Emission], channels: list[ChannelModel], gpr: np.ndarray,
            streams: list[list[tuple[Command, int | None]]]) -> None:
    """Data effects: each channel runs its commands (the channel models
    keep their memories); read beats land in the GPR in order."""
    for c, ch in enumerate(channels):
        cmds, beats, dests = [], [], []
        for e in emissions:
            if not e.ch_mask >> c & 1:
                continue
            beat = None
            if e.command.opcode in WRITES:
                beat = numerics.lanes_to_word(gpr[e.gpr])
                beats.append(beat)
            if e.command.opcode in READS:
                dests.append(None if e.discard else e.gpr + c)
            cmds.append(e.command)
            streams[c].append((e.command, beat))
        if not cmds:
            continue
        result = ch.run(cmds, beats)
        assert not result.errors, "the HUB range-checks every command it sends"
        for dest, word in zip(dests, result.rdata, strict=True):
            if dest is not None:
                gpr[dest] = numerics.words_to_lanes(word)
