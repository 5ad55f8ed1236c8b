"""A pool whose window covers the whole image (global average / max pooling) is tiled as a
reduction over the spatial axes (qnnemu/htp/tiling.py ``_global_pool_pattern``): the vendor's
backend finalizes a uint16 global average pool whose input alone exceeds the 4 MiB VTCM budget
(PP-OCRv4's text detector quantized a16w8: [1, 160, 160, 96]); qnnemu once refused it with
QNNEMU-prepare-working-set."""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

U16 = Q.QNN_DATATYPE_UFIXED_POINT_16
QUANT = (1 / 65535, 0)


def finalize(library: str, op: str, hw: int, channels: int) -> dict:
    """graphFinalize (and one execute) of ``op`` over the whole [1, hw, hw, channels] uint16
    image produced by a Relu, with 4 MiB of VTCM; {"finalize": code, "y": first output codes}."""
    from qnnemu.client import Backend, QnnCallError, htp_graph_config
    with Backend(library, log_level=None) as be:
        g = be.context().graph("g", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=4)])
        x = g.input("x", (1, hw, hw, channels), U16, quant=QUANT)
        # an intermediate image (a graph input is streamed from DDR, never held in VTCM whole)
        r = g.node("Relu", [x], [("r", (1, hw, hw, channels), U16, QUANT)])
        g.node(op, [r], [("y", (1, 1, 1, channels), U16, QUANT)], app_read=True,
               params={"filter_size": np.array([hw, hw], np.uint32), "stride": np.array([1, 1], np.uint32),
                       "pad_amount": np.zeros((2, 2), np.uint32)})
        try:
            g.finalize()
        except QnnCallError as e:
            return {"finalize": e.code, "y": None}
        xs = (np.arange(hw * hw * channels) % 1000).astype(np.uint16).reshape(1, hw, hw, channels)
        return {"finalize": 0, "y": [int(v) for v in g.execute({"x": xs})["y"].ravel()[:8]]}


@pytest.mark.parametrize("op", ["PoolAvg2d", "PoolMax2d"])
def test_global_pool_larger_than_vtcm_finalizes(op):
    r = finalize(str(our_library()), op, 160, 96)    # 4.9 MB of uint16 input, 4 MiB of VTCM
    assert r["finalize"] == 0, f"{op} over a [1,160,160,96] uint16 image finalizes (tiled as a reduction): {r}"
    assert r["y"] is not None and len(r["y"]) == 8, f"{op}: the graph executes"


def test_the_pattern_splits_the_spatial_axes():
    from qnnemu.htp.tiling import access_pattern

    class Spec:
        def __init__(self, shape):
            self.shape = shape

    class Node:
        op_type = "PoolAvg2d"
        params = {"filter_size": np.array([160, 160]), "stride": np.array([1, 1])}
        input_specs = [Spec((1, 160, 160, 96))]
        output_specs = [Spec((1, 1, 1, 96))]

    p = access_pattern(Node())
    assert p.rule == "reduce" and p.space == (1, 160, 160, 96), f"a reduction over the input: {p.rule} {p.space}"
    assert p.reduced == (False, True, True, False), f"the spatial axes are reduced: {p.reduced}"
    assert p.can_tile and p.tileable[1] and p.tileable[2], f"rows and columns may be split: {p.tileable}"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_global_pool_tiling as t
open(sys.argv[3], "w").write(json.dumps(t.finalize(sys.argv[2], "PoolAvg2d", 160, 96)))
"""


def test_vendor_finalizes_it_too(tmp_path):
    vendor = vendor_probe(_VENDOR, tmp_path, timeout=900)
    assert vendor["finalize"] == 0, f"the vendor finalizes the global average pool: {vendor}"
    ours = finalize(str(our_library()), "PoolAvg2d", 160, 96)
    assert max(abs(a - b) for a, b in zip(ours["y"], vendor["y"])) <= 1, \
        f"ours {ours['y']} within one code of the vendor's {vendor['y']}"
