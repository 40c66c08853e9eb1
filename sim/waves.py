"""Waveform views that read like the hardware (docs/waveforms.md).

Everything here comes from the encoding table (``golden/isa.py``):

* **Translate filters** (``filter_<field>.txt``): GTKWave shows an opcode,
  an error code, a host operation, a response status, a fault, a request
  state or a DYN-MODI field by name. One file per enumerated field, one
  line per value (decimal, as the views display these fields).
* **Decoded payloads**: every flat payload port of a toplevel (a channel's
  command, trace and status words, the HUB's host call and response, its
  per-channel traces and debug command, the ALU channel's command) is split
  into its named fields, GTKWave bit extractions of the one vector, so the
  view shows ``opcode=MAC gbuf_idx=3 out_idx=1 row=5 col=12`` without any
  signal added to the hardware.
* **Saved views**, one per block (:data:`VIEWS`), written next to the
  waveform from the names the VCD holds, so the same views work on
  Icarus's and Verilator's waveforms (their names differ only in how an
  escaped identifier is written).

:func:`decode` reads the same fields back out of a VCD (the tests use it,
and so can a user's script).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from pathlib import Path

from golden import isa

#: Fields shown by name: field -> the enumeration of its values.
ENUMS: dict[str, type[enum.IntEnum]] = {
    "opcode": isa.Opcode, "err_code": isa.ErrorCode, "host_op": isa.HostOp,
    "rsp_code": isa.HostStatus, "fault": isa.Fault, "req_state": isa.ReqState,
    "field_sel": isa.ModiField,
}

#: Flat payload ports (by leaf name, a regular expression) and their fields,
#: LSB first; a command port's format is told by its width.
PAYLOADS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    (r"cmd__payload|dbg_cmd", (isa.COMMAND_FIELDS, isa.ALU_COMMAND_FIELDS)),
    (r"trace(_\d+)?__payload", (isa.TRACE_FIELDS,)),
    (r"status", (isa.STATUS_FIELDS,)),
    (r"host__payload", (isa.HOST_FIELDS,)),
    (r"rsp__payload", (isa.RESPONSE_FIELDS,)),
)

# GTKWave trace flags (its save-file format): hex, decimal, binary,
# right-justified, translated by a filter file; blank lines and group marks.
_HEX, _DEC, _BIN, _RJUST, _FTRANS = 0x2, 0x4, 0x8, 0x20, 0x2000
_BLANK, _GROUP_BEGIN, _GROUP_END = 0x200, 0x800000, 0x1000000


def filter_lines(field: str) -> list[str]:
    """The translate filter of ``field``: ``<value> <NAME>`` per value."""
    return [f"{int(v)} {v.name}" for v in ENUMS[field]]


def read_filter(path: Path) -> dict[int, str]:
    """A translate filter file back as {value: name}."""
    out = {}
    for line in Path(path).read_text().splitlines():
        value, name = line.split(maxsplit=1)
        out[int(value)] = name
    return out


def write_filters(folder: Path) -> dict[str, Path]:
    """Every translate filter into ``folder``; returns field -> file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for field in ENUMS:
        path = folder / f"filter_{field}.txt"
        path.write_text("\n".join(filter_lines(field)) + "\n")
        out[field] = path
    return out


_VECTOR = re.compile(r"^(?P<base>.*?)(\[(?P<msb>\d+):(?P<lsb>\d+)\])?$")


def _split(name: str) -> tuple[str, int]:
    """(name without its range, width) of a VCD signal name."""
    m = _VECTOR.match(name)
    if m["msb"] is None:
        return name, 1
    return m["base"], int(m["msb"]) - int(m["lsb"]) + 1


def _plain(name: str) -> str:
    """A name as both simulators would agree on it: Icarus writes escaped
    identifiers with their backslash, Verilator without."""
    return name.replace("\\", "")


def payload_format(name: str) -> tuple[str, ...] | None:
    """The fields of a flat payload port ``name`` (a VCD name with its
    range), or None."""
    base, width = _split(name)
    leaf = _plain(base).split(".")[-1]
    for pattern, formats in PAYLOADS:
        if re.fullmatch(pattern, leaf):
            for fields in formats:
                if isa.word_width(fields) == width:
                    return fields
    return None


def field_ranges(fields: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """field -> (lsb, width) in a word laid out as ``fields`` (LSB first)."""
    out, lsb = {}, 0
    for f in fields:
        out[f] = (lsb, isa.FIELDS[f].width)
        lsb += isa.FIELDS[f].width
    return out


#: Signal names (less a port prefix and an index) that hold an enumerated
#: field under another name.
_ENUM_NAMES = {"state": "req_state", "fault_code": "fault"}


def _enum_of(name: str) -> str:
    """The enumerated field a signal named ``name`` holds, or ``name``."""
    key = re.sub(r"\d+$", "", name.split("__")[-1])
    key = _ENUM_NAMES.get(key, key)
    return key if key in ENUMS else name


#: Toplevel scopes (left off an alias).
_TOPS = ("pim_tb", "pim_module", "pim_alu", "hub_play", "TOP")


@dataclass
class _Gtkw:
    """A GTKWave save file being written."""

    filters: dict[str, Path]
    lines: list[str]
    index: dict[str, int]

    def _flags(self, flags: int) -> None:
        self.lines.append(f"@{flags:x}")

    def comment(self, text: str) -> None:
        self._flags(_BLANK)
        self.lines.append(f"-{text}")

    def begin(self, title: str) -> None:
        self._flags(_GROUP_BEGIN | _BLANK)
        self.lines.append(f"-{title}")

    def end(self, title: str) -> None:
        self._flags(_GROUP_END | _BLANK)
        self.lines.append(f"-{title}")

    def _field_flags(self, field: str, width: int) -> int:
        field = _enum_of(field)
        if field in ENUMS:
            n = self.index.setdefault(field, len(self.index) + 1)
            self._flags(_FTRANS | _RJUST | _DEC)
            self.lines.append(f"^{n} {self.filters[field].resolve()}")
            return 0
        return _RJUST | (_BIN if width == 1 else _HEX)

    def signal(self, name: str) -> None:
        """``name``, shown as its path below its block (``compute_q0.cmd.opcode``)."""
        base, width = _split(name)
        plain = _plain(base)
        field = plain.split(".")[-1]
        flags = self._field_flags(field, width)
        if flags:
            self._flags(flags)
        parts = plain.split(".")
        for block in ("controller", "banks", "datapath", "decoder"):
            if block in parts[:-1]:
                parts = parts[len(parts) - parts[::-1].index(block):]
        alias = ".".join(parts[1:] if len(parts) > 1 and parts[0] in _TOPS else parts)
        self.lines.append(f"+{{{alias}}} {name}" if alias != field or "." in alias else name)

    def fields(self, name: str, fields: tuple[str, ...], prefix: str) -> None:
        """``name``'s fields as named bit extractions."""
        _, width = _split(name)
        for field, (lsb, w) in field_ranges(fields).items():
            flags = self._field_flags(field, w)
            if flags:
                self._flags(flags)
            bits = " ".join(f"({width - 1 - b}){name}" for b in range(lsb + w - 1, lsb - 1, -1))
            self.lines.append(f"#{{{prefix}.{field}}} {bits}")


#: The saved views: name -> (what it shows, [(group, [patterns])]). A
#: pattern is a regular expression on a signal's name with the toplevel's
#: scope and the range left off; signals are shown in name order within a
#: group (numbers in numeric order). Flat payload ports are shown decoded.
VIEWS: dict[str, tuple[str, list[tuple[str, list[str]]]]] = {
    "channel": ("the streams of the toplevel, every payload decoded", [
        ("clock", [r"clk", r"rst", r"cycle"]),
        ("commands in", [r"cmd__(valid|ready)", r"cmd__payload"]),
        ("write beats", [r"wdata__(valid|ready)"]),
        ("read beats", [r"rdata__(valid|ready)"]),
        ("issue trace", [r"trace__valid", r"trace__payload"]),
        ("status", [r"status", r"err_clear"]),
        ("host calls (HUB)", [r"host__(valid|ready)", r"host__payload"]),
        ("responses (HUB)", [r"rsp__(valid|ready)", r"rsp__payload"]),
        ("traces per channel (HUB)", [r"trace_\d+__valid", r"trace_\d+__payload"]),
        ("multicast (HUB)", [r"dbg_\w+"]),
    ]),
    "controller": ("a channel controller: command FIFO, queues and their heads, "
                   "D-Table and S-Table, open rows, timing counters, mode", [
        ("command FIFO and its head", [
            r"(.*\.)?cmd_fifo\.(r|w)_level", r"(.*\.)?controller\.head_(valid|id|pop|err)",
            r"(.*\.)?controller\.head\.\w+"]),
        ("I/O queue (io_q0 is its head)", [r"(.*\.)?controller\.io_(q_count|count)",
                       r"(.*\.)?controller\.io_q\d+\.(cmd\.\w+|cmd_id|dg_\w+|do_\w+|discard)"]),
        ("compute queue (compute_q0 is its head)", [
            r"(.*\.)?controller\.compute_(q_count|count)",
                           r"(.*\.)?controller\.compute_q\d+\.(cmd\.\w+|cmd_id|dg_\w+|do_\w+|"
                           r"discard)"]),
        ("D-Table (the last writer of each GBuf / OBuf entry)",
         [r"(.*\.)?controller\.dtab_\w+"]),
        ("S-Table (issued, still in flight)", [r"(.*\.)?controller\.stab_\w+"]),
        ("issue", [r"(.*\.)?controller\.issue\.(cmd\.\w+|cmd_id|err_code|act|pre|ref|mode|mac|"
                   r"wr_inp|rd_out|rd|wr)"]),
        ("banks: open rows and timing counters", [
            r"(.*\.)?controller\.banks\.(open|open_row\d+|touched|row_hit)",
            r"(.*\.)?controller\.banks\.(rcd|ras|rp|rtp|wr|faw)_cnt\d*",
            r"(.*\.)?controller\.(banks\.)?(ccd_cnt|gap\d_cnt|outstanding)"]),
        ("mode, refresh, fence", [r"(.*\.)?controller\.(fence|ref_pending|mode\w*|"
                                  r"banks\.mode\w*)"]),
    ]),
    "dcs": ("the DCS scheduler at a glance: the issue trace beside the queue heads, "
            "their dependencies, the D-Table and bank 0's row timing", [
        ("clock", [r"clk", r"cycle"]),
        ("issue trace", [r"trace__valid", r"trace__payload"]),
        ("bank 0: open row and tRCD", [r"(.*\.)?controller\.banks\.(open|open_row0|rcd_cnt0)"]),
        ("compute queue head (compute_q0)", [
            r"(.*\.)?controller\.compute_q_count",
            r"(.*\.)?controller\.compute_q0\.(cmd\.(opcode|row|col|gbuf_idx|out_idx)|cmd_id|"
            r"dg_valid|dg_id|do_valid|do_id)"]),
        ("I/O queue head (io_q0)", [
            r"(.*\.)?controller\.io_q_count",
            r"(.*\.)?controller\.io_q0\.(cmd\.(opcode|gbuf_idx|out_idx)|cmd_id|dg_valid|dg_id)"]),
        ("D-Table: last writer of each GBuf entry", [r"(.*\.)?controller\.dtab_g\d+_(valid|id)"]),
    ]),
    "hub": ("the HUB: host interface, decoder, requests (T_cur, state), VA2PA, multicast "
            "register, GPR writes", [
        ("host interface", [r"host__(valid|ready)", r"host__payload", r"rsp__(valid|ready)",
                            r"rsp__payload", r"host\.fsm_state"]),
        ("decoder", [r"decoder\.(fsm_state|pc|in_loop|header|settled|fault|skip|dirty|u|"
                     r"advance|body_start|loop_end)",
                     r"decoder\.ctrl__(step|commit|done|ran|faulted)",
                     r"decoder\.push__(valid|ready)",
                     r"decoder\.push__payload\.(cmd\.\w+|mask|gpr|discard)"]),
        ("requests: T_cur, state, chunks, GPR base", [
            r"cbuf\.(t_cur|state|n_chunks|gpr_base|fault)\d+"]),
        ("VA2PA table and its lookup", [r"cbuf\.va2pa\d+_\d+", r"cbuf\.lookup__\w+"]),
        ("multicast register", [
            r"multicast\.(held\.(cmd\.\w+|mask|gpr|discard)|loaded|load|busy|free|grant|"
            r"cmd_acc|beats_due)", r"multicast\.cmd__\d+__(valid|ready)"]),
        ("GPR writes", [r"gpr\.(wr|host_wr|beat_wr|epu_wr)__(en|addr)"]),
        ("traces per channel", [r"trace_\d+__valid", r"trace_\d+__payload", r"dbg_\w+"]),
    ]),
    "alu": ("the JIT-Q ALU channel: its command, registers, lane shift counters", [
        ("clock", [r"clk", r"rst", r"cycle"]),
        ("commands in", [r"cmd__(valid|ready)", r"cmd__payload"]),
        ("issue trace and status", [r"trace__valid", r"trace__payload", r"status"]),
        ("registers (ALU a, register r)", [r"alu\d+_r\d+"]),
        ("lane shift counters (ALU a, lane i)", [r"alu\d+_cnt\d+"]),
        ("operands and result", [r"alu\d+_(a|b|ld|result)"]),
        ("banks: open rows and timing counters", [r"open", r"banks\.\w+_cnt\d*"]),
    ]),
}


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


#: A view is written only for a VCD with a signal its pattern matches (the
#: block is in the design): on the name with the toplevel's scope left off.
REQUIRES = {"channel": r".*", "controller": r"(.*\.)?controller\..*",
            "dcs": r"(.*\.)?controller\.compute_q0\..*",
            "hub": r"host__payload", "alu": r"alu\d+_r\d+"}


def view_signals(names: list[str], view: str) -> list[tuple[str, list[str]]]:
    """The groups of ``view`` with the VCD's signals each shows (groups
    that match nothing left out; nothing when the block is not in it)."""
    # each signal's name below its toplevel scope, as both simulators write it
    inner = {n: _plain(_split(n)[0]).split(".", 1)[1] for n in names
             if "." in n and not n.startswith("$")}
    need = re.compile(REQUIRES[view])
    if not any(need.fullmatch(rel) for rel in inner.values()):
        return []
    chosen: set[str] = set()
    out = []
    for title, patterns in VIEWS[view][1]:
        group = []
        for pattern in patterns:
            rx = re.compile(pattern)
            hits = [n for n, rel in inner.items() if n not in chosen and rx.fullmatch(rel)]
            # numbers in numeric order, an entry's opcode first
            for n in sorted(hits, key=lambda x: _natural(re.sub(
                    r"\.(cmd\.)?opcode(\[.*)?$", ".", _plain(x)))):
                group.append(n)
                chosen.add(n)
        if group:
            out.append((title, group))
    return out


def write_view(vcd: Path, view: str, names: list[str] | None = None,
               filters: dict[str, Path] | None = None) -> Path | None:
    """``<view>.gtkw`` beside ``vcd`` (None when the VCD has none of its
    signals)."""
    vcd = Path(vcd)
    if names is None:
        from vcdvcd import VCDVCD
        names = list(VCDVCD(str(vcd), only_sigs=True).signals)
    groups = view_signals(names, view)
    if not groups:
        return None
    filters = filters or write_filters(vcd.parent)
    header = [f'[dumpfile] "{vcd.resolve()}"', "[timestart] 0", "[size] 1400 900",
              "[signals_width] 330", "[sst_expanded] 0"]
    end = _end_time(vcd)
    if end:  # the whole run across the window's ~1,000 pixels
        # GTKWave's zoom for ~1,000 pixels; the offset measured on its
        # 3.3.118 with both simulators' VCDs (1 ps units)
        header.append(f"*{-math.log2(max(end, 1000) / 1000) - 7.6:.6f} -1")
    g = _Gtkw(filters, header + [f"[*] pimorch view '{view}': {VIEWS[view][0]}"], {})
    for title, group in groups:
        g.begin(title)
        for n in group:
            fields = payload_format(n)
            if fields is None:
                g.signal(n)
                continue
            prefix = _plain(_split(n)[0]).split(".")[-1].replace("__payload", "")
            g.comment(prefix)
            g.fields(n, fields, prefix)
        g.end(title)
    out = vcd.with_name(f"{view}.gtkw")
    out.write_text("\n".join(g.lines) + "\n")
    return out


def _end_time(vcd: Path) -> int | None:
    """The VCD's last timestamp (read from its tail)."""
    try:
        with open(vcd, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    times = re.findall(r"^#(\d+)", tail, re.M)
    return int(times[-1]) if times else None


def write_views(vcd: Path) -> list[Path]:
    """Every view the VCD has signals for, and the filters, beside it."""
    from vcdvcd import VCDVCD

    vcd = Path(vcd)
    names = list(VCDVCD(str(vcd), only_sigs=True).signals)
    filters = write_filters(vcd.parent)
    return [p for v in VIEWS if (p := write_view(vcd, v, names, filters)) is not None]


def open_commands(folder: Path) -> list[str]:
    """The command that opens each view of a run folder."""
    folder = Path(folder)
    return [f"gtkwave {folder / 'waves.vcd'} {p}" for p in sorted(folder.glob("*.gtkw"))]


def decode(vcd: Path, port: str = "trace__payload", valid: str | None = "trace__valid",
           clock: str = "clk", ready: str | None = None) -> list[dict]:
    """The decoded words of a toplevel payload port, one per rising clock
    edge where ``valid`` (and ``ready``, if given: a handshake) is high
    (every edge if ``valid`` is None): each a dict of its fields (names for
    enumerated fields, e.g. ``opcode``) with ``edge``, the clock period
    index from the first rising edge. Values are sampled just before the
    edge, as the flops capture them."""
    from vcdvcd import VCDVCD

    v = VCDVCD(str(vcd), signals=None, store_tvs=True)

    def top(leaf):
        hits = [n for n in v.signals if _plain(_split(n)[0]).split(".")[-1] == leaf
                and _plain(n).count(".") == 1 and not n.startswith("$")]
        if not hits:
            raise KeyError(f"{leaf} not a toplevel signal of {vcd}")
        return hits[0]

    name = top(port)
    fields = payload_format(name)
    if fields is None:
        raise KeyError(f"{name}: not a payload port of the encoding table")
    clk, word = v[top(clock)], v[name]
    ok = v[top(valid)] if valid else None
    rdy = v[top(ready)] if ready else None
    rising = [t for t, x in clk.tv if x == "1"]
    if len(rising) < 2:
        return []
    period = rising[1] - rising[0]
    out = []
    for t in rising:
        if ok is not None and ok[t - 1] != "1" or rdy is not None and rdy[t - 1] != "1":
            continue
        raw = word[t - 1]
        if not set(raw) <= {"0", "1"}:
            continue  # x or z
        entry = isa.unpack(fields, int(raw, 2))
        for f in entry:
            if f in ENUMS:
                try:
                    entry[f] = ENUMS[f](entry[f]).name
                except ValueError:
                    pass
        entry["edge"] = (t - rising[0]) // period
        out.append(entry)
    return out


def _xwd_to_png(xwd: Path, png: Path, crop: tuple[int, int] | None = None) -> None:
    """An X window dump (TrueColor, 24 or 32 bits a pixel, as ``xwd -root``
    writes under Xvfb) as a PNG, cropped to ``crop`` = (width, height)."""
    import numpy as np
    from PIL import Image

    data = Path(xwd).read_bytes()
    h = np.frombuffer(data[:100], ">u4")
    size, width, height, order = int(h[0]), int(h[4]), int(h[5]), int(h[7])
    bpp, stride, ncolors = int(h[11]), int(h[12]), int(h[19])
    masks = [int(m) for m in h[14:17]]
    if bpp != 32:
        raise ValueError(f"{xwd}: {bpp} bits a pixel (expected 32)")
    start = size + 12 * ncolors
    rows = np.frombuffer(data[start:start + stride * height], "<u4" if order == 0 else ">u4")
    px = rows.reshape(height, stride // 4)[:, :width]
    rgb = np.stack([(px & m) >> (m & -m).bit_length() - 1 for m in masks], -1).astype(np.uint8)
    if crop:
        rgb = rgb[:crop[1], :crop[0]]
    Image.fromarray(rgb, "RGB").save(png)


def screenshot(vcd: Path, gtkw: Path, png: Path, size: tuple[int, int] = (1400, 900),
               wait_s: float = 6.0, crop: tuple[int, int] | None = None) -> Path:
    """GTKWave showing the view ``gtkw`` of ``vcd``, captured as a PNG under a
    virtual display (docs/waveforms.md). Needs ``xvfb-run``, ``gtkwave``
    and ``xwd`` (Debian: xvfb, gtkwave, x11-apps); not used by the tests."""
    import shutil
    import subprocess
    import tempfile

    missing = [t for t in ("xvfb-run", "gtkwave", "xwd") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"screenshot needs {', '.join(missing)}: "
                           "apt-get install xvfb gtkwave x11-apps")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "screen.xwd"
        script = (f"gtkwave '{vcd}' '{gtkw}' >/dev/null 2>&1 & "
                  f"sleep {wait_s}; xwd -root -silent > '{dump}'; kill $! 2>/dev/null; true")
        subprocess.run(["xvfb-run", "-a", "-s", f"-screen 0 {size[0]}x{size[1]}x24", "sh",
                        "-c", script], check=True, timeout=wait_s + 60)
        _xwd_to_png(dump, Path(png), crop)
    return Path(png)


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.waves views RUN_FOLDER``: (re)write a run folder's
    views and filters; ``python -m sim.waves screenshot RUN_FOLDER VIEW
    OUT.png [WIDTH HEIGHT]``: a PNG of one view."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "views":
        for p in write_views(Path(args[1]) / "waves.vcd"):
            print(p)
        return 0
    if len(args) >= 4 and args[0] == "screenshot":
        folder = Path(args[1])
        crop = (int(args[4]), int(args[5])) if len(args) >= 6 else None
        print(screenshot(folder / "waves.vcd", folder / f"{args[2]}.gtkw", Path(args[3]),
                         crop=crop))
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
