"""Qnn_DataType_t (QnnTypes.h): element sizes, numpy storage types and categories."""
from __future__ import annotations

import numpy as np

from ..headers import Q

# value -> (name, numpy storage dtype or None, bytes per element)
_TABLE = {
    Q.QNN_DATATYPE_INT_8: ("INT_8", np.int8),
    Q.QNN_DATATYPE_INT_16: ("INT_16", np.int16),
    Q.QNN_DATATYPE_INT_32: ("INT_32", np.int32),
    Q.QNN_DATATYPE_INT_64: ("INT_64", np.int64),
    Q.QNN_DATATYPE_UINT_8: ("UINT_8", np.uint8),
    Q.QNN_DATATYPE_UINT_16: ("UINT_16", np.uint16),
    Q.QNN_DATATYPE_UINT_32: ("UINT_32", np.uint32),
    Q.QNN_DATATYPE_UINT_64: ("UINT_64", np.uint64),
    Q.QNN_DATATYPE_FLOAT_16: ("FLOAT_16", np.float16),
    Q.QNN_DATATYPE_FLOAT_32: ("FLOAT_32", np.float32),
    Q.QNN_DATATYPE_FLOAT_64: ("FLOAT_64", np.float64),
    # bfloat16 has no numpy type; stored as its 16-bit pattern.
    Q.QNN_DATATYPE_BFLOAT_16: ("BFLOAT_16", np.uint16),
    Q.QNN_DATATYPE_SFIXED_POINT_8: ("SFIXED_POINT_8", np.int8),
    Q.QNN_DATATYPE_SFIXED_POINT_16: ("SFIXED_POINT_16", np.int16),
    Q.QNN_DATATYPE_SFIXED_POINT_32: ("SFIXED_POINT_32", np.int32),
    Q.QNN_DATATYPE_UFIXED_POINT_8: ("UFIXED_POINT_8", np.uint8),
    Q.QNN_DATATYPE_UFIXED_POINT_16: ("UFIXED_POINT_16", np.uint16),
    Q.QNN_DATATYPE_UFIXED_POINT_32: ("UFIXED_POINT_32", np.uint32),
    # 4-bit fixed point occupies one byte per element in QNN client buffers.
    Q.QNN_DATATYPE_SFIXED_POINT_4: ("SFIXED_POINT_4", np.int8),
    Q.QNN_DATATYPE_UFIXED_POINT_4: ("UFIXED_POINT_4", np.uint8),
    Q.QNN_DATATYPE_BOOL_8: ("BOOL_8", np.uint8),
    # QNN 2.50 minifloats: the vendor accepts such tensors (no op computes them here); FLOAT_8
    # is one byte, FLOAT_4 one byte per element like the 4-bit fixed-point types.
    Q.QNN_DATATYPE_FLOAT_8: ("FLOAT_8", np.uint8),
    Q.QNN_DATATYPE_FLOAT_4: ("FLOAT_4", np.uint8),
}

FLOAT_TYPES = frozenset({Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_64,
                         Q.QNN_DATATYPE_BFLOAT_16})
FIXED_POINT_TYPES = frozenset(v for v, (n, _) in _TABLE.items() if "FIXED_POINT" in n)
INT_TYPES = frozenset(v for v, (n, _) in _TABLE.items() if n.startswith(("INT_", "UINT_")))
BOOL_TYPES = frozenset({Q.QNN_DATATYPE_BOOL_8})


def is_known(dtype: int) -> bool:
    return dtype in _TABLE


def name(dtype: int) -> str:
    entry = _TABLE.get(dtype)
    return f"QNN_DATATYPE_{entry[0]}" if entry else f"unknown data type {dtype}"


def numpy_dtype(dtype: int) -> np.dtype:
    return np.dtype(_TABLE[dtype][1])


def itemsize(dtype: int) -> int:
    return numpy_dtype(dtype).itemsize


def from_numpy(dt) -> int:
    """The plain (non-quantized) QNN type for a numpy dtype."""
    dt = np.dtype(dt)
    if dt == np.bool_:
        return Q.QNN_DATATYPE_BOOL_8
    for value, (n, np_type) in _TABLE.items():
        if np.dtype(np_type) == dt and "FIXED" not in n and n not in ("BFLOAT_16", "BOOL_8", "FLOAT_8", "FLOAT_4"):
            return value
    raise TypeError(f"no QNN data type for numpy dtype {dt}")
