"""Numerics and validation of the QNN 2.50 additions Erf and ThresholdedRelu
(qnnemu/ops/activation.py), Identity (shape.py) and Inverse (matmul.py).

References: math.erf, onnx.reference (ThresholdedRelu, Identity), numpy.linalg.inv in float64.
Fixed-point cases run through our backend's C ABI.  Negative tests: one per rule id.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import assert_close, expect_rule, run_checked, spec

from qnnemu.headers import Q

RNG = np.random.default_rng(20250303)
F16, I32, U8 = Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UFIXED_POINT_8
# BFLOAT_16: no op takes it (a plain integer / BOOL_8 is fixed point with scale 1 to the ops
# that have no kernel for it, ops/base.py AS_FIXED)
BF16 = Q.QNN_DATATYPE_BFLOAT_16


@pytest.mark.parametrize("dtype,rel", [(np.float32, 1e-6), (np.float16, 1e-3)])
def test_erf_matches_math_erf(dtype, rel):
    x = np.concatenate([RNG.standard_normal(500) * 2, [0.0, -0.0, 1e-30, 6.0, -6.0, 30.0,
                                                       np.inf, -np.inf]]).astype(dtype)
    (y,) = run_checked("Erf", [x])
    ref = np.array([math.erf(float(v)) for v in x])
    assert y.dtype == dtype, "Erf keeps the input's float type"
    err = np.abs(y.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-30)
    assert float(err.max()) <= rel, f"Erf {np.dtype(dtype).name}: max relative error {err.max():.3g}"
    (n,) = run_checked("Erf", [np.array([np.nan], dtype)])
    assert np.isnan(n).all(), "erf(nan) is nan"


@pytest.mark.parametrize("alpha", [None, 0.5, -1.0, 0.0])
def test_thresholded_relu_matches_onnx(alpha):
    x = np.concatenate([RNG.standard_normal(200) * 2, [1.0, 0.5, -1.0, 0.0]]).astype(np.float32)
    params = {} if alpha is None else {"alpha": alpha}
    (y,) = run_checked("ThresholdedRelu", [x], params)
    node = helper.make_node("ThresholdedRelu", ["x"], ["y"], **params)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 10)])
    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.array_equal(y, ref), f"ThresholdedRelu alpha={alpha} (x == alpha gives 0)"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.int64])
def test_identity_copies(dtype):
    x = (RNG.standard_normal((2, 3, 4)) * 10).astype(dtype)
    (y,) = run_checked("Identity", [x])
    assert y.dtype == x.dtype and np.array_equal(y, x), f"Identity {np.dtype(dtype).name}"
    assert y is not x and not np.shares_memory(y, x), "Identity returns its own buffer"


def test_identity_fixed_point_through_our_backend(monkeypatch):
    """Same encoding: codes copied exactly; different encodings: requantized.  The HTP has no
    Identity (graphFinalize refuses it: qnnemu/htp/op_support.py): a reference run."""
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")
    from qnnemu.client import Backend
    codes = RNG.integers(0, 256, (3, 5)).astype(np.uint8)
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        a = g.input("a", codes.shape, U8, quant=(0.1, -128))
        g.node("Identity", [a], [("same", codes.shape, U8, (0.1, -128))], app_read=True)
        g.node("Identity", [a], [("other", codes.shape, U8, (0.2, -64))], app_read=True, name="n2")
        g.finalize()
        out = g.execute({"a": codes})
        ctx.free()
    assert np.array_equal(out["same"], codes), "one encoding: the codes pass through"
    real = 0.1 * (codes.astype(np.float64) - 128)
    want = np.clip(np.rint(real / 0.2) + 64, 0, 255)
    assert np.abs(out["other"].astype(int) - want).max() <= 1, \
        "another encoding: requantized (within the rounding of ties)"


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 4, 4), (2, 3, 5, 5)])
def test_inverse_matches_numpy(shape):
    n = shape[-1]
    a = RNG.standard_normal(shape) + 3 * np.eye(n)      # well conditioned
    (y,) = run_checked("Inverse", [a.astype(np.float32)])
    ref = np.linalg.inv(a.astype(np.float32).astype(np.float64))
    assert_close(y, ref, f"Inverse {shape}")
    assert_close(np.matmul(a, y.astype(np.float64)), np.broadcast_to(np.eye(n), shape),
                 f"Inverse {shape}: a @ inv(a) == I", rel=1e-5)


def test_inverse_float16_and_singular():
    a = (RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)).astype(np.float16)
    (y,) = run_checked("Inverse", [a])
    assert y.dtype == np.float16, "float16 Inverse returns float16"
    assert_close(y, np.linalg.inv(a.astype(np.float64)), "float16 Inverse", rel=2e-3)
    batch = np.stack([np.eye(2), [[1.0, 2.0], [2.0, 4.0]]]).astype(np.float32)
    (y,) = run_checked("Inverse", [batch])
    assert np.array_equal(y[0], np.eye(2)), "the invertible matrix of the batch is inverted"
    assert np.isnan(y[1]).all(), "a singular matrix gives NaN"


def test_inverse_fixed_point_through_our_backend(monkeypatch):
    """A reference run: the HTP has no Inverse (graphFinalize refuses it: qnnemu/htp/op_support.py)."""
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")
    from qnnemu.client import Backend
    codes = np.array([[[200, 128], [128, 160]]], np.uint8)  # real [[3.6, 0], [0, 1.6]] at 0.05
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        a = g.input("a", codes.shape, U8, quant=(0.05, -128))
        g.node("Inverse", [a], [("y", codes.shape, np.float32)], app_read=True)
        g.finalize()
        y = g.execute({"a": codes})["y"]
        ctx.free()
    assert_close(y[0], [[1 / 3.6, 0.0], [0.0, 1 / 1.6]], "u8 Inverse of the dequantized matrix")


# Erf's and ThresholdedRelu's rule rows are in tests/test_ops_elementwise.py with the rest of
# activation.py's (one test per rule id).
NEGATIVE = [
    ("Inverse", [spec((3,))], {}, "input-rank", "inputTensors[0].rank"),
    ("Inverse", [spec((2, 3, 4))], {}, "square", "inputTensors[0].dimensions"),
    ("Inverse", [spec((2, 2), BF16)], {}, "dtype", "inputTensors[0].dataType"),
]


@pytest.mark.parametrize("op_type,specs,params,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[3]}" for n in NEGATIVE])
def test_rule(op_type, specs, params, rule, path):
    expect_rule(op_type, specs, params, None, rule, path)
