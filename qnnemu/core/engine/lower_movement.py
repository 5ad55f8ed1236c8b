"""C lowering of the data-movement, pooling and reduction ops (QNN op definitions "Reshape",
"Identity", "ExpandDims", "Squeeze", "Transpose", "Concat", "Split", "StridedSlice", "Pad",
"Pack", "UnPack", "Tile", "DepthToSpace", "SpaceToDepth", "ChannelShuffle", "BatchToSpace",
"SpaceToBatch", "Gather", "GatherNd", "GatherElements", "ScatterNd" and "ScatterElements" (no
reduction), "PoolMax2d", "PoolAvg2d", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
"Resize", "ResizeBilinear", "ResizeNearestNeighbor";
qnnemu/ops/shape.py, gather.py, pool.py, reduce.py, resize.py).
Kernels: csrc/eng_movement.c.

Data movement is lowered without re-deriving any op's index rules: at finalize the op itself
runs on index arrays (``np.arange`` in the input shapes, int64, 0 kept for "no input
element"), which gives, for every output element, the input element it holds.  That map becomes
strided copies (``qe_k_move``, when it is affine in the output index, possibly after splitting
output dimensions the op's block structure suggests), a constant fill (``qe_k_fill``: Pad's
constant, SpaceToBatch's zero) or a gather of contiguous rows through an index table
(``qe_k_gather_rows``; Gather with dynamic indices: ``qe_k_gather_dyn``; GatherNd:
``qe_k_gather_nd``).  The copies move bytes, so the result is bit-identical whatever the
element type; before emitting anything the lowering replays its copies on the index arrays and
compares with the op's own map (a mismatch falls back to Python).

Pooling calls kernels.c's ``qe_pool2d``, the function the op's fast path calls; float
ReduceMean/ReduceSum/ReduceMax/ReduceMin run ``qe_reduce_f32``, which the ops' fast path calls
too (numpy's pairwise summation cannot be reproduced in C), so both paths share one order.
The Resize ops run their per-axis plan: nearest axes as row gathers, interpolated axes through
``qe_resize_taps``, which their fast path calls as well.
"""
from __future__ import annotations

import numpy as np

from ...ops import (
    _fast,
    _fast_movement,
    gather as gather_ops,
    pool as pool_ops,
    reduce as reduce_ops,
    resize as resize_ops,
    shape as shape_ops,
)
from ...spec.quant import Dequantizer, Requantize
from .lowering import F32, Unsupported, _cast_target, lowers, type_code

I64 = np.dtype(np.int64)
MAX_INDEXED_ELEMENTS = 1 << 23   # the index run's int64 arrays stay below 64 MB at finalize
MAX_RANK = 16               # qe_k_move's limit (csrc/eng_movement.c QE_MOVE_MAX_RANK)
ELEMENT_SIZES = (1, 2, 4, 8)


# -- what the op receives and returns ----------------------------------------------------------
def static_input(ctx, i: int) -> np.ndarray | None:
    """``ctx.static(i)``, None for a dynamic input (the core's static_value raises KeyError
    for a slot that is not a static)."""
    try:
        return ctx.static(i)
    except KeyError:
        return None


def received(ctx, i: int) -> tuple[int, np.dtype]:
    """(buffer, dtype) of input ``i`` as the Python op receives it: the stored codes or values,
    or the float32 its input converter makes."""
    if ctx.in_conv(i) is None:
        return ctx.input_raw(i), ctx.in_dtype(i)
    return ctx.input_f32(i), F32


def result_buffer(ctx, k: int, dtype: np.dtype) -> int:
    """The buffer output ``k`` is written to when the op returns an array of ``dtype``."""
    if ctx.out_conv(k) is None or dtype != F32:
        if dtype != ctx.out_dtype(k):
            raise Unsupported(f"output {k}: the op returns {dtype}, the slot stores {ctx.out_dtype(k)}")
        return ctx.output_raw(k)
    return ctx.output_f32(k)


def _contiguous(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return strides[::-1]


def _collapse(shape, src, dst) -> tuple[list[int], list[int], list[int]]:
    """Drops size-1 dimensions and merges neighbours that step through memory as one."""
    dims = [(int(d), int(s), int(t)) for d, s, t in zip(shape, src, dst) if d != 1]
    if not dims:
        return [1], [1], [1]
    out = [dims[0]]
    for d, s, t in dims[1:]:
        pd, ps, pt = out[-1]
        if ps == s * d and pt == t * d:
            out[-1] = (pd * d, s, t)
        else:
            out.append((d, s, t))
    return [d for d, _, _ in out], [s for _, s, _ in out], [t for _, _, t in out]


# -- the copy program: emitted, and replayed in numpy on index arrays ------------------------------
class Program:
    """The copies into one output: moves (shape, src strides, dst strides, src off, dst off,
    input), a fill flag and row gathers."""

    def __init__(self, out_size: int):
        self.n = out_size
        self.fill = False
        self.moves: list[tuple] = []
        self.gathers: list[tuple] = []   # (input, index table, inner)
        self.holes = False                # negative gather rows are filled

    def replay(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The output this program computes from the flat arrays ``inputs`` (0 where it fills)."""
        out = np.zeros(self.n, I64)
        for shape, ss, ds, so, do, i in self.moves:
            src_pos, dst_pos = np.int64(so), np.int64(do)
            for k, (d, s, t) in enumerate(zip(shape, ss, ds)):
                ax = np.arange(d, dtype=np.int64).reshape((-1,) + (1,) * (len(shape) - k - 1))
                src_pos = src_pos + ax * s
                dst_pos = dst_pos + ax * t
            out[np.broadcast_to(dst_pos, shape).reshape(-1)] = \
                inputs[i][np.broadcast_to(src_pos, shape).reshape(-1)]
        for i, table, inner in self.gathers:
            rows = inputs[i].reshape(-1, inner)[np.maximum(table, 0)]
            rows[table < 0] = 0
            out[:rows.size] = rows.reshape(-1)
        return out

    def emit(self, ctx, srcs: list[int], dst: int, itemsize: int, fill_const: int | None) -> None:
        if self.fill:
            ctx.emit("qe_k_fill", (dst, fill_const), (self.n, itemsize))
        for shape, ss, ds, so, do, i in self.moves:
            ctx.emit("qe_k_move", (srcs[i], dst),
                     (itemsize, len(shape), so, do, *shape, *ss, *ds))
        for i, table, inner in self.gathers:
            bufs = (srcs[i], dst, ctx.const(table)) + ((fill_const,) if self.holes else ())
            ctx.emit("qe_k_gather_rows", bufs, (itemsize, 1, table.size, 0, inner))


def _affine(idx: np.ndarray) -> tuple[int, list[int]] | None:
    """(base, strides) when ``idx`` = base + sum(i_k * strides_k) over its multi-index."""
    if idx.size == 0:
        return None
    base = int(idx.flat[0])
    strides, recon = [], np.full((1,) * idx.ndim, base, np.int64)
    for k, d in enumerate(idx.shape):
        s = 0
        if d > 1:
            unit = [0] * idx.ndim
            unit[k] = 1
            s = int(idx[tuple(unit)]) - base
        strides.append(s)
        recon = recon + np.arange(d, dtype=np.int64).reshape((1,) * k + (d,) + (1,) * (idx.ndim - k - 1)) * s
    return (base, strides) if np.array_equal(np.broadcast_to(recon, idx.shape), idx) else None


def _largest_row(idx: np.ndarray, size: int, holes: bool = False) -> int:
    """The largest B dividing ``idx.size`` and ``size`` such that ``idx`` is made of whole
    contiguous B-element rows of the source (``holes``: or of rows all -1)."""
    flat = idx.reshape(-1)
    # candidates: a product of trailing output dimensions times a divisor of the next one
    candidates, tail = {1}, 1
    for d in reversed(idx.shape):
        candidates.update(tail * f for f in range(1, d + 1) if d % f == 0)
        tail *= d
    for b in sorted((b for b in candidates if flat.size % b == 0 and size % b == 0), reverse=True):
        rows = flat.reshape(-1, b)
        whole = (rows[:, 0] % b == 0) & (rows == rows[:, :1] + np.arange(b)).all(axis=1)
        if holes:
            whole |= (rows == -1).all(axis=1)
        if whole.all():
            return b
    return 1


def plan_single(idx: np.ndarray, in_size: int, refinements=()) -> Program:
    """The copies making an output whose element j holds input element idx[j] - 1 (0: filled
    by the caller's constant)."""
    prog = Program(idx.size)
    flat = idx.reshape(-1)
    if (flat == 0).any():
        # A fill and the copies of the input region: the input positions must form a box.
        prog.fill = True
        inside = np.nonzero(flat)[0]
        if inside.size == 0:
            return prog
        box = _box(idx != 0)
        found = _affine(idx[box] - 1) if box is not None else None
        if box is None or found is None:     # not a strided box: a row gather filling negative rows
            prog.fill = False
            b = _largest_row(idx - 1, in_size, holes=True)
            starts = (flat - 1).reshape(-1, b)[:, 0]
            prog.gathers.append((0, np.ascontiguousarray(np.where(starts < 0, -1, starts // b)), b))
            prog.holes = True
            return prog
        sub = idx[box]
        base, ss = found
        ds = _contiguous(idx.shape)
        off = int(sum(sl.start * t for sl, t in zip(box, ds)))
        shape, ss, ds = _collapse(sub.shape, ss, ds)
        if len(shape) > MAX_RANK:
            raise Unsupported("more than 16 dimensions after collapsing")
        prog.moves.append((shape, ss, ds, base, off, 0))
        return prog
    for shape in (idx.shape, *refinements):
        if shape is None or int(np.prod(shape)) != idx.size:
            continue
        found = _affine(idx.reshape(shape) - 1)
        if found is not None:
            base, ss = found
            shape, ss, ds = _collapse(shape, ss, _contiguous(shape))
            if len(shape) <= MAX_RANK:
                prog.moves.append((shape, ss, ds, base, 0, 0))
                return prog
    b = _largest_row(idx - 1, in_size)
    prog.gathers.append((0, np.ascontiguousarray((flat - 1).reshape(-1, b)[:, 0] // b), b))
    return prog


def _box(mask: np.ndarray) -> tuple[slice, ...] | None:
    """The slices of the box holding every True of ``mask`` when the box is all True."""
    box = []
    for k in range(mask.ndim):
        other = tuple(j for j in range(mask.ndim) if j != k)
        hit = np.nonzero(mask.any(axis=other) if other else mask)[0]
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    return tuple(box) if mask[tuple(box)].all() else None


def _index_inputs(ctx, data: list[int]) -> list[np.ndarray]:
    """Index arrays for the data inputs ``data``: input ``data[q]`` numbered from
    1 + (the sizes of the data inputs before it)."""
    arrays, start = [], 1
    for i in data:
        shape = ctx.in_shape(i)
        n = int(np.prod(shape, dtype=np.int64))
        arrays.append(np.arange(start, start + n, dtype=np.int64).reshape(shape))
        start += n
    return arrays


def _same_received(ctx, data: list[int]) -> tuple[list[int], np.dtype]:
    bufs, dtypes = zip(*(received(ctx, i) for i in data))
    if len(set(dtypes)) != 1:
        raise Unsupported(f"inputs of different types {sorted(set(map(str, dtypes)))}")
    dtype = dtypes[0]
    if dtype.itemsize not in ELEMENT_SIZES:
        raise Unsupported(f"element size {dtype.itemsize}")
    return list(bufs), dtype


def _fill_element(op, dtype: np.dtype, rank: int, value) -> np.ndarray:
    """The one element the op writes for constant ``value`` when it receives ``dtype``."""
    dummy = np.zeros((1,) * rank, dtype)
    spec, out_spec = op._specs(dummy)
    fill = np.asarray(shape_ops.fill_value(spec, out_spec, dummy, value))
    if fill.size != 1:
        raise Unsupported("a per-axis fill value")
    return np.ascontiguousarray(fill.reshape(1).astype(dtype))


def _refinements(op, in_shape, out_shape) -> list[tuple[int, ...] | None]:
    """Output shapes split along the op's block structure (where the map may turn affine)."""
    t = type(op)
    p = op.param_values
    if t in (shape_ops.DepthToSpace, shape_ops.SpaceToDepth, shape_ops.BatchToSpace,
             shape_ops.SpaceToBatch):
        bh, bw = shape_ops._block(t.op_type, p)
        n, h, w, c = out_shape
        if t is shape_ops.DepthToSpace or t is shape_ops.BatchToSpace:
            return [(n, h // bh, bh, w // bw, bw, c)]
        if t is shape_ops.SpaceToDepth:
            k = c // (bh * bw)
            return [(n, h, w, bh, bw, k), (n, h, w, k, bh, bw)]
        return [(bh, bw, n // (bh * bw), h, w, c)]
    if t is shape_ops.ChannelShuffle:
        ax, g = t.geometry(in_shape, p)
        s = list(out_shape)
        return [tuple(s[:ax] + [s[ax] // g, g] + s[ax + 1:])]
    if t is shape_ops.Tile:
        m = [int(k) for k in np.asarray(p["multiples"]).reshape(-1)]
        return [tuple(v for d, k in zip(in_shape, m) for v in (k, d))]
    return []


INDEXED_MOVES = {shape_ops.Transpose, shape_ops.Split, shape_ops.StridedSlice, shape_ops.UnPack,
                 shape_ops.Tile, shape_ops.DepthToSpace, shape_ops.SpaceToDepth,
                 shape_ops.ChannelShuffle, shape_ops.BatchToSpace, shape_ops.SpaceToBatch,
                 shape_ops.Pad, gather_ops.Gather}
PLAIN_COPIES = {shape_ops.Identity, shape_ops.Reshape, shape_ops.ExpandDims, shape_ops.Squeeze}


@lowers("Reshape", "Identity", "ExpandDims", "Squeeze")
def plain_copy(ctx) -> None:
    """Row-major data unchanged: one copy of the bytes (the Python op returns a view or copy)."""
    op = ctx.impl
    if type(op) not in PLAIN_COPIES or ctx.n_out != 1:
        raise Unsupported("a wrapped movement op")
    n = int(np.prod(ctx.in_shape(0), dtype=np.int64))
    if _share_bytes(ctx, 0, 0):
        return
    src, dtype = received(ctx, 0)
    ctx.emit("qe_k_copy", (src, result_buffer(ctx, 0, dtype)), (n * dtype.itemsize,))


def _share_bytes(ctx, k: int, offset: int) -> bool:
    """Output ``k`` as the bytes of input 0 from element ``offset`` on, no copy (Reshape and
    its kin, a slice that is one contiguous run): when neither side converts, the types agree
    and the engine can let the two values share arena bytes (program.Builder.alias).  A no-op
    step stands for the node (profiles list it); the caller emits nothing else for output k."""
    dtype = ctx.in_dtype(0)
    if ctx.in_conv(0) is not None or dtype != ctx.out_dtype(k):
        return False
    if ctx.out_conv(k) is not None and _cast_target(ctx.out_conv(k)) != dtype:
        return False   # (a cast to the type it already has leaves the bytes as they are)
    if ctx.b.alias(ctx.step.writes[k], ctx.step.reads[0], ctx.index, offset * dtype.itemsize) is None:
        return False
    ctx.emit("qe_k_nop", ())
    return True


# -- fixed-point codes moved without dequantizing ---------------------------------------------------
CODE_DTYPES = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16))


def _stored_input(ctx, i: int) -> int:
    """Input i's buffer as stored (its codes), whatever converter the Python step applies: the
    caller reproduces that converter itself (a table over every code)."""
    return ctx.b.slot_buffer(ctx._read(i), ctx.index)


def _stored_output(ctx, k: int) -> int:
    return ctx.b.slot_buffer(ctx.step.writes[k], ctx.index)


def code_table(ctx, i: int, k: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """(float32 values, output codes) of every code of input ``i``, in code order, through the
    plan's own converters: input i's per-tensor Dequantizer and output k's per-tensor
    Requantize; None when the step does not have exactly those (8/16-bit codes each side).
    An op that only moves or selects values then maps each input code to one output code."""
    cin, cout = ctx.in_conv(i), ctx.out_conv(k)
    din, dout = ctx.in_dtype(i), ctx.out_dtype(k)
    if din not in CODE_DTYPES or dout not in CODE_DTYPES:
        return None
    if type(cin) is not Dequantizer or cin.scale is None or cin.offset is None:
        return None
    if type(cout) is not Requantize or cout.inv is None or np.dtype(cout.np_dtype) != dout:
        return None
    info = np.iinfo(din)
    codes = np.arange(info.min, info.max + 1, dtype=np.int64).astype(din)
    values = cin(codes)
    if values.dtype != F32 or values.shape != codes.shape:
        return None
    out = np.asarray(cout(values))
    if out.dtype != dout or out.shape != codes.shape:
        return None
    return values, np.ascontiguousarray(out)


def _identity(ctx, i: int, table: np.ndarray) -> bool:
    din = ctx.in_dtype(i)
    info = np.iinfo(din)
    return din == table.dtype and np.array_equal(table, np.arange(info.min, info.max + 1).astype(din))


def _concat_program(ctx, op) -> Program:
    out_shape = ctx.out_shape(0)
    axis = int(op.param_values["axis"])
    pre = int(np.prod(out_shape[:axis], dtype=np.int64))
    total = out_shape[axis]
    post = int(np.prod(out_shape[axis + 1:], dtype=np.int64))
    prog = Program(int(np.prod(out_shape, dtype=np.int64)))
    start = 0
    for q in range(ctx.n_in):
        n = int(np.prod(ctx.in_shape(q), dtype=np.int64))
        d = n // (pre * post) if pre * post else 0
        shape, ss, ds = _collapse((pre, d * post), (d * post, 1), (total * post, 1))
        prog.moves.append((shape, ss, ds, 0, start * post, q))
        start += d
    return prog


def _concat_codes(ctx, op) -> bool:
    """Concat whose inputs the plan dequantizes and whose output it requantizes: each input's
    codes moved through its table (a plain copy where the table is the identity).  False when
    the step is not of that form."""
    if type(op) is not shape_ops.Concat:
        return False
    tables = [code_table(ctx, i) for i in range(ctx.n_in)]
    if any(t is None for t in tables):
        return False
    prog = _concat_program(ctx, op)
    _verify(ctx, op, list(range(ctx.n_in)), [prog])
    dst, dout = _stored_output(ctx, 0), ctx.out_dtype(0)
    for shape, ss, ds, so, do, q in prog.moves:
        src, din = _stored_input(ctx, q), ctx.in_dtype(q)
        table = tables[q][1]
        if _identity(ctx, q, table):
            ctx.emit("qe_k_move", (src, dst), (din.itemsize, len(shape), so, do, *shape, *ss, *ds))
        else:
            ctx.emit("qe_k_move_lut", (src, dst, ctx.const(table)),
                     (type_code(din), type_code(dout), len(shape), so, do, *shape, *ss, *ds))
    return True


@lowers("Concat", "Pack")
def concat(ctx) -> None:
    """Each input copied into its slab of the output along the axis (Pack: a new axis); codes
    of another encoding go through a table of output codes (``_concat_codes``)."""
    op = ctx.impl
    if type(op) not in (shape_ops.Concat, shape_ops.Pack) or ctx.n_out != 1:
        raise Unsupported("a wrapped Concat/Pack")
    if _concat_codes(ctx, op):
        return
    data = list(range(ctx.n_in))
    srcs, dtype = _same_received(ctx, data)
    out_shape = ctx.out_shape(0)
    axis = int(op.param_values["axis"])
    pre = int(np.prod(out_shape[:axis], dtype=np.int64))
    total = out_shape[axis]
    post = int(np.prod(out_shape[axis + 1:], dtype=np.int64))
    prog = Program(int(np.prod(out_shape, dtype=np.int64)))
    start = 0
    for q, i in enumerate(data):
        n = int(np.prod(ctx.in_shape(i), dtype=np.int64))
        d = n // (pre * post) if pre * post else 0
        shape, ss, ds = _collapse((pre, d * post), (d * post, 1), (total * post, 1))
        prog.moves.append((shape, ss, ds, 0, start * post, q))
        start += d
    _verify(ctx, op, data, [prog])
    prog.emit(ctx, srcs, result_buffer(ctx, 0, dtype), dtype.itemsize, None)


@lowers("Transpose", "Split", "StridedSlice", "UnPack", "Tile", "DepthToSpace", "SpaceToDepth",
        "ChannelShuffle", "BatchToSpace", "SpaceToBatch", "Pad", "Gather")
def indexed_move(ctx) -> None:
    """Ops with one data input: the op's own index map, turned into copies."""
    op = ctx.impl
    if type(op) not in INDEXED_MOVES:
        raise Unsupported("a wrapped movement op")
    data = [0]
    if type(op) is gather_ops.Gather:
        gather(ctx, op)
        return
    srcs, dtype = _same_received(ctx, data)
    in_size = int(np.prod(ctx.in_shape(0), dtype=np.int64))
    if in_size > MAX_INDEXED_ELEMENTS:
        raise Unsupported(f"{in_size} elements: too many for the index run at finalize")
    fill = None
    if type(op) is shape_ops.Pad:
        scheme = op.param_values["scheme"]
        pads = op._pads
        if pads is None:
            raise Unsupported("Pad without resolved pads")
        x = _index_inputs(ctx, data)[0]
        if scheme == shape_ops.PAD_CONSTANT:
            maps = [np.pad(x, pads, constant_values=0)]
            fill = _fill_element(op, dtype, len(pads), op.param_values["pad_constant_value"])
        else:
            maps = [np.pad(x, pads, mode=shape_ops._NP_MODE[scheme])]  # type: ignore[call-overload]
    else:
        maps = _op_maps(ctx, op, data)
        if type(op) is shape_ops.SpaceToBatch and any((m == 0).any() for m in maps):
            fill = _fill_element(op, dtype, 4, 0)
    if fill is None and any((m == 0).any() for m in maps):
        raise Unsupported("the op wrote values that are not input elements")
    # plan_single's copies reproduce the map by construction (_affine compares the whole map)
    progs = [plan_single(m, in_size, _refinements(op, ctx.in_shape(0), m.shape)) for m in maps]
    fill_buf = ctx.const(fill) if fill is not None else None
    for k, prog in enumerate(progs):
        start = _one_run(prog)
        if start is not None and _share_bytes(ctx, k, start):
            continue
        prog.emit(ctx, srcs, result_buffer(ctx, k, dtype), dtype.itemsize, fill_buf)


def _one_run(prog: Program) -> int | None:
    """The input element an output starts at when the output is one contiguous run of the
    input (a slice or split along the outermost live axis), else None."""
    if prog.fill or prog.gathers or len(prog.moves) != 1:
        return None
    shape, ss, ds, so, do, i = prog.moves[0]
    if i != 0 or do != 0 or len(shape) != 1 or ss[0] != 1 or ds[0] != 1 or shape[0] != prog.n:
        return None
    return int(so)


# dynamic index types qe_k_gather_dyn reads (csrc/engine.h element type codes)
_DYN_INDEX_CODES = {np.dtype(np.int32): 5, np.dtype(np.uint32): 4, np.dtype(np.int64): 9}


def gather(ctx, op) -> None:
    """Gather: rows of the input along ``axis``.  Static indices in range: a row table at
    finalize (negative static ones wrap with a warning in the op: they stay in Python).  Dynamic
    indices: ``qe_k_gather_dyn`` checks them at each execute and leaves any outside [0, dim)
    to the op's Python step (QE_RC_PYTHON: it wraps a negative one with its warning, or fails)."""
    ind = static_input(ctx, 1)
    shape = ctx.in_shape(0)
    axis = int(op.param_values["axis"])
    dim = shape[axis]
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    if ind is None:
        code = _DYN_INDEX_CODES.get(ctx.in_dtype(1))
        if code is None:
            raise Unsupported(f"Gather with dynamic {ctx.in_dtype(1)} indices")
        src, dtype = _same_received(ctx, [0])
        m = int(np.prod(ctx.in_shape(1), dtype=np.int64))
        ctx.emit("qe_k_gather_dyn", (src[0], result_buffer(ctx, 0, dtype), ctx.input_raw(1)),
                 (dtype.itemsize, outer, m, dim, inner, code))
        return
    if ind.dtype.kind not in "iu" or (ind.size and (int(ind.min()) < 0 or int(ind.max()) >= dim)):
        raise Unsupported("Gather with negative or out-of-range static indices")
    src, dtype = _same_received(ctx, [0])
    table = np.ascontiguousarray(ind.reshape(-1).astype(np.int64))
    ctx.emit("qe_k_gather_rows", (src[0], result_buffer(ctx, 0, dtype), ctx.const(table)),
             (dtype.itemsize, outer, table.size, dim, inner))


@lowers("GatherNd")
def gather_nd(ctx) -> None:
    """GatherNd: index tuples (static or dynamic) into the dimensions after batch_dims, whole
    rows of what follows them copied (``qe_k_gather_nd``; an index the op wraps or refuses is
    left to its Python step, QE_RC_PYTHON)."""
    op = ctx.impl
    if type(op) is not gather_ops.GatherNd or ctx.n_out != 1:
        raise Unsupported("a wrapped GatherNd")
    code = _DYN_INDEX_CODES.get(ctx.in_dtype(1))
    if code is None or ctx.in_conv(1) is not None:
        raise Unsupported(f"GatherNd with {ctx.in_dtype(1)} indices")
    shape, i_shape = ctx.in_shape(0), ctx.in_shape(1)
    b = int(op.param_values.get("batch_dims", 0))
    k, _ = op.geometry(shape, i_shape, b)
    nb = int(np.prod(shape[:b], dtype=np.int64))
    m = int(np.prod(i_shape[b:-1], dtype=np.int64))
    inner = int(np.prod(shape[b + k:], dtype=np.int64))
    src, dtype = _same_received(ctx, [0])
    ctx.emit("qe_k_gather_nd", (src[0], result_buffer(ctx, 0, dtype), ctx.input_raw(1)),
             (dtype.itemsize, nb, m, k, inner, code, *shape[b:b + k]))


@lowers("ScatterNd")
def scatter_nd(ctx) -> None:
    """ScatterNd without reduction: the data copied, then the update rows written at their index
    tuples in order (``qe_k_scatter_nd``; a tuple the op skips with a warning is left to its
    Python step, QE_RC_PYTHON)."""
    op = ctx.impl
    if type(op) is not gather_ops.ScatterNd or ctx.n_out != 1:
        raise Unsupported("a wrapped ScatterNd")
    if int(op.param_values.get("reduction", gather_ops.RED_NONE)) != gather_ops.RED_NONE:
        raise Unsupported("ScatterNd with a reduction")
    code = _DYN_INDEX_CODES.get(ctx.in_dtype(1))
    if code is None or ctx.in_conv(1) is not None:
        raise Unsupported(f"ScatterNd with {ctx.in_dtype(1)} indices")
    shape, i_shape = ctx.in_shape(0), ctx.in_shape(1)
    k = int(i_shape[-1])
    srcs, dtype = _same_received(ctx, [0, 2])
    ctx.emit("qe_k_scatter_nd", (srcs[0], srcs[1], result_buffer(ctx, 0, dtype), ctx.input_raw(1)),
             (dtype.itemsize, int(np.prod(shape[:k], dtype=np.int64)), int(np.prod(shape[k:], dtype=np.int64)),
              int(np.prod(i_shape[:-1], dtype=np.int64)), k, code, *shape[:k]))


@lowers("GatherElements", "ScatterElements")
def elements(ctx) -> None:
    """GatherElements, and ScatterElements without reduction: element by element along the axis
    (``qe_k_elements``; an index the op reads 0 at or skips, with a warning, is left to its
    Python step, QE_RC_PYTHON)."""
    op = ctx.impl
    scatter = type(op) is gather_ops.ScatterElements
    if type(op) not in (gather_ops.GatherElements, gather_ops.ScatterElements) or ctx.n_out != 1:
        raise Unsupported("a wrapped GatherElements / ScatterElements")
    if scatter and int(op.param_values.get("reduction", gather_ops.RED_NONE)) != gather_ops.RED_NONE:
        raise Unsupported("ScatterElements with a reduction")
    code = _DYN_INDEX_CODES.get(ctx.in_dtype(1))
    if code is None or ctx.in_conv(1) is not None:
        raise Unsupported(f"{ctx.node.op_type} with {ctx.in_dtype(1)} indices")
    shape, i_shape = ctx.in_shape(0), ctx.in_shape(1)
    if not 1 <= len(shape) <= 8 or len(i_shape) != len(shape):
        raise Unsupported(f"rank {len(shape)}")
    axis = int(op.param_values.get("axis", 0)) % len(shape)
    srcs, dtype = _same_received(ctx, [0, 2] if scatter else [0])
    bufs = (srcs[0], result_buffer(ctx, 0, dtype), ctx.input_raw(1)) + ((srcs[1],) if scatter else ())
    ctx.emit("qe_k_elements", bufs, (int(scatter), dtype.itemsize, len(shape), axis, code, *i_shape, *shape))


def _op_maps(ctx, op, data: list[int]) -> list[np.ndarray]:
    """The op's outputs computed on index arrays (other inputs: their static values)."""
    arrays = _index_inputs(ctx, data)
    args = []
    for i in range(ctx.n_in):
        if i in data:
            args.append(arrays[data.index(i)])
        else:
            v = static_input(ctx, i)
            if v is None:
                raise Unsupported(f"input {i} is dynamic")
            args.append(v)
    with np.errstate(all="ignore"):
        out = op._run(*args, **op.param_values)
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != ctx.n_out:
        raise Unsupported("outputs and writes differ")
    maps = []
    for k, m in enumerate(out):
        m = np.asarray(m)
        if m.dtype != I64 or tuple(m.shape) != tuple(ctx.out_shape(k)):
            raise Unsupported(f"output {k} of the index run is {m.dtype} {m.shape}")
        maps.append(np.ascontiguousarray(m))
    return maps


def _verify(ctx, op, data, progs, maps=None) -> None:
    """Replays the copies on the index arrays and compares with the op's own map."""
    arrays = [a.reshape(-1) for a in _index_inputs(ctx, data)]
    if maps is None:
        maps = _op_maps(ctx, op, data)
    for k, (prog, m) in enumerate(zip(progs, maps)):
        if not np.array_equal(prog.replay(arrays), m.reshape(-1)):
            raise Unsupported(f"the copies of output {k} do not reproduce the op's index map")


# -- pooling ---------------------------------------------------------------------------------------
@lowers("PoolMax2d", "PoolAvg2d")
def pool2d(ctx) -> None:
    """kernels.c's qe_pool2d, as the op's fast path calls it; max pooling and global average
    pooling through eng_movement.c's register versions of it (the same values, bit for bit)."""
    op = ctx.impl
    if type(op) not in (pool_ops.PoolMax2d, pool_ops.PoolAvg2d) or ctx.n_out != 1:
        raise Unsupported("a wrapped pooling op")
    if not (_fast.fast() and _fast.enabled()):
        raise Unsupported("the op runs its numpy reference kernels")
    if op._geom is None:
        raise Unsupported("pooling geometry unresolved")
    k, s, pad, out = op._geom
    p = op.param_values
    count_pad = bool(p.get("count_pad_for_edges", False))
    if op.kind == "avg" and op.float16_math and len(set(k)) == 1 and k[0] in pool_ops.RECIPROCAL_WINDOWS:
        raise Unsupported("float16 average pooling by a float16 reciprocal")
    if op.kind == "max" and not op.zero_padding() and _maxpool_codes(ctx, k, s, pad, out):
        return
    x = ctx.input_f32(0)
    n, h, w, c = ctx.in_shape(0)
    y = ctx.output_f32(0)
    if op.kind == "max" and not op.zero_padding():
        extra = pool_ops._overhang((h, w), k, s, pad, out)
        if any(p0 or p1 or e for (p0, p1), e in zip(pad, extra)):
            # cells outside the input are ignored: -inf around it, then no padding left
            ph, pw = h + pad[0][0] + pad[0][1] + extra[0], w + pad[1][0] + pad[1][1] + extra[1]
            xp = ctx.scratch(4 * n * ph * pw * c)
            ctx.emit("qe_k_fill", (xp, ctx.const(np.array([-np.inf], np.float32))), (n * ph * pw * c, 4))
            shape, ss, ds = _collapse((n, h, w * c), (h * w * c, w * c, 1), (ph * pw * c, pw * c, 1))
            ctx.emit("qe_k_move", (x, xp), (4, len(shape), 0, (pad[0][0] * pw + pad[1][0]) * c,
                                            *shape, *ss, *ds))
            x, h, w, pad = xp, ph, pw, ((0, 0), (0, 0))
    if op.kind == "max":   # qe_pool2d's max pooling, 16 channels a register, threaded
        ctx.emit("qe_k_maxpool_f32", (x, y), (n, h, w, c, k[0], k[1], out[0], out[1], s[0], s[1],
                                               pad[0][0], pad[1][0]))
        return
    if tuple(out) == (1, 1) and tuple(k) == (h, w) and not any(pad[0]) and not any(pad[1]):
        # a global average (squeeze-excitation): channel vectors of float64 sums, threaded
        ctx.emit("qe_k_avgpool_global_f32", (x, y), (n, h, w, c))
        return
    ctx.emit("qe_k_pool2d", (x, y), (0 if op.kind == "max" else 1, n, h, w, c, k[0], k[1], out[0], out[1],
                                     s[0], s[1], pad[0][0], pad[0][1], pad[1][0], pad[1][1], int(count_pad)))


def _maxpool_codes(ctx, k, s, pad, out) -> bool:
    """Max pooling of codes the plan dequantizes and requantizes: the window's largest code,
    then its output code (no table when that is the same code).  Exact when dequantization
    never decreases with the code (checked on every code): the largest value is then the
    largest code's value.  False when the step is not of that form."""
    t = code_table(ctx, 0)
    if t is None:
        return False
    values, table = t
    if np.isnan(values).any() or np.any(np.diff(values.astype(np.float64)) < 0):
        return False
    n, h, w, c = ctx.in_shape(0)
    for i in range(2):   # every window holds an input cell (pad < filter; CEIL drops the rest)
        if (out[i] - 1) * s[i] - pad[i][0] >= (h, w)[i] or k[i] <= pad[i][0]:
            return False
    din, dout = ctx.in_dtype(0), ctx.out_dtype(0)
    same = _identity(ctx, 0, table)
    bufs = (_stored_input(ctx, 0), _stored_output(ctx, 0)) + (() if same else (ctx.const(table),))
    ctx.emit("qe_k_maxpool_codes", bufs, (type_code(din), type_code(dout), n, h, w, c, k[0], k[1], out[0], out[1],
                                          s[0], s[1], pad[0][0], pad[1][0], int(not same)))
    return True


# -- reductions ------------------------------------------------------------------------------------
REDUCE_KINDS = {reduce_ops.ReduceSum: 0, reduce_ops.ReduceMean: 1, reduce_ops.ReduceMax: 2,
                reduce_ops.ReduceMin: 3}


@lowers("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")
def reduce(ctx) -> None:
    op = ctx.impl
    kind = REDUCE_KINDS.get(type(op))
    if kind is None or ctx.n_out != 1 or op._axes is None:
        raise Unsupported("a wrapped reduction")
    geom = _fast_movement.reduce_geometry(ctx.in_shape(0), op._axes)
    if geom is None:
        raise Unsupported("reduced axes that are not one run")
    outer, red, inner = geom
    src, dtype = received(ctx, 0)
    if dtype == F32:
        if not (_fast.fast() and _fast.enabled()):
            raise Unsupported("the op runs its numpy reference kernels")
        acc = ctx.scratch(8 * inner)
        ctx.emit("qe_k_reduce_f32", (src, result_buffer(ctx, 0, dtype), acc), (kind, outer, red, inner))
        return
    if kind in (2, 3) and dtype.kind in "iu" and dtype.itemsize <= 4:
        ctx.emit("qe_k_reduce_minmax", (src, result_buffer(ctx, 0, dtype)),
                 (int(kind == 2), type_code(dtype), outer, red, inner))
        return
    raise Unsupported(f"a reduction of {dtype}")


# -- resizing --------------------------------------------------------------------------------------
@lowers("Resize", "ResizeBilinear", "ResizeNearestNeighbor")
def resize(ctx) -> None:
    """The op's per-axis plan: nearest axes as row gathers, interpolated axes as
    qe_resize_taps (the function the op's fast path calls), one axis after the other."""
    op = ctx.impl
    if type(op) not in (resize_ops.Resize, resize_ops.ResizeBilinear, resize_ops.ResizeNearestNeighbor) \
            or ctx.n_out != 1:
        raise Unsupported("a wrapped resize op")
    in_shape, out_shape = tuple(ctx.in_shape(0)), tuple(ctx.out_shape(0))
    steps = op._plan(in_shape, out_shape, op.param_values)
    src, dtype = received(ctx, 0)
    if dtype.kind == "f" and dtype != F32:
        raise Unsupported(f"resizing {dtype} (computed in float32 and cast back)")
    if dtype.itemsize not in ELEMENT_SIZES:
        raise Unsupported(f"element size {dtype.itemsize}")
    interpolates = any(step[0] != "gather" for _, step in steps)
    if interpolates and (dtype != F32 or not (_fast.fast() and _fast.enabled())):
        raise Unsupported("interpolation of non-float32 values or with the numpy reference kernels")
    dst = result_buffer(ctx, 0, dtype)
    if not steps:
        ctx.emit("qe_k_copy", (src, dst), (int(np.prod(in_shape, dtype=np.int64)) * dtype.itemsize,))
        return
    cur, shape = src, list(in_shape)
    for n, (axis, step) in enumerate(steps):
        new_shape = list(shape)
        new_shape[axis] = out_shape[axis]
        out = dst if n == len(steps) - 1 else ctx.scratch(int(np.prod(new_shape, dtype=np.int64)) * dtype.itemsize)
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        idx = np.ascontiguousarray(np.asarray(step[1]), np.int64)
        if step[0] == "gather":
            ctx.emit("qe_k_gather_rows", (cur, out, ctx.const(idx.reshape(-1))),
                     (dtype.itemsize, outer, idx.size, shape[axis], inner))
        else:
            w = np.ascontiguousarray(np.asarray(step[2]).astype(np.float32))
            ctx.emit("qe_k_resize_taps", (cur, out, ctx.const(idx), ctx.const(w)),
                     (outer, shape[axis], inner, idx.shape[0], idx.shape[1]))
        cur, shape = out, new_shape
