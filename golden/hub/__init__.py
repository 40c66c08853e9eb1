"""Dynamic PIM Access: the HUB (DESIGN.md §2.1, §2.3; docs/dpa.md), one
block per module as in its RTL twin ``hw/hub/``: ``module`` (``Hub``: the
host interface over the blocks and the channel models), ``ibuf``
(instruction buffer, program format, commit check), ``cbuf``
(configuration buffer and VA2PA), ``decoder`` (the walk of a step),
``sequencer`` (Op-size, translation, range checks), ``multicast``
(emissions and their delivery), ``epu`` (softmax and reduction on the
GPR: numerics and cycles), ``ports`` (what they share); and the
host side, ``session`` (chunk allocation, the QK^T layout and sessions),
``lowering`` (attention and FC GEMVs lowered to DPA programs) and
``decode`` (a small transformer decoded token by token on the module).

This is the specification ``hw/hub/`` meets. A DPA program is a list of
``INSTR_BITS`` instruction words (``golden.isa``) in the instruction buffer.
Each decode step (``HostOp.STEP``) runs it once for every ACTIVE request not
in the STEP's skip mask (its ``data``), in request order; then every request
that ran gets ``T_cur += 1``.

Program
    Channel instructions (WR-INP, MAC, RD-OUT, RD, WR), loops, and (a HUB
    built with an EPU, ``HubConfig.epu``) EPU instructions outside loops::

        DYN-LOOP body_len=L t_div=D    the next L words are the body
          DYN-MODI target=k field=F stride=s   (zero or more, first in the body)
          ...channel instructions...            (at least one)

    The body repeats while ``tok < T_cur``, ``tok = 0, D, 2D, ...`` (so
    ``ceil(T_cur / D)`` times, none when T_cur is 0). ``target`` is an offset
    in the body (0: the word after DYN-LOOP). In iteration ``i`` the target's
    field is advanced by ``i * s``. ROW and COL both move the virtual word
    address ``va = row * cols + col`` (ROW by ``s * cols``). Loops do not nest.

Sequencer (Op-size ``n``; command ``u = 0 .. n-1``)
    MAC, RD, WR: ``va + u``; WR-INP, MAC: ``gbuf_idx + u``; RD-OUT:
    ``out_idx + u``. GPR: writes (WR-INP, WR) read ``gpr_base + gpr_addr + u``;
    reads (RD-OUT, RD) put channel ``c``'s beat in
    ``gpr_base + gpr_addr + u * n_channels + c``. RD and WR have no Op-size (1).

Translation (VA2PA)
    ``vchunk = va // (cols * chunk_rows)`` must be a mapped virtual chunk of
    the request; the command goes to physical row
    ``pchunk * chunk_rows + (va // cols) % chunk_rows``, column ``va % cols``.

Faults (``golden.isa.Fault``), per request, first one kept
    Program faults are found when the host commits the program (the first
    bad word, in order); a step then faults every ACTIVE request with that
    code before it issues anything. ``T_cur > n_chunks * tokens_per_chunk``
    faults the request before it issues anything (T_RANGE). While it runs, a
    command whose virtual chunk is not mapped (UNMAPPED) or whose GBuf, OBuf
    or GPR index is out of range (CMD_RANGE) faults it: that command and the
    rest of the request are not sent, and the OBuf entries it left dirty
    (MAC since their last RD-OUT) are drained with RD-OUTs whose beats are
    discarded, so the next request starts clean. A faulted request is skipped
    until the host clears it; other requests run normally.

Timing (cycle-exact with the RTL)
    STEP accepted in cycle ``s``. From ``s + 1`` the decoder visits request
    0, 1, ...: one cycle per request (its checks; a request that does not run
    costs just that cycle, as does a skipped one), then for a running request one cycle per DYN-LOOP
    and per DYN-MODI (first iteration only; later iterations jump back to the
    first channel instruction of the body), and one *push* per command into
    the decoded-command FIFO (``decode_depth`` entries): command ``k`` is
    pushed in the first cycle ``e_k >= t`` with room, ``e_k >= m_{k-Q} + 1``
    (``Q = decode_depth``), and the decoder goes on at ``e_k + 1``. The
    multicast register loads it in ``m_k = max(e_k + 1, A_{k-1})``, where
    ``A`` is the cycle the previous command was taken by its last channel,
    and offers it from ``m_k + 1``. A fault costs one cycle, then the drain
    visits each OBuf entry in one cycle (a push for a dirty one). After the
    last request the step ends once the FIFO and the register are empty and
    every read beat has reached the GPR.

    An EPU instruction (EPU_SOFTMAX, EPU_REDUCE; ``golden.hub.epu``) is
    range-checked when the decoder visits it in cycle ``t`` (CMD_RANGE:
    the request faults as above). One with work to do starts in ``b =
    max(t + 1, F, L)``, where ``F`` is the cycle the multicast register is
    free of the step's last command and ``L`` the first cycle every read
    beat of the step so far is in the GPR; it runs ``epu.cycles`` cycles
    and the decoder goes on at ``b + cycles``. A softmax of T_cur = 0 costs
    the visit's cycle only."""

from golden.hub.cbuf import ConfigBuffer, Request
from golden.hub.decoder import Decoder
from golden.hub.ibuf import (
    INSTR_BYTES,
    InstructionBuffer,
    ProgramCheck,
    check_program,
    disassemble,
    instr,
    program_bytes,
    unrolled_instructions,
)
from golden.hub.module import Hub, StepResult
from golden.hub.multicast import Emission
from golden.hub.ports import (
    COMMIT_INDEX_SHIFT,
    READS,
    STEP_MASK_BITS,
    USES_VA,
    WRITES,
    DpaFault,
    Response,
)
from golden.hub.sequencer import command
from golden.hub.session import (
    KEY_STAGING,
    CapacityError,
    ChunkAllocator,
    HostCall,
    QktLayout,
    QktSession,
    program_calls,
    qkt_session,
    status_fields,
)

__all__ = ["COMMIT_INDEX_SHIFT", "INSTR_BYTES", "KEY_STAGING", "READS", "STEP_MASK_BITS",
           "USES_VA", "WRITES", "CapacityError", "ChunkAllocator", "ConfigBuffer", "Decoder",
           "DpaFault", "Emission", "HostCall", "Hub", "InstructionBuffer", "ProgramCheck",
           "QktLayout", "QktSession", "Request", "Response", "StepResult", "check_program",
           "command", "disassemble", "instr", "program_bytes", "program_calls", "qkt_session",
           "status_fields", "unrolled_instructions"]
