"""Scenario configs for the system studies: TOML with ``--set`` overrides.

Each study's defaults are ``golden/system/scenarios/<study>.toml`` plus the
``[assumptions]`` table, whose defaults are :class:`golden.system.model.Assumptions`.
A user file (``--scenario FILE``) and ``--set key=value`` pairs (dotted keys
for tables: ``assumptions.link_gbs=128``) override them. Every key must be
one the defaults have and every value of the default's type; otherwise a
:class:`ConfigError` names the key.
"""

from __future__ import annotations

import copy
import math
import tomllib
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from golden.config import ConfigError, check_one_of, read_toml
from golden.energy import KEYS
from golden.isa import FIELDS
from golden.system.model import Assumptions

SCENARIO_STUDIES = ("pimphony", "pimphony-scaling", "tcp-activation", "librapim",
                    "pimphony-gpu", "pimphony-serving", "pimphony-energy")


def defaults(study: str) -> dict:
    if study not in SCENARIO_STUDIES:
        raise ConfigError(f"no scenario defaults for study {study!r}")
    text = resources.files("golden.system.scenarios").joinpath(f"{study}.toml").read_text()
    data = tomllib.loads(text)
    if study != "librapim":  # the PIMphony system model's assumptions
        data["assumptions"] = asdict(Assumptions())
        del data["assumptions"]["energy_scale"]  # the [energy] table below
    # factors on the PIM profile's energy table (1: as cited; docs/energy.md)
    data["energy"] = dict.fromkeys(KEYS, 1.0)
    return data


#: The longest list a scenario key may hold (batches, lengths, names).
LIST_MAX = 1024


@dataclass(frozen=True)
class Range:
    """The values a numeric scenario key (or each value of a list) may
    take: [lo, hi], or [lo, hi) with ``open_hi``; ``unit`` for the message."""

    lo: float
    hi: float
    open_hi: bool = False
    unit: str = ""

    def holds(self, v) -> bool:
        return self.lo <= v and (v < self.hi if self.open_hi else v <= self.hi)

    def __str__(self) -> str:
        def num(x) -> str:
            return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
        return f"[{num(self.lo)}, {num(self.hi)}{')' if self.open_hi else ']'}" + (
            f" ({self.unit})" if self.unit else "")


#: Every numeric scenario key's range (docs/bad-input.md). The bounds are
#: past every configuration of the source papers (REFERENCE.md: contexts up
#: to 1M tokens, batches up to 384, modules up to 1,024 GB) and keep a
#: study's time and memory bounded: beyond them a figure would be an
#: extrapolation of the model, not a configuration anyone built.
RANGES = {
    "seed": Range(0, (1 << 32) - 1),
    "requests": Range(1, 1_000_000, unit="requests drawn per dataset"),
    "steps": Range(1, 1000, unit="generation steps"),
    "batches": Range(1, 4096, unit="requests per batch"),
    "inputs": Range(1, 1 << 20, unit="tokens"),
    "tp": Range(1, 64, unit="devices"),
    "spread": Range(0, 1, open_hi=True),
    "broadcast_mac_ccd": Range(0, 64, unit="cycles; 0: the profile's all-bank MAC spacing"),
    "dex_overhead": Range(0, 1, unit="fraction of a read's time"),
    "npu_arrays": Range(1, 4096, unit="systolic array side"),
    "contexts": Range(1, 1 << 24, unit="tokens"),
    "context_capacity_gb": Range(1, 1 << 16, unit="GB"),
    "capacities_gb": Range(1, 1 << 16, unit="GB"),
    "capacity_context": Range(1, 1 << 24, unit="tokens"),
    "variation": Range(0, 1 / 3, open_hi=True, unit="sigma over mean"),
    "channels": Range(1, 64),
    "gpus": Range(0, 1024, unit="0: memory-matched"),
    "d_head": Range(16, 1024),
    "group": Range(1, 64, unit="queries per KV head"),
    "tokens": Range(1, 1 << 24),
    "assumptions.xpu_bandwidth_tbs": Range(1e-3, 1e3, unit="TB/s"),
    "assumptions.link_gbs": Range(1e-3, 1e6, unit="GB/s"),
    "assumptions.epu_lanes": Range(16, 1 << 16),
    "assumptions.dcs_obuf_entries": Range(1, 1 << FIELDS["out_idx"].width),
    "assumptions.chunk_bytes": Range(1, 1 << 40, unit="bytes"),
    "assumptions.gpu_bandwidth_efficiency": Range(0.01, 1),
    "assumptions.gpu_flops_efficiency": Range(0.01, 1),
    "assumptions.gpu_page_tokens": Range(1, 4096, unit="tokens"),
    "assumptions.xpu_subbatches": Range(0, 2, unit="0: the faster; 1: in turn; 2: interleaved"),
    "assumptions.cxl_lanes": Range(1, 64, unit="lanes per CXL port"),
    "assumptions.pnm_flops_per_element": Range(0.01, 1e3, unit="FLOPs"),
    "assumptions.host_op_cycles": Range(0, 1 << 20, unit="cycles"),
    "assumptions.xpu_pj_per_mac": Range(0, 1e3, unit="pJ"),
    "assumptions.link_pj_per_byte": Range(0, 1e4, unit="pJ"),
    "assumptions.vector_pj_per_element": Range(0, 1e4, unit="pJ"),
    "assumptions.gpu_hbm_pj_per_byte": Range(0, 1e4, unit="pJ"),
    "assumptions.gpu_sram_pj_per_byte": Range(0, 1e4, unit="pJ"),
    "assumptions.gpu_static_w": Range(0, 1e4, unit="W per GPU"),
    "npu_pj_per_mac": Range(0, 1e3, unit="pJ"),
    "broadcast_pj_per_bank": Range(0, 1e4, unit="pJ"),
    **{f"energy.{k}": Range(0, 1e3, unit="x the profile's value") for k in KEYS},
    "output_tokens": Range(1, 1 << 20, unit="tokens per request"),
    "arrival_rate": Range(0, 1e9, unit="requests/s; 0: all at once"),
}


def check_all(data: dict, where: str = "scenario", prefix: str = "") -> None:
    """Every key of a scenario dict in its range (for callers that build the
    dict themselves rather than through ``load``)."""
    for key, value in data.items():
        if isinstance(value, dict):
            check_all(value, where, f"{prefix}{key}.")
        else:
            check_range(f"{prefix}{key}", value, where)


def check_range(name: str, value, where: str) -> None:
    """A value of key ``name`` in its range (``RANGES``; a list value by
    value); ConfigError naming the key otherwise."""
    rng = RANGES.get(name)
    if rng is None:
        return
    items = enumerate(value) if isinstance(value, list) else [(None, value)]
    for i, v in items:
        if isinstance(v, int | float) and not isinstance(v, bool) and not rng.holds(v):
            label = name if i is None else f"{name}[{i}]"
            raise ConfigError(f"{where}: {label} must be in {rng}, not {v!r}")


def _typed(key: str, value, default, where: str):
    """``value`` checked against the type of ``default``."""
    def bad(what: str):
        return ConfigError(f"{where}: {key} must be {what}, not {value!r}")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        if not math.isfinite(value):
            raise bad("a finite number")
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if isinstance(default, list):
        if not isinstance(value, list):
            raise bad("a list")
        if len(value) > LIST_MAX:
            raise bad(f"a list of at most {LIST_MAX} values")
        proto = default[0] if default else ""
        return [_typed(f"{key}[{i}]", v, proto, where) for i, v in enumerate(value)]
    raise bad(type(default).__name__)


def _merge(base: dict, over: dict, where: str, prefix: str = "") -> None:
    for key, value in over.items():
        name = f"{prefix}{key}"
        if key not in base:
            raise ConfigError(f"{where}: unknown key {name!r} (valid: "
                              f"{', '.join(prefix + k for k in sorted(base))})")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {name} must be a table, not {value!r}")
            _merge(base[key], value, where, f"{name}.")
        else:
            base[key] = _typed(name, value, base[key], where)
            check_range(name, base[key], where)


def parse_set(pair: str, data: dict) -> dict:
    """``key=value`` as a nested dict. The value is read as a TOML value;
    a bare word is a string, and ``a,b`` is a list where the key's default
    is a list."""
    key, sep, text = pair.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ConfigError(f"--set {pair!r}: expected key=value")
    parts = key.split(".")
    default = data
    for p in parts:
        default = default.get(p) if isinstance(default, dict) else None
    if isinstance(default, list) and not text.startswith("["):
        text = "[" + ", ".join(_literal(v.strip()) for v in text.split(",") if v.strip()) + "]"
    value = tomllib.loads(f"v = {_literal(text)}")["v"]
    for p in reversed(parts):
        value = {p: value}
    return value


def _literal(text: str) -> str:
    try:
        tomllib.loads(f"v = {text}")
        return text
    except tomllib.TOMLDecodeError:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def load(study: str, path: str | None = None, sets=()) -> dict:
    """The scenario of ``study``: defaults, then the file, then ``sets``."""
    data = copy.deepcopy(defaults(study))
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"scenario file {path!r} does not exist")
        _merge(data, read_toml(path, "scenario"), f"scenario {path}")
    for pair in sets or ():
        _merge(data, parse_set(pair, data), "--set")
    return data


def assumptions(data: dict) -> Assumptions:
    from golden.system.model import POLICY_BASELINES, check_hfp_weights, check_preemption

    asm = Assumptions(**data["assumptions"],
                      energy_scale=tuple(sorted(data.get("energy", {}).items())))
    check_one_of("assumptions.baseline_policy", asm.baseline_policy, POLICY_BASELINES)
    check_hfp_weights(asm)
    check_preemption(asm)
    return asm


def choose(data: dict, key: str, known) -> list[str]:
    """The names under ``key``, each one of ``known``."""
    names = data[key]
    for n in names:
        if n not in known:
            raise ConfigError(f"{key}: unknown name {n!r} (known: {', '.join(known)})")
    if not names:
        raise ConfigError(f"{key}: the list is empty")
    return names
