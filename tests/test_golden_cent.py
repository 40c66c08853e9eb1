"""The CENT-like PIM-only system: its CXL link, its near-memory processors
and CENT's mapping of pipeline stages to channel groups of a module
(golden/system/model.py, docs/pimphony.md)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from golden.config import ConfigError, load_profile
from golden.system.model import (
    Assumptions,
    Link,
    decode_step,
    hfp_admit,
    layer_vector_elements,
    stage_options,
    stage_splits,
    system_link,
    vector_rate,
)
from golden.system.reference import CXL, GB, MODELS, SYSTEMS
from tests.test_golden_system import TINY, XPU, LinearTimer

#: TINY's PIM-only module: 4 channels, FC on PIM, near-memory processors, CXL
CENT = dataclasses.replace(XPU, fc_on="pim", vector_on="pnm", link="cxl")


def test_cxl_link_by_hand():
    """A x4 port of 8 GB/s lanes (32 GB/s): 512 B take 3 flits of 256 B
    (192 B each) after the hop's 180 ns round trip; an all-gather over 4
    modules brings in 3 shares of 128 B, a flit each."""
    asm = Assumptions()
    lk = system_link(SYSTEMS["PIM-only"], asm)
    assert (lk.gbs, lk.flit_bytes, lk.flit_payload) == (32.0, 256, 192)
    assert lk.hop_s == pytest.approx(180e-9)
    assert lk.transfer_s(512) == pytest.approx(180e-9 + 3 * 256 / 32e9)
    assert lk.all_gather_s(512, 4) == pytest.approx(180e-9 + 3 * 256 / 32e9)
    assert lk.all_gather_s(512, 1) == lk.transfer_s(0) == 0.0
    wide = system_link(SYSTEMS["PIM-only"], dataclasses.replace(asm, cxl_lanes=16))
    assert wide.gbs == 16 * CXL.lane_gbs
    # xPU+PIM keeps a plain link: bytes over link_gbs, nothing else
    plain = system_link(SYSTEMS["xPU+PIM"], asm)
    assert plain == Link(asm.link_gbs)
    assert plain.all_gather_s(4096, 4) == pytest.approx(3 * 1024 / 64e9)


def test_vector_unit_of_each_system():
    """PIM-only's near-memory processors: 3 TFLOPS at 4 FLOPs an element is
    375 elements per 0.5 ns cycle; xPU+PIM's HUB takes ``epu_lanes``."""
    asm = Assumptions()
    assert vector_rate(SYSTEMS["PIM-only"], asm, 0.5) == pytest.approx(375.0)
    assert vector_rate(SYSTEMS["xPU+PIM"], asm, 0.5) == asm.epu_lanes
    with pytest.raises(ConfigError, match="vector_on"):
        vector_rate(dataclasses.replace(CENT, vector_on="gpu"), asm, 1.0)
    with pytest.raises(ConfigError, match="link must be"):
        system_link(dataclasses.replace(CENT, link="ethernet"), asm)
    # two RMSNorms and residual adds, RoPE on 2 + 2 heads, SiLU and gate
    assert layer_vector_elements(TINY, 1) == 4 * 256 + 4 * 128 + 2 * 512


def test_stage_options_hold_cents_one_block_per_stage():
    """PIM-only modules can hold several stages, one per channel group
    (CENT: LLM-7B's 32 blocks on 8 devices of 32 channels, 4 blocks of 8
    channels each); the xPU+PIM module is one stage."""
    m = MODELS["LLM-7B-128K"]
    assert stage_splits(SYSTEMS["PIM-only"]) == (1, 2, 4, 8, 16, 32)
    assert stage_splits(SYSTEMS["xPU+PIM"]) == (1,)
    pim = stage_options(m, SYSTEMS["PIM-only"], 8)
    assert (1, 32, 4) in pim and (1, 8, 1) in pim
    assert all(pp <= m.layers and pp % k == 0 for _, pp, k in pim)
    assert {k for _, _, k in stage_options(m, SYSTEMS["xPU+PIM"], 4)} == {1}


def test_hand_offs_cross_the_link_only_between_modules():
    """Four stages on two modules (two a module): a micro-batch's hand-off
    goes over CXL after stage 1 (to the other module) and stage 3 (back to
    the first), never between two stages of one module."""
    cfg = load_profile()
    asm = Assumptions()
    lengths = np.full(4, 128)
    r = decode_step(TINY, CENT, lengths, 1, 4, "tcp", LinearTimer(cfg), 1.0, asm, k=2)
    hand = 180e-9 + 3 * 256 / 32e9  # 1 request x 256 x 2 B = 512 B
    assert r["stages_per_module"] == 2
    assert r["breakdown_s"]["link_io"] == pytest.approx(4 * 2 * hand / 4)
    one = decode_step(TINY, CENT, lengths, 1, 4, "tcp", LinearTimer(cfg), 1.0, asm, k=4)
    assert one["breakdown_s"]["link_io"] == 0.0  # all four stages on one module
    with pytest.raises(ConfigError, match="stages per module"):
        decode_step(TINY, CENT, lengths, 1, 4, "tcp", LinearTimer(cfg), 1.0, asm, k=3)


def test_stages_of_a_module_share_its_near_memory_processors():
    """With slow near-memory processors (1 element a cycle), two stages on
    one module take turns on them: the step lasts all three layers' vector
    work, not the busier stage's two; on two modules each stage has its own."""
    cfg = load_profile()
    asm = Assumptions(pnm_flops_per_element=1000.0)  # 1 TFLOPS / 1000 x 1 ns: 1 a cycle
    lengths = np.array([128, 128])
    shared = decode_step(TINY, CENT, lengths, 1, 2, "tcp", LinearTimer(cfg), 1.0, asm, k=2)
    # per request and layer: the layer's vector elements plus, for each of
    # its 2 KV heads, softmax (128 scores) and the TCP reduction over the
    # stage's 2 channels (1 x 128)
    per = (layer_vector_elements(TINY, 1) + 2 * (128 + 128)) * 1e-9
    assert shared["bound"] == "vector"
    assert shared["step_s"] == pytest.approx(2 * 3 * per)
    apart = decode_step(TINY, CENT, lengths, 1, 2, "tcp", LinearTimer(cfg), 1.0, asm, k=1)
    # on two modules the reduction spans 4 channels (3 x 128 a pair); the
    # step is the busier stage's, under what one shared unit would need
    per4 = (layer_vector_elements(TINY, 1) + 2 * (128 + 3 * 128)) * 1e-9
    assert apart["bound"] == "pipeline"
    assert 2 * 2 * per4 < apart["step_s"] < 2 * 3 * per4


def test_hfp_pairs_fit_a_stage_of_fewer_layers():
    """LLM-7B-128K under HFP, static allocation, on 8 PIM-only modules: at
    one block per stage (CENT's mapping, 4 stages of 8 channels a module)
    a pair holds one layer's 128K tokens (64 MB), and each request's 8
    pairs go to the 8 channels of its stage; at 4 layers per stage (256 MB)
    a channel holds one pair."""
    m, pim = MODELS["LLM-7B-128K"], SYSTEMS["PIM-only"]
    lengths = np.full(64, 1000)
    per_channel = (128 * GB - m.weight_bytes) // (8 * 32)
    pair = 2 * m.window * m.d_head * 2  # one layer
    cent = hfp_admit(m, lengths, "static", 128, pim, 1, 32, k=4)
    assert cent["batch"] == per_channel // pair
    assert hfp_admit(m, lengths, "static", 128, pim, 1, 8)["batch"] == 4
