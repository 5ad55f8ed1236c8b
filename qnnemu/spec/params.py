"""Qnn_Param_t (QnnTypes.h) as an op receives and declares it (QnnOpDef.h parameters).

``Param`` is a parameter as the application passed it; ``ParamSpec`` one entry of an op's
parameter declaration; ``type_category`` the category ("float", "int", "uint", "bool",
"string") a Qnn_DataType_t counts as when a parameter's type is checked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..headers import Q
from . import dtypes


@dataclass
class Param:
    """A parameter as the app passed it: a scalar (Python value) or a tensor (numpy array)."""

    name: str
    kind: str  # "scalar" or "tensor"
    dtype: int
    value: Any


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of an op definition.

    kind: "scalar" or "tensor".  types: allowed categories among "float", "int", "uint",
    "bool", "string" (fixed-point types count as their storage int/uint).  shape: for tensors,
    a tuple whose entries are ints or None (any size); ``None`` for any shape.
    default: value used when the param is absent (a callable is called for a fresh value);
    required: the param must be given.
    """

    kind: str
    types: tuple[str, ...]
    shape: tuple[int | None, ...] | None = None
    default: Any = None
    required: bool = False


def type_category(dtype: int) -> str:
    if dtype in dtypes.FLOAT_TYPES:
        return "float"
    if dtype in dtypes.BOOL_TYPES:
        return "bool"
    if dtype == Q.QNN_DATATYPE_STRING:
        return "string"
    name = dtypes.name(dtype)
    if "UINT" in name or "UFIXED" in name:
        return "uint"
    if "INT" in name or "SFIXED" in name:
        return "int"
    return "unknown"
