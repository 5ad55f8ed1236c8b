"""The C kernels (qnnemu._kernels via qnnemu.ops._fast) against the numpy reference ops:
float32 GEMM (FullyConnected, MatMul) and Conv2d/DepthWiseConv2d, on random shapes with odd
sizes, groups, dilation, strides and padding, plus blocking edges of the GEMM.

Skipped when the extension is not built (python csrc/build_kernels.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.headers import Q
from qnnemu.ops import Param, TensorSpec, _fast
from qnnemu.ops.conv import conv2d_reference, conv_output_size

pytestmark = pytest.mark.skipif(
    not _fast.available(),
    reason="qnnemu._kernels is not built; run `python csrc/build_kernels.py` first")

RNG = np.random.default_rng(99)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def assert_close(got, ref, what, rel=1e-5):
    """Within rel of the result scale (float32 accumulation order differs between the two)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} == {ref.shape}"
    if ref.size == 0:
        return
    scale = float(np.max(np.abs(ref)))
    err = float(np.max(np.abs(got - ref)))
    assert err <= rel * scale + 1e-30, f"{what}: max error {err:.3g} <= {rel} * scale {scale:.3g}"


def run_both(op_type, arrays, params):
    """Runs an op with config.kernels = "reference" and "fast"; returns both outputs."""
    cls = ops.get(op_type)
    ps = {}
    for k, v in params.items():
        if isinstance(v, bool):
            ps[k] = Param(k, "scalar", Q.QNN_DATATYPE_BOOL_8, v)
        elif isinstance(v, int):
            ps[k] = Param(k, "scalar", Q.QNN_DATATYPE_UINT_32, v)
        else:
            ps[k] = Param(k, "tensor", Q.QNN_DATATYPE_UINT_32, np.asarray(v, np.uint32))
    specs = [TensorSpec(a.shape, dtypes.from_numpy(a.dtype)) for a in arrays]
    outs = cls.check(specs, ps)
    op = cls(cls.parse_params(ps), specs, outs)
    old = ops.config.kernels
    try:
        ops.config.kernels = "reference"
        (ref,) = op.run(*arrays)
        ops.config.kernels = "fast"
        (fast,) = op.run(*arrays)
    finally:
        ops.config.kernels = old
    return fast, ref


def ref64(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (1, 17, 3), (7, 1, 5), (6, 16, 256),
                                   (13, 33, 257), (121, 95, 300), (37, 2050, 19),
                                   (130, 7, 513), (0, 4, 3), (3, 4, 0)])
def test_gemm_shapes(m, n, k):
    a, b, bias = rand(m, k), rand(k, n), rand(n)
    assert_close(_fast.gemm(a, b), ref64(a, b), f"gemm {m}x{n}x{k} vs float64")
    assert_close(_fast.gemm(a, b, bias), ref64(a, b) + bias, f"gemm+bias {m}x{n}x{k}")


def test_gemm_transposed_views_need_no_copy():
    a, b = rand(40, 23), rand(31, 40)  # a.T: [23, 40], b.T: [40, 31]
    assert_close(_fast.gemm(a.T, b.T), ref64(a.T, b.T), "gemm on F-contiguous (transposed) views")
    sa, sb = rand(23, 80)[:, ::2], rand(40, 93)[:, ::3]  # [23, 40] @ [40, 31], strided
    assert_close(_fast.gemm(sa, sb), ref64(sa, sb), "gemm on non-contiguous views (copied)")


@pytest.mark.parametrize("seed", range(8))
def test_fully_connected_random(seed):
    rng = np.random.default_rng(seed)
    n, k, m = (int(v) for v in rng.integers(1, 70, 3))
    x, w, b = rand(n, k), rand(m, k), rand(m)
    fast, ref = run_both("FullyConnected", [x, w, b], {})
    assert_close(fast, ref, f"FullyConnected fast vs reference n={n} k={k} m={m}")


@pytest.mark.parametrize("as_,bs,ta,tb", [
    ((3, 5, 7), (3, 7, 9), False, False), ((2, 1, 7, 5), (4, 7, 3), True, False),
    ((9, 13), (2, 11, 13), False, True), ((2, 3, 6, 5), (1, 3, 4, 6), True, True),
    ((1, 65, 130), (130, 33), False, False),
])
def test_matmul_random(as_, bs, ta, tb):
    fast, ref = run_both("MatMul", [rand(*as_), rand(*bs)],
                         {"transpose_in0": ta, "transpose_in1": tb})
    assert_close(fast, ref, f"MatMul fast vs reference {as_}x{bs} t0={ta} t1={tb}")


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


@pytest.mark.parametrize("seed", range(20))
def test_conv2d_random(seed):
    xs, fs, params = _conv_case(np.random.default_rng(seed))
    fast, ref = run_both("Conv2d", [rand(*xs), rand(*fs), rand(fs[3])], params)
    assert_close(fast, ref, f"Conv2d fast vs reference x{xs} f{fs} {params}")


@pytest.mark.parametrize("seed", range(8))
def test_depthwise_random(seed):
    rng = np.random.default_rng(100 + seed)
    c, mult = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    params = {"stride": [int(rng.integers(1, 3))] * 2, "dilation": [int(rng.integers(1, 3))] * 2,
              "pad_amount": [[1, 1], [1, 1]]}
    xs, fs = (1, int(rng.integers(5, 13)), int(rng.integers(5, 13)), c), (3, 3, 1, c * mult)
    fast, ref = run_both("DepthWiseConv2d", [rand(*xs), rand(*fs), rand(c * mult)], params)
    assert_close(fast, ref, f"DepthWiseConv2d fast vs reference x{xs} f{fs} {params}")


def test_conv2d_large_chunks_and_pointwise():
    # K = 3*3*64 = 576 -> im2col runs in several pixel chunks; 1x1 uses the input directly.
    x, w = rand(1, 40, 40, 64), rand(3, 3, 64, 24)
    oh = conv_output_size(40, 1, 1, 3, 1, 1)
    got = _fast.conv2d(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, (oh, oh))
    ref = conv2d_reference(x.astype(np.float64), w.astype(np.float64), None, (1, 1),
                           ((1, 1), (1, 1)), (1, 1), 1, (oh, oh))
    assert_close(got, ref, "Conv2d 40x40x64 3x3 (chunked im2col) vs float64")
    w1 = rand(1, 1, 64, 10)
    got = _fast.conv2d(x, w1, None, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, (40, 40))
    assert_close(got, ref64(x.reshape(-1, 64), w1.reshape(64, 10)).reshape(1, 40, 40, 10),
                 "pointwise Conv2d vs float64 GEMM")


def test_isa_reported():
    assert _fast.isa() in ("avx2", "sse"), f"micro-kernel selected at run time: {_fast.isa()}"
