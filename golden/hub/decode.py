"""A small transformer decoded token by token on the golden PIM module (host
side, not hardware; docs/lowering.md "Decode"), beside a numpy float32
reference of the same model.

The model (``TinyModel``): token embedding, ``layers`` pre-norm blocks
(RMSNorm; attention with ``heads`` query heads over ``kv_heads`` KV heads,
GQA when fewer; a SiLU-gated MLP), a final RMSNorm and an LM head. Seeded
random BF16 weights; no positional encoding (a host applies RoPE to q and k
before they reach the GPR and the banks, so the PIM module does not see
it). Weights are ``W x`` matrices: Q, K and V fused into one, gate and up
fused into one.

On the module (``PimDecoder``), every GEMV runs as a DPA program:

* **FC**: one request per batch slot maps the weight chunks (the same
  physical chunks for every slot); its region holds the GEMV's input at
  word 0 and output at ``FC_OUT``. Each matrix has its ``FcLayout``
  (weights placed once, at consecutive virtual words); a GEMV loads its
  program and STEPs with every other request skipped.
* **Attention**: one request per (slot, layer, KV head), ``AttentionLayout``
  placement; its chunks are granted with GROW as its KV grows and released
  with it. Each token, the host copies the K words from the FC output to
  the banks with RAW WRs straight from the GPR, writes V (a V word is 16
  tokens of one dimension; the host keeps the word being filled), copies
  the group's queries into the request's region, then STEPs the layer's
  requests: T_cur advances by itself.
* **Host**: embedding, RMSNorm, residual adds, SiLU, the argmax, in float32;
  what it puts in the GPR is rounded to BF16.

A batch of sequences of unequal prompt and output lengths decodes in lock
step: a sequence takes its prompt's tokens, then its own greedy tokens;
when it has produced its tokens, its requests are released and the next
waiting sequence takes the slot (on chunks that hold the last one's data)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.config import HubConfig
from golden.hub.fabric import TimedHub
from golden.hub.lowering import AttentionLayout, FcLayout, small_attention_hub
from golden.hub.module import Hub
from golden.hub.session import KEY_STAGING, ChunkAllocator, HostCall
from golden.isa import LANES, HostOp, HostStatus, Opcode
from golden.streams import Command

FC_TOKENS_PER_CHUNK = 1 << 24  # an FC program has no loop: T_cur never limits it
#: the documented bound on a decoded step's worst logit error relative to
#: the reference's largest logit: activations are rounded to BF16 at every
#: GPR crossing (GEMV inputs and outputs, scores, probabilities, partial
#: sums) through two layers
LOGIT_BOUND = 2 ** -5


@dataclass(frozen=True)
class TinyModel:
    layers: int = 2
    d_model: int = 64
    heads: int = 2
    kv_heads: int = 2
    d_head: int = 32
    d_ff: int = 128
    vocab: int = 64
    seed: int = 0

    def __post_init__(self):
        for name in ("layers", "d_model", "heads", "kv_heads", "d_head", "d_ff", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyModel.{name} must be >= 1, not {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads})")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def qkv_rows(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.d_head

    def matrices(self) -> dict[str, tuple[int, int]]:
        """Every GEMV's ``(d_out, d_in)``, keyed ``L{l}.{qkv,o,gate_up,down}``
        and ``lm_head``."""
        d, hd = self.d_model, self.heads * self.d_head
        out = {}
        for layer in range(self.layers):
            out |= {f"L{layer}.qkv": (self.qkv_rows, d), f"L{layer}.o": (d, hd),
                    f"L{layer}.gate_up": (2 * self.d_ff, d), f"L{layer}.down": (d, self.d_ff)}
        return out | {"lm_head": (self.vocab, d)}

    def weights(self) -> dict[str, np.ndarray]:
        """BF16 bits of every matrix and of the embedding (``vocab x d_model``);
    attention's ``1 / sqrt(d_head)`` is folded into the query rows, as
    deployments do (the EPU's softmax takes the scores as they are)."""
        rng = np.random.default_rng(self.seed)
        w = {"embed": numerics.float_to_bf16(rng.standard_normal((self.vocab, self.d_model)))}
        for name, (rows, cols) in self.matrices().items():
            m = rng.standard_normal((rows, cols)) / np.sqrt(cols)
            if name.endswith(".qkv"):  # softmax's 1 / sqrt(d_head), folded into W_q
                m[:self.heads * self.d_head] /= np.sqrt(self.d_head)
            w[name] = numerics.float_to_bf16(m)
        return w


def rmsnorm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return x / np.sqrt(np.mean(x * x) + np.float32(1e-6))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


def _f32(bits: np.ndarray) -> np.ndarray:
    return numerics.bf16_to_float(bits).astype(np.float32)


class Reference:
    """The model in numpy float32 (weights the same BF16 values), one
    sequence, token by token with a float32 KV cache."""

    def __init__(self, model: TinyModel, weights: dict[str, np.ndarray]):
        self.m, self.w = model, {k: _f32(v) for k, v in weights.items()}
        self.keys = [[] for _ in range(model.layers)]
        self.values = [[] for _ in range(model.layers)]

    def step(self, token: int) -> np.ndarray:
        m, w, dh = self.m, self.w, self.m.d_head
        h = w["embed"][token].copy()
        for layer in range(m.layers):
            qkv = w[f"L{layer}.qkv"] @ rmsnorm(h)
            q = qkv[:m.heads * dh].reshape(m.heads, dh)
            kv = qkv[m.heads * dh:].reshape(2, m.kv_heads, dh)
            self.keys[layer].append(kv[0])
            self.values[layer].append(kv[1])
            k, v = np.array(self.keys[layer]), np.array(self.values[layer])  # (T, kv, dh)
            att = np.empty((m.heads, dh), np.float32)
            for head in range(m.heads):
                kvh = head // m.group
                s = k[:, kvh] @ q[head]
                p = np.exp(s - s.max())
                att[head] = (p / p.sum()) @ v[:, kvh]
            h = h + w[f"L{layer}.o"] @ att.reshape(-1)
            gu = w[f"L{layer}.gate_up"] @ rmsnorm(h)
            h = h + w[f"L{layer}.down"] @ (silu(gu[:m.d_ff]) * gu[m.d_ff:])
        return w["lm_head"] @ rmsnorm(h)


def decode_hub(model: TinyModel, slots: int = 2, rows: int = 256,
               channels: int = 2) -> HubConfig:
    """The module the decode runs on: ``channels`` channels of 16 banks
    (``small_attention_hub``'s) with ``rows`` rows of 8 words and 1-row
    chunks (so a KV head's chunk holds 64 tokens at ``d_head`` 32 on two
    channels and short sequences GROW), enough requests, VA2PA entries and
    GPR for ``slots`` sequences of ``model``."""
    small = small_attention_hub(channels)
    ch = small.channel.replace(cols=8, rows=rows)
    base = small.replace(channel=ch, chunk_bytes=channels * LANES * ch.cols * 32)
    words = -(-sum(FcLayout(base, i, o).va_words for o, i in model.matrices().values())
              // (base.channel.cols * base.chunk_rows))
    return base.replace(requests=slots * (1 + model.layers * model.kv_heads),
                        chunks_per_request=max(8, words + 1), instr_depth=64,
                        gpr_entries=1024)


@dataclass
class Sequence:
    prompt: list[int]
    new_tokens: int
    tokens: list[int] = field(default_factory=list)  # every token fed, prompt first
    logits: list[np.ndarray] = field(default_factory=list)  # per step

    @property
    def done(self) -> bool:
        return len(self.tokens) >= len(self.prompt) + self.new_tokens

    def next_token(self) -> int:
        n = len(self.tokens)
        return self.prompt[n] if n < len(self.prompt) else int(np.argmax(self.logits[-1]))


class RecordingHub(TimedHub):
    """The golden module in closed loop (``golden.hub.fabric.TimedHub``: each
    call's cycles in ``timings``, its answer in ``responses``) that keeps
    every host operation it is given, in order (``calls``): the session
    that replays a decode on the RTL module."""

    def __init__(self, hub: HubConfig, strict: bool = False):
        super().__init__(hub, strict)
        self.calls: list[HostCall] = []

    def host(self, op: int, req_id: int = 0, arg_a: int = 0, arg_b: int = 0, data: int = 0,
             **kw):
        self.calls.append(HostCall(HostOp(op), req_id, arg_a, arg_b, data))
        return super().host(op, req_id, arg_a, arg_b, data, **kw)


def write_words(h: Hub, req: int, words: dict[tuple[int, int, int], np.ndarray]) -> None:
    """Write bank words ``(channel, bank, va) -> 16 BF16 lanes`` of request
    ``req``'s virtual space with RAW WRs through the GPR's staging entry."""
    staging = h.hub.gpr_entries + KEY_STAGING
    for (c, b, va), lanes in words.items():
        _ok(h.host(HostOp.GPR_WRITE, arg_a=staging, data=numerics.lanes_to_word(lanes)))
        _raw_write(h, req, c, b, va, staging)


def _raw_write(h: Hub, req: int, c: int, b: int, va: int, gpr: int) -> None:
    row, col = h.translate(req, va)
    _ok(h.host(HostOp.RAW, arg_a=1 << c, arg_b=gpr,
               data=Command(Opcode.WR, bank=b, row=row, col=col).pack()))


def _ok(rsp) -> None:
    if rsp.code != HostStatus.OK:
        raise RuntimeError(f"host operation refused: {rsp}")


#: how attention is placed (``PimDecoder``): token-centric over every
#: channel, or head-first, each KV head on one channel
PARTITIONS = ("tcp", "hfp")


class PimDecoder:
    """``model`` decoded on the golden module ``hub`` (default
    ``decode_hub``) for up to ``slots`` sequences at once; the KV caches
    take chunks from the ``kv_chunks`` (default: all) after the weights'.

    ``partition`` ``tcp``: every KV head over every channel, one attention
    program. ``hfp``: (slot, KV head) pairs round-robin over the channels
    (a pair keeps its channel in every layer, as the system model's HFP),
    a program per channel (``AttentionLayout(channel=c)``), so a layer's
    attention is a STEP per channel that holds some of its requests, each
    after the program load; a physical KV chunk serves one request per
    channel (each uses its channel's part)."""

    def __init__(self, model: TinyModel, slots: int = 2, max_tokens: int = 128,
                 hub: HubConfig | None = None, kv_chunks: int | None = None,
                 partition: str = "tcp"):
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, "
                             f"not {partition!r}")
        self.m, self.slots, self.partition = model, slots, partition
        self.hub = hub or decode_hub(model, slots)
        self.h = RecordingHub(self.hub, strict=True)
        self.w = model.weights()
        n = self.hub.n_channels
        #: the attention layout of each channel (HFP), or the one of every request (TCP)
        self.layouts = ([AttentionLayout(self.hub, model.d_head, group=model.group,
                                         max_tokens=max_tokens, channel=c) for c in range(n)]
                        if partition == "hfp" else
                        [AttentionLayout(self.hub, model.d_head, group=model.group,
                                         max_tokens=max_tokens)])
        self.att = self.layouts[0]
        self.fc_in = max(model.d_model, model.d_ff, model.heads * model.d_head) // LANES
        self.fc: dict[str, FcLayout] = {}
        va = 0
        for name, (rows, cols) in model.matrices().items():
            self.fc[name] = FcLayout(self.hub, cols, rows, base=va, x_at=0, y_at=self.fc_in)
            va += self.fc[name].va_words
        per_chunk = self.hub.channel.cols * self.hub.chunk_rows
        self.weight_chunks = -(-va // per_chunk)
        self.fc_words = max(f.gpr_words for f in self.fc.values())
        att_reqs = slots * model.layers * model.kv_heads
        if slots + att_reqs > self.hub.requests:
            raise ValueError(f"{slots + att_reqs} requests needed, the HUB has "
                             f"{self.hub.requests}")
        if self.weight_chunks > self.hub.chunks_per_request:
            raise ValueError(f"the weights take {self.weight_chunks} chunks, a request maps "
                             f"{self.hub.chunks_per_request}")
        gpr = slots * self.fc_words + att_reqs * self.att.gpr_words
        if gpr > self.hub.gpr_entries + KEY_STAGING:
            raise ValueError(f"{gpr} GPR words needed, the HUB has {self.hub.gpr_entries}")
        free = self.hub.physical_chunks - self.weight_chunks
        kv_chunks = free if kv_chunks is None else kv_chunks
        if not 1 <= kv_chunks <= free:
            raise ValueError(f"kv_chunks must be in [1, {free}] (the chunks after the "
                             f"weights'), not {kv_chunks}")
        order = list(range(self.weight_chunks, self.weight_chunks + kv_chunks))
        #: per layout (HFP: per channel) the chunks its requests hold
        self.allocs = [ChunkAllocator(kv_chunks, lay.tokens_per_chunk, order=list(order))
                       for lay in self.layouts]
        for s in range(slots):  # the FC requests: every slot maps the weights
            _ok(self.h.host(HostOp.ASSIGN, s, 0, s * self.fc_words))
            for c in range(self.weight_chunks):
                _ok(self.h.host(HostOp.GROW, s, c))
        for name, f in self.fc.items():
            write_words(self.h, 0, f.weight_words(self.w[name]))
        self.active: list[Sequence | None] = [None] * slots
        self.started = 0  # sequences started so far
        self.seq_of = [-1] * slots  # the sequence (start order) in each slot
        #: every chunk granted to an attention request: (sequence, request, chunk)
        self.grants: list[tuple[int, int, int]] = []
        self.v_words: dict[tuple[int, int, int, int], np.ndarray] = {}
        self.loaded: str | None = None
        #: per STEP: (program, requests run, channel commands, EPU cycles)
        self.steps: list[tuple[str, int, int, int]] = []
        #: per STEP: the T_cur of each request it ran, in request order
        self.step_t_curs: list[tuple[int, ...]] = []
        #: per lock step (a token of every active sequence): its first host call
        self.step_calls: list[int] = []

    # ---- requests ------------------------------------------------------------
    def att_req(self, slot: int, layer: int, kv: int) -> int:
        return self.slots + (slot * self.m.layers + layer) * self.m.kv_heads + kv

    def where(self, req: int) -> int:
        """The layout (HFP: the channel) of attention request ``req``: its
        (slot, KV head) pair round-robin over the channels."""
        if self.partition == "tcp":
            return 0
        slot, rest = divmod(req - self.slots, self.m.layers * self.m.kv_heads)
        return (slot * self.m.kv_heads + rest % self.m.kv_heads) % self.hub.n_channels

    def layout(self, req: int) -> AttentionLayout:
        return self.layouts[self.where(req)]

    def alloc(self, req: int) -> ChunkAllocator:
        return self.allocs[self.where(req)]

    def att_base(self, req: int) -> int:
        return self.slots * self.fc_words + (req - self.slots) * self.att.gpr_words

    def start(self, slot: int, seq: Sequence) -> None:
        self.active[slot], self.seq_of[slot] = seq, self.started
        self.started += 1
        for layer in range(self.m.layers):
            for kv in range(self.m.kv_heads):
                req = self.att_req(slot, layer, kv)
                _ok(self.h.host(HostOp.ASSIGN, req, 1, self.att_base(req)))
                self.alloc(req).assign(req, 0)

    def finish(self, slot: int) -> None:
        self.active[slot] = None
        reqs = {self.att_req(slot, layer, kv) for layer in range(self.m.layers)
                for kv in range(self.m.kv_heads)}
        for req in sorted(reqs):
            _ok(self.h.host(HostOp.RELEASE, req))
            self.alloc(req).release(req)
        self.v_words = {k: v for k, v in self.v_words.items() if k[0] not in reqs}

    # ---- programs --------------------------------------------------------------
    def run(self, name: str, reqs: list[int]) -> None:
        """STEP program ``name`` (an FC matrix, "attention", or under HFP
        "attention@c", channel ``c``'s) for ``reqs``."""
        if self.loaded != name:
            if name.startswith("attention"):
                lay = self.layouts[int(name.partition("@")[2] or 0)]
                prog, tpc = lay.program(), lay.tokens_per_chunk
            else:
                prog, tpc = self.fc[name].program(), FC_TOKENS_PER_CHUNK
            _ok(self.h.load_program(prog, tpc))
            self.loaded = name
        skip = ((1 << self.hub.requests) - 1) & ~sum(1 << r for r in reqs)
        _ok(self.h.host(HostOp.STEP, data=skip))
        res = self.h.last_step
        if res.ran != sorted(reqs):
            raise RuntimeError(f"{name}: ran {res.ran}, not {sorted(reqs)}")
        self.step_t_curs.append(tuple(self.h.requests[r].t_cur - 1 for r in res.ran))
        self.steps.append((name, len(reqs), len(res.emissions),
                           sum(c for *_, c in res.epu_runs)))

    def gpr_in(self, base: int, values: np.ndarray) -> None:
        bits = numerics.float_to_bf16(values)
        for w in range(len(bits) // LANES):
            _ok(self.h.host(HostOp.GPR_WRITE, arg_a=base + w,
                            data=numerics.lanes_to_word(bits[w * LANES:(w + 1) * LANES])))

    def gpr_out(self, base: int, n: int) -> np.ndarray:
        return self.gpr_words_out([base + w for w in range(n // LANES)])

    def gpr_words_out(self, words: list[int]) -> np.ndarray:
        return _f32(np.concatenate([numerics.words_to_lanes(
            self.h.host(HostOp.GPR_READ, arg_a=w).data) for w in words]))

    def attention(self, reqs: list[int]) -> None:
        """STEP a layer's attention requests: one program (TCP), or a STEP
        per channel that holds some of them (HFP)."""
        if self.partition == "tcp":
            self.run("attention", reqs)
            return
        for c in range(self.hub.n_channels):
            mine = [r for r in reqs if self.where(r) == c]
            if mine:
                self.run(f"attention@{c}", mine)

    def fc_step(self, name: str, slots: list[int], xs: dict[int, np.ndarray]) -> dict:
        for s in slots:
            self.gpr_in(s * self.fc_words, xs[s])
        self.run(name, slots)
        return {s: self.gpr_out(s * self.fc_words + self.fc_in, self.fc[name].d_out)
                for s in slots}

    # ---- one token of every active sequence -----------------------------------------
    def step(self) -> None:
        m, dh = self.m, self.m.d_head
        self.step_calls.append(len(self.h.calls))
        slots = [s for s, q in enumerate(self.active) if q is not None]
        h = {}
        for s in slots:
            seq = self.active[s]
            seq.tokens.append(seq.next_token())
            h[s] = _f32(self.w["embed"][seq.tokens[-1]])
        for layer in range(m.layers):
            qkv = self.fc_step(f"L{layer}.qkv", slots, {s: rmsnorm(h[s]) for s in slots})
            reqs = []
            for s in slots:
                t = len(self.active[s].tokens) - 1  # this token's position
                y = s * self.fc_words + self.fc_in  # the QKV output in the GPR
                for kv in range(m.kv_heads):
                    req = self.att_req(s, layer, kv)
                    reqs.append(req)
                    att = self.layout(req)
                    for c in self.alloc(req).grow(req, t + 1):
                        _ok(self.h.host(HostOp.GROW, req, c))
                        self.grants.append((self.seq_of[s], req, c))
                    k_at = y + (m.heads + kv) * dh // LANES
                    for w, (c, b, va) in enumerate(att.key_words(t)):
                        _raw_write(self.h, req, c, b, va, k_at + w)
                    v = numerics.float_to_bf16(qkv[s][(m.heads + m.kv_heads + kv) * dh:][:dh])
                    for dim in range(dh):
                        c, b, va, lane = att.value_word(t, dim)
                        word = self.v_words.setdefault((req, c, b, va), np.zeros(LANES, np.uint16))
                        word[lane] = v[dim]
                        write_words(self.h, req, {(c, b, va): word})
                    q = qkv[s][kv * m.group * dh:(kv + 1) * m.group * dh]
                    self.gpr_in(self.att_base(req) + att.query(0), q)
            self.attention(reqs)
            xs = {}
            for s in slots:
                xs[s] = np.concatenate([self._attention_out(self.att_req(s, layer, kv))
                                        for kv in range(m.kv_heads)])
            o = self.fc_step(f"L{layer}.o", slots, xs)
            for s in slots:
                h[s] = h[s] + o[s]
            gu = self.fc_step(f"L{layer}.gate_up", slots, {s: rmsnorm(h[s]) for s in slots})
            down = self.fc_step(f"L{layer}.down", slots, {
                s: silu(gu[s][:m.d_ff]) * gu[s][m.d_ff:] for s in slots})
            for s in slots:
                h[s] = h[s] + down[s]
        logits = self.fc_step("lm_head", slots, {s: rmsnorm(h[s]) for s in slots})
        for s in slots:
            self.active[s].logits.append(logits[s])

    def _attention_out(self, req: int) -> np.ndarray:
        """Request ``req``'s attention output, its group's query heads in turn."""
        lay, base = self.layout(req), self.att_base(req)
        return self.gpr_words_out([base + w for q in range(self.m.group)
                                   for w in lay.out_words(q)])


def decode(model: TinyModel, sequences: list[Sequence], slots: int = 2,
           max_tokens: int = 128, kv_chunks: int | None = None,
           hub: HubConfig | None = None, partition: str = "tcp") -> PimDecoder:
    """Decode ``sequences`` on the golden module, ``slots`` at a time in
    lock step; a finished sequence's slot goes to the next waiting one
    (``PimDecoder`` for ``kv_chunks``, ``hub`` and ``partition``)."""
    for i, q in enumerate(sequences):
        if not q.prompt or q.new_tokens < 0:
            raise ValueError(f"sequence {i}: a prompt of at least one token and new_tokens "
                             f">= 0 (got {len(q.prompt)} and {q.new_tokens})")
        bad = [t for t in q.prompt if not 0 <= t < model.vocab]
        if bad:
            raise ValueError(f"sequence {i}: token {bad[0]} outside the vocabulary "
                             f"[0, {model.vocab})")
    longest = max(len(q.prompt) + q.new_tokens for q in sequences)
    if longest > max_tokens:
        raise ValueError(f"a sequence of {longest} tokens exceeds max_tokens={max_tokens}")
    dec = PimDecoder(model, slots, max_tokens, hub=hub, kv_chunks=kv_chunks,
                     partition=partition)
    waiting = deque(sequences)
    while waiting or any(dec.active):
        for s in range(slots):
            if dec.active[s] is None and waiting:
                dec.start(s, waiting.popleft())
        dec.step()
        for s, q in enumerate(dec.active):
            if q is not None and q.done:
                dec.finish(s)
    return dec


def reference_logits(model: TinyModel, tokens: list[int]) -> list[np.ndarray]:
    """numpy float32 logits after each of ``tokens`` (teacher-forced)."""
    ref = Reference(model, model.weights())
    return [ref.step(t) for t in tokens]


def random_sequences(model: TinyModel, prompt_lengths: list[int], new_tokens: list[int],
                     seed: int = 0) -> list[Sequence]:
    """Sequences of random prompts (``seed``) of the given lengths, each to
    produce its number of new tokens."""
    if len(prompt_lengths) != len(new_tokens):
        raise ValueError(f"{len(prompt_lengths)} prompt lengths, {len(new_tokens)} "
                         f"new-token counts")
    rng = np.random.default_rng(seed)
    return [Sequence([int(t) for t in rng.integers(0, model.vocab, n)], k)
            for n, k in zip(prompt_lengths, new_tokens, strict=True)]


def compare(model: TinyModel, sequences: list[Sequence]) -> list[dict]:
    """Every decoded sequence's logits against the float32 reference fed
    the same tokens: per sequence the tokens, the worst logit error
    relative to the reference's largest logit, and the steps whose greedy
    token differs (with the reference's top-two gap there: a near tie when
    below the error); ``step_errors`` holds each step's error."""
    rows = []
    for q in sequences:
        errs, differ = [], []
        for i, (got, want) in enumerate(zip(q.logits, reference_logits(model, q.tokens),
                                            strict=True)):
            scale = float(np.abs(want).max())
            errs.append(float(np.abs(got - want).max()) / scale)
            if np.argmax(got) != np.argmax(want):
                top = np.sort(want)
                differ.append({"step": i, "error": errs[-1],
                               "reference_gap": float(top[-1] - top[-2]) / scale})
        rows.append({"prompt": len(q.prompt), "new_tokens": q.new_tokens, "tokens": q.tokens,
                     "max_error": max(errs), "step_errors": errs, "greedy_differs": differ})
    return rows


def program_kind(name: str) -> str:
    """``attention`` or ``fc``: the kind of a ``PimDecoder.steps`` program."""
    return "attention" if name.startswith("attention") else "fc"


def decode_run(model: TinyModel, prompt_lengths: list[int], new_tokens: list[int],
               slots: int = 2, seed: int = 0, max_tokens: int = 128,
               kv_chunks: int | None = None, channels: int = 2, partition: str = "tcp",
               policy: str | None = None) -> tuple[PimDecoder, list[Sequence]]:
    """Decode ``random_sequences`` on the golden module: ``decode_hub`` with
    ``channels`` channels (their controller ``policy``; None: its default),
    attention placed by ``partition``."""
    seqs = random_sequences(model, prompt_lengths, new_tokens, seed)
    hub = decode_hub(model, slots, channels=channels)
    if policy is not None:
        hub = hub.replace(channel=hub.channel.replace(policy=policy))
    return decode(model, seqs, slots, max_tokens, kv_chunks, hub=hub,
                  partition=partition), seqs


def decode_study(model: TinyModel, prompt_lengths: list[int], new_tokens: list[int],
                 slots: int = 2, seed: int = 0, max_tokens: int = 128,
                 kv_chunks: int | None = None, channels: int = 2,
                 partition: str = "tcp") -> dict:
    """``decode_run``, its sequences ``compare``d with the float32 reference
    (``decode_summary``)."""
    return decode_summary(*decode_run(model, prompt_lengths, new_tokens, slots, seed,
                                      max_tokens, kv_chunks, channels, partition))


def module_cycles(dec: PimDecoder, timings) -> dict:
    """The module's cycles of ``dec``'s session from each host call's
    ``accepted`` and ``responded`` cycles (``timings``: the golden module
    in closed loop's, ``TimedHub.timings``, or an RTL record's calls): per
    program kind (attention, FC) its STEPs' cycles (STEP accepted to its
    response popped: the decoder's expansion, the channels' work, the EPU
    and every read beat in the GPR), per lock step (a token of every active
    sequence) from its first host call to its last response, and the last
    response's cycle."""
    calls = dec.h.calls
    steps = [r for c, r in zip(calls, timings, strict=True) if c.op == HostOp.STEP]
    programs: dict[str, dict] = {}
    for (name, *_), r in zip(dec.steps, steps, strict=True):
        row = programs.setdefault(program_kind(name),
                                  {"steps": 0, "cycles": 0, "max_step_cycles": 0})
        row["steps"] += 1
        row["cycles"] += r.responded - r.accepted
        row["max_step_cycles"] = max(row["max_step_cycles"], r.responded - r.accepted)
    bounds = [*dec.step_calls, len(calls)]
    lock = [timings[bounds[i + 1] - 1].responded - timings[bounds[i]].accepted
            for i in range(len(bounds) - 1)]
    return {"last_response": timings[-1].responded if timings else 0,
            "programs": programs, "lock_step_cycles": lock}


def decode_summary(dec: PimDecoder, seqs: list[Sequence]) -> dict:
    """A decode's sequences against the float32 reference, with the
    programs' totals (STEPs, requests run, channel commands, EPU cycles)
    and the module's cycles (``module_cycles``, the golden module in
    closed loop)."""
    model, slots = dec.m, dec.slots
    rows = compare(model, seqs)
    by = {}
    for name, reqs, cmds, epu_cycles in dec.steps:
        row = by.setdefault(program_kind(name), dict.fromkeys(("steps", "requests", "commands",
                                                               "epu_cycles"), 0))
        for key, v in zip(("steps", "requests", "commands", "epu_cycles"),
                          (1, reqs, cmds, epu_cycles), strict=True):
            row[key] += v
    return {"model": {k: getattr(model, k) for k in model.__dataclass_fields__},
            "slots": slots, "channels": dec.hub.n_channels, "partition": dec.partition,
            "policy": dec.hub.channel.policy, "hub": dec.hub.describe(),
            "tokens_per_chunk": dec.att.tokens_per_chunk, "weight_chunks": dec.weight_chunks,
            "sequences": rows, "programs": by,
            "cycles": module_cycles(dec, dec.h.timings)}
