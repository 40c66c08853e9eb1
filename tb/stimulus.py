"""Stimulus for the channel testbenches: constrained-random and GEMV streams."""

from __future__ import annotations

import numpy as np

from golden import numerics as nm
from golden.channel import (
    Command,
    act_ahead,
    check_gemv_shape,
    gemv_commands,
    mac,
    rd,
    rd_out,
    wr,
    wr_inp,
)
from golden.config import ChannelConfig
from golden.isa import CHANNEL_OPCODES, LANES, XPU_OPCODES, Opcode

_SPECIALS = np.array([0x0000, 0x8000, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F, 0x0080], np.uint16)


def random_words(rng: np.random.Generator, n: int, special: float = 0.02) -> list[int]:
    """n random 256-bit words of 16 BF16 lanes: mostly normal values over a
    few binades; sometimes zeros, subnormals, inf, NaN, huge."""
    scale = 2.0 ** rng.integers(-4, 5, (n, 1))
    lanes = nm.float_to_bf16(rng.standard_normal((n, LANES)) * scale)
    pick = rng.random((n, LANES)) < special
    lanes[pick] = rng.choice(_SPECIALS, int(pick.sum()))
    raw = lanes.astype("<u2").tobytes()
    step = 2 * LANES
    return [int.from_bytes(raw[k:k + step], "little") for k in range(0, len(raw), step)]


def random_word(rng: np.random.Generator, special: float = 0.02) -> int:
    return random_words(rng, 1, special)[0]


#: (gbuf entries, obuf entries) a stream draws from, its share of RD/WR, and
#: the probability that a command stays on the previous command's row
STREAM_SHAPES = {
    "mixed": (None, None, 0.3, 0.0),  # every entry; RD/WR (fences under DCS) common
    "dense": (2, 2, 0.04, 0.9),  # few entries, heavy reuse: dependency chains
    "sparse": (None, None, 0.04, 0.9),  # every entry: independent commands overlap
}


_KINDS = (Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR)


def random_stream(config: ChannelConfig, n: int, rng: np.random.Generator,
                  bad: float = 0.01, rows_used: int = 3, shape: str = "mixed",
                  ) -> tuple[list[Command], list[int]]:
    """n commands: a mix of every kind with row locality (a few rows so both
    row hits and misses occur) and a small share of malformed commands.
    ``shape`` (STREAM_SHAPES) sets how many buffer entries are used and how
    common the normal accesses are. The draws are made as arrays (a
    10-million-command regression generates its stimulus in seconds)."""
    g_used, o_used, normal, stay = STREAM_SHAPES[shape]
    g_used = min(g_used or config.gbuf_entries, config.gbuf_entries)
    o_used = min(o_used or config.obuf_entries, config.obuf_entries)
    weights = np.array([0.15, 0.45, 0.1, 0.0, 0.0]) * (1 - normal) / 0.7
    weights[3:] = normal / 3, normal * 2 / 3
    rows = rng.choice(config.rows, min(rows_used, config.rows), replace=False)
    is_bad = (rng.random(n) < bad).tolist()
    ops = rng.choice(len(_KINDS), n, p=weights).tolist()
    keep_row = (rng.random(n) < stay).tolist() if stay else [False] * n
    new_rows = rng.choice(rows, n).tolist()
    cols = rng.integers(config.cols, size=n).tolist()
    banks = rng.integers(config.banks, size=n).tolist()
    gs = rng.integers(g_used, size=n).tolist()
    outs = rng.integers(o_used, size=n).tolist()
    cmds: list[Command] = []
    row = int(rows[0])
    for k in range(n):
        if is_bad[k]:
            cmds.append(_malformed(config, rng))
            continue
        op = _KINDS[ops[k]]
        if not (keep_row[k] and cmds):
            row = new_rows[k]
        if op == Opcode.WR_INP:
            cmds.append(wr_inp(gs[k]))
        elif op == Opcode.MAC:
            cmds.append(mac(row, cols[k], gs[k], outs[k]))
        elif op == Opcode.RD_OUT:
            cmds.append(rd_out(outs[k]))
        elif op == Opcode.RD:
            cmds.append(rd(banks[k], row, cols[k]))
        else:
            cmds.append(wr(banks[k], row, cols[k]))
    n_writes = sum(c.opcode in (Opcode.WR, Opcode.WR_INP) for c in cmds)
    return cmds, random_words(rng, n_writes)



def _malformed(config: ChannelConfig, rng: np.random.Generator) -> Command:
    choice = int(rng.integers(6))
    if choice == 0:
        valid = (*CHANNEL_OPCODES, *(XPU_OPCODES if config.dual_path else ()))
        unused = [o for o in range(32) if o not in valid]
        return Command(int(rng.choice(unused)))
    if choice == 1 and config.banks < 16:
        return wr(int(rng.integers(config.banks, 16)), 0, 0)
    if choice == 2:
        return rd(0, int(rng.integers(config.rows, 1 << 16)), 0)
    if choice == 3 and config.cols < 256:
        return mac(0, int(rng.integers(config.cols, 256)), 0, 0)
    if choice == 4 and config.gbuf_entries < 256:
        return wr_inp(int(rng.integers(config.gbuf_entries, 256)))
    if config.obuf_entries < 16:
        return rd_out(int(rng.integers(config.obuf_entries, 16)))
    return Command(0)


def dex_stream(config: ChannelConfig, groups: int, rng: np.random.Generator, split: int,
               macs: int = 4, reads: int = 4, ahead: float = 0.7, bad: float = 0.0,
               rows_used: int = 3) -> tuple[list[Command], list[int]]:
    """A mixed xPU-read / PIM-MAC stream for dual-path banks: ``groups``
    groups of ``macs`` MACs on a KV row (rows >= ``split``, the PIM
    partition) into one OBuf entry, each MAC followed by an xPU access to a
    weight row (rows < ``split``: mostly RD, some WR) of a rotating bank,
    with an ACT-AHEAD for an upcoming read's bank and row (probability
    ``ahead``), and an RD-OUT per group. The same stream runs sliced at
    ``split`` or unsliced; only the slicing changes its timing."""
    if not 0 < split < config.rows:
        raise ValueError(f"split must be in [1, {config.rows - 1}], not {split}")
    kv_rows = rng.choice(np.arange(split, config.rows), min(rows_used, config.rows - split),
                         replace=False)
    w_rows = rng.choice(split, min(rows_used, split), replace=False)
    cmds: list[Command] = []
    wdata: list[int] = []
    words = min(macs, config.gbuf_entries)
    for g in range(words):
        cmds.append(wr_inp(g))
        wdata.append(random_word(rng))
    bank = 0
    for grp in range(groups):
        kv = int(rng.choice(kv_rows))
        out = grp % config.obuf_entries
        for k in range(macs):
            cmds.append(mac(kv, int(rng.integers(config.cols)), k % words, out))
            for _ in range(reads // macs or 1):
                row = int(rng.choice(w_rows))
                if rng.random() < ahead:
                    nxt = (bank + 1) % config.banks
                    cmds.append(act_ahead(nxt, int(rng.choice(w_rows))))
                if rng.random() < 0.15:
                    cmds.append(wr(bank, row, int(rng.integers(config.cols))))
                    wdata.append(random_word(rng))
                else:
                    cmds.append(rd(bank, row, int(rng.integers(config.cols))))
                bank = (bank + 1) % config.banks
            if rng.random() < bad:
                cmds.append(_malformed(config, rng))
                if cmds[-1].opcode in (Opcode.WR, Opcode.WR_INP):
                    wdata.append(random_word(rng))
        cmds.append(rd_out(out))
    return cmds, wdata


def gemv_problem(n_out: int, n_in: int, seed: int, config: ChannelConfig):
    """A random BF16 GEMV: (matrix bits, input bits, commands, write beats)."""
    check_gemv_shape(n_out, n_in, config)
    if not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ValueError(f"GEMV seed must be an integer in [0, 2**64), not {seed!r}")
    rng = np.random.default_rng(seed)
    w = nm.float_to_bf16(rng.standard_normal((n_out, n_in)) / np.sqrt(n_in))
    x = nm.float_to_bf16(rng.standard_normal(n_in))
    cmds, beats = gemv_commands(w, x, config)
    return w, x, cmds, beats


def device_rule_cases() -> dict[str, tuple[list[Command], Opcode, int, int]]:
    """Per device rule of the dual-path test channel (sim.generate.dex_test_config,
    streams always ready): a short stream, the trace event (opcode,
    occurrence from 0) that the rule places, and the partition split
    (slice_rows; 0: unsliced). One cycle more of the rule's latency issues
    that event one cycle later (tests/test_golden_timing.py checks it on
    golden; tb/test_dex.py runs every case on the RTL). tFAW needs a fifth
    row-buffer unit: the banks split 1:1 (eight units)."""
    long_row = [rd(0, 0, c % 32) for c in range(300)]  # past the refresh at cycle 1,000
    split = 32  # slice_rows_for(64, 1, 1): rows 32.. are each bank's second partition
    return {
        "t_rcd": ([rd(0, 0, 0)], Opcode.RD, 0, 0),
        "t_ras": ([act_ahead(0, 1), rd(0, 2, 0)], Opcode.PRE, 0, 0),
        "t_rp": ([rd(0, 0, 0), rd(0, 1, 0)], Opcode.ACT, 1, 0),
        "t_rc": ([act_ahead(0, 1), rd(0, 2, 0)], Opcode.ACT, 1, 0),
        "t_rtp": ([rd(0, 0, 0), rd(0, 1, 0)], Opcode.PRE, 0, 0),
        "t_wr": ([wr(0, 0, 0), rd(0, 1, 0)], Opcode.PRE, 0, 0),
        "t_ccd": ([rd(0, 0, 0), rd(2, 0, 0), rd(0, 0, 1), rd(2, 0, 1)], Opcode.RD, 2, 0),
        "t_ccd_l": ([rd(0, 0, 0), rd(1, 0, 0), rd(0, 0, 1), rd(1, 0, 1)], Opcode.RD, 2, 0),
        "t_wtr": ([rd(0, 0, 0), rd(2, 0, 0), wr(0, 0, 1), rd(2, 0, 1)], Opcode.RD, 2, 0),
        "t_rrd_s": ([act_ahead(0, 0), act_ahead(2, 0)], Opcode.ACT, 1, 0),
        "t_rrd_l": ([act_ahead(0, 0), act_ahead(1, 0)], Opcode.ACT, 1, 0),
        "t_faw": ([act_ahead(b, 0) for b in range(4)] + [act_ahead(0, split + 1)],
                  Opcode.ACT, 4, split),
        "t_ccd_reg": ([wr_inp(0), wr_inp(1)], Opcode.WR_INP, 1, 0),
        "t_wtr_reg": ([wr_inp(0), rd_out(1)], Opcode.RD_OUT, 0, 0),
        "t_rtw_reg": ([rd_out(0), wr_inp(1)], Opcode.WR_INP, 0, 0),
        "t_modch": ([wr_inp(0)], Opcode.WR_INP, 0, 0),
        "t_rfc": (long_row + [rd(0, 0, 0)], Opcode.ACT, 1, 0),
    }


def writes_of(cmds: list[Command]) -> list[int]:
    """Zero write beats for the WR and WR-INP commands of ``cmds``."""
    return [0] * sum(c.opcode in (Opcode.WR, Opcode.WR_INP) for c in cmds)
