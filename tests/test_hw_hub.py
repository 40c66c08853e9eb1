"""The HUB's blocks (hw/hub/) under the Amaranth simulator, each against its
specification in golden.hub: the configuration buffer on random host
operations, the decoder's commit check on random programs, the sequencer
on random words, offsets and VA2PA tables, and the multicast register on
random channel backpressure. The whole PIM module runs under cocotb and the
standalone player (tests/test_cocotb.py, tests/test_fast.py)."""

import numpy as np
import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from golden.config import small_hub_config
from golden.hub import Hub, command, instr
from golden.isa import (
    EPU_OPCODES,
    FIELDS,
    ISA,
    Fault,
    HostOp,
    HostStatus,
    ModiField,
    Opcode,
    ReqState,
    unpack_instruction,
)
from golden.streams import Command
from hw.hub.cbuf import ConfigBuffer
from hw.hub.decoder import Decoder
from hw.hub.ibuf import InstructionBuffer
from hw.hub.multicast import Multicast
from hw.hub.sequencer import Sequencer

HUB = small_hub_config()


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6, if_exists=True)
    sim.add_testbench(bench)
    sim.run()


# ---- configuration buffer ---------------------------------------------------


def _host_ops(rng, n):
    ops = [HostOp.ASSIGN, HostOp.GROW, HostOp.RELEASE, HostOp.STATUS, HostOp.CLEAR]
    for _ in range(n):
        op = ops[rng.choice(len(ops), p=[0.2, 0.45, 0.08, 0.17, 0.1])]
        req = int(rng.integers(HUB.requests + 1))  # one past the end: BAD_ARG
        a = int(rng.choice([rng.integers(0, 8), rng.integers(0, HUB.physical_chunks + 1),
                            rng.integers(0, HUB.physical_chunks + 1), rng.integers(0, 1 << 12)]))
        b = int(rng.choice([rng.integers(0, 16), HUB.gpr_entries - 1, HUB.gpr_entries]))
        yield op, req, a, b


@pytest.mark.parametrize("seed", [1, 2])
def test_config_buffer_against_golden(seed):
    """Random ASSIGN / GROW / RELEASE / STATUS / CLEAR (good and bad
    arguments, full VA2PA tables), the decoder's faults and T_cur advances
    between them: every response, and every VA2PA lookup and register the
    decoder reads, equals golden's."""
    rng = np.random.default_rng(seed)
    dut = ConfigBuffer(HUB)
    ref = Hub(HUB)
    ops = list(_host_ops(rng, 400))
    seen = {"ok": 0, "bad": 0, "fault": 0, "lookups": 0}

    async def bench(ctx):
        for op, req, a, b in ops:
            ctx.set(dut.host.valid, 1)
            ctx.set(dut.host.payload, {"host_op": op, "req_id": req, "arg_a": a, "arg_b": b,
                                       "data": 0})
            want = ref.host(op, req, a, b)
            got = (ctx.get(dut.host.rsp_code), ctx.get(dut.host.rsp_data))
            assert got == (want.code, want.data), (op.name, req, a, b, got, want)
            seen["ok" if want.code == HostStatus.OK else
                 "fault" if want.code == HostStatus.FAULT else "bad"] += 1
            await ctx.tick()
            ctx.set(dut.host.valid, 0)
            # the decoder's side: every request's registers and VA2PA table
            for r, q in enumerate(ref.requests):
                ctx.set(dut.lookup.req, r)
                assert (ctx.get(dut.lookup.state), ctx.get(dut.lookup.t_cur),
                        ctx.get(dut.lookup.gpr_base), ctx.get(dut.lookup.n_chunks)) == \
                    (q.state, q.t_cur, q.gpr_base, len(q.chunks)), r
                for v, p in enumerate(q.chunks):
                    ctx.set(dut.lookup.vchunk, v)
                    assert ctx.get(dut.lookup.pchunk) == p, (r, v)
                    seen["lookups"] += 1
            # now and then the decoder faults a request or a STEP advances T_cur
            if rng.random() < 0.1:
                r = int(rng.integers(HUB.requests))
                ctx.set(dut.lookup.req, r)
                ctx.set(dut.lookup.set_fault, 1)
                ctx.set(dut.lookup.fault_code, Fault.UNMAPPED)
                ref.requests[r].state, ref.requests[r].fault = ReqState.FAULTED, Fault.UNMAPPED
                await ctx.tick()
                ctx.set(dut.lookup.set_fault, 0)
            if rng.random() < 0.1:
                ran = int(rng.integers(1 << HUB.requests))
                ctx.set(dut.host.advance, ran)
                for r in range(HUB.requests):
                    if ran >> r & 1:
                        ref.requests[r].t_cur = (ref.requests[r].t_cur + 1) % (
                            1 << FIELDS["t_cur"].width)
                await ctx.tick()
                ctx.set(dut.host.advance, 0)

    _run(dut, bench)
    assert min(seen.values()) > 0, seen  # every kind of answer came up


# ---- decoder: the commit check ------------------------------------------------


class _CommitBench(Elaboratable):
    """The instruction buffer and the decoder (with a configuration buffer
    behind its lookup port), as the PIM module wires them."""

    def __init__(self, hub):
        self.ibuf, self.dec, self.cbuf = InstructionBuffer(hub), Decoder(hub), ConfigBuffer(hub)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ibuf, m.submodules.dec, m.submodules.cbuf = self.ibuf, self.dec, self.cbuf
        wiring.connect(m, self.dec.program, self.ibuf.program)
        wiring.connect(m, self.dec.lookup, self.cbuf.lookup)
        return m


def _field(rng, name, big=False):
    width = FIELDS[name].width
    return int(rng.integers(0, 1 << width)) if big else int(rng.integers(0, min(1 << width, 6)))


def _random_program(rng, hub):
    """A program near the valid ones: loops, DYN-MODIs with targets in and
    out of the body (some past the program counter's width), channel and
    EPU words with small or arbitrary fields, unknown opcodes, bad lengths."""
    every = (1 << hub.n_channels) - 1
    channel_ops = [Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR,
                   Opcode.EPU_SOFTMAX, Opcode.EPU_REDUCE]
    words = []
    n = int(rng.integers(0, hub.instr_depth + 1))
    while len(words) < n:
        roll = rng.random()
        if roll < 0.2:
            words.append(instr(Opcode.DYN_LOOP, body_len=int(rng.integers(0, 8)),
                               t_div=int(rng.integers(0, 4))))
        elif roll < 0.4:
            target = int(rng.choice([rng.integers(0, 6), rng.integers(0, 256)]))
            words.append(instr(Opcode.DYN_MODI, target=target,
                               field_sel=int(rng.integers(0, len(ModiField) + 1)),
                               stride=int(rng.integers(0, 1 << 16))))
        elif roll < 0.95:
            op = channel_ops[rng.integers(len(channel_ops))]
            big = rng.random() < 0.2
            fields = {f: _field(rng, f, big) for f in ISA[op].fields}
            if "ch_mask" in fields and rng.random() < 0.8:
                fields["ch_mask"] = every
            if "op_size" in fields and rng.random() < 0.8:
                fields["op_size"] = max(1, fields["op_size"])
            words.append(instr(op, **fields))
        else:
            words.append(int(rng.integers(0, 1 << 62)) << 2 | int(rng.integers(0, 4)))
    return words


def _commit_cases(rng, count):
    cases = [  # a DYN-MODI target far past the body: body0 + target wraps the pc's width
        [instr(Opcode.DYN_LOOP, body_len=4, t_div=1),
         instr(Opcode.DYN_MODI, target=66, field_sel=ModiField.OUT_IDX, stride=1),
         instr(Opcode.MAC, ch_mask=3, op_size=1), instr(Opcode.MAC, ch_mask=3, op_size=1),
         instr(Opcode.RD_OUT, ch_mask=3, op_size=1)]]
    body = [instr(Opcode.DYN_LOOP, body_len=2, t_div=4), instr(Opcode.MAC, ch_mask=3, op_size=1),
            instr(Opcode.RD_OUT, ch_mask=3, op_size=1)]
    for dst, pad in zip((0, 7, 8, 9, 11, 12), (1, 2, 3, 4, 0, 128), strict=True):
        # the reduction's sources are words 8 .. 11; softmax op_size 0 or 3: BAD_FIELD
        cases.append(body + [instr(Opcode.EPU_SOFTMAX, op_size=pad, gpr_addr=8, span=1),
                             instr(Opcode.EPU_REDUCE, op_size=2, gpr_addr=8, dst_addr=dst,
                                   span=2)])
    cases.append(body[:2] + [instr(Opcode.EPU_SOFTMAX, op_size=1, gpr_addr=8, span=1)]
                 + body[2:])
    return cases + [_random_program(rng, HUB) for _ in range(count)]


@pytest.mark.parametrize("epu", [False, True], ids=["no-epu", "epu"])
def test_commit_check_against_golden(epu):
    """PROG-COMMIT of random programs: the decoder's commit walk answers
    what golden's check_program does (code, fault and the first bad word's
    index), in one cycle per word; with an EPU and without (its words are
    then BAD_OPCODE)."""
    rng = np.random.default_rng(7)
    cases = _commit_cases(rng, 150)
    hub = HUB.replace(epu=epu)
    dut = _CommitBench(hub)
    codes = {}

    async def bench(ctx):
        ibuf, dec = dut.ibuf, dut.dec
        for words in cases:
            ref = Hub(hub)
            for i, w in enumerate(words):
                ref.host(HostOp.PROG_WRITE, arg_a=i, data=w)
                ctx.set(ibuf.write.addr, i)
                ctx.set(ibuf.write.data, w)
                ctx.set(ibuf.write.en, 1)
                await ctx.tick()
            ctx.set(ibuf.write.en, 0)
            want = ref.host(HostOp.PROG_COMMIT, arg_a=len(words), arg_b=4)
            ctx.set(ibuf.commit.en, 1)
            ctx.set(ibuf.commit.length, len(words))
            ctx.set(ibuf.commit.tokens_per_chunk, 4)
            ctx.set(dec.ctrl.commit, 1)
            await ctx.tick()
            ctx.set(ibuf.commit.en, 0)
            ctx.set(dec.ctrl.commit, 0)
            for _ in range(len(words) + 2):
                if ctx.get(dec.ctrl.done):
                    break
                await ctx.tick()
            got = (ctx.get(dec.ctrl.rsp_code), ctx.get(dec.ctrl.rsp_data))
            assert got == (want.code, want.data), ([hex(w) for w in words], got, want)
            assert ctx.get(ibuf.program.fault) == 0  # recorded at the edge
            await ctx.tick()
            assert ctx.get(ibuf.program.fault) == ref.ibuf.fault
            codes[want.data & 0xFF] = codes.get(want.data & 0xFF, 0) + 1
            if want.code == HostStatus.OK and any(w & 0x1F in EPU_OPCODES for w in words):
                codes["committed with EPU words"] = codes.get("committed with EPU words", 0) + 1

    _run(dut, bench)
    assert {Fault.NONE, Fault.BAD_LOOP, Fault.BAD_FIELD, Fault.BAD_OPCODE} <= set(codes), codes
    assert ("committed with EPU words" in codes) == epu, codes


# ---- sequencer ----------------------------------------------------------------


def test_sequencer_against_golden():
    """The u-th command of random channel words with random DYN-MODI
    offsets, GPR bases and VA2PA tables: command, GPR word and fault
    (UNMAPPED, CMD_RANGE) as golden's sequencer gives them."""
    rng = np.random.default_rng(11)
    cfg = HUB.channel
    dut = Sequencer(HUB)
    ref = Hub(HUB)
    seen = {}

    def random_case():
        base = int(rng.choice([0, rng.integers(0, HUB.gpr_entries), HUB.gpr_entries - 1]))
        chunks = [int(c) for c in rng.integers(0, HUB.physical_chunks,
                                               rng.integers(0, HUB.chunks_per_request + 1))]
        op = [Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD, Opcode.WR][rng.integers(5)]
        f = {name: _field(rng, name, rng.random() < 0.3) for name in ISA[op].fields}
        if "op_size" in f:
            f["op_size"] = max(1, f["op_size"])
        if "bank" in f:
            f["bank"] %= cfg.banks
        mods = {fs: int(rng.choice([0, rng.integers(-8, 8), rng.integers(0, 64)]))
                for fs in (ModiField.ROW, ModiField.GBUF_IDX, ModiField.OUT_IDX,
                           ModiField.GPR_ADDR)}
        return base, chunks, op, f, mods

    no_mods = dict.fromkeys((ModiField.ROW, ModiField.GBUF_IDX, ModiField.OUT_IDX,
                             ModiField.GPR_ADDR), 0)
    # a MAC has no GPR operand: the last GPR word does not fault its second command
    mac = {"ch_mask": 3, "op_size": 2, "row": 0, "col": 0, "gbuf_idx": 0, "out_idx": 0}
    cases = [(HUB.gpr_entries - 1, [1], Opcode.MAC, mac, no_mods, 1)]

    async def bench(ctx):
        for i in range(1500):
            if i < len(cases):
                base, chunks, op, f, mods, u = cases[i]
            else:
                (base, chunks, op, f, mods), u = random_case(), None
            r = ref.requests[0]
            r.gpr_base, r.chunks = base, chunks
            word = instr(op, **f)
            _, f = unpack_instruction(word)
            u = int(rng.integers(0, f.get("op_size", 1))) if u is None else u
            cmd, gpr, fault, _ = command(ref.cbuf, 0, op, f, u, mods)
            ctx.set(dut.word, word)
            ctx.set(dut.u, u)
            ctx.set(dut.mods, {"va": mods[ModiField.ROW], "gbuf_idx": mods[ModiField.GBUF_IDX],
                               "out_idx": mods[ModiField.OUT_IDX],
                               "gpr_addr": mods[ModiField.GPR_ADDR]})
            ctx.set(dut.gpr_base, r.gpr_base)
            ctx.set(dut.n_chunks, len(r.chunks))
            v = ctx.get(dut.vchunk)
            ctx.set(dut.pchunk, r.chunks[v] if v < len(r.chunks) else 0)
            assert Fault(ctx.get(dut.fault)) == fault, (op.name, f, u, mods, r)
            seen[fault] = seen.get(fault, 0) + 1
            if fault != Fault.NONE:
                continue
            got = ctx.get(dut.cmd)
            assert Command(Opcode(got.opcode), bank=got.bank, row=got.row, col=got.col,
                           gbuf_idx=got.gbuf_idx, out_idx=got.out_idx) == cmd, (op.name, f, u)
            if op in (Opcode.WR_INP, Opcode.RD_OUT, Opcode.RD, Opcode.WR):
                assert ctx.get(dut.gpr) == gpr, (op.name, f, u, mods)
            assert ctx.get(dut.op_size) == f.get("op_size", 1)

    _run(dut, bench)
    assert {Fault.NONE, Fault.UNMAPPED, Fault.CMD_RANGE} <= set(seen), seen


# ---- multicast register ---------------------------------------------------------


def test_multicast_against_its_rules():
    """Random entries (masks, reads, writes, dropped reads) under random
    channel backpressure and read-beat timing: every channel in an entry's
    mask takes its command exactly once and in order, a write beat with it
    (the GPR word the entry names), the register frees only when all have;
    every read beat returns to GPR word gpr + c, in order, and a dropped
    one is not written."""
    rng = np.random.default_rng(3)
    N = HUB.n_channels
    dut = Multicast(HUB)
    ops = [Opcode.WR_INP, Opcode.MAC, Opcode.RD_OUT, Opcode.RD]
    entries = []
    for _ in range(120):
        op = ops[rng.integers(len(ops))]
        entries.append({"cmd": {"opcode": op, "out_idx": int(rng.integers(4))},
                        "mask": int(rng.integers(1, 1 << N)), "gpr": int(rng.integers(0, 200)),
                        "discard": int(op == Opcode.RD_OUT and rng.random() < 0.3)})
    gpr = {a: 0x1000 + a for a in range(HUB.gpr_entries)}

    async def bench(ctx):
        got = [[] for _ in range(N)]  # per channel: (opcode, out_idx, beat)
        beats_due = [[] for _ in range(N)]  # per channel: read commands awaiting a beat
        writes = []
        k, cycle, last_read_addr = 0, 0, None
        while cycle < 20000 and (k < len(entries) or any(beats_due)
                                 or ctx.get(dut.busy)):
            if k < len(entries):
                ctx.set(dut.entry.valid, 1)
                ctx.set(dut.entry.payload, entries[k])
            else:
                ctx.set(dut.entry.valid, 0)
            for c in range(N):
                ctx.set(dut.cmd[c].ready, int(rng.random() < 0.5))
                ctx.set(dut.wdata[c].ready, int(rng.random() < 0.5))
                ctx.set(dut.rdata[c].valid, int(bool(beats_due[c]) and rng.random() < 0.4))
                ctx.set(dut.rdata[c].payload, 0xBEE0 + c)
            ctx.set(dut.gpr_rd.data, gpr.get(last_read_addr, 0))
            if ctx.get(dut.entry.valid) and ctx.get(dut.entry.ready):
                k += 1
            for c in range(N):
                if ctx.get(dut.cmd[c].valid) and ctx.get(dut.cmd[c].ready):
                    cmd = ctx.get(dut.cmd[c].payload)
                    got[c].append([Opcode(cmd.opcode), cmd.out_idx, None])
                    if cmd.opcode in (Opcode.RD_OUT, Opcode.RD):
                        beats_due[c].append(len(got[c]) - 1)
                if ctx.get(dut.wdata[c].valid) and ctx.get(dut.wdata[c].ready):
                    got[c].append(["beat", ctx.get(dut.wdata[c].payload)])
                if ctx.get(dut.rdata[c].valid) and ctx.get(dut.rdata[c].ready):
                    beats_due[c].pop(0)
                    assert ctx.get(dut.gpr_wr_busy)
                    writes.append((c, ctx.get(dut.gpr_wr.addr), ctx.get(dut.gpr_wr.en)))
            if ctx.get(dut.gpr_rd.en):
                last_read_addr = ctx.get(dut.gpr_rd.addr)
            await ctx.tick()
            cycle += 1
        assert k == len(entries) and not any(beats_due), "stalled"
        for c in range(N):
            want, want_writes = [], []
            for e in entries:
                if not e["mask"] >> c & 1:
                    continue
                op = e["cmd"]["opcode"]
                want.append([op, e["cmd"]["out_idx"], None])
                if op == Opcode.WR_INP:
                    want.append(["beat", gpr[e["gpr"]]])
                if op in (Opcode.RD_OUT, Opcode.RD):
                    want_writes.append((c, e["gpr"] + c, 1 - e["discard"]))
            # a write beat may go before or after its command: compare per kind
            assert [g for g in got[c] if g[0] != "beat"] == [w for w in want if w[0] != "beat"]
            assert [g for g in got[c] if g[0] == "beat"] == [w for w in want if w[0] == "beat"]
            assert [w for w in writes if w[0] == c] == want_writes

    _run(dut, bench)
