"""HTP/QnnHtpDevice.h, HTP/QnnHtpDeviceConfigShared.h: ``QnnHtpDevice_CustomConfig_t`` read in
either of its two ABI layouts (docs/abi-compat.md, "HTP device custom configs").

QNN 2.43 headers make the struct 12 bytes, 4-aligned: ``option`` at 0, the union at 4.  QNN 2.50
headers add a member holding a pointer (``useDynamicPartitioning.rsmHandle``), so the struct is 24
bytes, 8-aligned: ``option`` at 0, 4 bytes of padding, the union at 8.  A client passes a
``void *`` and no version, so the layout is decided per config from what the bytes can show:

1. options that only exist in 2.50 (ASYNC_EXECUTE, DYNAMIC_PARTITIONING, APP_UID, HTP_EXTENSION)
   -> 2.50;
2. an address that is not 8-aligned -> 2.43 (a 2.50 struct is 8-aligned);
3. SOC: which of the words at offsets 4 and 8 is a SoC model qnnemu knows (a modelled one
   beats one that is only tolerated);
4. ARCH: the word at offset 8 is ``arch.arch`` in 2.43 (HTP archs are >= 66) and
   ``arch.deviceId`` in 2.50 (device ids are small);
5. otherwise (SIGNEDPD, SECUREPD; SOC with two or no known models) the bytes cannot tell: the
   layout another config of the same list showed, else the layout the device's earlier configs
   showed (deviceSetConfig), else for SIGNEDPD/SECUREPD the layout in which only the deviceId
   exists on the configured SoC, else 2.50 (the headers qnnemu ships; the layout the vendor's
   library reads and ONNX Runtime's QNN EP writes).

Nothing past byte 12 is read before 2.50 is decided; a 2.50 decision for an 8-aligned address
reads bytes 12..15 (``arch.arch``, the PD flags), which share the 8-byte block of bytes 8..11
and so can never fault.  Bytes 16..23 (``rsmHandle``) are never read: the option is refused.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..headers import Q

LAYOUT_2_43 = "2.43"
LAYOUT_2_50 = "2.50"
LAYOUT_TEXT = {LAYOUT_2_43: "QNN 2.43 layout (12 bytes, union at offset 4)",
               LAYOUT_2_50: "QNN 2.50 layout (24 bytes, union at offset 8)"}
UNION_OFFSET = {LAYOUT_2_43: 4, LAYOUT_2_50: 8}

# The smallest HTP arch value (QnnHtpDevice_Arch_t V66 and later); device ids are far below it.
MIN_ARCH = 66

SOC = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC
ARCH = Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH
SIGNEDPD = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD
SECUREPD = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SECUREPD
ASYNC_EXECUTE = Q.QNN_HTP_DEVICE_CONFIG_OPTION_ASYNC_EXECUTE
DYNAMIC_PARTITIONING = Q.QNN_HTP_DEVICE_CONFIG_OPTION_DYNAMIC_PARTITIONING
APP_UID = Q.QNN_HTP_DEVICE_CONFIG_OPTION_APP_UID
HTP_EXTENSION = Q.QNN_HTP_DEVICE_CONFIG_OPTION_HTP_EXTENSION
ONLY_IN_2_50 = (ASYNC_EXECUTE, DYNAMIC_PARTITIONING, APP_UID, HTP_EXTENSION)
KNOWN_OPTIONS = (SOC, ARCH, SIGNEDPD, SECUREPD, *ONLY_IN_2_50)

OPTION_NAMES = {v: n.removeprefix("QNN_HTP_DEVICE_CONFIG_OPTION_")
                for v, n in Q.enum("QNN_HTP_DEVICE_CONFIG_OPTION_").items()}

_RANKS = {0: "no SoC model", 1: "a SoC model the emulator does not model", 2: "a modelled SoC model"}

# (address, offset, size) -> bytes of the client's struct
Reader = Callable[[int, int, int], bytes]


@dataclass
class HtpDeviceOption:
    """One QnnHtpDevice_CustomConfig_t, copied out of the client's memory."""
    index: int                      # position in the QnnDevice_Config_t list
    option: int
    layout: str
    reason: str                     # why this layout (for the DEBUG log and docs)
    shown: bool = True              # the config's own bytes showed the layout (not a fallback)
    soc_model: int | None = None
    device_id: int | None = None
    arch: int | None = None
    enabled: bool | None = None     # useSignedProcessDomain / useSecureProcessDomain
    other_soc_word: int | None = None  # SOC: the word the other layout would have read

    @property
    def name(self) -> str:
        return OPTION_NAMES.get(self.option, str(self.option))

    @property
    def path(self) -> str:
        return f"config[{self.index}].customConfig"


def _words(raw: bytes) -> tuple[int, int, int]:
    return struct.unpack("<3I", raw[:12])


def detect(option: int, address: int, raw12: bytes,
           known_soc: Callable[[int], int]) -> tuple[str | None, str]:
    """(layout, reason) from the first 12 bytes; layout None when they cannot tell.
    ``known_soc(model)``: 2 for a SoC model of the SoC table, 1 for one that is only tolerated
    (the vendor's library accepts it), 0 otherwise; the word of higher rank wins."""
    _, at4, at8 = _words(raw12)
    if option in ONLY_IN_2_50:
        return LAYOUT_2_50, f"option {OPTION_NAMES[option]} exists only in QNN 2.50 headers"
    if option not in KNOWN_OPTIONS:
        return None, f"unknown option {option}"
    if address % 8:
        return LAYOUT_2_43, f"the struct is at an address that is not 8-aligned (0x{address:x})"
    if option == SOC:
        old, new = known_soc(at4), known_soc(at8)  # ranks: 2 modelled, 1 tolerated, 0 unknown
        if new > old:
            return LAYOUT_2_50, f"offset 8 holds SoC model {at8}, offset 4 holds {at4} ({_RANKS[old]})"
        if old > new:
            return LAYOUT_2_43, f"offset 4 holds SoC model {at4}, offset 8 holds {at8} ({_RANKS[new]})"
        if old and at4 == at8:
            return LAYOUT_2_50, f"offsets 4 and 8 both hold SoC model {at8}"
        return None, (f"offsets 4 and 8 hold {at4} and {at8}: "
                      + ("both are SoC models" if old else "neither is a SoC model"))
    if option == ARCH:
        if at8 >= MIN_ARCH:
            return LAYOUT_2_43, f"offset 8 holds {at8}, an arch value (>= {MIN_ARCH}), not a device id"
        return LAYOUT_2_50, f"offset 8 holds {at8}, a device id (< {MIN_ARCH}), not an arch value"
    return None, f"{OPTION_NAMES[option]} has the same two small words in both layouts"


def shown_layout(options: list[HtpDeviceOption], earlier: str | None) -> str | None:
    """The layout the configs' own bytes showed (``earlier`` when they showed none or both)."""
    shown = {o.layout for o in options if o.shown}
    return shown.pop() if len(shown) == 1 else earlier


def read_htp_device_configs(items: list[tuple[int, int]], read: Reader, known_soc: Callable[[int], int],
                            earlier_layout: str | None = None,
                            devices_for: Callable[[int | None, int | None], int] | None = None,
                            ) -> list[HtpDeviceOption]:
    """``items``: (index in the config list, address of its QnnHtpDevice_CustomConfig_t).
    ``earlier_layout``: the layout the device's earlier configs showed (deviceSetConfig).
    ``devices_for(soc_model, arch)``: how many NSP devices the configured SoC has (the list's
    SOC/ARCH values, None when absent), to read a lone SIGNEDPD/SECUREPD config in the layout
    whose deviceId exists."""
    first = [(i, addr, read(addr, 0, 12)) for i, addr in items]
    decided = [(i, addr, raw, *detect(_words(raw)[0], addr, raw, known_soc)) for i, addr, raw in first]
    shown = next(((lay, i) for i, _, _, lay, _ in decided if lay is not None), None)
    out: list[HtpDeviceOption] = []
    deferred: list[tuple[HtpDeviceOption, int, bytes]] = []
    for i, addr, raw, layout, reason in decided:
        option = _words(raw)[0]
        own = layout is not None
        if layout is None:
            if shown is not None:
                layout, why = shown[0], f"config[{shown[1]}] of the same list is in that layout"
            elif earlier_layout is not None:
                layout, why = earlier_layout, "the device's earlier configs were in that layout"
            elif option in (SIGNEDPD, SECUREPD) and devices_for is not None:
                opt = HtpDeviceOption(i, option, LAYOUT_2_50, reason, shown=False)
                deferred.append((opt, addr, raw))
                out.append(opt)
                continue
            else:
                layout, why = LAYOUT_2_50, _DEFAULT_WHY
            reason = f"{reason}; taken as {layout}: {why}"
        opt = HtpDeviceOption(i, option, layout, reason, shown=own)
        _decode(opt, addr, raw, read)
        out.append(opt)
    if deferred and devices_for is not None:   # (only deferred when devices_for is given)
        soc = next((o.soc_model for o in out if o.option == SOC), None)
        arch = next((o.arch for o in out if o.option == ARCH), None)
        n = devices_for(soc, arch)
        for opt, addr, raw in deferred:
            _, at4, at8 = _words(raw)
            if at8 >= n and at4 < n:
                opt.layout, why = LAYOUT_2_43, (f"only the 2.43 reading's deviceId ({at4}) exists on the "
                                                f"configured SoC ({n} device(s)); read as 2.50 it would be {at8}")
            else:
                opt.layout, why = LAYOUT_2_50, _DEFAULT_WHY
            opt.reason = f"{opt.reason}; taken as {opt.layout}: {why}"
            _decode(opt, addr, raw, read)
    return out


_DEFAULT_WHY = "the layout of the headers qnnemu ships and the vendor's library reads"


def _decode(opt: HtpDeviceOption, address: int, raw: bytes, read: Reader) -> None:
    """Fills ``opt``'s fields from the client's struct in ``opt.layout``."""
    _, at4, at8 = _words(raw)
    word = at4 if opt.layout == LAYOUT_2_43 else at8
    if opt.option == SOC:
        opt.soc_model = word
        opt.other_soc_word = at8 if opt.layout == LAYOUT_2_43 else at4
    elif opt.option in (ARCH, SIGNEDPD, SECUREPD):
        # {uint32_t deviceId; <4-byte field>} at the union: bytes 8..11 in 2.43, 12..15 in 2.50
        second = raw[8:12] if opt.layout == LAYOUT_2_43 else read(address, UNION_OFFSET[LAYOUT_2_50] + 4, 4)
        opt.device_id = word
        if opt.option == ARCH:
            opt.arch = struct.unpack("<I", second)[0]
        else:
            opt.enabled = second[0] != 0  # a C bool: any non-zero byte is true
    elif opt.option in (ASYNC_EXECUTE, DYNAMIC_PARTITIONING):
        opt.device_id = word  # refused: their flags and rsmHandle are never read
