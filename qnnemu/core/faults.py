"""Fault injection into the QNN API entries (QNN HTP backend documentation, "SubSystem Restart
(SSR)", "Multiple cDSP Sessions", "I/O Buffer Registration Failure"; QnnCommon.h error codes).

A fault is armed for the n-th call (counting from 1, from the moment it is armed) of a named
entry (the QnnInterface_t slot name: ``graphExecute``, ``contextCreateFromBinary``,
``memRegister``, ...).  That call fails before it does anything, logging the fault's rule id:

=========  ===========================================  ====================================
kind       the call returns                             rule id
=========  ===========================================  ====================================
ssr        QNN_COMMON_ERROR_SYSTEM_COMMUNICATION 1007;  QNNEMU-fault-ssr
           every context alive then is invalidated
session    QNN_COMMON_ERROR_MEM_ALLOC 1002 (no cDSP     QNNEMU-fault-session-exhausted
           session has room for the context)
vtcm       QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE 1010   QNNEMU-fault-vtcm-timeout
           (VTCM acquisition timed out)
memreg     QNN_MEM_ERROR_MAPPING 8003 (the I/O cannot   QNNEMU-fault-memregister
           be mapped into the context's session)
=========  ===========================================  ====================================

After a SubSystem Restart the invalidated contexts -- and their graphs, tensors and registered
memory -- answer every call naming them with 1007 (rule QNNEMU-context-ssr-invalidated) until
the application frees them and creates new ones; a context created after the restart works.

Control: ``QNNEMU_FAULTS="ssr@graphExecute:3,memreg@memRegister:1"`` (read when the library
loads) or ``arm("ssr", "graphExecute", 3)`` / ``arm_spec(text)`` / ``clear()`` from Python.
Armed faults on graphExecute withdraw its C fast path (``on_change`` listeners) and keep it
withdrawn while they are armed (``blocks_fast_path``).
"""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..headers import Q
from ..location import Location
from ..rules import fail

FAULTS_ENV = "QNNEMU_FAULTS"

# kind -> (error code, rule id, what happened)
KINDS: dict[str, tuple[int, str, str]] = {
    "ssr": (Q.QNN_COMMON_ERROR_SYSTEM_COMMUNICATION, "QNNEMU-fault-ssr",
            "injected SubSystem Restart: the cDSP restarted, every context is invalidated (re-create them)"),
    "session": (Q.QNN_COMMON_ERROR_MEM_ALLOC, "QNNEMU-fault-session-exhausted",
                "injected cDSP session exhaustion: no session has virtual address space for the context"),
    "vtcm": (Q.QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE, "QNNEMU-fault-vtcm-timeout",
             "injected VTCM acquisition timeout: the HTP resources were not granted in time"),
    "memreg": (Q.QNN_MEM_ERROR_MAPPING, "QNNEMU-fault-memregister",
               "injected memRegister failure: the buffer cannot be mapped into the context's cDSP session"),
}


@dataclass
class Fault:
    kind: str
    entry: str
    nth: int
    seen: int = 0


_lock = threading.Lock()
_armed: list[Fault] = []
_env_read = False
# contexts invalidated by a SubSystem Restart (weak: a freed context leaves by itself)
_invalidated: weakref.WeakSet = weakref.WeakSet()
# called whenever armed faults change or an SSR happens (the ABI layer withdraws the fast path)
on_change: list[Callable[[], None]] = []


def parse(text: str) -> list[Fault]:
    """``kind@entry:n[,kind@entry:n...]``; ValueError saying what is accepted."""
    faults = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, rest = item.partition("@")
        entry, _, nth = rest.partition(":")
        if kind not in KINDS or not entry.isidentifier() or not nth.isdigit() or int(nth) < 1:
            raise ValueError(f"{FAULTS_ENV}: {item!r} is not kind@entry:n with kind one of "
                             f"{', '.join(KINDS)} and n >= 1 (e.g. ssr@graphExecute:3)")
        faults.append(Fault(kind, entry, int(nth)))
    return faults


def arm(kind: str, entry: str, nth: int = 1) -> None:
    """Arms one fault: the ``nth`` call of ``entry`` from now fails with ``kind``."""
    [fault] = parse(f"{kind}@{entry}:{nth}")
    with _lock:
        _armed.append(fault)
    _changed()


def arm_spec(text: str) -> None:
    faults = parse(text)
    with _lock:
        _armed.extend(faults)
    _changed()


def clear() -> None:
    """Disarms every fault (invalidated contexts stay invalidated)."""
    with _lock:
        _armed.clear()
    _changed()


def armed() -> list[Fault]:
    with _lock:
        return list(_armed)


def load_env(environ=None) -> None:
    """Arms the faults of ``QNNEMU_FAULTS`` once (the library's load); a malformed value arms
    nothing and raises ValueError."""
    global _env_read
    if _env_read:
        return
    _env_read = True
    text = (os.environ if environ is None else environ).get(FAULTS_ENV, "").strip()
    if text:
        arm_spec(text)


def blocks_fast_path() -> bool:
    """graphExecute must run through the checked entry: a fault is armed on it."""
    return any(f.entry == "graphExecute" for f in _armed)


def _changed() -> None:
    for listener in list(on_change):
        listener()


def invalidated(context) -> bool:
    return bool(_invalidated) and context in _invalidated


def check(entry: str, live_contexts: Callable[[], list]) -> None:
    """Called at the start of every entry: fails the call when a fault is armed for this call."""
    if not _armed:
        return
    hit = None
    with _lock:
        for fault in _armed:
            if fault.entry == entry:
                fault.seen += 1
                if hit is None and fault.seen == fault.nth:
                    hit = fault
        if hit is not None:
            _armed.remove(hit)
    if hit is None:
        return
    code, rule, what = KINDS[hit.kind]
    if hit.kind == "ssr":
        for ctx in live_contexts():
            _invalidated.add(ctx)
        _changed()
    elif hit.entry == "graphExecute" and not blocks_fast_path():
        _changed()
    fail(Location(entry).field(FAULTS_ENV), rule, f"{hit.kind}@{hit.entry}:{hit.nth}: {what}", code=code)


def check_invalidated(entry: str, context, what: str = "context") -> None:
    """A call naming a context invalidated by a SubSystem Restart answers 1007 (``what``: the
    handle argument that names it: the context, one of its graphs, its registered memory)."""
    if context is not None and invalidated(context):
        fail(Location(entry).field(what), "QNNEMU-context-ssr-invalidated",
             "the context was invalidated by a SubSystem Restart; free it and create a new context",
             code=Q.QNN_COMMON_ERROR_SYSTEM_COMMUNICATION)
