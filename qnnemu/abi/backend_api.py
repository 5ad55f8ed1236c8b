"""QnnBackend.h, QnnProperty.h and QnnGlobalConfig.h entries: backendCreate / SetConfig /
GetApiVersion / GetBuildId / GetSupportedOperations / ValidateOpConfig / GetProperty / Free,
propertyHasCapability and globalConfigSet (the backend object: qnnemu/core/backend.py).
"""
from __future__ import annotations

from typing import Any

from .. import _version, rules
from ..core import backend as core_backend
from ..core.backend import Backend
from ..core.graph import validate_op_config
from ..core.handles import HANDLES
from ..core.log import NULL_LOGGER
from ..errors import QnnError
from ..headers import Q
from ..location import Location
from ..rules import fail
from . import async_execute
from .library import (
    LIBRARY,
    active_logger as _active_logger,
    configs as _configs,
    entry,
    ffi,
    get as _get,
    hval as _hval,
    keepalive as _keepalive,
    no_properties,
    optional_logger as _optional_logger,
)
from .marshal import c_str, read_op_config, require


# ---------------------------------------------------------------------------- property, log
@entry
def propertyHasCapability(key):
    return core_backend.has_capability(int(key))


@entry
def backendCreate(logger, config, backend):
    require(backend, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendCreate", "backend")
    log = _optional_logger(logger, Q.QNN_BACKEND_ERROR_INVALID_HANDLE)
    configs: dict[str, Any] = {}
    for i, c in enumerate(_configs(config, "QnnBackend_Config_t", Location("backendCreate").field("config"))):
        opt = int(c.option)
        if opt == Q.QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING:
            configs["errorReporting"] = int(c.errorConfig.reportingLevel)
        elif opt == Q.QNN_BACKEND_CONFIG_OPTION_PLATFORM:
            configs["platformOption"] = c_str(c.platformOption)
        elif opt == Q.QNN_BACKEND_CONFIG_OPTION_CUSTOM:
            # The HTP backend defines no custom backend configs; the vendor's library accepts and
            # ignores one (measured, NULL or not).
            rules.warn("QNNEMU-backend-config-custom-ignored", "backendCreate", f"config[{i}].customConfig",
                       "the HTP backend defines no custom backend configs; ignored", logger=log or NULL_LOGGER)
        else:
            fail(Location("backendCreate").path(f"config[{i}].option"), "QNNEMU-backendCreate-config-option",
                 f"unknown option {opt}", code=Q.QNN_BACKEND_ERROR_INVALID_CONFIG)
    be = Backend(log, configs)
    backend[0] = ffi.cast("Qnn_BackendHandle_t", HANDLES.new(be))
    be.log.info(f"backendCreate: qnnemu {_version.__version__} (build id {core_backend.BUILD_ID})")


@entry
def backendSetConfig(backend, config):
    be = _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    for i, c in enumerate(_configs(config, "QnnBackend_Config_t", Location("backendSetConfig").field("config"))):
        opt = int(c.option)
        if opt == Q.QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING:
            be.configs["errorReporting"] = int(c.errorConfig.reportingLevel)
        elif opt == Q.QNN_BACKEND_CONFIG_OPTION_PLATFORM:
            be.configs["platformOption"] = c_str(c.platformOption)
        else:
            fail(Location("backendSetConfig").path(f"config[{i}].option"), "QNNEMU-backendSetConfig-config-option",
                 f"option {opt} cannot be set here", code=Q.QNN_BACKEND_ERROR_INVALID_CONFIG)


@entry
def backendGetApiVersion(pVersion):
    require(pVersion, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetApiVersion", "pVersion")
    core = core_backend.core_api_version()
    pVersion.coreApiVersion.major, pVersion.coreApiVersion.minor, pVersion.coreApiVersion.patch = core
    pVersion.backendApiVersion.major = Q.QNN_HTP_API_VERSION_MAJOR
    pVersion.backendApiVersion.minor = Q.QNN_HTP_API_VERSION_MINOR
    pVersion.backendApiVersion.patch = Q.QNN_HTP_API_VERSION_PATCH


@entry
def backendGetBuildId(id):
    require(id, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetBuildId", "id")
    buf = _keepalive.setdefault("build_id", ffi.new("char[]", core_backend.BUILD_ID.encode()))
    id[0] = buf


@entry
def backendGetSupportedOperations(backend, numOperations, operations):
    _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    require(numOperations, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetSupportedOperations", "numOperations")
    require(operations, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetSupportedOperations", "operations")
    table: Any = _keepalive.get("ops")   # (the op name array, its length, the strings it points to)
    if table is None:
        names = core_backend.supported_operations()
        strings = [ffi.new("char[]", s.encode()) for pair in names for s in pair] + [ffi.new("char[]", b"HTP")]
        arr = ffi.new("QnnBackend_OperationName_t[]", len(names))
        for i in range(len(names)):
            arr[i].packageName, arr[i].name, arr[i].target = strings[2 * i], strings[2 * i + 1], strings[-1]
        table = _keepalive["ops"] = (arr, len(names), strings)
    numOperations[0] = table[1]
    operations[0] = table[0]


@entry
def backendValidateOpConfig(backend, opConfig):
    be = _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    try:
        validate_op_config(read_op_config(opConfig, code=Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT,
                                          func="backendValidateOpConfig", tensor_data="borrow"))
    except QnnError as err:
        # "Unsupported" answers are part of normal partitioning: log at INFO, not ERROR.
        LIBRARY.record(err.code, "backendValidateOpConfig", str(err))
        be.log.info(str(err))
        return err.code


@entry
def backendGetProperty(backendHandle, properties):
    _get(backendHandle, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backendHandle")
    no_properties(properties, "QnnBackend_Property_t", Location("backendGetProperty"),
                  arg_code=Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, code=Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
                  rule="QNNEMU-backendGetProperty-option", why="the HTP backend defines no backend properties")


@entry
def backendFree(backend):
    be = _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    for ctx in list(be.contexts.values()):
        async_execute.drain_context(ctx)   # queued graphExecuteAsync calls run first
    be.free()
    HANDLES.release(_hval(backend))


@entry
def globalConfigSet(config):
    require(config, Q.QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG, "globalConfigSet", "config")
    for i, c in enumerate(_configs(config, "QnnGlobalConfig_t", Location("globalConfigSet").field("config"))):
        name = Q.enum("QNN_GLOBAL_CONFIG_OPTION_").get(int(c.option))
        if name is None or name.endswith("UNDEFINED"):
            fail(Location("globalConfigSet").path(f"config[{i}].option"), "QNNEMU-globalConfigSet-option",
                 f"unknown option {int(c.option)}", code=Q.QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG)
        _active_logger().info(f"globalConfigSet: {name} accepted")
