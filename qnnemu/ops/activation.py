"""Activations (QnnOpDef.h): Relu, ReluMinMax, Relu1, Relu6, Prelu, Elu, Gelu, HardSwish,
Sigmoid, Tanh, Softmax, LogSoftmax, ElementWiseSoftplus, the QNN 2.50 additions Erf and
ThresholdedRelu, and ElementWiseNeuron (one of ELU,
GELU, HARD_SIGMOID, HARD_SWISH, RELU, RELU_MIN_MAX, SIGMOID, SOFTPLUS, TANH chosen by
``operation``, with the parameters alpha, beta, min_value, max_value, threshold).

Inputs are real: float32, float16 (computed in float32 or float64, returned as float16) or
quantized fixed point (computed on the dequantized values, see ops/base.py); the output takes
in[0]'s shape and data type.

Formulas:

- Relu max(x, 0); ReluMinMax clip(x, min_value, max_value); Relu1 clip(x, -1, 1);
  Relu6 clip(x, 0, 6);
- Prelu x if x >= 0 else coeff * x, coeff (in[1]) broadcast to in[0] (numpy rules: the ONNX
  Runtime QNN EP passes LeakyRelu's alpha as a [1] tensor);
- Elu x if x > 0 else alpha * (exp(x) - 1), alpha default 1.0;
- Gelu 0.5 * x * (1 + erf(x / sqrt(2))) (exact erf form, see ``erfc``); Erf erf(x);
- ThresholdedRelu x where x > alpha, else 0 (alpha default 1.0, as ONNX ThresholdedRelu);
- HardSwish x * relu6(x + 3) / 6;
- Softplus log(1 + exp(beta * x)) / beta, or x where beta * x > threshold (beta default 1.0,
  threshold default 20.0, as torch.nn.Softplus and the QNN EP's defaults);
- Softmax exp(beta * (x - max)) / sum(...) along ``axis`` (default rank - 1), beta default 1.0;
  LogSoftmax the log of that, computed as z - log(sum(exp(z))).

ElementWiseNeuron parameter defaults depend on ``operation``: ELU alpha 1.0; HARD_SIGMOID
max(0, min(1, alpha * x + beta)) with alpha 0.2, beta 0.5 (ONNX HardSigmoid); HARD_SWISH
x * hard_sigmoid(x) with alpha 1/6, beta 0.5, i.e. x * relu6(x + 3) / 6; SOFTPLUS beta 1.0,
threshold 20.0; RELU_MIN_MAX needs min_value and max_value.  Parameters an operation does not
use are accepted and ignored.
"""
from __future__ import annotations

import math

import numpy as np

from ..headers import Q
from . import _fast_eltwise
from .base import Op, ParamSpec, TensorSpec, from_compute, same_spec, to_compute
from .elementwise import broadcast_shape, check_operation, check_same_class, input_class, rule_error

# ---- erf / erfc (numpy has none) --------------------------------------------------------------
# erfcx(z) = exp(z^2) * erfc(z) is smooth and slowly varying on [0, inf).  It is tabulated with
# its derivative (erfcx' = 2 z erfcx - 2 / sqrt(pi)) from math.erfc on [0, _ERF_ZMAX] and
# interpolated by cubic Hermite polynomials, stored per interval as Horner coefficients: one
# row gather and three multiply-adds per element; relative error < 1e-11 (see the tests).
# erfc(z) = exp(-z^2) * erfcx(z) keeps its relative accuracy in the tail, which makes Gelu
# accurate for large negative x too.  Past _ERF_ZMAX an asymptotic series takes over.
_ERF_H = 1.0 / 1024
_ERF_ZMAX = 10.0
_SQRT_PI = math.sqrt(math.pi)


def _erfcx_coefficients() -> np.ndarray:
    z = np.arange(0.0, _ERF_ZMAX + 2 * _ERF_H, _ERF_H)
    f = np.array([math.exp(t * t) * math.erfc(t) for t in z])
    d = (2.0 * z * f - 2.0 / _SQRT_PI) * _ERF_H  # derivative per unit of u
    f0, f1, d0, d1 = f[:-1], f[1:], d[:-1], d[1:]
    # p(u) = f0 + d0 u + c2 u^2 + c3 u^3, u in [0, 1]: the cubic Hermite interpolant.
    c2 = 3.0 * (f1 - f0) - 2.0 * d0 - d1
    c3 = 2.0 * (f0 - f1) + d0 + d1
    return np.ascontiguousarray(np.stack([f0, d0, c2, c3], axis=1))


_ERF_COEF = _erfcx_coefficients()


def _erfcx_asymptotic(z: np.ndarray) -> np.ndarray:
    """erfcx(z) ~ 1/(z sqrt(pi)) (1 - 1/(2z^2) + 3/(4z^4) - ...), for z >= _ERF_ZMAX (relative
    error < 1e-10 there)."""
    w = 1.0 / (2.0 * z * z)
    s = 1.0 - w * (1.0 - 3.0 * w * (1.0 - 5.0 * w * (1.0 - 7.0 * w * (1.0 - 9.0 * w * (
        1.0 - 11.0 * w)))))
    return s / (z * _SQRT_PI)


def _erfc_abs(z: np.ndarray, tail: bool = True) -> np.ndarray:
    """erfc(z) for a 1-D float64 array z >= 0 (no nan).  ``tail=False`` returns 0 past
    _ERF_ZMAX (erfc < 3e-45, below float32's range) instead of the asymptotic series."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        u = z * (1.0 / _ERF_H)
        i = np.minimum(u, len(_ERF_COEF) - 1).astype(np.intp)
        u -= i  # position in the interval, [0, 1)
        c = np.take(_ERF_COEF, i, axis=0)
        p = c[:, 3] * u  # Horner, in place (these arrays are large)
        p += c[:, 2]
        p *= u
        p += c[:, 1]
        p *= u
        p += c[:, 0]
        y = z * z
        np.negative(y, out=y)
        np.exp(y, out=y)
        y *= p
        far = z > _ERF_ZMAX
        if far.any():
            y[far] = (np.exp(-z[far] * z[far]) * _erfcx_asymptotic(z[far])) if tail else 0.0
    return y


def erfc(x) -> np.ndarray:
    """Complementary error function, float64, vectorized; relative error < 1e-11 where the
    result is a normal float64."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x).reshape(-1)
    tail = _erfc_abs(np.nan_to_num(z, nan=0.0)).reshape(x.shape)
    # erfc(-z) = 2 - erfc(z); arithmetic rather than np.where (a random mask mispredicts).
    out = tail + (x < 0) * (2.0 - 2.0 * tail)
    return np.where(np.isnan(x), np.nan, out)


def erf(x) -> np.ndarray:
    """Error function, float64, vectorized; absolute error < 1e-13, relative < 1e-11."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x).reshape(-1)
    y = 1.0 - _erfc_abs(np.nan_to_num(z, nan=0.0, posinf=np.inf))
    small = z < 0.01  # Taylor series keeps the relative accuracy near 0 (error < 1e-16 here)
    zs = z[small]
    z2 = zs * zs
    y[small] = (2.0 / _SQRT_PI) * zs * (1.0 - z2 / 3.0 * (1.0 - 0.3 * z2 * (
        1.0 - z2 * 5.0 / 21.0)))
    y = np.copysign(y.reshape(x.shape), x)
    return np.where(np.isnan(x), np.nan, y)


# ---- formulas (x: float32 or float64 array; results in the same type) ------------------------
def _relu(x):
    return np.maximum(x, x.dtype.type(0))


def _clip(x, lo, hi):
    return np.clip(x, x.dtype.type(lo), x.dtype.type(hi))


def _sigmoid(x):
    y = _fast_eltwise.unary("sigmoid", x)  # the C engine's kernel (fast path): a float32
    if y is not None:                      # evaluation within 2 ulps of the exact value
        return y
    # the reference: the exact value, rounded once (from float64)
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _tanh(x):
    y = _fast_eltwise.unary("tanh", x)
    if y is not None:
        return y
    return np.tanh(x)


def _elu(x, alpha):
    y = _fast_eltwise.unary("elu", x, (float(np.float32(alpha)),))
    if y is not None:
        return y
    zero = x.dtype.type(0)
    # max(x, 0) + alpha * expm1(min(x, 0)): one of the terms is 0 (branch-free, fast).
    return np.maximum(x, zero) + x.dtype.type(alpha) * np.expm1(np.minimum(x, zero))


def _gelu(x):
    y = _fast_eltwise.unary("gelu", x)
    if y is not None:
        return y
    x64 = x.astype(np.float64).reshape(-1)
    z = np.abs(x64) * (1.0 / math.sqrt(2.0))
    nan = ~np.isfinite(z)
    if nan.any():
        z[nan] = 0.0
    tail = _erfc_abs(z, tail=False)  # erfc(|x| / sqrt 2)
    # 0.5 x erfc(-x / sqrt 2), with erfc(-t) = 2 - erfc(t) for t >= 0: the factor is
    # tail + [x >= 0] (2 - 2 tail), exactly tail for x < 0 (arithmetic, not np.where: a
    # random mask makes np.where slow).
    y = tail * -2.0
    y += 2.0
    y *= x64 >= 0
    y += tail
    y *= x64
    y *= 0.5
    if nan.any():
        y[nan & ~np.isnan(x64)] = 0.0  # gelu(-inf) = 0 (the limit; inf * 0 would give nan)
        y[np.isposinf(x64)] = np.inf
    return y.astype(x.dtype).reshape(x.shape)


def _hard_sigmoid(x, alpha, beta):
    x64 = x.astype(np.float64)
    return np.clip(alpha * x64 + beta, 0.0, 1.0).astype(x.dtype)


def _hard_swish(x, alpha=1.0 / 6.0, beta=0.5):
    x64 = x.astype(np.float64)
    return (x64 * np.clip(alpha * x64 + beta, 0.0, 1.0)).astype(x.dtype)


def _softplus(x, beta, threshold):
    y = _fast_eltwise.unary("softplus", x, (beta, threshold))
    if y is not None:
        return y
    x64 = x.astype(np.float64)
    z = beta * x64
    with np.errstate(over="ignore"):
        soft = np.log1p(np.exp(np.minimum(z, threshold))) / beta
    return np.where(z > threshold, x64, soft).astype(x.dtype)


# ---- ops --------------------------------------------------------------------------------------
class _Unary(Op, register=False):
    """One real input; the output has its shape and data type."""

    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        input_class(cls.op_type, 0, inputs[0])
        return [same_spec(inputs[0])]

    def _run(self, x, **params):
        return from_compute(self.fn(to_compute(x), **params), x.dtype)

    def fn(self, x, **params):
        raise NotImplementedError


class Relu(_Unary):
    def fn(self, x):
        return _relu(x)


class Relu1(_Unary):
    """clip(x, -1, 1)."""

    def fn(self, x):
        return _clip(x, -1.0, 1.0)


class Relu6(_Unary):
    """clip(x, 0, 6)."""

    def fn(self, x):
        return _clip(x, 0.0, 6.0)


def _check_min_max(op: str, lo: float, hi: float) -> None:
    if not lo <= hi:
        raise rule_error(op, "range", "params[min_value]",
                         f"min_value must be <= max_value: min_value {lo}, max_value {hi}")


class ReluMinMax(_Unary):
    params = {
        "min_value": ParamSpec("scalar", ("float",), required=True),
        "max_value": ParamSpec("scalar", ("float",), required=True),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        _check_min_max(cls.op_type, params["min_value"], params["max_value"])
        return super().infer(inputs, params)

    def fn(self, x, min_value, max_value):
        return _clip(x, min_value, max_value)


class Sigmoid(_Unary):
    def fn(self, x):
        return _sigmoid(x)


class Tanh(_Unary):
    def fn(self, x):
        return _tanh(x)


class Elu(_Unary):
    params = {"alpha": ParamSpec("scalar", ("float",), default=1.0)}

    def fn(self, x, alpha):
        return _elu(x, alpha)


class Gelu(_Unary):
    """0.5 x (1 + erf(x / sqrt 2)), the exact (erf) form, computed in float64."""

    def fn(self, x):
        return _gelu(x)


class Erf(_Unary):
    """erf(x) (QNN 2.50 op definitions, QNN_OP_ERF; ONNX Erf), computed in float64.

    The vendor's x86-64 libQnnHtp.so (QNN 2.51) lists no Erf and fails graphFinalize with it
    ("could not create op"), and ONNX Runtime's QNN EP does not map ONNX Erf ("not supported by
    QNN EP"); qnnemu runs the op definition (tests/test_ops_erf_identity_inverse.py).
    """

    def fn(self, x):
        y = _fast_eltwise.unary("erf", x)
        return y if y is not None else erf(x).astype(x.dtype)


class ThresholdedRelu(_Unary):
    """x where x > alpha, else 0 (QNN 2.50 op definitions, QNN_OP_THRESHOLDED_RELU; ONNX
    ThresholdedRelu, alpha default 1.0).  x == alpha gives 0; NaN gives 0 (NaN > alpha is false).

    The vendor's x86-64 libQnnHtp.so (QNN 2.51) has no ThresholdedRelu (graphFinalize fails);
    ONNX Runtime's QNN EP lowers ONNX ThresholdedRelu to ElementWiseGreater + ElementWiseSelect
    instead, which qnnemu runs too.
    """

    params = {"alpha": ParamSpec("scalar", ("float",), default=1.0)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        if math.isnan(params["alpha"]):
            raise rule_error(cls.op_type, "alpha", "params[alpha]",
                             "alpha must be a number (NaN compares false with every x)")
        return super().infer(inputs, params)

    def fn(self, x, alpha):
        return np.where(x > x.dtype.type(alpha), x, x.dtype.type(0))


class HardSwish(_Unary):
    """x * relu6(x + 3) / 6."""

    def fn(self, x):
        return _hard_swish(x)


def _check_softplus(op: str, beta: float, threshold: float) -> None:
    if not (math.isfinite(beta) and beta != 0.0):
        raise rule_error(op, "beta", "params[beta]",
                         f"beta must be a finite non-zero number (it divides the result), "
                         f"got {beta}")


class ElementWiseSoftplus(_Unary):
    """log(1 + exp(beta x)) / beta; x itself where beta x > threshold."""

    params = {
        "beta": ParamSpec("scalar", ("float",), default=1.0),
        "threshold": ParamSpec("scalar", ("float",), default=20.0),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        _check_softplus(cls.op_type, params["beta"], params["threshold"])
        return super().infer(inputs, params)

    def fn(self, x, beta, threshold):
        return _softplus(x, beta, threshold)


class Prelu(Op):
    """x if x >= 0 else coeff * x; coeff (in[1]) broadcasts to in[0]'s shape."""

    inputs = ("in[0]", "in[1]")

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        classes = [input_class(op, i, s) for i, s in enumerate(inputs)]
        check_same_class(op, classes, [0, 1], inputs)
        shape = broadcast_shape(op, inputs, [0, 1])
        if shape != tuple(inputs[0].shape):
            raise rule_error(op, "coeff-shape", "inputTensors[1].dimensions",
                             f"coeff dimensions {list(inputs[1].shape)} must broadcast to "
                             f"in[0]'s {list(inputs[0].shape)} without enlarging it (result "
                             f"would be {list(shape)})")
        return [same_spec(inputs[0])]

    def _run(self, x, coeff):
        dtype = x.dtype
        xc, cc = to_compute(x), to_compute(coeff)
        zero = xc.dtype.type(0)
        # max(x, 0) + coeff * min(x, 0): branch-free (np.where on a random mask is slow).
        y = np.maximum(xc, zero) + cc.astype(xc.dtype, copy=False) * np.minimum(xc, zero)
        return from_compute(y, dtype)


class _SoftmaxBase(_Unary, register=False):
    params = {
        "axis": ParamSpec("scalar", ("uint",), default=None),
        "beta": ParamSpec("scalar", ("float",), default=1.0),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = inputs[0]
        axis = params["axis"]
        if x.rank < 1:
            raise rule_error(op, "input-rank", "inputTensors[0].rank",
                             f"{op} needs rank >= 1, got {x.rank}")
        if axis is not None and not 0 <= axis < x.rank:
            raise rule_error(op, "axis", "params[axis]",
                             f"axis must be in [0, {x.rank - 1}] for rank {x.rank}, got {axis}")
        return super().infer(inputs, params)

    @staticmethod
    def shifted(x, axis, beta):
        axis = x.ndim - 1 if axis is None else axis
        # float64 intermediate: the exponent's rounding error is amplified by exp.
        z = beta * x.astype(np.float64)
        # Subtracting the max of beta * x (any sign of beta) keeps exponents <= 0: no overflow.
        return z - z.max(axis=axis, keepdims=True), axis


class Softmax(_SoftmaxBase):
    """out = exp(beta * (x - max)) / sum(exp(beta * (x - max))) along ``axis``.

    ``axis`` defaults to the last axis (rank - 1), so its default depends on the input and is
    resolved here rather than in the ParamSpec.
    """

    def fn(self, x, axis=None, beta=1.0):
        y = _fast_eltwise.softmax(x, x.ndim - 1 if axis is None else axis, beta, log_form=False)
        if y is not None:
            return y
        z, axis = self.shifted(x, axis, beta)
        z = np.exp(z)
        return (z / z.sum(axis=axis, keepdims=True)).astype(x.dtype)


class LogSoftmax(_SoftmaxBase):
    """out = beta * x - max - log(sum(exp(beta * x - max))) along ``axis`` (default rank - 1)."""

    def fn(self, x, axis=None, beta=1.0):
        y = _fast_eltwise.softmax(x, x.ndim - 1 if axis is None else axis, beta, log_form=True)
        if y is not None:
            return y
        z, axis = self.shifted(x, axis, beta)
        return (z - np.log(np.exp(z).sum(axis=axis, keepdims=True))).astype(x.dtype)


# ---- ElementWiseNeuron ------------------------------------------------------------------------
_N = {
    "ELU": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_ELU,
    "GELU": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_GELU,
    "HARD_SIGMOID": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_HARD_SIGMOID,
    "HARD_SWISH": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_HARD_SWISH,
    "RELU": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_RELU,
    "RELU_MIN_MAX": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_RELU_MIN_MAX,
    "SIGMOID": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_SIGMOID,
    "SOFTPLUS": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_SOFTPLUS,
    "TANH": Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_TANH,
}
_NEURON_NAMES = {v: k for k, v in _N.items()}


def _neuron_fn(p: dict):
    """(function of x) for ElementWiseNeuron's parsed params, defaults resolved."""
    op = p["operation"]

    def get(name, default):
        return default if p.get(name) is None else p[name]

    if op == _N["ELU"]:
        alpha = get("alpha", 1.0)
        return lambda x: _elu(x, alpha)
    if op == _N["GELU"]:
        return _gelu
    if op == _N["HARD_SIGMOID"]:
        alpha, beta = get("alpha", 0.2), get("beta", 0.5)
        return lambda x: _hard_sigmoid(x, alpha, beta)
    if op == _N["HARD_SWISH"]:
        alpha, beta = get("alpha", 1.0 / 6.0), get("beta", 0.5)
        return lambda x: _hard_swish(x, alpha, beta)
    if op == _N["RELU"]:
        return _relu
    if op == _N["RELU_MIN_MAX"]:
        lo, hi = p["min_value"], p["max_value"]
        return lambda x: _clip(x, lo, hi)
    if op == _N["SIGMOID"]:
        return _sigmoid
    if op == _N["SOFTPLUS"]:
        beta, threshold = get("beta", 1.0), get("threshold", 20.0)
        return lambda x: _softplus(x, beta, threshold)
    return _tanh


class ElementWiseNeuron(_Unary):
    """The activation chosen by ``operation`` (QNN_OP_ELEMENT_WISE_NEURON_OPERATION_*); see the
    module docstring for each operation's parameters and defaults."""

    params = {
        "operation": ParamSpec("scalar", ("uint",), required=True),
        "alpha": ParamSpec("scalar", ("float",), default=None),
        "beta": ParamSpec("scalar", ("float",), default=None),
        "min_value": ParamSpec("scalar", ("float",), default=None),
        "max_value": ParamSpec("scalar", ("float",), default=None),
        "threshold": ParamSpec("scalar", ("float",), default=None),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        check_operation(op, _NEURON_NAMES, params["operation"],
                        "QNN_OP_ELEMENT_WISE_NEURON_OPERATION_")
        if params["operation"] == _N["RELU_MIN_MAX"]:
            for name in ("min_value", "max_value"):
                if params[name] is None:
                    raise rule_error(op, "param-missing", f"params[{name}]",
                                     f"operation RELU_MIN_MAX needs min_value and max_value; "
                                     f"{name} is missing")
            _check_min_max(op, params["min_value"], params["max_value"])
        if params["operation"] == _N["SOFTPLUS"]:
            beta = 1.0 if params["beta"] is None else params["beta"]
            _check_softplus(op, beta, params["threshold"])
        return super().infer(inputs, params)

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._fn = _neuron_fn(params)

    def fn(self, x, **params):
        return self._fn(x)


__all__ = ["Relu", "Relu1", "Relu6", "ReluMinMax", "Prelu", "Elu", "Gelu", "HardSwish",
           "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "ElementWiseSoftplus",
           "ElementWiseNeuron", "Erf", "ThresholdedRelu", "erf", "erfc"]
