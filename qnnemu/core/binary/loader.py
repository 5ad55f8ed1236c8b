"""contextCreateFromBinary / contextValidateBinary: the compatibility rules (QnnContext.h
QnnContext_BinaryCompatibilityType_t), ``validate`` and ``deserialize`` -- a new Context rebuilt
through the normal creation, graphAddNode and graphFinalize checks (docs/context-binary.md
"Loading").
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import rules
from ...errors import QnnError
from ...headers import Q
from ...htp.packing import PACKINGS, unpack_codes
from ...htp.switching import graph_own_bytes
from ...location import Location
from ...ops.base import QuantSpec
from ...rules import error, fail
from .. import api_version
from ..context import Context
from ..device import DeviceModel, model_from_configs
from ..graph import Graph, OpConfigDesc
from ..log import NULL_LOGGER
from ..tensor import RawQuant, Tensor, TensorDesc, from_desc, validate_desc
from . import format as fmt  # fmt.FORMAT_VERSION: read at call time (tests vary it)
from .format import PERMISSIVE, STRICT, Header, ReadStats, _abort, _as_view, _guard, parse_header
from .lora import attach as attach_lora
from .metadata import _PER_TENSOR_ENCODINGS, BinaryInfo, GraphInfo, TensorInfo, _metadata, inspect
from .writer import _device_model


# ------------------------------------------------------------------------------ compatibility
def compatibility_mode(value: Any, func: str = "contextCreateFromBinary") -> str:
    """"strict"/"permissive" from a string or a QnnContext_BinaryCompatibilityType_t value."""
    if value in (STRICT, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT):
        return STRICT
    if value in (PERMISSIVE, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE, None):
        return PERMISSIVE
    fail(Location(func), "QNNEMU-binary-compatibility",
         f"binaryCompatibilityType {value!r} is neither QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE "
         f"nor QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)


def _soc_name(soc: int) -> str:
    return Q.enum("QNN_SOC_MODEL_").get(soc, f"SoC model {soc}").replace("QNN_SOC_MODEL_", "")


def check_compatibility(h: Header, device, mode: str, log=None, func: str = "contextCreateFromBinary") -> None:
    """The compatibility rules (docs/context-binary.md "Compatibility")."""
    log = log or NULL_LOGGER
    ours = api_version.core_api_version()
    if h.core_api[0] != ours[0]:
        fail(Location(func), "QNNEMU-binary-api-version",
             f"binaryBuffer: made for QNN core API {'.'.join(map(str, h.core_api))}, this backend "
             f"implements {'.'.join(map(str, ours))} (major versions differ)", code=Q.QNN_CONTEXT_ERROR_BINARY_VERSION)
    reasons = []
    if h.format_version < fmt.FORMAT_VERSION:
        reasons.append(("QNNEMU-binary-suboptimal-version",
                        f"format version {h.format_version} is older than the current {fmt.FORMAT_VERSION}"))
    model = _device_model(device)
    unknown = Q.QNN_SOC_MODEL_UNKNOWN
    soc_differs = h.soc_model != unknown and model.soc_model != unknown and h.soc_model != model.soc_model
    if soc_differs or h.htp_arch != model.arch:
        reasons.append(("QNNEMU-binary-suboptimal-device",
                        (f"prepared for {_soc_name(h.soc_model)} (HTP v{h.htp_arch}), the device is "
                         f"{_soc_name(model.soc_model)} (HTP v{model.arch})")))
    if h.build_id != api_version.BUILD_ID:
        log.info(f"{func}: binary made by qnnemu build {h.build_id or '(none)'}, this is {api_version.BUILD_ID}")
    for rule, why in reasons:
        if mode == STRICT:
            fail(Location(func), rule,
                 f"binaryBuffer: suboptimal binary under QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT: "
                 f"{why} (PERMISSIVE loads it)", code=Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL)
        rules.warn("QNNEMU-binary-suboptimal-loaded", func, "binaryBuffer",
                   f"{why}; loaded anyway (QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE; STRICT refuses it "
                   f"with {rule})", logger=log)


def validate(blob: Any, device=None, compatibility: Any = PERMISSIVE, *, logger=None,
             func: str = "contextValidateBinary", backend=None, configs: dict | None = None,
             enable_graphs=None) -> BinaryInfo:
    """``contextValidateBinary``: every check ``deserialize`` makes.  The header, the metadata and
    the compatibility rules; then, with ``backend``, the rebuild's own checks -- every (enabled)
    tensor, node and graph through the creation / graphAddNode / graphFinalize rules (an unknown
    op type, a node its op refuses, an output nothing writes) -- on a context no one sees, which
    is freed before returning: nothing is left behind, and a binary passes exactly when
    ``deserialize`` with the same arguments would load it."""
    mode = compatibility_mode(compatibility, func)
    info = inspect(blob, func=func)
    check_compatibility(info.header, device, mode, logger, func)
    if backend is not None:
        # persistent: static tensors are views of the caller's buffer (no copy), valid while
        # this call runs -- the context is gone when it returns.
        ctx = deserialize(blob, backend, device, compatibility=mode, logger=NULL_LOGGER, configs=configs,
                          enable_graphs=enable_graphs, func=func, persistent=True)
        ctx.free()
    return info


# ------------------------------------------------------------------------------ deserialize
def _raw_quant(q: QuantSpec | None) -> RawQuant:
    if q is None:
        return RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)
    r = RawQuant(Q.QNN_DEFINITION_DEFINED, q.encoding, axis=q.axis or 0, bitwidth=q.bitwidth or 0)
    if q.encoding in _PER_TENSOR_ENCODINGS:
        r.scale, r.offset = q.scale, q.offset
    else:
        r.scales, r.offsets = q.scale, q.offset
        if q.block_scales is not None:
            r.block_scales = q.block_scales
            r.blocks_per_axis = int(q.block_scales.shape[1])
            r.block_scale_storage = (Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8
                                     if q.block_scales.dtype == np.uint8
                                     else Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16)
            r.block_scale_bitwidth = 8 * q.block_scales.dtype.itemsize
    return r


def _tensor_desc(t: TensorInfo, data: memoryview | None) -> TensorDesc:
    return TensorDesc(2, t.id, t.name, t.type, t.data_format, t.dtype, _raw_quant(t.quant), t.dims,
                      t.mem_type, data, len(data) if data is not None else 0, data is not None)


def _ref_desc(t: TensorInfo | None) -> TensorDesc:
    """How a node refers to a created tensor (id, dimensions, data type), or a NULL tensor."""
    if t is None:
        return TensorDesc(2, 0, None, Q.QNN_TENSOR_TYPE_NULL, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
                          Q.QNN_DATATYPE_FLOAT_32, RawQuant(0, 0), (), Q.QNN_TENSORMEMTYPE_RAW)
    return TensorDesc(2, t.id, t.name, t.type, t.data_format, t.dtype, _raw_quant(None), t.dims, t.mem_type)


def _merge_configs(stored: dict, runtime: dict | None) -> dict:
    out = dict(stored)
    out["htp"] = dict(stored.get("htp", {}))
    for k, v in (runtime or {}).items():
        if k == "htp" and isinstance(v, dict):
            out["htp"].update(v)
        else:
            out[k] = v
    if not out["htp"]:
        del out["htp"]
    return out


def deserialize(blob: Any, backend, device, *, compatibility: Any = PERMISSIVE, logger=None,
                check_abort: Callable[[], Any] | None = None, configs: dict | None = None,
                on_graph: Callable[[str, int], None] | None = None, enable_graphs=None,
                func: str = "contextCreateFromBinary", data_source: Callable[[int, int], Any] | None = None,
                persistent: bool = False, defer_graphs: bool = False,
                on_context: Callable[[Any], None] | None = None, read: ReadStats | None = None):
    """A new Context rebuilt from ``blob`` (not registered with ``backend``: the caller makes its
    handle, or does so in ``on_context``).  ``configs``: load-time context configs, merged over
    the stored ones.
    ``check_abort()`` is called between sections and graphs; a truthy result (or a QnnError it
    raises) cancels loading with nothing left behind.  ``on_graph(name, handle)`` is called after
    each graph is finalized (per-graph notifications).  ``enable_graphs``
    (QNN_CONTEXT_CONFIG_ENABLE_GRAPHS): names of the graphs to build, None for all.
    ``data_source(offset, size)``: the data section comes from it instead of ``blob`` (the DMA
    data provider of contextCreateFromBinaryWithCallback): called once with the section's offset
    in the binary and its size, it returns a buffer of at least ``size`` bytes, used in place;
    ``blob`` then needs only the header and metadata, and every blob's CRC-32 is checked.
    ``persistent`` (QNN_CONTEXT_CONFIG_PERSISTENT_BINARY): ``blob`` stays valid until the context
    is freed, so static tensors are views of it instead of a copy.
    ``defer_graphs`` (QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT): everything is checked, but a
    graph is built at its first ``graphRetrieve`` (``Context.deferred``) or by contextFinalize.
    ``on_context(ctx)`` is called once the Context object exists, before any graph is built (a
    caller that must hand out the context handle with the graph notifications registers it
    there; on failure the context is freed and the caller releases that handle).
    ``read`` (QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET): the binary is read -- its
    payload CRC and the copy of its data section -- in reads of at most ``read.chunk_bytes``,
    counted in ``read``."""
    log = logger or NULL_LOGGER
    mode = compatibility_mode(compatibility, func)

    def body():
        view = _as_view(blob, func)
        h = parse_header(view, func, external_data=data_source is not None, read=read)
        _abort(check_abort, func)
        info = _metadata(view, h, func, check_abort)
        check_compatibility(h, device, mode, log, func)
        # New tensors get ids after every stored one (also those of graphs not enabled).
        next_id = 1 + max((t.id for t in itertools.chain(
            info.context_tensors, *(g.tensors for g in info.graphs))), default=0)
        own_bytes = graph_own_bytes(info)   # every graph's, before ENABLE_GRAPHS filters (graph switching)
        if enable_graphs is not None:
            wanted = list(enable_graphs)
            missing = [n for n in wanted if info.graph(n) is None]
            if missing:
                fail(Location(func), "QNNEMU-binary-enable-graphs",
                     f"config enableGraphs: {missing} not in the binary (graphs: {info.graph_names})",
                     code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
            info.graphs = [g for g in info.graphs if g.name in wanted]
        _abort(check_abort, func)
        if data_source is not None:
            data = _external_data(data_source, h, info, func)
        else:
            # One copy of the data section when the caller's buffer may go away; static tensors
            # are read-only views into it (shared blobs stay shared in memory).
            section = view[h.data_offset:h.data_offset + h.data_size]
            if not (isinstance(blob, bytes) or persistent):
                section = memoryview(read.copy(section) if read is not None else bytes(section))
            data = _Data([(0, memoryview(section))])
        _abort(check_abort, func)
        ctx = Context(backend, device, log, _merge_configs(info.context_configs, configs))
        ctx.binary_graph_bytes = own_bytes
        attach_lora(ctx, view, h, info, configs, func)   # LORA_WEIGHT_SHARING_ENABLED (core/binary/lora.py)
        try:
            if on_context is not None:
                on_context(ctx)
            _build_context_tensors(ctx, info, data, func)
            ctx.reserve_ids(next_id)
            deferred = _Deferred(ctx, info, data, func, log)
            if defer_graphs:
                ctx.deferred = deferred
                log.info(f"{func}: {len(info.graphs)} graph(s) checked; QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT: "
                         f"each is built at its first graphRetrieve (or by contextFinalize)")
            else:
                for g in info.graphs:
                    _abort(check_abort, func)
                    graph = deferred.build(g.name)
                    if on_graph is not None and graph is not None:   # (a graph of info.graphs: built)
                        on_graph(g.name, graph.handle)
                _abort(check_abort, func)
            log.info(f"{func}: loaded {len(info.graphs)} graph(s) "
                     f"({', '.join(repr(g.name) for g in info.graphs) or 'none'}), {h.total_size} bytes, "
                     f"format version {h.format_version}")
        except BaseException:
            ctx.free()
            raise
        return ctx
    return _guard(func, body)


class _Data:
    """The data section(s) the blobs are read from: (offset of the section in the data section,
    its bytes) -- one view of the whole data section, or one buffer per data section from a data
    provider."""

    def __init__(self, views: list[tuple[int, memoryview]]):
        self.views = views

    def blob(self, b) -> memoryview:
        if b.size == 0:
            return memoryview(b"")
        for start, view in reversed(self.views):
            if start <= b.offset:
                return view[b.offset - start:b.offset - start + b.size]
        raise AssertionError("a checked blob outside every data section")


def _external_data(data_source, h: Header, info: BinaryInfo, func: str) -> _Data:
    """Each data section from ``data_source`` (one request per section: QNN HTP backend
    documentation, "QnnContext_createFromBinaryWithCallback API": "once for each data section
    being loaded (e.g., shared weights and non-shared weights are handled separately)"), every
    blob's CRC-32 checked."""
    views = []
    for sec in info.sections:
        if sec.size == 0:
            continue
        buf = data_source(h.data_offset + sec.offset, sec.size)
        view = memoryview(buf).cast("B")
        if len(view) < sec.size:
            fail(Location(func), "QNNEMU-binary-truncated",
                 f"the data provider gave {len(view)} bytes for the {sec.size}-byte data section '{sec.name}'",
                 code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        views.append((sec.offset, view[:sec.size]))
    data = _Data(views)
    for i, b in enumerate(info.blobs):
        crc = zlib.crc32(data.blob(b))
        if crc != b.crc32:
            fail(Location(func), "QNNEMU-binary-crc",
                 f"data section from the data provider: blob {i} [{b.offset}, +{b.size}) CRC32 mismatch "
                 f"(stored 0x{b.crc32:08x}, computed 0x{crc:08x}): wrong or corrupted data",
                 code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    return data


class _Deferred:
    """Builds the graphs of a checked binary into ``ctx`` by name (each at most once)."""

    def __init__(self, ctx, info: BinaryInfo, data: _Data, func: str, log):
        self.ctx = ctx
        self.info = info
        self.data = data
        self.func = func
        self.log = log

    @property
    def pending(self) -> list[str]:
        return [g.name for g in self.info.graphs if g.name not in self.ctx.graphs]

    def build(self, name: str) -> Graph | None:
        """Graph ``name`` (built now if needed); None if the binary has no such (enabled) graph."""
        if name in self.ctx.graphs:
            return self.ctx.graphs[name]
        g = self.info.graph(name)
        if g is None:
            return None
        graph = _build_graph(self.ctx, self.info, g, self.data, self.func)
        # Graphs keep the binary's order whatever order they are retrieved in (serialize writes
        # them in context order: the same bytes again).
        order = {n: i for i, n in enumerate(gi.name for gi in self.info.graphs)}
        graphs = sorted(self.ctx.graphs.items(), key=lambda kv: order.get(kv[0], len(order)))
        self.ctx.graphs.clear()
        self.ctx.graphs.update(graphs)
        if self.ctx.deferred is self and not self.pending:
            self.ctx.deferred = None  # every graph is built: nothing deferred any more
        return graph

    def build_all(self) -> None:
        for name in self.pending:
            self.build(name)


def _rebuild_failure(func: str, where: str, e: QnnError) -> str:
    """What the graph rebuild's rule ``e`` said, told from the binary's side: ``where`` in the
    binary, then the rule's own text (without its function and ``where`` again) and id."""
    detail = e.detail[len(func) + 2:] if e.detail.startswith(f"{func}: ") else e.detail
    if detail.startswith(f"{where}"):
        detail = detail[len(where):].lstrip(".: ")
    return f"{where}: {detail} [{e.rule}]"


def _make_tensor(t: TensorInfo, info: BinaryInfo, data: _Data, func: str, where: str) -> Tensor:
    blob = None
    if t.blob is not None:
        b = info.blobs[t.blob]
        blob = data.blob(b)
        if t.packing:
            # The exact original codes, unpacked once per (blob, packing, count): tensors sharing
            # a packed blob share the unpacked array too.
            count = math.prod(t.dims)
            key = (t.blob, t.packing, count)
            if key not in info.unpacked:
                info.unpacked[key] = unpack_codes(blob, count, PACKINGS[t.packing])
            blob = memoryview(info.unpacked[key])
    d = _tensor_desc(t, blob)
    try:
        quant, static = validate_desc(d, func, where)
    except QnnError as e:
        raise error(Location(func).path("binaryBuffer"), "QNNEMU-binary-graph", _rebuild_failure(func, where, e),
                    code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
    return from_desc(d, t.id, quant, static)


def _build_context_tensors(ctx, info: BinaryInfo, data: _Data, func: str) -> None:
    for t in info.context_tensors:
        tensor = _make_tensor(t, info, data, func, f"context tensor '{t.name}'")
        ctx.tensors[tensor.id] = tensor
        ctx.tensor_names[tensor.name] = tensor.id


def prepared_device(h: Header) -> DeviceModel:
    """The device a binary was prepared for, from its header: its SoC when it records one,
    else its arch; the recorded VTCM size either way."""
    unknown = Q.QNN_SOC_MODEL_UNKNOWN
    try:
        model = model_from_configs(h.soc_model if h.soc_model != unknown else None,
                                   h.htp_arch if h.soc_model == unknown else None, None)
    except QnnError:  # a SoC/arch this emulator has no row for: the default device's numbers
        model = DeviceModel()
    if h.vtcm_mb and h.vtcm_mb != model.vtcm_mb:
        model = dataclasses.replace(model, vtcm_mb=int(h.vtcm_mb), vtcm_bytes=int(h.vtcm_mb) << 20)
    return model


def _build_graph(ctx, info: BinaryInfo, g: GraphInfo, data: _Data, func: str) -> Graph:
    """Graph ``g`` rebuilt through the creation / graphAddNode / graphFinalize rules.  A graph
    that fails is released again."""
    where = f"graph '{g.name}'"
    try:
        graph = ctx.new_graph(g.name)
    except QnnError as e:
        raise error(Location(func).path("binaryBuffer"), "QNNEMU-binary-graph", _rebuild_failure(func, where, e),
                    code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
    try:
        graph.configs = g.configs
        # The HTP plan is the one made at prepare, for the device the binary records (a binary
        # loaded on another SoC under PERMISSIVE is not re-planned for it).
        graph.prepared_for = prepared_device(info.header)
        by_id = {t.id: t for t in info.context_tensors}
        for t in g.tensors:
            tensor = _make_tensor(t, info, data, func, f"{where}: tensor '{t.name}'")
            graph.tensors[tensor.id] = tensor
            graph.by_name[tensor.name] = tensor.id
            by_id[t.id] = t
        for n in g.nodes:
            cfg = OpConfigDesc(1, n.name, n.package, n.type_name, n.params,
                               [_ref_desc(None if i is None else by_id[i]) for i in n.inputs],
                               [_ref_desc(by_id[i]) for i in n.outputs])
            try:
                graph.add_node(cfg, report=False)   # its warnings were logged when it was built
            except QnnError as e:
                node = f"{where}: node '{n.name}' ({n.type_name})"
                raise error(Location(func).path("binaryBuffer"), "QNNEMU-binary-graph", _rebuild_failure(func, node, e),
                            code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
        # Format version 3 records the plan prepare made: the graph runs that sequence and data
        # paging instead of preparing again (docs/context-binary.md "Sequencing and data paging").
        graph.recorded_htp_plan = g.plan
        try:
            graph.finalize()
        except QnnError as e:
            raise error(Location(func).path("binaryBuffer"), "QNNEMU-binary-graph", _rebuild_failure(func, where, e),
                        code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY) from None
        # The recorded size stays authoritative (finalize re-planned for ``prepared_for``, which
        # gives the same plan unless the cost model changed since the binary was made).
        graph.spill_fill_bytes = g.spill_fill_bytes
    except BaseException:
        ctx.discard_graph(g.name)
        raise
    return graph
