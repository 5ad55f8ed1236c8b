"""qnnemu-profile-viewer (qnnemu/tools/profile_viewer.py), the chrometrace writer
(qnnemu/tools/viewer/chrometrace.py) and the QHAS report (qnnemu/tools/viewer/qhas.py) -- QNN HTP
backend documentation, "Example Profile Viewer Command", optrace "Post Process (Chrometrace
Generation)", "Memory Bandwidth and Allocation graphs", "Gzip Compression of Chrometrace", "Runtrace
Execution and Preemption Events", "QNN HTP Analysis Summary (QHAS)".

The traces are checked against the Trace Event Format with ``check_trace``
(tests/helpers/trace_check.py: required keys per phase, numeric counters, named
processes/threads, per-lane ordering and nesting), which is itself shown to reject broken
traces.  Documents come from PreparedPlan objects built here (a spilling
chain, parallel branches with launch/wait and overlapping steps, several runs with yields at a
non-nominal clock) and from a real finalized graph; logs in the three input formats are written
with the real writers (libQnnSystem.so's serialization target module, qnnemu-net-run).  The HTML
report is parsed with html.parser and, when Debian's chromium is installed, rendered headless to
check the sorted / filtered table DOM.
"""
from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers.trace_check import (
    CHROMIUM,
    HtmlPage,
    assert_valid,
    check_trace,
    counter_series,
    parse_html,
    thread_names,
    x_events,
)
from vendor import our_library

from qnnemu.core import system_profile
from qnnemu.headers import Q
from qnnemu.htp.plan_types import PLAIN, TCM, Block, PreparedPlan, Step
from qnnemu.tools import profile_viewer
from qnnemu.tools.viewer import chrometrace, qhas

REPO = Path(__file__).resolve().parent.parent
needs_ours = pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")
KB = 1024


# -------------------------------------------------------------------------- documents
def spilling_plan() -> PreparedPlan:
    """conv (HMX) -> relu (HVX); relu's output r is spilled while mul works in VTCM, filled back
    for add.  Budget 320 KiB; peak 128+128+64 KiB while relu runs."""
    p = PreparedPlan(graph="spilling", soc_model=Q.QNN_SOC_MODEL_SM8550, arch=73,
                     vtcm_budget_bytes=320 * KB)
    p.blocks = [Block("x", TCM, 64 * KB, 2048, tensor_id=1, offset=0, first_step=0, last_step=0),
                Block("c", TCM, 128 * KB, 2048, tensor_id=2, offset=64 * KB, first_step=0, last_step=1),
                Block("r", TCM, 128 * KB, 2048, tensor_id=3, offset=192 * KB, first_step=1, last_step=2),
                Block("w", TCM, 64 * KB, 2048, tensor_id=4, offset=0, first_step=1, last_step=1),
                Block("r@ddr", PLAIN, 128 * KB, 64),
                Block("m", TCM, 192 * KB, 2048, tensor_id=5, offset=0, first_step=3, last_step=5),
                Block("r#1", TCM, 128 * KB, 2048, tensor_id=3, offset=192 * KB, first_step=4, last_step=5),
                Block("y", PLAIN, 64 * KB, 64, tensor_id=6)]
    p.steps = [
        Step(0, "op", "conv", "Conv2d", 0, "HMX", ["x"], ["c"], 192 * KB, 4000, 0, 4000),
        Step(1, "op", "relu", "Relu", 1, "HVX", ["c", "w"], ["r"], 320 * KB, 1500, 4000, 5500,
             wait_cycles=20),
        Step(2, "spill", "r:spill", None, None, "DMA", ["r"], ["r@ddr"], 128 * KB, 2000, 5500, 7500),
        Step(3, "op", "mul", "ElementWiseMultiply", 2, "HVX", [], ["m"], 192 * KB, 2500, 6000, 8500,
             overlap_cycles=1500, overlap_steps=[2]),
        Step(4, "fill", "r:fill", None, None, "DMA", ["r@ddr"], ["r#1"], 320 * KB, 2000, 8500, 10500),
        Step(5, "op", "add", "ElementWiseAdd", 3, "HVX", ["r#1", "m"], ["y"], 320 * KB, 1200, 10500, 11700,
             wait_cycles=2000, overlap_wait_cycles=2000, overlap_wait_steps=[4]),
    ]
    p.total_cycles, p.critical_path_cycles = 11700, 11200
    p.peak_vtcm_bytes, p.spill_bytes, p.fill_bytes = 320 * KB, 128 * KB, 128 * KB
    p.spill_fill_buffer_bytes = 128 * KB
    p.passes = ["blocks: 8 registered", "spill/fill: r spilled (131072 bytes)"]
    return p


def parallel_plan() -> PreparedPlan:
    """Two branches after a split: left convs on HMX (launched/waited from HVX thread 0), right
    elementwise ops on HVX threads 0 and 1; two steps of HVX thread 1 overlap in time (the
    viewer must put the second on an extra lane); a 0-cycle input op."""
    p = PreparedPlan(graph="branches", soc_model=Q.QNN_SOC_MODEL_SM8650, arch=75,
                     vtcm_budget_bytes=8 * 1024 * KB)
    p.blocks = [Block("in", TCM, 32 * KB, 2048, first_step=0, last_step=2),
                Block("l1", TCM, 64 * KB, 2048, first_step=2, last_step=6),
                Block("r1", TCM, 16 * KB, 2048, first_step=3, last_step=6),
                Block("r2", TCM, 16 * KB, 2048, first_step=4, last_step=6),
                Block("out", PLAIN, 64 * KB, 64)]
    p.steps = [
        Step(0, "op", "Input OpId_2", "Input", 0, "HVX", [], ["in"], 32 * KB, 0, 0, 0),
        Step(1, "launch", "convLeft:launch", "Conv2d", 1, "HVX", ["in"], [], 32 * KB, 100, 0, 100, thread=0),
        Step(2, "op", "convLeft", "Conv2d", 1, "HMX", ["in"], ["l1"], 96 * KB, 6000, 100, 6100,
             overlap_cycles=3000, overlap_steps=[3, 4]),
        Step(3, "op", "subRight", "ElementWiseSubtract", 2, "HVX", ["in"], ["r1"], 112 * KB, 3000, 200, 3200,
             thread=1, overlap_steps=[2], overlap_cycles=3000),
        Step(4, "op", "divRight", "ElementWiseDivide", 3, "HVX", ["r1"], ["r2"], 128 * KB, 4000, 3000, 7000,
             thread=1, overlap_steps=[2], overlap_cycles=3100),
        Step(5, "wait", "convLeft:wait", "Conv2d", 1, "HVX", [], [], 96 * KB, 50, 6100, 6150, thread=0,
             wait_cycles=5900),
        Step(6, "op", "addOut", "ElementWiseAdd", 4, "HVX", ["l1", "r1", "r2"], ["out"], 96 * KB, 900,
             7000, 7900, thread=0),
    ]
    p.total_cycles, p.critical_path_cycles = 7900, 7000
    p.peak_vtcm_bytes = 128 * KB
    return p


def with_execution(doc: dict, runs: list[dict], core_mhz: float = 500.0) -> dict:
    """The document as optrace profiling hands it out: the plan plus ``execution`` (the layout
    of qnnemu/core/profile.py: epoch microseconds, the steps' cycle 0 at accel_start_us)."""
    doc = json.loads(json.dumps(doc))
    doc["execution"] = {"start_us": runs[0]["start_us"], "end_us": runs[-1]["end_us"],
                        "clocks": {"core_mhz": core_mhz, "hmx_mhz": core_mhz, "bus_mhz": 2 * core_mhz,
                                   "corner": "SVS"},
                        "runs": runs}
    return doc


T0 = 1_700_000_000_000_000.0   # an epoch microsecond


def three_runs(model_us: float) -> list[dict]:
    """Three executions: the second starts before the first's modelled span would end (the
    viewer must shift it) and reports two preemptions."""
    return [
        {"execution": 1, "start_us": T0, "end_us": T0 + model_us + 50, "accel_start_us": T0 + 30,
         "accel_end_us": T0 + 30 + model_us, "yields": 0, "vtcm_acquire_us": 10, "power_on_us": 15},
        {"execution": 2, "start_us": T0 + 60, "end_us": T0 + 60 + model_us + 40,
         "accel_start_us": T0 + 70, "accel_end_us": T0 + 70 + model_us,
         "yields": [{"start_us": T0 + 75, "end_us": T0 + 78, "reason": "higher priority graph"},
                    {"start_us": T0 + 80}], "vtcm_acquire_us": 0, "power_on_us": 0},
        {"execution": 3, "start_us": T0 + 10_000, "end_us": T0 + 10_000 + model_us + 40,
         "accel_start_us": T0 + 10_010, "accel_end_us": T0 + 10_010 + model_us, "yields": 0},
    ]


def integral(points: list[tuple[float, float]]) -> float:
    return sum(v * (t2 - t1) for (t1, v), (t2, _) in zip(points, points[1:]))


# ------------------------------------------------------------------- the checker itself
def test_checker_rejects_broken_traces():
    good = chrometrace.build_trace([spilling_plan().to_optrace()])
    assert_valid(good)
    first_x = next(i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "X")
    first_c = next(i for i, e in enumerate(good["traceEvents"]) if e["ph"] == "C")

    def broken(mutate):
        t = json.loads(json.dumps(good))
        mutate(t["traceEvents"])
        return check_trace(t)

    cases = {
        "missing dur": lambda ev: ev[first_x].pop("dur"),
        "negative ts": lambda ev: ev[first_x].update(ts=-1),
        "string counter": lambda ev: ev[first_c]["args"].update(bytes="12"),
        "unknown phase": lambda ev: ev[first_x].update(ph="Q"),
        "thread unnamed": lambda ev: ev[first_x].update(tid=4242),
        "process unnamed": lambda ev: ev[first_x].update(pid=77),
        "bad metadata": lambda ev: ev[0]["args"].pop("name"),
        "overlap without nesting": lambda ev: ev.append(dict(ev[first_x],
                                                             ts=ev[first_x]["ts"] + ev[first_x]["dur"] / 2 + 1e-3,
                                                             dur=ev[first_x]["dur"] * 10)),
    }
    for what, mutate in cases.items():
        assert broken(mutate), f"the checker rejects a trace with: {what}"


# --------------------------------------------------------------------------- chrometrace
def test_spilling_graph_trace():
    plan = spilling_plan()
    trace = chrometrace.build_trace([plan.to_optrace()], source="test")
    assert_valid(trace)
    names = thread_names(trace)
    assert {"HMX 0", "HVX thread 0", "DMA queue 0", "Dominant path", "spilling Runtraces"} <= set(names.values()), \
        f"lanes per resource plus the dominant path and runtraces: {sorted(names.values())}"
    steps = x_events(trace)
    by_name = {e["name"]: e for e in steps if e["cat"] != "dominant" and e["cat"] != "runtrace"}
    for s in plan.steps:
        e = by_name[s.name]
        assert names[(e["pid"], e["tid"])].startswith(chrometrace.LANE_KINDS[s.resource][0]), \
            f"{s.name} is on a {s.resource} lane"
        assert (e["ts"], e["dur"]) == (s.start_cycle / 1000.0, (s.end_cycle - s.start_cycle) / 1000.0), \
            f"{s.name}: cycles -> us at the nominal 1000 MHz core clock"
        assert e["args"]["cycles"] == s.cycles and e["args"]["kind"] == s.kind and \
            e["args"]["wait_cycles"] == s.wait_cycles and e["args"]["overlap_cycles"] == s.overlap_cycles, \
            f"{s.name}: the step's numbers are in args"
    assert by_name["r:spill"]["args"]["system_service"] == "TcmToDram" and \
        by_name["r:fill"]["args"]["system_service"] == "DramToTcm", \
        "spill/fill carry the documented System Service names"
    assert by_name["r:spill"]["args"]["dma_bytes"] == 128 * KB == by_name["r:fill"]["args"]["dma_bytes"], \
        "spill/fill bytes come from the blocks they copy"
    assert by_name["mul"]["args"]["overlap_with"] == ["r:spill"] and \
        by_name["add"]["args"]["overlap_wait_with"] == ["r:fill"], "overlapping steps are named"

    # VTCM alloc: brute force over every instant a step starts or ends.
    vtcm = counter_series(trace, "VTCM alloc", "bytes")
    instants = sorted({c for s in plan.steps for c in (s.start_cycle, s.end_cycle)})
    steps_by_index = {s.index: s for s in plan.steps}

    def live(cycle):
        return sum(b.size for b in plan.blocks if b.kind == TCM and
                   steps_by_index[b.first_step].start_cycle <= cycle < steps_by_index[b.last_step].end_cycle)
    for cycle in instants:
        at = [v for t, v in vtcm if t <= cycle / 1000.0]
        assert at and at[-1] == live(cycle), f"VTCM alloc at cycle {cycle}: {at[-1] if at else None} != {live(cycle)}"
    assert max(v for _, v in vtcm) == plan.peak_vtcm_bytes == 320 * KB, "the counter peaks at the plan's peak"
    assert vtcm[-1][1] == 0, "everything is freed at the end"

    # DMA bandwidth: the area under each series is the bytes moved (MB/s x us = bytes).
    fill = counter_series(trace, "DMA bandwidth", "DRAM read (fill) MB/s")
    spill = counter_series(trace, "DMA bandwidth", "DRAM write (spill) MB/s")
    assert integral(fill) == pytest.approx(plan.fill_bytes, rel=1e-6), "fill bandwidth integrates to fill_bytes"
    assert integral(spill) == pytest.approx(plan.spill_bytes, rel=1e-6), "spill bandwidth integrates to spill_bytes"
    assert max(v for _, v in spill) == pytest.approx(128 * KB / 2.0), \
        "128 KiB over 2000 cycles at 1000 MHz = 65536 MB/s"
    assert trace["otherData"]["graphs"][0]["spill_bytes"] == 128 * KB, "otherData summarises the plan"


def test_parallel_branches_lanes_and_dominant_path():
    plan = parallel_plan()
    doc = plan.to_optrace()
    trace = chrometrace.build_trace([doc])
    assert_valid(trace)
    names = thread_names(trace)
    lanes = {e["name"]: names[(e["pid"], e["tid"])] for e in x_events(trace, cat=None)
             if e["cat"] not in ("dominant", "runtrace")}
    assert lanes["subRight"] == "HVX thread 1" and lanes["divRight"] == "HVX thread 1 (overlapping 1)", \
        f"overlapping steps of one thread get separate lanes: {lanes}"
    assert lanes["convLeft"] == "HMX 0" and lanes["convLeft:launch"] == lanes["convLeft:wait"] == "HVX thread 0", \
        "launch/wait pairs sit on the launching thread, the op on HMX"
    input_op = next(e for e in x_events(trace) if e["name"] == "Input OpId_2")
    assert input_op["dur"] == 0, "a 0-cycle op is a 0-length span"
    assert next(e for e in x_events(trace) if e["name"] == "convLeft")["args"]["resources"] == ["HVX", "HMX"], \
        "an op's resources include those of its launch/wait steps"

    path = chrometrace.dominant_path(doc)
    rank = {name: i for i, name in enumerate(chrometrace.DOMINANT_PRIORITY)}
    for seg in path:
        mid = (seg["start_cycle"] + seg["end_cycle"]) / 2
        running = [s for s in plan.steps if s.start_cycle <= mid < s.end_cycle]
        best = min(rank[chrometrace.DOMINANT_PRIORITY[chrometrace.dominant_class(s.__dict__)]] for s in running)
        assert rank[seg["class"]] == best, f"segment {seg['name']} at {mid} has the highest priority running"
    busy = sorted({c for s in plan.steps for c in (s.start_cycle, s.end_cycle)})
    covered = sum(hi - lo for lo, hi in zip(busy, busy[1:])
                  if any(s.start_cycle <= lo and s.end_cycle >= hi for s in plan.steps))
    assert sum(seg["cycles"] for seg in path) == covered == 7900, "the dominant path covers every busy cycle"
    assert [seg["name"] for seg in path][:2] == ["convLeft:launch", "convLeft"], \
        "HVX launch first, then the HMX op dominates while it runs"
    dom = list(x_events(trace, cat="dominant"))
    assert [e["name"] for e in dom] == [seg["name"] for seg in path], "the Dominant path lane shows the segments"


def test_multi_run_with_clocks_yields_and_shift():
    plan = spilling_plan()
    model_us = plan.total_cycles / 500.0
    doc = with_execution(plan.to_optrace(), three_runs(model_us))
    trace = chrometrace.build_trace([doc])
    assert_valid(trace)
    runs = [e for e in x_events(trace, cat="runtrace") if "execute" in e["name"]]
    assert len(runs) == 3, "one runtrace span per execution"
    conv = [e for e in x_events(trace, cat="op") if e["name"] == "conv"]
    assert len(conv) == 3 and all(e["dur"] == pytest.approx(4000 / 500.0) for e in conv), \
        "each run's steps, timed at the document's 500 MHz core clock"
    assert conv[0]["ts"] == pytest.approx(30.0), "run 0's cycle 0 is its accel_start_us (relative to the first run)"
    assert runs[1]["args"]["shift_us"] > 0 and conv[1]["ts"] >= runs[0]["ts"] + runs[0]["dur"] - 1e-6, \
        "a run that would overlap the previous modelled run is moved after it"
    assert runs[2]["args"]["shift_us"] == 0 and conv[2]["ts"] == pytest.approx(10_010.0), \
        "a run far enough away keeps its host time"
    kids = [e["name"] for e in x_events(trace, cat="runtrace") if e["args"]["run"] == 0]
    assert kids == ["spilling execute #0", "VTCM acquire", "HVX + HMX power on and acquire", "accelerator"], \
        f"run 0's execution events: {kids}"
    yields = [e for e in trace["traceEvents"] if e.get("cat") == "preemption"]
    assert [(e["ph"], e["args"].get("reason")) for e in yields] == [("X", "higher priority graph"), ("i", None)], \
        "yields with an end are spans, without one instants"
    assert thread_names(trace)[(yields[0]["pid"], yields[0]["tid"])] == "spilling Yields"
    assert runs[1]["args"]["yields"] == 2 and runs[0]["args"]["execution"] == 1, "run fields are in args"
    one_run = counter_series(chrometrace.build_trace([plan.to_optrace()]), "VTCM alloc", "bytes")
    assert [v for _, v in counter_series(trace, "VTCM alloc", "bytes")] == [v for _, v in one_run] * 3, \
        "the VTCM counter repeats per run"


def test_config_features_drop_runtrace_and_memory():
    doc = spilling_plan().to_optrace()
    trace = chrometrace.build_trace([doc], runtrace=False, memory_info=False)
    assert_valid(trace)
    assert not [e for e in trace["traceEvents"] if e["ph"] == "C"], "memory_info off: no counters"
    assert not x_events(trace, cat="runtrace"), "runtrace off: no runtrace spans"


def test_two_graphs_get_two_processes():
    a, b = spilling_plan().to_optrace(), parallel_plan().to_optrace()
    trace = chrometrace.build_trace([a, b, a])
    assert_valid(trace)
    processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["branches - HTP core 0", "spilling - HTP core 0"], processes
    assert trace["otherData"]["graphs"][0]["runs"] == 2, "two documents of one graph: two runs in its process"


def test_merge_documents_keeps_runs_in_order():
    plan = spilling_plan()
    runs = three_runs(plan.total_cycles / 500.0)
    docs = [with_execution(plan.to_optrace(), [r]) for r in runs]
    merged = chrometrace.merge_documents(docs)
    assert len(merged) == 1 and [r["execution"] for r in merged[0]["execution"]["runs"]] == [1, 2, 3], \
        "one document per execute merge into one with every run"
    assert merged[0]["execution"]["start_us"] == T0 and merged[0]["execution"]["end_us"] == runs[-1]["end_us"]
    other = with_execution(plan.to_optrace(), [runs[0]], core_mhz=1500.0)
    assert len(chrometrace.merge_documents(docs + [other])) == 2, "different clocks stay separate"


@pytest.mark.parametrize("mutation, fragment", [
    (lambda d: d.update(format="other"), "format is 'other'"),
    (lambda d: d.update(version=9), "version 9 is not supported"),
    (lambda d: d["steps"][1].update(start_cycle=-5), "steps[1].start_cycle: must be >= 0"),
    (lambda d: d["steps"][2].update(end_cycle=1), "steps[2]: end_cycle 1 is before start_cycle"),
    (lambda d: d["steps"][0].update(resource="GPU"), "steps[0].resource: 'GPU'"),
    (lambda d: d["blocks"][0].update(first_step=99), "blocks[0].first_step: step 99"),
    (lambda d: d.pop("steps"), "'steps' is missing"),
])
def test_bad_documents_are_refused(mutation, fragment):
    doc = spilling_plan().to_optrace()
    mutation(doc)
    with pytest.raises(chrometrace.OptraceError, match=None) as e:
        chrometrace.build_trace([doc])
    assert fragment in str(e.value), f"the error names the key: {e.value}"


# ------------------------------------------------------------------------------- the CLI
def run_viewer(args, capsys):
    status = profile_viewer.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_gzip_round_trip(tmp_path, capsys):
    doc_path = tmp_path / "g.optrace.json"
    doc_path.write_text(json.dumps(spilling_plan().to_optrace()))
    plain, gz_flag, gz_name = tmp_path / "t.json", tmp_path / "z.json", tmp_path / "n.json.gz"
    assert run_viewer(["--input_log", doc_path, "--output", plain], capsys)[0] == 0
    assert run_viewer(["--input_log", doc_path, "--output", gz_flag, "--gzip"], capsys)[0] == 0
    assert run_viewer(["--input_log", doc_path, "--output", gz_name], capsys)[0] == 0
    (tmp_path / "cfg.json").write_text(json.dumps({"features": {"gzip": True}}))
    assert run_viewer(["--input_log", doc_path, "--output", tmp_path / "c.json", "--config",
                       tmp_path / "cfg.json"], capsys)[0] == 0
    reference = json.loads(plain.read_text())
    assert_valid(reference)
    for path in (tmp_path / "z.json.gz", gz_name, tmp_path / "c.json.gz"):
        raw = path.read_bytes()
        assert raw[:2] == b"\x1f\x8b", f"{path.name} is gzip"
        assert json.loads(gzip.decompress(raw)) == reference, f"{path.name} decompresses to the same trace"
        assert chrometrace.read_trace(str(path)) == reference
        assert len(raw) < plain.stat().st_size, "compression shrinks the trace"
    assert (tmp_path / "t_qnn_htp_analysis_summary.html").is_file() and \
        (tmp_path / "n_qnn_htp_analysis_summary.html").is_file(), \
        "the QHAS report is written next to the chrometrace, as the SDK does"


def optrace_event(doc: dict) -> dict:
    """The JSON of an OBJECT profile event carrying ``doc`` (system_profile's record layout)."""
    payload = json.dumps(doc).encode()
    return system_profile.event_record(
        Q.QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA,
        {"type": Q.QNN_PROFILE_EVENTTYPE_TRACE, "unit": Q.QNN_PROFILE_EVENTUNIT_OBJECT, "value": len(payload),
         "identifier": "Optrace", "extendedVersion": 1, "timestamp": 0, "valueDataType": 0,
         "object": system_profile.object_record(f"{doc['graph']}.optrace.json", payload, len(payload))}, [])


def execute_events(n: int) -> list[dict]:
    ev = lambda t, unit, value, ident, sub=(): system_profile.event_record(  # noqa: E731
        Q.QNN_SYSTEM_PROFILE_EVENT_DATA, {"type": t, "unit": unit, "value": value, "identifier": ident}, list(sub))
    cycles = ev(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE, Q.QNN_PROFILE_EVENTUNIT_CYCLES,
                11700, "Accelerator (execute) time (cycles)",
                [ev(Q.QNN_PROFILE_EVENTTYPE_NODE, Q.QNN_PROFILE_EVENTUNIT_CYCLES, 4000, "conv:OpId_0 (cycles)")])
    return [ev(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
               100 + 10 * n, "RPC (execute) time"), cycles,
            ev(Q.QNN_PROFILE_EVENTTYPE_EXECUTE, Q.QNN_PROFILE_EVENTUNIT_MICROSEC, 200 + 20 * n, "QNN (execute) time")]


def write_system_log(path: Path, with_optrace: bool = True) -> list[dict]:
    """A log as libQnnSystem.so writes it: header, a finalize record, three execute records
    each with its optrace object (one run each)."""
    plan = spilling_plan()
    runs = three_runs(plan.total_cycles / 500.0)
    target = system_profile.SerializationTarget(str(path), {"appName": "viewer-test", "appVersion": "1",
                                                            "backendVersion": None}, None, (1, 15, 0))
    header = {"startTime": 0, "stopTime": 0, "startMem": 0, "stopMem": 0, "visibility": 0, "graphName": "spilling"}
    fin = system_profile.event_record(Q.QNN_SYSTEM_PROFILE_EVENT_DATA, {
        "type": Q.QNN_PROFILE_EVENTTYPE_FINALIZE, "unit": Q.QNN_PROFILE_EVENTUNIT_MICROSEC, "value": 777,
        "identifier": "QNN (finalize) time"}, [])
    records = [system_profile.data_record(dict(header, methodType=Q.QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_FINALIZE),
                                          [fin])]
    for n, run in enumerate(runs):
        events = execute_events(n)
        if with_optrace:
            events.append(optrace_event(with_execution(plan.to_optrace(), [run])))
        records.append(system_profile.data_record(
            dict(header, methodType=Q.QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_EXECUTE), events))
    target.append(records, "test")
    target.close()
    return runs


def test_system_profile_log_listing_and_trace(tmp_path, capsys):
    log_path = tmp_path / "app_qnn.log"
    runs = write_system_log(log_path)
    status, out, err = run_viewer(["--input_log", log_path], capsys)
    assert status == 0, err
    assert "Application: viewer-test" in out and "Finalize Stats (graph spilling):" in out and \
        "QNN (finalize) time: 777  us" in out, f"the finalize call is listed:\n{out[:600]}"
    avg = out.split("Execute Stats (Average)")[1].split("Execute Stats (Min)")[0]
    assert "RPC (execute) time: 110  us" in avg and "QNN (execute) time: 220  us" in avg, \
        f"averages over the three executions (100/110/120, 200/220/240):\n{avg}"
    assert "      conv:OpId_0 (cycles): 4000  cycles" in avg, "sub-events are indented under their parent"
    assert "Execute Stats (Max)" in out and "QNN (execute) time: 240  us" in out.split("Execute Stats (Max)")[1]
    assert out.count("Optrace: <object spilling.optrace.json, ") == 3, \
        "each execution's object event is listed by file name and size"
    assert out.count("Optrace: graph spilling") == 1, "the three optrace documents merge into one listing"
    assert "Overlap (wait) time: 2000  cycles\n               r:fill" in out, "linting-style overlap (wait) names"

    status, _, err = run_viewer(["--input_log", log_path, "--output", tmp_path / "t.json",
                                 "--html", tmp_path / "r.html"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    execs = [e for e in x_events(trace, cat="runtrace") if "execute" in e["name"]]
    assert [e["args"]["execution"] for e in execs] == [r["execution"] for r in runs], \
        "the runs of the three execute records, in order"
    assert not (tmp_path / "t_qnn_htp_analysis_summary.html").exists(), "--html names the report instead"
    assert "QNN HTP Analysis Summary" in (tmp_path / "r.html").read_text()


def test_net_run_json_with_optrace_objects(tmp_path, capsys):
    """qnnemu-net-run's layout (calls[] of client events: type_name, unit_name, sub_events) with
    optrace objects as the client would list them (object.dataBase64)."""
    plan = parallel_plan()
    doc = with_execution(plan.to_optrace(), [three_runs(plan.total_cycles / 500.0)[0]])
    payload = json.dumps(doc).encode()
    event = {"identifier": "Optrace", "type": Q.QNN_PROFILE_EVENTTYPE_TRACE, "type_name": "TRACE",
             "value": len(payload), "unit": Q.QNN_PROFILE_EVENTUNIT_OBJECT, "unit_name": "OBJECT",
             "object": {"fileName": "branches.optrace.json", "len": len(payload),
                        "dataBase64": base64.b64encode(payload).decode()}}
    log = {"backend": "libQnnHtpEmu.so", "profiling_level": "detailed", "calls": [
        {"call": "graphFinalize", "graph": "branches", "events": [
            {"identifier": "QNN (finalize) time", "type": 300, "type_name": "FINALIZE", "value": 5,
             "unit": 1, "unit_name": "MICROSEC"}]},
        {"call": "graphExecute", "graph": "branches", "inference": 0, "events": [
            {"identifier": "QNN (execute) time", "type": 400, "type_name": "EXECUTE", "value": 9, "unit": 1,
             "unit_name": "MICROSEC", "sub_events": [event]}]}]}
    (tmp_path / "qnn-profiling-data.json").write_text(json.dumps(log))
    status, _, err = run_viewer(["--input_log", tmp_path / "qnn-profiling-data.json", "--output",
                                 tmp_path / "t.json"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    assert {e["name"] for e in x_events(trace)} >= {s.name for s in plan.steps if s.end_cycle > s.start_cycle}, \
        "the optrace object nested in a sub-event is found"


def tiny_model(d: Path) -> Path:
    """A one-op graph description for qnnemu-net-run --model (docs/graph-json.md)."""
    doc = {"version": 1, "graphs": [{"name": "addg", "tensors": [
        {"name": "a", "type": "APP_WRITE", "dtype": "FLOAT_32", "dims": [1, 8]},
        {"name": "b", "type": "STATIC", "dtype": "FLOAT_32", "dims": [1, 8], "data": [1.0] * 8},
        {"name": "s", "type": "APP_READ", "dtype": "FLOAT_32", "dims": [1, 8]}],
        "nodes": [{"name": "add", "type": "ElementWiseAdd", "inputs": ["a", "b"], "outputs": ["s"]}]}]}
    (d / "model.json").write_text(json.dumps(doc))
    np.arange(8, dtype=np.float32).tofile(d / "a.raw")
    (d / "list.txt").write_text(f"{d / 'a.raw'}\n{d / 'a.raw'}\n")
    return d / "model.json"


@needs_ours
def test_real_net_run_profile_is_listed(tmp_path, capsys):
    from qnnemu.tools import net_run
    model = tiny_model(tmp_path)
    out_dir = tmp_path / "out"
    assert net_run.main(["--model", str(model), "--input_list", str(tmp_path / "list.txt"), "--output_dir",
                         str(out_dir), "--profiling_level", "detailed"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    log_path = out_dir / net_run.PROFILE_FILE
    recorded = json.loads(log_path.read_text())
    status, out, err = run_viewer(["--input_log", log_path], capsys)
    assert status == 0, err
    assert "Execute Stats (Overall): 2 execution(s)" in out, f"both inferences are listed:\n{out[:800]}"
    first_execute = next(c for c in recorded["calls"] if c["call"] == "graphExecute")
    for e in first_execute["events"]:
        assert f"{e['identifier']}:" in out, f"event {e['identifier']!r} is listed"
    assert "Finalize Stats (graph addg):" in out


@needs_ours
def test_real_finalized_graph_plan(tmp_path):
    """The plan the prepare pipeline leaves on a real graph traces and reports cleanly."""
    from qnnemu.client import Backend, ffi
    from qnnemu.core.handles import HANDLES
    with Backend() as be:
        g = be.context().graph("real")
        x = g.input("x", (1, 8, 8, 16), np.float32)
        w = g.static("w", np.ones((3, 3, 16, 16), np.float32))
        c = g.node("Conv2d", [x, w], outputs=[("c", (1, 8, 8, 16), np.float32)], name="conv",
                   params={"stride": np.array([1, 1], np.uint32),
                           "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)})
        g.node("Relu", [c], outputs=[("y", (1, 8, 8, 16), np.float32)], app_read=True, name="relu")
        g.finalize()
        plan = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle))).htp_plan
    doc = plan.to_optrace()
    trace = chrometrace.build_trace([doc])
    assert_valid(trace)
    ops = [e for e in x_events(trace) if e["cat"] == "op"]
    assert len(ops) == sum(1 for s in plan.steps if s.kind == "op"), "one span per op step"
    page = qhas.render_html([doc])
    parsed = parse_html(page)
    assert "g0-optypes" in parsed.tables and parsed.svgs >= 1


@needs_ours
def test_optrace_objects_of_the_backend(tmp_path, capsys):
    """End to end: QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE on a DETAILED profile, two
    graphExecutes, the OBJECT events read through profileGetExtendedEventData, written in
    qnnemu-net-run's layout with the object as the viewer reads it; the viewer traces both runs."""
    from qnnemu.client import Backend, ffi
    calls = []
    with Backend() as be:
        g = be.context().graph("fc")
        x = g.input("x", (1, 64), np.float32)
        g.node("FullyConnected", [x, g.static("w", np.ones((32, 64), np.float32))],
               outputs=[("y", (1, 32), np.float32)], app_read=True)
        g.finalize()
        prof = be.profile("detailed")
        cfg = ffi.new("QnnProfile_Config_t *")
        cfg.option = Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE
        cfg.enableOptrace = 1
        be.call("profileSetConfig", prof.handle, ffi.new("const QnnProfile_Config_t *[2]", [cfg, ffi.NULL]))
        for inference in range(2):
            g.execute({"x": np.ones((1, 64), np.float32)}, profile=prof)
            ids, n = ffi.new("const QnnProfile_EventId_t **"), ffi.new("uint32_t *")
            be.call("profileGetEvents", prof.handle, ids, n)
            events = prof.events()
            for k, event in enumerate(events):
                ext = ffi.new("QnnProfile_ExtendedEventData_t *")
                be.call("profileGetExtendedEventData", ids[0][k], ext)
                if ext.v1.unit == Q.QNN_PROFILE_EVENTUNIT_OBJECT:
                    obj = ext.v1.backendOpaqueObject
                    raw = bytes(ffi.buffer(obj.opaqueObject.data, obj.opaqueObject.len))
                    event["object"] = {"fileName": ffi.string(obj.fileName).decode(), "len": len(raw),
                                       "dataBase64": base64.b64encode(raw).decode()}
            assert any("object" in e for e in events), "optrace profiling yields an OBJECT event"
            calls.append({"call": "graphExecute", "graph": "fc", "inference": inference, "events": events})
    log_path = tmp_path / "qnn-profiling-data.json"
    log_path.write_text(json.dumps({"backend": "ours", "profiling_level": "detailed", "calls": calls}))
    status, _, err = run_viewer(["--input_log", log_path, "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    execs = [e for e in x_events(trace, cat="runtrace") if "execute" in e["name"]]
    assert len(execs) == 2 and execs[0]["ts"] + execs[0]["dur"] <= execs[1]["ts"], \
        "the two executions' documents merge into two consecutive runs of one graph"
    status, out, err = run_viewer(["--input_log", log_path], capsys)
    assert status == 0 and "<object fc.optrace.json" in out and out.count("Optrace: graph fc") == 1, out[-800:]


@needs_ours
@pytest.mark.parametrize("vtcm_mb", [1, 4])
def test_real_plan_under_a_small_vtcm_budget(vtcm_mb):
    """A conv chain with a long skip connection prepared under a small VTCM budget: whatever
    spills and fills the prepare pipeline inserts, the trace shows them and the DMA bandwidth
    counter moves exactly the plan's spill / fill bytes."""
    from qnnemu.client import Backend, ffi, htp_graph_config
    from qnnemu.core.handles import HANDLES
    conv = {"stride": np.array([1, 1], np.uint32), "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)}
    shape = (1, 32, 32, 64)
    with Backend() as be:
        g = be.context().graph("chain", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=vtcm_mb)])
        w = g.static("w", np.full((3, 3, 64, 64), 0.01, np.float32))
        first = prev = g.node("Conv2d", [g.input("x", shape, np.float32), w], outputs=[("a", shape, np.float32)],
                              name="a", params=conv)
        for name in "bcd":
            prev = g.node("Conv2d", [prev, w], outputs=[(name, shape, np.float32)], name=name, params=conv)
        g.node("ElementWiseAdd", [prev, first], outputs=[("y", shape, np.float32)], app_read=True, name="add")
        g.finalize()
        plan = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle))).htp_plan
    doc = plan.to_optrace()
    trace = chrometrace.build_trace([doc])
    assert_valid(trace)
    for kind in ("spill", "fill"):
        spans = list(x_events(trace, cat=kind))
        assert len(spans) == sum(1 for s in plan.steps if s.kind == kind), f"every {kind} step is drawn"
    spill = counter_series(trace, "DMA bandwidth", "DRAM write (spill) MB/s")
    fill = counter_series(trace, "DMA bandwidth", "DRAM read (fill) MB/s")
    assert integral(spill) == pytest.approx(plan.spill_bytes, rel=1e-6, abs=1), \
        f"spill bandwidth integrates to the plan's spill_bytes ({plan.spill_bytes})"
    assert integral(fill) == pytest.approx(plan.fill_bytes, rel=1e-6, abs=1), \
        f"fill bandwidth integrates to the plan's fill_bytes ({plan.fill_bytes})"
    overall = qhas.summarize(doc)["overall"]
    assert (overall["spill_bytes"], overall["peak_vtcm_bytes"]) == (plan.spill_bytes, plan.peak_vtcm_bytes)


def test_text_listing_of_a_bare_document(tmp_path, capsys):
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(parallel_plan().to_optrace()))
    status, out, err = run_viewer(["--input_log", path, "--reader", "libQnnHtpProfilingReader.so"], capsys)
    assert status == 0, err
    assert out.count("(cycles):") == len(parallel_plan().steps) + 2, "one linting entry per step, Input, Output"
    # convLeft waits from the end of the previous main-thread op (Input, cycle 0) to its start
    # (100), while its launch runs; subRight and divRight cover [200, 6100) of its run
    assert "      convLeft (cycles): 6000  cycles\n            Wait (Scheduler) time: 100  cycles\n" \
           "            Overlap time: 5900  cycles\n               subRight\n               divRight\n" in out, \
        "the documentation's linting layout"
    assert out.index("      Input OpId_12 (cycles): 0  cycles") < out.index("convLeft (cycles)") < \
        out.index("      Output OpId_13 (cycles): 0  cycles"), "the Input and Output pseudo-ops around the steps"
    assert "Resources: HVX, HMX" in out


@pytest.mark.parametrize("args, status, fragment", [
    ([], 2, "--input_log"),
    (["--input_log", "{d}/missing.log"], 1, "missing.log: No such file"),
    (["--input_log", "{d}/empty.log"], 1, "the file is empty"),
    (["--input_log", "{d}/garbage.log"], 1, "not JSON and not JSON Lines"),
    (["--input_log", "{d}/other.json"], 1, "not a qnnemu profiling log"),
    (["--input_log", "{d}/bad_doc.json"], 1, "steps[0].cycles: expected integer"),
    (["--input_log", "{d}/bad_line.log"], 1, "bad_line.log:2: invalid JSON"),
    (["--input_log", "{d}/no_optrace.log", "--output", "{d}/t.json"], 1, "no optrace data to trace"),
    (["--input_log", "{d}/doc.json", "--config", "{d}/bad_cfg.json"], 1, "features.flames: unknown feature"),
    (["--input_log", "{d}/doc.json", "--config", "{d}/missing_cfg.json"], 1, "missing_cfg.json"),
    (["--input_log", "{d}/doc.json", "--output", "{d}/doc.json/t.json"], 1, "--output"),
    (["--input_log", "{d}/binary.log"], 1, "not a text file"),
])
def test_cli_errors(tmp_path, capsys, args, status, fragment):
    d = tmp_path
    (d / "empty.log").write_text("\n")
    (d / "garbage.log").write_text("hello\nworld\n")
    (d / "other.json").write_text(json.dumps({"traceEvents": []}))
    doc = spilling_plan().to_optrace()
    (d / "doc.json").write_text(json.dumps(doc))
    bad = json.loads(json.dumps(doc))
    bad["steps"][0]["cycles"] = "many"
    (d / "bad_doc.json").write_text(json.dumps(bad))
    write_system_log(d / "no_optrace.log", with_optrace=False)
    lines = (d / "no_optrace.log").read_text().splitlines()
    (d / "bad_line.log").write_text(lines[0] + "\n{oops\n")
    (d / "bad_cfg.json").write_text(json.dumps({"features": {"flames": True}}))
    (d / "binary.log").write_bytes(b"\xff\xfe\x00binary")
    got, out, err = run_viewer([a.format(d=d) for a in args], capsys)
    assert got == status, f"exit status {status}: {err}"
    assert fragment in err, f"the error names the problem ({fragment!r}): {err}"
    assert "Traceback" not in err, "no traceback for a user error"
    if status == 1:
        assert err.strip().count("\n") == 0 and err.startswith("qnnemu-profile-viewer: error: "), \
            f"one error line: {err}"


def test_console_script_declared_and_runs(tmp_path):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts.get("qnnemu-profile-viewer") == "qnnemu.tools.profile_viewer:main"
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(spilling_plan().to_optrace()))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "qnnemu.tools.profile_viewer", "--input_log", str(path),
                           "--html", str(tmp_path / "r.html")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0 and (tmp_path / "r.html").is_file(), proc.stderr


# ---------------------------------------------------------------------------------- QHAS
def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_qhas_html_structure():
    plan = spilling_plan()
    doc = with_execution(plan.to_optrace(), three_runs(plan.total_cycles / 500.0))
    page = parse_html(qhas.render_html([doc, parallel_plan().to_optrace()]))
    assert not page.external, f"self-contained: no external resources ({page.external})"
    assert page.scripts == 1, "one inline script"
    assert {"g0-overall", "g0-types", "g0-htpops", "g0-dominant", "g0-passes", "g1-overall"} <= set(page.details), \
        "the documentation's collapsible sections per graph"
    types = page.tables["g0-optypes"]
    assert [h.rstrip("⇅◔") for h in types["headers"]][:3] == ["QNN Op Type", "Steps", "Cycles"]
    expected = {}
    for s in plan.steps:
        key = qhas.op_type_of(s.__dict__)
        expected[key] = expected.get(key, 0) + s.cycles
    assert {r[0]: _num(r[2]) for r in types["rows"]} == expected, "cycles per op type (spill/fill as System Services)"
    assert [r[0] for r in types["rows"]] == sorted(expected), "rows start in op-type order"
    shares = [_num(r[3]) for r in types["rows"]]
    assert sum(shares) == pytest.approx(100.0, abs=0.05), "shares add up to 100%"
    pie = page.slices["g0-optypes-pie"]
    assert sorted(pie) == sorted(expected) and pie[0] == max(expected, key=expected.get), \
        f"one pie slice per op type, largest first: {pie}"
    ops = page.tables["g0-ops"]
    assert [r[1] for r in ops["rows"]] == [s.name for s in sorted(plan.steps, key=lambda s: s.start_cycle)], \
        "HTP Ops lists every step in start order"
    assert [h.rstrip("⇅◔") for h in ops["headers"]][1:3] == ["HTP Op", "QNN Op"], "the documented filterable columns"
    path = page.tables["g0-path"]
    assert sum(_num(r[-1]) for r in path["rows"]) == sum(seg["cycles"] for seg in chrometrace.dominant_path(doc))
    s = qhas.summarize(doc)["overall"]
    assert (s["peak_vtcm_bytes"], s["spill_bytes"], s["fill_bytes"], s["runs"]) == (320 * KB, 128 * KB, 128 * KB, 3)
    assert s["total_us"] == pytest.approx(11700 / 500.0) and s["clocks"]["source"] == "execution", \
        "microseconds at the execution's clocks"
    assert s["soc"] != f"SoC {Q.QNN_SOC_MODEL_SM8550}" and s["arch"] == "v73", "the SoC is named"


def test_qhas_pie_groups_the_tail():
    values = [(f"op{i}", float(20 - i)) for i in range(15)] + [("zero", 0.0)]
    slices = qhas.pie_slices(values)
    assert len(slices) == qhas.PIE_MAX_SLICES and slices[-1][0] == "other", "the tail becomes one slice"
    assert sum(v for _, v in slices) == sum(v for _, v in values), "no value is lost"
    page = parse_html(qhas.pie_svg([("only", 5.0)], "one", "p"))
    assert page.slices["p"] == ["only"], "a single op type is a full circle"


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="Debian chromium not installed")
def test_qhas_renders_sorted_and_filtered_in_headless_chromium(tmp_path):
    plan = spilling_plan()
    doc = plan.to_optrace()
    html_path = tmp_path / "qhas.html"
    html_path.write_text(qhas.render_html([doc]))

    def dom(fragment: str) -> HtmlPage:
        url = html_path.as_uri() + fragment
        proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "data-ready" in proc.stdout, \
            f"chromium rendered the page and ran its script: {proc.stderr[-500:]}"
        return parse_html(proc.stdout)

    static = parse_html(html_path.read_text())
    page = dom("#sort=g0-optypes:2:desc")
    rows = page.tables["g0-optypes"]["rows"]
    want = sorted(static.tables["g0-optypes"]["rows"], key=lambda r: -_num(r[2]))
    assert [_num(r[2]) for r in rows] == [_num(r[2]) for r in want], "sorted by Cycles, descending"
    assert [r[0] for r in rows] != [r[0] for r in static.tables["g0-optypes"]["rows"]], \
        "sorting changed the order (the page starts in op-type order)"
    page = dom("#sort=g0-ops:7:asc&chart=g0-optypes:2")
    cycles = [_num(r[7]) for r in page.tables["g0-ops"]["rows"]]
    assert cycles == sorted(cycles), "HTP Ops sorted by cycles ascending"
    assert page.svgs == 2, "the chart button's pie is drawn next to the static one"
    # Filtering hides rows with display:none; --dump-dom serialises the style attribute.
    url = html_path.as_uri() + "#filter=g0-ops:1:conv"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.count('data-shown="1"') == 1 and proc.stdout.count('data-shown="0"') == len(plan.steps) - 1, \
        "the HTP Op filter 'conv' leaves only the conv row"
