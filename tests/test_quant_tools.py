"""One quantizer (qnnemu/spec/quant.py): the tools' float-file quantization (qnnemu-net-run,
``qnnemu.tools.quantize``) is the backend's Quantize op, bit for bit, and both are the vendor's.

The vendor's libQnnHtp.so quantizes a float tensor (a Quantize node, or a float -> fixed-point
Convert) as follows -- probed with scale 0.1 and dense sweeps of float32 values one ulp around
the half-LSB thresholds of five encodings:

- 8-bit codes: ``x * float32(1 / scale)`` rounded to float16, then half away from zero;
- 16-bit codes: the *exact* product ``x * float32(1 / scale)`` (not rounded to float32), then
  half away from zero.

The issue's near-ties at scale 0.1: [0.25, 0.35, 0.45, -0.25, 1.05] -> [3, 4, 5, -3, 11] in 8
bits (0.35 * 10 is 3.5 in float32 and float16) and [3, 3, 4, -3, 10] in 16 bits (the exact
product 3.4999999 stays below the tie).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from qnnemu.client import Backend
from qnnemu.headers import Q
from qnnemu.spec import quant
from qnnemu.tools import dequantize, quantize

S8, U8 = Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_8
S16, U16 = Q.QNN_DATATYPE_SFIXED_POINT_16, Q.QNN_DATATYPE_UFIXED_POINT_16
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
NEAR_TIES = np.array([[0.25, 0.35, 0.45, -0.25, 1.05]], np.float32)
# (dtype, offset) -> codes of NEAR_TIES at scale 0.1, as the vendor's Quantize gives them
VENDOR_NEAR_TIES = {
    (S8, 0): [3, 4, 5, -3, 11],
    (U8, -100): [103, 104, 105, 97, 111],
    (S16, 0): [3, 3, 4, -3, 10],
    (U16, -100): [103, 103, 104, 97, 110],
}
# encodings of the vendor sweeps: (dtype, scale, offset)
SWEEPS = [(S8, 0.1, 0), (U8, 0.0173, -128), (S16, 0.1, 0), (U16, 0.1, -30000),
          (S16, 0.0037, 0), (U16, 0.00123, -1000), (S16, 3.3e-4, 17)]
CODE_RANGE = {S8: (-128, 127), U8: (0, 255), S16: (-32768, 32767), U16: (0, 65535)}


def near_threshold_inputs(dtype: int, scale: float, offset: int) -> np.ndarray:
    """float32 values on and one ulp either side of the half-LSB thresholds in the code range."""
    lo, hi = CODE_RANGE[dtype]
    k = np.linspace(lo + offset - 1, hi + offset, 700).round()
    tie = ((k + 0.5) * np.float64(np.float32(scale))).astype(np.float32)
    x = np.concatenate([np.nextafter(tie, np.float32(-np.inf)), tie, np.nextafter(tie, np.float32(np.inf))])
    return x.astype(np.float32).reshape(1, -1)


def run_quantize(backend: Backend, op: str, x: np.ndarray, dtype: int, scale: float, offset: int) -> np.ndarray:
    """The codes a ``op`` node (float32 in, ``dtype`` out) computes on ``backend``."""
    ctx = backend.context()
    try:
        g = ctx.graph("q")
        t = g.input("x", x.shape, np.float32)
        g.node(op, [t], outputs=[("y", x.shape, dtype, (scale, offset))], app_read=True)
        g.finalize()
        return g.execute({"x": x})["y"].astype(np.int64)
    finally:
        ctx.free()


@pytest.mark.parametrize("dtype,offset", sorted(VENDOR_NEAR_TIES))
def test_tools_quantize_near_ties_are_the_vendors(dtype, offset):
    got = quantize(NEAR_TIES, dtype, {"encoding": ENC, "scale": 0.1, "offset": offset}).ravel().tolist()
    assert got == VENDOR_NEAR_TIES[dtype, offset], \
        f"tools.quantize of {NEAR_TIES.ravel().tolist()} at scale 0.1 offset {offset} ({dtype:#x}): {got}"


@pytest.mark.parametrize("dtype,offset", sorted(VENDOR_NEAR_TIES))
def test_backend_quantize_near_ties_equal_tools(our_backend, dtype, offset):
    tools = quantize(NEAR_TIES, dtype, {"encoding": ENC, "scale": 0.1, "offset": offset})
    ours = run_quantize(our_backend, "Quantize", NEAR_TIES, dtype, 0.1, offset)
    assert ours.tolist() == tools.astype(np.int64).tolist(), \
        f"our Quantize node {ours.tolist()} vs tools.quantize {tools.tolist()} ({dtype:#x}, offset {offset})"


@given(dtype=st.sampled_from([S8, U8, S16, U16]),
       scale=st.floats(2.0 ** -14, 16.0, width=32),
       offset_frac=st.floats(0.0, 1.0),
       seed=st.integers(0, 2**16))
def test_backend_and_tools_quantize_agree(our_backend, dtype, scale, offset_frac, seed):
    """Any per-tensor encoding: the tools' quantize and our backend's Quantize node give the same
    codes, for random values and values on/next to every kind of half-LSB threshold."""
    lo, hi = CODE_RANGE[dtype]
    offset = -round(lo + offset_frac * (hi - lo))  # zero point anywhere in the code range
    rng = np.random.default_rng(seed)
    codes = rng.integers(lo + offset - 2, hi + offset + 2, 64) + rng.choice([0.0, 0.5, 0.25], 64)
    ties = (codes * np.float64(np.float32(scale))).astype(np.float32)
    x = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)),
                        np.nextafter(ties, np.float32(-np.inf))]).reshape(1, -1)
    q = {"encoding": ENC, "scale": scale, "offset": offset}
    tools = quantize(x, dtype, q).astype(np.int64)
    ours = run_quantize(our_backend, "Quantize", x, dtype, scale, offset)
    differ = np.flatnonzero(tools != ours)
    assert differ.size == 0, (f"scale {scale} offset {offset} dtype {dtype:#x}: tools and backend differ at "
                              f"x={x.ravel()[differ[:5]].tolist()}: {tools.ravel()[differ[:5]].tolist()} vs "
                              f"{ours.ravel()[differ[:5]].tolist()}")
    back = dequantize(tools.astype(quant.dtypes.numpy_dtype(dtype)), q)
    assert np.array_equal(back, (np.float64(np.float32(scale)) * (tools + offset)).astype(np.float32)), \
        f"dequantize is scale * (code + offset) for scale {scale} offset {offset}"


def test_spec_dict_round_trip():
    """The JSON form <-> QuantSpec converter keeps per-tensor, bitwidth and per-axis encodings."""
    forms = [{"encoding": ENC, "scale": float(np.float32(0.1)), "offset": -128},
             {"encoding": Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET, "scale": 0.5, "offset": -8,
              "bitwidth": 4},
             {"encoding": Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET, "axis": 1,
              "scales": [0.5, 0.25], "offsets": [0, -3]}]
    for form in forms:
        assert quant.spec_to_dict(quant.spec_from_dict(form)) == form, f"round trip of {form}"
    assert quant.spec_from_dict(None) is None, "no encoding: None"
    with pytest.raises(ValueError, match="neither a scale"):
        quant.spec_from_dict({"encoding": Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION})


@pytest.mark.parametrize("dtype,offset", sorted(VENDOR_NEAR_TIES))
def test_vendor_quantize_near_ties(vendor_backend, dtype, offset):
    """The evidence for VENDOR_NEAR_TIES: the vendor's Quantize node computes them."""
    got = run_quantize(vendor_backend, "Quantize", NEAR_TIES, dtype, 0.1, offset).ravel().tolist()
    assert got == VENDOR_NEAR_TIES[dtype, offset], f"vendor Quantize ({dtype:#x}, offset {offset}): {got}"


@pytest.mark.parametrize("op", ["Quantize", "Convert"])
@pytest.mark.parametrize("dtype,scale,offset", SWEEPS)
def test_vendor_quantizes_like_the_tools(vendor_backend, op, dtype, scale, offset):
    """Bit for bit on float32 values at and one ulp around every half-LSB threshold: the vendor's
    float -> fixed-point Quantize and Convert give the codes of qnnemu.tools.quantize."""
    x = near_threshold_inputs(dtype, scale, offset)
    vendor = run_quantize(vendor_backend, op, x, dtype, scale, offset)
    tools = quantize(x, dtype, {"encoding": ENC, "scale": scale, "offset": offset}).astype(np.int64)
    differ = np.flatnonzero(vendor != tools)
    assert differ.size == 0, (f"vendor {op} ({dtype:#x}, scale {scale}, offset {offset}) differs from "
                              f"tools.quantize on {differ.size} of {x.size}: x={x.ravel()[differ[:5]].tolist()} "
                              f"vendor {vendor.ravel()[differ[:5]].tolist()} "
                              f"tools {tools.ravel()[differ[:5]].tolist()}")
