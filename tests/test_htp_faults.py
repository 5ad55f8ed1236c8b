"""cDSP sessions of loaded contexts and injected faults through the real C ABI (QNN HTP backend
documentation, "Model Loading Across Multiple Sessions", "I/O Buffer Registration Failure",
"SubSystem Restart (SSR)"; qnnemu/htp/runtime.py, qnnemu/core/faults.py): the session a context
lands in, a full process refusing a load, the QNNEMU_FAULTS kinds, a SubSystem Restart
invalidating the contexts until they are re-created, and the C fast path of graphExecute staying
withdrawn while a fault is armed on it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import OK, Env

from qnnemu.core import faults
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import runtime as rt

pytestmark = pytest.mark.skipif(not abi.library_available(), reason="libQnnHtpEmu.so not built")


@pytest.fixture
def env():
    faults.clear()
    previous = rt.use_sessions(None)
    e = Env()
    try:
        yield e
    finally:
        faults.clear()
        e.close()
        rt.use_sessions(previous)


@pytest.fixture
def saved(env):
    """A two-graph context's binary and its weights; the source context is freed."""
    ctx, weights = env.saved_context(2)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return blob, weights


def dense(x, wb):
    """The context helper's graph: FullyConnected(w, b) -> Relu."""
    w, b = wb
    return np.maximum(x @ w.T + b, 0)


X = np.arange(4, dtype=np.float32).reshape(1, 4) / 4


def test_contexts_fill_sessions_first_fit(env, saved):
    blob, _ = saved
    # sessions scaled so that two of these binaries fit one (usable = 15/16 of the VA)
    rt.use_sessions(rt.SessionPool(va_bytes=(len(blob) * 2 + 100) * 16 // 15, limit=4))
    handles = []
    for _ in range(5):
        code, ctx = env.load(blob)
        assert code == OK, f"contextCreateFromBinary returned {code}"
        handles.append(ctx)
    assert [HANDLES.lookup(h).session for h in handles] == [0, 0, 1, 1, 2], \
        "two binaries per session, the next opens a new session"
    assert any("cDSP session #2" in m for _, m in env.rec.records), "the session is logged at load"
    env.free_context(handles[1])
    code, ctx = env.load(blob)
    assert code == OK and HANDLES.lookup(ctx).session == 0, "a freed place in session #0 is taken first"
    for h in [*handles[:1], *handles[2:], ctx]:
        env.free_context(h)


def test_context_session_full(env, saved):
    blob, _ = saved
    rt.use_sessions(rt.SessionPool(va_bytes=len(blob) * 16 // 15 + 16, limit=1))
    code, first = env.load(blob)
    assert code == OK, "the first context fits the only session"
    env.rec.clear()
    code, _ = env.load(blob)
    env.rec.assert_rule(code, Q.QNN_COMMON_ERROR_MEM_ALLOC, "QNNEMU-context-session-full",
                        "contextCreateFromBinary", "binaryBufferSize")
    assert len(HANDLES.lookup(env.be).contexts) == 1, "the refused context was freed"
    env.free_context(first)


def test_io_mem_estimation_moves_context_to_next_session(env, saved):
    blob, _ = saved
    rt.use_sessions(rt.SessionPool(va_bytes=(len(blob) * 2 + 20) * 16 // 15, limit=4))
    est = env.context_configs({"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_IO_MEM_ESTIMATION,
                                          "ioMemEstimation": True}})
    code, a = env.load(blob)
    assert code == OK, "plain load"
    code, b = env.load(blob, configs=est)
    assert code == OK, "load with IO_MEM_ESTIMATION"
    # two graphs x (1x4 + 1x3) float32 = 56 bytes of I/O reserved: no longer fits session #0
    assert HANDLES.lookup(b).session == 1, "the reserved I/O space does not fit session #0"
    assert rt.process_sessions().sessions[1].io_reserved[HANDLES.lookup(b)] == 56, "I/O of both graphs reserved"
    env.free_context(a)
    env.free_context(b)


def test_ssr_invalidates_contexts_until_recreated(env, saved):
    blob, weights = saved
    code, ctx = env.load(blob)
    assert code == OK, "load"
    g = env.retrieve(ctx, "g0")
    np.testing.assert_allclose(env.run(g, X), dense(X, weights["g0"]), rtol=1e-2, atol=1e-2)
    faults.arm("ssr", "graphExecute", 1)
    env.rec.clear()
    y = np.zeros((1, 3), np.float32)
    inp, out = abi.tensor("x", (1, 4)), abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    abi.set_buffer(inp, X.copy())
    abi.set_buffer(out, y)
    args = (vp(g), abi.tensor_array([inp], env.keep), 1, abi.tensor_array([out], env.keep), 1, NULL, NULL)
    env.rec.assert_rule(abi.call("graphExecute", *args), Q.QNN_COMMON_ERROR_SYSTEM_COMMUNICATION,
                        "QNNEMU-fault-ssr", "graphExecute", "QNNEMU_FAULTS")
    assert faults.armed() == [], "the fault fired once and is gone"
    env.rec.clear()
    env.rec.assert_rule(abi.call("graphExecute", *args), Q.QNN_COMMON_ERROR_SYSTEM_COMMUNICATION,
                        "QNNEMU-context-ssr-invalidated", "graphExecute", "Graph")
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySize", vp(ctx), size) == Q.QNN_COMMON_ERROR_SYSTEM_COMMUNICATION, \
        "the invalidated context answers 1007 too"
    env.free_context(ctx)
    code, fresh = env.load(blob)
    assert code == OK, "a context created after the restart loads"
    g = env.retrieve(fresh, "g1")
    np.testing.assert_allclose(env.run(g, X), dense(X, weights["g1"]), rtol=1e-2, atol=1e-2,
                               err_msg="...and computes")
    env.free_context(fresh)


def test_fault_session_exhausted(env, saved):
    blob, _ = saved
    faults.arm("session", "contextCreateFromBinary", 2)
    code, first = env.load(blob)
    assert code == OK, "the first load is not the armed call"
    env.rec.clear()
    code, _ = env.load(blob)
    env.rec.assert_rule(code, Q.QNN_COMMON_ERROR_MEM_ALLOC, "QNNEMU-fault-session-exhausted",
                        "contextCreateFromBinary", "QNNEMU_FAULTS")
    env.free_context(first)


def test_fault_vtcm_timeout_withdraws_fast_path():
    """A graph compiled wholly to C gets graphExecute's C fast path after one execute; arming a
    fault on graphExecute withdraws it, every execute then runs the checked entry (counted)."""
    from qnnemu.abi import fast_execute
    from qnnemu.client import Backend, QnnCallError
    faults.clear()
    with Backend(None, log_level="error") as be:
        g = be.context().graph("qd")
        x = g.input("x", (2, 4), np.float32)
        q = g.node("Quantize", [x], [("q", (2, 4), np.dtype("uint8"), (0.05, -128))])
        g.node("Dequantize", [q], [("y", (2, 4), np.float32)], app_read=True)
        g.finalize()
        feed = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
        ref = g.execute({"x": feed})["y"]
        core = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))
        assert fast_execute.registered() >= 1 or not fast_execute.enabled(), "the graph got a C fast path"
        try:
            faults.arm("vtcm", "graphExecute", 3)
            assert fast_execute.registered() == 0, "arming a graphExecute fault withdraws the fast path"
            before = core.executions
            for _ in range(2):
                np.testing.assert_array_equal(g.execute({"x": feed})["y"], ref, err_msg="results unchanged")
            assert core.executions == before + 2 and fast_execute.registered() == 0, \
                "both executes ran the checked entry; no fast path while the fault is armed"
            with pytest.raises(QnnCallError) as err:
                g.execute({"x": feed})
            assert err.value.code == Q.QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE, "the third execute: 1010"
            assert "[QNNEMU-fault-vtcm-timeout] graphExecute: QNNEMU_FAULTS" in err.value.message, \
                f"rule, function and control named: {err.value.message}"
            np.testing.assert_array_equal(g.execute({"x": feed})["y"], ref, err_msg="the next execute works")
        finally:
            faults.clear()


def test_fault_memregister(env):
    faults.arm("memreg", "memRegister", 1)
    ctx = env.context()
    handles = ffi.new("Qnn_MemHandle_t[1]")
    env.rec.clear()
    env.rec.assert_rule(abi.call("memRegister", vp(ctx), NULL, 1, handles), Q.QNN_MEM_ERROR_MAPPING,
                        "QNNEMU-fault-memregister", "memRegister", "QNNEMU_FAULTS")
    env.free_context(ctx)


@pytest.mark.parametrize("spec", ["ssr", "ssr@graphExecute", "boom@graphExecute:1", "ssr@graphExecute:0",
                                  "ssr@graph Execute:1"])
def test_fault_spec_errors(spec):
    with pytest.raises(ValueError, match="kind@entry:n"):
        faults.parse(spec)


def test_faults_env_variable():
    """QNNEMU_FAULTS arms faults when the library loads (a fresh process)."""
    code = ("from qnnemu.client import Backend, QnnCallError\n"
            "be = Backend(log_level='error')\n"
            "be.context()\n"
            "try:\n    be.context()\nexcept QnnCallError as e:\n    print(e.code, e.message)\n")
    env = dict(os.environ, QNNEMU_FAULTS="session@contextCreate:2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("1002 ") and "QNNEMU-fault-session-exhausted" in out.stdout, \
        f"the second contextCreate got the injected fault: {out.stdout!r} {out.stderr[-500:]!r}"


ORT_SSR = textwrap.dedent("""
    import json, sys, numpy as np, onnxruntime as ort
    from onnx import TensorProto, helper
    import qnnemu
    from qnnemu.core import faults
    from qnnemu.onnxruntime import qnn_device
    dev = qnn_device()
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    ctx_model = sys.argv[1]

    def session(model, generate=False):
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        if generate:
            so.add_session_config_entry("ep.context_enable", "1")
            so.add_session_config_entry("ep.context_file_path", ctx_model)
        so.add_provider_for_devices([dev], {"backend_path": qnnemu.backend_library_path()})
        s = ort.InferenceSession(model, so)
        s.disable_fallback()
        return s

    def run(s):
        try:
            return "ok" if np.array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0)) else "wrong"
        except Exception as e:
            return "error: " + str(e).strip().splitlines()[0]

    out = {}
    s = session(m.SerializeToString())           # compiled in memory: nothing to reload
    faults.arm("ssr", "graphExecute", 2)
    out["memory"] = [run(s), run(s), run(s)]
    del s
    out["new_session"] = run(session(m.SerializeToString()))
    session(m.SerializeToString(), generate=True)  # writes the EP context model + context binary
    s = session(ctx_model)
    faults.arm("ssr", "graphExecute", 2)
    out["from_binary"] = [run(s), run(s), run(s)]
    out["armed_after"] = len(faults.armed())
    print(json.dumps(out))
""")


def test_onnxruntime_through_injected_ssr(tmp_path):
    """What ONNX Runtime's QNN EP does with a SubSystem Restart (1007 from graphExecute): a model
    compiled in memory fails with DEVICE_RESET ("SSR detected. Recovery not supported (no context
    binary on disk)") until a new session is made; a model loaded from an EP context binary is
    recovered by the EP (it re-creates the context from the binary and the run succeeds)."""
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    r = subprocess.run([sys.executable, "-c", ORT_SSR, str(tmp_path / "m_ctx.onnx")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the ORT script failed: {r.stderr[-1500:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    first, second, third = out["memory"]
    assert first == "ok", f"the first run works: {first}"
    assert "DEVICE_RESET" in second and "SSR detected" in second, f"the EP reports the SSR: {second}"
    assert "DEVICE_RESET" in third, f"the invalidated context keeps failing: {third}"
    assert out["new_session"] == "ok", "a new session (new context) works"
    assert out["from_binary"] == ["ok", "ok", "ok"] and out["armed_after"] == 0, \
        f"from an EP context binary the EP recovers from the SSR it got: {out}"
