"""The HUB's decoder (specification: ``golden.hub``: ``check_program`` and
``_Walk``): one FSM that walks the committed program, once to check it
(PROG-COMMIT) and, in a STEP, once per active request.

Dyn-Loop repeats its body T_cur / t_div times; Dyn-Modi offsets one field
of one body word per iteration (``_Loop``); the sequencer
(``hw/hub/sequencer.py``) expands Op-size and translates every virtual
address through the request's VA2PA table; the decoded commands go into the
decoded-command FIFO, one per cycle at most. A command that faults stops
its request, and the decoder then drains every OBuf entry a MAC has
written and no RD-OUT has read (SCRUB: an RD-OUT to every channel whose
beats are dropped), so the next request starts on clean OBufs.

An EPU instruction (a HUB built with an EPU) is range-checked when the
decoder reaches it (CMD_RANGE faults its request as a command would);
the decoder then waits (EPU_WAIT) until the decoded-command FIFO is empty,
the multicast register free and every read beat in the GPR (``settled``),
starts the EPU and holds until its last cycle (EPU_RUN)."""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.hub import COMMIT_INDEX_SHIFT
from golden.isa import (
    FIELDS,
    MODI_FIELDS,
    Fault,
    HostStatus,
    ModiField,
    Opcode,
    ReqState,
    program_opcodes,
)
from hw.hub.epu import padded_words, score_words
from hw.hub.ports import (
    ACC_BITS,
    FAULT_BITS,
    Sizes,
    decoder_control,
    entry_layout,
    epu_port,
    log2,
    log2_ceil,
    program_port,
    request_port,
)
from hw.hub.sequencer import Decoded, Sequencer


class _Loop:
    """The Dyn-Loop and Dyn-Modi state while the decoder walks ``pc``: the
    open loop (end, first body word, first command word, t_div, tokens
    done) and up to ``max_modis`` DYN-MODI entries (target word, field,
    stride, accumulated offset)."""

    def __init__(self, hub: HubConfig, pc_w):
        M = self.M = hub.max_modis
        self.cols_log2 = log2(hub.channel.cols)
        self.open, self.header, self.body_instr, self.start_set = (
            Signal(name="in_loop"), Signal(name="header"), Signal(name="body_instr"),
            Signal(name="start_set"))
        self.end, self.body0, self.start = (Signal(pc_w, name="loop_end"),
                                            Signal(pc_w, name="body0"),
                                            Signal(pc_w, name="body_start"))
        self.t_div = Signal(FIELDS["t_div"].width, name="t_div")
        self.tok = Signal(FIELDS["t_cur"].width + FIELDS["t_div"].width, name="tok")
        self.n_modis = Signal(range(M + 1), name="n_modis")
        self.mv = Signal(M, name="mv")
        self.target = [Signal(pc_w, name=f"modi_target{j}") for j in range(M)]
        self.field = [Signal(FIELDS["field_sel"].width, name=f"modi_field{j}") for j in range(M)]
        self.stride = [Signal(signed(ACC_BITS), name=f"modi_stride{j}") for j in range(M)]
        self.acc = [Signal(signed(ACC_BITS), name=f"modi_acc{j}") for j in range(M)]

    def reset(self):
        return [self.open.eq(0), self.header.eq(0), self.n_modis.eq(0), self.mv.eq(0)]

    def mod_sum(self, pc, fields):
        """The accumulated offsets of the DYN-MODI entries on word ``pc``
        and one of ``fields``."""
        total = Const(0, signed(ACC_BITS))
        for j in range(self.M):
            hit = (self.mv[j] & (self.target[j] == pc)
                   & Cat(self.field[j] == f for f in fields).any())
            total = total + Mux(hit, self.acc[j], 0)
        return total

    def at(self, pc):
        return Cat(self.mv[j] & (self.target[j] == pc) for j in range(self.M)).any()

    def open_at(self, m, pc, cur):
        m.d.sync += [self.open.eq(1), self.end.eq(pc + 1 + cur.body_len), self.header.eq(1),
                     self.body_instr.eq(0), self.body0.eq(pc + 1), self.n_modis.eq(0),
                     self.mv.eq(0), self.start_set.eq(0), self.t_div.eq(cur.t_div),
                     self.tok.eq(0)]

    def target_of(self, cur):
        """The absolute word a DYN-MODI ``cur`` targets."""
        return self.body0 + cur.target

    def latch_modi(self, m, cur):
        stride = cur.stride.as_signed()
        scaled = Mux(cur.field_sel == ModiField.ROW, stride << self.cols_log2, stride)
        target = self.target_of(cur)
        for j in range(self.M):
            with m.If(self.n_modis == j):
                m.d.sync += [self.mv[j].eq(1), self.target[j].eq(target),
                             self.field[j].eq(cur.field_sel), self.stride[j].eq(scaled),
                             self.acc[j].eq(0)]
        m.d.sync += self.n_modis.eq(self.n_modis + 1)

    def iterate(self, m):
        """The body's last word is done: one more t_div tokens."""
        m.d.sync += [self.acc[j].eq(self.acc[j] + self.stride[j]) for j in range(self.M)]
        tok_next = self.tok + self.t_div
        m.d.sync += self.tok.eq(tok_next)
        return tok_next


class Decoder(wiring.Component):
    """Members
    -------
    ctrl : In(decoder_control)
        The host interface's port (``hw.hub.ports.decoder_control``): start
        the commit walk or a STEP; the walk's response, the end of the
        STEP's decoding, the requests that ran and faulted.
    program : Out(program_port)
        The instruction buffer.
    lookup : Out(request_port)
        The configuration buffer.
    push : Out(stream.Signature(entry_layout))
        Decoded commands, into the decoded-command FIFO.
    epu : Out(epu_port)
        The EPU (``hw.hub.ports.epu_port``), with ``HubConfig.epu``.
    settled : In(1)
        The decoded-command FIFO is empty, the multicast register free and
        no read beat due (``hw.hub.multicast.Multicast.settled``): an EPU
        instruction may start.
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        super().__init__({
            "ctrl": In(decoder_control(hub)),
            "program": Out(program_port(hub)), "lookup": Out(request_port(hub)),
            "push": Out(stream.Signature(entry_layout(hub.n_channels))),
            "epu": Out(epu_port(hub)), "settled": In(1),
        })

    def elaborate(self, platform):
        hub = self.hub
        s, R, O = Sizes(hub), hub.requests, hub.channel.obuf_entries
        m = Module()
        prog, lk, push = self.program, self.lookup, self.push
        cur = Decoded(m, prog.word, opcodes=program_opcodes(hub.epu))
        loop = _Loop(hub, s.pc)
        pc, u = Signal(s.pc, name="pc"), Signal(FIELDS["op_size"].width, name="u")
        req = lk.req
        ctrl = self.ctrl
        ran, faulted = ctrl.ran, ctrl.faulted
        o_idx = Signal(range(max(O, 2)), name="o_idx")
        dirty = Signal(O, name="dirty")  # OBuf entries a MAC wrote and no RD-OUT read yet
        skip = Signal(R, name="skip")  # the requests this STEP passes over

        m.submodules.sequencer = seq = Sequencer(hub)
        m.d.comb += [seq.word.eq(prog.word), seq.u.eq(u), seq.gpr_base.eq(lk.gpr_base),
                     seq.n_chunks.eq(lk.n_chunks), lk.vchunk.eq(seq.vchunk),
                     seq.pchunk.eq(lk.pchunk),
                     seq.mods.va.eq(loop.mod_sum(pc, (ModiField.ROW, ModiField.COL))),
                     seq.mods.gbuf_idx.eq(loop.mod_sum(pc, (ModiField.GBUF_IDX,))),
                     seq.mods.out_idx.eq(loop.mod_sum(pc, (ModiField.OUT_IDX,))),
                     seq.mods.gpr_addr.eq(loop.mod_sum(pc, (ModiField.GPR_ADDR,)))]

        hs = push.valid & push.ready
        obit = 1 << push.payload.cmd.out_idx[:max(1, log2_ceil(O))]
        with m.If(hs & (push.payload.cmd.opcode == Opcode.MAC)):
            m.d.sync += dirty.eq(dirty | obit)
        with m.If(hs & (push.payload.cmd.opcode == Opcode.RD_OUT)):
            m.d.sync += dirty.eq(dirty & ~obit)

        v_err, v_code = self._check(m, cur, loop, pc)
        if hub.epu:  # the EPU reads its operands in EPU_WAIT's last cycle
            m.d.comb += [self.epu.op.eq(cur.opcode), self.epu.src.eq(lk.gpr_base + cur.gpr_addr),
                         self.epu.dst.eq(lk.gpr_base + cur.dst_addr), self.epu.span.eq(cur.span),
                         self.epu.n.eq(lk.t_cur), self.epu.op_size.eq(cur.op_size)]

        def fault_request(code):
            m.d.comb += [lk.set_fault.eq(1), lk.fault_code.eq(code)]
            m.d.sync += faulted.eq(faulted | (1 << req))

        def next_request():
            with m.If(req + 1 < R):
                m.d.sync += req.eq(req + 1)
                m.next = "REQ"
            with m.Else():
                m.d.comb += ctrl.done.eq(1)
                m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(ctrl.commit):
                    m.d.sync += [pc.eq(0), *loop.reset()]
                    m.next = "COMMIT"
                with m.Elif(ctrl.step):
                    m.d.sync += [req.eq(0), ran.eq(0), faulted.eq(0), skip.eq(ctrl.skip)]
                    m.next = "REQ"

            with m.State("COMMIT"):  # one word per cycle: cur = word pc
                def finish(code, data=0):
                    m.d.comb += [ctrl.done.eq(1), ctrl.rsp_code.eq(code), ctrl.rsp_data.eq(data)]
                    m.next = "IDLE"

                with m.If(pc == prog.length):
                    with m.If(loop.open & ((loop.end > prog.length) | ~loop.body_instr)):
                        m.d.comb += [prog.set_fault.eq(1), prog.fault_code.eq(Fault.BAD_LOOP)]
                        finish(HostStatus.FAULT, Cat(Const(Fault.BAD_LOOP, COMMIT_INDEX_SHIFT), pc))
                    with m.Else():
                        finish(HostStatus.OK)
                with m.Elif(v_err):
                    m.d.comb += [prog.set_fault.eq(1), prog.fault_code.eq(v_code)]
                    finish(HostStatus.FAULT,
                           Cat(v_code, Const(0, COMMIT_INDEX_SHIFT - len(v_code)), pc))
                with m.Else():
                    with m.If(loop.open & (pc == loop.end)):
                        m.d.sync += loop.open.eq(0)
                    with m.If(cur.is_[Opcode.DYN_LOOP]):
                        loop.open_at(m, pc, cur)
                    with m.Elif(cur.is_[Opcode.DYN_MODI]):
                        loop.latch_modi(m, cur)
                    with m.Else():
                        m.d.sync += loop.header.eq(0)
                        with m.If(loop.open & (pc != loop.end)):
                            m.d.sync += loop.body_instr.eq(1)
                    m.d.sync += pc.eq(pc + 1)
                    m.d.comb += prog.addr.eq(pc + 1)

            with m.State("REQ"):
                with m.If((lk.state != ReqState.ACTIVE) | skip.bit_select(req, 1)):
                    next_request()
                with m.Elif(prog.fault != 0):
                    fault_request(prog.fault)
                    next_request()
                with m.Elif(lk.t_cur > lk.n_chunks * prog.tokens_per_chunk):
                    fault_request(Fault.T_RANGE)
                    next_request()
                with m.Else():
                    m.d.sync += ran.eq(ran | (1 << req))
                    with m.If(prog.length == 0):
                        next_request()
                    with m.Else():
                        m.d.sync += [pc.eq(0), u.eq(0), loop.open.eq(0), loop.mv.eq(0)]
                        m.next = "RUN"

            with m.State("RUN"):  # cur = word pc
                self._run(m, cur, loop, pc, u, seq, o_idx, fault_request, next_request)

            if hub.epu:
                self._epu_states(m, pc, next_request)

            with m.State("SCRUB"):
                last = o_idx == O - 1
                with m.If(dirty.bit_select(o_idx, 1)):
                    m.d.comb += [push.valid.eq(1), push.payload.cmd.opcode.eq(Opcode.RD_OUT),
                                 push.payload.cmd.out_idx.eq(o_idx),
                                 push.payload.mask.eq((1 << hub.n_channels) - 1),
                                 push.payload.discard.eq(1)]
                    with m.If(push.ready):
                        m.d.sync += o_idx.eq(o_idx + 1)
                        with m.If(last):
                            next_request()
                with m.Else():
                    m.d.sync += o_idx.eq(o_idx + 1)
                    with m.If(last):
                        next_request()
        return m

    def _run(self, m, cur, loop, pc, u, seq, o_idx, fault_request, next_request):
        """RUN: one word per cycle (DYN-LOOP, DYN-MODI), or one command of
        the word per cycle while the decoded-command FIFO has room."""
        prog, lk, push = self.program, self.lookup, self.push
        nxt, advance = Signal.like(pc, name="nxt"), Signal(name="advance")
        m.d.comb += [nxt.eq(pc + 1), prog.addr.eq(pc)]
        with m.If(cur.is_[Opcode.DYN_LOOP]):
            with m.If(lk.t_cur > 0):
                loop.open_at(m, pc, cur)
            with m.Else():
                m.d.comb += nxt.eq(pc + 1 + cur.body_len)
            m.d.comb += advance.eq(1)
        with m.Elif(cur.is_[Opcode.DYN_MODI]):
            loop.latch_modi(m, cur)
            m.d.comb += advance.eq(1)
        def stop(code):  # the request faults at this word: drain, then the next
            fault_request(code)
            m.d.sync += [self.ctrl.ran.eq(self.ctrl.ran & ~(1 << lk.req)), o_idx.eq(0)]
            m.next = "SCRUB"

        with m.Elif(cur.epu):
            if self.hub.epu:
                with m.If(self._epu_range_fault(cur)):
                    stop(Fault.CMD_RANGE)
                with m.Elif(cur.is_[Opcode.EPU_SOFTMAX] & (lk.t_cur == 0)):
                    m.d.comb += advance.eq(1)  # no scores: nothing to do
                with m.Else():
                    m.next = "EPU_WAIT"
        with m.Elif(seq.fault != 0):
            stop(seq.fault)
        with m.Else():
            m.d.comb += [push.valid.eq(1), push.payload.cmd.eq(seq.cmd),
                         push.payload.mask.eq(cur.ch_mask), push.payload.gpr.eq(seq.gpr)]
            with m.If(push.ready):
                start = Mux(loop.start_set, loop.start, pc)
                with m.If(loop.open & ~loop.start_set):
                    m.d.sync += [loop.start_set.eq(1), loop.start.eq(pc)]
                with m.If(u + 1 == seq.op_size):
                    m.d.sync += u.eq(0)
                    m.d.comb += advance.eq(1)
                    with m.If(loop.open & (pc + 1 == loop.end)):
                        with m.If(loop.iterate(m) < lk.t_cur):
                            m.d.comb += nxt.eq(start)
                        with m.Else():
                            m.d.sync += [loop.open.eq(0), loop.mv.eq(0)]
                with m.Else():
                    m.d.sync += u.eq(u + 1)
        with m.If(advance):
            m.d.sync += pc.eq(nxt)
            m.d.comb += prog.addr.eq(nxt)
            with m.If(nxt == prog.length):
                next_request()

    def _epu_range_fault(self, cur):
        """The EPU word ``cur`` of the request would read or write a GPR
        entry past the GPR (``golden.hub.epu.range_fault``)."""
        lk, entries = self.lookup, self.hub.gpr_entries
        src = lk.gpr_base + cur.gpr_addr
        words = score_words(lk.t_cur)
        padded = padded_words(words, cur.op_size)
        softmax = (words != 0) & (src + (padded - 1) * cur.span >= entries)
        reduce = ((src + cur.op_size * cur.span - 1 >= entries)
                  | (lk.gpr_base + cur.dst_addr + cur.op_size - 1 >= entries))
        return Mux(cur.is_[Opcode.EPU_REDUCE], reduce, softmax)

    def _epu_states(self, m, pc, next_request):
        """EPU_WAIT: until ``settled``, then start the EPU on word ``pc``;
        EPU_RUN: until its last cycle, then the next word."""
        prog, e = self.program, self.epu
        with m.State("EPU_WAIT"):
            m.d.comb += prog.addr.eq(pc)
            with m.If(self.settled):
                m.d.comb += e.start.eq(1)
                m.next = "EPU_RUN"
        with m.State("EPU_RUN"):
            m.d.comb += prog.addr.eq(pc)
            with m.If(e.done):
                m.d.sync += pc.eq(pc + 1)
                m.d.comb += prog.addr.eq(pc + 1)
                with m.If(pc + 1 == prog.length):
                    next_request()
                with m.Else():
                    m.next = "RUN"

    def _check(self, m, cur, loop, pc):
        """The commit walk's checks of word ``pc``: (fault?, its code)."""
        hub = self.hub
        N, M = hub.n_channels, hub.max_modis
        v_err, v_code = Signal(name="v_err"), Signal(FAULT_BITS, name="v_code")
        eff_loop = Signal(name="eff_loop")
        m.d.comb += eff_loop.eq(loop.open & (pc != loop.end))
        target_abs = loop.target_of(cur)
        modi_bad_field = Signal(name="modi_bad_field")
        for j in range(M):
            bad_for_op = Const(1)
            for fsel, ops in MODI_FIELDS.items():
                allowed = Cat(cur.opcode == o for o in ops).any()
                bad_for_op = Mux(loop.field[j] == fsel, ~allowed, bad_for_op)
            with m.If(loop.mv[j] & (loop.target[j] == pc) & bad_for_op):
                m.d.comb += modi_bad_field.eq(1)

        def fail(code):
            m.d.comb += [v_err.eq(1), v_code.eq(code)]

        with m.If(loop.open & (pc == loop.end) & ~loop.body_instr):
            fail(Fault.BAD_LOOP)
        with m.Elif(~cur.known):
            fail(Fault.BAD_OPCODE)
        with m.Elif(cur.is_[Opcode.DYN_LOOP]):
            with m.If(eff_loop | (cur.body_len == 0) | (cur.t_div == 0)):
                fail(Fault.BAD_LOOP)
        with m.Elif(cur.is_[Opcode.DYN_MODI]):
            with m.If(~eff_loop | ~loop.header | (loop.n_modis == M)):
                fail(Fault.BAD_LOOP)
            with m.Elif(loop.at(pc) | (cur.field_sel > max(ModiField))
                        | (target_abs >= loop.end) | (target_abs <= pc)):
                fail(Fault.BAD_FIELD)
        with m.Elif(cur.epu):
            if hub.epu:
                with m.If(eff_loop):
                    fail(Fault.BAD_LOOP)
                with m.Elif(self._epu_bad_field(cur)):
                    fail(Fault.BAD_FIELD)
        with m.Else():
            normal = cur.is_[Opcode.RD] | cur.is_[Opcode.WR]
            with m.If(modi_bad_field | (cur.ch_mask == 0) | ((cur.ch_mask >> N) != 0)
                      | (cur.has["op_size"] & (cur.op_size == 0))
                      | (normal & (cur.bank >= hub.channel.banks))):
                fail(Fault.BAD_FIELD)
        return v_err, v_code

    @staticmethod
    def _epu_bad_field(cur):
        """``golden.hub.ibuf``'s ``_epu_field``: span 0 or Op-size 0; a
        softmax's Op-size not a power of two; a reduction's destination
        inside its sources after their start."""
        src, dst, n = cur.gpr_addr, cur.dst_addr, cur.op_size
        inside = (src < dst) & (dst < src + n * cur.span)
        pow2 = (n & (n - 1)[:len(n)]) == 0
        return ((cur.span == 0) | (n == 0) | (cur.is_[Opcode.EPU_SOFTMAX] & ~pow2)
                | (cur.is_[Opcode.EPU_REDUCE] & inside))
