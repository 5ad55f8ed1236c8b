"""Requantization of a float result to the codes of an output tensor (QnnTypes.h
Qnn_QuantizeParams_t), with the rounding each HTP op was observed to use (QNN HTP backend
documentation, "QNN HTP Precision"; docs/numerics.md "Quantize").

Shared by the plan (qnnemu/core/plan.py requantizes every quantized node output) and the ops
that requantize inside their own computation (Cast/Convert in qnnemu/ops/cast.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

# The one quantizer (issue 12 item 4 moves it to qnnemu.spec.quant: tests/test_layers.py
# TEMPORARY_EXCEPTIONS).
from ..core.quant import clamp_codes, code_range, reciprocal_f32, round_half_away, scale_offset_arrays
from . import dtypes

# op type -> rounding of its requantized outputs, as observed on the vendor's libQnnHtp.so
# (values at exact half-LSB ties; see tests/test_quant_vendor.py).
ROUNDING_BY_OP = {
    # float -> 8-bit codes: x * (1 / scale) is rounded to float16 first, then half away from
    # zero (16-bit codes: no float16 step); docs/numerics.md "Quantize".
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
}


def rounding_for(op_type: str) -> str:
    return ROUNDING_BY_OP.get(op_type, DEFAULT_ROUNDING)


class Requantize:
    """float result -> codes of one output tensor, with one rounding mode."""

    __slots__ = ("spec", "dtype", "round", "lo", "hi", "inv", "offset", "np_dtype", "mode")

    def __init__(self, spec, dtype: int, mode: str):
        if mode == "fp16_half_away_from_zero" and dtypes.itemsize(dtype) != 1:
            mode = "half_away_from_zero"   # the float16 step is for 8-bit codes only
        self.spec, self.dtype, self.mode = spec, dtype, mode
        self.round = _ROUND[mode]
        self.lo, self.hi = code_range(dtype, spec.bitwidth)
        self.np_dtype = dtypes.numpy_dtype(dtype)
        # 32-bit codes do not fit float32 (2**31 - 1 rounds up to 2**31): the float64 path.
        per_tensor = (spec.axis is None and spec.block_scales is None
                      and dtypes.itemsize(dtype) < 4)
        # a zero or subnormal scale: 1/scale saturates (quant.reciprocal_f32), NaN -> top code
        self.inv = reciprocal_f32(spec.scale) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.inv is None:
            scale, offset = scale_offset_arrays(self.spec, x.shape, np.float64)
            if np.any(scale == 0):   # a channel with scale 0 quantizes to its zero point
                scale = np.where(scale == 0, np.inf, scale)
            y = self.round(np.asarray(x, np.float64) / scale) - offset
        else:
            y = np.multiply(x, self.inv, dtype=np.float32)
            y = self.round(y)
            y -= self.offset
        return clamp_codes(y, self.lo, self.hi).astype(self.np_dtype)
