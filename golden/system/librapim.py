"""The LibraPIM system: an NPU beside HBM-PIM, dual-path banks (DEX) and
Dynamic Batch Offloading (DBO) (DESIGN.md §2.5, docs/librapim.md).

One device (``tp`` of them share each layer) is the NPU of
``golden.system.reference.LIBRA_NPU`` beside ``LIBRA_PIM.channels`` PIM channels of
the ``hbm2-pim`` profile. Per decoder layer and generation step:

* **NPU** runs the FC layers (QKV, O, FFN) as a roofline: ``max(FLOPs /
  peak, weight bytes / bandwidth)``; the bandwidth is the channels' normal
  path, ``channels x 32 B / (tCCD x tCK)``. Attention moved to the NPU is a
  GEMV over the request's KV at that bandwidth.
* **PIM** runs attention: each (request, KV head) pair's QK^T and SV kernels
  (``golden.kernels``, row-reuse GQA) on one channel, pairs round-robin
  over the channels, timed by :class:`golden.system.kernel_timing.KernelTimer`.
  An FC moved to PIM is one GEMV kernel per token.

**Systems.**

* ``NPU+AiM``: FC on the NPU, then attention on PIM, no overlap.
* ``AttAcc-like``: the FFN is co-processed (its tokens split between NPU
  and PIM to finish together), attention on PIM; the phases serialize.
* ``NeuPIMs-like``: two sub-batches pipelined, NPU and PIM concurrently (the
  dual row buffer lets NPU weight reads and PIM MACs share the banks).
* ``LibraPIM``: the same pipeline on dual-path banks (DEX) plus DBO.

With two sub-batches whose NPU and PIM times are ``n_k`` and ``p_k``, a
pipelined layer lasts ``max(n_A + n_B, p_A + p_B, n_A + p_A, n_B + p_B)``;
a serial one ``n_A + p_A + n_B + p_B``.

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

import time
from dataclasses import dataclass

import numpy as np

from golden.config import ConfigError
from golden.isa import LANES
from golden.system.kernel_timing import KernelTimer, Shape
from golden.system.model import Assumptions, calibrate, channel_config, check_mode, t_ck_ns
from golden.system.reference import LIBRA_MODELS, LIBRA_NPU, LIBRA_PIM, LibraModel

SYSTEMS = ("NPU+AiM", "AttAcc-like", "NeuPIMs-like", "LibraPIM")
PLANS = ("none", "all-pim", "ffn-to-pim", "mha-to-npu")


def check_tp(model: LibraModel, tp: int) -> None:
    if model.kv_heads % tp or model.heads % tp:
        raise ConfigError(f"tp={tp} must divide the {model.kv_heads} KV heads of {model.name}")


def pim_config():
    """The PIM channel every device uses (the calibrations are keyed by it)."""
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

    # -- simulated times (seconds per layer) ------------------------------------
    def npu_fc(self, tokens: int, matrices) -> float:
        if tokens <= 0:
            return 0.0
        return sum(max(2 * tokens * i * o / self.tp / LIBRA_NPU.flops,
                       2 * i * o / self.tp / self.npu_bandwidth) for i, o in matrices)

    def kv_bytes(self, lengths: np.ndarray) -> np.ndarray:
        m = self.model
        return 2 * lengths * (m.kv_heads // self.tp) * m.d_head * 2

    def npu_mha(self, lengths: np.ndarray) -> float:
        return float(self.kv_bytes(lengths).sum()) / self.npu_bandwidth

    def pim_mha(self, lengths: np.ndarray) -> tuple[float, float]:
        """(phase seconds, busy channel-seconds) of the pairs round-robin."""
        if not len(lengths):
            return 0.0, 0.0
        m = self.model
        pairs = np.repeat(lengths, m.kv_heads // self.tp)
        q, s = Shape("qkt", m.d_head, m.group), Shape("sv", m.d_head, m.group)
        cycles = (self.timer(q, q.units(self.cfg, pairs))["cycles"]
                  + self.timer(s, s.units(self.cfg, pairs))["cycles"])
        load = np.bincount(np.arange(len(pairs)) % LIBRA_PIM.channels, cycles,
                           minlength=LIBRA_PIM.channels)
        tck = self.t_ck_ns * 1e-9
        return float(load.max()) * tck, float(load.sum()) * tck

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
        """Seconds the PIM MAC units are busy computing ``tokens`` offloaded
        requests' FFN on the weight stream the NPU reads (LibraPIM's
        broadcast path: the global buffer sends each weight word to the NPU
        and to the channel's MAC units, no read of its own). A word feeds
        one request per bank's MAC unit per round, a round every
        :attr:`broadcast_ccd` cycles, so ``ceil(tokens / banks)`` rounds a
        word."""
        if tokens <= 0:
            return 0.0
        rounds = -(-tokens // self.cfg.banks)
        return self.ffn_words() * rounds * self.broadcast_ccd * self.t_ck_ns * 1e-9

    def weight_bytes(self, matrices) -> int:
        """BF16 bytes of this device's share of ``matrices``."""
        return sum(2 * i * o for i, o in matrices) // self.tp

    def pim_fc(self, tokens: int, matrices) -> float:
        """One GEMV per token, each matrix's outputs over every channel."""
        if tokens <= 0:
            return 0.0
        cyc = 0
        for d_in, d_out in matrices:
            sh = Shape("fc", d_in)
            per_ch = -(-d_out // (self.tp * LIBRA_PIM.channels))
            cyc += int(self.timer(sh, sh.units(self.cfg, per_ch))["cycles"])
        return tokens * cyc * self.t_ck_ns * 1e-9

    # -- DBO's own model (REFERENCE.md: t = K x dims x B / FLOPS) ---------------
    def predict(self, batch: int, longest: int) -> dict[str, float]:
        """DBO's per-layer model at the group's longest sequence: times of
        the whole group's weight reads and per request of everything else.
        FLOPS is what each device attains: the NPU's FC is a roofline (its
        weights are read once per step); PIM runs at the rate of its
        kernels (cycles from the channel model), spread over every channel,
        so its time grows linearly with the requests."""
        m, d2 = self.model, self.model.d_model ** 2
        k_attn, k_ffn = m.k(m.attn_matrices()), m.k(m.ffn_matrices_shapes())
        q, s = Shape("qkt", m.d_head, m.group), Shape("sv", m.d_head, m.group)
        pair = int(self.timer(q, q.units(self.cfg, [longest]))["cycles"][0]
                   + self.timer(s, s.units(self.cfg, [longest]))["cycles"][0])
        pairs = m.kv_heads // self.tp
        return {"batch": batch,
                "attn_npu": k_attn * d2 / self.tp / LIBRA_NPU.flops,  # per request
                "ffn_npu": k_ffn * d2 / self.tp / LIBRA_NPU.flops,
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


def predicted_time(p: dict[str, float], batch: int, plan: str, count: int) -> float:
    """DBO's predicted layer time of a plan: the busier of NPU and PIM
    (the two sub-batches keep both working)."""
    if plan == "none":
        return max(_npu(p, batch, batch), batch * p["mha_pim"])
    if plan == "all-pim":
        return batch * (p["mha_pim"] + p["fc_pim"])
    if plan == "ffn-to-pim":
        return max(_npu(p, batch, batch - count, stream=True),
                   batch * p["mha_pim"] + count * p["ffn_pim"])
    if plan == "mha-to-npu":
        return max(_npu(p, batch, batch) + count * p["mha_npu"],
                   (batch - count) * p["mha_pim"])
    raise ValueError(f"unknown plan {plan!r}")


def dbo(device: Device, batch: int, longest: int) -> tuple[str, int, float, float]:
    """Algorithm 1: (plan, requests moved, predicted time, predicted time
    without offloading), per layer."""
    p = device.predict(batch, longest)
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


def layer_time(device: Device, system: str, lengths: np.ndarray,
               plan: tuple[str, int] = ("none", 0)) -> dict[str, float]:
    """Seconds per decoder layer of one generation step, with the NPU and
    PIM busy seconds and the FC weight bytes read from DRAM
    (``weight_bytes``: the NPU's stream, once per sub-batch, and the PIM's
    GEMVs, once per token)."""
    m = device.model
    attn, ffn = m.attn_matrices(), m.ffn_matrices_shapes()
    w_attn, w_ffn = device.weight_bytes(attn), device.weight_bytes(ffn)
    if system == "NPU+AiM":
        npu = device.npu_fc(len(lengths), attn + ffn)
        pim, pim_busy = device.pim_mha(lengths)
        return {"layer_s": npu + pim, "npu_s": npu, "pim_s": pim,
                "pim_channel_s": pim_busy, "weight_bytes": w_attn + w_ffn}
    if system == "AttAcc-like":
        npu_attn = device.npu_fc(len(lengths), attn)
        pim, pim_busy = device.pim_mha(lengths)
        b = len(lengths)
        # NPU time falls and PIM time grows with the tokens moved: bisect
        # for the first split where PIM is the slower
        lo, hi = 0, b
        while lo < hi:
            mid = (lo + hi) // 2
            if device.pim_fc(mid, ffn) >= device.npu_fc(b - mid, ffn):
                hi = mid
            else:
                lo = mid + 1
        # the NPU side is flat while weight reads bound it: prefer fewer moved
        split = min({0, max(lo - 1, 0), lo}, key=lambda k: (
            max(device.npu_fc(b - k, ffn), device.pim_fc(k, ffn)), k))
        ffn_npu, ffn_pim = device.npu_fc(b - split, ffn), device.pim_fc(split, ffn)
        return {"layer_s": npu_attn + pim + max(ffn_npu, ffn_pim),
                "npu_s": npu_attn + ffn_npu, "pim_s": pim + ffn_pim,
                "pim_channel_s": pim_busy + ffn_pim * LIBRA_PIM.channels,
                "weight_bytes": w_attn + (w_ffn if split < b else 0) + split * w_ffn}
    if system not in ("NeuPIMs-like", "LibraPIM"):
        raise ConfigError(f"system must be one of {', '.join(SYSTEMS)}, not {system!r}")
    kind, count = plan
    npu, pim, mac, busy, wbytes = [], [], [], 0.0, 0
    moved = np.zeros(len(lengths), dtype=bool)
    moved[np.argsort(-lengths, kind="stable")[:count]] = True  # a plan moves the longest
    for sub, mv in zip(_sub_batches(lengths), _sub_batches(moved), strict=True):
        b, k = len(sub), int(mv.sum())
        f = 0.0  # the PIM MAC units' broadcast FFN, beside this sub-batch's NPU phase
        if kind == "all-pim":
            n_t = 0.0
            p_t, p_busy = device.pim_mha(sub)
            fc = device.pim_fc(b, attn + ffn)
            p_t, p_busy = p_t + fc, p_busy + fc * LIBRA_PIM.channels
        elif kind == "ffn-to-pim":
            # the FFN weights stream once for both: the NPU's b - k requests
            # and, through the global buffer, the PIM's k (no read of its own)
            stream = device.npu_fc(b - k, ffn) if b > k else w_ffn / device.npu_bandwidth
            f = device.pim_ffn_broadcast(k)
            n_t = device.npu_fc(b, attn) + max(stream, f)
            p_t, p_busy = device.pim_mha(sub)
            p_busy += f * LIBRA_PIM.channels
        elif kind == "mha-to-npu":
            n_t = device.npu_fc(b, attn + ffn) + device.npu_mha(sub[mv])
            p_t, p_busy = device.pim_mha(sub[~mv])
        else:
            n_t = device.npu_fc(b, attn + ffn)
            p_t, p_busy = device.pim_mha(sub)
        # the weights: a GEMV per token on PIM, else the NPU's one stream
        wbytes += (b if kind == "all-pim" else min(b, 1)) * (w_attn + w_ffn)
        npu.append(n_t)
        pim.append(p_t)
        mac.append(f)
        busy += p_busy
    # the MAC units serve both sub-batches' attention and the broadcast FFN
    layer = max(sum(npu), sum(pim) + sum(mac),
                *(n + p for n, p in zip(npu, pim, strict=True)))
    return {"layer_s": layer, "npu_s": sum(npu), "pim_s": sum(pim) + sum(mac),
            "pim_channel_s": busy, "weight_bytes": wbytes}


def generate(device: Device, system: str, lengths: np.ndarray, steps: int) -> dict:
    """``steps`` generation steps of the group (every length grows by one
    per step); DBO decides per step under LibraPIM."""
    m = device.model
    total = npu = pim = busy = 0.0
    wbytes = 0
    decisions = []
    for s in range(steps):
        cur = lengths + s
        plan = ("none", 0)
        if system == "LibraPIM":
            kind, count, pred, base = dbo(device, len(cur), int(cur.max()))
            plan = (kind, count)
            decisions.append({"step": s, "plan": kind, "requests": count,
                              "predicted_s": pred * m.layers,
                              "predicted_no_offload_s": base * m.layers})
        t = layer_time(device, system, cur, plan)
        total += t["layer_s"] * m.layers
        npu += t["npu_s"] * m.layers
        pim += t["pim_s"] * m.layers
        busy += t["pim_channel_s"] * m.layers
        wbytes += t["weight_bytes"] * m.layers
        if decisions:
            decisions[-1]["simulated_s"] = t["layer_s"] * m.layers
    tokens = len(lengths) * steps
    return {"tokens_per_s": tokens / total if total else 0.0, "step_s": total / steps,
            "npu_utilization": npu / total if total else 0.0,
            "pim_utilization": pim / total if total else 0.0,
            "pim_channel_utilization": busy / (LIBRA_PIM.channels * total) if total else 0.0,
            "weight_gb_per_step": wbytes / steps / 1e9,
            "decisions": decisions}


def input_lengths(input_len: int, batch: int, seed: int, spread: float) -> np.ndarray:
    """Context lengths of a group: uniform in ``[input x (1 - spread),
    input]`` (at least 1 token)."""
    rng = np.random.default_rng(seed)
    lo = max(1, int(round(input_len * (1 - spread))))
    return rng.integers(lo, input_len + 1, batch)


def shapes(model: LibraModel) -> list[Shape]:
    out = [Shape("qkt", model.d_head, model.group), Shape("sv", model.d_head, model.group)]
    out += sorted({Shape("fc", i) for i, _ in model.attn_matrices() + model.ffn_matrices_shapes()},
                  key=Shape.key)
    return out


def _point(p: dict) -> dict:
    model = LIBRA_MODELS[p["model"]]
    device = Device(model, p["tp"], KernelTimer(pim_config(), p["mode"], p["table"]), p["t_ck"],
                    p["broadcast_mac_ccd"])
    lengths = input_lengths(p["input"], p["batch"], p["seed"], p["spread"])
    out = {"model": model.name, "batch": p["batch"], "input": p["input"], "systems": {}}
    for system in p["systems"]:
        r = generate(device, system, lengths, p["steps"])
        r = {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in r.items()}
        if system != "LibraPIM":
            r.pop("decisions")
        else:
            r["decisions"] = [{k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                               for k, v in d.items()} for d in r["decisions"]]
        out["systems"][system] = r
    base = out["systems"].get(p["systems"][0], {}).get("tokens_per_s")
    for r in out["systems"].values():
        r[f"speedup_over_{p['systems'][0]}"] = float(f"{r['tokens_per_s'] / base:.6g}") \
            if base else None
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
    for key in ("batches", "inputs"):  # each value's range: scenario.RANGES
        if not data[key]:
            raise ConfigError(f"{key}: the list is empty")
    for m in models:
        check_tp(m, data["tp"])
    all_shapes = sorted({s for m in models for s in shapes(m)}, key=Shape.key)
    tables = calibrate(LIBRA_PIM.profile, ["static"], all_shapes, Assumptions(), data["mode"],
                       sw, progress)
    points = [{"model": m.name, "batch": b, "input": i, "tp": data["tp"], "steps": data["steps"],
               "seed": data["seed"], "spread": data["spread"], "mode": data["mode"],
               "broadcast_mac_ccd": data["broadcast_mac_ccd"],
               "table": tables["static"], "t_ck": t_ck_ns(LIBRA_PIM.profile),
               "systems": systems}
              for m in models for b in data["batches"] for i in data["inputs"]]
    bar = sweep.Progress(len(points), "librapim", progress)
    rows = sw.map(_point, points, bar)
    return {"study": "librapim", "scenario": data, "npu_tflops": LIBRA_NPU.flops / 1e12,
            "pim": {"channels": LIBRA_PIM.channels, "profile": LIBRA_PIM.profile},
            "rows": rows, "wall_s": round(time.perf_counter() - started, 2)}
