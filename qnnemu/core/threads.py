"""Kernel threads of graphs executed at the same time from several application threads
(QnnGraph.h QnnGraph_execute: "the same graph cannot be executed concurrently", different graphs
can).

One execute splits its large GEMMs over every core: numpy's OpenBLAS over its thread pool, the
C kernels (csrc/kernels.c) over per-call threads.  Two application threads doing that at once
ask for twice the cores there are, and OpenBLAS serialises its multi-threaded level-3 calls:
two threads executing GEMM-bound graphs ran slower together than one alone (0.78x measured on 2
cores, benchmarks/bench_threads.py).  The GIL is not the cause: cffi releases it around every C
kernel and OpenBLAS releases it around every GEMM.

So the cores are shared among the executes in flight: with n of them, the calling thread's C
kernels use ``threads // n`` (a thread-local limit, ``qe_set_call_threads``) and OpenBLAS's
pool ``blas // n`` (OpenBLAS has only a process-wide count; it is lowered while more than one
execute runs and given back, as it was, when one is left).  OpenBLAS splits a GEMM over rows and
columns, never over the reduction, so its results do not depend on the thread count.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Any, cast

import numpy as np

from ..ops import _fast

_lock = threading.Lock()
_in_flight = 0
_blas_saved: int | None = None     # OpenBLAS's count when a second execute started
_local = threading.local()         # .limit: the C kernels' limit last set for this thread
_blas_fns: tuple | None = None


def _openblas():
    """(set_num_threads, get_num_threads) of the OpenBLAS numpy uses, or None."""
    global _blas_fns
    if _blas_fns is None:
        found: tuple = ()
        base = os.path.dirname(os.path.dirname(np.__file__))
        paths = glob.glob(os.path.join(base, "numpy.libs", "*openblas*")) + \
            glob.glob(os.path.join(os.path.dirname(np.__file__), ".libs", "*openblas*"))
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"),
                                   ("openblas", "")):
                set_fn = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                get_fn = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if set_fn is not None and get_fn is not None:
                    set_fn.argtypes, set_fn.restype = [ctypes.c_int], None
                    get_fn.argtypes, get_fn.restype = [], ctypes.c_int
                    found = (set_fn, get_fn)
                    break
            if found:
                break
        _blas_fns = found
    return _blas_fns or None


def _share_blas(n: int) -> None:
    """OpenBLAS's thread count for ``n`` executes in flight (called under ``_lock``)."""
    global _blas_saved
    fns = _openblas()
    if fns is None:
        return
    set_fn, get_fn = fns
    if n >= 2:
        if _blas_saved is None:
            _blas_saved = int(get_fn())
        set_fn(max(1, _blas_saved // n))
    elif _blas_saved is not None:
        set_fn(_blas_saved)
        _blas_saved = None


def _limit_kernels(n: int) -> None:
    """The calling thread's C kernel limit for ``n`` executes in flight (only when it changes)."""
    if not _fast.enabled():
        return
    limit = 0 if n <= 1 else max(1, _fast.threads() // n)
    if getattr(_local, "limit", 0) != limit:
        cast(Any, _fast._lib).qe_set_call_threads(limit)   # (set once the kernels load: enabled())
        _local.limit = limit


def enter() -> None:
    """An execute starts in this thread."""
    global _in_flight
    with _lock:
        _in_flight += 1
        n = _in_flight
        if n >= 2:
            _share_blas(n)
    _limit_kernels(n)


def leave() -> None:
    """The execute of this thread is done."""
    global _in_flight
    with _lock:
        _in_flight -= 1
        n = _in_flight
        if _blas_saved is not None:
            _share_blas(n)


def in_flight() -> int:
    return _in_flight


def _after_fork_in_child() -> None:
    """The child has none of the parent's executes: nothing in flight, OpenBLAS's count back."""
    global _in_flight, _blas_saved
    _in_flight = 0
    if _blas_saved is not None and _openblas() is not None:
        _openblas()[0](_blas_saved)
    _blas_saved = None
    _local.__dict__.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["enter", "leave", "in_flight"]
