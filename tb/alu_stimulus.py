"""Random ALU-channel streams shared by the Amaranth-simulator tests and
the cocotb tests: host writes, loads, stores, reads and every ALU operation
on random registers, then a read-back of every bank's first column."""

from __future__ import annotations

import numpy as np

from golden import numerics
from golden.isa import ALU_FUNCTIONS, AluMov, Opcode
from golden.jitq import AluConfig, alu, host_rd, host_wr


def random_beat(rng) -> int:
    return numerics.lanes_to_word(rng.integers(0, 1 << 16, 16).astype(np.uint16))


def random_program(rng, n: int, cfg: AluConfig):
    """Loads, every ALU operation on random registers, stores, read-backs."""
    words, beats = [], []
    for b in range(cfg.banks):
        for col in range(2):
            words.append(host_wr(b, int(rng.integers(cfg.rows)), col))
            beats.append(random_beat(rng))
    for _ in range(n):
        kind = rng.integers(5)
        reg = lambda: int(rng.integers(16))  # noqa: E731
        if kind == 0:
            words.append(alu(Opcode.ALU_MOV, AluMov.LD, dst_reg=reg(), bank=int(rng.integers(2)),
                             row=int(rng.integers(cfg.rows)), col=int(rng.integers(cfg.cols))))
        elif kind == 1:
            words.append(alu(Opcode.ALU_MOV, AluMov.ST, src_reg=reg(), bank=int(rng.integers(2)),
                             row=int(rng.integers(cfg.rows)), col=int(rng.integers(cfg.cols))))
        elif kind == 2:
            words.append(host_rd(int(rng.integers(cfg.banks)), int(rng.integers(cfg.rows)),
                                 int(rng.integers(cfg.cols))))
        else:
            op = list(ALU_FUNCTIONS)[int(rng.integers(len(ALU_FUNCTIONS)))]
            fn = list(ALU_FUNCTIONS[op])[int(rng.integers(len(ALU_FUNCTIONS[op])))]
            if op == Opcode.ALU_MOV and fn in (AluMov.LD, AluMov.ST):
                fn = AluMov.IMM
            use_imm = int(rng.integers(2))
            imm = int(rng.integers(0, 20)) if op in (Opcode.ALU_BITSHIFT, Opcode.ALU_LANESHIFT) \
                else int(rng.integers(1 << 16))
            words.append(alu(op, fn, dst_reg=reg(), src_reg=reg(), src2_reg=reg(),
                             use_imm=use_imm, imm=imm))
    for b in range(cfg.banks):  # read everything back
        for row in range(cfg.rows):
            words.append(host_rd(b, row, 0))
    return words, beats
