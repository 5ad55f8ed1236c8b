"""QnnDevice.h: the QNN device object (deviceCreate / deviceFree) holding its device model.

The model -- SoC row, HTP arch, VTCM, HVX threads, cores, and the custom configs that choose
them (QNN HTP backend documentation, "QNN HTP Device Config Options") -- is the HTP device
model, qnnemu/htp/device_model.py; its names stay importable from here.

A device may also carry the platform description its client gave with
QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO (QNN HTP backend documentation, "QNN HTP Device Info
Extension Options": "For offline operation, caller need to create this structure and filling the
correct information for QnnDevice_create"): ``HardwareDescription``, the first hardware device
of that QnnDevice_PlatformInfo_t with its HTP ON_CHIP extension.  The vendor's libQnnHtp.so 2.51
(x86-64) keeps exactly that -- deviceGetInfo hands it back as given, only the first device,
whatever its socModel / arch / VTCM say -- and prepares for the device its SOC / ARCH configs
chose (its binaries record no other SoC, its float math stays the default device's), so qnnemu
does the same (docs/device-variants.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..htp.device_model import (  # noqa: F401 (the device model's names, importable from here)
    DEFAULT_SOC,
    KNOWN_ARCHS,
    SOC_TABLE,
    VENDOR_SOC_MODELS,
    DeviceModel,
    default_soc,
    device_count,
    is_known_soc,
    model_for,
    model_from_configs,
    soc_rank,
)

if TYPE_CHECKING:
    from .log import Logger


@dataclass(frozen=True)
class HardwareDescription:
    """One QnnDevice_HardwareDeviceInfo_t (v1) of a client's platform description, with its
    QnnHtpDevice_DeviceInfoExtension_t (``extension`` False: a NULL extension)."""
    device_id: int
    device_type: int
    num_cores: int
    core_types: tuple[int, ...]
    extension: bool
    extension_type: int = 0
    vtcm_mb: int = 0
    soc_model: int = 0
    signed_pd: bool = False
    dlbc: bool = False
    arch: int = 0

    def differs_from(self, model: DeviceModel) -> list[str]:
        """What this description says that the emulated device ``model`` is not."""
        if not self.extension:
            return []
        diffs = []
        if self.soc_model and self.soc_model != model.soc_model:
            diffs.append(f"socModel {self.soc_model} (the device: {model.soc_model})")
        if self.arch and self.arch != model.arch:
            diffs.append(f"arch v{self.arch} (the device: v{model.arch})")
        if self.vtcm_mb and self.vtcm_mb != model.vtcm_mb:
            diffs.append(f"VTCM {self.vtcm_mb} MB (the device: {model.vtcm_mb} MB)")
        return diffs


@dataclass
class Device:
    model: DeviceModel
    log: Logger
    backend: object = None
    freed: bool = False
    # The QnnHtpDevice_CustomConfig_t layout ("2.43"/"2.50") the client's configs showed, for the
    # configs of later deviceSetConfig calls that cannot show it (qnnemu/abi/device_config.py).
    config_layout: str | None = None
    # The client's QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO description (deviceGetInfo reports it).
    platform_description: HardwareDescription | None = None
