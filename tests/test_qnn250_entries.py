"""QNN 2.50 core entries and values besides graphValidate (tests/test_graph_validate.py) and the
HTP perf votes (tests/test_htp_perf_250.py):

- contextGetProperty QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE (qnnemu/htp/settings.py);
- contextAddToDlc and backendRegisterOpPackageFromBinary: the same codes as the vendor's x86
  library (QNN 2.51) for the same calls (pinned against it; skipped without it).
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import vendor_library

from qnnemu.client import Backend, QnnCallError, ffi, htp_graph_config
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import groups, settings as htp_settings

F32 = np.float32
MIB = 1 << 20


@pytest.fixture
def be(qnn_abi):
    with Backend(None, log_level="error") as b:
        yield b


def _property(be: Backend, ctx, option: int) -> int:
    cp = ffi.new("QnnHtpContext_CustomProperty_t *")
    cp.option = option
    p = ffi.new("QnnContext_Property_t *")
    p.option = Q.QNN_CONTEXT_PROPERTY_OPTION_CUSTOM
    p.customProperty = cp
    be.call("contextGetProperty", ctx.handle, ffi.new("QnnContext_Property_t *[]", [p, ffi.NULL]))
    return int(cp.vtcmBackupBufferSize)


def _relu(ctx, name: str, configs=()):
    g = ctx.graph(name, configs=configs)
    x = g.input("x", (1, 8, 8, 4), F32)
    g.node("Relu", [x], outputs=[("y", (1, 8, 8, 4), F32)], app_read=True, name="relu")
    return g


VTCM_BACKUP = Q.QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE


@pytest.mark.soc("SM8550")  # 8 MiB of VTCM: room for a 6 MiB graph
def test_vtcm_backup_buffer_is_the_largest_graph_vtcm(be):
    ctx = be.context()
    assert _property(be, ctx, VTCM_BACKUP) == 0, "no prepared graph: no VTCM to back up"
    small = _relu(ctx, "small", [htp_graph_config("VTCM_SIZE", vtcmSizeInMB=2)])
    assert _property(be, ctx, VTCM_BACKUP) == 0, "a graph being built acquires no VTCM yet"
    small.finalize()
    assert _property(be, ctx, VTCM_BACKUP) == 2 * MIB, "the finalized graph's 2 MiB of VTCM"
    big = _relu(ctx, "big", [htp_graph_config("VTCM_SIZE", vtcmSizeInMB=6)])
    big.finalize()
    assert _property(be, ctx, VTCM_BACKUP) == 6 * MIB, "each graph has its own buffer: the largest counts"


@pytest.mark.soc("SM8550")
def test_vtcm_backup_buffer_in_a_sharing_group(monkeypatch, qnn_abi):
    """In a resource-sharing group the buffer is sized by the device (its whole VTCM)."""
    with Backend(None, log_level="error") as be:
        ctx = be.context()
        core = HANDLES.lookup(int(ffi.cast("uintptr_t", ctx.handle)))
        monkeypatch.setattr(groups, "group_of", lambda c: object() if c is core else None)
        assert htp_settings.vtcm_backup_buffer_bytes(core) == core.device.model.vtcm_bytes == 8 * MIB, \
            "SM8550 (the default device here): 8 MiB"


# ---------------------------------------------------------------- contextAddToDlc, op packages
def _codes(b: Backend) -> dict[str, int]:
    """The codes of the same calls on any backend."""
    ctx = b.context()
    buf = ffi.new("char[]", b"\x7fELF" + bytes(60))
    text = [ffi.new("char[]", b"CompatPackage_interfaceProvider"), ffi.new("char[]", b"CPU")]
    return {
        "addToDlc(context, NULL)": b.fn.contextAddToDlc(ctx.handle, ffi.NULL),
        "addToDlc(NULL, NULL)": b.fn.contextAddToDlc(ffi.NULL, ffi.NULL),
        "registerOpPackageFromBinary(backend, buffer)": b.fn.backendRegisterOpPackageFromBinary(
            b.handle, buf, 64, text[0], text[1]),
        "registerOpPackageFromBinary(backend, NULL)": b.fn.backendRegisterOpPackageFromBinary(
            b.handle, ffi.NULL, 0, ffi.NULL, ffi.NULL),
        "registerOpPackageFromBinary(NULL, buffer)": b.fn.backendRegisterOpPackageFromBinary(
            ffi.NULL, buf, 64, text[0], text[1]),
    }


EXPECTED = {
    "addToDlc(context, NULL)": Q.QNN_CONTEXT_ERROR_INVALID_HANDLE,
    "addToDlc(NULL, NULL)": Q.QNN_CONTEXT_ERROR_INVALID_HANDLE,
    "registerOpPackageFromBinary(backend, buffer)": Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
    "registerOpPackageFromBinary(backend, NULL)": Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
    "registerOpPackageFromBinary(NULL, buffer)": Q.QNN_BACKEND_ERROR_INVALID_HANDLE,
}


def test_new_entries_codes_on_qnnemu(be):
    assert _codes(be) == EXPECTED, "the codes the vendor's library returns for the same calls"
    ctx = be.context()
    with pytest.raises(QnnCallError) as info:
        be.call("contextAddToDlc", ctx.handle, ffi.cast("void *", 0x1000))
    assert info.value.code == Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE and "no DLC writer" in info.value.message, \
        f"a DLC handle: UNSUPPORTED_FEATURE, qnnemu writes no DLC ({info.value})"


def test_new_entries_codes_on_the_vendor():
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    with Backend(str(lib), log_level=None) as vb:
        assert _codes(vb) == EXPECTED, "measured on the vendor's library (QNN 2.51)"
