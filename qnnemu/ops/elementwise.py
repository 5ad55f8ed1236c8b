"""Binary element-wise ops with numpy broadcasting: ElementWiseAdd, ElementWiseSubtract,
ElementWiseMultiply, ElementWiseDivide, ElementWiseMaximum, ElementWiseMinimum
(QnnOpDef.h QNN_OP_ELEMENT_WISE_ADD, ...).

The output takes the broadcast shape and in[0]'s data type.  Division by zero follows IEEE
(inf / nan), as float hardware does.
"""
from __future__ import annotations

import numpy as np

from .base import Op, OpCheckError, TensorSpec, check_float_inputs, from_compute, same_spec, \
    to_compute


class _Binary(Op, register=False):
    inputs = ("in[0]", "in[1]")
    ufunc = None  # the numpy ufunc computing the op

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        check_float_inputs(cls.op_type, inputs)
        a, b = inputs
        try:
            shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        except ValueError:
            raise OpCheckError(f"QNNEMU-{cls.op_type}-broadcast", "inputTensors[1].dimensions",
                               f"dimensions {list(b.shape)} do not broadcast with input 0's "
                               f"{list(a.shape)} (trailing dimensions must be equal or 1)"
                               ) from None
        return [same_spec(a, shape=shape)]

    def _run(self, a, b):
        dtype = a.dtype
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = type(self).ufunc(to_compute(a), to_compute(b))
        return from_compute(np.asarray(y), dtype)


class ElementWiseAdd(_Binary):
    ufunc = np.add


class ElementWiseSubtract(_Binary):
    ufunc = np.subtract


class ElementWiseMultiply(_Binary):
    ufunc = np.multiply


class ElementWiseDivide(_Binary):
    ufunc = np.divide


class ElementWiseMaximum(_Binary):
    ufunc = np.maximum


class ElementWiseMinimum(_Binary):
    ufunc = np.minimum


__all__ = ["ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
           "ElementWiseMaximum", "ElementWiseMinimum"]
