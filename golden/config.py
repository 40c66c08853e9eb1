"""Channel configuration: geometry, buffer depths and the timing profile.

One ``ChannelConfig`` parameterises both the golden model and the RTL
(``hw.channel.Channel``); device profiles are TOML data files in
``golden/profiles/`` that cite where each value comes from.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from golden.isa import FIELDS, LANES


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; the
    message names the key and the value."""


def check_one_of(name: str, value, known) -> None:
    """ConfigError naming ``name`` unless ``value`` is one of ``known``."""
    if value not in known:
        raise ConfigError(f"{name} must be one of {', '.join(known)}, not {value!r}")


def check_int(key: str, value, lo: int, hi: int, note: str = "") -> None:
    """``value`` must be an int (not a bool) in [lo, hi]; ConfigError naming
    ``key`` (and ``note``, what the value means) otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(f"{key} must be an integer in [{lo}, {hi}]{note}, not {value!r}")


#: Controller policies (DESIGN.md §2.2): static in-order with fixed gaps,
#: ping-pong buffering, Dynamic Command Scheduling.
POLICIES = ("static", "pingpong", "dcs")


@dataclass(frozen=True)
class Timing:
    """Controller-cycle timing. ``t_wr_inp``, ``t_mac``, ``t_rd_out`` are the
    execution times of the buffer accesses, from issue to completion: a
    command that depends on one waits this long after it (the static and
    ping-pong controllers by buffer, DCS by buffer entry; golden.channel,
    golden.dcs). The rest are the device rules of the constraint table
    (golden.timing)."""

    t_rcd: int = 56
    t_rp: int = 32
    t_ras: int = 54
    t_ccd: int = 2
    t_wr_inp: int = 4  # WR-INP: the GBuf entry written
    t_mac: int = 8  # MAC: the OBuf entry updated
    t_rd_out: int = 8  # RD-OUT: the OBuf entry read and cleared
    t_faw: int = 0  # four-activate window; 0: not modelled (optional in profiles)
    # Optional device rules (0: not modelled); docs/timing.md gives each one's
    # place in the constraint table (golden/timing.py).
    t_rc: int = 0  # ACT to ACT of the same bank
    t_rtp: int = 0  # a read (RD, MAC) to PRE of the same bank
    t_wr: int = 0  # a write (WR) to PRE of the same bank: write latency, burst, recovery
    t_wtr: int = 0  # a write to a read on the channel: write latency, burst, turnaround
    t_ccd_l: int = 0  # column to column in the same bank group (t_ccd: any two)
    t_rrd_s: int = 0  # ACT to ACT on the channel (different bank groups)
    t_rrd_l: int = 0  # ACT to ACT in the same bank group
    #: The register accesses' spacing on the data bus (WR-INP, RD-OUT):
    t_ccd_reg: int = 0  # any register access after another
    t_wtr_reg: int = 0  # WR-INP to RD-OUT: write latency, burst and write-to-read turnaround
    t_rtw_reg: int = 0  # RD-OUT to WR-INP: read-to-write turnaround on the data bus
    #: The device's switch between normal mode (ACT, PRE, MAC, RD, WR) and
    #: register-access mode (WR-INP, RD-OUT): nothing issues for t_modch
    #: cycles after one. 0: the device has no modes.
    t_modch: int = 0
    #: Periodic all-bank refresh: one falls due every t_refi cycles (from
    #: reset); the controller closes the open rows and issues REF, and no
    #: ACT follows for t_rfc. 0: no refresh.
    t_refi: int = 0
    t_rfc: int = 0

    @property
    def mac_ccd(self) -> int:
        """Cycles between two all-bank MACs at best: a MAC touches every bank
        group, so both column rules (t_ccd, t_ccd_l) apply."""
        return max(self.t_ccd, self.t_ccd_l)


#: Timing keys a profile may leave out, with the value that turns them off.
OPTIONAL_TIMING = dict.fromkeys(("t_faw", "t_rc", "t_rtp", "t_wr", "t_wtr", "t_ccd_l", "t_rrd_s",
                                  "t_rrd_l", "t_ccd_reg", "t_wtr_reg", "t_rtw_reg", "t_modch",
                                  "t_refi", "t_rfc"), 0)


#: The largest timing value (cycles) a profile may give; a refresh interval
#: of a few microseconds at a sub-nanosecond clock is the longest.
MAX_TIMING = 1 << 16


def refresh_bound(t: Timing) -> int:
    """Cycles within which a due refresh has issued, at most: a mode
    switch, the wait to precharge, the wait to refresh, and a cycle each.
    ``t_refi`` must exceed it, so one refresh is due at a time."""
    return (2 * t.t_modch + max(t.t_ras, t.t_rtp, t.t_wr, t.t_ccd) + max(t.t_rp, t.t_rc, t.t_rfc)
            + 4)


@dataclass(frozen=True)
class ChannelConfig:
    banks: int = 4
    rows: int = 64
    cols: int = 32
    gbuf_entries: int = 32
    obuf_entries: int = 4
    cmd_depth: int = 4  # command FIFO entries
    wdata_depth: int = 4  # write-data FIFO entries
    rdata_depth: int = 4  # read-data credits (output FIFO entries)
    timing: Timing = field(default_factory=Timing)
    profile: str = "custom"
    policy: str = "static"  # controller: one of POLICIES
    io_depth: int = 4  # DCS I/O queue entries (WR-INP, RD-OUT, RD, WR)
    compute_depth: int = 4  # DCS compute queue entries (MAC)
    #: Dual-path execution (LibraPIM DEX, docs/dual-path.md): every bank has
    #: two partitions, rows [0, slice_rows) and [slice_rows, rows), each with
    #: its own open row. ``dual_path`` is the hardware (build-time);
    #: ``slice_rows`` the split of a run (0: one partition, a conventional bank).
    dual_path: bool = False
    slice_rows: int = 0
    #: Bank groups (the constraint table's ``bankgroup`` level: t_ccd_l,
    #: t_rrd_l); banks split evenly, bank ``b`` in group ``b // (banks / groups)``.
    bank_groups: int = 1

    def __post_init__(self):
        check_one_of("policy", self.policy, POLICIES)
        limits = {
            "banks": (1, min(LANES, 1 << FIELDS["bank"].width)),
            "rows": (1, 1 << FIELDS["row"].width),
            "cols": (1, 1 << FIELDS["col"].width),
            "gbuf_entries": (1, 1 << FIELDS["gbuf_idx"].width),
            "obuf_entries": (1, 1 << FIELDS["out_idx"].width),
            "cmd_depth": (1, 1024),
            "wdata_depth": (1, 1024),
            "rdata_depth": (1, 1024),
            "io_depth": (1, 1024),
            "compute_depth": (1, 1024),
            "bank_groups": (1, 16),
        }
        for key, (lo, hi) in limits.items():
            check_int(key, getattr(self, key), lo, hi)
        if not isinstance(self.timing, Timing):
            raise ConfigError(f"timing must be a Timing, not {self.timing!r}")
        if self.banks % self.bank_groups:
            raise ConfigError(f"bank_groups={self.bank_groups} does not divide {self.banks} banks")
        if not isinstance(self.dual_path, bool):
            raise ConfigError(f"dual_path must be true or false, not {self.dual_path!r}")
        check_int("slice_rows", self.slice_rows, 0, self.rows - 1,
                  " (rows of the first partition; 0: no slicing)")
        if self.slice_rows and not self.dual_path:
            raise ConfigError(f"slice_rows={self.slice_rows} needs dual_path banks "
                              f"(dual_path=true)")
        if self.dual_path and self.policy == "dcs":
            raise ConfigError("dual_path needs an in-order controller (policy static or "
                              "pingpong), not dcs")
        if self.policy == "pingpong" and (self.gbuf_entries < 2 or self.obuf_entries < 2):
            raise ConfigError(f"policy pingpong needs gbuf_entries and obuf_entries >= 2 "
                              f"(two halves), not {self.gbuf_entries} and {self.obuf_entries}")
        for key in (f.name for f in dataclasses.fields(Timing)):
            value = getattr(self.timing, key)
            check_int(f"timing.{key}", value, 0 if key in OPTIONAL_TIMING else 1, MAX_TIMING)
        t = self.timing
        if (t.t_refi == 0) != (t.t_rfc == 0):
            raise ConfigError(f"timing.t_refi and timing.t_rfc go together (refresh on: both > 0, "
                              f"off: both 0), not {t.t_refi} and {t.t_rfc}")
        if t.t_refi and t.t_refi <= refresh_bound(t):
            raise ConfigError(f"timing.t_refi={t.t_refi} must exceed {refresh_bound(t)}, the "
                              f"cycles a due refresh can wait (one refresh due at a time)")

    @property
    def read_ccd(self) -> int:
        """Cycles per 32 B word of a stream of normal reads at best: with bank
        groups they alternate groups (t_ccd apart), else every read is in
        the one group (t_ccd_l too)."""
        t = self.timing
        return t.t_ccd if self.bank_groups > 1 else t.mac_ccd

    def replace(self, **changes) -> ChannelConfig:
        timing = {k: changes.pop(k) for k in list(changes) if hasattr(self.timing, k)}
        return dataclasses.replace(self, timing=dataclasses.replace(self.timing, **timing),
                                   **changes)

    def describe(self) -> str:
        t = self.timing
        text = (f"{self.profile} ({self.policy}): {self.banks} banks x {self.rows} rows x "
                f"{self.cols} cols, GBuf {self.gbuf_entries}, OBuf {self.obuf_entries}, "
                f"tRCD {t.t_rcd} tRP {t.t_rp} tRAS {t.t_ras} tCCD {t.t_ccd} "
                f"exec {t.t_wr_inp}/{t.t_mac}/{t.t_rd_out}")
        if t.t_faw:
            text += f" tFAW {t.t_faw}"
        extra = {"tRC": t.t_rc, "tRTP": t.t_rtp, "tWR": t.t_wr, "tWTR": t.t_wtr,
                 "tCCD_L": t.t_ccd_l, "tRRD_S": t.t_rrd_s, "tRRD_L": t.t_rrd_l,
                 "tCCD_REG": t.t_ccd_reg, "tWTR_REG": t.t_wtr_reg, "tRTW_REG": t.t_rtw_reg,
                 "nMODCH": t.t_modch, "tREFI": t.t_refi, "tRFC": t.t_rfc}
        text += "".join(f" {k} {v}" for k, v in extra.items() if v)
        if self.bank_groups > 1:
            text += f", {self.bank_groups} bank groups"
        if self.dual_path:
            text += (f", dual-path banks, partitions {self.slice_rows}:"
                     f"{self.rows - self.slice_rows}" if self.slice_rows
                     else ", dual-path banks, unsliced")
        return text


PROFILES = {"gddr6-aim": "gddr6_aim.toml", "gddr6-aim-assumed": "gddr6_aim_assumed.toml",
            "hbm2-pim": "hbm2_pim.toml", "hbm3-pim": "hbm3_pim.toml", "hbm-jitq": "hbm_jitq.toml",
            "lpddr5x-pim": "lpddr5x_pim.toml"}
DEFAULT_PROFILE = "gddr6-aim"


#: The largest TOML file (profile, scenario) the project reads.
TOML_MAX_BYTES = 1 << 20


def read_toml(path: str | Path, what: str) -> dict:
    """A user's TOML file as a dict; every failure (missing, too large, not
    UTF-8, not TOML, nested too deeply) one ConfigError naming ``what`` and
    the file."""
    p = Path(path)
    try:
        if not p.is_file():
            raise ConfigError(f"{what} {str(path)!r} is not a file")
        if p.stat().st_size > TOML_MAX_BYTES:
            raise ConfigError(f"{what} {path}: larger than {TOML_MAX_BYTES} bytes")
        text = p.read_bytes().decode("utf-8")
        return tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} {path}: {e}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: nested too deeply") from None
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror or e}") from None


def number_setting(pair: str, valid, usage: str, hi: float, what: str) -> tuple[str, float]:
    """One ``--set KEY=VALUE`` pair whose value is a number in [0, ``hi``]:
    ``(KEY, value)``. ConfigError with ``usage`` when it is not KEY=VALUE or
    ``valid(KEY)`` is false, and naming ``what`` the value must be when it
    is not such a number."""
    key, sep, text = pair.partition("=")
    key = key.strip()
    if not sep or not valid(key):
        raise ConfigError(f"--set {pair!r}: {usage}")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= hi:
        raise ConfigError(f"--set {key}: {text.strip()!r} is not {what}")
    return key, value


def load_profile_data(name_or_path: str) -> dict:
    if name_or_path in PROFILES:
        text = resources.files("golden.profiles").joinpath(PROFILES[name_or_path]).read_text()
        return tomllib.loads(text)
    if not Path(name_or_path).is_file():
        raise ConfigError(f"profile {name_or_path!r} is neither a known profile "
                          f"({', '.join(PROFILES)}) nor a file")
    data = read_toml(name_or_path, "profile")
    for section in ("timing", "geometry", "sources"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"profile {name_or_path}: [{section}] must be a table")
    return data


def load_profile(name_or_path: str = DEFAULT_PROFILE, **overrides) -> ChannelConfig:
    """A device profile as a ChannelConfig; keyword overrides replace
    geometry or timing keys (e.g. ``rows=64, t_mac=4``)."""
    data = load_profile_data(name_or_path)
    timing_keys = {f.name for f in dataclasses.fields(Timing)}
    geometry_keys = {"banks", "rows", "cols", "gbuf_entries", "obuf_entries", "bank_groups"}
    for section, allowed in (("timing", timing_keys), ("geometry", geometry_keys)):
        for key in data.get(section, {}):
            if key not in allowed:
                raise ConfigError(f"profile {name_or_path!r}: unknown key {section}.{key}")
    missing = timing_keys - set(OPTIONAL_TIMING) - set(data.get("timing", {}))
    if missing:
        raise ConfigError(f"profile {name_or_path!r}: missing key timing.{sorted(missing)[0]}")
    valid = timing_keys | geometry_keys | {"cmd_depth", "wdata_depth", "rdata_depth", "policy",
                                           "io_depth", "compute_depth", "dual_path",
                                           "slice_rows"}
    for key in overrides:
        if key not in valid:
            raise ConfigError(f"unknown configuration key {key!r} "
                              f"(valid: {', '.join(sorted(valid))})")
    timing = Timing(**{**data["timing"],
                       **{k: v for k, v in overrides.items() if k in timing_keys}})
    geometry = {**data.get("geometry", {}),
                **{k: v for k, v in overrides.items() if k not in timing_keys}}
    return ChannelConfig(timing=timing, profile=data.get("name", name_or_path), **geometry)


def slice_rows_for(rows: int, n: int, m: int) -> int:
    """Rows of the first partition when a bank of ``rows`` rows is split
    ``n:m`` (subarrays in that ratio)."""
    if not (isinstance(n, int) and isinstance(m, int)) or n < 1 or m < 1:
        raise ConfigError(f"partition ratio must be two positive integers n:m, not {n}:{m}")
    split, rem = divmod(rows * n, n + m)
    if rem:
        raise ConfigError(f"partition ratio {n}:{m} does not split {rows} rows into whole rows")
    return split


#: The configuration the RTL tests and ``make sim`` use: GDDR6-AiM's core
#: rules with the assumed execution times (profile gddr6-aim-assumed; the
#: dual-path test channel adds every device rule, sim/generate.py), a small
#: geometry that still holds a 256 x 512 GEMV.
def small_config() -> ChannelConfig:
    return load_profile("gddr6-aim-assumed", banks=4, rows=64, cols=32, gbuf_entries=32,
                        obuf_entries=4, cmd_depth=4, wdata_depth=4, rdata_depth=4)


@dataclass(frozen=True)
class HubConfig:
    """The HUB and its DPA dispatcher (DESIGN.md §2.3, docs/dpa.md) over
    ``n_channels`` identical channels. One object parameterises the golden
    model (``golden.hub``) and the RTL (``hw.hub``).

    A chunk is ``n_channels x banks x chunk_rows`` DRAM rows: the same
    ``chunk_rows`` consecutive rows in every bank of every channel;
    ``chunk_bytes`` (1 MB by default) sets ``chunk_rows``."""

    channel: ChannelConfig = field(default_factory=ChannelConfig)
    n_channels: int = 2
    #: None: 1 MB (REFERENCE.md), or, where the channel's rows do not hold
    #: that much, the largest power-of-two number of module rows they hold
    chunk_bytes: int | None = None
    instr_depth: int = 32  # instruction buffer entries (INSTR_BITS each)
    requests: int = 4  # configuration buffer entries
    chunks_per_request: int = 4  # VA2PA entries per request
    gpr_entries: int = 256  # 32 B GPR words
    max_modis: int = 8  # DYN-MODIs per loop
    decode_depth: int = 8  # decoded-command FIFO between the decoder and the multicast
    #: the HUB has an EPU (softmax and reduction on the GPR, golden/hub/epu.py);
    #: without one, EPU instructions are BAD_OPCODE at commit
    epu: bool = True

    def __post_init__(self):
        if not isinstance(self.channel, ChannelConfig):
            raise ConfigError(f"channel must be a ChannelConfig, not {self.channel!r}")
        limits = {
            "n_channels": (1, FIELDS["ch_mask"].width),
            "instr_depth": (1, 1 << 12),
            "requests": (1, min(1 << FIELDS["req_id"].width, 128)),
            "chunks_per_request": (1, (1 << FIELDS["n_chunks"].width) - 1),
            "gpr_entries": (1, 1 << FIELDS["gpr_addr"].width),
            "max_modis": (1, 16),
            "decode_depth": (1, 64),
            "chunk_bytes": (1, 1 << 40),
        }
        for key, (lo, hi) in limits.items():
            value = getattr(self, key)
            if key == "chunk_bytes" and value is None:  # the default, resolved below
                continue
            check_int(key, value, lo, hi)
        if not isinstance(self.epu, bool):
            raise ConfigError(f"epu must be true or false, not {self.epu!r}")
        if self.chunk_bytes is None:
            fit = self.row_bytes << (self.channel.rows.bit_length() - 1)
            object.__setattr__(self, "chunk_bytes", min(1 << 20, fit))
        if self.gpr_entries & (self.gpr_entries - 1):
            raise ConfigError(f"gpr_entries must be a power of two, not {self.gpr_entries}")
        cols = self.channel.cols
        if cols & (cols - 1):
            raise ConfigError(f"channel.cols must be a power of two for DPA addressing, not {cols}")
        rows, rem = divmod(self.chunk_bytes, self.row_bytes)
        if rem or rows < 1 or rows & (rows - 1) or rows > self.channel.rows:
            raise ConfigError(
                f"chunk_bytes={self.chunk_bytes} must be a power-of-two multiple of one module "
                f"row ({self.row_bytes} B = {self.n_channels} channels x {self.channel.banks} "
                f"banks x {cols} x 32 B) and at most {self.channel.rows} rows")

    @property
    def row_bytes(self) -> int:
        """Bytes in one DRAM row index across every bank of every channel."""
        return self.n_channels * self.channel.banks * self.channel.cols * (LANES * 2)

    @property
    def chunk_rows(self) -> int:
        return self.chunk_bytes // self.row_bytes

    @property
    def physical_chunks(self) -> int:
        return self.channel.rows // self.chunk_rows

    def replace(self, **changes) -> HubConfig:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        return (f"HUB: {self.n_channels} channels x [{self.channel.describe()}], "
                f"chunk {self.chunk_bytes} B = {self.chunk_rows} rows, "
                f"{self.physical_chunks} chunks, {self.requests} requests x "
                f"{self.chunks_per_request} VA2PA entries, {self.instr_depth} instructions, "
                f"GPR {self.gpr_entries} x 32 B")


#: The HUB configuration the RTL tests use: two small channels, 2-row chunks.
def small_hub_config(policy: str = "static") -> HubConfig:
    ch = small_config().replace(policy=policy)
    return HubConfig(channel=ch, n_channels=2, chunk_bytes=2 * 2 * ch.banks * ch.cols * 32,
                     instr_depth=32, requests=4, chunks_per_request=4, gpr_entries=256,
                     max_modis=8)
