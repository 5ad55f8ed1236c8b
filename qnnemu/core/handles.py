"""Opaque handles (QnnCommon.h Qnn_Handle_t): validated, kind-checked, never reused.

Handle values are never reused within a process, so a freed handle is recognised as freed
(and reported as such) instead of aliasing a newer object.
"""
from __future__ import annotations

import itertools
import threading
from typing import TypeVar

from ..errors import QnnError
from . import forksafe

T = TypeVar("T")

_STEP = 0x10  # keeps handle values aligned like real pointers


class HandleTable:
    def __init__(self, start: int = 0x51EE0000):
        self._objects: dict[int, object] = {}
        self._freed: dict[int, str] = {}
        self._counter = itertools.count(start, _STEP)
        self._lock = threading.Lock()

    def new(self, obj: object) -> int:
        with self._lock:
            handle = next(self._counter)
            self._objects[handle] = obj
            return handle

    def get(self, handle: int | None, kind: type[T], code: int, what: str) -> T:
        """The live object of ``kind`` behind ``handle`` or QnnError(code)."""
        if not handle:
            raise QnnError(code, f"{what} is NULL", rule="QNNEMU-handle-null")
        obj = self._objects.get(handle)
        if obj is None:
            if handle in self._freed:
                raise QnnError(code, f"{what} 0x{handle:x} was already freed "
                                     f"(it was a {self._freed[handle]})", rule="QNNEMU-handle-freed")
            raise QnnError(code, f"{what} 0x{handle:x} is not a handle of this backend",
                           rule="QNNEMU-handle-unknown")
        if not isinstance(obj, kind):
            raise QnnError(code, f"{what} 0x{handle:x} is a {type(obj).__name__} handle, "
                                 f"not a {kind.__name__} handle", rule="QNNEMU-handle-kind")
        return obj

    def lookup(self, handle: int) -> object | None:
        return self._objects.get(handle)

    def release(self, handle: int) -> None:
        with self._lock:
            obj = self._objects.pop(handle, None)
            if obj is not None:
                self._freed[handle] = type(obj).__name__

    def live(self, kind: type[T] | None = None) -> list[T]:
        with self._lock:
            return [o for o in self._objects.values() if kind is None or isinstance(o, kind)]


HANDLES = HandleTable()
forksafe.register()   # every process that creates handles re-initialises our locks after fork()
