"""Calling one C step kernel of the execution engine (csrc/engine.h ``qe_args``: buffer
pointers and int64 parameters) on numpy arrays, outside any program: the kernel tests of
tests/test_engine_*.py."""
from __future__ import annotations

from qnnemu.ops import _fast


def call(name: str, arrays, ints) -> int:
    """The step kernel ``name`` on numpy buffers and int64 parameters; its return code."""
    lib, ffi = _fast.library()
    args = ffi.new("qe_args *")
    ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in arrays])
    vals = ffi.new("int64_t[]", [int(v) for v in ints])
    args.p, args.i, args.np, args.ni, args.nd = ptrs, vals, len(arrays), len(ints), 0
    return getattr(lib, name)(args)
