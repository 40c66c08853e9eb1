"""Golden-model studies behind ``pimorch run NAME``."""

from __future__ import annotations

import time

from golden.channel import ChannelModel
from golden.config import POLICIES, ConfigError, load_profile
from golden.isa import LANES
from golden.kernels import Kernel, fc, qkt, sv, utilization_bound

D_HEADS = (64, 128, 256)
GROUPS = (1, 2, 4, 8)
FC_DIMS = (128, 512, 4096)


SENSITIVITY_DEPTHS = (4, 8, 16, 64)


def dcs_utilization(profile: str = "gddr6-aim", tokens: int = 512, obuf_entries: int = 8,
                    d_heads=D_HEADS, groups=GROUPS, fc_dims=FC_DIMS, **overrides) -> dict:
    """Cycles and MAC utilization per controller policy for QK^T and SV
    (d_head x GQA group, row-reuse mapping) and FC GEMVs, against the
    scheduler-independent bound (golden.kernels.utilization_bound)."""
    cfg = load_profile(profile, obuf_entries=obuf_entries, **overrides)
    kernels: list[Kernel] = [qkt(cfg, d, g, tokens) for d in d_heads for g in groups]
    kernels += [sv(cfg, d, g, tokens) for d in d_heads for g in groups]
    kernels += [fc(cfg, i, o) for i in fc_dims for o in fc_dims]
    rows = []
    started = time.perf_counter()
    for k in kernels:
        bound = utilization_bound(cfg, k)
        row = {"kernel": k.name, "commands": len(k.commands), **bound, "policies": {}}
        for policy in POLICIES:
            r = ChannelModel(cfg.replace(policy=policy)).run(k.commands, k.wdata)
            util = bound["macs"] * cfg.timing.mac_ccd / r.cycles
            row["policies"][policy] = {
                "cycles": r.cycles, "mac_utilization": round(util, 4),
                "of_bound": round(util / bound["utilization_bound"], 4),
                "mode_switches": r.mode_switches}
        if row["policies"]["dcs"]["of_bound"] < 0.9:
            # further than 10 % from the bound: how deep must the queues be?
            row["dcs_queue_depth_sensitivity"] = {
                str(depth): round(bound["macs"] * cfg.timing.mac_ccd / ChannelModel(cfg.replace(
                    policy="dcs", io_depth=depth, compute_depth=depth)).run(
                        k.commands, k.wdata).cycles / bound["utilization_bound"], 4)
                for depth in SENSITIVITY_DEPTHS}
        rows.append(row)
    # kernel -> cycles DCS takes beyond the faster baseline, where it does
    # (its decode stage puts its first issue a cycle after the in-order ones')
    slower = {r["kernel"]: d for r in rows if (d := r["policies"]["dcs"]["cycles"] - min(
        r["policies"]["static"]["cycles"], r["policies"]["pingpong"]["cycles"])) > 0}
    from golden.dcs import paper_table_bits, table_bits

    return {"study": "dcs-utilization", "config": cfg.describe(), "tokens": tokens,
            "dcs_table_storage": {**table_bits(cfg), "paper_form": paper_table_bits(cfg),
                                  "reference_bytes": 576},
            "queue_depths": {"io": cfg.io_depth, "compute": cfg.compute_depth},
            "mac_utilization": "MACs x tCCD / cycles; of_bound: utilization / utilization_bound",
            "dcs_slower_than_a_baseline": slower,
            "mode_switches": {p: sum(r["policies"][p]["mode_switches"] for r in rows)
                              for p in POLICIES},
            "rows": rows,
            "wall_s": round(time.perf_counter() - started, 2)}


#: FC GEMV sizes of the utilization-vs-dimension study (d_in = d_out)
FC_SWEEP = (128, 256, 512, 1024, 2048, 4096, 8192)


def fc_utilization(profile: str = "gddr6-aim", dims=FC_SWEEP, obuf_entries: int = 8,
                   **overrides) -> dict:
    """MAC utilization (MACs x tCCD / cycles) of the square FC GEMV against
    its dimension, per controller policy, with the cycle labels of the
    static run (golden.system.kernel_timing.labels)."""
    from golden.system.kernel_timing import labels

    cfg = load_profile(profile, obuf_entries=obuf_entries, **overrides)
    for d in dims:
        if d < LANES or d % LANES or d > max(FC_SWEEP):
            raise ConfigError(f"fc-utilization: dimension {d} must be a multiple of {LANES} "
                              f"from {LANES} to {max(FC_SWEEP)}")
    rows, started = [], time.perf_counter()
    for d in dims:
        k = fc(cfg, d, d)
        bound = utilization_bound(cfg, k)
        row = {"d": d, "commands": len(k.commands), "macs": bound["macs"],
               "utilization_bound": bound["utilization_bound"], "policies": {}}
        for policy in POLICIES:
            pc = cfg.replace(policy=policy)
            lab = labels(pc, k)
            row["policies"][policy] = {
                "cycles": lab["cycles"],
                "mac_utilization": round(bound["macs"] * cfg.timing.mac_ccd / lab["cycles"], 4),
                "labels": {x: lab[x] for x in ("mac", "refresh", "mode", "act_pre", "io")}}
        rows.append(row)
    return {"study": "fc-utilization", "config": cfg.describe(), "rows": rows,
            "wall_s": round(time.perf_counter() - started, 2)}


def kernel_breakdown(profile: str = "gddr6-aim", d_head: int = 128, groups=(1, 8),
                     tokens: int = 4096, obuf_entries: int = 8, **overrides) -> dict:
    """Where the cycles of the attention kernels go (QK^T and SV of one KV
    head on one channel, ``tokens`` tokens), per policy: MAC, refresh, mode
    switches, ACT/PRE and the rest (I/O bursts and stalls), in cycles and
    shares (the labels of golden.system.kernel_timing)."""
    from golden.system.kernel_timing import labels

    if not 1 <= tokens <= 1 << 20:
        raise ConfigError(f"kernel-breakdown: tokens must be 1 .. {1 << 20}, not {tokens}")
    cfg = load_profile(profile, obuf_entries=obuf_entries, **overrides)
    rows = []
    for make in (qkt, sv):
        for g in groups:
            k = make(cfg, d_head, g, tokens)
            row = {"kernel": k.name, "policies": {}}
            for policy in POLICIES:
                lab = labels(cfg.replace(policy=policy), k)
                row["policies"][policy] = {
                    "cycles": lab["cycles"], "refreshes": lab["refreshes"],
                    **{x: lab[x] for x in ("mac", "refresh", "mode", "act_pre", "io")},
                    "shares": {x: round(lab[x] / lab["cycles"], 4)
                               for x in ("mac", "refresh", "mode", "act_pre", "io")}}
            rows.append(row)
    return {"study": "kernel-breakdown", "config": cfg.describe(), "tokens": tokens,
            "labels": "mac: MAC issue to + tCCD; refresh: REF to + tRFC; mode: MODE to + "
                      "nMODCH; act_pre: ACT + tRCD, PRE + tRP; io: the rest (WR-INP / RD-OUT "
                      "bursts and stalls); each cycle once, in this order",
            "rows": rows}


CONTEXTS = tuple(1 << k for k in range(10, 21))  # 1K .. 1M tokens


def reference_hub(**overrides):
    """The PIMphony module as a HubConfig: 16 GDDR6-AiM channels, 1 MB chunks."""
    from golden.config import HubConfig
    from golden.system.reference import CHUNK_BYTES, MODULE_CHANNELS

    fields = {"n_channels": MODULE_CHANNELS, "chunk_bytes": CHUNK_BYTES, "instr_depth": 64,
              "requests": 64, "chunks_per_request": 255, "gpr_entries": 1 << 14}
    fields.update(overrides)
    return HubConfig(channel=load_profile(), **fields)


def reference_attention_hub(**overrides):
    """``reference_hub`` as the attention lowering needs it
    (golden/hub/lowering.py): DCS channels with 8 OBuf entries
    (``model.Assumptions.dcs_obuf_entries``) and 16 DYN-MODIs (an
    assumption: GQA group 4 at d_head 128 needs 12)."""
    base = reference_hub(**{"max_modis": 16, **overrides})
    return base.replace(channel=base.channel.replace(policy="dcs", obuf_entries=8))


def dpa_program_size(d_head: int = 128, contexts=CONTEXTS) -> dict:
    """DPA program bytes (constant) against the fully unrolled static
    instruction stream and command count of one QK^T head, per context."""
    from golden.hub import INSTR_BYTES, QktLayout, program_bytes, unrolled_instructions
    from golden.isa import FIELDS, REQ_STATUS_FIELDS, word_width

    hub = reference_hub()
    layout = QktLayout(hub, d_head, unroll=min(hub.channel.obuf_entries, 4))
    prog = layout.program()
    rows = []
    for t in contexts:
        n = unrolled_instructions(prog, t)
        iters = -(-t // (layout.unroll * layout.tokens_per_slot))
        commands = layout.words + iters * layout.unroll * (layout.words + 1)
        rows.append({"tokens": t, "dpa_program_bytes": program_bytes(prog),
                     "static_instructions": n, "static_bytes": n * INSTR_BYTES,
                     "static_over_dpa": round(n * INSTR_BYTES / program_bytes(prog), 1),
                     "channel_commands_per_channel": commands})
    chunk_bits = (hub.physical_chunks - 1).bit_length()
    config_bits = word_width(REQ_STATUS_FIELDS) + FIELDS["gpr_base"].width
    storage = {
        "instruction_buffer_bytes": hub.instr_depth * INSTR_BYTES,
        "config_buffer_bytes": -(-hub.requests * config_bits // 8),
        "va2pa_bytes": -(-hub.requests * hub.chunks_per_request * chunk_bits // 8),
    }
    storage["total_bytes"] = sum(storage.values())
    return {"study": "dpa-program-size", "config": hub.describe(), "kernel": f"QK^T d_head "
            f"{d_head}, token-centric over {hub.n_channels} channels x {hub.channel.banks} "
            f"banks, unroll {layout.unroll}", "program_words": len(prog),
            "dispatcher_storage": {**storage, "reference_limit_bytes": 200 * 1024},
            "rows": rows}


def dpa_capacity(requests: int = 4096, seed: int = 0, chunk_bytes: int | None = None) -> dict:
    """KV capacity use under static allocation (every request reserves its
    model's context window) and DPA (1 MB chunks taken as the request grows),
    with context lengths drawn per dataset (golden.system.reference.Dataset.sample).

    Requests are admitted in draw order until the next one does not fit the
    KV capacity (system capacity minus the weights). A request's KV is
    ``2 x layers x kv_heads`` token streams (K and V per layer and KV head),
    each in whole chunks of ``chunk_bytes / (d_head x 2 B)`` tokens (1 MB
    chunks by default)."""
    from golden.system.model import admit
    from golden.system.reference import CHUNK_BYTES, DATASETS, GB, MODELS, SYSTEMS

    chunk = chunk_bytes or CHUNK_BYTES

    rows = []
    for model in MODELS.values():
        streams = 2 * model.layers * model.kv_heads
        tpc = chunk // (model.d_head * 2)
        kv_cap = model.capacity_gb * GB - model.weight_bytes
        for task in model.datasets:
            lengths = DATASETS[task].sample(requests, seed)
            for system in SYSTEMS.values():
                modules = model.capacity_gb // system.module_gb
                if streams % modules:
                    raise ValueError(f"{model.name}: {streams} KV streams over {modules} modules")
                schemes = {}
                for scheme in ("static", "dpa"):
                    a = admit(model, lengths, scheme, model.capacity_gb, chunk)
                    batch, allocated, live = a["batch"], a["allocated_bytes"], a["live_bytes"]
                    schemes[scheme] = {
                        "batch": batch, "allocated_gb": round(allocated / GB, 2),
                        "live_kv_gb": round(live / GB, 2),
                        "utilization_of_allocated": round(live / allocated, 4) if batch else 0,
                        "utilization_of_kv_capacity": round(live / kv_cap, 4)}
                rows.append({
                    "model": model.name, "dataset": task, "system": system.name,
                    "modules": modules, "capacity_gb": model.capacity_gb,
                    "weights_gb": round(model.weight_bytes / GB, 2),
                    "kv_capacity_gb": round(kv_cap / GB, 2),
                    "kv_bytes_per_token": model.kv_bytes_per_token,
                    "context_window": model.window, "tokens_per_chunk": tpc,
                    "drawn_lengths": {"mean": round(float(lengths.mean()), 1),
                                      "std": round(float(lengths.std()), 1),
                                      "min": int(lengths.min()), "max": int(lengths.max())},
                    **schemes,
                    "batch_gain": round(schemes["dpa"]["batch"] / max(schemes["static"]["batch"],
                                                                      1), 2)})
    return {"study": "dpa-capacity", "seed": seed, "requests_drawn": requests,
            "chunk_bytes": chunk,
            "lengths": "scaled Beta on [min, max] matching the dataset's mean and std "
                       "(golden/system/reference.py)",
            "note": "both systems hold the same total capacity per model and split every "
                    "request's KV streams evenly over their modules, so their batches agree; "
                    "they differ in module count",
            "rows": rows}


EPU_SIZES = (16, 256, 4096, 65536)


def epu_accuracy(sizes=EPU_SIZES, seed: int = 0, scale: float = 4.0) -> dict:
    """The EPU's softmax (``golden.hub.epu``) on seeded normal scores times
    ``scale``, per number of scores: the worst error against the float64
    softmax in BF16 ulps of the exact value, the fraction equal to numpy's
    float32 softmax rounded to BF16 (and the worst distance in BF16 steps),
    and the EPU's cycles; and a TCP reduction of 16 channels' words against
    float64."""
    import numpy as np

    from golden import numerics
    from golden.hub import epu
    from golden.isa import Opcode

    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        x = numerics.float_to_bf16(rng.standard_normal(n) * scale)
        words = np.zeros(epu.softmax_words(n) * LANES, np.uint16)
        words[:n] = x
        p = epu.softmax(words.reshape(-1, LANES), n).reshape(-1)[:n]
        got = numerics.bf16_to_float(p).astype(np.float64)
        xv = numerics.bf16_to_float(x).astype(np.float64)
        e = np.exp(xv - xv.max())
        exact = e / e.sum()
        ok = exact >= 2.0 ** -126
        ulp = np.exp2(np.floor(np.log2(exact[ok])) - 7)
        xf = numerics.bf16_to_float(x)
        ef = np.exp(xf - xf.max(), dtype=np.float32)
        ref = numerics.float_to_bf16(ef / ef.sum(dtype=np.float32))
        rows.append({"scores": n, "words": epu.softmax_words(n),
                     "cycles": epu.cycles(Opcode.EPU_SOFTMAX, n),
                     "max_error_ulp": round(float((np.abs(got[ok] - exact[ok]) / ulp).max()), 3),
                     "equal_to_float32": round(float((ref == p).mean()), 4),
                     "max_steps_from_float32": int(np.abs(ref.astype(np.int64)
                                                          - p.astype(np.int64)).max())})
    span = 16
    parts = numerics.float_to_bf16(rng.standard_normal((8 * span, LANES)))
    red = numerics.bf16_to_float(epu.reduce(parts, span)).astype(np.float64)
    want = numerics.bf16_to_float(parts).astype(np.float64).reshape(8, span, LANES).sum(axis=1)
    ulp = np.exp2(np.floor(np.log2(np.abs(want))) - 7)
    return {"softmax": rows,
            "reduce": {"words": 8, "span": span,
                       "cycles": epu.cycles(Opcode.EPU_REDUCE, op_size=8, span=span),
                       "max_error_ulp": round(float((np.abs(red - want) / ulp).max()), 3)},
            "seed": seed, "scale": scale, "exp_error_bound": epu.EXP_ERROR}
