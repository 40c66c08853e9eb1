"""The heterogeneous-PIM study's workload graphs (golden/system/hetero_nets.py)."""

import pytest

from golden.system.hetero_nets import LSTM, NETWORKS, WORD2VEC, T, _Step, build_graph
from golden.system.reference import HETERO_BATCH


def _params(ops):
    return sum(op.out_bytes for op in ops if op.kind == "ApplyGradientDescent") // 4


def _forward_macs(ops):
    return sum(op.muladd for op in ops
               if op.name.endswith(".fwd") and op.kind in ("Conv2D", "MatMul")) / 2


@pytest.mark.parametrize("workload,params,gmacs", [
    ("VGG-19", 143_667_240, 19.63),  # Simonyan & Zisserman; torchvision's count
    ("AlexNet", 62_378_344, 1.14),  # the single-tower network's count
    ("ResNet-50", 25_557_032, 4.09),  # torchvision resnet50 (v1.5)
    ("Inception-v3", None, 5.71),  # Szegedy et al. 2016: 5.7 G multiply-adds
])
def test_layer_shapes_give_the_published_sizes(workload, params, gmacs):
    """Trainable parameters and forward multiply-accumulates per image,
    from the layer shapes alone."""
    ops = build_graph(workload, 1, batch=1)
    if params is not None:
        assert _params(ops) == params
    assert _forward_macs(ops) / 1e9 == pytest.approx(gmacs, rel=5e-3)


def test_every_workload_at_its_batch():
    assert set(NETWORKS) == set(HETERO_BATCH)
    for w in NETWORKS:
        one, two = build_graph(w, 1, batch=1), build_graph(w, 1, batch=2)
        assert len(one) == len(two)  # the batch changes sizes, not the graph
        assert sum(op.muladd for op in two) > sum(op.muladd for op in one)
        ops = build_graph(w, 2)
        assert [op.id for op in ops] == list(range(len(ops)))
        assert all(d < op.id for op in ops for d in op.deps)  # written in order


def _tiny():
    """Image -> conv (no bias) -> ReLU, read by two FCs whose sums are
    added, then the loss; two steps."""
    ops, updates = [], {}
    for step in range(2):
        s = _Step(ops, step, updates)
        x = s.normalize(2, 3, 4)
        r = s.act(s.conv(x, "c", 5, 3, bias=False), "r", "Relu")
        y = s.add(s.fc(r, "f1", 6, bias=False), s.fc(r, "f2", 6, bias=False), "sum")
        updates = s.backward(s.loss(y, "loss"))
    return ops


def test_backward_by_hand():
    ops = _tiny()
    by = {(op.step, op.name): op for op in ops}
    names = [op.name for op in ops if op.step == 0]
    # forward, then backward from the loss: the add passes the gradient to
    # both FCs; ReLU's output, read twice, gets the sum of their input
    # gradients; the image needs no gradient
    assert names == [
        "input.normalize", "c.fwd", "r.fwd", "f1.fwd", "f2.fwd", "sum.fwd", "loss.xent",
        "f2.w_grad", "f2.in_grad", "f2.kernel.update",
        "f1.w_grad", "f1.in_grad", "f1.kernel.update",
        "r.fwd.grad_sum", "r.grad", "c.w_grad", "c.kernel.update"]
    e_r = 2 * 5 * 4 * 4
    total = by[0, "r.fwd.grad_sum"]
    assert total.kind == "AddN" and total.muladd == e_r
    assert total.deps == [by[0, "f2.in_grad"].id, by[0, "f1.in_grad"].id]
    assert by[0, "r.grad"].deps == [total.id, by[0, "r.fwd"].id]
    loss = by[0, "loss.xent"].id
    assert by[0, "f1.w_grad"].deps[0] == loss == by[0, "f2.w_grad"].deps[0]
    # FC weight gradient: 2 x batch x in x out; update: 2 FLOPs a weight
    assert by[0, "f1.w_grad"].muladd == 2 * 2 * e_r // 2 * 6
    assert by[0, "c.kernel.update"].muladd == 2 * 5 * 3 * 9
    # the next step's ops wait for this step's updates of their weights
    assert by[0, "c.kernel.update"].id in by[1, "c.fwd"].deps
    assert by[0, "f2.kernel.update"].id in by[1, "f2.fwd"].deps
    assert not by[1, "input.normalize"].deps


def test_resnet_shortcut_gradients_are_summed():
    ops = build_graph("ResNet-50", 1, batch=1)
    by = {op.name: op for op in ops}
    # res2b's input feeds its first convolution and its identity shortcut
    total = by["res2a.relu.fwd.grad_sum"]
    assert total.kind == "AddN" and len(total.deps) == 2
    assert by["res2b.a.in_grad"].id in total.deps
    assert sum(op.kind == "Add" for op in ops) == 16  # one per bottleneck block


def test_lstm_weight_used_at_every_time_step():
    ops = build_graph("LSTM", 1)
    by = {op.name: op for op in ops}
    hid, steps = LSTM["hidden"], LSTM["time_steps"]
    size = 2 * hid * 4 * hid
    total = by["lstm0.kernel.grad_sum"]
    assert total.kind == "AddN" and len(total.deps) == steps
    assert total.muladd == (steps - 1) * size
    assert by["lstm0.kernel.update"].deps == [total.id]
    # BasicLSTMCell: 14 forward ops per cell and time step
    cell = [op for op in ops if op.name.startswith("lstm1.t7.") and op.name.endswith(".fwd")]
    assert len(cell) == 14
    # the gates' split: its gradient concatenates the four gates' gradients
    gates = by["lstm1.t7.split.grad"]
    assert gates.kind == "ConcatV2" and len(gates.deps) == 4
    # the first time step's zero state needs no gradient
    assert "lstm0.t0.mul_c.grad_a" not in by and "lstm0.t1.mul_c.grad_a" in by


def test_word2vec_updates_only_the_rows_it_read():
    ops = build_graph("Word2vec", 1)
    by = {op.name: op for op in ops}
    n, d, k = HETERO_BATCH["Word2vec"], WORD2VEC["embedding"], WORD2VEC["sampled"]
    w = by["nce_weights.update"]
    assert w.kind == "ScatterSub" and w.muladd == (n + k) * d and len(w.deps) == 2
    assert by["embeddings.update"].muladd == n * d
    assert not any(op.kind == "ApplyGradientDescent" for op in ops)  # all sparse
    assert by["nce.sampled_w.fwd"].deps == [by["nce.sampler"].id]


def test_dcgan_generated_half_gets_its_gradient_back():
    ops = build_graph("DCGAN", 1)
    names = {op.name for op in ops}
    assert "real.slice0" in names and "real.slice1" not in names  # the real images: none
    assert "fc0.in_grad" not in names  # nor the noise


def test_tensor_sizes():
    assert T(None, 2, 3, 4).elems == 96
    with pytest.raises(ValueError, match="unknown workload"):
        build_graph("GPT-3")
    with pytest.raises(ValueError, match="steps"):
        build_graph("LSTM", 0)
