"""The context binary's JSON metadata section (docs/context-binary.md "Metadata"): the records a
binary describes (``TensorInfo``, ``NodeInfo``, ``GraphInfo``, ``BlobInfo``, ``BinaryInfo``), the
encoding of values and configs to JSON and back, and the schema check of a metadata section
(``inspect``: every field typed and bounded before anything is built).
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...headers import Q
from ...htp import packing as weights_packing
from ...htp.packing import PACKINGS, pack_codes
from ...location import Location
from ...ops.base import Param, QuantSpec, type_category
from ...rules import error
from ...spec import dtypes
from ..graph import Graph, ParamDesc
from ..tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES, SUPPORTED_TYPES, RawQuant, Tensor, TensorDesc
from . import plan_record
from .format import (
    _INT32_MAX,
    _INT32_MIN,
    ALIGN,
    DATA_ALIGN,
    FORMAT_NAME,
    FORMAT_VERSION,
    MAX_DIM,
    MAX_ID,
    MAX_RANK,
    MAX_TENSOR_BYTES,
    PACKING_FORMAT_VERSION,
    PLAN_FORMAT_VERSION,
    Header,
    _abort,
    _as_view,
    _Bad,
    _guard,
    _Unencodable,
    parse_header,
)

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
    plan: Any = None                   # the recorded PreparedPlan (format version 3), None before

    @property
    def static_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors if t.blob is not None)


@dataclass(frozen=True)
class BlobInfo:
    offset: int                         # relative to the data section (a multiple of 64)
    size: int
    crc32: int
    reserved: int = 0                   # bytes its prepared format takes (>= size; version 3), 0: size


@dataclass(frozen=True)
class DataSection:
    """One data section (format version 3: the shared weights and the graphs' own weights are
    separate sections, each on a 4 KiB page; one section before version 3)."""
    name: str                           # "shared" or "weights"
    offset: int                         # relative to the data section start (a multiple of 4096)
    size: int


@dataclass
class BinaryInfo:
    """What ``inspect`` learns from a binary without building anything."""

    header: Header
    context_configs: dict
    context_tensors: list[TensorInfo]
    graphs: list[GraphInfo]
    blobs: list[BlobInfo]
    sections: list[DataSection] = field(default_factory=list)
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

    def section_of(self, blob: BlobInfo) -> int:
        """The index of the data section holding ``blob``."""
        return next(i for i, s in enumerate(self.sections)
                    if s.offset <= blob.offset and blob.offset + blob.size <= s.offset + s.size)


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
    if packed is not None and t.data is not None:   # (packing_of only packs tensors with data)
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
    if "priority" in configs:
        # A Qnn_Priority_t: an integer a C enum holds (whether the HTP has a thread priority
        # for it is the graph rebuild's rule, QNNEMU-priority-value).
        _int(configs["priority"], f"{path}.priority", -2**31, 2**32 - 1)
    return configs


def _metadata(view: memoryview, h: Header, func: str, check_abort=None) -> BinaryInfo:
    try:
        text = bytes(view[h.metadata_offset:h.metadata_offset + h.metadata_size]).decode("utf-8")
        meta = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise error(Location(func), "QNNEMU-binary-metadata",
                    f"binaryBuffer: the metadata section is not valid JSON ({type(e).__name__}: "
                    f"{str(e)[:120]})", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
    try:
        _check_text(meta, "metadata")
        info = _schema(meta, h, check_abort, func)
    except _Bad as e:
        raise error(Location(func), "QNNEMU-binary-metadata", f"binaryBuffer: inconsistent metadata: {e}",
                    code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
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
        reserved = 0
        if "reserved" in b:
            if h.format_version < PLAN_FORMAT_VERSION:
                raise _Bad(f"{p}.reserved: format version {h.format_version} has no reserved blob sizes")
            reserved = _int(b["reserved"], f"{p}.reserved", size, h.data_size)
        if off % ALIGN:
            raise _Bad(f"{p}.offset: {off} is not a multiple of {ALIGN}")
        if off + max(size, reserved) > h.data_size:
            raise _Bad(f"{p}: [{off}, +{max(size, reserved)}) leaves the data section ({h.data_size} bytes)")
        blobs.append(BlobInfo(off, size, crc, reserved))
    sections = _sections_from_json(meta.get("sections"), h, blobs)
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
        plan = None
        if "plan" in g:
            if h.format_version < PLAN_FORMAT_VERSION:
                raise _Bad(f"{p}.plan: format version {h.format_version} has no prepared plan")
            plan = plan_record.decode(g["plan"], f"{p}.plan", name, len(nodes), h.metadata_size)
        graphs.append(GraphInfo(name, configs, tensors, nodes, inputs, outputs, spill_fill, plan))
    return BinaryInfo(h, ctx_configs, ctx_tensors, graphs, blobs, sections)


def _sections_from_json(value: Any, h: Header, blobs: list[BlobInfo]) -> list[DataSection]:
    """The data sections (format version 3; before: the whole data section), checked: 4 KiB
    aligned, in order, inside the data section, every blob inside exactly one."""
    if value is None:
        return [DataSection("weights", 0, h.data_size)]
    if h.format_version < PLAN_FORMAT_VERSION:
        raise _Bad(f"metadata.sections: format version {h.format_version} has one data section")
    out: list[DataSection] = []
    end = 0
    for i, sec in enumerate(_list(value, "metadata.sections")):
        p = f"sections[{i}]"
        sec = _obj(sec, p)
        name = _str(_key(sec, "name", p), f"{p}.name")
        off = _int(_key(sec, "offset", p), f"{p}.offset", 0, h.data_size)
        size = _int(_key(sec, "size", p), f"{p}.size", 0, h.data_size)
        if off % DATA_ALIGN or off < end or off + size > h.data_size:
            raise _Bad(f"{p}: [{off}, +{size}) is not a {DATA_ALIGN}-byte aligned section after the previous one "
                       f"inside the data section ({h.data_size} bytes)")
        end = off + size
        out.append(DataSection(name, off, size))
    for i, b in enumerate(blobs):
        span = max(b.size, b.reserved)
        if b.size and not any(s.offset <= b.offset and b.offset + span <= s.offset + s.size for s in out):
            raise _Bad(f"blobs[{i}]: [{b.offset}, +{span}) is in no data section")
    return out


def inspect(blob: Any, *, func: str = "contextValidateBinary", check_abort=None) -> BinaryInfo:
    """Header, graphs and tensors of a binary, fully checked, without building anything."""
    def body():
        view = _as_view(blob, func)
        h = parse_header(view, func)
        _abort(check_abort, func)
        return _metadata(view, h, func, check_abort)
    return _guard(func, body)
