"""Exhaustive check of the float16 rounding kernel of the C engine (``qe_k_fp16_round``,
csrc/engine.c: the HTP's float16 grid of float16-math results, ``htp_fp16_round`` in
qnnemu/ops/base.py).

Runs every float32 bit pattern (2^32, in chunks of consecutive patterns, so that 16 neighbours
share a vector: the normal range and the float16 subnormal range each fill whole vectors of the
fast path) through the kernel as the engine calls it and through its plain loop
alone (``i[2] = 1``), in both tie modes, and prints how many results differ::

    python3 tools/exhaustive_fp16_round.py [--chunk-bits 24]

The plain loop itself was compared with ``htp_fp16_round`` over all 2^32 patterns when it was
vectorized (docs/engine.md); tests/test_engine.py samples all three.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from qnnemu.ops import _fast


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk-bits", type=int, default=24)
    args = ap.parse_args(argv)
    if not _fast.enabled():
        print("the C kernels are off (QNNEMU_KERNELS=reference or not built)", file=sys.stderr)
        return 2
    lib, ffi = _fast.library()
    step = 1 << args.chunk_bits
    x = np.empty(step, np.uint32)
    fast, plain = np.empty(step, np.float32), np.empty(step, np.float32)
    bad = {0: 0, 1: 0}
    first: dict[int, list[int]] = {0: [], 1: []}
    t0 = time.time()
    for lo in range(0, 1 << 32, step):
        x[:] = np.arange(lo, lo + step, dtype=np.uint64).astype(np.uint32)
        xf = x.view(np.float32)
        for even in (0, 1):
            for out, mode in ((fast, 0), (plain, 1)):
                ptrs = ffi.new("void *[]", [ffi.cast("void *", xf.ctypes.data), ffi.cast("void *", out.ctypes.data)])
                ints = ffi.new("int64_t[]", [step, even, mode])
                dbl = ffi.new("double[]", [0.0])
                a = ffi.new("qe_args *", {"p": ptrs, "i": ints, "d": dbl, "np": 2, "ni": 3, "nd": 0})
                if lib.qe_k_fp16_round(a) != 0:
                    print("qe_k_fp16_round failed", file=sys.stderr)
                    return 2
            diff = fast.view(np.uint32) != plain.view(np.uint32)
            n = int(diff.sum())
            if n:
                bad[even] += n
                first[even] += [int(v) for v in x[diff][: 8 - len(first[even])]]
    print(f"2^32 float32 patterns in {time.time() - t0:.0f} s")
    for even in (0, 1):
        ties = "even" if even else "away"
        print(f"ties {ties}: fast != plain on {bad[even]} patterns" +
              (f" (first: {', '.join(hex(v) for v in first[even])})" if first[even] else ""))
    return 1 if any(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
