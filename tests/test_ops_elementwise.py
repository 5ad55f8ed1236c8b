"""Numerics and validation of the element-wise ops, activations and conversions
(qnnemu/ops/elementwise.py, activation.py, cast.py).

Every op runs through its QNN contract (``check`` -> ``run``) and is compared with an
independent reference: float64 scalar formulas from ``math`` written here element by element,
Python integer arithmetic for INT_32/UINT_32, and ``onnx.reference.ReferenceEvaluator`` where
the ONNX op has the same semantics.  Negative tests: one per rule id, asserting the rule id and
the path in the error.
"""
from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest
from optest import check, expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpCheckError, OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import QuantSpec, TensorSpec

RNG = np.random.default_rng(20240611)

F32, F16, F64 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_FLOAT_64
I8, I32, I64 = Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_INT_64
U8, U32 = Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_UINT_32
BOOL, BF16 = Q.QNN_DATATYPE_BOOL_8, Q.QNN_DATATYPE_BFLOAT_16
UFX8, SFX8 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8
UFX16, SFX16 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16
SFX32, UFX4 = Q.QNN_DATATYPE_SFIXED_POINT_32, Q.QNN_DATATYPE_UFIXED_POINT_4
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
ENC_AXIS = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
ENC_BW = Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET


def qs(scale, offset, axis=None, bitwidth=None, enc=None) -> QuantSpec:
    if enc is None:
        enc = ENC_AXIS if axis is not None else (ENC_BW if bitwidth else ENC)
    if axis is not None:
        scale, offset = np.asarray(scale, np.float32), np.asarray(offset, np.int32)
    return QuantSpec(enc, scale, offset, axis, bitwidth)


QU8 = qs(0.05, -128)


# ---- helpers --------------------------------------------------------------------------------
def spec_of(a: np.ndarray) -> TensorSpec:
    return spec(a.shape, BOOL if a.dtype == np.bool_ else dtypes.from_numpy(a.dtype))


def run(op_type, arrays, params=None, specs=None, declared=None):
    """check + run as the graph layer does; bool arrays become BOOL_8 (uint8) tensors.
    Returns (output 0, inferred output spec)."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    specs = specs or [spec_of(a) for a in arrays]
    arrays = [a.astype(np.uint8) if a.dtype == np.bool_ else a for a in arrays]
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    outs = cls.check(specs, ps, declared_outputs=declared)
    op = cls(cls.parse_params(ps), specs, declared if declared is not None else outs)
    (y,) = op.run(*arrays)
    assert tuple(y.shape) == tuple(outs[0].shape), \
        f"{op_type}: run() shape {y.shape} equals the inferred shape {outs[0].shape}"
    return y, outs[0]


def assert_close(got, ref, what, rel=1e-6):
    """|got - ref| <= rel * (|ref| + max|ref|) elementwise; nan where the reference is nan."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} == reference {ref.shape}"
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"{what}: nan exactly where the reference has " \
                                               f"nan: got {got[np.isnan(got) != nan]}"
    g, r = got[~nan], ref[~nan]
    if r.size == 0:
        return
    inf = np.isinf(r)
    assert np.array_equal(g[inf], r[inf]), f"{what}: infinities match"
    g, r = g[~inf], r[~inf]
    if r.size == 0:
        return
    scale = float(np.max(np.abs(r)))
    err = np.abs(g - r)
    bound = rel * (np.abs(r) + scale) + 1e-300
    worst = float(np.max(err / bound))
    assert worst <= 1.0, f"{what}: max error {float(err.max()):.3g} within {rel} of scale " \
                         f"{scale:.3g} (ratio {worst:.3g})"


def assert_rel(got, ref, what, rel):
    """Per-element relative error (for results spanning many magnitudes)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    m = ref != 0
    err = np.max(np.abs(got[m] - ref[m]) / np.abs(ref[m])) if m.any() else 0.0
    assert err <= rel, f"{what}: max relative error {err:.3g} <= {rel}"
    assert np.all(got[~m] == 0), f"{what}: exact zeros where the reference is 0"


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def elementwise_ref(fn, *arrays):
    """fn applied to Python floats/ints element by element over the broadcast shape."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    bs = [np.broadcast_to(a, shape) for a in arrays]
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = fn(*(b[idx].item() for b in bs))
    return out


def fref(fn, *arrays):
    return elementwise_ref(fn, *arrays).astype(np.float64)


# ---- binary arithmetic, float ---------------------------------------------------------------
def _py_floor_div(a, b):
    return float(math.floor(a / b))


BINARY_FLOAT = {
    "ElementWiseAdd": lambda a, b: a + b,
    "ElementWiseSubtract": lambda a, b: a - b,
    "ElementWiseMultiply": lambda a, b: a * b,
    "ElementWiseDivide": lambda a, b: a / b,
    "ElementWiseMaximum": lambda a, b: a if a >= b else b,
    "ElementWiseMinimum": lambda a, b: a if a <= b else b,
    "ElementWisePower": math.pow,
    "ElementWiseSquaredDifference": lambda a, b: (a - b) ** 2,
    "ElementWiseFloorDiv": _py_floor_div,
    "ElementWiseFmod": math.fmod,
    "ElementWiseMod": lambda a, b: a % b,
}
SHAPES = [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5,), ()), ((1,), (2, 2))]


def binary_inputs(op_type, as_, bs, dtype=np.float32):
    a, b = rand(*as_) * 3, rand(*bs) * 3
    if op_type == "ElementWisePower":
        a = np.abs(a) + 0.25
        b = np.clip(b, -3, 3)
    if op_type in ("ElementWiseDivide", "ElementWiseFloorDiv", "ElementWiseFmod",
                   "ElementWiseMod"):
        b = np.where(np.abs(b) < 0.3, 0.7, b)
    a, b = a.astype(np.float32), b.astype(np.float32)
    if op_type == "ElementWiseFloorDiv":
        # Keep quotients away from integers, where the float32 quotient's rounding would decide.
        q = a.astype(np.float64) / b
        near = np.abs(q - np.round(q)) < 1e-3
        a = np.where(near, a + np.float32(0.37) * b, a).astype(np.float32)
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("op_type", sorted(BINARY_FLOAT))
@pytest.mark.parametrize("as_,bs", SHAPES)
def test_binary_float(op_type, as_, bs):
    a, b = binary_inputs(op_type, as_, bs)
    y, out = run(op_type, [a, b])
    assert y.dtype == np.float32 and out.dtype == F32, f"{op_type}: float32 in, float32 out"
    assert out.shape == np.broadcast_shapes(as_, bs), f"{op_type}: broadcast output shape"
    assert_close(y, fref(BINARY_FLOAT[op_type], a, b), f"{op_type} {as_} op {bs}", rel=1e-6)


@pytest.mark.parametrize("op_type", sorted(BINARY_FLOAT))
def test_binary_float16(op_type):
    a, b = binary_inputs(op_type, (3, 4), (4,))
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    y, out = run(op_type, [a16, b16])
    assert y.dtype == np.float16 and out.dtype == F16, f"{op_type}: float16 in, float16 out"
    ref = fref(BINARY_FLOAT[op_type], a16.astype(np.float64), b16.astype(np.float64))
    # One float16 rounding of the float32 result (FloorDiv/Mod can flip at integer quotients
    # of the rounded inputs; none here).
    assert_close(y, ref, f"{op_type} float16", rel=1e-3)


def test_float_division_by_zero_is_ieee():
    a = np.array([1.0, -2.0, 0.0, 3.0], np.float32)
    b = np.zeros(4, np.float32)
    y, _ = run("ElementWiseDivide", [a, b])
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2]), f"IEEE x/0: {y}"
    y, _ = run("ElementWiseFmod", [a, b])
    assert np.all(np.isnan(y)), f"fmod(x, 0) is nan: {y}"


def test_floor_div_and_mods_signs():
    a = np.array([7.5, -7.5, 7.5, -7.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    fd, _ = run("ElementWiseFloorDiv", [a, b])
    fm, _ = run("ElementWiseFmod", [a, b])
    md, _ = run("ElementWiseMod", [a, b])
    assert fd.tolist() == [3.0, -4.0, -4.0, 3.0], f"FloorDiv rounds toward -inf: {fd}"
    assert fm.tolist() == [1.5, -1.5, 1.5, -1.5], f"Fmod takes the dividend's sign: {fm}"
    assert md.tolist() == [1.5, 0.5, -0.5, -1.5], f"Mod takes the divisor's sign: {md}"


# ---- binary arithmetic, integers --------------------------------------------------------------
def wrap(v, bits=32, signed=True):
    v %= 1 << bits
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _tdiv(a, b):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _fmod(a, b):
    return 0 if b == 0 else a - b * _tdiv(a, b)


BINARY_INT = {
    "ElementWiseAdd": lambda a, b: a + b,
    "ElementWiseSubtract": lambda a, b: a - b,
    "ElementWiseMultiply": lambda a, b: a * b,
    "ElementWiseDivide": _tdiv,
    "ElementWiseMaximum": max,
    "ElementWiseMinimum": min,
    "ElementWiseSquaredDifference": lambda a, b: (a - b) ** 2,
    "ElementWiseFloorDiv": lambda a, b: 0 if b == 0 else a // b,
    "ElementWiseFmod": _fmod,
    "ElementWiseMod": lambda a, b: 0 if b == 0 else a % b,
}
IA = np.array([-7, 7, -7, 7, 0, 5, -2147483648, 2147483647, -6, 123456, -9], np.int32)
IB = np.array([2, -2, -2, 2, 3, 0, 1, 1, 3, 654321, -9], np.int32)


@pytest.mark.parametrize("op_type", sorted(BINARY_INT))
def test_binary_int32(op_type):
    y, out = run(op_type, [IA, IB])
    assert y.dtype == np.int32 and out.dtype == I32, f"{op_type}: INT_32 stays INT_32"
    ref = [wrap(BINARY_INT[op_type](int(a), int(b))) for a, b in zip(IA, IB)]
    assert y.tolist() == ref, f"{op_type} INT_32 (wrapping, x/0 = 0): {y.tolist()} == {ref}"


@pytest.mark.parametrize("op_type", sorted(BINARY_INT))
def test_binary_uint32(op_type):
    a = np.array([7, 3, 0, 4294967295, 10, 5], np.uint32)
    b = np.array([2, 5, 3, 2, 0, 5], np.uint32)
    y, out = run(op_type, [a, b[None, :]])
    assert y.dtype == np.uint32 and out.dtype == U32, f"{op_type}: UINT_32 stays UINT_32"
    ref = [wrap(BINARY_INT[op_type](int(p), int(q)), signed=False) for p, q in zip(a, b)]
    assert y[0].tolist() == ref, f"{op_type} UINT_32: {y[0].tolist()} == {ref}"


def test_int32_broadcast():
    a = np.arange(6, dtype=np.int32).reshape(2, 3) - 3
    b = np.array([2], np.int32)
    y, out = run("ElementWiseDivide", [a, b])
    assert out.shape == (2, 3) and y.tolist() == [[-1, -1, 0], [0, 0, 1]], \
        f"integer Divide truncates toward zero with broadcasting: {y.tolist()}"


# ---- comparisons and logic --------------------------------------------------------------------
COMPARE = {
    "ElementWiseEqual": lambda a, b: a == b,
    "ElementWiseNotEqual": lambda a, b: a != b,
    "ElementWiseGreater": lambda a, b: a > b,
    "ElementWiseGreaterEqual": lambda a, b: a >= b,
    "ElementWiseLess": lambda a, b: a < b,
    "ElementWiseLessEqual": lambda a, b: a <= b,
}


@pytest.mark.parametrize("op_type", sorted(COMPARE))
@pytest.mark.parametrize("kind", ["float32", "float16", "int32"])
def test_compare(op_type, kind):
    a = np.array([[1.0, 2.0, -3.0, 0.5], [2.0, 2.0, 7.0, -1.0]])
    b = np.array([2.0, 2.0, -3.0, 0.25])
    dt = {"float32": np.float32, "float16": np.float16, "int32": np.int32}[kind]
    if kind == "int32":
        a, b = a * 4, b * 4
    a, b = a.astype(dt), b.astype(dt)
    y, out = run(op_type, [a, b])
    assert out.dtype == BOOL and out.quant is None and y.dtype == np.uint8, \
        f"{op_type}: output BOOL_8 stored as uint8 0/1"
    ref = elementwise_ref(COMPARE[op_type], a, b).astype(np.uint8)
    assert np.array_equal(y, ref), f"{op_type} {kind}: {y.tolist()} == {ref.tolist()}"


def test_compare_nan_and_bool_inputs():
    a = np.array([np.nan, 1.0], np.float32)
    y, _ = run("ElementWiseEqual", [a, a])
    z, _ = run("ElementWiseNotEqual", [a, a])
    assert y.tolist() == [0, 1] and z.tolist() == [1, 0], "nan compares unequal to itself"
    p = np.array([0, 1, 2, 0], np.uint8)
    q = np.array([0, 1, 1, 3], np.uint8)
    y, _ = run("ElementWiseEqual", [p, q], specs=[spec((4,), BOOL), spec((4,), BOOL)])
    assert y.tolist() == [1, 1, 1, 0], f"BOOL_8 Equal compares truth values: {y.tolist()}"


LOGIC = {"ElementWiseAnd": lambda a, b: a and b, "ElementWiseOr": lambda a, b: a or b,
         "ElementWiseXor": lambda a, b: a != b}


@pytest.mark.parametrize("op_type", sorted(LOGIC))
def test_logic(op_type):
    a = np.array([[0, 1, 2, 0]], np.uint8).T  # [4, 1]; 2 counts as true
    b = np.array([0, 1, 0], np.uint8)
    y, out = run(op_type, [a, b], specs=[spec((4, 1), BOOL), spec((3,), BOOL)])
    ref = elementwise_ref(lambda p, q: LOGIC[op_type](bool(p), bool(q)), a, b).astype(np.uint8)
    assert out.dtype == BOOL and out.shape == (4, 3), f"{op_type}: BOOL_8 [4, 3] output"
    assert np.array_equal(y, ref), f"{op_type} truth table: {y.tolist()} == {ref.tolist()}"


def test_not():
    x = np.array([0, 1, 5], np.uint8)
    y, out = run("ElementWiseNot", [x], specs=[spec((3,), BOOL)])
    assert out.dtype == BOOL and y.tolist() == [1, 0, 0], f"Not on BOOL_8: {y.tolist()}"


# ---- ElementWiseBinary / ElementWiseUnary -----------------------------------------------------
BINARY_OPERATIONS = {
    v: name for name, v in [
        ("ElementWiseAdd", 0), ("ElementWiseAnd", 1), ("ElementWiseDivide", 2),
        ("ElementWiseEqual", 3), ("ElementWiseFloorDiv", 4), ("ElementWiseFmod", 5),
        ("ElementWiseGreater", 6), ("ElementWiseGreaterEqual", 7), ("ElementWiseLess", 8),
        ("ElementWiseLessEqual", 9), ("ElementWiseMaximum", 10), ("ElementWiseMinimum", 11),
        ("ElementWiseMod", 12), ("ElementWiseMultiply", 13), ("ElementWiseNotEqual", 14),
        ("ElementWiseOr", 15), ("ElementWisePower", 16),
        ("ElementWiseSquaredDifference", 17), ("ElementWiseSubtract", 18),
        ("ElementWiseXor", 19)]}


def test_binary_operation_constants():
    for v, name in BINARY_OPERATIONS.items():
        macro = "QNN_OP_ELEMENT_WISE_BINARY_OPERATION_" + re.sub(
            r"(?<!^)(?=[A-Z])", "_", name[len("ElementWise"):]).upper()
        assert getattr(Q, macro) == v, f"{macro} == {v} (QnnOpDef.h)"


@pytest.mark.parametrize("operation", sorted(BINARY_OPERATIONS))
def test_element_wise_binary(operation):
    name = BINARY_OPERATIONS[operation]
    if name in LOGIC:
        a, b = np.array([[0, 1, 1, 0]], np.uint8), np.array([0, 1, 0, 1], np.uint8)
        specs = [spec((1, 4), BOOL), spec((4,), BOOL)]
    else:
        a, b = binary_inputs(name, (2, 4), (4,))
        specs = None
    y, out = run("ElementWiseBinary", [a, b], {"operation": operation}, specs=specs)
    want, want_spec = run(name, [a, b], specs=specs)
    assert out == want_spec, f"ElementWiseBinary({operation}) infers like {name}"
    assert np.array_equal(y, want, equal_nan=True) and y.dtype == want.dtype, \
        f"ElementWiseBinary(operation={operation}) computes {name}"


def test_element_wise_binary_int32():
    y, _ = run("ElementWiseBinary", [IA, IB], {"operation": 2})
    ref = [_tdiv(int(a), int(b)) if (a, b) != (-2147483648, -1) else 0 for a, b in zip(IA, IB)]
    assert y.tolist() == [wrap(r) for r in ref], "ElementWiseBinary DIVIDE on INT_32 truncates"


# ---- unary ----------------------------------------------------------------------------------
def _sign(v):
    return float(v > 0) - float(v < 0) if not math.isnan(v) else math.nan


UNARY = {
    "ElementWiseAbs": (abs, (-3, 3)),
    "ElementWiseAsin": (math.asin, (-1, 1)),
    "ElementWiseAtan": (math.atan, (-5, 5)),
    "ElementWiseCeil": (math.ceil, (-5, 5)),
    "ElementWiseCos": (math.cos, (-6, 6)),
    "ElementWiseExp": (math.exp, (-10, 10)),
    "ElementWiseFloor": (math.floor, (-5, 5)),
    "ElementWiseLog": (math.log, (0.01, 100)),
    "ElementWiseNeg": (lambda v: -v, (-3, 3)),
    "ElementWiseRound": (round, (-5, 5)),  # Python rounds halves to even
    "ElementWiseRsqrt": (lambda v: 1.0 / math.sqrt(v), (0.01, 100)),
    "ElementWiseSign": (_sign, (-3, 3)),
    "ElementWiseSin": (math.sin, (-6, 6)),
    "ElementWiseSquareRoot": (math.sqrt, (0, 100)),
}


def unary_input(op_type, n=64):
    lo, hi = UNARY[op_type][1]
    x = RNG.uniform(lo, hi, n).astype(np.float32)
    if op_type in ("ElementWiseRound", "ElementWiseCeil", "ElementWiseFloor",
                   "ElementWiseSign", "ElementWiseAbs"):
        x[:8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -3.0]
    return x.reshape(4, n // 4)


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary_float(op_type):
    x = unary_input(op_type)
    y, out = run(op_type, [x])
    assert y.dtype == np.float32 and out.dtype == F32, f"{op_type}: float32 in and out"
    assert_close(y, fref(lambda v: float(UNARY[op_type][0](v)), x), f"{op_type}", rel=1e-6)


@pytest.mark.parametrize("op_type", sorted(UNARY))
def test_unary_float16(op_type):
    x = unary_input(op_type).astype(np.float16)
    y, _ = run(op_type, [x])
    assert y.dtype == np.float16, f"{op_type}: float16 in, float16 out"
    ref = fref(lambda v: float(UNARY[op_type][0](v)), x.astype(np.float64))
    assert_close(y, ref, f"{op_type} float16", rel=1e-3)


def test_round_halves_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997], np.float32)
    y, _ = run("ElementWiseRound", [x])
    assert y.tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0], f"halves to even: {y}"


@pytest.mark.parametrize("op_type,ref", [
    ("ElementWiseAbs", abs), ("ElementWiseNeg", lambda v: -v), ("ElementWiseSign", _sign)])
def test_unary_int32(op_type, ref):
    x = np.array([-5, 0, 7, -2147483647], np.int32)
    y, out = run(op_type, [x])
    assert out.dtype == I32 and y.dtype == np.int32, f"{op_type}: INT_32 stays INT_32"
    assert y.tolist() == [int(ref(int(v))) for v in x], f"{op_type} INT_32: {y.tolist()}"


UNARY_OPERATIONS = {0: "ElementWiseAbs", 1: "ElementWiseAsin", 2: "ElementWiseAtan",
                    3: "ElementWiseCeil", 4: "ElementWiseCos", 5: "ElementWiseExp",
                    6: "ElementWiseFloor", 7: "ElementWiseLog", 8: "ElementWiseNeg",
                    9: "ElementWiseNot", 10: None, 11: "ElementWiseRound",
                    12: "ElementWiseRsqrt", 13: "ElementWiseSign", 14: "ElementWiseSin",
                    15: "ElementWiseSquareRoot"}


@pytest.mark.parametrize("operation", sorted(UNARY_OPERATIONS))
def test_element_wise_unary(operation):
    name = UNARY_OPERATIONS[operation]
    if name == "ElementWiseNot":
        x, specs = np.array([0, 1, 3], np.uint8), [spec((3,), BOOL)]
        want, _ = run(name, [x], specs=specs)
    elif name is None:  # RECIPROCAL
        x, specs = RNG.uniform(0.5, 4, (3, 5)).astype(np.float32), None
        want = fref(lambda v: 1.0 / v, x)
    else:
        x, specs = unary_input(name), None
        want, _ = run(name, [x])
    y, out = run("ElementWiseUnary", [x], {"operation": operation}, specs=specs)
    assert out.shape == x.shape, "ElementWiseUnary keeps the shape"
    assert_close(y, want, f"ElementWiseUnary(operation={operation}) == {name or 'reciprocal'}",
                 rel=1e-7)


# ---- select ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32, np.bool_])
def test_select(dt):
    cond = np.array([[[0, 1, 2, 0]], [[1, 1, 0, 0]]], np.uint8)  # [2, 1, 4]; 2 counts as true
    a = (rand(3, 1) * 10).astype(dt)
    b = (rand(4) * 10).astype(dt)
    y, out = run("ElementWiseSelect", [cond, a, b],
                 specs=[spec(cond.shape, BOOL), spec_of(a), spec_of(b)])
    ref = elementwise_ref(lambda c, p, q: p if c else q, cond, a.astype(np.float64),
                          b.astype(np.float64)).astype(np.float64)
    assert out.shape == (2, 3, 4) and out.dtype == spec_of(a).dtype, \
        "Select broadcasts the three inputs; output takes in[1]'s type"
    assert np.array_equal(y.astype(np.float64), ref), f"Select {np.dtype(dt)} picks in[1]/in[2]"


def test_select_passes_fixed_point_through():
    cls = ops.get("ElementWiseSelect")
    assert cls.quant_passthrough, "Select copies values: raw fixed-point passthrough"
    s = spec((4,), UFX8, QU8)
    out = check("ElementWiseSelect", [spec((4,), BOOL), s, s])
    assert out[0].dtype == UFX8 and out[0].quant == QU8, "Select output keeps in[1]'s encoding"
    raw = cls({}, [spec((4,), BOOL), s, s], out).run(
        np.array([1, 0, 1, 0], np.uint8), np.array([1, 2, 3, 4], np.uint8),
        np.array([9, 8, 7, 6], np.uint8))[0]
    assert raw.dtype == np.uint8 and raw.tolist() == [1, 8, 3, 6], "raw codes pass through"


# ---- fixed-point inputs -----------------------------------------------------------------------
def test_fixed_point_inputs_compute_in_real_domain():
    a_spec, b_spec = spec((2, 3), UFX8, QU8), spec((3,), UFX16, qs(0.001, -32768))
    out = check("ElementWiseAdd", [a_spec, b_spec])
    assert out[0].dtype == UFX8 and out[0].quant == QU8 and out[0].shape == (2, 3), \
        "fixed-point Add infers in[0]'s fixed-point type and encoding"
    cmp = check("ElementWiseGreater", [a_spec, b_spec])
    assert cmp[0].dtype == BOOL and cmp[0].quant is None, "fixed-point comparison gives BOOL_8"
    # The plan hands _run the dequantized float32 values.
    a = (np.arange(6, dtype=np.float32).reshape(2, 3) - 128) * np.float32(0.05)
    b = np.array([0.1, -0.2, 0.3], np.float32)
    y = ops.get("ElementWiseAdd")({}, [a_spec, b_spec], out).run(a, b)[0]
    assert y.dtype == np.float32 and np.allclose(y, a + b), "real-domain sum, float32"
    for op_type in ("Relu", "Sigmoid", "Softmax", "Gelu", "ElementWiseExp"):
        o = check(op_type, [spec((2, 3), SFX16, qs(1 / 4096, 0))])
        assert o[0].dtype == SFX16, f"{op_type} accepts SFIXED_POINT_16 input"


# ---- activations ------------------------------------------------------------------------------
def _gelu(v):
    return 0.5 * v * math.erfc(-v / math.sqrt(2.0))


def _softplus(v, beta=1.0, threshold=20.0):
    return v if beta * v > threshold else math.log1p(math.exp(beta * v)) / beta


ACTIVATIONS = {
    # op: (params, scalar reference)
    "Relu": ({}, lambda v: max(v, 0.0)),
    "Relu1": ({}, lambda v: min(max(v, -1.0), 1.0)),
    "Relu6": ({}, lambda v: min(max(v, 0.0), 6.0)),
    "ReluMinMax": ({"min_value": -0.5, "max_value": 2.0}, lambda v: min(max(v, -0.5), 2.0)),
    "Elu": ({}, lambda v: v if v > 0 else math.expm1(v)),
    "Gelu": ({}, _gelu),
    "HardSwish": ({}, lambda v: v * min(max(v + 3, 0.0), 6.0) / 6),
    "Sigmoid": ({}, lambda v: 1 / (1 + math.exp(-v))),
    "Tanh": ({}, math.tanh),
    "ElementWiseSoftplus": ({}, _softplus),
}


@pytest.mark.parametrize("op_type", sorted(ACTIVATIONS))
def test_activation(op_type):
    params, ref = ACTIVATIONS[op_type]
    x = (rand(3, 40) * 4).astype(np.float32)
    x[0, :6] = [0.0, -3.0, 3.0, 6.0, -1.0, 1.0]
    y, out = run(op_type, [x], params)
    assert y.dtype == np.float32 and out.dtype == F32 and out.shape == x.shape, \
        f"{op_type}: float32, same shape"
    assert_close(y, fref(ref, x), op_type, rel=1e-6)
    y16, _ = run(op_type, [x.astype(np.float16)], params)
    assert y16.dtype == np.float16, f"{op_type}: float16 in, float16 out"
    assert_close(y16, fref(ref, x.astype(np.float16).astype(np.float64)),
                 f"{op_type} float16", rel=1e-3)


def test_elu_alpha_and_softplus_params():
    x = np.linspace(-30, 30, 121).astype(np.float32)
    y, _ = run("Elu", [x], {"alpha": 0.3})
    assert_close(y, fref(lambda v: v if v > 0 else 0.3 * math.expm1(v), x), "Elu alpha=0.3")
    y, _ = run("ElementWiseSoftplus", [x], {"beta": 2.0, "threshold": 10.0})
    assert_close(y, fref(lambda v: _softplus(v, 2.0, 10.0), x), "Softplus beta=2 threshold=10")
    y, _ = run("ElementWiseSoftplus", [x], {"beta": -1.5})
    assert_close(y, fref(lambda v: _softplus(v, -1.5, 20.0), x), "Softplus beta=-1.5")


def test_gelu_tail_and_specials():
    # Down to -12.5: further out the result is a float32 subnormal (fewer significant bits).
    x = np.concatenate([np.linspace(-12.5, 13.5, 521), [1e-30, -1e-30]]).astype(np.float32)
    y, _ = run("Gelu", [x])
    assert_rel(y, fref(_gelu, x), "Gelu relative accuracy incl. the far negative tail", 2e-7)
    s = np.array([np.nan, np.inf, -np.inf, -20.0, 20.0], np.float32)
    y, _ = run("Gelu", [s])
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0 and y[3] == 0 and y[4] == 20, \
        f"Gelu(nan, inf, -inf, -20, 20) = (nan, inf, 0, 0, 20): {y}"


def test_erf_erfc_accuracy():
    from qnnemu.ops.activation import erf, erfc
    x = np.concatenate([np.linspace(-27, 27, 54001), [0.0, 1e-12, -1e-5, 5e-3]])
    e, ec = erf(x), erfc(x)
    re = np.array([math.erf(v) for v in x])
    rc = np.array([math.erfc(v) for v in x])
    assert np.max(np.abs(e - re)) < 1e-13, "erf absolute error < 1e-13"
    nz = re != 0
    assert np.max(np.abs(e[nz] - re[nz]) / np.abs(re[nz])) < 1e-11, "erf relative error < 1e-11"
    normal = rc > 1e-300  # float64 subnormals past x = 26.5 hold fewer significant bits
    assert np.max(np.abs(ec - rc)[normal] / rc[normal]) < 1e-10, \
        "erfc relative error < 1e-10 (tail included)"
    sp = erf(np.array([np.nan, np.inf, -np.inf])), erfc(np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(sp[0][0]) and sp[0][1:].tolist() == [1, -1], "erf(nan, inf, -inf)"
    assert np.isnan(sp[1][0]) and sp[1][1:].tolist() == [0, 2], "erfc(nan, inf, -inf)"


@pytest.mark.parametrize("xs,cs", [((2, 3, 4), (1,)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)),
                                   ((2, 3, 4), (2, 3, 4)), ((5,), ())])
def test_prelu(xs, cs):
    x, c = rand(*xs), (rand(*cs) * 0.3).astype(np.float32)
    y, out = run("Prelu", [x, c])
    assert out.shape == xs, "Prelu output has in[0]'s shape"
    assert_close(y, fref(lambda v, k: v if v >= 0 else k * v, x, c),
                 f"Prelu x{xs} coeff{cs}", rel=1e-7)


def _softmax_ref(x, axis, beta, log=False):
    x = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        row = [beta * float(v) for v in x[idx]]
        m = max(row)
        s = math.fsum(math.exp(v - m) for v in row)
        out[idx] = [(v - m - math.log(s)) if log else math.exp(v - m) / s for v in row]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis,beta", [((2, 5), None, 1.0), ((3, 4, 5), 1, 1.0),
                                             ((3, 4, 5), 0, 0.5), ((4, 3), 1, -2.0),
                                             ((7,), None, 1.0), ((2, 1), None, 1.0)])
def test_softmax_family(op_type, shape, axis, beta):
    x = (rand(*shape) * 10).astype(np.float32)
    params = {"beta": beta} if axis is None else {"axis": axis, "beta": beta}
    y, _ = run(op_type, [x], params)
    ax = len(shape) - 1 if axis is None else axis
    assert_close(y, _softmax_ref(x, ax, beta, log=op_type == "LogSoftmax"),
                 f"{op_type} {shape} axis={axis} beta={beta}", rel=1e-6)


def test_log_softmax_large_values():
    x = np.array([[1000.0, 1000.0, -1000.0]], np.float32)
    y, _ = run("LogSoftmax", [x])
    assert np.allclose(y, [[-math.log(2), -math.log(2), -2000 - math.log(2)]]), \
        f"max-subtracted LogSoftmax stays finite: {y}"


NEURON = {  # operation: (params, scalar reference)
    0: ({"alpha": 0.7}, lambda v: v if v > 0 else 0.7 * math.expm1(v)),
    1: ({}, _gelu),
    2: ({"alpha": 0.25, "beta": 0.4}, lambda v: min(max(0.25 * v + 0.4, 0.0), 1.0)),
    3: ({}, lambda v: v * min(max(v + 3, 0.0), 6.0) / 6),
    4: ({}, lambda v: max(v, 0.0)),
    5: ({"min_value": -1.0, "max_value": 0.5}, lambda v: min(max(v, -1.0), 0.5)),
    6: ({}, lambda v: 1 / (1 + math.exp(-v))),
    7: ({"beta": 2.0, "threshold": 6.0}, lambda v: _softplus(v, 2.0, 6.0)),
    8: ({}, math.tanh),
}
NEURON_DEFAULTS = {  # operation: reference with the documented defaults
    0: lambda v: v if v > 0 else math.expm1(v),
    2: lambda v: min(max(0.2 * v + 0.5, 0.0), 1.0),
    3: lambda v: v * min(max(v / 6 + 0.5, 0.0), 1.0),
    7: _softplus,
}


@pytest.mark.parametrize("operation", sorted(NEURON))
def test_element_wise_neuron(operation):
    params, ref = NEURON[operation]
    x = (rand(4, 30) * 4).astype(np.float32)
    # Parameters an operation does not use are accepted and ignored.
    extra = {"threshold": 100.0} if operation not in (7,) else {}
    y, out = run("ElementWiseNeuron", [x], {"operation": operation, **params, **extra})
    assert out.shape == x.shape and out.dtype == F32, "ElementWiseNeuron keeps shape and type"
    assert_close(y, fref(ref, x), f"ElementWiseNeuron(operation={operation})", rel=1e-6)
    if operation in NEURON_DEFAULTS:
        y, _ = run("ElementWiseNeuron", [x], {"operation": operation})
        assert_close(y, fref(NEURON_DEFAULTS[operation], x),
                     f"ElementWiseNeuron(operation={operation}) default parameters", rel=1e-6)


def test_neuron_constants():
    names = ["ELU", "GELU", "HARD_SIGMOID", "HARD_SWISH", "RELU", "RELU_MIN_MAX", "SIGMOID",
             "SOFTPLUS", "TANH"]
    for i, n in enumerate(names):
        assert getattr(Q, f"QNN_OP_ELEMENT_WISE_NEURON_OPERATION_{n}") == i, f"{n} == {i}"


# ---- cross-check with the ONNX reference evaluator --------------------------------------------
ONNX_CASES = [
    # (onnx op, attrs, opset, qnn op, qnn params, n inputs, input maker)
    ("Gelu", {}, 20, "Gelu", {}, 1, None),
    ("HardSwish", {}, 14, "HardSwish", {}, 1, None),
    ("Elu", {"alpha": 0.5}, 13, "Elu", {"alpha": 0.5}, 1, None),
    ("Softplus", {}, 13, "ElementWiseSoftplus", {}, 1, None),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.6}, 13, "ElementWiseNeuron",
     {"operation": 2, "alpha": 0.3, "beta": 0.6}, 1, None),
    ("LogSoftmax", {"axis": 1}, 13, "LogSoftmax", {"axis": 1}, 1, None),
    ("Softmax", {"axis": 0}, 13, "Softmax", {"axis": 0}, 1, None),
    ("Round", {}, 13, "ElementWiseRound", {}, 1, "halves"),
    ("Sign", {}, 13, "ElementWiseSign", {}, 1, None),
    ("PRelu", {}, 16, "Prelu", {}, 2, None),
    ("Mod", {"fmod": 1}, 13, "ElementWiseFmod", {}, 2, None),
    ("Pow", {}, 15, "ElementWisePower", {}, 2, "positive"),
    ("Div", {}, 14, "ElementWiseDivide", {}, 2, "int"),
    ("Mod", {"fmod": 0}, 13, "ElementWiseMod", {}, 2, "int"),
]


@pytest.mark.parametrize("case", ONNX_CASES, ids=[f"{c[0]}-{c[3]}" for c in ONNX_CASES])
def test_against_onnx_reference(case):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    op, attrs, opset, qnn_op, qnn_params, n, maker = case
    if maker == "int":
        xs = [RNG.integers(-50, 50, (3, 4)).astype(np.int32),
              RNG.choice([-7, -3, -2, 2, 3, 5], (4,)).astype(np.int32)]
    else:
        xs = [(rand(3, 4) * 3).astype(np.float32), (rand(4) * 0.5).astype(np.float32)][:n]
        if maker == "halves":
            xs[0] = np.round(xs[0] * 2).astype(np.float32) / 2
        if maker == "positive":
            xs[0] = np.abs(xs[0]) + 0.5
        if op == "Mod":
            xs[1] = np.where(np.abs(xs[1]) < 0.2, 0.9, xs[1]).astype(np.float32)
    elem = TensorProto.INT32 if maker == "int" else TensorProto.FLOAT
    names = [f"x{i}" for i in range(n)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info(nm, elem, list(x.shape)) for nm, x in zip(names, xs)],
        [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (ref,) = ReferenceEvaluator(model).run(None, dict(zip(names, xs)))
    y, _ = run(qnn_op, xs, qnn_params)
    if maker == "int":
        assert np.array_equal(y, ref), f"{qnn_op} == ONNX {op}{attrs} on INT_32"
    else:
        assert_close(y, ref, f"{qnn_op} == ONNX {op}{attrs}", rel=2e-6)


# ---- Cast -----------------------------------------------------------------------------------
NAN = float("nan")
CAST_CASES = [
    # (src type, values, dst type, expected)
    (F32, [1.7, -1.7, 2.5, -0.5, 1e10, -1e10, NAN], I32,
     [1, -1, 2, 0, 2147483647, -2147483648, 0]),
    (F32, [3.9, -2.0, 300.0], U8, [3, 0, 255]),
    (F32, [1e30, -1e30, 123.9], I64, [2**63 - 1024, -2**63, 123]),
    (I32, [-1, 256, 7], I8, [-1, 0, 7]),
    (I32, [-1, 5], U32, [4294967295, 5]),
    (I32, [-3, 16777217], F32, [-3.0, 16777216.0]),
    (I32, [70000, -2], F16, [float("inf"), -2.0]),
    (F32, [0.0, -0.0, 2.0, NAN], BOOL, [0, 0, 1, 1]),
    (BOOL, [0, 1, 2], F32, [0.0, 1.0, 1.0]),
    (BOOL, [0, 1, 2], I32, [0, 1, 1]),
    (I32, [0, -4, 9], BOOL, [0, 1, 1]),
    (F32, [1.0009765625, 65520.0], F16, [1.0009765625, float("inf")]),
    (F16, [0.5, -2.0], F32, [0.5, -2.0]),
]


@pytest.mark.parametrize("src,values,dst,want", CAST_CASES,
                         ids=[f"{dtypes.name(c[0])[13:]}-{dtypes.name(c[2])[13:]}-{i}"
                              for i, c in enumerate(CAST_CASES)])
def test_cast(src, values, dst, want):
    x = np.array(values, dtypes.numpy_dtype(src))
    y, out = run("Cast", [x], specs=[spec(x.shape, src)], declared=[spec(x.shape, dst)])
    assert out.dtype == dst and y.dtype == dtypes.numpy_dtype(dst), \
        f"Cast output is the declared {dtypes.name(dst)}"
    assert np.array_equal(y.astype(np.float64), np.array(want, np.float64), equal_nan=True), \
        f"Cast {dtypes.name(src)} -> {dtypes.name(dst)}: {y.tolist()} == {want}"


def test_cast_fixed_point_and_integers():
    """As the vendor's backend (tests/test_convert_rounding.py pins it on both libraries)."""
    raw = np.array([0, 128, 255], np.uint8)
    src = spec((3,), UFX8, qs(0.1, -128))
    y, _ = run("Cast", [raw], specs=[src], declared=[spec((3,), I32)])
    assert y.tolist() == [0, 128, 255], f"UFIXED_8 -> INT_32 is the code (a plain byte): {y}"
    y, _ = run("Cast", [np.array([-125, -3, 3, 20], np.int8)], specs=[spec((4,), SFX8, qs(0.5, 0))],
               declared=[spec((4,), I32)])
    assert y.tolist() == [-62, -2, 2, 10], f"SFIXED_8 -> INT_32 rounds the real value, ties to even: {y}"
    dst = spec((4,), UFX8, qs(0.5, -10))
    y, _ = run("Cast", [np.array([-3, 0, 5, 300], np.int32)], declared=[dst])
    assert y.tolist() == [0, 0, 5, 255], f"INT_32 -> UFIXED_8 saturates the value, encoding ignored: {y}"
    y, _ = run("Cast", [np.array([-3, 0, 5, 300], np.int32)], declared=[spec((4,), SFX8, qs(0.5, 3))])
    assert y.tolist() == [-9, -3, 7, 127], f"INT_32 -> SFIXED_8 quantizes: {y}"
    assert ops.get("Cast").handles_quant, "Cast reads encodings itself (handles_quant)"


# ---- Quantize / Dequantize / Convert ----------------------------------------------------------
def round_half_away(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def test_quantize_rounding_and_saturation():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 200.0, -200.0, NAN, 0.49], np.float32)
    y, out = run("Quantize", [x], declared=[spec(x.shape, SFX8, qs(1.0, 0))])
    assert out.dtype == SFX8 and y.dtype == np.int8, "Quantize output is the declared SFIXED_8"
    assert y.tolist() == [1, 2, 3, -1, -2, 127, -128, 0, 0], \
        f"ties away from zero (the vendor's Quantize), saturation, nan -> 0: {y.tolist()}"
    y, _ = run("Quantize", [np.array([0.5, 1.5, NAN], np.float32)],
               declared=[spec((3,), UFX8, qs(1.0, -128))])
    assert y.tolist() == [129, 130, 128], f"UFIXED_8 ties away from zero, nan -> zero point: {y}"
    y, _ = run("Quantize", [np.array([-6.4, 0.0, 6.35, 7.0, NAN], np.float32)],
               declared=[spec((5,), UFX8, qs(0.05, -128))])
    assert y.tolist() == [0, 128, 255, 255, 128], f"UFIXED_8 offset -128: {y.tolist()}"


def test_quantize_bitwidth_and_4_bit_and_wide_types():
    x = np.array([-100.0, -8.0, 3.0, 7.4, 100.0], np.float32)
    y, _ = run("Quantize", [x], declared=[spec((5,), SFX8, qs(1.0, 0, bitwidth=4))])
    assert y.tolist() == [-8, -8, 3, 7, 7], f"bitwidth 4 narrows SFIXED_8 to [-8, 7]: {y}"
    y, _ = run("Quantize", [x], declared=[spec((5,), UFX4, qs(1.0, -8))])
    assert y.dtype == np.uint8 and y.tolist() == [0, 0, 11, 15, 15], f"UFIXED_4 [0, 15]: {y}"
    y, _ = run("Quantize", [np.array([1e12, -1e12, 1.25, 2147483.0], np.float32)],
               declared=[spec((4,), SFX32, qs(1e-3, 0))])
    assert y.tolist() == [2147483647, -2147483648, 1250, 2147483000], \
        f"SFIXED_32 saturates (codes computed in float64): {y}"
    y, _ = run("Quantize", [np.array([5e9, 16777217.0], np.float32)],
               declared=[spec((2,), Q.QNN_DATATYPE_UFIXED_POINT_32, qs(1.0, 0))])
    assert y.tolist() == [4294967295, 16777216], f"UFIXED_32 saturates: {y}"
    y, _ = run("Quantize", [np.array([0.1, 1.0], np.float16)],
               declared=[spec((2,), UFX16, qs(1 / 65536, 0))])
    want = [round(float(np.float16(0.1)) * 65536), 65535]
    assert y.dtype == np.uint16 and y.tolist() == want, f"float16 -> UFIXED_16: {y}"


def test_quantize_dequantize_per_axis():
    x = rand(2, 3, 4) * 4
    scales, offsets = [0.01, 0.02, 0.05], [-128, -100, -128]
    q = qs(scales, offsets, axis=1)
    y, _ = run("Quantize", [x], declared=[spec(x.shape, UFX8, q)])
    ref = np.empty(x.shape)
    for idx in np.ndindex(x.shape):
        c = idx[1]
        ref[idx] = min(max(round_half_away(float(x[idx]) / float(np.float32(scales[c])))
                           - offsets[c], 0), 255)
    assert np.array_equal(y, ref), "per-axis Quantize uses each channel's scale and offset"
    back, out = run("Dequantize", [y], specs=[spec(x.shape, UFX8, q)])
    assert out.dtype == F32 and back.dtype == np.float32, "Dequantize defaults to FLOAT_32"
    deq = np.empty(x.shape)
    for idx in np.ndindex(x.shape):
        deq[idx] = float(np.float32(scales[idx[1]])) * (int(y[idx]) + offsets[idx[1]])
    assert np.array_equal(back, deq.astype(np.float32)), "per-axis Dequantize"


def test_dequantize_float16_and_round_trip():
    raw = np.arange(0, 65536, 4099, dtype=np.uint16)
    q = qs(0.001, -32768)
    y, out = run("Dequantize", [raw], specs=[spec(raw.shape, UFX16, q)],
                 declared=[spec(raw.shape, F16)])
    assert out.dtype == F16 and y.dtype == np.float16, "Dequantize to a declared FLOAT_16"
    ref = np.array([0.001 * (int(v) - 32768) for v in raw])
    assert_close(y, ref, "Dequantize UFIXED_16 -> FLOAT_16", rel=1e-3)
    x = RNG.uniform(-30, 30, 1000).astype(np.float32)
    qspec = spec(x.shape, SFX16, qs(0.001, 0))
    z, _ = run("Quantize", [x], declared=[qspec])
    back, _ = run("Dequantize", [z], specs=[qspec])
    assert np.max(np.abs(back - x)) <= 0.0005 + 1e-6, "round trip error <= scale / 2"


def test_convert():
    src = spec((4,), UFX8, qs(0.1, -128))
    dst = spec((4,), UFX16, qs(0.001, -32768))
    raw = np.array([0, 100, 128, 255], np.uint8)
    y, out = run("Convert", [raw], specs=[src], declared=[dst])
    want = [min(max(round(0.1 * (int(v) - 128) / 0.001) + 32768, 0), 65535) for v in raw]
    assert out.dtype == UFX16 and y.tolist() == want, f"UFIXED_8 -> UFIXED_16 requant: {y}"
    y, _ = run("Convert", [raw], specs=[src], declared=[spec((4,), F32)])
    assert_close(y, [0.1 * (int(v) - 128) for v in raw], "UFIXED_8 -> FLOAT_32", rel=1e-7)
    y, _ = run("Convert", [np.array([-16.0, 0.0625, 0.1875, 99.0], np.float32)],
               declared=[spec((4,), UFX8, qs(0.125, -128))])
    assert y.tolist() == [0, 129, 130, 255], \
        f"FLOAT_32 -> UFIXED_8 rounds as Quantize (x / scale = 0.5 -> 1, 1.5 -> 2: halves away from zero): {y}"
    y, _ = run("Convert", [np.array([0.5, 65504], np.float16)], declared=[spec((2,), F32)])
    assert y.dtype == np.float32 and y.tolist() == [0.5, 65504.0], "FLOAT_16 -> FLOAT_32"
    assert ops.get("Convert").handles_quant and ops.get("Quantize").handles_quant and \
        ops.get("Dequantize").handles_quant, "conversions read encodings themselves"


def test_conversion_needs_output_encoding_at_run_time():
    cls = ops.get("Quantize")
    out = check("Quantize", [spec((2,))], declared=[spec((2,), UFX8)])  # validateOpConfig
    assert out[0].dtype == UFX8, "check works without the output's encoding"
    with pytest.raises(OpCheckError) as info:
        cls({}, [spec((2,))], out).run(np.zeros(2, np.float32))
    assert info.value.rule == "QNNEMU-Quantize-quant-missing" and \
        info.value.path == "outputTensors[0].quantizeParams", \
        f"run needs the output encoding: {info.value}"


# ---- negative tests: one per rule id ----------------------------------------------------------
X = spec((2, 3))
XQ = spec((2, 3), UFX8, QU8)
XB = spec((2, 3), BOOL)
XI = spec((2, 3), I32)
XBF = spec((2, 3), BF16)
ARITH = sorted(set(BINARY_FLOAT))
NEGATIVE = []
for _op in ARITH:
    NEGATIVE += [
        (_op, [spec((2, 3), I8), X], {}, None, "dtype", "inputTensors[0].dataType"),
        (_op, [X, spec((2, 3), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
        (_op, [X, spec((4,))], {}, None, "broadcast", "inputTensors[1].dimensions"),
    ]
for _op in sorted(COMPARE):
    NEGATIVE += [
        (_op, [X, spec((2, 3), I8)], {}, None, "dtype", "inputTensors[1].dataType"),
        (_op, [X, XI], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
        (_op, [X, spec((3, 1, 2))], {}, None, "broadcast", "inputTensors[1].dimensions"),
    ]
for _op in sorted(LOGIC):
    NEGATIVE += [
        (_op, [XB, X], {}, None, "dtype", "inputTensors[1].dataType"),
        (_op, [XB, spec((5,), BOOL)], {}, None, "broadcast", "inputTensors[1].dimensions"),
    ]
for _op in sorted(UNARY) + ["ElementWiseNot", "Relu", "Relu1", "Relu6", "Elu", "Gelu",
                            "HardSwish", "Sigmoid", "Tanh"]:
    # BFLOAT_16: no op takes it (a plain integer / BOOL_8 is fixed point with scale 1 to the
    # ops that have no kernel for it, ops/base.py AS_FIXED)
    NEGATIVE.append((_op, [XBF if _op != "ElementWiseNot" else X], {}, None, "dtype",
                     "inputTensors[0].dataType"))
NEGATIVE += [
    # An unquantized fixed-point input counts as an unsupported type (tests/test_ops.py rows).
    ("ElementWiseAdd", [spec((2, 3), UFX8), X], {}, None, "dtype", "inputTensors[0].dataType"),
    ("ElementWiseBinary", [X, X], {"operation": 20}, None, "operation", "params[operation]"),
    ("ElementWiseBinary", [XBF, XBF], {"operation": 0}, None, "dtype", "inputTensors[0].dataType"),
    ("ElementWiseBinary", [XQ, X], {"operation": 13}, None, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("ElementWiseBinary", [X, spec((4,))], {"operation": 0}, None, "broadcast",
     "inputTensors[1].dimensions"),
    ("ElementWiseUnary", [X], {"operation": 16}, None, "operation", "params[operation]"),
    ("ElementWiseUnary", [X], {"operation": 9}, None, "dtype", "inputTensors[0].dataType"),
    ("ElementWiseSelect", [X, X, X], {}, None, "condition-dtype", "inputTensors[0].dataType"),
    ("ElementWiseSelect", [XB, spec((2, 3), I8), X], {}, None, "dtype",
     "inputTensors[1].dataType"),
    ("ElementWiseSelect", [XB, X, XI], {}, None, "dtype-mismatch", "inputTensors[2].dataType"),
    ("ElementWiseSelect", [XB, X, spec((2,))], {}, None, "broadcast",
     "inputTensors[2].dimensions"),
    ("ReluMinMax", [X], {"min_value": 2.0, "max_value": 1.0}, None, "range", "params[min_value]"),
    ("ReluMinMax", [XBF], {"min_value": 0.0, "max_value": 1.0}, None, "dtype",
     "inputTensors[0].dataType"),
    ("Prelu", [XI, X], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Prelu", [X, spec((1,), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
    ("Prelu", [X, spec((2,))], {}, None, "broadcast", "inputTensors[1].dimensions"),
    ("Prelu", [spec((3,)), spec((2, 3))], {}, None, "coeff-shape", "inputTensors[1].dimensions"),
    ("ElementWiseSoftplus", [X], {"beta": 0.0}, None, "beta", "params[beta]"),
    ("ElementWiseSoftplus", [XBF], {}, None, "dtype", "inputTensors[0].dataType"),
    ("ElementWiseNeuron", [X], {"operation": 9}, None, "operation", "params[operation]"),
    ("ElementWiseNeuron", [X], {"operation": 5, "min_value": 0.0}, None, "param-missing",
     "params[max_value]"),
    ("ElementWiseNeuron", [X], {"operation": 5, "min_value": 1.0, "max_value": 0.0}, None,
     "range", "params[min_value]"),
    ("ElementWiseNeuron", [X], {"operation": 7, "beta": 0.0}, None, "beta", "params[beta]"),
    ("ElementWiseNeuron", [XBF], {"operation": 4}, None, "dtype", "inputTensors[0].dataType"),
    ("Cast", [spec((2,), BF16)], {}, [spec((2,), F32)], "dtype", "inputTensors[0].dataType"),
    ("Cast", [spec((2,), UFX8)], {}, [spec((2,), F32)], "quant-missing",
     "inputTensors[0].quantizeParams"),
    ("Cast", [spec((2, 3), UFX8, qs([1, 1], [0, 0], axis=1))], {}, [spec((2, 3), F32)],
     "quant-axis", "inputTensors[0].quantizeParams"),
    ("Cast", [X], {}, None, "output-unknown", "outputTensors[0].dataType"),
    ("Cast", [X], {}, [spec((2, 3), F64)], "output-dtype", "outputTensors[0].dataType"),
    ("Convert", [XQ], {"dynamic_input_data": True}, [X], "dynamic", "params[dynamic_input_data]"),
    ("Convert", [XBF], {}, [X], "dtype", "inputTensors[0].dataType"),
    ("Convert", [spec((2, 3), UFX8)], {}, [X], "quant-missing", "inputTensors[0].quantizeParams"),
    ("Convert", [X], {}, [spec((2, 3), UFX8, qs([1, 1, 1, 1], [0] * 4, axis=1))], "quant-axis",
     "outputTensors[0].quantizeParams"),
    ("Convert", [XQ], {}, None, "output-unknown", "outputTensors[0].dataType"),
    ("Convert", [XQ], {}, [spec((2, 3), F64)], "output-dtype", "outputTensors[0].dataType"),
    ("Quantize", [XBF], {}, [XQ], "dtype", "inputTensors[0].dataType"),
    ("Quantize", [X], {}, None, "output-unknown", "outputTensors[0].dataType"),
    ("Quantize", [X], {}, [spec((2, 3), F64)], "output-dtype", "outputTensors[0].dataType"),
    ("Quantize", [X], {}, [spec((2, 3), UFX8, qs([1, 1], [0, 0], axis=1))], "quant-axis",
     "outputTensors[0].quantizeParams"),
    ("Dequantize", [XBF], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Dequantize", [spec((2, 3), SFX16)], {}, None, "quant-missing",
     "inputTensors[0].quantizeParams"),
    ("Dequantize", [XQ], {}, [XQ], "output-dtype", "outputTensors[0].dataType"),
    ("Dequantize", [spec((2, 3), UFX8, qs([1, 1, 1], [0, 0], axis=1))], {}, None, "quant-axis",
     "inputTensors[0].quantizeParams"),
]
for _op in ("Softmax", "LogSoftmax"):
    NEGATIVE += [
        (_op, [spec(())], {}, None, "input-rank", "inputTensors[0].rank"),
        (_op, [XBF], {}, None, "dtype", "inputTensors[0].dataType"),
        (_op, [X], {"axis": 2}, None, "axis", "params[axis]"),
    ]
# The QNN 2.50 / ONNX Runtime QNN EP additions to these modules (their numerics:
# tests/test_ops_mux_nonzero.py, tests/test_ops_erf_identity_inverse.py).
NEGATIVE += [
    ("ElementWiseMux", [spec((1,), F32), X, X], {}, None, "selector-dtype",
     "inputTensors[0].dataType"),
    ("ElementWiseMux", [spec((1,), I32), X, spec((2, 3), F16)], {}, None, "dtype-mismatch",
     "inputTensors[2].dataType"),
    ("ElementWiseMux", [spec((1,), I32), X, spec((4, 3))], {}, None, "broadcast",
     "inputTensors[2].dimensions"),
    ("ElementWiseMux", [spec((1,), I32), spec((2, 3), I8), X], {}, None, "dtype",
     "inputTensors[1].dataType"),
    ("IsNan", [XBF], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Erf", [XBF], {}, None, "dtype", "inputTensors[0].dataType"),
    ("ThresholdedRelu", [X], {"alpha": float("nan")}, None, "alpha", "params[alpha]"),
]
UNSUPPORTED = {"dtype", "output-dtype", "dynamic"}


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    want = err.rule
    assert isinstance(err, OpUnsupportedError) == (rule in UNSUPPORTED), \
        f"{want}: OpUnsupportedError exactly for valid-but-unsupported configs"


def test_every_rule_id_is_tested():
    """Every rule suffix raised in the three modules has a negative row, and every op they
    register has at least one."""
    from qnnemu.ops import activation, cast, elementwise
    mods = (activation, cast, elementwise)
    text = "".join(inspect.getsource(m) for m in mods)
    raised = set(re.findall(r'rule_error\(\s*[\w.]+,\s*"([a-z-]+)"', text))
    tested = {row[4] for row in NEGATIVE} | {"quant-missing"}
    assert raised and raised <= tested, f"rule suffixes without a negative test: {raised - tested}"
    mine = {name for name, cls in ops.REGISTRY.items()
            if inspect.getmodule(cls) in mods}
    rows = {row[0] for row in NEGATIVE}
    assert mine <= rows, f"ops without a negative test: {sorted(mine - rows)}"


# ---- end to end: through the C ABI, the graph layer and the execution plan --------------------
@pytest.fixture(scope="module")
def backend():
    from vendor import our_library
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    from qnnemu.client import Backend
    with Backend(str(lib), log_level="error") as be:
        yield be


@pytest.fixture
def backend_sm8550():
    """SM8550: the HTP has no float ElementWiseSelect on v68 (docs/op-support.md)."""
    from vendor import our_library

    from qnnemu.client import Backend, htp_device_config
    with Backend(str(our_library()), log_level="error",
                 device_configs=[htp_device_config("SOC", socModel=Q.QNN_SOC_MODEL_SM8550)]) as be:
        yield be


@pytest.mark.float_math("float32")
def test_graph_quantized_chain_logic_and_casts(backend_sm8550):
    backend = backend_sm8550
    x = np.array([[-1.3, -0.025, 0.025, 0.4], [1.0, 2.5, -6.5, 0.075]], np.float32)
    other = np.array([[0.0, 1.0, -1.0, 0.4], [2.0, 2.0, 0.0, 0.0]], np.float32)
    w_codes = np.array([[128, 140, 100, 128], [120, 130, 160, 90]], np.uint8)
    ints = np.array([[-3, 0, 7, 100000], [1, 2, 3, 4]], np.int32)
    ctx = backend.context()
    try:
        g = ctx.graph("g")
        a, b, i = g.input("x", x.shape), g.input("o", x.shape), g.input("i", x.shape, np.int32)
        w = g.static("w", w_codes, UFX8, quant=(0.05, -128))
        q = g.node("Quantize", [a], [("q", x.shape, UFX8, (0.05, -128))], validate=True)
        g.node("Quantize", [a], [("q_out", x.shape, UFX8, (0.05, -128))], app_read=True)
        s = g.node("ElementWiseBinary", [q, w], [("s", x.shape, UFX8, (0.1, -128))],
                   params={"operation": 0}, validate=True)
        r = g.node("Relu", [s], [("r", x.shape, UFX8, (0.1, -128))], validate=True)
        g.node("Dequantize", [r], [("d", x.shape, np.float32)], app_read=True, validate=True)
        c = g.node("ElementWiseGreater", [a, b], [("gt", x.shape, BOOL)], validate=True)
        g.node("ElementWiseBinary", [a, b], [("gt_out", x.shape, BOOL)],
               params={"operation": 6}, app_read=True, validate=True)
        g.node("ElementWiseSelect", [c, a, b], [("sel", x.shape, np.float32)], app_read=True,
               validate=True)
        g.node("Cast", [i], [("c", x.shape, np.float16)], app_read=True, validate=True)
        g.node("ElementWiseNeuron", [a], [("gelu", x.shape, np.float32)],
               params={"operation": 1}, app_read=True, validate=True)
        g.finalize()
        out = g.execute({"x": x, "o": other, "i": ints})
    finally:
        ctx.free()
    want_q = [[min(max(round_half_away(float(v) / float(np.float32(0.05))) + 128, 0), 255)
               for v in row] for row in x]
    assert out["q_out"].tolist() == want_q, "Quantize codes: ties away from zero, saturated"
    real = 0.05 * (np.array(want_q, np.float64) - 128) + 0.05 * (w_codes.astype(np.float64) - 128)
    assert np.max(np.abs(out["d"] - np.maximum(real, 0))) <= 0.05 + 1e-6, \
        "quantized Add -> Relu -> Dequantize within half an output LSB"
    assert out["gt_out"].tolist() == (x > other).astype(np.uint8).tolist(), \
        "ElementWiseBinary GREATER: BOOL_8 graph output"
    assert np.array_equal(out["sel"], np.where(x > other, x, other)), "Select on the condition"
    assert out["c"].dtype == np.float16 and out["c"].tolist() == [[-3, 0, 7, np.inf],
                                                                  [1, 2, 3, 4]], \
        "Cast INT_32 -> FLOAT_16 (100000 overflows to inf)"
    assert_close(out["gelu"], fref(_gelu, x), "ElementWiseNeuron GELU in a graph", rel=1e-6)
