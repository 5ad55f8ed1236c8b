"""Two application threads executing two graphs at once (QnnGraph.h QnnGraph_execute), against one.

A C application (tests/c/process_hygiene.c, mode ``scale``) loads the backend, and each of its
threads executes its own FullyConnected graph [M, K] x [N, K]^T back to back for ``--seconds``;
the executes per second of 1 and of 2 threads give the ratio.  Three configurations:

- ``single-threaded kernels`` (OPENBLAS_NUM_THREADS=1, QNNEMU_NUM_THREADS=1): one execute uses
  one core, so the ratio shows whether anything in the backend serialises the threads (the GIL,
  a lock); on 2 idle cores it should be close to 2 (the acceptance floor is 1.6);
- ``default``: one execute alone splits its GEMMs over every core; with two executes in flight
  the cores are shared among them (qnnemu/core/threads.py) instead of oversubscribed;
- ``C GEMM`` (QNNEMU_GEMM=c): the same with csrc/kernels.c's GEMM instead of numpy's BLAS.

    python3 benchmarks/bench_threads.py                       # 256x512x512, 3 s per run
    python3 benchmarks/bench_threads.py --m 512 --k 1024 --n 1024 --seconds 5 --repeat 3
    python3 benchmarks/bench_threads.py --check               # exit 1 below 1.6x (single-threaded)

The machine is shared: run it when it is quiet (the load average is printed; each number is the
best of ``--repeat`` runs).  ``--backend`` runs another library (e.g. the vendor's libQnnHtp.so,
with its directory on LD_LIBRARY_PATH).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import qnnemu  # noqa: E402

HARNESS_C = ROOT / "tests" / "c" / "process_hygiene.c"
CONFIGS = {
    "single-threaded kernels": {"OPENBLAS_NUM_THREADS": "1", "QNNEMU_NUM_THREADS": "1"},
    "default": {},
    "C GEMM": {"QNNEMU_GEMM": "c"},
}


def build_harness(out_dir: Path) -> Path:
    exe = out_dir / "process_hygiene"
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-I", str(Path(qnnemu.include_dir()) / "QNN"), str(HARNESS_C),
                    "-o", str(exe), "-ldl", "-lm", "-pthread"], check=True)
    return exe


def rate(exe: Path, backend: str, threads: int, args, env: dict) -> float:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("QNNEMU_", "OPENBLAS_"))}
    full.update(env)
    best = 0.0
    for _ in range(args.repeat):
        out = subprocess.run([str(exe), "scale", backend, str(threads), str(args.seconds), str(args.m), str(args.k),
                              str(args.n)], capture_output=True, text=True, env=full, timeout=600)
        m = re.search(r"rate ([0-9.]+) per_s", out.stdout)
        if out.returncode != 0 or not m:
            raise SystemExit(f"harness failed ({out.returncode}): {out.stdout}{out.stderr[-2000:]}")
        best = max(best, float(m.group(1)))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--backend", default=qnnemu.backend_library_path())
    ap.add_argument("--only", choices=sorted(CONFIGS), action="append")
    ap.add_argument("--check", action="store_true", help="exit 1 when single-threaded kernels scale below 1.6x")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; GEMM {args.m}x{args.k}x{args.n}, "
          f"{args.seconds:g} s per run, best of {args.repeat}; backend {args.backend}")
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_harness(Path(tmp))
        for name in args.only or CONFIGS:
            one = rate(exe, args.backend, 1, args, CONFIGS[name])
            two = rate(exe, args.backend, 2, args, CONFIGS[name])
            ratios[name] = two / one
            print(f"{name:24s} 1 thread {one:9.1f}/s   2 threads {two:9.1f}/s   ratio {two / one:5.2f}x")
    if args.check and ratios.get("single-threaded kernels", 2.0) < 1.6:
        print("FAIL: two threads executing two graphs are below 1.6x one thread with single-threaded kernels")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
