"""QnnGraph.h / QnnTensor.h semantics through the C ABI: ids written back, deep copies at
create/addNode time, I/O matched by id then by name, several graphs and contexts, repeated and
concurrent executes.
"""
from __future__ import annotations

import threading

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp

from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")


@pytest.fixture
def backend():
    code, be = abi.create("backendCreate", NULL, NULL)
    assert code == Q.QNN_SUCCESS, "backendCreate"
    yield be
    assert abi.call("backendFree", vp(be)) == Q.QNN_SUCCESS, "backendFree"


def make_context(be) -> int:
    code, ctx = abi.create("contextCreate", vp(be), NULL, NULL)
    assert code == Q.QNN_SUCCESS, "contextCreate"
    return ctx


def add_graph(ctx: int, name: str, keep: list, scale: float, version: int = 2):
    """y = x * w (ElementWiseMultiply with a STATIC w = scale), x and y of shape (2, 3)."""
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, keep), NULL)
    assert code == Q.QNN_SUCCESS, f"graphCreate {name}"
    x = abi.tensor("x", (2, 3), version=version)
    w = abi.static_tensor("w", np.full((2, 3), scale, np.float32), version=version)
    y = abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ, version=version)
    for t in (x, w, y):
        assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == Q.QNN_SUCCESS, "tensorCreateGraphTensor"
    op = abi.op_config("mul", "ElementWiseMultiply", [x, w], [y])
    keep += [x, w, y]
    return g, x, y, op


def execute(g, x, y, arr, keep, by_name=False):
    inp = abi.tensor("x", (2, 3), tensor_id=0 if by_name else x.id)
    out = abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ, tensor_id=0 if by_name else y.id)
    result = np.zeros((2, 3), np.float32)
    abi.set_buffer(inp, arr)
    abi.set_buffer(out, result)
    code = abi.call("graphExecute", vp(g), abi.tensor_array([inp], keep), 1,
                    abi.tensor_array([out], keep), 1, NULL, NULL)
    return code, result


def test_ids_are_unique_and_written_back(backend):
    ctx = make_context(backend)
    keep: list = []
    _, x, y, _ = add_graph(ctx, "g", keep, 2.0)
    _, x2, y2, _ = add_graph(ctx, "g2", keep, 2.0, version=1)
    ids = [t.id for t in (x, y, x2, y2)]
    assert all(ids) and len(set(ids)) == 4, f"tensorCreateGraphTensor writes unique non-zero ids into v1/v2.id: {ids}"


def test_everything_is_copied_at_create_and_add_node(backend):
    ctx = make_context(backend)
    keep: list = []
    g, x, y, op = add_graph(ctx, "g", keep, 3.0)
    # The app reuses its memory before addNode/finalize: names, dims and static data change.
    assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
    for t in (t for t in keep if isinstance(t, abi.Struct)):
        v = t.v
        ffi.memmove(v.name, b"garbage\0", 8)
        v.dimensions[0] = 77
        if v.clientBuf.data != NULL:
            ffi.memmove(v.clientBuf.data, b"\xff" * int(v.clientBuf.dataSize), int(v.clientBuf.dataSize))
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
    code, out = execute(g, x, y, np.arange(6, dtype=np.float32).reshape(2, 3), keep)
    assert code == Q.QNN_SUCCESS, "graphExecute"
    assert np.array_equal(out, 3.0 * np.arange(6, dtype=np.float32).reshape(2, 3)), \
        f"results use the copies taken at create time (static w=3), not the app's overwritten memory: {out}"


def test_io_matched_by_name_when_id_is_zero(backend):
    ctx = make_context(backend)
    keep: list = []
    g, x, y, op = add_graph(ctx, "g", keep, 2.0)
    assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
    code, out = execute(g, x, y, np.ones((2, 3), np.float32), keep, by_name=True)
    assert code == Q.QNN_SUCCESS and np.array_equal(out, np.full((2, 3), 2.0, np.float32)), \
        f"execute with id 0 falls back to tensor names: code {code}, out {out}"


def test_graphs_and_contexts_are_independent(backend):
    keep: list = []
    graphs = []
    for c, ctx in enumerate((make_context(backend), make_context(backend))):
        for k in range(2):
            scale = 1.0 + 2 * c + k
            g, x, y, op = add_graph(ctx, f"g{k}", keep, scale)  # same names in both contexts
            assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
            assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
            graphs.append((g, x, y, scale))
    x_in = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):  # repeated executes give the same results
        for g, x, y, scale in graphs:
            code, out = execute(g, x, y, x_in, keep)
            assert code == Q.QNN_SUCCESS and np.array_equal(out, scale * x_in), \
                f"graph with scale {scale} in its own context computes x*{scale}: {out}"


def test_concurrent_executes_of_one_graph(backend):
    ctx = make_context(backend)
    keep: list = []
    g, x, y, op = add_graph(ctx, "g", keep, 5.0)
    assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
    failures = []

    def worker(seed):
        local: list = []
        rng = np.random.default_rng(seed)
        for _ in range(20):
            arr = rng.standard_normal((2, 3)).astype(np.float32)
            code, out = execute(g, x, y, arr, local)
            if code != Q.QNN_SUCCESS or not np.array_equal(out, 5.0 * arr):
                failures.append((seed, code))

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"4 threads x 20 executes of one graph all succeed with their own results: {failures[:5]}"


def test_buffer_size_must_match_exactly(backend):
    ctx = make_context(backend)
    keep: list = []
    g, x, y, op = add_graph(ctx, "g", keep, 1.0)
    assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "graphAddNode"
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"
    code, _ = execute(g, x, y, np.ones((2, 4), np.float32), keep)
    assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR, f"a 32-byte input for a 24-byte tensor is refused: {code}"
