"""Heterogeneous PIM training runtime (golden/system/hetero.py)."""

import pytest

from golden.system.hetero import (
    MODES,
    WORKLOADS,
    Devices,
    HeteroConfig,
    Op,
    build_graph,
    conv_mapping,
    corun_graph,
    critical_path,
    gpu_step_seconds,
    placement,
    profile,
    rank_offload,
    run,
    scenario,
    sweeps,
    take_units,
    useful_units,
)
from golden.system.reference import HETERO_FIXED_UNITS, HETERO_PROFILE

CFG = HeteroConfig()


def test_placement_favours_corners_then_edges():
    counts = placement()
    assert len(counts) == 32 and sum(counts) == HETERO_FIXED_UNITS == 444
    grid = [counts[r * 8:(r + 1) * 8] for r in range(4)]
    corners = [grid[0][0], grid[0][7], grid[3][0], grid[3][7]]
    edges = grid[0][1:7] + grid[3][1:7] + [grid[1][0], grid[2][0], grid[1][7], grid[2][7]]
    centre = grid[1][1:7] + grid[2][1:7]
    assert min(corners) > max(edges) >= min(edges) > max(centre)
    uniform = placement(444, "uniform")
    assert sum(uniform) == 444 and max(uniform) - min(uniform) <= 1
    with pytest.raises(ValueError, match="placement"):
        HeteroConfig(placement="middle")


def test_conv_mapping_by_hand():
    """An 11 x 11 convolution's 121 multiplications and 120 additions take
    121 of the 444 units (a multiplier and an adder each; the sum a 7-level
    adder tree). Packed: the four corner banks' 23 units each, then 16 and
    13 of two edge banks: 6 banks. As the runtime takes units (one at a
    time from the bank with the most idle) they spread over 20 banks. With
    the uniform placement (13-14 units a bank): 9 banks packed, all 32
    spread. A kernel larger than the stack is refused."""
    m = conv_mapping(11)
    assert (m["multiplications"], m["additions"], m["units"]) == (121, 120, 121)
    assert m["adder_tree_levels"] == 7 and m["share_of_units"] == round(121 / 444, 4)
    assert m["packed"]["banks"] == {0: 23, 7: 23, 24: 23, 31: 23, 1: 16, 2: 13}
    assert m["packed"]["banks_spanned"] == 6 and m["runtime"]["banks_spanned"] == 20
    assert sum(m["runtime"]["banks"].values()) == 121
    u = conv_mapping(11, HeteroConfig(placement="uniform"))
    assert (u["packed"]["banks_spanned"], u["runtime"]["banks_spanned"]) == (9, 32)
    with pytest.raises(ValueError, match="needs 484 units"):
        conv_mapping(22)
    idle = [2, 3, 1]
    assert take_units(idle, 4) == [2, 2, 0] and idle == [0, 1, 1]
    with pytest.raises(ValueError, match="5 fixed-function units requested, 2 idle"):
        take_units(idle, 5)


def _roofline(op, cfg=CFG):
    return max(op.muladd / (cfg.cpu_gflops * 1e9) + op.other / (cfg.cpu_other_gflops * 1e9),
               op.nbytes / (cfg.cpu_gbs * 1e9))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_profile_is_the_cpu_roofline(workload):
    """The default profile: every op at the CPU's roofline; the types'
    totals are step 0's."""
    ops = build_graph(workload, 2)
    types = profile(ops, workload)
    assert all(op.cpu_s == _roofline(op) for op in ops)
    assert all(op.accesses == -(-op.nbytes // 64) for op in ops)
    step0 = [op for op in ops if op.step == 0]
    assert sum(t["ops"] for t in types.values()) == len(step0)
    assert sum(t["time_s"] for t in types.values()) == pytest.approx(
        sum(op.cpu_s for op in step0))


@pytest.mark.parametrize("workload", sorted(HETERO_PROFILE))
def test_published_profile_matches_the_published_shares(workload):
    cfg = HeteroConfig(profile="published")
    ops = build_graph(workload, 1)
    types = profile(ops, workload, cfg)
    total = sum(t["time_s"] for t in types.values())
    for kind, share in HETERO_PROFILE[workload].items():
        assert types[kind]["time_s"] / total == pytest.approx(share, rel=1e-9)
    # no op runs faster than its roofline, and one profiled type sits on it
    assert all(op.cpu_s >= _roofline(op) * (1 - 1e-12) for op in ops)
    assert any(op.cpu_s == pytest.approx(_roofline(op)) for op in ops
               if op.kind in HETERO_PROFILE[workload])


def test_profile_check_and_its_errors():
    from golden.system.hetero import profile_check

    types = {"Conv2D": {"time_s": 3.0}, "MatMul": {"time_s": 1.0}}
    check = profile_check(types, "AlexNet")
    assert check["Conv2D"] == {"model": 0.75, "published": 0.1048}
    assert check["MatMul"] == {"model": 0.25, "published": 0.1354}
    assert check["BiasAddGrad"] == {"model": 0.0, "published": 0.0462}
    assert profile_check(types, "LSTM") == {}
    with pytest.raises(ValueError, match="LSTM has no published profile"):
        profile(build_graph("LSTM", 1), "LSTM", HeteroConfig(profile="published"))
    with pytest.raises(ValueError, match="profile must be one of model, published"):
        HeteroConfig(profile="measured")


def test_rank_offload_by_hand():
    types = {"A": {"time_s": 50, "accesses": 10}, "B": {"time_s": 30, "accesses": 40},
             "C": {"time_s": 15, "accesses": 5}, "D": {"time_s": 5, "accesses": 45}}
    # rank sums: A 1+3, B 2+2, D 4+1, C 3+4; ties by time
    assert rank_offload(types, 0.8) == ["A", "B"]
    assert rank_offload(types, 0.85) == ["A", "B", "D"]
    assert rank_offload(types, 0.9) == ["A", "B", "D", "C"]
    assert rank_offload(types, 0.0) == []
    with pytest.raises(ValueError, match="fraction"):
        rank_offload(types, 1.5)


def test_graph_dependencies_link_steps_through_weight_updates():
    ops = build_graph("AlexNet", 2)
    by_name = {(op.step, op.name): op for op in ops}
    conv = by_name[(1, "conv0.fwd")]
    update = by_name[(0, "conv0.kernel.update")]
    assert update.id in conv.deps and by_name[(1, "input.normalize")].id in conv.deps
    assert not by_name[(1, "input.normalize")].deps  # free to run ahead
    assert "conv0.in_grad" not in {op.name for op in ops}  # no gradient for the image
    # 11 x 11 convolution: 121 multiplications and 120 additions per output,
    # counted as 2 x 121 FLOP (the bias add is its own op)
    out = 32 * 96 * 55 * 55
    assert by_name[(0, "conv0.fwd")].muladd == 2 * 121 * 3 * out


def _check_schedule(ops, dev, pipelining):
    runs = list(dev.runs.values())
    assert sorted(r.op for r in runs) == [op.id for op in ops]  # each op once
    end = {r.op: r.end for r in runs}
    for r in runs:
        assert all(r.start >= end[d] - 1e-15 for d in ops[r.op].deps)
    # resources: units per bank, one programmable PIM, one CPU, at every
    # start and every hand-over of units (preemptive sharing)
    for t in sorted({r.start for r in runs} | {t for r in runs for t, _ in r.history}):
        live = [r for r in runs if r.start <= t < r.end]
        for b in range(32):
            assert sum(r.units_at(t)[b] for r in live) <= dev.per_bank[b]
        assert sum(r.device == "prog" for r in live) <= 1
        assert sum(r.device == "cpu" for r in live) <= 1
    if not pipelining:
        last = {}
        for r in runs:
            s = ops[r.op].step
            last[s] = max(last.get(s, 0.0), r.end)
        for r in runs:
            s = ops[r.op].step
            assert s == 0 or r.start >= last[s - 1] - 1e-15


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("pipelining", [True, False])
def test_runtime_respects_dependencies_and_resources(workload, pipelining):
    ops = build_graph(workload, 3)
    offload = rank_offload(profile(ops, workload))
    out = run(ops, offload, pipelining=pipelining)
    _check_schedule(ops, out["devices"], pipelining)
    # a later step's multiply/add ops start early on idle fixed-function
    # units; not in LSTM and Word2vec, whose steps begin with an embedding
    # lookup that waits for the previous step's update
    if not pipelining:
        assert out["pipelined_ops"] == 0
    elif workload not in ("LSTM", "Word2vec"):
        assert out["pipelined_ops"] > 0
    cats = critical_path(ops, list(out["devices"].runs.values()))
    makespan = max(r.end for r in out["devices"].runs.values())
    assert sum(cats.values()) == pytest.approx(makespan, rel=1e-9)


def test_cpu_only_is_the_serial_profile():
    ops = build_graph("DCGAN", 2)
    profile(ops, "DCGAN")
    r = scenario("DCGAN", "cpu-only", steps=2)
    assert r["step_ms"] == pytest.approx(1e3 * sum(op.cpu_s for op in ops) / 2, abs=1e-4)
    assert r["utilization"]["cpu"] == pytest.approx(1.0) and r["offloaded"] == []


@pytest.mark.parametrize("workload", WORKLOADS)
def test_heterogeneous_beats_every_single_kind(workload):
    """The single-kind baselines run one op at a time: the fixed-function
    pool still beats the CPU (not on Word2vec, whose ops take microseconds
    on the CPU, less than the PIM's 2 us synchronization), the programmable
    PIM alone does not (its cores are slower than the CPU on what is
    offloaded)."""
    step = {m: scenario(workload, m, steps=2)["step_ms"] for m in MODES}
    assert step["hetero"] < min(step["fixed-only"], step["cpu-only"])
    assert max(step["fixed-only"], step["cpu-only"]) < step["prog-only"]
    assert (step["fixed-only"] < step["cpu-only"]) == (workload != "Word2vec")


@pytest.mark.parametrize("mode", ["prog-only", "fixed-only"])
def test_baselines_run_one_op_at_a_time(mode):
    """Without the runtime's scheduling nothing overlaps: every run starts
    after the one before it ends, offloaded ops on the PIM that can run
    them, the rest on the CPU; the heterogeneous runtime overlaps them."""
    ops = build_graph("AlexNet", 2)
    types = profile(ops, "AlexNet")
    offload = rank_offload(types)
    for concurrent in (False, True):
        out = run(ops, offload, fixed=mode == "fixed-only", prog=mode == "prog-only",
                  pipelining=False, recursive=False, concurrent=concurrent)
        runs = sorted(out["devices"].runs.values(), key=lambda r: r.start)
        overlap = any(b.start < a.end - 1e-15 for a, b in zip(runs, runs[1:], strict=False))
        assert overlap == concurrent, (mode, concurrent)
        if not concurrent:
            pim = "fixed" if mode == "fixed-only" else "prog"
            for r in runs:
                op = ops[r.op]
                want = pim if op.kind in offload and (pim == "prog" or op.fixed_ok) else "cpu"
                assert r.device == want, (op.name, r.device)


def test_recursive_kernels_run_multiply_add_parts_on_fixed_units():
    r = scenario("VGG-19", "hetero", steps=2)
    assert r["recursive_calls"] > 0
    off = scenario("VGG-19", "hetero", steps=2, recursive=False)
    assert off["recursive_calls"] == 0 and off["step_ms"] > r["step_ms"]


def test_device_api():
    ops = build_graph("AlexNet", 1)
    profile(ops, "AlexNet")
    dev = Devices(CFG, ops)
    conv = next(op for op in ops if op.kind == "Conv2D")
    relu = next(op for op in ops if op.kind == "Relu")
    assert dev.work_query() == {"fixed_idle": 444, "prog_idle": True, "cpu_idle": True}
    with pytest.raises(ValueError, match="not a multiply/add kernel"):
        dev.pim_fix(relu, 8)
    with pytest.raises(ValueError, match="445 fixed-function units requested, 444 idle"):
        dev.pim_fix(conv, 445)
    h = dev.pim_fix(conv, 100)
    p = dev.pim_prog(relu)
    with pytest.raises(ValueError, match="busy"):
        dev.pim_prog(relu)
    assert dev.work_query()["fixed_idle"] == 344 and not dev.work_query()["prog_idle"]
    info = dev.work_info(h)
    assert info["units"] == 100 and info["device"] == "fixed" and info["sync"] == CFG.fix_sync_s
    assert info["operation"] == pytest.approx(max(conv.muladd / (2 * 100 * CFG.fixed_hz),
                                                  conv.nbytes / (32 * CFG.bank_gbs * 1e9)))
    assert dev.pim_status(h) == "running"
    dev.advance(info["end"])
    assert dev.pim_status(h) == "done" and dev.work_query()["fixed_idle"] == 444
    assert dev.pim_status(p) == ("done" if dev.work_info(p)["end"] <= info["end"] else "running")


def test_useful_units_stop_at_the_bank_bandwidth():
    ops = build_graph("AlexNet", 1)
    conv = next(op for op in ops if op.kind == "Conv2D")
    bias = next(op for op in ops if op.kind == "BiasAdd")
    assert useful_units(conv, CFG) == 444
    # an add per 8 bytes streamed at 320 GB/s: 40 G adds/s = 64 units at 2 x 312.5 MHz
    assert useful_units(bias, CFG) <= 64


def test_study_rows():
    from golden.system.hetero import hetero_study

    data = hetero_study(("AlexNet",), steps=2)
    row = data["rows"][0]
    assert set(row["modes"]) >= set(MODES) | {"hetero-no-pipelining", "hetero-no-recursion"}
    assert row["modes"]["cpu-only"]["speedup_vs_cpu"] == 1.0
    assert list(row["profile"])[0] in HETERO_PROFILE["AlexNet"]


def test_energy_of_a_schedule_by_hand():
    """A CPU run, then a fixed-function run on its output (flushed from the
    CPU's caches), then the programmable PIM with and without a recursive
    kernel (docs/hetero.md, "Energy")."""
    from golden.system.hetero import DRAM_PJ_PER_BYTE, Op, run_energy

    cfg = HeteroConfig(cpu_dynamic_w=50.0, cpu_idle_w=10.0, link_pj_per_byte=40.0,
                       network_pj_per_byte=8.0, prog_core_w=0.5, stack_static_w=1.0)
    a = Op(0, "a", "MatMul", 0, muladd=2e9, other=0, nbytes=4_000_000, out_bytes=1_000_000,
           cpu_s=0.01)
    b = Op(1, "b", "MatMul", 0, muladd=4e9, other=0, nbytes=8_000_000, out_bytes=1_000,
           deps=[0])
    c = Op(2, "c", "Softmax", 0, muladd=1e9, other=1e9, nbytes=2_000_000, out_bytes=1_000,
           deps=[0])
    ops = [a, b, c]
    dev = Devices(cfg, ops)
    dev.advance(dev.work_info(dev.cpu_run(a))["end"])
    hb = dev.pim_fix(b, 40)
    hc = dev.pim_prog(c, 16)  # recursive: c's multiply/add on 16 fixed-function units
    runs = list(dev.runs.values())
    end = max(r.end for r in runs)
    dev.advance(end)
    rb, rc = dev.runs[hb], dev.runs[hc]
    assert rb.flush_bytes == rc.flush_bytes == a.out_bytes and rc.recursive
    remote = sum(max(0.0, u / 40 - 1 / 32) for u in rb.units) * b.nbytes \
        + sum(max(0.0, u / 16 - 1 / 32) for u in rc.units) * c.nbytes
    assert remote > 0  # 40 and 16 units cannot spread evenly over 32 vaults
    e = run_energy(ops, runs, end, cfg)["breakdown"]
    assert e["cpu"] == pytest.approx(50.0 * 0.01)
    assert e["link"] == pytest.approx((a.nbytes + 2 * a.out_bytes) * 40e-12)
    assert e["dram"] == pytest.approx((a.nbytes + b.nbytes + c.nbytes + 2 * a.out_bytes)
                                      * DRAM_PJ_PER_BYTE * 1e-12)
    assert e["fixed"] == pytest.approx((b.muladd + c.muladd) * cfg.fixed_pj_per_flop * 1e-12)
    assert e["prog"] == pytest.approx(4 * 0.5 * rc.operation)
    assert e["network"] == pytest.approx(remote * 8e-12)
    assert e["static"] == pytest.approx((10.0 + 1.0) * end)
    # without the recursive kernel the cores do the multiply/add part
    # themselves: longer on the cores, and no fixed-function FLOPs for it
    solo = Devices(cfg, ops)
    solo.advance(solo.work_info(solo.cpu_run(a))["end"])
    h = solo.pim_prog(c)
    r = solo.runs[h]
    assert not r.recursive and r.operation > rc.operation
    alone = run_energy(ops, list(solo.runs.values()), r.end, cfg)["breakdown"]
    assert alone["fixed"] == 0 and alone["prog"] == pytest.approx(4 * 0.5 * r.operation)
    assert alone["prog"] > e["prog"]


def test_study_energy_columns_and_overrides():
    from golden.config import ConfigError
    from golden.system.hetero import config_with, hetero_study

    base = hetero_study(("AlexNet",), steps=1)["rows"][0]["modes"]
    for m in base.values():
        assert m["energy_j"] == pytest.approx(sum(m["energy_breakdown_j"].values()), rel=1e-4)
        assert m["dynamic_energy_j"] == pytest.approx(
            m["energy_j"] - m["energy_breakdown_j"]["static"], rel=1e-4)
        assert m["power_w"] == pytest.approx(m["energy_j"] / (m["step_ms"] * 1e-3), rel=1e-4)
        assert m["edp_js"] == pytest.approx(m["energy_j"] * m["step_ms"] * 1e-3, rel=1e-4)
    assert base["cpu-only"]["energy_breakdown_j"]["fixed"] == 0
    assert base["hetero"]["dynamic_energy_vs_cpu"] < 1
    cheap = hetero_study(("AlexNet",), steps=1, cfg=config_with(["cpu_dynamic_w=30"]))
    m = cheap["rows"][0]["modes"]["cpu-only"]
    assert m["energy_breakdown_j"]["cpu"] == pytest.approx(
        base["cpu-only"]["energy_breakdown_j"]["cpu"] / 2, rel=1e-4)
    with pytest.raises(ConfigError, match="KEY one of fixed_pj_per_flop"):
        config_with(["fixed_hz=1"])
    with pytest.raises(ConfigError, match="not a number in"):
        config_with(["prog_core_w=-1"])
    assert config_with(["core_area_units=8"]).core_area_units == 8
    assert config_with(["cpu_gflops=400", "fix_sync_s=0"]).cpu_gflops == 400
    with pytest.raises(ConfigError, match="cpu_gbs: a rate must be > 0"):
        config_with(["cpu_gbs=0"])
    with pytest.raises(ConfigError, match="not a whole number"):
        config_with(["core_area_units=2.5"])


def test_sweeps():
    """The fixed-function clock x1 / x2 / x4: the step falls (x1 is the
    default run); 1 / 4 / 16 programmable cores at constant area: 444 + 3 x
    16, 444, 444 - 12 x 16 units (4 cores is the default run); the GPU at
    the roofline; two workloads together in less than one after the other
    and no less than the longer alone."""
    r = sweeps(("AlexNet",), steps=2)
    base = scenario("AlexNet", "hetero", steps=2)["step_ms"]
    f = r["frequency"]["AlexNet"]
    assert f["x1"]["step_ms"] == base and f["x1"]["step_ms"] > f["x2"]["step_ms"] \
        > f["x4"]["step_ms"]
    c = r["cores"]["AlexNet"]
    assert [c[n]["fixed_units"] for n in ("1", "4", "16")] == [492, 444, 252]
    assert c["4"]["step_ms"] == base
    g = r["gpu"]["AlexNet"]
    assert g["step_ms"] == pytest.approx(1e3 * gpu_step_seconds(build_graph("AlexNet", 1)),
                                         abs=1e-4)
    assert g["hetero_over_gpu"] == pytest.approx(g["hetero_step_ms"] / g["step_ms"], rel=1e-3)
    co = r["corun"]
    assert max(co["alone_step_ms"].values()) <= co["together_ms"] < co["one_after_the_other_ms"]
    with pytest.raises(ValueError, match="do not fit the area"):
        sweeps(("AlexNet",), steps=1, cfg=HeteroConfig(core_area_units=40))


def test_gpu_roofline_and_corun_graph_by_hand():
    ops = [Op(0, "a", "MatMul", 0, muladd=2e9, other=0, nbytes=10, out_bytes=0),
           Op(1, "b", "Relu", 0, muladd=0, other=0, nbytes=4_840_000_000, out_bytes=0)]
    assert gpu_step_seconds(ops, flops=1e12, gbs=484.0) == pytest.approx(2e-3 + 1e-2)
    a, b = build_graph("AlexNet", 1), build_graph("DCGAN", 1)
    ops, offload = corun_graph(("AlexNet", "DCGAN"), 1, CFG)
    assert len(ops) == len(a) + len(b) and [op.id for op in ops] == list(range(len(ops)))
    assert ops[len(a)].deps == [d + len(a) for d in b[0].deps]
    assert set(offload) >= set(rank_offload(profile(b, "DCGAN")))


def test_preemptive_sharing_by_hand():
    """A kernel on 8 units, compute-bound, half done when 8 more are handed
    to it: the other half runs at twice the rate, so its operation takes
    3/4 of what it would have; it held 8 units for the first half and 16
    since. The runtime shares the units no op could take: DCGAN's step is
    shorter with sharing, and nothing is handed over without it."""
    conv = Op(0, "conv", "Conv2D", 0, muladd=2 * 8 * CFG.fixed_hz * 1e-3, other=0,
              nbytes=1, out_bytes=0)
    dev = Devices(CFG, [conv])
    h = dev.pim_fix(conv, 8)
    r = dev.runs[h]
    op_s, fixed_s = r.operation, r.movement + r.sync
    assert op_s == pytest.approx(1e-3)
    dev.advance(op_s / 2)
    assert dev.share(lambda op: 16) == 8 and r.shared == 8 and sum(r.units) == 16
    assert r.operation == pytest.approx(0.75 * op_s) and r.end == pytest.approx(
        0.75 * op_s + fixed_s)
    assert r.unit_seconds == pytest.approx(8 * op_s / 2 + 16 * (r.end - op_s / 2))
    assert dev.share(lambda op: 16) == 0  # it has all it can use
    on = scenario("Inception-v3", "hetero", steps=1)  # its branches free units unevenly
    off = scenario("Inception-v3", "hetero", steps=1, sharing=False)
    assert on["shared_units"] > 0 == off["shared_units"] and on["step_ms"] < off["step_ms"]
