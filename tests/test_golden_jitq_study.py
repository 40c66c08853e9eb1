"""The JIT-Q study (golden/system/jitq_study.py)."""

from dataclasses import replace

import pytest

from golden.alu import AluChannel, AluConfig, KernelLayout, kernel
from golden.mx import FORMATS, MX6, MX9
from golden.system.jitq_study import (
    STATE_BYTES,
    _pim_seconds,
    capacity_gb,
    gemm_seconds,
    jitq_study,
    pcs_per_cu,
    rows_needed,
    schedule,
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
    """A block's forward GEMMs and the backward ones (twice the work), each
    max(compute at the format's throughput, bytes at 90 % of the
    bandwidth); a format's own throughput moves only its GEMMs."""
    m = JITQ_MODELS["bert-345M"]
    g = gemm_seconds(m, MX6)
    s, b, h = 512, 8, 1024
    flops = 2 * s * b * 12 * h * h + 4 * s * s * b * h
    nbytes = 12 * h * h * 6 / 8 + 16 * s * b * h
    for name, k in (("forward", 1), ("backward", 2)):
        assert g[name]["compute"] == pytest.approx(k * flops / 181e12)
        assert g[name]["memory"] == pytest.approx(k * nbytes / (0.9 * 1638.4e9))
        assert g[name]["seconds"] == max(g[name]["compute"], g[name]["memory"])
    assert g["seconds"] == pytest.approx(g["forward"]["seconds"] + g["backward"]["seconds"])
    fast = replace(JITQ_GPU, mx6_tflops=362.0)
    assert gemm_seconds(m, MX6, fast)["compute"] == pytest.approx(g["compute"] / 2)
    assert gemm_seconds(m, MX9, fast)["compute"] == gemm_seconds(m, MX9)["compute"]


def test_capacity_by_hand():
    """Masters and state, activations, and the quantized weights: both
    copies of every layer, one, or JIT-Q's temporary copies (row and
    column) of one block, of two with the FP32 fallback."""
    m = JITQ_MODELS["gpt-3-175B"]
    params = 96 / 16 * 12 * 12288 ** 2 / 8
    block = 12 * 12288 ** 2 / 8
    c = capacity_gb(m, MX6)
    assert c["two-copies"] - c["single-copy"] == pytest.approx(0.75 * params / 1e9, abs=2e-3)
    assert c["two-copies"] - c["jitq"] == pytest.approx(0.75 * (2 * params - 2 * block) / 1e9,
                                                        abs=2e-3)
    assert capacity_gb(m, MX6, ahead=2)["jitq"] - c["jitq"] == pytest.approx(
        0.75 * 2 * block / 1e9, abs=2e-3)
    f = capacity_gb(m, MX6, "fp32")
    assert f["jitq"] - c["jitq"] == pytest.approx(
        (STATE_BYTES["fp32"] - STATE_BYTES["bf16"]) * params / 1e9, abs=2e-3)


def test_schedule_by_hand():
    """Forward GEMMs hide the next block's row copy, backward ones the
    previous block's column copy; FP32 masters fall back to two blocks
    ahead where either does not hide (BF16 masters wait instead)."""
    g = {"forward": {"seconds": 1.0}, "backward": {"seconds": 2.0}}
    pim = {"row": {"seconds": 0.5}, "col": {"seconds": 2.5}}
    assert schedule(g, pim, "bf16") == {"ahead": 1, "slack": {"forward": 0.5, "backward": -0.5},
                                        "exposed": 0.5}
    assert schedule(g, pim, "fp32") == {"ahead": 2, "slack": {"forward": 1.5, "backward": 1.5},
                                        "exposed": 0.0}
    pim["col"]["seconds"] = 1.0
    assert schedule(g, pim, "fp32")["ahead"] == 1


def test_slack_hidden_and_loss_are_consistent(study):
    for m in study["models"]:
        for fmt in FORMATS:
            per = m["formats"][fmt]
            for source, d in per["sources"].items():
                loss = []
                for placement in ("strided-counter", "strided", "tiled"):
                    p = d["placements"][placement]
                    k = p["ahead_blocks"]
                    assert k == 1 or (k == 2 and source == "fp32")
                    assert p["forward_slack_ms"] == pytest.approx(
                        k * per["forward_ms"] - p["row_ms"], abs=2e-4)
                    assert p["backward_slack_ms"] == pytest.approx(
                        k * per["backward_ms"] - p["col_ms"], abs=2e-4)
                    assert p["quant_ms"] == pytest.approx(p["row_ms"] + p["col_ms"], abs=2e-4)
                    assert p["hidden"] == (min(p["forward_slack_ms"],
                                               p["backward_slack_ms"]) >= 0)
                    assert p["quant_ms"] >= p["issue_ms"] - 2e-4
                    loss.append(p["throughput_loss"])
                assert 0 <= loss[0] <= loss[1] <= loss[2]
                assert d["capacity_gb"]["jitq"] <= d["capacity_gb"]["two-copies"]
    assert study["alus_per_gpu"] == JITQ_GPU.stacks * JITQ_GPU.alus_per_stack == 1024
    assert study["pcs_per_cu"] == 1024 // 8 // 16


def test_command_issue_bounds_the_pim(study):
    """The CU that issues a pseudo-channel's commands issues them to its 8
    pseudo-channels one a clock: at a sixteenth of that rate every kernel
    waits for its commands (the PIM's time is the issue time), at 16 times
    none does (the channel's cycle-exact time)."""
    table = study["kernels"]
    m = JITQ_MODELS["gpt-3-175B"]
    for rate, bound in ((1 / 16, True), (16.0, False)):
        gpu = replace(JITQ_GPU, pim_commands_per_cu_clock=rate)
        dirs = _pim_seconds(table, "MX6", "bf16", "strided-counter", m.block_params / m.tp,
                            gpu, pcs_per_cu("hbm-jitq", gpu))
        for d in dirs.values():
            assert (d["issue"] > d["channel"]) == bound
            assert d["seconds"] == max(d["issue"], d["channel"])
    k = next(r for r in table if (r["format"], r["source"], r["placement"], r["direction"])
             == ("MX6", "bf16", "strided-counter", "row"))
    runs = m.block_params / m.tp / 1024 / k["elements_per_alu"]
    assert dirs["row"]["issue"] == pytest.approx(runs * k["total"] * 8 / (1.7 * 16) * 1e-9)


def test_kernel_energy_is_a_whole_channels_run():
    """The study prices a one-ALU run for a whole pseudo-channel: its
    per-bank and per-ALU counts times the channel's ALUs. That equals the
    energy of the same kernel run on every ALU of the channel (the timing
    is the same: every command is broadcast)."""
    from golden import energy
    from golden.system.jitq_study import channel_energy, energy_tables

    params, alu = energy_tables()
    out = []
    for pairs in (1, 8):
        base = AluConfig.from_profile("hbm-jitq", pairs=pairs, rows=2)
        cfg = replace(base, rows=rows_needed("strided", 16, base.cols, "bf16"))
        words = kernel(KernelLayout("strided", 16, cfg.cols, cfg.rows), "col", MX6)
        r = AluChannel(cfg).run(words, execute=False)
        out.append((cfg, words, r, energy.alu_trace_counts(cfg, words, r.trace, r.cycles)))
    (_, _, r1, one), (cfg8, words, r8, eight) = out
    assert r1.cycles == r8.cycles
    scaled = channel_energy(one, r1.cycles, 8, params, alu, 0.8333)
    full = energy.alu_trace_energy(cfg8, params, alu, 0.8333, words, r8.trace, r8.cycles)
    assert scaled["total_pj"] == pytest.approx(full["total_pj"], rel=1e-12)
    assert scaled["breakdown"] == pytest.approx(full["breakdown"], rel=1e-12)


def test_energy_columns(study):
    """Every kernel row has its energy per element, and every model's
    quantization energy is that per element times the block's elements per
    GPU in both directions; its power is that energy over the PIM time."""
    for k in study["kernels"]:
        b = k["pj_per_element_breakdown"]
        assert k["pj_per_element"] == pytest.approx(sum(b.values()))
        assert b["alu"] > 0 and b["ld_st"] > 0 and b["background"] > 0
        assert b["io"] == 0 and b["other"] == 0  # no host traffic in a kernel
    pick = {(k["format"], k["source"], k["placement"], k["direction"]): k["pj_per_element"]
            for k in study["kernels"]}
    for m in study["models"]:
        params = JITQ_MODELS[m["model"]].block_params / m["tp"]
        for fname, f in m["formats"].items():
            for source, s in f["sources"].items():
                for placement, p in s["placements"].items():
                    pj = sum(pick[(fname, source, placement, d)] for d in ("row", "col"))
                    assert p["quant_energy_mj"] == pytest.approx(pj * params * 1e-9, abs=1e-4)
                    assert p["quant_power_w"] == pytest.approx(
                        p["quant_energy_mj"] / p["quant_ms"], rel=1e-3)


def test_energy_sweep_moves_what_it_names(study):
    """``scale`` multiplies a table value: op_pj moves the ALU category
    only; an unknown key is refused with the valid ones."""
    from golden.config import ConfigError
    from golden.system.jitq_study import kernel_table

    base = {(k["format"], k["source"], k["placement"], k["direction"]): k
            for k in study["kernels"]}  # the default tables
    for k in kernel_table(scale={"op_pj": 0.5, "act_standby_mw": 2}):
        b0 = base[(k["format"], k["source"], k["placement"], k["direction"])]
        b, was = k["pj_per_element_breakdown"], b0["pj_per_element_breakdown"]
        assert b["ld_st"] == pytest.approx(was["ld_st"])
        assert b["alu"] < was["alu"] and b["background"] > was["background"]
        assert k["cycles"] == b0["cycles"]
    with pytest.raises(ConfigError, match="valid: act_pj.*op_pj"):
        kernel_table(scale={"nope": 1})
