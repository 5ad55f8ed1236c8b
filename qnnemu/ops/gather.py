"""Index ops (QnnOpDef.h): Gather, GatherElements, GatherNd, ScatterElements, ScatterNd.

- Gather ``axis`` (INT_32, required -- the vendor's HTP rejects a node without it): out = in[0]
  with dimension ``axis`` replaced by the indices' dimensions (rank r + q - 1), as ONNX Gather.
- GatherElements ``axis`` (default 0): indices of in[0]'s rank, each dimension other than
  ``axis`` no larger than in[0]'s; out[i..] = in[0][i.. with i_axis = indices[i..]] (ONNX).
- GatherNd ``batch_dims`` (UINT_32, default 0): indices [..., k] with 1 <= k <= r - batch_dims
  address slices of in[0]; out = indices.shape[:-1] + in[0].shape[batch_dims + k:] (ONNX).
- ScatterElements ``axis`` (default 0), ``reduction`` (NONE 0, ADD 1, MUL 2, MAX 3): a copy of
  in[0] with updates written (or combined) at the GatherElements positions; updates have the
  indices' shape.
- ScatterNd ``reduction`` (NONE 0, ADD 1, MUL 2): a copy of in[0] with the slices addressed by
  indices [..., k] replaced by / combined with updates (indices.shape[:-1] + in[0].shape[k:]).
  With reduction NONE and repeated positions the last update wins (numpy's assignment order,
  and what the vendor did).

Axes must be in [0, r-1] (see qnnemu/ops/shape.py: the HTP misreads negative axes).

Indices: INT_32, INT_64 or UINT_32.  What an index outside [0, dim-1] does is what the vendor's
HTP (libQnnHtp.so 2.51, SM8550/SM8650, float32) does with it, each with a warning rule
(qnnemu/rules.py, once per node and execute path):

- Gather, GatherNd: a negative index in [-dim, -1] counts from the end (numpy-style,
  ``QNNEMU-index-negative-wrapped``); beyond that graphExecute fails (``QNNEMU-<op>-index-range``).
  (The vendor also fails a *dynamic* negative Gather index on axis 0 while it wraps one on any
  other axis, and reads a *static* negative GatherNd index as 0: inconsistencies of its kernels
  the emulator does not copy -- docs/validation.md.)
- GatherElements: an index outside [0, dim-1] reads 0 (``QNNEMU-index-invalid-zeroed``).
- ScatterElements, ScatterNd: an update at an index outside [0, dim-1] is skipped
  (``QNNEMU-index-invalid-skipped``).

A STATIC index tensor holding such an index is accepted at graphAddNode, as the vendor does,
with ``QNNEMU-index-static-out-of-range``; the execute then behaves as above.

Data types: the data input takes any type and the ops are ``quant_passthrough`` (they move
values).  Where a reduction combines values (ADD, MUL) on fixed-point codes, the op dequantizes
in float64, combines, and requantizes (round half to even) with the node's encoding; MAX and
NONE work on the codes directly.  float16 data combines in float16, rounding after each update
(as the vendor: repeated MUL updates differ from one float32 product rounded once).
"""
from __future__ import annotations

import numpy as np

from .. import rules
from ..headers import Q
from ..spec import dtypes
from .base import Op, OpCheckError, ParamSpec, TensorSpec, same_spec, warn
from .shape import check_axis, check_same_dtype, count, is_codes

INDEX_TYPES = (Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_INT_64, Q.QNN_DATATYPE_UINT_32)
_AXIS = ("int", "uint")

RED_NONE, RED_ADD, RED_MUL, RED_MAX = (
    Q.QNN_OP_SCATTER_ELEMENTS_REDUCTION_NONE, Q.QNN_OP_SCATTER_ELEMENTS_REDUCTION_ADD,
    Q.QNN_OP_SCATTER_ELEMENTS_REDUCTION_MUL, Q.QNN_OP_SCATTER_ELEMENTS_REDUCTION_MAX)
_RED_NAMES = {RED_NONE: "NONE", RED_ADD: "ADD", RED_MUL: "MUL", RED_MAX: "MAX"}
_UFUNC = {RED_ADD: np.add, RED_MUL: np.multiply, RED_MAX: np.maximum}


def check_indices(op: str, i: int, spec: TensorSpec) -> None:
    if spec.dtype not in INDEX_TYPES:
        raise OpCheckError(f"QNNEMU-{op}-index-dtype", f"inputTensors[{i}].dataType",
                           f"{op} input {i} holds indices and must be INT_32, INT_64 or UINT_32; got "
                           f"{dtypes.name(spec.dtype)}")


def wrap(op: str, i: int, ind: np.ndarray, dim, negative: bool = False) -> np.ndarray:
    """Indices in [0, dim-1] -- or [-dim, dim-1] with ``negative`` (then mapped to [0, dim-1]);
    ``dim`` a scalar or an array broadcastable against ``ind``.  Anything else raises
    ``QNNEMU-<op>-index-range`` naming the first offending index."""
    if ind.size == 0:
        return ind.astype(np.intp)
    dim_arr = np.asarray(dim, dtype=np.int64)
    if dim_arr.ndim == 0:
        lo, hi = int(ind.min()), int(ind.max())
        if lo >= 0 and hi < int(dim_arr):
            return ind
    ind = ind.astype(np.int64, copy=False)
    bad = ((ind < -dim_arr) if negative else (ind < 0)) | (ind >= dim_arr)
    if bad.any():
        pos = np.unravel_index(int(np.argmax(bad)), bad.shape)
        d = int(np.broadcast_to(dim_arr, ind.shape)[pos])
        raise OpCheckError(f"QNNEMU-{op}-index-range", f"inputTensors[{i}]",
                           f"index {int(ind[pos])} at {list(map(int, pos))} is outside "
                           f"[{-d if negative else 0}, {d - 1}] (dimension of size {d})")
    return np.where(ind < 0, ind + dim_arr, ind) if negative else ind


def invalid(ind: np.ndarray, dim, negative: bool = False) -> np.ndarray:
    """Mask of indices outside [0, dim-1] (or [-dim, dim-1] with ``negative``)."""
    ind = ind.astype(np.int64, copy=False)
    dim_arr = np.asarray(dim, dtype=np.int64)
    return ((ind < -dim_arr) if negative else (ind < 0)) | (ind >= dim_arr)


def _static_check(op: str, i: int, spec: TensorSpec, dim, negative: bool = False, what: str = "") -> None:
    """A STATIC index tensor with an index the op does not take: accepted with a warning (the
    vendor accepts it at graphAddNode; graphExecute handles it)."""
    if spec.data is None:
        return
    ind = np.asarray(spec.data)
    bad = invalid(ind, dim, negative) | ((ind.astype(np.int64) < 0) if what else False)
    if ind.size and bad.any():
        pos = np.unravel_index(int(np.argmax(bad)), bad.shape)
        warn("QNNEMU-index-static-out-of-range", f"inputTensors[{i}]",
             f"static index {int(ind[pos])} at {list(map(int, pos))} is outside "
             f"[0, {int(np.broadcast_to(np.asarray(dim), ind.shape)[pos]) - 1}]; "
             f"{what or 'graphExecute wraps a negative one from the end and fails beyond that'}")


class _WarnOnce:
    """Execute-time warning rules, logged once per op instance (one per node and plan)."""

    def warn_once(self, rule: str, op: str, i: int, message: str) -> None:
        done = self.__dict__.setdefault("_warned", set())
        if rule not in done:
            done.add(rule)
            rules.warn(rule, "graphExecute", f"{op} inputTensors[{i}]", message)

    def wrap_negative(self, op: str, ind: np.ndarray, dim) -> np.ndarray:
        """Gather / GatherNd: fails beyond [-dim, dim-1], wraps negative indices."""
        idx = wrap(op, 1, ind, dim, negative=True)
        if ind.size and int(np.asarray(ind).min()) < 0:
            self.warn_once("QNNEMU-index-negative-wrapped", op, 1,
                           "negative indices count from the end of their dimension")
        return idx


def _element_index(ind: np.ndarray, axis: int) -> tuple:
    """Index tuple addressing in[0] at (i_0, .., ind[i], .., i_{r-1}) for every i of ``ind``."""
    r = ind.ndim
    out = []
    for d in range(r):
        if d == axis:
            out.append(ind)
        else:
            shape = [1] * r
            shape[d] = ind.shape[d]
            out.append(np.arange(ind.shape[d]).reshape(shape))
    return tuple(out)


def _nd_linear(op: str, ind: np.ndarray, dims: tuple[int, ...], negative: bool) -> np.ndarray:
    """Row-major linear offsets of the index tuples ``ind`` [..., k] into ``dims`` (k dims)."""
    k = len(dims)
    ind = wrap(op, 1, ind.reshape(-1, k), np.asarray(dims, np.int64)[None, :], negative)
    strides = np.ones(k, dtype=np.int64)
    for j in range(k - 2, -1, -1):
        strides[j] = strides[j + 1] * dims[j + 1]
    return ind.astype(np.int64, copy=False) @ strides


def _index_op_axis(op: str, spec: TensorSpec, params) -> int:
    return check_axis(op, params["axis"], spec.rank, what=f" for rank {spec.rank} input")


def _indices_along_axis(op: str, inputs, params) -> tuple[TensorSpec, TensorSpec, int]:
    """(data, indices, axis) of Gather / GatherElements, checked: integer indices, an axis of
    the data."""
    x, ind = inputs
    check_indices(op, 1, ind)
    return x, ind, _index_op_axis(op, x, params)


# ---- Gather -------------------------------------------------------------------------------------
class Gather(_WarnOnce, Op):
    inputs = ("in[0]", "in[1]")
    params = {"axis": ParamSpec("scalar", _AXIS, required=True)}
    quant_passthrough = True

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, ind, axis = _indices_along_axis(op, inputs, params)
        _static_check(op, 1, ind, x.shape[axis], negative=True)
        shape = tuple(x.shape[:axis]) + tuple(ind.shape) + tuple(x.shape[axis + 1:])
        return [same_spec(x, shape=shape)]

    def _run(self, x, ind, axis):
        return np.take(x, self.wrap_negative("Gather", ind, x.shape[axis]), axis=axis)


class GatherElements(_WarnOnce, Op):
    inputs = ("in[0]", "in[1]")
    params = {"axis": ParamSpec("scalar", _AXIS, default=0)}
    quant_passthrough = True

    @classmethod
    def check_shapes(cls, op: str, x: TensorSpec, ind: TensorSpec, axis: int) -> None:
        if ind.rank != x.rank:
            raise OpCheckError(f"QNNEMU-{op}-indices-rank", "inputTensors[1].rank",
                               f"indices must have in[0]'s rank {x.rank}, got rank {ind.rank} "
                               f"({list(ind.shape)})")
        if any(i > d for j, (i, d) in enumerate(zip(ind.shape, x.shape)) if j != axis):
            raise OpCheckError(f"QNNEMU-{op}-indices-shape", "inputTensors[1].dimensions",
                               f"indices dimensions other than axis {axis} must not exceed in[0]'s "
                               f"{list(x.shape)}, got {list(ind.shape)}")

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, ind, axis = _indices_along_axis(op, inputs, params)
        cls.check_shapes(op, x, ind, axis)
        _static_check(op, 1, ind, x.shape[axis], what="graphExecute reads 0 there")
        return [same_spec(x, shape=tuple(ind.shape))]

    def _run(self, x, ind, axis):
        bad = invalid(ind, x.shape[axis])
        if bad.any():
            self.warn_once("QNNEMU-index-invalid-zeroed", "GatherElements", 1,
                           f"indices outside [0, {x.shape[axis] - 1}] read 0")
        idx = np.where(bad, 0, ind).astype(np.intp)
        out = np.take_along_axis(x, idx, axis=axis) if idx.shape == x.shape else x[_element_index(idx, axis)]
        if bad.any():
            out = np.where(bad, np.zeros((), out.dtype), out)
        return out


class GatherNd(_WarnOnce, Op):
    inputs = ("in[0]", "in[1]")
    params = {"batch_dims": ParamSpec("scalar", ("uint",), default=0)}
    quant_passthrough = True

    @classmethod
    def geometry(cls, x_shape, i_shape, b: int) -> tuple[int, tuple[int, ...]]:
        """(k, output shape)."""
        op = cls.op_type
        r, q = len(x_shape), len(i_shape)
        if q < 1:
            raise OpCheckError(f"QNNEMU-{op}-indices-rank", "inputTensors[1].rank",
                               "indices must have rank >= 1 (the last dimension holds index tuples)")
        if b >= min(r, q) or tuple(x_shape[:b]) != tuple(i_shape[:b]):
            raise OpCheckError(f"QNNEMU-{op}-batch-dims", "params[batch_dims]",
                               f"batch_dims ({b}) must be < min(rank in[0], rank indices) = "
                               f"{min(r, q)} and the first batch_dims dimensions must agree: in[0] "
                               f"{list(x_shape)}, indices {list(i_shape)}")
        k = i_shape[-1]
        if not 1 <= k <= r - b:
            raise OpCheckError(f"QNNEMU-{op}-index-depth", "inputTensors[1].dimensions",
                               f"the last indices dimension ({k}) must be in [1, {r - b}] (rank {r} - "
                               f"batch_dims {b})")
        return k, tuple(i_shape[:-1]) + tuple(x_shape[b + k:])

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, ind = inputs
        check_indices(op, 1, ind)
        b = params["batch_dims"]
        k, shape = cls.geometry(x.shape, ind.shape, b)
        _static_check(op, 1, ind, np.asarray(x.shape[b:b + k], np.int64), negative=True)
        return [same_spec(x, shape=shape)]

    def _run(self, x, ind, batch_dims):
        b = batch_dims
        k, shape = self.geometry(x.shape, ind.shape, b)
        nb = count(x.shape[:b])
        dims = tuple(x.shape[b:b + k])
        xr = x.reshape(nb, count(dims), count(x.shape[b + k:]))
        if ind.size and int(ind.min()) < 0:
            self.warn_once("QNNEMU-index-negative-wrapped", "GatherNd", 1,
                           "negative indices count from the end of their dimension")
        lin = _nd_linear("GatherNd", ind, dims, negative=True).reshape(nb, -1)
        return xr[np.arange(nb)[:, None], lin].reshape(shape)


# ---- Scatter ------------------------------------------------------------------------------------
class _Scatter(_WarnOnce, Op, register=False):
    inputs = ("in[0]", "in[1]", "in[2]")
    quant_passthrough = True
    reductions = (RED_NONE, RED_ADD, RED_MUL)

    @classmethod
    def check_operands(cls, inputs, params) -> list[TensorSpec]:
        """(data, indices, updates), checked: integer indices, updates of the data's type, a
        reduction the op takes."""
        check_indices(cls.op_type, 1, inputs[1])
        check_same_dtype(cls.op_type, inputs, [0, 2])
        cls.check_reduction(params)
        return list(inputs)

    @classmethod
    def check_reduction(cls, params) -> None:
        red = params["reduction"]
        if red not in cls.reductions:
            names = ", ".join(f"{_RED_NAMES[r]} ({r})" for r in cls.reductions)
            raise OpCheckError(f"QNNEMU-{cls.op_type}-reduction", "params[reduction]",
                               f"reduction must be one of {names}, got {red}")

    def _on_codes(self, x: np.ndarray, red: int) -> bool:
        """ADD / MUL on fixed-point codes must go through the real values."""
        return red in (RED_ADD, RED_MUL) and bool(self.input_specs) and \
            is_codes(self.input_specs[0], x)

    def _to_real(self, x: np.ndarray, upd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from ..spec.quant import scale_offset_arrays
        reals = []
        for a, spec in ((x, self.input_specs[0]), (upd, self.input_specs[2])):
            scale, offset = scale_offset_arrays(spec.quant, a.shape, np.float64)
            reals.append(scale * (a.astype(np.float64) + offset))
        return reals[0], reals[1]

    def _from_real(self, real: np.ndarray) -> np.ndarray:
        from ..spec.quant import code_range, scale_offset_arrays
        spec = self.output_specs[0] if self.output_specs else self.input_specs[0]
        if spec.quant is None:  # the output is not fixed point: codes pass on unchanged types
            spec = self.input_specs[0]
        scale, offset = scale_offset_arrays(spec.quant, real.shape, np.float64)
        lo, hi = code_range(spec.dtype, spec.quant.bitwidth)
        codes = np.clip(np.rint(real / scale) - offset, lo, hi)
        return codes.astype(dtypes.numpy_dtype(spec.dtype))

    @staticmethod
    def _combine(out: np.ndarray, where, updates: np.ndarray, red: int) -> np.ndarray:
        """``out`` (a fresh copy of in[0]) with ``updates`` written / combined at ``where``."""
        if red == RED_NONE:
            out[where] = updates
            return out
        # float16 combines in float16, each update rounded, as the vendor's HTP does
        _UFUNC[red].at(out, where, updates.astype(out.dtype, copy=False))
        return out


class ScatterElements(_Scatter):
    params = {
        "axis": ParamSpec("scalar", _AXIS, default=0),
        "reduction": ParamSpec("scalar", ("uint",), default=RED_NONE),
    }
    reductions = (RED_NONE, RED_ADD, RED_MUL, RED_MAX)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, ind, upd = cls.check_operands(inputs, params)
        axis = _index_op_axis(op, x, params)
        GatherElements.check_shapes(op, x, ind, axis)
        if tuple(upd.shape) != tuple(ind.shape):
            raise OpCheckError(f"QNNEMU-{op}-updates-shape", "inputTensors[2].dimensions",
                               f"updates must have the indices' dimensions {list(ind.shape)}, got "
                               f"{list(upd.shape)}")
        _static_check(op, 1, ind, x.shape[axis], what="graphExecute skips those updates")
        return [same_spec(x)]

    def _run(self, x, ind, upd, axis, reduction):
        bad = invalid(ind, x.shape[axis])
        where = _element_index(np.where(bad, 0, ind).astype(np.intp), axis)
        if bad.any():
            self.warn_once("QNNEMU-index-invalid-skipped", "ScatterElements", 1,
                           f"updates at indices outside [0, {x.shape[axis] - 1}] are skipped")
            keep = ~bad
            where = tuple(np.broadcast_to(w, ind.shape)[keep] for w in where)
            upd = upd[keep]
        codes = self._on_codes(x, reduction)
        if codes:
            x, upd = self._to_real(x, upd)
        out = self._combine(x.copy(), where, upd, reduction)
        return self._from_real(out) if codes else out


class ScatterNd(_Scatter):
    params = {"reduction": ParamSpec("scalar", ("uint",), default=RED_NONE)}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x, ind, upd = cls.check_operands(inputs, params)
        if ind.rank < 1:
            raise OpCheckError(f"QNNEMU-{op}-indices-rank", "inputTensors[1].rank",
                               "indices must have rank >= 1 (the last dimension holds index tuples)")
        k = ind.shape[-1]
        if not 1 <= k <= x.rank:
            raise OpCheckError(f"QNNEMU-{op}-index-depth", "inputTensors[1].dimensions",
                               f"the last indices dimension ({k}) must be in [1, {x.rank}] (rank of "
                               f"in[0] {list(x.shape)})")
        want = tuple(ind.shape[:-1]) + tuple(x.shape[k:])
        if tuple(upd.shape) != want:
            raise OpCheckError(f"QNNEMU-{op}-updates-shape", "inputTensors[2].dimensions",
                               f"updates must be indices.shape[:-1] + in[0].shape[{k}:] = {list(want)}, "
                               f"got {list(upd.shape)}")
        _static_check(op, 1, ind, np.asarray(x.shape[:k], np.int64), what="graphExecute skips those updates")
        return [same_spec(x)]

    def _run(self, x, ind, upd, reduction):
        k = ind.shape[-1]
        dims = tuple(x.shape[:k])
        rest = count(x.shape[k:])
        tuples = ind.reshape(-1, k)
        bad = invalid(tuples, np.asarray(dims, np.int64)[None, :]).any(axis=1)
        upd = upd.reshape(-1, rest)
        if bad.any():
            self.warn_once("QNNEMU-index-invalid-skipped", "ScatterNd", 1,
                           f"updates at index tuples outside {list(dims)} are skipped")
            tuples, upd = tuples[~bad], upd[~bad]
        lin = _nd_linear("ScatterNd", tuples, dims, negative=False)
        codes = self._on_codes(x, reduction)
        if codes:
            x, upd = self._to_real(x, upd)
        out = self._combine(x.copy().reshape(count(dims), rest), lin, upd, reduction).reshape(x.shape)
        return self._from_real(out) if codes else out


__all__ = ["Gather", "GatherElements", "GatherNd", "ScatterElements", "ScatterNd",
           "INDEX_TYPES"]
