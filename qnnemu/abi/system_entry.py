"""System/QnnSystemInterface.h: the entries of libQnnSystem.so, as cffi ``def_extern``.

The System library is a separate cffi embedding module (``_qnnemu_system_abi``, built by
csrc/build_system.py) that may share the interpreter with libQnnHtpEmu.so; it imports neither
the backend's module nor its FFI.  Rules as in entry.py: every entry declares a non-zero
``error=`` and logs unexpected exceptions; expected failures are ``QnnError``s, logged with
their rule id through the newest live System logger (``systemLogCreate``) and the ``qnnemu``
Python logger, and their code returned.

Implemented: ``systemLogCreate`` / ``systemLogSetLogLevel`` / ``systemLogFree`` and the profile
serialization entries (``systemProfileCreateSerializationTarget`` / ``SerializeEventData`` /
``FreeSerializationTarget``; the file format is in qnnemu/core/system_profile.py).  Every other
entry (system contexts, tensor footprints, DLC) answers its component's UNSUPPORTED_FEATURE
code and logs why: to implement one, replace its ``system_not_supported`` line by a function
decorated with ``@system_entry`` named like the table field.

The advertised System API version is 1.15.0 (what the vendor's current libQnnSystem.so reports
and ONNX Runtime's QNN EP requires); ``QNNEMU_SYSTEM_API_VERSION=1.NN[.P]`` (1.7 or later)
changes it.  The table has the 16 entries of QnnSystemInterface_ImplementationV1_7_t; the C
shim pads it with slots answering UNSUPPORTED_FEATURE for clients built against newer headers.
"""
from __future__ import annotations

import os
import threading
import traceback

from .. import _version
from ..core.handles import HANDLES
from ..core.log import NULL_LOGGER, PY_LOGGER, Logger, valid_level
from ..core.system_profile import SerializationTarget, data_record, event_record, object_record
from ..errors import QnnError
from ..headers import Q

ffi = None
lib = None
PREFIX = "qnnemu_sys_"

DEFAULT_SYSTEM_API = (1, 15, 0)
MIN_SYSTEM_API_MINOR = 7
MAX_EVENT_DEPTH = 64           # sub-event nesting accepted by serializeEventData
MAX_EVENTS_PER_CALL = 1 << 22  # events (sub-events included) one serializeEventData call may hold
MAX_OBJECT_BYTES = 1 << 20     # OBJECT event payloads written in full up to this size

_ENTRIES: dict[str, object] = {}
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


def _active_logger() -> Logger:
    logs = HANDLES.live(SystemLog)
    return logs[-1].log if logs else NULL_LOGGER


def _fail(name: str, err: QnnError) -> int:
    if not err.detail.startswith(name + ":"):
        err = QnnError(err.code, f"{name}: {err.detail}", rule=err.rule)
    _active_logger().error(str(err))
    return err.code


def system_entry(fn):
    """Registers ``fn`` as the implementation of System table slot ``fn.__name__``."""
    name = fn.__name__

    def wrapper(*args):
        try:
            code = fn(*args)
            return Q.QNN_SUCCESS if code is None else code
        except QnnError as err:
            return _fail(name, err)

    wrapper.__name__ = name
    _ENTRIES[name] = wrapper
    return fn


def system_not_supported(name: str, code: int, why: str) -> None:
    def fn(*args):
        raise QnnError(code, f"{name}: not supported by qnnemu {_version.__version__}: {why}",
                       rule="QNNEMU-system-not-supported")
    fn.__name__ = name
    system_entry(fn)


def _onerror_for(name: str):
    def onerror(exc_type, exc_value, tb):
        try:
            _active_logger().error(f"{name}: internal error (returned QNN_COMMON_ERROR_GENERAL): {exc_value!r}")
            PY_LOGGER.debug("".join(traceback.format_exception(exc_type, exc_value, tb)))
        except Exception:  # logging must not raise inside cffi's error path
            pass
        return None
    return onerror


def _hval(handle) -> int:
    return int(ffi.cast("uintptr_t", handle))


def _str(p) -> str | None:
    if p == ffi.NULL:
        return None
    return ffi.string(p).decode("utf-8", errors="replace")


def _require(ptr, code: int, func: str, what: str) -> None:
    if ptr == ffi.NULL:
        raise QnnError(code, f"{func}: {what} is NULL", rule="QNNEMU-system-arg-null")


# ------------------------------------------------------------------------------------- log
@system_entry
def systemLogCreate(callback, maxLogLevel, logger):
    func = "systemLogCreate"
    _require(logger, Q.QNN_LOG_ERROR_INVALID_ARGUMENT, func, "logger")
    if not valid_level(int(maxLogLevel)):
        raise QnnError(Q.QNN_LOG_ERROR_INVALID_ARGUMENT,
                       f"{func}: maxLogLevel: {int(maxLogLevel)} is not a QnnLog_Level_t (1=ERROR .. 5=DEBUG)",
                       rule="QNNEMU-systemLog-level")
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
        raise QnnError(Q.QNN_LOG_ERROR_INVALID_ARGUMENT,
                       f"{func}: maxLogLevel: {int(maxLogLevel)} is not a QnnLog_Level_t (1=ERROR .. 5=DEBUG)",
                       rule="QNNEMU-systemLog-level")
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
        raise QnnError(bad, f"{func}: serializationTargetInfo.type: {int(info.type)} (only "
                            f"QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE is defined)",
                       rule="QNNEMU-systemProfile-target-type")
    name = _str(info.file.fileName)
    if not name:
        raise QnnError(bad, f"{func}: serializationTargetInfo.file.fileName is NULL or empty",
                       rule="QNNEMU-systemProfile-target-name")
    directory = _str(info.file.fileDirectory) or "."
    n = int(numConfigs)
    if n and configs == ffi.NULL:
        raise QnnError(bad, f"{func}: configs is NULL with numConfigs {n}", rule="QNNEMU-system-arg-null")
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
            raise QnnError(bad, f"{func}: configs[{i}].type: unknown serialization target config {t}",
                           rule="QNNEMU-systemProfile-config-type")
    target = SerializationTarget(os.path.join(directory, name), header, max_messages, system_api_version(),
                                 _active_logger(), func)
    serializationTarget[0] = ffi.cast("QnnSystemProfile_SerializationTargetHandle_t", HANDLES.new(target))


def _scalar(s) -> tuple[int, object]:
    dt = int(s.dataType)
    field = {
        Q.QNN_DATATYPE_INT_8: "int8Value", Q.QNN_DATATYPE_INT_16: "int16Value",
        Q.QNN_DATATYPE_INT_32: "int32Value", Q.QNN_DATATYPE_INT_64: "int64Value",
        Q.QNN_DATATYPE_UINT_8: "uint8Value", Q.QNN_DATATYPE_UINT_16: "uint16Value",
        Q.QNN_DATATYPE_UINT_32: "uint32Value", Q.QNN_DATATYPE_UINT_64: "uint64Value",
        Q.QNN_DATATYPE_FLOAT_16: "floatValue", Q.QNN_DATATYPE_FLOAT_32: "floatValue",
        Q.QNN_DATATYPE_FLOAT_64: "doubleValue", Q.QNN_DATATYPE_BOOL_8: "bool8Value",
        Q.QNN_DATATYPE_SFIXED_POINT_8: "int32Value", Q.QNN_DATATYPE_SFIXED_POINT_16: "int32Value",
        Q.QNN_DATATYPE_SFIXED_POINT_32: "int32Value", Q.QNN_DATATYPE_UFIXED_POINT_8: "uint32Value",
        Q.QNN_DATATYPE_UFIXED_POINT_16: "uint32Value", Q.QNN_DATATYPE_UFIXED_POINT_32: "uint32Value",
    }.get(dt)
    if dt == Q.QNN_DATATYPE_STRING:
        return dt, _str(s.stringValue)
    if field is None:
        return dt, None
    value = getattr(s, field)
    return dt, bool(value) if dt == Q.QNN_DATATYPE_BOOL_8 else value


class _Walk:
    """Converts a tree of QnnSystemProfile_ProfileEventV1_t into JSON objects, bounded."""

    def __init__(self, func: str):
        self.func = func
        self.count = 0

    def events(self, ptr, n: int, path: str, depth: int) -> list[dict]:
        if n and ptr == ffi.NULL:
            raise QnnError(Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{self.func}: {path} is NULL with {n} event(s)", rule="QNNEMU-systemProfile-events-null")
        if depth > MAX_EVENT_DEPTH:
            raise QnnError(Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{self.func}: {path}: sub-events nested deeper than {MAX_EVENT_DEPTH} levels "
                           f"(a cycle?)", rule="QNNEMU-systemProfile-events-depth")
        self.count += n
        if self.count > MAX_EVENTS_PER_CALL:
            raise QnnError(Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{self.func}: {path}: more than {MAX_EVENTS_PER_CALL} events in one call",
                           rule="QNNEMU-systemProfile-events-count")
        return [self.event(ptr[i], f"{path}[{i}]", depth) for i in range(n)]

    def event(self, e, path: str, depth: int) -> dict:
        t = int(e.type)
        if t == Q.QNN_SYSTEM_PROFILE_EVENT_DATA:
            d = e.eventData
            fields = {"type": int(d.type), "unit": int(d.unit), "value": int(d.value),
                      "identifier": _str(d.identifier)}
        elif t == Q.QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA:
            x = e.extendedEventData
            if int(x.version) != Q.QNN_PROFILE_DATA_VERSION_1:
                raise QnnError(Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT,
                               f"{self.func}: {path}.extendedEventData.version: {int(x.version)} is not "
                               f"QNN_PROFILE_DATA_VERSION_1", rule="QNNEMU-systemProfile-extended-version")
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
                fields["valueDataType"], fields["value"] = _scalar(v1.value)
        else:
            raise QnnError(Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{self.func}: {path}.type: {t} is neither QNN_SYSTEM_PROFILE_EVENT_DATA nor "
                           f"QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA", rule="QNNEMU-systemProfile-event-type")
        sub = self.events(e.profileSubEventData, int(e.numSubEvents), f"{path}.profileSubEventData", depth + 1)
        return event_record(t, fields, sub)


@system_entry
def systemProfileSerializeEventData(serializationTarget, eventData, numEvents):
    func = "systemProfileSerializeEventData"
    bad = Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT
    target = _target(serializationTarget, func)
    n = int(numEvents)
    if eventData == ffi.NULL:
        raise QnnError(bad, f"{func}: eventData is NULL", rule="QNNEMU-system-arg-null")
    walk = _Walk(func)
    records = []
    for i in range(n):
        p = eventData[i]
        path = f"eventData[{i}]"
        if p == ffi.NULL:
            raise QnnError(bad, f"{func}: {path} is NULL", rule="QNNEMU-system-arg-null")
        if int(p.version) != Q.QNN_SYSTEM_PROFILE_DATA_VERSION_1:
            raise QnnError(bad, f"{func}: {path}.version: {int(p.version)} is not QNN_SYSTEM_PROFILE_DATA_VERSION_1",
                           rule="QNNEMU-systemProfile-data-version")
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


# ----------------------------------------------------------------------- not supported yet
for _name in ("systemContextCreate", "systemContextGetBinaryInfo", "systemContextGetMetaData",
              "systemContextFree"):
    system_not_supported(_name, Q.QNN_SYSTEM_CONTEXT_ERROR_UNSUPPORTED_FEATURE,
                         "system contexts (context binary inspection) come with context binaries, "
                         "which are not implemented yet")
system_not_supported("systemTensorGetMemoryFootprint", Q.QNN_SYSTEM_TENSOR_ERROR_UNSUPPORTED_FEATURE,
                     "tensor memory footprints need the HTP memory layout model, not implemented yet")
for _name in ("systemDlcCreateFromFile", "systemDlcCreateFromBinary", "systemDlcComposeGraphs",
              "systemDlcGetOpMappings", "systemDlcFree"):
    system_not_supported(_name, Q.QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE,
                         "DLC files are not implemented yet")


# ------------------------------------------------------------------------------ installing
def install(the_ffi, the_lib, expected: tuple[str, ...] = ()) -> None:
    """Binds every entry to its ``extern "Python+C"`` slot; called from the embedding init code."""
    global ffi, lib
    ffi = the_ffi
    lib = the_lib
    missing = sorted(set(expected) - set(_ENTRIES))
    for name, wrapper in _ENTRIES.items():
        the_ffi.def_extern(name=PREFIX + name, error=Q.QNN_COMMON_ERROR_GENERAL,
                           onerror=_onerror_for(name))(wrapper)

    @the_ffi.def_extern(name="qnnemu_sys_embed_init", error=0,
                        onerror=_onerror_for("QnnSystemInterface_getProviders"))
    def embed_init(baked_version, system_api):
        if missing:
            PY_LOGGER.error("qnnemu: no implementation for System table entries %s", missing)
            return -3
        baked = _str(baked_version)
        if baked != _version.__version__:
            PY_LOGGER.error("libQnnSystem.so was built for qnnemu %s but the importable package is %s; "
                            "rebuild/reinstall so they match", baked, _version.__version__)
            return -1
        try:
            version = system_api_version()
        except QnnError as err:
            PY_LOGGER.error("%s", err)
            return -2
        system_api[0], system_api[1], system_api[2] = version
        return 1
