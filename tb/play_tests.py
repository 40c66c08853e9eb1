"""Channel and ALU-channel tests through the standalone player
(sim/fast.py): the long streams that need no per-cycle Python run at the
simulator's own speed, scored by the same scoreboard as the cocotb tests
(tb/scoreboard.py).

Each test adds loads to a ``Player``, runs them in one simulation, and
makes its own assertions on what came back. ``run_test`` runs one by name
(``pimorch sim``, tests/test_fast.py, ``make regress``); every run reports
the seed that replays it."""

from __future__ import annotations

import os
import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from golden import numerics as nm
from golden.alu import AluConfig
from golden.channel import Command, RunResult, gemv_result, mac, rd_out, wr_inp
from golden.config import ChannelConfig, HubConfig
from golden.isa import HostOp, Opcode
from sim import fast
from tb import scoreboard
from tb.alu_stimulus import KERNEL_CASES, check_kernel, kernel_case, random_program
from tb.scoreboard import Observed
from tb.stimulus import dex_stream, gemv_problem, random_stream, random_word

CHUNK = 100_000  # commands per player load
#: commands per long_* test when none are given (make sim, make test under Verilator)
STREAM_COMMANDS = 20_000
KERNEL_TOKENS = 256
DEX_GROUPS = 1_000
ALU_OPS = 20_000  # random ALU operations per alu_random run


class Player:
    """Loads for one simulation of the standalone player, and their check."""

    def __init__(self, sim: str, config: ChannelConfig | AluConfig, seed: int, run_dir: Path,
                 slice_rows: int = 0):
        self.sim, self.config, self.seed, self.run_dir = sim, config, seed, Path(run_dir)
        self.slice_rows = slice_rows
        self.rng = np.random.default_rng(seed)
        self.loads: list[fast.Load] = []
        self.sim_wall_s = 0.0  # the simulator process (no build, no file writing)
        self.check_wall_s = 0.0  # the golden scoreboard

    def add(self, commands: list[Command] | list[int], wdata: list[int], idle: float = 0.2,
            backpressure: float = 0.3, hold: tuple[int, int] | None = None) -> None:
        self.loads.append(fast.Load(commands, wdata, idle, backpressure,
                                    int(self.rng.integers(1, 1 << 32)), hold))

    def run(self) -> list[tuple[Observed, RunResult]]:
        """Simulate every load, then score each against the golden model
        (memories carry over between loads, as in the RTL)."""
        times: dict = {}
        observed = fast.run(self.sim, self.config, self.loads, self.run_dir, self.slice_rows,
                            times=times)
        self.sim_wall_s = times["simulator_s"]  # the simulator process alone
        model = scoreboard.model_for(self.config, self.slice_rows)
        out = []
        start = time.perf_counter()
        for ld, obs in zip(self.loads, observed, strict=True):
            out.append((obs, scoreboard.check(model, ld.commands, ld.wdata, obs, self.seed)))
        self.check_wall_s = time.perf_counter() - start
        return out

    def play_hub(self, calls: list) -> tuple:
        """The PIM module (a HubConfig): play host calls in one simulation,
        then score the record against the golden HUB and channels
        (tb/hub_scoreboard.py), every cycle of it against the golden
        module in closed loop too. Returns (HubRecord, HubCheck)."""
        from tb import hub_scoreboard

        times: dict = {}
        rec = fast.run_hub(self.sim, self.config, calls, self.run_dir, times=times)
        self.sim_wall_s = times["simulator_s"]
        start = time.perf_counter()
        result = hub_scoreboard.check(self.config, calls, rec, closed_loop=True)
        self.check_wall_s = time.perf_counter() - start
        return rec, result

    def discard_records(self) -> None:
        """Delete the load files and records of a passed run (they can be
        large); PIMORCH_KEEP_RECORDS=1 keeps them."""
        if os.environ.get("PIMORCH_KEEP_RECORDS", "0") in ("0", ""):
            for f in self.run_dir.glob("play_*"):
                f.unlink()


# ---- the tests ----------------------------------------------------------------


def _in_loads(p: Player, n: int, per_load: int, idle: float, backpressure: float, make):
    """``n`` units (commands, groups, operations) cut into loads of at most
    ``per_load``, each load ``make(k)`` -> (commands, beats); run them all."""
    done = 0
    while done < n:
        k = min(n - done, per_load)
        p.add(*make(k), idle=idle, backpressure=backpressure)
        done += k
    return p.run()


def long_stream(p: Player, n: int, shape: str) -> dict:
    """n random commands of ``shape`` (tb/stimulus.py STREAM_SHAPES), 1 %
    malformed, idle 0.2, backpressure 0.3, in loads of CHUNK."""
    runs = _in_loads(p, n, CHUNK, 0.2, 0.3,
                     lambda k: random_stream(p.config, k, p.rng, bad=0.01, shape=shape))
    return {"commands": n, "cycles": sum(obs.cycles for obs, _ in runs)}


def long_dense(p: Player, n: int) -> dict:
    """n random commands on two GBuf and two OBuf entries (dependency chains)."""
    return long_stream(p, n, "dense")


def long_sparse(p: Player, n: int) -> dict:
    """The same over every buffer entry (independent commands overlap)."""
    return long_stream(p, n, "sparse")


def gemv(p: Player, n: int) -> dict:
    """y = W x, W n x 2n BF16 (default 256 x 512) written by normal WRs:
    bit-exact with golden and within BF16 rounding of numpy float32."""
    n_out, n_in = n, 2 * n
    w, x, cmds, beats = gemv_problem(n_out, n_in, p.seed, p.config)
    p.add(cmds, beats, idle=0.1, backpressure=0.1)
    (obs, ref), = p.run()
    y = nm.bf16_to_float(gemv_result(obs.rdata, n_out, p.config.banks))
    wf, xf = nm.bf16_to_float(w).astype(np.float32), nm.bf16_to_float(x).astype(np.float32)
    expect = wf @ xf
    scale = np.abs(wf) @ np.abs(xf)
    err = np.abs(y - expect)
    # BF16 output rounding (2**-8 relative) plus FP32 accumulation error
    assert np.all(err <= np.abs(expect) * 2.0**-8 + scale * 2.0**-20), float(err.max())
    return {"commands": len(cmds), "cycles": obs.cycles, "macs": ref.mac_count,
            "max_abs_err": float(err.max())}


def id_wrap(p: Player, n: int) -> dict:
    """2**16 + 64 commands wrap the 16-bit IDs; a stale S-Table ID equal to
    a new command's ID is not taken for it; decode stops 2**15 IDs past an
    I/O head that waits for its write beat."""
    from golden.dcs import WINDOW

    t = p.config.timing
    wrap = (1 << 16) + 64
    cmds1 = [wr_inp(i % 2) if i % 3 else rd_out(i % 4) for i in range(wrap)]
    wdata1 = [i & 0xFFFF for i in range(sum(c.opcode == Opcode.WR_INP for c in cmds1))]
    p.add(cmds1, wdata1, idle=0.1, backpressure=0.2)
    filler = [rd_out(2 + i % 2) for i in range((1 << 16) - 1)]
    cmds2 = [mac(0, 0, 0, 1)] + filler + [mac(1, 0, 0, 1), rd_out(1)]
    p.add(cmds2, [], idle=0.0, backpressure=0.0)
    late = WINDOW * t.t_ccd * 5 // 4  # after MAC WINDOW would issue, before its wait ends
    cmds3 = [mac(0, 0, 0, 0), wr_inp(1)] + [mac(0, i % 4, 0, 0) for i in range(WINDOW + 2)]
    p.add(cmds3, [random_word(p.rng)], idle=0.0, backpressure=0.0, hold=(0, late))
    (o1, _), (o2, _), (o3, _) = p.run()
    assert o1.trace[-1][0] == (wrap - 1) % (1 << 16), o1.trace[-1]
    last_mac = [c for _, o, c in o2.trace if o == Opcode.MAC][-1]
    assert o2.trace[-1][1] == Opcode.RD_OUT and o2.trace[-1][2] == last_mac + t.t_mac
    first: dict[int, int] = {}
    for i, _, c in o3.trace:
        first.setdefault(i, c)
    assert first[WINDOW] < late < first[1 + WINDOW], (first[WINDOW], late, first[1 + WINDOW])
    return {"commands": len(cmds1) + len(cmds2) + len(cmds3),
            "cycles": o1.cycles + o2.cycles + o3.cycles}


def dcs_kernel(p: Player, n: int) -> dict:
    """A QK^T kernel (d_head 128, GQA group 2, ``n`` tokens) without idle or
    backpressure: the cycle count is the policy's, cycle-exact with golden."""
    from golden.kernels import qkt

    k = qkt(p.config, 128, 2, n)
    p.add(k.commands, k.wdata, idle=0.0, backpressure=0.0)
    (obs, ref), = p.run()
    return {"commands": len(k.commands), "cycles": ref.cycles, "macs": ref.mac_count,
            "kernel": k.name, "tokens": n}


def dex_long(p: Player, n: int) -> dict:
    """Dual-path banks split 1:1: ``n`` groups of mixed xPU-read / PIM-MAC
    commands (ACT-AHEADs, bad commands) with idle and backpressure."""
    per_load = 4_000  # groups per load: about 40,000 commands
    runs = _in_loads(p, n, per_load, 0.2, 0.3,
                     lambda k: dex_stream(p.config, k, p.rng, split=p.slice_rows, bad=0.05))
    return {"commands": sum(len(ld.commands) for ld in p.loads),
            "cycles": sum(obs.cycles for obs, _ in runs), "groups": n}


def alu_random(p: Player, n: int) -> dict:
    """The ALU channel: ``n`` random ALU operations, loads, stores and host
    reads (every bank written first, everything read back at the end),
    idle 0.2, backpressure 0.2, in loads of at most CHUNK commands (the
    registers reset between loads, the banks carry over)."""
    per_load = CHUNK - p.config.banks * (p.config.rows + 2)  # the writes and read-back fit
    runs = _in_loads(p, n, per_load, 0.2, 0.2, lambda k: random_program(p.rng, k, p.config))
    return {"commands": sum(len(ld.commands) for ld in p.loads),
            "cycles": sum(obs.cycles for obs, _ in runs), "alu_ops": n}


def alu_kernels(p: Player, n: int) -> dict:
    """``n`` of the ALU channel's MX quantization kernels, taken in turn from
    tb/alu_stimulus.py KERNEL_CASES (all five: every placement, both
    directions, three formats, BF16 and FP32 sources), one load per kernel:
    cycle-exact and bit-exact with golden, and the read-back equal to
    golden.mx.quantize."""
    cases = [kernel_case(p.config, p.rng, *KERNEL_CASES[i % len(KERNEL_CASES)])
             for i in range(n)]
    for case in cases:
        p.add(case.words, case.beats, idle=0.2, backpressure=0.2)
    runs = p.run()
    kernel_cycles = {}
    for case, (obs, ref) in zip(cases, runs, strict=True):
        check_kernel(p.config, case, obs.rdata)
        issued = [t.cycle for t in ref.trace if t.cmd_id >= case.n_load
                  and t.cmd_id < case.n_load + case.n_kernel]
        kernel_cycles[case.name] = issued[-1] - issued[0] if issued else 0
    return {"commands": sum(len(c.words) for c in cases),
            "cycles": sum(obs.cycles for obs, _ in runs), "kernels": len(cases),
            "kernel_cycles": kernel_cycles}


def hub_qkt(p: Player, n: int) -> dict:
    """The PIM module: a QK^T decode session of ``n`` steps for two requests
    with interleaved chunks (tb/hub_stimulus.py qkt_case); every response,
    multicast load and channel trace equal to golden, the scores to numpy."""
    from tb.hub_stimulus import check_qkt_scores, qkt_case

    case = qkt_case(p.config, steps=n, seed=p.seed % 1000)
    rec, result = p.play_hub(case.calls)
    check_qkt_scores(p.config, case, result.responses)
    return {"commands": result.channel_commands, "cycles": rec.cycle,
            "host_calls": len(case.calls), "steps": n, "step_bubbles": result.bubbles,
            **_hub_energy(result.energy)}


def _hub_energy(e: dict | None) -> dict:
    """A HUB run's energy fields (``golden.energy.hub_energy``) for a record."""
    if not e:
        return {}
    return {"energy_nj": round(e["total_pj"] / 1e3, 3), "gpr_reads": e["counts"]["gpr_reads"],
            "gpr_writes": e["counts"]["gpr_writes"], "epu_pj": round(e["epu_pj"], 3)}


def hub_faults(p: Player, n: int) -> dict:
    """The PIM module: one scenario per fault code, one after another
    (tb/hub_stimulus.py fault_scenarios), each checked for its code."""
    from tb.hub_stimulus import check_fault, fault_scenarios

    scenarios = fault_scenarios(p.config)
    calls = [c for cs in scenarios.values() for c in cs]
    rec, result = p.play_hub(calls)
    k = 0
    for code, cs in scenarios.items():
        check_fault(code, cs, result.responses[k:k + len(cs)])
        k += len(cs)
    return {"commands": result.channel_commands, "cycles": rec.cycle,
            "host_calls": len(calls), "faults": len(scenarios)}


def hub_epu(p: Player, n: int) -> dict:
    """The PIM module: QK^T with the EPU's softmax and reduction, then the
    EPU's faults (tb/hub_stimulus.py epu_case, epu_fault_calls)."""
    from tb.hub_stimulus import check_epu, check_epu_faults, epu_case, epu_fault_calls

    case = epu_case(p.config, seed=p.seed % 1000)
    faults = epu_fault_calls(p.config)
    rec, result = p.play_hub(case.calls + faults)
    check_epu(p.config, case, result.responses[:len(case.calls)])
    check_epu_faults(p.config, faults, result.responses[len(case.calls):])
    return {"commands": result.channel_commands, "cycles": rec.cycle,
            "host_calls": len(case.calls) + len(faults),
            "epu_runs": result.epu_runs, **_hub_energy(result.energy)}


def hub_host_errors(p: Player, n: int) -> dict:
    """The PIM module: bad host operations get BAD_OP / BAD_ARG."""
    from tb.hub_stimulus import check_host_errors, host_error_calls

    calls = host_error_calls(p.config)
    rec, result = p.play_hub(calls)
    check_host_errors(result.responses)
    return {"commands": result.channel_commands, "cycles": rec.cycle,
            "host_calls": len(calls)}


def hub_decode(p: Player, n: int) -> dict:
    """The PIM module at the decode configuration (tb/hub_stimulus.py
    ``decode_rtl_hub``): a small transformer's decode, every host call of
    it (weights, GROWs, K/V and query writes, program loads, STEPs with
    skip masks, reads, releases), three sequences over two slots, the
    first with an ``n``-token prompt; every response, multicast load and
    channel trace equal to golden, the responses to what the golden
    decoder got, its logits within the bound of float32."""
    from tb.hub_stimulus import DECODE_NEW_TOKENS, check_decode, player_decode_case

    case = player_decode_case(p.config, n, seed=p.seed % 1000)
    rec, result = p.play_hub(case.calls)
    check_decode(case, [(c.code, c.data) for c in rec.calls])
    per_request: dict[tuple[int, int], int] = {}
    for seq, req, _ in case.grants:
        per_request[seq, req] = per_request.get((seq, req), 0) + 1
    grown = max(per_request.values())
    assert grown == -(-(n + DECODE_NEW_TOKENS[0]) // case.tokens_per_chunk), per_request
    return {"commands": result.channel_commands, "cycles": rec.cycle,
            "host_calls": len(case.calls),
            "steps": sum(c.op == HostOp.STEP for c in case.calls),
            "epu_runs": result.epu_runs, "chunks_granted": len(case.grants),
            "max_logit_error": max(r["max_error"] for r in case.rows)}


#: what a player test runs on: the PIM channel at a policy, the dual-path
#: channel (tb/test_dex.py's configuration), the JIT-Q ALU channel, the PIM
#: module (HUB and channels at a policy), or the PIM module a decode is
#: lowered for (tb/hub_stimulus.py ``decode_rtl_hub``)
KINDS = ("channel", "dex", "alu", "hub", "decode")
HUB_STEPS = 16  # decode steps of hub_qkt (the GPR holds the scores of about 20)
#: hub_decode's longest prompt: a chunk's 128 tokens and one, so that
#: sequence's KV heads take a second chunk mid-decode
DECODE_LONGEST = 129


@dataclass(frozen=True)
class PlayTest:
    fn: object
    policies: tuple[str, ...] = ("static", "pingpong", "dcs")
    size: int = STREAM_COMMANDS  # commands, tokens, groups or repeats when none are given
    kind: str = "channel"  # KINDS


TESTS = {
    "long_dense": PlayTest(long_dense),
    "long_sparse": PlayTest(long_sparse),
    "gemv": PlayTest(gemv, ("static", "dcs"), 256),
    "id_wrap": PlayTest(id_wrap, ("dcs",)),
    "dcs_kernel": PlayTest(dcs_kernel, size=KERNEL_TOKENS),
    "dex_long": PlayTest(dex_long, ("static",), DEX_GROUPS, kind="dex"),
    "alu_random": PlayTest(alu_random, (), ALU_OPS, kind="alu"),
    "alu_kernels": PlayTest(alu_kernels, (), len(KERNEL_CASES), kind="alu"),
    "hub_qkt": PlayTest(hub_qkt, ("static", "dcs"), HUB_STEPS, kind="hub"),
    "hub_faults": PlayTest(hub_faults, ("static", "dcs"), 1, kind="hub"),
    "hub_epu": PlayTest(hub_epu, ("static", "dcs"), 1, kind="hub"),
    "hub_host_errors": PlayTest(hub_host_errors, ("static", "dcs"), 1, kind="hub"),
    "hub_decode": PlayTest(hub_decode, (), DECODE_LONGEST, kind="decode"),
}
#: tests whose size the caller may scale (--stream-commands and the like)
SCALED = ("long_dense", "long_sparse")


def list_tests(policy: str | None = None, kind: str = "channel") -> list[str]:
    """The tests of ``kind``; of the channel at ``policy`` when given."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return [name for name, t in TESTS.items() if t.kind == kind
            and (kind not in ("channel", "hub") or policy is None or policy in t.policies)]


@dataclass
class PlayResult:
    name: str
    passed: bool
    seed: int
    wall_s: float
    sim_wall_s: float = 0.0
    check_wall_s: float = 0.0
    metrics: dict = field(default_factory=dict)
    message: str = ""
    run_dir: Path | None = None


def new_seed() -> int:
    return random.SystemRandom().randrange(1, 1 << 31)


def run_test(sim: str, config: ChannelConfig | AluConfig, name: str, run_dir: Path,
             seed: int | None = None, size: int | None = None) -> PlayResult:
    """Run one test through the player; failures come back as a result
    with the first line of the message (the run folder keeps the record)."""
    test = TESTS[name]
    if size is not None and size < 1:
        raise ValueError(f"{name}: size must be >= 1, not {size}")
    seed = new_seed() if seed is None else seed
    slice_rows = 0
    want = {"alu": AluConfig, "hub": HubConfig, "decode": HubConfig}.get(test.kind,
                                                                         ChannelConfig)
    if not isinstance(config, want):
        raise ValueError(f"{name} runs on a {want.__name__}, not {config!r}")
    if test.kind == "dex":
        from golden.config import slice_rows_for

        slice_rows = slice_rows_for(config.rows, 1, 1)
    p = Player(sim, config, seed, run_dir, slice_rows)
    start = time.perf_counter()
    try:
        metrics = test.fn(p, size or test.size)
        passed, message = True, ""
    except AssertionError as e:  # the scoreboard's and the tests' own
        metrics, passed = {}, False
        message = str(e) or f"assertion failed: {traceback.format_exc().splitlines()[-2].strip()}"
    except Exception as e:  # noqa: BLE001 (a model or tool error fails the test, with its trace)
        metrics, passed = {}, False
        message = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    wall = time.perf_counter() - start
    result = PlayResult(name, passed, seed, wall, p.sim_wall_s, p.check_wall_s,
                        {**metrics, "seed": seed}, message, Path(run_dir))
    if passed:
        p.discard_records()
    return result
