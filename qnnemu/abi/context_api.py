"""QnnContext.h context-binary entries: contextGetBinarySize / contextGetBinary, incremental
binaries, contextFinalize, contextCreateFromBinary (and its WithSignal, WithCallback and
ListAsync variants) and contextValidateBinary; QNN HTP backend documentation, sections "Context
Binary Management", "QnnContext_createFromBinaryListAsync API", "Init Cancellation" and
"QnnContext_createFromBinaryWithCallback API". The format and the loader are
qnnemu/core/binary.py (docs/context-binary.md, which also documents what each entry does here).

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

import struct
import threading
import time

from .. import rules
from ..core import binary  # binary.deserialize is looked up at call time (tests spy on it)
from ..core.backend import Backend
from ..core.binary import load_model
from ..core.context import Context
from ..core.device import Device, DeviceModel
from ..core.graph import Graph
from ..core.handles import HANDLES
from ..core.profile import BYTES, COUNT, US, ProfileEvent
from ..core.signal import Signal, checker
from ..errors import QnnError
from ..headers import Q
from ..htp import runtime as htp_runtime, settings as htp_settings
from ..location import Location
from ..rules import fail
from . import profile_api, signal_api
from .context_lifecycle_api import _context_configs
from .framework import CONFIG_LIST_LIMIT, null_terminated
from .library import entry, ffi, hval as _hval
from .marshal import require

# contextGetIncrementalBinary hands out the header + metadata as one piece, then the data section
# in pieces of at most this many bytes.
INCREMENTAL_PIECE = 1 << 20

_cache_lock = threading.Lock()




def _context(handle) -> Context:
    return HANDLES.get(_hval(handle), Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")


def _client_buffer(ptr, size):
    """The client's binary as a memoryview (None for a NULL pointer: binary.py reports it)."""
    if ptr == ffi.NULL:
        return None
    return memoryview(ffi.buffer(ffi.cast("char *", ptr), int(size)))


# ------------------------------------------------------------------------------ the binary
def _content_key(ctx: Context) -> tuple:
    """Changes whenever what serialize writes can have changed (graphs, their tensors, nodes,
    finalization, configs, context tensors, Context.touch())."""
    graphs = []
    for name, g in ctx.graphs.items():
        if isinstance(g, Graph):
            graphs.append((name, g.handle, g.finalized, len(g.nodes), len(g.tensors), repr(g.configs),
                           getattr(g, "spill_fill_bytes", 0)))
    return (ctx.revision, len(ctx.tensors), repr(ctx.configs), tuple(graphs))


def _binary(ctx: Context, func: str) -> bytes:
    """The context's binary, serialized once and kept until its content changes."""
    with _cache_lock:
        if ctx.deferred is not None:
            ctx.deferred.build_all()  # a deferred-init context: its binary holds every graph
        key = _content_key(ctx)
        if ctx.binary_cache is not None and ctx.binary_cache[0] == key:
            return ctx.binary_cache[1]
        blob = binary.serialize(ctx, func=func)
        ctx.binary_cache = (key, blob)
        return blob


@entry
def contextGetBinarySize(context, binaryBufferSize):
    func = "contextGetBinarySize"
    ctx = _context(context)
    require(binaryBufferSize, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "binaryBufferSize")
    binaryBufferSize[0] = len(_binary(ctx, func))


@entry
def contextGetBinary(context, binaryBuffer, binaryBufferSize, writtenBufferSize):
    func = "contextGetBinary"
    ctx = _context(context)
    require(binaryBuffer, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "binaryBuffer")
    require(writtenBufferSize, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "writtenBufferSize")
    blob = _binary(ctx, func)
    if int(binaryBufferSize) < len(blob):
        writtenBufferSize[0] = 0
        fail(Location(func).path("binaryBufferSize"), "QNNEMU-contextGetBinary-buffer-size",
             f"{int(binaryBufferSize)} bytes is too small for the "
             f"{len(blob)}-byte binary (contextGetBinarySize gives the size)",
             code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    ffi.memmove(binaryBuffer, blob, len(blob))
    writtenBufferSize[0] = len(blob)


@entry
def contextGetIncrementalBinary(context, binaryBuffer, startOffset, writtenBufferSize):
    """The next piece of the binary: header + metadata first, then the data section in pieces of
    at most INCREMENTAL_PIECE bytes; after the last piece one call answers NULL / size 0 /
    startOffset = total size, and the next call starts over. Pieces are owned by the backend
    until contextReleaseIncrementalBinary (or contextFree)."""
    func = "contextGetIncrementalBinary"
    ctx = _context(context)
    for ptr, what in ((binaryBuffer, "binaryBuffer"), (startOffset, "startOffset"),
                      (writtenBufferSize, "writtenBufferSize")):
        require(ptr, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, what)
    blob = _binary(ctx, func)
    with _cache_lock:
        state = ctx.incremental
        if state.get("blob") is not blob:  # first call, or the content changed: start over
            state["blob"] = blob
            state["next"] = 0
            state["split"] = struct.unpack_from("<Q", blob, 72)[0]  # data_offset
        state.setdefault("pieces", {})
        start = state["next"]
        if start >= len(blob):
            binaryBuffer[0] = ffi.NULL
            startOffset[0] = len(blob)
            writtenBufferSize[0] = 0
            state["next"] = 0
            return
        end = state["split"] if start < state["split"] else min(len(blob), start + INCREMENTAL_PIECE)
        piece = ffi.from_buffer("char[]", memoryview(blob)[start:end])
        state["pieces"][int(ffi.cast("uintptr_t", piece))] = (piece, start, end - start)
        state["next"] = end
    binaryBuffer[0] = ffi.cast("const void *", piece)
    startOffset[0] = start
    writtenBufferSize[0] = end - start


@entry
def contextReleaseIncrementalBinary(context, binaryBuffer, startOffset):
    func = "contextReleaseIncrementalBinary"
    ctx = _context(context)
    pieces = ctx.incremental.get("pieces", {})
    address = _hval(binaryBuffer)
    with _cache_lock:
        found = pieces.get(address)
        if found is None:
            fail(Location(func).path("binaryBuffer"), "QNNEMU-contextReleaseIncrementalBinary-buffer",
                 f"0x{address:x} is not a piece handed out by "
                 f"contextGetIncrementalBinary for this context (or was already released)",
                 code=Q.QNN_CONTEXT_ERROR_INCREMENT_INVALID_BUFFER)
        if found[1] != int(startOffset):
            fail(Location(func).path("startOffset"), "QNNEMU-contextReleaseIncrementalBinary-offset",
                 f"{int(startOffset)}, but that piece starts at {found[1]}",
                 code=Q.QNN_CONTEXT_ERROR_INCREMENT_INVALID_BUFFER)
        del pieces[address]


@entry
def contextFinalize(context, profile):
    """Builds every graph a deferred-init context has not built yet, checks that every graph is
    finalized and serializes the binary once (contextGetBinary then answers from it)."""
    func = "contextFinalize"
    ctx = _context(context)
    call = profile_api.start(profile, func, Q.QNN_CONTEXT_ERROR_SET_PROFILE)
    with profile_api.recording(call) as rec:
        if ctx.deferred is not None:
            ctx.deferred.build_all()
        open_graphs = [name for name, g in ctx.graphs.items() if isinstance(g, Graph) and not g.finalized]
        if open_graphs:
            fail(Location(func).path("context"), "QNNEMU-contextFinalize-not-finalized",
                 f"graph(s) {open_graphs} are not finalized (call graphFinalize first)",
                 code=Q.QNN_CONTEXT_ERROR_NOT_FINALIZED)
        try:
            _binary(ctx, func)
        except QnnError as err:  # the context is executable; only its binary cannot be made
            ctx.log.warn(f"{func}: the context binary cannot be prepared: {err}")
        ctx.finalized = True
    profile_api.commit(rec, "finalize")


# ------------------------------------------------------------------------------ loading
def _device(device):
    if device == ffi.NULL:
        return None
    return HANDLES.get(_hval(device), Device, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "device")


def _commit_init(rec, ctx=None, read: binary.ReadStats | None = None, configs: dict | None = None,
                 model=None) -> None:
    """The call succeeded: an INIT event (QNN (init) time, us) replaces the profile's events.
    With FILE_READ_MEMORY_BUDGET or INIT_ACCELERATION configured, the load's modelled events follow
    it (``_load_events``)."""
    if rec is None:
        return
    if ctx is None or read is None or not _load_options_set(configs or {}):
        profile_api.commit(rec, "init")
        return
    events = rec.init_events(time.perf_counter_ns()) + _load_events(rec.start_us, ctx, read, configs or {}, model)
    rec.profile.replace_events(events, rec.func)


# ------------------------------------------------------------------------------ read budget, init acceleration
FILE_READ_OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET"
INIT_ACCELERATION_OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_INIT_ACCELERATION"
MIB = 1 << 20
LOAD_ACCEL_EVENT = "Accelerator (load binary) time"   # the vendor's identifier of event 1004


def _load_options_set(configs: dict) -> bool:
    htp = configs.get("htp") or {}
    return FILE_READ_OPTION in htp or INIT_ACCELERATION_OPTION in htp


def _file_mapped(address: int, size: int) -> bool:
    """The buffer lies in a mapping of a file (mmap of the binary), per /proc/self/maps; True
    when that cannot be read (the documented use is assumed)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if lo <= address < hi:
                    name = fields[5].strip() if len(fields) > 5 else ""
                    return bool(name) and not name.startswith("[") and address + size <= hi
    except (OSError, ValueError, IndexError):
        return True
    return False


def _read_stats(func: str, configs: dict, view, pointer) -> binary.ReadStats:
    """How the loader reads the binary: QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET (QNN
    HTP backend documentation, "QNN HTP Context Config Options") gives reads of at most the budget
    over an mmapped buffer; without it the binary is read at once.  The vendor's library (2.51,
    probed: tests/test_binary_read_budget.py) accepts every value on any buffer and warns at 0; the
    documentation's rules are warnings here: 0 turns the feature off, a budget above the file reads
    the file at once (min of the two), a buffer that is not mmapped is read at once."""
    option = (configs.get("htp") or {}).get(FILE_READ_OPTION)
    if option is None or view is None:
        return binary.ReadStats()
    mb = int(option.get("fileReadMemoryBudgetInMb", 0) if isinstance(option, dict) else option or 0)
    path = "config.customConfig.fileReadMemoryBudgetInMb"
    size = len(view)
    if mb <= 0:
        rules.warn("QNNEMU-context-file-read-budget-zero", func, path,
                   "0 MB: the read memory budget should be greater than 0; the feature is turned off "
                   "(the binary is read at once)")
        return binary.ReadStats()
    budget = mb * MIB
    if budget > size:
        rules.warn("QNNEMU-context-file-read-budget-clipped", func, path,
                   f"{mb} MB is more than the {size}-byte binary; min(file size, budget) = {size} bytes is used")
        budget = size
    if not _file_mapped(int(ffi.cast("uintptr_t", pointer)), size):
        rules.warn("QNNEMU-context-file-read-budget-not-mmapped", func, "binaryBuffer",
                   f"{mb} MB read memory budget with a buffer that is not an mmapped file (the documentation "
                   f"leaves that undefined); the binary is read at once")
        return binary.ReadStats()
    return binary.ReadStats(chunk_bytes=budget)


def _init_threads(configs: dict, model) -> int:
    """INIT_ACCELERATION: the graphs initialize on every HVX thread of the device; else on one."""
    option = (configs.get("htp") or {}).get(INIT_ACCELERATION_OPTION)
    on = bool(option.get("initAcceleration") if isinstance(option, dict) else option)
    return int(getattr(model, "hvx_threads", 4) or 1) if on else 1


def _load_events(start_us: int, ctx, read: binary.ReadStats, configs: dict, model) -> list:
    """The load's modelled events (qnnemu/core/binary/load_model.py): event 1004 (QNN HTP
    CONTEXT_LOAD_BIN_ACCEL_TIME, "Accelerator (load binary) time", as the vendor reports it) with
    the modelled read + initialization time, then BACKEND events with the reads and the
    initialization's threads."""
    steps = [len(g.htp_plan.steps) for g in ctx.graphs.values() if getattr(g, "htp_plan", None) is not None]
    t = load_model.load_time(read, steps, _init_threads(configs, model))
    backend = Q.QNN_PROFILE_EVENTTYPE_BACKEND
    return [ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_CONTEXT_LOAD_BIN_ACCEL_TIME_MICROSEC, US, round(t.total_us),
                         LOAD_ACCEL_EVENT, start_us),
            ProfileEvent(backend, COUNT, read.chunks, "Binary read: reads", start_us),
            ProfileEvent(backend, BYTES, read.bytes_read, "Binary read: bytes", start_us),
            ProfileEvent(backend, BYTES, read.largest, "Binary read: largest read (bytes)", start_us),
            ProfileEvent(backend, US, round(t.read_us), "Binary read: modelled time", start_us),
            ProfileEvent(backend, COUNT, t.init_threads, "Graph init: HVX threads", start_us),
            ProfileEvent(backend, US, round(t.init_us), "Graph init: modelled time", start_us)]


def _load(func: str, be: Backend, dev, configs: dict, view, sig=None, *, data_source=None,
          on_graph=None, register=None, read=None):
    """binary.deserialize with the load-time configs applied; returns (context handle, Context).
    The handle is registered with the backend before the first graph is built (``register``
    receives it then); if loading fails the context and the handle are released."""
    handles: list[int] = []

    def on_context(ctx):
        handles.append(be.adopt_context(ctx))
        if register is not None:
            register(handles[0])

    try:
        ctx = binary.deserialize(
            view, be, dev, compatibility=configs.get("binaryCompatibility", binary.PERMISSIVE), logger=be.log,
            check_abort=checker(sig), configs=configs, on_graph=on_graph, enable_graphs=configs.get("enableGraphs"),
            func=func, data_source=data_source, persistent=bool(configs.get("persistentBinary")),
            defer_graphs=bool(configs.get("deferGraphInit")), on_context=on_context, read=read)
    except BaseException:
        if handles:
            be.free_context(handles[0])
        raise
    if not handles:  # a replaced deserialize (tests) may not call on_context
        handles.append(be.adopt_context(ctx))
    _enter_session(func, be, handles[0], ctx, len(view), configs)
    return handles[0], ctx


def _enter_session(func: str, be: Backend, handle: int, ctx: Context, nbytes: int, configs: dict) -> None:
    """The loaded context goes into the first cDSP session with room for its binary (QNN HTP
    backend documentation, "Model Loading Across Multiple Sessions": the deserialization takes
    as much as the binary in the documentation's ideal case, which the emulator models), plus
    its graphs' I/O when IO_MEM_ESTIMATION is set or the list API loads it; else the load fails
    with QNN_COMMON_ERROR_MEM_ALLOC and the context is freed."""
    reserve = 0
    if htp_settings._context_flag(configs, "IO_MEM_ESTIMATION", "ioMemEstimation") or \
            func == "contextCreateFromBinaryListAsync":
        reserve = sum(t.nbytes for g in ctx.graphs.values() for t in (*g.app_inputs(), *g.app_outputs()))
    try:
        index = ctx.enter_session(nbytes, reserve, func)
    except htp_runtime.SessionError as exc:
        be.free_context(handle)
        fail(Location(func).field("binaryBufferSize"), "QNNEMU-context-session-full", str(exc),
             code=Q.QNN_COMMON_ERROR_MEM_ALLOC)
    except QnnError:   # a graph switching config the loaded binary contradicts
        be.free_context(handle)
        raise
    be.log.info(f"{func}: context deserialized into cDSP session #{index} ({nbytes} bytes, {reserve} "
                f"reserved for I/O; {htp_runtime.process_sessions().describe()})")


def _model(dev):
    """The device model the HTP context configs are checked against (the default device's
    when no device handle is given)."""
    return dev.model if dev is not None else None


def _check_signal(signal) -> None:
    """A non-NULL signal argument is a live signal (checked with the other handles, before
    the arguments; ``signal_api.use_signal`` takes it later)."""
    if signal is not None and signal != ffi.NULL:
        HANDLES.get(_hval(signal), Signal, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "signal")


def _warn_group_dlbc(func: str, configs: dict, ctx) -> None:
    """DLBC is "not supported with spillfill buffer sharing" (QNN HTP backend documentation, "QNN
    HTP Deep Learning Bandwidth Compression (DLBC)", Limitations): a context joining a spill-fill
    group with DLBC graphs loads (the vendor's x86 library cannot register groups to compare with)
    and is warned; DLBC has no modelled effect either way."""
    if not configs.get("htp_group"):
        return
    names = [name for name, g in ctx.graphs.items() if any(htp_settings.dlbc_flags(g))]
    if names:
        rules.warn("QNNEMU-context-group-dlbc", func, "config",
                   f"graph(s) {', '.join(names)} prepared with DLBC join a spill-fill sharing group "
                   f"(REGISTER_MULTI_CONTEXTS / REGISTER_CONCURRENT_RESOURCE_SHARING); DLBC is not supported "
                   f"with spill-fill buffer sharing: loaded, DLBC recorded only")


def _create_from_binary(func, backend, device, config, binaryBuffer, binaryBufferSize, context, profile,
                        signal=None, callback=None):
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    dev = _device(device)
    call = profile_api.start(profile, func, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE)
    _check_signal(signal)
    require(context, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "context")
    configs = _context_configs(config, func, _model(dev))
    provider = _DmaProvider(func, callback, configs) if callback is not None else None
    view = _client_buffer(binaryBuffer, binaryBufferSize)
    read = _read_stats(func, configs, view, binaryBuffer)
    sig_handle = ffi.NULL if signal is None else signal
    try:
        with (signal_api.use_signal(sig_handle, func, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE,
                                    Q.QNN_CONTEXT_ERROR_ABORTED, Q.QNN_CONTEXT_ERROR_TIMED_OUT) as sig,
              profile_api.recording(call) as rec):
            handle, ctx = _load(func, be, dev, configs, view, sig,
                                data_source=provider.request if provider else None, read=read)
    except BaseException:
        if provider is not None:
            provider.release_all(func)  # buffers already provided are released on failure too
        raise
    if provider is not None:
        ctx.on_free.append(lambda: provider.release_all("contextFree"))
    _warn_group_dlbc(func, configs, ctx)
    _commit_init(rec, ctx, read, configs, _model(dev) or DeviceModel())
    context[0] = ffi.cast("Qnn_ContextHandle_t", handle)


@entry
def contextCreateFromBinary(backend, device, config, binaryBuffer, binaryBufferSize, context, profile):
    _create_from_binary("contextCreateFromBinary", backend, device, config, binaryBuffer, binaryBufferSize,
                        context, profile)


@entry
def contextCreateFromBinaryWithSignal(backend, device, config, binaryBuffer, binaryBufferSize, context, profile,
                                      signal):
    _create_from_binary("contextCreateFromBinaryWithSignal", backend, device, config, binaryBuffer,
                        binaryBufferSize, context, profile, signal)


@entry
def contextValidateBinary(backend, device, config, binaryBuffer, binaryBufferSize):
    func = "contextValidateBinary"
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    dev = _device(device)
    configs = _context_configs(config, func, _model(dev))
    # Every check contextCreateFromBinary makes, the rebuild's included (nothing is kept).
    binary.validate(_client_buffer(binaryBuffer, binaryBufferSize), dev,
                    configs.get("binaryCompatibility", binary.PERMISSIVE), logger=be.log, func=func,
                    backend=be, configs=configs, enable_graphs=configs.get("enableGraphs"))


# ------------------------------------------------------------------------------ WithCallback
DMA_DATA_ALIGNMENT = 4096   # a direct I/O (O_DIRECT) read lands on 4 KiB pages


class _DmaProvider:
    """The DMA-buffer data provider/release callbacks of contextCreateFromBinaryWithCallback:
    ``request`` is binary.deserialize's ``data_source`` (one request for the data section);
    every buffer provided is released once, at contextFree or when loading fails."""

    def __init__(self, func: str, callback, configs: dict):
        require(callback, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "callback")
        kind = int(callback.type)
        if kind == Q.QNN_CONTEXT_CALLBACK_RAW_BUFFER:
            fail(Location(func).path("callback.type"), "QNNEMU-contextCreateFromBinaryWithCallback-raw",
                 "QNN_CONTEXT_CALLBACK_RAW_BUFFER is reserved; only the DMA "
                 "buffer callback (QNN_CONTEXT_CALLBACK_DMA_BUFFER) is supported, as on the HTP",
                 code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        if kind != Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER:
            fail(Location(func).path("callback.type"), "QNNEMU-contextCreateFromBinaryWithCallback-callback",
                 f"unknown type {kind}", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        dma = callback.dmaBufferCallback
        if int(dma.version) != Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1:
            fail(Location(func).path("callback.dmaBufferCallback.version"),
                 "QNNEMU-contextCreateFromBinaryWithCallback-callback",
                 f"{int(dma.version)} is not "
                 f"QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        for what in ("dataProvide", "dataRelease"):
            if getattr(dma.v1, what) == ffi.NULL:
                fail(Location(func), "QNNEMU-contextCreateFromBinaryWithCallback-callback",
                     f"callback.dmaBufferCallback.v1.{what} is NULL", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        if configs.get("deferGraphInit"):
            fail(Location(func).path("config"), "QNNEMU-contextCreateFromBinaryWithCallback-defer",
                 "QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT cannot be combined with "
                 "the data provider callbacks (QNN HTP backend documentation, "
                 "'QnnContext_createFromBinaryWithCallback API')", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        if int(configs.get("memoryLimitHintMb") or 0) > 0:
            fail(Location(func).path("config"), "QNNEMU-contextCreateFromBinaryWithCallback-graph-switching",
                 f"QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT {configs['memoryLimitHintMb']} turns graph switching on, "
                 "which cannot be combined with the data provider callbacks (QNN HTP backend documentation, "
                 "'QnnContext_createFromBinaryWithCallback API': \"not supported together with the graph "
                 "switch feature\")", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        # Copies: the client's callback struct need not outlive the call.
        self.func = func
        self.provide = dma.v1.dataProvide
        self.release = dma.v1.dataRelease
        self.param = dma.v1.notifyParam
        self.buffers: list[tuple[int, object, int]] = []  # (fd, data pointer, alignedSize)

    def request(self, offset: int, size: int):
        path = "callback.dmaBufferCallback.v1.dataProvide"
        req = ffi.new("Qnn_ContextBinaryDataRequest_t *")
        req.offset, req.size, req.isBackendMappingNeeded = offset, size, 1
        resp = ffi.new("Qnn_ContextBinaryDmaDataResponse_t *")
        resp.dmaBuffer.fd = -1
        code = int(self.provide(req[0], resp, self.param))
        if code != Q.QNN_SUCCESS:
            fail(Location(self.func).path(f"{path}"), "QNNEMU-contextCreateFromBinaryWithCallback-provider",
                 f"returned error {code} for the data section "
                 f"(offset {offset}, size {size})",
                 code=Q.QNN_CONTEXT_ERROR_MEM_ALLOC if code == Q.QNN_COMMON_ERROR_MEM_ALLOC
                           else Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        data = resp.dmaBuffer.data
        if data == ffi.NULL:
            fail(Location(self.func).path(f"{path}"), "QNNEMU-contextCreateFromBinaryWithCallback-response",
                 "dmaDataResponse.dmaBuffer.data is NULL", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        start, aligned = int(resp.dataStartOffset), int(resp.alignedSize)
        fd = int(resp.dmaBuffer.fd)
        earlier = [b[0] for b in self.buffers]
        self.buffers.append((fd, data, aligned))   # released on failure like every provided buffer
        if fd in earlier:
            # One request per data section (shared and non-shared weights apart), each a buffer
            # of its own: "the FDs returned by the dataProvider callback must always be distinct".
            fail(Location(self.func).path(f"{path}"), "QNNEMU-contextCreateFromBinaryWithCallback-fd",
                 f"dmaDataResponse.dmaBuffer.fd {fd} for the data section at offset {offset} was already returned "
                 f"by request {earlier.index(fd) + 1} of this call; each request needs a distinct DMA buffer fd "
                 f"(QNN HTP backend documentation, 'QnnContext_createFromBinaryWithCallback API')",
                 code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        first = int(ffi.cast("uintptr_t", data)) + start
        if first % DMA_DATA_ALIGNMENT:
            # Direct I/O into the DMA buffer needs the section to start on a 4 KiB boundary
            # ("Proper data alignment support ... when using the direct I/O scheme"); qnnemu reads
            # it from anywhere, so it only says so.
            rules.warn("QNNEMU-context-dma-data-unaligned", self.func, f"{path}: dmaDataResponse",
                       f"the data section starts at 0x{first:x} (dmaBuffer.data + dataStartOffset {start}), not on a "
                       f"{DMA_DATA_ALIGNMENT}-byte boundary as direct I/O loading needs; read as it is")
        if start + size > aligned:
            fail(Location(self.func).path(f"{path}"), "QNNEMU-contextCreateFromBinaryWithCallback-response",
                 f"dmaDataResponse.alignedSize: {aligned} bytes cannot hold the "
                 f"{size} requested bytes from dataStartOffset {start}", code=Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        # In place (zero copy): the buffer stays the client's until its release callback.
        return ffi.buffer(ffi.cast("char *", data) + start, size)

    def release_all(self, func: str) -> None:
        """Hands every provided buffer back through dataRelease (``func``: the API call doing it)."""
        buffers, self.buffers = self.buffers, []
        for fd, data, aligned in buffers:
            mem = ffi.new("Qnn_ContextBinaryDmaDataMem_t *")
            mem.dmaBuffer.fd = fd
            mem.dmaBuffer.data = data
            mem.memSize = aligned
            code = int(self.release(mem[0], self.param))
            if code != Q.QNN_SUCCESS:   # the buffer is the client's again either way
                rules.warn("QNNEMU-context-dma-release-failed", func, "callback.dmaBufferCallback.v1.dataRelease",
                           f"returned {code} for the buffer at 0x{int(ffi.cast('uintptr_t', data)):x} (fd {fd}) the "
                           f"context of {self.func} used; the buffer is not touched again")


@entry
def contextCreateFromBinaryWithCallback(backend, device, config, callback, binaryBuffer, binaryBufferSize, context,
                                        profile, signal):
    _create_from_binary("contextCreateFromBinaryWithCallback", backend, device, config, binaryBuffer,
                        binaryBufferSize, context, profile, signal, callback)


# ------------------------------------------------------------------------------ ListAsync
class _ListEntry:
    __slots__ = ("index", "path", "configs", "view", "call", "notify", "param")

    def __init__(self, index, path, configs, view, call, notify, param):
        self.index, self.path, self.configs, self.view = index, path, configs, view
        self.call, self.notify, self.param = call, notify, param


def _list_entries(func: str, contextParams, list_configs: dict, model=None) -> list[_ListEntry]:
    """Every QnnContext_Params_t checked before anything is loaded (argument errors fail the
    whole call without any notification)."""
    require(contextParams, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, func, "contextParams")
    out = []
    listed = null_terminated(contextParams, CONFIG_LIST_LIMIT, Location(func).field("contextParams"),
                             Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT,
                             rule="QNNEMU-contextCreateFromBinaryListAsync-params")
    for k, p in enumerate(listed):
        version = int(p.version)
        path = f"contextParams[{k}]"
        if version == Q.QNN_CONTEXT_PARAMS_VERSION_1:
            v, path = p.v1, f"{path}.v1"
        elif version == Q.QNN_CONTEXT_PARAMS_VERSION_2:
            if p.v2 == ffi.NULL:
                fail(Location(func), "QNNEMU-contextCreateFromBinaryListAsync-params",
                     f"{path}.v2 is NULL", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
            v, path = p.v2, f"{path}.v2"
            if v.callback != ffi.NULL:
                fail(Location(func).path(f"{path}.callback"), "QNNEMU-contextCreateFromBinaryListAsync-callback",
                     "data provider callbacks are not supported with "
                     "contextCreateFromBinaryListAsync (QNN HTP backend documentation, "
                     "'QnnContext_createFromBinaryWithCallback API'); pass NULL",
                     code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        else:
            fail(Location(func).path(f"{path}.version"), "QNNEMU-contextCreateFromBinaryListAsync-params",
                 f"{version} is not QNN_CONTEXT_PARAMS_VERSION_1 or _2", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        if v.notifyFunc == ffi.NULL:
            fail(Location(func), "QNNEMU-contextCreateFromBinaryListAsync-params",
                 f"{path}.notifyFunc is NULL", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        if v.binaryBuffer == ffi.NULL or int(v.binaryBufferSize) == 0:
            fail(Location(func).path(f"{path}.binaryBuffer"), "QNNEMU-contextCreateFromBinaryListAsync-params",
                 "NULL or binaryBufferSize 0", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        configs = _context_configs(v.config, f"{func}: {path}", model)
        # listConfig overrides the options also given per context (QnnContext.h).
        merged = {**configs, **list_configs}
        if "htp" in configs and "htp" in list_configs:
            merged["htp"] = {**configs["htp"], **list_configs["htp"]}
        call = profile_api.start(v.profile, func, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE)
        out.append(_ListEntry(k, path, merged, _client_buffer(v.binaryBuffer, v.binaryBufferSize), call,
                              v.notifyFunc, v.notifyParam))
    if not out:
        fail(Location(func).path("contextParams"), "QNNEMU-contextCreateFromBinaryListAsync-params",
             "the list is empty", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
    return out


@entry
def contextCreateFromBinaryListAsync(backend, device, contextParams, listConfig, signal):
    """Loads the binaries one after the other, synchronously: every notification arrives before
    the call returns. Per binary: one QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT notification per graph
    (context and graph handle, graph name, QNN_SUCCESS) as soon as the graph is built, then one
    QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT notification with the context handle and QNN_SUCCESS --
    or, if that binary fails, NULL handles and the error (graph handles it announced are then
    invalid) while the other binaries still load. An abort or timeout stops the call: the
    binary being loaded and every later one are notified with QNN_CONTEXT_ERROR_ABORTED /
    _TIMED_OUT. The call returns QNN_SUCCESS when every binary loaded, otherwise the first
    failure's code (contexts that loaded stay valid: the client owns their handles)."""
    func = "contextCreateFromBinaryListAsync"
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    dev = _device(device)
    _check_signal(signal)
    list_configs = _context_configs(listConfig, f"{func}: listConfig", _model(dev))
    entries = _list_entries(func, contextParams, list_configs, _model(dev))
    loaded = 0
    failed: list[QnnError] = []

    def notify(e: _ListEntry, ctx_handle, graph_handle, name, kind, status):
        name_buf = ffi.new("char[]", name.encode()) if name is not None else ffi.NULL
        e.notify(ffi.cast("Qnn_ContextHandle_t", ctx_handle or 0), ffi.cast("Qnn_GraphHandle_t", graph_handle or 0),
                 name_buf, kind, e.param, status)

    with signal_api.use_signal(signal, func, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, Q.QNN_CONTEXT_ERROR_ABORTED,
                               Q.QNN_CONTEXT_ERROR_TIMED_OUT) as sig:
        stop: QnnError | None = None  # an abort or timeout: the binaries not loaded yet are skipped
        for e in entries:
            if stop is None and sig is not None:
                try:
                    sig.check()
                except QnnError as err:
                    stop = err
                    failed.append(err)
            if stop is not None:
                notify(e, 0, 0, None, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT, stop.code)
                continue
            box: list[int] = []
            try:
                with profile_api.recording(e.call) as rec:
                    handle, _ = _load(
                        func, be, dev, e.configs, e.view, sig, register=box.append,
                        on_graph=lambda name, gh, e=e, box=box: notify(
                            e, box[0], gh, name, Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT, Q.QNN_SUCCESS))
            except QnnError as err:
                detail = err.detail[len(func) + 2:] if err.detail.startswith(func + ": ") else err.detail
                failure = rules.error(Location(func).field(e.path), err.rule, detail, code=err.code)
                be.log.error(str(failure))
                failed.append(failure)
                notify(e, 0, 0, None, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT, err.code)
                if err.code in (Q.QNN_CONTEXT_ERROR_ABORTED, Q.QNN_CONTEXT_ERROR_TIMED_OUT):
                    stop = failure
                continue
            _commit_init(rec)
            notify(e, handle, 0, None, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT, Q.QNN_SUCCESS)
            loaded += 1
    if failed:
        first = failed[0]
        detail = first.detail[len(func) + 2:] if first.detail.startswith(func + ": ") else first.detail
        fail(Location(func), first.rule, f"{len(entries) - loaded} of {len(entries)} binaries did not load; "
                                         f"first failure: {detail}", code=first.code)
