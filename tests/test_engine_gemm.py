"""The C engine's float GEMM family (qnnemu/core/engine/lower_gemm.py, csrc/eng_gemm.c; issue 13):
FullyConnected, MatMul, Conv2d, DepthWiseConv2d and TransposeConv2d on float32 values (and in
float16 math) lower to C steps without fallbacks, and their results equal the Python plan's byte
for byte; the C GEMM's results do not depend on its thread count."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, GraphBuilder, new_context
from helpers.isa_probe import digests_by_isa
from hypothesis import given, strategies as st

from qnnemu.core.device import model_from_configs
from qnnemu.core.engine import check_plan
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available() or _fast.gemm_backend() != "c",
                                reason="qnnemu._kernels is not built or QNNEMU_GEMM=blas")

F16_SOC = Q.QNN_SOC_MODEL_SM8550   # float16 math (QNN HTP backend documentation, "QNN HTP Precision")


def context(fp16: bool):
    return new_context(model=model_from_configs(F16_SOC, None, None)) if fp16 else new_context()


def rand(rng, shape, zeros: bool = False) -> np.ndarray:
    a = rng.standard_normal(shape).astype(np.float32)
    if zeros:   # exact zeros and negative zeros: the sign of a zero result must agree too
        a[rng.random(shape) < 0.3] = 0.0
        a[rng.random(shape) < 0.1] = -0.0
    return a


def check(b: GraphBuilder, feeds: dict, what: str) -> None:
    """Finalizes ``b``: no fallback step, and the C program's every value equals the plan's
    (``feeds``: tensor id -> array)."""
    try:
        b.graph.finalize()
        engine = b.graph.plan.engine
        assert engine is not None, f"{what}: the engine compiled a program"
        assert engine.fallbacks == [], f"{what}: every step runs in C, fallbacks {engine.fallbacks}"
        check_plan(b.graph.plan, feeds)
    finally:
        release(b)


def release(b: GraphBuilder) -> None:
    """Frees the graph's handle: hundreds of examples would otherwise stay in the handle table."""
    HANDLES.release(b.handle)


def operand(b, rng, name, shape, static, zeros=False):
    """(tensor, feed or None): a static tensor with random data or an application input."""
    data = rand(rng, shape, zeros)
    if static:
        return b.tensor(name, shape, type_=STATIC, data=data), None
    return b.tensor(name, shape, type_=APP_WRITE), data


# ---- FullyConnected --------------------------------------------------------------------------
@given(rows=st.sampled_from([1, 2, 5, 7, 8, 13, 40]), k=st.integers(1, 80), m=st.integers(1, 70),
       static_w=st.booleans(), bias=st.booleans(), keep_dims=st.booleans(), fp16=st.booleans(),
       seed=st.integers(0, 2**31))
def test_fully_connected_bit_identical(rows, k, m, static_w, bias, keep_dims, fp16, seed):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(context(fp16), "fc")
    x = b.tensor("x", (rows, k), type_=APP_WRITE)
    feeds = {x.id: rand(rng, (rows, k), zeros=True)}
    w, wv = operand(b, rng, "w", (m, k), static_w, zeros=True)
    if wv is not None:
        feeds[w.id] = wv
    ins = [x, w]
    if bias:
        ins.append(b.tensor("b", (m,), type_=STATIC, data=rand(rng, (m,))))
    y = b.tensor("y", (rows, m), type_=APP_READ)
    b.node("FullyConnected", "fc", ins, [y], keep_dims=keep_dims)
    check(b, feeds, f"FullyConnected x[{rows},{k}] w[{m},{k}] static={static_w} bias={bias} fp16={fp16}")


def test_fully_connected_large_packed_weights_and_rank3_input():
    rng = np.random.default_rng(3)
    b = GraphBuilder(new_context(), "fc3")
    x = b.tensor("x", (2, 3, 300), type_=APP_WRITE)
    w = b.tensor("w", (130, 300), type_=STATIC, data=rand(rng, (130, 300)))   # packed (>= 4096)
    bias = b.tensor("b", (130,), type_=STATIC, data=rand(rng, (130,)))
    y = b.tensor("y", (2, 3, 130), type_=APP_READ)
    b.node("FullyConnected", "fc", [x, w, bias], [y], keep_dims=True)
    check(b, {x.id: rand(rng, (2, 3, 300))}, "FullyConnected with packed weights (K = 300, one K block)")


# ---- MatMul ----------------------------------------------------------------------------------
batch_shapes = st.sampled_from([(), (1,), (3,), (2, 1), (1, 3), (2, 3)])


@given(m=st.integers(1, 20), k=st.integers(1, 40), n=st.integers(1, 40), a_batch=batch_shapes,
       b_batch=batch_shapes, t0=st.booleans(), t1=st.booleans(), static_b=st.booleans(),
       fp16=st.booleans(), seed=st.integers(0, 2**31))
def test_matmul_bit_identical(m, k, n, a_batch, b_batch, t0, t1, static_b, fp16, seed):
    try:
        batch = np.broadcast_shapes(a_batch, b_batch)
    except ValueError:
        return
    rng = np.random.default_rng(seed)
    g = GraphBuilder(context(fp16), "mm")
    a_shape = a_batch + ((k, m) if t0 else (m, k))
    b_shape = b_batch + ((n, k) if t1 else (k, n))
    a = g.tensor("a", a_shape, type_=APP_WRITE)
    feeds = {a.id: rand(rng, a_shape, zeros=True)}
    bt, bv = operand(g, rng, "b", b_shape, static_b, zeros=True)
    if bv is not None:
        feeds[bt.id] = bv
    y = g.tensor("y", tuple(batch) + (m, n), type_=APP_READ)
    g.node("MatMul", "mm", [a, bt], [y], transpose_in0=t0, transpose_in1=t1)
    check(g, feeds, f"MatMul {a_shape} x {b_shape} t0={t0} t1={t1} static={static_b} fp16={fp16}")


@pytest.mark.parametrize("t1", [False, True])
def test_matmul_packed_static_operand_folded_and_transposed(t1):
    rng = np.random.default_rng(5)
    for t0 in (False, True):
        g = GraphBuilder(new_context(), "mmp")
        a_shape = (2, 64, 17) if t0 else (2, 17, 64)
        a = g.tensor("a", a_shape, type_=APP_WRITE)
        bs = (96, 64) if t1 else (64, 96)
        bt = g.tensor("b", bs, type_=STATIC, data=rand(rng, bs))    # 6144 elements: packed
        y = g.tensor("y", (2, 17, 96), type_=APP_READ)
        g.node("MatMul", "mm", [a, bt], [y], transpose_in0=t0, transpose_in1=t1)
        check(g, {a.id: rand(rng, a_shape)}, f"MatMul with a packed static in1, t0={t0} t1={t1}")


# ---- convolutions ----------------------------------------------------------------------------
@given(n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), cig=st.integers(1, 5),
       cog=st.integers(1, 6), group=st.sampled_from([1, 1, 2, 3]), fh=st.integers(1, 3),
       fw=st.integers(1, 3), sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 2),
       dw=st.integers(1, 2), pads=st.tuples(*[st.integers(0, 2)] * 4), static_f=st.booleans(),
       bias=st.booleans(), fp16=st.booleans(), seed=st.integers(0, 2**31))
def test_conv2d_bit_identical(n, h, w, cig, cog, group, fh, fw, sh, sw, dh, dw, pads, static_f,
                              bias, fp16, seed):
    pt, pb, pl, pr = pads
    oh = (h + pt + pb - ((fh - 1) * dh + 1)) // sh + 1
    ow = (w + pl + pr - ((fw - 1) * dw + 1)) // sw + 1
    if h + pt + pb < (fh - 1) * dh + 1 or w + pl + pr < (fw - 1) * dw + 1:
        return
    rng = np.random.default_rng(seed)
    c_in, c_out = cig * group, cog * group
    b = GraphBuilder(context(fp16), "conv")
    x = b.tensor("x", (n, h, w, c_in), type_=APP_WRITE)
    feeds = {x.id: rand(rng, (n, h, w, c_in), zeros=True)}
    f, fv = operand(b, rng, "f", (fh, fw, cig, c_out), static_f, zeros=True)
    if fv is not None:
        feeds[f.id] = fv
    ins = [x, f]
    if bias:
        ins.append(b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,))))
    y = b.tensor("y", (n, oh, ow, c_out), type_=APP_READ)
    b.node("Conv2d", "conv", ins, [y], stride=[sh, sw], pad_amount=[[pt, pb], [pl, pr]],
           dilation=[dh, dw], group=group)
    check(b, feeds, f"Conv2d x{(n, h, w, c_in)} f{(fh, fw, cig, c_out)} group {group} stride "
                    f"{(sh, sw)} dilation {(dh, dw)} pad {pads} static={static_f} fp16={fp16}")


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_pointwise_and_implicit_gemm(stride):
    """1x1 convolutions (the input as GEMM operand, strided pixels gathered) and 3x3 ones through
    the implicit GEMM over several row blocks, with packed static filters."""
    rng = np.random.default_rng(7)
    for k, c_out in ((1, 96), (3, 64)):
        b = GraphBuilder(new_context(), "pw")
        x = b.tensor("x", (1, 12, 11, 48), type_=APP_WRITE)
        f = b.tensor("f", (k, k, 48, c_out), type_=STATIC, data=rand(rng, (k, k, 48, c_out)))
        bias = b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,)))
        o = (12 - k) // stride + 1, (11 - k) // stride + 1
        y = b.tensor("y", (1,) + o + (c_out,), type_=APP_READ)
        b.node("Conv2d", "conv", [x, f, bias], [y], stride=[stride, stride])
        check(b, {x.id: rand(rng, (1, 12, 11, 48))}, f"Conv2d {k}x{k} stride {stride}")


# (n, h, w, c_in, fh, fw, c_out, stride, pad, dilation, group): the implicit GEMM's cases --
# channels per tap below 16 (row blocks filled) and above (per-tap segments, merged where taps
# are contiguous), several K blocks (K > 320), several row blocks, a last column panel of at most
# 16, every row count of a last tile, padding on every side, dilation, groups
IMPLICIT_CASES = [
    (1, 23, 21, 3, 7, 7, 20, 2, 3, 1, 1),
    (2, 9, 10, 40, 3, 3, 33, 1, 1, 1, 1),
    (1, 8, 9, 64, 3, 3, 48, 1, 2, 2, 1),
    (1, 5, 7, 96, 2, 3, 70, 2, 1, 1, 1),
    (1, 13, 11, 16, 3, 3, 16, 1, 1, 1, 1),
    (1, 7, 7, 48, 3, 3, 40, 1, 1, 1, 4),
    (1, 6, 5, 8, 5, 1, 12, 1, 2, 1, 2),
]


@pytest.mark.parametrize("case", IMPLICIT_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("static_f", [True, False])
def test_conv2d_implicit_gemm_cases(case, static_f):
    n, h, w, c_in, fh, fw, c_out, s, pad, d, group = case
    oh = (h + 2 * pad - ((fh - 1) * d + 1)) // s + 1
    ow = (w + 2 * pad - ((fw - 1) * d + 1)) // s + 1
    rng = np.random.default_rng(sum(case))
    b = GraphBuilder(new_context(), "implicit")
    x = b.tensor("x", (n, h, w, c_in), type_=APP_WRITE)
    feeds = {x.id: rand(rng, (n, h, w, c_in), zeros=True)}
    f, fv = operand(b, rng, "f", (fh, fw, c_in // group, c_out), static_f, zeros=True)
    if fv is not None:
        feeds[f.id] = fv
    bias = b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,)))
    y = b.tensor("y", (n, oh, ow, c_out), type_=APP_READ)
    b.node("Conv2d", "conv", [x, f, bias], [y], stride=[s, s], pad_amount=[[pad, pad], [pad, pad]],
           dilation=[d, d], group=group)
    check(b, feeds, f"Conv2d {case} static={static_f}")


def test_implicit_gemm_equals_gemm_on_the_im2col_matrix(monkeypatch):
    """qe_sconv2d gives the bytes of qe_sgemm on the im2col matrix (same K blocks, same chains
    of multiply-adds), on 1 and 2 threads (split by rows or columns), for segment-read and
    row-filled inputs."""
    monkeypatch.setattr(_fast, "SINGLE_THREAD_MAX_FMAS", 0)    # let every product split
    lib = _fast._lib
    prev = lib.qe_threads()
    rng = np.random.default_rng(29)
    try:
        for (h, c_in, k, c_out, s, pad) in ((112, 3, 7, 64, 2, 3), (30, 48, 3, 72, 1, 1), (4, 160, 3, 600, 1, 1)):
            x = rand(rng, (1, h, h, c_in), zeros=True)
            f = rand(rng, (k * k * c_in, c_out), zeros=True)
            bias = rand(rng, (c_out,))
            o = (h + 2 * pad - k) // s + 1
            cols = _fast.im2col2d(x, (k, k), (s, s), ((pad, pad), (pad, pad)), (1, 1), (o, o), 0, c_in, 0, o * o)
            for t in (1, 2):
                lib.qe_set_threads(t)
                ref = _fast.c_gemm(cols, f, bias)
                got = _fast.conv2d(x, f, bias, (k, k), (s, s), ((pad, pad), (pad, pad)), (1, 1), (o, o), 1, c_out)
                assert got.tobytes() == ref.tobytes(), \
                    f"implicit GEMM {h}x{h}x{c_in} k{k} -> {c_out} on {t} threads equals the im2col GEMM"
    finally:
        lib.qe_set_threads(prev)


@pytest.mark.parametrize("op", ["Conv2d", "DepthWiseConv2d"])
@pytest.mark.parametrize("static_f", [True, False])
def test_one_input_channel_convolutions_run_as_a_gemm(op, static_f):
    """One input channel into many filters (an STFT written as a 1x256 convolution of stride 128,
    as in Silero VAD) is the GEMM of K = taps (qe_k_conv2d), not the depthwise kernel's
    channel-multiplier path, in the C program and the Python plan alike (bit-identical)."""
    rng = np.random.default_rng(5)
    b = GraphBuilder(new_context(), "stft")
    x = b.tensor("x", (1, 1, 640, 1), type_=APP_WRITE)
    feeds = {x.id: rand(rng, (1, 1, 640, 1), zeros=True)}
    f, fv = operand(b, rng, "f", (1, 256, 1, 258), static_f, zeros=True)
    if fv is not None:
        feeds[f.id] = fv
    y = b.tensor("y", (1, 1, 4, 258), type_=APP_READ)
    b.node(op, "conv", [x, f], [y], stride=[1, 128])
    b.graph.finalize()
    names = set(b.graph.plan.engine.kernel_names)
    assert "qe_k_conv2d" in names and "qe_k_depthwise2d" not in names, \
        f"{op} 1x640x1 -> 258 filters runs the GEMM kernel, steps {sorted(names)}"
    check_plan(b.graph.plan, feeds)
    release(b)


@given(h=st.integers(1, 8), w=st.integers(1, 8), c_in=st.integers(1, 6), mult=st.integers(1, 3),
       fh=st.integers(1, 3), fw=st.integers(1, 3), s=st.integers(1, 2), d=st.integers(1, 2),
       pad=st.integers(0, 2), static_f=st.booleans(), bias=st.booleans(), fp16=st.booleans(),
       seed=st.integers(0, 2**31))
def test_depthwise_conv2d_bit_identical(h, w, c_in, mult, fh, fw, s, d, pad, static_f, bias, fp16, seed):
    if h + 2 * pad < (fh - 1) * d + 1 or w + 2 * pad < (fw - 1) * d + 1:
        return
    oh = (h + 2 * pad - ((fh - 1) * d + 1)) // s + 1
    ow = (w + 2 * pad - ((fw - 1) * d + 1)) // s + 1
    rng = np.random.default_rng(seed)
    c_out = c_in * mult
    b = GraphBuilder(context(fp16), "dw")
    x = b.tensor("x", (1, h, w, c_in), type_=APP_WRITE)
    feeds = {x.id: rand(rng, (1, h, w, c_in), zeros=True)}
    f, fv = operand(b, rng, "f", (fh, fw, 1, c_out), static_f)
    if fv is not None:
        feeds[f.id] = fv
    ins = [x, f]
    if bias:
        ins.append(b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,))))
    y = b.tensor("y", (1, oh, ow, c_out), type_=APP_READ)
    b.node("DepthWiseConv2d", "dw", ins, [y], stride=[s, s], pad_amount=[[pad, pad], [pad, pad]],
           dilation=[d, d])
    check(b, feeds, f"DepthWiseConv2d x{(1, h, w, c_in)} f{(fh, fw, 1, c_out)} s{s} d{d} p{pad}")


@pytest.mark.parametrize("mult,k,s,pad", [(2, 3, 1, 1), (3, 5, 2, 2), (7, 3, 1, 0)])
def test_depthwise_channel_multiplier_sums_taps_in_order(mult, k, s, pad):
    """A channel multiplier above 1 (each input channel feeding ``mult`` outputs): the bias, then
    per tap in order the float32 product added (no fused multiply-add), as a multiplier of 1
    sums; the vector path of the expanded input pixel gives exactly those bytes."""
    rng = np.random.default_rng(mult * 10 + k)
    h, w, c_in = 9, 8, 5
    c_out = c_in * mult
    x = rand(rng, (1, h, w, c_in), zeros=True)
    f, bias = rand(rng, (k, k, 1, c_out)), rand(rng, (c_out,))
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    got = _fast.depthwise2d(x, f, bias, (s, s), ((pad, pad), (pad, pad)), (1, 1), (oh, ow))
    want = np.empty_like(got)
    for oy in range(oh):
        for ox in range(ow):
            acc = bias.copy()
            for ky in range(k):
                for kx in range(k):
                    iy, ix = oy * s - pad + ky, ox * s - pad + kx
                    if 0 <= iy < h and 0 <= ix < w:
                        acc = acc + np.repeat(x[0, iy, ix], mult) * f[ky, kx, 0]
            want[0, oy, ox] = acc
    assert got.tobytes() == want.tobytes(), f"multiplier {mult}, {k}x{k} stride {s}: taps summed in order"


@pytest.mark.parametrize("k,s,c,w", [(3, 1, 40, 11), (3, 2, 16, 11), (5, 1, 24, 11), (5, 2, 7, 11),
                                     (3, 1, 17, 29), (5, 1, 33, 30), (5, 2, 18, 31)])
def test_depthwise_register_filter_kernels(k, s, c, w):
    """3x3 and 5x5 depthwise steps (the AVX-512 kernels: stride 1 in blocks of 8 pixels, inside
    the row or with the outside taps masked; other strides with the filter in registers, interior
    runs of 4 pixels and borders; a channel tail) run in C, bit identical."""
    rng = np.random.default_rng(k * 100 + s * 10 + c + w)
    h, pad = 13, k // 2
    oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    b = GraphBuilder(new_context(), "dwk")
    x = b.tensor("x", (1, h, w, c), type_=APP_WRITE)
    f = b.tensor("f", (k, k, 1, c), type_=STATIC, data=rand(rng, (k, k, 1, c), zeros=True))
    bias = b.tensor("b", (c,), type_=STATIC, data=rand(rng, (c,)))
    y = b.tensor("y", (1, oh, ow, c), type_=APP_READ)
    b.node("DepthWiseConv2d", "dw", [x, f, bias], [y], stride=[s, s], pad_amount=[[pad, pad], [pad, pad]])
    check(b, {x.id: rand(rng, (1, h, w, c), zeros=True)}, f"DepthWiseConv2d {k}x{k} s{s} c{c}")


DEPTHWISE_PROBE = """
import hashlib, numpy as np
from qnnemu.ops import _fast
rng = np.random.default_rng(5)
out = []
for h, w, c, k, s in [(13, 11, 40, 3, 1), (12, 9, 19, 3, 2), (10, 12, 24, 5, 1), (9, 7, 7, 5, 2),
                      (5, 29, 33, 3, 1), (6, 30, 17, 5, 1), (7, 31, 18, 5, 2)]:
    x = rng.standard_normal((1, h, w, c)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = -0.0
    f = rng.standard_normal((k, k, 1, c)).astype(np.float32)
    p = k // 2
    o = ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
    for bias in (None, rng.standard_normal(c).astype(np.float32)):
        out.append(_fast.depthwise2d(x, f, bias, (s, s), ((p, p), (p, p)), (1, 1), o).tobytes())
print(hashlib.sha256(b"".join(out)).hexdigest())
"""


def test_depthwise_avx512_equals_avx2():
    """The AVX-512 depthwise kernels compute every channel as the AVX2 kernel does (bias or 0,
    then + in * w per tap, no fused multiply-add): the same bytes with QNNEMU_KERNELS_ISA=avx2."""
    if not _fast._lib.qe_gemm_avx512():
        pytest.skip("no AVX-512 on this CPU")
    digests = digests_by_isa(DEPTHWISE_PROBE, "depthwise")
    assert digests["avx512"] == digests["avx2"], f"AVX-512 and AVX2 depthwise results are the same bytes: {digests}"


@given(h=st.integers(1, 6), w=st.integers(1, 6), cig=st.integers(1, 4), cog=st.integers(1, 4),
       group=st.sampled_from([1, 1, 2]), fh=st.integers(1, 3), fw=st.integers(1, 3),
       s=st.integers(1, 3), pad=st.integers(0, 1), out_pad=st.integers(0, 1), bias=st.booleans(),
       fp16=st.booleans(), seed=st.integers(0, 2**31))
def test_transpose_conv2d_bit_identical(h, w, cig, cog, group, fh, fw, s, pad, out_pad, bias, fp16, seed):
    if out_pad >= s:
        return
    oh = s * (h - 1) + fh - 2 * pad + out_pad
    ow = s * (w - 1) + fw - 2 * pad + out_pad
    if oh < 1 or ow < 1:
        return
    rng = np.random.default_rng(seed)
    c_in, c_out = cig * group, cog * group
    b = GraphBuilder(context(fp16), "tconv")
    x = b.tensor("x", (1, h, w, c_in), type_=APP_WRITE)
    f = b.tensor("f", (fh, fw, c_in, cog), type_=STATIC, data=rand(rng, (fh, fw, c_in, cog)))
    ins = [x, f]
    if bias:
        ins.append(b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,))))
    y = b.tensor("y", (1, oh, ow, c_out), type_=APP_READ)
    b.node("TransposeConv2d", "tconv", ins, [y], stride=[s, s], pad_amount=[[pad, pad], [pad, pad]],
           output_padding=[out_pad, out_pad], group=group)
    check(b, {x.id: rand(rng, (1, h, w, c_in), zeros=True)},
          f"TransposeConv2d x{(1, h, w, c_in)} f{(fh, fw, c_in, cog)} group {group} s{s} p{pad} op{out_pad}")


def test_conv_relu_folded_runs_in_c():
    """A Conv2d followed by Relu on the float path: the plan folds the activation into the
    producer's step (plan.ActivationEpilogue); both steps run in C, bit identical."""
    rng = np.random.default_rng(13)
    b = GraphBuilder(new_context(), "convrelu")
    x = b.tensor("x", (1, 6, 6, 3), type_=APP_WRITE)
    f = b.tensor("f", (3, 3, 3, 8), type_=STATIC, data=rand(rng, (3, 3, 3, 8)))
    c = b.tensor("c", (1, 6, 6, 8))
    b.node("Conv2d", "conv", [x, f], [c], pad_amount=[[1, 1], [1, 1]])
    y = b.tensor("y", (1, 6, 6, 8), type_=APP_READ)
    b.node("Relu", "relu", [c], [y])
    b.graph.finalize()
    engine = b.graph.plan.engine
    assert b.graph.plan.float_folds == {1: 0}, f"the Relu is folded: {b.graph.plan.float_folds}"
    assert engine.fallbacks == [], f"both steps run in C: {engine.fallbacks}"
    check_plan(b.graph.plan, {x.id: rand(rng, (1, 6, 6, 3))})
    release(b)


FOLD_PRODUCERS = ["Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul"]


@given(producer=st.sampled_from(FOLD_PRODUCERS), activation=st.sampled_from(["relu", "clip", "silu", "silu_sx"]),
       hw=st.integers(1, 12), c_in=st.sampled_from([3, 8, 16, 33]), c_out=st.sampled_from([5, 16, 32, 40]),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), bias=st.booleans(), fp16=st.booleans(),
       tiny=st.booleans(), seed=st.integers(0, 2**31))
def test_folded_activation_bit_identical(producer, activation, hw, c_in, c_out, k, stride, bias, fp16, tiny,
                                         seed):
    """A Relu / ReluMinMax / SiLU (Sigmoid, then x * s or s * x; in float16 math each rounding)
    folded into a float producer (the kernels' epilogue): the engine equals the plan, and the plan equals
    the unfolded plan (compile_plan(fold_relu=False)), byte for byte, over shapes that take every
    micro-kernel (partial tiles, narrow panels, 1x1 and implicit-GEMM convolutions, strides) with
    signed zeros, and NaN but for SiLU (numpy's product of two NaNs takes either operand,
    test_engine_eltwise_folds.special); ``tiny`` scales the input so that most results are float16
    subnormals (their own lanes of the epilogue's rounding, csrc/engine.c fp16_round16)."""
    silu = activation.startswith("silu")
    from qnnemu.core.plan import compile_plan
    rng = np.random.default_rng(seed)
    b = GraphBuilder(context(fp16), "fold")
    if producer in ("FullyConnected", "MatMul"):
        xs, cs = (hw * 3, c_in), (hw * 3, c_out)
        ws = (c_out, c_in) if producer == "FullyConnected" else (c_in, c_out)
        params = {}
    else:
        pad = k // 2
        o = (hw + 2 * pad - k) // stride + 1
        c_out = c_in if producer == "DepthWiseConv2d" else c_out
        xs, cs = (1, hw, hw, c_in), (1, o, o, c_out)
        ws = (k, k, 1 if producer == "DepthWiseConv2d" else c_in, c_out)
        params = dict(stride=[stride, stride], pad_amount=[[pad, pad], [pad, pad]])
    x = b.tensor("x", xs, type_=APP_WRITE)
    xv = rand(rng, xs, zeros=True)
    if tiny:
        xv *= np.float32(1e-5)
    if not silu:
        xv.reshape(-1)[rng.integers(0, xv.size, max(xv.size // 40, 1))] = np.nan
    w = b.tensor("w", ws, type_=STATIC, data=rand(rng, ws))
    ins = [x, w]
    if bias and producer != "MatMul":
        ins.append(b.tensor("b", (c_out,), type_=STATIC, data=rand(rng, (c_out,))))
    c = b.tensor("c", cs)
    b.node(producer, "p", ins, [c], **params)
    y = b.tensor("y", cs, type_=APP_READ)
    if activation == "clip":
        b.node("ReluMinMax", "a", [c], [y], min_value=-0.25, max_value=0.5)
    elif activation == "relu":
        b.node("Relu", "a", [c], [y])
    else:
        sig = b.tensor("s", cs)
        b.node("Sigmoid", "a", [c], [sig])
        b.node("ElementWiseMultiply", "m", [c, sig] if activation == "silu" else [sig, c], [y])
    what = f"{producer} x{xs} w{ws} {activation} fp16={fp16} tiny={tiny}"
    want = {1: 2, 2: 0} if silu else {1: 0}
    try:
        b.graph.finalize()
        plan = b.graph.plan
        assert plan.float_folds == want, f"{what}: folds {plan.float_folds}, expected {want}"
        assert plan.engine.fallbacks == [], f"{what}: both steps in C ({plan.engine.fallbacks})"
        check_plan(plan, {x.id: xv})
        got = plan.run({x.id: xv}, [y.id])[y.id]
        ref = compile_plan(b.graph, fold_relu=False).run({x.id: xv}, [y.id])[y.id]
        assert got.tobytes() == ref.tobytes(), f"{what}: folded bytes == unfolded bytes"
    finally:
        release(b)


def test_blas_backend_declines(monkeypatch):
    """With QNNEMU_GEMM=blas the Python steps multiply in numpy, which C cannot reproduce: the
    GEMM steps fall back, saying why."""
    monkeypatch.setattr(_fast, "_gemm_c", False)
    rng = np.random.default_rng(17)
    b = GraphBuilder(new_context(), "blas")
    x = b.tensor("x", (4, 8), type_=APP_WRITE)
    w = b.tensor("w", (5, 8), type_=STATIC, data=rand(rng, (5, 8)))
    y = b.tensor("y", (4, 5), type_=APP_READ)
    b.node("FullyConnected", "fc", [x, w], [y])
    b.graph.finalize()
    fallbacks = b.graph.plan.engine.fallbacks
    assert [(name, op) for name, op, _ in fallbacks] == [("fc", "FullyConnected")], \
        f"FullyConnected falls back with BLAS GEMMs: {fallbacks}"
    assert "numpy" in fallbacks[0][2], f"the reason names the BLAS path: {fallbacks[0][2]}"
    check_plan(b.graph.plan, {x.id: rand(rng, (4, 8))})
    release(b)


# ---- the C GEMM itself -----------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(200, 70, 300), (40, 700, 650), (7, 3000, 64), (3000, 40, 200)])
@pytest.mark.parametrize("packed", [False, True])
def test_c_gemm_results_do_not_depend_on_the_thread_count(shape, packed):
    """Splits over 1, 2, 3 and 8 threads (by rows or by columns; static halves, or chunks taken
    in turn with a pre-packed B) give the same bytes: the engine and the Python path may run
    one product with different thread limits."""
    m, n, k = shape
    rng = np.random.default_rng(19)
    a, bm, bias = rand(rng, (m, k), zeros=True), rand(rng, (k, n), zeros=True), rand(rng, (n,))
    pb = _fast.PackedB(bm) if packed else None
    lib = _fast._lib
    prev = lib.qe_threads()
    results = []
    try:
        for t in (1, 2, 3, 8):
            lib.qe_set_threads(t)
            for bb in (None, bias):
                y = np.empty((m, n), np.float32)
                if packed:
                    rc = lib.qe_sgemm_packed(m, n, k, _fast._ptr(a), k, 1, _fast._ptr(pb.buf), _fast._ptr(y),
                                             n, _fast._ptr(bb))
                else:
                    rc = lib.qe_sgemm(m, n, k, _fast._ptr(a), k, 1, _fast._ptr(bm), n, 1, _fast._ptr(y), n,
                                      _fast._ptr(bb))
                assert rc == 0, "the GEMM ran"
                results.append((t, bb is None, y.tobytes()))
    finally:
        lib.qe_set_threads(prev)
    for t, nob, got in results:
        ref = next(r for tt, nb, r in results if tt == 1 and nb == nob)
        assert got == ref, f"GEMM {shape} packed={packed} (bias: {not nob}) on {t} threads equals the 1-thread result"


@pytest.mark.parametrize("k", [1, 77, 700])
def test_few_row_products_equal_the_six_row_kernel(k):
    """Products of 1 to 3 rows (FullyConnected on a batch of 1) run a micro-kernel of their own
    rows: with a bias, their bytes equal the same rows of a 6-row product (the 6-row kernel)."""
    rng = np.random.default_rng(23)
    a, bm, bias = rand(rng, (6, k), zeros=True), rand(rng, (k, 75), zeros=True), rand(rng, (75,))
    full = _fast.c_gemm(a, bm, bias)
    for rows in (1, 2, 3):
        got = _fast.c_gemm(np.ascontiguousarray(a[:rows]), bm, bias)
        assert got.tobytes() == full[:rows].tobytes(), f"{rows} x {k} x 75 product equals the 6-row kernel's rows"
