"""The recurrent C kernels the ops' fast paths share with the C engine (issue 13): Lstm and Gru
(QNN op definitions "Lstm", "Gru"; qnnemu/ops/lstm.py, qnnemu/ops/rnn.py), csrc/eng_rnn.c.

numpy's BLAS products and SIMD tanh cannot be reproduced in C, so with the C GEMM in use
(``_fast.use_c_gemm()``) the ops run their whole recurrence in ``qe_lstm_f32`` / ``qe_gru_f32``
and the engine's steps (qnnemu/core/engine/lower_rnn.py) call the very same functions: both
paths give the same bytes.  With ``QNNEMU_KERNELS=reference`` (or ``QNNEMU_GEMM=blas``) the ops
keep their numpy formulas.

``lstm_dims`` / ``gru_dims`` give the integer parameter vectors both callers pass (shapes and
the element strides of x and of the sequence output, from the shapes alone).
"""
from __future__ import annotations

import numpy as np

from . import _fast

LSTM_INPUTS = 24      # positions 0..23 (24, the reset input, is refused by the op)
GRU_INPUTS = 14       # positions 0..13 (14, the reset input, is refused by the op)


def available() -> bool:
    """True if the ops' fast paths (and the engine's lowering) run the recurrence in C."""
    return _fast.use_c_gemm()


def _strides(shape, features: int, time_major: bool) -> tuple[int, int, int, int]:
    """(steps, batch, step stride, batch stride) in elements of a contiguous [.., features]
    tensor in a recurrent op's layout: [B, F] one step; [T, B, F] time major; [B, T, F]."""
    if len(shape) == 2:
        return 1, int(shape[0]), 0, features
    if time_major:
        t, b = int(shape[0]), int(shape[1])
        return t, b, b * features, features
    b, t = int(shape[0]), int(shape[1])
    return t, b, features, t * features


def lstm_dims(x_shape, n: int, p: int, time_major: bool, reverse: bool) -> list[int]:
    """csrc/eng_rnn.c's Lstm dims: steps, batch, input size, num_units, output size, x's step
    and batch strides, the sequence output's step and batch strides, reverse."""
    n_in = int(x_shape[-1])
    t, b, xt, xb = _strides(x_shape, n_in, time_major)
    _, _, ot, ob = _strides(tuple(x_shape[:-1]) + (p,), p, time_major)
    return [t, b, n_in, int(n), int(p), xt, xb, ot, ob, int(bool(reverse))]


def gru_dims(x_shape, h: int, time_major: bool, reverse: bool, linear_before_reset: bool) -> list[int]:
    """csrc/eng_rnn.c's Gru dims: steps, batch, input size, hidden size, x's step and batch
    strides, the sequence output's step and batch strides, reverse, linear_before_reset."""
    n_in = int(x_shape[-1])
    t, b, xt, xb = _strides(x_shape, n_in, time_major)
    _, _, ot, ob = _strides(tuple(x_shape[:-1]) + (h,), h, time_major)
    return [t, b, n_in, int(h), xt, xb, ot, ob, int(bool(reverse)), int(bool(linear_before_reset))]


def _pointers(ffi, arrays, count: int):
    ptrs = ffi.new(f"float *[{count}]")
    keep = []
    for i in range(count):
        a = arrays[i] if i < len(arrays) else None
        if a is None:
            ptrs[i] = ffi.NULL
        else:
            a = np.ascontiguousarray(a, dtype=np.float32)
            keep.append(a)
            ptrs[i] = ffi.cast("float *", ffi.from_buffer(a))
    return ptrs, keep


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"qnnemu._kernels: {what} kernel failed (code {rc})")


def lstm(arrays, dims: list[int], cell_clip: float, output_clip: float, seq_shape):
    """Lstm over float32 inputs (``arrays`` one per input position, None where absent):
    (the h sequence in ``seq_shape``, the last c [B, N], the last h [B, P]) as float32."""
    lib, ffi = _fast.library()
    ptrs, keep = _pointers(ffi, arrays, LSTM_INPUTS)
    d = np.asarray(dims, dtype=np.int64)
    dptr = ffi.cast("int64_t *", d.ctypes.data)
    b, n, p = dims[1], dims[3], dims[4]
    seq = np.empty(seq_shape, np.float32)
    c = np.empty((b, n), np.float32)
    h = np.empty((b, p), np.float32)
    scratch = np.empty(int(lib.qe_lstm_scratch_floats(dptr)), np.float32)
    clips = np.asarray([cell_clip, output_clip], dtype=np.float64)
    _check(lib.qe_lstm_f32(ptrs, dptr, ffi.cast("double *", clips.ctypes.data), _fast._ptr(seq),
                           _fast._ptr(c), _fast._ptr(h), _fast._ptr(scratch)), "Lstm")
    del keep
    return seq, c, h


def gru(arrays, dims: list[int], seq_shape, last_shape):
    """Gru over float32 inputs (``arrays`` one per input position, None where absent), computed
    in float64: (the h sequence in ``seq_shape``, the last h in ``last_shape``) as float32."""
    lib, ffi = _fast.library()
    ptrs, keep = _pointers(ffi, arrays, GRU_INPUTS)
    d = np.asarray(dims, dtype=np.int64)
    dptr = ffi.cast("int64_t *", d.ctypes.data)
    seq = np.empty(seq_shape, np.float32)
    h = np.empty(last_shape, np.float32)
    scratch = np.empty(int(lib.qe_gru_scratch_doubles(dptr)), np.float64)
    _check(lib.qe_gru_f32(ptrs, dptr, _fast._ptr(seq), _fast._ptr(h),
                          ffi.cast("double *", scratch.ctypes.data)), "Gru")
    del keep
    return seq, h
