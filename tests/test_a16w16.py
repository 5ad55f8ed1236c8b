"""A16W16: uint16 activations with int16 weights (QNN HTP backend documentation, "QNN HTP
Precision", A16W16: "the range of weight value will be 0x8000 to 0x7F7F instead of a full 16bit
range"; qnnemu/core/plan.py ``A16W16_WEIGHT_OPS``).

The vendor's libQnnHtp.so 2.51 (SM8550) computes int16 weight codes 0x7F80, 0x7FC0 and 0x7FFF
exactly as 0x7F7F, for FullyConnected's static weights and MatMul's dynamic in[1]
(``test_vendor_clips``); qnnemu clips them too (static ones warned:
``QNNEMU-a16w16-weight-clipped``, negative case in tests/test_warning_rules.py).  Also found:
asymmetric int16 weights (the documentation: "All weights/filters need to be symmetrically
quantized"; for MatMul "Input B must be symmetrically quantized") are taken and computed with
their offset by the vendor (``fc``/``mm`` with offsets +-700 differ from offset 0 by the offset's
effect), so qnnemu computes them as well, without a rule.  Per-axis (AXIS_SCALE_OFFSET) static
weights with offsets are different: the vendor computes every channel with offset 0, for int16 and
int8 weights of Conv2d, DepthWiseConv2d, TransposeConv2d, FullyConnected and MatMul, and with offset
-128 (zero point 128) for uint8 weights (``test_vendor_ignores_per_axis_weight_offsets``); qnnemu does
the same and says so (warning rule
``QNNEMU-weight-axis-offset-ignored``, qnnemu/core/plan.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

U16, S16 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16
SM8550 = int(Q.QNN_SOC_MODEL_SM8550)
XQ, WQ, YQ = (1 / 1000, -32768), (1 / 32768, 0), (32 / 65535, -32768)
X_CODE = 33768            # real 1.0
CODES = (0x7F7F, 0x7F80, 0x7FC0, 0x7FFF)


def run(library: str, op: str, code: int, offset: int = 0) -> list[int]:
    """y of a [1, 8] x [8, 4] product, every weight code ``code``: FullyConnected (static weights
    [4, 8]) or MatMul (dynamic in[1] [8, 4])."""
    from qnnemu.client import Backend, htp_device_config
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8550)]) as be:
        ctx = be.context()
        g = ctx.graph("g")
        x = g.input("x", (1, 8), U16, quant=XQ)
        feeds = {"x": np.full((1, 8), X_CODE, np.uint16)}
        if op == "FullyConnected":
            w = g.static("w", np.full((4, 8), code, np.int16), S16, quant=(WQ[0], offset))
        else:
            w = g.input("w", (8, 4), S16, quant=(WQ[0], offset))
            feeds["w"] = np.full((8, 4), code, np.int16)
        g.node(op, [x, w], [("y", (1, 4), U16, YQ)], app_read=True)
        g.finalize()
        return [int(v) for v in g.execute(feeds)["y"].ravel()]


def reference(code: int) -> int:
    """The output code of 8 * 1.0 * dequantize(code), requantized (float64)."""
    real = 8 * ((X_CODE + XQ[1]) * XQ[0]) * ((code + WQ[1]) * WQ[0])
    return int(np.clip(np.round(real / YQ[0]) - YQ[1], 0, 65535))


@pytest.mark.parametrize("op", ["FullyConnected", "MatMul"])
def test_int16_weights_above_7f7f_are_clipped(op):
    lib = str(our_library())
    clipped = run(lib, op, 0x7F7F)
    assert abs(clipped[0] - reference(0x7F7F)) <= 1, \
        f"{op}: 0x7F7F computes its value ({clipped} vs {reference(0x7F7F)})"
    for code in CODES[1:]:
        assert reference(code) != reference(0x7F7F), f"the test distinguishes 0x{code:X} from 0x7F7F"
        assert run(lib, op, code) == clipped, f"{op}: weight code 0x{code:X} computes as 0x7F7F"
    assert run(lib, op, -0x8000)[0] == reference(-0x8000), f"{op}: 0x8000 (the bottom of the range) is kept"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_a16w16 as t
out = {op: {str(c): t.run(sys.argv[2], op, c) for c in t.CODES} for op in ("FullyConnected", "MatMul")}
out["offsets"] = {op: {str(o): t.run(sys.argv[2], op, 1000, o) for o in (-700, 0, 700)}
                  for op in ("FullyConnected", "MatMul")}
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_clips(tmp_path):
    vendor = vendor_probe(_VENDOR, tmp_path)
    ours = str(our_library())
    for op in ("FullyConnected", "MatMul"):
        base = vendor[op][str(0x7F7F)]
        for code in CODES:
            assert vendor[op][str(code)] == base, f"vendor {op}: 0x{code:X} computes as 0x7F7F"
            got = run(ours, op, code)
            assert max(abs(a - b) for a, b in zip(got, vendor[op][str(code)])) <= 1, \
                f"{op} 0x{code:X}: ours {got} within 1 code of the vendor's {vendor[op][str(code)]}"
        offs = vendor["offsets"][op]
        assert offs["-700"] != offs["0"] != offs["700"], f"vendor {op}: asymmetric weights computed with the offset"
        for o in (-700, 0, 700):
            got = run(ours, op, 1000, o)
            assert max(abs(a - b) for a, b in zip(got, offs[str(o)])) <= 4, \
                f"{op} offset {o}: ours {got} near the vendor's {offs[str(o)]}"


AXIS_OPS = ("Conv2d", "DepthWiseConv2d", "TransposeConv2d", "FullyConnected", "MatMul")
S8 = Q.QNN_DATATYPE_SFIXED_POINT_8


def run_axis(library: str, op: str, weights: int, offset: int) -> list[int]:
    """y codes of ``op`` with static per-axis weights (every code 100 for int16, 10 for int8, every
    channel's offset ``offset``) on uint16 activations of real value 1.0, SM8550."""
    from qnnemu.client import Backend, htp_device_config
    wnp, scale, code = (np.int16, 1 / 32768, 100) if weights == S16 else (np.int8, 1 / 128, 10)
    spatial = op in ("Conv2d", "DepthWiseConv2d", "TransposeConv2d")
    cin = cout = 8
    if op == "FullyConnected":
        wshape, axis = (cout, cin), 0
    elif op == "MatMul":
        wshape, axis = (cin, cout), 1
    else:
        wshape, axis = (3, 3, 1 if op == "DepthWiseConv2d" else cin, cout), 3
    xshape = (1, 4, 4, cin) if spatial else (1, cin)
    yshape = (1, 6 if op == "TransposeConv2d" else 2, 6 if op == "TransposeConv2d" else 2, cout) if spatial \
        else (1, cout)
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8550)]) as be:
        g = be.context().graph("g")
        x = g.input("x", xshape, U16, quant=XQ)
        w = g.static("w", np.full(wshape, code, wnp), weights,
                     quant={"axis": axis, "scales": [scale] * cout, "offsets": [offset] * cout})
        ins = [x, w]
        params = {}
        if op != "MatMul":
            ins.append(g.static("b", np.zeros(cout, np.int32), Q.QNN_DATATYPE_SFIXED_POINT_32, quant=(1e-6, 0)))
        if spatial:
            params = {"stride": np.array([1, 1], np.uint32), "pad_amount": np.zeros((2, 2), np.uint32)}
        g.node(op, ins, [("y", yshape, U16, YQ)], params=params, app_read=True)
        g.finalize()
        return [int(v) for v in g.execute({"x": np.full(xshape, X_CODE, np.uint16)})["y"].ravel()[:cout]]


@pytest.mark.parametrize("weights", [S16, S8], ids=["int16", "int8"])
@pytest.mark.parametrize("op", AXIS_OPS)
def test_per_axis_weight_offsets_are_ignored(op, weights):
    lib = str(our_library())
    offset = -100 if weights == S16 else -10      # dequantizes every weight to 0 when applied
    symmetric = run_axis(lib, op, weights, 0)
    assert symmetric[0] != YQ[1] * -1, f"{op}: the symmetric weights give a non-zero output ({symmetric})"
    assert run_axis(lib, op, weights, offset) == symmetric, \
        f"{op}: per-axis weight offsets {offset} computed as 0 (the vendor's behaviour)"


U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
U8_OFFSETS = ((-128, -128, -128), (-100, -100, -100), (-128, -100, -50), (0, 0, 0))


def run_u8_fc(library: str, offsets) -> list[int]:
    """A uint8 FullyConnected whose static uint8 weights are per-axis with ``offsets``."""
    from qnnemu.client import Backend, htp_device_config
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8550)]) as be:
        g = be.context().graph("g")
        x = g.input("x", (1, 4), U8, quant=(0.05, -128))
        w = g.static("w", np.array([[130, 140, 120, 128]] * 3, np.uint8), U8,
                     quant={"axis": 0, "scales": [0.01] * 3, "offsets": list(offsets)})
        g.node("FullyConnected", [x, w], [("y", (1, 3), U8, (0.01, -128))], app_read=True)
        g.finalize()
        return [int(v) for v in g.execute({"x": np.full((1, 4), 200, np.uint8)})["y"].ravel()]


def test_uint8_per_axis_weights_use_zero_point_128():
    """uint8 per-axis weights compute with offset -128 (zero point 128) whatever offsets they give."""
    lib = str(our_library())
    symmetric = run_u8_fc(lib, U8_OFFSETS[0])
    assert symmetric == [150] * 3, f"codes 130/140/120/128 around 128 against x = 3.6: {symmetric}"
    for offsets in U8_OFFSETS[1:]:
        assert run_u8_fc(lib, offsets) == symmetric, f"offsets {offsets} computed as -128"


_VENDOR_AXIS = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_a16w16 as t
out = {f"{op} {w} {o}": t.run_axis(sys.argv[2], op, w, o) for op in t.AXIS_OPS for w in (t.S16, t.S8)
       for o in (0, -100 if w == t.S16 else -10)}
out["u8"] = [t.run_u8_fc(sys.argv[2], o) for o in t.U8_OFFSETS]
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_ignores_per_axis_weight_offsets(tmp_path):
    vendor = vendor_probe(_VENDOR_AXIS, tmp_path)
    ours = str(our_library())
    for op in AXIS_OPS:
        for w, o in ((S16, -100), (S8, -10)):
            assert vendor[f"{op} {w} {o}"] == vendor[f"{op} {w} 0"], \
                f"vendor {op} ({w}): per-axis offset {o} computes as offset 0"
            got = run_axis(ours, op, w, o)
            assert max(abs(a - b) for a, b in zip(got, vendor[f"{op} {w} {o}"])) <= 4, \
                f"{op} ({w}) offset {o}: ours {got} near the vendor's {vendor[f'{op} {w} {o}']}"
    assert vendor["u8"] == [run_u8_fc(ours, o) for o in U8_OFFSETS], \
        f"uint8 per-axis weights: the vendor's codes {vendor['u8']} (offset -128 whatever is given)"
