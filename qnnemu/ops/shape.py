"""Data movement (QnnOpDef.h): Reshape, Transpose, Concat, Split, Pack, UnPack, ExpandDims,
Squeeze, StridedSlice, Pad, Tile, DepthToSpace, SpaceToDepth, ChannelShuffle, BatchToSpace,
SpaceToBatch, and the QNN 2.50 Identity.

Data types: these ops move values without computing on them, so they take any data type
(float, fixed point, INT/UINT, BOOL_8) and are ``quant_passthrough``: when the node's fixed-point
tensors share one encoding the plan hands over the integer codes and keeps the result as is
(exact); otherwise fixed-point inputs arrive dequantized.  Ops with several data inputs (Concat,
Pack) need one data type on all of them (fixed-point types may differ: they are real values).
Only Pad and SpaceToBatch create values, see below.

What the vendor's HTP backend (libQnnHtp.so, x86-64, from onnxruntime_qnn) was seen to do decided
the points the op definitions leave open; "vendor" below refers to those observations.

Axes: ``axis`` scalars are taken as UINT_32 or INT_32 (clients emit both) and must be in
[0, r-1] ([0, r] where the axis indexes the output: Pack).  A negative axis is rejected: the
vendor misreads it (zeros, no-op or a failed finalize) and ORT's QNN EP always normalizes axes.

Op notes (parameters by their QNN names):

- Identity: no parameter; out[0] = in[0] (the vendor's x86-64 libQnnHtp.so has no Identity and
  fails graphFinalize; ONNX Runtime's QNN EP lowers ONNX Identity to a Transpose with the
  identity permutation).  Fixed-point input and output with different encodings requantize.
- Reshape: no parameter; the target shape is the node's declared output (``declared_outputs``).
- Transpose ``perm`` (required).  Concat ``axis`` (default 0, as the vendor).
- Split ``axis`` and ``split_index`` (UINT_32 [K]) are required (the vendor rejects a node without
  either): the starts of the outputs along ``axis``, strictly increasing and < dim; the start 0 of
  output 0 is implicit and may also be listed (QNN >= 2.19 and the vendor accept both forms), so
  there are K + 1 outputs, or K when split_index[0] == 0.
- Pack ``axis`` (required) stacks same-shaped inputs along a new axis; UnPack ``axis``
  (required) is its inverse, one output per index of ``axis``.
- ExpandDims ``axis`` (scalar) or ``axes`` (UINT_32 [N]): positions of new size-1 dimensions in
  the output (when both are given they must agree).  Squeeze ``axes`` (optional): size-1
  dimensions to drop.  Without them both ops take the declared output shape, which must be the
  input with size-1 dimensions inserted / removed (the vendor runs both as a Reshape to the
  declared shape); Squeeze with nothing declared drops every size-1 dimension.
- StridedSlice ``ranges`` (INT_32 [rank, 3]: begin, end, stride per input dimension; a UINT_32
  tensor is read as INT_32), ``begin_mask``, ``end_mask``, ``shrink_axes`` (UINT_32 bit masks over
  the input dimensions, default 0), ``new_axes_mask`` (only 0: the vendor has no kernel for new
  axes), see ``StridedSlice``.
- Pad ``pad_amount`` (required, [rank, 2]: before/after), ``scheme`` (CONSTANT 0,
  MIRROR_SYMMETRIC 1 -- edge repeated, pads <= dim; MIRROR_REFLECT 2 -- edge not repeated, pads <
  dim; EDGE 3, not on float16/float32 inputs: the vendor fails to finalize float32 and writes
  garbage in float16), ``pad_constant_value`` (default 0).  On a fixed-point tensor the constant
  is a *code* of the output's encoding whatever its type, as the vendor does: a float rounds half
  to even and saturates to the code range (1.0 -> code 1, 300.0 -> 255), an integer is cast to
  the storage type (-3 -> 253 for 8-bit unsigned).  So the default pads with code 0, not with the
  zero point.  (ORT's QNN EP passes a dequantized FLOAT_32 value; its comment says "QNN prefers
  pad_constant_value quantized with quantization params same as in[0]".)  INT tensors: a float
  constant rounds to the nearest integer.
- Tile ``multiples`` (UINT_32 [rank], each >= 1).
- DepthToSpace / SpaceToDepth: NHWC [b, h, w, c]; ``block_size`` (UINT_32 [2]: height, width, or
  [1] for a square block); ``mode`` DCR (0, default: channel = (by * bw + bx) * c' + k) or CRD
  (1: channel = k * bh * bw + by * bw + bx), as ONNX's modes on NHWC data.
- ChannelShuffle ``num_groups`` (required), ``axis`` (default: last): channel g * (c/G) + i goes
  to position i * G + g.
- BatchToSpace ``block_size`` [2], ``crops`` [2, 2] (default 0); SpaceToBatch ``block_size`` [2],
  ``pad_amount`` [2, 2] (default 0).  NHWC; batch index (by * bw + bx) * b + n, as TF's
  batch_to_space / space_to_batch.  SpaceToBatch pads with 0, code 0 on fixed-point tensors (as
  the vendor).

Zero-sized results are rejected (QNN tensors have no zero dimension).
"""
from __future__ import annotations

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from ..spec import dtypes
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, same_spec

FIXED = dtypes.FIXED_POINT_TYPES
_AXIS = ("int", "uint")  # axis scalars: UINT_32 per most op definitions, INT_32 from some clients


# ---- helpers shared with gather.py ------------------------------------------------------------
def count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def check_axis(op: str, value: int, n: int, path: str = "params[axis]", what: str = "") -> int:
    """``value`` must be in [0, n-1]; else ``QNNEMU-<op>-axis``."""
    if not 0 <= value < n:
        neg = " (negative axes are not supported: the HTP backend misreads them)" \
            if value < 0 else ""
        raise OpCheckError(f"QNNEMU-{op}-axis", path, f"axis must be in [0, {n - 1}]{what}, got {value}{neg}")
    return value


def check_same_dtype(op: str, inputs: list[TensorSpec], idxs) -> None:
    """Inputs ``idxs`` must share input ``idxs[0]``'s data type; fixed-point types may mix
    (they all reach the op as real values unless they share one encoding)."""
    first = inputs[idxs[0]]
    for i in idxs[1:]:
        d = inputs[i].dtype
        if d != first.dtype and not (d in FIXED and first.dtype in FIXED):
            raise OpCheckError(f"QNNEMU-{op}-dtype-mismatch", f"inputTensors[{i}].dataType",
                               f"{op} inputs must share one data type: input {idxs[0]} is "
                               f"{dtypes.name(first.dtype)}, input {i} is {dtypes.name(d)}")


def uint_values(op: str, name: str, value, lo: int = 0) -> list[int]:
    """A UINT tensor parameter as ints, each >= ``lo``; rule ``QNNEMU-<op>-<name>``."""
    v = [int(x) for x in np.asarray(value).reshape(-1)]
    if any(x < lo for x in v):
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"every {name} value must be >= {lo}, got {v}")
    return v


def is_codes(spec: TensorSpec, arr: np.ndarray) -> bool:
    """True when a fixed-point tensor reaches the op as its integer codes (passthrough)."""
    return spec.dtype in FIXED and arr.dtype.kind in "iu"


def _code(value, dtype: int, bitwidth: int | None):
    """``value`` as a code of fixed-point ``dtype``, as the HTP reads pad constants: a float
    rounds half to even and saturates, an integer is cast to the storage type."""
    from ..spec.quant import code_range
    if isinstance(value, float):
        lo, hi = code_range(dtype, bitwidth)
        return int(min(max(np.rint(value), lo), hi))
    return int(np.asarray(value, np.int64).astype(dtypes.numpy_dtype(dtype)))


def fill_value(spec: TensorSpec, out: TensorSpec | None, arr: np.ndarray, value) -> np.ndarray:
    """The element to write for constant ``value`` into an output like ``arr`` (the array of
    input ``spec``; ``out``: the output's spec when known).

    On fixed-point tensors ``value`` is a code of the output's encoding (see the module notes);
    when the op runs on real values that code is dequantized (per-axis encodings give an array
    along their axis).  Returns an array broadcastable against the output.
    """
    from ..spec.quant import scale_offset_arrays
    fixed = out if out is not None and out.dtype in FIXED and out.quant is not None else \
        spec if spec.dtype in FIXED and spec.quant is not None else None
    if arr.dtype.kind == "f":
        if fixed is None:
            return np.asarray(float(value), dtype=arr.dtype)
        q = fixed.quant
        code = _code(value, fixed.dtype, q.bitwidth)
        shape = [1] * arr.ndim
        if q.axis is not None:
            shape[q.axis] = len(np.asarray(q.scale).reshape(-1))
        scale, offset = scale_offset_arrays(q, tuple(shape), np.float64)
        return np.broadcast_to(scale * (code + offset), shape).astype(arr.dtype)
    if fixed is not None:
        return np.asarray(_code(value, fixed.dtype, fixed.quant.bitwidth), dtype=arr.dtype)
    if spec.dtype in dtypes.BOOL_TYPES:
        return np.asarray(1 if value else 0, dtype=arr.dtype)
    if spec.dtype == Q.QNN_DATATYPE_BFLOAT_16:
        bits = int(np.asarray(float(value), np.float32).view(np.uint32))
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        return np.asarray(bits, dtype=arr.dtype)
    if isinstance(value, float):
        info = np.iinfo(arr.dtype)
        return np.asarray(min(max(int(np.rint(value)), info.min), info.max), dtype=arr.dtype)
    return np.asarray(np.asarray(value, np.int64).astype(arr.dtype))


class _Move(Op, register=False):
    """Base of the data-movement ops: any data type, integer codes passed through."""

    inputs = ("in[0]",)
    quant_passthrough = True

    def _specs(self, x: np.ndarray) -> tuple[TensorSpec, TensorSpec | None]:
        """(in[0]'s spec, out[0]'s spec or None) -- specs built from ``x`` when run bare."""
        spec = self.input_specs[0] if self.input_specs else \
            TensorSpec(x.shape, dtypes.from_numpy(x.dtype))
        return spec, (self.output_specs[0] if self.output_specs else None)


# ---- Identity / Reshape / Transpose / Concat --------------------------------------------------
class Identity(_Move):
    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        return [same_spec(inputs[0])]

    def _run(self, x):
        return np.array(x, copy=True)


class Reshape(_Move):
    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        if not declared_outputs:
            raise OpCheckError(f"QNNEMU-{op}-output-unknown", "outputTensors[0].dimensions",
                               "Reshape takes its shape from the declared output tensor, and none was "
                               "given")
        x, want = inputs[0], tuple(declared_outputs[0].shape)
        if count(want) != count(x.shape):
            raise OpCheckError(f"QNNEMU-{op}-element-count", "outputTensors[0].dimensions",
                               f"output dimensions {list(want)} hold {count(want)} elements, input "
                               f"{list(x.shape)} holds {count(x.shape)}")
        return [same_spec(x, shape=want)]

    def _run(self, x):
        if not self.output_specs:
            raise OpCheckError("QNNEMU-Reshape-output-unknown", "outputTensors[0].dimensions",
                               "Reshape needs its output spec to run")
        return x.reshape(self.output_specs[0].shape)


class Transpose(_Move):
    params = {"perm": ParamSpec("tensor", ("uint",), shape=(None,), required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        perm = [int(v) for v in np.asarray(params["perm"]).reshape(-1)]
        if sorted(perm) != list(range(x.rank)):
            raise OpCheckError(f"QNNEMU-{cls.op_type}-perm", "params[perm]",
                               f"perm must be a permutation of 0..{x.rank - 1} (input rank {x.rank}), "
                               f"got {perm}")
        return [same_spec(x, shape=tuple(x.shape[p] for p in perm))]

    def _run(self, x, perm):
        return np.ascontiguousarray(np.transpose(x, [int(p) for p in perm]))


class Concat(_Move):
    inputs = ("in*",)
    params = {"axis": ParamSpec("scalar", _AXIS, default=0)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        first = inputs[0]
        check_same_dtype(op, inputs, list(range(len(inputs))))
        axis = check_axis(op, params["axis"], first.rank, what=f" for rank {first.rank} inputs")
        total = 0
        for i, spec in enumerate(inputs):
            if spec.rank != first.rank:
                raise OpCheckError(f"QNNEMU-{op}-input-rank", f"inputTensors[{i}].rank",
                                   f"all inputs must have input 0's rank {first.rank}, input {i} has rank "
                                   f"{spec.rank} ({list(spec.shape)})")
            if any(d != e for j, (d, e) in enumerate(zip(spec.shape, first.shape)) if j != axis):
                raise OpCheckError(f"QNNEMU-{op}-dimensions", f"inputTensors[{i}].dimensions",
                                   f"dimensions other than axis {axis} must equal input 0's "
                                   f"{list(first.shape)}, got {list(spec.shape)}")
            total += spec.shape[axis]
        shape = list(first.shape)
        shape[axis] = total
        return [same_spec(first, shape=tuple(shape))]

    def _run(self, *arrays, axis):
        return np.concatenate(arrays, axis=axis)


# ---- Split / Pack / UnPack -------------------------------------------------------------------
class Split(_Move):
    outputs = ("out*",)
    params = {
        "axis": ParamSpec("scalar", _AXIS, required=True),
        "split_index": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
    }

    @classmethod
    def starts(cls, shape, params) -> tuple[int, list[int]]:
        """(axis, start of each output along axis)."""
        op = cls.op_type
        axis = check_axis(op, params["axis"], len(shape), what=f" for rank {len(shape)} input")
        dim = shape[axis]
        v = [int(x) for x in np.asarray(params["split_index"]).reshape(-1)]
        starts = v if v and v[0] == 0 else [0, *v]
        bounds = starts + [dim]
        if any(b <= a for a, b in zip(bounds, bounds[1:])):
            raise OpCheckError(f"QNNEMU-{op}-split-index", "params[split_index]",
                               f"split_index must be strictly increasing and < {dim} (dimension {axis} of "
                               f"{list(shape)}), got {v}")
        return axis, starts

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        axis, starts = cls.starts(x.shape, params)
        ends = starts[1:] + [x.shape[axis]]
        outs = []
        for s, e in zip(starts, ends):
            shape = list(x.shape)
            shape[axis] = e - s
            outs.append(same_spec(x, shape=tuple(shape)))
        return outs

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._plan = self.starts(inputs[0].shape, params) if inputs else None

    def _run(self, x, axis, split_index):
        ax, starts = self._plan or self.starts(x.shape, {"axis": axis,
                                                         "split_index": split_index})
        return tuple(np.ascontiguousarray(p) for p in np.split(x, starts[1:], axis=ax))


class Pack(_Move):
    inputs = ("in*",)
    params = {"axis": ParamSpec("scalar", _AXIS, required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        first = inputs[0]
        check_same_dtype(op, inputs, list(range(len(inputs))))
        for i, spec in enumerate(inputs[1:], 1):
            if tuple(spec.shape) != tuple(first.shape):
                raise OpCheckError(f"QNNEMU-{op}-dimensions", f"inputTensors[{i}].dimensions",
                                   f"all inputs must have input 0's dimensions {list(first.shape)}, "
                                   f"got {list(spec.shape)}")
        axis = check_axis(op, params["axis"], first.rank + 1,
                          what=f" (output rank {first.rank + 1})")
        shape = list(first.shape)
        shape.insert(axis, len(inputs))
        return [same_spec(first, shape=tuple(shape))]

    def _run(self, *arrays, axis):
        return np.stack(arrays, axis=axis)


class UnPack(_Move):
    outputs = ("out*",)
    params = {"axis": ParamSpec("scalar", _AXIS, required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        if x.rank < 1:
            raise OpCheckError(f"QNNEMU-{cls.op_type}-input-rank", "inputTensors[0].rank",
                               "UnPack needs an input of rank >= 1, got rank 0")
        axis = check_axis(cls.op_type, params["axis"], x.rank, what=f" for rank {x.rank} input")
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
        return [same_spec(x, shape=shape) for _ in range(x.shape[axis])]

    def _run(self, x, axis):
        return tuple(np.ascontiguousarray(p) for p in np.moveaxis(x, axis, 0))


# ---- ExpandDims / Squeeze ---------------------------------------------------------------------
def _axes_list(params, name: str) -> list[int] | None:
    v = params.get(name)
    if v is None:
        return None
    return [int(v)] if np.ndim(v) == 0 else [int(a) for a in np.asarray(v).reshape(-1)]


def _drops_ones(shape: tuple, want: tuple) -> bool:
    """True when ``want`` is ``shape`` with some size-1 dimensions removed."""
    i = 0
    for w in want:
        while i < len(shape) and shape[i] != w and shape[i] == 1:
            i += 1
        if i >= len(shape) or shape[i] != w:
            return False
        i += 1
    return all(d == 1 for d in shape[i:])


class ExpandDims(_Move):
    params = {
        "axis": ParamSpec("scalar", _AXIS, default=None),
        "axes": ParamSpec("tensor", _AXIS, shape=(None,), default=None),
    }

    @classmethod
    def out_shape(cls, shape, params, declared) -> tuple[int, ...]:
        op = cls.op_type
        shape = tuple(shape)
        axis, axes = _axes_list(params, "axis"), _axes_list(params, "axes")
        if axis is not None and axes is not None and axis != axes:
            raise OpCheckError(f"QNNEMU-{op}-axes", "params[axes]",
                               f"axis {axis[0]} and axes {axes} disagree (give one of them)")
        raw, name = (axes, "axes") if axes is not None else (axis, "axis")
        if raw is None:
            if declared is None or not _drops_ones(tuple(declared), shape):
                raise OpCheckError(f"QNNEMU-{op}-axes", "params[axes]",
                                   "without 'axis'/'axes' ExpandDims needs a declared output that is the "
                                   f"input {list(shape)} with size-1 dimensions inserted, got "
                                   f"{None if declared is None else list(declared)}")
            return tuple(declared)
        n = len(shape) + len(raw)
        got = [check_axis(op, a, n, f"params[{name}]", f" (output rank {n})") for a in raw]
        if len(set(got)) != len(got):
            raise OpCheckError(f"QNNEMU-{op}-axes", f"params[{name}]", f"axes must be unique, got {raw}")
        it = iter(shape)
        return tuple(1 if i in got else next(it) for i in range(n))

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        declared = declared_outputs[0].shape if declared_outputs else None
        return [same_spec(inputs[0], shape=cls.out_shape(inputs[0].shape, params, declared))]

    def _run(self, x, axis, axes):
        declared = self.output_specs[0].shape if self.output_specs else None
        return x.reshape(self.out_shape(x.shape, {"axis": axis, "axes": axes}, declared))


class Squeeze(_Move):
    params = {"axes": ParamSpec("tensor", _AXIS, shape=(None,), default=None)}

    @classmethod
    def out_shape(cls, shape, params, declared) -> tuple[int, ...]:
        op = cls.op_type
        r = len(shape)
        raw = _axes_list(params, "axes")
        if raw is not None:
            axes = [check_axis(op, a, r, "params[axes]", f" for rank {r} input") for a in raw]
            if len(set(axes)) != len(axes):
                raise OpCheckError(f"QNNEMU-{op}-axes", "params[axes]", f"axes must be unique, got {raw}")
            bad = [a for a in axes if shape[a] != 1]
            if bad:
                raise OpCheckError(f"QNNEMU-{op}-axes", "params[axes]",
                                   f"only size-1 dimensions can be squeezed; input {list(shape)} has "
                                   f"size {[shape[a] for a in bad]} at axes {bad}")
            return tuple(d for i, d in enumerate(shape) if i not in axes)
        if declared is None:
            return tuple(d for d in shape if d != 1)
        if not _drops_ones(tuple(shape), tuple(declared)):
            raise OpCheckError(f"QNNEMU-{op}-output-shape", "outputTensors[0].dimensions",
                               f"without axes, the declared output {list(declared)} must be the input "
                               f"{list(shape)} with size-1 dimensions removed")
        return tuple(declared)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        declared = declared_outputs[0].shape if declared_outputs else None
        return [same_spec(inputs[0], shape=cls.out_shape(inputs[0].shape, params, declared))]

    def _run(self, x, axes):
        declared = self.output_specs[0].shape if self.output_specs else None
        return x.reshape(self.out_shape(x.shape, {"axes": axes}, declared))


# ---- StridedSlice ----------------------------------------------------------------------------
class StridedSlice(_Move):
    """``ranges`` row j = (begin, end, stride) of input dimension j; stride != 0.  Bit j of the
    masks refers to input dimension j:

    - shrink_axes: take the single index ``begin`` (end and stride are ignored) and drop the
      dimension;
    - begin_mask / end_mask: ignore begin / end -- the whole range in the stride's direction.

    Negative begin/end count from the end of the dimension, except end = -1 with a negative
    stride, which means "through index 0" (what ORT's QNN EP and Qualcomm's converters emit for
    a reversed range; the vendor agrees); values are then clamped to [0, dim] (stride > 0) or
    [-1, dim - 1] (stride < 0), as ONNX Slice and TF do.  ``new_axes_mask`` must be 0: the
    vendor's HTP has no kernel for it (graphFinalize fails).
    """

    params = {
        "ranges": ParamSpec("tensor", ("int", "uint"), shape=(None, 3), required=True),
        "begin_mask": ParamSpec("scalar", ("uint", "int"), default=0),
        "end_mask": ParamSpec("scalar", ("uint", "int"), default=0),
        "shrink_axes": ParamSpec("scalar", ("uint", "int"), default=0),
        "new_axes_mask": ParamSpec("scalar", ("uint", "int"), default=0),
    }

    @classmethod
    def index(cls, shape, params) -> tuple[tuple, tuple[int, ...]]:
        """(numpy index tuple, output shape)."""
        op = cls.op_type
        rank = len(shape)
        ranges = np.asarray(params["ranges"]).astype(np.int64).reshape(-1, 3)
        ranges = np.where(ranges >= 2 ** 31, ranges - 2 ** 32, ranges)  # INT_32 sent as UINT_32
        if ranges.shape[0] != rank:
            raise OpCheckError(f"QNNEMU-{op}-ranges", "params[ranges]",
                               f"ranges must have one row per input dimension ([{rank}, 3]), got "
                               f"{list(ranges.shape)}")
        if params["new_axes_mask"]:
            raise OpUnsupportedError(f"QNNEMU-{op}-new-axes", "params[new_axes_mask]",
                                     f"new_axes_mask {params['new_axes_mask']:#x}: new axes are not "
                                     f"supported by the HTP backend (add a Reshape instead)")
        masks = {k: int(params[k]) for k in ("begin_mask", "end_mask", "shrink_axes")}
        for name, m in masks.items():
            if m < 0 or m >> rank:
                raise OpCheckError(f"QNNEMU-{op}-mask", f"params[{name}]",
                                   f"{name} {m:#x} has bits beyond the input's {rank} dimensions")
        index, out = [], []
        for j, d in enumerate(shape):
            b, e, s = (int(v) for v in ranges[j])
            path = "params[ranges]"
            if s == 0:
                raise OpCheckError(f"QNNEMU-{op}-stride", path, f"stride of dimension {j} is 0 (ranges row {j} = "
                                   f"{[b, e, s]})")
            if masks["shrink_axes"] >> j & 1:
                if masks["begin_mask"] >> j & 1:
                    b = 0 if s > 0 else d - 1
                i = b + d if b < 0 else b
                if not 0 <= i < d:
                    raise OpCheckError(f"QNNEMU-{op}-shrink-index", path,
                                       f"shrink_axes keeps index {b} of dimension {j}, outside "
                                       f"[{-d}, {d - 1}]")
                index.append(i)
                continue
            if masks["begin_mask"] >> j & 1:
                b = 0 if s > 0 else d - 1
            else:
                b = b + d if b < 0 else b
                b = min(max(b, 0), d) if s > 0 else min(max(b, -1), d - 1)
            if masks["end_mask"] >> j & 1:
                e = d if s > 0 else -1
            elif s > 0:
                e = min(max(e + d if e < 0 else e, 0), d)
            else:
                e = min(max(e + d if e < -1 else e, -1), d - 1)
            n = (e - b + s - 1) // s if s > 0 else (b - e - s - 1) // (-s)
            if n <= 0:
                raise OpCheckError(f"QNNEMU-{op}-empty", path,
                                   f"dimension {j} (size {d}) slices to nothing: ranges row {j} = "
                                   f"{[int(v) for v in ranges[j]]} gives begin {b}, end {e}, stride {s}")
            index.append(slice(b, e if e >= 0 else None, s))
            out.append(n)
        return tuple(index), tuple(out)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        _, shape = cls.index(inputs[0].shape, params)
        return [same_spec(inputs[0], shape=shape)]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._index = self.index(inputs[0].shape, params) if inputs else None

    def _run(self, x, **params):
        index, shape = self._index or self.index(x.shape, params)
        return np.array(x[index]).reshape(shape)


# ---- Pad / Tile --------------------------------------------------------------------------------
PAD_CONSTANT, PAD_SYMMETRIC, PAD_REFLECT, PAD_EDGE = (
    Q.QNN_OP_PAD_SCHEME_CONSTANT, Q.QNN_OP_PAD_SCHEME_MIRROR_SYMMETRIC,
    Q.QNN_OP_PAD_SCHEME_MIRROR_REFLECT, Q.QNN_OP_PAD_SCHEME_EDGE)
_NP_MODE = {PAD_SYMMETRIC: "symmetric", PAD_REFLECT: "reflect", PAD_EDGE: "edge"}


class Pad(_Move):
    params = {
        "scheme": ParamSpec("scalar", ("uint", "int"), default=PAD_CONSTANT),
        "pad_amount": ParamSpec("tensor", ("uint", "int"), shape=(None, 2), required=True),
        "pad_constant_value": ParamSpec("scalar", ("float", "int", "uint"), default=0),
    }

    @classmethod
    def pads(cls, x: TensorSpec, params) -> list[tuple[int, int]]:
        op = cls.op_type
        scheme = params["scheme"]
        if scheme not in (PAD_CONSTANT, PAD_SYMMETRIC, PAD_REFLECT, PAD_EDGE):
            raise OpCheckError(f"QNNEMU-{op}-scheme", "params[scheme]",
                               f"scheme must be CONSTANT (0), MIRROR_SYMMETRIC (1), MIRROR_REFLECT (2) or "
                               f"EDGE (3), got {scheme}")
        amount = np.asarray(params["pad_amount"]).astype(np.int64)
        if amount.shape != (x.rank, 2) or (amount < 0).any():
            raise OpCheckError(f"QNNEMU-{op}-pad-amount", "params[pad_amount]",
                               f"pad_amount must be [{x.rank}, 2] (before, after per input dimension) of "
                               f"values >= 0, got {amount.tolist()}")
        pads = [(int(a), int(b)) for a, b in amount]
        if scheme in (PAD_REFLECT, PAD_SYMMETRIC):
            limit = 1 if scheme == PAD_REFLECT else 0
            for i, ((a, b), d) in enumerate(zip(pads, x.shape)):
                if max(a, b) > d - limit:
                    raise OpCheckError(f"QNNEMU-{op}-pad-amount", "params[pad_amount]",
                                       f"{'MIRROR_REFLECT' if limit else 'MIRROR_SYMMETRIC'} pads of "
                                       f"dimension {i} must be <= {d - limit} (size {d}), got {[a, b]}")
        if scheme == PAD_EDGE and x.dtype in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16):
            raise OpUnsupportedError(f"QNNEMU-{op}-edge-float", "params[scheme]",
                                     f"EDGE padding of {dtypes.name(x.dtype)} tensors is not supported by "
                                     f"the HTP backend (fixed-point and integer tensors are)")
        return pads

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        pads = cls.pads(x, params)
        return [same_spec(x, shape=tuple(d + a + b for d, (a, b) in zip(x.shape, pads)))]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._pads = self.pads(inputs[0], params) if inputs else None

    def _run(self, x, scheme, pad_amount, pad_constant_value):
        pads = self._pads or [(int(a), int(b)) for a, b in np.asarray(pad_amount)]
        if scheme != PAD_CONSTANT:
            return np.pad(x, pads, mode=_NP_MODE[scheme])
        out = np.empty([d + a + b for d, (a, b) in zip(x.shape, pads)], dtype=x.dtype)
        out[...] = fill_value(*self._specs(x), x, pad_constant_value)
        out[tuple(slice(a, a + d) for d, (a, _) in zip(x.shape, pads))] = x
        return out


class Tile(_Move):
    params = {"multiples": ParamSpec("tensor", ("uint",), shape=(None,), required=True)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        m = uint_values(cls.op_type, "multiples", params["multiples"], 1)
        if len(m) != x.rank:
            raise OpCheckError(f"QNNEMU-{cls.op_type}-multiples", "params[multiples]",
                               f"multiples needs one value per input dimension ({x.rank}), got {m}")
        return [same_spec(x, shape=tuple(d * k for d, k in zip(x.shape, m)))]

    def _run(self, x, multiples):
        return np.tile(x, [int(k) for k in np.asarray(multiples).reshape(-1)])


# ---- DepthToSpace / SpaceToDepth / ChannelShuffle / BatchToSpace / SpaceToBatch ------------------
MODE_DCR, MODE_CRD = Q.QNN_OP_DEPTH_TO_SPACE_MODE_DCR, Q.QNN_OP_DEPTH_TO_SPACE_MODE_CRD


def _block(op: str, params) -> tuple[int, int]:
    """(block height, block width) from ``block_size`` [2], or [1] for a square block."""
    v = uint_values(op, "block_size", params["block_size"], 1)
    if len(v) not in (1, 2):
        raise OpCheckError(f"QNNEMU-{op}-block-size", "params[block_size]",
                           f"block_size must hold [height, width] (or one value for both), got {v}")
    return v[0], v[-1]


def _mode(op: str, params) -> int:
    if params["mode"] not in (MODE_DCR, MODE_CRD):
        raise OpCheckError(f"QNNEMU-{op}-mode", "params[mode]", f"mode must be DCR (0) or CRD (1), got "
                           f"{params['mode']}")
    return params["mode"]


class _BlockMove(_Move, register=False):
    """DepthToSpace / SpaceToDepth: a rank-4 NHWC input, a [height, width] block and a mode."""
    params = {
        "block_size": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
        "mode": ParamSpec("scalar", ("uint",), default=MODE_DCR),
    }

    @classmethod
    def block_geometry(cls, inputs, params) -> tuple[tuple[int, ...], int, int]:
        """(input NHWC dimensions, block height, block width), checked."""
        x = inputs[0]
        check_rank(cls.op_type, 0, x, (4,))
        bh, bw = _block(cls.op_type, params)
        _mode(cls.op_type, params)
        return tuple(x.shape), bh, bw


class DepthToSpace(_BlockMove):
    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = inputs[0]
        (n, h, w, c), bh, bw = cls.block_geometry(inputs, params)
        if c % (bh * bw):
            raise OpCheckError(f"QNNEMU-{op}-channels", "inputTensors[0].dimensions",
                               f"channels ({c}) must be a multiple of block height x width ({bh}x{bw}); "
                               f"input {list(x.shape)}")
        return [same_spec(x, shape=(n, h * bh, w * bw, c // (bh * bw)))]

    def _run(self, x, block_size, mode):
        bh, bw = _block("DepthToSpace", {"block_size": block_size})
        n, h, w, c = x.shape
        k = c // (bh * bw)
        if mode == MODE_DCR:
            y = x.reshape(n, h, w, bh, bw, k).transpose(0, 1, 3, 2, 4, 5)
        else:
            y = x.reshape(n, h, w, k, bh, bw).transpose(0, 1, 4, 2, 5, 3)
        return np.ascontiguousarray(y).reshape(n, h * bh, w * bw, k)


class SpaceToDepth(_BlockMove):
    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = inputs[0]
        (n, h, w, c), bh, bw = cls.block_geometry(inputs, params)
        if h % bh or w % bw:
            raise OpCheckError(f"QNNEMU-{op}-spatial", "inputTensors[0].dimensions",
                               f"height and width ({h}, {w}) must be multiples of the block size "
                               f"({bh}, {bw})")
        return [same_spec(x, shape=(n, h // bh, w // bw, c * bh * bw))]

    def _run(self, x, block_size, mode):
        bh, bw = _block("SpaceToDepth", {"block_size": block_size})
        n, h, w, c = x.shape
        y = x.reshape(n, h // bh, bh, w // bw, bw, c)
        y = y.transpose(0, 1, 3, 2, 4, 5) if mode == MODE_DCR else y.transpose(0, 1, 3, 5, 2, 4)
        return np.ascontiguousarray(y).reshape(n, h // bh, w // bw, c * bh * bw)


class ChannelShuffle(_Move):
    params = {
        "num_groups": ParamSpec("scalar", ("uint",), required=True),
        "axis": ParamSpec("scalar", _AXIS, default=None),
    }

    @classmethod
    def geometry(cls, shape, params) -> tuple[int, int]:
        op = cls.op_type
        r = len(shape)
        if r < 1:
            raise OpCheckError(f"QNNEMU-{op}-input-rank", "inputTensors[0].rank", "ChannelShuffle needs rank >= 1")
        axis = r - 1 if params["axis"] is None else check_axis(op, params["axis"], r,
                                                              what=f" for rank {r} input")
        g = params["num_groups"]
        if g < 1 or shape[axis] % g:
            raise OpCheckError(f"QNNEMU-{op}-num-groups", "params[num_groups]",
                               f"num_groups must be >= 1 and divide the channels ({shape[axis]} on axis "
                               f"{axis}), got {g}")
        return axis, g

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        cls.geometry(inputs[0].shape, params)
        return [same_spec(inputs[0])]

    def _run(self, x, num_groups, axis):
        ax, g = self.geometry(x.shape, {"num_groups": num_groups, "axis": axis})
        pre, c, post = count(x.shape[:ax]), x.shape[ax], count(x.shape[ax + 1:])
        y = x.reshape(pre, g, c // g, post).transpose(0, 2, 1, 3)
        return np.ascontiguousarray(y).reshape(x.shape)


def _block_space_params(margins: str) -> dict[str, ParamSpec]:
    """block_size and a [[top, bottom], [left, right]] margin parameter (crops / pad_amount)."""
    return {
        "block_size": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
        margins: ParamSpec("tensor", ("uint",), shape=(2, 2),
                           default=lambda: np.zeros((2, 2), np.uint32)),
    }


class _BatchSpaceMove(_Move, register=False):
    """BatchToSpace / SpaceToBatch: a rank-4 NHWC input; ``geometry`` gives (block height,
    block width, crops or pads, output dimensions)."""
    margins = ""  # the name of the margin parameter

    @classmethod
    def block_and_margins(cls, params) -> tuple[int, int, np.ndarray]:
        bh, bw = _block(cls.op_type, params)
        return bh, bw, np.asarray(params[cls.margins]).astype(np.int64)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        check_rank(cls.op_type, 0, inputs[0], (4,))
        return [same_spec(inputs[0], shape=cls.geometry(inputs[0].shape, params)[3])]


class BatchToSpace(_BatchSpaceMove):
    margins = "crops"
    params = _block_space_params(margins)

    @classmethod
    def geometry(cls, shape, params):
        op = cls.op_type
        bh, bw, crops = cls.block_and_margins(params)
        n, h, w, c = shape
        if n % (bh * bw):
            raise OpCheckError(f"QNNEMU-{op}-batch", "inputTensors[0].dimensions",
                               f"batch ({n}) must be a multiple of block height x width ({bh}x{bw})")
        oh = h * bh - crops[0, 0] - crops[0, 1]
        ow = w * bw - crops[1, 0] - crops[1, 1]
        if (crops < 0).any() or oh < 1 or ow < 1:
            raise OpCheckError(f"QNNEMU-{op}-crops", "params[crops]",
                               f"crops {crops.tolist()} leave an output of {oh}x{ow} from "
                               f"{h * bh}x{w * bw}")
        return bh, bw, crops, (n // (bh * bw), int(oh), int(ow), c)

    def _run(self, x, block_size, crops):
        bh, bw, cr, (b, oh, ow, c) = self.geometry(x.shape, {"block_size": block_size,
                                                             "crops": crops})
        n, h, w, _ = x.shape
        y = x.reshape(bh, bw, b, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(b, h * bh, w * bw, c)
        return np.ascontiguousarray(y[:, cr[0, 0]:cr[0, 0] + oh, cr[1, 0]:cr[1, 0] + ow, :])


class SpaceToBatch(_BatchSpaceMove):
    margins = "pad_amount"
    params = _block_space_params(margins)

    @classmethod
    def geometry(cls, shape, params):
        op = cls.op_type
        bh, bw, pads = cls.block_and_margins(params)
        n, h, w, c = shape
        ph, pw = h + pads[0].sum(), w + pads[1].sum()
        if (pads < 0).any() or ph % bh or pw % bw:
            raise OpCheckError(f"QNNEMU-{op}-pad-amount", "params[pad_amount]",
                               f"padded height and width ({ph}, {pw}; pad_amount {pads.tolist()}) must be "
                               f"multiples of the block size ({bh}, {bw})")
        return bh, bw, pads, (n * bh * bw, int(ph // bh), int(pw // bw), c)

    def _run(self, x, block_size, pad_amount):
        bh, bw, pads, (_, oh, ow, c) = self.geometry(x.shape, {"block_size": block_size,
                                                               "pad_amount": pad_amount})
        n, h, w, _ = x.shape
        if pads.any():
            xp = np.empty((n, oh * bh, ow * bw, c), dtype=x.dtype)
            xp[...] = fill_value(*self._specs(x), x, 0)
            xp[:, pads[0, 0]:pads[0, 0] + h, pads[1, 0]:pads[1, 0] + w, :] = x
        else:
            xp = x
        y = xp.reshape(n, oh, bh, ow, bw, c).transpose(2, 4, 0, 1, 3, 5)
        return np.ascontiguousarray(y).reshape(n * bh * bw, oh, ow, c)


__all__ = ["Identity", "Reshape", "Transpose", "Concat", "Split", "Pack", "UnPack", "ExpandDims", "Squeeze",
           "StridedSlice", "Pad", "Tile", "DepthToSpace", "SpaceToDepth", "ChannelShuffle",
           "BatchToSpace", "SpaceToBatch"]
