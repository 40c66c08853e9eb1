"""Attention lowered to DPA programs (host side, not hardware): one KV head
of one sequence is one configuration-buffer request, and its program runs
QK^T for the ``group`` query heads that share the KV head (GQA; 1 is
MHA), the EPU's softmax, SV and the TCP reduction of the channels'
partial sums (PIMphony §IV, DESIGN.md §2.4; docs/lowering.md).

Token-centric placement (TCP) over a module of ``N`` channels of 16 banks
(a bank's RD-OUT lane is its score, so a score word is 16 tokens):

* **K**: token ``T`` in channel ``(T // 16) % N``, bank ``T % 16``, key
  slot ``s = T // (16 N)``: the row is ``T / (channels x banks)``
  (REFERENCE.md). Its ``d_head / 16`` words sit at ``va = (s // u) S +
  (s % u) words + w``, ``u`` slots an iteration, ``S`` words an iteration
  in every bank.
* **Scores**: query ``q``'s score of token ``T`` lands in GPR word
  ``scores(q) + T // 16``, lane ``T % 16``: the EPU's layout.
* **V**: score word (chunk) ``k`` of an iteration's ``u N`` goes to token
  group ``(k // U) % G`` of ``G = max(1, 16 N / d_head)`` channel groups
  (``U = u N / G`` chunks each); channel ``c`` serves token group ``c %
  G`` and dimension block ``c // G``; its bank ``b`` holds, in its OBuf
  entry ``d`` (of ``D = max(1, d_head / (16 N))``), dimension ``(d N / G +
  c // G) 16 + b``. A V word is 16 tokens of one dimension, at ``va = i S
  + u words + d U + j`` (iteration ``i``, chunk ``j`` of the group's
  block). K and V of iteration ``i`` share its ``S`` words, so one VA2PA
  table serves both and every DYN-MODI stride is ``S``.

The program (one word list, its size independent of the context length):
WR-INP of the queries; a DYN-LOOP over ``u`` key slots per iteration
(per slot and query: MAC into its own OBuf entry, RD-OUT of the scores);
per query an EPU_SOFTMAX padded to the ``u N`` score words an SV
iteration reads; a DYN-LOOP over the same tokens (per query and token
group: WR-INP of the group's ``U`` score words to its channels; per
query and OBuf entry: one MAC of ``U`` words, accumulating over the
iterations); one RD-OUT of the partial sums and one EPU_REDUCE over the
``G`` token groups. The result of query ``q`` is ``d_head / 16`` words at
``out(q)``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.config import HubConfig
from golden.hub.ibuf import check_program, instr
from golden.isa import LANES, ModiField, Opcode


def _checked(prog: list[int], hub: HubConfig, what: str) -> list[int]:
    """``prog``, once the commit check passes it (a lowering bug otherwise)
    and it fits the instruction buffer (named otherwise)."""
    check = check_program(prog, hub)
    if not check.ok:
        raise AssertionError(f"lowered program faults at word {check.index}: {check.message}")
    if len(prog) > hub.instr_depth:
        raise ValueError(f"{what}: {len(prog)} instruction words exceed the instruction "
                         f"buffer ({hub.instr_depth})")
    return prog


def attention_epu_ops(n_channels: int, d_head: int, group: int, unroll: int = 1,
                      hfp: bool = False) -> list[tuple[Opcode, int, int]]:
    """The EPU instructions of the attention program, ``(opcode, op_size,
    span)``: per query head a softmax padded to the ``unroll x n_channels``
    score words an SV iteration reads, then one reduction of the ``group x
    d_head / 16`` result words over the ``G`` token groups' partial sums
    (``AttentionLayout``; its program is built from this list). ``hfp``
    (head-first, one channel of the ``n_channels``): per query head a
    softmax over its channel's score words, every ``n_channels``-th GPR
    word, padded to ``unroll`` words; no reduction (one channel's partial
    sums are the result)."""
    if hfp:
        return [(Opcode.EPU_SOFTMAX, unroll, n_channels)] * group
    groups = max(1, LANES * n_channels // d_head)
    return [(Opcode.EPU_SOFTMAX, unroll * n_channels, 1)] * group + [
        (Opcode.EPU_REDUCE, group * d_head // LANES, groups)]


def attention_epu_cycles(tokens, n_channels: int, d_head: int, group: int, unroll: int = 1,
                         words_per_cycle: int = 1, hfp: bool = False):
    """EPU cycles of one KV head's attention at T_cur ``tokens`` (an integer
    or an array): ``golden.hub.epu``'s timing of ``attention_epu_ops``, on
    an EPU reading ``words_per_cycle`` GPR words a cycle (the module's: 1).
    The system model's softmax and reduction cost."""
    from golden.hub import epu

    total = np.zeros(np.shape(tokens), np.int64)
    for op, op_size, span in attention_epu_ops(n_channels, d_head, group, unroll, hfp):
        if op == Opcode.EPU_SOFTMAX:  # nothing to do at T_cur 0
            total = total + epu.softmax_cycles(tokens, op_size, words_per_cycle)
        else:  # the decoder runs a reduction at any T_cur
            total = total + epu.reduce_cycles(op_size, span, words_per_cycle)
    return total


def attention_epu_op_counts(tokens, n_channels: int, d_head: int, group: int,
                            unroll: int = 1, hfp: bool = False) -> dict:
    """The EPU datapath's operations (``golden.hub.epu.OPS``) of one KV
    head's attention at T_cur ``tokens`` (an integer or an array), the
    instructions of ``attention_epu_ops``: the system model's EPU energy."""
    from golden.hub import epu

    total = dict.fromkeys(epu.OPS, np.zeros(np.shape(tokens), np.int64))
    for op, op_size, span in attention_epu_ops(n_channels, d_head, group, unroll, hfp):
        ops = (epu.softmax_ops(tokens) if op == Opcode.EPU_SOFTMAX
               else epu.reduce_ops(op_size, span))
        total = {k: total[k] + ops[k] for k in epu.OPS}
    return total


@dataclass(frozen=True)
class AttentionLayout:
    """The placement and GPR layout of one KV head's attention on ``hub``
    (module: ``n_channels`` channels of 16 banks) for contexts up to
    ``max_tokens``; ``group`` query heads share the KV head; ``unroll``
    key slots per loop iteration. ``channel`` None is token-centric
    placement over every channel (TCP); a channel index is head-first
    placement (HFP): the KV head on that channel alone (``used``: 1
    channel), its RD-OUT beats in every ``n_channels``-th GPR word
    (``hfp_program``)."""

    hub: HubConfig
    d_head: int
    group: int = 1
    max_tokens: int = 1024
    unroll: int = 1
    channel: int | None = None

    def __post_init__(self):
        hub, cfg = self.hub, self.hub.channel
        n, d = self.used, self.d_head
        need = []
        if cfg.banks != LANES:
            need.append(f"{LANES} banks per channel (a score word is one RD-OUT beat), "
                        f"not {cfg.banks}")
        if d % LANES or d <= 0:
            need.append(f"d_head a multiple of {LANES}, not {d}")
        elif (LANES * n) % d and d % (LANES * n):
            need.append(f"d_head ({d}) dividing or a multiple of 16 x {n} channels")
        if self.group < 1 or self.unroll < 1 or self.max_tokens < 1:
            need.append("group, unroll and max_tokens >= 1")
        if self.channel is not None and not 0 <= self.channel < hub.n_channels:
            need.append(f"channel in [0, {hub.n_channels}) (head-first placement), "
                        f"not {self.channel}")
        if need:
            raise ValueError("attention lowering needs " + "; ".join(need))
        u, g = self.unroll, self.group
        if (u * n) & (u * n - 1) or (u * n) % self.token_groups:
            raise ValueError(f"unroll x channels ({u * n}) must be a power of two divisible "
                             f"by the {self.token_groups} token groups")
        # SV's loop body: per query, the token groups' WR-INPs (HFP: one per
        # score word, the words being a GPR stride apart) and a MAC per OBuf entry
        sv_writes = self.chunks if self.hfp else self.token_groups
        limits = [("GBuf entries", max(g * self.words, g * self.chunks), cfg.gbuf_entries),
                  ("OBuf entries", max(u * g, g * self.dims_per_bank), cfg.obuf_entries),
                  ("DYN-MODIs", max(2 * u * g, g * (sv_writes + self.dims_per_bank)),
                   hub.max_modis),
                  ("GPR entries", self.gpr_words, hub.gpr_entries)]
        over = [f"{name}: {want} > {have}" for name, want, have in limits if want > have]
        row = hub.channel.cols * hub.chunk_rows
        if row % self.stride:
            over.append(f"{self.stride} words an iteration do not divide a chunk's "
                        f"{row} words per bank")
        if over:
            raise ValueError(f"{self.describe()} does not fit the HUB: " + "; ".join(over))

    # ---- sizes -------------------------------------------------------------
    @property
    def hfp(self) -> bool:
        """Head-first placement: the KV head on ``channel`` alone."""
        return self.channel is not None

    @property
    def used(self) -> int:
        """Channels the placement spreads a KV head over (HFP: 1)."""
        return 1 if self.hfp else self.hub.n_channels

    @property
    def words(self) -> int:
        """Words of a key (and of a query)."""
        return self.d_head // LANES

    @property
    def token_groups(self) -> int:
        """G: channel groups that split an SV iteration's tokens."""
        return max(1, LANES * self.used // self.d_head)

    @property
    def dims_per_bank(self) -> int:
        """D: dimensions (OBuf entries) per bank in SV."""
        return max(1, self.d_head // (LANES * self.used))

    @property
    def chunks(self) -> int:
        """U: score words a token group gets an iteration."""
        return self.unroll * self.used // self.token_groups

    @property
    def tokens_per_iteration(self) -> int:
        return self.unroll * self.used * LANES

    @property
    def stride(self) -> int:
        """S: words an iteration takes in every bank (K, then V)."""
        return self.unroll * self.words + self.dims_per_bank * self.chunks

    @property
    def tokens_per_chunk(self) -> int:
        """Tokens a VA2PA chunk holds (PROG-COMMIT's tokens per chunk)."""
        return self.hub.channel.cols * self.hub.chunk_rows // self.stride \
            * self.tokens_per_iteration

    @property
    def score_region(self) -> int:
        """GPR words of one query's scores: ``max_tokens`` rounded up to an
        iteration (HFP: each score word ``n_channels`` GPR words apart)."""
        it = self.tokens_per_iteration
        return -(-self.max_tokens // it) * it // LANES * self.gpr_stride

    @property
    def gpr_stride(self) -> int:
        """GPR words between two of a query's score words: 1, or under HFP
        ``n_channels`` (an RD-OUT beat of channel ``c`` lands at ``gpr +
        u n + c``)."""
        return self.hub.n_channels if self.hfp else 1

    @property
    def home(self) -> int:
        """The GPR offset of the placement's RD-OUT beats (HFP: its channel)."""
        return self.channel if self.hfp else 0

    # ---- the GPR layout (relative to the request's base) ---------------------
    def query(self, q: int) -> int:
        return q * self.words

    def scores(self, q: int) -> int:
        return self.group * self.words + q * self.score_region

    @property
    def partials(self) -> int:
        """First of the channels' SV partial sums (RD-OUT beats)."""
        return self.scores(self.group)

    def out(self, q: int) -> int:
        """First GPR word of query ``q``'s result (TCP: ``words`` words from
        it; HFP: ``out_words``)."""
        if self.hfp:
            return self.out_words(q)[0]
        return self.partials + self.group * self.dims_per_bank * self.hub.n_channels \
            + q * self.words

    def out_words(self, q: int) -> list[int]:
        """The GPR words of query ``q``'s result, dimensions 16 i to 16 i +
        15 in word ``i``: contiguous after the TCP reduction; under HFP its
        channel's RD-OUT beats of OBuf entries ``q D .. q D + D - 1``."""
        if self.hfp:
            d = self.dims_per_bank
            return [self.partials + (q * d + i) * self.hub.n_channels + self.channel
                    for i in range(self.words)]
        return [self.out(q) + w for w in range(self.words)]

    @property
    def gpr_words(self) -> int:
        if self.hfp:
            return self.partials + self.group * self.dims_per_bank * self.hub.n_channels
        return self.out(self.group)

    # ---- the program -----------------------------------------------------------
    def program(self) -> list[int]:
        if self.hfp:
            return self.hfp_program()
        hub, n, u, g = self.hub, self.hub.n_channels, self.unroll, self.group
        w, G, D, U, S = self.words, self.token_groups, self.dims_per_bank, self.chunks, \
            self.stride
        every = (1 << n) - 1
        prog = self._qkt(every)
        *soft, (_, red_size, red_span) = attention_epu_ops(n, self.d_head, g, u)
        prog += [instr(Opcode.EPU_SOFTMAX, op_size=size, gpr_addr=self.scores(q), span=span)
                 for q, (_, size, span) in enumerate(soft)]
        body, strides = [], []
        for q in range(g):  # SV
            for grp in range(G):
                mask = sum(1 << c for c in range(n) if c % G == grp)
                body.append(instr(Opcode.WR_INP, ch_mask=mask, op_size=U,
                                  gpr_addr=self.scores(q) + grp * U, gbuf_idx=q * U))
                strides.append((ModiField.GPR_ADDR, u * n))
            for d in range(D):
                body.append(instr(Opcode.MAC, ch_mask=every, op_size=U,
                                  col=u * w + d * U, gbuf_idx=q * U, out_idx=q * D + d))
                strides.append((ModiField.COL, S))
        prog += self._loop(body, strides)
        prog.append(instr(Opcode.RD_OUT, ch_mask=every, op_size=g * D, gpr_addr=self.partials,
                          out_idx=0))
        prog.append(instr(Opcode.EPU_REDUCE, op_size=red_size, gpr_addr=self.partials,
                          dst_addr=self.out(0), span=red_span))
        return _checked(prog, hub, self.describe())

    def hfp_program(self) -> list[int]:
        """Head-first placement: every command to ``channel`` alone. QK^T
        as under TCP on one channel, its score beats ``n_channels`` GPR
        words apart; per query a softmax over them (span ``n_channels``),
        padded to the ``unroll`` words an SV iteration reads; SV writes the
        probability words to GBuf one by one (a WR-INP reads consecutive
        GPR words, these are a stride apart) and MACs them into ``D`` OBuf
        entries per query; one RD-OUT of the results, no reduction."""
        hub, n, u, g = self.hub, self.hub.n_channels, self.unroll, self.group
        w, D, S = self.words, self.dims_per_bank, self.stride
        mask = 1 << self.channel
        prog = self._qkt(mask)
        prog += [instr(Opcode.EPU_SOFTMAX, op_size=size, gpr_addr=self.scores(q) + self.home,
                       span=span)
                 for q, (_, size, span) in enumerate(
                     attention_epu_ops(n, self.d_head, g, u, hfp=True))]
        body, strides = [], []
        for q in range(g):  # SV: the iteration's u probability words, then the MACs
            for k in range(u):
                body.append(instr(Opcode.WR_INP, ch_mask=mask, op_size=1,
                                  gpr_addr=self.scores(q) + self.home + k * n,
                                  gbuf_idx=q * u + k))
                strides.append((ModiField.GPR_ADDR, u * n))
            for d in range(D):
                body.append(instr(Opcode.MAC, ch_mask=mask, op_size=u, col=u * w + d * u,
                                  gbuf_idx=q * u, out_idx=q * D + d))
                strides.append((ModiField.COL, S))
        prog += self._loop(body, strides)
        prog.append(instr(Opcode.RD_OUT, ch_mask=mask, op_size=g * D, gpr_addr=self.partials,
                          out_idx=0))
        return _checked(prog, hub, self.describe())

    def _qkt(self, mask: int) -> list[int]:
        """The queries' WR-INP and the QK^T loop on the channels of
        ``mask``: per key slot and query, a MAC into its own OBuf entry and
        an RD-OUT of the scores (beat of channel ``c`` at ``gpr + c``)."""
        n, u, g, w = self.hub.n_channels, self.unroll, self.group, self.words
        prog = [instr(Opcode.WR_INP, ch_mask=mask, op_size=g * w, gpr_addr=self.query(0),
                      gbuf_idx=0)]
        body, strides = [], []
        for k in range(u):  # each query over slot k's open row (row reuse)
            for q in range(g):
                o = k * g + q
                body.append(instr(Opcode.MAC, ch_mask=mask, op_size=w, col=k * w,
                                  gbuf_idx=q * w, out_idx=o))
                body.append(instr(Opcode.RD_OUT, ch_mask=mask, op_size=1,
                                  gpr_addr=self.scores(q) + k * n, out_idx=o))
                strides += [(ModiField.COL, self.stride), (ModiField.GPR_ADDR, u * n)]
        return prog + self._loop(body, strides)

    def _loop(self, body: list[int], strides: list[tuple[ModiField, int]]) -> list[int]:
        """A DYN-LOOP over an iteration's tokens: one DYN-MODI per word of
        ``body`` (``strides``: its field and stride), then ``body``."""
        modis = [instr(Opcode.DYN_MODI, target=len(body) + i, field_sel=f, stride=s)
                 for i, (f, s) in enumerate(strides)]
        return [instr(Opcode.DYN_LOOP, body_len=len(modis) + len(body),
                      t_div=self.tokens_per_iteration), *modis, *body]

    # ---- placement -----------------------------------------------------------------
    def key_words(self, token: int) -> list[tuple[int, int, int]]:
        """(channel, bank, virtual word address) of each word of key ``token``."""
        n = self.used
        s = token // (LANES * n)
        c, b = (token // LANES) % n + self.home, token % LANES
        base = s // self.unroll * self.stride + s % self.unroll * self.words
        return [(c, b, base + w) for w in range(self.words)]

    def value_word(self, token: int, dim: int) -> tuple[int, int, int, int]:
        """(channel, bank, virtual word address, lane) of element ``dim`` of
        value ``token``."""
        n, G, U = self.used, self.token_groups, self.chunks
        chunk = token // LANES
        i, r = divmod(chunk, self.unroll * n)
        grp, j = divmod(r, U)
        blocks = n // G
        d, blk = divmod(dim // LANES, blocks)
        c, b = blk * G + grp + self.home, dim % LANES
        return c, b, i * self.stride + self.unroll * self.words + d * U + j, token % LANES

    def describe(self) -> str:
        where = (f"channel {self.channel} of {self.hub.n_channels} (HFP)" if self.hfp
                 else f"{self.hub.n_channels} channels")
        return (f"attention d_head={self.d_head} group={self.group} unroll={self.unroll} "
                f"max_tokens={self.max_tokens} on {where}")


@dataclass(frozen=True)
class FcLayout:
    """``y = W x`` (an FC GEMV; ``W`` is ``d_out x d_in``) for one request on
    ``hub``: ``W``'s rows in the banks from virtual word ``base``, ``x`` at
    GPR word ``x_at`` and ``y`` at ``y_at`` of the request's region.

    Row ``r`` of ``W`` sits in channel ``(r // 16) % N``, bank ``r % 16``
    (its bank's MAC computes it), pass ``p = r // (16 N)``: its ``d_in / 16``
    words at ``va = base + p d_in / 16 + w``. An all-bank MAC of pass ``p``
    over the input in GBuf accumulates ``16 N`` rows at once, in OBuf
    entry ``p % E`` (``E`` OBuf entries); after ``E`` passes one RD-OUT puts
    row ``r`` in GPR word ``y_at + r // 16``, lane ``r % 16``. An input
    longer than the GBuf is taken in blocks of ``gbuf_entries`` words, each
    written once per ``E`` passes, the passes accumulating over the blocks.
    The ``passes x N`` words from ``y_at`` are written (rows past ``d_out``
    hold whatever the unused banks compute)."""

    hub: HubConfig
    d_in: int
    d_out: int
    base: int = 0
    x_at: int = 0
    y_at: int | None = None

    def __post_init__(self):
        cfg, need = self.hub.channel, []
        if cfg.banks != LANES:
            need.append(f"{LANES} banks per channel (a bank's result is one RD-OUT lane), "
                        f"not {cfg.banks}")
        for name, v in (("d_in", self.d_in), ("d_out", self.d_out)):
            if v <= 0 or v % LANES:
                need.append(f"{name} a positive multiple of {LANES}, not {v}")
        if self.base < 0 or self.x_at < 0 or (self.y_at is not None and self.y_at < 0):
            need.append("base, x_at and y_at >= 0")
        if need:
            raise ValueError("FC lowering needs " + "; ".join(need))
        if self.y_at is None:
            object.__setattr__(self, "y_at", self.x_at + self.words_in)
        if self.gpr_words > self.hub.gpr_entries:
            raise ValueError(f"{self.describe()} does not fit the HUB: GPR entries: "
                             f"{self.gpr_words} > {self.hub.gpr_entries}")

    @property
    def words_in(self) -> int:
        return self.d_in // LANES

    @property
    def passes(self) -> int:
        """All-bank MAC passes: ``16 N`` rows each."""
        return -(-self.d_out // (LANES * self.hub.n_channels))

    @property
    def block(self) -> int:
        """Input words in GBuf at once."""
        return min(self.words_in, self.hub.channel.gbuf_entries)

    @property
    def va_words(self) -> int:
        """Virtual words ``W`` takes in every bank (from ``base``)."""
        return self.passes * self.words_in

    @property
    def gpr_words(self) -> int:
        return max(self.x_at + self.words_in, self.y_at + self.passes * self.hub.n_channels)

    def program(self) -> list[int]:
        hub, n, wi, k = self.hub, self.hub.n_channels, self.words_in, self.block
        every, cols, e_max = (1 << n) - 1, hub.channel.cols, hub.channel.obuf_entries
        blocks = [(j, min(k, wi - j)) for j in range(0, wi, k)]

        def wr_inp(j, size):
            return instr(Opcode.WR_INP, ch_mask=every, op_size=size, gpr_addr=self.x_at + j,
                         gbuf_idx=0)

        prog = [wr_inp(*blocks[0])] if len(blocks) == 1 else []
        for first in range(0, self.passes, e_max):
            group = range(first, min(first + e_max, self.passes))
            for j, size in blocks:
                if len(blocks) > 1:
                    prog.append(wr_inp(j, size))
                for e, p in enumerate(group):
                    va = self.base + p * wi + j
                    prog.append(instr(Opcode.MAC, ch_mask=every, op_size=size, row=va // cols,
                                      col=va % cols, gbuf_idx=0, out_idx=e))
            prog.append(instr(Opcode.RD_OUT, ch_mask=every, op_size=len(group),
                              gpr_addr=self.y_at + first * n, out_idx=0))
        return _checked(prog, hub, self.describe())

    def weight_words(self, weights: np.ndarray) -> dict[tuple[int, int, int], np.ndarray]:
        """Every bank word ``weights`` (``(d_out, d_in)`` BF16 bits) fills,
        keyed (channel, bank, va)."""
        if weights.shape != (self.d_out, self.d_in):
            raise ValueError(f"weights of shape {weights.shape}, not {(self.d_out, self.d_in)}")
        n, wi = self.hub.n_channels, self.words_in
        words = {}
        for r in range(self.d_out):
            p, c, b = r // (LANES * n), (r // LANES) % n, r % LANES
            for w in range(wi):
                words[(c, b, self.base + p * wi + w)] = weights[r, w * LANES:(w + 1) * LANES]
        return words

    def describe(self) -> str:
        return f"FC {self.d_out}x{self.d_in} on {self.hub.n_channels} channels"


def small_attention_hub(n_channels: int = 2) -> HubConfig:
    """The small module the lowering's tests run: ``small_config``'s
    channel with 16 banks (a score word per RD-OUT), 32 GBuf and 4 OBuf
    entries, 2-row chunks."""
    from golden.config import small_config

    ch = small_config().replace(banks=LANES, gbuf_entries=32, obuf_entries=4)
    return HubConfig(channel=ch, n_channels=n_channels,
                     chunk_bytes=n_channels * LANES * 2 * ch.cols * 32, instr_depth=64,
                     requests=4, chunks_per_request=8, gpr_entries=1024, max_modis=8)


def kv_image(layout: AttentionLayout, keys: np.ndarray, values: np.ndarray
             ) -> dict[tuple[int, int, int], np.ndarray]:
    """Every bank word the K and V of ``keys``/``values`` (``(T, d_head)``
    BF16 bits) fill, keyed (channel, bank, va): 16 BF16 lanes, zeros where
    no token is placed yet."""
    words: dict[tuple[int, int, int], np.ndarray] = {}
    for t in range(len(keys)):
        for w, key in enumerate(layout.key_words(t)):
            words[key] = keys[t, w * LANES:(w + 1) * LANES]
        for dim in range(layout.d_head):
            c, b, va, lane = layout.value_word(t, dim)
            word = words.setdefault((c, b, va), np.zeros(LANES, np.uint16))
            word[lane] = values[t, dim]
    return words
