"""QNN 2.50 HTP power configs (qnnemu/htp/perf.py, docs/htp-perf.md): CENG, DCVS_V3_EXP,
CENG_EXP, the ClkPerfMode values HIGH_D1..HIGH_D15 and the new ExpVoltageCorner_t values; and a
differential run of the same setPowerConfig calls on the vendor's libQnnHtp.so (QNN 2.51, in a
subprocess: its device SoC is process-wide) and on qnnemu, on a v73, a v75, a v81 and a v85
device (skipped without onnxruntime_qnn).  The rule ids are exercised in tests/test_htp_perf.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vendor import vendor_env, vendor_library

from qnnemu.client import Backend, ffi, htp_device_config
from qnnemu.headers import Q
from qnnemu.htp import perf as P
from qnnemu.htp.perf import PERF

OK = Q.QNN_SUCCESS
INVALID_INPUT = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_INVALID_INPUT
UNSUPPORTED = Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED
V, E, PM = P.VCORNER, P.EXP_VCORNER, P.POWERMODE
D = {n: getattr(Q, f"QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_HIGH_D{n}") for n in range(1, 16)}

# The calls, as data: each case is a list of setPowerConfig calls on one fresh id; an entry is
# [option, union member] with "PID" standing for the id.  The same runner drives both libraries.
RUNNER = r'''
import json, sys
from qnnemu.client import Backend, ffi, htp_device_config

def run(backend_path, device_config, cases):
    kind, value = device_config
    cfg = htp_device_config("SOC", socModel=value) if kind == "soc" else \
        htp_device_config("ARCH", arch={"deviceId": 0, "arch": value})
    be = Backend(backend_path, log_level=None, device_configs=[cfg])
    try:
        out = ffi.new("QnnDevice_Infrastructure_t *")
        be.call("deviceGetInfrastructure", out)
        perf = ffi.cast("QnnHtpDevice_Infrastructure_t *", out[0]).perfInfra
        fields = {1: "dcvsV3Config", 2: "rpcControlLatencyConfig", 3: "rpcPollingTimeConfig",
                  4: "hmxTimeoutIntervalUsConfig", 5: "hmxV2Config", 6: "adaptivePollingTimeConfig",
                  7: "ddrPerfModeConfig", 8: "cengConfig", 9: "dcvsV3ExpConfig", 10: "cengExpConfig"}
        results = {}
        for name, calls in cases.items():
            pid = ffi.new("uint32_t *")
            perf.createPowerConfigId(0, 0, pid)
            codes = []
            for call in calls:
                keep = []
                for option, member in call:
                    c = ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *")
                    c.option = option
                    if isinstance(member, dict):
                        m = getattr(c, fields[option])
                        for k, v in member.items():
                            setattr(m, k, pid[0] if v == "PID" else v)
                    elif member is not None:
                        setattr(c, fields[option], member)
                    keep.append(c)
                codes.append(int(perf.setPowerConfig(pid[0], ffi.new(
                    "QnnHtpPerfInfrastructure_PowerConfig_t *[]", keep + [ffi.NULL]))))
            perf.destroyPowerConfigId(pid[0])
            results[name] = codes
        return results
    finally:
        be.free()

if __name__ == "__main__":
    spec = json.load(sys.stdin)
    print(json.dumps(run(sys.argv[1], spec["device"], spec["cases"])))
'''


def _dcvs(corner="TURBO", **over):
    d = {"contextId": "PID", "setDcvsEnable": 1, "dcvsEnable": 0, "powerMode": PM["PERFORMANCE_MODE"],
         "setSleepLatency": 1, "sleepLatency": 100, "setSleepDisable": 0, "sleepDisable": 0,
         "setBusParams": 1, "setCoreParams": 1}
    for rail in ("bus", "core"):
        for k in ("Min", "Target", "Max"):
            d[f"{rail}VoltageCorner{k}"] = V[corner]
    d.update(over)
    return [P.OPT_DCVS_V3, d]


def _dcvs_exp(corner="TUR", perf_mode=0, **over):
    d = {"contextId": "PID", "powerMode": PM["PERFORMANCE_MODE"], "setSleepLatency": 1, "sleepLatency": 100,
         "setSleepDisable": 0, "sleepDisable": 0, "setBusParams": 1, "setCoreParams": 1,
         "corePerfMode": perf_mode, "busPerfMode": perf_mode}
    for rail in ("bus", "core"):
        for k in ("Min", "Target", "Max"):
            d[f"{rail}VoltageCorner{k}"] = E[corner] if isinstance(corner, str) else corner
    d.update(over)
    return [P.OPT_DCVS_V3_EXP, d]


def _hmx(corner="TUR", perf_mode=0):
    c = E[corner] if isinstance(corner, str) else corner
    return [P.OPT_HMX_V2, {"hmxPickDefault": 0, "hmxVoltageCornerMin": c, "hmxVoltageCornerTarget": c,
                           "hmxVoltageCornerMax": c, "hmxPerfMode": perf_mode}]


def _ceng(corner=V["TURBO"], perf_mode=0, expanded=False):
    return [P.OPT_CENG_EXP if expanded else P.OPT_CENG,
            {"cengVoltageCornerMin": corner, "cengVoltageCornerTarget": corner, "cengVoltageCornerMax": corner,
             "cengPerfMode": perf_mode}]


CASES = {
    "ceng alone": [[_ceng()]],
    "dcvs, ceng": [[_dcvs(), _ceng()]],
    "ceng, dcvs": [[_ceng(), _dcvs()]],
    "dcvs | ceng (two calls)": [[_dcvs()], [_ceng()]],
    "dcvs, ceng perf 256 corner 640": [[_dcvs(), _ceng(640, 256)]],
    "dcvs, ceng_exp": [[_dcvs(), _ceng(E["TUR"], 0, True)]],
    "dcvs, ceng_exp legacy corner": [[_dcvs(), _ceng(128, 0, True)]],
    "dcvs, ceng_exp perf 256": [[_dcvs(), _ceng(E["TUR"], 256, True)]],
    "dcvs, ceng, ceng_exp": [[_dcvs(), _ceng(), _ceng(E["TUR"], 0, True)]],
    "ceng_exp alone": [[_ceng(E["TUR"], 0, True)]],
    "dcvs_exp": [[_dcvs_exp()]],
    "dcvs_exp zero corners": [[_dcvs_exp(0)]],
    "dcvs_exp D3": [[_dcvs_exp("NOM_L0", D[3])]],
    "dcvs_exp perf 17": [[_dcvs_exp("TUR", 17)]],
    "dcvs_exp perf 256": [[_dcvs_exp("TUR", 256)]],
    "dcvs_exp legacy corner": [[_dcvs_exp(128)]],
    "dcvs_exp corner 999": [[_dcvs_exp(999)]],
    "dcvs_exp contextId": [[_dcvs_exp(contextId=12345)]],
    "dcvs_exp sleep 5 power mode 3": [[_dcvs_exp(sleepLatency=5, powerMode=3)]],
    "dcvs_exp, hmx": [[_dcvs_exp(), _hmx()]],
    "dcvs_exp, ceng_exp": [[_dcvs_exp(), _ceng(E["NOM"], D[2], True)]],
    "dcvs, dcvs_exp": [[_dcvs(), _dcvs_exp()]],
    "dcvs_exp | dcvs | hmx": [[_dcvs_exp()], [_dcvs()], [_hmx()]],
    "dcvs, hmx": [[_dcvs(), _hmx()]],
    "hmx, dcvs": [[_hmx(), _dcvs()]],
    **{f"dcvs, hmx HIGH_D{n}": [[_dcvs(), _hmx("TUR", D[n])]] for n in (1, 8, 15)},
    "dcvs, hmx perf 255": [[_dcvs(), _hmx("TUR", 255)]],
    "dcvs, hmx perf 256": [[_dcvs(), _hmx("TUR", 256)]],
    "dcvs, hmx legacy corner": [[_dcvs(), _hmx(128)]],
    "dcvs, hmx corner 999": [[_dcvs(), _hmx(999)]],
    **{f"dcvs, hmx {c}": [[_dcvs(), _hmx(c)]] for c in ("RET", "LOW_SVS_D3", "TUR_L5", "SUPER_TURBO")},
    "dcvs sleep 5 corner 999 unordered power mode 3": [[_dcvs(sleepLatency=5, dcvsEnable=1, powerMode=3,
                                                             coreVoltageCornerMin=999,
                                                             busVoltageCornerTarget=V["NOM"])]],
    "dcvs contextId": [[_dcvs(contextId=12345)]],
    "dcvs twice": [[_dcvs(), _dcvs("NOM")]],
    "hmx timeout 99, 100, 1000000, 1000001": [[[P.OPT_HMX_TIMEOUT, 99]], [[P.OPT_HMX_TIMEOUT, 100]],
                                              [[P.OPT_HMX_TIMEOUT, 1000000]], [[P.OPT_HMX_TIMEOUT, 1000001]]],
    "rpc polling 10000": [[[P.OPT_RPC_POLLING_TIME, 10000]]],
    "adaptive polling without polling": [[[P.OPT_ADAPTIVE_POLLING, 1000]]],
    "dcvs max bus, ddr perf mode": [[_dcvs("MAX_VOLTAGE_CORNER"), [P.OPT_DDR_PERF_MODE, 1]]],
    "unknown option": [[[11, None]]],
}

# device -> (how qnnemu creates it, how the vendor's library is told: a SoC it maps to that arch)
DEVICES = {
    "v73": (("soc", Q.QNN_SOC_MODEL_SM8550), ("soc", Q.QNN_SOC_MODEL_SM8550)),
    "v75": (("soc", Q.QNN_SOC_MODEL_SM8650), ("soc", Q.QNN_SOC_MODEL_SM8650)),
    "v81": (("soc", Q.QNN_SOC_MODEL_SM8850), ("soc", Q.QNN_SOC_MODEL_SM8850)),
    # no Qnn_SocModel_t constant is a v85 part; the vendor's library takes socModel 103 as one
    # (its messages name "arch 85"); qnnemu has v85 as an arch-only device
    "v85": (("arch", 85), ("soc", 103)),
}


def _run_ours(device_config) -> dict:
    namespace: dict = {}
    exec(compile(RUNNER, "runner", "exec"), namespace)
    return namespace["run"](None, device_config, CASES)


@pytest.fixture(scope="module")
def vendor_results() -> dict:
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    out = {}
    for arch, (_, device) in DEVICES.items():
        proc = subprocess.run([sys.executable, "-c", RUNNER, str(lib)], input=json.dumps(
            {"device": device, "cases": CASES}), env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"vendor run on {arch}: {proc.stderr[-800:]}"
        out[arch] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("arch", sorted(DEVICES))
def test_same_codes_as_the_vendor(qnn_abi, vendor_results, arch):
    ours = _run_ours(DEVICES[arch][0])
    differ = {k: (vendor_results[arch][k], ours[k]) for k in CASES if vendor_results[arch][k] != ours[k]}
    assert not differ, f"{arch}: case -> (vendor codes, qnnemu codes) that differ: {differ}"


# The measured codes, pinned (so that qnnemu's behaviour is checked without the vendor too).
PINNED = {
    ("v73", "dcvs, ceng"): [UNSUPPORTED], ("v75", "dcvs, ceng"): [OK], ("v75", "ceng alone"): [INVALID_INPUT],
    ("v75", "ceng, dcvs"): [INVALID_INPUT], ("v75", "dcvs, ceng perf 256 corner 640"): [OK],
    ("v81", "dcvs_exp"): [UNSUPPORTED], ("v81", "dcvs, ceng_exp"): [UNSUPPORTED], ("v85", "dcvs_exp"): [OK],
    ("v85", "dcvs, ceng_exp legacy corner"): [INVALID_INPUT], ("v85", "dcvs_exp perf 256"): [INVALID_INPUT],
    ("v85", "dcvs_exp corner 999"): [OK], ("v85", "dcvs, dcvs_exp"): [INVALID_INPUT],
    ("v85", "dcvs, ceng, ceng_exp"): [INVALID_INPUT], ("v75", "dcvs, hmx HIGH_D15"): [OK],
    ("v75", "dcvs, hmx perf 256"): [INVALID_INPUT], ("v75", "hmx, dcvs"): [INVALID_INPUT],
    ("v75", "hmx timeout 99, 100, 1000000, 1000001"): [INVALID_INPUT, OK, OK, INVALID_INPUT],
    ("v85", "dcvs max bus, ddr perf mode"): [UNSUPPORTED], ("v75", "dcvs twice"): [OK],
}


@pytest.mark.parametrize("arch,case", sorted(PINNED))
def test_pinned_codes(qnn_abi, arch, case):
    got = _run_ours(DEVICES[arch][0])[case]
    assert got == PINNED[(arch, case)], f"{arch} {case}: qnnemu {got}, measured on the vendor {PINNED[(arch, case)]}"


# ------------------------------------------------------------------------------- the model
@pytest.fixture
def perf85(qnn_abi):
    """A v85 device (arch-only) and its perf infrastructure; ids destroyed afterwards."""
    with PERF.lock:
        others = dict(PERF.configs)
        PERF.configs.clear()
    be = Backend(None, log_level=None, device_configs=[htp_device_config("ARCH", arch={"deviceId": 0, "arch": 85})])
    out = ffi.new("QnnDevice_Infrastructure_t *")
    be.call("deviceGetInfrastructure", out)
    perf = ffi.cast("QnnHtpDevice_Infrastructure_t *", out[0]).perfInfra
    ids: list[int] = []

    def vote(*entries, pid=None) -> tuple[int, int]:
        if pid is None:
            out_id = ffi.new("uint32_t *")
            assert perf.createPowerConfigId(0, 0, out_id) == OK, "createPowerConfigId"
            pid = int(out_id[0])
            ids.append(pid)
        keep = []
        for option, member in entries:
            c = ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *")
            c.option = option
            m = getattr(c, P.POWER_OPTION_FIELDS[option])
            for k, v in member.items():
                setattr(m, k, pid if v == "PID" else v)
            keep.append(c)
        return pid, int(perf.setPowerConfig(pid, ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *[]",
                                                          keep + [ffi.NULL])))
    yield vote
    for pid in ids:
        perf.destroyPowerConfigId(pid)
    be.free()
    with PERF.lock:
        PERF.configs.update(others)


def test_dcvs_exp_clocks_and_perf_modes(perf85):
    nom = P.nominal_clocks(85)
    pid, code = perf85(_dcvs_exp("TUR"))
    assert code == OK, "DCVS_V3_EXP on v85"
    vote = PERF.active(0, 0)
    assert vote.dcvs_enabled is True, "DCVS is implicitly enabled by DCVS_V3_EXP"
    assert (vote.core_mhz, vote.bus_mhz, vote.core_corner) == (round(nom.core_mhz * 1.25, 1),
                                                               round(nom.bus_mhz * 1.25, 1), "TUR"), vote
    _, code = perf85(_dcvs_exp("NOM_L0", D[3]), pid=pid)
    assert code == OK and P.current_clocks(0, 0).core_mhz == round(nom.core_mhz * 1.05 * 0.97, 1), \
        "NOM_L0 (between NOM and NOM_L1: 1.05) at HIGH_D3 (3 steps of 1% below the corner's top)"
    _, code = perf85(_dcvs("SVS"), pid=pid)
    assert code == OK and P.current_clocks(0, 0).corner == "SVS" and not PERF.configs[pid].dcvs.expanded, \
        "a later DCVS_V3 supersedes DCVS_V3_EXP"
    _, code = perf85(_dcvs_exp("TUR_L1"), pid=pid)
    assert code == OK and PERF.configs[pid].dcvs.expanded and P.current_clocks(0, 0).corner == "TUR_L1", \
        "and a later DCVS_V3_EXP the legacy vote"


def test_ceng_votes_are_recorded_with_their_state(perf85):
    pid, code = perf85(_dcvs_exp("NOM"))
    assert code == OK and PERF.configs[pid].ceng_state == "default", \
        "with a DCVS vote and no CENG vote: the default CENG vote"
    _, code = perf85(_ceng(E["SVS"], D[2], True), pid=pid)
    assert code == OK and PERF.configs[pid].ceng == P.CengVote((E["SVS"],) * 3, D[2], True), "CENG_EXP recorded"
    assert PERF.active(0, 0).ceng_votes == ((pid, "explicit", PERF.configs[pid].ceng),), "aggregated per id"
    _, code = perf85(_ceng(V["TURBO"]), pid=pid)
    assert code == OK and not PERF.configs[pid].ceng.expanded, "a later legacy CENG supersedes CENG_EXP"


@pytest.mark.parametrize("n", range(1, 16))
def test_high_d_steps_are_one_percent_each(perf85, n):
    pid, code = perf85(_dcvs_exp("NOM"), _hmx("TUR", D[n]))
    assert code == OK, f"HIGH_D{n} accepted (the vendor accepts it on v75 and later)"
    assert P.current_clocks(0, 0).hmx_mhz == round(P.nominal_clocks(85).hmx_mhz * 1.25 * (1 - 0.01 * n), 1), \
        f"HIGH_D{n}: {n}% below the TUR corner's top HMX frequency"


def test_every_expanded_corner_has_a_rising_clock():
    values = sorted(v for v, n in Q.enum("DCVS_EXP_VCORNER_").items() if n not in ("DCVS_EXP_VCORNER_DISABLE",
                                                                                  "DCVS_EXP_VCORNER_UNKNOWN"))
    scales = [P.exp_corner_scale(v) for v in values]
    assert scales == sorted(scales) and len(set(scales)) >= len(values) - 2, \
        f"the clock rises with the corner (MAX and DEFINED_MAX share the top): {list(zip(values, scales))}"
    for name, scale in P.EXP_CORNER_SCALE.items():
        assert P.exp_corner_scale(E[name]) == scale, f"{name}: the documented anchor"


def test_ids_and_memory_targets_as_the_vendor(qnn_abi):
    """destroyPowerConfigId of an unknown id and setMemoryConfig on any device/core: accepted, as
    the vendor's library does (measured); createPowerConfigId refuses what does not exist."""
    with Backend(None, log_level=None) as be:
        out = ffi.new("QnnDevice_Infrastructure_t *")
        be.call("deviceGetInfrastructure", out)
        perf = ffi.cast("QnnHtpDevice_Infrastructure_t *", out[0]).perfInfra
        assert perf.destroyPowerConfigId(0x7FFFFFF0) == OK, "destroy an unknown id: accepted"
        m = ffi.new("QnnHtpPerfInfrastructure_MemoryConfig_t *")
        m.option, m.memGrowSizeConfig = P.MEM_GROW_SIZE, 4096
        assert perf.setMemoryConfig(7, 9, ffi.new("QnnHtpPerfInfrastructure_MemoryConfig_t *[]", [m, ffi.NULL])) \
            == OK and PERF.memory_grow_size(7, 9) == 4096, "memory config on device 7 core 9: recorded as given"
        pid = ffi.new("uint32_t *")
        assert perf.createPowerConfigId(1, 0, pid) == INVALID_INPUT and perf.createPowerConfigId(0, 1, pid) == \
            INVALID_INPUT, "createPowerConfigId: device 1 / core 1 do not exist (the vendor refuses them too)"
