"""Context binaries (qnnemu/core/binary.py, docs/context-binary.md): serialize a finalized context,
load it back and get bit-identical outputs; determinism; weight sharing; compatibility rules;
one negative test per QNNEMU-binary-* rule; a hypothesis fuzz of the loader over byte mutations
and truncations (every outcome is a load or a QnnError with a QnnContext_Error_t code).

Contexts are built on the core objects directly (Backend / Context / Graph with TensorDesc and
OpConfigDesc, as the ABI layer hands them over; tests/helpers/binary_builders.py), plus one
context built through the C ABI with qnnemu.client, whose core Context is reached through
qnnemu.core.handles.HANDLES.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers.binary_builders import (
    APP_READ,
    APP_WRITE,
    F32,
    RNG,
    S8,
    STATIC,
    U8,
    U32,
    GraphBuilder,
    assert_same_outputs,
    desc,
    float_feeds,
    float_graph,
    load,
    loaded_graph,
    new_context,
    quant_feeds,
    quant_graph,
    run,
    split,
    with_meta,
)
from hypothesis import HealthCheck, event, given, settings, strategies as st

from qnnemu.core import binary
from qnnemu.core.backend import BUILD_ID, Backend
from qnnemu.core.device import Device, model_from_configs
from qnnemu.core.handles import HANDLES
from qnnemu.core.log import NULL_LOGGER
from qnnemu.core.tensor import RawQuant
from qnnemu.errors import QnnError
from qnnemu.headers import Q

CONTEXT_CODES = set(Q.enum("QNN_CONTEXT_ERROR_")) - {Q.QNN_CONTEXT_ERROR_UNDEFINED}


# ---------------------------------------------------------------------------- blob headers
def header_fields(blob: bytes) -> dict:
    names = ["magic", "version", "header_size", "total_size", "flags", "payload_crc", "c0", "c1", "c2", "b0", "b1",
             "b2", "soc", "arch", "vtcm", "meta_off", "meta_size", "data_off", "data_size", "build", "graph_count",
             "meta_crc", "reserved", "header_crc"]
    return dict(zip(names, struct.unpack_from("<8sIIQII3H3HIIIQQQQ32sII28sI", blob, 0)))


def patch_header(blob: bytes, fmt: str, offset: int, value, reseal: bool = True) -> bytes:
    out = bytearray(blob)
    struct.pack_into(fmt, out, offset, value)
    return binary.reseal(bytes(out)) if reseal else bytes(out)


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def float_ctx():
    ctx = new_context()
    float_graph(ctx)
    yield ctx
    ctx.free()


@pytest.fixture(scope="module")
def float_blob(float_ctx):
    return binary.serialize(float_ctx)


@functools.cache
def two_graph_blob() -> bytes:
    """A small two-graph binary (float + quantized), e.g. for the fuzz tests."""
    ctx = new_context()
    float_graph(ctx)
    quant_graph(ctx)
    blob = binary.serialize(ctx)
    ctx.free()
    return blob


@pytest.fixture(scope="module")
def small_blob():
    return two_graph_blob()


# ------------------------------------------------------------------------------ round trips
def test_float_round_trip_is_bit_identical(float_ctx, float_blob):
    loaded = load(float_blob)
    try:
        g0 = float_ctx.graphs["float_net"]
        g1 = loaded_graph(loaded, "float_net")
        assert g1.finalized, "loaded graphs are finalized (graphExecute without graphFinalize)"
        for _ in range(3):
            feeds = float_feeds()
            assert_same_outputs(run(g0, feeds), run(g1, feeds), "Conv2d+Relu+FullyConnected float graph")
        assert {t.id: t.name for t in g0.tensors.values()} == {t.id: t.name for t in g1.tensors.values()}, \
            "tensors keep their ids and names"
        assert [n.name for n in g1.nodes] == [n.name for n in g0.nodes], "nodes in the same order"
        assert g1.configs == {"priority": Q.QNN_PRIORITY_DEFAULT}, "graph configs stored"
        assert binary.serialize(loaded) == float_blob, "a loaded context serializes to the same bytes"
    finally:
        loaded.free()


def test_quantized_round_trip_is_bit_identical():
    ctx = new_context()
    quant_graph(ctx)
    blob = binary.serialize(ctx)
    loaded = load(blob)
    try:
        g0, g1 = ctx.graphs["quant_net"], loaded_graph(loaded, "quant_net")
        for _ in range(3):
            feeds = quant_feeds()
            out0, out1 = run(g0, feeds), run(g1, feeds)
            assert out0["qy"].dtype == np.uint8, "quantized output stays uint8"
            assert_same_outputs(out0, out1, "uint8 conv with per-channel int8 weights")
        w0, w1 = g0.tensors[g0.by_name["qw"]], g1.tensors[g1.by_name["qw"]]
        assert w1.quant.axis == 3 and w1.quant.scale.dtype == w0.quant.scale.dtype, "per-axis quant kept"
        assert w1.quant.scale.tobytes() == w0.quant.scale.tobytes(), "per-channel scales bit-exact"
        x1 = g1.tensors[g1.by_name["qx"]]
        assert (x1.quant.scale, x1.quant.offset) == (g0.tensors[g0.by_name["qx"]].quant.scale, -128), \
            "per-tensor scale/offset kept"
    finally:
        loaded.free()
        ctx.free()


def test_blockwise_and_bitwidth_quantization_round_trip():
    ctx = new_context()
    b = GraphBuilder(ctx, "bw")
    x = b.tensor("x", (2, 8), type_=APP_WRITE)
    # FullyConnected weight [out=3, in=8], int8 codes in 4-bit range, 2 blocks of 4 per channel.
    wq = RawQuant(Q.QNN_DEFINITION_DEFINED, Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION, axis=0,
                  scales=np.array([0.1, 0.2, 0.05], np.float32), offsets=np.zeros(3, np.int32),
                  blocks_per_axis=2, block_scale_bitwidth=4,
                  block_scale_storage=Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8,
                  block_scales=np.array([[1, 2], [3, 4], [5, 6]], np.uint8))
    wd = desc("w", (3, 8), S8, STATIC, RNG.integers(-8, 8, (3, 8), dtype=np.int8))
    wd.quant = wq
    w = b.graph.create_tensor(wd)
    h = b.tensor("h", (2, 3))
    b.node("FullyConnected", "fc", [x, w], [h])
    yd = desc("y", (2, 3), Q.QNN_DATATYPE_UFIXED_POINT_16, APP_READ)
    yd.quant = RawQuant(Q.QNN_DEFINITION_DEFINED, Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET,
                        scale=0.001, offset=-30000, bitwidth=16)
    y = b.graph.create_tensor(yd)
    b.node("Relu", "relu", [h], [y])
    b.graph.finalize()
    blob = binary.serialize(ctx)
    loaded = load(blob)
    try:
        feeds = {"x": RNG.standard_normal((2, 8)).astype(np.float32)}
        assert_same_outputs(run(b.graph, feeds), run(loaded_graph(loaded, "bw"), feeds),
                            "blockwise-expansion weights, BW_SCALE_OFFSET output")
        g1 = loaded_graph(loaded, "bw")
        q = g1.tensors[g1.by_name["w"]].quant
        assert q.block_scales.dtype == np.uint8 and q.block_scales.tolist() == [[1, 2], [3, 4], [5, 6]], \
            "block scales kept"
        assert g1.tensors[g1.by_name["y"]].quant.bitwidth == 16, "bitwidth kept"
    finally:
        loaded.free()
        ctx.free()


def test_fp16_precision_config_survives_and_float16_math_follows_the_device():
    """The PRECISION config is stored as given; the math is the prepared device's: a graph made
    on SM8550 (float16 math) computes the same float16 results after loading -- also on a
    default (v68) backend -- and differs from the float32 of a v68 context."""
    ctx = new_context(model=model_from_configs(Q.QNN_SOC_MODEL_SM8550, None, None))
    fp16 = {"option": Q.QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION, "precision": Q.QNN_PRECISION_FLOAT16,
            # what the ABI copies besides the meaningful member: the rest of the C union
            "vtcmSizeInMB": 1, "numHvxThreads": 12345, "reserved": 0x7F00DEAD}
    b = GraphBuilder(ctx, "half", {"htp": {"QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION": fp16}})
    x = b.tensor("x", (1, 5), type_=APP_WRITE)
    w = b.tensor("w", (1, 5), type_=STATIC, data=np.full((1, 5), 1 / 3, np.float32))
    y = b.tensor("y", (1, 5), type_=APP_READ)
    b.node("ElementWiseMultiply", "mul", [x, w], [y])
    b.graph.finalize()
    blob = binary.serialize(ctx)
    loaded = load(blob)
    try:
        g1 = loaded_graph(loaded, "half")
        assert g1.configs == {"htp": {"QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION": {
            "option": Q.QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION, "precision": Q.QNN_PRECISION_FLOAT16}}}, \
            "only the union member of the option is stored"
        assert g1.precision_fp16(), "the precision config is kept after loading"
        assert g1.plan.fp16, "the loaded graph computes in float16 math: it was prepared for SM8550"
        feeds = {"x": np.array([[0.1, 1.7, -3.3, 1e-3, 12345.678]], np.float32)}
        half = run(b.graph, feeds)
        assert_same_outputs(half, run(g1, feeds), "float16 math graph")
        assert not np.array_equal(half["y"], feeds["x"] * np.float32(1 / 3)), "float16 math differs from float32"
    finally:
        loaded.free()
        ctx.free()


def test_context_tensors_and_several_graphs():
    ctx = new_context()
    shared = ctx.create_tensor(desc("shared_w", (2, 3), type_=STATIC, data=np.arange(6, dtype=np.float32)))
    graphs = []
    for name, op in (("add", "ElementWiseAdd"), ("mul", "ElementWiseMultiply")):
        b = GraphBuilder(ctx, name)
        x = b.tensor("x_" + name, (2, 3), type_=APP_WRITE)
        y = b.tensor("y_" + name, (2, 3), type_=APP_READ)
        b.node(op, op, [x, shared], [y])
        b.graph.finalize()
        graphs.append(b)
    blob = binary.serialize(ctx)
    info = binary.inspect(blob)
    assert info.graph_names == ["add", "mul"], "graphs in creation order"
    assert [t.name for t in info.context_tensors] == ["shared_w"], "context tensors stored once"
    loaded = load(blob)
    try:
        assert loaded.find_tensor_by_name("shared_w").id == shared.id, "context tensor keeps its id"
        for b in graphs:
            name = b.graph.name
            feeds = {"x_" + name: RNG.standard_normal((2, 3)).astype(np.float32)}
            assert_same_outputs(run(b.graph, feeds), run(loaded_graph(loaded, name), feeds), name)
        new = loaded.create_tensor(desc("later", (1,), type_=APP_WRITE))
        assert new.id > max(t.id for t in ctx.tensors.values()), "new tensors get fresh ids"
    finally:
        loaded.free()
        ctx.free()


def test_raw_params_recorded_by_the_graph_are_used(float_ctx, float_blob):
    """If Graph.add_node keeps the Params it received (node.raw_params), they are stored as given."""
    from qnnemu.ops.base import Param
    g = float_ctx.graphs["float_net"]
    conv = next(n for n in g.nodes if n.name == "conv")
    conv.raw_params = {"stride": Param("stride", "tensor", U32, np.array([2, 2], np.uint32)),
                       "pad_amount": Param("pad_amount", "tensor", U32, np.array([[1, 1], [1, 1]], np.uint32)),
                       "group": Param("group", "scalar", Q.QNN_DATATYPE_UINT_8, 1)}
    try:
        blob = binary.serialize(float_ctx)
    finally:
        del conv.raw_params
    info = binary.inspect(blob)
    params = {p.name: p for p in info.graph("float_net").nodes[0].params}
    assert params["group"].dtype == Q.QNN_DATATYPE_UINT_8, "scalar params keep their QNN data type"
    loaded = load(blob)
    try:
        feeds = float_feeds()
        assert_same_outputs(run(g, feeds), run(loaded_graph(loaded, "float_net"), feeds), "raw params")
    finally:
        loaded.free()


# ------------------------------------------------------------------------------ layout, determinism
def test_header_layout_and_alignment(float_blob):
    h = header_fields(float_blob)
    assert h["magic"] == b"QNNEMUCB" and h["version"] == binary.FORMAT_VERSION, "magic and version"
    assert h["header_size"] == 160 and h["total_size"] == len(float_blob), "sizes"
    assert h["payload_crc"] == zlib.crc32(float_blob[160:]), "CRC32 of everything after the header"
    assert h["meta_off"] == 160 and h["meta_crc"] == zlib.crc32(float_blob[160:160 + h["meta_size"]]), \
        "metadata right after the header, with its own CRC32"
    assert h["reserved"] == bytes(28), "reserved bytes are zero"
    assert h["header_crc"] == zlib.crc32(float_blob[:156]), "header CRC32"
    assert (h["soc"], h["arch"]) == (Q.QNN_SOC_MODEL_SM8350, 68), "default device: SM8350 / v68"
    assert h["build"].rstrip(b"\0").decode() == BUILD_ID, "build id"
    assert h["data_off"] % 64 == 0, "data section 64-byte aligned"
    info = binary.inspect(float_blob)
    for b in info.blobs:
        assert (h["data_off"] + b.offset) % 64 == 0, "every blob 64-byte aligned in the file"
        start = h["data_off"] + b.offset
        assert zlib.crc32(float_blob[start:start + b.size]) == b.crc32, "per-blob CRC32"
    g = info.graph("float_net")
    assert [t.name for t in g.inputs] == ["x"] and [t.name for t in g.outputs] == ["y"], "graph I/O"
    assert g.outputs[0].dims == (1, 10) and g.outputs[0].dtype == F32, "output description"
    # statics: conv_w, conv_b, fc_w, fc_b (tensor params live in the metadata, not the data section)
    assert g.static_bytes == 4 * (3 * 3 * 3 * 4 + 4 + 640 + 10), "static bytes"
    meta = json.loads(float_blob[h["meta_off"]:h["meta_off"] + h["meta_size"]])
    assert meta["format"] == "qnnemu.context-binary", "self-describing metadata"


def test_serialize_is_deterministic():
    blobs = []
    for _ in range(2):
        ctx = new_context()
        float_graph(ctx)
        quant_graph(ctx)
        blobs.append(binary.serialize(ctx))
        blobs.append(binary.serialize(ctx))
        ctx.free()
    assert blobs[0] == blobs[1], "serializing twice gives the same bytes"
    assert blobs[0] == blobs[2], "two identical contexts give the same bytes"


def test_serialize_is_deterministic_across_processes(small_blob):
    """No process state (hash seeds, handle values, addresses) reaches the bytes."""
    script = ("import sys, hashlib; sys.path.insert(0, sys.argv[1]); from helpers import binary_builders as T; "
              "from qnnemu.core import binary; c = T.new_context(); T.float_graph(c); T.quant_graph(c); "
              "print(hashlib.sha256(binary.serialize(c)).hexdigest())")
    tests_dir = str(Path(__file__).parent)
    env = dict(os.environ, PYTHONHASHSEED="12345",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script, tests_dir], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == hashlib.sha256(small_blob).hexdigest(), "same bytes in another process"


def test_unfinalized_graph_cannot_be_serialized():
    ctx = new_context()
    b = GraphBuilder(ctx, "open")
    x = b.tensor("x", (1,), type_=APP_WRITE)
    y = b.tensor("y", (1,), type_=APP_READ)
    b.node("Relu", "r", [x], [y])
    with pytest.raises(QnnError) as e:
        binary.serialize(ctx)
    assert e.value.code == Q.QNN_CONTEXT_ERROR_NOT_FINALIZED and \
        e.value.rule == "QNNEMU-binary-graph-not-finalized", \
        "contextGetBinary needs finalized graphs (QnnContext.h: NOT_FINALIZED for non-finalized entities)"
    with pytest.raises(QnnError) as e:
        binary.serialize(ctx, func="contextGetBinarySize")
    assert e.value.code == Q.QNN_CONTEXT_ERROR_NOT_FINALIZED and "contextGetBinarySize" in str(e.value), \
        "contextGetBinarySize: the same code, its own function name"
    ctx.free()


def test_unserializable_parameter_is_reported():
    ctx = new_context()
    b = GraphBuilder(ctx, "g")
    x = b.tensor("x", (1, 4), type_=APP_WRITE)
    y = b.tensor("y", (1, 4), type_=APP_READ)
    node = b.node("Softmax", "sm", [x], [y])
    b.graph.finalize()
    node.params["beta"] = object()
    with pytest.raises(QnnError) as e:
        binary.serialize(ctx)
    assert e.value.rule == "QNNEMU-binary-unserializable" and \
        e.value.code == Q.QNN_CONTEXT_ERROR_GET_BINARY_FAILED, "a value the format cannot hold"
    ctx.free()


def test_empty_context_round_trips():
    ctx = new_context()
    blob = binary.serialize(ctx)
    info = binary.inspect(blob)
    assert info.graphs == [] and info.blobs == [], "no graphs, no data"
    load(blob).free()
    ctx.free()


# ------------------------------------------------------------------------------ weight sharing
def _two_graphs_same_weights(sharing: bool) -> bytes:
    configs = {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED": {
        "option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, "weightSharingEnabled": True,
        "groupRegistration": {"firstGroupHandle": 0x1234, "maxSpillFillBuffer": 99}}}} if sharing else None
    ctx = new_context(configs)
    w = np.random.default_rng(7).standard_normal((3, 3, 3, 4)).astype(np.float32)
    float_graph(ctx, "first", seed=3, w_conv=w)
    float_graph(ctx, "second", seed=4, w_conv=w)   # same conv weights, other biases / FC weights
    blob = binary.serialize(ctx)
    ctx.free()
    return blob


def test_weight_sharing_stores_shared_weights_once():
    plain, shared = _two_graphs_same_weights(False), _two_graphs_same_weights(True)
    info_p, info_s = binary.inspect(plain), binary.inspect(shared)
    assert not info_p.header.weight_sharing and info_s.header.weight_sharing, "header flag"
    assert len(info_p.blobs) == 8 and len(info_s.blobs) == 7, "the common conv weight is stored once"
    stored = lambda info: sum(max(b.size, b.reserved) for b in info.blobs)  # noqa: E731
    assert stored(info_s) < stored(info_p), "fewer weight bytes (the binary itself has one more 4 KiB-aligned " \
        "data section for the shared weights: docs/context-binary.md 'Data sections')"
    assert [s.name for s in info_s.sections] == ["shared", "weights"] and \
        [s.name for s in info_p.sections] == ["weights"], "shared weights in their own data section"
    gi = {g.name: g for g in info_s.graphs}
    w1 = next(t for t in gi["first"].tensors if t.name == "conv_w")
    w2 = next(t for t in gi["second"].tensors if t.name == "conv_w")
    assert w1.blob == w2.blob, "both graphs point at one blob"
    assert info_s.context_configs == {"htp": {"QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED": {
        "option": Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED, "weightSharingEnabled": True}}}, \
        "the option is stored, the other union members are not"
    loaded = load(shared)
    try:
        g1, g2 = loaded_graph(loaded, "first"), loaded_graph(loaded, "second")
        a, b = g1.tensors[g1.by_name["conv_w"]].data, g2.tensors[g2.by_name["conv_w"]].data
        assert np.shares_memory(a, b), "shared weights share memory after loading"
        assert binary.weight_sharing_enabled(loaded.configs), "loaded context keeps weight sharing on"
        assert binary.serialize(loaded) == shared, "re-serializing a loaded shared context is stable"
    finally:
        loaded.free()


def test_identical_blobs_within_a_graph_are_stored_once():
    ctx = new_context()
    b = GraphBuilder(ctx, "g")
    x = b.tensor("x", (2, 2), type_=APP_WRITE)
    one = np.ones((2, 2), np.float32)
    w1 = b.tensor("w1", (2, 2), type_=STATIC, data=one)
    w2 = b.tensor("w2", (2, 2), type_=STATIC, data=one)
    h = b.tensor("h", (2, 2))
    y = b.tensor("y", (2, 2), type_=APP_READ)
    b.node("ElementWiseAdd", "a1", [x, w1], [h])
    b.node("ElementWiseAdd", "a2", [h, w2], [y])
    b.graph.finalize()
    info = binary.inspect(binary.serialize(ctx))
    assert len(info.blobs) == 1, "two identical weights of one graph: one blob"
    ctx.free()


# ------------------------------------------------------------------------------ compatibility
def test_other_soc_strict_is_suboptimal_permissive_loads(float_blob):
    v75 = model_from_configs(Q.QNN_SOC_MODEL_SM8650, None, None)
    device = Device(v75, NULL_LOGGER)
    with pytest.raises(QnnError) as e:
        load(float_blob, device=device, compatibility="strict")
    assert e.value.code == Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL and \
        e.value.rule == "QNNEMU-binary-suboptimal-device", "STRICT: another SoC/arch is suboptimal"
    assert "SM8350" in str(e.value) and "SM8650" in str(e.value), "names both SoCs (the blob's: the default SM8350)"
    with pytest.raises(QnnError):
        binary.validate(float_blob, device, Q.QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT)
    ctx = load(float_blob, device=device, compatibility=Q.QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE)
    feeds = float_feeds()
    assert run(loaded_graph(ctx, "float_net"), feeds)["y"].shape == (1, 10), "PERMISSIVE loads it"
    ctx.free()
    same = Device(model_from_configs(Q.QNN_SOC_MODEL_SM8350, None, None), NULL_LOGGER)
    load(float_blob, device=same, compatibility="strict").free()


def test_older_format_version_strict_is_suboptimal(float_blob, monkeypatch):
    monkeypatch.setattr(binary.format, "FORMAT_VERSION", binary.FORMAT_VERSION + 1)
    with pytest.raises(QnnError) as e:
        load(float_blob, compatibility="strict")
    assert e.value.code == Q.QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL and \
        e.value.rule == "QNNEMU-binary-suboptimal-version", "STRICT: an older format is suboptimal"
    load(float_blob, compatibility="permissive").free()


def test_bad_compatibility_value(float_blob):
    with pytest.raises(QnnError) as e:
        load(float_blob, compatibility=7)
    assert e.value.code == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG and e.value.rule == "QNNEMU-binary-compatibility"


def test_other_core_api_major_is_a_version_error(float_blob):
    blob = patch_header(float_blob, "<H", 32, 3)
    with pytest.raises(QnnError) as e:
        load(blob)
    assert e.value.code == Q.QNN_CONTEXT_ERROR_BINARY_VERSION and e.value.rule == "QNNEMU-binary-api-version"


# ------------------------------------------------------------------------------ cancellation
def test_abort_between_graphs_leaves_nothing_behind(small_blob):
    calls = []
    live_before = len(HANDLES.live())

    def check_abort():
        calls.append(1)
        return len(calls) >= 4

    with pytest.raises(QnnError) as e:
        load(small_blob, check_abort=check_abort)
    assert e.value.code == Q.QNN_CONTEXT_ERROR_ABORTED and e.value.rule == "QNNEMU-binary-aborted"
    assert len(HANDLES.live()) == live_before, "graphs built before the abort are released"


def test_abort_raising_its_own_error_propagates(small_blob):
    def timed_out():
        raise QnnError(Q.QNN_CONTEXT_ERROR_TIMED_OUT, "contextCreateFromBinaryWithSignal: timed out",
                       rule="QNNEMU-signal-timeout")
    with pytest.raises(QnnError) as e:
        load(small_blob, check_abort=timed_out)
    assert e.value.code == Q.QNN_CONTEXT_ERROR_TIMED_OUT, "the signal's own code"


def test_on_graph_notifications(small_blob):
    seen = []
    ctx = load(small_blob, on_graph=lambda name, handle: seen.append((name, handle)))
    assert [n for n, _ in seen] == ["float_net", "quant_net"], "one notification per graph, in order"
    assert all(ctx.graphs[n].handle == h for n, h in seen), "with the graph handles"
    ctx.free()


def test_enable_graphs_builds_only_the_listed_graphs(small_blob):
    ctx = load(small_blob, enable_graphs=["quant_net"])
    assert list(ctx.graphs) == ["quant_net"], "QNN_CONTEXT_CONFIG_ENABLE_GRAPHS: only the listed graph"
    feeds = quant_feeds()
    assert run(loaded_graph(ctx, "quant_net"), feeds)["qy"].shape == (1, 6, 6, 3)
    ctx.free()
    with pytest.raises(QnnError) as e:
        load(small_blob, enable_graphs=["quant_net", "nope"])
    assert e.value.code == Q.QNN_CONTEXT_ERROR_INVALID_CONFIG and e.value.rule == "QNNEMU-binary-enable-graphs"
    assert "nope" in str(e.value)


# ------------------------------------------------------------------------------ negative: one per rule
def _expect(blob, rule: str, code: int, **kw):
    with pytest.raises(QnnError) as e:
        load(blob, **kw)
    assert e.value.rule == rule, f"rule {rule}: got {e.value}"
    assert e.value.code == code, f"{rule}: code {code}, got {e.value.code}"
    assert str(e.value).startswith(f"[{rule}] contextCreateFromBinary: "), "message names rule and function"
    return e.value


def test_rule_null():
    for blob in (None, b"", 3.5):
        _expect(blob, "QNNEMU-binary-null", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT)


def test_rule_magic_foreign(float_blob):
    e = _expect(b"\x00\x00\x00\x02\x00\x00\x00\x03" + bytes(200), "QNNEMU-binary-magic",
                Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert "libQnnHtp.so" in str(e) and "00 00 00 02" in str(e), "says what it is and what was found"
    _expect(b"PK\x03\x04", "QNNEMU-binary-magic", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


@pytest.fixture(scope="module")
def vendor_binary(tmp_path_factory):
    """A real context binary of the vendor's libQnnHtp.so (through ONNX Runtime's EPContext dump)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from vendor import vendor_context_binary
    blob, why = vendor_context_binary(tmp_path_factory.mktemp("vendor_ctx"))
    if blob is None:
        pytest.skip(why)
    return blob


def test_rule_magic_real_vendor_binary(vendor_binary):
    e = _expect(vendor_binary, "QNNEMU-binary-magic", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert "vendor" in str(e), "a vendor HTP binary is recognised as foreign"
    with pytest.raises(QnnError) as e2:
        binary.inspect(vendor_binary)
    assert e2.value.rule == "QNNEMU-binary-magic", "inspect (validateBinary / System getBinaryInfo) too"


def test_rule_truncated(float_blob):
    _expect(float_blob[:5], "QNNEMU-binary-truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    _expect(float_blob[:100], "QNNEMU-binary-truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    e = _expect(float_blob[:-1], "QNNEMU-binary-truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert str(len(float_blob)) in str(e), "says how long it should be"


def test_trailing_bytes_are_ignored(float_blob):
    load(float_blob + bytes(100)).free()


def test_rule_version_future(float_blob):
    blob = patch_header(float_blob, "<I", 8, binary.FORMAT_VERSION + 1)
    _expect(blob, "QNNEMU-binary-version-future", Q.QNN_CONTEXT_ERROR_BINARY_VERSION)
    # a future version is reported even when the rest of the header is unreadable to us
    _expect(patch_header(float_blob, "<I", 8, 999, reseal=False)[:20], "QNNEMU-binary-version-future",
            Q.QNN_CONTEXT_ERROR_BINARY_VERSION)


def test_rule_version_old(float_blob):
    _expect(patch_header(float_blob, "<I", 8, 0), "QNNEMU-binary-version-old", Q.QNN_CONTEXT_ERROR_BINARY_VERSION)


def test_rule_header_crc(float_blob):
    blob = patch_header(float_blob, "<I", 44, Q.QNN_SOC_MODEL_SM8650, reseal=False)
    _expect(blob, "QNNEMU-binary-header-crc", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def test_rule_header(float_blob):
    cases = [("<I", 12, 64), ("<I", 24, 0x80), ("<Q", 72, 130), ("<Q", 56, 10_000_000), ("<Q", 16, 64),
             ("<I", 140, 1)]
    for fmt, off, value in cases:
        _expect(patch_header(float_blob, fmt, off, value), "QNNEMU-binary-header",
                Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def test_rule_crc(float_blob):
    blob = bytearray(float_blob)
    blob[-1] ^= 0x01  # one bit of a weight
    e = _expect(bytes(blob), "QNNEMU-binary-crc", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert "corrupted" in str(e)
    wrong_meta_crc = patch_header(float_blob, "<I", 124, 0, reseal=False)
    wrong_meta_crc = patch_header(wrong_meta_crc, "<I", 156, zlib.crc32(wrong_meta_crc[:156]), reseal=False)
    e = _expect(wrong_meta_crc, "QNNEMU-binary-crc", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert "metadata CRC32" in str(e)


def test_rule_metadata(float_blob):
    h, meta, data = split(float_blob)
    bad_json = bytearray(float_blob)
    bad_json[h.metadata_offset] = ord("[")
    _expect(binary.reseal(bytes(bad_json)), "QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)

    def tensor(meta, name):
        return next(t for t in meta["graphs"][0]["tensors"] if t["name"] == name)

    edits = {
        "unknown dtype": lambda m: tensor(m, "x").update(dtype=0x7777),
        "dims/data size mismatch": lambda m: tensor(m, "fc_b").update(dims=[11]),
        "blob out of range": lambda m: m["blobs"][0].update(offset=64 * 10_000),
        "blob not aligned": lambda m: m["blobs"][1].update(offset=m["blobs"][1]["offset"] + 4),
        "blob index": lambda m: tensor(m, "fc_b").update(blob=99),
        "duplicate id": lambda m: tensor(m, "y").update(id=tensor(m, "x")["id"]),
        "duplicate name": lambda m: tensor(m, "y").update(name="x"),
        "unknown tensor in node": lambda m: m["graphs"][0]["nodes"][0]["inputs"].__setitem__(0, 4242),
        "static without blob": lambda m: tensor(m, "fc_b").update(blob=None),
        "bad quant": lambda m: tensor(m, "x").update(quant={"encoding": 12345, "scale": 1.0, "offset": 0}),
        "negative dim": lambda m: tensor(m, "x").update(dims=[1, -8, 8, 3]),
        "huge dims": lambda m: tensor(m, "y").update(dims=[1 << 31, 1 << 31]),
        "bool as int": lambda m: tensor(m, "x").update(id=True),
        "graph count": lambda m: m["graphs"].append(m["graphs"][0]),
        "inputs list": lambda m: m["graphs"][0].update(inputs=[]),
        "wrong format": lambda m: m.update(format="onnx"),
        "param kind": lambda m: m["graphs"][0]["nodes"][0]["params"][0].update(kind="vector"),
        "param array dtype": lambda m: m["graphs"][0]["nodes"][0]["params"][0].update(
            value={"$nd": ["|O", [2], "AAAA"]}),
        "param array size": lambda m: m["graphs"][0]["nodes"][0]["params"][0].update(
            value={"$nd": ["<u4", [1000000], "AAAA"]}),
    }
    for what, edit in edits.items():
        try:
            e = _expect(with_meta(float_blob, edit), "QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
        except BaseException as exc:
            raise AssertionError(f"metadata edit '{what}': {exc}") from None
        assert "metadata" in str(e), what


def test_rule_graph(float_blob):
    def wrong_shape(m):  # a consistent binary whose graph graphAddNode rejects
        t = next(t for t in m["graphs"][0]["tensors"] if t["name"] == "y")
        t["dims"] = [1, 11]
    e = _expect(with_meta(float_blob, wrong_shape), "QNNEMU-binary-graph", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)
    assert "node 'fc'" in str(e) and "QNNEMU-op-output-shape" in str(e), "names the node and the op rule"

    def unknown_op(m):
        m["graphs"][0]["nodes"][1]["type"] = "NoSuchOp"
    _expect(with_meta(float_blob, unknown_op), "QNNEMU-binary-graph", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def test_rule_internal(float_blob, monkeypatch):
    def boom(*a, **k):
        raise ZeroDivisionError("simulated")
    monkeypatch.setattr(binary.loader, "_build_graph", boom)
    _expect(float_blob, "QNNEMU-binary-internal", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def test_rule_mem_alloc(float_blob, monkeypatch):
    def oom(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(binary.loader, "_build_graph", oom)
    _expect(float_blob, "QNNEMU-binary-mem-alloc", Q.QNN_CONTEXT_ERROR_MEM_ALLOC)


def test_inspect_does_not_build(float_blob):
    live = len(HANDLES.live())
    info = binary.inspect(float_blob)
    assert len(HANDLES.live()) == live, "inspect creates no handles"
    assert info.header.total_size == len(float_blob) and info.header.graph_count == 1
    node = info.graph("float_net").nodes[0]
    assert node.type_name == "Conv2d" and node.package == "qti.aisw", "node descriptions"


# ------------------------------------------------------------------------------ through the C ABI
def test_context_built_through_the_abi(tmp_path):
    """Configs and quantization as the ABI marshals them (whole C unions, float32 arrays)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from vendor import our_library
    if our_library() is None:
        pytest.skip("libQnnHtpEmu.so is not built")
    from qnnemu.client import Backend as ClientBackend, ffi
    blobs, outs = [], []
    feeds = {"x": RNG.integers(0, 256, (1, 4, 4, 2), dtype=np.uint8)}
    w_data = RNG.integers(-100, 100, (1, 1, 2, 3)).astype(np.int8)
    for _ in range(2):
        with ClientBackend(log_level="error") as be:
            c = be.context()
            g = c.graph("abi_net", precision="fp16")
            x = g.input("x", (1, 4, 4, 2), U8, quant=(0.1, -120))
            w = g.static("w", w_data, dtype=S8, quant={"axis": 3, "scales": [0.01, 0.02, 0.03]})
            h = g.node("Conv2d", [x, w], [("h", (1, 4, 4, 3), U8, (0.05, -128))],
                       params={"stride": np.array([1, 1], np.uint32)})
            g.node("Softmax", [h], [("y", (1, 4, 4, 3), np.float32)], params={"beta": 1.5}, app_read=True)
            g.finalize()
            outs.append(g.execute(feeds))
            core_ctx = HANDLES.lookup(int(ffi.cast("uintptr_t", c.handle)))
            blobs.append(binary.serialize(core_ctx))
            device = core_ctx.device
    assert blobs[0] == blobs[1], "contexts built twice through the ABI give the same bytes"
    loaded = binary.deserialize(blobs[0], Backend(), device, compatibility="strict")
    try:
        got = run(loaded_graph(loaded, "abi_net"), feeds)
        assert got["y"].tobytes() == outs[0]["y"].tobytes(), "same outputs as the original through the ABI"
    finally:
        loaded.free()


# ------------------------------------------------------------------------------ fuzz
def _outcome(blob: bytes, record: bool = True) -> str:
    """Loads ``blob``: a Context or a QnnError with a context error code and a binary rule id."""
    try:
        ctx = binary.deserialize(blob, Backend(), None)
    except QnnError as e:
        assert e.code in CONTEXT_CODES, f"{e.code} is a QnnContext_Error_t code ({e})"
        assert e.rule and e.rule.startswith("QNNEMU-binary-"), f"rule id: {e}"
        assert e.rule != "QNNEMU-binary-internal", f"an unexpected exception, not a checked rule: {e}"
        outcome = e.rule
    else:
        ctx.free()
        outcome = "loaded"
    if record:
        event(outcome)
    return outcome


# Thousands of cases per CI run, scaled from the loaded profile (ci: 100 -> 2500; dev: 25000).
FUZZ = settings(max_examples=25 * settings.default.max_examples, suppress_health_check=[HealthCheck.too_slow])


_mutation = st.tuples(st.integers(0, 2**31), st.integers(0, 255))


@FUZZ
@given(st.lists(_mutation, min_size=1, max_size=4), st.booleans(), st.integers(0, 2**31))
def test_fuzz_byte_mutations_and_truncations(mutations, fix_crcs, cut):
    """Random byte changes and truncations; with ``fix_crcs`` the CRCs are recomputed so the
    mutations reach the header fields and the metadata parser."""
    blob = bytearray(two_graph_blob())
    for pos, value in mutations:
        blob[pos % len(blob)] = value
    if cut % 3 == 0:
        blob = blob[:cut % len(blob)]
    blob = bytes(blob)
    if fix_crcs:
        blob = binary.reseal(blob)
    _outcome(blob)


@FUZZ
@given(st.data())
def test_fuzz_metadata_mutations(data):
    """Byte changes inside the metadata JSON only, CRCs fixed: the schema checks and the graph
    rebuild must turn every outcome into a load or a context error."""
    small_blob = two_graph_blob()
    h = binary.parse_header(small_blob)
    blob = bytearray(small_blob)
    n = data.draw(st.integers(1, 3))
    for _ in range(n):
        pos = h.metadata_offset + data.draw(st.integers(0, h.metadata_size - 1))
        blob[pos] = data.draw(st.sampled_from(b'0123456789-.,:[]{}"e9x \x00\xff'))
    _outcome(binary.reseal(bytes(blob)))


def test_fuzz_every_truncation_length(small_blob):
    step = max(1, len(small_blob) // 400)
    t0 = time.perf_counter()
    for n in range(0, len(small_blob), step):
        _outcome(small_blob[:n], record=False)
        _outcome(binary.reseal(small_blob[:n]), record=False)
    assert time.perf_counter() - t0 < 30, "truncations are rejected quickly"


def _leaves(node, path=()):
    """Paths to the values of the metadata tree: scalars and lists of scalars (dimensions...)."""
    if not isinstance(node, (dict, list)) or (
            isinstance(node, list) and not any(isinstance(v, (dict, list)) for v in node)):
        yield path
    if isinstance(node, dict):
        for k in sorted(node):
            yield from _leaves(node[k], path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))


_json_values = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**64), st.sampled_from([0, 1, 2, 3, 64, 2**31, 2**32 - 1]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8), st.lists(st.integers(-3, 70), max_size=5),
    st.dictionaries(st.sampled_from(["$nd", "$np", "$f", "axis", "scale"]), st.integers(0, 3), max_size=2))


def _similar(old):
    """Mostly a value of the same kind close to ``old`` (so mutations get past the schema and
    reach graphAddNode), sometimes any JSON value."""
    if isinstance(old, bool) or old is None:
        near = st.sampled_from([True, False, None, 0, 1])
    elif isinstance(old, int):
        near = st.integers(old - 3, old + 3) | st.sampled_from([0, 1, -1, 2 * old + 1])
    elif isinstance(old, float):
        near = st.sampled_from([0.0, -old, old / 2, 1e-30, 1e30])
    elif isinstance(old, str):
        near = st.sampled_from(["", "x", "y", "conv", "Relu", "qti.aisw", old + "_", "$nd", "<f4", "|u1"])
    elif isinstance(old, list):
        near = st.sampled_from([[], old[:-1], old + old[-1:], old[::-1]]) if old else st.just([0])
    else:
        near = st.just({})
    return st.one_of(near, near, near, _json_values)


@FUZZ
@given(st.data())
def test_fuzz_structured_metadata_mutations(data):
    """Values of the metadata replaced by other JSON values (consistent CRCs and sizes): the
    schema checks and the graph rebuild (graphAddNode's rules, finalize) see them all."""
    h, meta, blob_data = split(two_graph_blob())
    paths = [p for p in _leaves(meta) if p]
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from(paths))
        parent = meta
        try:
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = data.draw(_similar(parent[path[-1]]))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced an enclosing container
    graph_count = data.draw(st.sampled_from([h.graph_count] * 6 + [0, 3]))
    header = binary.Header(**{**h.__dict__, "graph_count": graph_count})
    _outcome(binary.assemble(header, meta, blob_data))


# ------------------------------------------------------------------------------ spill-fill, external data, deferred
def test_spill_fill_bytes_round_trip(small_blob):
    ctx = load(small_blob)
    assert [g.spill_fill_bytes for g in binary.inspect(small_blob).graphs] == [0, 0], \
        "graphs without a planned spill-fill buffer store 0"
    ctx.graphs["quant_net"].spill_fill_bytes = 123456
    blob = binary.serialize(ctx)
    ctx.free()
    info = binary.inspect(blob)
    assert info.graph("quant_net").spill_fill_bytes == 123456 and info.graph("float_net").spill_fill_bytes == 0, \
        "GraphInfo.spill_fill_bytes comes from the graph's attribute"
    loaded = load(blob)
    assert loaded_graph(loaded, "quant_net").spill_fill_bytes == 123456, "a loaded graph keeps its spill-fill size"
    assert binary.serialize(loaded) == blob, "and serializes it again"
    loaded.free()

    def drop_key(m):
        for g in m["graphs"]:
            del g["spill_fill_bytes"]
    assert [g.spill_fill_bytes for g in binary.inspect(with_meta(blob, drop_key)).graphs] == [0, 0], \
        "the key is optional (default 0)"

    def negative(m):
        m["graphs"][0]["spill_fill_bytes"] = -1
    _expect(with_meta(blob, negative), "QNNEMU-binary-metadata", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY)


def test_external_data_source(small_blob):
    h = binary.parse_header(small_blob)
    calls = []

    def provider(offset, size):
        calls.append((offset, size))
        return bytearray(small_blob[offset:offset + size])
    ctx = load(small_blob[:h.data_offset], data_source=provider)
    assert calls == [(h.data_offset, h.data_size)], "one request: the data section's offset and size"
    feeds = float_feeds()
    want = run(loaded_graph(load(small_blob), "float_net"), feeds)
    assert_same_outputs(run(loaded_graph(ctx, "float_net"), feeds), want, "weights from the data source")
    ctx.free()
    _expect(small_blob[:h.data_offset], "QNNEMU-binary-truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
            data_source=lambda o, s: b"\0" * (s - 1))
    _expect(small_blob[:h.metadata_offset + 10], "QNNEMU-binary-truncated", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
            data_source=provider)
    _expect(small_blob[:h.data_offset], "QNNEMU-binary-crc", Q.QNN_CONTEXT_ERROR_CREATE_FROM_BINARY,
            data_source=lambda o, s: b"\x01" * s)


def test_deferred_graphs_are_built_on_retrieval(small_blob):
    live = len(HANDLES.live())
    ctx = load(small_blob, defer_graphs=True)
    assert ctx.graphs == {}, "nothing built at load time"
    g = loaded_graph(ctx, "quant_net")
    assert list(ctx.graphs) == ["quant_net"] and g.finalized, "built and finalized at first retrieval"
    assert binary.serialize(ctx) == small_blob, "serializing builds the rest: the same bytes"
    assert ctx.deferred is None, "nothing deferred any more"
    ctx.free()
    assert len(HANDLES.live()) == live, "freeing releases every built graph"
