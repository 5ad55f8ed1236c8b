"""libQnnSystem.so: System/QnnSystemContext.h (systemContextCreate / GetBinaryInfo / GetMetaData /
Free over qnnemu context binaries, with HTP/QnnHtpSystemContext.h's blobs) and
System/QnnSystemTensor.h (systemTensorGetMemoryFootprint), through the C ABI.

The library is loaded with cffi in ABI mode, as tests/test_system_lib.py does.  Binaries are
built on the core objects (Context / Graph, as the ABI layer hands them over) and serialized with
qnnemu.core.binary; every field of BinaryInfo v1, v2 and v3 (QNNEMU_SYSTEM_BINARY_INFO_VERSION)
is read back from C memory and compared with ``binary.inspect`` of the same bytes, plus facts
known from the construction (names, shapes, quantization values, device).  Every System context
and tensor rule id has one negative case (``RULE_IDS``); the core's binary rules are checked to
arrive with the System codes.  When the vendor's libQnnSystem.so is present, footprints are
compared with it (it cannot read qnnemu binaries, so binary info is not).
"""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import vendor
from helpers.system_lib import FOOTPRINT_CASES, LIB, Recorder, ffi, footprint, table, tensor

import qnnemu
from qnnemu.core import binary
from qnnemu.core.backend import BUILD_ID, Backend
from qnnemu.core.context import Context
from qnnemu.core.device import SOC_TABLE, Device, model_from_configs
from qnnemu.core.graph import OpConfigDesc, ParamDesc
from qnnemu.core.handles import HANDLES
from qnnemu.core.log import NULL_LOGGER
from qnnemu.core.tensor import RawQuant, TensorDesc
from qnnemu.headers import Q

pytestmark = pytest.mark.skipif(not LIB.exists(), reason="libQnnSystem.so is not built (pip install -e .)")

ENV_VERSION = "QNNEMU_SYSTEM_BINARY_INFO_VERSION"
SC_BAD_ARG = Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT
SC_BAD_HANDLE = Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_HANDLE
MALFORMED = Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY
T_BAD_ARG = Q.QNN_SYSTEM_TENSOR_ERROR_INVALID_ARGUMENT
T_INVALID = Q.QNN_SYSTEM_TENSOR_ERROR_INVALID_TENSOR

F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
U8, S8, S32 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_32
U16, U32 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_UINT_32
APP_WRITE, APP_READ, APP_RW = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ, Q.QNN_TENSOR_TYPE_APP_READWRITE
NATIVE, STATIC = Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_STATIC
DEFINED, UNDEFINED = Q.QNN_DEFINITION_DEFINED, Q.QNN_DEFINITION_UNDEFINED
ENC = {name: getattr(Q, f"QNN_QUANTIZATION_ENCODING_{name}") for name in (
    "SCALE_OFFSET", "BW_SCALE_OFFSET", "AXIS_SCALE_OFFSET", "BW_AXIS_SCALE_OFFSET", "BLOCKWISE_EXPANSION",
    "UNDEFINED")}


@pytest.fixture
def syslog():
    """The newest System logger (it gets the library's messages), at DEBUG."""
    rec = Recorder()
    out = ffi.new("Qnn_LogHandle_t *")
    assert table().systemLogCreate(rec.callback, Q.QNN_LOG_LEVEL_DEBUG, out) == Q.QNN_SUCCESS
    rec.handle = out[0]
    yield rec
    assert table().systemLogFree(out[0]) == Q.QNN_SUCCESS


@pytest.fixture
def sysctx():
    out = ffi.new("QnnSystemContext_Handle_t *")
    assert table().systemContextCreate(out) == Q.QNN_SUCCESS, "systemContextCreate"
    yield out[0]
    table().systemContextFree(out[0])  # may already be freed by the test


class Answer:
    """One GetBinaryInfo / GetMetaData call; keeps the client's buffer alive for the call only."""

    def __init__(self, code, info, size, buffer):
        self.code, self.info, self.size, self.buffer = code, info, size, buffer


def get_binary_info(handle, blob: bytes | None, size: int | None = None, *, info_out=True, size_out=True,
                    meta=False) -> Answer:
    buf = ffi.new("char[]", blob) if blob is not None else ffi.NULL
    out = ffi.new("const QnnSystemContext_BinaryInfo_t **") if info_out else ffi.NULL
    n = len(blob) if size is None else size
    if meta:
        code = table().systemContextGetMetaData(handle, buf, n, out)
        sz = None
    else:
        sz = ffi.new("Qnn_ContextBinarySize_t *") if size_out else ffi.NULL
        code = table().systemContextGetBinaryInfo(handle, buf, n, out, sz)
    info = out[0] if info_out and code == Q.QNN_SUCCESS else None
    size_value = int(sz[0]) if (not meta and size_out and code == Q.QNN_SUCCESS) else None
    return Answer(code, info, size_value, buf)


# ---------------------------------------------------------------------------- core builders
def _raw_quant(quant) -> RawQuant:
    if quant is None:
        return RawQuant(UNDEFINED, ENC["UNDEFINED"])
    if isinstance(quant, RawQuant):
        return quant
    if isinstance(quant, tuple):
        return RawQuant(DEFINED, ENC["SCALE_OFFSET"], scale=float(np.float32(quant[0])), offset=int(quant[1]))
    return RawQuant(DEFINED, ENC["AXIS_SCALE_OFFSET"], axis=quant["axis"],
                    scales=np.asarray(quant["scales"], np.float32),
                    offsets=np.asarray(quant.get("offsets", np.zeros(len(quant["scales"]))), np.int32))


def desc(name, dims, dtype=F32, type_=APP_WRITE, data=None, quant=None) -> TensorDesc:
    raw = None if data is None else np.ascontiguousarray(data).tobytes()
    return TensorDesc(2, 0, name, type_, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, dtype, _raw_quant(quant),
                      tuple(dims), Q.QNN_TENSORMEMTYPE_RAW, raw, len(raw) if raw is not None else 0, raw is not None)


def ref(t) -> TensorDesc:
    return TensorDesc(2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, t.dtype,
                      _raw_quant(None), t.dims, Q.QNN_TENSORMEMTYPE_RAW)


def param(name, value) -> ParamDesc:
    if isinstance(value, float):
        return ParamDesc(name, "scalar", F32, float(np.float32(value)))
    arr = np.asarray(value, np.uint32)
    return ParamDesc(name, "tensor", U32, tensor=desc(f"{name}.param", arr.shape, U32, STATIC, arr))


class GraphBuilder:
    def __init__(self, ctx: Context, name: str, configs: dict | None = None):
        self.graph = HANDLES.lookup(ctx.create_graph(name))
        self.graph.configs = configs or {}

    def tensor(self, name, dims, dtype=F32, type_=NATIVE, data=None, quant=None):
        return self.graph.create_tensor(desc(name, dims, dtype, type_, data, quant))

    def node(self, op, name, inputs, outputs, **params):
        cfg = OpConfigDesc(1, name, "qti.aisw", op, [param(k, v) for k, v in params.items()],
                           [ref(t) for t in inputs], [ref(t) for t in outputs])
        self.graph.add_node(cfg)


def htp_graph_config(option: str, member: str, value) -> tuple[str, dict]:
    """An HTP graph custom config as the ABI records it (option name -> fields)."""
    number = getattr(Q, option)
    return Q.enum("QNN_HTP_GRAPH_CONFIG_OPTION_")[number], {"option": number, member: value}


QUANT_SCALES = np.array([0.01, 0.02, 0.005], np.float32)
BLOCK_SCALES = np.array([[1, 2], [3, 4], [5, 6]], np.uint8)


def build_rich_context() -> Context:
    """SM8650 (v75) context: a context tensor, a float graph using it, a quantized graph
    (per-tensor and per-axis, an APP_READWRITE tensor, HTP configs) and a blockwise graph."""
    rng = np.random.default_rng(7)
    ctx = Context(Backend(), Device(model_from_configs(Q.QNN_SOC_MODEL_SM8650, None, None), NULL_LOGGER),
                  None, None)
    shared = ctx.create_tensor(desc("shared_w", (2, 3), type_=STATIC, data=np.arange(6, dtype=np.float32)))
    b = GraphBuilder(ctx, "add")
    x = b.tensor("x_add", (2, 3), type_=APP_WRITE)
    y = b.tensor("y_add", (2, 3), type_=APP_READ)
    b.node("ElementWiseAdd", "add", [x, shared], [y])
    b.graph.finalize()

    configs = dict([htp_graph_config("QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE", "vtcmSizeInMB", 4),
                    htp_graph_config("QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS", "numHvxThreads", 2),
                    htp_graph_config("QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION", "optimizationOption",
                                     {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG,
                                      "floatValue": 3.0})])
    b = GraphBuilder(ctx, "quant_net", {"htp": configs})
    qx = b.tensor("qx", (1, 6, 6, 2), U8, APP_WRITE, quant=(0.05, -128))
    qw = b.tensor("qw", (3, 3, 2, 3), S8, STATIC, rng.integers(-127, 128, (3, 3, 2, 3), dtype=np.int8),
                  quant={"axis": 3, "scales": QUANT_SCALES, "offsets": [0, 1, -1]})
    qb = b.tensor("qb", (3,), S32, STATIC, rng.integers(-500, 500, 3, dtype=np.int32),
                  quant={"axis": 0, "scales": QUANT_SCALES * np.float32(0.05)})
    qy = b.tensor("qy", (1, 6, 6, 3), U8, APP_RW, quant=(0.04, -100))
    b.node("Conv2d", "qconv", [qx, qw, qb], [qy], pad_amount=[[1, 1], [1, 1]])
    z = b.tensor("probs", (1, 6, 6, 3), F32, APP_READ)
    b.node("Softmax", "softmax", [qy], [z], beta=0.5)
    b.graph.finalize()

    b = GraphBuilder(ctx, "bw", {"htp": dict([htp_graph_config(
        "QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION", "optimizationOption",
        {"type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC, "floatValue": 1.0})])})
    x = b.tensor("bx", (2, 8), type_=APP_WRITE)
    wq = RawQuant(DEFINED, ENC["BLOCKWISE_EXPANSION"], axis=0, scales=QUANT_SCALES, offsets=np.zeros(3, np.int32),
                  blocks_per_axis=2, block_scale_bitwidth=8,
                  block_scale_storage=Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8, block_scales=BLOCK_SCALES)
    w = b.graph.create_tensor(desc("bw_w", (3, 8), S8, STATIC, rng.integers(-8, 8, (3, 8), dtype=np.int8), wq))
    h = b.tensor("bh", (2, 3))
    b.node("FullyConnected", "fc", [x, w], [h])
    yq = RawQuant(DEFINED, ENC["BW_SCALE_OFFSET"], scale=0.001, offset=-30000, bitwidth=16)
    y = b.graph.create_tensor(desc("by", (2, 3), U16, APP_READ, quant=yq))
    b.node("Relu", "relu", [h], [y])
    b.graph.finalize()
    return ctx


def build_small_context(name="small") -> Context:
    ctx = Context(Backend(), None, None, None)
    b = GraphBuilder(ctx, name)
    x = b.tensor("x", (1, 4), type_=APP_WRITE)
    y = b.tensor("y", (1, 4), type_=APP_READ)
    b.node("Relu", "relu", [x], [y])
    b.graph.finalize()
    return ctx


def serialize(ctx: Context) -> bytes:
    try:
        return binary.serialize(ctx)
    finally:
        ctx.free()


@pytest.fixture(scope="module")
def rich_blob() -> bytes:
    return serialize(build_rich_context())


@pytest.fixture(scope="module")
def small_blob() -> bytes:
    return serialize(build_small_context())


def with_meta(blob: bytes, edit) -> bytes:
    """``blob`` with its metadata changed by ``edit(meta)``, re-assembled with valid CRCs."""
    h = binary.parse_header(blob)
    meta = json.loads(blob[h.metadata_offset:h.metadata_offset + h.metadata_size])
    edit(meta)
    return binary.assemble(h, meta, blob[h.data_offset:h.data_offset + h.data_size])


# ----------------------------------------------------------------- reading C memory back
def _str(p):
    return None if p == ffi.NULL else ffi.string(p).decode()


def _ver(v) -> tuple[int, int, int]:
    return (int(v.major), int(v.minor), int(v.patch))


def _f32(values) -> list[float]:
    return [float(np.float32(v)) for v in values]


def read_quant(qp, dims) -> dict:
    d, enc = int(qp.encodingDefinition), int(qp.quantizationEncoding)
    out = {"definition": d, "encoding": enc}
    if d != DEFINED:
        return out
    if enc == ENC["SCALE_OFFSET"]:
        out.update(scale=float(qp.scaleOffsetEncoding.scale), offset=int(qp.scaleOffsetEncoding.offset))
    elif enc == ENC["BW_SCALE_OFFSET"]:
        b = qp.bwScaleOffsetEncoding
        out.update(bitwidth=int(b.bitwidth), scale=float(b.scale), offset=int(b.offset))
    elif enc == ENC["AXIS_SCALE_OFFSET"]:
        a = qp.axisScaleOffsetEncoding
        pairs = [a.scaleOffset[i] for i in range(a.numScaleOffsets)]
        out.update(axis=int(a.axis), scales=[float(p.scale) for p in pairs], offsets=[int(p.offset) for p in pairs])
    elif enc == ENC["BW_AXIS_SCALE_OFFSET"]:
        b = qp.bwAxisScaleOffsetEncoding
        n = int(b.numElements)
        out.update(bitwidth=int(b.bitwidth), axis=int(b.axis), scales=[float(b.scales[i]) for i in range(n)],
                   offsets=[int(b.offsets[i]) for i in range(n)])
    elif enc == ENC["BLOCKWISE_EXPANSION"]:
        b = qp.blockwiseExpansion
        assert b != ffi.NULL, "blockwise expansion points to its Qnn_BlockwiseExpansion_t"
        channels = dims[b.axis]
        n = channels * b.numBlocksPerAxis
        pairs = [b.scaleOffsets[i] for i in range(channels)]
        store8 = b.blockScaleStorageType == Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8
        blocks = b.blocksScale8 if store8 else b.blocksScale16
        out.update(axis=int(b.axis), scales=[float(p.scale) for p in pairs], offsets=[int(p.offset) for p in pairs],
                   blocks_per_axis=int(b.numBlocksPerAxis), block_bitwidth=int(b.blockScaleBitwidth),
                   storage=int(b.blockScaleStorageType), block_scales=[int(blocks[i]) for i in range(n)])
    return out


def read_tensor(t) -> dict:
    version = int(t.version)
    assert version in (1, 2), f"tensor version {version}"
    v = t.v1 if version == 1 else t.v2
    dims = [int(v.dimensions[i]) for i in range(v.rank)]
    assert v.rank > 0 or v.dimensions == ffi.NULL, "a scalar has no dimensions array"
    out = {"version": version, "id": int(v.id), "name": _str(v.name), "type": int(v.type),
           "dataFormat": int(v.dataFormat), "dataType": int(v.dataType), "dims": dims,
           "quant": read_quant(v.quantizeParams, dims), "memType": int(v.memType),
           "clientBuf": (v.clientBuf.data == ffi.NULL, int(v.clientBuf.dataSize))}
    if version == 2:
        out.update(isDynamicDimensions=v.isDynamicDimensions == ffi.NULL, sparse=int(v.sparseParams.type),
                   isProduced=int(v.isProduced))
    return out


def read_tensors(ptr, n) -> list[dict]:
    assert (n == 0) == (ptr == ffi.NULL), f"{n} tensors at {ptr}"
    return [read_tensor(ptr[i]) for i in range(n)]


def read_platform(p) -> dict:
    assert p != ffi.NULL, "platformInfo is set"
    assert p.version == Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1 and p.v1.numHwDevices == 1, "one device"
    hw = p.v1.hwDevices[0]
    assert hw.version == Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1 and hw.v1.numCores == 1, "one core"
    core = hw.v1.cores[0]
    ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", hw.v1.deviceInfoExtension)
    chip = ext.onChipDevice
    return {"deviceType": int(hw.v1.deviceType), "coreType": int(core.v1.coreType), "devType": int(ext.devType),
            "vtcm": int(chip.vtcmSize), "socModel": int(chip.socModel), "arch": int(chip.arch),
            "signedPd": bool(chip.signedPdSupport), "dlbc": bool(chip.dlbcSupport)}


def read_graph(g, version: int) -> dict:
    assert int(g.version) == version, f"GraphInfo v{version} in BinaryInfo v{version}"
    v = (g.graphInfoV1, g.graphInfoV2, g.graphInfoV3)[version - 1]
    out = {"name": _str(v.graphName), "inputs": read_tensors(v.graphInputs, v.numGraphInputs),
           "outputs": read_tensors(v.graphOutputs, v.numGraphOutputs)}
    if version >= 2:
        out["updateable"] = read_tensors(v.updateableTensors, v.numUpdateableTensors)
    if version == 3:
        assert v.graphBlobInfo != ffi.NULL, "graphBlobInfo points to the HTP graph blob info"
        assert v.graphBlobInfoSize == ffi.sizeof("QnnHtpSystemContext_GraphBlobInfo_t"), "graphBlobInfoSize"
        b = ffi.cast("QnnHtpSystemContext_GraphBlobInfo_t *", v.graphBlobInfo)
        b1 = b.contextBinaryGraphBlobInfoV1
        out["blob"] = {"version": int(b.version), "spillFill": int(b1.spillFillBufferSize), "vtcm": int(b1.vtcmSize),
                       "optLevel": int(b1.optimizationLevel), "dlbc": int(b1.htpDlbc), "hvx": int(b1.numHvxThreads)}
        out["ops"] = (int(v.startOpIndex), int(v.endOpIndex))
    return out


def read_info(bi) -> dict:
    version = int(bi.version)
    v = (bi.contextBinaryInfoV1, bi.contextBinaryInfoV2, bi.contextBinaryInfoV3)[version - 1]
    assert (v.numGraphs == 0) == (v.graphs == ffi.NULL), "graphs array"
    out = {"version": version, "backendId": int(v.backendId), "buildId": _str(v.buildId),
           "coreApi": _ver(v.coreApiVersion), "backendApi": _ver(v.backendApiVersion), "socVersion": _str(v.socVersion),
           "contextBlobVersion": _ver(v.contextBlobVersion), "contextBlobSize": int(v.contextBlobSize),
           "contextTensors": read_tensors(v.contextTensors, v.numContextTensors),
           "graphs": [read_graph(v.graphs[i], version) for i in range(v.numGraphs)]}
    if version in (1, 2):
        assert v.hwInfoBlob != ffi.NULL and v.hwInfoBlobSize == ffi.sizeof("QnnHtpSystemContext_HwBlobInfo_t"), \
            "hwInfoBlob points to an HTP hardware blob info"
        hw = ffi.cast("QnnHtpSystemContext_HwBlobInfo_t *", v.hwInfoBlob)
        out["hwBlob"] = {"blobVersion": _ver(v.hwInfoBlobVersion), "version": int(hw.version),
                         "graphIndex": int(hw.contextBinaryHwInfoBlobV1_t.graphListIndex),
                         "spillFill": int(hw.contextBinaryHwInfoBlobV1_t.spillFillBufferSize)}
    if version >= 2:
        out["platform"] = read_platform(v.platformInfo)
    if version == 3:
        assert v.contextMetadataSize == ffi.sizeof("QnnHtpSystemContext_ContextBlobInfo_t"), "contextMetadataSize"
        cb = ffi.cast("QnnHtpSystemContext_ContextBlobInfo_t *", v.contextMetadata)
        out["contextBlob"] = {"version": int(cb.version), "dspArch": int(cb.contextBinaryContextBlobInfoV1.dspArch)}
        out["socModel"] = int(v.socModel)
    return out


# ------------------------------------------------------------ expectations from binary.inspect
def expected_quant(q, dtype: int) -> dict:
    if q is None:
        return {"definition": UNDEFINED, "encoding": ENC["UNDEFINED"]}
    out = {"definition": DEFINED, "encoding": q.encoding}
    storage_bits = 8 * np.dtype(_STORAGE[dtype]).itemsize
    if q.encoding in (ENC["SCALE_OFFSET"], ENC["BW_SCALE_OFFSET"]):
        out.update(scale=float(np.float32(q.scale)), offset=int(q.offset))
        if q.encoding == ENC["BW_SCALE_OFFSET"]:
            out["bitwidth"] = q.bitwidth or storage_bits
    else:
        out.update(axis=q.axis, scales=_f32(q.scale), offsets=[int(o) for o in q.offset])
        if q.encoding == ENC["BW_AXIS_SCALE_OFFSET"]:
            out["bitwidth"] = q.bitwidth or storage_bits
        if q.encoding == ENC["BLOCKWISE_EXPANSION"]:
            blocks = np.asarray(q.block_scales)
            out.update(blocks_per_axis=blocks.shape[1], block_bitwidth=8 * blocks.dtype.itemsize,
                       storage=(Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8 if blocks.dtype == np.uint8
                                else Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16),
                       block_scales=blocks.ravel().tolist())
    return out


_STORAGE = {F32: np.float32, F16: np.float16, U8: np.uint8, S8: np.int8, S32: np.int32, U16: np.uint16,
            U32: np.uint32}


def expected_tensor(t, version: int) -> dict:
    out = {"version": version, "id": t.id, "name": t.name, "type": t.type,
           "dataFormat": Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, "dataType": t.dtype, "dims": list(t.dims),
           "quant": expected_quant(t.quant, t.dtype), "memType": Q.QNN_TENSORMEMTYPE_RAW, "clientBuf": (True, 0)}
    if version == 2:
        out.update(isDynamicDimensions=True, sparse=Q.QNN_SPARSE_LAYOUT_UNDEFINED, isProduced=0)
    return out


def spill(g) -> int:
    return int(getattr(g, "spill_fill_bytes", 0))


def expected_info(info, version: int, graph_blobs: dict[str, dict]) -> dict:
    """``graph_blobs``: the HTP settings each graph was built with (test facts, not derived)."""
    h = info.header
    tv = 1 if version == 1 else 2
    updateable_types = {Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE,
                        Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ,
                        Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE}
    graphs = []
    for g in info.graphs:
        e = {"name": g.name, "inputs": [expected_tensor(t, tv) for t in g.inputs],
             "outputs": [expected_tensor(t, tv) for t in g.outputs]}
        if version >= 2:
            used = {i for n in g.nodes for i in n.inputs + n.outputs}
            upd = [t for t in g.tensors if t.type in updateable_types]
            upd += [t for t in info.context_tensors if t.type in updateable_types and t.id in used]
            e["updateable"] = [expected_tensor(t, tv) for t in upd]
        if version == 3:
            e["blob"] = dict(graph_blobs[g.name], version=Q.QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V1,
                             spillFill=spill(g))
            e["ops"] = (0, len(g.nodes) - 1)
        graphs.append(e)
    out = {"version": version, "backendId": Q.QNN_BACKEND_ID_HTP, "buildId": h.build_id, "coreApi": h.core_api,
           "backendApi": h.backend_api, "socVersion": f"V{h.htp_arch}", "contextBlobVersion": (h.format_version, 0, 0),
           "contextBlobSize": h.total_size, "contextTensors": [expected_tensor(t, tv) for t in info.context_tensors],
           "graphs": graphs}
    if version in (1, 2):
        sizes = [spill(g) for g in info.graphs]
        out["hwBlob"] = {"blobVersion": (0, 0, 1), "version": Q.QNN_SYSTEM_CONTEXT_HTP_HW_INFO_BLOB_VERSION_V1,
                         "graphIndex": sizes.index(max(sizes)), "spillFill": max(sizes)}
    if version >= 2:
        _, _, signed_pd, dlbc = SOC_TABLE[h.soc_model]  # the emulator's SoC capabilities
        out["platform"] = {"deviceType": Q.QNN_HTP_DEVICE_TYPE_ON_CHIP, "coreType": Q.QNN_HTP_CORE_TYPE_NSP,
                           "devType": Q.QNN_HTP_DEVICE_TYPE_ON_CHIP, "vtcm": h.vtcm_mb, "socModel": h.soc_model,
                           "arch": h.htp_arch, "signedPd": signed_pd, "dlbc": dlbc}
    if version == 3:
        out["contextBlob"] = {"version": Q.QNN_SYSTEM_CONTEXT_HTP_CONTEXT_INFO_BLOB_VERSION_V1, "dspArch": h.htp_arch}
        out["socModel"] = h.soc_model
    return out


# HTP settings the rich context's graphs were built with: VTCM MiB (8 = SM8650's whole VTCM),
# optimization level (2 = default), DLBC, HVX threads (4 = default).
# As the vendor's offline prepare writes GraphBlobInfo (tests/test_binary_blob_info.py): VTCM in
# bytes (unset: 4 MiB), optimization level 0 and HVX threads 0 when not configured.
RICH_GRAPH_BLOBS = {"add": {"vtcm": 4 << 20, "optLevel": 0, "dlbc": 0, "hvx": 0},
                    "quant_net": {"vtcm": 4 << 20, "optLevel": 3, "dlbc": 0, "hvx": 2},
                    "bw": {"vtcm": 4 << 20, "optLevel": 0, "dlbc": 1, "hvx": 0}}


def assert_same(got: dict, want: dict, what: str):
    for key in sorted(set(got) | set(want)):
        assert got.get(key) == want.get(key), f"{what}: field {key}: got {got.get(key)!r}, expected {want.get(key)!r}"


# ----------------------------------------------------------------------------- binary info
@pytest.mark.parametrize("version", [1, 2, 3])
def test_binary_info_matches_inspect(monkeypatch, sysctx, rich_blob, version):
    monkeypatch.setenv(ENV_VERSION, str(version))
    a = get_binary_info(sysctx, rich_blob)
    assert a.code == Q.QNN_SUCCESS, f"GetBinaryInfo v{version} returned {a.code}"
    got = read_info(a.info)
    want = expected_info(binary.inspect(rich_blob), version, RICH_GRAPH_BLOBS)
    assert_same(got, want, f"BinaryInfo v{version}")
    # Facts from the construction, independent of inspect():
    assert got["version"] == version and got["backendId"] == 6, "version and QNN_BACKEND_ID_HTP"
    assert got["buildId"] == BUILD_ID and got["contextBlobSize"] == len(rich_blob), "build id and blob size"
    assert [g["name"] for g in got["graphs"]] == ["add", "quant_net", "bw"], "graphs in creation order"
    assert [t["name"] for t in got["contextTensors"]] == ["shared_w"], "the context tensor"
    q = got["graphs"][1]
    assert [t["name"] for t in q["inputs"]] == ["qx", "qy"] and [t["name"] for t in q["outputs"]] == ["qy", "probs"], \
        "APP_READWRITE is both an input and an output"
    assert q["inputs"][0]["quant"] == {"definition": DEFINED, "encoding": ENC["SCALE_OFFSET"],
                                       "scale": float(np.float32(0.05)), "offset": -128}, "per-tensor quantization"
    assert q["inputs"][0]["dims"] == [1, 6, 6, 2] and q["inputs"][0]["dataType"] == U8, "dims and data type"
    bw_out = got["graphs"][2]["outputs"][0]["quant"]
    assert (bw_out["encoding"], bw_out["bitwidth"], bw_out["offset"]) == (ENC["BW_SCALE_OFFSET"], 16, -30000), \
        "bit-width scale-offset"
    assert {t["version"] for g in got["graphs"] for t in g["inputs"] + g["outputs"]} == {1 if version == 1 else 2}, \
        "Qnn_Tensor_t v1 in BinaryInfo v1, v2 otherwise"


def test_default_version_is_3(monkeypatch, sysctx, small_blob):
    monkeypatch.delenv(ENV_VERSION, raising=False)
    a = get_binary_info(sysctx, small_blob)
    assert a.code == Q.QNN_SUCCESS and a.info.version == 3, "BinaryInfo v3 by default"
    graph = a.info.contextBinaryInfoV3.graphs[0]
    assert graph.version == 3 and graph.graphInfoV3.graphBlobInfo != ffi.NULL, "graph info v3 with an HTP blob"
    g = read_graph(graph, 3)
    assert g["blob"] == {"version": 1, "spillFill": spill(binary.inspect(small_blob).graphs[0]), "vtcm": 4 << 20,
                         "optLevel": 0, "dlbc": 0, "hvx": 0}, \
        "default HTP graph blob as the vendor writes it: 4 MiB (in bytes), level and threads 0 (unset)"
    assert read_platform(a.info.contextBinaryInfoV3.platformInfo)["socModel"] == Q.QNN_SOC_MODEL_SM8350, \
        "default device: SM8350 (the HTP documentation's default socModel)"
    assert a.info.contextBinaryInfoV3.socModel == Q.QNN_SOC_MODEL_SM8350 and \
        _str(a.info.contextBinaryInfoV3.socVersion) == "V68", "socModel and socVersion of the default device"


def _io_quant_blob() -> bytes:
    """Per-axis and bit-width per-axis encodings on graph I/O (around Reshapes), and a blockwise
    expanded weight as a context tensor (blockwise expansion is for STATIC tensors only, and
    context tensors are listed in the binary info)."""
    ctx = Context(Backend(), None, None, None)
    b = GraphBuilder(ctx, "io_quant")
    x = b.tensor("axis_in", (2, 3), U8, APP_WRITE, quant={"axis": 1, "scales": QUANT_SCALES, "offsets": [-1, 0, 7]})
    y = b.tensor("axis_out", (2, 3), U8, APP_READ, quant={"axis": 1, "scales": QUANT_SCALES, "offsets": [-1, 0, 7]})
    b.node("Reshape", "copy", [x], [y])
    bwq = RawQuant(DEFINED, ENC["BW_AXIS_SCALE_OFFSET"], axis=0, bitwidth=4, scales=QUANT_SCALES[:2],
                   offsets=np.array([3, -3], np.int32))
    x2 = b.graph.create_tensor(desc("bwaxis_in", (2, 3), S8, APP_WRITE, quant=bwq))
    y2 = b.graph.create_tensor(desc("bwaxis_out", (2, 3), S8, APP_READ, quant=bwq))
    b.node("Reshape", "copy2", [x2], [y2])
    bq = RawQuant(DEFINED, ENC["BLOCKWISE_EXPANSION"], axis=0, scales=QUANT_SCALES, offsets=np.zeros(3, np.int32),
                  blocks_per_axis=2, block_scale_bitwidth=16,
                  block_scale_storage=Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16,
                  block_scales=np.array([[1, 300], [3, 4], [5, 65535]], np.uint16))
    w = ctx.create_tensor(desc("bw16_w", (3, 8), S8, STATIC, np.ones((3, 8), np.int8), bq))
    x3 = b.tensor("fc_in", (2, 8), type_=APP_WRITE)
    y3 = b.tensor("fc_out", (2, 3), type_=APP_READ)
    b.node("FullyConnected", "fc", [x3, w], [y3])
    b.graph.finalize()
    return serialize(ctx)


def test_per_axis_and_blockwise_quantization(monkeypatch, sysctx):
    blob = _io_quant_blob()
    info = binary.inspect(blob)
    for version in (1, 2, 3):
        monkeypatch.setenv(ENV_VERSION, str(version))
        a = get_binary_info(sysctx, blob)
        assert a.code == Q.QNN_SUCCESS, f"v{version}"
        unset = {"vtcm": 4 << 20, "optLevel": 0, "dlbc": 0, "hvx": 0}
        assert_same(read_info(a.info), expected_info(info, version, {"io_quant": unset}), f"v{version}")
        g = read_info(a.info)["graphs"][0]
        by_name = {t["name"]: t for t in g["inputs"] + g["outputs"]}
        assert by_name["axis_in"]["quant"] == {"definition": DEFINED, "encoding": ENC["AXIS_SCALE_OFFSET"], "axis": 1,
                                               "scales": _f32(QUANT_SCALES), "offsets": [-1, 0, 7]}, "per-axis"
        assert by_name["bwaxis_out"]["quant"] == {"definition": DEFINED, "encoding": ENC["BW_AXIS_SCALE_OFFSET"],
                                                  "bitwidth": 4, "axis": 0, "scales": _f32(QUANT_SCALES[:2]),
                                                  "offsets": [3, -3]}, "bit-width per-axis"
        [weight] = read_info(a.info)["contextTensors"]
        assert (weight["name"], weight["type"], weight["dims"]) == ("bw16_w", STATIC, [3, 8]), "the context tensor"
        assert weight["quant"] == {
            "definition": DEFINED, "encoding": ENC["BLOCKWISE_EXPANSION"], "axis": 0, "scales": _f32(QUANT_SCALES),
            "offsets": [0, 0, 0], "blocks_per_axis": 2, "block_bitwidth": 16,
            "storage": Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16,
            "block_scales": [1, 300, 3, 4, 5, 65535]}, f"v{version}: blockwise expansion, 16-bit block scales"


def test_spill_fill_sizes(monkeypatch, sysctx, rich_blob):
    """GraphBlobInfo (v3) carries each graph's spill-fill size; the hardware blob (v1/v2) the
    largest and its graph's index.  The sizes are set on what binary.inspect returns."""
    sizes = {"add": 1000, "quant_net": 5000, "bw": 3000}
    real_inspect = binary.inspect

    def inspect_with_spill_fill(blob, **kw):
        info = real_inspect(blob, **kw)
        for g in info.graphs:
            g.spill_fill_bytes = sizes[g.name]
        return info
    monkeypatch.setattr(binary, "inspect", inspect_with_spill_fill)
    a = get_binary_info(sysctx, rich_blob)
    got = [read_graph(a.info.contextBinaryInfoV3.graphs[i], 3)["blob"]["spillFill"] for i in range(3)]
    assert got == [1000, 5000, 3000], "spillFillBufferSize per graph (BinaryInfo v3)"
    for version in (1, 2):
        monkeypatch.setenv(ENV_VERSION, str(version))
        hw = read_info(get_binary_info(sysctx, rich_blob).info)["hwBlob"]
        assert (hw["graphIndex"], hw["spillFill"]) == (1, 5000), f"v{version}: the largest spill-fill and its graph"


def test_spill_fill_from_the_binary(sysctx, small_blob):
    """A binary whose metadata records a spill-fill size (key ``spill_fill_bytes``, Helper
    LOAD's format addition): the System library reports what inspect() reads."""
    blob = with_meta(small_blob, lambda m: m["graphs"][0].__setitem__("spill_fill_bytes", 123456))
    a = get_binary_info(sysctx, blob)
    assert a.code == Q.QNN_SUCCESS, "a binary with the spill-fill key"
    got = read_graph(a.info.contextBinaryInfoV3.graphs[0], 3)["blob"]["spillFill"]
    assert got == spill(binary.inspect(blob).graphs[0]), "spillFillBufferSize is what the binary records"


def test_updateable_tensors(monkeypatch, sysctx):
    ctx = Context(Backend(), None, None, None)
    try:
        lora = ctx.create_tensor(desc("lora_w", (1, 4), type_=Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC,
                                      data=np.ones((1, 4), np.float32)))
        b = GraphBuilder(ctx, "lora")
        x = b.tensor("x", (1, 4), type_=APP_WRITE)
        scale = b.tensor("scale", (1, 4), type_=Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC, data=np.ones((1, 4), np.float32))
        h = b.tensor("h", (1, 4))
        y = b.tensor("y", (1, 4), type_=APP_READ)
        b.node("ElementWiseAdd", "add", [x, lora], [h])
        b.node("ElementWiseMultiply", "mul", [h, scale], [y])
        b.graph.finalize()
        blob = binary.serialize(ctx)
    except Exception as e:
        pytest.skip(f"UPDATEABLE_STATIC tensors cannot be serialized yet: {e}")
    finally:
        ctx.free()
    for version in (2, 3):
        monkeypatch.setenv(ENV_VERSION, str(version))
        a = get_binary_info(sysctx, blob)
        assert a.code == Q.QNN_SUCCESS
        g = read_info(a.info)["graphs"][0]
        assert [t["name"] for t in g["updateable"]] == ["scale", "lora_w"], \
            f"v{version}: the graph's updateable tensors, then the context's it uses"
        assert all(t["type"] == Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC for t in g["updateable"]), "their type"


def test_metadata_call_answers_the_same(sysctx, rich_blob):
    a = get_binary_info(sysctx, rich_blob, meta=True)
    assert a.code == Q.QNN_SUCCESS, "systemContextGetMetaData"
    assert_same(read_info(a.info), expected_info(binary.inspect(rich_blob), 3, RICH_GRAPH_BLOBS), "GetMetaData")


# ------------------------------------------------------------------------------- ownership
def test_answer_is_owned_by_the_system_context(sysctx, rich_blob, small_blob):
    from qnnemu.abi import system_entry
    first = get_binary_info(sysctx, rich_blob)
    assert first.code == Q.QNN_SUCCESS
    ffi.memmove(first.buffer, b"\0" * len(rich_blob), len(rich_blob))  # the client reuses its buffer
    first.buffer = None
    want = expected_info(binary.inspect(rich_blob), 3, RICH_GRAPH_BLOBS)
    assert_same(read_info(first.info), want, "the answer does not point into the client's buffer")
    sc = HANDLES.lookup(int(ffi.cast("uintptr_t", sysctx)))
    assert isinstance(sc, system_entry.SystemContext), "the handle is a system context"
    first_arena = sc.answer

    other = ffi.new("QnnSystemContext_Handle_t *")
    assert table().systemContextCreate(other) == Q.QNN_SUCCESS
    try:
        second = get_binary_info(other[0], small_blob)
        assert second.code == Q.QNN_SUCCESS
        assert_same(read_info(first.info), want, "another system context's call leaves this answer alone")
        third = get_binary_info(sysctx, small_blob)
        assert third.code == Q.QNN_SUCCESS and third.info != first.info, "a new answer"
        assert sc.answer is not first_arena, "the next call on the handle replaces its answer"
        assert read_info(third.info)["graphs"][0]["name"] == "small", "the new answer describes the new binary"
        assert read_info(second.info) == read_info(third.info), "same binary, same description"
    finally:
        assert table().systemContextFree(other[0]) == Q.QNN_SUCCESS
    assert table().systemContextFree(sysctx) == Q.QNN_SUCCESS
    assert sc.answer is None, "systemContextFree releases the answer"
    assert get_binary_info(sysctx, small_blob).code == SC_BAD_HANDLE, "a freed handle is refused"


def test_binary_info_size(sysctx, rich_blob, small_blob):
    small = get_binary_info(sysctx, small_blob)
    again = get_binary_info(sysctx, small_blob)
    rich = get_binary_info(sysctx, rich_blob)
    assert small.size == again.size > ffi.sizeof("QnnSystemContext_BinaryInfo_t"), \
        "binaryInfoSize: the struct and what it points to, the same for the same binary"
    assert rich.size > small.size, "more graphs and tensors, a larger binary info"


def test_c_client_reads_binary_info(tmp_path, rich_blob):
    """A C program (built against our headers, linked to nothing QNN) loads libQnnSystem.so,
    reads a binary's info v3 and its HTP graph blobs, as ONNX Runtime does."""
    import shutil
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    src = tmp_path / "info.c"
    src.write_text(r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "System/QnnSystemInterface.h"
#include "HTP/QnnHtpSystemContext.h"
typedef Qnn_ErrorHandle_t (*GetSys)(const QnnSystemInterface_t ***, uint32_t *);
int main(int argc, char **argv) {
  FILE *f = fopen(argv[2], "rb");
  fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  char *buf = malloc(n); if (fread(buf, 1, n, f) != (size_t)n) return 2; fclose(f);
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  const QnnSystemInterface_t **sl = NULL; uint32_t np = 0;
  if (!h || ((GetSys)dlsym(h, "QnnSystemInterface_getProviders"))(&sl, &np)) return 3;
  QNN_SYSTEM_INTERFACE_VER_TYPE s = sl[0]->QNN_SYSTEM_INTERFACE_VER_NAME;
  QnnSystemContext_Handle_t sc = NULL;
  const QnnSystemContext_BinaryInfo_t *bi = NULL; Qnn_ContextBinarySize_t size = 0;
  if (s.systemContextCreate(&sc) || s.systemContextGetBinaryInfo(sc, buf, n, &bi, &size)) return 4;
  free(buf);
  if (bi->version != QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3) return 5;
  const QnnSystemContext_BinaryInfoV3_t *v = &bi->contextBinaryInfoV3;
  printf("backend %u graphs %u ctx %u soc %u\n", v->backendId, v->numGraphs, v->numContextTensors, v->socModel);
  for (uint32_t i = 0; i < v->numGraphs; i++) {
    const QnnSystemContext_GraphInfoV3_t *g = &v->graphs[i].graphInfoV3;
    const QnnHtpSystemContext_GraphBlobInfo_t *b = g->graphBlobInfo;
    printf("graph %s in %u out %u first %s vtcm %u hvx %lu\n", g->graphName, g->numGraphInputs,
           g->numGraphOutputs, g->graphInputs[0].v2.name, b->contextBinaryGraphBlobInfoV1.vtcmSize,
           (unsigned long)b->contextBinaryGraphBlobInfoV1.numHvxThreads);
  }
  return s.systemContextFree(sc) ? 6 : 0;
}
""")
    exe = tmp_path / "info"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(Path(qnnemu.include_dir()) / "QNN"), str(src),
                    "-o", str(exe), "-ldl"], check=True)
    (tmp_path / "rich.bin").write_bytes(rich_blob)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
    r = subprocess.run([str(exe), str(LIB), str(tmp_path / "rich.bin")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, f"C client failed ({r.returncode}): {r.stdout} {r.stderr}"
    assert r.stdout.splitlines() == [
        f"backend 6 graphs 3 ctx 1 soc {Q.QNN_SOC_MODEL_SM8650}",
        "graph add in 1 out 1 first x_add vtcm 4194304 hvx 0",
        "graph quant_net in 2 out 2 first qx vtcm 4194304 hvx 2",
        "graph bw in 1 out 1 first bx vtcm 4194304 hvx 0"], "what a C client reads"


# ------------------------------------------------------------------------ rejected binaries
def _corrupt_payload(blob: bytes) -> bytes:
    out = bytearray(blob)
    out[-1] ^= 0xFF
    return bytes(out)


def _future_version(blob: bytes) -> bytes:
    out = bytearray(blob)
    struct.pack_into("<I", out, 8, binary.FORMAT_VERSION + 1)
    return bytes(out)


def _bad_header_crc(blob: bytes) -> bytes:
    out = bytearray(blob)
    out[100] ^= 0x01  # inside the build id
    return bytes(out)


BAD_BINARIES = {
    "vendor": (lambda b: b"\x00\x01\x02\x03QTI-HTP" + bytes(np.random.default_rng(3).integers(0, 256, 4096, np.uint8)),
               "QNNEMU-binary-magic"),
    "truncated-header": (lambda b: b[:100], "QNNEMU-binary-truncated"),
    "truncated": (lambda b: b[:-1], "QNNEMU-binary-truncated"),
    "corrupted": (_corrupt_payload, "QNNEMU-binary-crc"),
    "header-crc": (_bad_header_crc, "QNNEMU-binary-header-crc"),
    "future-version": (_future_version, "QNNEMU-binary-version-future"),
    "metadata": (lambda b: with_meta(b, lambda m: m["graphs"][0].__setitem__("inputs", [999])),
                 "QNNEMU-binary-metadata"),
}


@pytest.mark.parametrize("case", sorted(BAD_BINARIES))
def test_rejected_binaries_keep_their_rule(syslog, sysctx, small_blob, case):
    make, rule = BAD_BINARIES[case]
    syslog.records.clear()
    a = get_binary_info(sysctx, make(small_blob))
    assert a.code == MALFORMED, f"{case}: QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY, got {a.code}"
    msgs = syslog.with_rule(rule)
    assert msgs, f"{case}: logged with the core's rule id {rule}: {syslog.records}"
    assert "systemContextGetBinaryInfo" in msgs[-1] and "binaryBuffer" in msgs[-1], \
        f"{case}: the message names the function and the parameter: {msgs[-1]!r}"


def test_binary_info_survives_a_rejected_call(sysctx, small_blob):
    good = get_binary_info(sysctx, small_blob)
    bad = get_binary_info(sysctx, _corrupt_payload(small_blob))
    assert bad.code == MALFORMED
    assert read_info(good.info)["graphs"][0]["name"] == "small", "a failed call leaves the last answer valid"


# ----------------------------------------------------------------------------- other errors
def test_handle_errors(syslog, small_blob):
    t = table()
    freed = ffi.new("QnnSystemContext_Handle_t *")
    assert t.systemContextCreate(freed) == Q.QNN_SUCCESS and t.systemContextFree(freed[0]) == Q.QNN_SUCCESS
    for handle, rule in ((ffi.NULL, "QNNEMU-handle-null"), (freed[0], "QNNEMU-handle-freed"),
                         (ffi.cast("void *", 0xDEAD0010), "QNNEMU-handle-unknown"),
                         (syslog.handle, "QNNEMU-handle-kind")):  # a System log handle
        syslog.records.clear()
        assert get_binary_info(handle, small_blob).code == SC_BAD_HANDLE, f"GetBinaryInfo: {rule}"
        assert get_binary_info(handle, small_blob, meta=True).code == SC_BAD_HANDLE, f"GetMetaData: {rule}"
        assert t.systemContextFree(handle) == SC_BAD_HANDLE, f"systemContextFree: {rule}"
        assert syslog.rules() == {rule}, f"{rule}: logged {syslog.records}"
        assert len(syslog.records) == 3 and all("sysCtxHandle" in m for _, m in syslog.records), \
            f"{rule}: each call logs one message naming sysCtxHandle: {syslog.records}"


@pytest.mark.parametrize("call,path", [
    (lambda h, b: table().systemContextCreate(ffi.NULL), "sysCtxHandle"),
    (lambda h, b: get_binary_info(h, None, 64).code, "binaryBuffer"),
    (lambda h, b: get_binary_info(h, b, info_out=False).code, "binaryInfo"),
    (lambda h, b: get_binary_info(h, b, size_out=False).code, "binaryInfoSize"),
    (lambda h, b: get_binary_info(h, None, 64, meta=True).code, "binaryBuffer"),
    (lambda h, b: get_binary_info(h, b, info_out=False, meta=True).code, "binaryInfo"),
])
def test_null_arguments(syslog, sysctx, small_blob, call, path):
    syslog.records.clear()
    assert call(sysctx, small_blob) == SC_BAD_ARG, f"NULL {path}: QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT"
    msgs = syslog.with_rule("QNNEMU-system-arg-null")
    assert msgs and f"{path} is NULL" in msgs[-1], f"NULL {path}: {syslog.records}"


# ------------------------------------------------------------------------ tensor footprints
# (tensors and footprint calls: tests/helpers/system_lib.py)
BYTES_PER_ELEMENT = {Q.QNN_DATATYPE_INT_8: 1, Q.QNN_DATATYPE_INT_16: 2, Q.QNN_DATATYPE_INT_32: 4,
                     Q.QNN_DATATYPE_INT_64: 8, Q.QNN_DATATYPE_UINT_8: 1, Q.QNN_DATATYPE_UINT_16: 2,
                     Q.QNN_DATATYPE_UINT_32: 4, Q.QNN_DATATYPE_UINT_64: 8, F16: 2, F32: 4,
                     Q.QNN_DATATYPE_FLOAT_64: 8, Q.QNN_DATATYPE_BFLOAT_16: 2, S8: 1,
                     Q.QNN_DATATYPE_SFIXED_POINT_16: 2, S32: 4, U8: 1, U16: 2,
                     Q.QNN_DATATYPE_UFIXED_POINT_32: 4, Q.QNN_DATATYPE_BOOL_8: 1}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("dims", [(2, 3), (1, 7, 7, 3), (), (5,), (2, 0, 4), (65536, 65536, 2)])
def test_footprint_sizes(version, dims):
    for dtype, size in BYTES_PER_ELEMENT.items():
        code, got = footprint(tensor(version, dtype, dims))
        want = int(np.prod(dims, dtype=object)) * size if dims else size
        assert (code, got) == (Q.QNN_SUCCESS, want), \
            f"v{version} {Q.enum('QNN_DATATYPE_')[dtype]} {list(dims)}: footprint {got} (code {code}), expected {want}"


def test_footprint_cases():
    for name, (kw, code) in FOOTPRINT_CASES.items():
        got_code, got = footprint(tensor(**kw))
        assert got_code == code, f"{name}: code {got_code}, expected {code}"
        if code == Q.QNN_SUCCESS:
            dims = kw.get("dims", (2, 3))
            want = int(np.prod(dims)) * BYTES_PER_ELEMENT[kw.get("dtype", F32)] if dims else \
                BYTES_PER_ELEMENT[kw.get("dtype", F32)]
            assert got == want, f"{name}: footprint {got}, expected {want}"


VENDOR_FOOTPRINT_SCRIPT = r"""
import json, sys
sys.path[:0] = sys.argv[3].split("|")
from helpers import system_lib
system_lib.load(sys.argv[1])
out = {name: system_lib.footprint(system_lib.tensor(**kw)) for name, (kw, _) in system_lib.FOOTPRINT_CASES.items()}
out["null footprint"] = system_lib.footprint(system_lib.tensor(), out=False)[0]
json.dump(out, open(sys.argv[2], "w"))
"""


@pytest.mark.skipif(vendor.vendor_library("libQnnSystem.so") is None, reason="the vendor's libQnnSystem.so is absent")
def test_footprints_agree_with_the_vendor_library(tmp_path):
    """The vendor's library (in a subprocess: it needs LD_LIBRARY_PATH) gives the same codes and
    sizes for every case both define."""
    script = tmp_path / "vendor_footprints.py"
    script.write_text(VENDOR_FOOTPRINT_SCRIPT)
    paths = "|".join([str(Path(__file__).parent), str(Path(qnnemu.__file__).parent.parent)])
    r = subprocess.run([sys.executable, str(script), str(vendor.vendor_library("libQnnSystem.so")),
                        str(tmp_path / "out.json"), paths], env=vendor.vendor_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"vendor run failed: {r.stdout} {r.stderr}"
    theirs = json.loads((tmp_path / "out.json").read_text())
    for name, (kw, _) in FOOTPRINT_CASES.items():
        ours = list(footprint(tensor(**kw)))
        if ours[0] != Q.QNN_SUCCESS:
            ours[1] = theirs[name][1]  # the output is unspecified on failure
        assert ours == theirs[name], f"{name}: ours {ours}, vendor {theirs[name]}"
    assert footprint(tensor(), out=False)[0] == theirs["null footprint"] == T_BAD_ARG, "NULL footprint"


# ------------------------------------------------------------------------------ rule ids
RULE_CASES: dict = {}


def rule_case(rule, code, func, path):
    def deco(fn):
        RULE_CASES[rule] = (code, func, path, fn)
        return fn
    return deco


@rule_case("QNNEMU-systemContext-buffer-size", SC_BAD_ARG, "systemContextGetBinaryInfo", "binaryBufferSize")
def _(sysctx, blob, monkeypatch):
    return get_binary_info(sysctx, blob, size=0).code


@rule_case("QNNEMU-env-system-binary-info-version", SC_BAD_ARG, "systemContextGetBinaryInfo", ENV_VERSION)
def _(sysctx, blob, monkeypatch):
    monkeypatch.setenv(ENV_VERSION, "4")
    return get_binary_info(sysctx, blob).code


@rule_case("QNNEMU-systemTensor-version", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.version")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(version=3))[0]


@rule_case("QNNEMU-systemTensor-data-format", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.v2.dataFormat")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(version=2, data_format=Q.QNN_TENSOR_DATA_FORMAT_SPARSE))[0]


@rule_case("QNNEMU-systemTensor-dtype", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.v1.dataType")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(dtype=Q.QNN_DATATYPE_UFIXED_POINT_4))[0]


@rule_case("QNNEMU-systemTensor-rank", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.v1.rank")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(dims=(1,) * 33))[0]


@rule_case("QNNEMU-systemTensor-dims-null", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.v1.dimensions")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(dims=(2, 2), null_dims=True))[0]


@rule_case("QNNEMU-systemTensor-size", T_INVALID, "systemTensorGetMemoryFootprint", "tensor.v1.dimensions")
def _(sysctx, blob, monkeypatch):
    return footprint(tensor(dims=(0xFFFFFFFF,) * 3))[0]


RULE_IDS = set(RULE_CASES)


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule(syslog, sysctx, small_blob, monkeypatch, rule):
    code, func, path, trigger = RULE_CASES[rule]
    syslog.records.clear()
    got = trigger(sysctx, small_blob, monkeypatch)
    assert got == code, f"{rule}: returned {got}, expected {code}"
    msgs = syslog.with_rule(rule)
    assert msgs, f"{rule}: not logged to the System logger: {syslog.records}"
    assert syslog.rules() == {rule}, f"{rule}: exactly this rule fires; logged {syslog.rules()}"
    assert func in msgs[-1] and path in msgs[-1], f"{rule}: message names {func} and '{path}': {msgs[-1]!r}"


def test_every_new_rule_is_in_rule_ids():
    """The System context/tensor rule ids of system_entry.py all have their case here."""
    text = (Path(qnnemu.__file__).parent / "abi" / "system_entry.py").read_text()
    found = set(re.findall(r'"(QNNEMU-(?:systemContext|systemTensor|env-system-binary)[A-Za-z0-9_-]*)"', text))
    assert found == RULE_IDS, f"rule ids without a case: {sorted(found - RULE_IDS)}; stale: {sorted(RULE_IDS - found)}"
