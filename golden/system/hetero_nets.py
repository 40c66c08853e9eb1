"""The heterogeneous-PIM study's workloads: training steps as operation graphs
(REFERENCE.md, Heterogeneous PIM; docs/hetero.md, "Workloads").

A step is written forward, as the network's TensorFlow ops in the order a
graph would run them, each recorded on a tape with the rule that
differentiates it; the backward pass then walks the tape in reverse and
writes the gradient ops TensorFlow would: a gradient that reaches a tensor
from several users is summed (``AddN``), a weight used several times (an
LSTM's over time steps) has its gradients summed before its update, an
embedding's update touches only the rows looked up (``ScatterSub``).

Every op carries its multiply/add work (what a fixed-function PIM can do),
its other work (compares, exponentials, copies, random numbers: programmable
cores only), the bytes it reads and writes, and its dependencies. Step
``s + 1``'s op reading a weight depends on step ``s``'s update of it.

The seven workloads are REFERENCE.md's, at its batch sizes. The layer shapes
are the networks' published ones (VGG-19, AlexNet, DCGAN, ResNet-50 v1.5,
Inception-v3 without its auxiliary head); the LSTM and Word2vec
configurations are assumptions, stated at their builders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from golden.system.reference import HETERO_BATCH

F32 = 4


@dataclass
class Op:
    id: int
    name: str
    kind: str
    step: int
    muladd: float  # FLOPs a fixed-function PIM can do (multiplies and adds)
    other: float  # FLOPs needing a programmable core
    nbytes: int  # read + written
    out_bytes: int
    deps: list[int] = field(default_factory=list)
    layer: str = ""
    cpu_s: float = 0.0  # profiled CPU time
    accesses: int = 0  # profiled memory accesses (64 B lines)

    @property
    def fixed_ok(self) -> bool:
        return self.other == 0 and self.muladd > 0


@dataclass(frozen=True)
class T:
    """A tensor: the op producing it (``None``: data from outside the graph,
    or a zero initial state), ``n`` samples of ``c`` channels over ``h`` x
    ``h`` positions, and which output of its op it is."""

    op: int | None
    n: int
    c: int
    h: int = 1
    part: int = 0

    @property
    def elems(self) -> int:
        return self.n * self.c * self.h * self.h


class _Step:
    """One training step being written: forward ops on a tape, then
    :meth:`backward`."""

    def __init__(self, ops: list[Op], step: int, previous: dict[str, int]):
        self.ops, self.step, self.previous = ops, step, previous
        self.tape: list[tuple[int, object, tuple[str, ...]]] = []
        self.graded: set[int] = set()  # ops whose output needs a gradient
        self.first_use: dict[str, int] = {}  # weight -> tape index of its first use
        self.sizes: dict[str, tuple[int, bool]] = {}  # weight -> (elements, sparse)
        self.wgrads: dict[str, list[tuple[int, int]]] = {}  # weight -> (op, elements)
        self.contrib: dict[int, dict[int, list[int]]] = {}
        self.updates: dict[str, int] = {}

    # -- writing ops --------------------------------------------------------

    def op(self, name, kind, muladd, other, in_elems, out_elems, deps, layer, w_elems=0) -> int:
        op = Op(len(self.ops), name, kind, self.step, float(muladd), float(other),
                F32 * int(in_elems + out_elems + w_elems), F32 * int(out_elems),
                [d for d in deps if d is not None], layer)
        self.ops.append(op)
        return op.id

    def fwd(self, name, kind, muladd, other, ins, out: T, layer, rule=None, weights=(),
            w_elems=0, in_elems=None, deps=()) -> T:
        """A forward op reading tensors ``ins`` (and ``weights``: name ->
        (elements, sparse)); ``rule(g)`` writes its gradient ops given the
        gradient op of each of its outputs (``{part: op}``)."""
        for w, size in weights:
            self.sizes.setdefault(w, size)
        names = tuple(w for w, _ in weights)
        e_in = sum(t.elems for t in ins) if in_elems is None else in_elems
        i = self.op(name, kind, muladd, other, e_in, out.elems,
                    [t.op for t in ins] + [self.previous.get(w) for w in names] + list(deps),
                    layer, w_elems)
        if names or any(t.op in self.graded for t in ins):
            self.graded.add(i)
        for w in names:
            self.first_use.setdefault(w, len(self.tape))
        self.tape.append((i, rule, names))
        return T(i, out.n, out.c, out.h)

    def give(self, t: T, grad: int) -> None:
        """``grad`` is (part of) the gradient of ``t``."""
        if t.op in self.graded:
            self.contrib.setdefault(t.op, {}).setdefault(t.part, []).append(grad)

    def wants(self, t: T) -> bool:
        return t.op in self.graded

    def wgrad(self, weight: str, grad: int, elems: int) -> None:
        self.wgrads.setdefault(weight, []).append((grad, elems))

    # -- the backward pass ---------------------------------------------------

    def backward(self, loss: T) -> dict[str, int]:
        """Gradient ops from ``loss`` back, then each weight's update as soon
        as its last gradient is written; returns weight -> update op."""
        self.contrib = {loss.op: {0: [loss.op]}}
        for idx in range(len(self.tape) - 1, -1, -1):
            i, rule, names = self.tape[idx]
            parts = self.contrib.pop(i, None)
            if parts and rule is not None:
                rule({p: self._sum(grads, i, p) for p, grads in parts.items()})
            for w in names:
                if self.first_use[w] == idx:
                    self._update(w)
        return self.updates

    def _sum(self, grads: list[int], i: int, part: int) -> int:
        if len(grads) == 1:
            return grads[0]
        e = self.ops[grads[0]].out_bytes // F32
        src = self.ops[i]
        suffix = f".{part}" if part else ""
        return self.op(f"{src.name}{suffix}.grad_sum", "AddN", (len(grads) - 1) * e, 0,
                       len(grads) * e, e, grads, src.layer)

    def _update(self, w: str) -> None:
        grads = self.wgrads.get(w, [])
        if not grads:
            return
        size, sparse = self.sizes[w]
        layer = w.rsplit(".", 1)[0]
        if sparse:  # the looked-up rows' gradients, concatenated, subtracted in place
            rows = sum(e for _, e in grads)
            self.updates[w] = self.op(f"{w}.update", "ScatterSub", rows, 0, 2 * rows, rows,
                                      [g for g, _ in grads], layer)
            return
        g = grads[0][0]
        if len(grads) > 1:
            g = self.op(f"{w}.grad_sum", "AddN", (len(grads) - 1) * size, 0,
                        len(grads) * size, size, [g for g, _ in grads], layer)
        self.updates[w] = self.op(f"{w}.update", "ApplyGradientDescent", 2 * size, 0,
                                  2 * size, size, [g], layer)

    # -- layers --------------------------------------------------------------

    def normalize(self, n, c, h) -> T:
        """The step's input images, normalised (no dependency on the
        previous step)."""
        e = n * c * h * h
        return self.fwd("input.normalize", "Sub", e, 0, [], T(None, n, c, h), "input",
                        in_elems=e)

    def conv(self, x: T, name: str, cout: int, k, s: int = 1, pad="same", bias=True) -> T:
        """``k`` x ``k`` (or ``(kh, kw)``) convolution, stride ``s``;
        ``pad``: "same", or a number of zeros each side."""
        kh, kw = (k, k) if isinstance(k, int) else k
        if pad == "same":
            ho = -(-x.h // s)
        else:
            ho = (x.h + 2 * pad - kh) // s + 1
        y = T(None, x.n, cout, ho)
        w = cout * x.c * kh * kw
        macs = 2 * y.elems * x.c * kh * kw
        y = self.weighted(x, y, name, f"{name}.kernel", w, macs,
                          ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"))
        return self.bias_add(y, name) if bias else y

    def deconv(self, x: T, name: str, cout: int, k: int, s: int) -> T:
        """Transposed convolution (``Conv2DBackpropInput`` forward)."""
        y = T(None, x.n, cout, x.h * s)
        w = cout * x.c * k * k
        macs = 2 * x.elems * cout * k * k
        return self.weighted(x, y, name, f"{name}.kernel", w, macs,
                             ("Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2D"))

    def fc(self, x: T, name: str, dout: int, bias=True) -> T:
        din = x.c * x.h * x.h
        y = T(None, x.n, dout)
        w = din * dout
        macs = 2 * x.n * din * dout
        y = self.weighted(x, y, name, f"{name}.kernel", w, macs, ("MatMul",) * 3)
        return self.bias_add(y, name) if bias else y

    def weighted(self, x: T, y: T, name: str, weight: str, size: int, macs: float,
                 kinds: tuple[str, str, str]) -> T:
        """An op multiplying ``x`` by ``weight`` (``size`` elements) into
        ``y``; ``kinds``: the forward op, the weight gradient's and the
        input gradient's (the last only when ``x`` needs a gradient). A
        weight used by several such ops has their gradients summed."""

        def rule(g):
            self.wgrad(weight, self.op(f"{name}.w_grad", kinds[1], macs, 0, x.elems + y.elems,
                                       size, [g[0], out.op], name), size)
            if self.wants(x):
                self.give(x, self.op(f"{name}.in_grad", kinds[2], macs, 0, y.elems, x.elems,
                                     [g[0]], name, size))

        out = self.fwd(f"{name}.fwd", kinds[0], macs, 0, [x], y, name, rule,
                       [(weight, (size, False))], size)
        return out

    def bias_add(self, x: T, name: str, bias: str | None = None, op_name: str | None = None
                 ) -> T:
        """``x`` plus a bias (``bias``, default ``<name>.bias``; the op is
        ``op_name``, default ``<name>.bias``)."""
        bias = bias or f"{name}.bias"

        def rule(g):
            bg = self.op(f"{name}.bias_grad", "BiasAddGrad", x.elems, 0, x.elems, x.c,
                         [g[0]], name)
            self.wgrad(bias, bg, x.c)
            self.give(x, g[0])

        return self.fwd(op_name or f"{name}.bias", "BiasAdd", x.elems, 0, [x], x, name, rule,
                        [(bias, (x.c, False))], x.c)

    def bn(self, x: T, name: str) -> T:
        """Batch normalisation: the batch's moments, then scale and shift
        (gamma, beta)."""
        e, scale = x.elems, f"{name}.scale"
        stats = self.op(f"{name}.moments", "Moments", 2 * e, x.c, e, 2 * x.c, [x.op], name)

        def rule(g):
            sg = self.op(f"{name}.scale_grad", "Sum", 2 * e, 0, 2 * e, 2 * x.c, [g[0]], name)
            self.wgrad(scale, sg, 2 * x.c)
            if self.wants(x):
                self.give(x, self.op(f"{name}.grad", "Mul", 2 * e, 0, 2 * e, e, [g[0], y_op],
                                     name))

        y = self.fwd(f"{name}.scale", "Mul", 2 * e, 0, [x], x, name, rule,
                     [(scale, (2 * x.c, False))], 2 * x.c, in_elems=e, deps=[stats])
        y_op = y.op
        return y

    def act(self, x: T, name: str, fn: str) -> T:
        """An activation: ``Relu`` / ``LeakyRelu`` (a compare; the leaky
        one also scales the negatives) whose gradient is mixed (a compare,
        then a multiply), or ``Tanh`` / ``Sigmoid`` (an exponential) whose
        gradient is multiply/add only (``g (1 - y^2)``, ``g y (1 - y)``)."""
        e = x.elems

        def rule(g):
            if fn in ("Tanh", "Sigmoid"):
                work = (3 * e, 0)
            else:
                work = (e, e)
            self.give(x, self.op(f"{name}.grad", f"{fn}Grad", *work, 2 * e, e, [g[0], y_op],
                                 name))

        mul = e if fn == "LeakyRelu" else 0
        y = self.fwd(f"{name}.fwd", fn, mul, e, [x], x, name, rule)
        y_op = y.op
        return y

    def pool(self, x: T, name: str, k: int, s: int, pad: int = 0, mode: str = "max") -> T:
        """Max or average pooling, ``k`` x ``k`` windows, stride ``s``."""
        ho = (x.h + 2 * pad - k) // s + 1
        y = T(None, x.n, x.c, ho)
        window = y.elems * k * k
        if mode == "max":
            def rule(g):
                self.give(x, self.op(f"{name}.grad", "MaxPoolGrad", x.elems, window,
                                     x.elems + y.elems, x.elems, [g[0], y_op], name))
            y = self.fwd(f"{name}.fwd", "MaxPool", 0, window, [x], y, name, rule)
        else:
            def rule(g):
                self.give(x, self.op(f"{name}.grad", "AvgPoolGrad", window, 0,
                                     x.elems + y.elems, x.elems, [g[0]], name))
            y = self.fwd(f"{name}.fwd", "AvgPool", window, 0, [x], y, name, rule)
        y_op = y.op
        return y

    def add(self, a: T, b: T, name: str, broadcast: bool = False) -> T:
        """Elementwise sum; with ``broadcast``, ``b`` is repeated over ``a``
        and its gradient is summed over the repeats."""
        e = a.elems

        def rule(g):
            self.give(a, g[0])
            if not broadcast:
                self.give(b, g[0])
            elif self.wants(b):
                self.give(b, self.op(f"{name}.grad", "Sum", e, 0, e, b.elems, [g[0]], name))

        return self.fwd(f"{name}.fwd", "Add", e, 0, [a, b], a, name, rule)

    def mul(self, a: T, b: T, name: str) -> T:
        e = a.elems

        def rule(g):
            for mine, other, tag in ((a, b, "a"), (b, a, "b")):
                if self.wants(mine):
                    self.give(mine, self.op(f"{name}.grad_{tag}", "Mul", e, 0, 2 * e, e,
                                            [g[0], other.op], name))

        return self.fwd(f"{name}.fwd", "Mul", e, 0, [a, b], a, name, rule)

    def concat(self, xs: list[T], name: str, batch: bool = False) -> T:
        """Concatenation along channels, or along the batch."""
        e = sum(t.elems for t in xs)
        if batch:
            y = T(None, sum(t.n for t in xs), xs[0].c, xs[0].h)
        else:
            y = T(None, xs[0].n, sum(t.c for t in xs), xs[0].h)

        def rule(g):
            for j, t in enumerate(xs):
                if self.wants(t):
                    self.give(t, self.op(f"{name}.slice{j}", "Slice", 0, t.elems, t.elems,
                                         t.elems, [g[0]], name))

        return self.fwd(f"{name}.fwd", "ConcatV2", 0, e, xs, y, name, rule)

    def split(self, x: T, parts: int, name: str) -> list[T]:
        """Equal parts along channels (each its own output); the gradient
        concatenates the parts' gradients."""
        e = x.elems

        def rule(g):
            self.give(x, self.op(f"{name}.grad", "ConcatV2", 0, e, e, e,
                                 [g[p] for p in sorted(g)], name))

        y = self.fwd(f"{name}.fwd", "Split", 0, e, [x], x, name, rule)
        return [T(y.op, x.n, x.c // parts, x.h, p) for p in range(parts)]

    def matmul(self, a: T, b: T, name: str) -> T:
        """``a`` (n x k) times ``b`` (m x k) transposed: both tensors, both
        differentiated."""
        k = a.c * a.h * a.h
        y = T(None, a.n, b.n)
        macs = 2 * a.n * b.n * k

        def rule(g):
            for mine, other, tag in ((a, b, "a"), (b, a, "b")):
                if self.wants(mine):
                    self.give(mine, self.op(f"{name}.grad_{tag}", "MatMul", macs, 0,
                                            y.elems + other.elems, mine.elems,
                                            [g[0], other.op], name))

        return self.fwd(f"{name}.fwd", "MatMul", macs, 0, [a, b], y, name, rule)

    def gather(self, table: str, rows: int, width: int, vocab: int, name: str,
               deps=()) -> T:
        """An embedding lookup of ``rows`` rows of a ``vocab`` x ``width``
        table; its gradient is those rows only (a sparse update)."""
        y = T(None, rows, width)

        def rule(g):
            self.wgrad(table, g[0], y.elems)

        return self.fwd(f"{name}.fwd", "GatherV2", 0, y.elems, [], y, name, rule,
                        [(table, (vocab * width, True))], in_elems=y.elems, deps=deps)

    def reduce_sum(self, x: T, name: str) -> T:
        """Sum over each sample's channels; the gradient broadcasts back."""
        y = T(None, x.n, 1)

        def rule(g):
            if self.wants(x):
                self.give(x, self.op(f"{name}.grad", "Tile", 0, x.elems, y.elems, x.elems,
                                     [g[0]], name))

        return self.fwd(f"{name}.fwd", "Sum", x.elems, 0, [x], y, name, rule)

    def loss(self, x: T, name: str, kind: str = "SoftmaxCrossEntropy") -> T:
        """The loss op; it also writes the gradient of its logits."""
        e = x.elems
        other = e if kind != "SigmoidCrossEntropy" else 2 * e

        def rule(g):
            self.give(x, g[0])

        return self.fwd(f"{name}.xent", kind, 2 * e, other, [x], x, name, rule)


# ---- the networks ------------------------------------------------------------


def _vgg19(s: _Step, n: int) -> T:
    x, i = s.normalize(n, 3, 224), 0
    for cout, reps in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        for _ in range(reps):
            x = s.act(s.conv(x, f"conv{i}", cout, 3), f"act{i + 1}", "Relu")
            i += 2
        x = s.pool(x, f"pool{i}", 2, 2)
        i += 1
    for dout in (4096, 4096):
        x = s.act(s.fc(x, f"fc{i}", dout), f"act{i + 1}", "Relu")
        i += 2
    return s.loss(s.fc(x, f"fc{i}", 1000), f"loss{i + 1}")


def _alexnet(s: _Step, n: int) -> T:
    x = s.normalize(n, 3, 227)
    x = s.pool(s.act(s.conv(x, "conv0", 96, 11, 4, 0), "act1", "Relu"), "pool2", 3, 2)
    x = s.pool(s.act(s.conv(x, "conv3", 256, 5, 1, 2), "act4", "Relu"), "pool5", 3, 2)
    x = s.act(s.conv(x, "conv6", 384, 3), "act7", "Relu")
    x = s.act(s.conv(x, "conv8", 384, 3), "act9", "Relu")
    x = s.pool(s.act(s.conv(x, "conv10", 256, 3), "act11", "Relu"), "pool12", 3, 2)
    x = s.act(s.fc(x, "fc13", 4096), "act14", "Relu")
    x = s.act(s.fc(x, "fc15", 4096), "act16", "Relu")
    return s.loss(s.fc(x, "fc17", 1000), "loss18")


def _dcgan(s: _Step, n: int) -> T:
    """Generator (z 100 -> 64 x 64 x 3), then the discriminator on the real
    and the generated images (batch doubled), trained together in one step."""
    z = s.fwd("input.noise", "RandomStandardNormal", 0, n * 100, [], T(None, n, 100), "input",
              in_elems=0)
    x = T(s.fc(z, "fc0", 4 * 4 * 1024).op, n, 1024, 4)  # reshaped
    x = s.act(s.bn(x, "bn2"), "act3", "Relu")
    i = 4
    for cout in (512, 256, 128):
        x = s.act(s.bn(s.deconv(x, f"deconv{i}", cout, 5, 2), f"bn{i + 1}"), f"act{i + 2}",
                  "Relu")
        i += 3
    x = s.act(s.deconv(x, "deconv13", 3, 5, 2), "act14", "Tanh")
    real = s.normalize(n, 3, 64)
    x = s.concat([x, real], "real", batch=True)
    x = s.act(s.conv(x, "conv16", 64, 5, 2, 2), "act17", "LeakyRelu")
    i = 18
    for cout in (128, 256, 512):
        x = s.act(s.bn(s.conv(x, f"conv{i}", cout, 5, 2, 2), f"bn{i + 1}"), f"act{i + 2}",
                  "LeakyRelu")
        i += 3
    return s.loss(s.fc(x, "fc27", 1), "loss28")


def _cbr(s: _Step, x: T, name: str, cout: int, k, stride: int = 1, pad="same",
         relu=True) -> T:
    """Convolution without bias, batch normalisation, ReLU."""
    y = s.bn(s.conv(x, name, cout, k, stride, pad, bias=False), f"{name}.bn")
    return s.act(y, f"{name}.relu", "Relu") if relu else y


def _resnet50(s: _Step, n: int) -> T:
    """ResNet-50 v1.5 (the stride on each stage's first 3 x 3), 224 x 224."""
    x = _cbr(s, s.normalize(n, 3, 224), "conv1", 64, 7, 2)
    x = s.pool(x, "pool1", 3, 2, 1)
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), 2):
        for b in range(blocks):
            name, stride = f"res{stage}{chr(97 + b)}", 2 if b == 0 and stage > 2 else 1
            y = _cbr(s, x, f"{name}.a", width, 1)
            y = _cbr(s, y, f"{name}.b", width, 3, stride)
            y = _cbr(s, y, f"{name}.c", 4 * width, 1, relu=False)
            short = _cbr(s, x, f"{name}.proj", 4 * width, 1, stride, relu=False) if b == 0 \
                else x
            x = s.act(s.add(y, short, name), f"{name}.relu", "Relu")
    x = s.pool(x, "pool5", x.h, 1, mode="avg")
    return s.loss(s.fc(x, "fc1000", 1000), "loss")


def _inception_v3(s: _Step, n: int) -> T:
    """Inception-v3, 299 x 299, without the auxiliary classifier."""
    x = s.normalize(n, 3, 299)
    x = _cbr(s, x, "stem1", 32, 3, 2, 0)
    x = _cbr(s, x, "stem2", 32, 3, 1, 0)
    x = _cbr(s, x, "stem3", 64, 3)
    x = s.pool(x, "stem_pool1", 3, 2)
    x = _cbr(s, x, "stem4", 80, 1)
    x = _cbr(s, x, "stem5", 192, 3, 1, 0)
    x = s.pool(x, "stem_pool2", 3, 2)
    for i, pool_c in enumerate((32, 64, 64)):  # 35 x 35
        m = f"mixed{i}"
        b1 = _cbr(s, x, f"{m}.1x1", 64, 1)
        b5 = _cbr(s, _cbr(s, x, f"{m}.5x5a", 48, 1), f"{m}.5x5b", 64, 5)
        b3 = _cbr(s, x, f"{m}.3x3a", 64, 1)
        b3 = _cbr(s, _cbr(s, b3, f"{m}.3x3b", 96, 3), f"{m}.3x3c", 96, 3)
        bp = _cbr(s, s.pool(x, f"{m}.pool", 3, 1, 1, "avg"), f"{m}.pool_proj", pool_c, 1)
        x = s.concat([b1, b5, b3, bp], m)
    m = "mixed3"  # to 17 x 17
    b3 = _cbr(s, x, f"{m}.3x3", 384, 3, 2, 0)
    bd = _cbr(s, _cbr(s, x, f"{m}.dbl_a", 64, 1), f"{m}.dbl_b", 96, 3)
    bd = _cbr(s, bd, f"{m}.dbl_c", 96, 3, 2, 0)
    x = s.concat([b3, bd, s.pool(x, f"{m}.pool", 3, 2)], m)
    for i, c7 in enumerate((128, 160, 160, 192), 4):  # 17 x 17
        m = f"mixed{i}"
        b1 = _cbr(s, x, f"{m}.1x1", 192, 1)
        b7 = _cbr(s, x, f"{m}.7x7a", c7, 1)
        b7 = _cbr(s, _cbr(s, b7, f"{m}.7x7b", c7, (1, 7)), f"{m}.7x7c", 192, (7, 1))
        bd = _cbr(s, x, f"{m}.dbl_a", c7, 1)
        for j, (cout, k) in enumerate(((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)),
                                       (192, (1, 7)))):
            bd = _cbr(s, bd, f"{m}.dbl_{chr(98 + j)}", cout, k)
        bp = _cbr(s, s.pool(x, f"{m}.pool", 3, 1, 1, "avg"), f"{m}.pool_proj", 192, 1)
        x = s.concat([b1, b7, bd, bp], m)
    m = "mixed8"  # to 8 x 8
    b3 = _cbr(s, _cbr(s, x, f"{m}.3x3a", 192, 1), f"{m}.3x3b", 320, 3, 2, 0)
    b7 = _cbr(s, x, f"{m}.7x7a", 192, 1)
    b7 = _cbr(s, _cbr(s, b7, f"{m}.7x7b", 192, (1, 7)), f"{m}.7x7c", 192, (7, 1))
    b7 = _cbr(s, b7, f"{m}.7x7d", 192, 3, 2, 0)
    x = s.concat([b3, b7, s.pool(x, f"{m}.pool", 3, 2)], m)
    for i in (9, 10):  # 8 x 8
        m = f"mixed{i}"
        b1 = _cbr(s, x, f"{m}.1x1", 320, 1)
        b3 = _cbr(s, x, f"{m}.3x3a", 384, 1)
        b3 = s.concat([_cbr(s, b3, f"{m}.3x3b", 384, (1, 3)),
                       _cbr(s, b3, f"{m}.3x3c", 384, (3, 1))], f"{m}.3x3")
        bd = _cbr(s, _cbr(s, x, f"{m}.dbl_a", 448, 1), f"{m}.dbl_b", 384, 3)
        bd = s.concat([_cbr(s, bd, f"{m}.dbl_c", 384, (1, 3)),
                       _cbr(s, bd, f"{m}.dbl_d", 384, (3, 1))], f"{m}.dbl")
        bp = _cbr(s, s.pool(x, f"{m}.pool", 3, 1, 1, "avg"), f"{m}.pool_proj", 192, 1)
        x = s.concat([b1, b3, bd, bp], m)
    x = s.pool(x, "pool", x.h, 1, mode="avg")
    return s.loss(s.fc(x, "logits", 1000), "loss")


#: The LSTM language model (an assumption: TensorFlow's PTB tutorial model,
#: "small" configuration, whose batch of 20 is REFERENCE.md's): a 10,000-word
#: vocabulary, two layers of 200 units unrolled over 20 time steps, no
#: dropout; BasicLSTMCell's ops per cell and step.
LSTM = {"vocab": 10_000, "hidden": 200, "layers": 2, "time_steps": 20}


def _lstm(s: _Step, n: int) -> T:
    v, hid, layers, steps = (LSTM[k] for k in ("vocab", "hidden", "layers", "time_steps"))
    xs = s.split(s.gather("embedding", n * steps, hid, v, "embed"), steps, "unstack")
    xs = [T(x.op, n, hid, 1, x.part) for x in xs]
    for layer in range(layers):
        w, b = f"lstm{layer}.kernel", f"lstm{layer}.bias"
        h = c = T(None, n, hid)  # zero initial state
        out = []
        for t, x in enumerate(xs):
            p = f"lstm{layer}.t{t}"
            cat = s.concat([x, h], f"{p}.concat")
            g = s.weighted(cat, T(None, n, 4 * hid), f"{p}.matmul", w, 2 * hid * 4 * hid,
                           2 * n * 2 * hid * 4 * hid, ("MatMul",) * 3)
            g = s.bias_add(g, f"{p}.bias", b, f"{p}.bias.fwd")
            i, j, f, o = s.split(g, 4, f"{p}.split")
            f = s.add(f, T(None, 1, 1), f"{p}.forget_bias", broadcast=True)  # + 1.0, a constant
            c = s.add(s.mul(c, s.act(f, f"{p}.sig_f", "Sigmoid"), f"{p}.mul_c"),
                      s.mul(s.act(i, f"{p}.sig_i", "Sigmoid"), s.act(j, f"{p}.tanh_j", "Tanh"),
                            f"{p}.mul_ij"), f"{p}.add_c")
            h = s.mul(s.act(c, f"{p}.tanh_c", "Tanh"), s.act(o, f"{p}.sig_o", "Sigmoid"),
                      f"{p}.mul_h")
            out.append(h)
        xs = out
    x = s.concat(xs, "outputs", batch=True)
    return s.loss(s.fc(x, "softmax", v), "loss", "SparseSoftmaxCrossEntropy")


#: Skip-gram Word2vec with the NCE loss (an assumption: TensorFlow's
#: word2vec tutorial model, whose batch of 128 is REFERENCE.md's): a
#: 50,000-word vocabulary, 128-wide embeddings, 64 sampled negatives.
WORD2VEC = {"vocab": 50_000, "embedding": 128, "sampled": 64}


def _word2vec(s: _Step, n: int) -> T:
    v, d, k = (WORD2VEC[key] for key in ("vocab", "embedding", "sampled"))
    emb = s.gather("embeddings", n, d, v, "embed")
    sampler = s.op("nce.sampler", "LogUniformCandidateSampler", 0, 8 * k, 0, k, [], "nce")
    true_w = s.gather("nce_weights", n, d, v, "nce.true_w")
    true_b = s.gather("nce_biases", n, 1, v, "nce.true_b")
    samp_w = s.gather("nce_weights", k, d, v, "nce.sampled_w", [sampler])
    samp_b = s.gather("nce_biases", k, 1, v, "nce.sampled_b", [sampler])
    true_logit = s.add(s.reduce_sum(s.mul(emb, true_w, "nce.true_mul"), "nce.true_sum"),
                       true_b, "nce.true_logit")
    samp_logit = s.add(s.matmul(emb, samp_w, "nce.sampled_matmul"), T(samp_b.op, 1, k),
                       "nce.sampled_logit", broadcast=True)
    logits = s.concat([true_logit, samp_logit], "nce.logits")
    return s.loss(logits, "loss", "SigmoidCrossEntropy")


NETWORKS = {"VGG-19": _vgg19, "AlexNet": _alexnet, "DCGAN": _dcgan, "ResNet-50": _resnet50,
            "Inception-v3": _inception_v3, "LSTM": _lstm, "Word2vec": _word2vec}


def build_graph(workload: str, steps: int = 1, batch: int | None = None) -> list[Op]:
    """``steps`` training steps of ``workload`` as one op graph."""
    if workload not in NETWORKS:
        raise ValueError(f"unknown workload {workload!r} (known: {', '.join(NETWORKS)})")
    if steps < 1:
        raise ValueError("steps must be >= 1")
    n = batch or HETERO_BATCH[workload]
    ops: list[Op] = []
    updates: dict[str, int] = {}
    for step in range(steps):
        s = _Step(ops, step, updates)
        updates = s.backward(NETWORKS[workload](s, n))
    return ops
