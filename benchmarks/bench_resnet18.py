"""ResNet-18-class inference (1x3x224x224) through ONNX Runtime's QNN EP on the vendor's x86
libQnnHtp.so, on qnnemu, and on ORT's CPU EP, in one run: the float model and its uint8 QDQ
version (quantize_static, QUInt8 activations and weights), both built at run time from
tests/models.py (random He-scaled weights, BatchNormalization present).

    python benchmarks/bench_resnet18.py [--runs 20] [--vendor-runs 3] [--models float,qdq]

Prints per-inference median latencies (after --warmup runs) and the ratios vendor/ours and
ours/CPU EP, plus the agreement of the outputs (float: max |diff| vs the CPU EP; QDQ: max |diff|
in output LSBs vs the vendor). The floor qnnemu must reach: ≥ 30x faster than the vendor on
both models (``--check`` exits 1 when it does not).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import onnxruntime_qnn

import qnnemu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import models
from vendor import vendor_library

FLOOR = 30.0  # qnnemu must be at least this many times faster than the vendor's backend
# The provider options of tests/test_onnxruntime_models.py, on both QNN backends.
PROVIDER_OPTIONS = {"enable_htp_fp16_precision": "0", "offload_graph_io_quantization": "0"}


def qnn_device():
    try:
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    except Exception as e:  # already registered
        if "already" not in str(e).lower():
            raise
    return next(d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider")


def session(path: Path, backend: str | None, device, options: dict) -> ort.InferenceSession:
    if backend is None:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([device], {"backend_path": backend, **options})
    sess = ort.InferenceSession(str(path), so)
    sess.disable_fallback()
    return sess


def timed(sess, feeds, warmup: int, runs: int) -> tuple[float, list[np.ndarray]]:
    for _ in range(warmup):
        out = sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="timed runs on qnnemu and the CPU EP")
    ap.add_argument("--vendor-runs", type=int, default=3, help="timed runs on the vendor (seconds each)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before timing, every backend")
    ap.add_argument("--models", default="float,qdq", help="comma-separated subset of float,qdq")
    ap.add_argument("--no-vendor", action="store_true", help="skip the vendor's libQnnHtp.so")
    ap.add_argument("--fp16", action="store_true",
                    help="let the QNN EP ask for fp16 precision on float graphs (its default)")
    ap.add_argument("--check", action="store_true", help=f"exit 1 unless qnnemu >= {FLOOR:g}x the vendor")
    args = ap.parse_args()

    options = dict(PROVIDER_OPTIONS, enable_htp_fp16_precision="1" if args.fp16 else "0")
    vendor = None if args.no_vendor else vendor_library()
    if vendor is None and not args.no_vendor:
        print("vendor libQnnHtp.so not found (onnxruntime_qnn wheel): timing qnnemu and the CPU EP only")
    device = qnn_device()
    backends = [("cpu_ep", None, args.runs), ("qnnemu", qnnemu.backend_library_path(), args.runs)]
    if vendor is not None:
        backends.append(("vendor_htp", str(vendor), args.vendor_runs))

    # Sessions stay alive to the end: ORT unloads a backend library with its last session, and
    # loading the other backend in between would bring ours back at another address.
    keep = []
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        float_model = models.resnet18()
        float_path = Path(tmp) / "resnet18.onnx"
        onnx.save(float_model, float_path)
        paths = {"float": float_path}
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        if "qdq" in wanted:
            paths["qdq"] = models.quantize(float_model, Path(tmp) / "resnet18.a8w8.onnx",
                                           models.QDQ_CONFIGS["a8w8"])
        print(f"built ResNet-18 float{' + uint8 QDQ' if 'qdq' in paths else ''} "
              f"in {time.perf_counter() - t0:.1f} s; options {options}")
        feeds = models.random_feeds(float_model)

        for kind in wanted:
            path = paths[kind]
            scales = models.output_scales(onnx.load(str(path))) if kind == "qdq" else {}
            scale = next(iter(scales.values()), None)
            med, outs = {}, {}
            print(f"\n== ResNet-18 {kind} ({path.name})")
            for name, backend, runs in backends:
                t1 = time.perf_counter()
                try:
                    sess = session(path, backend, device, options)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"{name:>11}: session creation failed: {str(e).strip()[:300]}")
                    continue
                keep.append(sess)
                created = time.perf_counter() - t1
                try:
                    med[name], out = timed(sess, feeds, args.warmup, runs)
                except Exception as e:  # noqa: BLE001
                    print(f"{name:>11}: run failed: {str(e).strip()[:300]}")
                    continue
                outs[name] = out[0]
                print(f"{name:>11}: {med[name] * 1e3:10.2f} ms median of {runs} "
                      f"(session creation {created:.2f} s)")
            if "qnnemu" in med and "cpu_ep" in med:
                print(f"qnnemu / cpu_ep     = {med['qnnemu'] / med['cpu_ep']:8.2f}x")
            if "qnnemu" in med and "vendor_htp" in med:
                speedup = med["vendor_htp"] / med["qnnemu"]
                verdict = "meets" if speedup >= FLOOR else "BELOW"
                print(f"vendor_htp / qnnemu = {speedup:8.2f}x  ({verdict} the {FLOOR:g}x floor)")
                ok &= speedup >= FLOOR
            elif vendor is not None:
                ok = False
            if "qnnemu" in outs and kind == "float" and "cpu_ep" in outs:
                d = float(np.max(np.abs(outs["qnnemu"] - outs["cpu_ep"])))
                print(f"max |qnnemu - cpu_ep| = {d:.3g} (max |cpu_ep| {np.max(np.abs(outs['cpu_ep'])):.3g})")
            if kind == "qdq" and scale:
                for a, b in (("qnnemu", "vendor_htp"), ("qnnemu", "cpu_ep"), ("cpu_ep", "vendor_htp")):
                    if a in outs and b in outs:
                        d = np.rint(np.abs(outs[a].astype(np.float64) - outs[b]) / scale)
                        print(f"{a} vs {b}: max {d.max():.0f} LSB, "
                              f"{100 * np.mean(d <= 1):.1f}% within 1 LSB")
    return 0 if (ok or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main())
