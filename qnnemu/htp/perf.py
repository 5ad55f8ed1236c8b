"""HTP/QnnHtpPerfInfrastructure.h: power-config ids, the performance votes recorded on them,
the clocks those votes give, and the named perf profiles of the backend extensions.

QNN HTP backend documentation, "QNN HTP Performance Infrastructure API" (DCVS v3, sleep
latency/disable, RPC control latency and polling, adaptive polling, HMX v2 with its voting table,
the two use-case examples) and "QNN HTP Backend Extensions" (the perf profile table burst ...
extreme_power_saver, with the internal RELAXED/RELEASED power states); QNN 2.50 adds CENG (the
compression engine's clock), and for v85 the expanded corners (DCVS_V3_EXP, CENG_EXP) with the
HIGH_D1..HIGH_D15 perf modes.  The full model -- rules, aggregation, the corner -> frequency
table -- is documented in docs/htp-perf.md.

Votes are process-wide, like the DSP's: ``PERF`` holds every power-config id.  A vote on an id
is the *state* the id's setPowerConfig calls have built (the ``set*`` flags of DCVS v3 say which
fields a call updates).  ``PERF.active(device_id, core_id)`` aggregates the ids of one core (the
highest clock wins) and ``current_clocks`` turns that into MHz for the cost model.

What is refused, and with which QNN_HTP_PERF_INFRASTRUCTURE_ERROR_* code, is what the vendor's
x86-64 library (QNN 2.51) refuses, measured on v68, v69, v73, v75, v79, v81 and v85 devices:
it processes a call's entries in list order and keeps those applied before a refused one; it
checks the id, the DCVS contextId, the option's arch, the DCVS prerequisite of HMX/CENG, the
expanded corners' range and the perf modes' range, the HMX timeout range, and nothing else.
What it accepts without a check and the emulator has to interpret (a corner that is no corner,
corners out of order, a sleep latency or RPC polling time out of range, ...) is accepted with a
warning rule saying how it is modelled.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from .. import rules
from ..errors import QnnError
from ..headers import Q
from ..location import Location
from ..rules import fail
from .device_model import DeviceModel, newest_device_model

INVALID_INPUT = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_INVALID_INPUT
UNSUPPORTED_CONFIG = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG
UNSUPPORTED = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED
FAILED = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_FAILED

OPT_DCVS_V3 = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DCVS_V3
OPT_RPC_CONTROL_LATENCY = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_RPC_CONTROL_LATENCY
OPT_RPC_POLLING_TIME = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_RPC_POLLING_TIME
OPT_HMX_TIMEOUT = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_HMX_TIMEOUT_INTERVAL_US
OPT_HMX_V2 = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_HMX_V2
OPT_ADAPTIVE_POLLING = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_ADAPTIVE_POLLING_TIME
OPT_DDR_PERF_MODE = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DDR_PERF_MODE
OPT_CENG = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_CENG                  # QNN 2.50
OPT_DCVS_V3_EXP = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DCVS_V3_EXP    # QNN 2.50
OPT_CENG_EXP = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_CENG_EXP          # QNN 2.50
MEM_GROW_SIZE = Q.QNN_HTP_PERF_INFRASTRUCTURE_MEMORY_CONFIGOPTION_GROW_SIZE

# power config option -> the union member of QnnHtpPerfInfrastructure_PowerConfig_t carrying it
POWER_OPTION_FIELDS: dict[int, str] = {
    OPT_DCVS_V3: "dcvsV3Config",
    OPT_RPC_CONTROL_LATENCY: "rpcControlLatencyConfig",
    OPT_RPC_POLLING_TIME: "rpcPollingTimeConfig",
    OPT_HMX_TIMEOUT: "hmxTimeoutIntervalUsConfig",
    OPT_HMX_V2: "hmxV2Config",
    OPT_ADAPTIVE_POLLING: "adaptivePollingTimeConfig",
    OPT_DDR_PERF_MODE: "ddrPerfModeConfig",
    OPT_CENG: "cengConfig",
    OPT_DCVS_V3_EXP: "dcvsV3ExpConfig",
    OPT_CENG_EXP: "cengExpConfig",
}
DCVS_OPTIONS = (OPT_DCVS_V3, OPT_DCVS_V3_EXP)
# Options one call may not carry together (the vendor: INVALID_INPUT).
EXCLUSIVE_OPTIONS = ((OPT_DCVS_V3, OPT_DCVS_V3_EXP), (OPT_CENG, OPT_CENG_EXP))

# ------------------------------------------------------------------------------ field ranges
SLEEP_LATENCY_RANGE_US = (10, 65535)            # the documentation: "ranges 10-65535 us"
RPC_POLLING_MAX_US = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIG_MAX_RPC_POLLING_TIME  # 9999
RPC_LATENCY_CRITICAL_BELOW_US = 200             # latency-critical apps vote 0 < x < 200
HMX_TIMEOUT_RANGE_US = (100, 1000000)           # the vendor refuses values outside (measured)
HMX_V2_MIN_ARCH = 75                            # the documentation and the vendor: HMX votes from v75
CENG_MIN_ARCH = 75                              # the vendor: CENG from v75 (v73 refuses, measured)
EXP_MIN_ARCH = 85                               # expanded corners: v85 and later (v81 refuses, measured)
# DDR perf mode: the vendor's x86 library refuses it on every arch it emulates (v68 .. v85,
# measured), so no emulated device has it; the rules behind the gate stay for later archs.
DDR_PERF_MODE_MIN_ARCH = 89
CLK_PERF_MAX = Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_MAX   # 255: perf modes above are refused
EXP_CORNER_MIN_VALUE = 0x100                    # expanded corners: 0 (DISABLE) or >= 0x100
DEFAULT_HMX_TIMEOUT_US = 300000                 # hmx_timeout_us default
DEFAULT_RPC_CONTROL_LATENCY_US = 100            # rpc_control_latency default
DEFAULT_RPC_POLLING_US = 9999                   # polling default of the ON profiles

# value -> name (Q.enum's direction), without the UNKNOWN sentinels
POWER_MODES = {v: n for v, n in Q.enum("QNN_HTP_PERF_INFRASTRUCTURE_POWERMODE_").items()
               if not n.endswith("UNKNOWN")}
CLK_PERF_MODES = {v: n for v, n in Q.enum("QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_").items()
                  if not n.endswith(("UNKNOWN", "_MAX"))}
POWERMODE = {name.removeprefix("QNN_HTP_PERF_INFRASTRUCTURE_POWERMODE_"): value
             for value, name in POWER_MODES.items()}


def _corner_names(prefixes: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for prefix in prefixes:
        for value, name in Q.enum(prefix).items():
            if not name.endswith("UNKNOWN"):
                out[name.removeprefix(prefix)] = value
    return out


# QnnHtpPerfInfrastructure_VoltageCorner_t (DCVS v3 bus/core rails), short names:
# DISABLE, MIN_VOLTAGE_CORNER, SVS2, SVS, SVS_PLUS, NOM, NOM_PLUS, TURBO, ..., MAX_VOLTAGE_CORNER
VCORNER: dict[str, int] = _corner_names(("DCVS_VOLTAGE_VCORNER_", "DCVS_VOLTAGE_CORNER_"))
VCORNER_NAME: dict[int, str] = {v: k for k, v in VCORNER.items()}
# QnnHtpPerfInfrastructure_ExpVoltageCorner_t (HMX v2 rail): DISABLE, MIN, LOW_SVS_D2, ..., MAX
EXP_VCORNER: dict[str, int] = _corner_names(("DCVS_EXP_VCORNER_",))
EXP_VCORNER_NAME: dict[int, str] = {v: k for k, v in EXP_VCORNER.items()}

# ------------------------------------------------------------- the emulator's clock model
# Frequency of a corner relative to the arch's NOM frequency.  Both enums grow with the
# voltage, so these fractions grow with the enum value.  DISABLE is not a frequency: a rail
# voted DISABLE is released (see _rail_corner).
CORNER_SCALE: dict[str, float] = {
    "MIN_VOLTAGE_CORNER": 0.30, "SVS2": 0.50, "SVS": 0.65, "SVS_PLUS": 0.80, "NOM": 1.00,
    "NOM_PLUS": 1.10, "TURBO": 1.25, "TURBO_PLUS": 1.35, "TURBO_L2": 1.40, "TURBO_L3": 1.45,
    "TURBO_L4": 1.50, "TURBO_L5": 1.55, "MAX_VOLTAGE_CORNER": 1.55,
}
EXP_CORNER_SCALE: dict[str, float] = {
    "MIN": 0.30, "LOW_SVS_D2": 0.40, "LOW_SVS_D1": 0.45, "LOW_SVS": 0.50, "LOW_SVS_L0": 0.55,
    "SVS": 0.65, "SVS_L0": 0.70, "SVS_L1": 0.80, "SVS_L2": 0.90, "NOM": 1.00, "NOM_L1": 1.10,
    "NOM_L2": 1.15, "TUR": 1.25, "TUR_L1": 1.35, "TUR_L2": 1.40, "TUR_L3": 1.45, "MAX": 1.55,
}
# HIGH runs a corner's top frequency, LOW its lowest; HIGH_D1..HIGH_D15 (QNN 2.50) are steps
# down from the top, modelled as 1% each so that HIGH_D15 meets LOW.  Values the enum lacks up to
# CLK_PERF_MAX are accepted by the vendor's library; the hardware "clamps to the nearest supported
# frequency": modelled as LOW.
HMX_PERF_MODE_SCALE = {Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_HIGH: 1.00,
                       Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_LOW: 0.85,
                       **{getattr(Q, f"QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_HIGH_D{n}"): 1.0 - 0.01 * n
                          for n in range(1, 16)}}
PERF_MODE_CLAMPED_SCALE = HMX_PERF_MODE_SCALE[Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_LOW]


def perf_mode_scale(mode: int) -> float:
    """The frequency factor of a ClkPerfMode_t value (0..CLK_PERF_MAX)."""
    return HMX_PERF_MODE_SCALE.get(int(mode), PERF_MODE_CLAMPED_SCALE)


# Expanded corners between the named anchors of EXP_CORNER_SCALE (QNN 2.50 added RET, MIN_SVS,
# LOW_SVS_D3_0, ..., TUR_L5, SUPER_TURBO, DEFINED_MAX): the enum values grow with the voltage, so
# a value's frequency is interpolated linearly between its neighbouring anchors; DEFINED_MAX
# (the top defined corner, 736) runs as fast as MAX.
_EXP_ANCHORS = sorted([(getattr(Q, f"DCVS_EXP_VCORNER_{n}"), f) for n, f in EXP_CORNER_SCALE.items()]
                      + [(Q.DCVS_EXP_VCORNER_DEFINED_MAX, EXP_CORNER_SCALE["MAX"])])


def exp_corner_scale(value: int) -> float:
    """Frequency relative to NOM of an expanded corner value (>= 0x100; DISABLE is not a
    frequency: see _exp_mhz)."""
    value = int(value)
    lo_v, lo_f = _EXP_ANCHORS[0]
    if value <= lo_v:
        return lo_f
    for hi_v, hi_f in _EXP_ANCHORS[1:]:
        if value <= hi_v:
            return round(lo_f + (hi_f - lo_f) * (value - lo_v) / (hi_v - lo_v), 4)
        lo_v, lo_f = hi_v, hi_f
    return lo_f


DDR_PERF_MODE_BUS_SCALE = 1.10   # DDR perf mode: the bus runs at its perf-mode DDR frequency


@dataclass(frozen=True)
class ArchNominal:
    """An HTP arch's clocks at the NOM corner (MHz) — the emulator's model, not measured."""
    core_mhz: float
    hmx_mhz: float
    bus_mhz: float


ARCH_NOMINAL: dict[int, ArchNominal] = {
    68: ArchNominal(800.0, 800.0, 1550.0),
    69: ArchNominal(900.0, 900.0, 1750.0),
    73: ArchNominal(1000.0, 1000.0, 2000.0),
    75: ArchNominal(1100.0, 1100.0, 2100.0),
    79: ArchNominal(1200.0, 1250.0, 2300.0),
    81: ArchNominal(1300.0, 1350.0, 2400.0),
    85: ArchNominal(1400.0, 1450.0, 2500.0),
}
DEFAULT_ARCH = 73   # the reference clocks of the cost model (v73); also used for an arch missing from the table


@dataclass(frozen=True)
class Clocks:
    """The clocks the active votes give (what the cost model turns cycles into time with)."""
    core_mhz: float     # HVX / scalar core clock
    hmx_mhz: float      # HMX clock
    bus_mhz: float      # DDR bus clock (DMA bandwidth)
    corner: str         # the voltage corner name of the core vote (e.g. "NOM", "TURBO")


def _nominal(arch: int) -> ArchNominal:
    return ARCH_NOMINAL.get(arch, ARCH_NOMINAL[DEFAULT_ARCH])


def nominal_clocks(arch: int = DEFAULT_ARCH) -> Clocks:
    """The clocks without any vote: every rail at NOM."""
    n = _nominal(arch)
    return Clocks(n.core_mhz, n.hmx_mhz, n.bus_mhz, "NOM")


NOMINAL = nominal_clocks(DEFAULT_ARCH)   # v73 clocks without votes (the cost model's reference)


def corner_mhz(arch: int, rail: str, corner: str) -> float:
    """Frequency of ``corner`` on ``rail`` ("core", "bus": VoltageCorner_t names; "hmx":
    ExpVoltageCorner_t names) for ``arch``."""
    n = _nominal(arch)
    if rail == "hmx":
        return round(n.hmx_mhz * EXP_CORNER_SCALE[corner], 1)
    base = n.core_mhz if rail == "core" else n.bus_mhz
    return round(base * CORNER_SCALE[corner], 1)


def clock_table_markdown() -> str:
    """The corner → MHz table per arch (docs/htp-perf.md holds this text; a test compares)."""
    archs = sorted(ARCH_NOMINAL)
    lines = ["| corner | " + " | ".join(f"v{a} core / bus" for a in archs) + " |",
             "| --- |" + " --- |" * len(archs)]
    for c in CORNER_SCALE:
        lines.append(f"| {c} | " + " | ".join(
            f"{corner_mhz(a, 'core', c):g} / {corner_mhz(a, 'bus', c):g}" for a in archs) + " |")
    lines += ["", "| HMX corner | " + " | ".join(f"v{a} hmx" for a in archs) + " |",
              "| --- |" + " --- |" * len(archs)]
    for c in EXP_CORNER_SCALE:
        lines.append(f"| {c} | " + " | ".join(f"{corner_mhz(a, 'hmx', c):g}" for a in archs) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- the devices
def device_model(device_id: int = 0) -> DeviceModel:
    """The model of HTP device ``device_id`` (only 0 exists): the newest live Device's, else
    the default device."""
    return newest_device_model()


def device_cores(model: DeviceModel) -> int:
    return int(getattr(model, "cores", 1) or 1)


NUM_DEVICES = 1   # deviceGetPlatformInfo reports one on-chip HTP


# ------------------------------------------------------------------------------ the votes
@dataclass
class DcvsVote:
    """An id's DCVS (HVX) vote, from DCVS_V3 or DCVS_V3_EXP (``expanded``): each field is None
    until a call sets it (set* flags).  Corners are as modelled (a legacy value that is no
    VoltageCorner_t is taken as the corner below it, see _legacy_corner)."""
    dcvs_enable: bool | None = None
    power_mode: int | None = None
    sleep_latency_us: int | None = None
    sleep_disable: bool | None = None
    bus: tuple[int, int, int] | None = None      # (min, target, max): VoltageCorner_t, or
    core: tuple[int, int, int] | None = None     # ExpVoltageCorner_t values when expanded
    expanded: bool = False
    core_perf_mode: int = 0                      # DCVS_V3_EXP only (ClkPerfMode_t)
    bus_perf_mode: int = 0


@dataclass
class HmxVote:
    """An id's explicit HMX v2 vote (hmxPickDefault = 0)."""
    corners: tuple[int, int, int]                # (min, target, max) ExpVoltageCorner_t values
    perf_mode: int


@dataclass
class CengVote:
    """An id's compression-engine vote (CENG: VoltageCorner_t values; CENG_EXP: expanded), as
    given: the emulator's cost model has no compression engine, so it only records it."""
    corners: tuple[int, int, int]
    perf_mode: int
    expanded: bool


@dataclass
class PowerConfigId:
    device_id: int
    core_id: int
    votes: dict[int, object] = field(default_factory=dict)   # option -> last accepted entry
    dcvs: DcvsVote | None = None
    hmx: HmxVote | None = None                   # None: the default HMX vote (scales with DCVS)
    ceng: CengVote | None = None                 # None: the default CENG vote (MIN corner, HIGH)
    rpc_control_latency_us: int | None = None
    rpc_polling_time_us: int | None = None
    hmx_timeout_us: int | None = None
    adaptive_polling_time_us: int | None = None
    ddr_perf_mode: int | None = None

    @property
    def hmx_state(self) -> str | None:
        """"explicit", "default" (HVX vote, no/ default HMX vote) or None (no HVX vote)."""
        if self.dcvs is None:
            return None
        return "explicit" if self.hmx is not None else "default"

    @property
    def ceng_state(self) -> str | None:
        """Like ``hmx_state``, for the compression engine."""
        if self.dcvs is None:
            return None
        return "explicit" if self.ceng is not None else "default"


@dataclass(frozen=True)
class ActiveVote:
    """The aggregate of the votes of every id on one device core (docs/htp-perf.md)."""
    ids: tuple[int, ...]
    core_corner: str | None          # the corner of the fastest core vote (None: no core vote)
    bus_corner: str | None
    hmx_mhz: float | None            # highest HMX clock any id's (explicit or default) vote gives
    hmx_explicit: bool               # some id holds an explicit HMX vote
    dcvs_enabled: bool | None        # False as soon as one id disables DCVS
    sleep_latency_us: int | None     # the smallest requested
    sleep_disabled: bool             # some id disabled sleep
    rpc_control_latency_us: int | None   # the smallest non-zero requested
    rpc_polling_time_us: int         # the longest requested (0: polling off)
    adaptive_polling_time_us: int    # the longest, among ids that poll
    hmx_timeout_us: int              # the longest requested (default 300000)
    ddr_perf_mode: bool
    core_mhz: float | None = None    # the fastest core / bus vote's clock (None: no vote)
    bus_mhz: float | None = None
    ceng_votes: tuple = ()           # (id, "explicit"/"default", CengVote | None) of ids with DCVS


def _warn(rule: str, func: str, path: str, message: str) -> None:
    """A warning rule (qnnemu/rules.py): what the vendor's library accepts and the emulator
    interprets, logged to the app logger of the running perf infrastructure call."""
    rules.warn(rule, func, path, message)


def _effective(corners: tuple[int, int, int], dcvs: DcvsVote) -> int:
    """The corner a rail settles at for one id.  DCVS off (or never set): the target.  DCVS
    on: the power mode decides where DCVS drives a busy accelerator within [min, max]."""
    lo, target, hi = corners
    if dcvs.dcvs_enable:
        mode = dcvs.power_mode
        if mode in (POWERMODE["PERFORMANCE_MODE"], POWERMODE["ADJUST_ONLY_UP"]):
            return hi
        if mode in (POWERMODE["POWER_SAVER_MODE"], POWERMODE["POWER_SAVER_AGGRESSIVE_MODE"]):
            return lo
    return target


def _exp_label(value: int) -> str:
    name = EXP_VCORNER_NAME.get(int(value))
    return name if name is not None else f"0x{int(value):x}"


def _rail_clock(dcvs: DcvsVote, rail: str, arch: int) -> tuple[float, str] | None:
    """(MHz, corner label) one id's DCVS vote gives ``rail`` ("core", "bus"), or None."""
    corners = getattr(dcvs, rail)
    if corners is None:
        return None
    c = _effective(corners, dcvs)
    if not dcvs.expanded:
        # A rail voted DISABLE is released by this id: with no other vote it sinks to the floor.
        name = "MIN_VOLTAGE_CORNER" if c == VCORNER["DISABLE"] else VCORNER_NAME[c]
        return corner_mhz(arch, rail, name), name
    n = _nominal(arch)
    base = n.core_mhz if rail == "core" else n.bus_mhz
    if c == EXP_VCORNER["DISABLE"]:
        return round(base * EXP_CORNER_SCALE["MIN"], 1), "MIN"
    mode = dcvs.core_perf_mode if rail == "core" else dcvs.bus_perf_mode
    return round(base * exp_corner_scale(c) * perf_mode_scale(mode), 1), _exp_label(c)


def _fastest(clocks) -> tuple[float, str] | None:
    clocks = [c for c in clocks if c is not None]
    return max(clocks, key=lambda c: c[0]) if clocks else None


def _id_hmx_mhz(cfg: PowerConfigId, arch: int) -> float | None:
    if cfg.dcvs is None:
        return None
    if cfg.hmx is not None:
        c = _effective(cfg.hmx.corners, cfg.dcvs)
        scale = EXP_CORNER_SCALE["MIN"] if c == EXP_VCORNER["DISABLE"] else exp_corner_scale(c)
        return round(_nominal(arch).hmx_mhz * scale * perf_mode_scale(cfg.hmx.perf_mode), 1)
    core = _rail_clock(cfg.dcvs, "core", arch)
    if core is None:
        return None
    # The default HMX vote scales with the id's DCVS (core) clock.
    return round(_nominal(arch).hmx_mhz * core[0] / _nominal(arch).core_mhz, 1)


def _legacy_corner(value: int) -> int:
    """A VoltageCorner_t field's value as modelled: itself when it is a corner, else the
    highest corner below it (DISABLE below MIN_VOLTAGE_CORNER)."""
    value = int(value)
    if value in VCORNER_NAME:
        return value
    below = [v for v in VCORNER_NAME if v <= value]
    return max(below) if below else VCORNER["DISABLE"]


class PerfInfrastructure:
    """Power-config ids and the votes recorded on them (process-wide, like the DSP's)."""

    def __init__(self, models: Callable[[int], DeviceModel] = device_model):
        self._ids = itertools.count(1)
        self.configs: dict[int, PowerConfigId] = {}
        self.memory: dict[tuple[int, int], dict[int, int]] = {}
        self.lock = threading.RLock()
        self.models = models   # device id -> DeviceModel (arch, cores)

    # ---- ids ----------------------------------------------------------------------------
    def _check_device_core(self, func: str, device_id: int, core_id: int) -> DeviceModel:
        if not 0 <= device_id < NUM_DEVICES:
            fail(Location(func).path("deviceId"), "QNNEMU-perf-device-id",
                 f"{device_id} is not a device of the platform (device ids 0..{NUM_DEVICES - 1})", code=INVALID_INPUT)
        model = self.models(device_id)
        cores = device_cores(model)
        if not 0 <= core_id < cores:
            fail(Location(func).path("coreId"), "QNNEMU-perf-core-id",
                 f"{core_id} is not a core of device {device_id} (HTP v{model.arch}, "
                 f"core ids 0..{cores - 1})", code=INVALID_INPUT)
        return model

    def create_id(self, device_id: int, core_id: int) -> int:
        with self.lock:
            self._check_device_core("createPowerConfigId", device_id, core_id)
            pid = next(self._ids)
            self.configs[pid] = PowerConfigId(device_id, core_id)
            return pid

    def lookup(self, func: str, pid: int) -> PowerConfigId:
        """The id's record; refused (in ``func``'s name) when the id does not exist."""
        cfg = self.configs.get(pid)
        if cfg is None:
            fail(Location(func).path("powerConfigId"), "QNNEMU-perf-id-unknown",
                 f"{pid} does not exist (create it with createPowerConfigId; destroyed ids "
                 f"are gone)", code=INVALID_INPUT)
        return cfg

    def destroy_id(self, pid: int) -> None:
        """Removes the id and with it every vote on it (DCVS, HMX, CENG, RPC, DDR...).  An id that
        does not exist (never created, destroyed already) is accepted, as the vendor's library
        does, with a warning."""
        with self.lock:
            if self.configs.pop(pid, None) is None:
                _warn("QNNEMU-perf-destroy-unknown", "destroyPowerConfigId", "powerConfigId",
                      f"{pid} does not exist (never created, or destroyed already); nothing to remove (the "
                      f"vendor's library accepts it too)")

    # ---- setPowerConfig -----------------------------------------------------------------
    def set_power(self, pid: int, entries: list[tuple[int, object]], func: str = "setPowerConfig") -> None:
        """Applies one setPowerConfig call: ``entries`` are (option, union member as a dict or
        int).  As the vendor's library: the whole call is refused (nothing applied) for an
        unknown option; otherwise the entries apply in list order -- an HMX/CENG vote needs the
        DCVS vote before it; DCVS_V3_EXP after DCVS_V3 (CENG_EXP after CENG, or the other way
        round) in the same call is refused -- and a refused entry leaves those before it
        applied.  What it accepts and the emulator interprets is logged as a warning rule."""
        with self.lock:
            cfg = self.lookup(func, pid)
            model = self.models(cfg.device_id)
            seen: dict[int, tuple[int, object]] = {}
            for i, (option, value) in enumerate(entries):
                if option not in POWER_OPTION_FIELDS:
                    fail(Location(func).field(f"config[{i}].option"), "QNNEMU-perf-option",
                         f"unknown power config option {option}", code=UNSUPPORTED_CONFIG)
                if option in seen and seen[option][1] != value:
                    _warn("QNNEMU-perf-option-repeated", func, f"config[{i}].option",
                          f"{POWER_OPTION_FIELDS[option]} is given again with a different value than "
                          f"config[{seen[option][0]}] in the same call; the entries apply in order (the "
                          f"vendor's library accepts it), so the later one wins")
                seen.setdefault(option, (i, value))
            for i, (option, value) in enumerate(entries):
                partner = next((b if option == a else a for a, b in EXCLUSIVE_OPTIONS if option in (a, b)), None)
                earlier = [k for k, (o, _) in enumerate(entries[:i]) if o == partner]
                if earlier and partner is not None:   # checked on reaching the second one, before its arch
                    fail(Location(func).field(f"config[{i}].option"), "QNNEMU-perf-option-mixed",
                         f"{POWER_OPTION_FIELDS[option]} cannot be combined with "
                         f"{POWER_OPTION_FIELDS[partner]} (config[{earlier[0]}]) in the same call (use one "
                         f"or the other; across calls the later one supersedes)", code=INVALID_INPUT)
                new = dataclasses.replace(cfg, votes=dict(cfg.votes),
                                          dcvs=dataclasses.replace(cfg.dcvs) if cfg.dcvs else None)
                path = f"config[{i}].{POWER_OPTION_FIELDS[option]}"
                self._apply(new, pid, model, func, path, option, value)
                new.votes[option] = value
                self.configs[pid] = cfg = new

    def _needs_dcvs(self, cfg: PowerConfigId, pid: int, func: str, path: str, what: str, rule: str) -> None:
        if cfg.dcvs is None:
            fail(Location(func).field(path), rule,
                 f"power config id {pid} has no DCVS (DCVS_V3 or DCVS_V3_EXP) vote; {what} needs "
                 f"one on the same id, earlier in the call or in an earlier call", code=INVALID_INPUT)

    def _apply(self, cfg: PowerConfigId, pid: int, model: DeviceModel, func: str, path: str,
               option: int, value) -> None:
        if option == OPT_DCVS_V3:
            cfg.dcvs = _dcvs(cfg.dcvs, pid, func, path, value)
        elif option == OPT_DCVS_V3_EXP:
            _arch_gate(model, EXP_MIN_ARCH, func, path, "DCVS_V3_EXP (expanded voltage corners)",
                       "use DCVS_V3 with legacy corners", "QNNEMU-perf-exp-arch")
            cfg.dcvs = _dcvs_exp(cfg.dcvs, pid, func, path, value)
        elif option == OPT_HMX_V2:
            if model.arch < HMX_V2_MIN_ARCH:
                fail(Location(func).field(path), "QNNEMU-perf-hmx-arch",
                     f"HMX v2 votes need HTP v{HMX_V2_MIN_ARCH} or "
                     f"later; device {cfg.device_id} is v{model.arch}", code=UNSUPPORTED)
            self._needs_dcvs(cfg, pid, func, path, "an HMX vote", "QNNEMU-perf-hmx-no-hvx")
            cfg.hmx = _hmx(func, path, value)
        elif option in (OPT_CENG, OPT_CENG_EXP):
            expanded = option == OPT_CENG_EXP
            if expanded:
                _arch_gate(model, EXP_MIN_ARCH, func, path, "CENG_EXP (expanded voltage corners)",
                           "use CENG with legacy corners", "QNNEMU-perf-exp-arch")
            else:
                _arch_gate(model, CENG_MIN_ARCH, func, path, "CENG (compression engine) votes", "",
                           "QNNEMU-perf-ceng-arch")
            self._needs_dcvs(cfg, pid, func, path, "a CENG vote", "QNNEMU-perf-ceng-no-dcvs")
            names = [f"cengVoltageCorner{k}" for k in ("Min", "Target", "Max")]
            corners = cast(tuple[int, int, int], tuple(int(value[n]) for n in names))
            if expanded:
                _exp_corners(func, path, names, corners)
                _perf_mode_range(func, f"{path}.cengPerfMode", int(value["cengPerfMode"]))
            # Recorded as given: the vendor checks no legacy CENG field, and the emulator's cost
            # model has no compression engine to clock.
            cfg.ceng = CengVote(corners, int(value["cengPerfMode"]), expanded)
        elif option == OPT_RPC_POLLING_TIME:
            polling = int(value)
            if polling > RPC_POLLING_MAX_US:
                _warn("QNNEMU-perf-rpc-polling-range", func, path,
                      f"{polling} us is above "
                      f"QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIG_MAX_RPC_POLLING_TIME ({RPC_POLLING_MAX_US}); "
                      f"accepted as the vendor's library does, modelled as {RPC_POLLING_MAX_US} us")
                polling = RPC_POLLING_MAX_US
            cfg.rpc_polling_time_us = polling
        elif option == OPT_RPC_CONTROL_LATENCY:
            cfg.rpc_control_latency_us = int(value)   # any value: 0 = no specific requirement
        elif option == OPT_HMX_TIMEOUT:
            lo, hi = HMX_TIMEOUT_RANGE_US
            if not lo <= int(value) <= hi:
                fail(Location(func).field(path), "QNNEMU-perf-hmx-timeout-range",
                     f"{int(value)} us is outside {lo}..{hi} us", code=INVALID_INPUT)
            cfg.hmx_timeout_us = int(value)
        elif option == OPT_ADAPTIVE_POLLING:
            if int(value) and not cfg.rpc_polling_time_us:
                _warn("QNNEMU-perf-adaptive-polling-needs-rpc-polling", func, path,
                      f"adaptive polling "
                      f"({int(value)} us) on power config id {pid}, whose RPC polling is "
                      f"{'off (0 us)' if cfg.rpc_polling_time_us == 0 else 'not set'}: recorded, without "
                      f"effect until RPC polling is on")
            cfg.adaptive_polling_time_us = int(value)
        elif option == OPT_DDR_PERF_MODE:
            if model.arch < DDR_PERF_MODE_MIN_ARCH:
                fail(Location(func).field(path), "QNNEMU-perf-ddr-arch",
                     f"DDR perf mode is not supported on HTP v{model.arch} "
                     f"(the vendor's library refuses it on every arch up to v85)", code=UNSUPPORTED)
            dcvs = cfg.dcvs
            mx = EXP_VCORNER["MAX"] if dcvs is not None and dcvs.expanded else VCORNER["MAX_VOLTAGE_CORNER"]
            if int(value) and (dcvs is None or dcvs.bus != (mx, mx, mx)):
                bus = None if dcvs is None else dcvs.bus
                fail(Location(func).field(path), "QNNEMU-perf-ddr-needs-max-bus",
                     f"DDR perf mode needs a DCVS vote on id {pid} with bus corners min/target/max "
                     f"all at the maximum; the id's bus vote is "
                     f"{'absent' if bus is None else list(bus)}", code=INVALID_INPUT)
            cfg.ddr_perf_mode = int(value)

    # ---- setMemoryConfig ----------------------------------------------------------------
    def set_memory(self, device_id: int, core_id: int, entries: list[tuple[int, int]],
                   func: str = "setMemoryConfig") -> None:
        """Records the memory grow size per device/core.  The vendor's library checks neither id
        (measured: device 7, core 9 accepted): one that does not exist is recorded as given, with
        a warning (createPowerConfigId does refuse them)."""
        with self.lock:
            try:
                self._check_device_core(func, device_id, core_id)
            except QnnError as err:   # its detail reads "<func>: <deviceId|coreId>: <why>"
                _, path, why = err.detail.split(": ", 2)
                _warn("QNNEMU-perf-memory-target", func, path,
                      f"{why}; recorded as given (the vendor's library accepts it)")
            for i, (option, _) in enumerate(entries):
                if option != MEM_GROW_SIZE:
                    fail(Location(func).field(f"config[{i}].option"), "QNNEMU-perf-memory-option",
                         f"unknown memory config option {option}", code=UNSUPPORTED_CONFIG)
            slot = self.memory.setdefault((device_id, core_id), {})
            for option, value in entries:
                slot[option] = int(value)

    def memory_grow_size(self, device_id: int = 0, core_id: int = 0) -> int | None:
        return self.memory.get((device_id, core_id), {}).get(MEM_GROW_SIZE)

    # ---- queries ------------------------------------------------------------------------
    def ids(self, device_id: int | None = None, core_id: int | None = None) -> list[int]:
        with self.lock:
            return [p for p, c in self.configs.items()
                    if (device_id is None or c.device_id == device_id)
                    and (core_id is None or c.core_id == core_id)]

    def active(self, device_id: int = 0, core_id: int = 0, arch: int | None = None) -> ActiveVote | None:
        """The aggregated vote of every id on the core; None when no id there has any vote."""
        with self.lock:
            cfgs = {p: dataclasses.replace(self.configs[p]) for p in self.ids(device_id, core_id)}
        cfgs = {p: c for p, c in cfgs.items() if c.votes}
        if not cfgs:
            return None
        arch = self.models(device_id).arch if arch is None else arch
        dcvs = [c.dcvs for c in cfgs.values() if c.dcvs is not None]
        hmx = [m for m in (_id_hmx_mhz(c, arch) for c in cfgs.values()) if m is not None]
        enables = [d.dcvs_enable for d in dcvs if d.dcvs_enable is not None]
        latencies = [d.sleep_latency_us for d in dcvs if d.sleep_latency_us is not None]
        rpc_lat = [c.rpc_control_latency_us for c in cfgs.values() if c.rpc_control_latency_us]
        polling = [c.rpc_polling_time_us or 0 for c in cfgs.values()]
        core = _fastest(_rail_clock(d, "core", arch) for d in dcvs)
        bus = _fastest(_rail_clock(d, "bus", arch) for d in dcvs)
        return ActiveVote(
            ids=tuple(sorted(cfgs)),
            core_corner=core[1] if core else None,
            bus_corner=bus[1] if bus else None,
            hmx_mhz=max(hmx) if hmx else None,
            hmx_explicit=any(c.hmx is not None for c in cfgs.values()),
            dcvs_enabled=all(enables) if enables else None,
            sleep_latency_us=min(latencies) if latencies else None,
            sleep_disabled=any(d.sleep_disable for d in dcvs),
            rpc_control_latency_us=min(rpc_lat) if rpc_lat else None,
            rpc_polling_time_us=max(polling),
            adaptive_polling_time_us=max([c.adaptive_polling_time_us or 0 for c in cfgs.values()
                                          if c.rpc_polling_time_us] or [0]),
            hmx_timeout_us=max([c.hmx_timeout_us for c in cfgs.values() if c.hmx_timeout_us is not None]
                               or [DEFAULT_HMX_TIMEOUT_US]),
            ddr_perf_mode=any(c.ddr_perf_mode for c in cfgs.values()),
            core_mhz=core[0] if core else None,
            bus_mhz=bus[0] if bus else None,
            ceng_votes=tuple((p, c.ceng_state, c.ceng) for p, c in sorted(cfgs.items()) if c.dcvs is not None),
        )

    def clocks(self, device_id: int = 0, core_id: int = 0, arch: int | None = None) -> Clocks:
        arch = self.models(device_id).arch if arch is None else arch
        nom = nominal_clocks(arch)
        vote = self.active(device_id, core_id, arch)
        if vote is None:
            return nom
        core_mhz = vote.core_mhz if vote.core_mhz is not None else nom.core_mhz
        bus = vote.bus_mhz if vote.bus_mhz is not None else nom.bus_mhz
        if vote.ddr_perf_mode:
            bus = round(bus * DDR_PERF_MODE_BUS_SCALE, 1)
        hmx = vote.hmx_mhz if vote.hmx_mhz is not None else round(
            _nominal(arch).hmx_mhz * core_mhz / _nominal(arch).core_mhz, 1)
        return Clocks(core_mhz, hmx, bus, vote.core_corner or "NOM")


def _arch_gate(model: DeviceModel, min_arch: int, func: str, path: str, what: str, hint: str, rule: str) -> None:
    if model.arch < min_arch:
        fail(Location(func).field(path), rule,
             f"{what} need HTP v{min_arch} or later; the device is "
             f"v{model.arch}" + (f" ({hint})" if hint else ""), code=UNSUPPORTED)


def _exp_corners(func: str, path: str, names: list[str], corners: tuple[int, ...]) -> None:
    """Expanded corner fields: 0 (DISABLE) or an ExpVoltageCorner_t value (>= 0x100)."""
    for n, c in zip(names, corners):
        if 0 < c < EXP_CORNER_MIN_VALUE:
            fail(Location(func).field(f"{path}.{n}"), "QNNEMU-perf-exp-legacy-corner",
                 f"{c} is a legacy VoltageCorner_t value (0x01-0xFF); expanded corner fields take "
                 f"ExpVoltageCorner_t values (>= 0x100) or DISABLE (0)", code=INVALID_INPUT)


def _perf_mode_range(func: str, path: str, mode: int) -> None:
    if not 0 <= mode <= CLK_PERF_MAX:
        fail(Location(func).field(path), "QNNEMU-perf-perf-mode-range",
             f"{mode} exceeds QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_MAX "
             f"({CLK_PERF_MAX})", code=INVALID_INPUT)


def _perf_mode(func: str, path: str, mode: int) -> int:
    """A ClkPerfMode_t field of HMX_V2 / DCVS_V3_EXP: refused above CLK_PERF_MAX; a value the enum
    lacks is accepted (as the vendor does) and modelled as LOW."""
    _perf_mode_range(func, path, mode)
    if mode not in CLK_PERF_MODES:
        _warn("QNNEMU-perf-perf-mode-clamped", func, path,
              f"{mode} is no ClkPerfMode_t (0=HIGH, 1=LOW, "
              f"2..16=HIGH_D1..HIGH_D15); accepted as the vendor's library does, modelled as LOW (the "
              f"lowest frequency of the corner)")
    return mode


def _order_warning(func, path, names, corners, label) -> None:
    if not corners[0] <= corners[1] <= corners[2]:
        _warn(label, func, f"{path}.{names[1]}",
              f"min/target/max {list(corners)} are not ordered "
              f"min <= target <= max; accepted as the vendor's library does, modelled as given (DCVS "
              f"drives the rail to the max field in performance mode, the min field in power saver "
              f"mode, else the target)")


def _dcvs_common(vote: DcvsVote, pid: int, func: str, path: str, d: dict, enable: bool | None) -> None:
    if int(d["contextId"]) != pid:
        fail(Location(func).field(f"{path}.contextId"), "QNNEMU-perf-dcvs-context-id",
             f"{int(d['contextId'])} differs from powerConfigId {pid} (use the id the vote is set on)",
             code=INVALID_INPUT)
    if enable is not None:
        mode = int(d["powerMode"])
        # powerMode only counts when DCVS is enabled; memset configs leave it 0 otherwise.
        if enable and mode not in POWER_MODES:
            _warn("QNNEMU-perf-dcvs-power-mode", func, f"{path}.powerMode",
                  f"{mode} is no "
                  f"QnnHtpPerfInfrastructure_PowerMode_t; accepted as the vendor's library does, modelled "
                  f"as ADJUST_UP_DOWN (the rails settle at their targets)")
            mode = POWERMODE["ADJUST_UP_DOWN"]
        vote.dcvs_enable, vote.power_mode = enable, (mode if enable else None)
    if d["setSleepLatency"]:
        lat = int(d["sleepLatency"])
        lo, hi = SLEEP_LATENCY_RANGE_US
        if not lo <= lat <= hi:
            clipped = min(max(lat, lo), hi)
            _warn("QNNEMU-perf-dcvs-sleep-latency", func, f"{path}.sleepLatency",
                  f"{lat} us is outside "
                  f"{lo}..{hi} us; accepted as the vendor's library does, modelled as {clipped} us")
            lat = clipped
        vote.sleep_latency_us = lat
    if d["setSleepDisable"]:
        vote.sleep_disable = bool(d["sleepDisable"])


def _dcvs(old: DcvsVote | None, pid: int, func: str, path: str, d: dict) -> DcvsVote:
    """A QnnHtpPerfInfrastructure_DcvsV3_t merged into the id's vote: only the fields whose set*
    flag is non-zero change.  A DCVS_V3 vote supersedes an earlier DCVS_V3_EXP one."""
    vote = dataclasses.replace(old) if old is not None and not old.expanded else DcvsVote()
    _dcvs_common(vote, pid, func, path, d, bool(d["dcvsEnable"]) if d["setDcvsEnable"] else None)
    for rail, flag in (("bus", "setBusParams"), ("core", "setCoreParams")):
        if d[flag]:
            names = [f"{rail}VoltageCorner{k}" for k in ("Min", "Target", "Max")]
            given = tuple(int(d[n]) for n in names)
            corners = tuple(_legacy_corner(c) for c in given)
            for n, c, m in zip(names, given, corners):
                if c != m:
                    _warn("QNNEMU-perf-dcvs-corner", func, f"{path}.{n}",
                          f"{c} is no "
                          f"QnnHtpPerfInfrastructure_VoltageCorner_t; accepted as the vendor's library does, "
                          f"modelled as {VCORNER_NAME[m]} (the corner below it)")
            disabled = [c == VCORNER["DISABLE"] for c in corners]
            if any(disabled) and not all(disabled):
                _warn("QNNEMU-perf-dcvs-corner-order", func, f"{path}.{names[0]}",
                      f"min/target/max "
                      f"{[VCORNER_NAME[c] for c in corners]} mix DISABLE with corners; accepted as the "
                      f"vendor's library does, modelled as given")
            else:
                _order_warning(func, path, names, corners, "QNNEMU-perf-dcvs-corner-order")
            setattr(vote, rail, corners)
    return vote


def _dcvs_exp(old: DcvsVote | None, pid: int, func: str, path: str, d: dict) -> DcvsVote:
    """A QnnHtpPerfInfrastructure_DcvsV3Exp_t: DCVS is implicitly enabled; it supersedes an
    earlier legacy DCVS_V3 vote (a later DCVS_V3 supersedes it in turn)."""
    vote = dataclasses.replace(old) if old is not None and old.expanded else DcvsVote(expanded=True)
    _dcvs_common(vote, pid, func, path, d, True)
    vote.core_perf_mode = _perf_mode(func, f"{path}.corePerfMode", int(d["corePerfMode"]))
    vote.bus_perf_mode = _perf_mode(func, f"{path}.busPerfMode", int(d["busPerfMode"]))
    for rail, flag in (("bus", "setBusParams"), ("core", "setCoreParams")):
        if d[flag]:
            names = [f"{rail}VoltageCorner{k}" for k in ("Min", "Target", "Max")]
            corners = cast(tuple[int, int, int], tuple(int(d[n]) for n in names))
            _exp_corners(func, path, names, corners)
            _order_warning(func, path, names, corners, "QNNEMU-perf-dcvs-corner-order")
            setattr(vote, rail, corners)
    return vote


def _hmx(func: str, path: str, d: dict) -> HmxVote | None:
    """A QnnHtpPerfInfrastructure_HmxV2_t: hmxPickDefault reverts to the default vote (which
    scales with the DCVS clock; the other fields are then ignored)."""
    if d["hmxPickDefault"]:
        return None
    names = [f"hmxVoltageCorner{k}" for k in ("Min", "Target", "Max")]
    corners = cast(tuple[int, int, int], tuple(int(d[n]) for n in names))
    _exp_corners(func, path, names, corners)
    mode = _perf_mode(func, f"{path}.hmxPerfMode", int(d["hmxPerfMode"]))
    _order_warning(func, path, names, corners, "QNNEMU-perf-hmx-corner-order")
    return HmxVote(corners, mode)


PERF = PerfInfrastructure()


def current_clocks(device_id: int = 0, core_id: int = 0, *, arch: int | None = None) -> Clocks:
    """The clocks of the device/core's active votes (``arch``: the HTP arch to price them for,
    default the device's); the arch's NOM clocks (``NOMINAL`` on the default device) without
    votes."""
    return PERF.clocks(device_id, core_id, arch)


# ---------------------------------------------------------------------- HMX voting table
@dataclass(frozen=True)
class HmxVotingRow:
    """A row of the documentation's HMX voting table: the HVX (DCVS v3) and HMX situation of an id, the
    hmxPickDefault value, whether it is operationally valid, and the HMX state that results."""
    hvx: str              # "applied" | "none" | "removed"
    hmx: str              # "applied" | "none" | "removed (automatic)"
    pick_default: bool | None   # None = N/A
    valid: bool
    hmx_state: str | None       # PowerConfigId.hmx_state afterwards (None: id gone / no HVX vote)


HMX_VOTING_TABLE: tuple[HmxVotingRow, ...] = (
    HmxVotingRow("applied", "applied", False, True, "explicit"),
    HmxVotingRow("none", "applied", None, False, None),
    HmxVotingRow("applied", "none", True, True, "default"),
    HmxVotingRow("removed", "removed (automatic)", None, True, None),
)


# ------------------------------------------------------------------------ perf profiles
@dataclass(frozen=True)
class PerfProfile:
    """A column of the documentation's performance-profile table (backend extensions)."""
    name: str
    sleep_latency_us: int
    dcvs_enable: bool
    rpc_polling: bool
    bus: tuple[str, str, str]      # busVCornerMin / Target / Max (VoltageCorner_t short names)
    core: tuple[str, str, str]     # coreVCornerMin / Target / Max
    user_selectable: bool = True   # RELAXED/RELEASED are applied internally only
    idle_state: str | None = None  # the lower state applied after each stage (None: sustained)
    sustained: bool = False        # keeps the vote up between inferences with a timer


def _p(name, lat, dcvs, rpc, bus, core, **kw) -> PerfProfile:
    return PerfProfile(name, lat, dcvs, rpc, bus, core, **kw)


_MAX3 = ("MAX_VOLTAGE_CORNER",) * 3
_RELAXED, _RELEASED = "relaxed_power_state", "released_power_state"
PERF_PROFILES: dict[str, PerfProfile] = {p.name: p for p in (
    _p("burst", 40, False, True, _MAX3, _MAX3, sustained=True),
    _p("sustained_high_performance", 100, False, True, ("TURBO",) * 3, ("TURBO",) * 3, sustained=True),
    _p("high_performance", 100, False, True, ("TURBO",) * 3, ("TURBO",) * 3, idle_state=_RELAXED),
    _p("balanced", 1000, False, False, ("NOM_PLUS",) * 3, ("NOM_PLUS",) * 3, idle_state=_RELAXED),
    _p("low_balanced", 1000, False, False, ("NOM",) * 3, ("NOM",) * 3, idle_state=_RELAXED),
    _p("high_power_saver", 1000, False, False, ("SVS_PLUS",) * 3, ("SVS_PLUS",) * 3, idle_state=_RELEASED),
    _p("power_saver", 1000, False, False, ("SVS",) * 3, ("SVS",) * 3, idle_state=_RELEASED),
    _p("low_power_saver", 1000, False, False, ("SVS2",) * 3, ("SVS2",) * 3, idle_state=_RELEASED),
    _p("extreme_power_saver", 1000, False, False, ("DISABLE",) * 3, ("DISABLE",) * 3, idle_state=_RELEASED),
    _p(_RELAXED, 2000, True, False, ("SVS2", "SVS", "SVS"), ("SVS2", "SVS", "SVS"), user_selectable=False),
    _p(_RELEASED, 65535, True, False, ("MIN_VOLTAGE_CORNER",) * 3, ("MIN_VOLTAGE_CORNER",) * 3,
       user_selectable=False),
)}
# Valid perf_profile values besides the table's: "system_settings" places no vote at all;
# "default" is the backend extensions' default profile, high_performance.
PROFILE_ALIASES = {"default": "high_performance"}
NO_VOTE_PROFILES = ("system_settings",)
PROFILE_NAMES: tuple[str, ...] = tuple(n for n, p in PERF_PROFILES.items() if p.user_selectable) \
    + tuple(PROFILE_ALIASES) + NO_VOTE_PROFILES


def _profile(name: str) -> PerfProfile | None:
    key = PROFILE_ALIASES.get(name, name)
    if key in NO_VOTE_PROFILES:
        return None
    p = PERF_PROFILES.get(key)
    if p is None:
        raise ValueError(f"perf profile {name!r} is not one of {', '.join(PROFILE_NAMES)}")
    return p


def profile_votes(name: str, power_config_id: int = 0, *, rpc_control_latency: int | None = None,
                  rpc_polling_time: int | None = None, hmx_timeout_us: int | None = None,
                  adaptive_polling_time: int | None = None) -> list[tuple[int, object]]:
    """The setPowerConfig entries (option, union member) that perf profile ``name`` means, as
    the SDK's net-run backend extension places them: one DCVS v3 vote from the profile table,
    then RPC control latency (default 100 us), RPC polling (9999 us for the profiles with RPC
    polling ON, else 0), HMX timeout (default 300000 us) and adaptive polling (only when given).
    The keyword arguments are the backend-extension config's ``cores[]`` overrides.  Feed the
    result to ``PERF.set_power(power_config_id, ...)`` (or build the C structs from it).  The
    internal relaxed/released states are accepted too; "system_settings" gives no entries."""
    p = _profile(name)
    if p is None:
        return []
    mode = POWERMODE["PERFORMANCE_MODE"]
    if p.dcvs_enable:   # the idle states let DCVS float within their corners
        mode = POWERMODE["ADJUST_UP_DOWN"] if p.name == _RELAXED else POWERMODE["POWER_SAVER_MODE"]
    bus = [VCORNER[c] for c in p.bus]
    core = [VCORNER[c] for c in p.core]
    dcvs = {
        "contextId": power_config_id, "setDcvsEnable": 1, "dcvsEnable": int(p.dcvs_enable),
        "powerMode": mode, "setSleepLatency": 1, "sleepLatency": p.sleep_latency_us,
        "setSleepDisable": 0, "sleepDisable": 0,
        "setBusParams": 1, "busVoltageCornerMin": bus[0], "busVoltageCornerTarget": bus[1],
        "busVoltageCornerMax": bus[2],
        "setCoreParams": 1, "coreVoltageCornerMin": core[0], "coreVoltageCornerTarget": core[1],
        "coreVoltageCornerMax": core[2],
    }
    polling = rpc_polling_time if rpc_polling_time is not None else (
        DEFAULT_RPC_POLLING_US if p.rpc_polling else 0)
    out: list[tuple[int, object]] = [
        (OPT_DCVS_V3, dcvs),
        (OPT_RPC_CONTROL_LATENCY, DEFAULT_RPC_CONTROL_LATENCY_US if rpc_control_latency is None
         else int(rpc_control_latency)),
        (OPT_RPC_POLLING_TIME, int(polling)),
        (OPT_HMX_TIMEOUT, DEFAULT_HMX_TIMEOUT_US if hmx_timeout_us is None else int(hmx_timeout_us)),
    ]
    if adaptive_polling_time is not None:
        out.append((OPT_ADAPTIVE_POLLING, int(adaptive_polling_time)))
    return out


def idle_votes(name: str, power_config_id: int = 0) -> list[tuple[int, object]]:
    """The lower vote applied after each stage (INIT / INFERENCE / DE-INIT) for profile
    ``name``: RELAXED_POWER_STATE or RELEASED_POWER_STATE; [] for the sustained profiles (burst,
    sustained_high_performance keep their vote, see ProfileSession) and system_settings."""
    p = _profile(name)
    if p is None or p.idle_state is None:
        return []
    return profile_votes(p.idle_state, power_config_id)


def apply_profile(power_config_id: int, name: str, perf: PerfInfrastructure | None = None, **overrides) -> None:
    """Places the votes of perf profile ``name`` on ``power_config_id``."""
    votes = profile_votes(name, power_config_id, **overrides)
    if votes:
        (perf or PERF).set_power(power_config_id, votes)


class ProfileSession:
    """The documentation's two use cases, as the net-run extension drives a perf profile around stages:

    - voting at every inference: ``before_stage()`` places the profile's vote, ``after_stage()``
      drops to its idle state (RELAXED / RELEASED) at once;
    - sustained setting for multiple inferences (burst, sustained_high_performance): after a
      stage a timer of ``sustain_s`` starts; the vote stays up until it expires (``poll()`` then
      drops to RELAXED) or the client votes again.

    ``now`` is the clock (injectable for tests)."""

    def __init__(self, power_config_id: int, name: str, *, sustain_s: float = 1.0,
                 perf: PerfInfrastructure | None = None, now: Callable[[], float] = time.monotonic,
                 **overrides):
        self.pid, self.name, self.sustain_s = power_config_id, name, sustain_s
        self.perf, self.now, self.overrides = perf or PERF, now, overrides
        self.profile = _profile(name)
        self.deadline: float | None = None
        self.state = "idle"      # "voted" | "sustained" | "idle"

    def before_stage(self) -> None:
        if self.state != "voted":
            apply_profile(self.pid, self.name, self.perf, **self.overrides)
        self.state, self.deadline = "voted", None

    def after_stage(self) -> None:
        if self.profile is not None and self.profile.sustained:
            self.state, self.deadline = "sustained", self.now() + self.sustain_s
            return
        if self.profile is not None:
            self.perf.set_power(self.pid, idle_votes(self.name, self.pid))
        self.state = "idle"

    def poll(self) -> None:
        """Drops a sustained vote whose timer has expired (to RELAXED_POWER_STATE)."""
        if self.state == "sustained" and self.deadline is not None and self.now() >= self.deadline:
            self.perf.set_power(self.pid, profile_votes(_RELAXED, self.pid))
            self.state, self.deadline = "idle", None
