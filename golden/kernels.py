"""Channel-level command streams for attention and FC kernels.

Each builder returns the commands of one channel for one kernel, with the
weights (K, V, W) already resident in the banks: only timing is studied, so
write beats are zeros. Buffer slots alternate between the two halves of
GBuf and OBuf, so the same stream also lets the ping-pong baseline overlap.

Mappings (PIMphony §IV–V, REFERENCE.md):

* **QK^T** (row-reuse for GQA): bank ``b`` holds the keys of its tokens,
  ``d_head / 16`` words per key, ``cols / words`` keys per bank per DRAM
  row. For each row, every query of the group runs over the open row before
  the next row: per token slot, ``words`` MACs into one OBuf entry, then an
  RD-OUT (one score per bank).
* **SV**: bank ``b`` holds ``d_head / banks`` output dimensions; a word is 16
  tokens of one dimension. For each row and query, the row's scores are
  written to GBuf (WR-INP), then per dimension the row's token chunks
  accumulate into one OBuf entry, read out as a partial sum (reduced later
  in the HUB).
* **FC GEMV** ``y = W x``: bank ``b`` holds output ``16 g + b`` of group
  ``g``; a matrix row spans ``d_in / 16`` words over ``ceil(words / cols)``
  DRAM rows. The input stays in GBuf when it fits, else each DRAM-row
  segment of it is reloaded before its MACs.
"""

from __future__ import annotations

from dataclasses import dataclass

from golden.channel import Command, mac, rd_out, wr_inp
from golden.config import ChannelConfig
from golden.isa import LANES, Opcode


@dataclass
class Kernel:
    name: str
    commands: list[Command]
    wdata: list[int]
    rows: list[int]  # DRAM row visited, in order (a row switch = PRE + ACT)
    macs_per_row: list[int]


class _Builder:
    def __init__(self, cfg: ChannelConfig):
        self.cfg = cfg
        self.cmds: list[Command] = []
        self.wdata: list[int] = []
        self.rows: list[int] = []
        self.macs: list[int] = []
        half = cfg.obuf_entries // 2
        # alternate OBuf halves: 0, half, 1, half + 1, ...
        self.out_order = ([e for pair in zip(range(half), range(half, 2 * half), strict=True)
                           for e in pair] or [0]) + list(range(2 * half, cfg.obuf_entries))
        self.next_out = 0
        self.pending: int | None = None
        self.reloads = 0

    def out(self) -> int:
        o = self.out_order[self.next_out % len(self.out_order)]
        self.next_out += 1
        return o

    def reload(self, size: int) -> int:
        """WR-INP the next ``size``-entry input buffer; return its base entry.
        Successive buffers alternate GBuf halves."""
        k = self.reloads
        self.reloads += 1
        half = self.cfg.gbuf_entries // 2
        base = 0 if size > half else (k % 2) * half + ((k // 2) * size) % max(half - size + 1, 1)
        self.load(base, size)
        return base

    def load(self, base: int, n: int) -> None:
        for i in range(n):
            self.cmds.append(wr_inp(base + i))
            self.wdata.append(0)

    def mac(self, row: int, col: int, gbuf: int, out: int) -> None:
        if not self.rows or self.rows[-1] != row:
            self.rows.append(row)
            self.macs.append(0)
        self.macs[-1] += 1
        self.cmds.append(mac(row, col, gbuf, out))
        self.flush()

    def read_out(self, out: int) -> None:
        """RD-OUT of a finished group, deferred past the next group's first
        MAC (software pipelining: drain one half while the other computes)."""
        self.flush()
        self.pending = out

    def flush(self) -> None:
        if self.pending is not None:
            self.cmds.append(rd_out(self.pending))
            self.pending = None

    def kernel(self, name: str) -> Kernel:
        self.flush()
        return Kernel(name, self.cmds, self.wdata, self.rows, self.macs)


def _check(cfg: ChannelConfig, words: int, what: str) -> None:
    if words > cfg.gbuf_entries or words > cfg.cols:
        raise ValueError(f"{what}: {words} words per vector do not fit GBuf "
                         f"({cfg.gbuf_entries}) and a row ({cfg.cols})")


def qkt(cfg: ChannelConfig, d_head: int, group: int, tokens: int) -> Kernel:
    words = d_head // LANES
    _check(cfg, words, "QK^T")
    b = _Builder(cfg)
    keys_per_row = cfg.cols // words
    n_rows = -(-tokens // (cfg.banks * keys_per_row))
    resident = group * words <= cfg.gbuf_entries
    base = [q * words for q in range(group)] if resident else []
    if resident:
        b.load(0, group * words)
    for row in range(n_rows):
        for q in range(group):
            g = base[q] if resident else b.reload(words)
            for slot in range(keys_per_row):
                o = b.out()
                for w in range(words):
                    b.mac(row, slot * words + w, g + w, o)
                b.read_out(o)
    return b.kernel(f"qkt d{d_head} g{group}")


def sv(cfg: ChannelConfig, d_head: int, group: int, tokens: int) -> Kernel:
    dims = max(1, d_head // cfg.banks)  # output dimensions per bank
    chunks = cfg.cols // dims  # 16-token chunks per DRAM row
    _check(cfg, chunks, "SV")
    b = _Builder(cfg)
    n_rows = -(-tokens // (chunks * LANES))
    for row in range(n_rows):
        for _q in range(group):
            g = b.reload(chunks)
            for j in range(dims):
                o = b.out()
                for c in range(chunks):
                    b.mac(row, c * dims + j, g + c, o)
                b.read_out(o)
    return b.kernel(f"sv d{d_head} g{group}")


def fc(cfg: ChannelConfig, d_in: int, d_out: int) -> Kernel:
    words = d_in // LANES
    b = _Builder(cfg)
    segments = -(-words // cfg.cols)  # DRAM rows per matrix row
    resident = words <= cfg.gbuf_entries
    if resident:
        b.load(0, words)
    groups = -(-d_out // cfg.banks)
    for grp in range(groups):
        o = b.out()
        for seg in range(segments):
            n = min(cfg.cols, words - seg * cfg.cols)
            g = seg * cfg.cols if resident else b.reload(n)
            for w in range(n):
                b.mac(grp * segments + seg, w, g + w, o)
        b.read_out(o)
    return b.kernel(f"fc {d_in}x{d_out}")


def utilization_bound(cfg: ChannelConfig, kernel: Kernel) -> dict:
    """The most MAC utilization any scheduler could reach on this stream:
    MAC slots (MACs x the MAC spacing, ``Timing.mac_ccd``: tCCD, or tCCD_L
    where longer) over the busiest resource's cycles.

    * banks: each row visit costs tRCD + (MACs - 1) x that spacing before its last
      MAC, then its PRE (at least tRTP after that MAC, tRAS after the ACT),
      then tRP, and at least tRC from ACT to ACT; the last visit ends with
      its last MAC; all-bank MACs cannot overlap an activation;
    * command bus: one slot per command, PRE and ACT included;
    * data bus: one burst per WR-INP and RD-OUT (tCCD, or the register
      accesses' spacing ``t_ccd_reg`` where longer).

    Mode switches (``t_modch``) and refresh are not counted: how many a
    stream needs depends on the scheduler."""
    tm = cfg.timing
    ccd = tm.mac_ccd
    visits = len(kernel.rows)
    to_pre = max(1, tm.t_rtp)
    bank = sum(max(tm.t_rc, max(tm.t_ras, tm.t_rcd + (m - 1) * ccd + to_pre) + tm.t_rp)
               for m in kernel.macs_per_row[:-1])
    bank += tm.t_rcd + (kernel.macs_per_row[-1] - 1) * ccd + 1 if visits else 0
    commands = len(kernel.commands) + 2 * visits
    io = sum(c.opcode != Opcode.MAC for c in kernel.commands) * max(tm.t_ccd, tm.t_ccd_reg)
    macs = sum(kernel.macs_per_row)
    busiest = max(bank, commands, io)
    return {"bound_cycles": busiest, "bank_cycles": bank, "command_bus_cycles": commands,
            "data_bus_cycles": io, "macs": macs,
            "utilization_bound": round(macs * ccd / busiest, 4)}
