"""Raw tensor files of the QNN SDK tools (qnn-net-run's input lists and outputs): float32 files
quantized/dequantized at the edges (:mod:`.quantization`), or "native" files in the tensor's own
storage type (``--use_native_input_files``).
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes
from ..headers import Q
from .quantization import dequantize, quantize
from .reporting import ToolError


def _bfloat16_bits(x: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest, ties to even
    return rounded.astype(np.uint16)


def to_tensor(x: np.ndarray, tensor) -> np.ndarray:
    """A float32 array -> the tensor's storage type (quantizing fixed-point tensors)."""
    qtype = tensor.dtype
    if qtype in dtypes.FIXED_POINT_TYPES:
        if not tensor.quant:
            raise ToolError(f"tensor {tensor.name!r} is {dtypes.name(qtype)} without a "
                            f"quantization encoding; use native input files")
        return quantize(x, qtype, tensor.quant)
    if qtype == Q.QNN_DATATYPE_BFLOAT_16:
        return _bfloat16_bits(x)
    return x.astype(dtypes.numpy_dtype(qtype))


def from_tensor(y: np.ndarray, tensor) -> np.ndarray:
    """An output in the tensor's storage type -> float32 (dequantizing fixed-point ones)."""
    qtype = tensor.dtype
    if qtype in dtypes.FIXED_POINT_TYPES and tensor.quant:
        return dequantize(y, tensor.quant)
    if qtype == Q.QNN_DATATYPE_BFLOAT_16:
        return (y.astype(np.uint32) << 16).view(np.float32)
    return y.astype(np.float32)


def read_raw(path: str, tensor, native: bool) -> np.ndarray:
    """A raw input file for ``tensor``: float32 (converted) or, ``native``, its storage type."""
    file_dtype = tensor.numpy_dtype if native else np.dtype(np.float32)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise ToolError(f"input {tensor.name!r}: cannot read {path}: {e.strerror or e}") from None
    count = int(np.prod(tensor.shape, dtype=np.int64))
    expected = count * file_dtype.itemsize
    if data.size != expected:
        raise ToolError(f"input {tensor.name!r}: {path} has {data.size} bytes, expected "
                        f"{expected} ({count} x {file_dtype.name}"
                        f"{'' if native else ', float32 file; --use_native_input_files for the tensor type'})")
    array = data.view(file_dtype).reshape(tensor.shape)
    return array if native else to_tensor(array, tensor)


def output_file_name(tensor_name: str) -> str:
    """``<tensor>.raw`` with characters that are unsafe in file names replaced by '_'."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in tensor_name)
    return (safe or "_") + ".raw"
