"""Every handle argument of every QnnInterface.h entry is checked (QnnCommon.h Qnn_Handle_t).

The entries and their handle parameters come from the headers' function-pointer types (the
table libQnnHtpEmu.so is built from), so an entry added later is audited without being listed
here.  Each handle parameter in turn gets a value that is no handle of the backend, the other
handle parameters get live handles of their kinds, pointers get zeroed buffers (empty config
lists, empty names), everything else is zero: the entry must refuse with a rule naming the
function, that parameter and its value.  Exceptions are listed with the vendor
behaviour that decides them.  ``deviceGetPlatformInfo`` / ``deviceFreePlatformInfo`` (the
logger) and the op-package and execution-environment entries (the backend/graph) were the
unchecked ones; their codes are pinned against the vendor's library.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import abi
import pytest
from abi import NULL, ffi, vp
from vendor import vendor_dir, vendor_library

from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "csrc"))
from build_backend import interface_entries  # noqa: E402

GARBAGE = 0xDEAD0010
HANDLE_PARAM = re.compile(r"^(?:const )?(Qnn_(?:Log|Backend|Device|Context|Graph|Profile|Signal)Handle_t)\s+(\w+)$")

# (entry, parameter) -> why it is not refused as a handle (the vendor's behaviour decides).
NOT_CHECKED = {
    ("graphCreateSubgraph", "graphHandle"): "the vendor answers NOT_SUPPORTED (1000) whatever the handle",
}
# Entries cffi's ABI mode cannot call (a struct with anonymous unions passed by value); their
# handle arguments are checked (abi/section_api.py) after that struct.
NOT_CALLABLE = {"contextGetBinarySectionUpdate": "takes QnnContext_Buffer_t by value",
                "contextFreeBinarySectionUpdate": "takes QnnContext_BinarySectionUpdate_t by value"}


def handle_parameters():
    for name, _ftype, sig in interface_entries():
        params = [p.strip() for p in sig[sig.index("(") + 1:-1].split(",")]
        handles = [(i, m.group(1), m.group(2)) for i, p in enumerate(params) if (m := HANDLE_PARAM.match(p))]
        for index, _htype, pname in handles:
            yield pytest.param(name, params, index, pname, id=f"{name}.{pname}")


@pytest.fixture(scope="module")
def live():
    """One live handle of each kind (type name -> value)."""
    rec = abi.LogRecorder()
    _, log = abi.create("logCreate", rec.callback, Q.QNN_LOG_LEVEL_WARN)
    _, be = abi.create("backendCreate", vp(log), NULL)
    _, dev = abi.create("deviceCreate", vp(log), NULL)
    _, ctx = abi.create("contextCreate", vp(be), vp(dev), NULL)
    keep: list = []
    _, graph = abi.create("graphCreate", vp(ctx), abi.cstr("audit", keep), NULL)
    x = abi.tensor("x", [1, 4], type_=Q.QNN_TENSOR_TYPE_APP_WRITE)
    y = abi.tensor("y", [1, 4], type_=Q.QNN_TENSOR_TYPE_APP_READ)
    for t in (x, y):
        assert abi.call("tensorCreateGraphTensor", vp(graph), t.ptr) == Q.QNN_SUCCESS, "tensorCreateGraphTensor"
    assert abi.call("graphAddNode", vp(graph), abi.op_config("relu", "Relu", [x], [y])) == Q.QNN_SUCCESS, "graphAddNode"
    assert abi.call("graphFinalize", vp(graph), NULL, NULL) == Q.QNN_SUCCESS, "graphFinalize"   # executable
    prof = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(be), Q.QNN_PROFILE_LEVEL_BASIC, prof) == Q.QNN_SUCCESS, "profileCreate"
    sig = ffi.new("Qnn_SignalHandle_t *")
    assert abi.call("signalCreate", vp(be), NULL, sig) == Q.QNN_SUCCESS, "signalCreate"
    handles = {"Qnn_LogHandle_t": log, "Qnn_BackendHandle_t": be, "Qnn_DeviceHandle_t": dev,
               "Qnn_ContextHandle_t": ctx, "Qnn_GraphHandle_t": graph,
               "Qnn_ProfileHandle_t": abi.hval(prof[0]), "Qnn_SignalHandle_t": abi.hval(sig[0])}
    assert all(handles.values()), f"every kind of handle was created: {handles}"
    yield handles, rec
    abi.call("contextFree", vp(ctx), NULL)
    abi.call("deviceFree", vp(dev))
    abi.call("backendFree", vp(be))
    abi.call("logFree", vp(log))


# Non-handle arguments that must be valid for an entry to reach its handle checks.
VALID_ARGUMENTS = {"section": Q.QNN_CONTEXT_SECTION_UPDATABLE}
# (entry, parameter) -> the argument checked before it (valid only with a real context binary):
# the handle is checked, after that argument.
CHECKED_AFTER = {
    ("contextGetBinarySection", "profile"): "binaryBuffer",
    ("contextGetBinarySection", "signal"): "binaryBuffer",
    ("contextApplyBinarySection", "profile"): "binaryBuffer",
    ("contextApplyBinarySection", "signal"): "binaryBuffer",
}
# Parameters whose message names them with or without the "Handle" suffix of the header's name
# for that entry (profile_api / signal_api name every profile "profileHandle", every signal "signal").
SYNONYMS = {"profile": "profileHandle", "profileHandle": "profile", "signal": "signalHandle", "signalHandle": "signal"}


def _argument(param: str, live: dict, keep: list):
    m = HANDLE_PARAM.match(param)
    if m:
        return vp(live[m.group(1)])
    pname = param.rsplit(" ", 1)[-1].lstrip("*")
    if pname in VALID_ARGUMENTS:
        return VALID_ARGUMENTS[pname]
    ctype = param.rsplit(" ", 1)[0] if " " in param else param
    if ctype.endswith(("Fn_t", "Handle_t")) and "*" not in param:
        return NULL      # callbacks, other handle types (a DLC handle)
    if "*" in param:
        buf = ffi.new("char[4096]")   # zeroed: an empty config list, an empty name, a zero count
        keep.append(buf)
        return buf
    if ctype == "Qnn_OpConfig_t":
        op = abi.op_config("audit", "Relu")
        keep.append(op)
        return op
    return 0


@pytest.mark.parametrize("name, params, index, pname", list(handle_parameters()))
def test_every_handle_argument_is_checked(live, name, params, index, pname):
    if (name, pname) in NOT_CHECKED:
        pytest.skip(NOT_CHECKED[(name, pname)])
    if name in NOT_CALLABLE:
        pytest.skip(f"{name} {NOT_CALLABLE[name]}: not callable through cffi's ABI mode")
    handles, rec = live
    keep: list = []
    args = [_argument(p, handles, keep) for p in params]
    args[index] = vp(GARBAGE)
    rec.clear()
    code = abi.call(name, *[ffi.cast(_param_type(p), a) if isinstance(a, ffi.CData) and ffi.typeof(a).kind == "array"
                            else a for p, a in zip(params, args)])
    assert code != Q.QNN_SUCCESS, f"{name}: a {pname} that is no handle (0x{GARBAGE:x}) is refused"
    assert code not in (Q.QNN_COMMON_ERROR_GENERAL, Q.QNN_GRAPH_ERROR_GENERAL), \
        f"{name}: refused as a bad handle, not an internal error (code {code}): {rec.errors()}"
    text = " ".join(rec.errors())
    if (name, pname) in CHECKED_AFTER and f"{name}: {CHECKED_AFTER[name, pname]}" in text:
        return   # refused for the argument checked first; the handle check follows it
    names = "|".join(re.escape(n) for n in (pname, SYNONYMS.get(pname, pname)))
    assert re.search(rf"\[QNNEMU-[\w-]+\] {name}: ({names}) 0x{GARBAGE:x} ", text), \
        f"{name}: the refusal names the function, parameter '{pname}' and its value: {rec.errors()}"


def _param_type(param: str) -> str:
    """The C type of a parameter declaration ("const char *name" -> "const char *")."""
    m = re.match(r"^(.*?)(\w+)$", param)
    return m.group(1).strip()


# The entries that did not check their handle, against the vendor's codes (measured with QNN
# 2.51's libQnnHtp.so: NULL allowed where the handle is optional).
VENDOR_CODES = [
    ("deviceGetPlatformInfo", "garbage", Q.QNN_DEVICE_ERROR_INVALID_HANDLE),
    ("deviceGetPlatformInfo", "freed", Q.QNN_DEVICE_ERROR_INVALID_HANDLE),
    ("deviceGetPlatformInfo", "null", Q.QNN_SUCCESS),
    ("deviceFreePlatformInfo", "garbage", Q.QNN_DEVICE_ERROR_INVALID_HANDLE),
    ("deviceFreePlatformInfo", "freed", Q.QNN_DEVICE_ERROR_INVALID_HANDLE),
    ("deviceFreePlatformInfo", "null", Q.QNN_SUCCESS),
    ("backendRegisterOpPackage", "garbage", Q.QNN_BACKEND_ERROR_INVALID_HANDLE),
    ("backendRegisterOpPackage", "null", Q.QNN_BACKEND_ERROR_INVALID_HANDLE),
    ("graphPrepareExecutionEnvironment", "garbage", Q.QNN_GRAPH_ERROR_INVALID_HANDLE),
    ("graphPrepareExecutionEnvironment", "null", Q.QNN_GRAPH_ERROR_INVALID_HANDLE),
    ("graphReleaseExecutionEnvironment", "freed", Q.QNN_GRAPH_ERROR_INVALID_HANDLE),
    ("graphReleaseExecutionEnvironment", "null", Q.QNN_GRAPH_ERROR_INVALID_HANDLE),
]


def _call_with(lib: abi.Library, name: str, kind: str) -> int:
    """``name`` with its handle argument (a logger, backend or graph) ``kind``: garbage, freed or
    NULL; the other arguments valid."""
    keep: list = []
    _, log = lib.create("logCreate", NULL, Q.QNN_LOG_LEVEL_ERROR)
    _, be = lib.create("backendCreate", vp(log), NULL)
    _, ctx = lib.create("contextCreate", vp(be), NULL, NULL)
    _, graph = lib.create("graphCreate", vp(ctx), abi.cstr("g", keep), NULL)
    _, dead = lib.create("logCreate", NULL, Q.QNN_LOG_LEVEL_ERROR)
    lib.call("logFree", vp(dead))
    bad = vp({"garbage": GARBAGE, "freed": dead, "null": 0}[kind])
    info = ffi.new("QnnDevice_PlatformInfo_t **")
    try:
        if name == "deviceGetPlatformInfo":
            code = lib.call(name, bad, ffi.cast("const QnnDevice_PlatformInfo_t **", info))
        elif name == "deviceFreePlatformInfo":
            assert lib.call("deviceGetPlatformInfo", vp(log), ffi.cast("const QnnDevice_PlatformInfo_t **", info)) == 0
            code = lib.call(name, bad, info[0])
        elif name == "backendRegisterOpPackage":
            code = lib.call(name, bad, abi.cstr("/nonexistent/libOpPackage.so", keep), abi.cstr("Provider", keep), NULL)
        else:
            code = lib.call(name, bad, NULL, 0)
    finally:
        lib.call("contextFree", vp(ctx), NULL)
        lib.call("backendFree", vp(be))
        lib.call("logFree", vp(log))
    return code


@pytest.mark.parametrize("name, kind, vendor_code", VENDOR_CODES, ids=[f"{n}-{k}" for n, k, _ in VENDOR_CODES])
def test_handle_codes_as_the_vendor(name, kind, vendor_code):
    code = _call_with(abi.library(None), name, kind)
    assert code == vendor_code, f"{name} with a {kind} handle: qnnemu {code}, the vendor's library {vendor_code}"


@pytest.mark.skipif(vendor_dir() is None, reason="needs onnxruntime_qnn (the vendor's libQnnHtp.so)")
@pytest.mark.parametrize("name, kind, vendor_code", VENDOR_CODES, ids=[f"{n}-{k}" for n, k, _ in VENDOR_CODES])
def test_vendor_handle_codes_still_hold(name, kind, vendor_code):
    """The codes above, measured again on the vendor's library."""
    code = _call_with(abi.library(vendor_library()), name, kind)
    assert code == vendor_code, f"{name} with a {kind} handle: the vendor now answers {code}, pinned {vendor_code}"
