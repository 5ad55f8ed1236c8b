"""cffi build script for ``qnnemu._kernels`` (csrc/kernels.c).

Used two ways:
- by setuptools: ``cffi_modules=["csrc/build_kernels.py:ffibuilder"]``;
- as a script, ``python csrc/build_kernels.py``: builds ``qnnemu/_kernels*.so`` in place.

Flags stop at -march=x86-64-v2 (CI machines vary); kernels.c selects its AVX2+FMA
micro-kernel at run time when the CPU has it.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent

CDEF = """
int qe_isa(void);
int qe_sgemm(int M, int N, int K, const float *A, long rsa, long csa, const float *B,
             long rsb, long csb, float *C, long ldc, const float *bias);
int qe_sgemm_batched(int batch, const int64_t *a_off, const int64_t *b_off, int M, int N,
                     int K, const float *A, long rsa, long csa, const float *B, long rsb,
                     long csb, float *C, long ldc, const float *bias);
int qe_conv2d(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh, int ow,
              int sh, int sw, int pt, int pl, int dh, int dw, int group, const float *x,
              const float *f, const float *bias, float *y);
"""

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
# The source is compiled as its own translation unit (sources=) so that its static helpers
# and target attributes stay out of cffi's generated wrapper.
ffibuilder.set_source(
    "qnnemu._kernels",
    CDEF,
    sources=[os.path.relpath(HERE / "kernels.c")] if __name__ != "__main__"
    else [str(HERE / "kernels.c")],
    extra_compile_args=["-O3", "-march=x86-64-v2", "-std=gnu11",
                        "-Wall", "-Wno-unused-function"],
)


def build_in_place() -> Path:
    """Compiles into a temporary directory and moves the extension into qnnemu/."""
    pkg = HERE.parent / "qnnemu"
    with tempfile.TemporaryDirectory(prefix="qnnemu-kernels-") as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose=False))
        for old in pkg.glob("_kernels*.so"):
            old.unlink()
        dest = pkg / built.name
        shutil.move(str(built), dest)
    return dest


if __name__ == "__main__":
    print(build_in_place())
    sys.exit(0)
