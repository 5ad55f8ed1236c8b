"""Raw-ABI environments (tests/abi.py) for the negative API conformance tests and the HTP config
tests (QNN API: QnnLog, QnnBackend, QnnDevice, QnnContext, QnnGraph, QnnTensor; QNN HTP backend
documentation, "QNN HTP Backend API" custom configs).

``Env``: logger (DEBUG, recording) -> backend -> device -> context -> graph 'g', with building
blocks that assert success and the rule ids logged; tests/test_negative.py keeps its own copy
next to its rule tables.  ``H``: Env plus devices of any SoC, HTP custom graph/context configs
and contexts loaded from a binary (tests/test_htp_configs.py, tests/test_htp_acceptance.py)."""
from __future__ import annotations

import abi
import numpy as np
from abi import NULL, RULE_ID, ffi, vp

from qnnemu.headers import Q

F32 = Q.QNN_DATATYPE_FLOAT_32
OK = Q.QNN_SUCCESS


class Env:
    """logger (DEBUG, recording) -> backend -> device -> context -> graph 'g', freed afterwards.

    The logger is the newest live one, so messages of handle-less failures reach it too."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == Q.QNN_SUCCESS, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: backendCreate"
        code, self.dev = abi.create("deviceCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: deviceCreate"
        code, self.ctx = abi.create("contextCreate", vp(self.be), vp(self.dev), NULL)
        assert code == Q.QNN_SUCCESS, "setup: contextCreate"
        self.g = self.graph("g")
        self.rec.clear()

    def close(self):
        assert abi.call("contextFree", vp(self.ctx), NULL) == Q.QNN_SUCCESS, "teardown: contextFree"
        assert abi.call("deviceFree", vp(self.dev)) == Q.QNN_SUCCESS, "teardown: deviceFree"
        assert abi.call("backendFree", vp(self.be)) == Q.QNN_SUCCESS, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == Q.QNN_SUCCESS, "teardown: logFree"

    # ---- building blocks (each asserts success) -----------------------------------------
    def graph(self, name: str) -> int:
        code, g = abi.create("graphCreate", vp(self.ctx), abi.cstr(name, self.keep), NULL)
        assert code == Q.QNN_SUCCESS, f"setup: graphCreate('{name}') returned {code}"
        return g

    def tensor(self, name: str, dims=(2, 3), type_=Q.QNN_TENSOR_TYPE_APP_WRITE, g: int | None = None,
               **kw) -> abi.Struct:
        t = abi.tensor(name, dims, kw.pop("dtype", F32), type_, **kw)
        code = abi.call("tensorCreateGraphTensor", vp(self.g if g is None else g), t.ptr)
        assert code == Q.QNN_SUCCESS, f"setup: tensorCreateGraphTensor('{name}') returned {code}"
        self.keep.append(t)
        return t

    def relu(self, g: int | None = None) -> tuple[abi.Struct, abi.Struct]:
        """x (APP_WRITE) -> Relu 'r' -> y (APP_READ) in graph g; returns (x, y)."""
        x = self.tensor("x", g=g)
        y = self.tensor("y", type_=Q.QNN_TENSOR_TYPE_APP_READ, g=g)
        code = abi.call("graphAddNode", vp(self.g if g is None else g), abi.op_config("r", "Relu", [x], [y]))
        assert code == Q.QNN_SUCCESS, f"setup: graphAddNode(Relu) returned {code}"
        return x, y

    def finalized_relu(self) -> tuple[abi.Struct, abi.Struct]:
        x, y = self.relu()
        assert abi.call("graphFinalize", vp(self.g), NULL, NULL) == Q.QNN_SUCCESS, "setup: graphFinalize"
        self.rec.clear()
        return x, y

    def execute(self, inputs, outputs, n_in=None, n_out=None, profile=NULL) -> int:
        return abi.call("graphExecute", vp(self.g), abi.tensor_array(inputs, self.keep) if inputs else NULL,
                        len(inputs) if n_in is None else n_in,
                        abi.tensor_array(outputs, self.keep) if outputs else NULL,
                        len(outputs) if n_out is None else n_out, profile, NULL)

    def io(self, t: abi.Struct, array: np.ndarray | None = None, **fields) -> abi.Struct:
        """A copy of created tensor ``t`` for graphExecute, with its buffer and fields set."""
        c = abi.Struct(ffi.new("Qnn_Tensor_t *", t.ptr[0]), [t])
        if "version" in fields:
            c.ptr.version = fields.pop("version")
        for k, v in fields.items():
            setattr(c.v, k, v)
        abi.set_buffer(c, np.zeros((2, 3), np.float32) if array is None else array)
        return c

    def add_node(self, op: abi.Struct, g: int | None = None) -> int:
        self.keep.append(op)
        return abi.call("graphAddNode", vp(self.g if g is None else g), op)

    def create_tensor(self, t: abi.Struct, g: int | None = None) -> int:
        self.keep.append(t)
        return abi.call("tensorCreateGraphTensor", vp(self.g if g is None else g), t.ptr)

    def configs(self, ctype: str, **fields) -> object:
        """A one-entry NULL-terminated ``const ctype **`` list."""
        c = ffi.new(f"{ctype} *")
        for k, v in fields.items():
            setattr(c, k, v)
        self.keep.append(c)
        return abi.null_terminated(ctype, [c], self.keep)

    def htp_device_config(self, option: int, **fields):
        cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
        cc.option = option
        for k, v in fields.items():
            if k == "arch":
                cc.arch.arch = v
                cc.arch.deviceId = 0
            else:
                setattr(cc, k, v)
        self.keep.append(cc)
        return self.configs("QnnDevice_Config_t", option=Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, customConfig=cc)

    def own(self, cdata):
        self.keep.append(cdata)
        return cdata

    def guard_device(self, result) -> int:
        """deviceCreate must fail here; should it succeed, the device is freed again."""
        code, h = result
        if code == Q.QNN_SUCCESS:
            abi.call("deviceFree", vp(h))
        return code

    def perf(self):
        out = ffi.new("QnnHtpDevice_Infrastructure_t **")
        assert abi.call("deviceGetInfrastructure", out) == Q.QNN_SUCCESS, "setup: deviceGetInfrastructure"
        return out[0].perfInfra

    # ---- checking ------------------------------------------------------------------------
    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]

    def rules_logged(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_ID.findall(m)}


class H(Env):
    """Env (logger, backend, default device, context 'ctx', graph 'g') plus devices of any SoC,
    HTP custom graph/context configs and contexts loaded from a binary."""

    def __init__(self):
        super().__init__()
        self.extra_devices: list[int] = []
        self.extra_contexts: list[int] = []

    def close(self):
        for c in reversed(self.extra_contexts):
            abi.call("contextFree", vp(c), NULL)
        for d in self.extra_devices:
            abi.call("deviceFree", vp(d))
        super().close()

    def device(self, soc: int) -> int:
        cc = self.own(ffi.new("QnnHtpDevice_CustomConfig_t *"))
        cc.option, cc.socModel = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, soc
        code, dev = abi.create("deviceCreate", vp(self.log), self.configs(
            "QnnDevice_Config_t", option=Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, customConfig=cc))
        assert code == OK, f"setup: deviceCreate(soc {soc})"
        self.extra_devices.append(dev)
        return dev

    def context(self, soc: int | None = None, configs=NULL) -> int:
        dev = self.device(soc) if soc is not None else None
        code, ctx = abi.create("contextCreate", vp(self.be), vp(dev) if dev else NULL, configs)
        assert code == OK, f"setup: contextCreate returned {code}: {self.rec.errors()}"
        self.extra_contexts.append(ctx)
        return ctx

    # ---- configs
    def graph_custom(self, option: int, **fields):
        cc = self.own(ffi.new("QnnHtpGraph_CustomConfig_t *"))
        cc.option = option
        for k, v in fields.items():
            if k == "optimizationOption":
                cc.optimizationOption.type, cc.optimizationOption.floatValue = v
            elif k == "finalizeConfig":
                cc.finalizeConfig.key = abi.cstr(v, self.keep) if v is not None else NULL
                cc.finalizeConfig.value.dataType = Q.QNN_DATATYPE_UINT_32
                cc.finalizeConfig.value.uint32Value = 1
            else:
                setattr(cc, k, v)
        c = self.own(ffi.new("QnnGraph_Config_t *"))
        c.option, c.customConfig = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM, cc
        return c

    def graph_priority(self, value: int):
        c = self.own(ffi.new("QnnGraph_Config_t *"))
        c.option, c.priority = Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY, value
        return c

    def context_custom(self, option: int, **fields):
        cc = self.own(ffi.new("QnnHtpContext_CustomConfig_t *"))
        cc.option = option
        for k, v in fields.items():
            if k in ("groupRegistration", "concurrentGroupRegistration"):
                reg = getattr(cc, k)
                reg.firstGroupHandle, reg.maxSpillFillBuffer = ffi.cast("Qnn_ContextHandle_t", v[0]), v[1]
            else:
                setattr(cc, k, v)
        c = self.own(ffi.new("QnnContext_Config_t *"))
        c.option, c.customConfig = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM, cc
        return c

    def context_priority(self, value: int):
        c = self.own(ffi.new("QnnContext_Config_t *"))
        c.option, c.priority = Q.QNN_CONTEXT_CONFIG_OPTION_PRIORITY, value
        return c

    def lst(self, ctype: str, *items):
        return abi.null_terminated(ctype, list(items), self.keep)

    def new_graph(self, ctx: int, name: str, *configs) -> tuple[int, int]:
        return abi.create("graphCreate", vp(ctx), abi.cstr(name, self.keep),
                          self.lst("QnnGraph_Config_t", *configs) if configs else NULL)

    def set_graph(self, g: int, *configs) -> int:
        return abi.call("graphSetConfig", vp(g), self.lst("QnnGraph_Config_t", *configs))

    def relu_graph(self, ctx: int, name: str = "r", finalize: bool = True) -> int:
        code, g = self.new_graph(ctx, name)
        assert code == OK, "setup: graphCreate"
        self.relu(g)
        if finalize:
            assert abi.call("graphFinalize", vp(g), NULL, NULL) == OK, "setup: graphFinalize"
        return g

    def binary(self) -> bytes:
        """A context binary with one finalized Relu graph."""
        ctx = self.context()
        self.relu_graph(ctx)
        size = ffi.new("Qnn_ContextBinarySize_t *")
        assert abi.call("contextGetBinarySize", vp(ctx), size) == OK
        buf = ffi.new("char[]", int(size[0]))
        written = ffi.new("Qnn_ContextBinarySize_t *")
        assert abi.call("contextGetBinary", vp(ctx), buf, int(size[0]), written) == OK
        return bytes(ffi.buffer(buf, int(written[0])))

    def load(self, blob: bytes, *configs) -> tuple[int, int]:
        buf = self.own(ffi.new("char[]", blob))
        out = ffi.new("Qnn_ContextHandle_t *")
        code = abi.call("contextCreateFromBinary", vp(self.be), NULL,
                        self.lst("QnnContext_Config_t", *configs) if configs else NULL, buf, len(blob), out, NULL)
        h = abi.hval(out[0]) if code == OK else 0
        if h:
            self.extra_contexts.append(h)
        return code, h

    def property(self, ctx: int, option: int) -> int:
        cp = self.own(ffi.new("QnnHtpContext_CustomProperty_t *"))
        cp.option = option
        code = abi.call("contextGetProperty", vp(ctx), self.configs(
            "QnnContext_Property_t", option=Q.QNN_CONTEXT_PROPERTY_OPTION_CUSTOM, customProperty=cp))
        assert code == OK, f"contextGetProperty({option}) returned {code}"
        return int(cp.bufferStartAlignment)   # one uint64_t union
