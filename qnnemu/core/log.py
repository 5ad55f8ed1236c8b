"""QnnLog.h: loggers created by the application, and the Python ``logging`` mirror.

A ``Logger`` forwards messages at or below its level to the app's callback (the ABI layer
supplies ``sink(level, message)``, which formats nothing further: QNN callbacks get a printf
format and a va_list, and we pass "%s" with the finished text).  Every message also goes to
the ``qnnemu`` Python logger, never to stdout.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..headers import Q

PY_LOGGER = logging.getLogger("qnnemu")
# A library logger: silent unless the application configures logging.
PY_LOGGER.addHandler(logging.NullHandler())

LEVEL_NAMES = {
    Q.QNN_LOG_LEVEL_ERROR: "ERROR",
    Q.QNN_LOG_LEVEL_WARN: "WARN",
    Q.QNN_LOG_LEVEL_INFO: "INFO",
    Q.QNN_LOG_LEVEL_VERBOSE: "VERBOSE",
    Q.QNN_LOG_LEVEL_DEBUG: "DEBUG",
}
_PY_LEVELS = {
    Q.QNN_LOG_LEVEL_ERROR: logging.ERROR,
    Q.QNN_LOG_LEVEL_WARN: logging.WARNING,
    Q.QNN_LOG_LEVEL_INFO: logging.INFO,
    Q.QNN_LOG_LEVEL_VERBOSE: logging.DEBUG,
    Q.QNN_LOG_LEVEL_DEBUG: logging.DEBUG,
}

_START = time.monotonic()


def valid_level(level: int) -> bool:
    return level in LEVEL_NAMES


class Logger:
    def __init__(self, sink: Callable[[int, int, str], None] | None, level: int):
        self.sink = sink
        self.level = level
        self.freed = False

    def emit(self, level: int, message: str) -> None:
        PY_LOGGER.log(_PY_LEVELS.get(level, logging.DEBUG), message)
        if self.sink is not None and not self.freed and level <= self.level:
            # Timestamps are microseconds since the library started, like a monotonic clock.
            self.sink(level, int((time.monotonic() - _START) * 1e6), f"qnnemu {message}\n")

    def error(self, message: str) -> None:
        self.emit(Q.QNN_LOG_LEVEL_ERROR, message)

    def warn(self, message: str) -> None:
        self.emit(Q.QNN_LOG_LEVEL_WARN, message)

    def info(self, message: str) -> None:
        self.emit(Q.QNN_LOG_LEVEL_INFO, message)

    def debug(self, message: str) -> None:
        self.emit(Q.QNN_LOG_LEVEL_DEBUG, message)


class _Fallback(Logger):
    """Used before/without an app logger: Python logging only."""

    def __init__(self):
        super().__init__(None, Q.QNN_LOG_LEVEL_DEBUG)


NULL_LOGGER = _Fallback()
