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

import math

import numpy as np

from ...ops import _fast, _fast_qgemm
from ...ops._fast_qgemm import CODE_TYPES, QAcc
from ...spec.quant import AccRequant, _prepare_kernels
from ..plan import IntegerAccumulation, IntegerAdd
from .lowering import Unsupported, lowers_impl

MAX_OUTPUTS = 8   # csrc/eng_qgemm.c: an op's own codes and its folded activations'


def _per_channel(v, n: int) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] not in (1, n)):
        raise Unsupported(f"requantization parameters of shape {a.shape} for {n} channels")
    return np.broadcast_to(a.reshape(-1), (n,))


def _int_inputs(qa: QAcc, n: int) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """(xw, clmax, chmax) of the exact integer requantization: the float64 offset term the
    kernel adds to its int32 accumulator, a bound of |accumulator| per channel, and 255 when
    the GEMM also has a high byte plane (16-bit codes), else 0; (None, None, 0) for the float64
    depthwise kernel."""
    if qa.wabs is None:
        return None, None, 0
    t = CODE_TYPES[qa.x_dtype]
    if qa.kind == "gemm" and qa.wsum is not None:
        shift = float(_fast_qgemm._SHIFT[t])
        xw = (qa.x_offset - shift) * qa.wsum[:n].astype(np.float64)
        return xw, 255 * qa.wabs, (255 if t >= 2 else 0)
    if qa.kind == "dwi" and qa.xw is not None:
        return qa.xw, _fast_qgemm._ABS_CODE[t] * qa.wabs, 0
    return None, None, 0


def _requant_tables(rq: AccRequant, n: int) -> tuple[np.ndarray, list[int], list[float]]:
    """(float64 [const, inv_shift, scale, dead] per channel, ints, dbls) of one AccRequant."""
    if type(rq) is not AccRequant:
        raise Unsupported(f"requantization {type(rq).__name__}")
    dead = np.zeros(n) if rq.dead is None else _per_channel(rq.dead.astype(np.float64), n)
    table = np.concatenate([_per_channel(rq.const, n), _per_channel(rq.inv_shift, n),
                            _per_channel(rq.scale, n), dead])
    return table, [int(rq.wide), int(rq.lo), int(rq.hi)], [float(rq.dead_code), float(rq.zp_x)]


def _floor_half(t: int, mult: int, r: int) -> int:
    """floor(t * mult / 2**r + 0.5) in integers."""
    return (t * mult + (1 << r >> 1)) >> r


def _int_requant(rq: AccRequant, n: int, xw: np.ndarray, clmax: np.ndarray, wsum: np.ndarray,
                 chmax: int = 0) -> np.ndarray | None:
    """:func:`_int_requant_reference`'s table, computed by csrc/eng_prepare.c
    qe_int_requant_table (the same integer steps in one C pass: the Python loop cost a
    ResNet-50's graphFinalize a fifth of its time); the Python loop when the kernels are off."""
    kernels = _prepare_kernels()
    if kernels is None or type(rq) is not AccRequant or (chmax and not rq.wide):
        return _int_requant_reference(rq, n, xw, clmax, wsum, chmax)
    clmax64 = np.ascontiguousarray(np.broadcast_to(np.asarray(clmax), (n,)), dtype=np.int64)
    if n and int(clmax64.min()) < 0:    # sums of |w|: never negative; keep the loop's semantics
        return _int_requant_reference(rq, n, xw, clmax, wsum, chmax)
    lib, ffi = kernels
    f64 = np.float64
    dead = np.zeros(n, np.uint8) if rq.dead is None else \
        np.ascontiguousarray(_per_channel(rq.dead.astype(f64), n) != 0, dtype=np.uint8)
    if rq.wide:
        zw = rq.zp_x * np.asarray(wsum, dtype=f64)       # AccRequant.__call__'s own terms
        fz = np.floor(zw / 256.0 + 0.5)
    else:
        zw = fz = np.zeros(n)
    arrays = [np.ascontiguousarray(np.broadcast_to(a, (n,)), dtype=f64) for a in
              (xw, _per_channel(rq.const, n), _per_channel(rq.inv_shift, n), _per_channel(rq.scale, n), zw, fz)]
    xw64, cst, inv, scale, zw64, fz64 = arrays
    tab = np.zeros((8, n), np.int32)
    dbl = lambda a: ffi.cast("double *", ffi.from_buffer(a))   # noqa: E731
    rc = lib.qe_int_requant_table(n, dbl(xw64), dbl(cst), dbl(inv), dbl(scale),
                                  ffi.cast("uint8_t *", ffi.from_buffer(dead)), dbl(zw64), dbl(fz64),
                                  ffi.cast("int64_t *", ffi.from_buffer(clmax64)), int(chmax), int(bool(rq.wide)),
                                  int(rq.lo), int(rq.hi), int(rq.dead_code),
                                  ffi.cast("int32_t *", ffi.from_buffer(tab)))
    return tab if rc == 0 else None


def _int_requant_reference(rq: AccRequant, n: int, xw: np.ndarray, clmax: np.ndarray, wsum: np.ndarray,
                           chmax: int = 0) -> np.ndarray | None:
    """The exact integer form of ``rq`` for int32 accumulators ``cl`` (|cl| <= clmax per
    channel) and, for 16-bit codes in the GEMM, ``ch`` (the high byte plane, |ch| <= chmax *
    clmax / 255), whose float64 path computes acc = cl + 256 * ch + xw: int32 rows
    [B, s, E, tlo, thi, mult, rnd, r] per channel with
        t = ((cl + B) >> s) + ch + E;  y = clip((clip(t, tlo, thi) * mult + rnd) >> r, lo, hi)
    or None where an int32 step could differ from the float64 formula (a multiplier too fine
    for int32, sums near 2**31).

    Why it is the same: with every value an integer below 2**53 the float64 steps are exact.
    8-bit codes: (acc + const) * inv_shift floored is (cl + B) >> s with B = xw + const,
    inv_shift = 2**-s (no ch, E = 0).  16-bit codes (``wide``): data = acc + zw, so
    floor(data / 256) - floor(zw / 256 + 0.5) + const is ((cl + B) >> 8) + ch + E with
    B = xw + zw, E = const - floor(zw / 256 + 0.5).  Then floor(t * scale + 0.5) with
    scale = mult / 2**r is (t * mult + 2**(r-1)) >> r; the result only grows with t, so clamping
    t to [tlo, thi] (f(tlo) <= lo, f(thi) >= hi) changes no clipped code and keeps t * mult
    inside int32.  A dead channel is mult 0, rnd its code."""
    if type(rq) is not AccRequant or (chmax and not rq.wide):
        return None
    lo, hi = int(rq.lo), int(rq.hi)
    cst, inv = _per_channel(rq.const, n), _per_channel(rq.inv_shift, n)
    scale = _per_channel(rq.scale, n)
    dead = np.zeros(n, bool) if rq.dead is None else _per_channel(rq.dead.astype(np.float64), n) != 0
    if rq.wide:
        zw = rq.zp_x * np.asarray(wsum, dtype=np.float64)       # AccRequant.__call__'s own terms
        fz = np.floor(zw / 256.0 + 0.5)
    tab = np.zeros((8, n), np.int64)
    lim = 2**31 - 1
    for c in range(n):
        if dead[c]:
            tab[6, c] = int(rq.dead_code)
            continue
        iv, sc = float(inv[c]), float(scale[c])
        terms = [float(xw[c]), float(cst[c])] + ([float(zw[c]), float(fz[c])] if rq.wide else [])
        if not all(np.isfinite(v) and v.is_integer() and abs(v) < 2**50 for v in terms):
            return None
        if rq.wide:
            bi, s, ei = int(terms[0]) + int(terms[2]), 8, int(terms[1]) - int(terms[3])
        else:
            if not 0 < iv <= 1:
                return None
            mant, e = math.frexp(iv)
            if mant != 0.5:
                return None
            bi, s, ei = int(terms[0]) + int(terms[1]), min(1 - e, 31), 0
        cm, hm = int(clmax[c]), int(clmax[c]) * chmax // 255
        if abs(bi) + cm >= lim or not (0 < sc < 2**31) or not np.isfinite(sc):
            return None
        num, den = sc.as_integer_ratio()
        r = den.bit_length() - 1
        if r > 30 or num >= lim:
            return None
        tmin, tmax = ((bi - cm) >> s) - hm + ei, ((bi + cm) >> s) + hm + ei
        if max(abs(tmin), abs(tmax)) >= lim or max(abs(tmin), abs(tmax)) * num + (1 << r) >= 2**52:
            return None             # the float64 product itself might round
        tlo = ((lo << r) - (1 << r >> 1)) // num
        while _floor_half(tlo + 1, num, r) <= lo:
            tlo += 1
        while _floor_half(tlo, num, r) > lo:
            tlo -= 1
        thi = -((-((hi << r) - (1 << r >> 1))) // num)
        while _floor_half(thi - 1, num, r) >= hi:
            thi -= 1
        while _floor_half(thi, num, r) < hi:
            thi += 1
        if max(abs(tlo * num), abs(thi * num)) + (1 << r) >= lim or max(abs(tlo), abs(thi)) >= lim:
            return None
        tab[:, c] = [bi, s, ei, tlo, thi, num, 1 << r >> 1, r]
    return np.ascontiguousarray(tab.astype(np.int32))


def _weight_pairs(qa: QAcc) -> np.ndarray | None:
    """int32 [pairs, c] of the depthwise kernel's tap pairs for 8-bit codes: tap 2p's int16
    weight in the low half, tap 2p + 1's in the high half (0 past the last tap); None for
    16-bit codes or weights outside int16."""
    if CODE_TYPES[qa.x_dtype] >= 2:
        return None
    w = qa.weights.astype(np.int64)
    if w.size == 0 or np.abs(w).max() > 32767:
        return None
    if w.shape[0] % 2:
        w = np.concatenate([w, np.zeros((1, w.shape[1]), np.int64)])
    pairs = (w[0::2] & 0xFFFF) | (w[1::2] << 16)     # inside int32: |w| < 2**15
    return np.ascontiguousarray(pairs.astype(np.int32))


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
    xw, clmax, chmax = _int_inputs(qa, n)
    wsum64 = np.ascontiguousarray(_per_channel(impl.wsum, n))
    tables, ints, dbls, bufs, itabs = [], [], [], [], []
    for rq, dt, k in outputs:
        if ctx.out_dtype(k) != dt or dt not in CODE_TYPES:
            raise Unsupported(f"output {k} stored as {ctx.out_dtype(k)}")
        if int(np.prod(ctx.out_shape(k), dtype=np.int64)) != qa.rows * n:
            raise Unsupported(f"output {k} has {ctx.out_shape(k)}, not {qa.rows} x {n}")
        table, oi, od = _requant_tables(rq, n)
        tables.append(table)
        itab = _int_requant(rq, n, xw, clmax, wsum64, chmax) if xw is not None and clmax is not None else None
        if itab is not None:
            itabs.append(ctx.const(itab))
        ints += [*oi, CODE_TYPES[dt], int(rq.dead is not None), int(itab is not None)]
        dbls += od
        bufs.append(ctx.output_raw(k))
    params = np.ascontiguousarray(np.concatenate(tables))
    head = [int(v) for v in qa.geo] + [len(outputs)]
    x = ctx.input_raw(0)
    if qa.kind == "gemm":
        ctx.emit("qe_k_qgemm", [x, ctx.const(qa.weights), ctx.const(qa.wsum), ctx.const(wsum64),
                                ctx.const(params), *bufs, *itabs], head + ints, [qa.x_offset] + dbls)
    elif qa.kind == "dwi":
        pairs = _weight_pairs(qa)
        if pairs is not None:
            head[_fast_qgemm.QG_KIND] = 3       # csrc/eng_qgemm.c qe_k_qdw_i32: pairs given
        w = ctx.const(qa.weights)
        ctx.emit("qe_k_qdw_i32", [x, w, w if pairs is None else ctx.const(pairs), ctx.const(qa.xw),
                                  ctx.const(wsum64), ctx.const(params), *bufs, *itabs], head + ints,
                 [qa.x_offset] + dbls)
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
