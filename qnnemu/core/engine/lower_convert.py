"""C lowering of the conversion ops Quantize, Dequantize and Convert (QNN op definitions
"Quantize", "Dequantize", "Convert"; qnnemu/ops/cast.py): float32 <-> 8/16-bit fixed point, per
tensor (Dequantize also per axis), and fixed point -> fixed point of another encoding (Convert:
the real value re-encoded).  Their kernels are the engine's converters (csrc/engine.c); Quantize
of float32 to 8/16-bit codes runs them fused in one pass (csrc/eng_convert.c
qe_k_quantize_f32)."""
from __future__ import annotations

import numpy as np

from ...headers import Q
from ...ops.cast import Convert, Dequantize, Quantize, convert_rounding
from ...spec.quant import Dequantizer, Requantize, rounding_for
from .lowering import F32, Unsupported, emit_converter, lowers, type_code

# Requantize modes qe_k_quantize_f32 runs (csrc/engine.c qe_k_requant's numbering)
_FUSED_MODES = {"fp16_half_away_from_zero": 3, "exact_half_away_from_zero": 4}


@lowers("Quantize")
def quantize(ctx) -> None:
    op = ctx.impl
    if type(op) is not Quantize or op._plain_pair() is not None or ctx.n_out != 1:
        raise Unsupported("Quantize between plain types or a wrapped op")
    if ctx.in_dtype(0) != F32 or not op.input_specs or op.input_specs[0].dtype != Q.QNN_DATATYPE_FLOAT_32:
        raise Unsupported("Quantize of a non-float32 input")
    out_dtype = op._out_dtype()
    quant = op.output_specs[0].quant if op.output_specs else None
    if quant is None:
        raise Unsupported("Quantize without an output encoding")
    conv = Requantize(quant, out_dtype, rounding_for(op.op_type))
    n = int(np.prod(ctx.in_shape(0), dtype=np.int64))
    mode = _FUSED_MODES.get(conv.mode)
    if mode is not None and conv.inv is not None and conv.offset is not None and \
            ctx.out_dtype(0) == np.dtype(conv.np_dtype) and ctx.out_dtype(0).itemsize <= 2:
        # nan_to_num + requantization in one pass (csrc/eng_convert.c): the same operations as
        # the two converter kernels below, vectorised
        ctx.emit("qe_k_quantize_f32", (ctx.input_raw(0), ctx.output_raw(0)),
                 (n, type_code(ctx.out_dtype(0)), mode, int(conv.lo), int(conv.hi)),
                 (float(conv.inv), float(conv.offset)))
        return
    clean = ctx.scratch(4 * n)
    ctx.emit("qe_k_nan_to_num", (ctx.input_raw(0), clean), (n,))
    emit_converter(ctx.b, conv, clean, F32, ctx.output_raw(0), ctx.out_dtype(0), n)
    ctx.emitted += 1


@lowers("Dequantize")
def dequantize(ctx) -> None:
    op = ctx.impl
    if type(op) is not Dequantize or ctx.n_out != 1 or ctx.out_dtype(0) != F32:
        raise Unsupported("Dequantize to a non-float32 output or a wrapped op")
    in_dtype = ctx.in_dtype(0)
    if in_dtype.kind not in "iu" or in_dtype.itemsize > 4 or not op.input_specs:
        raise Unsupported(f"Dequantize of {in_dtype}")
    quant = op.input_specs[0].quant
    if quant is None or quant.block_scales is not None:
        raise Unsupported("Dequantize without a per-tensor or per-axis encoding")
    shape = ctx.in_shape(0)
    n = int(np.prod(shape, dtype=np.int64))
    if quant.axis is None:
        channels, inner = 1, 1
        scales, offsets = [float(quant.scale)], [float(quant.offset)]
    else:
        axis = quant.axis % len(shape)
        channels = shape[axis]
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        scales = [float(v) for v in np.broadcast_to(np.asarray(quant.scale, np.float64), (channels,))]
        offsets = [float(v) for v in np.broadcast_to(np.asarray(quant.offset, np.float64), (channels,))]
    ctx.emit("qe_k_dequant64", (ctx.input_raw(0), ctx.output_raw(0)),
             (n, type_code(in_dtype), channels, inner), scales + offsets)


@lowers("Convert")
def convert(ctx) -> None:
    """Convert between fixed-point encodings: the input dequantized as the op does (Dequantizer,
    float32), NaN / inf cleaned as its ``_from_real`` does, requantized with the rounding the
    vendor's Convert uses for that pair (``convert_rounding``)."""
    op = ctx.impl
    if type(op) is not Convert or op._plain_pair() is not None or ctx.n_out != 1:
        raise Unsupported("Convert between plain types or a wrapped op")
    if not op.input_specs or not op.output_specs:
        raise Unsupported("Convert without tensor specs")
    qin, qout = op.input_specs[0].quant, op.output_specs[0].quant
    in_dtype, out_dtype = ctx.in_dtype(0), ctx.out_dtype(0)
    if qin is None or qout is None or in_dtype.kind not in "iu" or in_dtype.itemsize > 2 \
            or out_dtype.kind not in "iu" or out_dtype.itemsize > 2:
        raise Unsupported("Convert other than 8/16-bit fixed point to 8/16-bit fixed point")
    deq = Dequantizer(qin)
    if deq.scale is None:
        raise Unsupported("Convert of a per-axis encoding")
    n = int(np.prod(ctx.in_shape(0), dtype=np.int64))
    real = ctx.scratch(4 * n)
    emit_converter(ctx.b, deq, ctx.input_raw(0), in_dtype, real, F32, n)
    ctx.emit("qe_k_nan_to_num", (real, real), (n,))
    mode = convert_rounding(op.input_specs[0].dtype, op._out_dtype())
    emit_converter(ctx.b, Requantize(qout, op._out_dtype(), mode), real, F32, ctx.output_raw(0), out_dtype, n)
