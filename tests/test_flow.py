"""The flow around the RTL: lint, elaboration at full size, the CLI."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from golden.config import load_profile
from sim.cli import main
from sim.generate import generate
from sim.lint import lint_verilog


def test_small_config_lints_clean():
    from golden.config import small_config
    result = lint_verilog(generate(small_config()))
    assert result.returncode == 0, result.stderr[-3000:]


def test_sixteen_banks_by_sixteen_lanes_elaborates_and_lints_clean():
    path = generate(load_profile("gddr6-aim", rows=64))
    text = path.read_text()
    assert "obuf0_bank15" in text and "mac15_mul15" in text
    result = lint_verilog(path)
    assert result.returncode == 0, result.stderr[-3000:]


def test_zero_memories_become_loops_and_other_contents_stay():
    """sim/generate.py keeps all-zero memory contents out of the RTLIL (a
    depth of 4,096 x 256 bits is 1 Mbit of zeros there, the profiles' banks
    4 Gbit) and gives
    each such memory a zero loop in the Verilog; a memory with contents
    keeps them."""
    import re

    from amaranth import Module
    from amaranth.back import rtlil, verilog
    from amaranth.lib import memory, wiring
    from amaranth.lib.wiring import In, Out

    from sim.generate import _zero_inits_unwritten, zero_init_loops

    class Mems(wiring.Component):
        addr: In(16)
        zero: Out(256)
        rom: Out(8)

        def elaborate(self, platform):
            m = Module()
            m.submodules.big = big = memory.Memory(shape=256, depth=1 << 12, init=[])
            m.submodules.lut = lut = memory.Memory(shape=8, depth=4, init=[5, 0, 7, 9])
            rb, rt = big.read_port(), lut.read_port()
            m.d.comb += [rb.addr.eq(self.addr), rt.addr.eq(self.addr[:2]),
                         self.zero.eq(rb.data), self.rom.eq(rt.data)]
            return m

    with _zero_inits_unwritten():
        text = rtlil.convert(Mems(), name="mems")
        v = zero_init_loops(verilog.convert(Mems(), name="mems", emit_src=False))
    assert text.count("$meminit_v2") == 1  # the lookup table's only
    assert len(text) < 100_000  # the big memory's 1 Mbit of zeros is not in it
    assert re.search(r"reg \[255:0\] big\s*\[4095:0\];\n\s*integer pimorch_zero_fill_0;\n"
                     r"\s*initial for \(pimorch_zero_fill_0 = 0; pimorch_zero_fill_0 <= 4095;", v)
    assert "lut[2] = 8'h07" in v and "pimorch_zero_fill_1" not in v
    from amaranth.back import rtlil as again

    assert len(again.convert(Mems(), name="mems")) > 1_000_000  # outside, zeros bit by bit


def test_module_with_three_channels_and_odd_tables_elaborates_and_lints_clean():
    """The PIM module at a shape the cocotb tests do not build: 3 channels,
    3 requests, 3 VA2PA entries per request (register arrays padded to 4)."""
    from golden.config import HubConfig, small_config
    from sim.generate import HUB_TOPLEVEL

    ch = small_config()
    hub = HubConfig(channel=ch, n_channels=3, chunk_bytes=3 * ch.banks * ch.cols * 32,
                    requests=3, chunks_per_request=3, instr_depth=20, gpr_entries=128,
                    max_modis=3, decode_depth=3)
    path = generate(hub)
    text = path.read_text()
    assert "channel2" in text and "va2pa2_2" in text
    result = lint_verilog(path, HUB_TOPLEVEL)
    assert result.returncode == 0, result.stderr[-3000:]


def test_lint_catches_a_real_problem(tmp_path):
    bad = tmp_path / "pim_channel.v"
    bad.write_text("module pim_channel(input a, output b); assign b = c; endmodule\n")
    assert lint_verilog(bad).returncode != 0


def test_cli_help_works():
    out = subprocess.run([sys.executable, "-m", "sim.cli", "--help"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "sim" in out.stdout and "gemv" in out.stdout


def test_cli_gemv_json(capsys, tmp_path):
    assert main(["gemv", "--n-out", "32", "--n-in", "64", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["macs"] == 32 // 16 * 64 // 16 and data["cycles"] > data["macs"]
    assert 0 < data["mac_utilization"] <= 1 and data["max_abs_err_vs_float32"] < 0.05
    e = data["energy"]  # gddr6-aim has an energy table (docs/energy.md)
    assert e["counts"]["macs"] == 16 * data["macs"]
    assert e["total_nj"] == pytest.approx(sum(e["breakdown_nj"].values()), abs=0.01)
    assert main(["gemv", "--n-out", "32", "--n-in", "64", "--profile", "hbm-jitq",
                 "--json", "-"]) == 0
    hbm = json.loads(capsys.readouterr().out)["energy"]  # hbm2-pim's table (energy_from)
    assert hbm["pj_per_mac_command"] == pytest.approx(16 * 117.76)
    text = (Path(__file__).parents[1] / "golden/profiles/hbm_jitq.toml").read_text()
    bare = tmp_path / "bare.toml"
    text = text.replace('energy_from = "hbm2-pim"', "").replace('"hbm-jitq"', '"bare-hbm"')
    bare.write_text(text)
    assert main(["gemv", "--n-out", "32", "--n-in", "64", "--profile", str(bare),
                 "--json", "-"]) == 0
    assert "energy" not in json.loads(capsys.readouterr().out)  # no table: no figure


def test_cli_dpa_studies_json(capsys):
    assert main(["run", "dpa-program-size", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["tokens"] for r in rows][::10] == [1024, 1 << 20]
    assert main(["run", "dpa-capacity", "--requests", "64", "--json", "-"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 16


def test_cli_decode_json(capsys):
    """``pimorch decode``: two short GQA sequences on the golden module, the
    JSON naming each sequence's tokens and error, the summary on stderr."""
    assert main(["decode", "--prompts", "3,2", "--new-tokens", "2", "--heads", "4",
                 "--json", "-"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert [len(q["tokens"]) for q in data["sequences"]] == [5, 4]
    assert all(q["max_error"] < 2 ** -5 for q in data["sequences"])
    assert data["programs"]["attention"]["steps"] == 2 * 5
    assert "sequence 1: prompt 2" in out.err
    # head-first on four channels: two slots x two KV heads on four channels,
    # a STEP per channel and layer
    assert main(["decode", "--prompts", "3,2", "--new-tokens", "1", "--heads", "4",
                 "--channels", "4", "--partition", "hfp", "--policy", "dcs", "--json", "-"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert (data["partition"], data["channels"], data["policy"]) == ("hfp", 4, "dcs")
    # three lock steps of both slots (4 pairs: a STEP per channel), one of the
    # first (2 pairs), each in 2 layers
    assert data["programs"]["attention"]["steps"] == (3 * 4 + 1 * 2) * 2
    assert all(q["max_error"] < 2 ** -5 for q in data["sequences"])
    assert "attention HFP" in out.err


def test_cli_sherpa_json(capsys):
    assert main(["run", "sherpa", "--seq-lens", "1,2048", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data["latency"][0]["points"][0]["methods"]
    assert first["owr"]["vs_duplication"] > first["ddb"]["vs_duplication"] > 1
    assert [r["model"] for r in data["capacity"]][-1] == "Gemma3-27B"


def test_cli_hetero_training_json(capsys):
    assert main(["run", "hetero-training", "--workloads", "AlexNet", "--steps", "1",
                 "--json", "-"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["workload"] == "AlexNet" and row["modes"]["hetero"]["speedup_vs_cpu"] > 1
    check = row["profile_check"]["Conv2DBackpropFilter"]
    assert check["published"] == 0.3364 and 0 < check["model"] < 1
    # the published shares as the profile instead: the check then matches
    assert main(["run", "hetero-training", "--workloads", "AlexNet", "--steps", "1",
                 "--cpu-profile", "published", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["profile"] == "published"
    check = data["rows"][0]["profile_check"]["Conv2DBackpropFilter"]
    assert check["model"] == pytest.approx(check["published"], abs=1e-4)



def test_cli_hetero_training_energy_csv_and_plot(tmp_path):
    """Energy columns per workload and mode in the CSV, an energy figure,
    and --set of an energy figure."""
    out = tmp_path / "h.csv"
    assert main(["run", "hetero-training", "--workloads", "AlexNet", "--steps", "1",
                 "--set", "cpu_idle_w=0", "--csv", str(out), "--plot", str(tmp_path)]) == 0
    import csv

    rows = list(csv.DictReader(out.open()))
    assert [r["mode"] for r in rows][:4] == ["cpu-only", "prog-only", "fixed-only", "hetero"]
    for r in rows:
        assert float(r["dynamic_energy_j"]) > 0 and float(r["edp_js"]) > 0
    assert (tmp_path / "hetero-training.png").stat().st_size > 0


def test_cli_jitq_json(capsys):
    assert main(["run", "jitq", "--models", "bert-345M", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shift_reduction"]["MX9"]["ratio"] == 3
    assert data["models"][0]["formats"]["MX4"]["sources"]["fp32"]["placements"]["tiled"]
    assert main(["run", "jitq", "--models", "bert-345M", "--set", "gpu.mx6_tflops=362",
                 "--json", "-"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["gpu"]["mx6_tflops"] == 362
    for f in ("MX9", "MX6"):
        was, now = (d["models"][0]["formats"][f]["forward_ms"] for d in (data, fast))
        assert (now < was) if f == "MX6" else now == was


SMALL_PIMPHONY = ["--scheduler", "serial", "--set", "models=LLM-7B-128K", "--set",
                  "datasets=Loogle-SD", "--set", "requests=128"]


def test_cli_pimphony_json_csv_plots(tmp_path, capsys):
    csv_path, plots = tmp_path / "p.csv", tmp_path / "plots"
    assert main(["run", "pimphony", *SMALL_PIMPHONY, "--json", "-", "--csv", str(csv_path),
                 "--plot", str(plots)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["system"], r["step"]) for r in data["rows"]][:4] == [
        ("xPU+PIM", s) for s in ("baseline", "+TCP", "+DCS", "+DPA")]
    lines = csv_path.read_text().splitlines()
    assert len(lines) == 1 + len(data["rows"])
    assert "breakdown_share.pipeline_bubbles" in lines[0].split(",")
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["pimphony-breakdown.png", "pimphony-channel-utilization.png",
                    "pimphony-mac-utilization.png", "pimphony-parallel.png",
                    "pimphony-throughput.png"]
    assert all((plots / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_cli_scaling_and_tcp_activation(tmp_path, capsys):
    assert main(["run", "pimphony-scaling", "--scheduler", "serial", "--set",
                 "contexts=4096,1048576", "--set", "capacities_gb=256", "--set",
                 "steps=baseline,+DPA", "--json", "-",
                 "--plot", str(tmp_path)]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    million = {(r["system"], r["step"]): r for r in rows if r["context"] == 1 << 20}
    # reserving the longest drawn context (1M + 3 sigma) for a request does not fit
    # 512 GB next to the weights; DPA's chunks for the actual length do
    assert million[("xPU+PIM", "baseline")]["batch"] == 0
    assert million[("xPU+PIM", "+DPA")]["tokens_per_s"] > 0
    assert (tmp_path / "pimphony-scaling-context.png").is_file()
    assert main(["run", "tcp-activation", "--scheduler", "serial", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["module"] == "16 channels x 16 banks"
    assert main(["run", "tcp-activation", "--show-scenario", "--set", "channels=8"]) == 0
    assert json.loads(capsys.readouterr().out)["channels"] == 8


def test_cli_pimphony_gpu_json_csv_and_plot(tmp_path, capsys):
    csv_path, plots = tmp_path / "gpu.csv", tmp_path / "plots"
    assert main(["run", "pimphony-gpu", "--scheduler", "serial", "--set", "models=LLM-7B-32K",
                 "--set", "datasets=QMSum", "--set", "systems=PIM-only", "--set",
                 "steps=baseline,+DPA", "--json", "-", "--csv", str(csv_path),
                 "--plot", str(plots)]) == 0
    data = json.loads(capsys.readouterr().out)
    (row,) = data["rows"]
    assert row["gpu"]["gpus"] == 2 and row["gpu"]["tokens_per_s"] > 0
    assert set(row["pim"]) == {"PIM-only baseline", "PIM-only +DPA"}
    ratio = row["pim"]["PIM-only +DPA"]["over_gpu"]
    assert ratio == pytest.approx(row["pim"]["PIM-only +DPA"]["tokens_per_s"]
                                  / row["gpu"]["tokens_per_s"], rel=1e-4)
    assert "gpu.tokens_per_s" in csv_path.read_text().splitlines()[0].split(",")
    assert (plots / "pimphony-gpu.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_librapim_json_and_plots(tmp_path, capsys):
    assert main(["run", "librapim", "--scheduler", "serial", "--set", "models=Llama3-70B",
                 "--set", "batches=32,384", "--set", "inputs=1024", "--set", "steps=2",
                 "--json", "-", "--plot", str(tmp_path)]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)["rows"]
    assert "warning: Llama3-70B: 2 of 2 points do not fit 8 devices x 16 GB" in out.err
    assert [r["batch"] for r in rows] == [32, 384]
    decisions = rows[1]["systems"]["LibraPIM"]["decisions"]
    assert [d["step"] for d in decisions] == [0, 1]
    assert all(d["predicted_s"] <= d["predicted_no_offload_s"] for d in decisions)
    assert (tmp_path / "librapim-Llama3-70B.png").is_file()
    assert (tmp_path / "librapim-utilization.png").is_file()


def test_cli_librapim_npu_sweep_plot(tmp_path, capsys):
    """Figure 21's axes: tokens/s over NPU sizes, with and without DBO."""
    assert main(["run", "librapim", "--scheduler", "serial", "--set", "models=Llama3-70B",
                 "--set", "batches=256", "--set", "inputs=512", "--set", "steps=1",
                 "--set", "npu_arrays=32,128", "--json", "-", "--plot", str(tmp_path)]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["npu_array"] for r in rows] == [32, 128]
    assert rows[1]["npu_tflops"] == 16 * rows[0]["npu_tflops"]
    assert (tmp_path / "librapim-npu.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, needle", [
    (["run", "librapim", "--set", "tp=3"], "tp=3 must divide"),
    (["run", "librapim", "--set", "systems=TPU"], "systems: unknown name 'TPU'"),
    (["run", "librapim", "--set", "dbo_latency=guess"], "dbo_latency must be one of"),
    (["run", "librapim", "--set", "npu_arrays=0"], "npu_arrays[0] must be in"),
    (["run", "librapim", "--set", "dex_overhead=2"], "dex_overhead must be in"),
    (["run", "librapim", "--set", "dex_split=3"], "dex_split must be"),
    (["run", "librapim", "--set", "lengths=sharegpt"], "lengths must be one of alpaca, uniform"),
    (["run", "sherpa", "--pim-profile", "/nope.toml"], "is neither a known profile"),
    (["run", "pimphony", "--set", "colour=red"], "unknown key 'colour'"),
    (["run", "pimphony", "--set", "models=LLM-1B"], "models: unknown name 'LLM-1B'"),
    (["run", "pimphony-scaling", "--set", "variation=0.5"], "variation must be in"),
    (["run", "pimphony-serving", "--set", "output_tokens=0"], "output_tokens must be in"),
    (["run", "pimphony", "--scenario", "/nonexistent.toml"], "does not exist"),
    (["run", "tcp-activation", "--set", "assumptions.epu_lanes=fast"], "epu_lanes must be"),
    (["gemv", "--set", "banks=99"], "banks must be an integer"),
    (["gemv", "--set", "nonsense=1"], "unknown configuration key 'nonsense'"),
    (["gemv", "--set", "banks"], "expected key=value"),
    (["gemv", "--profile", "nope"], "neither a known profile"),
    (["gemv", "--n-in", "100"], "multiple of 16"),
    (["run", "no-such-study"], "unknown study"),
    (["decode", "--prompts", "3,2", "--new-tokens", "1,2,3"], "--new-tokens: 3 values for 2"),
    (["decode", "--prompts", "300", "--new-tokens", "1"], "301 tokens exceeds max_tokens=128"),
    (["decode", "--d-head", "24"], "d_head a multiple of 16"),
    (["decode", "--channels", "3"], "multiple of 16 x 3 channels"),
    (["decode", "--partition", "head"], "invalid choice: 'head'"),
    (["run", "dpa-program-size", "--d-head", "100"], "d_head=100"),
    (["run", "dpa-capacity", "--requests", "0"], "--requests: must be in [1, 1000000], not 0"),
    (["run", "sherpa", "--seq-lens", "8,x"], "--seq-lens: '8,x' is not"),
    (["run", "sherpa", "--split-bytes", "0"], "--split-bytes: must be in [4096,"),
    (["run", "hetero-training", "--workloads", "VGG"], "unknown workload 'VGG'"),
    (["run", "jitq", "--models", "gpt-4"], "unknown model 'gpt-4'"),
    (["run", "jitq", "--set", "gpu.cus=8"], "jitq takes gpu.KEY=VALUE with KEY one of"),
    (["run", "jitq", "--set", "gpu.mx6_tflops=0"], "gpu.mx6_tflops: 0 is not a positive"),
    (["run", "jitq", "--set", "gpu.memory_efficiency=2"], "up to 1"),
    (["run", "hetero-training", "--offload-fraction", "2"], "--offload-fraction must be in"),
    (["run", "hetero-training", "--cpu-profile", "published", "--workloads", "LSTM"],
     "LSTM has no published profile"),
    (["run", "jitq", "--cpu-profile", "published"], "--cpu-profile does not apply to study jitq"),
    (["run", "hetero-training", "--set", "fixed_hz=1"], "hetero-training takes KEY=VALUE"),
    (["sim", "--stream-commands", "0"], "--stream-commands: must be in [1, 10000000]"),
    (["sim", "--test", "no_such_test", "--no-hub", "--no-alu"], "unknown test(s) no_such_test"),
    (["regress", "--commands", "0"], "--commands: must be in [1, 100000000], not 0"),
    (["regress", "--commands", "10", "--segment", "3"], "segment(s) [3] not in 0..0"),
    (["regress", "--commands", "100000000", "--segment-size", "1"],
     "more than 10,000: raise --segment-size to at least 10000"),
    (["sim", "--test", "long_dense", "--no-player", "--no-hub", "--no-alu", "--no-dex"],
     "--test long_dense: player test(s), not run with --no-player"),
    (["aim-compare", "--aim-sim", "/nonexistent/aim"], "--aim-sim /nonexistent/aim: no such"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("pimorch: error:")


def test_aim_compare_checks_the_simulator_before_running(tmp_path, capsys):
    """A --aim-sim that is not executable, or that fails, is one line; --out
    gets nothing unless every kernel ran."""
    plain, failing = tmp_path / "plain", tmp_path / "failing"
    plain.write_text("not a program\n")
    failing.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    failing.chmod(0o755)
    out = tmp_path / "traces"
    for binary, needle in ((plain, "not executable"), (failing, "AiM simulator failed (3)")):
        assert main(["aim-compare", "--aim-sim", str(binary), "--kernels", "gemv-4096",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
        assert not out.exists()


def test_cli_dpa_program_disassembles(capsys):
    assert main(["dpa-program", "--d-head", "32"]) == 0
    out = capsys.readouterr().out
    assert "DYN_LOOP body_len=8 t_div=16" in out and "field_sel=GPR_ADDR" in out
    assert out.count("\n") == 2 + 10


def test_cli_dpa_program_prints_the_lowered_attention(capsys):
    """--kernel attention: the lowered program (golden/hub/lowering.py),
    both EPU instructions in it; a context the GPR cannot hold is one
    error line naming the GPR."""
    from golden.hub import disassemble
    from golden.hub.lowering import AttentionLayout, small_attention_hub

    assert main(["dpa-program", "--kernel", "attention", "--group", "2"]) == 0
    out = capsys.readouterr().out
    want = disassemble(AttentionLayout(small_attention_hub(), 32, group=2).program())
    assert out.splitlines()[2:] == want
    assert out.count("EPU_SOFTMAX") == 2 and out.count("EPU_REDUCE") == 1
    assert main(["dpa-program", "--kernel", "attention", "--reference", "--d-head", "128",
                 "--group", "4", "--max-tokens", str(1 << 20)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPR entries" in err[0], err


def test_cli_timing_prints_the_constraint_table(capsys):
    assert main(["timing", "--profile", "hbm2-pim", "--set", "t_faw=20", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in data["constraints"]}
    assert list(rows) == ["t_ras", "t_rp", "t_rc", "t_rcd", "t_rtp", "t_wr", "t_ccd", "t_ccd_l",
                          "t_wtr", "t_rrd_s", "t_rrd_l", "t_faw", "t_ccd_reg", "t_wtr_reg",
                          "t_rtw_reg", "t_rfc"]
    assert rows["t_rcd"]["latency"] == 14 and "tRCDRD = 14" in rows["t_rcd"]["source"]
    assert rows["t_faw"] == {"key": "t_faw", "level": "channel", "preceding": "ACT",
                             "following": "ACT", "latency": 20, "window": 4,
                             "source": "--set t_faw=20"}
    assert rows["t_ccd_l"]["level"] == "bankgroup" and rows["t_ccd_l"]["latency"] == 4
    assert main(["timing"]) == 0
    assert "t_ccd      channel   RD/WR  RD/WR       1      2" in capsys.readouterr().out
    assert main(["timing", "--set", "t_faw=x"]) == 2
    assert "--set t_faw: value 'x' is not an integer" in capsys.readouterr().err


def test_cli_pimphony_serving_json_csv_and_plot(tmp_path, capsys):
    """The serving loop's study: every request finishes, the KV ledger
    balances, and DPA serves more requests at once than static allocation."""
    csv_path, plots = tmp_path / "serving.csv", tmp_path / "plots"
    assert main(["run", "pimphony-serving", "--scheduler", "serial", "--set",
                 "models=LLM-7B-32K", "--set", "datasets=QMSum", "--set", "systems=PIM-only",
                 "--set", "requests=16", "--set", "output_tokens=8", "--json", "-",
                 "--csv", str(csv_path), "--plot", str(plots)]) == 0
    rows = {r["step"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for r in rows.values():
        assert r["finished"] == 16 and r["tokens"] == 16 * 8
        assert r["chunks"]["granted_rows"] == r["chunks"]["released_rows"]
        assert r["chunks"]["max_rows_in_use"] <= r["chunks"]["pool_rows"]
    assert rows["+DPA"]["max_batch"] > rows["+DCS"]["max_batch"]
    assert csv_path.read_text().splitlines()[0].startswith("model,dataset,system,step")
    assert (plots / "pimphony-serving.png").read_bytes()[:4] == b"\x89PNG"
