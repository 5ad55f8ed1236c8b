"""Numerics and validation of Gru (qnnemu/ops/rnn.py).

Reference: onnx.reference.ReferenceEvaluator running ONNX GRU in float64, fed the ONNX W/R/B
tensors the QNN inputs are sliced from (gate order z, r, h; biases Wb then Rb), as ONNX
Runtime's QNN EP slices them.  Negative tests: one per rule id, asserting the id and the path;
the warning rule goes through our backend's C ABI (graphAddNode logs it).
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import assert_close, expect_rule, run_checked, spec

from qnnemu.errors import OpUnsupportedError
from qnnemu.headers import Q

RNG = np.random.default_rng(20250301)
F16, U8 = Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_UFIXED_POINT_8
T, B, I, H = 4, 2, 3, 5


def onnx_gru(x, W, R, Bias, h0, lbr, direction):
    """ONNX GRU (one direction) on x [T, B, I]: (Y [T, B, H], Y_h [B, H]), float64."""
    names = ["X", "W", "R", "B", "", "initial_h"]
    node = helper.make_node("GRU", names, ["Y", "Y_h"], hidden_size=W.shape[1] // 3,
                            linear_before_reset=lbr, direction=direction)
    vis = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in names if n]
    outs = [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in ("Y", "Y_h")]
    model = helper.make_model(helper.make_graph([node], "g", vis, outs),
                              opset_imports=[helper.make_opsetid("", 14)])
    y, yh = ReferenceEvaluator(model).run(None, {"X": x, "W": W, "R": R, "B": Bias,
                                                 "initial_h": h0})
    return y[:, 0], yh[0]


def onnx_tensors(n_in=I, hid=H, batch=B):
    W = RNG.standard_normal((1, 3 * hid, n_in)) * 0.5
    R = RNG.standard_normal((1, 3 * hid, hid)) * 0.5
    Bias = RNG.standard_normal((1, 6 * hid)) * 0.3
    h0 = RNG.standard_normal((1, batch, hid))
    return W, R, Bias, h0


def qnn_inputs(x, W, R, Bias, h0, dtype=np.float32):
    """The QNN Gru inputs sliced from ONNX W/R/B/initial_h (ORT's EP's mapping)."""
    hid = R.shape[2]
    ws = [W[0, k * hid:(k + 1) * hid] for k in range(3)]
    rs = [R[0, k * hid:(k + 1) * hid] for k in range(3)]
    bs = [Bias[0, k * hid:(k + 1) * hid] for k in range(6)]
    arrays = [x] + ws + rs + bs + ([h0] if h0 is not None else [])
    return [np.asarray(a, dtype) for a in arrays]


@pytest.mark.parametrize("direction", [0, 1], ids=["forward", "reverse"])
@pytest.mark.parametrize("lbr", [0, 1], ids=["lbr0", "lbr1"])
@pytest.mark.parametrize("time_major", [True, False], ids=["time-major", "batch-major"])
def test_sequence_matches_onnx_gru(direction, lbr, time_major):
    """A 3-D sequence, either layout, either direction, both linear_before_reset forms."""
    x = RNG.standard_normal((T, B, I))
    W, R, Bias, h0 = onnx_tensors()
    ry, ryh = onnx_gru(x, W, R, Bias, h0, lbr, ["forward", "reverse"][direction])
    xq = x if time_major else x.transpose(1, 0, 2)
    y, yh = run_checked("Gru", qnn_inputs(xq, W, R, Bias, h0[0]),
                        {"direction": direction, "linear_before_reset": lbr,
                         "time_major": time_major})
    what = f"Gru dir={direction} lbr={lbr} time_major={time_major}"
    assert_close(y if time_major else y.transpose(1, 0, 2), ry, f"{what}: out[0] (every h)")
    assert_close(yh.reshape(B, H), ryh, f"{what}: out[1] (last h)")
    assert yh.shape == (1, B, H), f"{what}: out[1] defaults to [1, B, H] for a 3-D x"


def test_ep_cells_chain_to_the_sequence():
    """ORT's EP runs one Gru node per step (x [1, B, I], h0 and both outputs [1, B, H]);
    chaining them gives the sequence node's result."""
    x = RNG.standard_normal((T, B, I))
    W, R, Bias, h0 = onnx_tensors()
    params = {"time_major": True, "linear_before_reset": 1}
    seq, last = run_checked("Gru", qnn_inputs(x, W, R, Bias, h0[0]), params)
    h = h0
    declared = [spec((1, B, H)), spec((1, B, H))]
    for t in range(T):
        y, h = run_checked("Gru", qnn_inputs(x[t:t + 1], W, R, Bias, h), params,
                           declared=declared)
        assert_close(y[0], seq[t], f"EP-style step {t} == sequence step {t}")
    assert_close(h, last, "the last EP step's h == the sequence's out[1]")


def test_two_dimensional_x_is_one_step():
    x = RNG.standard_normal((B, I))
    W, R, Bias, h0 = onnx_tensors()
    y, yh = run_checked("Gru", qnn_inputs(x, W, R, Bias, h0[0]), {"linear_before_reset": 1})
    ry, _ = onnx_gru(x[None], W, R, Bias, h0, 1, "forward")
    assert y.shape == yh.shape == (B, H), "a 2-D x gives [B, H] outputs"
    assert_close(y, ry[0], "2-D x: one step")
    assert np.array_equal(y, yh), "one step: out[0] == out[1]"


def test_initial_h_forms_and_default():
    """in[13] [B, H] and [1, B, H] give the same result; absent it is 0; out[1] may be declared
    [B, H] or [1, B, H]."""
    x = RNG.standard_normal((T, B, I))
    W, R, Bias, h0 = onnx_tensors()
    a = run_checked("Gru", qnn_inputs(x, W, R, Bias, h0[0]), {"time_major": True})
    b = run_checked("Gru", qnn_inputs(x, W, R, Bias, h0), {"time_major": True},
                    declared=[spec((T, B, H)), spec((B, H))])
    assert np.array_equal(a[0], b[0]), "initial h [B, H] == [1, B, H]"
    assert b[1].shape == (B, H), "out[1] declared [B, H] is computed [B, H]"
    zero = run_checked("Gru", qnn_inputs(x, W, R, Bias, None), {"time_major": True})
    ry, _ = onnx_gru(x, W, R, Bias, np.zeros((1, B, H)), 0, "forward")
    assert_close(zero[0], ry, "no initial h == h0 of zeros")


def test_float16_and_bool_linear_before_reset():
    x = RNG.standard_normal((T, B, I))
    W, R, Bias, h0 = onnx_tensors()
    ry, ryh = onnx_gru(x, W, R, Bias, h0, 1, "forward")
    y, yh = run_checked("Gru", qnn_inputs(x, W, R, Bias, h0[0], np.float16),
                        {"time_major": True, "linear_before_reset": True})
    assert y.dtype == yh.dtype == np.float16, "float16 Gru returns float16"
    assert_close(y, ry, "float16 Gru (BOOL_8 linear_before_reset)", rel=3e-3)


# SM8550: the HTP has no float Gru on v68 (docs/op-support.md); exact float32 for the reference.
@pytest.mark.soc("SM8550")
@pytest.mark.float_math("float32")
def test_single_step_ignores_a_bad_direction_with_a_warning():
    """Through our backend: direction 2 on a one-step node runs (as the vendor does; warning
    QNNEMU-Gru-direction-ignored, tests/test_warning_rules.py); a sequence refuses it
    (QNNEMU-Gru-direction, below)."""
    from qnnemu.client import Backend
    x = RNG.standard_normal((1, B, I)).astype(np.float32)
    W, R, Bias, h0 = onnx_tensors()
    arrays = qnn_inputs(x, W, R, Bias, h0)
    with Backend(log_level="warn") as be:
        ctx = be.context()
        g = ctx.graph("g")
        ins = [g.input("x", x.shape)] + [g.static(f"w{i}", a) for i, a in enumerate(arrays[1:13])]
        ins.append(g.input("h0", (1, B, H)))
        g.node("Gru", ins, [("y", (1, B, H), np.float32), ("yh", (1, B, H), np.float32)],
               params={"direction": 2, "time_major": True}, app_read=True)
        g.finalize()
        out = g.execute({"x": x, "h0": h0.astype(np.float32)})
    ry, _ = onnx_gru(x.astype(np.float64), W, R, Bias, h0, 0, "forward")
    assert_close(out["y"], ry, "direction 2 on one step == forward")


# ---- negative tests ----------------------------------------------------------------------------
def gru_specs(**over):
    """Valid Gru specs (T=4, B=2, I=3, H=5, time-major) with entries replaced by ``i<k>=``."""
    s = [spec((T, B, I))] + [spec((H, I))] * 3 + [spec((H, H))] * 3 + [spec((H,))] * 6 + \
        [spec((B, H))]
    for k, v in over.items():
        i = int(k[1:])
        s += [None] * (i + 1 - len(s))
        s[i] = v
    return s


TM = {"time_major": True}
NEGATIVE = [
    ("Gru", gru_specs(i14=spec((1,), Q.QNN_DATATYPE_BOOL_8)), TM, "reset", "inputTensors[14]"),
    ("Gru", gru_specs(i1=spec((H, I), Q.QNN_DATATYPE_BFLOAT_16)), TM, "dtype",
     "inputTensors[1].dataType"),
    ("Gru", gru_specs(i4=spec((H, H), U8)), TM, "quant-missing", "inputTensors[4].quantizeParams"),
    ("Gru", gru_specs(i0=spec((T * B * I,))), TM, "input-rank", "inputTensors[0].rank"),
    ("Gru", gru_specs(i2=spec((H, I + 1))), TM, "weight-shape", "inputTensors[2].dimensions"),
    ("Gru", gru_specs(i6=spec((H, H + 1))), TM, "weight-shape", "inputTensors[6].dimensions"),
    ("Gru", gru_specs(i11=spec((H + 1,))), TM, "bias-shape", "inputTensors[11].dimensions"),
    ("Gru", gru_specs(i13=spec((2, B, H))), TM, "state-shape", "inputTensors[13].dimensions"),
    ("Gru", gru_specs(), {"direction": 2, **TM}, "direction", "params[direction]"),
    ("Gru", gru_specs(), {"linear_before_reset": 2, **TM}, "linear-before-reset",
     "params[linear_before_reset]"),
]


@pytest.mark.parametrize("op_type,specs,params,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[3]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, rule, path):
    err = expect_rule(op_type, specs, params, None, rule, path)
    if rule in ("dtype", "reset"):
        assert isinstance(err, OpUnsupportedError), f"{rule}: reported as unsupported"


def test_every_rule_id_is_tested():
    """Each Gru rule id in qnnemu/ops/rnn.py has a negative test here."""
    from qnnemu.ops import rnn
    text = inspect.getsource(rnn)
    ids = set(re.findall(r"QNNEMU-Gru-([a-z-]+)", text)) | set(re.findall(r'_fail\("([a-z-]+)"', text))
    ids |= set(re.findall(r'"([a-z]+-shape)"', text))
    ids |= {"dtype", "quant-missing", "input-rank"}            # raised by base.check_real/check_rank
    tested = {n[3] for n in NEGATIVE} | {"direction-ignored"}  # the warning: tests/test_warning_rules.py
    assert ids - {"direction-ignored"}, "found rule ids in rnn.py"
    assert not ids - tested, f"every Gru rule has a negative test: missing {ids - tested}"


def test_fixed_point_through_our_backend():
    """u8 x and h0, u8 weights: the op runs on the dequantized values; outputs requantize
    (within one LSB of the float result, rounding)."""
    from qnnemu.client import Backend
    qx, qw, qo = (0.02, -128), (0.01, -128), (1 / 128, -128)
    rng = np.random.default_rng(7)

    def codes(shape, q):
        return rng.integers(0, 256, shape).astype(np.uint8)

    def real(c, q):
        return q[0] * (c.astype(np.float64) + q[1])
    x, h0 = codes((T, B, I), qx), codes((B, H), qx)
    ws = [codes((H, I), qw) for _ in range(3)] + [codes((H, H), qw) for _ in range(3)]
    bs = [(rng.standard_normal(H) * 0.1).astype(np.float32) for _ in range(6)]
    with Backend() as be:
        ctx = be.context()
        g = ctx.graph("g")
        ins = [g.input("x", x.shape, U8, quant=qx)]
        ins += [g.static(f"w{i}", w, U8, quant=qw) for i, w in enumerate(ws)]
        ins += [g.static(f"b{i}", b) for i, b in enumerate(bs)]
        ins.append(g.input("h0", h0.shape, U8, quant=qx))
        g.node("Gru", ins, [("y", (T, B, H), U8, qo), ("yh", (1, B, H), U8, qo)],
               params={"time_major": True}, app_read=True)
        g.finalize()
        out = g.execute({"x": x, "h0": h0})
        ctx.free()
    W = np.concatenate([real(w, qw) for w in ws[:3]])[None]
    R = np.concatenate([real(w, qw) for w in ws[3:]])[None]
    ry, _ = onnx_gru(real(x, qx), W, R, np.concatenate(bs)[None].astype(np.float64),
                     real(h0, qx)[None], 0, "forward")
    want = np.clip(np.rint(ry / qo[0]) - qo[1], 0, 255)
    d = np.abs(out["y"].astype(int) - want)
    assert d.max() <= 1, f"u8 Gru: codes within 1 LSB of the float GRU's (max {d.max()})"
