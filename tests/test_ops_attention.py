"""Numerics and validation of RotaryEmbedding and GroupQueryAttention (qnnemu/ops/attention.py).

References: onnx.reference (ONNX RotaryEmbedding, opset 23) in float64; for
GroupQueryAttention a float64 loop written here from ONNX Runtime's CPU kernel
(contrib_ops/cpu/bert/gqa_attention_base.h: per-batch past length seqlens_k + 1 - S, causal
softmax over the cache, grouped KV heads, rotary at past + s) and, where onnxruntime is
installed, that CPU kernel itself.  Warning rules go through our backend's C ABI; negative
tests: one per rule id.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import ClientLog, assert_close, expect_rule, run_checked, spec

from qnnemu.errors import OpUnsupportedError
from qnnemu.headers import Q

RNG = np.random.default_rng(20250304)
F16, I32, I64, U8 = (Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_INT_64,
                     Q.QNN_DATATYPE_UFIXED_POINT_8)
B, N, S, H, MAXPOS = 2, 3, 4, 8, 16


# ---- RotaryEmbedding ---------------------------------------------------------------------------
def onnx_rope(x, cos, sin, pos, interleaved, rot=None):
    """ONNX RotaryEmbedding (opset 23) in float64; ``pos`` None: a [B, S, rot/2] cache."""
    names = ["x", "cos", "sin"] + (["pos"] if pos is not None else [])
    kw = {"interleaved": int(interleaved)}
    if rot:
        kw["rotary_embedding_dim"] = rot
    node = helper.make_node("RotaryEmbedding", names, ["y"], **kw)
    vis = [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "pos" else TensorProto.DOUBLE,
                                         None) for n in names]
    model = helper.make_model(helper.make_graph(
        [node], "g", vis, [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)]),
        opset_imports=[helper.make_opsetid("", 23)])
    feeds = {"x": x, "cos": cos, "sin": sin}
    if pos is not None:
        feeds["pos"] = np.asarray(pos, np.int64)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def caches(*shape):
    ang = RNG.uniform(0, 2 * np.pi, shape)
    return np.cos(ang), np.sin(ang)


@pytest.mark.parametrize("interleaved", [False, True], ids=["halves", "interleaved"])
@pytest.mark.parametrize("rot", [None, 8, 4, 6], ids=lambda r: f"rot{r}")
def test_rope_matches_onnx(interleaved, rot):
    x = RNG.standard_normal((B, N, S, H))
    cos, sin = caches(MAXPOS, (rot or H) // 2)
    pos = RNG.integers(0, MAXPOS, (B, S))
    params = {"interleaved": interleaved}
    if rot is not None:
        params["rotary_embedding_dim"] = rot
    (y,) = run_checked("RotaryEmbedding", [x.astype(np.float32), cos.astype(np.float32),
                                           sin.astype(np.float32), pos.astype(np.int32)], params)
    ref = onnx_rope(x.astype(np.float32).astype(np.float64), cos.astype(np.float32),
                    sin.astype(np.float32), pos, interleaved, rot)
    assert_close(y, ref, f"RotaryEmbedding interleaved={interleaved} rot={rot}")


def test_rope_position_forms():
    """position_ids [B, S], [1, S], [S] (one row for all), UINT_32; no position_ids: a 2-D
    cache is indexed by token (0..S-1), a 3-D cache holds each token's row."""
    x = RNG.standard_normal((B, N, S, H)).astype(np.float32)
    cos, sin = (c.astype(np.float32) for c in caches(MAXPOS, H // 2))
    row = RNG.integers(0, MAXPOS, (1, S))
    ref = onnx_rope(x.astype(np.float64), cos, sin, np.repeat(row, B, 0), False)
    for p in (row.astype(np.int32), row[0].astype(np.int32), np.repeat(row, B, 0).astype(np.uint32)):
        (y,) = run_checked("RotaryEmbedding", [x, cos, sin, p])
        assert_close(y, ref, f"position_ids {p.shape} {p.dtype}")
    (y,) = run_checked("RotaryEmbedding", [x, cos, sin])
    assert_close(y, onnx_rope(x.astype(np.float64), cos, sin, np.tile(np.arange(S), (B, 1)),
                              False), "no position_ids, 2-D cache: positions 0..S-1")
    pos = RNG.integers(0, MAXPOS, (B, S))
    (y,) = run_checked("RotaryEmbedding", [x, cos[pos], sin[pos]])
    assert_close(y, onnx_rope(x.astype(np.float64), cos[pos], sin[pos], None, False),
                 "no position_ids, 3-D cache [B, S, rot/2]")


def test_rope_three_dimensional_x_is_batch_one():
    """A 3-D x [N, S, H] rotates like [1, N, S, H] (the vendor prepends the batch)."""
    x = RNG.standard_normal((N, S, H)).astype(np.float32)
    cos, sin = (c.astype(np.float32) for c in caches(MAXPOS, H // 2))
    pos = RNG.integers(0, MAXPOS, (1, S)).astype(np.int32)
    (y,) = run_checked("RotaryEmbedding", [x, cos, sin, pos])
    (y4,) = run_checked("RotaryEmbedding", [x[None], cos, sin, pos])
    assert y.shape == x.shape and np.array_equal(y, y4[0]), "3-D x == 4-D x of batch 1"


def test_rope_float16():
    x = RNG.standard_normal((B, N, S, H))
    cos, sin = caches(MAXPOS, H // 2)
    pos = RNG.integers(0, MAXPOS, (B, S))
    args = [x.astype(np.float16), cos.astype(np.float16), sin.astype(np.float16), pos.astype(np.int32)]
    (y,) = run_checked("RotaryEmbedding", args)
    assert y.dtype == np.float16, "float16 in, float16 out"
    ref = onnx_rope(*(a.astype(np.float64) for a in args[:3]), pos, False)
    assert_close(y, ref, "float16 RotaryEmbedding", rel=1e-3)


def _rope_graph(params, x_shape=(B, N, S, H), cache_shape=(MAXPOS, H // 2), pos_shape=(B, S)):
    """Builds and runs a RotaryEmbedding graph on our backend; returns x, the caches, the
    positions and the output."""
    from qnnemu.client import Backend
    x = RNG.standard_normal(x_shape).astype(np.float32)
    cos, sin = (c.astype(np.float32) for c in caches(*cache_shape))
    pos = RNG.integers(0, cache_shape[-2], pos_shape).astype(np.int32)
    with Backend(log_level="warn") as be:
        ctx = be.context()
        g = ctx.graph("g")
        ins = [g.input("x", x_shape), g.static("cos", cos), g.static("sin", sin),
               g.input("pos", pos_shape, np.int32)]
        g.node("RotaryEmbedding", ins, [("y", x_shape, np.float32)], params=params, app_read=True)
        g.finalize()
        y = g.execute({"x": x, "pos": pos})["y"]
        ctx.free()
    return x, cos, sin, pos, y


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_rope_dim_zero_rotates_nothing_with_a_warning():
    # warning QNNEMU-RotaryEmbedding-dim-zero: tests/test_warning_rules.py
    x, *_, y = _rope_graph({"rotary_embedding_dim": 0})
    assert np.array_equal(y, x), "rotary_embedding_dim 0: out = in[0] (the vendor's result)"


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_rope_odd_dim_is_rounded_down_with_a_warning():
    # warning QNNEMU-RotaryEmbedding-dim-odd: tests/test_warning_rules.py
    x, cos, sin, pos, y = _rope_graph({"rotary_embedding_dim": 5}, cache_shape=(MAXPOS, 2))
    assert_close(y, onnx_rope(x.astype(np.float64), cos, sin, pos, False, 4), "rot 5 -> 4")


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_rope_wider_cache_uses_its_first_columns_with_a_warning():
    # warning QNNEMU-RotaryEmbedding-cache-wider: tests/test_warning_rules.py
    x, cos, sin, pos, y = _rope_graph({"rotary_embedding_dim": 8}, cache_shape=(MAXPOS, 6))
    assert_close(y, onnx_rope(x.astype(np.float64), cos[:, :4], sin[:, :4], pos, False),
                 "a [16, 6] cache with rot 8: its first 4 columns")


def test_rope_extra_position_rows_are_ignored_with_a_warning():
    # warning QNNEMU-RotaryEmbedding-position-batch: tests/test_warning_rules.py
    x, cos, sin, pos, y = _rope_graph({}, x_shape=(N, S, H), pos_shape=(B, S))
    assert_close(y, onnx_rope(x[None].astype(np.float64), cos, sin, pos[:1], False)[0],
                 "a 3-D x (batch 1) with [2, S] position_ids: row 0")


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_rope_three_dimensional_cache_with_positions_reads_its_first_row():
    # warning QNNEMU-RotaryEmbedding-cache-first-row: tests/test_warning_rules.py
    x, cos, sin, pos, y = _rope_graph({}, cache_shape=(2, S, H // 2))
    assert_close(y, onnx_rope(x.astype(np.float64), cos[0], sin[0], pos, False),
                 "a [2, S, rot/2] cache with position_ids: row 0 is the table")


def _execute_refused(build, feeds, rule, path):
    """Runs a graph on our backend whose graphExecute must fail with QNN_COMMON_ERROR_GENERAL
    (as the vendor's does) and log ``rule`` naming graphExecute and ``path``."""
    from qnnemu.client import Backend, QnnCallError
    with Backend(log_level="warn") as be:
        ctx = be.context()
        g = ctx.graph("g")
        build(g)
        g.finalize()
        with ClientLog() as log, pytest.raises(QnnCallError) as info:
            g.execute(feeds)
        ctx.free()
    assert info.value.code == Q.QNN_COMMON_ERROR_GENERAL, f"{rule}: graphExecute code {info.value}"
    log.assert_error(rule, "graphExecute", path)


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_rope_position_outside_the_cache_fails_execute():
    """As the vendor's execution fails: QNNEMU-RotaryEmbedding-position-range at graphExecute."""
    cos, sin = (c.astype(np.float32) for c in caches(3, H // 2))

    def build(g):
        ins = [g.input("x", (1, 1, S, H)), g.static("cos", cos), g.static("sin", sin),
               g.input("pos", (1, S), np.int32)]
        g.node("RotaryEmbedding", ins, [("y", (1, 1, S, H), np.float32)], app_read=True)
    _execute_refused(build, {"x": np.ones((1, 1, S, H), np.float32),
                             "pos": np.array([[0, 1, 2, 3]], np.int32)},
                     "QNNEMU-RotaryEmbedding-position-range", "inputTensors[3]")


# ---- GroupQueryAttention -----------------------------------------------------------------------
def gqa_reference(q, k, v, past_k, past_v, seqlens_k, total, nh, kvh, scale=0.0, cos=None,
                  sin=None, pos_ids=None, length=None):
    """ORT's CPU GroupQueryAttention (past and present sharing one buffer, the KV-cache
    update the vendor's HTP computes too), one loop per (batch, head, query) in float64."""
    b, s, hidden = q.shape
    hd = hidden // nh
    q = q.reshape(b, s, nh, hd).astype(np.float64)
    k = k.reshape(b, s, kvh, hd).astype(np.float64)
    v = v.reshape(b, s, kvh, hd).astype(np.float64)
    past = [0 if s == total else int(seqlens_k[i]) + 1 - s for i in range(b)]
    if cos is not None:
        half = cos.shape[1]

        def rot(t, p):
            c, sn = cos[p], sin[p]
            t = t.copy()
            x1, x2 = t[..., :half].copy(), t[..., half:2 * half].copy()
            t[..., :half] = c * x1 - sn * x2
            t[..., half:2 * half] = sn * x1 + c * x2
            return t
        for i in range(b):
            for j in range(s):
                p = int(pos_ids[i, j]) if pos_ids is not None else past[i] + j
                q[i, j] = rot(q[i, j], p)
                k[i, j] = rot(k[i, j], p)
    length = past_k.shape[2] if past_k is not None else length
    # the cache update: the past with the new rows written at each past length
    pk = np.array(past_k, np.float64) if past_k is not None else np.zeros((b, kvh, length, hd))
    pv = np.array(past_v, np.float64) if past_v is not None else np.zeros((b, kvh, length, hd))
    for i in range(b):
        pk[i, :, past[i]:past[i] + s] = k[i].transpose(1, 0, 2)
        pv[i, :, past[i]:past[i] + s] = v[i].transpose(1, 0, 2)
    alpha = scale or 1.0 / np.sqrt(hd)
    out = np.zeros((b, s, nh, hd))
    for i in range(b):
        for h in range(nh):
            g = h // (nh // kvh)
            for j in range(s):
                n = past[i] + j + 1
                logits = alpha * pk[i, g, :n] @ q[i, j, h]
                w = np.exp(logits - logits.max())
                out[i, j, h] = (w / w.sum()) @ pv[i, g, :n]
    return out.reshape(b, s, hidden), pk, pv


def gqa_case(b=1, s=4, nh=4, kvh=2, hd=8, length=16, total=None, seqlens=None, rotary=False,
             pos_ids=False, scale=0.0, past=True, dtype=np.float32):
    total = s if total is None else total
    seqlens = np.array([total - 1] * b if seqlens is None else seqlens, np.int32)
    arrays = {
        "q": RNG.standard_normal((b, s, nh * hd)), "k": RNG.standard_normal((b, s, kvh * hd)),
        "v": RNG.standard_normal((b, s, kvh * hd)),
        "pk": RNG.standard_normal((b, kvh, length, hd)) if past else None,
        "pv": RNG.standard_normal((b, kvh, length, hd)) if past else None,
    }
    arrays = {n: None if a is None else a.astype(dtype) for n, a in arrays.items()}
    cos = sin = pos = None
    if rotary:
        cos, sin = (c.astype(dtype) for c in caches(length, hd // 2))
    if pos_ids:
        pos = RNG.integers(0, length, (b, s)).astype(np.int32)
    qnn = [arrays["q"], seqlens, np.array(total, np.int32), arrays["k"], arrays["v"],
           arrays["pk"], arrays["pv"], cos, sin, pos]
    while qnn[-1] is None:
        qnn.pop()
    params = {"num_heads": nh, "kv_num_heads": kvh, "do_rotary": int(rotary)}
    if scale:
        params["scale"] = scale
    declared = [spec((b, s, nh * hd)), spec((b, kvh, length, hd)), spec((b, kvh, length, hd))]
    ref = gqa_reference(arrays["q"], arrays["k"], arrays["v"], arrays["pk"], arrays["pv"], seqlens,
                        total, nh, kvh, scale, None if cos is None else cos.astype(np.float64),
                        None if sin is None else sin.astype(np.float64), pos, length)
    return qnn, params, declared, ref


GQA_CASES = {
    "prompt": {},
    "prompt-mha": {"kvh": 4},
    "prompt-mqa": {"kvh": 1},
    "scale": {"scale": 0.2},
    "token": {"s": 1, "total": 7},
    "batch-token": {"b": 3, "s": 1, "total": 9, "seqlens": [8, 3, 5]},
    "continued-prompt": {"s": 3, "total": 9},
    "rotary-prompt": {"rotary": True},
    "rotary-token": {"rotary": True, "b": 2, "s": 1, "total": 6, "seqlens": [5, 2]},
    "rotary-position-ids": {"rotary": True, "pos_ids": True},
    "no-past": {"past": False},
}


@pytest.mark.parametrize("name", sorted(GQA_CASES))
def test_gqa_matches_reference(name):
    qnn, params, declared, (ro, rk, rv) = gqa_case(**GQA_CASES[name])
    y, pk, pv = run_checked("GroupQueryAttention", qnn, params, declared=declared)
    assert_close(y, ro, f"GQA {name}: output")
    assert_close(pk, rk, f"GQA {name}: present_key")
    assert_close(pv, rv, f"GQA {name}: present_value")


def test_gqa_float16():
    qnn, params, declared, (ro, rk, _) = gqa_case(dtype=np.float16)
    y, pk, _ = run_checked("GroupQueryAttention", qnn, params, declared=declared)
    assert y.dtype == pk.dtype == np.float16, "float16 GQA returns float16"
    assert_close(y, ro, "float16 GQA output", rel=3e-3)
    assert_close(pk, rk, "float16 GQA present_key", rel=1e-3)


def test_gqa_matches_onnxruntime_cpu():
    """ONNX Runtime's CPU com.microsoft GroupQueryAttention on the same tensors.  Its past and
    present are distinct buffers here, so it leaves zeros after the new rows where the cache
    update keeps the past: the presents are compared up to the new rows."""
    ort = pytest.importorskip("onnxruntime")
    for name in ("prompt", "token", "batch-token", "rotary-token"):
        case = dict(GQA_CASES[name], hd=16)   # ORT CPU: head size a multiple of 16
        qnn, params, declared, _ = gqa_case(**case)
        y, pk, pv = run_checked("GroupQueryAttention", qnn, params, declared=declared)
        names = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
                 "total_sequence_length", "cos_cache", "sin_cache"]
        feeds = dict(zip(names, [qnn[0], qnn[3], qnn[4], qnn[5], qnn[6], qnn[1],
                                 qnn[2].reshape(1), *(qnn[7:9] if len(qnn) > 7 else [])]))
        used = [n for n in names if n in feeds]
        node = helper.make_node("GroupQueryAttention", used, ["out", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=params["num_heads"],
                                kv_num_heads=params["kv_num_heads"], do_rotary=params["do_rotary"])
        vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype),
                                             feeds[n].shape) for n in used]
        outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                for n in ("out", "present_key", "present_value")]
        model = helper.make_model(helper.make_graph([node], "g", vis, outs),
                                  opset_imports=[helper.make_opsetid("", 17),
                                                 helper.make_opsetid("com.microsoft", 1)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ro, rk, rv = sess.run(None, feeds)
        assert_close(y, ro, f"GQA {name} vs ORT CPU: output", rel=1e-5)
        for i in range(y.shape[0]):
            n = int(qnn[1][i]) + 1
            assert_close(pk[i, :, :n], rk[i, :, :n], f"GQA {name} vs ORT CPU: present_key[{i}]",
                         rel=1e-5)
            assert_close(pv[i, :, :n], rv[i, :, :n], f"GQA {name} vs ORT CPU: present_value[{i}]",
                         rel=1e-5)


def test_gqa_fixed_point_through_our_backend():
    """Quantized query/key/value/past run on their dequantized values (the HTP's note: the
    computation is always in float); the outputs requantize."""
    from qnnemu.client import Backend
    qnn, params, declared, _ = gqa_case(s=1, total=5)
    q8 = (0.05, -128)
    codes = {i: np.clip(np.rint(qnn[i] / q8[0]) - q8[1], 0, 255).astype(np.uint8)
             for i in (0, 3, 4, 5, 6)}
    real = {i: q8[0] * (c.astype(np.float64) + q8[1]) for i, c in codes.items()}
    ro, _, _ = gqa_reference(real[0], real[3], real[4], real[5], real[6], qnn[1], 5,
                             params["num_heads"], params["kv_num_heads"])
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        names = {0: "q", 3: "k", 4: "v", 5: "pk", 6: "pv"}
        t = {i: g.input(n, codes[i].shape, U8, quant=q8) for i, n in names.items()}
        sl = g.input("sl", (1,), np.int32)
        tot = g.input("tot", (1,), np.int32)
        g.node("GroupQueryAttention", [t[0], sl, tot, t[3], t[4], t[5], t[6]],
               [("y", declared[0].shape, np.float32), ("pk_out", declared[1].shape, U8, q8),
                ("pv_out", declared[2].shape, U8, q8)], params=params, app_read=True)
        g.finalize()
        out = g.execute({"q": codes[0], "k": codes[3], "v": codes[4], "pk": codes[5],
                         "pv": codes[6], "sl": qnn[1], "tot": np.array([5], np.int32)})
        ctx.free()
    assert_close(out["y"], ro, "u8 GQA output (float32) == float GQA of the dequantized inputs")
    past = 5 - 1
    keep = np.ones(declared[1].shape[2], bool)
    keep[past] = False
    assert np.array_equal(out["pk_out"][0][:, keep], codes[5][0][:, keep]), \
        "present_key keeps the past codes around the new token"


def _gqa_graph(qnn, params, declared):
    """A builder of the GQA node ``qnn`` (arrays; None = NULL) as a graph of our backend."""
    def build(g):
        ins = []
        for i, a in enumerate(qnn):
            if a is None:
                ins.append(g._tensor(f"null{i}", (0,), np.float32, Q.QNN_TENSOR_TYPE_NULL))
            elif i in (7, 8):
                ins.append(g.static(f"in{i}", a))
            else:
                ins.append(g.input(f"in{i}", a.shape, a.dtype))
        g.node("GroupQueryAttention", ins,
               [(f"out{k}", d.shape, np.float32) for k, d in enumerate(declared)],
               params=params, app_read=True)
    feeds = {f"in{i}": a for i, a in enumerate(qnn) if a is not None and i not in (7, 8)}
    return build, feeds


# SM8550: the HTP has no float RotaryEmbedding / GroupQueryAttention on v68 (docs/op-support.md);
# exact float32 math for the reference comparison.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_gqa_sequence_lengths_outside_the_cache_fail_execute():
    qnn, params, declared, _ = gqa_case(s=1, total=7)
    qnn[1] = np.array([20], np.int32)     # past length 20 > the cache of 16
    build, feeds = _gqa_graph(qnn, params, declared)
    _execute_refused(build, feeds, "QNNEMU-GroupQueryAttention-sequence-lengths",
                     "inputTensors[1]")


def test_gqa_rotary_position_outside_the_cache_fails_execute():
    qnn, params, declared, _ = gqa_case(rotary=True, pos_ids=True)
    qnn[9] = np.full_like(qnn[9], 99)
    build, feeds = _gqa_graph(qnn, params, declared)
    _execute_refused(build, feeds, "QNNEMU-GroupQueryAttention-position-range",
                     "inputTensors[9]")


# ---- negative tests ----------------------------------------------------------------------------
X4, C2, P2 = spec((B, N, S, H)), spec((MAXPOS, H // 2)), spec((B, S), I32)
GS = [spec((1, 4, 32)), spec((1,), I32), spec((), I32), spec((1, 4, 16)), spec((1, 4, 16)),
      spec((1, 2, 16, 8)), spec((1, 2, 16, 8))]
GP = {"num_heads": 4, "kv_num_heads": 2}
GO = [spec((1, 4, 32)), spec((1, 2, 16, 8)), spec((1, 2, 16, 8))]


def gqa_specs(**over):
    s = list(GS)
    for key, v in over.items():
        i = int(key[1:])
        s += [None] * (i + 1 - len(s))
        s[i] = v
    return s


NEGATIVE = [
    ("RotaryEmbedding", [X4, C2, spec((MAXPOS, H // 2), F16), P2], {}, None, "dtype-mismatch",
     "inputTensors[2].dataType"),
    ("RotaryEmbedding", [spec((B, N, S, H), I32), C2, C2, P2], {}, None, "dtype",
     "inputTensors[0].dataType"),
    ("RotaryEmbedding", [X4, spec((MAXPOS, 4), U8), spec((MAXPOS, 4), U8), P2], {}, None,
     "quant-missing", "inputTensors[1].quantizeParams"),
    ("RotaryEmbedding", [spec((1, B, N, S, H)), C2, C2, P2], {}, None, "input-rank",
     "inputTensors[0].rank"),
    ("RotaryEmbedding", [X4, C2, C2, P2], {"rotary_embedding_dim": 10}, None, "dim",
     "params[rotary_embedding_dim]"),
    ("RotaryEmbedding", [X4, C2, spec((MAXPOS, 3)), P2], {}, None, "cache-shape",
     "inputTensors[2].dimensions"),
    ("RotaryEmbedding", [X4, C2, C2, spec((B, S), I64)], {}, None, "position-dtype",
     "inputTensors[3].dataType"),
    ("RotaryEmbedding", [X4, spec((1, B, S, 4)), spec((1, B, S, 4)), P2], {}, None,
     "cache-rank", "inputTensors[1].rank"),
    ("RotaryEmbedding", [X4, C2, C2, spec((B, S + 1), I32)], {}, None, "position-shape",
     "inputTensors[3].dimensions"),
    ("GroupQueryAttention", GS, {"num_heads": 4, "kv_num_heads": 3}, GO, "heads",
     "params[kv_num_heads]"),
    ("GroupQueryAttention", GS, {**GP, "do_rotary": 2}, GO, "do-rotary", "params[do_rotary]"),
    ("GroupQueryAttention", GS, {**GP, "scale": float("inf")}, GO, "scale", "params[scale]"),
    ("GroupQueryAttention", gqa_specs(i3=None), GP, GO, "packed-qkv", "inputTensors[3]"),
    ("GroupQueryAttention", gqa_specs(i4=spec((1, 4, 16), F16)), GP, GO, "dtype-mismatch",
     "inputTensors[4].dataType"),
    ("GroupQueryAttention", gqa_specs(i0=spec((4, 32))), GP, GO, "input-rank",
     "inputTensors[0].rank"),
    ("GroupQueryAttention", gqa_specs(i0=spec((1, 4, 30))), GP, GO, "query-shape",
     "inputTensors[0].dimensions"),
    ("GroupQueryAttention", gqa_specs(i3=spec((1, 4, 8))), GP, GO, "kv-shape",
     "inputTensors[3].dimensions"),
    ("GroupQueryAttention", gqa_specs(i1=spec((1,), I64)), GP, GO, "seqlens-k", "inputTensors[1]"),
    ("GroupQueryAttention", gqa_specs(i2=spec((2,), I32)), GP, GO, "total-sequence-length",
     "inputTensors[2]"),
    ("GroupQueryAttention", gqa_specs(i6=spec((1, 2, 8, 8))), GP, GO, "past",
     "inputTensors[6].dimensions"),
    ("GroupQueryAttention", gqa_specs(), {**GP, "do_rotary": 1}, GO, "rotary-cache",
     "inputTensors[7].type"),
    ("GroupQueryAttention", gqa_specs(i7=spec((16, 4)), i8=spec((16, 4)), i9=spec((1, 4), I64)),
     {**GP, "do_rotary": 1}, GO, "position-ids", "inputTensors[9]"),
    ("GroupQueryAttention", gqa_specs(i5=None, i6=None), GP,
     [spec((1, 4, 32)), spec((1, 2, 2, 8)), spec((1, 2, 2, 8))], "present-shape",
     "outputTensors[1].dimensions"),
    ("GroupQueryAttention", GS, GP, GO[:1], "present", "numOfOutputs"),
    ("GroupQueryAttention", gqa_specs(i0=spec((1, 4, 32), U8)), GP, GO, "quant-missing",
     "inputTensors[0].quantizeParams"),
    ("GroupQueryAttention", gqa_specs(i0=spec((1, 4, 32), I32)), GP, GO, "dtype",
     "inputTensors[0].dataType"),
]


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    if rule in ("dtype", "packed-qkv", "present"):
        assert isinstance(err, OpUnsupportedError), f"{rule}: reported as unsupported"


WARNINGS = {("RotaryEmbedding", r) for r in ("dim-zero", "dim-odd", "cache-wider",
                                               "position-batch", "cache-first-row")}
RUN_TIME = {("RotaryEmbedding", "position-range"), ("GroupQueryAttention", "sequence-lengths"),
            ("GroupQueryAttention", "position-range")}


def test_every_rule_id_is_tested():
    """Each rule id of attention.py has a negative test, a warning test or a run-time test."""
    from qnnemu.ops import attention
    text = inspect.getsource(attention)
    ids = set()
    for op_type in ("RotaryEmbedding", "GroupQueryAttention"):
        src = inspect.getsource(getattr(attention, op_type))
        ids |= {(op_type, r) for r in re.findall(r'fail\("([a-z-]+)"', src)}
        ids |= {(op_type, r) for r in re.findall(r'QNNEMU-(?:\{op\}|' + op_type + r')-([a-z-]+)', src)}
        ids |= {(op_type, r) for r in ("dtype-mismatch", "dtype", "quant-missing", "input-rank")}
    assert "QNNEMU-{op}-dtype-mismatch" in text, "the shared dtype-mismatch rule is in the module"
    tested = {(n[0], n[4]) for n in NEGATIVE} | WARNINGS | RUN_TIME
    assert not ids - tested, f"every rule has a test: missing {ids - tested}"
