"""Convert and Cast rounding (QnnOpDef.h Convert / Cast) as the vendor's libQnnHtp.so 2.51 computes
it on x86-64 (default device), pinned twice: each case's recorded vendor codes against qnnemu's
library (runs without the vendor), and the same case against the vendor's library (skips without
onnxruntime_qnn).  The rules are in docs/numerics.md "Convert and Cast" and qnnemu/ops/cast.py:

- float32 -> fixed-point Convert rounds like Quantize (``rounding_for("Quantize")``);
- fixed -> fixed Convert into a code as wide or wider: ties up (floor(y + 0.5));
- Cast float -> UFIXED_POINT_8: trunc(x) saturated to [0, 255], the encoding ignored; float16 ->
  SFIXED_POINT_8: that byte - 128; other float -> fixed point: rint(x * (1 / scale) - offset),
  ties to even after the offset;
- Cast UFIXED_POINT_8 -> float: the code itself; SFIXED_POINT_8 -> FLOAT_16: the code + 128;
  other fixed point -> float: the real value;
- Cast fixed point <-> plain integers: UFIXED_POINT_8 -> INT_32 / UINT_32 the code, -> INT_8 the
  code - 128; SFIXED_POINT_8 -> INT_8 the code; other fixed point -> INT_32 the real value to
  nearest (ties to even); INT_32 -> UFIXED_POINT_8 / 16 the value saturated (encoding ignored),
  -> SFIXED_POINT_8 quantized.
"""
from __future__ import annotations

import numpy as np
import pytest

from qnnemu.client import Backend
from qnnemu.headers import Q

S8, U8 = Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_8
S16, U16 = Q.QNN_DATATYPE_SFIXED_POINT_16, Q.QNN_DATATYPE_UFIXED_POINT_16
F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
I8, I32, U32 = Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32
STORAGE = {S8: np.int8, U8: np.uint8, S16: np.int16, U16: np.uint16, F32: np.float32, F16: np.float16,
           I8: np.int8, I32: np.int32, U32: np.uint32}
NAMES = {S8: "s8", U8: "u8", S16: "s16", U16: "u16", F32: "f32", F16: "f16", I8: "i8", I32: "i32", U32: "u32"}

NEAR_TIES = [0.25, 0.35, 0.45, -0.25, 1.05]
# near-ties, negative values, halves, values past the 8/16-bit ranges
VALUES = NEAR_TIES + [-0.5, -1.5, -3.7, 0.5, 1.5, 2.5, 2.9, 100.9, 127.6, 128.4, 255.5, 256.7,
                      300.2, -300.2, 1e9, -1e9, 40000.5, 70000.3]
F16_VALUES = [min(max(v, -6e4), 6e4) for v in VALUES]
BYTE_CODES = [0, 1, 5, 100, 127, 128, 200, 255]
CODES_0_15 = list(range(16))

# (op, input type, input encoding, input values, output type, output encoding, vendor's output)
CASES = [
    # float32 -> fixed Convert: the vendor's Quantize codes
    ("Convert", F32, None, NEAR_TIES, S8, (0.1, 0), [3, 4, 5, -3, 11]),
    ("Convert", F32, None, NEAR_TIES, U8, (0.1, -100), [103, 104, 105, 97, 111]),
    ("Convert", F32, None, NEAR_TIES, S16, (0.1, 0), [3, 3, 4, -3, 10]),
    ("Convert", F32, None, NEAR_TIES, U16, (0.1, -100), [103, 103, 104, 97, 110]),
    # fixed -> fixed Convert, as wide or wider: real values k + 0.5 round up
    ("Convert", U8, (0.5, 0), CODES_0_15, U8, (1.0, 0), [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8]),
    ("Convert", U8, (0.5, -128), CODES_0_15, U8, (1.0, -64), [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8]),
    ("Convert", U8, (0.5, 0), CODES_0_15, U16, (1.0, 0), [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8]),
    ("Convert", U16, (0.5, -256), CODES_0_15, U16, (1.0, -128), [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8]),
    ("Convert", S8, (0.5, 0), [c - 128 for c in CODES_0_15], S8, (1.0, 0),
     [-64, -63, -63, -62, -62, -61, -61, -60, -60, -59, -59, -58, -58, -57, -57, -56]),
    ("Convert", S16, (0.5, 0), [c - 256 for c in CODES_0_15], S16, (1.0, 0),
     [-128, -127, -127, -126, -126, -125, -125, -124, -124, -123, -123, -122, -122, -121, -121, -120]),
    ("Convert", U8, (0.3, 0), CODES_0_15, U16, (0.2, 0), [0, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 23]),
    # Cast float -> UFIXED_POINT_8: a plain byte, whatever the encoding
    ("Cast", F32, None, VALUES, U8, (0.1, -100),
     [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 2, 100, 127, 128, 255, 255, 255, 0, 255, 0, 255, 255]),
    ("Cast", F32, None, VALUES, U8, (0.5, 3),
     [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 2, 100, 127, 128, 255, 255, 255, 0, 255, 0, 255, 255]),
    ("Cast", F16, None, F16_VALUES, U8, (0.1, -100),
     [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 2, 100, 127, 128, 255, 255, 255, 0, 255, 0, 255, 255]),
    # Cast float16 -> SFIXED_POINT_8: the byte - 128
    ("Cast", F16, None, F16_VALUES, S8, (0.1, 0),
     [-128, -128, -128, -128, -127, -128, -128, -128, -128, -127, -126, -126, -28, -1, 0, 127, 127, 127,
      -128, 127, -128, 127, 127]),
    # Cast float -> other fixed point: rint(x * (1 / scale) - offset), ties to even after the offset
    ("Cast", F32, None, VALUES, S8, (0.1, 0),
     [2, 4, 4, -2, 10, -5, -15, -37, 5, 15, 25, 29, 127, 127, 127, 127, 127, 127, -128, 127, -128, 127, 127]),
    ("Cast", F32, None, VALUES, S8, (0.1, 3),
     [0, 0, 2, -6, 8, -8, -18, -40, 2, 12, 22, 26, 127, 127, 127, 127, 127, 127, -128, 127, -128, 127, 127]),
    ("Cast", F32, None, VALUES, S8, (1.0, -5),
     [5, 5, 5, 5, 6, 4, 4, 1, 6, 6, 8, 8, 106, 127, 127, 127, 127, 127, -128, 127, -128, 127, 127]),
    ("Cast", F32, None, VALUES, U16, (0.1, -101),
     [104, 104, 106, 98, 112, 96, 86, 64, 106, 116, 126, 130, 1110, 1377, 1385, 2656, 2668, 3103, 0, 65535, 0,
      65535, 65535]),
    ("Cast", F32, None, VALUES, S16, (0.5, 3),
     [-2, -2, -2, -4, -1, -4, -6, -10, -2, 0, 2, 3, 199, 252, 254, 508, 510, 597, -603, 32767, -32768, 32767,
      32767]),
    ("Cast", F16, None, F16_VALUES, S16, (0.1, 0),
     [2, 4, 4, -2, 10, -5, -15, -37, 5, 15, 25, 29, 1009, 1276, 1284, 2555, 2568, 3002, -3002, 32767, -32768,
      32767, 32767]),
    # Cast fixed -> float
    ("Cast", U8, (0.1, -100), BYTE_CODES, F32, None, [0.0, 1.0, 5.0, 100.0, 127.0, 128.0, 200.0, 255.0]),
    ("Cast", U8, (0.5, 0), BYTE_CODES, F16, None, [0.0, 1.0, 5.0, 100.0, 127.0, 128.0, 200.0, 255.0]),
    ("Cast", S8, (0.1, 3), [c - 128 for c in BYTE_CODES], F16, None,
     [0.0, 1.0, 5.0, 100.0, 127.0, 128.0, 200.0, 255.0]),
    ("Cast", S8, (0.1, 3), [c - 128 for c in BYTE_CODES], F32, None,
     [-12.5, -12.40000057220459, -12.0, -2.5, 0.20000000298023224, 0.30000001192092896, 7.5, 13.0]),
    ("Cast", U16, (0.1, -100), [0, 200, 1000, 20000, 25400, 25600, 40000, 51000], F16, None,
     [-10.0, 10.0, 90.0, 1990.0, 2530.0, 2550.0, 3990.0, 5088.0]),
    # Cast fixed point <-> plain integers
    ("Cast", U8, (0.1, -128), BYTE_CODES, I32, None, [0, 1, 5, 100, 127, 128, 200, 255]),
    ("Cast", U8, (0.1, -128), BYTE_CODES, U32, None, [0, 1, 5, 100, 127, 128, 200, 255]),
    ("Cast", U8, (0.1, -128), BYTE_CODES, I8, None, [-128, -127, -123, -28, -1, 0, 72, 127]),
    ("Cast", S8, (10.0, 0), [-100, 50, 127, 1], I8, None, [-100, 50, 127, 1]),
    ("Cast", S8, (0.5, 0), list(range(-5, 6)), I32, None, [-2, -2, -2, -1, 0, 0, 0, 1, 2, 2, 2]),
    ("Cast", S8, (0.1, 3), [-128, -127, -28, 0, 72, 127], I32, None, [-12, -12, -2, 0, 8, 13]),
    ("Cast", S16, (0.1, 3), [-128, -127, -28, 0, 72, 127, -1, 1], I32, None, [-12, -12, -2, 0, 8, 13, 0, 0]),
    ("Cast", U16, (0.5, -1), list(range(8)), I32, None, [0, 0, 0, 1, 2, 2, 2, 3]),
    ("Cast", I32, None, [-3, 0, 5, 300, 70000], U8, (1.0, 0), [0, 0, 5, 255, 255]),
    ("Cast", I32, None, [-3, 0, 5, 300], U8, (0.5, -10), [0, 0, 5, 255]),
    ("Cast", I32, None, [-3, 0, 5, 300, 70000], U16, (0.5, -10), [0, 0, 5, 300, 65535]),
    ("Cast", I32, None, [-3, 0, 5, 300], S8, (0.5, 3), [-9, -3, 7, 127]),
    ("Cast", U8, (0.1, -128), [0, 1, 100, 128, 200, 255], U16, (0.01, 0), [0, 0, 0, 0, 720, 1270]),
]
IDS = [f"{c[0]}-{NAMES[c[1]]}{c[2] or ''}-{NAMES[c[4]]}{c[5] or ''}-{i}" for i, c in enumerate(CASES)]


def run_case(backend: Backend, op, din, qin, values, dout, qout) -> list[float]:
    """The output of a one-node ``op`` graph (``din`` in, ``dout`` out) on ``backend``."""
    x = np.array([values], dtype=np.float64).astype(STORAGE[din])
    ctx = backend.context()
    try:
        g = ctx.graph("rounding")
        t = g.input("x", x.shape, din, quant=qin)
        g.node(op, [t], outputs=[("y", x.shape, dout, qout)], app_read=True)
        g.finalize()
        return g.execute({"x": x})["y"].astype(np.float64).ravel().tolist()
    finally:
        ctx.free()


@pytest.mark.parametrize("op,din,qin,values,dout,qout,want", CASES, ids=IDS)
def test_ours_computes_the_vendors_codes(our_backend, op, din, qin, values, dout, qout, want):
    got = run_case(our_backend, op, din, qin, values, dout, qout)
    assert got == want, f"qnnemu {op} {NAMES[din]}{qin or ''} -> {NAMES[dout]}{qout or ''} of {values}: " \
                        f"{got}, the vendor's: {want}"


@pytest.mark.parametrize("op,din,qin,values,dout,qout,want", CASES, ids=IDS)
def test_vendor_computes_the_recorded_codes(vendor_backend, op, din, qin, values, dout, qout, want):
    """The evidence for CASES: the vendor's library computes them."""
    got = run_case(vendor_backend, op, din, qin, values, dout, qout)
    assert got == want, f"vendor {op} {NAMES[din]}{qin or ''} -> {NAMES[dout]}{qout or ''} of {values}: " \
                        f"{got}, recorded: {want}"
