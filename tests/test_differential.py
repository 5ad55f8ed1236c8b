"""Differential tests: the same QNN graphs on the vendor's libQnnHtp.so and on our libQnnHtpEmu.so.

Every case builds one small float32 graph through qnnemu.client and also returns a float64
numpy reference, so that a disagreement can be attributed:
- ``test_vendor_matches_reference`` checks the case itself against the vendor (needs only
  onnxruntime_qnn);
- ``test_ours_matches_vendor`` runs the same graph and inputs on both backends (needs our
  library built; skipped otherwise) and also checks ours against the reference.

Both backends run on SM8350 (v68), the HTP documentation's default SoC, named explicitly (the
vendor keeps the last configured SoC for the whole process): v68 executes float32 graphs in
float32 -- the vendor's results agree with float64 numpy to ~1e-6 relative here -- so outputs
are compared
with ``max|a - b| <= TOL * max(1, max|reference|)``, TOL = 1e-4 (a few float32 ulps scaled by
the accumulation lengths used here, with headroom for the vendor's transcendental
approximations in Sigmoid/Tanh/Softmax).  The float16 math of v69 and later is compared in
tests/test_numerics_vendor.py.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from vendor import our_library, vendor_library

HTP = vendor_library("libQnnHtp.so")
pytestmark = pytest.mark.skipif(HTP is None, reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")

from qnnemu.client import Backend, htp_device_config  # noqa: E402
from qnnemu.headers import Q  # noqa: E402

TOL = 1e-4
F32 = np.float32
CASES: dict[str, Callable] = {}


def case(name: str):
    def register(fn):
        CASES[name] = fn
        return fn
    return register


def u32(*v):
    return np.array(v, np.uint32)


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


# -- numpy references -------------------------------------------------------------------------

def ref_conv(x, w, b, stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1), group=1,
             depthwise=False):
    """NHWC input; HWIO filter ([fh, fw, cin/group, cout]; depthwise: [fh, fw, 1, c])."""
    x = np.pad(x.astype(np.float64), ((0, 0), pad[0], pad[1], (0, 0)))
    n, h, wd, cin = x.shape
    fh, fw, _, cout = w.shape
    if depthwise:
        group = cin
    eh, ew = dilation[0] * (fh - 1) + 1, dilation[1] * (fw - 1) + 1
    oh, ow = (h - eh) // stride[0] + 1, (wd - ew) // stride[1] + 1
    out = np.zeros((n, oh, ow, cout))
    cin_g, cout_g = cin // group, cout // group
    for i in range(fh):
        for j in range(fw):
            patch = x[:, i * dilation[0]:i * dilation[0] + (oh - 1) * stride[0] + 1:stride[0],
                      j * dilation[1]:j * dilation[1] + (ow - 1) * stride[1] + 1:stride[1], :]
            for gi in range(group):
                out[..., gi * cout_g:(gi + 1) * cout_g] += np.einsum(
                    "nhwc,co->nhwo", patch[..., gi * cin_g:(gi + 1) * cin_g],
                    w[i, j, :, gi * cout_g:(gi + 1) * cout_g])
    return out + b


def ref_pool(x, size, stride, pad, kind):
    """Floor rounding. Avg: padding excluded (count_pad_for_edges=False). Max: padding takes
    part as zeros — what the vendor's HTP backend does for float32 on v68 (a window of negative
    values at the border yields 0; v69+ and float16 / fixed-point data ignore the padding:
    tests/test_numerics_vendor.py)."""
    n, h, w, c = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), pad[0], pad[1], (0, 0)),
                constant_values=0.0 if kind == "max" else np.nan)
    oh = (h + sum(pad[0]) - size[0]) // stride[0] + 1
    ow = (w + sum(pad[1]) - size[1]) // stride[1] + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * stride[0]:i * stride[0] + size[0], j * stride[1]:j * stride[1] + size[1], :]
            out[:, i, j, :] = (np.nanmax if kind == "max" else np.nanmean)(win, axis=(1, 2))
    return out


def softmax(x, axis=-1, beta=1.0):
    z = beta * x.astype(np.float64)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# -- cases: build(g, rng) -> (feeds, {output name: reference}) ---------------------------------

def conv_case(name, x_shape, w_shape, stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1),
              group=1, depthwise=False):
    @case(name)
    def build(g, rng):
        x = randn(rng, *x_shape)
        w = randn(rng, *w_shape, scale=0.3)
        b = randn(rng, w_shape[3], scale=0.1)
        ref = ref_conv(x, w, b, stride, pad, dilation, group, depthwise)
        params = {"stride": u32(*stride), "pad_amount": np.array(pad, np.uint32),
                  "dilation": u32(*dilation)}
        if not depthwise:
            params["group"] = np.uint32(group)
        tx = g.input("x", x.shape)
        g.node("DepthWiseConv2d" if depthwise else "Conv2d",
               [tx, g.static("w", w), g.static("b", b)], params=params,
               outputs=[("y", ref.shape, F32)], app_read=True)
        return {"x": x}, {"y": ref}


conv_case("Conv2d_3x3_pad1", (1, 8, 8, 3), (3, 3, 3, 4), pad=((1, 1), (1, 1)))
conv_case("Conv2d_1x1", (1, 5, 5, 8), (1, 1, 8, 6))
conv_case("Conv2d_stride2_asym_pad", (1, 9, 9, 4), (3, 3, 4, 5), stride=(2, 2), pad=((0, 1), (1, 0)))
conv_case("Conv2d_dilation2", (1, 10, 10, 3), (3, 3, 3, 4), pad=((2, 2), (2, 2)), dilation=(2, 2))
conv_case("Conv2d_group2", (1, 6, 6, 4), (3, 3, 2, 6), pad=((1, 1), (1, 1)), group=2)
conv_case("Conv2d_batch2_5x3", (2, 7, 6, 3), (5, 3, 3, 4), pad=((2, 2), (1, 1)))
conv_case("DepthWiseConv2d_3x3", (1, 8, 8, 4), (3, 3, 1, 4), pad=((1, 1), (1, 1)), depthwise=True)
conv_case("DepthWiseConv2d_stride2", (1, 9, 9, 6), (3, 3, 1, 6), stride=(2, 2), depthwise=True)


@case("FullyConnected")
def _fc(g, rng):
    x, w, b = randn(rng, 3, 20), randn(rng, 7, 20, scale=0.2), randn(rng, 7, scale=0.1)
    tx = g.input("x", x.shape)
    g.node("FullyConnected", [tx, g.static("w", w), g.static("b", b)],
           outputs=[("y", (3, 7), F32)], app_read=True)
    return {"x": x}, {"y": x.astype(np.float64) @ w.T + b}


@case("FullyConnected_no_bias")
def _fc_nobias(g, rng):
    x, w = randn(rng, 2, 16), randn(rng, 5, 16, scale=0.2)
    tx = g.input("x", x.shape)
    g.node("FullyConnected", [tx, g.static("w", w)], outputs=[("y", (2, 5), F32)], app_read=True)
    return {"x": x}, {"y": x.astype(np.float64) @ w.T}


def matmul_case(t0, t1):
    @case(f"MatMul_t{int(t0)}{int(t1)}")
    def build(g, rng):
        a = randn(rng, 2, 3, 4)
        b = randn(rng, 2, 4, 5)
        a_in = np.swapaxes(a, 1, 2).copy() if t0 else a
        b_in = np.swapaxes(b, 1, 2).copy() if t1 else b
        ta, tb = g.input("a", a_in.shape), g.input("b", b_in.shape)
        g.node("MatMul", [ta, tb], params={"transpose_in0": t0, "transpose_in1": t1},
               outputs=[("y", (2, 3, 5), F32)], app_read=True)
        return {"a": a_in, "b": b_in}, {"y": a.astype(np.float64) @ b}


for _t0 in (False, True):
    for _t1 in (False, True):
        matmul_case(_t0, _t1)

_BINARY = {
    "ElementWiseAdd": np.add, "ElementWiseSubtract": np.subtract,
    "ElementWiseMultiply": np.multiply, "ElementWiseDivide": np.divide,
    "ElementWiseMaximum": np.maximum, "ElementWiseMinimum": np.minimum,
}


def binary_case(op, a_shape, b_shape, static_b=False):
    suffix = "x".join(map(str, a_shape)) + "_" + "x".join(map(str, b_shape))
    @case(f"{op}_{suffix}{'_static' if static_b else ''}")
    def build(g, rng):
        a, b = randn(rng, *a_shape), randn(rng, *b_shape)
        if op == "ElementWiseDivide":  # keep divisors away from zero
            b = (np.sign(b) * (np.abs(b) + 0.5)).astype(F32)
        ref = _BINARY[op](a.astype(np.float64), b.astype(np.float64))
        ta = g.input("a", a.shape)
        tb = g.static("b", b) if static_b else g.input("b", b.shape)
        g.node(op, [ta, tb], outputs=[("y", ref.shape, F32)], app_read=True)
        return ({"a": a} if static_b else {"a": a, "b": b}), {"y": ref}


for _op in _BINARY:
    binary_case(_op, (2, 3, 4, 5), (2, 3, 4, 5))
    binary_case(_op, (2, 3, 4, 5), (1, 3, 1, 5))
    binary_case(_op, (2, 3, 4, 5), (5,))
binary_case("ElementWiseAdd", (1, 4, 4, 8), (8,), static_b=True)
binary_case("ElementWiseMultiply", (3, 1, 5), (1, 4, 1))


def unary_case(name, op, fn, params=None, shape=(2, 5, 7), scale=3.0):
    @case(name)
    def build(g, rng):
        x = randn(rng, *shape, scale=scale)
        tx = g.input("x", x.shape)
        g.node(op, [tx], params=params, outputs=[("y", x.shape, F32)], app_read=True)
        return {"x": x}, {"y": fn(x.astype(np.float64))}


unary_case("Relu", "Relu", lambda x: np.maximum(x, 0))
unary_case("ReluMinMax_0_6", "ReluMinMax", lambda x: np.clip(x, 0, 6),
           {"min_value": np.float32(0), "max_value": np.float32(6)}, scale=5.0)
unary_case("ReluMinMax_neg1_1", "ReluMinMax", lambda x: np.clip(x, -1, 1),
           {"min_value": np.float32(-1), "max_value": np.float32(1)})
unary_case("Sigmoid", "Sigmoid", lambda x: 1 / (1 + np.exp(-x)))
unary_case("Tanh", "Tanh", np.tanh)
unary_case("Softmax", "Softmax", softmax)
unary_case("Softmax_beta0.5", "Softmax", lambda x: softmax(x, beta=0.5),
           {"axis": np.uint32(2), "beta": np.float32(0.5)})


def pool_case(name, kind, x_shape, size, stride, pad=((0, 0), (0, 0))):
    @case(name)
    def build(g, rng):
        x = randn(rng, *x_shape)
        ref = ref_pool(x, size, stride, pad, kind)
        params = {"filter_size": u32(*size), "stride": u32(*stride),
                  "pad_amount": np.array(pad, np.uint32)}
        if kind == "avg":
            params["count_pad_for_edges"] = False
        tx = g.input("x", x.shape)
        g.node("PoolMax2d" if kind == "max" else "PoolAvg2d", [tx], params=params,
               outputs=[("y", ref.shape, F32)], app_read=True)
        return {"x": x}, {"y": ref}


pool_case("PoolMax2d_2x2_s2", "max", (1, 8, 8, 3), (2, 2), (2, 2))
pool_case("PoolMax2d_3x3_s1_pad1", "max", (1, 7, 7, 4), (3, 3), (1, 1), ((1, 1), (1, 1)))
pool_case("PoolAvg2d_2x2_s2", "avg", (2, 6, 6, 3), (2, 2), (2, 2))
pool_case("PoolAvg2d_3x3_s2", "avg", (1, 9, 9, 5), (3, 3), (2, 2))


@case("Reshape")
def _reshape(g, rng):
    x = randn(rng, 1, 4, 4, 6)
    tx = g.input("x", x.shape)
    g.node("Reshape", [tx], outputs=[("y", (2, 48), F32)], app_read=True)
    return {"x": x}, {"y": x.reshape(2, 48).astype(np.float64)}


@case("Transpose_0312")
def _transpose(g, rng):
    x = randn(rng, 2, 3, 4, 5)
    tx = g.input("x", x.shape)
    g.node("Transpose", [tx], params={"perm": u32(0, 3, 1, 2)},
           outputs=[("y", (2, 5, 3, 4), F32)], app_read=True)
    return {"x": x}, {"y": x.transpose(0, 3, 1, 2).astype(np.float64)}


@case("Transpose_2d")
def _transpose2d(g, rng):
    x = randn(rng, 6, 9)
    tx = g.input("x", x.shape)
    g.node("Transpose", [tx], params={"perm": u32(1, 0)}, outputs=[("y", (9, 6), F32)],
           app_read=True)
    return {"x": x}, {"y": x.T.astype(np.float64)}


@case("Concat_last_axis")
def _concat(g, rng):
    a, b = randn(rng, 1, 4, 4, 3), randn(rng, 1, 4, 4, 5)
    ta, tb = g.input("a", a.shape), g.input("b", b.shape)
    g.node("Concat", [ta, tb], params={"axis": np.uint32(3)},
           outputs=[("y", (1, 4, 4, 8), F32)], app_read=True)
    return {"a": a, "b": b}, {"y": np.concatenate([a, b], axis=3).astype(np.float64)}


@case("Concat_axis1_three")
def _concat3(g, rng):
    xs = [randn(rng, 2, n, 3) for n in (1, 2, 4)]
    ts = [g.input(f"x{i}", x.shape) for i, x in enumerate(xs)]
    g.node("Concat", ts, params={"axis": np.uint32(1)}, outputs=[("y", (2, 7, 3), F32)],
           app_read=True)
    return ({f"x{i}": x for i, x in enumerate(xs)},
            {"y": np.concatenate(xs, axis=1).astype(np.float64)})


@case("Conv_Relu_Pool_FC_chain")
def _chain(g, rng):
    x = randn(rng, 1, 8, 8, 3)
    w, b = randn(rng, 3, 3, 3, 4, scale=0.3), randn(rng, 4, scale=0.1)
    fw, fb = randn(rng, 10, 64, scale=0.1), randn(rng, 10, scale=0.1)
    tx = g.input("x", x.shape)
    c = g.node("Conv2d", [tx, g.static("w", w), g.static("b", b)],
               params={"stride": u32(1, 1), "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)},
               outputs=[("c", (1, 8, 8, 4), F32)])
    r = g.node("Relu", [c], outputs=[("r", (1, 8, 8, 4), F32)])
    p = g.node("PoolMax2d", [r], params={"filter_size": u32(2, 2), "stride": u32(2, 2),
                                         "pad_amount": np.zeros((2, 2), np.uint32)},
               outputs=[("p", (1, 4, 4, 4), F32)])
    f = g.node("Reshape", [p], outputs=[("f", (1, 64), F32)])
    g.node("FullyConnected", [f, g.static("fw", fw), g.static("fb", fb)],
           outputs=[("y", (1, 10), F32)], app_read=True)
    ref = ref_pool(np.maximum(ref_conv(x, w, b, pad=((1, 1), (1, 1))), 0), (2, 2), (2, 2),
                   ((0, 0), (0, 0)), "max")
    return {"x": x}, {"y": ref.reshape(1, 64) @ fw.T.astype(np.float64) + fb}


# -- running ----------------------------------------------------------------------------------

def run_case(backend: Backend, name: str):
    """Builds, finalizes and executes case ``name`` (seeded by its name) on ``backend``."""
    ctx = backend.context()
    try:
        g = ctx.graph(name.replace(".", "_"))
        seed = sum(name.encode())
        feeds, refs = CASES[name](g, np.random.default_rng(seed))
        g.finalize()
        return g.execute(feeds), refs
    finally:
        ctx.free()


def assert_close(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    assert err <= TOL * scale, f"{what}: max abs difference {err:.3e} > {TOL * scale:.3e}"


def sm8350():
    return [htp_device_config("SOC", socModel=int(Q.QNN_SOC_MODEL_SM8350))]


@pytest.fixture(scope="module")
def vendor_backend():
    with Backend(str(HTP), log_level="error", device_configs=sm8350()) as be:
        yield be


@pytest.fixture(scope="module")
def our_backend():
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    with Backend(str(lib), log_level="error", device_configs=sm8350()) as be:
        yield be


@pytest.mark.parametrize("name", sorted(CASES))
def test_vendor_matches_reference(vendor_backend, name):
    outs, refs = run_case(vendor_backend, name)
    for out_name, ref in refs.items():
        assert_close(outs[out_name], ref, f"{name}: vendor output {out_name!r} vs numpy reference")


@pytest.mark.parametrize("name", sorted(CASES))
def test_ours_matches_vendor(vendor_backend, our_backend, name):
    theirs, refs = run_case(vendor_backend, name)
    ours, _ = run_case(our_backend, name)
    assert set(ours) == set(theirs), f"{name}: same graph outputs on both backends"
    for out_name, ref in refs.items():
        assert_close(ours[out_name], theirs[out_name].astype(np.float64),
                     f"{name}: our output {out_name!r} vs vendor's")
        assert_close(ours[out_name], ref, f"{name}: our output {out_name!r} vs numpy reference")
