"""Device variants (QNN HTP backend documentation, "QNN HTP Device Config Options" SIGNEDPD, "QNN HTP
Device Info Extension Options"): the client's platform description
(QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO) and the signed process domain, against the vendor's
libQnnHtp.so 2.51 (x86-64).

What the vendor's library does, pinned by ``test_vendor_platform_description``: deviceCreate keeps
the first hardware device of the description and deviceGetInfo returns it as given (socModel, arch,
VTCM, signed PD and DLBC flags, device type -- even a socModel or arch no SoC has); it refuses a
description without hardware devices and any core count but its device's (1), QNN_DEVICE_ERROR_
INVALID_CONFIG; a NULL hardwareInfo is the default platform.  It prepares for the device its SOC /
ARCH configs chose, not for the description (the binary's SoC and the float math do not follow it).
qnnemu does all of that (qnnemu/abi/device_api.py, qnnemu/core/device.py) and says so when the
description is not the emulated device (warning QNNEMU-device-platform-info-not-emulated).
SIGNEDPD changes nothing the vendor reports (any deviceId accepted); qnnemu records it and logs the
process domain at deviceCreate.
"""
from __future__ import annotations

import abi
import numpy as np
import pytest
from abi import ffi, vp
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

SM8550, SM8650, SM8750 = int(Q.QNN_SOC_MODEL_SM8550), int(Q.QNN_SOC_MODEL_SM8650), int(Q.QNN_SOC_MODEL_SM8750)

# name -> platform_config keyword arguments (vtcm MB, socModel, arch, signed PD, DLBC, ...)
DESCRIPTIONS = {
    "sm8650": dict(vtcm=8, soc=SM8650, arch=75, signed=True, dlbc=True),
    "sm8650-2mb": dict(vtcm=2, soc=SM8650, arch=75),
    "no-soc-v79": dict(vtcm=8, soc=0, arch=79),
    "unknown-soc-and-arch": dict(vtcm=8, soc=9999, arch=99),
    "off-chip-type": dict(vtcm=8, soc=SM8650, arch=75, devtype=1),
    "two-devices": dict(vtcm=8, soc=SM8750, arch=79, ndev=2),
    "null-extension": dict(vtcm=8, soc=SM8650, arch=75, null_ext=True),
    "no-device": dict(vtcm=8, soc=SM8650, arch=75, ndev=0),
    "two-cores": dict(vtcm=8, soc=SM8650, arch=75, cores=2),
    "no-core": dict(vtcm=8, soc=SM8650, arch=75, cores=0),
}


def platform_config(the_ffi, keep: list, vtcm: int, soc: int, arch: int, signed: bool = False, dlbc: bool = False,
                    ndev: int = 1, devtype: int = 0, null_ext: bool = False, cores: int = 1):
    """A QnnDevice_Config_t with QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO describing ``ndev`` HTP
    devices of ``cores`` NSP cores each (``the_ffi``: the cffi of the library called)."""
    info = the_ffi.new("QnnDevice_PlatformInfo_t *")
    hw = the_ffi.new("QnnDevice_HardwareDeviceInfo_t[]", max(ndev, 1))
    keep += [info, hw]
    for d in range(ndev):
        ext = the_ffi.new("QnnHtpDevice_DeviceInfoExtension_t *")
        ext.devType = devtype
        chip = ext.onChipDevice
        chip.vtcmSize, chip.socModel, chip.signedPdSupport, chip.dlbcSupport, chip.arch = vtcm, soc, signed, dlbc, arch
        core_infos = the_ffi.new("QnnDevice_CoreInfo_t[]", max(cores, 1))
        for k in range(cores):
            core_infos[k].version, core_infos[k].v1.coreId = Q.QNN_DEVICE_CORE_INFO_VERSION_1, k
        keep += [ext, core_infos]
        hw[d].version = Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1
        hw[d].v1.deviceId, hw[d].v1.deviceType, hw[d].v1.numCores, hw[d].v1.cores = d, devtype, cores, core_infos
        hw[d].v1.deviceInfoExtension = (the_ffi.NULL if null_ext
                                         else the_ffi.cast("QnnDevice_DeviceInfoExtension_t", ext))
    info.version, info.v1.numHwDevices, info.v1.hwDevices = Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1, ndev, hw
    cfg = the_ffi.new("QnnDevice_Config_t *")
    cfg.option, cfg.hardwareInfo = Q.QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO, info
    keep.append(cfg)
    return cfg


def reported(be) -> list[dict]:
    """deviceGetInfo of a qnnemu.client Backend's device, as dicts."""
    from qnnemu.client.cabi import ffi as cffi
    out = cffi.new("const QnnDevice_PlatformInfo_t **")
    be.call("deviceGetInfo", be.device, out)
    p = out[0].v1
    devices = []
    for i in range(p.numHwDevices):
        d = p.hwDevices[i].v1
        ext = cffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", d.deviceInfoExtension)
        c = ext.onChipDevice
        devices.append(dict(id=int(d.deviceId), type=int(d.deviceType), cores=int(d.numCores),
                            ext_type=int(ext.devType),
                            vtcm=int(c.vtcmSize), soc=int(c.socModel), signed=bool(c.signedPdSupport),
                            dlbc=bool(c.dlbcSupport), arch=int(c.arch)))
    be.call("deviceFreePlatformInfo", cffi.NULL, out[0])
    return devices


def probe(library: str, name: str, soc_config: int | None = None) -> dict:
    """deviceCreate with description ``name`` (plus an optional SOC config): the code, what
    deviceGetInfo reports, and a float graph's binary SoC and Add(1, 1e-4) result (float16 math
    or not: which device the graph was prepared for)."""
    from qnnemu.client import Backend, htp_device_config
    from qnnemu.client.cabi import QnnCallError, ffi as cffi
    keep: list = []
    configs = [platform_config(cffi, keep, **DESCRIPTIONS[name])]
    if soc_config is not None:
        configs.insert(0, htp_device_config("SOC", socModel=soc_config))
    try:
        be = Backend(library, log_level=None, device_configs=configs)
    except QnnCallError as e:
        return {"code": e.code}
    with be:
        out = {"code": 0, "reported": reported(be)}
        ctx = be.context()
        g = ctx.graph("g")
        x = g.input("x", (1, 64))
        w = g.static("w", np.full((1, 64), 1e-4, np.float32))
        g.node("ElementWiseAdd", [x, w], [("y", (1, 64), np.float32)], app_read=True)
        g.finalize()
        out["y"] = float(g.execute({"x": np.ones((1, 64), np.float32)})["y"][0, 0])
        out["float16_math"] = out["y"] != float(np.float32(1) + np.float32(1e-4))
    return out


def test_description_is_reported_as_given():
    """deviceGetInfo returns the description, not the emulated device (which stays SM8350)."""
    got = probe(str(our_library()), "sm8650")
    assert got["code"] == 0, f"deviceCreate with a description: {got}"
    assert got["reported"] == [dict(id=0, type=0, cores=1, ext_type=0, vtcm=8, soc=SM8650, signed=True, dlbc=True,
                                    arch=75)], f"deviceGetInfo reports the description: {got['reported']}"
    assert not got["float16_math"], "the graph is prepared for the default device (v68, float32), not v75"
    odd = probe(str(our_library()), "unknown-soc-and-arch")
    assert odd["reported"][0]["soc"] == 9999 and odd["reported"][0]["arch"] == 99, \
        f"a socModel / arch no SoC has is reported as given: {odd}"
    assert probe(str(our_library()), "two-devices")["reported"][0]["soc"] == SM8750, "the first device is kept"


def test_soc_config_chooses_the_prepared_device():
    """SOC SM8550 + a description of SM8650: reported SM8650, prepared for SM8550 (float16 math)."""
    got = probe(str(our_library()), "sm8650-2mb", soc_config=SM8550)
    assert got["reported"][0]["soc"] == SM8650 and got["reported"][0]["vtcm"] == 2, f"reported as given: {got}"
    assert got["float16_math"], f"prepared for the SOC config's SM8550 (v73: float16 math): {got}"


@pytest.fixture
def rec(qnn_abi):
    r = abi.LogRecorder()
    code, log = abi.create("logCreate", r.callback, Q.QNN_LOG_LEVEL_DEBUG)
    assert code == Q.QNN_SUCCESS, "setup: logCreate"
    r.log, r.keep, r.devices = log, [], []
    yield r
    for dev in r.devices:
        assert abi.call("deviceFree", vp(dev)) == Q.QNN_SUCCESS, "teardown: deviceFree"
    assert abi.call("logFree", vp(log)) == Q.QNN_SUCCESS, "teardown: logFree"


def create(r, *configs) -> int:
    arr = ffi.new("QnnDevice_Config_t *[]", [*configs, ffi.NULL])
    r.keep.append(arr)
    code, dev = abi.create("deviceCreate", vp(r.log), arr)
    if code == Q.QNN_SUCCESS:
        r.devices.append(dev)
    return code


def test_rule_device_platform_info_empty(rec):
    code = create(rec, platform_config(ffi, rec.keep, **DESCRIPTIONS["no-device"]))
    rec.assert_rule(code, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "QNNEMU-device-platform-info-empty", "deviceCreate",
                    "config[0].hardwareInfo.v1.numHwDevices")


def test_rule_device_platform_info_cores(rec):
    code = create(rec, platform_config(ffi, rec.keep, **DESCRIPTIONS["two-cores"]))
    msg = rec.assert_rule(code, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "QNNEMU-device-platform-info-cores",
                          "deviceCreate", "config[0].hardwareInfo.v1.hwDevices[0].v1.numCores")
    assert "2 NSP core" in msg and "1 per device" in msg, f"names the count and the device's: {msg}"


def test_null_hardware_info_is_the_default_platform(rec):
    cfg = ffi.new("QnnDevice_Config_t *")
    cfg.option, cfg.hardwareInfo = Q.QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO, ffi.NULL
    rec.keep.append(cfg)
    assert create(rec, cfg) == Q.QNN_SUCCESS, f"a NULL description is accepted (vendor): {rec.errors()}"


@pytest.mark.parametrize("signed", [True, False])
def test_signed_pd_is_logged_at_device_create(rec, signed):
    cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
    cc.option = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD
    cc.useSignedProcessDomain.useSignedProcessDomain, cc.useSignedProcessDomain.deviceId = signed, 0
    cfg = ffi.new("QnnDevice_Config_t *")
    cfg.option, cfg.customConfig = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, cc
    rec.keep += [cc, cfg]
    assert create(rec, cfg) == Q.QNN_SUCCESS, f"deviceCreate with SIGNEDPD: {rec.errors()}"
    want = "signed process domain (SIGNEDPD)" if signed else "unsigned process domain"
    assert any("deviceCreate: emulated HTP" in m and want in m for m in rec.messages()), \
        f"deviceCreate logs the {want}: {rec.messages()}"
    from qnnemu.core.handles import HANDLES
    assert HANDLES.lookup(rec.devices[-1]).model.use_signed_pd is signed, "the device records the request"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_device_variants as t
out = {name: t.probe(sys.argv[2], name) for name in t.DESCRIPTIONS}
out["soc+description"] = t.probe(sys.argv[2], "sm8650-2mb", soc_config=t.SM8550)
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_platform_description(tmp_path):
    """Every description through both libraries: the same codes and the same deviceGetInfo
    contents, and the graph prepared for the same device (float16 math or not)."""
    vendor = vendor_probe(_VENDOR, tmp_path)
    ours = {name: probe(str(our_library()), name) for name in DESCRIPTIONS}
    ours["soc+description"] = probe(str(our_library()), "sm8650-2mb", soc_config=SM8550)
    for name, v in vendor.items():
        o = ours[name]
        assert o["code"] == v["code"], f"{name}: deviceCreate code ours {o['code']} vendor {v['code']}"
        if v["code"]:
            continue
        assert o["reported"] == v["reported"], f"{name}: deviceGetInfo ours {o['reported']} vendor {v['reported']}"
        assert o["float16_math"] == v["float16_math"], \
            f"{name}: prepared for the same device (float16 math ours {o['float16_math']}, vendor {v['float16_math']})"
