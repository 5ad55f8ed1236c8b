"""System/QnnSystemInterface.h: the entries of libQnnSystem.so, as cffi ``def_extern``.

The System library is a separate cffi embedding module (``_qnnemu_system_abi``, built by
csrc/build_system.py) that may share the interpreter with libQnnHtpEmu.so; it imports neither
the backend's module nor its FFI.  Rules as in entry.py: every entry declares a non-zero
``error=`` and logs unexpected exceptions; expected failures are ``QnnError``s, logged with
their rule id through the newest live System logger (``systemLogCreate``) and the ``qnnemu``
Python logger, and their code returned.

Implemented:

- ``systemLogCreate`` / ``systemLogSetLogLevel`` / ``systemLogFree``;
- the profile serialization entries (``systemProfileCreateSerializationTarget`` /
  ``SerializeEventData`` / ``FreeSerializationTarget``; the file format is in
  qnnemu/core/system_profile.py);
- System/QnnSystemContext.h: ``systemContextCreate`` / ``GetBinaryInfo`` / ``GetMetaData`` /
  ``Free`` for qnnemu context binaries (docs/context-binary.md, parsed by core/binary.py's
  ``inspect``).  The answer is a QnnSystemContext_BinaryInfo_t owned by the system context: valid
  until the next GetBinaryInfo/GetMetaData call on that handle or ``systemContextFree``;
  ``binaryInfoSize`` is the size of the struct plus everything it points to.  GetMetaData answers
  the same description (qnnemu's metadata is the whole description; weights are never read).
  Version 3 by default; ``QNNEMU_SYSTEM_BINARY_INFO_VERSION=1|2|3`` selects the layout (anything
  else: QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT).  BinaryInfo vN lists graphs as GraphInfo vN;
  tensors are Qnn_Tensor_t v1 in version 1 and v2 in versions 2 and 3, without data (clientBuf
  empty), with their quantization (scale-offset, axis-scale-offset, their BW_ forms, blockwise
  expansion).  Fields:

  * ``backendId`` QNN_BACKEND_ID_HTP (6, what libQnnHtpEmu.so's provider reports), ``buildId``,
    ``coreApiVersion``, ``backendApiVersion`` from the binary's header; ``socVersion`` "V<arch>"
    (e.g. "V73"); ``contextBlobVersion`` (format version, 0, 0); ``contextBlobSize`` the binary's
    total size;
  * v1/v2: ``hwInfoBlob`` a QnnHtpSystemContext_HwBlobInfo_t V1 (version 0.0.1): the index of the
    graph with the largest spill-fill buffer and that size;
  * v2/v3: ``platformInfo`` a QnnDevice_PlatformInfo_t v1 for the device the binary was prepared on
    (one on-chip HTP, QnnHtpDevice_DeviceInfoExtension_t with SoC model, arch, VTCM MiB);
  * v3: ``contextMetadata`` a QnnHtpSystemContext_ContextBlobInfo_t V1 (``dspArch``: the HTP arch),
    ``socModel``;
  * GraphInfo v2/v3: ``updateableTensors`` the graph's UPDATEABLE_* tensors, then the UPDATEABLE_*
    context tensors its nodes use; v3: ``graphBlobInfo`` a QnnHtpSystemContext_GraphBlobInfo_t V1
    (``spillFillBufferSize`` = the graph's ``spill_fill_bytes``; ``vtcmSize`` (bytes),
    ``optimizationLevel``, ``htpDlbc``, ``numHvxThreads`` from its HTP graph configs as the vendor
    writes them: unset, 4 MiB, 0, off, 0; see ``UNSET_HVX_THREADS``), ``startOpIndex`` 0 and
    ``endOpIndex`` its last op's index.

  Binaries the core rejects keep the core's rule id (``QNNEMU-binary-*``) with the System code:
  foreign (e.g. the vendor's), truncated, corrupted, future-version binaries give
  QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY;
- System/QnnSystemTensor.h ``systemTensorGetMemoryFootprint``: elements x element size of a dense
  tensor (the maximum, dimensions being maxima), with the vendor library's codes for what it
  refuses (other data formats, 4-bit and unknown data types, NULL dimensions: INVALID_TENSOR);
  stricter than it on tensor versions other than 1/2, ranks above 32 and sizes beyond uint64_t.

The DLC entries (System/QnnSystemDlc.h) answer QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE and log
why: the emulator has no DLC reader.  Entries answering a not-supported code are registered with
``system_not_supported``; an implementation is a function decorated with ``@system_entry`` named
like the table field.

The advertised System API version is 1.15.0 (what the vendor's current libQnnSystem.so reports
and ONNX Runtime's QNN EP requires); ``QNNEMU_SYSTEM_API_VERSION=1.NN[.P]`` (1.7 or later)
changes it.  The table has the 89 entries of QnnSystemInterface_ImplementationV1_14_t; the C
shim pads it with slots answering UNSUPPORTED_FEATURE for clients built against newer headers.
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import threading
from typing import Any

import numpy as np

from ..core.handles import HANDLES
from ..core.log import Logger, valid_level
from ..core.system_profile import SerializationTarget, data_record, event_record, object_record
from ..errors import QnnError
from ..headers import Q, cdef as header_cdef, system_interface_fields
from ..htp import soc as socs
from ..htp.settings import DEFAULT_VTCM_BYTES
from ..location import Location
from ..rules import fail
from ..spec import dtypes
from .framework import NULL, Library, c_str as _str, hval as _hval, newest_logger, read_scalar, require_pointer

ffi: Any = None   # set by install() (cffi objects: no type stubs)
lib: Any = None

DEFAULT_SYSTEM_API = (1, 15, 0)
MIN_SYSTEM_API_MINOR = 7
MAX_EVENT_DEPTH = 64           # sub-event nesting accepted by serializeEventData
MAX_EVENTS_PER_CALL = 1 << 22  # events (sub-events included) one serializeEventData call may hold
MAX_OBJECT_BYTES = 64 << 20    # OBJECT event payloads written in full up to this size

_lock = threading.Lock()


class SystemLog:
    """A ``systemLogCreate`` handle: the app's callback and level, for the System library's
    own messages.  Not a ``Logger`` handle, so the backend never mistakes it for one."""

    def __init__(self, logger: Logger):
        self.log = logger


def system_api_version() -> tuple[int, int, int]:
    """The System API version advertised; QNNEMU_SYSTEM_API_VERSION=1.NN[.P] overrides it."""
    text = os.environ.get("QNNEMU_SYSTEM_API_VERSION")
    if not text:
        return DEFAULT_SYSTEM_API
    try:
        nums = [int(p) for p in text.strip().split(".")]
    except ValueError:
        nums = []
    if len(nums) not in (2, 3) or nums[0] != 1 or not MIN_SYSTEM_API_MINOR <= nums[1] <= 99:
        raise QnnError(Q.QNN_COMMON_ERROR_INVALID_ARGUMENT,
                       f"QNNEMU_SYSTEM_API_VERSION='{text}': must be 1.{MIN_SYSTEM_API_MINOR}[.P] or later",
                       rule="QNNEMU-env-system-api")
    return (nums[0], nums[1], nums[2] if len(nums) == 3 else 0)


LIBRARY = Library("libQnnSystem.so", "QnnSystemInterface_getProviders", "qnnemu_sys_", "qnnemu_sys_embed_init",
                  "System table", lambda: newest_logger(SystemLog, lambda s: s.log))
_active_logger = LIBRARY.active_logger
system_entry = LIBRARY.entry


def system_not_supported(name: str, code: int, why: str) -> None:
    LIBRARY.not_supported(name, code, why, "QNNEMU-system-not-supported")


def _require(ptr, code: int, func: str, what: str) -> None:
    if ptr == NULL:   # the location is built only for a refusal
        require_pointer(ptr, Location(func).path(what), code, "QNNEMU-system-arg-null")


# ------------------------------------------------------------------------------------- log
@system_entry
def systemLogCreate(callback, maxLogLevel, logger):
    func = "systemLogCreate"
    _require(logger, Q.QNN_LOG_ERROR_INVALID_ARGUMENT, func, "logger")
    if not valid_level(int(maxLogLevel)):
        fail(Location(func).path("maxLogLevel"), "QNNEMU-systemLog-level",
             f"{int(maxLogLevel)} is not a QnnLog_Level_t (1=ERROR .. 5=DEBUG)",
             code=Q.QNN_LOG_ERROR_INVALID_ARGUMENT)
    sink = None
    if callback != ffi.NULL:
        cb = ffi.cast("void *", callback)

        def sink(level, timestamp, message, _cb=cb):
            lib.qnnemu_sys_log_emit(_cb, level, timestamp, message.encode("utf-8", "replace"))
    logger[0] = ffi.cast("Qnn_LogHandle_t", HANDLES.new(SystemLog(Logger(sink, int(maxLogLevel)))))


@system_entry
def systemLogSetLogLevel(logger, maxLogLevel):
    func = "systemLogSetLogLevel"
    log = HANDLES.get(_hval(logger), SystemLog, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    if not valid_level(int(maxLogLevel)):
        fail(Location(func).path("maxLogLevel"), "QNNEMU-systemLog-level",
             f"{int(maxLogLevel)} is not a QnnLog_Level_t (1=ERROR .. 5=DEBUG)",
             code=Q.QNN_LOG_ERROR_INVALID_ARGUMENT)
    log.log.level = int(maxLogLevel)


@system_entry
def systemLogFree(logger):
    log = HANDLES.get(_hval(logger), SystemLog, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    log.log.freed = True
    HANDLES.release(_hval(logger))


# ------------------------------------------------------------------------- profile serialization
def _target(handle, func: str) -> SerializationTarget:
    return HANDLES.get(_hval(handle), SerializationTarget, Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_HANDLE,
                       "serializationTarget")


@system_entry
def systemProfileCreateSerializationTarget(serializationTargetInfo, configs, numConfigs, serializationTarget):
    func = "systemProfileCreateSerializationTarget"
    bad = Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT
    _require(serializationTarget, bad, func, "serializationTarget")
    info = serializationTargetInfo
    if int(info.type) != Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE:
        fail(Location(func).path("serializationTargetInfo.type"), "QNNEMU-systemProfile-target-type",
             f"{int(info.type)} (only "
             f"QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE is defined)", code=bad)
    name = _str(info.file.fileName)
    if not name:
        fail(Location(func), "QNNEMU-systemProfile-target-name",
             "serializationTargetInfo.file.fileName is NULL or empty", code=bad)
    directory = _str(info.file.fileDirectory) or "."
    n = int(numConfigs)
    if n and configs == ffi.NULL:
        fail(Location(func), "QNNEMU-system-arg-null", f"configs is NULL with numConfigs {n}", code=bad)
    header: dict[str, str | None] | None = None
    max_messages = None
    for i in range(n):
        c = configs[i]
        t = int(c.type)
        if t == Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_MAX_NUM_MESSAGES:
            max_messages = int(c.maxNumMessages)
        elif t == Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_SERIALIZATION_HEADER:
            h = c.serializationHeader
            header = {"appName": _str(h.appName), "appVersion": _str(h.appVersion),
                      "backendVersion": _str(h.backendVersion)}
        else:
            fail(Location(func).path(f"configs[{i}].type"), "QNNEMU-systemProfile-config-type",
                 f"unknown serialization target config {t}", code=bad)
    target = SerializationTarget(os.path.join(directory, name), header, max_messages, system_api_version(),
                                 _active_logger(), func)
    serializationTarget[0] = ffi.cast("QnnSystemProfile_SerializationTargetHandle_t", HANDLES.new(target))


class _Walk:
    """Converts a tree of QnnSystemProfile_ProfileEventV1_t into JSON objects, bounded."""

    def __init__(self, func: str):
        self.func = func
        self.count = 0

    def events(self, ptr, n: int, path: str, depth: int) -> list[dict]:
        if n and ptr == ffi.NULL:
            fail(Location(self.func), "QNNEMU-systemProfile-events-null",
                 f"{path} is NULL with {n} event(s)", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
        if depth > MAX_EVENT_DEPTH:
            fail(Location(self.func).path(f"{path}"), "QNNEMU-systemProfile-events-depth",
                 f"sub-events nested deeper than {MAX_EVENT_DEPTH} levels "
                 f"(a cycle?)", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
        self.count += n
        if self.count > MAX_EVENTS_PER_CALL:
            fail(Location(self.func).path(f"{path}"), "QNNEMU-systemProfile-events-count",
                 f"more than {MAX_EVENTS_PER_CALL} events in one call",
                 code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
        return [self.event(ptr[i], f"{path}[{i}]", depth) for i in range(n)]

    def event(self, e, path: str, depth: int) -> dict:
        t = int(e.type)
        if t == Q.QNN_SYSTEM_PROFILE_EVENT_DATA:
            d = e.eventData
            fields: dict[str, Any] = {"type": int(d.type), "unit": int(d.unit), "value": int(d.value),
                                      "identifier": _str(d.identifier)}
        elif t == Q.QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA:
            x = e.extendedEventData
            if int(x.version) != Q.QNN_PROFILE_DATA_VERSION_1:
                fail(Location(self.func).path(f"{path}.extendedEventData.version"),
                     "QNNEMU-systemProfile-extended-version",
                     f"{int(x.version)} is not "
                     f"QNN_PROFILE_DATA_VERSION_1", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
            v1 = x.v1
            fields = {"type": int(v1.type), "unit": int(v1.unit), "extendedVersion": 1,
                      "timestamp": int(v1.timestamp), "identifier": _str(v1.identifier)}
            if int(v1.unit) == Q.QNN_PROFILE_EVENTUNIT_OBJECT:
                o = v1.backendOpaqueObject
                length = int(o.opaqueObject.len)
                data = None
                if o.opaqueObject.data != ffi.NULL and length <= MAX_OBJECT_BYTES:
                    data = bytes(ffi.buffer(o.opaqueObject.data, length))
                fields["object"] = object_record(_str(o.fileName), data, length)
            else:
                fields["valueDataType"], fields["value"] = read_scalar(v1.value)
        else:
            fail(Location(self.func).path(f"{path}.type"), "QNNEMU-systemProfile-event-type",
                 f"{t} is neither QNN_SYSTEM_PROFILE_EVENT_DATA nor "
                 f"QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
        sub = self.events(e.profileSubEventData, int(e.numSubEvents), f"{path}.profileSubEventData", depth + 1)
        return event_record(t, fields, sub)


@system_entry
def systemProfileSerializeEventData(serializationTarget, eventData, numEvents):
    func = "systemProfileSerializeEventData"
    bad = Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT
    target = _target(serializationTarget, func)
    n = int(numEvents)
    if eventData == ffi.NULL:
        fail(Location(func), "QNNEMU-system-arg-null", "eventData is NULL", code=bad)
    walk = _Walk(func)
    records = []
    for i in range(n):
        p = eventData[i]
        path = f"eventData[{i}]"
        if p == ffi.NULL:
            fail(Location(func), "QNNEMU-system-arg-null", f"{path} is NULL", code=bad)
        if int(p.version) != Q.QNN_SYSTEM_PROFILE_DATA_VERSION_1:
            fail(Location(func).path(f"{path}.version"), "QNNEMU-systemProfile-data-version",
                 f"{int(p.version)} is not QNN_SYSTEM_PROFILE_DATA_VERSION_1", code=bad)
        h = p.v1.header
        header = {"startTime": int(h.startTime), "stopTime": int(h.stopTime), "startMem": int(h.startMem),
                  "stopMem": int(h.stopMem), "methodType": int(h.methodType), "visibility": int(h.visibility),
                  "graphName": _str(h.graphName)}
        events = walk.events(p.v1.profilingEvents, int(p.v1.numProfilingEvents), f"{path}.v1.profilingEvents", 0)
        records.append(data_record(header, events))
    target.append(records, func)


@system_entry
def systemProfileFreeSerializationTarget(serializationTarget):
    target = _target(serializationTarget, "systemProfileFreeSerializationTarget")
    target.close()
    HANDLES.release(_hval(serializationTarget))


# ------------------------------------------------------------------------- system contexts
BINARY_INFO_VERSIONS = (1, 2, 3)
DEFAULT_BINARY_INFO_VERSION = 3
# GraphBlobInfo values as the vendor's offline prepare writes them (libQnnHtp.so 2.51, probed on
# SM8550 and SM8750; tests/test_htp16_blob_info.py): ``numHvxThreads`` 0 when NUM_HVX_THREADS is
# not configured (the graph runs with the SoC's default, its maximum), the SoC's maximum for an
# explicit 0, the (clipped) count otherwise; ``vtcmSize`` in bytes -- the default 4 MiB when no
# VTCM size is configured, the SoC's whole VTCM for 0, the request otherwise (capped at the SoC's);
# ``optimizationLevel`` 0 unless FINALIZE_OPTIMIZATION_FLAG is configured.  These are the values
# the graph is prepared and runs with (qnnemu/htp/settings.py ``graph_settings``).
UNSET_HVX_THREADS = 0
UNSET_OPTIMIZATION_LEVEL = 0
# QnnHtpSystemContext.h numbers its V1 info blobs 0.0.1 (hwInfoBlobVersion of BinaryInfo v1/v2).
HTP_INFO_BLOB_VERSION = (0, 0, 1)

_BINARY_TO_SYSTEM = {
    Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT: Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT,
    Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY: Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
    Q.QNN_CONTEXT_ERROR_BINARY_VERSION: Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
}
_UPDATEABLE_TYPES = frozenset({Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC, Q.QNN_TENSOR_TYPE_UPDATEABLE_NATIVE,
                               Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ,
                               Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE})
_SCALE_OFFSET_PAIR = np.dtype([("scale", "<f4"), ("offset", "<i4")])
_htp_ffi: Any = None


def _htp():
    """A cffi FFI (ABI mode, no library) declaring HTP/QnnHtpSystemContext.h and HTP/QnnHtpDevice.h.

    The library's FFI is generated from System/QnnSystemInterface.h, which includes neither; the
    HTP structs the binary info points to are allocated here, from the same headers (same layout).
    """
    global _htp_ffi
    with _lock:
        if _htp_ffi is None:
            import cffi
            f = cffi.FFI()
            f.cdef(header_cdef(("HTP/QnnHtpSystemContext.h", "HTP/QnnHtpDevice.h"), prototypes=False))
            _htp_ffi = f
    return _htp_ffi


class SystemContext:
    """A ``systemContextCreate`` handle.  It owns the QnnSystemContext_BinaryInfo_t (and every
    struct, array and string it points to) of its latest successful GetBinaryInfo/GetMetaData
    call: valid until the next such call on this handle or ``systemContextFree``."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answer: _Arena | None = None


class _Arena:
    """The C memory of one binary-info answer: cffi owners kept alive together, and their size."""

    def __init__(self):
        self.keep: list = []
        self.size = 0

    def new(self, ctype: str, init=None, f=None):
        f = f or ffi
        obj = f.new(ctype, init)
        self.keep.append(obj)
        self.size += f.sizeof(obj)
        return obj

    def string(self, text: str):
        return self.new("char[]", text.encode("utf-8"))

    def array(self, ctype: str, data: bytes, count: int):
        """``count`` elements of ``ctype`` holding ``data`` (little-endian bytes); NULL if empty."""
        if count == 0:
            return ffi.NULL
        arr = self.new(f"{ctype}[]", count)
        ffi.memmove(arr, data, len(data))
        return arr

    @staticmethod
    def foreign(ptr, f, ctype: str = "void *"):
        """An object of the HTP FFI as a pointer of the library's FFI."""
        return ffi.cast(ctype, int(f.cast("uintptr_t", ptr)))


def binary_info_version() -> int:
    """The QnnSystemContext_BinaryInfo_t version answered: 3, or QNNEMU_SYSTEM_BINARY_INFO_VERSION."""
    text = os.environ.get("QNNEMU_SYSTEM_BINARY_INFO_VERSION")
    if not text:
        return DEFAULT_BINARY_INFO_VERSION
    try:
        version = int(text.strip())
    except ValueError:
        version = 0
    if version not in BINARY_INFO_VERSIONS:
        raise QnnError(Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT,
                       f"QNNEMU_SYSTEM_BINARY_INFO_VERSION='{text}': must be 1, 2 or 3 "
                       f"(QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_*)", rule="QNNEMU-env-system-binary-info-version")
    return version


def _inspect(func: str, binaryBuffer, binaryBufferSize):
    """The checked description of a qnnemu context binary (core/binary.py), with the context
    error codes of the core mapped to QnnSystemContext_Error_t (the rule ids stay)."""
    from ..core import binary  # imported on first use: it brings the op definitions along
    bad = Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT
    _require(binaryBuffer, bad, func, "binaryBuffer")
    size = int(binaryBufferSize)
    if size == 0 or size > sys.maxsize:
        fail(Location(func).path("binaryBufferSize"), "QNNEMU-systemContext-buffer-size",
             f"{size} is not the size of a context binary "
             f"(1 .. {sys.maxsize})", code=bad)
    view = ffi.buffer(ffi.cast("char *", binaryBuffer), size)
    try:
        return binary.inspect(view, func=func)
    except QnnError as err:
        raise QnnError(_BINARY_TO_SYSTEM.get(err.code, Q.QNN_SYSTEM_CONTEXT_ERROR_OPERATION_FAILED),
                       err.detail, rule=err.rule) from None


def _set_version(dst, triple) -> None:
    dst.major, dst.minor, dst.patch = (int(x) for x in triple)


def _pairs(scales, offsets) -> bytes:
    out = np.empty(len(scales), _SCALE_OFFSET_PAIR)
    out["scale"], out["offset"] = scales, offsets
    return out.tobytes()


def _fill_quant(arena: _Arena, qp, q, dtype: int) -> None:
    """Qnn_QuantizeParams_t from a stored QuantSpec (docs/context-binary.md "quant")."""
    if q is None:
        qp.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
        qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_UNDEFINED
        return
    qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    qp.quantizationEncoding = enc = int(q.encoding)
    # BW_ encodings without a stored bit width: the storage type's.
    bits = int(q.bitwidth) if q.bitwidth else 8 * dtypes.itemsize(dtype)
    if enc == Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET:
        qp.scaleOffsetEncoding.scale, qp.scaleOffsetEncoding.offset = float(q.scale), int(q.offset)
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET:
        b = qp.bwScaleOffsetEncoding
        b.bitwidth, b.scale, b.offset = bits, float(q.scale), int(q.offset)
    elif enc == Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET:
        a = qp.axisScaleOffsetEncoding
        a.axis, a.numScaleOffsets = int(q.axis), len(q.scale)
        a.scaleOffset = arena.array("Qnn_ScaleOffset_t", _pairs(q.scale, q.offset), len(q.scale))
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET:
        b = qp.bwAxisScaleOffsetEncoding
        b.bitwidth, b.axis, b.numElements = bits, int(q.axis), len(q.scale)
        b.scales = arena.array("float", np.asarray(q.scale, "<f4").tobytes(), len(q.scale))
        b.offsets = arena.array("int32_t", np.asarray(q.offset, "<i4").tobytes(), len(q.offset))
    elif enc == Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION:
        blocks = np.ascontiguousarray(q.block_scales)
        bw = arena.new("Qnn_BlockwiseExpansion_t *")
        bw.axis = int(q.axis)
        bw.scaleOffsets = arena.array("Qnn_ScaleOffset_t", _pairs(q.scale, q.offset), len(q.scale))
        bw.numBlocksPerAxis = int(blocks.shape[1])
        # The format keeps the block scales' storage type, not a narrower declared bit width
        # (the loader rebuilds them the same way).
        bw.blockScaleBitwidth = 8 * blocks.dtype.itemsize
        if blocks.dtype == np.uint8:
            bw.blockScaleStorageType = Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8
            bw.blocksScale8 = arena.array("uint8_t", blocks.tobytes(), blocks.size)
        else:
            bw.blockScaleStorageType = Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16
            bw.blocksScale16 = arena.array("uint16_t", blocks.astype("<u2").tobytes(), blocks.size)
        qp.blockwiseExpansion = bw


def _fill_tensor(arena: _Arena, dst, t, version: int) -> None:
    """A Qnn_Tensor_t (v1 or v2) describing a stored tensor; no data (clientBuf empty)."""
    dst.version = version
    v = dst.v1 if version == 1 else dst.v2
    v.id = t.id
    v.name = arena.string(t.name)
    v.type, v.dataFormat, v.dataType = t.type, t.data_format, t.dtype
    _fill_quant(arena, v.quantizeParams, t.quant, t.dtype)
    v.rank = len(t.dims)
    v.dimensions = arena.array("uint32_t", np.asarray(t.dims, "<u4").tobytes(), len(t.dims))
    v.memType = t.mem_type
    v.clientBuf.data, v.clientBuf.dataSize = ffi.NULL, 0
    if version == 2:
        v.isDynamicDimensions = ffi.NULL
        v.sparseParams.type = Q.QNN_SPARSE_LAYOUT_UNDEFINED
        v.isProduced = 0


def _tensor_array(arena: _Arena, tensors: list, version: int):
    if not tensors:
        return ffi.NULL
    arr = arena.new("Qnn_Tensor_t[]", len(tensors))
    for i, t in enumerate(tensors):
        _fill_tensor(arena, arr[i], t, version)
    return arr


def spill_fill_bytes(graph) -> int:
    """The graph's spill-fill buffer size as stored in the binary (0 when not planned)."""
    return int(getattr(graph, "spill_fill_bytes", 0) or 0)


def _htp_graph_settings(configs, header) -> tuple[int, int, int, int]:
    """(VTCM bytes, optimization level, DLBC, HVX threads) of a graph's GraphBlobInfo, from its
    stored HTP graph configs and the binary's SoC (see ``UNSET_HVX_THREADS``)."""
    htp = configs.get("htp") if isinstance(configs, dict) else None
    htp = htp if isinstance(htp, dict) else {}

    def member(option: str, name: str):
        entry = htp.get(option)
        return entry.get(name) if isinstance(entry, dict) else None

    soc = socs.soc_info(int(header.soc_model), int(header.htp_arch) or None)
    soc_vtcm = (int(header.vtcm_mb) << 20) if header.vtcm_mb else soc.vtcm_bytes
    vtcm = member("QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE", "vtcmSizeInMB")
    if vtcm is None:
        vtcm = member("QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB", "vtcmSizeInMB")
    vtcm_bytes = member("QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes")
    if isinstance(vtcm, int) and vtcm >= 0:
        request = vtcm << 20
    elif isinstance(vtcm_bytes, int) and vtcm_bytes >= 0:
        request = vtcm_bytes
    else:
        request = None
    if request is None:
        vtcm_size = min(DEFAULT_VTCM_BYTES, soc_vtcm)
    elif request == 0:      # 0: the whole VTCM of the SoC
        vtcm_size = soc_vtcm
    else:
        vtcm_size = min(request, soc_vtcm)
    level, dlbc = UNSET_OPTIMIZATION_LEVEL, 0
    opt = member("QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION", "optimizationOption")
    # A binary's configs are plain JSON: values the C fields cannot hold (a non-finite level, more
    # HVX threads than uint64_t counts) are described as unset.
    if (isinstance(opt, dict) and isinstance(opt.get("floatValue"), (int, float))
            and math.isfinite(opt["floatValue"])):
        if opt.get("type") == Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG:
            level = int(opt["floatValue"])
        elif opt.get("type") == Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC:
            dlbc = 1 if opt["floatValue"] else 0
    hvx = member("QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS", "numHvxThreads")
    if not isinstance(hvx, int) or not 0 <= hvx < 2**64:
        hvx = UNSET_HVX_THREADS
    elif hvx == 0 or hvx > soc.hvx_threads:
        hvx = soc.hvx_threads
    return min(vtcm_size, 0xFFFFFFFF), max(level, 0) & 0xFFFFFFFF, dlbc, hvx


def _graph_blob_info(arena: _Arena, graph, header):
    """QnnHtpSystemContext_GraphBlobInfo_t (V1) of one graph, as ``void *``."""
    f = _htp()
    blob = arena.new("QnnHtpSystemContext_GraphBlobInfo_t *", f=f)
    blob.version = Q.QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V1
    v1 = blob.contextBinaryGraphBlobInfoV1
    v1.spillFillBufferSize = spill_fill_bytes(graph)
    v1.vtcmSize, v1.optimizationLevel, v1.htpDlbc, v1.numHvxThreads = \
        _htp_graph_settings(graph.configs, header)
    return _Arena.foreign(blob, f), f.sizeof("QnnHtpSystemContext_GraphBlobInfo_t")


# LPAI graphs (libQnnLpaiEmu.so, docs/lpai.md "Context binaries"): the graph's ``configs["lpai"]``
# record of its memory plan.  No LPAI System header exists, so graphBlobInfo is qnnemu's layout:
# uint32_t[5] = {version 1, scratch, persistent, IO, scratch without sharing} (bytes).
LPAI_GRAPH_BLOB_FIELDS = ("scratch_mem_size", "persistent_mem_size", "io_size", "naive_scratch_size")


def _lpai_record(graph) -> dict | None:
    rec = graph.configs.get("lpai") if isinstance(graph.configs, dict) else None
    return rec if isinstance(rec, dict) else None


def _lpai_graph_blob_info(arena: _Arena, record: dict):
    values = [1] + [int(record.get(k, 0)) & 0xFFFFFFFF if isinstance(record.get(k, 0), int) else 0
                    for k in LPAI_GRAPH_BLOB_FIELDS]
    blob = arena.new("uint32_t[]", values)
    return ffi.cast("void *", blob), ffi.sizeof(blob)


def _hw_blob_info(arena: _Arena, graphs):
    """QnnHtpSystemContext_HwBlobInfo_t (V1) of BinaryInfo v1/v2: the graph needing the largest
    spill-fill buffer and that size (QNN HTP backend documentation, "QNN HTP Context Config
    Options", REGISTER_MULTI_CONTEXTS: "the index to the graph and respective spill fill buffer
    size"), as ``void *``."""
    f = _htp()
    blob = arena.new("QnnHtpSystemContext_HwBlobInfo_t *", f=f)
    blob.version = Q.QNN_SYSTEM_CONTEXT_HTP_HW_INFO_BLOB_VERSION_V1
    sizes = [spill_fill_bytes(g) for g in graphs]
    index = sizes.index(max(sizes)) if sizes else 0
    blob.contextBinaryHwInfoBlobV1_t.graphListIndex = index
    blob.contextBinaryHwInfoBlobV1_t.spillFillBufferSize = sizes[index] if sizes else 0
    return _Arena.foreign(blob, f), f.sizeof("QnnHtpSystemContext_HwBlobInfo_t")


def _context_blob_info(arena: _Arena, header):
    """QnnHtpSystemContext_ContextBlobInfo_t (V1: the HTP arch) for BinaryInfo v3's contextMetadata."""
    f = _htp()
    blob = arena.new("QnnHtpSystemContext_ContextBlobInfo_t *", f=f)
    blob.version = Q.QNN_SYSTEM_CONTEXT_HTP_CONTEXT_INFO_BLOB_VERSION_V1
    blob.contextBinaryContextBlobInfoV1.dspArch = header.htp_arch
    return _Arena.foreign(blob, f), f.sizeof("QnnHtpSystemContext_ContextBlobInfo_t")


def _platform_info(arena: _Arena, header):
    """QnnDevice_PlatformInfo_t (v1) of the device the binary was prepared for: one on-chip HTP
    as deviceGetInfo describes it (QnnHtpDevice_DeviceInfoExtension_t)."""
    from ..core.device import SOC_TABLE
    f = _htp()
    ext = arena.new("QnnHtpDevice_DeviceInfoExtension_t *", f=f)
    ext.devType = Q.QNN_HTP_DEVICE_TYPE_ON_CHIP
    chip = ext.onChipDevice
    chip.vtcmSize, chip.socModel, chip.arch = header.vtcm_mb, header.soc_model, header.htp_arch
    # SoC capabilities from the emulator's SoC table; an arch-only device as model_from_configs builds it.
    _, _, signed_pd, dlbc = SOC_TABLE.get(header.soc_model, (0, 0, True, header.htp_arch >= 75))
    chip.signedPdSupport, chip.dlbcSupport = signed_pd, dlbc
    cores = arena.new("QnnDevice_CoreInfo_t[]", 1)
    cores[0].version = Q.QNN_DEVICE_CORE_INFO_VERSION_1
    cores[0].v1.coreId, cores[0].v1.coreType = 0, Q.QNN_HTP_CORE_TYPE_NSP
    hw = arena.new("QnnDevice_HardwareDeviceInfo_t[]", 1)
    hw[0].version = Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1
    hw[0].v1.deviceId, hw[0].v1.deviceType = 0, Q.QNN_HTP_DEVICE_TYPE_ON_CHIP
    hw[0].v1.numCores, hw[0].v1.cores = 1, cores
    hw[0].v1.deviceInfoExtension = _Arena.foreign(ext, f, "QnnDevice_DeviceInfoExtension_t")
    info = arena.new("QnnDevice_PlatformInfo_t *")
    info.version = Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1
    info.v1.numHwDevices, info.v1.hwDevices = 1, hw
    return info


def _updateable(graph, context_tensors) -> list:
    """UPDATEABLE_* tensors of a graph: its own, then the context tensors its nodes use."""
    own = [t for t in graph.tensors if t.type in _UPDATEABLE_TYPES]
    used = {tid for n in graph.nodes for tid in itertools.chain(n.inputs, n.outputs) if tid is not None}
    return own + [t for t in context_tensors if t.type in _UPDATEABLE_TYPES and t.id in used]


def _graph_infos(arena: _Arena, info, version: int):
    """QnnSystemContext_GraphInfo_t[] in graph version ``version`` (= the BinaryInfo version);
    tensors are Qnn_Tensor_t v1 in version 1, v2 otherwise."""
    if not info.graphs:
        return ffi.NULL
    tensor_version = 1 if version == 1 else 2
    graphs = arena.new("QnnSystemContext_GraphInfo_t[]", len(info.graphs))
    for dst, g in zip(graphs, info.graphs):
        dst.version = version
        v = (dst.graphInfoV1, dst.graphInfoV2, dst.graphInfoV3)[version - 1]
        v.graphName = arena.string(g.name)
        v.numGraphInputs, v.graphInputs = len(g.inputs), _tensor_array(arena, g.inputs, tensor_version)
        v.numGraphOutputs, v.graphOutputs = len(g.outputs), _tensor_array(arena, g.outputs, tensor_version)
        if version >= 2:
            updateable = _updateable(g, info.context_tensors)
            v.numUpdateableTensors = len(updateable)
            v.updateableTensors = _tensor_array(arena, updateable, tensor_version)
        if version == 3:
            record = _lpai_record(g)
            v.graphBlobInfo, v.graphBlobInfoSize = (_graph_blob_info(arena, g, info.header) if record is None
                                                    else _lpai_graph_blob_info(arena, record))
            # qnnemu never splits a graph: it spans its own ops, first to last.
            v.startOpIndex, v.endOpIndex = 0, max(len(g.nodes) - 1, 0)
    return graphs


def build_binary_info(info, version: int) -> tuple[object, _Arena]:
    """A QnnSystemContext_BinaryInfo_t of ``version`` describing ``info`` (core.binary.inspect),
    with everything it points to in the returned arena."""
    arena = _Arena()
    h = info.header
    root = arena.new("QnnSystemContext_BinaryInfo_t *")
    root.version = version
    v = (root.contextBinaryInfoV1, root.contextBinaryInfoV2, root.contextBinaryInfoV3)[version - 1]
    lpai = any(_lpai_record(g) is not None for g in info.graphs)
    # what the provider that prepared it reports: libQnnHtpEmu.so's, or libQnnLpaiEmu.so's
    v.backendId = Q.QNN_BACKEND_ID_LPAI if lpai else Q.QNN_BACKEND_ID_HTP
    v.buildId = arena.string(h.build_id)
    _set_version(v.coreApiVersion, h.core_api)
    _set_version(v.backendApiVersion, (Q.QNN_LPAI_API_VERSION_MAJOR, Q.QNN_LPAI_API_VERSION_MINOR,
                                       Q.QNN_LPAI_API_VERSION_PATCH) if lpai else h.backend_api)
    v.socVersion = arena.string(f"V{h.htp_arch}")
    _set_version(v.contextBlobVersion, (h.format_version, 0, 0))
    v.contextBlobSize = h.total_size
    tensor_version = 1 if version == 1 else 2
    v.numContextTensors = len(info.context_tensors)
    v.contextTensors = _tensor_array(arena, info.context_tensors, tensor_version)
    v.numGraphs, v.graphs = len(info.graphs), _graph_infos(arena, info, version)
    if version in (1, 2):
        _set_version(v.hwInfoBlobVersion, HTP_INFO_BLOB_VERSION)
        v.hwInfoBlob, v.hwInfoBlobSize = _hw_blob_info(arena, info.graphs)
    if version >= 2:
        v.platformInfo = _platform_info(arena, h)
    if version == 3:
        v.contextMetadata, v.contextMetadataSize = _context_blob_info(arena, h)
        v.socModel = h.soc_model
    return root, arena


def _binary_info_call(func: str, sysCtxHandle, binaryBuffer, binaryBufferSize, binaryInfo, binaryInfoSize) -> None:
    bad = Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT
    sc = HANDLES.get(_hval(sysCtxHandle), SystemContext, Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_HANDLE, "sysCtxHandle")
    _require(binaryInfo, bad, func, "binaryInfo")
    if binaryInfoSize is not None:
        _require(binaryInfoSize, bad, func, "binaryInfoSize")
    version = binary_info_version()
    info = _inspect(func, binaryBuffer, binaryBufferSize)
    root, arena = build_binary_info(info, version)
    with sc.lock:
        sc.answer = arena  # the previous answer's memory goes now, as documented
    binaryInfo[0] = root
    if binaryInfoSize is not None:
        binaryInfoSize[0] = arena.size
    _active_logger().debug(f"{func}: binary info v{version} of a {info.header.total_size}-byte context binary: "
                           f"{len(info.graphs)} graph(s) {info.graph_names}, "
                           f"{len(info.context_tensors)} context tensor(s)")


@system_entry
def systemContextCreate(sysCtxHandle):
    _require(sysCtxHandle, Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT, "systemContextCreate", "sysCtxHandle")
    sysCtxHandle[0] = ffi.cast("QnnSystemContext_Handle_t", HANDLES.new(SystemContext()))


@system_entry
def systemContextGetBinaryInfo(sysCtxHandle, binaryBuffer, binaryBufferSize, binaryInfo, binaryInfoSize):
    _binary_info_call("systemContextGetBinaryInfo", sysCtxHandle, binaryBuffer, binaryBufferSize,
                      binaryInfo, binaryInfoSize)


@system_entry
def systemContextGetMetaData(sysCtxHandle, binaryBuffer, binaryBufferSize, binaryInfo):
    # The same description as GetBinaryInfo: reading a qnnemu binary's metadata is what
    # GetBinaryInfo does (the weights are never touched).
    _binary_info_call("systemContextGetMetaData", sysCtxHandle, binaryBuffer, binaryBufferSize, binaryInfo, None)


@system_entry
def systemContextFree(sysCtxHandle):
    sc = HANDLES.get(_hval(sysCtxHandle), SystemContext, Q.QNN_SYSTEM_CONTEXT_ERROR_INVALID_HANDLE, "sysCtxHandle")
    HANDLES.release(_hval(sysCtxHandle))
    with sc.lock:
        sc.answer = None


# -------------------------------------------------------------------------- tensor footprints
MAX_FOOTPRINT_RANK = 32          # as the context binary format: a bound before reading dimensions
_UINT64_MAX = (1 << 64) - 1
# 4-bit fixed point has no fixed footprint (packed or a byte per element depends on the
# backend): the vendor's library answers INVALID_TENSOR for them, so do we.
_NO_FOOTPRINT_TYPES = frozenset({Q.QNN_DATATYPE_SFIXED_POINT_4, Q.QNN_DATATYPE_UFIXED_POINT_4})


@system_entry
def systemTensorGetMemoryFootprint(tensor, footprint):
    """Bytes needed to hold a dense (flat buffer) tensor's data: elements x element size.
    Dimensions are maxima (dynamic dimensions included), so this is the largest size; a 0
    dimension gives 0, as the vendor's library answers."""
    func = "systemTensorGetMemoryFootprint"
    invalid = Q.QNN_SYSTEM_TENSOR_ERROR_INVALID_TENSOR
    _require(footprint, Q.QNN_SYSTEM_TENSOR_ERROR_INVALID_ARGUMENT, func, "footprint")
    version = int(tensor.version)
    if version not in (1, 2):
        fail(Location(func).path("tensor.version"), "QNNEMU-systemTensor-version",
             f"{version} is neither QNN_TENSOR_VERSION_1 nor _2", code=invalid)
    v = tensor.v1 if version == 1 else tensor.v2
    path = f"tensor.v{version}"
    if int(v.dataFormat) != Q.QNN_TENSOR_DATA_FORMAT_DENSE:
        fail(Location(func).path(f"{path}.dataFormat"), "QNNEMU-systemTensor-data-format",
             f"{int(v.dataFormat)}: only QNN_TENSOR_DATA_FORMAT_DENSE "
             f"(flat buffer) tensors have a footprint", code=invalid)
    dtype = int(v.dataType)
    if not dtypes.is_known(dtype) or dtype in _NO_FOOTPRINT_TYPES:
        fail(Location(func).path(f"{path}.dataType"), "QNNEMU-systemTensor-dtype",
             f"{dtypes.name(dtype)} has no fixed element size", code=invalid)
    rank = int(v.rank)
    if rank > MAX_FOOTPRINT_RANK:
        fail(Location(func).path(f"{path}.rank"), "QNNEMU-systemTensor-rank",
             f"{rank} exceeds {MAX_FOOTPRINT_RANK}", code=invalid)
    if rank and v.dimensions == ffi.NULL:
        fail(Location(func), "QNNEMU-systemTensor-dims-null",
             f"{path}.dimensions is NULL with rank {rank}", code=invalid)
    dims = [int(v.dimensions[i]) for i in range(rank)]
    size = math.prod(dims) * dtypes.itemsize(dtype)
    if size > _UINT64_MAX:
        fail(Location(func).path(f"{path}.dimensions"), "QNNEMU-systemTensor-size",
             f"{dims} of {dtypes.name(dtype)} need {size} bytes, "
             f"more than a uint64_t holds", code=invalid)
    footprint[0] = size


# -------------------------------------------------------------------------------------- DLC
# The emulator has no DLC reader: a DLC (the converters' serialized graph) is composed into
# QNN API calls by the vendor's System library.  Every DLC entry answers UNSUPPORTED_FEATURE.
# The DLC record, graph-info, tensor-info and quantization accessors of System API 1.14 are DLC
# entries too: every table slot named systemDlc* that has no implementation above.
_DLC_ENTRIES = [n for n in system_interface_fields() if n.startswith("systemDlc") and n not in LIBRARY.entries]
for _name in _DLC_ENTRIES:
    system_not_supported(_name, Q.QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE,
                         "qnnemu has no DLC reader; build the graph through the QNN API (or load a qnnemu "
                         "context binary with contextCreateFromBinary) instead of a .dlc file")


# ------------------------------------------------------------------------------ installing
def __getattr__(name: str):
    # Why the embedded init refused the table, read by the C shim as this module's attribute.
    if name == "init_failure":
        return LIBRARY.init_failure
    raise AttributeError(name)


def install(the_ffi, the_lib, expected: tuple[str, ...] = ()) -> None:
    """Binds every entry to its ``extern "Python+C"`` slot; called from the embedding init code."""
    global ffi, lib
    ffi, lib = the_ffi, the_lib
    LIBRARY.install(the_ffi, the_lib, expected, system_api_version)
