"""The C kernels shared by the fast paths of qnnemu/ops and the C execution engine: the float32
reduction of ReduceSum / ReduceMean / ReduceMax / ReduceMin's fast path
(QnnOpDef.h QNN_OP_REDUCE_*; qnnemu/ops/reduce.py) and the C execution engine's step for them
(csrc/eng_movement.c ``qe_reduce_f32``): numpy's pairwise float sums cannot be reproduced in C,
so both paths sum in the same order by calling the same function; and Resize's separable
interpolation (QNN_OP_RESIZE, QNN_OP_RESIZE_BILINEAR; qnnemu/ops/resize.py), whose float32 tap
sums numpy orders differently by layout."""
from __future__ import annotations

import numpy as np

from . import _fast

# ReduceSum, ReduceMean, ReduceMax, ReduceMin -> qe_reduce_f32's kind
KINDS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}


def reduce_geometry(shape, axes) -> tuple[int, int, int] | None:
    """(outer, reduced, inner) of ``shape`` when ``axes`` are one run of dimensions (size-1
    dimensions in between ignored), else None."""
    axes = sorted({int(a) for a in axes})
    if not axes:
        return None
    live = [a for a in axes if shape[a] != 1] or axes[:1]
    lo, hi = live[0], live[-1]
    if any(a not in axes and shape[a] != 1 for a in range(lo, hi + 1)):
        return None

    def prod(dims) -> int:
        return int(np.prod(dims, dtype=np.int64))
    return prod(shape[:lo]), prod([shape[a] for a in axes]), prod(shape[hi + 1:])


def reduce_f32(op_type: str, x: np.ndarray, axes, keep_dims: bool) -> np.ndarray | None:
    """The reduction of float32 ``x`` over ``axes`` in C, or None when it does not apply (not
    float32, axes not one run, C kernels not built)."""
    kind = KINDS.get(op_type)
    if kind is None or x.dtype != np.float32 or not _fast.enabled():
        return None
    geom = reduce_geometry(x.shape, axes)
    if geom is None:
        return None
    outer, red, inner = geom
    if red < 1:
        return None
    lib, ffi = _fast.library()
    x = np.ascontiguousarray(x)
    y = np.empty(outer * inner, np.float32)
    acc = np.empty(max(inner, 1), np.float64)
    rc = lib.qe_reduce_f32(kind, ffi.cast("float *", ffi.from_buffer(x)),
                           ffi.cast("float *", ffi.from_buffer(y)),
                           ffi.cast("double *", ffi.from_buffer(acc)), outer, red, inner)
    if rc != 0:
        return None
    axes = {int(a) for a in axes}
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep_dims else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return y.reshape(shape)


def resize_taps(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Resize's separable interpolation of float32 ``x`` along ``axis`` in C (csrc/eng_movement.c
    ``qe_resize_taps``, the C engine's step too): sum over taps t of w[o, t] * x[.., idx[o, t], ..]
    with float32 products added from t = 0 up; None when it does not apply."""
    if x.dtype != np.float32 or not _fast.enabled():
        return None
    lib, ffi = _fast.library()
    x = np.ascontiguousarray(x)
    n_out, k = idx.shape
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    idx = np.ascontiguousarray(idx, np.int64)
    wf = np.ascontiguousarray(w, np.float32)
    y = np.empty(x.shape[:axis] + (n_out,) + x.shape[axis + 1:], np.float32)
    rc = lib.qe_resize_taps(ffi.cast("float *", ffi.from_buffer(x)), ffi.cast("float *", ffi.from_buffer(y)),
                            outer, x.shape[axis], inner, n_out, k, ffi.cast("int64_t *", ffi.from_buffer(idx)),
                            ffi.cast("float *", ffi.from_buffer(wf)))
    return y if rc == 0 else None


__all__ = ["KINDS", "reduce_geometry", "reduce_f32", "resize_taps"]
