"""C lowering of the HTP's integer pipeline (docs/numerics.md "Accumulating ops",
"ElementWiseAdd"): the plan's IntegerAccumulation steps of quantized Conv2d, DepthWiseConv2d,
FullyConnected and MatMul (static weights; folded Relu outputs included) run
``qe_k_qgemm`` (im2col of codes + exact integer GEMM + AccRequant) or ``qe_k_qdw`` (direct
depthwise + AccRequant) (csrc/eng_qgemm.c); IntegerAdd steps of ElementWiseAdd run ``qe_k_iadd``
(csrc/eng_eltwise.c; the arguments of qe_k_qadd, flat operands in one pass).

The accumulator is the one the Python step computes (IntegerAccumulation.cacc: the same C
pipeline, the same packed weights and geometry, qnnemu/ops/_fast_qgemm.py); AccRequant is
reproduced in float64 in numpy's operation order, so the codes are bit-identical.
"""
from __future__ import annotations

import numpy as np

from ...ops import _fast, _fast_qgemm
from ...ops._fast_qgemm import CODE_TYPES, QAcc
from ...spec.quant import AccRequant
from ..plan import IntegerAccumulation, IntegerAdd
from .lowering import Unsupported, lowers_impl

MAX_OUTPUTS = 8   # csrc/eng_qgemm.c: an op's own codes and its folded activations'


def _per_channel(v, n: int) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] not in (1, n)):
        raise Unsupported(f"requantization parameters of shape {a.shape} for {n} channels")
    return np.broadcast_to(a.reshape(-1), (n,))


def _requant_tables(rq: AccRequant, n: int) -> tuple[np.ndarray, list[int], list[float]]:
    """(float64 [const, inv_shift, scale, dead] per channel, ints, dbls) of one AccRequant."""
    if type(rq) is not AccRequant:
        raise Unsupported(f"requantization {type(rq).__name__}")
    dead = np.zeros(n) if rq.dead is None else _per_channel(rq.dead.astype(np.float64), n)
    table = np.concatenate([_per_channel(rq.const, n), _per_channel(rq.inv_shift, n),
                            _per_channel(rq.scale, n), dead])
    return table, [int(rq.wide), int(rq.lo), int(rq.hi)], [float(rq.dead_code), float(rq.zp_x)]


@lowers_impl(IntegerAccumulation)
def integer_accumulation(ctx) -> None:
    impl = ctx.impl
    if type(impl) is not IntegerAccumulation:
        raise Unsupported("not an IntegerAccumulation")
    if not _fast.enabled():
        raise Unsupported("C kernels off: the plan keeps its float32 accumulation")
    if not impl.w_static:
        _dynamic_matmul(ctx, impl)
        return
    qa: QAcc | None = impl.cacc
    if qa is None:
        raise Unsupported("no C accumulator for this form (see _fast_qgemm.prepare)")
    if ctx.in_dtype(0) != qa.x_dtype or ctx.in_shape(0) != qa.x_shape:
        raise Unsupported("input slot differs from the prepared geometry")
    outputs: list[tuple[AccRequant, np.dtype, int]] = []
    if impl.keep_own:
        outputs.append((impl.requant, np.dtype(impl.np_dtype), 0))
    outputs += [(rq, np.dtype(dt), 1 + k) for k, (rq, dt) in enumerate(impl.folded)]
    if not outputs or len(outputs) > MAX_OUTPUTS or ctx.n_out != 1 + len(impl.folded):
        raise Unsupported(f"{len(outputs)} requantized outputs")
    n = qa.cols
    tables, ints, dbls, bufs = [], [], [], []
    for rq, dt, k in outputs:
        if ctx.out_dtype(k) != dt or dt not in CODE_TYPES:
            raise Unsupported(f"output {k} stored as {ctx.out_dtype(k)}")
        if int(np.prod(ctx.out_shape(k), dtype=np.int64)) != qa.rows * n:
            raise Unsupported(f"output {k} has {ctx.out_shape(k)}, not {qa.rows} x {n}")
        table, oi, od = _requant_tables(rq, n)
        tables.append(table)
        ints += [*oi, CODE_TYPES[dt], int(rq.dead is not None)]
        dbls += od
        bufs.append(ctx.output_raw(k))
    wsum64 = np.ascontiguousarray(_per_channel(impl.wsum, n))
    params = np.ascontiguousarray(np.concatenate(tables))
    head = [int(v) for v in qa.geo] + [len(outputs)]
    x = ctx.input_raw(0)
    if qa.kind == "gemm":
        ctx.emit("qe_k_qgemm", [x, ctx.const(qa.weights), ctx.const(qa.wsum), ctx.const(wsum64),
                                ctx.const(params), *bufs], head + ints, [qa.x_offset] + dbls)
    else:
        ctx.emit("qe_k_qdw", [x, ctx.const(qa.weights), ctx.const(wsum64), ctx.const(params), *bufs],
                 head + ints, [qa.x_offset] + dbls)


# |in1 code + offset| up to this keeps htp_int8_operand's requantized values inside int8 (the
# rounding of round(2**16 / f) moves them by at most 0.04 then); larger offsets stay in Python.
DYNAMIC_W_MAX = 1024


def _dynamic_matmul(ctx, impl) -> None:
    """MatMul with a dynamic in1: ``qe_k_qmatmul_dyn`` requantizes in1's columns
    (htp_int8_operand), derives AccRequant's tables per column and runs the integer GEMM, as
    IntegerAccumulation.run does with _fast_qgemm.dynamic_matmul."""
    if ctx.node.op_type != "MatMul" or impl.folded or not impl.keep_own or ctx.n_out != 1:
        raise Unsupported("a dynamic in1 outside MatMul")
    if ctx.node.params.get("transpose_in0", False):
        raise Unsupported("MatMul transpose_in0 with a dynamic in1")
    xs, xo, ws, ys, yo, wide, lo, hi, fine, bits = impl.requant_args
    ws = np.asarray(ws, dtype=np.float64).reshape(-1)
    if ws.size != 1 or not float(xo).is_integer() or not float(impl.w_offset).is_integer():
        raise Unsupported("a per-channel in1 or a fractional offset")
    code_range = 255 if ctx.in_dtype(1).itemsize == 1 else 65535
    if code_range + abs(impl.w_offset) > DYNAMIC_W_MAX:
        raise Unsupported("in1 offset too large for int8 requantization in C")
    xa, wa = ctx.in_shape(0), ctx.in_shape(1)
    tx, tw, to = ctx.in_dtype(0), ctx.in_dtype(1), ctx.out_dtype(0)
    if tx not in CODE_TYPES or tw not in CODE_TYPES or to not in CODE_TYPES or to != np.dtype(impl.np_dtype):
        raise Unsupported(f"types {tx}, {tw} -> {to}")
    if len(xa) < 2 or len(wa) < 2:
        raise Unsupported("MatMul of vectors")
    t1 = bool(impl.transpose_in1)
    K, N = (wa[-1], wa[-2]) if t1 else (wa[-2], wa[-1])
    if xa[-1] != K or K > _fast_qgemm.MAX_K:
        raise Unsupported("inner dimensions")
    if int(np.prod(wa[:-2], dtype=np.int64)) == 1:
        batches, M, w_stride = 1, int(np.prod(xa[:-1], dtype=np.int64)), 0
    elif tuple(xa[:-2]) == tuple(wa[:-2]):
        batches, M, w_stride = int(np.prod(xa[:-2], dtype=np.int64)), xa[-2], K * N
    else:
        raise Unsupported("broadcast batch dimensions")
    if int(np.prod(ctx.out_shape(0), dtype=np.int64)) != batches * M * N:
        raise Unsupported("output size")
    ctx.emit("qe_k_qmatmul_dyn", [ctx.input_raw(0), ctx.input_raw(1), ctx.output_raw(0)],
             [CODE_TYPES[tx], CODE_TYPES[tw], batches, M, K, N, w_stride, int(t1), CODE_TYPES[to],
              int(lo), int(hi), int(bool(wide)), int(bool(fine)), int(bits or 0)],
             [float(xo), float(impl.w_offset), float(xs), float(ws[0]), float(ys), float(yo)])


def _broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous ``shape`` read as ``out`` (numpy broadcasting)."""
    if len(shape) > len(out):
        raise Unsupported("an input of higher rank than the output")
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [0] * len(out), 1
    for d in range(len(out) - 1, -1, -1):
        if shape[d] == out[d]:
            strides[d] = step if shape[d] != 1 else 0
        elif shape[d] != 1:
            raise Unsupported(f"{shape} does not broadcast to {out}")
        step *= shape[d]
    return strides


@lowers_impl(IntegerAdd)
def integer_add(ctx) -> None:
    impl = ctx.impl
    if type(impl) is not IntegerAdd or ctx.n_in != 2 or ctx.n_out != 1:
        raise Unsupported("not a two-input IntegerAdd")
    out_dtype = ctx.out_dtype(0)
    if out_dtype != np.dtype(impl.np_dtype) or out_dtype not in CODE_TYPES:
        raise Unsupported(f"output stored as {out_dtype}")
    ta, tb = ctx.in_dtype(0), ctx.in_dtype(1)
    if ta not in CODE_TYPES or tb not in CODE_TYPES:
        raise Unsupported(f"inputs {ta}, {tb}")
    out = tuple(ctx.out_shape(0)) or (1,)
    sa, sb = ctx.in_shape(0), ctx.in_shape(1)
    if np.broadcast_shapes(sa, sb) != tuple(ctx.out_shape(0)):
        raise Unsupported("output shape is not the inputs' broadcast shape")
    if len(out) > 8:
        raise Unsupported(f"rank {len(out)}")
    strides_a, strides_b = _broadcast_strides(sa, out), _broadcast_strides(sb, out)
    ctx.emit("qe_k_iadd", [ctx.input_raw(0), ctx.input_raw(1), ctx.output_raw(0)],
             [CODE_TYPES[ta], CODE_TYPES[tb], CODE_TYPES[out_dtype], int(impl.lo), int(impl.hi), len(out),
              *out, *strides_a, *strides_b],
             [float(impl.mult[0]), float(impl.mult[1]), float(impl.const + 0.5)])
