"""Type conversions (QnnOpDef.h): Cast, Convert, Quantize, Dequantize.

These four ops see their tensors raw (``handles_quant = True``, see ops/base.py): fixed-point
arrays arrive as their storage integers and ``_run`` reads the encodings from
``self.input_specs[i].quant`` / ``self.output_specs[i].quant``.  The output data type is the
declared output tensor's (``declared_outputs``); without it (a bare ``check``) only Dequantize
can infer one (FLOAT_32).

Encodings and arithmetic are the execution plan's (qnnemu/spec/quant.py, core/plan.py), so a
conversion op computes exactly what the plan does at any other op's boundary: dequantizing is
real = scale * (q + offset) (per tensor, per axis or blockwise); quantizing is
clamp(round(real * (1 / scale)) - offset) in the storage type's range (narrowed to
``bitwidth`` when the encoding gives a smaller one).  Rounding, as the vendor's libQnnHtp.so
2.51 computes it (docs/numerics.md "Convert and Cast"; tests/test_convert_rounding.py):
Quantize and float32 -> fixed-point Convert as ``rounding_for("Quantize")``; fixed -> fixed
Convert to a code as wide or wider half up; Cast to fixed point half to even after the offset
(8-bit unsigned Cast outputs and inputs are plain bytes: the encoding is ignored).  nan
quantizes to the zero point (q = -offset).
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from ..spec import dtypes
from .base import Op, ParamSpec, QuantSpec, TensorSpec
from .elementwise import rule_error

_F32, _F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
_BOOL = Q.QNN_DATATYPE_BOOL_8
_FLOATS = (_F32, _F16)
_FIXED = dtypes.FIXED_POINT_TYPES
_INTS = frozenset(dtypes.INT_TYPES)
_FIXED_4 = (Q.QNN_DATATYPE_SFIXED_POINT_4, Q.QNN_DATATYPE_UFIXED_POINT_4)
_U8_FIXED, _S8_FIXED = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8


def int_range(dtype: int) -> tuple[int, int]:
    """[lo, hi] of a plain INT_* / UINT_* type."""
    bits = 8 * dtypes.itemsize(dtype)
    if dtypes.name(dtype).startswith("QNN_DATATYPE_INT_"):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _float_to_int(x: np.ndarray, dtype: int) -> np.ndarray:
    """Truncation toward zero, saturating to the integer type's range; nan gives 0."""
    lo, hi = int_range(dtype)
    x = np.trunc(np.asarray(x, dtype=np.float64))
    if dtypes.itemsize(dtype) == 8:  # the largest float64 below 2**63 / 2**64
        hi = float(np.nextafter(float(hi) + 1.0, 0.0))
    y = np.clip(np.nan_to_num(x, nan=0.0, posinf=hi, neginf=lo), lo, hi)
    return y.astype(dtypes.numpy_dtype(dtype))


def _requantize(y: np.ndarray, quant: QuantSpec, dtype: int, mode: str) -> np.ndarray:
    """The plan's requantization with rounding ``mode`` (32-bit codes in float64)."""
    from ..spec.quant import Requantize
    return Requantize(quant, dtype, mode)(y)


def convert_rounding(src: int, dst: int) -> str:
    """The rounding of a Convert from ``src`` to fixed-point ``dst``, as the vendor's backend
    computes it (libQnnHtp.so 2.51): float32 input like its Quantize; fixed point into a code as
    wide or wider ties up (u8 -> u8, u8 -> u16, u16 -> u16, s8 -> s8, s16 -> s16); otherwise
    (float16 input, 16 -> 8 bits) ties to even -- docs/numerics.md lists where the vendor's
    values differ from that."""
    from ..spec.quant import DEFAULT_ROUNDING, rounding_for
    if src == _F32:
        return rounding_for("Quantize")
    if src in _FIXED and dtypes.itemsize(dst) >= dtypes.itemsize(src):
        return "half_up"
    return DEFAULT_ROUNDING


_I32, _U32, _I8 = Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_8
_U16_FIXED = Q.QNN_DATATYPE_UFIXED_POINT_16


def _cast_fixed_int(cast: Cast, x: np.ndarray, src: int, dst: int) -> np.ndarray | None:
    """Cast between fixed point and plain integers for the pairs measured on the vendor's
    backend (libQnnHtp.so 2.51), else None (the real-value path).

    UFIXED_POINT_8 -> INT_32 / UINT_32: the code; -> INT_8: the code - 128; SFIXED_POINT_8 ->
    INT_8: the code; other fixed point -> INT_32: the real value rounded to nearest, ties to
    even.  INT_32 -> UFIXED_POINT_8 / UFIXED_POINT_16: the value saturated, the encoding ignored;
    INT_32 -> SFIXED_POINT_8: as from a float (``_cast_float_to_fixed``)."""
    if src == _U8_FIXED and dst in (_I32, _U32):
        return x.astype(dtypes.numpy_dtype(dst))
    if src == _U8_FIXED and dst == _I8:
        return (x.astype(np.int16) - 128).astype(np.int8)
    if src == _S8_FIXED and dst == _I8:
        return x.astype(np.int8, copy=True)
    if src in _FIXED and dst == _I32:
        return _float_to_int(np.rint(cast._to_real(x)), dst)
    if src == _I32 and dst in (_U8_FIXED, _U16_FIXED):
        lo, hi = (0, 255) if dst == _U8_FIXED else (0, 65535)
        return np.clip(x.astype(np.int64), lo, hi).astype(dtypes.numpy_dtype(dst))
    if src == _I32 and dst == _S8_FIXED:
        return _cast_float_to_fixed(x.astype(np.float32), _F32, dst,
                                    cast._quant(cast.output_specs, "outputTensors"))
    return None


def _cast_float_to_fixed(x: np.ndarray, src: int, dst: int, quant: QuantSpec) -> np.ndarray | None:
    """Cast float -> fixed point as the vendor's backend computes it (libQnnHtp.so 2.51), or None
    for an encoding it was not measured with (per-axis / blockwise: the requantization path).

    UFIXED_POINT_8 is a plain byte: trunc(x) saturated to [0, 255], the encoding ignored.  From
    FLOAT_16, SFIXED_POINT_8 is that byte minus 128.  Otherwise q = rint(x * float32(1 / scale)
    - offset), ties to even *after* the offset (an odd offset moves the ties), saturated."""
    from ..spec.quant import code_range, reciprocal_f32
    if dst == _U8_FIXED or (dst == _S8_FIXED and src == _F16):
        byte = _float_to_int(x, Q.QNN_DATATYPE_UINT_8)
        if dst == _U8_FIXED:
            return byte
        return (byte.astype(np.int16) - 128).astype(np.int8)
    if quant.axis is not None or quant.block_scales is not None:
        return None
    lo, hi = code_range(dst, quant.bitwidth)
    scaled = np.multiply(np.asarray(x, np.float32), reciprocal_f32(quant.scale), dtype=np.float32)
    y = np.rint(np.nan_to_num(scaled.astype(np.float64), nan=0.0) - float(quant.offset))
    return np.clip(y, lo, hi).astype(dtypes.numpy_dtype(dst))


# ---- checks -----------------------------------------------------------------------------------
def _check_axis_quant(op: str, where: str, spec: TensorSpec) -> None:
    q = spec.quant
    if q is None or q.axis is None:
        return
    n = np.asarray(q.scale).size
    if not 0 <= q.axis < max(spec.rank, 1) or spec.shape[q.axis] != n or \
            np.asarray(q.offset).size != n:
        raise rule_error(op, "quant-axis", f"{where}.quantizeParams",
                         f"per-axis encoding on axis {q.axis} has {n} scales and "
                         f"{np.asarray(q.offset).size} offsets; dimensions "
                         f"{list(spec.shape)} need one per index of that axis")


def _check_in(op: str, spec: TensorSpec, allowed, what: str) -> None:
    d = spec.dtype
    if d not in allowed:
        raise rule_error(op, "dtype", "inputTensors[0].dataType",
                         f"{op} input must be {what}; got {dtypes.name(d)}", unsupported=True)
    if d in _FIXED:
        if spec.quant is None:
            raise rule_error(op, "quant-missing", "inputTensors[0].quantizeParams",
                             f"{op} input is {dtypes.name(d)} without quantization parameters")
        _check_axis_quant(op, "inputTensors[0]", spec)


def _declared(op: str, inputs: list[TensorSpec], declared_outputs, allowed, what: str,
              default: int | None = None) -> list[TensorSpec]:
    """The output spec: the input's shape, the declared output's data type and encoding."""
    if declared_outputs:
        out = declared_outputs[0]
        dtype, quant = out.dtype, out.quant
    elif default is not None:
        dtype, quant = default, None
    else:
        raise rule_error(op, "output-unknown", "outputTensors[0].dataType",
                         f"{op} takes its output data type from the declared output tensor, "
                         f"and none was given")
    if dtype not in allowed:
        raise rule_error(op, "output-dtype", "outputTensors[0].dataType",
                         f"{op} output must be {what}; got {dtypes.name(dtype)}",
                         unsupported=True)
    spec = TensorSpec(tuple(inputs[0].shape), dtype, quant if dtype in _FIXED else None)
    if dtype in _FIXED:
        _check_axis_quant(op, "outputTensors[0]", spec)
    return [spec]


class _Conversion(Op, register=False):
    inputs = ("in[0]",)
    handles_quant = True
    # spec.quant (the plan's quantizer) is imported on first use, as everywhere in ops.

    def __init__(self, params, inputs=None, outputs=None):
        # The node's data types as declared: a plain integer tensor computed as fixed point
        # with scale 1 (ops/base.py FixedView) gets the view's specs in input_specs/output_specs.
        self.declared_dtypes = ([s.dtype for s in inputs or [] if s is not None],
                                [s.dtype for s in outputs or [] if s is not None])
        super().__init__(params, inputs, outputs)

    def _plain_pair(self) -> tuple[int, int] | None:
        """(input, output) data types when both are plain integers / BOOL_8, else None."""
        ins, outs = self.declared_dtypes
        if ins and outs and ins[0] in _INTS | {_BOOL} and outs[0] in _INTS | {_BOOL}:
            return ins[0], outs[0]
        return None

    def _quant(self, specs, where: str) -> QuantSpec:
        """The encoding of input/output 0 (``where``: "inputTensors" or "outputTensors")."""
        spec = specs[0] if specs else None
        if spec is None or spec.quant is None:
            raise rule_error(self.op_type, "quant-missing", f"{where}[0].quantizeParams",
                             f"{self.op_type}: {where}[0] is fixed point without quantization "
                             f"parameters")
        return spec.quant

    def _out_dtype(self) -> int:
        return self.output_specs[0].dtype if self.output_specs else _F32

    def _in_dtype(self, x: np.ndarray) -> int:
        return self.input_specs[0].dtype if self.input_specs else dtypes.from_numpy(x.dtype)

    def _to_real(self, x: np.ndarray) -> np.ndarray:
        """The input as real numbers (float32 for fixed point, as the plan dequantizes)."""
        d = self._in_dtype(x)
        if d in _FIXED:
            from ..spec.quant import Dequantizer
            return Dequantizer(self._quant(self.input_specs, "inputTensors"))(x)
        if d == _BOOL:
            return (x != 0).astype(np.float32)
        return x

    def _from_real(self, y: np.ndarray, mode: str | None = None) -> np.ndarray:
        """``y`` in the output type; fixed point rounds per ``mode`` (default: the op's
        ``rounding_for``)."""
        d = self._out_dtype()
        if d in _FIXED:
            quant = self._quant(self.output_specs, "outputTensors")
            y = np.asarray(y)
            if y.dtype.kind != "f":
                y = y.astype(np.float64)
            y = np.nan_to_num(y, nan=0.0)  # nan -> the zero point
            if mode is None:
                from ..spec.quant import rounding_for
                mode = rounding_for(self.op_type)
            return _requantize(y, quant, d, mode)
        if d == _BOOL:
            return (y != 0).astype(np.uint8)
        if d in _INTS:
            return _float_to_int(y, d)
        with np.errstate(over="ignore"):  # float -> float16 overflows to inf, as IEEE
            return np.asarray(y).astype(dtypes.numpy_dtype(d))


_REAL_TYPES = frozenset(_FLOATS) | _FIXED
_CAST_TYPES = frozenset(_FLOATS) | _INTS | {_BOOL} | (_FIXED - set(_FIXED_4))
_CAST_WHAT = "FLOAT_32/FLOAT_16, INT/UINT 8..64, BOOL_8 or 8/16/32-bit fixed point"


class Cast(_Conversion):
    """Converts in[0] to the declared output's data type, same shape.

    float -> integer truncates toward zero and saturates to the target range (nan -> 0);
    integer -> integer wraps modulo 2^bits (C conversion); anything -> BOOL_8 is x != 0;
    BOOL_8 -> anything is 0 / 1.  The ONNX Runtime QNN EP only emits Cast between plain types
    ("HTP cast supports normal types").  Fixed point, as the vendor's backend computes it
    (libQnnHtp.so 2.51, docs/numerics.md "Convert and Cast"): float -> fixed point see
    ``_cast_float_to_fixed``; UFIXED_POINT_8 -> float is the code itself (a plain byte), and
    SFIXED_POINT_8 -> FLOAT_16 the code + 128; fixed point <-> INT_32 see ``_cast_fixed_int``;
    other fixed-point operands are converted through their real value (dequantize / quantize,
    ties to even).
    """

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        _check_in(cls.op_type, inputs[0], _CAST_TYPES, _CAST_WHAT)
        return _declared(cls.op_type, inputs, declared_outputs, _CAST_TYPES, _CAST_WHAT)

    def _run(self, x):
        src, dst = self._in_dtype(x), self._out_dtype()
        if src in _INTS and dst in _INTS:
            return x.astype(dtypes.numpy_dtype(dst))  # wraps, like the C conversion
        if src == dst and src not in _FIXED:
            return x.copy()
        declared_src = self.declared_dtypes[0][0] if self.declared_dtypes[0] else src
        declared_dst = self.declared_dtypes[1][0] if self.declared_dtypes[1] else dst
        if declared_src in _FLOATS and declared_dst in _FIXED:
            codes = _cast_float_to_fixed(x, declared_src, declared_dst,
                                         self._quant(self.output_specs, "outputTensors"))
            if codes is not None:
                return codes
        codes = _cast_fixed_int(self, x, declared_src, declared_dst)
        if codes is not None:
            return codes
        if declared_dst in _FLOATS and (declared_src == _U8_FIXED or (
                declared_src == _S8_FIXED and declared_dst == _F16)):
            byte = x.astype(np.int16) + (128 if declared_src == _S8_FIXED else 0)
            return byte.astype(dtypes.numpy_dtype(declared_dst))
        return self._from_real(self._to_real(x))


class Convert(_Conversion):
    """Re-encodes real values: fixed point <-> fixed point (requantization), float <->
    fixed point, float16 <-> float32.  The ONNX Runtime QNN EP emits it for a standalone
    DequantizeLinear -> QuantizeLinear pair.

    ``dynamic_input_data`` / ``dynamic_output_data`` (encodings supplied at execution time)
    are not emulated: True is rejected as unsupported.
    """

    params = {
        "dynamic_input_data": ParamSpec("scalar", ("bool",), default=False),
        "dynamic_output_data": ParamSpec("scalar", ("bool",), default=False),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        for name in ("dynamic_input_data", "dynamic_output_data"):
            if params[name]:
                raise rule_error(op, "dynamic", f"params[{name}]",
                                 f"{name} = true (encodings given at execution time) is not "
                                 f"supported by the emulator", unsupported=True)
        what = "FLOAT_32/FLOAT_16 or fixed point"
        _check_in(op, inputs[0], _REAL_TYPES, what)
        return _declared(op, inputs, declared_outputs, _REAL_TYPES, what)

    def _run(self, x, **params):
        mode = convert_rounding(self._in_dtype(x), self._out_dtype())
        return self._from_real(self._to_real(x), mode)


class Quantize(_Conversion):
    """float -> fixed point with the output's encoding: q = clamp(round(x * (1 / scale)) -
    offset), ties away from zero (as the vendor's backend does, docs/numerics.md), saturated
    to the storage range (narrowed by a smaller ``bitwidth``); nan gives the zero point.

    The HTP's graph path also takes other pairs (its validation refuses them), and qnnemu
    computes them all as the re-encoding of the real value (what Convert does; plain integers
    and BOOL_8 are fixed point with scale 1, ops/base.py AS_FIXED).  Measured on libQnnHtp.so
    2.51, v73: float -> the same float type copies; plain -> plain integer copies the value,
    saturated (INT_32 <-> UINT_32: the bits); fixed point -> fixed point of another width
    requantizes -- as here.  The vendor writes the output's zero point (or 0 / 255) for fixed
    point -> 8-bit fixed point of the same width in another encoding (UFIXED_POINT_8 ->
    UFIXED_POINT_8, SFIXED_POINT_8 -> UFIXED_POINT_8), for fixed point <-> plain integer, for
    BOOL_8 -> fixed point and for UINT_8 -> INT_8 / INT_8 -> BOOL_8: values that are no
    function of the input's, so qnnemu requantizes there too (a deliberate divergence,
    docs/validation.md "Documented divergences").
    """

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        what = "FLOAT_32/FLOAT_16 or fixed point"
        _check_in(cls.op_type, inputs[0], _REAL_TYPES, what)
        return _declared(cls.op_type, inputs, declared_outputs, _REAL_TYPES, what)

    def _run(self, x):
        pair = self._plain_pair()
        if pair is not None:
            return _plain_to_plain(x, *pair)
        return self._from_real(self._to_real(x))


def _plain_to_plain(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Quantize between plain integer / BOOL_8 types as the HTP does: the bits of a type as wide
    (32/64-bit: INT_32 -> UINT_32 wraps), else the value saturated to the output's range
    (BOOL_8: 0..255, its byte)."""
    out = dtypes.numpy_dtype(dst)
    if dtypes.itemsize(src) == dtypes.itemsize(dst) >= 4:
        return np.ascontiguousarray(x).view(out).copy()
    lo, hi = (0, 255) if dst == _BOOL else int_range(dst)
    return np.clip(np.asarray(x).astype(np.int64), lo, hi).astype(out)


class Dequantize(_Conversion):
    """fixed point -> float: scale * (q + offset) with the input's encoding (per tensor or per
    axis).  Output FLOAT_32 unless declared FLOAT_16.  A float input (the HTP's graph path
    takes FLOAT_16 -> FLOAT_32 and FLOAT_32 -> FLOAT_32) is converted to the output's float
    type, as the vendor computes it (measured on libQnnHtp.so 2.51, v73)."""

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        what = "a fixed-point type, FLOAT_32 or FLOAT_16"
        _check_in(cls.op_type, inputs[0], _REAL_TYPES, what)
        return _declared(cls.op_type, inputs, declared_outputs, _FLOATS, "FLOAT_32 or FLOAT_16",
                         default=_F32)

    def _run(self, x):
        if self._in_dtype(x) in _FLOATS:
            return self._from_real(x)
        from ..spec.quant import dequantize
        quant = self._quant(self.input_specs, "inputTensors")
        return dequantize(x, quant, dtypes.numpy_dtype(self._out_dtype()))


__all__ = ["Cast", "Convert", "Quantize", "Dequantize"]
