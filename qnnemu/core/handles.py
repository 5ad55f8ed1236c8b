"""Opaque handles (QnnCommon.h Qnn_Handle_t): validated, kind-checked, never reused.

A handle value carries its own history, so the table holds the live objects only and its memory
is bounded by what is alive (not by how many handles were ever created):

    value = BASE + serial * 0x100 + kind * 0x10

``serial`` counts every handle ever made (values are never reused, so a freed handle is
recognised as freed instead of aliasing a newer object); ``kind`` is the object type's index
(Logger, Backend, Context, ...: a small fixed set), so a freed handle still says what it was.
A value the table issued and no longer holds was freed; any other value is not a handle of
this backend.  Values stay 16-byte aligned like real pointers.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, TypeVar, cast

from ..errors import QnnError
from . import forksafe

T = TypeVar("T")

FIRST_HANDLE = 0x51EE0000   # BASE: the value of a table's first handle (serial 0, kind 0)
_KIND_STEP = 0x10     # kind index in bits 4..7
_SERIAL_STEP = 0x100  # serial number from bit 8 up
_MAX_KINDS = _SERIAL_STEP // _KIND_STEP - 1   # index 15: any kind past the first 15 (never seen)


class HandleTable:
    def __init__(self, start: int = FIRST_HANDLE):
        self._start = start
        self._objects: dict[int, object] = {}
        self._serials = itertools.count()
        self._issued = 0                      # serials below this were handed out
        self._kinds: dict[str, int] = {}      # type name -> kind index (bounded: the object types)
        self._kind_names: list[str] = []
        self._overflow = False                # a 16th kind appeared: index _MAX_KINDS names "object"
        # Reentrant: the garbage collector may run a finalizer while this thread holds the lock
        # (an ONNX Runtime session collected during the list allocation in ``live`` frees its QNN
        # objects through our entries, which look up the newest logger here); a plain Lock
        # deadlocked that thread.
        self._lock = threading.RLock()

    def _kind(self, obj: object) -> int:
        name = type(obj).__name__
        index = self._kinds.get(name)
        if index is None:
            index = len(self._kind_names)
            if index < _MAX_KINDS:
                self._kind_names.append(name)
            else:
                index, self._overflow = _MAX_KINDS, True
            self._kinds[name] = index
        return index

    def new(self, obj: object) -> int:
        with self._lock:
            serial = next(self._serials)
            handle = self._start + serial * _SERIAL_STEP + self._kind(obj) * _KIND_STEP
            self._objects[handle] = obj
            self._issued = serial + 1
            return handle

    def freed_kind(self, handle: int) -> str | None:
        """The type name of the freed object ``handle`` held ("object" when the kind is not
        recorded), or None when this table never issued ``handle``."""
        offset = handle - self._start
        if offset < 0 or offset % _KIND_STEP or handle in self._objects:
            return None
        serial, kind = divmod(offset, _SERIAL_STEP)
        kind //= _KIND_STEP
        if serial >= self._issued:
            return None
        if kind < len(self._kind_names):
            return self._kind_names[kind]
        return "object" if kind == _MAX_KINDS and self._overflow else None

    def get(self, handle: int | None, kind: type[T], code: int, what: str) -> T:
        """The live object of ``kind`` behind ``handle`` or QnnError(code)."""
        if not handle:
            raise QnnError(code, f"{what} is NULL", rule="QNNEMU-handle-null")
        obj = self._objects.get(handle)
        if obj is None:
            was = self.freed_kind(handle)
            if was is not None:
                raise QnnError(code, f"{what} 0x{handle:x} was already freed (it was a {was})",
                               rule="QNNEMU-handle-freed")
            raise QnnError(code, f"{what} 0x{handle:x} is not a handle of this backend",
                           rule="QNNEMU-handle-unknown")
        if not isinstance(obj, kind):
            raise QnnError(code, f"{what} 0x{handle:x} is a {type(obj).__name__} handle, "
                                 f"not a {kind.__name__} handle", rule="QNNEMU-handle-kind")
        return obj

    def lookup(self, handle: int) -> Any:   # any kind of object; get() checks the kind
        return self._objects.get(handle)

    def release(self, handle: int) -> None:
        with self._lock:
            self._objects.pop(handle, None)

    def live(self, kind: type[T] | None = None) -> list[T]:
        with self._lock:
            while True:
                try:
                    objects = list(self._objects.values())
                    break
                except RuntimeError:   # a finalizer run during the copy changed the table: again
                    continue
        return cast(list[T], [o for o in objects if kind is None or isinstance(o, kind)])


HANDLES = HandleTable()
forksafe.register()   # every process that creates handles re-initialises our locks after fork()
