"""The PIM module: the HUB (DPA dispatcher, sequencer, multicast, GPR) over
N channels (DESIGN.md §2.1, §2.3; docs/dpa.md).

The specification is ``golden.hub`` (its docstring lists the program
format, the sequencer's address rules, translation, faults and the cycle
timing); this module implements it cycle for cycle. Structure::

    host ──► host FSM ──┬── instruction buffer (memory), commit walk
                        ├── configuration buffer + VA2PA (registers)
                        └── decoder: one FSM walking the program per request,
                             one command per cycle at most
                                 │ translate, range-check (fault → drain)
                                 ▼
                         multicast register ──► channel c cmd / wdata (GPR read)
                                              ◄── channel c rdata ─► GPR write
    rsp ◄── response register

A command stays in the multicast register until every channel in its mask
has taken it (command and, for writes, the beat); each channel takes it on
its own handshake. Read beats come back per channel in issue order; a small
FIFO per channel holds their GPR destinations.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.hub import STEP_MASK_BITS
from golden.isa import (
    CHANNEL_OPCODES,
    FIELDS,
    HOST_FIELDS,
    INSTR_BITS,
    ISA,
    MODI_FIELDS,
    PROGRAM_OPCODES,
    RESPONSE_FIELDS,
    WORD_BITS,
    Fault,
    HostOp,
    HostStatus,
    ModiField,
    Opcode,
    ReqState,
    layout_widths,
)
from hw.channel import Channel
from hw.controller import OpDecode, command_error
from hw.streams import CommandLayout, TraceSignature

HostLayout = data.StructLayout(layout_widths(HOST_FIELDS))
ResponseLayout = data.StructLayout(layout_widths(RESPONSE_FIELDS))
ACC_BITS = 48  # DYN-MODI accumulators and virtual addresses (signed)


def _log2(n):
    assert n & (n - 1) == 0
    return n.bit_length() - 1


class _Decoded:
    """Every field of an instruction word, selected by its opcode's format."""

    def __init__(self, m, word):
        self.opcode = word[:FIELDS["opcode"].width]
        layouts = {op: data.StructLayout(layout_widths(("opcode", *ISA[op].fields)))
                   for op in PROGRAM_OPCODES}
        views = {op: data.View(layout, word[:layout.size]) for op, layout in layouts.items()}
        self.has = {}
        for name in {f for op in PROGRAM_OPCODES for f in ISA[op].fields}:
            value = Signal(FIELDS[name].width, name=f"i_{name}")
            has = Signal(name=f"i_has_{name}")
            expr, present = Const(0, FIELDS[name].width), Const(0)
            for op in PROGRAM_OPCODES:
                if name in ISA[op].fields:
                    expr = Mux(self.opcode == op, views[op][name], expr)
                    present = present | (self.opcode == op)
            m.d.comb += [value.eq(expr), has.eq(present)]
            setattr(self, name, value)
            self.has[name] = has
        self.is_ = {op: self.opcode == op for op in PROGRAM_OPCODES}
        self.channel = Cat(self.opcode == op for op in CHANNEL_OPCODES).any()
        self.known = Cat(self.opcode == op for op in PROGRAM_OPCODES).any()


class PimModule(wiring.Component):
    """HUB + ``n_channels`` channels.

    Members
    -------
    host : In(stream.Signature(HostLayout))
        Host operations (``golden.isa.HostOp``); one at a time: the next is
        accepted after the previous one's response.
    rsp : Out(stream.Signature(ResponseLayout))
        One response per operation (``HostStatus`` and data).
    trace_<c> : Out(TraceSignature)
        Channel ``c``'s issue trace.
    cycle : Out(32)
        Cycle counter since reset (all channels share it).
    dbg_load : Out(1)
        The multicast register loads a command this cycle.
    dbg_cmd, dbg_mask, dbg_discard : Out
        The multicast register: command, channel mask, drain flag.
    dbg_cmd_acc, dbg_wdata_acc, dbg_rdata_pop : Out(n_channels)
        Per channel: command, write beat or read beat handshake this cycle.
    """

    def __init__(self, hub: HubConfig):
        if not isinstance(hub, HubConfig):
            raise TypeError(f"hub must be a HubConfig, not {hub!r}")
        self.hub = hub
        n = hub.n_channels
        members = {
            "host": In(stream.Signature(HostLayout)),
            "rsp": Out(stream.Signature(ResponseLayout)),
            "cycle": Out(FIELDS["cycle"].width),
            "dbg_load": Out(1), "dbg_cmd": Out(CommandLayout), "dbg_mask": Out(n),
            "dbg_discard": Out(1),
            "dbg_cmd_acc": Out(n), "dbg_wdata_acc": Out(n), "dbg_rdata_pop": Out(n),
        }
        members.update({f"trace_{c}": Out(TraceSignature) for c in range(n)})
        super().__init__(members)

    def elaborate(self, platform):
        hub = self.hub
        cfg = hub.channel
        N, R, O = hub.n_channels, hub.requests, cfg.obuf_entries
        LC, LR = _log2(cfg.cols), _log2(hub.chunk_rows)
        all_mask = (1 << N) - 1
        m = Module()

        chans = []
        for c in range(N):
            ch = Channel(cfg)
            m.submodules[f"channel{c}"] = ch
            chans.append(ch)
            wiring.connect(m, wiring.flipped(getattr(self, f"trace_{c}")), ch.trace)
        m.d.comb += self.cycle.eq(chans[0].cycle)

        # ---- storage --------------------------------------------------------
        m.submodules.imem = imem = memory.Memory(shape=INSTR_BITS, depth=hub.instr_depth,
                                                 init=[])
        i_rd, i_wr = imem.read_port(), imem.write_port()
        m.submodules.gpr = gpr = memory.Memory(shape=WORD_BITS, depth=hub.gpr_entries, init=[])
        g_beat, g_host, g_wr = gpr.read_port(), gpr.read_port(), gpr.write_port()

        pc_w = range(hub.instr_depth + 2)
        prog_len = Signal(pc_w)
        prog_fault = Signal(FIELDS["fault"].width)
        tpc = Signal(FIELDS["arg_b"].width)
        # Register arrays are padded to a power of two and indexed by exact-width
        # signals, so every index selects an entry (no incomplete case).
        RW, KW = max(1, _log2_ceil(R)), max(1, _log2_ceil(hub.chunks_per_request))

        def regs(width, name, n=1 << RW):
            return Array(Signal(width, name=f"{name}{r}") for r in range(n))

        st = regs(FIELDS["req_state"].width, "state")
        flt = regs(FIELDS["fault"].width, "fault")
        tcur = regs(FIELDS["t_cur"].width, "t_cur")
        gbase = regs(FIELDS["gpr_base"].width, "gpr_base")
        nch = regs(FIELDS["n_chunks"].width, "n_chunks")
        pch_w = range(max(2, hub.physical_chunks))
        va2pa = Array(regs(pch_w, f"va2pa{r}_", 1 << KW) for r in range(1 << RW))
        dirty = Signal(O)

        # ---- response register ---------------------------------------------
        rsp_load = Signal()
        rsp_code = Signal(FIELDS["rsp_code"].width)
        rsp_data = Signal(WORD_BITS)
        with m.If(rsp_load):
            m.d.sync += [self.rsp.valid.eq(1), self.rsp.payload.rsp_code.eq(rsp_code),
                         self.rsp.payload.data.eq(rsp_data)]
        with m.Elif(self.rsp.ready):
            m.d.sync += self.rsp.valid.eq(0)

        # ---- multicast register ---------------------------------------------
        mc_valid = Signal()
        mc_cmd = Signal(CommandLayout)
        mc_mask = Signal(N)
        mc_gpr = Signal(FIELDS["gpr_addr"].width)
        mc_discard = Signal()
        mc_cmd_taken, mc_w_taken = Signal(N), Signal(N)
        mc_op = OpDecode(m, mc_cmd.opcode, "mc")
        addr_fifos = []
        cmd_acc, w_acc, done = Signal(N), Signal(N), Signal(N)
        depth = cfg.cmd_depth + cfg.io_depth + cfg.compute_depth + cfg.rdata_depth + 4
        for c, ch in enumerate(chans):
            af = fifo.SyncFIFOBuffered(width=len(mc_gpr) + 1, depth=depth)
            m.submodules[f"dest{c}"] = af
            addr_fifos.append(af)
            m.d.comb += [
                ch.cmd.payload.eq(mc_cmd),
                ch.cmd.valid.eq(mc_valid & mc_mask[c] & ~mc_cmd_taken[c]
                                & (~mc_op.read | af.w_rdy)),
                ch.wdata.payload.eq(g_beat.data),
                ch.wdata.valid.eq(mc_valid & mc_mask[c] & mc_op.write & ~mc_w_taken[c]),
                cmd_acc[c].eq(ch.cmd.valid & ch.cmd.ready),
                w_acc[c].eq(ch.wdata.valid & ch.wdata.ready),
                done[c].eq(~mc_mask[c] | ((mc_cmd_taken[c] | cmd_acc[c])
                                          & (~mc_op.write | mc_w_taken[c] | w_acc[c]))),
                af.w_en.eq(cmd_acc[c] & mc_op.read),
                af.w_data.eq(Cat((mc_gpr + c)[:len(mc_gpr)], mc_discard)),
            ]
        mc_free = Signal()
        m.d.comb += [mc_free.eq(~mc_valid | done.all()), self.dbg_cmd_acc.eq(cmd_acc),
                     self.dbg_wdata_acc.eq(w_acc), self.dbg_cmd.eq(mc_cmd),
                     self.dbg_mask.eq(mc_mask), self.dbg_discard.eq(mc_discard)]

        # The decoder pushes into the decoded-command FIFO; the multicast
        # register loads from it (or, in IDLE, a RAW host command directly).
        EntryLayout = data.StructLayout({"cmd": CommandLayout, "mask": N,
                                         "gpr": FIELDS["gpr_addr"].width, "discard": 1})
        m.submodules.decoded = dq = fifo.SyncFIFO(width=EntryLayout.size,
                                                  depth=hub.decode_depth)
        push = Signal()
        pushed = Signal(EntryLayout)
        m.d.comb += [dq.w_en.eq(push), dq.w_data.eq(pushed)]
        with m.If(push & (pushed.cmd.opcode == Opcode.MAC)):
            m.d.sync += dirty.eq(dirty | (1 << pushed.cmd.out_idx[:max(1, _log2_ceil(O))]))
        with m.If(push & (pushed.cmd.opcode == Opcode.RD_OUT)):
            m.d.sync += dirty.eq(dirty & ~(1 << pushed.cmd.out_idx[:max(1, _log2_ceil(O))]))

        raw_load = Signal()
        raw_cmd_l, raw_mask, raw_gpr = (Signal(CommandLayout), Signal(N),
                                        Signal(FIELDS["gpr_addr"].width))
        head = data.View(EntryLayout, dq.r_data)
        load = Signal()
        ld = Signal(EntryLayout)
        m.d.comb += [load.eq(raw_load | (dq.r_rdy & mc_free)), dq.r_en.eq(~raw_load & mc_free),
                     ld.eq(Mux(raw_load, Cat(raw_cmd_l, raw_mask, raw_gpr, Const(0, 1)), head))]
        m.d.comb += [self.dbg_load.eq(load), g_beat.addr.eq(ld.gpr), g_beat.en.eq(load)]
        with m.If(load):
            m.d.sync += [mc_valid.eq(1), mc_cmd.eq(ld.cmd), mc_mask.eq(ld.mask),
                         mc_gpr.eq(ld.gpr), mc_discard.eq(ld.discard), mc_cmd_taken.eq(0),
                         mc_w_taken.eq(0)]
        with m.Elif(mc_valid & done.all()):
            m.d.sync += mc_valid.eq(0)
        with m.Else():
            m.d.sync += [mc_cmd_taken.eq(mc_cmd_taken | cmd_acc), mc_w_taken.eq(mc_w_taken | w_acc)]

        # ---- read beats -> GPR (lowest channel first) -----------------------
        grant = Signal(N)
        pending = Signal()
        m.d.comb += pending.eq(Cat(af.r_rdy for af in addr_fifos).any())
        taken = Const(0)
        for c, (ch, af) in enumerate(zip(chans, addr_fifos, strict=True)):
            m.d.comb += grant[c].eq(ch.rdata.valid & af.r_rdy & ~taken)
            taken = taken | (ch.rdata.valid & af.r_rdy)
            m.d.comb += [ch.rdata.ready.eq(grant[c]), af.r_en.eq(grant[c])]
        m.d.comb += self.dbg_rdata_pop.eq(grant)
        host_gpr_we = Signal()
        host_gpr_addr = Signal(FIELDS["gpr_addr"].width)
        with m.If(grant.any()):
            for c in reversed(range(N)):
                with m.If(grant[c]):
                    head = addr_fifos[c].r_data
                    m.d.comb += [g_wr.addr.eq(head[:len(mc_gpr)]),
                                 g_wr.data.eq(chans[c].rdata.payload),
                                 g_wr.en.eq(~head[len(mc_gpr)])]
        with m.Else():
            m.d.comb += [g_wr.addr.eq(host_gpr_addr), g_wr.data.eq(self.host.payload.data),
                         g_wr.en.eq(host_gpr_we)]

        # ---- decoder state ------------------------------------------------------
        cur = _Decoded(m, i_rd.data)
        iaddr = Signal(pc_w)
        m.d.comb += [i_rd.addr.eq(iaddr), i_rd.en.eq(1)]
        pc = Signal(pc_w)
        req = Signal(RW)
        u = Signal(FIELDS["op_size"].width)
        in_loop, header, body_instr, start_set = Signal(), Signal(), Signal(), Signal()
        loop_end, body0, body_start = Signal(pc_w), Signal(pc_w), Signal(pc_w)
        t_div = Signal(FIELDS["t_div"].width)
        tok = Signal(FIELDS["t_cur"].width + FIELDS["t_div"].width)
        M = hub.max_modis
        n_modis = Signal(range(M + 1))
        mv = Signal(M)
        mtarget = [Signal(pc_w, name=f"modi_target{j}") for j in range(M)]
        mfield = [Signal(FIELDS["field_sel"].width, name=f"modi_field{j}") for j in range(M)]
        mstride = [Signal(signed(ACC_BITS), name=f"modi_stride{j}") for j in range(M)]
        macc = [Signal(signed(ACC_BITS), name=f"modi_acc{j}") for j in range(M)]
        ran, faulted = Signal(R), Signal(R)
        is_step = Signal()
        o_idx = Signal(range(max(O, 2)))

        # ---- the command of (cur, u) ---------------------------------------------
        def mod_sum(fields):
            total = Const(0, signed(ACC_BITS))
            for j in range(M):
                hit = mv[j] & (mtarget[j] == pc) & Cat(mfield[j] == f for f in fields).any()
                total = total + Mux(hit, macc[j], 0)
            return total

        op_is = cur.is_
        uses_va = op_is[Opcode.MAC] | op_is[Opcode.RD] | op_is[Opcode.WR]
        is_read = op_is[Opcode.RD_OUT] | op_is[Opcode.RD]
        is_write = op_is[Opcode.WR_INP] | op_is[Opcode.WR]
        uses_gbuf = op_is[Opcode.WR_INP] | op_is[Opcode.MAC]
        uses_out = op_is[Opcode.MAC] | op_is[Opcode.RD_OUT]
        va = Signal(signed(ACC_BITS))
        gb = Signal(signed(ACC_BITS))
        ob = Signal(signed(ACC_BITS))
        gp = Signal(signed(ACC_BITS))
        m.d.comb += [
            va.eq((cur.row << LC) + cur.col + mod_sum((ModiField.ROW, ModiField.COL))
                  + Mux(uses_va, u, 0)),
            gb.eq(cur.gbuf_idx + mod_sum((ModiField.GBUF_IDX,)) + Mux(uses_gbuf, u, 0)),
            ob.eq(cur.out_idx + mod_sum((ModiField.OUT_IDX,)) + Mux(op_is[Opcode.RD_OUT], u, 0)),
            gp.eq(gbase[req] + cur.gpr_addr + mod_sum((ModiField.GPR_ADDR,))
                  + Mux(is_read, u * N, Mux(is_write, u, 0))),
        ]
        vchunk = Signal(ACC_BITS)
        m.d.comb += vchunk.eq(va.as_unsigned() >> (LC + LR))
        mapped = Signal()
        m.d.comb += mapped.eq((va >= 0) & (vchunk < nch[req]))
        pchunk = Signal(pch_w)
        m.d.comb += pchunk.eq(va2pa[req][vchunk[:KW]])
        prow = Signal(FIELDS["row"].width)
        m.d.comb += prow.eq((pchunk << LR) | (va.as_unsigned() >> LC)[:LR] if LR else pchunk)

        def in_range(v, limit):
            return (v >= 0) & (v < limit)

        ranged = Signal()
        last_gp = gp + Mux(is_read, N - 1, 0)
        m.d.comb += ranged.eq((~uses_gbuf | in_range(gb, cfg.gbuf_entries))
                              & (~uses_out | in_range(ob, O))
                              & in_range(gp, hub.gpr_entries) & in_range(last_gp, hub.gpr_entries))
        cmd_fault = Signal(FIELDS["fault"].width)
        with m.If(uses_va & ~mapped):
            m.d.comb += cmd_fault.eq(Fault.UNMAPPED)
        with m.Elif(~ranged):
            m.d.comb += cmd_fault.eq(Fault.CMD_RANGE)
        cmd = Signal(CommandLayout)
        m.d.comb += [
            cmd.opcode.eq(cur.opcode),
            cmd.bank.eq(Mux(op_is[Opcode.RD] | op_is[Opcode.WR], cur.bank, 0)),
            cmd.row.eq(Mux(uses_va, prow, 0)),
            cmd.col.eq(Mux(uses_va, va[:LC], 0)),
            cmd.gbuf_idx.eq(Mux(uses_gbuf, gb, 0)),
            cmd.out_idx.eq(Mux(uses_out, ob, 0)),
        ]
        op_size = Signal(FIELDS["op_size"].width + 1)
        m.d.comb += op_size.eq(Mux(cur.has["op_size"], cur.op_size, 1))

        # ---- the commit walk's checks of word ``pc`` -----------------------------
        v_err, v_code = Signal(), Signal(FIELDS["fault"].width)
        eff_loop = Signal()
        m.d.comb += eff_loop.eq(in_loop & (pc != loop_end))
        target_abs = Signal(pc_w)
        m.d.comb += target_abs.eq(body0 + cur.target)
        modi_bad_field = Signal()
        for j in range(M):
            bad_for_op = Const(1)
            for fsel, ops in MODI_FIELDS.items():
                allowed = Cat(cur.opcode == o for o in ops).any()
                bad_for_op = Mux(mfield[j] == fsel, ~allowed, bad_for_op)
            with m.If(mv[j] & (mtarget[j] == pc) & bad_for_op):
                m.d.comb += modi_bad_field.eq(1)
        modi_at_me = Cat(mv[j] & (mtarget[j] == pc) for j in range(M)).any()

        def fail(code):
            m.d.comb += [v_err.eq(1), v_code.eq(code)]

        with m.If(in_loop & (pc == loop_end) & ~body_instr):
            fail(Fault.BAD_LOOP)
        with m.Elif(~cur.known):
            fail(Fault.BAD_OPCODE)
        with m.Elif(op_is[Opcode.DYN_LOOP]):
            with m.If(eff_loop):
                fail(Fault.BAD_LOOP)
            with m.Elif((cur.body_len == 0) | (cur.t_div == 0)):
                fail(Fault.BAD_LOOP)
        with m.Elif(op_is[Opcode.DYN_MODI]):
            with m.If(~eff_loop | ~header):
                fail(Fault.BAD_LOOP)
            with m.Elif(n_modis == M):
                fail(Fault.BAD_LOOP)
            with m.Elif(modi_at_me):
                fail(Fault.BAD_FIELD)
            with m.Elif(cur.field_sel > max(ModiField)):
                fail(Fault.BAD_FIELD)
            with m.Elif((target_abs >= loop_end) | (target_abs <= pc)):
                fail(Fault.BAD_FIELD)
        with m.Else():
            with m.If(modi_bad_field):
                fail(Fault.BAD_FIELD)
            with m.Elif((cur.ch_mask == 0) | ((cur.ch_mask >> N) != 0)):
                fail(Fault.BAD_FIELD)
            with m.Elif(cur.has["op_size"] & (cur.op_size == 0)):
                fail(Fault.BAD_FIELD)
            with m.Elif((op_is[Opcode.RD] | op_is[Opcode.WR]) & (cur.bank >= cfg.banks)):
                fail(Fault.BAD_FIELD)

        def latch_modi(j_sig):
            stride = cur.stride.as_signed()
            scaled = Mux(cur.field_sel == ModiField.ROW, stride << LC, stride)
            for j in range(M):
                with m.If(j_sig == j):
                    m.d.sync += [mv[j].eq(1), mtarget[j].eq(target_abs),
                                 mfield[j].eq(cur.field_sel), mstride[j].eq(scaled),
                                 macc[j].eq(0)]
            m.d.sync += n_modis.eq(n_modis + 1)

        def open_loop():
            m.d.sync += [in_loop.eq(1), loop_end.eq(pc + 1 + cur.body_len), header.eq(1),
                         body_instr.eq(0), body0.eq(pc + 1), n_modis.eq(0), mv.eq(0),
                         start_set.eq(0), t_div.eq(cur.t_div), tok.eq(0)]

        # ---- host FSM + decoder ------------------------------------------------------
        hp = self.host.payload
        raw_cmd = data.View(CommandLayout, hp.data[:CommandLayout.size])
        raw_op = OpDecode(m, raw_cmd.opcode, "raw")
        raw_err = command_error(m, cfg, raw_cmd, raw_op, "raw_err")
        raw_read = raw_op.read
        hr = hp.req_id[:RW]
        req_ok = hp.req_id < R

        def respond(code, value=0):
            m.d.comb += [rsp_load.eq(1), rsp_code.eq(code), rsp_data.eq(value)]

        def next_request(r_next):
            with m.If(r_next < R):
                m.d.sync += req.eq(r_next[:RW])
                m.next = "REQ"
            with m.Else():
                m.next = "DRAIN"

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.host.ready.eq(~self.rsp.valid)
                with m.If(self.host.valid & self.host.ready):
                    with m.Switch(hp.host_op):
                        with m.Case(HostOp.PROG_WRITE):
                            with m.If(hp.arg_a < hub.instr_depth):
                                m.d.comb += [i_wr.addr.eq(hp.arg_a), i_wr.data.eq(hp.data),
                                             i_wr.en.eq(1)]
                                m.d.sync += [prog_len.eq(0), prog_fault.eq(0)]
                                respond(HostStatus.OK)
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.PROG_COMMIT):
                            with m.If((hp.arg_a <= hub.instr_depth) & (hp.arg_b != 0)):
                                m.d.sync += [prog_len.eq(hp.arg_a), tpc.eq(hp.arg_b),
                                             prog_fault.eq(0), pc.eq(0), in_loop.eq(0),
                                             header.eq(0), n_modis.eq(0), mv.eq(0)]
                                m.d.comb += iaddr.eq(0)
                                m.next = "COMMIT"
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.GPR_WRITE):
                            with m.If(hp.arg_a < hub.gpr_entries):
                                m.d.comb += [host_gpr_we.eq(1), host_gpr_addr.eq(hp.arg_a)]
                                respond(HostStatus.OK)
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.GPR_READ):
                            with m.If(hp.arg_a < hub.gpr_entries):
                                m.d.comb += [g_host.addr.eq(hp.arg_a), g_host.en.eq(1)]
                                m.next = "GPR_RSP"
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.ASSIGN):
                            with m.If(req_ok & (st[hr] == ReqState.FREE)
                                      & (hp.arg_b < hub.gpr_entries)):
                                m.d.sync += [st[hr].eq(ReqState.ACTIVE), flt[hr].eq(0),
                                             tcur[hr].eq(hp.arg_a), gbase[hr].eq(hp.arg_b),
                                             nch[hr].eq(0)]
                                respond(HostStatus.OK)
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.GROW):
                            with m.If(~req_ok | (st[hr] == ReqState.FREE)
                                      | (hp.arg_a >= hub.physical_chunks)):
                                respond(HostStatus.BAD_ARG)
                            with m.Elif(nch[hr] == hub.chunks_per_request):
                                m.d.sync += [st[hr].eq(ReqState.FAULTED),
                                             flt[hr].eq(Fault.TABLE_FULL)]
                                respond(HostStatus.FAULT, Fault.TABLE_FULL)
                            with m.Else():
                                m.d.sync += [va2pa[hr][nch[hr][:KW]].eq(hp.arg_a),
                                             nch[hr].eq(nch[hr] + 1)]
                                respond(HostStatus.OK)
                        with m.Case(HostOp.RELEASE):
                            with m.If(req_ok):
                                m.d.sync += [st[hr].eq(ReqState.FREE), flt[hr].eq(0),
                                             tcur[hr].eq(0), gbase[hr].eq(0), nch[hr].eq(0)]
                                respond(HostStatus.OK)
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.STATUS):
                            with m.If(req_ok):
                                respond(HostStatus.OK, Cat(st[hr], flt[hr], tcur[hr], nch[hr]))
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.CLEAR):
                            with m.If(req_ok):
                                with m.If(st[hr] == ReqState.FAULTED):
                                    m.d.sync += [st[hr].eq(ReqState.ACTIVE), flt[hr].eq(0)]
                                respond(HostStatus.OK)
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Case(HostOp.STEP):
                            m.d.sync += [req.eq(0), ran.eq(0), faulted.eq(0), is_step.eq(1)]
                            m.next = "REQ"
                        with m.Case(HostOp.RAW):
                            gpr_top = hp.arg_b + Mux(raw_read, N - 1, 0)
                            with m.If((raw_err == 0) & (hp.arg_a != 0) & ((hp.arg_a >> N) == 0)
                                      & (gpr_top < hub.gpr_entries)):
                                m.d.comb += [raw_load.eq(1), raw_cmd_l.eq(raw_cmd),
                                             raw_mask.eq(hp.arg_a), raw_gpr.eq(hp.arg_b)]
                                m.d.sync += is_step.eq(0)
                                m.next = "DRAIN"
                            with m.Else():
                                respond(HostStatus.BAD_ARG)
                        with m.Default():
                            respond(HostStatus.BAD_OP)

            with m.State("GPR_RSP"):
                respond(HostStatus.OK, g_host.data)
                m.next = "IDLE"

            with m.State("COMMIT"):  # one word per cycle: cur = word pc
                with m.If(pc == prog_len):
                    with m.If(in_loop & ((loop_end > prog_len) | ~body_instr)):
                        m.d.sync += prog_fault.eq(Fault.BAD_LOOP)
                        respond(HostStatus.FAULT, Cat(Const(Fault.BAD_LOOP, 8), pc))
                    with m.Else():
                        respond(HostStatus.OK)
                    m.next = "IDLE"
                with m.Elif(v_err):
                    m.d.sync += prog_fault.eq(v_code)
                    respond(HostStatus.FAULT, Cat(v_code, Const(0, 8 - len(v_code)), pc))
                    m.next = "IDLE"
                with m.Else():
                    with m.If(in_loop & (pc == loop_end)):
                        m.d.sync += in_loop.eq(0)
                    with m.If(op_is[Opcode.DYN_LOOP]):
                        open_loop()
                    with m.Elif(op_is[Opcode.DYN_MODI]):
                        latch_modi(n_modis)
                    with m.Else():
                        m.d.sync += header.eq(0)
                        with m.If(eff_loop):
                            m.d.sync += body_instr.eq(1)
                    m.d.sync += pc.eq(pc + 1)
                    m.d.comb += iaddr.eq(pc + 1)

            with m.State("REQ"):
                with m.If(st[req] != ReqState.ACTIVE):
                    next_request(req + 1)
                with m.Elif(prog_fault != 0):
                    m.d.sync += [st[req].eq(ReqState.FAULTED), flt[req].eq(prog_fault),
                                 faulted.eq(faulted | (1 << req))]
                    next_request(req + 1)
                with m.Elif(tcur[req] > nch[req] * tpc):
                    m.d.sync += [st[req].eq(ReqState.FAULTED), flt[req].eq(Fault.T_RANGE),
                                 faulted.eq(faulted | (1 << req))]
                    next_request(req + 1)
                with m.Else():
                    m.d.sync += ran.eq(ran | (1 << req))
                    with m.If(prog_len == 0):
                        next_request(req + 1)
                    with m.Else():
                        m.d.sync += [pc.eq(0), u.eq(0), in_loop.eq(0), mv.eq(0)]
                        m.d.comb += iaddr.eq(0)
                        m.next = "RUN"

            with m.State("RUN"):  # cur = word pc
                nxt = Signal(pc_w)
                advance = Signal()
                m.d.comb += [nxt.eq(pc + 1), iaddr.eq(pc)]
                with m.If(op_is[Opcode.DYN_LOOP]):
                    with m.If(tcur[req] > 0):
                        open_loop()
                    with m.Else():
                        m.d.comb += nxt.eq(pc + 1 + cur.body_len)
                    m.d.comb += advance.eq(1)
                with m.Elif(op_is[Opcode.DYN_MODI]):
                    latch_modi(n_modis)
                    m.d.comb += advance.eq(1)
                with m.Elif(cmd_fault != 0):
                    m.d.sync += [st[req].eq(ReqState.FAULTED), flt[req].eq(cmd_fault),
                                 faulted.eq(faulted | (1 << req)), ran.eq(ran & ~(1 << req)),
                                 o_idx.eq(0)]
                    m.next = "SCRUB"
                with m.Elif(dq.w_rdy):
                    m.d.comb += [push.eq(1), pushed.cmd.eq(cmd), pushed.mask.eq(cur.ch_mask),
                                 pushed.gpr.eq(gp)]
                    start = Mux(start_set, body_start, pc)
                    with m.If(in_loop & ~start_set):
                        m.d.sync += [start_set.eq(1), body_start.eq(pc)]
                    with m.If(u + 1 == op_size):
                        m.d.sync += u.eq(0)
                        m.d.comb += advance.eq(1)
                        with m.If(in_loop & (pc + 1 == loop_end)):
                            tok_next = tok + t_div
                            m.d.sync += tok.eq(tok_next)
                            for j in range(M):
                                m.d.sync += macc[j].eq(macc[j] + mstride[j])
                            with m.If(tok_next < tcur[req]):
                                m.d.comb += nxt.eq(start)
                            with m.Else():
                                m.d.sync += [in_loop.eq(0), mv.eq(0)]
                    with m.Else():
                        m.d.sync += u.eq(u + 1)
                with m.If(advance):
                    m.d.sync += pc.eq(nxt)
                    m.d.comb += iaddr.eq(nxt)
                    with m.If(nxt == prog_len):
                        next_request(req + 1)

            with m.State("SCRUB"):
                last = o_idx == O - 1
                with m.If(dirty.bit_select(o_idx, 1)):
                    with m.If(dq.w_rdy):
                        m.d.comb += [push.eq(1), pushed.cmd.opcode.eq(Opcode.RD_OUT),
                                     pushed.cmd.out_idx.eq(o_idx), pushed.mask.eq(all_mask),
                                     pushed.discard.eq(1)]
                        m.d.sync += o_idx.eq(o_idx + 1)
                        with m.If(last):
                            next_request(req + 1)
                with m.Else():
                    m.d.sync += o_idx.eq(o_idx + 1)
                    with m.If(last):
                        next_request(req + 1)

            with m.State("DRAIN"):
                with m.If(~mc_valid & ~pending & ~dq.r_rdy):
                    with m.If(is_step):
                        for r in range(R):
                            with m.If(ran[r]):
                                m.d.sync += tcur[r].eq(tcur[r] + 1)
                        respond(HostStatus.OK, Cat(ran, Const(0, STEP_MASK_BITS - R), faulted))
                    with m.Else():
                        respond(HostStatus.OK)
                    m.next = "IDLE"
        return m


def _log2_ceil(n):
    return max(0, (n - 1).bit_length())
