"""contextGetBinary: ``serialize(context)``, the bytes of a context whose graphs are all
finalized (docs/context-binary.md).  Deterministic: the same context gives the same bytes.
"""
from __future__ import annotations

import math
import zlib

from ... import ops
from ...headers import Q
from ...htp.cost import HMX_TILE
from ...location import Location
from ...rules import error, fail, warn_at
from ...spec import dtypes
from .. import api_version
from ..device import DeviceModel
from ..graph import Graph
from ..log import NULL_LOGGER
from . import (
    format as fmt,  # fmt.FORMAT_VERSION: read at call time (tests vary it)
    plan_record,
)
from .format import (
    CONSTANT_ALIGN,
    DATA_ALIGN,
    FLAG_WEIGHT_SHARING,
    FORMAT_NAME,
    HEADER_SIZE,
    PLAN_FORMAT_VERSION,
    Header,
    _align,
    _Unencodable,
    assemble,
)
from .lora import append_shared as append_lora_blob, layout as lora_layout
from .metadata import (
    _BlobStore,
    _context_configs_json,
    _graph_configs_json,
    _node_params,
    _param_json,
    _tensor_json,
    weight_sharing_enabled,
    weights_packing_enabled,
)


def _device_model(device) -> DeviceModel:
    model = getattr(device, "model", None)
    return model if isinstance(model, DeviceModel) else DeviceModel()


# Weight sharing limits (QNN HTP backend documentation, "QNN HTP Context Config Options":
# QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED "common weights across graphs (max 64)";
# its notes: "Only supports Hexagon v73 and onward architectures", "Sharing cross PD or cross
# different VTCM size and SoC is not supported").  The vendor's libQnnHtp.so 2.51 writes such
# binaries all the same (65 graphs, v68/v69 devices, graphs of 2 and 4 MiB VTCM; probed,
# tests/test_binary_weight_sharing.py), so qnnemu writes them too, weights shared, and warns.
WEIGHT_SHARING_MAX_GRAPHS = 64
WEIGHT_SHARING_MIN_ARCH = 73


def _warn_weight_sharing_limits(graphs: list, model: DeviceModel, func: str) -> None:
    from ...htp.settings import graph_settings
    loc = Location(func).field("context")
    option = "QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED"
    if len(graphs) > WEIGHT_SHARING_MAX_GRAPHS:
        warn_at(loc, "QNNEMU-binary-weight-sharing-graphs",
                f"{option} with {len(graphs)} graphs; the documentation shares weights across at most "
                f"{WEIGHT_SHARING_MAX_GRAPHS} (the vendor's library writes the binary anyway): weights shared")
    if int(model.arch) < WEIGHT_SHARING_MIN_ARCH:
        warn_at(loc, "QNNEMU-binary-weight-sharing-arch",
                f"{option} on {model.name} (v{model.arch}); the documentation supports it from "
                f"v{WEIGHT_SHARING_MIN_ARCH} (the vendor's library writes the binary anyway): weights shared")
    sizes = {g.name: graph_settings(g).vtcm_bytes for g in graphs}
    if len(set(sizes.values())) > 1:
        warn_at(loc, "QNNEMU-binary-weight-sharing-vtcm",
                f"{option} across graphs of different VTCM sizes "
                f"({', '.join(f'{n}: {b} bytes' for n, b in sizes.items())}); the documentation does not "
                f"support sharing across VTCM sizes (the vendor's library writes the binary anyway): weights shared")


def _prepared_constant_bytes(graph) -> dict[int, int]:
    """tensor id -> bytes of the prepared format of each STATIC weight an HMX op of the graph's
    plan reads (QNN HTP backend documentation, "QNN Context Binary size": "filters could be padded
    in the QNN context binary to represent internal HTP format"): HMX works on 32-deep x 32-wide
    tiles (qnnemu/htp/cost.py ``HMX_TILE``), so the weight's two innermost dimensions are padded
    up to multiples of 32."""
    plan = getattr(graph, "htp_plan", None)
    out: dict[int, int] = {}
    if plan is None:
        return out
    for step in plan.steps:
        if step.kind not in ("op", "launch") or step.node_index is None or \
                "HMX" not in (step.resource, *step.resources):
            continue
        node = graph.nodes[step.node_index]
        tid = node.inputs[1] if len(node.inputs) > 1 else None
        t = graph.tensors.get(tid) if tid is not None else None
        if t is None or t.type != Q.QNN_TENSOR_TYPE_STATIC or not t.dims:
            continue
        dims = [int(d) for d in t.dims]
        for k in range(max(0, len(dims) - 2), len(dims)):
            dims[k] = -(-max(dims[k], 1) // HMX_TILE) * HMX_TILE
        out[t.id] = math.prod(dims) * dtypes.itemsize(t.dtype)
    return out


def _layout(blobs: list[bytes], meta: dict) -> bytes:
    """Format versions 1 and 2: one data section, every blob at the next multiple of 64."""
    offsets, rel = [], 0
    for raw in blobs:
        offsets.append(rel)
        rel = _align(rel + len(raw))
    meta["blobs"] = [{"offset": off, "size": len(raw), "crc32": zlib.crc32(raw)} for off, raw in zip(offsets, blobs)]
    data = bytearray(offsets[-1] + len(blobs[-1]) if blobs else 0)
    for off, raw in zip(offsets, blobs):
        data[off:off + len(raw)] = raw
    return bytes(data)


def _layout_v3(blobs: list[bytes], reserved: dict[int, int], users: dict[int, set[str]], sharing: bool,
               meta: dict) -> bytes:
    """Format version 3 (docs/context-binary.md "Data sections"): with WEIGHT_SHARING_ENABLED the
    weights several graphs (or the context tensors) share are one data section and the graphs' own
    weights another; each section starts on a 4 KiB page; each blob on the 256-byte granule of
    the plan's DDR blocks, taking the bytes of its prepared format (``reserved``; its data
    first, zero padding after)."""
    shared = [i for i in range(len(blobs)) if sharing and (len(users.get(i, ())) > 1 or "" in users.get(i, ()))]
    own = [i for i in range(len(blobs)) if i not in set(shared)]
    offsets: dict[int, int] = {}
    sections = []
    end = 0
    for name, members in (("shared", shared), ("weights", own)):
        if not members:
            continue
        start = rel = _align(end, DATA_ALIGN)
        for i in members:
            rel = _align(rel, CONSTANT_ALIGN)
            offsets[i] = rel
            rel += max(len(blobs[i]), reserved.get(i, 0))
        sections.append({"name": name, "offset": start, "size": rel - start})
        end = rel
    meta["sections"] = sections
    meta["blobs"] = []
    for i, raw in enumerate(blobs):
        entry = {"offset": offsets[i], "size": len(raw), "crc32": zlib.crc32(raw)}
        if reserved.get(i, 0) > len(raw):
            entry["reserved"] = reserved[i]
        meta["blobs"].append(entry)
    data = bytearray(end)
    for i, raw in enumerate(blobs):
        data[offsets[i]:offsets[i] + len(raw)] = raw
    return bytes(data)


def serialize(context, *, func: str = "contextGetBinary") -> bytes:
    """The context binary of ``context`` (every graph must be finalized)."""
    code = (Q.QNN_CONTEXT_ERROR_GET_BINARY_SIZE_FAILED if func == "contextGetBinarySize"
            else Q.QNN_CONTEXT_ERROR_GET_BINARY_FAILED)
    if getattr(context, "deferred", None) is not None:
        context.deferred.build_all()  # graphs of a deferred-init context are part of its binary
    log = getattr(context, "log", None) or NULL_LOGGER
    graphs: list[Graph] = []
    for name, g in list(context.graphs.items()):
        if not isinstance(g, Graph):
            continue
        if not g.finalized:
            fail(Location(func), "QNNEMU-binary-graph-not-finalized",
                 f"graph '{name}' is not finalized; context binaries hold finalized graphs "
                 f"only (call graphFinalize first)", code=Q.QNN_CONTEXT_ERROR_NOT_FINALIZED)
        graphs.append(g)
    sharing = weight_sharing_enabled(context.configs)
    if sharing:
        _warn_weight_sharing_limits(graphs, _device_model(context.device), func)
    store = _BlobStore()
    version = fmt.FORMAT_VERSION
    with_plan = version >= PLAN_FORMAT_VERSION
    users: dict[int, set[str]] = {}      # blob -> the graphs using it ("" = the context tensors)
    reserved: dict[int, int] = {}        # blob -> bytes its prepared format takes (version 3)
    shared = lora_layout(context, graphs)   # LORA_WEIGHT_SHARING_ENABLED (qnnemu/core/binary/lora.py)
    try:
        # NULL tensors (absent optional inputs, made by clients such as ONNX Runtime's QNN EP)
        # hold nothing and no node refers to them (absent inputs are stored as null): skipped.
        ctx_tensors = [_tensor_json(t, store, "context") for t in context.tensors.values()
                       if t.type != Q.QNN_TENSOR_TYPE_NULL]
        for t in ctx_tensors:
            if t["blob"] is not None:
                users.setdefault(t["blob"], set()).add("")
        graphs_json = []
        for g in graphs:
            scope = "context" if sharing else f"graph:{g.name}"
            packing = weights_packing_enabled(g.configs)
            tensors = [_tensor_json(shared.stored_form(g, t) if shared else t, store, scope, packing)
                       for t in g.tensors.values() if t.type != Q.QNN_TENSOR_TYPE_NULL]
            padded = _prepared_constant_bytes(g) if with_plan else {}
            for t in tensors:
                if t["blob"] is not None:
                    users.setdefault(t["blob"], set()).add(g.name)
                    if t["id"] in padded and "packing" not in t:
                        reserved[t["blob"]] = max(reserved.get(t["blob"], 0), padded[t["id"]])
            nodes = [{"name": n.name, "package": getattr(n, "package", None) or ops.PACKAGE_NAME,
                      "type": n.op_type, "params": [_param_json(p) for p in _node_params(n)],
                      "inputs": [None if i is None else int(i) for i in n.inputs],
                      "outputs": [int(i) for i in n.outputs]} for n in g.nodes]
            record = {
                "name": g.name, "configs": _graph_configs_json(g, log), "tensors": tensors,
                "nodes": nodes, "inputs": [t.id for t in g.app_inputs()],
                "outputs": [t.id for t in g.app_outputs()],
                "spill_fill_bytes": int(getattr(g, "spill_fill_bytes", 0) or 0)}
            plan = getattr(g, "htp_plan", None)
            if with_plan and plan is not None:
                record["plan"] = plan_record.encode(plan)
            graphs_json.append(record)
    except _Unencodable as e:
        raise error(Location(func), "QNNEMU-binary-unserializable", f"cannot store {e} in a context binary",
                    code=code) from None
    meta = {
        "format": FORMAT_NAME, "version": version,
        "context": {"configs": _context_configs_json(context.configs, log), "tensors": ctx_tensors},
        "graphs": graphs_json,
    }
    laid = _layout_v3(store.blobs, reserved, users, sharing, meta) if with_plan else _layout(store.blobs, meta)
    # the one shared LoRA blob, last (version 3: a data section of its own, on a 4 KiB page)
    data = append_lora_blob(shared, meta, bytearray(laid), graphs, DATA_ALIGN if with_plan else None)
    model = _device_model(context.device)
    header = Header(version, HEADER_SIZE, 0, FLAG_WEIGHT_SHARING if sharing else 0, 0,
                    api_version.core_api_version(), (Q.QNN_HTP_API_VERSION_MAJOR, Q.QNN_HTP_API_VERSION_MINOR,
                                                Q.QNN_HTP_API_VERSION_PATCH),
                    int(model.soc_model), int(model.arch), int(model.vtcm_mb), 0, 0, 0, 0, api_version.BUILD_ID,
                    len(graphs))
    return assemble(header, meta, bytes(data))
