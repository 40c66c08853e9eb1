"""Attention lowered to DPA programs (golden/hub/lowering.py), run on the
golden PIM module against numpy float32 attention: MHA and GQA, token
groups split across channels (G > 1) and dimensions over OBuf entries
(D > 1), requests of unequal length over stale memory; the layout's
limits; the program's size against the context length."""

import numpy as np
import pytest

from golden import numerics
from golden.config import HubConfig, small_config
from golden.hub import Hub, epu, instr
from golden.hub.decode import write_words
from golden.hub.lowering import (
    AttentionLayout,
    FcLayout,
    attention_epu_cycles,
    kv_image,
    small_attention_hub,
)
from golden.isa import LANES, HostOp, HostStatus, Opcode, unpack_instruction


def hub_of(n_channels=2, **kw):
    return small_attention_hub(n_channels).replace(**kw)


CH = hub_of().channel


def attention_f32(keys, values, queries):
    """numpy float32 attention of each query over BF16 keys and values."""
    k, v = (numerics.bf16_to_float(x).astype(np.float32) for x in (keys, values))
    out = []
    for q in queries:
        s = k @ numerics.bf16_to_float(q).astype(np.float32)
        p = np.exp(s - s.max())
        out.append((p / p.sum()) @ v)
    return np.array(out)


def fill_stale(h, rng):
    """Every row of ``h``'s channels holds old data, as chunks freed by
    earlier requests do."""
    for ch in h.channels:
        for b in range(CH.banks):
            for row in range(CH.rows):
                ch.rows[(b, row)] = numerics.float_to_bf16(rng.standard_normal((CH.cols, LANES)))


def run_attention(hub, layout, lengths, seed=0, stale=True):
    """One decode step of ``layout``'s program for requests of ``lengths``
    tokens: (Hub, per request the output words as floats, the reference)."""
    rng = np.random.default_rng(seed)
    h = Hub(hub, strict=True)
    if stale:
        fill_stale(h, rng)
    prog = layout.program()
    assert h.load_program(prog, layout.tokens_per_chunk).code == HostStatus.OK
    region = hub.gpr_entries // len(lengths)
    chunk = 0
    refs = []
    for r, t in enumerate(lengths):
        d = layout.d_head
        keys = numerics.float_to_bf16(rng.standard_normal((t, d)) * 0.5)
        values = numerics.float_to_bf16(rng.standard_normal((t, d)))
        queries = numerics.float_to_bf16(rng.standard_normal((layout.group, d)) * 0.5)
        assert h.host(HostOp.ASSIGN, r, t, r * region).code == HostStatus.OK
        for _ in range(-(-t // layout.tokens_per_chunk)):
            assert h.host(HostOp.GROW, r, chunk).code == HostStatus.OK
            chunk += 1
        for q, vec in enumerate(queries):
            for w in range(layout.words):
                h.host(HostOp.GPR_WRITE, arg_a=r * region + layout.query(q) + w,
                       data=numerics.lanes_to_word(vec[w * LANES:(w + 1) * LANES]))
        write_words(h, r, kv_image(layout, keys, values))
        refs.append(attention_f32(keys, values, queries))
    step = h.step()
    assert step.ran == list(range(len(lengths)))
    outs = []
    for r in range(len(lengths)):
        base = r * region
        outs.append(np.array([np.concatenate([
            numerics.bf16_to_float(h.gpr[base + w]) for w in layout.out_words(q)])
            for q in range(layout.group)]))
    return h, outs, refs, step


CASES = {  # d_head, channels, group, unroll: (G token groups, D dims per bank)
    "mha": (32, 2, 1, 1),  # G 1, D 1
    "gqa": (32, 2, 2, 1),
    "token-groups": (16, 2, 2, 1),  # G 2
    "dims-per-bank": (64, 2, 2, 1),  # D 2
    "unroll": (32, 2, 1, 2),
}


@pytest.mark.parametrize("case", CASES)
def test_attention_matches_numpy(case):
    """Every query's output within BF16 rounding of numpy float32 attention
    (scores, probabilities and partial sums are each rounded to BF16 once:
    a relative error of a few 2^-8 of the output's scale), for requests of
    37 and 70 tokens (partial iterations) over stale rows."""
    d_head, n, group, unroll = CASES[case]
    hub = hub_of(n)
    layout = AttentionLayout(hub, d_head, group=group, max_tokens=96, unroll=unroll)
    h, outs, refs, step = run_attention(hub, layout, [37, 70], seed=len(case))
    for r, (got, want) in enumerate(zip(outs, refs, strict=True)):
        scale = np.abs(want).max()
        err = np.abs(got - want).max() / scale
        assert err < 2 ** -5, f"{case}: request {r} relative error {err:.4f}"
    # the EPU ran each query's softmax and one reduction per request, for
    # the cycles the system model charges (attention_epu_cycles)
    ops = [op for _, op, _, _ in step.epu_runs]
    assert ops == ([Opcode.EPU_SOFTMAX] * group + [Opcode.EPU_REDUCE]) * 2
    for r, t in enumerate([37, 70]):
        ran = sum(c for req, _, _, c in step.epu_runs if req == r)
        assert ran == attention_epu_cycles(t, n, d_head, group, unroll) > 0, (case, r)


HFP_CASES = {  # d_head, channels, home channel, group, unroll
    "mha-ch0": (32, 2, 0, 1, 1),
    "gqa-ch1": (32, 2, 1, 2, 1),
    "d16-unroll2": (16, 2, 1, 2, 2),  # D 1, two score words an iteration
    "dims-per-bank": (64, 4, 3, 1, 1),  # D 4 on one channel of four
}


@pytest.mark.parametrize("case", HFP_CASES)
def test_head_first_attention_matches_numpy(case):
    """Head-first placement (HFP): the KV head on one channel of the module,
    every command to it alone, its score beats a GPR stride of
    ``n_channels`` apart, the softmax over them (span ``n_channels``), no
    reduction; the outputs within the same bound of numpy float32, for 37
    and 70 tokens over stale rows."""
    d_head, n, home, group, unroll = HFP_CASES[case]
    hub = hub_of(n)
    layout = AttentionLayout(hub, d_head, group=group, max_tokens=96, unroll=unroll,
                             channel=home)
    assert layout.hfp and layout.used == 1 and layout.gpr_stride == n
    prog = layout.program()
    h, outs, refs, step = run_attention(hub, layout, [37, 70], seed=len(case))
    for r, (got, want) in enumerate(zip(outs, refs, strict=True)):
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 2 ** -5, f"{case}: request {r} relative error {err:.4f}"
    # every command went to the home channel; the others saw nothing
    for c, stream in enumerate(h.streams):
        assert bool(stream) == (c == home), (c, len(stream))
    assert all(e.ch_mask == 1 << home for e in step.emissions)
    # the K and V words sit in that channel only
    assert {c for t in range(70) for c, _, _ in layout.key_words(t)} == {home}
    assert {layout.value_word(t, d)[0] for t in range(70) for d in range(d_head)} == {home}
    # per query one softmax with span n, and the cycles the lowering lists
    ops = [(op, f["span"]) for op, f in map(unpack_instruction, prog)
           if op in (Opcode.EPU_SOFTMAX, Opcode.EPU_REDUCE)]
    assert ops == [(Opcode.EPU_SOFTMAX, n)] * group
    for r, t in enumerate([37, 70]):
        ran = sum(c for req, _, _, c in step.epu_runs if req == r)
        assert ran == attention_epu_cycles(t, n, d_head, group, unroll, hfp=True) > 0
    # the result words are the home channel's beats, n apart
    assert np.diff(layout.out_words(0)).tolist() == [n] * (layout.words - 1)
    assert layout.out_words(0)[0] % n == home


def test_head_first_layouts_of_two_channels_share_a_chunk():
    """Two HFP requests on different channels may map the same physical
    chunks: each uses its own channel's part, so they run in turn on one
    HUB (a program per channel) without touching each other's KV."""
    hub = hub_of(2)
    rng = np.random.default_rng(7)
    h = Hub(hub, strict=True)
    fill_stale(h, rng)
    layouts = [AttentionLayout(hub, 32, group=1, max_tokens=96, channel=c) for c in (0, 1)]
    region = hub.gpr_entries // 2
    refs = []
    for r, lay in enumerate(layouts):
        keys = numerics.float_to_bf16(rng.standard_normal((50, 32)) * 0.5)
        values = numerics.float_to_bf16(rng.standard_normal((50, 32)))
        query = numerics.float_to_bf16(rng.standard_normal((1, 32)) * 0.5)
        assert h.host(HostOp.ASSIGN, r, 50, r * region).code == HostStatus.OK
        for k in range(-(-50 // lay.tokens_per_chunk)):
            assert h.host(HostOp.GROW, r, k).code == HostStatus.OK  # the same chunks
        for w in range(lay.words):
            h.host(HostOp.GPR_WRITE, arg_a=r * region + lay.query(0) + w,
                   data=numerics.lanes_to_word(query[0, w * LANES:(w + 1) * LANES]))
        write_words(h, r, kv_image(lay, keys, values))
        refs.append(attention_f32(keys, values, query))
    for r, lay in enumerate(layouts):
        assert h.load_program(lay.program(), lay.tokens_per_chunk).code == HostStatus.OK
        assert h.host(HostOp.STEP, data=1 << (1 - r)).code == HostStatus.OK  # the other skipped
        got = np.concatenate([numerics.bf16_to_float(h.gpr[r * region + w])
                              for w in lay.out_words(0)])
        err = np.abs(got - refs[r][0]).max() / np.abs(refs[r][0]).max()
        assert err < 2 ** -5, (r, err)


def test_a_wider_epu_shortens_its_passes_only():
    """``words_per_cycle`` divides the three passes over the score words
    (rounded up) and the reduction's reads; the fixed tail, tree and
    reciprocal stay. One word a cycle is the module's EPU. At T_cur 0 the
    softmaxes have nothing to do and the reduction still runs, as the
    decoder runs it."""
    t = np.array([0, 16, 1000, 4096])
    one = attention_epu_cycles(t, 16, 128, 4)
    wide = attention_epu_cycles(t, 16, 128, 4, words_per_cycle=16)
    red_one = 4 * 8 * 2 + epu.PASS_TAIL  # 4 heads x 8 words over G = 2 groups
    red = -(-(4 * 8 * 2) // 16) + epu.PASS_TAIL
    assert (one[0], wide[0]) == (red_one, red)
    w = -(-t[1:] // LANES)
    p = -(-w // 16) * 16
    soft = 2 * -(-w // 16) + -(-p // 16) + epu.SOFTMAX_FIXED
    assert (wide[1:] == 4 * soft + red).all()
    assert (one[1:] == 4 * (2 * w + p + epu.SOFTMAX_FIXED) + red_one).all()


def test_without_the_padding_stale_scores_leak_into_sv():
    """The softmax's padding is what keeps SV's last iteration clean: with
    op_size 1 the outputs are wrong over stale rows."""
    hub = hub_of(2)
    layout = AttentionLayout(hub, 32, group=1, max_tokens=96)

    def unpadded(word):
        op, f = unpack_instruction(word)
        return instr(op, **{**f, "op_size": 1}) if op == Opcode.EPU_SOFTMAX else word

    bad = _Patched(layout, [unpadded(w) for w in layout.program()])
    assert bad.program() != layout.program()
    _, outs, refs, _ = run_attention(hub, bad, [37], seed=3)
    err = np.abs(outs[0] - refs[0]).max() / np.abs(refs[0]).max()
    assert err > 2 ** -3, err


class _Patched:
    """``layout`` with its program replaced."""

    def __init__(self, layout, prog):
        self._layout, self._prog = layout, prog

    def program(self):
        return self._prog

    def __getattr__(self, name):
        return getattr(self._layout, name)


def test_layout_limits_are_named():
    with pytest.raises(ValueError, match="16 banks"):
        AttentionLayout(HubConfig(channel=small_config(), n_channels=2), 32)
    with pytest.raises(ValueError, match="DYN-MODIs"):
        AttentionLayout(hub_of(2), 32, group=5, unroll=1)
    with pytest.raises(ValueError, match="GPR entries"):
        AttentionLayout(hub_of(2), 32, max_tokens=1 << 20)
    with pytest.raises(ValueError, match="power of two"):
        AttentionLayout(hub_of(3, chunk_bytes=3 * 16 * 2 * CH.cols * 32), 48)
    with pytest.raises(ValueError, match=r"channel in \[0, 2\) \(head-first placement\), not 2"):
        AttentionLayout(hub_of(2), 32, channel=2)
    with pytest.raises(ValueError, match="DYN-MODIs"):  # HFP's SV: a WR-INP per score word
        AttentionLayout(hub_of(2), 32, group=2, unroll=4, channel=0)
    # HFP's scores take a GPR stride of n_channels: the region n times TCP's
    assert AttentionLayout(hub_of(4), 32, max_tokens=96, channel=1).score_region == 4 * 6


def test_program_size_is_constant_in_context_length():
    """The PIMphony module with DCS (16 channels of 16 banks, 8 OBuf
    entries, 16 DYN-MODIs; GQA group 4, d_head 128): the same
    instruction words for every context from 1K tokens to the largest whose
    four queries' scores fit the 512 KB GPR (32K), while the commands the decoder
    expands grow with it; a 1M-token context is refused with the GPR named
    (the EPU's softmax needs a query's scores in the GPR at once)."""
    from golden.hub import unrolled_instructions
    from golden.system.studies import reference_attention_hub

    hub = reference_attention_hub()
    sizes, expanded = set(), []
    for k in range(10, 16):
        layout = AttentionLayout(hub, 128, group=4, max_tokens=1 << k)
        prog = layout.program()
        sizes.add(len(prog))
        expanded.append(unrolled_instructions(prog, 1 << k))
    assert len(sizes) == 1 and sizes.pop() <= hub.instr_depth
    assert all(b > 1.9 * a for a, b in zip(expanded, expanded[1:], strict=False))
    with pytest.raises(ValueError, match="GPR entries"):
        AttentionLayout(hub, 128, group=4, max_tokens=1 << 20)


def test_softmax_padding_matches_an_sv_iteration():
    layout = AttentionLayout(hub_of(2), 32, group=1, max_tokens=96, unroll=2)
    prog = layout.program()
    pads = [f["op_size"] for op, f in map(unpack_instruction, prog) if op == Opcode.EPU_SOFTMAX]
    assert pads == [layout.tokens_per_iteration // LANES]
    assert epu.padded_words(37, pads[0]) * LANES % layout.tokens_per_iteration == 0


# ---- FC GEMVs ----------------------------------------------------------------


def run_fc(hub, layout, weights, xs, seed=0):
    """``layout``'s program over one request per input vector of ``xs``
    (each its own GPR region, all mapping the same weight chunks), after
    the weights are written with RAW WRs over stale rows: the outputs."""
    rng = np.random.default_rng(seed)
    h = Hub(hub, strict=True)
    fill_stale(h, rng)
    region = hub.gpr_entries // len(xs)
    chunks = -(-(layout.base + layout.va_words) // (CH.cols * hub.chunk_rows))
    for r, x in enumerate(xs):
        assert h.host(HostOp.ASSIGN, r, 0, r * region).code == HostStatus.OK
        for c in range(chunks):
            assert h.host(HostOp.GROW, r, c).code == HostStatus.OK
        for w in range(layout.words_in):
            h.host(HostOp.GPR_WRITE, arg_a=r * region + layout.x_at + w,
                   data=numerics.lanes_to_word(x[w * LANES:(w + 1) * LANES]))
    write_words(h, 0, layout.weight_words(weights))
    assert h.load_program(layout.program(), 1).code == HostStatus.OK
    step = h.step()
    assert step.ran == list(range(len(xs)))
    return [numerics.bf16_to_float(h.gpr[r * region + layout.y_at:
                                         r * region + layout.y_at + layout.d_out // LANES]
                                   ).reshape(-1) for r in range(len(xs))]


FC_CASES = {  # d_in, d_out, GBuf entries, OBuf entries: blocks, pass groups
    "one-pass": (64, 32, 32, 4),
    "pass-groups": (64, 192, 32, 4),  # 6 passes over 4 OBuf entries
    "input-blocks": (128, 96, 4, 2),  # 8 input words in GBuf blocks of 4, 3 passes
    "partial-pass": (32, 48, 32, 4),  # 48 rows: the second pass half used
}


@pytest.mark.parametrize("case", FC_CASES)
def test_fc_matches_numpy(case):
    """Two requests' GEMVs over the same weights, each within BF16 rounding
    of numpy float32 (products accumulated in FP32, the result rounded to
    BF16 once: 2^-8 of its scale, bound 2^-7)."""
    d_in, d_out, gbuf, obuf = FC_CASES[case]
    hub = hub_of(2, channel=CH.replace(gbuf_entries=gbuf, obuf_entries=obuf))
    layout = FcLayout(hub, d_in, d_out, base=3, x_at=5)
    rng = np.random.default_rng(len(case))
    w = numerics.float_to_bf16(rng.standard_normal((d_out, d_in)) / np.sqrt(d_in))
    xs = [numerics.float_to_bf16(rng.standard_normal(d_in)) for _ in range(2)]
    got = run_fc(hub, layout, w, xs)
    wf = numerics.bf16_to_float(w).astype(np.float32)
    for x, y in zip(xs, got, strict=True):
        want = wf @ numerics.bf16_to_float(x).astype(np.float32)
        err = np.abs(y - want).max() / np.abs(want).max()
        assert err < 2 ** -7, f"{case}: relative error {err:.5f}"
    ops = [unpack_instruction(i)[0] for i in layout.program()]
    assert ops.count(Opcode.RD_OUT) == -(-layout.passes // obuf)
    assert ops.count(Opcode.WR_INP) == (1 if d_in // LANES <= gbuf else
                                        -(-layout.passes // obuf) * -(-d_in // LANES // gbuf))


def test_fc_limits_are_named():
    with pytest.raises(ValueError, match="16 banks"):
        FcLayout(HubConfig(channel=small_config(), n_channels=2), 32, 32)
    with pytest.raises(ValueError, match="d_out a positive multiple of 16"):
        FcLayout(hub_of(2), 32, 40)
    with pytest.raises(ValueError, match="GPR entries"):
        FcLayout(hub_of(2), 32, 32, y_at=1023)
    with pytest.raises(ValueError, match="instruction buffer"):
        FcLayout(hub_of(2, channel=CH.replace(obuf_entries=1)), 32, 32 * 70).program()
