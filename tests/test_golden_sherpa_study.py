"""PIM-SHERPA prefill timing and capacity (golden/system/sherpa_study.py)."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden.system.reference import SHERPA_HOST, SHERPA_MODELS, SherpaHost
from golden.system.sherpa_study import (
    METHODS,
    Stage,
    capacity,
    copy_time,
    gemm_time,
    largest_matrix_bytes,
    latency_table,
    pipeline,
    read_time,
    sherpa_study,
    ttft,
)

# one byte streams in one second, one FLOP per byte, copies of Table 2's
# three transactions: times are integers; the copier and the GEMM do not
# slow each other (Table 2's overlap) unless shared
UNIT = SherpaHost(gflops=1e-9, bandwidth_gbs=1e-9, copy="table", bandwidth="separate")
SHARED = replace(UNIT, bandwidth="shared")


def test_gemm_time_is_memory_bound_then_grows_with_the_input():
    t = read_time(1 << 20)
    fpb = SHERPA_HOST.flop_per_byte
    assert 4.6 < fpb < 4.8  # 321 GFLOPS / 68.264 GB/s
    assert gemm_time(1 << 20, 1) == gemm_time(1 << 20, 4) == t
    assert gemm_time(1 << 20, 64) == pytest.approx(64 / fpb * t)


def test_copy_and_flop_models():
    """A swizzled copy from the non-cacheable region: measured, a
    cacheable-to-cacheable copy (read and write, 2 t) at half its speed, 4 t
    (a quarter of the bandwidth); Table 2's three transactions, 3 t. FLOP/B:
    the host's 4.70, or Table 2's 4."""
    t = read_time(1 << 20)
    assert SHERPA_HOST.copy == "measured" and SHERPA_HOST.flop == "host"
    assert copy_time(1 << 20) == pytest.approx(4 * t)
    assert copy_time(1 << 20, SherpaHost(copy="table")) == pytest.approx(3 * t)
    assert copy_time(1 << 20, SherpaHost(nc_copy_slowdown=1.5)) == pytest.approx(3 * t)
    table = SherpaHost(flop="table")
    assert table.flop_per_byte == 4
    assert gemm_time(1 << 20, 8, table) == pytest.approx(2 * t)
    with pytest.raises(ValueError, match="copy model must be one of measured, table"):
        SherpaHost(copy="fast")


def test_latency_table_as_reference_states_it():
    """REFERENCE.md's latency model with FLOP/B 4: GEMM t up to 4 tokens,
    SL / 4 t beyond; rearrangement 3 t; serial the sum, overlapped the max."""
    rows = {r["seq_len"]: r for r in latency_table(host=SherpaHost(flop="table"))}
    assert (rows[1]["gemm_t"], rows[4]["gemm_t"], rows[8]["gemm_t"], rows[64]["gemm_t"]) == (
        1, 1, 2, 16)
    for r in rows.values():
        assert r["rearrange_t"] == 3
        assert r["serial_t"] == r["gemm_t"] + 3 and r["overlapped_t"] == max(r["gemm_t"], 3)
    assert rows[12]["overlapped_over_serial"] == 0.5  # the GEMM as long as the copy
    host = {r["seq_len"]: r for r in latency_table()}  # the host's 4.70
    assert host[8]["gemm_t"] == pytest.approx(8 / SHERPA_HOST.flop_per_byte, abs=1e-4)


def test_double_buffering_by_hand():
    # copy 3 s per byte; X: copy 0-6, GEMM 6-7; Y: copy 6-9 (second buffer),
    # GEMM 9-14; Z waits for X's buffer (free at 7): copy 9-15, GEMM 15-16
    stages = [Stage("X", 2, 1.0), Stage("Y", 1, 5.0), Stage("Z", 2, 1.0)]
    assert pipeline(stages, UNIT, 2, 2)["ttft_s"] == 16
    # one buffer (OWR): copy and GEMM strictly alternate
    assert pipeline(stages, UNIT, 1, 2)["ttft_s"] == (6 + 1) + (3 + 5) + (6 + 1)


def test_shared_bandwidth_by_hand():
    """X (2 B, memory-bound: its GEMM reads at the full bandwidth) and Y
    (1 B, compute-bound: a quarter). Separate: copy X 0-6, GEMM X 6-8,
    copy Y 6-9, GEMM Y 9-13. Shared: a copy (Table 2's, all of the
    bandwidth) and GEMM X together ask for twice it: both at half speed
    from 6, GEMM X's 2 s end at 10, copy Y has 1 s left, 10-11; GEMM Y
    11-15. A measured copy (4 t) takes three quarters: together 1.75x."""
    stages = [Stage("X", 2, 2.0), Stage("Y", 1, 4.0)]
    assert pipeline(stages, UNIT, 2, 2)["ttft_s"] == 13
    r = pipeline(stages, SHARED, 2, 2, trace=True)
    assert r["ttft_s"] == 15 and r["copy_s"] == 6 + 5 and r["compute_s"] == 4 + 4
    assert [(x["gemm_start"], x["gemm_end"]) for x in r["stages"]] == [(6, 10), (11, 15)]
    measured = replace(SHARED, copy="measured")  # a copy 4 s a byte, 3/4 of the bandwidth
    # copy X 0-8; GEMM X and copy Y from 8 at 1/1.75: GEMM X ends at 11.5,
    # copy Y has 4 - 2 = 2 s left, 11.5-13.5; GEMM Y 13.5-17.5
    assert pipeline(stages, measured, 2, 2)["ttft_s"] == pytest.approx(17.5)


def test_ring_copies_ahead_where_whole_buffers_wait():
    # A: copy 0-3, GEMM 3-13. Whole buffers: B copies 3-9 in the second
    # buffer; C waits for A's buffer until 13, copies 13-19, GEMM 19-20.
    # Ring of 4 bytes in 1-byte pieces: C's first byte copies 9-12, the
    # second waits for A's byte (13) and copies 13-16: GEMM C 16-17.
    stages = [Stage("A", 1, 10.0), Stage("B", 2, 1.0), Stage("C", 2, 1.0)]
    assert pipeline(stages, UNIT, 2, 2)["ttft_s"] == 20
    ring = pipeline(stages, UNIT, 2, 2, split_bytes=1)
    assert ring["ttft_s"] == 17 and ring["copy_wait_s"] == 1 and ring["copy_s"] == 15


def test_balanced_ddb_copies_ffn_weights_during_the_attention_gemms():
    from golden.system.sherpa_study import SPLIT_BYTES, prefill_stages

    model = SHERPA_MODELS["Llama3.2-1B"]
    stages = prefill_stages(model, 16)
    big = largest_matrix_bytes(model)
    whole = {s["stage"]: s for s in pipeline(stages, SHERPA_HOST, 2, big, trace=True)["stages"]}
    ring = {s["stage"]: s for s in pipeline(stages, SHERPA_HOST, 2, big, SPLIT_BYTES,
                                            trace=True)["stages"]}
    # whole buffers: the gate projection's copy waits for a buffer, which
    # frees only when the V GEMM ends; the ring starts it during Q/K/V
    assert whole["L1.gate"]["copy_start"] >= whole["L1.v"]["gemm_end"]
    assert ring["L1.gate"]["copy_start"] < ring["L1.v"]["gemm_end"]
    assert ring["L1.down"]["gemm_end"] < whole["L1.down"]["gemm_end"]


def test_a_matrix_larger_than_the_buffer_is_rejected():
    with pytest.raises(ValueError, match="does not fit"):
        pipeline([Stage("big", 5, 1.0)], UNIT, 2, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 20)), min_size=1, max_size=12),
       st.integers(1, 3))
def test_schedules_are_ordered_and_bounded(spec, split):
    stages = [Stage(f"s{i}", b, float(c)) for i, (b, c) in enumerate(spec)]
    big = max(max(b for b, _ in spec), 1)
    owr = pipeline(stages, UNIT, 1, big)["ttft_s"]
    ddb = pipeline(stages, UNIT, 2, big)["ttft_s"]
    ring = pipeline(stages, UNIT, 2, big, split_bytes=split)["ttft_s"]
    compute = sum(s.compute for s in stages)
    copies = sum(3 * s.nbytes for s in stages)
    # one buffer: copy then GEMM, except that a weightless stage (attention)
    # overlaps the next copy
    assert owr <= compute + copies
    if all(s.nbytes for s in stages):
        assert owr == compute + copies
    assert max(compute, copies) <= ring <= ddb <= owr
    # sharing the bandwidth only slows, never past doing one thing at a time
    for args, alone in (((1, big), owr), ((2, big), ddb), ((2, big, split), ring)):
        assert alone - 1e-9 <= pipeline(stages, SHARED, *args)["ttft_s"] <= compute + copies + 1e-9


def test_llama_ttft_methods():
    model = SHERPA_MODELS["Llama3.2-1B"]
    sep = replace(SHERPA_HOST, bandwidth="separate")
    at = {m: ttft(model, 1, m, sep)["ttft_s"] for m in METHODS}
    assert at["remap"] == at["duplication"]
    # one token: GEMMs memory bound (t each), measured copies 4 t: OWR is 5x,
    # with its copy threads created and joined at each layer
    threads = model.layers * sep.owr_thread_s
    assert (at["owr"] - threads) / at["duplication"] == pytest.approx(5, rel=1e-3)
    assert 4 <= at["ddb-balanced"] / at["duplication"] < 4.2
    assert at["ddb-balanced"] <= at["ddb"] * (1 + 1e-12) < 4.2 * at["duplication"]
    # sharing the bandwidth (the default): a GEMM and a copy together ask
    # for 1.75 of it. The copier is the bottleneck: per matrix its 4 t, of
    # which the t beside the GEMM stretches to 1.75 t: 4.75x
    shared = {m: ttft(model, 1, m)["ttft_s"] for m in METHODS}
    assert shared["owr"] == pytest.approx(at["owr"]) and shared["remap"] == at["remap"]
    assert shared["ddb-balanced"] / at["duplication"] == pytest.approx(4.75, rel=0.01)
    table = SherpaHost(copy="table")  # Table 2's copies, 3 t: OWR 4x
    assert (ttft(model, 1, "owr", table)["ttft_s"] - threads) / at["duplication"] == \
        pytest.approx(4, rel=1e-3)
    free = replace(sep, owr_thread_s=0.0)
    assert ttft(model, 1, "owr", free)["ttft_s"] == pytest.approx(at["owr"] - threads)
    # long inputs: DDB hides the copies, OWR keeps paying them
    long = {m: ttft(model, 2048, m)["ttft_s"] for m in METHODS}
    assert long["ddb"] / long["duplication"] < 1.001 < long["owr"] / long["duplication"]


def test_capacity_accounting():
    rows = {r["model"]: r for r in (capacity(m) for m in SHERPA_MODELS.values())}
    m3 = SHERPA_MODELS["Llama3.2-3B"]
    r3 = rows["Llama3.2-3B"]
    b = {k: v["bytes"] for k, v in r3["methods"].items()}
    # 8 KV heads x 128 = 1,024 K/V rows (no padding); the LM head 128,256 -> 128,512
    assert m3.kv_dim == 8 * 128
    assert r3["padding_bytes"] == 256 * 3072 * 2
    fc = sum(2 * o * i for _, o, i in m3.matrices()) * m3.layers
    head = 2 * m3.vocab * m3.hidden
    # duplication: the whole model host-friendly (the tied embedding and LM head
    # included) beside the PIM-aware FC weights and LM head
    assert b["duplication"] - b["remap"] == fc + head == r3["host_only_bytes"]
    big = largest_matrix_bytes(m3)
    assert b["ddb"] - b["owr"] == b["owr"] - b["remap"] == big == 2 * 3072 * 8192
    for r in rows.values():
        ratio = {k: v["vs_host_only"] for k, v in r["methods"].items()}
        assert 1 <= ratio["remap"] < ratio["owr"] < ratio["ddb"] < 1.05
        assert 1.9 < ratio["duplication"] < 2.1
        # the memory PIM-SHERPA saves against duplication: about half
        assert 0.47 < 1 - r["methods"]["owr"]["bytes"] / r["methods"]["duplication"]["bytes"] < 0.5
    # untied embeddings (Qwen3) are an extra table; tied ones are not
    q = SHERPA_MODELS["Qwen3-8B"]
    assert rows["Qwen3-8B"]["host_only_bytes"] == (
        sum(2 * o * i for _, o, i in q.matrices()) * q.layers + 2 * 2 * q.vocab * q.hidden)


def test_study_shape():
    data = sherpa_study(seq_lens=(1, 16, 256))
    assert [r["model"] for r in data["latency"]] == ["Llama3.2-1B", "Llama3.2-3B"]
    assert len(data["capacity"]) == 4
    for r in data["latency"]:
        assert r["ddb_hides_copies_from"] in (16, 256)
        assert [p["seq_len"] for p in r["points"]] == [1, 16, 256]


def test_pim_gemv_cycles_fast_against_exact():
    """The decode GEMV on the LPDDR5X-PIM channel: fast mode (three tiles
    cycle-exact, the rest at the last tile's cycles) within 1 % of the
    cycle-exact run of the whole stream; a tile costs at least its MACs at
    tCCD_L and its row activations (the column-major layout opens a row per
    input block once a block spans a DRAM row)."""
    from golden.config import load_profile
    from golden.system.sherpa_study import pim_gemv_cycles, pim_layout

    for shape in ((2048, 2048), (8192, 2048)):
        fast, exact = pim_gemv_cycles(*shape), pim_gemv_cycles(*shape, exact=True)
        assert abs(fast - exact) <= 0.01 * exact, (shape, fast, exact)
    cfg, lay = pim_layout(8192, 2048)
    tiles = lay.rows_per_bank // lay.out_regs
    assert lay.rows_per_bank == 8192 // 64 and lay.blocks == 128
    per_tile = pim_gemv_cycles(8192, 2048, exact=True) / tiles
    assert per_tile >= lay.blocks * (lay.out_regs * cfg.timing.t_ccd_l)
    assert per_tile >= lay.blocks * cfg.timing.t_rc  # a row per block
    assert load_profile("lpddr5x-pim").gbuf_entries == 8  # REFERENCE: 8 input registers


def test_pim_device_is_a_profile(tmp_path):
    """The decode's device is any profile (``--pim-profile``): a copy of
    lpddr5x-pim with slower activations (tRC and tRAS doubled) makes the
    row-bound GEMV slower, and the study reports the profile it ran."""
    from importlib import resources

    from golden.system.sherpa_study import PIM_PROFILE, decode_token, pim_gemv_cycles

    text = resources.files("golden.profiles").joinpath("lpddr5x_pim.toml").read_text()
    slow = text.replace("t_rc = 66", "t_rc = 132").replace("t_ras = 46", "t_ras = 92")
    assert slow != text
    path = tmp_path / "slow.toml"
    path.write_text(slow)
    assert pim_gemv_cycles(2048, 2048, str(path)) > pim_gemv_cycles(2048, 2048, PIM_PROFILE)
    m = SHERPA_MODELS["Llama3.2-1B"]
    assert decode_token(m, 64, profile=str(path))["fc_s"] > decode_token(m, 64)["fc_s"]


def test_decode_token_and_end_to_end_by_hand():
    """A small model: the host's decode token reads every weight and the
    KV cache at the DRAM's bandwidth; the PIM's is its GEMVs' cycles at the
    profile's clock plus the same attention. End to end: the prefill and
    every token at its own context, against the system without PIM."""
    from golden.config import load_profile_data
    from golden.system.reference import SherpaModel
    from golden.system.sherpa_study import decode_token, end_to_end, pim_gemv_cycles

    m = SherpaModel("tiny", 128, 2, 256, 128, 64, 512, True)
    host = decode_token(m, 100, pim=False)
    weights = 2 * m.layers * sum(o * i for _, o, i in m.matrices()) + 2 * m.vocab * m.hidden
    kv = 2 * 2 * 100 * m.kv_dim * m.layers
    assert host["token_s"] == pytest.approx(read_time(weights + kv))
    pim = decode_token(m, 100)
    tck = load_profile_data("lpddr5x-pim")["t_ck_ns"] * 1e-9
    cycles = m.layers * sum(pim_gemv_cycles(o, i) for _, o, i in m.matrices()) + \
        pim_gemv_cycles(m.vocab, m.hidden)
    assert pim["token_s"] == pytest.approx(tck * cycles + read_time(kv))
    e = end_to_end(m, 100, 3)
    want_decode = sum(decode_token(m, c)["token_s"] for c in (100, 101, 102))
    assert e["owr"]["decode_s"] == pytest.approx(want_decode)
    assert e["owr"]["prefill_s"] == pytest.approx(ttft(m, 100, "owr")["ttft_s"])
    base = ttft(m, 100, "duplication")["ttft_s"] + sum(
        decode_token(m, c, pim=False)["token_s"] for c in (100, 101, 102))
    assert e["no_pim"]["total_s"] == pytest.approx(base)
    assert e["owr"]["speedup"] == pytest.approx(base / (e["owr"]["prefill_s"] + want_decode))
    assert e["nc-gemm"]["decode_s"] == e["owr"]["decode_s"]


def test_nc_gemm_by_hand():
    """A GEMM from the non-cacheable copy: its weights read once per 8
    prompt tokens at half the DRAM's speed, or its FLOPs, whichever is
    longer; no copy, no buffer."""
    from golden.system.sherpa_study import nc_gemm_time

    nbytes = 1 << 20
    t = read_time(nbytes)
    assert nc_gemm_time(nbytes, 1) == pytest.approx(2 * t)  # memory bound
    assert nc_gemm_time(nbytes, 64) == pytest.approx(max(64 * nbytes / 321e9, 8 * 2 * t))
    assert nc_gemm_time(nbytes, 64, tokens=64) == pytest.approx(
        max(64 * nbytes / 321e9, 2 * t))


def test_memory_attributes_rows():
    """The study's memory-attribute rows on the PIM device: non-cacheable
    triggers all work; cacheable, the next pass loses every MAC behind a
    cache that holds the trigger lines, the pass after the host's GEMM
    loses those the cache kept (part of them behind the smaller cache),
    and a flush restores them."""
    from golden.system.sherpa_study import memory_attributes

    rows = memory_attributes()
    nc = rows[0]
    assert nc["region"] == "non-cacheable" and nc["lost"] == 0 and nc["correct"]
    by = {(r["cache_bytes"], r["pass"]): r for r in rows[1:]}
    big, small = 8 << 20, 256 << 10
    for size in (big, small):
        assert by[size, "first"]["lost"] == 0 and by[size, "first"]["correct"]
        assert by[size, "second"]["lost"] == nc["mac_triggers"]
        assert not by[size, "second"]["correct"]
        assert by[size, "after a flush"]["correct"] and by[size, "after a flush"]["flushed_lines"]
    assert by[big, "after the prefill GEMM"]["lost"] == nc["mac_triggers"]
    assert 0 < by[small, "after the prefill GEMM"]["lost"] < nc["mac_triggers"]


def test_paper_ddb_schedule():
    """The paper's DDB (the issue's summary of it): H x 4H buffers; the gate
    GEMM in quarters; a layer's FFN copies wait for the previous layer's end;
    no copy starts beside a memory-bound GEMM, so at one token nothing
    overlaps (copy 4 t + GEMM t a matrix: 5x duplication, OWR's without its
    threads), while at 64 tokens the copies hide and the next layer's
    Q/K/V/O are copied during the down projection."""
    from golden.system.sherpa_study import paper_buffer_bytes, paper_ddb_stages, prefill_stages

    model = SHERPA_MODELS["Llama3.2-1B"]
    stages, after = paper_ddb_stages(model, 64)
    plain = prefill_stages(model, 64)
    assert sum(s.nbytes for s in stages) == sum(s.nbytes for s in plain)
    assert sum(s.compute for s in stages) == pytest.approx(sum(s.compute for s in plain))
    names = [s.name for s in stages]
    assert names[:10] == ["L0.q", "L0.k", "L0.v", "L0.attn", "L0.o", "L0.gate.q0",
                          "L0.gate.q1", "L0.gate.q2", "L0.gate.q3", "L0.up"]
    down0 = names.index("L0.down")
    assert all(after[names.index(f"L1.{n}")] == down0 for n in ("gate.q0", "up", "down"))
    assert after[names.index("L1.q")] == -1  # preloaded during L0's down GEMM
    assert paper_buffer_bytes(model) == 2 * 2048 * 8192
    sep = replace(SHERPA_HOST, bandwidth="separate")
    one = ttft(model, 1, "ddb-paper", sep)["ttft_s"]
    assert one / ttft(model, 1, "duplication", sep)["ttft_s"] == pytest.approx(5, rel=1e-3)
    run = pipeline(stages, SHERPA_HOST, 2, paper_buffer_bytes(model), ring=True, after=after,
                   quiet_memory_bound=True, trace=True)
    at = {s["stage"]: s for s in run["stages"]}
    assert at["L1.gate.q0"]["copy_start"] >= at["L0.down"]["gemm_end"] - 1e-15
    assert at["L1.q"]["copy_start"] < at["L0.down"]["gemm_end"]
    assert run["ttft_s"] / ttft(model, 64, "duplication")["ttft_s"] < 1.002
    # capacity: two H x 4H buffers beside the PIM-aware copy
    cap = capacity(model)["methods"]
    assert cap["ddb-paper"]["bytes"] - cap["remap"]["bytes"] == 2 * paper_buffer_bytes(model)
