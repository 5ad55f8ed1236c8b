"""ONNX Runtime session creation through the QNN EP, qnnemu against the vendor's libQnnHtp.so,
interleaved (issue 13 item 4: graphFinalize of a ResNet-50-size graph below the vendor's
session-creation time).

    python3 benchmarks/bench_create.py --models resnet50 --variants float,u8,u16 --rounds 3
    python3 benchmarks/bench_create.py --models resnet18 --variants u8 --no-vendor --warm 3
    python3 benchmarks/bench_create.py --baseline /tmp/old-checkout     # an older qnnemu as well

A session creation through the QNN EP is ONNX Runtime's own work (model load, graph
partitioning, the EP's ONNX -> QNN translation) plus the backend's: tensorCreateGraphTensor,
backendValidateOpConfig, graphAddNode and graphFinalize through the QNN C ABI.

Each round starts one fresh worker process per backend, one after the other (the order
alternates between rounds, so a slow phase of a shared machine hits both): the worker creates
the session once *cold* (the first creation in a process, as an application or
``bench_models.py`` sees it: it includes loading the backend library), runs the first inference
(qnnemu: what it does at session creation must not move to it), then creates it ``--warm`` more
times. Reported per backend, medians over the rounds: wall seconds of the cold creation, median
wall of the warm ones, process CPU seconds of the cold creation, the first inference's wall time
(not for the vendor), and for qnnemu the wall time spent inside its ABI entries during the cold
creation (per entry with ``--entries``): what is left of the creation is ONNX Runtime's and the
EP's own work, which the vendor pays too.

``--baseline DIR`` adds a third backend, ``baseline``: qnnemu imported from another checkout
(its Python package and built libraries), interleaved with the others in every round, so a
change is measured against the code before it under the same load.

The worker times qnnemu's entries by wrapping each table slot's Python function before the
library is installed (``qnnemu.abi.framework.Library.install``), one ``perf_counter`` pair per
call; the vendor's entries run in C and are not split.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vendor_env import vendor_dir, worker_env  # noqa: E402

CACHE = Path(os.environ.get("QNNEMU_BENCH_CACHE", Path.home() / ".cache" / "qnnemu" / "bench-models"))


# ------------------------------------------------------------------------------ worker side
def _time_entries(totals: dict[str, list]) -> None:
    """Wraps every table slot of qnnemu's HTP library so that ``totals[name]`` accumulates
    [calls, seconds]; must run before the library is first loaded in this process."""
    from qnnemu.abi import framework

    original = framework.Library.install

    def install(self, the_ffi, the_lib, expected, api_version):
        for name, wrapper in list(self.entries.items()):
            def timed(*args, _wrapper=wrapper, _name=name):
                t = time.perf_counter()
                try:
                    return _wrapper(*args)
                finally:
                    slot = totals.setdefault(_name, [0, 0.0])
                    slot[0] += 1
                    slot[1] += time.perf_counter() - t
            timed.__name__ = name
            self.entries[name] = timed
        return original(self, the_ffi, the_lib, expected, api_version)

    framework.Library.install = install


def worker(model: str, backend: str, warm: int) -> dict:
    import bench_models
    import model_set

    path = CACHE / f"{model}.onnx"
    feeds = model_set.random_feeds(path)
    totals: dict[str, list] = {}
    if backend in ("qnnemu", "baseline"):
        _time_entries(totals)
    out: dict = {}
    c0, t0 = time.process_time(), time.perf_counter()
    kind = "vendor" if backend == "vendor" else "qnnemu"
    sess = bench_models._qnn_session(str(path), kind, fallback=False, profile_prefix=None)
    out["cold_s"] = time.perf_counter() - t0
    out["cold_cpu_s"] = time.process_time() - c0
    out["entries"] = {k: v[:] for k, v in totals.items()}
    out["first_run_s"] = float("nan")
    if backend != "vendor":   # (the vendor's first float inference takes seconds: not timed)
        t1 = time.perf_counter()
        sess.run(None, feeds)
        out["first_run_s"] = time.perf_counter() - t1
    del sess
    out["warm_s"] = []
    for _ in range(warm):
        t0 = time.perf_counter()
        sess = bench_models._qnn_session(str(path), kind, fallback=False, profile_prefix=None)
        out["warm_s"].append(time.perf_counter() - t0)
        del sess
    return out


# ------------------------------------------------------------------------- coordinator side
def run_worker(model: str, backend: str, warm: int, timeout: float, baseline: str | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", model, backend, str(warm)]
    env = worker_env("qnnemu" if backend == "baseline" else backend)
    if backend == "baseline":   # the other checkout's package first
        env["PYTHONPATH"] = os.pathsep.join([str(Path(baseline).resolve()), env["PYTHONPATH"]])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{backend} worker on {model} failed ({r.returncode}): {tail}")
    return json.loads(lines[-1])


def _med(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50", help="comma-separated model names in the cache")
    ap.add_argument("--variants", default="float,u8,u16")
    ap.add_argument("--rounds", type=int, default=3, help="fresh worker processes per backend (>= 3 for a median)")
    ap.add_argument("--warm", type=int, default=2, help="further creations in each worker after the cold one")
    ap.add_argument("--no-vendor", action="store_true")
    ap.add_argument("--entries", action="store_true", help="print qnnemu's time per ABI entry")
    ap.add_argument("--baseline", metavar="DIR", help="also measure qnnemu from this other checkout (built)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "BACKEND", "WARM"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        model, backend, warm = args.worker
        print(json.dumps(worker(model, backend, int(warm))))
        return 0

    backends = ["qnnemu"] + (["baseline"] if args.baseline else []) + \
        ([] if args.no_vendor or vendor_dir() is None else ["vendor"])
    results: dict = {}
    print(f"{'model':<22} {'backend':<8} {'cold s':>7} {'warm s':>7} {'cpu s':>7} {'1st run s':>9} "
          f"{'in ABI s':>8}  (medians of {args.rounds} rounds)")
    for model in args.models.split(","):
        for variant in args.variants.split(","):
            name = f"{model}.{variant}"
            if not (CACHE / f"{name}.onnx").is_file():
                print(f"{name:<22} not in {CACHE} (benchmarks/model_set.py makes it)")
                continue
            runs: dict[str, list] = {b: [] for b in backends}
            for r in range(args.rounds):
                for b in (backends if r % 2 == 0 else backends[::-1]):
                    runs[b].append(run_worker(name, b, args.warm, args.timeout, args.baseline))
            results[name] = runs
            for b in backends:
                rs = runs[b]
                inside = [sum(v[1] for v in x["entries"].values()) for x in rs]
                print(f"{name:<22} {b:<8} {_med([x['cold_s'] for x in rs]):7.3f} "
                      f"{_med([_med(x['warm_s']) for x in rs if x['warm_s']]):7.3f} "
                      f"{_med([x['cold_cpu_s'] for x in rs]):7.3f} {_med([x['first_run_s'] for x in rs]):9.3f} "
                      + (f"{_med(inside):8.3f}" if b != "vendor" else f"{'':>8}"))
                if args.entries and b != "vendor":
                    names = sorted({k for x in rs for k in x["entries"]},
                                   key=lambda k: -_med([x["entries"].get(k, [0, 0])[1] for x in rs]))
                    for k in names:
                        calls = rs[0]["entries"].get(k, [0, 0])[0]
                        secs = _med([x["entries"].get(k, [0, 0.0])[1] for x in rs])
                        if secs < 1e-4:   # the handful of set-up entries
                            continue
                        print(f"{'':<32}{k:<32} {calls:5d} calls {secs * 1e3:8.1f} ms")
            if "vendor" in runs:
                cold = {b: _med([x["cold_s"] for x in runs[b]]) for b in backends}
                warm = {b: _med([_med(x["warm_s"]) for x in runs[b] if x["warm_s"]]) for b in backends}
                print(f"{name:<22} {'':<8} qnnemu / vendor: cold {cold['qnnemu'] / cold['vendor']:.2f}, "
                      f"warm {warm['qnnemu'] / warm['vendor']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
