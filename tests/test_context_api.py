"""QnnContext.h context-binary entries through the raw C ABI (tests/abi.py): contextGetBinarySize /
contextGetBinary, incremental binaries, contextFinalize, contextCreateFromBinary (+ WithSignal,
WithCallback, ListAsync), contextValidateBinary and graphRetrieve on loaded contexts
(qnnemu/abi/context_api.py, docs/context-binary.md; QNN HTP backend documentation, "Context Binary
Management", "QnnContext_createFromBinaryListAsync API", "Init Cancellation",
"QnnContext_createFromBinaryWithCallback API").

Graphs are built with the ABI, saved, everything is freed, the binary is loaded back and
executed: outputs must be bit-identical. Leaks are checked on the core's handle table (the
library runs in this interpreter).
"""
from __future__ import annotations

import struct

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import CALLBACKS, Env, Notifications, list_params

from qnnemu.core import binary
from qnnemu.core.context import Context
from qnnemu.core.graph import Graph
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

F32 = Q.QNN_DATATYPE_FLOAT_32
OK = Q.QNN_SUCCESS



@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def live_counts() -> tuple[int, int]:
    return len(HANDLES.live(Context)), len(HANDLES.live(Graph))


X = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)


def reference(w, b, x=X) -> np.ndarray:
    return np.maximum(x @ w.T + b, 0)


def assert_rule(env: Env, code: int, want_code: int, rule: str, func: str, path: str):
    assert code == want_code, f"{rule}: {func} returned {code}, expected {want_code}"
    msgs = env.messages_for(rule)
    assert msgs, f"{rule}: no [{rule}] message reached the app log: {env.rec.records[-5:]}"
    assert func in msgs[-1] and path in msgs[-1], f"{rule}: message names {func} and {path}: {msgs[-1]!r}"


def patched(blob: bytes, fmt: str, offset: int, value) -> bytes:
    out = bytearray(blob)
    struct.pack_into(fmt, out, offset, value)
    return binary.reseal(bytes(out))


# ------------------------------------------------------------------------------ round trips
def test_round_trip_is_bit_identical(env):
    ctx, weights = env.saved_context(2)
    want = {name: env.run(env.retrieve(ctx, name), X) for name in weights}
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    before = live_counts()
    code, loaded = env.load(blob)
    assert code == OK, f"contextCreateFromBinary returned {code}: {env.rec.errors()}"
    assert HANDLES.lookup(loaded) is not None and loaded in env.core_backend.contexts, \
        "the loaded context is registered with its backend"
    for name, (w, b) in weights.items():
        got = env.run(env.retrieve(loaded, name), X)
        assert got.tobytes() == want[name].tobytes(), f"graph {name}: outputs bit-identical after the round trip"
        np.testing.assert_allclose(got, reference(w, b), rtol=1e-6, err_msg=f"{name}: the graph's own result")
    assert env.get_binary(loaded) == blob, "a loaded context serializes to the bytes it was loaded from"
    env.free_context(loaded)
    assert live_counts() == before, "contextFree releases the loaded context and its graphs"


def test_weight_sharing_and_context_tensors_round_trip(env):
    ctx = env.context(env.context_configs({"custom": {
        "option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, "weightSharingEnabled": True}}))
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    shared = abi.static_tensor("shared_w", w)
    assert abi.call("tensorCreateContextTensor", vp(ctx), shared.ptr) == OK, "tensorCreateContextTensor"
    env.keep.append(shared)
    biases = {f"g{i}": rng.standard_normal(3).astype(np.float32) for i in range(2)}
    for name, b in biases.items():
        env.dense_graph(ctx, name, w, b, shared_w=shared)
    same_w = rng.standard_normal((3, 4)).astype(np.float32)
    env.dense_graph(ctx, "s0", same_w, biases["g0"])
    env.dense_graph(ctx, "s1", same_w, biases["g0"])
    want = {n: env.run(env.retrieve(ctx, n), X) for n in ("g0", "g1", "s0", "s1")}
    blob = env.get_binary(ctx)
    info = binary.inspect(blob)
    assert [t.name for t in info.context_tensors] == ["shared_w"], "the context tensor is stored once, at context level"
    assert info.header.weight_sharing, "the binary records weight sharing"
    s_blobs = {t.blob for g in info.graphs if g.name in ("s0", "s1") for t in g.tensors if t.name == "w"}
    assert len(s_blobs) == 1, "identical weights of two graphs are one blob under weight sharing"
    env.free_context(ctx)
    code, loaded = env.load(blob)
    assert code == OK, f"load: {env.rec.errors()}"
    for name, y in want.items():
        assert env.run(env.retrieve(loaded, name), X).tobytes() == y.tobytes(), f"{name}: bit-identical after loading"
    core = HANDLES.lookup(loaded)
    g0, g1 = (core.graphs[n] for n in ("s0", "s1"))
    w0 = next(t for t in g0.tensors.values() if t.name == "w").data
    w1 = next(t for t in g1.tensors.values() if t.name == "w").data
    assert np.shares_memory(w0, w1), "shared weights stay one array after loading"
    env.free_context(loaded)


def test_profile_records_init_event(env):
    ctx, _ = env.saved_context(1)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    out = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(env.be), Q.QNN_PROFILE_LEVEL_BASIC, out) == OK, "profileCreate"
    prof = abi.hval(out[0])
    code, loaded = env.load(blob, profile=prof)
    assert code == OK, "contextCreateFromBinary with a profile"
    ids = ffi.new("const QnnProfile_EventId_t **")
    n = ffi.new("uint32_t *")
    assert abi.call("profileGetEvents", vp(prof), ids, n) == OK and n[0] == 1, "one event for the load"
    data = ffi.new("QnnProfile_EventData_t *")
    assert abi.call("profileGetEventData", ids[0][0], data) == OK
    assert data.type == Q.QNN_PROFILE_EVENTTYPE_INIT and data.unit == Q.QNN_PROFILE_EVENTUNIT_MICROSEC, \
        "contextCreateFromBinary's profile event is INIT in microseconds"
    env.free_context(loaded)
    assert abi.call("profileFree", vp(prof)) == OK


def test_enable_graphs_and_deferred_init(env):
    ctx, weights = env.saved_context(3)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    names = [abi.cstr("g2", env.keep), abi.cstr("g0", env.keep), NULL]
    arr = ffi.new("char *[]", names)
    env.keep.append(arr)
    code, loaded = env.load(blob, env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS,
                                                       "enableGraphs": arr}))
    assert code == OK, f"ENABLE_GRAPHS load: {env.rec.errors()}"
    assert sorted(HANDLES.lookup(loaded).graphs) == ["g0", "g2"], "only the enabled graphs are built"
    assert abi.create("graphRetrieve", vp(loaded), abi.cstr("g1", env.keep))[0] == \
        Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, "a graph left out by ENABLE_GRAPHS cannot be retrieved"
    env.free_context(loaded)

    code, deferred = env.load(blob, env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT,
                                                         "isGraphInitDeferred": 1}))
    assert code == OK, "DEFER_GRAPH_INIT load"
    core = HANDLES.lookup(deferred)
    assert core.graphs == {}, "deferred init: no graph is built at load time"
    g1 = env.retrieve(deferred, "g1")
    assert list(core.graphs) == ["g1"], "graphRetrieve builds just the graph asked for"
    np.testing.assert_allclose(env.run(g1, X), reference(*weights["g1"]), rtol=1e-6)
    assert abi.call("contextFinalize", vp(deferred), NULL) == OK, "contextFinalize"
    assert sorted(core.graphs) == ["g0", "g1", "g2"] and core.deferred is None, "contextFinalize builds the rest"
    assert env.retrieve(deferred, "g1") == g1, "retrieving again gives the same handle"
    env.free_context(deferred)


def test_persistent_binary_uses_the_client_buffer_in_place(env):
    ctx, weights = env.saved_context(1)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    buf = env.buffer(blob)
    out = ffi.new("Qnn_ContextHandle_t *")
    configs = env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, "isPersistentBinary": 1})
    assert abi.call("contextCreateFromBinary", vp(env.be), NULL, configs, buf, len(blob), out, NULL) == OK
    loaded = abi.hval(out[0])
    g = HANDLES.lookup(loaded).graphs["g0"]
    w = next(t for t in g.tensors.values() if t.name == "w").data
    client = np.frombuffer(ffi.buffer(buf, len(blob)), np.uint8)
    assert np.shares_memory(w, client), "PERSISTENT_BINARY: static tensors are views of the client's buffer"
    env.free_context(loaded)


# ------------------------------------------------------------------------------ get binary
def test_get_binary_is_cached_until_the_context_changes(env, monkeypatch):
    ctx, _ = env.saved_context(1)
    calls = []
    real = binary.serialize
    monkeypatch.setattr(binary, "serialize", lambda c, **kw: calls.append(1) or real(c, **kw))
    first = env.get_binary(ctx)
    again = env.get_binary(ctx)
    assert first == again and len(calls) == 1, "size + binary + size + binary serialize once"
    env.dense_graph(ctx, "late", np.ones((3, 4), np.float32), np.zeros(3, np.float32))
    changed = env.get_binary(ctx)
    assert len(calls) == 2 and changed != first and "late" in binary.inspect(changed).graph_names, \
        "a new graph makes the cached binary stale"
    env.free_context(ctx)


def test_get_binary_of_unfinalized_graph_is_not_finalized(env):
    ctx = env.context()
    env.dense_graph(ctx, "open", np.ones((3, 4), np.float32), np.zeros(3, np.float32), finalize=False)
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySize", vp(ctx), size) == Q.QNN_CONTEXT_ERROR_NOT_FINALIZED, \
        "QnnContext.h: NOT_FINALIZED when an entity of the context is not finalized"
    assert env.messages_for("QNNEMU-binary-graph-not-finalized"), "the log names the rule"
    env.free_context(ctx)


def test_rule_get_binary_buffer_too_small(env):
    ctx, _ = env.saved_context(1)
    blob = env.get_binary(ctx)
    buf = ffi.new("char[]", len(blob))
    written = ffi.new("Qnn_ContextBinarySize_t *", 12345)
    code = abi.call("contextGetBinary", vp(ctx), buf, len(blob) - 1, written)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-contextGetBinary-buffer-size",
                "contextGetBinary", "binaryBufferSize")
    assert written[0] == 0, "nothing written"
    env.free_context(ctx)


def incremental_pieces(env, ctx) -> list[tuple[object, int, int]]:
    pieces = []
    for _ in range(1000):
        ptr = ffi.new("const void **")
        start = ffi.new("Qnn_ContextBinarySize_t *")
        size = ffi.new("Qnn_ContextBinarySize_t *")
        assert abi.call("contextGetIncrementalBinary", vp(ctx), ptr, start, size) == OK, "contextGetIncrementalBinary"
        if size[0] == 0:
            assert ptr[0] == NULL, "the end is a NULL piece of size 0"
            return pieces
        pieces.append((ptr[0], int(start[0]), int(size[0])))
    raise AssertionError("no end of the incremental binary")


def test_incremental_binary_reassembles_to_the_binary(env, monkeypatch):
    from qnnemu.abi import context_api
    monkeypatch.setattr(context_api, "INCREMENTAL_PIECE", 64)  # several data pieces
    ctx, _ = env.saved_context(2)
    blob = env.get_binary(ctx)
    pieces = incremental_pieces(env, ctx)
    assert len(pieces) > 2, "header+metadata, then several data pieces"
    out = bytearray(len(blob))
    for ptr, start, size in pieces:
        out[start:start + size] = ffi.buffer(ffi.cast("char *", ptr), size)[:]
    assert bytes(out) == blob, "the pieces cover the binary exactly"
    assert sum(s for _, _, s in pieces) == len(blob), "no overlap"
    for ptr, start, _ in pieces:
        assert abi.call("contextReleaseIncrementalBinary", vp(ctx), ptr, start) == OK, "release each piece"
    assert incremental_pieces(env, ctx)[0][1] == 0, "after the end marker the next call starts over"
    env.free_context(ctx)


def test_rule_release_unknown_incremental_buffer(env):
    ctx, _ = env.saved_context(1)
    [(ptr, start, _), *rest] = incremental_pieces(env, ctx)
    assert abi.call("contextReleaseIncrementalBinary", vp(ctx), ptr, start) == OK
    code = abi.call("contextReleaseIncrementalBinary", vp(ctx), ptr, start)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INCREMENT_INVALID_BUFFER,
                "QNNEMU-contextReleaseIncrementalBinary-buffer", "contextReleaseIncrementalBinary", "binaryBuffer")
    env.free_context(ctx)


def test_rule_release_incremental_buffer_wrong_offset(env):
    ctx, _ = env.saved_context(1)
    (ptr, start, size), *_ = incremental_pieces(env, ctx)
    code = abi.call("contextReleaseIncrementalBinary", vp(ctx), ptr, start + 1)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INCREMENT_INVALID_BUFFER,
                "QNNEMU-contextReleaseIncrementalBinary-offset", "contextReleaseIncrementalBinary", "startOffset")
    env.free_context(ctx)


def test_context_finalize_prepares_the_binary(env, monkeypatch):
    ctx, _ = env.saved_context(1)
    assert abi.call("contextFinalize", vp(ctx), NULL) == OK, "contextFinalize of finalized graphs"
    assert HANDLES.lookup(ctx).binary_cache is not None, "contextFinalize serialized the binary"
    monkeypatch.setattr(binary, "serialize", lambda *a, **k: pytest.fail("served from the cache"))
    env.get_binary(ctx)
    env.free_context(ctx)


def test_rule_context_finalize_with_open_graph(env):
    ctx = env.context()
    env.dense_graph(ctx, "open", np.ones((3, 4), np.float32), np.zeros(3, np.float32), finalize=False)
    code = abi.call("contextFinalize", vp(ctx), NULL)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_NOT_FINALIZED, "QNNEMU-contextFinalize-not-finalized",
                "contextFinalize", "open")
    env.free_context(ctx)


# ------------------------------------------------------------------------------ compatibility, bad binaries
@pytest.fixture
def blob(env):
    ctx, _ = env.saved_context(2)
    data = env.get_binary(ctx)
    env.free_context(ctx)
    env.rec.clear()
    return data


def test_strict_vs_permissive_for_another_arch(env, blob):
    other = patched(blob, "<I", 48, 69)  # htp_arch: v69, the default device is v73
    before = live_counts()
    code, _ = env.load(other, env.strict())
    assert code == Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL, "STRICT: a binary for another arch is suboptimal"
    assert env.messages_for("QNNEMU-binary-suboptimal-device"), "the log line names the rule"
    assert live_counts() == before, "a refused binary leaves nothing behind"
    code, loaded = env.load(other)
    assert code == OK, "PERMISSIVE (the default) loads it"
    assert any("PERMISSIVE" in m for m in env.rec.messages(Q.QNN_LOG_LEVEL_WARN)), "with a WARN line"
    env.free_context(loaded)
    code = abi.call("contextValidateBinary", vp(env.be), NULL, env.strict(), env.buffer(other), len(other))
    assert code == Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL, "contextValidateBinary applies the same rule"
    assert abi.call("contextValidateBinary", vp(env.be), NULL, NULL, env.buffer(other), len(other)) == OK


def test_strict_on_the_same_device_loads(env, blob):
    code, loaded = env.load(blob, env.strict())
    assert code == OK, "STRICT accepts a binary made for this device"
    env.free_context(loaded)


@pytest.mark.parametrize("case,code,rule", [
    ("corrupted", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-crc"),
    ("truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-truncated"),
    ("random", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-magic"),
    ("vendor-like", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "QNNEMU-binary-magic"),
    ("future", Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "QNNEMU-binary-version-future"),
    ("null", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-binary-null"),
])
def test_bad_binaries_are_refused_with_a_log_line(env, blob, case, code, rule):
    bad = {
        "corrupted": lambda: blob[:-20] + bytes([blob[-20] ^ 0x40]) + blob[-19:],
        "truncated": lambda: blob[:len(blob) // 2],
        "random": lambda: np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "vendor-like": lambda: struct.pack("<IIII", 0x2, 0x3, 4096, 0) + bytes(4080),
        "future": lambda: patched(blob, "<I", 8, binary.FORMAT_VERSION + 1),
        "null": lambda: None,
    }[case]()
    before = live_counts()
    got, handle = env.load(bad)
    assert got == code, f"{case}: returned {got}, expected {code}"
    assert handle == 0, f"{case}: no context handle is written"
    errors = env.messages_for(rule)
    assert errors and "contextCreateFromBinary" in errors[-1], f"{case}: an ERROR line names {rule} and the function"
    assert live_counts() == before and not env.core_backend.contexts, f"{case}: nothing left behind"
    want_validate = code
    assert abi.call("contextValidateBinary", vp(env.be), NULL, NULL, NULL if bad is None else env.buffer(bad),
                    len(bad or b"")) == want_validate, f"{case}: contextValidateBinary gives the same code"


def test_rule_context_config_value(env, blob):
    configs = env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS, "enableGraphs": NULL})
    code, _ = env.load(blob, configs)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-context-config-value",
                "contextCreateFromBinary", "config[0].enableGraphs")


def test_load_time_configs_are_accepted_and_recorded(env, blob):
    configs = env.context_configs(
        {"option": Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, "memoryLimitHint": 512},
        {"option": Q.QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY,
         "binaryCompatibilityType": Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE},
        {"option": Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH,
         "asyncExeQueueDepth": {"type": Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC, "depth": 4}},
        {"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET, "fileReadMemoryBudgetInMb": 25}},
        {"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_IO_MEM_ESTIMATION, "ioMemEstimation": True}})
    code, loaded = env.load(blob, configs)
    assert code == OK, f"load with load-time configs: {env.rec.errors()}"
    cfg = HANDLES.lookup(loaded).configs
    assert cfg["memoryLimitHintMb"] == 512 and cfg["asyncExecutionQueueDepth"] == 4, "recorded"
    assert "QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET" in cfg["htp"], "HTP custom configs recorded"
    env.free_context(loaded)
    bad = env.context_configs({"option": 0x7777})
    assert env.load(blob, bad)[0] == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "an unknown option is refused"


# ------------------------------------------------------------------------------ signals
def make_signal(env, option=None, timeout_us=0) -> int:
    configs = NULL
    if option is not None:
        c = ffi.new("QnnSignal_Config_t *")
        c.option = option
        if option == Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT:
            c.timeoutDurationUs = timeout_us
        env.keep.append(c)
        configs = abi.null_terminated("QnnSignal_Config_t", [c], env.keep)
    out = ffi.new("Qnn_SignalHandle_t *")
    assert abi.call("signalCreate", vp(env.be), configs, out) == OK, "signalCreate"
    return abi.hval(out[0])


def load_with_signal(env, blob, signal):
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinaryWithSignal", vp(env.be), NULL, NULL, env.buffer(blob), len(blob),
                    out, NULL, vp(signal))
    return code, abi.hval(out[0])


def test_with_signal_loads_normally_when_not_triggered(env, blob):
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_ABORT)
    code, loaded = load_with_signal(env, blob, sig)
    assert code == OK, "an untriggered abort signal changes nothing"
    env.free_context(loaded)
    assert abi.call("signalFree", vp(sig)) == OK, "the signal is idle again after the call"


def test_with_signal_abort_mid_load_leaves_nothing(env):
    ctx, _ = env.saved_context(4)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_ABORT)
    triggered = []

    # The app's log callback runs on the loading thread: trigger when graph g1 is finalized,
    # i.e. deterministically between graphs 1 and 2 of the binary.
    def on_log(fmt, level, timestamp, args):
        buf = ffi.new("char[]", 4096)
        abi.libc.vsnprintf(buf, 4096, fmt, args)
        if b"graph 'g1' finalized" in ffi.string(buf) and not triggered:
            triggered.append(abi.call("signalTrigger", vp(sig)))
    cb = ffi.callback("QnnLog_Callback_t", on_log)
    CALLBACKS.append(cb)
    code, log2 = abi.create("logCreate", cb, Q.QNN_LOG_LEVEL_DEBUG)
    code, be2 = abi.create("backendCreate", vp(log2), NULL)
    before = live_counts()
    out = ffi.new("Qnn_ContextHandle_t *")
    got = abi.call("contextCreateFromBinaryWithSignal", vp(be2), NULL, NULL, env.buffer(blob), len(blob),
                   out, NULL, vp(sig))
    assert triggered == [OK], "signalTrigger from inside the call returns at once"
    assert got == Q.QNN_CONTEXT_ERROR_ABORTED, f"aborted load returns QNN_CONTEXT_ERROR_ABORTED, got {got}"
    assert abi.hval(out[0]) == 0, "no context handle"
    assert live_counts() == before, "the graphs built before the abort are released"
    assert not HANDLES.lookup(be2).contexts, "no context registered with the backend"
    assert abi.call("signalTrigger", vp(sig)) == Q.QNN_SIGNAL_ERROR_SIGNAL_IDLE, "the signal is idle after the call"
    assert abi.call("signalFree", vp(sig)) == OK
    assert abi.call("backendFree", vp(be2)) == OK and abi.call("logFree", vp(log2)) == OK


def test_with_signal_timeout(env):
    ctx, _ = env.saved_context(6)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, timeout_us=1)
    before = live_counts()
    code, handle = load_with_signal(env, blob, sig)
    assert code == Q.QNN_CONTEXT_ERROR_TIMED_OUT, f"a 1 us timeout cancels loading, got {code}"
    assert handle == 0 and live_counts() == before and not env.core_backend.contexts, "nothing left behind"
    assert env.messages_for("QNNEMU-signal-timeout"), "the log says why"
    assert abi.call("signalFree", vp(sig)) == OK


def test_graph_execute_with_signals(env):
    ctx, weights = env.saved_context(1)
    g = env.retrieve(ctx, "g0")
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_ABORT)
    inp = abi.tensor("x", (1, 4))
    out = abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    y = np.zeros((1, 3), np.float32)
    abi.set_buffer(inp, X.copy())
    abi.set_buffer(out, y)
    args = (abi.tensor_array([inp], env.keep), 1, abi.tensor_array([out], env.keep), 1, NULL)
    assert abi.call("graphExecute", vp(g), *args, vp(sig)) == OK, "execute with an idle abort signal"
    np.testing.assert_allclose(y, reference(*weights["g0"]), rtol=1e-6)
    timeout = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, timeout_us=1)
    y[:] = -7
    assert abi.call("graphExecute", vp(g), *args, vp(timeout)) == Q.QNN_GRAPH_ERROR_TIMED_OUT, \
        "a 1 us timeout stops graphExecute"
    assert (y == -7).all(), "no output written by a timed-out execute"
    g2 = env.dense_graph(ctx, "late", np.ones((3, 4), np.float32), np.zeros(3, np.float32), finalize=False)
    assert abi.call("graphFinalize", vp(g2), NULL, vp(timeout)) == Q.QNN_GRAPH_ERROR_TIMED_OUT, \
        "graphFinalize checks its signal before compiling"
    assert abi.call("graphFinalize", vp(g2), NULL, vp(sig)) == OK, "and finalizes with an idle one"
    assert abi.call("graphExecute", vp(g), *args, vp(0xDEAD0010)) == Q.QNN_GRAPH_ERROR_INVALID_HANDLE, \
        "an unknown signal handle"
    for s in (sig, timeout):
        assert abi.call("signalFree", vp(s)) == OK
    env.free_context(ctx)


# ------------------------------------------------------------------------------ ListAsync
@pytest.mark.parametrize("version", [1, 2])
def test_list_async_notifies_per_graph_and_per_context(env, version):
    blobs, weights = [], []
    for seed, n in ((1, 2), (2, 3)):
        ctx, w = env.saved_context(n, seed=seed)
        blobs.append(env.get_binary(ctx))
        weights.append(w)
        env.free_context(ctx)
    notes = Notifications()
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, blobs, notes, version),
                    NULL, NULL)
    assert code == OK, f"ListAsync returned {code}: {env.rec.errors()}"
    for i, w in enumerate(weights):
        graphs = notes.of(0x1000 + i, Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT)
        [ctx_note] = notes.of(0x1000 + i, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT)
        assert [r[2] for r in graphs] == sorted(w), f"binary {i}: one graph notification per graph, with its name"
        assert all(r[5] == OK and r[0] == ctx_note[0] and r[1] for r in graphs), \
            f"binary {i}: graph notifications carry the context handle, a graph handle and QNN_SUCCESS"
        assert ctx_note[5] == OK and ctx_note[1] == 0 and ctx_note[0] in env.core_backend.contexts, \
            f"binary {i}: the context notification carries a registered context handle"
        assert notes.records.index(ctx_note) > notes.records.index(graphs[-1]), "the context comes after its graphs"
        for _, gh, name, *_ in graphs:
            np.testing.assert_allclose(env.run(gh, X), reference(*w[name]), rtol=1e-6,
                                       err_msg=f"binary {i}: graph {name} runs from its notified handle")
        env.free_context(ctx_note[0])


def test_list_async_one_bad_binary_others_still_load(env, blob):
    notes = Notifications()
    bad = blob[:100]
    before = live_counts()
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL,
                    list_params(env, [blob, bad, blob], notes), NULL, NULL)
    assert code == Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, "the call reports the failure"
    ctx_notes = [r for r in notes.records if r[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT]
    assert [r[5] for r in ctx_notes] == [OK, Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY, OK], \
        "the bad binary's context notification carries its error, the others load"
    assert ctx_notes[1][0] == 0, "no context handle for the failed binary"
    assert any("contextParams[1]" in m for m in env.rec.errors()), "the log names the failed entry"
    assert live_counts()[0] == before[0] + 2, "two contexts loaded"
    for r in (ctx_notes[0], ctx_notes[2]):
        env.free_context(r[0])
    assert live_counts() == before


def test_list_async_abort_from_a_notification(env, blob):
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_ABORT)
    notes = Notifications()
    seen = []

    def hook(rec):  # abort after the first graph of the first binary
        if rec[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT and not seen:
            seen.append(abi.call("signalTrigger", vp(sig)))
    notes.hook = hook
    before = live_counts()
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob, blob], notes),
                    NULL, vp(sig))
    assert seen == [OK], "signalTrigger from the notification callback"
    assert code == Q.QNN_CONTEXT_ERROR_ABORTED, f"the call is aborted, got {code}"
    ctx_notes = [r for r in notes.records if r[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT]
    assert [(r[0], r[5]) for r in ctx_notes] == [(0, Q.QNN_CONTEXT_ERROR_ABORTED)] * 2, \
        "both binaries are notified as aborted, without handles"
    assert live_counts() == before and not env.core_backend.contexts, "nothing left behind"
    assert abi.call("signalFree", vp(sig)) == OK


def test_list_async_signal_in_use_by_another_call(env, blob):
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_ABORT)
    notes = Notifications()
    inner = []
    notes.hook = lambda rec: inner.append(load_with_signal(env, blob, sig)[0]) if not inner else None
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob], notes),
                    NULL, vp(sig))
    assert code == OK
    assert inner == [Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE], "a signal serves one call at a time"
    assert env.messages_for("QNNEMU-signal-in-use"), "with the rule in the log"
    for r in notes.of(0x1000, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT):
        env.free_context(r[0])
    assert abi.call("signalFree", vp(sig)) == OK


def test_list_async_timeout(env):
    ctx, _ = env.saved_context(5)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    sig = make_signal(env, Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, timeout_us=1)
    notes = Notifications()
    before = live_counts()
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob, blob], notes),
                    NULL, vp(sig))
    assert code == Q.QNN_CONTEXT_ERROR_TIMED_OUT
    assert [r[5] for r in notes.records if r[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT] == \
        [Q.QNN_CONTEXT_ERROR_TIMED_OUT] * 2, "every binary notified as timed out"
    assert live_counts() == before
    assert abi.call("signalFree", vp(sig)) == OK


@pytest.mark.soc("SM8550")   # SEQUENTIAL_WITH_VA_OPTIMIZATION needs v73 or later
def test_list_async_list_config_is_accepted(env, blob):
    notes = Notifications()
    configs = env.context_configs(
        {"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES, "shareResources": True}},
        {"option": Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, "memoryLimitHint": 64})
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob], notes),
                    configs, NULL)
    assert code == OK
    [note] = notes.of(0x1000, Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT)
    cfg = HANDLES.lookup(note[0]).configs
    assert "QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES" in cfg["htp"] and cfg["memoryLimitHintMb"] == 64, \
        "list-level configs apply to every context"
    env.free_context(note[0])


def test_rule_list_async_params(env, blob):
    notes = Notifications()
    params = list_params(env, [blob], notes)
    params[0].v1.notifyFunc = NULL
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, params, NULL, NULL)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-contextCreateFromBinaryListAsync-params",
                "contextCreateFromBinaryListAsync", "contextParams[0].v1.notifyFunc")
    assert notes.records == [], "argument errors come before any notification"
    empty = abi.null_terminated("QnnContext_Params_t", [], env.keep)
    assert abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, empty, NULL, NULL) == \
        Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "an empty list"


def test_rule_list_async_callback(env, blob):
    notes = Notifications()
    cb = ffi.new("Qnn_ContextBinaryCallback_t *")
    env.keep.append(cb)
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL,
                    list_params(env, [blob], notes, version=2, callback=cb), NULL, NULL)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "QNNEMU-contextCreateFromBinaryListAsync-callback",
                "contextCreateFromBinaryListAsync", "contextParams[0].v2.callback")


def test_rule_list_async_group_registration(env, blob):
    """REGISTER_MULTI_CONTEXTS (and REGISTER_CONCURRENT_RESOURCE_SHARING) belong to
    contextCreateFromBinary ("QNN HTP Context Config Options"); in a ListAsync context's config or
    the listConfig they are refused before any notification (the vendor's x86 library has no
    ListAsync to compare with)."""
    notes = Notifications()
    registration = {"custom": {"option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                               "groupRegistration": {"firstGroupHandle": NULL, "maxSpillFillBuffer": 1 << 20}}}
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL,
                    list_params(env, [blob], notes, configs={0: env.context_configs(registration)}), NULL, NULL)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "QNNEMU-context-group-list-async",
                "contextCreateFromBinaryListAsync", "contextParams[0].v1: config[0].customConfig")
    assert notes.records == [], "refused before any notification"
    env.rec.clear()
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob], notes),
                    env.context_configs(registration), NULL)
    assert code == Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE and env.messages_for("QNNEMU-context-group-list-async"), \
        f"in the listConfig too: {code} {env.rec.records[-2:]}"
    assert notes.records == [], "refused before any notification"


# ------------------------------------------------------------------------------ WithCallback
class DmaProvider:
    """Client DMA callbacks: the provider copies the requested range of the binary into a fresh
    buffer (at ``pad`` bytes from its start), the release records what it gets."""

    def __init__(self, blob: bytes, pad: int = 64, fail: int = 0, corrupt: bool = False, short: bool = False):
        self.blob, self.pad, self.fail, self.corrupt, self.short = blob, pad, fail, corrupt, short
        self.requests: list[tuple[int, int, int]] = []
        self.released: list[tuple[int, int, int]] = []
        self.buffers: dict[int, object] = {}
        self.provide = ffi.callback("Qnn_ContextBinaryDmaDataProviderFn_t", self._provide)
        self.release = ffi.callback("Qnn_ContextBinaryDmaDataReleaseFn_t", self._release)
        CALLBACKS.extend([self.provide, self.release])

    def _provide(self, req, resp, param):
        self.requests.append((int(req.offset), int(req.size), int(req.isBackendMappingNeeded)))
        if self.fail:
            return self.fail
        data = bytearray(self.blob[req.offset:req.offset + req.size])
        if self.corrupt:
            data[0] ^= 0xFF
        buf = ffi.new("char[]", self.pad + req.size)
        ffi.memmove(buf + self.pad, bytes(data), len(data))
        self.buffers[abi.hval(buf)] = buf
        resp.dmaBuffer.fd = 40 + len(self.requests)
        resp.dmaBuffer.data = buf
        resp.dataStartOffset = self.pad
        resp.alignedSize = self.pad + req.size - (1 if self.short else 0)
        return OK

    def _release(self, mem, param):
        self.released.append((int(mem.dmaBuffer.fd), abi.hval(mem.dmaBuffer.data), int(mem.memSize)))
        return OK

    def struct(self, env, kind=Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER):
        cb = ffi.new("Qnn_ContextBinaryCallback_t *")
        cb.type = kind
        cb.dmaBufferCallback.version = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1
        cb.dmaBufferCallback.v1.dataProvide = self.provide
        cb.dmaBufferCallback.v1.dataRelease = self.release
        cb.dmaBufferCallback.v1.notifyParam = NULL
        env.keep.append(cb)
        return cb


def load_with_callback(env, blob_part: bytes, cb, configs=NULL):
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinaryWithCallback", vp(env.be), NULL, configs, cb, env.buffer(blob_part),
                    len(blob_part), out, NULL, NULL)
    return code, abi.hval(out[0])


def test_with_callback_weights_come_from_the_provider(env):
    ctx, weights = env.saved_context(2)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    h = binary.parse_header(blob)
    provider = DmaProvider(blob)
    code, loaded = load_with_callback(env, blob[:h.data_offset], provider.struct(env))  # no data section given
    assert code == OK, f"WithCallback returned {code}: {env.rec.errors()}"
    assert provider.requests == [(h.data_offset, h.data_size, 1)], \
        "one request for the data section: its offset in the binary and its size"
    for name, (w, b) in weights.items():
        np.testing.assert_allclose(env.run(env.retrieve(loaded, name), X), reference(w, b), rtol=1e-6)
    assert provider.released == [], "buffers are kept until contextFree"
    [(addr, buf)] = provider.buffers.items()
    core_w = next(t for t in HANDLES.lookup(loaded).graphs["g0"].tensors.values() if t.name == "w")
    assert np.shares_memory(core_w.data, np.frombuffer(ffi.buffer(buf), np.uint8)), "weights used in place"
    env.free_context(loaded)
    assert provider.released == [(41, addr, 64 + h.data_size)], "released once at contextFree, with the buffer's fd"


def test_rule_with_callback_provider_error(env, blob):
    provider = DmaProvider(blob, fail=Q.QNN_CONTEXT_ERROR_MEM_ALLOC)
    before = live_counts()
    code, handle = load_with_callback(env, blob, provider.struct(env))
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_MEM_ALLOC, "QNNEMU-contextCreateFromBinaryWithCallback-provider",
                "contextCreateFromBinaryWithCallback", "dataProvide")
    assert handle == 0 and live_counts() == before, "nothing left behind"
    assert provider.released == [], "nothing was provided, nothing to release"


def test_with_callback_corrupted_weights_are_released(env, blob):
    provider = DmaProvider(blob, corrupt=True)
    before = live_counts()
    code, _ = load_with_callback(env, blob, provider.struct(env))
    assert code == Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY and env.messages_for("QNNEMU-binary-crc"), \
        "the blob CRCs catch wrong data from the provider"
    assert len(provider.released) == 1, "a provided buffer is released when loading fails"
    assert live_counts() == before


def test_rule_with_callback_response(env, blob):
    provider = DmaProvider(blob, short=True)
    code, _ = load_with_callback(env, blob, provider.struct(env))
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
                "QNNEMU-contextCreateFromBinaryWithCallback-response",
                "contextCreateFromBinaryWithCallback", "alignedSize")
    assert len(provider.released) == 1, "released on failure"


def test_rule_with_callback_graph_switching(env, blob):
    """Graph switching (a non-zero MEMORY_LIMIT_HINT) is "not supported together with" the data
    provider callbacks (QNN HTP backend documentation, "QnnContext_createFromBinaryWithCallback
    API"); the vendor's x86 library has no WithCallback to compare with (QNN_COMMON_ERROR_NOT_SUPPORTED)."""
    provider = DmaProvider(blob)
    hint = env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, "memoryLimitHint": 64})
    code, _ = load_with_callback(env, blob, provider.struct(env), hint)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                "QNNEMU-contextCreateFromBinaryWithCallback-graph-switching", "contextCreateFromBinaryWithCallback",
                "config")
    assert provider.requests == [], "refused before the provider is called"


def test_rule_with_callback_raw_buffer(env, blob):
    provider = DmaProvider(blob)
    code, _ = load_with_callback(env, blob, provider.struct(env, Q.QNN_CONTEXT_CALLBACK_RAW_BUFFER))
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "QNNEMU-contextCreateFromBinaryWithCallback-raw",
                "contextCreateFromBinaryWithCallback", "callback.type")
    assert provider.requests == [], "not called"


def test_rule_with_callback_callback(env, blob):
    provider = DmaProvider(blob)
    cb = provider.struct(env)
    cb.dmaBufferCallback.v1.dataRelease = NULL
    code, _ = load_with_callback(env, blob, cb)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "QNNEMU-contextCreateFromBinaryWithCallback-callback",
                "contextCreateFromBinaryWithCallback", "callback.dmaBufferCallback.v1.dataRelease")


def test_rule_with_callback_defer(env, blob):
    provider = DmaProvider(blob)
    configs = env.context_configs({"option": Q.QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT, "isGraphInitDeferred": 1})
    code, _ = load_with_callback(env, blob, provider.struct(env), configs)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-contextCreateFromBinaryWithCallback-defer",
                "contextCreateFromBinaryWithCallback", "DEFER_GRAPH_INIT")


def test_validate_binary(env, blob):
    assert abi.call("contextValidateBinary", vp(env.be), NULL, NULL, env.buffer(blob), len(blob)) == OK
    assert abi.call("contextValidateBinary", vp(0xDEAD0010), NULL, NULL, env.buffer(blob), len(blob)) == \
        Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "an unknown backend handle"
    assert not env.core_backend.contexts, "validation creates no context"
