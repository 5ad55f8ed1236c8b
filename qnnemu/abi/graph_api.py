"""QnnGraph.h entries: graphCreate / Retrieve / SetConfig / GetProperty / AddNode / Finalize /
Execute, and the not-implemented graphCreateSubgraph / ExecuteAsync / execution environments;
with the QnnGraph_Config_t options and the HTP graph custom configs (HTP/QnnHtpGraph.h; their
rules: qnnemu/htp/settings.py).  graphValidate is validate_api.py; the graph: qnnemu/core/graph.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import faults
from ..core.context import Context
from ..core.device import DeviceModel
from ..core.graph import Graph
from ..core.handles import HANDLES
from ..core.tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES
from ..headers import Q
from ..htp import settings as htp_settings, switching as htp_switching
from ..location import Location
from ..rules import fail
from ..spec import dtypes
from . import fast_execute, marshal, mem_api, profile_api, signal_api
from .library import configs as _configs, entry, ffi, get as _get, no_properties, not_supported
from .marshal import c_str, read_htp_custom as _htp_custom, read_op_config, require


def _graph_configs(config, func: str, *, context=None, graph=None) -> dict:
    """QnnGraph_Config_t options -> the graph's configs dict (layout: qnnemu/htp/settings.py).
    HTP custom configs are checked against the documentation's table and the context's device; with
    ``graph`` (graphSetConfig) also when each option may still change."""
    ctx: Any = context if context is not None else getattr(graph, "context", None)
    model = ctx.device.model if getattr(ctx, "device", None) is not None else DeviceModel()
    out: dict = {}
    prefix = "QNN_HTP_GRAPH_CONFIG_OPTION_"
    for i, c in enumerate(_configs(config, "QnnGraph_Config_t", Location(func).field("config"))):
        opt = int(c.option)
        if opt == Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY:
            out["priority"] = htp_settings.check_priority(int(c.priority), func, f"config[{i}].priority",
                                                          Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                                                          "QNNEMU-graph-priority-value")
            if graph is not None and int(c.priority) != int(graph.configs.get("priority", Q.QNN_PRIORITY_DEFAULT)):
                htp_settings.check_priority_change(ctx, func, f"config[{i}].priority")
        elif opt == Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM:
            name, value = _htp_custom(c, i, func, "QnnHtpGraph_CustomConfig_t", prefix,
                                      Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-graph-config-option",
                                      tolerate_undefined=True)
            short, path = name[len(prefix):], f"config[{i}].customConfig"
            if short == "FINALIZE_CONFIG":
                fc = ffi.cast("QnnHtpGraph_CustomConfig_t *", c.customConfig).finalizeConfig
                value["key_text"] = c_str(fc.key) if fc.key != ffi.NULL else None
                value["value_plain"] = marshal.read_scalar(fc.value)[1] if fc.key != ffi.NULL else None
            htp_settings.check_graph_when(short, value.get("optimizationOption") if short == "OPTIMIZATION" else value,
                                          graph, func, path)
            htp_settings.check_graph_option(short, value, model=model, context=ctx, graph=graph, func=func,
                                            path=path, pending=out)
            if short in htp_settings.GRAPH_OPTIONS:   # ignored options (warned) are not recorded
                out.setdefault("htp", {})[name] = value
        elif opt == Q.QNN_GRAPH_CONFIG_OPTION_ENABLE_BINARY_SECTION_WEIGHTS_UPDATES:
            # Recorded: binary section updates are always possible in the emulator.
            out["enableBinarySectionWeightsUpdates"] = bool(c.enableBinarySectionWeightsUpdates)
        elif opt in (Q.QNN_GRAPH_CONFIG_OPTION_PROFILE_HANDLE, Q.QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_STATE,
                     Q.QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_NUM_EXECUTIONS):
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-graph-config-profiling",
                 "per-graph profile handles (graph profiling configs) are "
                 "not implemented; pass the profile handle to graphFinalize/graphExecute",
                 code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
        else:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-graph-config-option",
                 f"option {opt} is not supported", code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
    return out


def _merge_graph_configs(configs: dict, new: dict) -> None:
    """graphSetConfig: per-option and per-optimization-type updates, the rest replaced."""
    configs.setdefault("htp", {}).update(new.pop("htp", {}))
    for key in ("htp_optimization", "htp_finalize_config"):
        if key in new:
            configs.setdefault(key, {}).update(new.pop(key))
    configs.update(new)


@entry
def graphCreate(contextHandle, graphName, config, graphHandle):
    ctx = _get(contextHandle, Context, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "contextHandle")
    require(graphHandle, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphCreate", "graphHandle")
    configs = _graph_configs(config, "graphCreate", context=ctx)
    # A graph without its own priority takes its context's (QNN HTP backend documentation, "Graph
    # Priority").
    if "priority" not in configs and "priority" in ctx.configs:
        configs["priority"] = int(ctx.configs["priority"])
    handle = ctx.create_graph(c_str(graphName) if graphName != ffi.NULL else "")
    HANDLES.lookup(handle).configs = configs
    graphHandle[0] = ffi.cast("Qnn_GraphHandle_t", handle)


@entry
def graphRetrieve(contextHandle, graphName, graphHandle):
    ctx = _get(contextHandle, Context, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "contextHandle")
    require(graphHandle, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphRetrieve", "graphHandle")
    handle = ctx.retrieve_graph(c_str(graphName) if graphName != ffi.NULL else "")
    graphHandle[0] = ffi.cast("Qnn_GraphHandle_t", handle)


@entry
def graphSetConfig(graphHandle, config):
    """Each option may change in its window (qnnemu/htp/settings.py): before finalize, until the
    first execute (NUM_HVX_THREADS), or any time (priority, the SLC allocator forced off/on)."""
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    new = _graph_configs(config, "graphSetConfig", graph=g)
    _merge_graph_configs(g.configs, new)


@entry
def graphGetProperty(graphHandle, properties):
    _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    no_properties(properties, "QnnGraph_Property_t", Location("graphGetProperty"),
                  arg_code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                  rule="QNNEMU-graphGetProperty-option",
                  why="the HTP backend defines no graph properties the emulator answers yet")


@entry
def graphAddNode(graphHandle, opConfig):
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    g.add_node(read_op_config(opConfig, tensor_data="none"))   # its tensors were created (with their data)


@entry
def graphFinalize(graphHandle, profileHandle, signalHandle):
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    call = profile_api.start(profileHandle, "graphFinalize", Q.QNN_GRAPH_ERROR_SET_PROFILE)
    # The signal is checked before compiling (compiling the plan is one uninterruptible step).
    with signal_api.use_signal(signalHandle, "graphFinalize", Q.QNN_GRAPH_ERROR_INVALID_HANDLE,
                               Q.QNN_GRAPH_ERROR_ABORTED, Q.QNN_GRAPH_ERROR_TIMED_OUT,
                               Q.QNN_GRAPH_ERROR_SIGNAL_IN_USE) as sig:
        if sig is not None:
            sig.check()
        with profile_api.recording(call, g) as rec:   # the graph: its schematic (optrace)
            g.finalize()
    profile_api.commit(rec, "finalize")


def _io_buffer(t, func: str, path: str):
    """(tensor id, name getter, version struct, version) of an execute argument, RAW memory checked."""
    version = int(t.version)
    if version not in (1, 2):
        fail(Location(func).path(f"{path}.version"), "QNNEMU-graphExecute-tensor-version",
             f"{version} is not 1 or 2", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
    v = t.v1 if version == 1 else t.v2
    if int(v.memType) not in (Q.QNN_TENSORMEMTYPE_RAW, Q.QNN_TENSORMEMTYPE_MEMHANDLE):
        fail(Location(func).path(f"{path}.v{version}.memType"), "QNNEMU-graphExecute-memtype",
             f"{int(v.memType)}: only QNN_TENSORMEMTYPE_RAW and "
             f"QNN_TENSORMEMTYPE_MEMHANDLE are supported", code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
    return int(v.id), lambda: c_str(v.name), v, version


@entry
def graphExecute(graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle, signalHandle):
    job = _execute_job("graphExecute", graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle)
    run_execute_job(job, signalHandle)
    # The next executes of a graph compiled entirely to C may skip this entry (C fast path).
    # (an armed fault must see every call; a switching context's graph must load and lock first)
    if not faults.blocks_fast_path() and not htp_switching.runs_in_python(job.graph):
        fast_execute.offer(int(ffi.cast("uintptr_t", graphHandle)), job.graph)


@dataclass
class ExecuteJob:
    """One execute decoded at the API call: the graph, the fed arrays (views of the client's
    buffers), the output targets, the batch multiple and the profiling record."""
    func: str
    graph: Graph
    feeds: dict
    targets: list
    batch: int
    prof_call: Any


def _execute_job(func, graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle) -> ExecuteJob:
    """graphExecute's / graphExecuteAsync's checks and argument decoding (before anything runs)."""
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    prof_call = profile_api.start(profileHandle, func, Q.QNN_GRAPH_ERROR_SET_PROFILE)
    if not g.finalized:
        fail(Location(func), "QNNEMU-graphExecute-not-finalized",
             f"graph '{g.name}' is not finalized (call graphFinalize first)",
             code=Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED)
    htp_settings.check_execute_allowed(g, func)   # PREPARE_ONLY contexts prepare, never execute
    n_in, n_out = int(numInputs), int(numOutputs)
    if (n_in and inputs == ffi.NULL) or (n_out and outputs == ffi.NULL):
        fail(Location(func), "QNNEMU-graphExecute-null",
             "inputs/outputs is NULL with a non-zero count", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    # Variable batch (QNN HTP backend documentation, "QNN HTP Variable Batch"): every argument's
    # dimensions are the prepared [b, ...] or [n*b, ...] with one n for all inputs and outputs
    # (Graph.batch_multiple); an argument with a NULL dimensions pointer counts as the prepared
    # dimensions (n = 1).
    batch, batch_from = 1, None

    def batch_of(t, v, dims_path):
        nonlocal batch, batch_from
        n = 1
        if v.dimensions != ffi.NULL:
            rank = int(v.rank)
            n = g.batch_multiple(t, rank, ffi.unpack(v.dimensions, rank) if rank == len(t.dims) else None, func,
                                 dims_path)
        if batch_from is None:
            batch, batch_from = n, (dims_path, t.name)
        elif n != batch:
            fail(Location(func).path(f"{dims_path}"), "QNNEMU-graphExecute-batch-mismatch",
                 f"tensor '{t.name}' is executed with batch multiple {n} "
                 f"(dimensions {list(t.batched(n).dims)}, prepared {list(t.dims)}) but tensor "
                 f"'{batch_from[1]}' ({batch_from[0]}) with {batch}: all inputs and outputs must have "
                 f"the same batch multiple", code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        return t.batched(n)

    feeds: dict[int, np.ndarray] = {}
    for i in range(n_in):
        path = f"inputs[{i}]"
        tid, name_of, v, ver = _io_buffer(inputs[i], func, path)
        t = g.match_io(tid, name_of, func, path, APP_INPUT_TYPES)
        tb = batch_of(t, v, f"{path}.v{ver}.dimensions")   # t itself at batch 1
        if int(v.memType) == Q.QNN_TENSORMEMTYPE_MEMHANDLE:  # registered memory, read in place
            feeds[t.id] = mem_api.tensor_view(g, tb, v.memHandle, f"{path}.v{ver}.memHandle", writable=False)
            continue
        if v.clientBuf.data == ffi.NULL or int(v.clientBuf.dataSize) != tb.nbytes:
            fail(Location(func).path(f"{path}.v{ver}.clientBuf"), "QNNEMU-graphExecute-buffer-size",
                 f"tensor '{t.name}' needs {tb.nbytes} bytes "
                 f"({list(tb.dims)} x {dtypes.name(t.dtype)}), got dataSize {int(v.clientBuf.dataSize)}"
                 f"{' and a NULL data pointer' if v.clientBuf.data == ffi.NULL else ''}",
                 code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        feeds[t.id] = np.frombuffer(ffi.buffer(v.clientBuf.data, tb.nbytes),
                                    dtype=dtypes.numpy_dtype(t.dtype)).reshape(tb.dims)
    targets = []
    for i in range(n_out):
        path = f"outputs[{i}]"
        tid, name_of, v, ver = _io_buffer(outputs[i], func, path)
        t = g.match_io(tid, name_of, func, path, APP_OUTPUT_TYPES)
        tb = batch_of(t, v, f"{path}.v{ver}.dimensions")
        if int(v.memType) == Q.QNN_TENSORMEMTYPE_MEMHANDLE:  # registered memory, written in place
            targets.append((t, mem_api.tensor_view(g, tb, v.memHandle, f"{path}.v{ver}.memHandle", writable=True),
                            tb.nbytes))
            continue
        if v.clientBuf.data == ffi.NULL or int(v.clientBuf.dataSize) != tb.nbytes:
            fail(Location(func).path(f"{path}.v{ver}.clientBuf"), "QNNEMU-graphExecute-buffer-size",
                 f"tensor '{t.name}' needs {tb.nbytes} bytes "
                 f"({list(tb.dims)} x {dtypes.name(t.dtype)}), got dataSize {int(v.clientBuf.dataSize)}",
                 code=Q.QNN_GRAPH_ERROR_INVALID_TENSOR)
        targets.append((t, v.clientBuf.data, tb.nbytes))
    return ExecuteJob(func, g, feeds, targets, batch, prof_call)


def run_execute_job(job: ExecuteJob, signalHandle) -> None:
    """Runs a decoded execute: signal, profiling, graph switching, the plan, the outputs."""
    func, g, feeds, targets, batch, prof_call = job.func, job.graph, job.feeds, job.targets, job.batch, job.prof_call
    with (signal_api.use_signal(signalHandle, func, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, Q.QNN_GRAPH_ERROR_ABORTED,
                                Q.QNN_GRAPH_ERROR_TIMED_OUT, Q.QNN_GRAPH_ERROR_SIGNAL_IN_USE) as sig,
          profile_api.recording(prof_call, g) as rec,
          htp_switching.resident(g, rec)):   # graph switching: loads the graph first if needed
        observer = rec and rec.on_step
        if sig is not None:
            sig.check()  # an abort/timeout between plan steps; the outputs are then not written

            def observer(step, seconds, _profile=observer, _check=sig.check):
                if _profile is not None:
                    _profile(step, seconds)
                _check()
        results = g.execute(feeds, [t.id for t, _, _ in targets], observer=observer, batch=batch)
    for t, dst, nbytes in targets:
        if isinstance(dst, np.ndarray):
            np.copyto(dst, results[t.id])
            continue
        arr = np.ascontiguousarray(results[t.id])
        ffi.memmove(dst, ffi.from_buffer(arr), nbytes)
    profile_api.commit(rec, "execute")


not_supported("graphCreateSubgraph", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "subgraphs are not emulated yet")
# The vendor's library answers graphCreateSubgraph without looking at the graph handle, but
# checks it in the execution-environment entries (INVALID_HANDLE, NULL included).
not_supported("graphPrepareExecutionEnvironment", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
              "execution environments are not implemented yet",
              check=lambda graph, *_: _get(graph, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle"))
not_supported("graphReleaseExecutionEnvironment", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
              "execution environments are not implemented yet",
              check=lambda graph, *_: _get(graph, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle"))
