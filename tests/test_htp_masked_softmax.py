"""MaskedSoftmax (QNN HTP backend documentation, "MaskedSoftmax"; QnnOpDef.h QNN_OP_MASKED_SOFTMAX):
the op (qnnemu/ops/masked_softmax.py) and the HTP's rewrite of Softmax(Where(condition, In,
Add(ReduceMin(In), B))) into MaskedSoftmax(In, condition) (qnnemu/core/plan.py
``masked_softmax_rewrites``; docs/op-support.md "MaskedSoftmax").

- the op's two modes against numpy (the additive mask; the compressed sequence lengths' block
  diagonal) and its rules (negative table ``RULE_CASES``);
- the node through the C ABI: refused as the vendor refuses it (it has no kernel for it), run with
  ``QNNEMU_OP_SUPPORT=all``;
- the rewrite, patterns A (Equal of a uint16 mask), B (NotEqual of a uint16 mask) and C (an 8-bit
  mask as the condition): the plan records it, masked entries are exactly 0 and the kept ones are
  the softmax of In's own values (not of the Where output's wider encoding, which the literal
  graph computes -- the test checks the two differ, so it fails without the rewrite); no rewrite
  with B > -20.0, float tensors or an int8 mask;
- the vendor (``test_vendor_pattern``): the same pattern graphs on its libQnnHtp.so, agreement
  pinned (skips without onnxruntime_qnn).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from optest import expect_rule, run_checked, spec
from vendor import our_library, vendor_env, vendor_library

from qnnemu.headers import Q
from qnnemu.ops.masked_softmax import COMPRESSED, masked_softmax

U8, U16 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16
BOOL = Q.QNN_DATATYPE_BOOL_8
F32 = Q.QNN_DATATYPE_FLOAT_32
I32 = Q.QNN_DATATYPE_INT_32
SHAPE = (1, 2, 4, 16)


# ---- the op ---------------------------------------------------------------------------------------
def test_uncompressed_is_softmax_of_data_plus_mask():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    mask = np.where(rng.random((1, SHAPE[-1])) < 0.3, -10000.0, 0.0).astype(np.float32)
    (y,) = run_checked("MaskedSoftmax", [x, mask])
    z = x.astype(np.float64) + mask[:, None, None, :]
    ref = np.exp(z - z.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.allclose(y, ref, atol=1e-6), "UNCOMPRESSED: softmax(x + mask) along the channel axis"
    assert np.all(y[..., mask[0] < 0] < 1e-30), "entries with a -10000 mask are (numerically) 0"


def test_compressed_is_block_diagonal_softmax():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    lengths = np.array([[3, 4]], np.int32)    # sequences [0, 3) and [3, 7); row / column 7 unused
    (y,) = run_checked("MaskedSoftmax", [x, lengths], {"mode": np.uint32(COMPRESSED)})
    for w in range(8):
        lo, hi = (0, 3) if w < 3 else (3, 7) if w < 7 else (0, 0)
        row = np.zeros(8)
        if hi > lo:
            e = np.exp(x[0, 0, w, lo:hi].astype(np.float64) - x[0, 0, w, lo:hi].max())
            row[lo:hi] = e / e.sum()
        assert np.allclose(y[0, 0, w], row, atol=1e-6), f"COMPRESSED row {w}: softmax over its sequence only"
    assert np.all(y[0, 0, 7] == 0) and np.all(y[0, 0, :3, 3:] == 0), "masked entries are exactly 0"


def test_masked_softmax_helper_zeroes_and_normalizes():
    x = np.array([[1.0, 2.0, 50.0, 3.0]], np.float32)
    keep = np.array([[True, True, False, True]])
    y = masked_softmax(x, keep)
    assert y[0, 2] == 0.0 and abs(float(y.sum()) - 1.0) < 1e-6, f"masked entry 0, kept ones sum to 1: {y}"
    assert np.all(masked_softmax(x, np.zeros_like(keep)) == 0), "a row with nothing kept is all 0"


# (input specs, params, rule suffix, parameter path): each row one rule of MaskedSoftmax
RULE_CASES = [
    ([spec(SHAPE), spec((1, 16))], {"mode": np.uint32(2)}, "mode", "params[mode]"),
    ([spec((2, 4, 16)), spec((1, 16))], {}, "input-rank", "inputTensors[0].rank"),
    ([spec(SHAPE), spec((1, 8))], {}, "mask", "inputTensors[1].dimensions"),
    ([spec((1, 1, 8, 8)), spec((1, 2), F32)], {"mode": np.uint32(COMPRESSED)}, "dtype",
     "inputTensors[1].dataType"),
]


@pytest.mark.parametrize("specs,params,rule,path", RULE_CASES, ids=[c[2] for c in RULE_CASES])
def test_rules(specs, params, rule, path):
    expect_rule("MaskedSoftmax", specs, params, None, rule, path)


def test_compressed_lengths_beyond_channel_fail_at_run():
    from qnnemu.errors import OpCheckError
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(OpCheckError, match="QNNEMU-MaskedSoftmax-mask"):
        run_checked("MaskedSoftmax", [x, np.array([[3, 2]], np.int32)], {"mode": np.uint32(COMPRESSED)})


# ---- the pattern graphs -----------------------------------------------------------------------------
def encoding(lo: float, hi: float, dtype: int) -> tuple[float, int]:
    top = 255 if dtype == U8 else 65535
    scale = (hi - lo) / top
    return scale, round(lo / scale)


def quantize(x, q, dtype):
    top = 255 if dtype == U8 else 65535
    return np.clip(np.round(x / q[0]) - q[1], 0, top).astype(np.uint8 if dtype == U8 else np.uint16)


def dequantize(c, q):
    return (c.astype(np.float64) + q[1]) * q[0]


def pattern_graph(g, pattern: str, dtype: int, fill: float = -20.0, seed: int = 3):
    """Softmax(Where(condition, In, Add(ReduceMin(In), B))) in ``dtype`` (U8 / U16 / F32) with the
    condition of ``pattern``: "A" ElementWiseEqual(mask, 0), "B" ElementWiseNotEqual(mask, 0)
    (uint16 mask), "C" the mask itself (BOOL_8).  Returns (feeds, In's real values, keep)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-6.0, 6.0, SHAPE)
    keep = rng.random(SHAPE) < 0.6
    keep[..., 0] = True
    fixed = dtype != F32
    xq = encoding(-8.0, 8.0, dtype) if fixed else None
    wq = encoding(-8.0 + fill - 2.0, 8.0, dtype) if fixed else None   # min(In) + B must fit
    bq = encoding(fill, 0.0, dtype) if fixed else None
    oq = encoding(0.0, 1.0, dtype) if fixed else None
    xin = g.input("x", SHAPE, dtype, quant=xq)
    feeds = {"x": quantize(x, xq, dtype) if fixed else x.astype(np.float32)}
    xr = dequantize(feeds["x"], xq) if fixed else x
    if pattern in "AB":
        mq = (1.0, 0)
        mask = np.where(keep, 0, 1) if pattern == "A" else np.where(keep, 1, 0)
        feeds["mask"] = mask.astype(np.uint16)
        m = g.input("mask", SHAPE, U16, quant=mq)
        zero = g.static("zero", np.zeros((1,), np.uint16), U16, quant=mq)
        cond = g.node("ElementWiseEqual" if pattern == "A" else "ElementWiseNotEqual", [m, zero],
                      [("cond", SHAPE, BOOL)])
    else:
        feeds["mask"] = keep.astype(np.uint8)
        cond = g.input("mask", SHAPE, BOOL)
    low = g.node("ReduceMin", [xin], [("low", SHAPE[:-1] + (1,), dtype, xq) if fixed else
                                      ("low", SHAPE[:-1] + (1,), dtype)],
                 params={"axes": np.array([3], np.uint32), "keep_dims": True})
    b = g.static("B", quantize(np.array([fill]), bq, dtype) if fixed else np.array([fill], np.float32),
                 dtype, quant=bq)
    filled = g.node("ElementWiseAdd", [low, b], [("filled", SHAPE[:-1] + (1,), dtype, wq) if fixed else
                                                  ("filled", SHAPE[:-1] + (1,), dtype)])
    where = g.node("ElementWiseSelect", [cond, xin, filled],
                   [("where", SHAPE, dtype, wq) if fixed else ("where", SHAPE, dtype)])
    g.node("Softmax", [where], [("y", SHAPE, dtype, oq) if fixed else ("y", SHAPE, dtype)], app_read=True)
    return feeds, xr, keep, oq, wq


def codes_of(real, q, dtype):
    return quantize(real, q, dtype).astype(np.int64)


def references(xr, keep, oq, wq, dtype, fill):
    """(MaskedSoftmax codes, the literal graph's codes): the softmax of In's values under the mask,
    and the softmax of the Where output's values (In and min(In) + B through its encoding)."""
    masked = codes_of(masked_softmax(xr, keep), oq, dtype)
    where = dequantize(quantize(np.where(keep, xr, xr.min(-1, keepdims=True) + fill), wq, dtype), wq)
    e = np.exp(where - where.max(-1, keepdims=True))
    return masked, codes_of(e / e.sum(-1, keepdims=True), oq, dtype)


def run_pattern(be, pattern, dtype, fill=-20.0):
    ctx = be.context()
    try:
        g = ctx.graph("g")
        feeds, xr, keep, oq, wq = pattern_graph(g, pattern, dtype, fill)
        g.finalize()
        y = g.execute(feeds)["y"]
        return (y if dtype == F32 else y.astype(np.int64)), xr, keep, oq, wq
    finally:
        ctx.free()


@pytest.fixture(scope="module")
def ours():
    from qnnemu.client import Backend
    with Backend(str(our_library()), log_level=None) as be:
        yield be


PATTERNS = [("A", U16), ("B", U16), ("C", U8), ("C", U16), ("B", U8)]


@pytest.mark.parametrize("pattern,dtype", PATTERNS, ids=[f"{p}-{'u8' if d == U8 else 'u16'}" for p, d in PATTERNS])
def test_rewrite_computes_masked_softmax(ours, pattern, dtype):
    y, xr, keep, oq, wq = run_pattern(ours, pattern, dtype)
    masked, literal = references(xr, keep, oq, wq, dtype, -20.0)
    assert (masked != literal).sum() > 5, "the test graph distinguishes the rewrite from the literal graph"
    assert np.all(y[~keep] == codes_of(np.zeros(1), oq, dtype)[0]), f"pattern {pattern}: masked entries output 0"
    assert np.array_equal(y, masked), \
        f"pattern {pattern}: the softmax of In's own values ({int((y != masked).sum())} codes differ)"


def test_rewrite_recorded_in_the_plan():
    from qnnemu.client import Backend
    from qnnemu.core import plan as plan_mod
    with Backend(str(our_library()), log_level=None) as be:
        ctx = be.context()
        g = ctx.graph("g")
        pattern_graph(g, "B", U16)
        g.finalize()
        graph = _graph_object(g)
        found = plan_mod.masked_softmax_rewrites(graph)
        assert [m.pattern for m in found.values()] == ["B"], f"one pattern-B rewrite: {found}"
        assert set(next(iter(found.values())).nodes) == {"ElementWiseNotEqual_0", "ReduceMin_1", "ElementWiseAdd_2",
                                                         "ElementWiseSelect_3"}, "the nodes it covers"
        notes = graph.plan.notes
        assert any("MaskedSoftmax rewrite (pattern B)" in n for n in notes), f"plan notes say so: {notes}"
        ctx.free()


def _graph_object(client_graph):
    """The qnnemu.core graph behind a client graph of our library (loaded in this process)."""
    from qnnemu.client import ffi
    from qnnemu.core.handles import HANDLES
    return HANDLES.lookup(int(ffi.cast("uintptr_t", client_graph.handle)))


@pytest.mark.parametrize("fill", [-19.5, -10.0])
def test_no_rewrite_when_b_above_minus_20(ours, fill):
    y, xr, keep, oq, wq = run_pattern(ours, "C", U8, fill)
    masked, literal = references(xr, keep, oq, wq, U8, fill)
    assert (masked != literal).sum() > 5, "the test graph distinguishes the rewrite from the literal graph"
    assert np.array_equal(y, literal), f"B = {fill} > -20.0: the graph computes as written"


def test_no_rewrite_for_float_graphs(ours, monkeypatch):
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")   # the HTP has no float32 Select at rank 4 on v68
    ctx = ours.context()
    try:
        g = ctx.graph("g")
        pattern_graph(g, "C", F32)
        g.finalize()
        plan = _graph_object(g).plan
        assert plan.masked_softmax == {}, \
            f"uint8 / uint16 quantization only: no rewrite of a float32 graph, {plan.notes}"
    finally:
        ctx.free()


# ---- the vendor -------------------------------------------------------------------------------------
VENDOR_CASES = [("C", U8, -20.0), ("B", U8, -20.0), ("C", U8, -30.0), ("C", U8, -19.5), ("B", U8, -10.0),
                ("A", U16, -20.0)]


def test_vendor_pattern(tmp_path):
    """The vendor rewrites exactly when B <= -20.0 (its uint8 results are within 1 code of the
    masked softmax, and 6+ codes off the literal graph; with B = -19.5 / -10 they equal the
    literal graph); ours agrees with it within 1 code (uint16: within 8, its Softmax kernel)."""
    if vendor_library() is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    code = ("import sys, pickle; sys.path.insert(0, sys.argv[1]); import test_htp_masked_softmax as t\n"
            "from qnnemu.client import Backend\n"
            "out = {}\n"
            "with Backend(sys.argv[2], log_level=None) as be:\n"
            "    for p, d, f in t.VENDOR_CASES: out[(p, d, f)] = t.run_pattern(be, p, d, f)[0]\n"
            "open(sys.argv[3], 'wb').write(pickle.dumps(out))\n")
    import pickle
    here = os.path.dirname(os.path.abspath(__file__))
    result = tmp_path / "vendor.pickle"
    proc = subprocess.run([sys.executable, "-c", code, here, str(vendor_library()), str(result)],
                          env=vendor_env(), capture_output=True, timeout=600)
    assert proc.returncode == 0 and result.exists(), f"the vendor subprocess failed: {proc.stderr[-2000:]!r}"
    vendor = pickle.loads(result.read_bytes())
    from qnnemu.client import Backend
    with Backend(str(our_library()), log_level=None) as be:
        for p, d, f in VENDOR_CASES:
            y, xr, keep, oq, wq = run_pattern(be, p, d, f)
            v = vendor[(p, d, f)]
            masked, literal = references(xr, keep, oq, wq, d, f)
            tol = 1 if d == U8 else 8
            assert np.abs(y - v).max() <= tol, f"{p} {f}: ours within {tol} code(s) of the vendor"
            if d == U8:
                want, other = (masked, literal) if f <= -20.0 else (literal, masked)
                assert np.abs(v - want).max() <= 1 < np.abs(v - other).max(), \
                    f"{p} B={f}: the vendor {'rewrites' if f <= -20.0 else 'does not rewrite'}"


# ---- the node through the C ABI ---------------------------------------------------------------------
def _node_graph(be):
    ctx = be.context()
    g = ctx.graph("g")
    q = encoding(-8.0, 8.0, U8)
    x = g.input("x", (1, 1, 4, 8), U8, quant=q)
    m = g.input("m", (1, 8), U8, quant=encoding(-10000.0, 0.0, U8))
    return ctx, g, [x, m], q


def test_node_refused_as_the_vendor_refuses_it(ours):
    """The vendor: backendValidateOpConfig 'OpValidator not found', graphFinalize 'could not create
    op' (no HTP kernel on any arch); ours the same, with the measured op support's rules."""
    from qnnemu.client import QnnCallError
    for validate in (True, False):
        ctx, g, ins, _ = _node_graph(ours)
        try:
            if validate:
                with pytest.raises(QnnCallError, match="QNNEMU-htp-op-unsupported"):
                    g.node("MaskedSoftmax", ins, [("y", (1, 1, 4, 8), U8, (1 / 255, 0))], validate=True)
                continue
            g.node("MaskedSoftmax", ins, [("y", (1, 1, 4, 8), U8, (1 / 255, 0))], app_read=True)
            with pytest.raises(QnnCallError, match="QNNEMU-htp-op-finalize"):
                g.finalize()
        finally:
            ctx.free()


def test_node_runs_with_op_support_all(ours, monkeypatch):
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")
    ctx, g, ins, q = _node_graph(ours)
    try:
        oq = (1 / 255, 0)
        g.node("MaskedSoftmax", ins, [("y", (1, 1, 4, 8), U8, oq)], app_read=True)
        g.finalize()
        rng = np.random.default_rng(4)
        xc = rng.integers(0, 256, (1, 1, 4, 8)).astype(np.uint8)
        mc = np.where(np.arange(8) < 5, 255, 0).astype(np.uint8)[None]   # 255: real 0 (kept), 0: -10000
        y = g.execute({"x": xc, "m": mc})["y"].astype(np.int64)
        keep = np.broadcast_to(mc[:, None, None, :] == 255, xc.shape)
        want = codes_of(masked_softmax(dequantize(xc, q), keep), oq, U8)
        assert np.abs(y - want).max() <= 1, "UNCOMPRESSED through the ABI: softmax(x + mask) within 1 code"
        assert np.all(y[..., 5:] == 0), "entries under a -10000 mask are 0"
    finally:
        ctx.free()
