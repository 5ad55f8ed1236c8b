"""Element-wise ops (QnnOpDef.h QNN_OP_ELEMENT_WISE_*).

Binary, numpy broadcasting (output: the broadcast shape):

- arithmetic, output in[0]'s data type: ElementWiseAdd, Subtract, Multiply, Divide, Maximum,
  Minimum, Power, SquaredDifference, FloorDiv, Fmod, Mod;
- comparisons, output BOOL_8: ElementWiseEqual, NotEqual, Greater, GreaterEqual, Less,
  LessEqual;
- logic on BOOL_8, output BOOL_8: ElementWiseAnd, Or, Xor (and on 8-bit codes: see
  ``byte_logic``);
- ElementWiseBinary: any of the above chosen by its ``operation`` parameter
  (QNN_OP_ELEMENT_WISE_BINARY_OPERATION_*); the ONNX Runtime QNN EP emits it for Add, Sub,
  Mul, Div, Max, Min, Pow, comparisons and logic ops.

Unary, output in[0]'s data type: ElementWiseAbs, Asin, Atan, Ceil, Cos, Exp, Floor, Log, Neg,
Not (BOOL_8), Round, Rsqrt, Sign, Sin, SquareRoot, and ElementWiseUnary with ``operation``
(QNN_OP_ELEMENT_WISE_UNARY_OPERATION_*, which adds RECIPROCAL).

ElementWiseSelect: out = in[1] where in[0] (BOOL_8) else in[2], the three broadcast together.

ElementWiseMux (QNN 2.50): out = in[1 + in[0]], element by element -- in[0] an integer selector,
in[1..m] the m candidates, all broadcast together; see ``ElementWiseMux``.

IsNan: out = 1 where in[0] is NaN, else 0; see ``IsNan``.

Data types (see ops/base.py): real values are float32, float16 or quantized fixed point
(computed on the dequantized values); the inputs of one node share one of float32 / float16 /
fixed point.  INT_32 / UINT_32 are accepted by the integer-capable ops (add, subtract,
multiply, divide, maximum, minimum, floor-div, fmod, mod, squared difference, comparisons;
abs, neg, sign) and computed in integer arithmetic (wrapping on overflow, like the C types).

Semantics where the QNN op definitions and ONNX/numpy could differ:

- float division by zero follows IEEE (inf / nan); integer division, floor-division, fmod
  and mod by zero give 0 here (undefined in QNN);
- integer ElementWiseDivide truncates toward zero (C / ONNX Div); ElementWiseFloorDiv
  rounds toward -inf: floor(in0 / in1) of the float quotient for reals, exact for integers;
- ElementWiseFmod takes the sign of the dividend (C fmod, ONNX Mod fmod=1),
  ElementWiseMod the sign of the divisor (Python %, ONNX Mod fmod=0);
- ElementWiseRound rounds halves to even (ONNX Round, which the QNN EP maps to it) --
  to be confirmed against the vendor backend;
- ElementWiseSign gives -1 / 0 / +1 (nan stays nan).
"""
from __future__ import annotations

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from ..spec import dtypes
from . import _fast_eltwise
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_real, from_compute, same_spec, to_compute

_F32, _F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
_I32, _U32 = Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32
_BOOL = Q.QNN_DATATYPE_BOOL_8
_FIXED_4 = (Q.QNN_DATATYPE_SFIXED_POINT_4, Q.QNN_DATATYPE_UFIXED_POINT_4)


# ---- shared checks (also used by activation.py and cast.py) -----------------------------------
def rule_error(op: str, rule: str, path: str, message: str, unsupported: bool = False):
    """OpCheckError (or OpUnsupportedError) with rule id ``QNNEMU-<op>-<rule>``."""
    cls = OpUnsupportedError if unsupported else OpCheckError
    return cls(f"QNNEMU-{op}-{rule}", path, message)


def input_class(op: str, idx: int, spec: TensorSpec, *, reals: bool = True, ints: bool = False,
                bools: bool = False) -> str:
    """Checks one data input and returns its class: "float32", "float16", "fixed", "int32",
    "uint32" or "bool".  Inputs of one node must share a class (``check_same_class``).

    Raises ``QNNEMU-<op>-dtype`` (unsupported) for any other type.  A fixed-point spec without
    quantization is reported as an unsupported type too: tests/test_ops.py uses an unquantized
    UFIXED_POINT_8 as its "not a supported type" example (the graph layer never lets such a
    tensor through: QNNEMU-tensor-quant-required).  TODO(lead): use check_real's quant-missing
    rule once those rows change.
    """
    d = spec.dtype
    if ints and d in (_I32, _U32):
        return "int32" if d == _I32 else "uint32"
    if bools and d == _BOOL:
        return "bool"
    if reals and (d in (_F32, _F16) or (d in dtypes.FIXED_POINT_TYPES and d not in _FIXED_4
                                         and spec.quant is not None)):
        check_real(op, idx, spec)
        return {_F32: "float32", _F16: "float16"}.get(d, "fixed")
    allowed = []
    if reals:
        allowed.append("FLOAT_32/FLOAT_16, quantized 8/16/32-bit fixed point")
    if ints:
        allowed.append("INT_32/UINT_32")
    if bools:
        allowed.append("BOOL_8")
    extra = " without quantization parameters" if d in dtypes.FIXED_POINT_TYPES and \
        spec.quant is None else ""
    raise rule_error(op, "dtype", f"inputTensors[{idx}].dataType",
                     f"{op} input {idx} must be {' or '.join(allowed)}; got "
                     f"{dtypes.name(d)}{extra}", unsupported=True)


def check_same_class(op: str, classes: list[str], indices: list[int], specs) -> None:
    """All data inputs of a node must share one class (float32 / float16 / fixed point /
    INT_32 / UINT_32 / BOOL_8); fixed-point inputs may differ in width and encoding."""
    for cls_, i in zip(classes[1:], indices[1:]):
        if cls_ != classes[0]:
            raise rule_error(op, "dtype-mismatch", f"inputTensors[{i}].dataType",
                             f"{op} inputs must share one data type class: input "
                             f"{indices[0]} is {dtypes.name(specs[indices[0]].dtype)}, input {i} "
                             f"is {dtypes.name(specs[i].dtype)}")


def broadcast_shape(op: str, specs: list[TensorSpec], indices: list[int]) -> tuple[int, ...]:
    """numpy broadcast of the inputs' shapes; QNNEMU-<op>-broadcast names the first input that
    does not broadcast with the ones before it."""
    shape = tuple(specs[indices[0]].shape)
    for i in indices[1:]:
        try:
            shape = np.broadcast_shapes(shape, tuple(specs[i].shape))
        except ValueError:
            raise rule_error(op, "broadcast", f"inputTensors[{i}].dimensions",
                             f"dimensions {list(specs[i].shape)} do not broadcast with "
                             f"{list(shape)} (trailing dimensions must be equal or 1)") from None
    return tuple(int(s) for s in shape)


def mode_of(spec: TensorSpec | None, array: np.ndarray) -> str:
    """How ``_run`` computes: "bool", "int" or "real" (fixed point arrives as float32)."""
    if spec is not None:
        if spec.dtype == _BOOL:
            return "bool"
        if spec.dtype in dtypes.INT_TYPES:
            return "int"
        return "real"
    if array.dtype.kind == "f":
        return "real"
    return "bool" if array.dtype == np.bool_ else "int"


def _as_bool(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.bool_ else a != 0


def _bool8(y) -> np.ndarray:
    """BOOL_8 storage: uint8 0 / 1 (a view of the bool array, no copy)."""
    return np.asarray(y, dtype=np.bool_).view(np.uint8)


# ---- integer division helpers -----------------------------------------------------------------
def _int_safe_divisor(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    zero = b == 0
    return np.where(zero, np.ones_like(b), b), zero


def _int_trunc_div(a, b):
    b1, zero = _int_safe_divisor(b)
    q = np.floor_divide(a, b1)
    if a.dtype.kind == "i":  # floor -> truncation: one up where inexact and signs differ
        r = a - q * b1
        q = q + ((r != 0) & ((a < 0) != (b1 < 0))).astype(q.dtype)
    return np.where(zero, np.zeros_like(q), q)


def _int_floor_div(a, b):
    b1, zero = _int_safe_divisor(b)
    q = np.floor_divide(a, b1)
    return np.where(zero, np.zeros_like(q), q)


def _int_fmod(a, b):
    b1, zero = _int_safe_divisor(b)
    r = np.fmod(a, b1)
    return np.where(zero, np.zeros_like(r), r)


def _int_mod(a, b):
    b1, zero = _int_safe_divisor(b)
    r = np.remainder(a, b1)
    return np.where(zero, np.zeros_like(r), r)


def _sq_diff_real(a, b):
    d = a.astype(np.float64) - b.astype(np.float64)
    return (d * d).astype(a.dtype)


def _floor_div_real(a, b):
    return np.floor(np.divide(a, b))


# ---- logic ops on 8-bit codes -----------------------------------------------------------------
# The HTP's logic ops (And, Or, Xor, Not; ElementWiseBinary AND/OR/XOR, ElementWiseUnary NOT)
# also take 8-bit fixed point (validation) and plain INT_8 / UINT_8 (the graph path), and
# compute them on codes -- measured on libQnnHtp.so 2.51, v73 (tests/test_ops_elementwise.py
# test_logic_on_bytes_as_the_vendor):
# - an input element is true when its real value is not 0 (its code is not the zero point);
# - And/Or/Xor write the truth as the code 1 / 0 whatever the output's encoding; a signed
#   output (SFIXED_POINT_8, INT_8) gets those codes shifted by -128 (-127 true, -128 false);
# - Not writes 1 (signed: -127) for true and the output's zero point (real 0) for false.
_BYTE_TYPES = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8,
               Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_INT_8)
_SIGNED_BYTES = (Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_INT_8)


def _is_byte(spec: TensorSpec | None) -> bool:
    return spec is not None and spec.dtype in _BYTE_TYPES and \
        (spec.dtype not in dtypes.FIXED_POINT_TYPES or spec.quant is not None)


def byte_logic_output(op: str, inputs: list[TensorSpec], declared_outputs,
                      shape: tuple[int, ...]) -> list[TensorSpec] | None:
    """The output of a logic op whose data inputs are all 8-bit codes (None: they are not):
    the declared output when it is an 8-bit type or BOOL_8 (without one: in[0]'s type)."""
    if not inputs or not all(_is_byte(s) for s in inputs):
        return None
    out = declared_outputs[0] if declared_outputs else None
    if out is None:
        return [same_spec(inputs[0], shape=shape)]
    if out.dtype not in _BYTE_TYPES + (_BOOL,):
        raise rule_error(op, "dtype", "outputTensors[0].dataType",
                         f"{op} of 8-bit inputs writes 8-bit codes: the output must be UFIXED_POINT_8, "
                         f"SFIXED_POINT_8, UINT_8, INT_8 or BOOL_8; got {dtypes.name(out.dtype)}",
                         unsupported=True)
    return [TensorSpec(shape, out.dtype, out.quant if out.dtype in dtypes.FIXED_POINT_TYPES else None)]


def _zero_point_and_scale(spec: TensorSpec, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(zero-point code, scale) of a fixed-point spec, broadcastable to its array (per axis too)."""
    q = spec.quant
    scale, offset = np.asarray(q.scale, np.float64), np.asarray(q.offset, np.float64)
    if q.axis is not None and scale.ndim == 1 and rank > 0:
        shape = [1] * rank
        shape[q.axis] = -1
        scale, offset = scale.reshape(shape), offset.reshape(shape)
    return -offset, scale


def byte_logic(truth: np.ndarray, out: TensorSpec, negate: bool) -> np.ndarray:
    """The output array of a logic op on 8-bit codes (see above) given its truth values: the
    codes as reals for a fixed-point output (the plan quantizes them back to the same codes),
    the codes for a plain one."""
    truth = np.asarray(truth, dtype=np.bool_)
    if out.dtype == _BOOL:
        return _bool8(truth)
    codes = truth.astype(np.float64) - (128.0 if out.dtype in _SIGNED_BYTES else 0.0)
    fixed = out.dtype in dtypes.FIXED_POINT_TYPES
    zero, scale = _zero_point_and_scale(out, truth.ndim) if fixed else (0.0, 1.0)
    if negate:
        codes = np.where(truth, codes, zero)
    if fixed:
        return (scale * (codes - zero)).astype(np.float32)
    return codes.astype(dtypes.numpy_dtype(out.dtype))


def is_byte_node(specs) -> bool:
    return bool(specs) and all(_is_byte(s) for s in specs)


# ---- binary ops -------------------------------------------------------------------------------
class _Binary(Op, register=False):
    """Binary element-wise op.  Subclasses set the data classes they take and the functions:
    ``real`` (float arrays), ``integer`` (INT_32/UINT_32 arrays), ``logic`` (bool arrays)."""

    inputs = ("in[0]", "in[1]")
    reals = True
    ints = False
    bools = False
    to_bool = False  # comparisons and logic ops output BOOL_8
    real = None
    integer = None
    logic = None
    c_op: str | None = None  # the C kernel of the fast path (_fast_eltwise.BINARY)

    @classmethod
    def infer_as(cls, op: str, inputs: list[TensorSpec], declared_outputs=None) -> list[TensorSpec]:
        """The checks of this op's semantics, reported under op type ``op``."""
        if cls.logic is not None and not cls.reals and is_byte_node(inputs[:2]):
            return byte_logic_output(op, inputs[:2], declared_outputs, broadcast_shape(op, inputs, [0, 1]))
        classes = [input_class(op, i, s, reals=cls.reals, ints=cls.ints, bools=cls.bools)
                   for i, s in enumerate(inputs)]
        check_same_class(op, classes, [0, 1], inputs)
        shape = broadcast_shape(op, inputs, [0, 1])
        if cls.to_bool:
            return [TensorSpec(shape, _BOOL)]
        return [same_spec(inputs[0], shape=shape)]

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        return cls.infer_as(cls.op_type, inputs, declared_outputs)

    @classmethod
    def compute(cls, mode: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if mode == "bool":
                return _bool8(cls.logic(_as_bool(a), _as_bool(b)))
            if mode == "int":
                fn = cls.integer if cls.integer is not None else cls.real
                y = fn(a, b)
                return _bool8(y) if cls.to_bool else np.asarray(y).astype(a.dtype, copy=False)
            dtype = a.dtype
            y = _fast_eltwise.binary(cls.c_op, to_compute(a), to_compute(b)) if cls.c_op is not None else None
            if y is None:
                y = cls.real(to_compute(a), to_compute(b))
            return _bool8(y) if cls.to_bool else from_compute(np.asarray(y), dtype)

    def _run(self, a, b, **params):
        return type(self).run_as(self.input_specs, self.output_specs, a, b)

    @classmethod
    def run_as(cls, input_specs, output_specs, a, b):
        if cls.logic is not None and not cls.reals and is_byte_node(input_specs[:2]) and output_specs:
            return byte_logic(cls.logic(np.asarray(a) != 0, np.asarray(b) != 0), output_specs[0], negate=False)
        mode = mode_of(input_specs[0] if input_specs else None, a)
        return cls.compute(mode, a, b)


class ElementWiseAdd(_Binary):
    ints = True
    real = staticmethod(np.add)


class ElementWiseSubtract(_Binary):
    ints = True
    real = staticmethod(np.subtract)


class ElementWiseMultiply(_Binary):
    ints = True
    real = staticmethod(np.multiply)


class ElementWiseDivide(_Binary):
    """Float: IEEE division.  INT_32/UINT_32: truncation toward zero; x / 0 gives 0."""

    ints = True
    real = staticmethod(np.divide)
    integer = staticmethod(_int_trunc_div)


class ElementWiseMaximum(_Binary):
    ints = True
    real = staticmethod(np.maximum)


class ElementWiseMinimum(_Binary):
    ints = True
    real = staticmethod(np.minimum)


class ElementWisePower(_Binary):
    """in0 ** in1 (real only); a negative base with a non-integer exponent gives nan."""

    real = staticmethod(np.power)
    c_op = "pow"  # numpy's SIMD power has no C twin: both paths use the engine's kernel


class ElementWiseSquaredDifference(_Binary):
    """(in0 - in1)^2, computed in float64 for reals (one rounding)."""

    ints = True
    real = staticmethod(_sq_diff_real)
    integer = staticmethod(lambda a, b: (a - b) * (a - b))


class ElementWiseFloorDiv(_Binary):
    """floor(in0 / in1): the float quotient rounded toward -inf; exact for INT_32/UINT_32."""

    ints = True
    real = staticmethod(_floor_div_real)
    integer = staticmethod(_int_floor_div)


class ElementWiseFmod(_Binary):
    """Remainder with the sign of the dividend in[0] (C fmod)."""

    ints = True
    real = staticmethod(np.fmod)
    integer = staticmethod(_int_fmod)


class ElementWiseMod(_Binary):
    """Remainder with the sign of the divisor in[1] (Python %)."""

    ints = True
    real = staticmethod(np.remainder)
    integer = staticmethod(_int_mod)


class _Compare(_Binary, register=False):
    ints = True
    to_bool = True


class ElementWiseEqual(_Compare):
    bools = True
    real = staticmethod(np.equal)
    logic = staticmethod(np.equal)


class ElementWiseNotEqual(_Compare):
    bools = True
    real = staticmethod(np.not_equal)
    logic = staticmethod(np.not_equal)


class ElementWiseGreater(_Compare):
    real = staticmethod(np.greater)


class ElementWiseGreaterEqual(_Compare):
    real = staticmethod(np.greater_equal)


class ElementWiseLess(_Compare):
    real = staticmethod(np.less)


class ElementWiseLessEqual(_Compare):
    real = staticmethod(np.less_equal)


class _Logic(_Binary, register=False):
    reals = False
    bools = True
    to_bool = True


class ElementWiseAnd(_Logic):
    logic = staticmethod(np.logical_and)


class ElementWiseOr(_Logic):
    logic = staticmethod(np.logical_or)


class ElementWiseXor(_Logic):
    logic = staticmethod(np.logical_xor)


_BINARY_OPERATIONS: dict[int, type[_Binary]] = {
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_ADD: ElementWiseAdd,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_AND: ElementWiseAnd,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_DIVIDE: ElementWiseDivide,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_EQUAL: ElementWiseEqual,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_FLOOR_DIV: ElementWiseFloorDiv,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_FMOD: ElementWiseFmod,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_GREATER: ElementWiseGreater,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_GREATER_EQUAL: ElementWiseGreaterEqual,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_LESS: ElementWiseLess,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_LESS_EQUAL: ElementWiseLessEqual,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_MAXIMUM: ElementWiseMaximum,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_MINIMUM: ElementWiseMinimum,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_MOD: ElementWiseMod,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_MULTIPLY: ElementWiseMultiply,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_NOT_EQUAL: ElementWiseNotEqual,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_OR: ElementWiseOr,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_POWER: ElementWisePower,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_SQUARED_DIFFERENCE: ElementWiseSquaredDifference,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_SUBTRACT: ElementWiseSubtract,
    Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_XOR: ElementWiseXor,
}


def check_operation(op: str, table: dict, value: int, prefix: str) -> None:
    if value not in table:
        raise rule_error(op, "operation", "params[operation]",
                         f"operation must be one of {sorted(table)} ({prefix}*), got {value}")


class ElementWiseBinary(Op):
    """The binary op selected by ``operation``; same rules and results as the dedicated op."""

    inputs = ("in[0]", "in[1]")
    params = {"operation": ParamSpec("scalar", ("uint",), required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        check_operation(cls.op_type, _BINARY_OPERATIONS, params["operation"],
                        "QNN_OP_ELEMENT_WISE_BINARY_OPERATION_")
        return _BINARY_OPERATIONS[params["operation"]].infer_as(cls.op_type, inputs, declared_outputs)

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._impl = _BINARY_OPERATIONS[params["operation"]]

    def _run(self, a, b, operation):
        return self._impl.run_as(self.input_specs, self.output_specs, a, b)


# ---- unary ops --------------------------------------------------------------------------------
def _rsqrt(x):
    return np.divide(1.0, np.sqrt(x), dtype=x.dtype)


def _reciprocal(x):
    return np.divide(1.0, x, dtype=x.dtype)


def _sign(x):
    return np.sign(x)


class _UnaryEW(Op, register=False):
    inputs = ("in[0]",)
    reals = True
    ints = False
    bools = False
    real = None
    integer = None
    logic = None
    c_op: str | None = None  # the C kernel of the fast path (_fast_eltwise.UNARY)

    @classmethod
    def infer_as(cls, op: str, inputs: list[TensorSpec], declared_outputs=None) -> list[TensorSpec]:
        if cls.logic is not None and not cls.reals and is_byte_node(inputs[:1]):
            return byte_logic_output(op, inputs[:1], declared_outputs, tuple(inputs[0].shape))
        input_class(op, 0, inputs[0], reals=cls.reals, ints=cls.ints, bools=cls.bools)
        return [same_spec(inputs[0])]

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        return cls.infer_as(cls.op_type, inputs, declared_outputs)

    @classmethod
    def run_as(cls, input_specs, output_specs, x):
        if cls.logic is not None and not cls.reals and is_byte_node(input_specs[:1]) and output_specs:
            return byte_logic(cls.logic(np.asarray(x) != 0), output_specs[0], negate=True)
        return cls.compute(mode_of(input_specs[0] if input_specs else None, x), x)

    @classmethod
    def compute(cls, mode: str, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if mode == "bool":
                return _bool8(cls.logic(_as_bool(x)))
            if mode == "int":
                fn = cls.integer if cls.integer is not None else cls.real
                return np.asarray(fn(x)).astype(x.dtype, copy=False)
            xc = to_compute(x)
            y = _fast_eltwise.unary(cls.c_op, xc) if cls.c_op is not None else None
            if y is None:
                y = np.asarray(cls.real(xc))
            return from_compute(y, x.dtype)

    def _run(self, x, **params):
        return type(self).run_as(self.input_specs, self.output_specs, x)


class ElementWiseAbs(_UnaryEW):
    ints = True
    real = staticmethod(np.abs)


class ElementWiseAsin(_UnaryEW):
    real = staticmethod(np.arcsin)
    c_op = "asin"


class ElementWiseAtan(_UnaryEW):
    real = staticmethod(np.arctan)
    c_op = "atan"


class ElementWiseCeil(_UnaryEW):
    real = staticmethod(np.ceil)


class ElementWiseCos(_UnaryEW):
    real = staticmethod(np.cos)
    c_op = "cos"


class ElementWiseExp(_UnaryEW):
    real = staticmethod(np.exp)
    c_op = "exp"  # numpy's SIMD exp has no C twin: both paths use the engine's kernel


class ElementWiseFloor(_UnaryEW):
    real = staticmethod(np.floor)


class ElementWiseLog(_UnaryEW):
    real = staticmethod(np.log)
    c_op = "log"


class ElementWiseNeg(_UnaryEW):
    ints = True
    real = staticmethod(np.negative)


class ElementWiseNot(_UnaryEW):
    reals = False
    bools = True
    logic = staticmethod(np.logical_not)


class ElementWiseRound(_UnaryEW):
    """Nearest integer, halves to even (np.rint) -- to be confirmed against the vendor
    backend (ONNX Round, which the QNN EP lowers to this op, rounds halves to even)."""

    real = staticmethod(np.rint)


class ElementWiseRsqrt(_UnaryEW):
    real = staticmethod(_rsqrt)


class ElementWiseSign(_UnaryEW):
    ints = True
    real = staticmethod(_sign)


class ElementWiseSin(_UnaryEW):
    real = staticmethod(np.sin)
    c_op = "sin"


class ElementWiseSquareRoot(_UnaryEW):
    real = staticmethod(np.sqrt)


class _Reciprocal(_UnaryEW, register=False):
    real = staticmethod(_reciprocal)


_UNARY_OPERATIONS: dict[int, type[_UnaryEW]] = {
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_ABS: ElementWiseAbs,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_ASIN: ElementWiseAsin,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_ATAN: ElementWiseAtan,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_CEIL: ElementWiseCeil,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_COS: ElementWiseCos,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_EXP: ElementWiseExp,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_FLOOR: ElementWiseFloor,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_LOG: ElementWiseLog,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_NEG: ElementWiseNeg,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_NOT: ElementWiseNot,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_RECIPROCAL: _Reciprocal,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_ROUND: ElementWiseRound,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_RSQRT: ElementWiseRsqrt,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_SIGN: ElementWiseSign,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_SIN: ElementWiseSin,
    Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_SQRT: ElementWiseSquareRoot,
}


class ElementWiseUnary(Op):
    """The unary op selected by ``operation`` (QNN_OP_ELEMENT_WISE_UNARY_OPERATION_*)."""

    inputs = ("in[0]",)
    params = {"operation": ParamSpec("scalar", ("uint",), required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        check_operation(cls.op_type, _UNARY_OPERATIONS, params["operation"],
                        "QNN_OP_ELEMENT_WISE_UNARY_OPERATION_")
        return _UNARY_OPERATIONS[params["operation"]].infer_as(cls.op_type, inputs, declared_outputs)

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._impl = _UNARY_OPERATIONS[params["operation"]]

    def _run(self, x, operation):
        return self._impl.run_as(self.input_specs, self.output_specs, x)


# ---- select -----------------------------------------------------------------------------------
class ElementWiseSelect(Op):
    """out = in[1] where in[0] else in[2]; in[0] is BOOL_8; the three broadcast together and
    the output takes in[1]'s data type.  Values are copied, never computed, so fixed-point
    operands sharing the output's encoding pass through raw (quant_passthrough)."""

    inputs = ("in[0]", "in[1]", "in[2]")
    native_int_inputs = (0,)            # the condition
    quant_passthrough = True

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        if inputs[0].dtype != _BOOL:
            raise rule_error(op, "condition-dtype", "inputTensors[0].dataType",
                             f"the condition in[0] must be QNN_DATATYPE_BOOL_8, got "
                             f"{dtypes.name(inputs[0].dtype)}")
        classes = [input_class(op, i, inputs[i], ints=True, bools=True) for i in (1, 2)]
        check_same_class(op, classes, [1, 2], inputs)
        shape = broadcast_shape(op, inputs, [0, 1, 2])
        return [same_spec(inputs[1], shape=shape)]

    def _run(self, cond, a, b):
        y = np.where(_as_bool(cond), a, b)
        return y.astype(a.dtype, copy=False)


# ---- mux --------------------------------------------------------------------------------------
class ElementWiseMux(Op):
    """out[0] = in[1 + k] where k = in[0], element by element (QnnOpDef.h QNN_OP_ELEMENT_WISE_MUX,
    new in the QNN 2.50 op definitions; no parameter).

    in[0] is the selector: an INT_*/UINT_* tensor (or BOOL_8, read as 0/1); in[1..m] are the m
    candidates, of one data type class (float32 / float16 / fixed point / INT_32 / UINT_32 /
    BOOL_8); all m + 1 inputs broadcast together (numpy rules) and the output takes in[1]'s data
    type.  A selector value k picks candidate k for 0 <= k < m and candidate m + k for -m <= k < 0
    (negative values count from the back, as the Gather and OneHot of QAIRT's ONNX function for
    this op); any other value gives 0 -- on fixed-point outputs the code of real 0 (the zero
    point), as that function's one-hot mask does.  ONNX Runtime's QNN EP does not emit this op;
    QAIRT uses it to switch between experts' weights (mixture of experts).

    Values are copied, never computed, so fixed-point candidates sharing the output's encoding
    pass through raw (quant_passthrough).

    The vendor's x86-64 libQnnHtp.so (QNN 2.51) does not compute this op: with more than one
    candidate it crashes the process when the candidates are graph inputs and writes values
    unrelated to them (zeros, or what the output buffer held) when they are static; a single
    candidate passes through (pinned in tests/test_ops_vendor_new.py;
    tests/test_ops_mux_nonzero.py checks ours against numpy).
    """

    inputs = ("in[0]", "in[1]*")
    native_int_inputs = (0,)            # the selector
    quant_passthrough = True

    @classmethod
    def input_count_range(cls) -> tuple[int, int | None]:
        return 2, None  # the selector and at least one candidate

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        sel = inputs[0]
        if sel.dtype not in dtypes.INT_TYPES and sel.dtype != _BOOL:
            raise rule_error(op, "selector-dtype", "inputTensors[0].dataType",
                             f"the selector in[0] must be an INT_*/UINT_* (or BOOL_8) tensor, got "
                             f"{dtypes.name(sel.dtype)}")
        idx = list(range(1, len(inputs)))
        classes = [input_class(op, i, inputs[i], ints=True, bools=True) for i in idx]
        check_same_class(op, classes, idx, inputs)
        shape = broadcast_shape(op, inputs, [0] + idx)
        return [same_spec(inputs[1], shape=shape)]

    def _zero(self, like: np.ndarray):
        """Real 0 in the storage of ``like``: the zero point when the plan passes codes."""
        out = self.output_specs[0] if self.output_specs else None
        if (out is not None and out.dtype in dtypes.FIXED_POINT_TYPES and out.quant is not None
                and like.dtype.kind in "iu"):
            from ..spec.quant import code_range
            lo, hi = code_range(out.dtype, out.quant.bitwidth)
            return like.dtype.type(min(max(int(np.rint(-float(out.quant.offset))), lo), hi))
        return like.dtype.type(0)

    def _run(self, sel, *cands):
        shape = np.broadcast_shapes(sel.shape, *(c.shape for c in cands))
        k = np.broadcast_to(np.asarray(sel).astype(np.int64), shape)
        m = len(cands)
        k = np.where(k < 0, k + m, k)  # negative selectors count from the back
        first = np.asarray(cands[0])
        out = np.full(shape, self._zero(first), dtype=first.dtype)
        for i, c in enumerate(cands):
            np.copyto(out, np.broadcast_to(np.asarray(c, dtype=first.dtype), shape), where=k == i)
        return out


# ---- IsNan ------------------------------------------------------------------------------------
_ISNAN_OUTPUTS = (_BOOL,) + tuple(sorted(dtypes.INT_TYPES)) + (_F32, _F16)


class IsNan(Op):
    """out[0] = 1 where in[0] is NaN, else 0 (QnnOpDef.h QNN_OP_IS_NAN; ONNX IsNaN, which ONNX
    Runtime's QNN EP maps to it one to one).

    in[0]: float32, float16, quantized fixed point or INT_32/UINT_32 (fixed-point and integer
    values are never NaN: all 0, as the vendor computes).  The output is BOOL_8 as the op
    definition says; the vendor's backend also writes 0 / 1 into other declared output types, and
    so does qnnemu: INT_*/UINT_*, FLOAT_32/FLOAT_16 (0.0 / 1.0) and 8/16-bit fixed point (real
    0 / 1 requantized into the output's encoding).  Infinities are not NaN -- as the vendor's
    x86-64 libQnnHtp.so computes on v68 (its default device).  In float16 math (v69+, a float32
    graph) the HTP's float16 has no infinities or NaN (docs/numerics.md): the input conversion
    saturates NaN and infinities to +-131008, and the op reads the IEEE NaN bit pattern --
    exponent 31 with a non-zero mantissa, i.e. a magnitude above 65536 -- so NaN, infinities and
    finite values that large all answer 1, as the vendor's does (its INT_8 / FLOAT_16 /
    UFIXED_POINT_8 outputs there do not hold 0 / 1, which qnnemu does not copy).
    """

    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        input_class(cls.op_type, 0, x, ints=True)
        out = declared_outputs[0] if declared_outputs else None
        if out is not None and out.dtype in dtypes.FIXED_POINT_TYPES and out.dtype not in _FIXED_4:
            return [TensorSpec(tuple(x.shape), _F32)]  # real 0 / 1, requantized by the plan
        if out is not None and out.dtype in _ISNAN_OUTPUTS:
            return [TensorSpec(tuple(x.shape), out.dtype)]
        return [TensorSpec(tuple(x.shape), _BOOL)]

    def _run(self, x):
        if x.dtype.kind != "f":
            nan = np.zeros(x.shape, np.bool_)
        elif self.float16_math:
            # x is on the HTP's float16 grid already: exponent 31, mantissa != 0 is |x| > 65536
            nan = np.isnan(x) | (np.abs(x) > 65536.0)
        else:
            nan = np.isnan(x)
        out = self.output_specs[0].dtype if self.output_specs else _BOOL
        if out in dtypes.FIXED_POINT_TYPES:
            return nan.astype(np.float32)
        return nan.astype(dtypes.numpy_dtype(out))


__all__ = [name for name, obj in list(globals().items())
           if isinstance(obj, type) and issubclass(obj, Op) and not name.startswith("_")
           and obj is not Op]
