"""Warning rules (qnnemu/rules.py, docs/validation.md): what qnnemu tolerates as the vendor's
HTP backend does, through the C ABI.

One case per registered warning rule -- backend, device, perf infrastructure, graph and context
configs, context binaries, profiling, tensors, op parameters and ops: the call sequence
succeeds, the rule reaches the app's QnnLog callback at QNN_LOG_LEVEL_WARN naming the function
and the parameter path, no error rule fires (``abi.LogRecorder.assert_warning``), and the
tolerated value has the documented effect.  This is the one place each warning rule's contract
is checked; ``test_every_warning_rule_has_a_case`` keeps the table in step with
``WARNING_RULES`` and ``test_validation_doc_lists_the_warning_rules`` docs/validation.md.
Every case names its SoC (the default device is not assumed).
"""
from __future__ import annotations

import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp

from qnnemu.core import binary
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import perf as P, settings, soc as socs
from qnnemu.htp.perf import PERF
from qnnemu.rules import WARNING_RULES, warning_rules_table

pytestmark = pytest.mark.usefixtures("qnn_abi")
OK = Q.QNN_SUCCESS
MIB = 1 << 20
SM8550, SM8650, SM8750, SM8850 = (Q.QNN_SOC_MODEL_SM8550, Q.QNN_SOC_MODEL_SM8650, Q.QNN_SOC_MODEL_SM8750,
                                  Q.QNN_SOC_MODEL_SM8850)
F32, F16, U32, I32, B8 = (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_UINT_32,
                          Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_BOOL_8)
OPT = "QNN_HTP_GRAPH_OPTIMIZATION_TYPE_"
P0 = "config[0].customConfig"
LPAI = -1   # a Case on libQnnLpaiEmu.so (abi.LpaiSession) instead of an HTP SoC
_CALLBACKS: list = []   # C callbacks stay alive for the whole process


@dataclass
class Case:
    rule: str
    soc: int
    func: str
    path: str
    trigger: Callable[[abi.Session], int]      # returns the code of the call that warns
    effect: Callable[[abi.Session], None] | None = None   # checks the tolerated value's effect


CASES: list = []


def case(rule: str, soc: int, func: str, path: str, effect=None, id=None):
    def deco(fn):
        CASES.append(pytest.param(Case(rule, soc, func, path, fn, effect), id=id or rule))
        return fn
    return deco


def _expect(cond: bool, what: str) -> None:
    assert cond, what


def later(s: abi.Session, fn) -> None:
    """Runs ``fn`` when the case ends (before the session closes; last registered first)."""
    s.cleanups.append(fn)


def graph_of(s: abi.Session, name: str = "g"):
    ctx = HANDLES.lookup(s.ctx)
    return ctx.graphs[name]


def settings_of(s: abi.Session, name: str = "g") -> settings.GraphSettings:
    return settings.graph_settings(graph_of(s, name))


def opt(type_name: str, value: float) -> dict:
    return {"opt": (getattr(Q, OPT + type_name), value)}


def graph_with(s: abi.Session, option: str, **fields) -> int:
    """graphCreate('g') with one HTP custom config; a Relu then finalizes and executes, so the
    tolerated value is also prepared with."""
    codes = s.relu_graph(s.graph_custom(getattr(Q, f"QNN_HTP_GRAPH_CONFIG_OPTION_{option}"), **fields))
    assert codes[1:] == (OK,) * (len(codes) - 1), f"{option}: the graph is built and executed: {codes}"
    return codes[0]


# ---- backend ------------------------------------------------------------------------------
@case("QNNEMU-backend-config-custom-ignored", SM8550, "backendCreate", "config[0].customConfig")
def _(s):
    c = s.own(ffi.new("QnnBackend_Config_t *"))
    c.option, c.customConfig = Q.QNN_BACKEND_CONFIG_OPTION_CUSTOM, s.own(ffi.new("uint32_t[4]"))
    code, be = s.lib.create("backendCreate", vp(s.log), s.list("QnnBackend_Config_t", c))
    if code == OK:
        later(s, lambda: s.call("backendFree", vp(be)))
        assert s.call("contextCreate", vp(be), vp(s.dev), NULL, s.own(ffi.new("Qnn_ContextHandle_t *"))) == OK, \
            "the backend works"
    return code


@case("QNNEMU-backend-free-contexts-alive", SM8550, "backendFree", "backend",
      effect=lambda s: _expect(HANDLES.lookup(s.freed_ctx) is None, "the context is freed with the backend"))
def _(s):
    code, be = s.lib.create("backendCreate", vp(s.log), NULL)
    assert code == OK, "setup: backendCreate"
    code, ctx = s.lib.create("contextCreate", vp(be), vp(s.dev), NULL)
    assert code == OK, "setup: contextCreate"
    s.freed_ctx = ctx
    return s.call("backendFree", vp(be))


# ---- library layout (qnnemu/abi/library_copies.py; tests/test_library_layout.py) ------------
_COPY: list = []


def second_copy() -> abi.Library:
    """The library copied to a directory of its own and loaded (once) beside the first copy."""
    if not _COPY:
        import shutil
        import tempfile
        path = pathlib.Path(tempfile.mkdtemp(prefix="qnnemu-second-copy-")) / "libQnnHtp.so"
        shutil.copy(abi.library_path(), path)
        _COPY.append(abi.Library(str(path)))
    return _COPY[0]


@case("QNNEMU-library-second-copy", SM8550, "deviceCreate", "library")
def _(s):
    code, dev = second_copy().create("deviceCreate", vp(s.log), NULL)
    if code == OK:
        later(s, lambda: s.call("deviceFree", vp(dev)))
    return code


# ---- weight sharing limits (qnnemu/core/binary/writer.py; tests/test_binary_weight_sharing.py) --
def weight_sharing_binary(s: abi.Session, graphs: int, vtcm_mb=()) -> int:
    """A WEIGHT_SHARING_ENABLED context with ``graphs`` Relu graphs (graph i with VTCM_SIZE
    ``vtcm_mb[i]`` when given), finalized; the code of contextGetBinarySize."""
    code, ctx = s.context(s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED,
                                           weightSharingEnabled=True))
    assert code == OK, "setup: a weight-sharing context"
    for i in range(graphs):
        configs = ([s.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE, vtcmSizeInMB=vtcm_mb[i])]
                   if i < len(vtcm_mb) else [])
        codes = s.relu_graph(*configs, name=f"g{i}", ctx=ctx, execute=False)
        assert codes == (OK,) * len(codes), f"setup: graph {i}: {codes}"
    size = s.own(ffi.new("Qnn_ContextBinarySize_t *"))
    return s.call("contextGetBinarySize", vp(ctx), size)


@case("QNNEMU-binary-weight-sharing-graphs", SM8550, "contextGetBinarySize", "context")
def _(s):
    return weight_sharing_binary(s, 65)


@case("QNNEMU-binary-weight-sharing-arch", Q.QNN_SOC_MODEL_SM8350, "contextGetBinarySize", "context")
def _(s):
    return weight_sharing_binary(s, 2)


@case("QNNEMU-binary-weight-sharing-vtcm", SM8550, "contextGetBinarySize", "context")
def _(s):
    return weight_sharing_binary(s, 2, vtcm_mb=(2, 4))


# ---- FILE_READ_MEMORY_BUDGET at contextCreateFromBinary (qnnemu/abi/context_api.py; bin helper) ---
def _budget_load(s: abi.Session, budget_mb: int, mapped: bool) -> int:
    """A binary with a 1 MiB weight loaded with FILE_READ_MEMORY_BUDGET ``budget_mb`` from an
    mmapped file (``mapped``) or a heap buffer, with a profile whose read events ``effect`` checks."""
    import tempfile
    code, g = s.graph("g")
    x, w = abi.tensor("x", (1, 512)), abi.static_tensor("w", np.ones((512, 512), np.float32))
    y = abi.tensor("y", (1, 512), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    assert code == OK and all(s.tensor(g, t) == OK for t in (x, w, y)), "setup: a graph with a weight"
    assert s.node(g, abi.op_config("fc", "FullyConnected", [x, w], [y])) == OK and s.finalize(g) == OK, "setup"
    blob = context_binary(s)
    if mapped:
        folder = tempfile.TemporaryDirectory()   # removed when the case ends
        later(s, folder.cleanup)
        path = pathlib.Path(folder.name) / "model.bin"
        path.write_bytes(blob)
        data = s.own(np.memmap(path, dtype=np.uint8, mode="r"))
        ptr = s.own(ffi.from_buffer(data))
    else:
        ptr = s.own(ffi.new("char[]", blob))
    prof = s.own(ffi.new("Qnn_ProfileHandle_t *"))
    assert s.call("profileCreate", vp(s.be), Q.QNN_PROFILE_LEVEL_BASIC, prof) == OK, "setup: profileCreate"
    later(s, lambda: s.call("profileFree", prof[0]))
    s.budget_profile = prof[0]
    cfg = s.list("QnnContext_Config_t", s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET,
                                                         fileReadMemoryBudgetInMb=budget_mb))
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    code = s.call("contextCreateFromBinary", vp(s.be), vp(s.dev), cfg, ptr, len(blob), out, prof[0])
    if code == OK:
        later(s, lambda: s.call("contextFree", out[0], NULL))
    return code


def _read_at_once(s: abi.Session) -> None:
    """The binary was read at once: two reads (the payload CRC, the copy of the data section)."""
    ids, n = ffi.new("const QnnProfile_EventId_t **"), ffi.new("uint32_t *")
    assert s.call("profileGetEvents", s.budget_profile, ids, n) == OK, "profileGetEvents"
    values = {}
    for i in range(n[0]):
        data = ffi.new("QnnProfile_EventData_t *")
        assert s.call("profileGetEventData", ids[0][i], data) == OK, "profileGetEventData"
        values[ffi.string(data.identifier).decode()] = int(data.value)
    assert values.get("Binary read: reads") == 2 and values["Binary read: largest read (bytes)"] > 1 << 20, \
        f"the budget took no effect: the binary was read at once ({values})"


@case("QNNEMU-context-file-read-budget-zero", SM8550, "contextCreateFromBinary",
      "config.customConfig.fileReadMemoryBudgetInMb", effect=_read_at_once)
def _(s):
    return _budget_load(s, 0, mapped=True)


@case("QNNEMU-context-file-read-budget-clipped", SM8550, "contextCreateFromBinary",
      "config.customConfig.fileReadMemoryBudgetInMb", effect=_read_at_once)
def _(s):
    return _budget_load(s, 4096, mapped=True)


@case("QNNEMU-context-file-read-budget-not-mmapped", SM8550, "contextCreateFromBinary", "binaryBuffer",
      effect=_read_at_once)
def _(s):
    return _budget_load(s, 1, mapped=False)


# ---- LoRA weight sharing (qnnemu/core/binary/lora.py; tests/test_lora_weight_sharing.py) --------
@case("QNNEMU-binary-lora-not-shared", SM8550, "contextCreateFromBinary",
      "config[].customConfig.loraWeightSharingEnabled")
def _(s):
    codes = s.relu_graph(execute=False)
    assert codes == (OK,) * len(codes), f"setup: a graph without LoRA weight sharing: {codes}"
    blob = context_binary(s)
    buf = s.own(ffi.from_buffer(blob))
    lora = s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED, loraWeightSharingEnabled=True)
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    code = s.call("contextCreateFromBinary", vp(s.be), vp(s.dev), s.list("QnnContext_Config_t", lora), buf,
                  len(blob), out, NULL)
    if code == OK:
        later(s, lambda: s.call("contextFree", out[0], NULL))
    return code


# ---- contextCreateFromBinaryWithCallback (qnnemu/abi/context_api.py) ---------------------------
@case("QNNEMU-context-dma-data-unaligned", SM8550, "contextCreateFromBinaryWithCallback",
      "callback.dmaBufferCallback.v1.dataProvide: dmaDataResponse")
def _(s):
    from qnnemu.core import binary as core_binary
    code, g = s.graph("g")
    x, w = abi.tensor("x", (2, 3)), abi.static_tensor("w", np.ones((2, 3), np.float32))
    y = abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    assert code == OK and all(s.tensor(g, t) == OK for t in (x, w, y)), "setup: a graph with a weight"
    assert s.node(g, abi.op_config("add", "ElementWiseAdd", [x, w], [y])) == OK and s.finalize(g) == OK, "setup"
    blob = context_binary(s)
    header = core_binary.parse_header(blob)

    def provide(req, resp, param):
        mem = ffi.new("char[]", 8192 + int(req.size))
        _CALLBACKS.append(mem)
        start = (-int(ffi.cast("uintptr_t", mem))) % 4096 + 8   # 8 bytes past a 4 KiB boundary
        ffi.memmove(mem + start, blob[int(req.offset):int(req.offset) + int(req.size)], int(req.size))
        resp.dmaBuffer.fd, resp.dmaBuffer.data = -1, mem
        resp.dataStartOffset, resp.alignedSize = start, 8192 + int(req.size)
        return OK

    cbs = [ffi.callback("Qnn_ErrorHandle_t(Qnn_ContextBinaryDataRequest_t, Qnn_ContextBinaryDmaDataResponse_t *, "
                        "void *)", provide),
           ffi.callback("Qnn_ErrorHandle_t(Qnn_ContextBinaryDmaDataMem_t, void *)", lambda mem, param: OK)]
    _CALLBACKS.extend(cbs)
    cb = s.own(ffi.new("Qnn_ContextBinaryCallback_t *"))
    cb.type = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER
    cb.dmaBufferCallback.version = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1
    cb.dmaBufferCallback.v1.dataProvide, cb.dmaBufferCallback.v1.dataRelease = cbs
    part = s.own(ffi.new("char[]", blob[:header.data_offset]))
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    code = s.call("contextCreateFromBinaryWithCallback", vp(s.be), vp(s.dev), NULL, cb, part, header.data_offset,
                  out, NULL, NULL)
    if code == OK:
        later(s, lambda: s.call("contextFree", out[0], NULL))
    return code


# ---- DLBC limitations (qnnemu/htp/settings.py, qnnemu/abi/context_api.py; tests/test_dlbc_rules.py) ----
SM8650 = Q.QNN_SOC_MODEL_SM8650


@case("QNNEMU-graph-dlbc-inputs-weight-sharing", SM8650, "graphCreate", f"{P0}.optimizationOption.floatValue")
def _(s):
    code, ctx = s.context(s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED,
                                           weightSharingEnabled=True))
    assert code == OK, "setup: a weight-sharing context"
    dlbc = s.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                          opt=(Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC, 1.0))
    codes = s.relu_graph(dlbc, ctx=ctx)
    assert codes[1:] == (OK,) * (len(codes) - 1), f"the graph is built and executed: {codes}"
    return codes[0]


@case("QNNEMU-context-group-dlbc", SM8650, "contextCreateFromBinary", "config")
def _(s):
    dlbc = s.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION,
                          opt=(Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC, 1.0))
    codes = s.relu_graph(dlbc, execute=False)
    assert codes == (OK,) * len(codes), "setup: a DLBC graph"
    blob = context_binary(s)
    buf = s.own(ffi.from_buffer(blob))
    group = s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS,
                             groupRegistration={"firstGroupHandle": NULL, "maxSpillFillBuffer": 1 << 20})
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    code = s.call("contextCreateFromBinary", vp(s.be), vp(s.dev), s.list("QnnContext_Config_t", group), buf,
                  len(blob), out, NULL)
    if code == OK:
        later(s, lambda: s.call("contextFree", out[0], NULL))
    return code


# ---- A16W16 (qnnemu/core/plan.py; tests/test_a16w16.py) ---------------------------------------
@case("QNNEMU-a16w16-weight-clipped", SM8550, "graphFinalize", "node 'fc' (FullyConnected) inputTensors[1]")
def _(s):
    code, g = s.graph("g")
    assert code == OK, "setup: graphCreate"
    x = abi.tensor("x", (1, 8), Q.QNN_DATATYPE_UFIXED_POINT_16, quant=(1 / 1000, -32768))
    w = abi.tensor("w", (4, 8), Q.QNN_DATATYPE_SFIXED_POINT_16, Q.QNN_TENSOR_TYPE_STATIC,
                   data=np.full((4, 8), 0x7FFF, np.int16), quant=(1 / 32768, 0))
    y = abi.tensor("y", (1, 4), Q.QNN_DATATYPE_UFIXED_POINT_16, type_=Q.QNN_TENSOR_TYPE_APP_READ,
                   quant=(32 / 65535, -32768))
    for t in (x, w, y):
        assert s.tensor(g, t) == OK, "setup: tensors"
    assert s.node(g, abi.op_config("fc", "FullyConnected", [x, w], [y])) == OK, "setup: graphAddNode"
    return s.finalize(g)


@case("QNNEMU-weight-axis-offset-ignored", SM8550, "graphFinalize",
      "node 'conv' (Conv2d) inputTensors[1].quantizeParams.axisScaleOffsetEncoding")
def _(s):
    code, g = s.graph("g")
    assert code == OK, "setup: graphCreate"
    x = abi.tensor("x", (1, 4, 4, 8), Q.QNN_DATATYPE_UFIXED_POINT_16, quant=(1 / 1000, -32768))
    w = abi.tensor("w", (1, 1, 8, 4), Q.QNN_DATATYPE_SFIXED_POINT_16, Q.QNN_TENSOR_TYPE_STATIC,
                   data=np.full((1, 1, 8, 4), 100, np.int16), quant=(1, 0))
    so = ffi.new("Qnn_ScaleOffset_t[]", 4)
    for k in range(4):
        so[k].scale, so[k].offset = 1 / 32768, -100 if k == 2 else 0
    _CALLBACKS.append(so)
    wq = w.v.quantizeParams
    wq.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
    wq.axisScaleOffsetEncoding.axis, wq.axisScaleOffsetEncoding.numScaleOffsets = 3, 4
    wq.axisScaleOffsetEncoding.scaleOffset = so
    y = abi.tensor("y", (1, 4, 4, 4), Q.QNN_DATATYPE_UFIXED_POINT_16, type_=Q.QNN_TENSOR_TYPE_APP_READ,
                   quant=(32 / 65535, -32768))
    for t in (x, w, y):
        assert s.tensor(g, t) == OK, "setup: tensors"
    assert s.node(g, abi.op_config("conv", "Conv2d", [x, w], [y])) == OK, "setup: graphAddNode"
    return s.finalize(g)


# ---- device -------------------------------------------------------------------------------
def device(s: abi.Session, *configs) -> tuple[int, int]:
    """deviceCreate with the HTP custom configs ``(option, fields)``; freed when the case ends."""
    made = [s.device_custom(option, **fields) for option, fields in configs]
    code, dev = s.lib.create("deviceCreate", vp(s.log), s.list("QnnDevice_Config_t", *made))
    if code == OK:
        s.extra_device = dev
        later(s, lambda: s.call("deviceFree", vp(dev)))
    return code, dev


def model_of(s: abi.Session):
    return HANDLES.lookup(s.extra_device).model


SOC, ARCH = Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC, Q.QNN_HTP_DEVICE_CONFIG_OPTION_ARCH
V73, V75 = Q.QNN_HTP_DEVICE_ARCH_V73, Q.QNN_HTP_DEVICE_ARCH_V75

case("QNNEMU-device-soc-unmodelled", SM8550, "deviceCreate", "config[0].customConfig.socModel",
     effect=lambda s: _expect(model_of(s).arch == V75, "SDM855 has no SoC row: the ARCH config chooses v75"))(
    lambda s: device(s, (SOC, dict(socModel=Q.QNN_SOC_MODEL_SDM855)), (ARCH, dict(arch={"arch": V75})))[0])
def described_device(s: abi.Session, soc: int, arch: int, vtcm_mb: int) -> int:
    """deviceCreate with only a PLATFORM_INFO description of one HTP device; freed when the case ends."""
    ext = s.own(ffi.new("QnnHtpDevice_DeviceInfoExtension_t *"))
    ext.onChipDevice.vtcmSize, ext.onChipDevice.socModel, ext.onChipDevice.arch = vtcm_mb, soc, arch
    core = s.own(ffi.new("QnnDevice_CoreInfo_t[]", 1))
    hw = s.own(ffi.new("QnnDevice_HardwareDeviceInfo_t[]", 1))
    hw[0].version, hw[0].v1.numCores, hw[0].v1.cores = Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1, 1, core
    hw[0].v1.deviceInfoExtension = ffi.cast("QnnDevice_DeviceInfoExtension_t", ext)
    info = s.own(ffi.new("QnnDevice_PlatformInfo_t *"))
    info.version, info.v1.numHwDevices, info.v1.hwDevices = Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1, 1, hw
    cfg = s.own(ffi.new("QnnDevice_Config_t *"))
    cfg.option, cfg.hardwareInfo = Q.QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO, info
    code, dev = s.lib.create("deviceCreate", vp(s.log), s.list("QnnDevice_Config_t", cfg))
    if code == OK:
        s.extra_device = dev
        later(s, lambda: s.call("deviceFree", vp(dev)))
    return code


case("QNNEMU-device-platform-info-not-emulated", SM8550, "deviceCreate",
     "config[0].hardwareInfo.v1.hwDevices[0].v1.deviceInfoExtension",
     effect=lambda s: _expect(model_of(s).soc_model == socs.DEFAULT_SOC,
                              "a description of SM8650: the emulated device stays the default"))(
    lambda s: described_device(s, SM8650, 75, 8))
case("QNNEMU-device-arch-ignored", SM8550, "deviceCreate", "config[0].customConfig.arch.arch",
     effect=lambda s: _expect(model_of(s).soc_model == socs.DEFAULT_SOC, "arch 99: the device stays the default"))(
    lambda s: device(s, (ARCH, dict(arch={"arch": 99})))[0])
case("QNNEMU-device-arch-overridden", SM8550, "deviceCreate", "config[1].customConfig.arch.arch",
     effect=lambda s: _expect((model_of(s).soc_model, model_of(s).arch) == (SM8550, V73), "the SoC wins: SM8550 v73"))(
    lambda s: device(s, (SOC, dict(socModel=SM8550)), (ARCH, dict(arch={"arch": V75})))[0])
case("QNNEMU-device-id-ignored", SM8550, "deviceCreate", "config[0].customConfig.arch.deviceId",
     effect=lambda s: _expect(model_of(s).arch == V75, "the ARCH option applies (SM8550 has one NSP device)"))(
    lambda s: device(s, (ARCH, dict(arch={"arch": V75, "deviceId": 1})))[0])


# ---- HTP performance infrastructure --------------------------------------------------------
class Perf:
    """The perf infrastructure of deviceGetInfrastructure; its ids are destroyed when the case
    ends (votes are process-wide)."""

    def __init__(self, s: abi.Session):
        out = s.own(ffi.new("QnnHtpDevice_Infrastructure_t **"))
        assert s.call("deviceGetInfrastructure", out) == OK, "setup: deviceGetInfrastructure"
        self.s, self.perf, self.ids = s, out[0].perfInfra, []
        later(s, self.close)

    def close(self) -> None:
        for pid in self.ids:
            if pid in PERF.configs:
                self.perf.destroyPowerConfigId(pid)

    def new_id(self) -> int:
        out = self.s.own(ffi.new("uint32_t *"))
        assert int(self.perf.createPowerConfigId(0, 0, out)) == OK, "setup: createPowerConfigId"
        self.ids.append(int(out[0]))
        return int(out[0])

    def set(self, pid: int, *entries) -> int:
        ptrs = []
        for option, value in entries:
            c = self.s.own(ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *"))
            c.option = option
            member = P.POWER_OPTION_FIELDS[option]
            if isinstance(value, dict):
                for k, v in value.items():
                    setattr(getattr(c, member), k, v)
            else:
                setattr(c, member, value)
            ptrs.append(c)
        return int(self.perf.setPowerConfig(pid, s_list(self.s, "QnnHtpPerfInfrastructure_PowerConfig_t", ptrs)))

    def memory(self, device_id: int, core_id: int, grow: int) -> int:
        m = self.s.own(ffi.new("QnnHtpPerfInfrastructure_MemoryConfig_t *"))
        m.option, m.memGrowSizeConfig = P.MEM_GROW_SIZE, grow
        return int(self.perf.setMemoryConfig(device_id, core_id,
                                             s_list(self.s, "QnnHtpPerfInfrastructure_MemoryConfig_t", [m])))


def s_list(s: abi.Session, ctype: str, items: list):
    return abi.null_terminated(ctype, items, s.keep)


def dcvs(pid: int, corners=("TURBO",) * 3, *, bus=None, enable: int = 0, mode: int = P.POWERMODE["PERFORMANCE_MODE"],
         latency: int = 100) -> tuple[int, dict]:
    """A DCVS v3 entry: core rail at ``corners`` (names or raw values), bus at ``bus`` (or the same)."""
    d = {"contextId": pid, "setDcvsEnable": 1, "dcvsEnable": enable, "powerMode": mode, "setSleepLatency": 1,
         "sleepLatency": latency, "setSleepDisable": 0, "sleepDisable": 0, "setBusParams": 1, "setCoreParams": 1}
    for rail, cs in (("core", corners), ("bus", bus or corners)):
        for k, c in zip(("Min", "Target", "Max"), cs):
            d[f"{rail}VoltageCorner{k}"] = P.VCORNER[c] if isinstance(c, str) else c
    return (P.OPT_DCVS_V3, d)


def hmx(corners=("TUR",) * 3, perf_mode: int = Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_HIGH) -> tuple[int, dict]:
    c = [P.EXP_VCORNER[x] for x in corners]
    return (P.OPT_HMX_V2, {"hmxPickDefault": 0, "hmxVoltageCornerMin": c[0], "hmxVoltageCornerTarget": c[1],
                           "hmxVoltageCornerMax": c[2], "hmxPerfMode": perf_mode})


def perf_case(rule: str, path: str, build, effect=None, func: str = "setPowerConfig"):
    """setPowerConfig on a new id (SM8650: HMX v2 and every legacy option) with ``build(pid)``;
    ``effect(vote of the id)`` checks what was recorded."""
    def trigger(s):
        p = Perf(s)
        s.pid = p.new_id()
        return p.set(s.pid, *build(s.pid))
    case(rule, SM8650, func, path,
         effect=None if effect is None else (lambda s: effect(PERF.configs[s.pid])))(trigger)


RPC_MAX = P.RPC_POLLING_MAX_US
perf_case("QNNEMU-perf-option-repeated", "config[1].option",
          lambda p: [(P.OPT_RPC_POLLING_TIME, 10), (P.OPT_RPC_POLLING_TIME, 20)],
          lambda c: _expect(c.rpc_polling_time_us == 20, "the later entry wins"))
perf_case("QNNEMU-perf-dcvs-power-mode", "config[0].dcvsV3Config.powerMode", lambda p: [dcvs(p, enable=1, mode=3)],
          lambda c: _expect(c.dcvs.power_mode == P.POWERMODE["ADJUST_UP_DOWN"], "modelled as ADJUST_UP_DOWN"))
perf_case("QNNEMU-perf-dcvs-sleep-latency", "config[0].dcvsV3Config.sleepLatency", lambda p: [dcvs(p, latency=5)],
          lambda c: _expect(c.dcvs.sleep_latency_us == P.SLEEP_LATENCY_RANGE_US[0], "clipped to the range"))
perf_case("QNNEMU-perf-dcvs-corner", "config[0].dcvsV3Config.coreVoltageCornerTarget",
          lambda p: [dcvs(p, ("SVS", 77, "TURBO"))],
          lambda c: _expect(c.dcvs.core[1] == max(v for v in P.VCORNER_NAME if v <= 77), "the corner below 77"))
perf_case("QNNEMU-perf-dcvs-corner-order", "config[0].dcvsV3Config.busVoltageCornerTarget",
          lambda p: [dcvs(p, bus=("TURBO", "NOM", "TURBO"))],
          lambda c: _expect(c.dcvs.bus == (P.VCORNER["TURBO"], P.VCORNER["NOM"], P.VCORNER["TURBO"]), "as given"))
perf_case("QNNEMU-perf-hmx-corner-order", "config[1].hmxV2Config.hmxVoltageCornerTarget",
          lambda p: [dcvs(p), hmx(("NOM", "SVS", "TUR"))],
          lambda c: _expect(c.hmx.corners == tuple(P.EXP_VCORNER[x] for x in ("NOM", "SVS", "TUR")), "as given"))
perf_case("QNNEMU-perf-perf-mode-clamped", "config[1].hmxV2Config.hmxPerfMode",
          lambda p: [dcvs(p), hmx(perf_mode=17)],
          lambda c: _expect(c.hmx.perf_mode == 17 and P.perf_mode_scale(17) == P.perf_mode_scale(
              Q.QNN_HTP_PERF_INFRASTRUCTURE_CLK_PERF_LOW), "recorded, clocked as LOW"))
perf_case("QNNEMU-perf-rpc-polling-range", "config[0].rpcPollingTimeConfig",
          lambda p: [(P.OPT_RPC_POLLING_TIME, RPC_MAX + 1)],
          lambda c: _expect(c.rpc_polling_time_us == RPC_MAX, "clipped to the maximum"))
perf_case("QNNEMU-perf-adaptive-polling-needs-rpc-polling", "config[0].adaptivePollingTimeConfig",
          lambda p: [(P.OPT_ADAPTIVE_POLLING, 1000)],
          lambda c: _expect(c.adaptive_polling_time_us == 1000, "recorded"))


@case("QNNEMU-perf-destroy-unknown", SM8650, "destroyPowerConfigId", "powerConfigId")
def _(s):
    return int(Perf(s).perf.destroyPowerConfigId(0x7FFFFFF0))


@case("QNNEMU-perf-memory-target", SM8650, "setMemoryConfig", "coreId",
      effect=lambda s: _expect(PERF.memory_grow_size(0, 5) == 4096, "recorded for core 5 as given"))
def _(s):
    return Perf(s).memory(0, 5, 4096)


# ---- graph configs --------------------------------------------------------------------------
case("QNNEMU-graph-hvx-threads-clipped", SM8550, "graphCreate", f"{P0}.numHvxThreads",
     effect=lambda s: _expect(settings_of(s).hvx_threads == 4, "SM8550 runs with its 4 HVX threads"))(
    lambda s: graph_with(s, "NUM_HVX_THREADS", numHvxThreads=8))


@case("QNNEMU-graph-hvx-threads-clipped", SM8850, "graphCreate", f"{P0}.numHvxThreads", id="hvx-threads-zero-v81",
      effect=lambda s: _expect(settings_of(s).hvx_threads == 8, "0 means the SoC's maximum: 8 on SM8850"))
def _(s):
    return graph_with(s, "NUM_HVX_THREADS", numHvxThreads=0)


case("QNNEMU-graph-dlbc-soc-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(not settings_of(s).dlbc, "no DLBC on SM8550: recorded without effect"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_DLBC", 1.0)))
case("QNNEMU-graph-slc-soc-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(not settings_of(s).slc_allocator, "no SLC allocator on SM8550"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_SLC_ALLOCATOR", 1.0)))
case("QNNEMU-graph-optimization-flag-default", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).optimization_level == 2, "level 2 (the default) is used"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("FINALIZE_OPTIMIZATION_FLAG", 4.0)))
case("QNNEMU-graph-optimization-value-coerced", SM8650, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).dlbc, "-1.0 truncates to -1: DLBC on (the vendor records htpDlbc 1)"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("ENABLE_DLBC", -1.0)))
case("QNNEMU-graph-schedule-threshold-ignored", SM8550, "graphCreate", f"{P0}.optimizationOption.floatValue",
     effect=lambda s: _expect(settings_of(s).schedule_threshold is None, "no threshold recorded"))(
    lambda s: graph_with(s, "OPTIMIZATION", **opt("SCHEDULE_THRESHOLD", -1.0)))
case("QNNEMU-graph-precision-ignored", SM8550, "graphCreate", f"{P0}.precision",
     effect=lambda s: _expect(not settings_of(s).precision_fp16, "FLOAT32 (the default) is used"))(
    lambda s: graph_with(s, "PRECISION", precision=7))
case("QNNEMU-graph-precision-deprecated", SM8550, "graphFinalize", "config[].customConfig.precision",
     effect=lambda s: _expect(graph_of(s).plan.fp16, "SM8550 computes the float32 graph in float16 math"))(
    lambda s: graph_with(s, "PRECISION", precision=Q.QNN_PRECISION_FLOAT32))
case("QNNEMU-graph-vtcm-clipped", SM8550, "graphCreate", f"{P0}.vtcmSizeInMB",
     effect=lambda s: _expect(settings_of(s).vtcm_bytes == 8 * MIB, "the SoC's 8 MiB is the budget"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_MB", vtcmSizeInMB=9))
case("QNNEMU-graph-vtcm-bytes-adjusted", SM8550, "graphCreate", f"{P0}.vtcmSizeInBytes",
     effect=lambda s: _expect(settings_of(s).vtcm_bytes == 64 * 1024, "1000 bytes round up to 64 KiB"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=1000))
case("QNNEMU-graph-vtcm-max-default", None, "graphCreate", f"{P0}.vtcmSizeInMB",
     effect=lambda s: _expect(settings_of(s).vtcm_source == "max", "MAX: the device's whole VTCM"))(
    lambda s: graph_with(s, "VTCM_SIZE_IN_MB", vtcmSizeInMB=Q.QNN_HTP_GRAPH_CONFIG_OPTION_MAX))
case("QNNEMU-graph-num-cores-clipped", SM8550, "graphCreate", f"{P0}.numCores",
     effect=lambda s: _expect(settings_of(s).num_cores == 1, "one core"))(
    lambda s: graph_with(s, "NUM_CORES", numCores=0))


@case("QNNEMU-graph-config-option-ignored", SM8550, "graphCreate", f"{P0}.option",
      effect=lambda s: _expect(not any("21" in k for k in graph_of(s).configs.get("htp", {})), "not recorded"))
def _(s):
    codes = s.relu_graph(s.graph_custom(21))   # a value QnnHtpGraph_ConfigOption_t does not define
    assert codes[1:] == (OK,) * (len(codes) - 1), f"the graph is built and executed: {codes}"
    return codes[0]


@case("QNNEMU-priority-level-mapped", SM8550, "graphCreate", "config[0].priority",
      effect=lambda s: _expect(graph_of(s).thread_priorities == (0xBB, 0xBC), "HIGH_PLUS runs with HIGH's row"))
def _(s):
    codes = s.relu_graph(s.graph_plain(Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY, priority=Q.QNN_PRIORITY_HIGH_PLUS))
    assert codes[1:] == (OK,) * (len(codes) - 1), f"the graph is built and executed: {codes}"
    return codes[0]


# ---- contexts and context binaries ------------------------------------------------------------
@case("QNNEMU-context-config-option-ignored", SM8550, "contextCreate", f"{P0}.option")
def _(s):
    code, ctx = s.context(s.context_custom(26))   # a value QnnHtpContext_ConfigOption_t does not define
    if code == OK:
        assert s.relu_graph(ctx=ctx)[-1] == OK, "the context works"
    return code


def _async_depth_effect(s):
    from qnnemu.abi import async_execute
    ctx = HANDLES.lookup(s.undefined_depth_ctx)
    _expect("asyncExecutionQueueDepth" not in ctx.configs, "the depth of a non-NUMERIC config is not recorded")
    _expect(async_execute._queue_of(ctx).depth == async_execute.DEFAULT_QUEUE_DEPTH,
            "graphExecuteAsync's queue has the default depth")


@case("QNNEMU-context-async-queue-depth-type-ignored", SM8550, "contextCreate", "config[0].asyncExeQueueDepth.type",
      effect=_async_depth_effect)
def _(s):
    c = s.context_plain(Q.QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH)
    c.asyncExeQueueDepth.type = Q.QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_UNDEFINED
    c.asyncExeQueueDepth.depth = 1
    code, s.undefined_depth_ctx = s.context(c)
    return code


def context_binary(s: abi.Session, ctx: int | None = None) -> bytes:
    ctx = ctx or s.ctx
    size = s.own(ffi.new("Qnn_ContextBinarySize_t *"))
    assert s.call("contextGetBinarySize", vp(ctx), size) == OK, "setup: contextGetBinarySize"
    buf = s.own(ffi.new("char[]", int(size[0])))
    written = s.own(ffi.new("Qnn_ContextBinarySize_t *"))
    assert s.call("contextGetBinary", vp(ctx), buf, int(size[0]), written) == OK, "setup: contextGetBinary"
    return bytes(ffi.buffer(buf, int(written[0])))


def load(s: abi.Session, blob: bytes, *configs, dev: int | None = None) -> tuple[int, int]:
    """contextCreateFromBinary of ``blob`` with ``configs``; the context is freed when the case ends."""
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    buf = s.own(ffi.new("char[]", blob))
    code = s.call("contextCreateFromBinary", vp(s.be), vp(s.dev if dev is None else dev),
                  s.list("QnnContext_Config_t", *configs), buf, len(blob), out, NULL)
    ctx = abi.hval(out[0])
    if code == OK:
        later(s, lambda: s.call("contextFree", vp(ctx), NULL))
    return code, ctx


def _group(s: abi.Session, first: int, size: int):
    reg = {"groupRegistration": {"firstGroupHandle": ffi.cast("Qnn_ContextHandle_t", first),
                                 "maxSpillFillBuffer": size}}
    return s.context_custom(Q.QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS, **reg)


@case("QNNEMU-context-group-spill-fill-ignored", SM8550, "contextCreateFromBinary",
      f"{P0}.groupRegistration.maxSpillFillBuffer",
      effect=lambda s: _expect(settings.spill_fill_buffer_bytes(HANDLES.lookup(s.second)) == 4096,
                               "the group's buffer keeps the first registration's 4096 bytes"))
def _(s):
    assert s.relu_graph(execute=False)[-1] == OK, "setup: a Relu graph"
    blob = context_binary(s)
    code, first = load(s, blob, _group(s, 0, 4096))
    assert code == OK, "setup: the group's first context"
    s.rec.clear()
    code, s.second = load(s, blob, _group(s, first, 8192))
    return code


@case("QNNEMU-binary-suboptimal-loaded", SM8550, "contextCreateFromBinary", "binaryBuffer",
      effect=lambda s: _expect(s.relu_loaded, "the loaded graph runs"))
def _(s):
    assert s.relu_graph(execute=False)[-1] == OK, "setup: a Relu graph prepared for SM8550"
    blob = context_binary(s)
    code, dev = device(s, (SOC, dict(socModel=SM8650)))
    assert code == OK, "setup: an SM8650 device"
    s.rec.clear()
    code, ctx = load(s, blob, dev=dev)
    if code == OK:
        g = s.own(ffi.new("Qnn_GraphHandle_t *"))
        s.relu_loaded = s.call("graphRetrieve", vp(ctx), abi.cstr("g", s.keep), g) == OK
    return code


class _FailingRelease:
    """DMA buffer callbacks: the provider hands out copies of the requested bytes, the release
    callback answers an error."""

    def __init__(self, blob: bytes):
        self.blob, self.buffers = blob, []
        self.provide = ffi.callback("Qnn_ContextBinaryDmaDataProviderFn_t", self._provide)
        self.release = ffi.callback("Qnn_ContextBinaryDmaDataReleaseFn_t", lambda mem, param: 1)
        _CALLBACKS.extend([self.provide, self.release])

    def _provide(self, req, resp, param):
        buf = ffi.new("char[]", self.blob[req.offset:req.offset + req.size])
        self.buffers.append(buf)
        resp.dmaBuffer.fd, resp.dmaBuffer.data = 40, buf
        resp.dataStartOffset, resp.alignedSize = 0, int(req.size)
        return OK


@case("QNNEMU-context-dma-release-failed", SM8550, "contextFree", "callback.dmaBufferCallback.v1.dataRelease")
def _(s):
    code, g = s.graph("w")
    x, w, y = abi.tensor("x", (2, 3)), abi.static_tensor("w", np.ones((2, 3), np.float32)), \
        abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    codes = [code, s.tensor(g, x), s.tensor(g, w), s.tensor(g, y),
             s.node(g, abi.op_config("add", "ElementWiseAdd", [x, w], [y])), s.finalize(g)]
    assert not any(codes), f"setup: a graph with a weight: {codes}"
    blob = context_binary(s)
    head = binary.parse_header(blob).data_offset
    dma = _FailingRelease(blob)
    cb = s.own(ffi.new("Qnn_ContextBinaryCallback_t *"))
    cb.type = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER
    cb.dmaBufferCallback.version = Q.QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1
    cb.dmaBufferCallback.v1.dataProvide, cb.dmaBufferCallback.v1.dataRelease = dma.provide, dma.release
    out = s.own(ffi.new("Qnn_ContextHandle_t *"))
    buf = s.own(ffi.new("char[]", blob[:head]))
    code = s.call("contextCreateFromBinaryWithCallback", vp(s.be), vp(s.dev), NULL, cb, buf, head, out, NULL, NULL)
    assert code == OK and dma.buffers, f"setup: loaded with the weights from the provider ({code})"
    return s.call("contextFree", out[0], NULL)


# ---- HTP scheduling (issue 14 item 2; qnnemu/core/scheduling.py) -----------------------------
def _yield_effect(s):
    out = s.preempted_out
    _expect(np.array_equal(out, s.solo_out), "the pre-empted execute's output is the solo execute's")
    _expect(graph_of(s).last_schedule.yields >= 1, "the execute's record counts its yields")


@case("QNNEMU-graphExecute-yielded", SM8550, "graphExecute", "graph 'g'", effect=_yield_effect)
def _(s):
    import threading
    import time

    from qnnemu.core import scheduling
    lib = pytest.importorskip("qnnemu._kernels").lib
    code, g = s.graph("g")
    assert code == OK, "setup: graphCreate"
    shape, n = (512, 512), 24
    ts = [abi.tensor(f"t{i}", shape, type_=Q.QNN_TENSOR_TYPE_APP_WRITE if i == 0 else
                     Q.QNN_TENSOR_TYPE_APP_READ if i == n else Q.QNN_TENSOR_TYPE_NATIVE) for i in range(n + 1)]
    for t in ts:
        assert s.tensor(g, t) == OK, "setup: tensor"
    for i in range(n):
        assert s.node(g, abi.op_config(f"r{i}", "Relu", [ts[i]], [ts[i + 1]])) == OK, "setup: node"
    assert s.finalize(g) == OK, "setup: graphFinalize"
    slot = scheduling.device_slot(HANDLES.lookup(s.ctx).device)
    import os  # the Python entry logs; the C fast path would run these executes silently
    previous = os.environ.get("QNNEMU_FAST_EXECUTE")
    os.environ["QNNEMU_FAST_EXECUTE"] = "0"
    later(s, lambda: os.environ.pop("QNNEMU_FAST_EXECUTE") if previous is None
          else os.environ.__setitem__("QNNEMU_FAST_EXECUTE", previous))
    s.preempted_in = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    s.solo_out = np.zeros(shape, np.float32)
    assert s.execute(g, [(ts[0], s.preempted_in)], [(ts[n], s.solo_out)]) == OK, "setup: a solo execute"
    done = threading.Event()

    def high_graph_arrivals():   # a HIGH execute arrives again and again while 'g' (NORMAL) runs
        rec = pytest.importorskip("qnnemu._kernels").ffi.new("qe_sched_exec *")
        while not done.is_set():
            lib.qe_sched_begin(rec, slot, 0xBB)
            time.sleep(0.001)
            lib.qe_sched_end(rec)
            time.sleep(0.001)
    th = threading.Thread(target=high_graph_arrivals)
    th.start()
    try:
        s.preempted_out = np.zeros(shape, np.float32)
        for _ in range(50):   # until one execute overlapped an arrival
            code = s.execute(g, [(ts[0], s.preempted_in)], [(ts[n], s.preempted_out)])
            if code != OK or graph_of(s).last_schedule.yields:
                break
    finally:
        done.set()
        th.join()
    return code


# ---- graph switching (issue 14 item 5; qnnemu/htp/switching.py) ------------------------------
def _weighted_binary(s: abi.Session, names=("a", "b")) -> bytes:
    """A binary of ElementWiseAdd graphs with a [2, 3] float32 weight each (64 bytes of own
    weights once padded)."""
    for name in names:
        code, g = s.graph(name)
        x, w, y = abi.tensor("x", (2, 3)), abi.static_tensor("w", np.full((2, 3), len(name), np.float32)), \
            abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
        codes = [code, s.tensor(g, x), s.tensor(g, w), s.tensor(g, y),
                 s.node(g, abi.op_config("add", "ElementWiseAdd", [x, w], [y])), s.finalize(g)]
        assert not any(codes), f"setup: graph {name} with a weight: {codes}"
    return context_binary(s)


def _names(s: abi.Session, items) -> object:
    return abi.null_terminated("char", [abi.cstr(n, s.keep) for n in items], s.keep)


def _switching_of(s: abi.Session):
    return HANDLES.lookup(s.loaded).switching


@case("QNNEMU-context-graph-switching-not-persistent", SM8550, "contextCreateFromBinary", "memoryLimitHint",
      effect=lambda s: _expect(_switching_of(s) is None, "no graph switching: every graph stays loaded"))
def _(s):
    blob = _weighted_binary(s)
    code, s.loaded = load(s, blob, s.context_plain(Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, memoryLimitHint=1))
    return code


@case("QNNEMU-context-retention-order-ignored", SM8550, "contextCreateFromBinary", "graphRetentionOrder",
      effect=lambda s: _expect(_switching_of(s) is None, "no low-memory mode: the retention order is disabled"))
def _(s):
    blob = _weighted_binary(s)
    code, s.loaded = load(s, blob, s.context_plain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=1),
                          s.context_plain(Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER,
                                          graphRetentionOrder=_names(s, ["a"])))
    return code


@case("QNNEMU-context-retention-not-preloaded", SM8550, "contextCreateFromBinary", "graphRetentionOrder",
      effect=lambda s: _expect(_switching_of(s).loaded == ["a"], "the retained graph that fits is preloaded"))
def _(s):
    from qnnemu.htp import runtime
    blob = _weighted_binary(s)
    # a session with room for the binary's resident part and one of its two graphs
    previous = runtime.use_sessions(runtime.SessionPool(va_bytes=(len(blob) - 64 + 32) * 16 // 15 + 16, limit=4))
    later(s, lambda: runtime.use_sessions(previous))
    code, s.loaded = load(s, blob, s.context_plain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=1),
                          s.context_plain(Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, memoryLimitHint=1),
                          s.context_plain(Q.QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER,
                                          graphRetentionOrder=_names(s, ["a", "b"])))
    return code


# ---- profiling ---------------------------------------------------------------------------------
@case("QNNEMU-profile-max-events-reached", SM8550, "graphExecute", "profile",
      effect=lambda s: _expect(s.events == 1, "one event kept"))
def _(s):
    out = s.own(ffi.new("Qnn_ProfileHandle_t *"))
    assert s.call("profileCreate", vp(s.be), Q.QNN_PROFILE_LEVEL_DETAILED, out) == OK, "setup: profileCreate"
    p = abi.hval(out[0])
    later(s, lambda: s.call("profileFree", vp(p)))
    c = s.own(ffi.new("QnnProfile_Config_t *"))
    c.option, c.numMaxEvents = Q.QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS, 1
    assert s.call("profileSetConfig", vp(p), s.list("QnnProfile_Config_t", c)) == OK, "setup: MAX_EVENTS 1"
    code, g = s.graph("g")
    x, y = abi.tensor("x", (2, 3)), abi.tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    assert not any((code, s.tensor(g, x), s.tensor(g, y), s.node(g, abi.op_config("r", "Relu", [x], [y])),
                    s.finalize(g))), "setup: a Relu graph"
    ins = [abi.Struct(ffi.new("Qnn_Tensor_t *", x.ptr[0]), [])]
    outs = [abi.Struct(ffi.new("Qnn_Tensor_t *", y.ptr[0]), [])]
    abi.set_buffer(ins[0], X23.copy())
    abi.set_buffer(outs[0], np.zeros((2, 3), np.float32))
    code = s.call("graphExecute", vp(g), abi.tensor_array(ins, s.keep), 1, abi.tensor_array(outs, s.keep), 1,
                  vp(p), NULL)
    ids, n = s.own(ffi.new("const QnnProfile_EventId_t **")), s.own(ffi.new("uint32_t *"))
    assert s.call("profileGetEvents", vp(p), ids, n) == OK, "profileGetEvents"
    s.events = int(n[0])
    return code


# ---- tensors -----------------------------------------------------------------------------
@case("QNNEMU-tensor-static-size-larger", SM8550, "tensorCreateGraphTensor", "tensor.v2.clientBuf.dataSize")
def _(s):
    code, g = s.graph("g")
    w = np.arange(6, dtype=np.float32)
    t = abi.tensor("w", (2, 3), type_=Q.QNN_TENSOR_TYPE_STATIC, data=np.concatenate([w, w]))
    code = s.tensor(g, t)
    assert code != OK or np.array_equal(graph_of(s).tensors[t.id].data, w.reshape(2, 3)), "the first bytes"
    return code


# ---- one node, built, finalized and executed ---------------------------------------------------
_SCALAR_MEMBER = {F32: "floatValue", U32: "uint32Value", I32: "int32Value", B8: "bool8Value"}


def sp(name: str, dtype: int, value):
    """A scalar parameter builder."""
    return lambda s, g: abi.scalar_param(name, dtype, _SCALAR_MEMBER[dtype], value)


def tp(name: str, array: np.ndarray):
    """A tensor parameter builder: its STATIC tensor is created in the graph first (as the vendor
    requires)."""
    def build(s, g):
        t = abi.static_tensor(f"p_{name}_{len(s.keep)}", array)
        assert s.tensor(g, t) == OK, f"setup: the tensor of parameter {name}"
        return abi.tensor_param(name, t)
    return build


def run_node(s: abi.Session, op: str, inputs, outputs, params=()) -> tuple[tuple[int, ...], list]:
    """graphCreate -> tensors -> node ``op`` -> graphFinalize -> graphExecute.

    ``inputs``: arrays (APP_WRITE, fed) or ``("static", array)``; ``outputs``: (shape, dtype[,
    (scale, offset)]).  Returns the codes of graphAddNode, graphFinalize, graphExecute (as far
    as they ran) and the outputs."""
    code, g = s.graph("g")
    assert code == OK, "setup: graphCreate"
    ins, feeds = [], []
    for k, a in enumerate(inputs):
        if isinstance(a, tuple):
            t = abi.static_tensor(f"in{k}", a[1])
        else:
            t = abi.tensor(f"in{k}", a.shape, I32 if a.dtype == np.int32 else F32)
            feeds.append((t, a))
        assert s.tensor(g, t) == OK, f"setup: input {k}"
        ins.append(t)
    outs, arrays = [], []
    for k, (shape, dtype, *quant) in enumerate(outputs):
        t = abi.tensor(f"out{k}", shape, dtype, type_=Q.QNN_TENSOR_TYPE_APP_READ, quant=quant[0] if quant else None)
        assert s.tensor(g, t) == OK, f"setup: output {k}"
        outs.append(t)
        arrays.append(np.zeros(shape, np.int8 if quant else np.float32))
    codes = [s.node(g, abi.op_config("n", op, ins, outs, [p(s, g) for p in params]))]
    for step in (lambda: s.finalize(g), lambda: s.execute(g, feeds, list(zip(outs, arrays)))):
        if codes[-1]:
            break
        codes.append(step())
    return tuple(codes), arrays


def node_case(rule: str, path: str, op: str, inputs, outputs, params=(), soc=SM8650, want=None):
    """A case whose graphAddNode warns; the node then finalizes and executes, and ``want(arrays
    in, outputs)`` (when given) checks what it computed."""
    def trigger(s):
        codes, out = run_node(s, op, inputs, outputs, params)
        assert codes[1:] == (OK,) * (len(codes) - 1) and len(codes) == 3, \
            f"{op}: the node finalizes and executes: {codes}; log {s.rec.errors()}"
        if want is not None:
            want(inputs, out)
        return codes[0]
    case(rule, soc, "graphAddNode", path)(trigger)


def close_to(ref):
    """A ``want`` comparing output 0 with ``ref(first input)`` at float16-level tolerance."""
    def want(inputs, out):
        got, expect = out[0], ref(inputs[0])
        assert np.allclose(got, expect, rtol=2e-2, atol=2e-2), f"computed {got.tolist()}, expected {expect.tolist()}"
    return want


X23 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5


def softmax(x, beta=1.0):
    e = np.exp(beta * (x - x.max(axis=-1, keepdims=True)))
    return e / e.sum(axis=-1, keepdims=True)


# ---- op parameters (the vendor's graphAddNode; its backendValidateOpConfig refuses them) -------
node_case("QNNEMU-op-param-unknown-ignored", "opConfig.v1.params[bogus]", "Relu", [X23], [((2, 3), F32)],
          [sp("bogus", F32, 1.0)], want=close_to(lambda x: np.maximum(x, 0)))
node_case("QNNEMU-op-param-duplicate-ignored", "opConfig.v1.params[2].name", "ReluMinMax", [X23], [((2, 3), F32)],
          [sp("min_value", F32, -1.0), sp("max_value", F32, 2.0), sp("max_value", F32, 1.0)],
          want=close_to(lambda x: np.clip(x, -1, 2)))
node_case("QNNEMU-op-param-type-coerced", "opConfig.v1.params[max_value]", "ReluMinMax", [X23], [((2, 3), F32)],
          [sp("min_value", F32, -1.0), sp("max_value", U32, 2)], want=close_to(lambda x: np.clip(x, -1, 2)))
node_case("QNNEMU-op-param-scalar-as-tensor", "opConfig.v1.params[axes]", "ReduceMean", [X23], [((2,), F32)],
          [sp("axes", U32, 1)], want=close_to(lambda x: x.mean(axis=1)))
node_case("QNNEMU-op-param-tensor-as-scalar", "opConfig.v1.params[beta]", "Softmax", [X23], [((2, 3), F32)],
          [tp("beta", np.array([2.0, 3.0], np.float32))], want=close_to(lambda x: softmax(x, 2.0)))
node_case("QNNEMU-op-param-shape-reshaped", "opConfig.v1.params[perm]", "Transpose", [X23], [((3, 2), F32)],
          [tp("perm", np.array([[1, 0]], np.uint32))], want=close_to(lambda x: x.T))

# ---- ops --------------------------------------------------------------------------------------
X34 = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
node_case("QNNEMU-index-static-out-of-range", "opConfig.v1.inputTensors[1]", "GatherElements",
          [X34, ("static", np.array([[-1, 0, 1, -3]] * 3, np.int32))], [((3, 4), F32)], [sp("axis", I32, 0)],
          soc=SM8550, want=close_to(lambda x: np.array([[0, 2, 7, 0]] * 3, np.float32)))


def index_graph(s: abi.Session, op: str, ind: np.ndarray, params: dict, out_shape, upd=None):
    """x [3, 4] float32, APP_WRITE int32 indices, optional updates -> op -> y; the codes up to
    graphExecute and y."""
    inputs = [X34, ind] + ([upd] if upd is not None else [])
    codes, out = run_node(s, op, inputs, [(out_shape, F32)], [sp(k, I32, v) for k, v in params.items()])
    return codes, out[0]


def _index_case(op, ind, params, out_shape, upd=None, want=None):
    def trigger(s):
        codes, out = index_graph(s, op, ind, params, out_shape, upd)
        assert not any(codes[:-1]), f"{op}: built and finalized: {codes}"
        if want is not None and not codes[-1]:
            # The index semantics are the point (float16 math may move a value by a float32 ulp).
            assert np.allclose(out, want, rtol=1e-6, atol=0), \
                f"{op}: computed {out.tolist()}, the vendor gives {want.tolist()}"
        return codes[-1]
    return trigger


case("QNNEMU-index-negative-wrapped", SM8550, "graphExecute", "Gather inputTensors[1]")(
    _index_case("Gather", np.array([-1, -4, 1], np.int32), {"axis": 1}, (3, 3), want=X34[:, [3, 0, 1]]))
case("QNNEMU-index-invalid-zeroed", SM8550, "graphExecute", "GatherElements inputTensors[1]")(
    _index_case("GatherElements", np.array([[3, 0, 1, -4]] * 3, np.int32), {"axis": 0}, (3, 4),
                want=np.array([[0, 2, 7, 0]] * 3, np.float32)))
case("QNNEMU-index-invalid-skipped", SM8550, "graphExecute", "ScatterElements inputTensors[1]")(
    _index_case("ScatterElements", np.array([[3, -4, 1, 0]], np.int32), {"axis": 0}, (3, 4),
                upd=np.full((1, 4), 100, np.float32),
                want=np.where(np.isin(np.arange(12).reshape(3, 4), [3, 6]), 100, X34).astype(np.float32)))

# Gru, one step (T=1, B=2, I=3, H=5): direction 2 runs as FORWARD (the numerics: tests/test_ops_gru.py)
_rng = np.random.default_rng(7)
GRU_SHAPES = [(5, 3)] * 3 + [(5, 5)] * 3 + [(5,)] * 6      # W, R, biases
GRU_IN = ([_rng.standard_normal((1, 2, 3)).astype(np.float32)]
          + [("static", (_rng.standard_normal(s) * 0.3).astype(np.float32)) for s in GRU_SHAPES]
          + [np.zeros((1, 2, 5), np.float32)])
node_case("QNNEMU-Gru-direction-ignored", "opConfig.v1.params[direction]", "Gru", GRU_IN,
          [((1, 2, 5), F32), ((1, 2, 5), F32)], [sp("direction", U32, 2), sp("time_major", B8, 1)])

# RotaryEmbedding (B=1, N=2, S=4, H=8; position_ids APP_WRITE zeros): the numerics are
# tests/test_ops_attention.py's
ROPE_X = _rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
POS = np.zeros((1, 4), np.int32)


def _cache(*shape):
    return ("static", _rng.standard_normal(shape).astype(np.float32))


node_case("QNNEMU-RotaryEmbedding-dim-zero", "opConfig.v1.params[rotary_embedding_dim]", "RotaryEmbedding",
          [ROPE_X, _cache(16, 4), _cache(16, 4), POS], [((1, 2, 4, 8), F32)], [sp("rotary_embedding_dim", U32, 0)],
          want=close_to(lambda x: x))
node_case("QNNEMU-RotaryEmbedding-dim-odd", "opConfig.v1.params[rotary_embedding_dim]", "RotaryEmbedding",
          [ROPE_X, _cache(16, 2), _cache(16, 2), POS], [((1, 2, 4, 8), F32)], [sp("rotary_embedding_dim", U32, 5)])
node_case("QNNEMU-RotaryEmbedding-cache-wider", "opConfig.v1.inputTensors[1].dimensions", "RotaryEmbedding",
          [ROPE_X, _cache(16, 4), _cache(16, 4), POS], [((1, 2, 4, 8), F32)], [sp("rotary_embedding_dim", U32, 4)])
node_case("QNNEMU-RotaryEmbedding-position-batch", "opConfig.v1.inputTensors[3].dimensions", "RotaryEmbedding",
          [ROPE_X[0], _cache(16, 4), _cache(16, 4), np.zeros((2, 4), np.int32)], [((2, 4, 8), F32)])
node_case("QNNEMU-RotaryEmbedding-cache-first-row", "opConfig.v1.inputTensors[1].rank", "RotaryEmbedding",
          [ROPE_X, _cache(2, 4, 4), _cache(2, 4, 4), POS], [((1, 2, 4, 8), F32)])

# Random*Like: in[0] [2, 3] for a [3, 2] output -- the output decides (tests/test_ops_random.py)
for _op in ("RandomUniformLike", "RandomNormalLike"):
    node_case(f"QNNEMU-{_op}-shape-ignored", "opConfig.v1.inputTensors[0]", _op,
              [("static", np.array([2, 3], np.uint32))], [((3, 2), Q.QNN_DATATYPE_SFIXED_POINT_8, (0.05, 0))])


# LPAI (docs/lpai.md "Context binaries"): REQUIRE_PERSISTENT_BINARY is 1, an explicit
# isPersistentBinary 0 is used as 1 (the binary is read in place: tests/test_lpai_tools.py)
@case("QNNEMU-lpai-binary-persistent", LPAI, "contextCreateFromBinary", "config[0].isPersistentBinary")
def _lpai_non_persistent_binary(s):
    u8, q1 = Q.QNN_DATATYPE_UFIXED_POINT_8, (1.0, 0)
    _, g = s.graph("relu")
    x = abi.tensor("x", (1, 8), u8, quant=q1)
    y = abi.tensor("y", (1, 8), u8, Q.QNN_TENSOR_TYPE_APP_READ, quant=q1)
    _expect(s.tensor(g, x) == OK and s.tensor(g, y) == OK, "tensors")
    _expect(s.node(g, abi.op_config("r", "Relu", [x], [y])) == OK, "Relu")
    _expect(s.set_graph(g, s.mem("scratch", abi.aligned_bytes(1024))) == OK, "scratch buffer")
    _expect(s.finalize(g) == OK, "graphFinalize")
    size = abi.ffi.new("Qnn_ContextBinarySize_t *")
    _expect(s.call("contextGetBinarySize", abi.vp(s.ctx), size) == OK, "contextGetBinarySize")
    blob = s.own(abi.ffi.new("char[]", size[0]))
    written = abi.ffi.new("Qnn_ContextBinarySize_t *")
    _expect(s.call("contextGetBinary", abi.vp(s.ctx), blob, size[0], written) == OK, "contextGetBinary")
    cfg = s.own(abi.ffi.new("QnnContext_Config_t *", {"option": Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY,
                                                       "isPersistentBinary": 0}))
    ctx = abi.ffi.new("Qnn_ContextHandle_t *")
    s.rec.clear()
    code = s.call("contextCreateFromBinary", abi.vp(s.be), abi.vp(s.dev), s.list("QnnContext_Config_t", cfg), blob,
                  written[0], ctx, abi.ffi.NULL)
    if code == OK:
        s.contexts.append(int(abi.ffi.cast("uintptr_t", ctx[0])))
    return code


# ------------------------------------------------------------------------------- the contract
@pytest.mark.parametrize("c", CASES)
def test_warning_rule(c: Case):
    s = abi.LpaiSession() if c.soc == LPAI else abi.Session(soc=c.soc)
    s.cleanups = []
    try:
        code = c.trigger(s)
        s.rec.assert_warning(code, c.rule, c.func, c.path)
        if c.effect is not None:
            c.effect(s)
    finally:
        for fn in reversed(s.cleanups):
            fn()
        s.close()


def test_every_warning_rule_has_a_case():
    covered = {p.values[0].rule for p in CASES}
    assert covered == set(WARNING_RULES), \
        f"warning rules without a case: {sorted(set(WARNING_RULES) - covered)}; cases of unregistered rules: " \
        f"{sorted(covered - set(WARNING_RULES))}"


def test_every_warning_raised_in_the_sources_is_registered():
    """Each id a ``warn(...)`` call of qnnemu/ names is in WARNING_RULES (an op's ``QNNEMU-{op}-x``
    as some registered ``QNNEMU-<Op>-x``), so no warning can fail at run time as unregistered."""
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "qnnemu"
    call = re.compile(r'(?:\bwarn|_warn|warn_once|_order_warning)\((?:[^()"]*?)f?"(QNNEMU-[^"]+)"')
    unknown = []
    for path in sorted(root.rglob("*.py")):
        for rule in call.findall(path.read_text()):
            if "{" in rule:
                tail = rule.split("}", 1)[1]
                ok = any(r.endswith(tail) for r in WARNING_RULES)
            else:
                ok = rule in WARNING_RULES
            if not ok:
                unknown.append(f"{path.relative_to(root)}: {rule}")
    assert not unknown, f"warning rule ids raised but not registered in qnnemu/rules.py: {unknown}"


def test_no_warning_rule_bypasses_rules_warn():
    """A rule id is never logged by hand (``log.warn(f"[QNNEMU-...] ...")``): warnings go through
    qnnemu.rules.warn, which checks the registry and the message layout."""
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "qnnemu"
    by_hand = [f"{p.relative_to(root)}: {m}" for p in sorted(root.rglob("*.py")) if p.name != "rules.py"
               for m in re.findall(r'\.warn\(\s*f?"\[(QNNEMU-[^\]]+)\]', p.read_text())]
    assert not by_hand, f"warning rules logged without qnnemu.rules.warn: {by_hand}"


def test_validation_doc_lists_the_warning_rules():
    """docs/validation.md's warning rule table is ``warning_rules_table()`` (regenerate it with
    ``python3 -c "from qnnemu.rules import warning_rules_table; print(warning_rules_table())"``)."""
    import re
    doc = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "validation.md").read_text()
    assert warning_rules_table() in doc, "docs/validation.md has the generated table, as WARNING_RULES is now"
    section = doc.split("## Warning rules", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(QNNEMU-[A-Za-z0-9_-]+)` \|", section, re.M)
    assert sorted(listed) == sorted(WARNING_RULES), \
        f"the section lists exactly the registered ids: extra {sorted(set(listed) - set(WARNING_RULES))}, " \
        f"missing {sorted(set(WARNING_RULES) - set(listed))}"


def test_op_warnings_name_the_function_that_checks_the_node():
    """An op's warning names the function that checked the node: a RotaryEmbedding with
    rotary_embedding_dim 0 warns in backendValidateOpConfig and in graphAddNode, each naming
    itself; graphFinalize and a reload from the context binary do not repeat it."""
    s = abi.Session(soc=SM8650)
    s.cleanups = []
    rule = "QNNEMU-RotaryEmbedding-dim-zero"
    try:
        x, pos = abi.tensor("x", ROPE_X.shape), abi.tensor("pos", POS.shape, I32)
        cos = abi.static_tensor("cos", _cache(16, 4)[1])
        sin = abi.static_tensor("sin", _cache(16, 4)[1])
        y = abi.tensor("y", ROPE_X.shape, type_=Q.QNN_TENSOR_TYPE_APP_READ)
        param = abi.scalar_param("rotary_embedding_dim", U32, "uint32Value", 0)
        op = abi.op_config("rope", "RotaryEmbedding", [x, cos, sin, pos], [y], [param])
        s.keep.append(op)
        assert s.call("backendValidateOpConfig", vp(s.be), op) == OK, "backendValidateOpConfig takes it"
        s.rec.assert_warning(OK, rule, "backendValidateOpConfig", "opConfig.v1.params[rotary_embedding_dim]")
        s.rec.clear()
        code, g = s.graph("g")
        codes = [code] + [s.tensor(g, t) for t in (x, cos, sin, pos, y)]
        codes += [s.node(g, abi.op_config("rope", "RotaryEmbedding", [x, cos, sin, pos], [y], [param])),
                  s.finalize(g)]
        assert not any(codes), f"the graph is built: {codes}"
        blob = context_binary(s)
        assert load(s, blob)[0] == OK, "the context binary loads"
        msgs = [m for _, m in s.rec.records if f"[{rule}]" in m]
        assert len(msgs) == 1 and "graphAddNode" in msgs[0], f"graphAddNode's warning, once: {msgs}"
    finally:
        for fn in reversed(s.cleanups):
            fn()
        s.close()


def test_warn_refuses_an_unregistered_rule():
    from qnnemu import rules
    with pytest.raises(KeyError):
        rules.warn("QNNEMU-no-such-warning", "graphCreate", "config[0]", "never logged")
