"""contextFree / backendFree latency while other threads execute graphs (QnnContext.h
QnnContext_free, QnnBackend.h QnnBackend_free, QnnGraph.h QnnGraph_execute).

A C application (tests/c/process_hygiene.c, mode ``free``) creates a backend, a context and a
small graph, executes it once and frees the context and the backend, ``--rounds`` times, timing
each free:

- ``idle``: nothing else runs;
- ``busy``: another thread executes a small graph (FullyConnected 8x256x64) back to back;
- ``busy+chain``: that graph has 20 more ElementWiseAdd nodes (more Python per execute);
- ``busy+same``: besides, a third thread executes the graph of the context being freed.

    python3 benchmarks/bench_free_latency.py [--rounds 100] [--vendor]

Prints median / mean / max per case.  A free only has to take the GIL (no lock is held across
graphExecute): it waits while the executing threads run Python, up to the interpreter's 5 ms
switch interval per hand-off -- more when several threads compete for it or the machine is
loaded.  ``--vendor`` adds the vendor's libQnnHtp.so (onnxruntime_qnn) for comparison.
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
sys.path.insert(0, str(ROOT / "tests"))

import qnnemu  # noqa: E402

HARNESS_C = ROOT / "tests" / "c" / "process_hygiene.c"
CASES = {"idle": (0, 0, 0), "busy": (1, 0, 0), "busy+chain": (1, 20, 0), "busy+same": (1, 0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--vendor", action="store_true", help="also run the vendor's libQnnHtp.so")
    args = ap.parse_args()
    libs = {"qnnemu": (qnnemu.backend_library_path(), {})}
    if args.vendor:
        from vendor import vendor_env, vendor_library
        if vendor_library() is None:
            raise SystemExit("--vendor needs onnxruntime_qnn")
        libs["vendor"] = (str(vendor_library()), {"LD_LIBRARY_PATH": vendor_env()["LD_LIBRARY_PATH"]})
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {args.rounds} rounds per case")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "process_hygiene"
        subprocess.run(["gcc", "-O2", "-std=gnu11", "-I", str(Path(qnnemu.include_dir()) / "QNN"), str(HARNESS_C),
                        "-o", str(exe), "-ldl", "-lm", "-pthread"], check=True)
        for lib_name, (path, extra) in libs.items():
            env = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
            env.update(extra)
            for case, (busy, chain, same) in CASES.items():
                out = subprocess.run([str(exe), "free", path, str(args.rounds), str(busy), str(chain), str(same)],
                                     capture_output=True, text=True, env=env, timeout=1200)
                if out.returncode != 0:
                    raise SystemExit(f"{lib_name} {case}: harness failed ({out.returncode}): "
                                     f"{out.stdout}{out.stderr[-2000:]}")
                for m in re.finditer(r"^(\w+) n \d+ median_ms ([0-9.]+) mean_ms ([0-9.]+) max_ms ([0-9.]+)",
                                     out.stdout, re.M):
                    print(f"{lib_name:7s} {case:11s} {m.group(1):12s} median {float(m.group(2)):8.3f} ms   "
                          f"mean {float(m.group(3)):8.3f} ms   max {float(m.group(4)):8.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
