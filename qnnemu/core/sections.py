"""QnnTensor.h tensor updates and QnnContext.h binary sections of UPDATABLE tensors (the LoRA
adapter path): ``QnnTensor_updateGraphTensors`` / ``QnnTensor_updateContextTensors``,
``QnnContext_getBinarySectionSize`` / ``getBinarySection`` / ``applyBinarySection``,
``QnnContext_getBinarySectionUpdate``; QNN HTP backend documentation, "QNN HTP Context Config
Options", QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION.  The format and the rules
are documented in docs/binary-sections.md.

Tensor updates
  ``resolve_desc`` (an app's Qnn_Tensor_t) and ``resolve_entry`` (a section's tensor) check one
  update against the tensor it names (found by id, then by name, as graphExecute matches its
  tensors): the tensor must be of an ``UPDATEABLE_*`` type and keep its data type, dimensions
  and quantization encoding; new static data must be exactly the tensor's size.
  ``apply_updates`` installs a list of checked updates atomically: the new values are set, every
  node reading or writing an updated tensor is checked again by its op's rules (so a value the
  node would have refused at graphAddNode is refused now) and the finalized plans are refreshed
  (``plan.refresh_plan``: only the affected steps are rebuilt); if anything fails, every tensor
  gets its old values back and no plan changes -- the context "retains its prior state", as
  QnnContext.h asks of a failed applyBinarySection.

Binary sections
  ``build_section(context, graph, section_type)`` serializes the current values of the
  updatable tensors of one graph (those it creates and the context tensors its nodes use) or of
  the whole context; ``parse_section`` checks one (magic, version, sizes, CRC32 unless told to
  skip it, metadata schema) and ``apply_section`` applies it with ``apply_updates``.
  ``update_section`` is getBinarySectionUpdate: a new section with some tensors replaced.
  In a context with QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED an applied section
  is also the graph's cached LoRA adapter, which unblocks its executes (qnnemu/htp/lora.py).
"""
from __future__ import annotations

import json
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ..headers import Q
from ..htp import lora as htp_lora
from ..location import Location
from ..rules import error, fail
from ..spec import dtypes
from . import api_version, binary as _binary
from .graph import Graph, node_check_error
from .tensor import STATIC_TYPES, UPDATEABLE_TYPES, RawQuant, Tensor, TensorDesc, is_static, quant_spec, type_name

# ------------------------------------------------------------------------------ format constants
MAGIC = b"QNNEMUBS"
FORMAT_VERSION = 1
FORMAT_NAME = "qnnemu.binary-section"
HEADER_SIZE = 64
ALIGN = 64
FLAG_FROZEN = 0x1          # made by getBinarySectionUpdate with keepUpdatable = 0
KNOWN_FLAGS = FLAG_FROZEN
# magic, version, header size, section type, flags, total size, metadata size, data offset,
# data size, CRC32 (of the whole section with this field zeroed), reserved
_HEADER = struct.Struct("<8sIIIIQQQQII")
assert _HEADER.size == HEADER_SIZE
_CRC_OFFSET = 56
MAX_TENSORS = 1 << 20

SECTION_NAMES = {
    Q.QNN_CONTEXT_SECTION_UPDATABLE: "QNN_CONTEXT_SECTION_UPDATABLE",
    Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS: "QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS",
    Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS: "QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS",
}
SKIP_VALIDATION_OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION"

INCOMPATIBLE = Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE
_UPDATE_LOCK = threading.RLock()   # one update (of any context) installs at a time


def section_name(section: int) -> str:
    return SECTION_NAMES.get(section, f"section type {section}")


def carries_data(section: int) -> bool:
    """Sections of this type carry (and apply) the data of UPDATEABLE_STATIC tensors."""
    return section in (Q.QNN_CONTEXT_SECTION_UPDATABLE, Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS)


def carries_quant(section: int) -> bool:
    """Sections of this type carry (and apply) the quantization of fixed-point tensors."""
    return section in (Q.QNN_CONTEXT_SECTION_UPDATABLE, Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS)


# ==================================================================================== updates
_KEEP = object()   # a field an update leaves as it is


@dataclass
class ResolvedUpdate:
    """One checked update: ``tensor`` gets ``data`` / ``quant`` unless they are ``_KEEP``."""

    tensor: Tensor
    path: str
    data: Any = _KEEP             # np.ndarray of the tensor's shape (or _KEEP)
    quant: Any = _KEEP            # QuantSpec | None (or _KEEP)


def _check_target(t: Tensor, dtype: int, dims, func: str, path: str) -> None:
    if t.type not in UPDATEABLE_TYPES:
        fail(Location(func).field(path), "QNNEMU-tensorUpdate-not-updatable",
             f"tensor '{t.name}' (id {t.id}) is {type_name(t.type)}; only QNN_TENSOR_TYPE_UPDATEABLE_* "
             f"tensors can be updated", code=INCOMPATIBLE)
    if dtype != t.dtype:
        fail(Location(func).field(f"{path}.dataType"), "QNNEMU-tensorUpdate-dtype",
             f"{dtypes.name(dtype)} differs from {dtypes.name(t.dtype)} tensor '{t.name}' was created with",
             code=INCOMPATIBLE)
    if dims is None or tuple(dims) != tuple(t.dims):
        fail(Location(func).field(f"{path}.dimensions"), "QNNEMU-tensorUpdate-dims",
             f"{'NULL' if dims is None else list(dims)} differs from the dimensions {list(t.dims)} "
             f"tensor '{t.name}' was created with", code=INCOMPATIBLE)


def _check_quant(t: Tensor, raw: RawQuant, func: str, path: str):
    """The new quantization (None for real-valued tensors, whose encodings are ignored)."""
    q = quant_spec(raw, t.dtype, func, path, INCOMPATIBLE, tuple(t.dims))
    if q is None or t.quant is None:
        return q
    if q.encoding != t.quant.encoding:
        fail(Location(func).field(f"{path}.quantizeParams.quantizationEncoding"), "QNNEMU-tensorUpdate-quant-encoding",
             f"encoding {q.encoding} differs from encoding {t.quant.encoding} tensor '{t.name}' was "
             f"created with (an update keeps the encoding and changes its values)", code=INCOMPATIBLE)
    return q


def _new_data(t: Tensor, raw, size: int, func: str, path: str) -> np.ndarray:
    if raw is None:
        fail(Location(func).field(f"{path}.clientBuf.data"), "QNNEMU-tensorUpdate-data-null",
             f"an update of {type_name(t.type)} tensor '{t.name}' needs its new data (NULL given)",
             code=Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM)
    if size != t.nbytes:
        fail(Location(func).field(f"{path}.clientBuf.dataSize"), "QNNEMU-tensorUpdate-data-size",
             f"is {size} bytes; tensor '{t.name}' ({list(t.dims)} x {dtypes.name(t.dtype)}) needs "
             f"{t.nbytes}", code=INCOMPATIBLE)
    return np.frombuffer(raw, dtype=dtypes.numpy_dtype(t.dtype)).reshape(t.dims)


def resolve_desc(d: TensorDesc, lookup: Callable[[int, str | None], Tensor | None], func: str,
                 path: str, scope: str) -> ResolvedUpdate:
    """Checks an app's update ``d`` (a copied Qnn_Tensor_t) of the tensor ``lookup(id, name)``
    finds in ``scope`` (for messages, e.g. "graph 'g'")."""
    if d.version not in (1, 2):
        fail(Location(func).field(f"{path}.version"), "QNNEMU-tensor-version",
             f"must be QNN_TENSOR_VERSION_1 or _2, got {d.version}", code=Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM)
    v = f"{path}.v{d.version}"
    t = lookup(d.id, d.name)
    if t is None:
        fail(Location(func).field(f"{v}.id"), "QNNEMU-tensorUpdate-unknown",
             f"no tensor with id {d.id} or name '{d.name}' in {scope}", code=Q.QNN_TENSOR_ERROR_DOES_NOT_EXIST)
    _check_target(t, d.dtype, d.dims, func, v)
    out = ResolvedUpdate(t, v, quant=_check_quant(t, d.quant, func, v))
    if is_static(t):
        if d.mem_type != Q.QNN_TENSORMEMTYPE_RAW:
            fail(Location(func).field(f"{v}.memType"), "QNNEMU-tensorUpdate-memtype",
                 f"new data of {type_name(t.type)} tensor '{t.name}' is given in "
                 f"clientBuf (QNN_TENSORMEMTYPE_RAW), got memType {d.mem_type}",
                 code=Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM)
        out.data = _new_data(t, d.data if d.has_data_pointer else None, d.data_size, func, v)
    return out


def check_unique(updates: list[ResolvedUpdate], func: str) -> None:
    seen: dict[int, str] = {}
    for u in updates:
        if u.tensor.id in seen:
            fail(Location(func).field(u.path), "QNNEMU-tensorUpdate-duplicate",
                 f"tensor '{u.tensor.name}' (id {u.tensor.id}) is already updated by {seen[u.tensor.id]} "
                 f"in this call", code=Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM)
        seen[u.tensor.id] = u.path


def _graphs_of(context, build_deferred: bool = False) -> list:
    """The built graphs of ``context``; ``build_deferred``: first build those a context loaded
    with QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT has not built yet (a whole-context section
    covers them; an update need not: a graph built later reads the updated context tensors)."""
    deferred = getattr(context, "deferred", None)
    if build_deferred and deferred is not None:
        deferred.build_all()
    return [g for g in list(context.graphs.values()) if isinstance(g, Graph)]


def apply_updates(context, updates: list[ResolvedUpdate], func: str) -> None:
    """Installs checked updates atomically (see the module docstring); ``context`` owns every
    updated tensor (graph tensors of its graphs or its context tensors)."""
    check_unique(updates, func)
    if not updates:
        return
    with _UPDATE_LOCK:
        saved = [(u.tensor, u.tensor.data, u.tensor.quant) for u in updates]
        for u in updates:
            if u.data is not _KEEP:
                u.tensor.data = u.data
            if u.quant is not _KEEP:
                u.tensor.quant = u.quant
        ids = {u.tensor.id for u in updates}
        paths = {u.tensor.id: u.path for u in updates}
        try:
            commits = [g.prepare_update(ids, func, paths) for g in _graphs_of(context)]
        except BaseException:
            for t, data, quant in saved:
                t.data, t.quant = data, quant
            raise
        for commit in commits:
            commit()
        touch = getattr(context, "touch", None)
        if touch is not None:   # a cached context binary (contextGetBinary) is stale now
            touch()


# =================================================================================== sections
@dataclass
class SectionEntry:
    """One tensor of a section: its owner (a graph name, None for a context tensor) and values."""

    graph: str | None
    tensor: Tensor                  # id, name, type, dtype, dims, quant (None if not carried), data
    has_data: bool
    has_quant: bool


@dataclass
class Section:
    section: int
    graph: str | None               # None: a whole-context section
    flags: int
    entries: list[SectionEntry] = field(default_factory=list)
    build_id: str = ""

    @property
    def frozen(self) -> bool:
        return bool(self.flags & FLAG_FROZEN)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _uses(graph, tensor_id: int) -> bool:
    return any(tensor_id in n.outputs or tensor_id in n.inputs for n in graph.nodes)


def collect(context, graph, section: int) -> Section:
    """The current values of the updatable tensors ``section`` covers, for ``graph`` (None: all
    graphs and every updatable context tensor).  Graphs in creation order, tensors by id."""
    graphs = _graphs_of(context, build_deferred=True) if graph is None else [graph]
    with_data, with_quant = carries_data(section), carries_quant(section)

    def wanted(t: Tensor) -> bool:
        if t.type not in UPDATEABLE_TYPES:
            return False
        return (with_data and t.type in STATIC_TYPES) or (with_quant and t.quant is not None)

    def entry(owner: str | None, t: Tensor) -> SectionEntry:
        has_data = with_data and t.type in STATIC_TYPES
        has_quant = with_quant and t.quant is not None
        return SectionEntry(owner, Tensor(t.id, t.name, t.type, t.dtype, t.dims, t.quant if has_quant else None,
                                          t.data if has_data else None), has_data, has_quant)

    out = Section(section, None if graph is None else graph.name, 0)
    ctx_tensors = sorted((t for t in context.tensors.values() if wanted(t)), key=lambda t: t.id)
    if graph is None:
        out.entries += [entry(None, t) for t in ctx_tensors]
    else:
        out.entries += [entry(None, t) for t in ctx_tensors if _uses(graph, t.id)]
    for g in graphs:
        out.entries += [entry(g.name, t) for t in sorted(g.tensors.values(), key=lambda t: t.id) if wanted(t)]
    return out


def encode(sec: Section) -> bytes:
    """A section's bytes (deterministic: the same values give the same bytes)."""
    blobs: list[bytes] = []
    offsets: list[int] = []
    tensors = []
    rel = 0
    for e in sec.entries:
        t = e.tensor
        data = None
        if e.has_data:
            raw = np.ascontiguousarray(t.data).tobytes()
            data = {"offset": rel, "size": len(raw)}
            blobs.append(raw)
            offsets.append(rel)
            rel = _align(rel + len(raw))
        tensors.append({"graph": e.graph, "id": int(t.id), "name": t.name, "type": int(t.type),
                        "dtype": int(t.dtype), "dims": [int(n) for n in t.dims],
                        "quant": _binary._quant_json(t.quant) if e.has_quant else None,
                        "has_quant": e.has_quant, "data": data})
    meta = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION, "section": int(sec.section),
                       "graph": sec.graph, "build_id": sec.build_id or api_version.BUILD_ID, "tensors": tensors},
                      sort_keys=True, separators=(",", ":")).encode("utf-8")
    data_offset = _align(HEADER_SIZE + len(meta))
    data_size = offsets[-1] + len(blobs[-1]) if blobs else 0
    total = data_offset + data_size
    out = bytearray(total)
    out[HEADER_SIZE:HEADER_SIZE + len(meta)] = meta
    for off, raw in zip(offsets, blobs):
        out[data_offset + off:data_offset + off + len(raw)] = raw
    # the CRC field is still 0 here, which is how the CRC is defined
    _HEADER.pack_into(out, 0, MAGIC, FORMAT_VERSION, HEADER_SIZE, int(sec.section), sec.flags, total, len(meta),
                      data_offset, data_size, 0, 0)
    struct.pack_into("<I", out, _CRC_OFFSET, zlib.crc32(out))
    return bytes(out)


def build_section(context, graph, section: int) -> bytes:
    return encode(collect(context, graph, section))


def _crc(blob: bytes) -> int:
    return zlib.crc32(blob[_CRC_OFFSET + 4:], zlib.crc32(b"\0\0\0\0", zlib.crc32(blob[:_CRC_OFFSET])))


def parse_section(blob: bytes, func: str, *, check_crc: bool = True, path: str = "binaryBuffer") -> Section:
    """Checks and decodes a section; every failure is a QnnError with a ``QNNEMU-section-*`` rule."""
    bad = Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT
    if len(blob) < HEADER_SIZE or blob[:8] != MAGIC:
        fail(Location(func).field(path), "QNNEMU-section-magic",
             f"not a qnnemu binary section ({len(blob)} bytes, starting {bytes(blob[:8])!r}; expected "
             f"magic {MAGIC!r} and at least {HEADER_SIZE} bytes)", code=bad)
    (_, version, header_size, section, flags, total, meta_size, data_offset, data_size, stored_crc,
     _reserved) = _HEADER.unpack_from(blob, 0)
    if version != FORMAT_VERSION:
        fail(Location(func).field(path), "QNNEMU-section-version",
             f"section format version {version}; this qnnemu reads version {FORMAT_VERSION}",
             code=Q.QNN_CONTEXT_ERROR_BINARY_VERSION)
    if (header_size != HEADER_SIZE or total != len(blob) or data_offset < HEADER_SIZE + meta_size
            or data_offset + data_size != total or flags & ~KNOWN_FLAGS):
        fail(Location(func).field(path), "QNNEMU-section-truncated",
             f"inconsistent section layout: {len(blob)} bytes given, header says total {total}, header "
             f"{header_size}, metadata {meta_size}, data at {data_offset} ({data_size} bytes), flags "
             f"0x{flags:x}: the section is truncated or corrupted", code=bad)
    if check_crc:
        crc = _crc(blob)
        if crc != stored_crc:
            fail(Location(func).field(path), "QNNEMU-section-crc",
                 f"CRC32 mismatch (stored 0x{stored_crc:08x}, computed 0x{crc:08x}): the section is "
                 f"corrupted (QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION skips this "
                 f"check)", code=bad)
    try:
        return _decode_meta(blob, section, flags, meta_size, data_offset, data_size, path)
    except _binary._Bad as e:
        raise error(Location(func).field(path), "QNNEMU-section-metadata", f"malformed section metadata: {e}",
                    code=bad) from None


def _decode_meta(blob: bytes, section: int, flags: int, meta_size: int, data_offset: int, data_size: int,
                 path: str) -> Section:
    b = _binary.metadata   # the context binary schema helpers: typed, bounded reads
    try:
        meta = json.loads(bytes(blob[HEADER_SIZE:HEADER_SIZE + meta_size]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise b._Bad(f"metadata is not JSON ({e})") from None
    meta = b._obj(meta, "metadata")
    if b._key(meta, "format", "metadata") != FORMAT_NAME or b._key(meta, "version", "metadata") != FORMAT_VERSION:
        raise b._Bad(f"metadata: format {meta.get('format')!r} version {meta.get('version')!r} is not "
                     f"{FORMAT_NAME!r} version {FORMAT_VERSION}")
    if b._key(meta, "section", "metadata") != section:
        raise b._Bad(f"metadata.section {meta.get('section')!r} differs from the header's {section}")
    graph = meta.get("graph")
    if graph is not None:
        graph = b._str(graph, "metadata.graph")
    raw_build_id = meta.get("build_id")
    build_id = raw_build_id if isinstance(raw_build_id, str) else ""
    items = b._list(b._key(meta, "tensors", "metadata"), "metadata.tensors")
    if len(items) > MAX_TENSORS:
        raise b._Bad(f"metadata.tensors: {len(items)} tensors")
    sec = Section(section, graph, flags, build_id=build_id)
    for i, item in enumerate(items):
        p = f"metadata.tensors[{i}]"
        item = b._obj(item, p)
        owner = item.get("graph")
        if owner is not None:
            owner = b._str(owner, f"{p}.graph")
        tid = b._int(b._key(item, "id", p), f"{p}.id", 1, b.MAX_ID)
        name = b._str(b._key(item, "name", p), f"{p}.name")
        ttype = b._int(b._key(item, "type", p), f"{p}.type", 0, 0x7FFFFFFF)
        if ttype not in UPDATEABLE_TYPES:
            raise b._Bad(f"{p}.type: {type_name(ttype)} is not an updatable tensor type")
        dtype = b._int(b._key(item, "dtype", p), f"{p}.dtype", 0, 0x7FFFFFFF)
        if not dtypes.is_known(dtype):
            raise b._Bad(f"{p}.dtype: {dtypes.name(dtype)}")
        dims_v = b._list(b._key(item, "dims", p), f"{p}.dims")
        if len(dims_v) > b.MAX_RANK:
            raise b._Bad(f"{p}.dims: rank {len(dims_v)}")
        dims = tuple(b._int(d, f"{p}.dims[{k}]", 1, b.MAX_DIM) for k, d in enumerate(dims_v))
        has_quant = b._key(item, "has_quant", p)
        if not isinstance(has_quant, bool):
            raise b._Bad(f"{p}.has_quant: expected true or false")
        quant = b._quant_from_json(item.get("quant"), dtype, dims, f"{p}.quant") if has_quant else None
        data = None
        loc = item.get("data")
        if loc is not None:
            loc = b._obj(loc, f"{p}.data")
            off = b._int(b._key(loc, "offset", f"{p}.data"), f"{p}.data.offset", 0, data_size)
            size = b._int(b._key(loc, "size", f"{p}.data"), f"{p}.data.size", 0, data_size)
            if off + size > data_size:
                raise b._Bad(f"{p}.data: bytes [{off}, {off + size}) outside the {data_size}-byte data area")
            start = data_offset + off
            data = memoryview(blob)[start:start + size]
        # (the entry's tensor holds the section's raw bytes; resolving the update makes them an array)
        sec.entries.append(SectionEntry(owner, Tensor(tid, name, ttype, dtype, dims, quant, cast(Any, data)),
                                        data is not None, has_quant))
    return sec


def _match(tensors: dict[int, Tensor], names: dict[str, int], tid: int, name: str | None) -> Tensor | None:
    """By id (when its name agrees, or no name is given), else by name."""
    t = tensors.get(tid) if tid else None
    if t is not None and (name is None or t.name == name):
        return t
    other = names.get(name) if name else None
    return tensors.get(other) if other is not None else None


def resolve_entry(e: SectionEntry, target: Tensor | None, func: str, path: str, scope: str) -> ResolvedUpdate:
    """Checks a section's tensor ``e`` against the tensor ``target`` it updates."""
    s = e.tensor
    if target is None:
        fail(Location(func).field(path), "QNNEMU-tensorUpdate-unknown",
             f"no tensor with id {s.id} or name '{s.name}' in {scope}", code=Q.QNN_TENSOR_ERROR_DOES_NOT_EXIST)
    _check_target(target, s.dtype, s.dims, func, path)
    out = ResolvedUpdate(target, path)
    if e.has_quant:
        out.quant = _check_quant(target, _binary._raw_quant(s.quant), func, path)
    if e.has_data:
        if not is_static(target):
            fail(Location(func).field(path), "QNNEMU-tensorUpdate-not-updatable",
                 f"the section carries data for {type_name(target.type)} tensor '{target.name}', which "
                 f"holds none", code=INCOMPATIBLE)
        assert s.data is not None   # (has_data: the section carries the bytes)
        out.data = _new_data(target, s.data, len(s.data), func, path)
    return out


def apply_section(context, graph, sec: Section, func: str) -> int:
    """Applies a parsed section to ``context`` (``graph``: the graph handle's object or None);
    returns the number of tensors updated."""
    bad = Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT
    if graph is not None and sec.graph != graph.name:
        fail(Location(func).path("graph"), "QNNEMU-section-graph",
             f"the section was made for {_scope_text(sec.graph)}, not for graph '{graph.name}'", code=bad)
    by_name = {g.name: g for g in _graphs_of(context, build_deferred=graph is None)}
    updates = []
    for i, e in enumerate(sec.entries):
        path = f"binaryBuffer: tensors[{i}] ('{e.tensor.name}')"
        if e.graph is None:
            target = _match(context.tensors, context.tensor_names, e.tensor.id, e.tensor.name)
            scope = "the context's tensors"
        else:
            owner = by_name.get(e.graph) if graph is None or e.graph == graph.name else None
            if owner is None:
                where = (f"graphs of this context: {sorted(by_name) or 'none'}" if graph is None
                         else f"the section may only update graph '{graph.name}' and context tensors")
                fail(Location(func).field(path), "QNNEMU-section-graph",
                     f"the section updates graph '{e.graph}' ({where})", code=bad)
            target = _match(owner.tensors, owner.by_name, e.tensor.id, e.tensor.name)
            scope = f"graph '{e.graph}'"
        updates.append(resolve_entry(e, target, func, path, scope))
    apply_updates(context, updates, func)
    # LORA_WEIGHT_SHARING_ENABLED: the section is now the graph's cached adapter (qnnemu/htp/lora.py)
    names = [graph.name] if graph is not None else list(by_name)
    weights = {name: sum(len(cast(Any, e.tensor.data)) for e in sec.entries if e.has_data and e.graph in (name, None))
               for name in names}   # each graph's own weights and the context tensors' of the section
    htp_lora.note_applied(context, weights, carries_data(sec.section))
    return len(updates)


def _scope_text(graph: str | None) -> str:
    return "the whole context (graph NULL)" if graph is None else f"graph '{graph}'"


def skip_validation(configs: dict) -> bool:
    """QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION = true in a context's configs."""
    value = (configs.get("htp") or {}).get(SKIP_VALIDATION_OPTION) if isinstance(configs, dict) else None
    return bool(value.get("skipValidationOnBinarySection")) if isinstance(value, dict) else False


def update_section(blob: bytes, updates: list[TensorDesc], keep_updatable: bool, func: str) -> bytes:
    """getBinarySectionUpdate: ``blob`` (a section) with the tensors of ``updates`` replaced."""
    sec = parse_section(blob, func)
    if sec.frozen:
        fail(Location(func).path("binaryBuffer"), "QNNEMU-section-frozen",
             "the section was made by getBinarySectionUpdate with keepUpdatable = 0 and can no longer "
             "be updated", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    tensors = {e.tensor.id: e for e in sec.entries}
    names = {e.tensor.name: e.tensor.id for e in sec.entries}
    pseudo = {tid: e.tensor for tid, e in tensors.items()}
    resolved = []
    for i, d in enumerate(updates):
        r = resolve_desc(d, lambda tid, name: _match(pseudo, names, tid, name), func, f"tensors[{i}]",
                         "the section")
        e = tensors[r.tensor.id]
        if r.data is not _KEEP and not e.has_data:
            r.data = _KEEP      # the section type does not carry data (QUANT_PARAMS)
        if r.quant is not _KEEP and not e.has_quant:
            r.quant = _KEEP     # nor quantization (WEIGHTS)
        resolved.append(r)
    check_unique(resolved, func)
    for r in resolved:
        if r.data is not _KEEP:
            r.tensor.data = r.data
        if r.quant is not _KEEP:
            r.tensor.quant = r.quant
    sec.flags = (sec.flags & ~FLAG_FROZEN) | (0 if keep_updatable else FLAG_FROZEN)
    return encode(sec)


__all__ = ["MAGIC", "FORMAT_VERSION", "HEADER_SIZE", "FLAG_FROZEN", "SECTION_NAMES", "Section", "SectionEntry",
           "ResolvedUpdate", "resolve_desc", "resolve_entry", "apply_updates", "check_unique", "collect",
           "encode", "build_section", "parse_section", "apply_section", "update_section", "skip_validation",
           "section_name", "carries_data", "carries_quant", "node_check_error"]
