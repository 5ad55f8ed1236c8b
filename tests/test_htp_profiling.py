"""HTP profiling on the device model (QNN HTP backend documentation, "QNN HTP Profiling"): the
execute stats from the graph's prepared plan and the current clocks, DETAILED per-step cycles
(spill/fill steps included), the QNN_HTP_PROFILE_LEVEL_LINTING report (Wait (Scheduler), Overlap,
Overlap (wait) with the contributing ops, Resources), QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE (the
optrace object through profileGetExtendedEventData), DSP heap profiling with the documentation's
enable rules, extended event data for every event, and the System library / ONNX Runtime carrying
them.

Most tests install a hand-built ``PreparedPlan`` on a finalized graph (the library runs in this
interpreter), so every number the events must show is known; the real-graph tests check that
the events mirror whatever plan the prepare pipeline made.
"""
from __future__ import annotations

import json
import time

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.context_env import Env as ContextEnv
from helpers.profile_env import (
    ACCEL_CYCLES_AT,
    EXECUTE_EVENTS,
    EXECUTE_TYPES,
    Env,
    core_graph,
    data,
    events,
    expected_lint_tree,
    extended,
    optrace_object,
    ort_session,
    reference_lint_rows,
    sub_events,
    tree,
)
from helpers.system_lib import Events, create_target, table

from qnnemu.core import profile as core_profile
from qnnemu.headers import Q
from qnnemu.htp import perf
from qnnemu.htp.plan_types import PreparedPlan, Step

pytestmark = pytest.mark.usefixtures("qnn_abi")

OK = Q.QNN_SUCCESS
BASIC, DETAILED, LINTING = (Q.QNN_PROFILE_LEVEL_BASIC, Q.QNN_PROFILE_LEVEL_DETAILED,
                            Q.QNN_HTP_PROFILE_LEVEL_LINTING)
US, CYCLES, COUNT, BYTES, OBJECT, NONE = (
    Q.QNN_PROFILE_EVENTUNIT_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_CYCLES, Q.QNN_PROFILE_EVENTUNIT_COUNT,
    Q.QNN_PROFILE_EVENTUNIT_BYTES, Q.QNN_PROFILE_EVENTUNIT_OBJECT, Q.QNN_PROFILE_EVENTUNIT_NONE)
NODE = Q.QNN_PROFILE_EVENTTYPE_NODE
CRITICAL_AT = EXECUTE_TYPES.index(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE)
MHZ = perf.NOMINAL.core_mhz
RUNTIME_HEAP = core_profile.DSP_HEAP_MODEL["runtime_bytes"]


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


# ------------------------------------------------------------------------- a known plan
def hand_plan(graph: str = "g") -> PreparedPlan:
    """The test graph (fc -> act) as the HTP might schedule it, with a block t spilled and filled
    back by DMA meanwhile:

        step 0  fc       HMX  [0, 1000)     overlapped by the spill for 400 cycles
        step 1  t:spill  DMA  [600, 1000)
        step 2  t:fill   DMA  [1300, 1800)  runs while act waits
        step 3  act      HVX  [2000, 2400)  waited 800 cycles (ready at 1200), 500 of them
                                            with the fill running
    critical path (main thread): fc 1000 + act's wait 800 + act 400 = 2200; makespan 2400."""
    return PreparedPlan(
        graph=graph, soc_model=0, arch=73, vtcm_budget_bytes=1 << 20,
        steps=[
            Step(0, "op", "fc", "FullyConnected", 0, "HMX", ["x", "w"], ["h"], cycles=1000, start_cycle=0,
                 end_cycle=1000, overlap_cycles=400, overlap_steps=[1]),
            Step(1, "spill", "t:spill", None, None, "DMA", ["t"], ["t:ddr"], cycles=400, start_cycle=600,
                 end_cycle=1000, thread=1, overlap_cycles=400, overlap_steps=[0]),
            Step(2, "fill", "t:fill", None, None, "DMA", ["t:ddr"], ["t"], cycles=500, start_cycle=1300,
                 end_cycle=1800, thread=1),
            Step(3, "op", "act", "Relu", 1, "HVX", ["h"], ["y"], cycles=400, start_cycle=2000, end_cycle=2400,
                 wait_cycles=800, ready_cycle=1200, overlap_wait_cycles=500, overlap_wait_steps=[2]),
        ],
        prescheduled_order=[0, 1], peak_vtcm_bytes=4096, spill_bytes=64, fill_bytes=64,
        spill_fill_buffer_bytes=64, total_cycles=2400, critical_path_cycles=2200,
        passes=["hand-built for tests/test_htp_profiling.py"])


# (label, cycles, wait, overlap, overlap contributors, overlap (wait), its contributors, resources):
# the Input/Output pseudo-ops of the documentation's listings (OpIds after the 2 nodes' and 4
# steps'); act's "Wait" runs from the end of the previous main-thread op (fc, 1000) to its start.
HAND_LINT = [
    ("Input OpId_6", 0, 0, 0, [], 0, [], []),
    ("fc:OpId_0", 1000, 0, 400, ["t:spill:OpId_3"], 0, [], ["HMX"]),
    ("t:spill:OpId_3", 400, 0, 400, ["fc:OpId_0"], 0, [], ["DMA"]),
    ("t:fill:OpId_4", 500, 0, 0, [], 0, [], ["DMA"]),
    ("act:OpId_1", 400, 1000, 0, [], 500, ["t:fill:OpId_4"], ["HVX"]),
    ("Output OpId_7", 0, 0, 0, [], 0, [], []),
]


def install(env, plan: PreparedPlan, g=None) -> None:
    assert env.finalize(0, g) == OK, "setup: graphFinalize"
    core_graph(env.g if g is None else g).htp_plan = plan


def run(env, p) -> list[int]:
    code, result = env.execute(p)
    assert code == OK, f"graphExecute returned {code}"
    np.testing.assert_array_equal(result, [[6, 6, 6]], "profiling does not change results")
    return events(p)


def values(ids) -> dict[int, int]:
    return {d[0]: d[2] for d in map(data, ids)}


# ------------------------------------------------------------------------------- BASIC
def test_basic_execute_stats_from_the_plan(env):
    """The accelerator events are the plan's numbers at the current clocks; resources are
    acquired (VTCM, HVX, and HMX since step 0 runs on it) at the first run only."""
    install(env, hand_plan())
    p = env.profile(BASIC)
    first = values(run(env, p))
    acquire = core_profile.RESOURCE_ACQUIRE_US
    expected = {
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT: 0,
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_VTCM_ACQUIRE_TIME: acquire["VTCM"],
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME: acquire["HVX"] + acquire["HMX"],
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE: 2200,
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE: 2400,
        Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC: round(2400 / MHZ),
    }
    assert {t: first[t] for t in expected} == expected, "first run: the plan's cycles, resources acquired"
    second = values(run(env, p))
    assert second[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_VTCM_ACQUIRE_TIME] == 0, "VTCM kept after the first run"
    assert second[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME] == 0, "cores stay powered"
    assert second[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE] == 2400, "the model is deterministic"


def test_hmx_power_on_only_when_the_plan_uses_hmx(env):
    plan = hand_plan()
    plan.steps[0].resource = "HVX"
    install(env, plan)
    p = env.profile(BASIC)
    got = values(run(env, p))[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME]
    assert got == core_profile.RESOURCE_ACQUIRE_US["HVX"], "no HMX step: only the HVX is powered on"


@pytest.mark.parametrize("core_mhz", [500.0, 1000.0, 1500.0])
def test_accelerator_time_follows_the_clocks(env, monkeypatch, core_mhz):
    """Cycles stay, microseconds are cycles / core MHz of current_clocks() (the perf votes)."""
    plan = hand_plan()
    plan.total_cycles = 3_000_000
    install(env, plan)
    monkeypatch.setattr(perf, "current_clocks",
                        lambda device_id=0, core_id=0, arch=None: perf.Clocks(core_mhz, core_mhz, 2000.0, "TEST"))
    p = env.profile(BASIC)
    got = values(run(env, p))
    assert got[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE] == 3_000_000
    assert got[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC] == round(3_000_000 / core_mhz), \
        f"3e6 cycles at {core_mhz} MHz"


# ---------------------------------------------------------------------------- DETAILED
def test_detailed_one_event_per_step_with_spill_and_fill(env):
    install(env, hand_plan())
    p = env.profile(DETAILED)
    ids = run(env, p)
    subs = sub_events(ids[ACCEL_CYCLES_AT])
    got = [data(s) for s in subs]
    assert got == [(NODE, CYCLES, cycles, f"{label} (cycles)") for label, cycles, *_ in HAND_LINT[1:-1]], \
        f"one NODE event per plan step, spill/fill labelled '<block>:spill:OpId_<nodes + step>': {got}"
    stamps = [extended(s).v1.timestamp for s in subs]
    starts = [s.start_cycle for s in hand_plan().steps]
    assert [t - stamps[0] for t in stamps] == [round(c / MHZ) for c in starts], \
        "step timestamps follow their start cycles at the current clocks"
    assert sub_events(ids[CRITICAL_AT]) == [], "DETAILED: the critical-path event has no sub-events"


# ----------------------------------------------------------------------------- LINTING
def test_linting_report_of_the_hand_plan(env):
    """The documentation's showcase structure: under "Accelerator (critical path execute) time
    (cycles)", per op its cycles, Wait (Scheduler), Overlap and Overlap (wait) with the contributing
    op names, Resources, between the Input and Output pseudo-ops.  act's wait window [1000, 2000)
    (since fc ended) saw the fill run for 500 cycles."""
    install(env, hand_plan())
    p = env.profile(LINTING)
    ids = run(env, p)
    assert [data(i)[0] for i in ids] == EXECUTE_TYPES, "the execute stats as at every level"
    crit = tree(ids[CRITICAL_AT])
    assert crit[:4] == (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE, CYCLES, 2200,
                        "Accelerator (critical path execute) time (cycles)")
    assert crit[4] == expected_lint_tree(HAND_LINT), "the linting tree per step"
    assert sub_events(ids[ACCEL_CYCLES_AT]) == [], "the per-step events are not repeated under 3003"


def test_linting_lists_at_most_ten_contributors(env):
    plan = hand_plan()
    extra = [Step(4 + i, "spill", f"s{i}:spill", None, None, "DMA", [f"s{i}"], [f"s{i}:ddr"], cycles=50,
                  start_cycle=10 * i, end_cycle=10 * i + 50, thread=1) for i in range(12)]
    plan.steps += extra
    plan.steps[0].overlap_steps = [1] + [s.index for s in extra]
    install(env, plan)
    p = env.profile(LINTING)
    fc = sub_events(run(env, p)[CRITICAL_AT])[1]   # after the Input pseudo-op
    overlap = sub_events(fc)[1]
    names = [data(i)[3] for i in sub_events(overlap)]
    assert len(names) == core_profile.MAX_CONTRIBUTORS == 10, f"the documented 10 lines at most: {names}"
    assert names[:2] == ["t:spill:OpId_3", "s0:spill:OpId_6"], "the plan's overlap_steps order"


def test_linting_mirrors_the_prepared_plan_of_a_real_graph(env):
    """Whatever plan graphFinalize prepared, the linting tree is the documentation's report of its
    schedule (checked against a segment-by-segment reference)."""
    assert env.finalize() == OK
    plan = core_graph(env.g).htp_plan
    p = env.profile(LINTING)
    ids = run(env, p)
    assert tree(ids[CRITICAL_AT])[4] == expected_lint_tree(reference_lint_rows(plan, 2)), \
        "Input, one linting entry per plan step, Output"
    assert tree(ids[CRITICAL_AT])[2] == plan.critical_path_cycles


# ------------------------------------------------------------------------------ optrace
def enable_optrace(env, p):
    assert env.set_config(p, option=Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, enableOptrace=1) == OK


@pytest.mark.soc("SM8550")   # the hand-made plan is priced at v73's nominal clocks
@pytest.mark.float_math("float32")   # run() compares with the exact float32 result
@pytest.mark.parametrize("level", [DETAILED, LINTING], ids=["detailed", "htp-linting"])
def test_optrace_object(env, level):
    plan = hand_plan()
    install(env, plan)
    p = env.profile(level)
    enable_optrace(env, p)
    t0 = time.time_ns() // 1000
    ids = run(env, p)
    t1 = time.time_ns() // 1000
    assert [data(i)[0] for i in ids] == EXECUTE_TYPES + [Q.QNN_PROFILE_EVENTTYPE_TRACE], "one extra event, last"
    x, obj, payload = optrace_object(ids[-1])
    assert (x.v1.type, x.v1.unit) == (Q.QNN_PROFILE_EVENTTYPE_TRACE, OBJECT), "a unit OBJECT event"
    assert ffi.string(obj.fileName).decode() == "g.optrace.json", "fileName <graph>.optrace.json"
    assert data(ids[-1]) == (Q.QNN_PROFILE_EVENTTYPE_TRACE, OBJECT, len(payload), "Optrace"), \
        "plain event data: the object's length"
    doc = json.loads(payload.decode("utf-8"))
    execution = doc.pop("execution")
    tables = {k: doc.pop(k, None) for k in ("nodes", "tensors")}
    assert all(isinstance(v, list | dict) for v in tables.values()), f"node and tensor tables (traceback): {tables}"
    assert doc == json.loads(json.dumps(plan.to_optrace())), "the plan's optrace document"
    assert set(execution) == {"start_us", "end_us", "clocks", "runs"}
    assert t0 <= execution["start_us"] <= execution["end_us"] <= t1, "the call's span, us since the epoch"
    c = perf.current_clocks()
    assert execution["clocks"] == {"core_mhz": c.core_mhz, "hmx_mhz": c.hmx_mhz, "bus_mhz": c.bus_mhz,
                                   "corner": c.corner}
    [r] = execution["runs"]
    assert (r["execution"], r["total_cycles"], r["critical_path_cycles"], r["yields"]) == (1, 2400, 2200, 0)
    assert r["accel_end_us"] - r["accel_start_us"] == round(2400 / c.core_mhz), "accelerator span at the clocks"
    assert r["vtcm_acquire_us"] == core_profile.RESOURCE_ACQUIRE_US["VTCM"], "first run acquires VTCM"
    again = extended(ids[-1]).v1.backendOpaqueObject
    assert (again.opaqueObject.data, again.fileName) == (obj.opaqueObject.data, obj.fileName), \
        "the object's memory belongs to the profile: same buffer every time"


def test_no_optrace_object_without_the_config(env):
    install(env, hand_plan())
    p = env.profile(DETAILED)
    assert Q.QNN_PROFILE_EVENTTYPE_TRACE not in [data(i)[0] for i in run(env, p)]


# ------------------------------------------------------------------------ extended data
def test_every_event_has_extended_data(env):
    """profileGetExtendedEventData answers for every event of every level with the same type,
    unit, identifier and value as profileGetEventData (an OBJECT's value: its length)."""
    install(env, hand_plan())
    p = env.profile(LINTING)
    enable_optrace(env, p)
    ids = run(env, p)

    def walk(i):
        yield i
        for s in sub_events(i):
            yield from walk(s)
    seen = 0
    for i in (j for top in ids for j in walk(top)):
        typ, unit, value, ident = data(i)
        x = extended(i)
        assert x.version == Q.QNN_PROFILE_DATA_VERSION_1
        assert (x.v1.type, x.v1.unit, ffi.string(x.v1.identifier).decode()) == (typ, unit, ident)
        if unit == OBJECT:
            assert x.v1.backendOpaqueObject.opaqueObject.len == value
        else:
            assert (x.v1.value.dataType, x.v1.value.uint64Value) == (Q.QNN_DATATYPE_UINT_64, value), ident
        assert x.v1.timestamp > 0, f"{ident}: a timestamp"
        seen += 1
    assert seen > len(EXECUTE_EVENTS) + 4 * 5, f"the whole tree was walked ({seen} events)"


# ---------------------------------------------------------------------- DSP heap profiling
def dsp_config(ctx_env, enabled: bool):
    return ctx_env.context_configs({"custom": {
        "option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED,
        "dspMemoryProfilingEnabled": enabled}})


@pytest.fixture
def ctx_env():
    e = ContextEnv()
    yield e
    e.close()


def profile_on(ctx_env, level=BASIC) -> int:
    out = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(ctx_env.be), level, out) == OK, "profileCreate"
    return abi.hval(out[0])


def identifiers(p) -> list[tuple]:
    return [(d[0], d[1], d[3]) for d in map(data, events(p))]


def blob(ctx_env) -> bytes:
    ctx, _ = ctx_env.saved_context(1)
    b = ctx_env.get_binary(ctx)
    ctx_env.free_context(ctx)
    return b


INIT = (Q.QNN_PROFILE_EVENTTYPE_INIT, US, "QNN (init) time")
DEINIT = (Q.QNN_PROFILE_EVENTTYPE_DEINIT, US, "QNN (deinit) time")
BEFORE = (Q.QNN_PROFILE_EVENTTYPE_BACKEND, BYTES, "DSP:before_context_created")
AFTER = (Q.QNN_PROFILE_EVENTTYPE_BACKEND, BYTES, "DSP:after_context_freed")

# The documentation's enable rules: (case, config of the context, other contexts alive, expected
# events)
DSP_CREATE_CASES = [
    ("first-context-enabled", True, 0, [INIT, BEFORE]),
    ("first-context-disabled", False, 0, [INIT]),
    ("first-context-no-config", None, 0, [INIT]),
    ("not-the-first-context", True, 1, [INIT]),
]


@pytest.mark.parametrize("case,enabled,others,expected", DSP_CREATE_CASES, ids=[c[0] for c in DSP_CREATE_CASES])
def test_dsp_heap_before_context_created(ctx_env, case, enabled, others, expected):
    b = blob(ctx_env)
    alive = [ctx_env.context() for _ in range(others)]
    p = profile_on(ctx_env)
    code, ctx = ctx_env.load(b, configs=NULL if enabled is None else dsp_config(ctx_env, enabled), profile=p)
    assert code == OK, f"{case}: contextCreateFromBinary"
    assert identifiers(p) == expected, f"{case}: events of the load"
    if BEFORE in expected:
        assert data(events(p)[-1])[2] == RUNTIME_HEAP, "the DSP heap with no context: the runtime's"
    for c in alive + [ctx]:
        ctx_env.free_context(c)
    assert abi.call("profileFree", vp(p)) == OK


# (case, enabled at creation, set by contextSetConfig later, contexts left after the free, events)
DSP_FREE_CASES = [
    ("last-context-enabled", True, None, 0, [DEINIT, AFTER]),
    ("last-context-enabled-by-set-config", False, True, 0, [DEINIT, AFTER]),
    ("last-context-disabled", False, None, 0, [DEINIT]),
    ("not-the-last-context", True, None, 1, [DEINIT]),
]


@pytest.mark.parametrize("case,enabled,later,others,expected", DSP_FREE_CASES, ids=[c[0] for c in DSP_FREE_CASES])
def test_dsp_heap_after_context_freed(ctx_env, case, enabled, later, others, expected):
    b = blob(ctx_env)
    code, ctx = ctx_env.load(b, configs=dsp_config(ctx_env, enabled))
    assert code == OK
    if later is not None:
        assert abi.call("contextSetConfig", vp(ctx), dsp_config(ctx_env, later)) == OK, "contextSetConfig"
    alive = [ctx_env.context() for _ in range(others)]
    p = profile_on(ctx_env)
    assert abi.call("contextFree", vp(ctx), vp(p)) == OK, f"{case}: contextFree with a profile"
    assert identifiers(p) == expected, f"{case}: events of the free"
    if AFTER in expected:
        assert data(events(p)[-1])[2] == RUNTIME_HEAP, "all contexts freed: the runtime's heap is left"
    for c in alive:
        ctx_env.free_context(c)
    assert abi.call("profileFree", vp(p)) == OK


# ----------------------------------------------------------------- System library / ORT
def test_system_library_carries_the_linting_tree(env, tmp_path):
    """The events as an application reads them (extended data) serialized through our
    libQnnSystem.so: the log holds the same tree with the HTP type names."""
    from qnnemu.core.system_profile import read_profile_log, walk_events
    install(env, hand_plan())
    p = env.profile(LINTING)
    ids = run(env, p)

    def spec(i):
        x = extended(i)
        return {"kind": "ext", "type": int(x.v1.type), "unit": int(x.v1.unit), "ts": int(x.v1.timestamp),
                "id": ffi.string(x.v1.identifier).decode(),
                "scalar": (Q.QNN_DATATYPE_UINT_64, "uint64Value", int(x.v1.value.uint64Value)),
                "sub": [spec(s) for s in sub_events(i)]}
    specs = [spec(i) for i in ids]
    code, target = create_target(tmp_path)
    assert code == OK, "createSerializationTarget"
    ev = Events()
    assert ev.serialize(target, [ev.data(specs)]) == OK, "serializeEventData"
    assert table().systemProfileFreeSerializationTarget(target) == OK
    _, [record] = read_profile_log(str(tmp_path / "out_qnn.log"))
    logged = [(e["type"], e["value"], e["identifier"]) for e in walk_events(record["events"])]

    def walk(s):
        yield s
        for c in s["sub"]:
            yield from walk(c)
    assert logged == [(s["type"], s["scalar"][2], s["id"]) for top in specs for s in walk(top)], "same tree"
    names = {e["typeName"] for e in walk_events(record["events"])}
    assert {"HTP_NODE_WAIT", "HTP_NODE_OVERLAP", "HTP_NODE_WAIT_OVERLAP", "HTP_NODE_RESOURCEMASK",
            "HTP_NODE_CRITICAL_BG_OP_ID", "HTP_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE"} <= names, names


def test_onnxruntime_optrace(tmp_path):
    """ONNX Runtime's profiling_level=optrace: the CSV lists the execute stats and the optrace
    event; the System library's log next to it holds the optrace document of each run (ORT reads
    the object through extended event data: QNN_PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT)."""
    from qnnemu.core.system_profile import optrace_documents, read_profile_log
    csv_path, rows = ort_session(tmp_path, "optrace", runs=2)
    body = [r for r in rows[1:] if r]
    idents = [r[6] for r in body]
    for _, _, ident in EXECUTE_EVENTS:
        assert idents.count(ident) == 2, f"'{ident}' once per run"
    assert [r[3] for r in body if r[6] == "Optrace"] == ["OBJECT", "OBJECT"], "one optrace row per run"
    _, records = read_profile_log(str(csv_path.with_name(csv_path.stem + "_qnn.log")))
    docs = optrace_documents(records)
    assert len(docs) == 2, "one optrace document per run"
    for n, doc in enumerate(docs, 1):
        assert {s["name"] for s in doc["steps"]} >= {"mm", "relu"}, "the ONNX nodes are plan steps"
        assert doc["execution"]["runs"][0]["execution"] == n, "the graph's execution count"
