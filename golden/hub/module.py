"""The PIM module's HUB (twin of ``hw/hub/module.py``): the host interface
over the instruction buffer, the configuration buffer, the GPR, the
decoder and the multicast register, over ``n_channels`` channel models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from golden import numerics
from golden.channel import ChannelModel
from golden.config import HubConfig
from golden.hub import epu
from golden.hub.cbuf import ConfigBuffer, Request
from golden.hub.decoder import Decoder
from golden.hub.ibuf import InstructionBuffer
from golden.hub.multicast import Emission, deliver
from golden.hub.ports import READS, STEP_MASK_BITS, WRITES, DpaFault, Response
from golden.isa import (
    COMMAND_BITS,
    EPU_OPCODES,
    HOST_FIELDS,
    LANES,
    ErrorCode,
    Fault,
    HostOp,
    HostStatus,
    Opcode,
    ReqState,
    field_value,
)
from golden.streams import Command


@dataclass
class StepResult:
    emissions: list[Emission]
    ran: list[int]
    faulted: list[int]
    decode_end: int  # cycle after the decoder's last request
    #: per EPU instruction run: (request, opcode, first cycle, cycles)
    epu_runs: list[tuple[int, Opcode, int, int]] = field(default_factory=list)


class Hub:
    """Golden HUB: instruction buffer, configuration buffer, VA2PA table,
    decoder, sequencer, multicast, GPR, over ``n_channels`` channel models
    whose memories persist across host operations.

    ``strict``: raise ``DpaFault`` at a request fault (after recording it)."""

    def __init__(self, hub: HubConfig, strict: bool = False):
        self.hub = hub
        self.ibuf = InstructionBuffer(hub)
        self.cbuf = ConfigBuffer(hub, strict)
        self.gpr = np.zeros((hub.gpr_entries, LANES), np.uint16)
        self.channels = [ChannelModel(hub.channel) for _ in range(hub.n_channels)]
        #: every command each channel has received, with its write beat
        #: (None for commands without one): the whole stream since reset
        self.streams: list[list[tuple[Command, int | None]]] = [[] for _ in self.channels]
        #: OBuf entries a MAC wrote and no RD-OUT read yet (the decoder's)
        self.dirty = [False] * hub.channel.obuf_entries
        #: GPR words read (a write beat multicast once to its channels, a
        #: host GPR-READ) and written (a read beat from a channel, a host
        #: GPR-WRITE) since reset: what ``golden.energy.hub_energy`` prices
        self.gpr_reads = self.gpr_writes = 0
        #: GPR words through the EPU's datapath (a softmax: three passes
        #: over its score words; a reduction: each source word) since reset
        self.epu_words = 0
        #: the EPU datapath's operations (``golden.hub.epu.OPS``) since
        #: reset: what ``golden.energy.hub_energy`` prices
        self.epu_ops = dict.fromkeys(epu.OPS, 0)
        self.last_step: StepResult | None = None
        #: the emission the multicast register loads next (``Decoder.emit``)
        self.offer: Emission | None = None

    @property
    def strict(self) -> bool:
        """Raise ``DpaFault`` at a request fault (after recording it)."""
        return self.cbuf.strict

    @strict.setter
    def strict(self, value: bool) -> None:
        self.cbuf.strict = value

    @property
    def requests(self) -> list[Request]:
        return self.cbuf.requests

    # ---- host protocol ---------------------------------------------------
    def host(self, op: int, req_id: int = 0, arg_a: int = 0, arg_b: int = 0,
             data: int = 0, accept: Callable[[int, int], int] | None = None,
             cycle: int = 0, landed: Callable[[int], int] | None = None) -> Response:
        """One host operation (``golden.isa.HostOp``). Each argument must be
        an integer that fits its field of the host port (``HOST_FIELDS``;
        EncodingError naming it otherwise); an undefined operation within
        the field is the HUB's BAD_OP. A STEP takes ``cycle``, ``accept``
        and ``landed`` (``step``); its ``data`` is the mask of requests it
        skips (a bit at or above ``requests``: BAD_ARG)."""
        op, req_id, arg_a, arg_b, data = (
            field_value(name, v, "host port field") for name, v in
            zip(HOST_FIELDS, (op, req_id, arg_a, arg_b, data), strict=True))
        try:
            op = HostOp(op)
        except ValueError:
            return Response(HostStatus.BAD_OP)
        if op == HostOp.STEP:
            if data >> self.hub.requests:
                return Response(HostStatus.BAD_ARG)
            r = self.last_step = self.step(cycle, accept, landed, skip=data)
            return Response(HostStatus.OK, _mask(r.ran) | _mask(r.faulted) << STEP_MASK_BITS)
        if op in ConfigBuffer.OPS:
            return self.cbuf.host(op, req_id, arg_a, arg_b)
        if op == HostOp.PROG_WRITE:
            return self.ibuf.write(arg_a, data)
        if op == HostOp.PROG_COMMIT:
            return self.ibuf.commit(arg_a, arg_b)
        if op == HostOp.GPR_WRITE:
            if not 0 <= arg_a < self.hub.gpr_entries:
                return Response(HostStatus.BAD_ARG)
            self.gpr[arg_a] = numerics.words_to_lanes(data)
            self.gpr_writes += 1
            return Response(HostStatus.OK)
        if op == HostOp.GPR_READ:
            if not 0 <= arg_a < self.hub.gpr_entries:
                return Response(HostStatus.BAD_ARG)
            self.gpr_reads += 1
            return Response(HostStatus.OK, numerics.lanes_to_word(self.gpr[arg_a]))
        assert op == HostOp.RAW, op
        return self._raw(arg_a, arg_b, data)

    def _raw(self, ch_mask, gpr, data) -> Response:
        emission = self.raw_emission(ch_mask, gpr, data)
        if emission is None:
            return Response(HostStatus.BAD_ARG)
        self.send([emission])
        return Response(HostStatus.OK)

    def raw_emission(self, ch_mask, gpr, data) -> Emission | None:
        """A RAW host operation's command for the multicast register, or
        None when the HUB refuses it (BAD_ARG)."""
        n = self.hub.n_channels
        cmd = Command.unpack(data & ((1 << COMMAND_BITS) - 1))
        code, _ = self.channels[0].check(cmd)
        read = cmd.opcode in READS
        if code != ErrorCode.NONE or ch_mask == 0 or ch_mask >> n \
                or not 0 <= gpr <= self.hub.gpr_entries - (n if read else 1):
            return None
        return Emission(0, None, ch_mask, cmd, gpr)

    # ---- the decode step -------------------------------------------------
    def step(self, start: int = 0, accept: Callable[[int, int], int] | None = None,
             landed: Callable[[int], int] | None = None, skip: int = 0) -> StepResult:
        """One decode step, STEP accepted in cycle ``start``. ``accept(k, e)``
        gives the cycle emission ``k`` (loaded in ``e``) was accepted by its
        last channel; default ``e + 1`` (channels always ready).
        ``landed(k)`` gives the first cycle every read beat of the step's
        emissions ``0 .. k-1`` is in the GPR (an EPU instruction waits for
        it); default: when the command is taken. Requests whose bit is set
        in ``skip`` are passed over as if not ACTIVE (one cycle; T_cur
        unchanged): a host runs one layer's requests, or a program that is
        not theirs."""
        accept = accept or (lambda k, e: e + 1)
        dec = Decoder(self, accept, landed)
        t = start + 1
        ran, faulted = [], []
        pending_fault: DpaFault | None = None
        for req, r in enumerate(self.requests):
            if r.state != ReqState.ACTIVE or skip >> req & 1:
                t += 1
                continue
            try:
                if self.ibuf.fault != Fault.NONE:
                    self.cbuf.fault(req, self.ibuf.fault, "the committed program is invalid")
                elif r.t_cur > len(r.chunks) * self.ibuf.tokens_per_chunk:
                    self.cbuf.fault(req, Fault.T_RANGE, f"request {req}: T_cur={r.t_cur} beyond "
                                    f"{len(r.chunks)} chunks x {self.ibuf.tokens_per_chunk} "
                                    f"tokens")
            except DpaFault as e:
                pending_fault = pending_fault or e
            if r.state == ReqState.FAULTED:
                faulted.append(req)
                t += 1
                continue
            t = dec.request(req, t + 1)
            if r.state == ReqState.FAULTED:
                faulted.append(req)
                pending_fault = pending_fault or dec.error
            else:
                ran.append(req)
        dec.flush()
        for req in ran:
            self.requests[req].t_cur += 1
        if pending_fault is not None:
            raise pending_fault
        return StepResult(dec.emissions, ran, faulted, t, dec.epu_runs)

    def run_epu(self, req: int, op: Opcode, f: dict[str, int]) -> None:
        """The data effect of EPU instruction ``(op, f)`` of ``req`` on the
        GPR (range-checked by the decoder)."""
        assert op in EPU_OPCODES, op
        r = self.requests[req]
        src, dst = (r.gpr_base + w for w in epu.gpr_words(op, f, r.t_cur))
        if op == Opcode.EPU_SOFTMAX:  # two passes over the scores, the third over the padding too
            w = epu.softmax_words(r.t_cur)
            p = epu.softmax(self.gpr[src[:w]], r.t_cur)
            self.gpr[dst] = 0
            self.gpr[dst[:w]] = p
            self.gpr_reads += 2 * w + len(src)
            self.epu_words += 2 * w + len(src)
            ops = epu.softmax_ops(r.t_cur)
        else:
            self.gpr[dst] = epu.reduce(self.gpr[src], f["span"])
            self.gpr_reads += len(src)
            self.epu_words += len(src)
            ops = epu.reduce_ops(f["op_size"], f["span"])
        for k, v in ops.items():
            self.epu_ops[k] += int(v)
        self.gpr_writes += len(dst)

    def send(self, emissions: list[Emission]) -> None:
        """Deliver ``emissions`` to the channels (their data effects)."""
        for e in emissions:
            if e.command.opcode in WRITES:
                self.gpr_reads += 1
            elif e.command.opcode in READS and not e.discard:
                self.gpr_writes += e.ch_mask.bit_count()
        self._deliver(emissions)

    def _deliver(self, emissions: list[Emission]) -> None:
        """The emissions' data effects: the channel models run them."""
        deliver(emissions, self.channels, self.gpr, self.streams)

    # ---- convenience for hosts and tests -----------------------------------
    def load_program(self, words: list[int], tokens_per_chunk: int) -> Response:
        if len(words) > self.hub.instr_depth:
            raise ValueError(f"program of {len(words)} words exceeds the instruction buffer "
                             f"({self.hub.instr_depth})")
        for i, w in enumerate(words):
            self.host(HostOp.PROG_WRITE, arg_a=i, data=w)
        return self.host(HostOp.PROG_COMMIT, arg_a=len(words), arg_b=tokens_per_chunk)

    def translate(self, req: int, va: int) -> tuple[int, int]:
        """(physical row, column) of virtual word address ``va`` of ``req``."""
        return self.cbuf.translate(req, va)


def _mask(items: list[int]) -> int:
    return sum(1 << i for i in items)
