"""Graph tensors of qnnemu.client: the ``Tensor`` record and the builder of the ``Qnn_Tensor_t``
structs (QnnTypes.h, version 1 or 2) that tensorCreateGraphTensor, tensorUpdateGraphTensors,
graphAddNode and graphExecute receive.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import dtypes
from ..headers import Q
from .cabi import _contiguous, ffi
from .quant import write_quant


class Tensor:
    """A graph tensor: its name, QNN id, type, shape, data type and quantization encoding
    (``quant``: None or the JSON form of qnnemu.client.quant, e.g.
    ``{"encoding": 0, "scale": 0.1, "offset": -128}``)."""

    def __init__(self, struct, name: str, shape: tuple[int, ...], dtype: int, type_: int,
                 quant: dict | None = None):
        self.struct = struct  # cdata "Qnn_Tensor_t *" as created (id filled in)
        self.name = name
        self.shape = shape
        self.dtype = dtype  # Qnn_DataType_t
        self.type = type_   # Qnn_TensorType_t
        self.quant = quant

    @property
    def id(self) -> int:
        s = self.struct
        return int(s.v2.id if s.version == Q.QNN_TENSOR_VERSION_2 else s.v1.id)

    @property
    def numpy_dtype(self) -> np.dtype:
        return dtypes.numpy_dtype(self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.shape}, {dtypes.name(self.dtype)})"


class TensorStructs:
    """Makes ``Qnn_Tensor_t`` structs of one tensor version; everything they point to (names,
    dimensions, quantization arrays, data) is appended to ``keep``, which the owner holds as
    long as the backend may read it."""

    def __init__(self, tensor_version: int, keep: list[Any]):
        self.version = tensor_version
        self.keep = keep

    def new(self, name: str, shape: tuple[int, ...], qtype: int, type_: int,
            quant: dict | None, tensor_id: int = 0):
        """A struct without data (``quant``: the JSON form or None); returns (struct, its
        v1/v2 member)."""
        t = ffi.new("Qnn_Tensor_t *")
        t.version = Q.QNN_TENSOR_VERSION_2 if self.version == 2 else Q.QNN_TENSOR_VERSION_1
        v = t.v2 if self.version == 2 else t.v1
        cname = ffi.new("char[]", name.encode())
        # A rank-0 tensor gets a NULL dimensions pointer (as ONNX Runtime's QNN EP passes it:
        # the vendor's backend crashes in some ops when a rank-0 tensor points at dimensions).
        dims = ffi.new("uint32_t[]", list(shape)) if shape else ffi.NULL
        self.keep += [cname, dims]
        v.id = tensor_id
        v.name = cname
        v.type = type_
        v.dataFormat = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
        v.dataType = qtype
        write_quant(ffi, v.quantizeParams, quant, self.keep)
        v.rank = len(shape)
        v.dimensions = dims
        v.memType = Q.QNN_TENSORMEMTYPE_RAW
        v.clientBuf.data = ffi.NULL
        v.clientBuf.dataSize = 0
        if self.version == 2:
            v.isDynamicDimensions = ffi.NULL
            v.sparseParams.type = Q.QNN_SPARSE_LAYOUT_UNDEFINED
            v.isProduced = 0
        return t, v

    def attach(self, v, name: str, value, dtype, shape: tuple[int, ...], keep: list[Any],
               what: str = "data") -> None:
        """Points ``v``'s client buffer at ``value`` converted to ``dtype`` (a C-contiguous copy
        when needed, kept in ``keep``); ``value`` must have ``shape``."""
        data = _contiguous(value, dtype)
        if data.shape != shape:
            raise ValueError(f"tensor {name!r}: {what} shape {data.shape} != {shape}")
        buf = ffi.from_buffer(data)
        keep += [data, buf]
        v.clientBuf.data = buf
        v.clientBuf.dataSize = data.nbytes


__all__ = ["Tensor", "TensorStructs"]
