"""cocotb test of the PIM module at the decode configuration
(tb/hub_stimulus.py ``decode_rtl_hub``: two channels of 16 banks, the
module a small transformer is lowered for) against the golden HUB: one
decode step of a two-layer model, every host call the golden decoder made
(golden/hub/decode.py), driven cycle by cycle through the host port. The
checks are tb/test_hub.py's (tb/hub_scoreboard.py): every response, every
multicast load and every channel's issue trace against golden; the
responses also equal what the golden decoder got. The longer decode
(three sequences, a chunk grown mid-decode, a slot reused) runs through
the standalone player (tb/play_tests.py ``hub_decode``)."""

from __future__ import annotations

import cocotb

from tb.hub_stimulus import check_decode, decode_case
from tb.seeds import run_seed
from tb.test_hub import _run, config_from_env


@cocotb.test()
async def decode_step(dut):
    """One sequence's first token through both layers from an empty
    module: the weights written with RAW WRs, the FC requests assigned
    and granted the weight chunks, each layer's QKV GEMV, the K/V and
    query writes, attention (QK^T, the EPU's softmax, SV and the
    reduction of two token groups) for the layer's request alone (the
    others skipped), O, the MLP and the LM head."""
    case = decode_case(config_from_env(), [1], [0], seed=run_seed() % 1000)
    _, rsp = await _run(dut, case.calls, "decode_step")
    check_decode(case, rsp)
