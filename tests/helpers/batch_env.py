"""A raw-ABI environment (tests/abi.py) for graphs built and executed through the C ABI (QNN API:
QnnContext, QnnGraph, QnnTensor, QnnMem; QNN HTP backend documentation, "QNN HTP Variable
Batch"): a recording logger, a backend, a context (optionally with configs), graph, tensor,
execute and memRegister helpers.  Used by tests/test_htp_batch.py, tests/test_htp_kvcache.py
and tests/test_htp_priority.py."""
from __future__ import annotations

import os

import abi
import numpy as np
from abi import NULL, RULE_ID, ffi, vp

from qnnemu.headers import Q

F32 = Q.QNN_DATATYPE_FLOAT_32
RAW = Q.QNN_TENSORMEMTYPE_RAW
MEMHANDLE = Q.QNN_TENSORMEMTYPE_MEMHANDLE


class Env:
    """logger (DEBUG, recording) -> backend -> context (optionally with configs); graphs built
    through the raw ABI; freed by ``close``."""

    def __init__(self, context_configs=NULL, device: bool = False):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        self.fds: list[int] = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == Q.QNN_SUCCESS, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: backendCreate"
        self.dev = 0
        code, self.ctx = abi.create("contextCreate", vp(self.be), NULL, context_configs)
        assert code == Q.QNN_SUCCESS, f"setup: contextCreate returned {code}: {self.rec.errors()}"
        self.tensors: dict[tuple[int, str], abi.Struct] = {}

    def close(self):
        for fd in self.fds:
            os.close(fd)
        assert abi.call("contextFree", vp(self.ctx), NULL) == Q.QNN_SUCCESS, "teardown: contextFree"
        assert abi.call("backendFree", vp(self.be)) == Q.QNN_SUCCESS, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == Q.QNN_SUCCESS, "teardown: logFree"

    # ---- graphs ----------------------------------------------------------------------------
    def graph(self, name: str, configs=NULL, ctx: int | None = None) -> int:
        code, g = abi.create("graphCreate", vp(self.ctx if ctx is None else ctx), abi.cstr(name, self.keep), configs)
        assert code == Q.QNN_SUCCESS, f"setup: graphCreate returned {code}: {self.rec.errors()}"
        return g

    def tensor(self, g: int, name: str, dims, dtype=F32, type_=Q.QNN_TENSOR_TYPE_APP_WRITE, **kw) -> abi.Struct:
        t = abi.tensor(name, dims, dtype, type_, **kw)
        code = abi.call("tensorCreateGraphTensor", vp(g), t.ptr)
        assert code == Q.QNN_SUCCESS, f"setup: tensorCreateGraphTensor '{name}' returned {code}: {self.rec.errors()}"
        self.tensors[(g, name)] = t
        self.keep.append(t)
        return t

    def try_tensor(self, g: int, name: str, dims, dtype=F32, type_=Q.QNN_TENSOR_TYPE_APP_WRITE, **kw) -> int:
        t = abi.tensor(name, dims, dtype, type_, **kw)
        self.keep.append(t)
        return abi.call("tensorCreateGraphTensor", vp(g), t.ptr)

    def node(self, g: int, name: str, op: str, ins, outs, params=()) -> None:
        code = abi.call("graphAddNode", vp(g), abi.op_config(name, op, ins, outs, params))
        assert code == Q.QNN_SUCCESS, f"setup: graphAddNode '{name}' returned {code}: {self.rec.errors()}"

    def finalize(self, g: int) -> int:
        return abi.call("graphFinalize", vp(g), NULL, NULL)

    # ---- execute ---------------------------------------------------------------------------
    def arg(self, t: abi.Struct, array: np.ndarray | None = None, dims=None, handle: int | None = None,
            size: int | None = None) -> abi.Struct:
        """An execute argument for created tensor ``t``: dimensions ``dims`` (default: the
        array's shape), RAW ``array`` or MEMHANDLE ``handle``."""
        shape = dims if dims is not None else (array.shape if array is not None else None)
        c = abi.tensor(None, shape, int(t.v.dataType), type_=int(t.v.type), tensor_id=t.id,
                       mem_type=MEMHANDLE if handle is not None else RAW)
        if handle is not None:
            c.v.memHandle = vp(handle)
        else:
            abi.set_buffer(c, np.ascontiguousarray(array), size)
        return c

    def execute(self, g: int, inputs, outputs) -> int:
        return abi.call("graphExecute", vp(g), abi.tensor_array(inputs, self.keep), len(inputs),
                        abi.tensor_array(outputs, self.keep), len(outputs), NULL, NULL)

    def run(self, g: int, feeds: list[tuple[abi.Struct, np.ndarray]], outs: list[tuple[abi.Struct, tuple]],
            dtype=np.float32) -> list[np.ndarray]:
        """Executes with RAW buffers; returns the outputs (shapes given per output)."""
        results = [np.zeros(shape, dtype) for _, shape in outs]
        code = self.execute(g, [self.arg(t, a) for t, a in feeds],
                            [self.arg(t, r) for (t, _), r in zip(outs, results)])
        assert code == Q.QNN_SUCCESS, f"graphExecute returned {code}: {self.rec.errors()}"
        return results

    # ---- memory ----------------------------------------------------------------------------
    def register(self, fd: int, dims, dtype=F32) -> int:
        d = ffi.new("Qnn_MemDescriptor_t[]", 1)
        dim = ffi.new("uint32_t[]", list(dims))
        self.keep += [d, dim]
        d[0].memShape.numDim = len(dims)
        d[0].memShape.dimSize = dim
        d[0].memShape.shapeConfig = NULL
        d[0].dataType = dtype
        d[0].memType = Q.QNN_MEM_TYPE_ION
        d[0].ionInfo.fd = fd
        out = ffi.new("Qnn_MemHandle_t[]", 1)
        code = abi.call("memRegister", vp(self.ctx), d, 1, out)
        assert code == Q.QNN_SUCCESS, f"memRegister returned {code}: {self.rec.errors()}"
        return abi.hval(out[0])

    def memfd(self, nbytes: int) -> int:
        fd = os.memfd_create("qnnemu-batch")
        os.ftruncate(fd, nbytes)
        self.fds.append(fd)
        return fd

    # ---- logs ------------------------------------------------------------------------------
    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]

    def rules_logged(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_ID.findall(m)}

    def assert_rule(self, code: int, want_code: int, rule: str, func: str, path: str) -> str:
        return self.rec.assert_rule(code, want_code, rule, func, path)
