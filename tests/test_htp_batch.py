"""Variable batch through the C ABI (QNN HTP backend documentation, "QNN HTP Variable Batch"):
graphExecute with every input and output at n x the prepared first dimension runs n batches -- equal
to n separate executes and to the same graph prepared at batch n*b -- for RAW client buffers and
QNN_TENSORMEMTYPE_MEMHANDLE tensors; anything else is refused (one negative test per rule id).

``Env`` (a recording logger, a backend, a context and graph helpers) is
tests/helpers/batch_env.py, shared with tests/test_htp_kvcache.py and tests/test_htp_priority.py.
"""
from __future__ import annotations

import mmap

import abi
import numpy as np
import pytest
from abi import NULL, vp
from helpers.batch_env import Env

from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")



@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


# -------------------------------------------------------------------------------- graphs
def build(env: Env, name: str, b: int):
    """y = a + b; z = FullyConnected(relu(a), w) with a, b [b, 4], y [b, 4], z [b, 3]."""
    g = env.graph(name)
    a = env.tensor(g, "a", (b, 4))
    bb = env.tensor(g, "b", (b, 4))
    r = env.tensor(g, "r", (b, 4), type_=Q.QNN_TENSOR_TYPE_NATIVE)
    y = env.tensor(g, "y", (b, 4), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    z = env.tensor(g, "z", (b, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    w = abi.static_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5)
    assert abi.call("tensorCreateGraphTensor", vp(g), w.ptr) == Q.QNN_SUCCESS, "setup: w"
    env.keep.append(w)
    env.node(g, "add", "ElementWiseAdd", [a, bb], [y])
    env.node(g, "relu", "Relu", [a], [r])
    env.node(g, "fc", "FullyConnected", [r, w], [z])
    assert env.finalize(g) == Q.QNN_SUCCESS, f"setup: graphFinalize: {env.rec.errors()}"
    return g, a, bb, y, z


def feeds(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 4)).astype(np.float32), rng.standard_normal((rows, 4)).astype(np.float32))


def expected(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5
    return a + b, np.maximum(a, 0) @ w.T


# ------------------------------------------------------------------------------ behaviour
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_batch_n_equals_separate_executes_and_a_graph_prepared_at_n_b(env, n):
    b = 2
    g, a, bt, y, z = build(env, "g", b)
    big, A, B, Y, Z = build(env, "g_big", n * b)
    xa, xb = feeds(n * b, seed=n)
    got_y, got_z = env.run(g, [(a, xa), (bt, xb)], [(y, (n * b, 4)), (z, (n * b, 3))])
    sep = [env.run(g, [(a, xa[k * b:(k + 1) * b]), (bt, xb[k * b:(k + 1) * b])], [(y, (b, 4)), (z, (b, 3))])
           for k in range(n)]
    np.testing.assert_array_equal(got_y, np.concatenate([s[0] for s in sep]),
                                  err_msg=f"batch {n}: y equals {n} separate executes")
    np.testing.assert_array_equal(got_z, np.concatenate([s[1] for s in sep]),
                                  err_msg=f"batch {n}: z equals {n} separate executes")
    big_y, big_z = env.run(big, [(A, xa), (B, xb)], [(Y, (n * b, 4)), (Z, (n * b, 3))])
    np.testing.assert_array_equal(got_y, big_y, err_msg=f"batch {n}: y equals the graph prepared at batch {n * b}")
    np.testing.assert_allclose(got_z, big_z, rtol=1e-6, atol=1e-6,
                               err_msg=f"batch {n}: z equals the graph prepared at batch {n * b}")
    ey, ez = expected(xa, xb)
    np.testing.assert_allclose(got_y, ey, rtol=1e-6, err_msg="y = a + b")
    np.testing.assert_allclose(got_z, ez, rtol=1e-5, atol=1e-5, err_msg="z = relu(a) @ w^T")


def test_batch_with_memhandle_inputs_and_outputs(env):
    b, n = 2, 3
    g, a, bt, y, z = build(env, "g", b)
    xa, xb = feeds(n * b, seed=7)
    views, handles = [], []
    for shape, init in (((n * b, 4), xa), ((n * b, 4), xb), ((n * b, 4), None), ((n * b, 3), None)):
        fd = env.memfd(4096)
        handles.append(env.register(fd, shape))
        mm = mmap.mmap(fd, 4096)   # the app's view of the shared memory
        env.keep.append(mm)
        view = np.frombuffer(mm, np.float32, count=int(np.prod(shape))).reshape(shape)
        if init is not None:
            view[...] = init
        views.append(view)
    code = env.execute(g, [env.arg(a, dims=(n * b, 4), handle=handles[0]),
                           env.arg(bt, dims=(n * b, 4), handle=handles[1])],
                       [env.arg(y, dims=(n * b, 4), handle=handles[2]), env.arg(z, dims=(n * b, 3), handle=handles[3])])
    assert code == Q.QNN_SUCCESS, f"batched MEMHANDLE execute: {env.rec.errors()}"
    ey, ez = expected(xa, xb)
    np.testing.assert_allclose(views[2], ey, rtol=1e-6, err_msg="MEMHANDLE y written in place for all batches")
    np.testing.assert_allclose(views[3], ez, rtol=1e-5, atol=1e-5, err_msg="MEMHANDLE z written in place")


def test_batched_memhandle_smaller_than_n_batches_is_refused(env):
    b, n = 2, 3
    g, a, bt, y, z = build(env, "g", b)
    fd = env.memfd(4096)
    small = env.register(fd, (b, 4))   # one batch only
    xa, xb = feeds(n * b)
    env.rec.clear()
    code = env.execute(g, [env.arg(a, dims=(n * b, 4), handle=small), env.arg(bt, xb)],
                       [env.arg(y, np.zeros((n * b, 4), np.float32)), env.arg(z, np.zeros((n * b, 3), np.float32))])
    assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR, f"a registration of one batch serves no batch of {n}: {code}"
    assert env.rules_logged() == {"QNNEMU-graphExecute-memhandle-size"}, \
        f"the registered size is checked against n batches: {env.rec.errors()}"


def test_batched_raw_buffer_size_must_be_n_batches(env):
    g, a, bt, y, z = build(env, "g", 2)
    xa, xb = feeds(4)
    env.rec.clear()
    code = env.execute(g, [env.arg(a, xa, size=xa.nbytes // 2), env.arg(bt, xb)],
                       [env.arg(y, np.zeros((4, 4), np.float32)), env.arg(z, np.zeros((4, 3), np.float32))])
    assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "dataSize of one batch with dimensions of two"
    msg = env.messages_for("QNNEMU-graphExecute-buffer-size")
    assert msg and "64 bytes" in msg[-1] and "[4, 4]" in msg[-1], f"buffer size names the batched need: {msg}"


def test_null_dimensions_mean_the_prepared_ones(env):
    g, a, bt, y, z = build(env, "g", 2)
    xa, xb = feeds(2)
    ca = env.arg(a, xa)
    ca.v.dimensions = NULL
    out_y, out_z = np.zeros((2, 4), np.float32), np.zeros((2, 3), np.float32)
    code = env.execute(g, [ca, env.arg(bt, xb)], [env.arg(y, out_y), env.arg(z, out_z)])
    assert code == Q.QNN_SUCCESS, f"NULL dimensions at execute are the prepared dimensions: {env.rec.errors()}"
    np.testing.assert_allclose(out_y, xa + xb, rtol=1e-6, err_msg="executed at batch 1")


def test_batch_profiled_steps_run_per_batch(env):
    """The core runs the plan once per batch: the observer sees each step n times."""
    from qnnemu.core.handles import HANDLES
    g, a, bt, y, z = build(env, "g", 2)
    graph = HANDLES.lookup(g)
    seen = []
    xa, xb = feeds(6)
    out = graph.execute({graph.by_name["a"]: xa, graph.by_name["b"]: xb}, [graph.by_name["y"]],
                        observer=lambda step, s: seen.append(step.node.name), batch=3)
    assert seen == ["add", "relu", "fc"] * 3, f"three batches of three steps: {seen}"
    np.testing.assert_allclose(out[graph.by_name["y"]], xa + xb, rtol=1e-6, err_msg="core batched execute")


# ------------------------------------------------------------------------------ negatives
def test_rule_batch_dims(env):
    """First dimension not a multiple of b, another dimension changed, or another rank."""
    g, a, bt, y, z = build(env, "g", 2)
    outs = [env.arg(y, np.zeros((2, 4), np.float32)), env.arg(z, np.zeros((2, 3), np.float32))]
    xa, xb = feeds(3)
    env.rec.clear()
    code = env.execute(g, [env.arg(a, xa), env.arg(bt, xb[:2])], outs)
    msg = env.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "QNNEMU-graphExecute-batch-dims", "graphExecute",
                          "inputs[0].v2.dimensions")
    assert "'a'" in msg and "[2, 4]" in msg and "[3, 4]" in msg, f"names the tensor and both dims: {msg}"
    for bad, what in ((np.zeros((2, 5), np.float32), "a non-batch dimension"),
                      (np.zeros((2, 4, 1), np.float32), "the rank")):
        env.rec.clear()
        code = env.execute(g, [env.arg(a, bad), env.arg(bt, xb[:2])], outs)
        assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR and env.rules_logged() == {"QNNEMU-graphExecute-batch-dims"}, \
            f"changing {what} is refused with batch-dims: {env.rec.errors()}"


def test_rule_batch_mismatch(env):
    """Different multiples, only some inputs scaled, outputs not scaled."""
    g, a, bt, y, z = build(env, "g", 2)
    xa, xb = feeds(6)
    env.rec.clear()
    code = env.execute(g, [env.arg(a, xa[:4]), env.arg(bt, xb)],
                       [env.arg(y, np.zeros((4, 4), np.float32)), env.arg(z, np.zeros((4, 3), np.float32))])
    msg = env.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "QNNEMU-graphExecute-batch-mismatch",
                          "graphExecute", "inputs[1].v2.dimensions")
    assert "'b'" in msg and "'a'" in msg and "multiple 3" in msg and "with 2" in msg, \
        f"names both tensors and both multiples: {msg}"
    cases = (
        ("only some inputs scaled", [env.arg(a, xa[:4]), env.arg(bt, xb[:2])],
         [env.arg(y, np.zeros((4, 4), np.float32)), env.arg(z, np.zeros((4, 3), np.float32))]),
        ("outputs not scaled", [env.arg(a, xa[:4]), env.arg(bt, xb[:4])],
         [env.arg(y, np.zeros((2, 4), np.float32)), env.arg(z, np.zeros((2, 3), np.float32))]),
        ("one output not scaled", [env.arg(a, xa[:4]), env.arg(bt, xb[:4])],
         [env.arg(y, np.zeros((4, 4), np.float32)), env.arg(z, np.zeros((2, 3), np.float32))]),
    )
    for what, ins, outs in cases:
        env.rec.clear()
        code = env.execute(g, ins, outs)
        assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR and \
            env.rules_logged() == {"QNNEMU-graphExecute-batch-mismatch"}, f"{what}: refused: {env.rec.errors()}"
