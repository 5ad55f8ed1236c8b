"""fork() during a QNN call: the package's locks in the child (POSIX fork; Python ``os.register_at_fork``).

A child process has one thread, the one that called fork(); every lock another thread held at
that moment stays held in the child, by nobody.  A thread inside graphExecute holds its graph's
lock while the kernels run without the GIL, and any thread may be switched out of the GIL in
the middle of a short ``with lock:`` block (the handle table's, a module's).  The child would
then block forever on its first QNN call that needs such a lock.

``after_fork_in_child`` re-initialises every lock of the package in the child, as CPython does
for its own locks (``_at_fork_reinit``).  It runs from the interpreter's after-fork callbacks:
after our atfork handler's ``PyOS_AfterFork_Child`` in a C application (csrc/fork_python.h) and
after ``os.fork()`` in a Python one.  The locks are found, not registered: module globals of the
``qnnemu`` modules, and the objects reachable from them through dicts, lists, tuples and the
attributes of qnnemu objects (handle tables and their objects: graphs, contexts, profiles,
signals...), a few levels deep -- so a lock added anywhere in the package is covered without
being declared.  Data a lock protected may be in the middle of an update in the child (the
thread updating it is gone); what the child creates itself is consistent.
"""
from __future__ import annotations

import os
import sys
import threading

# Semaphore has no _at_fork_reinit (the package uses none); a Semaphore's Condition is found
# through its attributes.
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Event)
_CONTAINERS = (dict, list, tuple, set, frozenset)
# module globals -> handle table -> its objects dict -> a graph -> the graph's lock attribute
_DEPTH = 5


def _own(obj) -> bool:
    return type(obj).__module__.startswith("qnnemu")


def _children(obj):
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, _CONTAINERS):
        return list(obj)
    values: list[object] = []
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):
        values.extend(d.values())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and hasattr(obj, name):
                values.append(getattr(obj, name))
    return values


def _reinit(obj, depth: int, seen: set[int], found: list) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, _LOCK_TYPES):
        found.append(obj)
        return
    if depth == 0 or not (isinstance(obj, _CONTAINERS) or _own(obj)):
        return
    for child in _children(obj):
        _reinit(child, depth - 1, seen, found)


def package_locks() -> list:
    """Every lock (Lock, RLock, Condition, Event) of the loaded qnnemu modules and of
    the qnnemu objects reachable from their globals."""
    seen: set[int] = set()
    found: list = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "qnnemu" or name.startswith("qnnemu.")):
            continue
        for value in list(vars(module).values()):
            _reinit(value, _DEPTH - 1, seen, found)
    return found


def after_fork_in_child() -> None:
    for lock in package_locks():
        lock._at_fork_reinit()


_registered = False


def register() -> None:
    """Registers ``after_fork_in_child`` once per interpreter."""
    global _registered
    if not _registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=after_fork_in_child)
        _registered = True
