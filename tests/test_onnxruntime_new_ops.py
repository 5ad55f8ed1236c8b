"""ONNX models with the ops ONNX Runtime's QNN EP maps onto the new QNN ops (GRU -> Gru, IsNaN
-> IsNan, NonZero, RotaryEmbedding, RandomUniformLike / RandomNormalLike, com.microsoft
GroupQueryAttention) or lowers to existing ones (ThresholdedRelu, com.microsoft Inverse 2x2,
Identity), run through the EP with the CPU fallback disabled: on qnnemu, compared with ORT's
CPU EP; on the vendor's libQnnHtp.so, compared with qnnemu.

The vendor runs in a subprocess (this file as a script) with ``soc_model`` SM8650: its v68
default has no Gru / RotaryEmbedding kernels, and its SoC setting is process-wide, so it must
not leak into other modules' vendor tests.  It computes float32 graphs in float16 there:
vendor-vs-ours tolerance F16_TOL relative to the output's magnitude; ours vs the CPU EP
1e-4 (float32).  Models the vendor cannot run are pinned as failures: the random ops (the EP
leaves the model's input unconsumed, and the vendor fails graphExecute on a graph input no node
reads; qnnemu runs them).  GroupQueryAttention needs the EP's ``op_affinity`` option.  ONNX Erf
is not mapped by the EP ("not supported by QNN EP"), so no model here.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from vendor import our_library, vendor_env, vendor_library  # noqa: E402

FLOAT_RTOL = 1e-4
F16_TOL = 5e-3
SM8650 = "57"
OPTIONS = {"enable_htp_fp16_precision": "0", "offload_graph_io_quantization": "0"}
MODELS: dict = {}


def model(name):
    def register(fn):
        MODELS[name] = fn
        return fn
    return register


def _make(nodes, inputs, outputs, inits=(), opset=17, ms=False):
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=ops)
    m.ir_version = 10
    return m


def vi(name, et, shape):
    return helper.make_tensor_value_info(name, et, shape)


def _gru(direction, lbr, bias=True, h0=True, T=5, B=2, I=4, H=6, seed=0):
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((D, 3 * H, I)) * 0.4).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((D, 3 * H, H)) * 0.4).astype(np.float32), "R")]
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal((D, 6 * H)) * 0.2).astype(np.float32), "B"))
    ins = ["x", "W", "R", "B" if bias else "", "", "h0" if h0 else ""]
    while ins[-1] == "":
        ins.pop()
    inputs = [vi("x", TensorProto.FLOAT, [T, B, I])] + ([vi("h0", TensorProto.FLOAT, [D, B, H])] if h0 else [])
    m = _make([helper.make_node("GRU", ins, ["Y", "Y_h"], hidden_size=H, direction=direction,
                                linear_before_reset=lbr)], inputs,
              [vi("Y", TensorProto.FLOAT, [T, D, B, H]), vi("Y_h", TensorProto.FLOAT, [D, B, H])], inits)
    feeds = {"x": rng.standard_normal((T, B, I)).astype(np.float32)}
    if h0:
        feeds["h0"] = rng.standard_normal((D, B, H)).astype(np.float32)
    return m, feeds


for _d, _l, _b, _h in (("forward", 1, True, True), ("forward", 0, True, True),
                       ("reverse", 1, True, True), ("bidirectional", 0, True, True),
                       ("forward", 0, False, False)):
    model(f"gru-{_d}-lbr{_l}" + ("" if _b else "-no-bias-no-h0"))(
        lambda d=_d, l=_l, b=_b, h=_h: _gru(d, l, b, h))


@model("isnan")
def _isnan():
    x = np.array([[1.0, np.nan, -2.0], [np.nan, 0.0, 3.0]], np.float32)  # no inf: v75 says NaN
    return _make([helper.make_node("IsNaN", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [2, 3])],
                 [vi("y", TensorProto.BOOL, [2, 3])], opset=20), {"x": x}


@model("nonzero")
def _nonzero():
    x = np.array([[0, 1.5, 0, -2], [3, 0, 0, 1e-9]], np.float32)  # 1e-9: 0 in float16
    m = _make([helper.make_node("NonZero", ["x"], ["y"])], [vi("x", TensorProto.FLOAT, [2, 4])],
              [vi("y", TensorProto.INT64, [2, 8])], opset=13)
    return m, {"x": x}


def _rope(three_d, interleaved, rot=None, seed=1):
    rng = np.random.default_rng(seed)
    B, N, S, H, P = 2, 3, 4, 8, 16
    rd = rot or H
    ang = rng.uniform(0, 2 * np.pi, (P, rd // 2))
    inits = [numpy_helper.from_array(np.cos(ang).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(ang).astype(np.float32), "sin")]
    shape = [B, S, N * H] if three_d else [B, N, S, H]
    kw = {"interleaved": int(interleaved)}
    if three_d:
        kw["num_heads"] = N
    if rot:
        kw["rotary_embedding_dim"] = rot
    m = _make([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], **kw)],
              [vi("x", TensorProto.FLOAT, shape), vi("pos", TensorProto.INT64, [B, S])],
              [vi("y", TensorProto.FLOAT, shape)], inits, opset=23)
    return m, {"x": rng.standard_normal(shape).astype(np.float32),
               "pos": rng.integers(0, P, (B, S)).astype(np.int64)}


model("rope-3d")(lambda: _rope(True, False))
model("rope-3d-interleaved")(lambda: _rope(True, True))
model("rope-4d-partial")(lambda: _rope(False, False, rot=4))


@model("thresholded-relu")
def _trelu():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 12)
    return _make([helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=0.5)],
                 [vi("x", TensorProto.FLOAT, [2, 12])], [vi("y", TensorProto.FLOAT, [2, 12])]), {"x": x}


@model("inverse-2x2")
def _inverse():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 2, 2)) + 2 * np.eye(2)).astype(np.float32)
    return _make([helper.make_node("Inverse", ["x"], ["y"], domain="com.microsoft")],
                 [vi("x", TensorProto.FLOAT, [3, 2, 2])], [vi("y", TensorProto.FLOAT, [3, 2, 2])],
                 ms=True), {"x": x}


@model("identity")
def _identity():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return _make([helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                 [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])]), {"x": x}


def _random(op, attrs):
    m = _make([helper.make_node(op, ["x"], ["y"], **attrs)], [vi("x", TensorProto.FLOAT, [50, 40])],
              [vi("y", TensorProto.FLOAT, [50, 40])])
    return m, {"x": np.zeros((50, 40), np.float32)}


model("random-uniform")(lambda: _random("RandomUniformLike", {"low": -1.0, "high": 2.0, "seed": 3.0}))
model("random-normal")(lambda: _random("RandomNormalLike", {"mean": 0.5, "scale": 0.25, "seed": 3.0}))


@model("gqa")
def _gqa():
    rng = np.random.default_rng(3)
    B, S, NH, KV, H, L = 1, 1, 4, 2, 16, 8
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    shapes = [[B, S, NH * H], [B, S, KV * H], [B, S, KV * H], [B, KV, L, H], [B, KV, L, H], [B], [1]]
    types = [TensorProto.FLOAT] * 5 + [TensorProto.INT32] * 2
    m = _make([helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=NH, kv_num_heads=KV)],
              [vi(n, t, s) for n, t, s in zip(names, types, shapes)],
              [vi("out", TensorProto.FLOAT, [B, S, NH * H]),
               vi("present_key", TensorProto.FLOAT, [B, KV, L, H]),
               vi("present_value", TensorProto.FLOAT, [B, KV, L, H])], ms=True)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names[:5], shapes)}
    feeds["seqlens_k"] = np.array([5], np.int32)
    feeds["total_sequence_length"] = np.array([6], np.int32)
    return m, feeds


VENDOR_FAILS = {"random-uniform", "random-normal"}
RANDOM = {"random-uniform", "random-normal"}


def gqa_affinity(directory: Path) -> str:
    """The EP's ``op_affinity`` file that places GroupQueryAttention on the HTP (it is off by
    default)."""
    path = directory / "op_affinity.json"
    path.write_text(json.dumps({"op_type": {"GroupQueryAttention": "htp"}}))
    return str(path)


def run_ep(name, backend_path, extra, directory):
    import qnnemu.onnxruntime as qort
    m, feeds = MODELS[name]()
    options = {"backend_path": str(backend_path), **OPTIONS, **extra}
    if name == "gqa":
        options["op_affinity"] = gqa_affinity(directory)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return qort.session(m, provider_options=options, session_options=so).run(None, feeds)


@pytest.fixture(scope="module")
def vendor_results(tmp_path_factory):
    if vendor_library() is None:
        pytest.skip("the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed")
    out = tmp_path_factory.mktemp("vendor_ep")
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent),
                                         str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, __file__, str(out)], env=env, capture_output=True,
                          text=True, timeout=900)
    path = out / "vendor.pkl"
    assert proc.returncode == 0 and path.exists(), f"vendor subprocess: {proc.stderr[-3000:]}"
    return pickle.loads(path.read_bytes())


@pytest.fixture(scope="module")
def ours():
    if our_library() is None:
        pytest.skip("libQnnHtpEmu.so is not built")
    import ctypes
    return ctypes.CDLL(str(our_library()))  # held: ORT unloads a backend with its last session


def cpu(name):
    m, feeds = MODELS[name]()
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_close(got, want, rtol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} == {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got - want)))
    assert err <= rtol * scale, f"{what}: max difference {err:.3g} > {rtol * scale:.3g}"


@pytest.mark.float_math("float32")   # exact float32: compared with ORT's CPU EP
@pytest.mark.parametrize("name", sorted(set(MODELS) - RANDOM))
def test_ours_matches_cpu_ep(ours, tmp_path, name):
    # SM8650, as the vendor runs: the HTP has no float Gru/RotaryEmbedding/GQA/Select on v68
    # (docs/op-support.md)
    got = run_ep(name, our_library(), {"soc_model": SM8650}, tmp_path)
    want = cpu(name)
    for i, (g, w) in enumerate(zip(got, want)):
        if name == "nonzero":
            # ONNX's [rank, n]; the EP's static [rank, N] padded with -1, of the input cast to
            # float16 first (the EP's Cast): 1e-9 becomes 0 there.
            x = MODELS[name]()[1]["x"]
            w = np.argwhere(x.astype(np.float16) != 0).T
            assert g.dtype == np.int64, "NonZero: INT64 output"
            k = w.shape[1]
            assert np.array_equal(g[:, :k], w) and (g[:, k:] == -1).all(), \
                f"NonZero through the EP: {g.tolist()} vs the float16 input's {w.tolist()}, -1 after"
            continue
        if g.dtype == np.bool_:
            assert np.array_equal(g, w), f"{name} output {i}: {g} vs CPU {w}"
            continue
        if name == "gqa" and i > 0:
            # The CPU EP's past and present are distinct buffers: zeros after the new row,
            # where the HTP's cache update (and ours) keeps the past.
            n = int(MODELS[name]()[1]["seqlens_k"][0]) + 1
            g, w = g[:, :, :n], w[:, :, :n]
        assert_close(g, w, FLOAT_RTOL, f"{name} output {i}: ours vs ORT CPU EP")


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_ours_random_models(ours, tmp_path, name):
    """Dequantized u8 codes (the EP's form): within the encoding's range, with the right
    moments, and the same values in a second session (the seed attribute is set)."""
    a = run_ep(name, our_library(), {"soc_model": SM8650}, tmp_path)[0]
    b = run_ep(name, our_library(), {"soc_model": SM8650}, tmp_path)[0]
    assert np.array_equal(a, b), f"{name}: seeded, the same values in two sessions"
    if name == "random-uniform":
        assert a.min() >= -1.0 - 1e-6 and a.max() <= 2.0 + 1e-6, f"{name}: within [-1, 2]"
        assert abs(a.mean() - 0.5) < 0.06 and abs(a.std() - 3 / np.sqrt(12)) < 0.05, \
            f"{name}: mean {a.mean():.3f} std {a.std():.3f}"
    else:
        assert abs(a.mean() - 0.5) < 0.03 and abs(a.std() - 0.25) < 0.03, \
            f"{name}: mean {a.mean():.3f} std {a.std():.3f}"


@pytest.mark.parametrize("name", sorted(set(MODELS) - VENDOR_FAILS))
def test_vendor_matches_ours(ours, vendor_results, tmp_path, name):
    theirs = vendor_results[name]
    assert not isinstance(theirs, str), f"{name}: the vendor's EP session failed: {theirs}"
    got = run_ep(name, our_library(), {"soc_model": SM8650}, tmp_path)   # the vendor's SoC
    for i, (g, v) in enumerate(zip(got, theirs)):
        if g.dtype in (np.bool_, np.int64):
            assert np.array_equal(g, v), f"{name} output {i}: ours {g.tolist()} vendor {v.tolist()}"
        else:
            assert_close(g, v, F16_TOL, f"{name} output {i}: ours vs the vendor (float16 there)")


def test_vendor_failures_are_pinned(vendor_results):
    for name in sorted(VENDOR_FAILS):
        assert isinstance(vendor_results[name], str), \
            f"{name}: the vendor's EP session was expected to fail (see the module docstring)"


if __name__ == "__main__":   # the vendor's runs, for the vendor_results fixture
    directory = Path(sys.argv[1])
    lib = vendor_library()
    results = {}
    for _name in MODELS:
        try:
            results[_name] = run_ep(_name, lib, {"soc_model": SM8650}, directory)
        except Exception as e:  # recorded, asserted by the tests
            results[_name] = f"{type(e).__name__}: {str(e)[:400]}"
    (directory / "vendor.pkl").write_bytes(pickle.dumps(results))
