"""Updatable tensors and binary sections through the QNN C ABI (tests/abi.py): QnnTensor.h
tensorUpdateGraphTensors / tensorUpdateContextTensors and QnnContext.h contextGetBinarySectionSize /
GetBinarySection / ApplyBinarySection / GetBinarySectionUpdate / FreeBinarySectionUpdate -- the
LoRA-adapter path (qnnemu/core/sections.py, docs/binary-sections.md).

The main graph is y = x @ W + b with W (and b) QNN_TENSOR_TYPE_UPDATEABLE_STATIC.  Results are
compared with numpy and, exactly, with a graph built from scratch with the same weights as
plain STATIC tensors (so an update must give the same plan a fresh finalize would).

Then one negative test per rule id the feature adds (``RULE_IDS``): the code, the rule id, the
function name and the parameter path in the logged message, and no other rule fired.
"""
from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp

from qnnemu.core import binary, sections
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

F32, F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
U8, I32 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_INT_32
UPD_STATIC = Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC
STATIC, NATIVE = Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_NATIVE
APP_WRITE, APP_READ = Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ
UPDATABLE = Q.QNN_CONTEXT_SECTION_UPDATABLE
WEIGHTS = Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS
QUANT = Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS
RULE_RE = abi.RULE_ID
RNG = np.random.default_rng(4004)
X = RNG.standard_normal((2, 4)).astype(np.float32)
W_A, B_A = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
W_B, B_B = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)

# cffi's ABI mode cannot pass QnnContext_Buffer_t (a struct with an anonymous union) by value;
# a 32-byte struct of words is passed the same way (in memory).
ffi.cdef("typedef struct { uint64_t w[4]; } sections_Buffer32_t;")
assert ffi.sizeof("QnnContext_Buffer_t") == 32


# ------------------------------------------------------------------------------ environment
class Env:
    """A recording DEBUG logger and a backend; contexts made with ``context`` are freed at close."""

    def __init__(self):
        self.rec = abi.LogRecorder()
        self.keep: list = []
        code, self.log = abi.create("logCreate", self.rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
        assert code == Q.QNN_SUCCESS, "setup: logCreate"
        code, self.be = abi.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, "setup: backendCreate"
        self.contexts: list[int] = []

    def close(self):
        for ctx in self.contexts:
            assert abi.call("contextFree", vp(ctx), NULL) == Q.QNN_SUCCESS, "teardown: contextFree"
        assert abi.call("backendFree", vp(self.be)) == Q.QNN_SUCCESS, "teardown: backendFree"
        assert abi.call("logFree", vp(self.log)) == Q.QNN_SUCCESS, "teardown: logFree"

    def context_configs(self, skip_validation: bool = False):
        if not skip_validation:
            return NULL
        cc = ffi.new("QnnHtpContext_CustomConfig_t *")
        cc.option = Q.QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION
        cc.skipValidationOnBinarySection = True
        c = ffi.new("QnnContext_Config_t *")
        c.option = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM
        c.customConfig = cc
        self.keep += [cc, c]
        return abi.null_terminated("QnnContext_Config_t", [c], self.keep)

    def context(self, skip_validation: bool = False) -> int:
        code, ctx = abi.create("contextCreate", vp(self.be), NULL, self.context_configs(skip_validation))
        assert code == Q.QNN_SUCCESS, f"setup: contextCreate returned {code}"
        self.contexts.append(ctx)
        return ctx

    def load(self, blob: bytes, skip_validation: bool = False) -> int:
        buf = ffi.new("char[]", blob)
        out = ffi.new("Qnn_ContextHandle_t *")
        code = abi.call("contextCreateFromBinary", vp(self.be), NULL, self.context_configs(skip_validation),
                        buf, len(blob), out, NULL)
        assert code == Q.QNN_SUCCESS, f"setup: contextCreateFromBinary returned {code}: {self.rec.errors()}"
        self.contexts.append(abi.hval(out[0]))
        return abi.hval(out[0])

    def messages_for(self, rule: str) -> list[str]:
        return [m for _, m in self.rec.records if f"[{rule}]" in m]

    def rules_logged(self) -> set[str]:
        return {r for _, m in self.rec.records for r in RULE_RE.findall(m)}


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


# ------------------------------------------------------------------------------ graphs
@dataclass
class Net:
    g: int
    t: dict            # name -> abi.Struct as created (ids written back)
    keep: list

    def run(self, x: np.ndarray, out_dtype=np.float32) -> np.ndarray:
        inp = abi.tensor("x", x.shape, self.t["x"].v.dataType, tensor_id=self.t["x"].id)
        inp.ptr.v2.quantizeParams = self.t["x"].v.quantizeParams
        y = np.zeros(tuple(self.t["y"].v.dimensions[i] for i in range(self.t["y"].v.rank)), out_dtype)
        out = abi.tensor("y", y.shape, self.t["y"].v.dataType, APP_READ, tensor_id=self.t["y"].id)
        abi.set_buffer(inp, np.ascontiguousarray(x))
        abi.set_buffer(out, y)
        code = abi.call("graphExecute", vp(self.g), abi.tensor_array([inp], self.keep), 1,
                        abi.tensor_array([out], self.keep), 1, NULL, NULL)
        assert code == Q.QNN_SUCCESS, f"graphExecute returned {code}"
        return y


def _graph(ctx: int, name: str, keep: list) -> int:
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr(name, keep), NULL)
    assert code == Q.QNN_SUCCESS, f"setup: graphCreate('{name}') returned {code}"
    return g


def _create(g: int, *tensors) -> None:
    for t in tensors:
        code = abi.call("tensorCreateGraphTensor", vp(g), t.ptr)
        assert code == Q.QNN_SUCCESS, f"setup: tensorCreateGraphTensor('{abi.ffi.string(t.v.name).decode()}') -> {code}"


def _node(g: int, op) -> None:
    code = abi.call("graphAddNode", vp(g), op)
    assert code == Q.QNN_SUCCESS, f"setup: graphAddNode returned {code}"


def _finalize(g: int) -> None:
    assert abi.call("graphFinalize", vp(g), NULL, NULL) == Q.QNN_SUCCESS, "setup: graphFinalize"


def lora_net(ctx: int, name: str = "lora", w=W_A, b=B_A, w_type=UPD_STATIC, b_type=UPD_STATIC) -> Net:
    """y = x @ W + b: MatMul(x[2,4], W[4,3]) -> h -> ElementWiseAdd(h, b[3]) -> y."""
    keep: list = []
    g = _graph(ctx, name, keep)
    t = {"x": abi.tensor("x", (2, 4)), "W": abi.tensor("W", w.shape, F32, w_type, data=w),
         "b": abi.tensor("b", b.shape, F32, b_type, data=b), "h": abi.tensor("h", (2, 3), type_=NATIVE),
         "y": abi.tensor("y", (2, 3), type_=APP_READ)}
    _create(g, *t.values())
    _node(g, abi.op_config("mm", "MatMul", [t["x"], t["W"]], [t["h"]]))
    _node(g, abi.op_config("add", "ElementWiseAdd", [t["h"], t["b"]], [t["y"]]))
    _finalize(g)
    return Net(g, t, keep)


XQ = dict(scale=0.05, offset=-128)
YQ = dict(scale=0.1, offset=-128)


def quant_net(ctx: int, name: str, w_codes: np.ndarray, w_scale: float, w_type=UPD_STATIC) -> Net:
    """y = x @ W with uint8 x, W (scale ``w_scale``, offset -128) and y: the integer MatMul path."""
    keep: list = []
    g = _graph(ctx, name, keep)
    t = {"x": abi.tensor("x", (2, 4), U8, quant=(XQ["scale"], XQ["offset"])),
         "W": abi.tensor("W", w_codes.shape, U8, w_type, data=w_codes, quant=(w_scale, -128)),
         "y": abi.tensor("y", (2, 3), U8, APP_READ, quant=(YQ["scale"], YQ["offset"]))}
    _create(g, *t.values())
    _node(g, abi.op_config("mm", "MatMul", [t["x"], t["W"]], [t["y"]]))
    _finalize(g)
    return Net(g, t, keep)


def reference(env: Env, w=W_A, b=B_A) -> np.ndarray:
    """y of a fresh graph with plain STATIC weights (what an update must reproduce exactly)."""
    return lora_net(env.context(), "ref", w, b, STATIC, STATIC).run(X)


def quant_reference(env: Env, codes: np.ndarray, scale: float, xq: np.ndarray) -> np.ndarray:
    return quant_net(env.context(), "qref", codes, scale, STATIC).run(xq, np.uint8)


# ------------------------------------------------------------------------------ ABI helpers
def update(t, data=None, quant=None, **kw):
    """An update for created tensor ``t``: same id/name/type/dims/dtype unless overridden."""
    v = t.v
    dims = kw.pop("dims", tuple(v.dimensions[i] for i in range(v.rank)))
    u = abi.tensor(kw.pop("name", ffi.string(v.name).decode()), dims, kw.pop("dtype", int(v.dataType)),
                   kw.pop("type_", int(v.type)), data=data, tensor_id=kw.pop("tensor_id", t.id), quant=quant, **kw)
    return u


def ptr_array(structs, keep: list):
    arr = ffi.new("Qnn_Tensor_t *[]", [s.ptr for s in structs] or [NULL])
    keep += [arr, *structs]
    return arr


def update_graph(g: int, structs, keep: list) -> int:
    return abi.call("tensorUpdateGraphTensors", vp(g), ptr_array(structs, keep), len(structs))


def context_buffer(data, size: int, keep: list, version: int = 1, mem_type: int = Q.QNN_CONTEXTMEMTYPE_RAW):
    cb = ffi.new("QnnContext_Buffer_t *")
    cb.version = version
    cb.v1.memType = mem_type
    cb.v1.binaryBuf.data = data
    cb.v1.binaryBuf.dataSize = size
    keep.append(cb)
    return cb


def section_size(ctx: int, g: int | None, kind: int = UPDATABLE) -> tuple[int, int]:
    size = ffi.new("Qnn_ContextBinarySize_t *")
    code = abi.call("contextGetBinarySectionSize", vp(ctx), vp(g), kind, size)
    return code, int(size[0])


def get_section(ctx: int, g: int | None, kind: int = UPDATABLE) -> bytes:
    code, size = section_size(ctx, g, kind)
    assert code == Q.QNN_SUCCESS, f"contextGetBinarySectionSize returned {code}"
    keep: list = []
    buf = ffi.new("char[]", size)
    written = ffi.new("Qnn_ContextBinarySize_t *")
    code = abi.call("contextGetBinarySection", vp(ctx), vp(g), kind, context_buffer(buf, size, keep), written,
                    NULL, NULL)
    assert code == Q.QNN_SUCCESS, f"contextGetBinarySection returned {code}"
    assert written[0] == size, f"contextGetBinarySection writes the size GetBinarySectionSize announced: {written[0]}"
    return bytes(ffi.buffer(buf, size))


def apply(ctx: int, g: int | None, blob: bytes, kind: int = UPDATABLE, profile=NULL) -> int:
    keep: list = []
    buf = ffi.new("char[]", blob)
    return abi.call("contextApplyBinarySection", vp(ctx), vp(g), kind, context_buffer(buf, len(blob), keep),
                    profile, NULL)


def reseal(blob: bytes) -> bytes:
    """``blob`` with its CRC32 recomputed (over the section with the CRC field zeroed)."""
    b = bytearray(blob)
    b[56:60] = b"\0\0\0\0"
    struct.pack_into("<I", b, 56, zlib.crc32(b))
    return bytes(b)


def with_meta(blob: bytes, edit: Callable[[dict], None]) -> bytes:
    """Re-encodes a section after ``edit`` changed its metadata (layout recomputed, CRC resealed)."""
    meta_size = struct.unpack_from("<Q", blob, 32)[0]
    meta = json.loads(blob[64:64 + meta_size])
    edit(meta)
    raw = json.dumps(meta).encode()
    data_off, data_size = struct.unpack_from("<QQ", blob, 40)
    new_off = (64 + len(raw) + 63) // 64 * 64
    out = bytearray(new_off + data_size)
    out[:64] = blob[:64]
    out[64:64 + len(raw)] = raw
    out[new_off:] = blob[data_off:data_off + data_size]
    struct.pack_into("<QQQQ", out, 24, len(out), len(raw), new_off, data_size)
    return reseal(bytes(out))


def data_area(blob: bytes, tensor: str) -> tuple[int, int]:
    """(offset in the section, size) of a tensor's data, from the header and the metadata."""
    meta_size, data_off = struct.unpack_from("<QQ", blob, 32)
    meta = json.loads(blob[64:64 + meta_size])
    loc = next(t["data"] for t in meta["tensors"] if t["name"] == tensor)
    return data_off + loc["offset"], loc["size"]


def get_update(blob: bytes, structs, keep: list, keep_updatable: int = 1, aux=NULL, logger=NULL):
    """(code, QnnContext_Buffer_t *) of contextGetBinarySectionUpdate."""
    buf = ffi.new("char[]", blob)
    out = ffi.new("QnnContext_Buffer_t *")
    keep += [buf, out]
    code = abi.call("contextGetBinarySectionUpdate", context_buffer(buf, len(blob), keep), aux,
                    ptr_array(structs, keep), len(structs), keep_updatable, logger, NULL, NULL, out)
    return code, out


def free_update(out, logger=NULL) -> int:
    fn = ffi.cast("Qnn_ErrorHandle_t (*)(sections_Buffer32_t, void *)", abi.table().contextFreeBinarySectionUpdate)
    by_value = ffi.new("sections_Buffer32_t *")
    ffi.memmove(by_value, out, 32)
    return int(fn(by_value[0], logger))


def update_bytes(out) -> bytes:
    return bytes(ffi.buffer(out.v1.binaryBuf.data, out.v1.binaryBuf.dataSize))


def context_binary(ctx: int) -> bytes:
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySize", vp(ctx), size) == Q.QNN_SUCCESS, "contextGetBinarySize"
    buf = ffi.new("char[]", size[0])
    written = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinary", vp(ctx), buf, size[0], written) == Q.QNN_SUCCESS, "contextGetBinary"
    return bytes(ffi.buffer(buf, written[0]))


def retrieve(ctx: int, name: str, keep: list) -> int:
    code, g = abi.create("graphRetrieve", vp(ctx), abi.cstr(name, keep))
    assert code == Q.QNN_SUCCESS, f"graphRetrieve('{name}') returned {code}"
    return g


def assert_matches(y: np.ndarray, w: np.ndarray, b: np.ndarray, what: str):
    np.testing.assert_allclose(y, X @ w + b, rtol=1e-5, atol=1e-5, err_msg=f"{what}: y = x @ W + b")


# ============================================================================== behaviour
def test_updateable_static_computes_like_static(env):
    ctx = env.context()
    net = lora_net(ctx)
    y = net.run(X)
    assert_matches(y, W_A, B_A, "UPDATEABLE_STATIC weights at creation")
    assert np.array_equal(y, reference(env)), "an UPDATEABLE_STATIC graph computes exactly as a STATIC one"


def test_lora_adapters_switch_by_section(env):
    """Two sections made from two weight sets; apply A -> numpy(A), B -> numpy(B), back to A."""
    ctx = env.context()
    net = lora_net(ctx)
    section_a = get_section(ctx, net.g)
    assert update_graph(net.g, [update(net.t["W"], W_B), update(net.t["b"], B_B)], net.keep) == Q.QNN_SUCCESS
    section_b = get_section(ctx, net.g)
    assert section_a != section_b and len(section_a) == len(section_b), "the two adapters differ in content only"
    for name, blob, w, b in (("A", section_a, W_A, B_A), ("B", section_b, W_B, B_B), ("A again", section_a, W_A, B_A)):
        assert apply(ctx, net.g, blob) == Q.QNN_SUCCESS, f"apply section {name}: {env.rec.errors()}"
        y = net.run(X)
        assert_matches(y, w, b, f"after applying section {name}")
        assert np.array_equal(y, reference(env, w, b)), f"section {name}: exactly what a fresh graph computes"
    assert any("applied a QNN_CONTEXT_SECTION_UPDATABLE section" in m for m in env.rec.messages()), \
        "apply logs what it did"


def test_tensor_update_graph_tensors(env):
    ctx = env.context()
    net = lora_net(ctx)
    net.run(X)   # a first execute prepared the weights; the update must replace them
    assert update_graph(net.g, [update(net.t["W"], W_B)], net.keep) == Q.QNN_SUCCESS, env.rec.errors()
    assert_matches(net.run(X), W_B, B_A, "W updated, b unchanged")
    # by name (id 0), as graphExecute matches its tensors
    assert update_graph(net.g, [update(net.t["b"], B_B, tensor_id=0)], net.keep) == Q.QNN_SUCCESS
    assert_matches(net.run(X), W_B, B_B, "b updated by name")
    # graphFinalize after an update is harmless (the vendor's flow calls it)
    _finalize(net.g)
    assert_matches(net.run(X), W_B, B_B, "after a re-finalize")


def test_failed_update_changes_nothing(env):
    ctx = env.context()
    net = lora_net(ctx)
    code = update_graph(net.g, [update(net.t["W"], W_B), update(net.t["b"], B_B[:2])], net.keep)
    assert code == Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE, "a wrong-size b fails the whole call"
    assert np.array_equal(net.run(X), reference(env)), "the valid W update of the failed call was not applied"


def test_update_before_finalize(env):
    ctx = env.context()
    keep: list = []
    g = _graph(ctx, "early", keep)
    t = {"x": abi.tensor("x", (2, 4)), "W": abi.tensor("W", (4, 3), F32, UPD_STATIC, data=W_A),
         "y": abi.tensor("y", (2, 3), type_=APP_READ)}
    _create(g, *t.values())
    _node(g, abi.op_config("mm", "MatMul", [t["x"], t["W"]], [t["y"]]))
    assert update_graph(g, [update(t["W"], W_B)], keep) == Q.QNN_SUCCESS, "updates before graphFinalize are kept"
    _finalize(g)
    np.testing.assert_allclose(Net(g, t, keep).run(X), X @ W_B, rtol=1e-5, atol=1e-5,
                               err_msg="finalize compiles the updated weights")


def test_context_tensor_shared_by_two_graphs(env):
    """A context tensor read by two graphs: one tensorUpdateContextTensors changes both."""
    ctx = env.context()
    keep: list = []
    w = abi.tensor("W_shared", (4, 3), F32, UPD_STATIC, data=W_A)
    assert abi.call("tensorCreateContextTensor", vp(ctx), w.ptr) == Q.QNN_SUCCESS, "tensorCreateContextTensor"
    nets = []
    for name, op in (("g1", "Relu"), ("g2", "Sigmoid")):
        g = _graph(ctx, name, keep)
        t = {"x": abi.tensor("x", (2, 4)), "h": abi.tensor("h", (2, 3), type_=NATIVE),
             "y": abi.tensor("y", (2, 3), type_=APP_READ)}
        _create(g, *t.values())
        _node(g, abi.op_config("mm", "MatMul", [t["x"], w], [t["h"]]))
        _node(g, abi.op_config("act", op, [t["h"]], [t["y"]]))
        _finalize(g)
        nets.append(Net(g, t, keep))
    relu = lambda v: np.maximum(v, 0)              # noqa: E731
    sigmoid = lambda v: 1 / (1 + np.exp(-v))       # noqa: E731
    for w_now, label in ((W_A, "created"), (W_B, "updated")):
        if label == "updated":
            code = abi.call("tensorUpdateContextTensors", vp(ctx), ptr_array([update(w, W_B)], keep), 1)
            assert code == Q.QNN_SUCCESS, f"tensorUpdateContextTensors: {env.rec.errors()}"
        np.testing.assert_allclose(nets[0].run(X), relu(X @ w_now), rtol=1e-5, atol=1e-6, err_msg=f"g1, {label}")
        np.testing.assert_allclose(nets[1].run(X), sigmoid(X @ w_now), rtol=1e-5, atol=1e-6, err_msg=f"g2, {label}")
    # a whole-context section (graph NULL) carries the context tensor once and restores it
    whole = get_section(ctx, None)
    info = sections.parse_section(whole, "test")
    assert [(e.graph, e.tensor.name) for e in info.entries] == [(None, "W_shared")], \
        f"a whole-context section lists each updatable tensor once: {[(e.graph, e.tensor.name) for e in info.entries]}"
    assert abi.call("tensorUpdateContextTensors", vp(ctx), ptr_array([update(w, W_A)], keep), 1) == Q.QNN_SUCCESS
    assert apply(ctx, None, whole) == Q.QNN_SUCCESS, env.rec.errors()
    np.testing.assert_allclose(nets[1].run(X), sigmoid(X @ W_B), rtol=1e-5, atol=1e-6,
                               err_msg="the whole-context section brought W_B back")
    per_graph = sections.parse_section(get_section(ctx, nets[0].g), "test")
    assert [(e.graph, e.tensor.name) for e in per_graph.entries] == [(None, "W_shared")], \
        "a graph's section includes the updatable context tensors its nodes read"


def test_quantized_updatable_weights(env):
    """uint8 W (integer MatMul path): data and scale updates give exactly what a fresh graph gives;
    WEIGHTS sections carry the codes only, QUANT_PARAMS sections the scale only."""
    ctx = env.context()
    codes_a = RNG.integers(0, 256, (4, 3), dtype=np.uint8)
    codes_b = RNG.integers(0, 256, (4, 3), dtype=np.uint8)
    scale_a, scale_b = 0.02, 0.035
    xq = RNG.integers(0, 256, (2, 4), dtype=np.uint8)
    net = quant_net(ctx, "q", codes_a, scale_a)
    y_a = net.run(xq, np.uint8)
    assert np.array_equal(y_a, quant_reference(env, codes_a, scale_a, xq)), "as created"
    assert update_graph(net.g, [update(net.t["W"], codes_b, quant=(scale_b, -128))], net.keep) == Q.QNN_SUCCESS, \
        env.rec.errors()
    y_b = net.run(xq, np.uint8)
    assert np.array_equal(y_b, quant_reference(env, codes_b, scale_b, xq)), "codes and scale updated"
    assert not np.array_equal(y_a, y_b), "the update changes the output"
    weights, quants = get_section(ctx, net.g, WEIGHTS), get_section(ctx, net.g, QUANT)
    assert update_graph(net.g, [update(net.t["W"], codes_a, quant=(scale_a, -128))], net.keep) == Q.QNN_SUCCESS
    assert apply(ctx, net.g, weights, WEIGHTS) == Q.QNN_SUCCESS, env.rec.errors()
    assert np.array_equal(net.run(xq, np.uint8), quant_reference(env, codes_b, scale_a, xq)), \
        "a WEIGHTS section replaces the codes and keeps the scale"
    assert apply(ctx, net.g, quants, QUANT) == Q.QNN_SUCCESS, env.rec.errors()
    assert np.array_equal(net.run(xq, np.uint8), y_b), "a QUANT_PARAMS section replaces the scale"


def test_quantization_of_updatable_activations(env):
    """UPDATEABLE_APP_WRITE / UPDATEABLE_APP_READ tensors: their quantization is updatable (and is
    what a QUANT_PARAMS section carries); their codes are what the app passes and gets."""
    ctx = env.context()
    keep: list = []
    g = _graph(ctx, "act", keep)
    t = {"x": abi.tensor("x", (2, 4), U8, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE, quant=(0.1, -100)),
         "y": abi.tensor("y", (2, 4), U8, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ, quant=(0.05, 0))}
    _create(g, *t.values())
    _node(g, abi.op_config("relu", "Relu", [t["x"]], [t["y"]]))
    _finalize(g)
    net = Net(g, t, keep)
    xq = np.arange(8, dtype=np.uint8).reshape(2, 4) * 30

    def expect(xs, xo, ys, yo):
        real = np.maximum((xq.astype(np.float64) + xo) * xs, 0)
        return np.clip(np.rint(real / ys) - yo, 0, 255).astype(np.uint8)
    assert np.array_equal(net.run(xq, np.uint8), expect(0.1, -100, 0.05, 0)), "as created"
    section = get_section(ctx, g, QUANT)
    names = [(e.tensor.name, e.has_quant, e.has_data) for e in sections.parse_section(section, "t").entries]
    assert names == [("x", True, False), ("y", True, False)], f"a QUANT_PARAMS section: {names}"
    code = update_graph(g, [update(t["x"], quant=(0.2, -50)), update(t["y"], quant=(0.04, -10))], keep)
    assert code == Q.QNN_SUCCESS, env.rec.errors()
    assert np.array_equal(net.run(xq, np.uint8), expect(0.2, -50, 0.04, -10)), "input and output scales updated"
    assert apply(ctx, g, section, QUANT) == Q.QNN_SUCCESS, env.rec.errors()
    assert np.array_equal(net.run(xq, np.uint8), expect(0.1, -100, 0.05, 0)), "the section restored them"


def test_crc_corruption_rejected_unless_validation_skipped(env):
    ctx = env.context()
    net = lora_net(ctx)
    assert update_graph(net.g, [update(net.t["W"], W_B)], net.keep) == Q.QNN_SUCCESS
    blob = bytearray(get_section(ctx, net.g))
    assert update_graph(net.g, [update(net.t["W"], W_A)], net.keep) == Q.QNN_SUCCESS
    start, size = data_area(bytes(blob), "W")
    blob[start] ^= 0x40        # flips a bit of W's first float
    corrupted_w = np.frombuffer(bytes(blob[start:start + size]), np.float32).reshape(4, 3)
    env.rec.clear()
    assert apply(ctx, net.g, bytes(blob)) == Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "a corrupted section is refused"
    assert env.messages_for("QNNEMU-section-crc"), "the CRC32 rule is logged"
    assert np.array_equal(net.run(X), reference(env)), "the refused section changed nothing"
    skipping = env.context(skip_validation=True)
    net2 = lora_net(skipping)
    assert apply(skipping, net2.g, bytes(blob)) == Q.QNN_SUCCESS, \
        f"SKIP_VALIDATION_ON_BINARY_SECTION skips the CRC32 check: {env.rec.errors()}"
    assert_matches(net2.run(X), corrupted_w, B_A, "the unchecked section is applied as it is")
    assert any("CRC32 not checked" in m for m in env.rec.messages()), "the skipped check is logged"


def test_round_trip_through_the_context_binary(env):
    ctx = env.context()
    net = lora_net(ctx)
    section_b = None
    assert update_graph(net.g, [update(net.t["W"], W_B), update(net.t["b"], B_B)], net.keep) == Q.QNN_SUCCESS
    section_b = get_section(ctx, net.g)
    assert update_graph(net.g, [update(net.t["W"], W_A), update(net.t["b"], B_A)], net.keep) == Q.QNN_SUCCESS
    blob = context_binary(ctx)
    info = binary.inspect(blob)
    types = {t.name: t.type for t in info.graph("lora").tensors}
    assert types["W"] == UPD_STATIC and types["b"] == UPD_STATIC, f"the binary keeps the tensor types: {types}"
    loaded = env.load(blob)
    keep: list = []
    g = retrieve(loaded, "lora", keep)
    run = Net(g, net.t, keep).run   # same ids in the loaded context
    assert_matches(run(X), W_A, B_A, "loaded context")
    assert apply(loaded, g, section_b) == Q.QNN_SUCCESS, f"apply to a loaded context: {env.rec.errors()}"
    assert_matches(run(X), W_B, B_B, "section B applied to the loaded context")
    assert update_graph(g, [update(net.t["W"], W_A)], keep) == Q.QNN_SUCCESS, "still updatable after loading"
    assert_matches(run(X), W_A, B_B, "W updated in the loaded context")
    again = binary.inspect(context_binary(loaded))
    assert {t.name: t.type for t in again.graph("lora").tensors} == types, "types survive a second round trip"


def test_context_binary_holds_updated_values(env):
    ctx = env.context()
    net = lora_net(ctx)
    before = context_binary(ctx)
    assert update_graph(net.g, [update(net.t["W"], W_B)], net.keep) == Q.QNN_SUCCESS
    after = context_binary(ctx)
    assert before != after, "contextGetBinary after an update serializes the new weights (no stale cache)"
    keep: list = []
    loaded = env.load(after)
    assert_matches(Net(retrieve(loaded, "lora", keep), net.t, keep).run(X), W_B, B_A, "binary after the update")


def test_get_binary_section_update(env):
    ctx = env.context()
    net = lora_net(ctx)
    section_a = get_section(ctx, net.g)
    keep: list = []
    code, out = get_update(section_a, [update(net.t["W"], W_B)], keep, logger=vp(env.log))
    assert code == Q.QNN_SUCCESS, f"contextGetBinarySectionUpdate: {env.rec.errors()}"
    updated = update_bytes(out)
    assert apply(ctx, net.g, updated) == Q.QNN_SUCCESS, env.rec.errors()
    assert_matches(net.run(X), W_B, B_A, "the updated section has W_B and the old b")
    code, frozen = get_update(updated, [update(net.t["b"], B_B)], keep, keep_updatable=0)
    assert code == Q.QNN_SUCCESS, "keepUpdatable = 0"
    assert apply(ctx, net.g, update_bytes(frozen)) == Q.QNN_SUCCESS, "a frozen section can still be applied"
    assert_matches(net.run(X), W_B, B_B, "frozen section")
    assert free_update(out, vp(env.log)) == Q.QNN_SUCCESS, "contextFreeBinarySectionUpdate"
    assert free_update(frozen) == Q.QNN_SUCCESS, "contextFreeBinarySectionUpdate (no logger)"


def test_section_is_deterministic_and_sized_exactly(env):
    ctx = env.context()
    net = lora_net(ctx)
    one, two = get_section(ctx, net.g), get_section(ctx, net.g)
    assert one == two, "the same values give the same section bytes"
    assert one[:8] == sections.MAGIC and struct.unpack_from("<I", one, 8)[0] == sections.FORMAT_VERSION, "header"
    assert len(one) == struct.unpack_from("<Q", one, 24)[0], "the header's total size is the section's size"
    info = sections.parse_section(one, "test")
    assert [(e.graph, e.tensor.name, e.has_data) for e in info.entries] == [("lora", "W", True), ("lora", "b", True)], \
        "the section lists the graph's updatable tensors by id with their data"
    data_off = struct.unpack_from("<Q", one, 40)[0]
    assert data_off % 64 == 0, "the data area is 64-byte aligned"


def test_apply_records_profile_events(env):
    ctx = env.context()
    net = lora_net(ctx)
    blob = get_section(ctx, net.g)
    out = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(env.be), Q.QNN_PROFILE_LEVEL_BASIC, out) == Q.QNN_SUCCESS, "profileCreate"
    profile = out[0]
    assert apply(ctx, net.g, blob, profile=profile) == Q.QNN_SUCCESS, env.rec.errors()
    ids = ffi.new("const QnnProfile_EventId_t **")
    n = ffi.new("uint32_t *")
    assert abi.call("profileGetEvents", profile, ids, n) == Q.QNN_SUCCESS, "profileGetEvents"
    events = {}
    for i in range(n[0]):
        data = ffi.new("QnnProfile_EventData_t *")
        assert abi.call("profileGetEventData", ids[0][i], data) == Q.QNN_SUCCESS, "profileGetEventData"
        events[int(data.type)] = (int(data.unit), int(data.value))
    qnn = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_APPLY_BINARY_SECTION_QNN
    rpc = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_APPLY_BINARY_SECTION_RPC
    assert set(events) == {qnn, rpc}, f"apply records the QNN and RPC apply-binary-section events: {events}"
    assert events[qnn][1] >= events[rpc][1], f"the whole call takes at least its RPC part: {events}"
    assert abi.call("profileFree", profile) == Q.QNN_SUCCESS, "profileFree"


def test_update_refreshes_only_affected_steps(env):
    """Core view of the plan refresh: untouched steps (and their op objects) are kept."""
    from qnnemu.core.handles import HANDLES
    ctx = env.context()
    net = lora_net(ctx)
    graph = HANDLES.lookup(net.g)
    before = graph.plan
    assert update_graph(net.g, [update(net.t["b"], B_B)], net.keep) == Q.QNN_SUCCESS
    after = graph.plan
    assert after is not before, "a new plan is installed"
    assert after.steps[0] is before.steps[0], "MatMul (which does not read b) keeps its step"
    assert after.steps[1] is not before.steps[1], "ElementWiseAdd (which reads b) is rebuilt"
    assert after.run.__func__ is before.run.__func__, "the execute loop itself is unchanged"


# ============================================================================== rule cases
@dataclass
class Case:
    rule: str
    code: int
    func: str
    path: str
    trigger: Callable[[Env], int]


CASES: list = []


def case(rule, code, func, path):
    def deco(fn):
        CASES.append(pytest.param(Case(rule, code, func, path, fn), id=rule))
        return fn
    return deco


def _gather_net(env: Env):
    ctx = env.context()
    keep: list = []
    g = _graph(ctx, "gather", keep)
    t = {"x": abi.tensor("x", (4, 3)), "idx": abi.tensor("idx", (2,), I32, UPD_STATIC, data=np.array([0, 2], np.int32)),
         "y": abi.tensor("y", (2, 3), type_=APP_READ)}
    _create(g, *t.values())
    axis = abi.scalar_param("axis", Q.QNN_DATATYPE_INT_32, "int32Value", 0)
    _node(g, abi.op_config("gather", "Gather", [t["x"], t["idx"]], [t["y"]], [axis]))
    _finalize(g)
    keep.append(axis)
    env.keep.append(keep)
    return ctx, Net(g, t, keep)


def _net(env: Env, **kw):
    ctx = env.context()
    net = lora_net(ctx, **kw)
    env.keep.append(net)
    return ctx, net


def _upd(env: Env, net: Net, *structs) -> int:
    env.rec.clear()
    return update_graph(net.g, list(structs), net.keep)


@case("QNNEMU-tensorUpdate-not-updatable", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE,
      "tensorUpdateGraphTensors", "tensor[0].v2")
def _(e):
    _, net = _net(e, b_type=STATIC)
    return _upd(e, net, update(net.t["b"], B_B))


@case("QNNEMU-tensorUpdate-dtype", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE,
      "tensorUpdateGraphTensors", "tensor[0].v2.dataType")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], W_B.astype(np.float16), dtype=F16))


@case("QNNEMU-tensorUpdate-dims", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE,
      "tensorUpdateGraphTensors", "tensor[0].v2.dimensions")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], W_B.T.copy(), dims=(3, 4)))


@case("QNNEMU-tensorUpdate-quant-encoding", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE,
      "tensorUpdateGraphTensors", "tensor[0].v2.quantizeParams.quantizationEncoding")
def _(e):
    net = quant_net(e.context(), "q", np.zeros((4, 3), np.uint8), 0.02)
    e.keep.append(net)
    u = update(net.t["W"], np.ones((4, 3), np.uint8))
    qp = u.v.quantizeParams
    qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET
    qp.bwScaleOffsetEncoding.bitwidth = 8
    qp.bwScaleOffsetEncoding.scale = 0.02
    qp.bwScaleOffsetEncoding.offset = -128
    return _upd(e, net, u)


@case("QNNEMU-tensorUpdate-data-null", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
      "tensorUpdateGraphTensors", "tensor[0].v2.clientBuf.data")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], None, data_size=48))


@case("QNNEMU-tensorUpdate-data-size", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE,
      "tensorUpdateGraphTensors", "tensor[0].v2.clientBuf.dataSize")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], W_B, data_size=40))


@case("QNNEMU-tensorUpdate-memtype", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM,
      "tensorUpdateGraphTensors", "tensor[0].v2.memType")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], W_B, mem_type=Q.QNN_TENSORMEMTYPE_MEMHANDLE))


@case("QNNEMU-tensorUpdate-unknown", Q.QNN_TENSOR_ERROR_DOES_NOT_EXIST, "tensorUpdateContextTensors", "tensor[0].v2.id")
def _(e):
    ctx = e.context()
    e.rec.clear()
    u = abi.tensor("nope", (4, 3), F32, UPD_STATIC, data=W_B, tensor_id=9999)
    return abi.call("tensorUpdateContextTensors", vp(ctx), ptr_array([u], e.keep), 1)


@case("QNNEMU-tensorUpdate-duplicate", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorUpdateGraphTensors",
      "tensor[1].v2")
def _(e):
    _, net = _net(e)
    return _upd(e, net, update(net.t["W"], W_B), update(net.t["W"], W_A, tensor_id=0))


@case("QNNEMU-tensorUpdate-node-check", Q.QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE, "tensorUpdateGraphTensors",
      "tensor[0].v2")
def _(e):
    # RoiAlign checks static batch indices at graphAddNode (a Gather index out of range is only
    # a warning there, as on the vendor: qnnemu/ops/gather.py), so an update must pass it too.
    ctx = e.context()
    keep: list = []
    g = _graph(ctx, "roi", keep)
    t = {"x": abi.tensor("x", (2, 4, 4, 1)),
         "rois": abi.static_tensor("rois", np.array([[0, 0, 2, 2]], np.float32)),
         "bidx": abi.tensor("bidx", (1,), Q.QNN_DATATYPE_INT_32, UPD_STATIC, data=np.array([1], np.int32)),
         "y": abi.tensor("y", (1, 2, 2, 1), type_=APP_READ)}
    _create(g, *t.values())
    ratio = abi.tensor_param("img_size_ratio", abi.static_tensor("ratio", np.array([1.0, 1.0], np.float32)))
    _node(g, abi.op_config("roi", "RoiAlign", [t["x"], t["rois"], t["bidx"]], [t["y"]], [ratio]))
    _finalize(g)
    keep.append(ratio)
    e.keep.append(keep)
    code = _upd(e, Net(g, t, keep), update(t["bidx"], np.array([5], np.int32)))
    assert "QNNEMU-RoiAlign-batch-index" in " ".join(e.rec.errors()), "the op's own rule is quoted"
    return code


@case("QNNEMU-tensor-version", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorUpdateGraphTensors",
      "tensor[0].version")
def _(e):
    _, net = _net(e)
    u = update(net.t["W"], W_B)
    u.ptr.version = 7
    return _upd(e, net, u)


@case("QNNEMU-arg-null", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, "tensorUpdateGraphTensors", "tensor")
def _(e):
    _, net = _net(e)
    e.rec.clear()
    return abi.call("tensorUpdateGraphTensors", vp(net.g), NULL, 1)


def _section_case(e: Env, **kw):
    ctx, net = _net(e, **kw)
    blob = get_section(ctx, net.g)
    e.rec.clear()
    return ctx, net, blob


@case("QNNEMU-section-magic", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    return apply(ctx, net.g, b"NOTASECT" + blob[8:])


@case("QNNEMU-section-version", Q.QNN_CONTEXT_ERROR_BINARY_VERSION, "contextApplyBinarySection", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    return apply(ctx, net.g, reseal(blob[:8] + struct.pack("<I", 2) + blob[12:]))


@case("QNNEMU-section-truncated", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    return apply(ctx, net.g, blob[:-4])


@case("QNNEMU-section-crc", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    start, _ = data_area(blob, "b")
    return apply(ctx, net.g, blob[:start] + bytes([blob[start] ^ 1]) + blob[start + 1:])


@case("QNNEMU-section-metadata", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    return apply(ctx, net.g, with_meta(blob, lambda m: m["tensors"][0].update(dims=[4, "x"])))


@case("QNNEMU-section-graph", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "graph")
def _(e):
    ctx, net, blob = _section_case(e)
    other = lora_net(ctx, "other")
    e.keep.append(other)
    e.rec.clear()
    return apply(ctx, other.g, blob)


@case("QNNEMU-section-frozen", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetBinarySectionUpdate", "binaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    code, frozen = get_update(blob, [update(net.t["W"], W_B)], e.keep, keep_updatable=0)
    assert code == Q.QNN_SUCCESS, "setup: a frozen section"
    e.keep.append(frozen)
    e.rec.clear()
    code, out = get_update(update_bytes(frozen), [update(net.t["W"], W_A)], e.keep)
    assert free_update(frozen) == Q.QNN_SUCCESS, "setup: free the frozen section"
    return code


@case("QNNEMU-section-type", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetBinarySectionSize", "section")
def _(e):
    ctx, net, _ = _section_case(e)
    return section_size(ctx, net.g, 77)[0]


@case("QNNEMU-section-type-mismatch", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection", "section")
def _(e):
    ctx, net, blob = _section_case(e)
    return apply(ctx, net.g, blob, WEIGHTS)


@case("QNNEMU-section-graph-context", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetBinarySectionSize", "graph")
def _(e):
    _, net, _ = _section_case(e)
    other = e.context()
    return section_size(other, net.g)[0]


@case("QNNEMU-section-buffer-version", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection",
      "binaryBuffer.version")
def _(e):
    ctx, net, blob = _section_case(e)
    buf = ffi.new("char[]", blob)
    return abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(buf, len(blob), e.keep, version=2), NULL, NULL)


@case("QNNEMU-section-buffer-memtype", Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "contextApplyBinarySection",
      "binaryBuffer.v1.memType")
def _(e):
    ctx, net, blob = _section_case(e)
    buf = ffi.new("char[]", blob)
    return abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(buf, len(blob), e.keep, mem_type=Q.QNN_CONTEXTMEMTYPE_MEMHANDLE), NULL, NULL)


@case("QNNEMU-section-buffer-empty", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextApplyBinarySection",
      "binaryBuffer.v1.binaryBuf")
def _(e):
    ctx, net, _ = _section_case(e)
    return abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(NULL, 0, e.keep), NULL, NULL)


@case("QNNEMU-section-buffer-size", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetBinarySection",
      "binaryBuffer.v1.binaryBuf.dataSize")
def _(e):
    ctx, net, blob = _section_case(e)
    buf = ffi.new("char[]", 16)
    written = ffi.new("Qnn_ContextBinarySize_t *")
    return abi.call("contextGetBinarySection", vp(ctx), vp(net.g), UPDATABLE, context_buffer(buf, 16, e.keep),
                    written, NULL, NULL)


@case("QNNEMU-section-not-finalized", Q.QNN_CONTEXT_ERROR_NOT_FINALIZED, "contextGetBinarySectionSize", "graph")
def _(e):
    ctx = e.context()
    g = _graph(ctx, "open", e.keep)
    e.rec.clear()
    return section_size(ctx, g)[0]


@case("QNNEMU-section-auxiliary", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetBinarySectionUpdate",
      "auxiliaryBuffer")
def _(e):
    ctx, net, blob = _section_case(e)
    buf = ffi.new("char[]", blob)
    aux = context_buffer(buf, len(blob), e.keep)
    return get_update(blob, [update(net.t["W"], W_B)], e.keep, aux=aux)[0]


@case("QNNEMU-section-free-unknown", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextFreeBinarySectionUpdate",
      "binarySectionUpdate.v1.binaryBuf.data")
def _(e):
    buf = ffi.new("char[]", 8)
    e.keep.append(buf)
    return free_update(context_buffer(buf, 8, e.keep))


RULE_IDS = {p.values[0].rule for p in CASES}


@pytest.mark.parametrize("c", CASES)
@pytest.mark.soc("SM8550")   # RoiAlign (the node-check case) has no float HTP kernel on v68
def test_rule(env, c: Case):
    env.rec.assert_rule(c.trigger(env), c.code, c.rule, c.func, c.path)


def test_every_section_rule_has_a_case():
    """The rule ids raised by the section/update code all have a case above."""
    import pathlib

    import qnnemu
    root = pathlib.Path(qnnemu.__file__).parent
    found = set()
    for path in (root / "core" / "sections.py", root / "abi" / "section_api.py"):
        found |= set(re.findall(r'"(QNNEMU-[A-Za-z0-9_-]+)"', path.read_text()))
    assert found <= RULE_IDS, f"rules without a case here: {sorted(found - RULE_IDS)}"


def _timeout_signal(env, us: int) -> int:
    c = ffi.new("QnnSignal_Config_t *")
    c.option = Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT
    c.timeoutDurationUs = us
    env.keep.append(c)
    out = ffi.new("Qnn_SignalHandle_t *")
    code = abi.call("signalCreate", vp(env.be), abi.null_terminated("QnnSignal_Config_t", [c], env.keep), out)
    assert code == Q.QNN_SUCCESS, f"setup: signalCreate returned {code}"
    return abi.hval(out[0])


def test_signal_timeout_cancels_apply_and_leaves_the_context_unchanged(env):
    """A TIMEOUT signal whose time has passed before the section is installed: TIMED_OUT, and
    the graph still computes with the weights it had; the same signal with a long timeout
    lets the apply through."""
    ctx = env.context()
    net = lora_net(ctx)
    section_a = get_section(ctx, net.g)
    assert update_graph(net.g, [update(net.t["W"], W_B), update(net.t["b"], B_B)], net.keep) == Q.QNN_SUCCESS
    buf = ffi.new("char[]", section_a)
    short = _timeout_signal(env, 1)
    code = abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(buf, len(section_a), env.keep), NULL, vp(short))
    assert code == Q.QNN_CONTEXT_ERROR_TIMED_OUT, f"apply with a 1 us timeout: {code}"
    assert np.array_equal(net.run(X), reference(env, W_B, B_B)), "a timed-out apply installed nothing"
    long = _timeout_signal(env, 60_000_000)
    code = abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(buf, len(section_a), env.keep), NULL, vp(long))
    assert code == Q.QNN_SUCCESS, f"apply with a 60 s timeout: {env.rec.errors()}"
    assert np.array_equal(net.run(X), reference(env, W_A, B_A)), "the apply within its timeout installed section A"
    for sig in (short, long):
        assert abi.call("signalFree", vp(sig)) == Q.QNN_SUCCESS, "signalFree after the calls returned"


def test_signal_handle_is_checked(env):
    ctx = env.context()
    net = lora_net(ctx)
    blob = get_section(ctx, net.g)
    buf = ffi.new("char[]", blob)
    code = abi.call("contextApplyBinarySection", vp(ctx), vp(net.g), UPDATABLE,
                    context_buffer(buf, len(blob), env.keep), NULL, vp(0x5151))
    assert code == Q.QNN_CONTEXT_ERROR_INVALID_HANDLE, f"an unknown signal handle: {code}"
