"""A raw-ABI environment (tests/abi.py) for context binaries (QNN API: QnnContext.h
contextGetBinary / contextCreateFromBinary and its WithSignal / ListAsync forms, graphRetrieve;
QNN HTP backend documentation, "Context Binary Management", "QnnContext_createFromBinaryListAsync
API"): ``Env`` (a recording logger and a backend; builds graphs, saves and loads binaries),
``Notifications`` and ``list_params`` for contextCreateFromBinaryListAsync.  Used by
tests/test_context_api.py, tests/test_signal.py, tests/test_weights_packing.py and
tests/test_htp_profiling.py."""
from __future__ import annotations

import abi
import numpy as np
from abi import NULL, RULE_ID, ffi, vp

from qnnemu.core.backend import Backend
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q

OK = Q.QNN_SUCCESS

# Callbacks must outlive the library's use of them: kept for the whole process.
CALLBACKS: list = []


# ------------------------------------------------------------------------------ environment
class Env:
    """logger (DEBUG, recording) -> backend; builds graphs, saves and loads binaries."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == OK, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == OK, "setup: backendCreate"

    def close(self):
        assert abi.call("backendFree", vp(self.be)) == OK, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == OK, "teardown: logFree"

    @property
    def core_backend(self) -> Backend:
        return HANDLES.lookup(self.be)

    def rules(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_ID.findall(m)}

    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]

    # ---- configs -----------------------------------------------------------------------
    def context_configs(self, *entries) -> object:
        """A NULL-terminated QnnContext_Config_t list; entries are dicts of fields (``custom``:
        a dict of QnnHtpContext_CustomConfig_t fields)."""
        ptrs = []
        for fields in entries:
            c = ffi.new("QnnContext_Config_t *")
            fields = dict(fields)
            custom = fields.pop("custom", None)
            if custom is not None:
                cc = ffi.new("QnnHtpContext_CustomConfig_t *")
                for k, v in custom.items():
                    setattr(cc, k, v)
                self.keep.append(cc)
                c.option = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM
                c.customConfig = cc
            for k, v in fields.items():
                setattr(c, k, v)
            self.keep.append(c)
            ptrs.append(c)
        return abi.null_terminated("QnnContext_Config_t", ptrs, self.keep)

    def strict(self):
        return self.context_configs({"option": Q.QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY,
                                     "binaryCompatibilityType": Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT})

    # ---- building ----------------------------------------------------------------------
    def context(self, configs=NULL) -> int:
        code, ctx = abi.create("contextCreate", vp(self.be), NULL, configs)
        assert code == OK, f"setup: contextCreate returned {code}"
        return ctx

    def create_tensor(self, g: int, t: abi.Struct) -> abi.Struct:
        assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == OK, f"setup: tensor {abi.ffi.string(t.v.name)}"
        self.keep.append(t)
        return t

    def dense_graph(self, ctx: int, name: str, w: np.ndarray, bias: np.ndarray, shared_w: abi.Struct | None = None,
                    finalize: bool = True) -> int:
        """x[1,4] -> FullyConnected(w, bias) -> Relu -> y[1,3]; ``shared_w``: a context tensor as w."""
        code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, self.keep), NULL)
        assert code == OK, f"setup: graphCreate {name}"
        x = self.create_tensor(g, abi.tensor("x", (1, 4)))
        wt = shared_w if shared_w is not None else self.create_tensor(g, abi.static_tensor("w", w))
        bt = self.create_tensor(g, abi.static_tensor("b", bias))
        h = self.create_tensor(g, abi.tensor("h", (1, 3), type_=Q.QNN_TENSOR_TYPE_NATIVE))
        y = self.create_tensor(g, abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ))
        for op in (abi.op_config("fc", "FullyConnected", [x, wt, bt], [h]), abi.op_config("relu", "Relu", [h], [y])):
            self.keep.append(op)
            assert abi.call("graphAddNode", vp(g), op) == OK, f"setup: graphAddNode in {name}"
        if finalize:
            assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, f"setup: graphFinalize {name}"
        return g

    def saved_context(self, n_graphs: int = 2, seed: int = 0, configs=NULL) -> tuple[int, dict]:
        """A context with ``n_graphs`` dense graphs g0.. (different weights); (handle, weights)."""
        ctx = self.context(configs)
        rng = np.random.default_rng(seed)
        weights = {}
        for i in range(n_graphs):
            w = rng.standard_normal((3, 4)).astype(np.float32)
            b = rng.standard_normal(3).astype(np.float32)
            weights[f"g{i}"] = (w, b)
            self.dense_graph(ctx, f"g{i}", w, b)
        return ctx, weights

    # ---- binaries ----------------------------------------------------------------------
    def get_binary(self, ctx: int) -> bytes:
        size = ffi.new("Qnn_ContextBinarySize_t *")
        assert abi.call("contextGetBinarySize", vp(ctx), size) == OK, "contextGetBinarySize"
        buf = ffi.new("char[]", int(size[0]))
        written = ffi.new("Qnn_ContextBinarySize_t *")
        assert abi.call("contextGetBinary", vp(ctx), buf, size[0], written) == OK, "contextGetBinary"
        assert written[0] == size[0], "writtenBufferSize equals contextGetBinarySize"
        return ffi.buffer(buf, int(written[0]))[:]

    def buffer(self, blob: bytes):
        buf = ffi.new("char[]", blob or b"\0")
        self.keep.append(buf)
        return buf

    def load(self, blob: bytes | None, configs=NULL, device=NULL, profile=NULL, size: int | None = None):
        out = ffi.new("Qnn_ContextHandle_t *")
        code = abi.call("contextCreateFromBinary", vp(self.be), vp(device), configs,
                        NULL if blob is None else self.buffer(blob), len(blob or b"") if size is None else size,
                        out, vp(profile))
        return code, abi.hval(out[0])

    def retrieve(self, ctx: int, name: str) -> int:
        code, g = abi.create("graphRetrieve", vp(ctx), abi.cstr(name, self.keep))
        assert code == OK, f"graphRetrieve('{name}') returned {code}"
        return g

    def run(self, g: int, x: np.ndarray) -> np.ndarray:
        """graphExecute with tensors matched by name (id 0)."""
        inp = abi.tensor("x", (1, 4))
        out = abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
        y = np.zeros((1, 3), np.float32)
        abi.set_buffer(inp, np.ascontiguousarray(x, np.float32))
        abi.set_buffer(out, y)
        code = abi.call("graphExecute", vp(g), abi.tensor_array([inp], self.keep), 1,
                        abi.tensor_array([out], self.keep), 1, NULL, NULL)
        assert code == OK, f"graphExecute returned {code}: {self.rec.errors()[-1:]}"
        return y

    def free_context(self, ctx: int):
        assert abi.call("contextFree", vp(ctx), NULL) == OK, "contextFree"


class Notifications:
    def __init__(self):
        self.records: list[tuple[int, int, str | None, int, int, int]] = []
        self.hook = None
        self.callback = ffi.callback("QnnContext_createFromBinaryNotifyFn_t", self._on)
        CALLBACKS.append(self.callback)

    def _on(self, context, graph, name, kind, param, status):
        rec = (abi.hval(context), abi.hval(graph), None if name == NULL else ffi.string(name).decode(),
               int(kind), abi.hval(param), int(status))
        self.records.append(rec)
        if self.hook is not None:
            self.hook(rec)

    def of(self, param: int, kind: int) -> list:
        return [r for r in self.records if r[4] == param and r[3] == kind]


def list_params(env, blobs, notes: Notifications, version=1, configs=None, callback=NULL):
    ptrs = []
    for i, blob in enumerate(blobs):
        p = ffi.new("QnnContext_Params_t *")
        p.version = version
        fields = {"config": (configs or {}).get(i, NULL), "binaryBuffer": env.buffer(blob) if blob else NULL,
                  "binaryBufferSize": len(blob or b""), "profile": NULL, "notifyFunc": notes.callback,
                  "notifyParam": ffi.cast("void *", 0x1000 + i)}
        if version == 2:
            v2 = ffi.new("QnnContext_ParamsV2_t *", dict(fields, callback=callback))
            env.keep.append(v2)
            p.v2 = v2
        else:
            p.v1 = fields
        env.keep.append(p)
        ptrs.append(p)
    return abi.null_terminated("QnnContext_Params_t", ptrs, env.keep)
