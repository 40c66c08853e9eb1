"""Dynamic PIM Access: the HUB's dispatcher, sequencer and multicast, and
the host-side chunk allocator (DESIGN.md §2.1, §2.3; docs/dpa.md).

This is the specification ``hw/hub.py`` meets. A DPA program is a list of
``INSTR_BITS`` instruction words (``golden.isa``) in the instruction buffer.
Each decode step (``HostOp.STEP``) runs it once for every ACTIVE request, in
request order; then every request that ran gets ``T_cur += 1``.

Program
    Channel instructions (WR-INP, MAC, RD-OUT, RD, WR) and loops::

        DYN-LOOP body_len=L t_div=D    the next L words are the body
          DYN-MODI target=k field=F stride=s   (zero or more, first in the body)
          ...channel instructions...            (at least one)

    The body repeats while ``tok < T_cur``, ``tok = 0, D, 2D, ...`` (so
    ``ceil(T_cur / D)`` times, none when T_cur is 0). ``target`` is an offset
    in the body (0: the word after DYN-LOOP). In iteration ``i`` the target's
    field is advanced by ``i * s``. ROW and COL both move the virtual word
    address ``va = row * cols + col`` (ROW by ``s * cols``). Loops do not nest.

Sequencer (Op-size ``n``; command ``u = 0 .. n-1``)
    MAC, RD, WR: ``va + u``; WR-INP, MAC: ``gbuf_idx + u``; RD-OUT:
    ``out_idx + u``. GPR: writes (WR-INP, WR) read ``gpr_base + gpr_addr + u``;
    reads (RD-OUT, RD) put channel ``c``'s beat in
    ``gpr_base + gpr_addr + u * n_channels + c``. RD and WR have no Op-size (1).

Translation (VA2PA)
    ``vchunk = va // (cols * chunk_rows)`` must be a mapped virtual chunk of
    the request; the command goes to physical row
    ``pchunk * chunk_rows + (va // cols) % chunk_rows``, column ``va % cols``.

Faults (``golden.isa.Fault``), per request, first one kept
    Program faults are found when the host commits the program (the first
    bad word, in order); a step then faults every ACTIVE request with that
    code before it issues anything. ``T_cur > n_chunks * tokens_per_chunk``
    faults the request before it issues anything (T_RANGE). While it runs, a
    command whose virtual chunk is not mapped (UNMAPPED) or whose GBuf, OBuf
    or GPR index is out of range (CMD_RANGE) faults it: that command and the
    rest of the request are not sent, and the OBuf entries it left dirty
    (MAC since their last RD-OUT) are drained with RD-OUTs whose beats are
    discarded, so the next request starts clean. A faulted request is skipped
    until the host clears it; other requests run normally.

Timing (cycle-exact with the RTL)
    STEP accepted in cycle ``s``. From ``s + 1`` the decoder visits request
    0, 1, ...: one cycle per request (its checks; a request that does not run
    costs just that cycle), then for a running request one cycle per DYN-LOOP
    and per DYN-MODI (first iteration only; later iterations jump back to the
    first channel instruction of the body), and one *push* per command into
    the decoded-command FIFO (``decode_depth`` entries): command ``k`` is
    pushed in the first cycle ``e_k >= t`` with room, ``e_k >= m_{k-Q} + 1``
    (``Q = decode_depth``), and the decoder goes on at ``e_k + 1``. The
    multicast register loads it in ``m_k = max(e_k + 1, A_{k-1})``, where
    ``A`` is the cycle the previous command was taken by its last channel,
    and offers it from ``m_k + 1``. A fault costs one cycle, then the drain
    visits each OBuf entry in one cycle (a push for a dirty one). After the
    last request the step ends once the FIFO and the register are empty and
    every read beat has reached the GPR.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.channel import ChannelModel, Command
from golden.config import HubConfig
from golden.isa import (
    COMMAND_BITS,
    FIELDS,
    INSTR_BITS,
    LANES,
    MODI_FIELDS,
    PROGRAM_OPCODES,
    REQ_STATUS_FIELDS,
    EncodingError,
    ErrorCode,
    Fault,
    HostOp,
    HostStatus,
    ModiField,
    Opcode,
    ReqState,
    pack,
    pack_instruction,
    unpack_instruction,
)

READS = (Opcode.RD_OUT, Opcode.RD)
WRITES = (Opcode.WR_INP, Opcode.WR)
USES_VA = (Opcode.MAC, Opcode.RD, Opcode.WR)
INSTR_BYTES = INSTR_BITS // 8
#: STEP response data: bit r of the low half = request r ran the step;
#: bit r of the high half = request r faulted in it.
STEP_MASK_BITS = 128
#: PROG-COMMIT fault response data: the fault code in the low bits, the
#: index of the first bad word from this bit up.
COMMIT_INDEX_SHIFT = 8


class DpaFault(Exception):
    """A request fault (strict mode). ``code`` is the ``Fault`` the RTL
    reports for the request; ``request`` is its id (None: the program)."""

    def __init__(self, code: Fault, request: int | None, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code, self.request = code, request


# ---- programs -------------------------------------------------------------


@dataclass(frozen=True)
class ProgramCheck:
    fault: Fault
    index: int  # first bad instruction (len(program) for a loop without end)
    message: str

    @property
    def ok(self) -> bool:
        return self.fault == Fault.NONE


def check_program(words: list[int], hub: HubConfig) -> ProgramCheck:
    """The first error of a DPA program, in word order, as the RTL's commit
    walk finds it (one word per cycle)."""
    n_mask = (1 << hub.n_channels) - 1
    loop_end = None  # index past the current loop body
    body0 = 0  # index of the body's first word
    header = False  # still in the body's DYN-MODI prefix
    modis: list[tuple[int, ModiField]] = []  # (absolute target, field)
    body_instr = 0
    for i, word in enumerate(words):
        if loop_end is not None and i == loop_end:
            if body_instr == 0:
                return ProgramCheck(Fault.BAD_LOOP, i, "loop body has no channel instruction")
            loop_end = None
        try:
            op, f = unpack_instruction(word)
        except EncodingError as e:
            return ProgramCheck(Fault.BAD_OPCODE, i, str(e))
        if op not in PROGRAM_OPCODES:
            return ProgramCheck(Fault.BAD_OPCODE, i, f"{op.name} is not implemented by the HUB")
        if op == Opcode.DYN_LOOP:
            if loop_end is not None:
                return ProgramCheck(Fault.BAD_LOOP, i, "nested DYN-LOOP")
            if f["body_len"] == 0 or f["t_div"] == 0:
                return ProgramCheck(Fault.BAD_LOOP, i, "DYN-LOOP with body_len 0 or t_div 0")
            loop_end, header, modis, body_instr = i + 1 + f["body_len"], True, [], 0
            body0 = i + 1
            continue
        if op == Opcode.DYN_MODI:
            if loop_end is None or not header:
                return ProgramCheck(Fault.BAD_LOOP, i, "DYN-MODI outside a loop header")
            if len(modis) == hub.max_modis:
                return ProgramCheck(Fault.BAD_LOOP, i, f"more than {hub.max_modis} DYN-MODIs")
            if any(target == i for target, _ in modis):
                return ProgramCheck(Fault.BAD_FIELD, i, "a DYN-MODI targets this DYN-MODI")
            if f["field_sel"] not in list(ModiField):
                return ProgramCheck(Fault.BAD_FIELD, i, f"field_sel={f['field_sel']} unknown")
            target = body0 + f["target"]
            if target >= loop_end or target <= i:
                return ProgramCheck(Fault.BAD_FIELD, i, f"target={f['target']} is not a "
                                    f"channel instruction after it in the body")
            modis.append((target, ModiField(f["field_sel"])))
            continue
        header = False
        if loop_end is not None:
            body_instr += 1
        for target, fsel in modis:
            if target == i and op not in MODI_FIELDS[fsel]:
                return ProgramCheck(Fault.BAD_FIELD, i, f"{op.name} has no field {fsel.name} "
                                    f"for a DYN-MODI")
        if f["ch_mask"] == 0 or f["ch_mask"] & ~n_mask:
            return ProgramCheck(Fault.BAD_FIELD, i, f"ch_mask={f['ch_mask']:#x} selects no "
                                f"channel or one past {hub.n_channels}")
        if "op_size" in f and f["op_size"] == 0:
            return ProgramCheck(Fault.BAD_FIELD, i, "op_size=0")
        if op in (Opcode.RD, Opcode.WR) and f["bank"] >= hub.channel.banks:
            return ProgramCheck(Fault.BAD_FIELD, i, f"bank={f['bank']} >= {hub.channel.banks}")
    if loop_end is not None:
        if loop_end > len(words):
            return ProgramCheck(Fault.BAD_LOOP, len(words), "loop body runs past the program end")
        if body_instr == 0:
            return ProgramCheck(Fault.BAD_LOOP, len(words), "loop body has no channel instruction")
    return ProgramCheck(Fault.NONE, len(words), "")


def instr(opcode: Opcode, **fields: int) -> int:
    """One instruction word (``golden.isa.pack_instruction``)."""
    return pack_instruction(opcode, **fields)


@dataclass(frozen=True)
class QktLayout:
    """Token-centric QK^T on a module (PIMphony §IV, REFERENCE.md): token
    ``T`` of a request is key slot ``s = T // (N B)`` of bank
    ``b = T % B`` in channel ``c = (T // B) % N``; a key is ``d_head / 16``
    words at virtual word address ``s * words``. Scores come back in GPR
    word ``scores + T // B``, lane ``T % B``."""

    hub: HubConfig
    d_head: int
    unroll: int = 2
    query: int = 0  # GPR entry of the query (relative to the request's base)
    scores: int = 16  # GPR entry of the first score word

    def __post_init__(self):
        cfg = self.hub.channel
        if self.d_head % LANES or cfg.cols % self.words or self.words > cfg.gbuf_entries:
            raise ValueError(f"d_head={self.d_head}: {self.words} words per key must divide "
                             f"the {cfg.cols} columns and fit GBuf")
        if not 1 <= self.unroll <= min(cfg.obuf_entries, self.hub.max_modis // 2):
            raise ValueError(f"unroll={self.unroll} needs that many OBuf entries and "
                             f"{2 * self.unroll} DYN-MODIs")
        if (self.keys_per_row * self.hub.chunk_rows) % self.unroll:
            raise ValueError("unroll must divide the key slots of a chunk")

    @property
    def words(self) -> int:
        return self.d_head // LANES

    @property
    def keys_per_row(self) -> int:
        return self.hub.channel.cols // self.words

    @property
    def tokens_per_slot(self) -> int:
        return self.hub.n_channels * self.hub.channel.banks

    @property
    def tokens_per_chunk(self) -> int:
        return self.tokens_per_slot * self.keys_per_row * self.hub.chunk_rows

    def place(self, token: int, word: int) -> tuple[int, int, int]:
        """(channel, bank, virtual word address) of word ``word`` of key ``token``."""
        b = token % self.hub.channel.banks
        c = (token // self.hub.channel.banks) % self.hub.n_channels
        return c, b, (token // self.tokens_per_slot) * self.words + word

    def program(self) -> list[int]:
        """WR-INP the query, then per loop iteration ``unroll`` key slots:
        MAC over the key's words into OBuf[j], RD-OUT to the GPR."""
        hub, w, u = self.hub, self.words, self.unroll
        every = (1 << hub.n_channels) - 1
        body, modis = [], []
        for j in range(u):
            modis.append(instr(Opcode.DYN_MODI, target=2 * u + len(body), field_sel=ModiField.COL,
                               stride=u * w))
            body.append(instr(Opcode.MAC, ch_mask=every, op_size=w, col=j * w, gbuf_idx=0,
                              out_idx=j))
            modis.append(instr(Opcode.DYN_MODI, target=2 * u + len(body),
                               field_sel=ModiField.GPR_ADDR, stride=u * hub.n_channels))
            body.append(instr(Opcode.RD_OUT, ch_mask=every, op_size=1,
                              gpr_addr=self.scores + j * hub.n_channels, out_idx=j))
        return [instr(Opcode.WR_INP, ch_mask=every, op_size=w, gpr_addr=self.query, gbuf_idx=0),
                instr(Opcode.DYN_LOOP, body_len=len(modis) + len(body),
                      t_div=u * self.tokens_per_slot),
                *modis, *body]

    def score_words(self, t_cur: int) -> int:
        return -(-t_cur // self.hub.channel.banks)


# ---- the HUB --------------------------------------------------------------


@dataclass(frozen=True)
class Emission:
    """One command in the multicast register."""

    cycle: int  # loaded into the multicast register in this cycle, offered from the next
    request: int | None  # None: a RAW host command
    ch_mask: int
    command: Command
    gpr: int  # GPR source (writes) or destination base (reads)
    discard: bool = False  # drain RD-OUT after a fault: the beats are dropped
    decoded: int = 0  # pushed into the decoded-command FIFO in this cycle


@dataclass
class Request:
    state: ReqState = ReqState.FREE
    fault: Fault = Fault.NONE
    t_cur: int = 0
    gpr_base: int = 0
    chunks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Response:
    code: HostStatus
    data: int = 0


@dataclass
class StepResult:
    emissions: list[Emission]
    ran: list[int]
    faulted: list[int]
    decode_end: int  # cycle after the decoder's last request


class Hub:
    """Golden HUB: instruction buffer, configuration buffer, VA2PA table,
    decoder, sequencer, multicast, GPR, over ``n_channels`` channel models
    whose memories persist across host operations.

    ``strict``: raise ``DpaFault`` at a request fault (after recording it)."""

    def __init__(self, hub: HubConfig, strict: bool = False):
        self.hub, self.strict = hub, strict
        self.program = [0] * hub.instr_depth
        self.prog_len = 0
        self.prog_fault = Fault.NONE
        self.tokens_per_chunk = 1
        self.requests = [Request() for _ in range(hub.requests)]
        self.gpr = np.zeros((hub.gpr_entries, LANES), np.uint16)
        self.channels = [ChannelModel(hub.channel) for _ in range(hub.n_channels)]
        #: every command each channel has received, with its write beat
        #: (None for commands without one): the whole stream since reset
        self.streams: list[list[tuple[Command, int | None]]] = [[] for _ in self.channels]
        self.dirty = [False] * hub.channel.obuf_entries
        self.last_step: StepResult | None = None

    # ---- host protocol ---------------------------------------------------
    def host(self, op: int, req_id: int = 0, arg_a: int = 0, arg_b: int = 0,
             data: int = 0, accept: Callable[[int, int], int] | None = None,
             cycle: int = 0) -> Response:
        """One host operation (``golden.isa.HostOp``)."""
        try:
            op = HostOp(op)
        except ValueError:
            return Response(HostStatus.BAD_OP)
        if op == HostOp.STEP:
            r = self.last_step = self.step(cycle, accept)
            return Response(HostStatus.OK, _mask(r.ran) | _mask(r.faulted) << STEP_MASK_BITS)
        handler = getattr(self, f"_op_{op.name.lower()}")
        return handler(req_id, arg_a, arg_b, data)

    def _req(self, req_id: int) -> Request | None:
        return self.requests[req_id] if 0 <= req_id < len(self.requests) else None

    def _op_prog_write(self, req_id, index, _b, data) -> Response:
        if not 0 <= index < self.hub.instr_depth:
            return Response(HostStatus.BAD_ARG)
        self.program[index] = data & ((1 << INSTR_BITS) - 1)
        self.prog_len, self.prog_fault = 0, Fault.NONE  # uncommitted: steps run nothing
        return Response(HostStatus.OK)

    def _op_prog_commit(self, req_id, length, tokens_per_chunk, _d) -> Response:
        if not 0 <= length <= self.hub.instr_depth or tokens_per_chunk < 1:
            return Response(HostStatus.BAD_ARG)
        check = check_program(self.program[:length], self.hub)
        self.prog_len, self.prog_fault = length, check.fault
        self.tokens_per_chunk = tokens_per_chunk
        if not check.ok:
            return Response(HostStatus.FAULT, int(check.fault) | check.index << COMMIT_INDEX_SHIFT)
        return Response(HostStatus.OK)

    def _op_gpr_write(self, req_id, addr, _b, data) -> Response:
        if not 0 <= addr < self.hub.gpr_entries:
            return Response(HostStatus.BAD_ARG)
        self.gpr[addr] = numerics.words_to_lanes(data)
        return Response(HostStatus.OK)

    def _op_gpr_read(self, req_id, addr, _b, _d) -> Response:
        if not 0 <= addr < self.hub.gpr_entries:
            return Response(HostStatus.BAD_ARG)
        return Response(HostStatus.OK, numerics.lanes_to_word(self.gpr[addr]))

    def _op_assign(self, req_id, t_cur, gpr_base, _d) -> Response:
        r = self._req(req_id)
        if r is None or r.state != ReqState.FREE or not 0 <= gpr_base < self.hub.gpr_entries \
                or not 0 <= t_cur < (1 << FIELDS["t_cur"].width):
            return Response(HostStatus.BAD_ARG)
        self.requests[req_id] = Request(ReqState.ACTIVE, Fault.NONE, t_cur, gpr_base, [])
        return Response(HostStatus.OK)

    def _op_grow(self, req_id, pchunk, _b, _d) -> Response:
        r = self._req(req_id)
        if r is None or r.state == ReqState.FREE or not 0 <= pchunk < self.hub.physical_chunks:
            return Response(HostStatus.BAD_ARG)
        if len(r.chunks) == self.hub.chunks_per_request:
            self._fault(req_id, Fault.TABLE_FULL, f"request {req_id}: all "
                        f"{self.hub.chunks_per_request} VA2PA entries in use", raise_=False)
            if self.strict:
                raise DpaFault(Fault.TABLE_FULL, req_id, "VA2PA table full")
            return Response(HostStatus.FAULT, int(Fault.TABLE_FULL))
        r.chunks.append(pchunk)
        return Response(HostStatus.OK)

    def _op_release(self, req_id, _a, _b, _d) -> Response:
        if self._req(req_id) is None:
            return Response(HostStatus.BAD_ARG)
        self.requests[req_id] = Request()
        return Response(HostStatus.OK)

    def _op_status(self, req_id, _a, _b, _d) -> Response:
        r = self._req(req_id)
        if r is None:
            return Response(HostStatus.BAD_ARG)
        return Response(HostStatus.OK, pack(REQ_STATUS_FIELDS, {
            "req_state": r.state, "fault": r.fault, "t_cur": r.t_cur,
            "n_chunks": len(r.chunks)}))

    def _op_clear(self, req_id, _a, _b, _d) -> Response:
        r = self._req(req_id)
        if r is None:
            return Response(HostStatus.BAD_ARG)
        if r.state == ReqState.FAULTED:
            r.state, r.fault = ReqState.ACTIVE, Fault.NONE
        return Response(HostStatus.OK)

    def _op_raw(self, req_id, ch_mask, gpr, data) -> Response:
        n = self.hub.n_channels
        cmd = Command.unpack(data & ((1 << COMMAND_BITS) - 1))
        code, _ = self.channels[0].check(cmd)
        read = cmd.opcode in READS
        if code != ErrorCode.NONE or ch_mask == 0 or ch_mask >> n \
                or not 0 <= gpr <= self.hub.gpr_entries - (n if read else 1):
            return Response(HostStatus.BAD_ARG)
        self._send([Emission(0, None, ch_mask, cmd, gpr)])
        return Response(HostStatus.OK)

    # ---- the decode step -------------------------------------------------
    def _fault(self, req: int, code: Fault, message: str, raise_: bool = True) -> None:
        r = self.requests[req]
        r.state, r.fault = ReqState.FAULTED, code
        if self.strict and raise_:
            raise DpaFault(code, req, message)

    def step(self, start: int = 0, accept: Callable[[int, int], int] | None = None,
             ) -> StepResult:
        """One decode step, STEP accepted in cycle ``start``. ``accept(k, e)``
        gives the cycle emission ``k`` (loaded in ``e``) was accepted by its
        last channel; default ``e + 1`` (channels always ready)."""
        accept = accept or (lambda k, e: e + 1)
        st = _Walk(self, accept)
        t = start + 1
        ran, faulted = [], []
        pending_fault: DpaFault | None = None
        for req, r in enumerate(self.requests):
            if r.state != ReqState.ACTIVE:
                t += 1
                continue
            try:
                if self.prog_fault != Fault.NONE:
                    self._fault(req, self.prog_fault, "the committed program is invalid")
                elif r.t_cur > len(r.chunks) * self.tokens_per_chunk:
                    self._fault(req, Fault.T_RANGE, f"request {req}: T_cur={r.t_cur} beyond "
                                f"{len(r.chunks)} chunks x {self.tokens_per_chunk} tokens")
            except DpaFault as e:
                pending_fault = pending_fault or e
            if r.state == ReqState.FAULTED:
                faulted.append(req)
                t += 1
                continue
            t = st.request(req, t + 1)
            if r.state == ReqState.FAULTED:
                faulted.append(req)
                pending_fault = pending_fault or st.error
            else:
                ran.append(req)
        self._send(st.emissions)
        for req in ran:
            self.requests[req].t_cur += 1
        if pending_fault is not None:
            raise pending_fault
        return StepResult(st.emissions, ran, faulted, t)

    def _send(self, emissions: list[Emission]) -> None:
        """Data effects: each channel runs its commands (the channel models
        keep their memories); read beats land in the GPR in order."""
        for c, ch in enumerate(self.channels):
            cmds, beats, dests = [], [], []
            for e in emissions:
                if not e.ch_mask >> c & 1:
                    continue
                beat = None
                if e.command.opcode in WRITES:
                    beat = numerics.lanes_to_word(self.gpr[e.gpr])
                    beats.append(beat)
                if e.command.opcode in READS:
                    dests.append(None if e.discard else e.gpr + c)
                cmds.append(e.command)
                self.streams[c].append((e.command, beat))
            if not cmds:
                continue
            result = ch.run(cmds, beats)
            assert not result.errors, "the HUB range-checks every command it sends"
            for dest, word in zip(dests, result.rdata, strict=True):
                if dest is not None:
                    self.gpr[dest] = numerics.words_to_lanes(word)

    # ---- convenience for hosts and tests -----------------------------------
    def load_program(self, words: list[int], tokens_per_chunk: int) -> Response:
        if len(words) > self.hub.instr_depth:
            raise ValueError(f"program of {len(words)} words exceeds the instruction buffer "
                             f"({self.hub.instr_depth})")
        for i, w in enumerate(words):
            self.host(HostOp.PROG_WRITE, arg_a=i, data=w)
        return self.host(HostOp.PROG_COMMIT, arg_a=len(words), arg_b=tokens_per_chunk)

    def translate(self, req: int, va: int) -> tuple[int, int]:
        """(physical row, column) of virtual word address ``va`` of ``req``."""
        hub, r = self.hub, self.requests[req]
        cols, rows = hub.channel.cols, hub.chunk_rows
        vchunk = va // (cols * rows)
        if va < 0 or vchunk >= len(r.chunks):
            raise DpaFault(Fault.UNMAPPED, req, f"va={va} (virtual chunk {vchunk}) is not "
                           f"mapped ({len(r.chunks)} chunks)")
        return r.chunks[vchunk] * rows + (va // cols) % rows, va % cols


def _mask(items: list[int]) -> int:
    return sum(1 << i for i in items)


class _Walk:
    """The decoder and sequencer walking the program for one step."""

    def __init__(self, hub: Hub, accept: Callable[[int, int], int]):
        self.h, self.accept = hub, accept
        self.emissions: list[Emission] = []
        self.free = -1  # the multicast register is free from this cycle
        self.error: DpaFault | None = None

    def emit(self, t: int, req: int | None, mask: int, cmd: Command, gpr: int,
             discard: bool = False) -> int:
        k, depth = len(self.emissions), self.h.hub.decode_depth
        e = t if k < depth else max(t, self.emissions[k - depth].cycle + 1)
        load = max(e + 1, self.free)
        self.emissions.append(Emission(load, req, mask, cmd, gpr, discard, e))
        self.free = self.accept(k, load)
        if self.free <= load:
            raise ValueError(f"emission {k} accepted in cycle {self.free}, not after its "
                             f"load in {load}")
        op = cmd.opcode
        if op == Opcode.MAC:
            self.h.dirty[cmd.out_idx] = True
        elif op == Opcode.RD_OUT:
            self.h.dirty[cmd.out_idx] = False
        return e + 1

    def request(self, req: int, t: int) -> int:
        """Run ``req``'s program from cycle ``t``; return the decoder's next cycle."""
        h = self.h
        hub, r = h.hub, h.requests[req]
        cols, n = hub.channel.cols, hub.n_channels
        pc = 0
        loop = None  # (body_end, t_div, tok, body_start, modis)
        while pc < h.prog_len:
            op, f = unpack_instruction(h.program[pc])
            nxt = pc + 1
            if op == Opcode.DYN_LOOP:
                if r.t_cur > 0:
                    loop = {"end": pc + 1 + f["body_len"], "t_div": f["t_div"], "tok": 0,
                            "body0": pc + 1, "start": None, "modis": []}
                else:
                    nxt = pc + 1 + f["body_len"]
                t += 1
            elif op == Opcode.DYN_MODI:
                stride = f["stride"] - (1 << 16 if f["stride"] >> 15 else 0)
                if f["field_sel"] == ModiField.ROW:
                    stride *= cols
                loop["modis"].append(
                    [loop["body0"] + f["target"], ModiField(f["field_sel"]), stride, 0])
                t += 1
            else:
                if loop is not None and loop["start"] is None:
                    loop["start"] = pc
                mods = {fs: 0 for fs in ModiField}
                for target, fs, _stride, acc in (loop["modis"] if loop else []):
                    if target == pc:
                        mods[ModiField.ROW if fs == ModiField.COL else fs] += acc
                for u in range(f.get("op_size", 1)):
                    cmd, gpr, fault, msg = self._command(req, op, f, u, mods, cols, n)
                    if fault != Fault.NONE:
                        try:
                            h._fault(req, fault, msg)
                        except DpaFault as e:
                            self.error = e
                        return self._drain(t + 1)
                    t = self.emit(t, req, f["ch_mask"], cmd, gpr)
                if loop is not None and pc == loop["end"] - 1:
                    loop["tok"] += loop["t_div"]
                    for m in loop["modis"]:
                        m[3] += m[2]
                    if loop["tok"] < r.t_cur:
                        nxt = loop["start"]
                    else:
                        loop = None
            pc = nxt
        return t

    def _command(self, req, op, f, u, mods, cols, n):
        h = self.h
        hub, r, cfg = h.hub, h.requests[req], h.hub.channel
        row = col = gbuf = out = 0
        if op in USES_VA:
            va = f["row"] * cols + f["col"] + mods[ModiField.ROW] + u
            try:
                row, col = h.translate(req, va)
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

    def _drain(self, t: int) -> int:
        every = (1 << self.h.hub.n_channels) - 1
        for o in range(self.h.hub.channel.obuf_entries):
            if self.h.dirty[o]:
                t = self.emit(t, None, every, Command(Opcode.RD_OUT, out_idx=o), 0, True)
            else:
                t += 1
        return t


# ---- host-side KV allocation ------------------------------------------------


class CapacityError(RuntimeError):
    """No free physical chunk."""


class ChunkAllocator:
    """Physical chunks for requests' KV caches. ``lazy`` (DPA): chunks are
    taken one at a time as a request's tokens outgrow its capacity;
    otherwise (the static baseline) a request gets the chunks of
    ``max_tokens`` when it is assigned. Freed chunks go to the back of the
    free list, so interleaved requests get non-contiguous chunks."""

    def __init__(self, n_chunks: int, tokens_per_chunk: int, lazy: bool = True,
                 max_tokens: int = 0, order: list[int] | None = None):
        self.tokens_per_chunk, self.lazy, self.max_tokens = tokens_per_chunk, lazy, max_tokens
        self.free: deque[int] = deque(order if order is not None else range(n_chunks))
        self.n_chunks = n_chunks
        self.owned: dict[int, list[int]] = {}

    def chunks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.tokens_per_chunk)

    def assign(self, req: int, tokens: int) -> list[int]:
        if req in self.owned:
            raise ValueError(f"request {req} is already assigned")
        need = self.chunks_for(tokens if self.lazy else max(tokens, self.max_tokens))
        if need > len(self.free):
            raise CapacityError(f"request {req} needs {need} chunks, {len(self.free)} free")
        self.owned[req] = [self.free.popleft() for _ in range(need)]
        return list(self.owned[req])

    def grow(self, req: int, tokens: int) -> list[int]:
        """New chunks ``req`` needs to hold ``tokens`` tokens (lazy growth)."""
        have = self.owned[req]
        need = self.chunks_for(tokens) - len(have)
        if need > len(self.free):
            raise CapacityError(f"request {req} needs {need} more chunks, {len(self.free)} free")
        new = [self.free.popleft() for _ in range(max(need, 0))]
        have.extend(new)
        return new

    def release(self, req: int) -> None:
        self.free.extend(self.owned.pop(req))

    @property
    def used(self) -> int:
        return self.n_chunks - len(self.free)


@dataclass(frozen=True)
class HostCall:
    """One host operation of a session (``Hub.host`` arguments)."""

    op: HostOp
    req_id: int = 0
    arg_a: int = 0
    arg_b: int = 0
    data: int = 0
    note: str = ""


@dataclass
class QktSession:
    """A host session computing QK^T for several requests over decode steps
    with lazily grown, interleaved chunks: the host calls, and per step and
    request the keys and query for checking the scores."""

    layout: QktLayout
    calls: list[HostCall]
    keys: dict[int, np.ndarray]  # request -> (tokens, d_head) BF16 bits
    queries: dict[int, np.ndarray]
    gpr_base: dict[int, int]
    #: (index of the GPR_READ call, request, T_cur of the step, first token of the word)
    reads: list[tuple[int, int, int, int]]


KEY_STAGING = -1  # GPR entry (from the top) the host stages key words in


def qkt_session(hub: HubConfig, d_head: int = 32, t0: dict[int, int] | None = None,
                steps: int = 4, unroll: int = 2, seed: int = 0) -> QktSession:
    """Load the QK^T program; assign each request (``t0``: request -> initial
    T_cur) with a shuffled free list, so chunks are non-contiguous and
    interleaved; write its keys with RAW WRs; then per step append one key
    per request (growing it when T_cur crosses a chunk boundary), STEP, and
    read the scores back."""
    t0 = t0 or {0: 250, 1: 100}
    layout = QktLayout(hub, d_head, unroll)
    rng = np.random.default_rng(seed)
    alloc = ChunkAllocator(hub.physical_chunks, layout.tokens_per_chunk,
                           order=[int(c) for c in rng.permutation(hub.physical_chunks)])
    calls: list[HostCall] = []
    prog = layout.program()
    calls += [HostCall(HostOp.PROG_WRITE, arg_a=i, data=w) for i, w in enumerate(prog)]
    calls.append(HostCall(HostOp.PROG_COMMIT, arg_a=len(prog), arg_b=layout.tokens_per_chunk))
    t_max = max(t0.values()) + steps
    keys = {r: numerics.float_to_bf16(rng.standard_normal((t_max, d_head))) for r in t0}
    queries = {r: numerics.float_to_bf16(rng.standard_normal(d_head)) for r in t0}
    region = hub.gpr_entries // (len(t0) + 1)
    base = {r: i * region for i, r in enumerate(t0)}
    if layout.scores + layout.score_words(t_max) > region:
        raise ValueError(f"scores of {t_max} tokens do not fit a GPR region of {region}")
    staging = hub.gpr_entries + KEY_STAGING
    mapping: dict[int, list[int]] = {}

    def key_writes(r: int, tokens) -> None:
        cols, rows = hub.channel.cols, hub.chunk_rows
        for tok in tokens:
            for w in range(layout.words):
                c, b, va = layout.place(tok, w)
                pchunk = mapping[r][va // (cols * rows)]
                row, col = pchunk * rows + (va // cols) % rows, va % cols
                word = numerics.lanes_to_word(keys[r][tok, w * LANES:(w + 1) * LANES])
                calls.append(HostCall(HostOp.GPR_WRITE, arg_a=staging, data=word))
                calls.append(HostCall(HostOp.RAW, arg_a=1 << c, arg_b=staging,
                                      data=Command(Opcode.WR, bank=b, row=row, col=col).pack()))

    def grow(r: int, chunks: list[int]) -> None:
        mapping.setdefault(r, []).extend(chunks)
        calls.extend(HostCall(HostOp.GROW, r, c, note="grow") for c in chunks)

    for r, t in t0.items():
        # T_cur = t from the start; the keys of t - 1 tokens are there, and
        # each step appends one key before it runs
        calls.append(HostCall(HostOp.ASSIGN, r, t, base[r]))
        grow(r, alloc.assign(r, t - 1))
        for w in range(layout.words):
            calls.append(HostCall(HostOp.GPR_WRITE, arg_a=base[r] + layout.query + w,
                                  data=numerics.lanes_to_word(
                                      queries[r][w * LANES:(w + 1) * LANES])))
        key_writes(r, range(t - 1))
    reads = []
    for step in range(steps):
        for r, t in t0.items():
            t_cur = t + step
            grow(r, alloc.grow(r, t_cur))
            key_writes(r, [t_cur - 1])
        calls.append(HostCall(HostOp.STEP, note=f"step {step}"))
        for r, t in t0.items():
            t_cur = t + step
            for i in range(layout.score_words(t_cur)):
                reads.append((len(calls), r, t_cur, i * hub.channel.banks))
                calls.append(HostCall(HostOp.GPR_READ, arg_a=base[r] + layout.scores + i))
    return QktSession(layout, calls, keys, queries, base, reads)


def disassemble(words: list[int]) -> list[str]:
    """One line per instruction word: index, hex word, mnemonic and fields
    (loop bodies indented; undefined words shown as such)."""
    lines, body_end = [], -1
    for i, word in enumerate(words):
        try:
            op, f = unpack_instruction(word)
            text = f"{op.name} " + " ".join(
                f"{k}={ModiField(v).name if k == 'field_sel' and v in list(ModiField) else v:}"
                if k != "ch_mask" else f"ch_mask={v:#x}" for k, v in f.items())
        except EncodingError as e:
            op, f, text = None, {}, f"?? ({e})"
        indent = "    " if i < body_end else ""
        lines.append(f"{i:3}  {word:032x}  {indent}{text}")
        if op == Opcode.DYN_LOOP:
            body_end = i + 1 + f["body_len"]
    return lines


def program_bytes(words: list[int]) -> int:
    return len(words) * INSTR_BYTES


def unrolled_instructions(words: list[int], t_cur: int) -> int:
    """Instructions of the equivalent static stream (every DYN-LOOP
    expanded for ``t_cur`` tokens, no DYN-MODI), for the size study."""
    total, pc = 0, 0
    while pc < len(words):
        op, f = unpack_instruction(words[pc])
        if op == Opcode.DYN_LOOP:
            body = words[pc + 1: pc + 1 + f["body_len"]]
            n_body = sum(unpack_instruction(w)[0] != Opcode.DYN_MODI for w in body)
            total += math.ceil(t_cur / f["t_div"]) * n_body
            pc += 1 + f["body_len"]
        else:
            total += 1
            pc += 1
    return total


def status_fields(word: int) -> dict[str, int]:
    from golden.isa import unpack

    return unpack(REQ_STATUS_FIELDS, word)


__all__ = ["ChunkAllocator", "CapacityError", "DpaFault", "Emission", "Hub",
           "ProgramCheck", "QktLayout", "Response", "check_program", "instr",
           "program_bytes", "unrolled_instructions"]
