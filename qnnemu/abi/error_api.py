"""QnnError.h entries: errorGetMessage, errorGetVerboseMessage, errorFreeVerboseMessage.

The message of an error code is the last failure that returned it (the library's
``messages``, recorded by the entry framework: qnnemu/abi/framework.py), prefixed by the
code's name in the component of the function that failed.
"""
from __future__ import annotations

import threading

from ..headers import Q, constants
from ..location import Location
from ..rules import fail
from .library import LIBRARY, entry, ffi
from .marshal import require

_lock = threading.Lock()
_message_buffers: dict[int, object] = {}  # keeps returned char* alive
_verbose: dict[int, object] = {}        # address -> buffer, until errorFreeVerboseMessage


# API function prefix -> the prefix of its component's error names.
_COMPONENT = (("backend", "QNN_BACKEND_"), ("context", "QNN_CONTEXT_"), ("graph", "QNN_GRAPH_"),
              ("tensor", "QNN_TENSOR_"), ("log", "QNN_LOG_"), ("device", "QNN_DEVICE_"),
              ("profile", "QNN_PROFILE_"), ("mem", "QNN_MEM_"), ("signal", "QNN_SIGNAL_"),
              ("error", "QNN_ERROR_"), ("property", "QNN_PROPERTY_"), ("globalConfig", "QNN_GLOBAL_CONFIG_"))


def _describe(code: int, func: str) -> str:
    """The error code's name in the component of ``func`` (codes below 4000 are shared)."""
    prefix = next((p for f, p in _COMPONENT if func.startswith(f)), "QNN_COMMON_")
    names = [k for k, v in constants().items() if v == code and "ERROR" in k
             and not k.endswith(("MIN_ERROR", "MAX_ERROR"))]
    mine = [k for k in names if k.startswith(prefix)] or [k for k in names if k.startswith("QNN_COMMON_")]
    return (mine or names or [f"error {code}"])[0]


def _message_for(code: int) -> str:
    func, text = LIBRARY.message(code)
    return f"{_describe(code, func)}: {text}"


@entry
def errorGetMessage(errorHandle, errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorGetMessage", "errorMessage")
    code = int(errorHandle) & 0xFFFF
    if code == 0:
        fail(Location("errorGetMessage"), "QNNEMU-errorGetMessage-success",
             "errorHandle 0 is QNN_SUCCESS, not an error", code=Q.QNN_ERROR_INVALID_ERROR_HANDLE)
    with _lock:
        text = _message_for(code)
        buf = _message_buffers[code] = ffi.new("char[]", text.encode("utf-8", "replace"))
    errorMessage[0] = buf


@entry
def errorGetVerboseMessage(errorHandle, errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorGetVerboseMessage", "errorMessage")
    code = int(errorHandle) & 0xFFFF
    with _lock:
        text = f"(code {code}) {_message_for(code)}"
        buf = ffi.new("char[]", text.encode("utf-8", "replace"))
        _verbose[int(ffi.cast("uintptr_t", buf))] = buf
    errorMessage[0] = buf


@entry
def errorFreeVerboseMessage(errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorFreeVerboseMessage", "errorMessage")
    with _lock:
        if _verbose.pop(int(ffi.cast("uintptr_t", errorMessage)), None) is None:
            fail(Location("errorFreeVerboseMessage"), "QNNEMU-errorFreeVerboseMessage-unknown",
                 "errorMessage was not returned by errorGetVerboseMessage "
                 "(or was already freed)", code=Q.QNN_ERROR_INVALID_ARGUMENT)
