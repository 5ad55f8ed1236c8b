"""The HTP SoC table: every ``QNN_SOC_MODEL_*`` of Qnn_SocModel_t (QnnTypes.h) that carries an
HTP (Hexagon v68 or later), with what the device model needs from it.

The QNN device config ``QNN_HTP_DEVICE_CONFIG_OPTION_SOC`` selects a row; ``..._ARCH`` selects
the reference row of an arch (``soc_for_arch``); ``deviceGetPlatformInfo`` / ``deviceGetInfo``
report the row in ``QnnHtpDevice_OnChipDeviceInfoExtension_t``; the graph configs are checked
against it (VTCM size, HVX threads, cores, DLBC, SLC allocator, byte-granularity VTCM).

Sources (``source`` of each row):

- ``executorch``: pytorch/executorch ``backends/qualcomm/serialization/qc_schema.py``
  ``_soc_info_table`` (SoC model -> HTP arch, VTCM MiB) and PR 19216 (SM8635, SM8735);
- ``litert``: google-ai-edge/LiteRT ``litert/vendors/qualcomm/core/schema/soc_table.cc``
  (same facts; adds SC8380XP and QCS8300);
- ``qnn-docs``: the QNN SDK documentation (the SA8797 tutorial gives soc_id 72 -> v81; the
  "Control which HTP device executes a model" page: Auto SA-series parts expose two NSP devices);
- ``chosen``: no public number found: arch from the part's generation, VTCM chosen (2 MiB for
  sub-flagship parts, 8 MiB for compute/IoT twins of a flagship) -- an emulator decision.

Columns no public source gives per SoC, chosen by rule and documented here:

- ``hvx_threads``: the HVX contexts a graph may reserve (NUM_HVX_THREADS maximum), measured per
  SoC on the vendor's libQnnHtp.so 2.51 (``MEASURED_HVX_THREADS``: the number its context binary
  records for NUM_HVX_THREADS = 0 and for any value above the maximum, which it clips); rows
  without a measurement: 4, or 2 with less than 8 MiB VTCM;
- ``hmx``: every HTP (v68+) has the HMX matrix unit, so the column is true on every row (kept so
  that the device model never assumes it);
- ``dlbc``: Deep Learning Bandwidth Compression from v75 (the foundation's choice, kept);
- ``signed_pd``: every HTP supports the signed process domain;
- ``slc``: the System Level Cache allocator (HTP documentation: "only supported by specific SOCs"; its
  example names soc_id 69 = SM8750, v79): v79 and later;
- ``va_optimization``: SHARE_RESOURCES ``SEQUENTIAL_WITH_VA_OPTIMIZATION`` ("supported only on
  specific SoCs"): v73 and later (the default device supports the default type);
- ``cores`` (HTP cores of one device, NUM_CORES maximum): 1, except SA8797 (2; the QNN docs name
  a multi-core feature for its v81 HTP); ``devices`` (NSP devices, ``numHwDevices``): 2 on the
  Auto SA8295 / SA8540, else 1.

Not in the table: the pre-HTP Hexagon parts (SDM8xx, SM6150, SM7150, SM8250 family, SA8195,
SM6xxx/4xxx with v66 or cDSP-less parts, IPQ network parts, QRB/QCS/QCM parts without an HTP),
AIC100 (Cloud AI 100 is an accelerator card with its own backend; our headers define no PCIe
HTP device type) and the parts with an HTP whose arch no source gives (SM8325, SM7315, SM6450,
SM6450Q, SM7435, SM4450, SM6650, SM6475, SM4635, SM7635, SM7750, SA8620P, QCS7230, QCM6690,
SSG2115P's successors not listed, ...): ``QNN_HTP_DEVICE_CONFIG_OPTION_SOC`` ignores those the
vendor's library accepts (warning QNNEMU-device-soc-unmodelled, qnnemu/core/device.py) and
refuses the rest (QNNEMU-device-soc); ``..._ARCH`` reaches every arch.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..headers import Q

MIB = 1 << 20
HTP_ARCHS = (68, 69, 73, 75, 79, 81)   # archs with at least one SoC row (v85: arch-only devices)
FLOAT16_MATH_FROM_ARCH = 69            # float32 graphs computed in float16 math (SocInfo.float16_math)

# The float16 reduction order of the device model (QNN HTP backend documentation, "QNN HTP FP16
# output difference between SM8550 and SM8650": v75 "changed the associativity of some of the
# computations"; docs/device-variants.md).  The contraction of MatMul / FullyConnected / Conv2d
# is summed in blocks of FLOAT16_REDUCTION_BLOCK input channels, each block's partial sum rounded
# to float32; up to v73 the partials are added in order (((p0 + p1) + p2) + ...), from v75 on
# pairwise ((p0 + p1) + (p2 + p3)) ...).  The block size and the two orders are the emulator's
# choice: the document gives no numbers, and the vendor's x86-64 library computes the same
# float16 results on every arch (measured: SM8550, SM8650, SM8750, SM8850 bit-identical), so the
# order applies only when QNNEMU_FLOAT16_ASSOCIATIVITY=device asks for it (qnnemu/core/float16.py).
FLOAT16_REDUCTION_BLOCK = 32
PAIRWISE_REDUCTION_FROM_ARCH = 75


def float16_reduction_order(arch: int) -> str:
    """"sequential" (v69-v73) or "pairwise" (v75 and later): how the device model adds the
    float16-math partial sums of an HTP ``arch``."""
    return "pairwise" if int(arch) >= PAIRWISE_REDUCTION_FROM_ARCH else "sequential"


@dataclass(frozen=True)
class SocInfo:
    soc_model: int          # QNN_SOC_MODEL_*
    name: str               # marketing name
    arch: int               # HTP arch (QnnHtpDevice_Arch_t)
    vtcm_bytes: int
    hvx_threads: int
    hmx: bool
    dlbc: bool
    signed_pd: bool
    cores: int
    devices: int
    slc: bool
    va_optimization: bool
    source: str

    @property
    def vtcm_mb(self) -> int:
        return self.vtcm_bytes // MIB

    @property
    def byte_granularity_vtcm(self) -> bool:
        """VTCM_SIZE_IN_BYTES requests (HTP documentation, "Byte-Granularity VTCM"): from v81."""
        return self.arch >= 81

    @property
    def concurrent_sharing(self) -> bool:
        """REGISTER_CONCURRENT_RESOURCE_SHARING / CONCURRENT_OPTIMIZATION: V81 only (HTP documentation)."""
        return self.arch >= 81

    @property
    def float16_math(self) -> bool:
        """Float32 graphs run in float16 math (QNN HTP backend documentation, "QNN HTP
        Precision": "float32 math is not supported by QNN HTP"; the HTP converts float32
        inputs to float16 "on select Qualcomm SoCs").  The vendor's libQnnHtp.so does so from
        v69 on, whatever the deprecated PRECISION graph config says; on v68 it computes
        float32 (docs/numerics.md "Float math per arch")."""
        return self.arch >= FLOAT16_MATH_FROM_ARCH

    @property
    def float16_reduction_order(self) -> str:
        """The device model's float16 reduction order (``float16_reduction_order``)."""
        return float16_reduction_order(self.arch)


# NUM_HVX_THREADS maximum per SoC as the vendor's libQnnHtp.so 2.51 clips it (its context binary's
# graph blob info records numHvxThreads; tests/test_acceptance_vendor.py re-measures it).
MEASURED_HVX_THREADS = {
    "SM8350": 4, "SM8450": 4, "SM8475": 4, "SM8550": 4, "SM8635": 4, "SM8650": 4, "SM8735": 4,
    "SM8750": 6, "SM8850": 8, "SM7325": 2, "SM7450": 2, "SM7475": 4, "SM7550": 2, "SM7675": 4,
    "SC8280X": 4, "SC8380XP": 4, "SA8295": 4, "SA8540": 4, "SA8255": 4, "SA8797": 8,
    "SXR1230P": 2, "SSG2115P": 2, "SSG2125P": 2, "SXR2230P": 4, "SXR2330P": 6,
    "QCS8550": 4, "QCS9100": 4, "QCS8300": 4,
}


def _row(model: str, name: str, arch: int, vtcm_mb: int, source: str, *, cores: int = 1,
         devices: int = 1) -> SocInfo:
    hvx = MEASURED_HVX_THREADS.get(model, 4 if vtcm_mb >= 8 else 2)
    return SocInfo(
        soc_model=int(getattr(Q, f"QNN_SOC_MODEL_{model}")), name=name, arch=arch,
        vtcm_bytes=vtcm_mb * MIB, hvx_threads=hvx, hmx=True,
        dlbc=arch >= 75, signed_pd=True, cores=cores, devices=devices, slc=arch >= 79,
        va_optimization=arch >= 73, source=source)


_ROWS = (
    # mobile flagships
    _row("SM8350", "Snapdragon 888", 68, 4, "executorch"),
    _row("SM8450", "Snapdragon 8 Gen 1", 69, 8, "executorch"),
    _row("SM8475", "Snapdragon 8+ Gen 1", 69, 8, "executorch"),
    _row("SM8550", "Snapdragon 8 Gen 2", 73, 8, "executorch"),
    _row("SM8635", "Snapdragon 8s Gen 3", 73, 8, "executorch"),
    _row("SM8650", "Snapdragon 8 Gen 3", 75, 8, "executorch"),
    _row("SM8735", "Snapdragon 8s Gen 4", 79, 8, "executorch"),
    _row("SM8750", "Snapdragon 8 Elite", 79, 8, "executorch"),
    _row("SM8850", "Snapdragon 8 Elite Gen 5", 81, 8, "executorch"),
    # sub-flagship mobile (arch from the generation, VTCM chosen)
    _row("SM7325", "Snapdragon 778G", 68, 2, "chosen"),
    _row("SM7450", "Snapdragon 7 Gen 1", 69, 2, "chosen"),
    _row("SM7475", "Snapdragon 7+ Gen 2", 69, 2, "chosen"),
    _row("SM7550", "Snapdragon 7 Gen 3", 73, 2, "chosen"),
    _row("SM7675", "Snapdragon 7+ Gen 3", 73, 2, "chosen"),
    # compute
    _row("SC8280X", "Snapdragon 8cx Gen 3", 68, 8, "chosen"),
    _row("SC8380XP", "Snapdragon X Elite", 73, 8, "litert"),
    # automotive
    _row("SA8295", "Snapdragon Cockpit SA8295P", 68, 8, "executorch", devices=2),
    _row("SA8540", "Snapdragon Ride SA8540P", 68, 8, "executorch", devices=2),
    _row("SA8255", "Snapdragon Cockpit SA8255P", 73, 8, "executorch"),
    _row("SA8797", "Snapdragon Cockpit Elite SA8797P", 81, 16, "executorch", cores=2),
    # XR / AR
    _row("SXR1230P", "Snapdragon XR1+ Gen 1", 73, 2, "executorch"),
    _row("SSG2115P", "Snapdragon AR1 Gen 1", 73, 2, "executorch"),
    _row("SSG2125P", "Snapdragon AR1+ Gen 1", 73, 2, "executorch"),
    _row("SXR2230P", "Snapdragon XR2 Gen 2", 69, 8, "executorch"),
    _row("SXR2330P", "Snapdragon XR2+ Gen 2", 79, 8, "executorch"),
    # IoT
    _row("QCS8550", "Qualcomm QCS8550", 73, 8, "chosen"),
    _row("QCS9100", "Qualcomm QCS9100", 73, 8, "executorch"),
    _row("QCS8300", "Qualcomm QCS8300", 75, 8, "litert"),
)

SOCS: dict[int, SocInfo] = {r.soc_model: r for r in _ROWS}

# The reference SoC of each arch for QNN_HTP_DEVICE_CONFIG_OPTION_ARCH: the mobile flagship
# (SA8797 for nothing: v81's flagship is SM8850).
_ARCH_REFERENCE = {68: "SM8350", 69: "SM8450", 73: "SM8550", 75: "SM8650", 79: "SM8750", 81: "SM8850"}

# The default device (deviceCreate without SOC/ARCH, deviceGetPlatformInfo, a context without a
# device): the QNN HTP backend documentation's default for QNN_HTP_DEVICE_CONFIG_OPTION_SOC
# ("QNN HTP Device Config Options": QNN_SOC_MODEL_SM8350, v68, 4 MiB VTCM), which is also what
# the vendor's x86-64 libQnnHtp.so assumes without a SOC config.  The environment variable
# QNNEMU_SOC_MODEL (``SOC_MODEL_ENV``) selects another default without touching the app.
DEFAULT_SOC = int(Q.QNN_SOC_MODEL_SM8350)
SOC_MODEL_ENV = "QNNEMU_SOC_MODEL"

# Known archs without a SoC row (QnnHtpDevice_Arch_t V85): an arch-only device.
ARCH_ONLY = (85,)


def soc_for_arch(arch: int) -> SocInfo | None:
    """The reference SoC of an HTP arch (None for archs without one, e.g. v85)."""
    name = _ARCH_REFERENCE.get(int(arch))
    return SOCS[int(getattr(Q, f"QNN_SOC_MODEL_{name}"))] if name else None


def arch_only(arch: int) -> SocInfo:
    """A device configured by an arch with no SoC row: socModel UNKNOWN, the newest known
    arch's capabilities (8 MiB VTCM, 8 HVX threads as v81)."""
    return SocInfo(soc_model=int(Q.QNN_SOC_MODEL_UNKNOWN), name=f"HTP v{arch}", arch=int(arch),
                   vtcm_bytes=8 * MIB, hvx_threads=8, hmx=True, dlbc=True, signed_pd=True, cores=1,
                   devices=1, slc=True, va_optimization=True, source="chosen")


def parse_soc_model(text: str) -> SocInfo | None:
    """The row a SoC is named by: its QNN_SOC_MODEL_* number ("43") or name ("SM8550",
    "sm8550", "QNN_SOC_MODEL_SM8550"); None when no row matches."""
    text = str(text).strip()
    if text.isdigit():
        return SOCS.get(int(text))
    name = text.upper()
    name = name[len("QNN_SOC_MODEL_"):] if name.startswith("QNN_SOC_MODEL_") else name
    value = getattr(Q, f"QNN_SOC_MODEL_{name}", None) if name.isalnum() else None
    return SOCS.get(int(value)) if value is not None else None


def default_soc(environ=None) -> SocInfo:
    """The default device's row: QNNEMU_SOC_MODEL when set, else ``DEFAULT_SOC``.  An invalid
    value raises ValueError saying what is accepted (the device layer turns it into a QNN
    error with rule QNNEMU-device-soc-env)."""
    import os
    text = (os.environ if environ is None else environ).get(SOC_MODEL_ENV, "").strip()
    if not text:
        return SOCS[DEFAULT_SOC]
    row = parse_soc_model(text)
    if row is None:
        names = ", ".join(f"{n} ({r.soc_model})" for n, r in sorted(
            (_model_name(r.soc_model), r) for r in SOCS.values()))
        raise ValueError(f"{text!r} is not an HTP SoC of the emulator's SoC table; give a "
                         f"QNN_SOC_MODEL_* number or name: {names}")
    return row


def _model_name(soc_model: int) -> str:
    name = Q.enum("QNN_SOC_MODEL_").get(int(soc_model))
    return name[len("QNN_SOC_MODEL_"):] if name else str(soc_model)


def soc_info(soc_model: int, arch: int | None = None) -> SocInfo:
    """The row of ``soc_model``; an unknown model falls back to ``arch`` (arch-only devices)."""
    row = SOCS.get(int(soc_model))
    if row is not None:
        return row
    if arch is not None:
        return soc_for_arch(arch) or arch_only(arch)
    return SOCS[DEFAULT_SOC]
