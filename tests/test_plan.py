"""The compiled execution plan (qnnemu/core/plan.py) and fixed-point arithmetic (spec/quant.py):
encodings, rounding, requantization at op boundaries, passthrough of integer codes, and the
float16 precision mode (QNN HTP backend documentation, "QNN HTP Precision")."""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library

from qnnemu.headers import Q
from qnnemu.ops.base import QuantSpec
from qnnemu.spec import quant
from qnnemu.spec.quant import Requantize

U8, S8, U16 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
AXIS = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
BLOCK = Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION


# -- quant.py --------------------------------------------------------------------------------

def test_code_range_storage_and_bitwidth():
    assert quant.code_range(U8) == (0, 255), "uint8 storage range"
    assert quant.code_range(S8) == (-128, 127), "int8 storage range"
    assert quant.code_range(S8, 4) == (-8, 7), "4-bit weights in int8 storage use the 4-bit range"
    assert quant.code_range(U16) == (0, 65535), "uint16 storage range"
    assert quant.code_range(Q.QNN_DATATYPE_UFIXED_POINT_4) == (0, 15), "UFIXED_POINT_4 range"


def test_dequantize_per_tensor_uses_qnn_sign_convention():
    spec = QuantSpec(ENC, 0.5, -10)
    got = quant.dequantize(np.array([0, 10, 20], np.uint8), spec)
    assert got.tolist() == [-5.0, 0.0, 5.0], "real = scale * (q + offset) with offset = -zero point"


def test_quantize_round_trip_and_clamp():
    spec = QuantSpec(ENC, 0.1, -128)
    x = np.array([-20.0, -0.05, 0.0, 0.05, 0.15, 100.0], np.float32)
    q = quant.quantize(x, spec, U8)
    assert q.dtype == np.uint8, "codes stored as uint8"
    assert q.tolist() == [0, 127, 128, 129, 130, 255], \
        "clamped at both ends; ties (-0.05, 0.05, 0.15 / 0.1) rounded half away from zero"


def test_per_axis_dequantize_broadcasts_along_axis():
    spec = QuantSpec(AXIS, np.array([1.0, 0.5, 0.25], np.float32), np.array([0, -2, 4], np.int32), axis=1)
    q = np.array([[4, 4, 4], [8, 8, 8]], np.int8)
    want = np.array([[4.0, 1.0, 2.0], [8.0, 3.0, 3.0]])
    assert np.array_equal(quant.dequantize(q, spec), want), "one (scale, offset) per index of axis 1"
    back = quant.quantize(want.astype(np.float32), spec, S8)
    assert np.array_equal(back, q), "per-axis quantize inverts dequantize"


def test_blockwise_expansion_scales_blocks_of_the_input_axis():
    # FullyConnected weight [out=2, in=4], axis 0; 2 blocks of 2 along dimension 1.
    spec = QuantSpec(BLOCK, np.array([0.5, 1.0], np.float32), np.zeros(2, np.int32), axis=0,
                     block_scales=np.array([[1, 2], [3, 4]], np.uint8))
    q = np.ones((2, 4), np.int8)
    got = quant.dequantize(q, spec)
    want = np.array([[0.5, 0.5, 1.0, 1.0], [3.0, 3.0, 4.0, 4.0]])
    assert np.array_equal(got, want), "scale = channel scale * integer block scale, blocks along dim 1"
    # HWIO conv filter [1, 1, in=4, out=2], axis 3 (last): blocks along dimension 2.
    spec_hwio = QuantSpec(BLOCK, spec.scale, spec.offset, axis=3, block_scales=spec.block_scales)
    got = quant.dequantize(np.ones((1, 1, 4, 2), np.int8), spec_hwio)
    assert np.array_equal(got[0, 0], want.T), "last-axis channels block the previous dimension"


@pytest.mark.parametrize("mode,want", [
    ("half_even", [-2, -2, 0, 0, 2, 2]),
    ("half_up", [-2, -1, 0, 1, 2, 3]),
    ("half_away_from_zero", [-3, -2, -1, 1, 2, 3]),
])
def test_requantize_rounding_modes(mode, want):
    r = Requantize(QuantSpec(ENC, 1.0, -128), U8, mode)
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], np.float32)
    assert (r(x).astype(int) - 128).tolist() == want, f"{mode} rounding of exact ties"


def test_same_encoding():
    a = QuantSpec(ENC, 0.5, -3)
    assert quant.same_encoding(a, QuantSpec(ENC, 0.5, -3)), "identical per-tensor encodings"
    assert not quant.same_encoding(a, QuantSpec(ENC, 0.5, -4)), "offsets differ"
    assert not quant.same_encoding(a, None), "float vs fixed point"


# -- plan through the ABI ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend():
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    from qnnemu.client import Backend
    with Backend(str(lib), log_level="error") as be:
        yield be


def _run(backend, build, precision=None):
    ctx = backend.context()
    try:
        g = ctx.graph("g", precision=precision)
        feeds = build(g)
        g.finalize()
        return g.execute(feeds)
    finally:
        ctx.free()


def _h16(v):
    """The HTP's float16 value of float64 ``v``: nearest, ties away from zero, 11 significant
    bits (subnormals below 2**-14), saturating at 131008 -- written independently of
    qnnemu.ops.base.htp_fp16_round."""
    v = np.asarray(v, np.float64)
    q = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - 10)
    return np.clip(np.sign(v) * np.floor(np.abs(v) / q + 0.5) * q, -131008, 131008)


def _out32(v):
    """float16 results delivered as float32: one float32 ulp away from zero."""
    v = np.asarray(v, np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - 23)
    return np.where(v == 0, 0.0, v + np.sign(v) * ulp).astype(np.float32)


@pytest.mark.parametrize("soc,float16", [("SM8350", False), ("SM8550", True)])
def test_float16_math_rounds_at_op_boundaries(soc, float16):
    """On a SoC computing float32 graphs in float16 math (v69+): graph inputs, every op result
    and the outputs' conversion as the HTP does them; on v68 exact float32.  The deprecated
    PRECISION config changes nothing."""
    from qnnemu.client import Backend, htp_device_config
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    x = np.array([[1.0 + 2 ** -11, 3.14159265, 1e-4, 70000.0]], np.float32)
    y = np.array([[2 ** -12, 2.71828183, 3e-4, 1.0]], np.float32)

    def build(g):
        a, b = g.input("a", x.shape), g.input("b", y.shape)
        s = g.node("ElementWiseAdd", [a, b], [("s", x.shape, np.float32)])
        g.node("ElementWiseMultiply", [s, s], [("p", x.shape, np.float32)], app_read=True)
        return {"a": x, "b": y}

    s16 = _h16(_h16(x) + _h16(y))
    want16 = _out32(_h16(s16 * s16))
    config = htp_device_config("SOC", socModel=getattr(Q, f"QNN_SOC_MODEL_{soc}"))
    with Backend(str(lib), log_level="error", device_configs=[config]) as be:
        got = _run(be, build)["p"]
        for precision in ("fp16", "fp32"):
            assert np.array_equal(_run(be, build, precision=precision)["p"], got), \
                f"{soc}: PRECISION {precision} changes nothing"
    assert got.dtype == np.float32, "float32 outputs stay float32"
    if not float16:
        assert np.array_equal(got, (x + y) * (x + y)), f"{soc} (v68) computes in float32"
        return
    assert np.array_equal(got, want16), f"{soc}: float16 at op boundaries: {got} vs {want16}"
    assert got[0, 0] > 1.0019, "the input 1 + 2**-11 is a tie, rounded away from zero (IEEE: to 1.0)"
    assert got[0, 3] == np.float32(131008.0078125), "70001**2 saturates at 131008 (no float16 inf on the HTP)"


def test_passthrough_keeps_codes_and_requantizes_on_new_encoding(backend):
    q = np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4) * 10

    def build(g):
        x = g.input("x", q.shape, U8, quant=(0.5, -7))
        g.node("Reshape", [x], [("same", (6, 4), U8, (0.5, -7))], app_read=True)
        g.node("Reshape", [x], [("other", (6, 4), U8, (1.0, 0))], app_read=True, name="r2")
        return {"x": q}

    out = _run(backend, build)
    assert np.array_equal(out["same"], q.reshape(6, 4)), "same encoding: codes pass through unchanged"
    real = 0.5 * (q.astype(np.float64) - 7)
    want = np.clip(np.rint(real), 0, 255).reshape(6, 4)
    assert np.array_equal(out["other"].astype(np.float64), want), "new encoding: requantized from real values"


def test_fixed_point_output_from_float_op(backend):
    """A float-in / quantized-out node: the plan quantizes the op's float result."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)

    def build(g):
        a = g.input("a", x.shape)
        g.node("Relu", [a], [("y", x.shape, U8, (1 / 255, 0))], app_read=True)
        return {"a": x}

    got = _run(backend, build)["y"].astype(np.int64)
    want = np.clip(np.rint(np.maximum(x, 0) * 255), 0, 255)
    assert np.array_equal(got, want), "Relu(float) quantized to uint8 at the op boundary"


def test_graph_output_may_feed_a_later_node(backend):
    """An APP_READ tensor is a graph output and may also be the input of later nodes (ONNX
    Runtime emits this when a model output is consumed again; the vendor accepts it)."""
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)

    def build(g):
        a = g.input("a", x.shape)
        r = g.node("Relu", [a], [("r", x.shape, np.float32)], app_read=True)
        g.node("ElementWiseAdd", [r, a], [("s", x.shape, np.float32)], app_read=True)
        return {"a": x}

    out = _run(backend, build)
    assert np.array_equal(out["r"], np.maximum(x, 0)), "the intermediate graph output is returned"
    assert np.array_equal(out["s"], np.maximum(x, 0) + x), "and consumed by the next node"


def test_htp_graph_config_union_with_non_boolean_bytes(backend):
    """QnnHtpGraph_CustomConfig_t is a union: VTCM_SIZE = 4 puts a 4 where bool members also
    live; graphCreate must record it, not fail (found by the context-binary work)."""
    from qnnemu.client import htp_graph_config
    ctx = backend.context()
    try:
        g = ctx.graph("vtcm", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=4)])
        x = g.input("x", (1, 4))
        g.node("Relu", [x], [("y", (1, 4), np.float32)], app_read=True)
        g.finalize()
        out = g.execute({"x": np.array([[-1, 0, 1, 2]], np.float32)})["y"]
    finally:
        ctx.free()
    assert out.tolist() == [[0, 0, 1, 2]], "graph created with VTCM_SIZE=4 runs"


def test_exact_and_single_pass_accumulation_agree_within_one_lsb(backend, monkeypatch):
    """QNNEMU_EXACT_ACCUMULATION: a 3x3x512 uint8 conv whose worst-case partial sums pass 2**24
    runs split into exact digit passes or in one float32 GEMM; the two differ by at most 1 LSB."""
    from qnnemu.core import plan
    rng = np.random.default_rng(7)
    q = rng.integers(0, 256, (1, 5, 5, 512)).astype(np.uint8)
    w = rng.integers(-127, 128, (3, 3, 512, 8)).astype(np.int8)

    def build(g):
        x = g.input("x", q.shape, U8, quant=(0.02, 0))
        tw = g.static("w", w, S8, quant=(0.01, 0))
        g.node("Conv2d", [x, tw], [("y", (1, 3, 3, 8), U8, (40.0, -128))], app_read=True,
               params={"stride": np.array([1, 1], np.uint32), "pad_amount": np.zeros((2, 2), np.uint32)})
        return {"x": q}

    outs = {}
    for exact in (True, False):
        monkeypatch.setattr(plan, "EXACT_ACCUMULATION", exact)
        outs[exact] = _run(backend, build)["y"].astype(np.int64)
    assert np.abs(outs[True] - outs[False]).max() <= 1, "single-pass within 1 LSB of the exact accumulator"
    real = np.einsum("hwc,hwco->o", 0.02 * q[0, :3, :3].astype(np.float64), 0.01 * w.astype(np.float64))
    assert abs(int(outs[True][0, 0, 0, 0]) - (real[0] / 40.0 + 128)) <= 1.5, "exact mode near the real value"
