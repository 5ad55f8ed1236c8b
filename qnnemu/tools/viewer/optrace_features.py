"""The optrace tooling around the chrometrace (QNN HTP backend documentation, "QNN HTP Optrace
Profiling": "Model Preparation" -- ``[MODEL]_schematic.bin`` --, "Post Process (Chrometrace
Generation)" -- the config.json features --, "Profile Submodule Chrometrace" -- ``--zoom_start``
/ ``--zoom_end`` --, "HTP Graph Topology and per-Op Information in Netron"; "QNN HTP Analysis
Summary (QHAS)").

* **Schematic** (:func:`write_schematic`, :func:`read_schematic`): qnnemu's own format of
  ``[MODEL]_schematic.bin`` (the vendor's is undocumented), written by
  ``qnnemu-context-binary-generator --profiling_option optrace`` next to the binary::

      offset  size  field
      0       8     magic b"QNNEMUSC"
      8       4     format version, uint32 little endian (1)
      12      4     flags, uint32 LE (bit 0: payload zlib-compressed; always set)
      16      8     payload length in bytes, uint64 LE
      24      4     CRC-32 of the payload, uint32 LE
      28      4     reserved (0)
      32      ...   payload: zlib(UTF-8 JSON)

  The JSON is ``{"format": "qnnemu.schematic", "version": 1, "model", "binary", "graphs":
  [...]}``; each graph is the prepared plan's optrace document (``PreparedPlan.to_optrace()``,
  ``format: qnnemu.optrace``) with ``nodes`` (index, name, type, package, inputs, outputs and,
  when the graph description names one, ``framework``: the source framework op ``{"name",
  "type"}``) and ``tensors`` (name -> type, data_type, dims), as graphFinalize's "Schematic"
  profiling event carries them.
* **--schematic** (:func:`apply_schematic`): the schematic's graphs give the log's optrace
  documents their structure (nodes, framework names); a graph the log has no optrace data for is
  drawn from the schematic alone (one modelled run).
* **--zoom_start / --zoom_end** (:func:`zoom`): the document restricted to the sub-network
  between two nodes -- QNN node names or framework names -- : the nodes that depend on the start
  node and that the end node depends on (both included), their steps, and the spills, fills and
  services that run among them.  Unknown names and an end node that does not depend on the start
  node are errors with rule ids.
* **Flow events** (:func:`add_flow_events`): ``enable_input_output_flow_events`` -- a flow from
  the step that writes a block to each step that reads it; ``enable_sequencer_flow_events`` -- a
  flow from each step to the next one the sequencer issues (the plan's schedule order) and along
  each ordering constraint of the allocator.  Trace Event Format flow events (``ph: s`` / ``ph: f`` with
  ``bp: e``), which the legacy chrome://tracing UI draws.
* **traceback** (:func:`add_traceback`): every step's ``args`` name its QNN node and op type and,
  where the graph has one, the source framework op (``framework_op`` / ``framework_type``).
* **htp_json** (:func:`htp_json`): ``[NAME]_htp.json``, the HTP graph in the QNN JSON shape
  Netron opens (top-level ``model.cpp`` and ``graph`` with ``tensors`` and ``nodes``): one node
  per HTP step (ops, HMX launches, spills, fills, System Services) connected through the VTCM /
  DDR blocks they read and write; each node's ``scalar_params`` carry its schedule (kind,
  resource, thread, cycles, start, end, wait, overlap, VTCM bytes, QNN node, framework op).
* **qhas_schema** (:data:`QHAS_SCHEMA`): ``qhas_schema.json``, a JSON Schema (draft 2020-12,
  the keywords type / properties / required / additionalProperties / items / enum / minimum /
  anyOf) the ``qhas_json`` file validates against.
"""
from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from ...headers import Q
from ...location import Location
from ...rules import fail
from .chrometrace import OptraceError, check_document

SCHEMATIC_MAGIC = b"QNNEMUSC"
SCHEMATIC_VERSION = 1
SCHEMATIC_FORMAT = "qnnemu.schematic"
_HEADER = struct.Struct("<8sIIQII")
_COMPRESSED = 1
VIEWER = "qnnemu-profile-viewer"


class SchematicError(ValueError):
    """A schematic file that is not one (or not this version)."""


# ------------------------------------------------------------------------------ schematic
def schematic_bytes(graphs: list[dict], model: str, binary: str) -> bytes:
    payload = zlib.compress(json.dumps({"format": SCHEMATIC_FORMAT, "version": SCHEMATIC_VERSION,
                                        "model": model, "binary": binary, "graphs": graphs},
                                       separators=(",", ":")).encode("utf-8"), 6)
    return _HEADER.pack(SCHEMATIC_MAGIC, SCHEMATIC_VERSION, _COMPRESSED, len(payload), zlib.crc32(payload), 0) \
        + payload


def write_schematic(path: str, graphs: list[dict], model: str, binary: str) -> int:
    data = schematic_bytes(graphs, model, binary)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def parse_schematic(data: bytes, where: str = "schematic") -> dict:
    if len(data) < _HEADER.size:
        raise SchematicError(f"{where}: {len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, flags, length, crc, _ = _HEADER.unpack_from(data)
    if magic != SCHEMATIC_MAGIC:
        raise SchematicError(f"{where}: not a qnnemu schematic (magic {magic!r}, expected {SCHEMATIC_MAGIC!r}); "
                             f"the SDK's schematic needs the SDK's qnn-profile-viewer")
    if version != SCHEMATIC_VERSION:
        raise SchematicError(f"{where}: format version {version} is not supported (supported: {SCHEMATIC_VERSION})")
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise SchematicError(f"{where}: payload is {len(payload)} bytes, the header says {length}")
    if zlib.crc32(payload) != crc:
        raise SchematicError(f"{where}: payload CRC-32 mismatch (damaged file)")
    try:
        raw = zlib.decompress(payload) if flags & _COMPRESSED else payload
        doc = json.loads(raw.decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        raise SchematicError(f"{where}: payload does not decode: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != SCHEMATIC_FORMAT or not isinstance(doc.get("graphs"), list):
        raise SchematicError(f"{where}: payload is not a {SCHEMATIC_FORMAT} document")
    for i, g in enumerate(doc["graphs"]):
        try:
            check_document(g, f"{where}: graphs[{i}]")
        except OptraceError as e:
            raise SchematicError(str(e)) from None
    return doc


def read_schematic(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SchematicError(f"--schematic {path}: {e.strerror or e}") from None
    return parse_schematic(data, f"--schematic {path}")


def _structure(doc: dict) -> list:
    return [(s.get("index"), s.get("name"), s.get("kind")) for s in doc.get("steps", [])]


def apply_schematic(documents: list[dict], schematic: dict) -> list[dict]:
    """The log's documents with the schematic's structure (``nodes``, ``tensors``) -- a graph's
    steps must be the schematic's --, then the schematic's graphs the log has no data for."""
    graphs = {g["graph"]: g for g in schematic["graphs"]}
    out, seen = [], set()
    for d in documents:
        g = graphs.get(d["graph"])
        if g is None:
            out.append(d)
            continue
        if _structure(g) != _structure(d):
            raise SchematicError(f"--schematic: graph {d['graph']!r} of the log was not prepared as the schematic "
                                 f"says ({len(d['steps'])} steps in the log, {len(g['steps'])} in the schematic): "
                                 f"use the schematic written with the binary the log was profiled on")
        seen.add(d["graph"])
        out.append({**d, "nodes": g.get("nodes", d.get("nodes")), "tensors": g.get("tensors", d.get("tensors"))})
    out += [g for name, g in graphs.items() if name not in seen]
    return out


# ------------------------------------------------------------------------------------ zoom
def _node_lookup(doc: dict, name: str, option: str) -> int:
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise OptraceError(f"{option} {name}: the optrace document of graph {doc['graph']!r} has no node table "
                           f"(profile with this qnnemu or give --schematic)")
    for key in ("name", "framework"):
        for n in nodes:
            value = n.get(key)
            if key == "framework" and isinstance(value, dict):
                value = value.get("name")
            if value == name:
                return int(n["index"])
    known = ", ".join(repr(n["name"]) for n in nodes[:8]) + (", ..." if len(nodes) > 8 else "")
    fail(Location(VIEWER).path(option), "QNNEMU-viewer-zoom-unknown-node",
         f"{name!r} is no QNN node or framework op of graph {doc['graph']!r} (nodes: {known})",
         code=Q.QNN_COMMON_ERROR_INVALID_ARGUMENT)


def subnetwork(doc: dict, start: str, end: str) -> set[int]:
    """Node indices between ``start`` and ``end`` (both QNN or framework names)."""
    a = _node_lookup(doc, start, "--zoom_start")
    b = _node_lookup(doc, end, "--zoom_end")
    nodes = {int(n["index"]): n for n in doc["nodes"]}
    producer = {t: k for k, n in nodes.items() for t in n.get("outputs", [])}
    succ: dict[int, set[int]] = {k: set() for k in nodes}
    pred: dict[int, set[int]] = {k: set() for k in nodes}
    for k, n in nodes.items():
        for t in n.get("inputs", []):
            if t in producer and producer[t] != k:
                succ[producer[t]].add(k)
                pred[k].add(producer[t])

    def reach(first: int, edges: dict[int, set[int]]) -> set[int]:
        seen, todo = {first}, [first]
        while todo:
            for m in edges[todo.pop()]:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen
    between = reach(a, succ) & reach(b, pred)
    if not between:
        order = "comes before" if b in reach(a, pred) else "is not connected to"
        fail(Location(VIEWER).path("--zoom_end"), "QNNEMU-viewer-zoom-order",
             f"{end!r} {order} --zoom_start {start!r} in graph {doc['graph']!r}: the sub-network runs from the "
             f"start node to an end node that depends on it", code=Q.QNN_COMMON_ERROR_INVALID_ARGUMENT)
    return between


def zoom(doc: dict, start: str, end: str) -> dict:
    """``doc`` restricted to the sub-network between ``start`` and ``end``: the steps of its nodes
    and the node-less steps (spills, fills, services) that run within their span; references to
    dropped steps are removed, the totals are the sub-network's."""
    keep_nodes = subnetwork(doc, start, end)
    steps = doc["steps"]

    def node_of(s: dict):
        return s.get("node_index") if s.get("node_index") is not None else s.get("tile_node")
    own = [s for s in steps if node_of(s) in keep_nodes]
    lo = min(s["start_cycle"] for s in own)
    hi = max(s["end_cycle"] for s in own)
    kept = {s["index"] for s in own}
    kept |= {s["index"] for s in steps if node_of(s) is None and s["start_cycle"] >= lo and s["end_cycle"] <= hi}

    def only(ids) -> list[int]:
        return [i for i in ids if i in kept]
    new_steps = []
    for s in steps:
        if s["index"] not in kept:
            continue
        t = dict(s)
        for key in ("overlap_steps", "overlap_wait_steps", "deps"):
            if key in t:
                t[key] = only(t[key])
        if t.get("pair") is not None and t["pair"] not in kept:
            t["pair"] = None
        new_steps.append(t)
    out = dict(doc)
    out["steps"] = new_steps
    out["blocks"] = [b for b in doc["blocks"] if b.get("first_step") is None or
                     (b["first_step"] in kept and b.get("last_step") in kept)]
    out["tilings"] = [t for t in doc.get("tilings", []) if all(i in kept for i in t.get("steps", []))]
    out["constraints"] = [c for c in doc.get("constraints", []) if c[0] in kept and c[1] in kept]
    out["total_cycles"] = hi - lo if new_steps else 0
    out["critical_path_cycles"] = min(doc.get("critical_path_cycles", 0), out["total_cycles"])
    out["peak_vtcm_bytes"] = max((s.get("vtcm_bytes", 0) for s in new_steps), default=0)
    out["spill_bytes"] = sum(s.get("bytes", 0) for s in new_steps if s["kind"] == "spill")
    out["fill_bytes"] = sum(s.get("bytes", 0) for s in new_steps if s["kind"] == "fill")
    out["zoom"] = {"start": start, "end": end, "nodes": sorted(keep_nodes), "start_cycle": lo, "end_cycle": hi}
    out["passes"] = list(doc.get("passes", [])) + [
        (f"zoom: the sub-network from {start!r} to {end!r}: {len(keep_nodes)} node(s), {len(new_steps)} of "
         f"{len(steps)} steps, cycles {lo}..{hi}")]
    return out


# ------------------------------------------------------------------------------ traceback
def _docs_by_graph(docs: list[dict]) -> dict[str, dict]:
    return {d["graph"]: d for d in docs}


def _graph_of_pid(trace: dict) -> dict[int, str]:
    out = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            out[e["pid"]] = e["args"]["name"].rsplit(" - HTP core ", 1)[0]
    return out


def add_traceback(trace: dict, docs: list[dict]) -> int:
    """Names each step's QNN node (and its source framework op, when the node table has one) in
    its ``args``; returns how many steps name a framework op."""
    by_graph, graph_of = _docs_by_graph(docs), _graph_of_pid(trace)
    named = 0
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or "step" not in e.get("args", {}):
            continue
        doc = by_graph.get(graph_of.get(e["pid"], ""))
        nodes = {int(n["index"]): n for n in (doc or {}).get("nodes") or []}
        args = e["args"]
        k = args.get("node_index")
        if k is None:
            k = next((s.get("tile_node") for s in doc["steps"] if s["index"] == args["step"]), None) if doc else None
        node = nodes.get(k) if k is not None else None
        if node is None:
            continue
        args["qnn_node"], args["qnn_op_type"] = node["name"], node.get("type")
        framework = node.get("framework")
        if isinstance(framework, dict) and framework.get("name"):
            args["framework_op"] = framework["name"]
            if framework.get("type"):
                args["framework_type"] = framework["type"]
            named += 1
    return named


# ------------------------------------------------------------------------------ flow events
def _edges_io(doc: dict) -> list[tuple[int, int]]:
    writer: dict[str, int] = {}
    edges = []
    for s in sorted(doc["steps"], key=lambda s: s["index"]):
        for b in s.get("inputs", []):
            if b in writer and writer[b] != s["index"]:
                edges.append((writer[b], s["index"]))
        for b in s.get("outputs", []):
            writer[b] = s["index"]
    return edges


def _edges_sequencer(doc: dict) -> list[tuple[int, int]]:
    """The sequencer's order: each step the HTP issues (ops, launches, spills, fills, waits: no
    System Service) to the next one it issues, and each ordering constraint of the allocator."""
    order = [s["index"] for s in sorted(doc["steps"], key=lambda s: (s["start_cycle"], s["index"]))
             if s["kind"] != "service"]
    edges = list(zip(order, order[1:]))
    seen = set(edges)
    return edges + [(int(a), int(b)) for a, b in doc.get("constraints", []) if (int(a), int(b)) not in seen]


def add_flow_events(trace: dict, docs: list[dict], io: bool, sequencer: bool) -> dict[str, int]:
    """Appends the flow events of the enabled features; returns their counts per category."""
    by_graph, graph_of = _docs_by_graph(docs), _graph_of_pid(trace)
    slices: dict[tuple[str, int, int], dict] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and "step" in e.get("args", {}):
            slices[(graph_of.get(e["pid"], ""), e["args"]["run"], e["args"]["step"])] = e
    runs = sorted({(g, r) for g, r, _ in slices})
    counts = {"input_output_flow": 0, "sequencer_flow": 0}
    flow_id = 0
    added = []
    for category, enabled, edges_of in (("input_output_flow", io, _edges_io),
                                        ("sequencer_flow", sequencer, _edges_sequencer)):
        if not enabled:
            continue
        for graph, run in runs:
            doc = by_graph.get(graph)
            if doc is None:
                continue
            for a, b in edges_of(doc):
                src, dst = slices.get((graph, run, a)), slices.get((graph, run, b))
                if src is None or dst is None:
                    continue
                flow_id += 1
                name = f"{src['name']} -> {dst['name']}"
                added.append({"ph": "s", "id": flow_id, "cat": category, "name": name, "pid": src["pid"],
                              "tid": src["tid"], "ts": src["ts"]})
                added.append({"ph": "f", "bp": "e", "id": flow_id, "cat": category, "name": name,
                              "pid": dst["pid"], "tid": dst["tid"], "ts": dst["ts"]})
                counts[category] += 1
    trace["traceEvents"] += added
    trace["traceEvents"].sort(key=lambda e: (e["ph"] != "M", e.get("ts", 0)))
    return counts


# ------------------------------------------------------------------------------- htp_json
# Qnn_TensorType_t / Qnn_DataType_t values of the QNN JSON shape Netron reads.
_APP_WRITE, _APP_READ, _NATIVE, _STATIC = (Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ,
                                           Q.QNN_TENSOR_TYPE_NATIVE, Q.QNN_TENSOR_TYPE_STATIC)
_UINT_8, _UINT_32, _INT_64, _STRING = (Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_64,
                                       Q.QNN_DATATYPE_STRING)
# the data types Netron's QNN reader names (others would stop it): QNN's int/uint/float/fixed point/bool/string
NETRON_DATA_TYPES = frozenset({0x0008, 0x0016, 0x0032, 0x0064, 0x0108, 0x0116, 0x0132, 0x0164, 0x0216, 0x0232,
                               0x0304, 0x0308, 0x0316, 0x0332, 0x0404, 0x0408, 0x0416, 0x0432, 0x0508, 0x0608,
                               0x7fffffff})


def _scalar(value: Any) -> dict:
    if isinstance(value, bool) or not isinstance(value, int):
        return {str(_STRING): str(value)}
    return {str(_INT_64 if value < 0 or value > 0xFFFFFFFF else _UINT_32): value}


def htp_json(doc: dict) -> dict:
    """The HTP graph of ``doc`` as a QNN JSON model Netron opens (see the module docstring)."""
    tensors_in = doc.get("tensors") or {}
    blocks = {b["name"]: b for b in doc["blocks"]}
    nodes_by_index = {int(n["index"]): n for n in doc.get("nodes") or []}
    tensors: dict[str, dict] = {}

    def declare(name: str) -> None:
        if name in tensors:
            return
        base = name.split("#", 1)[0]
        t = tensors_in.get(name)
        if t is not None and t.get("data_type") in NETRON_DATA_TYPES:
            kind = t["type"] if t["type"] in (_APP_WRITE, _APP_READ, _STATIC) else _NATIVE
            tensors[name] = {"id": len(tensors), "type": kind, "data_type": t["data_type"], "dims": t["dims"]}
            return
        like = tensors_in.get(base)
        b = blocks.get(name)
        size = int(b["size"]) if b else 0
        if like is not None and like.get("data_type") in NETRON_DATA_TYPES:
            tensors[name] = {"id": len(tensors), "type": _NATIVE, "data_type": like["data_type"], "dims": like["dims"]}
        else:   # a scratch block or a copy of unknown type: its bytes
            tensors[name] = {"id": len(tensors), "type": _NATIVE, "data_type": _UINT_8, "dims": [size]}
    nodes: dict[str, dict] = {}
    for s in sorted(doc["steps"], key=lambda s: (s["start_cycle"], s["index"])):
        if s["kind"] == "wait":
            continue    # a wait only synchronizes; its launch is the node
        for name in (*s.get("inputs", []), *s.get("outputs", [])):
            declare(name)
        params = {"htp_step": s["index"], "htp_kind": s["kind"], "htp_resource": s["resource"],
                  "htp_thread": s.get("thread", 0), "htp_cycles": s["cycles"], "htp_start_cycle": s["start_cycle"],
                  "htp_end_cycle": s["end_cycle"], "htp_wait_cycles": s.get("wait_cycles", 0),
                  "htp_overlap_cycles": s.get("overlap_cycles", 0), "htp_vtcm_bytes": s.get("vtcm_bytes", 0)}
        if s.get("note"):
            params["htp_note"] = s["note"]
        node = nodes_by_index.get(s.get("node_index") if s.get("node_index") is not None else s.get("tile_node"))
        if node is not None:
            params["qnn_node"] = node["name"]
            if isinstance(node.get("framework"), dict) and node["framework"].get("name"):
                params["framework_op"] = node["framework"]["name"]
        op_type = s.get("op_type") or {"fill": "DramToTcm", "spill": "TcmToDram"}.get(s["kind"], s["kind"])
        nodes[s["name"]] = {"package": "qnnemu.htp" if node is None else node.get("package", "qti.aisw"),
                            "type": op_type, "tensor_params": {},
                            "scalar_params": {k: _scalar(v) for k, v in params.items()},
                            "input_names": list(s.get("inputs", [])), "output_names": list(s.get("outputs", []))}
    return {"model.cpp": f"{doc['graph']}_htp (qnnemu HTP graph; no C++ model)", "model.bin": "",
            "converter_command": "qnnemu-profile-viewer htp_json", "copyright_str": "",
            "op_types": sorted({n["type"] for n in nodes.values()}),
            "graph": {"tensors": tensors, "nodes": nodes},
            "htp": {"graph": doc["graph"], "soc_model": doc["soc_model"], "arch": doc["arch"],
                    "total_cycles": doc["total_cycles"], "critical_path_cycles": doc["critical_path_cycles"],
                    "peak_vtcm_bytes": doc["peak_vtcm_bytes"], "zoom": doc.get("zoom")}}


# ---------------------------------------------------------------------------- qhas schema
_NUM = {"type": "number"}
_INT = {"type": "integer", "minimum": 0}
_STR = {"type": "string"}
_NULLABLE_NUM = {"anyOf": [{"type": "number"}, {"type": "null"}]}
_NULLABLE_STR = {"anyOf": [{"type": "string"}, {"type": "null"}]}


def _object(props: dict, required: list[str] | None = None, extra: bool = False) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


QHAS_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/qnnemu/qnnemu/qhas_schema.json",
    "title": "qnnemu QHAS JSON (<stem>_qnn_htp_analysis_summary.json)",
    "description": "One entry per optrace document: the analysis the QHAS HTML report shows.",
    "type": "array",
    "items": _object({
        "overall": _object({
            "graph": _STR, "soc_model": _INT, "soc": _STR, "arch": _STR, "vtcm_budget_bytes": _INT,
            "peak_vtcm_bytes": _INT, "spill_bytes": _INT, "fill_bytes": _INT, "spill_fill_buffer_bytes": _INT,
            "total_cycles": _INT, "total_us": _NUM, "critical_path_cycles": _INT, "critical_path_us": _NUM,
            "steps": _INT, "ops": _INT, "spills": _INT, "fills": _INT, "dominant_path_cycles": _INT,
            "runs": _INT, "host_execute_us_avg": _NULLABLE_NUM, "host_execute_us_min": _NULLABLE_NUM,
            "host_execute_us_max": _NULLABLE_NUM,
            "clocks": _object({"core_mhz": _NUM, "hmx_mhz": _NUM, "bus_mhz": _NUM, "corner": _STR,
                               "source": {"enum": ["nominal", "reference", "execution"]}},
                              required=["core_mhz", "source"], extra=True)}),
        "op_types": {"type": "array", "items": _object({
            "op_type": _STR, "steps": _INT, "cycles": _INT, "wait_cycles": _INT, "overlap_cycles": _INT,
            "share": {"type": "number", "minimum": 0}, "us": _NUM})},
        "ops": {"type": "array", "items": _object({
            "step": _INT, "name": _STR, "op_type": _STR, "kind": {"enum": ["op", "spill", "fill", "launch", "wait",
                                                                             "service"]},
            "resource": {"enum": ["HVX", "HMX", "DMA", "CPU"]}, "thread": _INT, "start_cycle": _INT, "cycles": _INT,
            "wait_cycles": _INT, "overlap_cycles": _INT, "overlap_wait_cycles": _INT, "vtcm_bytes": _INT,
            "resources": {"type": "array", "items": {"enum": ["HVX", "HMX", "DMA", "CPU"]}}})},
        "dominant_path": {"type": "array", "items": _object({
            "step": _INT, "name": _STR, "op_type": _NULLABLE_STR, "kind": _STR, "resource": _STR, "class": _STR,
            "start_cycle": _INT, "end_cycle": _INT, "cycles": _INT})},
        "passes": {"type": "array", "items": _STR},
    }),
}
