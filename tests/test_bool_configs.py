"""``bool`` members of the HTP custom configs (HTP/QnnHtpDevice*.h, QnnHtpGraph.h, QnnHtpContext.h)
read with C semantics: any non-zero byte is true.

A C client may store any byte in a ``bool`` (memset, a struct copied from other data, a
``char`` cast); cffi refuses to read bytes other than 0/1 as ``_Bool``, which used to end in
QNN_COMMON_ERROR_GENERAL (1100, an internal error) -- e.g. a SIGNEDPD byte of 2 in
deviceCreate.  The members are found from the headers' types, so every bool member of the three
custom-config unions is covered: a byte of 2 or 255 behaves exactly as 1 (same code, same rules,
the same recorded value True).
"""
from __future__ import annotations

import abi
import pytest
from abi import NULL, ffi, vp
from vendor import vendor_dir, vendor_library

from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

# config struct -> its option enum prefix
UNIONS = {
    "QnnHtpGraph_CustomConfig_t": "QNN_HTP_GRAPH_CONFIG_OPTION_",
    "QnnHtpContext_CustomConfig_t": "QNN_HTP_CONTEXT_CONFIG_OPTION_",
}
# bool members whose option name is not the member's name in capitals
OPTION_OF = {"foldReluActivationIntoConvOff": "FOLD_RELU_ACTIVATION_INTO_CONV_OFF",
             "shortDepthConvOnHmxOff": "SHORT_DEPTH_CONV_ON_HMX_OFF", "shareIOBuffer": "SHARE_IO_BUFFER",
             "fp16ClampOverflow": "FP16_CLAMP_OVERFLOW", "isPrepareOnly": "PREPARE_ONLY"}


def _snake(member: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c for c in member).upper()


def bool_members():
    for struct, prefix in UNIONS.items():
        options = {name: value for value, name in Q.enum(prefix).items()}
        for member, field in ffi.typeof(struct).fields:
            if field.type.cname != "_Bool":
                continue
            name = prefix + OPTION_OF.get(member, _snake(member))
            if name not in options:
                continue
            yield pytest.param(struct, member, name, options[name],
                               id=f"{struct.split('_')[0].removeprefix('QnnHtp')}.{member}")


def _create(struct: str, member: str, name: str, option: int, byte: int, session):
    """graphCreate/contextCreate with one custom config whose bool member's byte is ``byte``;
    (code, rules logged, the value recorded in the object's configs)."""
    be, ctx, rec, seq = session
    cc = ffi.new(f"{struct} *")
    cc.option = option
    ffi.cast("uint8_t *", cc)[ffi.offsetof(struct, member)] = byte
    rec.clear()
    if struct.startswith("QnnHtpGraph"):
        c = ffi.new("QnnGraph_Config_t *")
        c.option = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM
        c.customConfig = cc
        configs = ffi.new("QnnGraph_Config_t *[]", [c, NULL])
        seq.append(0)
        code, h = abi.create("graphCreate", vp(ctx), abi.cstr(f"bool{len(seq)}", seq),
                             ffi.cast("const QnnGraph_Config_t **", configs))
    else:
        c = ffi.new("QnnContext_Config_t *")
        c.option = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM
        c.customConfig = cc
        configs = ffi.new("QnnContext_Config_t *[]", [c, NULL])
        code, h = abi.create("contextCreate", vp(be), NULL, ffi.cast("const QnnContext_Config_t **", configs))
    obj = HANDLES.lookup(h) if h else None
    value = None
    if obj is not None:
        value = ((obj.configs.get("htp") or {}).get(name) or {}).get(member)
        if struct.startswith("QnnHtpContext"):
            abi.call("contextFree", vp(h), NULL)
    return code, sorted(rec.rules()), value


@pytest.fixture(scope="module")
def session():
    rec = abi.LogRecorder()
    _, log = abi.create("logCreate", rec.callback, Q.QNN_LOG_LEVEL_WARN)
    _, be = abi.create("backendCreate", vp(log), NULL)
    _, ctx = abi.create("contextCreate", vp(be), NULL, NULL)
    yield be, ctx, rec, []
    abi.call("contextFree", vp(ctx), NULL)
    abi.call("backendFree", vp(be))
    abi.call("logFree", vp(log))


@pytest.mark.parametrize("struct, member, name, option", list(bool_members()))
def test_any_nonzero_bool_byte_is_true(session, struct, member, name, option):
    one = _create(struct, member, name, option, 1, session)
    for byte in (2, 255):
        got = _create(struct, member, name, option, byte, session)
        assert got[0] != Q.QNN_COMMON_ERROR_GENERAL, f"{name}.{member} = {byte}: not an internal error ({got})"
        assert got[:2] == one[:2], f"{name}.{member}: byte {byte} gives (code, rules) {got[:2]}, byte 1 gives {one[:2]}"
        assert got[2] == one[2] and (one[2] is None or one[2] is True), \
            f"{name}.{member}: byte {byte} is recorded as {got[2]!r}, byte 1 as {one[2]!r} (True)"


def test_bool_members_were_found():
    found = {p.values[1] for p in bool_members()}
    assert {"foldReluActivationIntoConvOff", "weightsPacking", "weightSharingEnabled"} <= found, \
        f"the bool members of the graph and context configs are audited: {sorted(found)}"


def _device_with_signed_pd(lib, byte: int) -> int:
    cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
    cc.option = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD
    off = ffi.offsetof("QnnHtpDevice_CustomConfig_t", "useSignedProcessDomain") + \
        ffi.offsetof("QnnHtpDevice_UseSignedProcessDomain_t", "useSignedProcessDomain")
    ffi.cast("uint8_t *", cc)[off] = byte
    c = ffi.new("QnnDevice_Config_t *")
    c.option = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM
    c.customConfig = cc
    configs = ffi.new("QnnDevice_Config_t *[]", [c, NULL])
    code, dev = lib.create("deviceCreate", NULL, ffi.cast("const QnnDevice_Config_t **", configs))
    if dev:
        if lib.ours:
            assert HANDLES.lookup(dev).model.use_signed_pd is (byte != 0), \
                f"SIGNEDPD byte {byte}: the signed PD is requested exactly when the byte is non-zero"
        lib.call("deviceFree", vp(dev))
    return code


@pytest.mark.parametrize("byte", [0, 1, 2, 255])
def test_signed_pd_bool_byte(byte):
    """The issue's case: a SIGNEDPD bool byte of 2 made deviceCreate return 1100."""
    assert _device_with_signed_pd(abi.library(None), byte) == Q.QNN_SUCCESS, f"SIGNEDPD byte {byte} is accepted"


@pytest.mark.skipif(vendor_dir() is None, reason="needs onnxruntime_qnn (the vendor's libQnnHtp.so)")
def test_vendor_accepts_any_signed_pd_byte():
    codes = {b: _device_with_signed_pd(abi.library(vendor_library()), b) for b in (0, 1, 2, 255)}
    assert set(codes.values()) == {Q.QNN_SUCCESS}, f"the vendor's deviceCreate accepts every SIGNEDPD byte: {codes}"
