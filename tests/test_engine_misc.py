"""The C engine's misc family (qnnemu/core/engine/lower_misc.py, csrc/eng_misc.c; issue 13, "zero
Python fallback steps"): Cast between plain integer / BOOL_8 / float types, ElementWiseSelect,
the BOOL_8 logic ops ElementWiseAnd / Or / Xor / Not, Argmax / Argmin, CumulativeSum and TopK
(QNN op definitions of the same names) compile to C steps with no fallback, and their outputs
equal the Python plan's byte for byte (``check_plan``).  ONNX LSTM / GRU models, as ONNX
Runtime's QNN EP lowers them (the recurrent family: lower_rnn.py), run under
``QNNEMU_ENGINE=check`` with zero fallback steps."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, GraphBuilder, new_context, param, ref
from hypothesis import assume, given, strategies as st

from qnnemu.core.engine import check_plan
from qnnemu.core.graph import OpConfigDesc
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.ops import _fast
from qnnemu.spec import dtypes

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

F32, F16, BOOL = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_BOOL_8
U8, I8, U16, I16 = Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_INT_8, Q.QNN_DATATYPE_UINT_16, Q.QNN_DATATYPE_INT_16
I32, U32, I64, U64 = Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32, Q.QNN_DATATYPE_INT_64, Q.QNN_DATATYPE_UINT_64
UFX8 = Q.QNN_DATATYPE_UFIXED_POINT_8
INTS = (U8, I8, U16, I16, I32, U32, I64)     # UINT_64: not an HTP tensor type


def values(dtype: int, shape, rng) -> np.ndarray:
    """Random values of a QNN type, with the edge cases its kernels branch on."""
    npd = np.dtype(dtypes.numpy_dtype(dtype))
    if dtype == BOOL:
        return rng.integers(0, 2, shape).astype(np.uint8)
    if npd.kind in "iu":
        info = np.iinfo(npd)
        return rng.integers(info.min, info.max, shape, dtype=npd, endpoint=True)
    with np.errstate(over="ignore"):   # float16: large values overflow to inf on purpose
        v = (rng.standard_normal(shape) * 3e4 if dtype == F16 else rng.standard_normal(shape) * 1e10).astype(npd)
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5, 1e30, -1e30], np.float64).astype(npd)
    flat = v.reshape(-1)
    k = min(flat.size, specials.size)
    flat[rng.choice(flat.size, k, replace=False)] = specials[:k]
    return v


def run_graph(op, ins, outs, seed=0, **params):
    """One node graph (``ins``: (QNN type, shape, array); ``outs``: (QNN type, shape)),
    finalized: asserts no Python fallback step and bit identity of the C program with the
    Python plan on the arrays; returns the C program's kernel count.  Configurations the HTP
    model refuses at finalize are skipped (``assume``)."""
    b = GraphBuilder(new_context(), "g")
    try:
        tin = [b.tensor(f"x{i}", s, t, APP_WRITE) for i, (t, s, _) in enumerate(ins)]
        tout = [b.tensor(f"y{k}", s, t, APP_READ) for k, (t, s) in enumerate(outs)]
        cfg = OpConfigDesc(1, "n", "qti.aisw", op, [param(k, v) for k, v in params.items()],
                           [ref(t) for t in tin], [ref(t) for t in tout])
        try:
            b.graph.add_node(cfg)
            b.graph.finalize()
        except QnnError as exc:
            if exc.rule != "QNNEMU-htp-op-finalize":
                raise
            assume(False)
        engine = b.graph.plan.engine
        assert engine.fallbacks == [], f"{op} {[t for t, _, _ in ins]} lowers to C: {engine.fallbacks}"
        check_plan(b.graph.plan, {t.id: a for t, (_, _, a) in zip(tin, ins)})
        return engine.summary()["c_nodes"]
    finally:
        b.graph.context.free()


@st.composite
def broadcast_shapes(draw, n: int):
    """An output shape and ``n`` input shapes broadcasting to it (numpy rules)."""
    full = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=5)))
    shapes = []
    for _ in range(n):
        drop = draw(st.integers(0, len(full) - 1))
        shapes.append(tuple(1 if draw(st.booleans()) else d for d in full[drop:]))
    return tuple(np.broadcast_shapes(*shapes)), shapes


# -- Cast ------------------------------------------------------------------------------------------
CAST_PAIRS = ([(s, d) for s in INTS for d in INTS] + [(s, BOOL) for s in INTS + (F32, F16)]
              + [(BOOL, d) for d in (I32, U8, I64)] + [(s, F32) for s in INTS]
              + [(s, d) for s in (F32, F16) for d in INTS] + [(F32, F16), (F16, F32), (F32, F32), (BOOL, BOOL)])


CAST_IDS = [f"{dtypes.name(s)[14:]}-{dtypes.name(d)[14:]}" for s, d in CAST_PAIRS]


@pytest.mark.parametrize("src,dst", CAST_PAIRS, ids=CAST_IDS)
def test_cast_pairs_run_in_c_bit_identical(src, dst):
    """Every plain type pair: wrap-around integer casts, x != 0 to BOOL_8, truncation with
    saturation (NaN -> 0, +-inf -> the bounds) from floats, one rounding to float32/float16."""
    rng = np.random.default_rng(src * 1000 + dst)
    x = values(src, (3, 17), rng)
    assert run_graph("Cast", [(src, (3, 17), x)], [(dst, (3, 17))]) == 1, "Cast is one C step"


def test_cast_of_fixed_point_still_falls_back_with_a_reason():
    """A Cast to fixed point keeps its Python step (the vendor-measured encodings), counted."""
    b = GraphBuilder(new_context(), "g")
    try:
        x = b.tensor("x", (4,), F32, APP_WRITE)
        y = b.tensor("y", (4,), UFX8, APP_READ, quant=(0.1, 0))
        b.node("Cast", "n", [x], [y])
        b.graph.finalize()
        fb = b.graph.plan.engine.fallbacks
        assert [(op, why) for _, op, why in fb] == [("Cast", "a Cast from or to fixed point")], \
            f"a fixed-point Cast falls back with its reason: {fb}"
    finally:
        b.graph.context.free()


# -- ElementWiseSelect -------------------------------------------------------------------------------
@given(shapes=broadcast_shapes(3), dtype=st.sampled_from([F32, F16, I32, U32, I16, U8, I8, BOOL]),
       seed=st.integers(0, 99))
def test_select_broadcasts_in_c_bit_identical(shapes, dtype, seed):
    out, (sc, sa, sb) = shapes
    rng = np.random.default_rng(seed)
    ins = [(BOOL, sc, values(BOOL, sc, rng)), (dtype, sa, values(dtype, sa, rng)), (dtype, sb, values(dtype, sb, rng))]
    assert run_graph("ElementWiseSelect", ins, [(dtype, out)]) == 1, "Select is one C step"


# -- BOOL_8 logic ----------------------------------------------------------------------------------
@given(shapes=broadcast_shapes(2), op=st.sampled_from(["ElementWiseAnd", "ElementWiseOr", "ElementWiseXor"]),
       seed=st.integers(0, 99))
def test_bool_logic_broadcasts_in_c_bit_identical(shapes, op, seed):
    out, (sa, sb) = shapes
    rng = np.random.default_rng(seed)
    ins = [(BOOL, sa, values(BOOL, sa, rng)), (BOOL, sb, values(BOOL, sb, rng))]
    assert run_graph(op, ins, [(BOOL, out)]) == 1, f"{op} is one C step"


@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple), seed=st.integers(0, 99))
def test_not_in_c_bit_identical(shape, seed):
    x = values(BOOL, shape, np.random.default_rng(seed))
    assert run_graph("ElementWiseNot", [(BOOL, shape, x)], [(BOOL, shape)]) == 1, "Not is one C step"


# -- Argmax / Argmin -------------------------------------------------------------------------------
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple), data=st.data(),
       op=st.sampled_from(["Argmax", "Argmin"]), dtype=st.sampled_from([F32, F16, I32, U8, UFX8]),
       index=st.sampled_from([I32, U32]), keep=st.booleans(), ties=st.booleans())
def test_arg_in_c_bit_identical(shape, data, op, dtype, index, keep, ties):
    """First extreme along the axis, the first NaN for floats (numpy's argmax/argmin), ties
    (few distinct values) to the first index; 8-bit codes compared as codes."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    if dtype == UFX8:
        x = rng.integers(0, 4 if ties else 256, shape).astype(np.uint8)
    else:
        x = values(dtype, shape, rng)
        if ties:
            x = (x % 3).astype(x.dtype) if dtype not in (F32, F16) else np.round(np.clip(x, -2, 2)).astype(x.dtype)
    out = list(shape)
    if keep:
        out[axis] = 1
    else:
        del out[axis]
    _single(op, x, dtype, [(index, tuple(out) or (1,), None)], quant=(0.1, -10) if dtype == UFX8 else None,
            axis=axis, keep_dims=keep)


# -- Lstm / Gru through ONNX Runtime's QNN EP, engine in check mode -------------------------------------
def _gru_model(direction: str, lbr: int, seed: int = 0):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    T, B, I, H = 4, 2, 6, 5
    d = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((d, 3 * H, I)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((d, 3 * H, H)) * 0.3).astype(np.float32), "R"),
             numpy_helper.from_array((rng.standard_normal((d, 6 * H)) * 0.1).astype(np.float32), "B")]
    node = helper.make_node("GRU", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=H, direction=direction,
                            linear_before_reset=lbr)
    graph = helper.make_graph([node], "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, I])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, d, B, H]),
                               helper.make_tensor_value_info("yh", TensorProto.FLOAT, [d, B, H])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((T, B, I)).astype(np.float32)}


def _engine_fallbacks() -> list:
    from qnnemu.core.graph import Graph
    from qnnemu.core.handles import HANDLES
    found = []
    for graph in HANDLES.live(Graph):
        engine = getattr(getattr(graph, "plan", None), "engine", None)
        if engine is not None:
            found += list(engine.fallbacks)
    return found


RNN_MODELS = ["lstm-" + v for v in ("forward", "reverse", "bidirectional", "initial-states", "peepholes")] + \
    ["gru-forward-lbr1", "gru-bidirectional-lbr1", "gru-reverse-lbr0"]


@pytest.mark.parametrize("float_math", ["float32", "float16"])
@pytest.mark.parametrize("name", RNN_MODELS)
def test_rnn_models_through_the_ep_have_no_fallback(name, float_math, monkeypatch):
    """ONNX LSTM / GRU as ONNX Runtime's QNN EP lowers them (weights sliced per gate by
    StridedSlice / ElementWiseAdd steps, NULL tensors for absent inputs) on SM8550: no Python
    fallback step, and QNNEMU_ENGINE=check (C program and Python plan compared on every execute)
    passes; float32 results match the CPU EP."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from helpers.lstm_models import VARIANTS, lstm_model

    import qnnemu.onnxruntime as qort
    monkeypatch.setenv("QNNEMU_ENGINE", "check")
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", float_math)
    if name.startswith("lstm-"):
        model, feeds = lstm_model(**VARIANTS[name[5:]])
    else:
        _, direction, lbr = name.split("-")
        model, feeds = _gru_model(direction, int(lbr[-1]))
    before = len(_engine_fallbacks())
    sess = qort.session(model, provider_options={"soc_model": "43"})
    ours = sess.run(None, feeds)
    fallbacks = _engine_fallbacks()[before:]
    assert not [f for f in fallbacks if f[1] in ("Lstm", "Gru")], f"{name}: no Lstm/Gru fallback step: {fallbacks}"
    assert fallbacks == [], f"{name}: no Python fallback step at all: {fallbacks}"
    if float_math == "float32":
        cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for k, (u, v) in enumerate(zip(ours, cpu)):
            assert np.allclose(u, v, atol=1e-5), f"{name}: output {k} matches the CPU EP: {np.abs(u - v).max()}"
    del sess


# -- CumulativeSum / TopK ---------------------------------------------------------------------------
def _single(op, x, xt, outs, quant=None, **params):
    """One node on one input ``x`` of QNN type ``xt``; outs: (QNN type, shape, quant); asserts no
    fallback and bit identity."""
    b = GraphBuilder(new_context(), "g")
    try:
        xin = b.tensor("x", x.shape, xt, APP_WRITE, quant=quant)
        ys = [b.tensor(f"y{k}", s, t, APP_READ, quant=q) for k, (t, s, q) in enumerate(outs)]
        b.node(op, "n", [xin], ys, **params)
        try:
            b.graph.finalize()
        except QnnError as exc:
            if exc.rule != "QNNEMU-htp-op-finalize":
                raise
            assume(False)
        assert b.graph.plan.engine.fallbacks == [], f"{op} lowers to C: {b.graph.plan.engine.fallbacks}"
        check_plan(b.graph.plan, {xin.id: x})
    finally:
        b.graph.context.free()


@pytest.mark.soc("SM8550")          # v68 has no float32 CumulativeSum (docs/op-support.md)
@pytest.mark.float_math("float32")
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple), data=st.data(),
       dtype=st.sampled_from([F32, I32, U8, "u8q"]), exclusive=st.booleans(), reverse=st.booleans())
def test_cumulative_sum_in_c_bit_identical(shape, data, dtype, exclusive, reverse):
    """numpy's float64 running sum in order (first element itself, -0.0 kept), rounded once to
    float32, saturated for integers, requantized for 8-bit codes."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    if dtype == "u8q":
        x, qt, q = rng.integers(0, 256, shape).astype(np.uint8), UFX8, (0.05, -128)
    else:
        x, qt, q = values(dtype, shape, rng), dtype, None
        if dtype == F32:
            x = np.where(np.isfinite(x), x / 1e10, x).astype(np.float32)
    _single("CumulativeSum", x, qt, [(qt, shape, q)], quant=q, axis=axis, exclusive=exclusive, reverse=reverse)


@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple), data=st.data(),
       dtype=st.sampled_from([F32, F16, I32, U8, "u8q"]), largest=st.booleans(), ties=st.booleans(),
       index=st.sampled_from([I32, U32]))
def test_topk_in_c_bit_identical(shape, data, dtype, largest, ties, index):
    """Ranked by key descending, NaN first, ties by the higher index (numpy's stable argsort
    reversed); values copied, indices stored."""
    k = data.draw(st.integers(1, shape[-1]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    if dtype == "u8q":
        x, qt, q = rng.integers(0, 4 if ties else 256, shape).astype(np.uint8), UFX8, (0.05, -128)
    else:
        x, qt, q = values(dtype, shape, rng), dtype, None
        if ties:
            x = (x % 3).astype(x.dtype) if dtype in (I32, U8) else np.round(np.clip(x, -1, 1)).astype(x.dtype)
    out = tuple(shape[:-1]) + (k,)
    _single("TopK", x, qt, [(qt, out, q), (index, out, None)], quant=q, k=k, largest=largest)
