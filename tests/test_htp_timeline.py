"""The shared HTP's scheduling model and scenario timelines (qnnemu/htp/runtime.py,
qnnemu/htp/timeline.py, qnnemu-htp-timeline): QNN "HTP Yielding and Pre-Emption" -- base cases
1.1-1.4 and the two tables of "Resource Sharing under Concurrency" reproduced exactly."""
from __future__ import annotations

import io
import json
import pathlib
from contextlib import redirect_stdout

import pytest
from helpers.trace_check import assert_valid, thread_names, x_events

from qnnemu.htp import runtime as rt
from qnnemu.htp.soc import parse_soc_model
from qnnemu.htp.timeline import ScenarioError, run_file, simulate
from qnnemu.tools import htp_timeline

DATA = pathlib.Path(__file__).parent / "data" / "htp_timelines"
G1, G2, APP = "Graph 1", "Graph 2", "Client App"

# The documentation's tables (Time, HMX, HVX0, HVX1, VTCM 0..3).  Its rendering drops empty
# cells; the emulator places QNN graphs at the highest free VTCM and other clients at the lowest
# (the client app holds VTCM 0 in both tables), which fixes the columns of every cell.
SAME_PD = [
    (0, [G1, G1, "", "", G1, G1, G1]),
    (10, [G1, G1, APP, APP, G1, G1, G1]),
    (30, [G2, G2, APP, APP, "", G2, G2]),
    (50, [G1, G1, APP, APP, G1, G1, G1]),
    (60, [G1, G1, "", "", G1, G1, G1]),
    (70, [G2, G2, "", "", "", G2, G2]),
]
TWO_PDS = [
    (0, [G1, G1, "", "", G1, G1, G1]),
    (10, [G1, G1, APP, APP, G1, G1, G1]),
    (40, [G2, G2, "", "", "", G2, G2]),
    (70, [G1, G1, APP, APP, G1, G1, G1]),
    (100, [G2, G2, "", "", "", G2, G2]),
]
# The same tables as the documentation's text gives them: the non-empty cells of each row.
SAME_PD_TEXT = [[G1] * 5, [G1, G1, APP, APP, G1, G1, G1], [G2, G2, APP, APP, G2, G2],
                [G1, G1, APP, APP, G1, G1, G1], [G1] * 5, [G2] * 4]
TWO_PDS_TEXT = [[G1] * 5, [G1, G1, APP, APP, G1, G1, G1], [G2] * 4,
                [G1, G1, APP, APP, G1, G1, G1], [G2] * 4]


def rows(timeline):
    return [(r.time, r.cells()) for r in timeline.rows]


@pytest.mark.parametrize("name, table, text", [("same_pd", SAME_PD, SAME_PD_TEXT),
                                               ("two_pds", TWO_PDS, TWO_PDS_TEXT)])
def test_documented_concurrency_tables(name, table, text):
    timeline = run_file(str(DATA / f"{name}.json"))
    assert rows(timeline) == table, f"{name}: the resource table is the documentation's\n{timeline.table()}"
    assert [[c for c in cells if c] for _, cells in rows(timeline)] == text, \
        f"{name}: the non-empty cells per row are the documentation's text"


def test_same_pd_yields_and_two_pds_cross_pd_eviction():
    same = run_file(str(DATA / "same_pd.json"))
    assert same.yields == {G2: 1}, "2.1: Graph 2 is pre-empted once (by Graph 1 at 50), nobody else"
    two = run_file(str(DATA / "two_pds.json"))
    assert two.yields == {APP: 1, G2: 1}, "2.2: the client app leaves for PD 2's Graph 2, Graph 2 for Graph 1"
    assert [(p["time"], p["label"], p["by"]) for p in two.preemptions] == [(40, APP, G2), (70, G2, G1)], \
        "2.2: who is pre-empted by whom, when"
    assert two.end == 130, "2.2: Graph 2 finishes its 60 after Graph 1's second run"


def scenario(clients, arch=75):
    return {"device": {"arch": arch, "vtcm_mb": 4, "hvx_threads": 2}, "clients": clients}


def exclusive(name, priority, at, ops, kind="qnn"):
    run = {"at": at, "ops": ops} if kind == "qnn" else {"at": at, "duration": sum(ops)}
    return {"name": name, "kind": kind, "priority": priority, "hmx": 1, "hvx": 2, "vtcm_mb": 4, "runs": [run]}


@pytest.mark.parametrize("b_priority", ["NORMAL", "LOW"], ids=["1.1-same", "1.2-lower"])
def test_base_case_equal_or_lower_waits(b_priority):
    timeline = simulate(scenario([exclusive("A", "NORMAL", 0, [10, 10, 10]),
                                  exclusive("B", b_priority, 5, [10, 10])]))
    assert [(t, cells[0]) for t, cells in rows(timeline)] == [(0, "A"), (30, "B")], \
        f"B ({b_priority}) waits for A (NORMAL) to finish"
    assert timeline.yields == {} and timeline.end == 50, "nobody is pre-empted"


def test_base_case_higher_preempts_at_next_yield_point():
    timeline = run_file(str(DATA / "base_higher.json"))
    assert [(t, cells[0]) for t, cells in rows(timeline)] == [(0, "Client A"), (20, "Client B"), (50, "Client A")], \
        "B (HIGH) arrives at 15, A (LOW) yields at its op boundary 20, resumes after B"
    assert timeline.preemption_wait == {"Client B": 5}, "B waited 5 for the OS to evict A"
    assert timeline.yields == {"Client A": 1}, "A yielded once"


def test_base_case_complex():
    timeline = run_file(str(DATA / "base_complex.json"))
    assert [(t, cells[0]) for t, cells in rows(timeline)] == [
        (0, G2), (10, APP), (12, G1), (32, APP), (50, G2)], \
        "Graph 2 (low) yields at 10 to the app (medium); the app is evicted at once by Graph 1 (high)"
    assert timeline.yields == {G2: 1, APP: 1} and timeline.end == 80, "one pre-emption each, all work done"


def test_no_concurrency_before_v73():
    v69 = json.loads((DATA / "same_pd.json").read_text())
    v69["device"]["arch"] = 69
    timeline = simulate(v69)
    assert all(len({c for c in cells if c}) == 1 for _, cells in rows(timeline)), \
        f"v69: one client at a time\n{timeline.table()}"
    assert rows(timeline)[1][0] == 30 and rows(timeline)[1][1][0] == "", \
        "v69: the client app (medium) waits for Graph 1's first run and then holds the HTP alone"


def test_chrometrace_is_valid_trace_event_format():
    timeline = run_file(str(DATA / "two_pds.json"))
    trace = timeline.chrometrace()
    assert_valid(trace)
    names = thread_names(trace)
    assert names[(1, 0)] == "HMX" and names[(2, 3)] == "VTCM 0", "lanes HMX, HVX0.., VTCM i per PD"
    hmx_pd1 = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in x_events(trace, pid=1) if e["tid"] == 0)
    assert hmx_pd1 == [(0, 40, G1), (70, 100, G1)], "PD 1's HMX lane: Graph 1's two runs"
    preempt = [e for e in trace["traceEvents"] if e.get("cat") == "preemption"]
    assert [(e["ts"], e["args"]["client"]) for e in preempt] == [(40, APP), (70, G2)], "pre-emption events"


def test_cli_prints_table_and_writes_trace(tmp_path):
    out = tmp_path / "t.json"
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = htp_timeline.main([str(DATA / "same_pd.json"), "-o", str(out)])
    text = buf.getvalue()
    assert code == 0, "the CLI succeeds"
    assert text.splitlines()[0].split() == ["Time", "HMX", "HVX0", "HVX1", "VTCM", "0", "VTCM", "1",
                                            "VTCM", "2", "VTCM", "3"], "the documentation's columns"
    assert "Graph 2: pre-empted 1 time(s)" in text, "the yield count is printed"
    assert_valid(json.loads(out.read_text()))


def test_cli_refuses_bad_scenario(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(scenario([{"name": "X", "kind": "qnn", "hvx": 3, "runs": [{"at": 0, "duration": 1}]}])))
    assert htp_timeline.main([str(bad)]) == 2, "a client needing 3 HVX threads on a 2-thread device is refused"
    assert "HVX 3 of 2" in capsys.readouterr().err, "the error names the shortage"


@pytest.mark.parametrize("clients, words", [
    ([], "non-empty"),
    ([{"name": "X", "kind": "dsp", "runs": []}], "kind"),
    ([{"name": "X", "priority": "URGENT", "runs": []}], "URGENT"),
    ([{"name": "X", "runs": [{"at": 0}]}], r"ops \(durations\) or duration"),
    ([{"name": "X", "runs": [{"at": 0, "ops": [0]}]}], "positive"),
    ([{"name": "X", "hmx": 0, "runs": [{"at": 0, "ops": [1]}]}], "HMX"),
])
def test_scenario_errors(clients, words):
    with pytest.raises(ScenarioError, match=words):
        simulate(scenario(clients))


def test_vtcm_granularity_per_arch():
    assert rt.round_vtcm(1, 75) == rt.MIB, "before v81 VTCM is requested in MB"
    assert rt.round_vtcm(8323072, 81) == 8323072, "v81: a 64 KB multiple is kept (the documentation's vtcm_size)"
    assert rt.round_vtcm(8323073, 81) == 8323072 + 64 * 1024, "v81: rounded up to 64 KB"


def test_priority_mapping():
    from qnnemu.headers import Q
    assert [rt.os_priority(p) for p in (Q.QNN_PRIORITY_LOW, Q.QNN_PRIORITY_NORMAL, Q.QNN_PRIORITY_NORMAL_HIGH,
                                        Q.QNN_PRIORITY_HIGH)] == [0xC5, 0xC0, 0xBD, 0xBB], "QNN HTP Priority Mapping"
    assert rt.os_priority("0xb0") == 0xB0 and rt.os_priority("medium") == 0xC0, "OS priorities and names"
    for bad in (-1, 501, "0x100", "URGENT"):
        with pytest.raises(ValueError, match="Qnn_Priority_t"):
            rt.os_priority(bad)


def test_online_api_preempts_at_yield_point():
    soc = parse_soc_model("SM8650")
    htp = rt.HtpRuntime(soc, rt.SessionPool(va_bytes=4 * rt.MIB))
    low = rt.Client("low", 0xC5, vtcm=soc.vtcm_bytes, work=[1, 1, 1])
    high = rt.Client("high", 0xBB, vtcm=soc.vtcm_bytes, work=[1])
    normal = rt.Client("normal", 0xC5, vtcm=soc.vtcm_bytes, work=[1])
    assert htp.request(low), "an idle HTP admits the first graph"
    assert not htp.request(normal), "an equal priority waits"
    assert not htp.yield_point(low), "an equal priority waiter does not make the running graph yield"
    assert not htp.request(high), "a higher priority waits for the eviction"
    assert htp.yield_point(low), "...which happens at the running graph's next yield point"
    assert htp.request(high), "the higher priority then runs"
    assert not htp.request(low), "the pre-empted graph waits"
    htp.release(high)
    assert htp.request(low), "and resumes before the later equal-priority client (arrival order)"
    assert htp.yield_counts == {"low": 1}, "one yield counted"
