"""The C side of qnnemu.client: one cffi FFI (ABI mode) declaring the QNN headers
(``qnnemu.headers.cdef()``), the QnnLog callback that forwards messages to the Python logger
``qnnemu.client``, QnnCallError, and the small helpers every wrapper uses to build QNN
arguments (NULL-terminated config lists, client buffers) and to pick a provider from a
library's ``*_getProviders`` list.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cffi
import numpy as np

from ..headers import Q, cdef

log = logging.getLogger("qnnemu.client")

ffi = cffi.FFI()
ffi.cdef(cdef())
# The log callback receives a va_list, which on x86-64 is passed as a pointer; libc's
# vsnprintf is declared with a void * last argument so that it can be forwarded unchanged.
ffi.cdef("int vsnprintf(char *str, size_t size, const char *format, void *ap);")
# graphAddNode and backendValidateOpConfig take Qnn_OpConfig_t by value; cffi's ABI mode cannot
# pass a struct containing an anonymous union, so the calls go through a pointer type whose
# argument is a layout-identical struct with a named member (80 bytes, passed in memory).
ffi.cdef("typedef struct { Qnn_OpConfigVersion_t version; Qnn_OpConfigV1_t v1; } "
         "qnnemu_OpConfigByValue_t;"
         "typedef Qnn_ErrorHandle_t (*qnnemu_AddNodeFn_t)(void *, qnnemu_OpConfigByValue_t);")
assert ffi.sizeof("qnnemu_OpConfigByValue_t") == ffi.sizeof("Qnn_OpConfig_t")
_libc = ffi.dlopen(None)

_LOG_LEVELS = {
    "error": Q.QNN_LOG_LEVEL_ERROR, "warn": Q.QNN_LOG_LEVEL_WARN, "info": Q.QNN_LOG_LEVEL_INFO,
    "verbose": Q.QNN_LOG_LEVEL_VERBOSE, "debug": Q.QNN_LOG_LEVEL_DEBUG,
}
_PY_LEVELS = {
    Q.QNN_LOG_LEVEL_ERROR: logging.ERROR, Q.QNN_LOG_LEVEL_WARN: logging.WARNING,
    Q.QNN_LOG_LEVEL_INFO: logging.INFO, Q.QNN_LOG_LEVEL_VERBOSE: logging.DEBUG,
    Q.QNN_LOG_LEVEL_DEBUG: logging.DEBUG,
}
def make_log_callback(the_ffi, libc, logger: logging.Logger):
    """A QnnLog_Callback_t (of ``the_ffi``, which declares it and ``vsnprintf`` in ``libc``)
    that formats the message and hands it to ``logger`` at the matching Python level.  Keep it
    for the whole process: libraries may log from their own threads and even after logFree."""
    @the_ffi.callback("QnnLog_Callback_t")
    def callback(fmt, level, timestamp, args):
        try:
            buf = the_ffi.new("char[]", 4096)
            libc.vsnprintf(buf, 4096, fmt, args)
            logger.log(_PY_LEVELS.get(level, logging.DEBUG), "%s",
                       the_ffi.string(buf).decode("utf-8", "replace").rstrip("\n"))
        except Exception:  # noqa: BLE001 - an exception must never cross back into C
            pass
    return callback


_log_callback = make_log_callback(ffi, _libc, log)


class QnnCallError(RuntimeError):
    """A QNN API function returned an error code."""

    def __init__(self, function: str, code: int, message: str | None = None):
        self.function = function
        self.code = int(code)
        self.message = message or ""
        text = f"{function} failed with error {self.code}"
        super().__init__(f"{text}: {self.message}" if self.message else text)


@dataclass(frozen=True)
class ApiVersion:
    """``Qnn_ApiVersion_t``: the core API version and the backend's own API version."""
    core: tuple[int, int, int]
    backend: tuple[int, int, int]


def _null_terminated(ptrs: Sequence[Any], ctype: str):
    """A NULL-terminated ``const T **`` array, as QNN config arguments are."""
    if not ptrs:
        return ffi.NULL
    arr = ffi.new(f"{ctype} *[]", len(ptrs) + 1)
    for i, p in enumerate(ptrs):
        arr[i] = p
    return arr


def _contiguous(value, dtype) -> np.ndarray:
    """A C-contiguous array of ``dtype`` with ``value``'s shape (np.ascontiguousarray would make
    a rank-0 value 1-D)."""
    arr = np.asarray(value, dtype=dtype)
    return arr.copy() if arr.ndim == 0 else np.ascontiguousarray(arr)


def _set_buffer(t, buf, size: int, keep: list) -> None:
    keep.append(buf)
    v = t.v2 if t.version == Q.QNN_TENSOR_VERSION_2 else t.v1
    v.clientBuf.data = buf
    v.clientBuf.dataSize = size




def pick_provider(providers, count: int, describe: Callable[[Any], str],
                  accepts: Callable[[Any], bool]) -> tuple[Any, list[str]]:
    """The first of the ``count`` entries of a ``*_getProviders`` list (``providers[i]``) that
    ``accepts``, or None; and ``describe`` of each entry looked at, for the error message
    naming what a library offers when none fits."""
    seen = []
    for i in range(count):
        p = providers[i]
        seen.append(describe(p))
        if accepts(p):
            return p, seen
    return None, seen
