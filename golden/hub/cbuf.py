"""The HUB's configuration buffer (twin of ``hw/hub/cbuf.py``): per
request its state, fault, T_cur, GPR base and VA2PA table (virtual chunk
-> physical chunk); the host operations ASSIGN, GROW, RELEASE, STATUS and
CLEAR; the translation of a request's virtual word address."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golden.config import HubConfig
from golden.hub.ports import DpaFault, Response
from golden.isa import FIELDS, REQ_STATUS_FIELDS, Fault, HostOp, HostStatus, ReqState, pack


@dataclass
class Request:
    state: ReqState = ReqState.FREE
    fault: Fault = Fault.NONE
    t_cur: int = 0
    gpr_base: int = 0
    chunks: list[int] = field(default_factory=list)


class ConfigBuffer:
    """``strict``: raise ``DpaFault`` at a request fault (after recording it)."""

    OPS = (HostOp.ASSIGN, HostOp.GROW, HostOp.RELEASE, HostOp.STATUS, HostOp.CLEAR)

    def __init__(self, hub: HubConfig, strict: bool = False):
        self.hub, self.strict = hub, strict
        self.requests = [Request() for _ in range(hub.requests)]

    def host(self, op: HostOp, req_id: int, arg_a: int, arg_b: int) -> Response:
        """One of ``OPS``."""
        if not 0 <= req_id < len(self.requests):
            return Response(HostStatus.BAD_ARG)
        return getattr(self, f"_op_{op.name.lower()}")(req_id, arg_a, arg_b)

    def _op_assign(self, req_id, t_cur, gpr_base) -> Response:
        r = self.requests[req_id]
        if r.state != ReqState.FREE or not 0 <= gpr_base < self.hub.gpr_entries \
                or not 0 <= t_cur < (1 << FIELDS["t_cur"].width):
            return Response(HostStatus.BAD_ARG)
        self.requests[req_id] = Request(ReqState.ACTIVE, Fault.NONE, t_cur, gpr_base, [])
        return Response(HostStatus.OK)

    def _op_grow(self, req_id, pchunk, _b) -> Response:
        r = self.requests[req_id]
        if r.state == ReqState.FREE or not 0 <= pchunk < self.hub.physical_chunks:
            return Response(HostStatus.BAD_ARG)
        if len(r.chunks) == self.hub.chunks_per_request:
            self.fault(req_id, Fault.TABLE_FULL, f"request {req_id}: all "
                       f"{self.hub.chunks_per_request} VA2PA entries in use", raise_=False)
            if self.strict:
                raise DpaFault(Fault.TABLE_FULL, req_id, "VA2PA table full")
            return Response(HostStatus.FAULT, int(Fault.TABLE_FULL))
        r.chunks.append(pchunk)
        return Response(HostStatus.OK)

    def _op_release(self, req_id, _a, _b) -> Response:
        self.requests[req_id] = Request()
        return Response(HostStatus.OK)

    def _op_status(self, req_id, _a, _b) -> Response:
        r = self.requests[req_id]
        return Response(HostStatus.OK, pack(REQ_STATUS_FIELDS, {
            "req_state": r.state, "fault": r.fault, "t_cur": r.t_cur,
            "n_chunks": len(r.chunks)}))

    def _op_clear(self, req_id, _a, _b) -> Response:
        r = self.requests[req_id]
        if r.state == ReqState.FAULTED:
            r.state, r.fault = ReqState.ACTIVE, Fault.NONE
        return Response(HostStatus.OK)

    def fault(self, req: int, code: Fault, message: str, raise_: bool = True) -> None:
        """Record ``code`` for ``req`` (the decoder's faults, TABLE_FULL)."""
        r = self.requests[req]
        r.state, r.fault = ReqState.FAULTED, code
        if self.strict and raise_:
            raise DpaFault(code, req, message)

    def translate(self, req: int, va: int) -> tuple[int, int]:
        """(physical row, column) of virtual word address ``va`` of ``req``."""
        if not isinstance(req, int | np.integer) or isinstance(req, bool) or not 0 <= req < len(
                self.requests):
            raise ValueError(f"request id must be an integer in [0, {len(self.requests)}), "
                             f"not {req!r}")
        if not isinstance(va, int | np.integer) or isinstance(va, bool):
            raise ValueError(f"virtual address must be an integer, not {va!r}")
        hub, r = self.hub, self.requests[req]
        cols, rows = hub.channel.cols, hub.chunk_rows
        vchunk = va // (cols * rows)
        if va < 0 or vchunk >= len(r.chunks):
            raise DpaFault(Fault.UNMAPPED, req, f"va={va} (virtual chunk {vchunk}) is not "
                           f"mapped ({len(r.chunks)} chunks)")
        return r.chunks[vchunk] * rows + (va // cols) % rows, va % cols
