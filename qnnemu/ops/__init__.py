"""Op implementations, one module per op family (QnnOpDef.h names), registered by class name."""
from __future__ import annotations

import os

from .base import REGISTRY, Op, OpCheckError, Param, ParamSpec, QuantSpec, TensorSpec
from . import (activation, attention, cast, conv, elementwise, gather, index, lstm,  # noqa: F401
               matmul, norm, pool, random, reduce, resize, rnn, sample,
               shape)  # (importing registers the ops)

PACKAGE_NAME = "qti.aisw"


class _Config:
    """``kernels``: "fast" uses the C kernels where an op has them, "reference" numpy only.

    Set with the environment variable QNNEMU_KERNELS or by assigning ``config.kernels``.
    """

    def __init__(self):
        self.kernels = os.environ.get("QNNEMU_KERNELS", "fast")


config = _Config()


def get(op_type: str, package: str = PACKAGE_NAME) -> type[Op] | None:
    if package not in (PACKAGE_NAME, "", None):
        return None
    return REGISTRY.get(op_type)


__all__ = ["REGISTRY", "Op", "OpCheckError", "Param", "ParamSpec", "QuantSpec", "TensorSpec",
           "config", "get", "PACKAGE_NAME"]
