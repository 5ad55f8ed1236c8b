"""The command-line tools (qnnemu/tools): qnnemu-context-binary-generator, qnnemu-net-run,
qnnemu-context-binary-utility, on our backend and on the vendor's.

A JSON graph description (a float Conv2d/Relu/Reshape/FullyConnected graph and a uint8
ElementWiseAdd graph) is prepared into a context binary by the generator, run by net-run from an
input list (``name:=path`` and positional lines, comments), and the ``Result_N/<output>.raw``
files are compared with the Python client's outputs: bit-identical with graphs built directly
through qnnemu.client on our backend; on the vendor's backend with the client executing the same
vendor binary. Also: native input/output files, --num_inferences / --keep_num_outputs /
--duration, profiling output, the backend-extension config file, online prepare (--model), the
context-binary-utility JSON, ONNX models through the EP, and clear failures (exit status, one
error line, no traceback) for bad arguments. The tools run in-process through ``main(argv)``;
one test runs the console-script entry points in subprocesses.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_env, vendor_library

from qnnemu.client import Backend
from qnnemu.headers import Q
from qnnemu.system_client import SystemLibrary
from qnnemu.tools import (
    ToolError,
    context_binary_generator as generator,
    context_binary_utility as utility,
    dequantize,
    load_backend_config,
    net_run,
    quantize,
)

REPO = Path(__file__).resolve().parent.parent
U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
QUANT_A, QUANT_C, QUANT_S = (0.02, -128), (0.03, -100), (0.05, -120)


def spec(quant):
    """The encoding as QNN stores it (a float32 scale), for quantize/dequantize."""
    return {"scale": float(np.float32(quant[0])), "offset": quant[1]}

needs_ours = pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")
needs_vendor = pytest.mark.skipif(vendor_library() is None,
                                  reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")


# ------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The graph description, its weight files, input files and input lists."""
    d = tmp_path_factory.mktemp("tools")
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((3, 3, 3, 4)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4) * 0.1).astype(np.float32)
    fw = (rng.standard_normal((5, 144)) * 0.1).astype(np.float32)
    w.tofile(d / "w.raw")
    np.save(d / "fw.npy", fw)
    doc = {"version": 1, "graphs": [
        {"name": "conv_fc",
         "tensors": [
             {"name": "x", "type": "APP_WRITE", "dtype": "FLOAT_32", "dims": [1, 6, 6, 3]},
             {"name": "w", "type": "STATIC", "dtype": "FLOAT_32", "dims": [3, 3, 3, 4], "data": "w.raw"},
             {"name": "b", "type": "STATIC", "dtype": "float32", "dims": [4], "data": b.tolist()},
             {"name": "conv", "dtype": "FLOAT_32", "dims": [1, 6, 6, 4]},
             {"name": "relu", "type": "NATIVE", "dtype": "FLOAT_32", "dims": [1, 6, 6, 4]},
             {"name": "flat", "type": "NATIVE", "dtype": "FLOAT_32", "dims": [1, 144]},
             {"name": "fw", "type": "STATIC", "dtype": "FLOAT_32", "dims": [5, 144], "data": "fw.npy"},
             {"name": "fc/out:0", "type": "APP_READ", "dtype": "FLOAT_32", "dims": [1, 5]}],
         "nodes": [
             {"name": "conv", "type": "Conv2d", "inputs": ["x", "w", "b"], "outputs": ["conv"],
              "params": {"stride": [1, 1], "pad_amount": [[1, 1], [1, 1]],
                         "dilation": {"dtype": "UINT_32", "dims": [2], "data": [1, 1]},
                         "group": {"dtype": "UINT_32", "value": 1}}},
             {"name": "relu", "type": "Relu", "inputs": ["conv"], "outputs": ["relu"]},
             {"type": "Reshape", "inputs": ["relu"], "outputs": ["flat"]},
             {"name": "fc", "package": "qti.aisw", "type": "FullyConnected", "inputs": ["flat", "fw"],
              "outputs": ["fc/out:0"]}]},
        {"name": "qadd",
         "tensors": [
             {"name": "a", "type": "APP_WRITE", "dtype": "UFIXED_POINT_8", "dims": [1, 16],
              "quant": spec(QUANT_A)},
             {"name": "c", "type": "input", "dtype": "QNN_DATATYPE_UFIXED_POINT_8", "dims": [1, 16],
              "quant": spec(QUANT_C)},
             {"name": "s", "type": "APP_READ", "dtype": "UFIXED_POINT_8", "dims": [1, 16],
              "quant": spec(QUANT_S)}],
         "nodes": [{"name": "add", "type": "ElementWiseAdd", "inputs": ["a", "c"], "outputs": ["s"]}]}]}
    (d / "model.json").write_text(json.dumps(doc))
    xs = [rng.standard_normal((1, 6, 6, 3)).astype(np.float32) for _ in range(2)]
    for i, x in enumerate(xs):
        x.tofile(d / f"x{i}.raw")
    a = rng.uniform(-2.5, 2.5, (1, 16)).astype(np.float32)
    c = rng.uniform(-2.5, 2.5, (1, 16)).astype(np.float32)
    a.tofile(d / "a.raw")
    c.tofile(d / "c.raw")
    quantize(a, U8, spec(QUANT_A)).tofile(d / "a_native.raw")
    quantize(c, U8, spec(QUANT_C)).tofile(d / "c_native.raw")
    # '#' and '%' lines are skipped; the second inference uses the name:=path form.
    (d / "conv_list.txt").write_text(f"#fc/out:0\n{d / 'x0.raw'}\n% comment\nx:={d / 'x1.raw'}\n")
    (d / "add_list.txt").write_text("c:=c.raw a:=a.raw\n")   # relative to the list's directory
    (d / "add_native_list.txt").write_text("a_native.raw c_native.raw\n")
    return {"dir": d, "w": w, "b": b, "fw": fw, "xs": xs, "a": a, "c": c}


def build_reference(be, data):
    """The same graphs through qnnemu.client directly; returns {graph: (graph, feeds)}."""
    ctx = be.context()
    g = ctx.graph("conv_fc")
    x = g.input("x", (1, 6, 6, 3), np.float32)
    y = g.node("Conv2d", [x, g.static("w", data["w"]), g.static("b", data["b"])],
               params={"stride": np.array([1, 1], np.uint32),
                       "pad_amount": np.array([[1, 1], [1, 1]], np.uint32),
                       "dilation": np.array([1, 1], np.uint32), "group": np.uint32(1)},
               outputs=[("conv", (1, 6, 6, 4), np.float32)], name="conv")
    r = g.node("Relu", [y], outputs=[("relu", (1, 6, 6, 4), np.float32)], name="relu")
    f = g.node("Reshape", [r], outputs=[("flat", (1, 144), np.float32)])
    g.node("FullyConnected", [f, g.static("fw", data["fw"])],
           outputs=[("fc/out:0", (1, 5), np.float32)], app_read=True, name="fc")
    q = ctx.graph("qadd")
    a = q.input("a", (1, 16), U8, quant=QUANT_A)
    c = q.input("c", (1, 16), U8, quant=QUANT_C)
    q.node("ElementWiseAdd", [a, c], outputs=[("s", (1, 16), U8, QUANT_S)], app_read=True, name="add")
    for graph in (g, q):
        graph.finalize()
    return {"conv_fc": g, "qadd": q}


def quant_feeds(data):
    return {"a": quantize(data["a"], U8, spec(QUANT_A)),
            "c": quantize(data["c"], U8, spec(QUANT_C))}


def call(main, argv, capsys):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.err


def raw(path, dtype=np.float32):
    return np.fromfile(path, dtype=dtype)


@pytest.fixture(scope="module")
def our_binary(workdir):
    if our_library() is None:
        pytest.skip("libQnnHtpEmu.so not built")
    out = workdir["dir"] / "gen_ours"
    assert generator.main(["--model", str(workdir["dir"] / "model.json"), "--output_dir", str(out),
                           "--binary_file", "model.bin"]) == 0, "generator succeeds on our backend"
    return out / "model.bin"


@pytest.fixture(scope="module")
def vendor_binary(workdir):
    if vendor_library() is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    out = workdir["dir"] / "gen_vendor"
    assert generator.main(["--model", str(workdir["dir"] / "model.json"), "--output_dir", str(out),
                           "--backend", str(vendor_library()), "--log_level", "error"]) == 0, \
        "generator succeeds on the vendor's backend"
    return out / "model.bin"


# --------------------------------------------------------------------- net-run on our backend
@needs_ours
def test_net_run_matches_client_bit_for_bit(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path,
                                      "--input_list", f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"], capsys)
    assert status == 0, f"net-run succeeds: {err}"
    with Backend(log_level="error") as be:
        ref = build_reference(be, workdir)
        for i, x in enumerate(workdir["xs"]):
            expected = ref["conv_fc"].execute({"x": x})["fc/out:0"]
            got = raw(tmp_path / "conv_fc" / f"Result_{i}" / "fc_out_0.raw")
            np.testing.assert_array_equal(got, expected.ravel(),
                                          err_msg=f"conv_fc inference {i} (file name sanitized)")
        codes = ref["qadd"].execute(quant_feeds(workdir))["s"]
        expected = dequantize(codes, spec(QUANT_S))
        np.testing.assert_array_equal(raw(tmp_path / "qadd" / "Result_0" / "s.raw"), expected.ravel(),
                                      err_msg="quantized output dequantized to float32 like the client's")
    assert not (tmp_path / "conv_fc" / "Result_2").exists(), "one Result per input-list line"


@needs_ours
def test_native_files(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path,
                                      "--input_list", f"__,{d / 'add_native_list.txt'}",
                                      "--use_native_input_files", "--use_native_output_files"], capsys)
    assert status == 0, f"net-run with native files succeeds: {err}"
    assert not (tmp_path / "conv_fc").exists(), "'__' skips the first graph"
    with Backend(log_level="error") as be:
        expected = build_reference(be, workdir)["qadd"].execute(quant_feeds(workdir))["s"]
    np.testing.assert_array_equal(raw(tmp_path / "qadd" / "Result_0" / "s.raw", np.uint8), expected.ravel(),
                                  err_msg="native output files hold the uint8 codes")
    # Same through --native_input_tensor_names (both inputs) and float outputs.
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path / "n2",
                                      "--input_list", f"__,{d / 'add_native_list.txt'}",
                                      "--native_input_tensor_names", "a,c"], capsys)
    assert status == 0, err
    np.testing.assert_array_equal(
        raw(tmp_path / "n2" / "qadd" / "Result_0" / "s.raw"),
        dequantize(expected, spec(QUANT_S)).ravel(),
        err_msg="native inputs by name, float32 outputs")


@needs_ours
def test_num_inferences_keep_outputs_and_profiling(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path,
                                      "--input_list", f"{d / 'conv_list.txt'},__", "--num_inferences", 5,
                                      "--keep_num_outputs", 4, "--profiling_level", "detailed"], capsys)
    assert status == 0, err
    results = sorted(p.name for p in (tmp_path / "conv_fc").iterdir())
    assert results == [f"Result_{i}" for i in range(4)], "5 inferences, the first 4 kept"
    np.testing.assert_array_equal(raw(tmp_path / "conv_fc" / "Result_2" / "fc_out_0.raw"),
                                  raw(tmp_path / "conv_fc" / "Result_0" / "fc_out_0.raw"),
                                  err_msg="the input list loops: inference 2 reuses line 1")
    prof = json.loads((tmp_path / net_run.PROFILE_FILE).read_text())
    calls = [c["call"] for c in prof["calls"]]
    assert calls.count("graphExecute") == 5 and calls[0] == "contextCreateFromBinary", \
        f"one profile record per profiled call, got {calls}"
    execute = next(c for c in prof["calls"] if c["call"] == "graphExecute")
    assert execute["events"] and all({"identifier", "value", "unit"} <= set(e) for e in execute["events"]), \
        "graphExecute events carry identifier/value/unit"
    assert any(e.get("sub_events") for e in execute["events"]), "detailed level: per-node sub-events"


@needs_ours
def test_duration_loops(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path,
                                      "--input_list", f"__,{d / 'add_list.txt'}", "--duration", 0.3,
                                      "--log_level", "info"], capsys)
    assert status == 0, err
    assert (tmp_path / "qadd" / "Result_0" / "s.raw").is_file(), "at least one inference"
    assert "inference(s) in" in err, "the info log reports the inference count and time"


@needs_ours
def test_online_prepare_matches_binary(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    lists = f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"
    assert call(net_run.main, ["--model", d / "model.json", "--output_dir", tmp_path / "online",
                               "--input_list", lists], capsys)[0] == 0, "online prepare runs"
    assert call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path / "bin",
                               "--input_list", lists], capsys)[0] == 0
    for rel in ("conv_fc/Result_0/fc_out_0.raw", "conv_fc/Result_1/fc_out_0.raw", "qadd/Result_0/s.raw"):
        np.testing.assert_array_equal(raw(tmp_path / "online" / rel), raw(tmp_path / "bin" / rel),
                                      err_msg=f"{rel}: online prepare == loaded binary")


@needs_ours
def test_config_file_reaches_device_context_and_graphs(workdir, tmp_path, capsys):
    d = workdir["dir"]
    htp = tmp_path / "htp_config.json"
    htp.write_text(json.dumps({
        "graphs": [{"graph_names": ["conv_fc"], "vtcm_mb": 4, "O": 3, "hvx_threads": 2}],
        "devices": [{"dsp_arch": "v79", "cores": [{"perf_profile": "burst"}]}],
        "context": {"weight_sharing_enabled": True}}))
    outer = tmp_path / "config.json"
    outer.write_text(json.dumps({"backend_extensions": {"shared_library_path": "libQnnHtpNetRunExtensions.so",
                                                         "config_file_path": "htp_config.json"}}))
    status, err = call(generator.main, ["--model", d / "model.json", "--output_dir", tmp_path,
                                        "--config_file", outer], capsys)
    assert status == 0, err
    assert "perf_profile ignored: the context-binary generator executes no graph" in err, \
        "the generator names the perf keys it does not use"
    info = SystemLibrary().binary_info((tmp_path / "model.bin").read_bytes())
    assert info["htp_arch"] == 79 and info["soc_model"] == Q.QNN_SOC_MODEL_SM8750, \
        "devices.dsp_arch reached deviceCreate (the binary records a v79 device)"
    cfg = load_backend_config(str(outer))
    assert [opt for opt, _, _ in cfg.graphs[0][1]] == ["VTCM_SIZE", "OPTIMIZATION", "NUM_HVX_THREADS"], \
        "graph keys map to HTP graph options"
    assert len(cfg.graph_configs("conv_fc")) == 3 and cfg.graph_configs("qadd") == [], \
        "graph options apply to the graphs named in graph_names only"
    assert [c[0] for c in cfg.context] == ["WEIGHT_SHARING_ENABLED"], "context keys map to HTP context options"


@needs_ours
def test_perf_profile_of_the_config_file_votes_around_each_inference(workdir, tmp_path, capsys):
    """devices[0].cores[0].perf_profile reaches the perf votes ("QNN HTP Backend Extensions"):
    net-run votes the profile through the perf infrastructure before each inference, so the
    BASIC profile's accelerator microseconds follow the profile's clock (burst above
    power_saver), while the cycles stay the plan's."""
    from qnnemu.htp import perf
    d = workdir["dir"]
    accel = {}
    before = perf.current_clocks()
    for name in ("burst", "power_saver"):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({"devices": [{"cores": [{"perf_profile": name, "rpc_polling_time": 100}]}]}))
        out = tmp_path / name
        status, err = call(net_run.main, ["--model", d / "model.json", "--output_dir", out, "--config_file", cfg,
                                          "--input_list", f"{d / 'conv_list.txt'},__", "--num_inferences", 2,
                                          "--profiling_level", "basic"], capsys)
        assert status == 0, err
        doc = json.loads((out / "qnn-profiling-data.json").read_text())
        runs = [c for c in doc["calls"] if c["call"] == "graphExecute"]
        us = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC
        cyc = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE
        values = [{e["type"]: e["value"] for e in r["events"]} for r in runs]
        accel[name] = (values[-1][us], values[-1][cyc])
    assert accel["burst"][1] == accel["power_saver"][1], "the plan's cycles do not depend on the vote"
    assert accel["burst"][0] < accel["power_saver"][0], \
        f"burst's clock gives fewer accelerator microseconds than power_saver's: {accel}"
    assert perf.current_clocks() == before, "net-run destroyed its power config id and its votes"


# --------------------------------------------------------------------------- vendor backend
@needs_vendor
def test_net_run_drives_the_vendor_backend(workdir, vendor_binary, tmp_path, capsys):
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", vendor_binary, "--backend", vendor_library(),
                                      "--output_dir", tmp_path, "--log_level", "error",
                                      "--input_list", f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"], capsys)
    assert status == 0, f"net-run on the vendor backend: {err}"
    blob = vendor_binary.read_bytes()
    info = SystemLibrary(vendor_library("libQnnSystem.so")).binary_info(blob)
    with Backend(str(vendor_library()), log_level="error") as be:
        ctx = be.context_from_binary(blob)
        graphs = {g["name"]: ctx.retrieve_graph(g["name"], g["inputs"], g["outputs"]) for g in info["graphs"]}
        for i, x in enumerate(workdir["xs"]):
            expected = graphs["conv_fc"].execute({"x": x})["fc/out:0"]
            np.testing.assert_array_equal(raw(tmp_path / "conv_fc" / f"Result_{i}" / "fc_out_0.raw"),
                                          expected.ravel(), err_msg=f"vendor conv_fc inference {i}")
        codes = graphs["qadd"].execute(quant_feeds(workdir))["s"]
    np.testing.assert_array_equal(raw(tmp_path / "qadd" / "Result_0" / "s.raw"),
                                  dequantize(codes, spec(QUANT_S)).ravel(),
                                  err_msg="vendor qadd, dequantized")


@needs_vendor
@needs_ours
def test_vendor_and_ours_agree(workdir, vendor_binary, our_binary, tmp_path, capsys):
    """The same description on both backends: float outputs close, uint8 codes within 1 LSB."""
    d = workdir["dir"]
    lists = f"{d / 'conv_list.txt'},{d / 'add_native_list.txt'}"
    for name, binary, backend in (("ours", our_binary, None), ("vendor", vendor_binary, vendor_library())):
        argv = ["--retrieve_context", binary, "--output_dir", tmp_path / name, "--input_list", lists,
                "--native_input_tensor_names", "a,c", "--log_level", "error"]
        assert call(net_run.main, argv + (["--backend", backend] if backend else []), capsys)[0] == 0
    ours = raw(tmp_path / "ours/conv_fc/Result_1/fc_out_0.raw")
    theirs = raw(tmp_path / "vendor/conv_fc/Result_1/fc_out_0.raw")
    assert np.max(np.abs(ours - theirs)) <= 1e-4 * np.max(np.abs(theirs)), "float graph agrees across backends"
    diff = np.abs(raw(tmp_path / "ours/qadd/Result_0/s.raw") - raw(tmp_path / "vendor/qadd/Result_0/s.raw"))
    assert np.max(diff) <= QUANT_S[0] * 1.001, "quantized add within one output step"


# ------------------------------------------------------------------------------ the utility
@pytest.mark.parametrize("which", [pytest.param("ours", marks=needs_ours), pytest.param("vendor", marks=needs_vendor)])
def test_context_binary_utility_json(which, request, tmp_path, capsys):
    binary = request.getfixturevalue("our_binary" if which == "ours" else "vendor_binary")
    argv = ["--context_binary", binary, "--json_file", tmp_path / "info.json"]
    if which == "vendor":
        argv += ["--system_library", vendor_library("libQnnSystem.so")]
    status, err = call(utility.main, argv, capsys)
    assert status == 0, err
    doc = json.loads((tmp_path / "info.json").read_text())
    info = doc["info"]
    assert info["backend_id"] == Q.QNN_BACKEND_ID_HTP and info["build_id"], f"{which}: backend and build id"
    assert info["binary_size"] == binary.stat().st_size, f"{which}: binary size"
    assert len(info["core_api"]) == 3 and len(info["backend_api"]) == 3, f"{which}: API versions"
    graphs = {g["name"]: g for g in info["graphs"]}
    assert set(graphs) == {"conv_fc", "qadd"}, f"{which}: both graphs listed"
    (x,) = graphs["conv_fc"]["inputs"]
    assert (x["name"], x["dims"], x["dataTypeName"], x["typeName"]) == \
        ("x", [1, 6, 6, 3], "QNN_DATATYPE_FLOAT_32", "QNN_TENSOR_TYPE_APP_WRITE"), f"{which}: input x"
    (s,) = graphs["qadd"]["outputs"]
    assert s["dataTypeName"] == "QNN_DATATYPE_UFIXED_POINT_8" and s["quant"]["offset"] == QUANT_S[1] \
        and s["quant"]["scale"] == pytest.approx(QUANT_S[0]) \
        and s["quant"]["encodingName"] == "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET", f"{which}: output s quant"
    for g in graphs.values():
        assert "spill_fill_bytes" in g, f"{which}: spill-fill size reported (None when unknown)"
        if g.get("graph_info_version") == 3:
            assert isinstance(g["spill_fill_bytes"], int), f"{which}: graph info v3 has the spill-fill size"


# ---------------------------------------------------------------------------- ONNX models
@pytest.mark.parametrize("which", [pytest.param("ours", marks=needs_ours), pytest.param("vendor", marks=needs_vendor)])
def test_generator_onnx_model_through_the_ep(which, tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime_qnn")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "relu_add.onnx")
    backend = ["--backend", vendor_library()] if which == "vendor" else []
    status, err = call(generator.main, ["--model", tmp_path / "relu_add.onnx", "--output_dir", tmp_path,
                                        "--log_level", "error"] + backend, capsys)
    assert status == 0, err
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    x.tofile(tmp_path / "x.raw")
    (tmp_path / "list.txt").write_text(f"{tmp_path / 'x.raw'}\n")
    status, err = call(net_run.main, ["--retrieve_context", tmp_path / "relu_add.bin", "--output_dir",
                                      tmp_path / "out", "--input_list", tmp_path / "list.txt",
                                      "--log_level", "error"] + backend, capsys)
    assert status == 0, err
    np.testing.assert_array_equal(raw(tmp_path / "out" / "Result_0" / "y.raw"), (np.maximum(x, 0) + x).ravel(),
                                  err_msg=f"{which}: the binary embedded in the EPContext node computes relu(x) + x")


# ---------------------------------------------------------------------------- bad arguments
def _fails_cleanly(status, err, expected_status, fragment):
    assert status == expected_status, f"exit status {expected_status}, got {status}: {err}"
    assert fragment in err, f"the error names the problem ({fragment!r}): {err}"
    assert "Traceback" not in err, "no traceback for a user error"
    if expected_status == 1:
        # qnnemu's libraries log nothing else for these failures: the whole report is one line.
        lines = err.strip().splitlines()
        assert len(lines) == 1 and ": error: " in lines[0], f"one error line, nothing else: {err}"


@needs_ours
def test_bad_arguments(workdir, our_binary, tmp_path, capsys):
    d = workdir["dir"]
    lists = f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"
    base = ["--retrieve_context", our_binary, "--output_dir", tmp_path]
    _fails_cleanly(*call(net_run.main, ["--retrieve_context", our_binary], capsys), 2, "--input_list")
    _fails_cleanly(*call(net_run.main, base + ["--model", d / "model.json", "--input_list", lists], capsys),
                   2, "not allowed with")
    _fails_cleanly(*call(net_run.main, ["--retrieve_context", tmp_path / "missing.bin", "--input_list", lists],
                         capsys), 1, "missing.bin")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", d / "conv_list.txt"], capsys), 1,
                   "1 input list(s) for 2 graphs")
    # Float32 files read as native: fine for the float32 input x, not for the uint8 input c.
    _fails_cleanly(*call(net_run.main, base + ["--input_list", lists, "--use_native_input_files"], capsys), 1,
                   "c.raw has 64 bytes, expected 16 (16 x uint8)")
    (tmp_path / "bad_name.txt").write_text(f"y:={d / 'x0.raw'}\n")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", f"{tmp_path / 'bad_name.txt'},__"], capsys), 1,
                   "'y' is not an input of graph 'conv_fc'")
    (tmp_path / "short.raw").write_bytes(b"\0" * 12)
    (tmp_path / "short.txt").write_text(f"{tmp_path / 'short.raw'}\n")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", f"{tmp_path / 'short.txt'},__"], capsys), 1,
                   "has 12 bytes, expected 432")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", lists, "--num_inferences", 0], capsys), 1,
                   "--num_inferences 0")
    (tmp_path / "garbage.bin").write_bytes(b"\x01garbage" * 10)
    _fails_cleanly(*call(net_run.main, ["--retrieve_context", tmp_path / "garbage.bin", "--input_list", lists,
                                        "--output_dir", tmp_path], capsys), 1, "systemContextGetBinaryInfo")
    for config, fragment in (({"graphs": [{"vtcm": 4}]}, "graphs[0].vtcm: unknown graph option"),
                             ({"memory": {"mem_type": "shared_buffer"}}, "not supported by the qnnemu tools"),
                             ({"devices": [{"dsp_arch": "v99"}]}, "not an HTP architecture"),
                             ({"devices": [{"cores": [{"perf_profile": "ludicrous"}]}]}, "is not one of"),
                             ({"context": {"weight_sharing": True}}, "context.weight_sharing: unknown"),
                             ({"backend_extensions": {}}, "config_file_path")):
        (tmp_path / "cfg.json").write_text(json.dumps(config))
        _fails_cleanly(*call(net_run.main, base + ["--input_list", lists, "--config_file", tmp_path / "cfg.json"],
                             capsys), 1, fragment)
    (tmp_path / "cfg.json").write_text("{not json")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", lists, "--config_file", tmp_path / "cfg.json"],
                         capsys), 1, "invalid JSON")
    _fails_cleanly(*call(net_run.main, base + ["--input_list", lists, "--backend", tmp_path / "nope.so"],
                         capsys), 1, "no such file")


def test_backend_and_system_library_resolution(tmp_path, capsys):
    import qnnemu
    from qnnemu.tools import resolve_backend, resolve_system_library
    assert resolve_backend(None) == qnnemu.backend_library_path(), "our backend by default"
    assert resolve_backend("libQnnHtpEmu.so") == qnnemu.backend_library_path(), "ours by name"
    if vendor_library() is not None:
        assert Path(resolve_backend("htp")) == vendor_library(), "'htp': the vendor's libQnnHtp.so"
        assert Path(resolve_system_library(None, str(vendor_library()))) == vendor_library("libQnnSystem.so"), \
            "the System library next to the backend"
    assert resolve_system_library(None, None) == qnnemu.system_library_path(), "else ours"
    with pytest.raises(ToolError, match=r"libNoSuchBackend.so"):
        resolve_backend("libNoSuchBackend.so")
    # A library that is not a QNN backend / System library: a clear error, exit status 1.
    not_qnn = os.path.join(qnnemu.library_dir(), "libcdsprpc.so")
    (tmp_path / "l.txt").write_text("x.raw\n")
    _fails_cleanly(*call(net_run.main, ["--retrieve_context", tmp_path / "l.txt", "--input_list",
                                        tmp_path / "l.txt", "--backend", not_qnn, "--output_dir", tmp_path], capsys),
                   1, "not a QNN backend library")
    _fails_cleanly(*call(utility.main, ["--context_binary", tmp_path / "l.txt", "--json_file", tmp_path / "o.json",
                                        "--system_library", not_qnn], capsys), 1, "not a QNN System library")


def test_generator_and_utility_bad_arguments(workdir, tmp_path, capsys):
    d = workdir["dir"]
    _fails_cleanly(*call(generator.main, ["--output_dir", tmp_path], capsys), 2, "--model")
    _fails_cleanly(*call(generator.main, ["--model", tmp_path / "none.json"], capsys), 1, "no such file")
    (tmp_path / "m.txt").write_text("{}")
    _fails_cleanly(*call(generator.main, ["--model", tmp_path / "m.txt"], capsys), 1, "expected a .json")
    _fails_cleanly(*call(utility.main, ["--context_binary", d / "model.json"], capsys), 2, "--json_file")
    _fails_cleanly(*call(utility.main, ["--context_binary", tmp_path / "none.bin", "--json_file",
                                        tmp_path / "o.json"], capsys), 1, "none.bin")
    _fails_cleanly(*call(utility.main, ["--context_binary", d / "model.json", "--json_file", tmp_path / "o.json",
                                        "--system_library", tmp_path / "libnone.so"], capsys), 1, "libnone.so")


@pytest.mark.parametrize("mutation, fragment", [
    (lambda g: g["tensors"][0].update(dtype="FLOAT_33"), "unknown dtype \"FLOAT_33\""),
    (lambda g: g["tensors"][0].update(dims=[1, 0]), "dims must be a list of positive integers"),
    (lambda g: g["nodes"][0].update(inputs=["x", "nope"]),
     "model.json: graphs[0].nodes[0].inputs[1]: tensor 'nope' is not declared"),
    (lambda g: g["nodes"].reverse(), "graphs[0].nodes[0].inputs[0]: tensor 'flat' is used before a node produces it"),
    (lambda g: g["tensors"][1].pop("data"), "STATIC tensor 'w' needs data"),
    (lambda g: g["nodes"][0].update(colour="red"), "unknown keys ['colour']"),
    (lambda g: g["tensors"].append({"name": "q", "dtype": "UFIXED_POINT_8", "dims": [1]}), "needs a quant"),
    (lambda g: g["tensors"][2].update(data=[1.0, 2.0]), "2 inline values, dims [4] need 4"),
    (lambda g: g["nodes"][1].update(outputs=["conv"]),
     "graphs[0].nodes[1].outputs[0]: tensor 'conv' is already produced by node 'conv'"),
    (lambda g: g["tensors"].append({"name": "w", "dtype": "FLOAT_32", "dims": [1]}),
     "graphs[0].tensors[8].name: tensor 'w' is declared twice (first at graphs[0].tensors[1])"),
])
def test_generator_refuses_bad_descriptions(workdir, tmp_path, capsys, mutation, fragment):
    d = workdir["dir"]
    doc = json.loads((d / "model.json").read_text())
    mutation(doc["graphs"][0])
    (tmp_path / "model.json").write_text(json.dumps(doc))
    for name in ("w.raw", "fw.npy"):
        shutil.copy(d / name, tmp_path / name)
    _fails_cleanly(*call(generator.main, ["--model", tmp_path / "model.json", "--output_dir", tmp_path], capsys),
                   1, fragment)


# ------------------------------------------------------------------ binary sections / LoRA
def _lora_description(d: Path, rng) -> dict:
    """A graph y = x @ W + b with W, b UPDATEABLE_STATIC (W from a .npy file, b inline) and an
    adapter file A (W from a .raw file, b inline); returns the weights."""
    w0, b0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    wa, ba = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    np.save(d / "w0.npy", w0)
    wa.tofile(d / "wa.raw")
    doc = {"name": "lora", "tensors": [
        {"name": "x", "type": "APP_WRITE", "dtype": "FLOAT_32", "dims": [2, 4]},
        {"name": "W", "type": "UPDATEABLE_STATIC", "dtype": "FLOAT_32", "dims": [4, 3], "data": "w0.npy"},
        {"name": "b", "type": "QNN_TENSOR_TYPE_UPDATEABLE_STATIC", "dtype": "FLOAT_32", "dims": [3],
         "data": b0.tolist()},
        {"name": "h", "dtype": "FLOAT_32", "dims": [2, 3]},
        {"name": "y", "type": "APP_READ", "dtype": "FLOAT_32", "dims": [2, 3]}],
        "nodes": [{"type": "MatMul", "inputs": ["x", "W"], "outputs": ["h"]},
                  {"type": "ElementWiseAdd", "inputs": ["h", "b"], "outputs": ["y"]}]}
    (d / "lora.json").write_text(json.dumps(doc))
    (d / "a.json").write_text(json.dumps({"lora": {"W": "wa.raw", "b": ba.tolist()}}))
    (d / "b_only.json").write_text(json.dumps({"lora": {"b": (ba * 2).tolist()}}))
    return {"base": (w0, b0), "A": (wa, ba), "B": (w0, ba * 2)}


@needs_ours
def test_generator_writes_updatable_sections(tmp_path, capsys):
    weights = _lora_description(tmp_path, np.random.default_rng(5))
    out = tmp_path / "out"
    status, err = call(generator.main, ["--model", tmp_path / "lora.json", "--output_dir", out, "--binary_file",
                                        "lora", "--adapter", f"A={tmp_path / 'a.json'}",
                                        "--adapter", f"B={tmp_path / 'b_only.json'}"], capsys)
    assert status == 0, f"generator with --adapter succeeds: {err}"
    files = sorted(f.name for f in out.iterdir())
    assert files == ["lora.bin", "lora.lora.A.section.bin", "lora.lora.B.section.bin", "lora.lora.section.bin"], \
        f"the binary, the description's section and one section per adapter: {files}"
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)
    blob = (out / "lora.bin").read_bytes()
    info = SystemLibrary().binary_info(blob)["graphs"][0]
    with Backend() as be:
        ctx = be.context_from_binary(blob)
        g = ctx.retrieve_graph("lora", info["inputs"], info["outputs"])
        for section, name in (("lora.lora.A.section.bin", "A"), ("lora.lora.B.section.bin", "B"),
                              ("lora.lora.section.bin", "base"), (None, "base")):
            if section is not None:
                ctx.apply_binary_section((out / section).read_bytes(), g)
            w, b = weights[name]
            np.testing.assert_allclose(g.execute({"x": x})["y"], x @ w + b, rtol=1e-5, atol=1e-5,
                                       err_msg=f"binary loaded, section {section}: weights {name}")
            if section is None:
                break
    # The binary holds the description's weights even though adapters were made after it.
    with Backend() as be:
        ctx = be.context_from_binary(blob)
        g = ctx.retrieve_graph("lora", info["inputs"], info["outputs"])
        w, b = weights["base"]
        np.testing.assert_allclose(g.execute({"x": x})["y"], x @ w + b, rtol=1e-5, atol=1e-5,
                                   err_msg="a fresh load of the binary: the description's weights")

    status, err = call(generator.main, ["--model", tmp_path / "lora.json", "--output_dir", tmp_path / "only",
                                        "--output_sections"], capsys)
    assert status == 0, err
    assert sorted(f.name for f in (tmp_path / "only").iterdir()) == ["lora.bin", "lora.lora.section.bin"], \
        "--output_sections alone: the description's section"
    assert (tmp_path / "only" / "lora.lora.section.bin").read_bytes() == (out / "lora.lora.section.bin").read_bytes(), \
        "the same description gives the same section bytes"


@needs_ours
def test_generator_section_options_refuse_bad_input(workdir, tmp_path, capsys):
    _lora_description(tmp_path, np.random.default_rng(5))
    lora = ["--model", tmp_path / "lora.json", "--output_dir", tmp_path / "o"]
    (tmp_path / "static.json").write_text(json.dumps({"lora": {"x": [0.0] * 8}}))
    (tmp_path / "other.json").write_text(json.dumps({"nope": {"W": [0.0] * 12}}))
    (tmp_path / "short.json").write_text(json.dumps({"lora": {"b": [1.0, 2.0]}}))
    for argv, fragment in (
            (lora + ["--adapter", "A"], "expected NAME=FILE.json"),
            (lora + ["--adapter", "a/b=x.json"], "expected NAME=FILE.json"),
            (lora + ["--adapter", f"A={tmp_path / 'a.json'}", "--adapter", f"A={tmp_path / 'a.json'}"], "given twice"),
            (lora + ["--adapter", f"A={tmp_path / 'none.json'}"], "none.json"),
            (lora + ["--adapter", f"A={tmp_path / 'static.json'}"], "lora.x: not an UPDATEABLE_STATIC tensor"),
            (lora + ["--adapter", f"A={tmp_path / 'other.json'}"], "graph 'nope' is not in the model"),
            (lora + ["--adapter", f"A={tmp_path / 'short.json'}"], "2 inline values, dims [3] need 3"),
            (["--model", workdir["dir"] / "model.json", "--output_dir", tmp_path / "o", "--output_sections"],
             "no graph of the model has UPDATEABLE_STATIC tensors"),
            (["--model", tmp_path / "m.onnx", "--output_dir", tmp_path / "o", "--output_sections"],
             "need a JSON graph description")):
        if str(argv[1]).endswith(".onnx"):
            Path(argv[1]).write_bytes(b"")
        _fails_cleanly(*call(generator.main, argv, capsys), 1, fragment)
    doc = json.loads((tmp_path / "lora.json").read_text())
    del doc["tensors"][1]["data"]
    (tmp_path / "nodata.json").write_text(json.dumps(doc))
    _fails_cleanly(*call(generator.main, ["--model", tmp_path / "nodata.json", "--output_dir", tmp_path / "o"],
                         capsys), 1, "UPDATEABLE_STATIC tensor 'W' needs data")


def test_quantize_conventions():
    spec = {"scale": 0.5, "offset": -3}
    x = np.array([-100.0, -1.25, -0.25, 0.25, 1.25, 1000.0], np.float32)
    codes = quantize(x, U8, spec)
    # real = scale * (code + offset): -1.25 -> -2.5 rounds half away from zero to -3 -> 0
    assert codes.tolist() == [0, 0, 2, 4, 6, 255], "round half away from zero, minus offset, saturated"
    assert dequantize(codes, spec).tolist() == [-1.5, -1.5, -0.5, 0.5, 1.5, 126.0], "scale * (code + offset)"
    per_axis = {"axis": 1, "scales": [1.0, 0.5], "offsets": [0, -2]}
    assert quantize(np.array([[1.0, 1.0]], np.float32), U8, per_axis).tolist() == [[1, 4]], "per-axis"
    with pytest.raises(ToolError):
        quantize(np.zeros(2, np.float32), U8, {"encoding": 4})


# ------------------------------------------------------------------------ console scripts
@needs_ours
def test_console_script_entry_points(our_binary, tmp_path):
    """The [project.scripts] entry points resolve to the tools' main functions and run as
    scripts (the wrapper pip generates, ``sys.exit(main())``), and ``python -m`` works."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"qnnemu-net-run": "qnnemu.tools.net_run:main",
                       "qnnemu-context-binary-utility": "qnnemu.tools.context_binary_utility:main",
                       "qnnemu-context-binary-generator": "qnnemu.tools.context_binary_generator:main",
                       "qnnemu-profile-viewer": "qnnemu.tools.profile_viewer:main",
                       "qnnemu-sdk-root": "qnnemu.tools.sdk_root:main",
                       "qnnemu-htp-timeline": "qnnemu.tools.htp_timeline:main"}, \
        "the six console scripts are declared"
    env = dict(vendor_env(), PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    module, func = scripts["qnnemu-context-binary-utility"].split(":")
    wrapper = f"import sys, {module} as m; sys.argv[0] = 'qnnemu-context-binary-utility'; sys.exit(m.{func}())"
    installed = shutil.which("qnnemu-context-binary-utility")
    cmd = [installed] if installed else [sys.executable, "-c", wrapper]
    proc = subprocess.run(cmd + ["--context_binary", str(our_binary), "--json_file", str(tmp_path / "i.json")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {g["name"] for g in json.loads((tmp_path / "i.json").read_text())["info"]["graphs"]} == \
        {"conv_fc", "qadd"}, "the script wrote the binary's info"
    proc = subprocess.run([sys.executable, "-m", "qnnemu.tools.net_run", "--retrieve_context", str(our_binary),
                           "--input_list", str(tmp_path / "missing.txt")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1 and "qnnemu-net-run: error: --input_list" in proc.stderr \
        and "Traceback" not in proc.stderr, f"python -m reports a clear error: {proc.stderr}"


# ------------------------------------------------------- one error line, success summaries
def _with_unknown_op(workdir, tmp_path) -> Path:
    """model.json with its second node (graphs[0].nodes[1], 'relu') turned into NoSuchOp."""
    doc = json.loads((workdir["dir"] / "model.json").read_text())
    doc["graphs"][0]["nodes"][1]["type"] = "NoSuchOp"
    for name in ("w.raw", "fw.npy"):
        shutil.copy(workdir["dir"] / name, tmp_path / name)
    (tmp_path / "model.json").write_text(json.dumps(doc))
    return tmp_path / "model.json"


@needs_ours
def test_backend_refusal_is_one_line_naming_the_json_path(workdir, tmp_path, capsys):
    """Our backend refuses NoSuchOp in graphAddNode: the report is one line that names the JSON
    path and node, the QNN function and code, and the backend's reason (its rule id once), though
    the backend logged it through the QnnLog callback and the qnnemu Python logger too."""
    model = _with_unknown_op(workdir, tmp_path)
    d = workdir["dir"]
    for tool, argv in ((generator, ["--model", model, "--output_dir", tmp_path / "out"]),
                       (net_run, ["--model", model, "--output_dir", tmp_path / "out",
                                  "--input_list", f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"])):
        status, err = call(tool.main, argv, capsys)
        lines = err.strip().splitlines()
        assert status == 1 and len(lines) == 1, f"{tool.PROG}: exit 1 and one stderr line: {err}"
        assert lines[0].startswith(
            f"{tool.PROG}: error: model.json: graphs[0].nodes[1] (node 'relu', NoSuchOp): graphAddNode failed "
            f"with error {Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE}"), f"path, node, function and code: {err}"
        assert lines[0].count("[QNNEMU-op-type-unknown]") == 1, f"{tool.PROG}: the backend's reason, once: {err}"


@needs_vendor
def test_vendor_backend_refusal_names_the_graph(workdir, tmp_path, capsys):
    """The vendor's backend takes NoSuchOp in graphAddNode and refuses it in graphFinalize: its
    own log lines are labelled 'backend', and the one error line names the graph's JSON path."""
    model = _with_unknown_op(workdir, tmp_path)
    status, err = call(generator.main, ["--model", model, "--output_dir", tmp_path / "out",
                                        "--backend", vendor_library()], capsys)
    ours = [line for line in err.splitlines() if line.startswith("qnnemu-context-binary-generator: ")]
    errors = [line for line in ours if ": error: " in line]
    assert status == 1 and len(errors) == 1, f"exit 1 and one error line: {err}"
    assert errors[0] == ours[-1], f"the error line comes last: {err}"
    assert errors[0].startswith("qnnemu-context-binary-generator: error: model.json: graphs[0] (graph "
                                "'conv_fc'): graphFinalize failed with error "), f"graph path and call: {err}"
    assert all(": backend " in line for line in ours[:-1]), f"the library's messages are labelled: {err}"


def test_system_library_refusal_is_one_line_with_its_reason(tmp_path, capsys):
    """The System API has no errorGetMessage: the reason our System library logged completes
    the one error line."""
    (tmp_path / "garbage.bin").write_bytes(b"\x01garbage" * 10)
    status, err = call(utility.main, ["--context_binary", tmp_path / "garbage.bin",
                                      "--json_file", tmp_path / "o.json"], capsys)
    lines = err.strip().splitlines()
    assert status == 1 and len(lines) == 1, f"exit 1 and one stderr line: {err}"
    assert lines[0].startswith("qnnemu-context-binary-utility: error: systemContextGetBinaryInfo failed with "
                               f"error {Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY} "
                               "(QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY): [QNNEMU-binary-magic] "), \
        f"the call, its code and the library's reason on one line: {err}"


def test_library_messages_are_labelled_once(capsys):
    """What a library logs (our backend in-process: the Python logger, then the QnnLog callback)
    is printed once, labelled; an error held back is printed when the run goes on."""
    import logging

    from qnnemu.tools import run_main

    def body():
        logging.getLogger("qnnemu").warning("[QNNEMU-x] graphAddNode: tolerated")
        logging.getLogger("qnnemu.client").warning("qnnemu [QNNEMU-x] graphAddNode: tolerated\n")
        logging.getLogger("qnnemu.system_client").error("qnnemu a System library error")
        logging.getLogger("qnnemu.tools.net_run").info("the tool goes on")
        logging.getLogger("qnnemu").warning("no logger existed for this one")
        return 0

    assert run_main("t", body, "info") == 0, "the body's status"
    assert capsys.readouterr().err.splitlines() == [
        "t: backend warning: [QNNEMU-x] graphAddNode: tolerated",
        "t: system library error: a System library error",
        "t: info: the tool goes on",
        "t: backend warning: no logger existed for this one"], "each message once, in order, labelled"


@needs_ours
def test_success_summaries(workdir, tmp_path, capsys, monkeypatch):
    d = workdir["dir"]
    assert generator.main(["--model", str(d / "model.json"), "--output_dir", str(tmp_path / "out"),
                           "--binary_file", "m"]) == 0
    out = capsys.readouterr().out
    size = (tmp_path / "out" / "m.bin").stat().st_size
    assert out == f"qnnemu-context-binary-generator: wrote {tmp_path / 'out' / 'm.bin'} ({size} bytes, 2 graphs)\n", \
        f"the generator's one-line summary: {out!r}"
    argv = ["--retrieve_context", tmp_path / "out" / "m.bin", "--output_dir", tmp_path / "res",
            "--input_list", f"{d / 'conv_list.txt'},{d / 'add_list.txt'}"]
    assert net_run.main([str(a) for a in argv]) == 0
    res = tmp_path / "res"
    out = capsys.readouterr().out
    assert out == (f"qnnemu-net-run: ran 2 inferences of graph conv_fc: outputs in {res / 'conv_fc' / 'Result_0'} .. "
                   f"{res / 'conv_fc' / 'Result_1'} (1 file each); ran 1 inference of graph qadd: outputs in "
                   f"{res / 'qadd' / 'Result_0'} (1 file)\n"), f"net-run's one-line summary: {out!r}"
    monkeypatch.chdir(tmp_path)  # a relative --json_file is shown as given
    assert utility.main(["--context_binary", str(tmp_path / "out" / "m.bin"), "--json_file", "m.json"]) == 0
    out = capsys.readouterr().out
    assert out == ("qnnemu-context-binary-utility: wrote m.json "
                   f"(2 graphs of {tmp_path / 'out' / 'm.bin'}, {size} bytes)\n"), \
        f"the utility's one-line summary: {out!r}"


@needs_ours
def test_optrace_flow_net_run_to_profile_viewer(workdir, our_binary, tmp_path, capsys):
    """README's optrace flow: net-run --profiling_level detailed --profiling_option optrace writes
    qnn-profiling-data.json; qnnemu-profile-viewer turns it into a chrometrace and a QHAS report."""
    from qnnemu.tools import profile_viewer
    d = workdir["dir"]
    status, err = call(net_run.main, ["--retrieve_context", our_binary, "--output_dir", tmp_path,
                                      "--input_list", f"{d / 'conv_list.txt'},__",
                                      "--profiling_level", "detailed", "--profiling_option", "optrace"], capsys)
    assert status == 0, err
    log_file = tmp_path / net_run.PROFILE_FILE
    status = profile_viewer.main(["--input_log", str(log_file), "--output", str(tmp_path / "trace.json")])
    out = capsys.readouterr().out
    assert status == 0, out
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert out == (f"qnnemu-profile-viewer: wrote {tmp_path / 'trace.json'} (chrometrace, "
                   f"{len(trace['traceEvents'])} events), {tmp_path / 'trace_qnn_htp_analysis_summary.html'} "
                   f"(QHAS report) from 1 optrace document\n"), f"the viewer's one-line summary: {out!r}"
    assert any(e.get("ph") == "X" for e in trace["traceEvents"]), "the trace has duration events"
