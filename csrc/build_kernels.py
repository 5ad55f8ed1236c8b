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

# The prototypes are csrc/kernels.h's (kernels.c includes it): the declarations between its
# "cdef begin" and "cdef end" markers are the module's cdef.
KERNELS_H = HERE / "kernels.h"


def kernels_cdef(header: Path = KERNELS_H) -> str:
    """The declarations of kernels.h that cffi reads."""
    text = header.read_text()
    begin, end = text.index("/* cdef begin */"), text.index("/* cdef end */")
    return text[begin + len("/* cdef begin */"):end].strip() + "\n"


# The C execution engine (csrc/engine.c) and its kernel families (csrc/eng_<family>.c, each with
# its csrc/eng_<family>.h): compiled into the same module, declared from their headers.
ENGINE_H = HERE / "engine.h"
FAMILY_HEADERS = sorted(HERE.glob("eng_*.h"))
FAMILY_SOURCES = sorted(HERE.glob("eng_*.c"))
HEADERS = [KERNELS_H, ENGINE_H, *FAMILY_HEADERS]
# pool.c: the intra-op thread pool every kernel file may use (pool.h; not declared to cffi)
SOURCES = [HERE / "kernels.c", HERE / "engine.c", HERE / "pool.c", *FAMILY_SOURCES]

CDEF = "".join(kernels_cdef(h) for h in HEADERS)


def _path(p: Path) -> str:
    return os.path.relpath(p) if __name__ != "__main__" else str(p)


ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
# The source is compiled as its own translation unit (sources=) so that its static helpers
# and target attributes stay out of cffi's generated wrapper.
ffibuilder.set_source(
    "qnnemu._kernels",
    "".join(f'#include "{h.name}"\n' for h in HEADERS),
    sources=[_path(p) for p in SOURCES],
    include_dirs=[_path(HERE)],
    depends=[_path(h) for h in [*HEADERS, HERE / "pool.h"]],
    # -ffp-contract=off: no fused multiply-adds the source does not spell out -- the engine's
    # kernels reproduce numpy's float arithmetic bit for bit, and numpy never fuses.
    extra_compile_args=["-O3", "-march=x86-64-v2", "-std=gnu11", "-pthread", "-ffp-contract=off",
                        "-Wall", "-Wno-unused-function", "-Wno-psabi"],
    extra_link_args=["-pthread", "-lm"],
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
