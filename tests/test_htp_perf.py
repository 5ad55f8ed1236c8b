"""HTP performance infrastructure (qnnemu/htp/perf.py, qnnemu/abi/perf_api.py; docs/htp-perf.md).

QNN HTP backend documentation, "QNN HTP Performance Infrastructure API" and "QNN HTP Backend Extensions":
- the perf profile table (transcribed here row by row as the documentation lays it out) against
  PERF_PROFILES, and every profile's votes placed through the C ABI;
- every row of the HMX voting table;
- the DCVS v3 field rules (set* flags, power mode, sleep latency, corners), RPC polling and
  control latency, adaptive polling, HMX timeout, DDR perf mode, memory config;
- aggregation across ids and the corner -> clock model (burst clocks beat power_saver);
- the documentation's use cases (its example application, voting at every inference, a sustained
  vote);
- one case per error rule id (RULE_IDS): refusals where the vendor's library refuses (measured
  against its x86 build, QNN 2.51; the QNN 2.50 options CENG, DCVS_V3_EXP, CENG_EXP and the
  vendor pins: tests/test_htp_perf_250.py); the warning rules, where it accepts what the emulator
  has to interpret, have their cases in tests/test_warning_rules.py (their effects are checked
  here too).
"""
from __future__ import annotations

import pathlib
import re
from types import SimpleNamespace

import abi
import pytest
from abi import NULL, ffi, vp

from qnnemu.headers import Q
from qnnemu.htp import perf as P
from qnnemu.htp.perf import PERF

pytestmark = pytest.mark.usefixtures("qnn_abi")

OK = Q.QNN_SUCCESS
INVALID_INPUT = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_INVALID_INPUT
V = P.VCORNER
E = P.EXP_VCORNER
PM = P.POWERMODE
ROOT = pathlib.Path(__file__).resolve().parent.parent

RULE_IDS = {
    "QNNEMU-perf-arg-null",
    "QNNEMU-perf-device-id",
    "QNNEMU-perf-core-id",
    "QNNEMU-perf-id-unknown",
    "QNNEMU-perf-option",
    "QNNEMU-perf-memory-option",
    "QNNEMU-perf-dcvs-context-id",
    "QNNEMU-perf-hmx-arch",
    "QNNEMU-perf-hmx-no-hvx",
    "QNNEMU-perf-hmx-timeout-range",
    "QNNEMU-perf-ddr-arch",
    "QNNEMU-perf-ddr-needs-max-bus",
    # QNN 2.50
    "QNNEMU-perf-option-mixed",
    "QNNEMU-perf-exp-arch",
    "QNNEMU-perf-exp-legacy-corner",
    "QNNEMU-perf-perf-mode-range",
    "QNNEMU-perf-ceng-arch",
    "QNNEMU-perf-ceng-no-dcvs",
}


# ------------------------------------------------------------------------------ environment
class Env:
    """A DEBUG logger and a device (``soc``: QNN_SOC_MODEL_*, None = the default device) —
    the newest live device, so the power-config ids price their votes on it — and the perf
    infrastructure of deviceGetInfrastructure.  Ids created through ``new_id`` are destroyed
    on close."""

    def __init__(self, soc: int | None = Q.QNN_SOC_MODEL_SM8650, arch: int | None = None):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        self.ids: list[int] = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == OK, "setup: logCreate"
        config = NULL
        if arch is not None:   # an ARCH device (v85 has no SoC row: an arch-only device)
            cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
            cc.option, cc.arch.deviceId, cc.arch.arch = Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH, 0, arch
            dc = ffi.new("QnnDevice_Config_t *")
            dc.option, dc.customConfig = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, cc
            self.keep += [cc, dc]
            config = abi.null_terminated("QnnDevice_Config_t", [dc], self.keep)
        elif soc is not None:
            cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
            cc.option, cc.socModel = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, soc
            dc = ffi.new("QnnDevice_Config_t *")
            dc.option, dc.customConfig = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, cc
            self.keep += [cc, dc]
            config = abi.null_terminated("QnnDevice_Config_t", [dc], self.keep)
        code, self.dev = abi.create("deviceCreate", vp(self.log), config)
        assert code == OK, f"setup: deviceCreate(soc={soc})"
        out = ffi.new("QnnHtpDevice_Infrastructure_t **")
        assert abi.call("deviceGetInfrastructure", out) == OK, "setup: deviceGetInfrastructure"
        self.perf = out[0].perfInfra
        self.arch = P.device_model(0).arch
        self.rec.clear()

    def close(self):
        for pid in self.ids:
            if pid in PERF.configs:
                self.perf.destroyPowerConfigId(pid)
        assert abi.call("deviceFree", vp(self.dev)) == OK, "teardown: deviceFree"
        assert abi.call("logFree", vp(self.log)) == OK, "teardown: logFree"

    def new_id(self, device_id: int = 0, core_id: int = 0) -> int:
        out = ffi.new("uint32_t *")
        code = int(self.perf.createPowerConfigId(device_id, core_id, out))
        assert code == OK, f"createPowerConfigId({device_id}, {core_id}) returned {code}"
        self.ids.append(int(out[0]))
        return int(out[0])

    def out_id(self):
        out = ffi.new("uint32_t *")
        self.keep.append(out)
        return out

    def config(self, option: int, value) -> object:
        """A QnnHtpPerfInfrastructure_PowerConfig_t with its union member set from ``value``
        (a dict of struct fields, or an int)."""
        c = ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *")
        c.option = option
        member = P.POWER_OPTION_FIELDS.get(option)
        if isinstance(value, dict):
            for k, v in value.items():
                setattr(getattr(c, member), k, v)
        elif value is not None:
            setattr(c, member, value)
        self.keep.append(c)
        return c

    def set(self, pid: int, *entries) -> int:
        """setPowerConfig(pid, [config(option, value) for entries]) -> the returned code."""
        ptrs = [self.config(o, v) for o, v in entries]
        return int(self.perf.setPowerConfig(pid, abi.null_terminated(
            "QnnHtpPerfInfrastructure_PowerConfig_t", ptrs, self.keep)))

    def memory(self, device_id: int, core_id: int, *entries) -> int:
        ptrs = []
        for option, grow in entries:
            m = ffi.new("QnnHtpPerfInfrastructure_MemoryConfig_t *")
            m.option, m.memGrowSizeConfig = option, grow
            ptrs.append(m)
            self.keep.append(m)
        return int(self.perf.setMemoryConfig(device_id, core_id, abi.null_terminated(
            "QnnHtpPerfInfrastructure_MemoryConfig_t", ptrs, self.keep)))

    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]


@pytest.fixture(autouse=True)
def isolated_votes():
    """Votes are process-wide: ids another test left behind are set aside for the test (and
    put back after it), so that the aggregate seen here is this test's own."""
    with PERF.lock:
        others = dict(PERF.configs)
        PERF.configs.clear()
    yield
    with PERF.lock:
        PERF.configs.update(others)


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


@pytest.fixture
def env_v73():
    e = Env(soc=None)
    yield e
    e.close()


def dcvs(pid: int, corner: str = "TURBO", *, bus: str | tuple | None = None, enable: int = 0,
         mode: int = PM["PERFORMANCE_MODE"], latency: int | None = 100, sleep_disable: int | None = None,
         core: tuple | None = None, set_bus: int = 1, set_core: int = 1) -> tuple[int, dict]:
    """A DCVS v3 entry: core and bus rails at ``corner`` (or the (min, target, max) tuples)."""
    core = core or (corner,) * 3
    bus = bus if isinstance(bus, tuple) else ((bus or corner),) * 3
    d = {"contextId": pid, "setDcvsEnable": 1, "dcvsEnable": enable, "powerMode": mode,
         "setSleepLatency": int(latency is not None), "sleepLatency": latency or 0,
         "setSleepDisable": int(sleep_disable is not None), "sleepDisable": sleep_disable or 0,
         "setBusParams": set_bus, "setCoreParams": set_core}
    for rail, corners in (("bus", bus), ("core", core)):
        for k, c in zip(("Min", "Target", "Max"), corners):
            d[f"{rail}VoltageCorner{k}"] = V[c] if isinstance(c, str) else c
    return (P.OPT_DCVS_V3, d)


def hmx(corner: str | tuple = "TUR", *, pick_default: int = 0,
        perf_mode: int = Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_HIGH) -> tuple[int, dict]:
    corners = corner if isinstance(corner, tuple) else (corner,) * 3
    c = [E[x] if isinstance(x, str) else x for x in corners]
    return (P.OPT_HMX_V2, {"hmxPickDefault": pick_default, "hmxVoltageCornerMin": c[0],
                           "hmxVoltageCornerTarget": c[1], "hmxVoltageCornerMax": c[2], "hmxPerfMode": perf_mode})


def dcvs_exp(pid: int, corner: str = "TUR", *, perf_mode: int = 0, **fields) -> tuple[int, dict]:
    """A DCVS_V3_EXP entry (QNN 2.50): core and bus rails at expanded ``corner``."""
    d = {"contextId": pid, "powerMode": PM["PERFORMANCE_MODE"], "setSleepLatency": 1, "sleepLatency": 100,
         "setSleepDisable": 0, "sleepDisable": 0, "setBusParams": 1, "setCoreParams": 1,
         "corePerfMode": perf_mode, "busPerfMode": perf_mode}
    for rail in ("bus", "core"):
        for k in ("Min", "Target", "Max"):
            d[f"{rail}VoltageCorner{k}"] = E[corner]
    d.update(fields)
    return (P.OPT_DCVS_V3_EXP, d)


def ceng(corner: str = "TURBO", perf_mode: int = 0) -> tuple[int, dict]:
    """A CENG entry (QNN 2.50, legacy corners)."""
    return (P.OPT_CENG, {"cengVoltageCornerMin": V[corner], "cengVoltageCornerTarget": V[corner],
                         "cengVoltageCornerMax": V[corner], "cengPerfMode": perf_mode})


def clocks(env) -> P.Clocks:
    return P.current_clocks(0, 0)


# ------------------------------------------------------------------- perf profile table
# The documentation's table as it is laid out: one row per parameter, one value per profile column.
SEED_PROFILE_COLUMNS = ["BURST", "SUSTAINED_HIGH_PERFORMANCE", "HIGH_PERFORMANCE", "BALANCED", "LOW_BALANCED",
                        "HIGH_POWER_SAVER", "POWER_SAVER", "LOW_POWER_SAVER", "EXTREME_POWER_SAVER",
                        "RELAXED_POWER_STATE*", "RELEASED_POWER_STATE*"]
_BUS_CORE_MIN = ["MAX_VOLTAGE_CORNER", "TURBO", "TURBO", "NOM_PLUS", "NOM", "SVS_PLUS", "SVS", "SVS2", "DISABLE",
                 "SVS2", "MIN_VOLTAGE_CORNER"]
_BUS_CORE_TGT = ["MAX_VOLTAGE_CORNER", "TURBO", "TURBO", "NOM_PLUS", "NOM", "SVS_PLUS", "SVS", "SVS2", "DISABLE",
                 "SVS", "MIN_VOLTAGE_CORNER"]
SEED_PROFILE_ROWS = {
    "sleepLatency": ["40 us", "100 us", "100 us", "1000 us", "1000 us", "1000 us", "1000 us", "1000 us", "1000 us",
                     "2000 us", "65535 us"],
    "dcvsEnable": ["False"] * 9 + ["True", "True"],
    "RPC Polling": ["ON"] * 3 + ["OFF"] * 8,
    "busVCornerMin": _BUS_CORE_MIN, "busVCornerTarget": _BUS_CORE_TGT, "busVCornerMax": _BUS_CORE_TGT,
    "coreVCornerMin": _BUS_CORE_MIN, "coreVCornerTarget": _BUS_CORE_TGT, "coreVCornerMax": _BUS_CORE_TGT,
}


def _profile_cell(p: P.PerfProfile, row: str) -> str:
    return {"sleepLatency": f"{p.sleep_latency_us} us", "dcvsEnable": str(p.dcvs_enable),
            "RPC Polling": "ON" if p.rpc_polling else "OFF",
            "busVCornerMin": p.bus[0], "busVCornerTarget": p.bus[1], "busVCornerMax": p.bus[2],
            "coreVCornerMin": p.core[0], "coreVCornerTarget": p.core[1], "coreVCornerMax": p.core[2]}[row]


@pytest.mark.parametrize("row", list(SEED_PROFILE_ROWS))
def test_perf_profile_table_row(row):
    names = [c.rstrip("*").lower() for c in SEED_PROFILE_COLUMNS]
    assert list(P.PERF_PROFILES) == names, "PERF_PROFILES has the documented columns, in its order"
    got = [_profile_cell(P.PERF_PROFILES[n], row) for n in names]
    assert got == SEED_PROFILE_ROWS[row], f"perf profile table row {row}"


def test_perf_profile_names_are_the_tools_names():
    from qnnemu.tools import config as tools_config
    assert set(P.PROFILE_NAMES) == set(tools_config._PERF_PROFILES), \
        "profile_votes accepts exactly the perf_profile values the tools' config accepts"
    assert not P.PERF_PROFILES["relaxed_power_state"].user_selectable and \
        not P.PERF_PROFILES["released_power_state"].user_selectable, "the starred states are internal"


def _expected_core_corner(p: P.PerfProfile) -> str:
    if p.core[1] == "DISABLE":
        return "MIN_VOLTAGE_CORNER"   # a released rail sinks to the floor
    if p.name == "released_power_state":
        return p.core[0]              # DCVS on in power-saver mode: the min corner
    return p.core[1]                  # DCVS off (or up/down): the target


@pytest.mark.parametrize("name", list(P.PERF_PROFILES))
def test_profile_votes_through_the_abi(env, name):
    p = P.PERF_PROFILES[name]
    pid = env.new_id()
    votes = P.profile_votes(name, pid)
    assert votes[0][0] == P.OPT_DCVS_V3 and votes[0][1]["contextId"] == pid, "a DCVS v3 vote on the id first"
    assert env.set(pid, *votes) == OK, f"setPowerConfig with the votes of {name}: {env.rec.errors()}"
    vote = PERF.active(0, 0)
    core = _expected_core_corner(p)
    assert vote.core_corner == core and vote.bus_corner == core, f"{name}: effective corners"
    assert vote.sleep_latency_us == p.sleep_latency_us, f"{name}: sleep latency"
    assert vote.dcvs_enabled is p.dcvs_enable, f"{name}: DCVS participation"
    assert vote.rpc_polling_time_us == (9999 if p.rpc_polling else 0), f"{name}: RPC polling"
    assert vote.rpc_control_latency_us == 100 and vote.hmx_timeout_us == 300000, f"{name}: RPC latency / HMX timeout"
    c = clocks(env)
    assert (c.core_mhz, c.bus_mhz, c.corner) == (P.corner_mhz(env.arch, "core", core),
                                                 P.corner_mhz(env.arch, "bus", core), core), f"{name}: clocks"


def test_profiles_order_clocks_and_microseconds(env):
    """The table is ordered from highest to lowest performance: the clocks follow, and the
    time a fixed cycle count takes grows (burst beats power_saver strictly)."""
    pid = env.new_id()
    seen = {}
    for name in [n for n, p in P.PERF_PROFILES.items() if p.user_selectable]:
        assert env.set(pid, *P.profile_votes(name, pid)) == OK, f"profile {name}"
        seen[name] = clocks(env)
    cores = [c.core_mhz for c in seen.values()]
    assert cores == sorted(cores, reverse=True), f"core clocks never rise down the table: {seen}"
    assert seen["burst"].core_mhz > seen["power_saver"].core_mhz, "burst clocks beat power_saver"
    assert seen["burst"].hmx_mhz > seen["power_saver"].hmx_mhz, "HMX (default vote) follows the DCVS corner"
    assert seen["burst"].bus_mhz > seen["power_saver"].bus_mhz, "bus clock"
    cycles = 1_000_000
    assert cycles / seen["burst"].core_mhz < cycles / seen["power_saver"].core_mhz, "µs = cycles / MHz"


def test_cost_model_microseconds_follow_the_profile(env):
    cost = pytest.importorskip("qnnemu.htp.cost")
    if not hasattr(cost, "cycles_to_us"):
        pytest.skip("qnnemu.htp.cost.cycles_to_us is not there yet")
    pid = env.new_id()
    us = {}
    for name in ("burst", "power_saver"):
        assert env.set(pid, *P.profile_votes(name, pid)) == OK
        us[name] = cost.cycles_to_us(1_000_000, P.current_clocks(0, 0))
    assert us["burst"] < us["power_saver"], f"cycles -> µs follows the votes: {us}"


def test_profile_specials_and_overrides(env):
    assert P.profile_votes("system_settings") == [], "system_settings places no vote"
    assert P.profile_votes("default", 7) == P.profile_votes("high_performance", 7), "default = high_performance"
    with pytest.raises(ValueError, match="turbo_max"):
        P.profile_votes("turbo_max")
    votes = dict(P.profile_votes("power_saver", 3, rpc_polling_time=500, rpc_control_latency=150,
                                 hmx_timeout_us=1000, adaptive_polling_time=2000))
    assert (votes[P.OPT_RPC_POLLING_TIME], votes[P.OPT_RPC_CONTROL_LATENCY], votes[P.OPT_HMX_TIMEOUT],
            votes[P.OPT_ADAPTIVE_POLLING]) == (500, 150, 1000, 2000), "cores[] overrides replace the defaults"
    pid = env.new_id()
    assert env.set(pid, *P.profile_votes("power_saver", pid, rpc_polling_time=500,
                                         adaptive_polling_time=2000)) == OK, "adaptive polling with polling on"
    assert PERF.active(0, 0).adaptive_polling_time_us == 2000, "adaptive polling recorded"
    assert [o for o, _ in P.idle_votes("high_performance")] and \
        P.idle_votes("high_performance", 4)[0][1] == P.profile_votes("relaxed_power_state", 4)[0][1], \
        "high_performance relaxes between stages"
    assert P.idle_votes("power_saver", 4)[0][1] == P.profile_votes("released_power_state", 4)[0][1], \
        "power_saver is released between stages"
    assert P.idle_votes("burst") == [] and P.idle_votes("sustained_high_performance") == [], \
        "the sustained profiles keep their vote"


# ----------------------------------------------------------------------- HMX voting table
@pytest.mark.parametrize("row", P.HMX_VOTING_TABLE, ids=lambda r: f"{r.hvx}-{r.hmx}")
def test_hmx_voting_table_row(env, row):
    pid = env.new_id()
    if row.hvx in ("applied", "removed"):
        assert env.set(pid, dcvs(pid, "NOM")) == OK, "HVX (DCVS v3) vote"
    if row.hmx == "applied":
        code = env.set(pid, hmx("TUR", pick_default=int(bool(row.pick_default))))
        assert (code == OK) is row.valid, f"HMX vote with HVX {row.hvx}: code {code}"
        if not row.valid:
            assert code == INVALID_INPUT and env.messages_for("QNNEMU-perf-hmx-no-hvx"), \
                "refused with INVALID_INPUT, as the documentation says"
    elif row.hmx == "none" and row.pick_default:
        # The table's "Yes": the default HMX vote.  Also after an explicit vote, hmxPickDefault
        # reverts to it (notes 6 and 7 of the documentation).
        assert env.set(pid, hmx("TUR")) == OK and PERF.configs[pid].hmx_state == "explicit"
        assert env.set(pid, hmx(pick_default=1)) == OK, "hmxPickDefault = 1"
    elif row.hmx.startswith("removed"):
        assert env.set(pid, hmx("TUR")) == OK, "explicit HMX vote before the removal"
        assert int(env.perf.destroyPowerConfigId(pid)) == OK, "destroyPowerConfigId"
    state = PERF.configs[pid].hmx_state if pid in PERF.configs else None
    assert state == row.hmx_state, f"HMX state after the row's calls ({row})"
    c = clocks(env)
    if row.hmx_state == "explicit":
        assert c.hmx_mhz == P.corner_mhz(env.arch, "hmx", "TUR") != P.corner_mhz(env.arch, "hmx", "NOM"), \
            "the explicit HMX vote sets the HMX clock"
    elif row.hmx_state == "default":
        assert c.hmx_mhz == P.nominal_clocks(env.arch).hmx_mhz, "the default HMX vote scales with DCVS (NOM)"
    else:
        assert PERF.active(0, 0) is None and c == P.nominal_clocks(env.arch), "no vote left: nominal clocks"


def test_hmx_vote_in_the_same_call_as_the_hvx_vote(env):
    """The entries of a call apply in list order (the vendor's library: the HVX vote must come
    first, in the same call or an earlier one)."""
    pid = env.new_id()
    assert env.set(pid, hmx("TUR_L1"), dcvs(pid, "SVS")) == INVALID_INPUT and \
        env.messages_for("QNNEMU-perf-hmx-no-hvx"), "HMX listed before the HVX vote of the same call: refused"
    assert env.set(pid, dcvs(pid, "SVS"), hmx("TUR_L1")) == OK, "HMX listed after the HVX vote"
    assert clocks(env).hmx_mhz == P.corner_mhz(env.arch, "hmx", "TUR_L1"), "explicit HMX clock"
    assert clocks(env).core_mhz == P.corner_mhz(env.arch, "core", "SVS"), "the core follows DCVS"
    assert env.set(pid, hmx("TUR_L1", perf_mode=Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_LOW)) == OK
    assert clocks(env).hmx_mhz == round(P.corner_mhz(env.arch, "hmx", "TUR_L1") * 0.85, 1), \
        "CLK_PERF_LOW picks the corner's lower frequency"


# ------------------------------------------------------------------------- DCVS v3 fields
def test_dcvs_set_flags_update_only_their_fields(env):
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, "TURBO", bus="NOM", latency=40, sleep_disable=1)) == OK
    first = PERF.active(0, 0)
    assert (first.core_corner, first.bus_corner, first.sleep_latency_us, first.sleep_disabled) == \
        ("TURBO", "NOM", 40, True), "first vote"
    assert env.set(pid, dcvs(pid, "SVS", set_core=0, latency=None)) == OK, "bus only, no latency"
    second = PERF.active(0, 0)
    assert (second.core_corner, second.bus_corner, second.sleep_latency_us, second.sleep_disabled) == \
        ("TURBO", "SVS", 40, True), "setCoreParams=0 / setSleepLatency=0 / setSleepDisable=0 keep the old values"
    assert env.set(pid, dcvs(pid, "SVS", set_bus=0, sleep_disable=0)) == OK
    third = PERF.active(0, 0)
    assert (third.core_corner, third.bus_corner, third.sleep_disabled) == ("SVS", "SVS", False), \
        "setCoreParams=1 updates the core; sleepDisable=0 re-enables sleep"


@pytest.mark.parametrize("enable,mode,expected", [
    (0, PM["POWER_SAVER_MODE"], "NOM"),             # DCVS off: the target, whatever the mode
    (1, PM["PERFORMANCE_MODE"], "TURBO"),           # DCVS on: performance mode drives to max
    (1, PM["ADJUST_ONLY_UP"], "TURBO"),
    (1, PM["POWER_SAVER_MODE"], "SVS"),             # power saver: the min corner
    (1, PM["POWER_SAVER_AGGRESSIVE_MODE"], "SVS"),
    (1, PM["ADJUST_UP_DOWN"], "NOM"),               # up/down: settles at the target
    (1, PM["DUTY_CYCLE_MODE"], "NOM"),
])
def test_dcvs_power_mode_picks_the_corner(env, enable, mode, expected):
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, core=("SVS", "NOM", "TURBO"), bus=("SVS", "NOM", "TURBO"),
                             enable=enable, mode=mode)) == OK
    vote = PERF.active(0, 0)
    assert vote.core_corner == expected and vote.dcvs_enabled is bool(enable), \
        f"dcvsEnable={enable} powerMode={P.POWER_MODES[mode]}: effective corner"


def test_dcvs_power_mode_ignored_with_dcvs_disabled(env):
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, enable=0, mode=3)) == OK, "powerMode only counts with DCVS enabled (seed)"


@pytest.mark.parametrize("latency,modelled", [(9, 10), (10, 10), (65535, 65535), (65536, 65535)])
def test_dcvs_sleep_latency_bounds(env, latency, modelled):
    """Outside 10..65535 us the vendor's library accepts it too: modelled clipped, with a warning."""
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, latency=latency)) == OK, f"sleepLatency {latency} us accepted"
    assert PERF.active(0, 0).sleep_latency_us == modelled, f"sleepLatency {latency} us modelled as {modelled}"
    assert bool(env.messages_for("QNNEMU-perf-dcvs-sleep-latency")) is (latency != modelled), \
        "a warning exactly when the value is clipped"


def test_dcvs_disable_releases_the_rail(env):
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, "DISABLE")) == OK, "DISABLE on all three corners"
    assert clocks(env).corner == "MIN_VOLTAGE_CORNER", "a released rail sinks to the floor"
    other = env.new_id()
    assert env.set(other, dcvs(other, "NOM")) == OK
    assert clocks(env).corner == "NOM", "another id's vote holds the rail"


# ----------------------------------------------------------------- RPC, HMX timeout, DDR
@pytest.mark.parametrize("polling,modelled", [(0, 0), (9999, 9999), (10000, 9999)])
def test_rpc_polling_time_range(env, polling, modelled):
    pid = env.new_id()
    assert env.set(pid, (P.OPT_RPC_POLLING_TIME, polling)) == OK, f"rpc polling {polling} us accepted (the vendor too)"
    assert PERF.active(0, 0).rpc_polling_time_us == modelled, f"rpc polling {polling} us modelled as {modelled}"
    assert bool(env.messages_for("QNNEMU-perf-rpc-polling-range")) is (polling != modelled), \
        "a warning exactly when the value is clipped"


def test_rpc_control_latency_and_hmx_timeout_aggregate(env):
    a, b = env.new_id(), env.new_id()
    assert env.set(a, (P.OPT_RPC_CONTROL_LATENCY, 100), (P.OPT_HMX_TIMEOUT, 1000)) == OK
    assert env.set(b, (P.OPT_RPC_CONTROL_LATENCY, 300), (P.OPT_HMX_TIMEOUT, 5000)) == OK
    vote = PERF.active(0, 0)
    assert vote.rpc_control_latency_us == 100, "the strictest (smallest) control latency wins"
    assert vote.hmx_timeout_us == 5000, "the longest HMX timeout wins"
    assert vote.core_corner is None and clocks(env) == P.nominal_clocks(env.arch), \
        "no DCVS vote: nominal clocks"


def test_adaptive_polling_needs_polling(env):
    pid = env.new_id()
    assert env.set(pid, (P.OPT_ADAPTIVE_POLLING, 0)) == OK, "0 (off) needs nothing"
    assert env.set(pid, (P.OPT_ADAPTIVE_POLLING, 500)) == OK and \
        env.messages_for("QNNEMU-perf-adaptive-polling-needs-rpc-polling"), "without polling: accepted, warned"
    assert PERF.active(0, 0).adaptive_polling_time_us == 0, "and inactive"
    assert env.set(pid, (P.OPT_ADAPTIVE_POLLING, 1000), (P.OPT_RPC_POLLING_TIME, 9999)) == OK, \
        "polling in the same call"
    assert env.set(pid, (P.OPT_RPC_POLLING_TIME, 0)) == OK, "polling turned off later"
    assert PERF.active(0, 0).adaptive_polling_time_us == 0, "adaptive polling is inactive without polling"


def test_ddr_perf_mode_boosts_the_bus(env, monkeypatch):
    """No emulated arch has DDR perf mode (the vendor's library refuses it up to v85); with the
    gate lowered, the vote boosts the bus."""
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, "MAX_VOLTAGE_CORNER"), (P.OPT_DDR_PERF_MODE, 1)) == \
        Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED, "v75: refused, as the vendor's library does"
    monkeypatch.setattr(P, "DDR_PERF_MODE_MIN_ARCH", env.arch)
    assert env.set(pid, dcvs(pid, "MAX_VOLTAGE_CORNER"), (P.OPT_DDR_PERF_MODE, 1)) == OK
    assert clocks(env).bus_mhz == round(P.corner_mhz(env.arch, "bus", "MAX_VOLTAGE_CORNER") * 1.10, 1), \
        "DDR perf mode: bus at its perf-mode frequency"


def test_call_applies_in_order_until_a_refusal(env):
    """As the vendor's library: the entries before a refused one stay applied; an unknown option
    refuses the whole call first."""
    pid = env.new_id()
    assert env.set(pid, dcvs(pid, "TURBO"), hmx((128, "TUR", "TUR"))) == INVALID_INPUT, "a legacy HMX corner"
    assert PERF.active(0, 0).core_corner == "TURBO" and PERF.configs[pid].hmx is None, \
        "the DCVS vote before the refused HMX vote is applied"
    other = env.new_id()
    assert env.set(other, dcvs(other, "NOM"), (0x7654321, None)) == \
        Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG
    assert PERF.configs[other].votes == {}, "an unknown option refuses the whole call"


def test_memory_config_grow_size(env):
    assert env.memory(0, 0, (P.MEM_GROW_SIZE, 1 << 20)) == OK
    assert PERF.memory_grow_size(0, 0) == 1 << 20, "grow size recorded per device/core"


# ------------------------------------------------------------------ aggregation, ids, clocks
def test_highest_corner_wins_and_destroy_removes_votes(env):
    low, high = env.new_id(), env.new_id()
    assert env.set(low, dcvs(low, "SVS")) == OK and env.set(high, dcvs(high, "TURBO")) == OK
    assert PERF.active(0, 0).ids == tuple(sorted((low, high))), "both ids contribute"
    assert clocks(env).corner == "TURBO", "the highest corner wins"
    assert int(env.perf.destroyPowerConfigId(high)) == OK
    assert clocks(env).corner == "SVS", "destroying an id removes its votes"
    assert int(env.perf.destroyPowerConfigId(low)) == OK
    assert clocks(env) == P.nominal_clocks(env.arch), "no id left: nominal"


@pytest.mark.soc("SM8550")   # the default device as v73 (nominal clocks per arch)
def test_no_vote_is_nominal(env_v73):
    assert PERF.active(0, 0) is None, "no vote"
    assert P.current_clocks() == P.NOMINAL == P.nominal_clocks(73), "the default device runs NOMINAL"


def test_cores_are_separate():
    model = SimpleNamespace(arch=75, cores=2)
    perf = P.PerfInfrastructure(models=lambda _d: model)
    a, b = perf.create_id(0, 0), perf.create_id(0, 1)
    perf.set_power(b, [dcvs(b, "TURBO")])
    assert perf.active(0, 0) is None and perf.clocks(0, 0) == P.nominal_clocks(75), "core 0 has no vote"
    assert perf.clocks(0, 1).corner == "TURBO", "core 1 runs its vote"
    perf.set_power(a, [dcvs(a, "SVS")])
    assert perf.clocks(0, 0).corner == "SVS" and perf.clocks(0, 1).corner == "TURBO", "votes stay on their core"


def test_clock_table_per_arch():
    for arch in P.ARCH_NOMINAL:
        for rail, table in (("core", P.CORNER_SCALE), ("bus", P.CORNER_SCALE), ("hmx", P.EXP_CORNER_SCALE)):
            names = sorted(table, key=lambda n: (P.VCORNER if rail != "hmx" else P.EXP_VCORNER)[n])
            mhz = [P.corner_mhz(arch, rail, n) for n in names]
            assert mhz == sorted(mhz) and mhz[0] < mhz[-1], f"v{arch} {rail}: frequency grows with the corner"
    newer = [P.corner_mhz(a, "core", "NOM") for a in sorted(P.ARCH_NOMINAL)]
    assert newer == sorted(newer), "newer arches clock at least as fast"
    doc = (ROOT / "docs" / "htp-perf.md").read_text()
    assert P.clock_table_markdown() in doc, "docs/htp-perf.md holds the current corner -> MHz table"


# ---------------------------------------------------------------------------- use cases
def test_seed_example_application(env):
    """createPowerConfigId -> setRpcLatencyAndPolling -> setPowerConfig (DCVS off, MAX corners)
    -> (execute) -> HMX vote -> adaptive polling -> destroyPowerConfigId, with the seed's values."""
    pid = env.new_id()
    assert env.set(pid, (P.OPT_RPC_CONTROL_LATENCY, 100)) == OK, "rpc control latency 100 us"
    assert env.set(pid, (P.OPT_RPC_POLLING_TIME, 9999)) == OK, "rpc polling 9999 us"
    assert env.set(pid, dcvs(pid, "MAX_VOLTAGE_CORNER", enable=0, latency=40, sleep_disable=1)) == OK
    c = clocks(env)
    assert c.corner == "MAX_VOLTAGE_CORNER" and c.core_mhz == P.corner_mhz(env.arch, "core", "MAX_VOLTAGE_CORNER")
    assert env.set(pid, dcvs(pid, "MAX_VOLTAGE_CORNER", enable=1, latency=40, sleep_disable=1),
                   hmx("TUR")) == OK, "the documentation's HVX + HMX call"
    assert clocks(env).hmx_mhz == P.corner_mhz(env.arch, "hmx", "TUR"), "manual HMX vote"
    assert env.set(pid, (P.OPT_ADAPTIVE_POLLING, 1000)) == OK, "adaptive polling once polling is on"
    vote = PERF.active(0, 0)
    assert (vote.rpc_control_latency_us, vote.rpc_polling_time_us, vote.adaptive_polling_time_us,
            vote.sleep_latency_us, vote.sleep_disabled) == (100, 9999, 1000, 40, True), "the example's settings"
    assert int(env.perf.destroyPowerConfigId(pid)) == OK and PERF.active(0, 0) is None, "destroy removes all"


def test_use_case_voting_at_every_inference(env):
    pid = env.new_id()
    session = P.ProfileSession(pid, "high_performance")
    for _ in range(2):
        session.before_stage()
        assert clocks(env).corner == "TURBO", "the high vote during the inference"
        session.after_stage()
        assert clocks(env).corner == "SVS", "RELAXED_POWER_STATE between inferences"


def test_use_case_sustained_vote(env):
    pid = env.new_id()
    now = [100.0]
    session = P.ProfileSession(pid, "burst", sustain_s=1.0, now=lambda: now[0])
    session.before_stage()
    session.after_stage()
    now[0] += 0.5
    session.poll()
    assert clocks(env).corner == "MAX_VOLTAGE_CORNER", "the vote is sustained before the timer expires"
    session.before_stage()          # the next inference within the window: no down/up
    session.after_stage()
    now[0] += 0.9
    session.poll()
    assert clocks(env).corner == "MAX_VOLTAGE_CORNER", "the timer restarted with the last inference"
    now[0] += 0.2
    session.poll()
    assert clocks(env).corner == "SVS", "the timer expired: the vote is lowered"
    session.before_stage()
    assert clocks(env).corner == "MAX_VOLTAGE_CORNER", "the client raises it again"


def test_onnxruntime_htp_performance_mode_votes(tmp_path):
    """ONNX Runtime's QNN EP places its own votes for htp_performance_mode through the C ABI:
    every one is accepted, the clocks follow the mode, and the session's id goes with it."""
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper

    import qnnemu.onnxruntime as qort
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = str(tmp_path / "relu.onnx")
    onnx.save(model, path)
    core_mhz = {}
    for mode in ("burst", "power_saver"):
        sess = qort.session(path, provider_options=qort.provider_options(htp_performance_mode=mode))
        sess.run(None, {"x": np.ones((1, 4), np.float32)})
        assert PERF.active(0, 0) is not None, f"ONNX Runtime's {mode} votes were accepted"
        core_mhz[mode] = P.current_clocks(0, 0).core_mhz
        del sess
        assert PERF.ids() == [], f"{mode}: the session destroyed its power-config id"
    assert core_mhz["burst"] > core_mhz["power_saver"], f"burst clocks beat power_saver: {core_mhz}"


# --------------------------------------------------------------------------- rule cases
def _arg_null(e):
    return int(e.perf.createPowerConfigId(0, 0, NULL))


def _ddr_without_max_bus(e):
    """No emulated arch has DDR perf mode (the vendor's library refuses it up to v85): the rule
    behind the gate is exercised with the gate lowered to the device's arch."""
    pid = e.new_id()
    old = P.DDR_PERF_MODE_MIN_ARCH
    P.DDR_PERF_MODE_MIN_ARCH = e.arch
    try:
        return e.set(pid, dcvs(pid, "TURBO"), (P.OPT_DDR_PERF_MODE, 1))
    finally:
        P.DDR_PERF_MODE_MIN_ARCH = old


def _with_id(build):
    def trigger(e):
        pid = e.new_id()
        return e.set(pid, *build(pid))
    return trigger


RULE_CASES = {
    # rule: (error code, function, parameter path, trigger, device soc)
    "QNNEMU-perf-arg-null": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_FAILED, "createPowerConfigId",
                             "powerConfigId", _arg_null, Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-device-id": (INVALID_INPUT, "createPowerConfigId", "deviceId",
                              lambda e: int(e.perf.createPowerConfigId(1, 0, e.out_id())), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-core-id": (INVALID_INPUT, "createPowerConfigId", "coreId",
                            lambda e: int(e.perf.createPowerConfigId(0, 5, e.out_id())), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-id-unknown": (INVALID_INPUT, "setPowerConfig", "powerConfigId",
                               lambda e: e.set(0x7FFFFFF0, (P.OPT_RPC_POLLING_TIME, 10)), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-option": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG, "setPowerConfig",
                           "config[1].option", _with_id(lambda p: [(P.OPT_RPC_POLLING_TIME, 10), (0x7654321, None)]),
                           Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-memory-option": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG, "setMemoryConfig",
                                  "config[0].option", lambda e: e.memory(0, 0, (0x7654321, 4096)),
                                  Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-dcvs-context-id": (INVALID_INPUT, "setPowerConfig", "config[0].dcvsV3Config.contextId",
                                    _with_id(lambda p: [dcvs(p + 1000)]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-hmx-arch": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED, "setPowerConfig",
                             "config[1].hmxV2Config", _with_id(lambda p: [dcvs(p), hmx()]), None),
    "QNNEMU-perf-hmx-no-hvx": (INVALID_INPUT, "setPowerConfig", "config[0].hmxV2Config",
                               _with_id(lambda p: [hmx()]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-hmx-timeout-range": (INVALID_INPUT, "setPowerConfig", "config[0].hmxTimeoutIntervalUsConfig",
                                      _with_id(lambda p: [(P.OPT_HMX_TIMEOUT, 99)]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-ddr-arch": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED, "setPowerConfig",
                             "config[1].ddrPerfModeConfig",
                             _with_id(lambda p: [dcvs(p, "MAX_VOLTAGE_CORNER"), (P.OPT_DDR_PERF_MODE, 1)]), None),
    "QNNEMU-perf-ddr-needs-max-bus": (INVALID_INPUT, "setPowerConfig", "config[1].ddrPerfModeConfig",
                                      _ddr_without_max_bus, Q.QNN_SOC_MODEL_SM8650),
    # QNN 2.50
    "QNNEMU-perf-option-mixed": (INVALID_INPUT, "setPowerConfig", "config[1].option",
                                 _with_id(lambda p: [dcvs(p), dcvs_exp(p)]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-exp-arch": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED, "setPowerConfig",
                             "config[0].dcvsV3ExpConfig", _with_id(lambda p: [dcvs_exp(p)]), Q.QNN_SOC_MODEL_SM8850),
    "QNNEMU-perf-exp-legacy-corner": (INVALID_INPUT, "setPowerConfig", "config[1].hmxV2Config.hmxVoltageCornerMin",
                                      _with_id(lambda p: [dcvs(p), hmx((128, "TUR", "TUR"))]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-perf-mode-range": (INVALID_INPUT, "setPowerConfig", "config[1].hmxV2Config.hmxPerfMode",
                                    _with_id(lambda p: [dcvs(p), hmx(perf_mode=256)]), Q.QNN_SOC_MODEL_SM8650),
    "QNNEMU-perf-ceng-arch": (Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED, "setPowerConfig",
                              "config[1].cengConfig", _with_id(lambda p: [dcvs(p), ceng()]), None),
    "QNNEMU-perf-ceng-no-dcvs": (INVALID_INPUT, "setPowerConfig", "config[0].cengConfig",
                                 _with_id(lambda p: [ceng()]), Q.QNN_SOC_MODEL_SM8650),
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule(rule):
    code, func, path, trigger, soc = RULE_CASES[rule]
    e = Env(soc=soc)
    try:
        got = trigger(e)
        assert got == code, f"{rule}: returned {got}, expected {code}; log: {e.rec.messages()}"
        msgs = e.messages_for(rule)
        assert msgs, f"{rule}: the refusal is logged with its rule id; log: {e.rec.messages()}"
        assert any(f"{func}: {path}" in m for m in msgs), f"{rule}: message names {func} and {path}: {msgs}"
        fired = {r for _, m in e.rec.records for r in re.findall(r"\[(QNNEMU-[A-Za-z0-9_-]+)\]", m)}
        assert fired == {rule}, f"{rule}: no other rule fired ({fired})"
        if code != OK:   # entries before the refused one may stay applied (as the vendor's); not it
            option = int(re.search(r"config\[(\d+)\]", path).group(1)) if "config[" in path else None
            for pid in e.ids:
                if pid in PERF.configs and option is not None:
                    votes = PERF.configs[pid].votes
                    assert len(votes) <= option, f"{rule}: nothing from the refused entry on is applied: {votes}"
    finally:
        e.close()


def test_rule_ids_complete():
    """Every error rule of the perf code has a case here; its warning rules (what the vendor's
    library accepts and the emulator interprets) have theirs in tests/test_warning_rules.py."""
    from qnnemu.rules import WARNING_RULES
    sources = "".join((ROOT / "qnnemu" / p).read_text() for p in ("htp/perf.py", "abi/perf_api.py"))
    found = set(re.findall(r'"(QNNEMU-perf-[A-Za-z0-9_-]+)"', sources)) - set(WARNING_RULES)
    assert found == RULE_IDS == set(RULE_CASES), \
        f"rule ids in the sources / RULE_IDS / RULE_CASES differ: {found ^ RULE_IDS} {RULE_IDS ^ set(RULE_CASES)}"


def test_destroy_unknown_and_null_lists(env):
    assert int(env.perf.destroyPowerConfigId(0x7FFFFFF0)) == OK and \
        env.messages_for("QNNEMU-perf-destroy-unknown"), "destroying an unknown id: accepted (as the vendor), warned"
    pid = env.new_id()
    assert int(env.perf.setPowerConfig(pid, NULL)) == INVALID_INPUT, "setPowerConfig(NULL list)"
    assert int(env.perf.setMemoryConfig(0, 0, NULL)) == INVALID_INPUT, "setMemoryConfig(NULL list)"
    assert len(env.messages_for("QNNEMU-perf-arg-null")) == 2, "both logged as perf-arg-null"
    assert env.set(pid) == OK, "an empty list is a no-op"
    out = ffi.new("uint32_t *")
    assert int(env.perf.createPowerConfigId(0, 1, out)) == INVALID_INPUT and \
        env.messages_for("QNNEMU-perf-core-id"), "core 1 of a one-core device"
