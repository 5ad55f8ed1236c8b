"""QnnInterface.h: the 75 entries of QnnInterface_ImplementationV2_39_t, as cffi ``def_extern``.

Each entry converts C arguments (marshal.py), calls the core and returns the QNN error code.
Rules at this boundary:
- every ``def_extern`` declares a non-zero ``error=`` (QNN_COMMON_ERROR_GENERAL) and an
  ``onerror`` that logs through the app's QnnLog callback: an unexpected Python exception can
  never come back as QNN_SUCCESS;
- expected failures are ``QnnError``s: logged (function, parameter path, rule id, value) and
  their code returned; the text is kept for ``errorGetMessage``;
- entries not implemented yet return the component's NOT_SUPPORTED / UNSUPPORTED_FEATURE code
  and log why.
"""
from __future__ import annotations

import threading
import traceback

import numpy as np

from .. import _version, rules
from ..core import backend as core_backend
from ..core import dtypes
from ..core.backend import Backend
from ..core.context import Context
from ..core.device import Device, DeviceModel, device_count, model_from_configs, soc_rank
from ..htp import settings as htp_settings
from ..htp.device_model import set_newest_device_lookup
from ..core.graph import Graph, validate_op_config
from ..core.handles import HANDLES
from ..core.log import NULL_LOGGER, PY_LOGGER, Logger, valid_level
from ..core.tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES
from ..errors import QnnError
from ..headers import Q, constants
from . import device_config, marshal
from .marshal import c_str, config_list, read_op_config, read_tensor, require

ffi = None
lib = None
PREFIX = "qnnemu_abi_"

_state_lock = threading.Lock()
_messages: dict[int, tuple[str, str]] = {}  # code -> (function, last message) for errorGetMessage
_message_buffers: dict[int, object] = {}  # keeps returned char* alive
_verbose: dict[int, object] = {}        # address -> buffer, until errorFreeVerboseMessage
_platform_infos: dict[int, list] = {}   # address -> owned cdata, until deviceFreePlatformInfo
_keepalive: dict[str, object] = {}
# Device handles live here, at the ABI boundary: the HTP model asks for the newest live device
# through this lookup (power votes and backendValidateOpConfig have no device argument).
set_newest_device_lookup(lambda: next(reversed(HANDLES.live(Device)), None))
# Why the embedded init refused to hand out the table (csrc/shim.c writes it on stderr).
init_failure: str | None = None


def _active_logger() -> Logger:
    """The app logger for messages that belong to no handle: the newest live one."""
    loggers = HANDLES.live(Logger)
    return loggers[-1] if loggers else NULL_LOGGER


def _logger_for_args(args) -> Logger:
    """The app logger of the first live handle among a call's arguments (its backend's)."""
    for a in args:
        if isinstance(a, ffi.CData) and ffi.typeof(a).kind == "pointer" and a != ffi.NULL:
            obj = HANDLES.lookup(int(ffi.cast("uintptr_t", a)))
            if isinstance(obj, Logger):
                return obj
            log = getattr(obj, "log", None)
            if isinstance(log, Logger):
                return log
    return _active_logger()


def _fail(func: str, err: QnnError, logger: Logger | None = None) -> int:
    with _state_lock:
        _messages[err.code] = (func, str(err))
    (logger or _active_logger()).error(str(err))
    return err.code


def _onerror_for(name: str):
    def onerror(exc_type, exc_value, tb):
        text = "".join(traceback.format_exception(exc_type, exc_value, tb))
        msg = f"{name}: internal error (returned QNN_COMMON_ERROR_GENERAL): {exc_value!r}"
        with _state_lock:
            _messages[Q.QNN_COMMON_ERROR_GENERAL] = (name, msg)
        try:
            _active_logger().error(msg)
            PY_LOGGER.debug(text)
        except Exception:  # logging must not raise inside cffi's error path
            pass
        return None
    return onerror


class _CallLogger:
    """The logger of one API call for warning rules (qnnemu/rules.py), found from its
    arguments when the first warning is logged."""

    __slots__ = ("args",)

    def __init__(self, args):
        self.args = args

    def warn(self, text: str) -> None:
        _logger_for_args(self.args).warn(text)


_ENTRIES: dict[str, object] = {}       # table slot -> wrapper (qnnemu_abi_<slot>)
_PERF_ENTRIES: dict[str, object] = {}  # perf infrastructure function -> wrapper (qnnemu_perf_<fn>)


def entry(fn, registry: dict | None = None):
    """Registers ``fn`` as the implementation of table slot ``fn.__name__`` (or in ``registry``)."""
    name = fn.__name__

    def wrapper(*args):
        # Warning rules raised during the call go to the app logger of its handles (resolved
        # only when one is raised: the execute hot path pays a context-variable set only).
        token = rules._CURRENT.set(_CallLogger(args))
        try:
            code = fn(*args)
            return Q.QNN_SUCCESS if code is None else code
        except QnnError as err:
            if not err.detail.startswith(name + ":"):
                err = QnnError(err.code, f"{name}: {err.detail}", rule=err.rule)
            return _fail(name, err, _logger_for_args(args))
        finally:
            rules._CURRENT.reset(token)

    wrapper.__name__ = name
    (_ENTRIES if registry is None else registry)[name] = wrapper
    return fn


def perf_entry(fn):
    """Registers an HTP perf infrastructure function handed out by deviceGetInfrastructure."""
    return entry(fn, _PERF_ENTRIES)


def not_supported(name: str, code: int, why: str, check=None):
    """Table slot ``name`` answers ``code`` and logs why; ``check(*args)`` first validates what
    the vendor's library validates before answering (e.g. the handle argument)."""
    def fn(*args):
        if check is not None:
            check(*args)
        raise QnnError(code, f"{name}: not supported by qnnemu {_version.__version__}: {why}",
                       rule="QNNEMU-not-supported")
    fn.__name__ = name
    entry(fn)


def _configs(pp, ctype: str) -> list:
    return config_list(pp, ctype)


# ---------------------------------------------------------------------------- property, log
@entry
def propertyHasCapability(key):
    return core_backend.has_capability(int(key))


@entry
def logCreate(callback, maxLogLevel, logger):
    require(logger, Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "logCreate", "logger")
    if not valid_level(int(maxLogLevel)):
        raise QnnError(Q.QNN_LOG_ERROR_INVALID_ARGUMENT,
                       f"logCreate: maxLogLevel: {int(maxLogLevel)} is not a QnnLog_Level_t "
                       f"(1=ERROR .. 5=DEBUG)", rule="QNNEMU-logCreate-level")
    sink = None
    if callback != ffi.NULL:
        cb = ffi.cast("void *", callback)

        def sink(level, timestamp, message, _cb=cb):
            lib.qnnemu_log_emit(_cb, level, timestamp, message.encode("utf-8", "replace"))
    logger[0] = ffi.cast("Qnn_LogHandle_t", HANDLES.new(Logger(sink, int(maxLogLevel))))


def _get(handle, kind, code, what):
    return HANDLES.get(int(ffi.cast("uintptr_t", handle)), kind, code, what)


def _hval(handle) -> int:
    return int(ffi.cast("uintptr_t", handle))


@entry
def logSetLogLevel(logger, maxLogLevel):
    log = _get(logger, Logger, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    if not valid_level(int(maxLogLevel)):
        raise QnnError(Q.QNN_LOG_ERROR_INVALID_ARGUMENT,
                       f"logSetLogLevel: maxLogLevel: {int(maxLogLevel)} is not a QnnLog_Level_t",
                       rule="QNNEMU-logSetLogLevel-level")
    log.level = int(maxLogLevel)


@entry
def logFree(logger):
    log = _get(logger, Logger, Q.QNN_LOG_ERROR_INVALID_HANDLE, "logger")
    log.freed = True
    HANDLES.release(_hval(logger))


def _optional_logger(handle, code: int) -> Logger | None:
    if handle == ffi.NULL:
        return None
    return _get(handle, Logger, code, "logger")


# ---------------------------------------------------------------------------------- backend
@entry
def backendCreate(logger, config, backend):
    require(backend, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendCreate", "backend")
    log = _optional_logger(logger, Q.QNN_BACKEND_ERROR_INVALID_HANDLE)
    configs = {}
    for i, c in enumerate(_configs(config, "QnnBackend_Config_t")):
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
            raise QnnError(Q.QNN_BACKEND_ERROR_INVALID_CONFIG,
                           f"backendCreate: config[{i}].option: unknown option {opt}",
                           rule="QNNEMU-backendCreate-config-option")
    be = Backend(log, configs)
    backend[0] = ffi.cast("Qnn_BackendHandle_t", HANDLES.new(be))
    be.log.info(f"backendCreate: qnnemu {_version.__version__} (build id {core_backend.BUILD_ID})")


@entry
def backendSetConfig(backend, config):
    be = _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    for i, c in enumerate(_configs(config, "QnnBackend_Config_t")):
        opt = int(c.option)
        if opt == Q.QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING:
            be.configs["errorReporting"] = int(c.errorConfig.reportingLevel)
        elif opt == Q.QNN_BACKEND_CONFIG_OPTION_PLATFORM:
            be.configs["platformOption"] = c_str(c.platformOption)
        else:
            raise QnnError(Q.QNN_BACKEND_ERROR_INVALID_CONFIG,
                           f"backendSetConfig: config[{i}].option: option {opt} cannot be set here",
                           rule="QNNEMU-backendSetConfig-config-option")


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
    table = _keepalive.get("ops")
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
        validate_op_config(read_op_config(opConfig, code=Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT))
    except QnnError as err:
        # "Unsupported" answers are part of normal partitioning: log at INFO, not ERROR.
        with _state_lock:
            _messages[err.code] = ("backendValidateOpConfig", str(err))
        be.log.info(str(err))
        return err.code


@entry
def backendGetProperty(backendHandle, properties):
    _get(backendHandle, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backendHandle")
    require(properties, Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetProperty", "properties")
    for i, p in enumerate(_configs(properties, "QnnBackend_Property_t")):
        raise QnnError(Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
                       f"backendGetProperty: properties[{i}].option: {int(p.option)}: the HTP backend "
                       f"defines no backend properties", rule="QNNEMU-backendGetProperty-option")


@entry
def backendFree(backend):
    be = _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    be.free()
    HANDLES.release(_hval(backend))


# The vendor's library checks the backend handle first (INVALID_HANDLE, NULL included).
not_supported("backendRegisterOpPackage", Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
              "op packages are not emulated yet; all ops come from the built-in qti.aisw package",
              check=lambda backend, *_: _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend"))


@entry
def backendRegisterOpPackageFromBinary(backend, opPackageBuffer, opPackageBufferSize, interfaceProvider, target):
    """QNN 2.50.  The vendor's x86 library (2.51) checks the backend handle (INVALID_HANDLE) and
    then answers NOT_SUPPORTED whatever the buffer holds ("Register Op Package from binary is not
    supported"); qnnemu does the same."""
    _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    raise QnnError(Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
                   f"backendRegisterOpPackageFromBinary: not supported by qnnemu {_version.__version__}: op "
                   f"packages are not emulated (from a file or from a buffer), as the vendor's x86 library does "
                   f"not register them from a buffer either; all ops come from the built-in qti.aisw package",
                   rule="QNNEMU-not-supported")


# ----------------------------------------------------------------------------------- device
def _device_configs(config, func: str, base=None, log=None, layout: str | None = None):
    """QnnDevice_Config_t list -> (DeviceModel, layout the HTP custom configs showed or None).

    HTP custom configs are read in the layout their client was built with (QNN 2.43 or 2.50
    headers: device_config.py, docs/abi-compat.md); ``layout`` is the device's earlier one.
    SOC wins over ARCH (qnnemu/core/device.py).  Options the vendor's library refuses are
    refused with its codes."""
    log = log or _active_logger()
    customs: list[tuple[int, int]] = []
    for i, c in enumerate(_configs(config, "QnnDevice_Config_t")):
        opt = int(c.option)
        if opt == Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM:
            require(c.customConfig, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, func, f"config[{i}].customConfig")
            customs.append((i, int(ffi.cast("uintptr_t", c.customConfig))))
        elif opt == Q.QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO:
            pass  # a platform description supplied by the app; the emulated device is fixed
        else:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: config[{i}].option: unknown option {opt}", rule="QNNEMU-device-config-option")

    def read(address: int, offset: int, size: int) -> bytes:
        return bytes(ffi.buffer(ffi.cast("char *", address + offset), size))

    options = device_config.read_htp_device_configs(
        customs, read, soc_rank, layout, lambda soc, arch: device_count(soc, arch, base))
    soc = arch = signed = None
    soc_path = arch_path = None
    soc_note = ""
    device_ids: list[tuple[str, int]] = []
    for o in options:
        path = o.path
        if o.option in device_config.KNOWN_OPTIONS:
            log.debug(f"{func}: {path}: {o.name} read in the {device_config.LAYOUT_TEXT[o.layout]}: {o.reason}")
        if o.option == device_config.SOC:
            soc, soc_path = o.soc_model, f"{path}.socModel"
            soc_note = (f"; read in the {device_config.LAYOUT_TEXT[o.layout]}, the other layout's word "
                        f"holds {o.other_soc_word}")
        elif o.option == device_config.ARCH:
            arch, arch_path = o.arch, f"{path}.arch.arch"
            device_ids.append((f"{path}.arch.deviceId", o.device_id))
        elif o.option == device_config.SIGNEDPD:
            signed = o.enabled
            device_ids.append((f"{path}.useSignedProcessDomain.deviceId", o.device_id))
        elif o.option == device_config.SECUREPD:
            # The vendor's library refuses it with INVALID_CONFIG ("Unsupported config option 3").
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: {path}.option: SECUREPD (secure process domain) is not available on "
                           f"the HTP backend (the vendor's library refuses it too)", rule="QNNEMU-device-securepd")
        elif o.option in (device_config.ASYNC_EXECUTE, device_config.DYNAMIC_PARTITIONING,
                          device_config.HTP_EXTENSION):
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: {path}.option: {o.name} ({o.option}) is not supported by the HTP backend "
                           f"on this platform (the vendor's library refuses it too)",
                           rule="QNNEMU-device-option-unsupported")
        elif o.option == device_config.APP_UID:
            # The vendor's library: "UID is not supported for this device", code 1000.
            raise QnnError(Q.QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE,
                           f"{func}: {path}.appUid: an application UID is not supported for this device "
                           f"(the vendor's library refuses it too)", rule="QNNEMU-device-app-uid")
        else:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: {path}.option: unknown HTP device option {o.option}",
                           rule="QNNEMU-device-config-option")
    model = model_from_configs(soc, arch, signed, func=func, base=base, log=log,
                               soc_path=soc_path or "config[].customConfig.socModel", soc_note=soc_note,
                               arch_path=arch_path or "config[].customConfig.arch.arch")
    for path, dev_id in device_ids:
        # The vendor's library accepts any deviceId (measured: 5 for ARCH, 7 for SIGNEDPD).
        if dev_id >= model.devices:
            rules.warn("QNNEMU-device-id-ignored", func, path,
                       f"device {dev_id} does not exist; {model.name} has {model.devices} HTP device(s); the "
                       f"option applies to the device", logger=log)
    return model, device_config.shown_layout(options, layout)


@entry
def deviceCreate(logger, config, device):
    require(device, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceCreate", "device")
    log = _optional_logger(logger, Q.QNN_DEVICE_ERROR_INVALID_HANDLE)
    model, layout = _device_configs(config, "deviceCreate", log=log)
    dev = Device(model, log or _active_logger(), config_layout=layout)
    device[0] = ffi.cast("Qnn_DeviceHandle_t", HANDLES.new(dev))
    dev.log.info(f"deviceCreate: emulated HTP v{dev.model.arch}, SoC model {dev.model.soc_model}, "
                    f"VTCM {dev.model.vtcm_mb} MiB")


@entry
def deviceSetConfig(device, config):
    dev = _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    dev.model, dev.config_layout = _device_configs(config, "deviceSetConfig", base=dev.model, log=dev.log,
                                                   layout=dev.config_layout)


@entry
def deviceFree(device):
    dev = _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    users = [c for c in HANDLES.live(Context) if c.device is dev]
    if users:
        raise QnnError(Q.QNN_DEVICE_ERROR_ASSOCIATED_TO_CONTEXT,
                       f"deviceFree: device is still used by {len(users)} context(s); free them first",
                       rule="QNNEMU-deviceFree-in-use")
    HANDLES.release(_hval(device))


def _platform_info(model) -> object:
    """A QnnDevice_PlatformInfo_t (v1) describing the device's SoC: one hardware device per NSP
    (``model.devices``), each with ``model.cores`` NSP cores and the ON_CHIP extension
    (QnnHtpDevice_OnChipDeviceInfoExtension_t: VTCM in MiB, socModel, signed-PD and DLBC
    support, arch).  Every emulated SoC is a phone/PC/auto part with on-chip NSPs, so every
    device is ON_CHIP (never QNN 2.50's OFF_CHIP).  Owned until deviceFreePlatformInfo."""
    n_dev, n_cores = max(1, int(model.devices)), max(1, int(model.cores))
    info = ffi.new("QnnDevice_PlatformInfo_t *")
    hw = ffi.new("QnnDevice_HardwareDeviceInfo_t[]", n_dev)
    owned = [info, hw]
    for d in range(n_dev):
        cores = ffi.new("QnnDevice_CoreInfo_t[]", n_cores)
        for k in range(n_cores):
            cores[k].version = Q.QNN_DEVICE_CORE_INFO_VERSION_1
            cores[k].v1.coreId = k
            cores[k].v1.coreType = Q.QNN_HTP_CORE_TYPE_NSP
        ext = ffi.new("QnnHtpDevice_DeviceInfoExtension_t *")
        ext.devType = Q.QNN_HTP_DEVICE_TYPE_ON_CHIP
        ext.onChipDevice.vtcmSize = model.vtcm_mb
        ext.onChipDevice.socModel = model.soc_model
        ext.onChipDevice.signedPdSupport = model.signed_pd
        ext.onChipDevice.dlbcSupport = model.dlbc
        ext.onChipDevice.arch = model.arch
        hw[d].version = Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1
        hw[d].v1.deviceId = d
        hw[d].v1.deviceType = Q.QNN_HTP_DEVICE_TYPE_ON_CHIP
        hw[d].v1.numCores = n_cores
        hw[d].v1.cores = cores
        hw[d].v1.deviceInfoExtension = ffi.cast("QnnDevice_DeviceInfoExtension_t", ext)
        owned += [cores, ext]
    info.version = Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1
    info.v1.numHwDevices = n_dev
    info.v1.hwDevices = hw
    _platform_infos[int(ffi.cast("uintptr_t", info))] = owned
    return info


@entry
def deviceGetPlatformInfo(logger, platformInfo):
    """The emulated platform: the SoC of the newest live device (deviceCreate's SOC/ARCH configs
    choose the emulated chip), the default device (SM8350 or QNNEMU_SOC_MODEL) before any device exists.
    ``logger`` may be NULL; a garbage or freed one is refused with INVALID_HANDLE (as the
    vendor's library does)."""
    _optional_logger(logger, Q.QNN_DEVICE_ERROR_INVALID_HANDLE)
    require(platformInfo, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceGetPlatformInfo", "platformInfo")
    devices = HANDLES.live(Device)
    platformInfo[0] = _platform_info(devices[-1].model if devices else DeviceModel())


@entry
def deviceGetInfo(device, platformInfo):
    """The platform info of ``device``'s configured SoC."""
    dev = _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    require(platformInfo, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceGetInfo", "platformInfo")
    platformInfo[0] = _platform_info(dev.model)


@entry
def deviceFreePlatformInfo(logger, platformInfo):
    _optional_logger(logger, Q.QNN_DEVICE_ERROR_INVALID_HANDLE)   # NULL, or a live logger (vendor)
    require(platformInfo, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceFreePlatformInfo", "platformInfo")
    if _platform_infos.pop(int(ffi.cast("uintptr_t", platformInfo)), None) is None:
        raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT,
                       "deviceFreePlatformInfo: platformInfo was not returned by deviceGetPlatformInfo "
                       "or deviceGetInfo (or was already freed)", rule="QNNEMU-deviceFreePlatformInfo-unknown")


@entry
def deviceGetInfrastructure(deviceInfra):
    require(deviceInfra, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceGetInfrastructure", "deviceInfra")
    infra = _keepalive.get("infra")
    if infra is None:
        infra = ffi.new("QnnHtpDevice_Infrastructure_t *")
        infra.infraType = Q.QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_PERF
        perf = infra.perfInfra
        perf.createPowerConfigId = lib.qnnemu_perf_createPowerConfigId
        perf.destroyPowerConfigId = lib.qnnemu_perf_destroyPowerConfigId
        perf.setPowerConfig = lib.qnnemu_perf_setPowerConfig
        perf.setMemoryConfig = lib.qnnemu_perf_setMemoryConfig
        _keepalive["infra"] = infra
    # The parameter is declared const but is where the infrastructure pointer is written.
    ffi.cast("QnnDevice_Infrastructure_t *", deviceInfra)[0] = ffi.cast("QnnDevice_Infrastructure_t", infra)


# ---------------------------------------------------------------------------------- context
def _htp_custom(c, i: int, func: str, ctype: str, prefix: str, code: int, rule: str,
                tolerate_undefined: bool = False) -> tuple[str, dict]:
    """An HTP custom config behind ``customConfig``: (option name, copied fields).  UNKNOWN is
    refused; an option value the headers do not define (or a RESERVED one) is refused too,
    unless ``tolerate_undefined`` (graph configs: the vendor ignores those) -- then its name is
    ``{prefix}<value>``."""
    require(c.customConfig, code, func, f"config[{i}].customConfig")
    cc = ffi.cast(f"{ctype} *", c.customConfig)
    value = int(cc.option)
    name = Q.enum(prefix).get(value)
    unknown = name is not None and name.endswith("UNKNOWN")
    if unknown or not tolerate_undefined and (name is None or "RESERVED" in name):
        raise QnnError(code, f"{func}: config[{i}].customConfig.option: unknown {ctype} option {value}",
                       rule=rule)
    if name is None or "RESERVED" in name:
        return f"{prefix}{value}", {"option": value}
    return name, marshal.to_python(cc[0])


def _context_option_from_newer_backend(value: int) -> bool:
    """An HTP context option value above the last one the headers define (not UNKNOWN)."""
    defined = [v for v, n in Q.enum("QNN_HTP_CONTEXT_CONFIG_OPTION_").items() if not n.endswith("UNKNOWN")]
    return max(defined) < value < Q.QNN_HTP_CONTEXT_CONFIG_OPTION_UNKNOWN


# QNN_CONTEXT_CONFIG_ENABLE_GRAPHS / GRAPH_RETENTION_ORDER name lists: at most this many names.
_MAX_NAME_LIST = 65536


def _name_list(ptr, func: str, path: str) -> list[str]:
    """A NULL-terminated ``const char * const *`` list of graph names."""
    if ptr == ffi.NULL:
        raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, f"{func}: {path}: the name list is NULL",
                       rule="QNNEMU-context-config-value")
    names = []
    for k in range(_MAX_NAME_LIST + 1):
        if ptr[k] == ffi.NULL:
            return names
        if k == _MAX_NAME_LIST:
            break
        names.append(c_str(ptr[k]))
    raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                   f"{func}: {path}: no NULL terminator within {_MAX_NAME_LIST} names",
                   rule="QNNEMU-context-config-value")


def _context_configs(config, func: str, model=None) -> dict:
    """QnnContext_Config_t options, recorded in the context's configs dict. Load-time options
    (ENABLE_GRAPHS, BINARY_COMPATIBILITY, PERSISTENT_BINARY, DEFER_GRAPH_INIT) are applied by
    the contextCreateFromBinary* entries (context_api.py); MEMORY_LIMIT_HINT, the async queue
    depth and the graph retention order (graph switching) are recorded only.  HTP custom
    configs follow the seed's table and rules (qnnemu/htp/settings.py ``check_context_option``,
    groups: qnnemu/htp/groups.py) against ``model``, the context's device (default device
    without one)."""
    model = model if model is not None else DeviceModel()
    out: dict = {}
    for i, c in enumerate(_configs(config, "QnnContext_Config_t")):
        opt = int(c.option)
        if opt == Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH:
            if int(c.asyncExeQueueDepth.type) != Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC:
                raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                               f"{func}: config[{i}].asyncExeQueueDepth.type: {int(c.asyncExeQueueDepth.type)} is not "
                               f"QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC",
                               rule="QNNEMU-context-config-value")
            out["asyncExecutionQueueDepth"] = int(c.asyncExeQueueDepth.depth)
        elif opt == Q.QNN_CONTEXT_CONFIG_ENABLE_GRAPHS:
            out["enableGraphs"] = _name_list(c.enableGraphs, func, f"config[{i}].enableGraphs")
        elif opt == Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT:
            out["memoryLimitHintMb"] = int(c.memoryLimitHint)
        elif opt == Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY:
            out["persistentBinary"] = bool(c.isPersistentBinary)
        elif opt == Q.QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY:
            value = int(c.binaryCompatibilityType)
            if value not in (Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT):
                raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                               f"{func}: config[{i}].binaryCompatibilityType: {value} is neither "
                               f"QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE (0) nor _STRICT (1)",
                               rule="QNNEMU-context-config-value")
            out["binaryCompatibility"] = value
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT:
            out["deferGraphInit"] = bool(c.isGraphInitDeferred)
        elif opt == Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER:
            out["graphRetentionOrder"] = _name_list(c.graphRetentionOrder, func, f"config[{i}].graphRetentionOrder")
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_PRIORITY:
            out["priority"] = htp_settings.check_priority(int(c.priority), func, f"config[{i}].priority",
                                                          Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "context-priority-value")
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_ERROR_REPORTING:
            out["errorReporting"] = int(c.errorConfig.reportingLevel)
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_OEM_STRING:
            out["oemString"] = c_str(c.oemString)
        elif opt == Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM:
            prefix = "QNN_HTP_CONTEXT_CONFIG_OPTION_"
            if c.customConfig != ffi.NULL and _context_option_from_newer_backend(
                    int(ffi.cast("QnnHtpContext_CustomConfig_t *", c.customConfig).option)):
                # The vendor refuses 0, the RESERVED values and UNKNOWN but ignores the values
                # above the last option it defines (a newer SDK's options).
                rules.warn("QNNEMU-context-config-option-ignored", func, f"config[{i}].customConfig.option",
                           f"{int(ffi.cast('QnnHtpContext_CustomConfig_t *', c.customConfig).option)} is not an "
                           f"HTP context option this backend knows; ignored")
                continue
            name, value = _htp_custom(c, i, func, "QnnHtpContext_CustomConfig_t", prefix,
                                      Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "QNNEMU-context-config-option")
            htp_settings.check_context_option(name[len(prefix):], value, func=func, path=f"config[{i}].customConfig",
                                              model=model, out=out)
            out.setdefault("htp", {})[name] = value
        else:
            raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_CONFIG,
                           f"{func}: config[{i}].option: option {opt} is not supported",
                           rule="QNNEMU-context-config-option")
    htp_settings.check_context_options(out, func=func, model=model)
    return out


@entry
def contextCreate(backend, device, config, context):
    be = _get(backend, Backend, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "backend")
    require(context, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextCreate", "context")
    dev = None if device == ffi.NULL else _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    configs = _context_configs(config, "contextCreate", dev.model if dev is not None else None)
    context[0] = ffi.cast("Qnn_ContextHandle_t", be.create_context(dev, be.log, configs))


@entry
def contextSetConfig(context, config):
    """Updates the context's configs; PRIORITY also sets the priority of every graph of the
    context (seed 002 "Graph Priority"), except in a concurrent sharing group."""
    func = "contextSetConfig"
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    new = _context_configs(config, func, ctx.device.model if ctx.device is not None else None)
    if "priority" in new:
        htp_settings.check_priority_change(ctx, func, "config[].priority")
        for g in ctx.graphs.values():
            g.configs["priority"] = new["priority"]
    htp = new.pop("htp", None)
    if htp:
        ctx.configs.setdefault("htp", {}).update(htp)
    ctx.configs.update(new)


@entry
def contextGetProperty(contextHandle, properties):
    """QnnHtpContext_CustomProperty_t from the context's prepared graphs (qnnemu/htp/settings.py):
    buffer start alignment, the spill-fill buffer (the group's when the context is in one), the
    weights buffer and the VTCM backup buffer."""
    ctx = _get(contextHandle, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextHandle")
    require(properties, Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetProperty", "properties")
    for i, p in enumerate(_configs(properties, "QnnContext_Property_t")):
        if int(p.option) != Q.QNN_CONTEXT_PROPERTY_OPTION_CUSTOM or p.customProperty == ffi.NULL:
            raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT,
                           f"contextGetProperty: properties[{i}].option: {int(p.option)} (only CUSTOM "
                           f"with a QnnHtpContext_CustomProperty_t is defined)", rule="QNNEMU-contextGetProperty-option")
        cp = ffi.cast("QnnHtpContext_CustomProperty_t *", p.customProperty)
        opt = int(cp.option)
        if opt == Q.QNN_HTP_CONTEXT_GET_PROP_BUFFER_START_ALIGNMENT:
            cp.bufferStartAlignment = htp_settings.buffer_start_alignment(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE:
            cp.spillfillBufferSize = htp_settings.spill_fill_buffer_bytes(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE:
            cp.weightsBufferSize = htp_settings.weights_buffer_bytes(ctx)
        elif opt == Q.QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE:   # QNN 2.50
            cp.vtcmBackupBufferSize = htp_settings.vtcm_backup_buffer_bytes(ctx)
        else:
            raise QnnError(Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT,
                           f"contextGetProperty: properties[{i}].customProperty.option: unknown option {opt}",
                           rule="QNNEMU-contextGetProperty-option")


@entry
def contextFree(context, profile):
    ctx = _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    call = profile_api.start(profile, "contextFree", Q.QNN_CONTEXT_ERROR_SET_PROFILE)
    with profile_api.recording(call) as rec:
        ctx.backend.free_context(_hval(context))
    profile_api.commit(rec, "deinit")



# ------------------------------------------------------------------------------------ graph
def _graph_configs(config, func: str, *, context=None, graph=None) -> dict:
    """QnnGraph_Config_t options -> the graph's configs dict (layout: qnnemu/htp/settings.py).
    HTP custom configs are checked against the seed's table and the context's device; with
    ``graph`` (graphSetConfig) also when each option may still change."""
    ctx = context if context is not None else getattr(graph, "context", None)
    model = ctx.device.model if getattr(ctx, "device", None) is not None else DeviceModel()
    out: dict = {}
    prefix = "QNN_HTP_GRAPH_CONFIG_OPTION_"
    for i, c in enumerate(_configs(config, "QnnGraph_Config_t")):
        opt = int(c.option)
        if opt == Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY:
            out["priority"] = htp_settings.check_priority(int(c.priority), func, f"config[{i}].priority",
                                                          Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graph-priority-value")
            if graph is not None and int(c.priority) != int(graph.configs.get("priority", Q.QNN_PRIORITY_DEFAULT)):
                htp_settings.check_priority_change(ctx, func, f"config[{i}].priority")
        elif opt == Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM:
            name, value = _htp_custom(c, i, func, "QnnHtpGraph_CustomConfig_t", prefix,
                                      Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-graph-config-option",
                                      tolerate_undefined=True)
            short, path = name[len(prefix):], f"config[{i}].customConfig"
            if short == "FINALIZE_CONFIG":
                fc = ffi.cast("QnnHtpGraph_CustomConfig_t *", c.customConfig).finalizeConfig
                value["key_text"] = c_str(fc.key) if fc.key != ffi.NULL else None
                value["value_plain"] = marshal.read_scalar(fc.value)[1] if fc.key != ffi.NULL else None
            htp_settings.check_graph_when(short, value.get("optimizationOption") if short == "OPTIMIZATION" else value,
                                          graph, func, path)
            htp_settings.check_graph_option(short, value, model=model, context=ctx, graph=graph, func=func,
                                            path=path, pending=out)
            if short in htp_settings.GRAPH_OPTIONS:   # ignored options (warned) are not recorded
                out.setdefault("htp", {})[name] = value
        elif opt == Q.QNN_GRAPH_CONFIG_OPTION_ENABLE_BINARY_SECTION_WEIGHTS_UPDATES:
            # Recorded: binary section updates are always possible in the emulator.
            out["enableBinarySectionWeightsUpdates"] = bool(c.enableBinarySectionWeightsUpdates)
        elif opt in (Q.QNN_GRAPH_CONFIG_OPTION_PROFILE_HANDLE, Q.QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_STATE,
                     Q.QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_NUM_EXECUTIONS):
            raise QnnError(Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                           f"{func}: config[{i}].option: per-graph profile handles (graph profiling configs) are "
                           f"not implemented; pass the profile handle to graphFinalize/graphExecute",
                           rule="QNNEMU-graph-config-profiling")
        else:
            raise QnnError(Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                           f"{func}: config[{i}].option: option {opt} is not supported",
                           rule="QNNEMU-graph-config-option")
    return out


def _merge_graph_configs(configs: dict, new: dict) -> None:
    """graphSetConfig: per-option and per-optimization-type updates, the rest replaced."""
    configs.setdefault("htp", {}).update(new.pop("htp", {}))
    for key in ("htp_optimization", "htp_finalize_config"):
        if key in new:
            configs.setdefault(key, {}).update(new.pop(key))
    configs.update(new)


@entry
def graphCreate(contextHandle, graphName, config, graphHandle):
    ctx = _get(contextHandle, Context, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "contextHandle")
    require(graphHandle, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphCreate", "graphHandle")
    configs = _graph_configs(config, "graphCreate", context=ctx)
    # A graph without its own priority takes its context's (seed 002 "Graph Priority").
    if "priority" not in configs and "priority" in ctx.configs:
        configs["priority"] = int(ctx.configs["priority"])
    handle = ctx.create_graph(c_str(graphName) if graphName != ffi.NULL else "")
    HANDLES.lookup(handle).configs = configs
    graphHandle[0] = ffi.cast("Qnn_GraphHandle_t", handle)


@entry
def graphRetrieve(contextHandle, graphName, graphHandle):
    ctx = _get(contextHandle, Context, Q.QNN_GRAPH_ERROR_INVALID_CONTEXT, "contextHandle")
    require(graphHandle, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphRetrieve", "graphHandle")
    graphHandle[0] = ffi.cast("Qnn_GraphHandle_t", ctx.retrieve_graph(c_str(graphName) if graphName != ffi.NULL else ""))


@entry
def graphSetConfig(graphHandle, config):
    """Each option may change in its window (qnnemu/htp/settings.py): before finalize, until the
    first execute (NUM_HVX_THREADS), or any time (priority, the SLC allocator forced off/on)."""
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    new = _graph_configs(config, "graphSetConfig", graph=g)
    _merge_graph_configs(g.configs, new)


@entry
def graphGetProperty(graphHandle, properties):
    _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    require(properties, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphGetProperty", "properties")
    for i, p in enumerate(_configs(properties, "QnnGraph_Property_t")):
        raise QnnError(Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                       f"graphGetProperty: properties[{i}].option: {int(p.option)}: the HTP backend defines "
                       f"no graph properties the emulator answers yet", rule="QNNEMU-graphGetProperty-option")


@entry
def graphAddNode(graphHandle, opConfig):
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    g.add_node(read_op_config(opConfig))


@entry
def graphFinalize(graphHandle, profileHandle, signalHandle):
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    call = profile_api.start(profileHandle, "graphFinalize", Q.QNN_GRAPH_ERROR_SET_PROFILE)
    # The signal is checked before compiling (compiling the plan is one uninterruptible step).
    with signal_api.use_signal(signalHandle, "graphFinalize", Q.QNN_GRAPH_ERROR_INVALID_HANDLE,
                               Q.QNN_GRAPH_ERROR_ABORTED, Q.QNN_GRAPH_ERROR_TIMED_OUT,
                               Q.QNN_GRAPH_ERROR_SIGNAL_IN_USE) as sig:
        if sig is not None:
            sig.check()
        with profile_api.recording(call) as rec:
            g.finalize()
    profile_api.commit(rec, "finalize")


def _io_buffer(t, func: str, path: str):
    """(tensor id, name getter, version struct, version) of an execute argument, RAW memory checked."""
    version = int(t.version)
    if version not in (1, 2):
        raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_TENSOR, f"{func}: {path}.version: {version} is not 1 or 2",
                       rule="QNNEMU-graphExecute-tensor-version")
    v = t.v1 if version == 1 else t.v2
    if int(v.memType) not in (Q.QNN_TENSORMEMTYPE_RAW, Q.QNN_TENSORMEMTYPE_MEMHANDLE):
        raise QnnError(Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                       f"{func}: {path}.v{version}.memType: {int(v.memType)}: only QNN_TENSORMEMTYPE_RAW and "
                       f"QNN_TENSORMEMTYPE_MEMHANDLE are supported", rule="QNNEMU-graphExecute-memtype")
    return int(v.id), lambda: c_str(v.name), v, version


@entry
def graphExecute(graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle, signalHandle):
    func = "graphExecute"
    g = _get(graphHandle, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle")
    prof_call = profile_api.start(profileHandle, func, Q.QNN_GRAPH_ERROR_SET_PROFILE)
    if not g.finalized:
        raise QnnError(Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED,
                       f"{func}: graph '{g.name}' is not finalized (call graphFinalize first)",
                       rule="QNNEMU-graphExecute-not-finalized")
    htp_settings.check_execute_allowed(g, func)   # PREPARE_ONLY contexts prepare, never execute
    n_in, n_out = int(numInputs), int(numOutputs)
    if n_in and inputs == ffi.NULL or n_out and outputs == ffi.NULL:
        raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, f"{func}: inputs/outputs is NULL with a non-zero count",
                       rule="QNNEMU-graphExecute-null")
    # Variable batch (seed 002 "QNN HTP Variable Batch"): every argument's dimensions are the
    # prepared [b, ...] or [n*b, ...] with one n for all inputs and outputs (Graph.batch_multiple);
    # an argument with a NULL dimensions pointer counts as the prepared dimensions (n = 1).
    batch, batch_from = 1, None

    def batch_of(t, v, dims_path):
        nonlocal batch, batch_from
        n = 1
        if v.dimensions != ffi.NULL:
            rank = int(v.rank)
            n = g.batch_multiple(t, rank, ffi.unpack(v.dimensions, rank) if rank == len(t.dims) else None, func,
                                 dims_path)
        if batch_from is None:
            batch, batch_from = n, (dims_path, t.name)
        elif n != batch:
            raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
                           f"{func}: {dims_path}: tensor '{t.name}' is executed with batch multiple {n} "
                           f"(dimensions {list(t.batched(n).dims)}, prepared {list(t.dims)}) but tensor "
                           f"'{batch_from[1]}' ({batch_from[0]}) with {batch}: all inputs and outputs must have "
                           f"the same batch multiple", rule="QNNEMU-graphExecute-batch-mismatch")
        return t.batched(n)

    feeds: dict[int, np.ndarray] = {}
    for i in range(n_in):
        path = f"inputs[{i}]"
        tid, name_of, v, ver = _io_buffer(inputs[i], func, path)
        t = g.match_io(tid, name_of, func, path, APP_INPUT_TYPES)
        tb = batch_of(t, v, f"{path}.v{ver}.dimensions")   # t itself at batch 1
        if int(v.memType) == Q.QNN_TENSORMEMTYPE_MEMHANDLE:  # registered memory, read in place
            feeds[t.id] = mem_api.tensor_view(g, tb, v.memHandle, f"{path}.v{ver}.memHandle", writable=False)
            continue
        if v.clientBuf.data == ffi.NULL or int(v.clientBuf.dataSize) != tb.nbytes:
            raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
                           f"{func}: {path}.v{ver}.clientBuf: tensor '{t.name}' needs {tb.nbytes} bytes "
                           f"({list(tb.dims)} x {dtypes.name(t.dtype)}), got dataSize {int(v.clientBuf.dataSize)}"
                           f"{' and a NULL data pointer' if v.clientBuf.data == ffi.NULL else ''}",
                           rule="QNNEMU-graphExecute-buffer-size")
        feeds[t.id] = np.frombuffer(ffi.buffer(v.clientBuf.data, tb.nbytes),
                                    dtype=dtypes.numpy_dtype(t.dtype)).reshape(tb.dims)
    targets = []
    for i in range(n_out):
        path = f"outputs[{i}]"
        tid, name_of, v, ver = _io_buffer(outputs[i], func, path)
        t = g.match_io(tid, name_of, func, path, APP_OUTPUT_TYPES)
        tb = batch_of(t, v, f"{path}.v{ver}.dimensions")
        if int(v.memType) == Q.QNN_TENSORMEMTYPE_MEMHANDLE:  # registered memory, written in place
            targets.append((t, mem_api.tensor_view(g, tb, v.memHandle, f"{path}.v{ver}.memHandle", writable=True),
                            tb.nbytes))
            continue
        if v.clientBuf.data == ffi.NULL or int(v.clientBuf.dataSize) != tb.nbytes:
            raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
                           f"{func}: {path}.v{ver}.clientBuf: tensor '{t.name}' needs {tb.nbytes} bytes "
                           f"({list(tb.dims)} x {dtypes.name(t.dtype)}), got dataSize {int(v.clientBuf.dataSize)}",
                           rule="QNNEMU-graphExecute-buffer-size")
        targets.append((t, v.clientBuf.data, tb.nbytes))
    with signal_api.use_signal(signalHandle, func, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, Q.QNN_GRAPH_ERROR_ABORTED,
                               Q.QNN_GRAPH_ERROR_TIMED_OUT, Q.QNN_GRAPH_ERROR_SIGNAL_IN_USE) as sig:
        with profile_api.recording(prof_call, g) as rec:
            observer = rec and rec.on_step
            if sig is not None:
                sig.check()  # an abort/timeout between plan steps; the outputs are then not written

                def observer(step, seconds, _profile=observer, _check=sig.check):
                    if _profile is not None:
                        _profile(step, seconds)
                    _check()
            results = g.execute(feeds, [t.id for t, _, _ in targets], observer=observer, batch=batch)
    for t, dst, nbytes in targets:
        if isinstance(dst, np.ndarray):
            np.copyto(dst, results[t.id])
            continue
        arr = np.ascontiguousarray(results[t.id])
        ffi.memmove(dst, ffi.from_buffer(arr), nbytes)
    profile_api.commit(rec, "execute")




@entry
def contextAddToDlc(context, dlcHandle):
    """QNN 2.50.  The vendor's library checks the context and the DLC handle (INVALID_HANDLE for
    either being NULL) before writing the context's binary into the DLC; qnnemu checks the same
    and then answers UNSUPPORTED_FEATURE: it has no DLC writer (the System library's DLC entries
    are not implemented)."""
    _get(context, Context, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "context")
    require(dlcHandle, Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, "contextAddToDlc", "dlcHandle")
    raise QnnError(Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE,
                   f"contextAddToDlc: not supported by qnnemu {_version.__version__}: qnnemu has no DLC writer; "
                   f"save the context with contextGetBinary instead", rule="QNNEMU-not-supported")
not_supported("graphCreateSubgraph", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "subgraphs are not emulated yet")
not_supported("graphExecuteAsync", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "async execute is not implemented yet")
# The vendor's library answers graphCreateSubgraph and graphExecuteAsync without looking at the
# graph handle, but checks it in the execution-environment entries (INVALID_HANDLE, NULL included).
not_supported("graphPrepareExecutionEnvironment", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
              "execution environments are not implemented yet",
              check=lambda graph, *_: _get(graph, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle"))
not_supported("graphReleaseExecutionEnvironment", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
              "execution environments are not implemented yet",
              check=lambda graph, *_: _get(graph, Graph, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphHandle"))


# ----------------------------------------------------------------------------------- tensor
def _write_back_id(tensor, tid: int) -> None:
    if int(tensor.version) == 1:
        tensor.v1.id = tid
    else:
        tensor.v2.id = tid


@entry
def tensorCreateGraphTensor(graph, tensor):
    g = _get(graph, Graph, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "graph")
    require(tensor, Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorCreateGraphTensor", "tensor")
    t = g.create_tensor(read_tensor(tensor))
    _write_back_id(tensor, t.id)


@entry
def tensorCreateContextTensor(context, tensor):
    ctx = _get(context, Context, Q.QNN_TENSOR_ERROR_INVALID_HANDLE, "context")
    require(tensor, Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorCreateContextTensor", "tensor")
    t = ctx.create_tensor(read_tensor(tensor))
    _write_back_id(tensor, t.id)




# ------------------------------------------------------------------------- error, global
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
    func, text = _messages.get(code, ("", "no further detail recorded"))
    return f"{_describe(code, func)}: {text}"


@entry
def errorGetMessage(errorHandle, errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorGetMessage", "errorMessage")
    code = int(errorHandle) & 0xFFFF
    if code == 0:
        raise QnnError(Q.QNN_ERROR_INVALID_ERROR_HANDLE, "errorGetMessage: errorHandle 0 is QNN_SUCCESS, not an error",
                       rule="QNNEMU-errorGetMessage-success")
    with _state_lock:
        text = _message_for(code)
        buf = _message_buffers[code] = ffi.new("char[]", text.encode("utf-8", "replace"))
    errorMessage[0] = buf


@entry
def errorGetVerboseMessage(errorHandle, errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorGetVerboseMessage", "errorMessage")
    code = int(errorHandle) & 0xFFFF
    with _state_lock:
        text = f"(code {code}) {_message_for(code)}"
        buf = ffi.new("char[]", text.encode("utf-8", "replace"))
        _verbose[int(ffi.cast("uintptr_t", buf))] = buf
    errorMessage[0] = buf


@entry
def errorFreeVerboseMessage(errorMessage):
    require(errorMessage, Q.QNN_ERROR_INVALID_ARGUMENT, "errorFreeVerboseMessage", "errorMessage")
    with _state_lock:
        if _verbose.pop(int(ffi.cast("uintptr_t", errorMessage)), None) is None:
            raise QnnError(Q.QNN_ERROR_INVALID_ARGUMENT,
                           "errorFreeVerboseMessage: errorMessage was not returned by errorGetVerboseMessage "
                           "(or was already freed)", rule="QNNEMU-errorFreeVerboseMessage-unknown")


@entry
def globalConfigSet(config):
    require(config, Q.QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG, "globalConfigSet", "config")
    for i, c in enumerate(_configs(config, "QnnGlobalConfig_t")):
        name = Q.enum("QNN_GLOBAL_CONFIG_OPTION_").get(int(c.option))
        if name is None or name.endswith("UNDEFINED"):
            raise QnnError(Q.QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG,
                           f"globalConfigSet: config[{i}].option: unknown option {int(c.option)}",
                           rule="QNNEMU-globalConfigSet-option")
        _active_logger().info(f"globalConfigSet: {name} accepted")


# memRegister / memDeRegister register their @entry functions on import (mem_api uses entry()).
from . import mem_api  # noqa: E402
# The seven profile* entries register on import too; graphFinalize/graphExecute/contextFree
# use its start/recording/commit for their profile argument.
from . import profile_api  # noqa: E402
# Context binaries (contextGetBinary*, contextCreateFromBinary*, contextValidateBinary, ...).
from . import context_api  # noqa: E402
# The HTP perf infrastructure functions handed out by deviceGetInfrastructure.
from . import perf_api  # noqa: E402
# Binary sections and updatable tensors (contextGetBinarySection*, tensorUpdate*Tensors).
from . import section_api  # noqa: E402
# QnnSignal.h (signalCreate/SetConfig/Trigger/Free); graphFinalize/graphExecute and the
# contextCreateFromBinary* entries take their signal argument with its use_signal.
from . import signal_api  # noqa: E402
# graphValidate / graphFreeValidationResult (QNN 2.50).
from . import validate_api  # noqa: E402


# ------------------------------------------------------------------------------ installing
def install(the_ffi, the_lib, expected: tuple[str, ...] = ()) -> None:
    """Binds every entry to its ``extern "Python+C"`` slot; called from the embedding init code.

    ``expected`` are the table's field names as the library was built; a slot without a
    Python implementation would fail at call time, so it fails the load instead.
    """
    global ffi, lib
    ffi = marshal.ffi = the_ffi
    lib = the_lib
    missing = sorted(set(expected) - set(_ENTRIES))
    for name, wrapper in _ENTRIES.items():
        the_ffi.def_extern(name=PREFIX + name, error=Q.QNN_COMMON_ERROR_GENERAL,
                           onerror=_onerror_for(name))(wrapper)
    for name, wrapper in _PERF_ENTRIES.items():
        the_ffi.def_extern(name="qnnemu_perf_" + name, error=Q.QNN_COMMON_ERROR_GENERAL,
                           onerror=_onerror_for(name))(wrapper)

    @the_ffi.def_extern(name="qnnemu_embed_init", error=0, onerror=_onerror_for("QnnInterface_getProviders"))
    def embed_init(baked_version, core_api_version):
        # A refusal's reason is for csrc/shim.c to print (no logger exists yet): init_failure.
        global init_failure
        if missing:
            init_failure = f"no implementation for table entries {missing}"
            return -3
        baked = c_str(baked_version)
        if baked != _version.__version__:
            init_failure = (f"libQnnHtpEmu.so was built for qnnemu {baked} but the importable package "
                            f"is {_version.__version__}; rebuild/reinstall so they match")
            return -1
        try:
            core = core_backend.core_api_version()
        except QnnError as err:
            init_failure = str(err)
            return -2
        core_api_version[0], core_api_version[1], core_api_version[2] = core
        return 1
