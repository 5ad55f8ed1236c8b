"""The C engine's movement family (qnnemu/core/engine/lower_movement.py, csrc/eng_movement.c;
issue 13): data-movement ops (QNN op definitions Reshape, Transpose, Concat, Split, Pack, UnPack,
StridedSlice, Pad, Tile, DepthToSpace, SpaceToDepth, ChannelShuffle, BatchToSpace,
SpaceToBatch, Gather), PoolMax2d / PoolAvg2d and ReduceSum / ReduceMean / ReduceMax /
ReduceMin compile to C steps with no fallback, and their outputs equal the Python plan's byte
for byte (``check_plan``), on float32 values and on 8/16-bit codes (passed through, or
dequantized and requantized when the encodings differ)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, U8, GraphBuilder, desc, new_context, param
from hypothesis import assume, given, strategies as st

from qnnemu.core.device import model_from_configs
from qnnemu.core.engine import check_plan
from qnnemu.core.engine.lower_movement import Program, plan_single
from qnnemu.core.graph import OpConfigDesc, ParamDesc
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.ops import _fast, _fast_movement
from qnnemu.ops.reduce import ReduceMean

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

F32 = Q.QNN_DATATYPE_FLOAT_32
U16 = Q.QNN_DATATYPE_UFIXED_POINT_16
S8 = Q.QNN_DATATYPE_SFIXED_POINT_8
S16 = Q.QNN_DATATYPE_SFIXED_POINT_16
I32 = Q.QNN_DATATYPE_INT_32
CODES_NP = {U8: np.uint8, U16: np.uint16, S8: np.int8, S16: np.int16}
lib, ffi = _fast.library()

# element kinds: (QNN type, input encoding, output encoding); different encodings make the plan
# dequantize before and requantize after the op
KINDS = {
    "f32": (F32, None, None),
    "u8": (U8, (0.05, -100), (0.05, -100)),
    "u16": (U16, (0.001, -30000), (0.001, -30000)),
    "u8-requant": (U8, (0.05, -100), (0.07, -90)),
    "s8-requant": (S8, (0.05, 3), (0.02, -10)),
    "u16-requant": (U16, (0.001, -30000), (0.0017, -20000)),
    "s16-requant": (S16, (0.001, 100), (0.0005, -40)),
}


def int32_param(name, values) -> ParamDesc:
    arr = np.asarray(values, np.int32)
    return ParamDesc(name, "tensor", I32, tensor=desc(f"{name}.param", arr.shape, I32, STATIC, arr))


def kernels_of(graph) -> list[str]:
    """The C kernels of the graph's program, by name, in order."""
    names = {}
    for name in ("qe_k_move", "qe_k_fill", "qe_k_gather_rows", "qe_k_copy", "qe_k_pool2d", "qe_k_reduce_f32",
                 "qe_k_reduce_minmax", "qe_k_dequant", "qe_k_requant", "qe_k_move_lut", "qe_k_maxpool_codes",
                 "qe_k_nop", "qe_k_maxpool_f32", "qe_k_avgpool_global_f32"):
        names[int(ffi.cast("intptr_t", ffi.addressof(lib, name)))] = name
    return [names.get(int(row[0]), "?") for row in graph.plan.engine.program.steps]


def run_one(op, in_shapes, out_shapes, kind="f32", statics=None, seed=0, **params) -> list[str]:
    """One node graph, finalized; asserts no fallback and bit identity; returns the names of
    its C kernels.  The context is freed (live graphs would pile up in the handle table)."""
    dtype, qin, qout = KINDS[kind]
    b = GraphBuilder(new_context(), "g")
    try:
        ins = [b.tensor(f"x{i}", s, dtype, APP_WRITE, quant=qin) for i, s in enumerate(in_shapes)]
        for name, (arr, qdtype) in (statics or {}).items():
            ins.append(b.tensor(name, arr.shape, qdtype, STATIC, data=arr))
        outs = [b.tensor(f"y{k}", s, dtype, APP_READ, quant=qout) for k, s in enumerate(out_shapes)]
        cfg = OpConfigDesc(1, "n", "qti.aisw", op,
                           [v if isinstance(v, ParamDesc) else param(k, v) for k, v in params.items()],
                           [_ref(t) for t in ins], [_ref(t) for t in outs])
        b.graph.add_node(cfg)
        try:
            b.graph.finalize()
        except QnnError as exc:   # a configuration the HTP has no kernel for (docs/op-support.md)
            if exc.rule != "QNNEMU-htp-op-finalize":
                raise
            assume(False)
        graph = b.graph
        assert graph.plan.engine.fallbacks == [], f"{op} ({kind}) lowers to C: {graph.plan.engine.fallbacks}"
        rng = np.random.default_rng(seed)
        feeds = {}
        for t, s in zip(ins, in_shapes):
            if dtype == F32:
                feeds[t.id] = rng.standard_normal(s).astype(np.float32)
            else:
                info = np.iinfo(CODES_NP[dtype])
                feeds[t.id] = rng.integers(info.min, info.max + 1, s).astype(CODES_NP[dtype])
        check_plan(graph.plan, feeds)   # raises EngineMismatch at the first differing byte
        return kernels_of(graph)
    finally:
        b.graph.context.free()


def _ref(t):
    from helpers.binary_builders import ref
    return ref(t)


kinds = st.sampled_from(sorted(KINDS))


@st.composite
def shapes(draw, min_rank=1, max_rank=5, max_dim=5):
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.integers(1, max_dim)) for _ in range(rank))


# -- the kernels against numpy ----------------------------------------------------------------------
@given(es=st.sampled_from([1, 2, 4, 8]), shape=shapes(max_rank=4), data=st.data())
def test_move_kernel_matches_numpy_strided_views(es, shape, data):
    """qe_k_move copies any strided view (negative and zero strides too) for each element size."""
    src_shape = tuple(d + data.draw(st.integers(0, 2)) for d in shape)
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[es]
    src = np.random.default_rng(len(shape)).integers(0, 2**31, src_shape).astype(dtype)
    flips = [data.draw(st.booleans()) for _ in shape]
    repeat = [data.draw(st.booleans()) and d == 1 for d in shape]
    view = src[tuple(slice(d - 1, None, -1) if f else slice(None, d) for d, f in zip(shape, flips))]
    view = np.broadcast_to(view, tuple(3 if r else d for d, r in zip(shape, repeat)))
    steps = [s // es for s in view.strides]
    off = (view.__array_interface__["data"][0] - src.ctypes.data) // es
    dst = np.zeros(view.shape, dtype)
    prog = Program(dst.size)
    ptrs = ffi.new("void *[]", [ffi.cast("void *", src.ctypes.data), ffi.cast("void *", dst.ctypes.data)])
    ints = [es, view.ndim, off, 0, *view.shape, *steps, *(s // es for s in dst.strides)]
    ivals = ffi.new("int64_t[]", ints)
    args = ffi.new("qe_args *", {"p": ptrs, "i": ivals, "d": ffi.NULL, "np": 2, "ni": len(ints), "nd": 0})
    assert lib.qe_k_move(args) == 0, "qe_k_move accepts the view"
    assert dst.tobytes() == np.ascontiguousarray(view).tobytes(), \
        f"qe_k_move copies the {es}-byte view {view.shape} strides {steps} offset {off}"
    assert prog.n == dst.size, "program size recorded"


def test_index_map_planner_picks_copies_gathers_and_fills():
    """Affine maps become one strided copy, non-affine ones a row gather, holes a fill."""
    x = np.arange(1, 25, dtype=np.int64).reshape(2, 3, 4)
    moved = plan_single(np.ascontiguousarray(x.transpose(2, 0, 1)), 24)
    assert len(moved.moves) == 1 and not moved.gathers and not moved.fill, "a transpose is one strided copy"
    rows = plan_single(np.ascontiguousarray(x[:, [2, 0, 2]]), 24)
    assert rows.gathers and rows.gathers[0][2] == 4, "repeated rows of 4 become a gather of 4-element rows"
    padded = plan_single(np.pad(x, ((0, 0), (1, 1), (0, 2))), 24)
    assert padded.fill and len(padded.moves) == 1, "constant padding: a fill and one copy"
    for prog, want in ((moved, x.transpose(2, 0, 1)), (rows, x[:, [2, 0, 2]]),
                       (padded, np.pad(x, ((0, 0), (1, 1), (0, 2))))):
        assert (prog.replay([x.reshape(-1)]) == want.reshape(-1)).all(), "the replay reproduces the map"


@given(shape=shapes(max_rank=4, max_dim=6), data=st.data(),
       kind=st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]))
def test_float_reduction_fast_path_is_the_c_kernel(shape, data, kind):
    """The ops' fast path and the engine share qe_reduce_f32; its sums equal float64 sums of the
    values (to the last bit: exact integers) and its max/min numpy's."""
    rank = len(shape)
    lo = data.draw(st.integers(0, rank - 1))
    hi = data.draw(st.integers(lo, rank - 1))
    axes = list(range(lo, hi + 1))
    x = np.random.default_rng(rank).integers(-50, 50, shape).astype(np.float32)
    y = _fast_movement.reduce_f32(kind, x, axes, True)
    assert y is not None, "a run of axes reduces in C"
    ref = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min}[kind](
        x.astype(np.float64), axis=tuple(axes), keepdims=True).astype(np.float32)
    assert y.shape == ref.shape and y.tobytes() == ref.tobytes(), f"{kind} over {axes} of {shape}"


def test_reduction_keeps_the_first_nan_and_declines_split_axes():
    x = np.array([[1.0, np.nan, 3.0], [np.inf, 2.0, -np.inf]], np.float32)
    y = _fast_movement.reduce_f32("ReduceMax", x, [1], False)
    assert np.isnan(y[0]) and y[1] == np.inf, "max propagates NaN and keeps infinities"
    assert _fast_movement.reduce_f32("ReduceMean", np.ones((2, 3, 4), np.float32), [0, 2], False) is None, \
        "axes that are not one run stay in numpy"
    assert ReduceMean.op_type == "ReduceMean"


# -- graphs: no fallback, bit-identical ------------------------------------------------------------
@given(shape=shapes(max_rank=6), data=st.data(), kind=kinds)
def test_transpose(shape, data, kind):
    perm = data.draw(st.permutations(range(len(shape))))
    names = run_one("Transpose", [shape], [tuple(shape[p] for p in perm)], kind, perm=list(perm))
    live = [p for p in perm if shape[p] != 1]
    if live == sorted(live) and kind in ("f32", "u8", "u16"):
        assert names == ["qe_k_nop"], f"a transpose keeping memory order shares its input's bytes: {names}"
    else:
        assert "qe_k_move" in names or "qe_k_move_lut" in names, f"a transpose is a strided copy: {names}"


@given(shape=shapes(max_rank=4), data=st.data(), kind=kinds)
def test_concat_split_pack_unpack(shape, data, kind):
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = data.draw(st.integers(1, 3))
    parts = [tuple(data.draw(st.integers(1, 4)) if j == axis else d for j, d in enumerate(shape))
             for _ in range(n)]
    total = list(shape)
    total[axis] = sum(p[axis] for p in parts)
    run_one("Concat", parts, [tuple(total)], kind, axis=axis)
    starts = np.cumsum([0] + [p[axis] for p in parts])[:-1]
    run_one("Split", [tuple(total)], parts, kind, axis=axis, split_index=[int(s) for s in starts[1:]] or [0])
    packed = shape[:axis] + (n,) + shape[axis:]
    run_one("Pack", [shape] * n, [packed], kind, axis=axis)
    run_one("UnPack", [packed], [shape] * n, kind, axis=axis)


@given(shape=shapes(max_rank=4, max_dim=6), data=st.data(), kind=kinds)
def test_strided_slice(shape, data, kind):
    """Any begin/end/stride (negative strides too) and begin/end/shrink masks."""
    ranges, out = [], []
    shrink = data.draw(st.integers(0, 2 ** len(shape) - 1))
    begin_mask = data.draw(st.integers(0, 2 ** len(shape) - 1))
    end_mask = data.draw(st.integers(0, 2 ** len(shape) - 1))
    for d in shape:
        s = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
        ranges.append([data.draw(st.integers(-d - 1, d + 1)), data.draw(st.integers(-d - 1, d + 1)), s])
    from qnnemu.ops.shape import StridedSlice
    params = {"ranges": np.array(ranges), "begin_mask": begin_mask, "end_mask": end_mask,
              "shrink_axes": shrink, "new_axes_mask": 0}
    try:
        _, out = StridedSlice.index(shape, params)
    except Exception:    # an empty slice or a shrink index outside the dimension: the op refuses it
        assume(False)
    assume(len(out) >= 1)
    run_one("StridedSlice", [shape], [out], kind, ranges=int32_param("ranges", ranges), begin_mask=begin_mask,
            end_mask=end_mask, shrink_axes=shrink)


@given(shape=shapes(max_rank=4, max_dim=5), data=st.data(), kind=kinds,
       scheme=st.sampled_from([0, 1, 2, 3]))
def test_pad(shape, data, kind, scheme):
    assume(not (scheme == 3 and kind == "f32"))        # EDGE on float32: the vendor has no kernel
    limit = {0: 3, 1: 0, 2: 1, 3: 3}[scheme]
    pads = [[data.draw(st.integers(0, max(0, min(3, d - limit if scheme in (1, 2) else 3))))
             for _ in range(2)] for d in shape]
    out = tuple(d + a + b for d, (a, b) in zip(shape, pads))
    value = data.draw(st.sampled_from([0, 1.5, -2.0, 3]))
    run_one("Pad", [shape], [out], kind, scheme=scheme, pad_amount=pads, pad_constant_value=float(value))


@given(data=st.data(), kind=kinds, mode=st.sampled_from([0, 1]))
def test_depth_space_shuffle_tile_batch(data, kind, mode):
    n, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    bh, bw, c = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    names = run_one("DepthToSpace", [(n, h, w, bh * bw * c)], [(n, h * bh, w * bw, c)], kind, block_size=[bh, bw],
                mode=mode)
    assert "qe_k_gather_rows" not in names, "DepthToSpace is strided copies"
    run_one("SpaceToDepth", [(n, h * bh, w * bw, c)], [(n, h, w, bh * bw * c)], kind, block_size=[bh, bw],
            mode=mode)
    groups = data.draw(st.integers(1, 3))
    run_one("ChannelShuffle", [(n, h, w, groups * c)], [(n, h, w, groups * c)], kind, num_groups=groups)
    m = [data.draw(st.integers(1, 3)) for _ in range(3)]
    run_one("Tile", [(h, w, c)], [(h * m[0], w * m[1], c * m[2])], kind, multiples=m)
    run_one("BatchToSpace", [(n * bh * bw, h, w, c)], [(n, h * bh, w * bw, c)], kind, block_size=[bh, bw])
    run_one("SpaceToBatch", [(n, h * bh, w * bw, c)], [(n * bh * bw, h, w, c)], kind, block_size=[bh, bw])
    run_one("SpaceToBatch", [(n, h * bh - 1 + bh, w * bw, c)], [(n * bh * bw, h + 1, w, c)], kind,
            block_size=[bh, bw], pad_amount=[[1, 0], [0, 0]])


@pytest.mark.parametrize("op,in_shape,out_shape", [
    ("Reshape", (2, 3, 4), (6, 4)), ("Squeeze", (2, 1, 4), (2, 4)), ("ExpandDims", (2, 4), (2, 1, 4))])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_plain_copies(op, in_shape, out_shape, kind):
    params = {"axis": 1} if op == "ExpandDims" else {}
    names = run_one(op, [in_shape], [out_shape], kind, **params)
    if kind in ("f32", "u8", "u16"):   # nothing converts: the output shares the input's bytes
        assert names == ["qe_k_nop"], f"{op} ({kind}) shares its input's bytes: {names}"
    else:
        assert "qe_k_copy" in names, f"{op} ({kind}) copies the bytes: {names}"


@pytest.mark.parametrize("kind", ["u8", "u8-requant"])
def test_gather_static_indices(kind):
    idx = np.array([[0, 4], [3, 3]], np.int32)
    for axis, shape, out in ((0, (6, 5), (2, 2, 5)), (1, (3, 6, 2), (3, 2, 2, 2))):
        names = run_one("Gather", [shape], [out], kind, statics={"idx": (idx, I32)}, axis=np.int32(axis))
        assert "qe_k_gather_rows" in names, "Gather of static indices is a row gather"


@given(data=st.data(), kind=st.sampled_from(["f32", "u8", "u8-requant", "s8-requant", "u16-requant", "s16-requant"]),
       op=st.sampled_from(["PoolMax2d", "PoolAvg2d"]))
def test_pool2d(data, kind, op):
    """Padding, strides, CEIL mode and count_pad_for_edges; max pooling of float32 counts the
    padding as zeros on v68, of fixed point ignores it (on codes: qe_k_maxpool_codes, with a
    table of output codes when the encodings differ)."""
    from qnnemu.ops.pool import pool_output_size
    h, w, c = data.draw(st.integers(2, 9)), data.draw(st.integers(2, 9)), data.draw(st.integers(1, 5))
    k = [data.draw(st.integers(1, min(4, h))), data.draw(st.integers(1, min(4, w)))]
    s = [data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))]
    pad = [[data.draw(st.integers(0, kk - 1)) for _ in range(2)] for kk in k]
    ceil = data.draw(st.booleans())
    out = [pool_output_size(n, p[0], p[1], kk, ss, ceil) for n, p, kk, ss in zip((h, w), pad, k, s)]
    assume(min(out) >= 1)
    params = dict(filter_size=k, stride=s, pad_amount=pad, rounding_mode=int(ceil))
    if op == "PoolAvg2d":
        params["count_pad_for_edges"] = data.draw(st.booleans())
    names = run_one(op, [(1, h, w, c)], [(1, out[0], out[1], c)], kind, **params)
    if op == "PoolMax2d" and kind != "f32":
        assert names == ["qe_k_maxpool_codes"], f"max pooling of codes is one step on codes, got {names}"
    elif op == "PoolMax2d":
        assert "qe_k_maxpool_f32" in names, f"float max pooling runs qe_k_maxpool_f32, got {names}"
    elif out == [1, 1] and k == [h, w] and not any(pad[0] + pad[1]):
        assert "qe_k_avgpool_global_f32" in names, f"a global average runs qe_k_avgpool_global_f32, got {names}"
    else:
        assert "qe_k_pool2d" in names, f"{op} runs qe_pool2d, got {names}"


@given(data=st.data(), dtype=st.sampled_from([U8, S8, U16, S16]))
def test_concat_of_codes_in_other_encodings(data, dtype):
    """Concat whose inputs have their own encodings (one of them maybe the output's): each
    input's codes go through a table of output codes (qe_k_move_lut), or a plain copy where the
    encodings agree; bytes equal the plan's dequantize + concatenate + requantize."""
    info = np.iinfo(CODES_NP[dtype])
    wide = info.bits == 16
    rank = data.draw(st.integers(1, 4))
    shape = [data.draw(st.integers(1, 5)) for _ in range(rank)]
    axis = data.draw(st.integers(0, rank - 1))
    n = data.draw(st.integers(2, 3))
    def encoding():
        scale = float(np.float32(data.draw(st.floats(0.0002 if wide else 0.01, 0.002 if wide else 0.2))))
        return scale, -int(data.draw(st.integers(int(info.min), int(info.max))))
    out_q = encoding()
    qs = [out_q if data.draw(st.booleans()) else encoding() for _ in range(n)]
    parts = [tuple(data.draw(st.integers(1, 3)) if j == axis else d for j, d in enumerate(shape)) for _ in range(n)]
    total = list(shape)
    total[axis] = sum(p[axis] for p in parts)
    b = GraphBuilder(new_context(), "g")
    try:
        ins = [b.tensor(f"x{i}", p, dtype, APP_WRITE, quant=q) for i, (p, q) in enumerate(zip(parts, qs))]
        y = b.tensor("y", tuple(total), dtype, APP_READ, quant=out_q)
        b.graph.add_node(OpConfigDesc(1, "n", "qti.aisw", "Concat", [param("axis", axis)],
                                      [_ref(t) for t in ins], [_ref(y)]))
        b.graph.finalize()
        assert b.graph.plan.engine.fallbacks == [], f"Concat lowers to C: {b.graph.plan.engine.fallbacks}"
        rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
        feeds = {t.id: rng.integers(info.min, info.max + 1, p).astype(CODES_NP[dtype]) for t, p in zip(ins, parts)}
        check_plan(b.graph.plan, feeds)
        names = kernels_of(b.graph)
        assert "qe_k_dequant" not in names and "qe_k_requant" not in names, f"codes move as codes: {names}"
        if any(q != out_q for q in qs):
            assert "qe_k_move_lut" in names, f"inputs in another encoding go through their table: {names}"
    finally:
        b.graph.context.free()


@given(shape=shapes(max_rank=4, max_dim=6), data=st.data(), kind=kinds,
       op=st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]))
def test_reduce(shape, data, kind, op):
    rank = len(shape)
    lo = data.draw(st.integers(0, rank - 1))
    hi = data.draw(st.integers(lo, rank - 1))
    axes = list(range(lo, hi + 1))
    keep = data.draw(st.booleans())
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)
    assume(not (kind in ("u8", "u16") and op in ("ReduceSum", "ReduceMean")))  # codes: dequantized always
    run_one(op, [shape], [out], kind, axes=axes, keep_dims=keep)


def test_global_average_pooling_is_one_c_step_per_form():
    """MobileNet/ResNet/EfficientNet end with a global average: as PoolAvg2d or ReduceMean."""
    names = run_one("ReduceMean", [(1, 7, 7, 64)], [(1, 1, 1, 64)], "f32", axes=[1, 2], keep_dims=True)
    assert names == ["qe_k_reduce_f32"], "ReduceMean over H, W is one C reduction"
    names = run_one("PoolAvg2d", [(1, 7, 7, 64)], [(1, 1, 1, 64)], "f32", filter_size=[7, 7], stride=[1, 1])
    assert names == ["qe_k_avgpool_global_f32"], f"global PoolAvg2d is one channel-vector step: {names}"


@pytest.mark.parametrize("kind", ["f32", "u8", "u16"])
@pytest.mark.parametrize("shape,perm", [((1, 37, 41, 20), [0, 3, 1, 2]), ((1, 20, 37, 41), [0, 2, 3, 1]),
                                        ((3, 33, 9, 2), [0, 3, 2, 1]), ((1, 28, 28, 58, 2), [0, 1, 2, 4, 3])])
def test_large_transposes_take_the_tiled_path(kind, shape, perm):
    """Dimensions of 8 and more: the 32 x 32 tiled copy (csrc/eng_movement.c move_transposed),
    partial tiles included."""
    names = run_one("Transpose", [shape], [tuple(shape[p] for p in perm)], kind, perm=perm)
    assert names.count("qe_k_move") == 1, "one strided copy"


@given(data=st.data(), kind=st.sampled_from(["f32", "u8-requant", "u8"]),
       op=st.sampled_from(["Resize", "ResizeBilinear", "ResizeNearestNeighbor"]))
def test_resize(data, kind, op):
    """Nearest (row gathers) and linear / cubic interpolation (qe_resize_taps) along H and W,
    up and down, every transformation mode; channels 1 included (numpy would sum the taps in
    another order there: both paths share the C function)."""
    h, w, c = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)), data.draw(st.integers(1, 3))
    oh, ow = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    if op == "Resize":
        params = dict(interpolation_mode=data.draw(st.sampled_from([0, 1, 2])),
                      transformation_mode=data.draw(st.sampled_from([0, 1, 2, 3])),
                      nearest_mode=data.draw(st.sampled_from([0, 1, 2, 3])),
                      exclude_outside=data.draw(st.booleans()))
    else:
        flag = data.draw(st.sampled_from(["", "align_corners", "half_pixel_centers"]))
        params = {flag: True} if flag else {}
        if op == "ResizeBilinear" and data.draw(st.booleans()):
            params["antialias"] = True
    run_one(op, [(1, h, w, c)], [(1, oh, ow, c)], kind, **params)


@pytest.mark.skipif(bool(__import__("os").environ.get("QNNEMU_KERNELS_ISA")), reason="already capped")
def test_code_kernels_portable_path():
    """Max pooling and Concat on codes again with QNNEMU_KERNELS_ISA=avx2 (a fresh process):
    the loops without AVX-512 give the plan's codes as well."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, QNNEMU_KERNELS_ISA="avx2", HYPOTHESIS_PROFILE="ci")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                          "-k", "pool2d or concat_of_codes"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=os.path.dirname(__file__))
    assert out.returncode == 0, f"the code kernels pass on the portable path: {out.stdout[-3000:]}"


I64 = Q.QNN_DATATYPE_INT_64
U32 = Q.QNN_DATATYPE_UINT_32
INDEX_NP = {I32: np.int32, U32: np.uint32, I64: np.int64}


def index_op_context(dtype):
    """A context for an index op's graph: float32 on SM8550 (v68 has no float Gather family of
    dynamic indices, docs/op-support.md; SM8550's float16 math rounds the values), codes on v68."""
    return new_context(model=model_from_configs(Q.QNN_SOC_MODEL_SM8550, None, None)) if dtype == F32 else new_context()


def random_values(rng, dtype, shape) -> np.ndarray:
    """Float32 values, or uint8 codes, of ``shape``."""
    if dtype == F32:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(0, 256, shape).astype(np.uint8)


def finalize_index_op(b, op: str, kernel: str) -> None:
    """Finalizes ``b`` (skips when the HTP model refuses the configuration, as the vendor's
    graphFinalize does) and checks the node is one ``kernel`` step, no fallback."""
    try:
        b.graph.finalize()
    except QnnError as exc:   # a configuration the HTP has no kernel for (docs/op-support.md)
        assert exc.rule == "QNNEMU-htp-op-finalize", f"{op} finalizes or the HTP refuses it: {exc}"
        pytest.skip(f"the HTP model refuses this {op} ({exc})")
    engine = b.graph.plan.engine
    assert engine.fallbacks == [] and kernel in engine.kernel_names, \
        f"{op} lowers to {kernel}: {engine.kernel_names} {engine.fallbacks}"


def dynamic_gather_graph(kind: str, index_type: int, *, relu_after: bool):
    """x [6, 5] (``kind``) and indices [6] (``index_type``), both fed at execute -> Gather axis 0
    -> [6, 5], then (float32, ``relu_after``) a Relu running in C after it."""
    dtype, qin, qout = KINDS[kind]
    b = GraphBuilder(index_op_context(dtype), "dyngather")
    x = b.tensor("x", (6, 5), dtype, APP_WRITE, quant=qin)
    idx = b.tensor("idx", (6,), index_type, APP_WRITE)
    g = b.tensor("g", (6, 5), dtype, Q.QNN_TENSOR_TYPE_NATIVE if relu_after else APP_READ, quant=qout)
    b.node("Gather", "gather", [x, idx], [g], axis=0)
    y = g
    if relu_after:
        y = b.tensor("y", (6, 5), dtype, APP_READ)
        b.node("Relu", "relu", [g], [y])
    b.graph.finalize()
    return b, x, idx, y, random_values(np.random.default_rng(3), dtype, (6, 5))


@pytest.mark.parametrize("index_type", [I32, U32, I64], ids=["int32", "uint32", "int64"])
@pytest.mark.parametrize("kind", ["f32", "u8", "u8-requant"])
def test_gather_with_dynamic_indices_is_one_c_step(kind, index_type):
    """Gather with indices fed at execute (a token embedding's lookup): one qe_k_gather_dyn step,
    no fallback, the Python plan's bytes."""
    b, x, idx, y, xv = dynamic_gather_graph(kind, index_type, relu_after=kind == "f32")
    try:
        engine = b.graph.plan.engine
        assert engine.fallbacks == [], f"dynamic Gather ({kind}) lowers to C: {engine.fallbacks}"
        assert "qe_k_gather_dyn" in engine.kernel_names, f"a dynamic row gather: {engine.kernel_names}"
        ind = np.array([5, 0, 2, 2, 2, 4], INDEX_NP[index_type])
        check_plan(b.graph.plan, {x.id: xv, idx.id: ind})
    finally:
        b.graph.context.free()


def test_dynamic_gather_leaves_a_negative_index_to_the_python_step(caplog):
    """An index the op wraps (negative, with its warning rule) is left to the node's Python step
    (QE_RC_PYTHON): the result is the wrapped gather, the warning is logged, and the Relu after
    it still runs; an index beyond the dimension fails the execute as the Python plan does."""
    from qnnemu.errors import OpCheckError
    b, x, idx, y, xv = dynamic_gather_graph("f32", I32, relu_after=True)
    try:
        plan = b.graph.plan
        ind = np.array([-1, 0, 2, 2, -6, 4], np.int32)
        with caplog.at_level("WARNING"):
            got = plan.engine.run({x.id: xv, idx.id: ind}, [y.id])[y.id]
        wrapped = np.where(ind < 0, ind + 6, ind).astype(np.int32)
        want = plan.engine.run({x.id: xv, idx.id: wrapped}, [y.id])[y.id]
        assert got.tobytes() == want.tobytes(), "the rows of the wrapped indices, then the Relu"
        assert "QNNEMU-index-negative-wrapped" in caplog.text, f"the op's warning is logged: {caplog.text!r}"
        check_plan(plan, {x.id: xv, idx.id: ind})
        with pytest.raises(OpCheckError) as info:
            plan.engine.run({x.id: xv, idx.id: np.array([0, 6, 1, 0, 0, 0], np.int32)}, [y.id])
        assert info.value.rule == "QNNEMU-Gather-index-range", f"index 6 of 6 rows fails: {info.value}"
    finally:
        b.graph.context.free()


def test_float16_math_moves_of_float16_values_do_not_round_again(monkeypatch):
    """Float16 math: a move of values a step already rounded (Reshape, Transpose, Concat, Gather)
    has no rounding step of its own (lowering.redundant_roundings) and a Reshape shares its
    input's bytes; so has a move of a graph input, which it reads rounded (its input converter).
    The Python plan's bytes (check_plan)."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float16")
    b = GraphBuilder(new_context(), "moves16")
    x = b.tensor("x", (2, 3, 4), F32, APP_WRITE)
    n = b.tensor("n", (2, 3, 4), F32)
    r = b.tensor("r", (6, 4), F32)
    t = b.tensor("t", (4, 6), F32)
    c = b.tensor("c", (8, 6), F32)
    y = b.tensor("y", (8, 6), F32, APP_READ)
    raw = b.tensor("raw", (6, 4), F32, APP_READ)
    b.node("ElementWiseNeg", "neg", [x], [n])
    b.node("Reshape", "reshape", [n], [r])
    b.node("Transpose", "transpose", [r], [t], perm=[1, 0])
    b.node("Concat", "concat", [t, t], [c], axis=0)
    b.node("ElementWiseNeg", "neg2", [c], [y])
    b.node("Reshape", "reshape_input", [x], [raw])
    # a Dequantize's float32 output is no float16 value: the Reshape of it rounds
    q = b.tensor("q", (2, 3, 4), U8, APP_WRITE, quant=(0.0123, -100))
    dq = b.tensor("dq", (2, 3, 4), F32)
    rdq = b.tensor("rdq", (6, 4), F32, APP_READ)
    b.node("Dequantize", "dequantize", [q], [dq])
    b.node("Reshape", "reshape_dq", [dq], [rdq])
    b.graph.finalize()
    try:
        plan = b.graph.plan
        assert plan.fp16 and plan.engine.fallbacks == [], f"float16 math, all in C: {plan.engine.fallbacks}"
        moves = {plan.steps[k].node.name for k in plan.engine.fp16_moves}
        assert moves == {"reshape", "transpose", "concat", "reshape_input"}, \
            f"the moves of float16 values: {sorted(moves)}"
        names = kernels_of(b.graph)
        assert names.count("qe_k_nop") >= 1, f"the Reshape of float16 values shares its bytes: {names}"
        rng = np.random.default_rng(8)
        check_plan(plan, {x.id: (rng.standard_normal((2, 3, 4)) * 100).astype(np.float32),
                          q.id: rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)})
    finally:
        b.graph.context.free()


@pytest.mark.parametrize("kind", ["f32", "u8", "u8-requant"])
@pytest.mark.parametrize("batch_dims,x_shape,i_shape,out_shape", [
    (0, (4, 5, 3), (6, 2), (6, 3)),
    (0, (4, 5, 3), (2, 3, 1), (2, 3, 5, 3)),
    (1, (2, 5, 3), (2, 4, 1), (2, 4, 3)),
])
def test_gather_nd_is_one_c_step(kind, batch_dims, x_shape, i_shape, out_shape):
    """GatherNd with indices fed at execute: one qe_k_gather_nd step, the Python plan's bytes; a
    negative index (the op wraps it with a warning) is left to the node's Python step."""
    dtype, qin, qout = KINDS[kind]
    b = GraphBuilder(index_op_context(dtype), "gathernd")
    x = b.tensor("x", x_shape, dtype, APP_WRITE, quant=qin)
    idx = b.tensor("idx", i_shape, I32, APP_WRITE)
    y = b.tensor("y", out_shape, dtype, APP_READ, quant=qout)
    b.node("GatherNd", "gnd", [x, idx], [y], batch_dims=batch_dims)
    try:
        finalize_index_op(b, "GatherNd", "qe_k_gather_nd")
        rng = np.random.default_rng(4)
        xv = random_values(rng, dtype, x_shape)
        dims = x_shape[batch_dims:batch_dims + i_shape[-1]]
        ind = np.stack([rng.integers(0, d, i_shape[:-1]) for d in dims], axis=-1).astype(np.int32)
        check_plan(b.graph.plan, {x.id: xv, idx.id: ind})
        ind.reshape(-1)[0] = -1
        check_plan(b.graph.plan, {x.id: xv, idx.id: ind})   # (the node's Python step this time)
    finally:
        b.graph.context.free()


@pytest.mark.parametrize("kind", ["f32", "u8", "u8-requant"])
@pytest.mark.parametrize("x_shape,i_shape,u_shape", [
    ((6, 4), (5, 1), (5, 4)),          # rows, one of them twice (the last write stays)
    ((3, 4, 2), (4, 2), (4, 2)),       # tuples of two
])
def test_scatter_nd_is_one_c_step(kind, x_shape, i_shape, u_shape):
    """ScatterNd without reduction, indices fed at execute: one qe_k_scatter_nd step, the Python
    plan's bytes (a repeated tuple included); a tuple outside the data (the op skips its update
    with a warning) is left to the node's Python step."""
    dtype, qin, qout = KINDS[kind]
    b = GraphBuilder(index_op_context(dtype), "scatternd")
    x = b.tensor("x", x_shape, dtype, APP_WRITE, quant=qin)
    idx = b.tensor("idx", i_shape, I32, APP_WRITE)
    u = b.tensor("u", u_shape, dtype, APP_WRITE, quant=qin)
    y = b.tensor("y", x_shape, dtype, APP_READ, quant=qout)
    b.node("ScatterNd", "snd", [x, idx, u], [y])
    try:
        finalize_index_op(b, "ScatterNd", "qe_k_scatter_nd")
        rng = np.random.default_rng(6)
        xv, uv = random_values(rng, dtype, x_shape), random_values(rng, dtype, u_shape)
        k = i_shape[-1]
        ind = np.stack([rng.integers(0, d, i_shape[:-1]) for d in x_shape[:k]], axis=-1).astype(np.int32)
        ind[-1] = ind[0]                   # a repeated tuple
        check_plan(b.graph.plan, {x.id: xv, idx.id: ind, u.id: uv})
        ind[1, 0] = x_shape[0]             # outside: the Python step skips that update
        check_plan(b.graph.plan, {x.id: xv, idx.id: ind, u.id: uv})
    finally:
        b.graph.context.free()


@pytest.mark.parametrize("op", ["GatherElements", "ScatterElements"])
@pytest.mark.parametrize("kind", ["f32", "u8", "u8-requant"])
@pytest.mark.parametrize("axis,x_shape,i_shape", [(0, (5, 4), (3, 4)), (1, (3, 6, 2), (3, 4, 2)),
                                                  (2, (2, 3, 5), (2, 2, 5))])
def test_gather_and_scatter_elements_are_one_c_step(op, kind, axis, x_shape, i_shape):
    """GatherElements / ScatterElements (no reduction) with indices fed at execute: one
    qe_k_elements step, the Python plan's bytes (ScatterElements with a repeated target); an
    index outside the axis (the ops read 0 / skip the update, with a warning) is left to the
    node's Python step."""
    dtype, qin, qout = KINDS[kind]
    b = GraphBuilder(index_op_context(dtype), "elements")
    scatter = op == "ScatterElements"
    x = b.tensor("x", x_shape, dtype, APP_WRITE, quant=qin)
    idx = b.tensor("idx", i_shape, I32, APP_WRITE)
    ins = [x, idx]
    if scatter:
        u = b.tensor("u", i_shape, dtype, APP_WRITE, quant=qin)
        ins.append(u)
    y = b.tensor("y", x_shape if scatter else i_shape, dtype, APP_READ, quant=qout)
    b.node(op, "el", ins, [y], axis=axis)
    try:
        finalize_index_op(b, op, "qe_k_elements")
        rng = np.random.default_rng(9)
        feeds = {x.id: random_values(rng, dtype, x_shape),
                 idx.id: rng.integers(0, x_shape[axis], i_shape).astype(np.int32)}
        if scatter:
            feeds[u.id] = random_values(rng, dtype, i_shape)
        check_plan(b.graph.plan, feeds)
        feeds[idx.id].reshape(-1)[2] = x_shape[axis]     # outside: the node's Python step
        check_plan(b.graph.plan, feeds)
    finally:
        b.graph.context.free()
