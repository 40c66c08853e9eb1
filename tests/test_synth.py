"""make synth's area estimate (sim/synth.py): yosys's CMOS transistor count."""

from __future__ import annotations

from golden.config import load_profile
from sim.synth import synth_one

#: Transistors per gate in yosys's CMOS cost table (kernel/cost.h), the
#: oracle the reported count is checked against.
CMOS = {"$_NOT_": 2, "$_NAND_": 4, "$_NOR_": 4, "$_AND_": 6, "$_OR_": 6, "$_ANDNOT_": 6,
        "$_ORNOT_": 6, "$_XOR_": 12, "$_XNOR_": 12, "$_MUX_": 12, "$_DFF_P_": 16}


def test_transistors_are_the_cmos_gate_costs(tmp_path):
    cfg = load_profile("gddr6-aim", banks=4, gbuf_entries=2, obuf_entries=2)
    row = synth_one(cfg, tmp_path)
    cells = {k: n for k, n in row["cmos_cells_by_type"].items() if k != "$scopeinfo"}
    assert set(cells) <= set(CMOS), set(cells) - set(CMOS)  # every flip-flop legalized
    assert cells["$_DFF_P_"] == row["flip_flops"]
    assert row["transistors"] == sum(CMOS[k] * n for k, n in cells.items())
