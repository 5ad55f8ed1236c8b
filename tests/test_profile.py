"""QnnProfile.h (+ HTP/QnnHtpProfile.h) through the C ABI: profile handles, the events of
graphFinalize / graphExecute / contextFree at the BASIC and DETAILED levels (QNN HTP backend
documentation, "HTP Execute Basic Profiling Events": measured host times, accelerator numbers from
the graph's prepared plan), sub-events per plan step, event data and extended event data,
MAX_EVENTS, profileFree, and every profile rule id; then ONNX Runtime's QNN EP writing its profiling
CSV (and the System library's log) from our events.  The linting level, optrace and DSP heap
profiling: tests/test_htp_profiling.py.

The library runs in this interpreter (tests/abi.py loads it with cffi), so a few tests reach
into the core objects behind a handle (``HANDLES``) where the ABI offers no way in (a float
event value, a profile in use by a running call).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.profile_env import (
    ACCEL_CYCLES_AT,
    BASIC,
    CYCLES,
    DETAILED,
    EXECUTE_EVENTS,
    EXECUTE_TYPES,
    LINTING,
    US,
    Env,
    check_execute_events,
    core_graph,
    core_profile,
    data,
    events,
    extended,
    ort_session,
    sub_events,
)

import qnnemu
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def plan_labels(graph_handle: int) -> list[str]:
    """The DETAILED sub-event identifiers the graph's prepared plan calls for, in runlist order."""
    from qnnemu.core.profile import step_label
    g = core_graph(graph_handle)
    return [f"{step_label(s, len(g.nodes))[0]} (cycles)" for s in g.htp_plan.steps]


# --------------------------------------------------------------------------------- creating
@pytest.mark.parametrize("level", [BASIC, DETAILED, LINTING], ids=["basic", "detailed", "htp-linting"])
def test_create_and_free_each_level(env, level):
    p = env.profile(level)
    assert p != 0, "profileCreate writes a handle"
    assert events(p) == [], "a new profile has no events"
    assert abi.call("profileFree", vp(p)) == Q.QNN_SUCCESS, "profileFree"


def test_no_events_before_a_profiled_call(env):
    p = env.profile()
    ids = ffi.new("const QnnProfile_EventId_t **")
    n = ffi.new("uint32_t *", 7)
    assert abi.call("profileGetEvents", vp(p), ids, n) == Q.QNN_SUCCESS
    assert n[0] == 0, "numEvents is 0"


# -------------------------------------------------------------------------------- finalize
@pytest.mark.parametrize("level", [BASIC, DETAILED])
def test_finalize_event(env, level):
    p = env.profile(level)
    t0 = time.perf_counter()
    assert env.finalize(p) == Q.QNN_SUCCESS, "graphFinalize with a profile"
    wall_us = (time.perf_counter() - t0) * 1e6
    ids = events(p)
    assert len(ids) == 1, "graphFinalize records one event"
    typ, unit, value, ident = data(ids[0])
    assert (typ, unit, ident) == (Q.QNN_PROFILE_EVENTTYPE_FINALIZE, US, "QNN (finalize) time")
    assert 0 <= value <= wall_us + 1, f"finalize time {value} us within the call's {wall_us:.0f} us"
    assert sub_events(ids[0]) == [], "no finalize sub-events"
    assert events(p) == ids, "profileGetEvents is repeatable: same ids"


# --------------------------------------------------------------------------------- execute
def timed_execute(env, p):
    env.finalize()
    t0 = time.perf_counter()
    code, result = env.execute(p)
    wall_us = (time.perf_counter() - t0) * 1e6
    assert code == Q.QNN_SUCCESS, f"graphExecute with a profile returned {code}"
    np.testing.assert_array_equal(result, [[6, 6, 6]], "profiling does not change results")
    return wall_us


def test_execute_basic_events(env):
    p = env.profile(BASIC)
    wall_us = timed_execute(env, p)
    ids = events(p)
    check_execute_events(ids, wall_us, env.g, first_run=True)
    assert all(sub_events(i) == [] for i in ids), "BASIC has no sub-events"
    t0 = time.perf_counter()
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    check_execute_events(events(p), (time.perf_counter() - t0) * 1e6, env.g, first_run=False)


def test_execute_detailed_sub_event_per_step(env):
    p = env.profile(DETAILED)
    wall_us = timed_execute(env, p)
    ids = events(p)
    check_execute_events(ids, wall_us, env.g, first_run=True)
    cyc_id = ids[ACCEL_CYCLES_AT]
    subs = sub_events(cyc_id)
    got = [data(s) for s in subs]
    plan = core_graph(env.g).htp_plan
    assert [(t, u, v, s) for t, u, v, s in got] == [
        (Q.QNN_PROFILE_EVENTTYPE_NODE, CYCLES, step.cycles, label)
        for step, label in zip(plan.steps, plan_labels(env.g))], \
        f"one NODE sub-event per plan step, in runlist order, with its cycles: {got}"
    names = [s for *_, s in got]
    assert any(n.startswith("fc:OpId_0") for n in names) and any(n.startswith("act:OpId_1") for n in names), \
        f"the node steps are named '<node>:OpId_<graphAddNode index>': {names}"
    assert all(sub_events(s) == [] for s in subs), "step events have no sub-events at DETAILED"
    others = [i for i in ids if i != cyc_id]
    assert all(sub_events(i) == [] for i in others), "only the cycles event has sub-events"


def test_events_are_replaced_by_each_profiled_call(env):
    """QnnGraph.h: 'A handle being re-used would reset and is populated with values from the
    current call' -- also what the vendor backend does; ids are never reused."""
    p = env.profile(DETAILED)
    assert env.finalize(p) == Q.QNN_SUCCESS
    fin = events(p)
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    first = events(p)
    assert len(first) == len(EXECUTE_EVENTS), "only the execute's events remain"
    first_all = first + sub_events(first[ACCEL_CYCLES_AT])
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    second = events(p)
    assert len(second) == len(EXECUTE_EVENTS), "events do not pile up across executes"
    assert min(second) > max(first_all) > max(fin), "event ids grow and are never reused"
    env.rec.clear()
    d = ffi.new("QnnProfile_EventData_t *")
    assert abi.call("profileGetEventData", first[0], d) == Q.QNN_PROFILE_ERROR_INVALID_HANDLE, \
        "an id of replaced events is stale"
    assert env.rules_logged() == {"QNNEMU-profile-event-stale"}
    assert events(p) == second, "reading does not consume events"
    # An unprofiled call leaves them alone.
    assert env.execute()[0] == Q.QNN_SUCCESS
    assert events(p) == second, "a call without the profile does not touch it"


def test_failed_call_keeps_previous_events(env):
    p = env.profile()
    env.finalize()
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    before = events(p)
    code, _ = env.execute(p, in_size=4)  # wrong input size: graphExecute fails
    assert code == Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "setup: the execute fails"
    assert events(p) == before, "a failed call records nothing"


def test_one_profile_for_two_graphs(env):
    p = env.profile()
    g2, x2, y2 = env.graph("g2")
    assert env.finalize(p) == Q.QNN_SUCCESS
    assert env.finalize(p, g=g2) == Q.QNN_SUCCESS
    assert [data(i)[0] for i in events(p)] == [Q.QNN_PROFILE_EVENTTYPE_FINALIZE], "the last finalize's event"
    assert env.execute(p, g=g2, x=x2, y=y2)[0] == Q.QNN_SUCCESS
    check_execute_events(events(p), float("inf"), g2, first_run=True)


def test_context_free_deinit_event(env):
    p = env.profile()
    env.finalize()
    t0 = time.perf_counter()
    assert abi.call("contextFree", vp(env.ctx), vp(p)) == Q.QNN_SUCCESS, "contextFree with a profile"
    wall_us = (time.perf_counter() - t0) * 1e6
    env.ctx = 0
    ids = events(p)
    assert len(ids) == 1
    typ, unit, value, ident = data(ids[0])
    assert (typ, unit, ident) == (Q.QNN_PROFILE_EVENTTYPE_DEINIT, US, "QNN (deinit) time")
    assert 0 <= value <= wall_us + 1


# ------------------------------------------------------------------------------ event data
def test_extended_event_data_matches_basic(env):
    p = env.profile(DETAILED)
    env.finalize()
    before_us = time.time_ns() // 1000
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    after_us = time.time_ns() // 1000
    all_ids = [i for top in events(p) for i in [top] + sub_events(top)]
    for i in all_ids:
        typ, unit, value, ident = data(i)
        x = extended(i)
        assert x.version == Q.QNN_PROFILE_DATA_VERSION_1, "extended data is v1"
        assert (x.v1.type, x.v1.unit) == (typ, unit), "same type and unit"
        assert x.v1.value.dataType == Q.QNN_DATATYPE_UINT_64, "values are uint64 scalars"
        assert x.v1.value.uint64Value == value, "same value"
        assert ffi.string(x.v1.identifier).decode() == ident, "same identifier"
        assert before_us <= x.v1.timestamp <= after_us, "timestamp: microseconds since the epoch, during the call"
    d1, d2 = ffi.new("QnnProfile_EventData_t *"), ffi.new("QnnProfile_EventData_t *")
    abi.call("profileGetEventData", all_ids[0], d1)
    abi.call("profileGetEventData", all_ids[0], d2)
    assert d1.identifier == d2.identifier, "identifier memory is owned by the profile (stable)"


def test_float_event_values(env):
    """A float value is a FLOAT_64 scalar in the extended data and rounded in the basic data."""
    from qnnemu.core.profile import ProfileEvent
    p = env.profile()
    core_profile(p).replace_events([ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_BACKEND, US, 12.75, "ratio")], "test")
    [i] = events(p)
    x = extended(i)
    assert x.v1.value.dataType == Q.QNN_DATATYPE_FLOAT_64 and x.v1.value.doubleValue == 12.75
    assert data(i) == (Q.QNN_PROFILE_EVENTTYPE_BACKEND, US, 13, "ratio")


# -------------------------------------------------------------------------------- configs
def test_max_events(env):
    p = env.profile(DETAILED)
    env.finalize()
    budget = ACCEL_CYCLES_AT + 2  # the events up to the cycles event, and one of its sub-events
    assert env.set_config(p, option=Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS, numMaxEvents=budget) == Q.QNN_SUCCESS
    env.rec.clear()
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    ids = events(p)
    kept = [data(i)[0] for i in ids]
    assert kept == EXECUTE_TYPES[:ACCEL_CYCLES_AT + 1], "the first events that fit are kept"
    assert [data(s)[3] for s in sub_events(ids[ACCEL_CYCLES_AT])] == plan_labels(env.g)[:1], "sub-events count too"
    assert any("MAX_EVENTS" in m for m in env.rec.messages(Q.QNN_LOG_LEVEL_WARN)), "dropped events are reported"
    assert env.set_config(p, option=Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS, numMaxEvents=2) == Q.QNN_SUCCESS
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    assert len(events(p)) == 2


def test_set_config_null_list_and_optrace(env):
    p = env.profile(DETAILED)
    assert abi.call("profileSetConfig", vp(p), NULL) == Q.QNN_SUCCESS, "NULL config list: nothing to set"
    assert env.set_config(p, option=Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, enableOptrace=1) == Q.QNN_SUCCESS
    assert core_profile(p).optrace, "optrace is recorded"
    env.finalize()
    assert env.execute(p)[0] == Q.QNN_SUCCESS
    got = [data(i)[:2] for i in events(p)]
    assert got == [(t, u) for t, u, _ in EXECUTE_EVENTS] + [(Q.QNN_PROFILE_EVENTTYPE_TRACE,
                                                             Q.QNN_PROFILE_EVENTUNIT_OBJECT)], \
        "optrace: the DETAILED events and one OBJECT event (its contents: test_htp_profiling.py)"
    b = env.profile(BASIC)
    assert env.set_config(b, option=Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, enableOptrace=0) == Q.QNN_SUCCESS, \
        "disabling optrace is fine on any level"


# ------------------------------------------------------------------------- rule ids (negative)
RULE_CASES = {}


def rule_case(rule, code, func, path):
    def deco(fn):
        RULE_CASES[rule] = (code, func, path, fn)
        return fn
    return deco


@rule_case("QNNEMU-profileCreate-level", Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, "profileCreate", "level")
def _(env):
    return env.create_profile(Q.QNN_PROFILE_LEVEL_BACKEND)[0]


@rule_case("QNNEMU-arg-null", Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, "profileCreate", "profile")
def _(env):
    return abi.call("profileCreate", vp(env.be), BASIC, NULL)


@rule_case("QNNEMU-profileSetConfig-max-events", Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, "profileSetConfig",
           "config[0].numMaxEvents")
def _(env):
    return env.set_config(env.profile(), option=Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS, numMaxEvents=0)


@rule_case("QNNEMU-profileSetConfig-optrace-level", Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, "profileSetConfig",
           "config[0].enableOptrace")
def _(env):
    return env.set_config(env.profile(BASIC), option=Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, enableOptrace=1)


@rule_case("QNNEMU-profileSetConfig-custom", Q.QNN_PROFILE_ERROR_UNSUPPORTED, "profileSetConfig", "config[0].option")
def _(env):
    return env.set_config(env.profile(), option=Q.QNN_PROFILE_CONFIG_OPTION_CUSTOM)


@rule_case("QNNEMU-profileSetConfig-option", Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, "profileSetConfig",
           "config[0].option")
def _(env):
    return env.set_config(env.profile(), option=0x7654321)


@rule_case("QNNEMU-profile-in-use", Q.QNN_PROFILE_ERROR_HANDLE_IN_USE, "profileFree", "profile")
def _(env):
    from qnnemu.abi import profile_api
    p = env.profile()
    with profile_api.recording(profile_api._Call(core_profile(p), "graphExecute")):
        return abi.call("profileFree", vp(p))  # as if another thread were executing with it


@rule_case("QNNEMU-profile-event-stale", Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "profileGetSubEvents", "eventId")
def _(env):
    p = env.profile()
    assert env.finalize(p) == Q.QNN_SUCCESS
    [i] = events(p)
    assert abi.call("profileFree", vp(p)) == Q.QNN_SUCCESS
    return abi.call("profileGetSubEvents", i, ffi.new("const QnnProfile_EventId_t **"), ffi.new("uint32_t *"))


@rule_case("QNNEMU-profile-event-unknown", Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "profileGetExtendedEventData",
           "eventId")
def _(env):
    return abi.call("profileGetExtendedEventData", 1 << 60, ffi.new("QnnProfile_ExtendedEventData_t *"))




@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule(env, rule):
    code, func, path, trigger = RULE_CASES[rule]
    env.rec.clear()
    env.rec.assert_rule(trigger(env), code, rule, func, path)


def test_every_profile_rule_has_a_case():
    """The rule ids of the profile code (core/profile.py, abi/profile_api.py, the signal rules
    of entry.py) all have a case here; QNNEMU-arg-null and the handle rules are shared."""
    root = Path(qnnemu.__file__).parent
    found = set()
    for path in (root / "core" / "profile.py", root / "abi" / "profile_api.py"):
        found |= set(re.findall(r'"(QNNEMU-[A-Za-z0-9_-]+)"', path.read_text()))
    from qnnemu.rules import WARNING_RULES  # warning rules: their cases are in tests/test_warning_rules.py
    missing = found - set(RULE_CASES) - set(WARNING_RULES)
    assert missing == set(), f"profile rule ids without a case: {sorted(missing)}"


# ---- bad handles at every profile argument (shared handle rules, profile error codes)
@pytest.mark.parametrize("call,code", [
    (lambda e: e.create_profile(BASIC, backend=0xDEAD0008)[0], Q.QNN_PROFILE_ERROR_INVALID_HANDLE),
    (lambda e: e.create_profile(BASIC, backend=e.ctx)[0], Q.QNN_PROFILE_ERROR_INVALID_HANDLE),
    (lambda e: abi.call("profileSetConfig", vp(0xDEAD0008), NULL), Q.QNN_PROFILE_ERROR_INVALID_HANDLE),
    (lambda e: abi.call("profileGetEvents", vp(e.be), ffi.new("const QnnProfile_EventId_t **"),
                        ffi.new("uint32_t *")), Q.QNN_PROFILE_ERROR_INVALID_HANDLE),
    (lambda e: abi.call("profileFree", NULL), Q.QNN_PROFILE_ERROR_INVALID_HANDLE),
    (lambda e: e.finalize(0xDEAD0008), Q.QNN_GRAPH_ERROR_SET_PROFILE),
    (lambda e: (e.finalize(), e.execute(e.ctx)[0])[1], Q.QNN_GRAPH_ERROR_SET_PROFILE),
    (lambda e: abi.call("contextFree", vp(e.ctx), vp(0xDEAD0008)), Q.QNN_CONTEXT_ERROR_SET_PROFILE),
], ids=["create-unknown-backend", "create-context-as-backend", "setconfig-unknown", "getevents-backend-handle",
        "free-null", "finalize-unknown-profile", "execute-context-as-profile", "contextfree-unknown-profile"])
def test_bad_handles(env, call, code):
    env.rec.clear()
    assert call(env) == code
    assert env.rules_logged() <= {"QNNEMU-handle-unknown", "QNNEMU-handle-kind", "QNNEMU-handle-null"} \
        and env.rules_logged(), f"a handle rule is logged: {env.rec.records}"


def test_null_outputs_and_free(env):
    p = env.profile()
    assert env.finalize(p) == Q.QNN_SUCCESS
    [i] = events(p)
    for name, args in [("profileGetEvents", (vp(p), NULL, ffi.new("uint32_t *"))),
                       ("profileGetEvents", (vp(p), ffi.new("const QnnProfile_EventId_t **"), NULL)),
                       ("profileGetSubEvents", (i, NULL, ffi.new("uint32_t *"))),
                       ("profileGetEventData", (i, NULL)),
                       ("profileGetExtendedEventData", (i, NULL))]:
        assert abi.call(name, *args) == Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT, f"{name} with a NULL output"
    assert abi.call("profileFree", vp(p)) == Q.QNN_SUCCESS
    assert abi.call("profileFree", vp(p)) == Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "double free"
    assert "QNNEMU-handle-freed" in env.rules_logged()
    d = ffi.new("QnnProfile_EventData_t *")
    assert abi.call("profileGetEventData", i, d) == Q.QNN_PROFILE_ERROR_INVALID_HANDLE, "events die with the profile"
    assert env.finalize(p) == Q.QNN_GRAPH_ERROR_SET_PROFILE, "a freed profile cannot be passed to a call"


# ------------------------------------------------------------------------------ ONNX Runtime
@pytest.mark.parametrize("level", ["basic", "detailed"])
def test_onnxruntime_profiling_csv(tmp_path, level):
    csv_path, rows = ort_session(tmp_path, level, runs=2)
    assert rows[0][:7] == ["Msg Timestamp", "Message", "Time", "Unit of Measurement", "Timing Source",
                           "Event Level", "Event Identifier"], f"ORT's CSV header: {rows[0]}"
    body = [r for r in rows[1:] if r]
    fin = [r for r in body if r[1] == "FINALIZE"]
    assert [(r[3], r[5], r[6]) for r in fin] == [("US", "ROOT", "QNN (finalize) time")], "one finalize row"
    ex = [r for r in body if r[1] == "EXECUTE"]
    assert [(r[3], r[5], r[6]) for r in ex] == [("US", "ROOT", "QNN (execute) time")] * 2, "one row per run"
    idents = [r[6] for r in body]
    for _, _, ident in EXECUTE_EVENTS:
        assert idents.count(ident) == 2, f"'{ident}' once per run"
    nodes = [r for r in body if r[1] == "NODE"]
    if level == "basic":
        assert nodes == [], "no per-node rows at basic"
    else:
        assert nodes and len(nodes) % 2 == 0, "the same plan-step rows in both runs"
        assert {(r[3], r[5]) for r in nodes} == {("CYCLES", "SUB-EVENT")}, "step rows: cycles sub-events"
        names = [r[6] for r in nodes[:len(nodes) // 2]]
        assert all(re.fullmatch(r".+:OpId_\d+ \(cycles\)", n) for n in names), f"'<step>:OpId_<k> (cycles)': {names}"
        assert any(n.startswith("mm:OpId_0") for n in names) and any(n.startswith("relu:OpId_1") for n in names), \
            f"rows name the ONNX nodes: {names}"
    assert all(int(r[2]) >= 0 for r in body), "every value is a number"
    # The System library serialized the same events next to the CSV (ORT: <csv stem>_qnn.log).
    from qnnemu.core.system_profile import read_profile_log
    header, records = read_profile_log(str(csv_path.with_name(csv_path.stem + "_qnn.log")))
    assert header["appName"] == "OnnxRuntime", "ORT's serialization header"
    assert [r["header"]["methodTypeName"] for r in records] == ["BACKEND_FINALIZE", "BACKEND_EXECUTE",
                                                                "BACKEND_EXECUTE"]
    serialized = [e["identifier"] for r in records for e in r["events"]]
    assert serialized == [r[6] for r in body if r[5] == "ROOT"], "the log holds the CSV's root events"


def test_onnxruntime_uses_extended_event_data(tmp_path, monkeypatch):
    """With QNN_PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT answered SUPPORTED, ORT reads extended
    event data and writes our timestamps into the CSV's first column."""
    from qnnemu.core import backend as core_backend
    monkeypatch.setattr(core_backend, "SUPPORTED_PROPERTIES", core_backend.SUPPORTED_PROPERTIES | {
        Q.QNN_PROPERTY_GROUP_PROFILE, Q.QNN_PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT})
    _, rows = ort_session(tmp_path, "detailed", runs=1)
    body = [r for r in rows[1:] if r]
    assert body and all(r[0].isdigit() and int(r[0]) > 0 for r in body), \
        f"timestamps from extended event data: {[r[0] for r in body]}"
