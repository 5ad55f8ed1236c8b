"""Python wrappers of the C kernels in ``qnnemu._kernels`` (csrc/kernels.c).

Used by Conv2d, DepthWiseConv2d, FullyConnected and MatMul when ``config.kernels == "fast"``.
The extension is imported lazily; when it is not built, ``available()`` is False, a warning
is logged once on ``qnnemu.ops`` and the ops keep their numpy implementation.

All wrappers take and return float32 numpy arrays; callers convert float16 first.
"""
from __future__ import annotations

import importlib
import logging

import numpy as np

_log = logging.getLogger("qnnemu.ops")
_lib = None
_ffi = None
_tried = False


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
    return _lib is not None


def available() -> bool:
    """True if the C kernels can be used."""
    return _load()


def enabled() -> bool:
    """True if ops should take the fast path: config asks for it and the module is built."""
    from . import config
    return config.kernels == "fast" and _load()


def isa() -> str:
    """The micro-kernel the C GEMM picked at run time: "avx2" or "sse"."""
    if not _load():
        return "none"
    return "avx2" if _lib.qe_isa() else "sse"


def _ptr(a: np.ndarray | None):
    if a is None:
        return _ffi.NULL
    return _ffi.cast("float *", _ffi.from_buffer(a))


def _f32(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a, dtype=np.float32)


def _matrix(a: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(contiguous buffer, row stride, column stride) for a 2-D float32 operand.

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


def gemm(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """a[M,K] @ b[K,N] (+ bias[N]) in float32.  ``a``/``b`` may be transposed views."""
    _load()
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"gemm: inner dimensions differ ({a.shape} @ {b.shape})")
    abuf, rsa, csa = _matrix(a)
    bbuf, rsb, csb = _matrix(b)
    bias = _f32(bias)
    out = np.empty((m, n), np.float32)
    _check(_lib.qe_sgemm(m, n, k, _ptr(abuf), rsa, csa, _ptr(bbuf), rsb, csb, _ptr(out), n,
                         _ptr(bias)))
    return out


def matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool = False,
           transpose_b: bool = False) -> np.ndarray:
    """numpy.matmul semantics for rank >= 2 operands with batch broadcasting, float32."""
    _load()
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    am, ak = a.shape[-2:]
    bk, bn = b.shape[-2:]
    # Transposition is expressed through strides; the buffers stay as given.
    m, k, rsa, csa = (ak, am, 1, ak) if transpose_a else (am, ak, ak, 1)
    k2, n, rsb, csb = (bn, bk, 1, bn) if transpose_b else (bk, bn, bn, 1)
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ ({a.shape} @ {b.shape})")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    nb = int(np.prod(batch, dtype=np.int64))
    # Element offsets of each broadcast batch item into a and b.
    a_off = np.broadcast_to(np.arange(int(np.prod(a.shape[:-2], dtype=np.int64)),
                                      dtype=np.int64).reshape(a.shape[:-2]), batch)
    b_off = np.broadcast_to(np.arange(int(np.prod(b.shape[:-2], dtype=np.int64)),
                                      dtype=np.int64).reshape(b.shape[:-2]), batch)
    a_off = np.ascontiguousarray(a_off.reshape(-1) * (am * ak))
    b_off = np.ascontiguousarray(b_off.reshape(-1) * (bk * bn))
    out = np.empty(batch + (m, n), np.float32)
    if out.size == 0:
        return out
    _check(_lib.qe_sgemm_batched(nb, _ffi.cast("int64_t *", _ffi.from_buffer(a_off)),
                                 _ffi.cast("int64_t *", _ffi.from_buffer(b_off)), m, n, k,
                                 _ptr(a), rsa, csa, _ptr(b), rsb, csb, _ptr(out), n,
                                 _ffi.NULL))
    return out


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride, pad, dilation,
           group: int, out_hw: tuple[int, int]) -> np.ndarray:
    """NHWC/HWIO float32 convolution; ``pad`` is [[top, bottom], [left, right]]."""
    _load()
    x = _f32(x)
    w = _f32(w)
    bias = _f32(bias)
    n, h, wd, c_in = x.shape
    fh, fw, _, c_out = w.shape
    oh, ow = out_hw
    out = np.empty((n, oh, ow, c_out), np.float32)
    if out.size == 0:
        return out
    _check(_lib.qe_conv2d(n, h, wd, c_in, fh, fw, c_out, oh, ow, int(stride[0]),
                          int(stride[1]), int(pad[0][0]), int(pad[1][0]), int(dilation[0]),
                          int(dilation[1]), int(group), _ptr(x), _ptr(w), _ptr(bias),
                          _ptr(out)))
    return out


__all__ = ["available", "enabled", "isa", "gemm", "matmul", "conv2d"]
