"""QnnSignal.h: the signal state machine (qnnemu/core/signal.py) and the signal entries
(qnnemu/abi/signal_api.py) through the raw C ABI: create/setConfig/trigger/free, idle vs in use,
ABORT vs TIMEOUT, a trigger from another thread blocking until the call has returned; one
negative test per signal rule id.
"""
from __future__ import annotations

import threading
import time

import abi
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import Env, Notifications, list_params

from qnnemu.core.handles import HANDLES
from qnnemu.core.signal import ABORT, TIMEOUT, Signal
from qnnemu.errors import QnnError
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")
OK = Q.QNN_SUCCESS


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def configs(env, *entries):
    ptrs = []
    for option, timeout in entries:
        c = ffi.new("QnnSignal_Config_t *")
        c.option = option
        if timeout is not None:
            c.timeoutDurationUs = timeout
        env.keep.append(c)
        ptrs.append(c)
    return abi.null_terminated("QnnSignal_Config_t", ptrs, env.keep)


def create(env, *entries) -> tuple[int, int]:
    out = ffi.new("Qnn_SignalHandle_t *")
    code = abi.call("signalCreate", vp(env.be), configs(env, *entries) if entries else NULL, out)
    return code, abi.hval(out[0])


ABORT_CFG = (Q.QNN_SIGNAL_CONFIG_OPTION_ABORT, None)


def timeout_cfg(us):
    return (Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT, us)


# ------------------------------------------------------------------------------ core state machine
def test_core_idle_in_use_idle():
    s = Signal()
    s.configure(ABORT, 0, "signalCreate")
    assert not s.in_use
    with s.use("graphExecute", 1, 2) as use:
        assert s.in_use and s.user == "graphExecute", "in use for the duration of the call"
        use.check()  # not triggered: nothing happens
        s.trigger()  # same thread: returns at once
        with pytest.raises(QnnError) as e:
            use.check()
        assert e.value.code == 1 and e.value.rule == "QNNEMU-signal-aborted", "the call's ABORTED code"
        with pytest.raises(QnnError) as e:
            s.configure(None, 0, "signalSetConfig")
        assert e.value.code == Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE, "no reconfiguring while in use"
        with pytest.raises(QnnError) as e:
            s.free()
        assert e.value.code == Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE, "no freeing while in use"
    assert not s.in_use and not s.triggered, "idle again, trigger state reset for the next call"
    with s.use("graphExecute", 1, 2) as use:
        use.check()  # a new call starts untriggered


def test_core_timeout_counts_from_the_start_of_the_call():
    s = Signal()
    s.configure(TIMEOUT, 50_000, "signalCreate")  # 50 ms
    time.sleep(0.06)  # time before the call does not count
    with s.use("contextCreateFromBinaryWithSignal", 1, 2) as use:
        use.check()
        time.sleep(0.06)
        with pytest.raises(QnnError) as e:
            use.check()
        assert e.value.code == 2 and e.value.rule == "QNNEMU-signal-timeout", "the call's TIMED_OUT code"


def test_core_unconfigured_signal_does_nothing():
    s = Signal()
    with s.use("graphExecute", 1, 2) as use:
        use.check()
        with pytest.raises(QnnError) as e:
            s.trigger()
        assert e.value.code == Q.QNN_SIGNAL_ERROR_INCOMPATIBLE_SIGNAL_TYPE, "nothing to trigger on it"


# ------------------------------------------------------------------------------ ABI
def test_create_set_config_free(env):
    code, sig = create(env, ABORT_CFG)
    assert code == OK and sig, "signalCreate with ABORT"
    core = HANDLES.lookup(sig)
    assert core.kind == ABORT
    assert abi.call("signalSetConfig", vp(sig), configs(env, timeout_cfg(1000))) == OK, "idle: reconfigurable"
    assert core.kind == TIMEOUT and core.timeout_us == 1000
    assert abi.call("signalSetConfig", vp(sig), configs(env, timeout_cfg(5), timeout_cfg(7))) == OK
    assert core.timeout_us == 7, "the last of an option wins"
    assert abi.call("signalSetConfig", vp(sig), NULL) == OK and core.kind is None, "NULL resets the configuration"
    assert abi.call("signalFree", vp(sig)) == OK
    assert abi.call("signalFree", vp(sig)) == Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "freed twice"
    assert abi.call("signalTrigger", NULL) == Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "NULL handle"
    out = ffi.new("Qnn_SignalHandle_t *")
    assert abi.call("signalCreate", vp(0xDEAD0010), NULL, out) == Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "bad backend"
    assert abi.call("signalCreate", vp(env.be), NULL, NULL) == Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, "NULL output"


def test_backend_free_releases_its_signals():
    e = Env()
    _, sig = create(e, ABORT_CFG)
    e.close()
    assert HANDLES.lookup(sig) is None, "backendFree releases the backend's signals"


def test_trigger_from_another_thread_blocks_until_the_call_returned(env):
    ctx, _ = env.saved_context(3)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    _, sig = create(env, ABORT_CFG)
    core = HANDLES.lookup(sig)
    notes = Notifications()
    in_callback = threading.Event()

    def hook(rec):
        if rec[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT and not in_callback.is_set():
            in_callback.set()
            deadline = time.monotonic() + 20
            while not core.triggered and time.monotonic() < deadline:  # until the other thread triggered
                time.sleep(0.001)
    notes.hook = hook
    params = list_params(env, [blob], notes)
    result = []
    worker = threading.Thread(target=lambda: result.append(
        abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, params, NULL, vp(sig))))
    worker.start()
    assert in_callback.wait(20), "the load reached its first graph notification"
    assert abi.call("signalTrigger", vp(sig)) == OK, "triggering an in-use ABORT signal"
    ctx_notes = [r for r in notes.records if r[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT]
    assert [r[5] for r in ctx_notes] == [Q.QNN_CONTEXT_ERROR_ABORTED] and not core.in_use, \
        "signalTrigger returned only after the call had cleaned up (its last notification was sent)"
    worker.join(20)
    assert result == [Q.QNN_CONTEXT_ERROR_ABORTED], "the call was aborted"
    assert abi.call("signalFree", vp(sig)) == OK


# ------------------------------------------------------------------------------ rules
def assert_rule(env, code, want, rule, func, path):
    assert code == want, f"{rule}: {func} returned {code}, expected {want}"
    msgs = env.messages_for(rule)
    assert msgs and func in msgs[-1] and path in msgs[-1], f"{rule}: message names {func} and {path}: {msgs[-1:]}"


def test_rule_signal_config_exclusive(env):
    code, _ = create(env, ABORT_CFG, timeout_cfg(10))
    assert_rule(env, code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, "QNNEMU-signal-config-exclusive", "signalCreate",
                "config")


def test_rule_signal_config_timeout(env):
    code, _ = create(env, timeout_cfg(0))
    assert_rule(env, code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, "QNNEMU-signal-config-timeout", "signalCreate",
                "config[0].timeoutDurationUs")


def test_rule_signal_config_option(env):
    _, sig = create(env)
    code = abi.call("signalSetConfig", vp(sig), configs(env, (Q.QNN_SIGNAL_CONFIG_OPTION_CUSTOM, None)))
    assert_rule(env, code, Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, "QNNEMU-signal-config-option", "signalSetConfig",
                "config[0].option")
    assert abi.call("signalSetConfig", vp(sig), configs(env, (0x5555, None))) == Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, \
        "an unknown option too"
    assert abi.call("signalFree", vp(sig)) == OK


def test_rule_signal_trigger_idle(env):
    _, sig = create(env, ABORT_CFG)
    code = abi.call("signalTrigger", vp(sig))
    assert_rule(env, code, Q.QNN_SIGNAL_ERROR_SIGNAL_IDLE, "QNNEMU-signalTrigger-idle", "signalTrigger", "signal")
    assert abi.call("signalFree", vp(sig)) == OK


def _during_a_call(env, sig, action):
    """Runs ``action()`` from the graph notification of a ListAsync call using ``sig``."""
    ctx, _ = env.saved_context(1)
    blob = env.get_binary(ctx)
    env.free_context(ctx)
    notes = Notifications()
    results = []
    notes.hook = lambda rec: results.append(action()) if rec[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT else None
    code = abi.call("contextCreateFromBinaryListAsync", vp(env.be), NULL, list_params(env, [blob], notes), NULL,
                    vp(sig))
    for r in notes.records:
        if r[3] == Q.QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT and r[0]:
            env.free_context(r[0])
    return code, results


def test_rule_signal_trigger_type(env):
    _, sig = create(env, timeout_cfg(60_000_000))
    code, [got] = _during_a_call(env, sig, lambda: abi.call("signalTrigger", vp(sig)))
    assert code == OK, "the call itself is not disturbed"
    assert_rule(env, got, Q.QNN_SIGNAL_ERROR_INCOMPATIBLE_SIGNAL_TYPE, "QNNEMU-signalTrigger-type", "signalTrigger",
                "signal")
    assert abi.call("signalFree", vp(sig)) == OK


def test_rule_signal_in_use(env):
    _, sig = create(env, ABORT_CFG)
    code, results = _during_a_call(env, sig, lambda: (abi.call("signalSetConfig", vp(sig), NULL),
                                                      abi.call("signalFree", vp(sig))))
    [(set_code, free_code)] = results
    assert_rule(env, free_code, Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE, "QNNEMU-signal-in-use", "signalFree", "signal")
    assert set_code == Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE and \
        any("signalSetConfig" in m for m in env.messages_for("QNNEMU-signal-in-use")), "signalSetConfig too"
    assert code == OK, "the call using the signal is not disturbed"
    assert abi.call("signalFree", vp(sig)) == OK, "free once the call returned"


def test_rule_signal_aborted(env):
    _, sig = create(env, ABORT_CFG)
    code, [trig] = _during_a_call(env, sig, lambda: abi.call("signalTrigger", vp(sig)))
    assert trig == OK
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_ABORTED, "QNNEMU-signal-aborted", "contextCreateFromBinaryListAsync",
                "signal")
    assert abi.call("signalFree", vp(sig)) == OK


def test_rule_signal_timeout(env):
    _, sig = create(env, timeout_cfg(1))
    code, _ = _during_a_call(env, sig, lambda: None)
    assert_rule(env, code, Q.QNN_CONTEXT_ERROR_TIMED_OUT, "QNNEMU-signal-timeout", "contextCreateFromBinaryListAsync",
                "signal")
    assert abi.call("signalFree", vp(sig)) == OK
