"""The public benchmark set (benchmarks/model_set.py) through ONNX Runtime, back to back per model
variant: ONNX Runtime's CPU EP, ONNX Runtime's QNN EP on qnnemu (libQnnHtpEmu.so) and the same
EP on the vendor's x86-64 libQnnHtp.so (issue 13, items 3 and 4).

    python3 benchmarks/bench_models.py                           # every model in the cache
    python3 benchmarks/bench_models.py --models resnet18,bert --variants float,u8 --budget 5
    python3 benchmarks/bench_models.py --top-ops 10 --json out.json
    python3 benchmarks/bench_models.py --no-vendor --no-overheads

Per model variant and backend, in a subprocess of its own (so that ``ru_maxrss`` is that
backend's peak RSS): session creation (for the QNN EP: graph composition + graphFinalize),
one untimed warm-up inference, then timed inferences until ``--budget`` seconds are spent
(at least ``--min-runs``, at most ``--max-runs``); the median is reported. A backend whose
worker runs longer than ``--timeout`` s (``--vendor-timeout`` for the vendor's) is reported as
``timeout``; the vendor is skipped when onnxruntime_qnn's libQnnHtp.so is absent.

The QNN sessions use the provider options of tests/test_onnxruntime_models.py (float graphs in
float32, graph I/O quantization inside the QNN graph, the vendor's default soc_model; more with
``--qnn-option KEY=VALUE``, shown after the variant in the table) and first
try ``session.disable_cpu_ep_fallback=1``. When the EP refuses that, the session is created again
with the CPU fallback allowed and ORT's profiler records one inference to count which nodes
ran on the CPU EP; the ``QNN nodes`` column says so (``all 52`` vs ``41/52, 3 parts``): a
ratio over a model mostly on the CPU EP measures the CPU EP.

``--top-ops N`` times every plan step of qnnemu's graphs over a few more inferences with the
per-step observer that qnnemu's own QNN profiling hooks into graphExecute (``Graph.execute``'s
``observer(step, seconds)``; the DETAILED profile events themselves carry the modelled HTP
cycles of each step, not host time) and prints the N slowest ops with their op types, and the
time per op type.

Overheads (``--no-overheads`` skips them): the fixed cost of one graphExecute through the C ABI
on a graph of one ElementWiseAdd on 1x4 float32 (raw cffi call of the function table's
graphExecute with pre-built tensors, and through ``qnnemu.client.Graph.execute``), on qnnemu and
on the vendor; the finalize time of ResNet-50 is the QNN-EP session creation of the
``resnet50`` rows of the table.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import model_set  # noqa: E402  (no torch at import time)
from vendor_env import vendor_dir, worker_env  # noqa: E402

BACKENDS = ("cpu", "qnnemu", "vendor")
# As tests/test_onnxruntime_models.py: float graphs in float32 (the EP would ask for fp16),
# graph-input Quantize / output Dequantize inside the QNN graph.
PROVIDER_OPTIONS = {"enable_htp_fp16_precision": "0", "offload_graph_io_quantization": "0"}


# ------------------------------------------------------------------------------ worker side
def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _qnn_session(path: str, backend: str, fallback: bool, profile_prefix: str | None):
    import onnxruntime as ort

    import qnnemu
    import qnnemu.onnxruntime as qort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if backend == "qnnemu":
        lib = qnnemu.backend_library_path()
    else:
        lib = str(vendor_dir() / "libQnnHtp.so")
    opts = {**PROVIDER_OPTIONS, **json.loads(os.environ.get("QNNEMU_BENCH_QNN_OPTIONS", "{}")), "backend_path": lib}
    if backend == "qnnemu":
        return qort.session(path, provider_options=opts, session_options=so, disable_cpu_fallback=not fallback)
    device = qort.qnn_device()  # the vendor: the same EP, no qnnemu rpcmem preload
    if not fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([device], opts)
    sess = ort.InferenceSession(path, so)
    if not fallback:
        sess.disable_fallback()
    return sess


def placement(profile_json: str) -> dict:
    """Nodes per execution provider in one profiled inference (ORT's profiler: ``Node``
    events named ``<node>_kernel_time`` with ``args.provider``)."""
    events = json.loads(Path(profile_json).read_text())
    per: dict[str, set] = {}
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            provider = e.get("args", {}).get("provider", "?")
            per.setdefault(provider, set()).add(e["name"][: -len("_kernel_time")])
    return {p: sorted(n) for p, n in per.items()}


class StepTimer:
    """Host seconds per qnnemu plan step, through ``Graph.execute``'s ``observer`` (the hook
    qnnemu's profiling uses), summed over the inferences run while installed."""

    def __init__(self):
        self.total: dict[tuple[str, str], float] = {}
        self.calls = 0
        self._orig = None

    def install(self) -> None:
        from qnnemu.core import graph as core_graph
        # Timed executes must reach Graph.execute: graphExecute's C fast path is withdrawn and
        # not offered again while the timer is installed.
        self._fast_env = os.environ.get("QNNEMU_FAST_EXECUTE")
        os.environ["QNNEMU_FAST_EXECUTE"] = "0"
        try:
            from qnnemu.abi import fast_execute
            fast_execute.clear()
        except Exception:   # noqa: BLE001 - the backend library is not loaded in this process
            pass
        orig = self._orig = core_graph.Graph.execute
        timer = self

        def execute(graph, feeds, wanted, observer=None, batch=1):
            def observe(step, seconds):
                node = step.node
                key = (getattr(node, "name", "?"), getattr(node, "op_type", type(step.impl).__name__))
                timer.total[key] = timer.total.get(key, 0.0) + seconds
                if observer is not None:
                    observer(step, seconds)
            timer.calls += 1
            return orig(graph, feeds, wanted, observe, batch)

        core_graph.Graph.execute = execute

    def uninstall(self) -> None:
        from qnnemu.core import graph as core_graph
        if self._orig is not None:
            core_graph.Graph.execute = self._orig
        if getattr(self, "_fast_env", None) is None:
            os.environ.pop("QNNEMU_FAST_EXECUTE", None)
        else:
            os.environ["QNNEMU_FAST_EXECUTE"] = self._fast_env

    def top(self, runs: int, n: int) -> dict:
        per_op = sorted(self.total.items(), key=lambda kv: -kv[1])
        by_type: dict[str, list] = {}
        for (_, op_type), sec in self.total.items():
            acc = by_type.setdefault(op_type, [0.0, 0])
            acc[0] += sec
            acc[1] += 1
        runs = max(runs, 1)
        return {"runs": runs, "steps": len(self.total),
                "step_ms": 1e3 * sum(self.total.values()) / runs,
                "ops": [{"node": k[0], "op_type": k[1], "ms": 1e3 * s / runs} for k, s in per_op[:n]],
                "op_types": [{"op_type": t, "steps": c, "ms": 1e3 * s / runs}
                             for t, (s, c) in sorted(by_type.items(), key=lambda kv: -kv[1][0])]}


def engine_summary() -> dict:
    """The C engine's programs of the qnnemu graphs this process finalized (qnnemu/core/engine):
    nodes, nodes in C, Python fallback steps by op type and why, arena bytes."""
    from qnnemu.core.graph import Graph
    from qnnemu.core.handles import HANDLES
    total: dict = {"graphs": 0, "nodes": 0, "c_nodes": 0, "fallbacks": 0, "fallback_ops": {},
                   "reasons": [], "arena_mib": 0.0, "no_engine": 0}
    for graph in HANDLES.live(Graph):
        engine = getattr(getattr(graph, "plan", None), "engine", None)
        if engine is None:
            total["no_engine"] += 1
            continue
        summary = engine.summary()
        total["graphs"] += 1
        for key in ("nodes", "c_nodes", "fallbacks"):
            total[key] += summary[key]
        for op, n in summary["fallback_ops"].items():
            total["fallback_ops"][op] = total["fallback_ops"].get(op, 0) + n
        total["reasons"] += [f"{name} ({op}): {why}" for name, op, why in engine.fallbacks][:50]
        total["arena_mib"] += summary["arena_bytes"] / 2**20
    try:   # graphs graphExecute's C fast path serves (after their first execute)
        from qnnemu.abi import fast_execute
        total["fast_path_graphs"] = fast_execute.registered()
    except Exception:   # noqa: BLE001 - the backend library is not loaded in this process
        total["fast_path_graphs"] = None
    return total


def measure(path: str, backend: str, budget: float, min_runs: int, max_runs: int, top_ops: int) -> dict:
    """One backend on one model, in this process: see the module docstring."""
    import onnx
    import onnxruntime as ort
    res: dict = {"backend": backend, "rss_base_mib": _rss_mib()}
    model = onnx.load(path)
    res["model_nodes"] = n_nodes = len(model.graph.node)
    res["weights_mib"] = sum(int(np.prod(t.dims)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
                             for t in model.graph.initializer) / 2**20
    del model
    feeds = model_set.random_feeds(Path(path))
    t0 = time.perf_counter()
    profiled = None
    if backend == "cpu":
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    else:
        try:
            sess = _qnn_session(path, backend, fallback=False, profile_prefix=None)
            res["coverage"] = {"all_on_qnn": True, "qnn_nodes": n_nodes, "cpu_nodes": 0}
        except Exception as e:  # noqa: BLE001 - the EP refused part of the model: measure coverage
            res["full_offload_error"] = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
            prefix = tempfile.mkdtemp(prefix="qnnemu-bench-") + "/ort"
            t0 = time.perf_counter()
            sess = _qnn_session(path, backend, fallback=True, profile_prefix=prefix)
            profiled = True
    res["create_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    sess.run(None, feeds)
    res["first_run_s"] = time.perf_counter() - t1
    if profiled:
        per = placement(sess.end_profiling())
        cpu = per.get("CPUExecutionProvider", [])
        qnn = [n for p, ns in per.items() if p != "CPUExecutionProvider" for n in ns]
        res["coverage"] = {"all_on_qnn": False, "partitions": len(qnn), "cpu_nodes": len(cpu),
                           "qnn_nodes": max(n_nodes - len(cpu), 0), "cpu_ops": cpu[:20]}
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < budget):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
        if len(times) >= 1 and times[0] > budget:  # one run alone exceeds the budget
            break
    res["runs"] = len(times)
    if backend == "qnnemu":
        res["engine"] = engine_summary()
    res["median_ms"] = 1e3 * statistics.median(times)
    res["min_ms"] = 1e3 * min(times)
    if backend == "qnnemu" and top_ops > 0:
        timer = StepTimer()
        timer.install()
        k = max(1, min(5, len(times)))
        t = time.perf_counter()
        try:
            for _ in range(k):
                sess.run(None, feeds)
        finally:
            timer.uninstall()
        wall_ms = 1e3 * (time.perf_counter() - t) / k
        res["top_ops"] = {**timer.top(k, top_ops), "wall_ms": wall_ms} if timer.total else {
            "error": "no plan step was observed (the backend's interpreter is not this process's)"}
    res["rss_peak_mib"] = _rss_mib()
    return res


def overhead_worker(backend: str, seconds: float) -> dict:
    """graphExecute of a 1-node graph (ElementWiseAdd, 1x4 float32) through the C ABI."""
    from qnnemu import client
    from qnnemu.client import ffi
    lib = None if backend == "qnnemu" else str(vendor_dir() / "libQnnHtp.so")
    be = client.Backend(lib, log_level=None)
    ctx = be.context()
    g = ctx.graph("tiny")
    x = g.input("x", (1, 4), np.float32)
    w = g.static("w", np.ones((1, 4), np.float32))
    g.node("ElementWiseAdd", [x, w], [("y", (1, 4), np.float32)], app_read=True)
    t0 = time.perf_counter()
    g.finalize()
    finalize_s = time.perf_counter() - t0
    feed = np.arange(4, dtype=np.float32).reshape(1, 4)
    out = g.execute({"x": feed})["y"]
    assert np.allclose(out, feed + 1), f"tiny graph computes x + 1 on {backend}: {out}"

    def median_us(fn) -> tuple[float, int]:
        times = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 10:
            t = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t)
        return statistics.median(times) / 1e3, len(times)

    # raw: the function table's graphExecute with tensors built once (no client marshalling)
    keep = []
    cin = ffi.new("Qnn_Tensor_t[]", 1)
    cin[0] = x.struct[0]
    client._set_buffer(cin[0], ffi.from_buffer(feed), feed.nbytes, keep)
    y = np.zeros((1, 4), np.float32)
    cout = ffi.new("Qnn_Tensor_t[]", 1)
    cout[0] = g.outputs[0].struct[0]
    client._set_buffer(cout[0], ffi.from_buffer(y), y.nbytes, keep)
    fn = be.fn.graphExecute

    def raw():
        rc = fn(g.handle, cin, 1, cout, 1, ffi.NULL, ffi.NULL)
        if rc != 0:
            raise RuntimeError(f"graphExecute returned {rc}")

    raw_us, raw_n = median_us(raw)
    client_us, client_n = median_us(lambda: g.execute({"x": feed}))
    be.free()
    return {"backend": backend, "raw_us": raw_us, "raw_runs": raw_n, "client_us": client_us,
            "client_runs": client_n, "finalize_ms": finalize_s * 1e3}


# ------------------------------------------------------------------------------ driver side
def run_worker(args: list[str], backend: str, timeout: float) -> dict:
    """Runs this script as a worker subprocess; its result is a JSON file."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker-out", str(out), *args]
        try:
            proc = subprocess.run(cmd, env=worker_env(backend), capture_output=True, check=False,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"backend": backend, "error": f"timeout (> {timeout:.0f} s)"}
        if out.exists():
            return json.loads(out.read_text())
        lines = [ln.strip() for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln]
        last = (errors or lines or ["(no output)"])[-1]
        return {"backend": backend, "error": f"worker exit {proc.returncode}: {last[:700]}"}


def bench_model(path: Path, backends=BACKENDS, budget: float = 5.0, min_runs: int = 3, max_runs: int = 1000,
                top_ops: int = 0, timeout: float = 900.0, vendor_timeout: float = 300.0) -> dict:
    """The backends on one model file, back to back, each in its own subprocess."""
    results = {}
    for backend in backends:
        if backend == "vendor" and vendor_dir() is None:
            results[backend] = {"backend": backend, "error": "absent (onnxruntime_qnn has no libQnnHtp.so)"}
            continue
        results[backend] = run_worker(
            ["--worker", backend, "--worker-model", str(path), "--budget", str(budget), "--min-runs", str(min_runs),
             "--max-runs", str(max_runs), "--top-ops", str(top_ops)],
            backend, vendor_timeout if backend == "vendor" else timeout)
    return results


def _ms(r: dict | None) -> float | None:
    return r.get("median_ms") if r else None


def _fmt(v, spec: str, missing: str = "-") -> str:
    return missing if v is None else format(v, spec)


def _coverage(r: dict | None) -> str:
    c = (r or {}).get("coverage")
    if not c:
        return "-"
    if c["all_on_qnn"]:
        return f"all {c['qnn_nodes']}"
    return f"{c['qnn_nodes']}/{c['qnn_nodes'] + c['cpu_nodes']}, {c['partitions']} parts"


def _fallbacks(r: dict | None) -> str:
    """The qnnemu worker's Python fallback steps: "0", "n (op k, ...)", or "-" (no engine)."""
    e = (r or {}).get("engine")
    if not e or not e.get("graphs"):
        return "-"
    if not e["fallbacks"]:
        return "0, C fast path" if e.get("fast_path_graphs") else "0"
    ops = sorted(e["fallback_ops"].items(), key=lambda kv: -kv[1])
    return f"{e['fallbacks']} ({', '.join(f'{op} {n}' for op, n in ops[:4])}{', ...' if len(ops) > 4 else ''})"


def table_rows(rows: list[dict]) -> list[list[str]]:
    """rows: {"model", "variant", "results": {backend: result}} -> the printed table's cells."""
    head = ["model", "variant", "CPU ms", "qnnemu ms", "vendor ms", "qnnemu/CPU", "vendor/qnnemu",
            "qnnemu create s", "vendor create s", "peak RSS MiB cpu/qnnemu/vendor", "QNN nodes qnnemu",
            "QNN nodes vendor", "runs cpu/qnnemu/vendor", "qnnemu fallbacks"]
    out = [head]
    for row in rows:
        r = row["results"]
        cpu, ours, ven = (r.get(b) or {} for b in BACKENDS)

        def cell(x: dict, key="median_ms", spec=".2f") -> str:
            if "error" in x:
                return "timeout" if x["error"].startswith("timeout") else (
                    "absent" if x["error"].startswith("absent") else "error")
            return _fmt(x.get(key), spec)

        ratio_c = ours["median_ms"] / cpu["median_ms"] if _ms(ours) and _ms(cpu) else None
        ratio_v = ven["median_ms"] / ours["median_ms"] if _ms(ours) and _ms(ven) else None
        out.append([row["model"], row["variant"], cell(cpu), cell(ours), cell(ven),
                    _fmt(ratio_c, ".1f") + ("x" if ratio_c else ""), _fmt(ratio_v, ".1f") + ("x" if ratio_v else ""),
                    cell(ours, "create_s", ".2f"), cell(ven, "create_s", ".2f"),
                    "/".join(_fmt(x.get("rss_peak_mib"), ".0f") for x in (cpu, ours, ven)),
                    _coverage(ours), _coverage(ven),
                    "/".join(str(x.get("runs", "-")) for x in (cpu, ours, ven)),
                    _fallbacks(ours)])
    return out


def format_table(rows: list[dict], markdown: bool = False) -> str:
    cells = table_rows(rows)
    if markdown:
        lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0])]
        lines += ["| " + " | ".join(c) + " |" for c in cells[1:]]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in cells)


FALLBACK_DETAILS = False   # --fallbacks


def format_details(rows: list[dict]) -> str:
    """Errors, CPU-EP placements and the --top-ops listing."""
    lines = []
    for row in rows:
        for backend, r in row["results"].items():
            tag = f"{row['model']}.{row['variant']} {backend}"
            if "error" in r:
                lines.append(f"{tag}: {r['error']}")
            if r.get("full_offload_error"):
                lines.append(f"{tag}: not every node on QNN: {r['full_offload_error']}")
            cov = r.get("coverage") or {}
            if cov.get("cpu_ops"):
                lines.append(f"{tag}: on the CPU EP: {', '.join(cov['cpu_ops'])}")
            eng = r.get("engine") or {}
            if eng.get("reasons") and FALLBACK_DETAILS:
                lines.append(f"{tag}: {eng['fallbacks']} Python fallback steps:")
                lines += [f"    {why}" for why in eng["reasons"]]
            top = r.get("top_ops")
            if top and "error" in top:
                lines.append(f"{tag}: top ops: {top['error']}")
            elif top:
                lines.append(f"{tag}: slowest ops (mean of {top['runs']} inferences; {top['steps']} steps, "
                             f"{top['step_ms']:.2f} ms in steps of {top['wall_ms']:.2f} ms per timed inference):")
                for op in top["ops"]:
                    lines.append(f"    {op['ms']:9.3f} ms  {op['op_type']:24} {op['node']}")
                lines.append("  per op type: " + ", ".join(f"{t['op_type']} {t['ms']:.2f} ms ({t['steps']})"
                                                           for t in top["op_types"][:12]))
    return "\n".join(lines)


def format_overheads(over: dict, rows: list[dict]) -> str:
    lines = ["overheads:"]
    for backend, r in over.items():
        if "error" in r:
            lines.append(f"  graphExecute of 1 tiny op, {backend}: {r['error']}")
        else:
            lines.append(f"  graphExecute of 1 tiny op, {backend}: {r['raw_us']:.1f} us raw C ABI call "
                         f"(median of {r['raw_runs']}), {r['client_us']:.1f} us via qnnemu.client; "
                         f"its graphFinalize {r['finalize_ms']:.2f} ms")
    r50 = [row for row in rows if row["model"] == "resnet50"]
    if not r50:
        lines.append("  ResNet-50 finalize: not measured (add resnet50 to --models)")
    for row in r50:
        o, v = row["results"].get("qnnemu", {}), row["results"].get("vendor", {})
        lines.append(f"  ResNet-50 {row['variant']} session creation (graphFinalize included): qnnemu "
                     f"{_fmt(o.get('create_s'), '.2f', o.get('error', '-'))} s, vendor "
                     f"{_fmt(v.get('create_s'), '.2f', v.get('error', '-'))} s")
    return "\n".join(lines)


def precompile_qnnemu() -> None:
    """Byte-compiles the qnnemu package once, as installing a wheel does: a session's creation
    time should not include compiling qnnemu's sources, which an environment with
    PYTHONDONTWRITEBYTECODE=1 (this project's machines) otherwise repeats in every worker."""
    import compileall

    import qnnemu
    compileall.compile_dir(str(Path(qnnemu.__file__).parent), quiet=2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all", help="comma-separated model names (default: all)")
    ap.add_argument("--variants", default="all", help="float,u8,u16 (default: all)")
    ap.add_argument("--cache", type=Path, default=model_set.DEFAULT_CACHE)
    ap.add_argument("--budget", type=float, default=5.0, help="seconds of timed runs per backend (default 5)")
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--max-runs", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=900.0, help="limit per CPU/qnnemu worker, s")
    ap.add_argument("--vendor-timeout", type=float, default=300.0, help="limit per vendor worker, s")
    ap.add_argument("--no-vendor", action="store_true")
    ap.add_argument("--no-overheads", action="store_true")
    ap.add_argument("--fallbacks", action="store_true",
                    help="list qnnemu's Python fallback steps (node, op type, why) per model")
    ap.add_argument("--top-ops", type=int, default=0, metavar="N", help="print qnnemu's N slowest ops per model")
    ap.add_argument("--qnn-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a QNN EP provider option for both QNN backends, e.g. soc_model=43 "
                         "enable_htp_fp16_precision=1 (HTP v68 has no float32 Gelu)")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--report", type=Path, nargs="+", metavar="JSON",
                    help="measure nothing: print the tables of these --json files (rows in order)")
    # worker mode (internal)
    ap.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    ap.add_argument("--worker-model", help=argparse.SUPPRESS)
    ap.add_argument("--worker-overhead", choices=("qnnemu", "vendor"), help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global FALLBACK_DETAILS
    FALLBACK_DETAILS = args.fallbacks

    if args.worker or args.worker_overhead:
        if args.worker_overhead:
            res = overhead_worker(args.worker_overhead, seconds=min(args.budget, 3.0))
        else:
            res = measure(args.worker_model, args.worker, args.budget, args.min_runs, args.max_runs, args.top_ops)
        args.worker_out.write_text(json.dumps(res))
        return 0

    if args.report:
        rows, over = [], {}
        for f in args.report:
            data = json.loads(f.read_text())
            rows += data.get("rows", [])
            over.update(data.get("overheads") or {})
        print(format_table(rows, args.markdown))
        for part in (format_details(rows), format_overheads(over, rows) if over else ""):
            if part:
                print()
                print(part)
        return 0

    backends = [b for b in BACKENDS if not (b == "vendor" and args.no_vendor)]
    precompile_qnnemu()
    from qnnemu.core.engine import isa
    machine = {"cpu_flags": isa.cpu_flags(), "isa_paths": isa.paths()}
    print(f"# ISA paths: {', '.join(f'{k}: {v}' for k, v in machine['isa_paths'].items())} "
          f"(CPU flags: {' '.join(machine['cpu_flags'])})", file=sys.stderr)
    extra = dict(o.split("=", 1) for o in args.qnn_option)
    os.environ["QNNEMU_BENCH_QNN_OPTIONS"] = json.dumps(extra)  # inherited by the workers
    suffix = "".join(f" {k}={v}" for k, v in extra.items())
    names = model_set.parse_list(args.models, model_set.SPECS, "model")
    variants = model_set.parse_list(args.variants, model_set.VARIANTS, "variant")
    rows = []
    for name in names:
        for variant in variants:
            path = model_set.model_path(args.cache, name, variant)
            if not path.exists():
                if args.models != "all":
                    print(f"{name}.{variant}: not in {args.cache} (benchmarks/model_set.py builds it)",
                          file=sys.stderr)
                continue
            print(f"# {name}.{variant} ...", file=sys.stderr, flush=True)
            res = bench_model(path, backends, args.budget, args.min_runs, args.max_runs, args.top_ops,
                              args.timeout, args.vendor_timeout)
            rows.append({"model": name, "variant": variant + suffix, "results": res})
            if args.json:  # kept up to date: a long run interrupted still leaves its rows
                args.json.write_text(json.dumps({"rows": rows, "machine": machine}, indent=1))
    over = {}
    if not args.no_overheads:
        for backend in [b for b in backends if b != "cpu"]:
            if backend == "vendor" and vendor_dir() is None:
                continue
            over[backend] = run_worker(["--worker-overhead", backend, "--budget", str(args.budget)], backend,
                                       args.vendor_timeout if backend == "vendor" else args.timeout)
    print(format_table(rows, args.markdown))
    details = format_details(rows)
    if details:
        print()
        print(details)
    if over:
        print()
        print(format_overheads(over, rows))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "overheads": over, "machine": machine}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
