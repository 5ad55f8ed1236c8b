"""Executes in application threads scheduled by the shared HTP's rules (QNN "HTP Yielding and
Pre-Emption", QNN HTP backend documentation "Graph Priority"; qnnemu/core/scheduling.py,
csrc/eng_sched.c; issue 14 item 2): a LOW graph looping in one thread yields at an op boundary
when a HIGH graph's execute arrives in another, HIGH runs, LOW resumes, both outputs unchanged;
LOW's BASIC profile counts its yields.  Through the C ABI (qnnemu.client), on the Python execute
path and on graphExecute's C fast path."""
from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import pytest
from vendor import vendor_library

from qnnemu.client import Backend, graph_priority_config
from qnnemu.headers import Q

_kernels = pytest.importorskip("qnnemu._kernels")
LOW_OPS = 10
needs_vendor = pytest.mark.skipif(vendor_library() is None,
                                  reason="onnxruntime-qnn (the vendor's libQnnHtp.so) is not installed")
M, K = 192, 768


def _low_graph(ctx, rng):
    g = ctx.graph("low", configs=[graph_priority_config(Q.QNN_PRIORITY_LOW)])
    x = g.input("x", (M, K))
    for i in range(LOW_OPS):
        w = g.static(f"w{i}", (rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32))
        x = g.node("MatMul", [x, w], [(f"y{i}", (M, K), np.float32)], app_read=i == LOW_OPS - 1)
    g.finalize()
    return g


def _high_graph(ctx, rng):
    g = ctx.graph("high", configs=[graph_priority_config(Q.QNN_PRIORITY_HIGH)])
    x = g.input("x", (4, 64))
    w = g.static("w", rng.standard_normal((64, 64)).astype(np.float32))
    g.node("MatMul", [x, w], [("y", (4, 64), np.float32)], app_read=True)
    g.finalize()
    return g


def _timed(fn, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _yield_count(events) -> int:
    return sum(int(e["value"]) for e in events
               if e["type"] == Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT)


@pytest.mark.parametrize("low_path", ["python", "fast"])
def test_high_preempts_a_looping_low_graph(low_path):
    rng = np.random.default_rng(5)
    x_low = rng.standard_normal((M, K)).astype(np.float32)
    x_high = rng.standard_normal((4, 64)).astype(np.float32)
    with Backend() as be:
        ctx = be.context()
        low, high = _low_graph(ctx, rng), _high_graph(ctx, rng)
        prof = be.profile("basic") if low_path == "python" else None
        last = f"y{LOW_OPS - 1}"
        ref_low = low.execute({"x": x_low})[last]
        ref_high = high.execute({"x": x_high})["y"]
        low_solo = statistics.median(_timed(lambda: low.execute({"x": x_low}, profile=prof), 3))
        high_solo = statistics.median(_timed(lambda: high.execute({"x": x_high}), 20))
        low_op = low_solo / LOW_OPS
        stop, errors, yields, low_runs = threading.Event(), [], [], [0]
        before = int(_kernels.lib.qe_sched_total_yields())

        def loop_low():
            try:
                while not stop.is_set():
                    out = low.execute({"x": x_low}, profile=prof)
                    if prof is not None:
                        yields.append(_yield_count(prof.events()))
                    if not np.array_equal(out[last], ref_low):
                        errors.append("LOW's output changed under pre-emption")
                    low_runs[0] += 1
            except Exception as exc:
                errors.append(repr(exc))
        t = threading.Thread(target=loop_low)
        t.start()
        try:
            time.sleep(low_solo)          # LOW is running
            latencies = []
            for _ in range(12):
                t0 = time.perf_counter()
                out = high.execute({"x": x_high})
                latencies.append(time.perf_counter() - t0)
                assert np.array_equal(out["y"], ref_high), "HIGH's output is unchanged"
                time.sleep(low_op * 1.7)  # land somewhere inside a LOW op
        finally:
            stop.set()
            t.join()
        assert not errors, errors
        assert low_runs[0] >= 1, "LOW ran while HIGH executed"
        contended = statistics.median(latencies)
        assert contended <= high_solo + 1.5 * low_op + 0.003, \
            (f"HIGH's median latency {contended * 1e3:.2f} ms within one LOW op ({low_op * 1e3:.2f} ms) of its "
             f"solo latency {high_solo * 1e3:.2f} ms")
        total = int(_kernels.lib.qe_sched_total_yields()) - before
        assert total >= 1, f"the scheduler counted LOW's yields: {total}"
        if prof is not None:
            assert sum(yields) >= 1, f"LOW's BASIC profile reports its yields: {yields}"
            assert sum(yields) <= total, "the profile's yields are the scheduler's"


def test_equal_priorities_run_side_by_side_and_strict_mode_takes_turns(monkeypatch):
    """Two NORMAL graphs: by default they overlap on the host (the emulator's throughput); with
    QNNEMU_HTP_STRICT=1 they take turns as two QNN graphs on one device do (no execute of one
    starts while the other runs)."""
    from qnnemu.core import scheduling
    lib = _kernels.lib
    ffi = _kernels.ffi
    for strict, want_overlap in ((False, True), (True, False)):
        monkeypatch.setenv("QNNEMU_HTP_STRICT", "1" if strict else "0")
        assert scheduling._lib() is not None
        assert lib.qe_sched_strict() == int(strict), "QNNEMU_HTP_STRICT reaches the scheduler"
        a, b = ffi.new("qe_sched_exec *"), ffi.new("qe_sched_exec *")
        assert lib.qe_sched_begin(a, 63, 0xC0) == 0
        started = threading.Event()

        def second(b=b, started=started):
            lib.qe_sched_begin(b, 63, 0xC0)
            started.set()
            lib.qe_sched_end(b)
        th = threading.Thread(target=second)
        th.start()
        overlapped = started.wait(0.3)
        lib.qe_sched_end(a)
        th.join()
        assert overlapped == want_overlap, f"strict={strict}: the second NORMAL execute started at once: {overlapped}"
        assert b.waited_first == int(not want_overlap), "the record says whether it waited"
    monkeypatch.delenv("QNNEMU_HTP_STRICT")
    scheduling._lib()


def test_lower_priority_waits_for_a_running_higher_one():
    lib, ffi = _kernels.lib, _kernels.ffi
    high, low = ffi.new("qe_sched_exec *"), ffi.new("qe_sched_exec *")
    assert lib.qe_sched_begin(high, 62, 0xBB) == 0
    started = threading.Event()

    def low_thread():
        lib.qe_sched_begin(low, 62, 0xC5)
        started.set()
        lib.qe_sched_end(low)
    th = threading.Thread(target=low_thread)
    th.start()
    assert not started.wait(0.2), "LOW does not start while HIGH runs"
    assert lib.qe_sched_point() == 0, "nothing asks HIGH to yield"
    lib.qe_sched_end(high)
    th.join()
    assert started.is_set() and low.waited_first == 1 and low.wait_ns > 0, "LOW started after HIGH ended"


def test_exec_record_fits_the_fast_paths_storage():
    assert _kernels.ffi.sizeof("qe_sched_exec") <= 512, "csrc/fast_execute.h reserves 512 bytes for it"


@needs_vendor
def test_the_vendor_yields_too():
    """The reference: the vendor's x86 libQnnHtp.so pre-empts a LOW graph looping in one thread
    when a HIGH graph executes in another, and LOW's BASIC profile reports event 3009 >= 1 (it
    also logs "Releasing VTCM" / "Releasing and Re-Acquiring VTCM" at WARNING)."""
    rng = np.random.default_rng(1)
    m, k, ops = 64, 256, 4
    with Backend(str(vendor_library()), log_level="error") as be:
        ctx = be.context()
        low = ctx.graph("low", configs=[graph_priority_config(Q.QNN_PRIORITY_LOW)])
        x = low.input("x", (m, k))
        for i in range(ops):
            w = low.static(f"w{i}", (rng.standard_normal((k, k)) / 16).astype(np.float32))
            x = low.node("MatMul", [x, w], [(f"y{i}", (m, k), np.float32)], app_read=i == ops - 1)
        low.finalize()
        high = _high_graph(ctx, rng)
        prof = be.profile("basic")
        x_low = rng.standard_normal((m, k)).astype(np.float32)
        x_high = rng.standard_normal((4, 64)).astype(np.float32)
        low.execute({"x": x_low}, profile=prof)
        assert _yield_count(prof.events()) == 0, "alone, LOW does not yield"
        stop, counts = threading.Event(), []

        def loop():
            while not stop.is_set():
                low.execute({"x": x_low}, profile=prof)
                counts.append(_yield_count(prof.events()))
        th = threading.Thread(target=loop)
        th.start()
        try:
            time.sleep(0.1)
            for _ in range(5):
                high.execute({"x": x_high})
                time.sleep(0.05)
        finally:
            stop.set()
            th.join()
    assert sum(counts) >= 1, f"the vendor's LOW executes report yields: {counts}"


def test_optrace_runtrace_shows_the_preemption():
    """The pre-emptions of a real execute reach its optrace run record as spans, and the profile
    viewer's chrometrace draws them on the graph's "Yields" lane (Trace Event Format checked)."""
    import json

    from helpers.trace_check import assert_valid, x_events

    from qnnemu.client import ffi
    from qnnemu.tools.viewer import chrometrace
    rng = np.random.default_rng(9)
    x_low = rng.standard_normal((M, K)).astype(np.float32)
    with Backend() as be:
        ctx = be.context()
        low, high = _low_graph(ctx, rng), _high_graph(ctx, rng)
        prof = be.profile("detailed")
        cfg = ffi.new("QnnProfile_Config_t *")
        cfg.option = Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE
        cfg.enableOptrace = 1
        be.call("profileSetConfig", prof.handle, ffi.new("const QnnProfile_Config_t *[2]", [cfg, ffi.NULL]))
        t0 = time.perf_counter()
        low.execute({"x": x_low})
        solo = time.perf_counter() - t0
        doc = None
        for _ in range(5):
            th = threading.Thread(target=lambda: low.execute({"x": x_low}, profile=prof))
            th.start()
            time.sleep(solo / 3)
            high.execute({"x": np.ones((4, 64), np.float32)})
            th.join()
            ids, n = ffi.new("const QnnProfile_EventId_t **"), ffi.new("uint32_t *")
            be.call("profileGetEvents", prof.handle, ids, n)
            for k in range(n[0]):
                ext = ffi.new("QnnProfile_ExtendedEventData_t *")
                be.call("profileGetExtendedEventData", ids[0][k], ext)
                if ext.v1.unit == Q.QNN_PROFILE_EVENTUNIT_OBJECT:
                    obj = ext.v1.backendOpaqueObject
                    doc = json.loads(bytes(ffi.buffer(obj.opaqueObject.data, obj.opaqueObject.len)))
            if doc and isinstance(doc["execution"]["runs"][0]["yields"], list):
                break
    run = doc["execution"]["runs"][0]
    assert isinstance(run["yields"], list) and run["yields"], f"the run lists its pre-emptions: {run['yields']}"
    assert all(run["start_us"] <= y["start_us"] <= y["end_us"] <= run["end_us"] for y in run["yields"]), \
        "each pre-emption lies inside its execute"
    trace = chrometrace.build_trace([doc])
    assert_valid(trace)
    drawn = x_events(trace, cat="preemption")
    assert len(drawn) == len(run["yields"]), f"one 'yield' slice per pre-emption: {len(drawn)}"


def test_executes_advance_the_device_virtual_clock():
    """Every Python-path execute takes its plan's modelled time on the device's virtual clock
    (qnnemu/htp/runtime.py HtpRuntime.now): a deterministic HTP timeline besides the wall clock."""
    from qnnemu.client import ffi
    from qnnemu.core.handles import HANDLES
    from qnnemu.htp import cost, perf, runtime, settings
    rng = np.random.default_rng(4)
    with Backend() as be:
        g = _high_graph(be.context(), rng)
        core = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))
        rt = runtime.runtime_for(settings.device_model(core).soc)
        prof = be.profile("basic")            # (the Python entry: the C fast path keeps no clock)
        before = rt.now
        for _ in range(3):
            g.execute({"x": np.ones((4, 64), np.float32)}, profile=prof)
        plan = core.htp_plan
        took = cost.cycles_to_us(plan.total_cycles, perf.current_clocks(arch=plan.arch))
        assert rt.now == pytest.approx(before + 3 * took), f"three executes advance the clock by 3 x {took} us"
        s = core.last_schedule
        assert s.virtual_end_us - s.virtual_start_us == pytest.approx(took), "the last execute's virtual span"
        assert [e for e in rt.log if e[2] == "high"][-1][1] == "execute", "the runtime's log has the execute"
