"""Op implementations, one module per op family (QnnOpDef.h names), registered by class name."""
from __future__ import annotations

from . import (  # noqa: F401
    activation,
    attention,
    cast,
    conv,
    elementwise,
    gather,
    index,
    lstm,
    masked_softmax,
    matmul,
    norm,
    pool,
    random,
    reduce,
    resize,
    rnn,
    sample,
    shape,  # (importing registers the ops)
)
from ._fast import config  # QNNEMU_KERNELS: "fast" or "reference" (qnnemu/ops/_fast.py)
from .base import REGISTRY, Op, OpCheckError, Param, ParamSpec, QuantSpec, TensorSpec

PACKAGE_NAME = "qti.aisw"


def get(op_type: str, package: str = PACKAGE_NAME) -> type[Op] | None:
    if package not in (PACKAGE_NAME, "", None):
        return None
    return REGISTRY.get(op_type)


__all__ = ["REGISTRY", "Op", "OpCheckError", "Param", "ParamSpec", "QuantSpec", "TensorSpec",
           "config", "get", "PACKAGE_NAME"]
