"""Negative API conformance through the QNN C ABI (raw calls, tests/abi.py).

One case per validation rule id raised in qnnemu/core and qnnemu/abi (op-specific rules of
qnnemu/ops are tested with the ops).  Each case triggers exactly that rule and checks:

- the returned error code;
- the message logged through the application's QnnLog callback names the rule id (``[QNNEMU-...]``),
  the API function and the parameter path (for rules with no parameter, the object involved);
- no other rule fired.

Rules that cannot be reached through the ABI are tested at the core level (said so at the case).
Then: errorGetMessage / errorGetVerboseMessage, propertyHasCapability, the not-implemented table
entries, deviceGetPlatformInfo and the HTP perf infrastructure.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.graph_env import Env

import qnnemu
from qnnemu.headers import Q

pytestmark = pytest.mark.usefixtures("qnn_abi")

F32 = Q.QNN_DATATYPE_FLOAT_32
BOGUS = 0x7654321  # an option/enum value no header defines


# ------------------------------------------------------------------------------ environment


@pytest.fixture
def env():
    e = Env()
    yield e
    e.close()


# ------------------------------------------------------------------------------ rule cases
@dataclass
class Case:
    rule: str
    code: int            # expected return value
    func: str            # API function the message must name
    path: str            # parameter path (or object) the message must name
    trigger: Callable[[Env], int]


CASES: list[Case] = []


def case(rule, code, func, path, id=None):
    def deco(fn):
        c = Case(rule, code, func, path, fn)
        CASES.append(pytest.param(c, id=id or rule))
        return fn
    return deco


# ---- handles
case("QNNEMU-handle-null", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphFinalize", "graphHandle")(
    lambda e: abi.call("graphFinalize", NULL, NULL, NULL))


@case("QNNEMU-handle-freed", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphFinalize", "graphHandle")
def _(e):
    code, ctx = abi.create("contextCreate", vp(e.be), NULL, NULL)
    code, g = abi.create("graphCreate", vp(ctx), abi.cstr("dies", e.keep), NULL)
    assert abi.call("contextFree", vp(ctx), NULL) == Q.QNN_SUCCESS  # the graph dies with its context
    return abi.call("graphFinalize", vp(g), NULL, NULL)


case("QNNEMU-handle-unknown", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphFinalize", "graphHandle")(
    lambda e: abi.call("graphFinalize", vp(0xDEAD0008), NULL, NULL))
case("QNNEMU-handle-kind", Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "graphFinalize", "graphHandle")(
    lambda e: abi.call("graphFinalize", vp(e.ctx), NULL, NULL))  # a context where a graph is expected
case("QNNEMU-arg-null", Q.QNN_BACKEND_ERROR_INVALID_ARGUMENT, "backendGetApiVersion", "pVersion")(
    lambda e: abi.call("backendGetApiVersion", NULL))

# ---- log
case("QNNEMU-logCreate-level", Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "logCreate", "maxLogLevel")(
    lambda e: abi.create("logCreate", NULL, 0)[0])
case("QNNEMU-logSetLogLevel-level", Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "logSetLogLevel", "maxLogLevel")(
    lambda e: abi.call("logSetLogLevel", vp(e.log), 99))

# ---- backend
case("QNNEMU-backendCreate-config-option", Q.QNN_BACKEND_ERROR_INVALID_CONFIG, "backendCreate", "config[0].option")(
    lambda e: abi.create("backendCreate", vp(e.log), e.configs("QnnBackend_Config_t", option=BOGUS))[0])
case("QNNEMU-backendSetConfig-config-option", Q.QNN_BACKEND_ERROR_INVALID_CONFIG, "backendSetConfig",
     "config[0].option")(
    lambda e: abi.call("backendSetConfig", vp(e.be),
                       e.configs("QnnBackend_Config_t", option=Q.QNN_BACKEND_CONFIG_OPTION_CUSTOM)))
case("QNNEMU-backendGetProperty-option", Q.QNN_BACKEND_ERROR_NOT_SUPPORTED, "backendGetProperty",
     "properties[0].option")(
    lambda e: abi.call("backendGetProperty", vp(e.be), e.configs("QnnBackend_Property_t", option=0)))


@case("QNNEMU-config-list-unterminated", Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "backendSetConfig", "config")
def _(e):
    c = ffi.new("QnnBackend_Config_t *")
    c.option = Q.QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING
    c.errorConfig.reportingLevel = Q.QNN_ERROR_REPORTING_LEVEL_BRIEF
    e.keep.append(c)
    # 4200 entries (NULL-terminated far beyond the 4096 the library reads before giving up)
    return abi.call("backendSetConfig", vp(e.be), abi.null_terminated("QnnBackend_Config_t", [c] * 4200, e.keep))


@case("QNNEMU-env-core-api", Q.QNN_COMMON_ERROR_INVALID_ARGUMENT, "backendGetApiVersion", "QNNEMU_CORE_API_VERSION")
def _(e):
    # The embedded interpreter is this process's: the variable is read at call time.
    import os
    old = os.environ.get("QNNEMU_CORE_API_VERSION")
    os.environ["QNNEMU_CORE_API_VERSION"] = "two.forty"
    try:
        return abi.call("backendGetApiVersion", ffi.new("Qnn_ApiVersion_t *"))
    finally:
        if old is None:
            del os.environ["QNNEMU_CORE_API_VERSION"]
        else:
            os.environ["QNNEMU_CORE_API_VERSION"] = old


# ---- device
case("QNNEMU-device-config-option", Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "deviceCreate", "config[0].option")(
    lambda e: e.guard_device(abi.create("deviceCreate", vp(e.log), e.configs("QnnDevice_Config_t", option=BOGUS))))
case("QNNEMU-device-config-option", Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "deviceCreate",
     "config[0].customConfig.option", id="QNNEMU-device-config-option-custom")(
    lambda e: e.guard_device(abi.create("deviceCreate", vp(e.log), e.htp_device_config(BOGUS))))
case("QNNEMU-device-securepd", Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "deviceCreate",
     "config[0].customConfig.option")(
    lambda e: e.guard_device(abi.create("deviceCreate", vp(e.log),
                                        e.htp_device_config(Q.QNN_HTP_DEVICE_CONFIG_OPTION_SECUREPD))))
case("QNNEMU-device-soc", Q.QNN_DEVICE_ERROR_INVALID_CONFIG, "deviceCreate", "customConfig.socModel")(
    lambda e: e.guard_device(abi.create("deviceCreate", vp(e.log),
                                        e.htp_device_config(Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=9999))))
# QNNEMU-device-arch-ignored, -soc-unmodelled, -option-unsupported, -app-uid (vendor-measured
# tolerances and refusals): tests/test_device_config_layouts.py
case("QNNEMU-deviceFree-in-use", Q.QNN_DEVICE_ERROR_ASSOCIATED_TO_CONTEXT, "deviceFree", "device")(
    lambda e: abi.call("deviceFree", vp(e.dev)))  # the fixture's context uses it
case("QNNEMU-deviceFreePlatformInfo-unknown", Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, "deviceFreePlatformInfo",
     "platformInfo")(
    lambda e: abi.call("deviceFreePlatformInfo", NULL, e.own(ffi.new("QnnDevice_PlatformInfo_t *"))))


# ---- perf infrastructure
# (destroyPowerConfigId of an unknown id is accepted, as the vendor's library does: the warning
# QNNEMU-perf-destroy-unknown, tests/test_htp_perf.py)
@case("QNNEMU-perf-id-unknown", Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_INVALID_INPUT, "setPowerConfig", "powerConfigId",
      id="QNNEMU-perf-id-unknown-set")
def _(e):
    return int(e.perf().setPowerConfig(0x7FFFFFF0, e.configs(
        "QnnHtpPerfInfrastructure_PowerConfig_t", option=Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DCVS_V3)))


@case("QNNEMU-perf-option", Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG, "setPowerConfig",
      "config[0].option")
def _(e):
    perf = e.perf()
    pid = ffi.new("uint32_t *")
    assert int(perf.createPowerConfigId(0, 0, pid)) == Q.QNN_SUCCESS
    try:
        return int(perf.setPowerConfig(pid[0], e.configs("QnnHtpPerfInfrastructure_PowerConfig_t", option=BOGUS)))
    finally:
        perf.destroyPowerConfigId(pid[0])


case("QNNEMU-perf-memory-option", Q.QNN_HTP_PERF_INFRASTRUCTURE_ERROR_UNSUPPORTED_CONFIG, "setMemoryConfig",
     "config[0].option")(
    lambda e: int(e.perf().setMemoryConfig(0, 0, e.configs("QnnHtpPerfInfrastructure_MemoryConfig_t",
                                                           option=BOGUS))))

# ---- context
case("QNNEMU-context-config-option", Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "contextCreate", "config[0].option")(
    lambda e: abi.create("contextCreate", vp(e.be), NULL, e.configs("QnnContext_Config_t", option=BOGUS))[0])


@case("QNNEMU-context-config-option", Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "contextSetConfig",
      "config[0].customConfig.option", id="QNNEMU-context-config-option-custom")
def _(e):
    cc = e.own(ffi.new("QnnHtpContext_CustomConfig_t *"))
    cc.option = Q.QNN_HTP_CONTEXT_CONFIG_OPTION_RESERVED_14   # values above the last option are ignored (warning)
    return abi.call("contextSetConfig", vp(e.ctx), e.configs("QnnContext_Config_t",
                                                             option=Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM,
                                                             customConfig=cc))


@case("QNNEMU-context-option-load-only", Q.QNN_CONTEXT_ERROR_INVALID_CONFIG, "contextCreate",
      "config[0].customConfig.option")
def _(e):
    cc = e.own(ffi.new("QnnHtpContext_CustomConfig_t *"))
    cc.option, cc.reusedIoLimitMb = Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REUSED_IO_LIMIT, 64
    return abi.create("contextCreate", vp(e.be), NULL, e.configs("QnnContext_Config_t",
                                                                 option=Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM,
                                                                 customConfig=cc))[0]


case("QNNEMU-contextGetProperty-option", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetProperty",
     "properties[0].option")(
    lambda e: abi.call("contextGetProperty", vp(e.ctx), e.configs("QnnContext_Property_t", option=BOGUS)))


@case("QNNEMU-contextGetProperty-option", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "contextGetProperty",
      "properties[0].customProperty.option", id="QNNEMU-contextGetProperty-option-custom")
def _(e):
    cp = e.own(ffi.new("QnnHtpContext_CustomProperty_t *"))
    cp.option = BOGUS
    return abi.call("contextGetProperty", vp(e.ctx), e.configs(
        "QnnContext_Property_t", option=Q.QNN_CONTEXT_PROPERTY_OPTION_CUSTOM, customProperty=cp))


# ---- graph create / retrieve / configs / properties
case("QNNEMU-graphCreate-name", Q.QNN_GRAPH_ERROR_INVALID_NAME, "graphCreate", "graphName")(
    lambda e: abi.create("graphCreate", vp(e.ctx), NULL, NULL)[0])
case("QNNEMU-graphCreate-name-unique", Q.QNN_GRAPH_ERROR_INVALID_NAME, "graphCreate", "graphName")(
    lambda e: abi.create("graphCreate", vp(e.ctx), abi.cstr("g", e.keep), NULL)[0])
case("QNNEMU-graphRetrieve-name", Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, "graphRetrieve", "graphName")(
    lambda e: abi.create("graphRetrieve", vp(e.ctx), abi.cstr("nope", e.keep))[0])
case("QNNEMU-graph-config-option", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "graphCreate", "config[0].option")(
    lambda e: abi.create("graphCreate", vp(e.ctx), abi.cstr("g2", e.keep),
                         e.configs("QnnGraph_Config_t", option=BOGUS))[0])


@case("QNNEMU-graph-config-option", Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "graphSetConfig",
      "config[0].customConfig.option", id="QNNEMU-graph-config-option-custom")
def _(e):
    cc = e.own(ffi.new("QnnHtpGraph_CustomConfig_t *"))
    cc.option = Q.QNN_HTP_GRAPH_CONFIG_OPTION_UNKNOWN   # other undefined values are ignored (warning rule)
    return abi.call("graphSetConfig", vp(e.g), e.configs("QnnGraph_Config_t", option=Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM,
                                                         customConfig=cc))


case("QNNEMU-graph-config-profiling", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "graphCreate", "config[0].option")(
    lambda e: abi.create("graphCreate", vp(e.ctx), abi.cstr("g2", e.keep),
                         e.configs("QnnGraph_Config_t", option=Q.QNN_GRAPH_CONFIG_OPTION_PROFILE_HANDLE))[0])
case("QNNEMU-graphGetProperty-option", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, "graphGetProperty",
     "properties[0].option")(
    lambda e: abi.call("graphGetProperty", vp(e.g), e.configs("QnnGraph_Property_t", option=0)))

# ---- tensors (tensorCreateGraphTensor; path prefix "tensor")
T = "tensorCreateGraphTensor"
case("QNNEMU-tensor-version", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.version")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), version=3)))
case("QNNEMU-tensor-name", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.name")(
    lambda e: e.create_tensor(abi.tensor(None, (2,))))   # NULL (an empty name is accepted)
case("QNNEMU-tensor-rank", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.rank")(
    lambda e: e.create_tensor(abi.tensor("t", (1,) * 7)))
case("QNNEMU-tensor-type", Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, T, "tensor.v2.type")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), type_=Q.QNN_TENSOR_TYPE_OPTIONAL_APP_WRITE)))
case("QNNEMU-tensor-type", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v1.type",
     id="QNNEMU-tensor-type-undefined")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), type_=Q.QNN_TENSOR_TYPE_UNDEFINED, version=1)))
case("QNNEMU-tensor-data-format", Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, T, "tensor.v2.dataFormat")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), data_format=BOGUS)))
case("QNNEMU-tensor-dtype", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.dataType")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), dtype=BOGUS)))
case("QNNEMU-tensor-dims-null", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.dimensions")(
    lambda e: e.create_tensor(abi.tensor("t", None, rank=2)))



@case("QNNEMU-tensor-dims-zero", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, "graphAddNode",
      "opConfig.v1.inputTensors[0].v1.dimensions")
def _(e):
    # created (as the vendor does), but no node takes an empty non-NULL tensor
    x = e.tensor("x", (2, 0, 3), version=1)
    y = e.tensor("y", (2, 0, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    return e.add_node(abi.op_config("r", "Relu", [x], [y]))



case("QNNEMU-tensor-dynamic-dims", Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, T, "tensor.v2.isDynamicDimensions")(
    lambda e: e.create_tensor(abi.tensor("t", (2, 3), dynamic=[True, False])))
case("QNNEMU-tensor-quant-required", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), dtype=Q.QNN_DATATYPE_UFIXED_POINT_8)))
case("QNNEMU-tensor-quant-scale", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), dtype=Q.QNN_DATATYPE_UFIXED_POINT_8, quant=(0.0, 0))))


def _axis_tensor(axis: int, scales: list[float], encoding=Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET):
    t = abi.tensor("t", (2, 3), dtype=Q.QNN_DATATYPE_UFIXED_POINT_8)
    q = t.v.quantizeParams
    q.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    q.quantizationEncoding = encoding
    if encoding == Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET:
        arr = ffi.new("Qnn_ScaleOffset_t[]", [(s, 0) for s in scales] or 1)
        t.keep.append(arr)
        q.axisScaleOffsetEncoding.axis = axis
        q.axisScaleOffsetEncoding.numScaleOffsets = len(scales)
        q.axisScaleOffsetEncoding.scaleOffset = arr if scales else NULL
    return t


case("QNNEMU-tensor-quant-scale", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams",
     id="QNNEMU-tensor-quant-scale-axis")(lambda e: e.create_tensor(_axis_tensor(0, [0.5, -1.0])))
case("QNNEMU-tensor-quant-axis", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams")(
    lambda e: e.create_tensor(_axis_tensor(5, [0.5, 0.5])))
case("QNNEMU-tensor-quant-axis-count", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams")(
    lambda e: e.create_tensor(_axis_tensor(1, [0.5, 0.5])))
case("QNNEMU-tensor-quant-axis-values", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.quantizeParams")(
    lambda e: e.create_tensor(_axis_tensor(0, [])))
def _blockwise_tensor(blocks: int, with_scales: bool = True):
    """A [4, 6] weight, axis 0 (channels), blocked along dimension 1."""
    t = abi.tensor("t", (4, 6), dtype=Q.QNN_DATATYPE_SFIXED_POINT_8)
    q = t.v.quantizeParams
    q.encodingDefinition = Q.QNN_DEFINITION_DEFINED
    q.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION
    bw = ffi.new("Qnn_BlockwiseExpansion_t *")
    so = ffi.new("Qnn_ScaleOffset_t[]", [(0.5, 0)] * 4)
    bs = ffi.new("uint8_t[]", [1] * (4 * blocks))
    bw.axis = 0
    bw.scaleOffsets = so
    bw.numBlocksPerAxis = blocks
    bw.blockScaleBitwidth = 4
    bw.blockScaleStorageType = Q.QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8
    bw.blocksScale8 = bs if with_scales else NULL
    q.blockwiseExpansion = bw
    t.keep += [bw, so, bs]
    return t


case("QNNEMU-tensor-quant-blockwise-blocks", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T,
     "tensor.v2.quantizeParams.blockwiseExpansion->numBlocksPerAxis")(
    lambda e: e.create_tensor(_blockwise_tensor(4)))
case("QNNEMU-tensor-quant-blockwise-values", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T,
     "tensor.v2.quantizeParams.blockwiseExpansion")(
    lambda e: e.create_tensor(_blockwise_tensor(2, with_scales=False)))


case("QNNEMU-tensor-quant-encoding", Q.QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM, T,
     "tensor.v2.quantizeParams.quantizationEncoding")(
    lambda e: e.create_tensor(_axis_tensor(0, [], encoding=Q.QNN_QUANTIZATION_ENCODING_VECTOR)))
case("QNNEMU-tensor-static-memtype", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.memType")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), type_=Q.QNN_TENSOR_TYPE_STATIC,
                                         mem_type=Q.QNN_TENSORMEMTYPE_MEMHANDLE)))
case("QNNEMU-tensor-static-data", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.clientBuf.data")(
    lambda e: e.create_tensor(abi.tensor("t", (2,), type_=Q.QNN_TENSOR_TYPE_STATIC)))
case("QNNEMU-tensor-static-size", Q.QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM, T, "tensor.v2.clientBuf.dataSize")(
    lambda e: e.create_tensor(abi.static_tensor("t", np.zeros((2, 3), np.float32), data_size=20)))


@case("QNNEMU-tensor-name-unique", Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION, T, "tensor.v2.name")
def _(e):
    e.tensor("dup")
    return e.create_tensor(abi.tensor("dup", (4,)))


@case("QNNEMU-tensor-name-unique", Q.QNN_TENSOR_ERROR_NAME_HASH_COLLISION, "tensorCreateContextTensor",
      "tensor.v1.name", id="QNNEMU-tensor-name-unique-context")
def _(e):
    first = e.own(abi.tensor("shared", (2,), version=1))
    assert abi.call("tensorCreateContextTensor", vp(e.ctx), first.ptr) == Q.QNN_SUCCESS
    return abi.call("tensorCreateContextTensor", vp(e.ctx), e.own(abi.tensor("shared", (2,), version=1)).ptr)


@case("QNNEMU-graph-immutable", Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, T, "graph 'g'")
def _(e):
    e.finalized_relu()
    return e.create_tensor(abi.tensor("late", (2,)))


@case("QNNEMU-graph-immutable", Q.QNN_GRAPH_ERROR_GRAPH_FINALIZED, "graphAddNode", "graph 'g'",
      id="QNNEMU-graph-immutable-addnode")
def _(e):
    x, y = e.finalized_relu()
    return e.add_node(abi.op_config("r2", "Relu", [x], [y]))


# ---- graphAddNode (path prefix "opConfig")
A = "graphAddNode"


def _relu_op(e, name="r", inputs=None, outputs=None, **kw):
    x = e.tensor("x") if inputs is None else None
    y = e.tensor("y", type_=Q.QNN_TENSOR_TYPE_APP_READ) if outputs is None else None
    return abi.op_config(name, kw.pop("type_name", "Relu"), [x] if inputs is None else inputs,
                         [y] if outputs is None else outputs, **kw)


case("QNNEMU-op-config-version", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.version")(
    lambda e: e.add_node(_relu_op(e, version=2)))
case("QNNEMU-op-input-count", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.numOfInputs")(
    lambda e: e.add_node(_relu_op(e, inputs=[e.tensor("x"), e.tensor("x2")])))   # Relu takes one input
case("QNNEMU-op-type-null", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.typeName")(
    lambda e: e.add_node(_relu_op(e, type_name=None)))
case("QNNEMU-op-name", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.name")(
    lambda e: e.add_node(_relu_op(e, name=None)))   # NULL (an empty name is accepted)
case("QNNEMU-op-type-unknown", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, A, "opConfig.v1.typeName")(
    lambda e: e.add_node(_relu_op(e, type_name="NoSuchOp")))
case("QNNEMU-op-package-unknown", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, A, "opConfig.v1.packageName")(
    lambda e: e.add_node(_relu_op(e, type_name="NoSuchOp", package="com.example.ops")))


@case("QNNEMU-op-null-input-position", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.inputTensors[0].type")
def _(e):
    null = abi.tensor("absent", (2, 3), type_=Q.QNN_TENSOR_TYPE_NULL)
    x, y = e.tensor("x"), e.tensor("y", type_=Q.QNN_TENSOR_TYPE_APP_READ)
    return e.add_node(abi.op_config("add", "ElementWiseAdd", [null, x], [y]))


case("QNNEMU-graphAddNode-tensor-unknown", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A, "opConfig.v1.inputTensors[0].v2.id")(
    lambda e: e.add_node(_relu_op(e, inputs=[abi.tensor("ghost", (2, 3), tensor_id=999)])))


@case("QNNEMU-graphAddNode-tensor-dims", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A,
      "opConfig.v1.inputTensors[0].v2.dimensions")
def _(e):
    x = e.tensor("x")
    return e.add_node(_relu_op(e, inputs=[abi.tensor("x", (3, 2), tensor_id=x.id)]))


@case("QNNEMU-graphAddNode-tensor-dtype", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A,
      "opConfig.v1.inputTensors[0].v2.dataType")
def _(e):
    x = e.tensor("x")
    return e.add_node(_relu_op(e, inputs=[abi.tensor("x", (2, 3), dtype=Q.QNN_DATATYPE_INT_32, tensor_id=x.id)]))


case("QNNEMU-graphAddNode-input-order", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A, "opConfig.v1.inputTensors[0].v2.id")(
    lambda e: e.add_node(_relu_op(e, inputs=[e.tensor("n", type_=Q.QNN_TENSOR_TYPE_NATIVE)])))
case("QNNEMU-graphAddNode-input-order", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A, "opConfig.v1.inputTensors[0].v2.id",
     id="QNNEMU-graphAddNode-input-order-app-read")(
    lambda e: e.add_node(_relu_op(e, inputs=[e.tensor("o", type_=Q.QNN_TENSOR_TYPE_APP_READ)])))
case("QNNEMU-graphAddNode-output-type", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A, "opConfig.v1.outputTensors[0].v2.type")(
    lambda e: e.add_node(_relu_op(e, outputs=[e.tensor("w")])))  # an APP_WRITE output


@case("QNNEMU-graphAddNode-output-producer", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, A,
      "opConfig.v1.outputTensors[0].v2.id")
def _(e):
    x, y = e.relu()
    return e.add_node(abi.op_config("r2", "Relu", [x], [y]))


case("QNNEMU-op-output-count", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.numOfOutputs")(
    lambda e: e.add_node(_relu_op(e, outputs=[e.tensor("y", type_=Q.QNN_TENSOR_TYPE_APP_READ),
                                              e.tensor("y2", type_=Q.QNN_TENSOR_TYPE_APP_READ)])))
case("QNNEMU-op-output-shape", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.outputTensors[0].dimensions")(
    lambda e: e.add_node(_relu_op(e, outputs=[e.tensor("y", (3, 2), type_=Q.QNN_TENSOR_TYPE_APP_READ)])))
case("QNNEMU-op-output-dtype", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.outputTensors[0].dataType")(
    lambda e: e.add_node(_relu_op(e, outputs=[e.tensor("y", type_=Q.QNN_TENSOR_TYPE_APP_READ,
                                                       dtype=Q.QNN_DATATYPE_FLOAT_16)])))


def _param_op(e, *params):
    return _relu_op(e, type_name="ReluMinMax", params=list(params))


def _f32(name, value):
    return abi.scalar_param(name, F32, "floatValue", value)


case("QNNEMU-op-param-name", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[0].name")(
    lambda e: e.add_node(_param_op(e, _f32(None, 0.0), _f32("max_value", 6.0))))
case("QNNEMU-op-param-scalar-type", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A,
     "opConfig.v1.params[min_value].scalarParam.dataType")(
    lambda e: e.add_node(_param_op(e, abi.scalar_param("min_value", BOGUS, "uint32Value", 0), _f32("max_value", 6.0))))
case("QNNEMU-op-param-missing", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[max_value]")(
    lambda e: e.add_node(_param_op(e, _f32("min_value", 0.0))))
# graphAddNode takes what the vendor's takes (tests/test_warning_rules.py: the tolerances);
# what it cannot hold is refused.
case("QNNEMU-op-param-value", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[transpose_in1]")(
    lambda e: e.add_node(_relu_op(e, type_name="MatMul", inputs=[e.tensor("a"), e.tensor("b", (3, 2))],
                                  outputs=[e.tensor("y", (2, 2), type_=Q.QNN_TENSOR_TYPE_APP_READ)],
                                  params=[abi.scalar_param("transpose_in1", Q.QNN_DATATYPE_UINT_32, "uint32Value",
                                                           2)])))
case("QNNEMU-op-param-type", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[max_value]")(
    lambda e: e.add_node(_param_op(e, _f32("min_value", 0.0),
                                   abi.scalar_param("max_value", Q.QNN_DATATYPE_BOOL_8, "bool8Value", 1))))
case("QNNEMU-op-param-shape", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[pad_amount]")(
    lambda e: e.add_node(_relu_op(e, type_name="Pad", outputs=[e.tensor("y", (4, 5), type_=Q.QNN_TENSOR_TYPE_APP_READ)],
                                  params=[abi.tensor_param("pad_amount", _created_static(
                                      e, "pad", np.array([1, 1, 1], np.uint32)))])))


@case("QNNEMU-op-param-paramtype", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params[0].paramType")
def _(e):
    p = _f32("min_value", 0.0)
    p.ptr.paramType = BOGUS
    return e.add_node(_param_op(e, p, _f32("max_value", 6.0)))


# backendValidateOpConfig checks the op definition strictly, as the vendor's does (it refuses
# each of these, which its graphAddNode takes).
V = "backendValidateOpConfig"
NOT_SUPPORTED = Q.QNN_BACKEND_ERROR_NOT_SUPPORTED


def _validate(e, *params, type_name="ReluMinMax", y_dims=(2, 3)):
    op = abi.op_config("n", type_name, [abi.tensor("x", (2, 3))],
                       [abi.tensor("y", y_dims, type_=Q.QNN_TENSOR_TYPE_APP_READ)], list(params))
    e.keep.append(op)
    return abi.call(V, vp(e.be), op)


case("QNNEMU-op-param-duplicate", NOT_SUPPORTED, V, "opConfig.v1.params[1].name")(
    lambda e: _validate(e, _f32("min_value", 0.0), _f32("min_value", 1.0), _f32("max_value", 6.0)))
case("QNNEMU-op-param-unknown", NOT_SUPPORTED, V, "opConfig.v1.params[bogus]")(
    lambda e: _validate(e, _f32("min_value", 0.0), _f32("max_value", 6.0), _f32("bogus", 1.0)))
case("QNNEMU-op-param-kind", NOT_SUPPORTED, V, "opConfig.v1.params[perm]")(
    lambda e: _validate(e, abi.scalar_param("perm", Q.QNN_DATATYPE_UINT_32, "uint32Value", 1), type_name="Transpose",
                        y_dims=(3, 2)))


def test_every_op_param_rule_has_a_case():
    """The op parameter rules (qnnemu/ops/base.py, qnnemu/core/graph.py) that are not warning
    rules each have a case above."""
    import pathlib

    from qnnemu.rules import WARNING_RULES
    root = pathlib.Path(qnnemu.__file__).parent
    found = set()
    for path in (root / "ops" / "base.py", root / "core" / "graph.py"):
        found |= set(re.findall(r'"(QNNEMU-op-params?-[A-Za-z0-9_-]+)"', path.read_text()))
    covered = {p.values[0].rule for p in CASES} | CORE_LEVEL_RULES
    assert found - set(WARNING_RULES) - covered == set(), \
        f"op parameter rules without a case: {sorted(found - set(WARNING_RULES) - covered)}"


def _created_static(e, name, array):
    """A STATIC tensor created in the graph first (the vendor requires it of tensor parameters)."""
    t = abi.static_tensor(name, array)
    e.keep.append(t)
    assert abi.call("tensorCreateGraphTensor", vp(e.g), t.ptr) == Q.QNN_SUCCESS, f"setup: tensor {name}"
    return t


case("QNNEMU-op-param-tensor-static", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A,
     "opConfig.v1.params[0].tensorParam.v2.type")(
    lambda e: e.add_node(_param_op(e, abi.tensor_param("min_value", abi.tensor("p", (1,))), _f32("max_value", 6.0))))

@case("QNNEMU-op-params-null", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.params")
def _(e):
    op = _relu_op(e)
    op.ptr.v1.numOfParams = 1  # with params == NULL
    return e.add_node(op)


@case("QNNEMU-op-tensors-null", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, A, "opConfig.v1.inputTensors")
def _(e):
    op = _relu_op(e)
    op.ptr.v1.inputTensors = NULL  # with numOfInputs == 1
    return e.add_node(op)


# ---- graphFinalize
case("QNNEMU-graphFinalize-empty", Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize", "graph 'g'")(
    lambda e: abi.call("graphFinalize", vp(e.g), NULL, NULL))


@case("QNNEMU-graphFinalize-output-unproduced", Q.QNN_GRAPH_ERROR_UNCONNECTED_NODE, "graphFinalize",
      "output tensor 'orphan'")
def _(e):
    e.relu()
    e.tensor("orphan", type_=Q.QNN_TENSOR_TYPE_APP_READ)
    return abi.call("graphFinalize", vp(e.g), NULL, NULL)


# ---- graphExecute
X = "graphExecute"


@case("QNNEMU-graphExecute-not-finalized", Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, X, "graph 'g'")
def _(e):
    x, y = e.relu()
    return e.execute([e.io(x)], [e.io(y)])


@case("QNNEMU-graphExecute-null", Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, X, "inputs")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([], [e.io(y)], n_in=1)


@case("QNNEMU-graphExecute-tensor-version", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "inputs[0].version")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([e.io(x, version=7)], [e.io(y)])


@case("QNNEMU-graphExecute-memtype", Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE, X, "inputs[0].v2.memType")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([e.io(x, memType=Q.QNN_TENSORMEMTYPE_RETRIEVE_RAW)], [e.io(y)])


@case("QNNEMU-graphExecute-tensor-unknown", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "inputs[0]")
def _(e):
    x, y = e.finalized_relu()
    ghost = abi.tensor("ghost", (2, 3), tensor_id=999)
    abi.set_buffer(ghost, np.zeros((2, 3), np.float32))
    return e.execute([ghost], [e.io(y)])


@case("QNNEMU-graphExecute-tensor-type", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "inputs[0]")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([e.io(y)], [e.io(y)])  # the APP_READ output given as an input


@case("QNNEMU-graphExecute-buffer-size", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "inputs[0].v2.clientBuf")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([e.io(x, np.zeros(5, np.float32))], [e.io(y)])


@case("QNNEMU-graphExecute-buffer-size", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "outputs[0].v2.clientBuf",
      id="QNNEMU-graphExecute-buffer-size-output")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([e.io(x)], [e.io(y, np.zeros(7, np.float32))])


@case("QNNEMU-graphExecute-input-missing", Q.QNN_GRAPH_ERROR_INVALID_TENSOR, X, "inputs")
def _(e):
    x, y = e.finalized_relu()
    return e.execute([], [e.io(y)])


# ---- error, global config
case("QNNEMU-errorGetMessage-success", Q.QNN_ERROR_INVALID_ERROR_HANDLE, "errorGetMessage", "errorHandle")(
    lambda e: abi.call("errorGetMessage", 0, ffi.new("const char **")))
case("QNNEMU-errorFreeVerboseMessage-unknown", Q.QNN_ERROR_INVALID_ARGUMENT, "errorFreeVerboseMessage",
     "errorMessage")(
    lambda e: abi.call("errorFreeVerboseMessage", e.own(ffi.new("char[]", b"not from the library"))))
case("QNNEMU-globalConfigSet-option", Q.QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG, "globalConfigSet",
     "config[0].option")(
    lambda e: abi.call("globalConfigSet", e.configs("QnnGlobalConfig_t", option=BOGUS)))

# ---- entries not implemented yet (one representative; every entry is checked below)
case("QNNEMU-not-supported", Q.QNN_BACKEND_ERROR_NOT_SUPPORTED, "backendRegisterOpPackage", "not supported")(
    lambda e: abi.call("backendRegisterOpPackage", vp(e.be), abi.cstr("libOps.so", e.keep),
                       abi.cstr("ProviderFn", e.keep), NULL))


@pytest.mark.parametrize("c", CASES)
def test_rule(env, c: Case):
    env.rec.assert_rule(c.trigger(env), c.code, c.rule, c.func, c.path)


def test_every_core_and_abi_rule_has_a_case():
    """Every rule id raised in qnnemu/core, qnnemu/abi and qnnemu/htp is registered and has a
    negative test: a case above, or the negative table of its feature's test module (memory
    handles, profiling, the System library, context binaries, sections, signals, HTP configs, ...).
    The ids are read from the sources and the tests by tests/rule_scan.py (the criterion is in
    tests/test_rule_registry.py's docstring), so no test module imports another for its table."""
    import rule_scan

    from qnnemu.rules import RULES
    layers = ("qnnemu/core/", "qnnemu/abi/", "qnnemu/htp/")
    found = {rule for rule, places in rule_scan.raised_ids().items()
             if any(p.startswith(layers) for p in places)}
    stale = {p.values[0].rule for p in CASES} - set(rule_scan.raised_ids())
    assert not stale, f"cases here for rule ids qnnemu no longer raises: {sorted(stale)}"
    unregistered = sorted(found - set(RULES))
    assert not unregistered, f"rule ids raised in core/abi/htp but not registered: {unregistered}"
    untested = sorted(rule for rule in found if not rule_scan.is_tested(rule))
    assert not untested, f"rule ids without a negative test: {untested}"


# ------------------------------------------------------------------------- core-level rules
CORE_LEVEL_RULES = {"QNNEMU-op-param-tensor-null", "QNNEMU-op-run-shape"}


def test_rule_op_param_tensor_null_core_level():
    """QNNEMU-op-param-tensor-null is unreachable through the ABI: marshal.read_op_config always
    copies a tensor parameter's Qnn_Tensor_t (it is embedded in Qnn_Param_t, never NULL), so the
    rule is tested on the core's parse_params."""
    from qnnemu.core.graph import OpConfigDesc, ParamDesc, parse_params
    from qnnemu.errors import QnnError
    cfg = OpConfigDesc(1, "n", "qti.aisw", "Relu", [ParamDesc("w", "tensor", tensor=None)], [], [])
    with pytest.raises(QnnError) as info:
        parse_params(cfg, "graphAddNode", Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG)
    err = info.value
    assert err.code == Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, "op-param-tensor-null: error code"
    assert err.rule == "QNNEMU-op-param-tensor-null", "op-param-tensor-null: rule id"
    assert "graphAddNode" in str(err) and "opConfig.v1.params[0].tensorParam" in str(err), \
        "op-param-tensor-null: message names the function and the parameter path"


@pytest.mark.parametrize("op_type", ["Relu", "Lstm"])
def test_rule_op_run_shape_core_level(op_type):
    """QNNEMU-op-run-shape (Op.run in qnnemu/ops/base.py, Lstm.run in qnnemu/ops/lstm.py) guards
    the kernels against an array whose shape is not the declared one; graphExecute checks every
    buffer's size against its tensor first (QNNEMU-graphExecute-buffer-size), so the op's copy is
    tested on the op: the rule id, the input's path and both shapes."""
    from qnnemu import ops
    from qnnemu.errors import OpCheckError
    cls = ops.get(op_type)
    op = cls({}, [ops.TensorSpec((2, 3), F32)], [])
    with pytest.raises(OpCheckError) as info:
        op.run(np.zeros((3, 2), np.float32))
    err = info.value
    assert err.rule == "QNNEMU-op-run-shape", f"{op_type}.run: rule id {err.rule!r}"
    assert err.path == "inputTensors[0]", f"{op_type}.run: the path names the input: {err.path!r}"
    assert "[3, 2]" in str(err) and "[2, 3]" in str(err), f"{op_type}.run: the message gives both shapes: {err}"


def test_rule_graph_execute_not_finalized_core_level():
    """Graph.execute repeats QNNEMU-graphExecute-not-finalized as a guard; the ABI entry checks
    first (tested above), so the core's copy is tested directly."""
    from qnnemu.core.graph import Graph
    from qnnemu.errors import QnnError
    with pytest.raises(QnnError) as info:
        Graph(None, "core").execute({}, [])
    assert info.value.code == Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, "core execute before finalize: code"
    assert info.value.rule == "QNNEMU-graphExecute-not-finalized", "core execute before finalize: rule id"
    assert "graphExecute" in str(info.value), "core execute before finalize: message names the function"


# ------------------------------------------------------------------------------ error texts
def test_error_get_message_returns_last_message(env):
    code = abi.create("graphRetrieve", vp(env.ctx), abi.cstr("missing-graph", env.keep))[0]
    assert code == Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, "graphRetrieve of an unknown name"
    out = ffi.new("const char **")
    assert abi.call("errorGetMessage", code, out) == Q.QNN_SUCCESS, "errorGetMessage of a failed call's code"
    text = ffi.string(out[0]).decode()
    assert "QNNEMU-graphRetrieve-name" in text and "missing-graph" in text, \
        f"errorGetMessage must return the last message for the code: {text!r}"
    # A later failure with the same code replaces it.
    abi.create("graphRetrieve", vp(env.ctx), abi.cstr("second-missing", env.keep))
    assert abi.call("errorGetMessage", code, out) == Q.QNN_SUCCESS, "errorGetMessage again"
    assert "second-missing" in ffi.string(out[0]).decode(), "errorGetMessage: the newest message wins"


def test_error_verbose_message_round_trip(env):
    code = abi.call("graphFinalize", vp(env.g), NULL, NULL)
    assert code == Q.QNN_GRAPH_ERROR_FINALIZE_FAILED, "graphFinalize of an empty graph"
    out = ffi.new("const char **")
    assert abi.call("errorGetVerboseMessage", code, out) == Q.QNN_SUCCESS, "errorGetVerboseMessage"
    text = ffi.string(out[0]).decode()
    assert "QNNEMU-graphFinalize-empty" in text and str(code) in text, f"verbose message: {text!r}"
    assert abi.call("errorFreeVerboseMessage", out[0]) == Q.QNN_SUCCESS, "errorFreeVerboseMessage"
    env.rec.clear()
    again = abi.call("errorFreeVerboseMessage", out[0])
    assert again == Q.QNN_ERROR_INVALID_ARGUMENT, "double errorFreeVerboseMessage must be refused"
    assert env.messages_for("QNNEMU-errorFreeVerboseMessage-unknown"), "double free logs its rule"
    assert abi.call("errorGetVerboseMessage", code, NULL) == Q.QNN_ERROR_INVALID_ARGUMENT, \
        "errorGetVerboseMessage with a NULL output is refused"


# -------------------------------------------------------------------------------- property
@pytest.mark.parametrize("key,want", [
    (Q.QNN_PROPERTY_GROUP_CORE, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_GROUP_DEVICE, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_GRAPH_SUPPORT_EXECUTE, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_GRAPH_SUPPORT_SUBGRAPH, Q.QNN_PROPERTY_NOT_SUPPORTED),
    (Q.QNN_PROPERTY_GRAPH_SUPPORT_ASYNC_EXECUTION, Q.QNN_PROPERTY_NOT_SUPPORTED),
    (Q.QNN_PROPERTY_CONTEXT_SUPPORT_CACHING, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_CONTEXT_SUPPORT_CREATE_FROM_BINARY_LIST_ASYNC, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_SECTION_UPDATES, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_SIGNAL_SUPPORT_TIMEOUT, Q.QNN_PROPERTY_SUPPORTED),
    (Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_MEMORY_LIMIT_HINT, Q.QNN_PROPERTY_SUPPORTED),
    (0xDEADBEE, Q.QNN_PROPERTY_ERROR_UNKNOWN_KEY),
], ids=["group-core", "group-device", "graph-execute", "unsupported-subgraph", "unsupported-async",
        "context-caching", "list-async", "binary-section-updates", "signal-timeout",
        "memory-limit-hint-graph-switching", "unknown-key"])
def test_property_has_capability(key, want):
    assert abi.call("propertyHasCapability", key) == want, f"propertyHasCapability({key})"


# ----------------------------------------------------------------------- not implemented yet
NOT_SUPPORTED = {
    "backendRegisterOpPackage": Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
    # backendRegisterOpPackageFromBinary, contextAddToDlc check their handles first (as the
    # vendor's library does): tests/test_qnn250_entries.py
    **dict.fromkeys(("graphCreateSubgraph", "graphPrepareExecutionEnvironment",
                     "graphReleaseExecutionEnvironment"), Q.QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE),
}


# cffi's ABI mode cannot pass structs holding anonymous unions (QnnContext_Buffer_t) by value;
# a same-size struct of words is passed identically when larger than 16 bytes (in memory).
ffi.cdef("typedef struct { uint64_t w[4]; } abi_Blob32_t;")


def call_with_zeros(fn, first=None) -> int:
    """Calls a table entry with NULL / 0 for every parameter (by-value structs zero-filled);
    ``first``: a handle value for the first parameter instead."""
    ftype = ffi.typeof(fn)
    params, args = [], []
    for t in ftype.args:
        if t.kind == "struct":
            assert ffi.sizeof(t) == 32, f"no by-value stand-in for {t.cname}"
            params.append("abi_Blob32_t")
            args.append(ffi.new("abi_Blob32_t *")[0])
        else:
            params.append(t.cname)
            args.append(NULL if t.kind in ("pointer", "function") else 0)
    if first is not None:
        args[0] = vp(first)
    fn = ffi.cast(f"{ftype.result.cname}(*)({', '.join(params)})", fn)
    return int(fn(*args))


# Entries that check their handle before answering (as the vendor's library does; the handle
# codes: tests/test_handle_audit.py): called with a live handle of the env.
LIVE_FIRST = {"backendRegisterOpPackage": "be", "graphPrepareExecutionEnvironment": "g",
              "graphReleaseExecutionEnvironment": "g"}


@pytest.mark.parametrize("name", sorted(NOT_SUPPORTED))
def test_not_implemented_entry(env, name):
    fn = getattr(abi.table(), name)
    assert fn != NULL, f"{name}: the table slot must be filled (with a NOT_SUPPORTED answer)"
    code = call_with_zeros(fn, getattr(env, LIVE_FIRST[name]) if name in LIVE_FIRST else None)
    assert code != Q.QNN_SUCCESS, f"{name}: an unimplemented entry must not return QNN_SUCCESS"
    assert code == NOT_SUPPORTED[name], f"{name}: returned {code}, expected {NOT_SUPPORTED[name]}"
    msgs = env.messages_for("QNNEMU-not-supported")
    assert msgs and name in msgs[-1] and "not supported" in msgs[-1], \
        f"{name}: the log must say the entry is not supported: {env.rec.records}"


def test_implemented_and_unimplemented_cover_the_table():
    names = [n for n, _ in ffi.typeof("QnnInterface_ImplementationV2_39_t").fields]
    assert len(names) == 75, "QnnInterface_ImplementationV2_39_t has 75 entries"
    assert all(getattr(abi.table(), n) != NULL for n in names), "every table slot is filled"
    assert set(NOT_SUPPORTED) <= set(names), "not-implemented entries are table entries"


# -------------------------------------------------------------------------------- device info
HTP_ARCHS = {68, 69, 73, 75, 79, 81}


def test_device_get_platform_info(env):
    out = ffi.new("const QnnDevice_PlatformInfo_t **")
    assert abi.call("deviceGetPlatformInfo", vp(env.log), out) == Q.QNN_SUCCESS, "deviceGetPlatformInfo"
    info = out[0]
    assert info.version == Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1, "platform info is v1"
    assert info.v1.numHwDevices == 1, "one HTP device"
    hw = info.v1.hwDevices[0]
    assert hw.version == Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1, "hardware device info is v1"
    assert hw.v1.numCores >= 1 and hw.v1.cores != NULL, "the device has cores"
    assert hw.v1.deviceInfoExtension != NULL, "deviceInfoExtension is set"
    ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", hw.v1.deviceInfoExtension)
    assert ext.devType == Q.QNN_HTP_DEVICE_TYPE_ON_CHIP, "devType is ON_CHIP"
    assert int(ext.onChipDevice.arch) in HTP_ARCHS, f"arch {int(ext.onChipDevice.arch)} is an HTP arch"
    assert ext.onChipDevice.vtcmSize > 0, "VTCM size is reported"
    assert abi.call("deviceFreePlatformInfo", vp(env.log), out[0]) == Q.QNN_SUCCESS, "deviceFreePlatformInfo"
    assert abi.call("deviceFreePlatformInfo", vp(env.log), out[0]) == Q.QNN_DEVICE_ERROR_INVALID_ARGUMENT, \
        "freeing the platform info twice is refused"


def test_device_get_info_matches_device(env):
    out = ffi.new("const QnnDevice_PlatformInfo_t **")
    assert abi.call("deviceGetInfo", vp(env.dev), out) == Q.QNN_SUCCESS, "deviceGetInfo"
    ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", out[0].v1.hwDevices[0].v1.deviceInfoExtension)
    assert int(ext.onChipDevice.arch) in HTP_ARCHS, "deviceGetInfo: HTP arch"
    assert abi.call("deviceFreePlatformInfo", NULL, out[0]) == Q.QNN_SUCCESS, "deviceFreePlatformInfo"


def test_device_infrastructure_power_votes(env):
    out = ffi.new("QnnHtpDevice_Infrastructure_t **")
    assert abi.call("deviceGetInfrastructure", out) == Q.QNN_SUCCESS, "deviceGetInfrastructure"
    assert out[0].infraType == Q.QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_PERF, "infraType is PERF"
    perf = out[0].perfInfra
    pid = ffi.new("uint32_t *")
    assert perf.createPowerConfigId(0, 0, pid) == Q.QNN_SUCCESS, "createPowerConfigId"
    cfg = ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *")
    cfg.option = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWER_CONFIGOPTION_DCVS_V3
    d = cfg.dcvsV3Config
    d.contextId = pid[0]
    d.setDcvsEnable, d.dcvsEnable = 1, 0
    d.powerMode = Q.QNN_HTP_PERF_INFRASTRUCTURE_POWERMODE_PERFORMANCE_MODE
    d.setSleepLatency, d.sleepLatency = 1, 40
    d.setBusParams = d.setCoreParams = 1
    d.busVoltageCornerMin = d.busVoltageCornerTarget = d.busVoltageCornerMax = Q.DCVS_VOLTAGE_VCORNER_TURBO
    d.coreVoltageCornerMin = d.coreVoltageCornerTarget = d.coreVoltageCornerMax = Q.DCVS_VOLTAGE_VCORNER_TURBO
    keep: list = [cfg]
    assert perf.setPowerConfig(pid[0], abi.null_terminated("QnnHtpPerfInfrastructure_PowerConfig_t", [cfg], keep)) \
        == Q.QNN_SUCCESS, "setPowerConfig with a DCVS v3 vote"
    assert perf.destroyPowerConfigId(pid[0]) == Q.QNN_SUCCESS, "destroyPowerConfigId"
    env.rec.clear()
    assert perf.destroyPowerConfigId(pid[0]) == Q.QNN_SUCCESS, \
        "destroying an already destroyed power config id is accepted (the vendor's library does)"
    assert env.messages_for("QNNEMU-perf-destroy-unknown"), "with its warning rule"


# ------------------------------------------------------- loggers, device configs, validate codes
def test_errors_reach_the_logger_of_the_objects_backend(env):
    own = abi.LogRecorder()
    code, log1 = abi.create("logCreate", own.callback, Q.QNN_LOG_LEVEL_DEBUG)
    code, be1 = abi.create("backendCreate", vp(log1), NULL)
    code, ctx1 = abi.create("contextCreate", vp(be1), NULL, NULL)
    other = abi.LogRecorder()
    code, log2 = abi.create("logCreate", other.callback, Q.QNN_LOG_LEVEL_DEBUG)  # a second app logger
    own.clear()
    try:
        assert abi.create("graphRetrieve", vp(ctx1), abi.cstr("nope", env.keep))[0] == \
            Q.QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST, "graphRetrieve of an unknown name"
        assert any("QNNEMU-graphRetrieve-name" in m for m in own.messages()), \
            f"the failure must reach the context's backend logger; it went to the newest logger: {other.records}"
    finally:
        abi.call("contextFree", vp(ctx1), NULL)
        abi.call("backendFree", vp(be1))
        abi.call("logFree", vp(log2))
        abi.call("logFree", vp(log1))


def _device_arch(dev: int) -> int:
    out = ffi.new("const QnnDevice_PlatformInfo_t **")
    assert abi.call("deviceGetInfo", vp(dev), out) == Q.QNN_SUCCESS, "deviceGetInfo"
    arch = int(ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *",
                        out[0].v1.hwDevices[0].v1.deviceInfoExtension).onChipDevice.arch)
    assert abi.call("deviceFreePlatformInfo", NULL, out[0]) == Q.QNN_SUCCESS, "deviceFreePlatformInfo"
    return arch


def test_device_set_config_keeps_the_soc(env):
    code, dev = abi.create("deviceCreate", vp(env.log), env.htp_device_config(
        Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, socModel=Q.QNN_SOC_MODEL_SM8650))
    assert code == Q.QNN_SUCCESS, "deviceCreate with SoC SM8650"
    try:
        assert _device_arch(dev) == 75, "SM8650 is HTP v75"
        signed = env.htp_device_config(Q.QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD)
        assert abi.call("deviceSetConfig", vp(dev), signed) == Q.QNN_SUCCESS, "deviceSetConfig(SIGNEDPD)"
        assert _device_arch(dev) == 75, "deviceSetConfig(SIGNEDPD) must not change the SoC/arch"
    finally:
        abi.call("deviceFree", vp(dev))


def test_backend_validate_op_config_returns_backend_codes(env):
    x = abi.tensor("x", (2, 3))
    y = abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    op = abi.op_config("n", "Relu", [x], [y])
    op.ptr.v1.numOfParams = 1  # with params == NULL
    code = abi.call("backendValidateOpConfig", vp(env.be), op)
    assert code != Q.QNN_SUCCESS, "backendValidateOpConfig with params NULL and numOfParams 1 is refused"
    assert Q.QNN_BACKEND_MIN_ERROR <= code <= Q.QNN_BACKEND_MAX_ERROR or code < 2000, \
        f"backendValidateOpConfig must answer a QnnBackend (or common) code, got {code}"
