"""The op contract (QnnOpDef.h op types and parameters), in the style of onnx/reference/ops.

Each op is a class named exactly like its QNN op type (``Conv2d``, ``ElementWiseAdd``).  It
declares its inputs, outputs and parameters by their QNN names and provides:

- ``check(inputs, params)`` (classmethod): validation and shape/dtype inference, used by
  ``backendValidateOpConfig``, ``graphAddNode`` and ``graphFinalize``.  It raises
  ``OpCheckError(rule, path, message)``; ``path`` is relative to the op config
  (``inputTensors[1].dimensions``, ``params[stride]``).
- ``run(*arrays)``: checks the arrays against the node and calls ``_run(*arrays, **params)``,
  the computation, with parameters by their QNN names.

A fast variant of an op shares its class and is picked by ``config.kernels`` (``fast`` uses the
C kernels in ``qnnemu._kernels``; ``reference`` uses numpy only).

Data types (the contract between ops and the execution plan, ``qnnemu/core/plan.py``):

- Ops compute in the *real* domain.  A fixed-point (UFIXED/SFIXED) input is dequantized by the
  plan before ``_run`` sees it (float32, ``real = scale * (q + offset)``), and a fixed-point
  output is requantized by the plan from the float array ``_run`` returns.  ``infer`` accepts
  fixed-point specs wherever a real value is meant (``check_real``); the declared output's
  quantization, not the input's, is what the output gets.
- Plain INT/UINT/BOOL tensors reach ``_run`` as their numpy integer arrays (indices, shapes,
  int32 arithmetic); an op says which of its inputs may be integers.
- float16 tensors reach ``_run`` as float16 arrays; ops compute in float32 (``to_compute``)
  and return float16 (``from_compute``).
- ``quant_passthrough = True`` (data-movement ops: Reshape, Transpose, Concat, Gather, ...):
  when the node's fixed-point inputs and outputs share one encoding, the plan hands ``_run``
  the raw integer arrays and stores its result unchanged -- exact, and what the HTP does.
- ``handles_quant = True`` (Quantize, Dequantize, Convert, Cast): the plan does not touch the
  node's arrays; ``_run`` reads ``self.input_specs[i].quant`` / ``self.output_specs[i].quant``.

Parameters as graphAddNode takes them (measured on the vendor's libQnnHtp.so 2.51; its
backendValidateOpConfig checks the op definition strictly, and so does ``parse_params(strict=True)``):

- a name the op does not define is ignored (``QNNEMU-op-param-unknown-ignored``); a name given
  again: the first one is used and the later ones are not read (qnnemu/core/graph.py,
  ``QNNEMU-op-param-duplicate-ignored``);
- a scalar of a data type the backend builds parameters from (``SCALAR_PARAM_TYPES``) but of
  another category than the parameter's is converted by value (``QNNEMU-op-param-type-coerced``):
  an integer for a float, 0 or 1 (any number type) for a bool, a non-negative INT for a UINT,
  a UINT up to INT_32's maximum for an INT, a whole FLOAT_32 or a BOOL_8 for an integer;
  a value the parameter cannot hold is refused (``QNNEMU-op-param-value``: the vendor's
  graphFinalize or graphExecute fails on it), and so is a BOOL_8 for a float
  (``QNNEMU-op-param-type``: the vendor reads its byte as a float's bits);
  a scalar of another data type is refused (``QNNEMU-op-param-scalar-type``) unless it is of the
  parameter's own category (FLOAT_64, INT_64: qnnemu takes them, the vendor does not);
- a scalar for a tensor parameter is a one-value tensor (``QNNEMU-op-param-scalar-as-tensor``);
  a tensor for a scalar parameter gives its first value (``QNNEMU-op-param-tensor-as-scalar``);
- a tensor parameter of another shape whose values fit the parameter's shape (perm [1, 2],
  pad_amount [4], ranges [6]) is read in that shape (``QNNEMU-op-param-shape-reshaped``); an
  INT tensor for a UINT one (and the other conversions above) is converted
  (``QNNEMU-op-param-type-coerced``).

Warning rules: what the vendor's backend tolerates (ignores, clips, rounds), an op tolerates the
same way and says so by calling ``warn(rule, path, message)`` from ``infer`` (``rule`` registered
in qnnemu/rules.py ``WARNING_RULES``).  ``check`` drops them; ``check_with_warnings`` returns
them, and the graph layer logs them through ``qnnemu.rules.warn`` once the node passed, naming
the function and the full path:
``[QNNEMU-<op>-<what>] graphAddNode: opConfig.v1.<path>: node 'n' (Op): <message>``.
"""
from __future__ import annotations

import contextvars
import dataclasses
import inspect
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import OpCheckError
from ..headers import Q
from ..spec import dtypes
from ..spec.params import Param, ParamSpec, type_category
from ..spec.tensor import QuantSpec, TensorSpec

REGISTRY: dict[str, type[Op]] = {}


@dataclass(frozen=True)
class OpWarning:
    """A warning rule an op's check raised: ``rule`` (``QNNEMU-<op>-<what>``), ``path``
    (relative to the op config, like OpCheckError's) and the message."""

    rule: str
    path: str
    message: str


# The warnings of the check in progress (None outside check_with_warnings: warn() is a no-op).
_WARNINGS: contextvars.ContextVar[list | None] = contextvars.ContextVar("qnnemu_op_warnings",
                                                                        default=None)


def warn(rule: str, path: str, message: str) -> None:
    """Records a warning rule of the op being checked (see the module docstring)."""
    pending = _WARNINGS.get()
    if pending is not None:
        pending.append(OpWarning(rule, path, message))


# The scalar data types the vendor's graphAddNode builds a parameter from (measured on
# libQnnHtp.so 2.51 over every Qnn_DataType_t: the others -- 64-bit, FLOAT_16, BFLOAT_16,
# FLOAT_64, SFIXED_POINT_16/32, UFIXED_POINT_32, 4- and 2-bit, STRING -- are refused there).
SCALAR_PARAM_TYPES = frozenset({
    Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_INT_16, Q.QNN_DATATYPE_INT_32,
    Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_UINT_16, Q.QNN_DATATYPE_UINT_32,
    Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_BOOL_8,
    Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16,
})
_INT32_MAX = 2**31 - 1
_TENSOR_TARGET = {"int": np.int32, "uint": np.uint32, "float": np.float32, "bool": np.bool_}


class _NotTaken(Exception):
    """A value a parameter category cannot take: ``rule`` says whether its type or its value."""

    def __init__(self, rule: str, why: str):
        self.rule, self.why = rule, why


def _coerce_scalar(cat: str, target: str, value):
    """``value`` (a scalar of category ``cat``) as a ``target`` value, as the vendor's
    graphAddNode reads it (by value); raises _NotTaken."""
    if cat == "string" or target == "string":
        raise _NotTaken("QNNEMU-op-param-type", f"a {cat} value cannot stand for a {target} one")
    if target == "float":
        if cat == "bool":   # the vendor reads the byte as a float's bits: garbage
            raise _NotTaken("QNNEMU-op-param-type", "a BOOL_8 does not stand for a float (the vendor's "
                                                    "backend reads its byte as a float's bits)")
        return float(value)
    v = float(value) if cat == "float" else int(value)
    if cat == "float" and not (math.isfinite(v) and v == int(v)):
        raise _NotTaken("QNNEMU-op-param-value", f"{value!r} is not a whole number")
    v = int(v)
    if target == "bool":
        if v not in (0, 1):
            raise _NotTaken("QNNEMU-op-param-value", f"{value!r} is neither 0 nor 1")
        return bool(v)
    if target == "uint" and v < 0:
        raise _NotTaken("QNNEMU-op-param-value", f"{value!r} is negative")
    if target == "int" and v > _INT32_MAX:
        raise _NotTaken("QNNEMU-op-param-value", f"{value!r} exceeds INT_32")
    return v


def _native_scalar(cat: str, value):
    if cat == "bool":
        return bool(value)
    if cat in ("int", "uint"):
        return int(value)
    if cat == "float":
        return float(value)
    return value


def _scalar_value(spec: ParamSpec, dtype: int, value, path: str, strict: bool):
    cat = type_category(dtype)
    if cat in spec.types:
        return _native_scalar(cat, value)
    expected = "/".join(spec.types)
    target, v = _first_coercion(spec, dtype, path, strict, f"{dtypes.name(dtype)} {value!r}",
                                lambda target: _coerce_scalar(cat, target, value))
    warn("QNNEMU-op-param-type-coerced", path,
         f"{dtypes.name(dtype)} {value!r} given for a {expected} parameter: used as {v!r}")
    return v


def _first_coercion(spec: ParamSpec, dtype: int, path: str, strict: bool, given: str, coerce):
    """(target, value) of the first of the parameter's types ``coerce`` converts the given value
    to (graphAddNode's leniency); strict checking (backendValidateOpConfig) refuses at once."""
    expected = "/".join(spec.types)
    if strict:
        raise OpCheckError("QNNEMU-op-param-type", path,
                           f"data type {dtypes.name(dtype)} not allowed (expected {expected})")
    first: _NotTaken | None = None
    for target in spec.types:
        try:
            return target, coerce(target)
        except _NotTaken as e:
            first = first or e
    assert first is not None  # spec.types is never empty
    raise OpCheckError(first.rule, path, f"{given} given for a {expected} parameter: {first.why}")


def _reshaped(arr: np.ndarray, shape: tuple) -> np.ndarray | None:
    """``arr`` in the parameter's ``shape`` (entries int or None) when its element count fits
    (at most one open dimension), else None."""
    fixed = [d for d in shape if d is not None]
    known = int(np.prod(fixed)) if fixed else 1
    open_dims = len(shape) - len(fixed)
    if open_dims > 1 or (open_dims == 0 and arr.size != known) or (open_dims == 1 and (
            known == 0 or arr.size % known)):
        return None
    return arr.reshape(tuple(arr.size // known if d is None else d for d in shape))


def _tensor_value(spec: ParamSpec, dtype: int, arr: np.ndarray, path: str, strict: bool) -> np.ndarray:
    cat = type_category(dtype)
    expected = "/".join(spec.types)
    if cat not in spec.types:
        values = arr.reshape(-1).tolist()
        target, flat = _first_coercion(spec, dtype, path, strict, f"a {dtypes.name(dtype)} tensor",
                                       lambda target: [_coerce_scalar(cat, target, v) for v in values])
        arr = np.array(flat, dtype=_TENSOR_TARGET.get(target, object)).reshape(arr.shape)
        warn("QNNEMU-op-param-type-coerced", path,
             f"a {dtypes.name(dtype)} tensor given for a {expected} parameter: used as {target} values")
    if spec.shape is not None:
        ok = arr.ndim == len(spec.shape) and all(
            want is None or want == got for want, got in zip(spec.shape, arr.shape))
        if not ok:
            want = "x".join("N" if d is None else str(d) for d in spec.shape)
            fitted = None if strict else _reshaped(arr, spec.shape)
            if fitted is None:
                raise OpCheckError("QNNEMU-op-param-shape", path,
                                   f"shape must be [{want}], got {list(arr.shape)}")
            warn("QNNEMU-op-param-shape-reshaped", path,
                 f"shape {list(arr.shape)} given for [{want}]: its {arr.size} values are read as "
                 f"{list(fitted.shape)}")
            arr = fitted
    return arr


def _param_value(spec: ParamSpec, p: Param, path: str, strict: bool):
    """One given parameter as the op reads it (see the module docstring)."""
    if p.kind == "scalar":
        if p.value is None or (p.dtype not in SCALAR_PARAM_TYPES and type_category(p.dtype) not in spec.types):
            raise OpCheckError("QNNEMU-op-param-scalar-type", f"{path}.scalarParam.dataType",
                               f"{dtypes.name(p.dtype)} is not a data type a scalar parameter can have on "
                               f"the HTP backend ({', '.join(sorted(dtypes.name(t) for t in SCALAR_PARAM_TYPES))})")
        if spec.kind == "scalar":
            return _scalar_value(spec, p.dtype, p.value, path, strict)
        if strict:
            raise OpCheckError("QNNEMU-op-param-kind", path, "must be a tensor parameter, got a scalar")
        warn("QNNEMU-op-param-scalar-as-tensor", path,
             f"a scalar {p.value!r} given for a tensor parameter: read as a tensor of that one value")
        arr = np.array([p.value], dtype=np.uint8 if p.dtype in dtypes.BOOL_TYPES else dtypes.numpy_dtype(p.dtype))
        return _tensor_value(spec, p.dtype, arr, path, strict)
    arr = np.asarray(p.value)
    if spec.kind == "tensor":
        return _tensor_value(spec, p.dtype, arr, path, strict)
    if strict:
        raise OpCheckError("QNNEMU-op-param-kind", path, "must be a scalar parameter, got a tensor")
    if arr.size == 0:
        raise OpCheckError("QNNEMU-op-param-shape", path,
                           f"a tensor of shape {list(arr.shape)} given for a scalar parameter holds no value")
    value = arr.reshape(-1)[0].item()
    warn("QNNEMU-op-param-tensor-as-scalar", path,
         f"a tensor of shape {list(arr.shape)} given for a scalar parameter: its first value {value!r} is used")
    return _scalar_value(spec, p.dtype, value, path, strict)


# ---- plain integers and BOOL_8 as fixed point with scale 1 ------------------------------------
#
# A plain INT_*/UINT_*/BOOL_8 tensor in an op that has no kernel of its own for that type: the
# vendor's HTP computes it as the fixed-point type of the same width and signedness with scale 1
# and offset 0 (BOOL_8: UFIXED_POINT_8) -- measured on libQnnHtp.so 2.51, v73: the one-node
# graphs of tools/probe_op_support.py the vendor's graph path finalizes with plain tensors give
# that result within one code (tools/compare_op_values.py; the few that do not, where the
# vendor's values are no function of the inputs' values, are listed in docs/validation.md,
# "Documented divergences", and docs/op-support.md, "Plain integers").  qnnemu does
# the same: when an op's own check refuses such a node, it is checked again on that *fixed view*
# (``FixedView``), and the execution plan dequantizes / requantizes those tensors as it does any
# fixed-point tensor (codes are the values).  Outputs round as the op's fixed-point outputs do
# (core/plan.py ROUNDING_BY_OP), saturate to the type's range (32-bit: the largest float32 below
# it, 2**31 - 128, as the vendor's conversions do) and NaN saturates to the largest value.
# UINT_32 codes are read as INT_32 by the vendor's fixed-point kernels (3e9 is negative to its
# Relu); INT_64 computes with its full range (its values are read exactly).
AS_FIXED: dict[int, int] = {
    Q.QNN_DATATYPE_INT_8: Q.QNN_DATATYPE_SFIXED_POINT_8,
    Q.QNN_DATATYPE_UINT_8: Q.QNN_DATATYPE_UFIXED_POINT_8,
    Q.QNN_DATATYPE_BOOL_8: Q.QNN_DATATYPE_UFIXED_POINT_8,
    Q.QNN_DATATYPE_INT_16: Q.QNN_DATATYPE_SFIXED_POINT_16,
    Q.QNN_DATATYPE_UINT_16: Q.QNN_DATATYPE_UFIXED_POINT_16,
    Q.QNN_DATATYPE_INT_32: Q.QNN_DATATYPE_SFIXED_POINT_32,
    Q.QNN_DATATYPE_UINT_32: Q.QNN_DATATYPE_UFIXED_POINT_32,
    Q.QNN_DATATYPE_INT_64: Q.QNN_DATATYPE_SFIXED_POINT_32,
}
IDENTITY_QUANT = QuantSpec(int(Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET), 1.0, 0)


def as_fixed_spec(spec: TensorSpec) -> TensorSpec:
    """``spec`` (a plain INT_*/UINT_*/BOOL_8 tensor) as the fixed-point tensor the HTP computes."""
    return dataclasses.replace(spec, dtype=AS_FIXED[spec.dtype], quant=IDENTITY_QUANT)


def plain_range(dtype: int) -> tuple[float, float]:
    """The values an output of plain type ``dtype`` saturates to (see AS_FIXED above)."""
    if dtype == Q.QNN_DATATYPE_BOOL_8:
        return 0.0, 255.0
    bits = 8 * dtypes.itemsize(dtype)
    signed = dtypes.name(dtype).startswith("QNN_DATATYPE_INT_")
    lo, hi = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1) if signed else (0.0, 2.0 ** bits - 1)
    if bits >= 32:   # the largest value of the float the conversion is made in that fits
        hi = float(np.nextafter(np.float32(hi + 1), np.float32(0))) if bits == 32 else \
            float(np.nextafter(hi + 1, 0.0))
    return lo, hi


_ROUNDINGS = {
    "half_even": np.rint,
    "half_up": lambda y: np.floor(y + 0.5),
    "half_away_from_zero": lambda y: np.copysign(np.floor(np.abs(y) + 0.5), y),
}


@dataclass(frozen=True)
class FixedView:
    """How an op computes a node whose plain integer / BOOL_8 tensors its own check refused: the
    inputs at ``inputs`` and the outputs at ``outputs`` are fixed point with scale 1 (AS_FIXED).
    ``in_specs`` / ``out_specs`` are the op's view of the node (what ``infer`` accepted)."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    in_specs: tuple
    out_specs: tuple
    plain_out: tuple            # the plain data type of each output in ``outputs``

    @staticmethod
    def dequantize(array: np.ndarray) -> np.ndarray:
        """The real values of a plain array: float32 (8/16-bit) or float64 (wider: exact).
        UINT_32 codes are read as INT_32, as the HTP's fixed-point kernels read them."""
        a = np.asarray(array)
        if a.dtype == np.uint32:
            a = a.view(np.int32)
        return a.astype(np.float32 if a.dtype.itemsize <= 2 else np.float64)

    @staticmethod
    def requantize(y: np.ndarray, dtype: int, mode: str = "half_even") -> np.ndarray:
        """Real values as an output of plain type ``dtype``: rounded (``mode``, the op's
        fixed-point rounding), NaN to the largest value, saturated to ``plain_range``."""
        lo, hi = plain_range(dtype)
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            r = _ROUNDINGS.get(mode, np.rint)(y)
            r = np.clip(np.where(np.isnan(r), hi, r), lo, hi)
        return r.astype(dtypes.numpy_dtype(dtype))


def fixed_view(cls, inputs: list, params: dict[str, Any], declared_outputs: list | None,
               outs: list | None = None) -> tuple[list[TensorSpec], FixedView | None]:
    """(the node's output specs, its FixedView or None): ``outs``, the outputs ``infer`` gave
    for the node as it is (None: it refused it; the refusal is re-raised when the fixed view is
    refused too), else those of the fixed view.  Declared plain outputs of real-valued results
    are outputs of the view too (a Relu of UFIXED_POINT_8 into INT_8)."""
    declared = list(declared_outputs) if declared_outputs is not None else None
    plain_outs = tuple(k for k, s in enumerate(declared or ()) if s is not None and s.dtype in AS_FIXED)
    if outs is not None:
        convert = tuple(k for k in plain_outs if k < len(outs) and is_real_dtype(outs[k].dtype))
        if not convert:
            return outs, None
        fixed_outs = tuple(as_fixed_spec(s) if k in convert else s for k, s in enumerate(declared))
        view = FixedView((), convert, tuple(inputs), fixed_outs,
                         tuple(declared[k].dtype for k in convert))
        return _plain_outputs(outs, declared, convert), view
    native = getattr(cls, "native_int_inputs", ())
    positions = tuple(i for i, s in enumerate(inputs)
                      if s is not None and s.dtype in AS_FIXED and i not in native)
    if not positions and not plain_outs:
        return None, None
    view_in = [as_fixed_spec(s) if i in positions else s for i, s in enumerate(inputs)]
    tries = [tuple(as_fixed_spec(s) if k in plain_outs else s for k, s in enumerate(declared))] \
        if plain_outs else []
    tries.append(tuple(declared) if declared is not None else None)
    for view_out in tries:
        try:
            got = cls.infer(view_in, params, declared_outputs=list(view_out) if view_out is not None else None)
        except OpCheckError:
            continue
        if declared is None:   # a bare check: outputs in a substituted type name the plain one
            plain_of = {AS_FIXED[inputs[i].dtype]: inputs[i].dtype for i in reversed(positions)}
            got = [dataclasses.replace(o, dtype=plain_of[o.dtype], quant=None)
                   if o.quant == IDENTITY_QUANT and o.dtype in plain_of else o for o in got]
            return got, FixedView(positions, (), tuple(view_in), (), ())
        convert = tuple(k for k in plain_outs if k < len(got) and got[k].dtype != declared[k].dtype
                        and is_real_dtype(got[k].dtype))
        fixed_outs = tuple(as_fixed_spec(s) if k in convert else s for k, s in enumerate(declared))
        return _plain_outputs(got, declared, convert), FixedView(
            positions, convert, tuple(view_in), fixed_outs, tuple(declared[k].dtype for k in convert))
    return None, None


def _plain_outputs(outs, declared, convert) -> list[TensorSpec]:
    return [TensorSpec(tuple(o.shape), declared[k].dtype) if k in convert else o for k, o in enumerate(outs)]


class Op:
    """Base of all ops.  Subclasses set ``inputs``, ``outputs``, ``params``."""

    op_type: ClassVar[str] = ""
    # Names of inputs in order; a trailing "*" on the last one means variadic (1 or more),
    # a trailing "?" means optional.
    inputs: ClassVar[tuple[str, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ("out[0]",)
    params: ClassVar[dict[str, ParamSpec]] = {}
    # See the module docstring: how the plan treats fixed-point tensors around this op.
    quant_passthrough: ClassVar[bool] = False
    handles_quant: ClassVar[bool] = False
    # Input positions holding integers the op reads as integers (indices, selectors, shapes,
    # seeds): never part of a FixedView (see AS_FIXED).
    native_int_inputs: ClassVar[tuple[int, ...]] = ()
    # Set by the execution plan on the instance it runs: the HTP arch the graph is prepared
    # for (None: an op used on its own; ops whose semantics differ per arch read it), and
    # whether its float32 tensors compute in float16 math (docs/numerics.md "Float16 math").
    htp_arch: int | None = None
    float16_math: bool = False

    def __init_subclass__(cls, register: bool = True, **kw):
        super().__init_subclass__(**kw)
        if register and not cls.__name__.startswith("_"):
            cls.op_type = cls.op_type or cls.__name__
            REGISTRY[cls.op_type] = cls
        # The graph layer calls infer(..., declared_outputs=...) on every op: fail at import,
        # not at graphAddNode, if an op's infer cannot take it.
        own = cls.__dict__.get("infer")
        if own is not None:
            sig = inspect.signature(own.__func__ if isinstance(own, classmethod) else own)
            if "declared_outputs" not in sig.parameters and not any(
                    p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
                raise TypeError(f"{cls.__name__}.infer must accept declared_outputs=None")

    # ---- checking -----------------------------------------------------------------------
    @classmethod
    def input_count_range(cls) -> tuple[int, int | None]:
        required = sum(1 for n in cls.inputs if not n.endswith(("?", "*")))
        if cls.inputs and cls.inputs[-1].endswith("*"):
            return max(required, 1), None
        return required, len(cls.inputs)

    @classmethod
    def parse_params(cls, params: dict[str, Param], strict: bool = False) -> dict[str, Any]:
        """Checks params against the definition; returns QNN name -> value (defaults filled).

        Scalars become Python int/float/bool; tensors stay numpy arrays.  ``strict`` is
        backendValidateOpConfig's op definition check (names, kinds, types and shapes exactly as
        defined); otherwise graphAddNode's, which takes what the vendor's graphAddNode takes
        (see "Parameters as graphAddNode takes them" in the module docstring).
        """
        values: dict[str, Any] = {}
        for name in params:
            if name not in cls.params:
                known = ", ".join(cls.params) or "none"
                if strict:
                    raise OpCheckError("QNNEMU-op-param-unknown", f"params[{name}]",
                                       f"{cls.op_type} has no parameter '{name}' (known: {known})")
                warn("QNNEMU-op-param-unknown-ignored", f"params[{name}]",
                     f"{cls.op_type} has no parameter '{name}' (known: {known}); ignored")
        for name, spec in cls.params.items():
            p = params.get(name)
            if p is None:
                if spec.required:
                    raise OpCheckError("QNNEMU-op-param-missing", f"params[{name}]",
                                       f"{cls.op_type} requires parameter '{name}'")
                values[name] = spec.default() if callable(spec.default) else spec.default
                continue
            values[name] = _param_value(spec, p, f"params[{name}]", strict)
        return values

    @classmethod
    def check(cls, inputs: list[TensorSpec], params: dict[str, Param],
              declared_outputs: list[TensorSpec] | None = None, strict: bool = False) -> list[TensorSpec]:
        """Validates a node and returns the inferred output specs (shape, dtype).

        ``declared_outputs``: the node's output tensors as the app declared them.  Optional;
        passed on to ``infer``, where only ops that cannot infer their output shape (Reshape)
        read it (they raise OpCheckError without it).  ``strict``: see ``parse_params``.
        """
        lo, hi = cls.input_count_range()
        if len(inputs) < lo or (hi is not None and len(inputs) > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else 'N'}"
            raise OpCheckError("QNNEMU-op-input-count", "numOfInputs",
                               f"{cls.op_type} takes {want} inputs, got {len(inputs)}")
        values = cls.parse_params(params, strict)
        return cls.infer_node(inputs, values, declared_outputs)[0]

    @classmethod
    def infer_node(cls, inputs: list[TensorSpec], params: dict[str, Any],
                   declared_outputs: list[TensorSpec] | None = None) -> tuple[list[TensorSpec], FixedView | None]:
        """``infer`` on parsed ``params``, and the node's FixedView (None when the op computes
        its tensors as they are): a node whose plain integer / BOOL_8 tensors ``infer`` refuses
        is taken when its fixed view (AS_FIXED) is, as the HTP takes it."""
        try:
            outs = cls.infer(inputs, params, declared_outputs=declared_outputs)
        except OpCheckError:
            got, view = fixed_view(cls, inputs, params, declared_outputs)
            if got is None:
                raise
            return got, view
        return fixed_view(cls, inputs, params, declared_outputs, outs)

    @classmethod
    def check_with_warnings(cls, inputs: list[TensorSpec], params: dict[str, Param],
                            declared_outputs: list[TensorSpec] | None = None, strict: bool = False
                            ) -> tuple[list[TensorSpec], list[OpWarning]]:
        """``check``, plus the warning rules its parameters and ``infer`` raised (each once, in
        order)."""
        token = _WARNINGS.set([])
        try:
            outs = cls.check(inputs, params, declared_outputs=declared_outputs, strict=strict)
            return outs, list(dict.fromkeys(_WARNINGS.get()))
        finally:
            _WARNINGS.reset(token)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params: dict[str, Any],
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        """Output specs from input specs and parsed params.  ``declared_outputs`` (the node's
        declared output tensors, or None) matters only to ops such as Reshape."""
        raise NotImplementedError

    # ---- running ------------------------------------------------------------------------
    def __init__(self, params: dict[str, Any], inputs: list[TensorSpec] | None = None,
                 outputs: list[TensorSpec] | None = None):
        """``params`` are parsed values (``parse_params``); specs are kept for kernels.  A node
        computed on its fixed view (``infer_node``) keeps the view's specs, and ``fixed_view``
        tells the execution plan which arrays it converts."""
        self.param_values = params
        self.input_specs = inputs or []
        self.output_specs = outputs or []
        self.fixed_view: FixedView | None = None
        if any(s is not None and s.dtype in AS_FIXED for s in (*self.input_specs, *self.output_specs)):
            try:
                _, view = type(self).infer_node(list(self.input_specs), params, outputs)
            except OpCheckError:
                view = None
            if view is not None:
                self.fixed_view = view
                self.input_specs = list(view.in_specs)
                if view.out_specs:
                    self.output_specs = list(view.out_specs)

    def run(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        for i, (a, spec) in enumerate(zip(arrays, self.input_specs)):
            if a is None or spec is None:  # an absent optional input
                continue
            if tuple(a.shape) != tuple(spec.shape):
                raise OpCheckError("QNNEMU-op-run-shape", f"inputTensors[{i}]",
                                   f"array shape {list(a.shape)} != declared {list(spec.shape)}")
        out = self._run(*arrays, **self.param_values)
        return out if isinstance(out, tuple) else (out,)

    def _run(self, *arrays: np.ndarray, **params: Any):
        raise NotImplementedError


def same_spec(spec: TensorSpec, shape=None, dtype=None) -> TensorSpec:
    """A spec like ``spec`` (quantization included) with a new shape/dtype."""
    return dataclasses.replace(spec, shape=tuple(spec.shape if shape is None else shape),
                               dtype=spec.dtype if dtype is None else dtype, data=None, name="")


def check_rank(op: str, idx: int, spec: TensorSpec, ranks) -> None:
    if spec.rank not in ranks:
        raise OpCheckError(f"QNNEMU-{op}-input-rank", f"inputTensors[{idx}].rank",
                           f"{op} input {idx} must have rank {' or '.join(map(str, ranks))}, "
                           f"got {spec.rank} (dimensions {list(spec.shape)})")


def check_float(op: str, idx: int, spec: TensorSpec) -> None:
    """The foundation executes float tensors; fixed-point execution arrives with quantization."""
    if spec.dtype not in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16):
        from ..errors import OpUnsupportedError
        raise OpUnsupportedError(f"QNNEMU-{op}-dtype", f"inputTensors[{idx}].dataType",
                                 f"{op} runs float32/float16 tensors; got {dtypes.name(spec.dtype)}")


def check_float_inputs(op: str, inputs: list[TensorSpec]) -> None:
    """check_float on every input, then all inputs must share input 0's float type."""
    for i, spec in enumerate(inputs):
        check_float(op, i, spec)
    for i, spec in enumerate(inputs[1:], 1):
        if spec.dtype != inputs[0].dtype:
            raise OpCheckError(f"QNNEMU-{op}-dtype-mismatch", f"inputTensors[{i}].dataType",
                               f"{op} inputs must share one data type: input 0 is "
                               f"{dtypes.name(inputs[0].dtype)}, input {i} is "
                               f"{dtypes.name(spec.dtype)}")


def check_real(op: str, idx: int, spec: TensorSpec, *, ints: bool = False,
               bools: bool = False) -> None:
    """``spec`` must hold real values: float16/float32 or a quantized fixed-point type.

    ``ints``: plain INT_*/UINT_* tensors are accepted too (ops that also do integer math);
    ``bools``: BOOL_8 is accepted too.
    """
    d = spec.dtype
    if d in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16):
        return
    if d in dtypes.FIXED_POINT_TYPES and d not in (Q.QNN_DATATYPE_SFIXED_POINT_4,
                                                   Q.QNN_DATATYPE_UFIXED_POINT_4):
        if spec.quant is None:
            raise OpCheckError(f"QNNEMU-{op}-quant-missing", f"inputTensors[{idx}].quantizeParams",
                               f"{op} input {idx} is {dtypes.name(d)} without quantization")
        return
    if ints and d in dtypes.INT_TYPES:
        return
    if bools and d in dtypes.BOOL_TYPES:
        return
    from ..errors import OpUnsupportedError
    allowed = "float32/float16, 8/16/32-bit fixed point" + (", INT/UINT" if ints else "") + (
        ", BOOL_8" if bools else "")
    raise OpUnsupportedError(f"QNNEMU-{op}-dtype", f"inputTensors[{idx}].dataType",
                             f"{op} input {idx} must be {allowed}; got {dtypes.name(d)}")


def check_index(op: str, idx: int, spec: TensorSpec) -> None:
    """``spec`` must be an integer index tensor (INT_32/INT_64/UINT_32, or fixed point with
    scale 1 and offset 0 as converters sometimes emit)."""
    if spec.dtype in dtypes.INT_TYPES:
        return
    raise OpCheckError(f"QNNEMU-{op}-index-dtype", f"inputTensors[{idx}].dataType",
                       f"{op} input {idx} holds indices and must be an integer type; got "
                       f"{dtypes.name(spec.dtype)}")


def is_real_dtype(dtype: int) -> bool:
    return dtype in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16) or dtype in dtypes.FIXED_POINT_TYPES


def compute_dtype(spec: TensorSpec):
    """The numpy dtype ``_run`` receives for an input of ``spec`` (see the module docstring)."""
    if spec.dtype in dtypes.FIXED_POINT_TYPES:
        return np.dtype(np.float32)
    return dtypes.numpy_dtype(spec.dtype)


def to_compute(a: np.ndarray | None) -> np.ndarray | None:
    """Float16 computes in float32 (rounded back at the output by ``from_compute``)."""
    if a is None:
        return None
    return a.astype(np.float32) if a.dtype == np.float16 else a


def from_compute(y: np.ndarray, dtype) -> np.ndarray:
    return y.astype(dtype, copy=False)


# -- the HTP's float16 (QNN HTP backend documentation, "QNN HTP Precision") -------------------
#
# How the vendor's libQnnHtp.so represents float32 values computed in float16 math (probed on
# every arch that runs it, docs/numerics.md "float16 math"): 11 significant bits down to 2**-14,
# multiples of 2**-24 below (IEEE subnormals), but no infinities or NaN: the exponent IEEE keeps
# for them is one more binade, so the largest value is 131008 = (2 - 2**-10) * 2**16 and larger
# magnitudes, infinities and NaN saturate to it (NaN keeps its sign bit).

HTP_FP16_MAX = 131008.0
_FP16_MIN_NORMAL = 2.0 ** -14
_TIES = ("away", "even")


def htp_fp16_round(x: np.ndarray, ties: str = "away") -> np.ndarray:
    """float32 values rounded to the HTP's float16 grid, returned as float32.

    ``ties``: "away" (half away from zero: the HTP's conversions and most ops) or "even"
    (half to even: what its float16 ElementWiseAdd gives)."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    bits = a.view(np.uint32)
    # 13 low mantissa bits dropped: adding half of them to the magnitude rounds half away
    # from zero (a carry into the exponent is the correct next binade).
    if ties == "away":
        r = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    else:
        odd = (bits >> np.uint32(13)) & np.uint32(1)
        r = ((bits + np.uint32(0x0FFF) + odd) & np.uint32(0xFFFFE000)).view(np.float32)
    small = a < np.float32(_FP16_MIN_NORMAL)
    if small.any():
        q = a[small].astype(np.float64) * 2.0 ** 24
        q = np.floor(q + 0.5) if ties == "away" else np.rint(q)
        r[small] = (q * 2.0 ** -24).astype(np.float32)
    nan = np.isnan(a)
    np.minimum(r, np.float32(HTP_FP16_MAX), out=r)   # also inf and a rounding carry past it
    if nan.any():
        r[nan] = np.float32(HTP_FP16_MAX)
    return np.copysign(r, x, dtype=np.float32)


def htp_fp16_static(x: np.ndarray) -> np.ndarray:
    """A float32 static tensor (weights, constants) as the HTP stores it for float16 math: the
    IEEE conversion (round half to even), whose bit patterns the HTP then reads without
    infinities: an overflow (IEEE inf, 0x7C00) is 65536 and NaN (0x7E00) 98304."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16)
    out = h.astype(np.float32)
    special = ~np.isfinite(h)
    if special.any():
        bits = h[special].view(np.uint16).astype(np.uint32)
        mant = (bits & np.uint32(0x3FF)).astype(np.float32)
        out[special] = np.copysign(np.float32(65536.0) * (1 + mant / np.float32(1024)),
                                   np.where(bits & np.uint32(0x8000), -1.0, 1.0)).astype(np.float32)
    return out


def htp_fp16_to_fp32(v: np.ndarray) -> np.ndarray:
    """A float16-math result delivered as a float32 output: the vendor's conversion sets the
    lowest float32 mantissa bit of the value's binade (binade 2**-14 for subnormals), i.e. one
    float32 ulp away from zero; zeros stay zeros."""
    v = np.asarray(v, dtype=np.float32)
    a = np.abs(v).astype(np.float64)
    _, e = np.frexp(np.maximum(a, _FP16_MIN_NORMAL))   # a in [2**(e-1), 2**e)
    up = (a + np.ldexp(1.0, e - 24)).astype(np.float32)
    up[a == 0] = 0.0
    return np.copysign(up, v, dtype=np.float32)


__all__ = ["Op", "Param", "ParamSpec", "TensorSpec", "QuantSpec", "REGISTRY", "OpWarning", "warn",
           "AS_FIXED", "IDENTITY_QUANT", "FixedView", "fixed_view", "as_fixed_spec", "plain_range",
           "OpCheckError", "same_spec", "check_rank", "check_float", "type_category",
           "check_float_inputs", "to_compute", "from_compute", "check_real", "check_index",
           "is_real_dtype", "compute_dtype", "HTP_FP16_MAX", "htp_fp16_round", "htp_fp16_static", "htp_fp16_to_fp32"]
