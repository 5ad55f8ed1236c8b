"""Session-creation speed paths (issue 13 item 4, docs/finalize-speed.md): static data copied
once at tensorCreateGraphTensor, backendValidateOpConfig checking the client's buffer in place,
graphAddNode reading no tensor data, the Q constants namespace.  Each keeps what the slower
path did; these tests pin that.
"""
from __future__ import annotations

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp

from qnnemu.core.graph import Graph
from qnnemu.core.handles import HANDLES
from qnnemu.core.tensor import STATIC_ALIGN, RawQuant, TensorDesc, validate_desc
from qnnemu.headers import Q, _Constants

pytestmark = pytest.mark.usefixtures("qnn_abi")


def _static_desc(array: np.ndarray, borrowed: bool) -> TensorDesc:
    raw = memoryview(bytearray(array.tobytes())) if borrowed else array.tobytes()
    d = TensorDesc(2, 0, "w", Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
                   Q.QNN_DATATYPE_FLOAT_32, RawQuant(Q.QNN_DEFINITION_UNDEFINED, 0), array.shape,
                   Q.QNN_TENSORMEMTYPE_RAW, raw, array.nbytes, True)
    d.borrowed = borrowed
    return d


def test_borrowed_data_is_copied_once_unless_transient():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = _static_desc(w, borrowed=True)
    _, kept = validate_desc(d, "tensorCreateGraphTensor", "tensor")
    assert not np.shares_memory(kept, np.frombuffer(d.data, np.uint8)), \
        "a created tensor keeps its own copy of the client's buffer"
    assert kept.ctypes.data % STATIC_ALIGN == 0 and not kept.flags.writeable, "the copy is aligned and read-only"
    _, seen = validate_desc(d, "backendValidateOpConfig", "opConfig.v1.inputTensors[0]", transient=True)
    assert np.shares_memory(seen, np.frombuffer(d.data, np.uint8)), "validation reads the client's buffer in place"
    assert not seen.flags.writeable, "the view of the client's buffer is read-only"
    assert np.array_equal(kept, w) and np.array_equal(seen, w), "both hold the tensor's values"
    _, copied = validate_desc(_static_desc(w, borrowed=False), "tensorCreateGraphTensor", "tensor")
    assert np.array_equal(copied, w) and copied.ctypes.data % STATIC_ALIGN == 0, "bytes data: copied aligned as before"


def test_created_static_data_survives_the_client_buffer():
    """tensorCreateGraphTensor borrows the client's buffer for the call only: the graph's copy
    (aligned, read-only) is what runs after the client overwrote its memory."""
    code, be = abi.create("backendCreate", NULL, NULL)
    assert code == Q.QNN_SUCCESS, "backendCreate"
    keep: list = []
    code, ctx = abi.create("contextCreate", vp(be), NULL, NULL)
    assert code == Q.QNN_SUCCESS, "contextCreate"
    try:
        code, g = abi.create("graphCreate", vp(ctx), abi.cstr("g", keep), NULL)
        assert code == Q.QNN_SUCCESS, "graphCreate"
        w_values = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        x, y = abi.tensor("x", (2, 3)), abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
        w = abi.static_tensor("w", w_values)
        keep += [x, w, y]
        for t in (x, w, y):
            assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == Q.QNN_SUCCESS, "tensorCreateGraphTensor"
        ffi.memmove(w.v.clientBuf.data, b"\x7f" * 24, 24)     # the client reuses its buffer
        op = abi.op_config("add", "ElementWiseAdd", [x, w], [y])
        keep.append(op)
        assert abi.call("backendValidateOpConfig", vp(be), op) == Q.QNN_SUCCESS, "backendValidateOpConfig"
        assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
        assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
        graph = HANDLES.lookup(g)
        assert isinstance(graph, Graph), "the graph handle resolves in this process"
        data = graph.tensor(w.id).data
        assert np.array_equal(data, w_values), "the graph keeps the values given at creation"
        assert data.ctypes.data % STATIC_ALIGN == 0 and not data.flags.writeable, "aligned, read-only"
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        inp, out = abi.tensor("x", (2, 3), tensor_id=x.id), abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ,
                                                                        tensor_id=y.id)
        result = np.zeros((2, 3), np.float32)
        abi.set_buffer(inp, arr)
        abi.set_buffer(out, result)
        code = abi.call("graphExecute", vp(g), abi.tensor_array([inp], keep), 1, abi.tensor_array([out], keep), 1,
                        NULL, NULL)
        assert code == Q.QNN_SUCCESS and np.array_equal(result, arr + w_values), \
            f"x + w computed with the values given at creation: {result}"
    finally:
        assert abi.call("contextFree", vp(ctx), NULL) == Q.QNN_SUCCESS, "contextFree"
        assert abi.call("backendFree", vp(be)) == Q.QNN_SUCCESS, "backendFree"


def test_constants_namespace():
    """Q's first access makes it a plain namespace of every constant; enum() gives a fresh table."""
    assert Q.QNN_SUCCESS == 0 and isinstance(Q, _Constants), "constants read as attributes"
    assert type(Q) is _Constants, "after the first access no __getattr__ is left on the lookup path"
    assert not hasattr(Q, "QNN_NO_SUCH_CONSTANT"), "an unknown name is still an AttributeError"
    names = Q.enum("QNN_DATATYPE_")
    assert names[Q.QNN_DATATYPE_FLOAT_32] == "QNN_DATATYPE_FLOAT_32", "enum() maps values to names"
    names.clear()
    assert Q.enum("QNN_DATATYPE_"), "enum() hands out a copy: a caller's change does not reach the next one"
