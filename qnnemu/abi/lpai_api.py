"""libQnnLpaiEmu.so's table (QnnInterface.h with LPAI/QnnLpaiBackend.h, QnnLpaiContext.h,
QnnLpaiGraph.h; QNN LPAI Memory Allocations, QNN LPAI Memory Management).

The LPAI backend is one more table on the backend's Python core: every slot is registered as
``qnnemu_lpai_<slot>`` (csrc/build_backend.py ``variant_tables``; handed out by
``qnnemu_lpai_providers``, csrc/shim.c).  A backend-neutral slot calls the HTP component's
implementation unchanged; the slots below are LPAI's own:

- backendCreate / contextCreate / contextSetConfig / graphCreate / graphSetConfig take the LPAI
  custom configs (checked by qnnemu/lpai/settings.py) and pass the rest of the list on to the
  HTP component's implementation;
- backendGetApiVersion answers the LPAI backend API version; backendGetProperty the LPAI
  properties (ALIGNMENT_REQ, REQUIRE_PERSISTENT_BINARY, ENPU_CORE_NUM / ENPU_CORE_INFO);
  backendGetSupportedOperations the eNPU's ops;
- graphAddNode refuses ops and data types the eNPU does not run;
- graphGetProperty answers SCRATCH_MEM_SIZE / PERSISTENT_MEM_SIZE from the memory planner
  (qnnemu/lpai/memory.py); graphFinalize requires the buffers; graphExecute runs in them and
  requires aligned user IO buffers.
"""
from __future__ import annotations

import time
from typing import Any

from .. import rules
from ..core import profile as core_profile
from ..core.backend import Backend
from ..core.context import Context
from ..core.graph import Graph
from ..core.handles import HANDLES
from ..headers import Q
from ..location import Location
from ..lpai import device, memory, settings
from ..rules import fail
from . import profile_api
from .library import LIBRARY, configs as _configs, ffi, get as _get, hval as _hval, keepalive as _keepalive
from .marshal import read_op_config, require

LPAI_PREFIX = "qnnemu_lpai_"
_OWN: dict[str, object] = {}


def lpai_entry(fn):
    """Registers ``fn`` as the LPAI table's slot of its name."""
    _OWN[fn.__name__] = fn
    return LIBRARY.entry(fn, prefix=LPAI_PREFIX)


def register_neutral_slots() -> None:
    """Every slot without an LPAI implementation calls the HTP component's (called once every
    component module is imported: qnnemu/abi/entry.py)."""
    for name, fn in LIBRARY.raw.items():
        if name not in _OWN:
            def delegate(*args, _fn=fn):
                return _fn(*args)
            delegate.__name__ = name
            LIBRARY.entry(delegate, prefix=LPAI_PREFIX)


# ------------------------------------------------------------------------------ helpers
def _custom(c, loc: Location, ctype: str, code: int):
    """The LPAI custom struct behind ``loc`` (``customConfig``/``customProperty``); its
    ``config``/``property`` pointer is checked by :func:`_payload`."""
    return ffi.cast(f"{ctype} *", _payload(c, loc, code))


def _payload(ptr, loc: Location, code: int):
    if ptr == ffi.NULL:
        fail(loc, "QNNEMU-lpai-custom-null", "is NULL", code=code)
    return ptr


def _split(config, ctype: str, func: str, custom_option: int):
    """(list of (index, entry) of the CUSTOM options, a NULL-terminated list of the others to
    pass on, its keepalive)."""
    entries = _configs(config, ctype, Location(func).field("config"))
    custom = [(i, c) for i, c in enumerate(entries) if int(c.option) == custom_option]
    rest = [c for c in entries if int(c.option) != custom_option]
    if not rest:
        return custom, ffi.NULL, None
    arr = ffi.new(f"{ctype} *[]", len(rest) + 1)
    for k, c in enumerate(rest):
        arr[k] = c
    return custom, arr, arr


def _graph_memory(g: Graph) -> memory.GraphMemory:
    """The graph's LPAI state (created on first use: a graph from a context binary has none)."""
    mem = getattr(g, "lpai", None)
    if mem is None:
        mem = memory.GraphMemory()
        setattr(g, "lpai", mem)   # noqa: B010 - an attribute the LPAI backend adds to core graphs
    return mem


# ------------------------------------------------------------------------------ backend
@lpai_entry
def backendCreate(logger, config, backend):
    func = "backendCreate"
    require(backend, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, func, "backend")
    custom, rest, _keep = _split(config, "QnnBackend_Config_t", func, Q.QNN_BACKEND_CONFIG_OPTION_CUSTOM)
    hw = device.HwInfo()
    for i, c in custom:
        loc = Location(func).index("config", i).field("customConfig")
        cc = _custom(c.customConfig, loc, "QnnLpaiBackend_CustomConfig_t", Q.QNN_BACKEND_ERROR_INVALID_CONFIG)
        if int(cc.option) != Q.QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO:
            fail(loc.field("option"), "QNNEMU-lpai-backend-config-option",
                 f"{int(cc.option)} is not a QnnLpaiBackend_CustomConfigOption_t (HW_INFO)",
                 code=Q.QNN_BACKEND_ERROR_INVALID_CONFIG)
        info = ffi.cast("QnnLpaiBackend_CustomConfigHwInfo_t *",
                        _payload(cc.config, loc.field("config"), Q.QNN_BACKEND_ERROR_INVALID_CONFIG))
        hw = settings.check_hw_info(int(info.lpaiTarget), int(info.hwVersion), loc.field("config"))
    code = LIBRARY.raw["backendCreate"](logger, rest, backend)
    if code:
        return code
    be = HANDLES.lookup(_hval(backend[0]))
    be.lpai = hw
    be.log.info(f"backendCreate: LPAI eNPU, target {hw.target}, hardware version {hw.hw_version}, "
                f"{device.CORES} cores")


@lpai_entry
def backendGetApiVersion(pVersion):
    code = LIBRARY.raw["backendGetApiVersion"](pVersion)
    if code:
        return code
    pVersion.backendApiVersion.major = Q.QNN_LPAI_API_VERSION_MAJOR
    pVersion.backendApiVersion.minor = Q.QNN_LPAI_API_VERSION_MINOR
    pVersion.backendApiVersion.patch = Q.QNN_LPAI_API_VERSION_PATCH


@lpai_entry
def backendGetProperty(backendHandle, properties):
    func = "backendGetProperty"
    _get(backendHandle, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backendHandle")
    require(properties, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, func, "properties")
    for i, p in enumerate(_configs(properties, "QnnBackend_Property_t", Location(func).field("properties"))):
        loc = Location(func).index("properties", i)
        if int(p.option) != Q.QNN_BACKEND_PROPERTY_OPTION_CUSTOM:
            fail(loc.field("option"), "QNNEMU-lpai-backend-property-option",
                 f"{int(p.option)}: the LPAI backend answers CUSTOM properties only",
                 code=Q.QNN_BACKEND_ERROR_NOT_SUPPORTED)
        cp = _custom(p.customProperty, loc.field("customProperty"), "QnnLpaiBackend_CustomProperty_t",
                     Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT)
        opt = int(cp.option)
        out = _payload(cp.property, loc.field("customProperty").field("property"), Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT)
        if opt == Q.QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ:
            req = ffi.cast("QnnLpaiBackend_BufferAlignmentReq_t *", out)
            req.startAddrAlignment, req.sizeAlignment = device.START_ADDR_ALIGNMENT, device.SIZE_ALIGNMENT
        elif opt == Q.QNN_LPAI_BACKEND_GET_PROP_REQUIRE_PERSISTENT_BINARY:
            # The context binary must stay valid for the context's lifetime (a bool).
            ffi.cast("uint8_t *", out)[0] = 1
        elif opt == Q.QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_NUM:
            ffi.cast("uint32_t *", out)[0] = device.CORES
        elif opt == Q.QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_INFO:
            # An array of ENPU_CORE_NUM entries.
            arr = ffi.cast("QnnLpaiBackend_eNPUCoreInfo_t *", out)
            for k, (index, macs, version) in enumerate(device.core_info()):
                arr[k].coreIndex, arr[k].macCnt, arr[k].version = index, macs, version
        else:
            fail(loc.field("customProperty").field("option"), "QNNEMU-lpai-backend-property-option",
                 f"{opt} is not a QnnLpaiBackend_GetPropertyOption_t", code=Q.QNN_BACKEND_ERROR_NOT_SUPPORTED)


@lpai_entry
def backendGetSupportedOperations(backend, numOperations, operations):
    _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    require(numOperations, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetSupportedOperations", "numOperations")
    require(operations, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetSupportedOperations", "operations")
    table: Any = _keepalive.get("lpai_ops")
    if table is None:
        from .. import ops
        names = sorted(device.OPS & set(ops.REGISTRY))
        strings = [ffi.new("char[]", ops.PACKAGE_NAME.encode()), ffi.new("char[]", b"LPAI")]
        strings += [ffi.new("char[]", n.encode()) for n in names]
        arr = ffi.new("QnnBackend_OperationName_t[]", len(names))
        for i in range(len(names)):
            arr[i].packageName, arr[i].name, arr[i].target = strings[0], strings[2 + i], strings[1]
        table = _keepalive["lpai_ops"] = (arr, len(names), strings)
    numOperations[0] = table[1]
    operations[0] = table[0]


# ------------------------------------------------------------------------------ context
def _direct_mode(backend) -> bool:
    """ADSP direct mode: the backend was created with HW_INFO target ADSP (qnnemu-net-run
    --direct_mode adsp passes it); TCM exists there only."""
    hw = getattr(HANDLES.lookup(_hval(backend)), "lpai", None) if backend != ffi.NULL else None
    return isinstance(hw, device.HwInfo) and hw.target == Q.QNN_LPAI_BACKEND_TARGET_ADSP


def _context_custom(custom, func: str, direct_mode: bool = False) -> dict:
    out: dict = {}
    for i, c in custom:
        loc = Location(func).index("config", i).field("customConfig")
        cc = _custom(c.customConfig, loc, "QnnLpaiContext_CustomConfig_t", Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        opt = int(cc.option)
        payload = _payload(cc.config, loc.field("config"), Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        if opt == Q.QNN_LPAI_CONTEXT_SET_CFG_MODEL_BUFFER_MEM_TYPE:
            out["modelBufferMemType"] = settings.check_context_mem_type(
                int(ffi.cast("QnnLpaiMem_MemType_t *", payload)[0]), loc.field("config"), direct_mode)
        elif opt == Q.QNN_LPAI_CONTEXT_SET_CFG_ENABLE_ISLAND:
            out["enableIsland"] = bool(ffi.cast("uint8_t *", payload)[0])   # recorded (no island model)
        else:
            fail(loc.field("option"), "QNNEMU-lpai-context-config-option",
                 f"{opt} is not a QnnLpaiContext_SetConfigOption_t (MODEL_BUFFER_MEM_TYPE, ENABLE_ISLAND)",
                 code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    return out


@lpai_entry
def contextCreate(backend, device_, config, context):
    func = "contextCreate"
    custom, rest, _keep = _split(config, "QnnContext_Config_t", func, Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM)
    _get(backend, Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    lpai = _context_custom(custom, func, _direct_mode(backend))
    code = LIBRARY.raw["contextCreate"](backend, device_, rest, context)
    if code:
        return code
    HANDLES.lookup(_hval(context[0])).configs.setdefault("lpai", {}).update(lpai)


def _persistent_binary(config, func: str):
    """The non-custom configs of contextCreateFromBinary with QNN_CONTEXT_CONFIG_PERSISTENT_BINARY
    true: REQUIRE_PERSISTENT_BINARY is 1, so the LPAI backend always uses the binary in place
    (static tensors are views of the application's buffer, read at every execute).  An explicit
    false is tolerated with a warning rule and used as true.  Returns (the NULL-terminated list,
    its keepalive)."""
    keep: list = []
    out = []
    found = False
    for i, c in enumerate(_configs(config, "QnnContext_Config_t", Location(func).field("config"))):
        if int(c.option) == Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM:
            continue   # the LPAI custom configs, taken by _context_custom
        if int(c.option) == Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY:
            found = True
            if not c.isPersistentBinary:
                rules.warn("QNNEMU-lpai-binary-persistent", func, f"config[{i}].isPersistentBinary",
                           "0: the LPAI backend requires a persistent binary (REQUIRE_PERSISTENT_BINARY is 1); "
                           "the buffer is used in place and must stay valid until contextFree")
                c = ffi.new("QnnContext_Config_t *", {"option": Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY,
                                                      "isPersistentBinary": 1})
                keep.append(c)
        out.append(c)
    if not found:
        c = ffi.new("QnnContext_Config_t *", {"option": Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY,
                                              "isPersistentBinary": 1})
        keep.append(c)
        out.append(c)
    arr = ffi.new("QnnContext_Config_t *[]", len(out) + 1)
    for k, c in enumerate(out):
        arr[k] = c
    keep.append(arr)
    return arr, keep


@lpai_entry
def contextCreateFromBinary(backend, device_, config, binaryBuffer, binaryBufferSize, context, profile):
    """A context binary prepared for LPAI (offline, on the x86 target): the LPAI custom context
    configs (MODEL_BUFFER_MEM_TYPE: where the application put the binary; TCM in ADSP direct
    mode only) are taken here, the rest goes to the shared loader.  REQUIRE_PERSISTENT_BINARY is
    1: the application keeps the buffer valid until contextFree (qnnemu has read it whole by
    then, so it cannot notice a buffer freed early)."""
    func = "contextCreateFromBinary"
    custom, rest, _keep = _split(config, "QnnContext_Config_t", func, Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM)
    _get(backend, Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    lpai = _context_custom(custom, func, _direct_mode(backend))
    rest, _keep2 = _persistent_binary(config, func)
    code = LIBRARY.raw["contextCreateFromBinary"](backend, device_, rest, binaryBuffer, binaryBufferSize, context,
                                                  profile)
    if code:
        return code
    HANDLES.lookup(_hval(context[0])).configs.setdefault("lpai", {}).update(lpai)


@lpai_entry
def contextSetConfig(context, config):
    func = "contextSetConfig"
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    custom, rest, _keep = _split(config, "QnnContext_Config_t", func, Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM)
    hw = getattr(getattr(ctx, "backend", None), "lpai", None)
    lpai = _context_custom(custom, func, isinstance(hw, device.HwInfo) and hw.target == Q.QNN_LPAI_BACKEND_TARGET_ADSP)
    if rest != ffi.NULL:
        code = LIBRARY.raw["contextSetConfig"](context, rest)
        if code:
            return code
    ctx.configs.setdefault("lpai", {}).update(lpai)


# ------------------------------------------------------------------------------ graph
def _graph_custom(custom, func: str, g: Graph | None, mem: memory.GraphMemory) -> None:
    """SCRATCH_MEM / PERSISTENT_MEM (the buffers), PERF_CFG, CORE_AFFINITY, PREPARE."""
    for i, c in custom:
        loc = Location(func).index("config", i).field("customConfig")
        cc = _custom(c.customConfig, loc, "QnnLpaiGraph_CustomConfig_t", Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        opt = int(cc.option)
        payload = _payload(cc.config, loc.field("config"), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        if opt in (Q.QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM, Q.QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM):
            kind = "scratch" if opt == Q.QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM else "persistent"
            m = ffi.cast("QnnLpaiGraph_Mem_t *", payload)
            addr = int(ffi.cast("uintptr_t", m.addr))
            settings.check_graph_mem(kind, int(m.memType), int(m.size), addr, loc.field("config"))
            buf = memory.Buffer(addr, int(m.size), int(m.memType))
            if mem.bound and kind == "persistent":
                old = mem.persistent
                if old is None or (old.addr, old.size) != (buf.addr, buf.size):
                    fail(loc.field("config"), "QNNEMU-lpai-graph-persistent-fixed",
                         "the persistent buffer cannot change after graphFinalize: it holds the graph's "
                         "state and must stay valid until QnnContext_free", code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)
            if g is not None and mem.bound and mem.plan is not None:
                # A replacement scratch buffer (allowed between executes) must hold the plan.
                need = mem.plan.scratch_bytes if kind == "scratch" else mem.plan.persistent_bytes
                if buf.size < need:
                    fail(loc.field("config").field("size"), "QNNEMU-lpai-graph-mem-too-small",
                         f"{buf.size} bytes; graph '{g.name}' needs {need} bytes of {kind} memory "
                         f"(QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
            setattr(mem, kind, buf)
        elif opt == Q.QNN_LPAI_GRAPH_SET_CFG_PERF_CFG:
            p = ffi.cast("QnnLpaiGraph_PerfCfg_t *", payload)
            mem.configs["perf"] = settings.check_perf_cfg(int(p.fps), int(p.ftrtRatio), int(p.clientType),
                                                          loc.field("config"))
        elif opt == Q.QNN_LPAI_GRAPH_SET_CFG_CORE_AFFINITY:
            a = ffi.cast("QnnLpaiGraph_CoreAffinity_t *", payload)
            mem.configs["coreAffinity"] = settings.check_core_affinity(int(a.affinity), int(a.coreSelection),
                                                                       loc.field("config"))
        elif opt == settings.GRAPH_SET_CFG_PREPARE:
            # On the x86 target graphFinalize prepares the graph; the request is recorded.
            mem.configs["prepare"] = True
        else:
            fail(loc.field("option"), "QNNEMU-lpai-graph-config-option",
                 f"{opt} is not a QnnLpaiGraph_SetConfigOption_t (SCRATCH_MEM, PERSISTENT_MEM, PERF_CFG, "
                 f"CORE_AFFINITY, PREPARE)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)


@lpai_entry
def graphCreate(contextHandle, graphName, config, graphHandle):
    func = "graphCreate"
    _get(contextHandle, Context, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "contextHandle")
    custom, rest, _keep = _split(config, "QnnGraph_Config_t", func, Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM)
    mem = memory.GraphMemory()
    _graph_custom(custom, func, None, mem)
    code = LIBRARY.raw["graphCreate"](contextHandle, graphName, rest, graphHandle)
    if code:
        return code
    setattr(HANDLES.lookup(_hval(graphHandle[0])), "lpai", mem)   # noqa: B010 (see _graph_memory)


@lpai_entry
def graphSetConfig(graphHandle, config):
    func = "graphSetConfig"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    custom, rest, _keep = _split(config, "QnnGraph_Config_t", func, Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM)
    _graph_custom(custom, func, g, _graph_memory(g))
    if rest != ffi.NULL:
        return LIBRARY.raw["graphSetConfig"](graphHandle, rest)


@lpai_entry
def graphRetrieve(contextHandle, graphName, graphHandle):
    """A graph of a context binary: finalized, but its buffers are still to be given (then
    graphFinalize binds them, as for a built graph)."""
    code = LIBRARY.raw["graphRetrieve"](contextHandle, graphName, graphHandle)
    if code:
        return code
    _graph_memory(HANDLES.lookup(_hval(graphHandle[0])))


@lpai_entry
def graphGetProperty(graphHandle, properties):
    func = "graphGetProperty"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    require(properties, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, func, "properties")
    for i, p in enumerate(_configs(properties, "QnnGraph_Property_t", Location(func).field("properties"))):
        loc = Location(func).index("properties", i)
        if int(p.option) != Q.QNN_GRAPH_PROPERTY_OPTION_CUSTOM:
            fail(loc.field("option"), "QNNEMU-lpai-graph-property-option",
                 f"{int(p.option)}: the LPAI backend answers CUSTOM graph properties only",
                 code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
        cp = _custom(p.customProperty, loc.field("customProperty"), "QnnLpaiGraph_CustomProperty_t",
                     Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        opt = int(cp.option)
        if opt not in (Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE, Q.QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE):
            fail(loc.field("customProperty").field("option"), "QNNEMU-lpai-graph-property-option",
                 f"{opt} is not a QnnLpaiGraph_GetPropertyOption_t (SCRATCH_MEM_SIZE, PERSISTENT_MEM_SIZE)",
                 code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
        out = ffi.cast("uint32_t *", _payload(cp.property, loc.field("customProperty").field("property"),
                                              Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT))
        _graph_memory(g)
        plan = memory.prepare(g)
        out[0] = plan.scratch_bytes if opt == Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE else plan.persistent_bytes


@lpai_entry
def graphAddNode(graphHandle, opConfig):
    func = "graphAddNode"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    cfg = read_op_config(opConfig)
    if cfg.version == 1 and cfg.type_name is not None:
        tensors: list[tuple[str, str, int]] = []
        for what, descs in (("inputTensors", cfg.inputs), ("outputTensors", cfg.outputs)):
            for k, d in enumerate(descs):
                if d.type == Q.QNN_TENSOR_TYPE_NULL:
                    continue
                known = g.tensors.get(d.id) if d.id else None
                dtype = known.dtype if known is not None else d.dtype
                name = known.name if known is not None else d.name
                tensors.append((f"opConfig.v1.{what}[{k}].v{d.version}.dataType", str(name), int(dtype)))
        settings.check_node(cfg.type_name, tensors, Location(func).field("opConfig").field("v1"))
    return LIBRARY.raw["graphAddNode"](graphHandle, opConfig)


@lpai_entry
def graphFinalize(graphHandle, profileHandle, signalHandle):
    """The memory rules: scratch (and persistent, when the plan has state) set before
    finalize, each at least as large as planned.  A graph with the PREPARE config and no
    buffers is prepared offline instead (the x86 target of qnnemu-context-binary-generator):
    finalized and serializable, its executes wait for buffers and another graphFinalize."""
    func = "graphFinalize"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    mem = _graph_memory(g)
    if mem.bound or not g.nodes:   # finalized again; or the HTP checks (an empty graph) answer
        return LIBRARY.raw["graphFinalize"](graphHandle, profileHandle, signalHandle)
    call = profile_api.start(profileHandle, func, Q.QNN_GRAPH_ERROR_SET_PROFILE)
    with profile_api.recording(call):
        plan = memory.prepare(g)
    offline = mem.configs.get("prepare") and mem.scratch is None and mem.persistent is None
    if offline:
        g.finalized = mem.offline = True
        g.configs["lpai"] = plan.binary_record()
        g.log.info(f"{func}: LPAI graph '{g.name}' prepared offline (PREPARE, no buffers yet): {plan.summary()}")
        _profile_events(call, "QNN (finalize) time", Q.QNN_PROFILE_EVENTTYPE_FINALIZE, plan)
        return None
    for kind, need, buf in (("scratch", plan.scratch_bytes, mem.scratch),
                            ("persistent", plan.persistent_bytes, mem.persistent)):
        if not need:
            continue
        if buf is None:
            fail(Location(func), "QNNEMU-lpai-graph-mem-missing",
                 f"graph '{g.name}' has no {kind} buffer: pass {need} bytes with graphSetConfig "
                 f"(QNN_LPAI_GRAPH_SET_CFG_{kind.upper()}_MEM) before graphFinalize",
                 code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)
        if buf.size < need:
            fail(Location(func).path(f"{kind} buffer.size"), "QNNEMU-lpai-graph-mem-too-small",
                 f"{buf.size} bytes; graph '{g.name}' needs {need} bytes of {kind} memory "
                 f"(QNN_LPAI_GRAPH_GET_PROP_{kind.upper()}_MEM_SIZE)", code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)
    g.finalized = True
    g.configs["lpai"] = plan.binary_record()
    memory.bind(g)
    g.log.info(f"{func}: LPAI graph '{g.name}' finalized: {plan.summary()}")
    _profile_events(call, "QNN (finalize) time", Q.QNN_PROFILE_EVENTTYPE_FINALIZE, plan)
    return None


# LPAI profiling (BASIC): the call's time, then the graph's memory sizes as BYTES events.  No
# LPAI profile header exists, so these event types are qnnemu's, above QNN_PROFILE_EVENTTYPE_BACKEND
# (docs/lpai.md, "Profiling").
LPAI_PROFILE_EVENTS = (
    ("scratch_bytes", Q.QNN_PROFILE_EVENTTYPE_BACKEND + 1, "Scratch memory size"),
    ("persistent_bytes", Q.QNN_PROFILE_EVENTTYPE_BACKEND + 2, "Persistent memory size"),
    ("io_bytes", Q.QNN_PROFILE_EVENTTYPE_BACKEND + 3, "IO memory size"),
    ("naive_bytes", Q.QNN_PROFILE_EVENTTYPE_BACKEND + 4, "Scratch memory size without sharing"),
)


def _profile_events(call, identifier: str, event_type: int, plan: memory.MemoryPlan) -> None:
    """Installs the LPAI events of one profiled call (``call`` from profile_api.start; None: no
    profiling): its elapsed time, then the memory sizes."""
    if call is None:
        return
    elapsed = max(0, time.perf_counter_ns() - call.start_ns) / 1e9
    events = [core_profile.ProfileEvent(event_type, core_profile.US, core_profile.micros(elapsed), identifier,
                                        call.start_us)]
    events += [core_profile.ProfileEvent(kind, core_profile.BYTES, int(getattr(plan, key)), name, call.start_us)
               for key, kind, name in LPAI_PROFILE_EVENTS]
    call.profile.replace_events(events, call.func)


def _check_io_alignment(tensors, count: int, what: str, func: str) -> None:
    for i in range(count):
        t = tensors[i]
        version = int(t.version)
        if version not in (1, 2):
            continue   # refused by the graphExecute checks
        v = t.v1 if version == 1 else t.v2
        if int(v.memType) != Q.QNN_TENSORMEMTYPE_RAW or v.clientBuf.data == ffi.NULL:
            continue
        addr = int(ffi.cast("uintptr_t", v.clientBuf.data))
        if addr % device.START_ADDR_ALIGNMENT:
            fail(Location(func).path(f"{what}[{i}].v{version}.clientBuf.data"), "QNNEMU-lpai-io-align",
                 f"{addr:#x} is not aligned to startAddrAlignment {device.START_ADDR_ALIGNMENT}: user-provided "
                 f"IO buffers must meet QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)


@lpai_entry
def graphExecute(graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle, signalHandle):
    func = "graphExecute"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    mem = _graph_memory(g)
    if g.finalized and not mem.bound:
        # A graph retrieved from a context binary runs once graphFinalize took its buffers.
        fail(Location(func), "QNNEMU-lpai-graph-mem-missing",
             f"graph '{g.name}' has no scratch buffer yet: set SCRATCH_MEM (and PERSISTENT_MEM) with "
             f"graphSetConfig, then call graphFinalize before graphExecute", code=Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED)
    if inputs != ffi.NULL:
        _check_io_alignment(inputs, int(numInputs), "inputs", func)
    if outputs != ffi.NULL:
        _check_io_alignment(outputs, int(numOutputs), "outputs", func)
    call = profile_api.start(profileHandle, func, Q.QNN_GRAPH_ERROR_SET_PROFILE)
    if call is None or mem.plan is None:
        return LIBRARY.raw["graphExecute"](graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle,
                                           signalHandle)
    # LPAI BASIC profiling: the execute time and the memory sizes (not the HTP events).
    with profile_api.recording(call):
        code = LIBRARY.raw["graphExecute"](graphHandle, inputs, numInputs, outputs, numOutputs, ffi.NULL,
                                           signalHandle)
    if code:
        return code
    _profile_events(call, "QNN (execute) time", Q.QNN_PROFILE_EVENTTYPE_EXECUTE, mem.plan)
    return None


__all__ = ["LPAI_PREFIX", "register_neutral_slots"]
