"""The HUB's sequencer (specification: ``golden.hub``, ``_Walk._command``):
the ``u``-th command of an instruction word's Op-size expansion, with the
DYN-MODI offsets that apply to the word, its virtual address translated
through the request's VA2PA table, and its range checks (UNMAPPED,
CMD_RANGE). Combinational; the decoder steps ``u``."""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import (
    CHANNEL_OPCODES,
    EPU_OPCODES,
    FIELDS,
    INSTR_BITS,
    ISA,
    PROGRAM_OPCODES,
    Fault,
    Opcode,
    layout_widths,
)
from hw.hub.ports import ACC_BITS, FAULT_BITS, ModsLayout, Sizes, log2
from hw.streams import CommandLayout


class Decoded:
    """Every field of an instruction word, selected by its opcode's format
    (``golden.isa.ISA``), with ``has[name]`` true when the opcode has it;
    ``opcodes``: the opcodes decoded (the rest are not ``known``)."""

    def __init__(self, m, word, prefix="i", opcodes=PROGRAM_OPCODES):
        self.opcode = word[:FIELDS["opcode"].width]
        layouts = {op: data.StructLayout(layout_widths(("opcode", *ISA[op].fields)))
                   for op in opcodes}
        views = {op: data.View(layout, word[:layout.size]) for op, layout in layouts.items()}
        self.has = {}
        for name in sorted({f for op in opcodes for f in ISA[op].fields}):
            value = Signal(FIELDS[name].width, name=f"{prefix}_{name}")
            has = Signal(name=f"{prefix}_has_{name}")
            expr, present = Const(0, FIELDS[name].width), Const(0)
            for op in opcodes:
                if name in ISA[op].fields:
                    expr = Mux(self.opcode == op, views[op][name], expr)
                    present = present | (self.opcode == op)
            m.d.comb += [value.eq(expr), has.eq(present)]
            setattr(self, name, value)
            self.has[name] = has
        self.is_ = {op: self.opcode == op for op in opcodes}
        self.channel = Cat(self.opcode == op for op in CHANNEL_OPCODES).any()
        self.known = Cat(self.opcode == op for op in opcodes).any()
        self.epu = Cat(self.opcode == op for op in EPU_OPCODES if op in opcodes).any()


class Sequencer(wiring.Component):
    """Members
    -------
    word : In(INSTR_BITS)
        The instruction word (a channel opcode; others give don't-care).
    u : In(op_size)
        Which of its Op-size commands.
    mods : In(ModsLayout)
        The DYN-MODI offsets that apply to the word this iteration.
    gpr_base, n_chunks, pchunk : In; vchunk : Out
        The request's GPR base and chunk count, and its VA2PA lookup.
    cmd : Out(CommandLayout)
        The command.
    gpr : Out(signed)
        Its GPR word (write beat source; first read beat destination).
    fault : Out
        UNMAPPED or CMD_RANGE, else 0.
    op_size : Out
        The word's Op-size (1 when it has none).
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        s = Sizes(hub)
        super().__init__({
            "word": In(INSTR_BITS), "u": In(FIELDS["op_size"].width), "mods": In(ModsLayout),
            "gpr_base": In(FIELDS["gpr_base"].width), "n_chunks": In(FIELDS["n_chunks"].width),
            "vchunk": Out(s.chunk_bits), "pchunk": In(s.pchunk),
            "cmd": Out(CommandLayout), "gpr": Out(signed(ACC_BITS)), "fault": Out(FAULT_BITS),
            "op_size": Out(FIELDS["op_size"].width + 1),
        })

    def elaborate(self, platform):
        hub = self.hub
        cfg, N, O = hub.channel, hub.n_channels, hub.channel.obuf_entries
        LC, LR = log2(cfg.cols), log2(hub.chunk_rows)
        m = Module()
        cur = Decoded(m, self.word, "seq")
        op_is, u, mods = cur.is_, self.u, self.mods
        uses_va = op_is[Opcode.MAC] | op_is[Opcode.RD] | op_is[Opcode.WR]
        is_read = op_is[Opcode.RD_OUT] | op_is[Opcode.RD]
        is_write = op_is[Opcode.WR_INP] | op_is[Opcode.WR]
        uses_gbuf = op_is[Opcode.WR_INP] | op_is[Opcode.MAC]
        uses_out = op_is[Opcode.MAC] | op_is[Opcode.RD_OUT]
        va, gb, ob = Signal(signed(ACC_BITS)), Signal(signed(ACC_BITS)), Signal(signed(ACC_BITS))
        gp = self.gpr
        m.d.comb += [
            va.eq((cur.row << LC) + cur.col + mods.va + Mux(uses_va, u, 0)),
            gb.eq(cur.gbuf_idx + mods.gbuf_idx + Mux(uses_gbuf, u, 0)),
            ob.eq(cur.out_idx + mods.out_idx + Mux(op_is[Opcode.RD_OUT], u, 0)),
            gp.eq(self.gpr_base + cur.gpr_addr + mods.gpr_addr
                  + Mux(is_read, u * N, Mux(is_write, u, 0))),
        ]

        # ---- translation through VA2PA ---------------------------------------
        vchunk = Signal(ACC_BITS)
        mapped = Signal()
        m.d.comb += [vchunk.eq(va.as_unsigned() >> (LC + LR)), self.vchunk.eq(vchunk),
                     mapped.eq((va >= 0) & (vchunk < self.n_chunks))]
        prow = Signal(FIELDS["row"].width)
        m.d.comb += prow.eq((self.pchunk << LR) | (va.as_unsigned() >> LC)[:LR] if LR
                            else self.pchunk)

        # ---- range checks --------------------------------------------------------
        def in_range(v, limit):
            return (v >= 0) & (v < limit)

        ranged = Signal()
        last_gp = gp + Mux(is_read, N - 1, 0)
        m.d.comb += ranged.eq((~uses_gbuf | in_range(gb, cfg.gbuf_entries))
                              & (~uses_out | in_range(ob, O))
                              & in_range(gp, hub.gpr_entries) & in_range(last_gp, hub.gpr_entries))
        with m.If(uses_va & ~mapped):
            m.d.comb += self.fault.eq(Fault.UNMAPPED)
        with m.Elif(~ranged):
            m.d.comb += self.fault.eq(Fault.CMD_RANGE)

        m.d.comb += [
            self.cmd.opcode.eq(cur.opcode),
            self.cmd.bank.eq(Mux(op_is[Opcode.RD] | op_is[Opcode.WR], cur.bank, 0)),
            self.cmd.row.eq(Mux(uses_va, prow, 0)),
            self.cmd.col.eq(Mux(uses_va, va[:LC], 0)),
            self.cmd.gbuf_idx.eq(Mux(uses_gbuf, gb, 0)),
            self.cmd.out_idx.eq(Mux(uses_out, ob, 0)),
            self.op_size.eq(Mux(cur.has["op_size"], cur.op_size, 1)),
        ]
        return m
