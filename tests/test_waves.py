"""Waveform views (sim/waves.py) and the scoreboard's mismatch report,
without a simulator."""

import re

import pytest

from golden import isa
from golden.channel import ChannelModel, Command
from golden.config import small_config
from sim import waves
from tb import scoreboard


def test_filters_round_trip_every_value_of_the_encoding_table(tmp_path):
    files = waves.write_filters(tmp_path)
    assert set(files) == set(waves.ENUMS)
    for field, enum in waves.ENUMS.items():
        assert waves.read_filter(files[field]) == {int(v): v.name for v in enum}
    opcodes = waves.read_filter(files["opcode"])
    assert all(opcodes[int(op)] == op.name for op in isa.Opcode)


def _names(style: str) -> list[str]:
    """Signal names as Icarus (escaped struct members with a backslash) or
    Verilator writes them."""
    esc = "\\" if style == "icarus" else ""
    return ["pim_tb.clk", "pim_tb.cmd__valid", "pim_tb.cmd__payload[44:0]",
            "pim_tb.trace__valid", "pim_tb.trace__payload[52:0]", "pim_tb.status[35:0]",
            "pim_tb.dut.cmd__payload[44:0]",
            f"pim_tb.dut.controller.{esc}io_q0.cmd.opcode[4:0]",
            f"pim_tb.dut.controller.{esc}io_q0.cmd_id[15:0]",
            f"pim_tb.dut.controller.{esc}io_q10.cmd_id[15:0]",
            f"pim_tb.dut.controller.{esc}io_q2.cmd_id[15:0]",
            "pim_tb.dut.controller.dtab_g0_id[15:0]", "pim_tb.dut.controller.stab_o1_cnt[2:0]",
            "pim_tb.dut.controller.banks.open_row3[5:0]",
            "pim_tb.dut.controller.banks.rcd_cnt0[5:0]", "pim_tb.dut.controller.fence"]


def test_views_are_the_same_for_both_simulators():
    for view in waves.VIEWS:
        a = waves.view_signals(_names("icarus"), view)
        b = waves.view_signals(_names("verilator"), view)
        assert [(t, [waves._plain(n) for n in g]) for t, g in a] == \
            [(t, [waves._plain(n) for n in g]) for t, g in b]
    groups = dict(waves.view_signals(_names("verilator"), "controller"))
    # numbered entries in numeric order; the D- and S-Tables, open rows, counters
    assert groups["I/O queue (io_q0 is its head)"] == [
        "pim_tb.dut.controller.io_q0.cmd.opcode[4:0]", "pim_tb.dut.controller.io_q0.cmd_id[15:0]",
        "pim_tb.dut.controller.io_q2.cmd_id[15:0]", "pim_tb.dut.controller.io_q10.cmd_id[15:0]"]
    assert "pim_tb.dut.controller.dtab_g0_id[15:0]" in groups[
        "D-Table (the last writer of each GBuf / OBuf entry)"]
    assert "pim_tb.dut.controller.banks.open_row3[5:0]" in groups[
        "banks: open rows and timing counters"]
    assert waves.view_signals(_names("icarus"), "hub") == []  # no HUB in a channel run
    assert waves.view_signals(_names("icarus"), "alu") == []


def _extractions(text: str) -> dict[str, list[int]]:
    """alias -> the bit indices it extracts (MSB first) from the view."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"#\{(\S+)\} (.*)", line)
        if m:
            out[m[1]] = [int(x) for x in re.findall(r"\((\d+)\)", m[2])]
    return out


def test_decoded_fields_extract_the_encoding_tables_bits(tmp_path):
    vcd = tmp_path / "waves.vcd"
    vcd.write_text("")
    path = waves.write_view(vcd, "channel", names=_names("icarus"))
    text = path.read_text()
    got = _extractions(text)
    word = Command(int(isa.Opcode.MAC), bank=9, row=0xBEEF, col=0xA5, gbuf_idx=0x3C,
                   out_idx=6).pack()
    bits = format(word, "045b")  # MSB first, as GTKWave indexes a vector
    for field in isa.COMMAND_FIELDS:
        value = int("".join(bits[i] for i in got[f"cmd.{field}"]), 2)
        assert value == isa.unpack(isa.COMMAND_FIELDS, word)[field], field
    for field in isa.TRACE_FIELDS:
        assert f"trace.{field}" in got
    assert {f"status.{f}" for f in isa.STATUS_FIELDS} <= set(got)
    # enumerated fields are translated by the generated filter file, in decimal
    lines = text.splitlines()
    i = lines.index(next(x for x in lines if x.startswith("#{cmd.opcode}")))
    assert lines[i - 2] == "@2024" and lines[i - 1].endswith("filter_opcode.txt")
    assert text.startswith(f'[dumpfile] "{vcd.resolve()}"')
    assert waves.view_signals(_names("icarus"), "dcs") == []  # no compute queue entries


def test_payload_formats_by_width():
    assert waves.payload_format("top.cmd__payload[44:0]") == isa.COMMAND_FIELDS
    assert waves.payload_format("top.cmd__payload[64:0]") == isa.ALU_COMMAND_FIELDS
    assert waves.payload_format("top.trace_3__payload[52:0]") == isa.TRACE_FIELDS
    assert waves.payload_format("top.host__payload[331:0]") == isa.HOST_FIELDS
    assert waves.payload_format("top.rsp__payload[259:0]") == isa.RESPONSE_FIELDS
    assert waves.payload_format("top.cmd__payload[7:0]") is None
    assert waves.payload_format("top.cycle[31:0]") is None


def test_decode_reads_a_hand_written_vcd(tmp_path):
    word = isa.pack(isa.TRACE_FIELDS, {"cmd_id": 17, "opcode": int(isa.Opcode.MAC),
                                       "cycle": 5})
    vcd = tmp_path / "w.vcd"
    vcd.write_text("\n".join([
        "$timescale 1ns $end", "$scope module top $end",
        "$var wire 1 ! clk $end", "$var wire 1 \" trace__valid $end",
        "$var wire 53 # trace__payload [52:0] $end", "$upscope $end", "$enddefinitions $end",
        "#0", "0!", "0\"", "b0 #",
        "#5", "1!", "#10", "0!", "1\"", f"b{word:b} #",
        "#15", "1!", "#20", "0!", "0\"", "#25", "1!", "#30", "0!", ""]))
    assert waves.decode(vcd) == [{"cmd_id": 17, "opcode": "MAC", "cycle": 5, "edge": 1}]
    with pytest.raises(KeyError, match="rsp__payload not a toplevel signal"):
        waves.decode(vcd, "rsp__payload", None)


def _observed(model, cmds):
    ref = model.run(cmds, [], [0] * len(cmds), [], [])
    obs = scoreboard.Observed()
    obs.cmd_arrivals = [0] * len(cmds)
    obs.trace = [(t.cmd_id, int(t.opcode), t.cycle) for t in ref.trace]
    obs.rdata = list(ref.rdata)
    obs.status = (int(ref.status.err_code), ref.status.err_id, ref.status.err_count)
    return obs


def test_a_mismatch_names_the_first_differing_cycle_and_the_waves(tmp_path, monkeypatch):
    """A deliberately wrong expectation (the golden model one cycle slower to
    activate): the message names the first cycle where the traces differ
    and the command that rewrites the run with waves; both traces are
    written as text."""
    cfg = small_config()
    cmds = [Command(int(isa.Opcode.MAC), row=2, col=1, gbuf_idx=0, out_idx=0)]
    obs = _observed(ChannelModel(cfg), cmds)
    slow = cfg.replace(t_rcd=cfg.timing.t_rcd + 1)
    mac = next(c for i, o, c in obs.trace if o == int(isa.Opcode.MAC))
    monkeypatch.setenv("PIMORCH_TEST_DIR", str(tmp_path))
    monkeypatch.setenv("PIMORCH_SIM", "icarus")
    monkeypatch.setenv("PIMORCH_TESTS", "some_test")
    monkeypatch.setenv("PIMORCH_POLICY", "dcs")
    monkeypatch.setenv("PIMORCH_WAVES", "0")
    with pytest.raises(scoreboard.ScoreboardError) as err:
        scoreboard.check(ChannelModel(slow), cmds, [], obs, seed=7)
    msg = str(err.value)
    assert f"first differing cycle {mac}" in msg
    assert "rewrite it with waves: pimorch sim --sim icarus --waves --policy dcs " \
           "--test some_test --seed 7" in msg
    golden = (tmp_path / "golden_trace.txt").read_text().splitlines()
    rtl = (tmp_path / "rtl_trace.txt").read_text().splitlines()
    assert f"{mac:>8}      0 MAC           row=2 col=1 gbuf_idx=0 out_idx=0" in rtl
    assert f"{mac + 1:>8}      0 MAC           row=2 col=1 gbuf_idx=0 out_idx=0" in golden
    monkeypatch.setenv("PIMORCH_WAVES", "1")
    with pytest.raises(scoreboard.ScoreboardError, match=f"waveform: {tmp_path}/waves.vcd"):
        scoreboard.check(ChannelModel(slow), cmds, [], obs, seed=7)


def test_verilator_names_escaped_for_gtkwave(tmp_path):
    """Verilator writes Amaranth's internal nets bare (``$1``,
    ``$auto$...``); GTKWave takes a leading ``$`` for a keyword and refuses
    the file. The copy escapes them as Icarus does and keeps the rest."""
    from sim.runner import escape_vcd_names

    src, dst = tmp_path / "dump.vcd", tmp_path / "waves.vcd"
    body = "#0\nb1 !\n1\"\n#10\n0\"\n"
    src.write_text(" $scope module top $end\n  $var wire 1 D $auto$x.cc:1:f$1 $end\n"
                   "  $var wire 17 ! $1001 [16:0] $end\n  $var wire 1 \" clk $end\n"
                   " $upscope $end\n$enddefinitions $end\n" + body)
    escape_vcd_names(src, dst)
    text = dst.read_text()
    assert "  $var wire 1 D \\$auto$x.cc:1:f$1 $end\n" in text
    assert "  $var wire 17 ! \\$1001 [16:0] $end\n" in text
    assert "  $var wire 1 \" clk $end\n" in text and text.endswith(body)


#: A few names of a PIM-module (Verilator) and an ALU-channel VCD.
HUB_NAMES = ["pim_module.clk", "pim_module.host__valid", "pim_module.host__ready",
             "pim_module.host__payload[331:0]", "pim_module.rsp__payload[259:0]",
             "pim_module.trace_0__payload[52:0]", "pim_module.trace_1__valid",
             "pim_module.dbg_cmd[44:0]", "pim_module.decoder.fsm_state[2:0]",
             "pim_module.decoder.pc[5:0]", "pim_module.decoder.fault[3:0]",
             "pim_module.decoder.push__payload.cmd.opcode[4:0]",
             "pim_module.cbuf.t_cur0[31:0]", "pim_module.cbuf.state1[1:0]",
             "pim_module.cbuf.va2pa0_1[4:0]", "pim_module.cbuf.lookup__pchunk[4:0]",
             "pim_module.multicast.held.cmd.opcode[4:0]", "pim_module.multicast.loaded",
             "pim_module.gpr.host_wr__en", "pim_module.gpr.beat_wr__addr[7:0]",
             "pim_module.channel0.controller.head_valid"]
ALU_NAMES = ["$rootio.clk", "pim_alu.clk", "pim_alu.cmd__valid", "pim_alu.cmd__payload[64:0]",
             "pim_alu.alu0_r3[255:0]", "pim_alu.alu1_r0[255:0]", "pim_alu.alu0_cnt5[15:0]",
             "pim_alu.alu0_result[255:0]", "pim_alu.banks.rcd_cnt0[4:0]", "pim_alu.open[3:0]"]


def test_hub_and_alu_views(tmp_path):
    hub = dict(waves.view_signals(HUB_NAMES, "hub"))
    assert hub["requests: T_cur, state, chunks, GPR base"] == [
        "pim_module.cbuf.state1[1:0]", "pim_module.cbuf.t_cur0[31:0]"]
    assert hub["VA2PA table and its lookup"] == [
        "pim_module.cbuf.va2pa0_1[4:0]", "pim_module.cbuf.lookup__pchunk[4:0]"]
    assert "pim_module.multicast.held.cmd.opcode[4:0]" in hub["multicast register"]
    assert hub["GPR writes"] == ["pim_module.gpr.beat_wr__addr[7:0]",
                                 "pim_module.gpr.host_wr__en"]
    assert "pim_module.decoder.pc[5:0]" in hub["decoder"]
    alu = dict(waves.view_signals(ALU_NAMES, "alu"))
    assert alu["registers (ALU a, register r)"] == ["pim_alu.alu0_r3[255:0]",
                                                    "pim_alu.alu1_r0[255:0]"]
    assert alu["lane shift counters (ALU a, lane i)"] == ["pim_alu.alu0_cnt5[15:0]"]
    assert waves.view_signals(ALU_NAMES, "hub") == []
    assert waves.view_signals(HUB_NAMES, "alu") == []
    vcd = tmp_path / "waves.vcd"
    vcd.write_text("")
    text = waves.write_view(vcd, "hub", names=HUB_NAMES).read_text()
    # request state, fault and the host operation by name; the host call's fields
    for field in ("req_state", "fault", "host_op", "rsp_code", "opcode"):
        assert f"filter_{field}.txt" in text, field
    assert {"#{host.host_op}", "#{host.req_id}", "#{rsp.rsp_code}", "#{trace_0.cycle}",
            "#{dbg_cmd.row}"} <= {line.split()[0] for line in text.splitlines()
                                  if line.startswith("#{")}
    alu_text = waves.write_view(vcd, "channel", names=ALU_NAMES).read_text()
    assert "#{cmd.alu_fn}" in alu_text and "#{cmd.use_imm}" in alu_text
