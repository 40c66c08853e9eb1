"""The HUB's instruction buffer (specification: ``golden.hub``, the
program format and ``check_program``): the DPA program's words, and the
committed program's length, tokens per chunk and fault.

PROG-WRITE writes a word and un-commits the program (length 0); PROG-COMMIT
sets the length and tokens per chunk, and the decoder's commit walk then
checks every word once, recording the first fault here (a faulted program
faults every request that runs it)."""

from amaranth import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import INSTR_BITS
from hw.hub.ports import FAULT_BITS, commit_signature, program_port, program_write_port


class InstructionBuffer(wiring.Component):
    """Members
    -------
    write : Out(WritePort.Signature)
        PROG-WRITE: one word; also clears the committed program.
    commit : In(commit_signature)
        PROG-COMMIT: ``en``, the program's ``length`` and ``tokens_per_chunk``.
    program : In(program_port)
        The decoder's port (``hw.hub.ports.program_port``).
    """

    def __init__(self, hub: HubConfig):
        self.hub = hub
        super().__init__({
            "write": Out(program_write_port(hub)),
            "commit": In(commit_signature(hub)),
            "program": In(program_port(hub)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=INSTR_BITS, depth=self.hub.instr_depth,
                                               init=[])
        wiring.connect(m, wiring.flipped(self.write), mem.write_port())
        rd = mem.read_port()
        p = self.program
        length = Signal.like(p.length, name="prog_len")
        tpc = Signal.like(p.tokens_per_chunk, name="tpc")
        fault = Signal(FAULT_BITS, name="prog_fault")
        m.d.comb += [rd.addr.eq(p.addr), rd.en.eq(1), p.word.eq(rd.data),
                     p.length.eq(length), p.tokens_per_chunk.eq(tpc), p.fault.eq(fault)]
        with m.If(self.write.en):
            m.d.sync += [length.eq(0), fault.eq(0)]
        with m.If(self.commit.en):
            m.d.sync += [length.eq(self.commit.length), tpc.eq(self.commit.tokens_per_chunk),
                         fault.eq(0)]
        with m.If(p.set_fault):
            m.d.sync += fault.eq(p.fault_code)
        return m
