"""Numerics and validation of the float ops (qnnemu/ops): Conv2d, DepthWiseConv2d,
FullyConnected, MatMul, ElementWise*, Softmax, PoolMax2d, PoolAvg2d, Reshape, Transpose,
Concat.

Every op runs through its QNN contract (``check`` -> ``run``) and is compared with an
independent float64 reference written here with explicit loops.  Both kernel variants
("reference" numpy and "fast": C kernels when built, BLAS or C GEMMs) are exercised by the
``kernels`` fixture.
Negative tests: one per rule id, asserting the rule id and the path in the error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from optest import assert_close, check, expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import TensorSpec, _fast

RNG = np.random.default_rng(1234)

KERNEL_MODES = ["reference"] + (["fast"] if _fast.available() else [])


@pytest.fixture(params=KERNEL_MODES)
def kernels(request):
    old = ops.config.kernels
    ops.config.kernels = request.param
    yield request.param
    ops.config.kernels = old


# ---- helpers --------------------------------------------------------------------------------
def run_op(op_type, arrays, params=None, declared=None):
    """check + run an op on numpy arrays, as the graph layer will; returns output 0."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    specs = [TensorSpec(a.shape, dtypes.from_numpy(a.dtype)) for a in arrays]
    dec = [spec(declared)] if declared is not None else None
    outs = cls.check(specs, ps, declared_outputs=dec) if dec else cls.check(specs, ps)
    op = cls(cls.parse_params(ps), specs, outs)
    (y,) = op.run(*arrays)
    assert tuple(y.shape) == tuple(outs[0].shape), \
        f"{op_type}: run() shape {y.shape} equals inferred shape {outs[0].shape}"
    assert y.dtype == arrays[0].dtype, f"{op_type}: output dtype {y.dtype} == input dtype"
    return y


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---- float64 references ---------------------------------------------------------------------
def ref_conv2d(x, w, b, stride=(1, 1), pad=((0, 0), (0, 0)), dil=(1, 1), group=1):
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, h, wd, c_in = x.shape
    fh, fw, cig, c_out = w.shape
    cog = c_out // group
    oh = (h + sum(pad[0]) - ((fh - 1) * dil[0] + 1)) // stride[0] + 1
    ow = (wd + sum(pad[1]) - ((fw - 1) * dil[1] + 1)) // stride[1] + 1
    y = np.zeros((n, oh, ow, c_out))
    for bi in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for o in range(c_out):
                    g = o // cog
                    acc = 0.0 if b is None else float(b[o])
                    for ky in range(fh):
                        iy = oy * stride[0] - pad[0][0] + ky * dil[0]
                        if not 0 <= iy < h:
                            continue
                        for kx in range(fw):
                            ix = ox * stride[1] - pad[1][0] + kx * dil[1]
                            if not 0 <= ix < wd:
                                continue
                            acc += float(np.dot(x[bi, iy, ix, g * cig:(g + 1) * cig],
                                                w[ky, kx, :, o]))
                    y[bi, oy, ox, o] = acc
    return y


def ref_depthwise(x, w, b, stride=(1, 1), pad=((0, 0), (0, 0)), dil=(1, 1)):
    # DepthWiseConv2d == grouped conv with one group per input channel.
    return ref_conv2d(x, w, b, stride, pad, dil, group=x.shape[3])


def ref_pool(x, k, s, pad, ceil, kind, count_pad=False):
    x = x.astype(np.float64)
    n, h, w, c = x.shape

    def out_size(size, p0, p1, kk, ss):
        o = (math.ceil if ceil else math.floor)((size + p0 + p1 - kk) / ss) + 1
        if ceil and (o - 1) * ss >= size + p0:
            o -= 1
        return o
    oh = out_size(h, *pad[0], k[0], s[0])
    ow = out_size(w, *pad[1], k[1], s[1])
    y = np.zeros((n, oh, ow, c))
    for oy in range(oh):
        for ox in range(ow):
            y0, x0 = oy * s[0] - pad[0][0], ox * s[1] - pad[1][0]
            ys = [r for r in range(y0, y0 + k[0]) if 0 <= r < h]
            xs = [q for q in range(x0, x0 + k[1]) if 0 <= q < w]
            win = x[:, ys][:, :, xs]
            if kind == "max":
                # Padded cells count as zeros (the HTP backend's behaviour).
                padded = len(ys) * len(xs) < k[0] * k[1]
                y[:, oy, ox] = win.max(axis=(1, 2))
                if padded:
                    y[:, oy, ox] = np.maximum(y[:, oy, ox], 0.0)
            else:
                if count_pad:  # cells inside the explicitly padded extent count
                    ny = len([r for r in range(y0, y0 + k[0]) if -pad[0][0] <= r < h + pad[0][1]])
                    nx = len([q for q in range(x0, x0 + k[1]) if -pad[1][0] <= q < w + pad[1][1]])
                    cnt = ny * nx
                else:
                    cnt = len(ys) * len(xs)
                y[:, oy, ox] = win.sum(axis=(1, 2)) / cnt
    return y


def ref_softmax(x, axis, beta):
    z = beta * x.astype(np.float64)
    z = np.moveaxis(z, axis, -1)
    out = np.empty_like(z)
    for idx in np.ndindex(z.shape[:-1]):
        row = z[idx]
        e = np.array([math.exp(v - row.max()) for v in row])
        out[idx] = e / e.sum()
    return np.moveaxis(out, -1, axis)


# ---- Conv2d / DepthWiseConv2d -----------------------------------------------------------------
CONV_CASES = [
    # (x shape, filter shape, params, with bias)
    ((1, 5, 5, 3), (3, 3, 3, 4), {}, True),
    ((2, 7, 6, 3), (3, 2, 3, 5), {"stride": [2, 1], "pad_amount": [[1, 2], [0, 1]]}, True),
    ((1, 9, 9, 2), (3, 3, 2, 3), {"dilation": [2, 3], "pad_amount": [[2, 2], [3, 3]]}, False),
    ((1, 6, 6, 4), (3, 3, 2, 6), {"group": 2, "stride": [2, 2], "pad_amount": [[1, 1], [1, 1]]},
     True),
    ((1, 5, 4, 6), (1, 1, 2, 9), {"group": 3}, True),
    ((1, 4, 4, 5), (1, 1, 5, 7), {}, True),                      # pointwise fast path
    ((1, 6, 5, 4), (3, 3, 1, 4), {"group": 4, "pad_amount": [[1, 1], [1, 1]]}, True),  # dw
    ((1, 3, 3, 2), (3, 3, 2, 2), {"pad_amount": [[4, 0], [0, 4]], "stride": [3, 3]}, False),
]


@pytest.mark.parametrize("xs,fs,params,with_bias", CONV_CASES)
def test_conv2d(kernels, xs, fs, params, with_bias):
    x, w = rand(*xs), rand(*fs)
    b = rand(fs[3]) if with_bias else None
    y = run_op("Conv2d", [x, w] + ([b] if with_bias else []), params)
    ref = ref_conv2d(x, w, b, tuple(params.get("stride", (1, 1))),
                     tuple(map(tuple, params.get("pad_amount", ((0, 0), (0, 0))))),
                     tuple(params.get("dilation", (1, 1))), params.get("group", 1))
    assert_close(y, ref, f"Conv2d[{kernels}] x{xs} f{fs} {params} vs float64 loops")


def test_conv2d_output_size_formula():
    out = check("Conv2d", [spec((1, 10, 11, 2)), spec((3, 4, 2, 5))],
                {"stride": [2, 3], "pad_amount": [[1, 0], [2, 1]], "dilation": [2, 1]})
    # h: floor((10 + 1 - 5) / 2) + 1 = 4; w: floor((11 + 3 - 4) / 3) + 1 = 4
    assert out[0].shape == (1, 4, 4, 5), f"Conv2d output shape by the QNN formula: {out[0].shape}"


@pytest.mark.parametrize("xs,mult,params", [
    ((1, 6, 7, 3), 1, {}),
    ((2, 5, 5, 3), 2, {"stride": [2, 2], "pad_amount": [[1, 1], [1, 1]]}),
    ((1, 8, 8, 4), 3, {"dilation": [2, 2], "pad_amount": [[2, 1], [1, 2]]}),
])
def test_depthwise_conv2d(kernels, xs, mult, params):
    c_in = xs[3]
    x, w, b = rand(*xs), rand(3, 3, 1, c_in * mult), rand(c_in * mult)
    y = run_op("DepthWiseConv2d", [x, w, b], params)
    ref = ref_depthwise(x, w, b, tuple(params.get("stride", (1, 1))),
                        tuple(map(tuple, params.get("pad_amount", ((0, 0), (0, 0))))),
                        tuple(params.get("dilation", (1, 1))))
    assert_close(y, ref, f"DepthWiseConv2d[{kernels}] x{xs} mult {mult} {params}")


def test_conv2d_float16(kernels):
    x, w, b = rand(1, 5, 5, 3, dtype=np.float16), rand(3, 3, 3, 4, dtype=np.float16), \
        rand(4, dtype=np.float16)
    y = run_op("Conv2d", [x, w, b], {"pad_amount": [[1, 1], [1, 1]]})
    assert y.dtype == np.float16, "float16 Conv2d returns float16"
    ref = ref_conv2d(x, w, b, pad=((1, 1), (1, 1)))
    assert_close(y, ref, "float16 Conv2d (float32 compute, rounded once)", rel=2e-3)


# ---- FullyConnected / MatMul --------------------------------------------------------------------
def ref_fc(x, w, b):
    x2 = x.astype(np.float64).reshape(-1, w.shape[1])
    y = np.array([[sum(float(x2[i, p]) * float(w[j, p]) for p in range(w.shape[1]))
                   for j in range(w.shape[0])] for i in range(x2.shape[0])])
    return y + (0.0 if b is None else b.astype(np.float64))


@pytest.mark.parametrize("xs,m,keep,with_bias", [
    ((4, 7), 5, False, True),
    ((2, 3, 6), 4, False, False),
    ((2, 3, 6), 4, True, True),
    ((1, 17), 1, False, True),
])
def test_fully_connected(kernels, xs, m, keep, with_bias):
    x, w = rand(*xs), rand(m, xs[-1])
    b = rand(m) if with_bias else None
    y = run_op("FullyConnected", [x, w] + ([b] if with_bias else []), {"keep_dims": keep})
    ref = ref_fc(x, w, b)
    if keep:
        ref = ref.reshape(xs[:-1] + (m,))
    assert_close(y, ref, f"FullyConnected[{kernels}] x{xs} m={m} keep_dims={keep}")


def test_fully_connected_flattens_whole_input():
    out = check("FullyConnected", [spec((2, 3, 4)), spec((5, 6))])
    assert out[0].shape == (4, 5), f"[2,3,4] with k=6 flattens to [4,6] -> [4,5]: {out[0].shape}"


def ref_matmul(a, b, ta, tb):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(batch):
        for i in range(a.shape[-2]):
            for j in range(b.shape[-1]):
                out[idx + (i, j)] = sum(float(a[idx + (i, p)]) * float(b[idx + (p, j)])
                                        for p in range(a.shape[-1]))
    return out


@pytest.mark.parametrize("as_,bs,ta,tb", [
    ((3, 4), (4, 5), False, False),
    ((4, 3), (4, 5), True, False),
    ((3, 4), (5, 4), False, True),
    ((2, 4, 3), (2, 5, 4), True, True),
    ((2, 1, 3, 4), (3, 4, 2), False, False),   # batch broadcast [2,1] x [3] -> [2,3]
    ((1, 7, 9), (9, 1), False, False),
])
def test_matmul(kernels, as_, bs, ta, tb):
    a, b = rand(*as_), rand(*bs)
    y = run_op("MatMul", [a, b], {"transpose_in0": ta, "transpose_in1": tb})
    assert_close(y, ref_matmul(a, b, ta, tb), f"MatMul[{kernels}] {as_}x{bs} t0={ta} t1={tb}")


# ---- ElementWise --------------------------------------------------------------------------------
ELEMENTWISE = {
    "ElementWiseAdd": lambda a, b: a + b,
    "ElementWiseSubtract": lambda a, b: a - b,
    "ElementWiseMultiply": lambda a, b: a * b,
    "ElementWiseDivide": lambda a, b: a / b,
    "ElementWiseMaximum": lambda a, b: a if a >= b else b,
    "ElementWiseMinimum": lambda a, b: a if a <= b else b,
}


@pytest.mark.parametrize("op_type", sorted(ELEMENTWISE))
@pytest.mark.parametrize("as_,bs", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                    ((2, 1, 4), (3, 1)), ((1,), (2, 2)), ((5,), ())])
def test_elementwise(op_type, as_, bs):
    a, b = rand(*as_), rand(*bs)  # standard normal: about half the values are negative
    if op_type == "ElementWiseDivide":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b).astype(np.float32)
    y = run_op(op_type, [a, b])
    shape = np.broadcast_shapes(as_, bs)
    ab, bb = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    ref = np.empty(shape)
    for idx in np.ndindex(shape):
        ref[idx] = ELEMENTWISE[op_type](float(ab[idx]), float(bb[idx]))
    # One IEEE float32 operation: correctly rounded, so within half an ulp.
    assert_close(y, ref, f"{op_type} {as_} op {bs} (broadcast {shape})", rel=1e-7)


def test_elementwise_float16_and_divide_by_zero():
    a = np.array([1.0, -2.0, 0.0, 3.0], np.float16)
    b = np.array([0.0, 0.0, 0.0, 1.5], np.float16)
    y = run_op("ElementWiseDivide", [a, b])
    assert y.dtype == np.float16, "float16 ElementWiseDivide returns float16"
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2]) and y[3] == 2.0, \
        f"IEEE division by zero gives inf/-inf/nan: {y}"


# ---- Softmax -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,beta", [
    ((2, 5), None, 1.0), ((3, 4, 5), 1, 1.0), ((3, 4, 5), 0, 0.5), ((2, 6), None, 3.0),
    ((4, 3), 1, -1.0), ((7,), None, 1.0),
])
def test_softmax(shape, axis, beta):
    x = (rand(*shape) * 10).astype(np.float32)
    params = {"beta": beta} if axis is None else {"axis": axis, "beta": beta}
    y = run_op("Softmax", [x], params)
    ref = ref_softmax(x, len(shape) - 1 if axis is None else axis, beta)
    assert_close(y, ref, f"Softmax {shape} axis={axis} beta={beta}")
    ax = len(shape) - 1 if axis is None else axis
    assert np.allclose(y.sum(axis=ax), 1.0, atol=1e-6), f"Softmax rows sum to 1 along {ax}"


def test_softmax_large_values_do_not_overflow():
    x = np.array([[1000.0, 1000.0, -1000.0]], np.float32)
    y = run_op("Softmax", [x])
    assert np.allclose(y, [[0.5, 0.5, 0.0]]), f"max-subtracted softmax is finite: {y}"


# ---- Pooling -------------------------------------------------------------------------------------
POOL_CASES = [
    # (x shape, filter, stride, pad, rounding_mode)
    ((1, 6, 6, 2), (2, 2), (2, 2), ((0, 0), (0, 0)), 0),
    ((2, 7, 7, 3), (3, 3), (2, 2), ((0, 0), (0, 0)), 0),
    ((2, 7, 7, 3), (3, 3), (2, 2), ((0, 0), (0, 0)), 1),   # CEIL adds a partial window
    ((1, 5, 6, 2), (3, 2), (2, 3), ((1, 1), (1, 0)), 0),
    ((1, 5, 6, 2), (3, 3), (2, 2), ((1, 2), (2, 1)), 1),
    ((1, 8, 8, 1), (2, 2), (3, 3), ((1, 1), (1, 1)), 1),   # CEIL window dropped (padding only)
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("xs,k,s,pad,mode", POOL_CASES)
def test_pool(kind, xs, k, s, pad, mode):
    # Max pool on mostly negative values: zero-valued padding would show up as a wrong max.
    x = (rand(*xs) - (3.0 if kind == "max" else 0.0)).astype(np.float32)
    op_type = "PoolMax2d" if kind == "max" else "PoolAvg2d"
    params = {"filter_size": list(k), "stride": list(s), "pad_amount": [list(p) for p in pad],
              "rounding_mode": mode}
    y = run_op(op_type, [x], params)
    ref = ref_pool(x, k, s, pad, mode == 1, kind)
    assert_close(y, ref, f"{op_type} x{xs} k{k} s{s} pad{pad} rounding_mode={mode}")


@pytest.mark.parametrize("mode", [0, 1])
def test_pool_avg_count_pad_for_edges(mode):
    x = rand(1, 5, 5, 2)
    params = {"filter_size": [3, 3], "stride": [2, 2], "pad_amount": [[1, 1], [1, 1]],
              "rounding_mode": mode, "count_pad_for_edges": True}
    y = run_op("PoolAvg2d", [x], params)
    ref = ref_pool(x, (3, 3), (2, 2), ((1, 1), (1, 1)), mode == 1, "avg", count_pad=True)
    assert_close(y, ref, f"PoolAvg2d count_pad_for_edges rounding_mode={mode}")


def test_pool_max_padding_counts_as_zero():
    # The HTP backend's PoolMax2d pads with zeros (checked against the vendor's backend in
    # tests/test_differential.py): windows touching padding never go below 0.
    x = -np.ones((1, 2, 2, 1), np.float32) - 1.0
    y = run_op("PoolMax2d", [x], {"filter_size": [2, 2], "stride": [1, 1],
                                  "pad_amount": [[1, 1], [1, 1]]})
    want = np.zeros((1, 3, 3, 1), np.float32)
    want[0, 1, 1, 0] = -2.0  # the centre window covers the input only
    assert (y == want).all(), f"windows touching the zero pad give 0, the centre one -2: {y.ravel()}"
    y = run_op("PoolMax2d", [x], {"filter_size": [2, 2], "stride": [1, 1]})
    assert (y == -2.0).all(), f"without padding the max of negatives stays negative: {y.ravel()}"


def test_pool_rounding_mode_constants():
    assert Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_FLOOR == 0 and \
        Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_CEIL == 1, "rounding mode constants FLOOR=0 CEIL=1"
    out_f = check("PoolMax2d", [spec((1, 7, 7, 1))], {"filter_size": [2, 2], "stride": [2, 2]})
    out_c = check("PoolMax2d", [spec((1, 7, 7, 1))], {"filter_size": [2, 2], "stride": [2, 2],
                                                     "rounding_mode": 1})
    assert out_f[0].shape == (1, 3, 3, 1) and out_c[0].shape == (1, 4, 4, 1), \
        f"FLOOR gives 3x3, CEIL 4x4 on 7x7/k2/s2: {out_f[0].shape}, {out_c[0].shape}"


# ---- Reshape / Transpose / Concat ---------------------------------------------------------------
def test_reshape():
    x = rand(2, 3, 4)
    y = run_op("Reshape", [x], declared=(4, 6))
    assert np.array_equal(y, x.reshape(4, 6)), "Reshape keeps row-major element order"


def test_every_infer_takes_declared_outputs():
    # core/graph.py calls cls.infer(specs, parsed, declared_outputs=...) on every op.
    for op_type in ("Relu", "Softmax", "ElementWiseAdd", "Transpose"):
        cls = ops.get(op_type)
        params = {"perm": np.array([1, 0], np.uint32)} if op_type == "Transpose" else {}
        parsed = cls.parse_params({k: to_param(k, v) for k, v in params.items()})
        specs = [spec((2, 3))] * len([n for n in cls.inputs if not n.endswith("?")])
        out = cls.infer(specs, parsed, declared_outputs=[spec((9, 9))])
        assert len(out) == 1, f"{op_type}.infer accepts declared_outputs= and ignores it"
    out = ops.get("Reshape").infer([spec((2, 3))], {}, declared_outputs=[spec((3, 2))])
    assert out[0].shape == (3, 2), "Reshape.infer takes its shape from declared_outputs"
    with pytest.raises(TypeError, match="declared_outputs"):
        class BadOp(ops.Op, register=False):
            @classmethod
            def infer(cls, inputs, params):
                return []


def test_reshape_check_without_declared_outputs_is_compatible():
    # The base signature without declared_outputs still works for ops that do not need it.
    out = ops.get("Relu").check([spec((2, 3))], {})
    assert out[0].shape == (2, 3), "check(inputs, params) unchanged for other ops"


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), [2, 0, 1]), ((2, 3), [1, 0]),
                                        ((1, 2, 3, 4), [0, 3, 1, 2]), ((5,), [0])])
def test_transpose(shape, perm):
    x = rand(*shape)
    y = run_op("Transpose", [x], {"perm": perm})
    for idx in np.ndindex(x.shape):
        assert y[tuple(idx[p] for p in perm)] == x[idx], f"Transpose perm={perm} at {idx}"


@pytest.mark.parametrize("shapes,axis", [([(2, 3), (2, 5)], 1), ([(1, 3), (2, 3), (4, 3)], 0),
                                         ([(2, 3, 1), (2, 3, 2)], 2), ([(3,)], 0)])
def test_concat(shapes, axis):
    arrays = [rand(*s) for s in shapes]
    y = run_op("Concat", arrays, {"axis": axis})
    off = 0
    for a in arrays:
        sl = [slice(None)] * a.ndim
        sl[axis] = slice(off, off + a.shape[axis])
        assert np.array_equal(y[tuple(sl)], a), f"Concat axis={axis}: block at offset {off}"
        off += a.shape[axis]


# ---- negative tests: one per rule id ------------------------------------------------------------
F32, F16, U8 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_UFIXED_POINT_8
I32 = Q.QNN_DATATYPE_INT_32
BF16 = Q.QNN_DATATYPE_BFLOAT_16   # no op takes it (plain integers: ops/base.py AS_FIXED)
X4 = spec((1, 5, 5, 4))
QM = "inputTensors[0].quantizeParams"

NEGATIVE = [
    # (op, input specs, params, declared outputs, rule, path)
    ("Conv2d", [spec((5, 5, 4)), spec((3, 3, 4, 2))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("Conv2d", [spec((1, 5, 5, 4), BF16), spec((3, 3, 4, 2))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Conv2d", [spec((1, 5, 5, 4), U8), spec((3, 3, 4, 2))], {}, None, "quant-missing", QM),
    ("Conv2d", [X4, spec((3, 3, 4, 2), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
    ("Conv2d", [X4, spec((3, 3, 4, 2))], {"stride": [0, 1]}, None, "stride", "params[stride]"),
    ("Conv2d", [X4, spec((3, 3, 4, 2))], {"dilation": [1, 0]}, None, "dilation", "params[dilation]"),
    ("Conv2d", [X4, spec((3, 3, 2, 3))], {"group": 2}, None, "group", "params[group]"),
    ("Conv2d", [X4, spec((3, 3, 3, 2))], {}, None, "filter-channels", "inputTensors[1].dimensions"),
    ("Conv2d", [X4, spec((3, 3, 4, 2)), spec((3,))], {}, None, "bias-shape", "inputTensors[2].dimensions"),
    ("Conv2d", [X4, spec((6, 3, 4, 2))], {}, None, "output-size", "inputTensors[0].dimensions"),
    ("DepthWiseConv2d", [spec((1, 5, 5)), spec((3, 3, 1, 4))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("DepthWiseConv2d", [spec((1, 5, 5, 4), BF16), spec((3, 3, 1, 4))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("DepthWiseConv2d", [spec((1, 5, 5, 4), U8), spec((3, 3, 1, 4))], {}, None, "quant-missing", QM),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 4), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 4))], {"stride": [1, 0]}, None, "stride", "params[stride]"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 4))], {"dilation": [0, 0]}, None, "dilation", "params[dilation]"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 4, 4))], {}, None, "filter-channels", "inputTensors[1].dimensions"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 6))], {}, None, "multiplier", "inputTensors[1].dimensions"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 8)), spec((4,))], {}, None, "bias-shape", "inputTensors[2].dimensions"),
    ("DepthWiseConv2d", [X4, spec((3, 3, 1, 4))], {"dilation": [3, 3]}, None, "output-size",
     "inputTensors[0].dimensions"),
    ("FullyConnected", [spec((6,)), spec((2, 6))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("FullyConnected", [spec((1, 6), BF16), spec((2, 6))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("FullyConnected", [spec((1, 6), U8), spec((2, 6))], {}, None, "quant-missing", QM),
    ("FullyConnected", [spec((1, 6)), spec((2, 6)), spec((2,), F16)], {}, None, "dtype-mismatch",
     "inputTensors[2].dataType"),
    ("FullyConnected", [spec((1, 7)), spec((2, 6))], {}, None, "k-mismatch", "inputTensors[1].dimensions"),
    ("FullyConnected", [spec((2, 3, 4)), spec((2, 6))], {"keep_dims": True}, None, "k-mismatch",
     "inputTensors[1].dimensions"),
    ("FullyConnected", [spec((1, 6)), spec((2, 6)), spec((3,))], {}, None, "bias-shape", "inputTensors[2].dimensions"),
    ("MatMul", [spec((3,)), spec((3, 2))], {}, None, "input-rank", "inputTensors[0].rank"),
    ("MatMul", [spec((2, 3), BF16), spec((3, 2))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("MatMul", [spec((2, 3), U8), spec((3, 2))], {}, None, "quant-missing", QM),
    ("MatMul", [spec((2, 3)), spec((3, 2), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
    ("MatMul", [spec((2, 3)), spec((2, 3))], {}, None, "inner-dim", "inputTensors[1].dimensions"),
    ("MatMul", [spec((2, 2, 3)), spec((3, 3, 2))], {}, None, "broadcast", "inputTensors[1].dimensions"),
    # (the other conv / pool ops' rules: tests/test_ops_conv_pool.py)
    ("TransposeConv2d", [X4, spec((2, 2, 4, 3))], {"stride": [2, 2], "output_padding": [2, 0]}, None,
     "output-padding", "params[output_padding]"),
    ("Softmax", [spec(())], {}, None, "input-rank", "inputTensors[0].rank"),
    ("Softmax", [spec((2, 3), U8)], {}, None, "dtype", "inputTensors[0].dataType"),
    ("Softmax", [spec((2, 3))], {"axis": 2}, None, "axis", "params[axis]"),
    ("Reshape", [spec((2, 3))], {}, None, "output-unknown", "outputTensors[0].dimensions"),
    ("Reshape", [spec((2, 3))], {}, [spec((7,))], "element-count", "outputTensors[0].dimensions"),
    ("Transpose", [spec((2, 3))], {"perm": [0, 0]}, None, "perm", "params[perm]"),
    ("Transpose", [spec((2, 3))], {"perm": [0, 1, 2]}, None, "perm", "params[perm]"),
    ("Concat", [spec((2, 3)), spec((2, 3), F16)], {"axis": 0}, None, "dtype-mismatch", "inputTensors[1].dataType"),
    ("Concat", [spec((2, 3)), spec((2, 3))], {"axis": 2}, None, "axis", "params[axis]"),
    ("Concat", [spec((2, 3)), spec((2, 3, 1))], {"axis": 0}, None, "input-rank", "inputTensors[1].rank"),
    ("Concat", [spec((2, 3)), spec((2, 4)), spec((3, 3))], {"axis": 0}, None, "dimensions",
     "inputTensors[1].dimensions"),
]
for _op in sorted(ELEMENTWISE):
    NEGATIVE += [
        (_op, [spec((2, 3), U8), spec((2, 3), U8)], {}, None, "dtype", "inputTensors[0].dataType"),
        (_op, [spec((2, 3)), spec((2, 3), F16)], {}, None, "dtype-mismatch", "inputTensors[1].dataType"),
        (_op, [spec((2, 3)), spec((4,))], {}, None, "broadcast", "inputTensors[1].dimensions"),
    ]
for _op in ("PoolMax2d", "PoolAvg2d"):
    _p = {"filter_size": [2, 2], "stride": [2, 2]}
    NEGATIVE += [
        (_op, [spec((5, 5, 4))], _p, None, "input-rank", "inputTensors[0].rank"),
        (_op, [spec((1, 5, 5, 4), BF16)], _p, None, "dtype", "inputTensors[0].dataType"),
        (_op, [spec((1, 5, 5, 4), U8)], _p, None, "quant-missing", QM),
        (_op, [X4], {**_p, "filter_size": [0, 2]}, None, "filter-size", "params[filter_size]"),
        (_op, [X4], {**_p, "stride": [2, 0]}, None, "stride", "params[stride]"),
        (_op, [X4], {**_p, "rounding_mode": 2}, None, "rounding-mode", "params[rounding_mode]"),
        (_op, [X4], {**_p, "pad_amount": [[2, 0], [0, 0]]}, None, "pad-amount", "params[pad_amount]"),
        (_op, [X4], {**_p, "filter_size": [6, 2]}, None, "output-size", "inputTensors[0].dimensions"),
    ]


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    if rule == "dtype":
        assert isinstance(err, OpUnsupportedError), "fixed-point inputs are 'unsupported'"


def test_every_rule_id_is_tested():
    """Each op module's rule ids (found in its source) appear in the NEGATIVE table."""
    import inspect
    import re

    from qnnemu.ops import activation, conv, elementwise, matmul, pool
    tested = {(n[0], n[4]) for n in NEGATIVE}
    mine = {"Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul", "Softmax", "PoolMax2d",
            "PoolAvg2d", "Reshape", "Transpose", "Concat", *ELEMENTWISE}
    # shape.py's rule ids (written in full since the shape helpers' suffix factory went) belong
    # mostly to ops whose negative table is tests/test_ops_shape_gather.py; the rule registry's
    # meta-test (tests/test_rule_registry.py) checks that each of them is tested there.
    text = "".join(inspect.getsource(m) for m in (conv, elementwise, matmul, pool, activation))
    rules = set(re.findall(r"QNNEMU-\{(?:op|cls\.op_type)\}-([a-z-]+)", text))
    rules |= {"input-rank", "dtype", "dtype-mismatch"}  # from base.check_rank & co.
    for op_type in mine:
        # Only rules that apply to the op: the ones it has a row for or would raise.
        rows = {r for (o, r) in tested if o == op_type}
        assert rows, f"{op_type} has negative tests"
    assert {r for (_, r) in tested} >= rules, \
        f"every generic rule suffix is tested somewhere: missing {rules - {r for (_, r) in tested}}"


# ---- fallback when the C kernels are not built ---------------------------------------------------
def test_fast_falls_back_to_numpy_with_one_warning(monkeypatch, caplog):
    import sys
    monkeypatch.setitem(sys.modules, "qnnemu._kernels", None)  # makes the import fail
    monkeypatch.setattr(_fast, "_tried", False)
    monkeypatch.setattr(_fast, "_lib", None)
    monkeypatch.setattr(ops.config, "kernels", "fast")
    caplog.set_level("WARNING", logger="qnnemu.ops")
    x, w = rand(1, 4, 4, 2), rand(3, 3, 2, 3)
    y1 = run_op("Conv2d", [x, w], {})
    y2 = run_op("FullyConnected", [rand(3, 4), rand(2, 4)], {})
    warnings = [r for r in caplog.records if "qnnemu._kernels is not built" in r.getMessage()]
    assert len(warnings) == 1, f"one warning on qnnemu.ops when kernels are missing: {warnings}"
    assert not _fast.enabled(), "fast path disabled without the module"
    assert_close(y1, ref_conv2d(x, w, None), "Conv2d numpy fallback")
    assert y2.shape == (3, 2), "FullyConnected numpy fallback runs"
