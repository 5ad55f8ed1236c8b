"""QnnTypes.h Qnn_TensorType_t roles and what an op sees of a tensor (QnnOpDef.h).

The type groups decide each Qnn_TensorType_t's role in one place -- updatable tensors
(``QNN_TENSOR_TYPE_UPDATEABLE_*``) behave like their plain counterparts (docs/binary-sections.md)
-- and ``TensorSpec`` / ``QuantSpec`` are the shape, data type, quantization and static data an
op checks and computes with.  Shared by ops, htp (cost, kvcache) and core (tensors, plan).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..headers import Q

SUPPORTED_TYPES = {
    Q.QNN_TENSOR_TYPE_APP_WRITE: "APP_WRITE",
    Q.QNN_TENSOR_TYPE_APP_READ: "APP_READ",
    Q.QNN_TENSOR_TYPE_APP_READWRITE: "APP_READWRITE",
    Q.QNN_TENSOR_TYPE_NATIVE: "NATIVE",
    Q.QNN_TENSOR_TYPE_STATIC: "STATIC",
    Q.QNN_TENSOR_TYPE_NULL: "NULL",
    Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC: "UPDATEABLE_STATIC",
    Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE: "UPDATEABLE_NATIVE",
    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE: "UPDATEABLE_APP_WRITE",
    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ: "UPDATEABLE_APP_READ",
    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE: "UPDATEABLE_APP_READWRITE",
}
# Tensors whose data is given at creation (and read by nodes as constants).
STATIC_TYPES = (Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC)
APP_INPUT_TYPES = (Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READWRITE,
                   Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE)
APP_OUTPUT_TYPES = (Q.QNN_TENSOR_TYPE_APP_READ, Q.QNN_TENSOR_TYPE_APP_READWRITE,
                    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE)
# Graph outputs that may also be graph inputs (and so need no producer).
APP_READWRITE_TYPES = (Q.QNN_TENSOR_TYPE_APP_READWRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE)
NODE_OUTPUT_TYPES = (Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_APP_READ,
                     Q.QNN_TENSOR_TYPE_APP_READWRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE,
                     Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE)
# Node outputs that must be produced before a later node can read them (APP_READ graph
# outputs also feeding later nodes are accepted: ONNX Runtime emits them).
PRODUCED_TYPES = (Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_APP_READ,
                  Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ)
UPDATEABLE_TYPES = (Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE,
                    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ,
                    Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE)


def type_name(t: int) -> str:
    return f"QNN_TENSOR_TYPE_{SUPPORTED_TYPES[t]}" if t in SUPPORTED_TYPES else f"tensor type {t}"


def is_static(t) -> bool:
    """``t`` (a Tensor, TensorDesc or anything with ``type``) holds constant data."""
    return t.type in STATIC_TYPES


@dataclass(frozen=True)
class QuantSpec:
    """Quantization of a fixed-point tensor (QNN_QUANTIZATION_ENCODING_SCALE_OFFSET / AXIS_...).

    ``scale``/``offset`` are scalars for per-tensor encodings and 1-D arrays (with ``axis``) for
    per-axis ones.  real = scale * (q + offset), QNN's sign convention.
    """

    encoding: int
    scale: Any
    offset: Any
    axis: int | None = None
    bitwidth: int | None = None
    # BLOCKWISE_EXPANSION: integer block scales [channels, blocks] multiplying ``scale``.
    block_scales: Any = None


@dataclass
class TensorSpec:
    """What an op sees of a tensor while checking: shape, dtype, quantization, static data."""

    shape: tuple[int, ...]
    dtype: int
    quant: QuantSpec | None = None
    data: np.ndarray | None = None  # contents of STATIC tensors
    name: str = ""

    @property
    def rank(self) -> int:
        return len(self.shape)
