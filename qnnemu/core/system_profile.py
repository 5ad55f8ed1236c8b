"""System/QnnSystemProfile.h: serialization targets of libQnnSystem.so and their file format.

``QnnSystemProfile_createSerializationTarget`` names a file (``fileDirectory``/``fileName``;
ONNX Runtime's QNN EP passes ``<profiling csv name>_qnn.log`` next to its CSV),
``QnnSystemProfile_serializeEventData`` appends ``QnnSystemProfile_ProfileData_t`` records to it
and ``QnnSystemProfile_freeSerializationTarget`` closes it.  The vendor writes a binary format
for its qnn-profile-viewer; qnnemu writes **JSON Lines** (one JSON object per line, UTF-8), the
"qnnemu-system-profile" format, version 1:

- the first line of a new (or empty) file is the file header::

    {"kind": "header", "format": "qnnemu-system-profile", "version": 1,
     "appName": ..., "appVersion": ..., "backendVersion": ...,     # SERIALIZATION_HEADER config
     "producer": "qnnemu <version> libQnnSystem.so", "systemApiVersion": "1.15.0",
     "createdUs": <microseconds since the epoch>}

  (the header strings are null when the application gave no SERIALIZATION_HEADER config);
  a target opened on an existing file appends to it without a second header, as the vendor
  library does, so one file collects every call of a session;
- every serialized ``QnnSystemProfile_ProfileData_t`` is one line::

    {"kind": "profileData", "version": 1,
     "header": {"startTime": .., "stopTime": .., "startMem": .., "stopMem": ..,
                "methodType": 1, "methodTypeName": "BACKEND_EXECUTE",
                "visibility": 0, "visibilityName": "PUBLIC", "graphName": "g0"},
     "events": [<event>, ...]}

  and every ``QnnSystemProfile_ProfileEventV1_t`` (recursively, ``subEvents``)::

    {"dataType": "EVENT_DATA", "type": 400, "typeName": "EXECUTE", "unit": 1, "unitName": "US",
     "value": 1234, "identifier": "QNN (execute) time", "subEvents": [...]}

  extended events (``"dataType": "EXTENDED_EVENT_DATA"``) also carry ``"extendedVersion"``,
  ``"timestamp"`` and ``"valueDataType"`` (the Qnn_Scalar_t data type); their ``value`` is the
  scalar (int, float, bool or string); unit OBJECT events carry ``"object": {"fileName": ..,
  "len": .., "dataBase64": ..}`` instead.

Every event the backend reports is carried as the application passes it: the HTP execute
stats, the DETAILED per-step and the linting sub-event trees (``typeName`` e.g.
``HTP_NODE_WAIT``), the DSP heap events, and the optrace object (``typeName`` ``TRACE``, unit
``OBJECT``, ``fileName`` "<graph>.optrace.json", the payload the UTF-8 JSON document described
in qnnemu/core/profile.py).

``read_profile_log(path)`` reads such a file back (tests, tools); ``event_object(event)`` gives
an OBJECT event's bytes and ``optrace_documents(records)`` the optrace documents of a log.
"""
from __future__ import annotations

import base64
import json
import os
import threading
import time
from typing import Any, TextIO

from .. import _version
from ..headers import Q
from ..location import Location
from ..rules import error, fail
from .log import NULL_LOGGER, Logger

FORMAT = "qnnemu-system-profile"
FORMAT_VERSION = 1

UNIT_NAMES = {Q.QNN_PROFILE_EVENTUNIT_MICROSEC: "US", Q.QNN_PROFILE_EVENTUNIT_BYTES: "BYTES",
              Q.QNN_PROFILE_EVENTUNIT_CYCLES: "CYCLES", Q.QNN_PROFILE_EVENTUNIT_COUNT: "COUNT",
              Q.QNN_PROFILE_EVENTUNIT_OBJECT: "OBJECT", Q.QNN_PROFILE_EVENTUNIT_NONE: "NONE",
              Q.QNN_PROFILE_EVENTUNIT_BACKEND: "BACKEND"}


def event_type_name(t: int) -> str:
    for prefix in ("QNN_PROFILE_EVENTTYPE_", "QNN_HTP_PROFILE_EVENTTYPE_"):
        name = Q.enum(prefix).get(t)
        if name is not None:
            return name[len("QNN_"):].replace("PROFILE_EVENTTYPE_", "")
    return "BACKEND" if t > Q.QNN_PROFILE_EVENTTYPE_BACKEND else "UNKNOWN"


def method_type_name(m: int) -> str:
    name = Q.enum("QNN_SYSTEM_PROFILE_METHOD_TYPE_").get(m)
    return name[len("QNN_SYSTEM_PROFILE_METHOD_TYPE_"):] if name else f"UNKNOWN_{m}"


class SerializationTarget:
    """An open serialization target: the file, its limits and how many records it wrote."""

    def __init__(self, path: str, header: dict[str, str | None] | None, max_messages: int | None,
                 system_api_version: tuple[int, int, int], logger: Logger | None = None,
                 func: str = "systemProfileCreateSerializationTarget"):
        self.path = path
        self.max_messages = max_messages
        self.written = 0
        self.dropped = 0
        self.log = logger or NULL_LOGGER
        self.lock = threading.Lock()
        directory = os.path.dirname(path) or "."
        if not os.path.isdir(directory):
            fail(Location(func).path("serializationTargetInfo.file.fileDirectory"),
                 "QNNEMU-systemProfile-target-directory",
                 f"'{directory}' is not an "
                 f"existing directory", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT)
        self.file: TextIO | None
        try:
            self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open until systemProfileFree
        except OSError as e:
            raise error(Location(func).path("serializationTargetInfo.file"), "QNNEMU-systemProfile-target-open",
                        f"cannot open '{path}' for writing: "
                        f"{e.strerror or e}", code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT) from None
        if self.file.tell() == 0:
            h = header or {}
            self._write({"kind": "header", "format": FORMAT, "version": FORMAT_VERSION,
                         "appName": h.get("appName"), "appVersion": h.get("appVersion"),
                         "backendVersion": h.get("backendVersion"),
                         "producer": f"qnnemu {_version.__version__} libQnnSystem.so",
                         "systemApiVersion": "{}.{}.{}".format(*system_api_version),
                         "createdUs": time.time_ns() // 1000})

    def _write(self, obj: dict) -> None:
        assert self.file is not None   # (open: the callers refuse a freed target first)
        self.file.write(json.dumps(obj, separators=(",", ":"), allow_nan=True) + "\n")
        self.file.flush()

    def append(self, records: list[dict], func: str) -> None:
        with self.lock:
            if self.file is None:
                fail(Location(func), "QNNEMU-systemProfile-target-closed", "serializationTarget was freed",
                     code=Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_HANDLE)
            for rec in records:
                if self.max_messages is not None and self.written >= self.max_messages:
                    if not self.dropped:
                        self.log.warn(f"{func}: serializationTarget '{self.path}': MAX_NUM_MESSAGES "
                                      f"({self.max_messages}) reached; further profile data is not written")
                    self.dropped += 1
                    continue
                self._write(rec)
                self.written += 1

    def close(self) -> None:
        with self.lock:
            if self.file is not None:
                self.file.close()
                self.file = None


def event_record(data_type: int, fields: dict[str, Any], sub: list[dict]) -> dict:
    """The JSON object of one QnnSystemProfile_ProfileEventV1_t (``fields`` already decoded)."""
    out: dict[str, Any] = {"dataType": "EXTENDED_EVENT_DATA" if data_type == Q.QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA
           else "EVENT_DATA"}
    out.update(fields)
    out["typeName"] = event_type_name(int(fields.get("type", 0)))
    out["unitName"] = UNIT_NAMES.get(int(fields.get("unit", 0)), "UNKNOWN")
    out["subEvents"] = sub
    return out


def object_record(file_name: str | None, data: bytes | None, length: int) -> dict:
    return {"fileName": file_name, "len": length,
            "dataBase64": base64.b64encode(data).decode("ascii") if data is not None else None}


def data_record(header: dict, events: list[dict]) -> dict:
    header = dict(header)
    header["methodTypeName"] = method_type_name(int(header.get("methodType", 0)))
    header["visibilityName"] = "PRIVATE" if header.get("visibility") == Q.QNN_SYSTEM_PROFILE_VISIBILITY_PRIVATE \
        else "PUBLIC"
    return {"kind": "profileData", "version": 1, "header": header, "events": events}


def read_profile_log(path: str) -> tuple[dict, list[dict]]:
    """(file header, profileData records) of a file written by our libQnnSystem.so."""
    header: dict | None = None
    records: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if obj.get("kind") == "header":
                if obj.get("format") != FORMAT:
                    raise ValueError(f"{path}:{n}: not a {FORMAT} file")
                header = header or obj
            elif obj.get("kind") == "profileData":
                records.append(obj)
            else:
                raise ValueError(f"{path}:{n}: unknown record kind {obj.get('kind')!r}")
    if header is None:
        raise ValueError(f"{path}: no {FORMAT} header")
    return header, records


def walk_events(events: list[dict]):
    """Every event record of ``events`` and their sub-events, depth first."""
    for e in events:
        yield e
        yield from walk_events(e.get("subEvents") or [])


def event_object(event: dict) -> bytes | None:
    """The payload of a unit OBJECT event record (None when it was not written in full)."""
    obj = event.get("object")
    if not obj or obj.get("dataBase64") is None:
        return None
    return base64.b64decode(obj["dataBase64"])


def optrace_documents(records: list[dict]) -> list[dict]:
    """The optrace JSON documents (``format: qnnemu.optrace``) in profileData ``records``, in order
    -- the runs' traces, not graphFinalize's "Schematic" object (the same format, a prepared
    plan with its node table: ``<graph>_schematic.json``)."""
    docs = []
    for rec in records:
        for e in walk_events(rec.get("events") or []):
            if str((e.get("object") or {}).get("fileName") or "").endswith("_schematic.json"):
                continue
            data = event_object(e) if e.get("unit") == Q.QNN_PROFILE_EVENTUNIT_OBJECT else None
            if data is None:
                continue
            try:
                doc = json.loads(data.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                continue
            if isinstance(doc, dict) and doc.get("format") == "qnnemu.optrace":
                docs.append(doc)
    return docs
