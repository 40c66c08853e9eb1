"""PIM-SHERPA: prefill copy/compute timing, TTFT and capacity
(DESIGN.md §2.7, REFERENCE.md). The layouts and the copy itself are in
``golden/system/sherpa.py``.

Decode runs the FC layers on the PIM, which needs the weights in the
PIM-aware layout in a non-cacheable region. Prefill runs them as host GEMMs
over the input tokens, which want the host-friendly layout in a cacheable
region. The methods compared:

``duplication``
    Both layouts kept: no copies, twice the FC weights.
``remap``
    An address-remapping memory controller lets the host read the PIM-aware
    copy in place: no copies, no extra memory, but new hardware (the ideal
    comparison point).
``owr``
    Online weight rearrangement: one cacheable buffer of the largest
    matrix; each matrix is copied (swizzled) into it, then its GEMM runs.
``ddb``
    DRAM double buffering: two such buffers; the next matrix is copied
    while the current GEMM runs.
``ddb-paper``
    DDB as the paper assigns its buffers (the issue's summary of it): two
    H x 4H buffers; a layer's Q, K, V and O weights together in buffer 0,
    the first FFN matrix (gate) copied and run in quarters, the next
    layer's Q/K/V/O copied during the last FFN GEMM (down); no copy starts
    while a memory-bound GEMM runs, and the copier waits for a layer's end
    before the next layer's FFN copies (per-layer synchronization).
``ddb-balanced``
    DDB with the copy split into pieces (``split_bytes``) streaming through
    the same two buffers used as one ring: the large FFN weights are partly
    copied during the earlier, shorter Q/K/V/O GEMMs and attention, so the
    copier never waits for a whole buffer to drain.

Timing (REFERENCE.md, Table 2 of the paper): with ``t`` the time to stream
a matrix's bytes at the host's DRAM bandwidth, a GEMM over ``SL`` tokens
takes ``max(1, SL / (FLOP/B)) t``; a copy takes 3 t (read the non-cacheable
source, read the destination line, write it back); serial execution adds,
overlapped execution takes the maximum (the copier and the GEMM do not slow
each other: ``bandwidth = "separate"``). By default they share the DRAM's
bandwidth (``pipeline``): a copy's three transactions take 3/4 of it at
the measured 4 t, a memory-bound GEMM all of it, and together both slow
by their sum. Attention (QK^T and SV, causal, 2 SL^2 q_dim FLOP per layer)
runs between the V and O GEMMs at the host's GEMM rate and overlaps copies
like a GEMM with no weights. TTFT covers the decoder layers; the embedding
lookup and the last token's LM head (a GEMV on the PIM) are common to every
method and left out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from golden.channel import ChannelModel
from golden.config import load_profile, load_profile_data
from golden.system.reference import (
    SHERPA_HOST,
    SHERPA_LATENCY_MODELS,
    SHERPA_MODELS,
    SherpaHost,
    SherpaModel,
)
from golden.system.sherpa import (
    AddressMap,
    Geometry,
    PimAwareLayout,
    gemv_channel_commands,
    pim_padded,
)
from golden.system.sweep import significant

METHODS = ("duplication", "remap", "owr", "ddb", "ddb-balanced", "ddb-paper")
SEQ_LENS = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096)
SPLIT_BYTES = 1 << 20
GIB = 1 << 30
#: The PIM device decode runs on (golden/profiles/lpddr5x_pim.toml).
PIM_PROFILE = "lpddr5x-pim"
#: Fast mode of ``pim_gemv_cycles``: the first tiles run cycle-exact, then
#: each further tile costs the last one's cycles.
FAST_TILES = 3
#: (input tokens, generated tokens) of the end-to-end comparison.
E2E_POINTS = ((64, 64), (256, 256), (1024, 256), (1024, 1024))
#: NC-GEMM: prompt tokens one read of a weight burst serves when GEMMs read
#: the non-cacheable region (no cache reuse across token tiles; project
#: assumption: an 8-token register tile).
NC_GEMM_TOKENS = 8


@dataclass(frozen=True)
class Stage:
    """One step of prefill: a GEMM over ``nbytes`` of weights (0 for
    attention) that takes ``compute`` seconds."""

    name: str
    nbytes: int
    compute: float


def read_time(nbytes: int, host: SherpaHost = SHERPA_HOST) -> float:
    return nbytes / (host.bandwidth_gbs * 1e9)


def gemm_time(nbytes: int, seq_len: int, host: SherpaHost = SHERPA_HOST) -> float:
    return max(1.0, seq_len / host.flop_per_byte) * read_time(nbytes, host)


def copy_time(nbytes: int, host: SherpaHost = SHERPA_HOST) -> float:
    return host.copy_factor * read_time(nbytes, host)


#: The input lengths of the latency table (``latency_table``).
TABLE_SEQ_LENS = (1, 2, 4, 8, 12, 16, 32, 64)


def latency_table(seq_lens=TABLE_SEQ_LENS, host: SherpaHost = SHERPA_HOST) -> list[dict]:
    """REFERENCE.md's latency model (the paper's Table 2) in units of ``t``,
    one matrix's read time: a GEMM over SL tokens ``max(1, SL / FLOP-per-
    byte) t``, an online rearrangement ``3 t``; serial execution the sum,
    overlapped the maximum; and the overlap's saving. With ``host.flop``
    ``table`` (FLOP/B 4) this is the table as REFERENCE.md states it; with
    the host's own 4.70 beside it."""
    rows = []
    for sl in seq_lens:
        gemm = max(1.0, sl / host.flop_per_byte)
        copy = float(host.copy_transactions)
        rows.append({"seq_len": sl, "gemm_t": round(gemm, 4), "rearrange_t": copy,
                     "serial_t": round(gemm + copy, 4), "overlapped_t": round(max(gemm, copy), 4),
                     "overlapped_over_serial": round(max(gemm, copy) / (gemm + copy), 4)})
    return rows


def attention_time(model: SherpaModel, seq_len: int, host: SherpaHost = SHERPA_HOST) -> float:
    return 2 * seq_len * seq_len * model.q_dim / (host.gflops * 1e9)


def prefill_stages(model: SherpaModel, seq_len: int,
                   host: SherpaHost = SHERPA_HOST) -> list[Stage]:
    stages = []
    for layer in range(model.layers):
        for name, n_out, n_in in model.matrices():
            nbytes = 2 * n_out * n_in
            stages.append(Stage(f"L{layer}.{name}", nbytes, gemm_time(nbytes, seq_len, host)))
            if name == "v":
                stages.append(Stage(f"L{layer}.attn", 0, attention_time(model, seq_len, host)))
    return stages


def largest_matrix_bytes(model: SherpaModel) -> int:
    return max(2 * n_out * n_in for _, n_out, n_in in model.matrices())


def pipeline(stages: list[Stage], host: SherpaHost, buffers: int,
             buffer_bytes: int, split_bytes: int | None = None, trace: bool = False,
             ring: bool = False, after: list[int] | None = None,
             quiet_memory_bound: bool = False) -> dict:
    """Schedule copies and GEMMs through cacheable buffers.

    ``split_bytes`` None: each matrix takes one whole buffer (``buffers``
    of them); its copy starts when a buffer is free, i.e. when the GEMM of
    the matrix ``buffers`` places earlier has finished. Otherwise the
    buffers form one ring of ``buffers x buffer_bytes`` and matrices are
    copied in pieces of at most ``split_bytes``; a piece is freed when its
    matrix's GEMM ends. The copier copies in program order, one piece at a
    time; a GEMM starts when its whole matrix is copied and the previous
    GEMM has ended.

    With ``host.bandwidth`` ``shared`` a copy and a GEMM running together
    share the DRAM: a copy uses ``copy_transactions / copy_factor`` of its
    bandwidth, a GEMM the share its weights' read takes of its time (all
    of it when memory-bound, an attention stage none); while the two
    together ask for more than all of it, both run slower by their sum.
    ``separate``: neither slows the other (Table 2's overlap). Returns the
    finish time and the busy times; with ``trace``, also each stage's first
    copy start, copy end, GEMM start and GEMM end.

    The paper's DDB (``ring``): each stage one piece, held in its bytes of
    the ``buffers x buffer_bytes`` ring; ``after[k]``: the stage whose GEMM
    must end before stage ``k``'s copy may start (-1: none); with
    ``quiet_memory_bound``, no copy starts while a memory-bound GEMM runs."""
    whole = split_bytes is None and not ring
    capacity = buffers if whole else buffers * buffer_bytes
    pieces: list[tuple[int, int, int]] = []  # (stage, bytes, buffer units), in program order
    left = []  # per stage: pieces not yet copied
    for k, stage in enumerate(stages):
        if stage.nbytes > buffer_bytes:
            raise ValueError(f"{stage.name}: {stage.nbytes} B does not fit a "
                             f"{buffer_bytes} B buffer")
        if whole or ring:
            sizes = [stage.nbytes] if stage.nbytes else []
        else:
            sizes = [min(split_bytes, stage.nbytes - o) for o in range(0, stage.nbytes,
                                                                       split_bytes)]
        pieces += [(k, b, 1 if whole else b) for b in sizes]
        left.append(len(sizes))
    held = [0] * len(stages)  # buffer units each stage's copied pieces hold
    copy_share = host.copy_transactions / host.copy_factor
    shared = host.bandwidth == "shared"
    first: list[float | None] = [None] * len(stages)
    copy_end = [0.0] * len(stages)
    gemm_start = [0.0] * len(stages)
    gemm_end = [0.0] * len(stages)
    t = copier_free = copy_busy = gemm_busy = copy_wait = 0.0
    ci = gi = 0
    c_left = g_left = None  # solo seconds left of the running copy piece and GEMM
    g_share = 0.0
    after = after or [-1] * len(stages)

    def may_copy() -> bool:
        k = pieces[ci][0]
        if after[k] >= gi:  # waits for that stage's GEMM to end
            return False
        return not (quiet_memory_bound and g_left is not None and g_share >= 1.0)

    while True:
        if g_left is None and gi < len(stages) and left[gi] == 0:
            stage = stages[gi]
            gemm_start[gi] = t
            g_left = stage.compute
            g_share = min(1.0, read_time(stage.nbytes, host) / stage.compute) \
                if stage.compute else 0.0
        if c_left is None and ci < len(pieces) and pieces[ci][2] <= capacity and may_copy():
            k, nbytes, units = pieces[ci]
            capacity -= units
            held[k] += units
            copy_wait += t - copier_free
            first[k] = t if first[k] is None else first[k]
            c_left = copy_time(nbytes, host)
        if c_left is None and g_left is None:
            if ci < len(pieces):
                raise ValueError(f"{stages[pieces[ci][0]].name}: the buffers cannot hold one "
                                 f"matrix")
            break
        slow = 1.0
        if shared and c_left is not None and g_left is not None:
            slow = max(1.0, copy_share + g_share)
        dt = min(x * slow for x in (c_left, g_left) if x is not None)
        t += dt
        if c_left is not None:
            copy_busy += dt
            c_left = None if c_left * slow <= dt else c_left - dt / slow
            if c_left is None:  # the piece is in
                k = pieces[ci][0]
                left[k] -= 1
                copy_end[k] = t
                ci += 1
                copier_free = t
        if g_left is not None:
            gemm_busy += dt
            g_left = None if g_left * slow <= dt else g_left - dt / slow
            if g_left is None:  # the GEMM is done: its pieces free their buffer space
                capacity += held[gi]
                held[gi] = 0
                gemm_end[gi] = t
                gi += 1
    out = {"ttft_s": t, "copy_s": copy_busy, "compute_s": gemm_busy, "copy_wait_s": copy_wait}
    if trace:
        out["stages"] = [{"stage": st.name, "copy_start": first[k],
                          "copy_end": copy_end[k] if first[k] is not None else None,
                          "gemm_start": gemm_start[k], "gemm_end": gemm_end[k]}
                         for k, st in enumerate(stages)]
    return out


def paper_buffer_bytes(model: SherpaModel) -> int:
    """One of the paper's DDB buffers: H x 4H BF16 weights."""
    return 2 * model.hidden * 4 * model.hidden


def paper_ddb_stages(model: SherpaModel, seq_len: int, host: SherpaHost = SHERPA_HOST
                     ) -> tuple[list[Stage], list[int]]:
    """The prefill's stages as the paper's DDB runs them (the gate GEMM in
    four quarters) and, per stage, the stage whose GEMM its copy waits for
    (a layer's FFN copies wait for the previous layer's last GEMM)."""
    stages, after = [], []
    last = -1  # the previous layer's down GEMM
    for st in prefill_stages(model, seq_len, host):
        layer, name = st.name.split(".")
        if name == "gate":
            for q in range(4):
                stages.append(Stage(f"{st.name}.q{q}", st.nbytes // 4, st.compute / 4))
                after.append(last)
            continue
        stages.append(st)
        after.append(last if name in ("up", "down") else -1)
        if name == "down":
            last = len(stages) - 1
    return stages, after


def ttft(model: SherpaModel, seq_len: int, method: str, host: SherpaHost = SHERPA_HOST,
         split_bytes: int = SPLIT_BYTES) -> dict:
    """TTFT (decoder layers) of one prefill of ``seq_len`` tokens."""
    stages = prefill_stages(model, seq_len, host)
    if method in ("duplication", "remap"):
        compute = sum(s.compute for s in stages)
        return {"ttft_s": compute, "copy_s": 0.0, "compute_s": compute, "copy_wait_s": 0.0}
    big = largest_matrix_bytes(model)
    if method == "owr":  # serial: each layer also creates and joins its copy threads
        out = pipeline(stages, host, 1, big)
        out["ttft_s"] += model.layers * host.owr_thread_s
        return out
    if method == "ddb-paper":
        paper, after = paper_ddb_stages(model, seq_len, host)
        return pipeline(paper, host, 2, paper_buffer_bytes(model), ring=True, after=after,
                        quiet_memory_bound=True)
    if method == "ddb":
        return pipeline(stages, host, 2, big)
    if method == "ddb-balanced":
        return pipeline(stages, host, 2, big, split_bytes)
    raise ValueError(f"unknown method {method!r} (known: {', '.join(METHODS)})")


def capacity(model: SherpaModel, geometry: Geometry | None = None, out_regs: int = 8) -> dict:
    """Bytes each method keeps resident for the weights (KV cache and
    activations are the same for all and not counted). The FC weights and
    the LM head live once in the PIM-aware layout (padded); tied
    embeddings are looked up from the LM head's copy, untied ones are an
    extra host-friendly table. Duplication holds the whole model in both
    layouts: the host-only model (the FC weights, the LM head and any
    untied embedding, host-friendly) beside the PIM-aware FC weights and
    LM head. OWR adds one buffer of the largest matrix to the PIM-aware
    copy, DDB two."""
    banks = (geometry or Geometry()).total_banks
    fc = fc_pim = 0
    for _, n_out, n_in in model.matrices():
        fc += 2 * n_out * n_in * model.layers
        rows, cols = pim_padded(n_out, n_in, banks, out_regs)
        fc_pim += 2 * rows * cols * model.layers
    head = 2 * model.vocab * model.hidden
    rows, cols = pim_padded(model.vocab, model.hidden, banks, out_regs)
    head_pim = 2 * rows * cols
    embed = 0 if model.tied_embeddings else head
    common = fc_pim + head_pim + embed
    big = largest_matrix_bytes(model)
    host_only = fc + head + embed
    methods = {"duplication": common + fc + head, "remap": common, "owr": common + big,
               "ddb": common + 2 * big, "ddb-balanced": common + 2 * big,
               "ddb-paper": common + 2 * paper_buffer_bytes(model)}
    return {
        "model": model.name,
        "host_only_bytes": host_only,
        "padding_bytes": fc_pim + head_pim - fc - head,
        "buffer_bytes": big,
        "methods": {m: {"bytes": b, "gib": round(b / GIB, 3),
                        "vs_host_only": round(b / host_only, 4)} for m, b in methods.items()},
    }


def sherpa_study(seq_lens=SEQ_LENS, host: SherpaHost = SHERPA_HOST,
                 split_bytes: int = SPLIT_BYTES, nc_tokens: int = NC_GEMM_TOKENS,
                 e2e_points=E2E_POINTS, profile: str = PIM_PROFILE) -> dict:
    """``pimorch run sherpa``: the latency table (Table 2's model, with
    FLOP/B 4 and with the host's), TTFT against input length per method for
    the latency models, their decode token on the PIM (device ``profile``)
    and on the host, the end-to-end time per method against the system
    without PIM, the memory attributes' rows, and capacity per method for
    every model."""
    latency = []
    for name in SHERPA_LATENCY_MODELS:
        model = SHERPA_MODELS[name]
        points = []
        for sl in seq_lens:
            runs = {m: ttft(model, sl, m, host, split_bytes) for m in METHODS}
            base = runs["duplication"]["ttft_s"]
            points.append({"seq_len": sl, "methods": {m: {
                "ttft_ms": round(1e3 * r["ttft_s"], 4),
                "vs_duplication": round(r["ttft_s"] / base, 4),
                "copy_ms": round(1e3 * r["copy_s"], 4),
                "copy_wait_ms": round(1e3 * r["copy_wait_s"], 4),
            } for m, r in runs.items()}})
        decode = {where: {k: round(1e3 * v, 4) for k, v in decode_token(
            model, 1024, host, where == "pim", profile).items()} for where in ("pim", "host")}
        e2e = [significant(end_to_end(model, sl, n, host, split_bytes, profile, nc_tokens))
               for sl, n in e2e_points]
        latency.append({"model": name, "points": points,
                        "ddb_hides_copies_from": hide_point(model, seq_lens, host, split_bytes),
                        "decode_token_ms_at_1024": decode, "end_to_end": e2e})
    return {
        "host": {"gflops": host.gflops, "bandwidth_gbs": host.bandwidth_gbs,
                 "flop": host.flop, "flop_per_byte": round(host.flop_per_byte, 3),
                 "copy": host.copy, "copy_factor": host.copy_factor,
                 "bandwidth": host.bandwidth,
                 "copy_transactions": host.copy_transactions,
                 "nc_copy_slowdown": host.nc_copy_slowdown,
                 "owr_thread_s": host.owr_thread_s},
        "latency_table": {m: latency_table(host=replace(host, flop=m))
                          for m in ("table", "host")},
        "split_bytes": split_bytes,
        "pim_profile": profile, "nc_gemm_tokens": nc_tokens,
        "latency": latency,
        "memory_attributes": memory_attributes(profile=profile),
        "capacity": [capacity(m) for m in SHERPA_MODELS.values()],
    }


def hide_point(model: SherpaModel, seq_lens, host: SherpaHost, split_bytes: int):
    """The first input length at which balanced DDB is within 1 % of
    duplication (the copies hidden), or None."""
    for sl in seq_lens:
        a = ttft(model, sl, "ddb-balanced", host, split_bytes)["ttft_s"]
        if a <= 1.01 * ttft(model, sl, "duplication", host)["ttft_s"]:
            return sl
    return None


# ---- decode on the LPDDR5X-PIM, end to end, NC-GEMM ---------------------------

def pim_layout(n_out: int, n_in: int, profile: str = PIM_PROFILE) -> tuple:
    """(channel configuration, PIM-aware layout) of an ``n_out x n_in``
    matrix on ``profile``'s channels (four, as REFERENCE.md's host has)."""
    cfg = load_profile(profile)
    amap = AddressMap(Geometry(banks=cfg.banks, rows=cfg.rows, cols=cfg.cols))
    return cfg, PimAwareLayout(amap, n_out, n_in, out_regs=cfg.obuf_entries)


@functools.lru_cache(maxsize=None)
def pim_gemv_cycles(n_out: int, n_in: int, profile: str = PIM_PROFILE,
                    exact: bool = False) -> int:
    """Cycles of ``y = W x`` on the PIM: one channel's stream
    (``gemv_channel_commands``) on the profile's cycle-exact channel, with
    refresh; the four channels run the same stream side by side. Fast
    mode: the first ``FAST_TILES`` tiles exactly, then every further tile
    at the last exact tile's cycles (the stream repeats tile by tile)."""
    cfg, lay = pim_layout(n_out, n_in, profile)
    tiles = lay.rows_per_bank // lay.out_regs

    def run(k):
        cmds, beats = gemv_channel_commands(lay, 0, cfg.gbuf_entries, tiles=k)
        return ChannelModel(cfg).run(cmds, [0] * len(beats)).cycles

    if exact or tiles <= FAST_TILES:
        return run(tiles)
    last = run(FAST_TILES)
    return last + (tiles - FAST_TILES) * (last - run(FAST_TILES - 1))


def decode_gemvs(model: SherpaModel, host: SherpaHost = SHERPA_HOST, pim: bool = True,
                 profile: str = PIM_PROFILE) -> tuple[float, float]:
    """(FC GEMVs, LM head) seconds of one decode token: on the PIM
    (``pim``; their cycle-exact time at the profile's clock) or on the host
    (every weight byte read at the DRAM's bandwidth). The same for every
    token, whatever its context."""
    if pim:
        tck = float(load_profile_data(profile)["t_ck_ns"]) * 1e-9
        fc = tck * model.layers * sum(pim_gemv_cycles(o, i, profile)
                                      for _, o, i in model.matrices())
        return fc, tck * pim_gemv_cycles(model.vocab, model.hidden, profile)
    fc = read_time(2 * model.layers * sum(o * i for _, o, i in model.matrices()), host)
    return fc, read_time(2 * model.vocab * model.hidden, host)


def decode_attention(model: SherpaModel, context: int, host: SherpaHost = SHERPA_HOST) -> float:
    """A decode token's attention at ``context`` tokens, on the host with
    PIM or without: the KV cache read once at the DRAM's bandwidth."""
    return read_time(2 * 2 * context * model.kv_dim * model.layers, host)


def decode_token(model: SherpaModel, context: int, host: SherpaHost = SHERPA_HOST,
                 pim: bool = True, profile: str = PIM_PROFILE) -> dict:
    """One decode token at ``context`` tokens: ``decode_gemvs`` and
    ``decode_attention``."""
    fc, head = decode_gemvs(model, host, pim, profile)
    attention = decode_attention(model, context, host)
    return {"fc_s": fc, "lm_head_s": head, "attention_s": attention,
            "token_s": fc + head + attention}


def nc_gemm_time(nbytes: int, seq_len: int, host: SherpaHost = SHERPA_HOST,
                 tokens: int = NC_GEMM_TOKENS) -> float:
    """A prefill GEMM straight from the non-cacheable PIM-aware copy (no
    copies, no buffers): its FLOPs at the host's rate, or its weight reads,
    once per ``tokens`` prompt tokens (nothing is cached between token
    tiles) at the non-cacheable region's speed (``nc_copy_slowdown``
    slower), whichever is longer."""
    compute = seq_len * nbytes / (host.gflops * 1e9)  # 2 FLOP per BF16 weight per token
    reads = -(-seq_len // tokens) * read_time(nbytes, host) * host.nc_copy_slowdown
    return max(compute, reads)


def nc_gemm_ttft(model: SherpaModel, seq_len: int, host: SherpaHost = SHERPA_HOST,
                 tokens: int = NC_GEMM_TOKENS) -> float:
    return sum(nc_gemm_time(s.nbytes, seq_len, host, tokens) if s.nbytes else s.compute
               for s in prefill_stages(model, seq_len, host))


def end_to_end(model: SherpaModel, seq_len: int, new_tokens: int,
               host: SherpaHost = SHERPA_HOST, split_bytes: int = SPLIT_BYTES,
               profile: str = PIM_PROFILE, nc_tokens: int = NC_GEMM_TOKENS) -> dict:
    """Prefill of ``seq_len`` tokens then ``new_tokens`` decode tokens (each
    at its own context length) per method, against the system without PIM
    (host-friendly weights in cacheable memory: the GEMMs of duplication,
    decode on the host). ``nc-gemm``: prefill GEMMs from the non-cacheable
    copy (``nc_gemm_ttft``), decode on the PIM."""
    attention = sum(decode_attention(model, seq_len + k, host) for k in range(new_tokens))
    host_decode = new_tokens * sum(decode_gemvs(model, host, pim=False)) + attention
    pim_decode = new_tokens * sum(decode_gemvs(model, host, True, profile)) + attention
    prefill = {m: ttft(model, seq_len, m, host, split_bytes)["ttft_s"] for m in METHODS}
    prefill["nc-gemm"] = nc_gemm_ttft(model, seq_len, host, nc_tokens)
    base = prefill["duplication"] + host_decode
    out = {"seq_len": seq_len, "new_tokens": new_tokens,
           "no_pim": {"prefill_s": prefill["duplication"], "decode_s": host_decode,
                      "total_s": base, "tokens_per_s": new_tokens / host_decode}}
    for m, p in prefill.items():
        total = p + pim_decode
        out[m] = {"prefill_s": p, "decode_s": pim_decode, "total_s": total,
                  "tokens_per_s": new_tokens / pim_decode, "speedup": base / total}
    return out


#: The memory-attribute experiment: a matrix of ``ATTR_SHAPE`` on the PIM
#: device's channels, with a host cache larger than it (``ATTR_CACHES[0]``,
#: a project assumption: the host's last-level cache is not in
#: REFERENCE.md) and one smaller.
ATTR_SHAPE = (1024, 256)
ATTR_CACHES = (8 << 20, 256 << 10)


def memory_attributes(shape=ATTR_SHAPE, caches=ATTR_CACHES, profile: str = PIM_PROFILE,
                      seed: int = 0) -> list[dict]:
    """Why decode needs the weights non-cacheable (REFERENCE.md): the same
    triggered GEMV (``golden.system.sherpa.triggered_gemv``) with the
    weights non-cacheable, and cacheable behind each cache size: a first
    pass, a second pass (the decode's next token), a pass right after the
    host's prefill GEMM read the matrix, and a second pass with the cache
    flushed before it. Each row: MAC triggers, those lost, and whether y
    equals the non-cacheable result bit for bit."""
    import numpy as np

    from golden import numerics
    from golden.system.sherpa import (
        WORD_BYTES,
        HostCache,
        host_friendly,
        host_reads,
        swizzle,
        triggered_gemv,
    )

    cfg, lay = pim_layout(*shape, profile)
    rng = np.random.default_rng(seed)
    w = numerics.float_to_bf16(rng.standard_normal(shape))
    x = numerics.float_to_bf16(rng.standard_normal(shape[1]))
    # memory up to the layout's last burst (the host copy, from 0, lies below it)
    top = int(lay.word_addresses().max()) + WORD_BYTES
    image = swizzle(host_friendly(w, top), lay)
    ref, first = triggered_gemv(image, lay, x, cfg)
    rows = [{"region": "non-cacheable", "cache_bytes": None, "pass": "any", **first,
             "correct": True, "flushed_lines": 0}]

    def row(cache, what, flushed=0):
        y, counts = triggered_gemv(image, lay, x, cfg, cache)
        rows.append({"region": "cacheable", "cache_bytes": cache.size_bytes, "pass": what,
                     **counts, "correct": bool(np.array_equal(y, ref)),
                     "flushed_lines": flushed})

    for size in caches:
        cache = HostCache(size)
        row(cache, "first")
        row(cache, "second")
        cache = HostCache(size)
        host_reads(cache, lay)
        row(cache, "after the prefill GEMM")
        flushed = cache.flush()
        row(cache, "after a flush", flushed)
    return rows
