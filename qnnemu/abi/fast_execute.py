"""graphExecute's C fast path, the Python side (QnnGraph_execute; issue 13): which graphs get
one and when it is withdrawn.  The C side is csrc/fast_execute.h, the front of the table's
graphExecute slot.

A graph is offered after an execute through the Python entry succeeded, when its C engine
compiled the whole plan (``Engine.fast_descriptor``) and nothing the Python entry does per call
matters (no graph-level profiling, executes allowed).  Every other entry of the table clears the
registry before it runs (``clear``, called by the entry wrapper of qnnemu/abi/framework.py): a
configuration change, a tensor update or a free can never leave a stale descriptor behind; the
next execute through the Python entry offers the graph again.

``QNNEMU_FAST_EXECUTE=0`` turns the fast path off (every execute through Python).
"""
from __future__ import annotations

import os
from typing import Any

from .library import lib

# graph handle -> (engine, descriptor): keeps what the registered descriptor points into alive
_registered: dict[int, tuple[Any, Any]] = {}


def enabled() -> bool:
    return os.environ.get("QNNEMU_FAST_EXECUTE", "1").strip() not in ("0", "")


def offer(handle: int, graph) -> bool:
    """Registers ``graph``'s fast path if it can have one; True when it is registered."""
    plan = getattr(graph, "plan", None)
    engine = getattr(plan, "engine", None)
    if engine is None or (handle in _registered and _registered[handle][0] is engine):
        return handle in _registered
    if not enabled() or (getattr(graph, "configs", None) or {}).get("profile") is not None:
        return False
    desc = engine.fast_descriptor(graph)
    if desc is None:
        return False
    if lib.qnnemu_fast_register(handle, lib_cast(desc)) != 0:
        return False
    _registered[handle] = (engine, desc)
    return True


def lib_cast(desc):
    from .library import ffi
    return ffi.cast("const int64_t *", desc.ctypes.data)


def clear() -> None:
    """Withdraws every registered fast path (waits for fast executes in flight)."""
    if _registered:
        lib.qnnemu_fast_clear()
        _registered.clear()


def registered() -> int:
    return int(lib.qnnemu_fast_count())
