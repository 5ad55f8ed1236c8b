"""qnnemu.client context binaries and qnnemu.system_client, on our backend and the vendor's.

Round trip through the Python client (QnnContext_getBinarySize / getBinary, contextFree,
contextCreateFromBinary, graphRetrieve with the tensors the System library lists, graphExecute)
on libQnnHtpEmu.so + our libQnnSystem.so and on the vendor's libQnnHtp.so + libQnnSystem.so:
the reloaded graphs give outputs identical to the graphs that were built. The System client's
decoding of BinaryInfo v1/v2/v3, graph info v1/v2/v3, Qnn_Tensor_t v1/v2 and the quantization
encodings is checked on structs built here, on our library (QNNEMU_SYSTEM_BINARY_INFO_VERSION)
and on the vendor's library with a vendor binary.
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library, vendor_library

from qnnemu import system_client
from qnnemu.client import Backend, QnnCallError, htp_context_config
from qnnemu.headers import Q
from qnnemu.system_client import SystemCallError, SystemLibrary

U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
F32 = Q.QNN_DATATYPE_FLOAT_32

BACKENDS = [
    pytest.param("ours", marks=pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")),
    pytest.param("vendor", marks=pytest.mark.skipif(vendor_library() is None,
                                                    reason="onnxruntime_qnn (vendor libQnnHtp.so) not installed")),
]


def libraries(which: str) -> tuple[str, str]:
    """(backend, System library) of one side."""
    if which == "ours":
        import qnnemu
        return qnnemu.backend_library_path(), qnnemu.system_library_path()
    return str(vendor_library("libQnnHtp.so")), str(vendor_library("libQnnSystem.so"))


def build_float_graph(ctx, rng):
    """Conv2d + Relu + Reshape + FullyConnected, float32; returns (graph, feeds)."""
    g = ctx.graph("conv_fc")
    x = g.input("x", (1, 6, 6, 3), np.float32)
    y = g.node("Conv2d", [x, g.static("w", (rng.standard_normal((3, 3, 3, 4)) * 0.3).astype(np.float32)),
                          g.static("b", (rng.standard_normal(4) * 0.1).astype(np.float32))],
               params={"stride": np.array([1, 1], np.uint32),
                       "pad_amount": np.array([[1, 1], [1, 1]], np.uint32),
                       "dilation": np.array([1, 1], np.uint32), "group": np.uint32(1)},
               outputs=[("conv", (1, 6, 6, 4), np.float32)], name="conv")
    r = g.node("Relu", [y], outputs=[("relu", (1, 6, 6, 4), np.float32)])
    f = g.node("Reshape", [r], outputs=[("flat", (1, 144), np.float32)])
    g.node("FullyConnected", [f, g.static("fw", (rng.standard_normal((5, 144)) * 0.1).astype(np.float32))],
           outputs=[("out", (1, 5), np.float32)], app_read=True, name="fc")
    return g, {"x": rng.standard_normal((1, 6, 6, 3)).astype(np.float32)}


def build_quant_graph(ctx, rng):
    """ElementWiseAdd on uint8 fixed point (distinct encodings); returns (graph, feeds)."""
    g = ctx.graph("qadd")
    a = g.input("a", (1, 16), U8, quant=(0.02, -128))
    c = g.input("c", (1, 16), U8, quant=(0.03, -100))
    g.node("ElementWiseAdd", [a, c], outputs=[("s", (1, 16), U8, (0.05, -120))], app_read=True, name="add")
    return g, {"a": rng.integers(0, 256, (1, 16), dtype=np.uint8),
               "c": rng.integers(0, 256, (1, 16), dtype=np.uint8)}


@pytest.fixture(scope="module", params=BACKENDS)
def side(request):
    backend, system = libraries(request.param)
    with Backend(backend, log_level="error") as be:
        yield request.param, be, SystemLibrary(system)


@pytest.fixture(scope="module")
def prepared(side):
    """Graphs built and executed on one side, the binary of their context, reference outputs."""
    which, be, system = side
    rng = np.random.default_rng(7)
    ctx = be.context()
    built = [build_float_graph(ctx, rng), build_quant_graph(ctx, rng)]
    refs = {}
    tensors = {}
    for g, feeds in built:
        g.finalize()
        refs[g.name] = (feeds, g.execute(feeds))
        tensors[g.name] = {t.name: (t.dtype, t.shape, t.quant) for t in g.inputs + g.outputs}
    blob = ctx.get_binary()
    ctx.free()
    return blob, refs, tensors


def test_binary_round_trip_gives_identical_outputs(side, prepared):
    which, be, system = side
    blob, refs, _ = prepared
    info = system.binary_info(blob)
    assert {g["name"] for g in info["graphs"]} == set(refs), \
        f"{which}: the System library lists the graphs that were serialized"
    ctx = be.context_from_binary(blob)
    try:
        for ginfo in info["graphs"]:
            g = ctx.retrieve_graph(ginfo["name"], ginfo["inputs"], ginfo["outputs"])
            feeds, expected = refs[g.name]
            got = g.execute(feeds)
            assert set(got) == set(expected), f"{which}: graph {g.name} outputs by name"
            for name in expected:
                assert got[name].dtype == expected[name].dtype, f"{which}: {g.name}/{name} dtype kept"
                np.testing.assert_array_equal(got[name], expected[name],
                                              err_msg=f"{which}: {g.name}/{name} after reload")
    finally:
        ctx.free()


def test_retrieved_tensors_keep_types_and_quantization(side, prepared):
    which, be, system = side
    blob, _, tensors = prepared
    info = system.binary_info(blob)
    ctx = be.context_from_binary(blob)
    try:
        for ginfo in info["graphs"]:
            g = ctx.retrieve_graph(ginfo["name"], ginfo["inputs"], ginfo["outputs"])
            for t in g.inputs + g.outputs:
                dtype, shape, quant = tensors[g.name][t.name]
                assert (t.dtype, t.shape) == (dtype, shape), f"{which}: {g.name}/{t.name} dtype and shape"
                if quant is None:
                    assert t.quant is None, f"{which}: {g.name}/{t.name} stays unquantized"
                else:
                    assert t.quant["encoding"] == quant["encoding"], f"{which}: {t.name} encoding"
                    assert t.quant["offset"] == quant["offset"], f"{which}: {t.name} offset"
                    assert t.quant["scale"] == pytest.approx(quant["scale"], rel=1e-6), f"{which}: {t.name} scale"
    finally:
        ctx.free()


def test_binary_info_schema(side, prepared):
    which, be, system = side
    blob, _, tensors = prepared
    info = system.binary_info(blob)
    assert set(info) == {"binary_info_version", "backend_id", "build_id", "core_api", "backend_api",
                         "soc_model", "htp_arch", "context_tensors", "graphs"}, f"{which}: top-level keys"
    assert info["backend_id"] == Q.QNN_BACKEND_ID_HTP, f"{which}: an HTP binary"
    assert info["binary_info_version"] in (1, 2, 3), f"{which}: a known BinaryInfo version"
    assert info["core_api"][0] == 2 and len(info["backend_api"]) == 3, f"{which}: API versions"
    assert info["build_id"], f"{which}: a build id"
    for g in info["graphs"]:
        assert set(g) == {"name", "inputs", "outputs", "spill_fill_bytes"}, f"{which}: graph keys"
        for t in g["inputs"] + g["outputs"]:
            assert set(t) == {"name", "id", "type", "dataType", "dims", "quant"}, f"{which}: tensor keys"
            dtype, shape, quant = tensors[g["name"]][t["name"]]
            assert (t["dataType"], tuple(t["dims"])) == (dtype, shape), f"{which}: {t['name']} type and dims"
        assert [t["type"] for t in g["inputs"]] == [Q.QNN_TENSOR_TYPE_APP_WRITE] * len(g["inputs"]), \
            f"{which}: graph inputs are APP_WRITE"
        assert [t["type"] for t in g["outputs"]] == [Q.QNN_TENSOR_TYPE_APP_READ] * len(g["outputs"]), \
            f"{which}: graph outputs are APP_READ"


def test_details_add_sizes(side, prepared):
    which, be, system = side
    blob, _, _ = prepared
    info = system.binary_info(blob, details=True)
    assert info["binary_size"] == len(blob), f"{which}: the binary's size"
    assert 0 < info["context_blob_size"] <= len(blob), f"{which}: context blob size within the binary"
    assert all("graph_info_version" in g for g in info["graphs"]), f"{which}: graph info versions"


def test_loading_garbage_fails_cleanly(side):
    which, be, system = side
    with pytest.raises(QnnCallError) as e:
        be.context_from_binary(b"\x00not a context binary" * 8)
    assert e.value.function == "contextCreateFromBinary", f"{which}: the failing function is named"
    with pytest.raises(SystemCallError) as e:
        system.binary_info(b"\x00not a context binary" * 8)
    assert e.value.function == "systemContextGetBinaryInfo", f"{which}: the failing System function"


def test_retrieving_an_unknown_graph_fails(side, prepared):
    which, be, system = side
    blob, _, _ = prepared
    ctx = be.context_from_binary(blob)
    try:
        with pytest.raises(QnnCallError) as e:
            ctx.retrieve_graph("no_such_graph", [], [])
        assert e.value.function == "graphRetrieve", f"{which}: graphRetrieve refuses an unknown name"
        with pytest.raises(ValueError, match="dataType"):
            ctx.retrieve_graph("qadd", [{"name": "a", "id": 1}], [])
    finally:
        ctx.free()


@pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")
def test_context_configs_reach_the_backend():
    """A weight-sharing context config passes through contextCreate and the binary round trip."""
    backend, system = libraries("ours")
    rng = np.random.default_rng(3)
    with Backend(backend, log_level="error") as be:
        ctx = be.context([htp_context_config("WEIGHT_SHARING_ENABLED", weightSharingEnabled=True)])
        g, feeds = build_float_graph(ctx, rng)
        g.finalize()
        ref = g.execute(feeds)
        blob = ctx.get_binary()
        ctx.free()
        info = SystemLibrary(system).binary_info(blob)["graphs"][0]
        g2 = be.context_from_binary(blob).retrieve_graph(info["name"], info["inputs"], info["outputs"])
        np.testing.assert_array_equal(g2.execute(feeds)["out"], ref["out"],
                                      err_msg="weight-sharing context reloads with identical outputs")


@pytest.mark.skipif(our_library() is None, reason="libQnnHtpEmu.so not built")
@pytest.mark.parametrize("version", [1, 2, 3])
def test_our_system_library_binary_info_versions(monkeypatch, version):
    """Our System library answers BinaryInfo v1/v2/v3 on request; the client reads each."""
    backend, system = libraries("ours")
    rng = np.random.default_rng(5)
    with Backend(backend, log_level="error") as be:
        ctx = be.context()
        g, _ = build_quant_graph(ctx, rng)
        g.finalize()
        blob = ctx.get_binary()
    monkeypatch.setenv("QNNEMU_SYSTEM_BINARY_INFO_VERSION", str(version))
    info = SystemLibrary(system).binary_info(blob, details=True)
    assert info["binary_info_version"] == version, "the requested BinaryInfo version is decoded"
    (graph,) = info["graphs"]
    assert [t["name"] for t in graph["inputs"]] == ["a", "c"], f"v{version}: inputs in order"
    assert graph["inputs"][1]["quant"] == {"encoding": Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET,
                                           "scale": pytest.approx(0.03), "offset": -100}, \
        f"v{version}: scale/offset of input c"
    if version == 3:
        assert isinstance(graph["spill_fill_bytes"], int), "v3 reports the spill-fill size"


# ---------------------------------------------------------------- decoding structs built here
ffi = system_client.ffi


def _tensor(keep, version, name, dims, dtype=F32, quant=None, tid=1, ttype=Q.QNN_TENSOR_TYPE_APP_WRITE):
    t = ffi.new("Qnn_Tensor_t *")
    t.version = version
    v = t.v2 if version == 2 else t.v1
    cname = ffi.new("char[]", name.encode())
    cdims = ffi.new("uint32_t[]", dims)
    keep += [cname, cdims]
    v.id, v.name, v.type, v.dataType, v.rank, v.dimensions = tid, cname, ttype, dtype, len(dims), cdims
    qp = v.quantizeParams
    qp.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
    if quant == "axis":
        qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
        qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
        arr = ffi.new("Qnn_ScaleOffset_t[]", [(0.5, -1), (0.25, 3)])
        keep.append(arr)
        qp.axisScaleOffsetEncoding.axis, qp.axisScaleOffsetEncoding.numScaleOffsets = 1, 2
        qp.axisScaleOffsetEncoding.scaleOffset = arr
    elif quant == "bw_axis":
        qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
        qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET
        scales = ffi.new("float[]", [0.5, 2.0])
        keep.append(scales)
        b = qp.bwAxisScaleOffsetEncoding
        b.bitwidth, b.axis, b.numElements, b.scales, b.offsets = 4, 0, 2, scales, ffi.NULL
    elif quant == "bw":
        qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
        qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET
        b = qp.bwScaleOffsetEncoding
        b.bitwidth, b.scale, b.offset = 4, 0.125, -8
    return t


@pytest.mark.parametrize("info_version", [1, 2, 3])
@pytest.mark.parametrize("graph_version", [1, 2, 3])
@pytest.mark.parametrize("tensor_version", [1, 2])
def test_decoder_reads_every_struct_version(info_version, graph_version, tensor_version):
    keep = []
    inputs = ffi.new("Qnn_Tensor_t[]", 2)
    inputs[0] = _tensor(keep, tensor_version, "in0", [1, 2, 3], quant="axis")[0]
    inputs[1] = _tensor(keep, tensor_version, "in1", [2, 2], dtype=Q.QNN_DATATYPE_SFIXED_POINT_8,
                        quant="bw_axis", tid=2)[0]
    outputs = ffi.new("Qnn_Tensor_t[]", 1)
    outputs[0] = _tensor(keep, tensor_version, "out", [4], dtype=Q.QNN_DATATYPE_UFIXED_POINT_8,
                         quant="bw", tid=9, ttype=Q.QNN_TENSOR_TYPE_APP_READ)[0]
    graph = ffi.new("QnnSystemContext_GraphInfo_t *")
    graph.version = graph_version
    g = getattr(graph, f"graphInfoV{graph_version}")
    gname = ffi.new("char[]", b"g")
    g.graphName, g.numGraphInputs, g.graphInputs, g.numGraphOutputs, g.graphOutputs = gname, 2, inputs, 1, outputs
    blob_info = ffi.new("QnnHtpSystemContext_GraphBlobInfo_t *")
    if graph_version == 3:
        blob_info.version = Q.QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V1
        blob_info.contextBinaryGraphBlobInfoV1.spillFillBufferSize = 12345
        g.graphBlobInfo, g.graphBlobInfoSize = blob_info, ffi.sizeof(blob_info[0])
    info = ffi.new("QnnSystemContext_BinaryInfo_t *")
    info.version = info_version
    b = getattr(info, f"contextBinaryInfoV{info_version}")
    build = ffi.new("char[]", b"v9.9.9")
    b.backendId, b.buildId, b.numGraphs, b.graphs = 6, build, 1, graph
    b.coreApiVersion.major, b.coreApiVersion.minor = 2, 40
    if info_version == 3:
        b.socModel = 43
    decoded = system_client._binary_info(info, details=True)
    assert decoded["binary_info_version"] == info_version, "BinaryInfo version"
    assert (decoded["build_id"], decoded["core_api"]) == ("v9.9.9", [2, 40, 0]), "build id, core API"
    assert decoded["soc_model"] == (43 if info_version == 3 else None), "socModel only in v3"
    (dg,) = decoded["graphs"]
    assert dg["graph_info_version"] == graph_version, "graph info version"
    assert dg["spill_fill_bytes"] == (12345 if graph_version == 3 else None), "spill-fill from v3 blob info"
    in0, in1 = dg["inputs"]
    assert (in0["name"], in0["id"], in0["dims"]) == ("in0", 1, [1, 2, 3]), "tensor name/id/dims"
    assert in0["quant"] == {"encoding": Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET, "axis": 1,
                            "scales": [0.5, 0.25], "offsets": [-1, 3]}, "axis scale/offset"
    assert in1["quant"] == {"encoding": Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET, "axis": 0,
                            "scales": [0.5, 2.0], "offsets": [0, 0], "bitwidth": 4}, \
        "bitwidth axis encoding, NULL offsets read as zeros"
    assert dg["outputs"][0]["quant"] == {"encoding": Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET,
                                         "scale": 0.125, "offset": -8, "bitwidth": 4}, "bitwidth scale/offset"
    assert dg["outputs"][0]["type"] == Q.QNN_TENSOR_TYPE_APP_READ, "tensor type"


def test_decoder_refuses_unknown_versions():
    info = ffi.new("QnnSystemContext_BinaryInfo_t *")
    info.version = 7
    with pytest.raises(SystemCallError, match="binary info version 7"):
        system_client._binary_info(info, details=False)
    t = ffi.new("Qnn_Tensor_t *")
    t.version = 3
    with pytest.raises(SystemCallError, match="tensor struct version 3"):
        system_client.tensor_dict(t[0])


def test_system_library_argument_errors(tmp_path):
    with pytest.raises(OSError, match="cannot load the System library"):
        SystemLibrary(tmp_path / "missing.so")
    if our_library() is not None:
        lib = SystemLibrary()
        with pytest.raises(ValueError, match="empty"):
            lib.binary_info(b"")
        with pytest.raises(TypeError):
            lib.binary_info("not bytes")
