"""QnnContext.h lifecycle entries: contextCreate, contextSetConfig, contextGetProperty,
contextFree and (QNN 2.50) contextAddToDlc, with the QnnContext_Config_t options and the HTP
context custom configs (HTP/QnnHtpContext.h; their rules: qnnemu/htp/settings.py, groups:
qnnemu/htp/groups.py).  Context binaries are context_api.py.
"""
from __future__ import annotations

from typing import cast

from .. import _version, rules
from ..core.backend import Backend
from ..core.context import Context
from ..core.device import Device, DeviceModel
from ..headers import Q
from ..htp import settings as htp_settings
from ..location import Location
from ..rules import fail
from . import async_execute, profile_api
from .framework import NAME_LIST_LIMIT, null_terminated
from .library import configs as _configs, entry, ffi, get as _get, hval as _hval
from .marshal import c_str, read_htp_custom as _htp_custom, require


def _context_option_from_newer_backend(value: int) -> bool:
    """An HTP context option value above the last one the headers define (not UNKNOWN)."""
    defined = [v for v, n in Q.enum("QNN_HTP_CONTEXT_CONFIG_OPTION_").items() if not n.endswith("UNKNOWN")]
    return max(defined) < value < Q.QNN_HTP_CONTEXT_CONFIG_OPTION_UNKNOWN




def _name_list(ptr, func: str, path: str) -> list[str]:
    """A NULL-terminated ``const char * const *`` list of graph names."""
    if ptr == ffi.NULL:
        fail(Location(func).path(f"{path}"), "QNNEMU-context-config-value",
             "the name list is NULL", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    entries = null_terminated(ptr, NAME_LIST_LIMIT, Location(func).path(path),
                              Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, rule="QNNEMU-context-config-value", what="names")
    # (entries before the terminating NULL are never NULL: c_str gives a str for each)
    return cast(list[str], [c_str(p) for p in entries])


def _context_configs(config, func: str, model=None) -> dict:
    """QnnContext_Config_t options, recorded in the context's configs dict. Load-time options
    (ENABLE_GRAPHS, BINARY_COMPATIBILITY, PERSISTENT_BINARY, DEFER_GRAPH_INIT) are applied by
    the contextCreateFromBinary* entries (context_api.py), MEMORY_LIMIT_HINT and the graph
    retention order by graph switching (qnnemu/htp/switching.py) when a binary is loaded; the
    async queue depth bounds graphExecuteAsync's queue (qnnemu/abi/async_execute.py).  HTP custom
    configs follow the documentation's table and rules (qnnemu/htp/settings.py
    ``check_context_option``, groups: qnnemu/htp/groups.py) against ``model``, the context's device
    (default device without one)."""
    model = model if model is not None else DeviceModel()
    out: dict = {}
    for i, c in enumerate(_configs(config, "QnnContext_Config_t", Location(func).field("config"))):
        opt = int(c.option)
        if opt == Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH:
            if int(c.asyncExeQueueDepth.type) != Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC:
                # the vendor's contextCreate accepts any type (probed: UNDEFINED): no depth then
                rules.warn("QNNEMU-context-async-queue-depth-type-ignored", func,
                           f"config[{i}].asyncExeQueueDepth.type",
                           f"{int(c.asyncExeQueueDepth.type)} is not "
                           f"QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC; the depth is ignored "
                           f"(graphExecuteAsync queues up to {async_execute.DEFAULT_QUEUE_DEPTH})")
                continue
            out["asyncExecutionQueueDepth"] = int(c.asyncExeQueueDepth.depth)
        elif opt == Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS:
            out["enableGraphs"] = _name_list(c.enableGraphs, func, f"config[{i}].enableGraphs")
        elif opt == Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT:
            out["memoryLimitHintMb"] = int(c.memoryLimitHint)
        elif opt == Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY:
            out["persistentBinary"] = bool(c.isPersistentBinary)
        elif opt == Q.QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY:
            value = int(c.binaryCompatibilityType)
            if value not in (Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT):
                fail(Location(func).path(f"config[{i}].binaryCompatibilityType"), "QNNEMU-context-config-value",
                     f"{value} is neither "
                     f"QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE (0) nor _STRICT (1)",
                     code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
            out["binaryCompatibility"] = value
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT:
            out["deferGraphInit"] = bool(c.isGraphInitDeferred)
        elif opt == Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER:
            out["graphRetentionOrder"] = _name_list(c.graphRetentionOrder, func, f"config[{i}].graphRetentionOrder")
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_PRIORITY:
            out["priority"] = htp_settings.check_priority(int(c.priority), func, f"config[{i}].priority",
                                                          Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                                                          "QNNEMU-context-priority-value")
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_ERROR_REPORTING:
            out["errorReporting"] = int(c.errorConfig.reportingLevel)
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_OEM_STRING:
            out["oemString"] = c_str(c.oemString)
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM:
            prefix = "QNN_HTP_CONTEXT_CONFIG_OPTION_"
            if c.customConfig != ffi.NULL and _context_option_from_newer_backend(
                    int(ffi.cast("QnnHtpContext_CustomConfig_t *", c.customConfig).option)):
                # The vendor refuses 0, the RESERVED values and UNKNOWN but ignores the values
                # above the last option it defines (a newer SDK's options).
                rules.warn("QNNEMU-context-config-option-ignored", func, f"config[{i}].customConfig.option",
                           f"{int(ffi.cast('QnnHtpContext_CustomConfig_t *', c.customConfig).option)} is not an "
                           f"HTP context option this backend knows; ignored")
                continue
            name, custom = _htp_custom(c, i, func, "QnnHtpContext_CustomConfig_t", prefix,
                                       Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-context-config-option")
            htp_settings.check_context_option(name[len(prefix):], custom, func=func, path=f"config[{i}].customConfig",
                                              model=model, out=out)
            out.setdefault("htp", {})[name] = custom
        else:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-context-config-option",
                 f"option {opt} is not supported", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    htp_settings.check_context_options(out, func=func, model=model)
    return out


@entry
def contextCreate(backend, device, config, context):
    be = _get(backend, Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    require(context, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextCreate", "context")
    dev = None if device == ffi.NULL else _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    configs = _context_configs(config, "contextCreate", dev.model if dev is not None else None)
    context[0] = ffi.cast("Qnn_ContextHandle_t", be.create_context(dev, be.log, configs))


@entry
def contextSetConfig(context, config):
    """Updates the context's configs; PRIORITY also sets the priority of every graph of the
    context (QNN HTP backend documentation, "Graph Priority"), except in a concurrent sharing
    group."""
    func = "contextSetConfig"
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    new = _context_configs(config, func, ctx.device.model if ctx.device is not None else None)
    if "priority" in new:
        htp_settings.check_priority_change(ctx, func, "config[].priority")
        for g in ctx.graphs.values():
            g.configs["priority"] = new["priority"]
    htp = new.pop("htp", None)
    if htp:
        ctx.configs.setdefault("htp", {}).update(htp)
    ctx.configs.update(new)


@entry
def contextGetProperty(contextHandle, properties):
    """QnnHtpContext_CustomProperty_t from the context's prepared graphs (qnnemu/htp/settings.py):
    buffer start alignment, the spill-fill buffer (the group's when the context is in one), the
    weights buffer and the VTCM backup buffer."""
    ctx = _get(contextHandle, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextHandle")
    require(properties, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetProperty", "properties")
    loc = Location("contextGetProperty")
    for i, p in enumerate(_configs(properties, "QnnContext_Property_t", loc.field("properties"))):
        if int(p.option) != Q.QNN_CONTEXT_PROPERTY_OPTION_CUSTOM or p.customProperty == ffi.NULL:
            fail(Location("contextGetProperty").path(f"properties[{i}].option"), "QNNEMU-contextGetProperty-option",
                 f"{int(p.option)} (only CUSTOM "
                 f"with a QnnHtpContext_CustomProperty_t is defined)", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)
        cp = ffi.cast("QnnHtpContext_CustomProperty_t *", p.customProperty)
        opt = int(cp.option)
        if opt == Q.QNN_HTP_CONTEXT_GET_PROP_BUFFER_START_ALIGNMENT:
            cp.bufferStartAlignment = htp_settings.buffer_start_alignment(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE:
            cp.spillfillBufferSize = htp_settings.spill_fill_buffer_bytes(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE:
            cp.weightsBufferSize = htp_settings.weights_buffer_bytes(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE:   # QNN 2.50
            cp.vtcmBackupBufferSize = htp_settings.vtcm_backup_buffer_bytes(ctx)
        else:
            fail(loc.index("properties", i).path("customProperty.option"), "QNNEMU-contextGetProperty-option",
                 f"unknown option {opt}", code=Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)


@entry
def contextFree(context, profile):
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    async_execute.drain_context(ctx)   # its queued graphExecuteAsync calls run first
    call = profile_api.start(profile, "contextFree", Q.QNN_CONTEXT_ERROR_SET_PROFILE)
    with profile_api.recording(call) as rec:
        ctx.backend.free_context(_hval(context))
    profile_api.commit(rec, "deinit")


@entry
def contextAddToDlc(context, dlcHandle):
    """QNN 2.50.  The vendor's library checks the context and the DLC handle (INVALID_HANDLE for
    either being NULL) before writing the context's binary into the DLC; qnnemu checks the same
    and then answers UNSUPPORTED_FEATURE: it has no DLC writer (the System library's DLC entries
    are not implemented)."""
    _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    require(dlcHandle, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextAddToDlc", "dlcHandle")
    fail(Location("contextAddToDlc"), "QNNEMU-not-supported",
         f"not supported by qnnemu {_version.__version__}: qnnemu has no DLC writer; "
         f"save the context with contextGetBinary instead", code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
