"""QnnGraph_executeAsync (qnnemu/abi/async_execute.py; issue 14 item 4): queued executes run by
worker threads and reported through the app's notify function; arguments checked at the call;
the context's ASYNC_EXECUTION_QUEUE_DEPTH bounds the queue; requests of different priorities are
dispatched by the HTP scheduler (a HIGH async execute pre-empts a running LOW one);
contextFree drains the queue first."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from vendor import vendor_library

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


_RESUBMIT_FROM_NOTIFY = textwrap.dedent("""
    import os, threading
    import numpy as np
    from qnnemu.client import Backend, ffi
    from qnnemu.headers import Q
    cfg = ffi.new("QnnContext_Config_t *")
    cfg.option = Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH
    cfg.asyncExeQueueDepth.type = Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC
    cfg.asyncExeQueueDepth.depth = 1
    a = np.arange(32, dtype=np.float32).reshape(4, 8) - 10
    with Backend() as be:
        g = be.context([cfg]).graph("g")
        x = g.input("x", (4, 8))
        g.node("Relu", [x], [("y", (4, 8), np.float32)], app_read=True)
        g.finalize()
        cin, n_in, cout, n_out, results, keep = g._io({"x": a})
        statuses, codes, done = [], [], threading.Event()

        def notify(_param, status):
            statuses.append(int(status.error))
            if len(statuses) < 3:     # the app queues its next execute from the notify function
                codes.append(be.fn.graphExecuteAsync(g.handle, cin, n_in, cout, n_out, ffi.NULL, ffi.NULL,
                                                     cb, ffi.NULL))
            else:
                done.set()
        cb = ffi.callback("void(void *, Qnn_NotifyStatus_t)", notify)
        first = be.fn.graphExecuteAsync(g.handle, cin, n_in, cout, n_out, ffi.NULL, ffi.NULL, cb, ffi.NULL)
        ok = done.wait(20)
        print(first, codes, statuses, ok, bool(np.array_equal(results["y"], np.maximum(a, 0))), flush=True)
        if not ok:
            os._exit(3)   # deadlocked: contextFree would wait forever
""")


def test_notify_function_may_queue_the_next_execute():
    """With depth 1, an app that queues its next execute from the notify function is not blocked
    by the slot of the execute being notified (it takes that slot over).  In a subprocess: a
    regression deadlocks, and the test then fails instead of hanging."""
    proc = subprocess.run([sys.executable, "-c", _RESUBMIT_FROM_NOTIFY], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, \
        f"re-submitting from the notify function deadlocked: {proc.stdout!r} {proc.stderr[-800:]!r}"
    assert proc.stdout.split() == ["0", "[0,", "0]", "[0,", "0,", "0]", "True", "True"], \
        f"three chained executes succeeded and notified QNN_SUCCESS with the right output: {proc.stdout!r}"


_VENDOR_ASYNC_PROBE = textwrap.dedent("""
    import threading
    import numpy as np
    from qnnemu.client import Backend, QnnCallError, ffi
    from qnnemu.headers import Q

    def depth(d, kind):
        c = ffi.new("QnnContext_Config_t *")
        c.option = Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH
        c.asyncExeQueueDepth.type = kind
        c.asyncExeQueueDepth.depth = d
        return c
    NUMERIC = Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC
    with Backend(LIBRARY, log_level="error") as be:
        found = {}
        for label, cfgs in (("none", []), ("depth0", [depth(0, NUMERIC)]), ("depth1", [depth(1, NUMERIC)]),
                            ("depth1000", [depth(1000, NUMERIC)])):
            ctx = be.context(cfgs)
            g = ctx.graph("g" + label)
            x = g.input("x", (4, 8))
            g.node("Relu", [x], [("y", (4, 8), np.float32)], app_read=True)
            g.finalize()
            notified = threading.Event()
            cb = ffi.callback("void(void *, Qnn_NotifyStatus_t)", lambda p, s: notified.set())
            cin, n_in, cout, n_out, results, keep = g._io({"x": np.ones((4, 8), np.float32)})
            code = be.fn.graphExecuteAsync(g.handle, cin, n_in, cout, n_out, ffi.NULL, ffi.NULL, cb, ffi.NULL)
            notified.wait(10 if code == Q.QNN_SUCCESS else 0.2)   # (a refused call: a short look)
            cfg = depth(2, NUMERIC)
            set_code = be.fn.contextSetConfig(ctx.handle, ffi.new("QnnContext_Config_t *[]", [cfg, ffi.NULL]))
            found[label] = (code, notified.is_set(), set_code)
        print(repr(found))
""")


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime-qnn (the vendor's libQnnHtp.so) is not installed")
def test_the_vendors_x86_library_has_no_async_execute():
    """Probe (QNN 2.51 x86-64 libQnnHtp.so): contextCreate accepts ASYNC_EXECUTION_QUEUE_DEPTH (0, 1,
    1000), graphExecuteAsync answers QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE and never notifies,
    contextSetConfig of the depth answers 1000 too.  qnnemu accepts the same configs and queues
    the executes as the device backend does (so it is a superset: nothing the vendor accepts is refused)."""
    import ast
    import os

    from vendor import vendor_env
    env = {**os.environ, **vendor_env()}
    script = f"LIBRARY = {str(vendor_library())!r}\n" + _VENDOR_ASYNC_PROBE
    vendor = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert vendor.returncode == 0, f"the vendor probe ran: {vendor.stderr[-800:]!r}"
    found = ast.literal_eval(vendor.stdout.strip().splitlines()[-1])
    unsupported = Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE
    assert found == dict.fromkeys(("none", "depth0", "depth1", "depth1000"), (unsupported, False, unsupported)), \
        f"the vendor takes the depth at contextCreate, refuses async execute and the depth at contextSetConfig: {found}"
    ours = subprocess.run([sys.executable, "-c", "LIBRARY = None\n" + _VENDOR_ASYNC_PROBE],
                          capture_output=True, text=True, timeout=300)
    assert ours.returncode == 0, f"the qnnemu probe ran: {ours.stderr[-800:]!r}"
    found = ast.literal_eval(ours.stdout.strip().splitlines()[-1])
    assert found == dict.fromkeys(("none", "depth0", "depth1", "depth1000"), (Q.QNN_SUCCESS, True, Q.QNN_SUCCESS)), \
        f"qnnemu accepts every depth the vendor accepts and runs the async execute: {found}"
