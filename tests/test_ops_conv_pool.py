"""Convolution, pooling and matrix-product ops beyond tests/test_ops.py: Conv1d, Conv3d,
DepthWiseConv1d, TransposeConv1d/2d/3d, PoolMax3d, PoolAvg3d, plus what the fast paths add to
Conv2d, DepthWiseConv2d, PoolMax2d/PoolAvg2d, FullyConnected and MatMul (static weights packed
once, fixed-point and mixed input types, im2col chunking, the numpy fallbacks of the C parts).

Numerics are checked against ``onnx.reference.ReferenceEvaluator`` (NCHW <-> NHWC transposed)
in both kernel modes; where onnx.reference is wrong (grouped ConvTranspose fails, ceil_mode
pooling windows differ) against ONNX Runtime's CPU EP instead, and transposed convolutions
also against a float64 loop over the definition.  Negative tests: one per rule
id of every op here, and a check that the table covers each op's rules.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import assert_close, expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpCheckError, OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import QuantSpec, _fast, conv as conv_mod

RNG = np.random.default_rng(2024)
F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
U8, S8 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8
S32, I32 = Q.QNN_DATATYPE_SFIXED_POINT_32, Q.QNN_DATATYPE_INT_32
# BFLOAT_16: no op takes it (a plain integer / BOOL_8 is fixed point with scale 1 to the ops
# that have no kernel for it, ops/base.py AS_FIXED)
BF16 = Q.QNN_DATATYPE_BFLOAT_16
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET


@pytest.fixture(params=["reference", "fast"])
def kernels(request):
    old = ops.config.kernels
    ops.config.kernels = request.param
    yield request.param
    ops.config.kernels = old


# ---- helpers ---------------------------------------------------------------------------------
def make_op(op_type, arrays, params=None, static=(), specs=None):
    """check + instantiate as graphFinalize does; inputs at ``static`` carry their data."""
    cls = ops.get(op_type)
    assert cls is not None, f"{op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    if specs is None:
        specs = [spec(a.shape, dtypes.from_numpy(a.dtype), data=a if i in static else None)
                 for i, a in enumerate(arrays)]
    outs = cls.check(specs, ps)
    return cls(cls.parse_params(ps), specs, outs), outs


def run_op(op_type, arrays, params=None, static=()):
    op, outs = make_op(op_type, arrays, params, static)
    (y,) = op.run(*arrays)
    assert tuple(y.shape) == tuple(outs[0].shape), \
        f"{op_type}: run() shape {y.shape} equals inferred {outs[0].shape}"
    assert y.dtype == arrays[0].dtype, f"{op_type}: output dtype {y.dtype} == input dtype"
    return y


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def onnx_run(op, inputs, **attrs):
    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    return y


def ort_run(op, inputs, **attrs):
    """ONNX Runtime's CPU EP on a one-node model (where onnx.reference is wrong: pooling with
    ceil_mode, grouped ConvTranspose)."""
    ort = pytest.importorskip("onnxruntime")
    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, dict(zip(names, inputs)))
    return y


def to_nchw(a):
    return np.ascontiguousarray(np.moveaxis(a, -1, 1))


def to_nhwc(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def onnx_pads(pad):
    return [p[0] for p in pad] + [p[1] for p in pad]


def qnn_params(S, stride, pad, dil=None, **extra):
    """Params as the QNN ops take them: scalars / [2] pad for the 1-D ops."""
    if S == 1:
        p = {"stride": stride[0], "pad_amount": list(pad[0])}
        if dil is not None:
            p["dilation"] = dil[0]
    else:
        p = {"stride": list(stride), "pad_amount": [list(q) for q in pad]}
        if dil is not None:
            p["dilation"] = list(dil)
    for k, v in extra.items():
        p[k] = (v[0] if S == 1 else list(v)) if isinstance(v, tuple) else v
    return p


# ---- convolutions vs ONNX ----------------------------------------------------------------------
CONV_CASES = [
    # (op, x shape NHWC-like, k, c_out, group, stride, pad, dilation, bias)
    ("Conv1d", (2, 9, 4), (3,), 5, 1, (2,), ((1, 2),), (1,), True),
    ("Conv1d", (1, 11, 6), (2,), 4, 2, (1,), ((0, 1),), (3,), False),
    ("Conv2d", (1, 7, 6, 3), (3, 3), 4, 1, (1, 2), ((1, 1), (2, 0)), (1, 1), True),
    ("Conv2d", (2, 8, 7, 6), (3, 2), 9, 3, (2, 1), ((1, 0), (1, 1)), (2, 1), True),
    ("Conv2d", (1, 5, 5, 8), (1, 1), 6, 2, (2, 2), ((0, 0), (0, 0)), (1, 1), False),
    ("Conv2d", (1, 6, 6, 5), (1, 1), 7, 1, (2, 1), ((0, 0), (0, 0)), (1, 1), True),
    ("Conv2d", (1, 4, 4, 2), (1, 1), 3, 1, (1, 1), ((1, 0), (0, 1)), (1, 1), True),  # padded 1x1
    ("Conv3d", (1, 4, 5, 6, 4), (2, 3, 2), 4, 2, (1, 2, 1), ((1, 0), (1, 0), (1, 1)),
     (1, 1, 2), True),
    ("Conv3d", (2, 3, 4, 4, 3), (3, 3, 3), 2, 1, (1, 1, 1), ((1, 1), (1, 1), (1, 1)),
     (1, 1, 1), False),
    ("DepthWiseConv1d", (2, 10, 3), (3,), 6, 3, (2,), ((1, 1),), (1,), True),
    ("DepthWiseConv2d", (1, 7, 8, 4), (3, 3), 4, 4, (1, 2), ((1, 1), (1, 1)), (2, 1), True),
    ("DepthWiseConv2d", (2, 6, 5, 3), (2, 3), 6, 3, (2, 1), ((0, 1), (2, 1)), (1, 1), False),
    ("DepthWiseConv2d", (1, 5, 5, 40), (3, 3), 40, 40, (1, 1), ((1, 1), (1, 1)), (1, 1), True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONV_CASES)])
def test_conv_vs_onnx(kernels, case):
    op_type, xs, k, c_out, group, stride, pad, dil, with_bias = case
    S = len(k)
    c_in = xs[-1]
    depthwise = op_type.startswith("DepthWise")
    x = rand(*xs)
    w_onnx = rand(c_out, c_in // group, *k)                 # [c_out, cig, *k]
    b = rand(c_out) if with_bias else None
    w = np.ascontiguousarray(np.moveaxis(w_onnx, (0, 1), (-1, -2)))  # [*k, cig, c_out]
    params = qnn_params(S, stride, pad, dil)
    if not depthwise:
        params["group"] = group
    y = run_op(op_type, [x, w] + ([b] if with_bias else []), params)
    ref = onnx_run("Conv", [to_nchw(x), w_onnx] + ([b] if with_bias else []), group=group,
                   strides=list(stride), pads=onnx_pads(pad), dilations=list(dil),
                   kernel_shape=list(k))
    assert_close(y, to_nhwc(ref), f"{op_type}[{kernels}] x{xs} k{k} g{group} s{stride} "
                                  f"p{pad} d{dil} vs ONNX Conv")


def ref_transpose_conv(x, w, b, stride, pad, dil, group, out_pad):
    """float64 loops over the definition: every input pixel scatters filter * value."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    S = x.ndim - 2
    sp, c_in, k, cog = x.shape[1:-1], x.shape[-1], w.shape[:S], w.shape[-1]
    cig = c_in // group
    full = [(s - 1) * st + (kk - 1) * d + 1 for s, st, kk, d in zip(sp, stride, k, dil)]
    out = [f - p0 - p1 + o for f, (p0, p1), o in zip(full, pad, out_pad)]
    size = [max(f, p0 + o) for f, (p0, _), o in zip(full, pad, out)]
    yf = np.zeros((x.shape[0], *size, group * cog))
    for idx in np.ndindex(*sp):
        for t in np.ndindex(*k):
            pos = tuple(i * st + ti * d for i, st, ti, d in zip(idx, stride, t, dil))
            for g in range(group):
                contrib = x[(slice(None),) + idx + (slice(g * cig, (g + 1) * cig),)] @ \
                    w[t + (slice(g * cig, (g + 1) * cig),)]
                yf[(slice(None),) + pos + (slice(g * cog, (g + 1) * cog),)] += contrib
    y = yf[(slice(None),) + tuple(slice(p0, p0 + o) for (p0, _), o in zip(pad, out))]
    return y + (0.0 if b is None else b)


TCONV_CASES = [
    # (op, x shape, k, cog, group, stride, pad, dilation (3-D only), output_padding, bias)
    ("TransposeConv1d", (2, 5, 3), (3,), 4, 1, (2,), ((1, 0),), None, (1,), True),
    ("TransposeConv1d", (1, 6, 4), (4,), 3, 2, (3,), ((2, 2),), None, (0,), True),
    ("TransposeConv2d", (1, 4, 5, 3), (3, 3), 2, 1, (2, 2), ((1, 1), (1, 1)), None, (1, 0), True),
    ("TransposeConv2d", (2, 3, 4, 2), (4, 4), 3, 1, (2, 1), ((1, 2), (0, 3)), None, (1, 0),
     False),
    ("TransposeConv2d", (1, 4, 4, 6), (2, 3), 2, 3, (2, 3), ((0, 1), (1, 0)), None, (1, 2), True),
    ("TransposeConv2d", (1, 3, 3, 2), (1, 1), 4, 1, (1, 1), ((0, 0), (0, 0)), None, (0, 0), True),
    ("TransposeConv3d", (1, 3, 4, 3, 2), (2, 3, 2), 3, 1, (2, 1, 2), ((1, 0), (0, 1), (1, 1)),
     (1, 2, 1), (1, 0, 1), True),
    ("TransposeConv3d", (1, 2, 3, 3, 4), (2, 2, 3), 2, 2, (1, 2, 2), ((0, 0), (1, 1), (0, 2)),
     (2, 1, 1), (0, 1, 1), False),
]


@pytest.mark.parametrize("case", TCONV_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(TCONV_CASES)])
def test_transpose_conv(kernels, case):
    op_type, xs, k, cog, group, stride, pad, dil, out_pad, with_bias = case
    S = len(k)
    c_in = xs[-1]
    x = rand(*xs)
    w_onnx = rand(c_in, cog, *k)                                   # [c_in, cog, *k]
    w = np.ascontiguousarray(np.moveaxis(w_onnx, (0, 1), (-2, -1)))  # [*k, c_in, cog]
    b = rand(cog * group) if with_bias else None
    params = qnn_params(S, stride, pad, dil, group=group, output_padding=tuple(out_pad))
    y = run_op(op_type, [x, w] + ([b] if with_bias else []), params)
    d = dil or (1,) * S
    ref = ref_transpose_conv(x, w, b, stride, pad, d, group, out_pad)
    assert_close(y, ref, f"{op_type}[{kernels}] x{xs} k{k} g{group} s{stride} p{pad} "
                         f"op{out_pad} vs float64 loops")
    # onnx.reference's grouped ConvTranspose fails: grouped cases go to ONNX Runtime.
    evaluate = onnx_run if group == 1 else ort_run
    onnx_y = evaluate("ConvTranspose", [to_nchw(x), w_onnx] + ([b] if with_bias else []),
                      strides=list(stride), pads=onnx_pads(pad), dilations=list(d),
                      output_padding=list(out_pad), kernel_shape=list(k), group=group)
    assert_close(y, to_nhwc(onnx_y), f"{op_type}[{kernels}] vs ONNX ConvTranspose "
                                     f"({'onnx.reference' if group == 1 else 'ORT CPU'})")


def test_transpose_conv_output_size_formula():
    out = make_op("TransposeConv2d", [rand(1, 5, 7, 2), rand(3, 4, 2, 3)],
                  {"stride": [2, 3], "pad_amount": [[1, 2], [0, 1]], "output_padding": [1, 2]})[1]
    # h: 2*(5-1) + 3 - 1 - 2 + 1 = 9; w: 3*(7-1) + 4 - 0 - 1 + 2 = 23
    assert out[0].shape == (1, 9, 23, 3), f"TransposeConv2d output shape: {out[0].shape}"


# ---- pooling vs ONNX ---------------------------------------------------------------------------
POOL_CASES = [
    # (x shape, filter, stride, pad, ceil)
    ((1, 7, 7, 3), (3, 3), (2, 2), ((1, 1), (1, 1)), False),
    ((2, 8, 7, 2), (2, 3), (2, 2), ((0, 1), (1, 0)), True),
    ((1, 6, 6, 33), (3, 3), (3, 3), ((1, 0), (2, 1)), True),
    ((1, 5, 6, 7, 2), (2, 3, 2), (2, 2, 3), ((1, 0), (1, 1), (0, 1)), False),
    ((1, 5, 5, 6, 3), (3, 2, 3), (2, 2, 2), ((1, 1), (0, 1), (1, 0)), True),
]


@pytest.mark.parametrize("kind,count_pad", [("max", False), ("avg", False), ("avg", True)])
@pytest.mark.parametrize("xs,k,s,pad,ceil", POOL_CASES)
def test_pool_vs_onnx(kernels, kind, count_pad, xs, k, s, pad, ceil):
    S = len(k)
    # Positive values: the HTP's zero padding and ONNX's -inf padding agree for max.
    x = (np.abs(rand(*xs)) + 0.1).astype(np.float32) if kind == "max" else rand(*xs)
    op_type = f"Pool{'Max' if kind == 'max' else 'Avg'}{S}d"
    params = {"filter_size": list(k), "stride": list(s), "pad_amount": [list(p) for p in pad],
              "rounding_mode": int(ceil)}
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=onnx_pads(pad), ceil_mode=int(ceil))
    if kind == "avg":
        params["count_pad_for_edges"] = count_pad
        attrs["count_include_pad"] = int(count_pad)
    y = run_op(op_type, [x], params)
    # onnx.reference computes ceil_mode windows differently from ONNX Runtime (the QNN EP's
    # host, whose CPU EP this emulator must agree with): those cases go to ORT.
    evaluate = ort_run if ceil else onnx_run
    ref = to_nhwc(evaluate("MaxPool" if kind == "max" else "AveragePool", [to_nchw(x)], **attrs))
    assert_close(y, ref, f"{op_type}[{kernels}] x{xs} k{k} s{s} p{pad} ceil={ceil} "
                         f"count_pad={count_pad} vs {'ORT CPU' if ceil else 'onnx.reference'}")


def test_pool_max3d_padding_counts_as_zero(kernels):
    x = np.full((1, 2, 2, 2, 1), -2.0, np.float32)
    y = run_op("PoolMax3d", [x], {"filter_size": [2, 2, 2], "stride": [1, 1, 1],
                                  "pad_amount": [[1, 1], [1, 1], [1, 1]]})
    want = np.zeros((1, 3, 3, 3, 1), np.float32)
    want[0, 1, 1, 1, 0] = -2.0
    assert (y == want).all(), f"PoolMax3d[{kernels}]: windows touching the zero pad give 0, " \
                              f"the centre one -2: {y.ravel()}"


def test_pool_global_average(kernels):
    x = rand(2, 7, 7, 16)
    y = run_op("PoolAvg2d", [x], {"filter_size": [7, 7], "stride": [1, 1]})
    assert_close(y, x.astype(np.float64).mean(axis=(1, 2), keepdims=True),
                 f"PoolAvg2d[{kernels}] global 7x7 == mean")
    # 4096 values around 100: a float32 running sum would be off by ~1e-5 relative.
    x = (100.0 + rand(1, 64, 64, 8)).astype(np.float32)
    for op_type, k, xx in (("PoolAvg2d", [64, 64], x),
                           ("PoolAvg3d", [4, 64, 64], np.repeat(x[:, None], 4, axis=1))):
        y = run_op(op_type, [xx], {"filter_size": k, "stride": [1] * len(k)})
        want = xx.astype(np.float64).mean(axis=tuple(range(1, xx.ndim - 1)), keepdims=True)
        err = float(np.max(np.abs(y - want) / np.abs(want)))
        assert err <= 1e-7, f"{op_type}[{kernels}] global mean of 4096+ values sums in float64 " \
                            f"(relative error {err:.2g})"


# ---- fast-path specifics ------------------------------------------------------------------------
@pytest.fixture
def no_c(monkeypatch):
    """The numpy fallbacks of the C parts (im2col, col2im, depthwise, pooling)."""
    monkeypatch.setattr(ops.config, "kernels", "fast")
    monkeypatch.setattr(_fast, "enabled", lambda: False)


@pytest.mark.parametrize("case", [c for c in CONV_CASES if len(c[2]) == 2] + CONV_CASES[:2],
                         ids=lambda c: c[0])
def test_conv_numpy_fallback_matches_reference(no_c, case):
    op_type, xs, k, c_out, group, stride, pad, dil, with_bias = case
    S = len(k)
    x, w = rand(*xs), rand(*k, xs[-1] // group, c_out)
    b = rand(c_out) if with_bias else None
    params = qnn_params(S, stride, pad, dil)
    if not op_type.startswith("DepthWise"):
        params["group"] = group
    got = run_op(op_type, [x, w] + ([b] if with_bias else []), params)
    g = ops.get(op_type).geometry(x.shape, w.shape, ops.get(op_type).parse_params(
        {k_: to_param(k_, v) for k_, v in params.items()}))
    ref = conv_mod.conv_reference(x.astype(np.float64), w.astype(np.float64), b, g)
    assert_close(got, ref, f"{op_type} fast path without C kernels vs reference")


@pytest.mark.parametrize("case", TCONV_CASES[:6], ids=lambda c: c[0])
def test_transpose_conv_numpy_col2im(no_c, case):
    op_type, xs, k, cog, group, stride, pad, dil, out_pad, with_bias = case
    x, w = rand(*xs), rand(*k, xs[-1], cog)
    b = rand(cog * group) if with_bias else None
    params = qnn_params(len(k), stride, pad, dil, group=group, output_padding=tuple(out_pad))
    y = run_op(op_type, [x, w] + ([b] if with_bias else []), params)
    ref = ref_transpose_conv(x, w, b, stride, pad, dil or (1,) * len(k), group, out_pad)
    assert_close(y, ref, f"{op_type} numpy col2im vs float64 loops")


@pytest.mark.parametrize("op_type", ["PoolMax2d", "PoolAvg2d"])
def test_pool2d_numpy_separable(no_c, op_type):
    x = rand(2, 9, 8, 5)
    params = {"filter_size": [3, 2], "stride": [2, 3], "pad_amount": [[1, 2], [1, 0]],
              "rounding_mode": 1}
    y = run_op(op_type, [x], params)
    ops.config.kernels = "reference"
    ref = run_op(op_type, [x], params)
    assert_close(y, ref, f"{op_type} separable numpy vs sliding-window reference")


def test_conv2d_im2col_in_chunks(monkeypatch):
    monkeypatch.setattr(ops.config, "kernels", "fast")
    monkeypatch.setattr(conv_mod, "IM2COL_CHUNK", 100)  # K = 27 -> 3 rows per chunk
    x, w, b = rand(1, 9, 7, 3), rand(3, 3, 3, 5), rand(5)
    y = run_op("Conv2d", [x, w, b], {"pad_amount": [[1, 1], [1, 1]], "stride": [1, 2]})
    ref = onnx_run("Conv", [to_nchw(x), np.ascontiguousarray(np.moveaxis(w, (2, 3), (1, 0))),
                            b], pads=[1, 1, 1, 1], strides=[1, 2])
    assert_close(y, to_nhwc(ref), "Conv2d with im2col in 3-row chunks vs ONNX")


@pytest.mark.parametrize("op_type,xs,ws,params", [
    ("Conv2d", (1, 6, 6, 4), (3, 3, 2, 6), {"group": 2, "pad_amount": [[1, 1], [1, 1]]}),
    ("DepthWiseConv2d", (1, 6, 6, 4), (3, 3, 1, 8), {}),
    ("TransposeConv2d", (1, 3, 3, 4), (2, 2, 4, 3), {"stride": [2, 2]}),
    ("Conv3d", (1, 3, 4, 4, 2), (2, 2, 2, 2, 3), {}),
])
def test_static_filter_packed_once(kernels, op_type, xs, ws, params):
    x, w = rand(*xs), rand(*ws)
    op, _ = make_op(op_type, [x, w], params, static=(1,))
    if kernels == "fast":
        assert op._wsrc is w, f"{op_type}: a static float filter is packed at creation"
    (y1,) = op.run(x, w)
    pack = op._wpack
    (y2,) = op.run(x, w)
    assert op._wpack is pack, f"{op_type}: the packed filter is reused, not rebuilt"
    assert np.array_equal(y1, y2), f"{op_type}[{kernels}]: the same inputs give the same output"
    w2 = (w * 2).astype(np.float32)  # e.g. a plan handing a new (dequantized) array
    (y3,) = op.run(x, w2)
    assert_close(y3, 2 * y1.astype(np.float64), f"{op_type}[{kernels}]: a new filter array is "
                                               f"packed again (output doubles)")


def test_dynamic_filter_not_cached():
    old = ops.config.kernels
    ops.config.kernels = "fast"
    try:
        x, w = rand(1, 5, 5, 3), rand(3, 3, 3, 4)
        op, _ = make_op("Conv2d", [x, w], {})
        (y1,) = op.run(x, w)
        w *= -1.0  # same array object, new contents: a dynamic filter must be re-read
        (y2,) = op.run(x, w)
        assert op._wsrc is None, "a dynamic (non-static) filter is never cached"
        assert_close(y2, -y1.astype(np.float64), "dynamic filter re-read on every run")
    finally:
        ops.config.kernels = old


def _q(scale, offset=0):
    return QuantSpec(ENC, scale, offset)


def test_fixed_point_mixed_inputs(kernels):
    """uint8 activations, int8 static weights and int32 bias (real-domain contract: the
    plan hands _run dequantized float32 arrays)."""
    xq = RNG.integers(0, 256, (1, 5, 5, 3)).astype(np.uint8)
    wq = RNG.integers(-128, 128, (3, 3, 3, 4)).astype(np.int8)
    bq = RNG.integers(-1000, 1000, (4,)).astype(np.int32)
    sx, sw = 0.02, 0.005
    specs = [spec(xq.shape, U8, _q(sx, -128)), spec(wq.shape, S8, _q(sw), data=wq),
             spec(bq.shape, S32, _q(sx * sw), data=bq)]
    op, outs = make_op("Conv2d", [], {"pad_amount": [[1, 1], [1, 1]]}, specs=specs)
    assert outs[0].shape == (1, 5, 5, 4) and outs[0].dtype == U8, \
        f"uint8 x int8 -> output spec follows in[0]: {outs[0]}"
    x = (sx * (xq.astype(np.float32) - 128)).astype(np.float32)
    w = (sw * wq.astype(np.float32)).astype(np.float32)
    b = (sx * sw * bq).astype(np.float32)
    (y,) = op.run(x, w, b)
    ref = onnx_run("Conv", [to_nchw(x), np.ascontiguousarray(np.moveaxis(w, (2, 3), (1, 0))), b],
                   pads=[1, 1, 1, 1])
    assert_close(y, to_nhwc(ref), f"Conv2d[{kernels}] on dequantized uint8/int8/int32 inputs")
    for op_type, ss in (("FullyConnected", [spec((2, 6), U8, _q(0.1)), spec((3, 6), S8, _q(0.2)),
                                            spec((3,), S32, _q(0.02))]),
                        ("MatMul", [spec((2, 6), U8, _q(0.1)), spec((6, 3), S8, _q(0.2))]),
                        ("TransposeConv2d", [spec((1, 3, 3, 2), U8, _q(0.1)),
                                             spec((2, 2, 2, 3), S8, _q(0.2))]),
                        ("PoolAvg3d", [spec((1, 2, 2, 2, 1), U8, _q(0.1))])):
        params = {"filter_size": [2, 2, 2], "stride": [1, 1, 1]} if op_type == "PoolAvg3d" else {}
        make_op(op_type, [], params, specs=ss)  # accepted: no exception


def test_float_plus_fixed_point_weight_accepted():
    # float activations with a quantized weight (weight-only quantization) are real values.
    make_op("FullyConnected", [], {}, specs=[spec((2, 6)), spec((3, 6), S8, _q(0.1))])


@pytest.mark.parametrize("op_type,xs,ws,params", [
    ("Conv1d", (1, 7, 3), (3, 3, 2), {"pad_amount": [1, 1]}),
    ("Conv3d", (1, 3, 4, 4, 2), (2, 2, 2, 2, 3), {}),
    ("TransposeConv2d", (1, 3, 3, 2), (3, 3, 2, 2), {"stride": [2, 2]}),
    ("DepthWiseConv2d", (1, 5, 5, 3), (3, 3, 1, 3), {}),
])
def test_float16(kernels, op_type, xs, ws, params):
    x, w = rand(*xs, dtype=np.float16), rand(*ws, dtype=np.float16)
    y = run_op(op_type, [x, w], params)
    assert y.dtype == np.float16, f"{op_type}: float16 in, float16 out"
    old = ops.config.kernels
    ops.config.kernels = "reference"
    try:
        ref = run_op(op_type, [x.astype(np.float32), w.astype(np.float32)], params)
    finally:
        ops.config.kernels = old
    assert_close(y, ref, f"{op_type}[{kernels}] float16 (float32 compute, rounded once)",
                 rel=2e-3)


def test_pool3d_float16(kernels):
    x = rand(1, 4, 4, 4, 2, dtype=np.float16)
    for op_type in ("PoolMax3d", "PoolAvg3d"):
        y = run_op(op_type, [x], {"filter_size": [2, 2, 2], "stride": [2, 2, 2]})
        assert y.dtype == np.float16, f"{op_type}: float16 in, float16 out"
        xr = x.astype(np.float64).reshape(1, 2, 2, 2, 2, 2, 2, 2)
        ref = xr.max(axis=(2, 4, 6)) if "Max" in op_type else xr.mean(axis=(2, 4, 6))
        assert_close(y, ref, f"{op_type}[{kernels}] float16 2x2x2 blocks", rel=2e-3)


def test_1d_params_scalar_or_one_element_tensor():
    x, w = rand(1, 9, 2), rand(3, 2, 4)
    scalar = run_op("Conv1d", [x, w], {"stride": 2, "dilation": 2, "pad_amount": [1, 1]})
    tensor = run_op("Conv1d", [x, w], {"stride": [2], "dilation": [2], "pad_amount": [[1, 1]]})
    assert np.array_equal(scalar, tensor), "Conv1d stride/dilation as scalar or [1] tensor agree"
    t1 = run_op("TransposeConv1d", [x, w[:, :, :3].copy()], {"stride": 2, "output_padding": 1})
    t2 = run_op("TransposeConv1d", [x, w[:, :, :3].copy()], {"stride": [2], "output_padding": [1]})
    assert t1.shape == (1, 20, 3) and np.array_equal(t1, t2), \
        f"TransposeConv1d: 2*(9-1)+3+1 = 20 wide either way: {t1.shape}"


def test_reuse_sparse_params_accepted():
    cls2, cls3 = ops.get("Conv2d"), ops.get("Conv3d")
    assert "reuse_sparse_indices" in cls2.params and "reuse_sparse_indicies" in cls3.params, \
        "QnnOpDef.h spells the Conv3d parameter 'reuse_sparse_indicies'"
    x, w = rand(1, 2, 3, 3, 1), rand(1, 2, 2, 1, 2)
    y = run_op("Conv3d", [x, w], {"reuse_sparse_indicies": True})
    assert y.shape == (1, 2, 2, 2, 2), "reuse_sparse_indicies does not change the result shape"


# ---- FullyConnected / MatMul --------------------------------------------------------------------
def test_fully_connected_static_weights(kernels):
    x, w, b = rand(3, 4, 10), rand(6, 10), rand(6)
    op, _ = make_op("FullyConnected", [x, w, b], {"keep_dims": True}, static=(1, 2))
    if kernels == "fast":
        stored = getattr(op._static_w.value, "matrix", op._static_w.value)  # maybe a PackedB
        assert stored.flags.c_contiguous and stored.shape == (10, 6), \
            "static FullyConnected weights are stored transposed [k, m] once"
    (y,) = op.run(x, w, b)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b
    assert_close(y, ref, f"FullyConnected[{kernels}] keep_dims with static weights")


@pytest.mark.parametrize("as_,bs,t0,t1,static", [
    ((2, 5, 7), (7, 4), False, False, True),        # one GEMM over the folded batch
    ((2, 5, 7), (4, 7), False, True, True),         # static in1 stored transposed
    ((3, 1, 4, 5), (2, 5, 6), False, False, False),  # broadcast [3,1] x [2]
    ((2, 6, 3), (2, 4, 6), True, True, False),
    ((1, 3), (3, 1), False, False, True),
])
def test_matmul_fast_paths(kernels, as_, bs, t0, t1, static):
    a, b = rand(*as_), rand(*bs)
    y = run_op("MatMul", [a, b], {"transpose_in0": t0, "transpose_in1": t1},
               static=(1,) if static else ())
    a64 = np.swapaxes(a, -1, -2) if t0 else a
    b64 = np.swapaxes(b, -1, -2) if t1 else b
    assert_close(y, np.matmul(a64.astype(np.float64), b64.astype(np.float64)),
                 f"MatMul[{kernels}] {as_} x {bs} t0={t0} t1={t1} static={static}")


def test_matmul_float16_and_empty():
    y = run_op("MatMul", [rand(2, 3, dtype=np.float16), rand(3, 4, dtype=np.float16)])
    assert y.dtype == np.float16 and y.shape == (2, 4), "float16 MatMul returns float16"
    y = run_op("MatMul", [rand(0, 3), rand(3, 4)])
    assert y.shape == (0, 4), f"empty MatMul: {y.shape}"


# ---- negative tests: one per rule id ------------------------------------------------------------
def _conv_rows(op_type, S, kind):
    """Rows (op, specs, params, rule, path) for one convolution op."""
    x = spec((1,) + (6,) * S + (4,))
    f_ok = {"conv": (3,) * S + (4, 2), "depthwise": (3,) * S + (1, 4),
            "transpose": (3,) * S + (4, 2)}[kind]
    f = spec(f_ok)

    def p(name, value):
        if S == 1 and name in ("stride", "dilation", "output_padding"):
            return {name: value[0]}
        return {name: list(value) if not isinstance(value[0], list) else value}
    rows = [
        (op_type, [spec((6,) * S + (4,)), f], {}, "input-rank", "inputTensors[0].rank"),
        (op_type, [spec(x.shape, BF16), f], {}, "dtype", "inputTensors[0].dataType"),
        (op_type, [spec(x.shape, U8), f], {}, "quant-missing", "inputTensors[0].quantizeParams"),
        (op_type, [x, spec(f_ok, F16)], {}, "dtype-mismatch", "inputTensors[1].dataType"),
        (op_type, [x, f], p("stride", [0] * S), "stride", "params[stride]"),
        (op_type, [x, f, spec((5,))], {}, "bias-shape", "inputTensors[2].dimensions"),
        (op_type, [spec((1,) + (2,) * S + (4,)), f], {}, "output-size",
         "inputTensors[0].dimensions"),
    ]
    if kind == "transpose":
        rows[-1] = (op_type, [x, f], {"pad_amount": [6, 6] if S == 1 else [[6, 6]] * S},
                    "output-size", "inputTensors[0].dimensions")
    if "dilation" in ops.get(op_type).params:
        rows.append((op_type, [x, f], p("dilation", [0] * S), "dilation", "params[dilation]"))
    if kind == "depthwise":
        rows += [(op_type, [x, spec((3,) * S + (2, 4))], {}, "filter-channels",
                  "inputTensors[1].dimensions"),
                 (op_type, [x, spec((3,) * S + (1, 6))], {}, "multiplier",
                  "inputTensors[1].dimensions")]
    else:
        rows += [(op_type, [x, f], {"group": 3}, "group", "params[group]"),
                 (op_type, [x, spec((3,) * S + (3, 2))], {}, "filter-channels",
                  "inputTensors[1].dimensions")]
    if kind == "transpose":
        rows.append((op_type, [x, f], {**p("stride", [2] * S), **p("output_padding", [2] * S)},
                     "output-padding", "params[output_padding]"))
    return rows


def _pool_rows(op_type, S):
    x = spec((1,) + (5,) * S + (4,))
    base = {"filter_size": [2] * S, "stride": [2] * S}
    return [
        (op_type, [spec((5,) * S + (4,))], base, "input-rank", "inputTensors[0].rank"),
        (op_type, [spec(x.shape, BF16)], base, "dtype", "inputTensors[0].dataType"),
        (op_type, [spec(x.shape, U8)], base, "quant-missing", "inputTensors[0].quantizeParams"),
        (op_type, [x], {**base, "filter_size": [0] + [2] * (S - 1)}, "filter-size",
         "params[filter_size]"),
        (op_type, [x], {**base, "stride": [2] * (S - 1) + [0]}, "stride", "params[stride]"),
        (op_type, [x], {**base, "rounding_mode": 2}, "rounding-mode", "params[rounding_mode]"),
        (op_type, [x], {**base, "pad_amount": [[2, 0]] + [[0, 0]] * (S - 1)}, "pad-amount",
         "params[pad_amount]"),
        (op_type, [x], {**base, "filter_size": [6] + [2] * (S - 1)}, "output-size",
         "inputTensors[0].dimensions"),
    ]


CONV_OPS = {"Conv1d": (1, "conv"), "Conv2d": (2, "conv"), "Conv3d": (3, "conv"),
            "DepthWiseConv1d": (1, "depthwise"), "DepthWiseConv2d": (2, "depthwise"),
            "TransposeConv1d": (1, "transpose"), "TransposeConv2d": (2, "transpose"),
            "TransposeConv3d": (3, "transpose")}
POOL_OPS = {"PoolMax2d": 2, "PoolAvg2d": 2, "PoolMax3d": 3, "PoolAvg3d": 3}
NEGATIVE = [r for op, (S, kind) in CONV_OPS.items() for r in _conv_rows(op, S, kind)]
NEGATIVE += [r for op, S in POOL_OPS.items() for r in _pool_rows(op, S)]
NEGATIVE += [
    ("FullyConnected", [spec((6,)), spec((2, 6))], {}, "input-rank", "inputTensors[0].rank"),
    ("FullyConnected", [spec((1, 6), BF16), spec((2, 6))], {}, "dtype", "inputTensors[0].dataType"),
    ("FullyConnected", [spec((1, 6)), spec((2, 6), S8)], {}, "quant-missing",
     "inputTensors[1].quantizeParams"),
    ("FullyConnected", [spec((1, 6), F16), spec((2, 6))], {}, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("FullyConnected", [spec((1, 7)), spec((2, 6))], {}, "k-mismatch",
     "inputTensors[1].dimensions"),
    ("FullyConnected", [spec((1, 6)), spec((2, 6)), spec((3,))], {}, "bias-shape",
     "inputTensors[2].dimensions"),
    ("MatMul", [spec((3,)), spec((3, 2))], {}, "input-rank", "inputTensors[0].rank"),
    ("MatMul", [spec((2, 3)), spec((3, 2), BF16)], {}, "dtype", "inputTensors[1].dataType"),
    ("MatMul", [spec((2, 3), U8), spec((3, 2))], {}, "quant-missing",
     "inputTensors[0].quantizeParams"),
    ("MatMul", [spec((2, 3)), spec((3, 2), F16)], {}, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("MatMul", [spec((2, 3)), spec((2, 3))], {}, "inner-dim", "inputTensors[1].dimensions"),
    ("MatMul", [spec((2, 2, 3)), spec((3, 3, 2))], {}, "broadcast", "inputTensors[1].dimensions"),
]


@pytest.mark.parametrize("op_type,specs,params,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[3]}" for n in NEGATIVE])
def test_rule(op_type, specs, params, rule, path):
    err = expect_rule(op_type, specs, params, None, rule, path)
    if rule == "dtype":
        assert isinstance(err, OpUnsupportedError), "non-real inputs are 'unsupported'"


def expected_rules(op_type: str) -> set[str]:
    """The rule suffixes ``op_type`` can raise."""
    generic = {"input-rank", "dtype", "quant-missing"}
    if op_type in POOL_OPS:
        return generic | {"filter-size", "stride", "rounding-mode", "pad-amount", "output-size"}
    if op_type == "FullyConnected":
        return generic | {"dtype-mismatch", "k-mismatch", "bias-shape"}
    if op_type == "MatMul":
        return generic | {"dtype-mismatch", "inner-dim", "broadcast"}
    S, kind = CONV_OPS[op_type]
    rules = generic | {"dtype-mismatch", "stride", "bias-shape", "output-size",
                       "filter-channels"}
    rules |= {"multiplier"} if kind == "depthwise" else {"group"}
    if kind == "transpose":
        rules.add("output-padding")
    if "dilation" in ops.get(op_type).params:
        rules.add("dilation")
    return rules


def test_every_rule_is_tested():
    """Each op's rules have a row; every rule id in the sources of conv.py / pool.py /
    matmul.py belongs to some op's expected rules (a new rule needs a row here)."""
    import inspect
    import re

    from qnnemu.ops import matmul, pool
    rows = {}
    for n in NEGATIVE:
        rows.setdefault(n[0], set()).add(n[3])
    for module, op_types in ((conv_mod, CONV_OPS), (pool, POOL_OPS),
                             (matmul, ("FullyConnected", "MatMul"))):
        found = set(re.findall(r"QNNEMU-\{(?:op|cls\.op_type)\}-([a-z-]+)",
                               inspect.getsource(module)))
        known = set().union(*(expected_rules(o) for o in op_types))
        assert found and found <= known, \
            f"{module.__name__}: rule ids without an expected op: {sorted(found - known)}"
        for op_type in op_types:
            missing = expected_rules(op_type) - rows.get(op_type, set())
            assert not missing, f"{op_type}: rules without a negative test: {sorted(missing)}"


def test_rule_message_states_actual_value():
    with pytest.raises(OpCheckError) as info:
        ops.get("TransposeConv2d").check(
            [spec((1, 4, 4, 2)), spec((3, 3, 2, 2))],
            {"stride": to_param("stride", [2, 2]),
             "output_padding": to_param("output_padding", [0, 3])})
    assert "[0, 3]" in str(info.value), f"the message names the actual output_padding: {info.value}"


def test_geometry_helpers_agree_with_inference():
    for size, p0, p1, k, s, d in [(10, 1, 0, 3, 2, 2), (7, 0, 0, 7, 1, 1), (5, 2, 2, 1, 3, 1)]:
        want = math.floor((size + p0 + p1 - ((k - 1) * d + 1)) / s) + 1
        assert conv_mod.conv_output_size(size, p0, p1, k, s, d) == want, \
            f"conv_output_size{(size, p0, p1, k, s, d)} == {want}"
