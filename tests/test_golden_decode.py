"""The small transformer decoded token by token on the golden PIM module
(golden/hub/decode.py): every GEMV a DPA program (FC and attention), a
batch of unequal sequences in lock step with chunks granted as the KV grows
and slots reused after a release, against numpy float32 of the same model."""

import numpy as np
import pytest

from golden.hub.decode import LOGIT_BOUND as BOUND
from golden.hub.decode import (
    Sequence,
    TinyModel,
    compare,
    decode,
    decode_hub,
    decode_study,
    reference_logits,
)


@pytest.mark.parametrize("heads", [2, 4], ids=["mha", "gqa"])
def test_decode_matches_the_float32_reference(heads):
    """Three sequences (prompts 70, 6, 20; 4, 8, 6 greedy tokens) over two
    slots: every step's logits within BOUND, and every greedy token the
    reference's except where its top two logits are closer than the step's
    error (a near tie)."""
    r = decode_study(TinyModel(heads=heads, kv_heads=2), [70, 6, 20], [4, 8, 6])
    for q in r["sequences"]:
        assert len(q["tokens"]) == q["prompt"] + q["new_tokens"] == len(q["step_errors"])
        assert q["max_error"] == max(q["step_errors"]) < BOUND, q["max_error"]
        for d in q["greedy_differs"]:
            assert d["reference_gap"] < d["error"], d
    att = r["programs"]["attention"]
    assert att["steps"] == 2 * (70 + 4)  # one per layer and lock step
    assert att["epu_cycles"] > 0
    # the module's cycles (the golden closed loop): per lock step, per program kind
    cyc = r["cycles"]
    assert len(cyc["lock_step_cycles"]) == 70 + 4 and min(cyc["lock_step_cycles"]) > 0
    assert cyc["programs"]["attention"]["steps"] == att["steps"]
    assert cyc["programs"]["attention"]["cycles"] > att["epu_cycles"]
    assert sum(cyc["lock_step_cycles"]) < cyc["last_response"]  # the weights' load first


@pytest.mark.parametrize("channels, heads", [(2, 4), (4, 2)], ids=["2ch-gqa", "4ch-mha"])
def test_head_first_decode_matches_the_float32_reference(channels, heads):
    """Head-first placement: every (slot, KV head) pair on one channel,
    round-robin, in every layer; a layer's attention one STEP per channel
    that holds some of its requests, each with that channel's program.
    The same bound against float32, the same greedy tokens but at near
    ties, and each STEP's commands to its channel alone."""
    model = TinyModel(heads=heads, kv_heads=2)
    seqs = [Sequence([t % 64 for t in range(1, 40)], 2), Sequence([3, 4], 3),
            Sequence([5], 2)]  # the third takes the second's slot
    dec = decode(model, seqs, hub=decode_hub(model, channels=channels), partition="hfp")
    for q in compare(model, seqs):
        assert q["max_error"] < BOUND, q["max_error"]
        for d in q["greedy_differs"]:
            assert d["reference_gap"] < d["error"], d
    used = {dec.where(dec.att_req(s, layer, kv)) for s in range(2) for layer in range(2)
            for kv in range(2)}
    assert used == set(range(min(channels, 4)))  # 2 slots x 2 KV heads over the channels
    for s in range(2):  # a pair keeps its channel in every layer
        for kv in range(2):
            assert dec.where(dec.att_req(s, 0, kv)) == dec.where(dec.att_req(s, 1, kv))
    names = [name for name, *_ in dec.steps if name.startswith("attention")]
    assert set(names) == {f"attention@{c}" for c in used}
    study = decode_study(model, [3], [1], channels=channels, partition="hfp")
    assert (study["partition"], study["channels"]) == ("hfp", channels)
    with pytest.raises(ValueError, match="partition must be one of tcp, hfp"):
        decode(model, seqs, partition="head")


def test_kv_grows_by_chunks_and_slots_are_reused():
    """With 8 chunks for the KV caches (4 KV heads a sequence): a 66-token
    sequence's KV heads take a second 64-token chunk when it passes 64
    tokens; the third sequence takes the slot and the chunks the second
    freed (holding its KV), and the first grows into the third's; every
    sequence still matches the reference; at the end every request is
    released and every chunk free."""
    model = TinyModel()
    seqs = [Sequence([t % 64 for t in range(1, 66)], 1), Sequence([3, 4], 2),
            Sequence([5, 6, 7], 3)]
    dec = decode(model, seqs, slots=2, kv_chunks=8)
    assert dec.att.tokens_per_chunk == 64
    chunks = {}
    for seq, req, c in dec.grants:
        chunks.setdefault(seq, {}).setdefault(req, []).append(c)
    heads = model.layers * model.kv_heads
    assert [len(cs) for cs in chunks[0].values()] == [2] * heads
    assert [len(cs) for cs in chunks[1].values()] == [1] * heads
    assert set(chunks[1]) == set(chunks[2])  # the same slot's requests
    held = [{c for cs in chunks[q].values() for c in cs} for q in range(3)]
    assert held[2] == held[1] and held[2] <= held[0]
    assert not any(a.owned for a in dec.allocs)
    assert not any(r.chunks for r in dec.h.requests[dec.slots:])
    for q in seqs:
        ref = reference_logits(model, q.tokens)
        err = max(np.abs(a - b).max() / np.abs(b).max() for a, b in
                  zip(q.logits, ref, strict=True))
        assert err < BOUND, err


def test_bad_decode_arguments_are_named():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        TinyModel(heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="max_tokens"):
        decode(TinyModel(), [Sequence([1] * 100, 40)], max_tokens=128)
    with pytest.raises(ValueError, match="token 64 outside the vocabulary"):
        decode(TinyModel(), [Sequence([1, 64], 1)])
    with pytest.raises(ValueError, match="kv_chunks must be in"):
        decode(TinyModel(), [Sequence([1], 1)], kv_chunks=0)
    with pytest.raises(ValueError, match="new-token"):
        decode_study(TinyModel(), [3, 4], [1])
