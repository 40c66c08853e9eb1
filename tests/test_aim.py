"""sim/aim.py: the project's command streams as AiM simulator traces and the
comparison (the simulator itself is built outside the project; a stand-in
script checks the run and the parsing here)."""

import json
import stat

import pytest

from golden.config import load_profile
from golden.isa import Opcode
from golden.kernels import qkt
from golden.streams import mac, rd, rd_out, wr_inp
from sim.aim import AIM_KEYS, NO_REFRESH, aim_config, compare, run_aim, trace_lines
from sim.cli import main

CFG = load_profile("gddr6-aim", obuf_entries=1, **NO_REFRESH)


def test_one_instruction_per_command_on_channel_mask_1():
    lines = trace_lines([wr_inp(3), mac(7, 5, 3, 0), rd_out(0)])
    assert lines[1:] == ["AiM WR_GB 1 0 0x1", "AiM MAC_ABK 1 0x1 7", "AiM RD_MAC 0 0x1",
                         "AiM EOC"]
    k = qkt(CFG, 128, 1, 2048)
    body = trace_lines(k.commands)[1:-1]
    assert len(body) == len(k.commands)
    for op, isa in ((Opcode.WR_INP, "WR_GB"), (Opcode.MAC, "MAC_ABK"), (Opcode.RD_OUT, "RD_MAC")):
        assert sum(line.split()[1] == isa for line in body) == sum(
            c.opcode == op for c in k.commands)


def test_commands_without_an_instruction_are_refused():
    with pytest.raises(ValueError, match="command 1 \\(RD\\)"):
        trace_lines([wr_inp(0), rd(0, 0, 0)])


def test_config_carries_the_profile_values():
    text = aim_config(CFG, "x.trace")
    for key, name in AIM_KEYS.items():
        value = getattr(CFG.timing, key)
        if value:
            assert f"      {name}: {value}\n" in text
    assert "path: x.trace" in text and "preset: GDDR6_AiM_timing" in text
    # a device without modes: the simulator still switches, at the least cost
    assert "nMODCH: 1\n" in aim_config(CFG.replace(t_modch=0), "x.trace")


def _fake_simulator(tmp_path, body: str):
    exe = tmp_path / "ramulator2"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_run_parses_cycles_and_command_counts(tmp_path):
    exe = _fake_simulator(tmp_path, 'grep -q "preset: GDDR6_AiM_timing" "$2" || exit 3\n'
                                    'echo "  memory_system_cycles: 1234"\n'
                                    'echo "    CH31_num_MAC16_commands: 5  # total"\n'
                                    'echo "    CH0_num_MAC16_commands: 0  # total"\n'
                                    'echo "    CH31_num_TMOD_commands: 2  # total"\n')
    out = run_aim(exe, CFG, [wr_inp(0), mac(0, 0, 0, 0)])
    assert out == {"cycles": 1234, "commands": {"MAC16": 5, "TMOD": 2}}


def test_run_reports_a_failing_or_missing_simulator(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        run_aim(tmp_path / "absent", CFG, [wr_inp(0)])
    with pytest.raises(ValueError, match="failed \\(4\\): boom"):
        run_aim(_fake_simulator(tmp_path, "echo boom >&2; exit 4\n"), CFG, [wr_inp(0)])
    with pytest.raises(ValueError, match="no memory_system_cycles"):
        run_aim(_fake_simulator(tmp_path, "echo nothing\n"), CFG, [wr_inp(0)])


def test_compare_without_the_simulator_gives_the_project_side(tmp_path):
    data = compare("gddr6-aim", {}, ["qkt-d128-16k"], out_dir=tmp_path)
    (row,) = data["rows"]
    assert "aim_cycles" not in row and row["project_cycles"] > 0
    assert row["mode_switches"] == 2 * 1024 + 1  # two per RD-OUT, one for the first loads
    assert (tmp_path / "qkt-d128-16k.trace").read_text().count("RD_MAC") == 1024
    assert "nMODCH: 32" in (tmp_path / "qkt-d128-16k.yaml").read_text()


def test_cli_with_a_stand_in_simulator(tmp_path, capsys):
    exe = _fake_simulator(tmp_path, 'echo "  memory_system_cycles: 100000"\n')
    assert main(["aim-compare", "--aim-sim", str(exe), "--kernels", "sv-d128-16k",
                 "--json", "-"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["aim_cycles"] == 100000
    assert row["ratio"] == round(row["project_cycles"] / 100000, 4)
    assert main(["aim-compare", "--kernels", "nope"]) == 2
    assert "unknown kernel 'nope'" in capsys.readouterr().err
