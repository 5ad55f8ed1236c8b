"""2-D pooling over NHWC tensors: PoolMax2d and PoolAvg2d (QnnOpDef.h QNN_OP_POOL_MAX_2D,
QNN_OP_POOL_AVG_2D).

Output height = round((h + top + bottom - filter_h) / stride_h) + 1 with round = floor
(``rounding_mode`` QNN_OP_POOL_*_ROUNDING_MODE_FLOOR) or ceil (..._CEIL).  With CEIL a last
window that would start past the input and the leading padding is dropped (as ONNX Runtime,
which maps ONNX ceil_mode onto this parameter, computes shapes), so every window holds at
least one input cell.  Cells past the explicit padding (the CEIL overhang) never count.

Max pooling treats padded cells as zeros, as the HTP backend does.  Average pooling divides by the number of input cells in
the window, or, with ``count_pad_for_edges``, by the input and explicit-padding cells.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..headers import Q
from .base import (Op, OpCheckError, ParamSpec, TensorSpec, check_float_inputs, check_rank,
                   from_compute, same_spec, to_compute)

FLOOR = Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_FLOOR
CEIL = Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_CEIL


def pool_output_size(size: int, pad0: int, pad1: int, k: int, stride: int, ceil: bool) -> int:
    span = size + pad0 + pad1 - k
    if span < 0:
        return 0
    out = (math.ceil(span / stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + pad0:
        out -= 1  # the last window would hold padding only
    return out


class _Pool2d(Op, register=False):
    inputs = ("in[0]",)
    params = {
        "filter_size": ParamSpec("tensor", ("uint",), shape=(2,), required=True),
        "stride": ParamSpec("tensor", ("uint",), shape=(2,), required=True),
        "pad_amount": ParamSpec("tensor", ("uint",), shape=(2, 2),
                                default=lambda: np.zeros((2, 2), np.uint32)),
        "rounding_mode": ParamSpec("scalar", ("uint",), default=FLOOR),
    }

    @classmethod
    def geometry(cls, shape, params):
        """(filter, stride, pad, (oh, ow)) after validating the params."""
        op = cls.op_type
        k = tuple(int(v) for v in np.asarray(params["filter_size"], np.int64))
        s = tuple(int(v) for v in np.asarray(params["stride"], np.int64))
        pad = np.asarray(params["pad_amount"], np.int64)
        pad = ((int(pad[0, 0]), int(pad[0, 1])), (int(pad[1, 0]), int(pad[1, 1])))
        for name, v in (("filter_size", k), ("stride", s)):
            if min(v) < 1:
                raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                                   f"every {name} value must be >= 1, got {list(v)}")
        mode = params["rounding_mode"]
        if mode not in (FLOOR, CEIL):
            raise OpCheckError(f"QNNEMU-{op}-rounding-mode", "params[rounding_mode]",
                               f"rounding_mode must be {FLOOR} (FLOOR) or {CEIL} (CEIL), "
                               f"got {mode}")
        if max(pad[0]) >= k[0] or max(pad[1]) >= k[1]:
            # A window made only of padding has no defined max / average.
            raise OpCheckError(f"QNNEMU-{op}-pad-amount", "params[pad_amount]",
                               f"each pad must be smaller than the filter size {list(k)}, "
                               f"got {[list(p) for p in pad]}")
        oh = pool_output_size(shape[1], *pad[0], k[0], s[0], mode == CEIL)
        ow = pool_output_size(shape[2], *pad[1], k[1], s[1], mode == CEIL)
        return k, s, pad, (oh, ow)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        x = inputs[0]
        check_rank(cls.op_type, 0, x, (4,))
        check_float_inputs(cls.op_type, inputs)
        k, _, pad, (oh, ow) = cls.geometry(x.shape, params)
        if oh < 1 or ow < 1:
            raise OpCheckError(f"QNNEMU-{cls.op_type}-output-size", "inputTensors[0].dimensions",
                               f"padded input {x.shape[1]}+{sum(pad[0])} x "
                               f"{x.shape[2]}+{sum(pad[1])} is smaller than the filter "
                               f"{k[0]} x {k[1]}")
        return [same_spec(x, shape=(x.shape[0], oh, ow, x.shape[3]))]

    @staticmethod
    def _windows(a, k, s, pad, out_hw, fill):
        """[n, oh, ow, c, kh, kw] windows of ``a`` padded with ``fill``; the CEIL overhang
        beyond the explicit padding is filled the same way."""
        oh, ow = out_hw
        extra_h = max(0, (oh - 1) * s[0] + k[0] - (a.shape[1] + sum(pad[0])))
        extra_w = max(0, (ow - 1) * s[1] + k[1] - (a.shape[2] + sum(pad[1])))
        ap = np.pad(a, ((0, 0), (pad[0][0], pad[0][1] + extra_h),
                        (pad[1][0], pad[1][1] + extra_w), (0, 0)), constant_values=fill)
        win = sliding_window_view(ap, k, axis=(1, 2))
        return win[:, ::s[0], ::s[1]][:, :oh, :ow]


class PoolMax2d(_Pool2d):
    def _run(self, x, filter_size, stride, pad_amount, rounding_mode):
        k, s, pad, out_hw = self.geometry(x.shape, dict(
            filter_size=filter_size, stride=stride, pad_amount=pad_amount,
            rounding_mode=rounding_mode))
        # Padded cells hold 0 and take part in the max: what the HTP backend computes
        # (tests/test_differential.py PoolMax2d_3x3_s1_pad1 against the vendor's backend).
        return self._windows(x, k, s, pad, out_hw, 0.0).max(axis=(4, 5))


class PoolAvg2d(_Pool2d):
    params = {**_Pool2d.params,
              "count_pad_for_edges": ParamSpec("scalar", ("bool",), default=False)}

    def _run(self, x, filter_size, stride, pad_amount, rounding_mode,
             count_pad_for_edges=False):
        k, s, pad, out_hw = self.geometry(x.shape, dict(
            filter_size=filter_size, stride=stride, pad_amount=pad_amount,
            rounding_mode=rounding_mode))
        dtype = x.dtype
        xc = to_compute(x)
        total = self._windows(xc, k, s, pad, out_hw, 0.0).sum(axis=(4, 5), dtype=np.float64)
        # Divisor per output position: 1s on counted cells, summed over each window.
        mask = np.ones((1, x.shape[1], x.shape[2], 1), np.float64)
        if count_pad_for_edges:
            mask = np.pad(mask, ((0, 0), pad[0], pad[1], (0, 0)), constant_values=1.0)
            count = self._windows(mask, k, s, ((0, 0), (0, 0)), out_hw, 0.0)
        else:
            count = self._windows(mask, k, s, pad, out_hw, 0.0)
        count = count.sum(axis=(4, 5))
        return from_compute((total / count).astype(np.float32), dtype)


__all__ = ["PoolMax2d", "PoolAvg2d", "pool_output_size"]
