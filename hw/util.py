"""Small RTL helpers shared by every block."""

from amaranth import Mux, Signal


def select(index, items):
    """``items[index]`` as a mux chain: no incomplete case for item counts
    that are not a power of two (an index past the end gives item 0)."""
    out = items[0]
    for i, item in enumerate(items[1:], start=1):
        out = Mux(index == i, item, out)
    return out


def counter(limit, name):
    """A down-counter that can hold ``limit - 1`` (never zero-width)."""
    return Signal(range(max(limit, 2)), name=name)
