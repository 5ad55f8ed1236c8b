"""QnnLog.h entries: logCreate, logSetLogLevel, logFree (the logger objects: qnnemu/core/log.py).

A logger's callback is reached through csrc/abi_shim.h's ``qnnemu_log_emit`` (C varargs).
"""
from __future__ import annotations

from ..core.handles import HANDLES
from ..core.log import Logger, valid_level
from ..headers import Q
from ..location import Location
from ..rules import fail
from .library import entry, ffi, get as _get, hval as _hval, lib
from .marshal import require


@entry
def logCreate(callback, maxLogLevel, logger):
    require(logger, Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "logCreate", "logger")
    if not valid_level(int(maxLogLevel)):
        fail(Location("logCreate").path("maxLogLevel"), "QNNEMU-logCreate-level",
             f"{int(maxLogLevel)} is not a QnnLog_Level_t "
             f"(1=ERROR .. 5=DEBUG)", code=Q.QNN_LOG_ERROR_INVALID_ARGUMENT)
    sink = None
    if callback != ffi.NULL:
        cb = ffi.cast("void *", callback)

        def sink(level, timestamp, message, _cb=cb):
            lib.qnnemu_log_emit(_cb, level, timestamp, message.encode("utf-8", "replace"))
    logger[0] = ffi.cast("Qnn_LogHandle_t", HANDLES.new(Logger(sink, int(maxLogLevel))))


@entry
def logSetLogLevel(logger, maxLogLevel):
    log = _get(logger, Logger, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    if not valid_level(int(maxLogLevel)):
        fail(Location("logSetLogLevel").path("maxLogLevel"), "QNNEMU-logSetLogLevel-level",
             f"{int(maxLogLevel)} is not a QnnLog_Level_t", code=Q.QNN_LOG_ERROR_INVALID_ARGUMENT)
    log.level = int(maxLogLevel)


@entry
def logFree(logger):
    log = _get(logger, Logger, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    log.freed = True
    HANDLES.release(_hval(logger))
