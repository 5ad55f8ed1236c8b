"""graphValidate / graphFreeValidationResult (QnnGraph.h, QNN 2.50; qnnemu/core/graph_validate.py,
qnnemu/abi/validate_api.py): one result per node with the rule-id message graphAddNode /
graphFinalize would give, the overall status graphFinalize would return, the graph left as it
was; result memory owned by the backend until freed; the rules of the two entries; the vendor's
library (QNN 2.51) answers both with UNSUPPORTED_FEATURE (pinned, skipped without it).
"""
from __future__ import annotations

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from vendor import vendor_library

from qnnemu.abi import validate_api
from qnnemu.client import Backend, QnnCallError, htp_graph_config
from qnnemu.core.graph import Graph as CoreGraph
from qnnemu.core.graph_validate import validate_graph
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.ops.base import TensorSpec

F32 = np.float32
# float32, held as float16 in VTCM: 512 KiB there, all of it one depth row (the last axis is
# never tiled): an Add of two such rows and its output cannot fit 1 MiB, each Relu fits exactly.
HALF_MIB = (1, 262144)


@pytest.fixture
def be(qnn_abi):
    with Backend(None, log_level="debug") as b:
        yield b


def _core(graph) -> CoreGraph:
    return HANDLES.lookup(int(ffi.cast("uintptr_t", graph.handle)))


def _relu_graph(ctx, name="g"):
    g = ctx.graph(name)
    x = g.input("x", (1, 4), F32)
    g.node("Relu", [x], outputs=[("y", (1, 4), F32)], app_read=True, name="relu")
    return g


def _over_vtcm_graph(ctx):
    """Relu, Relu -> Add -> Relu on 512 KiB tensors with 1 MiB of VTCM: the Add's two inputs and
    its output (1.5 MiB, all in VTCM) exceed it, each Relu (one 512 KiB VTCM tensor) fits."""
    g = ctx.graph("big", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=1)])
    x = g.input("x", HALF_MIB, F32)
    a = g.node("Relu", [x], outputs=[("a", HALF_MIB, F32)], name="r0")
    b = g.node("Relu", [x], outputs=[("b", HALF_MIB, F32)], name="r1")
    c = g.node("ElementWiseAdd", [a, b], outputs=[("c", HALF_MIB, F32)], name="add")
    g.node("Relu", [c], outputs=[("y", HALF_MIB, F32)], app_read=True, name="r2")
    return g


def test_supported_graph_validates_without_finalizing(be):
    g = _relu_graph(be.context())
    core = _core(g)
    assert be._has_capability("propertyHasCapability", Q.QNN_PROPERTY_GRAPH_SUPPORT_GRAPH_VALIDATION), \
        "QNN_PROPERTY_GRAPH_SUPPORT_GRAPH_VALIDATION is reported"
    before = validate_api.live_results()
    got = g.validate()
    assert got == {"overall": Q.QNN_SUCCESS, "message": None,
                   "nodes": [{"name": "relu", "supported": True, "code": Q.QNN_SUCCESS, "message": None}]}, got
    assert validate_api.live_results() == before, "the client freed the backend's result"
    assert not core.finalized and core.plan is None and core.htp_plan is None, "validation does not finalize"
    g.finalize()
    assert g.execute({"x": np.array([[-1, 2, -3, 4]], F32)})["y"].tolist() == [[0, 2, 0, 4]], \
        "the graph finalizes and runs after validation"
    assert g.validate()["nodes"][0]["supported"], "a finalized graph validates too"


def test_graph_loaded_from_a_binary_validates(be):
    from qnnemu.system_client import SystemLibrary
    ctx = be.context()
    g = _relu_graph(ctx, "saved")
    g.finalize()
    blob = ctx.get_binary()
    info = SystemLibrary().binary_info(blob)["graphs"][0]
    loaded = be.context_from_binary(blob).retrieve_graph(info["name"], info["inputs"], info["outputs"])
    got = loaded.validate()
    assert got["overall"] == Q.QNN_SUCCESS and [n["name"] for n in got["nodes"]] == ["relu"], got
    assert loaded.execute({"x": np.array([[1, -1, 1, -1]], F32)})["y"].tolist() == [[1, 0, 1, 0]], \
        "the loaded graph still runs"


def test_per_node_verdicts_match_what_finalize_says(be):
    ctx = be.context()
    g = _over_vtcm_graph(ctx)
    got = g.validate()
    assert [(n["name"], n["supported"]) for n in got["nodes"]] == [
        ("r0", True), ("r1", True), ("add", False), ("r2", True)], got
    add = got["nodes"][2]
    assert add["code"] == Q.QNN_GRAPH_ERROR_MEM_ALLOC, f"the Add's code is graphFinalize's: {add}"
    assert add["message"].startswith("[QNNEMU-prepare-working-set] graphFinalize: graph 'big': node 'add'"), add
    assert got["overall"] == Q.QNN_GRAPH_ERROR_MEM_ALLOC, "overallStatus: the code graphFinalize returns"
    with pytest.raises(QnnCallError) as info:
        g.finalize()
    assert info.value.code == got["overall"], "graphFinalize returns the overall status"
    assert add["message"] in info.value.message, "graphFinalize gives the same rule-id message for the node"


def test_graph_level_failure_is_the_overall_status(be):
    """An APP_READ tensor no node writes: every node is fine, finalize would fail."""
    ctx = be.context()
    g = _relu_graph(ctx)
    g._tensor("orphan", (1, 4), F32, Q.QNN_TENSOR_TYPE_APP_READ)
    got = g.validate()
    assert [n["supported"] for n in got["nodes"]] == [True], got
    assert got["overall"] == Q.QNN_GRAPH_ERROR_UNCONNECTED_NODE, got
    assert "[QNNEMU-graphFinalize-output-unproduced]" in (got["message"] or ""), \
        f"errorGetMessage(overallStatus) gives graphFinalize's message: {got['message']}"


def test_empty_graph(be):
    got = be.context().graph("empty").validate()
    assert got["nodes"] == [] and got["overall"] == Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, got


def test_op_rules_are_checked_again_core():
    """A node whose recorded input no longer satisfies its op's rules (impossible through
    graphAddNode, so the record is altered here): UNSUPPORTED with the graphAddNode rule."""
    from qnnemu.core.backend import Backend as CoreBackend
    from qnnemu.core.context import Context
    from qnnemu.core.tensor import RawQuant, TensorDesc

    ctx = Context(CoreBackend(), None, None, None)
    graph: CoreGraph = HANDLES.lookup(ctx.create_graph("core"))
    undef = RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)

    def tensor(name, type_):
        return graph.create_tensor(TensorDesc(2, 0, name, type_, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
                                              Q.QNN_DATATYPE_FLOAT_32, undef, (1, 4), Q.QNN_TENSORMEMTYPE_RAW,
                                              None, 0, False))
    x, y = tensor("x", Q.QNN_TENSOR_TYPE_APP_WRITE), tensor("y", Q.QNN_TENSOR_TYPE_APP_READ)
    graph.add_node(_relu_cfg(x, y))
    assert validate_graph(graph).nodes[0].supported, "as added, the node is supported"
    spec = graph.nodes[0].input_specs[0]
    graph.nodes[0].input_specs[0] = TensorSpec((1, 5), spec.dtype, spec.quant, spec.data, spec.name)
    verdict = validate_graph(graph)
    node = verdict.nodes[0]
    assert not node.supported and node.code == Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, node
    assert node.message.startswith("[QNNEMU-op-output-shape] graphAddNode:") and "node 'relu' (Relu)" in node.message, \
        f"graphAddNode's rule and message (Relu of [1, 5] cannot write the [1, 4] output): {node.message}"
    assert verdict.overall == node.code, "finalize would succeed: the overall status is the node's code"


def _relu_cfg(x, y):
    from qnnemu.core.graph import OpConfigDesc
    from qnnemu.core.tensor import RawQuant, TensorDesc
    undef = RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)

    def desc(t):
        return TensorDesc(2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, t.dtype, undef, t.dims,
                          Q.QNN_TENSORMEMTYPE_RAW, None, 0, False)
    return OpConfigDesc(1, "relu", "qti.aisw", "Relu", [], [desc(x)], [desc(y)])


# ------------------------------------------------------------------------------ ABI rules
@pytest.fixture
def env(qnn_abi):
    rec = abi.LogRecorder()
    keep: list = []
    _, log = abi.create("logCreate", rec.callback, Q.QNN_LOG_LEVEL_DEBUG)
    _, backend = abi.create("backendCreate", vp(log), NULL)
    _, ctx = abi.create("contextCreate", vp(backend), NULL, NULL)
    _, graph = abi.create("graphCreate", vp(ctx), abi.cstr("g", keep), NULL)
    rec.clear()
    rec.graph, rec.keep = graph, keep
    yield rec
    abi.call("contextFree", vp(ctx), NULL)
    abi.call("backendFree", vp(backend))
    abi.call("logFree", vp(log))


def _validate_configs(env, option: int):
    c = ffi.new("QnnGraph_ValidateConfig_t *")
    c.option = option
    c.customConfig = NULL
    env.keep.append(c)
    return abi.null_terminated("QnnGraph_ValidateConfig_t", [c], env.keep)


def test_rule_graph_validate_config_custom(env):
    out = ffi.new("QnnGraph_ValidationResult_t **")
    code = abi.call("graphValidate", vp(env.graph), _validate_configs(env, Q.QNN_GRAPH_VALIDATE_OPTION_CUSTOM), out)
    env.assert_rule(code, Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "QNNEMU-graphValidate-config-custom",
                    "graphValidate", "config[0].option")
    assert out[0] == NULL, "no result is handed out"


def test_rule_graph_validate_config_option(env):
    out = ffi.new("QnnGraph_ValidationResult_t **")
    code = abi.call("graphValidate", vp(env.graph), _validate_configs(env, 0x7654321), out)
    env.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-graphValidate-config-option",
                    "graphValidate", "config[0].option")


def test_rule_graph_free_validation_result_unknown(env):
    out = ffi.new("QnnGraph_ValidationResult_t **")
    assert abi.call("graphValidate", vp(env.graph), NULL, out) == Q.QNN_SUCCESS, "graphValidate of an empty graph"
    assert out[0].numResults == 0 and out[0].overallStatus == Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "empty graph"
    assert abi.call("graphFreeValidationResult", out[0]) == Q.QNN_SUCCESS, "the first free"
    env.clear()
    code = abi.call("graphFreeValidationResult", out[0])   # the second: the backend no longer owns it
    env.assert_rule(code, Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-graphFreeValidationResult-unknown",
                    "graphFreeValidationResult", "validationResult")
    env.clear()
    code = abi.call("graphFreeValidationResult", ffi.new("QnnGraph_ValidationResult_t *"))
    assert code == Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT and env.rules() == {"QNNEMU-graphFreeValidationResult-unknown"}, \
        "a struct the backend never handed out is refused the same way"


@pytest.mark.parametrize("call", ["graphValidate", "graphFreeValidationResult"])
def test_null_arguments(env, call):
    args = (vp(env.graph), NULL, NULL) if call == "graphValidate" else (NULL,)
    env.assert_rule(abi.call(call, *args), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "QNNEMU-arg-null", call,
                    "validationResult")


# ------------------------------------------------------------------------------ the vendor
def test_vendor_answers_unsupported_feature():
    """The vendor's x86 library fills slots 72/73 but implements neither (measured, QNN 2.51)."""
    lib = vendor_library()
    if lib is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    from qnnemu.client import ffi as cffi
    with Backend(str(lib), log_level=None) as vb:
        assert not vb._has_capability("propertyHasCapability", Q.QNN_PROPERTY_GRAPH_SUPPORT_GRAPH_VALIDATION), \
            "the vendor reports graph validation as not supported"
        g = _relu_graph(vb.context())
        out = cffi.new("QnnGraph_ValidationResult_t **")
        assert vb.fn.graphValidate(g.handle, cffi.NULL, out) == Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, \
            "graphValidate: UNSUPPORTED_FEATURE"
        assert out[0] == cffi.NULL, "no result"
        assert vb.fn.graphFreeValidationResult(cffi.new("QnnGraph_ValidationResult_t *")) == \
            Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "graphFreeValidationResult: UNSUPPORTED_FEATURE"
