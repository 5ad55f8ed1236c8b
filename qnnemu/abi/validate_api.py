"""QnnGraph.h (QNN 2.50) QnnGraph_validate and QnnGraph_freeValidationResult: the C side of
qnnemu/core/graph_validate.py (docs/abi-compat.md, "graphValidate").

graphValidate hands out a QnnGraph_ValidationResult_t {numResults, results, overallStatus} with
one QnnGraph_NodeValidationResult_t {nodeName, status, errorCode, errorMessage} per node, in
graph order.  The backend owns that memory (the struct, the array, every string) until
graphFreeValidationResult; freeing anything else, or twice, is refused.  The vendor's x86
library (QNN 2.51) fills the two table slots but answers every call with 1000 (UNSUPPORTED_FEATURE)
and reports QNN_PROPERTY_GRAPH_SUPPORT_GRAPH_VALIDATION as not supported; qnnemu implements them.

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

import threading

from ..core.graph import Graph
from ..core.graph_validate import validate_graph
from ..core.handles import HANDLES
from ..headers import Q
from ..location import Location
from ..rules import fail
from .library import LIBRARY, configs as _configs, entry, ffi
from .marshal import require

_lock = threading.Lock()
_results: dict[int, list] = {}   # address of a handed-out result -> the cdata it owns



def _graph(handle) -> Graph:
    return HANDLES.get(int(ffi.cast("uintptr_t", handle)), Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE,
                       "graphHandle")


def _check_configs(config, func: str) -> None:
    for i, c in enumerate(_configs(config, "QnnGraph_ValidateConfig_t", Location(func).field("config"))):
        option = int(c.option)
        if option == Q.QNN_GRAPH_VALIDATE_OPTION_CUSTOM:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-graphValidate-config-custom",
                 "QNN_GRAPH_VALIDATE_OPTION_CUSTOM: the HTP backend "
                 "defines no custom validate config", code=Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE)
        fail(Location(func).path(f"config[{i}].option"), "QNNEMU-graphValidate-config-option",
             f"unknown QnnGraph_ValidateOption_t {option}", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)


@entry
def graphValidate(graphHandle, config, validationResult):
    func = "graphValidate"
    g = _graph(graphHandle)
    require(validationResult, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, func, "validationResult")
    _check_configs(config, func)
    verdict = validate_graph(g)
    n = len(verdict.nodes)
    result = ffi.new("QnnGraph_ValidationResult_t *")
    owned: list = [result]
    array = ffi.new("QnnGraph_NodeValidationResult_t[]", n) if n else ffi.NULL
    owned.append(array)
    for k, v in enumerate(verdict.nodes):
        name = ffi.new("char[]", v.name.encode("utf-8", "replace"))
        owned.append(name)
        array[k].nodeName = name
        array[k].status = (Q.QNN_GRAPH_NODE_VALIDATION_STATUS_SUPPORTED if v.supported
                           else Q.QNN_GRAPH_NODE_VALIDATION_STATUS_UNSUPPORTED)
        array[k].errorCode = v.code
        if v.supported:
            array[k].errorMessage = ffi.NULL
        else:
            text = ffi.new("char[]", v.message.encode("utf-8", "replace"))
            owned.append(text)
            array[k].errorMessage = text
            g.log.info(f"{func}: graph '{g.name}': node '{v.name}' is UNSUPPORTED ({v.code}): {v.message}")
    result.numResults = n
    result.results = array
    result.overallStatus = verdict.overall
    if verdict.finalize_error is not None:
        # Graph-level reasons have no node result: errorGetMessage(overallStatus) gives the text.
        err = verdict.finalize_error
        LIBRARY.record(err.code, func, str(err))
        g.log.info(f"{func}: graph '{g.name}': graphFinalize would return {err.code}: {err}")
    with _lock:
        _results[int(ffi.cast("uintptr_t", result))] = owned
    validationResult[0] = result
    bad = sum(1 for v in verdict.nodes if not v.supported)
    g.log.debug(f"{func}: graph '{g.name}': {n - bad} of {n} node(s) supported, overall status "
                f"{verdict.overall}")


@entry
def graphFreeValidationResult(validationResult):
    func = "graphFreeValidationResult"
    require(validationResult, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, func, "validationResult")
    with _lock:
        if _results.pop(int(ffi.cast("uintptr_t", validationResult)), None) is None:
            fail(Location(func), "QNNEMU-graphFreeValidationResult-unknown",
                 "validationResult was not returned by graphValidate (or was already "
                 "freed)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)


def live_results() -> int:
    """How many validation results are handed out and not freed (for tests)."""
    with _lock:
        return len(_results)
