"""Spill-fill sharing groups at contextCreateFromBinary (QNN HTP backend documentation, "QNN HTP
Context Config Options": QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS and
..._REGISTER_CONCURRENT_RESOURCE_SHARING; qnnemu/htp/groups.py) against the vendor's x86-64 library.

A documented divergence, pinned: the vendor's libQnnHtp.so 2.51 for x86-64 implements neither
registration.  REGISTER_MULTI_CONTEXTS at contextCreateFromBinary returns
QNN_CONTEXT_ERROR_INVALID_CONFIG (5010, "HTP Config option: 2 not supported") on every SoC probed
(SM8350, SM8550, SM8650, SM8750, SM8850, buffer sizes 4 KiB to 64 MiB);
REGISTER_CONCURRENT_RESOURCE_SHARING on SM8850 returns QNN_COMMON_ERROR_NOT_SUPPORTED (1000,
"Concurrent resource sharing config is not supported"), as it answers DSP_MEMORY_PROFILING_ENABLED
("Dsp memory profiling is not supported").  These are device features the x86 library does not
run; the documentation describes them for the device ("the index to the graph and respective
spill fill buffer"), and qnnemu emulates the device: the contexts load and join one group
(docs/device-variants.md).  The rules qnnemu does apply to them (first registration with a size,
an existing first context, ListAsync, v81 for concurrent sharing) are in tests/test_htp_configs.py
and tests/test_context_api.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

SOCS = ("SM8350", "SM8550", "SM8650", "SM8750")


def load_group(library: str, soc: str, option: str = "REGISTER_MULTI_CONTEXTS", size: int = 1 << 20) -> dict:
    """A one-Relu binary loaded twice, the first load opening a group (``option``, buffer ``size``)
    and the second joining it: the codes of both loads (0: loaded)."""
    from qnnemu.client import Backend, htp_context_config, htp_device_config
    from qnnemu.client.cabi import QnnCallError, ffi
    member = "groupRegistration" if option == "REGISTER_MULTI_CONTEXTS" else "concurrentGroupRegistration"
    soc_model = int(getattr(Q, f"QNN_SOC_MODEL_{soc}"))
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=soc_model)]) as be:
        ctx = be.context()
        g = ctx.graph("g")
        x = g.input("x", (1, 64))
        g.node("Relu", [x], [("y", (1, 64), np.float32)], app_read=True)
        g.finalize()
        blob = ctx.get_binary()
        ctx.free()
        out = {}
        try:
            first = be.context_from_binary(blob, [htp_context_config(option, **{member: {"maxSpillFillBuffer": size}})])
            out["first"] = 0
        except QnnCallError as e:
            return {"first": e.code}
        try:
            be.context_from_binary(blob, [htp_context_config(option, **{member: {
                "firstGroupHandle": first.handle, "maxSpillFillBuffer": 0}})])
            out["second"] = 0
        except QnnCallError as e:
            out["second"] = e.code
        out["first_handle"] = int(ffi.cast("uintptr_t", first.handle))
        if library == str(our_library()):
            from qnnemu.htp import groups
            group = groups.group_for_first(out["first_handle"])
            out["members"] = len(groups.members(group)) if group is not None else 0
        return out


@pytest.mark.parametrize("soc", SOCS)
def test_contexts_join_a_multi_context_group(soc):
    got = load_group(str(our_library()), soc)
    assert got["first"] == 0 and got["second"] == 0, f"{soc}: both loads accepted (the device feature): {got}"
    assert got["members"] == 2, f"{soc}: both contexts are members of the group: {got}"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_context_groups_vendor as t
out = {soc: t.load_group(sys.argv[2], soc) for soc in t.SOCS}
out["big"] = t.load_group(sys.argv[2], "SM8550", size=64 << 20)
out["concurrent"] = t.load_group(sys.argv[2], "SM8850", "REGISTER_CONCURRENT_RESOURCE_SHARING", 4096)
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_x86_library_refuses_the_registrations(tmp_path):
    """The divergence, pinned: the x86 library refuses both registrations as features it does not
    run (5010 / 1000) on every SoC; qnnemu loads the contexts into one group."""
    vendor = vendor_probe(_VENDOR, tmp_path)
    for soc in (*SOCS, "big"):
        assert vendor[soc] == {"first": Q.QNN_CONTEXT_ERROR_INVALID_CONFIG}, \
            f"vendor {soc}: REGISTER_MULTI_CONTEXTS refused with 5010 at contextCreateFromBinary: {vendor[soc]}"
    assert vendor["concurrent"] == {"first": Q.QNN_COMMON_ERROR_NOT_SUPPORTED}, \
        f"vendor SM8850: concurrent resource sharing not supported on x86: {vendor['concurrent']}"
    ours = load_group(str(our_library()), "SM8850", "REGISTER_CONCURRENT_RESOURCE_SHARING", 4096)
    assert ours["first"] == 0 and ours["second"] == 0 and ours["members"] == 2, \
        f"qnnemu emulates the device: the v81 contexts share one group: {ours}"
