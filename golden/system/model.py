"""Full-system decode model (PIMphony, DESIGN.md §2.4 and §4).

A system is ``modules = capacity / module_gb`` PIM modules of one kind
(``golden.system.reference.SYSTEMS``), split into ``pp`` pipeline stages of ``tp``
tensor-parallel modules. Each module has ``channels_per_module`` PIM
channels (Table IV); each is modelled as ``sub_channels`` channels of the
device profile side by side, as many as give the module Table IV's
internal bandwidth (``module_channels``). One *decode step* produces one
token for every request of the batch.

**Where the work runs.** Attention (QK^T, softmax, SV) runs on PIM for
both systems; the FC layers (QKV, O, gate, up, down) run on the xPU's
matrix units (xPU+PIM: roofline ``max(FLOPs / tflops, weight bytes /
xpu_bandwidth)``) or as GEMVs on the PIM channels, one per token
(PIM-only). Under TP a module holds ``1 / tp`` of the heads and of each FC
matrix's outputs; the outputs are all-gathered over the module link twice
per layer; a stage hands its activations to the next over the same link.

**Partitioning.** HFP maps (request, KV head) pairs to the module's
Table IV channels round-robin in request order (``hfp_channels``); a pair
keeps its channel, and its K and V, for every layer of its stage, so a
request is admitted only while every channel it lands on has room
(``hfp_admit``). Each channel runs the whole QK^T and SV of its pairs
(split over its sub-channels), so the attention phase lasts as long as
the most loaded channel, and channels without a pair sit idle. TCP splits every pair's tokens over
all channels (``ceil(T / channels)`` each, QK^T and SV alike); the SV
partial sums are reduced once in the HUB. GQA uses the row-reuse mapping
of :mod:`golden.kernels` (all queries of a group over one open KV row).

**HUB/EPU** ("reduction" in the breakdown): on the HUB's EPU a pair
costs the cycles of the attention program's EPU instructions
(``golden.hub.lowering.attention_epu_cycles``: the golden EPU's timing of
each query head's softmax and of the TCP reduction over the token groups'
partial sums), the EPU reading ``epu_lanes / 16`` GPR words a cycle
(:func:`epu_words_per_cycle`; HFP, not lowered yet: a softmax per query
head and a reduction over the pair's sub-channels). On the near-memory
processors softmax costs ``group x T`` element operations per pair, the
TCP reduction ``(channels - 1) x group x d_head``, at
:func:`vector_rate` elements per channel cycle. Under HFP the EPU
works beside the other channels: the phase lasts ``max(max over channels
of (PIM + EPU of its pairs), total EPU)``; under TCP a pair's softmax sits
between its QK^T and SV and its reduction after its SV, nothing overlapped.

**Pipeline.** The batch is split round-robin into ``pp`` micro-batches.
With ``t(m, s)`` micro-batch ``m``'s time in stage ``s``, a decode step
(every micro-batch through every stage once, each micro-batch's next token
waiting for its own previous one) lasts
``max(max_s sum_m t(m, s), max_m sum_s t(m, s))``; "bubbles" is that period
minus the average stage's busy time.

**Batch.** Requests are drawn from the dataset's context-length
distribution and admitted in order while their KV fits the capacity left
after the weights (continuous batching keeps the slots full): static
allocation reserves the context window per request, DPA whole chunks of
the current length (:func:`kv_allocation`).

Kernel cycles come from :class:`golden.system.kernel_timing.KernelTimer` (fast or
exact mode); everything else is arithmetic on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import energy
from golden.config import (
    ChannelConfig,
    ConfigError,
    check_one_of,
    load_profile,
    load_profile_data,
)
from golden.energy import COUNTS
from golden.hub.epu import OPS as EPU_OPS
from golden.hub.epu import reduce_cycles, reduce_ops, softmax_cycles, softmax_ops
from golden.hub.lowering import attention_epu_cycles, attention_epu_op_counts
from golden.isa import LANES
from golden.system import overlap, sweep
from golden.system.kernel_timing import MODES, KernelTimer, Shape
from golden.system.module_timing import AttentionModule, attention_step
from golden.system.reference import CHUNK_BYTES, CXL, GB, Gpu, Model, System

PARTITIONS = ("hfp", "tcp")
KV_SCHEMES = ("static", "dpa")
#: Scheduling baselines the "static" steps may use (REFERENCE.md: static, ping-pong).
POLICY_BASELINES = ("static", "pingpong")


@dataclass(frozen=True)
class Step:
    """One configuration of the incremental study."""

    partition: str
    policy: str
    kv: str


#: The incremental steps of the PIMphony study, in order.
STEPS = {
    "baseline": Step("hfp", "static", "static"),
    "+TCP": Step("tcp", "static", "static"),
    "+DCS": Step("tcp", "dcs", "static"),
    "+DPA": Step("tcp", "dcs", "dpa"),
}


@dataclass(frozen=True)
class Assumptions:
    """Project assumptions (no figure in REFERENCE.md); each is a scenario
    key. ``dcs_obuf_entries``: OBuf entries per channel once DCS expands the
    baseline's single output entry (REFERENCE.md gives no depth)."""

    xpu_bandwidth_tbs: float = 2.0  # xPU+PIM: weight stream to the matrix units per module
    link_gbs: float = 64.0  # module-to-module link (TP all-gather, PP hand-off)
    epu_lanes: int = 256  # lanes of the module's EPU: epu_lanes / 16 GPR words a cycle
    dcs_obuf_entries: int = 8
    baseline_policy: str = "static"  # or "pingpong": the scheduling baseline
    chunk_bytes: int = CHUNK_BYTES
    #: GPU baseline (docs/pimphony.md): the share of the datasheet's HBM
    #: bandwidth and BF16 throughput decode reaches, and PagedAttention's
    #: page (vLLM's default block size, 16 tokens).
    gpu_bandwidth_efficiency: float = 0.8
    gpu_flops_efficiency: float = 0.6
    gpu_page_tokens: int = 16
    #: xPU+PIM: 2 runs NeuPIMs' two sub-batches interleaved on
    #: dual-row-buffer banks (REFERENCE.md), always; 1 each micro-batch's
    #: FC and attention in turn; 0 the faster of the two per stage.
    xpu_subbatches: int = 0
    #: Where the weights sit in an xPU+PIM module under HFP: ``spread``, an
    #: even share in every channel; ``packed``, whole channels first, the
    #: KV in the rest. PIM-only always spreads them (its FC GEMVs use every
    #: channel).
    hfp_weights: str = "spread"
    #: PIM-only (CENT-like): lanes of a module's CXL port (CENT's simulator:
    #: 144 lanes over 32 devices, x4 each) and FLOPs per element of a
    #: vector operation (softmax, reduction, RMSNorm, RoPE, SiLU, residual)
    #: on its near-memory processors.
    cxl_lanes: int = 4
    pnm_flops_per_element: float = 4.0
    #: The serving loop (golden/system/serving.py): channel cycles a host
    #: operation (ASSIGN, GROW, RELEASE) takes on a module's HUB host
    #: interface, which serves one at a time: accepted in one cycle,
    #: answered from the response register in the next (hw/hub/host.py).
    host_op_cycles: int = 2
    #: The serving loop: how a preempted request's KV comes back, since
    #: its chunks go to others (PREEMPTIONS): ``recompute`` (a prefill of
    #: its tokens on the system's compute), ``swap`` (out to host memory
    #: through each module's link port and back), ``cheaper`` (whichever
    #: of the two costs less for that request) or ``free`` (not charged).
    preemption: str = "cheaper"
    #: Energy beside the PIM channels' (docs/energy.md, "System energy"):
    #: the xPU's matrix units per MAC (the AttAcc simulator's GPU ALU
    #: figure, 0.32 pJ for an FP16 MAC), the module link per byte (the
    #: AttAcc simulator's NVLink figure, 1.3 pJ/bit) and the HUB/EPU's or
    #: near-memory processors' vector work per element (project
    #: assumption: one ALU operation at the same 0.32 pJ).
    xpu_pj_per_mac: float = 0.32
    link_pj_per_byte: float = 10.4
    vector_pj_per_element: float = 0.32
    #: The GPU baseline's energy (docs/energy.md): a byte from HBM (the
    #: AttAcc simulator's GPU memory figure, 28.72 pJ/B), the same byte
    #: through L2, L1 and the register file once each (its 2.4 + 1.28 +
    #: 0.0675 pJ/B), its MACs at ``xpu_pj_per_mac``, NVLink at
    #: ``link_pj_per_byte``; and a GPU's static power over the step
    #: (project assumption: no published figure here).
    gpu_hbm_pj_per_byte: float = 28.72
    gpu_sram_pj_per_byte: float = 3.7475
    gpu_static_w: float = 50.0
    #: Factors on the PIM profile's energy table, ``(key, factor)`` pairs
    #: (golden.energy.scaled): the scenario's ``[energy]`` table, not an
    #: ``[assumptions]`` key.
    energy_scale: tuple = ()


def channel_config(profile: str, policy: str, asm: Assumptions) -> ChannelConfig:
    """The channel of a step: the profile's geometry, with DCS's expanded
    OBuf (and ping-pong's two halves) where the policy needs them."""
    base = load_profile(profile)
    obuf = {"dcs": asm.dcs_obuf_entries, "pingpong": max(2, base.obuf_entries)}.get(
        policy, base.obuf_entries)
    return base.replace(policy=policy, obuf_entries=obuf)


def step_policy(step: Step, asm: Assumptions) -> str:
    return asm.baseline_policy if step.policy == "static" else step.policy


def kv_allocation(model: Model, lengths: np.ndarray, scheme: str, chunk_bytes: int,
                  window: int | None = None) -> np.ndarray:
    """Bytes each request holds: its ``2 x layers x kv_heads`` K and V token
    streams in whole chunks of ``chunk_bytes / (d_head x 2 B)`` tokens, for
    the context window (static) or its current length (DPA)."""
    check_one_of("kv scheme", scheme, KV_SCHEMES)
    streams = 2 * model.layers * model.kv_heads
    tpc = chunk_bytes // (model.d_head * 2)
    if tpc < 1:
        raise ConfigError(f"chunk_bytes={chunk_bytes} holds no token of d_head {model.d_head}")
    tokens = np.full(len(lengths), window or model.window) if scheme == "static" else lengths
    return streams * -(-np.asarray(tokens, dtype=np.int64) // tpc) * chunk_bytes


def admit(model: Model, lengths: np.ndarray, scheme: str, capacity_gb: int, chunk_bytes: int,
          window: int | None = None) -> dict:
    """Requests admitted in draw order while their KV allocation fits."""
    kv_cap = capacity_gb * GB - model.weight_bytes
    per = kv_allocation(model, lengths, scheme, chunk_bytes, window)
    fits = np.cumsum(per) <= kv_cap
    batch = int(np.argmin(fits)) if not fits.all() else len(lengths)
    live = int(lengths[:batch].sum()) * model.kv_bytes_per_token
    return {"batch": batch, "kv_capacity_bytes": kv_cap, "allocated_bytes": int(per[:batch].sum()),
            "live_bytes": live}


@dataclass(frozen=True)
class ModuleChannels:
    """A module's PIM channels as the model times them (Table IV against the
    device profile): each of the module's ``channels`` is ``sub_channels``
    profile channels side by side, so the module has ``timed`` channels of
    the profile, ``internal_tbs`` of all-bank MAC bandwidth and
    ``profile_gb`` of the profile's capacity."""

    channels: int
    sub_channels: int
    timed: int
    channel_gbs: float  # one profile channel's all-bank MAC bandwidth
    internal_tbs: float
    profile_gb: float


def module_channels(system: System, cfg: ChannelConfig, t_ck_ns: float) -> ModuleChannels:
    """Sub-channels per Table IV channel: the Table IV internal bandwidth
    per channel over the profile channel's all-bank MAC bandwidth (banks x
    32 B every ``mac_ccd`` cycles), rounded, at least 1. On ``gddr6-aim``
    (512 GB/s, 512 MB a channel) PIM-only's 16 TB/s over 32 channels is one
    profile channel each; xPU+PIM's 32 TB/s is two, which also gives its
    32 GB."""
    per = cfg.banks * LANES * 2 / (cfg.timing.mac_ccd * t_ck_ns)  # bytes per ns = GB/s
    want = system.internal_tbs * 1000 / system.channels_per_module
    sub = max(1, round(want / per))
    timed = system.channels_per_module * sub
    return ModuleChannels(system.channels_per_module, sub, timed, per, timed * per / 1000,
                          timed * cfg.banks * cfg.rows * cfg.cols * LANES * 2 / GB)


@dataclass(frozen=True)
class Link:
    """What joins the modules: ``gbs`` per module port, a hop's round trip
    ``hop_s`` per transfer, and ``flit_bytes`` on the wire for every
    ``flit_payload`` bytes carried."""

    gbs: float
    hop_s: float = 0.0
    flit_bytes: int = 1
    flit_payload: int = 1

    def transfer_s(self, n: int) -> float:
        """``n`` bytes from one module to another."""
        if n <= 0:
            return 0.0
        return self.hop_s + -(-int(n) // self.flit_payload) * self.flit_bytes / (self.gbs * 1e9)

    def all_gather_s(self, n: int, parts: int) -> float:
        """Each of ``parts`` modules gathers the others' shares of an
        ``n``-byte vector: ``parts - 1`` shares through its port."""
        if parts <= 1 or n <= 0:
            return 0.0
        flits = (parts - 1) * -(-int(n) // (parts * self.flit_payload))
        return self.hop_s + flits * self.flit_bytes / (self.gbs * 1e9)


LINKS = ("link", "cxl")


def system_link(system: System, asm: Assumptions) -> Link:
    """A system's module link: CENT's CXL (:data:`golden.system.reference.CXL`,
    ``cxl_lanes`` lanes a port) or a plain link of ``link_gbs``."""
    if system.link == "cxl":
        return Link(asm.cxl_lanes * CXL.lane_gbs, CXL.hop_ns * 1e-9, CXL.flit_bytes,
                    CXL.flit_payload)
    if system.link != "link":
        raise ConfigError(f"system {system.name}: link must be one of {', '.join(LINKS)}, "
                          f"not {system.link!r}")
    return Link(asm.link_gbs)


def vector_rate(system: System, asm: Assumptions, t_ck_ns: float) -> float:
    """Vector elements a module's vector unit takes per channel cycle: the
    HUB's EPU (``epu_lanes``) or the near-memory processors (``tflops`` at
    ``pnm_flops_per_element``)."""
    if system.vector_on == "pnm":
        return system.tflops * 1e12 / asm.pnm_flops_per_element * t_ck_ns * 1e-9
    if system.vector_on != "hub":
        raise ConfigError(f"system {system.name}: vector_on must be hub or pnm, "
                          f"not {system.vector_on!r}")
    return float(asm.epu_lanes)


def epu_words_per_cycle(system: System, asm: Assumptions) -> int | None:
    """GPR words the module's EPU reads a cycle in each softmax and
    reduction pass (``epu_lanes / 16``; the RTL's EPU: one), or None where
    the near-memory processors do the vector work (:func:`vector_rate`)."""
    return hub_epu_words(asm) if system.vector_on == "hub" else None


def hub_epu_words(asm: Assumptions) -> int:
    """GPR words the HUB's EPU reads a cycle: ``epu_lanes / 16``."""
    if asm.epu_lanes % LANES:
        raise ConfigError(f"assumptions.epu_lanes must be a multiple of {LANES} (whole GPR "
                          f"words a cycle), not {asm.epu_lanes}")
    return asm.epu_lanes // LANES


def layer_vector_elements(model: Model, tp: int) -> int:
    """Vector elements of one request's decoder layer on one module besides
    attention: two RMSNorms and two residual adds over ``d_model`` (each
    module of a TP group holds the whole gathered vector), RoPE over its
    queries and keys, SiLU and the gate product over its ``d_ff`` share."""
    rope = (model.heads + model.kv_heads) * model.d_head // tp
    return 4 * model.d_model + rope + 2 * model.d_ff // tp


def stage_splits(system: System) -> tuple[int, ...]:
    """Pipeline stages a module can hold, each on its own share of the
    module's channels (CENT's mapping of transformer blocks to channel
    groups): any divisor of the channel count where the FC layers run on
    PIM; one where the xPU serves the whole module."""
    ch = system.channels_per_module
    return tuple(k for k in range(1, ch + 1) if ch % k == 0) if system.fc_on == "pim" else (1,)


def hfp_channels(requests: np.ndarray, kvh: int, ch: int) -> np.ndarray:
    """HFP placement: the channel of each (request, KV head) pair of a
    module, request-major (``requests`` are the requests' indices in the
    batch). A pair keeps its channel for every layer of the module's stage
    and every step: its K and V live there."""
    idx = np.repeat(np.asarray(requests, dtype=np.int64) * kvh, kvh) + np.tile(
        np.arange(kvh), len(requests))
    return idx % ch


HFP_WEIGHTS = ("spread", "packed")


PREEMPTIONS = ("cheaper", "recompute", "swap", "free")


def check_preemption(asm: Assumptions) -> None:
    check_one_of("assumptions.preemption", asm.preemption, PREEMPTIONS)


def check_hfp_weights(asm: Assumptions) -> None:
    check_one_of("assumptions.hfp_weights", asm.hfp_weights, HFP_WEIGHTS)


def hfp_kv_channels(model: Model, system: System, modules: int, asm: Assumptions) -> int:
    """Table IV channels of a module that hold KV under HFP: all of them with
    the weights spread; with them packed (xPU+PIM), those the module's
    share of the weights (``weight_bytes / modules``) leaves whole."""
    check_hfp_weights(asm)
    ch = system.channels_per_module
    if asm.hfp_weights == "spread" or system.fc_on != "xpu":
        return ch
    channel = system.module_gb * GB // ch
    return max(0, ch - -(-model.weight_bytes // (modules * channel)))


def hfp_admit(model: Model, lengths: np.ndarray, scheme: str, capacity_gb: int,
              system: System, tp: int, pp: int, window: int | None = None,
              kv_channels: int | None = None, k: int = 1) -> dict:
    """Requests admitted in draw order under HFP's placement: each (request,
    KV head) pair's K and V, for every layer of its stage, in the one channel
    the pair is mapped to (``hfp_channels``). A channel holds its share of
    the KV capacity (the weights spread evenly over every channel); with
    ``kv_channels`` (the weights packed) the pairs go to that many whole
    channels. A request is admitted while each channel it lands on still
    has room. A pair larger than a channel can never be admitted. With
    ``k`` stages per module a pair goes to one of its stage's ``channels /
    k`` channels."""
    modules = capacity_gb // system.module_gb
    ch = system.channels_per_module  # Table IV's channels (a pair's sub-channels share it)
    stage_ch = ch // k
    kvh = model.kv_heads // tp
    stage_layers = model.layers // pp + (model.layers % pp > 0)  # the fullest stage binds
    kv_cap = capacity_gb * GB - model.weight_bytes
    if kv_channels is None or kv_channels == ch:  # the weights spread over every channel
        per_channel = kv_cap // (modules * ch) if kv_cap > 0 else 0
        ch = stage_ch
    else:  # packed: the KV channels whole
        ch = kv_channels
        per_channel = (system.module_gb * GB // system.channels_per_module
                       if ch and kv_cap > 0 else 0)
    tokens = np.full(len(lengths), window or model.window) if scheme == "static" else lengths
    pair = 2 * stage_layers * np.asarray(tokens, dtype=np.int64) * model.d_head * 2
    load = np.zeros(ch, dtype=np.int64)
    batch = 0
    for r in range(len(lengths) if per_channel > 0 else 0):
        where = hfp_channels(np.array([r]), kvh, ch)
        trial = load.copy()
        np.add.at(trial, where, pair[r])
        if trial.max() > per_channel:
            break
        load, batch = trial, r + 1
    live = int(lengths[:batch].sum()) * model.kv_bytes_per_token
    return {"batch": batch, "kv_capacity_bytes": kv_cap, "channel_bytes": int(per_channel),
            "largest_pair_bytes": int(pair.max()) if len(pair) else 0,
            "allocated_bytes": int(tokens[:batch].sum()) * model.kv_bytes_per_token,
            "live_bytes": live}


def fc_matrices(model: Model) -> list[tuple[int, int]]:
    """(d_in, d_out) of one decoder layer's FC GEMVs: QKV, O, gate, up, down."""
    d, q = model.d_model, model.heads * model.d_head
    kv = model.kv_heads * model.d_head
    return [(d, q + 2 * kv), (q, d), (d, model.d_ff), (d, model.d_ff), (model.d_ff, d)]


def kernel_shapes(model: Model, system: System) -> list[Shape]:
    """Every kernel shape a model's decode step runs on a system."""
    shapes = [Shape("qkt", model.d_head, model.group), Shape("sv", model.d_head, model.group)]
    if system.fc_on == "pim":
        shapes += sorted({Shape("fc", d_in) for d_in, _ in fc_matrices(model)}, key=Shape.key)
    return shapes


def slot_shapes(model: Model, system: System, asm: Assumptions) -> list[Shape]:
    """The kernel shapes whose weight-read slots a system needs: the
    attention kernels of xPU+PIM under NeuPIMs' interleaving."""
    if system.fc_on != "xpu" or asm.xpu_subbatches == 1:
        return []
    return [Shape("qkt", model.d_head, model.group), Shape("sv", model.d_head, model.group)]


def parallel_options(model: Model, modules: int) -> list[tuple[int, int]]:
    """(tp, pp) with tp x pp = modules, tp dividing the KV heads and pp at
    most the layer count."""
    out = []
    for tp in range(1, modules + 1):
        if modules % tp == 0 and model.kv_heads % tp == 0 and modules // tp <= model.layers:
            out.append((tp, modules // tp))
    return out


def stage_options(model: Model, system: System, modules: int) -> list[tuple[int, int, int]]:
    """(tp, pp, k): ``parallel_options`` with ``k`` stages in each module
    (:func:`stage_splits`), ``pp = modules / tp x k`` at most the layer
    count."""
    return [(tp, pp * k, k) for tp, pp in parallel_options(model, modules)
            for k in stage_splits(system) if pp * k <= model.layers]


COMPONENTS = ("fc", "attention_mac", "attention_io", "act_pre", "attention_mode", "refresh",
              "reduction", "vector", "link_io")
#: attention components <- kernel cycle labels (golden.system.kernel_timing)
_ATTENTION = (("attention_mac", "mac"), ("act_pre", "act_pre"), ("attention_io", "io"),
              ("attention_mode", "mode"), ("refresh", "refresh"))


def _attention(model: Model, lens: np.ndarray, requests: np.ndarray, kvh: int, partition: str,
               timer: KernelTimer, rate: float, ch_iv: int, sub: int,
               slots: bool, kv_ch: int | None = None,
               epu_k: int | None = None, module: AttentionModule | None = None) -> dict | None:
    """One module's attention, per layer, for the requests ``requests``
    (indices in the batch; their lengths ``lens``), in channel cycles: the
    critical channel's ``labels``, the ``phase`` (the channel busy longest,
    with the softmax and reduction on the HUB's EPU reading ``epu_k`` words
    a cycle, :func:`epu_words_per_cycle`, or with ``epu_k`` None on the
    near-memory processors at ``rate`` elements a cycle, :func:`vector_rate`;
    with a ``module`` under TCP, the cycles and labels of its attention STEP
    on the golden module in closed loop, ``golden.system.module_timing``),
    the vector unit's busy cycles ``vector``, MAC and busy
    profile-channel-cycles, and per Table IV channel its PIM ``load`` and,
    with ``slots``, the weight reads that fit beside that load
    (:mod:`golden.system.overlap`)."""
    if not len(lens):
        return None
    cfg = timer.cfg
    ch = ch_iv * sub
    qk, svs = Shape("qkt", model.d_head, model.group), Shape("sv", model.d_head, model.group)
    pairs = np.repeat(lens, kvh)  # (request, KV head) pairs on one module
    epu = (model.group * pairs).astype(np.float64)  # vector elements (pnm's energy)
    labels = dict.fromkeys((*(n for n, _ in _ATTENTION), "reduction"), 0.0)
    if partition == "tcp":
        tok = -(-pairs // ch)
        uq, us = qk.units(cfg, tok), svs.units(cfg, tok)
        q, s = timer(qk, uq), timer(svs, us)
        epu = epu + (ch - 1) * model.group * model.d_head
        vcyc = (attention_epu_cycles(pairs, ch, model.d_head, model.group,
                                     words_per_cycle=epu_k) if epu_k else epu / rate)
        ops = (attention_epu_op_counts(pairs, ch, model.d_head, model.group)
               if epu_k else None)
        for name, lab in _ATTENTION:
            labels[name] = float(q[lab].sum() + s[lab].sum())
        labels["reduction"] = float(vcyc.sum())
        kernels = float(q["cycles"].sum() + s["cycles"].sum())
        phase, load = kernels + labels["reduction"], np.array([kernels])
        if module is not None:  # the module's own STEP, the K/V append's tail in it
            if module.hub.n_channels != ch:
                raise ConfigError(f"the attention module has {module.hub.n_channels} "
                                  f"channels, the stage {ch}")
            st = attention_step(module.hub, model.d_head, model.group,
                                tuple(int(p) for p in pairs), module.max_tokens)
            labels = {name: float(st.labels[lab]) for name, lab in _ATTENTION}
            labels["reduction"] = float(st.labels["reduction"])
            phase, load = float(st.cycles), np.array([float(st.cycles - st.epu_cycles)])
        kslots = (np.array([timer.slots(qk, uq).sum() + timer.slots(svs, us).sum()])
                  if slots else None)
        mac = ch * int(q["mac"].sum() + s["mac"].sum())
        busy = ch * int(q["cycles"].sum() + s["cycles"].sum())
        counts = {c: ch * float(q[c].sum() + s[c].sum()) for c in COUNTS}
    else:
        tok = -(-pairs // sub)  # a pair's tokens over its channel's sub-channels
        uq, us = qk.units(cfg, tok), svs.units(cfg, tok)
        q, s = timer(qk, uq), timer(svs, us)
        epu = epu + (sub - 1) * model.group * model.d_head
        if epu_k:  # HFP is not lowered: per query head a softmax, one reduction over sub
            vcyc = model.group * softmax_cycles(pairs, 1, epu_k) + (
                reduce_cycles(model.group * model.d_head // LANES, sub, epu_k) if sub > 1 else 0)
            red = reduce_ops(model.group * model.d_head // LANES, sub)
            ops = {k: model.group * v + red[k] for k, v in softmax_ops(pairs).items()}
        else:
            vcyc, ops = epu / rate, None
        kv_ch = ch_iv if kv_ch is None else kv_ch  # the last kv_ch channels hold KV
        where = hfp_channels(requests, kvh, kv_ch) + (ch_iv - kv_ch)
        per = {lab: np.bincount(where, q[lab] + s[lab], minlength=ch_iv)
               for lab in ("cycles", *(lab for _, lab in _ATTENTION))}
        epu_ch = np.bincount(where, vcyc, minlength=ch_iv).astype(np.float64)
        crit = int(np.argmax(per["cycles"] + epu_ch))
        phase = max(float(per["cycles"][crit] + epu_ch[crit]), float(epu_ch.sum()))
        for name, lab in _ATTENTION:
            labels[name] = float(per[lab][crit])
        labels["reduction"] = phase - float(per["cycles"][crit])
        load = per["cycles"].astype(np.float64)
        kslots = (np.bincount(where, timer.slots(qk, uq) + timer.slots(svs, us),
                              minlength=ch_iv) if slots else None)
        mac, busy = sub * int(per["mac"].sum()), sub * int(per["cycles"].sum())
        counts = {c: sub * float(q[c].sum() + s[c].sum()) for c in COUNTS}
    # the vector work's energy: the EPU's operations, or pnm's elements
    return {"labels": labels, "phase": phase, "load": load, "slots": kslots, "mac": mac,
            "busy": busy, "vector": float(vcyc.sum()), "counts": counts,
            "elements": 0.0 if ops else float(epu.sum()),
            "epu_ops": {k: float(np.sum(v)) for k, v in (ops or {}).items()}}


def _fc_task(model: Model, system: System, b: int, tp: int, ch: int, asm: Assumptions,
             parts: tuple[str, ...]) -> dict:
    """The xPU's FC matrices ``parts`` (``pre``: QKV; ``post``: O, gate, up,
    down) of one layer for ``b`` requests on one module: the FLOPs' time,
    the weights' time at ``xpu_bandwidth_tbs``, and the weight reads each
    profile channel serves (``ch`` of them, the weights spread evenly)."""
    mats = fc_matrices(model)
    chosen = [m for i, m in enumerate(mats) if ("pre" if i == 0 else "post") in parts]
    flops = sum(2 * b * d_in * d_out / tp for d_in, d_out in chosen)
    weights = sum(2 * d_in * d_out // tp for d_in, d_out in chosen)
    return {"flops_s": flops / (system.tflops * 1e12),
            "bytes_s": weights / (asm.xpu_bandwidth_tbs * 1e12),
            "reads": overlap.reads_for(weights, ch) if weights else 0, "flops": flops}


def _segment(fc: dict, att: dict | None, period: float, tck: float) -> tuple[float, float]:
    """The xPU running ``fc`` beside the PIM running ``att`` (NeuPIMs'
    dual row buffer): ``(seconds, PIM phase seconds)``. The segment lasts
    the longest of the xPU's FLOPs, its weight stream and the channels:
    each channel's PIM work plus the reads that did not fit beside it
    (its slots, and the idle cycles of its phase) run after it."""
    if att is None:
        chan = fc["reads"] * period
        phase = 0.0
    else:
        phase = att["phase"]
        free = att["slots"] + (phase - att["load"]) / period
        chan = float(np.max(overlap.segment_cycles(phase, free, fc["reads"], period)))
    return max(fc["flops_s"], fc["bytes_s"], chan * tck), phase * tck


def decode_step(model: Model, system: System, lengths: np.ndarray, tp: int, pp: int,
                partition: str, timer: KernelTimer, t_ck_ns: float, asm: Assumptions,
                sub: int = 1, k: int = 1) -> dict:
    """One decode step of the batch ``lengths`` on ``tp x pp / k`` modules,
    each of Table IV's channels made of ``sub`` profile channels
    (``module_channels``). TCP splits a pair's tokens over every profile
    channel of its stage; HFP places a pair on one Table IV channel and
    splits its tokens over that channel's ``sub`` profile channels, whose
    SV partial sums the vector unit then reduces. xPU+PIM runs each
    micro-batch's FC and attention in turn (``xpu_subbatches = 1``), or
    NeuPIMs' two interleaved sub-batches (``_stage_neupims``; 2), or in
    each stage the faster of the two (0). ``interleaved``: the share of
    (micro-batch, stage) pairs interleaved.

    ``k`` pipeline stages share each module (:func:`stage_splits`, CENT's
    mapping), each on ``channels / k`` of its Table IV channels: stage
    ``s`` is on module ``s // k`` of its TP group. A hand-off between two
    stages of one module stays in the module; one between modules crosses
    the link (:func:`system_link`). A module's stages share its vector
    unit and its link port, so the step lasts at least the busier one's
    time (``bound`` names what sets the step)."""
    check_one_of("partition", partition, PARTITIONS)
    if k < 1 or system.channels_per_module % k or pp % k:
        raise ConfigError(f"{k} stages per module must divide its {system.channels_per_module} "
                          f"channels and the {pp} stages")
    cfg = timer.cfg
    ch_iv = system.channels_per_module // k  # Table IV channels of one stage
    ch = ch_iv * sub  # profile channels of one stage
    tck = t_ck_ns * 1e-9
    kvh = model.kv_heads // tp
    layers = [model.layers // pp + (s < model.layers % pp) for s in range(pp)]
    xpu = system.fc_on == "xpu"
    period = timer.read_period() if xpu else 0.0
    rate = vector_rate(system, asm, t_ck_ns)
    epu_k = epu_words_per_cycle(system, asm)
    lk = system_link(system, asm)
    kv_ch = (min(ch_iv, hfp_kv_channels(model, system, tp * pp // k, asm))
             if partition == "hfp" else None)
    stages, mac_total, busy_total, sizes, vec, port = [], 0, 0, [], [], []
    # energy (docs/energy.md): the PIM channels' counts and the other work,
    # per module and layer like mac_total
    use, att = dict.fromkeys(COUNTS, 0.0), dict.fromkeys(COUNTS, 0.0)  # all; attention's
    work = dict.fromkeys(("xpu_macs", "elements", "attention_elements", "link_bytes"), 0.0)
    work["epu_ops"] = dict.fromkeys(EPU_OPS, 0.0)  # the HUB's EPU: all attention's
    for m in range(pp):
        reqs = np.arange(m, len(lengths), pp)
        b = len(reqs)
        a = _attention(model, lengths[reqs], reqs, kvh, partition, timer, rate, ch_iv, sub,
                       False, kv_ch, epu_k)
        if a is not None:
            mac_total += a["mac"]
            busy_total += a["busy"]
            for c in COUNTS:
                use[c] += a["counts"][c]
                att[c] += a["counts"][c]
            work["elements"] += a["elements"]
            work["attention_elements"] += a["elements"]
            for op, v in a["epu_ops"].items():
                work["epu_ops"][op] += v
        link = 2 * lk.all_gather_s(b * model.d_model * 2, tp)
        comp = dict.fromkeys(COMPONENTS, 0.0)
        if a is not None:
            for name, v in a["labels"].items():
                comp[name] = v * tck
        if b:
            if system.vector_on == "pnm":  # the layer's other vector operations
                comp["vector"] = b * layer_vector_elements(model, tp) / rate * tck
                work["elements"] += b * layer_vector_elements(model, tp)
            if xpu:
                fc = _fc_task(model, system, b, tp, ch, asm, ("pre", "post"))
                comp["fc"] = _segment(fc, None, period, tck)[0]
                work["xpu_macs"] += fc["flops"] / 2
                _weight_reads(use, fc["reads"] * ch, cfg, period)
            else:
                for d_in, d_out in fc_matrices(model):
                    sh = Shape("fc", d_in)
                    lab = timer(sh, sh.units(cfg, -(-d_out // (tp * ch))))
                    comp["fc"] += b * int(lab["cycles"]) * tck
                    mac_total += b * ch * int(lab["mac"])
                    busy_total += b * ch * int(lab["cycles"])
                    for c in COUNTS:
                        use[c] += b * ch * float(lab[c])
            comp["link_io"] = link
            # the two all-gathers: each module receives the others' shares
            work["link_bytes"] += 2 * b * model.d_model * 2 * (tp - 1) / tp
        vec.append((a["vector"] * tck if a is not None else 0.0) + comp["vector"])
        port.append(link)

        def in_turn(n: int, comp: dict = comp) -> dict:
            return {name: v * n for name, v in comp.items()}

        inter = None
        if xpu and asm.xpu_subbatches != 1 and b >= 2:  # NeuPIMs' two sub-batches
            groups = [reqs[0::2], reqs[1::2]]
            atts = [_attention(model, lengths[g], g, kvh, partition, timer, rate, ch_iv, sub,
                               True, kv_ch, epu_k) for g in groups]
            links = [2 * lk.all_gather_s(len(g) * model.d_model * 2, tp) for g in groups]
            inter = _stage_neupims(model, system, groups, atts, links, tp, ch, asm, period, tck)
        stages.append((in_turn, inter))
        sizes.append(b)
    # t[m][s]: micro-batch m in stage s, plus the hand-off to the next stage
    # where that stage is on another module
    hand_off = [lk.transfer_s(b * model.d_model * 2) for b in sizes]
    cross = [s // k != ((s + 1) % pp) // k for s in range(pp)]
    parts, interleaved = [], 0
    for in_turn, inter in stages:
        row = []
        for n in layers:
            p = in_turn(n)
            if inter is not None:
                q = inter(n)
                if asm.xpu_subbatches == 2 or sum(q.values()) < sum(p.values()):
                    p, interleaved = q, interleaved + 1
            row.append(p)
        parts.append(row)
    t = np.array([[sum(p.values()) + hand_off[m] * cross[s] for s, p in enumerate(row)]
                  for m, row in enumerate(parts)])
    # what a module's stages share: its vector unit and its link port
    shared = {"vector": 0.0, "link": 0.0}
    for first in range(0, pp, k):  # every micro-batch through each of the module's stages
        mine = slice(first, first + k)
        shared["vector"] = max(shared["vector"], sum(vec) * sum(layers[mine]))
        shared["link"] = max(shared["link"], sum(port) * sum(layers[mine])
                             + sum(hand_off) * sum(cross[mine]))
    step, bound = max([(pipeline_period(t), "pipeline"), *((v, n) for n, v in shared.items())],
                      key=lambda vb: vb[0])
    breakdown = {name: sum(p[name] for row in parts for p in row) / pp for name in COMPONENTS}
    breakdown["link_io"] += sum(hand_off[m] * cross[s] for m in range(pp) for s in range(pp)) / pp
    breakdown["pipeline_bubbles"] = step - sum(breakdown.values())
    channels = tp * pp * ch
    cycles = step / tck if step else 0.0
    # per module-layer figures x tp modules x layers
    mac_total *= tp * model.layers
    busy_total *= tp * model.layers
    use = {c: v * tp * model.layers for c, v in use.items()}
    att = {c: v * tp * model.layers for c, v in att.items()}
    work = {w: ({o: n * tp * model.layers for o, n in v.items()} if isinstance(v, dict)
                else v * tp * model.layers) for w, v in work.items()}
    work["link_bytes"] += sum(sizes) * model.d_model * 2 * sum(cross)  # the hand-offs
    busy = {"attention": sum(breakdown[c] for c in ATTENTION_COMPONENTS), "fc": breakdown["fc"]}
    share = busy["attention"] / sum(busy.values()) if sum(busy.values()) else 0.0
    spent = step_energy(cfg, use, work, channels, cycles, t_ck_ns, asm, att, share)
    return {
        **({} if spent is None else {
            "energy_j": spent["total_j"], "breakdown_j": spent["breakdown_j"],
            "energy_per_token_j": spent["total_j"] / len(lengths) if len(lengths) else 0.0,
            "attention_j": spent["attention_j"], "fc_j": spent["fc_j"]}),
        "tp": tp, "pp": pp, "stages_per_module": k, "batch": int(len(lengths)),
        "step_s": step, "bound": bound,
        "tokens_per_s": len(lengths) / step if step else 0.0,
        "mac_utilization": mac_total / (channels * cycles) if cycles else 0.0,
        "channel_utilization": busy_total / (channels * cycles) if cycles else 0.0,
        "interleaved": interleaved / (pp * pp),
        "breakdown_s": breakdown,
    }


def _weight_reads(use: dict, words: float, cfg: ChannelConfig, period: float) -> None:
    """Add the xPU's weight stream of ``words`` 32 B reads to the PIM
    channels' counts ``use`` (``golden.energy.row_reads``)."""
    for k, v in energy.row_reads(words, cfg.cols, period).items():
        use[k] += v


#: The step's components that are attention's (the rest: the FC layers,
#: and the link and vector work besides attention).
ATTENTION_COMPONENTS = ("attention_mac", "attention_io", "act_pre", "attention_mode",
                        "refresh", "reduction")
#: Attention's energy (PIMphony's breakdown): MAC, I/O, background, else.
ATTENTION_ENERGY = ("mac", "io", "background", "else")


def step_energy(cfg: ChannelConfig, use: dict, work: dict, channels: int, cycles: float,
                t_ck_ns: float, asm: Assumptions, attention: dict | None = None,
                share: float = 0.0) -> dict | None:
    """Energy (J) of a decode step of ``cycles`` on ``channels`` profile
    channels whose kernels and weight reads counted ``use``
    (golden.energy.COUNTS) and whose other work was ``work`` (xPU MACs,
    vector elements, the HUB EPU's operations, link bytes): the channels' commands priced with the
    profile's table, their background over the whole step (rows open for
    the counted cycles, precharged otherwise), their refreshes on the
    channel clock for the whole step (not only inside kernels); the rest
    at ``asm``'s figures. None when the profile has no energy table.

    ``attention_j`` splits off attention's part (PIMphony's breakdown):
    its kernels' MACs and I/O, the background and refresh in proportion
    to ``share`` (attention's share of the step's busy time; both are
    time's, not work's), and else (its activations, precharges and its
    softmax and reduction: the HUB EPU's operations, ``work["epu_ops"]``,
    priced by the profile's ``epu_*_pj``, or the near-memory processors'
    elements at ``vector_pj_per_element``). ``fc_j`` is the rest of the
    step: the FC layers' PIM or xPU energy, the other vector work, the
    link and the rest of the background."""
    known = energy.params_for(cfg)
    if known is None:
        return None
    params = energy.scaled(known[0], dict(asm.energy_scale))
    pim = energy.channels_energy(params, t_ck_ns, use, channels, cycles, cfg.timing.t_refi)
    epu_pj = float(energy.epu_pj(params, work["epu_ops"]))
    pj = {**{f"pim_{k}": v for k, v in pim.items()},
          "xpu": work["xpu_macs"] * asm.xpu_pj_per_mac,
          "vector": work["elements"] * asm.vector_pj_per_element + epu_pj,
          "link": work["link_bytes"] * asm.link_pj_per_byte}
    a = energy.priced(params, t_ck_ns, {**(attention or dict.fromkeys(COUNTS, 0.0)),
                                          "refreshes": 0.0, "active": 0.0}, 0.0)["breakdown"]
    part = {"mac": a["mac"], "io": a["io"],
            "background": share * pim["background"],
            "else": a["act_pre"] + a["other"] + share * pim["refresh"]
            + work["attention_elements"] * asm.vector_pj_per_element + epu_pj}
    total = sum(pj.values())
    return {"total_j": total * 1e-12,
            "breakdown_j": {k: float(v) * 1e-12 for k, v in pj.items()},
            "attention_j": {k: float(v) * 1e-12 for k, v in part.items()},
            "fc_j": float(total - sum(part.values())) * 1e-12}


def neupims_segments(n: int) -> list[tuple[tuple[str, ...], int, int | None]]:
    """NeuPIMs' schedule of a stage of ``n`` layers for sub-batches 0 and
    1: ``(xPU parts, xPU sub-batch, PIM sub-batch or None)`` in order. The
    xPU runs sub-batch 0's QKV alone, then sub-batch 1's QKV beside
    sub-batch 0's attention; then per layer each sub-batch's O and FFN (and
    the next layer's QKV) beside the other's attention; the last FFN of
    sub-batch 1 alone."""
    segs: list = [(("pre",), 0, None), (("pre",), 1, 0)]
    for layer in range(1, n + 1):
        more = layer < n
        segs.append((("post", "pre") if more else ("post",), 0, 1))
        segs.append((("post", "pre") if more else ("post",), 1, 0 if more else None))
    return segs


def _stage_neupims(model: Model, system: System, groups, atts, links, tp: int, ch: int,
                   asm: Assumptions, period: float, tck: float):
    """A micro-batch's time in a stage under NeuPIMs' sub-batch interleaving
    (``neupims_segments``), as a function of the stage's layer count: the
    components of every segment, the PIM's attention as it ran and the xPU
    (``fc``) as the time it added beyond it."""
    memo: dict = {}

    def seg(parts, x, y):
        key = (parts, x, y)
        if key not in memo:
            fc = _fc_task(model, system, len(groups[x]), tp, ch, asm, parts)
            att = atts[y] if y is not None else None
            total, phase = _segment(fc, att, period, tck)
            comp = dict.fromkeys(COMPONENTS, 0.0)
            if att is not None:
                for k, v in att["labels"].items():
                    comp[k] = v * tck
            comp["fc"] = total - phase
            comp["link_io"] = links[x] if "post" in parts else 0.0
            memo[key] = comp
        return memo[key]

    def stage(n: int) -> dict:
        out = dict.fromkeys(COMPONENTS, 0.0)
        for parts, x, y in neupims_segments(n):
            for k, v in seg(parts, x, y).items():
                out[k] += v
        return out

    return stage


def t_ck_ns(profile: str) -> float:
    data = load_profile_data(profile)
    if "t_ck_ns" not in data:
        raise ConfigError(f"profile {profile!r}: the system model needs key t_ck_ns")
    return float(data["t_ck_ns"])


def evaluate(model: Model, system: System, lengths: np.ndarray, capacity_gb: int, step: Step,
             timer: KernelTimer, t_ck: float, asm: Assumptions, window: int | None = None) -> dict:
    """The best (tp, pp) for one point: the batch admitted from ``lengths``
    under the step's KV scheme, timed over every parallel option. Under HFP
    the batch is admitted per option: each pair's KV lives in its channel
    (``hfp_admit``)."""
    modules = capacity_gb // system.module_gb
    if modules < 1 or capacity_gb % system.module_gb:
        raise ConfigError(f"capacity {capacity_gb} GB is not a whole number of "
                          f"{system.module_gb} GB {system.name} modules")
    options = stage_options(model, system, modules)
    if not options:
        raise ConfigError(f"{model.name}: no tp x pp = {modules} modules with tp dividing "
                          f"{model.kv_heads} KV heads")
    pooled = admit(model, lengths, step.kv, capacity_gb, asm.chunk_bytes, window)
    sub = module_channels(system, timer.cfg, t_ck).sub_channels
    results = []
    for tp, pp, k in options:
        # HFP: each pair's KV in its own channel, so the batch depends on the mapping
        adm = (hfp_admit(model, lengths, step.kv, capacity_gb, system, tp, pp, window,
                         hfp_kv_channels(model, system, modules, asm), k)
               if step.partition == "hfp" else pooled)
        r = decode_step(model, system, lengths[:adm["batch"]], tp, pp, step.partition, timer,
                        t_ck, asm, sub, k)
        results.append((r, adm))
    best, adm = max(results, key=lambda ra: (ra[0]["tokens_per_s"], -ra[0]["tp"],
                                             -ra[0]["stages_per_module"]))
    out = {**best, "modules": modules, "weights_fit": adm["kv_capacity_bytes"] > 0,
           "capacity_utilization": adm["live_bytes"] / adm["kv_capacity_bytes"]
           if adm["kv_capacity_bytes"] > 0 else 0.0,
           "allocated_gb": adm["allocated_bytes"] / GB,
           "options": [{"tp": r["tp"], "pp": r["pp"], "stages_per_module": r["stages_per_module"],
                        "batch": r["batch"], "tokens_per_s": r["tokens_per_s"]}
                       for r, _ in results]}
    if step.partition == "hfp":  # what HFP's placement admits against pooled capacity
        out["hfp"] = {"channel_gb": adm["channel_bytes"] / GB,
                      "kv_channels": hfp_kv_channels(model, system, modules, asm),
                      "largest_pair_gb": adm["largest_pair_bytes"] / GB,
                      "pooled_batch": pooled["batch"]}
    return out


def pipeline_period(t: np.ndarray) -> float:
    """Decode-step period of a pipeline: ``t[m][s]`` is micro-batch ``m``'s
    time in stage ``s``; each stage serves every micro-batch, and each
    micro-batch's next token waits for its own previous one."""
    return float(max(t.sum(axis=0).max(), t.sum(axis=1).max())) if t.size else 0.0


def gpu_step(model: Model, gpu: Gpu, lengths: np.ndarray, tp: int, pp: int,
             asm: Assumptions) -> dict:
    """One decode step on ``tp x pp`` GPUs as a roofline: per layer and GPU,
    each FC GEMM takes the longer of its FLOPs at ``bf16_tflops x
    gpu_flops_efficiency`` and its weights at ``hbm_gbs x
    gpu_bandwidth_efficiency``. FlashDecoding reads every request's K and V
    of the GPU's KV heads once per step, split over the KV length so the
    whole GPU streams it, at the same HBM rate; its FLOPs (4 x group x
    d_head per token and KV head) count where longer. TP all-reduces twice
    per layer over NVLink; a pipeline stage hands its activations on.

    Energy (``energy_j``, ``breakdown_j``): every byte each micro-batch
    reads from HBM (the weights, the K and V) at ``gpu_hbm_pj_per_byte``
    and once through L2, L1 and registers at ``gpu_sram_pj_per_byte``; its
    MACs at ``xpu_pj_per_mac``; the all-reduce and hand-off bytes at
    ``link_pj_per_byte``; every GPU's ``gpu_static_w`` over the step."""
    bw = gpu.hbm_gbs * 1e9 * asm.gpu_bandwidth_efficiency
    flops = gpu.bf16_tflops * 1e12 * asm.gpu_flops_efficiency
    kvh = model.kv_heads // tp
    layers = [model.layers // pp + (s < model.layers % pp) for s in range(pp)]
    per_mb, parts = [], []
    use = {"bytes": 0.0, "macs": 0.0, "link": 0.0}
    fc_macs = sum(i * o for i, o in fc_matrices(model))  # a token's, per layer
    for m in range(pp):
        lens = np.asarray(lengths[m::pp], dtype=np.int64)
        b = len(lens)
        fc = sum(max(2 * b * i * o / tp / flops, 2 * i * o / tp / bw)
                 for i, o in fc_matrices(model)) if b else 0.0
        tokens = int(lens.sum())
        attention = max(tokens * kvh * 2 * model.d_head * 2 / bw,
                        tokens * kvh * 4 * model.group * model.d_head / flops)
        link = (2 * b * model.d_model * 2 * 2 * (tp - 1) / tp / (gpu.link_gbs * 1e9)
                if tp > 1 and b else 0.0)
        parts.append({"fc": fc, "attention": attention, "link_io": link})
        per_mb.append(b)
        if b:  # energy: this micro-batch through every layer, on all tp GPUs
            n = model.layers
            use["bytes"] += n * (2 * fc_macs + tokens * model.kv_heads * 2 * model.d_head * 2)
            use["macs"] += n * (b * fc_macs
                                + tokens * model.kv_heads * 2 * model.group * model.d_head)
            use["link"] += n * 2 * 2 * b * model.d_model * 2 * (tp - 1) if tp > 1 else 0
            use["link"] += b * model.d_model * 2 * (pp - 1)  # the stages' hand-offs
    hand_off = [b * model.d_model * 2 / (gpu.link_gbs * 1e9) if pp > 1 else 0.0
                for b in per_mb]
    t = np.array([[sum(p.values()) * n + hand_off[m] for n in layers]
                  for m, p in enumerate(parts)])
    period = pipeline_period(t)
    breakdown = {k: sum(p[k] for p in parts) * model.layers / pp for k in parts[0]}
    breakdown["link_io"] += sum(hand_off)
    breakdown["pipeline_bubbles"] = period - sum(breakdown.values())
    pj = {"mac": use["macs"] * asm.xpu_pj_per_mac,
          "hbm": use["bytes"] * asm.gpu_hbm_pj_per_byte,
          "sram": use["bytes"] * asm.gpu_sram_pj_per_byte,
          "link": use["link"] * asm.link_pj_per_byte,
          "static": tp * pp * asm.gpu_static_w * period * 1e12}
    total = sum(pj.values()) * 1e-12
    return {"tp": tp, "pp": pp, "batch": int(len(lengths)), "step_s": period,
            "tokens_per_s": len(lengths) / period if period else 0.0,
            "breakdown_s": breakdown, "energy_j": total,
            "energy_per_token_j": total / len(lengths) if len(lengths) else 0.0,
            "breakdown_j": {k: v * 1e-12 for k, v in pj.items()}}


def evaluate_gpu(model: Model, gpu: Gpu, lengths: np.ndarray, capacity_gb: int,
                 asm: Assumptions, gpus: int = 0) -> dict:
    """The GPU baseline memory-matched to ``capacity_gb`` (``gpus`` 0: the
    fewest GPUs whose memory holds it and that form one tensor-parallel
    group, TP dividing the KV heads, as GPU serving deploys them),
    PagedAttention admission (KV in pages of ``gpu_page_tokens`` for the
    current length, in draw order, beside the weights), the best ``tp x
    pp``."""
    if not gpus:
        gpus = -(-capacity_gb // gpu.memory_gb)
        while model.kv_heads % gpus and gpus < model.kv_heads:
            gpus += 1
    page = asm.gpu_page_tokens * model.d_head * 2
    adm = admit(model, lengths, "dpa", gpus * gpu.memory_gb, page)
    batch = lengths[:adm["batch"]]
    options = parallel_options(model, gpus)
    if not options:
        raise ConfigError(f"{model.name}: no tp x pp = {gpus} GPUs with tp dividing "
                          f"{model.kv_heads} KV heads")
    results = [gpu_step(model, gpu, batch, tp, pp, asm) for tp, pp in options]
    best = max(results, key=lambda r: (r["tokens_per_s"], -r["tp"]))
    return {**best, "gpus": gpus, "memory_gb": gpus * gpu.memory_gb,
            "weights_fit": adm["kv_capacity_bytes"] > 0,
            "capacity_utilization": adm["live_bytes"] / adm["kv_capacity_bytes"]
            if adm["kv_capacity_bytes"] > 0 else 0.0,
            "options": [{"tp": r["tp"], "pp": r["pp"], "batch": r["batch"],
                         "tokens_per_s": r["tokens_per_s"]} for r in results]}


def check_mode(data: dict) -> None:
    check_one_of("mode", data["mode"], MODES)


def _calibrate(task: tuple) -> tuple:
    profile, policy, asm, shape, banks = task
    timer = KernelTimer(channel_config(profile, policy, asm))
    timer.calibration(shape)
    for b in banks:  # the xPU's weight reads beside this kernel, per bank variant
        timer.slot_calibration(shape, b)
        timer.read_period()
    return policy, timer.table


def calibrate(profile: str, policies, shapes, asm: Assumptions, mode: str,
              sw: sweep.Sweep, progress: bool | None, slots=(), banks=("dual",)) -> dict:
    """``{policy: {shape key: calibration}}`` for fast mode (empty in exact);
    for the shapes in ``slots`` also their weight-read slots on each of
    ``banks`` (``overlap.BANKS``) and the read period
    (:mod:`golden.system.overlap`)."""
    tables: dict = {p: {} for p in policies}
    if mode != "fast":
        return tables
    tasks = [(profile, p, asm, s, tuple(banks) if s in slots else ()) for p in policies
             for s in shapes]
    bar = sweep.Progress(len(tasks), "calibrate", progress)
    for policy, table in sw.map(_calibrate, tasks, bar):
        tables[policy].update(table)
    return tables
