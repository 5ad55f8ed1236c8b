"""Inference time of a small float CNN through ONNX Runtime's QNN EP on qnnemu, on the vendor's
x86 libQnnHtp.so, and on ORT's CPU EP — measured in one run, printed as ratios.

    python benchmarks/bench_ort_small_cnn.py [--runs 50]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import onnxruntime_qnn
from onnx import helper

import qnnemu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_saver_replay import cnn_model


def session(path: str, backend: str | None) -> ort.InferenceSession:
    if backend is None:
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    dev = next(d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([dev], {"backend_path": backend})
    return ort.InferenceSession(path, so)


def best_time(sess, feeds, runs: int) -> float:
    sess.run(None, feeds)  # warm-up (finalize, caches)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    vendor = str(Path(onnxruntime_qnn.__file__).parent / "libQnnHtp.so")
    with tempfile.TemporaryDirectory() as tmp:
        model = helper.make_model(cnn_model(), opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path = str(Path(tmp) / "cnn.onnx")
        onnx.save(model, path)
        feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
        t = {name: best_time(session(path, be), feeds, args.runs)
             for name, be in (("cpu_ep", None), ("qnnemu", qnnemu.backend_library_path()), ("vendor_htp", vendor))}
    for name, sec in t.items():
        print(f"{name:>10}: {sec * 1e3:8.3f} ms median of {args.runs}")
    print(f"qnnemu / cpu_ep     = {t['qnnemu'] / t['cpu_ep']:.1f}x")
    print(f"vendor_htp / qnnemu = {t['vendor_htp'] / t['qnnemu']:.1f}x")


if __name__ == "__main__":
    main()
