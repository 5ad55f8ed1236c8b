"""RandomUniformLike and RandomNormalLike (qnnemu/ops/random.py).

The values cannot match the vendor's bit for bit (its generator is not public), so this checks
what is defined: shapes, the 8-bit output codes, range, moments (within bounds a correct
generator misses with probability < 1e-6), and the seed rules (same seed -> same values, in
every execution and in every node; no seed -> one draw per finalized graph).  Warning rules go
through our backend's C ABI; negative tests: one per rule id.
"""
from __future__ import annotations

import numpy as np
import pytest
from optest import expect_rule, run_checked, spec

from qnnemu.errors import OpUnsupportedError
from qnnemu.headers import Q

F32, I32, U32 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32
U8, S8 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8
SHAPE = (40, 500)          # 20000 draws
OUT = [spec(SHAPE, U8)]


def draw(op, params=None, seed=3.0, shape=SHAPE):
    arrays = [np.array(shape, np.uint32)] + ([np.array([seed], np.float32)] if seed is not None
                                             else [])
    (y,) = run_checked(op, arrays, params, declared=[spec(shape, U8)])
    assert y.shape == shape and y.dtype == np.float32, f"{op}: real values of the declared shape"
    return y.astype(np.float64)


@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-1.0, 2.0), (5.0, 6.0), (2.0, -1.0)])
def test_uniform_range_and_moments(low, high):
    y = draw("RandomUniformLike", {"low": low, "high": high})
    lo, hi = min(low, high), max(low, high)
    assert lo <= y.min() and y.max() <= hi, f"U({low}, {high}): values within [{lo}, {hi}]"
    width = hi - lo
    n = y.size
    # mean sd width/sqrt(12 n); 5.5 sigma ~ 4e-8 two-sided
    assert abs(y.mean() - (lo + hi) / 2) < 5.5 * width / np.sqrt(12 * n), f"U({low}, {high}): mean"
    assert abs(y.std() - width / np.sqrt(12)) < 0.02 * width, f"U({low}, {high}): std"
    hist = np.histogram(y, bins=10, range=(lo, hi))[0]
    expected = n / 10
    chi2 = float(((hist - expected) ** 2 / expected).sum())
    assert chi2 < 45.0, f"U({low}, {high}): 10-bin chi-square {chi2:.1f} (9 dof; p < 1e-6 above 45)"


@pytest.mark.parametrize("mean,scale", [(0.0, 1.0), (1.0, 0.5), (-2.0, -3.0), (0.5, 0.0)])
def test_normal_moments(mean, scale):
    y = draw("RandomNormalLike", {"mean": mean, "scale": scale})
    sd = abs(scale)
    n = y.size
    assert abs(y.mean() - mean) <= 5.5 * sd / np.sqrt(n) + 1e-12, f"N({mean}, {scale}): mean"
    assert abs(y.std() - sd) <= 0.03 * sd + 1e-12, f"N({mean}, {scale}): std"
    if sd:
        z = (y - mean) / sd
        within = float(np.mean(np.abs(z) < 1.0))
        assert abs(within - 0.6827) < 0.02, f"N({mean}, {scale}): P(|z| < 1) = {within:.4f}"


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike"])
def test_seed_rules_at_op_level(op):
    a, b = draw(op, seed=3.0), draw(op, seed=3.0)
    assert np.array_equal(a, b), f"{op}: equal seeds draw equal values"
    assert not np.array_equal(a, draw(op, seed=4.0)), f"{op}: another seed, other values"
    assert not np.array_equal(a, draw(op, seed=3.5)), f"{op}: the seed's fraction matters"
    assert np.array_equal(a.ravel()[:6], draw(op, shape=(2, 3)).ravel()), \
        f"{op}: a smaller output draws the start of the same stream (the vendor's does too)"


def test_no_seed_draws_once_per_instance():
    cls_specs = [spec((2,), U32)]
    from qnnemu import ops
    cls = ops.get("RandomUniformLike")
    params = cls.parse_params({})
    one = cls(params, cls_specs, OUT)
    other = cls(params, cls_specs, OUT)
    shape = np.array(SHAPE, np.uint32)
    assert np.array_equal(one.run(shape)[0], one.run(shape)[0]), \
        "no seed: one instance (one finalized graph) draws the same values every run"
    assert not np.array_equal(one.run(shape)[0], other.run(shape)[0]), \
        "no seed: two instances (two graphs) draw different values"


def _graph(be, nodes, seed=3.0, out_type=U8, quant=(3 / 255, -85), deq=False):
    ctx = be.context()
    g = ctx.graph("g")
    ins = [g.static("shape", np.array([4, 8], np.uint32))]
    if seed is not None:
        ins.append(g.static("seed", np.array([seed], np.float32)))
    for k in range(nodes):
        y = g.node("RandomUniformLike", ins, [(f"y{k}", (4, 8), out_type, quant)],
                   params={"low": -1.0, "high": 2.0}, app_read=not deq, name=f"r{k}")
        if deq:
            g.node("Dequantize", [y], [(f"f{k}", (4, 8), np.float32)], app_read=True,
                   name=f"d{k}")
    g.finalize()
    return ctx, g


def test_seeds_through_our_backend():
    """The vendor's pattern: a seeded node draws the same codes in every execution, in every
    graph and in every node with that seed; without a seed two graphs differ.  The EP's form
    (u8 codes in [min(low, 0), max(high, 0)], then Dequantize) gives values in [low, high]."""
    from qnnemu.client import Backend
    with Backend() as be:
        ctx, g = _graph(be, 2)
        first, second = g.execute({}), g.execute({})
        assert first["y0"].dtype == np.uint8, "UFIXED_POINT_8 codes"
        assert np.array_equal(first["y0"], second["y0"]), "seeded: equal in every execution"
        assert np.array_equal(first["y0"], first["y1"]), "seeded: equal in two nodes"
        ctx.free()
        ctx, g = _graph(be, 1)
        assert np.array_equal(g.execute({})["y0"], first["y0"]), "seeded: equal in another graph"
        ctx.free()
        draws = []
        for _ in range(2):
            ctx, g = _graph(be, 1, seed=None)
            draws.append(g.execute({})["y0"])
            assert np.array_equal(g.execute({})["y0"], draws[-1]), "no seed: constant per graph"
            ctx.free()
        assert not np.array_equal(*draws), "no seed: two graphs draw different codes"
        ctx, g = _graph(be, 1, deq=True)
        f = g.execute({})["f0"]
        ctx.free()
    assert f.min() >= -1.0 - 1e-6 and f.max() <= 2.0 + 1e-6, "dequantized values in [low, high]"


def test_shape_input_is_ignored_with_a_warning():
    """in[0] [2, 3] for a [3, 2] output: the declared output decides (the vendor does so)."""
    from qnnemu.client import Backend
    for op in ("RandomUniformLike", "RandomNormalLike"):
        # warning QNNEMU-<op>-shape-ignored: tests/test_warning_rules.py
        with Backend(log_level="warn") as be:
            ctx = be.context()
            g = ctx.graph("g")
            g.node(op, [g.static("shape", np.array([2, 3], np.uint32))],
                   [("y", (3, 2), S8, (0.05, 0))], app_read=True)
            g.finalize()
            assert g.execute({})["y"].shape == (3, 2), f"{op}: the output's shape"
            ctx.free()


SH = [spec((2,), U32)]
NEGATIVE = []
for _op in ("RandomUniformLike", "RandomNormalLike"):
    NEGATIVE += [
        (_op, SH, {}, [spec((4, 5), F32)], "output-dtype", "outputTensors[0].dataType"),
        (_op, [spec((2,), F32)], {}, OUT, "shape-dtype", "inputTensors[0].dataType"),
        (_op, [spec((1, 2), U32)], {}, OUT, "input-rank", "inputTensors[0].rank"),
        (_op, SH + [spec((2,), F32)], {}, OUT, "seed", "inputTensors[1]"),
        (_op, SH, {}, None, "output-unknown", "outputTensors[0].dimensions"),
    ]
NEGATIVE += [
    ("RandomUniformLike", SH, {"high": float("inf")}, OUT, "range", "params[high]"),
    ("RandomNormalLike", SH, {"scale": float("nan")}, OUT, "scale", "params[scale]"),
]


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}" for n in NEGATIVE])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    if rule == "output-dtype":
        assert isinstance(err, OpUnsupportedError), "output-dtype: reported as unsupported"


def test_every_rule_id_is_tested():
    import inspect
    import re

    from qnnemu.ops import random as random_ops
    text = inspect.getsource(random_ops)
    shared = set(re.findall(r'fail\("([a-z-]+)"', text)) | \
        set(re.findall(r'QNNEMU-\{op\}-([a-z-]+)', text)) | {"input-rank"}
    ids = {(op, r) for op in ("RandomUniformLike", "RandomNormalLike") for r in shared}
    ids |= {(op, r) for op, r in re.findall(r'"QNNEMU-(Random\w+)-([a-z-]+)"', text)}
    tested = {(n[0], n[4]) for n in NEGATIVE} | \
        {(op, "shape-ignored") for op in ("RandomUniformLike", "RandomNormalLike")}
    assert not ids - tested, f"every rule has a test: missing {ids - tested}"
