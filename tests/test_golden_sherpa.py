"""PIM-SHERPA layouts (golden/system/sherpa.py): address mapping, the swizzled
copy in both directions, and a GEMV on the PIM-aware layout."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golden import numerics
from golden.config import small_config
from golden.isa import Opcode
from golden.system.sherpa import (
    FIELDS,
    AddressMap,
    Geometry,
    HostCache,
    PimAwareLayout,
    gemv_channel_commands,
    host_friendly,
    host_gemv,
    host_reads,
    pim_gemv,
    swizzle,
    triggered_gemv,
    unswizzle,
)

SMALL = Geometry(channels=2, banks=4, rows=64, cols=32)  # small_config's banks
ORDERS = list(itertools.permutations(FIELDS))


@given(order=st.sampled_from(ORDERS), addr=st.integers(0, SMALL.bytes - 1))
def test_address_map_round_trip(order, addr):
    amap = AddressMap(SMALL, order)
    f = amap.decode(addr)
    assert int(amap.encode(f["channel"], f["bank"], f["row"], f["col"], f["byte"])) == addr


def test_default_map_interleaves_channels_first():
    amap = AddressMap(SMALL)
    f = amap.decode(np.arange(4) * 32)
    assert list(f["channel"]) == [0, 1, 0, 1] and list(f["col"]) == [0, 0, 1, 1]


@settings(max_examples=60, deadline=None)
@given(order=st.sampled_from(ORDERS), n_out=st.integers(1, 70), n_in=st.integers(1, 90),
       out_regs=st.sampled_from([1, 2, 4]), base_words=st.integers(0, 64),
       seed=st.integers(0, 2 ** 16))
def test_swizzled_copy_round_trips_bit_exact(order, n_out, n_in, out_regs, base_words, seed):
    amap = AddressMap(SMALL, order)
    layout = PimAwareLayout(amap, n_out, n_in, out_regs, first_row=8)
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 1 << 16, (n_out, n_in), dtype=np.uint16)
    base = base_words * 32
    host = host_friendly(w, SMALL.bytes, base)
    pim = swizzle(host, layout, base)
    # every element where the layout puts it, padding zero
    r, k = rng.integers(0, n_out), rng.integers(0, n_in)
    ch, bank, row, col = layout.place(r, k // 16)
    assert pim[int(amap.encode(ch, bank, row, col)) // 2 + k % 16] == w[r, k]
    assert np.count_nonzero(pim) == np.count_nonzero(w)
    back = unswizzle(pim, layout, base)
    assert np.array_equal(back[base // 2: base // 2 + w.size].reshape(w.shape), w)
    assert np.count_nonzero(back) == np.count_nonzero(w)


def test_padding():
    amap = AddressMap(Geometry())  # 4 channels x 16 banks
    lm = PimAwareLayout(amap, 128256, 2048)  # Llama 3.2 vocabulary x hidden
    assert lm.n_out_padded == 128512 and lm.padding_bytes == 256 * 2048 * 2
    kv = PimAwareLayout(amap, 768, 3072)  # 768 rows pad to 2 x 64 banks x 8 registers
    assert kv.n_out_padded == 1024 and kv.padding_bytes == 256 * 3072 * 2
    assert PimAwareLayout(amap, 2048, 2048).padding_bytes == 0


@pytest.mark.parametrize("gbuf", [32, 4], ids=["whole-input", "register-chunks"])
def test_gemv_on_the_pim_aware_layout_equals_the_host_gemm(gbuf):
    """37 x 200 (neither a multiple of the banks nor of 16): bit for bit the
    host's GEMV, within BF16 rounding of numpy; with 4 input registers the
    13 blocks go in chunks, per tile each chunk's WR-INPs then its MACs
    (the commands counted by hand)."""
    cfg = small_config().replace(gbuf_entries=gbuf)
    amap = AddressMap(SMALL)
    n_out, n_in = 37, 200
    layout = PimAwareLayout(amap, n_out, n_in, out_regs=cfg.obuf_entries, first_row=2)
    rng = np.random.default_rng(7)
    w = numerics.float_to_bf16(rng.standard_normal((n_out, n_in)))
    x = numerics.float_to_bf16(rng.standard_normal(n_in))
    host = host_friendly(w, SMALL.bytes, base=4096)
    y_pim = pim_gemv(swizzle(host, layout, base=4096), layout, x, cfg)
    assert np.array_equal(y_pim, host_gemv(host, n_out, n_in, x, base=4096))
    ref = numerics.bf16_to_float(w) @ numerics.bf16_to_float(x)
    np.testing.assert_allclose(numerics.bf16_to_float(y_pim), ref, rtol=2 ** -7, atol=0.05)
    if gbuf != 4:
        return
    cmds, beats = gemv_channel_commands(layout, 0, cfg.gbuf_entries)
    tiles = layout.rows_per_bank // layout.out_regs
    ops = [c.opcode for c in cmds]
    assert layout.blocks == 13 and ops.count(Opcode.WR_INP) == tiles * 13 == len(beats)
    assert ops.count(Opcode.MAC) == tiles * 13 * layout.out_regs
    assert ops.count(Opcode.RD_OUT) == tiles * layout.out_regs
    assert max(c.gbuf_idx for c in cmds) == 3  # the 4 entries, reused chunk by chunk


def test_pim_triggers_need_a_non_cacheable_region():
    """The host drives the GEMV with loads that trigger MACs in DRAM.
    Non-cacheable: every load triggers, y is pim_gemv's. Cacheable: a cold
    pass works (a line fill reads both channels' bursts, triggering both,
    and the second load hits); a second pass hits every line and loses
    every MAC (y wrong); after the host's GEMM read the matrix, the lines
    still cached lose theirs; a flush restores the triggers."""
    cfg = small_config()
    amap = AddressMap(SMALL)
    layout = PimAwareLayout(amap, 64, 128, out_regs=cfg.obuf_entries)
    rng = np.random.default_rng(1)
    w = numerics.float_to_bf16(rng.standard_normal((64, 128)))
    x = numerics.float_to_bf16(rng.standard_normal(128))
    pim = swizzle(host_friendly(w, SMALL.bytes), layout)
    ref = pim_gemv(pim, layout, x, cfg)
    # channels x local rows (64 rows over 8 banks) x blocks (128 / 16)
    macs = 2 * 8 * 8
    assert layout.rows_per_bank == 8 and layout.blocks == 8
    y, n = triggered_gemv(pim, layout, x, cfg)
    assert np.array_equal(y, ref) and n == {"mac_triggers": macs, "delivered": macs, "lost": 0}
    cache = HostCache(1 << 16, ways=4)
    y, n = triggered_gemv(pim, layout, x, cfg, cache)
    assert np.array_equal(y, ref) and n["lost"] == 0
    y, n = triggered_gemv(pim, layout, x, cfg, cache)
    assert n["lost"] == macs and not np.array_equal(y, ref)
    assert cache.flush() == macs // 2  # a line holds both channels' trigger bursts
    y, n = triggered_gemv(pim, layout, x, cfg, cache)
    assert np.array_equal(y, ref) and n["lost"] == 0
    # a cache that holds the matrix's 256 lines keeps every trigger line
    # the host's read brought in
    held = HostCache(1 << 14, ways=4)
    host_reads(held, layout)
    y, n = triggered_gemv(pim, layout, x, cfg, held)
    assert n["lost"] == macs and not np.array_equal(y, ref)
    with pytest.raises(ValueError, match="power of two"):
        HostCache(3000)


def test_bad_layouts_are_rejected_with_the_reason():
    with pytest.raises(ValueError, match="power of two"):
        AddressMap(Geometry(channels=3))
    with pytest.raises(ValueError, match="each of"):
        AddressMap(SMALL, ("channel", "col", "bank", "bank"))
    with pytest.raises(ValueError, match="rows per bank"):
        PimAwareLayout(AddressMap(SMALL), 4096, 4096)
