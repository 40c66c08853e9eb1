"""Golden-model studies behind ``pimorch run NAME``."""

from __future__ import annotations

import time

from golden.channel import ChannelModel
from golden.config import POLICIES, load_profile
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
            util = bound["macs"] * cfg.timing.t_ccd / r.cycles
            row["policies"][policy] = {
                "cycles": r.cycles, "mac_utilization": round(util, 4),
                "of_bound": round(util / bound["utilization_bound"], 4)}
        if row["policies"]["dcs"]["of_bound"] < 0.9:
            # further than 10 % from the bound: how deep must the queues be?
            row["dcs_queue_depth_sensitivity"] = {
                str(depth): round(bound["macs"] * cfg.timing.t_ccd / ChannelModel(cfg.replace(
                    policy="dcs", io_depth=depth, compute_depth=depth)).run(
                        k.commands, k.wdata).cycles / bound["utilization_bound"], 4)
                for depth in SENSITIVITY_DEPTHS}
        rows.append(row)
    slower = [r["kernel"] for r in rows if r["policies"]["dcs"]["cycles"] > min(
        r["policies"]["static"]["cycles"], r["policies"]["pingpong"]["cycles"])]
    from golden.dcs import table_bits

    return {"study": "dcs-utilization", "config": cfg.describe(), "tokens": tokens,
            "dcs_table_storage": {**table_bits(cfg), "reference_bytes": 576},
            "queue_depths": {"io": cfg.io_depth, "compute": cfg.compute_depth},
            "mac_utilization": "MACs x tCCD / cycles; of_bound: utilization / utilization_bound",
            "dcs_slower_than_a_baseline": slower, "rows": rows,
            "wall_s": round(time.perf_counter() - started, 2)}
