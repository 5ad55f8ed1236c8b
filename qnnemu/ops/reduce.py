"""Reductions and index ops: ReduceMax, ReduceMean, ReduceMin, ReduceProd, ReduceSum,
ReduceSumSquare, Argmax, Argmin, TopK, CumulativeSum (QnnOpDef.h QNN_OP_REDUCE_MAX, ...).

- Reduce*: ``axes`` (UINT_32 tensor [M], values in [0, rank-1]; a repeated axis counts once,
  as on the vendor's backend).  There is no "empty means all" rule -- ORT's QNN EP expands
  ONNX's empty axes to every axis before QNN sees them, and the vendor's backend crashes on an
  empty ``axes`` -- so an empty ``axes`` is rejected.  ``keep_dims`` keeps the reduced
  dimensions as 1.  A result of rank 0 (every axis reduced without keep_dims) has dimensions
  [1]: QNN tensors have rank >= 1 (the vendor's backend crashes on a rank-0 output; ORT's QNN
  EP declares scalars as [1]).
  Float sums, means and products accumulate in float64.  INT/UINT inputs are accepted by every
  Reduce*: Max/Min are exact; sums, products and means accumulate in float64 and SATURATE to
  the type's range (the vendor's backend accumulates int32 in float32 and saturates:
  INT32_MAX + 1 gives 2147483520, not a wrapped negative), and ReduceMean rounds half to even
  (the vendor's [1, 2] -> 2, [0, 1] -> 0, [-1, -2] -> -2).
- Argmax/Argmin: index along ``axis`` (ties: the first index); output INT_32, or UINT_32 when
  the node declares its output so; a rank-1 input without keep_dims gives dimensions [1].
- TopK: the ``k`` largest (``largest`` true, default) or smallest values along the LAST
  dimension, sorted (descending / ascending).  Equal values come HIGHER INDEX FIRST, for both
  largest and smallest -- what the vendor's HTP backend does ([1, 3, 3, 2, 3] k=3 gives indices
  [4, 2, 1]); ONNX's TopK (and ORT's CPU EP) would give [1, 2, 4].  out[1] holds the indices
  (INT_32, or UINT_32 when declared so).
- ReduceMax, ReduceMin, Argmax, Argmin and TopK only select values, so they are
  ``quant_passthrough``: with one fixed-point encoding on input and output they run on the
  integer codes (real = scale * (q + offset) is increasing in q), which is exact.
- CumulativeSum: running sum along ``axis``; ``exclusive`` leaves each element out of its own
  sum (the first is 0), ``reverse`` sums from the end (the vendor's [1, 2, 3, 4, 5] gives
  [14, 12, 9, 5, 0] with both).  INT sums saturate like ReduceSum's.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from . import _fast, _fast_movement
from .base import Op, OpCheckError, ParamSpec, TensorSpec, from_compute, same_spec
from .norm import check_axes, check_axis, real_input

INDEX_TYPES = (Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32)


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f"


def _index_dtype(declared_outputs, i: int) -> int:
    """INT_32 unless the node declares output ``i`` UINT_32 (both allowed by the op defs)."""
    if declared_outputs is not None and len(declared_outputs) > i \
            and declared_outputs[i].dtype in INDEX_TYPES:
        return declared_outputs[i].dtype
    return Q.QNN_DATATYPE_INT_32


def _vector_shape(shape) -> tuple[int, ...]:
    """QNN has no rank-0 tensors: a scalar result is [1]."""
    return tuple(shape) if len(shape) else (1,)


def _saturate(y: np.ndarray, dtype) -> np.ndarray:
    """A float64 integer result clipped to ``dtype``'s range (then cast)."""
    info = np.iinfo(dtype)
    return np.clip(y, info.min, info.max).astype(dtype)


def _index_np(spec_list, i: int):
    if len(spec_list) > i and spec_list[i].dtype == Q.QNN_DATATYPE_UINT_32:
        return np.uint32
    return np.int32


# ---- Reduce* ------------------------------------------------------------------------------------
class _Reduce(Op, register=False):
    inputs = ("in[0]",)
    params = {
        "axes": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
        "keep_dims": ParamSpec("scalar", ("bool",), default=False),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1, ints=True)  # INT/UINT too: see the module docstring
        axes = check_axes(op, params["axes"], x.rank)
        if params["keep_dims"]:
            shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        else:
            shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
        return [same_spec(x, shape=_vector_shape(shape))]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._axes = (check_axes(self.op_type, params["axes"], self.input_specs[0].rank)
                      if self.input_specs else None)

    def _run(self, x, axes=None, keep_dims=False):
        ax = self._axes if self._axes is not None else check_axes(self.op_type, axes, x.ndim)
        # fast path: float32 Sum/Mean/Max/Min in C, the very function the C engine runs
        y = _fast_movement.reduce_f32(self.op_type, x, ax, bool(keep_dims)) if _fast.fast() else None
        if y is None:
            y = np.asarray(self.reduce(x, ax, bool(keep_dims)))
        if y.dtype != x.dtype:  # float64 accumulators
            with np.errstate(over="ignore"):
                y = y.astype(x.dtype) if _is_float(x) else _saturate(y, x.dtype)
        return y.reshape(_vector_shape(y.shape))

    @staticmethod
    def reduce(x, axes, keep_dims):
        raise NotImplementedError


class ReduceMax(_Reduce):
    quant_passthrough = True

    @staticmethod
    def reduce(x, axes, keep_dims):
        return np.maximum.reduce(x, axis=axes, keepdims=keep_dims)


class ReduceMin(_Reduce):
    quant_passthrough = True

    @staticmethod
    def reduce(x, axes, keep_dims):
        return np.minimum.reduce(x, axis=axes, keepdims=keep_dims)


class ReduceSum(_Reduce):
    @staticmethod
    def reduce(x, axes, keep_dims):
        return np.add.reduce(x, axis=axes, dtype=np.float64, keepdims=keep_dims)


class ReduceMean(_Reduce):
    @staticmethod
    def reduce(x, axes, keep_dims):
        y = np.mean(x, axis=axes, dtype=np.float64, keepdims=keep_dims)
        return y if _is_float(x) else np.rint(y)


class ReduceProd(_Reduce):
    @staticmethod
    def reduce(x, axes, keep_dims):
        with np.errstate(over="ignore"):
            return np.multiply.reduce(x, axis=axes, dtype=np.float64, keepdims=keep_dims)


class ReduceSumSquare(_Reduce):
    @staticmethod
    def reduce(x, axes, keep_dims):
        xd = x.astype(np.float64)
        return np.add.reduce(xd * xd, axis=axes, keepdims=keep_dims)


# ---- Argmax / Argmin ----------------------------------------------------------------------------
class _Arg(Op, register=False):
    inputs = ("in[0]",)
    params = {
        "axis": ParamSpec("scalar", ("uint",), required=True),
        "keep_dims": ParamSpec("scalar", ("bool",), default=False),
    }
    func = None
    quant_passthrough = True

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1, ints=True)
        axis = check_axis(op, params["axis"], x.rank)
        shape = list(x.shape)
        if params["keep_dims"]:
            shape[axis] = 1
        else:
            del shape[axis]
        return [TensorSpec(_vector_shape(shape), _index_dtype(declared_outputs, 0))]

    def _run(self, x, axis=0, keep_dims=False):
        idx = type(self).func(x, axis=axis)
        if keep_dims:
            idx = np.expand_dims(idx, axis)
        idx = np.asarray(idx).astype(_index_np(self.output_specs, 0))
        return idx.reshape(_vector_shape(idx.shape))


class Argmax(_Arg):
    func = staticmethod(np.argmax)


class Argmin(_Arg):
    func = staticmethod(np.argmin)


# ---- TopK ---------------------------------------------------------------------------------------
class TopK(Op):
    inputs = ("in[0]",)
    outputs = ("out[0]", "out[1]")
    quant_passthrough = True
    params = {
        "k": ParamSpec("scalar", ("uint",), required=True),
        "largest": ParamSpec("scalar", ("bool",), default=True),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1, ints=True)
        k, n = int(params["k"]), x.shape[-1]
        if not 1 <= k <= n:
            raise OpCheckError(f"QNNEMU-{op}-k", "params[k]",
                               f"k must be in [1, {n}] (the last dimension of input 0, "
                               f"{list(x.shape)}), got {k}")
        shape = tuple(x.shape[:-1]) + (k,)
        return [same_spec(x, shape=shape), TensorSpec(shape, _index_dtype(declared_outputs, 1))]

    def _run(self, x, k=1, largest=True):
        n = x.shape[-1]
        # Rank by ``key`` descending, equal keys by higher index first (see the module doc).
        if largest:
            key = x
        else:
            key = -x if _is_float(x) else -(x.astype(np.int64))
        flat = key.reshape(-1, n)
        idx = self._top(flat, k)
        idx = idx.reshape(x.shape[:-1] + (k,))
        values = np.take_along_axis(x, idx, axis=-1)
        return values, idx.astype(_index_np(self.output_specs, 1))

    @staticmethod
    def _top_sorted(flat: np.ndarray, k: int) -> np.ndarray:
        """Stable ascending order (equal keys by lower index), reversed: descending with equal
        keys by higher index."""
        return np.ascontiguousarray(np.argsort(flat, axis=-1, kind="stable")[:, ::-1][:, :k])

    @classmethod
    def _top(cls, flat: np.ndarray, k: int) -> np.ndarray:
        n = flat.shape[-1]
        if k * 8 > n or n < 256 or (_is_float(flat) and np.isnan(flat).any()):
            return cls._top_sorted(flat, k)
        # Large rows, small k: partition out k candidates, then order only those.  A row whose
        # k-th value also occurs outside the candidates (a tie across the cut) is redone by the
        # full sort, which picks the tied elements with the higher indices.
        sel = np.argpartition(flat, n - k, axis=-1)[:, n - k:]
        vals = np.take_along_axis(flat, sel, axis=-1)
        kth = vals.min(axis=-1, keepdims=True)
        ambiguous = (flat == kth).sum(axis=-1) != (vals == kth).sum(axis=-1)
        order = np.lexsort((sel, vals), axis=-1)[:, ::-1]
        idx = np.take_along_axis(sel, order, axis=-1)
        if ambiguous.any():
            idx[ambiguous] = cls._top_sorted(flat[ambiguous], k)
        return idx


# ---- CumulativeSum ------------------------------------------------------------------------------
class CumulativeSum(Op):
    inputs = ("in[0]",)
    params = {
        "axis": ParamSpec("scalar", ("uint",), required=True),
        "exclusive": ParamSpec("scalar", ("bool",), default=False),
        "reverse": ParamSpec("scalar", ("bool",), default=False),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1, ints=True)
        check_axis(op, params["axis"], x.rank)
        return [same_spec(x)]

    def _run(self, x, axis=0, exclusive=False, reverse=False):
        a = np.flip(x, axis) if reverse else x
        c = np.cumsum(a, axis=axis, dtype=np.float64)
        if exclusive:
            c = np.roll(c, 1, axis=axis)
            first = [slice(None)] * c.ndim
            first[axis] = 0
            c[tuple(first)] = 0
        if reverse:
            c = np.flip(c, axis)
        c = np.ascontiguousarray(c)
        return from_compute(c, x.dtype) if _is_float(x) else _saturate(c, x.dtype)


__all__ = ["ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
           "Argmax", "Argmin", "TopK", "CumulativeSum"]
