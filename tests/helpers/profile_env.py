"""A raw-ABI environment (tests/abi.py) for QnnProfile.h (+ HTP/QnnHtpProfile.h; QNN HTP backend
documentation, "HTP Execute Basic Profiling Events"): the graphExecute event table, ``Env``
(logger -> backend -> context -> graph 'g' with profile helpers), event readers, the check of
the execute events against the graph's prepared plan, and a profiled ONNX Runtime session on
the QNN EP.  Used by tests/test_profile.py, tests/test_htp_profiling.py and
tests/test_htp_acceptance.py."""
from __future__ import annotations

import csv
from pathlib import Path

import abi
import numpy as np
import pytest
from abi import NULL, RULE_ID, ffi, vp

import qnnemu
from helpers.ort import qnn_ep_device
from qnnemu.core.profile import RESOURCE_BITS
from qnnemu.headers import Q

BASIC, DETAILED, LINTING = (Q.QNN_PROFILE_LEVEL_BASIC, Q.QNN_PROFILE_LEVEL_DETAILED,
                            Q.QNN_HTP_PROFILE_LEVEL_LINTING)
US, CYCLES, COUNT = Q.QNN_PROFILE_EVENTUNIT_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_CYCLES, Q.QNN_PROFILE_EVENTUNIT_COUNT
NONE = Q.QNN_PROFILE_EVENTUNIT_NONE
NODE = Q.QNN_PROFILE_EVENTTYPE_NODE

# (type, unit, identifier) of the graphExecute events, in order, at every level: the "Execute
# Stats" of the QNN HTP backend documentation's profiling examples, with the vendor's event type
# ids (HTP/QnnHtpProfile.h).
EXECUTE_EVENTS = [
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_NUMBER_OF_HVX_THREADS, COUNT, "Number of HVX threads used"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC, US, "RPC (execute) time"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC, US, "QNN accelerator (execute) time"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT, COUNT, "Num times yield occured"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_VTCM_ACQUIRE_TIME, US, "Time for initial VTCM acquire"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME, US, "Time for HVX + HMX power on and acquire"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE, CYCLES,
     "Accelerator (critical path execute) time (cycles)"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE, CYCLES, "Accelerator (execute) time (cycles)"),
    (Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC, US, "Accelerator (execute) time"),
    (Q.QNN_PROFILE_EVENTTYPE_EXECUTE, US, "QNN (execute) time"),
]
EXECUTE_TYPES = [t for t, _, _ in EXECUTE_EVENTS]
ACCEL_CYCLES_AT = EXECUTE_TYPES.index(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE)


# ------------------------------------------------------------------------------ environment
class Env:
    """logger (DEBUG, recording) -> backend -> device -> context -> graph 'g':
    x (1, 4) -> FullyConnected 'fc' (w: 3 x 4 ones) -> h -> Relu 'act' -> y (1, 3)."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == Q.QNN_SUCCESS, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: backendCreate"
        code, self.ctx = abi.create("contextCreate", vp(self.be), NULL, NULL)
        assert code == Q.QNN_SUCCESS, "setup: contextCreate"
        self.g, self.x, self.y = self.graph("g")
        self.profiles: list[int] = []
        self.rec.clear()

    def graph(self, name: str):
        code, g = abi.create("graphCreate", vp(self.ctx), abi.cstr(name, self.keep), NULL)
        assert code == Q.QNN_SUCCESS, f"setup: graphCreate {name}"
        x = abi.tensor("x", (1, 4))
        w = abi.static_tensor("w", np.ones((3, 4), np.float32))
        h = abi.tensor("h", (1, 3), type_=Q.QNN_TENSOR_TYPE_NATIVE)
        y = abi.tensor("y", (1, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
        for t in (x, w, h, y):
            assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == Q.QNN_SUCCESS, "setup: tensor"
        self.keep += [x, w, h, y]
        for op in (abi.op_config("fc", "FullyConnected", [x, w], [h]), abi.op_config("act", "Relu", [h], [y])):
            self.keep.append(op)
            assert abi.call("graphAddNode", vp(g), op) == Q.QNN_SUCCESS, "setup: graphAddNode"
        return g, x, y

    def close(self):
        for p in self.profiles:
            abi.call("profileFree", vp(p))  # may already be freed by the test
        if self.ctx:
            assert abi.call("contextFree", vp(self.ctx), NULL) == Q.QNN_SUCCESS, "teardown: contextFree"
        assert abi.call("backendFree", vp(self.be)) == Q.QNN_SUCCESS, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == Q.QNN_SUCCESS, "teardown: logFree"

    # ---- profiles -----------------------------------------------------------------------
    def profile(self, level=BASIC) -> int:
        code, p = self.create_profile(level)
        assert code == Q.QNN_SUCCESS, f"profileCreate(level {level}) returned {code}"
        return p

    def create_profile(self, level, backend=None) -> tuple[int, int]:
        out = ffi.new("Qnn_ProfileHandle_t *")
        code = abi.call("profileCreate", vp(self.be if backend is None else backend), level, out)
        p = abi.hval(out[0])
        if code == Q.QNN_SUCCESS:
            self.profiles.append(p)
        return code, p

    def finalize(self, profile=0, g=None) -> int:
        return abi.call("graphFinalize", vp(self.g if g is None else g), vp(profile), NULL)

    def execute(self, profile=0, g=None, x=None, y=None, in_size=None) -> tuple[int, np.ndarray]:
        inp = abi.Struct(ffi.new("Qnn_Tensor_t *", (self.x if x is None else x).ptr[0]), [])
        out = abi.Struct(ffi.new("Qnn_Tensor_t *", (self.y if y is None else y).ptr[0]), [])
        result = np.zeros((1, 3), np.float32)
        abi.set_buffer(inp, np.arange(4, dtype=np.float32)[None], in_size)
        abi.set_buffer(out, result)
        code = abi.call("graphExecute", vp(self.g if g is None else g), abi.tensor_array([inp], self.keep), 1,
                        abi.tensor_array([out], self.keep), 1, vp(profile), NULL)
        return code, result

    def set_config(self, profile, **fields) -> int:
        c = ffi.new("QnnProfile_Config_t *")
        for k, v in fields.items():
            setattr(c, k, v)
        self.keep.append(c)
        return abi.call("profileSetConfig", vp(profile), abi.null_terminated("QnnProfile_Config_t", [c], self.keep))

    # ---- checking ------------------------------------------------------------------------
    def rules_logged(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_ID.findall(m)}

    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]


def events(profile: int) -> list[int]:
    ids = ffi.new("const QnnProfile_EventId_t **")
    n = ffi.new("uint32_t *")
    assert abi.call("profileGetEvents", vp(profile), ids, n) == Q.QNN_SUCCESS, "profileGetEvents"
    if n[0]:
        assert ids[0] != NULL, "profileGetEvents: a non-empty list has a pointer"
    return [int(ids[0][i]) for i in range(n[0])]


def sub_events(event_id: int) -> list[int]:
    ids = ffi.new("const QnnProfile_EventId_t **")
    n = ffi.new("uint32_t *")
    assert abi.call("profileGetSubEvents", event_id, ids, n) == Q.QNN_SUCCESS, "profileGetSubEvents"
    return [int(ids[0][i]) for i in range(n[0])]


def data(event_id: int) -> tuple[int, int, int, str | None]:
    d = ffi.new("QnnProfile_EventData_t *")
    assert abi.call("profileGetEventData", event_id, d) == Q.QNN_SUCCESS, "profileGetEventData"
    return int(d.type), int(d.unit), int(d.value), ffi.string(d.identifier).decode() if d.identifier != NULL else None


def extended(event_id: int):
    d = ffi.new("QnnProfile_ExtendedEventData_t *")
    assert abi.call("profileGetExtendedEventData", event_id, d) == Q.QNN_SUCCESS, "profileGetExtendedEventData"
    return d


def core_profile(handle: int):
    from qnnemu.core.handles import HANDLES
    return HANDLES.lookup(handle)


core_graph = core_profile  # any handle's core object


def tree(event_id: int) -> tuple:
    """(type, unit, value, identifier, [sub-trees]) of an event."""
    return (*data(event_id), [tree(s) for s in sub_events(event_id)])


def optrace_object(event_id):
    x = extended(event_id)
    obj = x.v1.backendOpaqueObject
    return x, obj, bytes(ffi.buffer(obj.opaqueObject.data, obj.opaqueObject.len))


# The linting tree (HTP_NODE_* sub-events) expected for rows of
# (label, cycles, wait, overlap, overlap_by, overlap_wait, wait_by, resources).
def expected_lint_tree(rows) -> list[tuple]:
    ids = {label: int(label.rsplit("OpId_", 1)[1]) for label, *_ in rows}
    out = []
    for label, cycles, wait, overlap, by, overlap_wait, wait_by, resources in rows:
        mask = sum(RESOURCE_BITS[r] for r in resources)
        out.append((NODE, CYCLES, cycles, f"{label} (cycles)", [
            (Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT, CYCLES, wait, "Wait (Scheduler) time", []),
            (Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_OVERLAP, CYCLES, overlap, "Overlap time",
             [(Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_CRITICAL_BG_OP_ID, NONE, ids[b], b, []) for b in by]),
            (Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT_OVERLAP, CYCLES, overlap_wait, "Overlap (wait) time",
             [(Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT_BG_OP_ID, NONE, ids[b], b, []) for b in wait_by]),
            (Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_RESOURCEMASK, NONE, mask,
             ("Resources: " + ", ".join(resources)).rstrip(), []),
        ]))
    return out


def check_execute_events(ids: list[int], wall_us: float, graph_handle: int, first_run: bool) -> dict[int, int]:
    """The execute events: measured host times nest; the accelerator numbers are the graph's
    prepared plan at the current clocks; resources are acquired at the graph's first run."""
    from qnnemu.core.profile import RESOURCE_ACQUIRE_US, plan_uses
    from qnnemu.htp.perf import current_clocks
    from qnnemu.htp.settings import graph_settings
    got = [data(i) for i in ids]
    assert [(t, u, s) for t, u, _, s in got] == EXECUTE_EVENTS, f"execute events: {got}"
    values = {t: v for t, _, v, _ in got}
    ex = values[Q.QNN_PROFILE_EVENTTYPE_EXECUTE]
    host = values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC]
    htp = values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC]
    assert ex <= wall_us + 1, f"QNN (execute) time {ex} us fits in the call's {wall_us:.0f} us"
    assert ex >= host >= htp >= 0, f"EXECUTE {ex} >= HOST_RPC {host} >= HTP_RPC {htp} (measured)"
    g = core_graph(graph_handle)
    plan = g.htp_plan
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE] == plan.total_cycles, \
        "accelerator cycles: the plan's total cycles"
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE] == plan.critical_path_cycles, \
        "critical-path cycles: the plan's"
    mhz = current_clocks().core_mhz
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC] == round(plan.total_cycles / mhz), \
        f"accelerator us: total cycles at the current {mhz} MHz"
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_NUMBER_OF_HVX_THREADS] == graph_settings(g).hvx_threads, \
        "the graph's HVX threads"
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT] == 0, "no yields: nothing preempts"
    vtcm = RESOURCE_ACQUIRE_US["VTCM"] if first_run else 0
    power = (RESOURCE_ACQUIRE_US["HVX"] + (RESOURCE_ACQUIRE_US["HMX"] if plan_uses(plan, "HMX") else 0)) \
        if first_run else 0
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_VTCM_ACQUIRE_TIME] == vtcm, \
        f"VTCM acquire {'at the first run' if first_run else '0 once acquired'}"
    assert values[Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME] == power, \
        f"HVX + HMX power on {'at the first run' if first_run else '0 once powered'}"
    return values


def ort_session(tmp_path: Path, level: str, runs: int = 2) -> tuple[Path, list]:
    """A MatMul + Relu model run ``runs`` times through ONNX Runtime's QNN EP on our backend with
    ``profiling_level`` = ``level``; (the CSV's path, its rows).  Skips without ORT, onnx,
    onnxruntime-qnn or our libQnnSystem.so."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    from onnx import TensorProto, helper
    if not Path(qnnemu.system_library_path()).exists():
        pytest.skip("libQnnSystem.so is not built")
    devices = [qnn_ep_device()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], (np.eye(8, dtype=np.float32) * 2).ravel().tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                               helper.make_node("Relu", ["h"], ["y"], name="relu")], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    csv_path = tmp_path / f"profile_{level}.csv"
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(devices, {"backend_path": qnnemu.backend_library_path(),
                                          "profiling_level": level, "profiling_file_path": str(csv_path)})
    sess = ort.InferenceSession(str(path), so)
    feeds = {"x": np.arange(-4, 4, dtype=np.float32)[None]}
    for _ in range(runs):
        out = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(out, np.maximum(feeds["x"] * 2, 0))
    del sess
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    return csv_path, rows


def reference_lint_rows(plan, n_nodes: int) -> list[tuple]:
    """The linting report of ``plan`` as the documentation defines it ("Detailed and Linting
    Profiling"), computed segment by segment (an oracle independent of qnnemu.core.profile's
    sweep): rows for expected_lint_tree, Input and Output pseudo-ops included.  Main thread:
    op and wait steps and the System Services other than the checkpoint set and the L2 prefetch,
    in start order; "Wait" since the previous main-thread step ended; overlap
    windows covered by other steps except the ones the step waits on (its dependencies, the
    launch behind a wait it depends on, its own launch)."""
    from qnnemu.core.profile import step_label
    steps = plan.steps
    by = {s.index: s for s in steps}
    label = {s.index: step_label(s, n_nodes)[0] for s in steps}

    def covered(lo, hi, exclude):
        if hi <= lo:
            return 0, []
        live = [s for s in steps if s.end_cycle > s.start_cycle and s.index not in exclude
                and s.start_cycle < hi and s.end_cycle > lo]
        cuts = sorted({lo, hi, *(max(lo, s.start_cycle) for s in live), *(min(hi, s.end_cycle) for s in live)})
        total = sum(b - a for a, b in zip(cuts, cuts[1:])
                    if any(s.start_cycle <= a and s.end_cycle >= b for s in live))
        return total, sorted(s.index for s in live)

    main_end, wait_from = 0, {}
    main = [s for s in steps if s.kind in ("op", "wait") or
            (s.kind == "service" and s.op_type not in ("DmaCheckpointSet", "SystemService"))]
    for s in sorted(main, key=lambda s: (s.start_cycle, s.index)):
        wait_from[s.index] = main_end if main_end <= s.start_cycle else s.start_cycle
        main_end = max(main_end, s.end_cycle)
    first, last = n_nodes + len(steps), n_nodes + len(steps) + 1
    rows = [(f"Input OpId_{first}", 0, 0, 0, [], 0, [], [])]
    for s in steps:
        exclude = {s.index, *s.deps}
        exclude |= {by[d].pair for d in s.deps if by[d].kind == "wait" and by[d].pair is not None}
        if s.kind == "wait" and s.pair is not None:
            exclude.add(s.pair)
        lo = wait_from.get(s.index, s.start_cycle - s.wait_cycles)
        ov, ov_by = covered(s.start_cycle, s.end_cycle, exclude)
        ow, ow_by = covered(lo, s.start_cycle, exclude)
        rows.append((label[s.index], s.cycles, s.start_cycle - lo, ov, [label[i] for i in ov_by][:10], ow,
                     [label[i] for i in ow_by][:10],
                     [r for r in RESOURCE_BITS if r in (s.resources or [s.resource])]))
    rows.append((f"Output OpId_{last}", 0, max(0, plan.total_cycles - main_end), 0, [], 0, [], []))
    return rows
