"""The fast kernels: GEMMs in the C GEMM of ``qnnemu._kernels`` (csrc/kernels.c; numpy's BLAS
when asked or when the module is not built), and C kernels for the memory-bound parts around
them (im2col, col2im, depthwise convolution, pooling).

``config.kernels == "fast"`` (the default) selects these paths; ``"reference"`` keeps the ops
on their plain numpy formulas.  ``fast()`` says whether the fast paths are on; ``enabled()``
whether the C kernels can be used too.  The extension is imported lazily; when it is not
built, ``available()`` is False, a warning is logged once on ``qnnemu.ops`` and the ops use
numpy code for the parts the C kernels would do (the GEMMs stay in BLAS).

GEMM choice (``gemm_backend()``): the C GEMM (AVX-512, AVX2+FMA or SSE micro-kernel picked at
run time, large products split over ``threads()`` threads) runs every product of the fast paths
whenever the C kernels are built: the C execution engine (qnnemu/core/engine/lower_gemm.py)
makes the very same calls, so the engine and the Python plan agree bit for bit (a C GEMM result
does not depend on the thread split; numpy's BLAS cannot be reproduced).  ``QNNEMU_GEMM=blas``
keeps numpy's BLAS for experiments (the engine then leaves the GEMM steps to Python): products
with fewer than ``C_GEMM_MIN_ROWS`` rows and batches of matrix products then stay in BLAS.

Products of fewer than ``SINGLE_THREAD_MAX_FMAS`` multiply-adds run on the calling thread
alone, in the C GEMM whichever backend is chosen when it has its AVX-512 micro-kernel (as
fast as one OpenBLAS thread): splitting them gains at most a fraction of a millisecond, but on a
loaded machine a second thread that waits for a core costs a scheduler time slice (several ms)
per call -- BERT-size FullyConnected / MatMul steps took 15-60 ms instead of 0.3-1 ms each
while other processes loaded the 2 cores (docs/gemm-threads.md).
Environment overrides: ``QNNEMU_GEMM=c|blas``, ``QNNEMU_GEMM_SINGLE_THREAD_FMAS`` (the limit
above), and ``QNNEMU_NUM_THREADS``: the threads of the
C GEMM and of the memory-bound C kernels (default: OpenBLAS's thread count, else the CPUs
this process may run on; threads are started per call for large enough work only).

All wrappers take and return float32 numpy arrays; callers convert float16 first.
"""
from __future__ import annotations

import ctypes
import glob
import importlib
import logging
import os

import numpy as np

_log = logging.getLogger("qnnemu.ops")
_lib = None
_ffi = None
_tried = False


class _Config:
    """``kernels``: "fast" uses the C kernels where an op has them, "reference" numpy only.

    Set with the environment variable QNNEMU_KERNELS or by assigning ``config.kernels``.
    """

    def __init__(self):
        self.kernels = os.environ.get("QNNEMU_KERNELS", "fast")


config = _Config()


def _load() -> bool:
    global _lib, _ffi, _tried
    if not _tried:
        _tried = True
        try:
            _kernels = importlib.import_module("qnnemu._kernels")
        except ImportError as exc:
            _log.warning("qnnemu._kernels is not built (%s); ops use numpy. "
                         "Build it with: python csrc/build_kernels.py", exc)
        else:
            _lib, _ffi = _kernels.lib, _kernels.ffi
            _lib.qe_isa()           # the ISA choices are made once, before any thread runs
            _lib.qe_gemm_avx512()
            _lib.qe_set_threads(_threads_default())
    return _lib is not None


def available() -> bool:
    """True if the C kernels can be used."""
    return _load()


def library():
    """(lib, ffi) of the built ``qnnemu._kernels`` (the C execution engine's kernels too), or
    (None, None) when it is not built."""
    return (_lib, _ffi) if _load() else (None, None)


def fast() -> bool:
    """True if ops should take their fast paths (BLAS GEMMs, static weights packed once)."""
    return config.kernels == "fast"


def enabled() -> bool:
    """True if ops should use the C kernels: config asks for the fast paths and the module
    is built."""
    return fast() and _load()


def isa() -> str:
    """The C kernel variant picked at run time: "avx2" or "sse" (the GEMM micro-kernel may
    be AVX-512 on top of "avx2": ``gemm_backend()``)."""
    if not _load():
        return "none"
    return "avx2" if _lib.qe_isa() else "sse"


_blas_core: tuple | None = None
_gemm_c: bool | None = None


def blas_core() -> tuple[str | None, int | None]:
    """(core name, threads) of the OpenBLAS numpy runs on; Nones when it cannot be asked."""
    global _blas_core
    if _blas_core is None:
        core = threads = None
        try:
            base = os.path.dirname(os.path.dirname(np.__file__))
            paths = glob.glob(os.path.join(base, "numpy.libs", "*openblas*")) + \
                glob.glob(os.path.join(os.path.dirname(np.__file__), ".libs", "*openblas*"))
            for path in paths:
                lib = ctypes.CDLL(path)
                for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                                       ("openblas", "64_"), ("openblas", "")):
                    f = getattr(lib, f"{prefix}_get_corename{suffix}", None)
                    if f is None:
                        continue
                    f.restype = ctypes.c_char_p
                    core = f().decode()
                    nt = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                    threads = int(nt()) if nt is not None else None
                    break
                if core:
                    break
        except (OSError, AttributeError, ValueError):
            core = threads = None
        _blas_core = (core, threads)
    return _blas_core


def _threads_default() -> int:
    env = os.environ.get("QNNEMU_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    _, threads = blas_core()
    if threads:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads() -> int:
    """Threads the C GEMM splits a large product over."""
    return _lib.qe_threads() if _load() else 1


def set_threads(n: int) -> None:
    if _load():
        _lib.qe_set_threads(int(n))


def gemm_backend() -> str:
    """"c" (the C GEMM) or "blas" (numpy, QNNEMU_GEMM=blas), decided once; see the module
    docstring."""
    global _gemm_c
    if _gemm_c is None:
        choice = os.environ.get("QNNEMU_GEMM", "").lower()
        if not _load():
            _gemm_c = False
        else:
            # the C GEMM unless asked for BLAS: the C engine reproduces only the C GEMM
            _gemm_c = choice != "blas"
    return "c" if _gemm_c else "blas"


def use_c_gemm() -> bool:
    """True if the GEMMs of the fast paths should run in C."""
    return enabled() and gemm_backend() == "c"


def _ptr(a: np.ndarray | None):
    if a is None:
        return _ffi.NULL
    return _ffi.cast("float *", _ffi.from_buffer(a))


def _f32(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a, dtype=np.float32)


# ---- GEMM ------------------------------------------------------------------------------------
def _matrix(a: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(buffer, row stride, column stride) of a 2-D float32 operand for the C GEMM.

    Transposed (F-contiguous) views are passed as their base with swapped strides, so the
    kernel's packing does the transpose instead of a copy.
    """
    if a.dtype == np.float32 and a.flags.c_contiguous:
        return a, a.shape[1], 1
    if a.dtype == np.float32 and a.flags.f_contiguous:
        return a.T, 1, a.shape[0]
    a = np.ascontiguousarray(a, dtype=np.float32)
    return a, a.shape[1], 1


def _check(rc: int) -> None:
    if rc != 0:
        raise MemoryError("qnnemu._kernels: out of memory")


# With QNNEMU_GEMM=blas, products of fewer rows than this stay in BLAS even when small
# (matrix-vector-like products, where the C GEMM's 6-row micro-kernel idles).
C_GEMM_MIN_ROWS = 8


# Products with fewer multiply-adds than this run on the calling thread only (module docstring):
# 2**22, ~45 us on one AVX-512 core.  It was 2**26 (~3 ms: every product of the benchmark BERT)
# while a split could wait a scheduler time slice for a worker on a loaded machine; the pool's
# split now never waits for a worker that has not started a piece (docs/gemm-threads.md,
# "BERT-size products split again"): BERT float on SM8550 7.0 -> 6.0 ms on 2 cores.
# QNNEMU_GEMM_SINGLE_THREAD_FMAS overrides it (0: every product may be split).
SINGLE_THREAD_MAX_FMAS = int(os.environ.get("QNNEMU_GEMM_SINGLE_THREAD_FMAS", "") or (1 << 22))


# Convolutions may be split from this many multiply-adds on (QNNEMU_CONV_SINGLE_THREAD_FMAS;
# 2**21, ~25 us on one AVX-512 core, twice the C GEMM's own work per thread, 2**20 in
# csrc/kernels.c): ResNet-50's dozens of 1x1 convolutions and most of MobileNetV2's were below the
# general limit above when it was 2**26, and two cores run them in about 0.55-0.7 of the time on a
# quiet machine (the pool's workers spin between ops, so a split costs a few microseconds, not a wake-up:
# MobileNetV2's 14x14 1x1 convolutions of 2.4-4.8M multiply-adds, 27-56 us, run 1.4-1.5x faster
# on two threads).  Their products are split into chunks each thread takes from its own block
# first (csrc/kernels.c run_pieces), so a thread that starts late (its core busy) takes fewer.
CONV_SINGLE_THREAD_MAX_FMAS = int(os.environ.get("QNNEMU_CONV_SINGLE_THREAD_FMAS", "") or (1 << 21))

# Products of at most GEMV_MAX_ROWS rows (a classifier FullyConnected on a batch of 1) may be
# split from GEMV_SINGLE_THREAD_MAX_FMAS multiply-adds on, by column panels: they stream their
# weights once (MobileNetV2's 1280 x 1000 classifier: 5 MB, ~0.16 ms on one core), so two cores
# read them faster, and such products are rare and short in a graph.
GEMV_MAX_ROWS = 8
GEMV_SINGLE_THREAD_MAX_FMAS = int(os.environ.get("QNNEMU_GEMV_SINGLE_THREAD_FMAS", "") or (1 << 20))


def gemm_single_limit(rows: int) -> int:
    """The multiply-adds below which a product of ``rows`` rows (``gemm`` / ``c_gemm`` without
    ``single_thread_below``) runs on the calling thread; the engine's lowering asks the same."""
    return GEMV_SINGLE_THREAD_MAX_FMAS if rows <= GEMV_MAX_ROWS else SINGLE_THREAD_MAX_FMAS


def _small(fmas: int, limit: int | None = None) -> bool:
    return fmas < (SINGLE_THREAD_MAX_FMAS if limit is None else limit)


def single_thread_c() -> bool:
    """True if small products should run in the C GEMM on the calling thread: the C kernels
    are on and their GEMM has the AVX-512 micro-kernel (else small products stay in BLAS)."""
    return enabled() and bool(_lib.qe_gemm_avx512())


class _OneThread:
    """The C kernels limited to the calling thread for a block (the thread-local limit of
    ``qe_set_call_threads``, restored on exit: qnnemu/core/threads.py keeps its own)."""

    def __enter__(self):
        self.prev = int(_lib.qe_call_threads())
        _lib.qe_set_call_threads(1)

    def __exit__(self, *exc):
        _lib.qe_set_call_threads(self.prev)


def aligned_empty(n: int, dtype, align: int = 64) -> np.ndarray:
    """An uninitialized 1-D array of ``n`` elements whose data starts on an ``align``-byte
    boundary: the C engine references such arrays in place (csrc/engine.c buffers are 64-byte
    aligned) instead of keeping an aligned copy of every packed weight."""
    dtype = np.dtype(dtype)
    raw = np.empty(n * dtype.itemsize + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n * dtype.itemsize].view(dtype)


class PackedB:
    """A static right-hand GEMM operand [K, N] packed once into the C GEMM's panel layout
    (``pack_operand``); ``matrix`` keeps the plain float32 operand for the BLAS path."""

    __slots__ = ("matrix", "buf", "shape")

    def __init__(self, b: np.ndarray):
        _load()
        self.matrix = b
        k, n = b.shape
        self.shape = (k, n)
        self.buf = aligned_empty(max(int(_lib.qe_packed_b_size(n, k)), 1), np.float32)
        bbuf, rsb, csb = _matrix(b)
        _lib.qe_pack_b(n, k, _ptr(bbuf), rsb, csb, _ptr(self.buf))


def pack_operand(b: np.ndarray) -> np.ndarray | PackedB:
    """``b`` (a static [K, N] GEMM operand) packed for the C GEMM when that is the GEMM in use
    and the shape is worth it, else ``b`` itself."""
    if b.ndim == 2 and b.size >= 4096 and use_c_gemm():
        return PackedB(np.asarray(b, dtype=np.float32))
    return b


def c_gemm(a: np.ndarray, b, bias: np.ndarray | None = None,
           out: np.ndarray | None = None, single_thread_below: int | None = None) -> np.ndarray:
    """a[M,K] @ b[K,N] (+ bias[N]) with the C GEMM (whatever ``gemm_backend()`` says);
    ``b`` may be a ``PackedB``.  Products below ``single_thread_below`` multiply-adds
    (``SINGLE_THREAD_MAX_FMAS`` when None) run on the calling thread."""
    _load()
    m, k = a.shape
    kb, n = b.shape
    if kb != k:
        raise ValueError(f"gemm: inner dimensions differ ({a.shape} @ {b.shape})")
    abuf, rsa, csa = _matrix(a)
    bias = _f32(bias)
    if out is None or not (out.flags.c_contiguous and out.dtype == np.float32):
        y = np.empty((m, n), np.float32)
    else:
        y = out
    if _small(m * n * k, gemm_single_limit(m) if single_thread_below is None else single_thread_below):
        with _OneThread():
            _c_gemm_call(m, n, k, abuf, rsa, csa, b, y, bias)
    else:
        _c_gemm_call(m, n, k, abuf, rsa, csa, b, y, bias)
    if out is not None and y is not out:
        out[...] = y
        return out
    return y


def _c_gemm_call(m, n, k, abuf, rsa, csa, b, y, bias) -> None:
    if isinstance(b, PackedB):
        _check(_lib.qe_sgemm_packed(m, n, k, _ptr(abuf), rsa, csa, _ptr(b.buf), _ptr(y), n,
                                    _ptr(bias)))
    else:
        bbuf, rsb, csb = _matrix(b)
        _check(_lib.qe_sgemm(m, n, k, _ptr(abuf), rsa, csa, _ptr(bbuf), rsb, csb, _ptr(y), n,
                             _ptr(bias)))


def gemm(a: np.ndarray, b, bias: np.ndarray | None = None,
         out: np.ndarray | None = None, single_thread_below: int | None = None) -> np.ndarray:
    """a[M,K] @ b[K,N] (+ bias[N]) in float32, in C or BLAS (``gemm_backend()``).  ``a``/``b``
    may be transposed views (read through strides / BLAS transpose flags, no copy); ``b`` may
    be a ``PackedB`` (``pack_operand``).  ``single_thread_below``: see ``c_gemm``."""
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: inner dimensions differ ({a.shape} @ {b.shape})")
    if use_c_gemm() or (a.shape[0] >= C_GEMM_MIN_ROWS and
                        _small(a.shape[0] * a.shape[1] * b.shape[1]) and single_thread_c()):
        return c_gemm(a, b, bias, out, single_thread_below)
    if isinstance(b, PackedB):
        b = b.matrix
    a = a if a.dtype == np.float32 else a.astype(np.float32)
    b = b if b.dtype == np.float32 else b.astype(np.float32)
    y = np.matmul(a, b, out=out)
    if bias is not None:
        y += bias
    return y


def _c_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul of float32 operands of rank >= 2 (last two axes possibly swapped views of
    contiguous arrays) with the batched C GEMM."""
    def operand(v):
        if v.flags.c_contiguous:
            return v, v.shape[-1], 1
        t = np.swapaxes(v, -1, -2)
        if t.flags.c_contiguous:
            return t, 1, v.shape[-2]
        v = np.ascontiguousarray(v)
        return v, v.shape[-1], 1
    abuf, rsa, csa = operand(a)
    bbuf, rsb, csb = operand(b)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    out = np.empty(batch + (m, n), np.float32)
    if out.size == 0:
        return out
    if k == 0:
        out[...] = 0.0
        return out
    nb = int(np.prod(batch, dtype=np.int64))

    def offsets(v):
        idx = np.arange(int(np.prod(v.shape[:-2], dtype=np.int64)), dtype=np.int64)
        idx = np.broadcast_to(idx.reshape(v.shape[:-2]), batch).reshape(-1)
        return np.ascontiguousarray(idx * (v.shape[-2] * v.shape[-1]))
    a_off, b_off = offsets(abuf), offsets(bbuf)
    if _small(nb * m * n * k):
        with _OneThread():
            _check(_lib.qe_sgemm_batched(nb, _ffi.cast("int64_t *", _ffi.from_buffer(a_off)),
                                         _ffi.cast("int64_t *", _ffi.from_buffer(b_off)), m, n, k,
                                         _ptr(abuf), rsa, csa, _ptr(bbuf), rsb, csb, _ptr(out), n,
                                         _ffi.NULL))
        return out
    _check(_lib.qe_sgemm_batched(nb, _ffi.cast("int64_t *", _ffi.from_buffer(a_off)),
                                 _ffi.cast("int64_t *", _ffi.from_buffer(b_off)), m, n, k,
                                 _ptr(abuf), rsa, csa, _ptr(bbuf), rsb, csb, _ptr(out), n,
                                 _ffi.NULL))
    return out


def matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
           transpose_b: bool = False) -> np.ndarray:
    """numpy.matmul semantics for rank >= 2 operands with batch broadcasting, float32, in C
    or BLAS (``gemm_backend()``).

    When ``b`` has no batch dimensions, ``a``'s batch is folded into its rows: one large GEMM
    instead of one per batch item."""
    a = a if a.dtype == np.float32 else a.astype(np.float32)
    if isinstance(b, PackedB):  # a static in1, packed (and transposed) already
        if not transpose_a and a.flags.c_contiguous:
            return gemm(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
        b = b.matrix
    b = b if b.dtype == np.float32 else b.astype(np.float32)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    if b.ndim == 2 and not transpose_a and a.ndim >= 2 and a.flags.c_contiguous:
        return gemm(a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if a.ndim == 2 and b.ndim == 2:
        return gemm(a, b)
    m, k = a.shape[-2:]
    if use_c_gemm():
        return _c_matmul(a, b)
    # a small batch (attention heads): on the calling thread only (module docstring)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if m >= C_GEMM_MIN_ROWS and _small(int(np.prod(batch, dtype=np.int64)) * m * k * b.shape[-1]) \
            and single_thread_c():
        return _c_matmul(a, b)
    return np.matmul(a, b)


def conv2d(x: np.ndarray, wmat, b: np.ndarray | None, k, stride, pad, dilation, out_hw,
           group: int, c_out: int) -> np.ndarray:
    """2-D NHWC convolution as an implicit GEMM in the C GEMM (``qe_sconv2d``: no im2col matrix),
    [n * oh * ow, c_out] float32.  ``wmat``: [K, c_out] (possibly a ``PackedB``) for one group,
    [group, K, cog] otherwise (``conv.pack_conv_filter``); the bias is added in the GEMM.  Runs
    on the calling thread below ``CONV_SINGLE_THREAD_MAX_FMAS`` multiply-adds."""
    _load()
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, h, w, c_in = x.shape
    oh, ow = int(out_hw[0]), int(out_hw[1])
    cig, cog = c_in // group, c_out // group
    K = int(k[0]) * int(k[1]) * cig
    P = n * oh * ow
    y = np.empty((P, c_out), np.float32)
    if y.size == 0:
        return y
    bias = _f32(b)
    packed = _ffi.NULL
    if isinstance(wmat, PackedB):
        bbuf, rsb, csb, gstride, packed = None, cog, 1, 0, _ptr(wmat.buf)
    elif group == 1:
        bbuf, rsb, csb = _matrix(wmat)
        gstride = 0
    else:
        bbuf = np.ascontiguousarray(wmat, dtype=np.float32)
        rsb, csb, gstride = cog, 1, K * cog

    def call():
        _check(_lib.qe_sconv2d(n, h, w, c_in, int(k[0]), int(k[1]), oh, ow, int(stride[0]),
                               int(stride[1]), int(pad[0][0]), int(pad[1][0]), int(dilation[0]),
                               int(dilation[1]), group, cog, _ptr(x), _ptr(bbuf), rsb, csb,
                               gstride, packed, _ptr(y), c_out, _ptr(bias)))
    if _small(P * K * c_out, CONV_SINGLE_THREAD_MAX_FMAS):
        with _OneThread():
            call()
    else:
        call()
    return y


def im2col2d(x: np.ndarray, k, stride, pad, dilation, out_hw, c0: int, cig: int, p0: int,
             p1: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows [p0, p1) of the im2col matrix of an NHWC float32 ``x``: [p1 - p0, kh*kw*cig],
    taps row-major, channels [c0, c0 + cig) per tap, zeros in the padding.  ``pad`` is
    [[top, bottom], [left, right]]."""
    _load()
    x = _f32(x)
    _, h, w, c_in = x.shape
    kk = int(k[0]) * int(k[1]) * cig
    if out is None:
        out = np.empty((p1 - p0, kk), np.float32)
    _lib.qe_im2col2d(h, w, c_in, int(k[0]), int(k[1]), int(out_hw[0]), int(out_hw[1]),
                     int(stride[0]), int(stride[1]), int(pad[0][0]), int(pad[1][0]),
                     int(dilation[0]), int(dilation[1]), c0, cig, p0, p1, _ptr(x), _ptr(out))
    return out


def col2im2d(cols: np.ndarray, x_shape, group: int, cog: int, k, stride, pad, dilation,
             y: np.ndarray, gstride: int, pstride: int) -> np.ndarray:
    """Adds the transposed-convolution products ``cols`` (element (g, p, tap, o) at
    ``g*gstride + p*pstride + tap*cog + o``) into the NHWC float32 ``y`` (initialised by the
    caller), cropping ``pad`` [[top, bottom], [left, right]]."""
    _load()
    cols = _f32(cols)
    n, h, w, _ = x_shape
    _, oh, ow, _ = y.shape
    _lib.qe_col2im2d(n, h, w, group, cog, int(k[0]), int(k[1]), oh, ow, int(stride[0]),
                     int(stride[1]), int(pad[0][0]), int(pad[1][0]), int(dilation[0]),
                     int(dilation[1]), _ptr(cols), gstride, pstride, _ptr(y))
    return y


def depthwise2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride, pad, dilation,
                out_hw) -> np.ndarray:
    """Depthwise NHWC convolution, filter [kh, kw, 1, c_out] (c_out a multiple of c_in)."""
    _load()
    x, w, bias = _f32(x), _f32(w), _f32(bias)
    n, h, wd, c_in = x.shape
    fh, fw, _, c_out = w.shape
    oh, ow = out_hw
    out = np.empty((n, oh, ow, c_out), np.float32)
    if out.size:
        _lib.qe_depthwise2d(n, h, wd, c_in, fh, fw, c_out, oh, ow, int(stride[0]),
                            int(stride[1]), int(pad[0][0]), int(pad[1][0]), int(dilation[0]),
                            int(dilation[1]), _ptr(x), _ptr(w), _ptr(bias), _ptr(out))
    return out


def pool2d(kind: str, x: np.ndarray, k, stride, pad, out_hw, count_pad: bool = False
           ) -> np.ndarray:
    """Max ("max": cells outside the input count as 0) or average ("avg") NHWC pooling."""
    _load()
    x = _f32(x)
    n, h, w, c = x.shape
    oh, ow = out_hw
    out = np.empty((n, oh, ow, c), np.float32)
    if out.size:
        _check(_lib.qe_pool2d(0 if kind == "max" else 1, n, h, w, c, int(k[0]), int(k[1]), oh,
                              ow, int(stride[0]), int(stride[1]), int(pad[0][0]),
                              int(pad[0][1]), int(pad[1][0]), int(pad[1][1]),
                              int(bool(count_pad)), _ptr(x), _ptr(out)))
    return out


__all__ = ["available", "fast", "enabled", "isa", "blas_core", "threads", "set_threads",
           "gemm_backend", "use_c_gemm", "single_thread_c", "SINGLE_THREAD_MAX_FMAS",
           "CONV_SINGLE_THREAD_MAX_FMAS", "GEMV_MAX_ROWS", "GEMV_SINGLE_THREAD_MAX_FMAS",
           "gemm_single_limit", "PackedB",
           "pack_operand", "gemm", "c_gemm",
           "matmul", "conv2d", "im2col2d",
           "col2im2d", "depthwise2d", "pool2d"]
