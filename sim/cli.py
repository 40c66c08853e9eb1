"""``pimorch``: the project's command line.

Errors in input (a bad configuration key, an unknown profile, a missing
tool, a malformed command) print one line naming the problem and exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import time
from pathlib import Path

from golden.config import POLICIES, PROFILES, ConfigError, load_profile, load_profile_data
from sim import outputs
from sim.generate import CONFIGS
from sim.tools import SIMULATORS, ToolError

CONFIG_NAMES = sorted(CONFIGS)


def _overrides(pairs: list[str]) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        if key == "policy":
            out[key] = value.strip()
            continue
        try:
            out[key] = int(value)
        except ValueError:
            raise ConfigError(f"--set {key}: value {value!r} is not an integer") from None
    return out


def _int_list(text: str, what: str, lo: int = 1, hi: int = 1 << 20,
              multiple: int = 1) -> tuple[int, ...]:
    """A comma-separated list of at most LIMITS['list_values'] integers,
    each in [lo, hi] and a multiple of ``multiple``."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"{what}: {text!r} is not a comma-separated list of integers") from None
    if len(values) > LIMITS["list_values"]:
        raise ConfigError(f"{what}: at most {LIMITS['list_values']} values, not {len(values)}")
    for v in values:
        if not lo <= v <= hi or v % multiple:
            rule = f" and a multiple of {multiple}" if multiple > 1 else ""
            raise ConfigError(f"{what}: every value must be in [{lo}, {hi}]{rule}, not {v}")
    return values


def _name_list(text: str | None, known, what: str, noun: str) -> tuple[str, ...]:
    """Comma-separated names, each one of ``known`` (None: all of them)."""
    if text is None:
        return tuple(known)
    names = tuple(n.strip() for n in text.split(","))
    for n in names:
        if n not in known:
            raise ConfigError(f"{what}: unknown {noun} {n!r} (known: {', '.join(known)})")
    return names


#: Upper bounds of the command line's sizes and counts (docs/bad-input.md).
SEED_MAX = (1 << 32) - 1
LIMITS = {"stream_commands": 10_000_000, "commands": 100_000_000, "segment_size": 1 << 18,
          "jobs": 64, "tokens": 1 << 16, "d_head": 1024, "requests": 1_000_000,
          "split_bytes_min": 4096, "steps": 1000, "list_values": 64, "dim": 8192,
          "groups": 64}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``pimorch: error: ...`` naming the
    argument, exit status 2 (no usage block)."""

    def error(self, message):
        print(f"pimorch: error: {message}", file=sys.stderr)
        sys.exit(2)


def _int_in(lo: int, hi: int):
    """An argparse type: an integer in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], not {value}")
        return value
    return parse


def _env_int(name: str, lo: int, hi: int, default: int | None) -> int | None:
    """The environment variable ``name`` as an integer in [lo, hi]."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"environment variable {name}={text!r} is not an integer") from None
    if not lo <= value <= hi:
        raise ConfigError(f"environment variable {name}={value} must be in [{lo}, {hi}]")
    return value


def _env_sim(value: str | None) -> str:
    """--sim, else the SIM environment variable, else verilator."""
    if value is not None:
        return value
    sim = os.environ.get("SIM") or "verilator"
    if sim not in SIMULATORS:
        raise ConfigError(f"environment variable SIM={sim!r} is not one of "
                          f"{', '.join(SIMULATORS)}")
    return sim


def _emit(data: dict, json_path: str | None) -> None:
    """The result as JSON (strict: a NaN or infinity is an error, not a
    bare token) on standard output or, atomically, in ``json_path``."""
    try:
        text = json.dumps(data, indent=2, allow_nan=False)
    except ValueError as e:
        raise ConfigError(f"--json: the result holds a value JSON cannot carry ({e})") from None
    if json_path in (None, "-"):
        print(text)
    else:
        outputs.write_text(json_path, text + "\n", "--json")
        print(f"wrote {json_path}", file=sys.stderr)


# ---- commands -------------------------------------------------------------


def _policy_flag(config) -> str:
    """`` --policy P`` of a channel or HUB configuration ('' otherwise)."""
    from sim.runner import config_policy

    policy = config_policy(config)
    return f" --policy {policy}" if policy else ""


def cmd_sim(args) -> int:
    from golden.config import POLICIES, small_config, small_hub_config
    from sim import runner
    from sim.waves import open_commands
    from tb import play_tests

    args.sim = _env_sim(args.sim)
    if args.seed is None:
        args.seed = _env_int("SEED", 0, SEED_MAX, None)
    if args.stream_commands is None:
        args.stream_commands = _env_int("STREAM_COMMANDS", 1, LIMITS["stream_commands"], 20000)
    waves = args.waves or runner.waves_enabled()
    policies = args.policy or list(POLICIES)
    env = {"PIMORCH_HUB_LAG": "1"}
    rows, started = [], time.perf_counter()
    # (label, configuration, cocotb tests, player tests[, cocotb test module])
    parts = [(policy, small_config().replace(policy=policy), runner.list_tests(policy),
              play_tests.list_tests(policy)) for policy in policies]
    if not args.no_hub:
        from tb.hub_stimulus import decode_rtl_hub

        hub_tests = runner.list_tests(module_name=runner.HUB_TB_MODULE)
        parts += [(f"hub-{policy}", small_hub_config(policy), hub_tests,
                   play_tests.list_tests(policy, kind="hub"))
                  for policy in policies if policy in runner.HUB_POLICIES]
        decode_hub = decode_rtl_hub()
        if decode_hub.channel.policy in policies:
            parts.append(("decode", decode_hub,
                          runner.list_tests(module_name=runner.DECODE_TB_MODULE),
                          play_tests.list_tests(kind="decode"), runner.DECODE_TB_MODULE))
    if not args.no_alu:
        from sim.generate import ALU_TEST_CONFIG

        parts.append(("alu", ALU_TEST_CONFIG,
                      runner.list_tests(module_name=runner.ALU_TB_MODULE),
                      play_tests.list_tests(kind="alu")))
    if not args.no_dex:
        from sim.generate import dex_test_config

        parts.append(("dex", dex_test_config(),
                      runner.list_tests(module_name=runner.DEX_TB_MODULE),
                      play_tests.list_tests(kind="dex")))
    known = {t for part in parts for t in part[2] + part[3]}
    unknown = [t for t in args.test or [] if t not in known]
    if unknown:
        raise ConfigError(f"--test: unknown test(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    chosen = []
    for label, config, applicable, player, *module in parts:
        tests = [t for t in (args.test or applicable) if t in applicable]
        played = [] if args.no_player or waves else \
            [t for t in (args.test or player) if t in player]
        if tests or played:
            chosen.append((label, config, tests, played, module[0] if module else None))
    if not chosen:  # every test named is a player test, and the player is off
        why = "--waves (the player writes no waveforms)" if waves else "--no-player"
        raise ConfigError(f"--test {', '.join(args.test or [])}: player test(s), not run "
                          f"with {why}")
    for label, config, tests, played, module in chosen:
        print(f"pimorch sim: {label}: {len(tests)} cocotb test(s) and {len(played)} player "
              f"test(s) under {args.sim}{' with waveforms' if waves else ''}; "
              f"building the models if needed ...", flush=True)
        # one seed for the cocotb tests of the run, printed (tb/seeds.py: it replays them)
        cocotb_seed = args.seed if args.seed is not None else secrets.randbelow(1 << 32)
        if tests:
            runner.build(args.sim, config, waves=waves)
        for name in tests:
            results, test_dir = runner.run(args.sim, [name], config=config, waves=waves,
                                           seed=cocotb_seed, run_name=f"{label}-{name}",
                                           extra_env=env, module=module)
            for r in results:
                metrics = test_dir / "metrics.json"
                m = json.loads(metrics.read_text()) if metrics.is_file() else {}
                wave = test_dir / "waves.vcd"
                rows.append(r.passed)
                status = "PASS" if r.passed else "FAIL"
                print(f"  {status}  {r.name:28} {m.get('commands', 0):>7} cmds "
                      f"{m.get('cycles', 0):>9} cycles {r.wall_s:8.2f} s  seed {cocotb_seed}"
                      + (f"  {wave}" if wave.is_file() else ""), flush=True)
                if wave.is_file():
                    for line in open_commands(test_dir):
                        print(f"        view: {line}")
                if not r.passed:
                    print(f"        replay: pimorch sim --sim {args.sim} --test {r.name} "
                          f"--seed {cocotb_seed}{_policy_flag(config)}")
                    if not wave.is_file():
                        print(f"        with waves: pimorch sim --sim {args.sim} --waves "
                              f"--test {r.name} --seed {cocotb_seed}{_policy_flag(config)}")
                    print(f"        {r.message.splitlines()[0] if r.message else ''}")
                    print(f"        log: {test_dir / 'sim.log'}")
        for name in played:
            size = args.stream_commands if name in play_tests.SCALED else None
            run_dir = runner.BUILD / "fast" / "runs" / args.sim / f"{label}-{name}"
            r = play_tests.run_test(args.sim, config, name, run_dir, seed=args.seed, size=size)
            rows.append(r.passed)
            m = r.metrics
            print(f"  {'PASS' if r.passed else 'FAIL'}  {name + ' (player)':28} "
                  f"{m.get('commands', 0):>7} cmds {m.get('cycles', 0):>9} cycles "
                  f"{r.wall_s:8.2f} s  (simulator {r.sim_wall_s:.2f} s)  seed {r.seed}",
                  flush=True)
            if not r.passed:
                print(f"        {r.message.splitlines()[0] if r.message else ''}")
                policy = _policy_flag(config)
                print(f"        replay: pimorch sim --sim {args.sim}{policy} "
                      f"--test {name} --seed {r.seed}"
                      + (f" --stream-commands {size}" if size else ""))
                print(f"        run folder: {run_dir}")
    passed = sum(rows)
    failed = len(rows) - passed
    print(f"{args.sim}: {passed} passed, {failed} failed "
          f"in {time.perf_counter() - started:.1f} s (build folders build/sim/, build/fast/)")
    return 0 if rows and not failed else 1


def cmd_regress(args) -> int:
    from sim.regress import regress

    args.sim = _env_sim(args.sim)
    outputs.check_file(args.json, "--json")
    only = None if args.segment is None else [args.segment]
    summary = regress(args.commands, policy=args.policy, shape=args.shape, sim=args.sim,
                      seed=args.seed, jobs=args.jobs, segment_size=args.segment_size,
                      only=only)
    s = summary
    print(f"{args.sim}: {s['segments'] - s['failed']} passed, {s['failed']} failed: "
          f"{s['commands']} commands, {s['cycles']} cycles in {s['wall_s']} s "
          f"(simulator {s['simulator_s']} s at {s['simulator_cycles_per_s']} cycles/s, "
          f"golden {s['golden_s']} s, summed over {s['jobs']} worker(s)); seed {s['seed']}")
    if args.json:
        _emit(summary, args.json)
    return 0 if not s["failed"] else 1


def cmd_verilog(args) -> int:
    from sim.generate import CONFIGS, generate

    outputs.check_dir(args.out, "--out")
    for name in args.config or ["small", "full16"]:
        path = generate(CONFIGS[name]())
        out = Path(args.out) / name / path.name
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--out {out.parent}: {e.strerror or e}") from None
        outputs.write_text(out, path.read_text(), "--out")
        print(f"{name:7} {out}  ({CONFIGS[name]().describe()})")
    return 0


def cmd_lint(args) -> int:
    from sim.lint import lint

    return lint(args.config, ruff=not args.no_ruff)


def cmd_gemv(args) -> int:
    """A GEMV on the golden model: cycles, utilisation, accuracy."""
    import numpy as np

    from golden import numerics as nm
    from golden.channel import ChannelModel, gemv_result
    from golden.isa import Opcode
    from tb.stimulus import gemv_problem

    cfg = load_profile(args.profile, **{"rows": 64, "cols": 32, "gbuf_entries": 32,
                                        "obuf_entries": 4, **_overrides(args.set)})
    w, x, cmds, beats = gemv_problem(args.n_out, args.n_in, args.seed, cfg)
    start = time.perf_counter()
    result = ChannelModel(cfg, strict=True).run(cmds, beats)
    wall = time.perf_counter() - start
    y = nm.bf16_to_float(gemv_result(result.rdata, args.n_out, cfg.banks))
    ref = nm.bf16_to_float(w).astype(np.float32) @ nm.bf16_to_float(x).astype(np.float32)
    first_mac = next(e.cycle for e in result.trace if e.opcode == Opcode.MAC)
    compute_cycles = result.cycles - first_mac
    data = {
        "config": cfg.describe(), "n_out": args.n_out, "n_in": args.n_in, "seed": args.seed,
        "commands": len(cmds), "macs": result.mac_count, "cycles": result.cycles,
        "compute_cycles": compute_cycles, "mode_switches": result.mode_switches,
        "mac_utilization": round(result.mac_count * cfg.timing.mac_ccd / compute_cycles, 4),
        "time_us": round(result.cycles * load_profile_data(args.profile).get("t_ck_ns", 1)
                         / 1000, 3),
        "max_abs_err_vs_float32": float(np.max(np.abs(y - ref))),
        "golden_wall_s": round(wall, 4),
    }
    from golden.energy import params_for, trace_energy

    known = params_for(cfg)
    if known:  # the run's energy from its trace (docs/energy.md)
        e = trace_energy(cfg, *known, cmds, result.trace, result.cycles)
        per_mac = e["breakdown"]["mac"] / max(1, result.mac_count)
        data["energy"] = {"total_nj": round(e["total_pj"] / 1e3, 3),
                          "pj_per_mac_command": round(per_mac, 3),
                          "breakdown_nj": {k: round(v / 1e3, 3) for k, v in e["breakdown"].items()},
                          "counts": e["counts"]}
    _emit(data, args.json)
    return 0


def cmd_profiles(args) -> int:
    for name in PROFILES:
        data = load_profile_data(name)
        print(f"{name}: {load_profile(name).describe()}")
        for key, source in data.get("sources", {}).items():
            print(f"    {key}: {source}")
    return 0


def cmd_timing(args) -> int:
    """The constraint table of a profile (golden/timing.py), with sources."""
    from golden.timing import table

    overrides = _overrides(args.set)
    cfg = load_profile(args.profile, **overrides)
    sources = {**load_profile_data(args.profile).get("sources", {}),
               **{k: f"--set {k}={v}" for k, v in overrides.items()}}
    rows = [{**row, "source": sources.get(row["key"], "project assumption (no source given)")}
            for row in table(cfg.timing)]
    if args.json:
        _emit({"profile": args.profile, "t_ck_ns": load_profile_data(args.profile).get("t_ck_ns"),
               "constraints": rows}, args.json)
        return 0
    print(f"{args.profile}: {len(rows)} constraints (latencies in controller cycles)")
    print(f"  {'key':10} {'level':9} {'after':6} {'before':6} {'window':>6} {'cycles':>6}  source")
    for r in rows:
        print(f"  {r['key']:10} {r['level']:9} {r['preceding']:6} {r['following']:6} "
              f"{r['window']:>6} {r['latency']:>6}  {r['source']}")
    return 0


def cmd_aim_compare(args) -> int:
    """The project's command streams against the AiM simulator (sim/aim.py)."""
    from sim.aim import KERNELS, compare

    kernels = _name_list(args.kernels, tuple(KERNELS), "--kernels", "kernel")
    out = Path(args.out) if args.out else None
    data = compare(args.profile, _overrides(args.set), list(kernels),
                   policy=args.policy, binary=Path(args.aim_sim) if args.aim_sim else None,
                   out_dir=out)
    if args.json:
        _emit(data, args.json)
        return 0
    print(f"{data['config']}; refresh {data['refresh']}")
    print(f"  {'kernel':14} {'commands':>8} {'AiM cycles':>11} {'project':>9} {'ratio':>7} "
          f"{'switches':>8}")
    for r in data["rows"]:
        aim = f"{r['aim_cycles']:>11,}" if "aim_cycles" in r else f"{'-':>11}"
        ratio = f"{r['ratio']:>7.4f}" if "ratio" in r else f"{'-':>7}"
        print(f"  {r['kernel']:14} {r['commands']:>8,} {aim} {r['project_cycles']:>9,} "
              f"{ratio} {r['mode_switches']:>8,}")
    if out:
        print(f"traces and configurations in {out}/ (run: ramulator2 -f {out}/KERNEL.yaml)")
    return 0


def cmd_bench(args) -> int:
    from sim.bench import bench

    to_file = args.json not in (None, "-")
    report = bench(args.sim or list(SIMULATORS),
                   Path(args.json).parent if to_file else Path("build"))
    if to_file:
        _emit(report, args.json)  # the file, atomically; the JSON on stdout too
    _emit(report, None)
    return 0 if all(r["passed"] for r in report["rtl"].values()) else 1


def cmd_dcs_utilization(args) -> int:
    from golden.system.studies import dcs_utilization

    _emit(dcs_utilization(args.profile, tokens=512 if args.tokens is None else args.tokens,
                          d_heads=_int_list(args.d_heads, "--d-heads", 16, LIMITS["d_head"], 16),
                          groups=_int_list(args.groups or "1,2,4,8", "--groups", 1,
                                           LIMITS["groups"]),
                          fc_dims=_int_list(args.fc_dims or "128,512,4096", "--fc-dims", 16,
                                            LIMITS["dim"], 16),
                          **_overrides(args.set)), args.json)
    return 0


def cmd_fc_utilization(args) -> int:
    from golden.system.studies import FC_SWEEP, fc_utilization

    dims = (_int_list(args.fc_dims, "--fc-dims", 16, LIMITS["dim"], 16) if args.fc_dims
            else FC_SWEEP)
    _emit(fc_utilization(args.profile, dims=dims, **_overrides(args.set)), args.json)
    return 0


def cmd_kernel_breakdown(args) -> int:
    from golden.system.studies import kernel_breakdown

    _emit(kernel_breakdown(args.profile, d_head=args.d_head,
                           groups=_int_list(args.groups or "1,8", "--groups", 1, LIMITS["groups"]),
                           tokens=4096 if args.tokens is None else args.tokens,
                           **_overrides(args.set)), args.json)
    return 0


def cmd_dpa_program_size(args) -> int:
    from golden.system.studies import dpa_program_size

    _emit(dpa_program_size(d_head=args.d_head), args.json)
    return 0


def cmd_dpa_capacity(args) -> int:
    from golden.system.studies import dpa_capacity

    _emit(dpa_capacity(requests=args.requests, seed=args.seed, chunk_bytes=args.chunk_bytes),
          args.json)
    return 0


def cmd_epu_accuracy(args) -> int:
    from golden.system.studies import epu_accuracy

    _emit(epu_accuracy(seed=args.seed), args.json)
    return 0


def cmd_decode(args) -> int:
    from golden.hub.decode import TinyModel, decode_run, decode_summary

    model = TinyModel(layers=args.layers, d_model=args.d_model, heads=args.heads,
                      kv_heads=args.kv_heads, d_head=args.d_head, d_ff=args.d_ff,
                      vocab=args.vocab, seed=args.seed)
    prompts = _int_list(args.prompts, "--prompts", 1, 4096)
    new = _int_list(args.new_tokens, "--new-tokens", 0, 4096)
    if len(new) == 1:
        new = new * len(prompts)
    if len(new) != len(prompts):
        raise ConfigError(f"--new-tokens: {len(new)} values for {len(prompts)} prompts "
                          f"(give one, or one per prompt)")
    try:
        dec, seqs = decode_run(model, list(prompts), list(new), slots=args.slots,
                               seed=args.seed, max_tokens=args.max_tokens,
                               kv_chunks=args.kv_chunks, channels=args.channels,
                               partition=args.partition, policy=args.policy)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    r = decode_summary(dec, seqs)
    print(f"# {r['hub']}; attention {r['partition'].upper()}", file=sys.stderr)
    for i, q in enumerate(r["sequences"]):
        print(f"sequence {i}: prompt {q['prompt']}, {q['new_tokens']} new tokens "
              f"{q['tokens'][q['prompt']:]}; worst logit error {q['max_error']:.4f} of the "
              f"largest; greedy differs at {len(q['greedy_differs'])} steps", file=sys.stderr)
    cyc = r["cycles"]
    for kind, p in r["programs"].items():
        c = cyc["programs"][kind]
        print(f"{kind}: {p['steps']} STEPs, {p['requests']} request runs, {p['commands']} "
              f"channel commands, {p['epu_cycles']} EPU cycles; {c['cycles']} module cycles "
              f"({c['cycles'] / c['steps']:.0f} a STEP, at most {c['max_step_cycles']})",
              file=sys.stderr)
    lock = cyc["lock_step_cycles"]
    print(f"module cycles (golden, closed loop): {cyc['last_response']} to the last response; "
          f"per lock step (a token of every active sequence) {min(lock)}-{max(lock)}, "
          f"{sum(lock) / len(lock):.0f} on average", file=sys.stderr)
    if args.system_model:
        from golden.system.decode_timing import against_decode

        try:
            r["system_model"] = sm = against_decode(dec)
        except ValueError as e:
            raise ConfigError(f"--system-model: {e}") from None
        print(f"system model over the {len(sm['steps'])} attention STEPs' cycles (min, "
              f"median, max): on the module {sm['module']['min']}, {sm['module']['median']}, "
              f"{sm['module']['max']}; by its kernels {sm['kernels']['min']}, "
              f"{sm['kernels']['median']}, {sm['kernels']['max']}", file=sys.stderr)
    if args.rtl:
        from sim import fast

        run_dir = Path(args.rtl_dir)
        print(f"replaying {len(dec.h.calls)} host calls on the RTL module under {args.rtl} "
              f"(building it if needed) ...", file=sys.stderr)
        t = fast.play_decode(args.rtl, dec, run_dir)
        r["rtl"] = t
        print(f"RTL ({args.rtl}): every response, handshake and channel trace equal to "
              f"golden, every cycle as the closed loop predicted ({t['last_response']} to the "
              f"last response, {t['module_cycles']} with the channels quiet)", file=sys.stderr)
    if args.json:
        _emit(r, args.json)
    return 0


def cmd_dpa_program(args) -> int:
    from golden.config import small_hub_config
    from golden.hub import QktLayout, disassemble
    from golden.system.studies import reference_hub

    if args.kernel == "attention":
        return _attention_program(args)
    if args.kernel == "fc":
        return _fc_program(args)
    hub = reference_hub() if args.reference else small_hub_config()
    layout = QktLayout(hub, args.d_head, unroll=args.unroll or min(
        2, hub.channel.obuf_entries))
    words = layout.program()
    print(f"# QK^T DPA program, d_head {args.d_head}, unroll {layout.unroll}; {hub.describe()}")
    print(f"# tokens per iteration {layout.unroll * layout.tokens_per_slot}, per chunk "
          f"{layout.tokens_per_chunk} (PROG_COMMIT arg_b); {len(words)} words = "
          f"{16 * len(words)} B")
    print("\n".join(disassemble(words)))
    return 0


def _fc_program(args) -> int:
    from golden.hub import disassemble
    from golden.hub.lowering import FcLayout, small_attention_hub
    from golden.system.studies import reference_attention_hub

    hub = reference_attention_hub() if args.reference else small_attention_hub()
    try:
        layout = FcLayout(hub, args.d_in, args.d_out)
        words = layout.program()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    print(f"# FC GEMV DPA program: {layout.describe()}, {layout.passes} passes of "
          f"{16 * hub.n_channels} rows; {hub.describe()}")
    print(f"# x at GPR +{layout.x_at}, y at +{layout.y_at}; weights {layout.va_words} words a "
          f"bank; {len(words)} words = {16 * len(words)} B")
    print("\n".join(disassemble(words)))
    return 0


def _attention_program(args) -> int:
    from golden.hub import disassemble
    from golden.hub.lowering import AttentionLayout, small_attention_hub
    from golden.system.studies import reference_attention_hub

    hub = reference_attention_hub() if args.reference else small_attention_hub()
    layout = AttentionLayout(hub, args.d_head, group=args.group, max_tokens=args.max_tokens,
                             unroll=args.unroll or 1)
    words = layout.program()
    print(f"# attention DPA program (QK^T, softmax, SV, reduction): {layout.describe()}; "
          f"{hub.describe()}")
    print(f"# token groups {layout.token_groups}, dimensions per bank "
          f"{layout.dims_per_bank}, {layout.stride} words an iteration per bank, tokens per "
          f"iteration {layout.tokens_per_iteration}, per chunk {layout.tokens_per_chunk} "
          f"(PROG_COMMIT arg_b); GPR: queries 0, scores {layout.scores(0)} (+{layout.score_region} "
          f"a query), partials {layout.partials}, outputs {layout.out(0)}; {len(words)} "
          f"words = {16 * len(words)} B")
    print("\n".join(disassemble(words)))
    return 0


def cmd_sherpa(args) -> int:
    from golden.system.reference import SherpaHost
    from golden.system.sherpa_study import SEQ_LENS, SPLIT_BYTES, sherpa_study

    split = SPLIT_BYTES if args.split_bytes is None else args.split_bytes
    seq_lens = SEQ_LENS if args.seq_lens is None else _int_list(args.seq_lens, "--seq-lens", 1,
                                                                   1 << 17)
    if not 0 <= args.owr_thread_us <= 10_000:
        raise ConfigError(f"--owr-thread-us must be in [0, 10000], not {args.owr_thread_us:g}")
    host = SherpaHost(copy=args.copy, flop=args.flop, bandwidth=args.bandwidth,
                      owr_thread_s=args.owr_thread_us * 1e-6)
    _emit(sherpa_study(seq_lens=seq_lens, host=host, split_bytes=split,
                       nc_tokens=args.nc_gemm_tokens, profile=args.pim_profile), args.json)
    return 0


def _outputs(result: dict, args) -> int:
    """A study's result as CSV (``--csv``), figures (``--plot``) and JSON
    (``--json``, or stdout when no other output was asked for)."""
    from sim import report

    if args.csv:
        report.write_csv(result, args.csv)
    if args.plot:
        for path in report.plot(result, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    if args.json or not (args.csv or args.plot):
        _emit(result, args.json)
    return 0


def cmd_hetero_training(args) -> int:
    from dataclasses import replace

    from golden.system.hetero import WORKLOADS, config_with, hetero_study
    from golden.system.reference import HETERO_PROFILE

    published = args.cpu_profile == "published"
    workloads = _name_list(args.workloads, WORKLOADS, "--workloads", "workload")
    if published and args.workloads is None:  # the workloads it applies to
        workloads = tuple(HETERO_PROFILE)
    for w in workloads if published else ():
        if w not in HETERO_PROFILE:
            raise ConfigError(f"--cpu-profile published: {w} has no published profile "
                              f"(only {', '.join(HETERO_PROFILE)})")
    if not 0 <= args.offload_fraction <= 1:
        raise ConfigError(f"--offload-fraction must be in [0, 1], not {args.offload_fraction}")
    cfg = replace(config_with(args.set or []), profile=args.cpu_profile)
    result = hetero_study(workloads, steps=args.steps, fraction=args.offload_fraction, cfg=cfg)
    return _outputs(result, args)


def _energy_factors(pairs, study: str) -> dict[str, float]:
    """``--set energy.KEY=FACTOR`` pairs (a factor in [0, 1000] on an energy
    table key) as ``{KEY: FACTOR}``."""
    from golden.config import number_setting

    out = {}
    for pair in pairs or []:
        key, v = number_setting(pair, lambda k: k.startswith("energy."),
                                f"{study} takes energy.KEY=FACTOR", 1e3, "a factor in [0, 1000]")
        out[key.removeprefix("energy.")] = v
    return out


#: the JIT-Q GPU's assumptions ``--set gpu.KEY=VALUE`` may change (positive numbers)
JITQ_GPU_KEYS = ("bf16_tflops", "mx9_tflops", "mx6_tflops", "mx4_tflops", "cu_clock_ghz",
                 "pim_commands_per_cu_clock", "memory_efficiency")


def cmd_jitq(args) -> int:
    import dataclasses

    from golden.config import number_setting
    from golden.system.jitq_study import jitq_study
    from golden.system.reference import JITQ_GPU, JITQ_MODELS

    models = _name_list(args.models, JITQ_MODELS, "--models", "model")
    gpu, energy_pairs = {}, []
    for pair in args.set or []:
        if not pair.startswith("gpu."):
            energy_pairs.append(pair)
            continue
        key, v = number_setting(
            pair, lambda k: k.removeprefix("gpu.") in JITQ_GPU_KEYS,
            f"jitq takes gpu.KEY=VALUE with KEY one of {', '.join(JITQ_GPU_KEYS)}", 1e6,
            "a positive number")
        if v <= 0 or (key == "gpu.memory_efficiency" and v > 1):
            raise ConfigError(f"--set {key}: {v:g} is not a positive number"
                              + (" up to 1" if key == "gpu.memory_efficiency" else ""))
        gpu[key.removeprefix("gpu.")] = v
    _emit(jitq_study(models, gpu=dataclasses.replace(JITQ_GPU, **gpu),
                     scale=_energy_factors(energy_pairs, "jitq")), args.json)
    return 0


def cmd_system_study(args) -> int:
    """pimphony, pimphony-scaling, tcp-activation, librapim: scenario-driven studies."""
    from golden.system.pimphony import run

    if args.show_scenario:
        from golden.system.scenario import load

        print(json.dumps(load(args.study, args.scenario, args.set), indent=2))
        return 0
    result = run(args.study, args.scenario, args.set, args.scheduler, args.progress)
    for warning in result.get("warnings", ()):
        print(f"warning: {warning}", file=sys.stderr)
    return _outputs(result, args)


STUDIES = {"gemv": cmd_gemv, "dcs-utilization": cmd_dcs_utilization,
           "fc-utilization": cmd_fc_utilization, "kernel-breakdown": cmd_kernel_breakdown,
           "dpa-program-size": cmd_dpa_program_size, "dpa-capacity": cmd_dpa_capacity,
           "epu-accuracy": cmd_epu_accuracy,
           "sherpa": cmd_sherpa, "hetero-training": cmd_hetero_training, "jitq": cmd_jitq,
           "pimphony": cmd_system_study, "pimphony-scaling": cmd_system_study,
           "pimphony-gpu": cmd_system_study, "pimphony-serving": cmd_system_study,
           "tcp-activation": cmd_system_study, "librapim": cmd_system_study,
           "pimphony-energy": cmd_system_study}


#: The options each study reads (an option given to another study is an error).
_SYSTEM_OPTIONS = {"csv", "json", "plot", "progress", "scenario", "scheduler", "set",
                   "show_scenario"}
STUDY_OPTIONS = {
    "gemv": {"json", "n_in", "n_out", "profile", "seed", "set"},
    "dcs-utilization": {"d_heads", "fc_dims", "groups", "json", "profile", "set", "tokens"},
    "fc-utilization": {"fc_dims", "json", "profile", "set"},
    "kernel-breakdown": {"d_head", "groups", "json", "profile", "set", "tokens"},
    "dpa-program-size": {"d_head", "json"},
    "dpa-capacity": {"chunk_bytes", "json", "requests", "seed"},
    "epu-accuracy": {"json", "seed"},
    "sherpa": {"bandwidth", "copy", "flop", "json", "nc_gemm_tokens", "owr_thread_us",
               "pim_profile", "seq_lens", "split_bytes"},
    "hetero-training": {"cpu_profile", "csv", "json", "offload_fraction", "plot", "set",
                        "steps", "workloads"},
    "jitq": {"json", "models", "set"},
    **{s: _SYSTEM_OPTIONS for s in ("pimphony", "pimphony-scaling", "pimphony-gpu",
                                    "pimphony-serving", "tcp-activation", "librapim",
                                    "pimphony-energy")},
}


def cmd_run(args) -> int:
    if args.study not in STUDIES:
        raise ConfigError(f"unknown study {args.study!r} (known: {', '.join(sorted(STUDIES))})")
    defaults = vars(build_parser().parse_args(["run", args.study]))
    given = [k for k, v in vars(args).items()
             if k not in ("study", "func", "command") and v != defaults.get(k)]
    foreign = [k for k in given if k not in STUDY_OPTIONS[args.study]]
    if foreign:
        flag = "--" + foreign[0].replace("_", "-")
        uses = ", ".join("--" + o.replace("_", "-") for o in sorted(STUDY_OPTIONS[args.study]))
        raise ConfigError(f"{flag} does not apply to study {args.study} (its options: {uses})")
    return STUDIES[args.study](args)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="pimorch",
        description="PIM orchestration reference: Amaranth RTL of a PIM channel and its "
                    "bit/cycle-exact golden model.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("sim", help="run the cocotb testbenches and the standalone player "
                                   "tests on the generated Verilog")
    s.add_argument("--sim", choices=SIMULATORS, default=None,
                   help="simulator (default: the SIM environment variable, else verilator)")
    s.add_argument("--test", action="append", help="run only this test (repeatable)")
    s.add_argument("--seed", type=_int_in(0, SEED_MAX), default=None,
                   help="random seed (also SEED; printed by every run; replays it)")
    s.add_argument("--waves", action="store_true", help="write a VCD per test (also WAVES=1)")
    s.add_argument("--policy", action="append", choices=POLICIES,
                   help="controller policy to build and test (repeatable; default: all); "
                        "the PIM module (HUB) tests run with the static and dcs channels")
    s.add_argument("--no-hub", action="store_true",
                   help="skip the PIM module (HUB + channels) tests, the decode "
                        "configuration's (16 banks a channel) among them")
    s.add_argument("--no-alu", action="store_true",
                   help="skip the JIT-Q ALU channel tests (tb/test_alu.py)")
    s.add_argument("--no-dex", action="store_true",
                   help="skip the dual-path channel tests (tb/test_dex.py)")
    s.add_argument("--no-player", action="store_true",
                   help="skip the standalone player tests (tb/play_tests.py); --waves "
                        "skips them too (they write no waveform)")
    s.add_argument("--stream-commands", type=_int_in(1, LIMITS["stream_commands"]),
                   default=None, metavar="N",
                   help="commands per long_* player test (default 20000; also "
                        f"STREAM_COMMANDS; at most {LIMITS['stream_commands']:,})")
    s.set_defaults(func=cmd_sim)

    s = sub.add_parser("regress", help="a long random regression through the standalone "
                                       "player, segments on parallel workers (make regress)")
    s.add_argument("--commands", type=_int_in(1, LIMITS["commands"]), default=10_000_000,
                   help=f"commands in all (at most {LIMITS['commands']:,})")
    s.add_argument("--policy", choices=POLICIES, default="dcs")
    s.add_argument("--shape", choices=("dense", "sparse", "mixed"), default="sparse")
    s.add_argument("--sim", choices=SIMULATORS, default=None,
                   help="simulator (default: the SIM environment variable, else verilator)")
    s.add_argument("--seed", type=_int_in(0, SEED_MAX), default=None,
                   help="the run's seed (printed; replays it)")
    s.add_argument("--segment", type=_int_in(0, LIMITS["commands"]), default=None,
                   help="replay only this segment of the seeded run")
    s.add_argument("--segment-size", type=_int_in(1, LIMITS["segment_size"]), default=250_000,
                   metavar="N", help="commands per segment (one simulation and scoreboard "
                                     f"each; at most {LIMITS['segment_size']:,})")
    s.add_argument("--jobs", type=_int_in(1, LIMITS["jobs"]), default=2,
                   help="worker processes (default 2)")
    s.add_argument("--json", metavar="FILE", help="write the summary as JSON ('-': stdout)")
    s.set_defaults(func=cmd_regress)

    s = sub.add_parser("verilog", help="write the generated Verilog")
    s.add_argument("--config", action="append", choices=CONFIG_NAMES)
    s.add_argument("--out", default="build/verilog-out")
    s.set_defaults(func=cmd_verilog)

    s = sub.add_parser("lint", help="Verilator --lint-only -Wall (targeted waivers) and ruff")
    s.add_argument("--config", action="append", choices=CONFIG_NAMES)
    s.add_argument("--no-ruff", action="store_true")
    s.set_defaults(func=cmd_lint)

    def gemv_args(s):
        s.add_argument("--n-out", type=_int_in(1, 1 << 20), default=256)
        s.add_argument("--n-in", type=_int_in(1, 1 << 20), default=512)
        s.add_argument("--profile", default="gddr6-aim",
                       help=f"device profile: {', '.join(PROFILES)} or a TOML file")
        s.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a geometry or timing key, e.g. --set banks=8; system "
                            "studies: a scenario key; hetero-training: a device or energy "
                            "assumption (HeteroConfig); jitq: "
                            "energy.KEY=FACTOR or gpu.KEY=VALUE (an assumption of its GPU)")
        s.add_argument("--seed", type=_int_in(0, SEED_MAX), default=0)
        s.add_argument("--json", metavar="FILE", help="write JSON to FILE ('-' for stdout)")

    s = sub.add_parser("gemv", help="run a GEMV on the golden model")
    gemv_args(s)
    s.set_defaults(func=cmd_gemv)

    s = sub.add_parser("run", help="run a golden-model study by name")
    s.add_argument("study", help=f"one of: {', '.join(sorted(STUDIES))}")
    gemv_args(s)
    s.add_argument("--tokens", type=_int_in(1, LIMITS["tokens"]), default=None,
                   help="dcs-utilization (default 512), kernel-breakdown (4096): context tokens "
                        "per channel")
    s.add_argument("--d-heads", default="64,128,256", help="dcs-utilization: d_head values")
    s.add_argument("--groups", default=None,
                   help="dcs-utilization (default 1,2,4,8), kernel-breakdown (1,8): GQA groups")
    s.add_argument("--fc-dims", default=None,
                   help="dcs-utilization (default 128,512,4096): FC d_in and d_out values; "
                        "fc-utilization (128 .. 8192): d_in = d_out")
    s.add_argument("--d-head", type=_int_in(16, LIMITS["d_head"]), default=128,
                   help="dpa-program-size, kernel-breakdown: d_head")
    s.add_argument("--requests", type=_int_in(1, LIMITS["requests"]), default=4096,
                   help="dpa-capacity: context lengths drawn per dataset (with --seed)")
    s.add_argument("--chunk-bytes", type=_int_in(1, 1 << 40), default=1 << 20,
                   help="dpa-capacity: KV chunk size in bytes (default 1 MB)")
    s.add_argument("--seq-lens", default=None,
                   help="sherpa: prefill input lengths in tokens (default 1 to 4096)")
    s.add_argument("--split-bytes", type=_int_in(LIMITS["split_bytes_min"], 1 << 40),
                   default=None,
                   help="sherpa: copy piece size of balanced DDB (default 1 MB)")
    s.add_argument("--copy", choices=["measured", "table"], default="measured",
                   help="sherpa: a swizzled copy at the measured rate (4 t: a non-cacheable "
                        "source at half a cacheable copy's speed) or Table 2's three "
                        "transactions (3 t)")
    s.add_argument("--flop", choices=["host", "table"], default="host",
                   help="sherpa: a GEMM's FLOP per byte, the host's (4.70) or Table 2's (4)")
    s.add_argument("--bandwidth", choices=["shared", "separate"], default="shared",
                   help="sherpa: a copy and a GEMM running together share the DRAM's "
                        "bandwidth (default), or neither slows the other (Table 2's overlap)")
    s.add_argument("--owr-thread-us", type=float, default=20.0,
                   help="sherpa: microseconds OWR spends per layer creating and joining its "
                        "copy threads (an assumption; default 20)")
    s.add_argument("--nc-gemm-tokens", type=_int_in(1, 4096), default=8,
                   help="sherpa: prompt tokens one read of a weight serves when a GEMM reads "
                        "the non-cacheable copy (NC-GEMM; default 8)")
    s.add_argument("--pim-profile", default="lpddr5x-pim",
                   help="sherpa: the PIM device decode runs on, a profile name or a TOML "
                        "file (default lpddr5x-pim; docs/timing.md)")
    s.add_argument("--workloads", default=None,
                   help="hetero-training: workloads (comma-separated; default: all)")
    s.add_argument("--steps", type=_int_in(1, LIMITS["steps"]), default=4,
                   help="hetero-training: training steps")
    s.add_argument("--models", default=None,
                   help="jitq: models (comma-separated; default: all of REFERENCE.md)")
    s.add_argument("--offload-fraction", type=float, default=0.9,
                   help="hetero-training: share of the step the offloaded op types cover")
    s.add_argument("--cpu-profile", choices=("model", "published"), default="model",
                   help="hetero-training: the CPU profile: every op at the CPU's roofline "
                        "(default), or scaled to the published shares (VGG-19, AlexNet, "
                        "DCGAN only)")
    s.add_argument("--scenario", metavar="FILE",
                   help="pimphony, pimphony-scaling, tcp-activation: a TOML scenario; "
                        "--set KEY=VALUE then overrides its keys (dotted for tables, e.g. "
                        "--set assumptions.link_gbs=128 --set systems=PIM-only)")
    s.add_argument("--show-scenario", action="store_true",
                   help="print the scenario (defaults, --scenario, --set) and stop")
    s.add_argument("--csv", metavar="FILE", help="system studies: the rows as CSV ('-': stdout)")
    s.add_argument("--plot", metavar="DIR", help="system studies: write PNG figures to DIR")
    s.add_argument("--scheduler", default="local",
                   help="system studies: 'local' (a local Dask cluster, default), 'serial' "
                        "(this process) or a Dask scheduler address (tcp://host:8786)")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="system studies: progress bar on stderr (default: when a terminal)")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("dpa-program", help="print a DPA program (hex and disassembly): QK^T, "
                                           "a KV head's whole attention or an FC GEMV "
                                           "(docs/lowering.md)")
    s.add_argument("--kernel", choices=("qkt", "attention", "fc"), default="qkt")
    s.add_argument("--d-in", type=_int_in(16, LIMITS["dim"]), default=64,
                   help="fc: input width (a multiple of 16)")
    s.add_argument("--d-out", type=_int_in(16, LIMITS["dim"]), default=128,
                   help="fc: output width (a multiple of 16)")
    s.add_argument("--d-head", type=_int_in(16, LIMITS["d_head"]), default=32)
    s.add_argument("--group", type=_int_in(1, 64), default=1,
                   help="attention: query heads sharing the KV head (GQA; 1: MHA)")
    s.add_argument("--max-tokens", type=_int_in(1, 1 << 20), default=1024,
                   help="attention: the longest context (sizes the GPR's score regions)")
    s.add_argument("--unroll", type=_int_in(1, 1 << 12), default=None,
                   help="key slots per loop iteration")
    s.add_argument("--reference", action="store_true",
                   help="the 16-channel GDDR6-AiM module (default: the RTL tests' small HUB)")
    s.set_defaults(func=cmd_dpa_program)

    s = sub.add_parser("decode", help="decode a small transformer token by token on the golden "
                                      "PIM module against numpy float32 (docs/lowering.md)")
    for name, default, what in (("layers", 2, "transformer blocks"),
                                ("d-model", 64, "model width"),
                                ("heads", 2, "query heads"),
                                ("kv-heads", 2, "KV heads (fewer than heads: GQA)"),
                                ("d-head", 32, "head width (a multiple of 16)"),
                                ("d-ff", 128, "MLP width"), ("vocab", 64, "vocabulary")):
        s.add_argument(f"--{name}", type=_int_in(1, LIMITS["dim"]), default=default, help=what)
    s.add_argument("--prompts", default="70,6,20",
                   help="prompt lengths, one sequence each (random tokens from --seed)")
    s.add_argument("--new-tokens", default="4,8,6",
                   help="greedy tokens per sequence (one value, or one per prompt)")
    s.add_argument("--slots", type=_int_in(1, 16), default=2,
                   help="sequences decoded at once; the rest wait for a slot")
    s.add_argument("--max-tokens", type=_int_in(1, 4096), default=128,
                   help="the longest sequence (sizes the GPR's score regions)")
    s.add_argument("--kv-chunks", type=_int_in(1, 1 << 20), default=None,
                   help="physical chunks for the KV caches (default: all after the weights)")
    s.add_argument("--channels", type=_int_in(1, 8), default=2,
                   help="the module's channels (16 banks each)")
    s.add_argument("--partition", choices=["tcp", "hfp"], default="tcp",
                   help="attention placement: token-centric over every channel, or "
                        "head-first (each KV head on one channel, a program per channel)")
    s.add_argument("--policy", choices=list(POLICIES), default=None,
                   help="the channels' controller (default: static)")
    s.add_argument("--rtl", nargs="?", const="verilator", choices=SIMULATORS, default=None,
                   help="also replay the decode on the RTL module (default simulator: "
                        "verilator), check it against golden and report its cycles")
    s.add_argument("--rtl-dir", default="build/decode-rtl",
                   help="run folder of --rtl (the record and logs)")
    s.add_argument("--system-model", action="store_true",
                   help="also time every attention STEP with the system model (on the "
                        "module, and by its kernels) against the decode's own cycles (TCP)")
    s.add_argument("--seed", type=int, default=0, help="weights and prompts")
    s.add_argument("--json", metavar="FILE", help="write JSON to FILE ('-' for stdout)")
    s.set_defaults(func=cmd_decode)

    s = sub.add_parser("profiles", help="list device profiles and their sources")
    s.set_defaults(func=cmd_profiles)

    s = sub.add_parser("timing", help="print a profile's timing constraint table and sources")
    s.add_argument("--profile", default="gddr6-aim",
                   help=f"device profile: {', '.join(PROFILES)} or a TOML file")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a timing key, e.g. --set t_faw=42")
    s.add_argument("--json", metavar="FILE", help="write JSON to FILE ('-' for stdout)")
    s.set_defaults(func=cmd_timing)

    s = sub.add_parser("aim-compare", help="the project's kernels as AiM simulator traces; "
                                           "cycles against the simulator's (docs/timing.md)")
    s.add_argument("--aim-sim", metavar="BIN",
                   help="the AiM simulator's ramulator2 binary (built outside the project); "
                        "without it only the project's cycles")
    s.add_argument("--profile", default="gddr6-aim",
                   help=f"device profile: {', '.join(PROFILES)} or a TOML file")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a timing key on both sides, e.g. --set t_modch=1")
    s.add_argument("--policy", choices=POLICIES, default="static")
    s.add_argument("--kernels", default=None,
                   help="comma-separated (default: all): gemv-4096, qkt-d128-16k, "
                        "qkt-d128-128k, sv-d128-16k, sv-d128-128k")
    s.add_argument("--out", metavar="DIR", help="keep each kernel's trace and configuration")
    s.add_argument("--json", metavar="FILE", help="write JSON to FILE ('-' for stdout)")
    s.set_defaults(func=cmd_aim_compare)

    s = sub.add_parser("bench", help="benchmark RTL and golden simulation speed (JSON)")
    s.add_argument("--json", metavar="FILE", help="also write the JSON to FILE")
    s.add_argument("--sim", action="append", choices=SIMULATORS)
    s.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run a command. Bad input: one line on stderr naming it, exit 2; a
    closed output pipe ends the run quietly."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0), or a bad argument (2, its line printed)
        return e.code if isinstance(e.code, int) else 2
    try:
        # every output path is checked before the run starts
        for attr, flag, kind in (("json", "--json", "file"), ("csv", "--csv", "file"),
                                 ("plot", "--plot", "dir"), ("out", "--out", "dir")):
            if hasattr(args, attr):
                check = outputs.check_file if kind == "file" else outputs.check_dir
                check(getattr(args, attr), flag)
        return args.func(args)
    except (ValueError, ToolError) as e:  # ConfigError, CommandError are ValueErrors
        print(f"pimorch: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader left (``... | head``): stop writing, quietly
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
