"""Dynamic Command Scheduling (PIMphony §V, DESIGN.md §2.2), cycle by cycle.

The rules (docs/scheduling.md has the prose):

Decode (one command per cycle)
    The head of the command FIFO is decoded in the first cycle it is
    visible. A malformed command is rejected there (a WR/WR-INP still sends
    a *discard* entry down the I/O queue so its write beat is consumed in
    stream order). A good command takes its ID, reads the D-Table entry of
    each GBuf/OBuf entry it touches as its dependency ID (DID), writes its
    own ID there, and enters its queue, issuable from the next cycle:

    * compute queue: MAC;
    * I/O queue: WR-INP, RD-OUT, and the normal RD/WR. RD/WR are fences:
      they are decoded only into empty queues, and nothing is decoded behind
      one until it has issued (bank contents are not tracked by the tables).

    Decode waits while the target queue is full (occupancy at the start of
    the cycle).

ID wrap-around (16-bit IDs; the tables compare IDs for equality)
    * A DID whose command the S-Table shows issued and complete is dropped
      at decode: the new command has no dependency on that entry.
    * A decoded command whose ID equals an S-Table entry it touches clears
      that entry's valid bit: the entry holds a stale command 2^16 IDs
      older, which must not be mistaken for the new one (an issue in the
      same cycle writes the entry and wins).
    * Decode waits while a queue head is ``WINDOW`` (2^15) or more IDs
      older than the next command, so no two commands in flight share an
      ID, however long a head stalls (a host that stops popping read data).

Issue (one command-bus slot per cycle)
    The compute head goes first; the I/O head may issue when the compute
    head does not. Each head issues its PRE/ACT, then itself, under the bank
    rules of ``BankTimer``; no static gaps. A command also needs, for every
    entry with a DID, the S-Table to show that DID as the last issued
    command and the cycle to have reached that access's completion:

    =========================  ===========================
    access (issued in ``c``)   completes
    =========================  ===========================
    WR-INP writes GBuf         ``c + t_wr_inp``
    MAC reads GBuf             ``c + 1``
    MAC writes OBuf            ``c + t_mac``; a MAC on the same entry
                               may follow from ``c + tCCD`` (is-MAC flag)
    RD-OUT reads OBuf          ``c + t_rd_out``
    =========================  ===========================

    WR-INP and WR also need their write beat, RD-OUT and RD a read credit,
    as under the static policy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from golden.banks import BankTimer
from golden.isa import REFRESH_ID, ErrorCode, Opcode
from golden.streams import CMD_ID_MOD, Command, Streams, TraceEntry

_IO = (Opcode.WR_INP, Opcode.RD_OUT, Opcode.RD, Opcode.WR)
_FENCES = (Opcode.RD, Opcode.WR)
STALL_LIMIT = 1 << 20  # cycles without progress before the model reports a hang
WINDOW = CMD_ID_MOD // 2  # the oldest queued command is fewer IDs back than this
NEVER = 1 << 62  # a wait with no cycle of its own: it ends with another command's progress


@dataclass
class Entry:
    cmd: Command
    op: Opcode | None  # None: a discard entry for a rejected write
    cmd_id: int
    ready: int  # first cycle it may issue
    seq: int  # position in the stream (the ID before the wrap)
    did_gbuf: int | None = None
    did_obuf: int | None = None


@dataclass
class Slot:
    """An S-Table entry: the last issued access and when it completes.
    ``cmd_id`` None: the valid bit is clear."""

    cmd_id: int | None = None
    complete: int = 0
    is_mac: bool = False
    mac_ok: int = 0  # MAC-after-MAC on this OBuf entry: tCCD, not t_mac


@dataclass
class Tables:
    """The D-Table and the S-Table (``hw.dcs.Tables`` holds them in bits):
    per GBuf and per OBuf entry, the D-Table the ID of the last command
    decoded on it (None: invalid), the S-Table the last access issued on it
    (a ``Slot``)."""

    d_gbuf: list[int | None]
    d_obuf: list[int | None]
    s_gbuf: list[Slot]
    s_obuf: list[Slot]

    @classmethod
    def empty(cls, cfg) -> Tables:
        return cls([None] * cfg.gbuf_entries, [None] * cfg.obuf_entries,
                   [Slot() for _ in range(cfg.gbuf_entries)],
                   [Slot() for _ in range(cfg.obuf_entries)])


def table_bits(cfg) -> dict:
    """Storage of the D-Table and S-Table of one controller, in bits, as the
    RTL holds them (``hw.dcs.Tables``; ``tests/test_hw_dcs.py`` checks the
    two agree).

    Per GBuf and per OBuf entry: the D-Table keeps a valid bit and the ID of
    the last decoded accessor; the S-Table a valid bit, the ID of the last
    issued one and a completion down-counter (wide enough for the longest
    latency). OBuf entries add the is-MAC flag and a tCCD counter."""
    tm = cfg.timing
    id_bits = (CMD_ID_MOD - 1).bit_length()

    def down_counter(limit):  # hw.util.counter: holds limit - 1
        return (max(limit, 2) - 1).bit_length()

    counter = down_counter(max(tm.t_wr_inp, tm.t_mac, tm.t_rd_out))
    gbuf = cfg.gbuf_entries * ((1 + id_bits) + (1 + id_bits + counter))
    obuf = cfg.obuf_entries * ((1 + id_bits) + (1 + id_bits + counter + 1
                                                + down_counter(tm.t_ccd)))
    return {"gbuf_entries": cfg.gbuf_entries, "obuf_entries": cfg.obuf_entries,
            "id_bits": id_bits, "bits": gbuf + obuf, "bytes": (gbuf + obuf + 7) // 8}


#: The paper's form of the tables (PIMphony §V, DESIGN.md §2.2): per GBuf
#: and per OBuf entry the D-Table's last command ID, the S-Table's ID and
#: expiration timestamp, and an is-MAC flag per OBuf entry. The paper gives
#: no widths; these two are project assumptions: with them the reference
#: buffers (GBuf 64, OBuf 8 entries) take 4,608 bits = 576 B without the
#: is-MAC flags, the figure REFERENCE.md reports, and 577 B with them.
PAPER_ID_BITS = 16
PAPER_TIMESTAMP_BITS = 32


def paper_table_bits(cfg, id_bits: int = PAPER_ID_BITS,
                     timestamp_bits: int = PAPER_TIMESTAMP_BITS) -> dict:
    """Storage of the D-Table and S-Table in the paper's form (IDs and
    absolute expiration timestamps), in bits; ``table_bits`` is the
    project's form (valid bits and down-counters)."""
    entries = cfg.gbuf_entries + cfg.obuf_entries
    bits = entries * (id_bits + id_bits + timestamp_bits) + cfg.obuf_entries
    return {"id_bits": id_bits, "timestamp_bits": timestamp_bits, "bits": bits,
            "bytes": (bits + 7) // 8}


def run_dynamic(model, streams: Streams):
    cfg = model.config
    if cfg.policy != "dcs":
        raise NotImplementedError(f"policy {cfg.policy!r} is not modelled yet")
    tm = cfg.timing
    banks = BankTimer(cfg.banks, tm, bank_groups=cfg.bank_groups)
    tables = Tables.empty(cfg)
    d_gbuf, d_obuf, s_gbuf, s_obuf = tables.d_gbuf, tables.d_obuf, tables.s_gbuf, tables.s_obuf
    compute_q: deque[Entry] = deque()
    io_q: deque[Entry] = deque()
    fence = False  # an RD/WR waits in the I/O queue
    i = 0
    fifo_visible = 0  # the next FIFO entry is visible from this cycle (after a pop)
    c, last_progress = 0, 0

    # A cycle in which nothing issues and nothing is decoded changes no
    # state, so the next cycles are the same until a waited-for cycle comes:
    # ``wake`` collects, over everything that failed this cycle, the cycle
    # its first failing condition clears (NEVER: it waits for another
    # command's progress). The loop then jumps there; the trace is the same
    # as stepping every cycle, only faster.
    wake = NEVER

    def later(t: int) -> bool:
        """``t > now`` for a waited-for cycle ``t``; notes it for ``wake``."""
        nonlocal wake
        if t > c:
            wake = min(wake, t)
            return True
        return False

    def deps_met(e: Entry, now: int) -> bool:
        if e.did_gbuf is not None:
            s = s_gbuf[e.cmd.gbuf_idx]
            if s.cmd_id != e.did_gbuf or later(s.complete):
                return False
        if e.did_obuf is not None:
            s = s_obuf[e.cmd.out_idx]
            done = s.mac_ok if (s.is_mac and e.op == Opcode.MAC) else s.complete
            if s.cmd_id != e.did_obuf or later(done):
                return False
        return True

    def waits_for_issue(e: Entry) -> bool:
        """A dependency of ``e`` names a command that has not issued."""
        return ((e.did_gbuf is not None and s_gbuf[e.cmd.gbuf_idx].cmd_id != e.did_gbuf)
                or (e.did_obuf is not None and s_obuf[e.cmd.out_idx].cmd_id != e.did_obuf))

    def access_ok(e: Entry, now: int, device: bool = True) -> bool:
        """``e``'s access (its row open, in its mode) is allowed now: the
        device rules (unless not ``device``), its dependencies, its write
        beat or read credit."""
        if device and later(banks.earliest(e.op, banks.touched(e.op, e.cmd))):
            return False
        if not deps_met(e, now):
            return False
        if e.op in (Opcode.WR_INP, Opcode.WR) and later(streams.wdata_ready(now)):
            return False
        return not (e.op in (Opcode.RD_OUT, Opcode.RD) and later(streams.read_credit_ready(now)))

    def switch_ready(e: Entry, now: int) -> bool:
        """What a mode switch for ``e`` switches for (its PRE, ACT or
        access) would be allowed now but for the mode."""
        served = banks.served_action(e.op, e.cmd)
        return not later(banks.earliest(*served)) if served else access_ok(e, now)

    def holds_mode(q: deque[Entry], now: int) -> bool:
        """The head of ``q`` (the I/O queue) holds the device's mode: its
        access is in the current mode and waits for nothing but the device's
        spacing (or it consumes a discarded beat that is there)."""
        if not q or later(q[0].ready):
            return False
        e = q[0]
        if e.op is None:
            return not later(streams.wdata_ready(now))
        return banks.next_action(e.op, e.cmd) is None and access_ok(e, now, device=False)

    def try_issue(q: deque[Entry], now: int, switch_ok: bool = True) -> bool:
        """Issue the head's next action: its mode switch (unless not
        ``switch_ok``), PRE, ACT, or its access."""
        nonlocal fence
        if not q or later(q[0].ready):
            return False
        e = q[0]
        if e.op is None:  # discard: consume the rejected write's beat
            if later(streams.wdata_ready(now)):
                return False
            streams.take_wdata(now)
            q.popleft()
            return True
        action = banks.next_action(e.op, e.cmd)
        if action is not None:
            kind, targets = action
            if kind == Opcode.MODE and not (switch_ok and switch_ready(e, now)):
                return False
            if later(banks.earliest(kind, targets)):
                return False
            banks.apply(kind, targets, now, e.cmd.row)
            streams.trace.append(TraceEntry(e.cmd_id, kind, now))
            return True
        if not access_ok(e, now):
            return False
        targets = banks.touched(e.op, e.cmd)
        beat = streams.take_wdata(now)[1] if e.op in (Opcode.WR_INP, Opcode.WR) else None
        banks.apply(e.op, targets, now, e.cmd.row)
        streams.trace.append(TraceEntry(e.cmd_id, e.op, now))
        streams.issue(now, model._execute(e.cmd, beat))
        if e.op == Opcode.WR_INP:
            s_gbuf[e.cmd.gbuf_idx] = Slot(e.cmd_id, now + tm.t_wr_inp)
        elif e.op == Opcode.MAC:
            s_gbuf[e.cmd.gbuf_idx] = Slot(e.cmd_id, now + 1)
            s_obuf[e.cmd.out_idx] = Slot(e.cmd_id, now + tm.t_mac, True, now + tm.t_ccd)
        elif e.op == Opcode.RD_OUT:
            s_obuf[e.cmd.out_idx] = Slot(e.cmd_id, now + tm.t_rd_out)
        else:
            fence = False
        q.popleft()
        return True

    def try_refresh(now: int) -> bool:
        """Issue the due refresh's next action (mode switch, PRE of the open
        rows, REF) if the device rules allow it now."""
        kind, targets = banks.refresh_action()
        if later(max(banks.earliest(kind, targets), banks.refresh_switch_ready())):
            return False
        banks.apply(kind, targets, now, 0)
        streams.trace.append(TraceEntry(REFRESH_ID, kind, now))
        return True

    def dependency(d_table, s_table, idx: int, cmd_id: int, now: int) -> int | None:
        """Decode: read the D-Table (dropping a DID that has completed),
        clear a stale S-Table alias of the new ID, write the new ID."""
        did, slot = d_table[idx], s_table[idx]
        if did is not None and slot.cmd_id == did and now >= slot.complete:
            did = None
        if slot.cmd_id == cmd_id:
            slot.cmd_id = None
        d_table[idx] = cmd_id
        return did

    while streams.more(i) or compute_q or io_q:
        occupancy = (len(compute_q), len(io_q))  # before this cycle's issue
        oldest = min((q[0].seq for q in (compute_q, io_q) if q), default=i)
        wake = NEVER
        # The compute head first; it does not switch the device's mode while
        # the I/O head's access is in the current mode and waits only for the
        # device's spacing (holds_mode), and the
        # I/O head switches it only while the compute queue is empty or its
        # head waits for a command that has not issued (an I/O command).
        # A due refresh has the command bus until its REF issues (decode goes on).
        if banks.refresh_pending(c):
            progressed = try_refresh(c)
        else:
            if banks.refresh_due is not None:
                later(banks.refresh_due)
            progressed = (try_issue(compute_q, c, switch_ok=not holds_mode(io_q, c))
                          or try_issue(io_q, c, switch_ok=not compute_q
                                       or waits_for_issue(compute_q[0])))

        arrival = streams.arrival(i, c) if streams.more(i) else None
        if (arrival is not None and not later(arrival + 1) and not later(fifo_visible)
                and not fence and i - oldest < WINDOW):
            cmd = streams.command(i)
            cmd_id = i % CMD_ID_MOD
            code, message = model.check(cmd)
            decoded = False
            if code != ErrorCode.NONE:
                if cmd.opcode in (Opcode.WR_INP, Opcode.WR):
                    if occupancy[1] < cfg.io_depth:
                        model._record_error(streams, cmd_id, code, message)
                        io_q.append(Entry(cmd, None, cmd_id, c + 1, i))
                        decoded = True
                else:
                    model._record_error(streams, cmd_id, code, message)
                    decoded = True
            else:
                op = Opcode(cmd.opcode)
                is_io = op in _IO
                room = occupancy[1] < cfg.io_depth if is_io else occupancy[0] < cfg.compute_depth
                if op in _FENCES:
                    room = occupancy == (0, 0)
                if room:
                    e = Entry(cmd, op, cmd_id, c + 1, i)
                    if op in (Opcode.WR_INP, Opcode.MAC):
                        e.did_gbuf = dependency(d_gbuf, s_gbuf, cmd.gbuf_idx, cmd_id, c)
                    if op in (Opcode.MAC, Opcode.RD_OUT):
                        e.did_obuf = dependency(d_obuf, s_obuf, cmd.out_idx, cmd_id, c)
                    (io_q if is_io else compute_q).append(e)
                    fence = op in _FENCES
                    decoded = True
            if decoded:
                streams.popped(i, c)
                i += 1
                fifo_visible = c + 1
                progressed = True
        if progressed:
            last_progress = c
            c += 1
            continue
        if (compute_q or io_q) and wake - last_progress > STALL_LIMIT:
            raise RuntimeError(f"DCS model made no progress for {STALL_LIMIT} cycles after "
                               f"cycle {last_progress}: compute head "
                               f"{compute_q[0] if compute_q else None}, "
                               f"I/O head {io_q[0] if io_q else None}")
        c = wake
    return streams.result(c)
