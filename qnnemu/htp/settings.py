"""The HTP graph and context configs: the option tables as data, their rules, and the
resolved settings a graph is prepared and run with (QNN HTP backend documentation, "QNN HTP
Backend API": QnnHtpGraph_CustomConfig_t, QnnHtpContext_CustomConfig_t; "QNN HTP Precision",
"DLBC", "Setting Number of HVX Threads", "Enabling the system level cache allocator",
"Byte-Granularity VTCM", "Graph Priority"; QnnHtpContext_CustomProperty_t).

The rules follow the vendor's libQnnHtp.so (docs/validation.md, "accept what the vendor
accepts"): a value it tolerates is tolerated the same way with a warning rule (qnnemu/rules.py:
HVX threads clipped to the SoC's maximum, DLBC / SLC on a SoC without them recorded without
effect, out-of-range optimization values coerced, unknown custom options ignored, ...); a value
it refuses is refused with an error rule.  Each option's row says which (``vendor``); the
QNN 2.50 options (PRECISION_COMPENSATION, ENABLE_PREDICATION, FP16_CLAMP_OVERFLOW, the
VTCM_RETENTION / CACHED_WEIGHTS optimization types, context options 16..25) have rows too.

The ABI (qnnemu/abi/graph_api.py ``_graph_configs``, qnnemu/abi/context_lifecycle_api.py
``_context_configs``) decodes the C unions and calls ``check_graph_option`` /
``check_context_option`` here; ``graph_settings(graph)`` is what the prepare pipeline, the cost
model and profiling read.

How a graph's configs are kept (``Graph.configs``; everything but "htp" is plain JSON, so a
context binary keeps it):

- ``"htp"``: option name -> the union as copied (the foundation's record, kept as is);
- ``"htp_optimization"``: QnnHtpGraph_OptimizationType_t name (without prefix) -> floatValue,
  one entry per type (several OPTIMIZATION configs accumulate);
- ``"htp_vtcm"``: the last VTCM request ``{"option", "bytes"}`` (bytes 0 = the SoC's maximum;
  MB and byte requests are equal: the last one wins, "Byte-Granularity VTCM");
- ``"htp_finalize_config"``: FINALIZE_CONFIG key -> value;
- ``"htp_slc_runtime_off"``: the SLC allocator forced off after finalize;
- ``"priority"``: QNN_GRAPH_CONFIG_OPTION_PRIORITY (LAYOUT maps it, qnnemu/htp/priority.py).

Defaults (the documentation's tables): VTCM 4 MiB (capped at the SoC's), HVX threads = the SoC's
maximum (online prepare: "max supported value for that SoC is used"), precision FLOAT32 (float
graphs run in float16 math on the HTP anyway), optimization level 2, DLBC / DLBC weights / SLC
allocator / weights packing off, relu folded into conv, short-depth conv on HMX, one core,
priority QNN_PRIORITY_DEFAULT.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import rules
from ..headers import Q
from ..location import Location
from ..rules import fail
from . import groups, lora, packing as weights_packing, priority, switching
from .device_model import DeviceModel

MIB = 1 << 20
KIB = 1 << 10
VTCM_GRANULE = 64 * KIB             # byte-granularity requests: multiples of 64 KiB (seed)
DEFAULT_VTCM_BYTES = 4 * MIB        # the documented default VTCM_SIZE_IN_MB: 4
DEFAULT_OPTIMIZATION_LEVEL = 2
DLBC_GRAPH_LIMIT_ONE = 32           # graphs with input OR weight compression (DLBC "Limitations")
DLBC_GRAPH_LIMIT_BOTH = 16          # graphs with input AND weight compression
BUFFER_START_ALIGNMENT = 64         # bytes: the least alignment of a buffer the backend hands out

# When graphSetConfig may change an option.
BEFORE_FINALIZE = "before finalize"
ANY_TIME = "before or after finalize"
UNTIL_FIRST_EXECUTE = "until the first execute"

# Qnn_Priority_t levels (QNN 2.50 adds LOWEST = LOW, NORMAL_LOW, HIGH_PLUS, CRITICAL and
# CRITICAL_PLUS = HIGHEST); the vendor takes any value in 0..MAX_PRIORITY.
PRIORITIES = {Q.QNN_PRIORITY_LOW: "QNN_PRIORITY_LOW (LOWEST)", Q.QNN_PRIORITY_NORMAL_LOW: "QNN_PRIORITY_NORMAL_LOW",
              Q.QNN_PRIORITY_DEFAULT: "QNN_PRIORITY_DEFAULT (NORMAL)",
              Q.QNN_PRIORITY_NORMAL_HIGH: "QNN_PRIORITY_NORMAL_HIGH", Q.QNN_PRIORITY_HIGH: "QNN_PRIORITY_HIGH",
              Q.QNN_PRIORITY_HIGH_PLUS: "QNN_PRIORITY_HIGH_PLUS", Q.QNN_PRIORITY_CRITICAL: "QNN_PRIORITY_CRITICAL",
              Q.QNN_PRIORITY_CRITICAL_PLUS: "QNN_PRIORITY_CRITICAL_PLUS (HIGHEST)"}
MAX_PRIORITY = 500


# What the vendor's libQnnHtp.so (2.51) does with an option (GraphOption.vendor and friends).
ACCEPTED = "accepted"                      # recorded; values outside the documented range tolerated
REFUSED = "refused"                        # refused whatever the value


@dataclass(frozen=True)
class GraphOption:
    """One row of the QnnHtpGraph_CustomConfig_t table (plus the header's other options)."""
    name: str            # QNN_HTP_GRAPH_CONFIG_OPTION_* without the prefix
    member: str | None   # union member
    default: str         # the documented default
    change: str          # when graphSetConfig may set it
    in_seed: bool = True
    vendor: str = ACCEPTED
    note: str = ""       # what the vendor does with it, when that is not "recorded"


GRAPH_OPTIONS: dict[str, GraphOption] = {o.name: o for o in (
    GraphOption("OPTIMIZATION", "optimizationOption", "QNN_HTP_GRAPH_OPTIMIZATION_TYPE_UNKNOWN (none)",
                BEFORE_FINALIZE),
    GraphOption("PRECISION", "precision", "QNN_PRECISION_FLOAT32", BEFORE_FINALIZE,
                note="another value: the default (warning)"),
    GraphOption("VTCM_SIZE_IN_MB", "vtcmSizeInMB", "4", BEFORE_FINALIZE,
                note="above the SoC's VTCM: recorded, the SoC's VTCM used (warning); >= 4096 MB refused"),
    GraphOption("VTCM_SIZE", "vtcmSizeInMB", "4", BEFORE_FINALIZE),
    GraphOption("VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes", "4 MiB (v81 and later)", BEFORE_FINALIZE,
                note="before v81 or not a multiple of 64 KiB: rounded up to 64 KiB (warning)"),
    GraphOption("FOLD_RELU_ACTIVATION_INTO_CONV_OFF", "foldReluActivationIntoConvOff", "always fold",
                BEFORE_FINALIZE),
    GraphOption("SHORT_DEPTH_CONV_ON_HMX_OFF", "shortDepthConvOnHmxOff", "always use HMX", BEFORE_FINALIZE),
    GraphOption("NUM_HVX_THREADS", "numHvxThreads", "4 offline; the SoC's maximum online",
                UNTIL_FIRST_EXECUTE, note="0 or above the SoC's maximum: the maximum (warning)"),
    GraphOption("WEIGHTS_PACKING", "weightsPacking", "false", BEFORE_FINALIZE),
    GraphOption("FINALIZE_CONFIG", "finalizeConfig", "no explicit setting", BEFORE_FINALIZE,
                note="a NULL key or a value of no scalar type is refused"),
    GraphOption("NUM_CORES", "numCores", "1", BEFORE_FINALIZE, in_seed=False,
                note="0: one core (warning); more than the SoC has: graphFinalize fails"),
    GraphOption("PARALLEL_GRAPH_EXECUTION_CONFIG", "parallelGraphExecutionConfig", "none", BEFORE_FINALIZE,
                in_seed=False, vendor=REFUSED, note="deprecated and no longer supported"),
    GraphOption("HMX_BOUNDING", "hmxBoundingInfo", "none", BEFORE_FINALIZE, in_seed=False, vendor=REFUSED,
                note="HMX op bounding needs deferred pre-emption, which the HTP backend does not offer"),
    GraphOption("ASSUME_SAME_QUANT", "assumeSameQuant", "false", BEFORE_FINALIZE, in_seed=False),
    GraphOption("SHARE_IO_BUFFER", "shareIOBuffer", "false", BEFORE_FINALIZE, in_seed=False),
    GraphOption("ADVANCED_ACTIVATION_FUSION", "advancedActivationFusion", "false", BEFORE_FINALIZE,
                in_seed=False),
    GraphOption("HIGH_PRECISION_SIGMOID", "highPrecisionSigmoid", "false", BEFORE_FINALIZE, in_seed=False),
    GraphOption("MONOLITHIC_LSTM", "monolithicLstm", "false", BEFORE_FINALIZE, in_seed=False),
    # QNN 2.50
    GraphOption("PRECISION_COMPENSATION", "precisionCompensation", "false", BEFORE_FINALIZE, in_seed=False),
    GraphOption("ENABLE_PREDICATION", "enablePredication", "false", BEFORE_FINALIZE, in_seed=False),
    GraphOption("FP16_CLAMP_OVERFLOW", "fp16ClampOverflow", "false", BEFORE_FINALIZE, in_seed=False),
)}


@dataclass(frozen=True)
class OptimizationType:
    """QnnHtpGraph_OptimizationType_t: what ``floatValue`` may be and when it may change."""
    name: str            # without the QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ prefix
    values: str          # the accepted floatValue, in words (messages, docs)
    change: str
    vendor: str = ACCEPTED


OPTIMIZATION_TYPES: dict[str, OptimizationType] = {t.name: t for t in (
    OptimizationType("SCHEDULE_THRESHOLD", "a number >= 0 (negative or NaN: ignored)", BEFORE_FINALIZE),
    # The vendor's 2.51 library refuses this type with every value ("Failed to set option 2").
    OptimizationType("FINALIZE_RETRIES", "none: refused by the HTP backend", BEFORE_FINALIZE, vendor=REFUSED),
    OptimizationType("FINALIZE_OPTIMIZATION_FLAG", "1, 2 or 3 (another value: 2)", BEFORE_FINALIZE),
    OptimizationType("ENABLE_DLBC", "0 (off) or >= 1.0 (on)", BEFORE_FINALIZE),
    OptimizationType("ENABLE_DLBC_WEIGHTS", "0 (off) or >= 1.0 (on)", BEFORE_FINALIZE),
    OptimizationType("ENABLE_SPARSE_WEIGHTS_COMPRESSION", "0 (off) or 1 (on)", BEFORE_FINALIZE),
    # Prepared with it on, it may be forced off (0) and restored (1) during inference (seed).
    OptimizationType("ENABLE_SLC_ALLOCATOR", "0 (off) or 1 (on)", ANY_TIME),
    # QNN 2.50: recorded (the emulator has no VTCM retention across graphs nor a weight cache).
    OptimizationType("ENABLE_VTCM_RETENTION", "any number (recorded)", BEFORE_FINALIZE),
    OptimizationType("ENABLE_CACHED_WEIGHTS", "any number (recorded)", BEFORE_FINALIZE),
)}
# The on/off optimization types: on when floatValue truncates to a non-zero integer (the vendor
# records htpDlbc 1 for -1.0, 1.0 and 2.0, 0 for 0.5 and NaN).
ON_OFF_TYPES = ("ENABLE_DLBC", "ENABLE_DLBC_WEIGHTS", "ENABLE_SPARSE_WEIGHTS_COMPRESSION", "ENABLE_SLC_ALLOCATOR")


def on_off(value) -> bool:
    """An on/off optimization value as the vendor reads it (C truncation to an integer)."""
    v = float(value)
    return not math.isnan(v) and abs(v) >= 1.0


@dataclass(frozen=True)
class ContextOption:
    """One row of the documentation's QnnHtpContext_CustomConfig_t table."""
    name: str            # QNN_HTP_CONTEXT_CONFIG_OPTION_* without the prefix
    member: str
    default: str
    apis: str            # where it acts
    in_seed: bool = True


CREATE_FROM_BINARY = "contextCreateFromBinary*"
LIST_ASYNC = "contextCreateFromBinaryListAsync (listConfig)"
ANY_CONTEXT = "contextCreate and contextCreateFromBinary*"

CONTEXT_OPTIONS: dict[str, ContextOption] = {o.name: o for o in (
    ContextOption("WEIGHT_SHARING_ENABLED", "weightSharingEnabled", "false", ANY_CONTEXT),
    ContextOption("REGISTER_MULTI_CONTEXTS", "groupRegistration", "no group", CREATE_FROM_BINARY),
    ContextOption("FILE_READ_MEMORY_BUDGET", "fileReadMemoryBudgetInMb", "0 (whole file at once)",
                  CREATE_FROM_BINARY),
    ContextOption("IO_MEM_ESTIMATION", "ioMemEstimation", "false", CREATE_FROM_BINARY),
    ContextOption("DSP_MEMORY_PROFILING_ENABLED", "dspMemoryProfilingEnabled", "false", ANY_CONTEXT),
    ContextOption("SHARE_RESOURCES", "shareResources", "false", LIST_ASYNC),
    ContextOption("SHARE_RESOURCES_OPTIMIZATION_TYPE", "shareResOptType",
                  "SEQUENTIAL_WITH_VA_OPTIMIZATION (with SHARE_RESOURCES)", LIST_ASYNC),
    ContextOption("INIT_ACCELERATION", "initAcceleration", "false", CREATE_FROM_BINARY),
    ContextOption("SKIP_VALIDATION_ON_BINARY_SECTION", "skipValidationOnBinarySection", "false", ANY_CONTEXT),
    ContextOption("REGISTER_CONCURRENT_RESOURCE_SHARING", "concurrentGroupRegistration", "no group",
                  CREATE_FROM_BINARY),
    ContextOption("LORA_WEIGHT_SHARING_ENABLED", "loraWeightSharingEnabled", "false", ANY_CONTEXT),
    ContextOption("PREPARE_ONLY", "isPrepareOnly", "false", ANY_CONTEXT),
    ContextOption("USE_EXTENDED_UDMA", "useExtendedUdma", "false", ANY_CONTEXT, in_seed=False),
    # QNN 2.50 (recorded; the emulator has no RAM preload, IO reuse limit, graph splitting, patch
    # files or parallel weight loading to tune)
    ContextOption("LORA_WEIGHT_SHARING_RAM_PRELOAD_ENABLED", "loraWeightSharingRamPreloadEnabled", "false",
                  CREATE_FROM_BINARY, in_seed=False),
    ContextOption("REUSED_IO_LIMIT", "reusedIoLimitMb", "no limit", CREATE_FROM_BINARY, in_seed=False),
    ContextOption("REFERENCE_WEIGHT_SHARING_ENABLED", "referenceWeightSharingEnabled", "false", ANY_CONTEXT,
                  in_seed=False),
    ContextOption("CONCURRENT_DESERIALIZATION_EXTRA_SIZE", "concurrentDeserializationExtraSizeKB", "0",
                  CREATE_FROM_BINARY, in_seed=False),
    ContextOption("GRAPH_SPLITTING_ENABLED", "graphSplittingEnabled", "false", ANY_CONTEXT, in_seed=False),
    ContextOption("CONCURRENT_DESERIALIZATION_PATCH", "concurrentDeserializationPatchFd", "none",
                  CREATE_FROM_BINARY, in_seed=False),
    ContextOption("GRAPH_SPLITTING_CONFIGS", "graphSplittingConfigs", "splitting off", ANY_CONTEXT, in_seed=False),
    ContextOption("LORA_PRELOAD_BUFFER_GROUPS", "loraPreloadBufferGroups", "none", CREATE_FROM_BINARY,
                  in_seed=False),
    ContextOption("PARALLEL_WEIGHT_LOADING", "parallelWeightLoading", "ADAPTIVE", CREATE_FROM_BINARY,
                  in_seed=False),
)}

# QNN 2.50 load-time options the vendor refuses at contextCreate (QNN_CONTEXT_ERROR_INVALID_CONFIG).
# (It refuses IO_MEM_ESTIMATION, INIT_ACCELERATION, SKIP_VALIDATION_ON_BINARY_SECTION and
# SHARE_RESOURCES_OPTIMIZATION_TYPE there too; qnnemu still records those -- docs/validation.md.)
REFUSED_AT_CONTEXT_CREATE = ("LORA_WEIGHT_SHARING_RAM_PRELOAD_ENABLED", "REUSED_IO_LIMIT",
                             "CONCURRENT_DESERIALIZATION_EXTRA_SIZE", "CONCURRENT_DESERIALIZATION_PATCH")

SHARE_RESOURCES_TYPES = {Q.SEQUENTIAL_WITH_VA_OPTIMIZATION: "SEQUENTIAL_WITH_VA_OPTIMIZATION",
                         Q.SEQUENTIAL_WITHOUT_VA_OPTIMIZATION: "SEQUENTIAL_WITHOUT_VA_OPTIMIZATION",
                         Q.CONCURRENT_OPTIMIZATION: "CONCURRENT_OPTIMIZATION"}


# ---------------------------------------------------------------------------- checks
def check_priority(value: int, func: str, path: str, code: int, rule: str) -> int:
    """A Qnn_Priority_t: any value in 0..500 is taken (the vendor's "Valid range: 0-500"); one
    without a row in the HTP thread priority table runs with the nearest documented level
    below it (warning rule QNNEMU-priority-level-mapped)."""
    value = int(value)
    if not 0 <= value <= MAX_PRIORITY:
        fail(Location(func).field(path), rule,
             f"{value} is outside the Qnn_Priority_t range 0..{MAX_PRIORITY} "
             f"({', '.join(f'{n} {v}' for v, n in PRIORITIES.items())})", code=code)
    row = priority.table_row(value)   # (in range: never None)
    if value not in priority.PRIORITY_TABLE and row is not None:
        rules.warn("QNNEMU-priority-level-mapped", func, path,
                   f"{PRIORITIES.get(value, value)} ({value}) has no row in the HTP thread priority table; "
                   f"it runs with {row.name}'s thread priorities (0x{row.hmx_thread_priority:x})")
    return value


def change_window(name: str, value: dict | None = None) -> str:
    """When graphSetConfig may set option ``name`` (an OPTIMIZATION config: its type's window)."""
    if name == "OPTIMIZATION" and value is not None:
        t = OPTIMIZATION_TYPES.get(_opt_type_name(value.get("type")) or "")
        return t.change if t else BEFORE_FINALIZE
    opt = GRAPH_OPTIONS.get(name)
    return opt.change if opt else BEFORE_FINALIZE


def _opt_type_name(value) -> str | None:
    names = Q.enum("QNN_HTP_GRAPH_OPTIMIZATION_TYPE_")
    name = names.get(int(value)) if value is not None else None
    return name[len("QNN_HTP_GRAPH_OPTIMIZATION_TYPE_"):] if name else None


def check_graph_when(name: str, value: Any, graph, func: str, path: str) -> None:
    """graphSetConfig: the option may still change (documentation: NUM_HVX_THREADS until the first
    execute; the SLC allocator also during inference; every other option before finalize)."""
    if graph is None or not graph.finalized:
        return
    window = change_window(name, value)
    if window == BEFORE_FINALIZE:
        what = name if name != "OPTIMIZATION" else f"OPTIMIZATION type {_opt_type_name(value.get('type'))}"
        fail(Location(func).field(path), "QNNEMU-graph-config-after-finalize",
             f"{what} can only be set before graphFinalize; graph '{graph.name}' is finalized",
             code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)
    if window == UNTIL_FIRST_EXECUTE and graph.executions > 0:
        fail(Location(func).field(path), "QNNEMU-graph-hvx-threads-executed",
             f"{name} cannot change after the graph's first execute (graph '{graph.name}' has "
             f"run {graph.executions} time(s))", code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)


VTCM_MB_OVERFLOW = 4096   # MB requests from here on overflow 32-bit bytes (the vendor refuses them)


def check_graph_option(name: str, value: dict, *, model: DeviceModel, context, graph, func: str,
                       path: str, pending: dict) -> None:
    """Checks one QnnHtpGraph_CustomConfig_t (``name`` without prefix, ``value`` the copied
    union) and records its derived keys in ``pending`` (merged into Graph.configs by the
    caller).  ``graph`` is None at graphCreate; ``context`` is the graph's context.  Values the
    vendor tolerates are tolerated with a warning rule (qnnemu/rules.py) and ``value`` is
    rewritten to the value used, which is what the graph records (as the vendor's binary does:
    NUM_HVX_THREADS 8 on a 4-thread SoC is recorded as 4)."""
    soc = model.soc
    option = GRAPH_OPTIONS.get(name)
    member = option.member if option else None
    mpath = f"{path}.{member}" if member else path
    if option is None:
        # Defined by a newer backend, or a value between the header's options: the vendor
        # ignores it (UNKNOWN itself never reaches here: _htp_custom refuses it).
        rules.warn("QNNEMU-graph-config-option-ignored", func, f"{path}.option",
                   f"{name} is not an HTP graph option this backend knows; ignored")
        return
    if option.vendor == REFUSED:
        fail(Location(func).field(path), "QNNEMU-graph-option-unsupported",
             f"QNN_HTP_GRAPH_CONFIG_OPTION_{name} is not supported by the HTP backend: {option.note}",
             code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
    if name == "OPTIMIZATION":
        _check_optimization(value["optimizationOption"], model=model, context=context, graph=graph,
                            func=func, path=f"{path}.optimizationOption", pending=pending)
    elif name == "PRECISION":
        precision = int(value["precision"])
        if precision not in (Q.QNN_PRECISION_FLOAT32, Q.QNN_PRECISION_FLOAT16):
            rules.warn("QNNEMU-graph-precision-ignored", func, mpath,
                       f"{precision} is neither QNN_PRECISION_FLOAT32 (0) nor QNN_PRECISION_FLOAT16 (1); "
                       f"the default QNN_PRECISION_FLOAT32 is used")
            value["precision"] = Q.QNN_PRECISION_FLOAT32
    elif name in ("VTCM_SIZE", "VTCM_SIZE_IN_MB", "VTCM_SIZE_IN_BYTES"):
        _check_vtcm(name, value, model=model, func=func, mpath=mpath, pending=pending)
    elif name == "NUM_HVX_THREADS":
        n = int(value["numHvxThreads"])
        if not 1 <= n <= soc.hvx_threads:
            rules.warn("QNNEMU-graph-hvx-threads-clipped", func, mpath,
                       f"{n} HVX threads; {model.name} has 1..{soc.hvx_threads}: {soc.hvx_threads} are used "
                       f"(the HTP backend clips the value to the SoC's maximum)")
            value["numHvxThreads"] = soc.hvx_threads
    elif name == "NUM_CORES":
        n = int(value["numCores"])
        if n == 0:
            rules.warn("QNNEMU-graph-num-cores-clipped", func, mpath, "0 cores: one core is used")
            value["numCores"] = 1
        # more cores than the SoC has: graphFinalize fails (check_num_cores), as on the vendor
    elif name == "FINALIZE_CONFIG":
        key = value.get("key_text")
        if not key:
            fail(Location(func).field(f"{mpath}.key"), "QNNEMU-graph-finalize-config-key",
                 "the finalize config key is NULL or empty", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
        pending.setdefault("htp_finalize_config", {})[key] = value.get("value_plain")


def _check_vtcm(name: str, value: dict, *, model, func: str, mpath: str, pending: dict) -> None:
    soc = model.soc
    in_bytes = name == "VTCM_SIZE_IN_BYTES"
    raw = int(value["vtcmSizeInBytes" if in_bytes else "vtcmSizeInMB"])
    if not in_bytes and raw >= VTCM_MB_OVERFLOW:
        fail(Location(func).field(mpath), "QNNEMU-graph-vtcm-overflow",
             f"{raw} MB overflows 32 bits once converted to bytes (at most {VTCM_MB_OVERFLOW - 1})",
             code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    nbytes = raw if in_bytes else raw * MIB
    option = name if in_bytes else "VTCM_SIZE_IN_MB"   # VTCM_SIZE and VTCM_SIZE_IN_MB are one option
    if raw == Q.QNN_HTP_GRAPH_CONFIG_OPTION_MAX:
        if not model.soc_configured:
            rules.warn("QNNEMU-graph-vtcm-max-default", func, mpath,
                       f"QNN_HTP_GRAPH_CONFIG_OPTION_MAX (0) without a SoC configured: the VTCM of the "
                       f"default device {model.name} ({soc.vtcm_mb} MB) is used")
        pending["htp_vtcm"] = {"option": option, "bytes": 0}
        return
    if in_bytes and (not soc.byte_granularity_vtcm or raw % VTCM_GRANULE):
        rounded = -(-raw // VTCM_GRANULE) * VTCM_GRANULE
        why = (f"byte-granularity VTCM requests are a v81 feature (the device is {model.name}, v{model.arch})"
               if not soc.byte_granularity_vtcm else f"{raw} bytes is not a multiple of 64 KiB")
        rules.warn("QNNEMU-graph-vtcm-bytes-adjusted", func, mpath, f"{why}: {rounded} bytes are used")
        nbytes = rounded
    if nbytes > soc.vtcm_bytes:
        rules.warn("QNNEMU-graph-vtcm-clipped", func, mpath,
                   f"{raw} {'bytes' if in_bytes else 'MB'} is more than {model.name}'s VTCM ({soc.vtcm_bytes} "
                   f"bytes = {soc.vtcm_mb} MB): recorded, the SoC's VTCM is the graph's budget")
    pending["htp_vtcm"] = {"option": option, "bytes": nbytes}


def check_num_cores(graph, func: str = "graphFinalize") -> None:
    """NUM_CORES above the SoC's cores: the vendor accepts the config and fails graphFinalize
    ("not a multi-VXU SoC"); so does the emulator."""
    n = _num(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES", "numCores", 1), 1)
    model = device_model(graph)
    if n > model.soc.cores:
        fail(Location(func), "QNNEMU-graph-num-cores",
             f"graph '{graph.name}': QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES is {n}; "
             f"{model.name} has {model.soc.cores} HTP core(s)", code=Q.QNN_GRAPH_ERROR_FINALIZE_FAILED)


def _check_optimization(opt: dict, *, model, context, graph, func, path, pending) -> None:
    type_name = _opt_type_name(opt.get("type"))
    if type_name is None or type_name not in OPTIMIZATION_TYPES:
        fail(Location(func).field(f"{path}.type"), "QNNEMU-graph-optimization-type",
             f"{opt.get('type')} is not a QnnHtpGraph_OptimizationType_t", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    if OPTIMIZATION_TYPES[type_name].vendor == REFUSED:
        fail(Location(func).field(f"{path}.type"), "QNNEMU-graph-optimization-unsupported",
             f"QNN_HTP_GRAPH_OPTIMIZATION_TYPE_{type_name} is not supported by the HTP backend "
             f"(it refuses the type with any value)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    v = float(opt["floatValue"])
    vpath = f"{path}.floatValue"
    if type_name == "FINALIZE_OPTIMIZATION_FLAG":
        if v not in (1.0, 2.0, 3.0):
            rules.warn("QNNEMU-graph-optimization-flag-default", func, vpath,
                       f"{v:g} is not a finalize optimization level (1, 2 or 3): level "
                       f"{DEFAULT_OPTIMIZATION_LEVEL} is used")
            v = float(DEFAULT_OPTIMIZATION_LEVEL)
    elif type_name in ON_OFF_TYPES:
        on = on_off(v)
        if not (v == 0.0 or v >= 1.0):
            rules.warn("QNNEMU-graph-optimization-value-coerced", func, vpath,
                       f"{v:g} is not a valid {type_name} value ({OPTIMIZATION_TYPES[type_name].values}): "
                       f"taken as {'on' if on else 'off'}")
        v = 1.0 if on else 0.0
        if on and type_name in ("ENABLE_DLBC", "ENABLE_DLBC_WEIGHTS"):
            _check_dlbc(type_name, model=model, context=context, graph=graph, func=func, path=vpath,
                        pending=pending)
        if type_name == "ENABLE_SLC_ALLOCATOR":
            _check_slc(v, model=model, graph=graph, func=func, path=vpath, pending=pending)
            return
    elif type_name == "SCHEDULE_THRESHOLD" and not v >= 0.0:
        rules.warn("QNNEMU-graph-schedule-threshold-ignored", func, vpath,
                   f"{v:g} is not a valid schedule threshold (a number >= 0): ignored")
        pending.setdefault("htp_optimization", {})   # so the raw record is not read back as set
        return
    pending.setdefault("htp_optimization", {})[type_name] = v


def _check_dlbc(type_name: str, *, model, context, graph, func, path, pending) -> None:
    if not model.dlbc:
        # The vendor records it (its binary's htpDlbc is 1) on any SoC; it has no effect here.
        rules.warn("QNNEMU-graph-dlbc-soc-ignored", func, path,
                   f"{type_name}: {model.name} (v{model.arch}) has no DLBC; recorded without effect")
    configs = getattr(context, "configs", None) or {}
    if type_name == "ENABLE_DLBC" and _context_flag(configs, "WEIGHT_SHARING_ENABLED", "weightSharingEnabled"):
        # DLBC "Not supported with weight sharing" (Limitations); for inputs the vendor's
        # libQnnHtp.so 2.51 takes it and writes the binary (tests/test_dlbc_rules.py): recorded.
        rules.warn("QNNEMU-graph-dlbc-inputs-weight-sharing", func, path,
                   "ENABLE_DLBC in a context with weight sharing (QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_"
                   "ENABLED): not supported together per the documentation; the vendor's library takes it: recorded")
    if type_name == "ENABLE_DLBC_WEIGHTS" and _context_flag(configs, "WEIGHT_SHARING_ENABLED", "weightSharingEnabled"):
        fail(Location(func).field(path), "QNNEMU-graph-dlbc-weight-sharing",
             "DLBC weights are not supported in a context with weight sharing "
             "(QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED)", code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
    # Graph count limits: 32 graphs with input OR weight compression, 16 with both.
    others = list((getattr(context, "graphs", None) or {}).values())
    flags = [dlbc_flags(g) for g in others if g is not None and g is not graph]
    mine = dlbc_flags(graph) if graph is not None else (False, False)
    earlier = pending.get("htp_optimization", {})   # earlier configs of the same call
    mine = (mine[0] or type_name == "ENABLE_DLBC" or earlier.get("ENABLE_DLBC", 0) >= 1.0,
            mine[1] or type_name == "ENABLE_DLBC_WEIGHTS" or earlier.get("ENABLE_DLBC_WEIGHTS", 0) >= 1.0)
    both = sum(1 for f in [*flags, mine] if f[0] and f[1])
    either = sum(1 for f in [*flags, mine] if f[0] or f[1])
    if both > DLBC_GRAPH_LIMIT_BOTH or either > DLBC_GRAPH_LIMIT_ONE:
        fail(Location(func).field(path), "QNNEMU-graph-dlbc-graph-limit",
             f"this would make {either} graphs with DLBC ({both} with input and weight compression) "
             f"in the context; at most {DLBC_GRAPH_LIMIT_ONE} with one kind and "
             f"{DLBC_GRAPH_LIMIT_BOTH} with both", code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)


def _check_slc(v: float, *, model, graph, func, path, pending) -> None:
    if v and not model.soc.slc:
        rules.warn("QNNEMU-graph-slc-soc-ignored", func, path,
                   f"{model.name} (v{model.arch}) has no SLC allocator; recorded without effect")
    if graph is not None and graph.finalized:
        # During inference it can only be forced off and restored (seed).
        prepared = float(_optimizations(graph).get("ENABLE_SLC_ALLOCATOR", 0.0)) >= 1.0
        if v and not prepared:
            fail(Location(func).field(path), "QNNEMU-graph-slc-after-finalize",
                 f"graph '{graph.name}' was prepared without the SLC allocator; it can only be "
                 f"enabled before graphFinalize", code=Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED)
        pending["htp_slc_runtime_off"] = not v
        return
    pending.setdefault("htp_optimization", {})["ENABLE_SLC_ALLOCATOR"] = v


def _context_flag(configs: dict, option: str, member: str) -> bool:
    v = (configs.get("htp") or {}).get(f"QNN_HTP_CONTEXT_CONFIG_OPTION_{option}")
    if isinstance(v, dict):
        v = v.get(member)
    return bool(v)


def dlbc_flags(graph) -> tuple[bool, bool]:
    """(input DLBC, weights DLBC) configured on ``graph``."""
    opts = _optimizations(graph)
    return float(opts.get("ENABLE_DLBC", 0)) >= 1.0, float(opts.get("ENABLE_DLBC_WEIGHTS", 0)) >= 1.0


def prepare_only(context) -> bool:
    """QNN_HTP_CONTEXT_CONFIG_OPTION_PREPARE_ONLY is set on ``context``."""
    return _context_flag(getattr(context, "configs", None) or {}, "PREPARE_ONLY", "isPrepareOnly")


def check_execute_allowed(graph, func: str = "graphExecute") -> None:
    """A graph of a PREPARE_ONLY context cannot execute (documentation: "With this flag enabled,
    graph execution cannot be called").  graphExecute calls it before reading any buffer."""
    if prepare_only(getattr(graph, "context", None)):
        fail(Location(func).path("graphHandle"), "QNNEMU-graphExecute-prepare-only",
             f"graph '{graph.name}' belongs to a context created with "
             f"QNN_HTP_CONTEXT_CONFIG_OPTION_PREPARE_ONLY; it can be prepared and saved, not executed",
             code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
    lora.check_execute(graph, func)   # LORA_WEIGHT_SHARING_ENABLED: a section applied first (qnnemu/htp/lora.py)


def file_read_chunk_bytes(configs: dict, file_size: int) -> int:
    """FILE_READ_MEMORY_BUDGET: the bytes read at a time, min(file size, budget); 0 = the
    feature is off (the whole file at once) -- QNN HTP backend documentation, "QNN HTP Context
    Config Options", FILE_READ_MEMORY_BUDGET."""
    v = (configs.get("htp") or {}).get("QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET")
    mb = int(v.get("fileReadMemoryBudgetInMb", 0) if isinstance(v, dict) else (v or 0))
    return min(int(file_size), mb * MIB) if mb else 0


# ---------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class GraphSettings:
    vtcm_bytes: int            # VTCM budget of the graph
    hvx_threads: int
    precision_fp16: bool
    optimization_level: int    # FINALIZE_OPTIMIZATION_FLAG (1..3)
    dlbc: bool
    weights_packing: bool
    fold_relu_into_conv: bool
    short_depth_conv_on_hmx: bool
    num_cores: int
    dlbc_weights: bool = False
    slc_allocator: bool = False            # prepared with the SLC allocator and not forced off
    sparse_weights_compression: bool = False
    schedule_threshold: float | None = None
    finalize_retries: int | None = None
    finalize_config: tuple = ()            # ((key, value), ...) of FINALIZE_CONFIG
    priority: int = Q.QNN_PRIORITY_DEFAULT
    vtcm_source: str = "default"           # "default", "VTCM_SIZE_IN_MB", "VTCM_SIZE_IN_BYTES", ... or "max"
    soc_vtcm_bytes: int = 8 * MIB
    # float32 tensors run float16 math on this SoC (SocInfo.float16_math: v69 and later; the
    # PRECISION config does not change it), docs/numerics.md "Float math per arch"
    float16_math: bool = False


def _num(value, default, kind=int):
    """``kind(value)``, or ``default`` for a value no number can be made of: the configs of a
    graph loaded from a context binary are whatever JSON the binary holds."""
    try:
        out = kind(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return default if isinstance(out, float) and math.isnan(out) else out


def device_model(graph) -> DeviceModel:
    """The device the graph is prepared for: the one its binary records when it was loaded
    from a context binary, else its context's device (the default device without one)."""
    prepared = getattr(graph, "prepared_for", None)
    if prepared is not None:
        return prepared
    dev = getattr(getattr(graph, "context", None), "device", None)
    return dev.model if dev is not None else DeviceModel()


def _htp(graph, option: str, member: str, default):
    htp = (getattr(graph, "configs", None) or {}).get("htp")
    cfg = htp.get(option) if isinstance(htp, dict) else None
    if isinstance(cfg, dict) and member in cfg:
        return cfg[member]
    return default


def _optimizations(graph) -> dict:
    """Optimization type -> floatValue; a graph whose configs predate "htp_optimization" (an
    older context binary) has only its last OPTIMIZATION config."""
    configs = getattr(graph, "configs", None) or {}
    opts = configs.get("htp_optimization")
    if isinstance(opts, dict):
        return {k: _num(v, 0.0, float) for k, v in opts.items()}
    last = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION", "optimizationOption", None)
    if isinstance(last, dict) and _opt_type_name(last.get("type")):
        return {_opt_type_name(last.get("type")): _num(last.get("floatValue"), 0.0, float)}
    return {}


def _vtcm_request(graph) -> tuple[str, int] | None:
    configs = getattr(graph, "configs", None) or {}
    req = configs.get("htp_vtcm")
    if isinstance(req, dict):
        return str(req.get("option")), max(0, _num(req.get("bytes"), 0))
    for option in ("VTCM_SIZE_IN_MB", "VTCM_SIZE"):
        mb = _htp(graph, f"QNN_HTP_GRAPH_CONFIG_OPTION_{option}", "vtcmSizeInMB", None)
        if mb is not None:
            return option, max(0, _num(mb, 0)) * MIB
    nbytes = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes", None)
    return ("VTCM_SIZE_IN_BYTES", max(0, _num(nbytes, 0))) if nbytes is not None else None


def graph_settings(graph) -> GraphSettings:
    """The resolved HTP settings of ``graph`` on its device's SoC."""
    model = device_model(graph)
    soc = model.soc
    soc_vtcm = soc.vtcm_bytes
    req = _vtcm_request(graph)
    if req is None:
        source, vtcm = "default", min(DEFAULT_VTCM_BYTES, soc_vtcm)
    elif req[1] == 0:
        source, vtcm = "max", soc_vtcm
    else:
        # A loaded binary may carry a request larger than this device's VTCM: capped.
        source, vtcm = req[0], min(req[1], soc_vtcm)
    opts = _optimizations(graph)
    threads = _num(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS", "numHvxThreads", 0), 0)
    precision = _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION", "precision", None)
    level = _num(opts.get("FINALIZE_OPTIMIZATION_FLAG"), DEFAULT_OPTIMIZATION_LEVEL)
    configs = getattr(graph, "configs", None) or {}
    retries = opts.get("FINALIZE_RETRIES")
    finalize = configs.get("htp_finalize_config")
    finalize = finalize if isinstance(finalize, dict) else {}
    return GraphSettings(
        vtcm_bytes=vtcm,
        hvx_threads=min(threads, soc.hvx_threads) if threads > 0 else soc.hvx_threads,
        precision_fp16=_num(precision, None) == Q.QNN_PRECISION_FLOAT16,
        optimization_level=level,
        dlbc=float(opts.get("ENABLE_DLBC", 0)) >= 1.0 and model.dlbc,
        weights_packing=bool(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING", "weightsPacking", False)),
        fold_relu_into_conv=not _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF",
                                     "foldReluActivationIntoConvOff", False),
        short_depth_conv_on_hmx=not _htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_SHORT_DEPTH_CONV_ON_HMX_OFF",
                                         "shortDepthConvOnHmxOff", False),
        num_cores=min(max(1, _num(_htp(graph, "QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES", "numCores", 1), 1)), soc.cores),
        dlbc_weights=float(opts.get("ENABLE_DLBC_WEIGHTS", 0)) >= 1.0 and model.dlbc,
        slc_allocator=(float(opts.get("ENABLE_SLC_ALLOCATOR", 0)) >= 1.0 and soc.slc
                       and not configs.get("htp_slc_runtime_off", False)),
        sparse_weights_compression=float(opts.get("ENABLE_SPARSE_WEIGHTS_COMPRESSION", 0)) >= 1.0,
        schedule_threshold=opts.get("SCHEDULE_THRESHOLD"),
        finalize_retries=_num(retries, None) if retries is not None else None,
        finalize_config=tuple(sorted((str(k), v) for k, v in finalize.items())),
        priority=_num(configs.get("priority"), Q.QNN_PRIORITY_DEFAULT),
        vtcm_source=source,
        soc_vtcm_bytes=soc_vtcm,
        float16_math=soc.float16_math,
    )


# ---------------------------------------------------------------------------- properties
def packed_weight_bytes(tensor, packing: bool) -> int:
    """Stored size of static ``tensor``: with WEIGHTS_PACKING, 8-bit weights whose values all
    lie in the 4-bit range are stored two per byte (documentation: "stored ... as packed 4-bit") --
    the context binary's own rule (qnnemu/htp/packing.py), so the property and the binary agree."""
    if weights_packing.packing_of(tensor, packing) is not None:
        return (tensor.data.size + 1) // 2
    return int(tensor.data.nbytes)


def weights_buffer_bytes(context) -> int:
    """QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE: the bytes of the context's static data --
    each static tensor once (context tensors shared by graphs count once), packed where the
    graph packs weights."""
    seen: dict[int, int] = {}
    for t in getattr(context, "tensors", {}).values():
        if t.data is not None:
            seen[id(t)] = int(t.data.nbytes)
    for g in (getattr(context, "graphs", None) or {}).values():
        packing = bool(_htp(g, "QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING", "weightsPacking", False))
        for t in g.tensors.values():
            if t.data is not None and id(t) not in seen:
                seen[id(t)] = packed_weight_bytes(t, packing)
    return sum(seen.values())


def spill_fill_buffer_bytes(context) -> int:
    """QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE: the group's shared buffer when the
    context is in one (sized by the group's first registration), else the largest spill-fill
    buffer of the context's prepared graphs."""
    group = groups.group_of(context)
    if group is not None:
        return group.spill_fill_bytes
    sizes = [int(getattr(g, "spill_fill_bytes", 0) or 0)
             for g in (getattr(context, "graphs", None) or {}).values()]
    return max(sizes, default=0)


def vtcm_backup_buffer_bytes(context) -> int:
    """QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE (QNN 2.50): the buffer a graph saves its
    VTCM into when a higher-priority client pre-empts it ("save, re-acquire, and restore VTCM
    memory when yielding", QNN HTP backend documentation): each graph has its own, as large as
    the VTCM it acquires (its prepared plan's budget), so the context's largest one; in a
    resource-sharing group one buffer "determined internally based on the device's
    capabilities": the device's whole VTCM."""
    if groups.group_of(context) is not None:
        device = getattr(context, "device", None)
        return int((device.model if device is not None else DeviceModel()).vtcm_bytes)
    sizes = [int(getattr(getattr(g, "htp_plan", None), "vtcm_budget_bytes", 0) or 0)
             for g in (getattr(context, "graphs", None) or {}).values()]
    return max(sizes, default=0)


def buffer_start_alignment(context) -> int:
    """QNN_HTP_CONTEXT_GET_PROP_BUFFER_START_ALIGNMENT: the largest block alignment the
    context's prepared plans ask for, at least 64 bytes."""
    align = BUFFER_START_ALIGNMENT
    for g in (getattr(context, "graphs", None) or {}).values():
        plan = getattr(g, "htp_plan", None)
        for b in getattr(plan, "blocks", None) or ():
            align = max(align, int(b.align or 0))
    return align


# ---------------------------------------------------------------------------- context configs
LIST_CONFIG_FUNC = "contextCreateFromBinaryListAsync: listConfig"


def check_context_option(name: str, value: dict, *, func: str, path: str, model: DeviceModel,
                         out: dict) -> None:
    """Checks one QnnHtpContext_CustomConfig_t (``name`` without prefix) as far as it can be
    checked alone, recording derived keys in ``out``; ``check_context_options`` then checks
    the combinations."""
    option = CONTEXT_OPTIONS.get(name)
    mpath = f"{path}.{option.member}" if option else path
    if name in REFUSED_AT_CONTEXT_CREATE and func == "contextCreate" and option is not None:  # (all options)
        fail(Location(func).field(f"{path}.option"), "QNNEMU-context-option-load-only",
             f"{name} acts when a context is loaded from a binary ({option.apis}); the HTP backend "
             f"refuses it at contextCreate", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    if name == "SHARE_RESOURCES" and value.get("shareResources") and func != LIST_CONFIG_FUNC:
        fail(Location(func).field(mpath), "QNNEMU-context-share-resources-api",
             "SHARE_RESOURCES is a group configuration: pass it in the listConfig of "
             "contextCreateFromBinaryListAsync, not as a context's own config",
             code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
    elif name == "SHARE_RESOURCES_OPTIMIZATION_TYPE":
        t = int(value["shareResOptType"])
        if t not in SHARE_RESOURCES_TYPES:
            fail(Location(func).field(mpath), "QNNEMU-context-share-resources-type",
                 f"{t} is not a QnnHtpContext_ShareResourcesOptimizationType_t "
                 f"({', '.join(f'{n} {v}' for v, n in SHARE_RESOURCES_TYPES.items())})",
                 code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
    elif name in ("REGISTER_MULTI_CONTEXTS", "REGISTER_CONCURRENT_RESOURCE_SHARING"):
        kind, member = groups.REGISTRATION_OPTIONS[f"QNN_HTP_CONTEXT_CONFIG_OPTION_{name}"]
        if func in ("contextCreate", "contextSetConfig"):
            fail(Location(func).field(path), "QNNEMU-context-group-api",
                 f"{name} registers a context loaded from a binary (prepared offline) when it is "
                 f"created: pass it to contextCreateFromBinary", code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        if func.startswith("contextCreateFromBinaryListAsync"):
            # QNN HTP backend documentation, "QNN HTP Context Config Options": the group
            # registrations are "only used with the QnnContext_createFromBinary API"; ListAsync
            # shares resources through SHARE_RESOURCES instead.  (The vendor's x86 library has no
            # ListAsync at all: QNN_COMMON_ERROR_NOT_SUPPORTED for any call.)
            fail(Location(func).field(path), "QNNEMU-context-group-list-async",
                 f"{name} is used with contextCreateFromBinary only; contextCreateFromBinaryListAsync shares "
                 f"resources across its contexts with QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES",
                 code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        if "htp_group" in out and out["htp_group"]["kind"] != kind:
            fail(Location(func).field(path), "QNNEMU-context-group-both",
                 "a context joins one spill-fill sharing group: REGISTER_MULTI_CONTEXTS and "
                 "REGISTER_CONCURRENT_RESOURCE_SHARING are both given", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        if kind == groups.CONCURRENT and not model.soc.concurrent_sharing:
            fail(Location(func).field(path), "QNNEMU-context-group-concurrent-arch",
                 f"concurrent resource sharing needs HTP v81; the device is {model.name} "
                 f"(v{model.arch})", code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        reg = value[member]
        first, size = int(reg["firstGroupHandle"]), int(reg["maxSpillFillBuffer"])
        if first == 0:
            if size == 0:
                fail(Location(func).field(f"{path}.{member}.maxSpillFillBuffer"), "QNNEMU-context-group-size",
                     "0: the first context of a group must give the group's spill-fill buffer size "
                     "(> 0)", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        else:
            group = groups.group_for_first(first)
            if group is None or group.kind != kind:
                fail(Location(func).field(f"{path}.{member}.firstGroupHandle"), "QNNEMU-context-group-first",
                     f"{first:#x} is not the first context of a {name} group ("
                     + ("a live context that opened no such group" if groups.live_context(first)
                        else "no live context") + ")",
                     code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
            if size and size != group.spill_fill_bytes:
                rules.warn("QNNEMU-context-group-spill-fill-ignored", func, f"{path}.{member}.maxSpillFillBuffer",
                           f"{size} bytes ignored: the group's first registration sized its spill-fill buffer to "
                           f"{group.spill_fill_bytes} bytes")
        out["htp_group"] = {"kind": kind, "first": first, "max_spill_fill": size}


def check_context_options(out: dict, *, func: str, model: DeviceModel) -> None:
    """The combination rules of one config list (after every option was read)."""
    htp = out.get("htp") or {}

    def flag(option, member):
        v = htp.get(f"QNN_HTP_CONTEXT_CONFIG_OPTION_{option}")
        return bool(v.get(member)) if isinstance(v, dict) else False

    if flag("SHARE_RESOURCES", "shareResources"):
        t_cfg = htp.get("QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES_OPTIMIZATION_TYPE")
        t = int(t_cfg["shareResOptType"]) if isinstance(t_cfg, dict) else Q.SEQUENTIAL_WITH_VA_OPTIMIZATION
        out["shareResourcesType"] = t
        if switching.requested(out):   # QNN HTP backend documentation, "Graph Switching (Beta)"
            fail(Location(func).path("config"), "QNNEMU-context-share-resources-graph-switching",
                 "SHARE_RESOURCES cannot be used together with graph switching (PERSISTENT_BINARY with "
                 "a MEMORY_LIMIT_HINT above 0, or a GRAPH_RETENTION_ORDER)", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)
        if t == Q.SEQUENTIAL_WITH_VA_OPTIMIZATION and not model.soc.va_optimization:
            fail(Location(func).path("config"), "QNNEMU-context-share-resources-va-soc",
                 f"SEQUENTIAL_WITH_VA_OPTIMIZATION is not supported on {model.name} (v{model.arch}); "
                 f"use SEQUENTIAL_WITHOUT_VA_OPTIMIZATION", code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
        if t == Q.CONCURRENT_OPTIMIZATION and not model.soc.concurrent_sharing:
            fail(Location(func).path("config"), "QNNEMU-context-share-resources-concurrent-arch",
                 f"CONCURRENT_OPTIMIZATION needs HTP v81; the device is {model.name} (v{model.arch})",
                 code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE)
    reg = out.get("htp_group")
    if reg and reg["first"]:
        group = groups.group_for_first(reg["first"])
        if group is not None and group.kind == groups.CONCURRENT:   # (a handle that opened no group was refused above)
            mine = groups.context_priority(out)
            if mine != group.priority:
                fail(Location(func).path("config"), "QNNEMU-context-group-priority",
                     f"a concurrent resource sharing group keeps one priority: the group has "
                     f"{group.priority}, this context {mine}", code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)


def check_priority_change(context, func: str, path: str) -> None:
    """Priorities of a concurrent sharing group cannot change on the fly (QNN HTP backend
    documentation, "QNN HTP Context Config Options", REGISTER_CONCURRENT_RESOURCE_SHARING)."""
    group = groups.group_of(context)
    if group is not None and group.kind == groups.CONCURRENT:
        fail(Location(func).field(path), "QNNEMU-priority-concurrent-group",
             "the priority of a context in a concurrent resource sharing group cannot change",
             code=Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE if func == "contextSetConfig"
                     else Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
