"""Activations: Relu, ReluMinMax, Sigmoid, Tanh (QnnOpDef.h QNN_OP_RELU, ...)."""
from __future__ import annotations

import numpy as np

from .base import Op, ParamSpec, TensorSpec, check_float, same_spec


class _Unary(Op, register=False):
    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params) -> list[TensorSpec]:
        check_float(cls.op_type, 0, inputs[0])
        return [same_spec(inputs[0])]


class Relu(_Unary):
    def _run(self, x):
        return np.maximum(x, x.dtype.type(0))


class ReluMinMax(_Unary):
    params = {
        "min_value": ParamSpec("scalar", ("float",), required=True),
        "max_value": ParamSpec("scalar", ("float",), required=True),
    }

    @classmethod
    def infer(cls, inputs, params):
        from .base import OpCheckError
        if params["min_value"] > params["max_value"]:
            raise OpCheckError("QNNEMU-ReluMinMax-range", "params[min_value]",
                               f"min_value {params['min_value']} > max_value {params['max_value']}")
        return super().infer(inputs, params)

    def _run(self, x, min_value, max_value):
        return np.clip(x, x.dtype.type(min_value), x.dtype.type(max_value))


class Sigmoid(_Unary):
    def _run(self, x):
        # float64 intermediate keeps float32 results within 1 ulp-ish of the exact value.
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


class Tanh(_Unary):
    def _run(self, x):
        return np.tanh(x)
