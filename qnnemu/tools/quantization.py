"""Quantization glue of the tools: float files <-> fixed-point tensors in the JSON form of an
encoding (qnnemu.system_client's ``quant`` dict), computed by the one quantizer of
qnnemu.spec.quant -- the codes are exactly those the backend's Quantize op computes, with its
vendor-matched rounding (docs/numerics.md "Quantize"; tests/test_quant_tools.py).
"""
from __future__ import annotations

import numpy as np

from ..spec.quant import Requantize, dequantize as spec_dequantize, rounding_for, spec_from_dict
from .reporting import ToolError


def _spec(quant: dict):
    try:
        return spec_from_dict(quant)
    except ValueError:
        raise ToolError(f"quantization encoding {quant.get('encoding')} is not supported for "
                        f"graph inputs/outputs by the qnnemu tools") from None


def quantize(x: np.ndarray, qtype: int, quant: dict) -> np.ndarray:
    """float -> fixed-point codes exactly as the backend's Quantize op computes them (QNN: real
    = scale * (code + offset); qnnemu.spec.quant, the Quantize op's vendor-matched rounding),
    saturated to the type's (or bitwidth's) range."""
    return Requantize(_spec(quant), qtype, rounding_for("Quantize"))(np.asarray(x, np.float32))


def dequantize(q: np.ndarray, quant: dict) -> np.ndarray:
    """fixed-point codes -> float32: ``scale * (code + offset)`` (qnnemu.spec.quant)."""
    return spec_dequantize(q, _spec(quant))
