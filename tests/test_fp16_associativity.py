"""Float16 results per HTP arch (QNN HTP backend documentation, "QNN HTP FP16 output difference between
SM8550 and SM8650": "slightly different ... although one is not more accurate than the other ...
changes in the hardware which changed the associativity of some of the computations").

The vendor's libQnnHtp.so 2.51 for x86-64 does not show the difference: MatMul (K up to 4096),
Conv2d (64 and 256 input channels) and ReduceSum give bit-identical float16-math results on SM8550,
SM8650, SM8750 and SM8850 (``test_vendor_float16_results_do_not_depend_on_the_arch``), and qnnemu
matches it bit for bit on those graphs (576/576 Conv2d outputs, 511/512 MatMul).  So by default
qnnemu computes the vendor's one order on every arch, and ``QNNEMU_FLOAT16_ASSOCIATIVITY=device``
switches on the device model (qnnemu/core/float16.py ``BlockedReduction``, orders chosen per arch in
qnnemu/htp/soc.py): contractions summed in blocks of 32 channels, float32 partials added in order
up to v73 and pairwise from v75.  v68 devices compute float32 and are untouched.
"""
from __future__ import annotations

import logging

import abi
import numpy as np
import pytest
from vendor import our_library, vendor_probe

from qnnemu.headers import Q

ENV = "QNNEMU_FLOAT16_ASSOCIATIVITY"


def run(library: str | None, soc: str, op: str, k: int, seed: int = 7) -> np.ndarray:
    """A float32 MatMul [128, k] x [k, 128], FullyConnected (with bias, 128 outputs) or 3x3 Conv2d
    (k input channels) of seeded random data on ``soc``."""
    from qnnemu.client import Backend, htp_device_config
    rng = np.random.default_rng(seed)
    soc_model = int(getattr(Q, f"QNN_SOC_MODEL_{soc}"))
    with Backend(library, log_level=None, device_configs=[htp_device_config("SOC", socModel=soc_model)]) as be:
        g = be.context().graph("g")
        if op == "MatMul":
            a = rng.standard_normal((128, k)).astype(np.float32)
            x = g.input("x", a.shape)
            g.node("MatMul", [x, g.static("w", rng.standard_normal((k, 128)).astype(np.float32))],
                   [("y", (128, 128), np.float32)], app_read=True)
        elif op == "FullyConnected":
            a = rng.standard_normal((128, k)).astype(np.float32)
            x = g.input("x", a.shape)
            g.node("FullyConnected", [x, g.static("w", rng.standard_normal((128, k)).astype(np.float32)),
                                      g.static("b", rng.standard_normal(128).astype(np.float32))],
                   [("y", (128, 128), np.float32)], app_read=True)
        else:
            a = rng.standard_normal((1, 8, 8, k)).astype(np.float32)
            x = g.input("x", a.shape)
            w = (rng.standard_normal((3, 3, k, 16)) * 0.1).astype(np.float32)
            g.node("Conv2d", [x, g.static("w", w), g.static("b", np.zeros(16, np.float32))],
                   [("y", (1, 6, 6, 16), np.float32)],
                   params={"stride": np.array([1, 1], np.uint32), "pad_amount": np.zeros((2, 2), np.uint32)},
                   app_read=True)
        g.finalize()
        return g.execute({"x": a})["y"]


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float16 ulps of two float16-valued arrays (same sign: consecutive codes)."""
    return np.abs(a.astype(np.float16).view(np.int16).astype(np.int64) - b.astype(np.float16).view(np.int16))


def scale_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference in float16 ulps of the tensor's largest magnitude (a result that cancels
    to a small value has a finer float16 spacing than the float32 error of its partial sums, so
    its own ulps would overstate the difference)."""
    scale = float(np.max(np.abs(b)))
    return float(np.max(np.abs(a.astype(np.float64) - b))) / (2.0 ** (np.floor(np.log2(scale)) - 10))


CASES = [("MatMul", 1024), ("FullyConnected", 1024), ("MatMul", 4096)]


@pytest.mark.parametrize("op,k", CASES)
def test_default_order_is_the_same_on_every_arch(monkeypatch, op, k):
    monkeypatch.delenv(ENV, raising=False)
    lib = str(our_library())
    base = run(lib, "SM8550", op, k)
    for soc in ("SM8650", "SM8750"):
        assert np.array_equal(run(lib, soc, op, k), base), f"{op} K={k}: {soc} equals SM8550 (the vendor's x86 library)"


@pytest.mark.parametrize("op,k", CASES)
def test_device_order_differs_between_sm8550_and_sm8650(monkeypatch, op, k):
    lib = str(our_library())
    monkeypatch.setenv(ENV, "vendor")
    vendor_order = {soc: run(lib, soc, op, k) for soc in ("SM8550", "SM8650")}
    monkeypatch.setenv(ENV, "device")
    device = {soc: run(lib, soc, op, k) for soc in ("SM8450", "SM8550", "SM8650", "SM8750")}
    d = ulps(device["SM8550"], device["SM8650"])
    assert 0 < np.count_nonzero(d) <= d.size // 100 and scale_error(device["SM8550"], device["SM8650"]) <= 1, \
        f"{op} K={k}: v73 and v75 differ slightly ({np.count_nonzero(d)} of {d.size} outputs, max {d.max()} ulp)"
    assert np.array_equal(device["SM8450"], device["SM8550"]), f"{op}: v69 and v73 share the sequential order"
    assert np.array_equal(device["SM8650"], device["SM8750"]), f"{op}: v75 and v79 share the pairwise order"
    for soc in ("SM8550", "SM8650"):
        assert scale_error(device[soc], vendor_order[soc]) <= 1, f"{op} {soc}: within 1 ulp of the vendor's order"


def test_neither_order_is_more_accurate(monkeypatch):
    """Mean float16 error of either order against the float64 product, over 16384 outputs: equal
    within 10% (the documentation: "one is not more accurate than the other")."""
    lib = str(our_library())
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 1024)).astype(np.float32)
    w = rng.standard_normal((1024, 128)).astype(np.float32)
    exact = a.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64)
    monkeypatch.setenv(ENV, "device")
    err = {soc: float(np.mean(np.abs(run(lib, soc, "MatMul", 1024) - exact))) for soc in ("SM8550", "SM8650")}
    assert 0.9 < err["SM8550"] / err["SM8650"] < 1.1, f"mean errors of the two orders: {err}"


def test_float32_devices_are_untouched(monkeypatch):
    lib = str(our_library())
    monkeypatch.setenv(ENV, "vendor")
    before = run(lib, "SM8350", "MatMul", 1024)
    monkeypatch.setenv(ENV, "device")
    assert np.array_equal(run(lib, "SM8350", "MatMul", 1024), before), "v68 (float32 math) does not change"


def test_conv2d_takes_the_device_order(monkeypatch):
    """Conv2d's 256 input channels are summed in 8 blocks: the result stays within a few ulps."""
    lib = str(our_library())
    monkeypatch.setenv(ENV, "vendor")
    before = run(lib, "SM8650", "Conv2d", 256)
    monkeypatch.setenv(ENV, "device")
    after = run(lib, "SM8650", "Conv2d", 256)
    assert scale_error(after, before) <= 1, "Conv2d in the device order: within 1 ulp (of the tensor's scale)"


def test_rule_graph_finalize_float16_associativity_env(monkeypatch, caplog):
    from qnnemu.client import Backend, htp_device_config
    from qnnemu.client.cabi import QnnCallError
    monkeypatch.setenv(ENV, "hardware")
    caplog.set_level(logging.DEBUG, logger="qnnemu")
    with Backend(str(our_library()), log_level="error",
                 device_configs=[htp_device_config("SOC", socModel=int(Q.QNN_SOC_MODEL_SM8650))]) as be:
        g = be.context().graph("g")
        x = g.input("x", (2, 64))
        g.node("MatMul", [x, g.static("w", np.ones((64, 2), np.float32))], [("y", (2, 2), np.float32)], app_read=True)
        caplog.clear()
        with pytest.raises(QnnCallError) as e:
            g.finalize()
    rec = abi.LogRecorder()
    rec.records = [(Q.QNN_LOG_LEVEL_ERROR if r.levelno >= logging.ERROR else Q.QNN_LOG_LEVEL_DEBUG, r.getMessage())
                   for r in caplog.records if r.name == "qnnemu"]
    msg = rec.assert_rule(e.value.code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                          "QNNEMU-graphFinalize-float16-associativity-env", "graphFinalize", ENV)
    assert "'hardware'" in msg and "device" in msg, f"names the value and the accepted ones: {msg}"


_VENDOR = """
import sys, json
sys.path.insert(0, sys.argv[1])
import test_fp16_associativity as t
out = {f"{op} {k} {soc}": t.run(sys.argv[2], soc, op, k).ravel().tolist()
       for op, k in (("MatMul", 1024), ("Conv2d", 256)) for soc in ("SM8550", "SM8650", "SM8750")}
open(sys.argv[3], "w").write(json.dumps(out))
"""


def test_vendor_float16_results_do_not_depend_on_the_arch(tmp_path, monkeypatch):
    """The vendor's x86 library: SM8550, SM8650 and SM8750 bit-identical; qnnemu's default order
    gives its results (at most 1 output in 100 differs, by at most 1 ulp of the tensor's scale)."""
    vendor = {key: np.array(v, np.float32) for key, v in vendor_probe(_VENDOR, tmp_path).items()}
    monkeypatch.delenv(ENV, raising=False)
    for op, k in (("MatMul", 1024), ("Conv2d", 256)):
        base = vendor[f"{op} {k} SM8550"]
        for soc in ("SM8650", "SM8750"):
            assert np.array_equal(vendor[f"{op} {k} {soc}"], base), f"vendor {op} K={k}: {soc} equals SM8550"
        ours = run(str(our_library()), "SM8650", op, k).ravel()
        d = ulps(ours, vendor[f"{op} {k} SM8650"])
        assert scale_error(ours, vendor[f"{op} {k} SM8650"]) <= 1 and np.count_nonzero(d) <= max(1, d.size // 100), \
            f"{op} K={k}: qnnemu's default order is the vendor's ({np.count_nonzero(d)} of {d.size} outputs differ)"
