"""QnnProfile.h: the seven profile entries of the function table, and the profile argument of
graphFinalize / graphExecute / contextCreateFromBinary* / contextFree (QNN HTP backend
documentation, "QNN HTP Profiling").

The profile objects and what every event means live in qnnemu/core/profile.py.  Here:

- ``profileCreate`` / ``profileSetConfig`` / ``profileFree`` check their arguments (rule ids
  ``QNNEMU-profileCreate-*``, ``QNNEMU-profileSetConfig-*``, ``QNNEMU-profile-*``);
- ``profileGetEvents`` / ``profileGetSubEvents`` hand out ``QnnProfile_EventId_t`` arrays owned
  by the profile (valid until profileFree or until the next profiled call replaces the
  events, as QnnProfile.h says of profile event memory);
- ``profileGetEventData`` fills ``QnnProfile_EventData_t`` (type, unit, value, identifier; a
  float value is rounded; an OBJECT event's value is its length in bytes),
  ``profileGetExtendedEventData`` a v1 ``QnnProfile_ExtendedEventData_t`` for every event:
  ``value`` is a ``Qnn_Scalar_t`` of QNN_DATATYPE_UINT_64 (or FLOAT_64 for a float value), or
  for a unit QNN_PROFILE_EVENTUNIT_OBJECT event (optrace) the ``backendOpaqueObject``
  {data, len, fileName} whose memory belongs to the profile (valid as long as the event);
  ``timestamp`` is microseconds since the epoch;
- ``start`` / ``recording`` / ``commit`` are what the graph and context entries use: ``start``
  validates a profile argument and notes the call's start time, ``recording`` marks the
  profile in use while the call works (and, for the context calls, notes the contexts alive
  before it: DSP heap profiling), ``commit`` stores the call's events once the whole call
  succeeded.
"""
from __future__ import annotations

import contextlib
import time

from ..core.backend import Backend
from ..core.handles import HANDLES
from ..core.profile import LEVEL_NAMES, CallRecorder, Profile, lookup_event
from ..headers import Q
from ..location import Location
from ..rules import fail
from .framework import require_pointer
from .library import configs as _configs, entry, ffi, hval as _hval


def _require(ptr, func: str, what: str) -> None:
    require_pointer(ptr, Location(func).field(what), Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT)


def _profile(handle, func: str) -> Profile:
    return HANDLES.get(_hval(handle), Profile, Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "profile")


# ------------------------------------------------------------------------- graph / context
class _Call:
    """A validated profile argument of one API call: the profile and when the call began."""

    __slots__ = ("profile", "func", "start_ns", "start_us")

    def __init__(self, profile: Profile, func: str):
        self.profile = profile
        self.func = func
        self.start_ns = time.perf_counter_ns()
        self.start_us = time.time_ns() // 1000


def start(handle, func: str, code: int) -> _Call | None:
    """Checks the ``profile`` argument of ``func`` (NULL: no profiling); ``code`` is what a bad
    handle returns (QNN_GRAPH_ERROR_SET_PROFILE, QNN_CONTEXT_ERROR_SET_PROFILE)."""
    if handle == ffi.NULL:
        return None
    prof = HANDLES.get(_hval(handle), Profile, code, "profileHandle")
    return _Call(prof, func)


# The calls whose profile may receive the DSP heap events (they create or free contexts).
_CONTEXT_CALLS = ("contextCreateFromBinary", "contextFree")


@contextlib.contextmanager
def recording(call: _Call | None, graph=None):
    """Yields a CallRecorder (None without profiling) around the work of a call -- for
    graphExecute the ``Graph.execute`` call, whose ``observer`` is ``rec.on_step`` -- and marks
    the profile in use meanwhile; pass the recorder to ``commit`` once the call succeeded."""
    if call is None:
        yield None
        return
    prof = call.profile
    rec = CallRecorder(prof, call.func, call.start_ns, call.start_us, graph)
    if call.func.startswith(_CONTEXT_CALLS):
        rec.watch_contexts(prof.backend)
    with prof.lock:
        prof.active_calls += 1
    try:
        rec.begin_wait()
        yield rec
        rec.end_wait()
    finally:
        with prof.lock:
            prof.active_calls -= 1


def commit(rec: CallRecorder | None, kind: str) -> None:
    """The call succeeded: its events (``kind``: init, finalize, execute or deinit) replace the
    profile's events.  A freed profile ignores them."""
    if rec is not None:
        rec.commit(kind)


# --------------------------------------------------------------------------------- entries
@entry
def profileCreate(backend, level, profile):
    func = "profileCreate"
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "backend")
    _require(profile, func, "profile")
    lvl = int(level)
    if lvl not in LEVEL_NAMES:
        fail(Location(func).path("level"), "QNNEMU-profileCreate-level",
             f"{lvl} is not a profile level of the HTP backend "
             f"(QNN_PROFILE_LEVEL_BASIC=1, QNN_PROFILE_LEVEL_DETAILED=2, "
             f"QNN_HTP_PROFILE_LEVEL_LINTING=7001)", code=Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT)
    prof = Profile(be, lvl, be.log)
    profile[0] = ffi.cast("Qnn_ProfileHandle_t", HANDLES.new(prof))


@entry
def profileSetConfig(profileHandle, config):
    func = "profileSetConfig"
    prof = _profile(profileHandle, func)
    if config == ffi.NULL:
        return
    prof.check_not_in_use(func, "profileHandle")
    for i, c in enumerate(_configs(config, "QnnProfile_Config_t", Location(func).field("config"))):
        opt = int(c.option)
        path = f"config[{i}]"
        if opt == Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS:
            prof.set_max_events(int(c.numMaxEvents), func, path)
        elif opt == Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE:
            prof.set_optrace(bool(c.enableOptrace), func, path)
        elif opt == Q.QNN_PROFILE_CONFIG_OPTION_CUSTOM:
            fail(Location(func).path(f"{path}.option"), "QNNEMU-profileSetConfig-custom",
                 "QNN_PROFILE_CONFIG_OPTION_CUSTOM: the HTP backend "
                 "defines no custom profile configs", code=Q.QNN_PROFILE_ERROR_UNSUPPORTED)
        else:
            fail(Location(func).path(f"{path}.option"), "QNNEMU-profileSetConfig-option",
                 f"unknown option {opt}", code=Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT)


def _id_array(owner: dict, events) -> object:
    """A ``QnnProfile_EventId_t[]`` of ``events`` kept in ``owner`` (the profile or event)."""
    arr = owner.get("ids")
    if arr is None:
        arr = owner["ids"] = ffi.new("QnnProfile_EventId_t[]", [e.id for e in events] or [0])
    return arr


@entry
def profileGetEvents(profile, profileEventIds, numEvents):
    func = "profileGetEvents"
    prof = _profile(profile, func)
    _require(profileEventIds, func, "profileEventIds")
    _require(numEvents, func, "numEvents")
    with prof.lock:
        events = list(prof.events)
        arr = _id_array(prof.abi, events)
    profileEventIds[0] = arr if events else ffi.NULL
    numEvents[0] = len(events)


@entry
def profileGetSubEvents(eventId, subEventIds, numSubEvents):
    func = "profileGetSubEvents"
    ev = lookup_event(int(eventId), Q.QNN_PROFILE_ERROR_INVALID_HANDLE, func)
    _require(subEventIds, func, "subEventIds")
    _require(numSubEvents, func, "numSubEvents")
    arr = _id_array(ev.abi, ev.sub)
    subEventIds[0] = arr if ev.sub else ffi.NULL
    numSubEvents[0] = len(ev.sub)


def _identifier(ev):
    if ev.identifier is None:
        return ffi.NULL
    buf = ev.abi.get("identifier")
    if buf is None:
        buf = ev.abi["identifier"] = ffi.new("char[]", ev.identifier.encode("utf-8", "replace"))
    return buf


def _object_buffers(ev):
    """C copies of an OBJECT event's bytes and file name, kept with the event."""
    bufs = ev.abi.get("object")
    if bufs is None:
        data = ffi.new("char[]", ev.payload) if ev.payload else ffi.NULL
        name = ffi.new("char[]", ev.file_name.encode("utf-8")) if ev.file_name is not None else ffi.NULL
        bufs = ev.abi["object"] = (data, name)
    return bufs


def _event(eventId, eventData, func: str):
    """The event a profileGet*EventData call asks about (its output pointer checked)."""
    ev = lookup_event(int(eventId), Q.QNN_PROFILE_ERROR_INVALID_HANDLE, func)
    _require(eventData, func, "eventData")
    return ev


@entry
def profileGetEventData(eventId, eventData):
    ev = _event(eventId, eventData, "profileGetEventData")
    eventData.type = ev.type
    eventData.unit = ev.unit
    eventData.value = max(0, round(ev.value))
    eventData.identifier = _identifier(ev)


@entry
def profileGetExtendedEventData(eventId, eventData):
    ev = _event(eventId, eventData, "profileGetExtendedEventData")
    eventData.version = Q.QNN_PROFILE_DATA_VERSION_1
    v1 = eventData.v1
    v1.type = ev.type
    v1.unit = ev.unit
    if ev.unit == Q.QNN_PROFILE_EVENTUNIT_OBJECT:
        obj = v1.backendOpaqueObject
        data, name = _object_buffers(ev)
        obj.opaqueObject.data = data
        obj.opaqueObject.len = len(ev.payload or b"")
        obj.fileName = name
    elif isinstance(ev.value, float):
        v1.value.dataType = Q.QNN_DATATYPE_FLOAT_64
        v1.value.doubleValue = ev.value
    else:
        v1.value.dataType = Q.QNN_DATATYPE_UINT_64
        v1.value.uint64Value = max(0, int(ev.value))
    v1.timestamp = ev.timestamp_us
    v1.identifier = _identifier(ev)


@entry
def profileFree(profile):
    func = "profileFree"
    prof = _profile(profile, func)
    prof.check_not_in_use(func, "profile")
    prof.free()
    HANDLES.release(_hval(profile))
