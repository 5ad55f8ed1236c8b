"""Thread splits of the float kernels of csrc/kernels.c (issue 13: the GEMM, the implicit-GEMM
convolution, depthwise convolution, pooling, im2col) never change a result byte: every kernel
runs here with the split costs set so low that everything splits (``qe_set_split_costs``), on
1, 2 and 5 threads, and the bytes must be those of one thread -- NaNs of both signs and zeros of
both signs included, with and without a folded activation.  The C engine and the Python plan may
run one op with different thread limits (a loaded caller, ``qnnemu/core/threads.py``), so a
result that depended on the split would break their bit identity.  Also: which products the
fast path (``qnnemu/ops/_fast.py``) keeps on the calling thread, and that the AVX-512 max pooling
gives the bytes of the AVX2 one."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.isa_probe import digests_by_isa

from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available() or _fast.gemm_backend() != "c",
                                reason="qnnemu._kernels is not built or QNNEMU_GEMM=blas")

THREADS = (1, 2, 5)
ACTS = ((0, 0.0, 0.0), (1, 0.0, 0.0), (2, -0.5, 0.75))   # none, relu, clip (QE_ACT_*)


def special(rng, shape) -> np.ndarray:
    """Normal values with exact zeros of both signs, NaNs of both signs and infinities."""
    a = rng.standard_normal(shape).astype(np.float32)
    u = rng.random(shape)
    a[u < 0.08] = 0.0
    a[(u >= 0.08) & (u < 0.12)] = -0.0
    a[(u >= 0.12) & (u < 0.13)] = np.inf
    a[(u >= 0.13) & (u < 0.14)] = -np.inf
    bits = a.view(np.uint32)
    bits[(u >= 0.14) & (u < 0.15)] = 0x7FC00001        # +NaN with a payload
    bits[(u >= 0.15) & (u < 0.16)] = 0xFFC00002        # -NaN with a payload
    return a


def plain(rng, shape) -> np.ndarray:
    a = rng.standard_normal(shape).astype(np.float32)
    a[rng.random(shape) < 0.1] = -0.0
    return a


def on_threads(run) -> list[tuple[int, bytes]]:
    """run() -> bytes on each thread count, every kernel splitting as much as it can."""
    lib = _fast._lib
    prev = lib.qe_threads()
    out = []
    try:
        lib.qe_set_split_costs(1.0, 1.0)
        for t in THREADS:
            lib.qe_set_threads(t)
            out.append((t, run()))
    finally:
        lib.qe_set_split_costs(0.0, 0.0)    # the defaults
        lib.qe_set_threads(prev)
    return out


def assert_same(results, what: str) -> None:
    ref = results[0][1]
    for t, got in results[1:]:
        if got != ref:
            a = np.frombuffer(ref, np.uint32)
            b = np.frombuffer(got, np.uint32)
            bad = np.flatnonzero(a != b)
            pytest.fail(f"{what}: {t} threads changed {bad.size} of {a.size} result words "
                        f"(first at {bad[0]}: {a[bad[0]]:#010x} on 1 thread, {b[bad[0]]:#010x})")


P = _fast._ptr


@pytest.mark.parametrize("shape", [(1, 1000, 640), (3, 300, 77), (61, 16, 90), (300, 24, 27),
                                   (49, 160, 300), (500, 70, 513)])
@pytest.mark.parametrize("packed", [False, True])
def test_gemm_split_keeps_bytes(shape, packed):
    """qe_sgemm / qe_sgemm_packed with a folded activation: split by column panels (a
    classifier's single row), by row blocks (16 / 24 columns: one narrow panel), two K blocks."""
    m, n, k = shape
    rng = np.random.default_rng(m * 7 + n)
    a, b, bias = special(rng, (m, k)), special(rng, (k, n)), plain(rng, (n,))
    pb = _fast.PackedB(b) if packed else None
    lib = _fast._lib
    for mode, lo, hi in ACTS:
        for bb in (None, bias):
            def run(bb=bb, mode=mode, lo=lo, hi=hi):
                y = np.empty((m, n), np.float32)
                if packed:
                    rc = lib.qe_sgemm_packed_act(m, n, k, P(a), k, 1, P(pb.buf), P(y), n, P(bb),
                                                 mode, lo, hi)
                else:
                    rc = lib.qe_sgemm_act(m, n, k, P(a), k, 1, P(b), n, 1, P(y), n, P(bb), mode, lo, hi)
                assert rc == 0, "the GEMM ran"
                return y.tobytes()
            assert_same(on_threads(run), f"GEMM {shape} packed={packed} act={mode} bias={bb is not None}")


# (h, w, c_in, fh, fw, c_out, stride, pad, dilation, group): a first layer (3 channels, filter
# rows read in place), a grouped one with few channels per group (row blocks filled), a
# 16-output layer, a strided 1x1, a dilated 3x3, a 5x5 with two K blocks
CONVS = [(23, 29, 3, 3, 3, 32, 2, 1, 1, 1), (17, 15, 8, 3, 3, 12, 1, 1, 1, 2),
         (20, 20, 16, 3, 3, 16, 1, 1, 1, 1), (14, 13, 24, 1, 1, 40, 2, 0, 1, 1),
         (12, 12, 12, 3, 3, 20, 1, 2, 2, 1), (9, 11, 24, 5, 5, 33, 1, 2, 1, 1)]


@pytest.mark.parametrize("case", CONVS)
def test_implicit_gemm_conv_split_keeps_bytes(case):
    """qe_sconv2d_act over segments or filled row blocks, plain and pre-packed filters."""
    h, w, c_in, fh, fw, c_out, s, pad, d, group = case
    rng = np.random.default_rng(h * 31 + c_out)
    cig, cog = c_in // group, c_out // group
    K = fh * fw * cig
    oh = (h + 2 * pad - d * (fh - 1) - 1) // s + 1
    ow = (w + 2 * pad - d * (fw - 1) - 1) // s + 1
    x = special(rng, (2, h, w, c_in))
    f = special(rng, (group, K, cog))
    bias = plain(rng, (c_out,))
    pb = _fast.PackedB(f[0]) if group == 1 else None
    lib = _fast._lib
    for mode, lo, hi in ACTS:
        for packed in ((False, True) if group == 1 else (False,)):
            def run(packed=packed, mode=mode, lo=lo, hi=hi):
                y = np.empty((2 * oh * ow, c_out), np.float32)
                rc = lib.qe_sconv2d_act(2, h, w, c_in, fh, fw, oh, ow, s, s, pad, pad, d, d, group, cog,
                                        P(x), _fast._ffi.NULL if packed else P(f), cog, 1, K * cog,
                                        P(pb.buf) if packed else _fast._ffi.NULL, P(y), c_out, P(bias),
                                        mode, lo, hi)
                assert rc == 0, "the convolution ran"
                return y.tobytes()
            assert_same(on_threads(run), f"Conv2d {case} packed={packed} act={mode}")


@pytest.mark.parametrize("case", [(30, 26, 32, 3, 1, 1), (31, 17, 48, 3, 2, 1), (12, 14, 40, 5, 1, 1),
                                  (13, 9, 6, 3, 1, 2), (8, 30, 20, 3, 1, 1)])
def test_depthwise_split_keeps_bytes(case):
    """qe_depthwise2d_act (register-filter 3x3 / 5x5 kernels, the general one with a channel
    multiplier): NaNs of both signs meet in one sum, whose sign depends on the order of the
    adds -- pieces of whole output rows keep it."""
    h, w, c, k, s, mult = case
    rng = np.random.default_rng(h * 13 + c)
    c_out = c * mult
    oh, ow = (h + 2 - k) // s + 1, (w + 2 - k) // s + 1
    x, f, bias = special(rng, (1, h, w, c)), special(rng, (k, k, 1, c_out)), plain(rng, (c_out,))
    lib = _fast._lib
    for mode, lo, hi in ACTS:
        def run(mode=mode, lo=lo, hi=hi):
            y = np.empty((1, oh, ow, c_out), np.float32)
            lib.qe_depthwise2d_act(1, h, w, c, k, k, c_out, oh, ow, s, s, 1, 1, 1, 1, P(x), P(f), P(bias),
                                   P(y), mode, lo, hi)
            return y.tobytes()
        assert_same(on_threads(run), f"DepthWiseConv2d {case} act={mode}")


@pytest.mark.parametrize("kind", [0, 1])
def test_pool_and_im2col_split_keep_bytes(kind):
    """qe_pool2d (max, average) and qe_im2col2d over pixel ranges."""
    rng = np.random.default_rng(5 + kind)
    x = special(rng, (2, 21, 19, 24))
    lib = _fast._lib

    def pool():
        y = np.empty((2, 11, 10, 24), np.float32)
        assert lib.qe_pool2d(kind, 2, 21, 19, 24, 3, 3, 11, 10, 2, 2, 1, 1, 1, 1, 0, P(x), P(y)) == 0, \
            "the pooling ran"
        return y.tobytes()
    assert_same(on_threads(pool), f"pool2d kind={kind}")

    def im2col():
        return _fast.im2col2d(x, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (21, 19), 4, 16, 7,
                              2 * 21 * 19 - 3).tobytes()
    assert_same(on_threads(im2col), "im2col2d rows [7, P-3)")


def test_batched_gemm_split_keeps_bytes():
    """qe_sgemm_batched shares batch items among the threads; a batch of one splits the GEMM."""
    rng = np.random.default_rng(11)
    for batch in (1, 6):
        a, b = special(rng, (batch, 37, 50)), special(rng, (batch, 50, 45))
        def run(a=a, b=b):
            return _fast.matmul(a, b).tobytes()
        assert_same(on_threads(run), f"batched GEMM of {batch}")


class _OneThreadCount:
    """Counts the blocks ``_fast`` runs limited to the calling thread."""

    entered = 0

    def __init__(self):
        self.inner = _REAL_ONE_THREAD()

    def __enter__(self):
        type(self).entered += 1
        self.inner.__enter__()

    def __exit__(self, *exc):
        self.inner.__exit__(*exc)


_REAL_ONE_THREAD = _fast._OneThread


@pytest.mark.parametrize("rows, k, n, one", [(1, 1280, 1000, False), (8, 512, 512, False),
                                             (1, 64, 64, True), (9, 512, 512, True),
                                             (64, 256, 128, True), (128, 256, 1024, False)])
def test_which_products_run_on_the_calling_thread(rows, k, n, one, monkeypatch):
    """A classifier-like product (at most GEMV_MAX_ROWS rows) may split from
    GEMV_SINGLE_THREAD_MAX_FMAS on; products of more rows keep SINGLE_THREAD_MAX_FMAS (2^22: a
    BERT-size FullyConnected step splits, a quarter of one does not); the engine's lowering asks the
    same limit."""
    if not _fast.single_thread_c():
        pytest.skip("the C GEMM has no AVX-512 micro-kernel here")
    monkeypatch.setattr(_OneThreadCount, "entered", 0)
    monkeypatch.setattr(_fast, "_OneThread", _OneThreadCount)
    rng = np.random.default_rng(3)
    _fast.c_gemm(plain(rng, (rows, k)), plain(rng, (k, n)))
    assert (_OneThreadCount.entered == 1) == one, \
        f"{rows}x{k}x{n} ran {'on the calling thread' if one else 'splittable'} (limit " \
        f"{_fast.gemm_single_limit(rows)})"
    assert (rows * k * n < _fast.gemm_single_limit(rows)) == one, \
        f"gemm_single_limit({rows}) gives the same answer for {rows}x{k}x{n}"


MAXPOOL_PROBE = """
import hashlib, numpy as np
from qnnemu.ops import _fast
rng = np.random.default_rng(8)
h = hashlib.sha256()
for (hw, c, k, s, pad) in ((17, 40, 3, 2, 1), (12, 16, 2, 2, 0), (9, 7, 3, 1, 1), (11, 33, 5, 3, 2)):
    x = rng.standard_normal((2, hw, hw, c)).astype(np.float32)
    u = rng.random(x.shape)
    x[u < 0.1] = 0.0
    x[(u >= 0.1) & (u < 0.2)] = -0.0
    b = x.view(np.uint32)
    b[(u >= 0.2) & (u < 0.25)] = 0x7FC00001
    b[(u >= 0.25) & (u < 0.3)] = 0xFFC00002
    x[(u >= 0.3) & (u < 0.32)] = -np.inf
    o = (hw + 2 * pad - k) // s + 1
    h.update(_fast.pool2d("max", x, (k, k), (s, s), ((pad, pad), (pad, pad)), (o, o)).tobytes())
print(h.hexdigest())
"""


def test_max_pool_avx512_equals_avx2():
    """Max pooling 16 channels per AVX-512 vector (VMAXPS in the window's order) gives the bytes of
    the AVX2 kernel's ``in > out ? in : out``: NaNs of both signs, signed zeros, the zero padding."""
    if not _fast._lib.qe_gemm_avx512():
        pytest.skip("no AVX-512 on this CPU")
    digests = digests_by_isa(MAXPOOL_PROBE, "max pooling")
    assert digests["avx512"] == digests["avx2"], f"AVX-512 and AVX2 max pooling are the same bytes: {digests}"
