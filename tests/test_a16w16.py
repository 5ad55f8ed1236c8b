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
effect), so qnnemu computes them as well, without a rule.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_env, vendor_library

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
    library = vendor_library()
    if library is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    result = tmp_path / "vendor.json"
    proc = subprocess.run([sys.executable, "-c", _VENDOR, str(Path(__file__).resolve().parent), str(library),
                           str(result)], env=vendor_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and result.exists(), f"vendor probe failed: {proc.stderr[-2000:]}"
    vendor = json.loads(result.read_text())
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
