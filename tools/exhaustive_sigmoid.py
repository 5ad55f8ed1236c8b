"""Exhaustive measurement of the float32 Sigmoid kernel (QNN op definition Sigmoid; the C
engine's element-wise kernels, csrc/eng_eltwise.c ``sigmoid_f32``, docs/engine-eltwise.md).

Runs every float32 bit pattern (2^32 of them, in chunks) through

- ``fast``: the kernel the op and the engine run (``qe_ew_unary_f32`` Sigmoid: a float32
  evaluation, AVX-512 where the machine has it, ``QNNEMU_KERNELS_ISA=avx2`` the AVX2 + FMA code,
  ``QNNEMU_KERNELS_ISA=sse`` the scalar code -- the same bytes by construction);
- ``exact``: the exact formula (1 / (1 + exp(-x)) in float64 with the kernels' own exp, rounded
  once to float32: ``sigmoid_exact``),

and prints the distribution of their distance in float32 ulps (NaN inputs: both NaN), plus a
SHA-256 of every ``fast`` result in order: run it once per ISA and compare the digests.  It takes
a few minutes: ``python3 tools/exhaustive_sigmoid.py [--chunk-bits 24] [--start 0 --stop
4294967296]``.  Exit status 1 if a distance exceeds 2 ulps or a NaN input gives a number.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

import numpy as np

from qnnemu.ops import _fast, _fast_eltwise


def _ordered(a: np.ndarray) -> np.ndarray:
    """float32 bits as integers in the order of the values (so that differences count ulps)."""
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


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
    hist = np.zeros(4, np.int64)          # 0, 1, 2, more ulps
    worst, worst_x, nan_bad = 0, 0, 0
    digest = hashlib.sha256()
    t0 = time.time()
    for lo in range(args.start, args.stop, step):
        bits = np.arange(lo, min(lo + step, args.stop), dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        fast = _fast_eltwise.unary("sigmoid", x)
        exact = _fast_eltwise.unary("sigmoid_exact", x)
        digest.update(fast.tobytes())
        nan = np.isnan(x)
        nan_bad += int((~np.isnan(fast[nan])).sum())
        d = np.abs(_ordered(fast[~nan]) - _ordered(exact[~nan]))
        hist += np.bincount(np.minimum(d, 3), minlength=4)
        if d.size and d.max() > worst:
            worst = int(d.max())
            worst_x = int(bits[~nan][d.argmax()])
    elapsed = time.time() - t0
    isa = os.environ.get("QNNEMU_KERNELS_ISA") or "default"
    print(f"float32 patterns [{args.start:#x}, {args.stop:#x}) in {elapsed:.0f} s, ISA {isa}")
    total = int(hist.sum())
    for k, label in enumerate(("equal", "1 ulp", "2 ulps", "more")):
        print(f"  {label}: {int(hist[k])} ({100.0 * hist[k] / max(total, 1):.4f}%)")
    print(f"  largest distance {worst} ulp(s) at {worst_x:#010x}; NaN inputs giving a number: {nan_bad}")
    print(f"  sha256 of the results: {digest.hexdigest()}")
    return 1 if worst > 2 or nan_bad else 0


if __name__ == "__main__":
    sys.exit(main())
