"""Benchmarks: RTL simulation speed under each simulator and each way of
running it (cocotb, the standalone player), the golden model on the same
streams, model build times, and the golden studies. Writes JSON."""

from __future__ import annotations

import json
import platform
import re
import time
from pathlib import Path

from golden.channel import ChannelModel
from golden.config import POLICIES, small_config
from sim import outputs, runner
from tb.stimulus import gemv_problem

GEMV_SHAPE = (256, 512)
BUILD_RUNS = Path("build") / "fast" / "runs" / "bench"


def bench_golden(repeat: int = 3) -> dict:
    cfg = small_config()
    _, _, cmds, beats = gemv_problem(*GEMV_SHAPE, seed=1, config=cfg)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = ChannelModel(cfg).run(cmds, beats)
        best = min(best, time.perf_counter() - start)
    return {"commands": len(cmds), "cycles": result.cycles, "wall_s": round(best, 4),
            "cycles_per_s": round(result.cycles / best), "commands_per_s": round(len(cmds) / best)}


def bench_energy(repeat: int = 3) -> dict:
    """The energy replay (golden.energy) of the golden row's GEMV, beside
    the run it charges: trace entries a second and its share of the run."""
    from golden.energy import run_energy

    cfg = small_config()
    _, _, cmds, beats = gemv_problem(*GEMV_SHAPE, seed=1, config=cfg)
    start = time.perf_counter()
    result = ChannelModel(cfg).run(cmds, beats)
    run_s = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        e = run_energy(cfg.profile, cfg, cmds, result)
        best = min(best, time.perf_counter() - start)
    return {"trace_entries": len(result.trace), "total_nj": round(e["total_pj"] / 1e3, 3),
            "wall_s": round(best, 4), "entries_per_s": round(len(result.trace) / best),
            "over_run": round(best / run_s, 3), "alu": _bench_alu_energy(repeat)}


def _bench_alu_energy(repeat: int) -> dict:
    """The same for the ALU channel: one MX6 kernel (strided-counter, row,
    16 tiles) on a whole hbm-jitq pseudo-channel, timing only."""
    from dataclasses import replace

    from golden import energy
    from golden.alu import AluChannel, AluConfig, KernelLayout, kernel
    from golden.mx import MX6
    from golden.system.jitq_study import rows_needed

    base = AluConfig.from_profile("hbm-jitq", rows=2)
    cfg = replace(base, rows=rows_needed("strided-counter", 16, base.cols, "bf16"))
    words = kernel(KernelLayout("strided-counter", 16, cfg.cols, cfg.rows), "row", MX6)
    start = time.perf_counter()
    result = AluChannel(cfg).run(words, execute=False)
    run_s = time.perf_counter() - start
    known = energy.alu_params_for(cfg)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        e = energy.alu_trace_energy(cfg, *known, words, result.trace, result.cycles)
        best = min(best, time.perf_counter() - start)
    return {"trace_entries": len(result.trace), "total_nj": round(e["total_pj"] / 1e3, 3),
            "wall_s": round(best, 4), "entries_per_s": round(len(result.trace) / best),
            "over_run": round(best / run_s, 3)}


def bench_golden_policies() -> dict:
    """Golden-model speed per controller policy on one attention kernel."""
    from golden.config import POLICIES, load_profile
    from golden.kernels import qkt

    cfg = load_profile("gddr6-aim", obuf_entries=8)
    k = qkt(cfg, 128, 4, 2048)
    out = {"kernel": f"{k.name} 2048 tokens", "commands": len(k.commands)}
    for policy in POLICIES:
        start = time.perf_counter()
        r = ChannelModel(cfg.replace(policy=policy)).run(k.commands, k.wdata)
        wall = time.perf_counter() - start
        out[policy] = {"cycles": r.cycles, "wall_s": round(wall, 3),
                       "commands_per_s": round(len(k.commands) / wall),
                       "cycles_per_s": round(r.cycles / wall)}
    return out


def bench_device_timing(repeat: int = 3) -> dict:
    """The golden model's cost of the device timing (docs/timing.md: more
    rules, mode switches, refresh): one attention kernel per policy on
    gddr6-aim and gddr6-aim-assumed, interleaved, each the best of
    ``repeat``: the same commands take this much more wall time (the device
    timing also simulates 2-4x the cycles, mostly mode switches)."""
    from golden.config import load_profile
    from golden.kernels import qkt

    profiles = ("gddr6-aim", "gddr6-aim-assumed")
    cfgs = {p: load_profile(p, obuf_entries=8) for p in profiles}
    k = qkt(cfgs[profiles[0]], 128, 4, 2048)
    out: dict = {"kernel": f"{k.name} 2048 tokens", "commands": len(k.commands)}
    for policy in POLICIES:
        best = dict.fromkeys(profiles, float("inf"))
        cycles = {}
        for _ in range(repeat):
            for p in profiles:
                start = time.perf_counter()
                r = ChannelModel(cfgs[p].replace(policy=policy)).run(k.commands, k.wdata)
                best[p] = min(best[p], time.perf_counter() - start)
                cycles[p] = r.cycles
        out[policy] = {**{p: {"cycles": cycles[p], "wall_s": round(best[p], 3),
                              "cycles_per_s": round(cycles[p] / best[p]),
                              "commands_per_s": round(len(k.commands) / best[p])}
                          for p in profiles},
                       "device_over_assumed_wall": round(best[profiles[0]] / best[profiles[1]],
                                                         2)}
    out["alu"] = _bench_alu_device_timing(repeat)
    return out


def _bench_alu_device_timing(repeat: int) -> dict:
    """The same for the JIT-Q ALU channel: one kernel on hbm-jitq (bank
    groups, the device rules, refresh) and on its four core rules alone."""
    import dataclasses

    from golden.alu import AluChannel, AluConfig, KernelLayout, kernel
    from golden.config import OPTIONAL_TIMING
    from golden.mx import MX6

    device = AluConfig.from_profile("hbm-jitq", pairs=1, rows=64)
    core = dataclasses.replace(device, bank_groups=1, timing=dataclasses.replace(
        device.timing, **OPTIONAL_TIMING))
    lay = KernelLayout("strided-counter", 4, device.cols, device.rows)
    words = kernel(lay, "row", MX6)
    best, cycles = {"device": float("inf"), "core": float("inf")}, {}
    for _ in range(repeat):
        for name, cfg in (("device", device), ("core", core)):
            start = time.perf_counter()
            cycles[name] = AluChannel(cfg).run(words, execute=False).cycles
            best[name] = min(best[name], time.perf_counter() - start)
    return {"kernel": "strided-counter row MX6, 4 tiles", "commands": len(words),
            **{n: {"cycles": cycles[n], "wall_s": round(best[n], 4),
                   "commands_per_s": round(len(words) / best[n])} for n in best},
            "device_over_core_cycles": round(cycles["device"] / cycles["core"], 3),
            "device_over_core_wall": round(best["device"] / best["core"], 2)}


def bench_study(out_dir: Path) -> dict:
    from golden.system.studies import dcs_utilization

    start = time.perf_counter()
    study = dcs_utilization()
    wall = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs.write_text(out_dir / "dcs-utilization.json", json.dumps(study, indent=2) + "\n",
                       "bench")
    d128 = [r for r in study["rows"] if " d128 " in r["kernel"]]
    return {"wall_s": round(wall, 1), "rows": len(study["rows"]),
            "file": str(out_dir / "dcs-utilization.json"),
            "dcs_of_bound_min_at_d128": min(r["policies"]["dcs"]["of_bound"] for r in d128),
            "dcs_slower_than_a_baseline": study["dcs_slower_than_a_baseline"],
            "dcs_table_storage": study["dcs_table_storage"]}


#: The stream of the simulation-path comparison: long_sparse under DCS.
PATH_STREAM = {"verilator": 20_000, "icarus": 2_000}
REPEAT = 3  # each timing is the best of this many runs, the ways interleaved


def bench_paths(sims: list[str], seed: int = 1) -> dict:
    """One random DCS stream (the long_sparse shape: idle 0.2, backpressure
    0.3, 1 % bad commands) under every way the RTL is simulated, in one
    run, each the best of REPEAT, interleaved: the cocotb testbench's
    per-cycle Python driver (how long streams ran before the standalone
    player; its own idle and backpressure draws, so its cycle count differs
    a little), the cocotb runner playing the player's load files from
    Python, the standalone player (no VPI), and the golden model scoring
    the record. Simulated cycles per wall-second."""
    import numpy as np

    from sim import fast
    from tb import scoreboard
    from tb.stimulus import random_stream

    config = small_config().replace(policy="dcs")
    out = {"stream": "long_sparse under dcs", "config": config.describe(), "repeat": REPEAT}
    for sim in sims:
        n = PATH_STREAM[sim]
        rng = np.random.default_rng(seed)
        cmds, wdata = random_stream(config, n, rng, bad=0.01, shape="sparse")
        loads = [fast.Load(cmds, wdata, 0.2, 0.3, 12345)]
        fast.build(sim, config)
        runner.build(sim, config)
        best = {k: float("inf") for k in ("driver", "cocotb", "standalone", "with_files",
                                          "golden", "golden_free")}
        times: dict = {}
        for _ in range(REPEAT):
            metrics, driver_s = fast.run_cocotb_driver(sim, config, loads,
                                                       BUILD_RUNS / f"bench-paths-{sim}-driver")
            under, cocotb_s = fast.run_under_cocotb(sim, config, loads,
                                                    BUILD_RUNS / f"bench-paths-{sim}-cocotb")
            start = time.perf_counter()
            alone = fast.run(sim, config, loads, BUILD_RUNS / f"bench-paths-{sim}", times=times)
            with_files = time.perf_counter() - start
            start = time.perf_counter()
            ref = scoreboard.check(ChannelModel(config), cmds, wdata, alone[0])
            golden_s = time.perf_counter() - start
            start = time.perf_counter()
            ChannelModel(config).run(cmds, wdata)
            golden_free_s = time.perf_counter() - start
            for key, value in (("driver", driver_s), ("cocotb", cocotb_s),
                               ("standalone", times["simulator_s"]), ("with_files", with_files),
                               ("golden", golden_s), ("golden_free", golden_free_s)):
                best[key] = min(best[key], value)
        cycles = alone[0].cycles
        rate = {"cocotb_driver": metrics["cycles"] / best["driver"],
                "cocotb_player": cycles / best["cocotb"],
                "standalone": cycles / best["standalone"],
                "standalone_with_files": cycles / best["with_files"],
                "golden_scoreboard": cycles / best["golden"]}
        out[sim] = {
            "commands": n, "cycles": cycles, "cocotb_driver_cycles": metrics["cycles"],
            "same_record": alone == under, "trace_entries": len(ref.trace),
            "wall_s": {k: round(v, 3) for k, v in best.items()},
            "cycles_per_s": {k: round(v) for k, v in rate.items()},
            "standalone_over_cocotb_driver": round(rate["standalone"] / rate["cocotb_driver"], 2),
            "standalone_over_cocotb_player": round(rate["standalone"] / rate["cocotb_player"], 2),
            "standalone_over_golden": round(rate["standalone"] / rate["golden_scoreboard"], 2),
        }
    return out


#: The channel's long player streams, for the Verilator-vs-golden ratio.
LONG_STREAMS = [("long_sparse", p) for p in POLICIES] + [("long_dense", p) for p in POLICIES] + [
    ("gemv", "static"), ("gemv", "dcs"), ("id_wrap", "dcs"),
    *(("dcs_kernel", p) for p in POLICIES)]


def bench_player_sizes(sim: str = "verilator", seed: int = 1) -> dict:
    """The standalone player with 2**PLAY_ADDR_BITS-entry arrays against
    the small build (2**PLAY_SMALL_BITS, sim/fast.py: play_bits) on the same
    streams (one command, and the 20,000-command long_sparse shape, static
    and DCS), interleaved, best of REPEAT: the simulator process's wall
    time (start-up included) and whether the records are the same."""
    import numpy as np

    from sim import fast
    from tb.scoreboard import PLAY_ADDR_BITS, PLAY_SMALL_BITS
    from tb.stimulus import random_stream

    sizes = (PLAY_ADDR_BITS, PLAY_SMALL_BITS)
    rows = []
    for policy in ("static", "dcs"):
        config = small_config().replace(policy=policy)
        for n in (1, PATH_STREAM["verilator"]):
            cmds, wdata = random_stream(config, n, np.random.default_rng(seed), bad=0.01,
                                        shape="sparse")
            loads = [fast.Load(cmds, wdata, 0.2, 0.3, 12345)]
            for bits in sizes:
                fast.build(sim, config, play_bits=bits)
            best, recs = dict.fromkeys(sizes, float("inf")), {}
            for _ in range(REPEAT):
                for bits in sizes:
                    times: dict = {}
                    recs[bits] = fast.run(sim, config, loads, BUILD_RUNS / f"sizes-{bits}",
                                          times=times, bits=bits)
                    best[bits] = min(best[bits], times["simulator_s"])
            cycles = recs[PLAY_SMALL_BITS][0].cycles
            rows.append({"policy": policy, "commands": n, "cycles": cycles,
                         "same_record": recs[sizes[0]] == recs[sizes[1]],
                         **{f"bits_{b}": {"simulator_s": round(best[b], 4),
                                          "cycles_per_s": round(cycles / best[b])}
                            for b in sizes}})
    return {"sim": sim, "repeat": REPEAT, "rows": rows}


def bench_long_streams(sim: str = "verilator", seed: int = 5) -> dict:
    """Every long stream the channel's player tests run (tb/play_tests.py,
    default sizes), the standalone simulator process against the golden
    model scoring the same record, each the best of REPEAT."""
    from tb import play_tests

    rows = []
    for name, policy in LONG_STREAMS:
        config = small_config().replace(policy=policy)
        sim_s = check_s = float("inf")
        for _ in range(REPEAT):
            r = play_tests.run_test(sim, config, name, BUILD_RUNS / f"long-{sim}-{policy}-{name}",
                                    seed=seed)
            if not r.passed:
                raise RuntimeError(f"bench: {name} ({policy}) failed: {r.message}")
            sim_s, check_s = min(sim_s, r.sim_wall_s), min(check_s, r.check_wall_s)
        cycles = r.metrics["cycles"]
        rows.append({"test": name, "policy": policy, "commands": r.metrics["commands"],
                     "cycles": cycles, "simulator_s": round(sim_s, 4),
                     "golden_s": round(check_s, 4),
                     "simulator_cycles_per_s": round(cycles / sim_s),
                     "golden_cycles_per_s": round(cycles / check_s),
                     "simulator_over_golden": round(check_s / sim_s, 2)})
    ratios = [r["simulator_over_golden"] for r in rows]
    return {"sim": sim, "seed": seed, "repeat": REPEAT, "rows": rows,
            "simulator_over_golden_min": min(ratios),
            "simulator_over_golden_geomean": round(float(__import__("math").prod(ratios))
                                                   ** (1 / len(ratios)), 2)}


def bench_builds(sims: list[str]) -> dict:
    """Wall time of building each configuration's models from scratch:
    generating the Verilog (into a fresh folder), the standalone player
    (sim/fast.py) and the cocotb model, per simulator. The gddr6-aim and
    hbm2-pim rows are the profiles' full geometry (16 banks x 16,384 rows)."""
    import shutil
    import tempfile

    from golden.config import load_profile
    from sim import fast
    from sim.generate import CONFIGS, dex_test_config, generate

    configs = {"small-static": small_config(), "small-dcs": small_config().replace(policy="dcs"),
               "dex": dex_test_config(), "gddr6-aim (full16)": CONFIGS["full16"](),
               "gddr6-aim dcs": load_profile("gddr6-aim").replace(policy="dcs"),
               "hbm2-pim": load_profile("hbm2-pim")}
    out = {}
    for label, config in configs.items():
        row = {"config": config.describe()}
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            generate(config, Path(tmp))
            row["generate_s"] = round(time.perf_counter() - start, 1)
        rtl = generate(config)
        row["verilog_mb"] = round(rtl.stat().st_size / 1e6, 2)
        for sim in sims:
            shutil.rmtree(fast.build_dir(sim, config), ignore_errors=True)
            row[f"{sim}_standalone_s"] = round(fast.build(sim, config).wall_s, 1)
            if label.startswith("small") or sim == "icarus":
                shutil.rmtree(runner.build_dir(sim, config, False), ignore_errors=True)
                start = time.perf_counter()
                runner.build(sim, config)
                row[f"{sim}_cocotb_s"] = round(time.perf_counter() - start, 1)
        out[label] = row
    return out


def bench_rtl(sim: str) -> dict:
    """The GEMV through the standalone player (tb/play_tests.py ``gemv``)."""
    from sim import fast
    from tb import play_tests

    build = fast.build(sim, small_config())
    r = play_tests.run_test(sim, small_config(), "gemv", BUILD_RUNS / f"gemv-{sim}", seed=1)
    cycles = r.metrics.get("cycles", 0)
    return {"passed": r.passed, "cycles": cycles, "commands": r.metrics.get("commands", 0),
            "simulator_wall_s": round(r.sim_wall_s, 3), "test_wall_s": round(r.wall_s, 3),
            "build_wall_s_if_stale": round(build.wall_s, 3),
            "cycles_per_s": round(cycles / r.sim_wall_s) if r.sim_wall_s else None}


def bench_rtl_kernel(sim: str, tokens: int = 1024) -> dict:
    """The QK^T kernel (d128 g2) through the standalone player under each
    policy: RTL cycles (equal to the golden model's) and simulation speed."""
    from tb import play_tests

    out = {}
    for policy in POLICIES:
        config = small_config().replace(policy=policy)
        r = play_tests.run_test(sim, config, "dcs_kernel", BUILD_RUNS / f"kernel-{sim}-{policy}",
                                seed=1, size=tokens)
        m = r.metrics
        out[policy] = {"passed": r.passed, "kernel": m.get("kernel"), "tokens": tokens,
                       "commands": m.get("commands"), "cycles": m.get("cycles"),
                       "simulator_wall_s": round(r.sim_wall_s, 3),
                       "test_wall_s": round(r.wall_s, 2),  # simulation plus the scoreboard
                       "cycles_per_s": round(m["cycles"] / r.sim_wall_s)
                       if r.passed and r.sim_wall_s else None}
    if out["static"]["cycles"] and out["dcs"]["cycles"]:
        out["dcs_speedup_over_static"] = round(out["static"]["cycles"] / out["dcs"]["cycles"], 3)
    return out


def bench_golden_hub() -> dict:
    """The golden HUB replaying the QK^T session of tb/test_hub.py, and
    beside it the golden module in closed loop (golden.hub.fabric: the
    channels live, every cycle of the session predicted) on the same calls."""
    from golden.config import small_hub_config
    from golden.hub import Hub, qkt_session
    from golden.hub.fabric import TimedHub

    hub = small_hub_config()
    session = qkt_session(hub, d_head=32, t0={0: 254, 1: 120}, steps=4)
    walls = {}
    for name, make in (("open", Hub), ("closed", TimedHub)):
        start = time.perf_counter()
        h = make(hub)
        for c in session.calls:
            h.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        if name == "closed":
            h.close()
            cycles = h.timings[-1].responded
        walls[name] = time.perf_counter() - start
    wall = walls["open"]
    commands = sum(len(s) for s in h.streams)
    return {"host_calls": len(session.calls), "channel_commands": commands,
            "wall_s": round(wall, 3), "host_calls_per_s": round(len(session.calls) / wall),
            "channel_commands_per_s": round(commands / wall),
            "closed_loop_wall_s": round(walls["closed"], 3), "module_cycles": cycles,
            "closed_loop_cycles_per_s": round(cycles / walls["closed"]),
            "closed_over_open_wall": round(walls["closed"] / wall, 2)}


def bench_golden_epu(scores: int = 65536, repeat: int = 3) -> dict:
    """The golden EPU's softmax (golden.hub.epu) over ``scores`` BF16
    scores: scores a second, and the modelled EPU cycles it stands for."""
    import numpy as np

    from golden import numerics
    from golden.hub import epu
    from golden.isa import LANES, Opcode

    x = numerics.float_to_bf16(np.random.default_rng(1).standard_normal(scores) * 4)
    words = np.zeros((epu.softmax_words(scores), LANES), np.uint16)
    words.reshape(-1)[:scores] = x
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        epu.softmax(words, scores)
        best = min(best, time.perf_counter() - start)
    return {"scores": scores, "epu_cycles": epu.cycles(Opcode.EPU_SOFTMAX, scores),
            "wall_s": round(best, 4), "scores_per_s": round(scores / best)}


def bench_golden_decode() -> dict:
    """The small transformer decoded on the golden PIM module
    (golden.hub.decode, GQA 4 query heads over 2 KV heads, 3 sequences of
    unequal length over 2 slots, the module in closed loop) with the
    float32 reference: tokens and module cycles a second of the whole run,
    and the worst logit error."""
    from golden.hub.decode import TinyModel, decode_study

    start = time.perf_counter()
    r = decode_study(TinyModel(heads=4, kv_heads=2), [70, 6, 20], [4, 8, 6])
    wall = time.perf_counter() - start
    tokens = sum(len(q["tokens"]) for q in r["sequences"])
    commands = sum(p["commands"] for p in r["programs"].values())
    cycles = r["cycles"]["last_response"]
    return {"tokens": tokens, "channel_commands": commands, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1),
            "channel_commands_per_s": round(commands / wall),
            "module_cycles": cycles, "module_cycles_per_s": round(cycles / wall),
            "max_logit_error": round(max(q["max_error"] for q in r["sequences"]), 4)}


def bench_rtl_hub(sim: str) -> dict:
    """The PIM module (HUB + 2 channels) per channel policy: the QK^T
    session of tb/test_hub.py qkt_two_requests (4 steps, seed 1) under
    cocotb beside the same calls through the standalone player (hub_play),
    in one run: the same record, the speed of each, and the step metrics;
    then the player's longer session (tb/play_tests.py hub_qkt)."""
    import dataclasses

    from golden.config import small_hub_config
    from sim import fast
    from tb import hub_scoreboard, play_tests
    from tb.hub_stimulus import qkt_case

    out = {}
    for policy in ("static", "dcs"):
        config = small_hub_config(policy)
        runner.build(sim, config)
        fast.build(sim, config)
        results, test_dir = runner.run(sim, ["qkt_two_requests"], config=config, seed=1,
                                       run_name=f"bench-hub-{policy}",
                                       extra_env={"PIMORCH_HUB_LAG": "1"})
        m = json.loads((test_dir / "metrics.json").read_text())
        under = json.loads((test_dir / "hub_record_qkt_two_requests.json").read_text())
        wall = results[0].wall_s
        # the session's seed as the cocotb test drew it (cocotb derives its
        # RANDOM_SEED from the seed given; the test logs it)
        drawn = int(re.search(r"seed (\d+)", (test_dir / "sim.log").read_text())[1])
        case = qkt_case(config, steps=4, seed=drawn % 1000)
        times: dict = {}
        rec = fast.run_hub(sim, config, case.calls, BUILD_RUNS / f"hub-{sim}-{policy}",
                           times=times)
        hub_scoreboard.check(config, case.calls, rec)
        alone_s = times["simulator_s"]
        long = play_tests.run_test(sim, config, "hub_qkt", BUILD_RUNS / f"hub-long-{sim}-{policy}",
                                   seed=1) if sim == "verilator" else None
        out[policy] = {"passed": results[0].passed, "host_calls": m["host_calls"],
                       "channel_commands": m["commands"], "cycles": m["cycles"],
                       "same_record": json.loads(json.dumps(dataclasses.asdict(rec))) == under,
                       "cocotb_test_wall_s": round(wall, 2),
                       "standalone_simulator_wall_s": round(alone_s, 3),
                       "cycles_per_s": {"cocotb": round(m["cycles"] / wall),
                                        "standalone": round(rec.cycle / alone_s)},
                       "standalone_over_cocotb": round(m["cycles"] / wall and
                                                       (rec.cycle / alone_s) / (m["cycles"] / wall),
                                                       1),
                       "step_multicast_bubbles": m["step_bubbles"],
                       "step_lag_vs_ideal_feed": m["step_lag_vs_ideal_feed"]}
        if long is not None:
            out[policy]["hub_qkt_player"] = {
                "passed": long.passed, "steps": long.metrics.get("steps"),
                "host_calls": long.metrics.get("host_calls"),
                "cycles": long.metrics.get("cycles"),
                "simulator_wall_s": round(long.sim_wall_s, 3),
                "scoreboard_wall_s": round(long.check_wall_s, 3)}
    return out


def bench_rtl_alu(sim: str) -> dict:
    """The JIT-Q ALU channel: the kernel tb/test_alu.py still runs under
    cocotb (tiled row MX4: the per-cycle Python driver) beside the same
    kernel through the standalone player, in one run; then every kernel
    (tb/play_tests.py ``alu_kernels``) through the player."""
    import numpy as np

    from sim import fast
    from sim.generate import ALU_TEST_CONFIG
    from tb import play_tests
    from tb.alu_stimulus import KERNEL_CASES, kernel_case

    runner.build(sim, ALU_TEST_CONFIG)
    fast.build(sim, ALU_TEST_CONFIG)
    results, test_dir = runner.run(sim, ["kernel_tiled_row_mx4"], config=ALU_TEST_CONFIG,
                                   seed=1, run_name="bench-alu-cocotb")
    m = json.loads((test_dir / "metrics.json").read_text())
    cocotb_rate = m["cycles"] / results[0].wall_s
    case = kernel_case(ALU_TEST_CONFIG, np.random.default_rng(1), *KERNEL_CASES[0])
    times: dict = {}
    (obs,) = fast.run(sim, ALU_TEST_CONFIG, [fast.Load(case.words, case.beats, 0.2, 0.2, 1)],
                      BUILD_RUNS / f"alu-one-{sim}", times=times)
    alone_rate = obs.cycles / times["simulator_s"]
    r = play_tests.run_test(sim, ALU_TEST_CONFIG, "alu_kernels", BUILD_RUNS / f"alu-{sim}",
                            seed=1)
    cycles = r.metrics.get("cycles", 0)
    return {"kernel_tiled_row_mx4": {
                "passed": results[0].passed, "commands": m["commands"],
                "cocotb_cycles": m["cycles"], "cocotb_test_wall_s": round(results[0].wall_s, 2),
                "standalone_cycles": obs.cycles,
                "standalone_simulator_wall_s": round(times["simulator_s"], 3),
                "cycles_per_s": {"cocotb": round(cocotb_rate), "standalone": round(alone_rate)},
                "standalone_over_cocotb": round(alone_rate / cocotb_rate, 1)},
            "alu_kernels": {
                "passed": r.passed, "kernels": r.metrics.get("kernels"),
                "commands": r.metrics.get("commands"), "cycles": cycles,
                "kernel_cycles": r.metrics.get("kernel_cycles"),
                "simulator_wall_s": round(r.sim_wall_s, 3), "test_wall_s": round(r.wall_s, 2),
                "cycles_per_s": round(cycles / r.sim_wall_s) if r.sim_wall_s else None}}


def bench_golden_studies() -> dict:
    """Wall time of the golden-only studies (PIM-SHERPA, heterogeneous
    training, JIT-Q with the ALU commands it times per second), the
    heterogeneous runtime's scheduling rate, and the commands a second of
    the cycle-exact channel timing a SHERPA decode GEMV (2048 x 2048 on
    lpddr5x-pim)."""
    from golden.system.hetero import build_graph, hetero_study, profile, rank_offload, run
    from golden.system.jitq_study import jitq_study
    from golden.system.sherpa_study import sherpa_study

    start = time.perf_counter()
    sherpa = sherpa_study()
    sherpa_s = time.perf_counter() - start
    start = time.perf_counter()
    hetero_study()
    hetero_s = time.perf_counter() - start
    ops = build_graph("VGG-19", 8)
    offload = rank_offload(profile(ops, "VGG-19"))
    start = time.perf_counter()
    run(ops, offload)
    run_s = time.perf_counter() - start
    start = time.perf_counter()
    jitq = jitq_study()
    jitq_s = time.perf_counter() - start
    # the SHERPA decode's GEMV on the LPDDR5X-PIM channel, cycle-exact
    from golden.channel import ChannelModel
    from golden.system.sherpa import gemv_channel_commands
    from golden.system.sherpa_study import pim_layout

    cfg, lay = pim_layout(2048, 2048)
    cmds, beats = gemv_channel_commands(lay, 0, cfg.gbuf_entries)
    start = time.perf_counter()
    ChannelModel(cfg).run(cmds, [0] * len(beats))
    gemv_s = time.perf_counter() - start
    return {"sherpa_wall_s": round(sherpa_s, 2),
            "jitq_wall_s": round(jitq_s, 2),
            "jitq_alu_commands_per_s": round(sum(k["total"] for k in jitq["kernels"]) / jitq_s),
            "sherpa_pim_gemv_commands_per_s": round(len(cmds) / gemv_s),
            "sherpa_points": sum(len(r["points"]) for r in sherpa["latency"]),
            "hetero_training_wall_s": round(hetero_s, 2),
            "hetero_runtime_ops_per_s": round(len(ops) / run_s)}


def bench_system() -> dict:
    """The system model: simulated PIM commands per wall-second in exact
    mode (the cycle-exact channel model) and fast mode (calibrated, composed),
    on QK^T d_head 128, group 8 under DCS; the weight-read merge beside it
    (``overlap``: simulated cycles per wall-second); and the ``pimphony`` study's wall
    time, cold (no kernel cache) on one process and on a local Dask
    cluster, then warm (cached calibrations); the ``pimphony-gpu``,
    ``pimphony-serving`` and ``librapim`` studies' wall time, warm."""
    import os

    import numpy as np

    from golden.system import pimphony
    from golden.system.kernel_timing import KernelTimer, Shape
    from golden.system.model import Assumptions, channel_config

    shape = Shape("qkt", 128, 8)
    cfg = channel_config("gddr6-aim", "dcs", Assumptions())
    per_unit = len(shape.build(cfg, 2).commands) - len(shape.build(cfg, 1).commands)
    first = len(shape.build(cfg, 1).commands)
    exact_units = 24
    start = time.perf_counter()
    KernelTimer(cfg, "exact").exact(shape, exact_units)
    exact_s = time.perf_counter() - start
    exact_cmds = first + (exact_units - 1) * per_unit
    timer = KernelTimer(cfg, "fast")
    timer.calibration(shape)
    units = shape.units(cfg, np.full(100_000, 65536))
    start = time.perf_counter()
    timer(shape, units)
    fast_s = time.perf_counter() - start
    fast_cmds = int((first + (units - 1) * per_unit).sum())
    out = {"kernel": f"{shape.key()} on {cfg.describe()}",
           "exact": {"commands": exact_cmds, "wall_s": round(exact_s, 3),
                     "commands_per_s": round(exact_cmds / exact_s)},
           "fast": {"kernels": len(units), "commands": fast_cmds, "wall_s": round(fast_s, 4),
                    "commands_per_s": round(fast_cmds / fast_s)}}
    # energy from the same counts (docs/energy.md): the fast mode's against
    # the exact mode's at the exact run's size, and its wall time on the kernels
    from golden.energy import params_for

    priced = params_for(cfg)
    exact_e = KernelTimer(cfg, "exact").energy(shape, [exact_units], *priced)["total_pj"][0]
    fast_e = timer.energy(shape, [exact_units], *priced)["total_pj"][0]
    start = time.perf_counter()
    timer.energy(shape, units, *priced)
    energy_s = time.perf_counter() - start
    out["energy"] = {"units": exact_units, "exact_nj": round(exact_e / 1e3, 1),
                     "fast_over_exact": round(fast_e / exact_e, 5),
                     "fast_kernels_per_s": round(len(units) / energy_s)}
    # NeuPIMs' weight reads merged beside the same kernel (golden/system/overlap.py)
    from golden.system import overlap

    kernel = shape.build(cfg, 12)
    start = time.perf_counter()
    events, pim_cycles = overlap.pim_trace(cfg, kernel)
    trace_s = time.perf_counter() - start
    start = time.perf_counter()
    slots = overlap.fill(cfg, events, None, stop=pim_cycles)["reads"]
    fill_s = time.perf_counter() - start
    out["overlap"] = {"kernel_units": 12, "pim_cycles": pim_cycles, "read_slots": slots,
                      "trace_wall_s": round(trace_s, 3), "merge_wall_s": round(fill_s, 3),
                      "merge_cycles_per_s": round(pim_cycles / fill_s)}
    # the same merge on conventional banks (a read waits for a bank the PIM left closed)
    start = time.perf_counter()
    conv = overlap.fill(cfg, events, None, stop=pim_cycles, banks="conventional")["reads"]
    conv_s = time.perf_counter() - start
    out["overlap"].update({"conventional_read_slots": conv,
                           "conventional_merge_wall_s": round(conv_s, 3),
                           "conventional_merge_cycles_per_s": round(pim_cycles / conv_s)})
    saved = os.environ.get("PIMORCH_KERNEL_CACHE")
    try:
        for label, cache, scheduler in (("cold_serial", "off", "serial"),
                                        ("cold_local_dask", "off", "local"),
                                        ("warm_serial", "build/bench-kernel-cache.json",
                                         "serial")):
            os.environ["PIMORCH_KERNEL_CACHE"] = cache
            if label == "warm_serial":
                pimphony.run("pimphony", scheduler="serial")  # fill the cache
            start = time.perf_counter()
            pimphony.run("pimphony", scheduler=scheduler)
            out[f"pimphony_{label}_wall_s"] = round(time.perf_counter() - start, 2)
        for study in ("pimphony-gpu", "pimphony-serving", "librapim"):
            pimphony.run(study, scheduler="serial")  # fill the cache
            start = time.perf_counter()
            pimphony.run(study, scheduler="serial")
            out[f"{study.replace('-', '_')}_warm_serial_wall_s"] = round(
                time.perf_counter() - start, 2)
    finally:
        if saved is None:
            os.environ.pop("PIMORCH_KERNEL_CACHE", None)
        else:
            os.environ["PIMORCH_KERNEL_CACHE"] = saved
    return out


def bench(sims: list[str], study_dir: Path = Path("build")) -> dict:
    """Every benchmark row; the DCS utilization study's JSON goes in
    ``study_dir``."""
    report = {
        "benchmark": f"GEMV {GEMV_SHAPE[0]}x{GEMV_SHAPE[1]} on one channel, static controller",
        "config": small_config().describe(),
        "host": {"python": platform.python_version(), "machine": platform.machine()},
        "golden": bench_golden(),
        "energy": bench_energy(),
        "golden_policies": bench_golden_policies(),
        "device_timing": bench_device_timing(),
        "dcs_utilization_study": bench_study(study_dir),
        "paths": bench_paths(sims),
        "long_streams": bench_long_streams() if "verilator" in sims else {},
        "player_sizes": bench_player_sizes() if "verilator" in sims else {},
        "builds": bench_builds(sims),
        "rtl": {sim: bench_rtl(sim) for sim in sims},
        "rtl_dcs_kernel": {sim: bench_rtl_kernel(sim) for sim in sims},
        "golden_hub": bench_golden_hub(),
        "golden_epu": bench_golden_epu(),
        "golden_decode": bench_golden_decode(),
        "rtl_hub": {sim: bench_rtl_hub(sim) for sim in sims},
        "rtl_alu": {sim: bench_rtl_alu(sim) for sim in sims},
        "golden_studies": bench_golden_studies(),
        "system": bench_system(),
    }
    for r in report["rtl"].values():
        if r.get("cycles_per_s"):
            r["over_golden"] = round(r["cycles_per_s"] / report["golden"]["cycles_per_s"], 2)
    return report
