"""QnnDevice.h + HTP/QnnHtpDevice.h: the model of the emulated HTP device (QNN HTP backend documentation,
"QNN HTP Device Config Options"); the performance infrastructure votes are qnnemu/htp/perf.py; the
QNN device object that holds a model is qnnemu/core/device.py.
The custom configs arrive in the QNN 2.43 or 2.50 struct layout: qnnemu/abi/device_config.py.

A device is one row of the SoC table (qnnemu/htp/soc.py).  Custom configs:
- QNN_HTP_DEVICE_CONFIG_OPTION_SOC selects a row; a model the vendor's library accepts but the
  table has no row for is ignored with warning QNNEMU-device-soc-unmodelled, any other model is
  refused (QNNEMU-device-soc);
- QNN_HTP_DEVICE_CONFIG_OPTION_ARCH selects the arch's reference SoC (v85, with no SoC row, an
  arch-only device with socModel UNKNOWN); an arch that is no HTP arch is ignored with warning
  QNNEMU-device-arch-ignored (the vendor's library accepts it); when both are given SOC wins
  and ARCH is ignored
  (the HTP backend documentation: "uses the ..._SOC configuration and ignores the ..._ARCH
  configuration");
- QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD asks for the signed process domain (every HTP SoC has
  one; recorded in ``use_signed_pd``);
- SECUREPD and the QNN 2.50 options ASYNC_EXECUTE, DYNAMIC_PARTITIONING, HTP_EXTENSION and
  APP_UID are refused with the vendor's codes (qnnemu/abi/device_api.py, docs/abi-compat.md).
The default device (no config, deviceGetPlatformInfo, a context created without a device) is the
HTP backend documentation's default SoC, SM8350: HTP v68, 4 MiB VTCM, 4 HVX threads, 1 core
(qnnemu.htp.soc.DEFAULT_SOC); the environment variable QNNEMU_SOC_MODEL (a QNN_SOC_MODEL_*
number or name, e.g. SM8550) selects another default, read whenever a default device is made.
An invalid value is refused there with rule QNNEMU-device-soc-env.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .. import rules
from ..errors import QnnError
from ..headers import Q
from ..location import Location
from ..rules import fail
from . import soc as socs

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


# The DeviceModel fields a SoC table row provides.
_ROW_FIELDS = ("soc_model", "arch", "vtcm_mb", "signed_pd", "dlbc", "vtcm_bytes", "hvx_threads", "hmx",
               "cores", "name", "devices")
_FROM_ROW: Any = None   # a DeviceModel field left to the SoC row


@dataclass
class DeviceModel:
    """The emulated device.  Fields left None come from the SoC row of ``soc_model``, and
    ``DeviceModel()`` (no ``soc_model``) is the default device: ``default_soc()``'s row, read
    when it is made (so QNNEMU_SOC_MODEL applies); e.g. ``DeviceModel(hmx=False)`` is the
    default device without HMX."""
    # The row fields are never None once made: a field left at _FROM_ROW (None) is read from the
    # SoC row in __post_init__, so they are typed as what the row gives.
    soc_model: int = _FROM_ROW
    arch: int = _FROM_ROW
    vtcm_mb: int = _FROM_ROW
    signed_pd: bool = _FROM_ROW
    dlbc: bool = _FROM_ROW
    use_signed_pd: bool = False
    vtcm_bytes: int = _FROM_ROW
    hvx_threads: int = _FROM_ROW
    hmx: bool = _FROM_ROW
    cores: int = _FROM_ROW
    name: str = _FROM_ROW
    devices: int = _FROM_ROW
    # QNN_HTP_DEVICE_CONFIG_OPTION_SOC was given (QNN_HTP_GRAPH_CONFIG_OPTION_MAX needs it)
    soc_configured: bool = False

    def __post_init__(self):
        row = default_soc() if self.soc_model is None else socs.soc_info(self.soc_model, self.arch)
        for f in _ROW_FIELDS:
            if getattr(self, f) is None:
                setattr(self, f, getattr(row, f))

    @property
    def soc(self) -> socs.SocInfo:
        """The SoC table row (an arch-only device: its synthesized row)."""
        return socs.soc_info(self.soc_model, self.arch)


# What has no device argument -- power votes (QnnHtpPerfInfrastructure), backendValidateOpConfig
# -- acts on the newest live QNN device (the vendor's SoC setting is process-wide), else on the
# default device.  The devices are QNN handles, owned by the ABI layer: it installs the lookup
# (qnnemu/abi/device_api.py), so nothing here reaches into the handle table.
class _LiveDevice(Protocol):
    model: DeviceModel


_newest_device: list[Callable[[], _LiveDevice | None]] = []


def set_newest_device_lookup(lookup: Callable[[], _LiveDevice | None]) -> None:
    """Installs ``lookup() -> the newest live device (anything with a .model) or None``."""
    _newest_device[:] = [lookup]


def newest_device_model() -> DeviceModel:
    """The model of the newest live device, else the default device."""
    device = _newest_device[0]() if _newest_device else None
    return device.model if device is not None else DeviceModel()


def model_for(row: socs.SocInfo, *, use_signed_pd: bool = False, soc_configured: bool = False) -> DeviceModel:
    return DeviceModel(**{f: getattr(row, f) for f in _ROW_FIELDS}, use_signed_pd=use_signed_pd,
                       soc_configured=soc_configured)


def device_count(soc: int | None, arch: int | None, base: DeviceModel | None = None) -> int:
    """NSP devices of the SoC that configs selecting ``soc`` / ``arch`` give (SOC wins), else
    of ``base`` (or the default device)."""
    if soc is not None and soc in socs.SOCS:
        return socs.SOCS[soc].devices
    if arch is not None and arch in KNOWN_ARCHS:
        return (socs.soc_for_arch(arch) or socs.arch_only(arch)).devices
    return (base or DeviceModel()).devices


# The socModel values the vendor's libQnnHtp.so (QNN 2.51, x86-64) accepts in
# QNN_HTP_DEVICE_CONFIG_OPTION_SOC, measured over 0..130, 200, 1000 and 65535 (it refuses 0, 14,
# 22-24, 44, 79-81, 98, 121 and everything above 123); tests/test_device_config_layouts.py pins
# a sample.  Those without a row of the SoC table are tolerated (ignored, with a warning).
VENDOR_SOC_MODELS = frozenset([*range(1, 14), *range(15, 22), *range(25, 44), *range(45, 79),
                               *range(82, 98), *range(99, 121), 122, 123])


def soc_rank(soc_model: int) -> int:
    """2: a row of the SoC table (modelled); 1: accepted by the vendor's library but not
    modelled; 0: refused."""
    return 2 if soc_model in socs.SOCS else 1 if soc_model in VENDOR_SOC_MODELS else 0


def is_known_soc(soc_model: int) -> bool:
    """A SoC model QNN_HTP_DEVICE_CONFIG_OPTION_SOC accepts (modelled or tolerated)."""
    return soc_rank(soc_model) > 0


def _soc_name(soc_model: int) -> str:
    return Q.enum("QNN_SOC_MODEL_").get(soc_model, "not in Qnn_SocModel_t").removeprefix("QNN_SOC_MODEL_")


def model_from_configs(soc: int | None, arch: int | None, signed_pd: bool | None, *,
                       func: str = "deviceCreate", base: DeviceModel | None = None, log=None,
                       soc_path: str = "config[].customConfig.socModel", soc_note: str = "",
                       arch_path: str = "config[].customConfig.arch.arch") -> DeviceModel:
    """SOC wins over ARCH when both are given (QNN HTP backend documentation); options not given keep their value
    from ``base`` (deviceSetConfig) or the default device.  ``soc_path``/``arch_path`` name the
    config in messages, ``soc_note`` adds how the SoC model was read."""
    model = dataclasses.replace(base) if base is not None else DeviceModel()
    row = socs.SOCS.get(soc) if soc is not None else None
    if soc is not None and row is None:
        if soc not in VENDOR_SOC_MODELS:
            fail(Location(func).field(soc_path), "QNNEMU-device-soc",
                 f"SoC model {soc} is neither an HTP SoC of the emulator's SoC "
                 f"table (known: {sorted(socs.SOCS)}) nor a model the vendor's library accepts"
                 f"{soc_note}", code=Q.QNN_DEVICE_ERROR_INVALID_CONFIG)
        # The vendor's library accepts it (measured); its HTP (if any) is not modelled.
        if log is not None:
            rules.warn("QNNEMU-device-soc-unmodelled", func, soc_path,
                       f"SoC model {soc} ({_soc_name(soc)}) is accepted by the vendor's library but has no row in "
                       f"the emulator's SoC table (no HTP arch or VTCM size is known for it); ignored"
                       + (": the ARCH config chooses the device" if arch is not None
                          else f": the device stays {model.name}"), logger=log)
    if row is not None:
        if arch is not None and log is not None and arch != row.arch:
            # The vendor's library: "SOC has already been set, therefore, ignoring this HTP ARCH config."
            rules.warn("QNNEMU-device-arch-overridden", func, arch_path,
                       f"v{arch} differs from the arch of the SoC config ({row.name}, v{row.arch}): the SoC "
                       f"wins, the ARCH config is ignored (QNN HTP backend documentation)", logger=log)
        model = model_for(row, use_signed_pd=model.use_signed_pd, soc_configured=True)
    elif arch is not None:
        if arch in KNOWN_ARCHS:
            row = socs.soc_for_arch(arch) or socs.arch_only(arch)
            model = model_for(row, use_signed_pd=model.use_signed_pd)
        else:
            # The vendor's library logs "Unsupported HTP Arch" and succeeds (measured).
            if log is not None:
                rules.warn("QNNEMU-device-arch-ignored", func, arch_path,
                           f"{arch} is not an HTP arch ({', '.join(map(str, KNOWN_ARCHS))}); ignored: the device "
                           f"stays {model.name} (v{model.arch})", logger=log)
    if signed_pd is not None:
        # Every HTP SoC supports the signed PD (qnnemu/htp/soc.py), so the request is recorded.
        model.use_signed_pd = signed_pd
    return model
