"""C lowering of ops that had none (issue 13, "zero Python fallback steps"): Cast between plain
integer, BOOL_8 and float types (QNN op definition "Cast"; qnnemu/ops/cast.py),
ElementWiseSelect, the BOOL_8 logic ops ElementWiseAnd / ElementWiseOr / ElementWiseXor /
ElementWiseNot (qnnemu/ops/elementwise.py), Argmax / Argmin, CumulativeSum and TopK
(qnnemu/ops/reduce.py).  Kernels: csrc/eng_misc.c (docs/engine-misc.md); the recurrent cells Lstm
and Gru are the recurrent family's (lower_rnn.py, docs/engine-rnn.md).

Cast, Select, the logic ops, Argmax/Argmin and TopK reproduce the numpy code of their ops on
the values the op receives (integer arithmetic, copies, comparisons: nothing to round);
CumulativeSum repeats numpy's float64 running sum in its order.  Anything else (fixed-point
Cast, the 8-bit code logic path, 64-bit integer CumulativeSum / TopK, wrapped ops) raises
Unsupported.
"""
from __future__ import annotations

import functools

import numpy as np

from ...headers import Q
from ...ops import (
    cast as cast_ops,
    elementwise as ew_ops,
    reduce as reduce_ops,
)
from ...ops.base import FixedView, plain_range
from ...spec import dtypes
from .lowering import F32, Unsupported, lowers, type_code

MAX_RANK = 8                       # csrc/eng_misc.c MISC_MAX_RANK
_BOOL = Q.QNN_DATATYPE_BOOL_8
_FLOATS = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16)
_INTS = frozenset(dtypes.INT_TYPES)
_F16 = np.dtype(np.float16)
_DUMMY = np.zeros(1, np.float32)


def _n(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _broadcast(out_shape, in_shapes) -> tuple[list[int], list[list[int]]]:
    """(dims, per-input element strides) walking ``out_shape`` in order, inputs broadcast
    numpy-style (stride 0 along broadcast dims); size-1 dims dropped, neighbours that step
    through every operand as one merged."""
    r = len(out_shape)
    strides = []
    for s in in_shapes:
        s = (1,) * (r - len(s)) + tuple(s)
        st, acc = [0] * r, 1
        for d in range(r - 1, -1, -1):
            st[d] = 0 if s[d] == 1 and out_shape[d] != 1 else acc
            acc *= s[d]
        strides.append(st)
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in in_shapes]
    for d in range(r):
        if out_shape[d] == 1:
            continue
        if dims and all(m[-1] == st[d] * out_shape[d] for m, st in zip(merged, strides)):
            dims[-1] *= out_shape[d]
            for m, st in zip(merged, strides):
                m[-1] = st[d]
            continue
        dims.append(int(out_shape[d]))
        for m, st in zip(merged, strides):
            m.append(st[d])
    if not dims:
        return [1], [[0] for _ in in_shapes]
    if len(dims) > MAX_RANK:
        raise Unsupported(f"a broadcast of rank {len(dims)} after merging")
    return dims, merged


def _received(ctx, i: int) -> tuple[int, np.dtype]:
    """(buffer, dtype) of input ``i`` as the Python op receives it."""
    if ctx.in_conv(i) is None:
        return ctx.input_raw(i), ctx.in_dtype(i)
    return ctx.input_f32(i), F32


def _result(ctx, k: int, dtype: np.dtype) -> int:
    """The buffer output ``k`` is written to when the op returns an array of ``dtype``."""
    if ctx.out_conv(k) is None or dtype != F32:
        if dtype != ctx.out_dtype(k):
            raise Unsupported(f"output {k}: the op returns {dtype}, the slot stores {ctx.out_dtype(k)}")
        return ctx.output_raw(k)
    return ctx.output_f32(k)


# -- Cast ------------------------------------------------------------------------------------------
def _cast_bounds(qnn_dtype: int) -> tuple[float, float]:
    """ops/cast.py _float_to_int's clip bounds, as float64."""
    lo, hi = cast_ops.int_range(qnn_dtype)
    if dtypes.itemsize(qnn_dtype) == 8:
        return float(lo), float(np.nextafter(float(hi) + 1.0, 0.0))
    return float(lo), float(hi)


@lowers("Cast")
def cast(ctx) -> None:
    op = ctx.impl
    if type(op) is not cast_ops.Cast or ctx.n_out != 1 or not op.input_specs or not op.output_specs:
        raise Unsupported("a wrapped Cast or one without tensor specs")
    src, dst = op.input_specs[0].dtype, op.output_specs[0].dtype
    declared: tuple[list[int], list[int]] = getattr(op, "declared_dtypes", ([], []))
    if (declared[0] and declared[0][0] != src) or (declared[1] and declared[1][0] != dst):
        raise Unsupported("a Cast whose declared types differ from its tensors'")
    if any(t not in _INTS and t not in _FLOATS and t != _BOOL for t in (src, dst)):
        raise Unsupported("a Cast from or to fixed point")
    x, y = ctx.input_raw(0), ctx.output_raw(0)
    xt, yt = ctx.in_dtype(0), ctx.out_dtype(0)
    if np.dtype(dtypes.numpy_dtype(src)).itemsize != xt.itemsize or \
            np.dtype(dtypes.numpy_dtype(dst)).itemsize != yt.itemsize:
        raise Unsupported("a Cast whose slots are stored in other types than its tensors'")
    n = _n(ctx.in_shape(0))
    if src in _INTS and dst in _INTS:
        ctx.emit("qe_k_misc_cast", (x, y), (n, 0, type_code(xt), type_code(yt)))
    elif src == dst:
        ctx.emit("qe_k_copy", (x, y), (n * xt.itemsize,))
    elif dst == _BOOL or (src == _BOOL and dst in _INTS):
        ctx.emit("qe_k_misc_cast", (x, y), (n, 2, type_code(xt), type_code(yt)))
    elif src in _INTS and dst == Q.QNN_DATATYPE_FLOAT_32 and yt == F32:
        ctx.emit("qe_k_misc_cast", (x, y), (n, 1, type_code(xt), type_code(yt)))
    elif src in _FLOATS and dst in _INTS and xt in (F32, _F16):
        ctx.emit("qe_k_misc_cast", (x, y), (n, 3, type_code(xt), type_code(yt)), _cast_bounds(dst))
    elif src in _FLOATS and dst in _FLOATS and {xt, yt} == {F32, _F16}:
        ctx.emit("qe_k_cast", (x, y), (n, type_code(xt), type_code(yt)))
    else:
        raise Unsupported(f"Cast {dtypes.name(src)} -> {dtypes.name(dst)}")


# -- ElementWiseSelect ------------------------------------------------------------------------------
@lowers("ElementWiseSelect")
def select(ctx) -> None:
    if type(ctx.impl) is not ew_ops.ElementWiseSelect or ctx.n_out != 1 or ctx.n_in != 3:
        raise Unsupported("a wrapped ElementWiseSelect")
    cond = ctx.input_raw(0)
    if ctx.in_dtype(0).itemsize != 1:
        raise Unsupported(f"a condition stored as {ctx.in_dtype(0)}")
    dims, (sc, sa, sb) = _broadcast(ctx.out_shape(0), [ctx.in_shape(i) for i in range(3)])
    view = _plain_view(ctx)
    if view is not None:
        # plain integers through the op's fixed-point view: the values, clamped as the view's
        # requantization clamps them
        y, dt = ctx.b.slot_buffer(ctx.step.writes[0], ctx.index), ctx.out_dtype(0)
        ctx.emit("qe_k_misc_select", (cond, ctx.b.slot_buffer(ctx.step.reads[1], ctx.index),
                                      ctx.b.slot_buffer(ctx.step.reads[2], ctx.index), y),
                 (dt.itemsize, len(dims), *dims, *sc, *sa, *sb))
        if view is not True:
            read_as, lo, hi = view
            ctx.emit("qe_k_misc_cast", (y, y), (_n(ctx.out_shape(0)), 4, type_code(read_as), type_code(dt)),
                     (lo, hi))
        return
    (a, at), (b, bt) = _received(ctx, 1), _received(ctx, 2)
    if at != bt or at.itemsize not in (1, 2, 4, 8):
        raise Unsupported(f"Select of {at} and {bt}")
    y = _result(ctx, 0, at)
    ctx.emit("qe_k_misc_select", (cond, a, b, y), (at.itemsize, len(dims), *dims, *sc, *sa, *sb))


def _plain_view(ctx):
    """For a Select whose plain integer operands the plan passes through the op's fixed-point
    view (ops/base.py FixedView: dequantized to float, requantized with rounding and
    saturation): True when that is the identity (8/16-bit), (type read as, lo, hi) of the clamp
    it amounts to (32-bit: UINT_32 read as INT_32; plain_range's bounds), None when the step
    has no such view or another one."""
    convs = [ctx.in_conv(1), ctx.in_conv(2)]
    out = ctx.out_conv(0)
    if not all(c is FixedView.dequantize for c in convs):
        return None
    if not (isinstance(out, functools.partial) and out.func is FixedView.requantize and not out.args):
        raise Unsupported("a fixed-point view without its requantization")
    qdt = out.keywords.get("dtype")
    dt = ctx.out_dtype(0)
    if ctx.in_dtype(1) != dt or ctx.in_dtype(2) != dt or qdt is None or \
            np.dtype(dtypes.numpy_dtype(qdt)) != dt or dt.kind not in "iu" or dt.itemsize > 4:
        raise Unsupported(f"a fixed-point view of {ctx.in_dtype(1)} / {ctx.in_dtype(2)} into {dt}")
    if dt.itemsize <= 2:
        return True
    lo, hi = plain_range(qdt)
    return (np.dtype(np.int32), float(lo), float(np.floor(hi)))


# -- BOOL_8 logic ---------------------------------------------------------------------------------
_LOGIC = {"ElementWiseAnd": 0, "ElementWiseOr": 1, "ElementWiseXor": 2, "ElementWiseNot": 3}
_LOGIC_TYPES = {"ElementWiseAnd": ew_ops.ElementWiseAnd, "ElementWiseOr": ew_ops.ElementWiseOr,
                "ElementWiseXor": ew_ops.ElementWiseXor, "ElementWiseNot": ew_ops.ElementWiseNot}


@lowers(*_LOGIC)
def logic(ctx) -> None:
    name = ctx.node.op_type
    op = ctx.impl
    if type(op) is not _LOGIC_TYPES[name] or ctx.n_out != 1:
        raise Unsupported(f"a wrapped {name}")
    arity = 1 if name == "ElementWiseNot" else 2
    specs = list(op.input_specs or [])[:arity] + list(op.output_specs or [])[:1]
    if len(specs) != arity + 1 or any(s is None or s.dtype != _BOOL for s in specs) or ctx.n_in != arity:
        raise Unsupported(f"{name} of other than BOOL_8 tensors (the 8-bit code path)")
    ins = [ctx.input_raw(i) for i in range(arity)]
    if any(ctx.in_dtype(i).itemsize != 1 for i in range(arity)) or ctx.out_dtype(0).itemsize != 1:
        raise Unsupported("BOOL_8 values not stored as bytes")
    dims, strides = _broadcast(ctx.out_shape(0), [ctx.in_shape(i) for i in range(arity)])
    ints = [_LOGIC[name], len(dims), *dims] + [v for st in strides for v in st]
    ctx.emit("qe_k_misc_logic", (*ins, ctx.output_raw(0)), ints)


# -- Argmax / Argmin ------------------------------------------------------------------------------
@lowers("Argmax", "Argmin")
def arg(ctx) -> None:
    cls = reduce_ops.Argmax if ctx.node.op_type == "Argmax" else reduce_ops.Argmin
    op = ctx.impl
    if type(op) is not cls or ctx.n_out != 1:
        raise Unsupported(f"a wrapped {ctx.node.op_type}")
    x, xt = _received(ctx, 0)
    shape = ctx.in_shape(0)
    axis = int(op.param_values.get("axis", 0))
    if not 0 <= axis < len(shape) or shape[axis] < 1:
        raise Unsupported("an axis outside the shape or of length 0")
    index_np = np.dtype(reduce_ops._index_np(op.output_specs, 0))
    y = _result(ctx, 0, index_np)
    if xt not in (F32, _F16) and xt.kind not in "iu" and xt != np.dtype(np.bool_):
        raise Unsupported(f"{ctx.node.op_type} of {xt}")
    outer, inner = _n(shape[:axis]), _n(shape[axis + 1:])
    ctx.emit("qe_k_misc_arg", (x, y), (int(cls is reduce_ops.Argmin), type_code(xt), type_code(index_np),
                                       outer, shape[axis], inner))


# -- CumulativeSum / TopK -------------------------------------------------------------------------
@lowers("CumulativeSum")
def cumulative_sum(ctx) -> None:
    op = ctx.impl
    if type(op) is not reduce_ops.CumulativeSum or ctx.n_out != 1:
        raise Unsupported("a wrapped CumulativeSum")
    x, xt = _received(ctx, 0)
    if xt != F32 and (xt.kind not in "iu" or xt.itemsize > 4):
        raise Unsupported(f"CumulativeSum of {xt}")
    y = _result(ctx, 0, xt)
    shape = ctx.in_shape(0)
    prm = op.param_values
    axis = int(prm["axis"])
    bounds = () if xt == F32 else (float(np.iinfo(xt).min), float(np.iinfo(xt).max))
    ctx.emit("qe_k_misc_cumsum", (x, y), (type_code(xt), type_code(xt), _n(shape[:axis]), shape[axis],
                                          _n(shape[axis + 1:]), int(bool(prm["exclusive"])),
                                          int(bool(prm["reverse"]))), bounds)


@lowers("TopK")
def top_k(ctx) -> None:
    op = ctx.impl
    if type(op) is not reduce_ops.TopK or ctx.n_out != 2:
        raise Unsupported("a wrapped TopK")
    x, xt = _received(ctx, 0)
    if xt not in (F32, _F16) and (xt.kind not in "iu" or xt.itemsize > 4):
        raise Unsupported(f"TopK of {xt}")
    shape = ctx.in_shape(0)
    n, k = shape[-1], int(op.param_values["k"])
    values = _result(ctx, 0, xt)
    index_np = np.dtype(reduce_ops._index_np(op.output_specs, 1))
    indices = _result(ctx, 1, index_np)
    ctx.emit("qe_k_misc_topk", (x, values, indices, ctx.scratch(16 * n)),
             (type_code(xt), _n(shape[:-1]), n, k, int(bool(op.param_values["largest"])), type_code(index_np)))
