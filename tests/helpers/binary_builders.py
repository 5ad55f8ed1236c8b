"""Builders for context binaries on the core objects (qnnemu/core/binary.py, docs/context-binary.md;
QNN API: QnnContext_getBinary / QnnContext_createFromBinary): tensor and param descriptions as
the ABI layer hands them over, ``GraphBuilder`` on a core Context, a float and a quantized test
graph, running a core Graph by tensor name, loading a blob, and splitting / editing a blob's
metadata with valid CRCs.  Used by tests/test_context_binary.py and tests/test_weights_packing.py."""
from __future__ import annotations

import json

import numpy as np

from qnnemu.core import binary
from qnnemu.core.backend import Backend
from qnnemu.core.context import Context
from qnnemu.core.device import Device, DeviceModel
from qnnemu.core.graph import OpConfigDesc, ParamDesc
from qnnemu.core.handles import HANDLES
from qnnemu.core.log import NULL_LOGGER
from qnnemu.core.tensor import RawQuant, TensorDesc
from qnnemu.headers import Q

F32 = Q.QNN_DATATYPE_FLOAT_32
U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
S8 = Q.QNN_DATATYPE_SFIXED_POINT_8
S32 = Q.QNN_DATATYPE_SFIXED_POINT_32
U32 = Q.QNN_DATATYPE_UINT_32
APP_WRITE, APP_READ = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ
NATIVE, STATIC = Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_STATIC
RNG = np.random.default_rng(20240611)


# ---------------------------------------------------------------------------- core builders
def _raw_quant(quant) -> RawQuant:
    if quant is None:
        return RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)
    if isinstance(quant, tuple):
        return RawQuant(Q.QNN_DEFINITION_DEFINED, Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET,
                        scale=float(np.float32(quant[0])), offset=int(quant[1]))
    return RawQuant(Q.QNN_DEFINITION_DEFINED, Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
                    axis=quant["axis"], scales=np.asarray(quant["scales"], np.float32),
                    offsets=np.asarray(quant.get("offsets", np.zeros(len(quant["scales"]))), np.int32))


def desc(name, dims, dtype=F32, type_=APP_WRITE, data=None, quant=None, tensor_id=0) -> TensorDesc:
    raw = None if data is None else np.ascontiguousarray(data).tobytes()
    return TensorDesc(2, tensor_id, name, type_, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, dtype,
                      _raw_quant(quant), tuple(dims), Q.QNN_TENSORMEMTYPE_RAW, raw,
                      len(raw) if raw is not None else 0, raw is not None)


def ref(t) -> TensorDesc:
    return TensorDesc(2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, t.dtype,
                      _raw_quant(None), t.dims, Q.QNN_TENSORMEMTYPE_RAW)


def param(name, value) -> ParamDesc:
    if isinstance(value, bool):
        return ParamDesc(name, "scalar", Q.QNN_DATATYPE_BOOL_8, value)
    if isinstance(value, int):
        return ParamDesc(name, "scalar", U32 if value >= 0 else Q.QNN_DATATYPE_INT_32, value)
    if isinstance(value, float):
        return ParamDesc(name, "scalar", F32, float(np.float32(value)))
    arr = np.asarray(value, np.uint32)
    return ParamDesc(name, "tensor", U32, tensor=desc(f"{name}.param", arr.shape, U32, STATIC, arr))


class GraphBuilder:
    """A graph of a core Context, built as the ABI layer would."""

    def __init__(self, ctx: Context, name: str, configs: dict | None = None):
        self.handle = ctx.create_graph(name)
        self.graph = HANDLES.lookup(self.handle)
        self.graph.configs = configs or {}

    def tensor(self, name, dims, dtype=F32, type_=NATIVE, data=None, quant=None):
        return self.graph.create_tensor(desc(name, dims, dtype, type_, data, quant))

    def node(self, op, name, inputs, outputs, **params):
        cfg = OpConfigDesc(1, name, "qti.aisw", op, [param(k, v) for k, v in params.items()],
                           [ref(t) for t in inputs], [ref(t) for t in outputs])
        return self.graph.add_node(cfg)


def new_context(configs=None, model: DeviceModel | None = None) -> Context:
    device = Device(model, NULL_LOGGER) if model is not None else None
    return Context(Backend(), device, None, configs)


def float_graph(ctx: Context, name="float_net", seed=1, w_conv=None) -> GraphBuilder:
    """x[1,8,8,3] -> Conv2d(3x3, stride 2, pad 1) + bias -> Relu -> Reshape -> FullyConnected -> y[1,10]."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(ctx, name, {"priority": Q.QNN_PRIORITY_DEFAULT})
    x = b.tensor("x", (1, 8, 8, 3), type_=APP_WRITE)
    w = b.tensor("conv_w", (3, 3, 3, 4), type_=STATIC,
                 data=w_conv if w_conv is not None else rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
    bias = b.tensor("conv_b", (4,), type_=STATIC, data=rng.standard_normal(4).astype(np.float32))
    c = b.tensor("conv_out", (1, 4, 4, 4))
    b.node("Conv2d", "conv", [x, w, bias], [c], stride=[2, 2], pad_amount=[[1, 1], [1, 1]])
    r = b.tensor("relu_out", (1, 4, 4, 4))
    b.node("Relu", "relu", [c], [r])
    flat = b.tensor("flat", (1, 64))
    b.node("Reshape", "reshape", [r], [flat])
    fw = b.tensor("fc_w", (10, 64), type_=STATIC, data=rng.standard_normal((10, 64)).astype(np.float32))
    fb = b.tensor("fc_b", (10,), type_=STATIC, data=rng.standard_normal(10).astype(np.float32))
    y = b.tensor("y", (1, 10), type_=APP_READ)
    b.node("FullyConnected", "fc", [flat, fw, fb], [y])
    b.graph.finalize()
    return b


def quant_graph(ctx: Context, name="quant_net", seed=2) -> GraphBuilder:
    """uint8 x -> Conv2d with per-channel int8 weights, int32 bias -> uint8 y -> Softmax (beta 0.5) in float."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(ctx, name)
    x = b.tensor("qx", (1, 6, 6, 2), U8, APP_WRITE, quant=(0.05, -128))
    scales = np.array([0.01, 0.02, 0.005], np.float32)
    w = b.tensor("qw", (3, 3, 2, 3), S8, STATIC, rng.integers(-127, 128, (3, 3, 2, 3), dtype=np.int8),
                 quant={"axis": 3, "scales": scales})
    bias = b.tensor("qb", (3,), S32, STATIC, rng.integers(-500, 500, 3, dtype=np.int32),
                    quant={"axis": 0, "scales": scales * np.float32(0.05)})
    y = b.tensor("qy", (1, 6, 6, 3), U8, Q.QNN_TENSOR_TYPE_APP_READWRITE, quant=(0.04, -100))
    b.node("Conv2d", "qconv", [x, w, bias], [y], pad_amount=[[1, 1], [1, 1]])
    z = b.tensor("probs", (1, 6, 6, 3), F32, APP_READ)
    b.node("Softmax", "softmax", [y], [z], beta=0.5)
    b.graph.finalize()
    return b


def run(graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """graphExecute on a core Graph, by tensor name."""
    ids = {graph.tensors[i].name: i for i in graph.tensors}
    wanted = [t.id for t in graph.app_outputs()]
    out = graph.execute({ids[k]: v for k, v in feeds.items()}, wanted)
    return {graph.tensors[i].name: out[i] for i in wanted}


def load(blob, **kw) -> Context:
    return binary.deserialize(blob, Backend(), kw.pop("device", None), **kw)


def loaded_graph(ctx: Context, name: str):
    return HANDLES.lookup(ctx.retrieve_graph(name))


def float_feeds():
    return {"x": RNG.standard_normal((1, 8, 8, 3)).astype(np.float32)}


def quant_feeds():
    return {"qx": RNG.integers(0, 256, (1, 6, 6, 2), dtype=np.uint8)}


def assert_same_outputs(a: dict, b: dict, what: str):
    assert sorted(a) == sorted(b), f"{what}: same output names"
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, f"{what}: {k} dtype/shape"
        assert a[k].tobytes() == b[k].tobytes(), f"{what}: output {k} is bit-identical"


def split(blob: bytes):
    h = binary.parse_header(blob)
    meta = json.loads(blob[h.metadata_offset:h.metadata_offset + h.metadata_size])
    return h, meta, blob[h.data_offset:h.data_offset + h.data_size]


def with_meta(blob: bytes, edit) -> bytes:
    """``blob`` with its metadata changed by ``edit(meta)``, re-assembled (valid CRCs)."""
    h, meta, data = split(blob)
    edit(meta)
    return binary.assemble(h, meta, data)
