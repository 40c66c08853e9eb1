"""PIM-SHERPA weight layouts on LPDDR-PIM (DESIGN.md §2.7, REFERENCE.md).

The host sees weights in its own layout; the PIM units need another, and a
swizzled copy converts between them.

Address mapping (``AddressMap``)
    A physical byte address is ``byte (5 bits) | fields in `order`, LSB
    first``: with the default order ``("channel", "col", "bank", "row")``
    consecutive 32 B words go to successive channels, then columns of a
    row, then banks, then rows. Every field count is a power of two.

Host-friendly layout
    ``W[n_out][n_in]`` (BF16) row-major from byte address ``base``:
    element ``(r, k)`` at ``base + 2 (r n_in + k)``.

PIM-aware layout (``PimAwareLayout``, PIMnast-style)
    Each bank holds whole matrix rows: matrix row ``r`` is in global bank
    ``g = r % B`` (``B = channels x banks``; channel ``g % channels``, bank
    ``g // channels``) as local row ``i = r // B``. A bank's rows are stored
    as 256-bit (16 x BF16) bursts in column-major order: burst ``(i, j)``,
    holding ``W[r, 16 j : 16 j + 16]``, is bank word ``j R_b + i`` from
    ``first_row`` (``R_b`` rows per bank), i.e. DRAM row
    ``first_row + w // cols``, column ``w % cols``. One PIM pass reads a
    burst per bank and MACs it with input block ``j`` into output register
    ``i mod out_regs``, so ``R_b`` is padded to a multiple of ``out_regs``
    (``n_out`` to a multiple of ``B x out_regs``) and ``n_in`` to a multiple
    of 16; padding is zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import numerics
from golden.channel import ChannelModel, mac, rd_out, wr_inp
from golden.config import ChannelConfig
from golden.isa import LANES, Opcode

WORD_BYTES = 2 * LANES  # one 256-bit burst
FIELDS = ("channel", "bank", "row", "col")


def _log2(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{what}={n} must be a power of two")
    return n.bit_length() - 1


@dataclass(frozen=True)
class Geometry:
    """LPDDR5X-PIM as the host sees it (REFERENCE.md: four channels, 16
    banks per rank, 256-bit bursts)."""

    channels: int = 4
    banks: int = 16
    rows: int = 1 << 14
    cols: int = 64  # 32 B words per DRAM row (2 KB)

    @property
    def total_banks(self) -> int:
        return self.channels * self.banks

    @property
    def bytes(self) -> int:
        return self.channels * self.banks * self.rows * self.cols * WORD_BYTES


@dataclass(frozen=True)
class AddressMap:
    geometry: Geometry = Geometry()
    order: tuple[str, ...] = ("channel", "col", "bank", "row")

    def __post_init__(self):
        if sorted(self.order) != sorted(FIELDS):
            raise ValueError(f"order must list each of {FIELDS} once, not {self.order}")
        for name in FIELDS:
            _log2(self.counts[name], name)

    @property
    def counts(self) -> dict[str, int]:
        g = self.geometry
        return {"channel": g.channels, "bank": g.banks, "row": g.rows, "col": g.cols}

    def decode(self, addr):
        """Byte address (int or array) -> dict of channel, bank, row, col, byte."""
        addr = np.asarray(addr, dtype=np.int64)
        out = {"byte": addr & (WORD_BYTES - 1)}
        rest = addr >> _log2(WORD_BYTES, "word")
        for name in self.order:
            bits = _log2(self.counts[name], name)
            out[name] = rest & ((1 << bits) - 1)
            rest = rest >> bits
        if np.any(rest):
            raise ValueError("address beyond the memory")
        return out

    def encode(self, channel, bank, row, col, byte=0):
        fields = {"channel": channel, "bank": bank, "row": row, "col": col}
        addr, shift = np.asarray(byte, dtype=np.int64), _log2(WORD_BYTES, "word")
        for name in self.order:
            value = np.asarray(fields[name], dtype=np.int64)
            if np.any(value < 0) or np.any(value >= self.counts[name]):
                raise ValueError(f"{name} out of range (< {self.counts[name]})")
            addr = addr | (value << shift)
            shift += _log2(self.counts[name], name)
        return addr


def pim_padded(n_out: int, n_in: int, total_banks: int, out_regs: int = 8) -> tuple[int, int]:
    """(rows, columns) a ``n_out x n_in`` matrix occupies in the PIM-aware
    layout: rows to a multiple of ``total_banks x out_regs``, columns to a
    multiple of 16 (one burst)."""
    step = total_banks * out_regs
    return -(-n_out // step) * step, -(-n_in // LANES) * LANES


@dataclass(frozen=True)
class PimAwareLayout:
    amap: AddressMap
    n_out: int
    n_in: int
    out_regs: int = 8  # PIM output register file entries (REFERENCE.md)
    first_row: int = 0

    def __post_init__(self):
        if self.n_out < 1 or self.n_in < 1 or self.out_regs < 1:
            raise ValueError(f"bad shape {self.n_out} x {self.n_in} / out_regs {self.out_regs}")
        g = self.amap.geometry
        if self.first_row + self.dram_rows_per_bank > g.rows:
            raise ValueError(f"{self.n_out} x {self.n_in} needs {self.dram_rows_per_bank} rows "
                             f"per bank from row {self.first_row}; the banks have {g.rows}")

    @property
    def n_out_padded(self) -> int:
        return pim_padded(self.n_out, self.n_in, self.amap.geometry.total_banks,
                          self.out_regs)[0]

    @property
    def n_in_padded(self) -> int:
        return pim_padded(self.n_out, self.n_in, self.amap.geometry.total_banks,
                          self.out_regs)[1]

    @property
    def rows_per_bank(self) -> int:
        """R_b: matrix rows per bank, a multiple of out_regs."""
        return self.n_out_padded // self.amap.geometry.total_banks

    @property
    def blocks(self) -> int:
        return self.n_in_padded // LANES

    @property
    def words_per_bank(self) -> int:
        return self.rows_per_bank * self.blocks

    @property
    def dram_rows_per_bank(self) -> int:
        return -(-self.words_per_bank // self.amap.geometry.cols)

    @property
    def padding_bytes(self) -> int:
        return 2 * (self.n_out_padded * self.n_in_padded - self.n_out * self.n_in)

    def place(self, r, j):
        """(channel, bank, DRAM row, column) of burst ``(r, j)`` (arrays ok)."""
        g = self.amap.geometry
        r, j = np.asarray(r), np.asarray(j)
        gb, i = r % g.total_banks, r // g.total_banks
        w = j * self.rows_per_bank + i
        return gb % g.channels, gb // g.channels, self.first_row + w // g.cols, w % g.cols

    def word_addresses(self) -> np.ndarray:
        """Physical address of every burst, shape (n_out_padded, blocks)."""
        r, j = np.meshgrid(np.arange(self.n_out_padded), np.arange(self.blocks), indexing="ij")
        return self.amap.encode(*self.place(r, j))


def host_friendly(weights: np.ndarray, memory_bytes: int, base: int = 0) -> np.ndarray:
    """A memory image (uint16 per 2 bytes) with ``weights`` row-major at ``base``."""
    image = np.zeros(memory_bytes // 2, np.uint16)
    flat = np.ascontiguousarray(weights, dtype=np.uint16).ravel()
    if base % 2 or base // 2 + flat.size > image.size:
        raise ValueError("the matrix does not fit the memory at that base")
    image[base // 2: base // 2 + flat.size] = flat
    return image


def _gather_index(layout: PimAwareLayout, base: int) -> tuple[np.ndarray, np.ndarray]:
    """For every element of every PIM-aware burst: its index in the PIM
    image, and its index in the host image (-1 for padding)."""
    addrs = layout.word_addresses()  # (R, J)
    lanes = np.arange(LANES)
    dst = (addrs[:, :, None] // 2 + lanes).ravel()
    r = np.arange(layout.n_out_padded)[:, None, None]
    k = np.arange(layout.blocks)[None, :, None] * LANES + lanes
    src = base // 2 + r * layout.n_in + k
    src = np.where((r < layout.n_out) & (k < layout.n_in), src, -1).ravel()
    return dst, src


def swizzle(host_image: np.ndarray, layout: PimAwareLayout, base: int = 0,
            out: np.ndarray | None = None) -> np.ndarray:
    """Swizzled copy host-friendly -> PIM-aware (padding written as zero)."""
    dst, src = _gather_index(layout, base)
    out = np.zeros_like(host_image) if out is None else out
    out[dst] = np.where(src >= 0, host_image[np.maximum(src, 0)], 0)
    return out


def unswizzle(pim_image: np.ndarray, layout: PimAwareLayout, base: int = 0,
              out: np.ndarray | None = None) -> np.ndarray:
    """Swizzled copy PIM-aware -> host-friendly (padding dropped)."""
    dst, src = _gather_index(layout, base)
    out = np.zeros_like(pim_image) if out is None else out
    keep = src >= 0
    out[src[keep]] = pim_image[dst[keep]]
    return out


def gemv_channel_commands(layout: PimAwareLayout, c: int, gbuf_entries: int,
                          tiles: int | None = None) -> tuple[list, list[int]]:
    """Channel ``c``'s commands of ``y = W x`` on the PIM-aware layout, and
    the input block each write beat carries: per tile of ``out_regs``
    local rows, the input in chunks of ``gbuf_entries`` blocks (the input
    register file; written once when the whole input fits), each chunk's
    WR-INPs then, per block ``j`` and local row ``i``, a MAC of burst ``(i,
    j)`` into output register ``i mod out_regs``; after the tile's last
    chunk, its RD-OUTs. ``tiles``: only the first so many tiles (a prefix
    of the stream, for timing)."""
    g = layout.amap.geometry
    blocks = layout.blocks
    chunks = [range(a, min(a + gbuf_entries, blocks)) for a in range(0, blocks, gbuf_entries)]
    once = len(chunks) == 1
    cmds, beat_blocks = [], []
    if once:
        cmds += [wr_inp(j) for j in chunks[0]]
        beat_blocks += list(chunks[0])
    starts = range(0, layout.rows_per_bank, layout.out_regs)
    for t in starts[:tiles]:
        for chunk in chunks:
            if not once:
                cmds += [wr_inp(j - chunk.start) for j in chunk]
                beat_blocks += list(chunk)
            for j in chunk:
                for i in range(t, t + layout.out_regs):
                    _, _, row, col = layout.place(i * g.total_banks + c, j)
                    cmds.append(mac(int(row), int(col), j - chunk.start, i - t))
        cmds += [rd_out(o) for o in range(layout.out_regs)]
    return cmds, beat_blocks


def pim_gemv(pim_image: np.ndarray, layout: PimAwareLayout, x_bf16: np.ndarray,
             config: ChannelConfig) -> np.ndarray:
    """y = W x on the PIM-aware layout, one golden channel model per
    channel running ``gemv_channel_commands``. Returns y as BF16 bits
    (n_out,)."""
    return _run_gemv(pim_image, layout, x_bf16, config)


def _run_gemv(pim_image: np.ndarray, layout: PimAwareLayout, x_bf16: np.ndarray,
              config: ChannelConfig, delivered: list[list[bool]] | None = None) -> np.ndarray:
    """``pim_gemv``, each channel running only the commands ``delivered``
    marks (all of them when None)."""
    g = layout.amap.geometry
    if config.banks != g.banks or config.cols != g.cols or config.rows < g.rows:
        raise ValueError("the channel configuration must match the memory geometry")
    if layout.out_regs > config.obuf_entries:
        raise ValueError("the tile does not fit the OBuf")
    x = np.zeros(layout.n_in_padded, np.uint16)
    x[:len(x_bf16)] = x_bf16
    y = np.zeros(layout.n_out_padded, np.uint16)
    tiles = range(0, layout.rows_per_bank, layout.out_regs)
    for c in range(g.channels):
        ch = ChannelModel(config)
        rows_used = range(layout.first_row, layout.first_row + layout.dram_rows_per_bank)
        for b in range(g.banks):
            for row in rows_used:
                addrs = layout.amap.encode(c, b, row, np.arange(g.cols))
                ch.load_matrix(b, row, pim_image[(addrs[:, None] // 2 + np.arange(LANES))])
        cmds, beat_blocks = gemv_channel_commands(layout, c, config.gbuf_entries)
        if delivered is not None:
            cmds = [cmd for cmd, ok in zip(cmds, delivered[c], strict=True) if ok]
        beats = [numerics.lanes_to_word(x[j * LANES:(j + 1) * LANES]) for j in beat_blocks]
        result = ch.run(cmds, beats)
        for n, word in enumerate(result.rdata):
            t, o = divmod(n, layout.out_regs)
            i = tiles[t] + o
            lanes = numerics.words_to_lanes(word)
            for b in range(g.banks):
                y[i * g.total_banks + b * g.channels + c] = lanes[b]
    return y[:layout.n_out]


class HostCache:
    """The host's cache, as far as a PIM trigger sees it (REFERENCE.md:
    decode needs the weights in a non-cacheable region to trigger PIM):
    ``size_bytes`` in sets of ``ways`` lines of ``line_bytes``, LRU. A load
    of a line it holds hits: no DRAM access. A miss fills the line: every
    32 B burst of it is read from DRAM."""

    def __init__(self, size_bytes: int, ways: int = 16, line_bytes: int = 64):
        for name, v in (("size_bytes", size_bytes), ("ways", ways), ("line_bytes", line_bytes)):
            _log2(v, name)
        if line_bytes < WORD_BYTES or size_bytes < ways * line_bytes:
            raise ValueError(f"a {size_bytes} B cache of {ways} ways of {line_bytes} B lines "
                             f"(a line holds whole {WORD_BYTES} B bursts)")
        self.size_bytes, self.line_bytes, self.ways = size_bytes, line_bytes, ways
        self.n_sets = size_bytes // (ways * line_bytes)
        self.sets: list[dict[int, None]] = [{} for _ in range(self.n_sets)]

    def load(self, addr: int) -> bool:
        """Load byte ``addr``: True on a hit."""
        line = addr // self.line_bytes
        s = self.sets[line % self.n_sets]
        if line in s:
            del s[line]
            s[line] = None  # most recently used
            return True
        if len(s) >= self.ways:
            del s[next(iter(s))]  # the least recently used
        s[line] = None
        return False

    def flush(self) -> int:
        """Clean and invalidate every line; the lines it held."""
        held = sum(len(s) for s in self.sets)
        for s in self.sets:
            s.clear()
        return held


def host_reads(cache: HostCache, layout: PimAwareLayout) -> None:
    """The host's GEMM reading the matrix from a cacheable region (prefill
    on the one PIM-aware copy): every burst of every bank, in memory order,
    through ``cache``."""
    for addr in np.sort(layout.word_addresses().ravel()):
        cache.load(int(addr))


def mac_trigger_address(layout: PimAwareLayout, cmd, c: int) -> int:
    """The byte address whose DRAM read triggers channel ``c``'s all-bank
    MAC ``cmd`` (bank 0's burst at its row and column)."""
    return int(layout.amap.encode(c, 0, cmd.row, cmd.col))


def triggered_gemv(pim_image: np.ndarray, layout: PimAwareLayout, x_bf16: np.ndarray,
                   config: ChannelConfig, cache: HostCache | None = None
                   ) -> tuple[np.ndarray, dict]:
    """``pim_gemv`` as the host drives it: every command a host access, the
    channels' streams interleaved command by command. WR-INP and RD-OUT go
    to the PIM's registers (device memory, always delivered); a MAC is a
    load of its trigger address (``mac_trigger_address``) in the weights'
    region. Non-cacheable (``cache`` None): every load reaches DRAM and
    triggers its MAC. Cacheable: a load that hits ``cache`` never reaches
    DRAM, so its MAC is lost; a miss fills the line, and each burst of the
    line that is some channel's MAC at this step triggers that MAC (a later
    load of it hits). Returns (y as BF16 bits, the counts: MAC triggers,
    delivered, lost)."""
    g = layout.amap.geometry
    streams = [gemv_channel_commands(layout, c, config.gbuf_entries)[0]
               for c in range(g.channels)]
    delivered = [[cmd.opcode != Opcode.MAC or cache is None for cmd in st] for st in streams]
    macs = sum(cmd.opcode == Opcode.MAC for st in streams for cmd in st)
    if cache is not None:
        done = [[False] * len(st) for st in streams]
        for k in range(len(streams[0])):
            at = {mac_trigger_address(layout, st[k], c): c for c, st in enumerate(streams)
                  if st[k].opcode == Opcode.MAC}
            for addr in at:
                if cache.load(addr):
                    continue  # a hit: no DRAM read, no trigger
                first = addr - addr % cache.line_bytes
                for word in range(first, first + cache.line_bytes, WORD_BYTES):
                    hit = at.get(word)  # a burst of the line that is a MAC now
                    if hit is not None and not done[hit][k]:
                        delivered[hit][k] = done[hit][k] = True
    got = sum(ok for st, d in zip(streams, delivered, strict=True)
              for cmd, ok in zip(st, d, strict=True) if cmd.opcode == Opcode.MAC)
    y = _run_gemv(pim_image, layout, x_bf16, config, delivered)
    return y, {"mac_triggers": macs, "delivered": got, "lost": macs - got}


def host_gemv(host_image: np.ndarray, n_out: int, n_in: int, x_bf16: np.ndarray,
              base: int = 0) -> np.ndarray:
    """The host's GEMV on the host-friendly layout in the PIM's arithmetic
    (golden.numerics: 16-lane products, pairwise tree, FP32 accumulation
    block by block, RNE to BF16): the bit-exact reference for pim_gemv."""
    blocks = -(-n_in // LANES)
    w = np.zeros((n_out, blocks * LANES), np.uint16)
    w[:, :n_in] = host_image[base // 2: base // 2 + n_out * n_in].reshape(n_out, n_in)
    x = np.zeros(blocks * LANES, np.uint16)
    x[:n_in] = x_bf16
    acc = np.zeros(n_out, np.uint32)
    for j in range(blocks):
        acc = numerics.mac(acc, w[:, j * LANES:(j + 1) * LANES], x[j * LANES:(j + 1) * LANES])
    return numerics.f32_to_bf16(acc)
