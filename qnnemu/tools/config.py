"""The backend-extension config file of the QNN SDK tools (``--config_file``): the HTP options
``graphs``, ``devices``, ``context``, ``groupContext``, ``memory`` as described in the QNN HTP
backend documentation, "QNN HTP Backend Extensions", mapped to HTP graph, device and context
configs of qnnemu.client; and the outer form's ``context_configs`` ("Graph Switching (Beta)",
"Multi-Graph Switching (Beta)": is_persistent_binary, memory_limit_hint, enable_graphs,
graph_retention_order), core context configs of a context loaded from a binary.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..headers import Q
from .reporting import ToolError, log

_PERF_PROFILES = ("low_balanced", "balanced", "default", "high_performance",
                  "sustained_high_performance", "burst", "low_power_saver", "power_saver",
                  "high_power_saver", "extreme_power_saver", "system_settings")


def _optimization(kind: str) -> tuple[str, str, Callable[[Any], Any]]:
    """A graphs[] key that sets one QnnHtpGraph_OptimizationOption_t (type ``kind``)."""
    option_type = getattr(Q, f"QNN_HTP_GRAPH_OPTIMIZATION_TYPE_{kind}")
    return ("OPTIMIZATION", "optimizationOption",
            lambda v: {"type": option_type, "floatValue": float(v)})


# graphs[] keys -> (HTP graph option, union member, converter)
_GRAPH_KEYS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    "vtcm_mb": ("VTCM_SIZE", "vtcmSizeInMB", int),
    "vtcm_size": ("VTCM_SIZE_IN_BYTES", "vtcmSizeInBytes", int),
    "hvx_threads": ("NUM_HVX_THREADS", "numHvxThreads", int),
    "O": _optimization("FINALIZE_OPTIMIZATION_FLAG"),
    "dlbc": _optimization("ENABLE_DLBC"),
    "dlbc_weights": _optimization("ENABLE_DLBC_WEIGHTS"),
    "slc_alloc_enable": _optimization("ENABLE_SLC_ALLOCATOR"),
    "weights_packing": ("WEIGHTS_PACKING", "weightsPacking", bool),
    "num_cores": ("NUM_CORES", "numCores", int),
    "short_depth_conv_on_hmx_off": ("SHORT_DEPTH_CONV_ON_HMX_OFF", "shortDepthConvOnHmxOff", bool),
    "fold_relu_activation_into_conv_off": ("FOLD_RELU_ACTIVATION_INTO_CONV_OFF",
                                           "foldReluActivationIntoConvOff", bool),
}
# context keys -> (HTP context option, union member, converter, used when)
_CONTEXT_KEYS: dict[str, tuple[str, str, Callable[[Any], Any], str]] = {
    "weight_sharing_enabled": ("WEIGHT_SHARING_ENABLED", "weightSharingEnabled", bool, "prepare"),
    "lora_weight_sharing": ("LORA_WEIGHT_SHARING_ENABLED", "loraWeightSharingEnabled", bool, "prepare"),
    "file_read_memory_budget_in_mb": ("FILE_READ_MEMORY_BUDGET", "fileReadMemoryBudgetInMb", int, "load"),
    "io_memory_estimation": ("IO_MEM_ESTIMATION", "ioMemEstimation", bool, "load"),
    "init_acceleration": ("INIT_ACCELERATION", "initAcceleration", bool, "load"),
}
_CONTEXT_IGNORED = {
    "max_spill_fill_buffer_for_group": "spill-fill group registration needs several contexts; "
                                       "the tools load one",
    "group_id": "spill-fill group registration needs several contexts; the tools load one",
}
_DEVICE_IGNORED = {
    "device_id": "the emulated platform has one device",
    "core_id": "the emulated device has one core",
    "core_type": "the emulated device has one (NSP) core",
    "use_client_context": "power contexts are not modelled",
}
# devices[].profiling_level (QNN HTP backend documentation, "Detailed and Linting Profiling": the
# level qnn-net-run's ``--profiling_level backend`` uses)
PROFILING_LEVELS = ("basic", "detailed", "linting")
# The outer form's ``context_configs`` keys (QNN HTP backend documentation, "Graph Switching (Beta)",
# "Multi-Graph Switching (Beta)") -> (QnnContext_Config_t option, union member, value kinds); they
# apply when a context is loaded from a binary (qnnemu/htp/switching.py).
_CONTEXT_CONFIGS_KEYS: dict[str, tuple[str, str, tuple[type, ...]]] = {
    "is_persistent_binary": ("QNN_CONTEXT_CONFIG_PERSISTENT_BINARY", "isPersistentBinary", (bool,)),
    "memory_limit_hint": ("QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT", "memoryLimitHint", (int,)),
    "enable_graphs": ("QNN_CONTEXT_CONFIG_ENABLE_GRAPHS", "enableGraphs", (list,)),
    "graph_retention_order": ("QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER", "graphRetentionOrder", (list,)),
}
_CONTEXT_CONFIGS_IGNORED = {
    "spill_fill_buffer": "a spill-fill buffer shared with the client is not modelled",
    "weights_buffer": "a weights buffer shared with the client is not modelled",
}
_UINT32_MAX = 0xFFFFFFFF
_CORE_KEYS = ("perf_profile", "rpc_control_latency", "rpc_polling_time", "hmx_timeout_us",
              "adaptive_polling_time")


@dataclass
class BackendConfig:
    """The parsed ``--config_file``: configs for graphs, contexts and the device."""
    path: str | None = None
    graphs: list[tuple[list[str] | None, list[tuple[str, str, Any]]]] = field(default_factory=list)
    context: list[tuple[str, str, Any, str]] = field(default_factory=list)
    device: list[tuple[str, str, Any]] = field(default_factory=list)
    # the outer form's context_configs: (QnnContext_Config_t option name, union member, value), at load
    load_configs: list[tuple[str, str, Any]] = field(default_factory=list)
    raw: dict = field(default_factory=dict)
    # devices[0].profiling_level: the level of net-run's --profiling_level backend (None: not set)
    profiling_level: str | None = None
    # devices[0].cores[0]: perf_profile and the RPC / HMX overrides (qnnemu.htp.perf.profile_votes
    # keywords); net-run votes them around each inference through the perf infrastructure
    perf: dict = field(default_factory=dict)

    @property
    def enabled_graphs(self) -> list[str] | None:
        """context_configs.enable_graphs: the graphs a loaded context has, in this order."""
        return next((list(v) for opt, _, v in self.load_configs if opt == "QNN_CONTEXT_CONFIG_ENABLE_GRAPHS"), None)

    def graph_configs(self, graph_name: str) -> list:
        """HTP graph configs (client GraphConfig objects) for graph ``graph_name``: the
        ``graphs`` entries naming it in ``graph_names``, or naming no graph."""
        from ..client import htp_graph_config
        out = []
        for names, options in self.graphs:
            if names is None or graph_name in names:
                out += [htp_graph_config(opt, **{member: value}) for opt, member, value in options]
        return out

    def context_configs(self, when: str) -> list:
        """HTP context configs for ``when`` = "prepare" (contextCreate) or "load"
        (contextCreateFromBinary)."""
        from ..client import htp_context_config
        out = [htp_context_config(opt, **{member: value})
               for opt, member, value, used in self.context if used == when]
        if when == "load":
            out += [_plain_context_config(opt, member, value) for opt, member, value in self.load_configs]
        return out

    def device_configs(self) -> list:
        from ..client import htp_device_config
        return [htp_device_config(opt, **{member: value}) for opt, member, value in self.device]

    def perf_session(self, backend):
        """The perf profile of ``devices[0].cores[0]`` as a qnnemu.htp.perf.ProfileSession voting
        through ``backend``'s perf infrastructure (C ABI), or None without one.  Its
        ``infrastructure.close()`` destroys the power config id."""
        if not self.perf:
            return None
        from ..client.perf import PerfInfrastructure
        from ..htp import perf as htp_perf
        infra = PerfInfrastructure(backend)
        pid = infra.create_power_config_id()
        overrides = {k: v for k, v in self.perf.items() if k != "perf_profile"}
        session = htp_perf.ProfileSession(pid, str(self.perf.get("perf_profile", "high_performance")),
                                          perf=infra, **overrides)
        session.infrastructure = infra
        return session

    def warn_perf_unused(self, tool: str) -> None:
        """The perf keys do nothing in a tool that executes nothing (the generator)."""
        for key in self.perf:
            log.warning("config file: devices[0].cores[0].%s ignored: %s executes no graph "
                        "(qnnemu-net-run votes it)", key, tool)

    def warn_unused(self, when: str) -> None:
        """Warns about context options that do not apply to ``when`` ("prepare"/"load")."""
        for opt, _, _, used in self.context:
            if used != when:
                log.warning("config file: context option %s applies when a context is %s; "
                            "ignored here", opt, "prepared" if used == "prepare" else
                            "loaded from a binary")
        if when != "load":
            for opt, _, _ in self.load_configs:
                log.warning("config file: context_configs option %s applies when a context is loaded "
                            "from a binary; ignored here", opt)


def _plain_context_config(option: str, member: str, value: Any):
    """A QnnContext_Config_t (client GraphConfig) of a core context option; a list of graph
    names becomes the NULL-terminated string list the option points to."""
    from ..client.cabi import ffi
    from ..client.configs import GraphConfig
    config = ffi.new("QnnContext_Config_t *")
    config.option = getattr(Q, option)
    keep: list[Any] = []
    if isinstance(value, list):
        keep = [ffi.new("char[]", str(n).encode()) for n in value]
        value = ffi.new("char *[]", keep + [ffi.NULL])
        keep.append(value)
    setattr(config, member, value)
    return GraphConfig(config, keep)


def _expect(value, kinds, where: str):
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in
                                        (kinds if isinstance(kinds, tuple) else (kinds,))):
        names = "/".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise ToolError(f"config file: {where}: expected {names}, got {json.dumps(value)}")
    return value


def _dsp_arch(value: Any) -> int:
    text = str(value).strip().lower()
    if text.startswith("v"):
        text = text[1:]
    if not text.isdigit() or getattr(Q, f"QNN_HTP_DEVICE_ARCH_V{text}", None) is None:
        raise ToolError(f"config file: devices[].dsp_arch: {json.dumps(value)} is not an HTP "
                        f"architecture (v68, v69, v73, v75, v79, v81, v85)")
    return int(text)


def read_json(path: str, option: str) -> Any:
    """The JSON document at ``path`` (given with ``option``); unreadable or invalid: ToolError."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ToolError(f"{option} {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"{option} {path}: invalid JSON: {e}") from None


def _inner_config(data: dict, path: str) -> dict:
    """The HTP config: ``data`` itself, or the file the SDK's outer ``{"backend_extensions":
    {"shared_library_path", "config_file_path"}}`` form names (the shared library is not
    loaded: qnnemu maps the options itself)."""
    if "backend_extensions" not in data:
        return data
    outer = _expect(data["backend_extensions"], dict, "backend_extensions")
    unknown = set(data) - {"backend_extensions", "context_configs", "graph_configs"}
    if unknown:
        raise ToolError(f"config file {path}: unknown top-level keys {sorted(unknown)}")
    for key in set(data) - {"backend_extensions", "context_configs"}:
        log.warning("config file: %s is not supported by the qnnemu tools; ignored", key)
    if "shared_library_path" in outer:
        log.info("config file: backend_extensions.shared_library_path %s is not loaded; "
                 "qnnemu applies the HTP options itself", outer["shared_library_path"])
    inner = outer.get("config_file_path")
    if not isinstance(inner, str):
        raise ToolError(f"config file {path}: backend_extensions.config_file_path "
                        f"(the HTP config JSON) is missing")
    inner_path = Path(inner)
    if not inner_path.is_absolute() and not inner_path.exists():
        inner_path = Path(path).resolve().parent / inner
    try:
        data = json.loads(inner_path.read_text())
    except OSError as e:
        raise ToolError(f"config file {path}: config_file_path {inner}: "
                        f"{e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ToolError(f"config file {inner_path}: invalid JSON: {e}") from None
    _expect(data, dict, f"{inner_path}: top level")
    return data


def _graph_options(cfg: BackendConfig, data: dict) -> None:
    """``graphs[]``: HTP graph configs for the graphs each entry names (or all)."""
    for i, g in enumerate(_expect(data.get("graphs", []), list, "graphs")):
        _expect(g, dict, f"graphs[{i}]")
        names = g.get("graph_names")
        if names is not None:
            _expect(names, list, f"graphs[{i}].graph_names")
            names = [str(n) for n in names]
        options = []
        for key, value in g.items():
            if key == "graph_names":
                continue
            if key == "fp16_relaxed_precision":
                log.warning("config file: graphs[%d].fp16_relaxed_precision is deprecated (QNN "
                            "2.35); mapped to the PRECISION=FLOAT16 graph config", i)
                if _expect(value, (bool, int, float), f"graphs[{i}].{key}"):
                    options.append(("PRECISION", "precision", Q.QNN_PRECISION_FLOAT16))
                continue
            if key not in _GRAPH_KEYS:
                raise ToolError(f"config file: graphs[{i}].{key}: unknown graph option "
                                f"(known: graph_names, fp16_relaxed_precision, "
                                f"{', '.join(_GRAPH_KEYS)})")
            option, member, convert = _GRAPH_KEYS[key]
            _expect(value, (bool, int, float), f"graphs[{i}].{key}")
            options.append((option, member, convert(value)))
        cfg.graphs.append((names, options))


def _device_options(cfg: BackendConfig, data: dict) -> None:
    """``devices[]``: the first device's SoC, architecture and process domain."""
    for i, d in enumerate(_expect(data.get("devices", []), list, "devices")):
        _expect(d, dict, f"devices[{i}]")
        if i > 0:
            log.warning("config file: devices[%d]: only the first device is used", i)
            continue
        for key, value in d.items():
            where = f"devices[{i}].{key}"
            if key in ("soc_model", "soc_id"):
                if key == "soc_id":
                    log.warning("config file: %s is deprecated; used as soc_model", where)
                cfg.device.append(("SOC", "socModel", int(_expect(value, int, where))))
            elif key == "dsp_arch":
                cfg.device.append(("ARCH", "arch", {"deviceId": 0, "arch": _dsp_arch(value)}))
            elif key == "pd_session":
                if value not in ("signed", "unsigned"):
                    raise ToolError(f"config file: {where}: {json.dumps(value)} is not "
                                    f"\"signed\" or \"unsigned\"")
                cfg.device.append(("SIGNEDPD", "useSignedProcessDomain",
                                   {"deviceId": 0, "useSignedProcessDomain": value == "signed"}))
            elif key == "profiling_level":
                if value not in PROFILING_LEVELS:
                    raise ToolError(f"config file: {where}: {json.dumps(value)} is not one of "
                                    f"{', '.join(PROFILING_LEVELS)}")
                cfg.profiling_level = value
            elif key in _DEVICE_IGNORED:
                log.warning("config file: %s ignored: %s", where, _DEVICE_IGNORED[key])
            elif key == "cores":
                for j, core in enumerate(_expect(value, list, where)):
                    _expect(core, dict, f"{where}[{j}]")
                    for ckey, cvalue in core.items():
                        if ckey not in _CORE_KEYS:
                            raise ToolError(f"config file: {where}[{j}].{ckey}: unknown core "
                                            f"option (known: {', '.join(_CORE_KEYS)})")
                        if ckey == "perf_profile" and cvalue not in _PERF_PROFILES:
                            raise ToolError(f"config file: {where}[{j}].perf_profile: "
                                            f"{json.dumps(cvalue)} is not one of "
                                            f"{', '.join(_PERF_PROFILES)}")
                        if j > 0:
                            log.warning("config file: %s[%d].%s ignored: the emulated device has "
                                        "one core", where, j, ckey)
                            continue
                        if ckey != "perf_profile":
                            _expect(cvalue, int, f"{where}[{j}].{ckey}")
                            if not 0 <= cvalue <= _UINT32_MAX:
                                # a uint32_t field of QnnHtpPerfInfrastructure_PowerConfig_t
                                raise ToolError(f"config file: {where}[{j}].{ckey}: {cvalue} is not a "
                                                f"microsecond value 0..{_UINT32_MAX} (a uint32_t of the "
                                                f"power config)")
                        cfg.perf[ckey] = cvalue
            else:
                raise ToolError(f"config file: {where}: unknown device option (known: soc_model, "
                                f"soc_id, dsp_arch, pd_session, profiling_level, cores, "
                                f"{', '.join(_DEVICE_IGNORED)})")


def _context_options(cfg: BackendConfig, data: dict) -> None:
    """``context``: HTP context configs, each applied when a context is prepared or loaded."""
    context = _expect(data.get("context", {}), dict, "context")
    for key, value in context.items():
        if key in _CONTEXT_KEYS:
            option, member, convert, used = _CONTEXT_KEYS[key]
            _expect(value, (bool, int), f"context.{key}")
            cfg.context.append((option, member, convert(value), used))
        elif key in _CONTEXT_IGNORED:
            log.warning("config file: context.%s ignored: %s", key, _CONTEXT_IGNORED[key])
        else:
            raise ToolError(f"config file: context.{key}: unknown context option (known: "
                            f"{', '.join(list(_CONTEXT_KEYS) + list(_CONTEXT_IGNORED))})")


def _context_configs_options(cfg: BackendConfig, context_configs: Any) -> None:
    """The outer form's ``context_configs``: core context configs applied at load (graph
    switching's low-memory mode, enabled graphs, retention order)."""
    for key, value in _expect(context_configs, dict, "context_configs").items():
        where = f"context_configs.{key}"
        if key in _CONTEXT_CONFIGS_IGNORED:
            log.warning("config file: %s ignored: %s", where, _CONTEXT_CONFIGS_IGNORED[key])
            continue
        if key not in _CONTEXT_CONFIGS_KEYS:
            raise ToolError(f"config file: {where}: unknown option (known: "
                            f"{', '.join(list(_CONTEXT_CONFIGS_KEYS) + list(_CONTEXT_CONFIGS_IGNORED))})")
        option, member, kinds = _CONTEXT_CONFIGS_KEYS[key]
        _expect(value, kinds, where)
        if isinstance(value, list):
            if not value or not all(isinstance(n, str) and n for n in value):
                raise ToolError(f"config file: {where}: expected a non-empty list of graph names, "
                                f"got {json.dumps(value)}")
        elif isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 1 << 64:
            raise ToolError(f"config file: {where}: {value} is not a uint64 value")
        cfg.load_configs.append((option, member, value))


def _refuse_unmodelled(data: dict) -> None:
    """``groupContext`` and ``memory``: accepted with a warning, or refused (shared buffers)."""
    group = _expect(data.get("groupContext", {}), dict, "groupContext")
    for key in group:
        if key != "share_resources":
            raise ToolError(f"config file: groupContext.{key}: unknown option (known: share_resources)")
        log.warning("config file: groupContext.share_resources ignored: the tools load one context")
    memory = _expect(data.get("memory", {}), dict, "memory")
    for key, value in memory.items():
        if key != "mem_type":
            raise ToolError(f"config file: memory.{key}: unknown option (known: mem_type)")
        if value != "shared_buffer":
            raise ToolError(f"config file: memory.mem_type: {json.dumps(value)} is not "
                            f"\"shared_buffer\"")
        raise ToolError("config file: memory.mem_type \"shared_buffer\" (multi-tensor shared "
                        "I/O buffers) is not supported by the qnnemu tools; they pass inputs "
                        "and outputs as client buffers")


def load_backend_config(path: str | None) -> BackendConfig:
    """Reads ``--config_file``: the SDK's outer ``{"backend_extensions": {"shared_library_path",
    "config_file_path"}}`` form (the shared library is not loaded: qnnemu maps the options
    itself) or directly the HTP backend config. Unknown keys are refused; keys the emulator
    has no model for are accepted with a warning naming them."""
    cfg = BackendConfig(path=path)
    if path is None:
        return cfg
    data = read_json(path, "--config_file")
    _expect(data, dict, "top level")
    context_configs = data.get("context_configs") if "backend_extensions" in data else None
    data = _inner_config(data, path)
    if context_configs is not None:
        _context_configs_options(cfg, context_configs)
    cfg.raw = data
    unknown = set(data) - {"graphs", "devices", "context", "groupContext", "memory"}
    if unknown:
        raise ToolError(f"config file: unknown keys {sorted(unknown)} (expected graphs, devices, "
                        f"context, groupContext, memory)")
    _graph_options(cfg, data)
    _device_options(cfg, data)
    _context_options(cfg, data)
    _refuse_unmodelled(data)
    return cfg
