"""hw.alu under the Amaranth simulator against golden.alu: short streams
with idle cycles and read backpressure, every ALU operation, the host path
and the sticky errors (the cocotb tests run the kernels on the Verilog)."""

import numpy as np
import pytest

from golden import numerics
from golden.alu import AluChannel, AluConfig, KernelLayout, alu, host_rd, host_wr, kernel
from golden.config import Timing
from golden.isa import (
    AluMov,
    AluShift,
    ErrorCode,
    Opcode,
)
from golden.mx import MX4
from hw.alu import AluChannel as AluRTL
from tb.alu_stimulus import random_beat, random_program
from tb.scoreboard import refresh_tail
from tests.stream_driver import drive_streams

TIMING = Timing(t_rcd=4, t_rp=3, t_ras=7, t_ccd=2)
CFG = AluConfig(pairs=2, rows=4, cols=4, timing=TIMING, cmd_depth=2, wdata_depth=2,
                rdata_depth=2)


def simulate(cfg, words, wdata, idle=(), stall=(), max_cycles=20000):
    return drive_streams(AluRTL(cfg), words, wdata, idle, stall, max_cycles=max_cycles, tail=40)


def check(cfg, words, wdata, **kw):
    got = simulate(cfg, words, wdata, **kw)
    ref = AluChannel(cfg).run(words, wdata, got["cmd_arr"], got["wdata_arr"], got["pops"])
    want = [(t.cmd_id, t.opcode, t.cycle) for t in ref.trace]
    assert refresh_tail(got["trace"], want) == want
    assert got["rdata"] == ref.rdata
    st = ref.status
    assert got["status"] == (st.err_code, st.err_id, st.err_count)
    return got, ref


def check_random(cfg, seed: int, n: int):
    """``n`` random operations with idle cycles and read stalls, checked."""
    rng = np.random.default_rng(seed)
    words, beats = random_program(rng, n, cfg)
    idle = set(rng.integers(0, 3000, n).tolist())
    stall = set(rng.integers(0, 3000, 2 * n).tolist())
    return check(cfg, words, beats, idle=idle, stall=stall)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_programs_match_golden(seed):
    check_random(CFG, seed, 300)


#: Every device rule the ALU channel meets (test values, short so that a
#: short stream sees each at work): bank groups, tRC, tRTP, write recovery,
#: write-to-read turnaround, tRRD, tFAW and refresh.
DEVICE = AluConfig(pairs=2, rows=4, cols=4, bank_groups=2, cmd_depth=2, wdata_depth=2,
                   rdata_depth=2, timing=Timing(
                       t_rcd=4, t_rp=3, t_ras=7, t_ccd=2, t_ccd_l=3, t_rc=12, t_rtp=3, t_wr=6,
                       t_wtr=5, t_rrd_s=2, t_rrd_l=3, t_faw=16, t_refi=150, t_rfc=9))


@pytest.mark.parametrize("seed", [3, 4])
def test_device_rules_and_refresh_match_golden(seed):
    got, ref = check_random(DEVICE, seed, 200)
    refs = [t.cycle for t in ref.trace if t.opcode == Opcode.REF]
    assert len(refs) >= 3 and all(b - a >= DEVICE.timing.t_refi - 60
                                  for a, b in zip(refs, refs[1:], strict=False))


def test_bank_groups_space_reads_in_one_group_further():
    """Host reads on open rows: two in one bank group wait tCCD_L, two in
    different groups tCCD (banks 0, 1 form group 0, banks 2, 3 group 1);
    the RTL issues them in the same cycles."""
    words = [host_rd(b, 0, 0) for b in range(4)] + [host_rd(0, 0, 1), host_rd(1, 0, 1),
                                                     host_rd(3, 0, 1)]
    got, ref = check(DEVICE, words, [])
    reads = [t.cycle for t in ref.trace if t.opcode == Opcode.RD][4:]
    t = DEVICE.timing
    assert reads[1] - reads[0] == t.t_ccd_l and reads[2] - reads[1] == t.t_ccd < t.t_ccd_l


def test_counter_shift_sequence_and_registers_read_back():
    words = [alu(Opcode.ALU_MOV, AluMov.IMM, dst_reg=0, use_imm=1, imm=0x8000),
             alu(Opcode.ALU_MOV, AluMov.IMM, dst_reg=1, use_imm=1, imm=3),
             alu(Opcode.ALU_MOV, AluMov.SETCNT, src_reg=1),
             *[alu(Opcode.ALU_BITSHIFT, AluShift.SHR1_COUNT, dst_reg=0, src_reg=0)] * 5,
             alu(Opcode.ALU_MOV, AluMov.ST, src_reg=0, bank=1, row=2, col=3),
             host_rd(1, 2, 3), host_rd(3, 2, 3)]
    got, ref = check(CFG, words, [])
    assert numerics.words_to_lanes(got["rdata"][0]).tolist() == [0x1000] * 16


def test_bad_commands_and_a_bad_write_keep_the_streams_aligned():
    words = [alu(Opcode.ALU_ADD, 6), host_wr(7, 0, 0), alu(Opcode.ALU_MOV, AluMov.LD, bank=3),
             host_rd(0, 9, 0), host_wr(0, 1, 1), host_rd(0, 1, 1), alu(Opcode.MAC, 0)]
    rng = np.random.default_rng(0)
    got, ref = check(CFG, words, [random_beat(rng), random_beat(rng)])
    assert got["status"] == (ErrorCode.BAD_OPCODE, 0, 5)
    assert len(got["rdata"]) == 1


def test_a_small_kernel_is_bit_exact_and_cycle_exact():
    cfg = AluConfig(pairs=1, rows=8, cols=32, timing=TIMING)
    lay = KernelLayout("tiled", 1, cfg.cols, cfg.rows)
    rng = np.random.default_rng(4)
    tiles = (rng.standard_normal((2, 16, 16)).astype(np.float32).view(np.uint32) >> 16)
    from golden.alu import host_load, host_readback

    load, beats = host_load(cfg, lay, tiles.astype(np.uint16))
    words = load + kernel(lay, "row", MX4)[:400] + host_readback(cfg, lay, "row")
    check(cfg, words, beats)
