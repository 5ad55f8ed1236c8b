"""Float math per SoC (docs/numerics.md "Float math per arch", "Float16 math"): the HTP's float16
helpers (qnnemu/ops/base.py), the execution plan's float16 math (qnnemu/core/plan.py,
qnnemu/core/float16.py), the opt-outs (QNNEMU_FLOAT_MATH, the ``qnnemu_float_math`` finalize
config), the ignored PRECISION config and the arch-dependent op semantics (PoolMax2d padding).

Our backend only; tests/test_numerics_vendor.py compares the same things with the vendor's.
Expected values are computed here independently of the helpers under test (``h16``,
``out32``), or written out by hand.
"""
from __future__ import annotations

import logging

import abi
import numpy as np
import pytest
from vendor import our_library

from qnnemu.client import Backend, GraphConfig, QnnCallError, ffi, htp_device_config
from qnnemu.core.plan import FLOAT_MATH_CONFIG_KEY
from qnnemu.headers import Q
from qnnemu.htp import soc as socs
from qnnemu.ops.base import HTP_FP16_MAX, htp_fp16_round, htp_fp16_static, htp_fp16_to_fp32

F32 = np.float32


def h16(v):
    """The HTP's float16 value of ``v`` (float64 arithmetic): nearest, ties away from zero, 11
    significant bits down to 2**-14, multiples of 2**-24 below, saturating at 131008."""
    v = np.asarray(v, np.float64)
    q = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - 10)
    return np.clip(np.sign(v) * np.floor(np.abs(v) / q + 0.5) * q, -131008, 131008)


def out32(v):
    """A float16 result as the HTP delivers it in float32: one float32 ulp away from zero."""
    v = np.asarray(v, np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - 23)
    return np.where(v == 0, 0.0, v + np.sign(v) * ulp).astype(F32)


# ----------------------------------------------------------------------------- the helpers
def test_htp_fp16_round_by_hand():
    x = np.array([1 + 2 ** -11, -(1 + 2 ** -11), 1 + 3 * 2 ** -11, 2 ** -25, 3 * 2 ** -26, 2 ** -26,
                  65519, 65520, 70000, 131040, 1e30, np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], F32)
    want = [1 + 2 ** -10, -(1 + 2 ** -10), 1 + 2 ** -9, 2 ** -24, 2 ** -24, 0.0,
            65504, 65536, 70016, 131008, 131008, 131008, -131008, 131008, -131008, 0.0, -0.0]
    got = htp_fp16_round(x)
    assert got.dtype == F32 and got.tolist() == want, f"ties away, subnormals, saturation, NaN: {got.tolist()}"
    assert np.signbit(got[-1]), "-0 keeps its sign"
    even = htp_fp16_round(np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 2 ** -25, 3 * 2 ** -25], F32), "even")
    assert even.tolist() == [1.0, 1 + 2 ** -9, 0.0, 2 ** -23], f"ties to even: {even.tolist()}"
    assert HTP_FP16_MAX == (2 - 2 ** -10) * 2 ** 16, "the largest value: IEEE's infinity exponent is a binade"


def test_htp_fp16_round_matches_the_independent_model():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200000) * 10.0 ** rng.uniform(-9, 6, 200000)).astype(F32)
    assert np.array_equal(htp_fp16_round(x), h16(x).astype(F32)), "random magnitudes 1e-9 .. 1e6"


def test_htp_fp16_static_is_ieee_with_inf_and_nan_as_numbers():
    x = np.array([1 + 2 ** -11, 1 + 3 * 2 ** -11, 65519, 65520, 1e30, np.inf, -np.inf, np.nan, 2 ** -25], F32)
    want = [1.0, 1 + 2 ** -9, 65504, 65536, 65536, 65536, -65536, 98304, 0.0]
    assert htp_fp16_static(x).tolist() == want, \
        "IEEE rounding; the 0x7C00 / 0x7E00 patterns read as 2**16 / 1.5 * 2**16"


def test_htp_fp16_to_fp32_adds_one_ulp():
    v = np.array([1.0, -1.0, 0.0, 2 ** -24, 65504, 131008], F32)
    want = [1 + 2 ** -23, -(1 + 2 ** -23), 0.0, 2 ** -24 + 2 ** -37, 65504 + 2 ** -8, 131008 + 2 ** -7]
    assert htp_fp16_to_fp32(v).tolist() == [float(F32(w)) for w in want], "the lowest bit of the value's binade"


# ----------------------------------------------------------------------- graphs on our backend
@pytest.fixture(scope="module")
def lib():
    path = our_library()
    if path is None:
        pytest.skip("our libQnnHtpEmu.so is not built")
    return str(path)


def soc_config(name: str):
    return htp_device_config("SOC", socModel=int(getattr(Q, f"QNN_SOC_MODEL_{name}")))


def finalize_config(key: str, value) -> GraphConfig:
    """A QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG with a string (or uint32) value."""
    custom = ffi.new("QnnHtpGraph_CustomConfig_t *")
    custom.option = Q.QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG
    k = ffi.new("char[]", key.encode())
    custom.finalizeConfig.key = k
    keep = [custom, k]
    if isinstance(value, str):
        v = ffi.new("char[]", value.encode())
        keep.append(v)
        custom.finalizeConfig.value.dataType = Q.QNN_DATATYPE_STRING
        custom.finalizeConfig.value.stringValue = v
    else:
        custom.finalizeConfig.value.dataType = Q.QNN_DATATYPE_UINT_32
        custom.finalizeConfig.value.uint32Value = int(value)
    config = ffi.new("QnnGraph_Config_t *")
    config.option = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM
    config.customConfig = custom
    return GraphConfig(config, keep)


def run(be: Backend, build, precision=None, configs=()):
    ctx = be.context()
    try:
        g = ctx.graph("g", precision=precision, configs=configs)
        feeds = build(g)
        g.finalize()
        return g.execute(feeds)
    finally:
        ctx.free()


X = np.array([[1 + 2 ** -11, 3.14159265, 1e-4, -70000.0, 0.3, -2.5]], F32)


def neg_graph(g):
    g.node("ElementWiseNeg", [g.input("x", X.shape)], outputs=[("y", X.shape, F32)], app_read=True)
    return {"x": X}


FLOAT16_NEG = out32(-h16(X))


def test_every_soc_row_parses_by_number_and_name():
    """QNNEMU_SOC_MODEL accepts each row's QNN_SOC_MODEL_* number and name; nothing else."""
    names = Q.enum("QNN_SOC_MODEL_")
    for model, row in socs.SOCS.items():
        name = names[model][len("QNN_SOC_MODEL_"):]
        for text in (str(model), name, name.lower(), f"QNN_SOC_MODEL_{name}"):
            assert socs.parse_soc_model(text) is row, f"{text!r} names {row.name}"
    for text in ("", "SM9999", "v73", "1", "SM8550x", "43.0"):
        assert socs.parse_soc_model(text) is None, f"{text!r} names no SoC row"


@pytest.mark.parametrize("soc", ["SM8350", "SM8450", "SM8550", "SM8650", "SM8750", "SM8850"])
def test_float_math_follows_the_arch(lib, soc):
    row = socs.parse_soc_model(soc)
    with Backend(lib, log_level="error", device_configs=[soc_config(soc)]) as be:
        got = run(be, neg_graph)["y"]
    if row.arch == 68:
        assert not row.float16_math and np.array_equal(got, -X), f"{soc} (v68) computes float32"
    else:
        assert row.float16_math and np.array_equal(got, FLOAT16_NEG), \
            f"{soc} (v{row.arch}): float16 math, inputs rounded half away from zero, outputs converted"


@pytest.mark.parametrize("env,device,want", [("float32", "SM8550", "float32"), ("float16", "SM8350", "float16"),
                                             ("soc", "SM8550", "float16"), ("SOC", "SM8350", "float32")])
def test_float_math_environment(lib, monkeypatch, env, device, want):
    """QNNEMU_FLOAT_MATH: float32 = exact float32 reference runs on every SoC, float16 = float16
    math on every SoC, soc = the device's rule (read at graphFinalize)."""
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", env)
    with Backend(lib, log_level="error", device_configs=[soc_config(device)]) as be:
        got = run(be, neg_graph)["y"]
    assert np.array_equal(got, -X if want == "float32" else FLOAT16_NEG), \
        f"QNNEMU_FLOAT_MATH={env} on {device}: {want} math"


@pytest.mark.parametrize("value,device,want", [("float32", "SM8550", "float32"), ("float16", "SM8350", "float16"),
                                               ("soc", "SM8550", "float16")])
def test_float_math_finalize_config_wins_over_the_environment(lib, monkeypatch, value, device, want):
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float16" if want == "float32" else "float32")
    with Backend(lib, log_level="error", device_configs=[soc_config(device)]) as be:
        got = run(be, neg_graph, configs=[finalize_config(FLOAT_MATH_CONFIG_KEY, value)])["y"]
    if value == "soc":
        want = "float16"   # "soc": the device decides, the environment is not consulted
    assert np.array_equal(got, -X if want == "float32" else FLOAT16_NEG), \
        f"finalize config {FLOAT_MATH_CONFIG_KEY}={value} on {device}: {want} math"


@pytest.mark.parametrize("device,precision", [("SM8350", "fp16"), ("SM8550", "fp32")])
def test_precision_config_is_ignored_with_a_warning(lib, caplog, device, precision):
    """The deprecated PRECISION config does not change the math (the vendor ignores it);
    asking for the other math logs rule QNNEMU-graph-precision-deprecated (WARNING)."""
    caplog.set_level(logging.DEBUG, logger="qnnemu")
    with Backend(lib, log_level="warn", device_configs=[soc_config(device)]) as be:
        got = run(be, neg_graph, precision=precision)["y"]
    assert np.array_equal(got, -X if device == "SM8350" else FLOAT16_NEG), f"{device}: PRECISION {precision} ignored"
    warnings = [r for r in caplog.records if "[QNNEMU-graph-precision-deprecated]" in r.getMessage()]
    assert warnings and warnings[-1].levelno == logging.WARNING, "a WARNING with the rule id"
    msg = warnings[-1].getMessage()
    assert "graphFinalize" in msg and "QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION" in msg, f"function and option: {msg}"
    caplog.clear()
    with Backend(lib, log_level="warn", device_configs=[soc_config(device)]) as be:
        run(be, neg_graph, precision="fp32" if precision == "fp16" else "fp16")
    assert not [r for r in caplog.records if "QNNEMU-graph-precision-deprecated" in r.getMessage()], \
        "no warning when PRECISION asks for the math the graph gets"


def _rule_check(caplog, code, want_code, rule, func, path):
    rec = abi.LogRecorder()
    rec.records = [(Q.QNN_LOG_LEVEL_ERROR if r.levelno >= logging.ERROR else Q.QNN_LOG_LEVEL_DEBUG, r.getMessage())
                   for r in caplog.records if r.name == "qnnemu"]
    return rec.assert_rule(code, want_code, rule, func, path)


def test_rule_graph_finalize_float_math_env(lib, monkeypatch, caplog):
    monkeypatch.setenv("QNNEMU_FLOAT_MATH", "bfloat16")
    caplog.set_level(logging.DEBUG, logger="qnnemu")
    with Backend(lib, log_level="error") as be:
        ctx = be.context()
        g = ctx.graph("g")
        neg_graph(g)
        caplog.clear()
        with pytest.raises(QnnCallError) as e:
            g.finalize()
        msg = _rule_check(caplog, e.value.code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                          "QNNEMU-graphFinalize-float-math-env", "graphFinalize", "QNNEMU_FLOAT_MATH")
        assert "'bfloat16'" in msg and "float32" in msg, f"names the value and the accepted ones: {msg}"
        monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float32")
        g2 = ctx.graph("g2")
        feeds = neg_graph(g2)
        g2.finalize()   # the same backend works once the variable is right
        assert np.array_equal(g2.execute(feeds)["y"], -X), "then float32"


def test_rule_graph_finalize_float_math_config(lib, caplog):
    caplog.set_level(logging.DEBUG, logger="qnnemu")
    with Backend(lib, log_level="error") as be:
        ctx = be.context()
        g = ctx.graph("g", configs=[finalize_config(FLOAT_MATH_CONFIG_KEY, 32)])
        neg_graph(g)
        caplog.clear()
        with pytest.raises(QnnCallError) as e:
            g.finalize()
        msg = _rule_check(caplog, e.value.code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                          "QNNEMU-graphFinalize-float-math-config", "graphFinalize", FLOAT_MATH_CONFIG_KEY)
        assert "32" in msg and "soc, float32, float16" in msg, f"names the value and the accepted ones: {msg}"


# ----------------------------------------------------------------------- float16 math details
def binary_graph(op, a, b, static=False):
    def build(g):
        tb = g.static("b", b) if static else g.input("b", b.shape)
        g.node(op, [g.input("a", a.shape), tb], outputs=[("y", np.broadcast_shapes(a.shape, b.shape), F32)],
               app_read=True)
        return {"a": a} if static else {"a": a, "b": b}
    return build


def ties_away(v):
    return h16(v)


def ties_even(v):
    v = np.asarray(v, np.float64)
    q = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -14))) - 10)
    return np.rint(v / q) * q


@pytest.mark.parametrize("soc,a_shape,b_shape,want", [
    ("SM8550", (4, 16), (4, 16), "even"),       # v73+: same shape, depth >= 16: IEEE add
    ("SM8550", (4, 15), (4, 15), "away"),
    ("SM8550", (2, 3, 4, 5), (1, 3, 1, 5), "away"),
    ("SM8450", (4, 64), (4, 64), "away"),       # v69: always half away from zero
    ("SM8550", (8, 64), (64,), "float32-inputs"),   # a dynamic [C] vector, C % 32 == 0
])
def test_add_rounding(lib, soc, a_shape, b_shape, want):
    rng = np.random.default_rng(3)
    # inputs that are float16 values, so that many sums are exact ties
    a = h16(rng.standard_normal(a_shape) * 2).astype(F32)
    b = h16(rng.standard_normal(b_shape) * 2).astype(F32)
    if want == "float32-inputs":
        a = (a + F32(2 ** -13) * (np.arange(a.size).reshape(a.shape) % 2)).astype(F32)   # not all float16
    with Backend(lib, log_level="error", device_configs=[soc_config(soc)]) as be:
        got = run(be, binary_graph("ElementWiseAdd", a, b))["y"]
    if want == "float32-inputs":
        # the float32 sum, ties toward +inf (toward -inf when both addends are negative)
        total = a.astype(np.float64) + b
        q = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(total), 2.0 ** -14))) - 10)
        both_negative = (a < 0) & (np.broadcast_to(b, a.shape) < 0)
        model = np.where(both_negative, -np.floor(-total / q + 0.5), np.floor(total / q + 0.5)) * q
        assert np.any(model != ties_away(total)) and np.any(ties_away(h16(a) + h16(b)) != ties_away(total)), \
            "ties and unrounded inputs both matter here"
    else:
        exact = h16(a) + h16(b)
        model = (ties_even if want == "even" else ties_away)(exact)
        other = (ties_away if want == "even" else ties_even)(exact)
        assert np.any(model != other), "the inputs make ties, where the two roundings differ"
    assert np.array_equal(got, out32(model)), f"{soc} {a_shape} + {b_shape}: {want}"


def test_divide_uses_a_low_float16_reciprocal(lib):
    """a / b = a * r(b), r(b) = 1/b slightly raised then truncated to float16 (the product
    rounded half away from zero)."""
    b = np.array([[3.0, 7.0, 1.0, -3.0, 1.5, 10.0]], F32)
    a = np.array([[1.0, 1.0, 5.0, 2.0, 3.0, 0.5]], F32)
    # 1/3 = 0.33333: float16 neighbours 0.33325195 (below) and 0.33349609; truncation takes
    # the one below, nearest rounding too; 1/7 = 0.142857: truncated 0.14282227 (nearest 0.14288330)
    r = np.array([0.33325195, 0.14282227, 1.0, -0.33325195, 0.66650391, 0.099975586])
    with Backend(lib, log_level="error", device_configs=[soc_config("SM8550")]) as be:
        got = run(be, binary_graph("ElementWiseDivide", a, b))["y"]
    assert np.array_equal(got, out32(h16(a * r))), f"a * truncated reciprocal: {got} vs {out32(h16(a * r))}"


def layernorm_graph(x, gamma, beta, chain=False):
    def build(g):
        ins = [g.input("x", x.shape), g.static("gamma", gamma), g.static("beta", beta)]
        params = {"axes": np.array([x.ndim - 1], np.uint32), "epsilon": F32(1e-5)}
        if chain:
            n = g.node("LayerNorm", ins, params=params, outputs=[("n", x.shape, F32)])
            g.node("ElementWiseNeg", [n], outputs=[("y", x.shape, F32)], app_read=True)
        else:
            g.node("LayerNorm", ins, params=params, outputs=[("y", x.shape, F32)], app_read=True)
        return {"x": x}
    return build


@pytest.mark.parametrize("soc", ["SM8350", "SM8550"])
def test_layernorm_float16_with_float32_gamma_and_beta(lib, monkeypatch, soc):
    """LayerNorm computes in float16 on every arch -- also on v68, whose float32 graphs
    otherwise run float32 kernels -- from float16 inputs with float32 gamma and beta, and its
    result reaches the next float32 op converted (one ulp up); QNNEMU_FLOAT_MATH=float32 is
    exact."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((8, 64)) * 2).astype(F32)
    gamma = (rng.standard_normal(64) * 0.5 + 1).astype(F32)
    beta = (rng.standard_normal(64) * 0.1).astype(F32)
    xh = h16(x)
    mu = xh.mean(-1, keepdims=True)
    norm = (xh - mu) / np.sqrt(((xh - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = -out32(h16(norm * gamma + beta))
    with Backend(lib, log_level="error", device_configs=[soc_config(soc)]) as be:
        got = run(be, layernorm_graph(x, gamma, beta, chain=True))["y"]
        close = np.mean(got == want)
        assert close >= 0.998, f"{soc}: float16 LayerNorm (float32 gamma/beta), then a float32 Neg: {close:.2%} exact"
        monkeypatch.setenv("QNNEMU_FLOAT_MATH", "float32")
        exact = run(be, layernorm_graph(x, gamma, beta))["y"]
    xd = x.astype(np.float64)
    mu = xd.mean(-1, keepdims=True)
    ref = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * gamma + beta
    assert np.abs(exact - ref).max() < 1e-5, "QNNEMU_FLOAT_MATH=float32: exact float32"


def pool_graph(x, dtype=F32, quant=None, kind="PoolMax2d", k=3, pad=1, count=None):
    def build(g):
        params = {"filter_size": np.array([k, k], np.uint32), "stride": np.array([1, 1], np.uint32),
                  "pad_amount": np.full((2, 2), pad, np.uint32)}
        if count is not None:
            params["count_pad_for_edges"] = count
        out = x.shape[1] + 2 * pad - k + 1
        g.node(kind, [g.input("x", x.shape, dtype=dtype, quant=quant)], params=params,
               outputs=[("y", (1, out, out, x.shape[3]), dtype) + ((quant,) if quant else ())], app_read=True)
        return {"x": x}
    return build


@pytest.mark.parametrize("soc", ["SM8350", "SM8550"])
def test_pool_max_padding_per_arch_and_data_type(lib, soc):
    """Float32 data pads with zeros on v68 (float32 kernels) and is ignored on v69+ (float16
    math); float16 and fixed-point data ignore the padding on every arch."""
    x = -(np.arange(1, 33, dtype=F32).reshape(1, 4, 4, 2)) / 8    # every value negative
    corner_max = x[0, :2, :2, 0].max()                             # -0.125
    with Backend(lib, log_level="error", device_configs=[soc_config(soc)]) as be:
        f32 = run(be, pool_graph(x))["y"][0, 0, 0, 0]
        f16 = run(be, pool_graph(x.astype(np.float16), Q.QNN_DATATYPE_FLOAT_16))["y"][0, 0, 0, 0]
        codes = (10 + np.arange(32)).astype(np.uint8).reshape(1, 4, 4, 2)   # real 0.01 * (q - 128) < 0
        q = run(be, pool_graph(codes, Q.QNN_DATATYPE_UFIXED_POINT_8, (0.01, -128)))["y"][0, 0, 0, 0]
    if soc == "SM8350":
        assert f32 == 0.0, "v68 float32: the padding counts as zeros"
    else:
        assert f32 == out32(corner_max), "v73 float32 (float16 math): the padding is ignored"
    assert f16 == np.float16(corner_max), f"{soc} float16: the padding is ignored"
    assert q == 20, f"{soc} uint8: the padding is ignored (the corner window's largest code, not the zero point 128)"


def test_pool_avg_float16_reciprocal(lib):
    """3x3 and 5x5 windows multiply the exact sum by float16(1 / count); other windows divide."""
    rng = np.random.default_rng(5)
    x = h16(rng.standard_normal((1, 9, 9, 8))).astype(F32)
    with Backend(lib, log_level="error", device_configs=[soc_config("SM8550")]) as be:
        for k, recip in ((3, True), (5, True), (6, False)):
            got = run(be, pool_graph(x, kind="PoolAvg2d", k=k, pad=0, count=False))["y"]
            n = 9 - k + 1
            win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(1, 2))
            total = win[:, :n, :n].sum((-1, -2))
            model = total * h16(1 / (k * k)) if recip else total / (k * k)
            assert np.array_equal(got, out32(h16(model))), f"{k}x{k}: {'float16 reciprocal' if recip else 'division'}"


def test_cost_model_prices_float32_as_the_soc_computes_it():
    """The cost model prices float32 ops as float16 where the SoC runs float16 math (v69+)."""
    from types import SimpleNamespace

    from qnnemu.core.device import DeviceModel
    from qnnemu.htp import cost, settings
    for soc, want in (("SM8350", "fp32"), ("SM8450", "fp16"), ("SM8550", "fp16")):
        graph = SimpleNamespace(prepared_for=DeviceModel(int(getattr(Q, f"QNN_SOC_MODEL_{soc}"))), configs={})
        s = settings.graph_settings(graph)
        assert s.float16_math == (want == "fp16"), f"{soc}: graph_settings.float16_math"
        assert cost.precision_of(Q.QNN_DATATYPE_FLOAT_32, s) == want, f"{soc}: float32 ops priced as {want}"
