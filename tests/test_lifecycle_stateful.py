"""Handle lifecycle of the QNN C ABI as a hypothesis state machine (raw calls, tests/abi.py).

The model tracks which log, backend, device, context and graph handles are live and which were
freed, plus each graph's tensors, nodes and finalized state.  Rules create and free objects
(double frees included), free contexts that own graphs (the graphs' handles die with them),
free backends with live contexts (the contexts die), retrieve graphs by name, create tensors
with duplicate names, add nodes to finalized graphs, execute unfinalized graphs, and call every
handle-taking entry with an invalid handle: NULL, garbage, freed, or a live handle of the wrong
kind.  Every call's exact error code is asserted.

Invariants: no call crashes the process (a crash would end the test run); an invalid handle
never yields QNN_SUCCESS; every live graph is still found by graphRetrieve under its name.

A second machine, ``BinaryLifecycle`` (QNN HTP backend documentation, "Context Binary Management",
QnnSignal.h), does the same for context binaries and signals: contextGetBinary of finalized (and of
loaded) contexts, contextCreateFromBinaryWithSignal of intact and corrupted binaries with live,
freed, wrong-kind and garbage signals, contextValidateBinary, graphRetrieve + graphExecute of loaded
graphs (bit-identical to the originals), contextFree / backendFree, signalCreate /
signalSetConfig / signalTrigger / signalFree with valid and invalid configs, and every freed
handle used again.  Its invariant: the core's handle table holds exactly the contexts, graphs and
signals the model says are live (nothing leaks, nothing is freed early).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import abi
import numpy as np
import pytest
import strategies as S
from hypothesis import event, note, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from qnnemu.core import binary as core_binary
from qnnemu.core.context import Context as CoreContext
from qnnemu.core.graph import Graph as CoreGraph
from qnnemu.core.handles import HANDLES
from qnnemu.core.signal import Signal as CoreSignal
from qnnemu.headers import Q, constants

pytestmark = pytest.mark.usefixtures("qnn_abi")

KINDS = ("log", "backend", "device", "context", "graph")
RECORDER = abi.LogRecorder()  # one app callback shared by every logger the machine creates
F32 = Q.QNN_DATATYPE_FLOAT_32


def code_name(code: int) -> str:
    if code == 0:
        return "0 (QNN_SUCCESS)"
    names = sorted(k for k, v in constants().items() if v == code and "_ERROR_" in k
                   and not k.endswith(("MIN_ERROR", "MAX_ERROR")))
    return f"{code} ({' / '.join(names[:3]) or 'unnamed'})"


def expect(got: int, want: int, what: str) -> None:
    assert got == want, f"{what}: expected {code_name(want)}, got {code_name(got)}"


# ----------------------------------------------------------------------------------- model
@dataclass(eq=False)
class TensorM:
    name: str
    type: int
    dims: tuple[int, ...]
    struct: abi.Struct


@dataclass(eq=False)
class GraphM:
    h: int
    ctx: ContextM
    name: str
    finalized: bool = False
    tensors: dict[str, TensorM] = field(default_factory=dict)
    relus: list[tuple[str, str]] = field(default_factory=list)  # (input name, output name)


@dataclass(eq=False)
class ContextM:
    h: int
    backend: BackendM
    device: DeviceM | None
    graphs: dict[str, GraphM] = field(default_factory=dict)
    tensor_names: set[str] = field(default_factory=set)  # context tensors


@dataclass(eq=False)
class BackendM:
    h: int
    contexts: list[ContextM] = field(default_factory=list)


@dataclass(eq=False)
class DeviceM:
    h: int


@dataclass(eq=False)
class LogM:
    h: int


def _props(ctype: str, keep: list):
    return abi.null_terminated(ctype, [], keep)  # an empty (but non-NULL) property list


def _kept(struct: abi.Struct, keep: list) -> abi.Struct:
    """Keeps ``struct`` (and the buffers it points to) alive until the call returns."""
    keep.append(struct)
    return struct


def _valid_op(keep: list) -> abi.Struct:
    x = abi.tensor("bad_handle_x", (1,), tensor_id=1)
    y = abi.tensor("bad_handle_y", (1,), type_=Q.QNN_TENSOR_TYPE_APP_READ, tensor_id=2)
    op = abi.op_config("bad_handle_node", "Relu", [x], [y])
    keep.append(op)
    return op


# Every handle-taking entry: (function, parameter, expected handle kind, code for an invalid
# handle, NULL counts as invalid, call(handle value, machine, keep) -> code).
V = abi.vp
BAD_HANDLE_CALLS = [
    ("logSetLogLevel", "logger", "log", Q.QNN_LOG_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("logSetLogLevel", V(h), Q.QNN_LOG_LEVEL_ERROR)),
    ("logFree", "logger", "log", Q.QNN_LOG_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("logFree", V(h))),
    ("backendCreate", "logger", "log", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, False,
     lambda h, m, k: m.guarded_create("backend", "backendCreate", V(h), abi.NULL)),
    ("deviceCreate", "logger", "log", Q.QNN_DEVICE_ERROR_INVALID_HANDLE, False,
     lambda h, m, k: m.guarded_create("device", "deviceCreate", V(h), abi.NULL)),
    ("backendFree", "backend", "backend", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("backendFree", V(h))),
    ("backendSetConfig", "backend", "backend", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("backendSetConfig", V(h), abi.NULL)),
    ("backendGetSupportedOperations", "backend", "backend", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("backendGetSupportedOperations", V(h), abi.ffi.new("uint32_t *"),
                              abi.ffi.new("const QnnBackend_OperationName_t **"))),
    ("backendValidateOpConfig", "backend", "backend", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("backendValidateOpConfig", V(h), _valid_op(k))),
    ("backendGetProperty", "backendHandle", "backend", Q.QNN_BACKEND_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("backendGetProperty", V(h), _props("QnnBackend_Property_t", k))),
    ("deviceFree", "device", "device", Q.QNN_DEVICE_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("deviceFree", V(h))),
    ("deviceSetConfig", "device", "device", Q.QNN_DEVICE_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("deviceSetConfig", V(h), abi.NULL)),
    ("deviceGetInfo", "device", "device", Q.QNN_DEVICE_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("deviceGetInfo", V(h), abi.ffi.new("const QnnDevice_PlatformInfo_t **"))),
    ("contextCreate", "backend", "backend", Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: m.guarded_create("context", "contextCreate", V(h), abi.NULL, abi.NULL)),
    ("contextCreate", "device", "device", Q.QNN_DEVICE_ERROR_INVALID_HANDLE, False,
     lambda h, m, k: m.guarded_create("context", "contextCreate", V(m.any_backend()), V(h), abi.NULL)),
    ("contextFree", "context", "context", Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("contextFree", V(h), abi.NULL)),
    ("contextSetConfig", "context", "context", Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("contextSetConfig", V(h), abi.NULL)),
    ("contextGetProperty", "contextHandle", "context", Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("contextGetProperty", V(h), _props("QnnContext_Property_t", k))),
    ("graphCreate", "contextHandle", "context", Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, True,
     lambda h, m, k: m.guarded_create("graph", "graphCreate", V(h), abi.cstr("g", k), abi.NULL)),
    ("graphRetrieve", "contextHandle", "context", Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, True,
     lambda h, m, k: abi.create("graphRetrieve", V(h), abi.cstr("g", k))[0]),
    ("tensorCreateContextTensor", "context", "context", Q.QNN_TENSOR_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("tensorCreateContextTensor", V(h), _kept(abi.tensor("t", (1,)), k).ptr)),
    ("graphSetConfig", "graphHandle", "graph", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("graphSetConfig", V(h), abi.NULL)),
    ("graphGetProperty", "graphHandle", "graph", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("graphGetProperty", V(h), _props("QnnGraph_Property_t", k))),
    ("graphAddNode", "graphHandle", "graph", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("graphAddNode", V(h), _valid_op(k))),
    ("graphFinalize", "graphHandle", "graph", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("graphFinalize", V(h), abi.NULL, abi.NULL)),
    ("graphExecute", "graphHandle", "graph", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("graphExecute", V(h), abi.NULL, 0, abi.NULL, 0, abi.NULL, abi.NULL)),
    ("tensorCreateGraphTensor", "graph", "graph", Q.QNN_TENSOR_ERROR_INVALID_HANDLE, True,
     lambda h, m, k: abi.call("tensorCreateGraphTensor", V(h), _kept(abi.tensor("t", (1,)), k).ptr)),
]


class Lifecycle(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.live: dict[str, dict[int, object]] = {k: {} for k in KINDS}
        self.freed: dict[str, set[int]] = {k: set() for k in KINDS}
        self.uid = 0
        self.leaked: list[tuple[str, int]] = []  # objects a buggy invalid-handle call created

    # ---- helpers ----------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.uid += 1
        return f"{prefix}{self.uid}"

    def any_backend(self) -> int:
        return next(iter(self.live["backend"]), 0)

    def kill(self, kind: str, h: int) -> None:
        self.live[kind].pop(h, None)
        self.freed[kind].add(h)

    def kill_context(self, c: ContextM) -> None:
        for g in c.graphs.values():
            self.kill("graph", g.h)
        c.graphs.clear()
        self.kill("context", c.h)
        if c in c.backend.contexts:
            c.backend.contexts.remove(c)

    def guarded_create(self, kind: str, fn: str, *args) -> int:
        """A create call that must fail; should it succeed, the object is freed in teardown."""
        code, h = abi.create(fn, *args)
        if code == Q.QNN_SUCCESS:
            self.leaked.append((kind, h))
        return code

    def bad_handle(self, data, kind: str, null_ok: bool) -> tuple[str, int]:
        """(how, value) of a handle that is invalid where a ``kind`` handle is expected."""
        how = data.draw(S.bad_handle_kinds if not null_ok else
                        st.sampled_from([k for k in S.BAD_HANDLE_KINDS if k != "null"]), label="how")
        if how == "freed":
            pool = sorted(set().union(*self.freed.values()))
            if pool:
                return how, data.draw(st.sampled_from(pool), label="freed handle")
        elif how == "wrong_kind":
            pool = sorted(h for k, objs in self.live.items() if k != kind for h in objs)
            if pool:
                return how, data.draw(st.sampled_from(pool), label="wrong-kind handle")
        elif how == "null":
            return how, 0
        return "garbage", data.draw(S.garbage_handles, label="garbage handle")

    def pick(self, data, kind: str, label: str):
        return data.draw(st.sampled_from(list(self.live[kind].values())), label=label)

    def has(self, kind: str) -> bool:
        return bool(self.live[kind])

    # ---- a starting point: log, backend, device, context, graph 'g0' with input 'x0' -----
    @initialize(level=S.valid_log_levels, shape=S.shapes(max_rank=3, max_side=4), version=S.tensor_versions,
                with_node=st.booleans(), data=st.data())
    def start(self, level, shape, version, with_node, data):
        self.create_log(level, True)
        log = next(iter(self.live["log"].values()))
        code, b = abi.create("backendCreate", abi.vp(log.h), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "start: backendCreate")
        be = self.live["backend"][b] = BackendM(b)
        code, d = abi.create("deviceCreate", abi.vp(log.h), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "start: deviceCreate")
        dev = self.live["device"][d] = DeviceM(d)
        code, c = abi.create("contextCreate", abi.vp(b), abi.vp(d), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "start: contextCreate")
        ctx = self.live["context"][c] = ContextM(c, be, dev)
        be.contexts.append(ctx)
        code, g = abi.create("graphCreate", abi.vp(c), abi.cstr("g0"), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "start: graphCreate")
        graph = ctx.graphs["g0"] = self.live["graph"][g] = GraphM(g, ctx, "g0")
        t = abi.tensor("x0", shape, F32, Q.QNN_TENSOR_TYPE_APP_WRITE, version)
        expect(abi.call("tensorCreateGraphTensor", abi.vp(g), t.ptr), Q.QNN_SUCCESS, "start: tensorCreateGraphTensor")
        graph.tensors["x0"] = TensorM("x0", Q.QNN_TENSOR_TYPE_APP_WRITE, tuple(shape), t)
        if with_node:
            self.add_relu(data)

    # ---- log --------------------------------------------------------------------------
    @rule(level=S.valid_log_levels, with_callback=st.booleans())
    def create_log(self, level, with_callback):
        code, h = abi.create("logCreate", RECORDER.callback if with_callback else abi.NULL, level)
        expect(code, Q.QNN_SUCCESS, f"logCreate(level {level}, callback={with_callback})")
        assert h and h not in self.freed["log"], f"logCreate: returned handle 0x{h:x} must be new and non-NULL"
        self.live["log"][h] = LogM(h)

    @rule(level=S.invalid_log_levels)
    def create_log_bad_level(self, level):
        code, h = abi.create("logCreate", RECORDER.callback, level)
        if code == Q.QNN_SUCCESS:
            self.leaked.append(("log", h))
        expect(code, Q.QNN_LOG_ERROR_INVALID_ARGUMENT, f"logCreate with invalid maxLogLevel {level}")
        assert h == 0, f"logCreate with invalid level {level}: output handle must stay unwritten, got 0x{h:x}"

    @precondition(lambda self: self.has("log"))
    @rule(data=st.data(), level=st.one_of(S.valid_log_levels, S.invalid_log_levels))
    def set_log_level(self, data, level):
        log = self.pick(data, "log", "logger")
        code = abi.call("logSetLogLevel", abi.vp(log.h), level)
        valid = level in range(Q.QNN_LOG_LEVEL_ERROR, Q.QNN_LOG_LEVEL_DEBUG + 1)
        expect(code, Q.QNN_SUCCESS if valid else Q.QNN_LOG_ERROR_INVALID_ARGUMENT,
               f"logSetLogLevel(live logger, level {level})")

    @precondition(lambda self: self.has("log") or self.freed["log"])
    @rule(data=st.data())
    def free_log(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.live["log"]) | self.freed["log"])), label="logger")
        live = h in self.live["log"]
        code = abi.call("logFree", abi.vp(h))
        expect(code, Q.QNN_SUCCESS if live else Q.QNN_LOG_ERROR_INVALID_HANDLE,
               f"logFree({'live' if live else 'already freed (double free)'} logger 0x{h:x})")
        self.kill("log", h)

    # ---- backend ----------------------------------------------------------------------
    @rule(data=st.data())
    def create_backend(self, data):
        log = data.draw(st.sampled_from([None, *self.live["log"].values()]), label="logger")
        code, h = abi.create("backendCreate", abi.vp(log.h if log else 0), abi.NULL)
        expect(code, Q.QNN_SUCCESS, f"backendCreate(logger={'NULL' if log is None else 'live'})")
        assert h and h not in self.freed["backend"], "backendCreate: handle must be new and non-NULL"
        self.live["backend"][h] = BackendM(h)

    @precondition(lambda self: self.has("backend") or self.freed["backend"])
    @rule(data=st.data())
    def free_backend(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.live["backend"]) | self.freed["backend"])), label="backend")
        be = self.live["backend"].get(h)
        code = abi.call("backendFree", abi.vp(h))
        if be is None:
            expect(code, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, f"backendFree(already freed backend 0x{h:x})")
            return
        expect(code, Q.QNN_SUCCESS, f"backendFree(live backend with {len(be.contexts)} live context(s))")
        event(f"backendFree with live contexts: {bool(be.contexts)}")
        for c in list(be.contexts):  # freeing a backend frees its contexts and their graphs
            self.kill_context(c)
        self.kill("backend", h)

    # ---- device -----------------------------------------------------------------------
    @rule(data=st.data())
    def create_device(self, data):
        log = data.draw(st.sampled_from([None, *self.live["log"].values()]), label="logger")
        code, h = abi.create("deviceCreate", abi.vp(log.h if log else 0), abi.NULL)
        expect(code, Q.QNN_SUCCESS, f"deviceCreate(logger={'NULL' if log is None else 'live'})")
        assert h and h not in self.freed["device"], "deviceCreate: handle must be new and non-NULL"
        self.live["device"][h] = DeviceM(h)

    @precondition(lambda self: self.has("device") or self.freed["device"])
    @rule(data=st.data())
    def free_device(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.live["device"]) | self.freed["device"])), label="device")
        dev = self.live["device"].get(h)
        code = abi.call("deviceFree", abi.vp(h))
        if dev is None:
            expect(code, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, f"deviceFree(already freed device 0x{h:x})")
            return
        users = [c for c in self.live["context"].values() if c.device is dev]
        if users:
            expect(code, Q.QNN_DEVICE_ERROR_ASSOCIATED_TO_CONTEXT,
                   f"deviceFree(device used by {len(users)} live context(s))")
            return
        expect(code, Q.QNN_SUCCESS, "deviceFree(unused live device)")
        self.kill("device", h)

    # ---- context ----------------------------------------------------------------------
    @precondition(lambda self: self.has("backend"))
    @rule(data=st.data())
    def create_context(self, data):
        be = self.pick(data, "backend", "backend")
        dev = data.draw(st.sampled_from([None, *self.live["device"].values()]), label="device")
        code, h = abi.create("contextCreate", abi.vp(be.h), abi.vp(dev.h if dev else 0), abi.NULL)
        expect(code, Q.QNN_SUCCESS, f"contextCreate(live backend, device={'NULL' if dev is None else 'live'})")
        assert h and h not in self.freed["context"], "contextCreate: handle must be new and non-NULL"
        c = ContextM(h, be, dev)
        be.contexts.append(c)
        self.live["context"][h] = c

    @precondition(lambda self: self.has("context") or self.freed["context"])
    @rule(data=st.data())
    def free_context(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.live["context"]) | self.freed["context"])), label="context")
        c = self.live["context"].get(h)
        code = abi.call("contextFree", abi.vp(h), abi.NULL)
        if c is None:
            expect(code, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, f"contextFree(already freed context 0x{h:x})")
            return
        expect(code, Q.QNN_SUCCESS, f"contextFree(live context with {len(c.graphs)} graph(s))")
        event(f"contextFree with graphs: {bool(c.graphs)}")
        self.kill_context(c)  # its graphs' handles are invalid from now on

    # ---- graph ------------------------------------------------------------------------
    @precondition(lambda self: self.has("context"))
    @rule(data=st.data(), name=S.graph_names)
    def create_graph(self, data, name):
        c = self.pick(data, "context", "context")
        code, h = abi.create("graphCreate", abi.vp(c.h), abi.cstr(name), abi.NULL)
        if name in c.graphs:
            expect(code, Q.QNN_GRAPH_ERROR_INVALID_NAME, f"graphCreate(duplicate graph name '{name}')")
            assert h == 0, "graphCreate with a duplicate name must not write a handle"
            return
        expect(code, Q.QNN_SUCCESS, f"graphCreate(new graph '{name}')")
        assert h and h not in self.freed["graph"], "graphCreate: handle must be new and non-NULL"
        g = GraphM(h, c, name)
        c.graphs[name] = g
        self.live["graph"][h] = g

    @precondition(lambda self: self.has("context"))
    @rule(data=st.data(), name=S.graph_names)
    def retrieve_graph(self, data, name):
        c = self.pick(data, "context", "context")
        code, h = abi.create("graphRetrieve", abi.vp(c.h), abi.cstr(name))
        g = c.graphs.get(name)
        if g is None:
            expect(code, Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, f"graphRetrieve(unknown name '{name}')")
            return
        expect(code, Q.QNN_SUCCESS, f"graphRetrieve(existing graph '{name}')")
        assert h == g.h, f"graphRetrieve('{name}') returned 0x{h:x}, graphCreate gave 0x{g.h:x}"

    # ---- tensors ----------------------------------------------------------------------
    @precondition(lambda self: self.has("graph"))
    @rule(data=st.data(), name=S.tensor_names, shape=S.shapes(max_rank=3, max_side=4),
          type_=S.tensor_types, version=S.tensor_versions)
    def create_tensor(self, data, name, shape, type_, version):
        g = self.pick(data, "graph", "graph")
        arr = (data.draw(S.float32_arrays(shape), label="static data")
               if type_ == Q.QNN_TENSOR_TYPE_STATIC else None)
        t = abi.tensor(name, shape, F32, type_, version, data=arr)
        code = abi.call("tensorCreateGraphTensor", abi.vp(g.h), t.ptr)
        what = f"tensorCreateGraphTensor('{name}', {shape}, type {type_}, v{version})"
        if g.finalized:
            expect(code, Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, f"{what} on a finalized graph")
        elif name in g.tensors or name in g.ctx.tensor_names:
            expect(code, Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION, f"{what} with a duplicate name")
            event("tensorCreateGraphTensor: duplicate name")
        else:
            expect(code, Q.QNN_SUCCESS, what)
            assert t.id != 0, f"{what}: the tensor id must be written back (got 0)"
            ids = {x.struct.id for x in g.tensors.values()}
            assert t.id not in ids, f"{what}: id {t.id} reused within graph '{g.name}'"
            g.tensors[name] = TensorM(name, type_, tuple(shape), t)

    @precondition(lambda self: self.has("graph"))
    @rule(data=st.data(), dtype=S.invalid_dtypes)
    def create_tensor_bad_dtype(self, data, dtype):
        g = self.pick(data, "graph", "graph")
        name = self.fresh("bad")
        t = abi.tensor(name, (2,), dtype)  # kept alive (name, dimensions) until the call returns
        code = abi.call("tensorCreateGraphTensor", abi.vp(g.h), t.ptr)
        expect(code, Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED if g.finalized else Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
               f"tensorCreateGraphTensor(dataType {dtype}) on a {'finalized' if g.finalized else 'open'} graph")

    @precondition(lambda self: self.has("context"))
    @rule(data=st.data(), name=S.tensor_names)
    def create_context_tensor(self, data, name):
        c = self.pick(data, "context", "context")
        t = abi.tensor(name, (2, 2), F32, Q.QNN_TENSOR_TYPE_APP_WRITE)
        code = abi.call("tensorCreateContextTensor", abi.vp(c.h), t.ptr)
        if name in c.tensor_names:
            expect(code, Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION, f"tensorCreateContextTensor(duplicate '{name}')")
            return
        expect(code, Q.QNN_SUCCESS, f"tensorCreateContextTensor('{name}')")
        c.tensor_names.add(name)

    # ---- nodes, finalize, execute ---------------------------------------------------------
    @precondition(lambda self: any(any(t.type == Q.QNN_TENSOR_TYPE_APP_WRITE for t in g.tensors.values())
                                   for g in self.live["graph"].values()))
    @rule(data=st.data())
    def add_relu(self, data):
        graphs = [g for g in self.live["graph"].values()
                  if any(t.type == Q.QNN_TENSOR_TYPE_APP_WRITE for t in g.tensors.values())]
        g = data.draw(st.sampled_from(graphs), label="graph")
        x = data.draw(st.sampled_from([t for t in g.tensors.values() if t.type == Q.QNN_TENSOR_TYPE_APP_WRITE]),
                      label="input")
        out_name, node = self.fresh("relu_out"), self.fresh("relu")
        y = abi.tensor(out_name, x.dims, F32, Q.QNN_TENSOR_TYPE_APP_READ, version=2)
        op = abi.op_config(node, "Relu", [x.struct], [y])
        if g.finalized:
            code = abi.call("graphAddNode", abi.vp(g.h), op)
            expect(code, Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, f"graphAddNode('{node}') after graphFinalize")
            event("graphAddNode after finalize")
            return
        code = abi.call("tensorCreateGraphTensor", abi.vp(g.h), y.ptr)
        expect(code, Q.QNN_SUCCESS, f"tensorCreateGraphTensor(node output '{out_name}')")
        g.tensors[out_name] = TensorM(out_name, Q.QNN_TENSOR_TYPE_APP_READ, x.dims, y)
        op = abi.op_config(node, "Relu", [x.struct], [y])  # now with the id written back
        code = abi.call("graphAddNode", abi.vp(g.h), op)
        expect(code, Q.QNN_SUCCESS, f"graphAddNode(Relu '{node}': '{x.name}' -> '{out_name}')")
        g.relus.append((x.name, out_name))

    @precondition(lambda self: self.has("graph"))
    @rule(data=st.data())
    def finalize(self, data):
        g = self.pick(data, "graph", "graph")
        code = abi.call("graphFinalize", abi.vp(g.h), abi.NULL, abi.NULL)
        if g.finalized:
            expect(code, Q.QNN_SUCCESS, "graphFinalize on an already finalized graph (idempotent)")
        elif not g.relus:
            expect(code, Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize on a graph without nodes")
        else:
            expect(code, Q.QNN_SUCCESS, f"graphFinalize on a graph with {len(g.relus)} node(s)")
            g.finalized = True

    @precondition(lambda self: self.has("graph"))
    @rule(data=st.data())
    def execute(self, data):
        g = self.pick(data, "graph", "graph")
        if not g.finalized:
            code = abi.call("graphExecute", abi.vp(g.h), abi.NULL, 0, abi.NULL, 0, abi.NULL, abi.NULL)
            expect(code, Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, f"graphExecute on unfinalized graph '{g.name}'")
            event("graphExecute before finalize")
            return
        keep: list = []
        feeds, ins = {}, []
        for t in g.tensors.values():
            if t.type == Q.QNN_TENSOR_TYPE_APP_WRITE:
                arr = data.draw(S.float32_arrays(t.dims), label=f"input {t.name}")
                feeds[t.name] = arr
                io = abi.Struct(abi.ffi.new("Qnn_Tensor_t *", t.struct.ptr[0]), [t.struct])
                abi.set_buffer(io, arr)
                ins.append(io)
        outs, results = [], {}
        for _, out_name in g.relus:
            t = g.tensors[out_name]
            arr = np.full(t.dims, np.nan, np.float32)
            results[out_name] = arr
            io = abi.Struct(abi.ffi.new("Qnn_Tensor_t *", t.struct.ptr[0]), [t.struct])
            abi.set_buffer(io, arr)
            outs.append(io)
        code = abi.call("graphExecute", abi.vp(g.h), abi.tensor_array(ins, keep), len(ins),
                        abi.tensor_array(outs, keep), len(outs), abi.NULL, abi.NULL)
        expect(code, Q.QNN_SUCCESS, f"graphExecute on finalized graph '{g.name}' ({len(ins)} in, {len(outs)} out)")
        event("graphExecute of a finalized graph")
        for in_name, out_name in g.relus:
            np.testing.assert_array_equal(results[out_name], np.maximum(feeds[in_name], 0),
                                          err_msg=f"graphExecute: Relu '{in_name}' -> '{out_name}' result")

    # ---- invalid handles --------------------------------------------------------------
    @rule(data=st.data(), which=st.integers(0, len(BAD_HANDLE_CALLS) - 1))
    def call_with_bad_handle(self, data, which):
        fn, param, kind, want, null_invalid, invoke = BAD_HANDLE_CALLS[which]
        if fn == "contextCreate" and param == "device" and not self.has("backend"):
            return  # needs a live backend so that only the device is wrong
        how, h = self.bad_handle(data, kind, null_ok=not null_invalid)
        note(f"{fn}({param}=0x{h:x}, {how})")
        event(f"bad handle: {how}")
        keep: list = []
        code = invoke(h, self, keep)
        assert code != Q.QNN_SUCCESS, f"{fn}: {how} {param} 0x{h:x} yielded QNN_SUCCESS"
        expect(code, want, f"{fn} with a {how} {param} handle 0x{h:x} (a {kind} handle was expected)")

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def live_graphs_are_retrievable(self):
        for c in self.live["context"].values():
            for name, g in c.graphs.items():
                code, h = abi.create("graphRetrieve", abi.vp(c.h), abi.cstr(name))
                expect(code, Q.QNN_SUCCESS, f"invariant: graphRetrieve('{name}') of a live context")
                assert h == g.h, f"invariant: graphRetrieve('{name}') gave 0x{h:x}, expected 0x{g.h:x}"

    def teardown(self):
        for c in list(self.live["context"].values()):
            expect(abi.call("contextFree", abi.vp(c.h), abi.NULL), Q.QNN_SUCCESS, "teardown: contextFree")
            self.kill_context(c)
        for kind, fn in (("device", "deviceFree"), ("backend", "backendFree"), ("log", "logFree")):
            for h in list(self.live[kind]):
                expect(abi.call(fn, abi.vp(h)), Q.QNN_SUCCESS, f"teardown: {fn}")
                self.kill(kind, h)
        for kind, h in self.leaked:  # objects wrongly created by an invalid call (already reported)
            if kind == "context":
                abi.call("contextFree", abi.vp(h), abi.NULL)
            elif kind in ("log", "backend", "device"):
                abi.call(f"{kind}Free", abi.vp(h))
        RECORDER.clear()


TestLifecycle = Lifecycle.TestCase


# ======================================================================== context binaries and signals
# A second machine (QNN HTP backend documentation, "Context Binary Management", QnnSignal.h;
# docs/context-binary.md): a backend whose contexts hold dense graphs x[1,4] -> FullyConnected ->
# Relu -> y[1,3]; binaries are taken from finalized contexts (contextGetBinary), loaded back intact
# or corrupted, with and without signals, validated; graphs of loaded contexts are retrieved and
# executed; contexts, graphs and signals are freed and then used again.  Every call's exact code is
# asserted.
#
# Invariants: the core's handle table holds exactly the contexts, graphs and signals the model says
# are live (the library runs in this interpreter: a failed load that leaves something behind, or a
# free that forgets something, is caught at the next step); every retrieved graph of a loaded
# context computes bit-identically to the graph its binary was taken from.

X_IN = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
SHORT_US, LONG_US = 1, 100_000_000          # a timeout every load exceeds / none reaches
CORRUPTIONS = ("none", "crc", "truncated", "foreign", "future", "null")
CORRUPTION_CODE = {
    "none": Q.QNN_SUCCESS,
    "crc": Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,         # a payload byte changed, CRCs not fixed
    "truncated": Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
    "foreign": Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,     # a vendor-like header
    "future": Q.QNN_CONTEXT_ERROR_BINARY_VERSION,          # format version + 1, CRCs fixed
    "null": Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT,
}
# Intact binaries load, so that the rules using loaded contexts get to run.
corruptions = st.sampled_from(("none",) * 5 + CORRUPTIONS[1:])
CORRUPTION_RULE = {"crc": "QNNEMU-binary-crc", "truncated": "QNNEMU-binary-truncated",
                   "foreign": "QNNEMU-binary-magic", "future": "QNNEMU-binary-version-future",
                   "null": "QNNEMU-binary-null"}
BIN_RECORDER = abi.LogRecorder()


def corrupt(blob: bytes, how: str, cut: int) -> bytes | None:
    if how == "crc":
        out = bytearray(blob)
        out[core_binary.HEADER_SIZE + cut % (len(blob) - core_binary.HEADER_SIZE)] ^= 0x5A
        return bytes(out)
    if how == "truncated":
        return blob[:1 + cut % (len(blob) - 1)]
    if how == "foreign":
        return struct.pack("<IIII", 0x2, 0x3, len(blob), 0) + blob[16:]
    if how == "future":
        out = bytearray(blob)
        struct.pack_into("<I", out, 8, core_binary.FORMAT_VERSION + 1)
        return core_binary.reseal(bytes(out))
    if how == "null":
        return None
    return blob


@dataclass(eq=False)
class BGraphM:
    name: str
    h: int                              # 0 until graphRetrieve (loaded contexts)
    finalized: bool
    expected: bytes | None              # y for X_IN once finalized


@dataclass(eq=False)
class BContextM:
    h: int
    graphs: dict[str, BGraphM]
    source: bytes | None = None         # the binary a loaded context came from


@dataclass(eq=False)
class BlobM:
    data: bytes
    expected: dict[str, bytes]          # graph name -> y for X_IN of the context it was taken from


@dataclass(eq=False)
class SignalM:
    h: int
    kind: str | None                    # "abort", "timeout" or None
    timeout_us: int = 0


# (label, option, timeoutDurationUs) entries of a QnnSignal_Config_t list, and what it makes.
SIGNAL_CONFIGS = {
    "none": ([], (None, 0)),
    "abort": ([Q.QNN_SIGNAL_CONFIG_OPTION_ABORT], ("abort", 0)),
    "short timeout": ([(Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, SHORT_US)], ("timeout", SHORT_US)),
    "long timeout": ([(Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, LONG_US)], ("timeout", LONG_US)),
    "zero timeout": ([(Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, 0)], None),
    "abort and timeout": ([Q.QNN_SIGNAL_CONFIG_OPTION_ABORT, (Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, LONG_US)], None),
    "custom": ([Q.QNN_SIGNAL_CONFIG_OPTION_CUSTOM], None),
    "unknown option": ([77], None),
}


def signal_configs(label: str, keep: list):
    entries, _ = SIGNAL_CONFIGS[label]
    if label == "none":
        return abi.NULL
    ptrs = []
    for e in entries:
        c = abi.ffi.new("QnnSignal_Config_t *")
        option, timeout = e if isinstance(e, tuple) else (e, None)
        c.option = option
        if timeout is not None:
            c.timeoutDurationUs = timeout
        keep.append(c)
        ptrs.append(c)
    return abi.null_terminated("QnnSignal_Config_t", ptrs, keep)


def live_core() -> tuple[int, int, int]:
    return len(HANDLES.live(CoreContext)), len(HANDLES.live(CoreGraph)), len(HANDLES.live(CoreSignal))


class BinaryLifecycle(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.contexts: dict[int, BContextM] = {}
        self.freed_contexts: set[int] = set()
        self.freed_graphs: set[int] = set()
        self.blobs: list[BlobM] = []
        self.signals: dict[int, SignalM] = {}
        self.freed_signals: set[int] = set()
        self.uid = 0
        self.keep: list = []

    # ---- helpers ------------------------------------------------------------------------
    def fresh_seed(self) -> int:
        self.uid += 1
        return self.uid

    def run_graph(self, g: int, signal: int = 0) -> tuple[int, bytes]:
        keep: list = []
        inp = abi.tensor("x", (1, 4))
        out = abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
        y = np.full((1, 3), np.nan, np.float32)
        abi.set_buffer(inp, X_IN.copy())
        abi.set_buffer(out, y)
        code = abi.call("graphExecute", abi.vp(g), abi.tensor_array([inp], keep), 1,
                        abi.tensor_array([out], keep), 1, abi.NULL, abi.vp(signal))
        return code, y.tobytes()

    def dense_graph(self, ctx: int, name: str, rng, finalize: bool) -> BGraphM:
        code, g = abi.create("graphCreate", abi.vp(ctx), abi.cstr(name), abi.NULL)
        expect(code, Q.QNN_SUCCESS, f"graphCreate('{name}')")
        t = [abi.tensor("x", (1, 4)), abi.static_tensor("w", rng.standard_normal((3, 4)).astype(np.float32)),
             abi.static_tensor("b", rng.standard_normal(3).astype(np.float32)),
             abi.tensor("h", (1, 3), type_=Q.QNN_TENSOR_TYPE_NATIVE),
             abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)]
        for s in t:
            expect(abi.call("tensorCreateGraphTensor", abi.vp(g), s.ptr), Q.QNN_SUCCESS,
                   f"tensorCreateGraphTensor in '{name}'")
        for op in (abi.op_config("fc", "FullyConnected", t[:3], [t[3]]), abi.op_config("relu", "Relu", [t[3]], [t[4]])):
            expect(abi.call("graphAddNode", abi.vp(g), op), Q.QNN_SUCCESS, f"graphAddNode in '{name}'")
        self.keep += t
        graph = BGraphM(name, g, False, None)
        if finalize:
            self.finalize_graph(graph)
        return graph

    def finalize_graph(self, graph: BGraphM) -> None:
        expect(abi.call("graphFinalize", abi.vp(graph.h), abi.NULL, abi.NULL), Q.QNN_SUCCESS,
               f"graphFinalize('{graph.name}')")
        graph.finalized = True
        code, graph.expected = self.run_graph(graph.h)
        expect(code, Q.QNN_SUCCESS, f"graphExecute of freshly finalized graph '{graph.name}'")

    def kill_context(self, c: BContextM) -> None:
        self.contexts.pop(c.h, None)
        self.freed_contexts.add(c.h)
        self.freed_graphs.update(g.h for g in c.graphs.values() if g.h)

    def signal_arg(self, data, allow_bad: bool = True) -> tuple[str, int, SignalM | None]:
        """(how, handle, model) of a signal argument: none, a live one, or (allow_bad) a freed,
        wrong-kind or garbage handle."""
        hows = ["none", "live"] + (["freed", "wrong kind", "garbage"] if allow_bad else [])
        how = data.draw(st.sampled_from(hows), label="signal")
        if how == "live" and self.signals:
            s = data.draw(st.sampled_from(list(self.signals.values())), label="live signal")
            return how, s.h, s
        if how == "freed" and self.freed_signals:
            return how, data.draw(st.sampled_from(sorted(self.freed_signals)), label="freed signal"), None
        if how == "wrong kind" and self.contexts:
            return how, data.draw(st.sampled_from(sorted(self.contexts)), label="context as signal"), None
        if how == "garbage":
            return how, data.draw(S.garbage_handles, label="garbage signal"), None
        return "none", 0, None

    # ---- start -------------------------------------------------------------------------
    @initialize(signal=st.sampled_from(["none", "abort", "short timeout", "long timeout"]))
    def start(self, signal):
        self.base = live_core()
        code, self.log = abi.create("logCreate", BIN_RECORDER.callback, Q.QNN_LOG_LEVEL_ERROR)
        expect(code, Q.QNN_SUCCESS, "start: logCreate")
        code, self.be = abi.create("backendCreate", abi.vp(self.log), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "start: backendCreate")
        # A first context and its binary, so that loading starts from the first step.
        self.build_context(n_graphs=2, leave_open=False)
        self.take_binary(next(iter(self.contexts.values())))
        self.signal_create(signal)

    # ---- building and binaries -------------------------------------------------------------
    @precondition(lambda self: len(self.contexts) < 6)
    @rule(n_graphs=st.integers(1, 3), leave_open=st.booleans())
    def build_context(self, n_graphs, leave_open):
        code, ctx = abi.create("contextCreate", abi.vp(self.be), abi.NULL, abi.NULL)
        expect(code, Q.QNN_SUCCESS, "contextCreate")
        rng = np.random.default_rng(self.fresh_seed())
        c = BContextM(ctx, {})
        for i in range(n_graphs):
            c.graphs[f"g{i}"] = self.dense_graph(ctx, f"g{i}", rng, finalize=True)
        if leave_open:
            c.graphs["open"] = self.dense_graph(ctx, "open", rng, finalize=False)
        self.contexts[ctx] = c

    @precondition(lambda self: any(not g.finalized for c in self.contexts.values() for g in c.graphs.values()))
    @rule(data=st.data())
    def finalize_open_graph(self, data):
        open_graphs = [g for c in self.contexts.values() for g in c.graphs.values() if not g.finalized]
        self.finalize_graph(data.draw(st.sampled_from(open_graphs), label="open graph"))

    @precondition(lambda self: bool(self.contexts))
    @rule(data=st.data())
    def get_binary(self, data):
        self.take_binary(data.draw(st.sampled_from(list(self.contexts.values())), label="context"))

    def take_binary(self, c: BContextM) -> None:
        """contextGetBinarySize + contextGetBinary of ``c``; the binary joins ``self.blobs``."""
        size = abi.ffi.new("Qnn_ContextBinarySize_t *")
        code = abi.call("contextGetBinarySize", abi.vp(c.h), size)
        if any(not g.finalized for g in c.graphs.values()):
            expect(code, Q.QNN_CONTEXT_ERROR_NOT_FINALIZED, "contextGetBinarySize of a context with an open graph")
            event("get_binary: not finalized")
            return
        expect(code, Q.QNN_SUCCESS, f"contextGetBinarySize of a context with {len(c.graphs)} finalized graph(s)")
        buf = abi.ffi.new("char[]", int(size[0]))
        written = abi.ffi.new("Qnn_ContextBinarySize_t *")
        expect(abi.call("contextGetBinary", abi.vp(c.h), buf, size[0], written), Q.QNN_SUCCESS, "contextGetBinary")
        assert written[0] == size[0], "contextGetBinary writes the size contextGetBinarySize gave"
        blob = abi.ffi.buffer(buf, int(written[0]))[:]
        if c.source is not None:
            assert blob == c.source, "a loaded context serializes to the bytes it was loaded from"
        self.blobs.append(BlobM(blob, {name: g.expected for name, g in c.graphs.items()}))
        event("get_binary: loaded context" if c.source is not None else "get_binary: built context")

    @precondition(lambda self: bool(self.blobs))
    @rule(data=st.data(), corruption=corruptions, cut=st.integers(0, 2**31))
    def load_from_binary(self, data, corruption, cut):
        b = data.draw(st.sampled_from(self.blobs), label="binary")
        how, sig, sm = self.signal_arg(data)
        blob = corrupt(b.data, corruption, cut)
        buf = abi.NULL if blob is None else abi.ffi.new("char[]", blob)
        out = abi.ffi.new("Qnn_ContextHandle_t *")
        before = live_core()
        mark = len(BIN_RECORDER.records)
        code = abi.call("contextCreateFromBinaryWithSignal", abi.vp(self.be), abi.NULL, abi.NULL, buf,
                        len(blob or b""), out, abi.NULL, abi.vp(sig))
        what = f"contextCreateFromBinaryWithSignal({corruption} binary, {how} signal)"
        if how in ("freed", "wrong kind", "garbage"):
            want, rule_id = Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, None
        elif corruption != "none":
            want, rule_id = CORRUPTION_CODE[corruption], CORRUPTION_RULE[corruption]
        elif sm is not None and sm.kind == "timeout" and sm.timeout_us == SHORT_US:
            want, rule_id = Q.QNN_CONTEXT_ERROR_TIMED_OUT, "QNNEMU-signal-timeout"
        else:
            want, rule_id = Q.QNN_SUCCESS, None
        expect(code, want, what)
        event(f"load: {how} signal, {'intact' if corruption == 'none' else 'corrupted'} binary")
        if code != Q.QNN_SUCCESS:
            assert abi.hval(out[0]) == 0, f"{what}: failed, yet wrote a context handle"
            assert live_core() == before, f"{what}: a failed load leaves no context, graph or signal behind"
            if rule_id is not None:
                assert any(f"[{rule_id}]" in m for m in BIN_RECORDER.errors()[mark:]), \
                    f"{what}: the app log has an ERROR line with [{rule_id}]"
            return
        h = abi.hval(out[0])
        assert h and h not in self.freed_contexts, f"{what}: a new, non-NULL context handle"
        info = core_binary.inspect(b.data)
        c = self.contexts[h] = BContextM(h, {g.name: BGraphM(g.name, 0, True, b.expected[g.name])
                                             for g in info.graphs}, source=b.data)
        if data.draw(st.booleans(), label="run every graph now"):
            for g in c.graphs.values():
                self.retrieve_and_run(c, g, "none", 0)

    def retrieve_and_run(self, c: BContextM, g: BGraphM, how: str, sig: int) -> None:
        """graphRetrieve of ``g`` in loaded context ``c`` and graphExecute (with signal ``sig``)."""
        code, h = abi.create("graphRetrieve", abi.vp(c.h), abi.cstr(g.name))
        expect(code, Q.QNN_SUCCESS, f"graphRetrieve('{g.name}') of a loaded context")
        assert h and (g.h == 0 or h == g.h), \
            f"graphRetrieve('{g.name}') gives one stable handle (0x{g.h:x} before, 0x{h:x} now)"
        g.h = h
        code, y = self.run_graph(h, sig)
        if how in ("freed", "wrong kind", "garbage"):
            expect(code, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, f"graphExecute('{g.name}') with a {how} signal")
            assert y == np.full((1, 3), np.nan, np.float32).tobytes(), "a refused graphExecute writes no output"
            return
        expect(code, Q.QNN_SUCCESS, f"graphExecute('{g.name}') of a loaded context ({how} signal)")
        assert y == g.expected, f"graph '{g.name}' of a loaded context computes bit-identically to the original"
        event("loaded graph executed")

    @precondition(lambda self: bool(self.blobs))
    @rule(data=st.data(), corruption=st.sampled_from(CORRUPTIONS), cut=st.integers(0, 2**31))
    def validate(self, data, corruption, cut):
        b = data.draw(st.sampled_from(self.blobs), label="binary")
        blob = corrupt(b.data, corruption, cut)
        buf = abi.NULL if blob is None else abi.ffi.new("char[]", blob)
        before = live_core()
        code = abi.call("contextValidateBinary", abi.vp(self.be), abi.NULL, abi.NULL, buf, len(blob or b""))
        expect(code, CORRUPTION_CODE[corruption], f"contextValidateBinary({corruption} binary)")
        assert live_core() == before, "contextValidateBinary creates nothing"

    # ---- loaded graphs ---------------------------------------------------------------------
    @precondition(lambda self: any(c.source is not None for c in self.contexts.values()))
    @rule(data=st.data())
    def retrieve_and_execute(self, data):
        c = data.draw(st.sampled_from([c for c in self.contexts.values() if c.source is not None]), label="loaded")
        g = data.draw(st.sampled_from(list(c.graphs.values())), label="graph")
        how, sig, sm = self.signal_arg(data)
        if sm is not None and sm.kind == "timeout" and sm.timeout_us == SHORT_US:
            how, sig = "none", 0   # whether 1 us passes before graphExecute's first check is not defined
        self.retrieve_and_run(c, g, how, sig)

    @precondition(lambda self: bool(self.contexts))
    @rule(data=st.data())
    def retrieve_unknown_graph(self, data):
        c = data.draw(st.sampled_from(list(self.contexts.values())), label="context")
        code, h = abi.create("graphRetrieve", abi.vp(c.h), abi.cstr("no_such_graph"))
        expect(code, Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, "graphRetrieve of a name the context does not have")
        assert h == 0, "graphRetrieve of an unknown name writes no handle"

    # ---- freeing and using freed handles ----------------------------------------------------
    @precondition(lambda self: bool(self.contexts) or bool(self.freed_contexts))
    @rule(data=st.data())
    def free_context(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.contexts) | self.freed_contexts)), label="context")
        c = self.contexts.get(h)
        code = abi.call("contextFree", abi.vp(h), abi.NULL)
        if c is None:
            expect(code, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextFree of a freed context")
            return
        expect(code, Q.QNN_SUCCESS, f"contextFree of a live {'loaded' if c.source else 'built'} context")
        self.kill_context(c)

    @precondition(lambda self: bool(self.freed_contexts))
    @rule(data=st.data(), call=st.sampled_from(["contextGetBinarySize", "graphRetrieve", "contextValidate-free",
                                                "graphCreate"]))
    def use_freed_context(self, data, call):
        h = data.draw(st.sampled_from(sorted(self.freed_contexts)), label="freed context")
        if call == "contextGetBinarySize":
            code = abi.call("contextGetBinarySize", abi.vp(h), abi.ffi.new("Qnn_ContextBinarySize_t *"))
            expect(code, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextGetBinarySize of a freed context")
        elif call == "graphRetrieve":
            code, g = abi.create("graphRetrieve", abi.vp(h), abi.cstr("g0"))
            expect(code, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "graphRetrieve of a freed context")
            assert g == 0, "graphRetrieve of a freed context writes no handle"
        elif call == "graphCreate":
            code, g = abi.create("graphCreate", abi.vp(h), abi.cstr("late"), abi.NULL)
            expect(code, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "graphCreate in a freed context")
        else:
            code = abi.call("contextSetConfig", abi.vp(h), abi.NULL)
            expect(code, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextSetConfig of a freed context")

    @precondition(lambda self: bool(self.freed_graphs))
    @rule(data=st.data(), call=st.sampled_from(["graphExecute", "graphFinalize"]))
    def use_freed_graph(self, data, call):
        h = data.draw(st.sampled_from(sorted(self.freed_graphs)), label="freed graph")
        if call == "graphExecute":
            code, _ = self.run_graph(h)
        else:
            code = abi.call("graphFinalize", abi.vp(h), abi.NULL, abi.NULL)
        expect(code, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, f"{call} of a graph whose context was freed")

    @rule()
    def free_backend_and_start_over(self):
        """backendFree frees the backend's contexts (and their graphs) and signals."""
        expect(abi.call("backendFree", abi.vp(self.be)), Q.QNN_SUCCESS,
               f"backendFree with {len(self.contexts)} context(s) and {len(self.signals)} signal(s)")
        for c in list(self.contexts.values()):
            self.kill_context(c)
        self.freed_signals.update(self.signals)
        self.signals.clear()
        code, self.be = abi.create("backendCreate", abi.vp(self.log), abi.NULL)
        expect(code, Q.QNN_SUCCESS, "backendCreate after backendFree")

    # ---- signals ---------------------------------------------------------------------------
    @rule(label=st.sampled_from(sorted(SIGNAL_CONFIGS)))
    def signal_create(self, label):
        keep: list = []
        out = abi.ffi.new("Qnn_SignalHandle_t *")
        code = abi.call("signalCreate", abi.vp(self.be), signal_configs(label, keep), out)
        made = SIGNAL_CONFIGS[label][1]
        if made is None:
            expect(code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, f"signalCreate({label})")
            assert abi.hval(out[0]) == 0, f"signalCreate({label}) failed, yet wrote a handle"
            return
        expect(code, Q.QNN_SUCCESS, f"signalCreate({label})")
        h = abi.hval(out[0])
        assert h and h not in self.freed_signals, "signalCreate: a new, non-NULL handle"
        self.signals[h] = SignalM(h, *made)

    @precondition(lambda self: bool(self.signals) or bool(self.freed_signals))
    @rule(data=st.data(), label=st.sampled_from(sorted(SIGNAL_CONFIGS)))
    def signal_set_config(self, data, label):
        h = data.draw(st.sampled_from(sorted(set(self.signals) | self.freed_signals)), label="signal")
        keep: list = []
        code = abi.call("signalSetConfig", abi.vp(h), signal_configs(label, keep))
        s = self.signals.get(h)
        if s is None:
            expect(code, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, f"signalSetConfig({label}) of a freed signal")
            return
        made = SIGNAL_CONFIGS[label][1]
        if made is None:
            expect(code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, f"signalSetConfig({label})")
            return   # a refused config leaves the signal as it was
        expect(code, Q.QNN_SUCCESS, f"signalSetConfig({label}) of an idle signal")
        s.kind, s.timeout_us = made

    @precondition(lambda self: bool(self.signals) or bool(self.freed_signals))
    @rule(data=st.data())
    def signal_trigger(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.signals) | self.freed_signals)), label="signal")
        code = abi.call("signalTrigger", abi.vp(h))
        expect(code, Q.QNN_SIGNAL_ERROR_SIGNAL_IDLE if h in self.signals else Q.QNN_SIGNAL_ERROR_INVALID_HANDLE,
               f"signalTrigger of a{' live idle' if h in self.signals else ' freed'} signal")

    @precondition(lambda self: bool(self.signals) or bool(self.freed_signals))
    @rule(data=st.data())
    def signal_free(self, data):
        h = data.draw(st.sampled_from(sorted(set(self.signals) | self.freed_signals)), label="signal")
        code = abi.call("signalFree", abi.vp(h))
        if h not in self.signals:
            expect(code, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "signalFree of a freed signal (double free)")
            return
        expect(code, Q.QNN_SUCCESS, "signalFree of a live idle signal")
        del self.signals[h]
        self.freed_signals.add(h)

    @precondition(lambda self: bool(self.contexts))
    @rule(data=st.data(), call=st.sampled_from(["signalFree", "signalSetConfig", "signalTrigger"]))
    def signal_call_with_context_handle(self, data, call):
        h = data.draw(st.sampled_from(sorted(self.contexts)), label="context handle as signal")
        code = abi.call(call, abi.vp(h), *((abi.NULL,) if call == "signalSetConfig" else ()))
        expect(code, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, f"{call} given a context handle")

    # ---- invariants ----------------------------------------------------------------------
    @invariant()
    def core_holds_exactly_the_live_objects(self):
        if not hasattr(self, "base"):
            return
        n_graphs = sum(len(c.graphs) for c in self.contexts.values())
        want = (self.base[0] + len(self.contexts), self.base[1] + n_graphs, self.base[2] + len(self.signals))
        assert live_core() == want, \
            f"invariant: live (contexts, graphs, signals) in the core {live_core()}, the model says {want}"

    def teardown(self):
        if not hasattr(self, "be"):
            return
        for h in list(self.signals):
            expect(abi.call("signalFree", abi.vp(h)), Q.QNN_SUCCESS, "teardown: signalFree")
        for c in list(self.contexts.values()):
            expect(abi.call("contextFree", abi.vp(c.h), abi.NULL), Q.QNN_SUCCESS, "teardown: contextFree")
        expect(abi.call("backendFree", abi.vp(self.be)), Q.QNN_SUCCESS, "teardown: backendFree")
        expect(abi.call("logFree", abi.vp(self.log)), Q.QNN_SUCCESS, "teardown: logFree")
        assert live_core() == self.base, f"teardown: everything created is gone: {live_core()} vs {self.base}"
        BIN_RECORDER.clear()


TestBinaryLifecycle = BinaryLifecycle.TestCase
TestBinaryLifecycle.settings = settings(max_examples=settings.default.max_examples,
                                        stateful_step_count=settings.default.stateful_step_count)
