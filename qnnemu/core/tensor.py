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
from ..headers import Q
from ..location import Location
from ..rules import fail
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
    # True: ``data`` is a view of the application's buffer, valid during the API call only
    # (validate_desc copies it; a memoryview that is not borrowed is a loaded binary's memory)
    borrowed: bool = False


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


def quant_spec(q: RawQuant, dtype: int, func: str, path: str, code: int, dims: tuple[int, ...]) -> QuantSpec | None:
    """Checks quantization against the data type and dimensions; returns the executable form."""
    rank = len(dims)
    fixed = dtype in dtypes.FIXED_POINT_TYPES
    if q.definition != Q.QNN_DEFINITION_DEFINED:
        if fixed:
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-required",
                 f"{dtypes.name(dtype)} needs quantization parameters "
                 f"(encodingDefinition must be QNN_DEFINITION_DEFINED)", code=code)
        return None
    if not fixed:
        # Float tensors may carry defined-but-unused encodings (converters emit them); ignore.
        return None
    enc = q.encoding
    if enc in (Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET):
        if not math.isfinite(q.scale) or q.scale <= 0:
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-scale",
                 f"scale must be a positive finite number, got {q.scale}", code=code)
        return QuantSpec(enc, float(q.scale), int(q.offset), None, q.bitwidth or None)
    if enc in (Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
               Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET):
        if not 0 <= q.axis < max(rank, 1):
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-axis",
                 f"axis {q.axis} is outside the tensor's rank {rank}", code=code)
        if q.scales is None or len(q.scales) == 0:
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-axis-values",
                 "per-axis encoding without scale/offset values", code=code)
        if not np.all(np.isfinite(q.scales)) or np.any(q.scales <= 0):
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-scale",
                 "per-axis scales must be positive finite numbers", code=code)
        if rank and len(q.scales) != dims[q.axis]:
            fail(Location(func).field(f"{path}.quantizeParams"), "QNNEMU-tensor-quant-axis-count",
                 f"{len(q.scales)} scale/offset pairs for axis {q.axis} of dimension {dims[q.axis]} "
                 f"(dimensions {list(dims)}): one pair per index is needed", code=code)
        return QuantSpec(enc, q.scales, q.offsets, q.axis, q.bitwidth or None)
    if enc == Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION:
        qp = f"{path}.quantizeParams.blockwiseExpansion"
        if not 0 <= q.axis < max(rank, 1) or rank < 2:
            fail(Location(func).field(f"{qp}->axis"), "QNNEMU-tensor-quant-axis",
                 f"axis {q.axis} is outside the tensor's rank {rank} (blockwise needs rank >= 2)", code=code)
        if q.scales is None or q.block_scales is None:
            fail(Location(func).field(qp), "QNNEMU-tensor-quant-blockwise-values",
                 "blockwise expansion needs scaleOffsets and blocksScale8/16 arrays "
                 "(blockScaleStorageType 8 or 16)", code=code)
        if not np.all(np.isfinite(q.scales)) or np.any(q.scales <= 0):
            fail(Location(func).field(f"{qp}->scaleOffsets"), "QNNEMU-tensor-quant-scale",
                 "per-channel scales must be positive finite numbers", code=code)
        blocked = dims[rank - 2 if q.axis == rank - 1 else rank - 1]
        nblocks = q.block_scales.shape[1] if q.block_scales.ndim == 2 else 0
        if nblocks < 1 or blocked % nblocks:
            fail(Location(func).field(f"{qp}->numBlocksPerAxis"), "QNNEMU-tensor-quant-blockwise-blocks",
                 f"{q.blocks_per_axis} blocks do not divide the blocked dimension {blocked} "
                 f"(dimensions {list(dims)}, axis {q.axis})", code=code)
        return QuantSpec(enc, q.scales, q.offsets, q.axis, None, q.block_scales)
    fail(Location(func).field(f"{path}.quantizeParams.quantizationEncoding"), "QNNEMU-tensor-quant-encoding",
         f"encoding {q.encoding} is not supported by the emulator yet "
         f"(scale-offset, axis-scale-offset, their bitwidth forms and blockwise expansion are)",
         code=Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM)


def validate_desc(d: TensorDesc, func: str, path: str, *, code: int = Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
                  allow_null_type: bool = True, max_rank: int | None = MAX_RANK, transient: bool = False
                  ) -> tuple[QuantSpec | None, np.ndarray | None]:
    """Creation rules for a tensor description; returns (quantization, static array).
    ``max_rank`` None: no rank limit (backendValidateOpConfig: the vendor's validation takes
    tensors of rank 7 and 8 for ops that do not check ranks; op support data decides there).
    ``transient``: the static array is used during this call only (backendValidateOpConfig), so
    borrowed data is not copied: the array is a read-only view of the application's buffer."""
    if d.version not in (1, 2):
        fail(Location(func).field(f"{path}.version"), "QNNEMU-tensor-version",
             f"must be QNN_TENSOR_VERSION_1 or _2, got {d.version}", code=code)
    v = f"{path}.v{d.version}"
    if d.name is None:   # an empty name is accepted (the vendor does; unique like any other)
        fail(Location(func).field(f"{v}.name"), "QNNEMU-tensor-name", "a tensor needs a name (NULL given)", code=code)
    if d.type not in SUPPORTED_TYPES or (d.type == Q.QNN_TENSOR_TYPE_NULL and not allow_null_type):
        unsupported = 0 <= d.type <= 0x7FFFFFFE and d.type not in SUPPORTED_TYPES
        fail(Location(func).field(f"{v}.type"), "QNNEMU-tensor-type",
             f"{type_name(d.type)} is not supported here (supported: "
             f"{', '.join(SUPPORTED_TYPES.values())})",
             code=Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM if unsupported else code)
    if d.data_format not in (Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT):
        fail(Location(func).field(f"{v}.dataFormat"), "QNNEMU-tensor-data-format",
             f"only QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER and (native KV cache tensors) "
             f"QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT are supported, got {d.data_format}",
             code=Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM)
    if not dtypes.is_known(d.dtype):
        fail(Location(func).field(f"{v}.dataType"), "QNNEMU-tensor-dtype", f"{dtypes.name(d.dtype)}", code=code)
    if d.dims is None:
        fail(Location(func).field(f"{v}.dimensions"), "QNNEMU-tensor-dims-null", "rank > 0 but dimensions is NULL",
             code=code)
    if max_rank is not None and len(d.dims) > max_rank:
        fail(Location(func).field(f"{v}.rank"), "QNNEMU-tensor-rank",
             f"rank {len(d.dims)}: the HTP backend takes tensors of rank 0..{max_rank}", code=code)
    # A dimension of 0 is accepted here (a NULL tensor of dimensions [0] is how ONNX Runtime
    # passes an absent optional input); a node refuses empty tensors (check_not_empty).
    if d.dynamic_dims and any(d.dynamic_dims):
        fail(Location(func).field(f"{v}.isDynamicDimensions"), "QNNEMU-tensor-dynamic-dims",
             "dynamic dimensions are not supported yet", code=Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM)
    if d.type == Q.QNN_TENSOR_TYPE_NULL and d.quant.definition != Q.QNN_DEFINITION_DEFINED:
        quant = None   # an absent optional input: no values to encode (the vendor takes it)
    else:
        quant = quant_spec(d.quant, d.dtype, func, v, code, tuple(d.dims))
    if d.data_format == Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT:
        _check_native_kv(d, quant, func, v)
    static = None
    if d.type in STATIC_TYPES:
        kind = SUPPORTED_TYPES[d.type]
        if d.mem_type != Q.QNN_TENSORMEMTYPE_RAW:
            fail(Location(func).field(f"{v}.memType"), "QNNEMU-tensor-static-memtype",
                 f"{kind} tensors carry their data in clientBuf (QNN_TENSORMEMTYPE_RAW), got {d.mem_type}", code=code)
        want = _int64_product(d.dims) * dtypes.itemsize(d.dtype)
        if d.data is None and want:
            fail(Location(func).field(f"{v}.clientBuf.data"), "QNNEMU-tensor-static-data",
                 f"a {kind} tensor needs its data at creation", code=code)
        if d.data_size < want:
            # The vendor reads past the buffer here; the emulator refuses (docs/validation.md).
            fail(Location(func).field(f"{v}.clientBuf.dataSize"), "QNNEMU-tensor-static-size",
                 f"is {d.data_size} bytes; dimensions {list(d.dims)} of {dtypes.name(d.dtype)} need {want}", code=code)
        if d.data_size > want:
            rules.warn("QNNEMU-tensor-static-size-larger", func, f"{v}.clientBuf.dataSize",
                       f"is {d.data_size} bytes; dimensions {list(d.dims)} of {dtypes.name(d.dtype)} need {want}: "
                       f"the first {want} bytes are the tensor's data")
        if (d.borrowed and not transient) or isinstance(d.data, bytes):
            # the client's buffer (or a copy of it): copied once, kept 64-byte aligned
            static = _aligned_static(d.data or b"", want, dtypes.numpy_dtype(d.dtype), d.dims)
        else:
            # a view of a loaded binary (tensors sharing a blob share its memory), or of the
            # client's buffer for the duration of the call
            static = np.frombuffer((d.data or b"")[:want], dtype=dtypes.numpy_dtype(d.dtype)).reshape(d.dims)
            if d.borrowed:
                static.flags.writeable = False   # the application's memory
    return quant, static


def _int64_product(dims) -> int:
    """``int(np.prod(dims, dtype=np.int64))`` (wrapping as int64 does) without numpy's call
    overhead (tensor creation's hot path)."""
    return (math.prod(int(n) for n in dims) + 2**63) % 2**64 - 2**63


STATIC_ALIGN = 64   # the C engine references 64-byte-aligned constants in place (no aligned copy)


def _aligned_static(data: bytes | memoryview, nbytes: int, dtype, dims) -> np.ndarray:
    """A static tensor's data as a read-only array starting on a STATIC_ALIGN boundary."""
    raw = np.empty(nbytes + STATIC_ALIGN, np.uint8)
    start = (-raw.ctypes.data) % STATIC_ALIGN
    out = raw[start:start + nbytes]
    out[:] = np.frombuffer(data, np.uint8, count=nbytes)
    arr = out.view(dtype).reshape(dims)
    arr.flags.writeable = False
    return arr


# Native KV cache (QNN HTP backend documentation, "LLM native KVcache"): the creation-time
# constraints; the graph-level ones (ScatterElements pattern, tile sizes, all-or-nothing, arch) are
# checked at finalize by qnnemu/htp/kvcache.py.
NATIVE_KV_TYPES = APP_INPUT_TYPES + APP_OUTPUT_TYPES
NATIVE_KV_SYMMETRIC_OFFSET = -128   # uint8 symmetric: zero point 128, QNN offset -128


def _check_native_kv(d: TensorDesc, quant: QuantSpec | None, func: str, v: str) -> None:
    code = Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM
    fmt = "QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT (native KV cache)"
    if d.type not in NATIVE_KV_TYPES:
        fail(Location(func).field(f"{v}.type"), "QNNEMU-tensor-native-kv-type",
             f"{fmt} is for KV cache graph inputs/outputs (APP_WRITE, APP_READ, APP_READWRITE and "
             f"their UPDATEABLE_ forms), got {type_name(d.type)}", code=code)
    if d.dtype != Q.QNN_DATATYPE_UFIXED_POINT_8:
        fail(Location(func).field(f"{v}.dataType"), "QNNEMU-tensor-native-kv-dtype",
             f"{fmt} tensors must be QNN_DATATYPE_UFIXED_POINT_8, got {dtypes.name(d.dtype)}", code=code)
    offsets = None if quant is None else np.atleast_1d(np.asarray(quant.offset))
    if quant is None or quant.block_scales is not None or np.any(offsets != NATIVE_KV_SYMMETRIC_OFFSET):
        fail(Location(func).field(f"{v}.quantizeParams"), "QNNEMU-tensor-native-kv-quant",
             f"{fmt} tensors must be symmetrically quantized (uint8 offset "
             f"{NATIVE_KV_SYMMETRIC_OFFSET}), got offset(s) "
             f"{None if offsets is None else sorted({int(o) for o in offsets})}", code=code)
    assert d.dims is not None   # (NULL dimensions were refused before the KV check)
    if len(d.dims) < 2:
        fail(Location(func).field(f"{v}.dimensions"), "QNNEMU-tensor-native-kv-rank",
             f"{fmt} tensors have rank >= 2 ([..., DIN, DOUT]), got dimensions {list(d.dims)}", code=code)


def from_desc(d: TensorDesc, tensor_id: int, quant: QuantSpec | None, static: np.ndarray | None) -> Tensor:
    t = Tensor(tensor_id, d.name or "", d.type, d.dtype, tuple(d.dims or ()), quant, static)
    if d.data_format != Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER:
        t.data_format = d.data_format
    return t
