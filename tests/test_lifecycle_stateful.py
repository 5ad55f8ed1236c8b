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
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import abi
import strategies as S
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
    ctx: "ContextM"
    name: str
    finalized: bool = False
    tensors: dict[str, TensorM] = field(default_factory=dict)
    relus: list[tuple[str, str]] = field(default_factory=list)  # (input name, output name)


@dataclass(eq=False)
class ContextM:
    h: int
    backend: "BackendM"
    device: "DeviceM | None"
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
