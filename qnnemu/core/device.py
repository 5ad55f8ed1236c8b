"""QnnDevice.h + HTP/QnnHtpDevice.h: the emulated HTP device (QNN HTP backend documentation, "QNN
HTP Device Config Options"); the performance infrastructure votes are qnnemu/htp/perf.py.

A device is one row of the SoC table (qnnemu/htp/soc.py).  Custom configs:
- QNN_HTP_DEVICE_CONFIG_OPTION_SOC selects a row (a model not in the table is refused);
- QNN_HTP_DEVICE_CONFIG_OPTION_ARCH selects the arch's reference SoC (v85, with no SoC row, an
  arch-only device with socModel UNKNOWN); when both are given SOC wins and ARCH is ignored
  (HTP documentation: "uses the ..._SOC configuration and ignores the ..._ARCH configuration");
- QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD asks for the signed process domain (every HTP SoC has
  one; recorded in ``use_signed_pd``).
The default device (no config, deviceGetPlatformInfo, a context created without a device) is the
HTP backend documentation's default SoC, SM8350: HTP v68, 4 MiB VTCM, 4 HVX threads, 1 core
(qnnemu.htp.soc.DEFAULT_SOC); the environment variable QNNEMU_SOC_MODEL (a QNN_SOC_MODEL_*
number or name, e.g. SM8550) selects another default, read whenever a default device is made.
An invalid value is refused there with rule QNNEMU-device-soc-env.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import QnnError
from ..headers import Q
from ..htp import soc as socs

# socModel -> (HTP arch, VTCM MiB, signed PD support, DLBC support): the SoC table's view kept
# for the System library and older callers; qnnemu.htp.soc.SOCS is the table.
SOC_TABLE = {m: (r.arch, r.vtcm_mb, r.signed_pd, r.dlbc) for m, r in socs.SOCS.items()}
DEFAULT_SOC = socs.DEFAULT_SOC
KNOWN_ARCHS = tuple(sorted({*socs.HTP_ARCHS, *socs.ARCH_ONLY}))


def default_soc() -> socs.SocInfo:
    """The default device's SoC row (QNNEMU_SOC_MODEL or the documented SM8350); an invalid
    QNNEMU_SOC_MODEL is a QnnError with rule QNNEMU-device-soc-env."""
    try:
        return socs.default_soc()
    except ValueError as e:
        raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG, f"environment: {socs.SOC_MODEL_ENV}: {e}",
                       rule="QNNEMU-device-soc-env") from None


@dataclass
class DeviceModel:
    """The emulated device.  Fields left None come from the SoC row of ``soc_model``, and
    ``DeviceModel()`` (no ``soc_model``) is the default device: ``default_soc()``'s row, read
    when it is made (so QNNEMU_SOC_MODEL applies); e.g. ``DeviceModel(hmx=False)`` is the
    default device without HMX."""
    soc_model: int | None = None
    arch: int | None = None
    vtcm_mb: int | None = None
    signed_pd: bool | None = None
    dlbc: bool | None = None
    use_signed_pd: bool = False
    vtcm_bytes: int | None = None
    hvx_threads: int | None = None
    hmx: bool | None = None
    cores: int | None = None
    name: str | None = None
    devices: int | None = None
    # QNN_HTP_DEVICE_CONFIG_OPTION_SOC was given (QNN_HTP_GRAPH_CONFIG_OPTION_MAX needs it)
    soc_configured: bool = False

    def __post_init__(self):
        row = default_soc() if self.soc_model is None else socs.soc_info(self.soc_model, self.arch)
        for f in ("soc_model", "arch", "vtcm_mb", "signed_pd", "dlbc", "vtcm_bytes", "hvx_threads", "hmx",
                  "cores", "name", "devices"):
            if getattr(self, f) is None:
                setattr(self, f, getattr(row, f))

    @property
    def soc(self) -> socs.SocInfo:
        """The SoC table row (an arch-only device: its synthesized row)."""
        return socs.soc_info(self.soc_model, self.arch)


def model_for(row: socs.SocInfo, *, use_signed_pd: bool = False, soc_configured: bool = False) -> DeviceModel:
    return DeviceModel(row.soc_model, row.arch, row.vtcm_mb, row.signed_pd, row.dlbc, use_signed_pd,
                       row.vtcm_bytes, row.hvx_threads, row.hmx, row.cores, row.name, row.devices,
                       soc_configured)


@dataclass
class Device:
    model: DeviceModel
    log: object
    backend: object = None
    freed: bool = False


def model_from_configs(soc: int | None, arch: int | None, signed_pd: bool | None, *,
                       func: str = "deviceCreate", base: DeviceModel | None = None, log=None) -> DeviceModel:
    """SOC wins over ARCH when both are given (HTP documentation); options not given keep their value
    from ``base`` (deviceSetConfig) or the default device."""
    model = dataclasses.replace(base) if base is not None else DeviceModel()
    if soc is not None:
        row = socs.SOCS.get(soc)
        if row is None:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: config[].customConfig.socModel: SoC model {soc} is not an HTP SoC of the "
                           f"emulator's SoC table (known: {sorted(socs.SOCS)})", rule="QNNEMU-device-soc")
        if arch is not None and log is not None and arch != row.arch:
            log.warn(f"{func}: both QNN_HTP_DEVICE_CONFIG_OPTION_SOC ({row.name}, v{row.arch}) and _ARCH "
                     f"(v{arch}) given: the SoC wins, the arch is ignored")
        model = model_for(row, use_signed_pd=model.use_signed_pd, soc_configured=True)
    elif arch is not None:
        if arch not in KNOWN_ARCHS:
            raise QnnError(Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                           f"{func}: config[].customConfig.arch.arch: {arch} is not an HTP arch "
                           f"({', '.join(map(str, KNOWN_ARCHS))})", rule="QNNEMU-device-arch")
        row = socs.soc_for_arch(arch) or socs.arch_only(arch)
        model = model_for(row, use_signed_pd=model.use_signed_pd)
    if signed_pd is not None:
        # Every HTP SoC supports the signed PD (qnnemu/htp/soc.py), so the request is recorded.
        model.use_signed_pd = signed_pd
    return model
