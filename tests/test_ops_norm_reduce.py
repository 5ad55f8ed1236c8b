"""Numerics and validation of the normalization and reduction ops (qnnemu/ops/norm.py,
qnnemu/ops/reduce.py): Batchnorm, InstanceNorm, LayerNorm, RmsNorm, GroupNorm, L2Norm, Lrn,
ReduceMax/Mean/Min/Prod/Sum/SumSquare, Argmax, Argmin, TopK, CumulativeSum.

Each op runs through its QNN contract (``check`` -> ``run``) and is compared with an
independent float64 reference written here (explicit loops or plain numpy formulas), or with
``onnx.reference.ReferenceEvaluator`` where the ONNX op means the same once mapped the way ORT's
QNN EP maps it (channel-last layouts, Lrn's radius/alpha).  Behaviours that differ from ONNX
were measured on the vendor's libQnnHtp.so (see the module docstrings of norm.py/reduce.py):
TopK's tie order, RmsNorm's ignored beta, L2Norm's default axis, integer rounding/saturation,
Lrn's defaults.  Graph-level sections (skipped when the libraries are absent): the same
behaviours on the vendor's backend and ours, and ONNX models through ORT's QNN EP on ours vs
ORT's CPU EP.  Negative tests: one per rule id, asserting the rule id and the path.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from optest import assert_close, check, expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpCheckError, OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import QuantSpec, TensorSpec

onnx = pytest.importorskip("onnx", reason="onnx (test extra) is needed for the ONNX references")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(4321)
F32 = Q.QNN_DATATYPE_FLOAT_32
U8, I32, U32 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32
# BFLOAT_16: no op takes it (a plain integer / BOOL_8 is fixed point with scale 1 to the ops
# that have no kernel for it, ops/base.py AS_FIXED)
BF16 = Q.QNN_DATATYPE_BFLOAT_16


# ---- helpers --------------------------------------------------------------------------------
def run_op(op_type, arrays, params=None, declared_dtypes=None):
    """check + run on numpy arrays as the graph layer does; returns all outputs (tuple)."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    specs = [TensorSpec(a.shape, dtypes.from_numpy(a.dtype)) for a in arrays]
    declared = None
    if declared_dtypes is not None:
        inferred = cls.check(specs, ps)
        declared = [TensorSpec(o.shape, d) for o, d in zip(inferred, declared_dtypes)]
    outs = cls.check(specs, ps, declared_outputs=declared)
    op = cls(cls.parse_params(ps), specs, outs)
    ys = op.run(*arrays)
    assert len(ys) == len(outs), f"{op_type}: run() returns one array per inferred output"
    for y, o in zip(ys, outs):
        assert tuple(y.shape) == tuple(o.shape), \
            f"{op_type}: run() shape {y.shape} equals inferred shape {o.shape}"
        assert y.dtype == dtypes.numpy_dtype(o.dtype), \
            f"{op_type}: run() dtype {y.dtype} matches the inferred {dtypes.name(o.dtype)}"
    return ys


def run1(op_type, arrays, params=None):
    return run_op(op_type, arrays, params)[0]


def rand(*shape, scale=1.0, shift=0.0, dtype=np.float32):
    return (RNG.standard_normal(shape) * scale + shift).astype(dtype)


def onnx_run(node, inputs: dict, opset=18, outputs=("Y",)):
    """Runs one ONNX node with the reference evaluator (float32 tensors by default)."""
    def vi(name, a):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
    graph = helper.make_graph([node], "g", [vi(k, v) for k, v in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, inputs)


def nhwc_to_nchw(a):
    return np.moveaxis(a, -1, 1)


def nchw_to_nhwc(a):
    return np.moveaxis(a, 1, -1)


# ---- float64 references (loops where the op's definition is a loop) ------------------------
def ref_standardize(x, axes, eps, center=True, scale=True):
    xd = np.asarray(x, np.float64)
    m = xd.mean(axis=axes, keepdims=True) if center else 0.0
    d = xd - m
    if not scale:
        return d
    return d / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + eps)


def expand_affine(p, shape, axes):
    """gamma/beta given for the normalized dims (maybe broadcast, maybe with leading 1s) ->
    an array broadcasting against the input: dims at ``axes``, 1 elsewhere."""
    norm = [shape[a] for a in axes]
    p = np.asarray(p, np.float64)
    p = p.reshape(p.shape[max(0, p.ndim - len(norm)):]) if p.ndim > len(norm) else p
    full = [1] * len(shape)
    for a in axes:
        full[a] = shape[a]
    return np.broadcast_to(p, norm).reshape(full)


def ref_group_norm(x, gamma, beta, group, eps):
    """Loop over batch and group: statistics of x[b, ..., group's channels]."""
    xd = x.astype(np.float64)
    out = np.empty_like(xd)
    c = x.shape[-1]
    cg = c // group
    for b in range(x.shape[0]):
        for gi in range(group):
            blk = xd[b, ..., gi * cg:(gi + 1) * cg]
            m = blk.mean()
            v = ((blk - m) ** 2).mean()
            out[b, ..., gi * cg:(gi + 1) * cg] = (blk - m) / np.sqrt(v + eps)
    return out * gamma + beta


def ref_lrn_within(x, alpha, beta, bias, r):
    xd = x.astype(np.float64)
    n, h, w, c = x.shape
    out = np.empty_like(xd)
    for i in range(h):
        for j in range(w):
            win = xd[:, max(0, i - r):i + r + 1, max(0, j - r):j + r + 1, :]
            s = (win ** 2).sum(axis=(1, 2))
            out[:, i, j, :] = xd[:, i, j, :] / (bias + alpha * s) ** beta
    return out


def ref_topk(row, k, largest):
    """Python sort of (value, index) pairs: values descending (ascending), equal values by
    higher index first -- the vendor backend's order."""
    pairs = sorted(range(len(row)), key=lambda i: ((-row[i] if largest else row[i]), -i))
    return pairs[:k]


# ---- Batchnorm ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,with_bias", [((2, 5, 4, 3), True), ((3, 7), True),
                                             ((1, 4, 6), False), ((5,), True)])
def test_batchnorm(shape, with_bias):
    c = shape[-1]
    x, w, b = rand(*shape), rand(c), rand(c)
    y = run1("Batchnorm", [x, w] + ([b] if with_bias else []))
    ref = x.astype(np.float64) * w + (b if with_bias else 0.0)
    assert_close(y, ref, f"Batchnorm {shape} bias={with_bias} vs x*w+b")


def test_batchnorm_matches_onnx_batchnormalization_folded():
    """ORT's QNN EP folds ONNX BatchNormalization into weight = scale / sqrt(var + eps),
    bias = B - mean * weight; the result equals ONNX's (NCHW) op."""
    x = rand(2, 3, 4, 5)  # NCHW
    scale, bias, mean, var = rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.5
    eps = 1e-5
    (want,) = onnx_run(helper.make_node("BatchNormalization", ["X", "s", "b", "m", "v"], ["Y"],
                                        epsilon=eps),
                       {"X": x, "s": scale, "b": bias, "m": mean, "v": var}, opset=15)
    w = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
    b = (bias - mean.astype(np.float64) * w).astype(np.float32)
    y = run1("Batchnorm", [np.ascontiguousarray(nchw_to_nhwc(x)), w, b])
    assert_close(nhwc_to_nchw(y), want, "Batchnorm (folded) vs ONNX BatchNormalization", rel=1e-5)


def test_batchnorm_float16():
    x, w, b = rand(2, 3, 4, dtype=np.float16), rand(4, dtype=np.float16), rand(4, dtype=np.float16)
    y = run1("Batchnorm", [x, w, b])
    assert y.dtype == np.float16, "float16 in -> float16 out"
    ref = (x.astype(np.float64) * w + b).astype(np.float16)
    assert_close(y, ref, "Batchnorm float16 vs float64 rounded to float16", rel=1e-3)


# ---- InstanceNorm ---------------------------------------------------------------------------
INSTANCE_CASES = [
    # (shape, mode, normalize_variance, region)
    ((2, 5, 4, 3), 0, True, 0), ((2, 5, 4, 3), 0, True, 1), ((2, 5, 4, 3), 0, True, 2),
    ((2, 5, 4, 3), 1, True, 0), ((2, 5, 4, 3), 1, True, 1), ((2, 5, 4, 3), 1, True, 2),
    ((2, 5, 4, 3), 0, False, 0), ((2, 5, 4, 3), 1, False, 2), ((3, 7, 4), 0, True, 0),
    ((1, 2, 3, 4, 5), 0, True, 0),
]


@pytest.mark.parametrize("shape,mode,nv,region", INSTANCE_CASES)
def test_instance_norm(shape, mode, nv, region):
    c, r = shape[-1], len(shape)
    x, g, b = rand(*shape, scale=2.0, shift=0.5), rand(c), rand(c)
    eps = 1e-4
    y = run1("InstanceNorm", [x, g, b], {"epsilon": eps, "mode": mode,
                                         "normalize_variance": nv, "region": region})
    axes = {0: tuple(range(1, r - 1)), 1: (r - 1,), 2: tuple(range(1, r))}[region]
    ref = ref_standardize(x, axes, eps, center=(mode == 0), scale=nv) * g + b
    assert_close(y, ref, f"InstanceNorm {shape} mode={mode} nv={nv} region={region}")


def test_instance_norm_matches_onnx_instancenormalization():
    x, g, b = rand(2, 3, 5, 4, shift=3.0), rand(3), rand(3)  # NCHW
    (want,) = onnx_run(helper.make_node("InstanceNormalization", ["X", "g", "b"], ["Y"],
                                        epsilon=1e-5), {"X": x, "g": g, "b": b})
    y = run1("InstanceNorm", [np.ascontiguousarray(nchw_to_nhwc(x)), g, b], {"epsilon": 1e-5})
    assert_close(nhwc_to_nchw(y), want, "InstanceNorm (NHWC) vs ONNX InstanceNormalization")


# ---- LayerNorm ------------------------------------------------------------------------------
LAYER_CASES = [
    # (shape, axes, gamma shape or None, with beta)
    ((2, 7, 32), [2], (32,), True),
    ((2, 7, 32), [2], (32,), False),
    ((2, 3, 8), [1, 2], (3, 8), True),
    ((2, 3, 8), [1, 2], (8,), True),        # broadcast gamma/beta over the normalized dims
    ((4, 3, 6), [0, 2], (4, 6), True),      # non-contiguous axes
    ((3, 5, 6), [1], (5,), True),           # a middle axis
    ((6, 9), [0, 1], (6, 9), False),        # everything
    ((1, 1, 16), [2], (1, 16), True),
]


@pytest.mark.parametrize("shape,axes,gshape,with_beta", LAYER_CASES)
def test_layer_norm(shape, axes, gshape, with_beta):
    x = rand(*shape, scale=3.0, shift=-1.0)
    g, b = rand(*gshape), rand(*gshape)
    eps = 1e-5
    arrays = [x, g] + ([b] if with_beta else [])
    y = run1("LayerNorm", arrays, {"axes": axes, "epsilon": eps})
    gb = expand_affine(g, shape, axes)
    bb = expand_affine(b, shape, axes) if with_beta else 0.0
    ref = ref_standardize(x, tuple(axes), eps) * gb + bb
    assert_close(y, ref, f"LayerNorm {shape} axes={axes} gamma{gshape} beta={with_beta}")


def test_layer_norm_default_epsilon_is_1e_3():
    """epsilon defaults to 0.001 (measured on the vendor's backend)."""
    x = rand(3, 16, scale=0.01)
    y = run1("LayerNorm", [x, np.ones(16, np.float32)], {"axes": [1]})
    assert_close(y, ref_standardize(x, (1,), 1e-3), "LayerNorm without epsilon uses 0.001")


def test_layer_norm_matches_onnx_layernormalization():
    x, g, b = rand(2, 5, 24, shift=2.0), rand(24), rand(24)
    (want,) = onnx_run(helper.make_node("LayerNormalization", ["X", "g", "b"], ["Y"], axis=-1,
                                        epsilon=1e-5), {"X": x, "g": g, "b": b}, opset=17)
    y = run1("LayerNorm", [x, g, b], {"axes": [2], "epsilon": 1e-5})
    assert_close(y, want, "LayerNorm vs ONNX LayerNormalization (axis=-1)")


def test_layer_norm_ill_conditioned_last_axis():
    """Data far from zero (mean 1e4, std 1): float32 one-pass formulas lose every digit; the
    two-pass float64 statistics stay within 1e-5 of the float64 reference."""
    x = rand(4, 128, 768, scale=1.0, shift=1e4)
    g, b = rand(768), rand(768)
    y = run1("LayerNorm", [x, g, b], {"axes": [2], "epsilon": 1e-5})
    ref = ref_standardize(x, (2,), 1e-5) * g + b
    assert_close(y, ref, "LayerNorm over 768 with mean 1e4", rel=1e-5)
    # also constant rows: variance 0, the result is beta (no NaN)
    xc = np.full((2, 8), 3.25, np.float32)
    yc = run1("LayerNorm", [xc, np.ones(8, np.float32), np.full(8, 0.5, np.float32)],
              {"axes": [1], "epsilon": 1e-5})
    assert np.array_equal(yc, np.full((2, 8), 0.5, np.float32)), "constant rows give beta"


def test_layer_norm_float16():
    h = np.float16
    x, g, b = rand(2, 4, 64, dtype=h), rand(64, dtype=h), rand(64, dtype=h)
    y = run1("LayerNorm", [x, g, b], {"axes": [2], "epsilon": 1e-5})
    assert y.dtype == np.float16, "float16 in -> float16 out"
    ref = ref_standardize(x, (2,), 1e-5) * g.astype(np.float64) + b
    assert_close(y, ref.astype(np.float16), "LayerNorm float16 vs float64 rounded", rel=2e-3)


def test_layer_norm_repeated_axis_counts_once():
    x, g = rand(2, 3, 4), rand(4)
    y = run1("LayerNorm", [x, g], {"axes": [2, 2], "epsilon": 1e-5})
    assert_close(y, ref_standardize(x, (2,), 1e-5) * g, "axes [2, 2] == axes [2]")


# ---- RmsNorm --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axes,gshape", [((2, 7, 32), [2], (32,)),
                                               ((3, 4, 6), [1, 2], (4, 6)), ((5, 8), [1], (1, 8))])
def test_rms_norm(shape, axes, gshape):
    x, g = rand(*shape, scale=2.0, shift=0.3), rand(*gshape)
    y = run1("RmsNorm", [x, g], {"axes": axes, "epsilon": 1e-6})
    ref = ref_standardize(x, tuple(axes), 1e-6, center=False) * expand_affine(g, shape, axes)
    assert_close(y, ref, f"RmsNorm {shape} axes={axes}")


def test_rms_norm_beta_is_ignored_and_epsilon_defaults_to_1e_6():
    """The vendor's backend gives x / rms * gamma whatever beta holds (clients pass zeros)."""
    x, g, b = rand(3, 16, scale=1e-3), rand(16), rand(16)
    y = run1("RmsNorm", [x, g, b], {"axes": [1]})
    ref = ref_standardize(x, (1,), 1e-6, center=False) * g
    assert_close(y, ref, "RmsNorm: beta ignored, default epsilon 1e-6")


def test_rms_norm_matches_onnx_rmsnormalization_when_available():
    from onnx import defs
    if defs.onnx_opset_version() < 23:
        pytest.skip("ONNX RMSNormalization needs opset 23")
    x, g = rand(2, 5, 24), rand(24)
    (want,) = onnx_run(helper.make_node("RMSNormalization", ["X", "g"], ["Y"], axis=-1,
                                        epsilon=1e-6), {"X": x, "g": g}, opset=23)
    y = run1("RmsNorm", [x, g], {"axes": [2], "epsilon": 1e-6})
    assert_close(y, want, "RmsNorm vs ONNX RMSNormalization")


# ---- GroupNorm ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,group,affine", [((2, 4, 5, 6), 2, True), ((2, 4, 5, 6), 1, True),
                                                ((2, 4, 5, 6), 6, True), ((3, 7, 8), 4, False),
                                                ((2, 12), 3, True)])
def test_group_norm(shape, group, affine):
    c = shape[-1]
    x = rand(*shape, scale=2.0, shift=1.0)
    g, b = (rand(c), rand(c)) if affine else (np.ones(c), np.zeros(c))
    y = run1("GroupNorm", [x, g, b] if affine else [x], {"group": group, "epsilon": 1e-5})
    assert_close(y, ref_group_norm(x, g, b, group, 1e-5), f"GroupNorm {shape} group={group}")


def test_group_norm_matches_onnx_groupnormalization():
    """ONNX GroupNormalization-21 (NCHW, per-channel scale/bias) vs GroupNorm on NHWC."""
    x, g, b = rand(2, 6, 3, 4, shift=1.0), rand(6), rand(6)
    (want,) = onnx_run(helper.make_node("GroupNormalization", ["X", "g", "b"], ["Y"],
                                        num_groups=3, epsilon=1e-5),
                       {"X": x, "g": g, "b": b}, opset=21)
    y = run1("GroupNorm", [np.ascontiguousarray(nchw_to_nhwc(x)), g, b],
             {"group": 3, "epsilon": 1e-5})
    assert_close(nhwc_to_nchw(y), want, "GroupNorm vs ONNX GroupNormalization")


# ---- L2Norm ---------------------------------------------------------------------------------
def test_l2_norm_axis_axes_and_default():
    x = rand(3, 4, 5)
    xd = x.astype(np.float64)
    for params, ax in (({"axis": 2}, 2), ({"axis": 1}, 1), ({}, 0), ({"axes": [1, 2]}, (1, 2)),
                       ({"axis": 0, "axes": [2]}, 2)):
        y = run1("L2Norm", [x], params)
        ref = xd / np.sqrt(np.sum(xd * xd, axis=ax, keepdims=True))
        assert_close(y, ref, f"L2Norm {params} normalizes over {ax}")


def test_l2_norm_epsilon_is_a_floor_on_the_sum_of_squares():
    """x / sqrt(max(sum(x^2), eps)): [0.3, 0.4] with eps 1 stays [0.3, 0.4], eps 0.1 doubles
    it (as on the vendor's backend); all-zero rows give zeros."""
    x = np.array([[0.3, 0.4, 0.0], [0.0, 0.0, 0.0]], np.float32)
    y1 = run1("L2Norm", [x], {"axis": 1, "epsilon": 1.0})
    assert_close(y1, [[0.3, 0.4, 0.0], [0.0, 0.0, 0.0]], "epsilon 1.0 floors the sum 0.25")
    y2 = run1("L2Norm", [x], {"axis": 1, "epsilon": 0.1})
    assert_close(y2, [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]], "epsilon 0.1 floors the sum 0.25")
    y3 = run1("L2Norm", [x], {"axis": 1})
    assert_close(y3, [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]], "default epsilon is negligible")


def test_l2_norm_matches_onnx_lpnormalization():
    x = rand(4, 6, 3)
    (want,) = onnx_run(helper.make_node("LpNormalization", ["X"], ["Y"], axis=1, p=2), {"X": x})
    assert_close(run1("L2Norm", [x], {"axis": 1}), want, "L2Norm vs ONNX LpNormalization p=2")


# ---- Lrn ------------------------------------------------------------------------------------
def onnx_lrn_loops(x, size, alpha, beta, bias):
    """ONNX LRN's formula on NCHW, literally (onnx.reference's LRN loops over the batch instead
    of the channels -- a bug -- so it cannot serve here)."""
    xd = x.astype(np.float64)
    c_n = x.shape[1]
    out = np.empty_like(xd)
    for c in range(c_n):
        lo, hi = max(0, c - (size - 1) // 2), min(c_n - 1, c + -(-(size - 1) // 2))
        s = (xd[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, c] = xd[:, c] / (bias + alpha / size * s) ** beta
    return out


def ort_cpu_run(node, inputs: dict, opset):
    ort = pytest.importorskip("onnxruntime")
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in inputs.items()], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


@pytest.mark.parametrize("size,alpha,beta,bias", [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.5, 2.0),
                                                  (1, 0.1, 1.0, 1.0), (7, 2.0, 0.75, 1.5)])
def test_lrn_across_channel_matches_onnx_lrn_as_ort_maps_it(size, alpha, beta, bias):
    """ORT's QNN EP: radius = (size - 1) / 2, alpha = alpha_onnx / size (QNN does not divide
    by the window size); the NHWC result equals ONNX LRN on NCHW (odd sizes)."""
    x = rand(2, 6, 4, 5, scale=2.0)  # NCHW, 6 channels
    y = run1("Lrn", [np.ascontiguousarray(nchw_to_nhwc(x))],
             {"radius": np.int32((size - 1) // 2), "alpha": float(np.float32(alpha / size)),
              "beta": beta, "bias": bias})
    assert_close(nhwc_to_nchw(y), onnx_lrn_loops(x, size, alpha, beta, bias),
                 f"Lrn size={size} vs the ONNX LRN formula", rel=2e-5)


def test_lrn_matches_onnxruntime_cpu_lrn():
    x = rand(1, 7, 3, 4, scale=2.0)
    want = ort_cpu_run(helper.make_node("LRN", ["X"], ["Y"], size=5, alpha=1e-3, beta=0.75,
                                        bias=1.0), {"X": x}, opset=13)
    y = run1("Lrn", [np.ascontiguousarray(nchw_to_nhwc(x))],
             {"radius": np.int32(2), "alpha": float(np.float32(1e-3 / 5)), "beta": 0.75,
              "bias": 1.0})
    assert_close(nhwc_to_nchw(y), want, "Lrn vs ONNX Runtime CPU LRN", rel=2e-5)


def test_lrn_defaults_and_radius_types():
    """alpha 1, beta 0.5, bias 1 by default; radius may be INT_32 or UINT_32."""
    x = rand(1, 3, 3, 7)
    y_int = run1("Lrn", [x], {"radius": np.int32(2)})
    y_uint = run1("Lrn", [x], {"radius": 2})
    xd = x.astype(np.float64)
    s = np.stack([(xd[..., max(0, c - 2):c + 3] ** 2).sum(-1) for c in range(7)], -1)
    assert_close(y_int, xd / np.sqrt(1.0 + s), "Lrn defaults alpha=1 beta=0.5 bias=1")
    assert np.array_equal(y_int, y_uint), "INT_32 and UINT_32 radius give the same result"


def test_lrn_within_channel():
    x = rand(2, 5, 6, 3)
    y = run1("Lrn", [x], {"radius": np.int32(1), "alpha": 0.5, "beta": 0.75, "bias": 1.0,
                          "region": 1})
    assert_close(y, ref_lrn_within(x, 0.5, 0.75, 1.0, 1), "Lrn WITHIN_CHANNEL 3x3 window",
                 rel=2e-5)


def test_lrn_rank2_and_float16():
    x = rand(4, 9, dtype=np.float16)
    y = run1("Lrn", [x], {"radius": np.int32(1), "alpha": 0.25, "beta": 0.75, "bias": 1.0})
    assert y.dtype == np.float16, "float16 in -> float16 out"
    xd = x.astype(np.float64)
    s = np.stack([(xd[..., max(0, c - 1):c + 2] ** 2).sum(-1) for c in range(9)], -1)
    assert_close(y, (xd / (1 + 0.25 * s) ** 0.75).astype(np.float16), "Lrn float16", rel=1e-3)


# ---- Reduce* --------------------------------------------------------------------------------
REDUCE_REF = {
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceSum": lambda x, a, k: np.sum(x.astype(np.float64), axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x.astype(np.float64), axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x.astype(np.float64), axis=a, keepdims=k),
    "ReduceSumSquare": lambda x, a, k: np.sum(x.astype(np.float64) ** 2, axis=a, keepdims=k),
}
REDUCE_CASES = [((2, 3, 4, 5), [3], False), ((2, 3, 4, 5), [1, 2], True),
                ((2, 3, 4, 5), [0, 3], False), ((2, 3, 4, 5), [2, 0, 1, 3], True),
                ((7, 1, 3), [1], False), ((6,), [0], True), ((1, 512, 768), [2], True)]


@pytest.mark.parametrize("op_type", sorted(REDUCE_REF))
@pytest.mark.parametrize("shape,axes,keep", REDUCE_CASES)
def test_reduce_float(op_type, shape, axes, keep):
    scale = 0.7 if op_type == "ReduceProd" else 1.0
    x = rand(*shape, scale=scale, shift=(1.0 if op_type == "ReduceProd" else 0.0))
    if op_type == "ReduceProd" and x.size > 1000:
        x = np.ones(shape, np.float32) + rand(*shape, scale=1e-3)
    y = run1(op_type, [x], {"axes": axes, "keep_dims": keep})
    ref = np.asarray(REDUCE_REF[op_type](x, tuple(axes), keep))
    assert_close(y, ref.reshape(ref.shape or (1,)), f"{op_type} {shape} axes={axes} keep={keep}")


@pytest.mark.parametrize("op_type", sorted(REDUCE_REF))
def test_reduce_every_axis_gives_dimensions_1(op_type):
    """A rank-0 result is declared [1] (QNN has no rank-0 tensors)."""
    x = rand(3, 4)
    (out,) = check(op_type, [spec((3, 4))], {"axes": [0, 1]})
    assert out.shape == (1,), f"{op_type}: reducing every axis without keep_dims -> [1]"
    y = run1(op_type, [x], {"axes": [1, 0]})
    assert_close(y, np.asarray(REDUCE_REF[op_type](x, (0, 1), False)).reshape(1),
                 f"{op_type} over every axis")
    (kept,) = check(op_type, [spec((3, 4))], {"axes": [0, 1], "keep_dims": True})
    assert kept.shape == (1, 1), f"{op_type}: keep_dims keeps rank"


def test_reduce_mean_and_sum_match_onnx():
    x = rand(2, 3, 4, 5)
    for onnx_op, op_type in (("ReduceMean", "ReduceMean"), ("ReduceSum", "ReduceSum")):
        axes = np.array([1, 3], np.int64)
        (want,) = onnx_run(helper.make_node(onnx_op, ["X", "axes"], ["Y"], keepdims=0),
                           {"X": x, "axes": axes})
        assert_close(run1(op_type, [x], {"axes": [1, 3]}), want, f"{op_type} vs ONNX {onnx_op}")


def test_reduce_sum_mean_accumulate_accurately():
    """Sums of 1e6 float32 values with cancellation: float64 accumulation."""
    x = np.concatenate([np.full(500_000, 1e4, np.float32), np.full(500_000, -1e4, np.float32),
                        rand(10)]).reshape(1, -1)
    y = run1("ReduceSum", [x], {"axes": [1]})
    assert_close(y, [np.sum(x.astype(np.float64))], "ReduceSum with cancellation", rel=1e-6)
    m = run1("ReduceMean", [x], {"axes": [1]})
    assert_close(m, [np.mean(x.astype(np.float64))], "ReduceMean with cancellation", rel=1e-6)


def test_reduce_float16():
    x = rand(4, 33, dtype=np.float16)
    for op_type in sorted(REDUCE_REF):
        y = run1(op_type, [x], {"axes": [1]})
        assert y.dtype == np.float16, f"{op_type}: float16 in -> float16 out"
        ref = np.asarray(REDUCE_REF[op_type](x, (1,), False)).astype(np.float16)
        assert_close(y, ref, f"{op_type} float16", rel=1e-3)


def test_reduce_int32():
    """INT_32 inputs: Max/Min exact, sums/products exact in range and SATURATING outside it,
    ReduceMean rounding half to even (the vendor backend's [1, 2] -> 2, [0, 1] -> 0)."""
    x = RNG.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    for op_type, ref in (("ReduceMax", x.max(2)), ("ReduceMin", x.min(2)), ("ReduceSum", x.sum(2)),
                         ("ReduceSumSquare", (x.astype(np.int64) ** 2).sum(2)),
                         ("ReduceProd", np.prod(x[..., :3].astype(np.int64), axis=2))):
        arr = x[..., :3].copy() if op_type == "ReduceProd" else x
        y = run1(op_type, [arr], {"axes": [2]})
        assert y.dtype == np.int32, f"{op_type}: INT_32 stays INT_32"
        assert np.array_equal(y, ref), f"{op_type} int32 exact"
    m = run1("ReduceMean", [np.array([[1, 2], [0, 1], [-1, -2], [3, 4], [2, 2], [-1, 0]],
                                     np.int32)], {"axes": [1]})
    assert m.tolist() == [2, 0, -2, 4, 2, 0], "ReduceMean int32 rounds half to even"
    big = np.array([[2**31 - 1, 1], [-2**31, -1]], np.int32)
    s = run1("ReduceSum", [big], {"axes": [1]})
    assert s.tolist() == [2**31 - 1, -2**31], "ReduceSum int32 saturates instead of wrapping"
    u = np.array([[1, 2, 3]], np.uint8)
    assert run1("ReduceSum", [u], {"axes": [1]}).tolist() == [6], "UINT_8 ReduceSum"


def test_reduce_accepts_fixed_point_inputs():
    q = spec((2, 3), U8, QuantSpec(Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, 0.1, -128))
    for op_type in sorted(REDUCE_REF):
        (out,) = check(op_type, [q], {"axes": [1]})
        assert out.shape == (2,) and out.dtype == U8, f"{op_type}: fixed-point output spec"
    selecting = {"ReduceMax", "ReduceMin", "Argmax", "Argmin", "TopK"}
    for op_type in selecting | set(REDUCE_REF) | {"CumulativeSum"}:
        assert ops.get(op_type).quant_passthrough == (op_type in selecting), \
            f"{op_type}: quant_passthrough only for ops that select values"


# ---- Argmax / Argmin ------------------------------------------------------------------------
@pytest.mark.parametrize("op_type,fn", [("Argmax", np.argmax), ("Argmin", np.argmin)])
def test_arg_ops(op_type, fn):
    x = rand(3, 4, 5)
    for axis in range(3):
        for keep in (False, True):
            y = run1(op_type, [x], {"axis": axis, "keep_dims": keep})
            ref = fn(x, axis=axis)
            if keep:
                ref = np.expand_dims(ref, axis)
            assert y.dtype == np.int32, f"{op_type}: INT_32 output by default"
            assert np.array_equal(y, ref), f"{op_type} axis={axis} keep={keep}"
    # ties: the first index; integer inputs
    t = np.array([[1, 5, 5, 0, 5], [2, 2, 2, 2, 2]], np.int32)
    y = run1(op_type, [t], {"axis": 1})
    want = [1, 0] if op_type == "Argmax" else [3, 0]
    assert y.tolist() == want, f"{op_type}: ties resolve to the first index"


def test_arg_ops_uint32_output_and_rank1():
    x = rand(7)
    (y,) = run_op("Argmax", [x], {"axis": 0}, declared_dtypes=[U32])
    assert y.dtype == np.uint32 and y.shape == (1,), "declared UINT_32 output; rank-1 input -> [1]"
    assert int(y[0]) == int(np.argmax(x)), "Argmax of a vector"
    (out,) = check("Argmin", [spec((7,))], {"axis": 0}, declared=[spec((1,), U32)])
    assert out.dtype == U32, "Argmin: the declared UINT_32 output type is kept"
    (out,) = check("Argmin", [spec((7,))], {"axis": 0}, declared=[spec((1,), F32)])
    assert out.dtype == I32, "Argmin: any other declared type -> INT_32 (the graph then rejects it)"


def test_arg_ops_match_onnx():
    x = rand(3, 6, 2)
    for onnx_op, op_type in (("ArgMax", "Argmax"), ("ArgMin", "Argmin")):
        (want,) = onnx_run(helper.make_node(onnx_op, ["X"], ["Y"], axis=1, keepdims=1), {"X": x})
        assert np.array_equal(run1(op_type, [x], {"axis": 1, "keep_dims": True}), want), \
            f"{op_type} vs ONNX {onnx_op}"


# ---- TopK -----------------------------------------------------------------------------------
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_topk(largest, dtype):
    if dtype == np.int32:
        x = RNG.integers(-3, 4, (3, 4, 11)).astype(np.int32)  # many ties
    else:
        x = np.round(rand(3, 4, 11, scale=2.0), 1).astype(dtype)  # some ties
    k = 5
    v, i = run_op("TopK", [x], {"k": k, "largest": largest})
    assert v.dtype == x.dtype and i.dtype == np.int32, "values keep the input type, indices INT_32"
    for idx in np.ndindex(x.shape[:-1]):
        want = ref_topk(x[idx].tolist(), k, largest)
        assert i[idx].tolist() == want, f"TopK largest={largest} row {idx}: {x[idx].tolist()}"
        assert v[idx].tolist() == [x[idx][j] for j in want], "values are the selected elements"


def test_topk_tie_order_is_the_vendors():
    """[1, 3, 3, 2, 3, 1, 1, 2]: the vendor's HTP backend returns indices 4, 2, 1, 7, 3, 6, 5, 0
    (largest) and 6, 5, 0, 7, 3, 4, 2, 1 (smallest) -- equal values by higher index first."""
    x = np.array([[1, 3, 3, 2, 3, 1, 1, 2]], np.float32)
    _, i = run_op("TopK", [x], {"k": 8})
    assert i.tolist() == [[4, 2, 1, 7, 3, 6, 5, 0]], "largest: ties by higher index"
    _, i = run_op("TopK", [x], {"k": 8, "largest": False})
    assert i.tolist() == [[6, 5, 0, 7, 3, 4, 2, 1]], "smallest: ties by higher index"
    _, i = run_op("TopK", [x], {"k": 1})
    assert i.tolist() == [[4]], "k=1 picks the last maximum"


@pytest.mark.parametrize("largest", [True, False])
def test_topk_long_rows_partition_path(largest):
    """Rows of 1000 with k=10 take the partition path; ties across the cut (small integer
    ranges) and distinct values both give the full-sort order."""
    for x in (RNG.integers(-4, 4, (3, 1000)).astype(np.float32),
              RNG.integers(-300, 300, (2, 1000)).astype(np.int32), rand(2, 1000)):
        v, i = run_op("TopK", [x], {"k": 10, "largest": largest})
        for r in range(x.shape[0]):
            want = ref_topk(x[r].tolist(), 10, largest)
            assert i[r].tolist() == want, f"TopK long row {r} ({x.dtype}, largest={largest})"
            assert v[r].tolist() == [x[r][j] for j in want], "values follow the indices"


def test_topk_values_match_onnx_and_uint32_indices():
    x = rand(2, 3, 50)  # distinct values: no tie order question
    (want_v, want_i) = onnx_run(helper.make_node("TopK", ["X", "K"], ["V", "I"], axis=-1),
                                {"X": x, "K": np.array([7], np.int64)}, opset=11,
                                outputs=("V", "I"))
    v, i = run_op("TopK", [x], {"k": 7}, declared_dtypes=[F32, U32])
    assert i.dtype == np.uint32, "declared UINT_32 indices"
    assert np.array_equal(v, want_v) and np.array_equal(i, want_i), "TopK vs ONNX TopK"
    v, i = run_op("TopK", [x], {"k": 50})
    assert np.array_equal(v, -np.sort(-x, axis=-1)), "k = n sorts the whole row"


# ---- CumulativeSum --------------------------------------------------------------------------
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_sum_matches_onnx_cumsum(exclusive, reverse):
    x = rand(3, 5, 4)
    for axis in range(3):
        (want,) = onnx_run(helper.make_node("CumSum", ["X", "A"], ["Y"], exclusive=int(exclusive),
                                            reverse=int(reverse)),
                           {"X": x, "A": np.array(axis, np.int64)}, opset=14)
        y = run1("CumulativeSum", [x], {"axis": axis, "exclusive": exclusive, "reverse": reverse})
        assert_close(y, want, f"CumulativeSum axis={axis} exclusive={exclusive} reverse={reverse}",
                     rel=1e-5)


def test_cumulative_sum_int32_and_float16():
    x = np.array([[1, 2, 3, 4, 5]], np.int32)
    got = {(e, r): run1("CumulativeSum", [x], {"axis": 1, "exclusive": e, "reverse": r}).tolist()
           for e in (False, True) for r in (False, True)}
    assert got == {(False, False): [[1, 3, 6, 10, 15]], (False, True): [[15, 14, 12, 9, 5]],
                   (True, False): [[0, 1, 3, 6, 10]], (True, True): [[14, 12, 9, 5, 0]]}, \
        "int32 CumulativeSum, the vendor backend's four variants"
    big = np.array([[2**31 - 1, 1]], np.int32)
    assert run1("CumulativeSum", [big], {"axis": 1}).tolist() == [[2**31 - 1, 2**31 - 1]], \
        "int32 running sums saturate"
    h = rand(2, 40, dtype=np.float16)
    y = run1("CumulativeSum", [h], {"axis": 1})
    assert y.dtype == np.float16, "float16 in -> float16 out"
    assert_close(y, np.cumsum(h.astype(np.float64), 1).astype(np.float16), "float16 cumsum",
                 rel=1e-3)


# ---- the vendor's backend: the measured behaviours, graph level -------------------------------
# Each case builds one small graph through qnnemu.client and returns (feeds, {output: (reference,
# tolerance)}); the reference encodes the behaviour measured on the vendor's libQnnHtp.so (x86-64
# build, shipped in onnxruntime_qnn).  Cases the vendor's x86 build cannot prepare (InstanceNorm,
# GroupNorm, float CumulativeSum, ReduceProd, ...) are covered by the op-level tests above only.
# Tolerances: the vendor computes LayerNorm/RmsNorm/L2Norm at about float16 precision.
VENDOR_CASES = {}


def vendor_case(fn):
    VENDOR_CASES[fn.__name__] = fn
    return fn


@vendor_case
def v_layer_norm(g, rng):
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    gamma, beta = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    g.node("LayerNorm", [g.input("x", x.shape), g.static("g", gamma), g.static("b", beta)],
           params={"axes": np.array([2], np.uint32), "epsilon": np.float32(1e-5)},
           outputs=[("y", x.shape, np.float32)], app_read=True)
    return {"x": x}, {"y": (ref_standardize(x, (2,), 1e-5) * gamma + beta, 2e-3)}


@vendor_case
def v_layer_norm_default_epsilon(g, rng):
    x = (rng.standard_normal((2, 16)) * 0.01).astype(np.float32)
    g.node("LayerNorm", [g.input("x", x.shape), g.static("g", np.ones(16, np.float32))],
           params={"axes": np.array([1], np.uint32)}, outputs=[("y", x.shape, np.float32)],
           app_read=True)
    return {"x": x}, {"y": (ref_standardize(x, (1,), 1e-3), 2e-3)}


@vendor_case
def v_rms_norm_ignores_beta(g, rng):
    h = np.float16
    x = rng.standard_normal((3, 8)).astype(h)
    gamma, beta = rng.standard_normal(8).astype(h), rng.standard_normal(8).astype(h)
    g.node("RmsNorm", [g.input("x", x.shape, h), g.static("g", gamma), g.static("b", beta)],
           params={"axes": np.array([1], np.uint32)}, outputs=[("y", x.shape, h)], app_read=True)
    return {"x": x}, {"y": (ref_standardize(x, (1,), 1e-6, center=False) * gamma, 2e-3)}


@vendor_case
def v_l2_norm_default_axis_0(g, rng):
    h = np.float16
    x = rng.standard_normal((3, 4, 5)).astype(h)
    g.node("L2Norm", [g.input("x", x.shape, h)], outputs=[("y", x.shape, h)], app_read=True)
    xd = x.astype(np.float64)
    return {"x": x}, {"y": (xd / np.sqrt((xd * xd).sum(0, keepdims=True)), 2e-3)}


@vendor_case
def v_lrn_across_channel(g, rng):
    x = rng.standard_normal((1, 3, 4, 7)).astype(np.float32)
    g.node("Lrn", [g.input("x", x.shape)],
           params={"radius": np.int32(2), "alpha": np.float32(0.3), "beta": np.float32(0.75),
                   "bias": np.float32(1.5)}, outputs=[("y", x.shape, np.float32)], app_read=True)
    xd = x.astype(np.float64)
    s = np.stack([(xd[..., max(0, c - 2):c + 3] ** 2).sum(-1) for c in range(7)], -1)
    return {"x": x}, {"y": (xd / (1.5 + 0.3 * s) ** 0.75, 1e-5)}


@vendor_case
def v_lrn_within_channel_defaults(g, rng):
    x = rng.standard_normal((1, 5, 4, 3)).astype(np.float32)
    g.node("Lrn", [g.input("x", x.shape)], params={"radius": np.int32(1), "region": np.uint32(1)},
           outputs=[("y", x.shape, np.float32)], app_read=True)
    return {"x": x}, {"y": (ref_lrn_within(x, 1.0, 0.5, 1.0, 1), 1e-5)}


@vendor_case
def v_batchnorm_without_bias(g, rng):
    x = rng.standard_normal((1, 3, 4, 7)).astype(np.float32)
    w = rng.standard_normal(7).astype(np.float32)
    g.node("Batchnorm", [g.input("x", x.shape), g.static("w", w)],
           outputs=[("y", x.shape, np.float32)], app_read=True)
    return {"x": x}, {"y": (x.astype(np.float64) * w, 1e-6)}


@vendor_case
def v_topk_ties(g, rng):
    x = np.round(rng.standard_normal((4, 10)), 0).astype(np.float32)
    g.node("TopK", [g.input("x", x.shape)], params={"k": 6},
           outputs=[("v", (4, 6), np.float32), ("i", (4, 6), np.int32)], app_read=True)
    idx = np.array([ref_topk(r.tolist(), 6, True) for r in x])
    return {"x": x}, {"i": (idx, 0.0), "v": (np.take_along_axis(x, idx, 1), 0.0)}


@vendor_case
def v_topk_smallest_uint32(g, rng):
    x = np.round(rng.standard_normal((4, 10)), 0).astype(np.float32)
    g.node("TopK", [g.input("x", x.shape)], params={"k": 5, "largest": False},
           outputs=[("v", (4, 5), np.float32), ("i", (4, 5), np.uint32)], app_read=True)
    idx = np.array([ref_topk(r.tolist(), 5, False) for r in x])
    return {"x": x}, {"i": (idx, 0.0), "v": (np.take_along_axis(x, idx, 1), 0.0)}


@vendor_case
def v_argmax_vector_uint32(g, rng):
    x = np.array([1, 4, 0, 4, 2], np.float32)
    g.node("Argmax", [g.input("x", x.shape)], params={"axis": 0},
           outputs=[("y", (1,), np.uint32)], app_read=True)
    return {"x": x}, {"y": (np.array([1]), 0.0)}


@vendor_case
def v_reduce_every_axis(g, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    g.node("ReduceSum", [g.input("x", x.shape)], params={"axes": np.array([1, 0], np.uint32)},
           outputs=[("y", (1,), np.float32)], app_read=True)
    return {"x": x}, {"y": (np.array([x.astype(np.float64).sum()]), 1e-6)}


@vendor_case
def v_reduce_mean_int32_rounding(g, rng):
    x = np.array([[1, 2], [0, 1], [-1, -2], [3, 4], [-1, 0], [5, 6]], np.int32)
    g.node("ReduceMean", [g.input("x", x.shape, np.int32)], params={"axes": np.array([1], np.uint32)},
           outputs=[("y", (6,), np.int32)], app_read=True)
    return {"x": x}, {"y": (np.array([2, 0, -2, 4, 0, 6]), 0.0)}


@vendor_case
def v_reduce_max_float16_repeated_axis(g, rng):
    h = np.float16
    x = rng.standard_normal((3, 4, 5)).astype(h)
    g.node("ReduceMax", [g.input("x", x.shape, h)],
           params={"axes": np.array([2, 0, 2], np.uint32), "keep_dims": True},
           outputs=[("y", (1, 4, 1), h)], app_read=True)
    return {"x": x}, {"y": (x.max(axis=(0, 2), keepdims=True), 0.0)}


@vendor_case
def v_cumulative_sum_int32_exclusive_reverse(g, rng):
    x = rng.integers(-9, 9, (3, 6)).astype(np.int32)
    g.node("CumulativeSum", [g.input("x", x.shape, np.int32)],
           params={"axis": np.uint32(1), "exclusive": True, "reverse": True},
           outputs=[("y", x.shape, np.int32)], app_read=True)
    rev = np.cumsum(x[:, ::-1], axis=1)[:, ::-1]
    return {"x": x}, {"y": (rev - x, 0.0)}


@vendor_case
def v_selection_ops_on_uint8_codes(g, rng):
    """ReduceMax/Argmax/TopK are quant_passthrough: on one encoding, exact on the codes."""
    q, u8 = (0.05, -128), np.uint8
    x = rng.integers(0, 12, (3, 30)).astype(u8)  # many ties
    tx = g.input("x", x.shape, u8, quant=q)
    g.node("ReduceMax", [tx], params={"axes": np.array([1], np.uint32)},
           outputs=[("m", (3,), u8, q)], app_read=True)
    g.node("Argmax", [tx], params={"axis": 1}, outputs=[("a", (3,), np.int32)], app_read=True)
    g.node("TopK", [tx], params={"k": 4}, outputs=[("v", (3, 4), u8, q), ("i", (3, 4), np.int32)],
           app_read=True)
    idx = np.array([ref_topk(r.tolist(), 4, True) for r in x])
    return {"x": x}, {"m": (x.max(1), 0.0), "a": (np.argmax(x, 1), 0.0),
                      "i": (idx, 0.0), "v": (np.take_along_axis(x, idx, 1), 0.0)}


@pytest.fixture(scope="module")
def backends():
    """(label, Backend) for the vendor's libQnnHtp.so and our libQnnHtpEmu.so, when present."""
    from vendor import our_library, vendor_library

    from qnnemu.client import Backend
    opened = []
    for label, lib in (("vendor", vendor_library("libQnnHtp.so")), ("qnnemu", our_library())):
        if lib is not None:
            opened.append((label, Backend(str(lib), log_level="error").__enter__()))
    yield opened
    for _, be in reversed(opened):
        be.__exit__(None, None, None)


def _run_vendor_case(be, name):
    ctx = be.context()
    try:
        g = ctx.graph(name)
        feeds, refs = VENDOR_CASES[name](g, np.random.default_rng(sum(name.encode())))
        g.finalize()
        return g.execute(feeds), refs
    finally:
        ctx.free()


def _check_case(outs, refs, who, name):
    for out_name, (ref, tol) in refs.items():
        got = outs[out_name]
        ref = np.asarray(ref)
        assert got.shape == ref.shape, f"{name}: {who} output {out_name} shape {got.shape}"
        if tol == 0.0:
            assert np.array_equal(got.astype(np.float64), ref.astype(np.float64)), \
                f"{name}: {who} output {out_name} {got.tolist()} == {ref.tolist()}"
        else:
            assert_close(got, ref, f"{name}: {who} output {out_name}", rel=tol)


@pytest.mark.parametrize("name", sorted(VENDOR_CASES))
def test_vendor_backend_behaviour(backends, name):
    """The behaviours the ops encode, confirmed on the vendor's backend and on ours."""
    if not backends:
        pytest.skip("neither the vendor's libQnnHtp.so (onnxruntime_qnn) nor ours is available")
    for label, be in backends:
        outs, refs = _run_vendor_case(be, name)
        _check_case(outs, refs, label, name)


# ---- ONNX Runtime's QNN EP on our backend: the ONNX -> QNN mappings end to end --------------------
def _ort_models():
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    rng = np.random.default_rng(99)

    def vi(name, shape, t=f):
        return helper.make_tensor_value_info(name, t, shape)

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a), name)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "LayerNormalization+ReduceMean": (17, [
            helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
            helper.make_node("ReduceMean", ["ln"], ["y"], axes=[-1], keepdims=1)],
            [vi("x", [2, 8, 32])], [vi("y", [2, 8, 1])], [init("g", w(32)), init("b", w(32))]),
        "ReduceSum-to-scalar": (13, [helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)],
                                [vi("x", [3, 4])], [vi("y", [])], [init("ax", np.array([0, 1]))]),
        "ArgMax": (13, [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)],
                   [vi("x", [3, 7])], [vi("y", [3], i64)], []),
        "TopK": (11, [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)],
                 [vi("x", [3, 20])], [vi("v", [3, 5]), vi("i", [3, 5], i64)],
                 [init("k", np.array([5]))]),
        "LRN": (13, [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-3, beta=0.75, bias=1.0)],
                [vi("x", [1, 7, 4, 4])], [vi("y", [1, 7, 4, 4])], []),
        "InstanceNormalization": (13, [helper.make_node("InstanceNormalization", ["x", "s", "b"],
                                                        ["y"], epsilon=1e-5)],
                                  [vi("x", [1, 3, 5, 4])], [vi("y", [1, 3, 5, 4])],
                                  [init("s", w(3)), init("b", w(3))]),
        "BatchNormalization": (15, [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                                     ["y"], epsilon=1e-5)],
                               [vi("x", [1, 3, 5, 4])], [vi("y", [1, 3, 5, 4])],
                               [init("s", w(3)), init("b", w(3)), init("m", w(3)),
                                init("v", np.abs(w(3)) + 0.5)]),
        "GroupNormalization": (21, [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"],
                                                     num_groups=2, epsilon=1e-5)],
                               [vi("x", [1, 4, 3, 3])], [vi("y", [1, 4, 3, 3])],
                               [init("s", w(4)), init("b", w(4))]),
        "CumSum": (14, [helper.make_node("CumSum", ["x", "a"], ["y"])], [vi("x", [3, 6])],
                   [vi("y", [3, 6])], [init("a", np.array(1))]),
    }


@pytest.mark.float_math("float32")   # compared with the CPU EP: our exact float32 reference runs
@pytest.mark.soc("SM8550")   # the HTP has no float CumulativeSum / GroupNorm / InstanceNorm on v68
@pytest.mark.parametrize("name", sorted(_ort_models()))
def test_onnxruntime_qnn_ep_on_qnnemu(tmp_path, name):
    """Every node on our backend (CPU fallback disabled); results equal ORT's CPU EP."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxruntime_qnn")
    from vendor import our_library
    lib = our_library()
    if lib is None:
        pytest.skip("libQnnHtpEmu.so is not built")
    from helpers.ort import qnn_ep_device
    device = qnn_ep_device()
    opset, nodes, inputs, outputs, inits = _ort_models()[name]
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([device], {"backend_path": str(lib)})
    sess = ort.InferenceSession(path, so)
    feeds = {i.name: np.random.default_rng(5).standard_normal(i.shape).astype(np.float32)
             for i in sess.get_inputs()}
    got = sess.run(None, feeds)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"{name}: output {k} shape {a.shape} == CPU EP {b.shape}"
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if b.size else 0.0
        assert err <= 1e-5 * max(1.0, float(np.max(np.abs(b)))), \
            f"{name}: output {k} QNN EP on qnnemu vs CPU EP max abs difference {err:.3g}"


# ---- speed: the hot transformer ops ---------------------------------------------------------
def test_layer_norm_and_reduce_mean_are_fast():
    import time
    x = rand(1, 512, 768)
    g, b = rand(768), rand(768)
    cls = ops.get("LayerNorm")
    ps = {"axes": to_param("axes", [2]), "epsilon": to_param("epsilon", 1e-5)}
    specs = [spec(x.shape), spec(g.shape), spec(b.shape)]
    op = cls(cls.parse_params(ps), specs, cls.check(specs, ps))
    rm_cls = ops.get("ReduceMean")
    rps = {"axes": to_param("axes", [2]), "keep_dims": to_param("keep_dims", True)}
    rm = rm_cls(rm_cls.parse_params(rps), specs[:1], rm_cls.check(specs[:1], rps))
    op.run(x, g, b)
    t0 = time.perf_counter()
    for _ in range(5):
        op.run(x, g, b)
        rm.run(x)
    per = (time.perf_counter() - t0) / 5
    assert per < 0.05, f"LayerNorm + ReduceMean on 1x512x768 take {per * 1e3:.1f} ms (< 50 ms)"


# ---- negative tests: one per rule id ------------------------------------------------------------
X4 = spec((1, 4, 5, 6))
Q_MISSING = spec((2, 3), U8)  # fixed point without quantization
NEGATIVE = [
    # (op, input specs, params, declared outputs, rule, path)
    ("Batchnorm", [spec(()), spec((1,))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("Batchnorm", [spec((2, 3), BF16), spec((3,))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Batchnorm", [Q_MISSING, spec((3,))], {}, None, "quant-missing", "inputTensors[0].quantizeParams"),
    ("Batchnorm", [X4, spec((4,))], {}, None, "weight-shape", "inputTensors[1].dimensions"),
    ("Batchnorm", [X4, spec((6,)), spec((1, 6))], {}, None, "bias-shape", "inputTensors[2].dimensions"),
    ("InstanceNorm", [spec((2, 6)), spec((6,)), spec((6,))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("InstanceNorm", [spec((1, 2, 3), BF16), spec((3,)), spec((3,))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("InstanceNorm", [X4, spec((6,)), spec((6,))], {"mode": 2}, None, "mode", "params[mode]"),
    ("InstanceNorm", [X4, spec((6,)), spec((6,))], {"region": 3}, None, "region", "params[region]"),
    ("InstanceNorm", [X4, spec((5,)), spec((6,))], {}, None, "gamma-shape", "inputTensors[1].dimensions"),
    ("InstanceNorm", [X4, spec((6,)), spec((6, 1))], {}, None, "beta-shape", "inputTensors[2].dimensions"),
    ("LayerNorm", [spec(()), spec((1,))], {"axes": [0]}, None, "input-rank", "inputTensors[0].rank"),
    ("LayerNorm", [spec((2, 3), BF16), spec((3,))], {"axes": [1]}, None, "dtype", "inputTensors[0].dataType"),
    ("LayerNorm", [X4, spec((6,))], {"axes": [4]}, None, "axes", "params[axes]"),
    ("LayerNorm", [X4, spec((6,))], {"axes": []}, None, "axes", "params[axes]"),
    ("LayerNorm", [X4, spec((5,))], {"axes": [3]}, None, "gamma-shape", "inputTensors[1].dimensions"),
    ("LayerNorm", [X4, spec((5, 6)), spec((2, 6))], {"axes": [2, 3]}, None, "beta-shape", "inputTensors[2].dimensions"),
    ("RmsNorm", [spec(()), spec((1,))], {"axes": [0]}, None, "input-rank", "inputTensors[0].rank"),
    ("RmsNorm", [spec((2, 3), BF16), spec((3,))], {"axes": [1]}, None, "dtype", "inputTensors[0].dataType"),
    ("RmsNorm", [X4, spec((6,))], {"axes": [0, 9]}, None, "axes", "params[axes]"),
    ("RmsNorm", [X4, spec((6, 6))], {"axes": [3]}, None, "gamma-shape", "inputTensors[1].dimensions"),
    ("RmsNorm", [X4, spec((6,)), spec((7,))], {"axes": [3]}, None, "beta-shape", "inputTensors[2].dimensions"),
    ("GroupNorm", [spec((6,))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("GroupNorm", [spec((2, 6), BF16)], {}, None, "dtype", "inputTensors[0].dataType"),
    ("GroupNorm", [X4], {"group": 4}, None, "group", "params[group]"),
    ("GroupNorm", [X4], {"group": 0}, None, "group", "params[group]"),
    ("GroupNorm", [X4, spec((3,))], {"group": 2}, None, "gamma-shape", "inputTensors[1].dimensions"),
    ("GroupNorm", [X4, spec((6,)), spec((2,))], {"group": 2}, None, "beta-shape", "inputTensors[2].dimensions"),
    ("L2Norm", [spec(())], {}, None, "input-rank", "inputTensors[0].rank"),
    ("L2Norm", [spec((2, 3), BF16)], {}, None, "dtype", "inputTensors[0].dataType"),
    ("L2Norm", [X4], {"axis": 4}, None, "axis", "params[axis]"),
    ("L2Norm", [X4], {"axes": [1, 5]}, None, "axes", "params[axes]"),
    ("Lrn", [spec(())], {"radius": 1}, None, "input-rank", "inputTensors[0].rank"),
    ("Lrn", [spec((2, 5, 6))], {"radius": 1, "region": 1}, None, "input-rank", "inputTensors[0].rank"),
    ("Lrn", [spec((2, 3), BF16)], {"radius": 1}, None, "dtype", "inputTensors[0].dataType"),
    ("Lrn", [X4], {"radius": 1, "region": 2}, None, "region", "params[region]"),
    ("Lrn", [X4], {"radius": np.int32(-1)}, None, "radius", "params[radius]"),
    ("Argmax", [spec(())], {"axis": 0}, None, "input-rank", "inputTensors[0].rank"),
    ("Argmax", [spec((2, 3), BF16)], {"axis": 0}, None, "dtype", "inputTensors[0].dataType"),
    ("Argmax", [X4], {"axis": 4}, None, "axis", "params[axis]"),
    ("Argmin", [spec(())], {"axis": 0}, None, "input-rank", "inputTensors[0].rank"),
    ("Argmin", [spec((2, 3), BF16)], {"axis": 0}, None, "dtype", "inputTensors[0].dataType"),
    ("Argmin", [X4], {"axis": 7}, None, "axis", "params[axis]"),
    ("TopK", [spec(())], {"k": 1}, None, "input-rank", "inputTensors[0].rank"),
    ("TopK", [spec((2, 3), BF16)], {"k": 1}, None, "dtype", "inputTensors[0].dataType"),
    ("TopK", [X4], {"k": 7}, None, "k", "params[k]"),
    ("TopK", [X4], {"k": 0}, None, "k", "params[k]"),
    ("CumulativeSum", [spec(())], {"axis": 0}, None, "input-rank", "inputTensors[0].rank"),
    ("CumulativeSum", [spec((2, 3), BF16)], {"axis": 0}, None, "dtype", "inputTensors[0].dataType"),
    ("CumulativeSum", [X4], {"axis": 4}, None, "axis", "params[axis]"),
]
for _op in sorted(REDUCE_REF):
    NEGATIVE += [
        (_op, [spec(())], {"axes": [0]}, None, "input-rank", "inputTensors[0].rank"),
        (_op, [spec((2, 3), BF16)], {"axes": [0]}, None, "dtype", "inputTensors[0].dataType"),
        (_op, [X4], {"axes": [1, 4]}, None, "axes", "params[axes]"),
        (_op, [X4], {"axes": []}, None, "axes", "params[axes]"),
    ]


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    if rule == "dtype":
        assert isinstance(err, OpUnsupportedError), "unsupported data types are 'unsupported'"


def test_missing_mandatory_inputs_and_params():
    """gamma of LayerNorm/RmsNorm, gamma/beta of InstanceNorm, Lrn's radius, Reduce's axes,
    TopK's k, Arg*'s and CumulativeSum's axis are mandatory (base-class rules)."""
    cases = [("LayerNorm", [X4], {"axes": [3]}, "QNNEMU-op-input-count"),
             ("RmsNorm", [X4], {"axes": [3]}, "QNNEMU-op-input-count"),
             ("InstanceNorm", [X4, spec((6,))], {}, "QNNEMU-op-input-count"),
             ("Batchnorm", [X4], {}, "QNNEMU-op-input-count"),
             ("Lrn", [X4], {}, "QNNEMU-op-param-missing"),
             ("ReduceSum", [X4], {}, "QNNEMU-op-param-missing"),
             ("TopK", [X4], {}, "QNNEMU-op-param-missing"),
             ("Argmax", [X4], {}, "QNNEMU-op-param-missing"),
             ("CumulativeSum", [X4], {}, "QNNEMU-op-param-missing")]
    for op_type, specs, params, rule in cases:
        with pytest.raises(OpCheckError) as info:
            check(op_type, specs, params)
        assert info.value.rule == rule, f"{op_type}: {rule} ({info.value})"


def test_every_rule_id_is_tested():
    """Each rule suffix raised in norm.py / reduce.py appears in the NEGATIVE table, and every
    op there has rows."""
    from qnnemu.ops import norm, reduce
    text = inspect.getsource(norm) + inspect.getsource(reduce)
    rules = set(re.findall(r"QNNEMU-\{(?:op|cls\.op_type)\}-([a-z-]+)", text))
    rules |= {"weight-shape", "bias-shape", "gamma-shape", "beta-shape"}  # f"{what}-shape"
    rules |= {"dtype", "quant-missing"}  # base.check_real
    tested = {r for (_, r) in {(n[0], n[4]) for n in NEGATIVE}}
    assert rules <= tested, f"untested rule suffixes: {rules - tested}"
    mine = {"Batchnorm", "InstanceNorm", "LayerNorm", "RmsNorm", "GroupNorm", "L2Norm", "Lrn",
            "Argmax", "Argmin", "TopK", "CumulativeSum", *REDUCE_REF}
    for op_type in mine:
        assert ops.get(op_type) is not None, f"{op_type} is registered"
        rows = {r for (o, r) in ((n[0], n[4]) for n in NEGATIVE) if o == op_type}
        assert {"input-rank", "dtype"} <= rows, f"{op_type} has input-rank and dtype rows"
