"""Graphs with the new ops survive a context binary: contextGetBinary on our backend, then
contextCreateFromBinary + graphRetrieve give the same outputs bit for bit (their parameters,
NULL optional inputs and defaults are stored), and backendGetSupportedOperations lists them.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library

pytestmark = pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")

from qnnemu.client import Backend  # noqa: E402
from qnnemu.headers import Q  # noqa: E402

NEW_OPS = ["Gru", "IsNan", "RotaryEmbedding", "RandomUniformLike", "NonZero", "ElementWiseMux",
           "Erf", "GroupQueryAttention", "Identity", "Inverse", "RandomNormalLike",
           "ThresholdedRelu"]
U8 = Q.QNN_DATATYPE_UFIXED_POINT_8


def test_supported_operations_list_the_new_ops():
    with Backend() as be:
        listed = set(be.supported_operations())
    assert not set(NEW_OPS) - listed, f"backendGetSupportedOperations lists {set(NEW_OPS) - listed}"


def build(g, rng):
    """One graph using every new op; returns the feeds."""
    f32 = np.float32
    x = g.input("x", (2, 3, 4, 8))
    ang = rng.uniform(0, 6, (16, 4))
    pos = g.input("pos", (2, 4), np.int32)
    rope = g.node("RotaryEmbedding", [x, g.static("cos", np.cos(ang).astype(f32)),
                                      g.static("sin", np.sin(ang).astype(f32)), pos],
                  [("rope", (2, 3, 4, 8), f32)], app_read=True, name="rope")
    erf = g.node("Erf", [rope], [("erf", (2, 3, 4, 8), f32)], name="erf")
    ident = g.node("Identity", [erf], [("ident", (2, 3, 4, 8), f32)], name="ident")
    g.node("ThresholdedRelu", [ident], [("trelu", (2, 3, 4, 8), f32)], params={"alpha": 0.1},
           app_read=True, name="trelu")
    nan = g.node("IsNan", [x], [("isnan", (2, 3, 4, 8), Q.QNN_DATATYPE_BOOL_8)], name="isnan")
    g.node("NonZero", [nan], [("nz", (192, 4), np.int32)], app_read=True, name="nz")
    m = g.input("m", (2, 3, 3))
    g.node("Inverse", [m], [("inv", (2, 3, 3), f32)], app_read=True, name="inv")
    sel = g.input("sel", (1,), np.int32)
    g.node("ElementWiseMux", [sel, m, g.static("alt", np.eye(3, dtype=f32))],
           [("mux", (2, 3, 3), f32)], app_read=True, name="mux")
    shape = g.static("shape", np.array([4, 5], np.uint32))
    seed = g.static("seed", np.array([7.0], f32))
    g.node("RandomUniformLike", [shape, seed], [("u", (4, 5), U8, (1 / 255, 0))],
           params={"low": 0.0, "high": 1.0}, app_read=True, name="rul")
    g.node("RandomNormalLike", [shape, seed], [("n", (4, 5), U8, (8 / 255, -128))],
           app_read=True, name="rnl")
    gx = g.input("gx", (1, 2, 3))
    ws = [g.static(f"gw{i}", (rng.standard_normal((5, 3)) * 0.5).astype(f32)) for i in range(3)]
    rs = [g.static(f"gr{i}", (rng.standard_normal((5, 5)) * 0.5).astype(f32)) for i in range(3)]
    bs = [g.static(f"gb{i}", (rng.standard_normal(5) * 0.3).astype(f32)) for i in range(6)]
    g.node("Gru", [gx] + ws + rs + bs, [("gy", (1, 2, 5), f32), ("gh", (1, 2, 5), f32)],
           params={"time_major": True, "linear_before_reset": 1}, app_read=True, name="gru")
    q = g.input("q", (1, 1, 32))
    kv = g.input("kv", (1, 1, 16))
    past = g.input("past", (1, 2, 8, 8))
    nulls = [g._tensor(f"null{i}", (0,), f32, Q.QNN_TENSOR_TYPE_NULL) for i in range(3)]
    g.node("GroupQueryAttention", [q, g.input("sl", (1,), np.int32), g.input("tot", (1,), np.int32),
                                   kv, kv, past, past] + nulls,
           [("att", (1, 1, 32), f32), ("pk", (1, 2, 8, 8), f32), ("pv", (1, 2, 8, 8), f32)],
           params={"num_heads": 4, "kv_num_heads": 2}, app_read=True, name="gqa")
    xv = rng.standard_normal((2, 3, 4, 8)).astype(f32)
    xv[0, 0, 0, :3] = np.nan
    return {"x": xv, "pos": rng.integers(0, 16, (2, 4)).astype(np.int32),
            "m": (rng.standard_normal((2, 3, 3)) + 2 * np.eye(3)).astype(f32),
            "sel": np.array([1], np.int32), "gx": rng.standard_normal((1, 2, 3)).astype(f32),
            "q": rng.standard_normal((1, 1, 32)).astype(f32),
            "kv": rng.standard_normal((1, 1, 16)).astype(f32),
            "past": rng.standard_normal((1, 2, 8, 8)).astype(f32),
            "sl": np.array([4], np.int32), "tot": np.array([5], np.int32)}


def test_binary_round_trip_of_the_new_ops(monkeypatch):
    # Erf, Identity, Inverse and ThresholdedRelu have no HTP implementation (graphFinalize refuses
    # them: qnnemu/htp/op_support.py); this is a reference run of the emulator's own kernels.
    monkeypatch.setenv("QNNEMU_OP_SUPPORT", "all")
    import qnnemu
    from qnnemu.system_client import SystemLibrary
    rng = np.random.default_rng(20250306)
    with Backend(log_level="error") as be:
        ctx = be.context()
        g = ctx.graph("new_ops")
        feeds = build(g, rng)
        g.finalize()
        want = g.execute(feeds)
        blob = ctx.get_binary()
        ctx.free()
        info = SystemLibrary(qnnemu.system_library_path()).binary_info(blob)
        (ginfo,) = info["graphs"]
        ctx = be.context_from_binary(blob)
        try:
            got = ctx.retrieve_graph(ginfo["name"], ginfo["inputs"], ginfo["outputs"]).execute(feeds)
        finally:
            ctx.free()
    assert set(got) == set(want), "the same graph outputs after the reload"
    for name, w in want.items():
        np.testing.assert_array_equal(got[name], w, err_msg=f"{name} after the binary round trip")
