"""Convolutions: Conv2d and DepthWiseConv2d (QnnOpDef.h QNN_OP_CONV_2D, QNN_OP_DEPTH_WISE_CONV_2D).

Layouts follow the QNN op definitions: input NHWC [b, h, w, c_in], output NHWC; Conv2d
filter HWIO [fh, fw, c_in/group, c_out]; DepthWiseConv2d filter [fh, fw, 1, c_out] with
c_out = c_in * multiplier (output channel o reads input channel o // multiplier); bias
[c_out] optional.  ``pad_amount`` is [[top, bottom], [left, right]].

Output height = floor((h + top + bottom - ((fh - 1) * dilation_h + 1)) / stride_h) + 1, the
same for width.
"""
from __future__ import annotations

import numpy as np

from . import _fast
from .base import (Op, OpCheckError, ParamSpec, TensorSpec, check_float_inputs, check_rank,
                   from_compute, same_spec, to_compute)


def _pair(value) -> np.ndarray:
    return np.array(value, dtype=np.uint32)


def _positive_pair(op: str, name: str, value) -> tuple[int, int]:
    v = np.asarray(value, dtype=np.int64).reshape(-1)
    if (v < 1).any():
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"every {name} value must be >= 1, got {v.tolist()}")
    return int(v[0]), int(v[1])


def conv_output_size(size: int, pad0: int, pad1: int, k: int, stride: int, dil: int) -> int:
    """floor((size + pads - effective filter) / stride) + 1; <= 0 if the filter does not fit."""
    span = size + pad0 + pad1 - ((k - 1) * dil + 1)
    return span // stride + 1 if span >= 0 else 0


class _ConvBase(Op, register=False):
    inputs = ("in[0]", "in[1]", "in[2]?")
    depthwise = False

    @classmethod
    def geometry(cls, x_shape, f_shape, params):
        """(stride, pad [[t,b],[l,r]], dilation, group, (oh, ow)), validating the params."""
        op = cls.op_type
        stride = _positive_pair(op, "stride", params["stride"])
        dilation = _positive_pair(op, "dilation", params["dilation"])
        pad = np.asarray(params["pad_amount"], dtype=np.int64)
        pad = ((int(pad[0, 0]), int(pad[0, 1])), (int(pad[1, 0]), int(pad[1, 1])))
        group = x_shape[3] if cls.depthwise else int(params.get("group", 1))
        oh = conv_output_size(x_shape[1], *pad[0], f_shape[0], stride[0], dilation[0])
        ow = conv_output_size(x_shape[2], *pad[1], f_shape[1], stride[1], dilation[1])
        return stride, pad, dilation, group, (oh, ow)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        x, f = inputs[0], inputs[1]
        check_rank(op, 0, x, (4,))
        check_rank(op, 1, f, (4,))
        if len(inputs) > 2:
            check_rank(op, 2, inputs[2], (1,))
        check_float_inputs(op, inputs)
        c_in = x.shape[3]
        fh, fw, f_cin, c_out = f.shape
        if cls.depthwise:
            if f_cin != 1:
                raise OpCheckError(f"QNNEMU-{op}-filter-channels", "inputTensors[1].dimensions",
                                   f"filter dimension 2 must be 1 for a depthwise filter, got "
                                   f"{list(f.shape)}")
            if c_in == 0 or c_out % c_in != 0:
                raise OpCheckError(f"QNNEMU-{op}-multiplier", "inputTensors[1].dimensions",
                                   f"filter output channels ({c_out}) must be a multiple of "
                                   f"the input channels ({c_in}); filter {list(f.shape)}")
        else:
            group = int(params["group"])
            if group < 1 or c_in % group != 0 or c_out % group != 0:
                raise OpCheckError(f"QNNEMU-{op}-group", "params[group]",
                                   f"group must be >= 1 and divide both input channels "
                                   f"({c_in}) and output channels ({c_out}); got {group}")
            if f_cin * group != c_in:
                raise OpCheckError(f"QNNEMU-{op}-filter-channels", "inputTensors[1].dimensions",
                                   f"filter dimension 2 must be input channels / group = "
                                   f"{c_in // group}, got {list(f.shape)}")
        if len(inputs) > 2 and tuple(inputs[2].shape) != (c_out,):
            raise OpCheckError(f"QNNEMU-{op}-bias-shape", "inputTensors[2].dimensions",
                               f"bias must have dimensions [{c_out}] (filter output "
                               f"channels), got {list(inputs[2].shape)}")
        _, pad, dil, _, (oh, ow) = cls.geometry(x.shape, f.shape, params)
        if oh < 1 or ow < 1:
            raise OpCheckError(f"QNNEMU-{op}-output-size", "inputTensors[0].dimensions",
                               f"padded input {x.shape[1]}+{sum(pad[0])} x "
                               f"{x.shape[2]}+{sum(pad[1])} is smaller than the dilated "
                               f"filter {(fh - 1) * dil[0] + 1} x {(fw - 1) * dil[1] + 1}; "
                               f"output would be {oh} x {ow}")
        return [same_spec(x, shape=(x.shape[0], oh, ow, c_out))]

    def _run(self, x, f, b=None, **params):
        stride, pad, dil, group, out_hw = self.geometry(x.shape, f.shape, params)
        dtype = x.dtype
        x, f, b = to_compute(x), to_compute(f), to_compute(b)
        if _fast.enabled():
            y = _fast.conv2d(x, f, b, stride, pad, dil, group, out_hw)
        else:
            y = conv2d_reference(x, f, b, stride, pad, dil, group, out_hw)
        return from_compute(y, dtype)


def conv2d_reference(x, f, b, stride, pad, dil, group, out_hw):
    """numpy Conv2d: gathers strided/dilated windows (im2col) then one matmul per group."""
    n, _, _, c_in = x.shape
    fh, fw, cig, c_out = f.shape
    oh, ow = out_hw
    sh, sw = stride
    dh, dw = dil
    xp = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    # One [n, oh, ow, c_in] view per filter tap.
    taps = [xp[:, ky * dh: ky * dh + (oh - 1) * sh + 1: sh,
               kx * dw: kx * dw + (ow - 1) * sw + 1: sw, :]
            for ky in range(fh) for kx in range(fw)]
    cog = c_out // group
    if cig == 1 and group == c_in:
        # Depthwise: output channel o multiplies input channel o // multiplier.
        mult = c_out // c_in
        y = np.zeros((n, oh, ow, c_out), x.dtype)
        for t, tap in enumerate(taps):
            src = tap if mult == 1 else np.repeat(tap, mult, axis=3)
            y += src * f[t // fw, t % fw, 0]
    else:
        cols = np.stack(taps, axis=3).reshape(n, oh, ow, fh * fw, group, cig)
        y = np.empty((n, oh, ow, c_out), x.dtype)
        for g in range(group):
            a = cols[..., g, :].reshape(n * oh * ow, fh * fw * cig)
            w = f[..., g * cog:(g + 1) * cog].reshape(fh * fw * cig, cog)
            y[..., g * cog:(g + 1) * cog] = (a @ w).reshape(n, oh, ow, cog)
    if b is not None:
        y += b
    return y


_CONV_PARAMS = {
    "stride": ParamSpec("tensor", ("uint",), shape=(2,), default=lambda: _pair([1, 1])),
    "pad_amount": ParamSpec("tensor", ("uint",), shape=(2, 2),
                            default=lambda: _pair([[0, 0], [0, 0]])),
    "dilation": ParamSpec("tensor", ("uint",), shape=(2,), default=lambda: _pair([1, 1])),
}


class Conv2d(_ConvBase):
    params = {
        **_CONV_PARAMS,
        "group": ParamSpec("scalar", ("uint",), default=1),
        # Only a hint for sparse weights; it does not change the result.
        "reuse_sparse_indices": ParamSpec("scalar", ("bool",), default=False),
    }


class DepthWiseConv2d(_ConvBase):
    params = dict(_CONV_PARAMS)
    depthwise = True


__all__ = ["Conv2d", "DepthWiseConv2d", "conv2d_reference", "conv_output_size"]
