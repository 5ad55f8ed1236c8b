"""QnnHtpDevice_CustomConfig_t in both ABI layouts (qnnemu/abi/device_config.py,
docs/abi-compat.md): QNN 2.43 headers put the union at offset 4 (12 bytes), QNN 2.50 headers at
offset 8 (24 bytes, ONNX Runtime's QNN EP writes ``00000000 00000000 39000000 ...`` for SoC 57).

- the detection rule on byte images (which layout, why, and that nothing past byte 12 is read
  before the 2.50 layout is decided), plus a hypothesis property over valid configs of both
  layouts;
- the same bytes through deviceCreate / deviceSetConfig / deviceGetInfo of libQnnHtpEmu.so,
  at 8-aligned and 4-aligned addresses, with the DEBUG message naming the layout;
- the new 2.50 options and SECUREPD: refused with the vendor's codes (rules
  QNNEMU-device-option-unsupported, QNNEMU-device-app-uid), pinned against the vendor's
  libQnnHtp.so (skipped when onnxruntime_qnn is absent).
"""
from __future__ import annotations

import struct

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from hypothesis import given, strategies as st
from vendor import vendor_library

from qnnemu.abi import device_config as dc
from qnnemu.core.device import VENDOR_SOC_MODELS, Device, soc_rank
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import soc as socs

SOC, ARCH, SIGNEDPD, SECUREPD = dc.SOC, dc.ARCH, dc.SIGNEDPD, dc.SECUREPD
SM8550, SM8650, SA8295 = Q.QNN_SOC_MODEL_SM8550, Q.QNN_SOC_MODEL_SM8650, Q.QNN_SOC_MODEL_SA8295
V73, V75 = Q.QNN_HTP_DEVICE_ARCH_V73, Q.QNN_HTP_DEVICE_ARCH_V75


def old(option: int, *union_words: int) -> bytes:
    """A 2.43 image: option at 0, the union (two words) at 4; 12 bytes."""
    words = list(union_words) + [0] * (2 - len(union_words))
    return struct.pack("<3I", option, *words)


def new(option: int, *union_words: int, padding: int = 0) -> bytes:
    """A 2.50 image: option at 0, padding at 4, the union (four words) at 8; 24 bytes."""
    words = list(union_words) + [0] * (4 - len(union_words))
    return struct.pack("<6I", option, padding, *words)


# ------------------------------------------------------------------------ the rule, on images
class Memory:
    """Byte images at fake addresses, followed by 0xAA bytes (what lies after a client's struct);
    records the furthest byte read of each."""

    def __init__(self, *images: tuple[bytes, int]):
        self.images = {}
        self.furthest: dict[int, int] = {}
        address = 0x10000
        for image, misalign in images:
            self.images[address + misalign] = image + b"\xaa" * (32 - len(image))
            address += 0x100
        self.items = list(enumerate(self.images))

    def read(self, address: int, offset: int, size: int) -> bytes:
        self.furthest[address] = max(self.furthest.get(address, 0), offset + size)
        return self.images[address][offset:offset + size]

    def decode(self, earlier=None) -> list[dc.HtpDeviceOption]:
        return dc.read_htp_device_configs(self.items, self.read, soc_rank, earlier)


def one(image: bytes, misalign: int = 0, earlier=None) -> tuple[dc.HtpDeviceOption, int]:
    m = Memory((image, misalign))
    (o,) = m.decode(earlier)
    return o, m.furthest[next(iter(m.images))]


CASES = [
    # (id, image, misalign, layout, fields)
    ("ort-soc57", bytes.fromhex("000000000000000039000000") + bytes(12), 0, "2.50", {"soc_model": 57}),
    ("soc-2.43", old(SOC, SM8550), 0, "2.43", {"soc_model": SM8550}),
    ("soc-2.50", new(SOC, SM8550), 0, "2.50", {"soc_model": SM8550}),
    ("soc-2.50-garbage-padding", new(SOC, SM8650, padding=0xDEADBEEF), 0, "2.50", {"soc_model": SM8650}),
    ("soc-2.43-garbage-tail", old(SOC, SM8650, 0xDEADBEEF), 0, "2.43", {"soc_model": SM8650}),
    ("soc-2.43-misaligned", old(SOC, SM8550), 4, "2.43", {"soc_model": SM8550}),
    # SDM855 (12) is only tolerated, but outranks the 0 at offset 8; SM8550 outranks tolerated 12
    ("soc-2.43-tolerated", old(SOC, Q.QNN_SOC_MODEL_SDM855), 0, "2.43", {"soc_model": 12}),
    ("soc-2.50-modelled-beats-tolerated", new(SOC, SM8550, padding=12), 0, "2.50", {"soc_model": SM8550}),
    ("arch-2.43", old(ARCH, 0, V73), 0, "2.43", {"device_id": 0, "arch": V73}),
    ("arch-2.43-dev1", old(ARCH, 1, V75), 0, "2.43", {"device_id": 1, "arch": V75}),
    ("arch-2.50", new(ARCH, 0, V73), 0, "2.50", {"device_id": 0, "arch": V73}),
    ("arch-2.50-dev1", new(ARCH, 1, V75), 0, "2.50", {"device_id": 1, "arch": V75}),
    ("arch-2.43-misaligned", old(ARCH, 0, V73), 4, "2.43", {"device_id": 0, "arch": V73}),
    ("signedpd-2.50-default", new(SIGNEDPD, 0, 1), 0, "2.50", {"device_id": 0, "enabled": True}),
    ("signedpd-2.43-misaligned", old(SIGNEDPD, 0, 1), 4, "2.43", {"device_id": 0, "enabled": True}),
    ("async-2.50", new(dc.ASYNC_EXECUTE, 0, 1), 0, "2.50", {"device_id": 0}),
    ("app-uid-2.50", new(dc.APP_UID, 1234), 0, "2.50", {}),
]


@pytest.mark.parametrize("image,misalign,layout,fields", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_layout_of_one_config(image, misalign, layout, fields):
    o, furthest = one(image, misalign)
    assert o.layout == layout, f"layout {o.layout}, expected {layout} ({o.reason})"
    for name, value in fields.items():
        assert getattr(o, name) == value, f"{name}: {getattr(o, name)}, expected {value}"
    limit = 12 if layout == "2.43" else 16
    assert furthest <= limit, f"read {furthest} bytes of a {layout} config (at most {limit})"


def test_signedpd_takes_the_layout_the_list_showed():
    """SIGNEDPD's bytes cannot tell; a SOC config of the same list can, before or after it."""
    m = Memory((old(SIGNEDPD, 0, 1), 0), (old(SOC, SM8550), 0))
    signed, soc = m.decode()
    assert (signed.layout, soc.layout) == ("2.43", "2.43"), "the list's SOC config shows 2.43"
    assert (signed.device_id, signed.enabled) == (0, True), "the 2.43 PD config read at offset 4"
    assert not signed.shown and soc.shown, "only the SOC config showed its layout"
    assert "config[1]" in signed.reason, f"the reason names the config that showed it: {signed.reason}"
    assert max(m.furthest.values()) <= 12, "no 2.43 config is read past byte 12"
    assert dc.shown_layout([signed, soc], None) == "2.43", "the list's layout is recorded for the device"


def test_signedpd_takes_the_devices_earlier_layout():
    o, furthest = one(old(SIGNEDPD, 0, 1), earlier="2.43")
    assert (o.layout, o.enabled, furthest) == ("2.43", True, 12), f"the device's earlier layout: {o}"
    assert dc.shown_layout([o], "2.43") == "2.43", "a config that shows nothing keeps the device's layout"


@pytest.mark.parametrize("image,devices,layout,device_id", [
    (old(SIGNEDPD, 0, 1), 1, "2.43", 0),   # 2.50 would read deviceId 1: no such device
    (new(SIGNEDPD, 0, 1), 1, "2.50", 0),   # 2.43 would read flag 0 on device 0: both exist -> 2.50
    (old(SIGNEDPD, 0, 1), 2, "2.50", 1),   # two devices: both readings exist -> 2.50
    (old(SIGNEDPD, 5, 9), 1, "2.50", 9),   # neither exists -> 2.50 (QNNEMU-device-id-ignored warns)
], ids=["2.43-one-device", "2.50-one-device", "two-devices", "neither"])
def test_lone_pd_config_takes_the_layout_whose_device_exists(image, devices, layout, device_id):
    m = Memory((image, 0))
    asked = []
    (o,) = dc.read_htp_device_configs(m.items, m.read, soc_rank, None,
                                      lambda soc, arch: asked.append((soc, arch)) or devices)
    assert asked == [(None, None)], f"the device count is asked for the list's SoC/arch: {asked}"
    assert (o.layout, o.device_id, o.shown) == (layout, device_id, False), f"{image.hex()}: {o}"
    assert m.furthest[next(iter(m.images))] <= (12 if layout == "2.43" else 16), "reads stay in the struct"


def test_ambiguous_soc_words_take_the_default_layout():
    """Both words are SoC models (e.g. garbage padding) -> 2.50, the headers' layout; neither ->
    2.50 too, and deviceCreate refuses the model with both words in the message."""
    o, _ = one(new(SOC, SM8650, padding=SM8550))
    assert (o.layout, o.soc_model, o.shown) == ("2.50", SM8650, False), f"both SoC models: {o}"
    o, _ = one(new(SOC, 9999, padding=7777))
    assert (o.layout, o.soc_model, o.other_soc_word) == ("2.50", 9999, 7777), f"no SoC model: {o}"


known_socs = st.sampled_from(sorted(socs.SOCS))
archs = st.sampled_from(sorted(v for v in Q.enum("QNN_HTP_DEVICE_ARCH_") if dc.MIN_ARCH <= v < 2 ** 31 - 1))
device_ids = st.integers(0, 3)
garbage = st.integers(0, 2 ** 32 - 1)


@given(st.data())
def test_valid_configs_of_either_layout_decode_to_what_was_written(data):
    """Any valid SOC or ARCH config, in either layout, with any padding/tail bytes and any 4- or
    8-aligned address, decodes to the values written; a 2.43 config is never read past byte 12."""
    option = data.draw(st.sampled_from([SOC, ARCH]))
    layout = data.draw(st.sampled_from(["2.43", "2.50"]))
    if option == SOC:
        soc = data.draw(known_socs)
        junk = data.draw(garbage.filter(lambda v: soc_rank(v) < 2))  # no modelled SoC model
        image = old(SOC, soc, junk) if layout == "2.43" else new(SOC, soc, padding=junk)
        want = {"soc_model": soc}
    else:
        dev, arch = data.draw(device_ids), data.draw(archs)
        image = old(ARCH, dev, arch) if layout == "2.43" else new(ARCH, dev, arch, padding=data.draw(garbage))
        want = {"device_id": dev, "arch": arch}
    misalign = 0 if layout == "2.50" else data.draw(st.sampled_from([0, 4]))
    o, furthest = one(image, misalign)
    assert o.layout == layout, f"{image.hex()}: read as {o.layout} ({o.reason})"
    assert {k: getattr(o, k) for k in want} == want, f"{image.hex()}: {o}"
    assert furthest <= (12 if layout == "2.43" else 16), f"{image.hex()}: read {furthest} bytes"


# ------------------------------------------------------------------- through libQnnHtpEmu.so
class Raw:
    """NULL-terminated QnnDevice_Config_t lists of raw custom-config images (``ffi`` of the
    library called), each image at an 8-aligned address + ``misalign``."""

    def __init__(self, the_ffi):
        self.ffi = the_ffi
        self.keep: list = []

    def configs(self, *images, misalign: int = 0):
        f = self.ffi
        arr = f.new("QnnDevice_Config_t *[]", len(images) + 1)
        for k, image in enumerate(images):
            buf = f.new("uint64_t[]", 8)  # 64 bytes, 8-aligned
            f.memmove(f.cast("char *", buf) + misalign, image, len(image))
            c = f.new("QnnDevice_Config_t *")
            c.option = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM
            c.customConfig = f.cast("char *", buf) + misalign
            self.keep += [buf, c]
            arr[k] = c
        self.keep.append(arr)
        return arr


@pytest.fixture
def ours(qnn_abi):
    rec = abi.LogRecorder()
    code, log = abi.create("logCreate", rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
    assert code == Q.QNN_SUCCESS, "setup: logCreate"
    rec.raw, rec.log, rec.devices = Raw(ffi), log, []
    yield rec
    for dev in rec.devices:
        abi.call("deviceFree", vp(dev))
    assert abi.call("logFree", vp(log)) == Q.QNN_SUCCESS, "teardown: logFree"


def _create(rec, *images, misalign=0) -> tuple[int, int]:
    code, dev = abi.create("deviceCreate", vp(rec.log), rec.raw.configs(*images, misalign=misalign))
    if code == Q.QNN_SUCCESS:
        rec.devices.append(dev)
    return code, dev


def _reported(dev: int) -> tuple[int, int]:
    """(socModel, arch) that deviceGetInfo reports for the device."""
    out = ffi.new("const QnnDevice_PlatformInfo_t **")
    assert abi.call("deviceGetInfo", vp(dev), out) == Q.QNN_SUCCESS, "deviceGetInfo"
    ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", out[0].v1.hwDevices[0].v1.deviceInfoExtension)
    got = int(ext.onChipDevice.socModel), int(ext.onChipDevice.arch)
    assert abi.call("deviceFreePlatformInfo", NULL, out[0]) == Q.QNN_SUCCESS, "deviceFreePlatformInfo"
    return got


# a 2.50 struct is always 8-aligned; a 2.43 one is 4-aligned, so at either kind of address
PLACES = [("2.43", 0), ("2.43", 4), ("2.50", 0)]


@pytest.mark.parametrize("layout,misalign", PLACES, ids=[f"{lay}-{m}" for lay, m in PLACES])
@pytest.mark.parametrize("soc", [SM8550, SM8650, SA8295])
def test_soc_config_of_either_layout_selects_the_soc(ours, soc, layout, misalign):
    code, dev = _create(ours, old(SOC, soc) if layout == "2.43" else new(SOC, soc), misalign=misalign)
    assert code == Q.QNN_SUCCESS, f"deviceCreate: {ours.errors()}"
    row = socs.SOCS[soc]
    assert _reported(dev) == (soc, row.arch), f"deviceGetInfo reports {row.name}"
    debug = [m for m in ours.messages(Q.QNN_LOG_LEVEL_DEBUG) if "SOC read in the QNN" in m]
    assert debug and f"QNN {layout} layout" in debug[-1] and "config[0].customConfig" in debug[-1], (
        f"the DEBUG log names the detected layout: {debug}")
    assert HANDLES.lookup(dev).config_layout == layout, "the device records the layout its configs showed"


@pytest.mark.parametrize("layout", ["2.43", "2.50"])
def test_arch_and_signedpd_configs_of_either_layout(ours, layout):
    """ARCH v75 selects its reference SoC; SIGNEDPD (same list) is read in the ARCH's layout."""
    make = old if layout == "2.43" else new
    code, dev = _create(ours, make(SIGNEDPD, 0, 1), make(ARCH, 0, V75))
    assert code == Q.QNN_SUCCESS, f"deviceCreate: {ours.errors()}"
    assert _reported(dev)[1] == V75, "the ARCH config selects v75"
    device: Device = HANDLES.lookup(dev)
    assert device.model.use_signed_pd, "SIGNEDPD read from the right offset: the signed PD is recorded"
    assert device.config_layout == layout, "the device records the layout"


@pytest.mark.parametrize("layout", ["2.43", "2.50"])
def test_lone_signedpd_of_either_layout(ours, layout):
    """deviceId 0, flag true: a 2.43 image read as 2.50 would be deviceId 1, absent on SM8550."""
    code, dev = _create(ours, (old if layout == "2.43" else new)(SIGNEDPD, 0, 1))
    assert code == Q.QNN_SUCCESS, f"deviceCreate: {ours.errors()}"
    assert HANDLES.lookup(dev).model.use_signed_pd, f"the {layout} SIGNEDPD config is read at its offsets"
    assert HANDLES.lookup(dev).config_layout is None, "a guessed layout is not recorded for the device"


def test_set_config_reads_a_lone_signedpd_in_the_devices_layout(ours):
    code, dev = _create(ours, old(SOC, SA8295))
    assert code == Q.QNN_SUCCESS, f"deviceCreate: {ours.errors()}"
    ours.clear()
    # deviceId 0, flag 1 at offset 8 (2.43); SA8295 has two devices, so only the device's layout tells
    code = abi.call("deviceSetConfig", vp(dev), ours.raw.configs(old(SIGNEDPD, 0, 1)))
    assert code == Q.QNN_SUCCESS, f"deviceSetConfig: {ours.errors()}"
    assert HANDLES.lookup(dev).model.use_signed_pd, "the lone SIGNEDPD is read in the device's 2.43 layout"
    assert any("the device's earlier configs" in m for m in ours.messages(Q.QNN_LOG_LEVEL_DEBUG)), (
        "the DEBUG log says why that layout was taken")


def test_soc_refusal_names_both_words(ours):
    code, _ = _create(ours, new(SOC, 9999, padding=7777))
    msg = ours.assert_rule(code, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "QNNEMU-device-soc", "deviceCreate",
                           "config[0].customConfig.socModel")
    assert "9999" in msg and "7777" in msg, f"both readings are named: {msg}"


# ------------------------------------------------------------------ new 2.50 options, refused
UNSUPPORTED = {"ASYNC_EXECUTE": new(dc.ASYNC_EXECUTE, 0, 1),
               "DYNAMIC_PARTITIONING": new(dc.DYNAMIC_PARTITIONING, 0, 1),
               "HTP_EXTENSION": new(dc.HTP_EXTENSION)}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_rule_device_option_unsupported(ours, name):
    code, _ = _create(ours, new(SOC, SM8650), UNSUPPORTED[name])
    msg = ours.assert_rule(code, Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "QNNEMU-device-option-unsupported",
                           "deviceCreate", "config[1].customConfig.option")
    assert name in msg, f"the message names the option: {msg}"


def test_rule_device_app_uid(ours):
    code, _ = _create(ours, new(dc.APP_UID, 1234))
    ours.assert_rule(code, Q.QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE, "QNNEMU-device-app-uid", "deviceCreate",
                     "config[0].customConfig.appUid")


# ------------------------------------------------------- what the vendor tolerates, tolerated
@pytest.mark.parametrize("func", ["deviceCreate", "deviceSetConfig"])
def test_unknown_arch_is_ignored(ours, func):
    """The vendor's library logs "Unsupported HTP Arch" and succeeds: the arch is ignored
    (warning QNNEMU-device-arch-ignored)."""
    code, dev = _create(ours, new(SOC, SM8650))
    assert code == Q.QNN_SUCCESS, f"setup: {ours.errors()}"
    ours.clear()
    if func == "deviceCreate":
        code, dev = _create(ours, new(ARCH, 0, 99))
    else:
        code = abi.call("deviceSetConfig", vp(dev), ours.raw.configs(new(ARCH, 0, 99)))
    assert code == Q.QNN_SUCCESS, f"{func}: accepted, as the vendor's library does: {ours.errors()}"
    [msg] = [m for m in ours.messages() if "[QNNEMU-device-arch-ignored]" in m]
    want = socs.DEFAULT_SOC if func == "deviceCreate" else SM8650  # deviceCreate: the default device
    assert _reported(dev)[0] == want and "99" in msg, f"the device stays {want}: {msg}"


def test_unmodelled_soc_is_ignored_in_the_243_layout(ours):
    """SDM855 (12, no HTP row) is accepted by the vendor's library: ignored (warning
    QNNEMU-device-soc-unmodelled), the ARCH of the same list then chooses the device; in the 2.43
    layout too (12 outranks the 0 at offset 8)."""
    code, dev = _create(ours, old(SOC, Q.QNN_SOC_MODEL_SDM855), old(ARCH, 0, V75))
    assert code == Q.QNN_SUCCESS, f"accepted, as the vendor's library does: {ours.errors()}"
    [msg] = [m for m in ours.messages() if "[QNNEMU-device-soc-unmodelled]" in m]
    assert "SDM855" in msg, f"the message names the model: {msg}"
    assert _reported(dev) == (socs.soc_for_arch(V75).soc_model, V75), "the ARCH config chooses the device"


# -------------------------------------------------------------------------- the vendor's codes
HTP = vendor_library("libQnnHtp.so")

# image -> code of the vendor's libQnnHtp.so (QNN 2.51, measured) and of qnnemu
VENDOR_CASES = {
    "soc-2.50": (new(SOC, SM8650), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    # the vendor reads only the 2.50 layout: offset 8 holds 0, "unknown custom config socModel 0"
    "soc-2.43": (old(SOC, SM8650), Q.QNN_DEVICE_ERROR_INVALID_CONFIG, Q.QNN_SUCCESS),
    "arch-2.50": (new(ARCH, 0, V73), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "signedpd-2.50": (new(SIGNEDPD, 0, 1), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "arch-99": (new(ARCH, 0, 99), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "arch-dev5": (new(ARCH, 5, V73), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "signedpd-dev7": (new(SIGNEDPD, 7, 1), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "soc-sdm855-unmodelled": (new(SOC, Q.QNN_SOC_MODEL_SDM855), Q.QNN_SUCCESS, Q.QNN_SUCCESS),
    "soc-44-refused": (new(SOC, 44), Q.QNN_DEVICE_ERROR_INVALID_CONFIG, Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "soc-124-refused": (new(SOC, 124), Q.QNN_DEVICE_ERROR_INVALID_CONFIG, Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "securepd": (new(SECUREPD, 0, 1), Q.QNN_DEVICE_ERROR_INVALID_CONFIG, Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "async-execute": (UNSUPPORTED["ASYNC_EXECUTE"], Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                      Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "dynamic-partitioning": (UNSUPPORTED["DYNAMIC_PARTITIONING"], Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                             Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "htp-extension": (UNSUPPORTED["HTP_EXTENSION"], Q.QNN_DEVICE_ERROR_INVALID_CONFIG,
                      Q.QNN_DEVICE_ERROR_INVALID_CONFIG),
    "app-uid": (new(dc.APP_UID, 1234), Q.QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE,
                Q.QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE),
}


# The vendor's library keeps the last SoC a deviceCreate configured for the whole process (a
# later session without soc_model computes as that SoC, or fails for a pre-HTP one), so it is
# probed in a subprocess of its own.
_VENDOR_PROBE = """
import json, sys
from qnnemu.client import Backend, ffi
be = Backend(sys.argv[1], log_level=None, device=False)
codes = []
for image in json.load(sys.stdin):
    buf = ffi.new("uint64_t[]", 8)
    data = bytes.fromhex(image)
    ffi.memmove(buf, data, len(data))
    c = ffi.new("QnnDevice_Config_t *")
    c.option = 0  # QNN_DEVICE_CONFIG_OPTION_CUSTOM
    c.customConfig = buf
    out = ffi.new("Qnn_DeviceHandle_t *")
    codes.append(int(be.fn.deviceCreate(ffi.NULL, ffi.new("QnnDevice_Config_t *[]", [c, ffi.NULL]), out)))
    if codes[-1] == 0:
        be.fn.deviceFree(out[0])
be.free()
print(json.dumps(codes))
"""
SOC_SWEEP = [*range(131), 200, 1000, 65535]


@pytest.fixture(scope="module")
def vendor_codes() -> dict[str, int]:
    """deviceCreate codes of the vendor's library for VENDOR_CASES and the SoC sweep."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from vendor import vendor_env
    if HTP is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    names = sorted(VENDOR_CASES) + [f"soc{m}" for m in SOC_SWEEP]
    images = [VENDOR_CASES[n][0].hex() for n in sorted(VENDOR_CASES)] + [new(SOC, m).hex() for m in SOC_SWEEP]
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _VENDOR_PROBE, str(HTP)], input=json.dumps(images),
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"vendor probe failed: {proc.stderr[-800:]}"
    return dict(zip(names, json.loads(proc.stdout.strip().splitlines()[-1])))


def test_vendor_soc_models_table_is_what_the_vendor_accepts(vendor_codes):
    """VENDOR_SOC_MODELS (qnnemu/core/device.py) against the vendor, over 0..130 and a few more."""
    accepted = {m for m in SOC_SWEEP if vendor_codes[f"soc{m}"] == Q.QNN_SUCCESS}
    assert accepted == set(VENDOR_SOC_MODELS), (
        f"the vendor accepts {sorted(accepted - VENDOR_SOC_MODELS)} beyond the table and refuses "
        f"{sorted(VENDOR_SOC_MODELS - accepted)} of it")


@pytest.mark.parametrize("case", sorted(VENDOR_CASES))
def test_codes_match_the_vendor(vendor_codes, ours, case):
    image, vendor_code, our_code = VENDOR_CASES[case]
    assert vendor_codes[case] == vendor_code, (
        f"{case}: the vendor's deviceCreate returned {vendor_codes[case]}, measured {vendor_code}")
    assert _create(ours, image)[0] == our_code, f"{case}: qnnemu returns {our_code} ({ours.errors()})"


# ------------------------------------------------------------------- ONNX Runtime's QNN EP
def test_onnxruntime_ep_soc_and_arch_reach_the_device(qnn_abi, tmp_path):
    """The EP (built with new headers) writes its soc_model/htp_arch options in the 2.50 layout."""
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    from onnx import TensorProto, helper

    import qnnemu.onnxruntime as qort
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before = set(map(id, HANDLES.live(Device)))
    sess = qort.session(model, provider_options={"soc_model": SM8650, "htp_arch": V75})
    devices = [d for d in HANDLES.live(Device) if id(d) not in before]
    assert len(devices) == 1, f"the EP created one device: {devices}"
    assert (devices[0].model.soc_model, devices[0].config_layout) == (SM8650, "2.50"), (
        f"SoC 57 read from the EP's 2.50 layout: {devices[0].model.name}, {devices[0].config_layout}")
    out = sess.run(None, {"x": np.array([[-1, 2, -3, 4]], np.float32)})[0]
    # SM8650 (v75) runs the float32 graph in float16 math: the output conversion sets the lowest
    # float32 mantissa bit, as the vendor's does (docs/numerics.md).
    assert np.allclose(out, [[0, 2, 0, 4]], rtol=1e-6, atol=0) and out[0, 1] != 2.0, \
        f"the session runs on the configured device, in float16 math: {out.tolist()}"
    del sess
