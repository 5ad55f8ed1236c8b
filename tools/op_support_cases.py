"""One-node op configurations for measuring the HTP backend's op support (QnnOpDef.h op types,
QnnBackend_validateOpConfig / QnnGraph_addNode / QnnGraph_finalize): for every op type qnnemu
registers, a valid configuration built for a given rank and data type.

A template (``TEMPLATES[op]``) is a function of the rank returning a :class:`Template` (or None
when the op has no form of that rank): its inputs and outputs by *role*, its parameters. A role
is either a data type name (``"INT_32"``, ``"BOOL_8"``: the tensor always has it) or one of

- ``"x"``: the data type being measured (the op's data);
- ``"w"``: a weight: the measured type (fixed point: symmetrically quantized);
- ``"b"``: a bias: the measured float type, or SFIXED_POINT_32 for 8/16-bit fixed point;
- ``"y"``: a second measured type (Cast, Convert, Quantize, Dequantize: the output type is
  measured against every input type).

:func:`resolve` turns a template, a data type (and a second one for ``"y"``) into a
:class:`Config`: every tensor's shape, data type, quantization and static data; output shapes
come from the template or from qnnemu's own shape inference of the float32 form (so a template
that qnnemu's check refuses in float32 is a template bug: ``tools/probe_op_support.py
--self-check`` lists them).

Used by tools/probe_op_support.py (the vendor measurement) and tests/test_op_support.py (the
same configurations on qnnemu).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qnnemu.core import dtypes
from qnnemu.headers import Q

# The data types measured, by their QNN_DATATYPE_ names.
DTYPES = ("FLOAT_32", "FLOAT_16", "BFLOAT_16", "UFIXED_POINT_8", "SFIXED_POINT_8", "UFIXED_POINT_16",
          "SFIXED_POINT_16", "SFIXED_POINT_32", "INT_8", "UINT_8", "INT_16", "UINT_16", "INT_32",
          "UINT_32", "INT_64", "UINT_64", "BOOL_8")
FIXED = {"UFIXED_POINT_8", "SFIXED_POINT_8", "UFIXED_POINT_16", "SFIXED_POINT_16", "SFIXED_POINT_32",
         "UFIXED_POINT_32"}
FLOATS = {"FLOAT_32", "FLOAT_16", "BFLOAT_16"}
# The rank sweep: 0 (scalars, where the op takes them) to 8 (beyond any HTP tensor).
ALL_RANKS = tuple(range(9))
ND_RANKS = tuple(range(1, 9))
BASE_DIMS = (2, 3, 4, 5, 2, 3, 2, 2)
# The alternative shapes (``ALT``): a configuration that fails to finalize is built again with
# these; a failure that goes away depends on the shapes, not on the data types and rank.
# ALT 1: other sizes; ALT 2: leading unit dimensions (batch 1 and friends, common in models).
ALT_BASE_DIMS = {1: (1, 4, 3, 2, 3, 2, 3, 1), 2: (1, 1, 1, 2, 3, 4, 2, 2)}
ALT = 0


def qnn_dtype(name: str) -> int:
    return int(getattr(Q, f"QNN_DATATYPE_{name}"))


def dims(rank: int) -> tuple[int, ...]:
    return ALT_BASE_DIMS.get(ALT, BASE_DIMS)[:rank]


@dataclass
class In:
    role: str
    shape: tuple
    static: bool = False
    data: Any = None      # real values of a static tensor (quantized / cast to its type)


@dataclass
class Template:
    inputs: list          # In, or None for a NULL (absent optional) input
    params: dict
    outputs: list         # roles
    out_shapes: list | None = None
    shape_dtype: str = "FLOAT_32"   # the data type the output shapes are inferred in


@dataclass
class Tensor:
    shape: tuple
    dtype: str
    quant: tuple | None = None          # (scale, offset) when fixed point
    data: np.ndarray | None = None      # storage values of a static tensor
    null: bool = False


@dataclass
class Config:
    op: str
    rank: int
    inputs: list
    outputs: list
    params: dict

    variant: str | None = None          # qnnemu.htp.op_support.variant_key of the node

    def signature(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The I/O data type set: each input's type by position (``-``: absent), the outputs'."""
        return (tuple("-" if t.null else t.dtype for t in self.inputs), tuple(t.dtype for t in self.outputs))

    @property
    def entry(self) -> str:
        """The op_support.json entry the configuration is measured for: the op, or the op and
        its variant (``ScatterElements[reduction=3]``)."""
        return f"{self.op}[{self.variant}]" if self.variant else self.op


TEMPLATES: dict[str, tuple[Callable[[int], Template | None], tuple[int, ...]]] = {}
# Ops measured with a second data type ("y" roles): every (x, y) pair at the canonical rank.
PAIR_OPS = {"Cast", "Convert", "Quantize", "Dequantize"}


def template(*ops: str, ranks=ND_RANKS):
    def register(fn):
        for op in ops:
            TEMPLATES[op] = ((lambda r, _op=op: fn(_op, r)), tuple(ranks))
        return fn
    return register


# ---- elementwise ---------------------------------------------------------------------------------
UNARY = ("ElementWiseAbs", "ElementWiseAsin", "ElementWiseAtan", "ElementWiseCeil", "ElementWiseCos",
         "ElementWiseExp", "ElementWiseFloor", "ElementWiseLog", "ElementWiseNeg", "ElementWiseNot",
         "ElementWiseRound", "ElementWiseRsqrt", "ElementWiseSign", "ElementWiseSin",
         "ElementWiseSquareRoot", "ElementWiseSoftplus", "Relu", "Relu1", "Relu6", "Sigmoid", "Tanh",
         "Elu", "Gelu", "HardSwish", "Erf", "ThresholdedRelu", "Identity")
BINARY = ("ElementWiseAdd", "ElementWiseSubtract", "ElementWiseMultiply", "ElementWiseDivide",
          "ElementWiseMaximum", "ElementWiseMinimum", "ElementWisePower", "ElementWiseSquaredDifference",
          "ElementWiseFloorDiv", "ElementWiseFmod", "ElementWiseMod", "ElementWiseAnd", "ElementWiseOr",
          "ElementWiseXor", "Prelu")
COMPARE = ("ElementWiseEqual", "ElementWiseNotEqual", "ElementWiseGreater", "ElementWiseGreaterEqual",
           "ElementWiseLess", "ElementWiseLessEqual")


LOGICAL = {"ElementWiseAnd", "ElementWiseOr", "ElementWiseXor", "ElementWiseNot"}


@template(*UNARY, ranks=ALL_RANKS)
def _unary(op, r):
    return Template([In("x", dims(r))], {}, ["x"], shape_dtype="BOOL_8" if op in LOGICAL else "FLOAT_32")


@template("ReluMinMax", ranks=ALL_RANKS)
def _relu_min_max(op, r):
    return Template([In("x", dims(r))], {"min_value": 0.0, "max_value": 6.0}, ["x"])


@template("ElementWiseNeuron", ranks=ALL_RANKS)
def _neuron(op, r):
    return Template([In("x", dims(r))], {"operation": int(Q.QNN_OP_ELEMENT_WISE_NEURON_OPERATION_RELU)}, ["x"])


@template("ElementWiseUnary", ranks=ALL_RANKS)
def _unary_op(op, r):
    return Template([In("x", dims(r))], {"operation": int(Q.QNN_OP_ELEMENT_WISE_UNARY_OPERATION_ABS)}, ["x"])


@template("IsNan", ranks=ALL_RANKS)
def _isnan(op, r):
    return Template([In("x", dims(r))], {}, ["BOOL_8"])


@template(*BINARY, ranks=ALL_RANKS)
def _binary(op, r):
    if op == "Prelu" and ALT and r:
        # The alternative Prelu: a static per-channel coefficient (how converters give it).
        return Template([In("x", dims(r)), In("x", dims(r)[-1:], True, np.full(dims(r)[-1:], 0.1))], {}, ["x"])
    return Template([In("x", dims(r)), In("x", dims(r))], {}, ["x"],
                    shape_dtype="BOOL_8" if op in LOGICAL else "FLOAT_32")


@template("ElementWiseBinary", ranks=ALL_RANKS)
def _binary_op(op, r):
    return Template([In("x", dims(r)), In("x", dims(r))],
                    {"operation": int(Q.QNN_OP_ELEMENT_WISE_BINARY_OPERATION_ADD)}, ["x"])


@template(*COMPARE, ranks=ALL_RANKS)
def _compare(op, r):
    return Template([In("x", dims(r)), In("x", dims(r))], {}, ["BOOL_8"])


@template("ElementWiseSelect", ranks=ALL_RANKS)
def _select(op, r):
    return Template([In("BOOL_8", dims(r)), In("x", dims(r)), In("x", dims(r))], {}, ["x"])


@template("ElementWiseMux", ranks=ALL_RANKS)
def _mux(op, r):
    # Static candidates: two or more dynamic ones crash the vendor's process (docs/new-ops.md).
    return Template([In("INT_32", dims(r)), In("x", dims(r), True), In("x", dims(r), True)], {}, ["x"])


@template("Cast", "Convert", "Quantize", "Dequantize", ranks=ALL_RANKS)
def _cast(op, r):
    return Template([In("x", dims(r))], {}, ["y"], [dims(r)])


# ---- shape and data movement ---------------------------------------------------------------------
@template("Reshape", ranks=ALL_RANKS)
def _reshape(op, r):
    d = dims(r)
    return Template([In("x", d)], {}, ["x"], [tuple(reversed(d))])


@template("Transpose")
def _transpose(op, r):
    return Template([In("x", dims(r))], {"perm": np.arange(r)[::-1].astype(np.uint32)}, ["x"])


@template("Concat")
def _concat(op, r):
    return Template([In("x", dims(r)), In("x", dims(r))], {"axis": 0}, ["x"])


@template("Pack", ranks=range(8))
def _pack(op, r):
    return Template([In("x", dims(r)), In("x", dims(r))], {"axis": 0}, ["x"])


@template("UnPack")
def _unpack(op, r):
    d = dims(r)
    return Template([In("x", d)], {"axis": 0}, ["x"] * d[0])


@template("Split")
def _split(op, r):
    return Template([In("x", dims(r))], {"axis": 0, "split_index": np.array([1], np.uint32)}, ["x", "x"])


@template("ExpandDims", ranks=range(8))
def _expand(op, r):
    return Template([In("x", dims(r))], {"axis": 0}, ["x"])


@template("Squeeze")
def _squeeze(op, r):
    return Template([In("x", (1,) + dims(r - 1))], {"axes": np.array([0], np.uint32)}, ["x"])


@template("Tile")
def _tile(op, r):
    return Template([In("x", dims(r))], {"multiples": np.array([2] + [1] * (r - 1), np.uint32)}, ["x"])


@template("Pad")
def _pad(op, r):
    return Template([In("x", dims(r))], {"pad_amount": np.ones((r, 2), np.uint32),
                                         "scheme": int(Q.QNN_OP_PAD_SCHEME_CONSTANT)}, ["x"])


@template("StridedSlice")
def _slice(op, r):
    d = dims(r)
    ranges = np.array([[0, n - 1, 1] for n in d], np.int32)
    return Template([In("x", d)], {"ranges": ranges}, ["x"])


@template("Gather")
def _gather(op, r):
    return Template([In("x", dims(r)), In("INT_32", (2,))], {"axis": np.int32(0)}, ["x"])


@template("GatherElements")
def _gather_elements(op, r):
    d = dims(r)
    return Template([In("x", d), In("INT_32", d)], {"axis": 0}, ["x"])


@template("GatherNd")
def _gather_nd(op, r):
    return Template([In("x", dims(r)), In("INT_32", (2, 1))], {}, ["x"])


@template("ScatterElements")
def _scatter_elements(op, r):
    d = dims(r)
    return Template([In("x", d), In("INT_32", d), In("x", d)], {"axis": 0}, ["x"])


@template("ScatterNd")
def _scatter_nd(op, r):
    d = dims(r)
    return Template([In("x", d), In("INT_32", (2, 1)), In("x", (2,) + d[1:])], {}, ["x"])


@template("NonZero")
def _nonzero(op, r):
    d = dims(r)
    return Template([In("x", d)], {}, ["INT_32"], [(int(np.prod(d)), r)])


@template("TopK")
def _topk(op, r):
    return Template([In("x", dims(r))], {"k": 2}, ["x", "INT_32"])


@template("Argmax", "Argmin")
def _argmax(op, r):
    return Template([In("x", dims(r))], {"axis": r - 1}, ["INT_32"])


@template("CumulativeSum")
def _cumsum(op, r):
    return Template([In("x", dims(r))], {"axis": 0}, ["x"])


# ---- reductions and normalizations ---------------------------------------------------------------
@template("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")
def _reduce(op, r):
    return Template([In("x", dims(r))], {"axes": np.array([r - 1], np.uint32), "keep_dims": True}, ["x"])


@template("Softmax", "LogSoftmax")
def _softmax(op, r):
    return Template([In("x", dims(r))], {"axis": r - 1}, ["x"])


@template("MaskedSoftmax", ranks=(4,))
def _masked_softmax(op, r):
    # UNCOMPRESSED: an additive [batch, channel] mask of the data's type.
    d = dims(r)
    return Template([In("x", d), In("x", (d[0], d[-1]))], {}, ["x"])


@template("L2Norm")
def _l2norm(op, r):
    return Template([In("x", dims(r))], {"axis": r - 1}, ["x"])


@template("LayerNorm", "RmsNorm")
def _layernorm(op, r):
    d = dims(r)
    return Template([In("x", d), In("w", (d[-1],), True, np.ones(d[-1])), In("b", (d[-1],), True, np.zeros(d[-1]))],
                    {"axes": np.array([r - 1], np.uint32)}, ["x"])


@template("Batchnorm")
def _batchnorm(op, r):
    d = dims(r)
    return Template([In("x", d), In("w", (d[-1],), True, np.ones(d[-1])), In("b", (d[-1],), True, np.zeros(d[-1]))],
                    {}, ["x"])


@template("InstanceNorm", ranks=(3, 4, 5))
def _instancenorm(op, r):
    d = dims(r)
    return Template([In("x", d), In("w", (d[-1],), True, np.ones(d[-1])), In("b", (d[-1],), True, np.zeros(d[-1]))],
                    {}, ["x"])


@template("GroupNorm", ranks=(3, 4, 5))
def _groupnorm(op, r):
    d = dims(r)
    return Template([In("x", d), In("w", (d[-1],), True, np.ones(d[-1])), In("b", (d[-1],), True, np.zeros(d[-1]))],
                    {"epsilon": 1e-5, "group": 1}, ["x"])


@template("Lrn", ranks=(4,))
def _lrn(op, r):
    return Template([In("x", (1, 3, 3, 4))], {"radius": np.int32(1), "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, ["x"])


# ---- convolutions, matrix products, pools ------------------------------------------------------
def _u32(*v):
    return np.array(v, np.uint32)


def _conv_params(n: int, dilation: bool = True, transpose: bool = False) -> dict:
    """Every parameter of an n-d convolution explicitly (the vendor refuses a Conv2d without
    stride and pad_amount)."""
    p = {"stride": _u32(*[1] * n) if n > 1 else 1, "pad_amount": np.zeros((n, 2), np.uint32)}
    if n == 1:
        p["pad_amount"] = _u32(0, 0)
    if dilation:
        p["dilation"] = _u32(*[1] * n) if n > 1 else 1
    if transpose:
        p["output_padding"] = _u32(*[0] * n) if n > 1 else 0
    return p


def _w(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


@template("Conv2d", ranks=(4,))
def _conv2d(op, r):
    return Template([In("x", (1, 5, 5, 4)), In("w", (3, 3, 4, 2), True, _w((3, 3, 4, 2))),
                     In("b", (2,), True, _w(2))], _conv_params(2, True, False), ["x"])


@template("Conv1d", ranks=(3,))
def _conv1d(op, r):
    return Template([In("x", (1, 5, 4)), In("w", (3, 4, 2), True, _w((3, 4, 2))), In("b", (2,), True, _w(2))],
                    _conv_params(1, True, False), ["x"])


@template("Conv3d", ranks=(5,))
def _conv3d(op, r):
    return Template([In("x", (1, 4, 4, 4, 2)), In("w", (2, 2, 2, 2, 2), True, _w((2, 2, 2, 2, 2))),
                     In("b", (2,), True, _w(2))], _conv_params(3, True, False), ["x"])


@template("DepthWiseConv2d", ranks=(4,))
def _dwconv2d(op, r):
    return Template([In("x", (1, 5, 5, 4)), In("w", (3, 3, 1, 4), True, _w((3, 3, 1, 4))),
                     In("b", (4,), True, _w(4))], _conv_params(2, True, False), ["x"])


@template("DepthWiseConv1d", ranks=(3,))
def _dwconv1d(op, r):
    return Template([In("x", (1, 5, 4)), In("w", (3, 1, 4), True, _w((3, 1, 4))), In("b", (4,), True, _w(4))],
                    _conv_params(1, True, False), ["x"])


@template("TransposeConv2d", ranks=(4,))
def _tconv2d(op, r):
    return Template([In("x", (1, 3, 3, 4)), In("w", (2, 2, 4, 2), True, _w((2, 2, 4, 2))),
                     In("b", (2,), True, _w(2))], _conv_params(2, False, True), ["x"])


@template("TransposeConv1d", ranks=(3,))
def _tconv1d(op, r):
    return Template([In("x", (1, 3, 4)), In("w", (2, 4, 2), True, _w((2, 4, 2))), In("b", (2,), True, _w(2))],
                    _conv_params(1, False, True), ["x"])


@template("TransposeConv3d", ranks=(5,))
def _tconv3d(op, r):
    return Template([In("x", (1, 3, 3, 3, 2)), In("w", (2, 2, 2, 2, 2), True, _w((2, 2, 2, 2, 2))),
                     In("b", (2,), True, _w(2))], _conv_params(3, True, True), ["x"])


@template("FullyConnected", ranks=(2, 3, 4))
def _fc(op, r):
    return Template([In("x", dims(r - 1) + (4,)), In("w", (3, 4), True, _w((3, 4))), In("b", (3,), True, _w(3))],
                    {}, ["x"])


@template("MatMul", ranks=range(2, 9))
def _matmul(op, r):
    batch = dims(r - 2)
    return Template([In("x", batch + (2, 3)), In("x", batch + (3, 4))], {}, ["x"])


@template("Inverse", ranks=range(2, 9))
def _inverse(op, r):
    return Template([In("x", dims(r - 2) + (2, 2))], {}, ["x"])


@template("PoolAvg2d", "PoolMax2d", ranks=(4,))
def _pool2d(op, r):
    return Template([In("x", (1, 4, 4, 2))], {"filter_size": _u32(2, 2), "stride": _u32(2, 2),
                                              "pad_amount": np.zeros((2, 2), np.uint32)}, ["x"])


@template("PoolAvg3d", "PoolMax3d", ranks=(5,))
def _pool3d(op, r):
    return Template([In("x", (1, 4, 4, 4, 2))], {"filter_size": _u32(2, 2, 2), "stride": _u32(2, 2, 2),
                                                 "pad_amount": np.zeros((3, 2), np.uint32)}, ["x"])


# ---- spatial ------------------------------------------------------------------------------------
@template("Resize", ranks=(4, 5))
def _resize(op, r):
    d = (1, 2, 2, 3) if r == 4 else (1, 2, 2, 2, 3)
    out = (1,) + tuple(2 * n for n in d[1:-1]) + (d[-1],)
    return Template([In("x", d)], {}, ["x"], [out])


@template("ResizeBilinear", "ResizeNearestNeighbor", ranks=(4,))
def _resize2d(op, r):
    return Template([In("x", (1, 2, 2, 3))], {}, ["x"], [(1, 4, 4, 3)])


@template("DepthToSpace", ranks=(4,))
def _d2s(op, r):
    return Template([In("x", (1, 2, 2, 4))], {"block_size": np.array([2, 2], np.uint32)}, ["x"])


@template("SpaceToDepth", ranks=(4,))
def _s2d(op, r):
    return Template([In("x", (1, 4, 4, 1))], {"block_size": np.array([2, 2], np.uint32)}, ["x"])


@template("BatchToSpace", ranks=(4,))
def _b2s(op, r):
    return Template([In("x", (4, 2, 2, 1))], {"block_size": np.array([2, 2], np.uint32)}, ["x"])


@template("SpaceToBatch", ranks=(4,))
def _s2b(op, r):
    return Template([In("x", (1, 4, 4, 1))], {"block_size": np.array([2, 2], np.uint32)}, ["x"])


@template("ChannelShuffle", ranks=(4,))
def _shuffle(op, r):
    return Template([In("x", (1, 2, 2, 4))], {"num_groups": 2, "axis": 3}, ["x"])


@template("GridSample", ranks=(4,))
def _grid_sample(op, r):
    return Template([In("x", (1, 4, 4, 2)), In("x", (1, 3, 3, 2))], {}, ["x"])


@template("RoiAlign", ranks=(4,))
def _roi_align(op, r):
    return Template([In("x", (1, 4, 4, 2)), In("x", (1, 4), True, np.array([[0, 0, 3, 3]])),
                     In("INT_32", (1,), True, np.array([0]))],
                    {"img_size_ratio": np.array([1.0, 1.0], np.float32)}, ["x"], [(1, 2, 2, 2)])


# ---- recurrent, attention, random -------------------------------------------------------------------
@template("Lstm", ranks=(2,))
def _lstm(op, r):
    # As ONNX Runtime's QNN EP emits ONNX LSTM: 24 inputs (NULL for the absent ones), the input
    # gate's weights and bias given (no CIFG), static initial states, every parameter.
    b, i, n = 2, 3, 4
    w = [In("w", (n, i), True, _w((n, i), k)) for k in range(3)]
    rr = [In("w", (n, n), True, _w((n, n), 3 + k)) for k in range(3)]
    bias = [In("b", (n,), True, _w(n, 6 + k)) for k in range(3)]
    state = [In("x", (b, n), True, np.zeros((b, n))) for _ in range(2)]
    return Template([In("x", (b, i))] + w + rr + bias + state + [None] * 4
                    + [In("w", (n, i), True, _w((n, i), 9)), In("w", (n, n), True, _w((n, n), 10))]
                    + [None] * 3 + [In("b", (n,), True, _w(n, 11))] + [None] * 2,
                    {"direction": 0, "cell_clip_threshold": 0.0, "output_clip_threshold": 0.0, "time_major": False,
                     "input_gate_qscale": 0.0, "forget_gate_qscale": 0.0, "cell_gate_qscale": 0.0,
                     "output_gate_qscale": 0.0, "hidden_state_offset": 0.0, "hidden_state_qscale": 0.0},
                    ["x", "x", "x"])


@template("Gru", ranks=(3,))
def _gru(op, r):
    b, i, h = 2, 3, 4
    ws = [In("w", (h, i), True, _w((h, i), k)) for k in range(3)]
    rs = [In("w", (h, h), True, _w((h, h), 3 + k)) for k in range(3)]
    bs = [In("b", (h,), True, _w(h, 6 + k)) for k in range(6)]
    return Template([In("x", (1, b, i))] + ws + rs + bs + [In("x", (1, b, h))],
                    {"direction": 0, "linear_before_reset": 1, "time_major": True}, ["x", "x"])


@template("RotaryEmbedding", ranks=(4,))
def _rope(op, r):
    ang = np.linspace(0, 3, 8).reshape(4, 2)
    return Template([In("x", (1, 2, 3, 4)), In("x", (4, 2), True, np.cos(ang)), In("x", (4, 2), True, np.sin(ang)),
                     In("INT_32", (1, 3))], {}, ["x"])


@template("GroupQueryAttention", ranks=(3,))
def _gqa(op, r):
    b, s, nh, kvh, hd, length = 1, 1, 2, 1, 4, 4
    return Template([In("x", (b, s, nh * hd)), In("INT_32", (b,)), In("INT_32", ()), In("x", (b, s, kvh * hd)),
                     In("x", (b, s, kvh * hd)), In("x", (b, kvh, length, hd)), In("x", (b, kvh, length, hd)),
                     None, None, None],
                    {"num_heads": nh, "kv_num_heads": kvh}, ["x", "x", "x"])


@template("RandomUniformLike", "RandomNormalLike", ranks=ND_RANKS)
def _random(op, r):
    d = dims(r)
    return Template([In("UINT_32", (r,), True, np.array(d))], {}, ["x"], [d])


# ---- variants: parameter values the HTP decides apart (measured at the canonical rank) -------------
VARIANT_DTYPES = ("FLOAT_32", "FLOAT_16", "UFIXED_POINT_8", "UFIXED_POINT_16", "INT_32", "BOOL_8")
VARIANTS: dict[str, list[Callable[[int], Template]]] = {}
_COMPARE_OPS = {3, 6, 7, 8, 9, 14}       # ElementWiseBinary EQUAL, GREATER(_EQUAL), LESS(_EQUAL), NOT_EQUAL


def _variant(op: str, fn) -> None:
    VARIANTS.setdefault(op, []).append(fn)


for _k in Q.enum("QNN_OP_ELEMENT_WISE_UNARY_OPERATION_"):
    _variant("ElementWiseUnary", lambda r, k=_k: Template([In("x", dims(r))], {"operation": int(k)}, ["x"],
                                                          shape_dtype="BOOL_8" if k == 9 else "FLOAT_32"))
_LOGICAL_OPS = {1, 15, 19}               # AND, OR, XOR
for _k in Q.enum("QNN_OP_ELEMENT_WISE_BINARY_OPERATION_"):
    _variant("ElementWiseBinary", lambda r, k=_k: Template(
        [In("x", dims(r)), In("x", dims(r))], {"operation": int(k)}, ["BOOL_8" if k in _COMPARE_OPS else "x"],
        shape_dtype="BOOL_8" if k in _LOGICAL_OPS else "FLOAT_32"))
for _k in Q.enum("QNN_OP_ELEMENT_WISE_NEURON_OPERATION_"):
    _variant("ElementWiseNeuron", lambda r, k=_k: Template(
        [In("x", dims(r))], {"operation": int(k), **({"min_value": 0.0, "max_value": 6.0} if k == 5 else {})}, ["x"]))
for _k in (1, 2, 3):
    _variant("ScatterElements", lambda r, k=_k: Template(
        [In("x", dims(r)), In("INT_32", dims(r)), In("x", dims(r))], {"axis": 0, "reduction": k}, ["x"]))
for _k in (1, 2):
    _variant("ScatterNd", lambda r, k=_k: Template(
        [In("x", dims(r)), In("INT_32", (2, 1)), In("x", (2,) + dims(r)[1:])], {"reduction": k}, ["x"]))


def _ceil_pool(size: int, k: int, s: int, pad: int, count: bool | None):
    def fn(r):
        params = {"filter_size": _u32(k, k), "stride": _u32(s, s), "pad_amount": np.full((2, 2), pad, np.uint32),
                  "rounding_mode": int(Q.QNN_OP_POOL_MAX_2D_ROUNDING_MODE_CEIL)}
        if count is not None:
            params["count_pad_for_edges"] = count
        return Template([In("x", (1, size, size, 2))], params, ["x"])
    return fn


for _op in ("PoolAvg2d", "PoolMax2d"):
    _count = True if _op == "PoolAvg2d" else None
    _variant(_op, _ceil_pool(4, 3, 2, 0, _count))      # CEIL, every window starts in the input
    _variant(_op, _ceil_pool(2, 3, 3, 1, _count))      # the last window starts on the padding
    _variant(_op, _ceil_pool(2, 1, 2, 0, _count))      # ... past the input (no padding)
_variant("StridedSlice", lambda r: Template([In("x", dims(r))], {
    "ranges": np.array([[0, n, 1] for n in dims(r)], np.int32), "new_axes_mask": 1}, ["x"],
    [(1,) + dims(r)]))


# ---- resolving a template -------------------------------------------------------------------------
QUANT = {"UFIXED_POINT_8": (0.05, -128), "SFIXED_POINT_8": (0.05, 0), "UFIXED_POINT_16": (0.001, -32768),
         "SFIXED_POINT_16": (0.001, 0), "SFIXED_POINT_32": (1e-4, 0), "UFIXED_POINT_32": (1e-4, 0)}
WEIGHT_QUANT = {"UFIXED_POINT_8": (0.01, -128), "SFIXED_POINT_8": (0.01, 0), "UFIXED_POINT_16": (1e-4, -32768),
                "SFIXED_POINT_16": (1e-4, 0)}
BIAS_TYPE = {"UFIXED_POINT_8": "SFIXED_POINT_32", "SFIXED_POINT_8": "SFIXED_POINT_32",
             "UFIXED_POINT_16": "SFIXED_POINT_32", "SFIXED_POINT_16": "SFIXED_POINT_32"}


def role_dtype(role: str, x: str, y: str | None = None) -> str:
    if role in ("x", "w"):
        return x
    if role == "y":
        return y or x
    if role == "b":
        return BIAS_TYPE.get(x, x)
    return role


def role_quant(role: str, dtype: str, x: str) -> tuple | None:
    if dtype not in FIXED:
        return None
    if role == "w":
        return WEIGHT_QUANT.get(dtype, QUANT[dtype])
    if role == "b" and dtype == "SFIXED_POINT_32" and x in WEIGHT_QUANT:
        return (QUANT[x][0] * WEIGHT_QUANT[x][0], 0)
    return QUANT[dtype]


def storage(values, dtype: str, quant) -> np.ndarray:
    """Real ``values`` in ``dtype``'s storage (quantized for fixed point)."""
    npd = dtypes.numpy_dtype(qnn_dtype(dtype))
    v = np.asarray(values, np.float64)
    if quant is not None:
        info = np.iinfo(npd)
        v = np.clip(np.rint(v / quant[0]) - quant[1], info.min, info.max)
    elif np.issubdtype(npd, np.integer) or npd == np.bool_:
        v = np.rint(v)
        if np.issubdtype(npd, np.integer):
            info = np.iinfo(npd)
            v = np.clip(v, info.min, info.max)
    return np.ascontiguousarray(v.astype(npd))


def resolve(op: str, t: Template, x: str, y: str | None = None, overrides: list | None = None) -> Config:
    """The configuration of template ``t`` in data type ``x`` (``y`` for "y" roles). ``overrides``:
    a data type per tensor (inputs by position, then outputs) replacing the roles' (None or "-"
    keeps it)."""
    inputs = []
    for k, i in enumerate(t.inputs):
        if i is None:
            # An absent input's declared type: the set's when one is given (the vendor's
            # validation compares it too), else the measured type.
            d = overrides[k] if overrides is not None and overrides[k] not in (None, "-") else role_dtype("x", x)
            inputs.append(Tensor((0,), d, null=True))
            continue
        d = role_dtype(i.role, x, y)
        if overrides is not None and overrides[k] not in (None, "-"):
            d = overrides[k]
        q = role_quant(i.role, d, x)
        data = storage(i.data if i.data is not None else np.zeros(i.shape), d, q) if i.static else None
        inputs.append(Tensor(tuple(i.shape), d, q, data))
    shapes = t.out_shapes or infer_shapes(op, t)
    outputs = []
    for j, (role, shape) in enumerate(zip(t.outputs, shapes)):
        d = role_dtype(role, x, y)
        if overrides is not None and overrides[len(t.inputs) + j] not in (None, "-"):
            d = overrides[len(t.inputs) + j]
        outputs.append(Tensor(tuple(shape), d, role_quant(role, d, x)))
    cfg = Config(op, len(next((i.shape for i in t.inputs if i is not None), ())), inputs, outputs, dict(t.params))
    cfg.variant = variant_of(op, t)
    return cfg


def variant_of(op: str, t: Template) -> str | None:
    from qnnemu import ops
    from qnnemu.htp.op_support import variant_key
    from qnnemu.ops.base import TensorSpec
    specs = [None if i is None else TensorSpec(tuple(i.shape), qnn_dtype("FLOAT_32")) for i in t.inputs]
    return variant_key(op, ops.get(op).parse_params(params_of(t.params)), specs)


def infer_shapes(op: str, t: Template) -> list[tuple]:
    """Output shapes of the float32 form of ``t`` by qnnemu's own check."""
    from qnnemu import ops
    from qnnemu.ops.base import TensorSpec
    specs = []
    for i in t.inputs:
        if i is None:
            specs.append(None)
            continue
        d = role_dtype(i.role, t.shape_dtype)
        data = storage(i.data if i.data is not None else np.zeros(i.shape), d, None) if i.static else None
        specs.append(TensorSpec(tuple(i.shape), qnn_dtype(d), None, data))
    while specs and specs[-1] is None:
        specs.pop()
    outs = ops.get(op).check(specs, params_of(t.params))
    return [o.shape for o in outs]


def params_of(params: dict) -> dict:
    """qnnemu op Params from a template's parameter values (qnnemu.client's conventions)."""
    from qnnemu.ops.base import Param
    out = {}
    for name, v in params.items():
        if isinstance(v, np.ndarray) and v.ndim >= 1:
            out[name] = Param(name, "tensor", dtypes.from_numpy(v.dtype), v)
        elif isinstance(v, bool):
            out[name] = Param(name, "scalar", Q.QNN_DATATYPE_BOOL_8, v)
        elif isinstance(v, float):
            out[name] = Param(name, "scalar", Q.QNN_DATATYPE_FLOAT_32, v)
        elif isinstance(v, int):
            out[name] = Param(name, "scalar", Q.QNN_DATATYPE_UINT_32 if v >= 0 else Q.QNN_DATATYPE_INT_32, v)
        elif isinstance(v, np.generic):
            out[name] = Param(name, "scalar", dtypes.from_numpy(v.dtype), v.item())
        else:
            raise TypeError(f"parameter {name}: {v!r}")
    return out


def canonical_rank(op: str) -> int:
    """The rank the data type sweep uses: 4 where the op takes it, else its first rank > 0."""
    ranks = TEMPLATES[op][1]
    return 4 if 4 in ranks else next(r for r in ranks if r > 0)


__all__ = ["DTYPES", "TEMPLATES", "PAIR_OPS", "VARIANTS", "VARIANT_DTYPES", "ALT", "ALT_BASE_DIMS", "Template", "In",
           "Config", "Tensor", "resolve", "canonical_rank", "qnn_dtype", "params_of", "infer_shapes", "FIXED", "FLOATS"]
