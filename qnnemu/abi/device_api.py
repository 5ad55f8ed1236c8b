"""QnnDevice.h entries: deviceCreate / SetConfig / Free / GetPlatformInfo / GetInfo /
FreePlatformInfo / GetInfrastructure, with the HTP device custom configs of HTP/QnnHtpDevice.h
(read in either ABI layout: device_config.py) and the perf infrastructure table handed out by
deviceGetInfrastructure (its functions: perf_api.py).  The device model: qnnemu/core/device.py.
"""
from __future__ import annotations

from .. import rules
from ..core.context import Context
from ..core.device import Device, DeviceModel, HardwareDescription, device_count, model_from_configs, soc_rank
from ..core.handles import HANDLES
from ..headers import Q
from ..htp.device_model import set_newest_device_lookup
from ..location import Location
from ..rules import fail
from . import device_config
from .library import (
    active_logger as _active_logger,
    configs as _configs,
    entry,
    ffi,
    get as _get,
    hval as _hval,
    keepalive as _keepalive,
    lib,
    optional_logger as _optional_logger,
)
from .marshal import require

# The HTP device model asks for "the newest live device" (settings without a device handle);
# the handle table belongs to this layer, so the lookup is installed from here.
set_newest_device_lookup(lambda: next(reversed(HANDLES.live(Device)), None))

_platform_infos: dict[int, list] = {}   # address -> owned cdata, until deviceFreePlatformInfo


def _platform_description(info, path: str, func: str, model: DeviceModel) -> HardwareDescription | None:
    """The first hardware device of a client's QnnDevice_PlatformInfo_t (``info``; NULL: None),
    checked as the vendor's library checks it: at least one hardware device, and as many cores
    as the emulated device has (the vendor: "Invalid number of cores[2], supported numcores[1]",
    QNN_DEVICE_ERROR_INVALID_CONFIG; its x86 default device has one).  The struct's version is
    not checked and devices after the first are dropped, as the vendor's library does (probed:
    docs/device-variants.md)."""
    if info == ffi.NULL:
        return None   # the vendor's library accepts a NULL description: the default platform
    v1 = info.v1
    n = int(v1.numHwDevices)
    if n == 0 or v1.hwDevices == ffi.NULL:
        fail(Location(func).path(f"{path}.v1.{'numHwDevices' if n == 0 else 'hwDevices'}"),
             "QNNEMU-device-platform-info-empty",
             f"the platform description has {'no hardware device' if n == 0 else 'a NULL hwDevices array'}; "
             f"describe the HTP device to prepare for (or leave hardwareInfo NULL)",
             code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
    hw = v1.hwDevices[0].v1
    cores = int(hw.numCores)
    if not 1 <= cores <= model.cores:
        fail(Location(func).path(f"{path}.v1.hwDevices[0].v1.numCores"), "QNNEMU-device-platform-info-cores",
             f"{cores} NSP core(s): {model.name} has {model.cores} per device (the vendor's library refuses "
             f"any other count too)", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
    core_types = tuple(int(hw.cores[k].v1.coreType) for k in range(cores)) if hw.cores != ffi.NULL else (0,) * cores
    if hw.deviceInfoExtension == ffi.NULL:
        return HardwareDescription(int(hw.deviceId), int(hw.deviceType), cores, core_types, False)
    ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", hw.deviceInfoExtension)
    chip = ext.onChipDevice
    return HardwareDescription(int(hw.deviceId), int(hw.deviceType), cores, core_types, True, int(ext.devType),
                               int(chip.vtcmSize), int(chip.socModel), bool(chip.signedPdSupport),
                               bool(chip.dlbcSupport), int(chip.arch))


def _device_configs(config, func: str, base=None, log=None, layout: str | None = None):
    """QnnDevice_Config_t list -> (DeviceModel, layout the HTP custom configs showed or None,
    the client's platform description or None).

    HTP custom configs are read in the layout their client was built with (QNN 2.43 or 2.50
    headers: device_config.py, docs/abi-compat.md); ``layout`` is the device's earlier one.
    SOC wins over ARCH (qnnemu/core/device.py).  Options the vendor's library refuses are
    refused with its codes."""
    log = log or _active_logger()
    customs: list[tuple[int, int]] = []
    platform = None
    for i, c in enumerate(_configs(config, "QnnDevice_Config_t", Location(func).field("config"))):
        opt = int(c.option)
        if opt == Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM:
            require(c.customConfig, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, func, f"config[{i}].customConfig")
            customs.append((i, int(ffi.cast("uintptr_t", c.customConfig))))
        elif opt == Q.QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO:
            platform = (i, c.hardwareInfo)   # read once the SOC / ARCH configs chose the device
        else:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-device-config-option",
                 f"unknown option {opt}", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)

    def read(address: int, offset: int, size: int) -> bytes:
        return bytes(ffi.buffer(ffi.cast("char *", address + offset), size))

    options = device_config.read_htp_device_configs(
        customs, read, soc_rank, layout, lambda soc, arch: device_count(soc, arch, base))
    soc = arch = signed = None
    soc_path = arch_path = None
    soc_note = ""
    device_ids: list[tuple[str, int | None]] = []
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
            fail(Location(func).path(f"{path}.option"), "QNNEMU-device-securepd",
                 "SECUREPD (secure process domain) is not available on "
                 "the HTP backend (the vendor's library refuses it too)", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
        elif o.option in (device_config.ASYNC_EXECUTE, device_config.DYNAMIC_PARTITIONING,
                          device_config.HTP_EXTENSION):
            fail(Location(func).path(f"{path}.option"), "QNNEMU-device-option-unsupported",
                 f"{o.name} ({o.option}) is not supported by the HTP backend "
                 f"on this platform (the vendor's library refuses it too)", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
        elif o.option == device_config.APP_UID:
            # The vendor's library: "UID is not supported for this device", code 1000.
            fail(Location(func).path(f"{path}.appUid"), "QNNEMU-device-app-uid",
                 "an application UID is not supported for this device "
                 "(the vendor's library refuses it too)", code=Q.QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE)
        else:
            fail(Location(func).path(f"{path}.option"), "QNNEMU-device-config-option",
                 f"unknown HTP device option {o.option}", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
    model = model_from_configs(soc, arch, signed, func=func, base=base, log=log,
                               soc_path=soc_path or "config[].customConfig.socModel", soc_note=soc_note,
                               arch_path=arch_path or "config[].customConfig.arch.arch")
    for path, dev_id in device_ids:
        # The vendor's library accepts any deviceId (measured: 5 for ARCH, 7 for SIGNEDPD).
        if dev_id is not None and dev_id >= model.devices:
            rules.warn("QNNEMU-device-id-ignored", func, path,
                       f"device {dev_id} does not exist; {model.name} has {model.devices} HTP device(s); the "
                       f"option applies to the device", logger=log)
    description = None
    if platform is not None:
        i, info = platform
        path = f"config[{i}].hardwareInfo"
        description = _platform_description(info, path, func, model)
        if description is not None:
            log.info(f"{func}: {path}: platform description recorded (deviceGetInfo reports it): "
                     f"socModel {description.soc_model}, arch v{description.arch}, VTCM {description.vtcm_mb} MB, "
                     f"{description.num_cores} core(s), signed PD {description.signed_pd}, DLBC {description.dlbc}")
            diffs = description.differs_from(model)
            if diffs:
                rules.warn("QNNEMU-device-platform-info-not-emulated", func,
                           f"{path}.v1.hwDevices[0].v1.deviceInfoExtension",
                           f"the description says {', '.join(diffs)}: recorded and reported by deviceGetInfo; "
                           f"graphs are prepared for and run on {model.name} (v{model.arch}), the device the "
                           f"SOC / ARCH configs chose, as the vendor's library does; choose the SoC with "
                           f"QNN_HTP_DEVICE_CONFIG_OPTION_SOC", logger=log)
    return model, device_config.shown_layout(options, layout), description


@entry
def deviceCreate(logger, config, device):
    require(device, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceCreate", "device")
    log = _optional_logger(logger, Q.QNN_DEVICE_ERROR_INVALID_HANDLE)
    model, layout, description = _device_configs(config, "deviceCreate", log=log)
    dev = Device(model, log or _active_logger(), config_layout=layout, platform_description=description)
    device[0] = ffi.cast("Qnn_DeviceHandle_t", HANDLES.new(dev))
    dev.log.info(f"deviceCreate: emulated HTP v{dev.model.arch}, SoC model {dev.model.soc_model}, "
                 f"VTCM {dev.model.vtcm_mb} MiB, {_process_domain(dev.model)}")


def _process_domain(model: DeviceModel) -> str:
    """The process domain the device's graphs run in (QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD,
    default unsigned): logged at deviceCreate / deviceSetConfig."""
    return "signed process domain (SIGNEDPD)" if model.use_signed_pd else "unsigned process domain"


@entry
def deviceSetConfig(device, config):
    dev = _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    signed_before = dev.model.use_signed_pd
    dev.model, dev.config_layout, description = _device_configs(config, "deviceSetConfig", base=dev.model,
                                                                log=dev.log, layout=dev.config_layout)
    if description is not None:
        dev.platform_description = description
    if dev.model.use_signed_pd != signed_before:
        dev.log.info(f"deviceSetConfig: the device now uses the {_process_domain(dev.model)}")


@entry
def deviceFree(device):
    dev = _get(device, Device, Q.QNN_DEVICE_ERROR_INVALID_HANDLE, "device")
    users = [c for c in HANDLES.live(Context) if c.device is dev]
    if users:
        fail(Location("deviceFree"), "QNNEMU-deviceFree-in-use",
             f"device is still used by {len(users)} context(s); free them first",
             code=Q.QNN_DEVICE_ERROR_ASSOCIATED_TO_CONTEXT)
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
    desc = dev.platform_description
    platformInfo[0] = _platform_info(dev.model) if desc is None else _described_platform_info(desc)


def _described_platform_info(desc: HardwareDescription) -> object:
    """A QnnDevice_PlatformInfo_t holding the client's own description (one hardware device, its
    extension as given): what the vendor's deviceGetInfo returns for a device created with
    QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO.  Owned until deviceFreePlatformInfo."""
    info = ffi.new("QnnDevice_PlatformInfo_t *")
    hw = ffi.new("QnnDevice_HardwareDeviceInfo_t[]", 1)
    cores = ffi.new("QnnDevice_CoreInfo_t[]", desc.num_cores)
    owned = [info, hw, cores]
    for k, core_type in enumerate(desc.core_types):
        cores[k].version = Q.QNN_DEVICE_CORE_INFO_VERSION_1
        cores[k].v1.coreId = k
        cores[k].v1.coreType = core_type
    hw[0].version = Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1
    hw[0].v1.deviceId = desc.device_id
    hw[0].v1.deviceType = desc.device_type
    hw[0].v1.numCores = desc.num_cores
    hw[0].v1.cores = cores
    ext = ffi.new("QnnHtpDevice_DeviceInfoExtension_t *")
    owned.append(ext)
    if desc.extension:
        ext.devType = desc.extension_type
        ext.onChipDevice.vtcmSize = desc.vtcm_mb
        ext.onChipDevice.socModel = desc.soc_model
        ext.onChipDevice.signedPdSupport = desc.signed_pd
        ext.onChipDevice.dlbcSupport = desc.dlbc
        ext.onChipDevice.arch = desc.arch
    # A NULL extension comes back zero-filled (the vendor's library answers so).
    hw[0].v1.deviceInfoExtension = ffi.cast("QnnDevice_DeviceInfoExtension_t", ext)
    info.version = Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1
    info.v1.numHwDevices = 1
    info.v1.hwDevices = hw
    _platform_infos[int(ffi.cast("uintptr_t", info))] = owned
    return info


@entry
def deviceFreePlatformInfo(logger, platformInfo):
    _optional_logger(logger, Q.QNN_DEVICE_ERROR_INVALID_HANDLE)   # NULL, or a live logger (vendor)
    require(platformInfo, Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceFreePlatformInfo", "platformInfo")
    if _platform_infos.pop(int(ffi.cast("uintptr_t", platformInfo)), None) is None:
        fail(Location("deviceFreePlatformInfo"), "QNNEMU-deviceFreePlatformInfo-unknown",
             "platformInfo was not returned by deviceGetPlatformInfo "
             "or deviceGetInfo (or was already freed)", code=Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT)


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
