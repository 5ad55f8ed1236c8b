"""C structs of QnnTypes.h -> core objects, and back (Qnn_Tensor_t, Qnn_OpConfig_t, configs).

Everything is copied out of application memory here: apps may free their structs right after
the call returns.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core.graph import OpConfigDesc, ParamDesc
from ..core.tensor import RawQuant, TensorDesc
from ..headers import Q
from ..location import Location
from ..rules import fail
from .framework import CONFIG_LIST_LIMIT, NULL, c_str, null_terminated, read_scalar, require_pointer

ffi: Any = None  # set by install(): the embedded library's FFI (cffi has no type stubs)



def require(ptr, code: int, func: str, what: str, rule: str = "QNNEMU-arg-null") -> None:
    """Refuses a NULL ``what`` of ``func`` (framework.require_pointer with a path).  The
    location is built only for a refusal: this check runs on every call's hot path."""
    if ptr == NULL:
        require_pointer(ptr, Location(func).path(what), code, rule)


def read_quant(qp) -> RawQuant:
    q = RawQuant(int(qp.encodingDefinition), int(qp.quantizationEncoding))
    if q.definition != Q.QNN_DEFINITION_DEFINED:
        return q
    enc = q.encoding
    if enc == Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET:
        q.scale, q.offset = float(qp.scaleOffsetEncoding.scale), int(qp.scaleOffsetEncoding.offset)
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET:
        b = qp.bwScaleOffsetEncoding
        q.bitwidth, q.scale, q.offset = int(b.bitwidth), float(b.scale), int(b.offset)
    elif enc == Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET:
        a = qp.axisScaleOffsetEncoding
        q.axis = int(a.axis)
        n = int(a.numScaleOffsets)
        if n and a.scaleOffset != ffi.NULL:
            raw = np.frombuffer(ffi.buffer(a.scaleOffset, n * ffi.sizeof("Qnn_ScaleOffset_t")),
                                dtype=np.dtype([("scale", "<f4"), ("offset", "<i4")])).copy()
            q.scales, q.offsets = raw["scale"].copy(), raw["offset"].copy()
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET:
        b = qp.bwAxisScaleOffsetEncoding
        q.bitwidth, q.axis = int(b.bitwidth), int(b.axis)
        n = int(b.numElements)
        if n and b.scales != ffi.NULL:
            q.scales = np.frombuffer(ffi.buffer(b.scales, 4 * n), dtype=np.float32).copy()
            q.offsets = (np.frombuffer(ffi.buffer(b.offsets, 4 * n), dtype=np.int32).copy()
                         if b.offsets != ffi.NULL else np.zeros(n, np.int32))
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION:
        b = qp.blockwiseExpansion
        if b == ffi.NULL:
            q.scales = None
            return q
        q.axis = int(b.axis)
        q.blocks_per_axis = int(b.numBlocksPerAxis)
        q.block_scale_bitwidth = int(b.blockScaleBitwidth)
        q.block_scale_storage = int(b.blockScaleStorageType)
    return q


# Blockwise expansion arrays are sized by the tensor's dimension at ``axis``, known only once
# the whole tensor is read: read_tensor finishes the copy.


def _finish_blockwise(qp, q: RawQuant, dims) -> None:
    if q.encoding != Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION or q.definition != Q.QNN_DEFINITION_DEFINED:
        return
    b = qp.blockwiseExpansion
    if b == ffi.NULL or dims is None or not 0 <= q.axis < len(dims):
        return
    channels = int(dims[q.axis])
    if b.scaleOffsets != ffi.NULL:
        raw = np.frombuffer(ffi.buffer(b.scaleOffsets, channels * ffi.sizeof("Qnn_ScaleOffset_t")),
                            dtype=np.dtype([("scale", "<f4"), ("offset", "<i4")])).copy()
        q.scales, q.offsets = raw["scale"].copy(), raw["offset"].copy()
    n = channels * q.blocks_per_axis
    if q.block_scale_storage == Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8 and b.blocksScale8 != ffi.NULL:
        q.block_scales = np.frombuffer(ffi.buffer(b.blocksScale8, n), dtype=np.uint8).reshape(channels, -1).copy()
    elif q.block_scale_storage == Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16 and b.blocksScale16 != ffi.NULL:
        q.block_scales = np.frombuffer(ffi.buffer(b.blocksScale16, 2 * n), dtype=np.uint16).reshape(channels, -1).copy()


def read_tensor(t, data: str = "copy") -> TensorDesc:
    """Copies a Qnn_Tensor_t (v1 or v2).  ``t`` is a ``Qnn_Tensor_t *`` or struct.

    ``data``: what happens to a RAW tensor's clientBuf contents (static data):
    ``"copy"`` -- copied into ``bytes``; ``"borrow"`` -- a memoryview of the application's
    buffer, valid during the call only (``TensorDesc.borrowed``: whoever keeps it copies it,
    as validate_desc does; this saves a copy of every weight); ``"none"`` -- not read (the
    pointer and size still are)."""
    version = int(t.version)
    if version not in (1, 2):
        return TensorDesc(version, 0, None, 0, 0, 0, RawQuant(0, 0), None, 0)
    v = t.v1 if version == 1 else t.v2
    rank = int(v.rank)
    dims: tuple[int, ...] | None
    if rank == 0:
        dims = ()
    elif v.dimensions == ffi.NULL:
        dims = None
    else:
        dims = tuple(ffi.unpack(v.dimensions, rank))
    quant = read_quant(v.quantizeParams)
    _finish_blockwise(v.quantizeParams, quant, dims)
    d = TensorDesc(version, int(v.id), c_str(v.name), int(v.type), int(v.dataFormat), int(v.dataType),
                   quant, dims, int(v.memType))
    if d.mem_type == Q.QNN_TENSORMEMTYPE_RAW:
        d.has_data_pointer = v.clientBuf.data != ffi.NULL
        d.data_size = int(v.clientBuf.dataSize)
        if data != "none" and d.has_data_pointer and d.data_size:
            if data == "borrow":
                d.data = memoryview(ffi.buffer(v.clientBuf.data, d.data_size))
                d.borrowed = True
            else:
                d.data = bytes(ffi.buffer(v.clientBuf.data, d.data_size))
    if version == 2:
        v2 = t.v2
        if v2.isDynamicDimensions != ffi.NULL and rank:
            d.dynamic_dims = tuple(bool(x) for x in ffi.buffer(v2.isDynamicDimensions, rank))
    return d


def read_op_config(oc, code: int = Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, func: str = "graphAddNode",
                   tensor_data: str = "copy") -> OpConfigDesc:
    """Copies a Qnn_OpConfig_t of API call ``func``; ``code`` is returned for NULL arrays with
    non-zero counts.  ``tensor_data``: how the input and output tensors' static data is read
    (read_tensor's ``data``; tensor parameters always borrow theirs: parse_params copies the
    values it keeps).  graphAddNode reads none (a node refers to created tensors, whose data
    was copied at creation); backendValidateOpConfig borrows it (nothing outlives the call)."""
    version = int(oc.version)
    if version != 1:
        return OpConfigDesc(version, None, None, None, [], [], [])
    v = oc.v1
    params = []
    for i in range(int(v.numOfParams) if v.params != ffi.NULL else 0):
        p = v.params[i]
        kind_raw = int(p.paramType)
        name = c_str(p.name)
        if kind_raw == Q.QNN_PARAMTYPE_SCALAR:
            dtype, value = read_scalar(p.scalarParam)
            params.append(ParamDesc(name, "scalar", dtype, value))
        elif kind_raw == Q.QNN_PARAMTYPE_TENSOR:
            params.append(ParamDesc(name, "tensor", tensor=read_tensor(ffi.addressof(p, "tensorParam"), "borrow")))
        else:
            params.append(ParamDesc(name, str(kind_raw)))
    if int(v.numOfParams) and v.params == ffi.NULL:
        fail(Location(func).path("opConfig.v1.params"), "QNNEMU-op-params-null",
             f"is NULL but numOfParams is {int(v.numOfParams)}", code=code)
    tensors = []
    for what, count, arr in (("inputTensors", v.numOfInputs, v.inputTensors),
                             ("outputTensors", v.numOfOutputs, v.outputTensors)):
        n = int(count)
        if n and arr == ffi.NULL:
            fail(Location(func).field("opConfig").field("v1").field(what), "QNNEMU-op-tensors-null",
                 f"is NULL but its count is {n}", code=code)
        tensors.append([read_tensor(arr + i, tensor_data) for i in range(n)])
    return OpConfigDesc(1, c_str(v.name), c_str(v.packageName), c_str(v.typeName), params,
                        tensors[0], tensors[1])


def config_list(pp, ctype: str, loc: Location | None = None) -> list:
    """The entries of a NULL-terminated ``const X **`` config list (NULL list = no entries), at
    most ``CONFIG_LIST_LIMIT`` (QNNEMU-config-list-unterminated, QNN_COMMON_ERROR_INVALID_ARGUMENT);
    ``loc``: where the list is (default: named by its type)."""
    return null_terminated(pp, CONFIG_LIST_LIMIT, loc if loc is not None else Location(f"{ctype} list"),
                           Q.QNN_COMMON_ERROR_INVALID_ARGUMENT)


def read_htp_custom(c, i: int, func: str, ctype: str, prefix: str, code: int, rule: str,
                    tolerate_undefined: bool = False) -> tuple[str, dict]:
    """An HTP custom config behind ``config[i].customConfig``: (option name, copied fields).
    UNKNOWN is refused; an option value the headers do not define (or a RESERVED one) is
    refused too, unless ``tolerate_undefined`` (graph configs: the vendor ignores those) --
    then its name is ``{prefix}<value>``."""
    loc = Location(func).index("config", i).field("customConfig")
    require_pointer(c.customConfig, loc, code)
    cc = ffi.cast(f"{ctype} *", c.customConfig)
    value = int(cc.option)
    name = Q.enum(prefix).get(value)
    unknown = name is not None and name.endswith("UNKNOWN")
    if unknown or (not tolerate_undefined and (name is None or "RESERVED" in name)):
        fail(loc.field("option"), rule, f"unknown {ctype} option {value}", code=code)
    if name is None or "RESERVED" in name:
        return f"{prefix}{value}", {"option": value}
    return name, to_python(cc[0])


def to_python(value):
    """A copy of a C value as plain Python (structs/unions -> dicts, pointers -> addresses)."""
    if not isinstance(value, ffi.CData):
        return value
    tp = ffi.typeof(value)
    if tp.kind in ("struct", "union"):
        out = {}
        for name, _ in tp.fields:
            try:
                out[name] = to_python(getattr(value, name))
            except ValueError:
                # A bool byte other than 0/1 (set by the client, or a union's bool member
                # overlaying another member's bytes, e.g. vtcmSizeInMB = 4): cffi refuses it; C
                # reads any non-zero byte as true.
                out[name] = ffi.cast("uint8_t *", ffi.addressof(value, name))[0] != 0
        return out
    if tp.kind == "array":
        return [to_python(v) for v in value]
    if tp.kind in ("pointer", "function"):
        return int(ffi.cast("uintptr_t", value))
    return value
