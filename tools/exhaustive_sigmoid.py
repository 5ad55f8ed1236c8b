"""Exhaustive check of the fast float32 Sigmoid kernel (QNN op definition Sigmoid; the C
engine's element-wise kernels, csrc/eng_eltwise.c, docs/engine-eltwise.md).

Runs every float32 bit pattern (2^32 of them, in chunks) through

- ``fast``: the kernel the op and the engine run (``qe_ew_unary_f32`` Sigmoid: the AVX-512 pass
  with its exact fallback on machines that have AVX-512, the AVX2 + FMA pass on those that have
  that (``QNNEMU_KERNELS_ISA=avx2`` picks it on an AVX-512 machine), else the exact formula);
- ``exact``: the exact formula alone (1 / (1 + exp(-x)) in float64 with the kernels' own exp,
  rounded once to float32);
- ``numpy``: the op's ``QNNEMU_KERNELS=reference`` formula, numpy's float64 exp.

and prints how many results differ (bit patterns; two NaNs count as equal) between fast and
exact and between exact and numpy, with the first differing inputs.  It takes minutes:
``python3 tools/exhaustive_sigmoid.py [--chunk-bits 24] [--start 0 --stop 4294967296]``.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from qnnemu.ops import _fast, _fast_eltwise


def _differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both_nan = np.isnan(a) & np.isnan(b)
    return (a.view(np.uint32) != b.view(np.uint32)) & ~both_nan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk-bits", type=int, default=24)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop", type=int, default=1 << 32)
    args = ap.parse_args(argv)
    if not _fast.enabled():
        print("the C kernels are off (QNNEMU_KERNELS=reference or not built)", file=sys.stderr)
        return 2
    step = 1 << args.chunk_bits
    counts = {"fast != exact": 0, "exact != numpy": 0, "fast != numpy": 0}
    examples: dict[str, list[int]] = {k: [] for k in counts}
    t0 = time.time()
    for lo in range(args.start, args.stop, step):
        bits = np.arange(lo, min(lo + step, args.stop), dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        fast = _fast_eltwise.unary("sigmoid", x)
        exact = _fast_eltwise.unary("sigmoid_exact", x)
        with np.errstate(all="ignore"):
            ref = (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
        for key, (a, b) in (("fast != exact", (fast, exact)), ("exact != numpy", (exact, ref)),
                            ("fast != numpy", (fast, ref))):
            bad = _differ(a, b)
            n = int(bad.sum())
            if n:
                counts[key] += n
                examples[key] += [int(v) for v in bits[bad][: 8 - len(examples[key])]]
    elapsed = time.time() - t0
    print(f"float32 patterns [{args.start:#x}, {args.stop:#x}) in {elapsed:.0f} s")
    for key, n in counts.items():
        shown = ", ".join(f"{b:#010x}" for b in examples[key])
        print(f"  {key}: {n} mismatches" + (f" (first: {shown})" if n else ""))
    return 1 if counts["fast != exact"] else 0


if __name__ == "__main__":
    sys.exit(main())
