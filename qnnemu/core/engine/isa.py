"""Which instruction-set paths the C kernels took on this machine (issue 13: kernels are chosen at
run time, never by build flags).  ``paths()`` asks every kernel file: csrc/kernels.c answers
``qe_isa`` (its memory-bound kernels: AVX2+FMA or the SSE4.2 baseline) and ``qe_gemm_avx512``
(the float GEMM micro-kernel); each engine kernel family may export ``int qe_<family>_isa(char
*buf, int n)`` writing a short description (e.g. "vnni" for the integer GEMM), found by name.
``cpu_flags()`` lists the relevant flags the CPU reports, for comparison."""
from __future__ import annotations

from ...ops import _fast

RELEVANT_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                  "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16")


def cpu_flags() -> list[str]:
    """The flags of RELEVANT_FLAGS in /proc/cpuinfo (empty when it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [flag for flag in RELEVANT_FLAGS if flag in have]
    except OSError:
        pass
    return []


def paths() -> dict[str, str]:
    """Kernel group -> the ISA path it runs here (empty without the C kernels)."""
    lib, ffi = _fast.library()
    if lib is None:
        return {}
    out = {"memory-bound kernels": "avx2+fma" if lib.qe_isa() else "sse4.2",
           "float GEMM micro-kernel": "avx512f (8x32 tiles; convolutions as implicit GEMM, depthwise "
                                      "3x3/5x5 in blocks of pixels)" if lib.qe_gemm_avx512() else (
               "avx2+fma" if lib.qe_isa() else "sse4.2")}
    for name in sorted(dir(lib)):
        if name.startswith("qe_") and name.endswith("_isa") and name not in ("qe_isa",):
            buf = ffi.new("char[]", 512)     # (128 cut two families' descriptions short)
            try:
                getattr(lib, name)(buf, 512)
            except TypeError:
                continue
            out[name[3:-4]] = ffi.string(buf).decode(errors="replace")
    return out


__all__ = ["cpu_flags", "paths", "RELEVANT_FLAGS"]
