"""The new ops on the vendor's libQnnHtp.so and on ours: the same one-node graphs through the
QNN C ABI (qnnemu.client), pinning what the vendor does (accepts, refuses, computes) next to
what qnnemu does.  Skipped without onnxruntime_qnn.

Devices: the vendor's default (SM8350, v68), where it runs IsNan and NonZero in float32, an
SM8350 device where both refuse Gru, RotaryEmbedding and GroupQueryAttention at graphFinalize
(v68 has no float kernel for them; qnnemu: QNNEMU-htp-op-finalize, qnnemu/htp/op_support.py;
qnnemu's default device is v73, hence the explicit SoC), and an SM8650 (v75) device for Gru,
RotaryEmbedding and the random ops.  On v69+ the vendor computes float32 graphs in float16, so float results are
compared within float16 rounding: |ours - vendor| <= F16_TOL * max(1, max|vendor|).

The vendor's device configuration is process-wide (a device made later with another SoC
changes what earlier ones compute, even once freed), so each device's graphs run in a
subprocess of their own (this file run as a script), which also keeps other modules' vendor
tests on the default device.  Every case registers a graph builder in CASES; the tests assert
on both backends' results.

Never run here: graphs the vendor's process crashes on (ElementWiseMux with two or more
non-static candidates, Gru with a reset input, GroupQueryAttention with a rank-0
total_sequence_length pointing at dimensions); the class docstrings record them.  Recorded in
the IsNan docstring, not compared: v69+ IsNan reports infinities as NaN (v68 does not; qnnemu
follows v68 and IEEE).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vendor import our_library, vendor_env, vendor_library

HTP = vendor_library("libQnnHtp.so")

from qnnemu.headers import Q  # noqa: E402

F16_TOL = 4e-3
SM8650 = int(Q.QNN_SOC_MODEL_SM8650)
SM8350 = int(Q.QNN_SOC_MODEL_SM8350)
U8, S8, I32 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_INT_32
BOOL = Q.QNN_DATATYPE_BOOL_8
RNG = np.random.default_rng(20250305)
CASES: dict[str, tuple[int, object, int]] = {}   # name -> (SoC (0: default), builder, executions)


def case(name: str, build, soc: int = 0, executions: int = 1) -> str:
    CASES[name] = (soc, build, executions)
    return name


def run(be, build, executions=1):
    """Builds (``build(graph) -> feeds``), finalizes and executes a graph; returns the outputs
    (a list of them with executions > 1), or the stage and error of the first failing call."""
    from qnnemu.client import QnnCallError
    ctx = be.context()
    stage = "graphAddNode"
    try:
        g = ctx.graph("g")
        feeds = build(g)
        stage = "graphFinalize"
        g.finalize()
        stage = "graphExecute"
        outs = [{k: v.copy() for k, v in g.execute(feeds).items()} for _ in range(executions)]
        return outs[0] if executions == 1 else outs
    except QnnCallError as e:
        return {"failed": stage, "error": str(e)}
    finally:
        ctx.free()


def run_device(soc: int) -> dict[str, tuple]:
    """Every case of device ``soc`` on the vendor's backend and on ours: name -> (vendor, ours)."""
    from qnnemu.client import Backend, htp_device_config
    cfg = [htp_device_config("SOC", socModel=soc)] if soc else []
    results = {}
    with Backend(str(HTP), log_level=None, device_configs=cfg) as vendor, \
            Backend(str(our_library()), log_level=None, device_configs=cfg) as ours:
        for name, (s, build, executions) in CASES.items():
            if s == soc:
                results[name] = (run(vendor, build, executions), run(ours, build, executions))
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if HTP is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    out = {}
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent),
                                         str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    for soc in sorted({c[0] for c in CASES.values()}):
        path = tmp_path_factory.mktemp("vendor_new") / f"soc{soc}.pkl"
        proc = subprocess.run([sys.executable, __file__, str(soc), str(path)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and path.exists(), \
            f"device {soc}: the subprocess failed ({proc.returncode}): {proc.stderr[-3000:]}"
        out.update(pickle.loads(path.read_bytes()))
    return out


def both(results, name):
    return results[name]


def assert_ok(result, what):
    assert "failed" not in result, f"{what}: {result.get('failed')} failed: {result.get('error')}"


def assert_f16_close(got, want, what):
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    assert err <= F16_TOL * scale, f"{what}: max difference {err:.3g} > {F16_TOL * scale:.3g}"


def one_node(op, inputs, outputs, params=None):
    """A builder: ``inputs`` are (name, array, kind[, quant[, dtype]]) with kind "in" or
    "static"; ``outputs`` (name, shape, dtype[, quant])."""
    def build(g):
        ts, feeds = [], {}
        for item in inputs:
            name, arr, kind = item[:3]
            quant = item[3] if len(item) > 3 else None
            dtype = item[4] if len(item) > 4 else None
            if kind == "static":
                ts.append(g.static(name, arr, dtype=dtype, quant=quant))
            else:
                ts.append(g.input(name, arr.shape, arr.dtype if dtype is None else dtype,
                                  quant=quant))
                feeds[name] = arr
        g.node(op, ts, outputs, params=params or {}, app_read=True)
        return feeds
    return build


# ---- IsNan -------------------------------------------------------------------------------------
SPECIAL = np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, -np.nan]], np.float32)


def _isnan_case(kind):
    x, dtype, out, quant, oq = SPECIAL, None, BOOL, None, None
    if kind == "f16":
        x = SPECIAL.astype(np.float16)
    if kind == "u8-input":
        x, dtype, quant = np.array([[0, 7, 200], [1, 2, 3]], np.uint8), U8, (0.1, -3)
    out = {"out-uint8": Q.QNN_DATATYPE_UINT_8, "out-float32": Q.QNN_DATATYPE_FLOAT_32,
           "out-ufixed8": U8}.get(kind, out)
    if kind == "out-ufixed8":
        oq = (0.5, 0)
    return case(f"isnan-{kind}", one_node("IsNan", [("x", x, "in", quant, dtype)],
                                          [("y", x.shape, out) + ((oq,) if oq else ())]))


ISNAN = [_isnan_case(k) for k in ("f32", "f16", "u8-input", "out-uint8", "out-float32",
                                  "out-ufixed8")]


@pytest.mark.parametrize("name", ISNAN)
def test_isnan_equals_vendor(results, name):
    theirs, ours = both(results, name)
    assert_ok(theirs, f"vendor {name}")
    assert_ok(ours, f"our {name}")
    assert np.array_equal(ours["y"], theirs["y"]), f"{name}: ours {ours['y']} vendor {theirs['y']}"


# ---- NonZero -----------------------------------------------------------------------------------
NZ = np.array([[0, 1.5, 0], [-2, 0, np.nan]], np.float32)
_NONZERO = {
    "f32-nan-is-zero": (NZ, None, None, (6, 2), I32),
    "f16-nan-is-nonzero": (NZ.astype(np.float16), None, None, (6, 2), I32),
    "int32": (np.array([[0, 3, 0], [-1, 0, 2]], np.int32), None, None, (6, 2), I32),
    "u8-real-nonzero": (np.array([[0, 3, 0], [1, 0, 9]], np.uint8), U8, (0.1, -1), (6, 2), I32),
    "bool": (np.array([[0, 1, 0], [1, 0, 1]], np.uint8), BOOL, None, (6, 2), I32),
    "truncated": (NZ, None, None, (1, 2), I32),
    "padded": (NZ, None, None, (9, 2), I32),
    "uint32-wraps": (NZ, None, None, (6, 2), Q.QNN_DATATYPE_UINT_32),
    "uint8-saturates": (NZ, None, None, (6, 2), Q.QNN_DATATYPE_UINT_8),
    "int64": (NZ, None, None, (6, 2), Q.QNN_DATATYPE_INT_64),
    "float32": (NZ, None, None, (6, 2), Q.QNN_DATATYPE_FLOAT_32),
    "1d": (np.array([0, 2, 0, 3], np.float32), None, None, (4, 1), I32),
    "4d": (np.array([[[[0, 1], [2, 0]]]], np.float32), None, None, (4, 4), I32),
    "specials": (np.array([-0.0, np.inf, -np.inf, np.nan, 1e-40, 1e-45, 3.0], np.float32), None,
                 None, (7, 1), I32),
}
NONZERO = [case(f"nonzero-{k}", one_node("NonZero", [("x", x, "in", q, d)], [("y", shp, odt)]))
           for k, (x, d, q, shp, odt) in _NONZERO.items()]
NONZERO_BAD = case("nonzero-rank-by-n", one_node("NonZero", [("x", NZ, "in")], [("y", (2, 6), I32)]))


@pytest.mark.parametrize("name", NONZERO)
def test_nonzero_equals_vendor(results, name):
    theirs, ours = both(results, name)
    assert_ok(theirs, f"vendor {name}")
    assert_ok(ours, f"our {name}")
    assert ours["y"].dtype == theirs["y"].dtype and np.array_equal(ours["y"], theirs["y"]), \
        f"{name}: ours {ours['y'].tolist()} vendor {theirs['y'].tolist()}"


def test_nonzero_wrong_output_shape_is_refused(results):
    """[rank, N] instead of [N, rank]: the vendor runs it and writes values that are not the
    index list; qnnemu refuses the node (QNNEMU-NonZero-output-shape)."""
    theirs, ours = both(results, NONZERO_BAD)
    assert_ok(theirs, "vendor NonZero [2, 6]")
    listed = np.full((2, 6), -1)
    listed.reshape(-1)[:4] = [0, 1, 1, 0]
    assert not np.array_equal(theirs["y"], listed), "the vendor's [2, 6] result is not the list"
    assert ours.get("failed") == "graphAddNode" and "[QNNEMU-NonZero-" in ours["error"], \
        f"ours refuses the node with a NonZero rule (its negative test: test_ops_mux_nonzero): {ours}"


# ---- Gru ---------------------------------------------------------------------------------------
def gru_build(T=1, B=2, I=3, H=5, lbr=1, direction=0, dtype=np.float32, h0_shape=None,
              null_bias=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, B, I)).astype(dtype)
    ws = [(rng.standard_normal((H, I)) * 0.5).astype(dtype) for _ in range(3)]
    rs = [(rng.standard_normal((H, H)) * 0.5).astype(dtype) for _ in range(3)]
    bs = [(rng.standard_normal(H) * 0.3).astype(dtype) for _ in range(6)]
    h0 = rng.standard_normal(h0_shape or (1, B, H)).astype(dtype)

    def build(g):
        ins = [g.input("x", x.shape, dtype)] + [g.static(f"w{i}", w) for i, w in enumerate(ws + rs)]
        if null_bias:
            ins += [g._tensor(f"nb{i}", (0,), dtype, Q.QNN_TENSOR_TYPE_NULL) for i in range(6)]
        else:
            ins += [g.static(f"b{i}", b) for i, b in enumerate(bs)]
        ins.append(g.input("h0", h0.shape, dtype))
        g.node("Gru", ins, [("y", (T, B, H), dtype), ("yh", (1, B, H), dtype)],
               params={"direction": direction, "linear_before_reset": lbr, "time_major": True},
               app_read=True)
        return {"x": x, "h0": h0}
    return build


GRU = [case(f"gru-{k}", gru_build(**kw), SM8650) for k, kw in {
    "lbr1": {}, "lbr0": {"lbr": 0}, "reverse": {"direction": 1}, "batch1": {"B": 1},
    "batch3": {"B": 3}, "h0-2d": {"h0_shape": (2, 5)}, "float16": {"dtype": np.float16}}.items()]
GRU_V68 = case("gru-v68", gru_build(), SM8350)
GRU_SEQUENCE = case("gru-sequence", gru_build(T=4), SM8650)
GRU_NULL_BIAS = case("gru-null-bias", gru_build(null_bias=True), SM8650)


@pytest.mark.parametrize("name", GRU)
def test_gru_single_step_equals_vendor(results, name):
    """The EP's per-step Gru nodes on v75: ours and the vendor's within float16 rounding."""
    theirs, ours = both(results, name)
    assert_ok(theirs, f"vendor {name}")
    assert_ok(ours, f"our {name}")
    for out in ("y", "yh"):
        assert_f16_close(ours[out], theirs[out], f"{name} {out}: ours vs vendor")


def test_gru_vendor_quirks(results):
    """Pinned vendor behaviour: no float Gru kernel on v68 (both refuse at graphFinalize); a
    sequence (T = 4) only right at its first step (ours follows ONNX GRU at every step);
    NULL biases refused at graphFinalize (ours at graphAddNode, as required inputs)."""
    theirs, ours = both(results, GRU_V68)
    assert theirs.get("failed") == "graphFinalize", f"v68: the vendor has no Gru kernel: {theirs}"
    assert ours.get("failed") == "graphFinalize" and "[QNNEMU-htp-op-finalize]" in ours["error"], \
        f"v68: ours refuses Gru at graphFinalize as the vendor does: {ours}"
    theirs, ours = both(results, GRU_SEQUENCE)
    assert_ok(theirs, "vendor Gru T=4")
    assert_f16_close(ours["y"][0], theirs["y"][0], "Gru T=4: step 0 agrees")
    later = float(np.max(np.abs(ours["y"][1:] - theirs["y"][1:])))
    assert later > 0.05, f"Gru T=4: the vendor's later steps depart from ONNX GRU ({later:.3g})"
    theirs, ours = both(results, GRU_NULL_BIAS)
    assert theirs.get("failed") == "graphFinalize", f"vendor, NULL biases: {theirs}"
    assert ours.get("failed") == "graphAddNode" and "[QNNEMU-" in ours["error"], \
        f"ours, NULL biases: refused by a rule (the core's NULL-input-position rule): {ours}"


# ---- RotaryEmbedding ---------------------------------------------------------------------------
def rope_build(x_shape=(2, 3, 4, 8), cache_shape=(16, 4), pos_shape=(2, 4), params=None,
               dtype=np.float32, pos_dtype=np.int32, quant=None, pos_values=None):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    ang = RNG.uniform(0, 2 * np.pi, cache_shape)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    rows = cache_shape[0] if len(cache_shape) == 2 else 1
    pos = RNG.integers(0, rows, pos_shape) if pos_shape else None
    if pos_values is not None:
        pos = np.asarray(pos_values).reshape(pos_shape)

    def build(g):
        if quant:
            cq = (1 / 127, -127)

            def enc(a, q):
                return np.clip(np.rint(a / q[0]) - q[1], 0, 255).astype(np.uint8)
            ins = [g.input("x", x_shape, U8, quant=quant),
                   g.static("cos", enc(cos, cq), U8, quant=cq),
                   g.static("sin", enc(sin, cq), U8, quant=cq)]
            feeds = {"x": enc(x, quant)}
            out = ("y", x_shape, U8, quant)
        else:
            ins = [g.input("x", x_shape, dtype), g.static("cos", cos.astype(dtype)),
                   g.static("sin", sin.astype(dtype))]
            feeds = {"x": x.astype(dtype)}
            out = ("y", x_shape, dtype)
        if pos is not None:
            ins.append(g.input("pos", pos.shape, pos_dtype))
            feeds["pos"] = pos.astype(pos_dtype)
        g.node("RotaryEmbedding", ins, [out], params=params or {}, app_read=True)
        return feeds
    return build


ROPE = [case(f"rope-{k}", rope_build(**kw), SM8650) for k, kw in {
    "base": {}, "interleaved": {"params": {"interleaved": True}},
    "rot4": {"cache_shape": (16, 2), "params": {"rotary_embedding_dim": 4}},
    "rot4-interleaved": {"cache_shape": (16, 2),
                         "params": {"rotary_embedding_dim": 4, "interleaved": True}},
    "dim0-identity": {"params": {"rotary_embedding_dim": 0}},
    "dim5-as-4": {"cache_shape": (16, 2), "params": {"rotary_embedding_dim": 5}},
    "wide-cache": {"cache_shape": (16, 6), "params": {"rotary_embedding_dim": 8}},
    "pos-1xS": {"pos_shape": (1, 4)}, "pos-S": {"pos_shape": (4,)},
    "pos-uint32": {"pos_dtype": np.uint32},
    "no-pos-2d-cache": {"pos_shape": None},
    "no-pos-3d-cache": {"pos_shape": None, "cache_shape": (2, 4, 4)},
    "x-3d-extra-pos-rows": {"x_shape": (3, 4, 8), "pos_shape": (2, 4)},
    "3d-cache-with-pos-row0": {"cache_shape": (2, 4, 4), "pos_values": [[0, 3, 1, 2], [3, 2, 1, 0]]},
    "float16": {"dtype": np.float16}}.items()]
ROPE_U8 = case("rope-u8", rope_build(quant=(0.05, -128)), SM8650)
ROPE_REFUSED = [
    (case("rope-pos-int64", rope_build(pos_dtype=np.int64), SM8650), "graphFinalize",
     "graphAddNode", "[QNNEMU-RotaryEmbedding-"),
    (case("rope-3d-cache-pos-outside-row0", rope_build(cache_shape=(2, 4, 4), pos_shape=(1, 4),
                                                       pos_values=[0, 5, 1, 2]), SM8650),
     "graphExecute", "graphExecute", None),
    (case("rope-pos-outside", rope_build(cache_shape=(3, 4), pos_shape=(1, 4),
                                         pos_values=[0, 1, 2, 5]), SM8650),
     "graphExecute", "graphExecute", None),
    (case("rope-v68", rope_build(), SM8350), "graphFinalize", "graphFinalize", "[QNNEMU-htp-op-finalize]"),
]


@pytest.mark.parametrize("name", ROPE)
def test_rope_equals_vendor(results, name):
    theirs, ours = both(results, name)
    assert_ok(theirs, f"vendor {name}")
    assert_ok(ours, f"our {name}")
    assert_f16_close(ours["y"], theirs["y"], f"{name}: ours vs vendor")


def test_rope_quantized_equals_vendor(results):
    theirs, ours = both(results, ROPE_U8)
    assert_ok(theirs, "vendor u8 RotaryEmbedding")
    assert_ok(ours, "our u8 RotaryEmbedding")
    d = np.abs(ours["y"].astype(int) - theirs["y"].astype(int))
    assert d.max() <= 2, f"u8 RotaryEmbedding: codes within 2 LSB of the vendor's (max {d.max()})"


@pytest.mark.parametrize("name,vendor_stage,our_stage,rule", ROPE_REFUSED,
                         ids=[c[0] for c in ROPE_REFUSED])
def test_rope_refusals_match_vendor(results, name, vendor_stage, our_stage, rule):
    """What the vendor refuses, qnnemu refuses, earlier where it can and with a rule (each
    rule's own negative test is in tests/test_ops_attention.py): INT_64
    position_ids (vendor: graphFinalize), a position outside the cache (or outside the first
    row of a 3-D cache; both: graphExecute), v68 (no kernel: both at graphFinalize; the rule's own
    negative test is in tests/test_op_support.py)."""
    theirs, ours = both(results, name)
    assert theirs.get("failed") == vendor_stage, f"{name}: vendor fails at {vendor_stage}: {theirs}"
    if our_stage is None:
        assert_ok(ours, f"{name}: ours")
        return
    assert ours.get("failed") == our_stage, f"{name}: ours fails at {our_stage}: {ours}"
    assert rule is None or rule in ours["error"], f"{name}: ours answers with a {rule}...] rule: {ours['error']}"


# ---- RandomUniformLike / RandomNormalLike ------------------------------------------------------
def random_build(op="RandomUniformLike", params=None, out=U8, quant=(3 / 255, -85), seed=3.0,
                 nodes=1, shape=(8, 125), shape_data=None):
    def build(g):
        ins = [g.static("shape", np.array(shape if shape_data is None else shape_data, np.uint32))]
        if seed is not None:
            ins.append(g.static("seed", np.array([seed], np.float32)))
        for k in range(nodes):
            g.node(op, ins, [(f"y{k}", shape, out) + ((quant,) if quant else ())],
                   params=params or {}, app_read=True, name=f"r{k}")
        return {}
    return build


RANDOM = {
    "RandomUniformLike": case("random-uniform", random_build(
        params={"low": -1.0, "high": 2.0}, nodes=2), SM8650, executions=2),
    "RandomNormalLike": case("random-normal", random_build(
        "RandomNormalLike", {"mean": 0.0, "scale": 1.0}, quant=(8 / 255, -128), nodes=2),
        SM8650, executions=2),
}
UNSEEDED = [case(f"random-unseeded-{k}", random_build(seed=None), SM8650) for k in range(2)]
RANDOM_FLOAT = case("random-float32-output", random_build(out=np.float32, quant=None), SM8650)
SEEDS = [case(f"random-seed-{s}", random_build(params={"low": -1.0, "high": 2.0}, seed=s), SM8650)
         for s in (3.0, 4.0)]
SHAPE_IGNORED = case("random-shape-ignored", random_build(shape=(3, 2), shape_data=(2, 3),
                                                          quant=(1 / 255, 0)), SM8650)


@pytest.mark.parametrize("op", sorted(RANDOM))
def test_random_codes_and_seed_pattern_match_vendor(results, op):
    """The EP's configuration (u8 codes on [low, high]): both cover the code range with the
    same moments (within sampling error), both repeat a seeded draw in every execution and in
    two nodes."""
    theirs, ours = both(results, RANDOM[op])
    for who, res in (("vendor", theirs), ("ours", ours)):
        assert isinstance(res, list), f"{who} {op}: {res}"
        a, b = res
        assert np.array_equal(a["y0"], b["y0"]), f"{who} {op}: seeded, equal executions"
        assert np.array_equal(a["y0"], a["y1"]), f"{who} {op}: seeded, equal nodes"
    v = theirs[0]["y0"].astype(np.float64)
    o = ours[0]["y0"].astype(np.float64)
    n = v.size
    assert abs(v.mean() - o.mean()) < 6 * v.std() * np.sqrt(2 / n), \
        f"{op}: mean code vendor {v.mean():.2f} ours {o.mean():.2f}"
    assert abs(v.std() - o.std()) < 0.08 * v.std(), \
        f"{op}: code std vendor {v.std():.2f} ours {o.std():.2f}"
    if op == "RandomUniformLike":  # (ours: the end codes carry half a bin of real values)
        assert max(v.min(), o.min()) <= 2 and min(v.max(), o.max()) >= 253, \
            f"{op}: codes span 0..255 (vendor {v.min()}..{v.max()}, ours {o.min()}..{o.max()})"


def test_random_unseeded_differs_per_graph(results):
    (v1, o1), (v2, o2) = both(results, UNSEEDED[0]), both(results, UNSEEDED[1])
    assert not np.array_equal(v1["y0"], v2["y0"]), "vendor: no seed, two graphs differ"
    assert not np.array_equal(o1["y0"], o2["y0"]), "ours: no seed, two graphs differ"


def test_random_vendor_quirks(results):
    """Pinned: the vendor takes only 8-bit fixed-point outputs (float32 fails graphFinalize;
    qnnemu refuses at graphAddNode), ignores the seed's value (qnnemu does not: ONNX's seed
    semantics) and ignores the shape input (so does qnnemu, with a warning)."""
    theirs, ours = both(results, RANDOM_FLOAT)
    assert theirs.get("failed") == "graphFinalize", f"vendor, float32 output: {theirs}"
    assert ours.get("failed") == "graphAddNode" and \
        "[QNNEMU-RandomUniformLike-" in ours["error"], f"ours, float32 output: {ours}"
    (v3, o3), (v4, o4) = both(results, SEEDS[0]), both(results, SEEDS[1])
    assert np.array_equal(v3["y0"], v4["y0"]), "the vendor's draw ignores the seed's value"
    assert not np.array_equal(o3["y0"], o4["y0"]), "ours depends on the seed's value"
    theirs, ours = both(results, SHAPE_IGNORED)
    assert theirs["y0"].shape == ours["y0"].shape == (3, 2), "the declared output decides"


# ---- ops the vendor does not compute -----------------------------------------------------------
_A = RNG.standard_normal((2, 3)).astype(np.float32)
_B = RNG.standard_normal((2, 3)).astype(np.float32)
MUX_ONE = case("mux-one-candidate", one_node(
    "ElementWiseMux", [("s", np.array([0], np.int32), "in"), ("a", _A, "in")],
    [("y", (2, 3), np.float32)]), SM8650)
MUX_STATIC = case("mux-static-candidates", one_node(
    "ElementWiseMux", [("s", np.array([1], np.int32), "in"), ("a", _A, "static"),
                       ("b", _B, "static")], [("y", (2, 3), np.float32)]), SM8650)


def test_mux_vendor_computes_nothing_but_one_candidate(results):
    """ElementWiseMux: one candidate passes through on both; with static candidates the vendor
    writes values unrelated to them (zeros, or what the output buffer held), ours selects (with
    graph-input candidates the vendor crashes: not run)."""
    theirs, ours = both(results, MUX_ONE)
    # The vendor hands the one candidate through untouched; ours computes the graph in float16
    # math on SM8650 (docs/numerics.md), so its pass-through is the float16-rounded input.
    assert np.array_equal(theirs["y"], _A), "one candidate: the vendor passes it through"
    assert np.allclose(ours["y"], _A, rtol=1e-3, atol=0), "one candidate: ours, within float16 rounding"
    theirs, ours = both(results, MUX_STATIC)
    assert_ok(theirs, "vendor ElementWiseMux, static candidates")
    assert not np.array_equal(theirs["y"], _B), \
        f"the vendor's result is not the selected candidate: {theirs['y']}"
    assert np.allclose(ours["y"], _B, rtol=1e-3, atol=0), "ours selects candidate 1 (float16 math)"


_X = (RNG.standard_normal((2, 3, 3)) + 2 * np.eye(3)).astype(np.float32)
MISSING = {op: [case(f"missing-{op}-{soc}", one_node(op, [("x", _X, "in")],
                                                     [("y", _X.shape, np.float32)]), soc)
                for soc in (0, SM8650)]
           for op in ("Erf", "Identity", "Inverse", "ThresholdedRelu")}


@pytest.mark.parametrize("op", sorted(MISSING))
def test_ops_missing_from_the_vendor_are_refused_on_ours(results, op):
    """The HTP has no such op on any arch: both refuse the graph at graphFinalize (qnnemu's
    values, under QNNEMU_OP_SUPPORT=all, are tested in tests/test_ops_erf_identity_inverse.py)."""
    for name in MISSING[op]:
        theirs, ours = both(results, name)
        assert theirs.get("failed") == "graphFinalize", f"{name}: the vendor has no {op}: {theirs}"
        assert ours.get("failed") == "graphFinalize" and "[QNNEMU-htp-op-finalize]" in ours["error"], \
            f"{name}: ours refuses {op} at graphFinalize as the vendor does: {ours}"


def gqa_build(b=1, s=1, nh=4, kvh=2, hd=16, length=8, total=6, seqlens=None, rotary=False,
              pos_ids=False, scale=None, dtype=np.float32, nulls=True, seed=0):
    """A GroupQueryAttention graph as ORT's EP builds it: all ten inputs (NULL tensors for the
    absent ones), total_sequence_length of rank 0 (qnnemu.client passes it, as the EP does,
    with a NULL dimensions pointer: a rank-0 tensor pointing at dimensions crashes the
    vendor's process here)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, s, nh * hd)).astype(dtype)
    k = rng.standard_normal((b, s, kvh * hd)).astype(dtype)
    v = rng.standard_normal((b, s, kvh * hd)).astype(dtype)
    pk = rng.standard_normal((b, kvh, length, hd)).astype(dtype)
    pv = rng.standard_normal((b, kvh, length, hd)).astype(dtype)
    ang = rng.uniform(0, 2 * np.pi, (length, hd // 2))
    pos = rng.integers(0, length, (b, s)).astype(np.int32)
    sl = np.array(seqlens if seqlens is not None else [total - 1] * b, np.int32)

    def build(g):
        ins = [g.input("q", q.shape, dtype), g.input("sl", (b,), np.int32),
               g.input("tot", (), np.int32), g.input("k", k.shape, dtype),
               g.input("v", v.shape, dtype), g.input("pk", pk.shape, dtype),
               g.input("pv", pv.shape, dtype)]
        feeds = {"q": q, "k": k, "v": v, "pk": pk, "pv": pv, "sl": sl,
                 "tot": np.array(total, np.int32)}
        if rotary:
            ins += [g.static("cos", np.cos(ang).astype(dtype)), g.static("sin", np.sin(ang).astype(dtype))]
        if pos_ids:
            ins.append(g.input("pos", pos.shape, np.int32))
            feeds["pos"] = pos
        while nulls and len(ins) < 10:
            ins.append(g._tensor(f"null{len(ins)}", (0,), dtype, Q.QNN_TENSOR_TYPE_NULL))
        params = {"num_heads": nh, "kv_num_heads": kvh, "do_rotary": int(rotary)}
        if scale is not None:
            params["scale"] = scale
        g.node("GroupQueryAttention", ins, [("o", q.shape, dtype), ("prk", pk.shape, dtype),
                                            ("prv", pv.shape, dtype)], params=params, app_read=True)
        return feeds
    return build


GQA = [case(f"gqa-{k}", gqa_build(**kw), SM8650) for k, kw in {
    "token": {}, "prompt": {"s": 6}, "continued-prompt": {"s": 3, "total": 7},
    "batch-lengths": {"b": 2, "seqlens": [5, 3]}, "mha": {"kvh": 4}, "mqa": {"kvh": 1},
    "scale": {"scale": 0.2}, "rotary": {"rotary": True}, "rotary-prompt": {"rotary": True, "s": 6},
    "rotary-position-ids": {"rotary": True, "pos_ids": True}, "head-size-8": {"hd": 8},
    "float16": {"dtype": np.float16}}.items()]
GQA_V68 = case("gqa-v68", gqa_build(), SM8350)
GQA_LEFT_OFF = case("gqa-inputs-left-off", gqa_build(nulls=False), SM8650)


@pytest.mark.parametrize("name", GQA)
def test_gqa_equals_vendor(results, name):
    """GroupQueryAttention as the EP emits it, on v75: output and updated caches agree within
    float16 rounding (the caches keep the past around the new rows on both)."""
    theirs, ours = both(results, name)
    assert_ok(theirs, f"vendor {name}")
    assert_ok(ours, f"our {name}")
    for out in ("o", "prk", "prv"):
        assert_f16_close(ours[out], theirs[out], f"{name} {out}: ours vs vendor")


def test_gqa_vendor_refusals(results):
    """Pinned: no kernel on v68 (both refuse at graphFinalize); on v75 no kernel either for a
    node whose trailing optional inputs are left off rather than passed as NULL tensors, which
    qnnemu runs (its graph layer cannot tell a left-off input from an absent one)."""
    theirs, ours = both(results, GQA_V68)
    assert theirs.get("failed") == "graphFinalize", f"gqa-v68: vendor: {theirs}"
    assert ours.get("failed") == "graphFinalize" and "[QNNEMU-htp-op-finalize]" in ours["error"], \
        f"gqa-v68: ours refuses at graphFinalize as the vendor does: {ours}"
    theirs, ours = both(results, GQA_LEFT_OFF)
    assert theirs.get("failed") == "graphFinalize", f"gqa-inputs-left-off: vendor: {theirs}"
    assert_ok(ours, "gqa-inputs-left-off: ours")


if __name__ == "__main__":   # one device's cases, run by the ``results`` fixture
    with open(sys.argv[2], "wb") as f:
        pickle.dump(run_device(int(sys.argv[1])), f)
