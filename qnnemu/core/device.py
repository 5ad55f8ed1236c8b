"""QnnDevice.h + HTP/QnnHtpDevice.h: the emulated HTP device and its platform info (the
performance infrastructure votes are qnnemu/htp/perf.py).

This is the foundation's device: one on-chip HTP with a documented default SoC (SM8550,
v73, 8 MiB VTCM).  Custom configs SOC and ARCH select another SoC/arch; the full SoC table,
VTCM planning and the voting rules of the seed documents build on this model.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import QnnError
from ..headers import Q

# socModel -> (HTP arch, VTCM MiB, signed PD support, DLBC support)
SOC_TABLE = {
    Q.QNN_SOC_MODEL_SM8550: (73, 8, True, False),
    Q.QNN_SOC_MODEL_SM8650: (75, 8, True, True),
    Q.QNN_SOC_MODEL_SM8750: (79, 8, True, True),
}
DEFAULT_SOC = Q.QNN_SOC_MODEL_SM8550
KNOWN_ARCHS = (68, 69, 73, 75, 79, 81, 85)


@dataclass
class DeviceModel:
    soc_model: int = DEFAULT_SOC
    arch: int = SOC_TABLE[DEFAULT_SOC][0]
    vtcm_mb: int = SOC_TABLE[DEFAULT_SOC][1]
    signed_pd: bool = SOC_TABLE[DEFAULT_SOC][2]
    dlbc: bool = SOC_TABLE[DEFAULT_SOC][3]
    use_signed_pd: bool = False


@dataclass
class Device:
    model: DeviceModel
    log: object
    backend: object = None
    freed: bool = False




def model_from_configs(soc: int | None, arch: int | None, signed_pd: bool | None, *,
                       func: str = "deviceCreate", base: DeviceModel | None = None) -> DeviceModel:
    """SOC wins over ARCH when both are given (HTP backend documentation); options not given
    keep their value from ``base`` (deviceSetConfig) or the default device."""
    model = dataclasses.replace(base) if base is not None else DeviceModel()
    if soc is not None:
        if soc not in SOC_TABLE:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: config[].customConfig.socModel: SoC model {soc} is not in the "
                           f"emulator's SoC table (known: {sorted(SOC_TABLE)})", rule="QNNEMU-device-soc")
        a, vtcm, spd, dlbc = SOC_TABLE[soc]
        model = DeviceModel(soc, a, vtcm, spd, dlbc, model.use_signed_pd)
    elif arch is not None:
        if arch not in KNOWN_ARCHS:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: config[].customConfig.arch.arch: {arch} is not an HTP arch "
                           f"({', '.join(map(str, KNOWN_ARCHS))})", rule="QNNEMU-device-arch")
        match = [s for s, v in SOC_TABLE.items() if v[0] == arch]
        if match:
            a, vtcm, spd, dlbc = SOC_TABLE[match[0]]
            model = DeviceModel(match[0], a, vtcm, spd, dlbc, model.use_signed_pd)
        else:
            model = DeviceModel(Q.QNN_SOC_MODEL_UNKNOWN, arch, 8, True, arch >= 75, model.use_signed_pd)
    if signed_pd is not None:
        model.use_signed_pd = signed_pd
    return model
