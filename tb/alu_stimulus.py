"""ALU-channel stimulus shared by the Amaranth-simulator tests, the cocotb
tests and the standalone player (tb/play_tests.py): random streams (host
writes, loads, stores, reads and every ALU operation on random registers,
then a read-back of every bank's first column) and the MX quantization
kernels with their check against ``golden.mx.quantize``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.alu import (
    AluConfig,
    KernelLayout,
    alu,
    host_load,
    host_rd,
    host_readback,
    host_wr,
    kernel,
    parse_readback,
)
from golden.isa import ALU_FUNCTIONS, AluMov, Opcode
from golden.mx import FORMATS, quantize

#: (placement, direction, MX format, source) of the kernel runs: every
#: placement, both directions, three formats, both source types
KERNEL_CASES = (("tiled", "row", "MX4", "bf16"), ("tiled", "col", "MX6", "bf16"),
                ("strided", "row", "MX9", "bf16"), ("strided-counter", "col", "MX4", "bf16"),
                ("strided-counter", "row", "MX6", "fp32"))


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


@dataclass
class KernelCase:
    """One quantization kernel on the ALU channel: host writes of the
    tiles, the kernel, the read-back of its outputs."""

    placement: str
    direction: str
    fmt: str
    source: str
    layout: KernelLayout
    bits: np.ndarray  # (banks, 16, 16) source tiles (BF16 or FP32 bit patterns)
    words: list[int]
    beats: list[int]
    n_load: int  # commands before the kernel
    n_kernel: int  # the kernel's commands

    @property
    def name(self) -> str:
        return f"{self.placement} {self.direction} {self.fmt} {self.source}"


def kernel_case(cfg: AluConfig, rng, placement: str, direction: str, fmt: str,
                source: str = "bf16") -> KernelCase:
    """Random tiles (BF16 ones with an Inf, so a NaN block, and a zero row)
    loaded, quantized and read back."""
    lay = KernelLayout(placement, 1, cfg.cols, cfg.rows, source)
    n = cfg.banks
    x = (rng.standard_normal((n, 16, 16)) *
         np.exp2(rng.integers(-8, 8, (n, 16, 1)))).astype(np.float32)
    bits = x.view(np.uint32) if source == "fp32" else (x.view(np.uint32) >> 16).astype(np.uint16)
    if source == "bf16":
        bits[0, 3, 5] = 0x7F80  # Inf: a NaN block
        bits[1 % n, 7] = 0  # a zero row
    load, beats = host_load(cfg, lay, bits)
    program = kernel(lay, direction, FORMATS[fmt])
    back = host_readback(cfg, lay, direction)
    return KernelCase(placement, direction, fmt, source, lay, bits, load + program + back, beats,
                      len(load), len(program))


def check_kernel(cfg: AluConfig, case: KernelCase, rdata: list[int]) -> None:
    """The read-back codes, shared exponents and micro bits equal
    ``golden.mx.quantize`` of the source tiles."""
    codes, es, micro = parse_readback(cfg, case.layout, case.direction, rdata)
    src = case.bits.reshape(cfg.banks, 1, 16, 16)
    if case.direction == "col":
        src = src.transpose(0, 1, 3, 2)
    q = quantize(src, FORMATS[case.fmt], case.source)
    assert np.array_equal(codes, q.codes.reshape(codes.shape)), \
        f"{case.name}: codes differ from mx.quantize"
    assert np.array_equal(es, q.shared.reshape(es.shape)), \
        f"{case.name}: shared exponents differ"
    assert np.array_equal(micro, q.micro.reshape(micro.shape)), f"{case.name}: micro bits differ"
