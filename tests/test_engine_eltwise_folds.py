"""Float element-wise folds of the plan (qnnemu/core/plan.py ``float_folded_activations``:
``EltwiseActivationEpilogue``, ``SiluProduct``; QNN HTP backend documentation, graph config
QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF) and their C lowering
(qnnemu/core/engine/lower_eltwise.py, csrc/eng_eltwise.c; issue 13).

- An ElementWiseAdd (numpy broadcasting included) whose float32 result only a Relu / ReluMinMax
  reads applies it as it stores the sum: one ``qe_k_binary_f32`` step, the activation's step a
  ``qe_k_nop``.
- SiLU: a Sigmoid read only by an ElementWiseMultiply of its own input by it is computed by the
  Multiply's step, reading x and writing the product alone (``qe_k_silu_f32`` without the
  Sigmoid's output); the Sigmoid's step is a ``qe_k_nop``.  When x is a convolution's or
  product's result that nothing else reads, that step computes the SiLU as its epilogue
  (``ActivationEpilogue`` of the ``SiluProduct``; test_engine_gemm covers every producer).

Checked: the fold happens exactly in those cases (float32 math; no other reader; no graph
output), the bytes equal the unfolded plan's (FOLD_RELU_ACTIVATION_INTO_CONV_OFF) and the engine
equals the Python plan bytewise (NaN, infinities, signed zeros included).
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, GraphBuilder, new_context

from qnnemu.core.engine import check_plan
from qnnemu.core.plan import (
    ActivationEpilogue,
    EltwiseActivationEpilogue,
    FoldedIntoProducer,
    SiluProduct,
    compile_plan,
)
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

F32 = Q.QNN_DATATYPE_FLOAT_32
NATIVE = Q.QNN_TENSOR_TYPE_NATIVE
ACTIVATIONS = {"Relu": {}, "ReluMinMax": {"min_value": -0.5, "max_value": 1.5}}


@pytest.fixture()
def contexts():
    made = []

    def make():
        ctx = new_context()
        made.append(ctx)
        return ctx
    yield make
    for ctx in made:
        ctx.free()


def special(rng, shape, nan: bool = True) -> np.ndarray:
    """Random values with NaN, infinities, zeros of both signs and values beyond the clip bounds.
    Positive NaN only, and none with ``nan=False`` (SiLU: sigmoid(NaN) is -NaN): numpy's float32
    loops return either operand of a product or sum of two different NaNs depending on the
    element's position (the elements past the last full vector of 16 take the second), which no
    C kernel reproduces; the element-wise engine tests share this convention."""
    a = (rng.standard_normal(shape) * 2).astype(np.float32)
    flat = a.reshape(-1)
    k = flat.size
    for value, share in ((np.nan if nan else 40.0, 25), (np.inf, 50), (-np.inf, 50), (0.0, 10), (-0.0, 10)):
        flat[rng.integers(0, k, max(k // share, 1))] = value
    return a


def kernels_of(graph) -> list[str]:
    """The C kernels of the graph's program, by name, in order."""
    from qnnemu._kernels import ffi, lib
    names = {int(ffi.cast("intptr_t", ffi.addressof(lib, n))): n
             for n in ("qe_k_unary_f32", "qe_k_binary_f32", "qe_k_silu_f32", "qe_k_nop")}
    return [names.get(int(row[0]), "?") for row in graph.plan.engine.program.steps]


def add_relu_graph(ctx, shape_a, shape_b, activation: str, *, add_read=False, add_output=False):
    """x0, x1 -> ElementWiseAdd -> s -> activation -> y; s optionally also read by a Multiply
    or returned as a graph output."""
    b = GraphBuilder(ctx, "addrelu")
    out_shape = tuple(int(d) for d in np.broadcast_shapes(shape_a, shape_b))
    x0 = b.tensor("x0", shape_a, F32, type_=APP_WRITE)
    x1 = b.tensor("x1", shape_b, F32, type_=APP_WRITE)
    s = b.tensor("s", out_shape, F32, type_=APP_READ if add_output else NATIVE)
    y = b.tensor("y", out_shape, F32, type_=APP_READ)
    b.node("ElementWiseAdd", "add", [x0, x1], [s])
    b.node(activation, "act", [s], [y], **ACTIVATIONS[activation])
    if add_read:
        z = b.tensor("z", out_shape, F32, type_=APP_READ)
        b.node("ElementWiseMultiply", "other", [s, s], [z])
    b.graph.finalize()
    return b.graph, [x0, x1], y


def silu_graph(ctx, shape, x_first: bool, *, sigmoid_output=False):
    b = GraphBuilder(ctx, "silu")
    x = b.tensor("x", shape, F32, type_=APP_WRITE)
    s = b.tensor("s", shape, F32, type_=APP_READ if sigmoid_output else NATIVE)
    y = b.tensor("y", shape, F32, type_=APP_READ)
    b.node("Sigmoid", "sig", [x], [s])
    b.node("ElementWiseMultiply", "mul", [x, s] if x_first else [s, x], [y])
    b.graph.finalize()
    return b.graph, [x], y


def python_output(plan, feeds, tensor) -> np.ndarray:
    return np.asarray(plan.run_env(feeds)[plan.slots[tensor.id]])


def assert_identical_to_unfolded(graph, ins, y, seed: int, what: str, nan: bool = True) -> None:
    """The engine == the folded Python plan bytewise (every slot), and the folded plan's output
    == the unfolded plan's."""
    rng = np.random.default_rng(seed)
    feeds = {t.id: special(rng, tuple(int(d) for d in t.dims), nan) for t in ins}
    with np.errstate(all="ignore"):
        check_plan(graph.plan, feeds)
        folded = python_output(graph.plan, feeds, y)
        unfolded = python_output(compile_plan(graph, fold_relu=False), feeds, y)
    assert folded.tobytes() == unfolded.tobytes(), f"{what}: the folded bytes equal the unfolded plan's"


SHAPES = [((1, 56, 56, 64), (1, 56, 56, 64)), ((1, 7, 7, 33), (1, 1, 1, 33)), ((2, 5, 3), (1,)),
          ((1, 9, 1, 4), (1, 1, 6, 1))]


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}+{s[1]}")
def test_add_activation_is_one_c_step_bit_identical(contexts, activation, shapes):
    graph, ins, y = add_relu_graph(contexts(), *shapes, activation)
    plan = graph.plan
    assert plan.float_folds == {1: 0}, f"{activation} after ElementWiseAdd {shapes} is folded: {plan.float_folds}"
    assert [type(s.impl) for s in plan.steps] == [EltwiseActivationEpilogue, FoldedIntoProducer], \
        f"the Add's step applies the activation, the activation's writes nothing: {plan.steps}"
    assert plan.engine.fallbacks == [], f"no Python fallback: {plan.engine.fallbacks}"
    assert kernels_of(graph) == ["qe_k_binary_f32", "qe_k_nop"], \
        f"one binary kernel clamping as it stores, then the activation's no-op: {kernels_of(graph)}"
    assert_identical_to_unfolded(graph, ins, y, 1, f"Add -> {activation} {shapes}")


@pytest.mark.parametrize("variant", ["add_read", "add_output"])
def test_add_activation_is_not_folded_when_the_sum_is_needed(contexts, variant):
    graph, ins, y = add_relu_graph(contexts(), (1, 8, 8, 16), (1, 8, 8, 16), "Relu", **{variant: True})
    assert graph.plan.float_folds == {}, f"{variant}: the sum is needed, no fold: {graph.plan.float_folds}"
    assert "qe_k_unary_f32" in kernels_of(graph), f"{variant}: the Relu is a pass of its own"
    assert_identical_to_unfolded(graph, ins, y, 2, f"Add -> Relu, {variant}")


def test_no_eltwise_fold_in_float16_math(contexts):
    """Float16 math rounds the sum before the activation: the Add and the Sigmoid keep their steps."""
    graph, _, _ = add_relu_graph(contexts(), (1, 4, 4, 8), (1, 4, 4, 8), "Relu")
    assert compile_plan(graph, precision_fp16=True).float_folds == {}, "no Add fold in float16 math"
    graph, _, _ = silu_graph(contexts(), (1, 4, 4, 8), True)
    assert compile_plan(graph, precision_fp16=True).float_folds == {}, "no SiLU fold in float16 math"


@pytest.mark.parametrize("shape", [(1, 5, 7, 3), (1, 56, 56, 144), (2, 3, 1000)])
@pytest.mark.parametrize("x_first", [True, False])
def test_silu_fold_writes_the_product_alone(contexts, shape, x_first):
    graph, ins, y = silu_graph(contexts(), shape, x_first)
    plan = graph.plan
    assert plan.float_folds == {0: 1}, f"the Sigmoid is folded into the Multiply: {plan.float_folds}"
    assert [type(s.impl) for s in plan.steps] == [FoldedIntoProducer, SiluProduct], \
        f"the Sigmoid's step writes nothing, the Multiply's computes SiLU: {plan.steps}"
    assert plan.steps[0].writes == [] and len(plan.steps[1].reads) == 1, \
        "nothing stores the Sigmoid's output; the product reads x alone"
    assert plan.engine.fallbacks == [], f"no Python fallback: {plan.engine.fallbacks}"
    assert kernels_of(graph) == ["qe_k_nop", "qe_k_silu_f32"], f"one SiLU step: {kernels_of(graph)}"
    assert_identical_to_unfolded(graph, ins, y, 3, f"SiLU {shape} x_first={x_first}", nan=False)


def test_silu_is_not_folded_when_the_sigmoid_is_a_graph_output(contexts):
    graph, ins, y = silu_graph(contexts(), (1, 8, 8, 16), True, sigmoid_output=True)
    assert graph.plan.float_folds == {}, f"the Sigmoid's output is needed: {graph.plan.float_folds}"
    assert_identical_to_unfolded(graph, ins, y, 4, "SiLU with the Sigmoid as a graph output", nan=False)


def test_fold_off_keeps_the_engines_two_output_silu(contexts):
    """FOLD_RELU_ACTIVATION_INTO_CONV_OFF: no plan fold; the engine still runs the pair as one
    step writing both outputs (the Sigmoid's slot compared by the check too)."""
    graph, ins, y = silu_graph(contexts(), (1, 28, 28, 40), False)
    graph.plan = compile_plan(graph, fold_relu=False)
    from qnnemu.core.engine import build_engine
    graph.plan.engine = build_engine(graph.plan, graph)
    assert graph.plan.float_folds == {}, "no plan fold with the folds off"
    assert kernels_of(graph) == ["qe_k_silu_f32", "qe_k_nop"], f"the engine's SiLU: {kernels_of(graph)}"
    rng = np.random.default_rng(5)
    with np.errstate(all="ignore"):
        check_plan(graph.plan, {ins[0].id: special(rng, (1, 28, 28, 40), nan=False)})


def test_folded_kernels_do_not_depend_on_the_split(contexts):
    """qe_k_binary_f32 with its activation and the one-output qe_k_silu_f32, split over 2 threads
    from any size (qe_ew_set_split_ns) or run on one: the same bytes as the Python plan."""
    from qnnemu._kernels import lib
    saved_threads = _fast.threads()
    graphs = [add_relu_graph(contexts(), (1, 9, 9, 40), (1, 1, 1, 40), "ReluMinMax"),
              silu_graph(contexts(), (1, 9, 9, 40), False)]
    previous = lib.qe_ew_set_split_ns(1)
    try:
        for threads in (1, 2):
            _fast.set_threads(threads)
            for k, (graph, ins, y) in enumerate(graphs):
                assert_identical_to_unfolded(graph, ins, y, 6 + k, f"graph {k}, {threads} thread(s)", nan=k == 0)
    finally:
        lib.qe_ew_set_split_ns(previous)
        _fast.set_threads(saved_threads)


@pytest.mark.parametrize("engine", ["c", "python", "check"])
def test_add_fold_through_the_abi_with_a_weight_update(our_backend, monkeypatch, engine):
    """Through the C ABI: x + b (b an updatable static [1,1,1,C]) -> ReluMinMax, then x -> SiLU;
    executes before and after tensorUpdateGraphTensors of b give the bytes of the same graph
    with FOLD_RELU_ACTIVATION_INTO_CONV_OFF (no fold), and the fold survives the update."""
    from qnnemu.client import ffi, htp_graph_config
    from qnnemu.core.handles import HANDLES
    monkeypatch.setenv("QNNEMU_ENGINE", engine)
    rng = np.random.default_rng(11)
    shape = (1, 12, 12, 24)
    x = special(rng, shape, nan=False)
    b0, b1 = (rng.standard_normal((1, 1, 1, 24)).astype(np.float32) for _ in range(2))
    outs, folds = [], []
    for fold_off in (False, True):
        ctx = our_backend.context()
        try:
            configs = [htp_graph_config("FOLD_RELU_ACTIVATION_INTO_CONV_OFF", foldReluActivationIntoConvOff=True)] \
                if fold_off else []
            g = ctx.graph("addfold", configs=configs)
            xi = g.input("x", shape)
            b = g.static("b", b0, updatable=True)
            s = g.node("ElementWiseAdd", [xi, b], outputs=[("s", shape, np.float32)], name="add")
            g.node("ReluMinMax", [s], outputs=[("y", shape, np.float32)], name="clip", app_read=True,
                   params={"min_value": np.float32(-0.25), "max_value": np.float32(2.0)})
            sg = g.node("Sigmoid", [xi], outputs=[("sg", shape, np.float32)], name="sig")
            g.node("ElementWiseMultiply", [sg, xi], outputs=[("z", shape, np.float32)], name="mul", app_read=True)
            g.finalize()
            first = g.execute({"x": x})
            g.update_tensors({"b": b1})
            core = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))
            folds.append(dict(core.plan.float_folds))
            outs.append((first, g.execute({"x": x})))
        finally:
            ctx.free()
    assert folds == [{1: 0, 2: 3}, {}], f"Add -> ReluMinMax and the SiLU folded, kept after the update: {folds}"
    for when, k in (("before the update", 0), ("after the update", 1)):
        a, c = outs[0][k], outs[1][k]
        assert a.keys() == c.keys() and all(np.asarray(a[n]).tobytes() == np.asarray(c[n]).tobytes() for n in a), \
            f"engine {engine}, {when}: folded bytes == FOLD_OFF bytes"
    assert np.asarray(outs[0][0]["y"]).tobytes() != np.asarray(outs[0][1]["y"]).tobytes(), \
        "the update changed the clipped sum"


def conv_silu_graph(ctx, x_first: bool, *, extra_reader=False):
    """x -> Conv2d 3x3 -> c -> Sigmoid -> s; Multiply(c, s) -> y; c optionally also read by an
    ElementWiseAdd whose sum is a graph output."""
    rng = np.random.default_rng(11)
    b = GraphBuilder(ctx, "convsilu")
    x = b.tensor("x", (1, 10, 9, 8), F32, type_=APP_WRITE)
    f = b.tensor("f", (3, 3, 8, 40), F32, type_=STATIC, data=rng.standard_normal((3, 3, 8, 40)).astype(np.float32))
    c = b.tensor("c", (1, 10, 9, 40), F32, type_=NATIVE)
    s = b.tensor("s", (1, 10, 9, 40), F32, type_=NATIVE)
    y = b.tensor("y", (1, 10, 9, 40), F32, type_=APP_READ)
    b.node("Conv2d", "conv", [x, f], [c], pad_amount=[[1, 1], [1, 1]])
    b.node("Sigmoid", "sig", [c], [s])
    b.node("ElementWiseMultiply", "mul", [c, s] if x_first else [s, c], [y])
    if extra_reader:
        z = b.tensor("z", (1, 10, 9, 40), F32, type_=APP_READ)
        b.node("ElementWiseAdd", "other", [c, c], [z])
    b.graph.finalize()
    return b.graph, [x], y


@pytest.mark.parametrize("x_first", [True, False])
def test_silu_folds_into_the_convolution_epilogue(contexts, x_first):
    """A SiLU of a Conv2d's result that nothing else reads: the convolution's step computes it as
    its epilogue (mode 3: x * s, 4: s * x), the Sigmoid's and the Multiply's steps write nothing."""
    graph, ins, y = conv_silu_graph(contexts(), x_first)
    plan = graph.plan
    assert plan.float_folds == {1: 2, 2: 0}, f"Sigmoid -> Multiply -> Conv2d: {plan.float_folds}"
    assert [type(s.impl) for s in plan.steps] == [ActivationEpilogue, FoldedIntoProducer, FoldedIntoProducer], \
        f"the convolution's step computes the SiLU: {plan.steps}"
    assert plan.steps[0].impl.mode == (3 if x_first else 4), f"epilogue mode {plan.steps[0].impl.mode}"
    assert plan.engine.fallbacks == [], f"no Python fallback: {plan.engine.fallbacks}"
    assert "qe_k_silu_f32" not in plan.engine.kernel_names, \
        f"no SiLU pass of its own: {plan.engine.kernel_names}"
    assert_identical_to_unfolded(graph, ins, y, 12, f"Conv2d -> SiLU x_first={x_first}", nan=False)


def test_silu_stays_a_pass_when_the_convolution_result_is_read_again(contexts):
    graph, ins, y = conv_silu_graph(contexts(), True, extra_reader=True)
    plan = graph.plan
    assert plan.float_folds == {1: 2}, f"only the Sigmoid into the Multiply: {plan.float_folds}"
    assert type(plan.steps[2].impl) is SiluProduct, f"the Multiply's step computes the SiLU: {plan.steps[2]}"
    assert "qe_k_silu_f32" in plan.engine.kernel_names, f"a SiLU pass: {plan.engine.kernel_names}"
    assert_identical_to_unfolded(graph, ins, y, 13, "Conv2d -> SiLU with another reader", nan=False)
