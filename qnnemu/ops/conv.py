"""Convolutions (QnnOpDef.h): Conv1d, Conv2d, Conv3d, DepthWiseConv1d, DepthWiseConv2d,
TransposeConv1d, TransposeConv2d, TransposeConv3d.

Layouts follow the QNN op definitions, channels last:

- input [b, (d,) (h,) w, c_in], output [b, (d,) (h,) w, c_out];
- Conv*d filter [(fd,) (fh,) fw, c_in / group, c_out];
- DepthWiseConv*d filter [(fh,) fw, 1, c_out], c_out = c_in * multiplier, output channel o
  reads input channel o // multiplier;
- TransposeConv*d filter [(fd,) (fh,) fw, c_in, c_out / group] (what ONNX Runtime's QNN EP
  makes of an ONNX ConvTranspose weight [c_in, c_out / group, kh, kw]: a CNHW -> HWCN
  transpose); output channels = group * filter's last dimension;
- bias [c_out], optional.

``pad_amount`` is [[before, after], ...] per spatial axis ([before, after] for the 1-D ops).
The 1-D ops take ``stride``/``dilation``/``output_padding`` as scalars (a one-element tensor
is accepted too).  Output size per spatial axis:

- convolution: floor((in + before + after - ((k - 1) * dilation + 1)) / stride) + 1;
- transposed: stride * (in - 1) + (k - 1) * dilation + 1 - before - after + output_padding
  (pad_amount crops the full result; output_padding extends it at the end).

``reuse_sparse_indices`` (Conv2d) / ``reuse_sparse_indicies`` (Conv3d, spelled as in
QnnOpDef.h) only hint at sparse weight storage and do not change the result.

Kernels: ``config.kernels == "reference"`` runs the numpy formulas below (taps gathered and
multiplied per group; transposed convolution as a convolution of the zero-upsampled input).
``"fast"`` runs a C im2col and one GEMM per layer (``_fast.gemm_backend()``: numpy's BLAS
or the C GEMM; 1x1 convolutions straight on the input, no im2col), depthwise convolutions in
C, and transposed convolutions as one GEMM followed by a col2im scatter.  Static filters
are reshaped (and packed for the C GEMM) into GEMM operands once, when the op is created,
or on the first run for filters the plan hands over converted (fixed point dequantized,
float16-rounded), keyed by the identity of the array the op receives.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..headers import Q
from . import _fast
from .base import (
    Op,
    OpCheckError,
    Param,
    ParamSpec,
    TensorSpec,
    check_rank,
    check_real,
    from_compute,
    same_spec,
    to_compute,
)

F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16

# im2col rows are produced in chunks of at most this many floats (16 MiB), so that huge
# images do not need a huge buffer.
IM2COL_CHUNK = 1 << 22


def _u32(value) -> np.ndarray:
    return np.array(value, dtype=np.uint32)


def conv_output_size(size: int, pad0: int, pad1: int, k: int, stride: int, dil: int) -> int:
    """floor((size + pads - effective filter) / stride) + 1; <= 0 if the filter does not fit."""
    span = size + pad0 + pad1 - ((k - 1) * dil + 1)
    return span // stride + 1 if span >= 0 else 0


def transpose_conv_output_size(size: int, pad0: int, pad1: int, k: int, stride: int,
                               dil: int, out_pad: int) -> int:
    return stride * (size - 1) + (k - 1) * dil + 1 - pad0 - pad1 + out_pad


def check_real_inputs(op: str, inputs: list[TensorSpec]) -> None:
    """Every input holds real values (float or quantized fixed point, mixes of fixed-point
    types are normal: uint8 activations, int8 weights, int32 bias); float inputs must share
    one float type (a float16 graph does not take float32 weights)."""
    for i, spec in enumerate(inputs):
        check_real(op, i, spec)
    first = None
    for i, spec in enumerate(inputs):
        if spec.dtype in (F32, F16):
            if first is None:
                first = (i, spec.dtype)
            elif spec.dtype != first[1]:
                from ..spec import dtypes
                raise OpCheckError(f"QNNEMU-{op}-dtype-mismatch", f"inputTensors[{i}].dataType",
                                   f"{op} float inputs must share one float type: input "
                                   f"{first[0]} is {dtypes.name(first[1])}, input {i} is "
                                   f"{dtypes.name(spec.dtype)}")


class Geometry(NamedTuple):
    k: tuple[int, ...]            # filter spatial size
    stride: tuple[int, ...]
    pad: tuple[tuple[int, int], ...]
    dilation: tuple[int, ...]
    group: int
    out: tuple[int, ...]          # output spatial size
    out_pad: tuple[int, ...]      # transposed convolutions' output_padding, else zeros

    def lift(self) -> Geometry:
        """The 1-D geometry as a 2-D one with height 1."""
        return Geometry((1,) + self.k, (1,) + self.stride, ((0, 0),) + self.pad,
                        (1,) + self.dilation, self.group, (1,) + self.out, (0,) + self.out_pad)


def _values(op: str, name: str, value, n: int, least: int) -> tuple[int, ...]:
    v = np.asarray(value, dtype=np.int64).reshape(-1)
    if v.size != n:
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"{name} needs {n} value(s), got {v.tolist()}")
    if (v < least).any():
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"every {name} value must be >= {least}, got {v.tolist()}")
    return tuple(int(a) for a in v)


# ---- the computations ------------------------------------------------------------------------
def _pad_input(x: np.ndarray, pad) -> np.ndarray:
    if not any(a or b for a, b in pad):
        return np.ascontiguousarray(x)
    shape = (x.shape[0],) + tuple(s + a + b for s, (a, b) in zip(x.shape[1:-1], pad)) + \
        (x.shape[-1],)
    xp = np.zeros(shape, x.dtype)
    xp[(slice(None),) + tuple(slice(a, a + s) for s, (a, _) in zip(x.shape[1:-1], pad))] = x
    return xp


def _taps(xp: np.ndarray, g: Geometry):
    """One [n, *out, c] strided view of the padded input per filter tap (row-major taps)."""
    for t in np.ndindex(*g.k):
        yield xp[(slice(None),) + tuple(
            slice(ti * d, ti * d + (o - 1) * s + 1, s)
            for ti, d, o, s in zip(t, g.dilation, g.out, g.stride))]


def _depthwise_taps(x: np.ndarray, f: np.ndarray, b, g: Geometry) -> np.ndarray:
    """Depthwise convolution as a sum over taps of (input view * filter tap), numpy only."""
    c_in, c_out = x.shape[-1], f.shape[-1]
    mult = c_out // c_in
    y = np.zeros((x.shape[0],) + g.out + (c_out,), np.float32)
    ftaps = f.reshape(-1, c_out)
    for t, tap in enumerate(_taps(_pad_input(x, g.pad), g)):
        y += (tap if mult == 1 else np.repeat(tap, mult, axis=-1)) * ftaps[t]
    if b is not None:
        y += b
    return y


def conv_reference(x: np.ndarray, f: np.ndarray, b, g: Geometry) -> np.ndarray:
    """numpy N-d convolution: gathers the strided/dilated taps, then one matmul per group."""
    S = len(g.k)
    n, c_in = x.shape[0], x.shape[-1]
    cig, c_out = f.shape[S], f.shape[S + 1]
    if cig == 1 and g.group == c_in:
        return _depthwise_taps(x, f, b, g)
    taps = list(_taps(_pad_input(x, g.pad), g))
    T, group, cog = len(taps), g.group, c_out // g.group
    cols = np.stack(taps, axis=S + 1).reshape((n,) + g.out + (T, group, cig))
    y = np.empty((n,) + g.out + (c_out,), np.result_type(x, f))
    for gi in range(group):
        a = cols[..., gi, :].reshape(-1, T * cig)
        w = f[..., gi * cog:(gi + 1) * cog].reshape(T * cig, cog)
        y[..., gi * cog:(gi + 1) * cog] = (a @ w).reshape((n,) + g.out + (cog,))
    if b is not None:
        y += b
    return y


def transpose_conv_reference(x: np.ndarray, f: np.ndarray, b, g: Geometry) -> np.ndarray:
    """numpy N-d transposed convolution, as the convolution of the zero-upsampled input
    (stride - 1 zeros between samples) with the spatially flipped filter, padded by
    (k - 1) * dilation - pad_before before and ... - pad_after + output_padding after."""
    S = len(g.k)
    n, sp, c_in = x.shape[0], x.shape[1:-1], x.shape[-1]
    group, cog = g.group, f.shape[-1]
    cig = c_in // group
    up = np.zeros((n,) + tuple((s - 1) * st + 1 for s, st in zip(sp, g.stride)) + (c_in,),
                  x.dtype)
    up[(slice(None),) + tuple(slice(None, None, st) for st in g.stride)] = x
    flipped = f[(slice(None, None, -1),) * S]
    # Transposed filter [.., c_in, cog] -> convolution filter [.., cig, group * cog].
    wc = flipped.reshape(g.k + (group, cig, cog))
    wc = wc.transpose(tuple(range(S)) + (S + 1, S, S + 2)).reshape(g.k + (cig, group * cog))
    pad, crop = [], []
    for k, d, (p0, p1), op in zip(g.k, g.dilation, g.pad, g.out_pad):
        before, after = (k - 1) * d - p0, (k - 1) * d - p1 + op
        pad.append((max(before, 0), max(after, 0)))
        crop.append((max(-before, 0), max(-after, 0)))
    up = up[(slice(None),) + tuple(slice(c0, s - c1) for (c0, c1), s in zip(crop, up.shape[1:-1]))]
    cg = Geometry(g.k, (1,) * S, tuple(pad), g.dilation, group, g.out, (0,) * S)
    return conv_reference(up, wc, b, cg)


def _im2col_numpy(x: np.ndarray, g: Geometry) -> np.ndarray:
    """[group, n * prod(out), prod(k) * cig] im2col matrices, numpy only (any rank)."""
    S = len(g.k)
    n, c_in = x.shape[0], x.shape[-1]
    cig = c_in // g.group
    xp = _pad_input(x, g.pad)
    st = xp.strides
    view = as_strided(
        xp, (n,) + g.out + g.k + (g.group, cig),
        (st[0],) + tuple(st[1 + i] * g.stride[i] for i in range(S)) +
        tuple(st[1 + i] * g.dilation[i] for i in range(S)) + (cig * st[-1], st[-1]),
        writeable=False)
    P, K = n * math.prod(g.out), math.prod(g.k) * cig
    if g.group == 1:
        return view.reshape(1, P, K)
    return np.moveaxis(view, 2 * S + 1, 0).reshape(g.group, P, K)


def runs_depthwise(c_in: int, cig: int, group: int) -> bool:
    """Whether a convolution runs the depthwise kernels: one input channel per group, and more
    than one group.  One input channel into c_out filters (an STFT written as a convolution, a
    grayscale first layer) is a GEMM of K = taps instead: the depthwise kernels' channel
    multiplier path is 12-150x slower there (1x256 taps, stride 128, 258 filters: 390 vs 10 us;
    224x224, 3x3, 32 filters: 10.7 vs 0.3 ms)."""
    return cig == 1 and group == c_in and c_in > 1


def conv_fast(x: np.ndarray, wmat, f: np.ndarray, b, g: Geometry) -> np.ndarray:
    """im2col + GEMM convolution.  ``wmat``: the filter as GEMM operand ([K, c_out] for one
    group, possibly a ``_fast.PackedB``; [group, K, cog] otherwise; see ``pack_conv_filter``);
    ``f``: the float32 filter (depthwise kernels read it directly)."""
    S = len(g.k)
    if S == 1:
        y = conv_fast(x[:, None], wmat, f.reshape((1,) + f.shape), b, g.lift())
        return y[:, 0]
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, c_in = x.shape[0], x.shape[-1]
    c_out = f.shape[-1]
    cig = f.shape[S]
    if runs_depthwise(c_in, cig, g.group):
        if S == 2 and _fast.enabled():
            return _fast.depthwise2d(x, f, b, g.stride, g.pad, g.dilation, g.out)
        return _depthwise_taps(x, f, b, g)
    if wmat is None:   # a DepthWiseConv2d of one input channel: its filter is the [K, c_out] operand
        wmat = f.reshape(-1, c_out)
    P = n * math.prod(g.out)
    out_shape = (n,) + g.out + (c_out,)
    if g.group == 1 and all(k == 1 for k in g.k) and not any(a or c for a, c in g.pad):
        # 1x1: the (strided) input is the GEMM's left operand.
        xs = x if all(s == 1 for s in g.stride) else \
            x[(slice(None),) + tuple(slice(None, None, s) for s in g.stride)]
        return _fast.gemm(xs.reshape(P, c_in), wmat, b,
                          single_thread_below=_fast.CONV_SINGLE_THREAD_MAX_FMAS).reshape(out_shape)
    K = math.prod(g.k) * cig
    if S == 2 and _fast.use_c_gemm():
        # implicit GEMM: the C GEMM reads the receptive fields in place (no im2col matrix)
        return _fast.conv2d(x, wmat, b, g.k, g.stride, g.pad, g.dilation, g.out, g.group,
                            c_out).reshape(out_shape)
    if S == 2 and _fast.enabled():
        if g.group == 1:
            y = np.empty((P, c_out), np.float32)
            rows = max(1, min(P, IM2COL_CHUNK // max(K, 1)))
            buf = np.empty((rows, K), np.float32)
            for p0 in range(0, P, rows):
                p1 = min(P, p0 + rows)
                cols = _fast.im2col2d(x, g.k, g.stride, g.pad, g.dilation, g.out, 0, c_in,
                                      p0, p1, out=buf[:p1 - p0])
                _fast.gemm(cols, wmat, b, out=y[p0:p1])
            return y.reshape(out_shape)
        cols = np.empty((g.group, P, K), np.float32)
        for gi in range(g.group):
            _fast.im2col2d(x, g.k, g.stride, g.pad, g.dilation, g.out, gi * cig, cig, 0, P,
                           out=cols[gi])
    else:
        cols = _im2col_numpy(x, g)
    if g.group == 1:
        return _fast.gemm(cols[0], wmat, b).reshape(out_shape)
    y = _fast.matmul(cols, wmat)  # [group, P, cog]
    y = y.transpose(1, 0, 2).reshape(P, c_out)
    if b is not None:
        y += b
    return y.reshape(out_shape)


def transpose_conv_fast(x: np.ndarray, wmat, b, g: Geometry, c_out: int) -> np.ndarray:
    """One GEMM for all taps (``wmat``: [c_in, taps * c_out] or [group, cig, taps * cog],
    see ``pack_transpose_filter``), then a col2im scatter of the per-tap products."""
    S = len(g.k)
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, sp, c_in = x.shape[0], x.shape[1:-1], x.shape[-1]
    group, cog, T = g.group, c_out // g.group, math.prod(g.k)
    nP = n * math.prod(sp)
    X = x.reshape(nP, c_in)
    if group == 1:
        cols = _fast.gemm(X, wmat)                     # [nP, T * c_out]
        gstride = 0
    else:
        cig = c_in // group
        cols = _fast.matmul(X.reshape(nP, group, cig).transpose(1, 0, 2), wmat)  # [g, nP, T*cog]
        gstride = nP * T * cog
    y = np.empty((n,) + g.out + (c_out,), np.float32)
    y[...] = 0.0 if b is None else b
    if S <= 2 and _fast.enabled():
        g2 = g.lift() if S == 1 else g
        _fast.col2im2d(cols, (n,) + ((1,) if S == 1 else ()) + sp + (c_in,), group, cog, g2.k,
                       g2.stride, g2.pad, g2.dilation, y.reshape((n,) + g2.out + (c_out,)),
                       gstride, T * cog)
        return y
    colsv = cols.reshape((group, n) + sp + g.k + (cog,))
    full = tuple(max((s - 1) * st + (k - 1) * d + 1, p0 + o)
                 for s, st, k, d, (p0, _), o in zip(sp, g.stride, g.k, g.dilation, g.pad, g.out))
    yf = np.zeros((n,) + full + (group, cog), np.float32)
    for t in np.ndindex(*g.k):
        sl = tuple(slice(ti * d, ti * d + (s - 1) * st + 1, st)
                   for ti, d, s, st in zip(t, g.dilation, sp, g.stride))
        yf[(slice(None),) + sl] += np.moveaxis(colsv[(slice(None),) * (2 + S) + t], 0, -2)
    crop = yf[(slice(None),) + tuple(slice(p0, p0 + o) for (p0, _), o in zip(g.pad, g.out))]
    y += crop.reshape(y.shape)
    return y


def pack_conv_filter(f: np.ndarray, S: int, group: int) -> np.ndarray:
    """Conv filter [*k, cig, c_out] as GEMM right operand: [K, c_out] for one group (a view),
    [group, K, cog] otherwise; K = prod(k) * cig, taps row-major then channels."""
    f = np.ascontiguousarray(f, dtype=np.float32)
    K, c_out = math.prod(f.shape[:S + 1]), f.shape[-1]
    if group == 1:
        return f.reshape(K, c_out)
    cog = c_out // group
    return np.ascontiguousarray(f.reshape(K, group, cog).transpose(1, 0, 2))


def pack_transpose_filter(f: np.ndarray, S: int, group: int) -> np.ndarray:
    """Transposed-conv filter [*k, c_in, cog] as GEMM right operand: [c_in, T * cog] for
    one group, [group, cig, T * cog] otherwise (tap-major, then output channel)."""
    f = np.asarray(f, dtype=np.float32)
    T, c_in, cog = math.prod(f.shape[:S]), f.shape[S], f.shape[S + 1]
    w = f.reshape(T, group, c_in // group, cog).transpose(1, 2, 0, 3)
    w = np.ascontiguousarray(w).reshape(group, c_in // group, T * cog)
    return w[0] if group == 1 else w


# ---- the ops -----------------------------------------------------------------------------------
class _ConvBase(Op, register=False):
    inputs = ("in[0]", "in[1]", "in[2]?")
    nsp = 2           # spatial dimensions
    kind = "conv"     # "conv", "depthwise" or "transpose"

    @classmethod
    def parse_params(cls, params: dict[str, Param], strict: bool = False):
        if cls.nsp == 1:
            # The 1-D ops take scalars; a one-element tensor (and a [1, 2] pad_amount) is
            # accepted too.
            params = dict(params)
            for name, p in params.items():
                spec = cls.params.get(name)
                if spec is None or p.kind != "tensor":
                    continue
                arr = np.asarray(p.value)
                if spec.kind == "scalar" and arr.size == 1:
                    params[name] = Param(name, "scalar", p.dtype, arr.reshape(-1)[0].item())
                elif name == "pad_amount" and arr.shape == (1, 2):
                    params[name] = Param(name, "tensor", p.dtype, arr.reshape(2))
        return super().parse_params(params, strict)

    @classmethod
    def geometry(cls, x_shape, f_shape, params) -> Geometry:
        """Validated stride / pad / dilation / group and the output spatial size."""
        op, S = cls.op_type, cls.nsp
        stride = _values(op, "stride", params["stride"], S, 1)
        dil = _values(op, "dilation", params["dilation"], S, 1) if "dilation" in cls.params \
            else (1,) * S
        pad = np.asarray(params["pad_amount"], dtype=np.int64).reshape(S, 2)
        pad = tuple((int(a), int(b)) for a, b in pad)
        k = tuple(int(v) for v in f_shape[:S])
        sp = tuple(x_shape[1:1 + S])
        if cls.kind == "transpose":
            out_pad = _values(op, "output_padding", params["output_padding"], S, 0)
            out = tuple(transpose_conv_output_size(s, p0, p1, kk, st, d, o)
                        for s, (p0, p1), kk, st, d, o in zip(sp, pad, k, stride, dil, out_pad))
        else:
            out_pad = (0,) * S
            out = tuple(conv_output_size(s, p0, p1, kk, st, d)
                        for s, (p0, p1), kk, st, d in zip(sp, pad, k, stride, dil))
        group = x_shape[-1] if cls.kind == "depthwise" else int(params["group"])
        return Geometry(k, stride, pad, dil, group, out, out_pad)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op, S = cls.op_type, cls.nsp
        x, f = inputs[0], inputs[1]
        check_rank(op, 0, x, (S + 2,))
        check_rank(op, 1, f, (S + 2,))
        if len(inputs) > 2:
            check_rank(op, 2, inputs[2], (1,))
        check_real_inputs(op, inputs)
        c_in = x.shape[-1]
        f_cin, f_cout = f.shape[S], f.shape[S + 1]
        if cls.kind == "depthwise":
            if f_cin != 1:
                raise OpCheckError(f"QNNEMU-{op}-filter-channels", "inputTensors[1].dimensions",
                                   f"filter dimension {S} must be 1 for a depthwise filter, "
                                   f"got {list(f.shape)}")
            if c_in == 0 or f_cout % c_in != 0:
                raise OpCheckError(f"QNNEMU-{op}-multiplier", "inputTensors[1].dimensions",
                                   f"filter output channels ({f_cout}) must be a multiple of "
                                   f"the input channels ({c_in}); filter {list(f.shape)}")
            c_out = f_cout
        elif cls.kind == "transpose":
            group = int(params["group"])
            if group < 1 or c_in % group != 0:
                raise OpCheckError(f"QNNEMU-{op}-group", "params[group]",
                                   f"group must be >= 1 and divide the input channels "
                                   f"({c_in}); got {group}")
            if f_cin != c_in:
                raise OpCheckError(f"QNNEMU-{op}-filter-channels", "inputTensors[1].dimensions",
                                   f"filter dimension {S} must equal the input channels "
                                   f"({c_in}), got {list(f.shape)}")
            c_out = f_cout * group
        else:
            group = int(params["group"])
            if group < 1 or c_in % group != 0 or f_cout % group != 0:
                raise OpCheckError(f"QNNEMU-{op}-group", "params[group]",
                                   f"group must be >= 1 and divide both input channels "
                                   f"({c_in}) and output channels ({f_cout}); got {group}")
            if f_cin * group != c_in:
                raise OpCheckError(f"QNNEMU-{op}-filter-channels", "inputTensors[1].dimensions",
                                   f"filter dimension {S} must be input channels / group = "
                                   f"{c_in // group}, got {list(f.shape)}")
            c_out = f_cout
        if len(inputs) > 2 and tuple(inputs[2].shape) != (c_out,):
            raise OpCheckError(f"QNNEMU-{op}-bias-shape", "inputTensors[2].dimensions",
                               f"bias must have dimensions [{c_out}] (output channels), got "
                               f"{list(inputs[2].shape)}")
        g = cls.geometry(x.shape, f.shape, params)
        if cls.kind == "transpose":
            for o, st, d in zip(g.out_pad, g.stride, g.dilation):
                if o >= max(st, d):
                    raise OpCheckError(f"QNNEMU-{op}-output-padding", "params[output_padding]",
                                       f"each output_padding must be smaller than its stride "
                                       f"(or dilation); output_padding {list(g.out_pad)}, "
                                       f"stride {list(g.stride)}")
        if any(o < 1 for o in g.out):
            sp = " x ".join(f"{s}+{a + b}" for s, (a, b) in zip(x.shape[1:-1], g.pad))
            eff = " x ".join(str((k - 1) * d + 1) for k, d in zip(g.k, g.dilation))
            raise OpCheckError(f"QNNEMU-{op}-output-size", "inputTensors[0].dimensions",
                               f"input {sp} (size+padding), dilated filter {eff}: the output "
                               f"would be {list(g.out)}, which is empty")
        return [same_spec(x, shape=(x.shape[0],) + g.out + (c_out,))]

    # ---- running ----------------------------------------------------------------------------
    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._geom = None
        self._wsrc = None      # the filter array the packed operand was made from
        self._wpack = None
        specs = self.input_specs
        self._static_filter = len(specs) > 1 and specs[1].data is not None
        if len(specs) > 1:
            try:
                self._geom = self.geometry(specs[0].shape, specs[1].shape, params)
            except OpCheckError:
                self._geom = None
        if self._static_filter and specs[1].dtype in (F32, F16) and self._geom is not None:
            self._wsrc = specs[1].data
            self._wpack = self._pack(specs[1].data, self._geom, static=True)

    def _pack(self, f: np.ndarray, g: Geometry, static: bool = False):
        """(float32 filter, GEMM right operand); a static operand is also packed for the C
        GEMM when that is in use."""
        fc = np.ascontiguousarray(to_compute(f), dtype=np.float32)
        if self.kind == "depthwise":
            return fc, None  # the depthwise kernels read the filter itself
        if self.kind == "transpose":
            w = pack_transpose_filter(fc, self.nsp, g.group)
        else:
            w = pack_conv_filter(fc, self.nsp, g.group)
        if static and g.group == 1:
            w = _fast.pack_operand(w)
        return fc, w

    def _packed(self, f: np.ndarray, g: Geometry):
        """(float32 filter, GEMM operand), packed once for a static filter."""
        if f is self._wsrc:
            return self._wpack
        pack = self._pack(f, g, self._static_filter)
        if self._static_filter:
            self._wsrc, self._wpack = f, pack
        return pack

    def _run(self, x, f, b=None, **params):
        g = self._geom if self._geom is not None else self.geometry(x.shape, f.shape, params)
        dtype = x.dtype
        x, b = to_compute(x), to_compute(b)
        if _fast.fast():
            fc, wmat = self._packed(f, g)
            b = None if b is None else b.astype(np.float32, copy=False)
            if self.kind == "transpose":
                y = transpose_conv_fast(x, wmat, b, g, fc.shape[-1] * g.group)
            else:
                y = conv_fast(x, wmat, fc, b, g)
        elif self.kind == "transpose":
            y = transpose_conv_reference(x, to_compute(f), b, g)
        else:
            y = conv_reference(x, to_compute(f), b, g)
        return from_compute(y, dtype)


def _spatial_params(S: int, dilation: bool = True) -> dict[str, ParamSpec]:
    if S == 1:
        p = {"stride": ParamSpec("scalar", ("uint",), default=1),
             "pad_amount": ParamSpec("tensor", ("uint",), shape=(2,),
                                     default=lambda: _u32([0, 0]))}
        if dilation:
            p["dilation"] = ParamSpec("scalar", ("uint",), default=1)
        return p
    p = {"stride": ParamSpec("tensor", ("uint",), shape=(S,), default=lambda: _u32([1] * S)),
         "pad_amount": ParamSpec("tensor", ("uint",), shape=(S, 2),
                                 default=lambda: _u32([[0, 0]] * S))}
    if dilation:
        p["dilation"] = ParamSpec("tensor", ("uint",), shape=(S,),
                                  default=lambda: _u32([1] * S))
    return p


def _output_padding(S: int) -> ParamSpec:
    if S == 1:
        return ParamSpec("scalar", ("uint",), default=0)
    return ParamSpec("tensor", ("uint",), shape=(S,), default=lambda: _u32([0] * S))


_GROUP = ParamSpec("scalar", ("uint",), default=1)
_SPARSE = ParamSpec("scalar", ("bool",), default=False)  # a storage hint only


class Conv1d(_ConvBase):
    nsp = 1
    params = {**_spatial_params(1), "group": _GROUP}


class Conv2d(_ConvBase):
    params = {**_spatial_params(2), "group": _GROUP, "reuse_sparse_indices": _SPARSE}


class Conv3d(_ConvBase):
    nsp = 3
    params = {**_spatial_params(3), "group": _GROUP, "reuse_sparse_indicies": _SPARSE}


class DepthWiseConv1d(_ConvBase):
    nsp = 1
    kind = "depthwise"
    params = _spatial_params(1)


class DepthWiseConv2d(_ConvBase):
    kind = "depthwise"
    params = _spatial_params(2)


class TransposeConv1d(_ConvBase):
    nsp = 1
    kind = "transpose"
    params = {**_spatial_params(1, dilation=False), "group": _GROUP,
              "output_padding": _output_padding(1)}


class TransposeConv2d(_ConvBase):
    kind = "transpose"
    params = {**_spatial_params(2, dilation=False), "group": _GROUP,
              "output_padding": _output_padding(2)}


class TransposeConv3d(_ConvBase):
    nsp = 3
    kind = "transpose"
    params = {**_spatial_params(3), "group": _GROUP, "output_padding": _output_padding(3)}


def conv2d_reference(x, f, b, stride, pad, dil, group, out_hw):
    """Kept for callers of the former 2-D helper: ``conv_reference`` with 2-D arguments."""
    g = Geometry(tuple(f.shape[:2]), tuple(stride), tuple(tuple(p) for p in pad), tuple(dil),
                 group, tuple(out_hw), (0, 0))
    return conv_reference(x, f, b, g)


__all__ = ["Conv1d", "Conv2d", "Conv3d", "DepthWiseConv1d", "DepthWiseConv2d",
           "TransposeConv1d", "TransposeConv2d", "TransposeConv3d", "Geometry",
           "conv_reference", "transpose_conv_reference", "conv_fast", "transpose_conv_fast",
           "pack_conv_filter", "pack_transpose_filter", "conv_output_size",
           "transpose_conv_output_size", "conv2d_reference", "check_real_inputs"]
