"""Fixed-point arithmetic of Qnn_QuantizeParams_t (QnnTypes.h): dequantize and requantize.

QNN's convention is ``real = scale * (q + offset)`` (``offset`` is the negated zero point).
Encodings executed here:

- SCALE_OFFSET / BW_SCALE_OFFSET: one scale and offset per tensor;
- AXIS_SCALE_OFFSET / BW_AXIS_SCALE_OFFSET: one pair per index of ``axis``;
- BLOCKWISE_EXPANSION (low-power blockwise quantization): a float scale per channel of
  ``axis`` times an integer block scale per block of the *blocked* axis.  The blocked axis is
  the weight's input-channel axis: ``rank - 2`` when ``axis`` is the last axis (HWIO conv
  filters, [in, out] MatMul weights), otherwise ``rank - 1`` ([out, in] FullyConnected).

Rounding when quantizing (``quantize``): round half away from zero, then clamp to the range
of the storage type narrowed to ``bitwidth`` when the encoding gives a smaller one (4-bit
weights stored in int8).  ``ROUNDING`` names the mode; the differential tests against the
vendor's backend check it (tests/test_quant_vendor.py).

The float math runs in float32 for activations (the HTP's requantization multiplier is a
32-bit value too) and float64 for static weights (exact for every 8/16-bit code).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..headers import Q
from . import dtypes

if TYPE_CHECKING:  # ops.base imports core modules; only the type is needed here
    from ..ops.base import QuantSpec

ROUNDING = "half_away_from_zero"

_STORAGE_BITS = {
    Q.QNN_DATATYPE_SFIXED_POINT_4: (4, True), Q.QNN_DATATYPE_UFIXED_POINT_4: (4, False),
    Q.QNN_DATATYPE_SFIXED_POINT_8: (8, True), Q.QNN_DATATYPE_UFIXED_POINT_8: (8, False),
    Q.QNN_DATATYPE_SFIXED_POINT_16: (16, True), Q.QNN_DATATYPE_UFIXED_POINT_16: (16, False),
    Q.QNN_DATATYPE_SFIXED_POINT_32: (32, True), Q.QNN_DATATYPE_UFIXED_POINT_32: (32, False),
}


def code_range(dtype: int, bitwidth: int | None = None) -> tuple[int, int]:
    """(min, max) code of a fixed-point type, narrowed to ``bitwidth`` when smaller."""
    bits, signed = _STORAGE_BITS[dtype]
    if bitwidth and 0 < bitwidth < bits:
        bits = bitwidth
    if signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _per_axis(values, axis: int, rank: int, dtype) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = -1
    return np.asarray(values, dtype=dtype).reshape(shape)


def scale_offset_arrays(spec: QuantSpec, shape: tuple[int, ...], dtype=np.float64):
    """(scale, offset) broadcastable against an array of ``shape``."""
    rank = len(shape)
    if spec.block_scales is not None:
        axis = spec.axis
        blocked = rank - 2 if axis == rank - 1 else rank - 1
        ch_scale = np.asarray(spec.scale, dtype=np.float64)           # [channels]
        blocks = np.asarray(spec.block_scales, dtype=np.float64)     # [channels, nblocks]
        nblocks = blocks.shape[1]
        block_len = shape[blocked] // nblocks
        full = ch_scale[:, None] * blocks                             # [channels, nblocks]
        full = np.repeat(full, block_len, axis=1)                     # [channels, blocked]
        # Place the two axes: result shape has shape[axis] at axis, shape[blocked] at blocked.
        out_shape = [1] * rank
        out_shape[axis] = shape[axis]
        out_shape[blocked] = shape[blocked]
        if axis > blocked:
            full = full.T
        scale = full.reshape(out_shape).astype(dtype)
        offset = _per_axis(spec.offset, axis, rank, dtype)
        return scale, offset
    if spec.axis is not None:
        return _per_axis(spec.scale, spec.axis, rank, dtype), _per_axis(spec.offset, spec.axis, rank, dtype)
    return dtype(spec.scale) if dtype is not None else spec.scale, dtype(spec.offset)


def dequantize(q: np.ndarray, spec: QuantSpec, out_dtype=np.float32) -> np.ndarray:
    """real = scale * (q + offset), computed in float64 for exactness, returned as ``out_dtype``."""
    scale, offset = scale_offset_arrays(spec, q.shape, np.float64)
    return (scale * (q.astype(np.float64) + offset)).astype(out_dtype, copy=False)


def round_half_away(x: np.ndarray) -> np.ndarray:
    return np.trunc(x + np.copysign(0.5, x))


def quantize(x: np.ndarray, spec: QuantSpec, dtype: int) -> np.ndarray:
    """Codes of ``x`` in ``dtype``: clamp(round(x / scale) - offset), rounding per ``ROUNDING``."""
    lo, hi = code_range(dtype, spec.bitwidth)
    if spec.axis is None and spec.block_scales is None and dtypes.itemsize(dtype) < 4:
        inv = np.float32(1.0) / np.float32(spec.scale)
        y = round_half_away(np.asarray(x, dtype=np.float32) * inv) - np.float32(spec.offset)
    else:
        scale, offset = scale_offset_arrays(spec, x.shape, np.float64)
        y = round_half_away(np.asarray(x, dtype=np.float64) / scale) - offset
    return np.clip(y, lo, hi).astype(dtypes.numpy_dtype(dtype))


class Requantizer:
    """A pre-resolved output converter: float array -> codes of one tensor (per-tensor fast path)."""

    __slots__ = ("spec", "dtype", "lo", "hi", "inv", "offset", "np_dtype")

    def __init__(self, spec: QuantSpec, dtype: int):
        self.spec, self.dtype = spec, dtype
        self.lo, self.hi = code_range(dtype, spec.bitwidth)
        self.np_dtype = dtypes.numpy_dtype(dtype)
        per_tensor = spec.axis is None and spec.block_scales is None and dtypes.itemsize(dtype) < 4
        self.inv = np.float32(1.0 / np.float32(spec.scale)) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.inv is None:
            return quantize(x, self.spec, self.dtype)
        y = np.multiply(x, self.inv, dtype=np.float32)
        y = round_half_away(y)
        y -= self.offset
        np.clip(y, self.lo, self.hi, out=y)
        return y.astype(self.np_dtype)


class Dequantizer:
    """A pre-resolved input converter: codes -> float32 real values."""

    __slots__ = ("spec", "scale", "offset")

    def __init__(self, spec: QuantSpec):
        self.spec = spec
        per_tensor = spec.axis is None and spec.block_scales is None
        self.scale = np.float32(spec.scale) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, q: np.ndarray) -> np.ndarray:
        if self.scale is None:
            return dequantize(q, self.spec)
        y = q.astype(np.float32)
        y += self.offset
        y *= self.scale
        return y


def same_encoding(a: QuantSpec | None, b: QuantSpec | None) -> bool:
    """True when two tensors' codes mean the same real values."""
    if a is None or b is None:
        return a is b
    if (a.axis is None) != (b.axis is None) or (a.block_scales is None) != (b.block_scales is None):
        return False
    if a.axis is None and a.block_scales is None:
        return np.float32(a.scale) == np.float32(b.scale) and int(a.offset) == int(b.offset)
    return (a.axis == b.axis and np.array_equal(np.asarray(a.scale, np.float32), np.asarray(b.scale, np.float32))
            and np.array_equal(np.asarray(a.offset), np.asarray(b.offset))
            and (a.block_scales is None or np.array_equal(a.block_scales, b.block_scales)))


__all__ = ["ROUNDING", "code_range", "dequantize", "quantize", "Requantizer", "Dequantizer",
           "same_encoding", "scale_offset_arrays", "round_half_away"]
