"""The channel scoreboard: the golden model on the observed timing against
what the RTL did. One scoreboard for both ways the channel is simulated:
the cocotb testbench (tb/bench.py) and the standalone player runs without
cocotb (sim/fast.py). Also what the stimulus player needs to know up front
(its done condition and cycle limit) and the parser of its record.

The JIT-Q ALU channel has the same stream ports, trace and status, so the
same player and scoreboard serve it: its model is ``golden.alu.AluChannel``
and its commands are ALU command words (``model_for`` picks the model)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from golden import energy
from golden.alu import AluChannel, AluConfig
from golden.channel import ChannelModel, Command, RunResult
from golden.config import ChannelConfig
from golden.isa import (
    ALU_COMMAND_FIELDS,
    COMMAND_FIELDS,
    DEVICE_ACTIONS,
    ISA,
    REFRESH_ID,
    STATUS_FIELDS,
    TRACE_FIELDS,
    ErrorCode,
    Opcode,
    layout_widths,
    unpack,
    unpack_alu,
)
from golden.streams import TraceEntry

Model = ChannelModel | AluChannel


@dataclass
class Observed:
    """What the testbench saw, in DUT cycles (the DUT's ``cycle`` output)."""

    cmd_arrivals: list[int] = field(default_factory=list)
    wdata_arrivals: list[int] = field(default_factory=list)
    rdata_pops: list[int] = field(default_factory=list)
    rdata: list[int] = field(default_factory=list)
    trace: list[tuple[int, int, int]] = field(default_factory=list)
    status: tuple[int, int, int] = (0, 0, 0)
    cycles: int = 0


class ScoreboardError(AssertionError):
    pass


_READS = (Opcode.RD, Opcode.RD_OUT)


def model_for(config: ChannelConfig | AluConfig, slice_rows: int = 0) -> Model:
    """The golden model that scores a run of ``config`` (a dual-path
    channel split at ``slice_rows``)."""
    if isinstance(config, AluConfig):
        return AluChannel(config)
    return ChannelModel(config.replace(slice_rows=slice_rows) if slice_rows else config)


def expected_counts(model: Model, commands: list[Command] | list[int]) -> tuple[int, int]:
    """(read beats, command trace entries) a stream produces, from the
    stream alone: every command that passes the decode check issues once
    (an ACT-AHEAD shows only as the PRE/ACT it causes; mode switches, PRE
    and ACT are not command entries) and every good read
    returns one beat. The player's done condition; no model run needed."""
    n_rdata = n_trace = 0
    if isinstance(model, AluChannel):
        for word in commands:
            c = unpack_alu(word)
            if model.check(c) == ErrorCode.NONE:
                n_rdata += c["opcode"] == Opcode.RD
                n_trace += 1
        return n_rdata, n_trace
    for cmd in commands:
        if model.check(cmd)[0] != ErrorCode.NONE:
            continue
        n_rdata += cmd.opcode in _READS
        n_trace += cmd.opcode != Opcode.ACT_AHEAD
    return n_rdata, n_trace


def quiet_cycles(config: ChannelConfig | AluConfig) -> int:
    """Cycles without a trace entry after the last expected one before the
    player stops: longer than any wait between two entries of the tail
    (an ACT-AHEAD's PRE and ACT), so a stray issue is still recorded."""
    t = config.timing
    return (t.t_ras + t.t_rp + t.t_rcd + t.t_faw + max(t.t_wr_inp, t.t_mac, t.t_rd_out) + 16
            + t.t_rc + t.t_rtp + t.t_wr + t.t_wtr + t.t_ccd_l + t.t_rrd_s + t.t_rrd_l
            + 2 * t.t_modch + 2 * t.t_rfc)


def cycle_limit(config: ChannelConfig | AluConfig, n_commands: int, idle: float,
                backpressure: float, hold_until: int = 0) -> int:
    """A run that takes longer has hung: every command a row miss, slowed
    by the flow control, twice over."""
    t = config.timing
    per_cmd = (t.t_ras + t.t_rp + t.t_rcd + max(t.t_ccd, t.t_wr_inp, t.t_mac, t.t_rd_out)
               + 2 * t.t_modch + t.t_rfc)
    slow = 1.0 / max(0.05, (1 - idle) * (1 - backpressure))
    return int(2 * slow * n_commands * per_cmd) + quiet_cycles(config) + 2000 + hold_until


def _trace_decoder():
    """(shift, mask) of cmd_id, opcode and cycle in a trace payload."""
    layout, shift = {}, 0
    for name, width in layout_widths(TRACE_FIELDS).items():
        layout[name] = (shift, (1 << width) - 1)
        shift += width
    return tuple(layout[n] for n in ("cmd_id", "opcode", "cycle"))


_TRACE = _trace_decoder()


def trace_tuple(word: int) -> tuple[int, int, int]:
    """(cmd_id, opcode, cycle) of a trace payload."""
    (s_id, m_id), (s_op, m_op), (s_cy, m_cy) = _TRACE
    return (word >> s_id) & m_id, (word >> s_op) & m_op, (word >> s_cy) & m_cy


#: The player holds up to 2**PLAY_ADDR_BITS commands and write beats per
#: load (tb/pim_tb.v.in, tb/hub_play.v.in: its host calls).
PLAY_ADDR_BITS = 18
PLAY_MAX = 1 << PLAY_ADDR_BITS
#: The standalone player is also built with arrays of 2**PLAY_SMALL_BITS
#: entries, for loads that fit (sim/fast.py: play_bits): its arrays take
#: 1/8 of the memory, and clearing them at start-up is most of a short
#: run's time.
PLAY_SMALL_BITS = 15


def record_capacity(bits: int = PLAY_ADDR_BITS) -> dict[str, int]:
    """Entries each array of the record of a player built with
    ``2**bits``-entry arrays holds (tb/pim_tb.v.in: the command, write-beat
    and read-beat arrays have one entry per command a load can hold, the
    trace four)."""
    return {"cmd": 1 << bits, "wdata": 1 << bits, "rdata": 1 << bits, "trace": 4 << bits}



def _hex_words(path: Path) -> list[int]:
    """The values of a $writememh file (Icarus adds // address comments)."""
    if not path.is_file():
        return []
    return [int(line, 16) for line in path.read_text().splitlines()
            if line and not line.startswith("//")]


def read_record(run_dir: Path | str, k: int, obs: Observed | None = None) -> Observed:
    """Load ``k``'s record from the player (tb/pim_tb.v.in: the counts in
    play_record_<k>.txt, one $writememh file per array) as an Observed
    (status and cycles are not in it). Raises ScoreboardError when a file
    is missing or short, or an array overflowed."""
    run_dir = Path(run_dir)
    obs = obs or Observed()
    head = run_dir / f"play_record_{k}.txt"
    try:
        tag, *counts, bits = head.read_text().split()
        capacity = record_capacity(int(bits))
        counts = dict(zip(capacity, map(int, counts), strict=True))
        if tag != "N":
            raise ValueError(tag)
    except (OSError, ValueError) as exc:
        raise ScoreboardError(f"{head}: no record counts ({exc})") from None
    values = {}
    for name, n in counts.items():
        if n > capacity[name]:
            raise ScoreboardError(f"{head}: {n} {name} entries, more than the player's "
                                  f"{capacity[name]}; split the stream into more loads")
        path = run_dir / f"play_record_{k}_{name}.hex"
        values[name] = _hex_words(path)
        if len(values[name]) != n:
            raise ScoreboardError(f"{path}: {len(values[name])} entries, the count says {n}")
    (s_id, m_id), (s_op, m_op), (s_cy, m_cy) = _TRACE
    obs.trace.extend(((w >> s_id) & m_id, (w >> s_op) & m_op, (w >> s_cy) & m_cy)
                     for w in values["trace"])
    obs.cmd_arrivals.extend(values["cmd"])
    obs.wdata_arrivals.extend(values["wdata"])
    mask = (1 << 256) - 1
    obs.rdata_pops.extend(w >> 256 for w in values["rdata"])
    obs.rdata.extend(w & mask for w in values["rdata"])
    return obs


def status_tuple(word: int) -> tuple[int, int, int]:
    st = unpack(STATUS_FIELDS, word)
    return st["err_code"], st["err_id"], st["err_count"]


def refresh_tail(trace: list[tuple[int, int, int]], want: list[tuple[int, int, int]]) -> list:
    """``trace`` without the refreshes the RTL issued after the golden
    model's last entry: the golden run ends with its last command, the RTL
    runs on and refreshes when one falls due (its MODE, PRE and REF carry
    ``REFRESH_ID``). Anything else after the end stays, to be reported."""
    end = want[-1][2] if want else -1
    refresh = (int(Opcode.MODE), int(Opcode.PRE), int(Opcode.REF))
    keep = len(trace)
    while keep and trace[keep - 1][2] > end and trace[keep - 1][0] == REFRESH_ID \
            and int(trace[keep - 1][1]) in refresh:
        keep -= 1
    return list(trace[:keep])


def _name(opcode: int) -> str:
    return Opcode(opcode).name if opcode in Opcode._value2member_map_ else str(opcode)


def trace_lines(trace: list[tuple[int, int, int]], commands) -> list[str]:
    """An issue trace as text, one entry a line: cycle, command ID, opcode
    and, for a command from the stream, the fields its opcode reads (an
    ACT, PRE, REF or MODE carries the ID of the command it serves, or of
    the refresh). IDs index ``commands``; past 2**16 commands (IDs wrap)
    the fields are left out."""
    words = [c if isinstance(c, int) else c.pack() for c in commands]
    if len(words) > 1 << 16:  # IDs wrap: an ID no longer names one command
        words = []
    alu = any(not isinstance(c, Command) for c in commands)
    fields = ALU_COMMAND_FIELDS if alu else COMMAND_FIELDS
    out = [f"{'cycle':>8} {'id':>6} {'opcode':<13} fields"]
    for cmd_id, opcode, cycle in trace:
        name = _name(opcode)
        text = ""
        if opcode not in DEVICE_ACTIONS and opcode in ISA and cmd_id < len(words):
            f = unpack(fields, words[cmd_id])
            text = " ".join(f"{k}={f[k]}" for k in ISA[Opcode(opcode)].command_fields
                            if k in f)
        out.append(f"{cycle:>8} {cmd_id:>6} {name:<13} {text}".rstrip())
    return out


def write_traces(folder, want, got, commands, suffix: str = "") -> None:
    """``golden_trace<suffix>.txt`` (the specification's issue trace of the
    run) and ``rtl_trace<suffix>.txt`` (the DUT's) in the run folder, to
    line up with the waveform or diff."""
    folder = Path(folder)
    for name, trace in (("golden_trace", want), ("rtl_trace", got)):
        (folder / f"{name}{suffix}.txt").write_text(
            "\n".join(trace_lines(trace, commands)) + "\n")


def rewrite_hint(seed: int | None, suffix: str = "") -> str:
    """Where the failing run's waveform is, or the one command that
    rewrites it with waves (from the runner's environment); ``suffix``
    names the trace files as ``write_traces`` did."""
    folder = os.environ.get("PIMORCH_TEST_DIR")
    traces = f"{folder}/golden_trace{suffix}.txt, rtl_trace{suffix}.txt"
    if os.environ.get("PIMORCH_WAVES") == "1" and folder:
        return f"\nwaveform: {folder}/waves.vcd (views: {folder}/*.gtkw; traces: {traces})"
    sim, test = os.environ.get("PIMORCH_SIM"), os.environ.get("PIMORCH_TESTS")
    if not (sim and test):
        return ""
    policy = os.environ.get("PIMORCH_POLICY")
    return (f"\nrewrite it with waves: pimorch sim --sim {sim} --waves"
            f"{f' --policy {policy}' if policy else ''} --test {test}"
            f"{f' --seed {seed}' if seed is not None else ''}"
            + (f" (traces: {traces})" if folder else ""))


def check(model: Model, commands: list[Command] | list[int], wdata: list[int], obs: Observed,
          seed: int | None = None) -> RunResult:
    """Run ``model`` on the observed arrival and pop cycles (from reset: the
    OBuf registers, or the ALU registers and counters, cleared; the
    memories kept) and compare the issue trace cycle for cycle, the read
    beats bit for bit and the sticky status. Raises ScoreboardError naming
    the first difference (for the trace, the first cycle where the two
    differ) and where the waveform is, or how to rewrite it with waves.
    The run folder (``PIMORCH_TEST_DIR``) gets both traces as text."""
    replay = f"; seed {seed}" if seed is not None else ""
    if isinstance(model, AluChannel):
        model.regs[:] = 0
        model.counters[:] = 0
    else:
        model.obuf[:] = 0
    ref = model.run(commands, wdata, obs.cmd_arrivals, obs.wdata_arrivals, obs.rdata_pops)
    want = [(t.cmd_id, int(t.opcode), t.cycle) for t in ref.trace]
    obs.trace = refresh_tail(obs.trace, want)
    folder = os.environ.get("PIMORCH_TEST_DIR")
    if folder:
        write_traces(folder, want, obs.trace, commands)
    for i, (g, w) in enumerate(zip(obs.trace, want, strict=False)):
        if g != w:
            ctx = "\n".join(f"  {j}: rtl {obs.trace[j]} golden {want[j]}"
                            for j in range(max(0, i - 3), min(i + 3, len(want), len(obs.trace))))
            raise ScoreboardError(
                f"issue trace differs at entry {i} (id, opcode, cycle): rtl {g} "
                f"({_name(g[1])}) golden {w} ({_name(w[1])}); first differing cycle "
                f"{min(g[2], w[2])}{replay}{rewrite_hint(seed)}\n{ctx}")
    if len(obs.trace) != len(want):
        extra = obs.trace[len(want):] or want[len(obs.trace):]
        raise ScoreboardError(f"trace length: rtl {len(obs.trace)}, golden {len(want)}; first "
                              f"differing cycle {extra[0][2]}{replay}{rewrite_hint(seed)}")
    for j, (g, w) in enumerate(zip(obs.rdata, ref.rdata, strict=False)):
        if g != w:
            raise ScoreboardError(f"read beat {j}: rtl {g:#066x} golden {w:#066x}{replay}")
    if len(obs.rdata) != len(ref.rdata):
        raise ScoreboardError(f"read beats: rtl {len(obs.rdata)}, golden {len(ref.rdata)}{replay}")
    want_status = (int(ref.status.err_code), ref.status.err_id, ref.status.err_count)
    if obs.status != want_status:
        raise ScoreboardError(f"status (code, id, count): rtl {obs.status} "
                              f"golden {want_status} ({ErrorCode(want_status[0]).name}){replay}")
    check_energy(model.cfg if isinstance(model, AluChannel) else model.config, commands, obs,
                 ref, replay)
    return ref


def check_energy(config, commands: list[Command], obs: Observed, ref: RunResult,
                 replay: str = "") -> dict | None:
    """The run's energy (golden.energy) from the RTL's observed trace against
    golden's, for a configuration (a channel's or the ALU channel's) of a
    profile with an energy table; the observed figure, or None without
    one."""
    rtl = [TraceEntry(i, Opcode(op), c) for i, op, c in obs.trace]
    alu = isinstance(config, AluConfig)
    known = (energy.alu_params_for if alu else energy.params_for)(config)
    if known is None:
        return None
    price = energy.alu_trace_energy if alu else energy.trace_energy
    got, want = (price(config, *known, commands, trace, ref.cycles) for trace in (rtl, ref.trace))
    if got != want:
        raise ScoreboardError(f"energy: rtl {got['total_pj']:.1f} pJ {got['counts']}, "
                              f"golden {want['total_pj']:.1f} pJ {want['counts']}{replay}")
    return got
