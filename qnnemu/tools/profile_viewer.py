"""qnnemu-profile-viewer: reads a profiling log and lists it, or turns its optrace data into a
chrometrace and a QHAS HTML report, like the SDK's qnn-profile-viewer with its chrometrace /
optrace reader plugins (QNN HTP backend documentation, "Example Profile Viewer Command", "Post
Process (Chrometrace Generation)", "Gzip Compression of Chrometrace", "QNN HTP Analysis Summary
(QHAS)").

``--input_log`` is one of (detected from the content; a gzip-compressed file is read too):

- the JSON Lines a profile serialization target of qnnemu's libQnnSystem.so writes (format in
  :mod:`qnnemu.core.system_profile`; ONNX Runtime's ``<csv>_qnn.log``);
- the ``qnn-profiling-data.json`` qnnemu-net-run writes with ``--profiling_level``
  (:mod:`qnnemu.tools.net_run`);
- a bare optrace document (``format: qnnemu.optrace``, :meth:`PreparedPlan.to_optrace`).

In the first two, optrace data is an event whose unit is QNN_PROFILE_EVENTUNIT_OBJECT carrying
the UTF-8 JSON of an optrace document (``object.dataBase64``); documents of the same graph and
plan are merged, their runs in order.

Outputs:

- no ``--output`` / ``--html``: the listing on stdout -- every profiled call's events (indented
  sub-events, value and unit), "Execute Stats (Average/Min/Max)" per graph over the executions,
  and per optrace document the linting listing (cycles, Wait (Scheduler) time, Overlap time with
  the overlapping steps, Resources; the Input and Output pseudo-ops; qnnemu.core.profile's
  main-thread model);
- ``--output FILE``: the chrometrace (:mod:`qnnemu.tools.viewer.chrometrace`); gzip-compressed when
  ``--gzip``, when FILE ends in ``.gz`` or when the ``--config`` file enables ``gzip`` (the
  documentation's three ways); the QHAS report is written next to it as
  ``<FILE stem>_qnn_htp_analysis_summary.html`` as the SDK does (``--html`` names it instead);
- ``--html FILE``: the QHAS report (:mod:`qnnemu.tools.viewer.qhas`).

``--config`` is the optrace config.json (``{"features": {...}}``): ``runtrace``, ``memory_info``
and ``gzip`` change the chrometrace, ``qhas_json`` also writes the analysis as
``<stem>_qnn_htp_analysis_summary.json``; ``enable_input_output_flow_events``,
``enable_sequencer_flow_events``, ``traceback``, ``htp_json`` (``<graph>_htp.json`` for Netron) and
``qhas_schema`` (``qhas_schema.json``) are :mod:`qnnemu.tools.viewer.optrace_features`'.
``--schematic`` (the generator's ``[BINARY]_schematic.bin``) adds the graphs' node tables and
framework names; ``--zoom_start`` / ``--zoom_end`` restrict everything to a sub-network
(docs/profiling-tools.md).  ``--reader`` (the SDK's reader plugin) is accepted and ignored: the
formats are recognised from the content.

``python -m qnnemu.tools.profile_viewer`` runs it too.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import gzip
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ..core import profile as core_profile, system_profile
from ..errors import QnnError
from .config import read_json
from .reporting import LOG_LEVELS, ToolError, plural, tool_main
from .viewer import chrometrace, optrace_features, qhas

PROG = "qnnemu-profile-viewer"
log = logging.getLogger("qnnemu.tools.profile_viewer")

QHAS_SUFFIX = "_qnn_htp_analysis_summary"
OBJECT_UNIT = 5       # QNN_PROFILE_EVENTUNIT_OBJECT
MAX_NAMES = 10        # the linting listing names at most 10 contributing ops per overlap entry
# The optrace config.json features: (used by qnnemu, default) -- QNN HTP backend
# documentation, "Post Process (Chrometrace Generation)".
CONFIG_FEATURES = {"runtrace": (True, True), "memory_info": (True, True), "gzip": (True, False),
                   "qhas_json": (True, False), "enable_input_output_flow_events": (True, False),
                   "enable_sequencer_flow_events": (True, False), "htp_json": (True, True),
                   "traceback": (True, True), "qhas_schema": (True, False)}
HTP_JSON_SUFFIX = "_htp.json"
QHAS_SCHEMA_FILE = "qhas_schema.json"
# Profiled call (System-library method type, or net-run's call name) -> the listing's section.
SECTIONS = {"BACKEND_EXECUTE": "Execute", "graphExecute": "Execute",
            "BACKEND_EXECUTE_ASYNC": "Execute", "BACKEND_FINALIZE": "Finalize",
            "graphFinalize": "Finalize", "BACKEND_CREATE_FROM_BINARY": "Context Load",
            "contextCreateFromBinary": "Context Load", "BACKEND_DEINIT": "De-Init",
            "contextFree": "De-Init"}
UNIT_WORDS = {"US": "us", "MICROSEC": "us", "CYCLES": "cycles", "COUNT": "count", "BYTES": "bytes",
              "NONE": "", "BACKEND": "", "OBJECT": "object"}


@dataclass
class Record:
    """One profiled call: its section, graph and events (normalised to the System-library
    record's keys: identifier, type, typeName, unit, unitName, value, subEvents, object)."""
    method: str
    graph: str | None
    events: list[dict]


@dataclass
class ProfileLog:
    path: str
    kind: str                               # "system-profile" | "net-run" | "optrace"
    header: dict = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    documents: list[dict] = field(default_factory=list)   # optrace documents, as found


# ----------------------------------------------------------------------------- reading
def _read_text(path: str) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ToolError(f"--input_log {path}: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise ToolError(f"--input_log {path}: broken gzip data: {e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"--input_log {path}: not a text file (the vendor's binary profiling logs "
                        f"need the SDK's qnn-profile-viewer)") from None


def _normalise(event: dict, where: str) -> dict:
    if not isinstance(event, dict):
        raise ToolError(f"{where}: expected an event object")
    subs = event.get("subEvents", event.get("sub_events", []))
    return {"identifier": str(event.get("identifier", "")), "type": event.get("type"),
            "typeName": event.get("typeName", event.get("type_name", "")),
            "unit": event.get("unit"), "unitName": event.get("unitName", event.get("unit_name", "")),
            "value": event.get("value"), "object": _object_field(event),
            "subEvents": [_normalise(s, f"{where}.subEvents[{i}]") for i, s in enumerate(subs or [])]}


def _object_field(event: dict) -> dict | None:
    """An OBJECT event's payload in the one form the viewer reads ({fileName, dataBase64} or
    {fileName, json}): the System library's log stores base64; qnnemu.client (net-run's JSON)
    stores the decoded document under ``object`` (or ``object_base64`` when it is not JSON)."""
    obj = event.get("object")
    name = event.get("file_name")
    if isinstance(obj, dict) and "format" in obj and "dataBase64" not in obj and "json" not in obj:
        return {"fileName": name, "json": json.dumps(obj)}
    if obj is None and "object_base64" in event:
        return {"fileName": name, "dataBase64": event["object_base64"]}
    return obj


def _object_document(event: dict, where: str) -> dict | None:
    """The optrace document an OBJECT event carries, or None (with a warning) for any other
    or undecodable object."""
    obj = event.get("object") or {}
    if str(obj.get("fileName") or "").endswith("_schematic.json"):
        # graphFinalize's "Schematic" (a prepared plan, read through --schematic), not a run
        log.info("%s: object %r is a graph's schematic; listed only", where, obj.get("fileName"))
        return None
    data = obj.get("dataBase64")
    text = obj.get("json")
    if data is None and text is None:
        log.warning("%s: object event %r carries no data", where, event["identifier"])
        return None
    try:
        if text is None:
            text = base64.b64decode(data, validate=True).decode("utf-8")
        doc = json.loads(text)
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as e:
        log.warning("%s: object %r is not UTF-8 JSON (%s); skipped", where, obj.get("fileName"), e)
        return None
    if not isinstance(doc, dict) or doc.get("format") != chrometrace.FORMAT:
        log.info("%s: object %r is not an optrace document; listed only", where, obj.get("fileName"))
        return None
    try:
        return chrometrace.check_document(doc, f"{where}: {obj.get('fileName') or 'object'}")
    except chrometrace.OptraceError as e:
        raise ToolError(str(e)) from None


def is_object_event(event: dict) -> bool:
    return event.get("unit") == OBJECT_UNIT or event.get("unitName") == "OBJECT"


def _collect_documents(events: list[dict], where: str, out: list[dict]) -> None:
    for i, e in enumerate(events):
        if is_object_event(e):
            doc = _object_document(e, f"{where}.events[{i}]")
            if doc is not None:
                out.append(doc)
        _collect_documents(e["subEvents"], f"{where}.events[{i}]", out)


def read_log(path: str) -> ProfileLog:
    """Reads ``--input_log`` in any of the three formats (see the module docstring)."""
    text = _read_text(path)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise ToolError(f"--input_log {path}: the file is empty")
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict) and head.get("kind") == "header":
        return _read_system_profile(path, text)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(f"--input_log {path}: not JSON and not JSON Lines ({e})") from None
    if isinstance(doc, dict) and doc.get("format") == chrometrace.FORMAT:
        try:
            chrometrace.check_document(doc, f"--input_log {path}")
        except chrometrace.OptraceError as e:
            raise ToolError(str(e)) from None
        return ProfileLog(path, "optrace", documents=[doc])
    if isinstance(doc, dict) and isinstance(doc.get("calls"), list):
        return _read_net_run(path, doc)
    raise ToolError(f"--input_log {path}: not a qnnemu profiling log (expected the JSON Lines of "
                    f"libQnnSystem.so's serialization target, qnnemu-net-run's "
                    f"qnn-profiling-data.json or an optrace document)")


def _read_system_profile(path: str, text: str) -> ProfileLog:
    out = ProfileLog(path, "system-profile")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"--input_log {path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ToolError(f"{where}: invalid JSON ({e.msg})") from None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind == "header":
            if obj.get("format") != system_profile.FORMAT:
                raise ToolError(f"{where}: format {obj.get('format')!r} is not "
                                f"{system_profile.FORMAT!r}")
            if obj.get("version") != system_profile.FORMAT_VERSION:
                raise ToolError(f"{where}: {system_profile.FORMAT} version {obj.get('version')!r} "
                                f"is not supported (supported: {system_profile.FORMAT_VERSION})")
            out.header = out.header or obj
        elif kind == "profileData":
            header = obj.get("header") or {}
            events = obj.get("events")
            if not isinstance(events, list):
                raise ToolError(f"{where}: profileData without an events list")
            events = [_normalise(e, f"{where}: events[{i}]") for i, e in enumerate(events)]
            out.records.append(Record(str(header.get("methodTypeName", "NONE")),
                                      header.get("graphName") or None, events))
            _collect_documents(events, where, out.documents)
        else:
            raise ToolError(f"{where}: unknown record kind {kind!r}")
    return out


def _read_net_run(path: str, doc: dict) -> ProfileLog:
    out = ProfileLog(path, "net-run", header={k: v for k, v in doc.items() if k != "calls"})
    for i, call in enumerate(doc["calls"]):
        where = f"--input_log {path}: calls[{i}]"
        if not isinstance(call, dict) or not isinstance(call.get("events"), list):
            raise ToolError(f"{where}: expected an object with an events list")
        events = [_normalise(e, f"{where}.events[{j}]") for j, e in enumerate(call["events"])]
        out.records.append(Record(str(call.get("call", "")), call.get("graph"), events))
        _collect_documents(events, where, out.documents)
    return out


# ----------------------------------------------------------------------------- listing
def _value_text(event: dict) -> str:
    unit = UNIT_WORDS.get(str(event.get("unitName") or "").upper(), str(event.get("unitName") or ""))
    if is_object_event(event):
        obj = event.get("object") or {}
        return f"<object {obj.get('fileName') or ''}, {obj.get('len', 0)} bytes>"
    value = event.get("value")
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{value}  {unit}".rstrip()


def _list_events(events: list[dict], out: TextIO, indent: int) -> None:
    for e in events:
        out.write(f"{' ' * indent}{e['identifier']}: {_value_text(e)}\n")
        _list_events(e["subEvents"], out, indent + 3)


def _flatten(events: list[dict], prefix: tuple = ()) -> list[tuple[tuple, dict]]:
    """(identifier path, event) pairs; a repeated identifier under one parent gets #k."""
    out, seen = [], {}
    for e in events:
        k = seen.get(e["identifier"], 0)
        seen[e["identifier"]] = k + 1
        key = prefix + ((e["identifier"], k),)
        out.append((key, e))
        out += _flatten(e["subEvents"], key)
    return out


def _execute_stats(records: list[Record], out: TextIO) -> None:
    """Average / Min / Max of every numeric execute event over the executions of each graph."""
    by_graph: dict[str | None, list[Record]] = {}
    for r in records:
        by_graph.setdefault(r.graph, []).append(r)
    for graph, runs in by_graph.items():
        values: dict[tuple, list[float]] = {}
        units: dict[tuple, dict] = {}
        for r in runs:
            for key, e in _flatten(r.events):
                if isinstance(e["value"], (int, float)) and not isinstance(e["value"], bool) \
                        and not is_object_event(e):
                    values.setdefault(key, []).append(e["value"])
                    units.setdefault(key, e)
        for label, fold in (("Average", lambda v: sum(v) / len(v)), ("Min", min), ("Max", max)):
            title = f"Execute Stats ({label}) of graph {graph} over {len(runs)} execution(s):"
            out.write(f"\n{title}\n{'-' * len(title)}\n")
            for key, vals in values.items():
                e = units[key]
                value = fold(vals)
                shown = f"{value:.1f}" if isinstance(value, float) and not value.is_integer() else \
                    f"{int(value)}"
                unit = UNIT_WORDS.get(str(e["unitName"]).upper(), str(e["unitName"]))
                out.write(f"{' ' * (3 * len(key))}{e['identifier']}: {shown}  {unit}\n".replace("  \n", "\n"))


def list_document(doc: dict, out: TextIO) -> None:
    """The linting-style listing of an optrace document (QNN HTP backend documentation,
    "Detailed and Linting Profiling")."""
    s = qhas.summarize(doc)
    ov = s["overall"]
    names = {step["index"]: step["name"] for step in doc["steps"]}
    resources = chrometrace.step_resources(doc)
    out.write(f"\nOptrace: graph {ov['graph']} on {ov['soc']} ({ov['arch']}), core clock "
              f"{ov['clocks']['core_mhz']:g} MHz\n")
    out.write(f"   Total cycles: {ov['total_cycles']}  cycles ({ov['total_us']:.3f} us)\n")
    out.write(f"   Critical path cycles: {ov['critical_path_cycles']}  cycles "
              f"({ov['critical_path_us']:.3f} us)\n")
    out.write(f"   VTCM: peak {ov['peak_vtcm_bytes']} of {ov['vtcm_budget_bytes']}  bytes; spill "
              f"{ov['spill_bytes']}, fill {ov['fill_bytes']}  bytes\n")
    lint = {row[0]: row for row in core_profile.lint_schedule(lint_steps(doc), int(doc.get("total_cycles", 0)))}

    def entry(title: str, cycles: int, key, resource_names: list[str]) -> None:
        _, wait, overlap, by, overlap_wait, wait_by = lint[key]
        out.write(f"      {title} (cycles): {cycles}  cycles\n")
        out.write(f"            Wait (Scheduler) time: {wait}  cycles\n")
        out.write(f"            Overlap time: {overlap}  cycles\n")
        for i in by[:MAX_NAMES]:
            out.write(f"               {names.get(i, f'step {i}')}\n")
        out.write(f"            Overlap (wait) time: {overlap_wait}  cycles\n")
        for i in wait_by[:MAX_NAMES]:
            out.write(f"               {names.get(i, f'step {i}')}\n")
        out.write(f"            Resources: {', '.join(resource_names)}\n".replace(": \n", ":\n"))

    # the pseudo-ops' OpIds after every node's and step's, as qnnemu.core.profile numbers them
    n_nodes = 1 + max((int(st["node_index"]) for st in doc["steps"] if st.get("node_index") is not None),
                      default=-1)
    ids = core_profile.pseudo_op_ids(n_nodes, len(doc["steps"]))
    entry(f"Input OpId_{ids['Input']}", 0, "Input", [])
    for step in sorted(doc["steps"], key=lambda st: (st["start_cycle"], st["index"])):
        entry(step["name"], step["cycles"], step["index"], resources[step["index"]])
    entry(f"Output OpId_{ids['Output']}", 0, "Output", [])


def lint_steps(doc: dict) -> list:
    """The optrace document's steps as the linting model's input (qnnemu.core.profile)."""
    return [core_profile.LintStep(int(st["index"]), str(st.get("kind", "op")), int(st["start_cycle"]),
                                  int(st["end_cycle"]), int(st.get("wait_cycles", 0)),
                                  tuple(int(d) for d in st.get("deps", ()) or ()),
                                  None if st.get("pair") is None else int(st["pair"]),
                                  core_profile.is_main_thread(str(st.get("kind", "op")), st.get("op_type")))
            for st in doc["steps"]]


def list_log(plog: ProfileLog, documents: list[dict], out: TextIO) -> None:
    out.write(f"Input Log File Location: {os.path.abspath(plog.path)}\n")
    if plog.kind == "system-profile":
        h = plog.header
        out.write(f"Log Format: {system_profile.FORMAT} v{h.get('version')} ({h.get('producer')})\n")
        for key, label in (("appName", "Application"), ("appVersion", "Application Version"),
                           ("backendVersion", "Backend Version")):
            if h.get(key):
                out.write(f"{label}: {h[key]}\n")
    elif plog.kind == "net-run":
        out.write(f"Log Format: qnnemu-net-run profiling data (level "
                  f"{plog.header.get('profiling_level')}, backend {plog.header.get('backend')})\n")
    else:
        out.write("Log Format: optrace document\n")
    executes = [r for r in plog.records if SECTIONS.get(r.method) == "Execute"]
    for r in plog.records:
        if SECTIONS.get(r.method) == "Execute":
            continue
        title = f"{SECTIONS.get(r.method, r.method)} Stats" + (f" (graph {r.graph})" if r.graph else "") + ":"
        out.write(f"\n{title}\n{'-' * len(title)}\n")
        _list_events(r.events, out, 3)
    if executes:
        title = f"Execute Stats (Overall): {len(executes)} execution(s)"
        out.write(f"\n{title}\n{'-' * len(title)}\n")
        for n, r in enumerate(executes):
            out.write(f"   Execution {n}" + (f" (graph {r.graph})" if r.graph else "") + ":\n")
            _list_events(r.events, out, 6)
        _execute_stats(executes, out)
    for doc in documents:
        list_document(doc, out)


# ----------------------------------------------------------------------------- config
def load_config(path: str | None) -> dict[str, bool]:
    """The optrace config.json's features (defaults for the ones it does not set)."""
    features = {k: default for k, (_, default) in CONFIG_FEATURES.items()}
    if path is None:
        return features
    data = read_json(path, "--config")
    if not isinstance(data, dict) or set(data) - {"features"} or not isinstance(data.get("features", {}), dict):
        raise ToolError(f"--config {path}: expected {{\"features\": {{...}}}}")
    for key, value in data.get("features", {}).items():
        if key not in CONFIG_FEATURES:
            raise ToolError(f"--config {path}: features.{key}: unknown feature (known: "
                            f"{', '.join(CONFIG_FEATURES)})")
        if not isinstance(value, bool):
            raise ToolError(f"--config {path}: features.{key}: expected true/false, got {json.dumps(value)}")
        if value and not CONFIG_FEATURES[key][0]:
            log.warning("--config: feature %s is not produced by qnnemu-profile-viewer", key)
        features[key] = value
    return features


# ----------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Lists a QNN profiling log (qnnemu libQnnSystem.so JSON Lines, "
        "qnnemu-net-run's qnn-profiling-data.json or an optrace document) or turns its optrace "
        "data into a chrometrace (Perfetto / chrome://tracing) and a QHAS HTML report.")
    p.add_argument("--input_log", required=True, metavar="FILE", help="the profiling log")
    p.add_argument("--output", metavar="FILE",
                   help="write the chrometrace JSON here (and the QHAS report next to it)")
    p.add_argument("--gzip", action="store_true", help="gzip-compress the chrometrace (.json.gz)")
    p.add_argument("--html", metavar="FILE", help="write the QHAS HTML report here")
    p.add_argument("--config", metavar="FILE", help="optrace config.json ({\"features\": {...}})")
    p.add_argument("--schematic", metavar="FILE",
                   help="the [MODEL]_schematic.bin qnnemu-context-binary-generator --profiling_option optrace "
                   "wrote: the graphs' structure (nodes, framework names) for the chrometrace")
    p.add_argument("--zoom_start", metavar="NODE",
                   help="restrict the chrometrace and QHAS to the sub-network from this QNN node (or framework op)")
    p.add_argument("--zoom_end", metavar="NODE", help="... to this one (with --zoom_start)")
    p.add_argument("--reader", metavar="LIB",
                   help="the SDK's reader plugin; accepted for compatibility and ignored")
    p.add_argument("--log_level", choices=LOG_LEVELS, default="warn")
    return p


def _zoomed(documents: list[dict], start: str, end: str) -> list[dict]:
    """--zoom_start/--zoom_end: every document restricted to the sub-network (a rule error when a
    name is unknown or the end does not depend on the start)."""
    if not documents:
        raise ToolError("--zoom_start: the log has no optrace data to zoom into")
    def names(d: dict) -> set:
        nodes = d.get("nodes") or []
        return {n.get("name") for n in nodes} | \
            {n["framework"].get("name") for n in nodes if isinstance(n.get("framework"), dict)}
    try:
        # the graphs that have the start node (a log may hold several graphs)
        zoomed = [optrace_features.zoom(d, start, end) for d in documents if start in names(d)]
        return zoomed or [optrace_features.zoom(documents[0], start, end)]
    except QnnError as e:
        raise ToolError(str(e)) from None
    except chrometrace.OptraceError as e:
        raise ToolError(str(e)) from None


def _write_text(path: str, text: str, what: str) -> None:
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ToolError(f"{what} {path}: {e.strerror or e}") from None


def _qhas_stem(output: str) -> str:
    stem = output[:-3] if output.endswith(".gz") else output
    return stem[:-5] if stem.endswith(".json") else stem


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout

    def body(args) -> int:
        features = load_config(args.config)
        if args.reader:
            log.info("--reader %s ignored: the log format is recognised from its content", args.reader)
        if (args.zoom_start is None) != (args.zoom_end is None):
            raise ToolError("--zoom_start and --zoom_end go together")
        plog = read_log(args.input_log)
        documents = chrometrace.merge_documents(plog.documents)
        if args.schematic:
            try:
                documents = optrace_features.apply_schematic(documents, optrace_features.read_schematic(args.schematic))
            except optrace_features.SchematicError as e:
                raise ToolError(str(e)) from None
        if args.zoom_start is not None:
            documents = _zoomed(documents, args.zoom_start, args.zoom_end)
        if not args.output and not args.html:
            list_log(plog, documents, out)
            return 0
        if not documents:
            raise ToolError(f"--input_log {args.input_log}: no optrace data to trace (profile at "
                            f"DETAILED or linting level with QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE)")
        written = []
        if args.output:
            trace = chrometrace.build_trace(documents, source=os.path.abspath(args.input_log),
                                            runtrace=features["runtrace"],
                                            memory_info=features["memory_info"])
            if features["traceback"]:
                optrace_features.add_traceback(trace, documents)
            flows = optrace_features.add_flow_events(trace, documents, features["enable_input_output_flow_events"],
                                                     features["enable_sequencer_flow_events"])
            trace["otherData"]["flow_events"] = flows
            try:
                os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
                path = chrometrace.write_trace(trace, args.output, args.gzip or features["gzip"])
            except OSError as e:
                raise ToolError(f"--output {args.output}: {e.strerror or e}") from None
            written.append(f"{path} (chrometrace, {len(trace['traceEvents'])} events)")
            stem = _qhas_stem(args.output)
            if not args.html:
                path = stem + QHAS_SUFFIX + ".html"
                _write_text(path, qhas.render_html(documents), "QHAS report")
                written.append(f"{path} (QHAS report)")
            if features["qhas_json"]:
                path = stem + QHAS_SUFFIX + ".json"
                _write_text(path, json.dumps([qhas.summarize(d) for d in documents], indent=1) + "\n",
                            "QHAS JSON")
                written.append(f"{path} (QHAS JSON)")
            out_dir = os.path.dirname(args.output)
            if features["qhas_schema"]:
                path = os.path.join(out_dir, QHAS_SCHEMA_FILE)
                _write_text(path, json.dumps(optrace_features.QHAS_SCHEMA, indent=1) + "\n", "QHAS schema")
                written.append(f"{path} (QHAS schema)")
            if features["htp_json"]:   # on by default: logged (info), not in the summary line
                for d in documents:
                    path = os.path.join(out_dir, d["graph"] + HTP_JSON_SUFFIX)
                    _write_text(path, json.dumps(optrace_features.htp_json(d), indent=1) + "\n", "htp_json")
                    log.info("wrote %s (HTP topology for Netron)", path)
        if args.html:
            _write_text(args.html, qhas.render_html(documents), "--html")
            written.append(f"{args.html} (QHAS report)")
        print(f"{PROG}: wrote {', '.join(written)} from {plural(len(documents), 'optrace document')}",
              file=out)
        return 0

    return tool_main(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    raise SystemExit(main())
