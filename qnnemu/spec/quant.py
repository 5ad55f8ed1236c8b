"""Fixed-point arithmetic of Qnn_QuantizeParams_t (QnnTypes.h): quantize, dequantize, requantize.

The one quantization vocabulary of qnnemu: the backend's execution plan (core/plan.py), the
conversion ops (ops/cast.py), the clients and the command-line tools (qnnemu/tools) all quantize
with :class:`Requantize` and dequantize with :class:`Dequantizer`, so the tools' float files
become exactly the codes the backend's own Quantize computes.

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

Degenerate values give defined codes without floating-point exceptions (numpy warnings would
reach the application's stderr): a scale whose reciprocal overflows float32 (zero, subnormal)
uses the largest float32 instead, so real 0 stays at the zero point and everything else
saturates; a per-channel scale of 0 maps its channel to the zero point; NaN quantizes to the
top code, as the vendor's Quantize does (tests/test_process_hygiene.py); an accumulating op's
channel whose multiplier is 0 (a weight scale of 0 or one too small for float32, a discarded
channel) outputs its zero point, bias included, as the vendor's does.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ..headers import Q
from . import dtypes
from .tensor import QuantSpec

ROUNDING = "half_away_from_zero"
_F32_MAX = np.float32(np.finfo(np.float32).max)

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
        assert axis is not None   # (block quantization always has its channel axis)
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


def reciprocal_f32(scale) -> np.float32:
    """1 / scale in float32, saturated to the largest float32 when it overflows (a zero or
    subnormal scale): multiplying by it keeps 0 at 0 (0 * inf would be NaN)."""
    with np.errstate(over="ignore", divide="ignore"):
        inv = np.float32(1.0) / np.float32(scale)
    return inv if np.isfinite(inv) else _F32_MAX


def clamp_codes(y: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``y`` clamped to [lo, hi] in place, NaN to ``hi`` (the vendor's Quantize gives NaN the
    top code; np.clip would keep NaN, whose integer cast is undefined)."""
    np.fmin(y, hi, out=y)
    np.maximum(y, lo, out=y)
    return y


def _safe_divisor(scale: np.ndarray) -> np.ndarray:
    """Per-channel scales with 0 replaced by inf: x / inf = 0, so such a channel quantizes to
    its zero point instead of inf/NaN."""
    return np.where(scale == 0, np.inf, scale) if np.any(scale == 0) else scale


def quantize(x: np.ndarray, spec: QuantSpec, dtype: int, mode: str = ROUNDING) -> np.ndarray:
    """Codes of ``x`` in ``dtype``: clamp(round(x / scale) - offset), rounding per ``mode``
    (:class:`Requantize`)."""
    return Requantize(spec, dtype, mode)(x)


# op type -> rounding of its requantized outputs, as observed on the vendor's libQnnHtp.so
# (tests/test_quant_vendor.py pins each entry).
ROUNDING_BY_OP = {
    # float -> 8-bit codes: x * (1 / scale) is rounded to float16 first, then half away from
    # zero; 16-bit codes: the exact product of x and the float32 1 / scale, half away from zero
    # (``Requantize`` picks the variant by code width); docs/numerics.md "Quantize".
    "Quantize": "fp16_half_away_from_zero",
    "ElementWiseAdd": "half_up",
    "ElementWiseMultiply": "half_up",
}
DEFAULT_ROUNDING = "half_even"

_ROUND: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "half_even": np.rint,
    "half_up": lambda y: np.floor(y + np.float32(0.5)),
    "half_away_from_zero": round_half_away,
    # the scaled value as float16 (round to nearest even, saturating), then half away from zero
    "fp16_half_away_from_zero": lambda y: round_half_away(
        np.clip(y, -65504.0, 65504.0).astype(np.float16).astype(np.float32)),
    # the product x * (1 / scale) not rounded to float32 (computed in float64, where the product
    # of two float32 values is exact), then half away from zero
    "exact_half_away_from_zero": round_half_away,
}
# modes whose per-tensor product x * (1 / scale) is kept exact (float64) instead of float32
_EXACT_PRODUCT = {"exact_half_away_from_zero"}


def rounding_for(op_type: str) -> str:
    """The rounding mode of ``op_type``'s requantized outputs (``ROUNDING_BY_OP``)."""
    return ROUNDING_BY_OP.get(op_type, DEFAULT_ROUNDING)


class Requantize:
    """float result -> codes of one tensor, with one rounding mode (pre-resolved: per-tensor
    encodings of 8/16-bit codes multiply by a float32 reciprocal, everything else divides in
    float64)."""

    __slots__ = ("spec", "dtype", "round", "lo", "hi", "inv", "offset", "np_dtype", "mode")

    def __init__(self, spec: QuantSpec, dtype: int, mode: str = ROUNDING):
        if mode == "fp16_half_away_from_zero" and dtypes.itemsize(dtype) != 1:
            # the float16 step is for 8-bit codes only; the vendor's 16-bit Quantize rounds the
            # exact product (tests/test_quant_tools.py pins both)
            mode = "exact_half_away_from_zero" if dtypes.itemsize(dtype) == 2 else "half_away_from_zero"
        self.spec, self.dtype, self.mode = spec, dtype, mode
        self.round = _ROUND[mode]
        self.lo, self.hi = code_range(dtype, spec.bitwidth)
        self.np_dtype = dtypes.numpy_dtype(dtype)
        # 32-bit codes do not fit float32 (2**31 - 1 rounds up to 2**31): the float64 path.
        per_tensor = (spec.axis is None and spec.block_scales is None
                      and dtypes.itemsize(dtype) < 4)
        # a zero or subnormal scale: 1/scale saturates (reciprocal_f32), NaN -> top code
        self.inv = reciprocal_f32(spec.scale) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.inv is None:
            scale, offset = scale_offset_arrays(self.spec, np.shape(x), np.float64)
            y = self.round(np.asarray(x, np.float64) / _safe_divisor(scale)) - offset
        elif self.mode in _EXACT_PRODUCT:
            y = self.round(np.multiply(x, np.float64(self.inv), dtype=np.float64))
            y -= np.float64(self.offset)
        else:
            y = np.multiply(x, self.inv, dtype=np.float32)
            y = self.round(y)
            y -= self.offset
        return clamp_codes(np.asarray(y), self.lo, self.hi).astype(self.np_dtype)


class Dequantizer:
    """A pre-resolved input converter: codes -> float32 real values."""

    __slots__ = ("spec", "scale", "offset")

    def __init__(self, spec: QuantSpec):
        self.spec = spec
        per_tensor = spec.axis is None and spec.block_scales is None
        self.scale = np.float32(spec.scale) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, q: np.ndarray) -> np.ndarray:
        if self.scale is None or self.offset is None:   # (both None, or neither)
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


# -- QuantSpec <-> the JSON form ----------------------------------------------------------------
#
# The dict form of Qnn_QuantizeParams_t that qnnemu.system_client returns, graph JSON
# descriptions (docs/graph-json.md) carry and the tools read: {"encoding", "scale", "offset"[,
# "bitwidth"]} per tensor, {"encoding", "axis", "scales", "offsets"[, "bitwidth"]} per axis.

_PER_AXIS_KEYS = ("axis", "scales")


def spec_from_dict(quant: dict | None) -> QuantSpec | None:
    """The QuantSpec of a JSON-form encoding (None: not quantized).  Raises ValueError for a
    form that has neither a scale nor per-axis scales (KeyError/TypeError for malformed values
    propagate as ValueError too)."""
    if not quant:
        return None
    try:
        bitwidth = int(quant["bitwidth"]) if quant.get("bitwidth") else None
        encoding = int(quant.get("encoding", Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET))
        if all(k in quant for k in _PER_AXIS_KEYS):
            scales = np.asarray(quant["scales"], np.float32)
            offsets = np.asarray(quant.get("offsets", [0] * scales.size), np.int64)
            return QuantSpec(encoding, scales, offsets, int(quant["axis"]), bitwidth)
        if "scale" in quant:
            return QuantSpec(encoding, float(np.float32(quant["scale"])), int(quant.get("offset", 0)),
                              None, bitwidth)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"bad quantization encoding {quant!r}: {e}") from None
    raise ValueError(f"quantization encoding {quant.get('encoding')} has neither a scale nor "
                     f"per-axis scales")


def spec_to_dict(spec: QuantSpec | None) -> dict | None:
    """The JSON form of ``spec`` (None: not quantized); inverse of :func:`spec_from_dict` for
    per-tensor and per-axis encodings."""
    if spec is None:
        return None
    out: dict = {"encoding": int(spec.encoding)}
    if spec.axis is None:
        out.update(scale=float(np.float32(spec.scale)), offset=int(spec.offset))
    else:
        out.update(axis=int(spec.axis), scales=[float(x) for x in np.asarray(spec.scale, np.float32)],
                   offsets=[int(x) for x in np.asarray(spec.offset)])
    if spec.bitwidth:
        out["bitwidth"] = int(spec.bitwidth)
    return out


# -- the HTP's integer requantization of accumulating ops ------------------------------------
#
# What the vendor's libQnnHtp.so computes for quantized Conv2d / DepthWiseConv2d (stride 1) /
# FullyConnected / MatMul (docs/numerics.md, "Accumulating ops"; tests/test_quant_vendor.py pins
# it).  ``acc`` below is the exact integer sum of (x_code + x_offset) * w over the reduction
# (padding contributes 0, i.e. the input's zero point), ``wsum`` the sum of a channel's weights.

def round_significant(m, bits: int = 11):
    """``m`` rounded to ``bits`` significant bits (round to nearest even), any exponent: the
    precision of the HTP's requantization multiplier (a float16 mantissa without its exponent
    limits)."""
    mant, exp = np.frexp(np.asarray(m, dtype=np.float64))
    return np.ldexp(np.rint(mant * (1 << bits)) / (1 << bits), exp)


def _prepare_kernels():
    """(lib, ffi) of the compiled kernels for finalize-time helpers (csrc/eng_prepare.c), or
    None: not built, or QNNEMU_KERNELS=reference (the numpy formulas only)."""
    if os.environ.get("QNNEMU_KERNELS", "").strip().lower() == "reference":
        return None
    try:
        from .._kernels import ffi, lib
    except ImportError:
        return None
    return lib, ffi


def _int8_requant(w: np.ndarray, hi: np.ndarray, lo: np.ndarray):
    """The per-channel requantization of :func:`htp_int8_weights`, ``hi``/``lo`` broadcastable
    channel maxima/minima.  Returns (weights, factor broadcastable like ``hi``)."""
    over = (hi > 127) | (lo < -128)
    if not np.any(over):
        return w, np.ones_like(hi, dtype=np.float64)
    f = np.maximum(hi / 127.0, -lo / 128.0)
    fq = np.rint(f * 2048.0) / 2048.0
    # (channels that need no requantization may have fq 0: they never use recip)
    recip = np.rint(65536.0 / np.where(over, fq, 1.0))
    kernels = _prepare_kernels()
    if kernels is not None and w.ndim == 2 and hi.shape == (w.shape[1],) and w.dtype == np.float64:
        # the same formula in one C pass (finalize time: every weight of a quantized model)
        lib, ffi = kernels
        w = np.ascontiguousarray(w)
        mult = np.ascontiguousarray(np.where(over, recip * (1.0 / 65536.0), 1.0), dtype=np.float64)
        flags = np.ascontiguousarray(over, dtype=np.uint8)
        a = np.empty_like(w)
        rc = lib.qe_int8_requant(ffi.from_buffer("double[]", w), w.shape[0], w.shape[1],
                                 ffi.from_buffer("double[]", mult), ffi.from_buffer("uint8_t[]", flags),
                                 ffi.from_buffer("double[]", a))
        if rc == 0:
            return a, np.where(over, fq, 1.0)
    # w * recip is an exact integer (below 2**26) and 2**-16 an exact scaling, so one product
    # with recip * 2**-16 is the same value; then half away from zero, in place (finalize time:
    # the weights of a whole quantized model pass through here).
    a = w * np.where(over, recip * (1.0 / 65536.0), 1.0)
    negative = np.signbit(a)
    np.abs(a, out=a)
    a += 0.5
    np.floor(a, out=a)
    np.negative(a, out=a, where=negative)
    if not np.all(over):
        a = np.where(over, a, w)
    return a, np.where(over, fq, 1.0)


def htp_int8_operand(w: np.ndarray, reduce_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`htp_int8_weights` for an operand whose channels are all positions but
    ``reduce_axis`` (a dynamic MatMul in1 [..., k, n]: per batch and column, requantized when
    the op runs).  Returns (weights, factor with ``reduce_axis`` kept as size 1)."""
    w = np.asarray(w, dtype=np.float64)
    hi = w.max(axis=reduce_axis, keepdims=True)
    lo = w.min(axis=reduce_axis, keepdims=True)
    return _int8_requant(w, hi, lo)


def htp_int8_weights(w: np.ndarray, channel_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-point-adjusted 8-bit weights (integers, any range) as the HTP stores them: int8.

    A channel whose values leave [-128, 127] (an asymmetric uint8 encoding whose zero point is
    not 128) is requantized symmetrically (static weights when the graph is prepared, a dynamic
    MatMul in1 per column when it runs): its scale grows by ``f = max(max/127, -min/128)``
    rounded to 11 fractional bits, and its values become round(w * round(2**16 / f) / 2**16)
    (half away from zero).  Returns (int8-range weights as float64, per-channel factor)."""
    w = np.asarray(w, dtype=np.float64)
    moved = np.moveaxis(w, channel_axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    flat, factor = _int8_requant(flat, flat.max(axis=0), flat.min(axis=0))
    out = np.moveaxis(flat.reshape(moved.shape), -1, channel_axis)
    return np.ascontiguousarray(out), factor


def htp_int8_weight_codes(codes: np.ndarray, offset, channel_axis: int, requantize: bool = True):
    """:func:`htp_int8_weights` of ``codes + offset`` (8-bit weight codes, integer QNN offsets per
    channel or one), computed from the codes in one C pass (csrc/eng_prepare.c
    qe_weight_codes) instead of float64 passes over every weight (finalize time of a quantized
    model).  ``requantize`` False takes the values as they are (strided depthwise).

    Returns (the values as int8, or int16 when they leave int8, in ``codes``' layout; the
    per-channel factor; int64 per-channel sums; int64 per-channel sums of magnitudes), or None
    when the C kernels are off or the values do not fit int16 (the caller then takes the
    float64 route, whose values these are exactly)."""
    kernels = _prepare_kernels()
    codes = np.asarray(codes)
    if kernels is None or codes.dtype not in (np.uint8, np.int8) or codes.size == 0 or codes.ndim == 0:
        return None
    moved = np.moveaxis(codes, channel_axis, -1)
    n = moved.shape[-1]
    flat = np.ascontiguousarray(moved).reshape(-1, n)
    off = np.asarray(offset, dtype=np.float64).reshape(-1)
    if off.size not in (1, n) or not np.all(np.isfinite(off)) or np.any(off != np.floor(off)) \
            or np.any(np.abs(off) > 65280):   # qe_weight_codes' integer lanes
        return None
    off = np.ascontiguousarray(np.broadcast_to(off, (n,)))
    recip = np.full(n, 65536.0)   # 2**16 / 1: a channel kept as it is
    factor = np.ones(n)
    lib, ffi = kernels
    code_type = 0 if flat.dtype == np.uint8 else 1
    if requantize:
        # the channel maxima of code + offset are the code maxima + offset (exact in float64)
        mn, mx = np.empty(n, np.int32), np.empty(n, np.int32)
        if lib.qe_code_minmax(ffi.cast("void *", ffi.from_buffer(flat)), code_type, flat.shape[0], n,
                              ffi.cast("int32_t *", ffi.from_buffer(mn)), ffi.cast("int32_t *", ffi.from_buffer(mx))):
            return None
        hi = mx.astype(np.float64) + off
        lo = mn.astype(np.float64) + off
        over = (hi > 127) | (lo < -128)
        if np.any(over):   # _int8_requant's per-channel formula
            f = np.maximum(hi / 127.0, -lo / 128.0)
            fq = np.rint(f * 2048.0) / 2048.0
            with np.errstate(divide="ignore"):   # fq 0 only in channels kept as they are
                recip = np.where(over, np.rint(65536.0 / fq), 65536.0)
            factor = np.where(over, fq, 1.0)
    if not np.all((recip >= 1) & (recip <= 65536)):
        return None
    off32 = np.ascontiguousarray(off, dtype=np.int32)
    recip32 = np.ascontiguousarray(recip, dtype=np.uint32)
    wsum = np.empty(n, np.int64)
    wabs = np.empty(n, np.int64)
    for dtype in (np.int8, np.int16):
        out = np.empty(flat.shape, dtype)
        rc = lib.qe_weight_codes(ffi.cast("void *", ffi.from_buffer(flat)), code_type,
                                 flat.shape[0], n, ffi.cast("int32_t *", ffi.from_buffer(off32)),
                                 ffi.cast("uint32_t *", ffi.from_buffer(recip32)),
                                 ffi.cast("void *", ffi.from_buffer(out)), out.itemsize,
                                 ffi.cast("int64_t *", ffi.from_buffer(wsum)),
                                 ffi.cast("int64_t *", ffi.from_buffer(wabs)))
        if rc == 0:
            values = np.moveaxis(out.reshape(moved.shape), -1, channel_axis)
            return np.ascontiguousarray(values), factor, wsum, wabs
        if rc != 2:
            return None
    return None


class AccRequant:
    """Output codes of an accumulating op from its exact integer accumulator, per output channel
    (the last output axis), the way the HTP requantizes.

    ``xs``, ``ws`` (per channel), ``ys``: input, weight and output scales; ``x_offset`` /
    ``y_offset``: QNN offsets (negated zero points); ``factor``: per-channel weight scale factor
    from :func:`htp_int8_weights`; ``bias``: per-channel bias in units of ``xs * ws`` (float) or
    None; ``wide``: 16-bit input activations.

    - multiplier ``M = xs * ws * factor / ys`` (float32 math), applied rounded to 11 significant
      bits;
    - 8-bit activations: the accumulator plus round(bias + zp_out / M) is shifted right (floor)
      by the ``s >= 0`` that puts ``M * 2**s`` in [1/16, 1/8);
    - 16-bit activations: shift 8; the input zero-point term zp_in * wsum / 256 (rounded half up)
      and floor((bias + zp_out / M) / 256) (float32) are added after the shift;
    - the shifted value times ``2**s * M`` is rounded half up and clamped;
    - ``fine`` (strided DepthWiseConv2d, 8 or 16 bits): M with 15 significant bits and no shift:
      round_half_up((acc + round(bias + zp_out / M)) * M); its weights are not requantized.
      ``multiplier_bits`` overrides the 15 (or 11) bits: 16-bit outputs on v73 and later run
      the fine path with a float32 multiplier (24 bits).
    """

    def __init__(self, xs, x_offset, ws, factor, ys, y_offset, bias, wide: bool,
                 lo: int, hi: int, fine: bool = False, multiplier_bits: int | None = None):
        f32 = np.float32
        ws = np.atleast_1d(np.asarray(ws, dtype=np.float32))
        factor = np.atleast_1d(np.asarray(factor, dtype=np.float64))
        # Degenerate scales: the multiplier may overflow (a tiny output scale: saturate to the
        # largest float32) or be 0 (a weight scale of 0 or too small: a dead channel).
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            m0 = (f32(xs) * ws).astype(np.float32) / f32(ys)                  # float32
            m = np.where(factor != 1.0, (m0 * factor.astype(np.float32)).astype(np.float32), m0)
        m = np.minimum(m.astype(np.float32), _F32_MAX)
        dead = m == 0
        self.dead = dead if np.any(dead) else None
        self.dead_code = float(np.clip(-float(y_offset), lo, hi))
        m = np.where(dead, np.float32(1.0), m)        # any finite value: dead outputs are replaced
        self.m32 = m.astype(np.float32)
        self.mq = round_significant(self.m32.astype(np.float64), multiplier_bits or (15 if fine else 11))
        self.wide = wide and not fine
        self.zp_x = -float(x_offset)
        zp_y = -float(y_offset)
        b = np.zeros_like(self.mq) if bias is None else np.asarray(bias, dtype=np.float64)
        if self.dead is not None:
            b = np.where(dead, 0.0, np.broadcast_to(b, np.broadcast_shapes(b.shape, dead.shape)))
        if self.wide:
            self.shift = np.full(self.mq.shape, 256.0)
            k = (f32(b).astype(np.float32) + (f32(zp_y) / self.m32).astype(np.float32))
            self.const = np.floor(k.astype(np.float32).astype(np.float64) / 256.0)
        else:
            _, e = np.frexp(self.mq)                # mq in [2**(e-1), 2**e)
            s = np.zeros_like(self.mq) if fine else np.maximum(0, -3 - e)
            self.shift = np.exp2(s)
            self.const = np.rint(b + zp_y / self.m32.astype(np.float64))
        self.scale = self.shift * self.mq
        self.inv_shift = 1.0 / self.shift
        self.lo, self.hi = lo, hi

    def __call__(self, acc: np.ndarray, wsum) -> np.ndarray:
        """``acc``: exact accumulator (float64 integers), channels last; ``wsum``: per-channel
        weight sums broadcastable against it (used by the 16-bit path)."""
        if self.wide:
            zw = self.zp_x * np.asarray(wsum, dtype=np.float64)
            data = acc + zw                                   # sum of x_code * w
            a = np.floor(data / 256.0) - np.floor(zw / 256.0 + 0.5) + self.const
            y = np.floor(a * self.scale + 0.5)
            y = np.clip(y, self.lo, self.hi)
            if self.dead is not None:
                np.copyto(y, self.dead_code, where=self.dead)
            return y
        # In place on a private float64 copy (the hot path of quantized CNNs); dividing by
        # the power-of-two shift is an exact multiplication by its inverse.
        a = np.array(acc, dtype=np.float64, copy=True) if acc.dtype != np.float64 or not acc.flags.writeable \
            else acc
        a += self.const
        a *= self.inv_shift
        np.floor(a, out=a)
        a *= self.scale
        a += 0.5
        np.floor(a, out=a)
        np.clip(a, self.lo, self.hi, out=a)
        if self.dead is not None:
            np.copyto(a, self.dead_code, where=self.dead)
        return a


__all__ = ["ROUNDING", "code_range", "dequantize", "quantize", "Requantize", "Dequantizer", "reciprocal_f32",
           "ROUNDING_BY_OP", "DEFAULT_ROUNDING", "rounding_for", "spec_from_dict", "spec_to_dict",
           "clamp_codes",
           "same_encoding", "scale_offset_arrays", "round_half_away", "round_significant",
           "htp_int8_weights", "htp_int8_weight_codes", "htp_int8_operand", "AccRequant"]
