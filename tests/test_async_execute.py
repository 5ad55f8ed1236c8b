"""QnnGraph_executeAsync (qnnemu/abi/async_execute.py; issue 14 item 4): queued executes run by
worker threads and reported through the app's notify function; arguments checked at the call;
the context's ASYNC_EXECUTION_QUEUE_DEPTH bounds the queue; requests of different priorities are
dispatched by the HTP scheduler (a HIGH async execute pre-empts a running LOW one);
contextFree drains the queue first."""
from __future__ import annotations

import time

import numpy as np
import pytest

from qnnemu.abi import graph_api
from qnnemu.client import Backend, QnnCallError, ffi, graph_priority_config
from qnnemu.errors import QnnError
from qnnemu.headers import Q

pytest.importorskip("qnnemu._kernels")
M, K, OPS = 192, 768, 8


def _relu_graph(ctx, name="g", configs=()):
    g = ctx.graph(name, configs=list(configs))
    x = g.input("x", (4, 8))
    g.node("Relu", [x], [("y", (4, 8), np.float32)], app_read=True)
    g.finalize()
    return g


def _long_graph(ctx, name, priority):
    rng = np.random.default_rng(3)
    g = ctx.graph(name, configs=[graph_priority_config(priority)])
    x = g.input("x", (M, K))
    for i in range(OPS):
        w = g.static(f"w{i}", (rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32))
        x = g.node("MatMul", [x, w], [(f"y{i}", (M, K), np.float32)], app_read=i == OPS - 1)
    g.finalize()
    return g


def _depth_config(depth: int):
    c = ffi.new("QnnContext_Config_t *")
    c.option = Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH
    c.asyncExeQueueDepth.type = Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC
    c.asyncExeQueueDepth.depth = depth
    return c


def test_queued_executes_notify_with_the_sync_results():
    a = (np.arange(32, dtype=np.float32).reshape(4, 8) - 10) / 3
    with Backend() as be:
        g = _relu_graph(be.context())
        want = g.execute({"x": a})["y"]
        pending = [g.execute_async({"x": a * (k + 1)}) for k in range(6)]
        for k, p in enumerate(pending):
            out = p.wait(10)["y"]
            assert p.status == Q.QNN_SUCCESS, f"execute {k} notified QNN_SUCCESS"
            assert np.array_equal(out, np.maximum(a * (k + 1), 0)), f"execute {k}: the sync result of its inputs"
        assert np.array_equal(want, np.maximum(a, 0)), "the sync execute agrees"


def test_arguments_are_checked_at_the_call():
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("unfinalized")
        x = g.input("x", (4, 8))
        g.node("Relu", [x], [("y", (4, 8), np.float32)], app_read=True)
        with pytest.raises(QnnCallError) as exc:
            g.execute_async({"x": np.zeros((4, 8), np.float32)})
        assert exc.value.code == Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, "not finalized: refused at the call"
        cb = ffi.callback("void(void *, Qnn_NotifyStatus_t)", lambda p, s: None)
        code = be.fn.graphExecuteAsync(ffi.cast("Qnn_GraphHandle_t", 0xDEAD0010), ffi.NULL, 0, ffi.NULL, 0,
                                       ffi.NULL, ffi.NULL, cb, ffi.NULL)
        assert code == Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "a bad graph handle is refused at the call"


def test_a_failed_execute_is_notified(monkeypatch):
    def fail(job, signal):
        raise QnnError(Q.QNN_GRAPH_ERROR_GENERAL, "graphExecuteAsync: injected failure")
    with Backend() as be:
        g = _relu_graph(be.context())
        monkeypatch.setattr(graph_api, "run_execute_job", fail)
        p = g.execute_async({"x": np.ones((4, 8), np.float32)})
        with pytest.raises(QnnCallError) as exc:
            p.wait(10)
        assert p.status == Q.QNN_GRAPH_ERROR_GENERAL == exc.value.code, "the notify function carries the error"


def test_queue_depth_bounds_the_queue():
    """ASYNC_EXECUTION_QUEUE_DEPTH 1: a second call waits until the first execute was notified."""
    x = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    with Backend() as be:
        cfg = _depth_config(1)
        ctx = be.context([cfg])
        g = _long_graph(ctx, "long", Q.QNN_PRIORITY_NORMAL)
        first = g.execute_async({"x": x})
        second = g.execute_async({"x": x})        # blocks until the first is done
        assert first.done(), "with depth 1 the second call returned after the first execute's notification"
        second.wait(30)
        ctx2 = be.context()
        g2 = _long_graph(ctx2, "long2", Q.QNN_PRIORITY_NORMAL)
        a, b = g2.execute_async({"x": x}), g2.execute_async({"x": x})
        assert not a.done() or not b.done(), "the default depth queues both at once"
        a.wait(30), b.wait(30)


def test_high_async_execute_preempts_a_low_one():
    x = np.random.default_rng(2).standard_normal((M, K)).astype(np.float32)
    with Backend() as be:
        ctx = be.context()
        low = _long_graph(ctx, "low", Q.QNN_PRIORITY_LOW)
        high = _relu_graph(ctx, "high", [graph_priority_config(Q.QNN_PRIORITY_HIGH)])
        prof = be.profile("basic")
        t0 = time.perf_counter()
        low.execute({"x": x}, profile=prof)
        solo = time.perf_counter() - t0
        for _ in range(5):
            p_low = low.execute_async({"x": x}, profile=prof)
            time.sleep(solo / 3)
            p_high = high.execute_async({"x": np.ones((4, 8), np.float32)})
            p_high.wait(30)
            high_done_first = not p_low.done()
            p_low.wait(30)
            yields = [e["value"] for e in prof.events()
                      if e["type"] == Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT]
            if high_done_first and yields and yields[0] >= 1:
                break
        assert high_done_first, "the HIGH execute finished while the LOW one was still running"
        assert yields and yields[0] >= 1, f"the LOW async execute yielded to it: {yields}"


def test_context_free_drains_the_queue():
    with Backend() as be:
        ctx = be.context()
        g = _relu_graph(ctx)
        pending = [g.execute_async({"x": np.full((4, 8), k - 3, np.float32)}) for k in range(8)]
        ctx.free()
        assert all(p.done() and p.status == Q.QNN_SUCCESS for p in pending), \
            "contextFree returned after every queued execute was notified"
