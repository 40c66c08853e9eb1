"""The host side of DPA (not hardware): the chunk allocator, host calls,
the token-centric QK^T layout and its program, and QK^T host sessions over
decode steps (the testbenches' and studies' stimulus)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.config import HubConfig
from golden.hub.ibuf import instr
from golden.isa import LANES, REQ_STATUS_FIELDS, HostOp, ModiField, Opcode, unpack
from golden.streams import Command


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


class CapacityError(RuntimeError):
    """No free physical chunk."""


def _check_count(name: str, value, lo: int) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, not {value!r}")


class ChunkAllocator:
    """Physical chunks for requests' KV caches. ``lazy`` (DPA): chunks are
    taken one at a time as a request's tokens outgrow its capacity;
    otherwise (the static baseline) a request gets the chunks of
    ``max_tokens`` when it is assigned. Freed chunks go to the back of the
    free list, so interleaved requests get non-contiguous chunks."""

    def __init__(self, n_chunks: int, tokens_per_chunk: int, lazy: bool = True,
                 max_tokens: int = 0, order: list[int] | None = None):
        for name, value, lo in (("n_chunks", n_chunks, 0), ("tokens_per_chunk",
                                                            tokens_per_chunk, 1),
                                ("max_tokens", max_tokens, 0)):
            _check_count(name, value, lo)
        self.tokens_per_chunk, self.lazy, self.max_tokens = tokens_per_chunk, lazy, max_tokens
        self.free: deque[int] = deque(order if order is not None else range(n_chunks))
        self.n_chunks = n_chunks
        self.owned: dict[int, list[int]] = {}

    def chunks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.tokens_per_chunk)

    def _owned(self, req: int) -> list[int]:
        if req not in self.owned:
            raise ValueError(f"request {req!r} holds no chunks (not assigned)")
        return self.owned[req]

    def assign(self, req: int, tokens: int) -> list[int]:
        _check_count("tokens", tokens, 0)
        if req in self.owned:
            raise ValueError(f"request {req} is already assigned")
        need = self.chunks_for(tokens if self.lazy else max(tokens, self.max_tokens))
        if need > len(self.free):
            raise CapacityError(f"request {req} needs {need} chunks, {len(self.free)} free")
        self.owned[req] = [self.free.popleft() for _ in range(need)]
        return list(self.owned[req])

    def grow(self, req: int, tokens: int) -> list[int]:
        """New chunks ``req`` needs to hold ``tokens`` tokens (lazy growth)."""
        _check_count("tokens", tokens, 0)
        have = self._owned(req)
        need = self.chunks_for(tokens) - len(have)
        if need > len(self.free):
            raise CapacityError(f"request {req} needs {need} more chunks, {len(self.free)} free")
        new = [self.free.popleft() for _ in range(max(need, 0))]
        have.extend(new)
        return new

    def release(self, req: int) -> None:
        self._owned(req)
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


def program_calls(words: list[int], tokens_per_chunk: int) -> list[HostCall]:
    """PROG-WRITE every word of a DPA program, then PROG-COMMIT it."""
    return [*(HostCall(HostOp.PROG_WRITE, arg_a=i, data=w) for i, w in enumerate(words)),
            HostCall(HostOp.PROG_COMMIT, arg_a=len(words), arg_b=tokens_per_chunk)]


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
    calls = program_calls(layout.program(), layout.tokens_per_chunk)
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


def status_fields(word: int) -> dict[str, int]:
    return unpack(REQ_STATUS_FIELDS, word)
