"""The HTP SoC table (qnnemu/htp/soc.py) and the device configs (QNN HTP backend documentation, "QNN
HTP Device Config Options", QnnHtpDevice_CustomConfig_t; QnnHtpDevice_DeviceInfoExtension_t): every
row of the table goes through deviceCreate + deviceGetInfo; SOC wins over ARCH; the default
device."""
from __future__ import annotations

import abi
import pytest
from abi import NULL, ffi, vp
from helpers.graph_env import Env

from qnnemu.core.device import KNOWN_ARCHS, VENDOR_SOC_MODELS
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import soc as socs

pytestmark = pytest.mark.usefixtures("qnn_abi")


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def _custom(e: Env, option: int, **fields):
    cc = e.own(ffi.new("QnnHtpDevice_CustomConfig_t *"))
    cc.option = option
    for k, v in fields.items():
        if k == "arch":
            cc.arch.arch, cc.arch.deviceId = v
        elif k == "signed":
            cc.useSignedProcessDomain.useSignedProcessDomain, cc.useSignedProcessDomain.deviceId = v
        else:
            setattr(cc, k, v)
    c = e.own(ffi.new("QnnDevice_Config_t *"))
    c.option = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM
    c.customConfig = cc
    return c


def _configs(e: Env, *configs):
    return abi.null_terminated("QnnDevice_Config_t", list(configs), e.keep)


def _create(e: Env, *configs) -> int:
    code, dev = abi.create("deviceCreate", vp(e.log), _configs(e, *configs) if configs else NULL)
    assert code == Q.QNN_SUCCESS, f"deviceCreate returned {code}: {e.rec.errors()}"
    return dev


def _info(func: str, handle) -> list[dict]:
    """deviceGetInfo / deviceGetPlatformInfo as plain dicts, one per hardware device."""
    out = ffi.new("const QnnDevice_PlatformInfo_t **")
    assert abi.call(func, handle, out) == Q.QNN_SUCCESS, func
    info = out[0]
    devices = []
    for d in range(info.v1.numHwDevices):
        hw = info.v1.hwDevices[d].v1
        ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", hw.deviceInfoExtension)
        chip = ext.onChipDevice
        devices.append({"deviceId": hw.deviceId, "deviceType": hw.deviceType, "numCores": hw.numCores,
                        "coreIds": [hw.cores[k].v1.coreId for k in range(hw.numCores)],
                        "coreTypes": {hw.cores[k].v1.coreType for k in range(hw.numCores)},
                        "devType": ext.devType, "vtcmSize": chip.vtcmSize, "socModel": chip.socModel,
                        "signedPdSupport": bool(chip.signedPdSupport), "dlbcSupport": bool(chip.dlbcSupport),
                        "arch": int(chip.arch)})
    assert abi.call("deviceFreePlatformInfo", NULL, out[0]) == Q.QNN_SUCCESS, "deviceFreePlatformInfo"
    return devices


def _expected(row: socs.SocInfo) -> list[dict]:
    return [{"deviceId": d, "deviceType": Q.QNN_HTP_DEVICE_TYPE_ON_CHIP, "numCores": row.cores,
             "coreIds": list(range(row.cores)), "coreTypes": {Q.QNN_HTP_CORE_TYPE_NSP},
             "devType": Q.QNN_HTP_DEVICE_TYPE_ON_CHIP, "vtcmSize": row.vtcm_mb, "socModel": row.soc_model,
             "signedPdSupport": row.signed_pd, "dlbcSupport": row.dlbc, "arch": row.arch}
            for d in range(row.devices)]


# ------------------------------------------------------------------------------ the table
def test_soc_table_rows_are_htp_socs_of_the_headers():
    names = Q.enum("QNN_SOC_MODEL_")
    for model, row in socs.SOCS.items():
        assert model in names and names[model] != "QNN_SOC_MODEL_UNKNOWN", \
            f"{row.name}: soc model {model} is a Qnn_SocModel_t constant"
        assert row.arch in socs.HTP_ARCHS, f"{row.name}: arch v{row.arch} is an HTP arch"
        assert row.vtcm_bytes % (1 << 20) == 0 and row.vtcm_bytes >= 2 << 20, f"{row.name}: VTCM whole MiB, >= 2"
        assert 1 <= row.hvx_threads <= 8 and row.cores >= 1 and row.devices >= 1, f"{row.name}: counts"
        assert row.hmx and row.signed_pd, f"{row.name}: every HTP has HMX and a signed PD"
        assert row.dlbc == (row.arch >= 75), f"{row.name}: DLBC from v75"
        assert row.source in ("executorch", "litert", "qnn-docs", "chosen"), f"{row.name}: source named"
    assert {r.arch for r in socs.SOCS.values()} == set(socs.HTP_ARCHS), "every HTP arch v68..v81 has a SoC"


def test_soc_for_arch_is_a_row_of_that_arch():
    for arch in socs.HTP_ARCHS:
        row = socs.soc_for_arch(arch)
        assert row is not None and row.arch == arch, f"v{arch}: its reference SoC has that arch"
    assert socs.soc_for_arch(85) is None, "v85 has no SoC row"


# ------------------------------------------------------------------ every row through the ABI
@pytest.mark.parametrize("row", list(socs.SOCS.values()), ids=lambda r: r.name)
def test_every_soc_through_device_create_and_get_info(env, row):
    dev = _create(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=row.soc_model))
    try:
        assert _info("deviceGetInfo", vp(dev)) == _expected(row), f"deviceGetInfo reports {row.name}"
        # deviceGetPlatformInfo: the emulated platform is the newest device's SoC
        assert _info("deviceGetPlatformInfo", vp(env.log)) == _expected(row), \
            f"deviceGetPlatformInfo reports the configured {row.name}"
        model = HANDLES.lookup(dev).model
        assert (model.vtcm_bytes, model.hvx_threads, model.hmx, model.cores, model.name) == \
            (row.vtcm_bytes, row.hvx_threads, row.hmx, row.cores, row.name), "DeviceModel carries the row"
        assert model.soc_configured, "the SOC option was given"
    finally:
        assert abi.call("deviceFree", vp(dev)) == Q.QNN_SUCCESS


@pytest.mark.parametrize("arch", KNOWN_ARCHS)
def test_arch_selects_its_reference_soc(env, arch):
    dev = _create(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH, arch=(arch, 0)))
    try:
        info = _info("deviceGetInfo", vp(dev))[0]
        row = socs.soc_for_arch(arch)
        assert info["arch"] == arch, f"v{arch} device reports its arch"
        assert info["socModel"] == (row.soc_model if row else Q.QNN_SOC_MODEL_UNKNOWN), \
            f"v{arch}: socModel of the arch's reference SoC (UNKNOWN without one)"
        assert not HANDLES.lookup(dev).model.soc_configured, "an arch is not a SoC"
    finally:
        abi.call("deviceFree", vp(dev))


@pytest.mark.parametrize("order", ["soc-first", "arch-first"])
def test_soc_wins_over_arch(env, order):
    soc = _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=Q.QNN_SOC_MODEL_SM8750)
    arch = _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH, arch=(Q.QNN_HTP_DEVICE_ARCH_V68, 0))
    dev = _create(env, *((soc, arch) if order == "soc-first" else (arch, soc)))
    try:
        info = _info("deviceGetInfo", vp(dev))[0]
        assert (info["socModel"], info["arch"]) == (Q.QNN_SOC_MODEL_SM8750, 79), "SOC wins, ARCH ignored"
        assert any("the SoC wins" in m for m in env.rec.messages()), "the ignored arch is logged"
    finally:
        abi.call("deviceFree", vp(dev))


def test_signed_pd_is_recorded_and_kept_by_set_config(env):
    dev = _create(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD, signed=(True, 0)))
    try:
        assert HANDLES.lookup(dev).model.use_signed_pd, "signed PD requested"
        cfg = _configs(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=Q.QNN_SOC_MODEL_SM8650))
        assert abi.call("deviceSetConfig", vp(dev), cfg) == Q.QNN_SUCCESS, "deviceSetConfig SOC"
        model = HANDLES.lookup(dev).model
        assert (model.soc_model, model.use_signed_pd) == (Q.QNN_SOC_MODEL_SM8650, True), \
            "a new SoC keeps the signed-PD request"
    finally:
        abi.call("deviceFree", vp(dev))


def test_default_device_is_sm8350(env):
    """The HTP documentation's device config table: QNN_HTP_DEVICE_CONFIG_OPTION_SOC defaults
    to QNN_SOC_MODEL_SM8350 (v68)."""
    default = socs.SOCS[socs.DEFAULT_SOC]
    assert (default.soc_model, default.arch) == (Q.QNN_SOC_MODEL_SM8350, 68), "documented default: SM8350, v68"
    assert _info("deviceGetInfo", vp(env.dev)) == _expected(default), "a device without configs is SM8350"
    assert _info("deviceGetPlatformInfo", NULL)[0]["socModel"] == Q.QNN_SOC_MODEL_SM8350, \
        "the platform info of the default device"


@pytest.mark.parametrize("value", ["SM8550", "sm8650", "QNN_SOC_MODEL_SM8750", str(int(Q.QNN_SOC_MODEL_SM8850)),
                                   " 57 "])
def test_soc_model_environment_selects_the_default(env, monkeypatch, value):
    """QNNEMU_SOC_MODEL (a QNN_SOC_MODEL_* number or name) makes another SoC the default device:
    deviceCreate without configs, deviceGetPlatformInfo without a device; a SOC config still wins."""
    monkeypatch.setenv("QNNEMU_SOC_MODEL", value)
    want = socs.parse_soc_model(value)
    assert want is not None and want.soc_model != socs.DEFAULT_SOC, f"{value!r} names a SoC other than the default"
    dev = _create(env)
    try:
        assert _info("deviceGetInfo", vp(dev)) == _expected(want), \
            f"QNNEMU_SOC_MODEL={value!r}: the device is {want.name}"
    finally:
        abi.call("deviceFree", vp(dev))
    dev = _create(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=Q.QNN_SOC_MODEL_SM8450))
    try:
        assert _info("deviceGetInfo", vp(dev))[0]["socModel"] == Q.QNN_SOC_MODEL_SM8450, \
            "a SOC config wins over the variable"
    finally:
        abi.call("deviceFree", vp(dev))


def test_rule_device_soc_env(env, monkeypatch):
    """An invalid QNNEMU_SOC_MODEL is refused where the default device is made (deviceCreate),
    naming the variable, the value and what is accepted; nothing crashes."""
    monkeypatch.setenv("QNNEMU_SOC_MODEL", "SM9999")
    env.rec.clear()
    code, dev = abi.create("deviceCreate", vp(env.log), NULL)
    if code == Q.QNN_SUCCESS:
        abi.call("deviceFree", vp(dev))
    msg = env.rec.assert_rule(code, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "QNNEMU-device-soc-env", "deviceCreate",
                              "QNNEMU_SOC_MODEL")
    assert "'SM9999'" in msg and "SM8550 (43)" in msg, f"names the value and the accepted SoCs: {msg}"
    monkeypatch.setenv("QNNEMU_SOC_MODEL", "SM8550")
    dev = _create(env)   # the same backend recovers once the variable is right
    abi.call("deviceFree", vp(dev))


def test_every_other_soc_model_is_tolerated_or_refused(env):
    """Every Qnn_SocModel_t constant without an HTP row: ignored with warning
    QNNEMU-device-soc-unmodelled when the vendor's library accepts it (the device stays the
    default), else refused (QNNEMU-device-soc)."""
    others = [v for v in Q.enum("QNN_SOC_MODEL_") if v not in socs.SOCS]
    assert others, "the header has non-HTP SoC models"
    default = _expected(socs.SOCS[socs.DEFAULT_SOC])
    for model in others:
        env.rec.clear()
        code, dev = abi.create("deviceCreate", vp(env.log), _configs(
            env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=model)))
        if model in VENDOR_SOC_MODELS:
            assert code == Q.QNN_SUCCESS, f"soc model {model}: accepted as the vendor's library does"
            assert env.rules_logged() == {"QNNEMU-device-soc-unmodelled"}, f"soc model {model}: warning"
            assert _info("deviceGetInfo", vp(dev)) == default, f"soc model {model}: the device stays the default"
            abi.call("deviceFree", vp(dev))
        else:
            assert code == Q.QNN_DEVICE_ERROR_INVALID_CONFIG, f"soc model {model}: refused"
            assert env.rules_logged() == {"QNNEMU-device-soc"}, f"soc model {model}: rule QNNEMU-device-soc"


# --------------------------------------------------------------------------- tolerated ids
def test_device_id_of_no_device_is_ignored(env):
    """An option addressing an NSP device the SoC does not have (SM8550 has one): the vendor's
    library accepts any deviceId, so the option applies with warning QNNEMU-device-id-ignored."""
    code, dev = abi.create("deviceCreate", vp(env.log), _configs(
        env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH, arch=(Q.QNN_HTP_DEVICE_ARCH_V75, 1))))
    assert code == Q.QNN_SUCCESS, f"accepted, as the vendor's library does: {env.rec.errors()}"
    [msg] = [m for m in env.rec.messages() if "[QNNEMU-device-id-ignored]" in m]
    assert "device 1 does not exist" in msg, f"the message names the device: {msg}"
    assert _info("deviceGetInfo", vp(dev))[0]["arch"] == Q.QNN_HTP_DEVICE_ARCH_V75, "the ARCH option applies"
    abi.call("deviceFree", vp(dev))
    # SA8295 has two NSP devices: device 1 exists there, nothing is logged
    env.rec.clear()
    dev = _create(env, _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=Q.QNN_SOC_MODEL_SA8295),
                  _custom(env, Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD, signed=(True, 1)))
    assert env.rules_logged() == set(), f"device 1 of SA8295 exists: {env.rec.records}"
    abi.call("deviceFree", vp(dev))
