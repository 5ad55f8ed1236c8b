"""Pooling over channels-last tensors: PoolMax2d, PoolAvg2d (NHWC) and PoolMax3d, PoolAvg3d
(NDHWC) (QnnOpDef.h QNN_OP_POOL_MAX_2D, QNN_OP_POOL_AVG_2D, QNN_OP_POOL_MAX_3D,
QNN_OP_POOL_AVG_3D).

Output size per spatial axis = round((size + before + after - filter) / stride) + 1 with
round = floor (``rounding_mode`` QNN_OP_POOL_*_ROUNDING_MODE_FLOOR) or ceil (..._CEIL).  With
CEIL a last window that would start past the input and the leading padding is dropped (as
ONNX Runtime, which maps ONNX ceil_mode onto this parameter, computes shapes), so every window
holds at least one input cell.  Cells past the explicit padding (the CEIL overhang) never
count.

Cells outside the input (padding and overhang) in max pooling depend on the arch and the
data (the vendor's libQnnHtp.so, tests/test_numerics_vendor.py): float32 data on HTP v68, the
arch that computes float32 graphs in float32 (``SocInfo.float16_math``), counts them as
zeros (a window of negative values at the border yields 0); float32 data on v69 and later
(float16 math), float16 data and fixed-point data on every arch ignore them (the maximum of
the window's input cells, as ONNX MaxPool's -inf padding).  An op used outside a graph
(``htp_arch`` None) takes the v68 rule, that of the default device.  The 3-D ops follow the
same rule.

Average pooling divides by the number of input cells in the window, or, with
``count_pad_for_edges``, by the input and explicit-padding cells.  In float16 math (the plan
sets ``float16_math``) a square 3x3 or 5x5 window multiplies its sum by the float16 value of
1 / count, as the vendor's kernel does (other windows divide; power-of-two counts are exact
either way); the plan rounds the result to float16.

Kernels: "reference" reduces numpy sliding windows; "fast" runs the 2-D ops in C and the
3-D ops as separable numpy passes (one pass per axis and tap).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..headers import Q
from . import _fast
from .base import (
    Op,
    OpCheckError,
    ParamSpec,
    TensorSpec,
    check_rank,
    check_real,
    from_compute,
    htp_fp16_round,
    same_spec,
    to_compute,
)

FLOOR = Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_FLOOR
CEIL = Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_CEIL
ZERO_PAD_UNTIL_ARCH = 68        # float32 max pooling pads with zeros up to this arch
RECIPROCAL_WINDOWS = (3, 5)     # float16 average pooling: k x k windows using a float16 1/count


def pool_output_size(size: int, pad0: int, pad1: int, k: int, stride: int, ceil: bool) -> int:
    span = size + pad0 + pad1 - k
    if span < 0:
        return 0
    out = (math.ceil(span / stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + pad0:
        out -= 1  # the last window would hold padding only
    return out


class _Pool(Op, register=False):
    inputs = ("in[0]",)
    nsp = 2
    kind = "max"

    @classmethod
    def geometry(cls, shape, params):
        """(filter, stride, pad, out) after validating the params."""
        op, S = cls.op_type, cls.nsp
        k = tuple(int(v) for v in np.asarray(params["filter_size"], np.int64))
        s = tuple(int(v) for v in np.asarray(params["stride"], np.int64))
        pad = np.asarray(params["pad_amount"], np.int64).reshape(S, 2)
        pad = tuple((int(a), int(b)) for a, b in pad)
        for name, v in (("filter_size", k), ("stride", s)):
            if min(v) < 1:
                raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                                   f"every {name} value must be >= 1, got {list(v)}")
        mode = params["rounding_mode"]
        if mode not in (FLOOR, CEIL):
            raise OpCheckError(f"QNNEMU-{op}-rounding-mode", "params[rounding_mode]",
                               f"rounding_mode must be {FLOOR} (FLOOR) or {CEIL} (CEIL), "
                               f"got {mode}")
        if any(max(p) >= kk for p, kk in zip(pad, k)):
            # A window made only of padding has no defined max / average.
            raise OpCheckError(f"QNNEMU-{op}-pad-amount", "params[pad_amount]",
                               f"each pad must be smaller than the filter size {list(k)}, "
                               f"got {[list(p) for p in pad]}")
        out = tuple(pool_output_size(shape[1 + i], *pad[i], k[i], s[i], mode == CEIL)
                    for i in range(S))
        return k, s, pad, out

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op, S = cls.op_type, cls.nsp
        x = inputs[0]
        check_rank(op, 0, x, (S + 2,))
        check_real(op, 0, x)
        k, _, pad, out = cls.geometry(x.shape, params)
        if min(out) < 1:
            sp = " x ".join(f"{s}+{a + b}" for s, (a, b) in zip(x.shape[1:-1], pad))
            raise OpCheckError(f"QNNEMU-{op}-output-size", "inputTensors[0].dimensions",
                               f"padded input {sp} is smaller than the filter "
                               f"{' x '.join(map(str, k))}")
        return [same_spec(x, shape=(x.shape[0],) + out + (x.shape[-1],))]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._geom = None
        if self.input_specs:
            with contextlib.suppress(OpCheckError):
                self._geom = self.geometry(self.input_specs[0].shape, params)

    def zero_padding(self) -> bool:
        """Max pooling counts cells outside the input as zeros (float32 data on v68) rather than
        ignoring them (see the module docstring)."""
        spec = self.input_specs[0] if self.input_specs else None
        float32 = spec is None or spec.dtype == Q.QNN_DATATYPE_FLOAT_32
        return float32 and (self.htp_arch is None or self.htp_arch <= ZERO_PAD_UNTIL_ARCH)

    def _run(self, x, filter_size, stride, pad_amount, rounding_mode,
             count_pad_for_edges=False):
        k, s, pad, out = self._geom or self.geometry(x.shape, dict(
            filter_size=filter_size, stride=stride, pad_amount=pad_amount,
            rounding_mode=rounding_mode))
        dtype = x.dtype
        xc = to_compute(x).astype(np.float32, copy=False)
        if self.kind == "max" and not self.zero_padding():
            xc, pad = _pad_ignored(xc, k, s, pad, out)
        recip = (self.kind == "avg" and self.float16_math and len(set(k)) == 1
                 and k[0] in RECIPROCAL_WINDOWS)
        if recip:
            y = pool_reference("sum", xc, k, s, pad, out, count_pad_for_edges)
            counts = _counts(xc.shape[1:-1], k, s, pad, out, count_pad_for_edges)
            y = (y * htp_fp16_round((1.0 / counts).astype(np.float32))).astype(np.float32)
        elif _fast.fast():
            if self.nsp == 2 and _fast.enabled():
                y = _fast.pool2d(self.kind, xc, k, s, pad, out, count_pad_for_edges)
            else:
                y = pool_separable(self.kind, xc, k, s, pad, out, count_pad_for_edges)
        else:
            y = pool_reference(self.kind, xc, k, s, pad, out, count_pad_for_edges)
        return from_compute(y, dtype)


def _pad_ignored(x: np.ndarray, k, s, pad, out):
    """The input padded with -inf (padding and CEIL overhang), with no padding left to do:
    max pooling then ignores every cell outside the input (PAD_amount < filter size, so each
    window keeps at least one input cell)."""
    extra = _overhang(x.shape[1:-1], k, s, pad, out)
    if not any(p0 or p1 or e for (p0, p1), e in zip(pad, extra)):
        return x, pad
    xp = np.pad(x, ((0, 0),) + tuple((p0, p1 + e) for (p0, p1), e in zip(pad, extra)) + ((0, 0),),
                constant_values=-np.inf)
    return xp, tuple((0, 0) for _ in pad)


def _overhang(shape, k, s, pad, out):
    """Extra cells needed after the explicit padding for the CEIL mode's last windows."""
    return tuple(max(0, (o - 1) * st + kk - (n + p0 + p1))
                 for n, kk, st, (p0, p1), o in zip(shape, k, s, pad, out))


def _counts(shape, k, s, pad, out, count_pad: bool) -> np.ndarray:
    """Average pooling divisors, [*out, 1]: a product of per-axis counts (windows are boxes)."""
    total = np.ones((1,) * len(out))
    for i, (n, kk, st, (p0, p1), o) in enumerate(zip(shape, k, s, pad, out)):
        start = np.arange(o) * st - p0
        lo, hi = (-p0, n + p1) if count_pad else (0, n)
        c = np.minimum(start + kk, hi) - np.maximum(start, lo)
        total = total * c.reshape((1,) * i + (o,) + (1,) * (len(out) - i - 1))
    return total[..., None]


def pool_reference(kind: str, x: np.ndarray, k, s, pad, out, count_pad=False) -> np.ndarray:
    """numpy pooling: reduces the [.., *k] sliding windows of the zero-padded input."""
    S = len(k)
    extra = _overhang(x.shape[1:-1], k, s, pad, out)
    xp = np.pad(x, ((0, 0),) + tuple((p0, p1 + e) for (p0, p1), e in zip(pad, extra)) +
                ((0, 0),))
    win = sliding_window_view(xp, k, axis=tuple(range(1, S + 1)))
    win = win[(slice(None),) + tuple(slice(None, o * st, st) for o, st in zip(out, s))]
    axes = tuple(range(S + 2, 2 * S + 2))
    if kind == "max":
        return win.max(axis=axes)
    total = win.sum(axis=axes, dtype=np.float64)
    if kind == "sum":
        return total
    return (total / _counts(x.shape[1:-1], k, s, pad, out, count_pad)).astype(np.float32)


def pool_separable(kind: str, x: np.ndarray, k, s, pad, out, count_pad=False) -> np.ndarray:
    """numpy pooling, one axis at a time (max and sum of a box are separable): per axis, a
    max/sum over the filter's taps of strided views (sums in float64)."""
    S = len(k)
    extra = _overhang(x.shape[1:-1], k, s, pad, out)
    y = x
    if any(p0 or p1 or e for (p0, p1), e in zip(pad, extra)):
        y = np.pad(x, ((0, 0),) + tuple((p0, p1 + e) for (p0, p1), e in zip(pad, extra)) +
                   ((0, 0),))
    for i in range(S):
        ax = 1 + i

        def tap(t, ax=ax, i=i, y=y):
            sl = [slice(None)] * y.ndim
            sl[ax] = slice(t, t + (out[i] - 1) * s[i] + 1, s[i])
            return y[tuple(sl)]
        # Average pooling sums in float64 (global pooling adds thousands of values).
        acc = tap(0).astype(np.float64 if kind == "avg" else y.dtype)
        op = np.maximum if kind == "max" else np.add
        for t in range(1, k[i]):
            op(acc, tap(t), out=acc)
        y = acc
    if kind == "max":
        return y
    return (y / _counts(x.shape[1:-1], k, s, pad, out, count_pad)).astype(np.float32)


def _pool_params(S: int, avg: bool) -> dict[str, ParamSpec]:
    p = {
        "filter_size": ParamSpec("tensor", ("uint",), shape=(S,), required=True),
        "stride": ParamSpec("tensor", ("uint",), shape=(S,), required=True),
        "pad_amount": ParamSpec("tensor", ("uint",), shape=(S, 2),
                                default=lambda: np.zeros((S, 2), np.uint32)),
        "rounding_mode": ParamSpec("scalar", ("uint",), default=FLOOR),
    }
    if avg:
        p["count_pad_for_edges"] = ParamSpec("scalar", ("bool",), default=False)
    return p


class PoolMax2d(_Pool):
    params = _pool_params(2, False)


class PoolAvg2d(_Pool):
    kind = "avg"
    params = _pool_params(2, True)


class PoolMax3d(_Pool):
    nsp = 3
    params = _pool_params(3, False)


class PoolAvg3d(_Pool):
    nsp = 3
    kind = "avg"
    params = _pool_params(3, True)


__all__ = ["PoolMax2d", "PoolAvg2d", "PoolMax3d", "PoolAvg3d", "pool_output_size",
           "pool_reference", "pool_separable"]
