"""Small RTL helpers shared by every block."""

from amaranth import ClockDomain, ClockSignal, Mux, Signal


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


def gated_fall_domain(m, name: str, enable) -> ClockDomain:
    """A clock domain whose flip-flops load at the falling edge of the
    ``sync`` clock in the cycles where ``enable`` is high, and hold in every
    other cycle (its clock is ``clk | ~enable``).

    ``enable`` must come straight from a ``sync`` register: it then changes
    only just after a rising edge, while the clock is high, so the gated
    clock has no glitch and falls exactly at the enabled cycles' falling
    edges. What such a flip-flop samples was set at the rising edge half a
    cycle before, so every simulator sees the same values: the Amaranth
    simulator, which lets a clock made by logic tick one delta cycle late,
    as well as Verilator and Icarus.

    Simulation speed is the reason for it. Verilator evaluates the logic of
    a clock domain at each of its edges; logic fed only by this domain's
    flip-flops runs only in the enabled cycles (the MAC trees behind
    hw.datapath's operand registers). Event-driven simulators see its
    inputs change only then."""
    cd = ClockDomain(name, clk_edge="neg", reset_less=True, local=True)
    m.domains += cd
    m.d.comb += cd.clk.eq(ClockSignal("sync") | ~enable)
    return cd
