"""DLBC limitations (QNN HTP backend documentation, "QNN HTP Deep Learning Bandwidth Compression
(DLBC)", Limitations: offline preparation only; not with weight sharing; not with spill-fill buffer
sharing), against the vendor's libQnnHtp.so 2.51 on an SM8650 (v75) device.

In a WEIGHT_SHARING_ENABLED context:

- ENABLE_DLBC (inputs): the vendor builds and executes the graph and writes the binary; qnnemu the
  same, with the warning `QNNEMU-graph-dlbc-inputs-weight-sharing`;
- ENABLE_DLBC_WEIGHTS: the vendor's graphCreate answers QNN_COMMON_ERROR_NOT_SUPPORTED; qnnemu
  refuses it at graphCreate too (`QNNEMU-graph-dlbc-weight-sharing`).

Spill-fill sharing (a DLBC graph loaded into a REGISTER_MULTI_CONTEXTS group) is warned
(`QNNEMU-context-group-dlbc`; the vendor's x86 library refuses group registrations, so nothing to
compare); "offline only" has nothing to act on (DLBC has no modelled effect yet).  The rules'
negative cases are in tests/test_warning_rules.py and tests/test_htp_configs.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

SM8650 = int(Q.QNN_SOC_MODEL_SM8650)


def dlbc_in_weight_sharing(library: str, kind: str):
    """graphCreate .. contextGetBinary of a FullyConnected graph with ``kind`` (ENABLE_DLBC or
    ENABLE_DLBC_WEIGHTS) in a weight-sharing context: the binary's size, or the failing call."""
    from qnnemu.client import Backend, QnnCallError, htp_context_config, htp_device_config, htp_graph_config
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8650)]) as be:
        ctx = be.context([htp_context_config("WEIGHT_SHARING_ENABLED", weightSharingEnabled=True)])
        try:
            g = ctx.graph("g", configs=[htp_graph_config("OPTIMIZATION", optimizationOption={
                "type": getattr(Q, f"QNN_HTP_GRAPH_OPTIMIZATION_TYPE_{kind}"), "floatValue": 1.0})])
            x = g.input("x", (1, 8))
            g.node("FullyConnected", [x, g.static("w", np.ones((8, 8), np.float32))], [("y", (1, 8), np.float32)],
                   app_read=True)
            g.finalize()
            g.execute({"x": np.ones((1, 8), np.float32)})
            return len(ctx.get_binary())
        except QnnCallError as e:
            return e.function


@pytest.mark.parametrize("kind,want", [("ENABLE_DLBC", int), ("ENABLE_DLBC_WEIGHTS", "graphCreate")])
def test_ours(kind, want):
    got = dlbc_in_weight_sharing(str(our_library()), kind)
    assert (isinstance(got, int) and got > 0) if want is int else got == want, \
        f"{kind} with weight sharing: {got!r} (expected {'a binary' if want is int else want + ' to fail'})"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_dlbc_rules as t
out = {k: t.dlbc_in_weight_sharing(sys.argv[2], k) for k in ("ENABLE_DLBC", "ENABLE_DLBC_WEIGHTS")}
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor(tmp_path):
    out = vendor_probe(_VENDOR, tmp_path)
    assert isinstance(out["ENABLE_DLBC"], int) and out["ENABLE_DLBC"] > 0, \
        f"vendor: input DLBC with weight sharing writes a binary ({out['ENABLE_DLBC']!r})"
    assert out["ENABLE_DLBC_WEIGHTS"] == "graphCreate", f"vendor: DLBC weights refused at graphCreate ({out})"
