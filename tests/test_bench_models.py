"""benchmarks/bench_models.py (issue 13, the public benchmark set): its measuring and table code
on a small model built with onnx.helper (no torch), one variant, a short budget; the CPU EP and
the QNN EP on qnnemu each in a worker subprocess, as the benchmark runs them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))
import bench_models  # noqa: E402


def small_cnn(path: Path) -> Path:
    """Conv -> Relu -> GlobalAveragePool on 1x3x16x16, opset 17, seeded random weights."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_bench_model_table_cpu_and_qnnemu(tmp_path):
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    if not Path(qnnemu.backend_library_path()).exists():
        pytest.skip("libQnnHtpEmu.so is not built")
    model = small_cnn(tmp_path / "small_cnn.float.onnx")
    results = bench_models.bench_model(model, backends=("cpu", "qnnemu"), budget=0.2, min_runs=3,
                                       max_runs=50, top_ops=2, timeout=120)
    for backend in ("cpu", "qnnemu"):
        r = results[backend]
        assert "error" not in r, f"{backend} worker measured the model: {r.get('error')}"
        assert r["runs"] >= 3 and r["median_ms"] > 0, f"{backend}: >= min_runs timed runs, a positive median: {r}"
        assert r["rss_peak_mib"] >= r["rss_base_mib"] > 0, f"{backend}: peak RSS from its own process: {r}"
        assert r["model_nodes"] == 3, f"{backend}: the model's 3 nodes counted: {r['model_nodes']}"
    cov = results["qnnemu"]["coverage"]
    assert cov == {"all_on_qnn": True, "qnn_nodes": 3, "cpu_nodes": 0}, \
        f"every node on QNN with the CPU fallback disabled: {cov}"
    top = results["qnnemu"]["top_ops"]
    assert "error" not in top, f"qnnemu's plan steps observed in the worker: {top}"
    assert len(top["ops"]) == 2 and top["ops"][0]["ms"] >= top["ops"][1]["ms"] > 0, \
        f"--top-ops 2: the two slowest steps, slowest first: {top['ops']}"
    types = {t["op_type"] for t in top["op_types"]}
    assert "Conv2d" in types, f"per-op-type totals name the QNN op types: {types}"

    rows = [{"model": "small_cnn", "variant": "float",
             "results": {**results, "vendor": {"backend": "vendor", "error": "absent (test)"}}}]
    cells = bench_models.table_rows(rows)
    assert len(cells) == 2 and len(cells[1]) == len(cells[0]), f"a header and one row of equal width: {cells}"
    row = dict(zip(cells[0], cells[1]))
    ratio = results["qnnemu"]["median_ms"] / results["cpu"]["median_ms"]
    assert row["qnnemu/CPU"] == f"{ratio:.1f}x", f"qnnemu/CPU is the ratio of the medians: {row}"
    assert row["vendor ms"] == "absent" and row["vendor/qnnemu"] == "-", f"an absent vendor is said so: {row}"
    assert row["QNN nodes qnnemu"] == "all 3", f"coverage column: {row}"
    text = bench_models.format_table(rows)
    assert "small_cnn" in text and "qnnemu/CPU" in text, f"printed table:\n{text}"
    details = bench_models.format_details(rows)
    assert "Conv2d" in details and "slowest ops" in details, f"--top-ops listing:\n{details}"
    json.dumps(rows)  # --json writes these rows


def test_placement_counts_nodes_per_provider(tmp_path):
    """The CPU-fallback coverage count: ORT profiler Node events per provider, each node once."""
    events = [{"cat": "Session", "name": "model_run"},
              {"cat": "Node", "name": "QNN_123_0_kernel_time", "args": {"provider": "QNNExecutionProvider"}},
              {"cat": "Node", "name": "gather_kernel_time", "args": {"provider": "CPUExecutionProvider"}},
              {"cat": "Node", "name": "gather_fence_before", "args": {"provider": "CPUExecutionProvider"}},
              {"cat": "Node", "name": "cast_kernel_time", "args": {"provider": "CPUExecutionProvider"}},
              {"cat": "Node", "name": "cast_kernel_time", "args": {"provider": "CPUExecutionProvider"}}]
    p = tmp_path / "prof.json"
    p.write_text(json.dumps(events))
    assert bench_models.placement(str(p)) == {"QNNExecutionProvider": ["QNN_123_0"],
                                              "CPUExecutionProvider": ["cast", "gather"]}, \
        "kernel_time events only, distinct node names per provider"
