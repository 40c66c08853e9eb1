"""What the HUB's blocks share (twin of ``hw/hub/ports.py``): the host's
response, the request fault, the opcode classes the sequencer and the
multicast register act on, and the layouts of two response words."""

from __future__ import annotations

from dataclasses import dataclass

from golden.isa import Fault, HostStatus, Opcode

READS = (Opcode.RD_OUT, Opcode.RD)
WRITES = (Opcode.WR_INP, Opcode.WR)
USES_VA = (Opcode.MAC, Opcode.RD, Opcode.WR)
#: STEP response data: bit r of the low half = request r ran the step;
#: bit r of the high half = request r faulted in it.
STEP_MASK_BITS = 128
#: PROG-COMMIT fault response data: the fault code in the low bits, the
#: index of the first bad word from this bit up.
COMMIT_INDEX_SHIFT = 8


class DpaFault(Exception):
    """A request fault (strict mode). ``code`` is the ``Fault`` the RTL
    reports for the request; ``request`` is its id (None: the program)."""

    def __init__(self, code: Fault, request: int | None, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code, self.request = code, request


@dataclass(frozen=True)
class Response:
    code: HostStatus
    data: int = 0
