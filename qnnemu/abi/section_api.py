"""QnnContext.h binary sections (contextGetBinarySectionSize / GetBinarySection /
ApplyBinarySection, contextGetBinarySectionUpdate / FreeBinarySectionUpdate) and QnnTensor.h
updatable tensors (tensorUpdateGraphTensors, tensorUpdateContextTensors): the LoRA-adapter path
ONNX Runtime's QNN EP takes (``contextApplyBinarySection(ctx, graph, QNN_CONTEXT_SECTION_UPDATABLE,
&buffer, profile, NULL)``).  Semantics and format: qnnemu/core/sections.py, docs/binary-sections.md.

Arguments at this boundary:
- ``section``: one of QNN_CONTEXT_SECTION_UPDATABLE / _UPDATABLE_WEIGHTS / _UPDATABLE_QUANT_PARAMS;
- ``graph``: NULL (the whole context) or a graph of ``context``;
- ``QnnContext_Buffer_t``: QNN_CONTEXT_BUFFER_VERSION_1, QNN_CONTEXTMEMTYPE_RAW with a non-NULL
  ``binaryBuf.data`` (memory handles are not accepted yet);
- ``profile``: NULL or a profile handle.  contextApplyBinarySection records the HTP events
  GRAPH_APPLY_BINARY_SECTION_QNN (the whole call) and GRAPH_APPLY_BINARY_SECTION_RPC (checking and
  installing the new values); the get calls define no events, a profile passed to them is checked
  and its events are reset (a re-used handle "would reset", QnnContext.h);
- ``signal``: must be NULL for now (QNNEMU-section-signal).
"""
from __future__ import annotations

import threading
import time

from ..core import sections
from ..core.context import Context
from ..core.graph import Graph
from ..core.log import Logger
from ..core.profile import ProfileEvent, micros
from ..headers import Q
from ..location import Location
from ..rules import fail
from . import profile_api, signal_api
from .library import entry, ffi, get as _get
from .marshal import read_tensor, require

_buffers_lock = threading.Lock()
_update_buffers: dict[int, object] = {}   # data address -> backend-owned buffer (getBinarySectionUpdate)



def _section_type(section, func: str) -> int:
    s = int(section)
    if s not in sections.SECTION_NAMES:
        fail(Location(func).path("section"), "QNNEMU-section-type",
             f"{s} is not a QnnContext_SectionType_t (QNN_CONTEXT_SECTION_UPDATABLE=1, "
             f"_UPDATABLE_WEIGHTS=2, _UPDATABLE_QUANT_PARAMS=3)", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    return s


def _signal(signal, func: str):
    """The call's use of its signal (None for NULL): checked before anything is installed, so an
    aborted or timed-out call leaves the context unchanged."""
    return signal_api.use_signal(signal, func, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, Q.QNN_CONTEXT_ERROR_ABORTED,
                                 Q.QNN_CONTEXT_ERROR_TIMED_OUT)


def _check(sig) -> None:
    if sig is not None:
        sig.check()


def _context_and_graph(context, graph, func: str) -> tuple[Context, Graph | None]:
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    if graph == ffi.NULL:
        return ctx, None
    g = _get(graph, Graph, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "graph")
    if g.context is not ctx:
        fail(Location(func).path("graph"), "QNNEMU-section-graph-context",
             f"graph '{g.name}' belongs to another context", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    return ctx, g


def _buffer(buf, func: str, path: str) -> tuple[object, int]:
    """(data pointer, size) of a QnnContext_Buffer_t v1 holding raw memory."""
    require(buf, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, path)
    version = int(buf.version)
    if version != Q.QNN_CONTEXT_BUFFER_VERSION_1:
        fail(Location(func).path(f"{path}.version"), "QNNEMU-section-buffer-version",
             f"{version} is not QNN_CONTEXT_BUFFER_VERSION_1", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    mem = int(buf.v1.memType)
    if mem != Q.QNN_CONTEXTMEMTYPE_RAW:
        fail(Location(func).path(f"{path}.v1.memType"), "QNNEMU-section-buffer-memtype",
             f"{mem}: only QNN_CONTEXTMEMTYPE_RAW buffers are supported",
             code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
    data, size = buf.v1.binaryBuf.data, int(buf.v1.binaryBuf.dataSize)
    if data == ffi.NULL or size == 0:
        fail(Location(func).path(f"{path}.v1.binaryBuf"), "QNNEMU-section-buffer-empty",
             f"data {'NULL' if data == ffi.NULL else 'set'}, dataSize {size}: "
             f"a non-empty buffer is needed", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    return data, size


def _require_finalized(ctx: Context, g: Graph | None, func: str) -> None:
    graphs = [g] if g is not None else sections._graphs_of(ctx, build_deferred=True)
    pending = [x.name for x in graphs if not x.finalized]
    if pending:
        fail(Location(func).path("graph"), "QNNEMU-section-not-finalized",
             f"graph(s) {pending} not finalized (call graphFinalize first)", code=Q.QNN_CONTEXT_ERROR_NOT_FINALIZED)


def _reset_profile(profile, func: str) -> None:
    call = profile_api.start(profile, func, Q.QNN_CONTEXT_ERROR_SET_PROFILE)
    if call is not None:
        call.profile.replace_events([], func)


@entry
def contextGetBinarySectionSize(context, graph, section, binaryBufferSize):
    func = "contextGetBinarySectionSize"
    ctx, g = _context_and_graph(context, graph, func)
    kind = _section_type(section, func)
    require(binaryBufferSize, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "binaryBufferSize")
    _require_finalized(ctx, g, func)
    binaryBufferSize[0] = len(sections.build_section(ctx, g, kind))


@entry
def contextGetBinarySection(context, graph, section, binaryBuffer, writtenBufferSize, profile, signal):
    func = "contextGetBinarySection"
    ctx, g = _context_and_graph(context, graph, func)
    kind = _section_type(section, func)
    data, capacity = _buffer(binaryBuffer, func, "binaryBuffer")
    require(writtenBufferSize, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "writtenBufferSize")
    _reset_profile(profile, func)
    _require_finalized(ctx, g, func)
    with _signal(signal, func) as sig:
        sec = sections.collect(ctx, g, kind)
        blob = sections.encode(sec)
        _check(sig)
    if len(blob) > capacity:
        fail(Location(func).path("binaryBuffer.v1.binaryBuf.dataSize"), "QNNEMU-section-buffer-size",
             f"{capacity} bytes, the section needs "
             f"{len(blob)} (see contextGetBinarySectionSize)", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    ffi.memmove(data, blob, len(blob))
    writtenBufferSize[0] = len(blob)
    ctx.log.info(f"{func}: {sections.section_name(kind)} of "
                 f"{'the whole context' if g is None else repr(g.name)}: {len(sec.entries)} tensor(s), "
                 f"{len(blob)} bytes")


@entry
def contextApplyBinarySection(context, graph, section, binaryBuffer, profile, signal):
    func = "contextApplyBinarySection"
    start_ns = time.perf_counter_ns()
    ctx, g = _context_and_graph(context, graph, func)
    kind = _section_type(section, func)
    data, size = _buffer(binaryBuffer, func, "binaryBuffer")
    call = profile_api.start(profile, func, Q.QNN_CONTEXT_ERROR_SET_PROFILE)
    with _signal(signal, func) as sig, profile_api.recording(call) as rec:
        rpc_ns = time.perf_counter_ns()
        rpc_us = time.time_ns() // 1000
        blob = bytes(ffi.buffer(data, size))   # the app may reuse its buffer after the call
        skip = sections.skip_validation(ctx.configs)
        sec = sections.parse_section(blob, func, check_crc=not skip)
        if sec.section != kind:
            fail(Location(func).path("section"), "QNNEMU-section-type-mismatch",
                 f"{sections.section_name(kind)} given, the buffer holds a "
                 f"{sections.section_name(sec.section)} section", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        _check(sig)
        count = sections.apply_section(ctx, g, sec, func)
        rpc_s = (time.perf_counter_ns() - rpc_ns) / 1e9
    if rec is not None and call is not None:   # (a recorder only exists for a profiled call)
        total_s = (time.perf_counter_ns() - start_ns) / 1e9
        call.profile.replace_events([
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_APPLY_BINARY_SECTION_RPC, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
                         micros(rpc_s), "RPC (apply binary section) time", rpc_us),
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_APPLY_BINARY_SECTION_QNN, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
                         micros(max(total_s, rpc_s)), "QNN (apply binary section) time", call.start_us),
        ], func)
    ctx.log.info(f"{func}: applied a {sections.section_name(kind)} section to "
                 f"{'the whole context' if g is None else repr(g.name)}: {count} tensor(s)"
                 f"{' (CRC32 not checked: SKIP_VALIDATION_ON_BINARY_SECTION)' if skip else ''}")


def _tensor_list(pp, count: int, func: str, path: str, code: int) -> list:
    """Copies of the Qnn_Tensor_t of a ``const Qnn_Tensor_t **`` array of ``count`` pointers;
    ``code``: what a NULL array or entry returns."""
    if count and pp == ffi.NULL:
        fail(Location(func).path(f"{path}"), "QNNEMU-arg-null", f"NULL with {count} tensor(s)", code=code)
    out = []
    for i in range(count):
        require(pp[i], code, func, f"{path}[{i}]")
        out.append(read_tensor(pp[i]))
    return out


@entry
def contextGetBinarySectionUpdate(binaryBuffer, auxiliaryBuffer, tensors, numTensors, keepUpdatable, logger,
                                  profile, signal, binarySectionUpdate):
    func = "contextGetBinarySectionUpdate"
    log = None if logger == ffi.NULL else _get(logger, Logger, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "logger")
    data, size = _buffer(binaryBuffer, func, "binaryBuffer")
    if auxiliaryBuffer != ffi.NULL:
        fail(Location(func).path("auxiliaryBuffer"), "QNNEMU-section-auxiliary",
             "must be NULL (no auxiliary sections are defined)", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    require(tensors, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "tensors")
    require(binarySectionUpdate, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "binarySectionUpdate")
    updates = _tensor_list(tensors, int(numTensors), func, "tensors", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    _reset_profile(profile, func)
    with _signal(signal, func) as sig:
        blob = sections.update_section(bytes(ffi.buffer(data, size)), updates, bool(int(keepUpdatable)), func)
        _check(sig)
    buf = ffi.new("char[]", blob)
    with _buffers_lock:
        _update_buffers[int(ffi.cast("uintptr_t", buf))] = buf
    binarySectionUpdate.version = Q.QNN_CONTEXT_BUFFER_VERSION_1
    binarySectionUpdate.v1.memType = Q.QNN_CONTEXTMEMTYPE_RAW
    binarySectionUpdate.v1.binaryBuf.data = buf
    binarySectionUpdate.v1.binaryBuf.dataSize = len(blob)
    if log is not None:
        log.info(f"{func}: {len(updates)} tensor(s) updated, {len(blob)} bytes"
                 f"{'' if int(keepUpdatable) else ' (no longer updatable)'}")


@entry
def contextFreeBinarySectionUpdate(binarySectionUpdate, logger):
    func = "contextFreeBinarySectionUpdate"
    if logger != ffi.NULL:
        _get(logger, Logger, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "logger")
    b = binarySectionUpdate
    address = int(ffi.cast("uintptr_t", b.v1.binaryBuf.data)) if int(b.version) == 1 else 0
    with _buffers_lock:
        owned = _update_buffers.pop(address, None) if address else None
    if owned is None:
        fail(Location(func).path("binarySectionUpdate.v1.binaryBuf.data"), "QNNEMU-section-free-unknown",
             f"0x{address:x} was not returned by "
             f"contextGetBinarySectionUpdate (or was already freed)", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)


# ----------------------------------------------------------------------------- tensor updates
def _update_tensors(func: str, ctx: Context, tensors: dict, by_name: dict, tensor, numTensors, owner: str) -> int:
    """tensorUpdate*Tensors: each Qnn_Tensor_t names (by id, else by name) one of ``tensors``
    (the graph's or the context's); every update is checked before any is applied."""
    descs = _tensor_list(tensor, int(numTensors), func, "tensor", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM)

    def lookup(tid, name):
        return sections._match(tensors, by_name, tid, None) or sections._match(tensors, by_name, 0, name)
    updates = [sections.resolve_desc(d, lookup, func, f"tensor[{i}]", owner) for i, d in enumerate(descs)]
    sections.apply_updates(ctx, updates, func)
    return len(updates)


@entry
def tensorUpdateGraphTensors(graph, tensor, numTensors):
    func = "tensorUpdateGraphTensors"
    g = _get(graph, Graph, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "graph")
    count = _update_tensors(func, g.context, g.tensors, g.by_name, tensor, numTensors, f"graph '{g.name}'")
    g.log.info(f"{func}: graph '{g.name}': {count} tensor(s) updated")


@entry
def tensorUpdateContextTensors(context, tensor, numTensors):
    func = "tensorUpdateContextTensors"
    ctx = _get(context, Context, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "context")
    count = _update_tensors(func, ctx, ctx.tensors, ctx.tensor_names, tensor, numTensors, "the context's tensors")
    ctx.log.info(f"{func}: {count} context tensor(s) updated")
