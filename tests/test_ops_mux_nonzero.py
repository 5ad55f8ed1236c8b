"""Numerics and validation of ElementWiseMux, IsNan (qnnemu/ops/elementwise.py) and NonZero
(qnnemu/ops/index.py).

References: numpy (np.choose with out-of-range selectors zeroed, np.isnan, np.argwhere) and
onnx.reference (ONNX IsNaN, NonZero).  Fixed-point cases run through our backend's C ABI (the
plan's passthrough / dequantization).  Negative tests: one per rule id, asserting id and path.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import check, expect_rule, run_checked, spec

from qnnemu.errors import OpUnsupportedError
from qnnemu.headers import Q

RNG = np.random.default_rng(20250302)
F32, F16, I32, U32 = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_INT_32,
                      Q.QNN_DATATYPE_UINT_32)
BOOL, U8, S8 = Q.QNN_DATATYPE_BOOL_8, Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8


def onnx_run(op_type, x, opset=13):
    node = helper.make_node(op_type, ["x"], ["y"])
    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", et, None)],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]),
        opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def mux_reference(sel, cands):
    """Candidate sel (negative: from the back) per element, 0 where out of range."""
    shape = np.broadcast_shapes(np.shape(sel), *(c.shape for c in cands))
    k = np.broadcast_to(np.asarray(sel, np.int64), shape)
    k = np.where(k < 0, k + len(cands), k)
    ok = (k >= 0) & (k < len(cands))
    picked = np.choose(np.where(ok, k, 0), [np.broadcast_to(c, shape) for c in cands])
    return np.where(ok, picked, 0)


# ---- ElementWiseMux ----------------------------------------------------------------------------
@pytest.mark.parametrize("sel", [[0], [1], [2], [-1], [-3], [3], [-4], 1,
                                 [[0, 1, 2], [2, -1, 5]], [[2], [0]]],
                         ids=lambda s: str(s).replace(" ", ""))
def test_mux_selects_per_element(sel):
    """One selector value (shape [1] or rank 0) or one per element (broadcast), in range,
    negative (from the back) and out of range (0)."""
    cands = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
    s = np.asarray(sel, np.int32)
    (y,) = run_checked("ElementWiseMux", [s] + cands)
    assert np.array_equal(y, mux_reference(s, cands)), f"ElementWiseMux sel={sel}"


def test_mux_types_and_broadcast():
    """Selector types (INT_8/32/64, UINT_32, BOOL_8), candidate classes (float16, INT_32,
    BOOL_8), and candidates broadcasting against each other."""
    a, b = RNG.standard_normal((3,)).astype(np.float16), RNG.standard_normal((2, 3)).astype(np.float16)
    for sel in (np.array([1], np.int8), np.array([1], np.int64), np.array([1], np.uint32),
                np.array([True])):
        (y,) = run_checked("ElementWiseMux", [sel, a, b])
        assert y.dtype == np.float16 and np.array_equal(y, b), f"selector {sel.dtype} picks in[2]"
    (y,) = run_checked("ElementWiseMux", [np.array([0], np.int32), a, b])
    assert y.shape == (2, 3) and np.array_equal(y, np.broadcast_to(a, (2, 3))), \
        "in[1] [3] broadcast to the output [2, 3]"
    ints = [np.arange(6, dtype=np.int32).reshape(2, 3) * k for k in (1, 10)]
    (y,) = run_checked("ElementWiseMux", [np.array([[1], [5]], np.int32)] + ints)
    assert np.array_equal(y, [[0, 10, 20], [0, 0, 0]]), "INT_32 candidates, out of range -> 0"
    bools = [np.array([1, 0], np.uint8), np.array([0, 1], np.uint8)]
    specs = [spec((2,), I32), spec((2,), BOOL), spec((2,), BOOL)]
    (y,) = run_checked("ElementWiseMux", [np.array([1, 0], np.int32)] + bools, specs=specs)
    assert np.array_equal(y, [0, 0]), "BOOL_8 candidates"


def test_mux_fixed_point_through_our_backend():
    """Candidates sharing the output's encoding pass their codes through; an out-of-range
    selector gives the zero point (real 0); different encodings requantize."""
    from qnnemu.client import Backend
    q = (0.05, -100)
    codes = [RNG.integers(0, 256, (2, 3)).astype(np.uint8) for _ in range(2)]
    with Backend() as be:
        for out_q, sel in (((0.05, -100), [[0, 1, 2], [1, 0, -7]]), ((0.1, -50), [[1], [0]])):
            ctx = be.context()
            g = ctx.graph("g")
            ins = [g.input("s", (2, 3) if len(sel[0]) == 3 else (2, 1), np.int32)] + \
                [g.input(f"c{i}", (2, 3), U8, quant=q) for i in range(2)]
            g.node("ElementWiseMux", ins, [("y", (2, 3), U8, out_q)], app_read=True)
            g.finalize()
            y = g.execute({"s": np.array(sel, np.int32), "c0": codes[0], "c1": codes[1]})["y"]
            real = mux_reference(np.array(sel), [q[0] * (c.astype(np.float64) + q[1]) for c in codes])
            want = np.clip(np.rint(real / out_q[0]) - out_q[1], 0, 255)
            assert np.array_equal(y, want), f"u8 Mux, output encoding {out_q}: {y} vs {want}"
            ctx.free()


# ---- IsNan -------------------------------------------------------------------------------------
SPECIALS = np.array([[0.0, np.nan, -np.inf, 1e-40], [np.inf, -0.0, -np.nan, 3.5]])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint32])
def test_isnan_matches_onnx(dtype):
    x = SPECIALS.astype(dtype) if np.dtype(dtype).kind == "f" else np.arange(8, dtype=dtype).reshape(2, 4)
    (y,) = run_checked("IsNan", [x])
    ref = onnx_run("IsNaN", x, opset=20) if np.dtype(dtype).kind == "f" else np.zeros(x.shape, bool)
    assert y.dtype == np.uint8, "BOOL_8 output as uint8 0 / 1"
    assert np.array_equal(y, ref.astype(np.uint8)), f"IsNan {np.dtype(dtype).name}"


@pytest.mark.parametrize("out", [Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_INT_32, F32, F16])
def test_isnan_other_declared_outputs(out):
    """The vendor writes 0 / 1 into INT/UINT and float outputs too."""
    x = SPECIALS.astype(np.float32)
    (y,) = run_checked("IsNan", [x], declared=[spec(x.shape, out)])
    from qnnemu.core import dtypes
    assert y.dtype == dtypes.numpy_dtype(out), f"IsNan into {dtypes.name(out)}: dtype"
    assert np.array_equal(y, np.isnan(x)), f"IsNan into {dtypes.name(out)}: values 0 / 1"


def test_isnan_fixed_point_through_our_backend():
    """A quantized input is never NaN; a quantized output holds real 0 / 1 in its encoding."""
    from qnnemu.client import Backend
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        a = g.input("a", (2, 4), U8, quant=(0.1, -3))
        g.node("IsNan", [a], [("ya", (2, 4), BOOL)], app_read=True)
        f = g.input("f", (2, 4))
        g.node("IsNan", [f], [("yf", (2, 4), U8, (0.5, 0))], app_read=True, name="n2")
        g.finalize()
        out = g.execute({"a": np.arange(8, dtype=np.uint8).reshape(2, 4),
                         "f": SPECIALS.astype(np.float32)})
        ctx.free()
    assert not out["ya"].any(), "fixed-point values are never NaN"
    assert np.array_equal(out["yf"], np.isnan(SPECIALS) * 2), "real 1 -> code 2 at scale 0.5"


@pytest.mark.parametrize("soc,want", [
    ("SM8350", [True, False, False, False, False, False, False]),  # v68: float32 math, IEEE NaN only
    ("SM8650", [True, True, True, True, False, True, False]),      # v75: float16 math (measured)
])
def test_isnan_follows_the_float_math_of_the_arch(soc, want):
    """In float16 math the HTP's float16 has no NaN or infinities: NaN and infinities saturate to
    +-131008 and IsNan reads the IEEE NaN pattern (exponent 31, mantissa != 0), so NaN, +-inf and
    finite magnitudes above 65536 answer 1, 65536 itself 0 -- what the vendor's library gives on
    v69+ (its NaN test, tests/test_onnxruntime_new_ops.py, runs on SM8650)."""
    from qnnemu.client import Backend, htp_device_config
    x = np.array([[np.nan, np.inf, -np.inf, 70000.0, 65536.0, 65600.0, 65504.0]], np.float32)
    with Backend(device_configs=[htp_device_config("SOC", socModel=getattr(Q, f"QNN_SOC_MODEL_{soc}"))]) as be:
        g = be.context().graph("g")
        f = g.input("x", x.shape)
        g.node("IsNan", [f], [("y", x.shape, BOOL)], app_read=True)
        g.finalize()
        y = g.execute({"x": x})["y"]
    assert y.astype(bool).tolist() == [want], f"{soc}: IsNan of NaN, inf, -inf, 70000, 65536, 65600, 65504"


# ---- NonZero -----------------------------------------------------------------------------------
def nonzero_reference(x, rows):
    idx = np.argwhere(x != 0)
    out = np.full((rows, x.ndim), -1, np.int64)
    out[:min(rows, len(idx))] = idx[:rows]
    return out


@pytest.mark.parametrize("shape", [(7,), (2, 3), (2, 3, 4), (1, 2, 2, 3), (2, 1, 2, 1, 3)])
def test_nonzero_matches_onnx(shape):
    """The EP's configuration: [N, rank] INT_32, the transpose of ONNX NonZero, padded with -1."""
    x = RNG.integers(-2, 3, shape).astype(np.float32)
    n = x.size
    (y,) = run_checked("NonZero", [x], declared=[spec((n, len(shape)), I32)])
    ref = onnx_run("NonZero", x).T
    assert y.dtype == np.int32, "INT_32 output"
    assert np.array_equal(y[:len(ref)], ref), f"NonZero {shape}: the index rows (ONNX's, transposed)"
    assert (y[len(ref):] == -1).all(), f"NonZero {shape}: unused rows are -1"


def test_nonzero_rows_types_and_nan():
    x = np.array([[0, 1.5, 0], [-2, 0, np.nan]], np.float32)
    (y,) = run_checked("NonZero", [x], declared=[spec((6, 2), I32)])
    assert np.array_equal(y, nonzero_reference(np.nan_to_num(x), 6)), \
        "float32 NaN counts as zero (the HTP tests x > 0 or x < 0)"
    (y,) = run_checked("NonZero", [x.astype(np.float16)], declared=[spec((6, 2), I32)])
    assert np.array_equal(y, nonzero_reference(np.where(np.isnan(x), 1, x), 6)), \
        "float16 NaN counts as nonzero"
    (y,) = run_checked("NonZero", [x], declared=[spec((1, 2), I32)])
    assert np.array_equal(y, [[0, 1]]), "fewer rows than nonzero elements truncate"
    for out, pad in ((U32, 2 ** 32 - 1), (Q.QNN_DATATYPE_UINT_8, 0), (Q.QNN_DATATYPE_INT_64, -1),
                     (F32, -1.0)):
        (y,) = run_checked("NonZero", [x], declared=[spec((4, 2), out)])
        assert y[2].tolist() == [pad, pad], f"padding in {y.dtype}: {y.tolist()}"
    b = np.array([1, 0, 1, 1], np.uint8)
    (y,) = run_checked("NonZero", [b], declared=[spec((4, 1), I32)], specs=[spec((4,), BOOL)])
    assert y.ravel().tolist() == [0, 2, 3, -1], "BOOL_8 input"
    (y,) = run_checked("NonZero", [np.zeros((2, 2), np.int32)], declared=[spec((4, 2), I32)])
    assert (y == -1).all(), "all zero: every row is padding"


def test_nonzero_fixed_point_through_our_backend():
    """A code is nonzero when its real value is: codes other than the zero point."""
    from qnnemu.client import Backend
    codes = np.array([[0, 3, 1], [1, 0, 9]], np.uint8)
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        a = g.input("a", codes.shape, U8, quant=(0.1, -1))
        g.node("NonZero", [a], [("y", (6, 2), I32)], app_read=True)
        g.finalize()
        y = g.execute({"a": codes})["y"]
        ctx.free()
    assert np.array_equal(y, nonzero_reference(codes.astype(int) - 1, 6)), \
        f"u8 NonZero: codes != zero point 1: {y.tolist()}"


# ---- negative tests ----------------------------------------------------------------------------
# ElementWiseMux's and IsNan's rule rows are in tests/test_ops_elementwise.py with the rest of
# elementwise.py's (one test per rule id).
NEGATIVE = [
    ("NonZero", [spec((2, 3), Q.QNN_DATATYPE_STRING)], [spec((6, 2), I32)], "dtype",
     "inputTensors[0].dataType"),
    ("NonZero", [spec((2, 3), U8)], [spec((6, 2), I32)], "quant-missing",
     "inputTensors[0].quantizeParams"),
    ("NonZero", [spec(())], [spec((1, 1), I32)], "input-rank", "inputTensors[0].rank"),
    ("NonZero", [spec((2, 3))], None, "output-unknown", "outputTensors[0].dimensions"),
    ("NonZero", [spec((2, 3))], [spec((2, 6), I32)], "output-shape", "outputTensors[0].dimensions"),
]


@pytest.mark.parametrize("op_type,specs,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[3]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, declared, rule, path):
    err = expect_rule(op_type, specs, {}, declared, rule, path)
    if rule == "dtype":
        assert isinstance(err, OpUnsupportedError), f"{rule}: reported as unsupported"


def test_mux_needs_a_candidate():
    """One input only: the core's input-count rule (the selector needs a candidate)."""
    from qnnemu.errors import OpCheckError
    with pytest.raises(OpCheckError, match="QNNEMU-op-input-count"):
        check("ElementWiseMux", [spec((1,), I32)])


def test_every_rule_id_is_tested():
    """Each rule id of NonZero (index.py) has a negative test."""
    from qnnemu.ops import index
    text = inspect.getsource(index)
    ids = {("NonZero", r) for r in re.findall(r'_fail\("([a-z-]+)"', text)}
    ids |= {("NonZero", "dtype"), ("NonZero", "quant-missing")}   # base.check_real
    tested = {(n[0], n[3]) for n in NEGATIVE}
    assert not ids - tested, f"every rule has a negative test: missing {ids - tested}"
