"""The fast kernels against the numpy reference ops: the C kernels of qnnemu._kernels
(GEMM with its thread splits and pre-packed operands, im2col, col2im, depthwise convolution,
pooling; via qnnemu.ops._fast) and the BLAS GEMM path, on random shapes with odd sizes,
groups, dilation, strides, padding and channel counts around the C kernels' vector blocks
(8 and 32 floats); op-level tests run with both GEMM backends ("c" and "blas"); the baseline
(SSE) and AVX2 variants run in subprocesses with QNNEMU_KERNELS_ISA=sse / avx2.

Skipped when the extension is not built (python csrc/build_kernels.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.kernel_compare import assert_close, rand, ref64, run_both

from qnnemu import ops
from qnnemu.ops import _fast
from qnnemu.ops.conv import Geometry, _im2col_numpy, conv_output_size

pytestmark = pytest.mark.skipif(
    not _fast.available(),
    reason="qnnemu._kernels is not built; run `python csrc/build_kernels.py` first")



@pytest.fixture(params=["c", "blas"])
def gemm_backend(request, monkeypatch):
    """The test runs with the GEMMs in C and in numpy's BLAS."""
    _fast.gemm_backend()  # decide (and set the thread count) first
    monkeypatch.setattr(_fast, "_gemm_c", request.param == "c")
    return request.param


# ---- GEMM ------------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1, 17, 3), (7, 1, 5), (6, 32, 320), (13, 33, 257),
                                   (121, 95, 300), (0, 4, 3), (3, 4, 0), (5, 70, 641)])
def test_gemm_shapes(m, n, k, gemm_backend):
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    assert_close(_fast.gemm(a, b), ref64(a, b), f"gemm {m}x{n}x{k} vs float64")
    assert_close(_fast.gemm(a, b, bias), ref64(a, b) + bias, f"gemm+bias {m}x{n}x{k}")


def test_gemm_transposed_and_strided_views(gemm_backend):
    a, b = rand(40, 23), rand(31, 40)  # a.T: [23, 40], b.T: [40, 31]
    assert_close(_fast.gemm(a.T, b.T), ref64(a.T, b.T), "gemm on F-contiguous (transposed) views")
    sa, sb = rand(23, 80)[:, ::2], rand(40, 93)[:, ::3]  # [23, 40] @ [40, 31], strided
    assert_close(_fast.gemm(sa, sb), ref64(sa, sb), "gemm on non-contiguous views")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m,n,k", [(517, 67, 400), (37, 1031, 350), (600, 600, 40)])
def test_c_gemm_thread_splits_and_packed_operand(threads, m, n, k, monkeypatch):
    """Large enough (>= 3 * 2**22 multiply-adds) to be split over up to 3 threads: by rows
    when m >= n, by columns otherwise; with B as given and pre-packed, with and without
    bias.  (Products this small run on one thread by default: SINGLE_THREAD_MAX_FMAS 0 lets
    them split.)"""
    monkeypatch.setattr(_fast, "SINGLE_THREAD_MAX_FMAS", 0)
    old = _fast.threads()
    _fast.set_threads(threads)
    try:
        a, b, bias = rand(m, k), rand(k, n), rand(n)
        ref = ref64(a, b)
        assert_close(_fast.c_gemm(a, b), ref, f"C gemm {m}x{n}x{k} on {threads} threads")
        packed = _fast.PackedB(b)
        assert_close(_fast.c_gemm(a, packed, bias), ref + bias,
                     f"C gemm with pre-packed B {m}x{n}x{k} on {threads} threads")
        out = np.full((m + 2, n), np.nan, np.float32)
        _fast.c_gemm(a, packed, None, out=out[1:m + 1])
        assert_close(out[1:m + 1], ref, "C gemm into a row slice of a larger output")
        assert np.isnan(out[0]).all() and np.isnan(out[m + 1]).all(), \
            "rows around the output slice are untouched"
        _fast.set_threads(1)
        assert np.array_equal(_fast.c_gemm(a, packed, bias), _fast.c_gemm(a, b, bias)), \
            "packed and plain B give bitwise equal results"
        one = _fast.c_gemm(a, b, bias)
        _fast.set_threads(threads)
        assert np.array_equal(_fast.c_gemm(a, b, bias), one), \
            f"the split over {threads} threads does not change any sum (bitwise equal)"
    finally:
        _fast.set_threads(old)


def test_c_gemm_batched_threads(monkeypatch):
    monkeypatch.setattr(_fast, "SINGLE_THREAD_MAX_FMAS", 0)   # split even these small batches
    old = _fast.threads()
    _fast.set_threads(2)
    try:
        a, b = rand(5, 1, 33, 70), rand(3, 70, 41)
        assert_close(_fast._c_matmul(a, b), np.matmul(a.astype(np.float64), b.astype(np.float64)),
                     "batched C GEMM [5,1] x [3] broadcast over 2 threads")
        at, bt = rand(4, 70, 33), rand(4, 41, 70)  # transposed (swapped-axes) operands
        want = np.matmul(np.swapaxes(at, -1, -2).astype(np.float64),
                         np.swapaxes(bt, -1, -2).astype(np.float64))
        assert_close(_fast._c_matmul(np.swapaxes(at, -1, -2), np.swapaxes(bt, -1, -2)), want,
                     "batched C GEMM on swapped-axes views")
    finally:
        _fast.set_threads(old)


class _OneThreadSpy:
    """Counts the blocks ``_fast`` runs limited to the calling thread."""

    entered = 0

    def __init__(self):
        self.inner = _real_one_thread()

    def __enter__(self):
        type(self).entered += 1
        self.limit_before = int(_fast._lib.qe_call_threads())
        self.inner.__enter__()
        assert int(_fast._lib.qe_call_threads()) == 1, "inside the block the C kernels use 1 thread"

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)
        assert int(_fast._lib.qe_call_threads()) == self.limit_before, \
            "the calling thread's own limit is restored after the block"


_real_one_thread = _fast._OneThread


@pytest.mark.parametrize("shape", [(32, 256, 256), (16, 1024, 128)])
def test_small_products_run_on_the_calling_thread(shape, gemm_backend, monkeypatch):
    """GEMMs below SINGLE_THREAD_MAX_FMAS run in the C GEMM on the calling thread with either
    backend: splitting them gains nothing measurable, and in BLAS a second thread waiting for a
    busy core cost 15-60 ms per step on a loaded machine (docs/gemm-threads.md).  Integer-valued operands, as the
    8/16-bit integer pipeline passes them, give the exact products (bitwise equal to float64)."""
    if not _fast.single_thread_c():
        pytest.skip("the C GEMM has no AVX-512 micro-kernel here: small products stay in BLAS")
    m, k, n = shape
    assert m * k * n < _fast.SINGLE_THREAD_MAX_FMAS, f"{shape} is a small product"
    monkeypatch.setattr(_OneThreadSpy, "entered", 0)
    monkeypatch.setattr(_fast, "_OneThread", _OneThreadSpy)
    calls = []
    real_c_gemm = _fast.c_gemm
    monkeypatch.setattr(_fast, "c_gemm", lambda *a, **kw: calls.append(1) or real_c_gemm(*a, **kw))
    rng = np.random.default_rng(1)
    x = rng.integers(-255, 256, (m, k)).astype(np.float32)     # codes + offset
    w = rng.integers(-128, 128, (n, k)).astype(np.float32)     # int8 weights
    lib = _fast._lib
    lib.qe_set_call_threads(3)   # a limit of the caller's own (qnnemu/core/threads.py)
    try:
        y = _fast.gemm(x, w.T)
        assert int(lib.qe_call_threads()) == 3, "the caller's limit is back after the GEMM"
    finally:
        lib.qe_set_call_threads(0)
    assert calls, f"{shape} ran in the C GEMM with the {gemm_backend} backend"
    assert _OneThreadSpy.entered == 1, f"{shape} ran limited to the calling thread once"
    assert np.array_equal(y.astype(np.float64), x.astype(np.float64) @ w.T.astype(np.float64)), \
        f"integer-valued {shape} product is exact"


def test_small_batched_matmul_runs_on_the_calling_thread(gemm_backend, monkeypatch):
    """Attention MatMuls below SINGLE_THREAD_MAX_FMAS (two heads of the benchmark BERT's
    [1,4,128,64] x [1,4,64,128], 2^21 multiply-adds) take the batched C GEMM on the calling
    thread, exactly."""
    if not _fast.single_thread_c():
        pytest.skip("the C GEMM has no AVX-512 micro-kernel here: small products stay in BLAS")
    monkeypatch.setattr(_OneThreadSpy, "entered", 0)
    monkeypatch.setattr(_fast, "_OneThread", _OneThreadSpy)
    rng = np.random.default_rng(2)
    a = rng.integers(-255, 256, (1, 2, 128, 64)).astype(np.float32)
    b = rng.integers(-128, 128, (1, 2, 64, 128)).astype(np.float32)
    y = _fast.matmul(a, b)
    assert _OneThreadSpy.entered == 1, "the batch ran limited to the calling thread"
    assert np.array_equal(y.astype(np.float64), np.matmul(a.astype(np.float64), b.astype(np.float64))), \
        "integer-valued batched product is exact"


def test_gemm_backend_choice_is_reported():
    core, threads = _fast.blas_core()
    assert core is None or isinstance(core, str), f"OpenBLAS core name or None: {core!r}"
    assert _fast.threads() >= 1, f"C GEMM threads: {_fast.threads()}"


@pytest.mark.parametrize("seed", range(6))
def test_fully_connected_random(seed, gemm_backend):
    rng = np.random.default_rng(seed)
    n, k, m = (int(v) for v in rng.integers(1, 70, 3))
    x, w, b = rand(n, k), rand(m, k), rand(m)
    fast, ref = run_both("FullyConnected", [x, w, b], {}, static=(1, 2) if seed % 2 else ())
    assert_close(fast, ref, f"FullyConnected fast vs reference n={n} k={k} m={m}")


@pytest.mark.parametrize("as_,bs,ta,tb", [
    ((3, 5, 7), (3, 7, 9), False, False), ((2, 1, 7, 5), (4, 7, 3), True, False),
    ((9, 13), (2, 11, 13), False, True), ((2, 3, 6, 5), (1, 3, 4, 6), True, True),
    ((1, 65, 130), (130, 33), False, False), ((4, 65, 130), (33, 130), False, True),
])
def test_matmul_random(as_, bs, ta, tb, gemm_backend):
    for static in ((), (1,)):
        fast, ref = run_both("MatMul", [rand(*as_), rand(*bs)],
                             {"transpose_in0": ta, "transpose_in1": tb}, static=static)
        assert_close(fast, ref, f"MatMul fast vs reference {as_}x{bs} t0={ta} t1={tb} "
                                f"static={bool(static)}")


# ---- convolutions ----------------------------------------------------------------------------
def _conv_case(rng):
    group = int(rng.choice([1, 1, 2, 3]))
    cig, cog = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    fh, fw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dil = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    stride = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    pad = [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in range(2)]
    h = int(rng.integers((fh - 1) * dil[0] + 1, 12))
    w = int(rng.integers((fw - 1) * dil[1] + 1, 12))
    n = int(rng.integers(1, 3))
    return (n, h, w, cig * group), (fh, fw, cig, cog * group), \
        {"group": group, "dilation": dil, "stride": stride, "pad_amount": pad}


@pytest.mark.parametrize("seed", range(16))
def test_conv2d_random(seed, gemm_backend):
    xs, fs, params = _conv_case(np.random.default_rng(seed))
    fast, ref = run_both("Conv2d", [rand(*xs), rand(*fs), rand(fs[3])], params,
                         static=(1, 2) if seed % 2 else ())
    assert_close(fast, ref, f"Conv2d fast vs reference x{xs} f{fs} {params}")


@pytest.mark.parametrize("seed", range(10))
def test_im2col2d_matches_numpy(seed):
    rng = np.random.default_rng(200 + seed)
    xs, fs, params = _conv_case(rng)
    fh, fw, cig, _ = fs
    stride, dil, pad = params["stride"], params["dilation"], params["pad_amount"]
    out = tuple(conv_output_size(xs[1 + i], *pad[i], fs[i], stride[i], dil[i]) for i in range(2))
    g = Geometry((fh, fw), tuple(stride), tuple(map(tuple, pad)), tuple(dil),
                 params["group"], out, (0, 0))
    x = rand(*xs)
    want = _im2col_numpy(x, g)  # [group, P, K]
    P = want.shape[1]
    p0 = int(rng.integers(0, P))
    p1 = int(rng.integers(p0 + 1, P + 1))
    for gi in range(g.group):
        got = _fast.im2col2d(x, (fh, fw), stride, pad, dil, out, gi * cig, cig, p0, p1)
        assert np.array_equal(got, want[gi, p0:p1]), \
            f"im2col rows [{p0}, {p1}) group {gi} equal numpy's for x{xs} f{fs} {params}"


@pytest.mark.parametrize("seed", range(10))
def test_depthwise_random(seed):
    rng = np.random.default_rng(100 + seed)
    c = int(rng.choice([1, 3, 8, 13, 32, 40, 67]))
    mult = int(rng.choice([1, 1, 2, 3]))
    params = {"stride": [int(rng.integers(1, 3)), int(rng.integers(1, 3))],
              "dilation": [int(rng.integers(1, 3))] * 2,
              "pad_amount": [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in range(2)]}
    xs, fs = (int(rng.integers(1, 3)), int(rng.integers(5, 11)), int(rng.integers(5, 11)), c), \
        (int(rng.integers(1, 4)), 3, 1, c * mult)
    with_bias = bool(seed % 3)
    arrays = [rand(*xs), rand(*fs)] + ([rand(c * mult)] if with_bias else [])
    fast, ref = run_both("DepthWiseConv2d", arrays, params)
    assert_close(fast, ref, f"DepthWiseConv2d fast vs reference x{xs} f{fs} {params} "
                            f"bias={with_bias}")


@pytest.mark.parametrize("seed", range(10))
def test_transpose_conv2d_random(seed, gemm_backend):
    rng = np.random.default_rng(300 + seed)
    group = int(rng.choice([1, 1, 2, 3]))
    cig, cog = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    k = [int(rng.integers(1, 5)), int(rng.integers(1, 5))]
    stride = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    out_pad = [int(rng.integers(0, s)) for s in stride]
    pad = [[int(rng.integers(0, kk)), int(rng.integers(0, kk))] for kk in k]
    xs = (int(rng.integers(1, 3)), int(rng.integers(1, 7)), int(rng.integers(1, 7)), cig * group)
    params = {"group": group, "stride": stride, "pad_amount": pad, "output_padding": out_pad}
    arrays = [rand(*xs), rand(*k, cig * group, cog), rand(cog * group)]
    try:
        fast, ref = run_both("TransposeConv2d", arrays, params, static=(1,) if seed % 2 else ())
    except ops.OpCheckError as e:  # pads crop everything: not a valid case
        assert "output-size" in e.rule, f"only an empty output is rejected: {e}"
        return
    assert_close(fast, ref, f"TransposeConv2d fast (GEMM + col2im) vs reference x{xs} "
                            f"k{k} {params}")


def test_conv2d_large_chunks_and_pointwise(gemm_backend):
    # K = 3*3*64 = 576 on 40x40: im2col in one chunk; 1x1 uses the input directly.
    x, w = rand(1, 40, 40, 64), rand(3, 3, 64, 24)
    fast, ref = run_both("Conv2d", [x, w], {"pad_amount": [[1, 1], [1, 1]]})
    assert_close(fast, ref, "Conv2d 40x40x64 3x3 fast vs reference")
    w1 = rand(1, 1, 64, 10)
    fast, _ = run_both("Conv2d", [x, w1], {})
    assert_close(fast, ref64(x.reshape(-1, 64), w1.reshape(64, 10)).reshape(1, 40, 40, 10),
                 "pointwise Conv2d vs float64 GEMM")


# ---- pooling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_pool2d_random(seed):
    rng = np.random.default_rng(400 + seed)
    k = [int(rng.integers(1, 5)), int(rng.integers(1, 5))]
    s = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    pad = [[int(rng.integers(0, kk)), int(rng.integers(0, kk))] for kk in k]
    c = int(rng.choice([1, 5, 32, 37]))
    xs = (int(rng.integers(1, 3)), int(rng.integers(k[0], 12)), int(rng.integers(k[1], 12)), c)
    params = {"filter_size": k, "stride": s, "pad_amount": pad,
              "rounding_mode": int(rng.integers(0, 2))}
    x = rand(*xs) - 1.0  # mostly negative: the zero padding of max pooling shows
    fast, ref = run_both("PoolMax2d", [x], params)
    assert_close(fast, ref, f"PoolMax2d C vs reference x{xs} {params}")
    params["count_pad_for_edges"] = bool(seed % 2)
    fast, ref = run_both("PoolAvg2d", [x], params)
    assert_close(fast, ref, f"PoolAvg2d C vs reference x{xs} {params}")


def test_memory_bound_kernels_on_threads():
    """im2col, depthwise and pooling split large outputs over the threads (pixel ranges)."""
    old = _fast.threads()
    _fast.set_threads(3)
    try:
        x = rand(1, 96, 90, 32)
        fast, ref = run_both("DepthWiseConv2d", [x, rand(3, 3, 1, 32), rand(32)],
                             {"pad_amount": [[1, 1], [1, 1]]})
        assert_close(fast, ref, "DepthWiseConv2d 96x90x32 on 3 threads")
        for op in ("PoolMax2d", "PoolAvg2d"):
            fast, ref = run_both(op, [x - 1], {"filter_size": [3, 3], "stride": [1, 1],
                                               "pad_amount": [[1, 1], [1, 1]]})
            assert_close(fast, ref, f"{op} 96x90x32 on 3 threads")
        g = Geometry((3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1, (96, 90), (0, 0))
        got = _fast.im2col2d(x, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (96, 90), 0, 32,
                             17, 96 * 90 - 5)
        assert np.array_equal(got, _im2col_numpy(x, g)[0, 17:96 * 90 - 5]), \
            "im2col rows [17, P-5) on 3 threads equal numpy's"
    finally:
        _fast.set_threads(old)


def test_isa_reported():
    assert _fast.isa() in ("avx2", "sse"), f"kernel variant selected at run time: {_fast.isa()}"


@pytest.mark.parametrize("isa", ["sse", "avx2"])
def test_baseline_variants_in_subprocess(isa):
    """QNNEMU_KERNELS_ISA=sse / avx2 select the baseline / AVX2 variants (also of the C GEMM,
    forced with QNNEMU_GEMM=c); they agree with the reference."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        sys.path.insert(0, TESTS_DIR)
        from helpers import kernel_compare as T
        from qnnemu.ops import _fast
        want = ISA
        assert _fast.isa() == ("sse" if want == "sse" else "avx2"), _fast.isa()
        assert _fast.gemm_backend() == "c", _fast.gemm_backend()
        x = T.rand(1, 9, 8, 37)
        f, r = T.run_both("DepthWiseConv2d", [x, T.rand(3, 3, 1, 37), T.rand(37)],
                          {"pad_amount": [[1, 1], [1, 1]], "stride": [2, 1]})
        T.assert_close(f, r, want + " depthwise")
        f, r = T.run_both("Conv2d", [x, T.rand(3, 2, 37, 5)], {"pad_amount": [[1, 0], [0, 1]]},
                          static=(1,))
        T.assert_close(f, r, want + " im2col conv")
        f, r = T.run_both("TransposeConv2d", [x, T.rand(3, 3, 37, 4)], {"stride": [2, 2]})
        T.assert_close(f, r, want + " col2im")
        for op in ("PoolMax2d", "PoolAvg2d"):
            f, r = T.run_both(op, [x - 1], {"filter_size": [3, 3], "stride": [2, 2],
                                            "pad_amount": [[1, 1], [1, 1]]})
            T.assert_close(f, r, want + " " + op)
        a, b = T.rand(301, 259), T.rand(259, 150)
        T.assert_close(_fast.c_gemm(a, _fast.PackedB(b)), T.ref64(a, b), want + " gemm")
        a, b = T.rand(3, 20, 33), T.rand(3, 33, 17)
        T.assert_close(_fast._c_matmul(a, b), np.matmul(a, b), want + " batched gemm")
        print("ok")
    """).replace("TESTS_DIR", repr(str(Path(__file__).resolve().parent))).replace(
        "ISA", repr(isa))
    env = dict(os.environ, QNNEMU_KERNELS_ISA=isa, QNNEMU_GEMM="c")
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), \
        f"{isa} kernels agree with the reference:\n{proc.stdout}\n{proc.stderr}"
