"""Energy of a channel run from its cycle-exact issue trace (docs/energy.md).

A device profile's ``[energy]`` table gives per-command energies and
standby powers, each with its source in ``[sources]`` (``energy.KEY``).
:func:`trace_energy` charges every trace entry, in issue order:

* ``ACT``: ``act_pj`` for every bank (or dual-path partition) it opens,
  the activation with its precharge (the source charges the pair at the
  ACT); ``PRE``: ``pre_pj`` for every bank it closes;
* ``MAC``: ``mac_pj`` for every bank (an all-bank MAC: ``banks`` times);
* ``RD`` / ``WR``: the array access (``rd_pj`` / ``wr_pj``) and a beat on
  the data bus; ``WR-INP``: the GBuf write (``gbuf_wr_pj``) and a beat;
  ``RD-OUT``: the OBuf read (``obuf_rd_pj``) and a beat; a beat is
  ``LANES x 16`` bits at ``io_pj_per_bit``;
* ``REF``: ``ref_pj`` (all banks); ``MODE``: nothing;
* **background**: the cycles with some row open at ``act_standby_mw``, the
  rest at ``pre_standby_mw``, up to the run's last cycle.

Which banks an ACT opens or a PRE closes is not in the trace (its entries
are command ID, opcode and cycle, as the RTL reports them): the banks are
replayed from the commands with the controller's own rules
(``golden.banks.BankTimer.action_for``). So the energy is a function of
the trace and the commands: the RTL's observed trace gives the same
figure as golden's whenever the two traces are equal.

Breakdown (``CATEGORIES``): ``mac``; ``io`` (data-bus beats, GBuf writes,
OBuf reads; in a HUB run, :func:`hub_energy`, the GPR's reads and
writes); ``act_pre``; ``refresh``; ``background``; ``other`` (the
array side of normal reads and writes; in a HUB run, the EPU's
operations).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from golden.banks import BankTimer
from golden.config import PROFILES, ChannelConfig, ConfigError, load_profile_data
from golden.hub.epu import OPS as EPU_OPS
from golden.isa import LANES, REFRESH_ID, Opcode
from golden.streams import CMD_ID_MOD, Command, TraceEntry

#: Bits one data-bus beat moves (one 32 B word).
BEAT_BITS = LANES * 16
CATEGORIES = ("mac", "io", "act_pre", "refresh", "background", "other")


@dataclass(frozen=True)
class EnergyParams:
    """Per-command energies (pJ) and standby powers (mW) of one channel."""

    act_pj: float  # one bank's (or partition's) row activation, with its precharge
    pre_pj: float  # one bank's precharge beyond what act_pj includes
    rd_pj: float  # the array side of a normal read of one 32 B word
    wr_pj: float  # the array side of a normal write
    mac_pj: float  # one bank's MAC (16 lanes)
    io_pj_per_bit: float  # the data bus
    gbuf_wr_pj: float  # a WR-INP into the GBuf
    obuf_rd_pj: float  # a RD-OUT of every bank's OBuf entry
    gpr_rd_pj: float  # the HUB's GPR: a 32 B word read (a write beat it multicasts, a host read)
    gpr_wr_pj: float  # a 32 B word written (a read beat from a channel, a host write)
    epu_vec_pj: float  # the HUB's EPU (golden.hub.epu.OPS): 16 FP32 adds, compares or multiplies
    epu_exp_pj: float  # sixteen exps
    epu_tree_pj: float  # one sixteen-to-one tree (the max's or the sum's)
    epu_div_pj: float  # one step of the reciprocal's division
    ref_pj: float  # an all-bank refresh
    act_standby_mw: float  # some row open
    pre_standby_mw: float  # every bank precharged

    @property
    def beat_pj(self) -> float:
        return self.io_pj_per_bit * BEAT_BITS


KEYS = tuple(f.name for f in dataclasses.fields(EnergyParams))


def _table(profile: str, name: str, keys: tuple[str, ...], overrides: dict) -> dict:
    """Table ``name`` of ``profile`` (following ``energy_from`` for
    ``energy``) with ``overrides``, every key present and a number."""
    data = load_profile_data(profile)
    table = data.get(name)
    if table is None and name == "energy" and isinstance(data.get("energy_from"), str):
        table = load_profile_data(data["energy_from"]).get(name)
    if table is None:
        raise ConfigError(f"profile {profile!r} has no [{name}] table (energy needs one; "
                          f"docs/energy.md lists the keys)")
    if not isinstance(table, dict):
        raise ConfigError(f"profile {profile!r}: [{name}] must be a table")
    merged = {**table, **overrides}
    for key in merged:
        if key not in keys:
            raise ConfigError(f"profile {profile!r}: unknown key {name}.{key} "
                              f"(valid: {', '.join(keys)})")
    missing = [k for k in keys if k not in merged]
    if missing:
        raise ConfigError(f"profile {profile!r}: missing key {name}.{missing[0]}")
    for key, v in merged.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e9:
            raise ConfigError(f"{name}.{key} must be a number in [0, 1e9), not {v!r}")
    return {k: float(v) for k, v in merged.items()}


def energy_params(profile: str, **overrides) -> EnergyParams:
    """The ``[energy]`` table of ``profile`` (a name or a TOML file), with
    ``overrides`` (a study's sweep) replacing keys."""
    return EnergyParams(**_table(profile, "energy", KEYS, overrides))


def _command_of(trace: list[TraceEntry], commands: list[Command], drops: set[int]):
    """For each trace entry, the index of the command it serves (None for a
    refresh's own entries). Command IDs wrap at ``CMD_ID_MOD``; the
    commands outstanding at any time are far fewer, so an ID names the
    first unfinished command at or after the oldest with that ID."""
    done = [False] * len(commands)
    low = 0
    out: list[int | None] = []
    for n, e in enumerate(trace):
        while low < len(commands) and (done[low] or low in drops):
            low += 1
        refresh = e.cmd_id == REFRESH_ID and (
            e.opcode == Opcode.REF or (e.opcode in (Opcode.PRE, Opcode.MODE) and any(
                f.opcode == Opcode.REF for f in trace[n + 1:n + 3]
                if f.cmd_id == REFRESH_ID)))
        if refresh:
            out.append(None)
            continue
        i = low + (e.cmd_id - low) % CMD_ID_MOD
        if i >= len(commands):
            raise ValueError(f"trace entry {e} names no command")
        out.append(i)
        if e.opcode == commands[i].opcode:
            done[i] = True
    return out


#: What a run's energy is priced from (:func:`trace_counts`): bank
#: activations and precharges, bank MACs, the column commands on the data
#: bus, refreshes, and the cycles with some row open.
COUNTS = ("acts", "pres", "macs", "rds", "wrs", "wr_inps", "rd_outs", "refreshes", "active")
#: The counts that are beats on the data bus.
BEATS = ("rds", "wrs", "wr_inps", "rd_outs")


def _replay(trace: list[TraceEntry], owner: list[int | None], banks: BankTimer, opens,
            column, n: dict, cycles: int) -> dict:
    """Count ``trace`` into ``n``: the ACTs and PREs replayed on ``banks``
    (``opens(i)``: the banks command ``i`` touches, its row, and whether
    they open as a set), a refresh's own entries, the cycles with some row
    open, and each column entry through ``column(opcode, i, n)``."""
    last = 0  # row-open time counted up to here
    for entry, i in zip(trace, owner, strict=True):
        c = entry.cycle
        if any(r is not None for r in banks.open_row):
            n["active"] += c - last
        last = c
        op = entry.opcode
        if i is None:  # a refresh's MODE, PRE (every open unit) or REF
            if op == Opcode.PRE:
                units = [u for u, r in enumerate(banks.open_row) if r is not None]
                n["pres"] += len(units)
                for u in units:
                    banks.open_row[u] = None
            elif op == Opcode.REF:
                n["refreshes"] += 1
            continue
        if op in (Opcode.PRE, Opcode.ACT):
            touched, row, as_set = opens(i)
            action = banks.action_for(touched, row, as_set=as_set)
            if action is None or action[0] != op:
                raise ValueError(f"trace entry {entry}: command {i} needs "
                                 f"{action[0].name if action else 'no'} {op.name}")
            n["acts" if op == Opcode.ACT else "pres"] += len(action[1])
            for u in action[1]:
                banks.open_row[u] = row if op == Opcode.ACT else None
        else:
            touched, row, as_set = opens(i)
            if op != Opcode.MODE and banks.action_for(touched, row, as_set=as_set) is not None:
                raise ValueError(f"trace entry {entry}: command {i} issues before its row "
                                 f"is open")
            column(op, i, n)
    if cycles < last:
        raise ValueError(f"the run lasted {cycles} cycles, before its last entry ({last})")
    if any(r is not None for r in banks.open_row):
        n["active"] += cycles - last
    return n


def trace_counts(cfg: ChannelConfig, commands: list[Command], trace: list[TraceEntry],
                 cycles: int) -> dict[str, int]:
    """The :data:`COUNTS` of a run of ``commands`` on ``cfg`` whose issue
    trace is ``trace`` and which lasted ``cycles``: the trace replayed,
    ACT and PRE banks from the controller's own rule."""
    from golden.channel import ChannelModel

    checker = ChannelModel(cfg)
    drops = {i for i, c in enumerate(commands) if checker.check(c)[0].value}
    banks = BankTimer(cfg.banks, cfg.timing, cfg.slice_rows, bank_groups=cfg.bank_groups)
    names = {Opcode.RD: "rds", Opcode.WR: "wrs", Opcode.WR_INP: "wr_inps",
             Opcode.RD_OUT: "rd_outs"}

    def opens(i):
        cmd = commands[i]
        return banks.touched(Opcode(cmd.opcode), cmd), cmd.row, cmd.opcode == Opcode.MAC

    def column(op, i, n):
        if op == Opcode.MAC:
            n["macs"] += cfg.banks
        elif op in names:
            n[names[op]] += 1

    return _replay(trace, _command_of(trace, commands, drops), banks, opens, column,
                   dict.fromkeys(COUNTS, 0), cycles)


def priced(params: EnergyParams, t_ck_ns: float, counts, cycles):
    """Energy (pJ) of a run with ``counts`` (:data:`COUNTS`, numbers or
    arrays) over ``cycles``: ``total_pj`` and ``breakdown`` (pJ per
    :data:`CATEGORIES`). The one pricing of a trace's commands, used by
    :func:`trace_energy` and by the system model's fast mode."""
    beats = sum(counts[k] for k in BEATS)
    e = {
        "mac": counts["macs"] * params.mac_pj,
        "io": beats * params.beat_pj + counts["wr_inps"] * params.gbuf_wr_pj
        + counts["rd_outs"] * params.obuf_rd_pj,
        **_banks_priced(params, t_ck_ns, counts, cycles),
    }
    return {"total_pj": sum(e.values()), "breakdown": e}


def _banks_priced(params: EnergyParams, t_ck_ns: float, counts, cycles) -> dict:
    """The parts every channel kind prices alike (pJ): ``act_pre``,
    ``refresh``, ``background`` and ``other`` (the array side of host
    reads and writes)."""
    return {
        "act_pre": counts["acts"] * params.act_pj + counts["pres"] * params.pre_pj,
        "refresh": counts["refreshes"] * params.ref_pj,
        # mW x ns = pJ
        "background": (counts["active"] * params.act_standby_mw
                       + (cycles - counts["active"]) * params.pre_standby_mw) * t_ck_ns,
        "other": counts["rds"] * params.rd_pj + counts["wrs"] * params.wr_pj,
    }


def row_reads(words: float, cols: int, period: float) -> dict[str, float]:
    """The :data:`COUNTS` of a stream of ``words`` normal 32 B reads of
    whole rows in turn (an xPU's or NPU's weight stream): an ACT and a PRE
    per ``cols`` words, each read holding a row open for ``period`` cycles
    (the reads alone, ``KernelTimer.read_period``)."""
    n = dict.fromkeys(COUNTS, 0.0)
    n.update(rds=words, acts=words / cols, pres=words / cols, active=words * period)
    return n


def channels_energy(params: EnergyParams, t_ck_ns: float, counts: dict, channels: int,
                    cycles: float, t_refi: int) -> dict[str, float]:
    """Energy (pJ per :data:`CATEGORIES`) of ``channels`` channels over
    ``cycles`` cycles each (a system's step), whose commands counted
    ``counts`` (:data:`COUNTS`, summed over the channels): background over
    the whole span (rows open for the counted ``active`` cycles, at most
    the span; precharged otherwise) and an all-bank refresh every
    ``t_refi`` cycles on each channel (0: none), whatever the counts say."""
    span = channels * cycles
    c = {**counts, "active": min(counts["active"], span),
         "refreshes": span / t_refi if t_refi else 0.0}
    return priced(params, t_ck_ns, c, span)["breakdown"]


def scaled(params, scale: dict | None = None):
    """``params`` (:class:`EnergyParams` or :class:`AluEnergyParams`) with
    each key of ``scale`` multiplied by its factor (a study's sweep of a
    table value: the scenario's ``energy`` table, 1 for the value as
    cited)."""
    scale = scale or {}
    keys = tuple(f.name for f in dataclasses.fields(params))
    for key, v in scale.items():
        if key not in keys:
            raise ConfigError(f"unknown key energy.{key} (valid: {', '.join(keys)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e3:
            raise ConfigError(f"energy.{key} is a factor in [0, 1000], not {v!r}")
    return dataclasses.replace(params, **{k: getattr(params, k) * float(v)
                                          for k, v in scale.items()})


def scaled_params(profile: str, scale: dict | None = None) -> EnergyParams:
    """The ``[energy]`` table of ``profile`` :func:`scaled` by ``scale``."""
    return scaled(energy_params(profile), scale)


def trace_energy(cfg: ChannelConfig, params: EnergyParams, t_ck_ns: float,
                 commands: list[Command], trace: list[TraceEntry], cycles: int) -> dict:
    """Energy (pJ) of a run of ``commands`` on ``cfg`` whose issue trace is
    ``trace`` and which lasted ``cycles``: ``total_pj``, ``breakdown``
    (pJ per ``CATEGORIES``), ``counts`` (:data:`COUNTS`; ``beats``, the
    data-bus beats) and ``active_cycles`` (some row open)."""
    counts = trace_counts(cfg, commands, trace, cycles)
    out = priced(params, t_ck_ns, counts, cycles)
    counts["beats"] = sum(counts[k] for k in BEATS)
    return {**out, "counts": counts, "active_cycles": counts["active"], "cycles": cycles}


def epu_pj(params: EnergyParams, ops: dict):
    """Energy (pJ) of the EPU operations ``ops`` (``golden.hub.epu.OPS``
    counts, numbers or arrays)."""
    return (ops["vec"] * params.epu_vec_pj + ops["exp"] * params.epu_exp_pj
            + ops["tree"] * params.epu_tree_pj + ops["div"] * params.epu_div_pj)


def hub_energy(params: EnergyParams, channels: list[dict], gpr_reads: int,
               gpr_writes: int, epu_ops: dict | None = None) -> dict:
    """Energy (pJ) of a HUB run: its channels' energies (``channels``, each
    a :func:`trace_energy` result) summed, the GPR's word reads and writes
    (``golden.hub.Hub.gpr_reads``, ``gpr_writes``) in ``io``, and the EPU's
    operations (``Hub.epu_ops``) in ``other``: ``total_pj``, ``breakdown``
    (:data:`CATEGORIES`), ``gpr_pj``, ``epu_pj``, ``channels_pj`` (each
    channel's total) and ``counts`` (the channels' :data:`COUNTS` summed,
    ``gpr_reads``, ``gpr_writes``, ``epu_ops``)."""
    ops = {k: int((epu_ops or {}).get(k, 0)) for k in EPU_OPS}
    gpr = gpr_reads * params.gpr_rd_pj + gpr_writes * params.gpr_wr_pj
    epu = float(epu_pj(params, ops))
    e = {k: sum(ch["breakdown"][k] for ch in channels) for k in CATEGORIES}
    e["io"] += gpr
    e["other"] += epu
    counts = {k: sum(ch["counts"][k] for ch in channels) for k in COUNTS}
    return {"total_pj": sum(e.values()), "breakdown": e, "gpr_pj": gpr, "epu_pj": epu,
            "channels_pj": [ch["total_pj"] for ch in channels],
            "counts": {**counts, "gpr_reads": gpr_reads, "gpr_writes": gpr_writes,
                       "epu_ops": ops}}


# ---- the JIT-Q ALU channel ----------------------------------------------------

@dataclass(frozen=True)
class AluEnergyParams:
    """The ALU channel's own energies (pJ): its profile's ``[alu_energy]``
    table, beside the ``[energy]`` table that prices its ACT, PRE, REF,
    host RD/WR and background."""

    ld_pj: float  # one bank's word into its ALU's register (a LD, per bank)
    st_pj: float  # an ALU register into one bank's word (a ST, per bank)
    op_pj: float  # one computing command in one ALU: 16 lanes, two register reads, one write
    mov_pj: float  # a COPY, IMM, SETCNT or GETCNT in one ALU: one register read and write


ALU_KEYS = tuple(f.name for f in dataclasses.fields(AluEnergyParams))
#: What an ALU channel run is priced from (:func:`alu_trace_counts`): bank
#: activations and precharges; LD and ST bank accesses (one per bank of the
#: selected parity); computing and moving commands (one per ALU); host
#: reads and writes; refreshes; the cycles with some row open.
ALU_COUNTS = ("acts", "pres", "lds", "sts", "ops", "movs", "rds", "wrs", "refreshes", "active")
#: The counts that grow with the number of ALUs (and banks) at one timing.
ALU_UNIT_COUNTS = ("acts", "pres", "lds", "sts", "ops", "movs")
ALU_CATEGORIES = ("alu", "ld_st", "io", "act_pre", "refresh", "background", "other")


def alu_energy_params(profile: str = "hbm-jitq", **overrides) -> AluEnergyParams:
    """The ``[alu_energy]`` table of ``profile``, with ``overrides``."""
    return AluEnergyParams(**_table(profile, "alu_energy", ALU_KEYS, overrides))


@dataclass(frozen=True)
class _Op:
    """A decoded ALU word's opcode, for :func:`_command_of`."""

    opcode: int


def alu_trace_counts(cfg, words: list[int], trace: list[TraceEntry],
                     cycles: int) -> dict[str, int]:
    """The :data:`ALU_COUNTS` of a run of command ``words`` on the ALU
    channel ``cfg`` (``golden.alu.AluConfig``) whose issue trace is
    ``trace`` and which lasted ``cycles``: the trace replayed, ACT and PRE
    banks from the ALU channel's own rule (``golden.alu``: a LD or ST opens
    its row in every bank of its parity, as a set)."""
    from golden.alu import _AluBanks, _decode, check_command
    from golden.isa import AluMov, ErrorCode

    decoded = [_decode(w) for w in words]
    drops = {i for i, c in enumerate(decoded) if check_command(cfg, c) is not ErrorCode.NONE}
    banks = _AluBanks(cfg)
    moves = {int(AluMov.COPY), int(AluMov.IMM), int(AluMov.SETCNT), int(AluMov.GETCNT)}

    def opens(i):
        c = decoded[i]
        return banks.touched(c["opcode"], c), c["row"], c["opcode"] == Opcode.ALU_MOV

    def column(op, i, n):
        fn = decoded[i]["alu_fn"]
        if op == Opcode.RD:
            n["rds"] += 1
        elif op == Opcode.WR:
            n["wrs"] += 1
        elif op == Opcode.ALU_MOV and fn == AluMov.LD:
            n["lds"] += cfg.pairs
        elif op == Opcode.ALU_MOV and fn == AluMov.ST:
            n["sts"] += cfg.pairs
        elif op == Opcode.ALU_MOV and fn in moves:
            n["movs"] += cfg.pairs
        else:
            n["ops"] += cfg.pairs

    owner = _command_of(trace, [_Op(c["opcode"]) for c in decoded], drops)
    return _replay(trace, owner, banks, opens, column, dict.fromkeys(ALU_COUNTS, 0), cycles)


def alu_priced(params: EnergyParams, alu: AluEnergyParams, t_ck_ns: float, counts,
               cycles) -> dict:
    """Energy (pJ) of an ALU channel run with ``counts``
    (:data:`ALU_COUNTS`) over ``cycles``: ``total_pj`` and ``breakdown``
    (pJ per :data:`ALU_CATEGORIES`)."""
    e = {
        "alu": counts["ops"] * alu.op_pj + counts["movs"] * alu.mov_pj,
        "ld_st": counts["lds"] * alu.ld_pj + counts["sts"] * alu.st_pj,
        "io": (counts["rds"] + counts["wrs"]) * params.beat_pj,
        **_banks_priced(params, t_ck_ns, counts, cycles),
    }
    return {"total_pj": sum(e.values()), "breakdown": e}


def alu_trace_energy(cfg, params: EnergyParams, alu: AluEnergyParams, t_ck_ns: float,
                     words: list[int], trace: list[TraceEntry], cycles: int) -> dict:
    """Energy (pJ) of an ALU channel run (:func:`alu_trace_counts` priced by
    :func:`alu_priced`): ``total_pj``, ``breakdown``, ``counts``,
    ``cycles``."""
    counts = alu_trace_counts(cfg, words, trace, cycles)
    return {**alu_priced(params, alu, t_ck_ns, counts, cycles), "counts": counts,
            "cycles": cycles}


def alu_params_for(cfg) -> tuple[EnergyParams, AluEnergyParams, float] | None:
    """``(params, alu params, t_ck_ns)`` of the known profile an ALU
    channel ``cfg`` names, or None when it has no ``[alu_energy]`` table."""
    return _known_alu_energy(cfg.profile) if cfg.profile in PROFILES else None


@functools.cache
def _known_alu_energy(profile: str) -> tuple[EnergyParams, AluEnergyParams, float] | None:
    """:func:`alu_params_for` of a shipped profile, read once (the
    scoreboards ask for every run)."""
    if "alu_energy" not in load_profile_data(profile):
        return None
    return energy_params(profile), alu_energy_params(profile), _t_ck_ns(profile)


def _t_ck_ns(profile: str) -> float:
    return float(load_profile_data(profile).get("t_ck_ns", 1))


def params_for(cfg: ChannelConfig) -> tuple[EnergyParams, float] | None:
    """``(params, t_ck_ns)`` of the known profile ``cfg`` was built from,
    or None when it has none or the profile has no energy table."""
    return _known_profile_energy(cfg.profile) if cfg.profile in PROFILES else None


@functools.cache
def _known_profile_energy(profile: str) -> tuple[EnergyParams, float] | None:
    """:func:`params_for` of a shipped profile, read once (the scoreboard
    asks for every run)."""
    data = load_profile_data(profile)
    if "energy" not in data and "energy_from" not in data:
        return None
    return energy_params(profile), _t_ck_ns(profile)


def run_energy(profile: str, cfg: ChannelConfig, commands: list[Command], result,
               **overrides) -> dict:
    """:func:`trace_energy` of a ``ChannelModel`` run ``result`` on a
    channel of ``profile`` (its ``[energy]`` table and tCK)."""
    return trace_energy(cfg, energy_params(profile, **overrides), _t_ck_ns(profile),
                        commands, result.trace, result.cycles)
