"""The DPA dispatcher in the golden model (golden/hub/): programs, host
protocol, faults, timing, the chunk allocator, and QK^T end to end."""

import numpy as np
import pytest

from golden import numerics
from golden.channel import Command
from golden.config import ConfigError, HubConfig, small_config, small_hub_config
from golden.hub import (
    ChunkAllocator,
    DpaFault,
    Hub,
    QktLayout,
    check_program,
    instr,
    qkt_session,
    status_fields,
    unrolled_instructions,
)
from golden.isa import Fault, HostOp, HostStatus, ModiField, Opcode, ReqState

HUB = small_hub_config()
ALL = (1 << HUB.n_channels) - 1


def replay(hub, calls, strict=False):
    h = Hub(hub, strict=strict)
    return h, [h.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data) for c in calls]


def scores(session, responses, r, t_cur):
    words = [numerics.words_to_lanes(responses[i].data)[:HUB.channel.banks]
             for i, rr, t, _ in session.reads if rr == r and t == t_cur]
    return numerics.bf16_to_float(np.concatenate(words)[:t_cur])


def test_qkt_two_requests_interleaved_chunks_across_a_boundary_match_numpy():
    s = qkt_session(HUB, d_head=32, t0={0: 254, 1: 120}, steps=4, seed=3)
    assert s.layout.tokens_per_chunk == 256
    h, rsp = replay(HUB, s.calls, strict=True)
    assert all(r.code == HostStatus.OK for r in rsp)
    grows = [c for c in s.calls if c.op == HostOp.GROW and c.req_id == 0]
    assert len(grows) == 2  # request 0 crosses into its second chunk during the steps
    chunks = h.requests[0].chunks + h.requests[1].chunks
    assert len(set(chunks)) == len(chunks) and chunks != sorted(chunks)  # interleaved, scattered
    for r, t0 in {0: 254, 1: 120}.items():
        for step in range(4):
            t = t0 + step
            ref = numerics.bf16_to_float(s.keys[r][:t]) @ numerics.bf16_to_float(s.queries[r])
            got = scores(s, rsp, r, t)
            # one BF16 rounding of an FP32 dot product of BF16 values
            np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=1e-2)
        assert h.requests[r].t_cur == t0 + 4


def test_step_emissions_are_back_to_back_inside_loops():
    """The decoder adds no bubble between commands of a loop: with channels
    always ready, the k-th command of an iteration follows the previous one
    in the next cycle, and loop-back costs nothing."""
    s = qkt_session(HUB, d_head=32, t0={0: 64}, steps=1, seed=0)
    h, _ = replay(HUB, [c for c in s.calls if c.op != HostOp.STEP])
    res = h.step(start=100)
    pushed = [e.decoded for e in res.emissions]
    # request 0's check (101), then WR-INP x2 from 102, DYN-LOOP, 4 DYN-MODIs, body
    assert pushed[:2] == [102, 103]
    assert pushed[2] == 103 + 1 + 1 + 4
    assert pushed[2:] == list(range(pushed[2], pushed[2] + len(pushed) - 2))
    # the multicast register loads each the cycle after its push
    assert [e.cycle for e in res.emissions] == [p + 1 for p in pushed]


def test_decoder_runs_ahead_through_the_fifo():
    """With a slow channel, the decoder fills the FIFO and then waits for
    room: push k happens right after load k - decode_depth, and the header
    cycles of the next request are hidden (loads stay back to back)."""
    s = qkt_session(HUB, d_head=32, t0={0: 64, 1: 64}, steps=1, seed=0)
    h, _ = replay(HUB, [c for c in s.calls if c.op != HostOp.STEP])
    res = h.step(start=0, accept=lambda k, e: e + 7)
    em, q = res.emissions, HUB.decode_depth
    loads = [e.cycle for e in em]
    assert all(b - a == 7 for a, b in zip(loads, loads[1:], strict=False))
    assert all(em[k].decoded == em[k - q].cycle + 1 for k in range(q + 8, len(em))
               if em[k].decoded > em[k - 1].decoded + 1)


def test_emission_waits_for_the_multicast_register():
    s = qkt_session(HUB, d_head=32, t0={0: 16}, steps=1, seed=0)
    h, _ = replay(HUB, [c for c in s.calls if c.op != HostOp.STEP])
    res = h.step(start=0, accept=lambda k, e: e + 5)
    cycles = [e.cycle for e in res.emissions]
    assert all(b - a == 5 for a, b in zip(cycles[2:], cycles[3:], strict=False))  # inside the loop
    assert cycles[1] - cycles[0] == 5


def test_t_cur_increments_every_step_without_host_action():
    s = qkt_session(HUB, d_head=32, t0={0: 10, 1: 20}, steps=3, seed=0)
    h, _ = replay(HUB, s.calls)
    assert [h.requests[r].t_cur for r in (0, 1)] == [13, 23]


def test_step_skips_the_requests_in_its_mask():
    """STEP's data names requests to pass over: they issue nothing, keep
    their T_cur and cost the decoder one cycle each, as inactive ones do;
    a bit beyond the configuration buffer is BAD_ARG."""
    h, _ = two_requests()
    both = h.step()
    h1, _ = two_requests()
    rsp = h1.host(HostOp.STEP, data=0b01)
    assert rsp.code == HostStatus.OK and rsp.data == 0b10
    one = h1.last_step
    assert [r.t_cur for r in h1.requests[:2]] == [40, 41]
    assert one.ran == [1] and len(one.emissions) == len(both.emissions) // 2
    assert all(e.request == 1 for e in one.emissions)
    assert h1.host(HostOp.STEP, data=1 << HUB.requests).code == HostStatus.BAD_ARG
    assert [r.t_cur for r in h1.requests[:2]] == [40, 41]


# ---- faults ------------------------------------------------------------------


def two_requests(program=None, t_cur=(40, 40), chunks=((0,), (1,))):
    h = Hub(HUB)
    layout = QktLayout(HUB, 32)
    h.load_program(program or layout.program(), layout.tokens_per_chunk)
    for r, (t, cs) in enumerate(zip(t_cur, chunks, strict=True)):
        assert h.host(HostOp.ASSIGN, r, t, 64 * r).code == HostStatus.OK
        for c in cs:
            h.host(HostOp.GROW, r, c)
    return h, layout


def status(h, r):
    return status_fields(h.host(HostOp.STATUS, r).data)


def test_fault_t_cur_beyond_mapped_chunks_stops_only_that_request():
    tpc = QktLayout(HUB, 32).tokens_per_chunk
    h, _ = two_requests(t_cur=(tpc + 1, 5))
    res = h.step()
    assert res.faulted == [0] and res.ran == [1]
    assert all(e.request == 1 for e in res.emissions)  # nothing sent for request 0
    st = status(h, 0)
    assert (st["req_state"], st["fault"]) == (ReqState.FAULTED, Fault.T_RANGE)
    assert status(h, 1)["t_cur"] == 6 and st["t_cur"] == 257
    # grow, clear: it runs again
    h.host(HostOp.GROW, 0, 5)
    assert h.host(HostOp.CLEAR, 0).code == HostStatus.OK
    assert h.step().ran == [0, 1]


def test_fault_unmapped_chunk_drains_dirty_obuf_and_others_continue():
    # the MAC's virtual row is in chunk 1, which request 0 does not have
    layout = QktLayout(HUB, 32)
    bad = layout.program()
    bad[-2] = instr(Opcode.MAC, ch_mask=ALL, op_size=2, row=2, col=0, gbuf_idx=0, out_idx=1)
    h, _ = two_requests(program=bad, t_cur=(20, 20))
    res = h.step()
    assert res.faulted == [0, 1]  # same program: both fault at the same command
    assert status(h, 0)["fault"] == Fault.UNMAPPED
    # request 0: WR-INP x2, MAC x2 on OBuf 0, RD-OUT 0, then the fault on MAC (row 2):
    # nothing for it, and OBuf 0 is clean, so no drain
    ops0 = [e.command.opcode for e in res.emissions if e.request == 0]
    assert ops0 == [Opcode.WR_INP] * 2 + [Opcode.MAC] * 2 + [Opcode.RD_OUT]
    assert not any(e.discard for e in res.emissions)
    with pytest.raises(DpaFault) as info:
        h.strict = True
        h.host(HostOp.CLEAR, 0)
        h.step()
    assert info.value.code == Fault.UNMAPPED and info.value.request == 0


def test_fault_mid_accumulation_drains_the_dirty_entry_with_discarded_beats():
    layout = QktLayout(HUB, 32)
    prog = layout.program()
    # MAC of slot 0 reads a row in chunk 0, slot 1's MAC a row in chunk 1 (unmapped),
    # so OBuf 0 is read out, then the slot-1 MAC faults on its first command; make the
    # slot-0 RD-OUT read OBuf 1 so that OBuf 0 stays dirty
    prog[-3] = instr(Opcode.RD_OUT, ch_mask=ALL, op_size=1, gpr_addr=16, out_idx=1)
    prog[-2] = instr(Opcode.MAC, ch_mask=ALL, op_size=2, row=2, col=0, gbuf_idx=0, out_idx=1)
    h, _ = two_requests(program=prog, t_cur=(20, 0))
    before, writes = h.gpr.copy(), h.gpr_writes
    res = h.step()
    drains = [e for e in res.emissions if e.discard]
    assert [(e.command.opcode, e.command.out_idx) for e in drains] == [(Opcode.RD_OUT, 0)]
    assert h.dirty == [False] * HUB.channel.obuf_entries
    # the request's one RD-OUT (OBuf 1, before the fault) wrote; the drain wrote nothing
    changed = {int(i) for i in np.nonzero((h.gpr != before).any(axis=1))[0]}
    assert changed <= {16, 17}
    # the GPR's write count: a word per channel of each kept RD-OUT, none for the drain
    kept = [e for e in res.emissions if e.command.opcode == Opcode.RD_OUT and not e.discard]
    assert h.gpr_writes - writes == sum(bin(e.ch_mask).count("1") for e in kept)
    assert res.ran == [1]  # T_cur 0: the loop body never runs


@pytest.mark.parametrize("program, code, index", [
    ([instr(Opcode.DYN_LOOP, body_len=3, t_div=8),
      instr(Opcode.MAC, ch_mask=ALL, op_size=1)], Fault.BAD_LOOP, 2),  # loop without end
    ([instr(Opcode.DYN_LOOP, body_len=1, t_div=8),
      instr(Opcode.DYN_LOOP, body_len=1, t_div=8)], Fault.BAD_LOOP, 1),  # nested
    ([instr(Opcode.DYN_LOOP, body_len=1, t_div=0),
      instr(Opcode.MAC, ch_mask=ALL, op_size=1)], Fault.BAD_LOOP, 0),
    ([instr(Opcode.DYN_MODI, target=0, field_sel=0, stride=1)], Fault.BAD_LOOP, 0),  # stray
    ([instr(Opcode.DYN_LOOP, body_len=2, t_div=8),
      instr(Opcode.DYN_MODI, target=1, field_sel=6, stride=1),  # unknown field
      instr(Opcode.MAC, ch_mask=ALL, op_size=1)], Fault.BAD_FIELD, 1),
    ([instr(Opcode.DYN_LOOP, body_len=2, t_div=8),
      instr(Opcode.DYN_MODI, target=1, field_sel=ModiField.GBUF_IDX, stride=1),
      instr(Opcode.RD_OUT, ch_mask=ALL, op_size=1)], Fault.BAD_FIELD, 2),  # field not in RD-OUT
    ([instr(Opcode.DYN_LOOP, body_len=2, t_div=8),
      instr(Opcode.DYN_MODI, target=5, field_sel=0, stride=1),
      instr(Opcode.MAC, ch_mask=ALL, op_size=1)], Fault.BAD_FIELD, 1),  # target outside
    ([instr(Opcode.MAC, ch_mask=0b100, op_size=1)], Fault.BAD_FIELD, 0),  # no channel 2
    ([instr(Opcode.MAC, ch_mask=ALL, op_size=0)], Fault.BAD_FIELD, 0),
    ([instr(Opcode.WR_INP, ch_mask=ALL, op_size=1), 0], Fault.BAD_OPCODE, 1),
    ([instr(Opcode.ALU_ADD, ch_mask=ALL)], Fault.BAD_OPCODE, 0),  # not implemented
    ([Opcode.PRE], Fault.BAD_OPCODE, 0),  # controller-internal
])
def test_invalid_programs_fault_at_commit_and_every_request_at_step(program, code, index):
    check = check_program(program, HUB)
    assert (check.fault, check.index) == (code, index), check.message
    h = Hub(HUB)
    rsp = h.load_program(program, 64)
    assert rsp.code == HostStatus.FAULT and rsp.data == code | index << 8
    for r in (0, 2):
        h.host(HostOp.ASSIGN, r, 10, 0)
        h.host(HostOp.GROW, r, r)
    res = h.step()
    assert res.emissions == [] and res.faulted == [0, 2]
    assert status(h, 2)["fault"] == code


def test_fault_table_full_on_grow():
    h, _ = two_requests()
    for c in range(2, 2 + HUB.chunks_per_request - 1):
        assert h.host(HostOp.GROW, 0, c).code == HostStatus.OK
    rsp = h.host(HostOp.GROW, 0, 9)
    assert (rsp.code, rsp.data) == (HostStatus.FAULT, Fault.TABLE_FULL)
    assert status(h, 0)["fault"] == Fault.TABLE_FULL
    assert h.step().ran == [1]
    h.strict = True
    with pytest.raises(DpaFault) as info:
        h.host(HostOp.GROW, 0, 10)
    assert info.value.code == Fault.TABLE_FULL


def test_fault_cmd_range_gpr_overflow():
    h, layout = two_requests()
    h.requests[1].gpr_base = HUB.gpr_entries - 4  # scores run past the GPR
    res = h.step()
    assert res.faulted == [1] and status(h, 1)["fault"] == Fault.CMD_RANGE


def test_host_errors():
    h = Hub(HUB)
    assert h.host(0).code == HostStatus.BAD_OP
    assert h.host(15).code == HostStatus.BAD_OP
    assert h.host(HostOp.ASSIGN, HUB.requests, 1, 0).code == HostStatus.BAD_ARG
    assert h.host(HostOp.GROW, 0, 1).code == HostStatus.BAD_ARG  # request is FREE
    h.host(HostOp.ASSIGN, 0, 1, 0)
    assert h.host(HostOp.ASSIGN, 0, 1, 0).code == HostStatus.BAD_ARG  # not FREE
    assert h.host(HostOp.GROW, 0, HUB.physical_chunks).code == HostStatus.BAD_ARG
    assert h.host(HostOp.GPR_READ, arg_a=HUB.gpr_entries).code == HostStatus.BAD_ARG
    assert h.host(HostOp.PROG_WRITE, arg_a=HUB.instr_depth).code == HostStatus.BAD_ARG
    bad_raw = Command(Opcode.WR, bank=HUB.channel.banks).pack()
    assert h.host(HostOp.RAW, arg_a=1, data=bad_raw).code == HostStatus.BAD_ARG
    assert h.host(HostOp.RAW, arg_a=4, data=Command(Opcode.WR).pack()).code == HostStatus.BAD_ARG
    h.host(HostOp.RELEASE, 0)
    assert status(h, 0)["req_state"] == ReqState.FREE


# ---- configuration, allocator, sizes ------------------------------------------


def test_hub_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="chunk_bytes"):
        HubConfig(channel=small_config(), n_channels=2, chunk_bytes=1000)
    with pytest.raises(ConfigError, match="n_channels"):
        HubConfig(channel=small_config(), n_channels=0)
    with pytest.raises(ConfigError, match="cols"):
        HubConfig(channel=small_config().replace(cols=24), n_channels=2, chunk_bytes=6144)


def test_allocator_lazy_vs_static():
    lazy = ChunkAllocator(16, tokens_per_chunk=100)
    static = ChunkAllocator(16, tokens_per_chunk=100, lazy=False, max_tokens=800)
    assert len(lazy.assign(0, 150)) == 2 and len(static.assign(0, 150)) == 8
    assert lazy.grow(0, 200) == [] and len(lazy.grow(0, 201)) == 1
    lazy.assign(1, 1)
    lazy.grow(0, 301)
    assert lazy.owned[0] == [0, 1, 2, 4]  # interleaved with request 1's chunk 3
    lazy.release(1)
    assert lazy.used == 4 and list(lazy.free)[-1] == 3
    with pytest.raises(Exception, match="needs"):
        static.assign(1, 10) and static.assign(2, 10)


def test_program_size_is_constant_while_the_unrolled_stream_grows():
    layout = QktLayout(HUB, 32)
    prog = layout.program()
    small, big = unrolled_instructions(prog, 1000), unrolled_instructions(prog, 100000)
    per_iter = 2 * layout.unroll
    assert small == 1 + per_iter * -(-1000 // (layout.unroll * layout.tokens_per_slot))
    assert big > 90 * small


# ---- studies -------------------------------------------------------------------


def test_dpa_program_size_study():
    from golden.system.studies import dpa_program_size

    r = dpa_program_size(contexts=(1024, 1 << 20))
    small, big = r["rows"]
    assert small["dpa_program_bytes"] == big["dpa_program_bytes"] == 16 * r["program_words"]
    assert big["static_bytes"] == 1024 * small["static_bytes"] - 1023 * 16  # one WR-INP
    assert r["dispatcher_storage"]["total_bytes"] < r["dispatcher_storage"][
        "reference_limit_bytes"]


def test_dpa_capacity_study_admits_more_and_wastes_less():
    from golden.system.reference import DATASETS
    from golden.system.studies import dpa_capacity

    r = dpa_capacity(requests=512, seed=1)
    assert len(r["rows"]) == 4 * 2 * 2  # models x datasets x systems
    for row in r["rows"]:
        s, d = row["static"], row["dpa"]
        assert d["batch"] > s["batch"] >= 1
        assert d["utilization_of_kv_capacity"] > s["utilization_of_kv_capacity"]
        assert d["allocated_gb"] <= row["kv_capacity_gb"] and s["allocated_gb"] <= row[
            "kv_capacity_gb"]
        ds = DATASETS[row["dataset"]]
        assert ds.min <= row["drawn_lengths"]["min"] <= row["drawn_lengths"]["max"] <= ds.max
        assert abs(row["drawn_lengths"]["mean"] - ds.mean) < 0.1 * ds.std * 3


def test_dpa_capacity_finer_chunks_waste_less():
    from golden.system.studies import dpa_capacity

    coarse = dpa_capacity(requests=256, chunk_bytes=1 << 22)["rows"]
    fine = dpa_capacity(requests=256, chunk_bytes=1 << 16)["rows"]
    for c, f in zip(coarse, fine, strict=True):
        assert f["dpa"]["utilization_of_allocated"] > c["dpa"]["utilization_of_allocated"]
        assert f["dpa"]["batch"] >= c["dpa"]["batch"]
        assert f["static"]["batch"] == c["static"]["batch"]  # windows are whole chunks


def test_dataset_draws_match_the_published_moments():
    from golden.system.reference import DATASETS

    for d in DATASETS.values():
        x = d.sample(200_000, seed=0)
        assert abs(x.mean() - d.mean) < 0.01 * d.mean
        assert abs(x.std() - d.std) < 0.02 * d.std
        assert x.min() >= d.min and x.max() <= d.max


def test_api_misuse_names_the_argument():
    """The allocator and the VA2PA lookup refuse what no caller should pass:
    negative sizes, an unknown request (no bare KeyError), a request id
    outside the table (a negative one would alias a real entry)."""
    with pytest.raises(ValueError, match="tokens_per_chunk must be an integer >= 1"):
        ChunkAllocator(4, 0)
    alloc = ChunkAllocator(4, 16)
    with pytest.raises(ValueError, match="tokens must be an integer >= 0, not -1"):
        alloc.assign(0, -1)
    with pytest.raises(ValueError, match="request 3 holds no chunks"):
        alloc.grow(3, 10)
    with pytest.raises(ValueError, match="request 3 holds no chunks"):
        alloc.release(3)
    assert alloc.assign(0, np.int64(20)) == [0, 1]
    hub = Hub(small_hub_config())
    for bad in (-1, hub.hub.requests, 1.0):
        with pytest.raises(ValueError, match="request id must be an integer in"):
            hub.translate(bad, 0)


def test_gpr_accesses_and_the_hub_runs_energy():
    """The HUB counts its GPR's word reads and writes: a host GPR-WRITE or
    GPR-READ is one; a WR-INP or WR emission reads one word, multicast to
    every channel of its mask; a RD-OUT or RD writes one word per channel
    of its mask, a drained (discarded) beat none. The run's energy is its
    channels' energies and those accesses (golden.energy.hub_energy)."""
    from golden import energy
    from golden.channel import ChannelModel

    s = qkt_session(HUB, d_head=32, t0={0: 30, 1: 12}, steps=2, seed=1)
    h = Hub(HUB, strict=True)
    emitted = []  # every emission: the steps' and the host's RAW commands
    send = h.send
    h.send = lambda ems: (emitted.extend(ems), send(ems))
    host_w = host_r = 0
    for c in s.calls:
        h.host(c.op, c.req_id, c.arg_a, c.arg_b, c.data)
        host_w += c.op == HostOp.GPR_WRITE
        host_r += c.op == HostOp.GPR_READ
    writes = [e for e in emitted if e.command.opcode in (Opcode.WR_INP, Opcode.WR)]
    reads = [e for e in emitted if e.command.opcode in (Opcode.RD_OUT, Opcode.RD)]
    assert writes and reads and host_w and host_r
    assert h.gpr_reads == len(writes) + host_r
    assert h.gpr_writes == sum(bin(e.ch_mask).count("1") for e in reads) + host_w
    # the energy: each channel's trace priced, plus the GPR's accesses in io
    params = energy.energy_params(HUB.channel.profile)
    chans = []
    for stream in h.streams:
        cmds = [c for c, _ in stream]
        r = ChannelModel(HUB.channel).run(cmds, [b for _, b in stream if b is not None])
        chans.append(energy.trace_energy(HUB.channel, params, 0.5, cmds, r.trace, r.cycles))
    e = energy.hub_energy(params, chans, h.gpr_reads, h.gpr_writes)
    gpr = h.gpr_reads * params.gpr_rd_pj + h.gpr_writes * params.gpr_wr_pj
    assert e["gpr_pj"] == pytest.approx(gpr) and gpr > 0
    assert e["breakdown"]["io"] == pytest.approx(sum(c["breakdown"]["io"] for c in chans) + gpr)
    assert e["total_pj"] == pytest.approx(sum(c["total_pj"] for c in chans) + gpr)
    assert e["counts"]["gpr_reads"] == h.gpr_reads
    assert e["counts"]["rd_outs"] == sum(bin(r.ch_mask).count("1") for r in reads
                                         if r.command.opcode == Opcode.RD_OUT)

