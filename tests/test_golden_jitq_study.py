"""The JIT-Q study (golden/system/jitq_study.py)."""

from dataclasses import replace

import pytest

from golden.alu import AluChannel, AluConfig, KernelLayout, kernel
from golden.mx import FORMATS, MX6
from golden.system.jitq_study import (
    STATE_BYTES,
    capacity_gb,
    gemm_seconds,
    jitq_study,
    rows_needed,
)
from golden.system.reference import JITQ_GPU, JITQ_MODELS


@pytest.fixture(scope="module")
def study():
    return jitq_study(("bert-345M", "gpt-3-175B", "future-1T"))


@pytest.mark.parametrize("placement", ["tiled", "strided-counter"])
def test_kernel_time_is_linear_in_tiles(placement):
    base = AluConfig.from_profile("hbm-jitq", pairs=1, rows=2)
    cycles = []
    for tiles in (16, 32):
        cfg = replace(base, rows=rows_needed(placement, tiles, base.cols, "bf16"))
        lay = KernelLayout(placement, tiles, cfg.cols, cfg.rows)
        cycles.append(AluChannel(cfg).run(kernel(lay, "col", MX6), execute=False).cycles)
    assert cycles[1] / cycles[0] == pytest.approx(2, rel=2e-3)


def test_shift_reduction_and_kernel_ordering(study):
    for name, fmt in FORMATS.items():
        r = study["shift_reduction"][name]
        assert r["ratio"] == 3 and r["with_counter"] * 3 == r["variable_shift_commands"]
        assert r["cycles_ratio"] > 1 and r["bits"] == fmt.m + 1
    # per element: counter < strided <= tiled, for both masters and directions
    for source in ("bf16", "fp32"):
        for fmt in FORMATS:
            ns = {(k["placement"], k["direction"]): k["ns_per_element"] for k in study["kernels"]
                  if k["source"] == source and k["format"] == fmt}
            for d in ("row", "col"):
                assert ns[("strided-counter", d)] < ns[("strided", d)] <= ns[("tiled", "row")]
    fp32 = {k["format"]: k["cycles"] for k in study["kernels"] if k["source"] == "fp32"}
    bf16 = {k["format"]: k["cycles"] for k in study["kernels"] if k["source"] == "bf16"}
    assert all(fp32[f] > bf16[f] for f in FORMATS)  # the low plane costs loads and an OR


def test_gemm_time_by_hand():
    m = JITQ_MODELS["bert-345M"]
    g = gemm_seconds(m, MX6)
    s, b, h = 512, 8, 1024
    flops = 3 * (2 * s * b * 12 * h * h + 4 * s * s * b * h)
    assert g["compute"] == pytest.approx(flops / 181e12)
    nbytes = 3 * (12 * h * h * 6 / 8 + 16 * s * b * h)
    assert g["memory"] == pytest.approx(nbytes / (0.9 * 1638.4e9))
    assert g["seconds"] == max(g["compute"], g["memory"])


def test_capacity_by_hand():
    m = JITQ_MODELS["gpt-3-175B"]
    params = 96 / 16 * 12 * 12288 ** 2 / 8
    block = 12 * 12288 ** 2 / 8
    c = capacity_gb(m, MX6)
    assert c["two-copies"] - c["single-copy"] == pytest.approx(0.75 * params / 1e9, abs=2e-3)
    assert c["two-copies"] - c["jitq"] == pytest.approx(0.75 * (2 * params - 4 * block) / 1e9,
                                                        abs=2e-3)
    f = capacity_gb(m, MX6, "fp32")
    assert f["jitq"] - c["jitq"] == pytest.approx(
        (STATE_BYTES["fp32"] - STATE_BYTES["bf16"]) * params / 1e9, abs=2e-3)


def test_slack_hidden_and_loss_are_consistent(study):
    for m in study["models"]:
        for fmt in FORMATS:
            per = m["formats"][fmt]
            for d in per["sources"].values():
                loss = []
                for placement in ("strided-counter", "strided", "tiled"):
                    p = d["placements"][placement]
                    assert p["slack_ms"] == pytest.approx(per["gemm_ms"] - p["quant_ms"], abs=2e-4)
                    assert p["quant_ms"] == pytest.approx(p["row_ms"] + p["col_ms"], abs=2e-4)
                    assert p["hidden"] == (p["slack_ms"] >= 0)
                    loss.append(p["throughput_loss"])
                assert 0 <= loss[0] <= loss[1] <= loss[2]
                assert d["capacity_gb"]["jitq"] <= d["capacity_gb"]["two-copies"]
    assert study["alus_per_gpu"] == JITQ_GPU.stacks * JITQ_GPU.alus_per_stack == 1024
