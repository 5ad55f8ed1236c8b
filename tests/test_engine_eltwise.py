"""The C engine's element-wise family (qnnemu/core/engine/lower_eltwise.py, csrc/eng_eltwise.c;
issue 13): binary ops with numpy broadcasting, unary ops, activations, Prelu, Softmax /
LogSoftmax and ElementWiseNeuron run as C steps, byte for byte equal to the Python plan, on
float32, float16 and 8/16-bit fixed-point tensors; the transcendental kernels are also what the
ops' fast paths compute (shared), close to the float64 reference; reference kernels fall back."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, GraphBuilder, new_context
from helpers.isa_probe import digests_by_isa
from helpers.step_kernels import call
from hypothesis import assume, given, strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from qnnemu.core.engine import check_plan
from qnnemu.core.engine.lower_eltwise import broadcast_layout
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.ops import _fast, _fast_eltwise, activation as act

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
U8, U16 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16
BOOL = Q.QNN_DATATYPE_BOOL_8
# (storage dtype, input quantization, output quantization) per encoding
ENCODINGS = {
    "float32": (F32, None, None),
    "float16": (F16, None, None),
    "u8": (U8, (0.05, -128), (1.0 / 64, -100)),
    "u16": (U16, (0.001, -30000), (1.0 / 4096, -32768)),
}
BINARY = ["ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
          "ElementWiseMaximum", "ElementWiseMinimum", "ElementWiseSquaredDifference", "ElementWisePower"]
COMPARE = ["ElementWiseEqual", "ElementWiseNotEqual", "ElementWiseGreater", "ElementWiseGreaterEqual",
           "ElementWiseLess", "ElementWiseLessEqual"]
UNARY = ["Relu", "Relu1", "Relu6", "Sigmoid", "Tanh", "HardSwish", "ElementWiseExp", "ElementWiseLog",
         "ElementWiseNeg", "ElementWiseAbs", "ElementWiseSquareRoot", "ElementWiseFloor", "ElementWiseCeil",
         "ElementWiseRsqrt", "ElementWiseSign", "ElementWiseSin", "ElementWiseCos", "ElementWiseAsin",
         "ElementWiseAtan"]
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.0e38, -3.0e38, 0.5, -0.5,
                     1.5, 2.5, -3.0, 6.0], np.float32)


_CONTEXTS: list = []


def tracked_context():
    """A core Context freed after the example that made it (``free_contexts``): hundreds of live
    contexts would grow the process's handle table for the tests that follow."""
    ctx = new_context()
    _CONTEXTS.append(ctx)
    return ctx


def free_contexts() -> None:
    while _CONTEXTS:
        _CONTEXTS.pop().free()


@pytest.fixture(autouse=True)
def _free_contexts_after_each_test():
    yield
    free_contexts()


def one_node(op: str, in_shapes, out_shape, encoding: str, out_dtype=None, **params):
    """A finalized graph of one node (graph inputs x0.. -> op -> y); None if the HTP (model)
    refuses the combination at graphFinalize (as the vendor does)."""
    dtype, quant, oquant = ENCODINGS[encoding]
    b = GraphBuilder(tracked_context(), "ew")
    ins = [b.tensor(f"x{i}", s, dtype, type_=APP_WRITE, quant=quant) for i, s in enumerate(in_shapes)]
    odt = dtype if out_dtype is None else out_dtype
    y = b.tensor("y", out_shape, odt, type_=APP_READ, quant=oquant if odt == dtype else None)
    b.node(op, "n", ins, [y], **params)
    try:
        b.graph.finalize()
    except QnnError:
        return None, ins
    return b.graph, ins


def feeds_for(ins, encoding: str, rng, specials: bool = True):
    dtype = ENCODINGS[encoding][0]
    feeds = {}
    for t in ins:
        shape = tuple(int(d) for d in t.dims)
        if dtype in (F32, F16):
            x = (rng.standard_normal(shape) * 3).astype(np.float32)
            if specials and x.size:
                flat = x.reshape(-1)
                k = rng.integers(0, x.size, min(x.size, 4))
                flat[k] = rng.choice(SPECIALS, k.size)
            feeds[t.id] = x.astype(np.float16) if dtype == F16 else x
        else:
            hi = 255 if dtype == U8 else 65535
            feeds[t.id] = rng.integers(0, hi + 1, shape).astype(np.uint8 if dtype == U8 else np.uint16)
    return feeds


def assert_lowered_and_identical(graph, ins, encoding, seed, what: str, expect_fallbacks=()):
    engine = graph.plan.engine
    assert engine is not None, f"{what}: the graph has a C program"
    got = [op for _, op, _ in engine.fallbacks]
    assert got == list(expect_fallbacks), f"{what}: runs as C steps (fallbacks: {engine.fallbacks})"
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        check_plan(graph.plan, feeds_for(ins, encoding, rng))   # raises at the first differing byte
    free_contexts()


# -- broadcasting layout ------------------------------------------------------------------------

def test_broadcast_layout_merges_contiguous_dimensions():
    assert broadcast_layout((2, 3, 4), (2, 3, 4), (2, 3, 4)) == ([24], [1], [1]), \
        "equal shapes collapse to one contiguous dimension"
    assert broadcast_layout((2, 3, 4), (4,), (2, 3, 4)) == ([6, 4], [4, 1], [0, 1]), \
        "a trailing vector broadcasts over the merged outer dimensions"
    assert broadcast_layout((2, 1, 4), (3, 1), (2, 3, 4)) == ([2, 3, 4], [4, 0, 1], [0, 1, 0]), \
        "both inputs broadcasting keep three dimensions"
    assert broadcast_layout((), (), ()) == ([1], [0], [0]), "scalars are one element"


# -- binary ops ---------------------------------------------------------------------------------

@given(op=st.sampled_from(BINARY + COMPARE + ["Prelu"]), encoding=st.sampled_from(sorted(ENCODINGS)),
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, max_side=4),
       seed=st.integers(0, 2**31))
def test_binary_ops_run_in_c_bit_identical(op, encoding, shapes, seed):
    (sa, sb), out = shapes.input_shapes, shapes.result_shape
    if op == "Prelu":
        sa = out   # the coefficient broadcasts to in[0] without enlarging it
    out_dtype = BOOL if op in COMPARE else None
    graph, ins = one_node(op, [sa, sb], out, encoding, out_dtype)
    assume(graph is not None)
    assert_lowered_and_identical(graph, ins, encoding, seed, f"{op} {encoding} {sa} {sb}")


def test_binary_op_rank_six_broadcast_and_operation_variant():
    shapes = [(2, 1, 2, 1, 2, 3), (1, 2, 1, 2, 1, 3)]   # rank 6: the HTP's largest
    out = (2, 2, 2, 2, 2, 3)
    graph, ins = one_node("ElementWiseBinary", shapes, out, "float32",
                          operation=int(Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_MINIMUM))
    assert graph is not None, "ElementWiseBinary MINIMUM of rank 6 finalizes"
    assert_lowered_and_identical(graph, ins, "float32", 3, "ElementWiseBinary(MINIMUM) rank 6")


def test_signed_zeros_and_nan_follow_numpy():
    a = np.array([-0.0, 0.0, np.nan, 1.0, -np.nan, -0.0], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan, np.nan, -0.0], np.float32)
    for op in ("ElementWiseMaximum", "ElementWiseMinimum", "Prelu"):
        graph, ins = one_node(op, [(6,), (6,)], (6,), "float32")
        assert graph is not None and graph.plan.engine.fallbacks == [], f"{op} lowers to C"
        check_plan(graph.plan, {ins[0].id: a, ins[1].id: b})


@given(dtype=st.sampled_from([Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8,
                              Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16]),
       scales=st.tuples(*[st.floats(2.0**-12, 4.0, width=32)] * 3), offsets=st.tuples(*[st.integers(-200, 0)] * 3),
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=5),
       seed=st.integers(0, 2**31))
def test_fixed_point_add_runs_the_integer_pipeline_in_c(dtype, scales, offsets, shapes, seed):
    """plan.IntegerAdd (the HTP's ElementWiseAdd on codes) as one C step, same codes."""
    (sa, sb), out = shapes.input_shapes, shapes.result_shape
    code = {Q.QNN_DATATYPE_UFIXED_POINT_8: np.uint8, Q.QNN_DATATYPE_SFIXED_POINT_8: np.int8,
            Q.QNN_DATATYPE_UFIXED_POINT_16: np.uint16, Q.QNN_DATATYPE_SFIXED_POINT_16: np.int16}[dtype]
    b = GraphBuilder(tracked_context(), "iadd")
    x = [b.tensor(f"x{i}", s, dtype, type_=APP_WRITE, quant=(float(scales[i]), offsets[i]))
         for i, s in enumerate((sa, sb))]
    y = b.tensor("y", out, dtype, type_=APP_READ, quant=(float(scales[2]), offsets[2]))
    b.node("ElementWiseAdd", "n", x, [y])
    try:
        b.graph.finalize()
    except QnnError:
        assume(False)
    plan = b.graph.plan
    assert type(plan.steps[0].impl).__name__ == "IntegerAdd", "the plan adds codes (IntegerAdd)"
    assert plan.engine.fallbacks == [], f"IntegerAdd lowers to C: {plan.engine.fallbacks}"
    rng = np.random.default_rng(seed)
    info = np.iinfo(code)
    feeds = {t.id: rng.integers(info.min, info.max + 1, tuple(int(d) for d in t.dims)).astype(code) for t in x}
    check_plan(plan, feeds)


INT_EDGES = np.array([-2**31, 2**31 - 1, -1, 0, 1, 7, -7, 2], np.int64)


@given(op=st.sampled_from(BINARY[:-1] + COMPARE + ["ElementWiseFloorDiv", "ElementWiseFmod", "ElementWiseMod"]),
       dtype=st.sampled_from([Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32]),
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       seed=st.integers(0, 2**31))
def test_int32_binary_ops_run_in_c_bit_identical(op, dtype, shapes, seed):
    """INT_32 / UINT_32 arithmetic (wrapping, x / 0 = 0, INT32_MIN / -1) and comparisons."""
    (sa, sb), out = shapes.input_shapes, shapes.result_shape
    b = GraphBuilder(tracked_context(), "ints")
    x = [b.tensor(f"x{i}", s, dtype, type_=APP_WRITE) for i, s in enumerate((sa, sb))]
    y = b.tensor("y", out, BOOL if op in COMPARE else dtype, type_=APP_READ)
    b.node(op, "n", x, [y])
    try:
        b.graph.finalize()
    except QnnError:
        assume(False)
    assert b.graph.plan.engine.fallbacks == [], f"{op} on integers lowers to C: {b.graph.plan.engine.fallbacks}"
    rng = np.random.default_rng(seed)
    np_type = np.int32 if dtype == Q.QNN_DATATYPE_INT_32 else np.uint32
    feeds = {}
    for t in x:
        shape = tuple(int(d) for d in t.dims)
        v = rng.choice(INT_EDGES, shape) if rng.random() < 0.5 else rng.integers(-50, 50, shape)
        feeds[t.id] = np.asarray(v).astype(np_type)
    with np.errstate(all="ignore"):
        check_plan(b.graph.plan, feeds)


@pytest.mark.parametrize("op", ["ElementWiseNeg", "ElementWiseAbs", "ElementWiseSign"])
@pytest.mark.parametrize("dtype,np_type", [(Q.QNN_DATATYPE_INT_32, np.int32), (Q.QNN_DATATYPE_UINT_32, np.uint32)])
def test_int32_unary_ops_run_in_c_bit_identical(op, dtype, np_type):
    b = GraphBuilder(tracked_context(), "ints")
    x = b.tensor("x", (8,), dtype, type_=APP_WRITE)
    y = b.tensor("y", (8,), dtype, type_=APP_READ)
    b.node(op, "n", [x], [y])
    try:
        b.graph.finalize()
    except QnnError:
        pytest.skip(f"the HTP model refuses {op} on this type (as the vendor)")
    assert b.graph.plan.engine.fallbacks == [], f"integer {op} lowers to C"
    check_plan(b.graph.plan, {x.id: INT_EDGES.astype(np_type)})


# -- unary ops and activations ------------------------------------------------------------------

@given(op=st.sampled_from(UNARY + ["Softmax", "LogSoftmax"]), encoding=st.sampled_from(sorted(ENCODINGS)),
       shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple), seed=st.integers(0, 2**31))
def test_unary_ops_run_in_c_bit_identical(op, encoding, shape, seed):
    graph, ins = one_node(op, [shape], shape, encoding)
    assume(graph is not None)
    assert_lowered_and_identical(graph, ins, encoding, seed, f"{op} {encoding} {shape}")


@pytest.mark.parametrize("op,params", [
    ("ReluMinMax", {"min_value": -0.5, "max_value": 2.25}),
    ("Elu", {"alpha": 0.3}),
    ("Gelu", {}),
    ("Softmax", {"axis": 1, "beta": 0.7}),
    ("LogSoftmax", {"axis": 0, "beta": -1.3}),
    ("ElementWiseUnary", {"operation": int(Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_RECIPROCAL)}),
    ("ElementWiseUnary", {"operation": int(Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_EXP)}),
])
@pytest.mark.parametrize("encoding", ["float32", "u8"])
def test_parameterized_activations_run_in_c_bit_identical(op, params, encoding):
    graph, ins = one_node(op, [(1, 3, 4, 5)], (1, 3, 4, 5), encoding, **params)
    if graph is None:
        pytest.skip(f"the HTP model refuses {op} on {encoding} (as the vendor)")
    assert_lowered_and_identical(graph, ins, encoding, 7, f"{op} {params} {encoding}")


@pytest.mark.parametrize("name", ["ELU", "GELU", "HARD_SIGMOID", "HARD_SWISH", "RELU", "RELU_MIN_MAX",
                                  "SIGMOID", "SOFTPLUS", "TANH"])
def test_element_wise_neuron_operations_run_in_c_bit_identical(name):
    params = {"operation": int(act._N[name])}
    if name == "RELU_MIN_MAX":
        params.update(min_value=-1.5, max_value=0.75)
    if name in ("ELU", "HARD_SIGMOID"):
        params["alpha"] = 0.25
    graph, ins = one_node("ElementWiseNeuron", [(2, 3, 7)], (2, 3, 7), "float32", **params)
    if graph is None:
        pytest.skip(f"the HTP model refuses ElementWiseNeuron {name}")
    assert_lowered_and_identical(graph, ins, "float32", 11, f"ElementWiseNeuron {name}")


def test_reference_kernels_keep_transcendental_ops_in_python(monkeypatch):
    monkeypatch.setattr(_fast.config, "kernels", "reference")
    graph, ins = one_node("Sigmoid", [(2, 8)], (2, 8), "float32")
    fb = graph.plan.engine.fallbacks
    assert [op for _, op, _ in fb] == ["Sigmoid"] and "reference" in fb[0][2], \
        f"with QNNEMU_KERNELS=reference Sigmoid computes with numpy, so it stays in Python: {fb}"
    check_plan(graph.plan, feeds_for(ins, "float32", np.random.default_rng(1)))
    graph, ins = one_node("Relu6", [(2, 8)], (2, 8), "float32")
    assert graph.plan.engine.fallbacks == [], "exact ops lower to C with the reference kernels too"
    check_plan(graph.plan, feeds_for(ins, "float32", np.random.default_rng(2)))


# -- the shared transcendental kernels: accuracy against float64 references ----------------------

def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


@pytest.mark.parametrize("name,ref,ulps", [
    ("exp", np.exp, 1), ("log", np.log, 1), ("tanh", np.tanh, 1), ("sin", np.sin, 1), ("atan", np.arctan, 1),
    ("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), 2), ("sigmoid_exact", lambda x: 1.0 / (1.0 + np.exp(-x)), 1),
    ("erf", act.erf, 1), ("gelu", lambda x: 0.5 * x * act.erfc(-x / np.sqrt(2.0)), 1),
])
def test_shared_kernels_are_accurate(name, ref, ulps):
    """The float64 evaluations round once (within 1 ulp of numpy's float64 value, ties aside);
    the Sigmoid's float32 evaluation stays within 2 ulps (csrc/eng_eltwise.c sigmoid_f32)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(20000) * 4, rng.uniform(0, 30, 2000),
                        rng.uniform(-1e-3, 1e-3, 2000)]).astype(np.float32)
    if name == "log":
        x = np.abs(x) + np.float32(1e-30)
    got = _fast_eltwise.unary(name, x)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want) & (np.abs(want) > np.float32(1e-37))
    assert _ulps(got[finite], want[finite]).max() <= ulps, \
        f"{name}: within {ulps} float32 ulp(s) of the float64 reference"


def test_shared_kernels_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    sig = _fast_eltwise.unary("sigmoid", x)
    assert np.isnan(sig[0]) and sig[1] == 1.0 and sig[2] == 0.0 and sig[3] == 0.5, f"sigmoid: {sig}"
    gelu = _fast_eltwise.unary("gelu", x)
    assert np.isnan(gelu[0]) and gelu[1] == np.inf and gelu[2] == 0.0 and gelu[3] == 0.0, f"gelu: {gelu}"
    sm = _fast_eltwise.softmax(np.array([[1.0, np.nan, 2.0], [1.0, 1.0, 1.0]], np.float32), 1, 1.0, False)
    assert np.isnan(sm[0]).all() and np.allclose(sm[1], 1.0 / 3.0), f"softmax: NaN rows stay NaN: {sm}"


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_shared_softmax_matches_float64_numpy(axis):
    x = (np.random.default_rng(axis).standard_normal((3, 5, 7)) * 5).astype(np.float32)
    for log_form in (False, True):
        got = _fast_eltwise.softmax(x, axis, 0.8, log_form)
        z = 0.8 * x.astype(np.float64)
        z -= z.max(axis=axis, keepdims=True)
        total = np.exp(z).sum(axis=axis, keepdims=True)
        want = z - np.log(total) if log_form else np.exp(z) / total
        assert np.allclose(got, want.astype(np.float32), rtol=3e-7, atol=1e-7), \
            f"{'LogSoftmax' if log_form else 'Softmax'} along axis {axis} agrees with float64 numpy"


# -- normalizations ------------------------------------------------------------------------------

def norm_graph(op: str, shape, statics, encoding: str, **params):
    """x -> op(x, static gamma / beta ...) -> y, finalized; None when the HTP model refuses it."""
    dtype, quant, oquant = ENCODINGS[encoding]
    b = GraphBuilder(tracked_context(), "norm")
    x = b.tensor("x", shape, dtype, type_=APP_WRITE, quant=quant)
    ins = [x] + [b.tensor(f"s{i}", s.shape, F32, type_=Q.QNN_TENSOR_TYPE_STATIC, data=s)
                 for i, s in enumerate(statics)]
    y = b.tensor("y", shape, dtype, type_=APP_READ, quant=oquant)
    b.node(op, "n", ins, [y], **params)
    try:
        b.graph.finalize()
    except QnnError:
        return None, [x]
    return b.graph, [x]


@given(op=st.sampled_from(["LayerNorm", "RmsNorm", "InstanceNorm", "GroupNorm", "Batchnorm"]),
       encoding=st.sampled_from(["float32", "u8", "u16"]),
       shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 5), st.sampled_from([4, 8, 12])),
       region=st.sampled_from([0, 1, 2]), mode=st.sampled_from([0, 1]), with_beta=st.booleans(),
       seed=st.integers(0, 2**31))
def test_normalizations_run_in_c_bit_identical(op, encoding, shape, region, mode, with_beta, seed):
    rng = np.random.default_rng(seed)
    c = shape[-1]
    gamma = rng.standard_normal(c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    params = {}
    if op in ("LayerNorm", "RmsNorm"):
        params["axes"] = [len(shape) - 1]
        statics = [gamma, beta] if with_beta else [gamma]
    elif op == "InstanceNorm":
        regions = [Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_SPATIAL, Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_CHANNEL,
                   Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_ALL]
        params.update(region=int(regions[region]), mode=int([Q.QNN_OP_INSTANCE_NORM_MODE_MU_SIGMA,
                                                             Q.QNN_OP_INSTANCE_NORM_MODE_RMS][mode]))
        statics = [gamma, beta]
    elif op == "GroupNorm":
        params["group"] = 4
        statics = [gamma, beta] if with_beta else [gamma]
    else:
        statics = [gamma, beta] if with_beta else [gamma]
    graph, ins = norm_graph(op, shape, statics, encoding, **params)
    assume(graph is not None)
    assert_lowered_and_identical(graph, ins, encoding, seed, f"{op} {encoding} {shape} {params}")


def test_layer_norm_over_two_axes_and_dynamic_gamma():
    rng = np.random.default_rng(4)
    gamma = rng.standard_normal((6, 8)).astype(np.float32)
    graph, ins = norm_graph("LayerNorm", (2, 6, 8), [gamma], "float32", axes=[1, 2])
    assert graph is not None, "LayerNorm over the last two axes finalizes"
    assert_lowered_and_identical(graph, ins, "float32", 4, "LayerNorm over axes [1, 2]")
    b = GraphBuilder(tracked_context(), "dyn")
    x = b.tensor("x", (2, 8), F32, type_=APP_WRITE)
    g = b.tensor("g", (8,), F32, type_=APP_WRITE)
    y = b.tensor("y", (2, 8), F32, type_=APP_READ)
    b.node("LayerNorm", "n", [x, g], [y], axes=[1])
    b.graph.finalize()
    fb = b.graph.plan.engine.fallbacks
    assert len(fb) == 1 and "dynamic gamma" in fb[0][2], f"a dynamic gamma stays in Python: {fb}"


@pytest.mark.parametrize("op,shapes", [("ElementWiseAdd", [(2, 3, 8), (2, 3, 8)]),
                                       ("ElementWiseMultiply", [(2, 3, 8), (8,)]),
                                       ("Sigmoid", [(2, 3, 8)]), ("Softmax", [(2, 3, 8)]), ("HardSwish", [(2, 3, 8)]),
                                       ("ElementWiseGreater", [(2, 3, 8), (1, 8)])])
def test_float16_math_graphs_run_in_c_bit_identical(op, shapes, monkeypatch):
    """Float32 graphs in the HTP's float16 math (v69+): the core's float16 roundings around the
    same kernels."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float16")
    out_dtype = BOOL if op in COMPARE else None
    graph, ins = one_node(op, shapes, (2, 3, 8), "float32", out_dtype)
    assert graph is not None and graph.plan.fp16, f"{op} finalizes in float16 math"
    assert_lowered_and_identical(graph, ins, "float32", 21, f"{op} in float16 math")


@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=4),
       seed=st.integers(0, 2**31))
def test_float16_math_divide_runs_its_reciprocal_kernel_in_c(shapes, seed):
    """float16.ReciprocalDivide (the vendor's float16 reciprocal, truncated, then a product)."""
    import os
    os.environ["QNNEMU_FLOAT_MATH"] = "float16"   # (hypothesis: no function-scoped monkeypatch)
    try:
        graph, ins = one_node("ElementWiseDivide", list(shapes.input_shapes), shapes.result_shape, "float32")
    finally:
        del os.environ["QNNEMU_FLOAT_MATH"]
    assume(graph is not None)
    assert type(graph.plan.steps[0].impl).__name__ == "ReciprocalDivide", "float16 math divides by r(b)"
    assert_lowered_and_identical(graph, ins, "float32", seed, f"ReciprocalDivide {shapes}")


def test_shared_power_kernel_follows_pow():
    a = np.array([[2.0], [-8.0], [0.0], [np.inf], [-2.0]], np.float32)
    b = np.array([0.5, 3.0, -1.0, 0.0], np.float32)
    got = _fast_eltwise.binary("pow", a, b)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert got.shape == (5, 4) and same.all(), f"pow broadcasts and follows IEEE pow: {got} vs {want}"


# -- 8/16-bit fixed point without float32 temporaries (qe_k_lut, qe_k_qbinary) ----------------------

CODE_TYPES = {"u8": (U8, np.uint8), "s8": (Q.QNN_DATATYPE_SFIXED_POINT_8, np.int8),
              "u16": (U16, np.uint16), "s16": (Q.QNN_DATATYPE_SFIXED_POINT_16, np.int16)}


def kernels_of(graph) -> list[str]:
    """The C kernels of the graph's program, by name, in order."""
    from qnnemu._kernels import ffi, lib
    names = {int(ffi.cast("intptr_t", ffi.addressof(lib, n))): n
             for n in ("qe_k_lut", "qe_k_qbinary", "qe_k_iadd", "qe_k_qadd", "qe_k_dequant", "qe_k_requant",
                       "qe_k_unary_f32", "qe_k_binary_f32", "qe_k_copy", "qe_k_silu_f32", "qe_k_nop")}
    # (an element-wise chain's header, buffer count -1, is not a kernel: csrc/engine.h QE_CHAIN_MARK)
    return [names.get(int(row[0]), "?") for row in graph.plan.engine.program.steps if int(row[2]) != -1]


def codes_graph(op, inputs, out, **params):
    """A finalized one-node graph: inputs [(shape, code type, (scale, offset)) or (array,
    code type, (scale, offset)) for a static] -> op -> out (shape, code type, (scale, offset));
    None when the HTP model refuses it."""
    b = GraphBuilder(tracked_context(), "codes")
    ins = []
    for i, (shape_or_data, kind, quant) in enumerate(inputs):
        if isinstance(shape_or_data, np.ndarray):
            ins.append(b.tensor(f"s{i}", shape_or_data.shape, CODE_TYPES[kind][0], type_=Q.QNN_TENSOR_TYPE_STATIC,
                                data=shape_or_data, quant=quant))
        else:
            ins.append(b.tensor(f"x{i}", shape_or_data, CODE_TYPES[kind][0], type_=APP_WRITE, quant=quant))
    y = b.tensor("y", out[0], CODE_TYPES[out[1]][0], type_=APP_READ, quant=out[2])
    b.node(op, "n", ins, [y], **params)
    try:
        b.graph.finalize()
    except QnnError:
        return None, ins
    return b.graph, ins


def random_codes(rng, kind: str, shape) -> np.ndarray:
    info = np.iinfo(CODE_TYPES[kind][1])
    return rng.integers(info.min, info.max + 1, shape).astype(CODE_TYPES[kind][1])


def every_code(kind: str) -> np.ndarray:
    bits = np.arange(256 if kind in ("u8", "s8") else 65536, dtype=np.uint8 if kind in ("u8", "s8") else np.uint16)
    return bits.view(CODE_TYPES[kind][1])


quants = st.tuples(st.floats(2.0**-14, 8.0, width=32), st.integers(-40000, 200))


def _offset_for(kind: str, q):
    """An offset the code type can hold (the HTP model checks it)."""
    scale, off = q
    lo = {"u8": -255, "s8": -127, "u16": -65535, "s16": -32767}[kind]
    return float(scale), int(max(lo, min(0 if kind[0] == "u" else 127, off)))


@pytest.mark.parametrize("kind", sorted(CODE_TYPES))
@pytest.mark.parametrize("op,params", [("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}), ("Gelu", {}),
                                       ("ReluMinMax", {"min_value": -0.5, "max_value": 2.25}),
                                       ("ElementWiseExp", {}), ("ElementWiseLog", {})])
def test_fixed_point_unary_ops_are_one_table_lookup_on_every_code(op, params, kind):
    """Every input code of the type through the table: the plan's own step computed each entry,
    so the engine's codes equal the plan's for all of them."""
    scale, offset = _offset_for(kind, (0.03 if kind.endswith("8") else 0.0005, -100))
    x = every_code(kind)
    out_quant = (1.0 / 128, 0 if kind[0] == "s" else -64)
    graph, ins = codes_graph(op, [(x.shape, kind, (scale, offset))], (x.shape, kind, out_quant), **params)
    if graph is None:
        pytest.skip(f"the HTP model refuses {op} on {kind}")
    assert graph.plan.engine.fallbacks == [], f"{op} {kind} lowers to C: {graph.plan.engine.fallbacks}"
    assert kernels_of(graph) == ["qe_k_lut"], f"{op} on {kind} codes is one table lookup: {kernels_of(graph)}"
    check_plan(graph.plan, {ins[0].id: x})


@given(op=st.sampled_from(UNARY + ["ReluMinMax", "Elu", "Gelu", "ElementWiseNeuron"]),
       kinds=st.tuples(st.sampled_from(sorted(CODE_TYPES)), st.sampled_from(sorted(CODE_TYPES))),
       qin=quants, qout=quants, shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
       neuron=st.sampled_from(sorted(act._N)), seed=st.integers(0, 2**31))
def test_fixed_point_unary_ops_as_tables_bit_identical(op, kinds, qin, qout, shape, neuron, seed):
    """Any code types in and out (8 or 16 bits, signed or not), any encodings, any shape."""
    params = {}
    if op == "ReluMinMax":
        params = {"min_value": -1.0, "max_value": 3.0}
    elif op == "ElementWiseNeuron":
        params = {"operation": int(act._N[neuron])}
        if neuron == "RELU_MIN_MAX":
            params.update(min_value=-1.5, max_value=0.75)
    kin, kout = kinds
    graph, ins = codes_graph(op, [(shape, kin, _offset_for(kin, qin))], (shape, kout, _offset_for(kout, qout)),
                             **params)
    assume(graph is not None)
    assert kernels_of(graph) == ["qe_k_lut"], f"{op} {kin}->{kout} is one table lookup: {kernels_of(graph)}"
    check_plan(graph.plan, {ins[0].id: random_codes(np.random.default_rng(seed), kin, shape)})


QB_OPS = ["ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
          "ElementWiseMaximum", "ElementWiseMinimum"]


@given(op=st.sampled_from(QB_OPS), kinds=st.tuples(*[st.sampled_from(sorted(CODE_TYPES))] * 3),
       qs=st.tuples(quants, quants, quants), static=st.sampled_from([None, 0, 1]),
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=5, max_side=5),
       seed=st.integers(0, 2**31))
def test_fixed_point_binary_ops_are_one_fused_step(op, kinds, qs, static, shapes, seed):
    """dequantize a, dequantize b (or a static's real values), the float32 op, requantize: one
    qe_k_qbinary pass, same codes as the plan, for every broadcast."""
    (sa, sb), out = shapes.input_shapes, shapes.result_shape
    rng = np.random.default_rng(seed)
    inputs = []
    for i, s in enumerate((sa, sb)):
        data = random_codes(rng, kinds[i], s) if static == i else s
        inputs.append((data, kinds[i], _offset_for(kinds[i], qs[i])))
    graph, ins = codes_graph(op, inputs, (out, kinds[2], _offset_for(kinds[2], qs[2])))
    assume(graph is not None)
    ks = kernels_of(graph)
    if type(graph.plan.steps[0].impl).__name__ == "IntegerAdd":
        assert ks == ["qe_k_iadd"], f"the plan's IntegerAdd is qe_k_iadd: {ks}"
    else:
        assert ks == ["qe_k_qbinary"], f"{op} {kinds} is one fused step: {ks}"
    feeds = {t.id: random_codes(rng, inputs[i][1], inputs[i][0]) for i, t in enumerate(ins)
             if not isinstance(inputs[i][0], np.ndarray)}
    check_plan(graph.plan, feeds)


@pytest.mark.parametrize("mode", ["half_even", "half_up", "half_away_from_zero"])
def test_fixed_point_binary_rounding_modes_and_division_by_zero(mode, monkeypatch):
    """Each rounding mode of Requantize's float32 path; x / 0 (inf, NaN -> the top code)."""
    from qnnemu.spec import quant
    monkeypatch.setitem(quant.ROUNDING_BY_OP, "ElementWiseDivide", mode)
    q = (0.5, -4)
    graph, ins = codes_graph("ElementWiseDivide", [((4, 64), "u8", q), ((4, 64), "u8", q)],
                             ((4, 64), "u8", (0.25, -128)))
    assert graph is not None and graph.plan.steps[0].out_conv[0].mode == mode, f"Divide rounds {mode}"
    assert kernels_of(graph) == ["qe_k_qbinary"], f"one fused step: {kernels_of(graph)}"
    a = np.arange(256, dtype=np.uint8).reshape(4, 64)
    b = np.tile(np.array([4, 5, 6, 3, 2, 12, 8, 1], np.uint8), 32).reshape(4, 64)   # 4: real 0
    check_plan(graph.plan, {ins[0].id: a, ins[1].id: b})


def test_large_fixed_point_steps_split_over_threads_give_the_same_codes():
    """A tensor big enough for the pool's threads: the split does not change a code."""
    shape = (1, 96, 96, 96)   # (above the one-thread limit of both kernels)
    graph, ins = codes_graph("ElementWiseMultiply", [(shape, "u8", (0.02, -128)), ((1, 1, 1, 96), "u8", (0.01, -3))],
                             (shape, "u8", (0.05, -60)))
    assert kernels_of(graph) == ["qe_k_qbinary"]
    rng = np.random.default_rng(3)
    check_plan(graph.plan, {ins[0].id: random_codes(rng, "u8", shape),
                            ins[1].id: random_codes(rng, "u8", (1, 1, 1, 96))})
    graph, ins = codes_graph("Sigmoid", [(shape, "u16", (0.0005, -30000))], (shape, "u16", (1.0 / 65536, 0)))
    assert kernels_of(graph) == ["qe_k_lut"]
    check_plan(graph.plan, {ins[0].id: random_codes(rng, "u16", shape)})


@pytest.mark.parametrize("sa,sb", [((7, 700), (700,)), ((700,), (7, 700)), ((3, 5000), (5000,)),
                                   ((2, 3, 600), (1,)), ((1,), (2, 3, 600)), ((5, 1, 600), (1, 4, 600)),
                                   ((2, 600, 3), (600, 1))])
def test_fixed_point_binary_long_rows_and_every_broadcast_path(sa, sb):
    """Rows longer than a block, repeated rows longer than the tile, scalars, and broadcasts on
    both sides (the general path): the same codes as the plan."""
    out = np.broadcast_shapes(sa, sb)
    for op in ("ElementWiseSubtract", "ElementWiseMultiply"):
        graph, ins = codes_graph(op, [(sa, "u8", (0.02, -128)), (sb, "s16", (0.001, 0))], (out, "u16", (0.01, -30000)))
        assert kernels_of(graph) == ["qe_k_qbinary"], f"{op} {sa} {sb}: {kernels_of(graph)}"
        rng = np.random.default_rng(len(out))
        check_plan(graph.plan, {ins[0].id: random_codes(rng, "u8", sa), ins[1].id: random_codes(rng, "s16", sb)})


def test_shared_kernels_give_the_same_bytes_on_any_thread_count():
    """The float kernels split large arrays over the pool's threads: one thread or several, the
    same bytes (the fast path and the engine may run at different thread counts)."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((4, 128, 1024)) * 4).astype(np.float32)   # (enough work for 4 threads)
    gamma, beta = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    saved = _fast.threads()

    def results():
        return [_fast_eltwise.unary("sigmoid", x), _fast_eltwise.unary("gelu", x), _fast_eltwise.unary("relu", x),
                _fast_eltwise.binary("mul", x, x[:1, :1]), _fast_eltwise.binary("max", x, x[::-1]),
                _fast_eltwise.softmax(x, 2, 0.9, False), _fast_eltwise.softmax(x, 1, 1.0, True),
                _fast_eltwise.norm(x, (512, 1, 1, 1024), gamma, beta, 1e-5, True, True)]
    try:
        _fast.set_threads(1)
        one = results()
        _fast.set_threads(4)
        many = results()
    finally:
        _fast.set_threads(saved)
    for k, (a, b) in enumerate(zip(one, many)):
        assert a is not None and a.tobytes() == b.tobytes(), f"kernel {k}: 1 thread and 4 threads agree bytewise"


# -- Sigmoid's fast AVX-512 pass and SiLU -------------------------------------------------------

def _sigmoid_patterns(rng, n: int) -> np.ndarray:
    """Random float32 bit patterns (every class: NaN, inf, subnormal, huge) plus values in the
    range where the sigmoid is neither 0 nor 1, plus the edges (0, the float32 subnormal output
    range near -88 .. -104, the saturation near 17)."""
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    live = rng.uniform(-110.0, 20.0, n).astype(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 17.328680, 17.32868,
                      -87.33654, -88.72284, -103.27893, -103.97208, -104.0, 88.0, 700.0, -700.0, 3e38,
                      -3e38], np.float32)
    near = np.nextafter(np.repeat(edges, 4), np.tile(np.array([np.inf, -np.inf, 0, 1], np.float32),
                                                     edges.size)).astype(np.float32)
    return np.concatenate([bits, live, edges, near])


@given(seed=st.integers(0, 2**32 - 1))
def test_sigmoid_within_two_ulps_of_the_exact_formula(seed):
    """The Sigmoid's float32 evaluation (csrc/eng_eltwise.c sigmoid_f32: AVX-512, AVX2 or scalar)
    against the exact formula (1 / (1 + exp(-x)) in float64, one rounding): within 2 float32 ulps
    everywhere, mostly equal; |x| > 87 and NaN take the exact formula itself (the same bytes);
    tools/exhaustive_sigmoid.py measures all 2^32 inputs."""
    rng = np.random.default_rng(seed)
    x = _sigmoid_patterns(rng, 20000)
    fast = _fast_eltwise.unary("sigmoid", x)
    exact = _fast_eltwise.unary("sigmoid_exact", x)
    nan = np.isnan(x)
    assert np.isnan(fast[nan]).all() and np.isnan(exact[nan]).all(), "sigmoid(NaN) is NaN on both paths"
    far = ~nan & (np.abs(x) > np.float32(87.0))
    assert fast[far].tobytes() == exact[far].tobytes(), "|x| > 87: the exact formula's bytes"
    ulps = _ulps(fast[~nan], exact[~nan])
    assert ulps.max() <= 2, f"within 2 ulps of the exact formula; {ulps.max()} at x = {x[~nan][ulps.argmax()]}"
    live = ~nan & (np.abs(x) < 20)
    assert (fast[live] == exact[live]).mean() > 0.8, "most values are the exact formula's"


def test_exact_sigmoid_is_correctly_rounded_where_numpys_float64_formula_is_not():
    """The one input of 2^32 where the exact kernel and numpy's float64 reference differ (on this
    machine's numpy): numpy's value is exactly the float32 halfway point 0x1.0000530000000p-1 and
    rounds up to even, the true sigmoid lies 2e-17 below it, so 0.50000244 is the correct result."""
    x = np.array([0x37260000] * 3, np.uint32).view(np.float32)     # 9.894371e-06
    want = np.float32(0.500002443790435791015625)
    assert (_fast_eltwise.unary("sigmoid_exact", x) == want).all(), f"sigmoid_exact(9.894371e-06) rounds down to {want}"


SIGMOID_PROBE = """
import hashlib, numpy as np
from qnnemu.ops import _fast_eltwise
rng = np.random.default_rng(9)
x = np.concatenate([rng.integers(0, 1 << 32, 50000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                    rng.uniform(-90.0, 90.0, 50000).astype(np.float32),
                    (rng.standard_normal(50001) * 4).astype(np.float32)])
print(hashlib.sha256(_fast_eltwise.unary("sigmoid", x).tobytes()).hexdigest())
"""


def test_sigmoid_same_bytes_on_every_isa():
    """The Sigmoid's float32 evaluation spells out every rounding and fused multiply-add, so the
    AVX-512, AVX2 and scalar code give the same bytes (a tail of 1 element and NaN lanes
    included)."""
    digests = digests_by_isa(SIGMOID_PROBE, "sigmoid", ("", "avx2", "sse"))
    assert len(set(digests.values())) == 1, f"Sigmoid bytes per ISA are equal: {digests}"


def silu_graph(shape, x_first: bool = True, extra_reader: bool = False, graph_output: bool = False):
    """x -> Sigmoid -> s; Multiply(x, s) (or (s, x)) -> y; optionally s also read by an Add or
    returned as a graph output (then no fusion)."""
    b = GraphBuilder(tracked_context(), "silu")
    x = b.tensor("x", shape, F32, type_=APP_WRITE)
    s = b.tensor("s", shape, F32, type_=APP_READ if graph_output else Q.QNN_TENSOR_TYPE_NATIVE)
    y = b.tensor("y", shape, F32, type_=APP_READ)
    b.node("Sigmoid", "sig", [x], [s])
    b.node("ElementWiseMultiply", "mul", [x, s] if x_first else [s, x], [y])
    outs = [y]
    if extra_reader:
        z = b.tensor("z", shape, F32, type_=APP_READ)
        b.node("ElementWiseAdd", "add", [s, x], [z])
        outs.append(z)
    b.graph.finalize()
    return b.graph, [x]


@pytest.mark.parametrize("shape", [(1, 5, 7, 3), (1, 56, 56, 144), (2, 3, 1000)])
@pytest.mark.parametrize("x_first", [True, False])
def test_silu_is_one_c_step_bit_identical(shape, x_first):
    graph, ins = silu_graph(shape, x_first)
    # (the plan folds the Sigmoid into the Multiply: its step is the no-op, the product the SiLU)
    assert kernels_of(graph) == ["qe_k_nop", "qe_k_silu_f32"], \
        f"Sigmoid -> Multiply by its input is one SiLU step: {kernels_of(graph)}"
    assert_lowered_and_identical(graph, ins, "float32", 3, f"SiLU {shape} x_first={x_first}")


@pytest.mark.parametrize("variant", ["extra_reader", "graph_output"])
def test_silu_is_not_fused_when_the_sigmoid_has_other_readers(variant):
    graph, ins = silu_graph((1, 8, 8, 16), extra_reader=variant == "extra_reader",
                            graph_output=variant == "graph_output")
    kernels = kernels_of(graph)
    assert "qe_k_silu_f32" not in kernels and kernels[:2] == ["qe_k_unary_f32", "qe_k_binary_f32"], \
        f"{variant}: the Sigmoid's output is needed, no fusion: {kernels}"
    assert_lowered_and_identical(graph, ins, "float32", 4, f"SiLU not fused ({variant})")


# -- Sigmoid and SiLU in float16 math: table lookups (csrc/eng_eltwise.c qe_k_sigmoid_f16) ------------
@pytest.mark.parametrize("even", [0, 1])
def test_float16_sigmoid_and_silu_tables_equal_the_two_steps(even):
    """Every float16 value (and float32 values that are none: the step-by-step path, NaN, tails
    of fewer than 16): qe_k_sigmoid_f16 / qe_k_silu_f16 give the bytes of the Sigmoid's kernel,
    the float16 rounding, the float32 product and the rounding again, both operand orders."""
    from qnnemu.core.plan import _fp16_round, _fp16_round_even
    rnd = _fp16_round_even if even else _fp16_round
    rng = np.random.default_rng(17)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    others = np.concatenate([SPECIALS, (rng.standard_normal(3001) * 6).astype(np.float32)])
    x = np.concatenate([halves, others])
    sig = _fast_eltwise.unary("sigmoid", x)    # the Sigmoid step's kernel
    with np.errstate(all="ignore"):
        s_ref = rnd(sig)
        y = np.empty_like(x)
        assert call("qe_k_sigmoid_f16", [x, y], (x.size, even)) == 0, "qe_k_sigmoid_f16 returns 0"
        assert y.tobytes() == s_ref.tobytes(), f"Sigmoid in float16 math (ties {'even' if even else 'away'})"
        for x_first in (1, 0):
            s, y = np.empty_like(x), np.empty_like(x)
            assert call("qe_k_silu_f16", [x, s, y], (x.size, x_first, even)) == 0, "qe_k_silu_f16 returns 0"
            y_ref = rnd(x * s_ref if x_first else s_ref * x)
            assert s.tobytes() == s_ref.tobytes(), f"the SiLU's Sigmoid output (x_first={x_first})"
            assert y.tobytes() == y_ref.tobytes(), f"the SiLU's product (x_first={x_first}, ties even={even})"


def test_float16_math_silu_pair_is_one_c_step(monkeypatch):
    """A Sigmoid and the Multiply of its input by it, in float16 math: one qe_k_silu_f16 step
    (the Multiply's a qe_k_nop), another Sigmoid of the same value a qe_k_sigmoid_f16 step; the
    Python plan's bytes."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float16")
    b = GraphBuilder(tracked_context(), "silu16")
    x = b.tensor("x", (4, 9, 33), F32, type_=APP_WRITE)
    n = b.tensor("n", (4, 9, 33), F32)
    s = b.tensor("s", (4, 9, 33), F32)
    y = b.tensor("y", (4, 9, 33), F32, type_=APP_READ)
    z = b.tensor("z", (4, 9, 33), F32, type_=APP_READ)
    b.node("ElementWiseNeg", "neg", [x], [n])
    b.node("Sigmoid", "sig", [n], [s])
    b.node("ElementWiseMultiply", "mul", [s, n], [y])
    b.node("Sigmoid", "sig2", [n], [z])
    b.graph.finalize()
    plan = b.graph.plan
    assert plan.fp16 and plan.engine.fallbacks == [], f"float16 math, all in C: {plan.engine.fallbacks}"
    names = plan.engine.kernel_names
    assert "qe_k_silu_f16" in names and "qe_k_sigmoid_f16" in names, f"the float16 kernels: {names}"
    rng = np.random.default_rng(23)
    values = (rng.standard_normal(4 * 9 * 33 - SPECIALS.size) * 5).astype(np.float32)
    feeds = {x.id: np.concatenate([SPECIALS, values]).reshape(4, 9, 33)}
    with np.errstate(all="ignore"):
        check_plan(plan, feeds)
