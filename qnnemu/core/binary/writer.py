"""contextGetBinary: ``serialize(context)``, the bytes of a context whose graphs are all
finalized (docs/context-binary.md).  Deterministic: the same context gives the same bytes.
"""
from __future__ import annotations

import zlib

from ... import ops
from ...headers import Q
from ...location import Location
from ...rules import error, fail, warn_at
from .. import api_version
from ..device import DeviceModel
from ..graph import Graph
from ..log import NULL_LOGGER
from . import format as fmt  # fmt.FORMAT_VERSION: read at call time (tests vary it)
from .format import FLAG_WEIGHT_SHARING, FORMAT_NAME, HEADER_SIZE, Header, _align, _Unencodable, assemble
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
    shared = lora_layout(context, graphs)   # LORA_WEIGHT_SHARING_ENABLED (qnnemu/core/binary/lora.py)
    try:
        # NULL tensors (absent optional inputs, made by clients such as ONNX Runtime's QNN EP)
        # hold nothing and no node refers to them (absent inputs are stored as null): skipped.
        ctx_tensors = [_tensor_json(t, store, "context") for t in context.tensors.values()
                       if t.type != Q.QNN_TENSOR_TYPE_NULL]
        graphs_json = []
        for g in graphs:
            scope = "context" if sharing else f"graph:{g.name}"
            packing = weights_packing_enabled(g.configs)
            tensors = [_tensor_json(shared.stored_form(g, t) if shared else t, store, scope, packing)
                       for t in g.tensors.values() if t.type != Q.QNN_TENSOR_TYPE_NULL]
            nodes = [{"name": n.name, "package": getattr(n, "package", None) or ops.PACKAGE_NAME,
                      "type": n.op_type, "params": [_param_json(p) for p in _node_params(n)],
                      "inputs": [None if i is None else int(i) for i in n.inputs],
                      "outputs": [int(i) for i in n.outputs]} for n in g.nodes]
            graphs_json.append({
                "name": g.name, "configs": _graph_configs_json(g, log), "tensors": tensors,
                "nodes": nodes, "inputs": [t.id for t in g.app_inputs()],
                "outputs": [t.id for t in g.app_outputs()],
                "spill_fill_bytes": int(getattr(g, "spill_fill_bytes", 0) or 0)})
    except _Unencodable as e:
        raise error(Location(func), "QNNEMU-binary-unserializable", f"cannot store {e} in a context binary",
                    code=code) from None
    offsets, rel = [], 0
    for raw in store.blobs:
        offsets.append(rel)
        rel = _align(rel + len(raw))
    meta = {
        "format": FORMAT_NAME, "version": fmt.FORMAT_VERSION,
        "context": {"configs": _context_configs_json(context.configs, log), "tensors": ctx_tensors},
        "graphs": graphs_json,
        "blobs": [{"offset": off, "size": len(raw), "crc32": zlib.crc32(raw)}
                  for off, raw in zip(offsets, store.blobs)],
    }
    data = bytearray(offsets[-1] + len(store.blobs[-1]) if store.blobs else 0)
    for off, raw in zip(offsets, store.blobs):
        data[off:off + len(raw)] = raw
    data = append_lora_blob(shared, meta, data, graphs)   # the one shared LoRA blob, last
    model = _device_model(context.device)
    header = Header(fmt.FORMAT_VERSION, HEADER_SIZE, 0, FLAG_WEIGHT_SHARING if sharing else 0, 0,
                    api_version.core_api_version(), (Q.QNN_HTP_API_VERSION_MAJOR, Q.QNN_HTP_API_VERSION_MINOR,
                                                Q.QNN_HTP_API_VERSION_PATCH),
                    int(model.soc_model), int(model.arch), int(model.vtcm_mb), 0, 0, 0, 0, api_version.BUILD_ID,
                    len(graphs))
    return assemble(header, meta, bytes(data))
