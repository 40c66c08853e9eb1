"""make synth's area estimate (sim/synth.py): yosys's CMOS transistor count
for logic, the SRAM cell model for memories, the HUB's per-block rows and
the overheads computed from them."""

from __future__ import annotations

import pytest
from amaranth import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig, load_profile
from sim import synth
from sim.synth import CMOS, memory_transistors_per_bit, synth_block, synth_one


def test_transistors_are_the_cmos_gate_costs(tmp_path):
    cfg = load_profile("gddr6-aim", banks=4, gbuf_entries=2, obuf_entries=2)
    row = synth_one(cfg, tmp_path)
    cells = row["cells_by_type"]
    assert set(cells) <= set(CMOS), set(cells) - set(CMOS)  # every flip-flop legalized
    assert cells["$_DFF_P_"] == row["flip_flops"] > 0
    assert row["logic_transistors"] == sum(CMOS[k] * n for k, n in cells.items())
    # yosys's own estimate (kernel/cost.h) is the same table
    assert row["yosys_transistors"] == row["logic_transistors"]
    # the command, write-data and read-data FIFOs are memories, costed by the model
    assert row["memory_bits"] > 0
    assert row["transistors"] == row["logic_transistors"] + row["memory_transistors"]


class _TwoReadPorts(wiring.Component):
    """An 8 x 16 memory with one write and two read ports, and a second 4 x 8
    memory standing for a DRAM array."""

    def __init__(self):
        super().__init__({"wa": In(3), "wd": In(16), "we": In(1), "ra": In(3), "rb": In(3),
                          "qa": Out(16), "qb": Out(16), "qd": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = mem = memory.Memory(shape=16, depth=8, init=[])
        m.submodules.bank0 = dram = memory.Memory(shape=8, depth=4, init=[])
        w, a, b = mem.write_port(), mem.read_port(), mem.read_port()
        dw, dr = dram.write_port(), dram.read_port()
        m.d.comb += [w.addr.eq(self.wa), w.data.eq(self.wd), w.en.eq(self.we),
                     a.addr.eq(self.ra), b.addr.eq(self.rb), self.qa.eq(a.data),
                     self.qb.eq(b.data), dw.addr.eq(self.wa), dw.data.eq(self.wd[:8]),
                     dw.en.eq(self.we), dr.addr.eq(self.ra), self.qd.eq(dr.data)]
        return m


def test_memories_are_costed_by_the_cell_model(tmp_path):
    # 4 storage + 2 per write port + 2 per read port: 8T for one of each
    assert memory_transistors_per_bit(read_ports=1, write_ports=1) == 8
    assert memory_transistors_per_bit(read_ports=2, write_ports=1) == 10
    row = synth_block(_TwoReadPorts(), tmp_path, "two", dram=lambda name: name == "bank0")
    regs = {x["name"]: x for x in row["memories"]}
    assert regs["regs"]["bits"] == 8 * 16 and regs["regs"]["read_ports"] == 2
    assert row["memory_bits"] == 128 and row["memory_transistors"] == 128 * 10
    # the DRAM array: bits only
    assert regs["bank0"]["dram"] and row["dram_bits"] == 4 * 8
    assert regs["bank0"]["transistors"] == 0
    # the memories are taken out before mapping: no flip-flop holds their words
    assert row["flip_flops"] < 16


def test_hub_rows_are_its_blocks(tmp_path):
    from hw.hub.module import PimModule

    cfg = load_profile("gddr6-aim", banks=4, gbuf_entries=2, obuf_entries=2)
    hub = HubConfig(channel=cfg, n_channels=2, gpr_entries=16, instr_depth=8, requests=2,
                    chunks_per_request=2, max_modis=2, decode_depth=2, epu=False)
    row = synth_block(PimModule(hub, channels=False), tmp_path, "hub", hierarchy=True)
    blocks = row["blocks"]
    for name in (*synth.DISPATCHER, "hub.gpr", "hub.host", "hub.multicast"):
        assert name in blocks, sorted(blocks)
    assert row["transistors"] == sum(b["transistors"] for b in blocks.values())
    assert row["yosys_transistors"] == row["logic_transistors"]
    gpr = blocks["hub.gpr"]["memories"]
    assert [(x["words"], x["width"], x["read_ports"]) for x in gpr] == [(16, 256, 2)]
    assert blocks["hub.decoder"]["logic_transistors"] > blocks["hub.ibuf"]["logic_transistors"]


def test_pim_module_without_channels_has_their_ports():
    from hw.hub.module import PimModule

    cfg = load_profile("gddr6-aim", banks=4, gbuf_entries=2, obuf_entries=2)
    hub = HubConfig(channel=cfg, n_channels=2)
    alone, whole = PimModule(hub, channels=False), PimModule(hub)
    for top in (alone, whole):
        top._MustUse__silence = True  # built to look at, not elaborated
    for c in range(2):
        assert hasattr(alone, f"cmd_{c}") and hasattr(alone, f"rdata_{c}")
        assert not hasattr(alone, f"trace_{c}") and hasattr(whole, f"trace_{c}")
        assert not hasattr(whole, f"cmd_{c}")


def test_overheads_are_the_block_differences(monkeypatch, tmp_path):
    """synth()'s overheads from made-up rows: each is the difference the docs
    say it is."""
    made = {"static": 100, "pingpong": 110, "dcs": 400, "static-sliced": 260,
            "mac_unit": 1000, "datapath_1bank_obuf1": 1500, "datapath_1bank_obuf8": 1600,
            "datapath_2bank_obuf8": 2800}

    def fake(top, folder, name="top", hierarchy=False, dram=None):
        top._MustUse__silence = True  # not elaborated
        if hierarchy:
            blocks = {"hub.ibuf": 10, "hub.cbuf": 20, "hub.decoder": 30,
                      "hub.decoder.sequencer": 5, "hub.decoded": 5, "hub.gpr": 100,
                      "hub.host": 20, "hub.multicast": 10}
            if folder.name == "hub_gpr_512k":
                blocks["hub.gpr"] = 1000
            # logic = transistors, and 1 memory bit in the GPR
            return {"transistors": sum(blocks.values()),
                    "blocks": {k: {"transistors": v, "logic_transistors": v,
                                   "memory_bits": int(k == "hub.gpr")}
                               for k, v in blocks.items()}}
        return {"transistors": made[folder.name]}

    monkeypatch.setattr(synth, "synth_block", fake)
    monkeypatch.setattr(synth, "BUILD", tmp_path)
    out = synth.synth(synth.reference_config())
    o = out["overheads"]
    assert o["dcs_vs_static_controller"] == pytest.approx(3.0)
    assert o["obuf_1_to_8_vs_mac_unit"] == pytest.approx(0.1)
    assert o["bank_datapath_transistors"] == 1200
    assert o["dispatcher_vs_hub"] == pytest.approx(70 / 200)
    assert o["dispatcher_vs_hub_gpr_512k"] == pytest.approx(70 / 1100, abs=1e-3)
    assert o["dispatcher_vs_hub_memory_6t"] == pytest.approx(70 / 206, abs=1e-3)
    assert o["dispatcher_vs_hub_memory_16t"] == pytest.approx(70 / 216, abs=1e-3)
    assert o["sliced_extra_transistors_per_bank"] == 10  # 160 over 16 banks
    assert o["sliced_extra_vs_bank_datapath"] == pytest.approx(10 / 1200, abs=1e-3)
