"""QnnDevice.h: the QNN device object (deviceCreate / deviceFree) holding its device model.

The model -- SoC row, HTP arch, VTCM, HVX threads, cores, and the custom configs that choose
them (QNN HTP backend documentation, "QNN HTP Device Config Options") -- is the HTP device
model, qnnemu/htp/device_model.py; its names stay importable from here.
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


@dataclass
class Device:
    model: DeviceModel
    log: Logger
    backend: object = None
    freed: bool = False
    # The QnnHtpDevice_CustomConfig_t layout ("2.43"/"2.50") the client's configs showed, for the
    # configs of later deviceSetConfig calls that cannot show it (qnnemu/abi/device_config.py).
    config_layout: str | None = None
