"""QnnTensor.h / QnnTypes.h Qnn_Tensor_t: the emulator's copy of an application tensor.

The ABI layer deep-copies everything the app passes (name, dimensions, quantization arrays,
static data) into a ``TensorDesc`` at create/addNode time; ``validate_desc`` applies the
creation rules, each with a stable rule id.

Updatable tensors (QnnTypes.h ``QNN_TENSOR_TYPE_UPDATEABLE_*``, QnnTensor.h
``QnnTensor_updateGraphTensors`` / ``QnnTensor_updateContextTensors``) behave exactly like their
plain counterparts -- ``UPDATEABLE_STATIC`` holds its data like ``STATIC``, ``UPDATEABLE_NATIVE``
is written by a node like ``NATIVE``, ``UPDATEABLE_APP_*`` are graph inputs/outputs like
``APP_*`` -- and may in addition have their data (static ones) and quantization replaced after
creation (qnnemu/core/sections.py, docs/binary-sections.md).  The type groups below are what the
rest of the core tests against, so a type's role is decided in one place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .. import rules
from ..errors import QnnError
from ..headers import Q
from ..spec import dtypes
from ..spec.tensor import (  # noqa: F401 (the type groups stay importable from here)
    APP_INPUT_TYPES,
    APP_OUTPUT_TYPES,
    APP_READWRITE_TYPES,
    NODE_OUTPUT_TYPES,
    PRODUCED_TYPES,
    STATIC_TYPES,
    SUPPORTED_TYPES,
    UPDATEABLE_TYPES,
    QuantSpec,
    TensorSpec,
    is_static,
    type_name,
)


@dataclass
class RawQuant:
    """Quantization exactly as passed (already copied out of C memory)."""

    definition: int
    encoding: int
    scale: float = 0.0
    offset: int = 0
    axis: int = 0
    bitwidth: int = 0
    scales: np.ndarray | None = None
    offsets: np.ndarray | None = None
    # BLOCKWISE_EXPANSION
    blocks_per_axis: int = 0
    block_scale_bitwidth: int = 0
    block_scale_storage: int = 0
    block_scales: np.ndarray | None = None


@dataclass
class TensorDesc:
    """A tensor as the app described it (v1 or v2), copied."""

    version: int
    id: int
    name: str | None
    type: int
    data_format: int
    dtype: int
    quant: RawQuant
    dims: tuple[int, ...] | None
    mem_type: int
    data: bytes | memoryview | None = None  # clientBuf contents (static data)
    data_size: int = 0
    has_data_pointer: bool = False
    dynamic_dims: tuple[bool, ...] | None = None


@dataclass
class Tensor:
    """A created tensor, owned by a graph (or a context for context tensors)."""

    id: int
    name: str
    type: int
    dtype: int
    dims: tuple[int, ...]
    quant: QuantSpec | None
    data: np.ndarray | None = None
    producer: str | None = None  # name of the node that writes it
    consumers: list[str] = field(default_factory=list)
    # QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, or QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT for a native
    # KV cache graph input/output (qnnemu/htp/kvcache.py): same logical dims, bytes reordered.
    data_format: int = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER

    @property
    def nbytes(self) -> int:
        # math.prod: exact Python ints, and far cheaper than np.prod on the execute hot path
        return math.prod(self.dims) * dtypes.itemsize(self.dtype)

    def spec(self) -> TensorSpec:
        return TensorSpec(self.dims, self.dtype, self.quant, self.data, self.name)

    def batched(self, n: int) -> Tensor:
        """A copy describing ``n`` batches: first dimension ``n * b`` (variable batch at execute;
        used for buffer sizes and views, never stored in a graph)."""
        return replace(self, dims=(self.dims[0] * n,) + self.dims[1:]) if n != 1 else self


# The vendor's HTP backend refuses tensors of rank 7 and more ("Invalid tensor rank").
MAX_RANK = 6


def is_empty(t) -> bool:
    """A tensor (or TensorSpec/desc with ``dims``) with a dimension of 0."""
    return any(int(n) == 0 for n in (t.dims or ()))


def _fail(code: int, rule: str, func: str, path: str, message: str) -> QnnError:
    return QnnError(code, f"{func}: {path}: {message}", rule=rule)


def quant_spec(q: RawQuant, dtype: int, func: str, path: str, code: int, dims: tuple[int, ...]) -> QuantSpec | None:
    """Checks quantization against the data type and dimensions; returns the executable form."""
    rank = len(dims)
    fixed = dtype in dtypes.FIXED_POINT_TYPES
    if q.definition != Q.QNN_DEFINITION_DEFINED:
        if fixed:
            raise _fail(code, "QNNEMU-tensor-quant-required", func, f"{path}.quantizeParams",
                        f"{dtypes.name(dtype)} needs quantization parameters "
                        f"(encodingDefinition must be QNN_DEFINITION_DEFINED)")
        return None
    if not fixed:
        # Float tensors may carry defined-but-unused encodings (converters emit them); ignore.
        return None
    enc = q.encoding
    if enc in (Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET):
        if not np.isfinite(q.scale) or q.scale <= 0:
            raise _fail(code, "QNNEMU-tensor-quant-scale", func, f"{path}.quantizeParams",
                        f"scale must be a positive finite number, got {q.scale}")
        return QuantSpec(enc, float(q.scale), int(q.offset), None, q.bitwidth or None)
    if enc in (Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
               Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET):
        if not 0 <= q.axis < max(rank, 1):
            raise _fail(code, "QNNEMU-tensor-quant-axis", func, f"{path}.quantizeParams",
                        f"axis {q.axis} is outside the tensor's rank {rank}")
        if q.scales is None or len(q.scales) == 0:
            raise _fail(code, "QNNEMU-tensor-quant-axis-values", func, f"{path}.quantizeParams",
                        "per-axis encoding without scale/offset values")
        if not np.all(np.isfinite(q.scales)) or np.any(q.scales <= 0):
            raise _fail(code, "QNNEMU-tensor-quant-scale", func, f"{path}.quantizeParams",
                        "per-axis scales must be positive finite numbers")
        if rank and len(q.scales) != dims[q.axis]:
            raise _fail(code, "QNNEMU-tensor-quant-axis-count", func, f"{path}.quantizeParams",
                        f"{len(q.scales)} scale/offset pairs for axis {q.axis} of dimension {dims[q.axis]} "
                        f"(dimensions {list(dims)}): one pair per index is needed")
        return QuantSpec(enc, q.scales, q.offsets, q.axis, q.bitwidth or None)
    if enc == Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION:
        qp = f"{path}.quantizeParams.blockwiseExpansion"
        if not 0 <= q.axis < max(rank, 1) or rank < 2:
            raise _fail(code, "QNNEMU-tensor-quant-axis", func, f"{qp}->axis",
                        f"axis {q.axis} is outside the tensor's rank {rank} (blockwise needs rank >= 2)")
        if q.scales is None or q.block_scales is None:
            raise _fail(code, "QNNEMU-tensor-quant-blockwise-values", func, qp,
                        "blockwise expansion needs scaleOffsets and blocksScale8/16 arrays "
                        "(blockScaleStorageType 8 or 16)")
        if not np.all(np.isfinite(q.scales)) or np.any(q.scales <= 0):
            raise _fail(code, "QNNEMU-tensor-quant-scale", func, f"{qp}->scaleOffsets",
                        "per-channel scales must be positive finite numbers")
        blocked = dims[rank - 2 if q.axis == rank - 1 else rank - 1]
        nblocks = q.block_scales.shape[1] if q.block_scales.ndim == 2 else 0
        if nblocks < 1 or blocked % nblocks:
            raise _fail(code, "QNNEMU-tensor-quant-blockwise-blocks", func, f"{qp}->numBlocksPerAxis",
                        f"{q.blocks_per_axis} blocks do not divide the blocked dimension {blocked} "
                        f"(dimensions {list(dims)}, axis {q.axis})")
        return QuantSpec(enc, q.scales, q.offsets, q.axis, None, q.block_scales)
    raise _fail(Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-quant-encoding", func,
                f"{path}.quantizeParams.quantizationEncoding",
                f"encoding {q.encoding} is not supported by the emulator yet "
                f"(scale-offset, axis-scale-offset, their bitwidth forms and blockwise expansion are)")


def validate_desc(d: TensorDesc, func: str, path: str, *, code: int = Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
                  allow_null_type: bool = True) -> tuple[QuantSpec | None, np.ndarray | None]:
    """Creation rules for a tensor description; returns (quantization, static array)."""
    if d.version not in (1, 2):
        raise _fail(code, "QNNEMU-tensor-version", func, f"{path}.version",
                    f"must be QNN_TENSOR_VERSION_1 or _2, got {d.version}")
    v = f"{path}.v{d.version}"
    if d.name is None:   # an empty name is accepted (the vendor does; unique like any other)
        raise _fail(code, "QNNEMU-tensor-name", func, f"{v}.name", "a tensor needs a name (NULL given)")
    if d.type not in SUPPORTED_TYPES or (d.type == Q.QNN_TENSOR_TYPE_NULL and not allow_null_type):
        unsupported = 0 <= d.type <= 0x7FFFFFFE and d.type not in SUPPORTED_TYPES
        raise _fail(Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM if unsupported else code,
                    "QNNEMU-tensor-type", func, f"{v}.type",
                    f"{type_name(d.type)} is not supported here (supported: "
                    f"{', '.join(SUPPORTED_TYPES.values())})")
    if d.data_format not in (Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT):
        raise _fail(Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-data-format", func,
                    f"{v}.dataFormat", f"only QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER and (native KV cache tensors) "
                                       f"QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT are supported, got {d.data_format}")
    if not dtypes.is_known(d.dtype):
        raise _fail(code, "QNNEMU-tensor-dtype", func, f"{v}.dataType", f"{dtypes.name(d.dtype)}")
    if d.dims is None:
        raise _fail(code, "QNNEMU-tensor-dims-null", func, f"{v}.dimensions",
                    "rank > 0 but dimensions is NULL")
    if len(d.dims) > MAX_RANK:
        raise _fail(code, "QNNEMU-tensor-rank", func, f"{v}.rank",
                    f"rank {len(d.dims)}: the HTP backend takes tensors of rank 0..{MAX_RANK}")
    # A dimension of 0 is accepted here (a NULL tensor of dimensions [0] is how ONNX Runtime
    # passes an absent optional input); a node refuses empty tensors (check_not_empty).
    if d.dynamic_dims and any(d.dynamic_dims):
        raise _fail(Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-dynamic-dims", func,
                    f"{v}.isDynamicDimensions", "dynamic dimensions are not supported yet")
    quant = quant_spec(d.quant, d.dtype, func, v, code, tuple(d.dims))
    if d.data_format == Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT:
        _check_native_kv(d, quant, func, v)
    static = None
    if d.type in STATIC_TYPES:
        kind = SUPPORTED_TYPES[d.type]
        if d.mem_type != Q.QNN_TENSORMEMTYPE_RAW:
            raise _fail(code, "QNNEMU-tensor-static-memtype", func, f"{v}.memType",
                        f"{kind} tensors carry their data in clientBuf (QNN_TENSORMEMTYPE_RAW), got {d.mem_type}")
        want = int(np.prod(d.dims, dtype=np.int64)) * dtypes.itemsize(d.dtype)
        if d.data is None and want:
            raise _fail(code, "QNNEMU-tensor-static-data", func, f"{v}.clientBuf.data",
                        f"a {kind} tensor needs its data at creation")
        if d.data_size < want:
            # The vendor reads past the buffer here; the emulator refuses (docs/validation.md).
            raise _fail(code, "QNNEMU-tensor-static-size", func, f"{v}.clientBuf.dataSize",
                        f"is {d.data_size} bytes; dimensions {list(d.dims)} of {dtypes.name(d.dtype)} need {want}")
        if d.data_size > want:
            rules.warn("QNNEMU-tensor-static-size-larger", func, f"{v}.clientBuf.dataSize",
                       f"is {d.data_size} bytes; dimensions {list(d.dims)} of {dtypes.name(d.dtype)} need {want}: "
                       f"the first {want} bytes are the tensor's data")
        static = np.frombuffer((d.data or b"")[:want], dtype=dtypes.numpy_dtype(d.dtype)).reshape(d.dims)
    return quant, static


# Native KV cache (seed 002 "LLM native KVcache"): the creation-time constraints; the graph-level
# ones (ScatterElements pattern, tile sizes, all-or-nothing, arch) are checked at finalize by
# qnnemu/htp/kvcache.py.
NATIVE_KV_TYPES = APP_INPUT_TYPES + APP_OUTPUT_TYPES
NATIVE_KV_SYMMETRIC_OFFSET = -128   # uint8 symmetric: zero point 128, QNN offset -128


def _check_native_kv(d: TensorDesc, quant: QuantSpec | None, func: str, v: str) -> None:
    code = Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM
    fmt = "QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT (native KV cache)"
    if d.type not in NATIVE_KV_TYPES:
        raise _fail(code, "QNNEMU-tensor-native-kv-type", func, f"{v}.type",
                    f"{fmt} is for KV cache graph inputs/outputs (APP_WRITE, APP_READ, APP_READWRITE and "
                    f"their UPDATEABLE_ forms), got {type_name(d.type)}")
    if d.dtype != Q.QNN_DATATYPE_UFIXED_POINT_8:
        raise _fail(code, "QNNEMU-tensor-native-kv-dtype", func, f"{v}.dataType",
                    f"{fmt} tensors must be QNN_DATATYPE_UFIXED_POINT_8, got {dtypes.name(d.dtype)}")
    offsets = None if quant is None else np.atleast_1d(np.asarray(quant.offset))
    if quant is None or quant.block_scales is not None or np.any(offsets != NATIVE_KV_SYMMETRIC_OFFSET):
        raise _fail(code, "QNNEMU-tensor-native-kv-quant", func, f"{v}.quantizeParams",
                    f"{fmt} tensors must be symmetrically quantized (uint8 offset "
                    f"{NATIVE_KV_SYMMETRIC_OFFSET}), got offset(s) "
                    f"{None if offsets is None else sorted({int(o) for o in offsets})}")
    assert d.dims is not None   # (NULL dimensions were refused before the KV check)
    if len(d.dims) < 2:
        raise _fail(code, "QNNEMU-tensor-native-kv-rank", func, f"{v}.dimensions",
                    f"{fmt} tensors have rank >= 2 ([..., DIN, DOUT]), got dimensions {list(d.dims)}")


def from_desc(d: TensorDesc, tensor_id: int, quant: QuantSpec | None, static: np.ndarray | None) -> Tensor:
    t = Tensor(tensor_id, d.name or "", d.type, d.dtype, tuple(d.dims or ()), quant, static)
    if d.data_format != Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER:
        t.data_format = d.data_format
    return t
