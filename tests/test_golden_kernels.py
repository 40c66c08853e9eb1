"""Kernel streams, the utilization bound and the dcs-utilization study."""

import json

import pytest

from golden.channel import ChannelModel
from golden.config import load_profile
from golden.isa import Opcode
from golden.kernels import fc, qkt, sv, utilization_bound
from golden.system.studies import dcs_utilization
from sim.cli import main

CFG = load_profile("gddr6-aim", obuf_entries=8)


@pytest.mark.parametrize("kernel", [
    qkt(CFG, 128, 4, 256), qkt(CFG, 64, 1, 256), sv(CFG, 128, 2, 256), sv(CFG, 256, 1, 256),
    fc(CFG, 512, 128), fc(CFG, 4096, 32)], ids=lambda k: k.name)
def test_bound_holds_for_every_policy_and_dcs_is_never_slower(kernel):
    bound = utilization_bound(CFG, kernel)
    cycles = {}
    for policy in ("static", "pingpong", "dcs"):
        r = ChannelModel(CFG.replace(policy=policy)).run(kernel.commands, kernel.wdata)
        assert r.cycles >= bound["bound_cycles"], policy
        assert r.mac_count == bound["macs"]
        cycles[policy] = r.cycles
    # (ping-pong may be slower than static: its hand-offs wait for both halves)
    # DCS's decode stage puts its first issue a cycle after the in-order
    # controllers'; where they lose no cycle after it, DCS ends a cycle later
    assert cycles["dcs"] <= min(cycles["static"], cycles["pingpong"]) + 1


def test_qkt_row_reuse_visits_each_row_once_and_reads_every_score():
    k = qkt(CFG, 128, 4, 1024)
    keys_per_row = CFG.cols // (128 // 16)
    assert k.rows == sorted(set(k.rows))  # each row opened once, all queries on it
    n_rd = sum(c.opcode == Opcode.RD_OUT for c in k.commands)
    assert n_rd == 4 * keys_per_row * len(k.rows)
    assert sum(k.macs_per_row) == 4 * (128 // 16) * keys_per_row * len(k.rows)


def test_fc_macs_cover_the_matrix():
    k = fc(CFG, 4096, 512)
    assert sum(k.macs_per_row) == (512 // CFG.banks) * (4096 // 16)
    assert max(c.gbuf_idx for c in k.commands) < CFG.gbuf_entries


def test_study_reports_every_row_and_explains_far_ones():
    r = dcs_utilization(tokens=128, d_heads=(64, 128), groups=(1, 8), fc_dims=(128, 512))
    assert len(r["rows"]) == 2 * 2 * 2 + 4
    # at most DCS's decode stage (a cycle) behind a baseline that loses nothing
    assert all(d == 1 for d in r["dcs_slower_than_a_baseline"].values())
    for row in r["rows"]:
        assert set(row["policies"]) == {"static", "pingpong", "dcs"}
        assert all(p["of_bound"] <= 1.0 for p in row["policies"].values())
        if row["policies"]["dcs"]["of_bound"] < 0.9:
            assert "dcs_queue_depth_sensitivity" in row


def test_cli_runs_the_study(capsys):
    assert main(["run", "dcs-utilization", "--tokens", "64", "--set", "banks=4",
                 "--d-heads", "64", "--groups", "1,2", "--fc-dims", "128", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["study"] == "dcs-utilization" and len(data["rows"]) == 2 + 2 + 1
    assert "4 banks" in data["config"]


def test_deeper_queues_close_the_gap_on_a_reloading_fc():
    """The FC rows with d_in 4096 reload the input per DRAM row; a shallow
    compute queue keeps the loads from being decoded early (docs/scheduling.md).
    On the device with modes the loads (register mode) cannot overlap the MACs
    (normal mode) at all and depth buys nothing; without modes it does."""
    no_modes = CFG.replace(t_modch=0)
    k = fc(no_modes, 4096, 32)
    bound = utilization_bound(no_modes, k)["bound_cycles"]
    cycles = [ChannelModel(no_modes.replace(policy="dcs", io_depth=d, compute_depth=d)).run(
        k.commands, k.wdata).cycles for d in (4, 16, 64)]
    assert cycles[0] > cycles[1] > cycles[2] >= bound
    assert cycles[0] > 1.15 * bound and cycles[2] < 1.05 * bound
    with_modes = [ChannelModel(CFG.replace(policy="dcs", io_depth=d, compute_depth=d)).run(
        k.commands, k.wdata).cycles for d in (4, 64)]
    assert with_modes[0] == with_modes[1] > cycles[0]


def test_fc_utilization_study_rows_and_labels():
    from golden.system.studies import fc_utilization

    r = fc_utilization(dims=(128, 1024))
    assert [row["d"] for row in r["rows"]] == [128, 1024]
    for row in r["rows"]:
        for p in row["policies"].values():
            assert sum(p["labels"].values()) == p["cycles"]
            assert p["mac_utilization"] <= row["utilization_bound"]
            assert p["labels"]["mac"] == row["macs"] * CFG.timing.t_ccd  # MACs never overlap
    # the larger GEMV amortises its loads and switches: higher static utilization
    static = [row["policies"]["static"]["mac_utilization"] for row in r["rows"]]
    assert static[1] > static[0]


def test_kernel_breakdown_separates_mode_switches(capsys):
    assert main(["run", "kernel-breakdown", "--tokens", "512", "--groups", "1",
                 "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["kernel"] for r in data["rows"]] == ["qkt d128 g1", "sv d128 g1"]
    for row in data["rows"]:
        st, dcs = row["policies"]["static"], row["policies"]["dcs"]
        for p in (st, dcs):
            assert p["mac"] + p["refresh"] + p["mode"] + p["act_pre"] + p["io"] == p["cycles"]
        assert st["mac"] == dcs["mac"]  # the same MACs
        assert dcs["mode"] < st["mode"]  # DCS groups the register accesses
    assert main(["run", "kernel-breakdown", "--tokens", "0"]) == 2
