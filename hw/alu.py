"""The JIT-Q ALU channel (DESIGN.md §2.6): banks, one SIMD ALU per two
banks, and the in-order controller.

The specification is ``golden.alu.AluChannel`` (its docstring lists the
commands, the stream and bank rules); this module implements it cycle for
cycle. Structure::

    cmd ──► cmd FIFO ──► check ──► controller (in order, implicit PRE/ACT,
    wdata ─► wdata FIFO ──────────┘   the device rules, refresh) ─► trace
                                   issue (c)
        banks: sync read ports addressed in c; RD beat and LD result in c + 1
        ALU ops: registers read in c, written at the end of c

Every ALU is the same datapath on its own registers, counters and banks;
a command drives them all (broadcast).
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, wiring

from golden.alu import AluConfig
from golden.isa import (
    ALU_COMMAND_FIELDS,
    ALU_FUNCTIONS,
    ALU_REGS,
    FIELDS,
    LANES,
    REFRESH_ID,
    WORD_BITS,
    AluAdd,
    AluCmp,
    AluLogic,
    AluMax,
    AluMov,
    AluShift,
    ErrorCode,
    Opcode,
    layout_widths,
)
from hw.banks import bank_timing, choose, issued
from hw.streams import ID_BITS, stream_fifos, stream_ports
from hw.util import select

AluCommandLayout = data.StructLayout(layout_widths(ALU_COMMAND_FIELDS))
MASK16 = 0xFFFF


def _lanes(word):
    return [word[16 * i:16 * (i + 1)] for i in range(LANES)]


class AluChannel(wiring.Component):
    """Members: ``cmd`` (ALU command stream, ``golden.isa.ALU_COMMAND_FIELDS``),
    ``wdata`` / ``rdata`` (one 32 B beat per WR / RD), ``trace`` (every
    issued command and implicit PRE/ACT: ID, opcode, cycle; cannot stall),
    ``status`` / ``err_clear`` (sticky first error, count), ``cycle``."""

    def __init__(self, config: AluConfig):
        if not isinstance(config, AluConfig):
            raise TypeError(f"config must be an AluConfig, not {config!r}")
        self.config = config
        super().__init__(stream_ports(AluCommandLayout))

    def elaborate(self, platform):
        cfg, tm = self.config, self.config.timing
        B = cfg.banks
        m = Module()
        cmd_fifo, wdata_fifo, rdata_fifo = stream_fifos(m, self, AluCommandLayout.size,
                                                        WORD_BITS)
        next_id = Signal(ID_BITS)
        with m.If(cmd_fifo.r_en):
            m.d.sync += next_id.eq(next_id + 1)

        # ---- decode and check (golden.alu.AluChannel.check) -------------
        head = data.View(AluCommandLayout, cmd_fifo.r_data)
        is_rd, is_wr = head.opcode == Opcode.RD, head.opcode == Opcode.WR
        fn_ok = Signal()
        for op, fns in ALU_FUNCTIONS.items():
            with m.If(head.opcode == op):
                m.d.comb += fn_ok.eq(Cat(head.alu_fn == f for f in fns).any())
        is_mem = (head.opcode == Opcode.ALU_MOV) & ((head.alu_fn == AluMov.LD) |
                                                    (head.alu_fn == AluMov.ST))
        is_ld = (head.opcode == Opcode.ALU_MOV) & (head.alu_fn == AluMov.LD)
        is_st = (head.opcode == Opcode.ALU_MOV) & (head.alu_fn == AluMov.ST)
        host = is_rd | is_wr
        err = Signal(FIELDS["err_code"].width)
        with m.If(host & (head.bank >= B)):
            m.d.comb += err.eq(ErrorCode.BANK_RANGE)
        with m.Elif(~host & ~fn_ok):
            m.d.comb += err.eq(ErrorCode.BAD_OPCODE)
        with m.Elif(is_mem & (head.bank > 1)):
            m.d.comb += err.eq(ErrorCode.BANK_RANGE)
        with m.Elif((host | is_mem) & (head.row >= cfg.rows)):
            m.d.comb += err.eq(ErrorCode.ROW_RANGE)
        with m.Elif((host | is_mem) & (head.col >= cfg.cols)):
            m.d.comb += err.eq(ErrorCode.COL_RANGE)

        # ---- banks: open rows and timing (hw.banks.BankTiming) -------------
        parity = [Const(sum(1 << b for b in range(s, B, 2)), B) for s in (0, 1)]
        onehot = Signal(B)
        m.d.comb += onehot.eq(Const(1, B) << head.bank[:max(1, (B - 1).bit_length())])
        touched = Signal(B)
        m.d.comb += touched.eq(Mux(is_mem, Mux(head.bank[0], parity[1], parity[0]),
                                   Mux(host, onehot, 0)))
        banks = bank_timing(m, "banks", B, cfg.rows, tm, head.row, touched, is_mem,
                            is_wr | is_st, ccd_every_column=True, bank_groups=cfg.bank_groups)

        outstanding = Signal(range(cfg.rdata_depth + 1))
        credit = outstanding < cfg.rdata_depth
        data_ok = (~is_wr | wdata_fifo.r_rdy) & (~is_rd | credit)
        do_pre, do_act, do_col, do_drop, do_ref = (Signal(name=n) for n in (
            "do_pre", "do_act", "do_col", "do_drop", "do_ref"))
        refresh = tm.t_refi > 0  # a due refresh has the bus until its REF
        if refresh:
            with m.If(banks.ref_pending):
                banks.refresh(m, Signal(name="no_mode"), do_pre, do_ref)
        with m.If(cmd_fifo.r_rdy):
            with m.If(err != 0):
                m.d.comb += do_drop.eq(~is_wr | wdata_fifo.r_rdy)
            with (m.Elif(~banks.ref_pending) if refresh else m.Else()):
                choose(m, banks, do_pre, do_act, do_col, data_ok)
        issued(m, banks, do_pre, do_act, do_col, do_ref=do_ref)
        pop = do_col | do_drop
        m.d.comb += [cmd_fifo.r_en.eq(pop), wdata_fifo.r_en.eq(pop & is_wr)]

        # ---- trace, credits, status --------------------------------------
        cmd_id = Mux(banks.ref_pending, REFRESH_ID, next_id) if refresh else next_id
        m.d.comb += [
            self.trace.valid.eq(do_pre | do_act | do_col | do_ref),
            self.trace.payload.cmd_id.eq(cmd_id),
            self.trace.payload.opcode.eq(Mux(do_pre, Opcode.PRE, Mux(do_act, Opcode.ACT, Mux(
                do_ref, Opcode.REF, head.opcode)))),
            self.trace.payload.cycle.eq(self.cycle),
        ]
        read_pop = rdata_fifo.r_en & rdata_fifo.r_rdy
        m.d.sync += outstanding.eq(outstanding + (do_col & is_rd) - read_pop)
        with m.If(self.err_clear):
            m.d.sync += [self.status.err_code.eq(0), self.status.err_count.eq(0)]
        with m.Elif(do_drop):
            with m.If(self.status.err_code == ErrorCode.NONE):
                m.d.sync += [self.status.err_code.eq(err), self.status.err_id.eq(next_id)]
            with m.If(self.status.err_count != (1 << FIELDS["err_count"].width) - 1):
                m.d.sync += self.status.err_count.eq(self.status.err_count + 1)

        self._datapath(m, head, do_col, is_rd, is_wr, is_ld, is_st, wdata_fifo, rdata_fifo)
        return m

    def _datapath(self, m, head, do_col, is_rd, is_wr, is_ld, is_st, wdata_fifo, rdata_fifo):
        cfg = self.config
        B, P = cfg.banks, cfg.pairs
        addr = Signal(range(max(2, cfg.rows * cfg.cols)))
        m.d.comb += addr.eq(head.row * cfg.cols + head.col)
        regs = [[Signal(WORD_BITS, name=f"alu{a}_r{r}") for r in range(ALU_REGS)]
                for a in range(P)]
        counters = [[Signal(16, name=f"alu{a}_cnt{i}") for i in range(LANES)] for a in range(P)]
        # Selections go through named signals: an expression used in many
        # places would otherwise be emitted once per use.
        src_a = [Signal(WORD_BITS, name=f"alu{a}_a") for a in range(P)]
        src_b = [Signal(WORD_BITS, name=f"alu{a}_b") for a in range(P)]
        for a in range(P):
            m.d.comb += [src_a[a].eq(select(head.src_reg, regs[a])),
                         src_b[a].eq(Mux(head.use_imm, Cat(*[head.imm] * LANES),
                                         select(head.src2_reg, regs[a])))]

        bank_data = []
        for b in range(B):
            a, s = divmod(b, 2)
            mem = memory.Memory(shape=WORD_BITS, depth=cfg.rows * cfg.cols, init=[])
            m.submodules[f"bank{b}"] = mem
            w, r = mem.write_port(), mem.read_port()
            st_here = is_st & (head.bank[0] == s)
            m.d.comb += [
                w.addr.eq(addr), r.addr.eq(addr),
                w.data.eq(Mux(is_wr, wdata_fifo.r_data, src_a[a])),
                w.en.eq(do_col & ((is_wr & (head.bank == b)) | st_here)),
                r.en.eq(do_col & ((is_rd & (head.bank == b)) | (is_ld & (head.bank[0] == s)))),
            ]
            bank_data.append(r.data)

        # stage 1: the read ports deliver (RD beat; LD into the register)
        s1_rd, s1_ld = Signal(), Signal()
        s1_bank = Signal(range(max(2, B)))
        s1_sel = Signal()
        s1_dst = Signal(range(ALU_REGS))
        m.d.sync += [s1_rd.eq(do_col & is_rd), s1_ld.eq(do_col & is_ld)]
        with m.If(do_col):
            m.d.sync += [s1_bank.eq(head.bank), s1_sel.eq(head.bank[0]), s1_dst.eq(head.dst_reg)]
        ld_data = [Signal(WORD_BITS, name=f"alu{a}_ld") for a in range(P)]
        m.d.comb += [rdata_fifo.w_en.eq(s1_rd), rdata_fifo.w_data.eq(select(s1_bank, bank_data)),
                     *[ld_data[a].eq(Mux(s1_sel, bank_data[2 * a + 1], bank_data[2 * a]))
                       for a in range(P)]]

        # the ALU operation, read and written in the issue cycle
        is_alu = do_col & ~is_rd & ~is_wr & ~is_ld & ~is_st
        op, fn = head.opcode, head.alu_fn
        imm = head.imm
        reg_write = Signal()
        m.d.comb += reg_write.eq(is_alu & ~((op == Opcode.ALU_MOV) & (fn == AluMov.SETCNT)))
        big = Signal()
        m.d.comb += big.eq(imm >= 16)
        for a in range(P):
            a_lanes, b_lanes = _lanes(src_a[a]), _lanes(src_b[a])
            out, new_cnt = [], []
            for i in range(LANES):
                x, y, cnt = a_lanes[i], b_lanes[i], counters[a][i]
                r = Signal(16, name=f"alu{a}_res{i}")
                c = Signal(16, name=f"alu{a}_newcnt{i}")
                rot = Signal(16, name=f"alu{a}_rot{i}")
                m.d.comb += [c.eq(cnt), rot.eq(select(imm[:4], [a_lanes[(i + k) % LANES]
                                                                for k in range(LANES)]))]
                with m.Switch(op):
                    with m.Case(Opcode.ALU_MOV):
                        with m.Switch(fn):
                            with m.Case(AluMov.COPY):
                                m.d.comb += r.eq(x)
                            with m.Case(AluMov.IMM):
                                m.d.comb += r.eq(imm)
                            with m.Case(AluMov.SETCNT):
                                m.d.comb += c.eq(x)
                            with m.Case(AluMov.GETCNT):
                                m.d.comb += r.eq(cnt)
                    with m.Case(Opcode.ALU_ADD):
                        m.d.comb += r.eq(Mux(fn == AluAdd.SUB, x - y, x + y))
                    with m.Case(Opcode.ALU_MUL):
                        m.d.comb += r.eq(x * y)
                    with m.Case(Opcode.ALU_CMP):
                        hit = Mux(fn == AluCmp.LT, x < y, Mux(fn == AluCmp.EQ, x == y,
                                                             Mux(fn == AluCmp.NE, x != y, x > y)))
                        m.d.comb += r.eq(Mux(hit, MASK16, 0))
                    with m.Case(Opcode.ALU_MAX):
                        m.d.comb += r.eq(Mux((x > y) ^ (fn == AluMax.MIN), x, y))
                    with m.Case(Opcode.ALU_LOGIC):
                        m.d.comb += r.eq(Mux(fn == AluLogic.AND, x & y,
                                             Mux(fn == AluLogic.OR, x | y,
                                                 Mux(fn == AluLogic.XOR, x ^ y, x & ~y))))
                    with m.Case(Opcode.ALU_BITSHIFT):
                        with m.Switch(fn):
                            with m.Case(AluShift.SHR):
                                m.d.comb += r.eq(Mux(big, 0, x >> imm[:4]))
                            with m.Case(AluShift.SHL):
                                m.d.comb += r.eq(Mux(big, 0, x << imm[:4]))
                            with m.Case(AluShift.SHR1_MASK):
                                m.d.comb += r.eq(Mux(y != 0, x >> 1, x))
                            with m.Case(AluShift.SHR1_COUNT):
                                m.d.comb += [r.eq(Mux(cnt != 0, x >> 1, x)),
                                             c.eq(Mux(cnt != 0, cnt - 1, cnt))]
                    with m.Case(Opcode.ALU_LANESHIFT):
                        m.d.comb += r.eq(rot)
                out.append(r)
                new_cnt.append(c)
            result = Signal(WORD_BITS, name=f"alu{a}_result")
            m.d.comb += result.eq(Cat(*out))
            for k in range(ALU_REGS):
                with m.If(reg_write & (head.dst_reg == k)):
                    m.d.sync += regs[a][k].eq(result)
                with m.If(s1_ld & (s1_dst == k)):
                    m.d.sync += regs[a][k].eq(ld_data[a])
            with m.If(is_alu):
                m.d.sync += [counters[a][i].eq(new_cnt[i]) for i in range(LANES)]
