"""Node descriptions of qnnemu.client: ``Qnn_Param_t`` scalars and the ``Qnn_OpConfig_t``
(QnnTypes.h, version 1) that graphAddNode and backendValidateOpConfig receive.

Parameter rule: a numpy scalar (or 0-d array) becomes a scalar of the matching QNN type; a
Python ``bool`` -> ``BOOL_8``, ``float`` -> ``FLOAT_32``, ``int`` -> ``UINT_32`` when non-negative
(most QNN integer parameters are ``uint32``), else ``INT_32``.  Tensor parameters are the
graph's business (``Graph.node``: STATIC tensors named ``<node>.<param>``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import dtypes
from ..headers import Q
from .cabi import ffi

_SCALAR_MEMBERS = {
    np.dtype(np.float32): "floatValue", np.dtype(np.float64): "doubleValue",
    np.dtype(np.uint64): "uint64Value", np.dtype(np.int64): "int64Value",
    np.dtype(np.uint32): "uint32Value", np.dtype(np.int32): "int32Value",
    np.dtype(np.uint16): "uint16Value", np.dtype(np.int16): "int16Value",
    np.dtype(np.uint8): "uint8Value", np.dtype(np.int8): "int8Value",
}


def scalar_param(value) -> tuple[int, str, Any]:
    """(Qnn_DataType_t, ``Qnn_Scalar_t`` union member, value) of a scalar parameter."""
    if isinstance(value, (bool, np.bool_)):
        return Q.QNN_DATATYPE_BOOL_8, "bool8Value", int(bool(value))
    if isinstance(value, float) and not isinstance(value, np.generic):
        return Q.QNN_DATATYPE_FLOAT_32, "floatValue", value
    if isinstance(value, int) and not isinstance(value, np.generic):
        if value >= 0:
            return Q.QNN_DATATYPE_UINT_32, "uint32Value", value
        return Q.QNN_DATATYPE_INT_32, "int32Value", value
    arr = np.asarray(value)
    qtype = dtypes.from_numpy(arr.dtype)
    member = _SCALAR_MEMBERS.get(arr.dtype)
    if member is None:
        raise TypeError(f"no QNN scalar for numpy dtype {arr.dtype}")
    return qtype, member, arr.item()


def set_scalar(p, value) -> None:
    """Makes the ``Qnn_Param_t`` ``p`` a scalar parameter holding ``value``."""
    qtype, member, v = scalar_param(value)
    p.paramType = Q.QNN_PARAMTYPE_SCALAR
    p.scalarParam.dataType = qtype
    setattr(p.scalarParam, member, v)


def _tensor_array(structs: Sequence[Any]):
    arr = ffi.new("Qnn_Tensor_t[]", max(len(structs), 1))
    for i, s in enumerate(structs):
        arr[i] = s[0]
    return arr


def op_config(name: str, package: str, op_type: str, cparams, num_params: int,
              inputs: Sequence[Any], outputs: Sequence[Any], keep: list[Any]):
    """A ``Qnn_OpConfig_t *`` (version 1) naming the node, its ``num_params`` parameters in
    ``cparams`` and copies of the ``inputs``/``outputs`` tensor structs (``Qnn_Tensor_t *``);
    what it points to is appended to ``keep``."""
    cin, cout = _tensor_array(inputs), _tensor_array(outputs)
    cname = ffi.new("char[]", name.encode())
    ctype = ffi.new("char[]", op_type.encode())
    cpkg = ffi.new("char[]", package.encode())
    keep += [cin, cout, cname, ctype, cpkg]
    op = ffi.new("Qnn_OpConfig_t *")
    op.version = Q.QNN_OPCONFIG_VERSION_1
    op.v1.name = cname
    op.v1.packageName = cpkg
    op.v1.typeName = ctype
    op.v1.numOfParams = num_params
    op.v1.params = cparams if num_params else ffi.NULL
    op.v1.numOfInputs = len(inputs)
    op.v1.inputTensors = cin if inputs else ffi.NULL
    op.v1.numOfOutputs = len(outputs)
    op.v1.outputTensors = cout
    return op


__all__ = ["scalar_param", "set_scalar", "op_config"]
