"""The C execution engine (qnnemu/core/engine, csrc/engine.c; issue 13): programs compiled at
graphFinalize, the arena planned by liveness, Python fallback steps, the check mode, and the
converter kernels every lowering shares -- each bit-identical to the Python plan's converter."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, U8, GraphBuilder, new_context
from hypothesis import given, strategies as st

from qnnemu.core import engine as engine_mod
from qnnemu.core.engine import EngineMismatch, check_plan
from qnnemu.core.engine.lowering import LOWERINGS, load_lowerings
from qnnemu.headers import Q
from qnnemu.ops import _fast
from qnnemu.ops.base import QuantSpec, htp_fp16_round, htp_fp16_to_fp32
from qnnemu.spec.quant import Dequantizer, Requantize

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

lib, ffi = _fast.library()
ENC = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
CODE_TYPES = {Q.QNN_DATATYPE_UFIXED_POINT_8: (np.uint8, 0), Q.QNN_DATATYPE_SFIXED_POINT_8: (np.int8, 1),
              Q.QNN_DATATYPE_UFIXED_POINT_16: (np.uint16, 2), Q.QNN_DATATYPE_SFIXED_POINT_16: (np.int16, 3)}
MODES = {"half_even": 0, "half_up": 1, "half_away_from_zero": 2, "fp16_half_away_from_zero": 3,
         "exact_half_away_from_zero": 4}


def call(kernel: str, arrays, ints=(), dbls=()) -> None:
    """One converter kernel called directly with a qe_args of ``arrays``."""
    ptrs = ffi.new("void *[]", [ffi.cast("void *", a.ctypes.data) for a in arrays])
    ivals = ffi.new("int64_t[]", list(ints) or [0])
    dvals = ffi.new("double[]", list(dbls) or [0.0])
    args = ffi.new("qe_args *", {"p": ptrs, "i": ivals, "d": dvals, "np": len(arrays),
                                 "ni": len(ints), "nd": len(dbls)})
    assert getattr(lib, kernel)(args) == 0, f"{kernel} returned an error"


def float32_bits(n: int, seed: int) -> np.ndarray:
    """Random float32 bit patterns (every class: zeros, subnormals, normals, inf, NaN) plus the
    float16 rounding boundaries."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 65504.0, 65520.0, 131008.0,
                      131072.0, np.inf, -np.inf, np.nan, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11], np.float32)
    # around the float16 subnormal grid's ties (0x32ffffff: 2**-25 less half an ulp, which a
    # float32 q + 0.5f would round up), its top (0x387fffff) and the float32 subnormals
    near = np.array([0x32FFFFFF, 0x33000000, 0x33000001, 0x33BFFFFF, 0x33C00000, 0x33C00001, 0x387FFFFF,
                     0x38800000, 0x00000001, 0x007FFFFF, 0x00800000], np.uint32).view(np.float32)
    return np.concatenate([x, edges, -edges, near, -near])


# -- converter kernels: each bit-identical to the Python converter --------------------------------

@pytest.mark.parametrize("ties", ["away", "even"])
def test_fp16_round_kernel_matches_htp_fp16_round(ties):
    x = float32_bits(20000, 1)
    y = np.empty_like(x)
    call("qe_k_fp16_round", [x, y], (x.size, int(ties == "even")))
    ref = htp_fp16_round(x, ties)
    assert y.view(np.uint32).tolist() == ref.view(np.uint32).tolist(), \
        f"qe_k_fp16_round (ties {ties}) reproduces htp_fp16_round bit for bit on every float32 class"


@pytest.mark.parametrize("ties", ["away", "even"])
def test_fp16_round_fast_vectors_match_the_plain_loop(ties):
    """The kernel's vector path takes whole vectors of zeros and float16 normals (and beyond),
    and hands a vector holding a float16 subnormal to the plain loop: activations that are
    mostly normal, with zeros, infinities, NaNs, values past 131008 and the odd subnormal at
    random places, give the bits of the plain loop (i[2] = 1) and of htp_fp16_round.
    (tools/exhaustive_fp16_round.py checks all 2**32 patterns.)"""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(50000) * rng.choice([1e-3, 1.0, 300.0, 1e5], 50000)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 131008.0, 131072.0, -2.0e5, 2.0**-14,
                         np.float32(2.0**-14) * np.float32(0.999), 3e-6, -1e-7, 1e-40], np.float32)
    x[rng.integers(0, x.size, 400)] = rng.choice(specials, 400)
    x[:64] = 0.0                                    # whole zero vectors take the fast path
    even = int(ties == "even")
    fast, plain = np.empty_like(x), np.empty_like(x)
    call("qe_k_fp16_round", [x, fast], (x.size, even))
    call("qe_k_fp16_round", [x, plain], (x.size, even, 1))
    assert fast.view(np.uint32).tolist() == plain.view(np.uint32).tolist(), \
        f"qe_k_fp16_round's vector path (ties {ties}) equals its plain loop bit for bit"
    assert fast.view(np.uint32).tolist() == htp_fp16_round(x, ties).view(np.uint32).tolist(), \
        f"qe_k_fp16_round (ties {ties}) equals htp_fp16_round bit for bit"


def test_fp16_to_fp32_kernel_matches_htp_conversion():
    x = htp_fp16_round(float32_bits(20000, 2))
    y = np.empty_like(x)
    call("qe_k_fp16_to_fp32", [x, y], (x.size,))
    ref = htp_fp16_to_fp32(x)
    same = (y.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(y) & np.isnan(ref))
    assert same.all(), "qe_k_fp16_to_fp32 reproduces htp_fp16_to_fp32 (NaN stays NaN)"


@given(dtype=st.sampled_from(sorted(CODE_TYPES)), mode=st.sampled_from(sorted(MODES)),
       scale=st.floats(2.0**-20, 1024.0, width=32), offset=st.integers(-70000, 70000), seed=st.integers(0, 2**31))
def test_requant_kernel_matches_requantize(dtype, mode, scale, offset, seed):
    spec = QuantSpec(ENC, float(scale), offset)
    conv = Requantize(spec, dtype, mode)
    with np.errstate(all="ignore"):
        x = float32_bits(512, seed) * np.float32(1e-30)   # bring most patterns into the code range
    x = np.concatenate([x, float32_bits(64, seed + 1), np.float32(scale) * np.arange(-300, 300, 0.5,
                                                                                      dtype=np.float32)])
    np_dtype, code = CODE_TYPES[dtype]
    y = np.empty(x.shape, np_dtype)
    call("qe_k_requant", [x, y], (x.size, code, MODES[conv.mode], conv.lo, conv.hi),
         (float(conv.inv), float(conv.offset)))
    with np.errstate(all="ignore"):
        ref = conv(x)
    assert y.tobytes() == ref.tobytes(), f"qe_k_requant ({conv.mode}, {np.dtype(np_dtype)}) equals Requantize"


@given(dtype=st.sampled_from(sorted(CODE_TYPES)), scale=st.floats(2.0**-20, 1024.0, width=32),
       offset=st.integers(-70000, 70000), seed=st.integers(0, 2**31))
def test_dequant_kernel_matches_dequantizer(dtype, scale, offset, seed):
    np_dtype, code = CODE_TYPES[dtype]
    info = np.iinfo(np_dtype)
    q = np.random.default_rng(seed).integers(info.min, info.max + 1, 1000).astype(np_dtype)
    conv = Dequantizer(QuantSpec(ENC, float(scale), offset))
    y = np.empty(q.shape, np.float32)
    call("qe_k_dequant", [q, y], (q.size, code), (float(conv.scale), float(conv.offset)))
    assert y.tobytes() == conv(q).tobytes(), "qe_k_dequant equals Dequantizer"


# -- programs ----------------------------------------------------------------------------------

def quantize_chain(links: int = 1, shape=(2, 5), quant=(0.05, -128), dtype=U8):
    """x -> (Quantize -> Dequantize) x links -> y, finalized."""
    b = GraphBuilder(new_context(), "chain")
    prev = b.tensor("x", shape, type_=APP_WRITE)
    for k in range(links):
        q = b.tensor(f"q{k}", shape, dtype, quant=quant)
        b.node("Quantize", f"quant{k}", [prev], [q])
        prev_type = APP_READ if k == links - 1 else Q.QNN_TENSOR_TYPE_NATIVE
        prev = b.tensor(f"d{k}", shape, type_=prev_type)
        b.node("Dequantize", f"deq{k}", [q], [prev])
    b.graph.finalize()
    return b.graph


def ids(graph) -> dict[str, int]:
    return {t.name: t.id for t in graph.tensors.values()}


def both_paths(graph, feeds_by_name):
    """(engine outputs, Python-plan outputs) of one execute."""
    i = ids(graph)
    feeds = {i[k]: v for k, v in feeds_by_name.items()}
    wanted = [t.id for t in graph.app_outputs()]
    plan = graph.plan
    with np.errstate(all="ignore"):   # (the plan's own run routes them to a logger)
        return plan.engine.run(feeds, wanted), plan._run(feeds, wanted, None)


@given(values=st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=10, max_size=10),
       scale=st.floats(2.0**-13, 8.0, width=32), offset=st.integers(-255, 0),
       dtype=st.sampled_from([Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16]))
def test_quantize_dequantize_program_runs_in_c_bit_identical(values, scale, offset, dtype):
    graph = quantize_chain(quant=(float(scale), offset), dtype=dtype)
    engine = graph.plan.engine
    assert engine.fallbacks == [], f"Quantize and Dequantize lower to C: {engine.fallbacks}"
    x = np.array(values, np.float32).reshape(2, 5)
    got, ref = both_paths(graph, {"x": x})
    for tid in ref:
        assert got[tid].tobytes() == ref[tid].tobytes(), "engine output bytes equal the Python plan's"


def test_arena_reuses_bytes_of_dead_values():
    graph = quantize_chain(links=12, shape=(64, 64))
    engine = graph.plan.engine
    one_float_tensor = 64 * 64 * 4
    # 24 written values (12 code tensors, 12 float tensors) plus 12 scratch regions: by liveness
    # at most a few are alive at once
    assert engine.arena_bytes <= 4 * one_float_tensor, \
        f"arena of {engine.arena_bytes} bytes reuses dead values' bytes (one float tensor: {one_float_tensor})"
    x = np.linspace(-7, 7, 64 * 64, dtype=np.float32).reshape(64, 64)
    check_plan(graph.plan, {ids(graph)["x"]: x})


def test_unlowered_op_runs_as_counted_fallback(monkeypatch):
    load_lowerings()
    monkeypatch.delitem(LOWERINGS, "Dequantize")
    graph = quantize_chain(links=2)
    engine = graph.plan.engine
    assert [(name, op) for name, op, _ in engine.fallbacks] == [("deq0", "Dequantize"), ("deq1", "Dequantize")], \
        "the nodes without a lowering are the fallback steps, by name and op type"
    assert all("no C lowering" in why for _, _, why in engine.fallbacks), "each fallback says why"
    assert engine.summary()["fallbacks"] == 2 and engine.summary()["c_nodes"] == 2, "summary counts both kinds"
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    got, ref = both_paths(graph, {"x": x})
    assert all(got[t].tobytes() == ref[t].tobytes() for t in ref), "C and fallback steps mix bit-identically"
    check_plan(graph.plan, {ids(graph)["x"]: x})


def test_check_mode_reports_the_first_differing_node():
    graph = quantize_chain(links=2)
    engine = graph.plan.engine
    engine.program.dbls[0] *= 2    # the first Quantize's 1/scale: the C step now computes wrong codes
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    with pytest.raises(EngineMismatch, match=r"node 0 'quant0' \(Quantize, C\)"):
        check_plan(graph.plan, {ids(graph)["x"]: x})


def test_python_mode_builds_no_program(monkeypatch):
    monkeypatch.setenv(engine_mod.ENGINE_ENV, "python")
    graph = quantize_chain()
    assert graph.plan.engine is None, "QNNEMU_ENGINE=python: the plan's Python steps run"


def test_observer_sees_every_node_with_the_engine():
    graph = quantize_chain(links=3)
    seen = []
    i = ids(graph)
    graph.execute({i["x"]: np.zeros((2, 5), np.float32)}, [i["d2"]], observer=lambda step, s: seen.append(
        (step.node.name, s >= 0)))
    assert seen == [(f"{kind}{k}", True) for k in range(3) for kind in ("quant", "deq")], \
        "the profiling observer is called once per node, in order, with a time"


def test_unexpected_feed_type_runs_the_python_steps():
    graph = quantize_chain()
    i = ids(graph)
    assert graph.plan.engine.run({i["x"]: np.zeros((2, 5), np.float64)}, [i["d0"]]) is None, \
        "the engine declines arrays of another type than the program's"
    out = graph.execute({i["x"]: np.full((2, 5), 0.5, np.float64)}, [i["d0"]])
    assert out[i["d0"]].dtype == np.float32 and np.allclose(out[i["d0"]], 0.5), \
        "graph.execute still computes through the Python steps"


@given(src=st.sampled_from(sorted(CODE_TYPES)), dst=st.sampled_from(sorted(CODE_TYPES)),
       scales=st.tuples(st.floats(2.0**-12, 4.0, width=32), st.floats(2.0**-12, 4.0, width=32)),
       offsets=st.tuples(st.integers(-200, 0), st.integers(-200, 0)), seed=st.integers(0, 2**31))
def test_convert_between_encodings_runs_in_c_bit_identical(src, dst, scales, offsets, seed):
    b = GraphBuilder(new_context(), "convert")
    x = b.tensor("x", (3, 7), src, type_=APP_WRITE, quant=(float(scales[0]), offsets[0]))
    y = b.tensor("y", (3, 7), dst, type_=APP_READ, quant=(float(scales[1]), offsets[1]))
    b.node("Convert", "conv", [x], [y])
    b.graph.finalize()
    engine = b.graph.plan.engine
    assert engine.fallbacks == [], f"Convert between fixed-point encodings lowers to C: {engine.fallbacks}"
    np_dtype, _ = CODE_TYPES[src]
    info = np.iinfo(np_dtype)
    codes = np.random.default_rng(seed).integers(info.min, info.max + 1, (3, 7)).astype(np_dtype)
    check_plan(b.graph.plan, {x.id: codes})
