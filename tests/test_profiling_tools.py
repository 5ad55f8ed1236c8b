"""Issue 16 item 5: the profiling and optrace tooling of the QNN HTP backend documentation
("Detailed and Linting Profiling", "QNN HTP Optrace Profiling", "QNN HTP Analysis Summary
(QHAS)"): the linting report's main-thread model (waited-on background ops are no overlap) and its
Input/Output pseudo-ops; ``profiling_level: linting`` in the backend-extension JSON with net-run's
``--profiling_level backend``; the context-binary generator's ``--profiling_option optrace``
schematic and the viewer's ``--schematic``, ``--zoom_start/--zoom_end``; the config.json features
(flow events, htp_json for Netron, traceback, qhas_schema); the System Service steps in the
prepared plan and the trace.  Vendor probes pin what the vendor's x86 libQnnHtp.so reports."""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers.trace_check import assert_valid
from vendor import vendor_env, vendor_library

from qnnemu.client import Backend, ffi, htp_graph_config
from qnnemu.core import profile as core_profile
from qnnemu.core.handles import HANDLES
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.htp import services
from qnnemu.htp.plan_types import PreparedPlan, Step
from qnnemu.tools import context_binary_generator, net_run, profile_viewer
from qnnemu.tools.viewer import optrace_features

ROOT = Path(__file__).resolve().parent.parent


def call(main, argv, capsys):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# --------------------------------------------------------------------- 1. linting model
def waited_plan() -> PreparedPlan:
    """Main thread: op A [0, 100); B needs the fill F (DMA [0, 500), waited by W at 500) and
    starts at 500; meanwhile the spill X (DMA queue 1, [50, 700)) runs for nobody on the main
    thread.  B waits 400 cycles after A; during them F is what it waits on -- no overlap -- and
    X is background."""
    p = PreparedPlan(graph="g", soc_model=0, arch=75, vtcm_budget_bytes=1 << 20)
    p.steps = [
        Step(0, "op", "A", "Relu", 0, "HVX", cycles=100, start_cycle=0, end_cycle=100),
        Step(1, "fill", "t:fill", None, None, "DMA", cycles=500, start_cycle=0, end_cycle=500, pair=2),
        Step(2, "wait", "t:fill:wait", None, None, "CPU", cycles=0, start_cycle=500, end_cycle=500, deps=[1],
             pair=1),
        Step(3, "spill", "u:spill", None, None, "DMA", cycles=650, start_cycle=50, end_cycle=700, thread=1,
             pair=4),
        Step(4, "wait", "u:spill:wait", None, None, "CPU", cycles=0, start_cycle=700, end_cycle=700, deps=[3],
             pair=3),
        Step(5, "op", "B", "Tanh", 1, "HVX", cycles=300, start_cycle=500, end_cycle=800, deps=[0, 2],
             ready_cycle=500),
    ]
    p.total_cycles = p.critical_path_cycles = 800
    return p


def test_linting_waited_on_background_ops_are_not_overlap():
    """The page's rule.  The main thread runs A, then the fill's wait step W, then B: W's "Wait"
    runs from A's end (100) to its start (500); of those 400 cycles the spill X ran 400 while the
    fill F -- what W waits on -- is no background activity.  B follows W at once and runs
    [500, 800) beside X until 700.  Without the wait step (B depending on F itself) B's own wait
    window is [100, 500), and again only X counts."""
    lint = {x.label: x for x in core_profile.lint_plan(waited_plan(), n_nodes=2)}
    w, b = lint["t:fill:wait:OpId_4"], lint["B:OpId_1"]
    assert (w.wait, w.overlap_wait, w.overlap_wait_by) == (400, 400, [3]), \
        f"the wait step waited 400 cycles since A ended, overlapped by the spill (3), not by its fill (1): {w}"
    assert (b.wait, b.overlap, b.overlap_by) == (0, 200, [3]), f"B right after the wait, beside the spill: {b}"
    direct = waited_plan()
    direct.steps[5].deps = [0, 1]
    direct.steps[2].kind = "service"        # the wait step out of the way (a 0-cycle service)
    direct.steps[2].op_type = "DmaCheckpointSet"
    b = {x.label: x for x in core_profile.lint_plan(direct, n_nodes=2)}["B:OpId_1"]
    assert (b.wait, b.overlap_wait, b.overlap_wait_by) == (400, 400, [3]), \
        f"B waited since A ended; the fill it depends on is no overlap: {b}"
    labels = [x.label for x in core_profile.lint_plan(waited_plan(), n_nodes=2)]
    assert labels[0] == "Input OpId_8" and labels[-1] == "Output OpId_9" and len(labels) == 8, \
        f"the Input and Output pseudo-ops of the page's listings around the steps: {labels}"


# ------------------------------------------------------------------ fixtures: a model
def chain_description(path: Path) -> Path:
    """r1 -> s1 -> t1 -> add(t1, r1): two framework op names, one node without."""
    shape = [1, 10, 10, 3]
    desc = {"version": 1, "graphs": [{"name": "chain", "tensors": [
        {"name": "x", "type": "APP_WRITE", "dtype": "FLOAT_32", "dims": shape},
        {"name": "a", "type": "NATIVE", "dtype": "FLOAT_32", "dims": shape},
        {"name": "b", "type": "NATIVE", "dtype": "FLOAT_32", "dims": shape},
        {"name": "c", "type": "NATIVE", "dtype": "FLOAT_32", "dims": shape},
        {"name": "y", "type": "APP_READ", "dtype": "FLOAT_32", "dims": shape}],
        "nodes": [
            {"name": "r1", "type": "Relu", "inputs": ["x"], "outputs": ["a"],
             "framework": {"name": "/layer1/Relu", "type": "Relu"}},
            {"name": "s1", "type": "Sigmoid", "inputs": ["a"], "outputs": ["b"], "framework": "/layer2/Sigmoid"},
            {"name": "t1", "type": "Tanh", "inputs": ["b"], "outputs": ["c"]},
            {"name": "add", "type": "ElementWiseAdd", "inputs": ["c", "a"], "outputs": ["y"]}]}]}
    path.write_text(json.dumps(desc))
    np.random.default_rng(0).random(shape, dtype=np.float32).tofile(path.parent / "x.raw")
    (path.parent / "list.txt").write_text(f"x:={path.parent / 'x.raw'}\n")
    return path


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    """generator --profiling_option optrace -> net-run optrace -> the log and the schematic."""
    d = tmp_path_factory.mktemp("optrace")
    model = chain_description(d / "m.json")
    assert context_binary_generator.main([
        "--model", str(model), "--output_dir", str(d / "out"), "--binary_file", "m",
        "--profiling_level", "detailed", "--profiling_option", "optrace"]) == 0, "generator with optrace"
    assert net_run.main(["--retrieve_context", str(d / "out" / "m.bin"), "--input_list", str(d / "list.txt"),
                         "--output_dir", str(d / "run"), "--profiling_level", "detailed",
                         "--profiling_option", "optrace"]) == 0, "net-run with optrace"
    return {"dir": d, "schematic": d / "out" / "m_schematic.bin", "log": d / "run" / net_run.PROFILE_FILE}


def features(path: Path, **values) -> Path:
    path.write_text(json.dumps({"features": values}))
    return path


# ---------------------------------------------------- 5. profiling_level in the config
def test_net_run_backend_level_takes_linting_from_the_extension_config(flow, tmp_path, capsys):
    """The page's recipe: backend_extension_config.json -> htp_config.json {"devices":
    [{"profiling_level": "linting"}]} with --profiling_level backend gives the linting report
    (per step Wait / Overlap / Overlap (wait) / Resources, between Input and Output)."""
    (tmp_path / "htp_config.json").write_text(json.dumps({"devices": [{"profiling_level": "linting"}]}))
    (tmp_path / "ext.json").write_text(json.dumps({"backend_extensions": {
        "shared_library_path": "./libQnnHtpNetRunExtensions.so", "config_file_path": "./htp_config.json"}}))
    d = flow["dir"]
    status, out, err = call(net_run.main, ["--retrieve_context", d / "out" / "m.bin", "--input_list",
                                           d / "list.txt", "--output_dir", tmp_path / "run", "--config_file",
                                           tmp_path / "ext.json", "--profiling_level", "backend"], capsys)
    assert status == 0, err
    prof = json.loads((tmp_path / "run" / net_run.PROFILE_FILE).read_text())
    assert prof["profiling_level"] == "linting", f"the level came from the config: {prof['profiling_level']}"
    execute = next(c for c in prof["calls"] if c["call"] == "graphExecute")
    critical = next(e for e in execute["events"]
                    if e["identifier"] == "Accelerator (critical path execute) time (cycles)")
    nodes = [e["identifier"] for e in critical["sub_events"]]
    assert nodes[0].startswith("Input OpId_") and nodes[-1].startswith("Output OpId_"), \
        f"the linting entries start with Input and end with Output: {nodes}"
    assert [s["identifier"] for s in critical["sub_events"][1]["sub_events"]][:3] == \
        ["Wait (Scheduler) time", "Overlap time", "Overlap (wait) time"], "each entry's linting children"


def test_config_profiling_level_must_be_a_level(tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps({"devices": [{"profiling_level": "verbose"}]}))
    status, _, err = call(net_run.main, ["--model", tmp_path / "none.json", "--input_list", tmp_path / "l.txt",
                                         "--config_file", tmp_path / "c.json"], capsys)
    assert status == 1 and "devices[0].profiling_level: \"verbose\" is not one of basic, detailed, linting" in err, err


# ------------------------------------------------------------- 2. schematic and zoom
def test_generator_writes_the_schematic_next_to_the_binary(flow):
    data = flow["schematic"].read_bytes()
    magic, version, flags, length, crc, _ = struct.unpack_from("<8sIIQII", data)
    assert (magic, version, flags & 1, length) == (b"QNNEMUSC", 1, 1, len(data) - 32), \
        "the documented 32-byte header: magic, version, compressed flag, payload length"
    assert zlib.crc32(data[32:]) == crc, "the header's CRC-32 is the payload's"
    doc = json.loads(zlib.decompress(data[32:]))
    assert doc["format"] == "qnnemu.schematic" and doc["binary"] == "m.bin", doc.keys()
    g = doc["graphs"][0]
    assert g["format"] == "qnnemu.optrace" and g["graph"] == "chain" and g["steps"], "the prepared plan"
    assert [(n["name"], n.get("framework")) for n in g["nodes"]] == [
        ("r1", {"name": "/layer1/Relu", "type": "Relu"}), ("s1", {"name": "/layer2/Sigmoid"}), ("t1", None),
        ("add", None)], "the node table with the description's framework ops"
    with pytest.raises(optrace_features.SchematicError, match="CRC-32 mismatch"):
        optrace_features.parse_schematic(data[:-1] + bytes([data[-1] ^ 1]))


def test_viewer_schematic_traceback_and_zoom(flow, tmp_path, capsys):
    """--schematic gives the trace the framework names (traceback, default on); --zoom_start /
    --zoom_end (a framework name and a QNN name) keep the sub-network s1 .. add in the trace, the
    QHAS JSON and the htp_json; traceback off drops the names."""
    cfg = features(tmp_path / "c.json", qhas_json=True)
    status, out, err = call(profile_viewer.main, ["--input_log", flow["log"], "--schematic", flow["schematic"],
                                                  "--config", cfg, "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    ops = {e["name"]: e["args"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"}
    assert ops["r1"]["framework_op"] == "/layer1/Relu" and ops["r1"]["framework_type"] == "Relu" and \
        ops["s1"]["framework_op"] == "/layer2/Sigmoid" and "framework_op" not in ops["t1"], \
        f"traceback names the framework op where the graph has one: {ops}"
    assert ops["t1"]["qnn_node"] == "t1" and ops["t1"]["qnn_op_type"] == "Tanh", "and always the QNN node"
    status, out, err = call(profile_viewer.main, [
        "--input_log", flow["log"], "--schematic", flow["schematic"], "--config", cfg, "--output",
        tmp_path / "z.json", "--zoom_start", "/layer2/Sigmoid", "--zoom_end", "add"], capsys)
    assert status == 0, err
    zoomed = json.loads((tmp_path / "z.json").read_text())
    assert_valid(zoomed)
    names = {e["name"] for e in zoomed["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"}
    assert names == {"s1", "t1", "add"}, f"the sub-network s1 .. add only: {names}"
    qhas = json.loads((tmp_path / "z_qnn_htp_analysis_summary.json").read_text())[0]
    assert {o["name"] for o in qhas["ops"] if o["kind"] == "op"} == {"s1", "t1", "add"} and \
        qhas["overall"]["ops"] == 3, "QHAS analyses the sub-network only"
    netron = json.loads((tmp_path / "chain_htp.json").read_text())
    assert {n for n, v in netron["graph"]["nodes"].items() if v["type"] in ("Sigmoid", "Tanh", "ElementWiseAdd",
                                                                          "Relu")} == {"s1", "t1", "add"}, \
        "htp_json with zooming"
    status, _, err = call(profile_viewer.main, ["--input_log", flow["log"], "--schematic", flow["schematic"],
                                                "--config", features(tmp_path / "n.json", traceback=False),
                                                "--output", tmp_path / "n.json.trace"], capsys)
    assert status == 0, err
    plain = json.loads((tmp_path / "n.json.trace").read_text())
    assert not any("framework_op" in e.get("args", {}) or "qnn_node" in e.get("args", {})
                   for e in plain["traceEvents"]), "traceback false: no trace back"


def _zoom_unknown():
    doc = json.loads(zlib.decompress(_SCHEMATIC[0][32:]))["graphs"][0]
    optrace_features.zoom(doc, "nope", "add")


def _zoom_reversed():
    doc = json.loads(zlib.decompress(_SCHEMATIC[0][32:]))["graphs"][0]
    optrace_features.zoom(doc, "add", "/layer1/Relu")


_SCHEMATIC: list[bytes] = []
RULE_CASES = {
    "QNNEMU-viewer-zoom-unknown-node": (_zoom_unknown, "--zoom_start"),
    "QNNEMU-viewer-zoom-order": (_zoom_reversed, "--zoom_end"),
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_zoom_rule(rule, flow):
    _SCHEMATIC[:] = [flow["schematic"].read_bytes()]
    case, path = RULE_CASES[rule]
    with pytest.raises(QnnError) as err:
        case()
    e = err.value
    assert (e.rule, e.code) == (rule, Q.QNN_COMMON_ERROR_INVALID_ARGUMENT), f"{rule}: {e.rule} code {e.code}"
    assert f"[{rule}] {optrace_features.VIEWER}: {path}:" in str(e), f"{rule}: function and parameter named: {e}"


def test_zoom_errors_reach_the_command_line(flow, tmp_path, capsys):
    status, _, err = call(profile_viewer.main, ["--input_log", flow["log"], "--output", tmp_path / "t.json",
                                                "--zoom_start", "add", "--zoom_end", "r1"], capsys)
    assert status == 1 and "--zoom_end: 'r1' comes before --zoom_start 'add'" in err, \
        f"the rule's message on the command line (the rule itself: test_zoom_rule): {err}"
    status, _, err = call(profile_viewer.main, ["--input_log", flow["log"], "--output", tmp_path / "t.json",
                                                "--zoom_start", "add"], capsys)
    assert status == 1 and "--zoom_start and --zoom_end go together" in err, err


# ------------------------------------------------------------- 3. config features
def test_flow_events_io_and_sequencer(flow, tmp_path, capsys):
    cfg = features(tmp_path / "c.json", enable_input_output_flow_events=True, enable_sequencer_flow_events=True,
                   htp_json=False)
    status, out, err = call(profile_viewer.main, ["--input_log", flow["log"], "--config", cfg, "--output",
                                                  tmp_path / "t.json"], capsys)
    assert status == 0, err
    assert not (tmp_path / "chain_htp.json").exists(), "htp_json false: no topology file"
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    x = {(e["args"]["step"]): e for e in trace["traceEvents"] if e.get("ph") == "X" and "step" in e.get("args", {})}
    by_name = {e["name"]: e for e in x.values()}
    flows: dict[tuple, dict] = {}
    for e in trace["traceEvents"]:
        if e["ph"] in "sf":
            flows.setdefault((e["cat"], e["id"]), {})[e["ph"]] = e
    io = {(f["s"]["name"]) for (cat, _), f in flows.items() if cat == "input_output_flow"}
    assert {"r1 -> s1", "s1 -> t1", "t1 -> add", "r1 -> add"} <= io, f"data edges, add reads r1's output too: {io}"
    for (cat, _), f in flows.items():
        src, dst = by_name[f["s"]["name"].split(" -> ")[0]], by_name[f["f"]["name"].split(" -> ")[1]]
        assert (f["s"]["pid"], f["s"]["tid"], f["s"]["ts"]) == (src["pid"], src["tid"], src["ts"]) and \
            (f["f"]["pid"], f["f"]["tid"], f["f"]["ts"], f["f"]["bp"]) == (dst["pid"], dst["tid"], dst["ts"], "e"), \
            f"{cat}: the flow binds the producer's slice to the consumer's: {f}"
    seq = [f["s"]["name"] for (cat, _), f in sorted(flows.items(), key=lambda kv: kv[0][1])
           if cat == "sequencer_flow"]
    assert seq[:3] == ["r1 -> s1", "s1 -> t1", "t1 -> add"], f"the sequencer's issue order: {seq}"
    assert trace["otherData"]["flow_events"] == {"input_output_flow": len(io), "sequencer_flow": len(seq)}


NETRON_TENSOR_TYPES = {0, 1, 3, 4}   # what Netron's QNN JSON reader takes: APP_WRITE, APP_READ, NATIVE, STATIC


def test_htp_json_is_a_qnn_json_model_for_netron(flow, tmp_path, capsys):
    """The shape Netron's QNN reader opens: a truthy "model.cpp", "graph" with "tensors" (type
    0/1/3/4, a known data_type, dims) and "nodes" (package, type, input_names, output_names,
    scalar_params of single {"<data type>": value} entries, tensor_params)."""
    status, _, err = call(profile_viewer.main, ["--input_log", flow["log"], "--schematic", flow["schematic"],
                                                "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    model = json.loads((tmp_path / "chain_htp.json").read_text())
    assert model["model.cpp"] and isinstance(model["graph"], dict), "Netron matches on model.cpp and graph"
    tensors, nodes = model["graph"]["tensors"], model["graph"]["nodes"]
    for name, t in tensors.items():
        assert t["type"] in NETRON_TENSOR_TYPES and t["data_type"] in optrace_features.NETRON_DATA_TYPES and \
            all(isinstance(d, int) for d in t["dims"]), f"tensor {name}: {t}"
    assert tensors["x"]["type"] == 0 and tensors["y"]["type"] == 1, "graph input and output"
    produced = {o for n in nodes.values() for o in n["output_names"]}
    for name, n in nodes.items():
        assert isinstance(n["package"], str) and isinstance(n["type"], str) and n["tensor_params"] == {}, name
        assert all(i in tensors or i in produced for i in n["input_names"]), f"{name}: inputs are values"
        for pname, value in n["scalar_params"].items():
            (dtype, _), = value.items()
            assert int(dtype, 10) in optrace_features.NETRON_DATA_TYPES, f"{name}.{pname}: {value}"
    assert nodes["s1"]["input_names"] == ["a"] and nodes["add"]["input_names"] == ["c", "a"], "the topology"
    assert nodes["s1"]["scalar_params"]["framework_op"] == {str(Q.QNN_DATATYPE_STRING): "/layer2/Sigmoid"}


def validate(instance, schema, path="$") -> list[str]:
    """A small JSON Schema validator (the keywords qhas_schema.json uses)."""
    errors = []
    if "anyOf" in schema:
        if all(validate(instance, s, path) for s in schema["anyOf"]):
            errors.append(f"{path}: matches none of anyOf")
        return errors
    kinds = {"object": dict, "array": list, "string": str, "null": type(None)}
    t = schema.get("type")
    if t == "integer":
        if not isinstance(instance, int) or isinstance(instance, bool):
            return [f"{path}: not an integer"]
    elif t == "number":
        if not isinstance(instance, (int, float)) or isinstance(instance, bool):
            return [f"{path}: not a number"]
    elif t is not None and not isinstance(instance, kinds[t]):
        return [f"{path}: not {t}"]
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: {instance!r} not in {schema['enum']}")
    if "minimum" in schema and instance < schema["minimum"]:
        errors.append(f"{path}: {instance} < {schema['minimum']}")
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        errors += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in instance]
        if schema.get("additionalProperties") is False:
            errors += [f"{path}: unexpected {k}" for k in instance if k not in props]
        for k, sub in props.items():
            if k in instance:
                errors += validate(instance[k], sub, f"{path}.{k}")
    if isinstance(instance, list) and "items" in schema:
        for i, item in enumerate(instance):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def test_qhas_json_validates_against_qhas_schema(flow, tmp_path, capsys):
    cfg = features(tmp_path / "c.json", qhas_json=True, qhas_schema=True)
    status, _, err = call(profile_viewer.main, ["--input_log", flow["log"], "--config", cfg, "--output",
                                                tmp_path / "t.json"], capsys)
    assert status == 0, err
    schema = json.loads((tmp_path / "qhas_schema.json").read_text())
    qhas = json.loads((tmp_path / "t_qnn_htp_analysis_summary.json").read_text())
    assert schema["$schema"].endswith("2020-12/schema") and schema["type"] == "array", "a JSON Schema document"
    assert validate(qhas, schema) == [], "the QHAS JSON is valid"
    broken = json.loads(json.dumps(qhas))
    broken[0]["ops"][0]["kind"] = "teleport"
    del broken[0]["overall"]["total_cycles"]
    assert len(validate(broken, schema)) == 2, "the validator and the schema catch a bad kind and a missing key"


# ---------------------------------------------------------- 4. System Service steps
def _plan(channels: int, side: int, vtcm_mb: int | None = None):
    shape = (1, side, side, channels)
    with Backend(log_level="error") as be:
        ctx = be.context()
        g = ctx.graph("svc", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=vtcm_mb)] if vtcm_mb else [])
        x = g.input("x", shape, np.float32)
        a = g.node("Relu", [x], [("a", shape, np.float32, None)], name="r1")
        b = g.node("Sigmoid", [a], [("b", shape, np.float32, None)], name="s1")
        c = g.node("Tanh", [a], [("c", shape, np.float32, None)], name="t1")
        g.node("ElementWiseAdd", [b, c], [("y", shape, np.float32, None)], name="add", app_read=["y"])
        g.finalize()
        return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle))).htp_plan


def _check_services(plan) -> Counter:
    steps = plan.steps
    regular = [s for s in steps if s.kind != "service"]
    svc = [s for s in steps if s.kind == "service"]
    assert steps[:len(regular)] == regular and all(s.op_type in services.SYSTEM_SERVICES for s in svc), \
        "the services follow the other steps and are named as the page's System Services"
    assert plan.total_cycles == max(s.end_cycle for s in regular), "the services do not lengthen the schedule"
    for s in svc:
        assert all(steps[d].end_cycle <= s.start_cycle for d in s.deps), f"{s.name} after what it waits for"
        assert s.cycles == s.end_cycle - s.start_cycle and (s.cycles == 0) == (s.op_type != "SystemService"), s
    return Counter(s.op_type for s in svc)


def test_system_services_in_the_plan_and_the_trace(tmp_path, capsys):
    """Small parallel branches: SyncOp where add (thread 0) waits for t1 on another HVX thread,
    BlockZapOp for tensors of 600 bytes (not a multiple of the 2 KiB block), the L2 prefetch of
    the ops streaming DDR data; a spilling plan (1 MB of VTCM): a DmaCheckpointSet / Wait pair
    per DMA copy.  The optrace document draws them on the trace."""
    small = _plan(3, 10)
    counts = _check_services(small)
    assert counts["SyncOp"] >= 1 and counts["BlockZapOp"] == 3 and counts["SystemService"] >= 1, counts
    for s in small.steps:
        if s.op_type == "SyncOp":
            me = small.steps[small.step_named(s.name[:-len(":sync")]).index]
            assert all(small.steps[d].thread != me.thread for d in s.deps), f"{s.name}: across HVX threads"
    big = _plan(40, 128, vtcm_mb=1)
    counts = _check_services(big)
    copies = [s for s in big.steps if s.kind in ("spill", "fill")]
    assert copies and counts["DmaCheckpointSet"] == counts["DmaCheckpointWait"] == len(copies), \
        f"one checkpoint set/wait per DMA copy ({len(copies)}): {counts}"
    assert "system services: " in big.passes[-1], big.passes[-1]
    doc = tmp_path / "svc.optrace.json"
    doc.write_text(json.dumps(small.to_optrace()))
    status, _, err = call(profile_viewer.main, ["--input_log", doc, "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    assert_valid(trace)
    shown = Counter(e["args"]["op_type"] for e in trace["traceEvents"] if e.get("cat") == "service")
    assert shown == _check_services(small), f"every service step is on the trace: {shown}"


# ------------------------------------------------------------------------------ vendor
VENDOR_PROBE = r"""
import json, sys
import numpy as np
from qnnemu.client import Backend
lib, level = sys.argv[1], sys.argv[2]
shape = (1, 10, 10, 3)
with Backend(None if lib == "ours" else lib, log_level="error") as be:
    g = be.context().graph("lint")
    x = g.input("x", shape, np.float32)
    a = g.node("Relu", [x], [("a", shape, np.float32, None)], name="r1")
    b = g.node("Sigmoid", [a], [("b", shape, np.float32, None)], name="s1")
    c = g.node("Tanh", [a], [("c", shape, np.float32, None)], name="t1")
    g.node("ElementWiseAdd", [b, c], [("y", shape, np.float32, None)], name="add", app_read=["y"])
    fin = be.profile("detailed", optrace=True)
    g.finalize(profile=fin)
    p = be.profile(level, optrace=level == "detailed")
    g.execute({"x": np.ones(shape, np.float32)}, profile=p)
    def walk(es):
        return [[e["identifier"], e["type_name"], "object" in e or "object_base64" in e, walk(e.get("sub_events", []))]
                for e in es]
    print("RESULT " + json.dumps({"finalize": walk(fin.events()), "execute": walk(p.events())}))
"""


def _probe(lib: str, level: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", VENDOR_PROBE, lib, level], capture_output=True, text=True,
                          timeout=300, env={**vendor_env(), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}, cwd=cwd)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"probe {lib} {level} failed: {proc.stderr[-2000:]}"
    return json.loads(line[7:])


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime-qnn (the vendor's libQnnHtp.so) not installed")
def test_vendor_linting_structure_and_optrace_objects(tmp_path):
    """Probed: the vendor's x86 linting tree has the Input and Output pseudo-ops around the node
    entries, each with Wait (Scheduler) / Overlap / Overlap (wait) / Resources children -- as
    qnnemu's.  With optrace at graphFinalize the vendor's library hands out no optrace object but
    writes "<graph>_schematic.bin" (its own text format) into the current directory; qnnemu's
    library reports the schematic as a profiling event and writes no file."""
    for lib in (str(vendor_library()), "ours"):
        lint = _probe(lib, "linting", tmp_path)["execute"]
        critical = next(e for e in lint if e[0] == "Accelerator (critical path execute) time (cycles)")
        entries = [e[0] for e in critical[3]]
        assert entries[0].startswith("Input OpId_") and entries[-1].startswith("Output OpId_"), f"{lib}: {entries}"
        assert [c[0] for c in critical[3][1][3]][:3] == ["Wait (Scheduler) time", "Overlap time",
                                                         "Overlap (wait) time"], f"{lib}: linting children"
        assert {e[0].split(":OpId_")[0] for e in critical[3][1:-1]} >= {"r1", "s1", "t1", "add"}, entries
    (tmp_path / "v").mkdir()
    (tmp_path / "o").mkdir()
    vendor = _probe(str(vendor_library()), "detailed", tmp_path / "v")
    ours = _probe("ours", "detailed", tmp_path / "o")
    has_object = [any(e[2] for e in vendor[k]) for k in ("finalize", "execute")]
    assert has_object == [False, False], "the vendor's x86 library reports no optrace object"
    written = sorted(p.name for p in (tmp_path / "v").iterdir())
    assert written == ["lint_schematic.bin"], f"the vendor writes <graph>_schematic.bin into the cwd: {written}"
    assert (tmp_path / "v" / "lint_schematic.bin").read_bytes().startswith(b"# python_pprint_graph_summary"), \
        "in its own (text) format"
    assert list((tmp_path / "o").iterdir()) == [], "qnnemu's library writes no file"
    assert [e[0] for e in ours["finalize"] if e[2]] == ["Schematic"] and \
        [e[0] for e in ours["execute"] if e[2]] == ["Optrace"], "qnnemu's: the schematic and the optrace document"


@pytest.mark.skipif(vendor_library() is None, reason="onnxruntime-qnn (the vendor's libQnnHtp.so) not installed")
def test_generator_optrace_on_the_vendor_library_keeps_its_schematic(tmp_path):
    """With the vendor's library the SDK's flow holds: the schematic lands in the current
    directory, in the vendor's format; the generator says so and writes no qnnemu schematic."""
    model = chain_description(tmp_path / "m.json")
    proc = subprocess.run([sys.executable, "-m", "qnnemu.tools.context_binary_generator", "--model", str(model),
                           "--backend", str(vendor_library()), "--output_dir", str(tmp_path / "out"),
                           "--profiling_level", "detailed", "--profiling_option", "optrace"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**vendor_env(), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "wrote its own schematic" in proc.stderr and (tmp_path / "chain_schematic.bin").is_file(), \
        f"the vendor's own schematic, reported: {proc.stderr[-800:]}"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m.bin"], "no qnnemu schematic beside it"
