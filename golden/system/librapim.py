"""The LibraPIM system: an NPU beside HBM-PIM, dual-path banks (DEX) and
Dynamic Batch Offloading (DBO) (DESIGN.md §2.5, docs/librapim.md).

One device (``tp`` of them share each layer) is the NPU of
``golden.system.reference.LIBRA_NPU`` beside ``LIBRA_PIM.channels`` PIM channels of
the ``hbm2-pim`` profile. Per decoder layer and generation step:

* **NPU** runs the FC layers (QKV, O, FFN): its FLOPs at its peak, its
  weights read from every channel (``npu_work``: reads per channel, paced
  by the channel, ``overlap.read_period``). Attention moved to the NPU is
  a GEMV over the request's KV, read the same way.
* **PIM** runs attention: each (request, KV head) pair's QK^T and SV kernels
  (``golden.kernels``, row-reuse GQA) on one channel, pairs round-robin
  over the channels, timed by :class:`golden.system.kernel_timing.KernelTimer`.
  An FC moved to PIM is one GEMV kernel per token.

**Systems** (each on its banks, ``BANKS``; the NPU's weight reads and the
PIM's commands share each channel's command bus and column rules,
:mod:`golden.system.overlap`):

* ``NPU+AiM``: FC on the NPU, then attention on PIM, no overlap.
* ``AttAcc-like``: the NPU's QKV beside the PIM's attention head by head,
  the O projection, then the FFN co-processed (its tokens split between
  NPU and PIM GEMVs, the split the fastest); on conventional banks a read
  and the PIM take turns, so the overlap gains only where the NPU's FLOPs
  bound it.
* ``NeuPIMs-like``: two sub-batches in NeuPIMs' segments
  (``golden.system.model.neupims_segments``): one sub-batch's FC on the
  NPU beside the other's attention on PIM, on dual row buffers.
* ``LibraPIM``: the same segments on dual-path banks (DEX: the weights and
  the offloaded KV in one partition, the KV in the other, the n:m split
  chosen from the data, :func:`dex_split`; data a partition cannot hold
  spills into the other and loses the dual path, :func:`spills`; the
  sliced path adds ``dex_overhead`` to a read), plus DBO.

A segment lasts the longer of the NPU's FLOPs and the slowest channel; a
channel runs its PIM kernels, the NPU's reads taking the read slots the
cycle-exact merge finds beside them (:func:`segment`), the rest after them
at the read period. The NPU's FC reads its weights once per sub-batch.

**DBO** (LibraPIM Algorithm 1, REFERENCE.md) decides at the start of every
generation step from the longest sequence ``L`` in the group, with its own
model ``t = K x d_model^2 x B / FLOPS`` with the FLOPS each device attains
(the NPU's FC as a roofline, since decode reads its weights once per step;
PIM at the rate of its kernels, measured by the channel model):

* ``B < channels``: offload the whole group to PIM (FC as GEMVs too);
* ``t_npu > t_pim``: move ``m`` requests' FFN to PIM, eq. (1):
  ``m = (t_npu - t_pim) / (t_ffn_npu + t_ffn_pim)`` per request;
* ``t_pim > t_npu``: move ``n`` requests' attention to the NPU at its GEMV
  throughput, eq. (2): ``n = (t_pim - t_npu) / (t_mha_pim + t_mha_npu)``;
  the longest requests move, and their KV lives in the weight partition,
  which the NPU reads beside the PIM's MACs on the KV partition (dual-path
  banks).

``m`` and ``n`` are rounded to the neighbouring integer its model predicts
faster, and a plan its model predicts slower than not offloading is never
taken (:func:`dbo`).
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from golden import energy as energy_model
from golden.config import ConfigError, check_one_of, slice_rows_for
from golden.energy import COUNTS
from golden.isa import LANES
from golden.system import overlap
from golden.system.kernel_timing import KernelTimer, Shape
from golden.system.model import (
    Assumptions,
    calibrate,
    channel_config,
    check_mode,
    neupims_segments,
    t_ck_ns,
)
from golden.system.reference import (
    ALPACA_PROMPT_TOKENS,
    LIBRA_MODELS,
    LIBRA_NPU,
    LIBRA_PIM,
    LibraModel,
    LibraNpu,
)
from golden.system.sweep import significant

SYSTEMS = ("NPU+AiM", "AttAcc-like", "NeuPIMs-like", "LibraPIM", "LibraPIM-noDBO")
#: Each system's banks (``golden.system.overlap.BANKS``): AiM and AttAcc's
#: conventional banks serve a read or the PIM at a time; NeuPIMs' dual row
#: buffer and LibraPIM's dual-path banks keep a row open for each.
BANKS = {"NPU+AiM": "conventional", "AttAcc-like": "conventional", "NeuPIMs-like": "dual",
         "LibraPIM": "dual", "LibraPIM-noDBO": "dual"}
#: Systems on LibraPIM's dual-path banks (``LibraPIM-noDBO``: DEX without
#: DBO's offloading, the ablation of Figure 21)
DEX = ("LibraPIM", "LibraPIM-noDBO")
PLANS = ("none", "all-pim", "ffn-to-pim", "mha-to-npu")
#: Rows of a DRAM subarray, the unit a dual-path bank's n:m split is set in
#: (an assumption: 512 rows, a common subarray height; the profile's banks
#: have 16,384 rows, 32 subarrays). Under ``dex_split = "auto"`` it only
#: rounds the split.
SUBARRAY_ROWS = 512


def check_tp(model: LibraModel, tp: int) -> None:
    if model.kv_heads % tp or model.heads % tp:
        raise ConfigError(f"tp={tp} must divide the {model.kv_heads} KV heads of {model.name}")


@functools.cache
def pim_config():
    """The PIM channel every device uses (the calibrations are keyed by it;
    built once: a ChannelConfig is immutable)."""
    return channel_config(LIBRA_PIM.profile, "static", Assumptions())


@dataclass(frozen=True)
class Device:
    """Per-layer timing of one device (NPU + PIM) holding ``1 / tp`` of a
    model's heads and FC outputs."""

    model: LibraModel
    tp: int
    timer: KernelTimer
    t_ck_ns: float
    #: cycles between two MAC rounds on a broadcast FFN weight word (an
    #: assumption: the paper gives none); 0: the all-bank MAC spacing
    #: ``Timing.mac_ccd``, as if each round were an array access
    broadcast_mac_ccd: int = 0
    #: fraction the dual-path banks' sliced path adds to LibraPIM's normal
    #: reads (REFERENCE.md: 2 % worst case on the connected path)
    dex_overhead: float = 0.0
    #: the NPU's peak FLOP/s (LIBRA_NPU's, or a size of Figure 21's sweep)
    npu_flops: float = LIBRA_NPU.flops
    #: dual-path banks (``DEX`` systems): the fraction of the weights held
    #: in the KV partition and of the KV held in the weight partition, where
    #: the split does not match the data (:func:`spills`)
    weight_spill: float = 0.0
    kv_spill: float = 0.0

    def __post_init__(self):
        check_tp(self.model, self.tp)

    # -- hardware figures, from the profile ------------------------------------
    @property
    def cfg(self):
        return self.timer.cfg

    @property
    def npu_bandwidth(self) -> float:
        """Bytes/s of the normal path: one 32 B word per channel every
        ``ChannelConfig.read_ccd`` cycles (reads alternating bank groups)."""
        return LIBRA_PIM.channels * LANES * 2 / (self.cfg.read_ccd * self.t_ck_ns * 1e-9)

    @property
    def pim_flops(self) -> float:
        """PIM MAC FLOP/s: every bank's 16 lanes per all-bank MAC spacing
        (``Timing.mac_ccd``) per channel."""
        return (LIBRA_PIM.channels * self.cfg.banks * LANES * 2
                / (self.cfg.timing.mac_ccd * self.t_ck_ns * 1e-9))

    def period(self, system: str) -> float:
        """Cycles per weight read on a channel, the reads alone
        (``overlap.read_period``, measured on the channel); on LibraPIM's
        dual-path banks longer by ``dex_overhead``."""
        p = self.timer.read_period()
        return p * (1 + self.dex_overhead) if system in DEX else p

    # -- work of a segment (golden.system.librapim.segment) ---------------------
    def npu_work(self, tokens: int, matrices, stream: bool = False) -> dict:
        """The NPU's FC ``matrices`` for ``tokens`` requests: FLOP seconds and
        the weight reads per channel (the weights interleaved over every
        channel); ``stream``: the weights are read even for no tokens."""
        macs = max(tokens, 0) * sum(i * o for i, o in matrices) / self.tp
        read = tokens > 0 or stream
        return {"flops_s": 2 * macs / self.npu_flops, "macs": macs,
                "reads": overlap.reads_for(self.weight_bytes(matrices), LIBRA_PIM.channels)
                if read else 0}

    def npu_attention(self, lengths: np.ndarray) -> dict:
        """Attention moved to the NPU: a GEMV over each request's K and V,
        read from the weight partition over every channel."""
        m = self.model
        macs = 2 * float(lengths.sum()) * (m.heads // self.tp) * m.d_head
        return {"flops_s": 2 * macs / self.npu_flops, "macs": macs,
                "reads": overlap.reads_for(int(self.kv_bytes(lengths).sum()), LIBRA_PIM.channels)}

    def attention(self, lengths: np.ndarray, banks: str) -> dict | None:
        """Per channel: the cycles of its (request, KV head) pairs' QK^T and
        SV kernels (``load``, pairs round-robin over the channels) and the
        weight reads that fit beside them on ``banks`` (``slots``), and the
        kernels' energy counts over every channel (``use``, :func:`counts`)."""
        if not len(lengths):
            return None
        m = self.model
        pairs = np.repeat(lengths, m.kv_heads // self.tp)
        q, s = Shape("qkt", m.d_head, m.group), Shape("sv", m.d_head, m.group)
        uq, us = q.units(self.cfg, pairs), s.units(self.cfg, pairs)
        tq, ts = self.timer(q, uq), self.timer(s, us)
        cycles = tq["cycles"] + ts["cycles"]
        slots = self.timer.slots(q, uq, banks) + self.timer.slots(s, us, banks)
        where = np.arange(len(pairs)) % LIBRA_PIM.channels
        ch = LIBRA_PIM.channels
        return {"load": np.bincount(where, cycles, minlength=ch).astype(np.float64),
                "slots": np.bincount(where, slots, minlength=ch).astype(np.float64),
                "use": counts(tq) + counts(ts)}

    def pim_fc_load(self, tokens: int, matrices, banks: str | None = None) -> dict:
        """Per channel: ``tokens`` GEMVs of ``matrices`` (each matrix's
        outputs over every channel) and the reads that fit beside them on
        ``banks`` (none without), and their energy counts over every
        channel (``use``)."""
        cyc = slots = 0.0
        ch = LIBRA_PIM.channels
        use = np.zeros(len(COUNTS))
        for d_in, d_out in matrices:
            sh = Shape("fc", d_in)
            u = sh.units(self.cfg, -(-d_out // (self.tp * ch)))
            got = self.timer(sh, u)
            cyc += float(got["cycles"])
            use += counts(got)
            slots += float(self.timer.slots(sh, u, banks)) if banks else 0.0
        return {"load": np.full(ch, tokens * cyc), "slots": np.full(ch, tokens * slots),
                "use": use * tokens * ch}

    def broadcast_cycles(self, tokens: int) -> int:
        """Cycles the PIM MAC units are busy computing ``tokens`` offloaded
        requests' FFN on the weight stream the NPU reads (LibraPIM's
        broadcast path: the global buffer sends each weight word to the NPU
        and to the channel's MAC units, no read of its own). A word feeds
        one request per bank's MAC unit per round, a round every
        :attr:`broadcast_ccd` cycles, so ``ceil(tokens / banks)`` rounds a
        word."""
        if tokens <= 0:
            return 0
        return self.ffn_words() * -(-tokens // self.cfg.banks) * self.broadcast_ccd

    # -- simulated times (seconds per layer) ------------------------------------
    def kv_bytes(self, lengths: np.ndarray) -> np.ndarray:
        m = self.model
        return 2 * lengths * (m.kv_heads // self.tp) * m.d_head * 2

    def npu_mha(self, lengths: np.ndarray) -> float:
        return float(self.kv_bytes(lengths).sum()) / self.npu_bandwidth

    @property
    def broadcast_ccd(self) -> int:
        return self.broadcast_mac_ccd or self.cfg.timing.mac_ccd

    def ffn_words(self) -> int:
        """256-bit words of this device's FFN weights one channel streams
        (the weights interleaved over every channel)."""
        m = self.model
        elems = sum(i * o for i, o in m.ffn_matrices_shapes()) // self.tp
        return -(-elems // (LIBRA_PIM.channels * LANES))

    def pim_ffn_broadcast(self, tokens: int) -> float:
        """:meth:`broadcast_cycles` in seconds."""
        return self.broadcast_cycles(tokens) * self.t_ck_ns * 1e-9

    def weight_bytes(self, matrices) -> int:
        """BF16 bytes of this device's share of ``matrices``."""
        return sum(2 * i * o for i, o in matrices) // self.tp

    def pim_fc(self, tokens: int, matrices) -> float:
        """Seconds of ``tokens`` GEMVs of ``matrices`` (:meth:`pim_fc_load`)."""
        if tokens <= 0:
            return 0.0
        return float(self.pim_fc_load(tokens, matrices)["load"][0]) * self.t_ck_ns * 1e-9

    # -- DBO's own model (REFERENCE.md: t = K x dims x B / FLOPS) ---------------
    def predict(self, batch: int, longest: int,
                table: dict[str, float] | None = None) -> dict[str, float]:
        """DBO's per-layer model at the group's longest sequence: times of
        the whole group's weight reads and per request of everything else.
        FLOPS is what each device attains: the NPU's FC is a roofline (its
        weights are read once per step); PIM runs at the rate of its
        kernels (cycles from the channel model), spread over every channel,
        so its time grows linearly with the requests. ``table``: the
        runtime's latency table, a factor per side (``npu``, ``pim``) that
        the last measured step set (:func:`generate`)."""
        return with_table(self._predict(batch, longest), table)

    def _predict(self, batch: int, longest: int) -> dict[str, float]:
        m, d2 = self.model, self.model.d_model ** 2
        k_attn, k_ffn = m.k(m.attn_matrices()), m.k(m.ffn_matrices_shapes())
        q, s = Shape("qkt", m.d_head, m.group), Shape("sv", m.d_head, m.group)
        pair = int(self.timer(q, q.units(self.cfg, [longest]))["cycles"][0]
                   + self.timer(s, s.units(self.cfg, [longest]))["cycles"][0])
        pairs = m.kv_heads // self.tp
        return {"batch": batch,
                "attn_npu": k_attn * d2 / self.tp / self.npu_flops,  # per request
                "ffn_npu": k_ffn * d2 / self.tp / self.npu_flops,
                "attn_bytes_s": k_attn * d2 / self.tp / self.npu_bandwidth,  # weights, once
                "ffn_bytes_s": k_ffn * d2 / self.tp / self.npu_bandwidth,
                # per request on the broadcast weight stream: its share of a
                # MAC round (a round serves one request per bank)
                "ffn_pim": self.pim_ffn_broadcast(self.cfg.banks) / self.cfg.banks,
                "fc_pim": self.pim_fc(1, m.attn_matrices() + m.ffn_matrices_shapes()),
                "mha_pim": pair * pairs * self.t_ck_ns * 1e-9 / LIBRA_PIM.channels,
                "mha_npu": self.npu_mha(np.array([longest]))}


def _npu(p: dict[str, float], attn: int, ffn: int, stream: bool = False) -> float:
    """DBO's NPU time for ``attn`` and ``ffn`` requests of FC work, in the
    two sub-batches the pipeline runs (each reads the weights once).
    ``stream``: the FFN weights are read in every sub-batch with requests,
    for the PIM's broadcast path, even where the NPU computes none."""
    t = 0.0
    for half in (0, 1):
        a, f = (attn + 1 - half) // 2, (ffn + 1 - half) // 2
        t += max(a * p["attn_npu"], p["attn_bytes_s"]) if a else 0.0
        t += max(f * p["ffn_npu"], p["ffn_bytes_s"]) if f or (stream and a) else 0.0
    return t


#: DBO's model entries of each side (the latency table scales them)
NPU_KEYS = ("attn_npu", "ffn_npu", "attn_bytes_s", "ffn_bytes_s", "mha_npu")
PIM_KEYS = ("ffn_pim", "fc_pim", "mha_pim")
#: How DBO gets its times: the FLOPS formulas alone, or with the runtime's
#: latency table refreshed from each measured step
LATENCIES = ("table", "formula")


def with_table(p: dict[str, float], table: dict[str, float] | None) -> dict[str, float]:
    """DBO's model ``p`` with each side's entries scaled by the latency
    table's factor (``p`` itself without a table)."""
    if not table:
        return p
    return {k: v * table["npu"] if k in NPU_KEYS else v * table["pim"] if k in PIM_KEYS else v
            for k, v in p.items()}


def predicted_sides(p: dict[str, float], batch: int, plan: str,
                    count: int) -> tuple[float, float]:
    """DBO's predicted (NPU, PIM) busy time of a layer under a plan."""
    if plan == "none":
        return _npu(p, batch, batch), batch * p["mha_pim"]
    if plan == "all-pim":
        return 0.0, batch * (p["mha_pim"] + p["fc_pim"])
    if plan == "ffn-to-pim":
        return (_npu(p, batch, batch - count, stream=True),
                batch * p["mha_pim"] + count * p["ffn_pim"])
    if plan == "mha-to-npu":
        return _npu(p, batch, batch) + count * p["mha_npu"], (batch - count) * p["mha_pim"]
    raise ValueError(f"unknown plan {plan!r}")


def predicted_time(p: dict[str, float], batch: int, plan: str, count: int) -> float:
    """DBO's predicted layer time of a plan: the busier of NPU and PIM
    (the two sub-batches keep both working)."""
    return max(predicted_sides(p, batch, plan, count))


def dbo(device: Device, batch: int, longest: int,
        table: dict[str, float] | None = None) -> tuple[str, int, float, float]:
    """Algorithm 1: (plan, requests moved, predicted time, predicted time
    without offloading), per layer; ``table``: the runtime's latency table
    (:meth:`Device.predict`)."""
    return decide(device.predict(batch, longest, table), batch)


def decide(p: dict[str, float], batch: int) -> tuple[str, int, float, float]:
    """Algorithm 1 on DBO's model ``p`` (:meth:`Device.predict`) of a group
    of ``batch`` requests (:func:`dbo`)."""
    base = predicted_time(p, batch, "none", 0)
    t_npu, t_pim = _npu(p, batch, batch), batch * p["mha_pim"]
    if batch < LIBRA_PIM.channels:
        plan, count = "all-pim", batch
    elif t_npu > t_pim:
        x = (t_npu - t_pim) / (p["ffn_npu"] + p["ffn_pim"])  # eq. (1)
        plan = "ffn-to-pim"
        count = min((int(np.floor(x)), int(np.ceil(x))),
                    key=lambda c: predicted_time(p, batch, plan, min(c, batch)))
    elif t_pim > t_npu:
        x = (t_pim - t_npu) / (p["mha_pim"] + p["mha_npu"])  # eq. (2)
        plan = "mha-to-npu"
        count = min((int(np.floor(x)), int(np.ceil(x))),
                    key=lambda c: predicted_time(p, batch, plan, min(c, batch)))
    else:
        plan, count = "none", 0
    count = min(count, batch)
    t = predicted_time(p, batch, plan, count)
    if plan in ("ffn-to-pim", "mha-to-npu") and (count == 0 or t >= base):
        plan, count, t = "none", 0, base
    return plan, count, t, base


def _sub_batches(lengths: np.ndarray) -> list[np.ndarray]:
    return [lengths[0::2], lengths[1::2]]


def _add(*works: dict | None) -> dict:
    """NPU work summed: FLOP seconds, MACs and reads per channel."""
    return {k: sum(w[k] for w in works if w) for k in ("flops_s", "macs", "reads")}


def counts(got: dict) -> np.ndarray:
    """The energy counts (:data:`golden.energy.COUNTS`) of the kernels a
    :class:`KernelTimer` call timed, summed over them."""
    return np.array([float(np.sum(got[c])) for c in COUNTS])


def segment(device: Device, system: str, npu: dict | None, att: dict | None,
            rounds: float = 0.0) -> dict[str, float]:
    """The NPU's work ``npu`` (FLOP seconds, weight reads per channel) beside
    the PIM's ``att`` (per channel: kernel cycles ``load`` and the reads
    that fit beside them, ``slots``, on the system's banks) and ``rounds``
    cycles of broadcast MAC rounds on every channel. Each channel runs its
    PIM work; the reads take its slots, its idle cycles while the slowest
    channel finishes and the rounds (whose words they are), and the rest run
    after it at the read period (``golden.system.overlap.segment_cycles``).
    The segment lasts the longer of the NPU's FLOPs and the slowest
    channel. Returns ``s`` (seconds), ``npu_s`` (the NPU's own roofline),
    ``pim_s`` (the PIM's phase), ``pim_channel_s`` (PIM busy
    channel-seconds), and what its energy is priced from: ``use`` (the
    channels' counts, :data:`golden.energy.COUNTS`: the PIM's kernels and
    the NPU's reads), ``broadcast_macs`` (bank MACs of the broadcast
    rounds, which read no array) and ``npu_macs``."""
    period, tck = device.period(system), device.t_ck_ns * 1e-9
    reads = npu["reads"] if npu else 0
    flops = npu["flops_s"] if npu else 0.0
    ch = LIBRA_PIM.channels
    load = att["load"] if att else np.zeros(ch)
    slots = att["slots"] if att else np.zeros(ch)
    work = load + rounds
    phase = float(work.max())
    idle = (rounds + phase - work) / period
    ws, ks = (device.weight_spill, device.kv_spill) if system in DEX else (0.0, 0.0)
    # on dual-path banks, the kernels of KV held in the weight partition
    # leave it no row for reads (their slots are lost), and reads of weights
    # held in the KV partition find its row taken by a kernel: they take
    # only the idle cycles and what runs after
    kept = reads * (1 - ws)
    left = np.maximum(0, kept - slots * (1 - ks)) + (reads - kept)
    chan = float(np.max(overlap.segment_cycles(phase, idle, left, period)))
    cfg = device.cfg
    stream = energy_model.row_reads(reads * ch, cfg.cols, period)  # the NPU's reads
    use = np.array([stream[c] for c in COUNTS])
    if att is not None:
        use = use + att["use"]
    return {"s": max(flops, chan * tck), "npu_s": max(flops, reads * period * tck),
            "pim_s": phase * tck, "pim_channel_s": float(work.sum()) * tck,
            "use": use, "npu_macs": npu["macs"] if npu else 0.0,
            # a broadcast round is one MAC on every bank of every channel
            "broadcast_macs": rounds / device.broadcast_ccd * cfg.banks * ch}


def _schedule(device: Device, system: str, segs, times=None) -> dict[str, float]:
    """The segments ``segs`` (``(npu, att, rounds)``) in turn, each run
    ``times[i]`` times (1 by default)."""
    out = {**dict.fromkeys(("s", "npu_s", "pim_s", "pim_channel_s", "npu_macs",
                            "broadcast_macs"), 0.0),
           "use": np.zeros(len(COUNTS))}
    for i, (npu, att, rounds) in enumerate(segs):
        n = 1 if times is None else times[i]
        for k, v in segment(device, system, npu, att, rounds).items():
            out[k] += n * v
    return out


def layer_time(device: Device, system: str, lengths: np.ndarray,
               plan: tuple[str, int] = ("none", 0)) -> dict[str, float]:
    """Seconds per decoder layer of one generation step (a whole step's
    segments over the layers), with the NPU and PIM busy seconds and the FC
    weight bytes read from DRAM (``weight_bytes``: the NPU's stream, once
    per sub-batch, and the PIM's GEMVs, once per token)."""
    check_one_of("system", system, SYSTEMS)
    m = device.model
    attn, ffn = m.attn_matrices(), m.ffn_matrices_shapes()
    qkv, o = attn[:1], attn[1:]
    w_attn, w_ffn = device.weight_bytes(attn), device.weight_bytes(ffn)
    banks = BANKS[system]
    b = len(lengths)
    layers = 1  # segments of one layer, or (the pipelined systems) of a whole step
    if system == "NPU+AiM":  # the NPU's FC, then the PIM's attention, each alone
        t = _schedule(device, system, [(device.npu_work(b, attn + ffn), None, 0.0),
                                       (None, device.attention(lengths, banks), 0.0)])
        wbytes = w_attn + w_ffn
    elif system == "AttAcc-like":
        t = _attacc(device, lengths)
        wbytes = t.pop("weight_bytes")
    elif plan[0] == "all-pim":  # the PIM alone: attention and a GEMV per token
        segs = []
        for sub in _sub_batches(lengths):
            fc = device.pim_fc_load(len(sub), attn + ffn, banks)
            att = device.attention(sub, banks)
            segs += [(None, att, 0.0), (None, fc, 0.0)]
        t = _schedule(device, system, segs)
        wbytes = b * (w_attn + w_ffn)
    else:
        t, streams = _pipelined(device, system, lengths, plan, qkv, o, ffn)
        wbytes = streams * (w_attn + w_ffn)
        layers = m.layers
    return {"layer_s": t["s"] / layers, "npu_s": t["npu_s"] / layers,
            "pim_s": t["pim_s"] / layers, "pim_channel_s": t["pim_channel_s"] / layers,
            "weight_bytes": wbytes, "use": t["use"] / layers,
            **{k: t[k] / layers for k in ("npu_macs", "broadcast_macs")}}


def _attacc(device: Device, lengths: np.ndarray) -> dict[str, float]:
    """AttAcc on conventional banks, per layer: the NPU's QKV beside the
    PIM's attention, head by head (head-level pipelining: the first KV
    head's QKV runs alone, the last head's attention alone), the O
    projection alone, then the FFN
    co-processed: ``s`` tokens as PIM GEMVs beside the NPU's ``b - s``
    (the NPU's weight reads beside the GEMVs' MACs), ``s`` the fastest."""
    m = device.model
    attn, ffn = m.attn_matrices(), m.ffn_matrices_shapes()
    b = len(lengths)
    qkv = device.npu_work(b, attn[:1])
    att = device.attention(lengths, "conventional")
    # H KV heads: head 1's QKV alone, then head h + 1's QKV beside head h's
    # attention, then head H's attention alone (each head 1/H of the work)
    heads = m.kv_heads // device.tp

    def part(w: dict | None, x: float) -> dict | None:
        return None if w is None else {k: v * x for k, v in w.items()}

    first = _schedule(device, "AttAcc-like", [
        (part(qkv, 1 / heads), None, 0.0),
        (part(qkv, 1 - 1 / heads), part(att, 1 - 1 / heads), 0.0),
        (None, part(att, 1 / heads), 0.0),
        (device.npu_work(b, attn[1:]), None, 0.0)])
    # the FFN split: every s at once (the channels' work is even, linear in s)
    per = device.pim_fc_load(1, ffn, "conventional")
    cyc, sl = float(per["load"][0]), float(per["slots"][0])
    period, tck = device.period("AttAcc-like"), device.t_ck_ns * 1e-9
    s = np.arange(b + 1)
    full = device.npu_work(b, ffn)
    reads = np.where(s < b, full["reads"], 0)
    flops = full["flops_s"] * (b - s) / b
    chan = s * cyc + np.maximum(0, reads - s * sl) * period
    t = np.maximum(flops, chan * tck)
    split = int(np.argmin(t))  # the first minimum: the fewest tokens moved
    co = segment(device, "AttAcc-like", {"flops_s": float(flops[split]),
                                         "macs": full["macs"] * (b - split) / b,
                                         "reads": int(reads[split])},
                 {"load": per["load"] * split, "slots": per["slots"] * split,
                  "use": per["use"] * split})
    out = {k: first[k] + co[k] for k in first}
    w = device.weight_bytes(attn) + (device.weight_bytes(ffn) if split < b else 0)
    out["weight_bytes"] = w + split * device.weight_bytes(ffn)
    return out


def _pipelined(device: Device, system: str, lengths: np.ndarray, plan: tuple[str, int],
               qkv, o, ffn) -> tuple[dict[str, float], int]:
    """NeuPIMs' two sub-batches (``neupims_segments``): each segment runs one
    sub-batch's FC on the NPU beside the other's attention on PIM, on the
    system's banks. Under LibraPIM's plans, a sub-batch's moved FFN runs
    as MAC rounds on its FFN stream (the broadcast path), and its moved
    attention on the NPU, beside the PIM's attention of the rest, its KV
    read from the weight partition. Returns the step and how many times
    the weights were read."""
    kind, count = plan
    banks = BANKS[system]
    moved = np.zeros(len(lengths), dtype=bool)
    moved[np.argsort(-lengths, kind="stable")[:count]] = True  # a plan moves the longest
    pre, post, rounds, att, extra = [], [], [], [], []
    streams = 0
    for sub, mv in zip(_sub_batches(lengths), _sub_batches(moved), strict=True):
        b, k = len(sub), int(mv.sum())
        f = kind == "ffn-to-pim"
        pre.append(device.npu_work(b, qkv))
        post.append(_add(device.npu_work(b, o), device.npu_work(b - k if f else b, ffn,
                                                                 stream=b > 0)))
        rounds.append(device.broadcast_cycles(k) if f else 0.0)
        on_npu = kind == "mha-to-npu"
        att.append(device.attention(sub[~mv] if on_npu else sub, banks))
        extra.append(device.npu_attention(sub[mv]) if on_npu and k else None)
        streams += min(b, 1)
    order = Counter(neupims_segments(device.model.layers))  # the layers repeat 4 segments
    segs = []
    for parts, x, y in order:
        npu = _add(post[x] if "post" in parts else None, pre[x] if "pre" in parts else None,
                   extra[y] if y is not None else None)
        segs.append((npu, att[y] if y is not None else None,
                     rounds[x] if "post" in parts else 0.0))
    return _schedule(device, system, segs, list(order.values())), streams


def check_latency(latency: str) -> None:
    check_one_of("dbo_latency", latency, LATENCIES)


@dataclass(frozen=True)
class Pricing:
    """What a run's energy is priced with: the PIM channels' table (the
    profile's, scaled by the scenario's ``energy`` factors), the NPU's
    energy per MAC (``npu_pj_per_mac``) and a bank's MAC on a broadcast
    weight word (``broadcast_pj_per_bank``: the MAC unit alone, no array
    read)."""

    params: energy_model.EnergyParams
    npu_pj_per_mac: float
    broadcast_pj_per_bank: float


#: A run's energy breakdown: the PIM channels' categories
#: (golden.energy.CATEGORIES), the broadcast rounds' MACs and the NPU's.
ENERGY = (*(f"pim_{c}" for c in energy_model.CATEGORIES), "pim_broadcast", "npu")


def run_energy(device: Device, pricing: Pricing, use: np.ndarray, macs: dict,
               seconds: float, tokens: int) -> dict:
    """The energy of a run of ``seconds`` on all ``tp`` devices, whose every
    device counted ``use`` on its channels and ``macs`` (``npu_macs`` on its
    NPU, ``broadcast_macs`` of bank MACs on broadcast words): the channels'
    commands at the table, their background over the whole run and refresh
    on the channel clock (``golden.energy.channels_energy``), the MACs at
    the pricing's figures. Per token (the group's ``tokens``), with the
    breakdown (:data:`ENERGY`) and the average power."""
    cycles = seconds / (device.t_ck_ns * 1e-9)
    counted = dict(zip(COUNTS, use, strict=True))
    pim = energy_model.channels_energy(pricing.params, device.t_ck_ns, counted,
                                       LIBRA_PIM.channels, cycles, device.cfg.timing.t_refi)
    pj = {**{f"pim_{k}": v * device.tp for k, v in pim.items()},
          "pim_broadcast": macs["broadcast_macs"] * pricing.broadcast_pj_per_bank * device.tp,
          "npu": macs["npu_macs"] * pricing.npu_pj_per_mac * device.tp}
    total = sum(pj.values()) * 1e-12
    return {"energy_per_token_j": total / tokens if tokens else 0.0,
            "power_w": total / seconds if seconds else 0.0,
            "energy_breakdown_per_token_j": {k: v * 1e-12 / tokens if tokens else 0.0
                                             for k, v in pj.items()}}


def generate(device: Device, system: str, lengths: np.ndarray, steps: int,
             latency: str = "table", pricing: Pricing | None = None) -> dict:
    """``steps`` generation steps of the group (every length grows by one
    per step); DBO decides per step under LibraPIM. ``latency``: DBO's
    times from its FLOPS formulas alone (``formula``), or (``table``, the
    paper's runtime) scaled per side by the latency table: after each step,
    each side's factor becomes the measured busy time (the NPU's roofline,
    the PIM's phases) over what the unscaled formulas predicted for the
    plan taken. ``pricing``: the run's energy too (:func:`run_energy`)."""
    check_latency(latency)
    m = device.model
    total = npu = pim = busy = 0.0
    use = np.zeros(len(COUNTS))
    macs = {"npu_macs": 0.0, "broadcast_macs": 0.0}
    wbytes = 0
    decisions = []
    table = {"npu": 1.0, "pim": 1.0}
    for s in range(steps):
        cur = lengths + s
        plan = ("none", 0)
        if system == "LibraPIM":
            used = dict(table) if latency == "table" else None
            plain = device.predict(len(cur), int(cur.max()))
            kind, count, pred, base = decide(with_table(plain, used), len(cur))
            plan = (kind, count)
            decisions.append({"step": s, "plan": kind, "requests": count,
                              "predicted_s": pred * m.layers,
                              "predicted_no_offload_s": base * m.layers,
                              **({"table_npu": used["npu"], "table_pim": used["pim"]}
                                 if used else {})})
        t = layer_time(device, system, cur, plan)
        if system == "LibraPIM":  # the table from this step's measured sides
            sides = predicted_sides(plain, len(cur), *plan)
            for side, got, want in zip(("npu", "pim"), (t["npu_s"], t["pim_s"]), sides,
                                       strict=True):
                if got > 0 and want > 0:
                    table[side] = got / want
        total += t["layer_s"] * m.layers
        npu += t["npu_s"] * m.layers
        pim += t["pim_s"] * m.layers
        busy += t["pim_channel_s"] * m.layers
        wbytes += t["weight_bytes"] * m.layers
        use += t["use"] * m.layers
        for k in macs:
            macs[k] += t[k] * m.layers
        if decisions:
            decisions[-1]["simulated_s"] = t["layer_s"] * m.layers
    tokens = len(lengths) * steps
    return {"tokens_per_s": tokens / total if total else 0.0, "step_s": total / steps,
            "npu_utilization": npu / total if total else 0.0,
            "pim_utilization": pim / total if total else 0.0,
            "pim_channel_utilization": busy / (LIBRA_PIM.channels * total) if total else 0.0,
            "weight_gb_per_step": wbytes / steps / 1e9,
            **(run_energy(device, pricing, use, macs, total, tokens) if pricing else {}),
            "decisions": decisions}


def capacity(model: LibraModel, tp: int, lengths: np.ndarray) -> dict:
    """One device's share of the weights and of the group's KV at
    ``lengths``, against its PIM memory (REFERENCE.md: 16 GB), and the
    devices the whole model and KV need."""
    w = sum(2 * i * o for i, o in model.attn_matrices() + model.ffn_matrices_shapes())
    weights = model.layers * w / tp
    kv = model.layers * float((2 * lengths * model.kv_heads * model.d_head * 2).sum()) / tp
    need = weights + kv
    return {"weights_gb": round(weights / 1e9, 3), "kv_gb": round(kv / 1e9, 3),
            "device_gb": LIBRA_PIM.capacity_gb,
            "fits": bool(need <= LIBRA_PIM.capacity_gb * 1e9),
            "devices_needed": int(-(-need * tp // (LIBRA_PIM.capacity_gb * 1e9)))}


def check_dex_split(spec) -> tuple[int, int] | None:
    """``dex_split``: "auto" (None) or "n:m" subarrays, both positive."""
    if spec == "auto":
        return None
    try:
        n, m = (int(x) for x in str(spec).split(":"))
    except ValueError:
        n = m = 0
    if n < 1 or m < 1:
        raise ConfigError(f'dex_split must be "auto" or n:m with two positive integers '
                          f"(subarrays of the weight and the KV partition), not {spec!r}")
    return n, m


def subarray_bytes() -> int:
    """Bytes one subarray holds over all of a device's banks (every channel's
    bank b holds the same share of the data)."""
    cfg = pim_config()
    return LIBRA_PIM.channels * cfg.banks * SUBARRAY_ROWS * cfg.cols * LANES * 2


def dex_split(spec, rows: int, weights: float, kv: float) -> tuple[int, int]:
    """The n:m subarray split of a dual-path bank of ``rows`` rows holding
    ``weights`` and ``kv`` (bytes, one device's share, spread evenly over
    its banks): ``spec`` "n:m" as given, or "auto": when both fit, the
    weight partition the fewest subarrays that hold the weights and the KV
    partition the rest; else the subarrays in the data's proportion
    (nearest, at least one each)."""
    fixed = check_dex_split(spec)
    if fixed:
        slice_rows_for(rows, *fixed)  # whole rows
        return fixed
    total = rows // SUBARRAY_ROWS
    if total < 2:
        raise ConfigError(f"a bank of {rows} rows has fewer than two subarrays of "
                          f"{SUBARRAY_ROWS} rows to split")
    cells = subarray_bytes()
    n, m = max(1, math.ceil(weights / cells)), max(1, math.ceil(kv / cells))
    if n + m <= total:
        return n, total - n
    n = min(total - 1, max(1, round(total * weights / (weights + kv))))
    return n, total - n


def spills(split: tuple[int, int], weights: float, kv: float) -> dict[str, float]:
    """The fractions of the data the split ``n:m`` places in the other
    partition: ``weight_spill`` (of the weights, in the KV partition) and
    ``kv_spill`` (of the KV, in the weight partition). Data beyond a
    partition goes to the other one's free rows; data beyond the bank (the
    run does not fit, ``capacity``) is taken in proportion to what the bank
    holds."""
    n, m = split
    cells = subarray_bytes()
    total = weights + kv
    scale = min(1.0, (n + m) * cells / total) if total else 1.0
    w, k = weights * scale, kv * scale
    return {"weight_spill": max(0.0, w - n * cells) / w if w else 0.0,
            "kv_spill": max(0.0, k - m * cells) / k if k else 0.0}


#: How a group's lengths are drawn (the ``lengths`` scenario key,
#: :func:`input_lengths`).
LENGTHS = ("alpaca", "uniform")


def input_lengths(input_len: int, batch: int, seed: int, spread: float,
                  lengths: str = "uniform") -> np.ndarray:
    """Context lengths of a group at its first simulated step.

    ``alpaca``: each request an Alpaca prompt
    (``reference.ALPACA_PROMPT_TOKENS``, drawn with replacement), cut to
    ``input_len`` tokens where longer; the group decodes in lock step from
    its prompts, so every request has generated the same tokens, and the
    longest sequence holds ``input_len``: a request's length is its prompt
    plus ``input_len`` less the longest prompt. ``uniform``: uniform in
    ``[input x (1 - spread), input]`` (at least 1 token)."""
    check_one_of("lengths", lengths, LENGTHS)
    rng = np.random.default_rng(seed)
    if lengths == "alpaca":
        tokens = np.array(list(ALPACA_PROMPT_TOKENS), np.int64)
        counts = np.array(list(ALPACA_PROMPT_TOKENS.values()), np.float64)
        prompts = np.minimum(rng.choice(tokens, size=batch, p=counts / counts.sum()), input_len)
        return prompts + (input_len - prompts.max())
    lo = max(1, int(round(input_len * (1 - spread))))
    return rng.integers(lo, input_len + 1, batch)


def shapes(model: LibraModel) -> list[Shape]:
    out = [Shape("qkt", model.d_head, model.group), Shape("sv", model.d_head, model.group)]
    out += sorted({Shape("fc", i) for i, _ in model.attn_matrices() + model.ffn_matrices_shapes()},
                  key=Shape.key)
    return out


def _point(p: dict) -> dict:
    model = LIBRA_MODELS[p["model"]]
    npu = LibraNpu(array_dim=p["npu_array"])
    lengths = input_lengths(p["input"], p["batch"], p["seed"], p["spread"], p["lengths"])
    cap = capacity(model, p["tp"], lengths + p["steps"])
    data = cap["weights_gb"] * 1e9, cap["kv_gb"] * 1e9
    cfg = pim_config()
    split = dex_split(p["dex_split"], cfg.rows, *data)
    spill = spills(split, *data)
    device = Device(model, p["tp"], KernelTimer(cfg, p["mode"], p["table"]), p["t_ck"],
                    p["broadcast_mac_ccd"], p["dex_overhead"], npu.flops, **spill)
    pricing = Pricing(energy_model.scaled_params(LIBRA_PIM.profile, p["energy"]),
                      p["npu_pj_per_mac"], p["broadcast_pj_per_bank"])
    out = {"model": model.name, "batch": p["batch"], "input": p["input"],
           "npu_array": p["npu_array"], "npu_tflops": npu.flops / 1e12, "capacity": cap,
           "dex": {"split": f"{split[0]}:{split[1]}",
                   **{k: float(f"{v:.6g}") for k, v in spill.items()}},
           "systems": {}}
    for system in p["systems"]:
        r = generate(device, system, lengths, p["steps"], p["dbo_latency"], pricing)
        r = significant(r)  # the decisions too
        if system != "LibraPIM":
            r.pop("decisions")
        out["systems"][system] = r
    first = out["systems"].get(p["systems"][0], {})
    base, joules = first.get("tokens_per_s"), first.get("energy_per_token_j")
    for r in out["systems"].values():
        r[f"speedup_over_{p['systems'][0]}"] = (significant(r["tokens_per_s"] / base)
                                                 if base else None)
        r[f"energy_over_{p['systems'][0]}"] = (significant(r["energy_per_token_j"] / joules)
                                               if joules else None)
    return out


def librapim(data: dict, sw, progress: bool | None = None) -> dict:
    """Tokens/s, NPU and PIM utilization per system, and LibraPIM's offload
    decision per step, over models x batch x input length."""
    from golden.system import scenario as sc
    from golden.system import sweep

    started = time.perf_counter()
    sc.check_all(data)
    models = [LIBRA_MODELS[n] for n in sc.choose(data, "models", LIBRA_MODELS)]
    systems = sc.choose(data, "systems", SYSTEMS)
    check_mode(data)
    for key in ("batches", "inputs", "npu_arrays"):  # each value's range: scenario.RANGES
        if not data[key]:
            raise ConfigError(f"{key}: the list is empty")
    for m in models:
        check_tp(m, data["tp"])
    all_shapes = sorted({s for m in models for s in shapes(m)}, key=Shape.key)
    tables = calibrate(LIBRA_PIM.profile, ["static"], all_shapes, Assumptions(), data["mode"],
                       sw, progress, slots=all_shapes, banks=overlap.BANKS)
    check_latency(data["dbo_latency"])
    check_dex_split(data["dex_split"])
    check_one_of("lengths", data["lengths"], LENGTHS)
    energy_model.scaled_params(LIBRA_PIM.profile, data["energy"])
    points = [{"model": m.name, "batch": b, "input": i, "tp": data["tp"], "steps": data["steps"],
               "npu_array": a, "dbo_latency": data["dbo_latency"],
               "seed": data["seed"], "spread": data["spread"], "lengths": data["lengths"],
               "mode": data["mode"],
               "broadcast_mac_ccd": data["broadcast_mac_ccd"],
               "dex_overhead": data["dex_overhead"], "dex_split": data["dex_split"],
               "energy": data["energy"], "npu_pj_per_mac": data["npu_pj_per_mac"],
               "broadcast_pj_per_bank": data["broadcast_pj_per_bank"],
               "table": tables["static"], "t_ck": t_ck_ns(LIBRA_PIM.profile),
               "systems": systems}
              for a in data["npu_arrays"] for m in models for b in data["batches"]
              for i in data["inputs"]]
    bar = sweep.Progress(len(points), "librapim", progress)
    rows = sw.map(_point, points, bar)
    warnings = []
    for m in models:
        short = [r["capacity"]["devices_needed"] for r in rows
                 if r["model"] == m.name and not r["capacity"]["fits"]]
        if short:
            warnings.append(f"{m.name}: {len(short)} of {len(rows) // len(models)} points do not "
                            f"fit {data['tp']} devices x {LIBRA_PIM.capacity_gb} GB (weights and "
                            f"KV need {min(short)}-{max(short)} devices)")
    return {"study": "librapim", "scenario": data, "warnings": warnings,
            "npu_tflops": LIBRA_NPU.flops / 1e12,
            "pim": {"channels": LIBRA_PIM.channels, "profile": LIBRA_PIM.profile},
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}
