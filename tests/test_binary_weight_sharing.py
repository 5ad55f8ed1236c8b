"""Weight sharing outside its documented limits (QNN HTP backend documentation, "QNN HTP Context
Config Options": QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, at most 64 graphs, v73 and
later, not across VTCM sizes or SoCs).

The vendor's libQnnHtp.so 2.51 writes a weight-sharing binary in each case (``test_vendor_writes``):
65 graphs, an SM8350 (v68) device, graphs of 2 and 4 MiB VTCM.  qnnemu writes it too, weights
shared (one stored copy of a weight every graph uses), and warns (qnnemu/core/binary/writer.py;
the rules' negative cases are in tests/test_warning_rules.py).  Found on the way: the vendor's x86
library cannot load any weight-sharing binary ("Shared weights buffer isn't supported on this
platform", QNN_COMMON_ERROR_NOT_SUPPORTED at contextCreateFromBinary, for every SoC) -- a platform
limit of the x86 build, which qnnemu, emulating the device, does not copy.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.core import binary
from qnnemu.core.binary.format import FLAG_WEIGHT_SHARING
from qnnemu.headers import Q

SM8350, SM8550 = int(Q.QNN_SOC_MODEL_SM8350), int(Q.QNN_SOC_MODEL_SM8550)
# name -> (SoC, graphs, VTCM MiB per graph (None: unset))
CASES = {"65-graphs": (SM8550, 65, None), "v68": (SM8350, 2, None), "vtcm-2-and-4": (SM8550, 2, (2, 4))}
WEIGHT = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)


def make_binary(library: str, soc: int, graphs: int, vtcm) -> bytes:
    """A WEIGHT_SHARING_ENABLED context of ``graphs`` MatMul graphs, all with the same weight."""
    from qnnemu.client import Backend, htp_context_config, htp_device_config, htp_graph_config
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=soc)]) as be:
        ctx = be.context([htp_context_config("WEIGHT_SHARING_ENABLED", weightSharingEnabled=True)])
        for i in range(graphs):
            configs = [htp_graph_config("VTCM_SIZE", vtcmSizeInMB=vtcm[i])] if vtcm else []
            g = ctx.graph(f"g{i}", configs=configs)
            x = g.input("x", (1, 8))
            g.node("MatMul", [x, g.static("w", WEIGHT)], [("y", (1, 8), np.float32)], app_read=True)
            g.finalize()
        return ctx.get_binary()


@pytest.mark.parametrize("name", list(CASES))
def test_ours_writes_it_weights_shared(name):
    soc, graphs, vtcm = CASES[name]
    blob = make_binary(str(our_library()), soc, graphs, vtcm)
    info = binary.inspect(blob)
    assert info.header.flags & FLAG_WEIGHT_SHARING, f"{name}: the binary is marked weight-sharing"
    assert len(info.graphs) == graphs, f"{name}: every graph is in the binary"
    assert len(info.blobs) == 1, f"{name}: the weight every graph uses is stored once ({len(info.blobs)} blobs)"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_binary_weight_sharing as t
from qnnemu.client import QnnCallError
out = {}
for name, (soc, graphs, vtcm) in t.CASES.items():
    try:
        out[name] = len(t.make_binary(sys.argv[2], soc, graphs, vtcm))
    except QnnCallError as e:
        out[name] = str(e)
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_writes(tmp_path):
    out = vendor_probe(_VENDOR, tmp_path)
    for name in CASES:
        assert isinstance(out[name], int) and out[name] > 0, \
            f"{name}: the vendor writes the weight-sharing binary (got {out[name]!r})"
