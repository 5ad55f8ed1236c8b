"""C lowering of the element-wise ops and activations (QNN op definitions; qnnemu/ops/
elementwise.py, qnnemu/ops/activation.py), kernels in csrc/eng_eltwise.c:

- ``qe_k_binary_f32``: ElementWiseAdd, Subtract, Multiply, Divide, Maximum, Minimum,
  SquaredDifference, FloorDiv, Fmod, Mod, Power, the comparisons Equal, NotEqual, Greater,
  GreaterEqual, Less, LessEqual (BOOL_8 output), ElementWiseBinary with one of those
  operations, and Prelu -- on real values (float32, or fixed point / float16 converted to float32
  by the core), numpy broadcasting of any rank;
- ``qe_k_unary_f32``: ElementWiseNeg, Abs, SquareRoot, Floor, Ceil, Round, Rsqrt, Sign, Exp, Log,
  Sin, Cos, Asin, Atan,
  ElementWiseUnary with one of those (or RECIPROCAL), Relu, Relu1, Relu6, ReluMinMax, HardSwish,
  Sigmoid, Tanh, Elu, Gelu, Erf, ThresholdedRelu, ElementWiseSoftplus, ElementWiseNeuron;
- ``qe_k_softmax_f32``: Softmax, LogSoftmax (any axis, beta);
- ``qe_k_sigmoid_f16`` / ``qe_k_silu_f16``: a Sigmoid (and such a SiLU pair) in float16 math,
  its rounded results looked up in tables over the float16 values (csrc/eng_eltwise.c);
- ``qe_k_silu_f32``: SiLU folded by the plan (qnnemu/core/plan.py ``SiluProduct``: the Multiply's
  step reads x and writes x * sigmoid(x), the Sigmoid's own output is never stored; its step,
  ``FoldedIntoProducer``, is a ``qe_k_nop``); and with the plan's folds off
  (FOLD_RELU_ACTIVATION_INTO_CONV_OFF), a Sigmoid read only by the next step, an
  ElementWiseMultiply of the Sigmoid's input by it (float32, no converters): one pass writing
  both, then ``qe_k_nop``;
- ``qe_k_binary_f32`` with an activation: an ElementWiseAdd whose Relu / ReluMinMax the plan
  folded into it (``EltwiseActivationEpilogue``), clamped as the sum is stored;
- ``qe_k_norm_f32``: LayerNorm and RmsNorm over trailing axes, InstanceNorm (every region and
  mode), GroupNorm -- on float32 inputs (float16 ones are normalized in float64 and rounded once
  by the Python op), with static gamma / beta;
- ``qe_k_binary_i32`` / ``qe_k_unary_i32``: the same binary ops (but Power) and Neg, Abs, Sign on
  INT_32 / UINT_32 (numpy's wrapping integer arithmetic; division and remainders by 0 give 0);
- ``qe_k_binary_f32`` twice: Batchnorm (x * weight, then + bias, as the op's float32 arithmetic);
- ``qe_k_unary_f32`` (the float16 reciprocal) then ``qe_k_binary_f32``: ElementWiseDivide in
  float16 math (float16.ReciprocalDivide).

The exact operations reproduce numpy's arithmetic; the transcendental ones are the C functions
the ops' fast paths call too (qnnemu/ops/_fast_eltwise.py), so they are lowered only while those
fast paths are on (``QNNEMU_KERNELS=reference`` keeps numpy there: the step falls back).
BOOL_8 computations (logic ops) and float16.Float32BiasAdd (the float16-math bias add) fall back to Python.
"""
from __future__ import annotations

import weakref

import numpy as np

from ...headers import Q
from ...ops import _fast, activation as act, elementwise as ew, norm
from ...ops._fast_eltwise import (
    BINARY,
    UNARY,
    _f64,
    broadcast_layout as _broadcast_layout,
    softmax_geometry,
    unary_params,
)
from ...ops.base import to_compute
from ...spec import dtypes
from ...spec.quant import Dequantizer, Requantize
from .. import float16, plan as plan_mod
from .lowering import Unsupported, _cast_target, lowers, lowers_impl, type_code

# C-kernel unary ops whose Python fast path calls that kernel (not a numpy formula)
_SHARED = {"exp", "log", "sigmoid", "tanh", "elu", "gelu", "softplus", "erf", "sin", "cos", "asin",
           "atan", "pow"}

_BINARY_OF = {
    ew.ElementWiseAdd: "add", ew.ElementWiseSubtract: "sub", ew.ElementWiseMultiply: "mul",
    ew.ElementWiseDivide: "div", ew.ElementWiseMaximum: "max", ew.ElementWiseMinimum: "min",
    ew.ElementWiseSquaredDifference: "sqdiff", ew.ElementWiseFloorDiv: "floordiv",
    ew.ElementWiseFmod: "fmod", ew.ElementWiseMod: "mod", ew.ElementWisePower: "pow",
    ew.ElementWiseEqual: "eq", ew.ElementWiseNotEqual: "ne", ew.ElementWiseGreater: "gt",
    ew.ElementWiseGreaterEqual: "ge", ew.ElementWiseLess: "lt", ew.ElementWiseLessEqual: "le",
}
_COMPARE = {"eq", "ne", "gt", "ge", "lt", "le"}

_UNARY_EW_OF = {
    ew.ElementWiseNeg: "neg", ew.ElementWiseAbs: "abs", ew.ElementWiseSquareRoot: "sqrt",
    ew.ElementWiseFloor: "floor", ew.ElementWiseCeil: "ceil", ew.ElementWiseRound: "rint",
    ew.ElementWiseRsqrt: "rsqrt", ew._Reciprocal: "recip", ew.ElementWiseSign: "sign",
    ew.ElementWiseExp: "exp", ew.ElementWiseLog: "log", ew.ElementWiseSin: "sin",
    ew.ElementWiseCos: "cos", ew.ElementWiseAsin: "asin", ew.ElementWiseAtan: "atan",
}


def _real_mode(ctx, indices) -> None:
    """The op computes on real values (not INT_32 / UINT_32 / BOOL_8)."""
    specs = ctx.node.input_specs
    for i in indices:
        spec = specs[i] if specs and i < len(specs) else None
        if spec is None or spec.dtype == Q.QNN_DATATYPE_BOOL_8 or spec.dtype in dtypes.INT_TYPES:
            raise Unsupported(f"input {i} is not real-valued")


def _n(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


_F16 = np.dtype(np.float16)
_CODE_F32, _CODE_F16 = type_code(np.float32), type_code(np.float16)


def _input(ctx, i: int) -> int:
    """Input i as float32: what the op computes on (``to_compute`` widens FLOAT_16 storage)."""
    if ctx.in_dtype(i) == _F16 and ctx.in_conv(i) is None:
        n = _n(ctx.in_shape(i))
        tmp = ctx.scratch(4 * n)
        ctx.emit("qe_k_cast", (ctx.input_raw(i), tmp), (n, _CODE_F16, _CODE_F32))
        return tmp
    return ctx.input_f32(i)


def _output(ctx, k: int):
    """(buffer the kernel writes float32 output k to, finish) -- FLOAT_16 storage gets the
    float32 result rounded by a cast step (``from_compute``'s astype)."""
    if ctx.out_dtype(k) == _F16 and ctx.out_conv(k) is None:
        n = _n(ctx.out_shape(k))
        tmp = ctx.scratch(4 * n)
        dst = ctx.output_raw(k)
        return tmp, lambda: ctx.emit("qe_k_cast", (tmp, dst), (n, _CODE_F32, _CODE_F16))
    return ctx.output_f32(k), lambda: None


def broadcast_layout(a_shape, b_shape, out_shape):
    """_fast_eltwise.broadcast_layout; Unsupported where it has none."""
    try:
        return _broadcast_layout(a_shape, b_shape, out_shape)
    except ValueError as why:
        raise Unsupported(str(why)) from None


_I32, _U32 = np.dtype(np.int32), np.dtype(np.uint32)
_INT_BINARY = {"add", "sub", "mul", "div", "max", "min", "sqdiff", "floordiv", "fmod", "mod"} | _COMPARE


def _int_class(ctx, indices) -> np.dtype | None:
    """int32 / uint32 when the op's inputs ``indices`` are all INT_32 / all UINT_32 (numpy's
    integer arithmetic), else None."""
    specs = ctx.node.input_specs
    want = {Q.QNN_DATATYPE_INT_32: _I32, Q.QNN_DATATYPE_UINT_32: _U32}
    got = {want.get(specs[i].dtype) if specs and i < len(specs) and specs[i] is not None else None
           for i in indices}
    if len(got) != 1 or None in got:
        return None
    dtype = got.pop()
    if any(ctx.in_dtype(i) != dtype for i in indices):
        return None
    return dtype


def _emit_int_binary(ctx, op: str, dtype: np.dtype) -> None:
    if op not in _INT_BINARY:
        raise Unsupported(f"integer {op}")
    want = np.dtype(np.uint8) if op in _COMPARE else dtype
    if ctx.out_dtype(0) != want:
        raise Unsupported(f"an integer {op} stored as {ctx.out_dtype(0)}")
    dims, sa, sb = broadcast_layout(ctx.in_shape(0), ctx.in_shape(1), ctx.out_shape(0))
    ctx.emit("qe_k_binary_i32", (ctx.input_raw(0), ctx.input_raw(1), ctx.output_raw(0)),
             [BINARY[op], int(dtype == _I32), len(dims), *dims, *sa, *sb])


def _emit_binary(ctx, op: str) -> None:
    if ctx.n_in != 2 or ctx.n_out != 1:
        raise Unsupported("a binary op without exactly two inputs and one output")
    int_dtype = _int_class(ctx, (0, 1))
    if int_dtype is not None:
        _emit_int_binary(ctx, op, int_dtype)
        return
    if op in _SHARED and not _fast.enabled():
        raise Unsupported("QNNEMU_KERNELS=reference: the op computes with numpy")
    _real_mode(ctx, (0, 1))
    dims, sa, sb = broadcast_layout(ctx.in_shape(0), ctx.in_shape(1), ctx.out_shape(0))
    if _fixed_point_binary(ctx, op, dims, sa, sb):
        return
    a, b = _input(ctx, 0), _input(ctx, 1)
    if op in _COMPARE:
        if ctx.out_dtype(0) != np.dtype(np.uint8):
            raise Unsupported(f"a comparison stored as {ctx.out_dtype(0)}")
        out, finish = ctx.output_raw(0), (lambda: None)
    else:
        out, finish = _output(ctx, 0)
    ctx.emit("qe_k_binary_f32", (a, b, out), [BINARY[op], len(dims), *dims, *sa, *sb])
    finish()


@lowers("ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
        "ElementWiseMaximum", "ElementWiseMinimum", "ElementWiseSquaredDifference", "ElementWisePower",
        "ElementWiseFloorDiv", "ElementWiseFmod", "ElementWiseMod", "ElementWiseEqual",
        "ElementWiseNotEqual", "ElementWiseGreater", "ElementWiseGreaterEqual", "ElementWiseLess",
        "ElementWiseLessEqual", "ElementWiseBinary")
def binary(ctx) -> None:
    impl = ctx.impl
    cls = type(impl)
    if ctx.index in _silu_products.get(ctx.b, ()):
        # the product is written by the Sigmoid step before (``_silu``); its buffers are named so
        # that they keep their lifetimes
        ctx.emit("qe_k_nop", (ctx.input_raw(0), ctx.input_raw(1), ctx.b.slot_buffer(ctx.step.writes[0], ctx.index)))
        return
    if cls is float16.ReciprocalDivide and ctx.node.op_type == "ElementWiseDivide":
        _reciprocal_divide(ctx)
        return
    _emit_binary(ctx, _kernel_op(impl, ew.ElementWiseBinary, _BINARY_OF, "binary"))


@lowers_impl(plan_mod.EltwiseActivationEpilogue)
def add_activation(ctx) -> None:
    """An ElementWiseAdd with its Relu / ReluMinMax folded (float32 math): one qe_k_binary_f32
    step clamping as it stores."""
    wrap = ctx.impl
    if ctx.node.op_type != "ElementWiseAdd" or type(wrap.impl) is not ew.ElementWiseAdd or wrap.rounded is not None:
        raise Unsupported(f"an activation folded into {ctx.node.op_type} {type(wrap.impl).__name__}")
    if ctx.n_in != 2 or ctx.n_out != 1:
        raise Unsupported("an add without two inputs and one output")
    _real_mode(ctx, (0, 1))
    if _int_class(ctx, (0, 1)) is not None or any(ctx.in_dtype(i) != _F32 for i in (0, 1)) \
            or ctx.out_dtype(0) != _F32:
        raise Unsupported("a folded add that is not float32")
    dims, sa, sb = broadcast_layout(ctx.in_shape(0), ctx.in_shape(1), ctx.out_shape(0))
    a, b = ctx.input_f32(0), ctx.input_f32(1)
    ctx.emit("qe_k_binary_f32", (a, b, ctx.output_f32(0)),
             [BINARY["add"], len(dims), *dims, *sa, *sb, wrap.mode], (wrap.lo, wrap.hi))


@lowers_impl(plan_mod.SiluProduct)
def silu_product(ctx) -> None:
    """The Multiply's step of a SiLU the plan folded: qe_k_silu_f32 reading x, writing the product
    alone."""
    wrap = ctx.impl
    if not _fast.enabled():
        raise Unsupported("QNNEMU_KERNELS=reference: the Sigmoid computes with numpy")
    if type(wrap.sigmoid) is not act.Sigmoid or type(wrap.multiply) is not ew.ElementWiseMultiply:
        raise Unsupported("a SiLU of wrapped ops")
    if ctx.n_in != 1 or ctx.n_out != 1 or ctx.in_dtype(0) != _F32 or ctx.out_dtype(0) != _F32 \
            or ctx.in_shape(0) != ctx.out_shape(0):
        raise Unsupported("a SiLU that is not float32 of one shape")
    ctx.emit("qe_k_silu_f32", (ctx.input_f32(0), ctx.output_f32(0)), (_n(ctx.in_shape(0)), int(wrap.x_first)))


def _reciprocal_divide(ctx) -> None:
    """float16.ReciprocalDivide: r = r(b) (its float16 reciprocal), then a * r in float32."""
    if ctx.n_in != 2 or ctx.n_out != 1:
        raise Unsupported("a divide without two inputs and one output")
    _real_mode(ctx, (0, 1))
    for i in (0, 1):
        if ctx.in_dtype(i) != np.dtype(np.float32) and ctx.in_conv(i) is None:
            raise Unsupported("a float16-math divide of non-float32 values")
    a, b = ctx.input_f32(0), ctx.input_f32(1)
    nb = _n(ctx.in_shape(1))
    r = ctx.scratch(4 * nb)
    ctx.emit("qe_k_unary_f32", (b, r), (UNARY["htp_recip"], nb),
             unary_params("htp_recip", (float(np.float32(float16.RECIPROCAL_BIAS)),)))
    out = ctx.output_f32(0)
    dims, sa, sb = broadcast_layout(ctx.in_shape(0), ctx.in_shape(1), ctx.out_shape(0))
    ctx.emit("qe_k_binary_f32", (a, r, out), [BINARY["mul"], len(dims), *dims, *sa, *sb])


@lowers("Prelu")
def prelu(ctx) -> None:
    if type(ctx.impl) is not act.Prelu:
        raise Unsupported(f"{type(ctx.impl).__name__} (a wrapper of the op)")
    if tuple(ctx.in_shape(0)) != tuple(ctx.out_shape(0)):
        raise Unsupported("a Prelu whose output is not in[0]'s shape")
    _emit_binary(ctx, "prelu")


# -- 8/16-bit fixed point in and out: no float32 temporaries --------------------------------------

_CODES = {np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16)}
# Requantize rounding modes qe_k_qbinary reproduces (its per-tensor float32 path)
_QB_MODES = {"half_even": 0, "half_up": 1, "half_away_from_zero": 2}
_QB_OPS = {"add", "sub", "mul", "div", "max", "min"}


def _dequantizes_codes(conv, dtype: np.dtype) -> bool:
    """``conv`` is a per-tensor Dequantizer of 8/16-bit codes stored as ``dtype``."""
    return type(conv) is Dequantizer and conv.scale is not None and conv.offset is not None \
        and dtype in _CODES


def _requantizes_codes(conv, dtype: np.dtype) -> bool:
    """``conv`` is a per-tensor Requantize to 8/16-bit codes stored as ``dtype``, on its float32
    path (not the float16 or exact-product rounding of Quantize)."""
    return type(conv) is Requantize and conv.inv is not None and conv.offset is not None \
        and dtype in _CODES and np.dtype(conv.np_dtype) == dtype


def _code_table(ctx) -> bool:
    """A per-element unary op on 8/16-bit codes (in and out) as one table lookup (qe_k_lut):
    the table is the plan's own step -- its Dequantizer, the op, its Requantize -- run on every
    input code at finalize, so every entry is the plan's result for that code.  False (emits
    nothing) when the step is not of that form."""
    if ctx.n_in != 1 or ctx.n_out != 1 or ctx.impl is not ctx.step.impl:
        return False
    in_dt, out_dt = ctx.in_dtype(0), ctx.out_dtype(0)
    if not (_dequantizes_codes(ctx.in_conv(0), in_dt) and _requantizes_codes(ctx.out_conv(0), out_dt)):
        return False
    if ctx.static(0) is not None:
        return False
    bits = np.arange(1 << (8 * in_dt.itemsize), dtype=np.uint8 if in_dt.itemsize == 1 else np.uint16)
    impl = ctx.impl
    with np.errstate(all="ignore"):
        out = impl._run(ctx.in_conv(0)(bits.view(in_dt)), **impl.param_values)
        out = out[0] if isinstance(out, tuple) else out
        table = np.ascontiguousarray(ctx.out_conv(0)(out), dtype=out_dt)
    if table.shape != bits.shape:
        return False
    ctx.emit("qe_k_lut", (_raw_codes(ctx, 0), ctx.const(table), _raw_out(ctx, 0)),
             (_n(ctx.in_shape(0)), in_dt.itemsize, out_dt.itemsize))
    return True


def _raw_codes(ctx, i: int) -> int:
    """Buffer id of input i's codes as stored (the step's Dequantizer is done by the kernel)."""
    return ctx.b.slot_buffer(ctx.step.reads[i], ctx.index)


def _raw_out(ctx, k: int) -> int:
    """Buffer id of output k's codes (the step's Requantize is done by the kernel)."""
    return ctx.b.slot_buffer(ctx.step.writes[k], ctx.index)


def _fixed_point_binary(ctx, op: str, dims, sa, sb) -> bool:
    """add / sub / mul / div / max / min whose output is 8/16-bit codes, each input codes (its
    per-tensor Dequantizer) or float32 values, as one qe_k_qbinary step; False (emits nothing)
    when the step is not of that form."""
    if op not in _QB_OPS or ctx.impl is not ctx.step.impl:
        return False
    out_dt = ctx.out_dtype(0)
    conv = ctx.out_conv(0)
    if not _requantizes_codes(conv, out_dt) or conv.mode not in _QB_MODES:
        return False
    kinds, prm, bufs = [], [], []
    for i in (0, 1):
        dt, ic = ctx.in_dtype(i), ctx.in_conv(i)
        if ic is None and dt == np.dtype(np.float32):
            kinds.append(type_code(dt))
            prm += [1.0, 0.0]
            bufs.append(ctx.input_raw(i))
        elif _dequantizes_codes(ic, dt):
            kinds.append(type_code(dt))
            prm += [float(ic.scale), float(ic.offset)]
            bufs.append(_raw_codes(ctx, i))
        else:
            return False
    ctx.emit("qe_k_qbinary", (*bufs, _raw_out(ctx, 0)),
             [BINARY[op], *kinds, type_code(out_dt), _QB_MODES[conv.mode], int(conv.lo), int(conv.hi),
              len(dims), *dims, *sa, *sb],
             [*prm, float(conv.inv), float(conv.offset)])
    return True


def _emit_unary(ctx, op: str, prm=()) -> None:
    if ctx.n_in < 1 or ctx.n_out != 1:
        raise Unsupported("a unary op with several outputs")
    int_dtype = _int_class(ctx, (0,))
    if int_dtype is not None and op in ("neg", "abs", "sign"):
        if ctx.out_dtype(0) != int_dtype or ctx.in_shape(0) != ctx.out_shape(0):
            raise Unsupported(f"an integer {op} of another type or shape")
        ctx.emit("qe_k_unary_i32", (ctx.input_raw(0), ctx.output_raw(0)),
                 (UNARY[op], int(int_dtype == _I32), _n(ctx.in_shape(0))))
        return
    if op in _SHARED and not _fast.enabled():
        raise Unsupported("QNNEMU_KERNELS=reference: the op computes with numpy")
    _real_mode(ctx, (0,))
    if ctx.in_shape(0) != ctx.out_shape(0):
        raise Unsupported("an output shape other than the input's")
    if _code_table(ctx):
        return
    x = _input(ctx, 0)
    y, finish = _output(ctx, 0)
    ctx.emit("qe_k_unary_f32", (x, y), (UNARY[op], _n(ctx.in_shape(0))), unary_params(op, prm))
    finish()


@lowers("ElementWiseNeg", "ElementWiseAbs", "ElementWiseSquareRoot", "ElementWiseFloor",
        "ElementWiseCeil", "ElementWiseRound", "ElementWiseRsqrt", "ElementWiseSign",
        "ElementWiseExp", "ElementWiseLog", "ElementWiseSin", "ElementWiseCos", "ElementWiseAsin",
        "ElementWiseAtan", "ElementWiseUnary")
def unary_elementwise(ctx) -> None:
    _emit_unary(ctx, _kernel_op(ctx.impl, ew.ElementWiseUnary, _UNARY_EW_OF, "unary"))


def _kernel_op(impl, generic: type, table: dict, kind: str) -> str:
    """The kernel operation of ``impl``: an op class of ``table``, or the generic op
    (ElementWiseBinary / ElementWiseUnary) resolved to the class it runs; else Unsupported."""
    cls = type(impl)
    if cls is generic:
        cls = impl._impl
    elif cls not in table:
        raise Unsupported(f"{type(impl).__name__} (a wrapper of the op)")
    op = table.get(cls)
    if op is None:
        raise Unsupported(f"{kind} operation {cls.__name__}")
    return op


def _f32(v) -> float:
    """A parameter as the op uses it in float32 arithmetic (x.dtype.type(v))."""
    return float(np.float32(v))


def _neuron(params: dict):
    """(C op, parameters) of an ElementWiseNeuron, defaults as activation._neuron_fn."""
    n = act._N
    op = params["operation"]

    def get(name, default):
        return default if params.get(name) is None else params[name]

    if op == n["ELU"]:
        return "elu", (_f32(get("alpha", 1.0)),)
    if op == n["GELU"]:
        return "gelu", ()
    if op == n["HARD_SIGMOID"]:
        return "hard_sigmoid", (get("alpha", 0.2), get("beta", 0.5))
    if op == n["HARD_SWISH"]:
        return "hard_swish", (get("alpha", 1.0 / 6.0), get("beta", 0.5))
    if op == n["RELU"]:
        return "relu", ()
    if op == n["RELU_MIN_MAX"]:
        return "clip", (params["min_value"], params["max_value"])
    if op == n["SIGMOID"]:
        return "sigmoid", ()
    if op == n["SOFTPLUS"]:
        return "softplus", (get("beta", 1.0), get("threshold", 20.0))
    if op == n["TANH"]:
        return "tanh", ()
    raise Unsupported(f"ElementWiseNeuron operation {op}")


@lowers("Relu", "Relu1", "Relu6", "ReluMinMax", "HardSwish", "Sigmoid", "Tanh", "Elu", "Gelu",
        "Erf", "ThresholdedRelu", "ElementWiseSoftplus", "ElementWiseNeuron")
def activation(ctx) -> None:
    impl = ctx.impl
    cls = type(impl)
    p = impl.param_values if hasattr(impl, "param_values") else {}
    prm: tuple = ()
    if cls is act.Relu:
        op, prm = "relu", ()
    elif cls is act.Relu1:
        op, prm = "clip", (-1.0, 1.0)
    elif cls is act.Relu6:
        op, prm = "clip", (0.0, 6.0)
    elif cls is act.ReluMinMax:
        op, prm = "clip", (p["min_value"], p["max_value"])
    elif cls is act.HardSwish:
        op, prm = "hard_swish", (1.0 / 6.0, 0.5)
    elif cls is act.Sigmoid:
        if _silu(ctx) or _sigmoid_f16(ctx):
            return
        op, prm = "sigmoid", ()
    elif cls is act.Tanh:
        op, prm = "tanh", ()
    elif cls is act.Elu:
        op, prm = "elu", (_f32(p["alpha"]),)
    elif cls is act.Gelu:
        op, prm = "gelu", ()
    elif cls is act.Erf:
        op, prm = "erf", ()
    elif cls is act.ThresholdedRelu:
        op, prm = "threshold", (p["alpha"],)
    elif cls is act.ElementWiseSoftplus:
        op, prm = "softplus", (p["beta"], p["threshold"])
    elif cls is act.ElementWiseNeuron:
        op, prm = _neuron(p)
    else:
        raise Unsupported(f"{cls.__name__} (a wrapper of the op)")
    _emit_unary(ctx, op, prm)


# builder -> indices of the Multiply steps whose product a SiLU step computed (``_silu``)
_silu_products: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_F32 = np.dtype(np.float32)


def _identity(conv) -> bool:
    """No output converter, or a cast to float32 (of a float32 value: no change)."""
    return conv is None or _cast_target(conv) == _F32


def _sigmoid_f16(ctx) -> bool:
    """A float32 Sigmoid in float16 math (its result rounded to float16): one qe_k_sigmoid_f16
    step, a table lookup of the rounded result for inputs that are float16 values."""
    rounding = ctx.fused_rounding(0) if ctx.n_out == 1 and ctx.n_in == 1 else 0
    if not rounding or not _fast.enabled() or ctx.in_shape(0) != ctx.out_shape(0):
        return False
    x = _input(ctx, 0)
    y, _ = ctx.output_f32_rounding(0)
    ctx.emit("qe_k_sigmoid_f16", (x, y), (_n(ctx.in_shape(0)), int(rounding == 2)))
    return True


def _silu(ctx) -> bool:
    """A Sigmoid whose output only the next step reads, an ElementWiseMultiply of the Sigmoid's
    own input by it (SiLU, x * sigmoid(x)), all float32 without converters: one qe_k_silu_f32
    step that writes the Sigmoid's output and the Multiply's product in one pass (the same
    float32 values the two steps compute); the Multiply's step then emits a qe_k_nop.  In
    float16 math (both steps rounding their results alike), one qe_k_silu_f16 step.  False
    (emits nothing) otherwise."""
    step, k = ctx.step, ctx.index
    steps = ctx.plan.steps
    if not _fast.enabled() or ctx.impl is not step.impl or k + 1 >= len(steps):
        return False
    rounding = ctx.fused_rounding(0) if len(step.writes) == 1 else 0
    if len(step.reads) != 1 or len(step.writes) != 1 or step.in_conv[0] is not None \
            or not (rounding or _identity(step.out_conv[0])):
        return False
    x, s = step.reads[0], step.writes[0]
    mul = steps[k + 1]
    if type(mul.impl) is not ew.ElementWiseMultiply or mul.node.op_type != "ElementWiseMultiply" \
            or len(mul.reads) != 2 or len(mul.writes) != 1 or sorted(mul.reads) != sorted((x, s)) \
            or x == s or any(c is not None for c in mul.in_conv) \
            or not (mul.out_conv[0] is step.out_conv[0] if rounding else _identity(mul.out_conv[0])):
        return False
    y = mul.writes[0]
    if x < 0 or ctx.b.slot_dtype(x) != _F32 or ctx.b.slot_dtype(s) != _F32 or ctx.b.slot_dtype(y) != _F32:
        return False
    shape = ctx.b.slot_shape(x)
    if ctx.b.slot_shape(s) != shape or ctx.b.slot_shape(y) != shape:
        return False
    # the Sigmoid's output is read by the Multiply alone and is no graph output
    if any(s in other.reads for j, other in enumerate(steps) if j != k + 1):
        return False
    outputs = {ctx.plan.slots.get(t.id) for t in ctx.graph.app_outputs()}
    inputs = {ctx.plan.slots.get(t.id) for t in ctx.graph.app_inputs()}
    if s in outputs or s in inputs or y in inputs:
        return False
    # y's region lives from this node on (slot_buffer extends its lifetime to node k)
    bufs = (ctx.b.slot_buffer(x, k), ctx.b.slot_buffer(s, k), ctx.b.slot_buffer(y, k))
    if rounding:
        ctx.emit("qe_k_silu_f16", bufs, (_n(shape), int(mul.reads[0] == x), int(rounding == 2)))
    else:
        ctx.emit("qe_k_silu_f32", bufs, (_n(shape), int(mul.reads[0] == x)))
    _silu_products.setdefault(ctx.b, set()).add(k + 1)
    return True


@lowers("Softmax", "LogSoftmax")
def softmax(ctx) -> None:
    impl = ctx.impl
    if type(impl) not in (act.Softmax, act.LogSoftmax) or ctx.n_out != 1:
        raise Unsupported(f"{type(impl).__name__} (a wrapper of the op)")
    if not _fast.enabled():
        raise Unsupported("QNNEMU_KERNELS=reference: the op computes with numpy")
    _real_mode(ctx, (0,))
    shape = ctx.in_shape(0)
    if not shape or shape != ctx.out_shape(0):
        raise Unsupported("a rank-0 input or an output shape other than the input's")
    axis = impl.param_values.get("axis")
    axis = len(shape) - 1 if axis is None else int(axis)
    beta = float(impl.param_values.get("beta", 1.0))
    outer, length, inner = softmax_geometry(shape, axis)
    x = _input(ctx, 0)
    y, finish = _output(ctx, 0)
    scratch = ctx.scratch(16 * max(length, 1))
    ctx.emit("qe_k_softmax_f32", (x, y, scratch),
             (outer, length, inner, int(type(impl) is act.LogSoftmax)), (beta,))
    finish()



def _static_vector(ctx, i: int, what: str):
    """Static input i as the op reads it (None when absent); Unsupported when dynamic."""
    if i >= ctx.n_in or not ctx.present(i):
        return None
    if ctx.step.reads[i] not in ctx.plan.statics:   # (ctx.static raises KeyError for these)
        raise Unsupported(f"a dynamic {what}")
    return ctx.static(i)


def _emit_norm(ctx, geometry, gamma, beta, eps: float, center: bool, scale: bool) -> None:
    if not _fast.enabled():
        raise Unsupported("QNNEMU_KERNELS=reference: the op computes with numpy")
    if ctx.n_out != 1 or ctx.in_shape(0) != ctx.out_shape(0):
        raise Unsupported("a normalization with another output shape")
    if ctx.in_dtype(0) == _F16 and ctx.in_conv(0) is None:
        raise Unsupported("a FLOAT_16 input (normalized in float64, rounded once to float16)")
    nb, ns, ng, ncg = (int(v) for v in geometry)
    g, b = _f64(gamma), _f64(beta)
    for v in (g, b):
        if v is not None and v.size != ng * ncg:
            raise Unsupported("gamma / beta of another size than the normalized channels")
    x = ctx.input_f32(0)
    y = ctx.output_f32(0)
    gbuf = ctx.const(g) if g is not None else x
    bbuf = ctx.const(b) if b is not None else x
    flags = int(center) | 2 * int(scale) | 4 * int(g is not None) | 8 * int(b is not None)
    ctx.emit("qe_k_norm_f32", (x, y, gbuf, bbuf), (nb, ns, ng, ncg, flags), (float(eps),))


@lowers("LayerNorm", "RmsNorm")
def axes_norm(ctx) -> None:
    impl = ctx.impl
    if type(impl) not in (norm.LayerNorm, norm.RmsNorm):
        raise Unsupported(f"{type(impl).__name__} (a wrapper of the op)")
    _real_mode(ctx, (0,))
    p = impl.param_values
    shape = ctx.in_shape(0)
    ax = impl._axes if impl._axes is not None else norm.check_axes(impl.op_type, p["axes"], len(shape))
    gamma = _static_vector(ctx, 1, "gamma")
    beta = impl.snapped_beta(_static_vector(ctx, 2, "beta")) if type(impl) is norm.LayerNorm else None
    layout = impl.fast_layout(shape, ax, gamma, beta)
    if layout is None:
        raise Unsupported("normalized axes other than the trailing ones")
    _emit_norm(ctx, layout[0], layout[1], layout[2], p["epsilon"], type(impl).center, True)


def _grouped_norm(ctx, op_class, geometry_param: str, center, scale) -> None:
    """InstanceNorm / GroupNorm: the op's geometry over ``geometry_param``, its static gamma and
    beta; ``center`` / ``scale`` are booleans or callables of the op's parameters."""
    impl = ctx.impl
    if type(impl) is not op_class:
        raise Unsupported(f"{type(impl).__name__} (a wrapper of the op)")
    _real_mode(ctx, (0,))
    p = impl.param_values
    gamma, beta = _static_vector(ctx, 1, "gamma"), _static_vector(ctx, 2, "beta")
    _emit_norm(ctx, impl.geometry(ctx.in_shape(0), p[geometry_param]),
               None if gamma is None else to_compute(gamma), None if beta is None else to_compute(beta),
               p["epsilon"], center(p) if callable(center) else center, scale(p) if callable(scale) else scale)


@lowers("InstanceNorm")
def instance_norm(ctx) -> None:
    _grouped_norm(ctx, norm.InstanceNorm, "region", lambda p: p["mode"] == norm.MU_SIGMA,
                  lambda p: p["normalize_variance"])


@lowers("GroupNorm")
def group_norm(ctx) -> None:
    _grouped_norm(ctx, norm.GroupNorm, "group", True, True)


@lowers("Batchnorm")
def batchnorm(ctx) -> None:
    """x * weight (+ bias): float32 products and sums as the op computes them."""
    if type(ctx.impl) is not norm.Batchnorm or ctx.n_out != 1:
        raise Unsupported(f"{type(ctx.impl).__name__} (a wrapper of the op)")
    _real_mode(ctx, (0,))
    shape = ctx.out_shape(0)
    if ctx.in_shape(0) != shape:
        raise Unsupported("an output shape other than the input's")
    has_bias = ctx.n_in > 2 and ctx.present(2)
    x, w = _input(ctx, 0), _input(ctx, 1)
    bias = _input(ctx, 2) if has_bias else None
    out, finish = _output(ctx, 0)
    dims, sa, sb = broadcast_layout(shape, ctx.in_shape(1), shape)
    ctx.emit("qe_k_binary_f32", (x, w, out), [BINARY["mul"], len(dims), *dims, *sa, *sb])
    if bias is not None:
        dims, sa, sb = broadcast_layout(shape, ctx.in_shape(2), shape)
        ctx.emit("qe_k_binary_f32", (out, bias, out), [BINARY["add"], len(dims), *dims, *sa, *sb])
    finish()


__all__ = ["broadcast_layout"]
