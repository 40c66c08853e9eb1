"""Long random regressions through the standalone player (``make regress``).

The stream is cut into segments, each its own simulation from a fresh
model with a seed derived from the run's seed; segments run on worker
processes (one simulator and one golden scoreboard each), so both cores
work. A run prints its seed; ``--seed S`` replays it and ``--segment K``
replays one segment alone."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path

from golden.config import small_config
from sim.generate import BUILD
from tb import play_tests

SHAPES = ("dense", "sparse", "mixed")
#: The most segments a run may have (each is a simulator launch and a fresh
#: golden model): ``--commands`` / ``--segment-size``, rounded up.
MAX_SEGMENTS = 10_000


@dataclass(frozen=True)
class Segment:
    index: int
    commands: int
    seed: int


def segments(total: int, size: int, seed: int) -> list[Segment]:
    """Segment k of a run seeded ``seed`` has seed ``seed * 100003 + k``
    (mod 2**31): any one replays alone."""
    count = -(-total // size)
    return [Segment(k, min(size, total - k * size), (seed * 100003 + k) % (1 << 31) or 1)
            for k in range(count)]


def _run_all(jobs_list: list[tuple], jobs: int):
    """Each segment's result as it finishes, on ``jobs`` worker processes."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(min(jobs, len(jobs_list))) as pool:
        yield from pool.imap_unordered(_run_segment, jobs_list)


def _run_segment(job: tuple) -> dict:
    sim, policy, shape, seg, folder = job
    config = small_config().replace(policy=policy)
    p = play_tests.Player(sim, config, seg.seed, Path(folder) / f"segment-{seg.index}")
    start = time.perf_counter()
    try:
        m = play_tests.long_stream(p, seg.commands, shape)
        passed, message = True, ""
    except AssertionError as e:
        m, passed, message = {}, False, str(e).splitlines()[0] if str(e) else "assertion failed"
    except Exception as e:  # noqa: BLE001 (reported with the segment's seed, not a dead pool)
        m, passed, message = {}, False, f"{type(e).__name__}: {e}"
    out = {"segment": seg.index, "seed": seg.seed, "passed": passed, "message": message,
           "commands": m.get("commands", 0), "cycles": m.get("cycles", 0),
           "wall_s": time.perf_counter() - start, "sim_wall_s": p.sim_wall_s,
           "check_wall_s": p.check_wall_s}
    if passed:
        p.discard_records()
    return out


def regress(commands: int, policy: str = "dcs", shape: str = "sparse", sim: str = "verilator",
            seed: int | None = None, jobs: int = 2, segment_size: int = 250_000,
            only: list[int] | None = None, progress=print) -> dict:
    """Run the regression; return its summary (every segment's figures)."""
    from sim import fast

    if commands < 1:
        raise ValueError(f"commands must be >= 1, not {commands}")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape!r}")
    if jobs < 1 or segment_size < 1:
        raise ValueError("jobs and segment size must be >= 1")
    count = -(-commands // segment_size)
    if count > MAX_SEGMENTS:
        raise ValueError(f"--commands {commands} in segments of {segment_size} is {count} "
                         f"segments, more than {MAX_SEGMENTS:,}: raise --segment-size to at "
                         f"least {-(-commands // MAX_SEGMENTS)}")
    seed = play_tests.new_seed() if seed is None else seed
    segs = segments(commands, segment_size, seed)
    if only is not None:
        bad = [k for k in only if not 0 <= k < len(segs)]
        if bad:
            raise ValueError(f"segment(s) {bad} not in 0..{len(segs) - 1}")
        segs = [segs[k] for k in only]
    config = small_config().replace(policy=policy)
    for bits in {fast.play_bits_for(s.commands) for s in segs}:  # a write beat per command at most
        fast.build(sim, config, play_bits=bits)  # once, before the workers share it
    folder = BUILD / "fast" / "runs" / sim / f"regress-{policy}-{shape}-{seed}"
    progress(f"pimorch regress: {commands} {shape} commands under {policy} on {sim}, "
             f"{len(segs)} segment(s) of up to {segment_size} on {jobs} worker(s); "
             f"seed {seed} (replay: pimorch regress --seed {seed} --commands {commands} "
             f"--policy {policy} --shape {shape})")
    start = time.perf_counter()
    jobs_list = [(sim, policy, shape, s, str(folder)) for s in segs]
    results = []
    for r in _run_all(jobs_list, jobs):
        results.append(r)
        done = sum(x["commands"] for x in results)
        status = "PASS" if r["passed"] else "FAIL"
        progress(f"  {status}  segment {r['segment']:>4} seed {r['seed']:>10}: "
                 f"{r['commands']} cmds {r['cycles']} cycles in {r['wall_s']:.1f} s "
                 f"(simulator {r['sim_wall_s']:.1f} s, golden {r['check_wall_s']:.1f} s); "
                 f"{done} commands so far")
        if not r["passed"]:
            progress(f"        {r['message']}")
            progress(f"        replay: pimorch regress --seed {seed} --commands {commands} "
                     f"--policy {policy} --shape {shape} --segment {r['segment']}")
    wall = time.perf_counter() - start
    results.sort(key=lambda r: r["segment"])
    cycles = sum(r["cycles"] for r in results)
    sim_s = sum(r["sim_wall_s"] for r in results)
    return {"seed": seed, "sim": sim, "policy": policy, "shape": shape,
            "commands": sum(r["commands"] for r in results), "cycles": cycles,
            "segments": len(results), "failed": sum(not r["passed"] for r in results),
            "wall_s": round(wall, 1), "jobs": jobs,
            "simulator_s": round(sim_s, 1),
            "golden_s": round(sum(r["check_wall_s"] for r in results), 1),
            "simulator_cycles_per_s": round(cycles / sim_s) if sim_s else None,
            "folder": str(folder), "results": results}
