"""qnnemu.client against the vendor's x86-64 HTP backend (libQnnHtp.so from onnxruntime_qnn).

Proves the client (cffi ABI mode over our headers) drives a real QNN backend: a float
Conv2d+Relu+Reshape+FullyConnected graph matches numpy, and refusals surface as QnnCallError.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import vendor_library

HTP = vendor_library("libQnnHtp.so")
pytestmark = pytest.mark.skipif(HTP is None, reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")

from qnnemu.client import Backend, QnnCallError  # noqa: E402
from qnnemu.headers import Q  # noqa: E402


@pytest.fixture(scope="module")
def backend():
    with Backend(str(HTP), log_level="error") as be:
        yield be


def conv2d_nhwc(x, w, b, pad):
    """Reference Conv2d (stride 1): x NHWC, w HWIO, symmetric padding."""
    n, h, wd, _ = x.shape
    fh, fw, _, cout = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = h + 2 * pad - fh + 1, wd + 2 * pad - fw + 1
    out = np.zeros((n, oh, ow, cout))
    for i in range(fh):
        for j in range(fw):
            out += np.einsum("nhwc,co->nhwo", xp[:, i:i + oh, j:j + ow, :], w[i, j])
    return out + b


def build_conv_relu_fc(ctx, rng, precision=None, tensor_version=2):
    x = rng.standard_normal((1, 8, 8, 3)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 3, 4)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4) * 0.1).astype(np.float32)
    fw = (rng.standard_normal((10, 256)) * 0.1).astype(np.float32)
    fb = (rng.standard_normal(10) * 0.1).astype(np.float32)
    g = ctx.graph("conv_relu_fc", precision=precision, tensor_version=tensor_version)
    tx = g.input("x", x.shape, np.float32)
    y = g.node("Conv2d", [tx, g.static("w", w), g.static("b", b)],
               params={"stride": np.array([1, 1], np.uint32),
                       "pad_amount": np.array([[1, 1], [1, 1]], np.uint32),
                       "dilation": np.array([1, 1], np.uint32),
                       "group": np.uint32(1)},
               outputs=[("conv", (1, 8, 8, 4), np.float32)], name="conv")
    r = g.node("Relu", [y], outputs=[("relu", (1, 8, 8, 4), np.float32)])
    f = g.node("Reshape", [r], outputs=[("flat", (1, 256), np.float32)])
    g.node("FullyConnected", [f, g.static("fw", fw), g.static("fb", fb)],
           outputs=[("out", (1, 10), np.float32)], app_read=True, name="fc")
    g.finalize()
    ref = np.maximum(conv2d_nhwc(x, w, b, 1), 0).reshape(1, 256) @ fw.T.astype(np.float64) + fb
    return g, x, ref


def max_rel(out, ref):
    return float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))


def test_provider_information(backend):
    assert backend.api_version.core[0] == Q.QNN_API_VERSION_MAJOR, \
        "vendor provider's core API major version equals ours"
    assert backend.api_version.core[1] >= Q.QNN_API_VERSION_MINOR, \
        "vendor provider's core API minor version is at least ours"
    assert backend.provider_name, "provider name is reported"
    assert backend.build_id, "backendGetBuildId returns a non-empty build id"
    assert "Conv2d" in backend.supported_operations(), \
        "backendGetSupportedOperations lists Conv2d"


# The vendor's x86 HTP backend finalizes float32 graphs without a precision config and
# computes them in float32; with PRECISION=FLOAT16 it gives the same results here, but the
# tolerance allows for real float16 arithmetic.
@pytest.mark.parametrize("precision,tol", [(None, 1e-4), ("fp32", 1e-4), ("fp16", 1e-2)])
def test_conv_relu_fc_matches_numpy(backend, precision, tol):
    ctx = backend.context()
    try:
        g, x, ref = build_conv_relu_fc(ctx, np.random.default_rng(1), precision)
        out = g.execute({"x": x})
        assert set(out) == {"out"}, "execute returns exactly the APP_READ output"
        err = max_rel(out["out"], ref)
        assert err <= tol, f"Conv2d+Relu+Reshape+FC output vs numpy: max rel error {err} > {tol}"
        again = g.execute({"x": x})["out"]
        assert np.array_equal(again, out["out"]), "a second execute gives identical results"
    finally:
        ctx.free()


def test_v1_tensors(backend):
    ctx = backend.context()
    try:
        g, x, ref = build_conv_relu_fc(ctx, np.random.default_rng(2), tensor_version=1)
        err = max_rel(g.execute({"x": x})["out"], ref)
        assert err <= 1e-4, f"graph built from Qnn_TensorV1_t structs vs numpy: max rel error {err}"
    finally:
        ctx.free()


def test_execute_before_finalize_refused(backend):
    ctx = backend.context()
    try:
        g = ctx.graph("unfinalized")
        x = g.input("x", (1, 4))
        g.node("Relu", [x], outputs=[("y", (1, 4), np.float32)], app_read=True)
        with pytest.raises(QnnCallError) as e:
            g.execute({"x": np.ones((1, 4), np.float32)})
        assert e.value.function == "graphExecute", "the refusal names graphExecute"
        assert e.value.code == Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, \
            f"graphExecute before finalize returns GRAPH_NOT_FINALIZED (got {e.value.code})"
        assert e.value.message, "the error carries the backend's errorGetMessage text"
    finally:
        ctx.free()


def test_unknown_op_refused_by_validation(backend):
    ctx = backend.context()
    try:
        g = ctx.graph("unknown_op")
        x = g.input("x", (1, 4))
        with pytest.raises(QnnCallError) as e:
            g.node("NoSuchOp", [x], outputs=[("y", (1, 4), np.float32)], app_read=True,
                   validate=True)
        assert e.value.function == "backendValidateOpConfig", \
            "an unknown op type is refused by backendValidateOpConfig"
    finally:
        ctx.free()


def test_unknown_op_refused_by_finalize(backend):
    # The vendor's graphAddNode accepts any op type; the graph fails when it is prepared.
    ctx = backend.context()
    try:
        g = ctx.graph("unknown_op_finalize")
        x = g.input("x", (1, 4))
        with pytest.raises(QnnCallError) as e:
            g.node("NoSuchOp", [x], outputs=[("y", (1, 4), np.float32)], app_read=True)
            g.finalize()
        assert e.value.function in ("graphAddNode", "graphFinalize"), \
            f"an unknown op type is refused by graphAddNode or graphFinalize (got {e.value.function})"
    finally:
        ctx.free()
