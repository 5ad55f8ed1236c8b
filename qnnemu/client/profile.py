"""Profiling through qnnemu.client: a ``QnnProfile`` handle (QnnProfile.h) and its events, with
the HTP backend's extended event data (the optrace object; QNN HTP backend documentation, "QNN
HTP Optrace Profiling").
"""
from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from ..headers import Q
from .cabi import QnnCallError, ffi

if TYPE_CHECKING:
    from .backend import Backend

_PROFILE_LEVELS = {"basic": Q.QNN_PROFILE_LEVEL_BASIC, "detailed": Q.QNN_PROFILE_LEVEL_DETAILED,
                   "linting": Q.QNN_HTP_PROFILE_LEVEL_LINTING}


class Profile:
    """A ``profileCreate`` handle: pass it to graphFinalize / graphExecute /
    contextCreateFromBinary, then read :meth:`events` (each profiled call replaces the
    previous call's events, as the API says)."""

    def __init__(self, backend: Backend, level: str | int = "basic", optrace: bool = False):
        self.backend = backend
        if isinstance(level, str):
            if level not in _PROFILE_LEVELS:
                raise ValueError(f"profile level {level!r}: expected one of {sorted(_PROFILE_LEVELS)}")
            level = _PROFILE_LEVELS[level]
        self.level = int(level)
        out = ffi.new("Qnn_ProfileHandle_t *")
        backend.call("profileCreate", backend.handle, self.level, out)
        self.handle = out[0]
        if optrace:  # QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE (DETAILED / linting levels)
            cfg = ffi.new("QnnProfile_Config_t *")
            cfg.option = Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE
            cfg.enableOptrace = 1
            lst = ffi.new("const QnnProfile_Config_t *[]", [cfg, ffi.NULL])
            backend.call("profileSetConfig", self.handle, lst)

    def _event(self, event_id: int, depth: int) -> dict:
        data = ffi.new("QnnProfile_EventData_t *")
        self.backend.call("profileGetEventData", event_id, data)
        ident = ffi.string(data.identifier).decode("utf-8", "replace") \
            if data.identifier != ffi.NULL else ""
        event = {"identifier": ident, "type": int(data.type),
                 "type_name": _EVENT_TYPES.get(int(data.type), ""), "value": int(data.value),
                 "unit": int(data.unit), "unit_name": _EVENT_UNITS.get(int(data.unit), "")}
        ext = ffi.new("QnnProfile_ExtendedEventData_t *")
        try:
            self.backend.call("profileGetExtendedEventData", event_id, ext)
        except QnnCallError:
            ext = None  # a backend without extended event data
        if ext is not None and int(ext.version) == Q.QNN_PROFILE_DATA_VERSION_1:
            event["timestamp_us"] = int(ext.v1.timestamp)
            obj = ext.v1.backendOpaqueObject
            if int(ext.v1.unit) == Q.QNN_PROFILE_EVENTUNIT_OBJECT and obj.opaqueObject.data != ffi.NULL:
                payload = bytes(ffi.buffer(obj.opaqueObject.data, int(obj.opaqueObject.len)))
                event["file_name"] = ffi.string(obj.fileName).decode("utf-8", "replace") \
                    if obj.fileName != ffi.NULL else ""
                try:  # the emulator's optrace object is UTF-8 JSON
                    event["object"] = json.loads(payload.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    event["object_base64"] = base64.b64encode(payload).decode("ascii")
        if depth < 8:  # QNN nests one or two levels; the bound only guards a cyclic reply
            ids = ffi.new("const QnnProfile_EventId_t **")
            n = ffi.new("uint32_t *")
            try:
                self.backend.call("profileGetSubEvents", event_id, ids, n)
            except QnnCallError:
                n[0] = 0
            subs = [self._event(int(ids[0][i]), depth + 1) for i in range(n[0])]
            if subs:
                event["sub_events"] = subs
        return event

    def events(self) -> list[dict]:
        """The events of the last profiled call: ``{"identifier", "type", "type_name",
        "value", "unit", "unit_name"[, "sub_events"]}`` dicts."""
        ids = ffi.new("const QnnProfile_EventId_t **")
        n = ffi.new("uint32_t *")
        self.backend.call("profileGetEvents", self.handle, ids, n)
        return [self._event(int(ids[0][i]), 0) for i in range(n[0])]

    def free(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.backend.call("profileFree", handle)


# Generic event types first; the HTP-specific ones (QnnHtpProfile.h) fill the other values.
_EVENT_TYPES = {**{v: "HTP_" + k[len("QNN_HTP_PROFILE_EVENTTYPE_"):]
                   for v, k in Q.enum("QNN_HTP_PROFILE_EVENTTYPE_").items()},
                **{v: k[len("QNN_PROFILE_EVENTTYPE_"):]
                   for v, k in Q.enum("QNN_PROFILE_EVENTTYPE_").items()}}
_EVENT_UNITS = {v: k[len("QNN_PROFILE_EVENTUNIT_"):]
                for v, k in Q.enum("QNN_PROFILE_EVENTUNIT_").items()}
