"""Activations: Relu, ReluMinMax, Sigmoid, Tanh, Softmax (QnnOpDef.h QNN_OP_RELU, ...,
QNN_OP_SOFTMAX)."""
from __future__ import annotations

import numpy as np

from .base import Op, ParamSpec, TensorSpec, check_float, same_spec


class _Unary(Op, register=False):
    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
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
    def infer(cls, inputs, params, declared_outputs=None):
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


class Softmax(_Unary):
    """out = exp(beta * (x - max)) / sum(exp(beta * (x - max))) along ``axis``.

    ``axis`` defaults to the last axis (rank - 1), so its default depends on the input and is
    resolved here rather than in the ParamSpec.
    """

    params = {
        "axis": ParamSpec("scalar", ("uint",), default=None),
        "beta": ParamSpec("scalar", ("float",), default=1.0),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        from .base import OpCheckError
        x = inputs[0]
        axis = params["axis"]
        if x.rank < 1:
            raise OpCheckError("QNNEMU-Softmax-input-rank", "inputTensors[0].rank",
                               f"Softmax needs rank >= 1, got {x.rank}")
        if axis is not None and not 0 <= axis < x.rank:
            raise OpCheckError("QNNEMU-Softmax-axis", "params[axis]",
                               f"axis must be in [0, {x.rank - 1}] for rank {x.rank}, got {axis}")
        return super().infer(inputs, params)

    def _run(self, x, axis=None, beta=1.0):
        axis = x.ndim - 1 if axis is None else axis
        # float64 intermediate: the exponent's rounding error is amplified by exp.
        z = beta * x.astype(np.float64)
        # Subtracting the max of beta * x (any sign of beta) keeps exponents <= 0: no overflow.
        z = np.exp(z - z.max(axis=axis, keepdims=True))
        return (z / z.sum(axis=axis, keepdims=True)).astype(x.dtype)
