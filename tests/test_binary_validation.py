"""contextValidateBinary refuses what contextCreateFromBinary refuses (QnnContext.h
QnnContext_validateBinary; docs/context-binary.md "Loading"), header values outside their
documented ranges are refused under PERMISSIVE too, and strings no C string can carry are
malformed metadata for every loader, the System library's included.

Before: validation stopped at the metadata schema, so a CRC-valid binary naming an op type
``NoSuchOp`` (or a node its op refuses) validated and then failed to load; soc_model 1633,
vtcm_mb 0xffffffff or an arch 12345 loaded under PERMISSIVE; systemContextGetBinaryInfo
returned QNN_COMMON_ERROR_GENERAL (1100) for a graph named with an escaped lone surrogate.
"""
from __future__ import annotations

import json
import struct

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp

from qnnemu.client import Backend
from qnnemu.core import binary
from qnnemu.core.context import Context
from qnnemu.core.graph import Graph
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.system_client import SystemCallError, SystemLibrary

pytestmark = pytest.mark.usefixtures("qnn_abi")

CREATE = Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY


@pytest.fixture(scope="module")
def blob() -> bytes:
    """A conv + relu graph ("g") with a float32 input "x" and output "y"."""
    with Backend(None, log_level=None) as be:
        ctx = be.context()
        g = ctx.graph("g")
        x = g.input("x", (1, 4, 4, 2), np.float32)
        w = g.static("w", np.full((1, 1, 2, 3), 0.5, np.float32))
        c = g.node("Conv2d", [x, w], params={"stride": np.array([1, 1], np.uint32),
                                             "pad_amount": np.zeros((2, 2), np.uint32)},
                   outputs=[("c", (1, 4, 4, 3), np.float32)])
        g.node("Relu", [c], outputs=[("y", (1, 4, 4, 3), np.float32)], app_read=True)
        g.finalize()
        return ctx.get_binary()


def with_metadata(blob: bytes, edit) -> bytes:
    h = binary.parse_header(blob)
    meta = json.loads(blob[h.metadata_offset:h.metadata_offset + h.metadata_size])
    edit(meta)
    return binary.assemble(h, meta, blob[h.data_offset:h.data_offset + h.data_size])


def with_header(blob: bytes, offset: int, value: int) -> bytes:
    b = bytearray(blob)
    struct.pack_into("<I", b, offset, value)
    return binary.reseal(bytes(b))


class Loader:
    """contextCreateFromBinary and contextValidateBinary (PERMISSIVE, the default) of one backend,
    with the app log recorded."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        _, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_WARN)
        _, self.be = abi.create("backendCreate", vp(self.log), NULL)

    def close(self):
        abi.call("backendFree", vp(self.be))
        abi.call("logFree", vp(self.log))

    def validate(self, data: bytes) -> tuple[int, list[str]]:
        self.rec.clear()
        buf = ffi.new("char[]", data)
        code = abi.call("contextValidateBinary", vp(self.be), NULL, NULL, buf, len(data))
        return code, self.rec.errors()

    def load(self, data: bytes) -> tuple[int, list[str]]:
        self.rec.clear()
        buf = ffi.new("char[]", data)
        out = ffi.new("Qnn_ContextHandle_t *")
        code = abi.call("contextCreateFromBinary", vp(self.be), NULL, NULL, buf, len(data), out, NULL)
        if code == Q.QNN_SUCCESS:
            abi.call("contextFree", out[0], NULL)
        return code, self.rec.errors()


@pytest.fixture
def loader():
    lo = Loader()
    yield lo
    lo.close()


def live() -> tuple[int, int]:
    return len(HANDLES.live(Context)), len(HANDLES.live(Graph))


def _node(meta, name):
    return next(n for n in meta["graphs"][0]["nodes"] if n["name"].startswith(name))


REBUILD_FAILURES = {
    # an op type no package of the backend has
    "unknown-op-type": (lambda m: _node(m, "Relu").__setitem__("type", "NoSuchOp"), "QNNEMU-op-type-unknown"),
    # a node its op's checks refuse: Conv2d with a stride of 0
    "op-check": (lambda m: next(p for p in _node(m, "Conv2d")["params"] if p["name"] == "stride")
                 .__setitem__("value", binary._enc(np.zeros(2, np.uint32))), "QNNEMU-Conv2d"),
}


@pytest.mark.parametrize("case", sorted(REBUILD_FAILURES))
def test_validate_refuses_what_loading_refuses(blob, loader, case):
    edit, inner = REBUILD_FAILURES[case]
    mutant = with_metadata(blob, edit)
    assert binary.inspect(mutant).graphs, f"{case}: the mutant passes inspection (CRC-valid, schema-valid)"
    before = live()
    load_code, load_errors = loader.load(mutant)
    assert load_code == CREATE and "[QNNEMU-binary-graph]" in " ".join(load_errors), \
        f"{case}: contextCreateFromBinary refuses it in the rebuild: {load_code} {load_errors}"
    code, errors = loader.validate(mutant)
    assert code == load_code, f"{case}: contextValidateBinary returns {code}, loading {load_code}: {errors}"
    text = " ".join(errors)
    assert "[QNNEMU-binary-graph] contextValidateBinary:" in text, f"{case}: the same rule, for the validator: {errors}"
    if inner:
        assert inner in text, f"{case}: the message carries the inner rule {inner}: {errors}"
    assert live() == before, f"{case}: validation leaves no context or graph behind: {before} -> {live()}"
    assert loader.validate(blob)[0] == Q.QNN_SUCCESS, "the unmodified binary still validates"
    assert live() == before, "validating a good binary leaves nothing behind either"


@pytest.mark.parametrize("field, offset, value", [
    ("soc_model", 44, 1633), ("htp_arch", 48, 12345), ("vtcm_mb", 52, 0xFFFFFFFF), ("vtcm_mb", 52, 0),
    ("flags", 24, 0x80000000),
], ids=["soc-1633", "arch-12345", "vtcm-0xffffffff", "vtcm-0", "reserved-flag"])
def test_header_values_outside_their_ranges_are_refused(blob, loader, field, offset, value):
    """Under PERMISSIVE (the default) too: PERMISSIVE tolerates a binary made for another
    device, not a header no device has."""
    mutant = with_header(blob, offset, value)
    for name, (code, errors) in (("contextCreateFromBinary", loader.load(mutant)),
                                 ("contextValidateBinary", loader.validate(mutant))):
        assert code == CREATE, f"{name}: {field} = {value:#x} is refused with CREATE_FROM_BINARY, got {code}"
        assert f"[QNNEMU-binary-header] {name}: binaryBuffer: inconsistent header:" in " ".join(errors) \
            and field in " ".join(errors), f"{name}: the message names the field {field}: {errors}"


def test_header_values_inside_their_ranges_still_load(blob, loader):
    """The range checks refuse nothing serialize writes: a binary for another SoC of the table
    (SM8550, v73, 8 MiB) loads under PERMISSIVE, with the suboptimal-device warning."""
    other = with_header(with_header(with_header(blob, 44, Q.QNN_SOC_MODEL_SM8550), 48, 73), 52, 8)
    assert loader.load(other)[0] == Q.QNN_SUCCESS, "a binary prepared for SM8550 loads on the default device"
    assert loader.validate(other)[0] == Q.QNN_SUCCESS, "and validates"


def test_lone_surrogate_graph_name_is_malformed_everywhere(blob, loader):
    """A graph name "\\ud800" (an escaped lone surrogate in the JSON): no C string can carry it."""
    mutant = with_metadata(blob, lambda m: m["graphs"][0].__setitem__("name", "\ud800"))
    for name, (code, errors) in (("contextCreateFromBinary", loader.load(mutant)),
                                 ("contextValidateBinary", loader.validate(mutant))):
        assert code == CREATE and f"[QNNEMU-binary-metadata] {name}:" in " ".join(errors), \
            f"{name}: refused as malformed metadata: {code} {errors}"
    system = SystemLibrary(log_level=None)
    with pytest.raises(SystemCallError) as failure:
        system.binary_info(mutant)
    assert failure.value.code == Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY, \
        f"systemContextGetBinaryInfo answers MALFORMED_BINARY (was 1100): {failure.value}"
