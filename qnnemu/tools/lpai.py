"""The LPAI backend in the qnnemu tools (docs/lpai.md "Tools"): what the LPAI backend
extensions of the SDK's tools do, for libQnnLpaiEmu.so (QNN LPAI Memory Management,
"Recommended Workflow", "TCM Memory Support in LPAIBackendExtensions (ADSP Direct Mode)").

- ``qnnemu-context-binary-generator --backend lpai``: every graph gets the LPAI PREPARE graph
  config, so graphFinalize prepares it offline (the x86 target) without scratch or persistent
  buffers, and the context serializes;
- ``qnnemu-net-run --backend lpai``: the graphs (built from ``--model`` or retrieved from
  ``--retrieve_context``) follow the documents' workflow -- the scratch and persistent sizes
  queried, aligned DDR buffers set with graphSetConfig, graphFinalize -- and execute with
  aligned I/O buffers allocated once per graph;
- ``--direct_mode adsp``: the backend is created with HW_INFO target ADSP (ADSP direct mode);
- ``--config_file eaiParams_direct.json``: the SDK's outer ``backend_extensions`` form naming
  the LPAI config (``eaiParams_direct.conf``), or that config itself.  Its
  ``lpai_graph.execute.mem_type`` ("ddr", the default, or "tcm") is where the I/O tensor
  buffers and the model binary are allocated (qnnemu/lpai/tcm.py: the TCM pool, its limits and
  messages); with "tcm" the binary is loaded from its TCM buffer with the context config
  MODEL_BUFFER_MEM_TYPE = TCM.  Other keys are reported and ignored.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import QnnError
from ..headers import Q, lpai_library_path
from ..lpai import tcm
from .config import BackendConfig, _expect, read_json
from .reporting import ToolError, plural

log = logging.getLogger("qnnemu.tools.lpai")

NAMES = {"lpai", "lpai-emu", "libQnnLpaiEmu.so"}


def resolve(value: str | None) -> str | None:
    """``--backend lpai`` (or ``libQnnLpaiEmu.so``): our LPAI library; None for other values."""
    return lpai_library_path() if value in NAMES else None


def provides_lpai(path: str) -> bool:
    """The library at ``path`` has a provider with backend id QNN_BACKEND_ID_LPAI."""
    from ..client.cabi import ffi
    try:
        lib = ffi.dlopen(path)
        providers = ffi.new("const QnnInterface_t ***")
        count = ffi.new("uint32_t *")
        if lib.QnnInterface_getProviders(providers, count) != Q.QNN_SUCCESS:
            return False
    except (OSError, AttributeError):
        return False
    return any(int(providers[0][i].backendId) == Q.QNN_BACKEND_ID_LPAI for i in range(count[0]))


# ------------------------------------------------------------------------------ configs
def _custom(kind: str, custom_type: str, option: int, payload, keep: list):
    """A ``Qnn<kind>_Config_t`` whose CUSTOM config is an LPAI ``custom_type`` {option, payload}."""
    from ..client import GraphConfig
    from ..client.cabi import ffi
    custom = ffi.new(f"{custom_type} *")
    custom.option, custom.config = option, payload
    config = ffi.new(f"Qnn{kind}_Config_t *")
    config.option = getattr(Q, f"QNN_{kind.upper()}_CONFIG_OPTION_CUSTOM")
    config.customConfig = custom
    return GraphConfig(config, [custom, payload, *keep])


def prepare_config():
    """The LPAI PREPARE graph config (QNN_LPAI_GRAPH_SET_CFG_PREPARE): offline prepare."""
    from ..client.cabi import ffi
    return _custom("Graph", "QnnLpaiGraph_CustomConfig_t", Q.QNN_LPAI_GRAPH_SET_CFG_PREPARE_DEFAULT,
                   ffi.new("uint8_t *", 1), [])


def hw_info_config(target: int):
    """The backend's HW_INFO config (ADSP direct mode: target ADSP)."""
    from ..client.cabi import ffi
    info = ffi.new("QnnLpaiBackend_CustomConfigHwInfo_t *")
    info.lpaiTarget, info.hwVersion = target, Q.QNN_LPAI_BACKEND_HW_VERSION_DEFAULT
    return _custom("Backend", "QnnLpaiBackend_CustomConfig_t", Q.QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO, info, [])


def model_buffer_config(mem_type: int):
    """The context config MODEL_BUFFER_MEM_TYPE (where the binary was placed)."""
    from ..client.cabi import ffi
    return _custom("Context", "QnnLpaiContext_CustomConfig_t", Q.QNN_LPAI_CONTEXT_SET_CFG_MODEL_BUFFER_MEM_TYPE,
                   ffi.new("QnnLpaiMem_MemType_t *", mem_type), [])


class PrepareConfig(BackendConfig):
    """The generator's config for an LPAI backend: every graph gets PREPARE."""

    def graph_configs(self, graph_name: str) -> list:
        return [prepare_config()]


@dataclass
class LpaiConfig:
    """The parsed LPAI ``--config_file``."""

    path: str | None = None
    mem_type: int = Q.QNN_LPAI_MEM_TYPE_DDR
    context_configs: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)


def load_config(path: str | None) -> LpaiConfig:
    """``--config_file`` for the LPAI backend: ``{"backend_extensions": {"shared_library_path",
    "config_file_path"}, "context_configs": {...}}`` (the extension library is not loaded: qnnemu
    applies the options itself) or the LPAI config itself (``{"lpai_graph": {"execute":
    {"mem_type": "tcm"}}}``)."""
    cfg = LpaiConfig(path=path)
    if path is None:
        return cfg
    data = _expect(read_json(path, "--config_file"), dict, "top level")
    if "backend_extensions" in data:
        outer = _expect(data["backend_extensions"], dict, "backend_extensions")
        unknown = set(data) - {"backend_extensions", "context_configs", "graph_configs"}
        if unknown:
            raise ToolError(f"config file {path}: unknown top-level keys {sorted(unknown)}")
        cfg.context_configs = dict(_expect(data.get("context_configs", {}), dict, "context_configs"))
        for key, value in cfg.context_configs.items():
            if key == "is_persistent_binary":
                # libQnnLpaiEmu.so requires it anyway (REQUIRE_PERSISTENT_BINARY is 1): the tool
                # keeps the binary's buffer until the context is freed.
                _expect(value, bool, "context_configs.is_persistent_binary")
            else:
                log.warning("config file: context_configs.%s ignored: not modelled for LPAI", key)
        if "graph_configs" in data:
            log.warning("config file: graph_configs ignored: not modelled for LPAI")
        if "shared_library_path" in outer:
            log.info("config file: backend_extensions.shared_library_path %s is not loaded; "
                     "qnnemu applies the LPAI options itself", outer["shared_library_path"])
        inner = outer.get("config_file_path")
        if not isinstance(inner, str):
            raise ToolError(f"config file {path}: backend_extensions.config_file_path (the LPAI config) is missing")
        inner_path = Path(inner)
        if not inner_path.is_absolute() and not inner_path.exists():
            inner_path = Path(path).resolve().parent / inner
        data = _expect(read_json(str(inner_path), f"config file {path}: config_file_path"), dict,
                       f"{inner_path}: top level")
    cfg.raw = data
    for key in data:
        if key != "lpai_graph":
            log.warning("config file: %s ignored: only lpai_graph.execute.mem_type is modelled", key)
    graph = _expect(data.get("lpai_graph", {}), dict, "lpai_graph")
    for key in graph:
        if key != "execute":
            log.warning("config file: lpai_graph.%s ignored: only lpai_graph.execute.mem_type is modelled", key)
    execute = _expect(graph.get("execute", {}), dict, "lpai_graph.execute")
    for key, value in execute.items():
        if key == "mem_type":
            cfg.mem_type = tcm.parse_mem_type(value, log)
        else:
            log.warning("config file: lpai_graph.execute.%s ignored: only mem_type is modelled", key)
    return cfg


# ------------------------------------------------------------------------------ memory
def _graph_property(graph, option: int) -> int:
    from ..client.cabi import ffi
    value = ffi.new("uint32_t *")
    cp = ffi.new("QnnLpaiGraph_CustomProperty_t *")
    cp.option, cp.property = option, value
    prop = ffi.new("QnnGraph_Property_t *")
    prop.option, prop.customProperty = Q.QNN_GRAPH_PROPERTY_OPTION_CUSTOM, cp
    props = ffi.new("QnnGraph_Property_t *[2]")
    props[0] = prop
    graph.backend.call("graphGetProperty", graph.handle, props)
    return int(value[0])


def set_buffers(graph) -> tuple[int, int]:
    """Steps 2-5 of the documents' workflow for ``graph`` (a qnnemu.client Graph): the scratch and
    persistent sizes queried, aligned DDR buffers (kept on the graph) set with graphSetConfig.
    Returns the sizes; graphFinalize comes next."""
    from ..client.cabi import ffi
    sizes = (_graph_property(graph, Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE),
             _graph_property(graph, Q.QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE))
    keep: list[Any] = []
    configs = []
    for option, size in zip((Q.QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM, Q.QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM), sizes):
        if not size:
            continue
        buf = tcm._aligned(size)   # scratch and persistent memory: always DDR
        mem = ffi.new("QnnLpaiGraph_Mem_t *")
        mem.memType, mem.size, mem.addr = Q.QNN_LPAI_MEM_TYPE_DDR, size, ffi.cast("void *", buf.ctypes.data)
        keep.append(buf)
        configs.append(_custom("Graph", "QnnLpaiGraph_CustomConfig_t", option, mem, []))
    arr = ffi.new("QnnGraph_Config_t *[]", len(configs) + 1)
    for i, c in enumerate(configs):
        arr[i] = c.config
    graph.backend.call("graphSetConfig", graph.handle, arr)
    graph.lpai_buffers = (keep, configs, arr)   # valid until the context is freed
    log.info("graph %s: scratch %d bytes, persistent %d bytes (DDR)", graph.name, *sizes)
    return sizes


class IoBuffers:
    """The I/O tensor buffers of one graph, allocated once by the extensions' allocator."""

    def __init__(self, graph, allocator: tcm.Allocator):
        self.graph = graph
        self.inputs = [allocator.allocate(_nbytes(t), f"input '{t.name}'") for t in graph.inputs]
        self.outputs = [allocator.allocate(_nbytes(t), f"output '{t.name}'") for t in graph.outputs]

    def execute(self, feeds: dict[str, np.ndarray], profile=None) -> dict[str, np.ndarray]:
        """graphExecute with the feeds copied into the input buffers; the outputs (copies)."""
        from ..client.cabi import _set_buffer, ffi
        g = self.graph
        keep: list[Any] = []
        cin = ffi.new("Qnn_Tensor_t[]", max(len(g.inputs), 1))
        for i, (t, buf) in enumerate(zip(g.inputs, self.inputs)):
            data = np.ascontiguousarray(feeds[t.name], dtype=t.numpy_dtype)
            if data.shape != t.shape:
                raise ToolError(f"input {t.name!r}: shape {data.shape} != {t.shape}")
            buf[:] = data.reshape(-1).view(np.uint8)
            cin[i] = t.struct[0]
            _set_buffer(cin[i], ffi.cast("void *", buf.ctypes.data), buf.nbytes, keep)
        cout = ffi.new("Qnn_Tensor_t[]", max(len(g.outputs), 1))
        for i, (t, buf) in enumerate(zip(g.outputs, self.outputs)):
            cout[i] = t.struct[0]
            _set_buffer(cout[i], ffi.cast("void *", buf.ctypes.data), buf.nbytes, keep)
        g.backend.call("graphExecute", g.handle, cin, len(g.inputs), cout, len(g.outputs),
                       profile.handle if profile is not None else ffi.NULL, ffi.NULL)
        return {t.name: buf.view(t.numpy_dtype).reshape(t.shape).copy() for t, buf in zip(g.outputs, self.outputs)}


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.numpy_dtype).itemsize


# ------------------------------------------------------------------------------ net-run
@dataclass(frozen=True)
class RunHelpers:
    """What qnnemu-net-run and the generator share with the LPAI run, passed in by net-run (this
    module is imported by both tools and imports neither)."""

    prog: str
    profile_file: str
    skip_graph: str
    parse_input_list: Callable[..., list]
    input_lists: Callable[..., list]
    profile_log: Callable[..., Any]
    ran_text: Callable[..., str]
    load_graph_description: Callable[..., list]
    build_graphs: Callable[..., list]


def net_run(args, backend_path: str, nr: RunHelpers) -> int:
    """qnnemu-net-run on an LPAI backend (see the module docstring)."""
    from ..client import Backend
    from .raw_io import from_tensor, output_file_name, read_raw
    cfg = load_config(args.config_file)
    direct = args.direct_mode == "adsp"
    try:
        allocator = tcm.Allocator(cfg.mem_type, direct, log)
    except QnnError as e:
        raise ToolError(str(e)) from None
    for path in args.input_list.split(","):
        if path.strip() != nr.skip_graph and not os.path.isfile(path.strip()):
            raise ToolError(f"--input_list {path.strip()}: no such file")
    os.makedirs(args.output_dir, exist_ok=True)
    backend_configs = [hw_info_config(Q.QNN_LPAI_BACKEND_TARGET_ADSP)] if direct else []
    with Backend(backend_path, log_level=args.log_level, backend_configs=backend_configs) as be:
        if args.profiling_option == "optrace":
            raise ToolError("--profiling_option optrace: the LPAI backend has no optrace")
        profiler = nr.profile_log(be, args.profiling_level, backend_path)
        try:
            graphs = _load_graphs(args, be, cfg, allocator, profiler, backend_path, nr)
            io = [IoBuffers(g, allocator) for g in graphs]
        except QnnError as e:
            raise ToolError(f"initialization failed: {e}") from None
        if allocator.pool is not None:
            log.info("TCM: %s, %d of %d bytes (I/O tensor buffers and the model binary)",
                     plural(allocator.pool.allocations, "allocation"), allocator.pool.used, allocator.pool.max_bytes)
        lists = nr.input_lists(args, graphs)
        ran = []
        for graph, buffers, lst in zip(graphs, io, lists):
            if not lst:
                continue
            inferences = nr.parse_input_list(lst, graph)
            out_dir = (args.output_dir if len(graphs) == 1 else
                       os.path.join(args.output_dir, output_file_name(graph.name)[:-4]))
            native = {n for n in (args.native_input_tensor_names or "").split(",") if n}
            by_name = {t.name: t for t in graph.inputs}
            feeds = [{name: read_raw(path, by_name[name], args.use_native_input_files or name in native)
                      for name, path in files.items()} for files in inferences]
            limit = args.num_inferences if args.num_inferences is not None else len(feeds)
            start, count = time.perf_counter(), 0
            while (count < limit if args.duration is None
                   else not (count and time.perf_counter() - start >= args.duration)):
                outputs = buffers.execute(feeds[count % len(feeds)], profiler.profile)
                profiler.record("graphExecute", graph=graph.name, inference=count)
                if args.keep_num_outputs is None or count < args.keep_num_outputs:
                    result_dir = os.path.join(out_dir, f"Result_{count}")
                    os.makedirs(result_dir, exist_ok=True)
                    for t in graph.outputs:
                        data = outputs[t.name] if args.use_native_output_files else from_tensor(outputs[t.name], t)
                        np.ascontiguousarray(data).tofile(os.path.join(result_dir, output_file_name(t.name)))
                count += 1
            ran.append(nr.ran_text(graph, count, args.keep_num_outputs, out_dir))
        profiler.write(args.output_dir)
    summary = "; ".join(ran)
    if profiler.profile is not None:
        summary += f"; profiling events in {os.path.normpath(os.path.join(args.output_dir, nr.profile_file))}"
    print(f"{nr.prog}: {summary}")
    return 0


def _load_graphs(args, be, cfg: LpaiConfig, allocator: tcm.Allocator, profiler, backend_path: str,
                 nr: RunHelpers) -> list:
    """The graphs, finalized with their scratch and persistent buffers."""
    if args.retrieve_context:
        from ..system_client import SystemLibrary
        from .libraries import resolve_system_library
        try:
            blob = Path(args.retrieve_context).read_bytes()
        except OSError as e:
            raise ToolError(f"--retrieve_context {args.retrieve_context}: {e.strerror or e}") from None
        info = SystemLibrary(resolve_system_library(args.system_library, backend_path),
                             log_level=args.log_level).binary_info(blob)
        if not info["graphs"]:
            raise ToolError(f"--retrieve_context {args.retrieve_context}: the binary has no graphs")
        for g in info["graphs"]:
            if "lpai_memory" in g:
                log.info("graph %s in the binary: %s", g["name"],
                         ", ".join(f"{k} {v}" for k, v in g["lpai_memory"].items()))
        # The model binary in the configured memory (TCM: from the pool); it stays valid until
        # the context is freed (REQUIRE_PERSISTENT_BINARY).
        model = allocator.allocate(len(blob), "model binary")
        model[:] = np.frombuffer(blob, np.uint8)
        configs = [model_buffer_config(cfg.mem_type)] if cfg.mem_type == Q.QNN_LPAI_MEM_TYPE_TCM else []
        ctx = be.context_from_binary(model, configs, profile=profiler.profile)
        profiler.record("contextCreateFromBinary")
        graphs = [ctx.retrieve_graph(g["name"], g["inputs"], g["outputs"]) for g in info["graphs"]]
    else:
        specs = nr.load_graph_description(args.model)
        graphs = nr.build_graphs(be.context(), specs, None)
    for g in graphs:
        set_buffers(g)
        g.finalize(profile=profiler.profile)
        profiler.record("graphFinalize", graph=g.name)
    return graphs
