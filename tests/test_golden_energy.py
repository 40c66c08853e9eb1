"""Energy of a channel run from its issue trace (golden/energy.py)."""

from __future__ import annotations

import numpy as np
import pytest

from golden import energy
from golden.channel import ChannelModel
from golden.config import PROFILES, ConfigError, load_profile, load_profile_data, small_config
from golden.isa import REFRESH_ID, Opcode
from golden.streams import CMD_ID_MOD, TraceEntry, act_ahead, mac, rd, rd_out, wr, wr_inp
from tb.stimulus import dex_stream, random_stream

AIM = energy.energy_params("gddr6-aim")


def test_gddr6_aim_energy_from_its_source():
    """The CENT simulator's powers times the commands' times (profile
    sources): mW x ns = pJ."""
    assert AIM.act_pj == pytest.approx(132.6 / 2 * 44.5)
    assert AIM.rd_pj == pytest.approx(876.3 / 2 * 1.25)
    assert AIM.wr_pj == pytest.approx(1106.3 / 2 * 1.25)
    assert 16 * AIM.mac_pj == pytest.approx(3 * 876.3 / 2 * 1.0)
    assert AIM.beat_pj == pytest.approx(5.5 * 256)
    # the RTL tests' profile is the same device
    assert energy.energy_params("gddr6-aim-assumed") == AIM
    # the HUB's EPU: CENT's 16-lane accelerators, SWITCH + INT mW for one
    # 2 GHz cycle; a division step one lane of the vector adder (assumption)
    assert AIM.epu_vec_pj == pytest.approx((0.133 + 0.248) * 0.5)
    assert AIM.epu_exp_pj == pytest.approx((0.0339 + 0.560) * 0.5)
    assert AIM.epu_tree_pj == pytest.approx((0.0562 + 0.232) * 0.5)
    assert AIM.epu_div_pj == pytest.approx(AIM.epu_vec_pj / 16, rel=1e-4)
    hbm = energy.energy_params("hbm2-pim")
    assert [getattr(hbm, k) for k in energy.KEYS if k.startswith("epu_")] == [
        getattr(AIM, k) for k in energy.KEYS if k.startswith("epu_")]


def test_hbm2_pim_energy_from_its_sources():
    """DRAMsim3's HBM2 currents through its per-command formulas, halved
    for the pseudo-channel (an assumption), and FGDRAM's per-bit data
    movement (through the AttAcc simulator) for every 32 B word."""
    e = energy.energy_params("hbm2-pim")
    vdd, idd0, idd2n, idd3n, idd5 = 1.2, 65, 40, 55, 250
    assert e.act_pj == pytest.approx(vdd * (idd0 * 48 - (idd3n * 34 + idd2n * 14)) / 2)
    assert e.ref_pj == pytest.approx(vdd * (idd5 - idd3n) * 260 / 2)
    assert (e.act_standby_mw, e.pre_standby_mw) == pytest.approx((vdd * idd3n / 2, vdd * idd2n / 2))
    assert e.rd_pj == e.wr_pj == pytest.approx(256 * (0.44 + 1.01 + 1.23 + 0.5))
    assert e.mac_pj == pytest.approx(256 * 0.44 + 16 * 0.32)
    assert e.gbuf_wr_pj == e.obuf_rd_pj == pytest.approx(256 * (0.5 + 1.23 + 1.01) + 32 * 0.0034)
    assert e.beat_pj == pytest.approx(0.3 * 256)
    # the HBM3 profiles take this table, as an assumption their sources say
    for name in ("hbm3-pim", "hbm-jitq"):
        assert energy.energy_params(name) == e
        assert "assumption" in load_profile_data(name)["sources"]["energy"]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_energy_table_cites_its_source(name):
    """Every profile has energy, says where each value comes from, and
    marks what no source gives as an assumption."""
    data = load_profile_data(name)
    assert energy.params_for(load_profile(name)) is not None
    src = data["sources"]
    assert "energy" in src
    if "energy" in data:
        for key in ("act_pj", "rd_pj", "mac_pj", "obuf_rd_pj", "gbuf_wr_pj", "ref_pj",
                    "act_standby_mw", "pre_standby_mw", "epu_vec_pj", "epu_exp_pj",
                    "epu_tree_pj", "epu_div_pj"):
            assert any(key in k + v for k, v in src.items() if k.startswith("energy")), key
        assumptions = [v for k, v in src.items() if k.startswith("energy_")]
        assert assumptions and all("assumption" in v for v in assumptions)
    else:
        assert data["energy_from"] in PROFILES


def test_a_small_run_by_hand():
    """WR-INP, two MACs on row 5 (an all-bank ACT), RD-OUT, then a read of
    bank 0 row 1 (PRE and ACT of bank 0): every command's energy and the
    background from the trace's cycles."""
    cfg = small_config()
    cmds = [wr_inp(0), mac(5, 0, 0, 0), mac(5, 1, 0, 0), rd_out(0), rd(0, 1, 0)]
    r = ChannelModel(cfg).run(cmds, [7])
    e = energy.run_energy(cfg.profile, cfg, cmds, r)
    first_act = next(t.cycle for t in r.trace if t.opcode == Opcode.ACT)
    assert e["counts"] == {"acts": cfg.banks + 1, "pres": 1, "macs": 2 * cfg.banks,
                           "rds": 1, "wrs": 0, "wr_inps": 1, "rd_outs": 1, "beats": 3,
                           "refreshes": 0, "active": r.cycles - first_act}
    # from the first ACT on some row stays open (the read's PRE closes bank 0 only)
    assert e["active_cycles"] == r.cycles - first_act
    b = e["breakdown"]
    assert b["mac"] == pytest.approx(2 * cfg.banks * AIM.mac_pj)
    assert b["act_pre"] == pytest.approx((cfg.banks + 1) * AIM.act_pj + AIM.pre_pj)
    assert b["io"] == pytest.approx(3 * AIM.beat_pj + AIM.gbuf_wr_pj + AIM.obuf_rd_pj)
    assert b["other"] == pytest.approx(AIM.rd_pj)
    assert b["refresh"] == 0
    assert b["background"] == pytest.approx(
        0.5 * (first_act * AIM.pre_standby_mw + (r.cycles - first_act) * AIM.act_standby_mw))
    assert e["total_pj"] == pytest.approx(sum(b.values()))


def test_refresh_and_its_precharge():
    """On gddr6-aim (refresh every 3,333 cycles) a long run refreshes: each
    REF costs ref_pj, and its all-bank PRE closes every open row (the
    background drops to precharged standby until the next ACT)."""
    cfg = load_profile("gddr6-aim", rows=64, cols=32, gbuf_entries=32, obuf_entries=4)
    cmds = [wr_inp(0)] + [mac(r % 4, c, 0, 0) for r in range(4) for c in range(32)] * 24
    r = ChannelModel(cfg).run(cmds, [1])
    refs = sum(t.opcode == Opcode.REF for t in r.trace)
    assert refs >= 2
    e = energy.run_energy("gddr6-aim", cfg, cmds, r)
    assert e["counts"]["refreshes"] == refs
    assert e["breakdown"]["refresh"] == pytest.approx(refs * AIM.ref_pj)
    # every ACT's rows are closed again by a PRE, but the last
    opened, closed = e["counts"]["acts"], e["counts"]["pres"]
    assert opened - closed in (0, cfg.banks)
    # every PRE here closes every bank (all-bank MACs, the refreshes): the
    # channel is precharged from each PRE to the next ACT
    first_act = next(t.cycle for t in r.trace if t.opcode == Opcode.ACT)
    assert any(t.cmd_id == REFRESH_ID and t.opcode == Opcode.PRE for t in r.trace)
    closed_for = 0
    shut = None
    for t in r.trace:
        if t.opcode == Opcode.PRE:
            shut = t.cycle
        elif t.opcode == Opcode.ACT and shut is not None:
            closed_for += t.cycle - shut
            shut = None
    assert closed_for > 0
    assert e["active_cycles"] == r.cycles - first_act - closed_for


@pytest.mark.parametrize("policy", ["static", "pingpong", "dcs"])
def test_replay_matches_every_controller_action(policy):
    """Random streams (bad commands among them) under each policy: the
    replay finds, for every ACT and PRE of the trace, that the command it
    serves needs exactly that action (it raises otherwise), and the counts
    add up."""
    cfg = small_config().replace(policy=policy)
    rng = np.random.default_rng(11)
    cmds, wdata = random_stream(cfg, 3000, rng, bad=0.05, shape="dense")
    r = ChannelModel(cfg).run(cmds, wdata)
    e = energy.run_energy(cfg.profile, cfg, cmds, r)
    n = {op: sum(t.opcode == op for t in r.trace) for op in Opcode}
    assert e["counts"]["macs"] == cfg.banks * n[Opcode.MAC]
    assert e["counts"]["beats"] == n[Opcode.RD] + n[Opcode.WR] + n[Opcode.WR_INP] + n[
        Opcode.RD_OUT]
    assert n[Opcode.ACT] <= e["counts"]["acts"] <= cfg.banks * n[Opcode.ACT]
    assert 0 <= e["counts"]["acts"] - e["counts"]["pres"] <= cfg.banks
    assert 0 < e["active_cycles"] <= r.cycles


def test_dual_path_partitions_open_their_own_rows():
    """On sliced dual-path banks an ACT opens one partition's row; the
    replay follows the partitions (a read beside MACs in the other
    partition needs no PRE)."""
    cfg = small_config().replace(dual_path=True, slice_rows=small_config().rows // 2)
    rng = np.random.default_rng(4)
    cmds, wdata = dex_stream(cfg, 6, rng, split=cfg.slice_rows, bad=0.0)
    r = ChannelModel(cfg).run(cmds, wdata)
    e = energy.run_energy(cfg.profile, cfg, cmds, r)
    assert 0 <= e["counts"]["acts"] - e["counts"]["pres"] <= 2 * cfg.banks
    by_hand = [mac(40, 0, 0, 0), rd(0, 1, 0), act_ahead(1, 2), rd(1, 2, 0), wr(0, 1, 1)]
    r = ChannelModel(cfg.replace(slice_rows=32)).run([wr_inp(0), *by_hand], [3, 9])
    e = energy.run_energy(cfg.profile, cfg.replace(slice_rows=32), [wr_inp(0), *by_hand], r)
    assert e["counts"]["acts"] == cfg.banks + 2 and e["counts"]["pres"] == 0


def test_command_ids_wrap():
    """IDs wrap at CMD_ID_MOD: an entry names the oldest unfinished command
    with its ID; a refresh's own entries (ID 0, ending in REF) name none."""
    n = CMD_ID_MOD + 3
    cmds = [rd_out(0)] * n
    trace = [TraceEntry(i % CMD_ID_MOD, Opcode.RD_OUT, i) for i in range(n - 1)]
    trace += [TraceEntry(REFRESH_ID, Opcode.PRE, n), TraceEntry(REFRESH_ID, Opcode.REF, n + 1),
              TraceEntry((n - 1) % CMD_ID_MOD, Opcode.RD_OUT, n + 2)]
    owner = energy._command_of(trace, cmds, set())
    assert owner[:3] == [0, 1, 2] and owner[CMD_ID_MOD] == CMD_ID_MOD
    assert owner[-3:] == [None, None, n - 1]
    # a dropped command is skipped
    owner = energy._command_of(trace[1:2], cmds, {0})
    assert owner == [1]


def test_bad_energy_tables(tmp_path):
    base = (tmp_path / "p.toml")
    text = open(energy.__file__.replace("energy.py", "profiles/gddr6_aim.toml")).read()
    base.write_text(text.replace("ref_pj = 40279\n", ""))
    with pytest.raises(ConfigError, match="missing key energy.ref_pj"):
        energy.energy_params(str(base))
    base.write_text(text + "")
    with pytest.raises(ConfigError, match="unknown key energy.foo"):
        energy.energy_params(str(base), foo=1)
    with pytest.raises(ConfigError, match="energy.act_pj must be a number"):
        energy.energy_params(str(base), act_pj=-1)
    bare = tmp_path / "bare.toml"
    bare.write_text(text[:text.index("[energy]")])
    with pytest.raises(ConfigError, match="has no \\[energy\\] table"):
        energy.energy_params(str(bare))


# ---- the JIT-Q ALU channel -----------------------------------------------------

JITQ = energy.energy_params("hbm-jitq")
ALU = energy.alu_energy_params("hbm-jitq")


def test_alu_energy_from_its_sources():
    """FGDRAM's cell access (via the AttAcc simulator) and its PIM SRAM for
    the registers; a lane of an ALU command at its FP16 MAC figure (an
    assumption, cited as one)."""
    assert ALU.ld_pj == ALU.st_pj == pytest.approx(256 * 0.44 + 32 * 0.0034)
    assert ALU.op_pj == pytest.approx(16 * 0.32 + 3 * 32 * 0.0034)
    assert ALU.mov_pj == pytest.approx(2 * 32 * 0.0034)
    src = load_profile_data("hbm-jitq")["sources"]
    for key in energy.ALU_KEYS:
        assert key in src["alu_energy"]
    assert "assumption" in src["alu_energy_assumption"]


def _alu_run(words, wdata=(), **kw):
    from golden.alu import AluChannel, AluConfig

    cfg = AluConfig.from_profile("hbm-jitq", pairs=2, rows=8, **kw)
    r = AluChannel(cfg).run(words, list(wdata))
    return cfg, r, energy.alu_trace_energy(cfg, JITQ, ALU, 0.8333, words, r.trace, r.cycles)


def test_alu_run_by_hand():
    """A LD (row 1 of both even banks: one ACT of two banks), two computing
    commands and two moves on every ALU, a ST (row 3 of both odd banks), a
    host WR to an open row and a host RD of bank 2 row 5 (PRE and ACT of
    bank 2): each kind priced by hand, the background from the trace."""
    from golden.alu import alu, host_rd, host_wr
    from golden.isa import AluAdd, AluMov, AluMul

    words = [alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=1, bank=0, row=1, col=0),
             alu(Opcode.ALU_ADD, AluAdd.ADD, dst_reg=2, src_reg=1, src2_reg=1),
             alu(Opcode.ALU_MUL, AluMul.MULLO, dst_reg=3, src_reg=2, use_imm=1, imm=3),
             alu(Opcode.ALU_MOV, AluMov.COPY, dst_reg=4, src_reg=3),
             alu(Opcode.ALU_MOV, AluMov.IMM, dst_reg=5, imm=9),
             alu(Opcode.ALU_MOV, AluMov.ST, src_reg=3, bank=1, row=3, col=2),
             host_wr(0, 1, 1), host_rd(2, 5, 0)]
    cfg, r, e = _alu_run(words, [12345])
    first_act = next(t.cycle for t in r.trace if t.opcode == Opcode.ACT)
    assert e["counts"] == {"acts": 2 + 2 + 1, "pres": 1, "lds": 2, "sts": 2, "ops": 4,
                           "movs": 4, "rds": 1, "wrs": 1, "refreshes": 0,
                           "active": r.cycles - first_act}
    b = e["breakdown"]
    assert b["alu"] == pytest.approx(4 * ALU.op_pj + 4 * ALU.mov_pj)
    assert b["ld_st"] == pytest.approx(2 * ALU.ld_pj + 2 * ALU.st_pj)
    assert b["io"] == pytest.approx(2 * JITQ.beat_pj)
    assert b["act_pre"] == pytest.approx(5 * JITQ.act_pj + JITQ.pre_pj)
    assert b["other"] == pytest.approx(JITQ.rd_pj + JITQ.wr_pj)
    assert b["refresh"] == 0
    assert b["background"] == pytest.approx(0.8333 * (
        first_act * JITQ.pre_standby_mw + (r.cycles - first_act) * JITQ.act_standby_mw))
    assert set(b) == set(energy.ALU_CATEGORIES)
    assert e["total_pj"] == pytest.approx(sum(b.values()))


def test_alu_bad_commands_cost_nothing_and_a_wrong_trace_is_refused():
    """A dropped command (bank select 2) adds nothing; a trace without the
    ACT its LD needs, or naming a command past the list, is refused."""
    from golden.alu import alu
    from golden.isa import AluMov

    ld = alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=1, bank=0, row=1, col=0)
    bad = alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=1, bank=2, row=1, col=0)
    cfg, r, e = _alu_run([ld])
    _, r2, e2 = _alu_run([bad, ld])
    assert r2.status.err_count == 1
    assert e2["counts"]["lds"] == e["counts"]["lds"] == 2
    assert e2["breakdown"]["ld_st"] == e["breakdown"]["ld_st"]
    assert e2["counts"]["acts"] == e["counts"]["acts"] == 2
    no_act = [t for t in r.trace if t.opcode != Opcode.ACT]
    with pytest.raises(ValueError, match="before its row is open"):
        energy.alu_trace_counts(cfg, [ld], no_act, r.cycles)
    other_row = alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=1, bank=0, row=2, col=0)
    _, r3, _ = _alu_run([ld, other_row])
    no_pre = [t for t in r3.trace if t.opcode != Opcode.PRE]
    with pytest.raises(ValueError, match="needs PRE"):
        energy.alu_trace_counts(cfg, [ld, other_row], no_pre, r3.cycles)
    with pytest.raises(ValueError, match="names no command"):
        energy.alu_trace_counts(cfg, [ld], [TraceEntry(5, Opcode.ALU_MOV, 3)], 9)


def test_alu_refresh_closes_every_row():
    """With refresh every 1,000 cycles a long program refreshes; each REF
    costs ref_pj and its PRE closes every open bank, which the next LD
    opens again."""
    import dataclasses

    from golden.alu import AluChannel, AluConfig, alu
    from golden.isa import AluAdd, AluMov

    cfg = AluConfig.from_profile("hbm-jitq", pairs=2, rows=8)
    cfg = dataclasses.replace(cfg, timing=dataclasses.replace(cfg.timing, t_refi=1000, t_rfc=60))
    words = [w for k in range(300) for w in (
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=1, bank=k % 2, row=k % 3, col=0),
        alu(Opcode.ALU_ADD, AluAdd.ADD, dst_reg=2, src_reg=1, src2_reg=1))]
    r = AluChannel(cfg).run(words)
    refs = sum(t.opcode == Opcode.REF for t in r.trace)
    assert refs >= 3
    e = energy.alu_trace_energy(cfg, JITQ, ALU, 0.8333, words, r.trace, r.cycles)
    assert e["counts"]["refreshes"] == refs
    assert e["breakdown"]["refresh"] == pytest.approx(refs * JITQ.ref_pj)
    # every bank ever opened is closed by a PRE, but those still open
    assert 0 <= e["counts"]["acts"] - e["counts"]["pres"] <= cfg.banks
    assert e["counts"]["ops"] == 300 * cfg.pairs and e["counts"]["lds"] == 300 * cfg.pairs


def test_alu_energy_tables_are_checked(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('name = "p"\n[alu_energy]\nld_pj = 1\nst_pj = 1\nop_pj = 1\n')
    with pytest.raises(ConfigError, match="missing key alu_energy.mov_pj"):
        energy.alu_energy_params(str(prof))
    with pytest.raises(ConfigError, match="unknown key alu_energy.x"):
        energy.alu_energy_params(str(prof), mov_pj=1, x=2)
    with pytest.raises(ConfigError, match="has no \\[alu_energy\\]"):
        energy.alu_energy_params("gddr6-aim")
    with pytest.raises(ConfigError, match="unknown key energy.act_pj"):
        energy.scaled(ALU, {"act_pj": 2})
    assert energy.scaled(ALU, {"op_pj": 0.5}).op_pj == pytest.approx(ALU.op_pj / 2)
    # only the ALU channel's profile prices an ALU channel
    from golden.alu import AluConfig

    assert energy.alu_params_for(AluConfig.from_profile("hbm-jitq", pairs=1, rows=2)) == (
        JITQ, ALU, 0.8333)
    assert energy.alu_params_for(AluConfig.from_profile("hbm3-pim", pairs=1, rows=2)) is None
