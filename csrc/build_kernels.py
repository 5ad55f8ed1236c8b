"""cffi build script for ``qnnemu._kernels`` (csrc/kernels.c).

Used two ways:
- by setuptools: ``cffi_modules=["csrc/build_kernels.py:ffibuilder"]``;
- as a script, ``python csrc/build_kernels.py``: builds ``qnnemu/_kernels*.so`` in place.

Flags stop at -march=x86-64-v2 (CI machines vary); kernels.c selects its AVX2+FMA
variants at run time when the CPU has them (and its AVX-512 GEMM micro-kernel).

The GIL: cffi's API mode releases it around every call of these functions (the generated
wrappers call them between Py_BEGIN_ALLOW_THREADS and Py_END_ALLOW_THREADS), so application
threads executing graphs at once run their kernels in parallel; nothing here needs the
interpreter.
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
int qe_gemm_avx512(void);
void qe_set_threads(int n);
int qe_threads(void);
void qe_set_call_threads(int n);
int qe_call_threads(void);
int qe_sgemm(long M, long N, int K, const float *A, long rsa, long csa, const float *B,
             long rsb, long csb, float *C, long ldc, const float *bias);
long qe_packed_b_size(long N, int K);
void qe_pack_b(long N, int K, const float *B, long rsb, long csb, float *Bp);
int qe_sgemm_packed(long M, long N, int K, const float *A, long rsa, long csa,
                    const float *Bpacked, float *C, long ldc, const float *bias);
int qe_sgemm_batched(int batch, const int64_t *a_off, const int64_t *b_off, long M, long N,
                     int K, const float *A, long rsa, long csa, const float *B, long rsb,
                     long csb, float *C, long ldc, const float *bias);
void qe_im2col2d(int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh, int sw,
                 int pt, int pl, int dh, int dw, int c0, int cig, long p0, long p1,
                 const float *x, float *cols);
void qe_col2im2d(int n, int h, int w, int group, int cog, int fh, int fw, int oh, int ow,
                 int sh, int sw, int pt, int pl, int dh, int dw, const float *cols,
                 long gstride, long pstride, float *y);
void qe_depthwise2d(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh, int ow,
                    int sh, int sw, int pt, int pl, int dh, int dw, const float *x,
                    const float *f, const float *bias, float *y);
int qe_pool2d(int kind, int n, int h, int w, int c, int fh, int fw, int oh, int ow, int sh,
              int sw, int pt, int pb, int pl, int pr, int count_pad, const float *x, float *y);
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
    extra_compile_args=["-O3", "-march=x86-64-v2", "-std=gnu11", "-pthread",
                        "-Wall", "-Wno-unused-function", "-Wno-psabi"],
    extra_link_args=["-pthread"],
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
