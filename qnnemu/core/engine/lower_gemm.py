"""C lowering of the float GEMM family (QNN op definitions "FullyConnected", "MatMul", "Conv2d",
"DepthWiseConv2d", "TransposeConv2d") on float32 values (float16 math included: the plan's
roundings around the op are the core's converters).  The 1-D convolutions are not lowered: the
HTP implements them on no arch, so graphFinalize refuses them (docs/op-support.md).

Kernels (csrc/eng_gemm.c): ``qe_k_gemm`` (FullyConnected, MatMul folded into one product, 1x1
convolutions), ``qe_k_gemm_batched`` (MatMul with batches), ``qe_k_conv2d`` (implicit GEMM),
``qe_k_depthwise2d``, ``qe_k_tconv2d`` (GEMM + col2im).  Each lowering follows the decisions of
the op's fast path (qnnemu/ops/matmul.py, qnnemu/ops/conv.py, qnnemu/ops/_fast.py) from the
shapes alone, so the C step makes the same C GEMM calls with the same M, N, K, thread limit
and bias handling: the results are equal bit for bit (csrc/eng_gemm.c says why the thread
split and the operand packing do not matter).  The quantized integer pipeline
(IntegerAccumulation) is not lowered here; with ``QNNEMU_GEMM=blas`` or
``QNNEMU_KERNELS=reference`` the Python steps use numpy and every step here is Unsupported.

A float Relu / ReluMinMax folded into its producer (qnnemu/core/plan.py, ``ActivationEpilogue``)
is one more integer parameter of the producer's kernel (1: relu, 2: clip; the bounds as float
parameters): the kernels apply it to each finished tile.  In float16 math the activation follows
the output's rounding (``qe_k_act`` in place after it).  The activation's own step
(``FoldedIntoProducer``) is ``qe_k_nop``.

Static weights are prepared at lowering by the op itself (its packed GEMM operand, shared with
the Python step) and handed to C as constants; the gathered pixels of a strided 1x1
convolution and the per-tap products of a transposed one live in scratch regions of the arena.
"""
from __future__ import annotations

import math

import numpy as np

from ...ops import _fast
from ...ops.conv import (
    Conv2d,
    DepthWiseConv2d,
    TransposeConv2d,
    runs_depthwise,
)
from ...ops.matmul import FullyConnected, MatMul
from .. import plan as plan_mod
from .lowering import F32, Unsupported, lowers, lowers_impl


def _require_c_gemm() -> None:
    if not _fast.use_c_gemm():
        raise Unsupported("the Python path's GEMMs run in numpy (QNNEMU_GEMM=blas or "
                          "QNNEMU_KERNELS=reference)")


def _float_inputs(ctx, n: int) -> None:
    for i in range(n):
        if ctx.present(i) and ctx.in_conv(i) is None and ctx.in_dtype(i) != F32:
            raise Unsupported(f"input {i} is stored as {ctx.in_dtype(i)}")


def _operand_buffer(ctx, array: np.ndarray | _fast.PackedB) -> tuple[int, int]:
    """(buffer, packed flag) of a static GEMM right operand the op prepared."""
    if isinstance(array, _fast.PackedB):
        return ctx.const(array.buf), 1
    return ctx.const(np.ascontiguousarray(array, dtype=np.float32)), 0


def _bias(ctx, i: int) -> tuple[tuple[int, ...], int]:
    if ctx.n_in <= i or not ctx.present(i):
        return (), 0
    return (ctx.input_f32(i),), 1


def _static(ctx, i: int) -> np.ndarray | None:
    """``ctx.static(i)``, None for a dynamic input (the core's raises KeyError for those)."""
    slot = ctx.step.reads[i]
    return ctx.static(i) if slot >= 0 and slot in ctx.plan.statics else None


def _small() -> int:
    return int(_fast.SINGLE_THREAD_MAX_FMAS)


def _act(act, rounding: int = 0) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The extra (ints, floats) of a kernel for a folded activation ``act`` (mode, lo, hi) after
    ``rounding`` (``LowerCtx.fused_rounding``: in the bits above the mode, csrc/kernels.c)."""
    if act is None and not rounding:
        return (), ()
    mode, lo, hi = act if act is not None else (0, 0.0, 0.0)
    return (int(mode) | rounding << 8,), (float(lo), float(hi))


# ---- FullyConnected --------------------------------------------------------------------------
@lowers("FullyConnected")
def fully_connected(ctx) -> None:
    _fully_connected(ctx, ctx.impl, None)


def _fully_connected(ctx, op, act) -> None:
    if type(op) is not FullyConnected or ctx.n_out != 1:
        raise Unsupported("a wrapped FullyConnected (integer accumulation)")
    _require_c_gemm()
    _float_inputs(ctx, ctx.n_in)
    m, k = ctx.in_shape(1)
    rows = math.prod(ctx.in_shape(0)) // k if k else 0
    x = ctx.input_f32(0)
    w = _static(ctx, 1)
    if w is not None and ctx.in_conv(1) is None and op._static_w.static:
        b_buf, packed = _operand_buffer(ctx, op._static_w.get(w))
        rsb, csb = m, 1
    else:
        b_buf, packed = ctx.input_f32(1), 0
        rsb, csb = 1, k      # w.T: a transposed view of the [m, k] weights
    bias, has_bias = _bias(ctx, 2)
    out, rounding = ctx.output_f32_rounding(0)
    ai, ad = _act(act, rounding)
    ctx.emit("qe_k_gemm", (x, b_buf, out) + bias,
             (rows, m, k, k, 1, rsb, csb, packed, has_bias,
              int(rows * m * k < _fast.gemm_single_limit(rows))) + ai, ad)


# ---- MatMul ----------------------------------------------------------------------------------
@lowers("MatMul")
def matmul(ctx) -> None:
    _matmul(ctx, ctx.impl, None)


def _matmul(ctx, op, act) -> None:
    if type(op) is not MatMul or ctx.n_out != 1:
        raise Unsupported("a wrapped MatMul (integer accumulation)")
    _require_c_gemm()
    _float_inputs(ctx, 2)
    t0 = bool(op.param_values.get("transpose_in0", False))
    t1 = bool(op.param_values.get("transpose_in1", False))
    a_shape, b_stored = ctx.in_shape(0), ctx.in_shape(1)
    a = ctx.input_f32(0)
    static = _static(ctx, 1)
    packed_buf = None
    if static is not None and ctx.in_conv(1) is None and op._static_b.static:
        prepared = op._static_b.get(static)     # transposed already when transpose_in1
        if isinstance(prepared, _fast.PackedB):
            packed_buf = ctx.const(prepared.buf)
            plain = np.ascontiguousarray(prepared.matrix, dtype=np.float32)
        else:
            plain = np.ascontiguousarray(prepared, dtype=np.float32)
        b_buf, b_shape, b_t = ctx.const(plain), plain.shape, False
    else:
        b_buf = ctx.input_f32(1)
        b_shape = b_stored[:-2] + b_stored[-2:][::-1] if t1 else b_stored
        b_t = t1
    k, n = b_shape[-2:]
    # (row stride, column stride) of the [k, n] operand
    rsb, csb = (1, k) if b_t else (n, 1)
    out, rounding = ctx.output_f32_rounding(0)
    ai, ad = _act(act, rounding)
    if len(b_shape) == 2 and not t0:
        # _fast.matmul: a's batch folded into the rows of one GEMM (a PackedB operand too)
        rows = math.prod(a_shape[:-1])
        if packed_buf is not None:
            b_buf, rsb, csb = packed_buf, n, 1
        ctx.emit("qe_k_gemm", (a, b_buf, out),
                 (rows, n, k, k, 1, rsb, csb, int(packed_buf is not None), 0,
                  int(rows * n * k < _fast.gemm_single_limit(rows))) + ai, ad)
        return
    m = a_shape[-1] if t0 else a_shape[-2]
    rsa, csa = (1, m) if t0 else (k, 1)
    if len(a_shape) == 2 and len(b_shape) == 2:
        ctx.emit("qe_k_gemm", (a, b_buf, out),
                 (m, n, k, rsa, csa, rsb, csb, 0, 0, int(m * n * k < _fast.gemm_single_limit(m))) + ai, ad)
        return
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    nb = math.prod(batch)

    def offsets(shape):
        idx = np.arange(math.prod(shape[:-2]), dtype=np.int64)
        idx = np.broadcast_to(idx.reshape(shape[:-2]), batch).reshape(-1)
        return np.ascontiguousarray(idx * (shape[-2] * shape[-1]))
    a_off, b_off = ctx.const(offsets(a_shape)), ctx.const(offsets(b_shape))
    ctx.emit("qe_k_gemm_batched", (a, b_buf, out, a_off, b_off),
             (nb, m, n, k, rsa, csa, rsb, csb, int(nb * m * n * k < _small())) + ai, ad)


# ---- convolutions ----------------------------------------------------------------------------
CONV_TYPES = {"Conv2d": Conv2d, "DepthWiseConv2d": DepthWiseConv2d, "TransposeConv2d": TransposeConv2d}


def _conv_geometry(ctx, op):
    x_shape, f_shape = ctx.in_shape(0), ctx.in_shape(1)
    g = op._geom if op._geom is not None else op.geometry(x_shape, f_shape, op.param_values)
    return g, tuple(x_shape[1:-1])


def _filter(ctx, op, g):
    """(float32 filter buffer or None, GEMM operand buffer, packed flag, static) as the op's
    ``_packed`` prepares them for its Python step."""
    f = _static(ctx, 1)
    if f is None or ctx.in_conv(1) is not None or not op._static_filter:
        return None, None, 0, False
    fc, wmat = op._packed(f, op._geom if op._geom is not None else g)
    if wmat is None:
        return ctx.const(fc), None, 0, True
    buf, packed = _operand_buffer(ctx, wmat)
    return ctx.const(fc), buf, packed, True


@lowers(*CONV_TYPES)
def convolution(ctx) -> None:
    _convolution(ctx, ctx.impl, None)


def _convolution(ctx, op, act) -> None:
    if type(op) is not CONV_TYPES[ctx.node.op_type] or ctx.n_out != 1:
        raise Unsupported("a wrapped convolution (integer accumulation)")
    _require_c_gemm()
    _float_inputs(ctx, ctx.n_in)
    g, sp = _conv_geometry(ctx, op)
    x_shape, f_shape = ctx.in_shape(0), ctx.in_shape(1)
    n, c_in = x_shape[0], x_shape[-1]
    h, w = sp
    fh, fw = g.k
    sh, sw = g.stride
    (pt, pb), (pl, pr) = g.pad
    dh, dw = g.dilation
    oh, ow = g.out
    x = ctx.input_f32(0)
    bias, has_bias = _bias(ctx, 2)
    fbuf, wbuf, packed, static = _filter(ctx, op, g)
    geo = (n, h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw)
    ai, ad = _act(act, ctx.fused_rounding(0))
    if op.kind == "transpose":
        _transpose(ctx, op, g, geo, x, bias, has_bias, wbuf, packed, static, f_shape, ai, ad)
        return
    c_out = f_shape[-1]
    cig = f_shape[-2]
    if runs_depthwise(c_in, cig, g.group):            # conv_fast's first test
        if fbuf is None:
            fbuf = ctx.input_f32(1)
        out, _ = ctx.output_f32_rounding(0)
        ctx.emit("qe_k_depthwise2d", (x, fbuf, out) + bias,
                 (n, h, w, c_in, fh, fw, c_out, oh, ow, sh, sw, pt, pl, dh, dw, has_bias) + ai, ad)
        return
    group = g.group
    K = fh * fw * cig
    P = n * oh * ow
    if wbuf is None and fbuf is not None:
        # a DepthWiseConv2d of one input channel (conv_fast): its filter is the [K, c_out] operand
        wbuf, packed, wgs, wrs = fbuf, 0, K * c_out, c_out
    elif wbuf is None:
        # a dynamic filter [*k, cig, c_out] is the [K, c_out] operand; group gi's columns start
        # at gi * cog with row stride c_out
        wbuf, packed, wgs, wrs = ctx.input_f32(1), 0, c_out // group, c_out
    else:
        wgs, wrs = K * (c_out // group), c_out // group   # [group, K, cog] (pack_conv_filter)
    if group == 1 and fh == fw == 1 and not (pt or pb or pl or pr):
        mode = 0
        scratch = ctx.scratch(max(4 * P * c_in, 64)) if (sh, sw) != (1, 1) else x
    else:
        # _fast.conv2d: the implicit GEMM (qe_sconv2d) reads the input in place
        mode, scratch = (1 if group == 1 else 2), x
    out, _ = ctx.output_f32_rounding(0)
    ctx.emit("qe_k_conv2d", (x, wbuf, out, scratch) + bias,
             geo + (c_out, group, mode, packed, has_bias, int(_fast.CONV_SINGLE_THREAD_MAX_FMAS),
                    0, wgs, wrs) + ai, ad)


def _transpose(ctx, op, g, geo, x, bias, has_bias, wbuf, packed, static, f_shape, ai, ad) -> None:
    if not static:
        raise Unsupported("a transposed convolution with a dynamic filter")
    n, h, w, c_in = geo[:4]
    group = g.group
    c_out = f_shape[-1] * group
    T = g.k[0] * g.k[1]
    cols = ctx.scratch(max(4 * n * h * w * T * c_out, 64))
    out, _ = ctx.output_f32_rounding(0)
    ctx.emit("qe_k_tconv2d", (x, wbuf, out, cols) + bias,
             geo + (c_out, group, packed, has_bias,
                    # group 1: one _fast.gemm of n*h*w rows; groups: a batched _fast.matmul
                    _fast.gemm_single_limit(n * h * w) if group == 1 else _small()) + ai, ad)


# ---- activations folded into these ops (qnnemu/core/plan.py, "relu folded into convolutions") --
_BY_OP = {"FullyConnected": _fully_connected, "MatMul": _matmul, **dict.fromkeys(CONV_TYPES, _convolution)}


@lowers_impl(plan_mod.ActivationEpilogue)
def activation_epilogue(ctx) -> None:
    wrap = ctx.impl
    lower = _BY_OP.get(ctx.node.op_type)
    if lower is None:
        raise Unsupported(f"an activation folded into {ctx.node.op_type}")
    act = (wrap.mode, wrap.lo, wrap.hi)
    if wrap.rounded is None or ctx.fused_rounding(0):
        # the kernel's epilogue (in float16 math: the rounding, then the activation)
        lower(ctx, wrap.impl, act)
        return
    if wrap.mode >= 5:
        raise Unsupported("a float16 SiLU whose producer does not round in its epilogue")
    # float16 math: the activation of the rounded result, in place (rounding it again would
    # change nothing: it is a float16 value or a float16 bound)
    lower(ctx, wrap.impl, None)
    ctx.finish()
    slot = ctx.step.writes[0]
    if ctx.out_dtype(0) != F32:
        raise Unsupported(f"a folded activation's output stored as {ctx.out_dtype(0)}")
    buf = ctx.b.slot_buffer(slot, ctx.index)
    ctx.emit("qe_k_act", (buf,), (math.prod(ctx.out_shape(0)), wrap.mode), (wrap.lo, wrap.hi))


@lowers_impl(plan_mod.FoldedIntoProducer)
def folded_into_producer(ctx) -> None:
    ctx.emit("qe_k_nop", ())
