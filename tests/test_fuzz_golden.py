"""Fuzz the golden model's Python API against its contract
(docs/bad-input.md): a builder or constructor either returns a valid value
or raises a ValueError (EncodingError, ConfigError, CommandError) whose
message names the field; never another exception (TypeError, KeyError,
IndexError, AttributeError, ...), never a silently truncated, wrapped or
aliased value. Runs with valid fields must complete. Hypothesis with a
fixed example budget (derandomized), so the suite's time stays bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from golden import mx, numerics
from golden.alu import AluConfig, alu
from golden.channel import ChannelModel, CommandError
from golden.config import (
    ChannelConfig,
    ConfigError,
    HubConfig,
    Timing,
    small_config,
    small_hub_config,
)
from golden.hub.module import Hub
from golden.hub.ports import STEP_MASK_BITS
from golden.hub.session import CapacityError, ChunkAllocator, QktLayout
from golden.isa import (
    ALU_COMMAND_FIELDS,
    ALU_FUNCTIONS,
    COMMAND_BITS,
    COMMAND_FIELDS,
    FIELDS,
    HOST_FIELDS,
    INSTR_BITS,
    ISA,
    EncodingError,
    HostOp,
    HostStatus,
    Level,
    Opcode,
    pack_instruction,
    unpack_alu,
    unpack_instruction,
    word_width,
)
from golden.streams import Command

FUZZ = settings(max_examples=150, deadline=10_000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INSTRUCTIONS = sorted(op for op, info in ISA.items() if info.level is not Level.INTERNAL)


def field_values(width: int):
    """A value for a ``width``-bit field: mostly valid (edges included),
    else out of range, a float, a bool, a string, None or a list."""
    top = (1 << width) - 1
    valid = st.one_of(st.integers(0, top), st.sampled_from([0, top]),
                      st.integers(0, min(top, 255)).map(np.uint16 if width >= 16 else int))
    invalid = st.one_of(st.integers(-(1 << 70), -1), st.integers(top + 1, top + (1 << 70)),
                        st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
                        st.none(), st.lists(st.integers(0, 3), max_size=2))
    return st.one_of(valid, valid, valid, invalid)


def fits(name: str, value) -> bool:
    """The contract's rule: an integer (not a bool) in [0, 2**width)."""
    ok_type = isinstance(value, int | np.integer) and not isinstance(value, bool)
    return ok_type and 0 <= int(value) < (1 << FIELDS[name].width)


@st.composite
def field_dicts(draw, names):
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    return {n: draw(field_values(FIELDS[n].width)) for n in chosen}


def expect_field_error(excinfo, values: dict) -> None:
    """The error names a field whose value breaks the rule."""
    bad = [n for n, v in values.items() if not fits(n, v)]
    assert bad, f"raised for valid fields {values}: {excinfo}"
    assert any(n in str(excinfo) for n in bad), (str(excinfo), bad)


@FUZZ
@given(data=st.data())
def test_instruction_words(data):
    """pack_instruction packs exactly the valid fields (and round-trips)
    and refuses the rest, naming the field; unknown fields are refused."""
    op = data.draw(st.sampled_from(INSTRUCTIONS))
    names = list(ISA[op].fields)
    values = data.draw(field_dicts(names))
    stray = data.draw(st.sampled_from([None, "stride", "bank", "nope"]))
    if stray is not None and stray not in names:
        values[stray] = 0
    try:
        word = pack_instruction(op, **values)
    except EncodingError as e:
        if stray is not None and stray not in names:
            assert "not in format" in str(e)
        else:
            expect_field_error(e, values)
        return
    assert all(fits(n, v) for n, v in values.items())
    got_op, fields = unpack_instruction(word)
    assert got_op == op and fields == {n: int(values.get(n, 0)) for n in names}


@FUZZ
@given(data=st.data())
def test_command_and_alu_words(data):
    """Command(...) and alu(...) hold exactly the valid fields."""
    values = data.draw(field_dicts(list(COMMAND_FIELDS[1:])))
    op = data.draw(st.sampled_from(list(Opcode)))
    try:
        cmd = Command(op, **values)
    except EncodingError as e:
        expect_field_error(e, values)
    else:
        assert all(fits(n, v) for n, v in values.items())
        assert Command.unpack(cmd.pack()) == cmd
        assert all(type(getattr(cmd, n)) is int or isinstance(getattr(cmd, n), Opcode)
                   for n in COMMAND_FIELDS)
    aop = data.draw(st.sampled_from(sorted(ALU_FUNCTIONS)))
    fn = data.draw(st.one_of(st.sampled_from(list(ALU_FUNCTIONS[aop])), field_values(4)))
    names = [n for n in ALU_COMMAND_FIELDS if n not in ("opcode", "alu_fn")]
    values = data.draw(field_dicts(names))
    try:
        word = alu(aop, fn, **values)
    except EncodingError as e:
        expect_field_error(e, {**values, "alu_fn": fn})
    else:
        assert fits("alu_fn", fn) and all(fits(n, v) for n, v in values.items())
        got = unpack_alu(word)
        assert got["opcode"] == aop and got["alu_fn"] == int(fn)
        assert all(got[n] == int(values.get(n, 0)) for n in names)


WORDS = st.one_of(st.integers(0, (1 << INSTR_BITS) - 1), st.integers(0, 1 << 60),
                  st.integers(-(1 << 130), -1), st.integers(1 << INSTR_BITS, 1 << 140),
                  st.floats(), st.booleans(), st.text(max_size=3))


@FUZZ
@given(word=WORDS)
def test_decoding_words(word):
    """Decoders take integers of their width and refuse anything else,
    naming the word; within the width only an undefined or internal opcode
    is refused."""
    is_int = isinstance(word, int) and not isinstance(word, bool)
    for decode, bits in ((unpack_instruction, INSTR_BITS), (Command.unpack, COMMAND_BITS),
                         (unpack_alu, word_width(ALU_COMMAND_FIELDS))):
        fits_width = is_int and 0 <= word < (1 << bits)
        try:
            decode(word)
        except EncodingError as e:
            if fits_width:
                assert decode is unpack_instruction and "opcode=" in str(e), (word, e)
            else:
                assert "word" in str(e), str(e)
        else:
            assert fits_width


HOST_OPS = st.sampled_from(list(HostOp))


@FUZZ
@given(data=st.data())
def test_hub_host_sequences(data):
    """Random host operation sequences (mostly in range, with the QK^T
    program among the instruction words) get a response every time; a
    value that does not fit a host-port field raises EncodingError naming
    it. Nothing else raises, nothing hangs."""
    hub_cfg = small_hub_config(data.draw(st.sampled_from(["static", "dcs"])))
    hub = Hub(hub_cfg)
    layout = QktLayout(hub_cfg, d_head=64)
    program = layout.program()
    if data.draw(st.booleans()):  # a committed program, so that steps run
        for i, word in enumerate(program):
            assert hub.host(HostOp.PROG_WRITE, arg_a=i, data=word).code == HostStatus.OK
        assert hub.host(HostOp.PROG_COMMIT, arg_a=len(program),
                        arg_b=layout.tokens_per_chunk).code == HostStatus.OK
        for req in range(data.draw(st.integers(0, 2))):  # requests with a chunk each
            assert hub.host(HostOp.ASSIGN, req, arg_a=data.draw(st.integers(1, 20)),
                            arg_b=64 * req).code == HostStatus.OK
            assert hub.host(HostOp.GROW, req, arg_a=req).code == HostStatus.OK
    small = st.integers(0, 40)
    valid = {"host_op": st.one_of(st.sampled_from([HostOp.ASSIGN, HostOp.GROW, HostOp.STEP,
                                                   HostOp.STEP]), HOST_OPS, st.integers(0, 15)),
             "req_id": st.integers(0, 6), "arg_a": small, "arg_b": small,
             "data": st.one_of(st.sampled_from(program), st.integers(0, (1 << 256) - 1))}
    ran = 0
    for _ in range(data.draw(st.integers(5, 30))):
        # at most one field of an operation out of its port width or mistyped
        bad = data.draw(st.sampled_from([None] * 6 + list(HOST_FIELDS)))
        values = {n: data.draw(field_values(FIELDS[n].width) if n == bad else valid[n])
                  for n in HOST_FIELDS}
        op, args = values.pop("host_op"), values
        try:
            rsp = hub.host(op, **args)
        except EncodingError as e:
            expect_field_error(e, {"host_op": op, **args})
            continue
        assert all(fits(n, v) for n, v in {"host_op": op, **args}.items())
        assert rsp.code in list(HostStatus)
        if op == HostOp.STEP:
            ran += bool(rsp.data & ((1 << STEP_MASK_BITS) - 1))
    event(f"steps that ran a request: {min(ran, 3)}{'+' if ran > 3 else ''}")


@st.composite
def commands(draw, cfg: ChannelConfig):
    """Commands whose fields fit the encoding, around the configuration's
    limits (so some are rejected by the channel)."""
    op = draw(st.sampled_from([*[o for o in Opcode if ISA[o].level is not Level.INTERNAL],
                               Opcode.WR_INP, Opcode.MAC, Opcode.MAC, Opcode.RD_OUT]))
    def index(limit):  # mostly in range, sometimes just past it or at the field's top
        return draw(st.one_of(st.integers(0, limit - 1), st.integers(0, limit - 1),
                              st.integers(0, limit - 1), st.just(limit)))
    return Command(op, bank=index(cfg.banks), row=index(cfg.rows), col=index(cfg.cols),
                   gbuf_idx=index(cfg.gbuf_entries), out_idx=index(cfg.obuf_entries))


@FUZZ
@given(data=st.data())
def test_channel_runs(data):
    """Any command stream whose fields fit runs to completion: rejected
    commands are recorded (or raise CommandError in strict mode) with the
    code check() gives; a missing write beat is a ValueError."""
    policy = data.draw(st.sampled_from(["static", "pingpong", "dcs"]))
    cfg = small_config().replace(policy=policy)
    cmds = data.draw(st.lists(commands(cfg), max_size=40))
    writes = sum(c.opcode in (Opcode.WR_INP, Opcode.WR) for c in cmds)
    n_beats = data.draw(st.sampled_from([writes, writes, max(writes - 1, 0)]))
    wdata = data.draw(st.lists(st.integers(0, (1 << 256) - 1), min_size=n_beats,
                               max_size=n_beats))
    strict = data.draw(st.booleans())
    model = ChannelModel(cfg, strict=strict)
    rejected = [i for i, c in enumerate(cmds) if model.check(c)[0]]
    try:
        result = model.run(cmds, wdata)
    except CommandError:
        assert strict and rejected
        return
    except ValueError as e:
        assert "write-data beat" in str(e) and n_beats < writes
        return
    assert not (strict and rejected)
    assert [i for i, _ in result.errors] == rejected
    event(f"ran {len(cmds) // 10 * 10}+ commands, {min(len(rejected), 2)}+ rejected, "
          f"{min(len(result.rdata), 2)}+ reads")


CONFIG_KEYS = {
    "banks": 8, "rows": 16, "cols": 8, "gbuf_entries": 16, "obuf_entries": 16,
    "cmd_depth": 10, "wdata_depth": 10, "rdata_depth": 10, "io_depth": 10,
    "compute_depth": 10, "bank_groups": 4, "slice_rows": 16,
}


def config_values(hi: int):
    return st.one_of(st.integers(-2, hi), st.integers(-2, hi), st.sampled_from([1 << 40, 2.0]),
                     st.floats(), st.booleans(), st.text(max_size=2), st.none())


@FUZZ
@given(data=st.data())
def test_configs(data):
    """ChannelConfig, Timing in a channel, HubConfig and AluConfig build or
    raise ConfigError (a ValueError) naming a key that was given."""
    keys = data.draw(st.lists(st.sampled_from(sorted(CONFIG_KEYS)), max_size=4, unique=True))
    kw = {k: data.draw(config_values(CONFIG_KEYS[k])) for k in keys}
    tkeys = data.draw(st.lists(st.sampled_from(["t_rcd", "t_ccd", "t_refi", "t_rfc", "t_faw",
                                                "t_ccd_l"]), max_size=2, unique=True))
    tkw = {k: data.draw(config_values(5000)) for k in tkeys}
    kw["policy"] = data.draw(st.sampled_from(["static", "pingpong", "dcs", "x", 3]))
    kw["dual_path"] = data.draw(st.sampled_from([False, True, 1]))
    try:
        cfg = ChannelConfig(timing=Timing(**tkw), **kw)
    except ConfigError as e:
        assert any(k in str(e) for k in [*kw, *tkw]), str(e)
        return
    hkw = {k: data.draw(config_values(hi)) for k, hi in
           data.draw(st.lists(st.sampled_from([("n_channels", 10), ("requests", 10),
                                               ("gpr_entries", 300), ("chunk_bytes", 1 << 16),
                                               ("instr_depth", 40), ("max_modis", 20)]),
                              max_size=3, unique=True))}
    try:
        HubConfig(channel=cfg, **hkw)
    except ConfigError as e:
        assert any(k in str(e) for k in [*hkw, "channel.cols", "chunk_bytes"]), str(e)
    akw = {k: data.draw(config_values(hi)) for k, hi in
           data.draw(st.lists(st.sampled_from([("pairs", 10), ("rows", 70), ("cols", 40),
                                               ("bank_groups", 5), ("cmd_depth", 5)]),
                              max_size=3, unique=True))}
    try:
        AluConfig(**akw)
    except ConfigError as e:
        assert any(k in str(e) for k in akw), str(e)
    except ValueError as e:  # the ALU channel's own timing rules
        assert "t_ccd" in str(e) or "t_modch" in str(e), str(e)


ARRAYS = st.one_of(
    st.lists(st.integers(-(1 << 33), 1 << 33), max_size=40).map(np.array),
    st.lists(st.integers(0, 0xFFFF), min_size=16, max_size=16).map(
        lambda x: np.array(x, np.uint16)),
    st.lists(st.integers(0, 0xFFFFFFFF), min_size=32, max_size=32).map(
        lambda x: np.array(x, np.uint32)),
    st.lists(st.floats(), max_size=20).map(np.array),
    st.integers(-5, 1 << 40), st.floats(), st.text(max_size=3), st.none(),
    st.just(np.zeros((0,), np.uint16)), st.just(np.zeros((2, 16), np.uint16)),
)


@FUZZ
@given(x=ARRAYS, fmt=st.sampled_from([mx.MX9, mx.MX6, mx.MX4, "MX9", None]),
       source=st.sampled_from(["bf16", "fp32", "fp8", 3]))
def test_numerics_and_mx(x, fmt, source):
    """Bit-pattern conversions take integer patterns of their width; MX
    quantization also a known format and source and whole blocks."""
    try:
        out = numerics.f32_to_bf16(x)
    except ValueError as e:
        assert "f32_to_bf16" in str(e)
    else:
        assert np.asarray(out).dtype == np.uint16
    try:
        t = mx.quantize(x, fmt, source)
    except ValueError as e:
        assert any(w in str(e) for w in ("source", "format", "axis", "patterns", "block")), str(e)
    else:
        assert isinstance(fmt, mx.MxFormat) and source in mx.SOURCES
        assert mx.dequantize(t).shape == np.asarray(x).shape


@FUZZ
@given(ops=st.lists(st.tuples(st.sampled_from(["assign", "grow", "release"]),
                              st.one_of(st.integers(-2, 5), st.floats(), st.none()),
                              st.one_of(st.integers(-3, 50), st.floats(), st.text(max_size=1))),
                    max_size=20),
       lazy=st.booleans())
def test_chunk_allocator(ops, lazy):
    """The allocator's operations raise ValueError (naming the request or
    the count) or CapacityError, and never lose or duplicate a chunk."""
    alloc = ChunkAllocator(8, 4, lazy=lazy, max_tokens=0 if lazy else 12)
    for name, req, tokens in ops:
        try:
            getattr(alloc, name)(*((req,) if name == "release" else (req, tokens)))
        except CapacityError:
            pass
        except ValueError as e:
            assert "request" in str(e) or "tokens" in str(e), str(e)
        held = [c for chunks in alloc.owned.values() for c in chunks]
        assert sorted(held + list(alloc.free)) == list(range(8))


def test_host_port_fields_are_the_encoding_tables():
    """The host port's checks use the table's widths (one source)."""
    hub = Hub(small_hub_config())
    for name in HOST_FIELDS[1:]:
        with pytest.raises(EncodingError, match=f"{name}="):
            hub.host(HostOp.GPR_READ, **{name: 1 << FIELDS[name].width})
