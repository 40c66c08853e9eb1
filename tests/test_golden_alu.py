"""JIT-Q ALU channel and MX quantization kernels (golden/alu.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden import numerics
from golden.alu import (
    DIRECTIONS,
    PLACEMENTS,
    AluChannel,
    AluConfig,
    AluError,
    KernelLayout,
    alu,
    command_counts,
    host_load,
    host_rd,
    host_readback,
    host_wr,
    kernel,
    load_tiles,
    parse_readback,
    read_results,
)
from golden.isa import (
    REFRESH_ID,
    AluAdd,
    AluCmp,
    AluLane,
    AluLogic,
    AluMax,
    AluMov,
    AluMul,
    AluShift,
    ErrorCode,
    Opcode,
)
from golden.mx import FORMATS, quantize

CFG = AluConfig(pairs=2, rows=64, cols=32)
T = CFG.timing
LANE = np.arange(16, dtype=np.uint16)


def reg(ch, r, pair=0):
    return [int(v) for v in ch.regs[pair, r]]


def test_alu_operations_by_hand():
    ch = AluChannel(CFG, strict=True)
    ch.bank_view(0)[:, 3, 5] = [LANE * 3, LANE + 100]  # pair 0 and pair 1 differ
    ch.bank_view(1)[:, 0, 0] = 7
    prog = [
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=0, bank=0, row=3, col=5),      # r0 = 3 i
        alu(Opcode.ALU_MOV, AluMov.IMM, dst_reg=1, use_imm=1, imm=20),        # r1 = 20
        alu(Opcode.ALU_ADD, AluAdd.SUB, dst_reg=2, src_reg=0, src2_reg=1),    # 3i - 20
        alu(Opcode.ALU_CMP, AluCmp.LT, dst_reg=3, src_reg=0, src2_reg=1),     # 3i < 20
        alu(Opcode.ALU_MAX, AluMax.MIN, dst_reg=4, src_reg=0, use_imm=1, imm=9),
        alu(Opcode.ALU_LOGIC, AluLogic.ANDN, dst_reg=5, src_reg=0, use_imm=1, imm=1),
        alu(Opcode.ALU_LANESHIFT, AluLane.ROT, dst_reg=6, src_reg=0, use_imm=1, imm=3),
        alu(Opcode.ALU_MUL, AluMul.MULLO, dst_reg=7, src_reg=0, src2_reg=0),
        alu(Opcode.ALU_BITSHIFT, AluShift.SHL, dst_reg=8, src_reg=0, use_imm=1, imm=12),
        alu(Opcode.ALU_MOV, AluMov.ST, src_reg=2, bank=1, row=1, col=2),
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=9, bank=1, row=0, col=0),
    ]
    ch.run(prog)
    x = [3 * i for i in range(16)]
    assert reg(ch, 2) == [(v - 20) & 0xFFFF for v in x]
    assert reg(ch, 3) == [0xFFFF if v < 20 else 0 for v in x]
    assert reg(ch, 4) == [min(v, 9) for v in x]
    assert reg(ch, 5) == [v & ~1 for v in x]
    assert reg(ch, 6) == [x[(i + 3) % 16] for i in range(16)]
    assert reg(ch, 7) == [(v * v) & 0xFFFF for v in x]
    assert reg(ch, 8) == [(v << 12) & 0xFFFF for v in x]
    assert reg(ch, 0, pair=1) == [i + 100 for i in range(16)]  # each ALU its own bank
    assert [int(v) for v in ch.bank_view(1)[0, 1, 2]] == reg(ch, 2)
    assert reg(ch, 9) == [7] * 16


def test_counter_and_masked_shifts():
    ch = AluChannel(CFG, strict=True)
    ch.regs[:, 0] = 0x8000
    ch.regs[:, 1] = LANE % 4  # counts 0..3
    ch.run([alu(Opcode.ALU_MOV, AluMov.SETCNT, src_reg=1)]
           + [alu(Opcode.ALU_BITSHIFT, AluShift.SHR1_COUNT, dst_reg=0, src_reg=0)] * 5
           + [alu(Opcode.ALU_MOV, AluMov.GETCNT, dst_reg=2)])
    assert reg(ch, 0) == [0x8000 >> (i % 4) for i in range(16)]  # extra shifts hold
    assert reg(ch, 2) == [0] * 16
    # the same with CMP, masked bitSHIFT, ADD per bit
    ch.regs[:, 0] = 0x8000
    ch.regs[:, 1] = LANE % 4
    step = [alu(Opcode.ALU_CMP, AluCmp.GT, dst_reg=3, src_reg=1, use_imm=1, imm=0),
            alu(Opcode.ALU_BITSHIFT, AluShift.SHR1_MASK, dst_reg=0, src_reg=0, src2_reg=3),
            alu(Opcode.ALU_ADD, AluAdd.ADD, dst_reg=1, src_reg=1, src2_reg=3)]
    ch.run(step * 5)
    assert reg(ch, 0) == [0x8000 >> (i % 4) for i in range(16)] and reg(ch, 1) == [0] * 16


def _trace(r):
    return [(t.cycle, t.opcode, t.cmd_id) for t in r.trace]


def test_timing_by_hand():
    ch = AluChannel(CFG)
    r = ch.run([
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=0, bank=0, row=2, col=0),  # even banks: ACT
        alu(Opcode.ALU_MOV, AluMov.IMM, dst_reg=1, use_imm=1, imm=1),     # + tCCD
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=2, bank=1, row=2, col=0),  # odd banks: ACT
        alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=2, bank=0, row=5, col=0),  # PRE, ACT, LD
    ])
    act0 = 1  # a command accepted in cycle 0 is visible from cycle 1
    ld0 = act0 + T.t_rcd
    imm = ld0 + T.t_ccd
    act1 = imm + 1
    ld1 = act1 + T.t_rcd
    pre0 = max(ld1 + 1, act0 + T.t_ras)
    act0b = pre0 + T.t_rp
    ld2 = act0b + T.t_rcd
    assert _trace(r) == [(act0, Opcode.ACT, 0), (ld0, Opcode.ALU_MOV, 0),
                         (imm, Opcode.ALU_MOV, 1), (act1, Opcode.ACT, 2),
                         (ld1, Opcode.ALU_MOV, 2), (pre0, Opcode.PRE, 3),
                         (act0b, Opcode.ACT, 3), (ld2, Opcode.ALU_MOV, 3)]
    assert r.cycles == ld2 + 1


def test_the_profile_refreshes_the_alu_channel():
    """hbm-jitq refreshes every tREFI: a stream of LDs that alternates rows
    runs past two intervals; each refresh closes the open rows (its PRE),
    then REF, and no ACT follows for tRFC; the profile's four bank groups
    shrink to the two banks of a one-ALU channel."""
    cfg = AluConfig.from_profile("hbm-jitq", pairs=1, rows=2)
    t = cfg.timing
    assert t.t_refi and cfg.bank_groups == 2
    words = [alu(Opcode.ALU_MOV, AluMov.LD, bank=0, row=k % 2, col=0) for k in range(200)]
    r = AluChannel(cfg).run(words)
    assert r.cycles > 2 * t.t_refi
    refs = [e for e in r.trace if e.opcode == Opcode.REF]
    assert [e.cycle // t.t_refi for e in refs] == [1, 2] and all(e.cmd_id == REFRESH_ID
                                                                  for e in refs)
    for ref in refs:
        i = r.trace.index(ref)
        assert r.trace[i - 1].opcode == Opcode.PRE and r.trace[i - 1].cmd_id == REFRESH_ID
        act = next(e for e in r.trace[i:] if e.opcode == Opcode.ACT)
        assert act.cycle >= ref.cycle + t.t_rfc


def test_host_reads_and_writes_follow_the_channel_stream_rules():
    ch = AluChannel(CFG)
    beat = numerics.lanes_to_word(LANE + 1)
    # WR to bank 3 (odd bank of ALU 1) waits for its beat (accepted in 40);
    # an RD of the same word then needs the bank's row open (it is) and a
    # credit; the ALU LD of the odd banks sees the written word in ALU 1
    r = ch.run([host_wr(3, 1, 4), host_rd(3, 1, 4),
                alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=0, bank=1, row=1, col=4)],
               wdata=[beat], wdata_arrivals=[40])
    act = 1
    wr_at = max(act + T.t_rcd, 41)
    rd_at = wr_at + max(T.t_ccd, T.t_wtr)  # the device's write-to-read turnaround
    # the LD touches banks 1 and 3; bank 1 is closed, so as for the
    # channel's MAC every open bank of the set (3) precharges, then both
    # open; the PRE waits for the write's recovery and the read's tRTP
    pre = max(rd_at + 1, act + T.t_ras, wr_at + T.t_wr, rd_at + T.t_rtp)
    act1 = max(pre + T.t_rp, act + T.t_rc)
    assert T.t_wtr > T.t_ccd and wr_at + T.t_wr > rd_at + 1  # the rules show here
    ld = act1 + T.t_rcd
    assert _trace(r) == [(act, Opcode.ACT, 0), (wr_at, Opcode.WR, 0), (rd_at, Opcode.RD, 1),
                         (pre, Opcode.PRE, 2), (act1, Opcode.ACT, 2), (ld, Opcode.ALU_MOV, 2)]
    assert r.rdata == [beat] and reg(ch, 0, pair=1) == [i + 1 for i in range(16)]
    assert reg(ch, 0, pair=0) == [0] * 16
    # read credits: with 4 credits, the fifth RD waits for the first pop
    reads = [host_rd(0, 0, k) for k in range(5)]
    r = AluChannel(CFG).run(reads, rdata_pops=[100, 101, 102, 103, 104])
    assert r.trace[-1].cycle == 101 and r.trace[-1].opcode == Opcode.RD


def test_bad_commands_are_dropped_with_a_sticky_code():
    ch = AluChannel(CFG)
    before = ch.regs.copy()
    r = ch.run([alu(Opcode.ALU_ADD, 5, dst_reg=0),  # no such function
                alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=0, bank=2),
                alu(Opcode.ALU_MOV, AluMov.ST, src_reg=0, bank=0, row=64),
                alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=0, bank=0, col=32),
                alu(Opcode.MAC, 0),
                host_wr(4, 0, 0),  # bank past the channel: its beat is consumed
                host_wr(0, 0, 0)],
               wdata=[numerics.lanes_to_word(LANE), numerics.lanes_to_word(LANE + 7)])
    assert (r.status.err_code, r.status.err_id, r.status.err_count) == (
        ErrorCode.BAD_OPCODE, 0, 6)
    assert [code for _, code in r.errors] == [
        ErrorCode.BAD_OPCODE, ErrorCode.BANK_RANGE, ErrorCode.ROW_RANGE, ErrorCode.COL_RANGE,
        ErrorCode.BAD_OPCODE, ErrorCode.BANK_RANGE]
    assert np.array_equal(ch.regs, before)
    assert [int(v) for v in ch.banks[0, 0, 0]] == [i + 7 for i in range(16)]  # second beat
    for word, code in ((alu(Opcode.ALU_MOV, AluMov.LD, bank=2), ErrorCode.BANK_RANGE),
                       (alu(Opcode.ALU_MOV, AluMov.ST, row=64), ErrorCode.ROW_RANGE),
                       (alu(Opcode.ALU_MOV, AluMov.LD, col=32), ErrorCode.COL_RANGE),
                       (host_rd(0, 64, 0), ErrorCode.ROW_RANGE)):
        with pytest.raises(AluError) as e:
            AluChannel(CFG, strict=True).run([word])
        assert e.value.code is code


def _tiles(rng, n, specials=True):
    scale = np.exp2(rng.integers(-30, 30, (n, 16, 1)) + rng.integers(-3, 1, (n, 16, 16)))
    x = (rng.standard_normal((n, 16, 16)) * scale).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    if specials:
        bits[0, 0, 3] = 0x7F80  # Inf: a NaN block (row 0; column 3)
        bits[1, 4] = 0  # a zero row
        bits[2, :, 7] = 0x0001  # subnormal column
        bits[3, 9, 9] = 0xFFC0  # NaN
    return bits


def _run(placement, direction, fmt, bits, cfg=CFG, tiles=16, source="bf16"):
    lay = KernelLayout(placement, tiles, cfg.cols, cfg.rows, source)
    ch = AluChannel(cfg, strict=True)
    load_tiles(ch, lay, bits)
    words = kernel(lay, direction, fmt)
    result = ch.run(words)
    codes, es, micro = read_results(ch, lay, direction)
    src = bits.reshape(2 * cfg.pairs, tiles, 16, 16)
    if direction == "col":
        src = src.transpose(0, 1, 3, 2)
    ref = quantize(src, fmt, source)
    assert np.array_equal(es, ref.shared.reshape(es.shape))
    assert np.array_equal(micro, ref.micro.reshape(micro.shape))
    assert np.array_equal(codes, ref.codes.reshape(codes.shape))
    return words, result


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", list(FORMATS))
def test_kernels_are_bit_exact(placement, direction, name):
    cfg = AluConfig(pairs=1, rows=64, cols=32)
    tiles = 4 if placement == "tiled" else 16  # strided packs 16 tiles across the lanes
    bits = _tiles(np.random.default_rng(7), 2 * tiles)
    _run(placement, direction, FORMATS[name], bits, cfg, tiles)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fp32_kernels_are_bit_exact(placement, direction):
    # the low halves matter only through the sticky bit: put ties in the
    # high half (exact halfway in BF16 terms) with and without low bits
    cfg = AluConfig(pairs=1, rows=96, cols=32)
    tiles = 4 if placement == "tiled" else 16
    rng = np.random.default_rng(11)
    hi = _tiles(rng, 2 * tiles).astype(np.uint32)
    lo = rng.integers(0, 1 << 16, hi.shape).astype(np.uint32)
    lo[:, ::2] = 0  # exact ties on even rows
    bits = (hi << 16) | np.where((hi >> 7) & 0xFF == 0xFF, 0, lo)  # keep Inf as Inf
    _run(placement, direction, FORMATS["MX6"], bits, cfg, tiles, source="fp32")


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(list(FORMATS)), st.sampled_from(DIRECTIONS))
def test_counter_kernel_on_random_tiles(seed, name, direction):
    cfg = AluConfig(pairs=1, rows=64, cols=32)
    _run("strided-counter", direction, FORMATS[name], _tiles(np.random.default_rng(seed), 32),
         cfg)


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_counter_shift_cuts_variable_shift_commands_three_fold(name):
    fmt = FORMATS[name]
    lay = KernelLayout("strided", 16, 32, 64)
    plain = command_counts(kernel(lay, "row", fmt))
    counted = command_counts(kernel(KernelLayout("strided-counter", 16, 32, 64), "row", fmt))
    words = 2 * 16 * 16  # both banks, 16 tiles x 16 rows, one word per element position
    assert plain["variable_shift"] == 3 * (fmt.m + 1) * words
    assert plain["shift_cmp"] == plain["shift_add"] == plain["bitshift_1"] == (fmt.m + 1) * words
    assert counted["variable_shift"] == counted["bitshift_1"] == (fmt.m + 1) * words
    assert plain["total"] - counted["total"] == (2 * (fmt.m + 1) - 1) * words  # SETCNT added
    assert plain["laneshift"] == counted["laneshift"] == 0
    tiled = command_counts(kernel(KernelLayout("tiled", 16, 32, 64), "row", fmt))
    assert tiled["laneshift"] == 2 * 16 * 16 * 10  # Es butterfly 4, pairs 2, micro 4


def test_a_partial_strided_group_costs_a_whole_group():
    cfg = AluConfig(pairs=1, rows=64, cols=32)
    words, r = _run("strided-counter", "col", FORMATS["MX9"], _tiles(np.random.default_rng(5), 6),
                    cfg, tiles=3)
    full = kernel(KernelLayout("strided-counter", 16, cfg.cols, cfg.rows), "col", FORMATS["MX9"])
    assert len(words) == len(full)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_host_path_load_kernel_readback_equals_the_quantizer(direction):
    """The flow the RTL test uses: WR the tiles and constants, run the
    kernel, RD the outputs back; one stream, golden stream rules. The banks
    start dirty (an RTL memory keeps the previous test's data): the flow
    must read only words it wrote."""
    cfg = AluConfig(pairs=2, rows=32, cols=32)
    lay = KernelLayout("tiled", 2, cfg.cols, cfg.rows)
    rng = np.random.default_rng(3)
    bits = _tiles(rng, 2 * cfg.pairs * 2)
    load, beats = host_load(cfg, lay, bits)
    back = host_readback(cfg, lay, direction)
    words = load + kernel(lay, direction, FORMATS["MX4"]) + back
    ch = AluChannel(cfg, strict=True)
    ch.banks[:] = rng.integers(0, 1 << 16, ch.banks.shape)
    r = ch.run(words, wdata=beats)
    assert len(r.rdata) == len(back)
    codes, es, micro = parse_readback(cfg, lay, direction, r.rdata)
    src = bits.reshape(cfg.banks, 2, 16, 16)
    ref = quantize(src.transpose(0, 1, 3, 2) if direction == "col" else src, FORMATS["MX4"])
    assert np.array_equal(codes, ref.codes.reshape(codes.shape))
    assert np.array_equal(es, ref.shared.reshape(es.shape))
    assert np.array_equal(micro, ref.micro.reshape(micro.shape))


def test_layout_errors():
    with pytest.raises(ValueError, match="tiles must be"):
        KernelLayout("strided", 0, 32, 64)
    with pytest.raises(ValueError, match="do not fit"):
        KernelLayout("tiled", 200, 32, 64)
    with pytest.raises(ValueError, match="placement"):
        KernelLayout("diagonal", 16, 32, 64)
    with pytest.raises(ValueError, match="direction"):
        kernel(KernelLayout("tiled", 16, 32, 64), "diag", FORMATS["MX9"])
