"""Data-movement and index ops (qnnemu/ops/shape.py, qnnemu/ops/gather.py): Reshape, Transpose,
Concat, Split, Pack, UnPack, ExpandDims, Squeeze, StridedSlice, Pad, Tile, DepthToSpace,
SpaceToDepth, ChannelShuffle, BatchToSpace, SpaceToBatch, Gather, GatherElements, GatherNd,
ScatterElements, ScatterNd.

References: ONNX's reference evaluator where the semantics match (Slice through ORT's QNN EP
range conversion, Pad, Tile, DepthToSpace, SpaceToDepth, Gather*, Scatter*), otherwise explicit
index formulas written here with loops; and the vendor's HTP backend (libQnnHtp.so from
onnxruntime_qnn, skipped when absent) for the behaviour the op definitions leave open, node by
node against the ops and against our library end to end.  Data types: the ops run on float32,
float16, integer, BOOL_8 and fixed-point codes (what the plan hands a quant_passthrough op).
Negative tests: one per rule id, asserting the rule id and the path.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from optest import expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpCheckError, OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import QuantSpec, TensorSpec, gather as gather_mod, shape as shape_mod

RNG = np.random.default_rng(7)
F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
I32, I64, U32 = Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_INT_64, Q.QNN_DATATYPE_UINT_32
U8Q, S8Q, U16Q = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8,
                  Q.QNN_DATATYPE_UFIXED_POINT_16)
BOOL = Q.QNN_DATATYPE_BOOL_8
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
QU8 = QuantSpec(ENC, 0.1, -128)  # real = 0.1 * (q - 128)


# ---- helpers --------------------------------------------------------------------------------
def spec_of(a: np.ndarray) -> TensorSpec:
    return TensorSpec(a.shape, dtypes.from_numpy(a.dtype))


def check(op_type, specs, params=None, declared=None):
    cls = ops.get(op_type)
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    dec = [spec(s) for s in declared] if declared is not None else None
    return cls.check(specs, ps, declared_outputs=dec)


def run(op_type, arrays, params=None, specs=None, declared=None):
    """check + run like the graph layer; returns the tuple of outputs."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    assert cls.quant_passthrough, f"{op_type} moves values: quant_passthrough is set"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    specs = specs or [spec_of(a) for a in arrays]
    dec = [spec(s, specs[0].dtype, specs[0].quant) for s in declared] if declared else None
    outs = cls.check(specs, ps, declared_outputs=dec)
    op = cls(cls.parse_params(ps), specs, outs)
    ys = op.run(*arrays)
    assert len(ys) == len(outs), f"{op_type}: run() gives {len(ys)} outputs, infer {len(outs)}"
    for y, o in zip(ys, outs):
        assert tuple(y.shape) == tuple(o.shape), \
            f"{op_type}: run() shape {y.shape} equals inferred shape {o.shape}"
        assert y.dtype == arrays[0].dtype, \
            f"{op_type}: output dtype {y.dtype} == in[0] {arrays[0].dtype}"
        assert o.dtype == specs[0].dtype, f"{op_type}: inferred dtype is in[0]'s"
    return ys


def run1(*args, **kw):
    return run(*args, **kw)[0]


def onnx_ref(op_type, inputs: dict, **attrs):
    node = helper.make_node(op_type, list(inputs), ["y"], **attrs)
    return ReferenceEvaluator(node).run(None, inputs)[0]


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def codes(*shape, dtype=np.uint8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


def assert_same(got, ref, what):
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} == reference {ref.shape}"
    assert np.array_equal(got, ref.astype(got.dtype)), f"{what}: values equal the reference"


# ---- Reshape / Transpose / Concat / any dtype ------------------------------------------------
@pytest.mark.parametrize("dtype,qdtype", [(np.float32, F32), (np.float16, F16), (np.int32, I32),
                                          (np.uint8, BOOL), (np.uint8, U8Q), (np.int8, S8Q)])
def test_reshape_transpose_concat_any_dtype(dtype, qdtype):
    x = (RNG.integers(0, 2, (2, 3, 4)) if qdtype == BOOL else RNG.integers(-50, 50, (2, 3, 4))
         ).astype(dtype)
    quant = QU8 if qdtype in (U8Q, S8Q) else None
    s = [spec(x.shape, qdtype, quant)]
    assert_same(run1("Reshape", [x], specs=s, declared=[(4, 6)]), x.reshape(4, 6),
                f"Reshape {dtypes.name(qdtype)}")
    assert_same(run1("Transpose", [x], {"perm": [2, 0, 1]}, specs=s), x.transpose(2, 0, 1),
                f"Transpose {dtypes.name(qdtype)}")
    y = run1("Concat", [x, x[:, :1]], {"axis": 1}, specs=[s[0], spec((2, 1, 4), qdtype, quant)])
    assert_same(y, np.concatenate([x, x[:, :1]], 1), f"Concat {dtypes.name(qdtype)}")


def test_concat_axis_forms():
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 4)
    for params in ({"axis": np.int32(1)}, {"axis": 1}):
        y = run1("Concat", [a, b, c], params)
        assert_same(y, np.concatenate([a, b, c], 1), f"Concat {params}")
    y = run1("Concat", [a, a, a])
    assert_same(y, np.concatenate([a, a, a], 0),
                "Concat without axis: axis 0 (the vendor's default)")


def test_concat_mixed_fixed_point_inputs_are_real_values():
    out = check("Concat", [spec((2, 3), U8Q, QU8), spec((2, 3), U16Q, QuantSpec(ENC, 0.01, 0))],
                {"axis": 0})
    assert out[0].shape == (4, 3) and out[0].dtype == U8Q, \
        "fixed-point inputs of different types concatenate (they reach the op as reals)"


# ---- Split / Pack / UnPack ---------------------------------------------------------------------
def test_split():
    x = rand(2, 9, 3)
    for idx in ([2, 5], [0, 2, 5]):
        ys = run("Split", [x], {"axis": 1, "split_index": idx})
        assert len(ys) == 3, f"Split split_index {idx}: 3 outputs (a leading 0 is optional)"
        for y, r in zip(ys, np.split(x, [2, 5], axis=1)):
            assert_same(y, r, f"Split split_index {idx}")
    ys = run("Split", [x], {"axis": np.int32(2), "split_index": [0]})
    assert len(ys) == 1 and np.array_equal(ys[0], x), "split_index [0]: one output, a copy"
    q = codes(4, 6, dtype=np.int8)
    ys = run("Split", [q], {"axis": 0, "split_index": [1]}, specs=[spec(q.shape, S8Q, QU8)])
    assert_same(ys[0], q[:1], "Split on codes, first part")
    assert_same(ys[1], q[1:], "Split on codes, second part")


def test_pack_unpack():
    xs = [rand(3, 4) for _ in range(3)]
    for axis in (0, 1, 2):
        y = run1("Pack", xs, {"axis": axis})
        assert_same(y, np.stack(xs, axis), f"Pack axis {axis}")
        parts = run("UnPack", [y], {"axis": axis})
        assert len(parts) == 3, f"UnPack axis {axis}: one output per index"
        for p, r in zip(parts, xs):
            assert_same(p, r, f"UnPack inverts Pack, axis {axis}")
    i = np.arange(3, dtype=np.int32)
    assert_same(run1("Pack", [i, i], {"axis": np.int32(0)}), np.stack([i, i]), "Pack INT_32 data")


# ---- ExpandDims / Squeeze ------------------------------------------------------------------------
def test_expand_dims_and_squeeze():
    x = rand(3, 4)
    assert_same(run1("ExpandDims", [x], {"axis": 0}), x[None], "ExpandDims axis 0")
    assert_same(run1("ExpandDims", [x], {"axis": 2}), x[:, :, None], "ExpandDims axis 2 (last)")
    assert_same(run1("ExpandDims", [x], {"axes": [0, 3]}), x[None, :, :, None],
                "ExpandDims axes [0, 3]")
    assert_same(run1("ExpandDims", [x], {"axis": 1, "axes": [1]}), x[:, None],
                "ExpandDims axis and axes agreeing")
    assert_same(run1("ExpandDims", [x], declared=[(1, 3, 1, 4)]), x.reshape(1, 3, 1, 4),
                "ExpandDims without axis/axes follows the declared output (as the vendor)")
    z = rand(1, 3, 1, 4, 1)
    assert_same(run1("Squeeze", [z], {"axes": [0, 4]}), z.reshape(3, 1, 4), "Squeeze axes")
    assert_same(run1("Squeeze", [z]), z.reshape(3, 4), "Squeeze without axes: every size-1 dim")
    assert_same(run1("Squeeze", [z], declared=[(3, 1, 4, 1)]), z.reshape(3, 1, 4, 1),
                "Squeeze without axes follows the declared output")


# ---- StridedSlice ------------------------------------------------------------------------------
def ort_ranges(shape, starts, ends, axes, steps):
    """ranges as ORT's QNN EP builds them from an ONNX Slice (SliceOp::PrepareForComputeHelper)."""
    rng = [[0, d, 1] for d in shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = shape[a]
        s = s + d if s < 0 else s
        s = min(max(s, 0), d) if st > 0 else min(max(s, 0), d - 1)
        e = e + d if e < 0 else e
        e = min(max(e, 0), d) if st > 0 else min(max(e, -1), d - 1)
        rng[a] = [s, e, st]
    return np.array(rng, np.int32)


SLICES = [  # starts, ends, axes, steps on a (4, 5, 6) input
    ([1], [-1], [1], [1]),
    ([-1], [-1000], [2], [-1]),          # reverse all: end -1 means "through index 0"
    ([5], [0], [2], [-2]),
    ([0, 1], [1000, 4], [0, 2], [2, 2]),
    ([3], [-6], [2], [-1]),
    ([-3, 2], [100, -100], [0, 1], [1, -3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_strided_slice_matches_onnx_slice_through_ort_ranges(starts, ends, axes, steps):
    x = rand(4, 5, 6)
    ref = onnx_ref("Slice", {"x": x, "s": np.array(starts, np.int64), "e": np.array(ends, np.int64),
                             "a": np.array(axes, np.int64), "t": np.array(steps, np.int64)})
    y = run1("StridedSlice", [x], {"ranges": ort_ranges(x.shape, starts, ends, axes, steps)})
    assert_same(y, ref, f"StridedSlice vs ONNX Slice {starts}:{ends}:{steps} on axes {axes}")


def test_strided_slice_masks_and_shrink():
    x = rand(3, 4)
    r = np.array([[1, 2, 1], [0, 0, -1]], np.int32)
    y = run1("StridedSlice", [x], {"ranges": r, "begin_mask": 0b10, "end_mask": 0b10})
    assert_same(y, x[1:2, ::-1], "begin/end masks take the whole reversed range")
    y = run1("StridedSlice", [x], {"ranges": [[2, 0, 1], [0, 4, 2]], "shrink_axes": 0b01})
    assert_same(y, x[2, 0:4:2], "shrink_axes drops dimension 0 at index begin (end ignored)")
    y = run1("StridedSlice", [x], {"ranges": np.array([[-1, 0, 1], [0, 4, 1]], np.int32),
                                   "shrink_axes": 1})
    assert_same(y, x[-1], "shrink with a negative begin")
    y = run1("StridedSlice", [x], {"ranges": np.array([[0, 99, 1], [3, -3, -1]], np.int32)})
    assert_same(y, x[:, 3:1:-1], "end -3 (< -1) with a negative stride wraps to 1")
    b = (RNG.integers(0, 2, (3, 4))).astype(np.uint8)
    y = run1("StridedSlice", [b], {"ranges": [[0, 3, 2], [1, 4, 1]]}, specs=[spec(b.shape, BOOL)])
    assert_same(y, b[0:3:2, 1:4], "StridedSlice BOOL_8")
    s = run1("StridedSlice", [x], {"ranges": [[1, 2, 1], [2, 3, 1]], "shrink_axes": 0b11})
    assert s.shape == () and s == x[1, 2], "shrinking every axis gives a rank-0 result"
    r = np.array([[0, 3, 1], [0, -1, 1]], np.int32).astype(np.uint32)  # INT_32 sent as UINT_32
    assert_same(run1("StridedSlice", [x], {"ranges": r}), x[0:3, 0:-1],
                "ranges values >= 2^31 in a UINT_32 tensor are read as INT_32")


# ---- Pad -----------------------------------------------------------------------------------------
def mirror_ref(x, pads, reflect: bool):
    """Explicit index map: MIRROR_REFLECT skips the edge, MIRROR_SYMMETRIC repeats it."""
    idx = []
    for d, (a, b) in zip(x.shape, pads):
        i = np.arange(-a, d + b)
        if reflect:
            i = np.where(i < 0, -i, np.where(i >= d, 2 * d - i - 2, i))
        else:
            i = np.where(i < 0, -i - 1, np.where(i >= d, 2 * d - i - 1, i))
        idx.append(i)
    return x[np.ix_(*idx)]


def test_pad_schemes():
    x = rand(2, 3, 4)
    pads = [[0, 1], [2, 1], [3, 0]]
    onnx_pads = np.array([p[0] for p in pads] + [p[1] for p in pads], np.int64)
    y = run1("Pad", [x], {"pad_amount": pads, "pad_constant_value": 1.5})
    assert_same(y, onnx_ref("Pad", {"x": x, "p": onnx_pads, "c": np.array(1.5, np.float32)}),
                "Pad CONSTANT 1.5 vs ONNX")
    y = run1("Pad", [x], {"pad_amount": pads})
    assert_same(y, onnx_ref("Pad", {"x": x, "p": onnx_pads}), "Pad default constant 0 vs ONNX")
    y = run1("Pad", [x], {"pad_amount": pads, "scheme": 2})
    assert_same(y, onnx_ref("Pad", {"x": x, "p": onnx_pads}, mode="reflect"),
                "Pad MIRROR_REFLECT vs ONNX reflect")
    assert_same(y, mirror_ref(x, pads, True), "Pad MIRROR_REFLECT vs index formula")
    y = run1("Pad", [x], {"pad_amount": [[1, 2], [3, 3], [4, 1]], "scheme": 1})
    assert_same(y, mirror_ref(x, [[1, 2], [3, 3], [4, 1]], False),
                "Pad MIRROR_SYMMETRIC (pads up to the dimension) vs index formula")
    i = RNG.integers(-9, 9, (2, 3, 4)).astype(np.int32)
    y = run1("Pad", [i], {"pad_amount": [[3, 3], [5, 0], [0, 9]], "scheme": np.int32(3)})
    assert_same(y, onnx_ref("Pad", {"x": i, "p": np.array([3, 5, 0, 3, 0, 9], np.int64)},
                            mode="edge"), "Pad EDGE (pads beyond the dimension) vs ONNX edge")


def test_pad_constant_is_a_code_on_fixed_point():
    q = codes(1, 2, 2, 1)
    s = [spec(q.shape, U8Q, QU8)]
    pads = [[0, 0], [1, 0], [0, 1], [0, 0]]

    def corner(value=None, specs=s, arr=q):
        params = {"pad_amount": pads}
        if value is not None:
            params["pad_constant_value"] = value
        y = run1("Pad", [arr], params, specs=specs)
        assert np.array_equal(y[0, 1:, :2], arr[0]), "the input is kept in the middle"
        return y[0, 0, 0, 0]

    assert corner() == 0, "default: code 0 (not the zero point's code 128), as the vendor"
    assert corner(1.0) == 1, "a float constant is a code: 1.0 -> code 1"
    assert corner(12.7) == 13 and corner(2.5) == 2, "float constants round half to even"
    assert corner(300.0) == 255 and corner(-3.0) == 0, "float constants saturate"
    assert corner(7) == 7, "an integer constant is a code"
    assert corner(np.int32(-3)) == 253 and corner(300) == 44, \
        "integer constants are cast to the storage type (wrap), as the vendor"
    s8 = codes(1, 2, 2, 1, dtype=np.int8)
    assert corner(-200.0, [spec(s8.shape, S8Q, QU8)], s8) == -128, "SFIXED_8 saturates at -128"
    r = (0.1 * (q.astype(np.float32) - 128)).astype(np.float32)
    out_q = QuantSpec(ENC, 0.05, -100)
    cls = ops.get("Pad")
    ps = {"pad_amount": to_param("pad_amount", pads), "pad_constant_value": to_param("c", 7)}
    (o,) = cls.check(s, ps)
    op = cls(cls.parse_params(ps), s, [spec(o.shape, U8Q, out_q)])
    (y,) = op.run(r)
    assert np.isclose(y[0, 0, 0, 0], 0.05 * (7 - 100)), \
        "on real values (encodings differ) the constant is the output encoding's code 7"
    per_axis = QuantSpec(Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET, np.array([0.1, 0.2, 0.5]),
                         np.array([0, 0, 0]), axis=3)
    ra = rand(1, 2, 2, 3)
    sa = [spec(ra.shape, S8Q, per_axis)]
    (o,) = cls.check(sa, {"pad_amount": to_param("pad_amount", pads)})
    ps = {"pad_amount": to_param("pad_amount", pads), "pad_constant_value": to_param("c", 2.0)}
    (y,) = cls(cls.parse_params(ps), sa, [spec(o.shape, S8Q, per_axis)]).run(ra)
    assert np.allclose(y[0, 0, 0], [0.2, 0.4, 1.0]), \
        "per-axis encoding on real values: code 2 of each channel's scale"


def test_pad_constant_on_other_types():
    h = rand(2, 2, dtype=np.float16)
    y = run1("Pad", [h], {"pad_amount": [[1, 0], [0, 0]], "pad_constant_value": 2.5})
    assert y.dtype == np.float16 and y[0, 0] == np.float16(2.5), "float16 constant"
    i = np.arange(4, dtype=np.int32).reshape(2, 2)
    y = run1("Pad", [i], {"pad_amount": [[0, 1], [0, 0]], "pad_constant_value": 2.6})
    assert y[2].tolist() == [3, 3], "INT_32 input: a float constant rounds to the nearest integer"
    bf = np.array([[0x3F80]], np.uint16)
    y = run1("Pad", [bf], {"pad_amount": [[0, 1], [0, 0]], "pad_constant_value": -2.0},
             specs=[spec(bf.shape, Q.QNN_DATATYPE_BFLOAT_16)])
    assert y[1, 0] == 0xC000, "BFLOAT_16 constant -2.0 is the bit pattern 0xC000"
    b = np.ones((2, 2), np.uint8)
    y = run1("Pad", [b], {"pad_amount": [[1, 0], [0, 0]]}, specs=[spec(b.shape, BOOL)])
    assert y[0].tolist() == [0, 0] and y[1:].all(), "BOOL_8 pads with false"


# ---- Tile / DepthToSpace / SpaceToDepth / ChannelShuffle ----------------------------------------
def test_tile():
    x = rand(2, 3, 1)
    y = run1("Tile", [x], {"multiples": [2, 1, 4]})
    assert_same(y, onnx_ref("Tile", {"x": x, "r": np.array([2, 1, 4], np.int64)}), "Tile vs ONNX")
    q = codes(3, 2)
    assert_same(run1("Tile", [q], {"multiples": [1, 3]}, specs=[spec(q.shape, U8Q, QU8)]),
                np.tile(q, (1, 3)), "Tile on codes")


def d2s_ref(x, bh, bw, crd):
    n, h, w, c = x.shape
    k = c // (bh * bw)
    y = np.zeros((n, h * bh, w * bw, k), x.dtype)
    for by in range(bh):
        for bx in range(bw):
            for kk in range(k):
                ch = kk * bh * bw + by * bw + bx if crd else (by * bw + bx) * k + kk
                y[:, by::bh, bx::bw, kk] = x[:, :, :, ch]
    return y


@pytest.mark.parametrize("mode", [0, 1])
def test_depth_to_space_and_back(mode):
    x = rand(2, 3, 4, 8)
    name = "DCR" if mode == 0 else "CRD"
    y = run1("DepthToSpace", [x], {"block_size": [2, 2], "mode": mode})
    ref = onnx_ref("DepthToSpace", {"x": x.transpose(0, 3, 1, 2)}, blocksize=2, mode=name)
    assert_same(y, ref.transpose(0, 2, 3, 1), f"DepthToSpace {name} vs ONNX (NCHW transposed)")
    assert_same(run1("DepthToSpace", [x], {"block_size": [2], "mode": mode}), y,
                "block_size [2] is a 2x2 block")
    y = run1("DepthToSpace", [x], {"block_size": [1, 4], "mode": mode})
    assert_same(y, d2s_ref(x, 1, 4, mode == 1), f"DepthToSpace {name} block 1x4 vs formula")
    back = run1("SpaceToDepth", [y], {"block_size": [1, 4], "mode": mode})
    assert_same(back, x, f"SpaceToDepth {name} inverts DepthToSpace")
    if mode == 0:
        z = rand(1, 4, 6, 3)
        ref = onnx_ref("SpaceToDepth", {"x": z.transpose(0, 3, 1, 2)}, blocksize=2)
        assert_same(run1("SpaceToDepth", [z], {"block_size": [2, 2]}), ref.transpose(0, 2, 3, 1),
                    "SpaceToDepth DCR (default) vs ONNX")


def test_channel_shuffle():
    x = rand(2, 3, 12)
    for groups, axis, params in ((3, 2, {}), (4, 2, {"axis": np.int32(2)}), (3, 1, {"axis": 1})):
        y = run1("ChannelShuffle", [x], {"num_groups": groups, **params})
        c = x.shape[axis]
        ref = np.empty_like(x)
        for g in range(groups):
            for i in range(c // groups):
                src = [slice(None)] * 3
                dst = [slice(None)] * 3
                src[axis], dst[axis] = g * (c // groups) + i, i * groups + g
                ref[tuple(dst)] = x[tuple(src)]
        assert_same(y, ref, f"ChannelShuffle groups={groups} axis={axis} (default: last)")


# ---- BatchToSpace / SpaceToBatch ----------------------------------------------------------------
def test_space_to_batch_and_back():
    x = rand(2, 3, 5, 2)
    pads = [[1, 0], [2, 1]]
    y = run1("SpaceToBatch", [x], {"block_size": [2, 4], "pad_amount": pads})
    xp = np.pad(x, [(0, 0), (1, 0), (2, 1), (0, 0)])
    n = x.shape[0]
    for by in range(2):
        for bx in range(4):
            for b in range(n):
                assert_same(y[(by * 4 + bx) * n + b], xp[b, by::2, bx::4],
                            f"SpaceToBatch block ({by}, {bx}) batch {b}")
    back = run1("BatchToSpace", [y], {"block_size": [2, 4], "crops": pads})
    assert_same(back, x, "BatchToSpace with crops = pads inverts SpaceToBatch")
    q = codes(1, 2, 2, 1)
    y = run1("SpaceToBatch", [q], {"block_size": [2, 2], "pad_amount": [[0, 2], [0, 0]]},
             specs=[spec(q.shape, U8Q, QU8)])
    assert (y[:, 1] == 0).all(), "SpaceToBatch pads codes with code 0, as the vendor"


# ---- Gather family -------------------------------------------------------------------------------
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64, np.uint32])
def test_gather(idx_dtype):
    x = rand(5, 4, 3)
    for axis in (0, 1, 2):
        ind = RNG.integers(0, x.shape[axis], (2, 3)).astype(idx_dtype)
        y = run1("Gather", [x, ind], {"axis": np.int32(axis)})
        ref = onnx_ref("Gather", {"x": x, "i": ind.astype(np.int64)}, axis=axis)
        assert_same(y, ref, f"Gather axis {axis} indices {np.dtype(idx_dtype).name}")
    emb = codes(50, 8)
    ids = np.array([[3, 49, 0]], np.int32)
    y = run1("Gather", [emb, ids], {"axis": 0}, specs=[spec(emb.shape, U8Q, QU8), spec_of(ids)])
    assert_same(y, emb[ids], "Gather on codes (embedding lookup)")
    s = run1("Gather", [x, np.array(2, np.int32)], {"axis": 1})
    assert_same(s, x[:, 2], "Gather with rank-0 indices drops the axis")


def test_gather_elements():
    x = rand(4, 5)
    for axis, shape, params in ((0, (3, 5), {}), (1, (4, 7), {"axis": 1}),
                                (1, (2, 2), {"axis": np.int32(1)})):
        ind = RNG.integers(0, x.shape[axis], shape).astype(np.int64)
        y = run1("GatherElements", [x, ind], params)
        ref = np.empty(shape, np.float32)
        for i in range(shape[0]):
            for j in range(shape[1]):
                ref[i, j] = x[ind[i, j], j] if axis == 0 else x[i, ind[i, j]]
        assert_same(y, ref, f"GatherElements axis {axis} indices {shape} (default axis 0)")
        if shape[1 - axis] == x.shape[1 - axis]:
            assert_same(y, onnx_ref("GatherElements", {"x": x, "i": ind}, axis=axis),
                        f"GatherElements axis {axis} vs ONNX")


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims):
    x = rand(2, 3, 4, 5)
    for k in (1, 2, 3 - batch_dims):
        dims = x.shape[batch_dims:batch_dims + k]
        ind = np.stack([RNG.integers(-d, d, (2, 3)) for d in dims], -1).astype(np.int64)
        if batch_dims:
            ind = ind[:2]  # leading dimension = the batch
        y = run1("GatherNd", [x, ind], {"batch_dims": batch_dims})
        ref = onnx_ref("GatherND", {"x": x, "i": ind}, batch_dims=batch_dims)
        assert_same(y, ref, f"GatherNd batch_dims={batch_dims} k={k} (negative indices wrap)")


@pytest.mark.parametrize("reduction,name", [(0, "none"), (1, "add"), (2, "mul"), (3, "max")])
def test_scatter_elements(reduction, name):
    x = rand(4, 5)
    for axis in (0, 1):
        dim = x.shape[axis]
        if reduction == 0:  # distinct positions along the axis (a repeated one has no order)
            ind = np.stack([RNG.permutation(dim)[:3] for _ in range(5)], 1) if axis == 0 else \
                np.stack([RNG.permutation(dim)[:3] for _ in range(4)], 0)
        else:
            ind = RNG.integers(0, dim, (3, 5) if axis == 0 else (4, 3))
        ind = ind.astype(np.int64)
        upd = rand(*ind.shape)
        y = run1("ScatterElements", [x, ind, upd], {"axis": axis, "reduction": reduction})
        ref = onnx_ref("ScatterElements", {"x": x, "i": ind, "u": upd}, axis=axis, reduction=name)
        np.testing.assert_allclose(y, ref, rtol=1e-6, err_msg=f"ScatterElements {name} axis {axis}")


@pytest.mark.parametrize("reduction,name", [(0, "none"), (1, "add"), (2, "mul")])
def test_scatter_nd(reduction, name):
    x = rand(4, 3, 2)
    for k in (1, 2, 3):
        if reduction == 0:
            flat = RNG.permutation(int(np.prod(x.shape[:k])))[:3]
            ind = np.stack(np.unravel_index(flat, x.shape[:k]), -1)
        else:
            ind = np.stack([RNG.integers(0, d, 5) for d in x.shape[:k]], -1)
        ind = ind.astype(np.int64)
        upd = rand(*ind.shape[:-1], *x.shape[k:])
        y = run1("ScatterNd", [x, ind, upd], {"reduction": reduction})
        ref = onnx_ref("ScatterND", {"x": x, "i": ind, "u": upd}, reduction=name)
        np.testing.assert_allclose(y, ref, rtol=1e-6, err_msg=f"ScatterNd {name} k={k}")


def test_scatter_on_codes_and_float16():
    q = codes(3, 4)
    ind = np.array([[0, 1], [2, 2]], np.int32)
    u = codes(2, 2)
    s = [spec(q.shape, U8Q, QU8), spec_of(ind), spec(u.shape, U8Q, QU8)]
    real = lambda c: 0.1 * (c.astype(np.float64) - 128)  # noqa: E731
    y = run1("ScatterElements", [q, ind, u], {"axis": 1, "reduction": 1}, specs=s)
    ref = real(q)
    np.add.at(ref, (np.array([[0], [1]]), ind), real(u))
    want = np.clip(np.rint(ref / 0.1) + 128, 0, 255)
    assert_same(y, want, "ScatterElements ADD on codes adds the real values and requantizes")
    y = run1("ScatterElements", [q, ind, u], {"axis": 1, "reduction": 3}, specs=s)
    ref = q.copy()
    np.maximum.at(ref, (np.array([[0], [1]]), ind), u)
    assert_same(y, ref, "ScatterElements MAX on codes compares codes")
    nd = np.array([[2], [0]], np.int64)
    un = codes(2, 4)
    y = run1("ScatterNd", [q, nd, un], {"reduction": 2},
             specs=[s[0], spec_of(nd), spec(un.shape, U8Q, QU8)])
    ref = real(q)
    ref[[2, 0]] *= real(un)
    assert_same(y, np.clip(np.rint(ref / 0.1) + 128, 0, 255), "ScatterNd MUL on codes")
    h = rand(3, 4, dtype=np.float16)
    y = run1("ScatterNd", [h, nd, rand(2, 4, dtype=np.float16)], {"reduction": 1})
    assert y.dtype == np.float16, "ScatterNd ADD keeps float16"


def test_out_of_range_dynamic_index_is_an_error_at_run():
    """Gather / GatherNd fail beyond [-dim, dim-1] (the vendor's graphExecute fails too); the
    other index ops' invalid indices read 0 / are skipped (tests/test_acceptance_vendor.py)."""
    x = rand(4, 3)
    for op_type, arrays, params in (
            ("Gather", [x, np.array([0, 4], np.int32)], {"axis": 0}),
            ("Gather", [x, np.array([0, -5], np.int32)], {"axis": 0}),
            ("GatherNd", [x, np.array([[1, 3]], np.int32)], {}),
            ("GatherNd", [x, np.array([[-5, 0]], np.int32)], {})):
        with pytest.raises(OpCheckError) as info:
            run(op_type, arrays, params)
        assert info.value.rule == f"QNNEMU-{op_type}-index-range", \
            f"{op_type}: index {arrays[1].tolist()} raises index-range at run ({info.value})"
        assert info.value.path == "inputTensors[1]", f"{op_type}: the path names the indices"


def test_invalid_indices_as_the_vendor_handles_them():
    x = rand(4, 3)
    (g,) = run("Gather", [x, np.array([-1, 0], np.int32)], {"axis": 0})
    assert np.array_equal(g, x[[3, 0]]), "Gather wraps a negative index from the end"
    (ge,) = run("GatherElements", [x, np.array([[0, -1, 4]], np.int32)], {})
    assert np.array_equal(ge, np.array([[x[0, 0], 0, 0]], np.float32)), "GatherElements reads 0 there"
    upd = np.full((1, 3), 9, np.float32)
    (se,) = run("ScatterElements", [x, np.array([[9, 1, -1]], np.int32), upd], {})
    want = x.copy()
    want[1, 1] = 9
    assert np.array_equal(se, want), "ScatterElements skips the updates at invalid indices"
    (sn,) = run("ScatterNd", [x, np.array([[-1], [2]], np.int32), np.full((2, 3), 9, np.float32)], {})
    want = x.copy()
    want[2] = 9
    assert np.array_equal(sn, want), "ScatterNd skips the updates at invalid index tuples"


def test_static_out_of_range_index_is_accepted_at_check():
    ind = np.array([0, 7], np.int32)
    out = check("Gather", [spec((4, 3)), spec((2,), I32, data=ind)], {"axis": 0})
    assert out[0].shape == (2, 3), "static indices out of range are accepted (a warning; the vendor does)"
    ok = check("GatherNd", [spec((4, 3)), spec((1, 2), I32, data=np.array([[-4, -3]], np.int32))])
    assert ok[0].shape == (1,), "static negative GatherNd indices in [-dim, -1] are valid"


def test_gather_is_fast_on_an_embedding_table():
    import time
    table = rand(30522, 128)
    ids = RNG.integers(0, 30522, (8, 128)).astype(np.int32)
    cls = ops.get("Gather")
    specs = [spec_of(table), spec_of(ids)]
    ps = {"axis": to_param("axis", 0)}
    op = cls(cls.parse_params(ps), specs, cls.check(specs, ps))
    t0 = time.perf_counter()
    for _ in range(10):
        (y,) = op.run(table, ids)
    dt = (time.perf_counter() - t0) / 10
    assert dt < 0.05, f"Gather of 1024 rows from a 30522x128 table takes {dt * 1e3:.1f} ms"
    assert_same(y, table[ids], "embedding lookup")


# ---- negative tests: one per rule id ------------------------------------------------------------
X4 = spec((1, 4, 4, 8))
IDX = spec((2,), I32)
AX0 = {"axis": 0}
NEGATIVE = [
    ("Reshape", [spec((2, 3))], {}, None, "output-unknown", "outputTensors[0].dimensions"),
    ("Reshape", [spec((2, 3))], {}, [(7,)], "element-count", "outputTensors[0].dimensions"),
    ("Transpose", [spec((2, 3))], {"perm": [1, 1]}, None, "perm", "params[perm]"),
    ("Concat", [spec((2, 3)), spec((2, 3), F16)], {"axis": 0}, None, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("Concat", [spec((2, 3)), spec((2, 3), U8Q, QU8)], {"axis": 0}, None, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("Concat", [spec((2, 3)), spec((2, 3))], {"axis": np.int32(-1)}, None, "axis", "params[axis]"),
    ("Concat", [spec((2, 3)), spec((2, 3))], {"axis": 2}, None, "axis", "params[axis]"),
    ("Concat", [spec((2, 3)), spec((2, 3, 1))], {"axis": 0}, None, "input-rank",
     "inputTensors[1].rank"),
    ("Concat", [spec((2, 3)), spec((3, 4))], {"axis": 0}, None, "dimensions",
     "inputTensors[1].dimensions"),
    ("Split", [spec((2, 6))], {"axis": 1, "split_index": [3, 3]}, None, "split-index",
     "params[split_index]"),
    ("Split", [spec((2, 6))], {"axis": 1, "split_index": [4, 2]}, None, "split-index",
     "params[split_index]"),
    ("Split", [spec((2, 6))], {"axis": 1, "split_index": [2, 6]}, None, "split-index",
     "params[split_index]"),
    ("Split", [spec((2, 6))], {"axis": 2, "split_index": [3]}, None, "axis", "params[axis]"),
    ("Split", [spec((2, 6))], {"axis": np.int32(-1), "split_index": [3]}, None, "axis",
     "params[axis]"),
    ("Pack", [spec((2, 3)), spec((2, 3), I32)], AX0, None, "dtype-mismatch",
     "inputTensors[1].dataType"),
    ("Pack", [spec((2, 3)), spec((3, 2))], AX0, None, "dimensions", "inputTensors[1].dimensions"),
    ("Pack", [spec((2, 3))], {"axis": 3}, None, "axis", "params[axis]"),
    ("Pack", [spec((2, 3))], {"axis": np.int32(-1)}, None, "axis", "params[axis]"),
    ("UnPack", [spec(())], AX0, None, "input-rank", "inputTensors[0].rank"),
    ("UnPack", [spec((2, 3))], {"axis": 2}, None, "axis", "params[axis]"),
    ("ExpandDims", [spec((2, 3))], {}, None, "axes", "params[axes]"),
    ("ExpandDims", [spec((2, 3))], {}, [(3, 2, 1)], "axes", "params[axes]"),
    ("ExpandDims", [spec((2, 3))], {"axis": 0, "axes": [1]}, None, "axes", "params[axes]"),
    ("ExpandDims", [spec((2, 3))], {"axes": [1, 1]}, None, "axes", "params[axes]"),
    ("ExpandDims", [spec((2, 3))], {"axis": 3}, None, "axis", "params[axis]"),
    ("ExpandDims", [spec((2, 3))], {"axes": np.array([0, -1], np.int32)}, None, "axis",
     "params[axes]"),
    ("Squeeze", [spec((1, 3))], {"axes": [1]}, None, "axes", "params[axes]"),
    ("Squeeze", [spec((1, 1, 3))], {"axes": [0, 0]}, None, "axes", "params[axes]"),
    ("Squeeze", [spec((1, 3))], {"axes": [2]}, None, "axis", "params[axes]"),
    ("Squeeze", [spec((1, 3, 1))], {}, [(3, 2)], "output-shape", "outputTensors[0].dimensions"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[0, 1, 1]]}, None, "ranges", "params[ranges]"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[0, 2, 1], [0, 3, 0]]}, None, "stride",
     "params[ranges]"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[1, 1, 1], [0, 3, 1]]}, None, "empty",
     "params[ranges]"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[0, 2, 1], [3, 4, 1]], "shrink_axes": 2}, None,
     "shrink-index", "params[ranges]"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[0, 2, 1], [0, 3, 1]], "end_mask": 4}, None,
     "mask", "params[end_mask]"),
    ("StridedSlice", [spec((2, 3))], {"ranges": [[0, 2, 1], [0, 3, 1]], "new_axes_mask": 1}, None,
     "new-axes", "params[new_axes_mask]"),
    ("Pad", [spec((2, 3))], {"pad_amount": [[0, 1], [0, 1]], "scheme": 4}, None, "scheme",
     "params[scheme]"),
    ("Pad", [spec((2, 3))], {"pad_amount": [[0, 1]]}, None, "pad-amount", "params[pad_amount]"),
    ("Pad", [spec((2, 3))], {"pad_amount": np.array([[0, -1], [0, 0]], np.int32)}, None,
     "pad-amount", "params[pad_amount]"),
    ("Pad", [spec((2, 3))], {"pad_amount": [[0, 2], [0, 0]], "scheme": 2}, None, "pad-amount",
     "params[pad_amount]"),
    ("Pad", [spec((2, 3))], {"pad_amount": [[0, 0], [4, 0]], "scheme": 1}, None, "pad-amount",
     "params[pad_amount]"),
    ("Pad", [spec((2, 3), F16)], {"pad_amount": [[0, 0], [1, 0]], "scheme": 3}, None,
     "edge-float", "params[scheme]"),
    ("Tile", [spec((2, 3))], {"multiples": [1, 0]}, None, "multiples", "params[multiples]"),
    ("Tile", [spec((2, 3))], {"multiples": [2]}, None, "multiples", "params[multiples]"),
    ("DepthToSpace", [spec((4, 4, 8))], {"block_size": [2, 2]}, None, "input-rank",
     "inputTensors[0].rank"),
    ("DepthToSpace", [X4], {"block_size": [0, 2]}, None, "block-size", "params[block_size]"),
    ("DepthToSpace", [X4], {"block_size": [2, 2, 2]}, None, "block-size", "params[block_size]"),
    ("DepthToSpace", [X4], {"block_size": [2, 2], "mode": 2}, None, "mode", "params[mode]"),
    ("DepthToSpace", [X4], {"block_size": [3, 1]}, None, "channels", "inputTensors[0].dimensions"),
    ("SpaceToDepth", [spec((1, 4, 4))], {"block_size": [2, 2]}, None, "input-rank",
     "inputTensors[0].rank"),
    ("SpaceToDepth", [X4], {"block_size": [2, 0]}, None, "block-size", "params[block_size]"),
    ("SpaceToDepth", [X4], {"block_size": [2, 2], "mode": 5}, None, "mode", "params[mode]"),
    ("SpaceToDepth", [X4], {"block_size": [3, 2]}, None, "spatial", "inputTensors[0].dimensions"),
    ("ChannelShuffle", [X4], {"num_groups": 3}, None, "num-groups", "params[num_groups]"),
    ("ChannelShuffle", [X4], {"num_groups": 2, "axis": np.int32(-1)}, None, "axis",
     "params[axis]"),
    ("ChannelShuffle", [spec(())], {"num_groups": 1}, None, "input-rank", "inputTensors[0].rank"),
    ("BatchToSpace", [X4], {"block_size": [2, 2]}, None, "batch", "inputTensors[0].dimensions"),
    ("BatchToSpace", [spec((4, 2, 2, 1))], {"block_size": [2, 2], "crops": [[2, 2], [0, 0]]}, None,
     "crops", "params[crops]"),
    ("BatchToSpace", [spec((4, 2, 2))], {"block_size": [2, 2]}, None, "input-rank",
     "inputTensors[0].rank"),
    ("BatchToSpace", [X4], {"block_size": [1, 0]}, None, "block-size", "params[block_size]"),
    ("SpaceToBatch", [X4], {"block_size": [3, 2]}, None, "pad-amount", "params[pad_amount]"),
    ("SpaceToBatch", [spec((4, 2, 2))], {"block_size": [2, 2]}, None, "input-rank",
     "inputTensors[0].rank"),
    ("SpaceToBatch", [X4], {"block_size": [0, 1]}, None, "block-size", "params[block_size]"),
    ("Gather", [spec((4, 3)), spec((2,), Q.QNN_DATATYPE_INT_16)], AX0, None, "index-dtype",
     "inputTensors[1].dataType"),
    ("Gather", [spec((4, 3)), IDX], {"axis": np.int32(-1)}, None, "axis", "params[axis]"),
    ("GatherElements", [spec((4, 3)), spec((2,), I32)], {}, None, "indices-rank",
     "inputTensors[1].rank"),
    ("GatherElements", [spec((4, 3)), spec((2, 4), I32)], {}, None, "indices-shape",
     "inputTensors[1].dimensions"),
    ("GatherElements", [spec((4, 3)), spec((2, 3), F32)], {}, None, "index-dtype",
     "inputTensors[1].dataType"),
    ("GatherElements", [spec((4, 3)), spec((2, 3), I32)], {"axis": 2}, None, "axis",
     "params[axis]"),
    ("GatherNd", [spec((4, 3)), spec((), I32)], {}, None, "indices-rank", "inputTensors[1].rank"),
    ("GatherNd", [spec((4, 3)), spec((5, 1), I32)], {"batch_dims": 1}, None, "batch-dims",
     "params[batch_dims]"),
    ("GatherNd", [spec((4, 3)), spec((2, 3), I32)], {}, None, "index-depth",
     "inputTensors[1].dimensions"),
    ("GatherNd", [spec((4, 3)), spec((2, 1), U8Q, QU8)], {}, None, "index-dtype",
     "inputTensors[1].dataType"),
    ("ScatterElements", [spec((4, 3)), spec((2, 3), I32), spec((2, 2))], {}, None,
     "updates-shape", "inputTensors[2].dimensions"),
    ("ScatterElements", [spec((4, 3)), spec((2, 3), I32), spec((2, 3), F16)], {}, None,
     "dtype-mismatch", "inputTensors[2].dataType"),
    ("ScatterElements", [spec((4, 3)), spec((2, 3), I32), spec((2, 3))], {"reduction": 4}, None,
     "reduction", "params[reduction]"),
    ("ScatterElements", [spec((4, 3)), spec((2,), I32), spec((2,))], {}, None, "indices-rank",
     "inputTensors[1].rank"),
    ("ScatterElements", [spec((4, 3)), spec((2, 4), I32), spec((2, 4))], {}, None,
     "indices-shape", "inputTensors[1].dimensions"),
    ("ScatterElements", [spec((4, 3)), spec((2, 3), F16), spec((2, 3))], {}, None, "index-dtype",
     "inputTensors[1].dataType"),
    ("ScatterElements", [spec((4, 3)), spec((2, 3), I32), spec((2, 3))], {"axis": 2}, None,
     "axis", "params[axis]"),
    ("ScatterNd", [spec((4, 3)), spec((2, 1), I32), spec((2, 4))], {}, None, "updates-shape",
     "inputTensors[2].dimensions"),
    ("ScatterNd", [spec((4, 3)), spec((2, 3), I32), spec((2,))], {}, None, "index-depth",
     "inputTensors[1].dimensions"),
    ("ScatterNd", [spec((4, 3)), spec((), I32), spec(())], {}, None, "indices-rank",
     "inputTensors[1].rank"),
    ("ScatterNd", [spec((4, 3)), spec((2, 1), I32), spec((2, 3))], {"reduction": 3}, None,
     "reduction", "params[reduction]"),
    ("ScatterNd", [spec((4, 3)), spec((2, 1), I64), spec((2, 3), I32)], {}, None,
     "dtype-mismatch", "inputTensors[2].dataType"),
    ("ScatterNd", [spec((4, 3)), spec((2, 1), F32), spec((2, 3))], {}, None, "index-dtype",
     "inputTensors[1].dataType"),
]
UNSUPPORTED = {"new-axes", "edge-float"}


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, [spec(d) for d in declared] if declared is not None else None,
                      rule, path)
    want = err.rule
    assert isinstance(err, OpUnsupportedError) == (rule in UNSUPPORTED), \
        f"{want}: OpUnsupportedError exactly for valid-but-unsupported cases ({type(err).__name__})"


@pytest.mark.parametrize("op_type,specs,params", [
    ("Gather", [spec((4, 3)), IDX], {}),
    ("Split", [spec((2, 6))], {"split_index": [3]}),
    ("Split", [spec((2, 6))], {"axis": 1}),
    ("Pack", [spec((2, 3))], {}),
    ("UnPack", [spec((2, 3))], {}),
    ("Pad", [spec((2, 3))], {}),
    ("ChannelShuffle", [X4], {}),
    ("StridedSlice", [spec((2, 3))], {}),
    ("Tile", [spec((2, 3))], {}),
    ("DepthToSpace", [X4], {}),
])
def test_required_params(op_type, specs, params):
    """Parameters the vendor's HTP rejects a node without are required here too."""
    with pytest.raises(OpCheckError) as info:
        check(op_type, specs, params)
    assert info.value.rule == "QNNEMU-op-param-missing", \
        f"{op_type} {sorted(params)}: a required parameter is missing ({info.value})"


def test_every_rule_id_is_tested():
    """Each rule suffix raised in shape.py / gather.py has a row; each op has negative rows."""
    text = inspect.getsource(shape_mod) + inspect.getsource(gather_mod)
    rules = set(re.findall(r'(?:fail|unsupported)\(\s*(?:op|cls\.op_type|"\w+"),\s*"([a-z-]+)"',
                           text))
    rules |= {m.replace("_", "-") for m in re.findall(r'uint_values\([^,]+,\s*"(\w+)"', text)}
    rules |= {"block-size", "input-rank"}  # _block(); base.check_rank
    # index-range is raised at run (dynamic indices): test_out_of_range_dynamic_index_is_an_error_at_run
    tested = {n[4] for n in NEGATIVE} | {"index-range"}
    assert rules - tested == set(), \
        f"every rule suffix has a negative row: missing {rules - tested}"
    for op_type in shape_mod.__all__ + [n for n in gather_mod.__all__ if n != "INDEX_TYPES"]:
        if op_type == "Identity":  # no rule of its own: any tensor is a valid input
            continue              # (its tests: tests/test_ops_erf_identity_inverse.py)
        assert any(n[0] == op_type for n in NEGATIVE), f"{op_type} has negative tests"


# ---- the vendor's HTP backend ------------------------------------------------------------------
# One graph with a node per case, on libQnnHtp.so (onnxruntime_qnn), against the ops run here on the
# same data: the points the op definitions leave open (pad constants on codes, Concat's default
# axis, Split's leading 0, StridedSlice's end -1, GatherNd's negative indices, ...).  Fixed-point
# cases run on codes (the node's tensors share one encoding, so the plan passes codes through);
# index ops run in float16 (the vendor has no float32 kernel for them without the fp16 config).
QV = (0.1, -128)  # the vendor client's (scale, offset) of QU8


def _u8(*shape):
    return ("u8", codes(*shape))


def _f16(*shape):
    return ("f16", rand(*shape, dtype=np.float16))


def _i32(values):
    return ("i32", np.asarray(values, np.int32))


def _vendor_cases():
    x26 = _u8(2, 6)
    return [
        ("Pad", [_u8(1, 3)], {"pad_amount": np.array([[0, 0], [1, 1]], np.uint32)}),
        ("Pad", [_u8(1, 3)], {"pad_amount": np.array([[0, 0], [1, 1]], np.uint32),
                              "pad_constant_value": 1.0}),
        ("Pad", [_u8(1, 3)], {"pad_amount": np.array([[0, 0], [1, 1]], np.uint32),
                              "pad_constant_value": 300.0}),
        ("Pad", [_u8(1, 3)], {"pad_amount": np.array([[0, 0], [1, 1]], np.uint32),
                              "pad_constant_value": np.int32(-3)}),
        ("Pad", [_u8(2, 6)], {"pad_amount": np.array([[1, 0], [2, 1]], np.uint32), "scheme": 3}),
        ("Pad", [_f16(2, 3)], {"pad_amount": np.array([[1, 1], [2, 2]], np.uint32), "scheme": 2}),
        ("Pad", [_f16(2, 3)], {"pad_amount": np.array([[2, 1], [3, 0]], np.uint32), "scheme": 1}),
        ("Concat", [x26, x26], {}),
        ("Split", [x26], {"axis": 1, "split_index": np.array([0, 2], np.uint32)}),
        ("Split", [x26], {"axis": 1, "split_index": np.array([2, 4], np.uint32)}),
        ("StridedSlice", [_u8(3, 6)], {"ranges": np.array([[0, 3, 1], [5, -1, -1]], np.int32)}),
        ("StridedSlice", [_u8(3, 6)], {"ranges": np.array([[2, 0, -2], [5, -3, -1]], np.int32)}),
        ("StridedSlice", [_u8(3, 6)], {"ranges": np.array([[-1, 0, 1], [-5, 99, 2]], np.int32),
                                       "shrink_axes": 1}),
        ("StridedSlice", [_u8(3, 6)], {"ranges": np.array([[1, 2, 1], [0, 0, -1]], np.int32),
                                       "begin_mask": 2, "end_mask": 2}),
        ("DepthToSpace", [_u8(1, 2, 3, 8)], {"block_size": np.array([2, 2], np.uint32)}),
        ("DepthToSpace", [_u8(1, 2, 3, 8)], {"block_size": np.array([2, 2], np.uint32),
                                             "mode": 1}),
        ("SpaceToDepth", [_u8(1, 4, 6, 2)], {"block_size": np.array([2, 2], np.uint32)}),
        ("SpaceToDepth", [_u8(1, 4, 6, 2)], {"block_size": np.array([2, 2], np.uint32),
                                             "mode": 1}),
        ("ChannelShuffle", [_u8(2, 3, 6)], {"num_groups": 3}),
        ("SpaceToBatch", [_u8(1, 3, 4, 2)], {"block_size": np.array([2, 2], np.uint32),
                                             "pad_amount": np.array([[1, 0], [0, 2]], np.uint32)}),
        ("BatchToSpace", [_u8(4, 2, 3, 2)], {"block_size": np.array([2, 2], np.uint32),
                                             "crops": np.array([[1, 0], [0, 2]], np.uint32)}),
        ("Tile", [_u8(2, 3)], {"multiples": np.array([2, 3], np.uint32)}),
        ("Transpose", [_u8(2, 3, 4)], {"perm": np.array([2, 0, 1], np.uint32)}),
        ("Pack", [x26, x26], {"axis": 1}),
        ("UnPack", [_u8(3, 2, 4)], {"axis": 1}),
        ("Gather", [_u8(5, 4), _i32([[4, 0], [2, 2]])], {"axis": np.int32(0)}),
        ("Gather", [_u8(5, 4), _i32([3, 1])], {"axis": np.int32(1)}),
        ("GatherElements", [_u8(4, 3), _i32([[3, 0, 1], [0, 2, 3]])], {}),
        ("GatherNd", [_u8(4, 3), _i32([[-1, 0], [2, -3], [3, 2]])], {}),
        ("GatherNd", [_u8(2, 3, 4), _i32([[[1], [0]], [[2], [2]]])], {"batch_dims": 1}),
        ("ScatterElements", [_f16(4, 3), _i32([[3, 0, 1]]), _f16(1, 3)], {}),
        ("ScatterElements", [_f16(4, 3), _i32([[2], [0], [1], [2]]), _f16(4, 1)], {"axis": 1}),
        ("ScatterElements", [_f16(4, 3), _i32([[3, 0, 1], [3, 0, 2]]), _f16(2, 3)],
         {"reduction": 2}),
        ("ScatterElements", [_f16(4, 3), _i32([[3, 0, 1], [1, 0, 2]]), _f16(2, 3)],
         {"reduction": 3}),
        ("ScatterNd", [_f16(4, 3), _i32([[2], [0]]), _f16(2, 3)], {}),
        ("ScatterNd", [_f16(4, 3), _i32([[1, 1], [1, 1], [0, 2]]), _f16(3)], {"reduction": 1}),
        ("ScatterNd", [_f16(4, 3), _i32([[1, 1], [3, 2]]), _f16(2)], {"reduction": 2}),
    ]


def _backend(path):
    from qnnemu.client import Backend
    return Backend(str(path), log_level="error")


@pytest.fixture(scope="module")
def vendor_htp():
    from vendor import vendor_library
    path = vendor_library("libQnnHtp.so")
    if path is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    with _backend(path) as be:
        yield be


KINDS = {"u8": (np.uint8, QV, U8Q, QU8), "f16": (np.float16, None, F16, None),
         "i32": (np.int32, None, I32, None)}


def _run_graph(backend, cases):
    """All cases as nodes of one graph on ``backend``; returns output name -> array."""
    feeds = {}
    ctx = backend.context()
    try:
        g = ctx.graph("shape_gather")
        for n, (op_type, inputs, params, out_shapes) in enumerate(cases):
            tins = []
            for i, (k, a) in enumerate(inputs):
                feeds[f"c{n}_in{i}"] = a
                tins.append(g.input(f"c{n}_in{i}", a.shape, KINDS[k][0], quant=KINDS[k][1]))
            dt, quant = KINDS[inputs[0][0]][:2]
            outs = [(f"c{n}_out{j}", shape, dt) + ((quant,) if quant else ())
                    for j, shape in enumerate(out_shapes)]
            g.node(op_type, tins, outputs=outs, params=params, app_read=True)
        g.finalize()
        return g.execute(feeds)
    finally:
        ctx.free()


def test_matches_vendor_htp(vendor_htp):
    """Ours (the ops run on codes / float16, and our library end to end when it is built)
    against the vendor's backend, node by node."""
    cases, expected = [], {}
    for n, (op_type, inputs, params) in enumerate(_vendor_cases()):
        specs = [spec(a.shape, KINDS[k][2], KINDS[k][3]) for k, a in inputs]
        ys = run(op_type, [a for _, a in inputs], params, specs=specs)
        cases.append((op_type, inputs, params, [y.shape for y in ys]))
        for j, y in enumerate(ys):
            expected[f"c{n}_out{j}"] = (y, f"case {n} {op_type} {params}")
    theirs = _run_graph(vendor_htp, cases)
    bad = [f"{what}: ours {ours.tolist()} != the vendor's {theirs[name].tolist()}"
           for name, (ours, what) in expected.items() if not np.array_equal(theirs[name], ours)]
    assert not bad, "the ops' outputs equal the vendor's:\n" + "\n".join(bad)
    from vendor import our_library
    lib = our_library()
    if lib is None:
        return
    with _backend(lib) as be:
        ours = _run_graph(be, cases)
    bad = [f"{what}: our library {ours[name].tolist()} != the vendor's {theirs[name].tolist()}"
           for name, (_, what) in expected.items() if not np.array_equal(theirs[name], ours[name])]
    assert not bad, "our library's outputs (plan, passthrough) equal the vendor's:\n" + \
        "\n".join(bad)
