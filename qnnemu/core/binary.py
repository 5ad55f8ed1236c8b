"""QnnContext.h context binaries: qnnemu's own documented, versioned format (docs/context-binary.md).

- ``serialize(context)``: the bytes ``contextGetBinary`` returns for a context whose graphs are
  all finalized: a fixed 160-byte header (magic, format version, sizes, API versions, build id,
  the SoC/HTP arch the context was prepared for, flags, CRC32s, section offsets), a JSON
  metadata section (graphs, configs, tensors with quantization, nodes with params) and a data
  section with the static tensor data, every blob aligned to 64 bytes in the file so weights
  can be mapped in place.  Identical blobs of one graph are stored once; with
  ``QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED`` identical blobs of all graphs of the
  context are.  A graph with ``QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING`` stores its STATIC
  8-bit tensors whose codes lie in the 4-bit range as nibbles, two per byte (``PACKINGS``;
  format version 2); the loader unpacks them to the exact original bytes.
  Deterministic: the same context gives the same bytes.
- ``inspect(blob)``: the checked header and graph/tensor descriptions without building anything
  (``contextValidateBinary``, the System library's ``systemContextGetBinaryInfo``).
- ``validate(blob, device, compatibility, backend=...)``: ``inspect``, the compatibility rules
  and the rebuild's checks on a throw-away context (what ``deserialize`` would refuse).
- ``deserialize(blob, backend, device, ...)``: a new ``Context`` with the same graphs, tensor ids
  and names, rebuilt through the normal ``Graph.add_node`` checks and finalized, so
  ``graphRetrieve`` + ``graphExecute`` give bit-identical results to the original.

Every failure is a ``QnnError`` with a ``QnnContext_Error_t`` code and a ``QNNEMU-binary-*``
rule id; nothing in a corrupted binary can make the loader crash, hang or allocate more than the
binary's own size (lengths are checked against the buffer before anything is read).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import json
import math
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import ops, rules
from ..errors import QnnError
from ..headers import Q
from ..ops.base import Param, QuantSpec, type_category
from ..htp import packing as weights_packing
from ..htp import soc as socs
from ..htp.packing import PACKINGS, Packing, pack_codes, packing_of, unpack_codes  # noqa: F401 (binary's names)
from ..spec import dtypes
from . import api_version
from .context import Context
from .device import DeviceModel, model_from_configs
from .graph import Graph, OpConfigDesc, ParamDesc
from .log import NULL_LOGGER
from .tensor import (APP_INPUT_TYPES, APP_OUTPUT_TYPES, SUPPORTED_TYPES, RawQuant, Tensor, TensorDesc,
                     from_desc, validate_desc)

# ------------------------------------------------------------------------------ format constants
MAGIC = b"QNNEMUCB"
FORMAT_VERSION = 2          # what serialize writes and the newest deserialize reads
MIN_FORMAT_VERSION = 1      # the oldest deserialize reads (older: QNN_CONTEXT_ERROR_BINARY_VERSION)
PACKING_FORMAT_VERSION = 2  # the first version whose tensors may carry "packing" (WEIGHTS_PACKING)
HEADER_SIZE = 160
ALIGN = 64                  # file alignment of the data section and of every blob in it
FORMAT_NAME = "qnnemu.context-binary"

FLAG_WEIGHT_SHARING = 0x1   # the context had QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED
KNOWN_FLAGS = FLAG_WEIGHT_SHARING

# Little-endian, no padding; the offsets of magic (0) and format version (8) never change.
_HEADER = struct.Struct("<8sIIQII3H3HIIIQQQQ32sII28sI")
assert _HEADER.size == HEADER_SIZE
_HEADER_CRC_OFFSET = HEADER_SIZE - 4

# Sanity limits for values read from a binary (a corrupted length must never drive an allocation).
MAX_RANK = 32
MAX_DIM = 0xFFFFFFFF
MAX_TENSOR_BYTES = 1 << 32  # any tensor (the HTP addresses 32 bits; static ones are also bounded by their blob)
MAX_ID = 0xFFFFFFFF
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1  # quantization offsets (int32_t in Qnn_QuantizeParams_t)

STRICT = "strict"
PERMISSIVE = "permissive"

_WEIGHT_SHARING_OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED"
_WEIGHTS_PACKING_OPTION = "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING"


# HTP custom configs are copied by the ABI as the whole C union (every member, including pointers
# and bytes the client never set); only the member belonging to the option is meaningful and
# deterministic.  Context configs: only the ones that describe how the binary was prepared are
# stored; the others are load-time configs the client passes again to contextCreateFromBinary.
_HTP_CONTEXT_MEMBERS = {
    "QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED": "weightSharingEnabled",
    "QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED": "loraWeightSharingEnabled",
}
_HTP_GRAPH_MEMBERS = {
    "QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION": "optimizationOption",
    "QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION": "precision",
    "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE": "vtcmSizeInMB",
    "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB": "vtcmSizeInMB",
    "QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF": "foldReluActivationIntoConvOff",
    "QNN_HTP_GRAPH_CONFIG_OPTION_SHORT_DEPTH_CONV_ON_HMX_OFF": "shortDepthConvOnHmxOff",
    "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS": "numHvxThreads",
    "QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG": None,  # a char* key: nothing portable to keep
    "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES": "numCores",
    "QNN_HTP_GRAPH_CONFIG_OPTION_PARALLEL_GRAPH_EXECUTION_CONFIG": "parallelGraphExecutionConfig",
    "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES": "vtcmSizeInBytes",
    "QNN_HTP_GRAPH_CONFIG_OPTION_HMX_BOUNDING": "hmxBoundingInfo",
    "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING": "weightsPacking",
    "QNN_HTP_GRAPH_CONFIG_OPTION_ASSUME_SAME_QUANT": "assumeSameQuant",
    "QNN_HTP_GRAPH_CONFIG_OPTION_SHARE_IO_BUFFER": "shareIOBuffer",
    "QNN_HTP_GRAPH_CONFIG_OPTION_ADVANCED_ACTIVATION_FUSION": "advancedActivationFusion",
    "QNN_HTP_GRAPH_CONFIG_OPTION_HIGH_PRECISION_SIGMOID": "highPrecisionSigmoid",
    "QNN_HTP_GRAPH_CONFIG_OPTION_MONOLITHIC_LSTM": "monolithicLstm",
}

# numpy dtypes an array in the metadata may have (``$nd``/``$np`` values).
_ARRAY_DTYPES = frozenset({"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8",
                           "<f2", "<f4", "<f8"})

_PER_TENSOR_ENCODINGS = (Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET,
                         Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET)
_AXIS_ENCODINGS = (Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
                   Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET)
_BLOCKWISE = Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ------------------------------------------------------------------------------ public records
@dataclass(frozen=True)
class Header:
    """The fixed header (docs/context-binary.md "Header")."""

    format_version: int
    header_size: int
    total_size: int
    flags: int
    payload_crc32: int
    core_api: tuple[int, int, int]
    backend_api: tuple[int, int, int]
    soc_model: int
    htp_arch: int
    vtcm_mb: int
    metadata_offset: int
    metadata_size: int
    data_offset: int
    data_size: int
    build_id: str
    graph_count: int
    metadata_crc32: int = 0
    header_crc32: int = 0

    @property
    def weight_sharing(self) -> bool:
        return bool(self.flags & FLAG_WEIGHT_SHARING)


@dataclass
class TensorInfo:
    """A tensor as stored: what ``systemContextGetBinaryInfo`` describes as a Qnn_Tensor_t."""

    id: int
    name: str
    type: int
    dtype: int
    dims: tuple[int, ...]
    quant: QuantSpec | None
    blob: int | None = None            # index into BinaryInfo.blobs (STATIC tensors)
    data_format: int = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
    mem_type: int = Q.QNN_TENSORMEMTYPE_RAW
    packing: str | None = None         # a PACKINGS name: the blob holds the codes as 4-bit nibbles

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data (what the graph executes with, and what the System
        library describes)."""
        return math.prod(self.dims) * dtypes.itemsize(self.dtype)

    @property
    def stored_nbytes(self) -> int:
        """Bytes of its blob in the data section: two codes per byte when packed."""
        return (math.prod(self.dims) + 1) // 2 if self.packing else self.nbytes


@dataclass
class NodeInfo:
    name: str
    package: str
    type_name: str
    params: list[ParamDesc]            # kind "scalar" (dtype, value) or "tensor" (a STATIC TensorDesc)
    inputs: list[int | None]
    outputs: list[int]


@dataclass
class GraphInfo:
    name: str
    configs: dict
    tensors: list[TensorInfo]
    nodes: list[NodeInfo]
    inputs: list[TensorInfo]           # APP_WRITE/APP_READWRITE, in creation order
    outputs: list[TensorInfo]          # APP_READ/APP_READWRITE, in creation order
    spill_fill_bytes: int = 0          # the graph's spill-fill buffer size (metadata key, optional)

    @property
    def static_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors if t.blob is not None)


@dataclass(frozen=True)
class BlobInfo:
    offset: int                         # relative to the data section (a multiple of 64)
    size: int
    crc32: int


@dataclass
class BinaryInfo:
    """What ``inspect`` learns from a binary without building anything."""

    header: Header
    context_configs: dict
    context_tensors: list[TensorInfo]
    graphs: list[GraphInfo]
    blobs: list[BlobInfo]
    # (blob, packing, count) -> the unpacked bytes: tensors sharing a packed blob share one array.
    unpacked: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def graph_names(self) -> list[str]:
        return [g.name for g in self.graphs]

    def graph(self, name: str) -> GraphInfo | None:
        return next((g for g in self.graphs if g.name == name), None)

    @property
    def total_size(self) -> int:
        return self.header.total_size


# ------------------------------------------------------------------------------ errors
def _err(code: int, rule: str, func: str, message: str) -> QnnError:
    return QnnError(code, f"{func}: {message}", rule=rule)


class _Bad(Exception):
    """A schema violation in the metadata; becomes QNNEMU-binary-metadata."""


class _Unencodable(Exception):
    """A value serialize cannot represent."""


# ------------------------------------------------------------------------------ value encoding
def _enc(v: Any) -> Any:
    """Python/numpy value -> JSON, exactly: non-finite floats and numpy values are tagged."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return float(v)
        return {"$f": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        if a.dtype.str not in _ARRAY_DTYPES:
            raise _Unencodable(f"array of dtype {a.dtype}")
        return {"$nd": [a.dtype.str, [int(n) for n in a.shape], base64.b64encode(a.tobytes()).decode("ascii")]}
    if isinstance(v, np.generic):
        a = np.asarray(v)
        if a.dtype.str not in _ARRAY_DTYPES:
            raise _Unencodable(f"numpy scalar of dtype {a.dtype}")
        return {"$np": [a.dtype.str, base64.b64encode(a.tobytes()).decode("ascii")]}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str) or k.startswith("$"):
                raise _Unencodable(f"dictionary key {k!r}")
            out[k] = _enc(x)
        return out
    raise _Unencodable(f"value of type {type(v).__name__}")


def _dec_array(spec: Any, path: str, scalar: bool) -> Any:
    n_fields = 2 if scalar else 3
    if not isinstance(spec, list) or len(spec) != n_fields:
        raise _Bad(f"{path}: malformed {'$np' if scalar else '$nd'} value")
    dt = spec[0]
    if not isinstance(dt, str) or dt not in _ARRAY_DTYPES:
        raise _Bad(f"{path}: array dtype {dt!r} is not one of {sorted(_ARRAY_DTYPES)}")
    dtype = np.dtype(dt)
    shape: tuple[int, ...] = ()
    if not scalar:
        shp = spec[1]
        if not isinstance(shp, list) or len(shp) > MAX_RANK or not all(
                type(n) is int and 0 <= n <= MAX_DIM for n in shp):
            raise _Bad(f"{path}: array shape {shp!r} is not a list of at most {MAX_RANK} sizes")
        shape = tuple(shp)
    text = spec[-1]
    if not isinstance(text, str):
        raise _Bad(f"{path}: array data is not base64 text")
    # The decoded size is bounded by the text, which is bounded by the metadata section.
    want = math.prod(shape) * dtype.itemsize
    if want > len(text):
        raise _Bad(f"{path}: shape {list(shape)} of {dtype} needs {want} bytes, more than the "
                   f"{len(text)} characters of data")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise _Bad(f"{path}: array data is not valid base64") from None
    if len(raw) != want:
        raise _Bad(f"{path}: {len(raw)} bytes of array data for shape {list(shape)} of {dtype} "
                   f"({want} bytes)")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return arr[()] if scalar else arr


def _dec(v: Any, path: str, depth: int = 0) -> Any:
    """JSON -> Python/numpy value (inverse of ``_enc``)."""
    if depth > 64:
        raise _Bad(f"{path}: values nested deeper than 64 levels")
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, list):
        return [_dec(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
    if isinstance(v, dict):
        if len(v) == 1:
            (k, x), = v.items()
            if k == "$f":
                if x not in ("nan", "inf", "-inf"):
                    raise _Bad(f"{path}: unknown float tag {x!r}")
                return float(x)
            if k == "$nd":
                return _dec_array(x, path, scalar=False)
            if k == "$np":
                return _dec_array(x, path, scalar=True)
        if any(k.startswith("$") for k in v):
            raise _Bad(f"{path}: unknown tag in {sorted(v)}")
        return {k: _dec(x, f"{path}.{k}", depth + 1) for k, x in v.items()}
    raise _Bad(f"{path}: unexpected JSON value")


# ------------------------------------------------------------------------------ configs
def _plain(v: Any) -> Any:
    """``v`` if it is plain JSON-able data (after ``_enc``), else raises _Unencodable."""
    return _enc(v)


def _htp_flag(configs: dict, option: str, member: str) -> bool:
    """HTP custom config ``option`` (its union ``member``) is set in ``configs["htp"]``."""
    htp = configs.get("htp") if isinstance(configs, dict) else None
    value = htp.get(option) if isinstance(htp, dict) else None
    if isinstance(value, dict):
        value = value.get(member)
    return bool(value)


def weight_sharing_enabled(configs: dict) -> bool:
    """QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED in a context's configs."""
    return _htp_flag(configs, _WEIGHT_SHARING_OPTION, "weightSharingEnabled")


def weights_packing_enabled(configs: dict) -> bool:
    """QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING (``weightsPacking``) in a graph's configs."""
    return _htp_flag(configs, _WEIGHTS_PACKING_OPTION, "weightsPacking")


def _htp_entry(name: str, value: Any, members: dict) -> dict | None:
    """The deterministic part of one HTP custom config as the ABI copied it."""
    if name not in members:
        return None
    member = members[name]
    if not isinstance(value, dict):
        return {"value": _plain(value)}
    out: dict = {}
    if "option" in value:
        out["option"] = _plain(value["option"])
    if member is not None and member in value:
        out[member] = _plain(value[member])
    return out


def _context_configs_json(configs: dict, log) -> dict:
    out: dict = {}
    htp = configs.get("htp") if isinstance(configs, dict) else None
    if isinstance(htp, dict):
        kept = {}
        for name, value in htp.items():
            try:
                entry = _htp_entry(name, value, _HTP_CONTEXT_MEMBERS)
            except _Unencodable as e:
                log.warn(f"contextGetBinary: context config {name} not stored in the binary ({e})")
                continue
            if entry is not None:
                kept[name] = entry
        if kept:
            out["htp"] = kept
    return out


def _graph_configs_json(graph: Graph, log) -> dict:
    out: dict = {}
    for key, value in graph.configs.items():
        try:
            if key == "htp" and isinstance(value, dict):
                kept = {}
                for name, v in value.items():
                    entry = _htp_entry(name, v, _HTP_GRAPH_MEMBERS)
                    if entry is None:
                        log.warn(f"contextGetBinary: graph '{graph.name}': HTP config {name} is not "
                                 f"stored in the binary (unknown option)")
                        continue
                    kept[name] = entry
                out["htp"] = kept
            else:
                out[key] = _plain(value)
        except _Unencodable as e:
            log.warn(f"contextGetBinary: graph '{graph.name}': config '{key}' not stored in the "
                     f"binary ({e})")
    return out


# ------------------------------------------------------------------------------ serialize
def _quant_json(q: QuantSpec | None) -> dict | None:
    if q is None:
        return None
    return {"encoding": int(q.encoding), "scale": _enc(q.scale), "offset": _enc(q.offset),
            "axis": None if q.axis is None else int(q.axis),
            "bitwidth": None if q.bitwidth is None else int(q.bitwidth),
            "block_scales": _enc(q.block_scales)}


def _same_value(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic values compare as different
        return False


def _int_dtype(value: int, cats: tuple[str, ...]) -> int:
    if "int" in cats and (value < 0 or "uint" not in cats):
        return Q.QNN_DATATYPE_INT_32 if -2**31 <= value < 2**31 else Q.QNN_DATATYPE_INT_64
    return Q.QNN_DATATYPE_UINT_32 if 0 <= value < 2**32 else Q.QNN_DATATYPE_UINT_64


def _derived_param(node, name: str, spec, value: Any) -> Param:
    """A Param that parses back to ``value`` (a parsed parameter of ``node``)."""
    cats = spec.types
    if spec.kind == "scalar":
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool) and "bool" in cats:
            return Param(name, "scalar", Q.QNN_DATATYPE_BOOL_8, value)
        if isinstance(value, int) and not isinstance(value, bool) and ("int" in cats or "uint" in cats):
            return Param(name, "scalar", _int_dtype(value, cats), value)
        if isinstance(value, float) and "float" in cats:
            exact = math.isnan(value) or float(np.float32(value)) == value
            return Param(name, "scalar", Q.QNN_DATATYPE_FLOAT_32 if exact else Q.QNN_DATATYPE_FLOAT_64, value)
        if isinstance(value, str) and "string" in cats:
            return Param(name, "scalar", Q.QNN_DATATYPE_STRING, value)
        raise _Unencodable(f"node '{node.name}' ({node.op_type}): scalar parameter '{name}' = {value!r}")
    arr = np.asarray(value)
    for qtype in sorted(dtypes._TABLE):
        if qtype in dtypes.FIXED_POINT_TYPES or qtype == Q.QNN_DATATYPE_BFLOAT_16:
            continue
        if dtypes.numpy_dtype(qtype) == arr.dtype and type_category(qtype) in cats:
            if qtype == Q.QNN_DATATYPE_BOOL_8 and "bool" not in cats:
                continue
            return Param(name, "tensor", qtype, arr)
    raise _Unencodable(f"node '{node.name}' ({node.op_type}): tensor parameter '{name}' of numpy "
                       f"dtype {arr.dtype}")


def _node_params(node) -> list[Param]:
    """The node's parameters as Params: those graphAddNode received when the graph kept them
    (``node.raw_params``), otherwise derived from the parsed values (defaults left out)."""
    raw = getattr(node, "raw_params", None)
    if raw:
        return list(raw.values()) if isinstance(raw, dict) else list(raw)
    cls = node.op_cls
    out = []
    for name, value in node.params.items():
        spec = cls.params.get(name)
        if spec is None:
            raise _Unencodable(f"node '{node.name}' ({node.op_type}): parameter '{name}' is not "
                               f"in the op definition")
        if value is None:
            continue
        default = spec.default() if callable(spec.default) else spec.default
        if _same_value(value, default):
            continue
        out.append(_derived_param(node, name, spec, value))
    return out


def _param_json(p: Param) -> dict:
    value = p.value if p.kind == "scalar" else np.asarray(p.value)
    if p.kind == "scalar" and isinstance(value, np.generic):
        value = value.item()
    return {"name": p.name, "kind": p.kind, "dtype": int(p.dtype), "value": _enc(value)}


class _BlobStore:
    def __init__(self):
        self.blobs: list[bytes] = []
        self.index: dict[tuple[str, bytes], int] = {}

    def add(self, data: np.ndarray | bytes, scope: str) -> int:
        """The index of a blob holding these bytes in ``scope`` (stored once per scope).  Blobs
        are plain bytes: a packed and an unpacked tensor may share one (each reads it its way)."""
        raw = data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes()
        key = (scope, hashlib.sha256(raw).digest())
        idx = self.index.get(key)
        if idx is None:
            idx = len(self.blobs)
            self.blobs.append(raw)
            self.index[key] = idx
        return idx


def _tensor_json(t: Tensor, store: _BlobStore, scope: str, packing: bool = False) -> dict:
    """``packing``: the tensor's graph has WEIGHTS_PACKING (context tensors: never)."""
    blob = None
    packed = weights_packing.packing_of(t, packing)
    if packed is not None:
        blob = store.add(pack_codes(t.data), scope)
    # UPDATEABLE_STATIC data is stored like STATIC data (its current, possibly updated, values).
    elif t.type in (Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC) and t.data is not None:
        blob = store.add(t.data, scope)
    out = {"id": int(t.id), "name": t.name, "type": int(t.type), "dtype": int(t.dtype),
           "dims": [int(n) for n in t.dims], "quant": _quant_json(t.quant), "blob": blob}
    if packed is not None:       # the key appears only on packed tensors (format version 2)
        out["packing"] = packed.name
    if t.data_format != Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER:   # native KV cache tensors
        out["data_format"] = int(t.data_format)
    return out


def _device_model(device) -> DeviceModel:
    model = getattr(device, "model", None)
    return model if isinstance(model, DeviceModel) else DeviceModel()


def serialize(context, *, func: str = "contextGetBinary") -> bytes:
    """The context binary of ``context`` (every graph must be finalized)."""
    code = (Q.QNN_CONTEXT_ERROR_GET_BINARY_SIZE_FAILED if func == "contextGetBinarySize"
            else Q.QNN_CONTEXT_ERROR_GET_BINARY_FAILED)
    if getattr(context, "deferred", None) is not None:
        context.deferred.build_all()  # graphs of a deferred-init context are part of its binary
    log = getattr(context, "log", None) or NULL_LOGGER
    graphs: list[Graph] = []
    for name, g in list(context.graphs.items()):
        if not isinstance(g, Graph):
            continue
        if not g.finalized:
            raise _err(Q.QNN_CONTEXT_ERROR_NOT_FINALIZED, "QNNEMU-binary-graph-not-finalized", func,
                       f"graph '{name}' is not finalized; context binaries hold finalized graphs "
                       f"only (call graphFinalize first)")
        graphs.append(g)
    sharing = weight_sharing_enabled(context.configs)
    store = _BlobStore()
    try:
        # NULL tensors (absent optional inputs, made by clients such as ONNX Runtime's QNN EP)
        # hold nothing and no node refers to them (absent inputs are stored as null): skipped.
        ctx_tensors = [_tensor_json(t, store, "context") for t in context.tensors.values()
                       if t.type != Q.QNN_TENSOR_TYPE_NULL]
        graphs_json = []
        for g in graphs:
            scope = "context" if sharing else f"graph:{g.name}"
            packing = weights_packing_enabled(g.configs)
            tensors = [_tensor_json(t, store, scope, packing) for t in g.tensors.values()
                       if t.type != Q.QNN_TENSOR_TYPE_NULL]
            nodes = [{"name": n.name, "package": getattr(n, "package", None) or ops.PACKAGE_NAME,
                      "type": n.op_type, "params": [_param_json(p) for p in _node_params(n)],
                      "inputs": [None if i is None else int(i) for i in n.inputs],
                      "outputs": [int(i) for i in n.outputs]} for n in g.nodes]
            graphs_json.append({
                "name": g.name, "configs": _graph_configs_json(g, log), "tensors": tensors,
                "nodes": nodes, "inputs": [t.id for t in g.app_inputs()],
                "outputs": [t.id for t in g.app_outputs()],
                "spill_fill_bytes": int(getattr(g, "spill_fill_bytes", 0) or 0)})
    except _Unencodable as e:
        raise _err(code, "QNNEMU-binary-unserializable", func, f"cannot store {e} in a context binary") from None
    offsets, rel = [], 0
    for raw in store.blobs:
        offsets.append(rel)
        rel = _align(rel + len(raw))
    meta = {
        "format": FORMAT_NAME, "version": FORMAT_VERSION,
        "context": {"configs": _context_configs_json(context.configs, log), "tensors": ctx_tensors},
        "graphs": graphs_json,
        "blobs": [{"offset": off, "size": len(raw), "crc32": zlib.crc32(raw)}
                  for off, raw in zip(offsets, store.blobs)],
    }
    data = bytearray(offsets[-1] + len(store.blobs[-1]) if store.blobs else 0)
    for off, raw in zip(offsets, store.blobs):
        data[off:off + len(raw)] = raw
    model = _device_model(context.device)
    header = Header(FORMAT_VERSION, HEADER_SIZE, 0, FLAG_WEIGHT_SHARING if sharing else 0, 0,
                    tuple(api_version.core_api_version()), (Q.QNN_HTP_API_VERSION_MAJOR, Q.QNN_HTP_API_VERSION_MINOR,
                                                Q.QNN_HTP_API_VERSION_PATCH),
                    int(model.soc_model), int(model.arch), int(model.vtcm_mb), 0, 0, 0, 0, api_version.BUILD_ID,
                    len(graphs))
    return assemble(header, meta, bytes(data))


def assemble(header: Header, meta: dict, data: bytes) -> bytes:
    """Header fields + metadata + data section -> a binary with consistent offsets, sizes and
    CRCs.  ``serialize`` uses it; tools and tests can re-assemble a modified binary with it.
    Only ``format_version``, ``flags``, the API versions, device fields, build id and graph
    count of ``header`` are taken; the rest is computed."""
    meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                            allow_nan=False).encode("ascii")
    meta_off = HEADER_SIZE
    data_off = _align(meta_off + len(meta_bytes))
    total = data_off + len(data)
    out = bytearray(total)
    out[meta_off:meta_off + len(meta_bytes)] = meta_bytes
    out[data_off:total] = data
    payload_crc = zlib.crc32(memoryview(out)[HEADER_SIZE:])
    build = header.build_id.encode("ascii", errors="replace")[:32]
    fields = [MAGIC, header.format_version, HEADER_SIZE, total, header.flags, payload_crc,
              *header.core_api, *header.backend_api, header.soc_model, header.htp_arch, header.vtcm_mb,
              meta_off, len(meta_bytes), data_off, len(data), build, header.graph_count,
              zlib.crc32(meta_bytes), bytes(28), 0]
    out[:HEADER_SIZE] = _HEADER.pack(*fields)
    hcrc = zlib.crc32(memoryview(out)[:_HEADER_CRC_OFFSET])
    out[_HEADER_CRC_OFFSET:HEADER_SIZE] = struct.pack("<I", hcrc)
    return bytes(out)


def reseal(blob: bytes) -> bytes:
    """``blob`` with its metadata, payload and header CRC32s recomputed (for tools that patch
    the data section in place, e.g. binary-section updates; and for tests)."""
    out = bytearray(blob)
    if len(out) < HEADER_SIZE:
        return bytes(out)
    header_size = struct.unpack_from("<I", out, 12)[0]
    total = struct.unpack_from("<Q", out, 16)[0]
    end = min(total, len(out))
    start = min(max(header_size, HEADER_SIZE), end)
    meta_off, meta_size = struct.unpack_from("<QQ", out, 56)
    if meta_off + meta_size <= end:
        struct.pack_into("<I", out, 124, zlib.crc32(memoryview(out)[meta_off:meta_off + meta_size]))
    struct.pack_into("<I", out, 28, zlib.crc32(memoryview(out)[start:end]))
    struct.pack_into("<I", out, _HEADER_CRC_OFFSET, zlib.crc32(memoryview(out)[:_HEADER_CRC_OFFSET]))
    return bytes(out)


# ------------------------------------------------------------------------------ parsing
def _as_view(blob: Any, func: str) -> memoryview:
    if blob is None:
        raise _err(Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-binary-null", func,
                   "binaryBuffer is NULL")
    try:
        view = memoryview(blob).cast("B")
    except (TypeError, ValueError):
        raise _err(Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-binary-null", func,
                   f"binaryBuffer is not a byte buffer ({type(blob).__name__})") from None
    if len(view) == 0:
        raise _err(Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-binary-null", func,
                   "binaryBufferSize is 0")
    return view


def _foreign(view: memoryview, func: str) -> QnnError:
    head = bytes(view[:8])
    return _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-magic", func,
                f"binaryBuffer: not a qnnemu context binary (starts with {head.hex(' ')}, expected "
                f"the magic {MAGIC.decode()!r}); binaries prepared by another backend (for example "
                f"the vendor's libQnnHtp.so) cannot be loaded by qnnemu -- prepare the graphs on "
                f"qnnemu instead")


def parse_header(blob: Any, func: str = "contextCreateFromBinary", *, external_data: bool = False) -> Header:
    """Checks magic, version, sizes and both CRC32s; returns the header.

    ``external_data``: the data section comes from elsewhere (the data provider of
    contextCreateFromBinaryWithCallback): the buffer needs to reach only the end of the
    metadata, and the payload CRC (which covers the data section) is not checked -- the
    metadata CRC is, and the loader checks every blob's CRC."""
    view = _as_view(blob, func)
    n = len(view)
    if bytes(view[:min(n, 8)]) != MAGIC[:min(n, 8)]:
        raise _foreign(view, func)
    if n < 12:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated", func,
                   f"binaryBuffer: {n} bytes is too short for a context binary header "
                   f"({HEADER_SIZE} bytes)")
    version = struct.unpack_from("<I", view, 8)[0]
    if version > FORMAT_VERSION:
        raise _err(Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "QNNEMU-binary-version-future", func,
                   f"binaryBuffer: format version {version} is newer than this qnnemu reads "
                   f"({MIN_FORMAT_VERSION}..{FORMAT_VERSION}); load it with the qnnemu that made it "
                   f"or a newer one")
    if version < MIN_FORMAT_VERSION:
        raise _err(Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "QNNEMU-binary-version-old", func,
                   f"binaryBuffer: format version {version} is older than this qnnemu reads "
                   f"({MIN_FORMAT_VERSION}..{FORMAT_VERSION}); prepare the graphs again")
    if n < HEADER_SIZE:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated", func,
                   f"binaryBuffer: {n} bytes is too short for the {HEADER_SIZE}-byte header")
    f = _HEADER.unpack_from(view, 0)
    hcrc = zlib.crc32(view[:_HEADER_CRC_OFFSET])
    if hcrc != f[-1]:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-header-crc", func,
                   f"binaryBuffer: header CRC32 mismatch (stored 0x{f[-1]:08x}, computed 0x{hcrc:08x}): "
                   f"the header is corrupted")
    (_, version, header_size, total, flags, payload_crc, c0, c1, c2, b0, b1, b2, soc, arch, vtcm,
     meta_off, meta_size, data_off, data_size, build, graph_count, meta_crc, reserved, header_crc) = f
    bad = None
    if header_size != HEADER_SIZE:
        bad = f"header size {header_size} (format version {version} has {HEADER_SIZE})"
    elif total < HEADER_SIZE:
        bad = f"total size {total} is smaller than the header"
    elif flags & ~KNOWN_FLAGS:
        bad = f"unknown flags 0x{flags & ~KNOWN_FLAGS:x}"
    elif any(reserved):
        bad = "reserved header bytes are not zero"
    if bad is None and total > n and not external_data:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated", func,
                   f"binaryBuffer: the binary is {total} bytes but only {n} were given "
                   f"(binaryBufferSize too small or the file was cut)")
    if bad is None:
        if meta_off < header_size or meta_off + meta_size > total:
            bad = f"metadata section [{meta_off}, +{meta_size}) outside the binary ({total} bytes)"
        elif data_off % ALIGN:
            bad = f"data section offset {data_off} is not a multiple of {ALIGN}"
        elif data_off < meta_off + meta_size or data_off + data_size > total:
            bad = f"data section [{data_off}, +{data_size}) overlaps the metadata or leaves the binary"
    if bad is None:
        bad = _device_fields_out_of_range(soc, arch, vtcm)
    if bad is None:
        try:
            build_id = build.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            bad = "build id is not ASCII text"
    if bad is not None:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-header", func,
                   f"binaryBuffer: inconsistent header: {bad}")
    if external_data and meta_off + meta_size > n:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated", func,
                   f"binaryBuffer: the header and metadata take {meta_off + meta_size} bytes but only {n} "
                   f"were given")
    crc = payload_crc if external_data else zlib.crc32(view[header_size:total])
    if crc != payload_crc:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-crc", func,
                   f"binaryBuffer: CRC32 mismatch over bytes [{header_size}, {total}) (stored "
                   f"0x{payload_crc:08x}, computed 0x{crc:08x}): the binary is corrupted")
    mcrc = zlib.crc32(view[meta_off:meta_off + meta_size])
    if mcrc != meta_crc:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-crc", func,
                   f"binaryBuffer: metadata CRC32 mismatch (stored 0x{meta_crc:08x}, computed "
                   f"0x{mcrc:08x}): the binary is corrupted")
    return Header(version, header_size, total, flags, payload_crc, (c0, c1, c2), (b0, b1, b2), soc, arch,
                  vtcm, meta_off, meta_size, data_off, data_size, build_id, graph_count, meta_crc, header_crc)


def _device_fields_out_of_range(soc: int, arch: int, vtcm_mb: int) -> str | None:
    """What is wrong with the header's device fields, or None: the SoC model is 0 or one of the
    SoC table, the arch an HTP arch (a SoC and an arch that disagree are a binary for another
    device, which the compatibility rules handle), the VTCM size at least
    1 MiB and at most the largest VTCM of the table (docs/context-binary.md "Header": serialize
    writes nothing else, so anything else is corruption or a hand-made binary; refused under
    PERMISSIVE too, since PERMISSIVE tolerates another device, not an impossible one)."""
    if soc != Q.QNN_SOC_MODEL_UNKNOWN and soc not in socs.SOCS:
        return (f"soc_model {soc} is neither QNN_SOC_MODEL_UNKNOWN (0) nor a SoC model of the emulator's "
                f"SoC table")
    archs = sorted({*socs.HTP_ARCHS, *socs.ARCH_ONLY})
    if arch not in archs:
        return f"htp_arch {arch} is not an HTP arch ({', '.join(map(str, archs))})"
    largest = max(r.vtcm_mb for r in (*socs.SOCS.values(), *(socs.arch_only(a) for a in archs)))
    if not 1 <= vtcm_mb <= largest:
        return f"vtcm_mb {vtcm_mb} is outside 1..{largest} MiB (the largest VTCM of the SoC table)"
    return None


def _check_text(v: Any, path: str) -> None:
    """Every string (and key) of the metadata is text that UTF-8 can hold: a JSON escape of a
    lone surrogate (\\ud800) gives a Python string no C string can carry (serialize never
    writes one: names come from C strings)."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad(f"{path}: {v!a:.60} is not valid Unicode text (a lone surrogate)") from None
    elif isinstance(v, dict):
        for k, item in v.items():
            _check_text(k, f"{path} key")
            _check_text(item, f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[...]")
    elif isinstance(v, list):
        for i, item in enumerate(v):
            _check_text(item, f"{path}[{i}]")


# --- metadata schema ----------------------------------------------------------------------------
def _obj(v: Any, path: str) -> dict:
    if not isinstance(v, dict):
        raise _Bad(f"{path}: expected an object")
    return v


def _key(obj: dict, key: str, path: str) -> Any:
    if key not in obj:
        raise _Bad(f"{path}: missing '{key}'")
    return obj[key]


def _int(v: Any, path: str, lo: int = 0, hi: int = 0xFFFFFFFF) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _Bad(f"{path}: expected an integer in [{lo}, {hi}], got {v!r:.60}")
    return v


def _str(v: Any, path: str, allow_empty: bool = False) -> str:
    if not isinstance(v, str) or (not v and not allow_empty):
        raise _Bad(f"{path}: expected a non-empty string, got {v!r:.60}")
    return v


def _list(v: Any, path: str) -> list:
    if not isinstance(v, list):
        raise _Bad(f"{path}: expected a list")
    return v


def _quant_from_json(q: Any, dtype: int, dims: tuple[int, ...], path: str) -> QuantSpec | None:
    if q is None:
        return None
    q = _obj(q, path)
    enc = _int(_key(q, "encoding", path), f"{path}.encoding", 0, 0x7FFFFFFF)
    scale = _dec(_key(q, "scale", path), f"{path}.scale")
    offset = _dec(_key(q, "offset", path), f"{path}.offset")
    axis = q.get("axis")
    bitwidth = q.get("bitwidth")
    block_scales = _dec(q.get("block_scales"), f"{path}.block_scales")
    if axis is not None:
        axis = _int(axis, f"{path}.axis", 0, MAX_RANK)
    if bitwidth is not None:
        bitwidth = _int(bitwidth, f"{path}.bitwidth", 1, 64)
    if enc in _PER_TENSOR_ENCODINGS:
        if (not isinstance(scale, (float, np.floating)) or isinstance(offset, bool)
                or not isinstance(offset, (int, np.integer)) or axis is not None or block_scales is not None):
            raise _Bad(f"{path}: per-tensor encoding {enc} needs a float scale and an integer offset")
    elif enc in _AXIS_ENCODINGS or enc == _BLOCKWISE:
        if axis is None:
            raise _Bad(f"{path}: encoding {enc} needs an axis")
        if not (isinstance(scale, np.ndarray) and isinstance(offset, np.ndarray) and scale.ndim == 1
                and offset.shape == scale.shape and scale.dtype.kind == "f" and offset.dtype.kind in "iu"):
            raise _Bad(f"{path}: encoding {enc} needs 1-D float scales and integer offsets of one length")
        # QNN: one (scale, offset) per index of the axis (numScaleOffsets == dimensions[axis]).
        if axis >= len(dims) or scale.shape[0] != dims[axis]:
            raise _Bad(f"{path}: {scale.shape[0]} scale/offset pairs for axis {axis} of dimensions "
                       f"{list(dims)}")
        if enc == _BLOCKWISE:
            if not (isinstance(block_scales, np.ndarray) and block_scales.ndim == 2
                    and block_scales.dtype in (np.uint8, np.uint16) and block_scales.shape[0] == dims[axis]):
                raise _Bad(f"{path}: blockwise expansion needs 2-D uint8/uint16 block scales, one row "
                           f"per index of axis {axis}")
        elif block_scales is not None:
            raise _Bad(f"{path}: only blockwise expansion has block scales")
    else:
        raise _Bad(f"{path}: quantization encoding {enc} is not one qnnemu stores")
    # Offsets are int32_t in every Qnn_QuantizeParams_t encoding: what the ABI gives the loader and
    # what the System library's binary info describes must be representable there.
    offsets = np.atleast_1d(np.asarray(offset))
    if offsets.size and (int(offsets.min()) < _INT32_MIN or int(offsets.max()) > _INT32_MAX):
        raise _Bad(f"{path}.offset: quantization offsets must fit int32_t, got values in "
                   f"[{int(offsets.min())}, {int(offsets.max())}]")
    return QuantSpec(enc, scale, offset, axis, bitwidth, block_scales)


def _tensor_from_json(t: Any, path: str, n_blobs: int, version: int = FORMAT_VERSION) -> TensorInfo:
    t = _obj(t, path)
    tid = _int(_key(t, "id", path), f"{path}.id", 1, MAX_ID)
    name = _str(_key(t, "name", path), f"{path}.name")
    ttype = _int(_key(t, "type", path), f"{path}.type", 0, 0x7FFFFFFF)
    if ttype not in SUPPORTED_TYPES or ttype == Q.QNN_TENSOR_TYPE_NULL:
        raise _Bad(f"{path}.type: tensor type {ttype} cannot be stored")
    dtype = _int(_key(t, "dtype", path), f"{path}.dtype", 0, 0x7FFFFFFF)
    if not dtypes.is_known(dtype):
        raise _Bad(f"{path}.dtype: {dtypes.name(dtype)}")
    dims_v = _list(_key(t, "dims", path), f"{path}.dims")
    if len(dims_v) > MAX_RANK:
        raise _Bad(f"{path}.dims: rank {len(dims_v)} exceeds {MAX_RANK}")
    dims = tuple(_int(d, f"{path}.dims[{i}]", 1, MAX_DIM) for i, d in enumerate(dims_v))
    if math.prod(dims) * dtypes.itemsize(dtype) > MAX_TENSOR_BYTES:
        raise _Bad(f"{path}.dims: {list(dims)} of {dtypes.name(dtype)} is larger than {MAX_TENSOR_BYTES} bytes")
    quant = _quant_from_json(t.get("quant"), dtype, dims, f"{path}.quant")
    blob = t.get("blob")
    if blob is not None:
        blob = _int(blob, f"{path}.blob", 0, max(n_blobs - 1, 0))
        if n_blobs == 0:
            raise _Bad(f"{path}.blob: the binary has no data blobs")
    if (ttype in (Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC)) != (blob is not None):
        raise _Bad(f"{path}: STATIC and UPDATEABLE_STATIC tensors (and only they) have a data blob")
    data_format = _int(t.get("data_format", Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER), f"{path}.data_format", 0, 0x7FFFFFFF)
    if data_format not in (Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT):
        raise _Bad(f"{path}.data_format: {data_format} is not a data format qnnemu stores")
    packing = _packing_from_json(t, path, version, ttype, dtype, data_format)
    return TensorInfo(tid, name, ttype, dtype, dims, quant, blob, data_format, packing=packing)


def _packing_from_json(t: dict, path: str, version: int, ttype: int, dtype: int, data_format: int) -> str | None:
    """A tensor's optional "packing" marker: only in format version 2 and later, only on STATIC
    flat-buffer tensors of the 8-bit types of that packing (docs/context-binary.md "Packed
    weights")."""
    if "packing" not in t:
        return None
    name = t["packing"]
    if version < PACKING_FORMAT_VERSION:
        raise _Bad(f"{path}.packing: format version {version} has no packed tensors (from version "
                   f"{PACKING_FORMAT_VERSION} on)")
    p = PACKINGS.get(name) if isinstance(name, str) else None
    if p is None:
        raise _Bad(f"{path}.packing: expected one of {sorted(PACKINGS)}, got {name!r:.40}")
    if ttype != Q.QNN_TENSOR_TYPE_STATIC or data_format != Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER:
        raise _Bad(f"{path}.packing: only STATIC flat-buffer tensors are packed (type {ttype}, "
                   f"data format {data_format})")
    if dtype not in p.dtypes:
        raise _Bad(f"{path}.packing: '{p.name}' packs {sorted(dtypes.name(d) for d in p.dtypes)}, "
                   f"not {dtypes.name(dtype)}")
    return p.name


def _param_from_json(p: Any, path: str) -> ParamDesc:
    p = _obj(p, path)
    name = _str(_key(p, "name", path), f"{path}.name")
    kind = _key(p, "kind", path)
    dtype = _int(_key(p, "dtype", path), f"{path}.dtype", 0, 0x7FFFFFFF)
    value = _dec(_key(p, "value", path), f"{path}.value")
    if kind == "scalar":
        if isinstance(value, np.generic):
            value = value.item()
        if dtype == Q.QNN_DATATYPE_STRING:
            if not isinstance(value, str):
                raise _Bad(f"{path}.value: a QNN_DATATYPE_STRING parameter needs a string")
        elif not dtypes.is_known(dtype):
            raise _Bad(f"{path}.dtype: {dtypes.name(dtype)} is not a scalar data type")
        elif not isinstance(value, (bool, int, float)):
            raise _Bad(f"{path}.value: a {dtypes.name(dtype)} parameter needs a number")
        elif isinstance(value, int) and dtypes.numpy_dtype(dtype).kind in "iu":
            info = np.iinfo(dtypes.numpy_dtype(dtype))
            if not info.min <= value <= info.max:
                raise _Bad(f"{path}.value: {value} does not fit {dtypes.name(dtype)}")
        return ParamDesc(name, "scalar", dtype, value)
    if kind == "tensor":
        if not isinstance(value, np.ndarray):
            raise _Bad(f"{path}.value: a tensor parameter needs an array")
        # Fixed-point tensor params are checked by their storage type's category only.
        plain = dtype
        if dtype in dtypes.FIXED_POINT_TYPES:
            plain = next((d for d in sorted(dtypes._TABLE) if d not in dtypes.FIXED_POINT_TYPES
                          and dtypes.numpy_dtype(d) == dtypes.numpy_dtype(dtype)
                          and type_category(d) == type_category(dtype)), dtype)
        if not dtypes.is_known(plain) or dtypes.numpy_dtype(plain) != value.dtype:
            raise _Bad(f"{path}: tensor parameter of {dtypes.name(dtype)} holds a {value.dtype} array")
        data = value.tobytes()
        desc = TensorDesc(1, 0, name, Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, plain,
                          RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED),
                          tuple(int(n) for n in value.shape), Q.QNN_TENSORMEMTYPE_RAW, data, len(data), True)
        return ParamDesc(name, "tensor", plain, None, desc)
    raise _Bad(f"{path}.kind: expected 'scalar' or 'tensor', got {kind!r:.40}")


def _node_from_json(n: Any, path: str, known: dict[int, TensorInfo]) -> NodeInfo:
    n = _obj(n, path)
    name = _str(_key(n, "name", path), f"{path}.name")
    package = _str(_key(n, "package", path), f"{path}.package", allow_empty=True)
    type_name = _str(_key(n, "type", path), f"{path}.type")
    params = [_param_from_json(p, f"{path}.params[{i}]")
              for i, p in enumerate(_list(_key(n, "params", path), f"{path}.params"))]
    inputs: list[int | None] = []
    for i, tid in enumerate(_list(_key(n, "inputs", path), f"{path}.inputs")):
        if tid is not None:
            tid = _int(tid, f"{path}.inputs[{i}]", 1, MAX_ID)
            if tid not in known:
                raise _Bad(f"{path}.inputs[{i}]: tensor id {tid} is not a tensor of this graph or context")
        inputs.append(tid)
    outputs = []
    for i, tid in enumerate(_list(_key(n, "outputs", path), f"{path}.outputs")):
        tid = _int(tid, f"{path}.outputs[{i}]", 1, MAX_ID)
        if tid not in known:
            raise _Bad(f"{path}.outputs[{i}]: tensor id {tid} is not a tensor of this graph or context")
        outputs.append(tid)
    return NodeInfo(name, package, type_name, params, inputs, outputs)


def _configs_from_json(c: Any, path: str) -> dict:
    configs = _obj(_dec(c, path), path)
    # HTP custom configs are stored as {"<option name>": {"option": n, "<member>": value}}: the
    # loader and the graphs read them as objects of objects.
    htp = configs.get("htp", {})
    if not (isinstance(htp, dict) and all(isinstance(v, dict) for v in htp.values())):
        raise _Bad(f"{path}.htp: expected an object of HTP config objects, got {htp!r:.60}")
    return configs


def _metadata(view: memoryview, h: Header, func: str, check_abort=None) -> BinaryInfo:
    try:
        text = bytes(view[h.metadata_offset:h.metadata_offset + h.metadata_size]).decode("utf-8")
        meta = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-metadata", func,
                   f"binaryBuffer: the metadata section is not valid JSON ({type(e).__name__}: "
                   f"{str(e)[:120]})") from None
    try:
        _check_text(meta, "metadata")
        info = _schema(meta, h, check_abort, func)
    except _Bad as e:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-metadata", func,
                   f"binaryBuffer: inconsistent metadata: {e}") from None
    return info


def _schema(meta: Any, h: Header, check_abort, func: str) -> BinaryInfo:
    meta = _obj(meta, "metadata")
    if _key(meta, "format", "metadata") != FORMAT_NAME:
        raise _Bad(f"metadata.format: expected {FORMAT_NAME!r}")
    if _key(meta, "version", "metadata") != h.format_version:
        raise _Bad("metadata.version differs from the header's format version")
    blobs = []
    for i, b in enumerate(_list(_key(meta, "blobs", "metadata"), "metadata.blobs")):
        p = f"blobs[{i}]"
        b = _obj(b, p)
        off = _int(_key(b, "offset", p), f"{p}.offset", 0, h.data_size)
        size = _int(_key(b, "size", p), f"{p}.size", 0, h.data_size)
        crc = _int(_key(b, "crc32", p), f"{p}.crc32")
        if off % ALIGN:
            raise _Bad(f"{p}.offset: {off} is not a multiple of {ALIGN}")
        if off + size > h.data_size:
            raise _Bad(f"{p}: [{off}, +{size}) leaves the data section ({h.data_size} bytes)")
        blobs.append(BlobInfo(off, size, crc))
    ctx = _obj(_key(meta, "context", "metadata"), "context")
    ctx_configs = _configs_from_json(ctx.get("configs", {}), "context.configs")
    ids: set[int] = set()
    ctx_tensors: list[TensorInfo] = []
    ctx_names: set[str] = set()

    def check_tensor(t: TensorInfo, path: str, names: set[str]) -> None:
        if t.id in ids:
            raise _Bad(f"{path}.id: tensor id {t.id} is used twice")
        if t.name in names or t.name in ctx_names:
            raise _Bad(f"{path}.name: tensor name '{t.name}' is used twice")
        if t.blob is not None and blobs[t.blob].size != t.stored_nbytes:
            raise _Bad(f"{path}: dimensions {list(t.dims)} of {dtypes.name(t.dtype)} need {t.stored_nbytes} "
                       f"bytes{' packed' if t.packing else ''}, its blob {t.blob} holds {blobs[t.blob].size}")
        ids.add(t.id)
        names.add(t.name)

    for i, t in enumerate(_list(_key(ctx, "tensors", "context"), "context.tensors")):
        info = _tensor_from_json(t, f"context.tensors[{i}]", len(blobs), h.format_version)
        check_tensor(info, f"context.tensors[{i}]", ctx_names)
        ctx_tensors.append(info)
    graphs: list[GraphInfo] = []
    graph_names: set[str] = set()
    graph_list = _list(_key(meta, "graphs", "metadata"), "metadata.graphs")
    if len(graph_list) != h.graph_count:
        raise _Bad(f"metadata.graphs: {len(graph_list)} graphs, the header says {h.graph_count}")
    for gi, g in enumerate(graph_list):
        _abort(check_abort, func)
        p = f"graphs[{gi}]"
        g = _obj(g, p)
        name = _str(_key(g, "name", p), f"{p}.name")
        if name in graph_names:
            raise _Bad(f"{p}.name: graph name '{name}' is used twice")
        graph_names.add(name)
        configs = _configs_from_json(g.get("configs", {}), f"{p}.configs")
        names: set[str] = set()
        tensors = []
        for i, t in enumerate(_list(_key(g, "tensors", p), f"{p}.tensors")):
            info = _tensor_from_json(t, f"{p}.tensors[{i}]", len(blobs), h.format_version)
            check_tensor(info, f"{p}.tensors[{i}]", names)
            tensors.append(info)
        known = {t.id: t for t in itertools.chain(ctx_tensors, tensors)}
        nodes = [_node_from_json(n, f"{p}.nodes[{i}]", known)
                 for i, n in enumerate(_list(_key(g, "nodes", p), f"{p}.nodes"))]
        inputs = [t for t in tensors if t.type in APP_INPUT_TYPES]
        outputs = [t for t in tensors if t.type in APP_OUTPUT_TYPES]
        for key, want in (("inputs", inputs), ("outputs", outputs)):
            listed = _list(_key(g, key, p), f"{p}.{key}")
            if listed != [t.id for t in want]:
                raise _Bad(f"{p}.{key}: {listed!r:.80} differs from the graph's "
                           f"{'APP_WRITE' if key == 'inputs' else 'APP_READ'} tensors {[t.id for t in want]}")
        spill_fill = _int(g.get("spill_fill_bytes", 0), f"{p}.spill_fill_bytes", 0, 2**64 - 1)
        graphs.append(GraphInfo(name, configs, tensors, nodes, inputs, outputs, spill_fill))
    return BinaryInfo(h, ctx_configs, ctx_tensors, graphs, blobs)


def _abort(check_abort, func: str) -> None:
    if check_abort is not None and check_abort():
        raise _err(Q.QNN_CONTEXT_ERROR_ABORTED, "QNNEMU-binary-aborted", func,
                   "loading the context binary was cancelled")


def _guard(func: str, body: Callable[[], Any]) -> Any:
    """Runs ``body``; anything but a QnnError becomes one (a loader never raises anything else)."""
    try:
        return body()
    except QnnError:
        raise
    except MemoryError:
        raise _err(Q.QNN_CONTEXT_ERROR_MEM_ALLOC, "QNNEMU-binary-mem-alloc", func,
                   "out of memory while reading the context binary") from None
    except Exception as e:  # noqa: BLE001 - a corrupted binary must never crash the caller
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-internal", func,
                   f"the context binary could not be read ({type(e).__name__}: {str(e)[:200]})") from e


def inspect(blob: Any, *, func: str = "contextValidateBinary", check_abort=None) -> BinaryInfo:
    """Header, graphs and tensors of a binary, fully checked, without building anything."""
    def body():
        view = _as_view(blob, func)
        h = parse_header(view, func)
        _abort(check_abort, func)
        return _metadata(view, h, func, check_abort)
    return _guard(func, body)


# ------------------------------------------------------------------------------ compatibility
def compatibility_mode(value: Any, func: str = "contextCreateFromBinary") -> str:
    """"strict"/"permissive" from a string or a QnnContext_BinaryCompatibilityType_t value."""
    if value in (STRICT, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT):
        return STRICT
    if value in (PERMISSIVE, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE, None):
        return PERMISSIVE
    raise _err(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-binary-compatibility", func,
               f"binaryCompatibilityType {value!r} is neither QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE "
               f"nor QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT")


def _soc_name(soc: int) -> str:
    return Q.enum("QNN_SOC_MODEL_").get(soc, f"SoC model {soc}").replace("QNN_SOC_MODEL_", "")


def check_compatibility(h: Header, device, mode: str, log=None, func: str = "contextCreateFromBinary") -> None:
    """The compatibility rules (docs/context-binary.md "Compatibility")."""
    log = log or NULL_LOGGER
    ours = api_version.core_api_version()
    if h.core_api[0] != ours[0]:
        raise _err(Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "QNNEMU-binary-api-version", func,
                   f"binaryBuffer: made for QNN core API {'.'.join(map(str, h.core_api))}, this backend "
                   f"implements {'.'.join(map(str, ours))} (major versions differ)")
    reasons = []
    if h.format_version < FORMAT_VERSION:
        reasons.append(("QNNEMU-binary-suboptimal-version",
                        f"format version {h.format_version} is older than the current {FORMAT_VERSION}"))
    model = _device_model(device)
    unknown = Q.QNN_SOC_MODEL_UNKNOWN
    soc_differs = h.soc_model != unknown and model.soc_model != unknown and h.soc_model != model.soc_model
    if soc_differs or h.htp_arch != model.arch:
        reasons.append(("QNNEMU-binary-suboptimal-device",
                        f"prepared for {_soc_name(h.soc_model)} (HTP v{h.htp_arch}), the device is "
                        f"{_soc_name(model.soc_model)} (HTP v{model.arch})"))
    if h.build_id != api_version.BUILD_ID:
        log.info(f"{func}: binary made by qnnemu build {h.build_id or '(none)'}, this is {api_version.BUILD_ID}")
    for rule, why in reasons:
        if mode == STRICT:
            raise _err(Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL, rule, func,
                       f"binaryBuffer: suboptimal binary under QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT: "
                       f"{why} (PERMISSIVE loads it)")
        rules.warn("QNNEMU-binary-suboptimal-loaded", func, "binaryBuffer",
                   f"{why}; loaded anyway (QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE; STRICT refuses it "
                   f"with {rule})", logger=log)


def validate(blob: Any, device=None, compatibility: Any = PERMISSIVE, *, logger=None,
             func: str = "contextValidateBinary", backend=None, configs: dict | None = None,
             enable_graphs=None) -> BinaryInfo:
    """``contextValidateBinary``: every check ``deserialize`` makes.  The header, the metadata and
    the compatibility rules; then, with ``backend``, the rebuild's own checks -- every (enabled)
    tensor, node and graph through the creation / graphAddNode / graphFinalize rules (an unknown
    op type, a node its op refuses, an output nothing writes) -- on a context no one sees, which
    is freed before returning: nothing is left behind, and a binary passes exactly when
    ``deserialize`` with the same arguments would load it."""
    mode = compatibility_mode(compatibility, func)
    info = inspect(blob, func=func)
    check_compatibility(info.header, device, mode, logger, func)
    if backend is not None:
        # persistent: static tensors are views of the caller's buffer (no copy), valid while
        # this call runs -- the context is gone when it returns.
        ctx = deserialize(blob, backend, device, compatibility=mode, logger=NULL_LOGGER, configs=configs,
                          enable_graphs=enable_graphs, func=func, persistent=True)
        ctx.free()
    return info


# ------------------------------------------------------------------------------ deserialize
def _raw_quant(q: QuantSpec | None) -> RawQuant:
    if q is None:
        return RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)
    r = RawQuant(Q.QNN_DEFINITION_DEFINED, q.encoding, axis=q.axis or 0, bitwidth=q.bitwidth or 0)
    if q.encoding in _PER_TENSOR_ENCODINGS:
        r.scale, r.offset = q.scale, q.offset
    else:
        r.scales, r.offsets = q.scale, q.offset
        if q.block_scales is not None:
            r.block_scales = q.block_scales
            r.blocks_per_axis = int(q.block_scales.shape[1])
            r.block_scale_storage = (Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8
                                     if q.block_scales.dtype == np.uint8
                                     else Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16)
            r.block_scale_bitwidth = 8 * q.block_scales.dtype.itemsize
    return r


def _tensor_desc(t: TensorInfo, data: memoryview | None) -> TensorDesc:
    return TensorDesc(2, t.id, t.name, t.type, t.data_format, t.dtype, _raw_quant(t.quant), t.dims,
                      t.mem_type, data, len(data) if data is not None else 0, data is not None)


def _ref_desc(t: TensorInfo | None) -> TensorDesc:
    """How a node refers to a created tensor (id, dimensions, data type), or a NULL tensor."""
    if t is None:
        return TensorDesc(2, 0, None, Q.QNN_TENSOR_TYPE_NULL, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
                          Q.QNN_DATATYPE_FLOAT_32, RawQuant(0, 0), (), Q.QNN_TENSORMEMTYPE_RAW)
    return TensorDesc(2, t.id, t.name, t.type, t.data_format, t.dtype, _raw_quant(None), t.dims, t.mem_type)


def _merge_configs(stored: dict, runtime: dict | None) -> dict:
    out = {k: v for k, v in stored.items()}
    out["htp"] = dict(stored.get("htp", {}))
    for k, v in (runtime or {}).items():
        if k == "htp" and isinstance(v, dict):
            out["htp"].update(v)
        else:
            out[k] = v
    if not out["htp"]:
        del out["htp"]
    return out


def deserialize(blob: Any, backend, device, *, compatibility: Any = PERMISSIVE, logger=None,
                check_abort: Callable[[], Any] | None = None, configs: dict | None = None,
                on_graph: Callable[[str, int], None] | None = None, enable_graphs=None,
                func: str = "contextCreateFromBinary", data_source: Callable[[int, int], Any] | None = None,
                persistent: bool = False, defer_graphs: bool = False,
                on_context: Callable[[Any], None] | None = None):
    """A new Context rebuilt from ``blob`` (not registered with ``backend``: the caller makes its
    handle, or does so in ``on_context``).  ``configs``: load-time context configs, merged over
    the stored ones.
    ``check_abort()`` is called between sections and graphs; a truthy result (or a QnnError it
    raises) cancels loading with nothing left behind.  ``on_graph(name, handle)`` is called after
    each graph is finalized (per-graph notifications).  ``enable_graphs``
    (QNN_CONTEXT_CONFIG_ENABLE_GRAPHS): names of the graphs to build, None for all.
    ``data_source(offset, size)``: the data section comes from it instead of ``blob`` (the DMA
    data provider of contextCreateFromBinaryWithCallback): called once with the section's offset
    in the binary and its size, it returns a buffer of at least ``size`` bytes, used in place;
    ``blob`` then needs only the header and metadata, and every blob's CRC-32 is checked.
    ``persistent`` (QNN_CONTEXT_CONFIG_PERSISTENT_BINARY): ``blob`` stays valid until the context
    is freed, so static tensors are views of it instead of a copy.
    ``defer_graphs`` (QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT): everything is checked, but a
    graph is built at its first ``graphRetrieve`` (``Context.deferred``) or by contextFinalize.
    ``on_context(ctx)`` is called once the Context object exists, before any graph is built (a
    caller that must hand out the context handle with the graph notifications registers it
    there; on failure the context is freed and the caller releases that handle)."""
    log = logger or NULL_LOGGER
    mode = compatibility_mode(compatibility, func)

    def body():
        view = _as_view(blob, func)
        h = parse_header(view, func, external_data=data_source is not None)
        _abort(check_abort, func)
        info = _metadata(view, h, func, check_abort)
        check_compatibility(h, device, mode, log, func)
        # New tensors get ids after every stored one (also those of graphs not enabled).
        next_id = 1 + max((t.id for t in itertools.chain(
            info.context_tensors, *(g.tensors for g in info.graphs))), default=0)
        if enable_graphs is not None:
            wanted = list(enable_graphs)
            missing = [n for n in wanted if info.graph(n) is None]
            if missing:
                raise _err(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-binary-enable-graphs", func,
                           f"config enableGraphs: {missing} not in the binary (graphs: {info.graph_names})")
            info.graphs = [g for g in info.graphs if g.name in wanted]
        _abort(check_abort, func)
        if data_source is not None:
            data = _external_data(data_source, h, info, func)
        else:
            # One copy of the data section when the caller's buffer may go away; static tensors
            # are read-only views into it (shared blobs stay shared in memory).
            section = view[h.data_offset:h.data_offset + h.data_size]
            data = memoryview(section if isinstance(blob, bytes) or persistent else bytes(section))
        _abort(check_abort, func)
        ctx = Context(backend, device, log, _merge_configs(info.context_configs, configs))
        try:
            if on_context is not None:
                on_context(ctx)
            _build_context_tensors(ctx, info, data, func)
            ctx.reserve_ids(next_id)
            deferred = _Deferred(ctx, info, data, func, log)
            if defer_graphs:
                ctx.deferred = deferred
                log.info(f"{func}: {len(info.graphs)} graph(s) checked; QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT: "
                         f"each is built at its first graphRetrieve (or by contextFinalize)")
            else:
                for g in info.graphs:
                    _abort(check_abort, func)
                    graph = deferred.build(g.name)
                    if on_graph is not None:
                        on_graph(g.name, graph.handle)
                _abort(check_abort, func)
            log.info(f"{func}: loaded {len(info.graphs)} graph(s) "
                     f"({', '.join(repr(g.name) for g in info.graphs) or 'none'}), {h.total_size} bytes, "
                     f"format version {h.format_version}")
        except BaseException:
            ctx.free()
            raise
        return ctx
    return _guard(func, body)


def _external_data(data_source, h: Header, info: BinaryInfo, func: str) -> memoryview:
    """The data section from ``data_source``, every blob's CRC-32 checked."""
    if h.data_size == 0:
        return memoryview(b"")
    buf = data_source(h.data_offset, h.data_size)
    data = memoryview(buf).cast("B")
    if len(data) < h.data_size:
        raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated", func,
                   f"the data provider gave {len(data)} bytes for the {h.data_size}-byte data section")
    data = data[:h.data_size]
    for i, b in enumerate(info.blobs):
        crc = zlib.crc32(data[b.offset:b.offset + b.size])
        if crc != b.crc32:
            raise _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-crc", func,
                       f"data section from the data provider: blob {i} [{b.offset}, +{b.size}) CRC32 mismatch "
                       f"(stored 0x{b.crc32:08x}, computed 0x{crc:08x}): wrong or corrupted data")
    return data


class _Deferred:
    """Builds the graphs of a checked binary into ``ctx`` by name (each at most once)."""

    def __init__(self, ctx, info: BinaryInfo, data: memoryview, func: str, log):
        self.ctx = ctx
        self.info = info
        self.data = data
        self.func = func
        self.log = log

    @property
    def pending(self) -> list[str]:
        return [g.name for g in self.info.graphs if g.name not in self.ctx.graphs]

    def build(self, name: str) -> Graph | None:
        """Graph ``name`` (built now if needed); None if the binary has no such (enabled) graph."""
        if name in self.ctx.graphs:
            return self.ctx.graphs[name]
        g = self.info.graph(name)
        if g is None:
            return None
        graph = _build_graph(self.ctx, self.info, g, self.data, self.func)
        # Graphs keep the binary's order whatever order they are retrieved in (serialize writes
        # them in context order: the same bytes again).
        order = {n: i for i, n in enumerate(gi.name for gi in self.info.graphs)}
        graphs = sorted(self.ctx.graphs.items(), key=lambda kv: order.get(kv[0], len(order)))
        self.ctx.graphs.clear()
        self.ctx.graphs.update(graphs)
        if self.ctx.deferred is self and not self.pending:
            self.ctx.deferred = None  # every graph is built: nothing deferred any more
        return graph

    def build_all(self) -> None:
        for name in self.pending:
            self.build(name)


def _graph_error(func: str, where: str, e: QnnError) -> QnnError:
    detail = e.detail[len(func) + 2:] if e.detail.startswith(f"{func}: ") else e.detail
    if detail.startswith(f"{where}"):
        detail = detail[len(where):].lstrip(".: ")
    return _err(Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-graph", func,
                f"binaryBuffer: {where}: {detail} [{e.rule}]")


def _make_tensor(t: TensorInfo, info: BinaryInfo, data: memoryview, func: str, where: str) -> Tensor:
    blob = None
    if t.blob is not None:
        b = info.blobs[t.blob]
        blob = data[b.offset:b.offset + b.size]
        if t.packing:
            # The exact original codes, unpacked once per (blob, packing, count): tensors sharing
            # a packed blob share the unpacked array too.
            count = math.prod(t.dims)
            key = (t.blob, t.packing, count)
            if key not in info.unpacked:
                info.unpacked[key] = unpack_codes(blob, count, PACKINGS[t.packing])
            blob = memoryview(info.unpacked[key])
    d = _tensor_desc(t, blob)
    try:
        quant, static = validate_desc(d, func, where)
    except QnnError as e:
        raise _graph_error(func, where, e) from None
    return from_desc(d, t.id, quant, static)


def _build_context_tensors(ctx, info: BinaryInfo, data: memoryview, func: str) -> None:
    for t in info.context_tensors:
        tensor = _make_tensor(t, info, data, func, f"context tensor '{t.name}'")
        ctx.tensors[tensor.id] = tensor
        ctx.tensor_names[tensor.name] = tensor.id


def prepared_device(h: Header) -> DeviceModel:
    """The device a binary was prepared for, from its header: its SoC when it records one,
    else its arch; the recorded VTCM size either way."""
    unknown = Q.QNN_SOC_MODEL_UNKNOWN
    try:
        model = model_from_configs(h.soc_model if h.soc_model != unknown else None,
                                   h.htp_arch if h.soc_model == unknown else None, None)
    except QnnError:  # a SoC/arch this emulator has no row for: the default device's numbers
        model = DeviceModel()
    if h.vtcm_mb and h.vtcm_mb != model.vtcm_mb:
        model = dataclasses.replace(model, vtcm_mb=int(h.vtcm_mb), vtcm_bytes=int(h.vtcm_mb) << 20)
    return model


def _build_graph(ctx, info: BinaryInfo, g: GraphInfo, data: memoryview, func: str) -> Graph:
    """Graph ``g`` rebuilt through the creation / graphAddNode / graphFinalize rules.  A graph
    that fails is released again."""
    where = f"graph '{g.name}'"
    try:
        graph = ctx.new_graph(g.name)
    except QnnError as e:
        raise _graph_error(func, where, e) from None
    try:
        graph.configs = g.configs
        # The HTP plan is the one made at prepare, for the device the binary records (a binary
        # loaded on another SoC under PERMISSIVE is not re-planned for it).
        graph.prepared_for = prepared_device(info.header)
        by_id = {t.id: t for t in info.context_tensors}
        for t in g.tensors:
            tensor = _make_tensor(t, info, data, func, f"{where}: tensor '{t.name}'")
            graph.tensors[tensor.id] = tensor
            graph.by_name[tensor.name] = tensor.id
            by_id[t.id] = t
        for n in g.nodes:
            cfg = OpConfigDesc(1, n.name, n.package, n.type_name, n.params,
                               [_ref_desc(None if i is None else by_id[i]) for i in n.inputs],
                               [_ref_desc(by_id[i]) for i in n.outputs])
            try:
                graph.add_node(cfg, report=False)   # its warnings were logged when it was built
            except QnnError as e:
                raise _graph_error(func, f"{where}: node '{n.name}' ({n.type_name})", e) from None
        try:
            graph.finalize()
        except QnnError as e:
            raise _graph_error(func, where, e) from None
        # The recorded size stays authoritative (finalize re-planned for ``prepared_for``, which
        # gives the same plan unless the cost model changed since the binary was made).
        graph.spill_fill_bytes = g.spill_fill_bytes
    except BaseException:
        ctx.discard_graph(g.name)
        raise
    return graph


__all__ = ["MAGIC", "FORMAT_VERSION", "MIN_FORMAT_VERSION", "HEADER_SIZE", "ALIGN", "STRICT", "PERMISSIVE",
           "Header", "TensorInfo", "NodeInfo", "GraphInfo", "BlobInfo", "BinaryInfo",
           "serialize", "assemble", "reseal", "parse_header", "inspect", "validate", "deserialize",
           "compatibility_mode", "check_compatibility", "weight_sharing_enabled", "weights_packing_enabled",
           "Packing", "PACKINGS", "PACKING_FORMAT_VERSION", "packing_of", "pack_codes", "unpack_codes"]
