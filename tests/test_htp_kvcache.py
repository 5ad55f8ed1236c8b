"""Native KV cache (QNN HTP backend documentation, "LLM native KVcache", qnnemu/htp/kvcache.py): the
flat <-> HMX weight layout helpers (hand-computed examples, round trips, the documentation's
formula), and graphs with QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT inputs/outputs through the C ABI:
ops see the logical (flat) values, native outputs come back in the HMX layout; one negative test per
rule id.
"""
from __future__ import annotations

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.batch_env import Env
from hypothesis import given, strategies as st

from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import kvcache

# Native KV cache tensors need v69 or later: the default device is SM8550 (v73) here.
pytestmark = [pytest.mark.usefixtures("qnn_abi"), pytest.mark.soc("SM8550")]

U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
F32 = Q.QNN_DATATYPE_FLOAT_32
NATIVE = Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT
APP_READ = Q.QNN_TENSOR_TYPE_APP_READ
SCALE = 0.03125
QUANT = (SCALE, -128)   # symmetric uint8


# ------------------------------------------------------------------------------ helpers
def test_tile_sizes_are_the_seeds():
    assert kvcache.KV_TILE_SIZES == {"key": 256, "value": 64}, "K_TILE_SIZE=256, V_TILE_SIZE=64"
    assert kvcache.BLOCK_ELEMENTS == 8 * 32 * 4 == 1024, "an HMX block is [8:DIN, 32:T, 4:DIN]"


def test_value_layout_hand_computed():
    """V tile (64), one head [DIN=32, DOUT=64] holding flat[d, o] = 64 * d + o.

    Native [DOUT/64, DIN*64/1024, 1024] = [1, 2, 1024]; the innermost 4 are DIN 0..3 of one
    column, then the 32 columns of the block, then DIN groups of 4 (8 of them), then the two
    32-column halves of the tile:
      native[0, 0, 0:8]  = flat[0..3, 0], flat[0..3, 1]      = 0 64 128 192 1 65 129 193
      native[0, 0, 128]  = flat[4, 0]                         = 256   (DIN group 1)
      native[0, 1, 0]    = flat[0, 32]                        = 32    (second half of the tile)
      native[0, 1, 133]  = flat[5, 33]: (5//4=1)*128 + 1*4 + 5%4=1 = 133 -> 353
    """
    flat = np.arange(32 * 64).reshape(32, 64)
    nat = kvcache.flat_to_native(flat, "value")
    assert nat.shape == (1, 2, 1024), f"V native shape: {nat.shape}"
    assert list(nat[0, 0, :8]) == [0, 64, 128, 192, 1, 65, 129, 193], f"first 8: {nat[0, 0, :8]}"
    assert nat[0, 0, 128] == 256 and nat[0, 1, 0] == 32 and nat[0, 1, 133] == 353, "hand-computed positions"
    assert nat[0, 0, 127] == flat[3, 31], "end of the first DIN group of 4 in the first block: flat[3, 31]"


def test_key_layout_hand_computed():
    """K tile (256), [DIN=32, DOUT=512]: two tiles; native [2, 8, 1024]."""
    flat = np.arange(32 * 512).reshape(32, 512)
    nat = kvcache.flat_to_native(flat, "key")
    assert nat.shape == (2, 8, 1024), f"K native shape: {nat.shape}"
    assert nat[1, 0, 0] == flat[0, 256], "the second tile starts at column 256"
    assert nat[0, 7, 0] == flat[0, 224], "row 7 of a DIN group = the 8th block of 32 columns"
    assert nat[0, 0, 4] == flat[0, 1] and nat[0, 0, 3] == flat[3, 0], "4 DIN values innermost"


@pytest.mark.parametrize("kind,din,dout,lead", [("value", 32, 64, ()), ("value", 256, 128, (2,)),
                                                ("key", 64, 256, (3,)), ("key", 128, 512, (1, 2))])
def test_round_trip_and_the_seed_formula(kind, din, dout, lead):
    rng = np.random.default_rng(din + dout)
    flat = rng.integers(0, 256, lead + (din, dout), dtype=np.uint8)
    nat = kvcache.flat_to_native(flat, kind)
    t = kvcache.KV_TILE_SIZES[kind]
    assert nat.shape == lead + (dout // t, din * t // 1024, 1024), f"{kind}: [DOUT/T, DIN*T/1024, 1024]"
    np.testing.assert_array_equal(kvcache.native_to_flat(nat, kind), flat, err_msg=f"{kind}: round trip")
    head = flat.reshape((-1, din, dout))[0]
    nhead = nat.reshape((-1,) + nat.shape[-3:])[0]
    for d, o in [(0, 0), (din - 1, dout - 1), (din // 2 + 3, dout // 3 + 1), (31, t - 1)]:
        assert nhead[kvcache.native_index(d, o, kind)] == head[d, o], f"{kind}: documented formula at ({d}, {o})"


@given(st.sampled_from(["key", "value"]), st.integers(1, 3), st.integers(1, 2), st.integers(0, 2**31))
def test_round_trip_property(kind, din_groups, tiles, seed):
    t = kvcache.KV_TILE_SIZES[kind]
    flat = np.random.default_rng(seed).integers(0, 256, (din_groups * 32, tiles * t), dtype=np.uint8)
    nat = kvcache.flat_to_native(flat, kind)
    assert sorted(nat.ravel()) == sorted(flat.ravel()), "a permutation of the values"
    np.testing.assert_array_equal(kvcache.native_to_flat(nat, kind), flat, err_msg="native_to_flat inverts")


def test_helpers_refuse_shapes_the_layout_cannot_hold():
    with pytest.raises(ValueError, match="multiple of 32"):
        kvcache.flat_to_native(np.zeros((16, 64), np.uint8), "value")
    with pytest.raises(ValueError, match="tile size 256"):
        kvcache.flat_to_native(np.zeros((64, 128), np.uint8), "key")
    with pytest.raises(ValueError, match="kind"):
        kvcache.tile_size("query")


# ------------------------------------------------------------------------------ graphs
@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


def kv_graph(env: Env, kind: str, heads=2, head_dim=64, ctx_len=256, new=32, native_in=True, native_out=True,
             axis=None, name="g", ctx=None, finalize=True, start=100, fed_indices=False, configs=NULL):
    """past (native) --ScatterElements(indices, new)--> present (APP_READ, native) --Dequantize-->
    present_f (APP_READ, flat float32). K: [H, head_dim, ctx]; V: [H, ctx, head_dim].  The indices
    are static (positions start..start+new-1), or a graph input "idx" fed at execute."""
    g = env.graph(name, configs, ctx=ctx)
    if kind == "key":
        cache, upd, ax = (heads, head_dim, ctx_len), (heads, head_dim, new), 2
    else:
        cache, upd, ax = (heads, ctx_len, head_dim), (heads, new, head_dim), 1
    fmt_in = NATIVE if native_in else Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
    fmt_out = NATIVE if native_out else Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
    past = env.tensor(g, "past", cache, U8, quant=QUANT, data_format=fmt_in)
    new_t = env.tensor(g, "new", upd, U8, quant=QUANT)
    pos = np.broadcast_to((start + np.arange(new)).reshape([-1 if i == ax else 1 for i in range(3)]), upd)
    ax = ax if axis is None else axis   # the ScatterElements axis (indices laid out along the context)
    if fed_indices:
        idx = env.tensor(g, "idx", upd, Q.QNN_DATATYPE_INT_32)
    else:
        idx = abi.static_tensor("idx", np.ascontiguousarray(pos, dtype=np.int32))
        assert abi.call("tensorCreateGraphTensor", vp(g), idx.ptr) == Q.QNN_SUCCESS, "setup: indices"
        env.keep.append(idx)
    present = env.tensor(g, "present", cache, U8, APP_READ, quant=QUANT, data_format=fmt_out)
    present_f = env.tensor(g, "present_f", cache, F32, APP_READ)
    env.node(g, "scatter", "ScatterElements", [past, idx, new_t], [present],
             [abi.scalar_param("axis", Q.QNN_DATATYPE_INT_32, "int32Value", ax)])
    env.node(g, "deq", "Dequantize", [present], [present_f])
    if finalize:
        assert env.finalize(g) == Q.QNN_SUCCESS, f"setup: graphFinalize: {env.rec.errors()}"
    return g, past, new_t, present, present_f, pos


@pytest.mark.parametrize("kind", ["key", "value"])
@pytest.mark.parametrize("native_out", [True, False])
def test_native_kv_graph_sees_flat_values(env, kind, native_out):
    g, past, new_t, present, present_f, pos = kv_graph(env, kind, native_out=native_out)
    shape = tuple(past.v.dimensions[k] for k in range(3))
    rng = np.random.default_rng(3)
    flat_past = rng.integers(0, 256, shape, dtype=np.uint8)
    new_vals = rng.integers(0, 256, pos.shape, dtype=np.uint8)
    fed = kvcache.flat_to_native(flat_past, kind).reshape(shape)    # what the app's buffer holds
    out_f = np.zeros(shape, np.float32)
    out_u8 = np.zeros(shape, np.uint8)
    code = env.execute(g, [env.arg(past, fed), env.arg(new_t, new_vals)],
                       [env.arg(present, out_u8), env.arg(present_f, out_f)])
    assert code == Q.QNN_SUCCESS, f"execute: {env.rec.errors()}"
    want = flat_past.copy()
    ax = 2 if kind == "key" else 1
    np.put_along_axis(want, pos.astype(np.int64), new_vals, axis=ax)
    np.testing.assert_allclose(out_f, SCALE * (want.astype(np.float32) - 128), rtol=0, atol=0,
                               err_msg=f"{kind}: the op after the cache sees the logical (flat) values")
    expect_bytes = kvcache.flat_to_native(want, kind).reshape(shape) if native_out else want
    np.testing.assert_array_equal(out_u8, expect_bytes,
                                  err_msg=f"{kind}: the output comes back {'native' if native_out else 'flat'}")
    graph = HANDLES.lookup(g)
    kinds = {kv.name: kv.kind for kv in graph.native_kv.values()}
    assert kinds == ({"past": kind, "present": kind} if native_out else {"past": kind}), \
        f"finalize found the native tensors and their kind from the scatter axis: {kinds}"


def test_native_kv_with_variable_batch(env):
    """Batch n on a native cache: each batch is one native cache tensor, converted on its own."""
    g, past, new_t, present, present_f, pos = kv_graph(env, "value", heads=1)
    shape = (1, 256, 64)
    rng = np.random.default_rng(9)
    flats = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(2)]
    news = [rng.integers(0, 256, pos.shape, dtype=np.uint8) for _ in range(2)]
    fed = np.concatenate([kvcache.flat_to_native(f, "value").reshape(shape) for f in flats])
    out_u8, out_f = np.zeros((2,) + shape[1:], np.uint8), np.zeros((2,) + shape[1:], np.float32)
    code = env.execute(g, [env.arg(past, fed), env.arg(new_t, np.concatenate(news))],
                       [env.arg(present, out_u8), env.arg(present_f, out_f)])
    assert code == Q.QNN_SUCCESS, f"batched native execute: {env.rec.errors()}"
    for k in range(2):
        want = flats[k].copy()
        np.put_along_axis(want, pos.astype(np.int64), news[k], axis=1)
        np.testing.assert_array_equal(out_u8[k:k + 1], kvcache.flat_to_native(want, "value").reshape(shape),
                                      err_msg=f"batch {k}: native output")


def test_native_update_output(env):
    """A native output holding the new tokens (the ScatterElements updates), V cache, N = 32."""
    g = env.graph("g")
    past = env.tensor(g, "past", (1, 256, 64), U8, quant=QUANT, data_format=NATIVE)
    new_f = env.tensor(g, "new_f", (1, 32, 64), F32)
    new_q = env.tensor(g, "new_q", (1, 32, 64), U8, APP_READ, quant=QUANT, data_format=NATIVE)
    pos = np.broadcast_to(np.arange(32).reshape(1, -1, 1), (1, 32, 64)).astype(np.int32)
    idx = abi.static_tensor("idx", np.ascontiguousarray(pos))
    assert abi.call("tensorCreateGraphTensor", vp(g), idx.ptr) == Q.QNN_SUCCESS
    env.keep.append(idx)
    present = env.tensor(g, "present", (1, 256, 64), U8, APP_READ, quant=QUANT)
    env.node(g, "q", "Quantize", [new_f], [new_q])
    env.node(g, "scatter", "ScatterElements", [past, idx, new_q], [present],
             [abi.scalar_param("axis", Q.QNN_DATATYPE_INT_32, "int32Value", 1)])
    assert env.finalize(g) == Q.QNN_SUCCESS, f"finalize: {env.rec.errors()}"
    flat_past = np.full((1, 256, 64), 128, np.uint8)
    vals = (np.arange(32 * 64, dtype=np.float32).reshape(1, 32, 64) % 100) * SCALE
    out_q, out_p = np.zeros((1, 32, 64), np.uint8), np.zeros((1, 256, 64), np.uint8)
    code = env.execute(g, [env.arg(past, kvcache.flat_to_native(flat_past, "value").reshape(1, 256, 64)),
                           env.arg(new_f, vals)], [env.arg(new_q, out_q), env.arg(present, out_p)])
    assert code == Q.QNN_SUCCESS, f"execute: {env.rec.errors()}"
    codes = (np.arange(32 * 64).reshape(1, 32, 64) % 100 + 128).astype(np.uint8)
    np.testing.assert_array_equal(out_q, kvcache.flat_to_native(codes, "value").reshape(1, 32, 64),
                                  err_msg="the native updates output is in the HMX layout")
    np.testing.assert_array_equal(out_p[0, :32], codes[0], err_msg="the flat cache output got the updates")


# ------------------------------------------------------------------------------ negatives
def test_rule_native_kv_type(env):
    g = env.graph("g")
    code = env.try_tensor(g, "t", (64, 256), U8, Q.QNN_TENSOR_TYPE_NATIVE, quant=QUANT, data_format=NATIVE)
    env.assert_rule(code, Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-native-kv-type",
                    "tensorCreateGraphTensor", "tensor.v2.type")


def test_rule_native_kv_dtype(env):
    g = env.graph("g")
    code = env.try_tensor(g, "t", (64, 256), F32, data_format=NATIVE)
    env.assert_rule(code, Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-native-kv-dtype",
                    "tensorCreateGraphTensor", "tensor.v2.dataType")


def test_rule_native_kv_quant(env):
    g = env.graph("g")
    code = env.try_tensor(g, "t", (64, 256), U8, quant=(SCALE, -100), data_format=NATIVE)
    msg = env.assert_rule(code, Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-native-kv-quant",
                          "tensorCreateGraphTensor", "tensor.v2.quantizeParams")
    assert "-100" in msg and "-128" in msg, f"names the offset and the symmetric one: {msg}"


def test_rule_native_kv_rank(env):
    g = env.graph("g")
    code = env.try_tensor(g, "t", (256,), U8, quant=QUANT, data_format=NATIVE)
    env.assert_rule(code, Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, "QNNEMU-tensor-native-kv-rank",
                    "tensorCreateGraphTensor", "tensor.v2.dimensions")


def test_rule_native_kv_pattern(env):
    """A native input consumed by Concat (the documentation requires ScatterElements)."""
    g = env.graph("g")
    past = env.tensor(g, "past", (1, 64, 256), U8, quant=QUANT, data_format=NATIVE)
    new = env.tensor(g, "new", (1, 64, 32), U8, quant=QUANT)
    out = env.tensor(g, "out", (1, 64, 288), U8, APP_READ, quant=QUANT)
    env.node(g, "cat", "Concat", [past, new], [out],
             [abi.scalar_param("axis", Q.QNN_DATATYPE_UINT_32, "uint32Value", 2)])
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "QNNEMU-graphFinalize-native-kv-pattern",
                          "graphFinalize", "tensor 'past'")
    assert "ScatterElements" in msg and "cat" in msg, f"names the required op and the actual consumer: {msg}"


def test_rule_native_kv_axis(env):
    g, *_ = kv_graph(env, "key", axis=0, heads=32, start=0, finalize=False)
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "QNNEMU-graphFinalize-native-kv-axis",
                          "graphFinalize", "tensor 'past'")
    assert "axis 0" in msg, f"names the axis: {msg}"


def test_rule_native_kv_shape(env):
    """K cache with a context of 224 (not a multiple of 256); V with head_dim 32 is refused too."""
    g, *_ = kv_graph(env, "key", ctx_len=224, finalize=False)
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_INVALID_TENSOR, "QNNEMU-graphFinalize-native-kv-shape",
                          "graphFinalize", "tensor 'past'")
    assert "224" in msg and "256" in msg and "key" in msg, f"names the dims and the multiple: {msg}"
    g2, *_ = kv_graph(env, "value", head_dim=32, finalize=False, name="g2")
    env.rec.clear()
    assert env.finalize(g2) == Q.QNN_GRAPH_ERROR_INVALID_TENSOR and \
        env.rules_logged() == {"QNNEMU-graphFinalize-native-kv-shape"}, "V head_dim 32 is not a multiple of 64"


def test_rule_native_kv_partial(env):
    """Two caches updated by ScatterElements, one native and one flat."""
    g = env.graph("g")
    pk = env.tensor(g, "past_key", (1, 64, 256), U8, quant=QUANT, data_format=NATIVE)
    pv = env.tensor(g, "past_value", (1, 256, 64), U8, quant=QUANT)
    nk = env.tensor(g, "new_key", (1, 64, 32), U8, quant=QUANT)
    nv = env.tensor(g, "new_value", (1, 32, 64), U8, quant=QUANT)
    ik = abi.static_tensor("ik", np.zeros((1, 64, 32), np.int32))
    iv = abi.static_tensor("iv", np.zeros((1, 32, 64), np.int32))
    for t in (ik, iv):
        assert abi.call("tensorCreateGraphTensor", vp(g), t.ptr) == Q.QNN_SUCCESS
        env.keep.append(t)
    ok = env.tensor(g, "key_out", (1, 64, 256), U8, APP_READ, quant=QUANT)
    ov = env.tensor(g, "value_out", (1, 256, 64), U8, APP_READ, quant=QUANT)
    axis = lambda a: [abi.scalar_param("axis", Q.QNN_DATATYPE_INT_32, "int32Value", a)]  # noqa: E731
    env.node(g, "sk", "ScatterElements", [pk, ik, nk], [ok], axis(2))
    env.node(g, "sv", "ScatterElements", [pv, iv, nv], [ov], axis(1))
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "QNNEMU-graphFinalize-native-kv-partial",
                          "graphFinalize", "tensor 'past_value'")
    assert "past_key" in msg, f"names the native cache too: {msg}"


def test_rule_native_kv_arch(env):
    """A v68 device: "Cannot support v68 targets or lower"."""
    cc = ffi.new("QnnHtpDevice_CustomConfig_t *")
    cc.option = Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH
    cc.arch.arch, cc.arch.deviceId = 68, 0
    dc = ffi.new("QnnDevice_Config_t *")
    dc.option, dc.customConfig = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, cc
    env.keep += [cc, dc]
    code, dev = abi.create("deviceCreate", vp(env.log), abi.null_terminated("QnnDevice_Config_t", [dc], env.keep))
    assert code == Q.QNN_SUCCESS, f"setup: deviceCreate(arch 68): {env.rec.errors()}"
    code, ctx = abi.create("contextCreate", vp(env.be), vp(dev), NULL)
    assert code == Q.QNN_SUCCESS, f"setup: contextCreate on the v68 device: {env.rec.errors()}"
    try:
        g, *_ = kv_graph(env, "key", ctx=ctx, finalize=False)
        env.rec.clear()
        msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE,
                              "QNNEMU-graphFinalize-native-kv-arch", "graphFinalize", "tensor 'past'")
        assert "v68" in msg, f"names the arch: {msg}"
    finally:
        assert abi.call("contextFree", vp(ctx), NULL) == Q.QNN_SUCCESS, "teardown: contextFree"
        assert abi.call("deviceFree", vp(dev)) == Q.QNN_SUCCESS, "teardown: deviceFree"


def test_other_data_formats_stay_refused(env):
    g = env.graph("g")
    for fmt in (Q.QNN_TENSOR_DATA_FORMAT_SPARSE, Q.QNN_TENSOR_DATA_FORMAT_CODEBOOK, Q.QNN_TENSOR_DATA_FORMAT_MX,
                Q.QNN_TENSOR_DATA_FORMAT_UBWC_NV12):
        env.rec.clear()
        code = env.try_tensor(g, f"t{fmt}", (64, 256), U8, quant=QUANT, data_format=fmt)
        assert code == Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM and \
            env.rules_logged() == {"QNNEMU-tensor-data-format"}, f"data format {fmt} is refused"


def test_native_kv_graph_survives_the_context_binary(env):
    """A native-KV graph saved with contextGetBinary and loaded again keeps its tensors' data
    format: fed the same native bytes, the loaded graph gives the same outputs (a binary that
    dropped the format would read the native bytes as flat and compute something else)."""
    from qnnemu.core import binary
    g, past, new_t, present, present_f, pos = kv_graph(env, "value")
    shape = tuple(past.v.dimensions[k] for k in range(3))
    rng = np.random.default_rng(5)
    fed = kvcache.flat_to_native(rng.integers(0, 256, shape, dtype=np.uint8), "value").reshape(shape)
    new_vals = rng.integers(0, 256, pos.shape, dtype=np.uint8)

    def run(graph_handle):
        out_f, out_u8 = np.zeros(shape, np.float32), np.zeros(shape, np.uint8)
        code = env.execute(graph_handle, [env.arg(past, fed), env.arg(new_t, new_vals)],
                           [env.arg(present, out_u8), env.arg(present_f, out_f)])
        assert code == Q.QNN_SUCCESS, f"execute: {env.rec.errors()}"
        return out_f, out_u8

    want = run(g)
    blob = binary.serialize(HANDLES.lookup(env.ctx))
    info = binary.inspect(blob)
    formats = {t.name: t.data_format for t in info.graph("g").tensors}
    assert formats["past"] == NATIVE and formats["present"] == NATIVE, \
        f"the binary records the native data format: {formats}"
    size = len(blob)
    buf = ffi.new("char[]", blob)
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinary", vp(env.be), NULL, NULL, buf, size, out, NULL)
    assert code == Q.QNN_SUCCESS, f"contextCreateFromBinary: {env.rec.errors()}"
    loaded_ctx = abi.hval(out[0])
    try:
        code, loaded = abi.create("graphRetrieve", vp(loaded_ctx), abi.cstr("g", env.keep))
        assert code == Q.QNN_SUCCESS, f"graphRetrieve: {env.rec.errors()}"
        got = run(loaded)
        for w, o, what in zip(want, got, ("float output", "native uint8 output")):
            np.testing.assert_array_equal(o, w, err_msg=f"loaded native-KV graph: {what} identical")
    finally:
        assert abi.call("contextFree", vp(loaded_ctx), NULL) == Q.QNN_SUCCESS, "contextFree of the loaded context"


# ---------------------------------------------------- scatter-index bound and VTCM-bound context
def vtcm_config(env: Env, mb: int):
    """A graph config list asking for ``mb`` MB of VTCM (QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE)."""
    cc = ffi.new("QnnHtpGraph_CustomConfig_t *")
    cc.option, cc.vtcmSizeInMB = Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE, mb
    gc = ffi.new("QnnGraph_Config_t *")
    gc.option, gc.customConfig = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM, cc
    env.keep += [cc, gc]
    return abi.null_terminated("QnnGraph_Config_t", [gc], env.keep)


def test_scatter_index_limit_is_the_documented_formula():
    assert kvcache.scatter_index_limit(256, 8) == 256 - 32, "AR8 into 256: 256 - roundup(8, 32)"
    assert kvcache.scatter_index_limit(1024, 33) == 1024 - 64, "AR33 rounds up to 64"
    assert kvcache.scatter_index_limit(1024, 64) is None, "N a multiple of 32: no bound"
    assert kvcache.vtcm_bytes_for_head(64, 16384) == 2 << 20, "16K context, head_dim 64: exactly 2 MiB"


@pytest.mark.parametrize("kind", ["key", "value"])
def test_scatter_index_at_the_bound_runs(env, kind):
    """AR8 (N not a multiple of 32) written at index 224 = 256 - roundup(8, 32) of a native input,
    flat output, static and fed indices: accepted, and the tokens land there."""
    g, past, new_t, present, present_f, pos = kv_graph(env, kind, heads=1, new=8, start=224, native_out=False)
    g2, past2, new2, present2, _, _ = kv_graph(env, kind, heads=1, new=8, native_out=False, fed_indices=True,
                                               name="g2")
    shape = tuple(past.v.dimensions[k] for k in range(3))
    flat = np.full(shape, 128, np.uint8)
    vals = np.full(pos.shape, 200, np.uint8)
    fed = np.ascontiguousarray(pos, dtype=np.int32)   # positions 224..231, as the static graph's
    for graph, p, n, out_t, fed_indices in ((g, past, new_t, present, False), (g2, past2, new2, present2, True)):
        out = np.zeros(shape, np.uint8)
        ins = [env.arg(p, kvcache.flat_to_native(flat, kind).reshape(shape)), env.arg(n, vals)]
        if fed_indices:
            ins.append(env.arg(env.tensors[(graph, "idx")], fed))
        code = env.execute(graph, ins, [env.arg(out_t, out)])
        assert code == Q.QNN_SUCCESS, f"{kind}: index 224 with AR8 is within the bound: {env.rec.errors()}"
        ax = 2 if kind == "key" else 1
        assert np.all(np.take(out, range(224, 232), axis=ax) == 200), f"{kind}: the tokens are written at 224"


def test_rule_native_kv_scatter_index_static(env):
    """Static indices: AR8 at 225, one above 256 - roundup(8, 32)."""
    g, *_ = kv_graph(env, "value", heads=1, new=8, start=225, native_out=False, finalize=False)
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_INVALID_TENSOR,
                          "QNNEMU-graphFinalize-native-kv-scatter-index", "graphFinalize", "tensor 'past'")
    assert "225" in msg and "224" in msg, f"names the index and the bound: {msg}"


def test_rule_native_kv_scatter_index_fed(env):
    """Indices fed at execute: AR8 at 230 > 224 refused at graphExecute, naming the input."""
    g, past, new_t, present, present_f, pos = kv_graph(env, "key", heads=1, new=8, native_out=False,
                                                       fed_indices=True)
    shape = (1, 64, 256)
    bad = np.ascontiguousarray(pos - 100 + 230, dtype=np.int32)
    ins = [env.arg(past, np.zeros(shape, np.uint8)), env.arg(new_t, np.zeros(pos.shape, np.uint8)),
           env.arg(env.tensors[(g, "idx")], bad)]
    env.rec.clear()
    code = env.execute(g, ins, [env.arg(present, np.zeros(shape, np.uint8))])
    msg = env.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-graphExecute-native-kv-scatter-index",
                          "graphExecute", "inputs['idx']")
    assert "230" in msg and "224" in msg, f"names the index and the bound: {msg}"


def test_context_length_below_the_vtcm_bound_finalizes(env):
    """2 MB of VTCM holds an 8K V cache with head_dim 64 (2 x 64 x 8192 = 1 MiB)."""
    kv_graph(env, "value", heads=1, ctx_len=8192, native_out=False, configs=vtcm_config(env, 2))


def test_rule_native_kv_vtcm(env):
    """The documentation's example: 2 MB of VTCM does not support a 16K context."""
    g, *_ = kv_graph(env, "value", heads=1, ctx_len=16384, native_out=False, finalize=False,
                     configs=vtcm_config(env, 2))
    env.rec.clear()
    msg = env.assert_rule(env.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "QNNEMU-graphFinalize-native-kv-vtcm",
                          "graphFinalize", "tensor 'past'")
    assert "16384" in msg and str(2 << 20) in msg, f"names the context and the VTCM: {msg}"
