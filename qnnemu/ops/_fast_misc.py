"""The fast paths of the recurrent cells Lstm and Gru (QnnOpDef.h QNN_OP_LSTM, QNN_OP_GRU): the
whole recurrence in one C call (csrc/eng_misc.c ``qe_misc_lstm_f32`` / ``qe_misc_gru_f32``), on
the weights as the op receives them (no packing: the products are dot products of weight rows
in a fixed order of partial sums).

The C execution engine runs the very same functions (qnnemu/core/engine/lower_misc.py), so the
engine and the Python plan agree bit for bit; numpy's BLAS products and SIMD tanh cannot be
reproduced in C, so the numpy formulas stay the reference path (``QNNEMU_KERNELS=reference``).
"""
from __future__ import annotations

import numpy as np

from . import _fast

# Lstm input positions (ops/lstm.py) of the 17 weight pointers qe_misc_lstm_f32 takes
LSTM_WEIGHTS = (16, 1, 2, 3, 17, 4, 5, 6, 21, 7, 8, 9, 18, 19, 20, 22, 23)
LSTM_LAYER_NORM = (12, 13, 14, 15)
LSTM_H0, LSTM_C0 = 10, 11
# Gru input positions (ops/rnn.py) of the 12 weight pointers qe_misc_gru_f32 takes
GRU_WEIGHTS = tuple(range(1, 13))
GRU_H0 = 13


def _c32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def lstm_scratch(n: int) -> int:
    """Floats of scratch ``qe_misc_lstm_f32`` needs."""
    return 5 * n


def gru_scratch(h: int, batch: int) -> int:
    """Doubles of scratch ``qe_misc_gru_f32`` needs."""
    return batch * h + 4 * h


def _fptr(ffi, a):
    return ffi.cast("float *", ffi.from_buffer(a)) if a is not None else ffi.NULL


def lstm(xs: np.ndarray, a: list, reverse: bool, cell_clip: float, out_clip: float):
    """(out [T, B, P], last c [B, N], last h [B, P]) of the float32 recurrence on steps-first
    ``xs`` [T, B, I]; ``a``: the op's 25 inputs by position as float32 (None where absent)."""
    lib, ffi = _fast.library()
    xs = _c32(xs)
    steps, batch, n_in = xs.shape
    n, p = a[1].shape[0], a[4].shape[1]
    keep = [None if a[i] is None else _c32(a[i]) for i in LSTM_WEIGHTS]
    w = ffi.new("float *[17]", [_fptr(ffi, v) for v in keep])
    h0 = None if a[LSTM_H0] is None else _c32(a[LSTM_H0])
    c0 = None if a[LSTM_C0] is None else _c32(a[LSTM_C0])
    out = np.empty((steps, batch, p), np.float32)
    c_last = np.empty((batch, n), np.float32)
    h_last = np.empty((batch, p), np.float32)
    scratch = np.empty(lstm_scratch(n), np.float32)
    dims = np.array([steps, batch, n_in, n, p, int(reverse), batch * n_in, n_in, batch * p, p], np.int64)
    clips = np.array([cell_clip, out_clip], np.float64)
    rc = lib.qe_misc_lstm_f32(_fptr(ffi, xs), w, _fptr(ffi, h0), _fptr(ffi, c0), _fptr(ffi, out),
                              _fptr(ffi, c_last), _fptr(ffi, h_last), _fptr(ffi, scratch),
                              ffi.cast("int64_t *", ffi.from_buffer(dims)),
                              ffi.cast("double *", ffi.from_buffer(clips)))
    if rc:
        raise RuntimeError(f"qe_misc_lstm_f32 failed ({rc})")
    return out, c_last, h_last


def gru(xs: np.ndarray, a: list, reverse: bool, linear_before_reset: bool):
    """(out [T, B, H] float32, last h [B, H] float32) of the float64 recurrence on steps-first
    float32 ``xs``; ``a``: the op's 15 inputs by position, float32 (None where absent)."""
    lib, ffi = _fast.library()
    xs = _c32(xs)
    steps, batch, n_in = xs.shape
    h = a[1].shape[0]
    keep = [_c32(a[i]) for i in GRU_WEIGHTS]
    w = ffi.new("float *[12]", [_fptr(ffi, v) for v in keep])
    h0 = None if a[GRU_H0] is None else _c32(a[GRU_H0]).reshape(-1)
    out = np.empty((steps, batch, h), np.float32)
    h_last = np.empty((batch, h), np.float32)
    scratch = np.empty(gru_scratch(h, batch), np.float64)
    dims = np.array([steps, batch, n_in, h, int(reverse), int(bool(linear_before_reset)),
                     batch * n_in, n_in, batch * h, h], np.int64)
    rc = lib.qe_misc_gru_f32(_fptr(ffi, xs), w, _fptr(ffi, h0), _fptr(ffi, out), _fptr(ffi, h_last),
                             ffi.cast("double *", ffi.from_buffer(scratch)),
                             ffi.cast("int64_t *", ffi.from_buffer(dims)))
    if rc:
        raise RuntimeError(f"qe_misc_gru_f32 failed ({rc})")
    return out, h_last


__all__ = ["GRU_H0", "GRU_WEIGHTS", "LSTM_C0", "LSTM_H0", "LSTM_LAYER_NORM", "LSTM_WEIGHTS",
           "gru", "gru_scratch", "lstm", "lstm_scratch"]
