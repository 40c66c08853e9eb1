"""The channel's MAC datapath (specification: the data rules of
``golden.channel``): the GBuf, the bank memories, one 16-lane BF16 MAC tree
and one OBuf register file per bank, driven by the issuing command.

A command issued in cycle ``c`` addresses the GBuf and bank read ports in
``c``; in stage 1 (``c + 1``) the MAC trees add into OBuf, and a RD or
RD-OUT beat leaves for the read-data FIFO (``rbeat``). At most one command
issues per cycle under every controller policy, so its effects happen in
issue order, as in the golden model.

The MAC trees take their operands (the bank words, the GBuf word and the
OBuf accumulators) from operand registers that load at the falling edge in
the middle of stage 1, and only when a MAC is there
(``hw.util.gated_fall_domain``); the OBuf registers load the trees' sums
at the rising edge that ends stage 1, as before. The timing seen at the
ports is unchanged. The trees, 3/4 of the channel's logic, then change
only for a MAC: Verilator evaluates them in those cycles alone (3.6x the
channel's simulation speed, docs/simulation.md), and a real design would
gain the same operand isolation for power. The price is that the trees
have half a cycle, from the falling edge to the rising edge.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import ChannelConfig
from golden.isa import LANES, WORD_BITS
from hw.fp import f32_to_bf16, mac_tree
from hw.streams import CommandLayout
from hw.util import gated_fall_domain, select


class Datapath(wiring.Component):
    """GBuf, banks, MAC trees and OBuf of a channel of ``config``.

    Members
    -------
    col : In(1)
        A command issues its column action this cycle.
    cmd : In(CommandLayout)
        The issuing command.
    wr_inp, mac, rd_out, rd, wr : In(1)
        Its opcode, decoded.
    wbeat : In(256)
        The write-data FIFO head (WR-INP, WR).
    rbeat_valid, rbeat : Out(1), Out(256)
        A read beat for the read-data FIFO, the cycle after its RD / RD-OUT.
    """

    def __init__(self, config: ChannelConfig):
        self.config = config
        super().__init__({
            "col": In(1), "cmd": In(CommandLayout), "wr_inp": In(1), "mac": In(1),
            "rd_out": In(1), "rd": In(1), "wr": In(1), "wbeat": In(WORD_BITS),
            "rbeat_valid": Out(1), "rbeat": Out(WORD_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        B = cfg.banks
        cmd, do_col = self.cmd, self.col
        wbeat = self.wbeat
        addr = Signal(range(max(2, cfg.rows * cfg.cols)))
        m.d.comb += addr.eq(cmd.row * cfg.cols + cmd.col)
        m.submodules.gbuf = gbuf = memory.Memory(shape=WORD_BITS, depth=cfg.gbuf_entries, init=[])
        gbuf_w, gbuf_r = gbuf.write_port(), gbuf.read_port()
        m.d.comb += [gbuf_w.addr.eq(cmd.gbuf_idx), gbuf_w.data.eq(wbeat),
                     gbuf_w.en.eq(do_col & self.wr_inp), gbuf_r.addr.eq(cmd.gbuf_idx),
                     gbuf_r.en.eq(do_col & self.mac)]
        # Read ports only read for the command that needs them: the MAC trees
        # then see stable inputs between MACs (less simulator activity).
        bank_read = do_col & (self.mac | self.rd)
        bank_data = []
        for b in range(B):
            mem = memory.Memory(shape=WORD_BITS, depth=cfg.rows * cfg.cols, init=[])
            m.submodules[f"bank{b}"] = mem
            w, r = mem.write_port(), mem.read_port()
            m.d.comb += [w.addr.eq(addr), w.data.eq(wbeat),
                         w.en.eq(do_col & self.wr & (cmd.bank == b)), r.addr.eq(addr),
                         r.en.eq(bank_read)]
            bank_data.append(r.data)

        # stage 1: the cycle after issue, when the read ports deliver
        s1_mac, s1_rd_out, s1_rd = Signal(), Signal(), Signal()
        s1_out = Signal(range(max(2, cfg.obuf_entries)))  # never zero-width
        s1_bank = Signal(range(max(2, B)))
        m.d.sync += [s1_mac.eq(do_col & self.mac), s1_rd_out.eq(do_col & self.rd_out),
                     s1_rd.eq(do_col & self.rd)]
        # Captured only at an issue: the OBuf read mux, and the MAC trees and
        # BF16 rounding behind it, stay still while a queue head waits.
        with m.If(do_col):
            m.d.sync += [s1_out.eq(cmd.out_idx), s1_bank.eq(cmd.bank)]

        obuf = [[Signal(32, name=f"obuf{e}_bank{b}") for b in range(B)]
                for e in range(cfg.obuf_entries)]
        acc = [select(s1_out, [obuf[e][b] for e in range(cfg.obuf_entries)]) for b in range(B)]

        def lanes(word):
            return [word[16 * i:16 * (i + 1)] for i in range(LANES)]

        # operand registers: loaded mid-stage-1 for a MAC only (module docstring)
        gated_fall_domain(m, "mac_op", s1_mac)
        op_x = Signal(WORD_BITS, name="op_gbuf")
        op_w = [Signal(WORD_BITS, name=f"op_bank{b}") for b in range(B)]
        op_acc = [Signal(32, name=f"op_acc{b}") for b in range(B)]
        m.d.mac_op += [op_x.eq(gbuf_r.data), *(op_w[b].eq(bank_data[b]) for b in range(B)),
                       *(op_acc[b].eq(acc[b]) for b in range(B))]
        mac_out = [mac_tree(m, lanes(op_w[b]), lanes(op_x), op_acc[b], name=f"mac{b}")
                   for b in range(B)]
        rd_out_word = Cat(*[f32_to_bf16(m, acc[b], name=f"rdout{b}") for b in range(B)],
                          Const(0, 16 * (LANES - B)))
        for e in range(cfg.obuf_entries):
            with m.If(s1_out == e):
                for b in range(B):
                    with m.If(s1_mac):
                        m.d.sync += obuf[e][b].eq(mac_out[b])
                    with m.If(s1_rd_out):
                        m.d.sync += obuf[e][b].eq(0)
        m.d.comb += [
            self.rbeat_valid.eq(s1_rd_out | s1_rd),
            self.rbeat.eq(Mux(s1_rd_out, rd_out_word, select(s1_bank, bank_data))),
        ]
        return m


