"""The C engine's integer pipeline (qnnemu/core/engine/lower_qgemm.py, csrc/eng_qgemm.c; issue
13): quantized Conv2d / DepthWiseConv2d / FullyConnected / MatMul (IntegerAccumulation) and
ElementWiseAdd (IntegerAdd) lower to C steps whose codes are bit-identical to the Python plan's,
over activation and output widths, per-channel and requantized weights, dead channels, folded
Relus and SoC archs; the shared C accumulator is exact where the float32 formula was not."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, NATIVE, STATIC, GraphBuilder, new_context
from hypothesis import given, settings, strategies as st

from qnnemu.core.engine import check_plan
from qnnemu.headers import Q
from qnnemu.htp.device_model import DeviceModel
from qnnemu.ops import _fast
from qnnemu.spec.quant import AccRequant, code_range

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

U8, S8 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8
U16, S16 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16
S32 = Q.QNN_DATATYPE_SFIXED_POINT_32
NP = {U8: np.uint8, S8: np.int8, U16: np.uint16, S16: np.int16}
ACT = [U8, S8, U16, S16]
SOCS = {"v68": None, "v73": Q.QNN_SOC_MODEL_SM8550}


def codes(rng, dtype, shape):
    lo, hi = code_range(dtype)
    return rng.integers(lo, hi + 1, shape).astype(NP[dtype])


def act_quant(rng, dtype):
    """A per-tensor activation encoding with a zero point inside the code range."""
    lo, hi = code_range(dtype)
    zp = int(rng.integers(lo, hi + 1)) if rng.random() < 0.7 else (lo + hi + 1) // 2
    return (float(rng.uniform(0.001, 0.1)), -zp)


def weight(rng, b: GraphBuilder, name, shape, axis, per_channel: bool, unsigned: bool, dead: bool):
    """Static 8-bit weights: int8 symmetric or uint8 with an offset (channels leaving int8 get
    requantized by the plan, htp_int8_weights); per-channel scales, one of them so small that
    the multiplier underflows to 0 (a dead channel) when ``dead``."""
    n = shape[axis]
    if unsigned:
        data = rng.integers(0, 256, shape).astype(np.uint8)
        offsets = rng.integers(-255, 0, n) if per_channel else [int(rng.integers(-255, 0))]
    else:
        data = rng.integers(-128, 128, shape).astype(np.int8)
        offsets = np.zeros(n if per_channel else 1, np.int64)
    scales = rng.uniform(0.001, 0.05, n if per_channel else 1).astype(np.float32)
    if dead and per_channel:
        scales[int(rng.integers(0, n))] = np.float32(1e-45)   # xs * ws underflows: multiplier 0
    quant = {"axis": axis, "scales": scales, "offsets": np.asarray(offsets)} if per_channel \
        else (float(scales[0]), int(offsets[0]))
    t = b.tensor(name, shape, U8 if unsigned else S8, STATIC, data, quant)
    return t, scales


def bias(rng, b, n, unit):
    data = rng.integers(-20000, 20000, n).astype(np.int32)
    return b.tensor("bias", (n,), S32, STATIC, data, {"axis": 0, "scales": np.full(n, unit, np.float32)})


def finish(b: GraphBuilder, feeds: dict, expect_fallbacks=(), keep: bool = False):
    """Finalizes, checks the fallbacks and runs check_plan (engine vs Python plan, every slot);
    then frees the context unless ``keep`` (the caller frees it: live graphs would pile up in the
    handle table over the examples)."""
    b.graph.finalize()
    engine = b.graph.plan.engine
    assert engine is not None, "the graph has a C program"
    got = sorted(op for _, op, _ in engine.fallbacks)
    assert got == sorted(expect_fallbacks), f"fallbacks {engine.fallbacks}, expected {list(expect_fallbacks)}"
    ids = {t.name: t.id for t in b.graph.tensors.values()}
    try:
        check_plan(b.graph.plan, {ids[k]: v for k, v in feeds.items()})
    finally:
        if not keep:
            b.graph.context.free()
    return b.graph


def graph_builder(soc):
    model = DeviceModel(soc_model=SOCS[soc]) if SOCS[soc] is not None else None
    return GraphBuilder(new_context(model=model), "qgemm")


# -- Conv2d -------------------------------------------------------------------------------------

@settings(max_examples=40)
@given(seed=st.integers(0, 2**31), x_dtype=st.sampled_from(ACT), y_dtype=st.sampled_from(ACT),
       soc=st.sampled_from(sorted(SOCS)), per_channel=st.booleans(), unsigned_w=st.booleans(),
       dead=st.booleans(), with_bias=st.booleans(), k=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.integers(0, 2), dilation=st.integers(1, 2), group=st.sampled_from([1, 1, 2, 3]))
def test_conv2d_lowers_bit_identical(seed, x_dtype, y_dtype, soc, per_channel, unsigned_w, dead, with_bias,
                                     k, stride, pad, dilation, group):
    rng = np.random.default_rng(seed)
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(k * dilation, 9)), int(rng.integers(k * dilation, 9))
    cin, cout = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 5))
    b = graph_builder(soc)
    xq = act_quant(rng, x_dtype)
    x = b.tensor("x", (n, h, w, cin), x_dtype, APP_WRITE, quant=xq)
    wt, scales = weight(rng, b, "w", (k, k, cin // group, cout), 3, per_channel, unsigned_w, dead)
    ins = [x, wt] + ([bias(rng, b, cout, float(np.float32(xq[0]) * np.float32(0.02)))] if with_bias else [])
    oh = (h + 2 * pad - (k - 1) * dilation - 1) // stride + 1
    ow = (w + 2 * pad - (k - 1) * dilation - 1) // stride + 1
    y = b.tensor("y", (n, oh, ow, cout), y_dtype, APP_READ, quant=act_quant(rng, y_dtype))
    b.node("Conv2d", "conv", ins, [y], stride=[stride, stride], pad_amount=[[pad, pad], [pad, pad]],
           dilation=[dilation, dilation], group=group)
    finish(b, {"x": codes(rng, x_dtype, (n, h, w, cin))})


# -- DepthWiseConv2d (stride 1: shifted multiplier; strided: the fine path) -----------------------

@settings(max_examples=30)
@given(seed=st.integers(0, 2**31), x_dtype=st.sampled_from(ACT), y_dtype=st.sampled_from(ACT),
       soc=st.sampled_from(sorted(SOCS)), per_channel=st.booleans(), unsigned_w=st.booleans(),
       dead=st.booleans(), k=st.integers(1, 3), stride=st.integers(1, 2), pad=st.integers(0, 1),
       mult=st.integers(1, 2))
def test_depthwise_lowers_bit_identical(seed, x_dtype, y_dtype, soc, per_channel, unsigned_w, dead, k, stride,
                                        pad, mult):
    rng = np.random.default_rng(seed)
    h, w, cin = int(rng.integers(k, 8)), int(rng.integers(k, 8)), int(rng.integers(1, 6))
    b = graph_builder(soc)
    x = b.tensor("x", (1, h, w, cin), x_dtype, APP_WRITE, quant=act_quant(rng, x_dtype))
    wt, _ = weight(rng, b, "w", (k, k, 1, cin * mult), 3, per_channel, unsigned_w, dead)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    y = b.tensor("y", (1, oh, ow, cin * mult), y_dtype, APP_READ, quant=act_quant(rng, y_dtype))
    b.node("DepthWiseConv2d", "dw", [x, wt], [y], stride=[stride, stride], pad_amount=[[pad, pad], [pad, pad]])
    finish(b, {"x": codes(rng, x_dtype, (1, h, w, cin))})


# -- FullyConnected and MatMul ------------------------------------------------------------------

@settings(max_examples=30)
@given(seed=st.integers(0, 2**31), x_dtype=st.sampled_from(ACT), y_dtype=st.sampled_from(ACT),
       soc=st.sampled_from(sorted(SOCS)), per_channel=st.booleans(), unsigned_w=st.booleans(),
       dead=st.booleans(), with_bias=st.booleans(), m=st.integers(1, 70), kdim=st.integers(1, 200),
       n=st.integers(1, 80))
def test_fully_connected_lowers_bit_identical(seed, x_dtype, y_dtype, soc, per_channel, unsigned_w, dead,
                                              with_bias, m, kdim, n):
    rng = np.random.default_rng(seed)
    b = graph_builder(soc)
    xq = act_quant(rng, x_dtype)
    x = b.tensor("x", (m, kdim), x_dtype, APP_WRITE, quant=xq)
    wt, scales = weight(rng, b, "w", (n, kdim), 0, per_channel, unsigned_w, dead)
    ins = [x, wt] + ([bias(rng, b, n, float(np.float32(xq[0]) * np.float32(0.02)))] if with_bias else [])
    y = b.tensor("y", (m, n), y_dtype, APP_READ, quant=act_quant(rng, y_dtype))
    b.node("FullyConnected", "fc", ins, [y])
    finish(b, {"x": codes(rng, x_dtype, (m, kdim))})


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31), x_dtype=st.sampled_from(ACT), y_dtype=st.sampled_from(ACT),
       transpose_in1=st.booleans(), per_channel=st.booleans(), unsigned_w=st.booleans(),
       batch=st.integers(1, 3), m=st.integers(1, 20), kdim=st.integers(1, 70), n=st.integers(1, 40))
def test_matmul_static_in1_lowers_bit_identical(seed, x_dtype, y_dtype, transpose_in1, per_channel, unsigned_w,
                                                batch, m, kdim, n):
    rng = np.random.default_rng(seed)
    b = graph_builder("v68")
    x = b.tensor("x", (batch, m, kdim), x_dtype, APP_WRITE, quant=act_quant(rng, x_dtype))
    shape = (n, kdim) if transpose_in1 else (kdim, n)
    wt, _ = weight(rng, b, "w", shape, 0 if transpose_in1 else 1, per_channel, unsigned_w, False)
    y = b.tensor("y", (batch, m, n), y_dtype, APP_READ, quant=act_quant(rng, y_dtype))
    b.node("MatMul", "mm", [x, wt], [y], transpose_in1=transpose_in1)
    finish(b, {"x": codes(rng, x_dtype, (batch, m, kdim))})


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31), x_dtype=st.sampled_from(ACT), y_dtype=st.sampled_from(ACT),
       w_dtype=st.sampled_from([U8, S8]), soc=st.sampled_from(sorted(SOCS)), transpose_in1=st.booleans(),
       shared=st.booleans(), batch=st.integers(1, 3), m=st.integers(1, 12), kdim=st.integers(1, 40),
       n=st.integers(1, 20))
def test_matmul_dynamic_in1_lowers_bit_identical(seed, x_dtype, y_dtype, w_dtype, soc, transpose_in1, shared, batch,
                                                 m, kdim, n):
    """A dynamic in1 (attention's Q x K^T, A x V): its columns requantized to int8 per execute
    (uint8 in1 with an offset leaves int8: per-column factors, per-column multipliers)."""
    rng = np.random.default_rng(seed)
    b = graph_builder(soc)
    x = b.tensor("x", (batch, m, kdim), x_dtype, APP_WRITE, quant=act_quant(rng, x_dtype))
    wshape = ((1,) if shared else (batch,)) + ((n, kdim) if transpose_in1 else (kdim, n))
    w_off = int(rng.integers(-255, 1)) if w_dtype == U8 else 0
    w = b.tensor("w", wshape, w_dtype, APP_WRITE, quant=(float(rng.uniform(0.001, 0.05)), w_off))
    y = b.tensor("y", (batch, m, n), y_dtype, APP_READ, quant=act_quant(rng, y_dtype))
    b.node("MatMul", "mm", [x, w], [y], transpose_in1=transpose_in1)
    finish(b, {"x": codes(rng, x_dtype, (batch, m, kdim)), "w": codes(rng, w_dtype, wshape)})


@pytest.mark.parametrize("static_in1", [False, True])
def test_matmul_transpose_in0_stays_in_python(static_in1):
    """transpose_in0 has no C form: a counted fallback whose codes are AccRequant of the exact
    product of the transposed in0 (square, so an ignored transpose would go unnoticed by shape)."""
    rng = np.random.default_rng(9)
    b = graph_builder("v68")
    a = b.tensor("a", (8, 8), U8, APP_WRITE, quant=(0.01, -128))
    wv = rng.integers(-128, 128, (8, 8)).astype(np.int8)
    w = b.tensor("w", (8, 8), S8, STATIC if static_in1 else APP_WRITE, wv if static_in1 else None, (0.01, 0))
    y = b.tensor("y", (8, 8), U8, APP_READ, quant=(0.05, -128))
    b.node("MatMul", "mm", [a, w], [y], transpose_in0=True)
    av = rng.integers(0, 256, (8, 8)).astype(np.uint8)
    feeds = {"a": av} if static_in1 else {"a": av, "w": wv}
    graph = finish(b, feeds, expect_fallbacks=["MatMul"], keep=True)
    ids = {t.name: t.id for t in graph.tensors.values()}
    got = graph.execute({ids[k]: v for k, v in feeds.items()}, [ids["y"]])[ids["y"]]
    exact = ((av.astype(np.float64) - 128).T @ wv.astype(np.float64))
    impl = graph.plan.steps[0].impl
    ref = impl.requant(exact, wv.astype(np.float64).sum(axis=0)).astype(np.uint8)
    assert np.array_equal(got, ref), "the codes of the transposed product"
    graph.context.free()


def test_matmul_dynamic_in1_accumulator_is_exact():
    """16-bit codes times 127 over K = 4096 pass 2**24 (one float32 GEMM would round): the
    plan's codes and the engine's equal AccRequant of the exact int64 product."""
    rng = np.random.default_rng(5)
    b = graph_builder("v68")
    a = b.tensor("a", (2, 3, 4096), U16, APP_WRITE, quant=(0.001, 0))
    w = b.tensor("w", (2, 4096, 5), S8, APP_WRITE, quant=(0.01, 0))
    y = b.tensor("y", (2, 3, 5), U16, APP_READ, quant=(200.0, -30000))
    b.node("MatMul", "mm", [a, w], [y])
    av = rng.integers(60000, 65536, (2, 3, 4096)).astype(np.uint16)
    wv = rng.integers(100, 128, (2, 4096, 5)).astype(np.int8)
    graph = finish(b, {"a": av, "w": wv}, keep=True)
    ids = {t.name: t.id for t in graph.tensors.values()}
    out = graph.plan._run({ids["a"]: av, ids["w"]: wv}, [ids["y"]], None)[ids["y"]]
    exact = np.matmul(av.astype(np.int64), wv.astype(np.int64)).astype(np.float64)
    assert exact.max() > 2**24, "the sums leave float32's exact range"
    impl = graph.plan.steps[0].impl
    ref = impl.requant(exact, np.expand_dims(wv.astype(np.float64).sum(axis=-2), -2)).astype(np.uint16)
    assert np.array_equal(out, ref), "the Python plan's codes come from the exact accumulator"
    got = graph.execute({ids["a"]: av, ids["w"]: wv}, [ids["y"]])[ids["y"]]
    assert np.array_equal(got, ref), "the engine's codes too"
    graph.context.free()


def test_large_sums_are_exact_in_both_paths():
    """FullyConnected with 16-bit codes near the top and K = 3000: the accumulator (~2.4e10)
    is far beyond 2**24; engine and plan agree and equal AccRequant of the exact int64 sum."""
    rng = np.random.default_rng(7)
    b = graph_builder("v68")
    x = b.tensor("x", (4, 3000), U16, APP_WRITE, quant=(0.0001, 0))
    wd = rng.integers(120, 128, (6, 3000)).astype(np.int8)
    w = b.tensor("w", (6, 3000), S8, STATIC, wd, (0.001, 0))
    y = b.tensor("y", (4, 6), U16, APP_READ, quant=(40.0, 0))
    b.node("FullyConnected", "fc", [x, w], [y])
    xv = rng.integers(65000, 65536, (4, 3000)).astype(np.uint16)
    graph = finish(b, {"x": xv}, keep=True)
    ids = {t.name: t.id for t in graph.tensors.values()}
    got = graph.execute({ids["x"]: xv}, [ids["y"]])[ids["y"]]
    exact = (xv.astype(np.int64) @ wd.astype(np.int64).T).astype(np.float64)
    impl = graph.plan.steps[0].impl
    assert isinstance(impl.requant, AccRequant), "FullyConnected u16 runs the integer pipeline"
    ref = impl.requant(exact, impl.wsum).astype(np.uint16)
    assert np.array_equal(got, ref), "engine codes equal AccRequant of the exact integer sum"
    graph.context.free()


# -- folded Relus ---------------------------------------------------------------------------------

@pytest.mark.parametrize("own_read", [False, True])
@pytest.mark.parametrize("x_dtype", [U8, U16])
def test_conv_with_folded_relu_writes_every_output_in_c(own_read, x_dtype):
    """Conv2d -> Relu (its output's zero point at the bottom: folded): the C step writes the
    Relu's codes from the accumulator, and the conv's own codes only when something reads them."""
    rng = np.random.default_rng(11)
    b = graph_builder("v68")
    x = b.tensor("x", (1, 6, 6, 4), x_dtype, APP_WRITE, quant=act_quant(rng, x_dtype))
    wt, _ = weight(rng, b, "w", (3, 3, 4, 8), 3, True, False, False)
    c = b.tensor("c", (1, 6, 6, 8), x_dtype, APP_READ if own_read else NATIVE, quant=(0.05, -100))
    b.node("Conv2d", "conv", [x, wt], [c], pad_amount=[[1, 1], [1, 1]])
    r = b.tensor("r", (1, 6, 6, 8), x_dtype, APP_READ, quant=(0.03, 0))
    b.node("Relu", "relu", [c], [r])
    graph = finish(b, {"x": codes(rng, x_dtype, (1, 6, 6, 4))}, keep=True)
    assert graph.plan.folds, "the relu was folded into the conv"
    impl = graph.plan.steps[0].impl
    assert impl.keep_own == own_read and len(impl.folded) == 1, "the conv writes its own codes only when read"
    graph.context.free()


# -- ElementWiseAdd -------------------------------------------------------------------------------

@settings(max_examples=40)
@given(seed=st.integers(0, 2**31), wide=st.booleans(), signed=st.booleans(),
       shapes=st.sampled_from([((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 3, 1), (2, 1, 5)),
                               ((5,), (1,)), ((1,), (3, 2))]))
def test_elementwise_add_lowers_bit_identical(seed, wide, signed, shapes):
    rng = np.random.default_rng(seed)
    dtype = (S16 if signed else U16) if wide else (S8 if signed else U8)
    b = graph_builder("v68")
    sa, sb = shapes
    a = b.tensor("a", sa, dtype, APP_WRITE, quant=act_quant(rng, dtype))
    bb = b.tensor("b", sb, dtype, APP_WRITE, quant=act_quant(rng, dtype))
    y = b.tensor("y", np.broadcast_shapes(sa, sb), dtype, APP_READ, quant=act_quant(rng, dtype))
    b.node("ElementWiseAdd", "add", [a, bb], [y])
    finish(b, {"a": codes(rng, dtype, sa), "b": codes(rng, dtype, sb)})


# -- the exact integer requantization of 8-bit accumulators (lower_qgemm._int_requant) -------------

@settings(max_examples=80)
@given(seed=st.integers(0, 2**31), fine=st.booleans(), bits=st.sampled_from([None, None, 24]),
       y_bits=st.sampled_from([8, 16]), signed_y=st.booleans(), k=st.sampled_from([1, 9, 144, 4000]),
       log_ys=st.floats(-9, 3), with_bias=st.booleans(), wide=st.booleans())
def test_integer_requantization_equals_accrequant(seed, fine, bits, y_bits, signed_y, k, log_ys, with_bias, wide):
    """Where _int_requant gives a table, its int32 formula equals AccRequant of the float64
    accumulator cl (+ 256 ch for 16-bit codes) + xw for accumulators up to the bounds, the
    bounds included (saturating, dead and ordinary channels; shifted, fine and 16-bit
    multipliers)."""
    from qnnemu.core.engine.lower_qgemm import _int_requant
    rng = np.random.default_rng(seed)
    n = 16
    fine = fine and not wide
    lo, hi = (-(1 << (y_bits - 1)), (1 << (y_bits - 1)) - 1) if signed_y else (0, (1 << y_bits) - 1)
    ws = rng.uniform(0.0005, 0.05, n).astype(np.float32)
    ws[3] = np.float32(1e-45)                            # a dead channel
    x_off = -int(rng.integers(0, 65536 if wide else 256))
    wsum = rng.integers(-127 * k, 127 * k + 1, n).astype(np.float64)
    clmax = np.full(n, 255 * 128 * k, np.int64)
    xs = rng.uniform(0.00001, 0.001) if wide else rng.uniform(0.001, 0.1)
    rq = AccRequant(np.float32(xs), x_off, ws, np.ones(n), np.float32(10.0 ** log_ys),
                    -int(rng.integers(lo, hi + 1)), rng.uniform(-5e4, 5e4, n).round() if with_bias else None,
                    wide, lo, hi, fine=fine, multiplier_bits=bits)
    shift = 32768 if wide and rng.random() < 0.5 else 0      # int16 codes are mapped to unsigned
    xw = (x_off - shift) * wsum
    tab = _int_requant(rq, n, xw, clmax, wsum, 255 if wide else 0)
    if tab is None:
        # (output scales above ~10 make some channels' multipliers too small for the table: at
        # 10^1.5 about 1 draw in 300 declines, at 10^2 1 in 50; at 10^1 none did in 300)
        assert fine or bits or y_bits == 16 or k == 4000 or wide or not -6 <= log_ys <= 1, \
            "ordinary 8-bit requantizations get an integer table"
        return
    cl = np.concatenate([rng.integers(-clmax[0], clmax[0] + 1, (300, n)), clmax[None], -clmax[None]]).astype(np.int64)
    ch = rng.integers(-clmax[0], clmax[0] + 1, cl.shape).astype(np.int64) if wide else np.zeros_like(cl)
    ch[-2:] = [clmax, -clmax] if wide else 0
    want = rq(cl.astype(np.float64) + 256.0 * ch + xw, wsum)
    B, S, E, TL, TH, MU, RN, RS = (tab[i].astype(np.int64) for i in range(8))
    t = ((cl + B) >> S) + ch + E
    assert np.all(np.abs(cl + B) < 2**31) and np.all(np.abs(t) < 2**31), "the int32 sums do not overflow"
    t = np.minimum(np.maximum(t, TL), TH)
    got = np.clip((t * MU + RN) >> RS, lo, hi)
    assert np.all(np.abs(t * MU + RN) < 2**31), "the int32 products do not overflow"
    assert np.array_equal(got, want), \
        f"integer requantization {got[want != got][:5]} vs AccRequant {want[want != got][:5]}"


def test_integer_requantization_runs_for_8bit_convolutions():
    """A u8 Conv2d and a u8 DepthWiseConv2d lower with the integer requantization table (the
    kernel's has_itab flag), and their codes equal the plan's."""
    rng = np.random.default_rng(21)
    for op, wshape in [("Conv2d", (1, 1, 8, 24)), ("DepthWiseConv2d", (3, 3, 1, 8))]:
        b = graph_builder("v68")
        x = b.tensor("x", (1, 9, 9, 8), U8, APP_WRITE, quant=(0.02, -120))
        wt, _ = weight(rng, b, "w", wshape, 3, True, False, False)
        pad = 1 if op == "DepthWiseConv2d" else 0
        y = b.tensor("y", (1, 9, 9, wshape[3]), U8, APP_READ, quant=(0.05, -100))
        b.node(op, "op", [x, wt], [y], pad_amount=[[pad, pad], [pad, pad]])
        graph = finish(b, {"x": codes(rng, U8, (1, 9, 9, 8))}, keep=True)
        from qnnemu.core.engine.lower_qgemm import _int_inputs, _int_requant
        impl = graph.plan.steps[0].impl
        xw, clmax, chmax = _int_inputs(impl.cacc, impl.cacc.cols)
        assert xw is not None, f"{op}: the C accumulator offers integer requantization"
        assert _int_requant(impl.requant, impl.cacc.cols, xw, clmax, impl.wsum, chmax) is not None, \
            f"{op}: an integer table"
        graph.context.free()


# -- the GEMM's ISA paths -----------------------------------------------------------------------

@pytest.mark.parametrize("isa", ["sse", "avx2", "avxvnni", "avx512", "native"])
def test_every_isa_path_computes_the_exact_accumulator(isa):
    """qe_qacc on each instruction-set path (QNNEMU_KERNELS_ISA caps it; a fresh process each;
    native is AMX where the CPU and the kernel allow it)
    equals numpy's int64 product for every code type, odd K and N, and an im2col with padding;
    the depthwise accumulators (int32 "dwi" and float64 "dw" kernels) equal numpy's too."""
    script = textwrap.dedent("""
        import numpy as np
        from qnnemu.ops import _fast_qgemm as q
        rng = np.random.default_rng(3)
        bad = []
        for dt, off in [(np.uint8, -128), (np.int8, 3), (np.uint16, -30000), (np.int16, 5)]:
            info = np.iinfo(dt)
            for M, K, N in [(1, 1, 1), (5, 7, 19), (67, 301, 70)]:
                x = rng.integers(info.min, info.max + 1, (M, K)).astype(dt)
                w = rng.integers(-128, 128, (N, K)).astype(np.float64)
                acc = q.prepare("FullyConnected", {}, x.shape, dt, off, w, (M, N))(x)
                if not np.array_equal(acc, (x.astype(np.float64) + off) @ w.T):
                    bad.append((str(dt), M, K, N))
        for dt, off in [(np.uint8, -128), (np.uint8, 3), (np.int8, 3), (np.uint16, -30000), (np.int16, 5)]:
            info = np.iinfo(dt)
            for h, w, c, kk, st, pad in [(5, 7, 19, 3, 1, 1), (9, 8, 33, 3, 2, 1), (6, 6, 5, 5, 1, 2),
                                         (4, 4, 3, 1, 1, 0)]:
                x = rng.integers(info.min, info.max + 1, (1, h, w, c)).astype(dt)
                wd = rng.integers(-128, 128, (kk, kk, 1, c)).astype(np.float64)
                oh, ow = (h + 2 * pad - kk) // st + 1, (w + 2 * pad - kk) // st + 1
                params = {"stride": [st, st], "pad_amount": [[pad, pad], [pad, pad]]}
                qa = q.prepare("DepthWiseConv2d", params, x.shape, dt, off, wd, (1, oh, ow, c))
                xp = np.pad(x.astype(np.float64) + off, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
                ref = np.zeros((1, oh, ow, c))
                for ky in range(kk):
                    for kx in range(kk):
                        ref += xp[:, ky:ky + st * oh:st, kx:kx + st * ow:st, :][:, :oh, :ow] * wd[ky, kx, 0]
                if not np.array_equal(qa(x), ref):
                    bad.append(("dw", qa.kind, str(dt), off, h, w, c, kk, st, pad))
        print(q.isa(), bad)
    """)
    import os
    env = dict(os.environ)
    env.pop("QNNEMU_KERNELS_ISA", None)
    if isa != "native":
        env["QNNEMU_KERNELS_ISA"] = isa
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, f"the probe process on {isa} ran: {out.stderr[-2000:]}"
    name, bad = out.stdout.split(" ", 1)
    if isa == "sse":
        assert name == "scalar", f"QNNEMU_KERNELS_ISA=sse selects the scalar path, got {name}"
    if isa in ("avx2", "avxvnni", "avx512"):
        assert name != "amx-int8", f"QNNEMU_KERNELS_ISA={isa} keeps AMX off, got {name}"
    if isa in ("avx2", "avxvnni"):
        assert name not in ("avx512-vnni", "amx-int8"), f"QNNEMU_KERNELS_ISA={isa} keeps AVX-512 off, got {name}"
    assert bad.strip() == "[]", f"the {name} path computes exact accumulators; wrong: {bad}"


@pytest.mark.skipif(bool(__import__("os").environ.get("QNNEMU_KERNELS_ISA")), reason="already capped")
def test_portable_paths_are_bit_identical_too():
    """The lowering tests again with QNNEMU_KERNELS_ISA=avx2 (a fresh process): the portable
    epilogue, depthwise and ElementWiseAdd loops (no AVX-512) give the plan's codes as well."""
    import os
    env = dict(os.environ, QNNEMU_KERNELS_ISA="avx2", HYPOTHESIS_PROFILE="ci")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                          "-k", "lowers_bit_identical or folded_relu or large_sums"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=os.path.dirname(__file__))
    assert out.returncode == 0, f"the lowering tests pass on the portable paths: {out.stdout[-3000:]}"
