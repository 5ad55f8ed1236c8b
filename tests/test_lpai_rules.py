"""libQnnLpaiEmu.so's provider, its LPAI custom configs and properties (LPAI/QnnLpai*.h) and one
negative test per QNNEMU-lpai-* rule (qnnemu/abi/lpai_api.py, qnnemu/lpai/settings.py; QNN LPAI
Memory Allocations / QNN LPAI Memory Management for the memory rules).

No vendor LPAI library exists for x86 (tests/test_lpai_memory.py pins that the onnxruntime-qnn
wheel ships none): the values answered are qnnemu's documented eNPU model (docs/lpai.md).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from abi import NULL, LpaiSession, aligned_bytes, ffi, lpai_library, op_config, tensor, vp

import qnnemu
from qnnemu.headers import Q

pytestmark = pytest.mark.skipif(not os.path.isfile(qnnemu.lpai_library_path()),
                                reason="libQnnLpaiEmu.so is not built")

U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
Q1 = (1.0, 0)
CFG = "config[0].customConfig"


@pytest.fixture
def s():
    session = LpaiSession()
    yield session
    session.close()


def relu_graph(s: LpaiSession, name: str = "g", dtype: int = U8, shape=(1, 256)):
    code, g = s.graph(name)
    assert code == 0, f"graphCreate: {code}"
    quant = Q1 if dtype == U8 else None
    x = tensor("x", shape, dtype, quant=quant)
    y = tensor("y", shape, dtype, Q.QNN_TENSOR_TYPE_APP_READ, quant=quant)
    assert s.tensor(g, x) == 0 and s.tensor(g, y) == 0, f"tensors: {s.rec.errors()}"
    return g, x, y


def ready_graph(s: LpaiSession, name: str = "g"):
    """A Relu graph with its scratch set and finalized: (graph, x, y)."""
    g, x, y = relu_graph(s, name)
    assert s.node(g, op_config("r", "Relu", [x], [y])) == 0, f"graphAddNode: {s.rec.errors()}"
    code, size = s.graph_property(g, Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE)
    assert code == 0 and size > 0, f"SCRATCH_MEM_SIZE: {code} {size}"
    assert s.set_graph(g, s.mem("scratch", aligned_bytes(size))) == 0, f"SCRATCH_MEM: {s.rec.errors()}"
    assert s.finalize(g) == 0, f"graphFinalize: {s.rec.errors()}"
    s.rec.clear()
    return g, x, y


# ----------------------------------------------------------------------- the provider
def test_provider_is_the_lpai_backend():
    iface = lpai_library().interface
    assert iface.backendId == Q.QNN_BACKEND_ID_LPAI == 12, f"backend id {iface.backendId}"
    assert ffi.string(iface.providerName) == b"LPAI_QTI_AISW", "the LPAI provider name of LPAI/QnnLpaiCommon.h"
    v = iface.apiVersion.backendApiVersion
    assert (v.major, v.minor, v.patch) == (Q.QNN_LPAI_API_VERSION_MAJOR, Q.QNN_LPAI_API_VERSION_MINOR,
                                           Q.QNN_LPAI_API_VERSION_PATCH), "the LPAI backend API version"
    out = ffi.new("Qnn_ApiVersion_t *")
    assert lpai_library().call("backendGetApiVersion", out) == 0, "backendGetApiVersion"
    assert out.backendApiVersion.minor == Q.QNN_LPAI_API_VERSION_MINOR, "backendGetApiVersion answers LPAI's"
    assert out.coreApiVersion.major == iface.apiVersion.coreApiVersion.major, "the same core API version"
    assert qnnemu.lpai_library_path().endswith("libQnnLpaiEmu.so"), "qnnemu.lpai_library_path()"


def test_backend_properties_describe_the_emulated_enpu(s):
    req = s.own(ffi.new("QnnLpaiBackend_BufferAlignmentReq_t *"))
    assert s.backend_property(Q.QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ, req) == 0, "ALIGNMENT_REQ"
    assert (req.startAddrAlignment, req.sizeAlignment) == (128, 128), "the documented alignment (docs/lpai.md)"
    n = s.own(ffi.new("uint32_t *"))
    assert s.backend_property(Q.QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_NUM, n) == 0 and n[0] == 2, "two eNPU cores"
    info = s.own(ffi.new("QnnLpaiBackend_eNPUCoreInfo_t[]", n[0]))
    assert s.backend_property(Q.QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_INFO, info) == 0, "ENPU_CORE_INFO"
    assert [(c.coreIndex, c.version) for c in info] == [(0, 6), (1, 6)], "core indexes and hardware version V6"
    assert all(c.macCnt > 0 for c in info), "every core reports its MACs"
    flag = s.own(ffi.new("uint8_t *", 7))
    assert s.backend_property(Q.QNN_LPAI_BACKEND_GET_PROP_REQUIRE_PERSISTENT_BINARY, flag) == 0
    assert flag[0] == 1, "REQUIRE_PERSISTENT_BINARY: the context binary must stay valid (a bool)"


def test_accepted_configs(s):
    """HW_INFO, MODEL_BUFFER_MEM_TYPE DDR, ENABLE_ISLAND, PERF_CFG, CORE_AFFINITY and PREPARE
    are accepted (and the supported operations are the eNPU's)."""
    log = s.log
    hw = s.own(ffi.new("QnnLpaiBackend_CustomConfigHwInfo_t *"))
    hw.lpaiTarget, hw.hwVersion = Q.QNN_LPAI_BACKEND_TARGET_ADSP, Q.QNN_LPAI_BACKEND_HW_VERSION_V5
    out = ffi.new("void **")
    assert s.call("backendCreate", vp(log), s.list("QnnBackend_Config_t",
                  s.backend_lpai(Q.QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO, hw)), out) == 0, f"HW_INFO: {s.rec.errors()}"
    assert s.call("backendFree", out[0]) == 0
    ddr = s.own(ffi.new("QnnLpaiMem_MemType_t *", Q.QNN_LPAI_MEM_TYPE_DDR))
    island = s.own(ffi.new("uint8_t *", 1))
    code, _ = s.context(s.context_lpai(Q.QNN_LPAI_CONTEXT_SET_CFG_MODEL_BUFFER_MEM_TYPE, ddr),
                        s.context_lpai(Q.QNN_LPAI_CONTEXT_SET_CFG_ENABLE_ISLAND, island))
    assert code == 0, f"context configs: {s.rec.errors()}"
    perf = s.own(ffi.new("QnnLpaiGraph_PerfCfg_t *", [30, 10, Q.QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_REAL_TIME]))
    aff = s.own(ffi.new("QnnLpaiGraph_CoreAffinity_t *", [Q.QNN_LPAI_GRAPH_CORE_AFFINITY_HARD, 0b10]))
    prep = s.own(ffi.new("uint32_t *", 1))
    code, _ = s.graph("cfg", s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_PERF_CFG, perf),
                      s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_CORE_AFFINITY, aff),
                      s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_PREPARE_DEFAULT, prep))
    assert code == 0, f"graph configs: {s.rec.errors()}"
    n, ops = ffi.new("uint32_t *"), ffi.new("QnnBackend_OperationName_t **")
    assert s.call("backendGetSupportedOperations", vp(s.be), n, ops) == 0
    names = {ffi.string(ops[0][i].name).decode() for i in range(n[0])}
    assert "Conv2d" in names and "ElementWiseDivide" not in names, f"the eNPU's ops: {sorted(names)}"


def test_user_io_and_execute(s):
    g, x, y = ready_graph(s)
    out = np.zeros((1, 256), np.uint8)
    a = (np.arange(256) % 200).astype(np.uint8).reshape(1, 256)
    assert s.execute_aligned(g, [(x, a)], [(y, out)]) == 0, f"graphExecute: {s.rec.errors()}"
    assert (out == a).all(), "Relu of uint8 codes with offset 0 is the identity"


# ----------------------------------------------------------------------- negative tests
def _backend_create(s, option, payload):
    out = ffi.new("void **")
    return s.call("backendCreate", vp(s.log), s.list("QnnBackend_Config_t", s.backend_lpai(option, payload)), out)


def case_custom_null(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM, NULL)), \
        Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig", f"{CFG}.config"


def case_backend_config_option(s):
    return _backend_create(s, 7, s.own(ffi.new("uint32_t *"))), Q.QNN_BACKEND_ERROR_INVALID_CONFIG, \
        "backendCreate", f"{CFG}.option"


def case_hw_info(s):
    hw = s.own(ffi.new("QnnLpaiBackend_CustomConfigHwInfo_t *"))
    hw.lpaiTarget, hw.hwVersion = Q.QNN_LPAI_BACKEND_TARGET_X86, Q.QNN_LPAI_BACKEND_HW_VERSION_NA
    return _backend_create(s, Q.QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO, hw), Q.QNN_BACKEND_ERROR_INVALID_CONFIG, \
        "backendCreate", f"{CFG}.config.hwVersion"


def case_backend_property_option(s):
    return s.backend_property(5, s.own(ffi.new("uint32_t *"))), Q.QNN_BACKEND_ERROR_NOT_SUPPORTED, \
        "backendGetProperty", "properties[0].customProperty.option"


def case_context_config_option(s):
    code, _ = s.context(s.context_lpai(5, s.own(ffi.new("uint32_t *"))))
    return code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "contextCreate", f"{CFG}.option"


def case_context_mem_type(s):
    tcm = s.own(ffi.new("QnnLpaiMem_MemType_t *", Q.QNN_LPAI_MEM_TYPE_TCM))
    code, _ = s.context(s.context_lpai(Q.QNN_LPAI_CONTEXT_SET_CFG_MODEL_BUFFER_MEM_TYPE, tcm))
    return code, Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "contextCreate", f"{CFG}.config"


def case_graph_config_option(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.graph_lpai(77, s.own(ffi.new("uint32_t *")))), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
        "graphSetConfig", f"{CFG}.option"


def case_graph_mem_type(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.mem("scratch", aligned_bytes(256), mem_type=Q.QNN_LPAI_MEM_TYPE_TCM)), \
        Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig", f"{CFG}.config.memType"


def case_graph_mem_null(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.mem("scratch", None, size=256)), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
        "graphSetConfig", f"{CFG}.config.addr"


def case_graph_mem_align(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.mem("persistent", aligned_bytes(256, misalign=64))), \
        Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig", f"{CFG}.config.addr"


def case_graph_mem_size_align(s):
    g, _, _ = relu_graph(s)
    return s.set_graph(g, s.mem("scratch", aligned_bytes(200))), Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, \
        "graphSetConfig", f"{CFG}.config.size"


def case_graph_mem_missing(s):
    g, x, y = relu_graph(s)
    assert s.node(g, op_config("r", "Relu", [x], [y])) == 0
    return s.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize", "no scratch buffer"


def case_graph_mem_too_small(s):
    g, x, y = relu_graph(s)
    assert s.node(g, op_config("r", "Relu", [x], [y])) == 0
    assert s.set_graph(g, s.mem("scratch", aligned_bytes(128))) == 0, "128 bytes meet the alignment"
    return s.finalize(g), Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize", "scratch buffer.size"


def case_graph_persistent_fixed(s):
    g, _, _ = ready_graph(s)
    return s.set_graph(g, s.mem("persistent", aligned_bytes(128))), Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, \
        "graphSetConfig", f"{CFG}.config"


def case_perf_cfg(s):
    g, _, _ = relu_graph(s)
    perf = s.own(ffi.new("QnnLpaiGraph_PerfCfg_t *", [0, 10, Q.QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_REAL_TIME]))
    return s.set_graph(g, s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_PERF_CFG, perf)), \
        Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig", f"{CFG}.config.fps"


def case_core_affinity(s):
    g, _, _ = relu_graph(s)
    aff = s.own(ffi.new("QnnLpaiGraph_CoreAffinity_t *", [Q.QNN_LPAI_GRAPH_CORE_AFFINITY_SOFT, 0b100]))
    return s.set_graph(g, s.graph_lpai(Q.QNN_LPAI_GRAPH_SET_CFG_CORE_AFFINITY, aff)), \
        Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig", f"{CFG}.config.coreSelection"


def case_graph_property_option(s):
    g, _, _ = relu_graph(s)
    return s.graph_property(g, 55)[0], Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "graphGetProperty", \
        "properties[0].customProperty.option"


def case_op(s):
    g, x, y = relu_graph(s)
    return s.node(g, op_config("d", "ElementWiseDivide", [x, x], [y])), Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, \
        "graphAddNode", "opConfig.v1.typeName"


def case_dtype(s):
    g, x, y = relu_graph(s, dtype=Q.QNN_DATATYPE_FLOAT_32)
    return s.node(g, op_config("r", "Relu", [x], [y])), Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, "graphAddNode", \
        "opConfig.v1.inputTensors[0].v2.dataType"


def case_io_align(s):
    g, x, y = ready_graph(s)
    a = aligned_bytes(256, misalign=16).reshape(1, 256)
    return s.execute(g, [(x, a)], [(y, aligned_bytes(256).reshape(1, 256))]), Q.QNN_GRAPH_ERROR_INVALID_TENSOR, \
        "graphExecute", "inputs[0].v2.clientBuf.data"


RULE_CASES = {
    "QNNEMU-lpai-custom-null": case_custom_null,
    "QNNEMU-lpai-backend-config-option": case_backend_config_option,
    "QNNEMU-lpai-hw-info": case_hw_info,
    "QNNEMU-lpai-backend-property-option": case_backend_property_option,
    "QNNEMU-lpai-context-config-option": case_context_config_option,
    "QNNEMU-lpai-context-mem-type": case_context_mem_type,
    "QNNEMU-lpai-graph-config-option": case_graph_config_option,
    "QNNEMU-lpai-graph-mem-type": case_graph_mem_type,
    "QNNEMU-lpai-graph-mem-null": case_graph_mem_null,
    "QNNEMU-lpai-graph-mem-align": case_graph_mem_align,
    "QNNEMU-lpai-graph-mem-size-align": case_graph_mem_size_align,
    "QNNEMU-lpai-graph-mem-missing": case_graph_mem_missing,
    "QNNEMU-lpai-graph-mem-too-small": case_graph_mem_too_small,
    "QNNEMU-lpai-graph-persistent-fixed": case_graph_persistent_fixed,
    "QNNEMU-lpai-perf-cfg": case_perf_cfg,
    "QNNEMU-lpai-core-affinity": case_core_affinity,
    "QNNEMU-lpai-graph-property-option": case_graph_property_option,
    "QNNEMU-lpai-op": case_op,
    "QNNEMU-lpai-dtype": case_dtype,
    "QNNEMU-lpai-io-align": case_io_align,
}


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule(s, rule):
    code, want, func, path = RULE_CASES[rule](s)
    s.rec.assert_rule(code, want, rule, func, path)


def test_seed_snippet_queries_answer_before_finalize(s):
    """The documents' snippets: SCRATCH_MEM_SIZE and PERSISTENT_MEM_SIZE are queried right after
    the graph is built (before graphFinalize) and return what the planner computed."""
    g, x, y = relu_graph(s, "snippet")
    assert s.node(g, op_config("r", "Relu", [x], [y])) == 0
    code, scratch = s.graph_property(g, Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE)
    assert code == 0 and scratch > 0 and scratch % 128 == 0, f"SCRATCH_MEM_SIZE {code} {scratch}"
    code, persistent = s.graph_property(g, Q.QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE)
    assert code == 0 and persistent == 0, f"a stateless graph: PERSISTENT_MEM_SIZE {code} {persistent}"


def test_sdk_root_names_it_libQnnLpai(tmp_path):
    """qnnemu-sdk-root lays the LPAI backend out under the SDK's name."""
    from abi import Library
    root = qnnemu.sdk_root(tmp_path / "sdk")
    lib = Library(str(root / "lib" / "x86_64-linux-clang" / "libQnnLpai.so"))
    assert lib.interface.backendId == Q.QNN_BACKEND_ID_LPAI, "libQnnLpai.so is the LPAI provider"
