"""Relu folded into convolutions (QNN HTP backend documentation, "QNN HTP Graph Config Options":
QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF): the numeric consequence in the
execution plan (qnnemu/core/plan.py ``folded_activations``; docs/numerics.md "Relu folded into
convolutions").

By default the HTP folds a Relu / ReluMinMax into the convolution before it: the convolution
requantizes its accumulator straight into the activation's output encoding, whose range is then
the only clamp -- the convolution's own output encoding neither rounds nor clips those values.
With the config set, the requested encodings are kept (convolution codes, then the activation).

- ``test_vendor_fold_differential``: small quantized graphs on the vendor's libQnnHtp.so and on
  ours, folding on and off; ours must give the vendor's codes (``MIN_EXACT``), and the vendor
  itself must fold exactly the cases ``CASES`` says it does (on != off), which pins the evidence
  for the producer / activation / encoding rules.  Skips without the vendor library.
- ``test_folded_vs_unfolded_codes``: on a graph with power-of-two scales (so the HTP's integer
  requantization is exact) our folded and unfolded codes equal the ones computed here from
  float64 math, and differ from each other.
- float graphs, the config reaching the plan through graphCreate and graphSetConfig, and a
  weight update of a folded convolution (``refresh_plan``).

Run with ``-s`` for the agreement table (exact / within-1-LSB fractions, folding on and off).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from vendor import vendor_library

from qnnemu.client import Backend, QnnCallError, _null_terminated, ffi, htp_graph_config
from qnnemu.core.handles import HANDLES
from qnnemu.core.plan import FOLDED_ACTIVATIONS, FOLDING_PRODUCERS, FoldedActivation
from qnnemu.headers import Q

HTP = vendor_library("libQnnHtp.so")
U8, U16, S8, S32 = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16,
                    Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_32)
FOLD_OFF = "FOLD_RELU_ACTIVATION_INTO_CONV_OFF"


def fold_off_config():
    return htp_graph_config(FOLD_OFF, foldReluActivationIntoConvOff=True)


def enc(lo: float, hi: float, bits: int = 8) -> tuple[float, int]:
    """(scale, offset) putting real ``lo`` at code 0 and ``hi`` at the top code."""
    scale = float(np.float32((hi - lo) / ((1 << bits) - 1)))
    return scale, round(lo / scale)


# -- the differential cases ----------------------------------------------------------------------

@dataclass(frozen=True)
class FoldCase:
    """A producer -> activation graph: ``conv_q`` / ``relu_q`` the two output encodings;
    ``vendor_folds`` what the vendor was seen to do with folding on; ``min_exact`` /
    ``min_within`` the required agreement of our codes with the vendor's (both settings)."""
    producer: str = "Conv2d"
    activation: str = "Relu"
    conv_q: tuple = enc(-1, 1)          # narrower than the activation's range: folding unclips
    relu_q: tuple = enc(0, 4)
    vendor_folds: bool = True
    bits: int = 8
    stride: int = 1
    per_channel: bool = False
    relu_params: dict = field(default_factory=dict)
    conv_read: bool = False             # the convolution's output is also a graph output
    second_relu: bool = False           # a second activation reads the convolution's output
    min_exact: float = 1.0
    min_within: float = 1.0


def _rmm(lo, hi):
    return {"min_value": np.float32(lo), "max_value": np.float32(hi)}


CASES: dict[str, FoldCase] = {
    # producers: the vendor folds Conv2d, DepthWiseConv2d, TransposeConv2d, FullyConnected
    "Conv2d_narrow": FoldCase(),
    "Conv2d_wide": FoldCase(conv_q=enc(-8, 8)),            # double rounding only
    "Conv2d_per_channel": FoldCase(per_channel=True),
    "Conv2d_stride2_wide": FoldCase(stride=2, conv_q=enc(-8, 8), relu_q=enc(0, 0.5)),
    "DepthWiseConv2d_narrow": FoldCase("DepthWiseConv2d"),
    "DepthWiseConv2d_stride2": FoldCase("DepthWiseConv2d", stride=2),
    "FullyConnected_narrow": FoldCase("FullyConnected"),
    # TransposeConv2d runs our float path: a code off by one here and there, either setting
    "TransposeConv2d_narrow": FoldCase("TransposeConv2d", min_exact=0.97),
    "TransposeConv2d_wide": FoldCase("TransposeConv2d", conv_q=enc(-8, 8), min_exact=0.97, min_within=0.98),
    "MatMul_not_folded": FoldCase("MatMul", vendor_folds=False),
    # activations: Relu and ReluMinMax fold (ReluMinMax's own clamp is dropped), Relu6 does not
    "ReluMinMax_0_6_enc_0_8": FoldCase(activation="ReluMinMax", relu_params=_rmm(0, 6), relu_q=enc(0, 8)),
    "ReluMinMax_m1_3_enc_m0.8_3": FoldCase(activation="ReluMinMax", relu_params=_rmm(-1, 3), relu_q=enc(-0.8, 3)),
    "ReluMinMax_m1_3_enc_m1.5_3": FoldCase(activation="ReluMinMax", relu_params=_rmm(-1, 3), relu_q=enc(-1.5, 3),
                                           vendor_folds=False),
    "ReluMinMax_0_6_enc_m0.05_8": FoldCase(activation="ReluMinMax", relu_params=_rmm(0, 6), relu_q=enc(-0.05, 8),
                                           vendor_folds=False),
    "Relu6_not_folded": FoldCase(activation="Relu6", relu_q=enc(0, 6), vendor_folds=False),
    # Relu folds only when its encoding's lowest code is real 0
    "Relu_enc_m0.1_8": FoldCase(relu_q=enc(-0.1, 8), vendor_folds=False),
    "Relu_enc_0.2_8": FoldCase(relu_q=enc(0.2, 8), vendor_folds=False),
    # the convolution's output also read elsewhere: the activation still folds
    "Conv2d_output_app_read": FoldCase(conv_read=True),
    "Conv2d_two_relus": FoldCase(second_relu=True),
    # 16-bit activations and outputs
    "Conv2d_u16_narrow": FoldCase(bits=16, conv_q=enc(-1, 1, 16), relu_q=enc(0, 4, 16), min_exact=0.98),
    "Conv2d_u16_wide": FoldCase(bits=16, conv_q=enc(-8, 8, 16), relu_q=enc(0, 4, 16)),
}


def build(g, case: FoldCase, seed: int) -> dict:
    """x (1x8x8x8 codes) -> producer (int8 weights, int32 bias) -> activation; returns feeds."""
    rng = np.random.default_rng(seed)
    act = U8 if case.bits == 8 else U16
    top = (1 << case.bits) - 1
    xs, xo = float(np.float32(5 / top)), -round(0.4 * top)
    x = g.input("x", (1, 8, 8, 8), act, quant=(xs, xo))
    feeds = {"x": rng.integers(0, top + 1, size=(1, 8, 8, 8)).astype(np.uint8 if case.bits == 8 else np.uint16)}
    cout = 8 if case.producer == "DepthWiseConv2d" else 16
    wshape = {"DepthWiseConv2d": (3, 3, 1, 8), "FullyConnected": (16, 8), "MatMul": (8, 16)}.get(
        case.producer, (3, 3, 8, 16))
    qw = rng.integers(-127, 128, size=wshape).astype(np.int8)
    if case.per_channel:
        ws = (0.005 + 0.01 * rng.random(cout)).astype(np.float32)
        w = g.static("w", qw, S8, quant={"axis": 3, "scales": ws, "offsets": [0] * cout})
        bs = (np.float32(xs) * ws).astype(np.float32)
        b = g.static("b", rng.integers(-2000, 2000, size=cout).astype(np.int32), S32,
                     quant={"axis": 0, "scales": bs, "offsets": [0] * cout})
    else:
        w = g.static("w", qw, S8, quant=(0.01, 0))
        b = g.static("b", rng.integers(-2000, 2000, size=cout).astype(np.int32), S32,
                     quant=(float(np.float32(xs) * np.float32(0.01)), 0))
    if case.producer in ("FullyConnected", "MatMul"):
        rows = g.node("Reshape", [x], outputs=[("rows", (64, 8), act, (xs, xo))])
        shape = (64, 16)
        ins = [rows, w, b] if case.producer == "FullyConnected" else [rows, w]
        params = {}
    else:
        n = 8 // case.stride if case.producer != "TransposeConv2d" else 8
        shape = (1, n, n, cout)
        ins = [x, w, b]
        params = {"stride": np.array([case.stride] * 2, np.uint32),
                  "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)}
    c = g.node(case.producer, ins, params=params, outputs=[("c", shape, act, case.conv_q)],
               app_read=case.conv_read, name="producer")
    g.node(case.activation, [c], params=dict(case.relu_params), outputs=[("y", shape, act, case.relu_q)],
           app_read=True, name="activation")
    if case.second_relu:
        g.node("Relu", [c], outputs=[("y2", shape, act, case.relu_q)], app_read=True, name="activation2")
    return feeds


def core_graph(g):
    """Our core Graph behind a client graph handle (same process)."""
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))


def run(backend: Backend, case: FoldCase, fold_off: bool, seed: int = 1, inspect=None) -> dict:
    ctx = backend.context()
    try:
        g = ctx.graph("fold", configs=[fold_off_config()] if fold_off else [])
        feeds = build(g, case, seed)
        g.finalize()
        if inspect is not None:
            inspect(core_graph(g))
        return g.execute(feeds)
    finally:
        ctx.free()


@pytest.fixture(scope="module")
def ours(our_backend):
    return our_backend      # tests/conftest.py


@pytest.fixture(scope="module")
def vendor(vendor_backend):
    return vendor_backend   # tests/conftest.py


REPORT: dict[tuple[str, str], tuple[float, float, int]] = {}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vendor_fold_differential(ours, vendor, name):
    case = CASES[name]
    results = {}
    for fold_off in (False, True):
        try:
            theirs = [run(vendor, case, fold_off, seed) for seed in (1, 2)]
        except QnnCallError as e:
            pytest.skip(f"the vendor backend refuses this graph: {e}")
        folds_seen = []
        mine = [run(ours, case, fold_off, seed,
                    inspect=lambda gr, folds_seen=folds_seen: folds_seen.append(dict(gr.plan.folds)))
                for seed in (1, 2)]
        results[fold_off] = theirs
        expect_fold = case.vendor_folds and not fold_off
        assert all(bool(f) == expect_fold for f in folds_seen), (
            f"{name}: our plan folds {folds_seen} with folding {'off' if fold_off else 'on'}; expected "
            f"{'a fold' if expect_fold else 'none'}")
        for out in theirs[0]:
            d = np.concatenate([np.abs(t[out].astype(np.int64) - m[out].astype(np.int64)).ravel()
                                for t, m in zip(theirs, mine)])
            exact, within = float(np.mean(d == 0)), float(np.mean(d <= 1))
            REPORT[(name, f"{out} fold {'OFF' if fold_off else 'on'}")] = (exact, within, int(d.max()))
            assert exact >= case.min_exact and within >= case.min_within, (
                f"{name} ({out}, folding {'off' if fold_off else 'on'}): our codes equal to the vendor's "
                f"{exact:.4f} (need {case.min_exact}), within 1 LSB {within:.4f} (need {case.min_within}), "
                f"max {d.max()} LSB")
    vendor_changed = any(not np.array_equal(a["y"], b["y"]) for a, b in zip(results[False], results[True]))
    assert vendor_changed == case.vendor_folds, (
        f"{name}: the vendor's Relu output {'changes' if vendor_changed else 'does not change'} with "
        f"{FOLD_OFF}; the case records vendor_folds={case.vendor_folds}")


def test_vendor_fold_off_through_graph_set_config(vendor, ours):
    """graphSetConfig before finalize turns folding off on both backends, like graphCreate."""
    case = CASES["Conv2d_narrow"]
    outs = {}
    for label, be in (("vendor", vendor), ("ours", ours)):
        ctx = be.context()
        try:
            g = ctx.graph("fold")
            feeds = build(g, case, 1)
            cfg = fold_off_config()
            be.call("graphSetConfig", g.handle, _null_terminated([cfg.config], "QnnGraph_Config_t"))
            g.finalize()
            outs[label] = g.execute(feeds)["y"]
        finally:
            ctx.free()
    assert np.array_equal(outs["vendor"], outs["ours"]), "graphSetConfig(FOLD_OFF): our codes are the vendor's"
    assert np.array_equal(outs["ours"], run(ours, case, True)["y"]), \
        "graphSetConfig(FOLD_OFF) before finalize has graphCreate's effect"


def teardown_module(module):
    if not REPORT:
        return
    lines = [f"{'case':30s} {'output / setting':18s} {'exact':>7s} {'within1':>8s} {'max':>4s}"]
    for (name, what), (exact, within, worst) in sorted(REPORT.items()):
        lines.append(f"{name:30s} {what:18s} {exact:7.4f} {within:8.4f} {worst:4d}")
    print("\n" + "\n".join(lines))


# -- ours: folded vs unfolded from float64 math -------------------------------------------------

X_SCALE, W_SCALE, B_SCALE = 2.0 ** -4, 2.0 ** -3, 2.0 ** -7
CONV_Q, RELU_Q = (2.0 ** -4, -128), (2.0 ** -2, 0)   # conv: [-8, 7.94]; relu: [0, 63.75]


def _pow2_graph(g, rng, updatable=False):
    """x (1x6x6x4 uint8) -> Conv2d (int8 weights, int32 bias) -> Relu with power-of-two scales:
    every multiplier of the HTP's requantization is a power of two, so its codes are exactly the
    rounded real values."""
    qx = rng.integers(0, 256, size=(1, 6, 6, 4)).astype(np.uint8)
    qw = rng.integers(-20, 21, size=(3, 3, 4, 8)).astype(np.int8)
    qb = rng.integers(-500, 501, size=8).astype(np.int32)
    x = g.input("x", qx.shape, U8, quant=(X_SCALE, 0))
    w = g.static("w", qw, S8, quant=(W_SCALE, 0), updatable=updatable)
    b = g.static("b", qb, S32, quant=(B_SCALE, 0))
    params = {"stride": np.array([1, 1], np.uint32), "pad_amount": np.array([[1, 1], [1, 1]], np.uint32)}
    c = g.node("Conv2d", [x, w, b], params=params, outputs=[("c", (1, 6, 6, 8), U8, CONV_Q)], name="conv")
    g.node("Relu", [c], outputs=[("y", (1, 6, 6, 8), U8, RELU_Q)], app_read=True, name="relu")
    return qx, qw, qb


def _real_conv(qx, qw, qb) -> np.ndarray:
    x = np.pad(qx.astype(np.float64) * X_SCALE, ((0, 0), (1, 1), (1, 1), (0, 0)))
    w = qw.astype(np.float64) * W_SCALE
    out = np.zeros((1, 6, 6, 8))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,co->nhwo", x[:, i:i + 6, j:j + 6, :], w[i, j])
    return out + qb.astype(np.float64) * B_SCALE


def expected_codes(real: np.ndarray, folded: bool) -> np.ndarray:
    """Folded: the real result rounded (half up, the convolution's rounding) into the Relu's
    encoding, clamped by its code range.  Unfolded: convolution codes (half up, clamped to its
    range), their real values through the Relu, requantized half to even (the Relu's rounding)."""
    if folded:
        return np.clip(np.floor(real / RELU_Q[0] + 0.5) - RELU_Q[1], 0, 255).astype(np.int64)
    conv = np.clip(np.floor(real / CONV_Q[0] + 0.5) - CONV_Q[1], 0, 255)
    relu = np.maximum(CONV_Q[0] * (conv + CONV_Q[1]), 0.0)
    return np.clip(np.rint(relu / RELU_Q[0]) - RELU_Q[1], 0, 255).astype(np.int64)


def _run_pow2(backend, fold_off: bool, seed=3):
    ctx = backend.context()
    try:
        g = ctx.graph("pow2", configs=[fold_off_config()] if fold_off else [])
        qx, qw, qb = _pow2_graph(g, np.random.default_rng(seed))
        g.finalize()
        plan = core_graph(g).plan
        return g.execute({"x": qx})["y"].astype(np.int64), _real_conv(qx, qw, qb), plan
    finally:
        ctx.free()


def test_folded_vs_unfolded_codes(ours):
    folded, real, plan_on = _run_pow2(ours, fold_off=False)
    unfolded, _, plan_off = _run_pow2(ours, fold_off=True)
    assert plan_on.folds == {1: 0} and isinstance(plan_on.steps[1].impl, FoldedActivation), \
        f"default: the Relu (node 1) is folded into the Conv2d (node 0); plan folds {plan_on.folds}"
    assert plan_off.folds == {} and not plan_off.fold_relu, f"{FOLD_OFF}: no fold, plan folds {plan_off.folds}"
    assert np.array_equal(folded, expected_codes(real, True)), (
        "folded codes = real result rounded into the Relu encoding; "
        f"{int(np.sum(folded != expected_codes(real, True)))} differ")
    assert np.array_equal(unfolded, expected_codes(real, False)), (
        f"unfolded codes = conv codes then Relu; {int(np.sum(unfolded != expected_codes(real, False)))} differ")
    unclipped = real > CONV_Q[0] * (255 + CONV_Q[1])
    assert unclipped.mean() > 0.1 and np.all(folded[unclipped] > unfolded[unclipped]), (
        f"values above the conv encoding's top ({unclipped.mean():.2%} of them) pass the folded Relu only")


def test_folded_producer_skips_its_unread_codes(ours):
    """A convolution read only by its folded Relu (a NATIVE output) writes no codes of its own:
    nothing reads them, and the default path does one requantization instead of three steps."""
    ctx = ours.context()
    try:
        g = ctx.graph("pow2")
        qx, _, _ = _pow2_graph(g, np.random.default_rng(3))
        g.finalize()
        core = core_graph(g)
        conv_impl = core.plan.steps[0].impl
        assert conv_impl.keep_own is False and len(conv_impl.folded) == 1, \
            "the folded Conv2d requantizes once, into the Relu's encoding"
        seen = {}
        x_id = next(t.id for t in core.tensors.values() if t.name == "x")
        core.plan.run({x_id: qx}, [], observer=lambda step, dt: seen.setdefault(step.node.name, step))
        assert set(seen) == {"conv", "relu"}, f"one step per node, observed {sorted(seen)}"
    finally:
        ctx.free()


def test_weight_update_keeps_the_fold(ours):
    """tensorUpdateGraphTensors on a folded convolution's weights (refresh_plan recompiles the
    convolution's step): the Relu codes are the folded ones for the new weights."""
    rng = np.random.default_rng(5)
    ctx = ours.context()
    try:
        g = ctx.graph("upd")
        qx, qw, qb = _pow2_graph(g, rng, updatable=True)
        g.finalize()
        new_w = np.random.default_rng(6).integers(-20, 21, size=qw.shape).astype(np.int8)
        g.update_tensors({"w": new_w})
        got = g.execute({"x": qx})["y"].astype(np.int64)
        assert core_graph(g).plan.folds == {1: 0}, "the fold survives the update"
    finally:
        ctx.free()
    assert np.array_equal(got, expected_codes(_real_conv(qx, new_w, qb), True)), \
        "after the weight update: folded codes of the new weights"


# -- float graphs, the config path ---------------------------------------------------------------

def test_float_graph_unaffected(ours):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 6, 6, 4)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 4, 8)) * 0.3).astype(np.float32)
    outs, plans = [], []
    for fold_off in (False, True):
        ctx = ours.context()
        try:
            g = ctx.graph("f", configs=[fold_off_config()] if fold_off else [])
            tx = g.input("x", x.shape)
            c = g.node("Conv2d", [tx, g.static("w", w)], outputs=[("c", (1, 4, 4, 8), np.float32)])
            g.node("Relu", [c], outputs=[("y", (1, 4, 4, 8), np.float32)], app_read=True)
            g.finalize()
            plans.append(core_graph(g).plan.folds)
            outs.append(g.execute({"x": x})["y"])
        finally:
            ctx.free()
    assert plans == [{}, {}], f"float tensors: nothing to fold either way ({plans})"
    assert np.array_equal(outs[0], outs[1]), "float Conv2d -> Relu: identical with and without FOLD_OFF"


@pytest.mark.parametrize("how", ["default", "graphCreate", "graphSetConfig"])
def test_config_reaches_the_plan(ours, how):
    ctx = ours.context()
    try:
        g = ctx.graph("cfg", configs=[fold_off_config()] if how == "graphCreate" else [])
        if how == "graphSetConfig":
            ours.call("graphSetConfig", g.handle, _null_terminated([fold_off_config().config], "QnnGraph_Config_t"))
        _pow2_graph(g, np.random.default_rng(1))
        g.finalize()
        plan = core_graph(g).plan
    finally:
        ctx.free()
    if how == "default":
        assert plan.fold_relu and plan.folds == {1: 0}, f"default: relu folded, plan folds {plan.folds}"
    else:
        assert not plan.fold_relu and plan.folds == {}, f"{FOLD_OFF} via {how}: no fold ({plan.folds})"


def test_fold_tables_match_the_cases():
    """The plan's producer / activation tables are exactly what the differential cases show."""
    folded_producers = {c.producer for c in CASES.values() if c.vendor_folds}
    assert folded_producers == FOLDING_PRODUCERS, f"producers seen folded {folded_producers}"
    folded_acts = {c.activation for c in CASES.values() if c.vendor_folds}
    assert folded_acts == FOLDED_ACTIVATIONS, f"activations seen folded {folded_acts}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_cost_model_folds_what_the_plan_folds(ours, name):
    """The prepare pipeline's cost model (a folded Relu costs nothing and writes in place) takes
    the numeric plan's decision for fixed-point graphs: every activation of the case is folded
    in the cost model exactly when the plan folds it, which is when the vendor does."""
    from qnnemu.htp import cost
    from qnnemu.htp.settings import graph_settings
    case = CASES[name]
    seen = {}

    def inspect(graph):
        settings = graph_settings(graph)
        for k, node in enumerate(graph.nodes):
            if node.op_type in cost.RELU_TYPES:
                seen[node.name] = (cost.folded_relu(node, graph, settings), k in graph.plan.folds)
    run(ours, case, fold_off=False, inspect=inspect)
    assert seen, f"{name}: the case has an activation"
    for act, (in_cost, in_plan) in seen.items():
        assert in_cost == in_plan == case.vendor_folds, \
            f"{name}: activation {act}: cost model folds {in_cost}, plan folds {in_plan}, vendor {case.vendor_folds}"
