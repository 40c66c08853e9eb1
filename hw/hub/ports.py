"""What the HUB's blocks say to each other: the host's payloads, the
decoded-command entry, and the two ports through which the decoder reads
the instruction buffer and the configuration buffer. Every width comes
from the encoding table (``golden.isa``) or the configuration."""

from amaranth import signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from golden.config import HubConfig
from golden.isa import FIELDS, HOST_FIELDS, INSTR_BITS, RESPONSE_FIELDS, WORD_BITS, layout_widths
from hw.streams import CommandLayout

HostLayout = data.StructLayout(layout_widths(HOST_FIELDS))
ResponseLayout = data.StructLayout(layout_widths(RESPONSE_FIELDS))
ACC_BITS = 48  # DYN-MODI accumulators and virtual addresses (signed)
FAULT_BITS = FIELDS["fault"].width


def log2(n: int) -> int:
    """log2 of a power of two."""
    assert n & (n - 1) == 0, n
    return n.bit_length() - 1


def log2_ceil(n: int) -> int:
    return max(0, (n - 1).bit_length())


class Sizes:
    """Widths derived from a ``HubConfig``. Per-request register arrays are
    padded to a power of two and indexed by exact-width signals, so every
    index selects an entry (no incomplete case)."""

    def __init__(self, hub: HubConfig):
        self.pc = range(hub.instr_depth + 2)  # program counter and program length
        self.req_bits = max(1, log2_ceil(hub.requests))
        self.chunk_bits = max(1, log2_ceil(hub.chunks_per_request))
        self.pchunk = range(max(2, hub.physical_chunks))
        self.gpr_addr_bits = log2_ceil(hub.gpr_entries)


def entry_layout(n_channels: int) -> data.StructLayout:
    """One decoded command on its way to the multicast register: the
    command, the channels it goes to, its GPR word (the write beat's source
    or the first read beat's destination) and whether its read beats are
    dropped (the fault drain)."""
    return data.StructLayout({"cmd": CommandLayout, "mask": n_channels,
                              "gpr": FIELDS["gpr_addr"].width, "discard": 1})


def program_port(hub: HubConfig) -> wiring.Signature:
    """The decoder's port on the instruction buffer (decoder's side): the
    word at ``addr`` (read combinationally from the address of the same
    cycle, registered by the memory), the committed program's length,
    tokens per chunk and fault, and the commit walk's fault to record."""
    s = Sizes(hub)
    return wiring.Signature({
        "addr": Out(s.pc), "word": In(INSTR_BITS),
        "length": In(s.pc), "tokens_per_chunk": In(FIELDS["arg_b"].width),
        "fault": In(FAULT_BITS),
        "set_fault": Out(1), "fault_code": Out(FAULT_BITS),
    })


def request_port(hub: HubConfig) -> wiring.Signature:
    """The decoder's port on the configuration buffer (decoder's side):
    request ``req``'s state, T_cur, GPR base and chunk count; VA2PA of its
    virtual chunk ``vchunk``; and a fault to record for it."""
    s = Sizes(hub)
    return wiring.Signature({
        "req": Out(s.req_bits),
        "state": In(FIELDS["req_state"].width), "t_cur": In(FIELDS["t_cur"].width),
        "gpr_base": In(FIELDS["gpr_base"].width), "n_chunks": In(FIELDS["n_chunks"].width),
        "vchunk": Out(s.chunk_bits), "pchunk": In(s.pchunk),
        "set_fault": Out(1), "fault_code": Out(FAULT_BITS),
    })


#: The DYN-MODI offsets that apply to one instruction word: ``va`` (the ROW
#: and COL offsets, in words), GBuf index, OBuf index and GPR word.
ModsLayout = data.StructLayout({name: signed(ACC_BITS)
                                for name in ("va", "gbuf_idx", "out_idx", "gpr_addr")})


def commit_signature(hub: HubConfig) -> wiring.Signature:
    """PROG-COMMIT into the instruction buffer (host interface's side):
    ``en``, the program's ``length`` and ``tokens_per_chunk``."""
    return wiring.Signature({"en": Out(1), "length": Out(Sizes(hub).pc),
                             "tokens_per_chunk": Out(FIELDS["arg_b"].width)})


def config_port(hub: HubConfig) -> wiring.Signature:
    """The host interface's port on the configuration buffer (host
    interface's side): an ASSIGN, GROW, RELEASE, STATUS or CLEAR accepted
    this cycle (``valid``, ``payload``) and its response in the same cycle;
    ``advance``: T_cur += 1 for these requests (a STEP's end)."""
    return wiring.Signature({
        "valid": Out(1), "payload": Out(HostLayout),
        "rsp_code": In(FIELDS["rsp_code"].width), "rsp_data": In(WORD_BITS),
        "advance": Out(hub.requests),
    })


def decoder_control(hub: HubConfig) -> wiring.Signature:
    """The host interface's port on the decoder (host interface's side):
    start the commit walk or a STEP (with the requests it ``skip``s, read in
    the start cycle); ``done`` when the walk ends (with its response) or the
    STEP's last request is decoded; the requests that ran and that faulted
    in the STEP."""
    return wiring.Signature({
        "commit": Out(1), "step": Out(1), "skip": Out(hub.requests), "done": In(1),
        "rsp_code": In(FIELDS["rsp_code"].width), "rsp_data": In(WORD_BITS),
        "ran": In(hub.requests), "faulted": In(hub.requests),
    })


def epu_port(hub: HubConfig) -> wiring.Signature:
    """The decoder's port on the EPU (decoder's side): ``start`` an EPU
    instruction, with its opcode, absolute source and destination GPR
    entries, span, T_cur (``n``) and Op-size, read in the start cycle only;
    ``done`` in the instruction's last cycle."""
    aw = Sizes(hub).gpr_addr_bits
    return wiring.Signature({
        "start": Out(1), "op": Out(FIELDS["opcode"].width), "src": Out(aw), "dst": Out(aw),
        "span": Out(FIELDS["span"].width), "n": Out(FIELDS["t_cur"].width),
        "op_size": Out(FIELDS["op_size"].width), "done": In(1),
    })


def raw_signature(n_channels: int) -> wiring.Signature:
    """A host RAW command for the multicast register, loaded in the cycle it
    is valid (the host interface sends it only while the register is empty)."""
    return wiring.Signature({"valid": Out(1), "payload": Out(entry_layout(n_channels))})


def gpr_read_port(hub: HubConfig) -> wiring.Signature:
    """A read port of the GPR (the GPR's side, ``memory.ReadPort``'s)."""
    return memory.ReadPort.Signature(addr_width=Sizes(hub).gpr_addr_bits, shape=WORD_BITS)


def gpr_write_port(hub: HubConfig) -> wiring.Signature:
    """A write port of the GPR (the GPR's side, ``memory.WritePort``'s)."""
    return memory.WritePort.Signature(addr_width=Sizes(hub).gpr_addr_bits, shape=WORD_BITS)


def program_write_port(hub: HubConfig) -> wiring.Signature:
    """PROG-WRITE into the instruction buffer (the buffer's side)."""
    return memory.WritePort.Signature(addr_width=log2_ceil(hub.instr_depth), shape=INSTR_BITS)
