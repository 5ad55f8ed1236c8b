"""Float activations folded into their producers (qnnemu/core/plan.py, "relu folded into
convolutions": ``float_folded_activations``, ``ActivationEpilogue``; QNN HTP backend
documentation, graph config QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF).

A Relu / ReluMinMax reading the float32 result of a Conv2d, DepthWiseConv2d, TransposeConv2d,
FullyConnected or MatMul that nothing else reads is applied by the producer's step (the C
kernels clamp each finished tile); the activation's step stays in the plan and writes nothing.
Checked here: the fold happens exactly in those cases, the outputs are the bytes of the unfolded
graph (FOLD_RELU_ACTIVATION_INTO_CONV_OFF) and of the Python plan (QNNEMU_ENGINE=python), in
float32 and float16 math, NaN and signed zeros included; per-node profiles still list the
activation; a weight update keeps the fold; the kernels' epilogue does not depend on the thread
count.
"""
from __future__ import annotations

import numpy as np
import pytest

from qnnemu.client import ffi, htp_graph_config
from qnnemu.core.handles import HANDLES
from qnnemu.core.plan import ActivationEpilogue, FoldedIntoProducer
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

F32 = np.float32
PRODUCERS = ("Conv2d", "DepthWiseConv2d", "TransposeConv2d", "FullyConnected", "MatMul")
ACTIVATIONS = {"Relu": {}, "ReluMinMax": {"min_value": F32(-0.5), "max_value": F32(1.5)}}


def fold_off_config():
    return htp_graph_config("FOLD_RELU_ACTIVATION_INTO_CONV_OFF", foldReluActivationIntoConvOff=True)


def core_graph(g):
    """Our core Graph behind a client graph handle (same process)."""
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))


def special(rng, shape) -> np.ndarray:
    """Random values with NaN of both signs, infinities, zeros of both signs and values beyond
    the clip bounds: every case of max / min and of the float16 rounding."""
    a = (rng.standard_normal(shape) * 2).astype(F32)
    flat = a.reshape(-1)
    k = flat.size
    flat[rng.integers(0, k, max(k // 50, 1))] = np.nan
    flat[rng.integers(0, k, max(k // 50, 1))] = -np.nan
    flat[rng.integers(0, k, max(k // 50, 1))] = np.inf
    flat[rng.integers(0, k, max(k // 10, 1))] = 0.0
    flat[rng.integers(0, k, max(k // 10, 1))] = -0.0
    return a


def build(g, producer: str, activation: str, rng, *, act_params=None, producer_read=False,
          second_reader=False, updatable=False) -> dict:
    """x -> producer -> c -> activation -> y (graph output); returns the feeds."""
    if producer in ("FullyConnected", "MatMul"):
        xs, cshape = (7, 40), (7, 36)
        wshape = (36, 40) if producer == "FullyConnected" else (40, 36)
        params = {}
    elif producer == "TransposeConv2d":
        xs, wshape, cshape = (1, 5, 5, 8), (3, 3, 8, 6), (1, 11, 11, 6)
        params = {"stride": np.array([2, 2], np.uint32)}
    else:
        xs = (1, 9, 9, 32)
        cout = 32 if producer == "DepthWiseConv2d" else 48
        wshape, cshape = (3, 3, 1 if producer == "DepthWiseConv2d" else 32, cout), (1, 9, 9, cout)
        params = {"pad_amount": np.array([[1, 1], [1, 1]], np.uint32)}
    x = g.input("x", xs)
    w = g.static("w", rng.standard_normal(wshape).astype(F32), updatable=updatable)
    ins = [x, w]
    if producer not in ("MatMul", "TransposeConv2d"):
        ins.append(g.static("b", rng.standard_normal(cshape[-1]).astype(F32)))
    c = g.node(producer, ins, outputs=[("c", cshape, F32)], params=params, name="producer",
               app_read=producer_read)
    act_params = ACTIVATIONS[activation] if act_params is None else act_params
    g.node(activation, [c], outputs=[("y", cshape, F32)], params=act_params, name="activation", app_read=True)
    if second_reader:
        g.node("Relu", [c], outputs=[("y2", cshape, F32)], name="second", app_read=True)
    return {"x": special(rng, xs)}


def run(be, producer, activation, *, fold_off=False, seed=1, inspect=None, **kw) -> dict:
    ctx = be.context()
    try:
        g = ctx.graph("ff", configs=[fold_off_config()] if fold_off else [])
        feeds = build(g, producer, activation, np.random.default_rng(seed), **kw)
        g.finalize()
        if inspect is not None:
            inspect(core_graph(g))
        return g.execute(feeds)
    finally:
        ctx.free()


def same_bytes(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


@pytest.fixture(scope="module")
def ours(our_backend):
    return our_backend      # tests/conftest.py


@pytest.mark.parametrize("math", ["soc", "float32", "float16"])   # soc: v68's float32 with its float16 islands
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("producer", PRODUCERS)
def test_fold_is_bit_identical(ours, monkeypatch, producer, activation, math):
    """Folded (C engine, in check mode too, and the Python plan) == unfolded (FOLD_OFF), byte
    for byte, with NaN, infinities and signed zeros in the input."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", math)
    seen = {}

    def inspect(graph):
        plan = graph.plan
        seen["folds"] = dict(plan.float_folds)
        seen["impls"] = [type(s.impl) for s in plan.steps]
        seen["fallbacks"] = plan.engine.fallbacks if plan.engine is not None else None

    folded = run(ours, producer, activation, inspect=inspect)
    assert seen["folds"] == {1: 0}, f"{producer} -> {activation} ({math}): folded, plan float folds {seen['folds']}"
    assert seen["impls"] == [ActivationEpilogue, FoldedIntoProducer], \
        f"{producer} -> {activation} ({math}): the producer's step applies the activation: {seen['impls']}"
    assert seen["fallbacks"] == [], f"{producer} -> {activation} ({math}): both steps run in C: {seen['fallbacks']}"
    unfolded = run(ours, producer, activation, fold_off=True, inspect=inspect)
    assert seen["folds"] == {}, f"FOLD_OFF: no float fold ({seen['folds']})"
    assert same_bytes(folded, unfolded), f"{producer} -> {activation} ({math}): folded bytes == FOLD_OFF bytes"
    monkeypatch.setenv("QNNEMU_ENGINE", "python")
    python = run(ours, producer, activation, inspect=inspect)
    assert seen["folds"] == {1: 0}, "the Python plan folds too"
    assert same_bytes(folded, python), f"{producer} -> {activation} ({math}): C engine bytes == Python plan bytes"
    monkeypatch.setenv("QNNEMU_ENGINE", "check")
    checked = run(ours, producer, activation, seed=2)     # raises EngineMismatch on a difference
    monkeypatch.setenv("QNNEMU_ENGINE", "c")
    assert same_bytes(checked, run(ours, producer, activation, fold_off=True, seed=2)), \
        f"{producer} -> {activation} ({math}), seed 2: folded bytes == FOLD_OFF bytes"


NO_FOLD = {
    "producer output is a graph output": dict(producer_read=True),
    "producer output has a second reader": dict(second_reader=True),
    "FOLD_RELU_ACTIVATION_INTO_CONV_OFF": dict(fold_off=True),
    "float16 math, a clip bound that is no float16 value": dict(act_params={"min_value": F32(0.0),
                                                                            "max_value": F32(0.1)},
                                                               math="float16"),
}


@pytest.mark.parametrize("case", sorted(NO_FOLD))
def test_no_fold(ours, monkeypatch, case):
    """Where the producer's own value is needed, folding is off, or the float16 rounding would
    not commute with the clip, the activation keeps its step; the bytes are the Python plan's."""
    kw = dict(NO_FOLD[case])
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", kw.pop("math", "float32"))
    activation = "ReluMinMax" if "act_params" in kw else "Relu"
    seen = {}

    def inspect(graph):
        seen["folds"] = dict(graph.plan.float_folds)
        seen["impls"] = [type(s.impl).__name__ for s in graph.plan.steps]

    got = run(ours, "Conv2d", activation, inspect=inspect, **kw)
    assert seen["folds"] == {}, f"{case}: no float fold, got {seen['folds']}"
    assert "FoldedIntoProducer" not in seen["impls"] and "ActivationEpilogue" not in seen["impls"], \
        f"{case}: every step is its op's own: {seen['impls']}"
    monkeypatch.setenv("QNNEMU_ENGINE", "python")
    assert same_bytes(got, run(ours, "Conv2d", activation, **kw)), f"{case}: C engine bytes == Python plan bytes"


def test_no_fold_after_other_producers(ours):
    """An activation after an op that is no folding producer (ElementWiseSubtract) and a Relu6
    after a Conv2d keep their steps."""
    ctx = ours.context()
    try:
        g = ctx.graph("nf")
        x = g.input("x", (1, 4, 4, 8))
        s = g.node("ElementWiseSubtract", [x, x], outputs=[("s", (1, 4, 4, 8), F32)])
        g.node("Relu", [s], outputs=[("y", (1, 4, 4, 8), F32)], app_read=True)
        w = g.static("w", np.ones((1, 1, 8, 8), F32))
        c = g.node("Conv2d", [x, w], outputs=[("c", (1, 4, 4, 8), F32)])
        g.node("Relu6", [c], outputs=[("y6", (1, 4, 4, 8), F32)], app_read=True)
        g.finalize()
        plan = core_graph(g).plan
        assert plan.float_folds == {}, f"no float fold after ElementWiseSubtract or into a Relu6: {plan.float_folds}"
    finally:
        ctx.free()


@pytest.mark.parametrize("engine", ["c", "python"])
def test_profile_lists_the_folded_activation(ours, monkeypatch, engine):
    """QnnProfile DETAILED: the folded activation is still a node of the execute's events."""
    monkeypatch.setenv("QNNEMU_ENGINE", engine)
    ctx = ours.context()
    prof = ours.profile("detailed")
    try:
        g = ctx.graph("prof")
        feeds = build(g, "Conv2d", "Relu", np.random.default_rng(4))
        g.finalize()
        assert core_graph(g).plan.float_folds == {1: 0}, "the Relu is folded"
        g.execute(feeds, profile=prof)
        names = set()

        def walk(events):
            for e in events:
                names.add(e["identifier"])
                walk(e.get("sub_events", ()))
        walk(prof.events())
        assert any("activation" in n for n in names) and any("producer" in n for n in names), \
            f"engine {engine}: the execute's profile lists the producer and the folded activation: {sorted(names)}"
    finally:
        ctx.free()
        prof.free()


def test_weight_update_keeps_the_fold(ours):
    """tensorUpdateGraphTensors of a folded convolution's weights (refresh_plan): the fold stays
    and the outputs are the unfolded graph's with the same weights."""
    rng = np.random.default_rng(9)
    new_w = rng.standard_normal((3, 3, 32, 48)).astype(F32)
    outs, folds = [], []
    for fold_off in (False, True):
        ctx = ours.context()
        try:
            g = ctx.graph("upd", configs=[fold_off_config()] if fold_off else [])
            feeds = build(g, "Conv2d", "ReluMinMax", np.random.default_rng(1), updatable=True)
            g.finalize()
            g.execute(feeds)
            g.update_tensors({"w": new_w})
            folds.append(dict(core_graph(g).plan.float_folds))
            outs.append(g.execute(feeds))
        finally:
            ctx.free()
    assert folds == [{1: 0}, {}], f"the fold survives the update (and FOLD_OFF has none): {folds}"
    assert same_bytes(outs[0], outs[1]), "after the update: folded bytes == FOLD_OFF bytes"


@pytest.mark.parametrize("act", [1, 2])
def test_epilogue_does_not_depend_on_the_thread_count(act):
    """qe_sgemm_act / qe_sconv2d_act / qe_depthwise2d_act: the bytes of the same kernel without
    the activation followed by numpy's maximum / clip, and the same bytes on 1, 2 and 3 threads
    (NaN of both signs, infinities, signed zeros in the input: the depthwise kernel splits its
    pixels at output row boundaries, so even the sign of a NaN made of two NaNs is the same)."""
    lib, ffi_ = _fast.library()
    rng = np.random.default_rng(act)
    hw = 96   # large enough for every kernel to split over the threads
    f = rng.standard_normal((3, 3, 48, 64)).astype(F32)
    fd = rng.standard_normal((3, 3, 1, 48)).astype(F32)
    bias = rng.standard_normal(64).astype(F32)
    lo, hi = F32(-0.25), F32(0.75)
    p = lambda a: ffi_.cast("float *", a.ctypes.data)   # noqa: E731
    saved = lib.qe_threads()

    def kernels(x, mode):
        conv = np.empty((1, hw, hw, 64), F32)
        rc = lib.qe_sconv2d_act(1, hw, hw, 48, 3, 3, hw, hw, 1, 1, 1, 1, 1, 1, 1, 64, p(x), p(f), 64, 1, 0,
                                ffi_.NULL, p(conv), 64, p(bias), mode, lo, hi)
        assert rc == 0, "qe_sconv2d_act ran"
        dw = np.empty((1, hw, hw, 48), F32)
        lib.qe_depthwise2d_act(1, hw, hw, 48, 3, 3, 48, hw, hw, 1, 1, 1, 1, 1, 1, p(x), p(fd), ffi_.NULL,
                               p(dw), mode, lo, hi)
        mm = np.empty((hw * hw, 64), F32)
        assert lib.qe_sgemm_act(hw * hw, 64, 48, p(x), 48, 1, p(f[1, 1]), 64, 1, p(mm), 64, ffi_.NULL,
                                mode, lo, hi) == 0, "qe_sgemm_act ran"
        return {"conv": conv, "depthwise": dw, "gemm": mm}

    xs = special(rng, (1, hw, hw, 48))
    xf = (rng.standard_normal((1, hw, hw, 48)) * 2).astype(F32)
    xf[rng.random(xf.shape) < 0.2] = -0.0
    seen = []
    try:
        for threads in (1, 2, 3):
            lib.qe_set_threads(threads)
            run = {}
            for label, x in (("special", xs), ("finite", xf)):
                got, base = kernels(x, act), kernels(x, 0)
                for what in got:
                    want = np.maximum(base[what], F32(0)) if act == 1 else np.clip(base[what], lo, hi)
                    assert got[what].tobytes() == want.tobytes(), \
                        f"{what}, {label} input, {threads} thread(s), act {act}: the epilogue equals numpy's " \
                        f"{'maximum' if act == 1 else 'clip'} after the kernel"
                    run[(label, what)] = got[what].tobytes()
            seen.append(run)
    finally:
        lib.qe_set_threads(saved)
    for key in seen[0]:
        assert seen[0][key] == seen[1][key] == seen[2][key], f"act {act}, {key}: the same bytes on 1, 2 and 3 threads"
