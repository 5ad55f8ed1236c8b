"""Shared helpers of the op test modules (tests/test_ops*.py): QNN params and tensor specs
built from plain Python values, and the op check as the graph layer calls it."""
from __future__ import annotations

import numpy as np

from qnnemu import ops
from qnnemu.headers import Q
from qnnemu.ops import Param, TensorSpec

F32, U32, I32, BOOL = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_32,
                       Q.QNN_DATATYPE_BOOL_8)


def to_param(name, value) -> Param:
    """A Param from a Python value: bool -> BOOL_8; int -> UINT_32 (INT_32 when negative or an
    np.int32); float -> FLOAT_32; arrays -> tensors (FLOAT_32 for floats, INT_32 when int32 or
    negative, else UINT_32; empty -> UINT_32).  A Param passes through."""
    if isinstance(value, Param):
        return value
    if isinstance(value, (bool, np.bool_)):
        return Param(name, "scalar", BOOL, bool(value))
    if isinstance(value, np.int32):
        return Param(name, "scalar", I32, int(value))
    if isinstance(value, (int, np.integer)):
        return Param(name, "scalar", I32 if value < 0 else U32, int(value))
    if isinstance(value, float):
        return Param(name, "scalar", F32, value)
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.size:  # ([] is a float64 array to numpy: an empty UINT_32)
        return Param(name, "tensor", F32, arr.astype(np.float32))
    if arr.dtype == np.int32 or (arr.dtype.kind == "i" and (arr < 0).any()):
        return Param(name, "tensor", I32, arr.astype(np.int32))
    return Param(name, "tensor", U32, arr.astype(np.uint32))


def spec(shape, dtype=F32, quant=None, data=None) -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, quant, data)


def check(op_type, specs, params=None, declared=None):
    """The op's check (validation and inference) on specs, with params from Python values."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    return cls.check(specs, ps, declared_outputs=declared)
