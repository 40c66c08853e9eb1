"""The HUB's sequencer (twin of ``hw/hub/sequencer.py``): the ``u``-th
command of an instruction word's Op-size expansion, with the DYN-MODI
offsets that apply to it, its virtual address translated through the
request's VA2PA table, and its range checks (UNMAPPED, CMD_RANGE)."""

from __future__ import annotations

from golden.hub.cbuf import ConfigBuffer
from golden.hub.ports import READS, USES_VA, WRITES, DpaFault
from golden.isa import Fault, ModiField, Opcode
from golden.streams import Command


def command(cbuf: ConfigBuffer, req: int, op: Opcode, f: dict[str, int], u: int,
            mods: dict[ModiField, int]) -> tuple[Command | None, int, Fault, str]:
    """(command, GPR word, fault, message) of command ``u`` of word
    ``(op, f)`` of request ``req``; ``mods``: the DYN-MODI offsets (ROW
    holds the ROW and COL offsets, in words)."""
    hub, r = cbuf.hub, cbuf.requests[req]
    cfg, cols, n = hub.channel, hub.channel.cols, hub.n_channels
    row = col = gbuf = out = 0
    if op in USES_VA:
        va = f["row"] * cols + f["col"] + mods[ModiField.ROW] + u
        try:
            row, col = cbuf.translate(req, va)
        except DpaFault as e:
            return None, 0, e.code, str(e)
    if op in (Opcode.WR_INP, Opcode.MAC):
        gbuf = f["gbuf_idx"] + mods[ModiField.GBUF_IDX] + u
    if op == Opcode.MAC:
        out = f["out_idx"] + mods[ModiField.OUT_IDX]
    if op == Opcode.RD_OUT:
        out = f["out_idx"] + mods[ModiField.OUT_IDX] + u
    # a MAC has no GPR operand: only reads and writes step the GPR word
    gpr = r.gpr_base + f.get("gpr_addr", 0) + mods[ModiField.GPR_ADDR] \
        + (u * n if op in READS else u if op in WRITES else 0)
    last_gpr = gpr + (n - 1 if op in READS else 0)
    checks = [("gbuf_idx", gbuf, cfg.gbuf_entries), ("out_idx", out, cfg.obuf_entries),
              ("GPR entry", gpr, hub.gpr_entries), ("GPR entry", last_gpr, hub.gpr_entries)]
    for name, value, limit in checks:
        if not 0 <= value < limit:
            return None, 0, Fault.CMD_RANGE, f"request {req}: {op.name} {name}={value} " \
                                             f"out of range (< {limit})"
    bank = f.get("bank", 0)
    cmd = Command(op, bank=bank, row=row, col=col,
                  gbuf_idx=gbuf if op in (Opcode.WR_INP, Opcode.MAC) else 0,
                  out_idx=out if op in (Opcode.MAC, Opcode.RD_OUT) else 0)
    return cmd, gpr if op in READS or op in WRITES else 0, Fault.NONE, ""
