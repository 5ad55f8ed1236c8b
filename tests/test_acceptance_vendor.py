"""Differential acceptance: the same raw C-ABI call sequences on the vendor's libQnnHtp.so (2.51)
and on qnnemu, both return codes compared (docs/validation.md, "accept what the vendor
accepts").

One table row per input: an id, a call builder ``(abi.Session) -> Result`` (the codes of every
step it ran, and for computing rows the output values), and the expected relation:

- ``SAME``: both succeed, or both refuse, step for step (the first failing step is the same;
  the code may differ within "failure");
- ``SAME_VALUES``: SAME, and the outputs agree (float16-level tolerance: the vendor computes
  float32 graphs in float16 on v69+);
- ``Divergence(reason, ours)``: a documented deliberate divergence -- qnnemu keeps its answer
  ``ours`` (a tuple of success/failure per step) because the vendor's is arguably a bug or an
  x86-library limitation; the row also checks that the vendor still answers differently, so a
  vendor change is noticed;
- ``VendorCrash(reason, ours)``: the vendor's library crashes the process on this input; only
  qnnemu runs (it must refuse cleanly).

``warn`` names the warning rule qnnemu must log where it tolerates.  Every row names its SoC.
The vendor side runs in one subprocess (the vendor library keeps the last configured SoC and
more process-wide state, and crashes on some inputs), qnnemu's in the test process.  The module
skips without the vendor package; it runs in well under a minute with it.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import abi
import numpy as np
import pytest
from vendor import vendor_env, vendor_library

from qnnemu.core.dtypes import name as dtype_name
from qnnemu.headers import Q
from qnnemu.htp import settings

VENDOR_PATH = vendor_library()
pytestmark = [pytest.mark.usefixtures("qnn_abi"),
              pytest.mark.skipif(VENDOR_PATH is None, reason="the vendor's libQnnHtp.so (onnxruntime-qnn) "
                                                             "is not installed")]
OK = Q.QNN_SUCCESS
SM8350, SM8550, SM8650, SM8750, SM8850 = (Q.QNN_SOC_MODEL_SM8350, Q.QNN_SOC_MODEL_SM8550,
                                          Q.QNN_SOC_MODEL_SM8650, Q.QNN_SOC_MODEL_SM8750,
                                          Q.QNN_SOC_MODEL_SM8850)
G = "QNN_HTP_GRAPH_CONFIG_OPTION_"
O = "QNN_HTP_GRAPH_OPTIMIZATION_TYPE_"
C = "QNN_HTP_CONTEXT_CONFIG_OPTION_"
STATIC, NULLT, APP_READ, NATIVE = (Q.QNN_TENSOR_TYPE_STATIC, Q.QNN_TENSOR_TYPE_NULL, Q.QNN_TENSOR_TYPE_APP_READ,
                                   Q.QNN_TENSOR_TYPE_NATIVE)
F32, I32 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_INT_32


@dataclass
class Result:
    codes: tuple[int, ...]
    values: list | None = None

    @property
    def outcome(self) -> tuple[bool, ...]:
        """Success per step."""
        return tuple(c == OK for c in self.codes)


SAME = "same"
SAME_VALUES = "same values"


@dataclass(frozen=True)
class Divergence:
    reason: str
    ours: tuple[bool, ...]       # qnnemu's success per step


@dataclass(frozen=True)
class VendorCrash:
    reason: str
    ours: tuple[bool, ...]


@dataclass
class Row:
    id: str
    build: Callable[[abi.Session], Result | tuple | int]
    relation: object = SAME
    soc: int | None = SM8550
    warn: str | None = None
    tags: tuple = field(default_factory=tuple)


ROWS: list[Row] = []


def row(id: str, build, relation=SAME, soc=SM8550, warn=None) -> None:
    assert id not in {r.id for r in ROWS}, f"duplicate row id {id}"
    ROWS.append(Row(id, build, relation, soc, warn))


def _result(r) -> Result:
    if isinstance(r, Result):
        return r
    return Result(tuple(r) if isinstance(r, tuple) else (int(r),))


# ------------------------------------------------------------------------------ graph configs
def relu_with(make):
    """A Relu graph created with the configs ``make(s)`` returns, finalized and executed."""
    return lambda s: Result(s.relu_graph(*make(s)))


def gcustom(option, **fields):
    opt = getattr(Q, G + option) if isinstance(option, str) else option
    return relu_with(lambda s: [s.graph_custom(opt, **fields)])


def gopt(type_name, value):
    t = getattr(Q, O + type_name) if isinstance(type_name, str) else type_name
    return gcustom("OPTIMIZATION", opt=(t, value))


# A valid value for every graph option of qnnemu/htp/settings.py (the table is walked whole).
VALID_GRAPH = {
    "OPTIMIZATION": dict(opt=(Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG, 3.0)),
    "PRECISION": dict(precision=Q.QNN_PRECISION_FLOAT16),
    "VTCM_SIZE_IN_MB": dict(vtcmSizeInMB=2), "VTCM_SIZE": dict(vtcmSizeInMB=1),
    "VTCM_SIZE_IN_BYTES": dict(vtcmSizeInBytes=1 << 20),
    "FOLD_RELU_ACTIVATION_INTO_CONV_OFF": dict(foldReluActivationIntoConvOff=True),
    "SHORT_DEPTH_CONV_ON_HMX_OFF": dict(shortDepthConvOnHmxOff=True),
    "NUM_HVX_THREADS": dict(numHvxThreads=2), "WEIGHTS_PACKING": dict(weightsPacking=True),
    "FINALIZE_CONFIG": None,   # its own rows below (a key string)
    "NUM_CORES": dict(numCores=1),
    "PARALLEL_GRAPH_EXECUTION_CONFIG": dict(parallelGraphExecutionConfig={"concurrency": 1}),
    "HMX_BOUNDING": dict(hmxBoundingInfo={"targetHmxFreqHz": 1e9, "targetDspCoreFreq": 1e9}),
    "ASSUME_SAME_QUANT": dict(assumeSameQuant=True), "SHARE_IO_BUFFER": dict(shareIOBuffer=True),
    "ADVANCED_ACTIVATION_FUSION": dict(advancedActivationFusion=True),
    "HIGH_PRECISION_SIGMOID": dict(highPrecisionSigmoid=True), "MONOLITHIC_LSTM": dict(monolithicLstm=True),
    "PRECISION_COMPENSATION": dict(precisionCompensation=True), "ENABLE_PREDICATION": dict(enablePredication=True),
    "FP16_CLAMP_OVERFLOW": dict(fp16ClampOverflow=True),
}
for _name, _fields in VALID_GRAPH.items():
    if _fields is not None:
        row(f"graph {_name}", gcustom(_name, **_fields))


def finalize_config(key, dtype=Q.QNN_DATATYPE_UINT_32):
    def make(s):
        c = s.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG)
        fc = abi.ffi.cast("QnnHtpGraph_CustomConfig_t *", c.customConfig).finalizeConfig
        fc.key = abi.cstr(key, s.keep) if key is not None else abi.NULL
        fc.value.dataType, fc.value.uint32Value = dtype, 1
        return [c]
    return relu_with(make)


row("graph FINALIZE_CONFIG key", finalize_config("some_key"))
row("graph FINALIZE_CONFIG NULL key", finalize_config(None),
    VendorCrash("the vendor dereferences the NULL key of a FINALIZE_CONFIG with a valid value (SIGSEGV)", (False,)))
row("graph FINALIZE_CONFIG NULL key, no value type", finalize_config(None, dtype=0))

# edge and out-of-range values
row("graph NUM_HVX_THREADS 0 v73", gcustom("NUM_HVX_THREADS", numHvxThreads=0), warn="QNNEMU-graph-hvx-threads-clipped")
row("graph NUM_HVX_THREADS 8 v73", gcustom("NUM_HVX_THREADS", numHvxThreads=8), warn="QNNEMU-graph-hvx-threads-clipped")
row("graph NUM_HVX_THREADS 2^64-1", gcustom("NUM_HVX_THREADS", numHvxThreads=2**64 - 1),
    warn="QNNEMU-graph-hvx-threads-clipped")
row("graph NUM_HVX_THREADS 8 v81", gcustom("NUM_HVX_THREADS", numHvxThreads=8), soc=SM8850)
row("graph NUM_HVX_THREADS 9 v81", gcustom("NUM_HVX_THREADS", numHvxThreads=9), soc=SM8850,
    warn="QNNEMU-graph-hvx-threads-clipped")
row("graph PRECISION 7", gcustom("PRECISION", precision=7), warn="QNNEMU-graph-precision-ignored")
row("graph PRECISION UNDEFINED", gcustom("PRECISION", precision=0x7FFFFFFF), warn="QNNEMU-graph-precision-ignored")
row("graph VTCM_SIZE_IN_MB 0 (MAX)", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=0))
row("graph VTCM_SIZE_IN_MB 8", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=8))
row("graph VTCM_SIZE_IN_MB 9", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=9), warn="QNNEMU-graph-vtcm-clipped")
row("graph VTCM_SIZE_IN_MB 4095", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=4095), warn="QNNEMU-graph-vtcm-clipped")
row("graph VTCM_SIZE_IN_MB 4096", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=4096))
row("graph VTCM_SIZE_IN_MB 2^32-1", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=2**32 - 1))
row("graph VTCM_SIZE_IN_BYTES 1000 v73", gcustom("VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=1000),
    warn="QNNEMU-graph-vtcm-bytes-adjusted")
row("graph VTCM_SIZE_IN_BYTES 0 v73", gcustom("VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=0))
row("graph VTCM_SIZE_IN_BYTES 127x64KiB v81", gcustom("VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=8323072), soc=SM8850)
row("graph VTCM MAX without a SoC", gcustom("VTCM_SIZE_IN_MB", vtcmSizeInMB=0), soc=None,
    warn="QNNEMU-graph-vtcm-max-default")
row("graph NUM_CORES 0", gcustom("NUM_CORES", numCores=0), warn="QNNEMU-graph-num-cores-clipped")
row("graph NUM_CORES 2 (finalize fails)", gcustom("NUM_CORES", numCores=2))
row("graph NUM_CORES 100 (finalize fails)", gcustom("NUM_CORES", numCores=100))
row("graph HMX_BOUNDING zeros", gcustom("HMX_BOUNDING"))
row("graph PARALLEL_GRAPH_EXECUTION zeros", gcustom("PARALLEL_GRAPH_EXECUTION_CONFIG"))
row("graph new bool PRECISION_COMPENSATION false", gcustom("PRECISION_COMPENSATION", precisionCompensation=False))
row("graph option 21 (undefined)", gcustom(21), warn="QNNEMU-graph-config-option-ignored")
row("graph option RESERVED", gcustom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_RESERVED), warn="QNNEMU-graph-config-option-ignored")
row("graph option UNKNOWN", gcustom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_UNKNOWN))
row("graph option 0 (MAX)", gcustom(0))

for _t, _vals in {"SCHEDULE_THRESHOLD": (0.0, 0.5, 1e9, -1.0, math.nan),
                  "FINALIZE_RETRIES": (0.0, 3.0, -1.0),
                  "FINALIZE_OPTIMIZATION_FLAG": (1.0, 2.0, 3.0, 0.0, 1.5, 4.0, -1.0, math.nan),
                  "ENABLE_DLBC": (0.0, 1.0, 2.0, 0.5, -1.0, math.nan),
                  "ENABLE_DLBC_WEIGHTS": (0.0, 1.0, 0.5),
                  "ENABLE_SPARSE_WEIGHTS_COMPRESSION": (0.0, 1.0, 2.0, 0.5, -1.0),
                  "ENABLE_SLC_ALLOCATOR": (0.0, 1.0, 0.5, 2.0),
                  "ENABLE_VTCM_RETENTION": (0.0, 1.0, 7.0),
                  "ENABLE_CACHED_WEIGHTS": (0.0, 1.0)}.items():
    for _v in _vals:
        for _soc in ((SM8550, SM8650) if _t.startswith("ENABLE_DLBC") else (SM8550,)):
            _warn = None
            if _t == "FINALIZE_OPTIMIZATION_FLAG" and _v not in (1.0, 2.0, 3.0):
                _warn = "QNNEMU-graph-optimization-flag-default"
            elif _t == "SCHEDULE_THRESHOLD" and not _v >= 0:
                _warn = "QNNEMU-graph-schedule-threshold-ignored"
            elif _t in settings.ON_OFF_TYPES and not (_v == 0 or _v >= 1):
                _warn = "QNNEMU-graph-optimization-value-coerced"
            elif _t.startswith("ENABLE_DLBC") and _v >= 1 and _soc == SM8550:
                _warn = "QNNEMU-graph-dlbc-soc-ignored"
            elif _t == "ENABLE_SLC_ALLOCATOR" and _v >= 1:
                _warn = "QNNEMU-graph-slc-soc-ignored"
            row(f"graph OPTIMIZATION {_t} {_v:g} soc {_soc}", gopt(_t, _v), soc=_soc, warn=_warn)
for _t in (0, 10, Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_UNKNOWN):
    row(f"graph OPTIMIZATION type {_t}", gopt(_t, 1.0))


def gplain(option, **fields):
    return relu_with(lambda s: [s.graph_plain(option, **fields)])


for _p in (0, 50, 100, 150, 200, 300, 400, 500, 42, 501, 600, 0x7FFFFFFF):
    row(f"graph PRIORITY {_p}", gplain(Q.QNN_GRAPH_CONFIG_OPTION_PRIORITY, priority=_p),
        warn="QNNEMU-priority-level-mapped" if _p in (50, 300, 400, 500, 42) else None)
for _o in (1, 2, 4, 5, 6, 7, 99, Q.QNN_GRAPH_CONFIG_OPTION_UNDEFINED):
    row(f"graph config option {_o} zeroed", gplain(_o))
row("graph ENABLE_BINARY_SECTION_WEIGHTS_UPDATES 1",
    gplain(Q.QNN_GRAPH_CONFIG_OPTION_ENABLE_BINARY_SECTION_WEIGHTS_UPDATES, enableBinarySectionWeightsUpdates=1))
row("graph CUSTOM with a NULL customConfig", gplain(Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM),
    VendorCrash("the vendor dereferences the NULL customConfig (SIGSEGV)", (False,)))


# ---------------------------------------------------------------------------- context configs
def ctx_with(make):
    """contextCreate(configs) -> a Relu graph in it, finalized and executed -> contextFree."""
    def build(s):
        code, ctx = s.context(*make(s))
        if code:
            return Result((code,))
        return Result((code,) + s.relu_graph(ctx=ctx))
    return build


def ccustom(option, **fields):
    opt = getattr(Q, C + option) if isinstance(option, str) else option
    return ctx_with(lambda s: [s.context_custom(opt, **fields)])


def cplain(option, **fields):
    return ctx_with(lambda s: [s.context_plain(option, **fields)])


X86_ONLY = "the x86-64 library says the feature is not supported on this platform; the device backend " \
           "documents it and qnnemu emulates the device"
X86_EXEC = "the x86-64 library fails graph{} in a context with this option (a device feature it does not " \
           "run); the option is recorded and qnnemu runs the graph"
CREATE_ONLY = "the vendor refuses this contextCreateFromBinary / listConfig option at contextCreate; qnnemu " \
              "records it (harmless there) -- tests and tools of this project set it on created contexts"
CONTEXT_ROWS = {
    # option: (fields, relation, warn)
    "WEIGHT_SHARING_ENABLED": (dict(weightSharingEnabled=True), SAME, None),
    "REGISTER_MULTI_CONTEXTS": (dict(groupRegistration={"maxSpillFillBuffer": 4096}), SAME, None),
    "FILE_READ_MEMORY_BUDGET": (dict(fileReadMemoryBudgetInMb=5), SAME, None),
    "DSP_MEMORY_PROFILING_ENABLED": (dict(dspMemoryProfilingEnabled=True), Divergence(X86_ONLY, (True,) * 7), None),
    "SHARE_RESOURCES": (dict(shareResources=True), SAME, None),
    "IO_MEM_ESTIMATION": (dict(ioMemEstimation=True), Divergence(CREATE_ONLY, (True,) * 7), None),
    "PREPARE_ONLY": (dict(isPrepareOnly=False), SAME, None),
    "INIT_ACCELERATION": (dict(initAcceleration=True), Divergence(CREATE_ONLY, (True,) * 7), None),
    "SKIP_VALIDATION_ON_BINARY_SECTION": (dict(skipValidationOnBinarySection=True),
                                          Divergence(CREATE_ONLY, (True,) * 7), None),
    "SHARE_RESOURCES_OPTIMIZATION_TYPE": (dict(shareResOptType=1), Divergence(CREATE_ONLY, (True,) * 7), None),
    "USE_EXTENDED_UDMA": (dict(useExtendedUdma=True), Divergence(X86_EXEC.format("Create"), (True,) * 7), None),
    "REGISTER_CONCURRENT_RESOURCE_SHARING": (dict(concurrentGroupRegistration={"maxSpillFillBuffer": 4096}), SAME,
                                             None),
    # both block graphExecute until a binary section is applied (tests/test_lora_weight_sharing.py)
    "LORA_WEIGHT_SHARING_ENABLED": (dict(loraWeightSharingEnabled=True), SAME, None),
    "LORA_WEIGHT_SHARING_RAM_PRELOAD_ENABLED": (dict(loraWeightSharingRamPreloadEnabled=True), SAME, None),
    "REUSED_IO_LIMIT": (dict(reusedIoLimitMb=64), SAME, None),
    "REFERENCE_WEIGHT_SHARING_ENABLED": (dict(referenceWeightSharingEnabled=True), SAME, None),
    "CONCURRENT_DESERIALIZATION_EXTRA_SIZE": (dict(concurrentDeserializationExtraSizeKB=1024), SAME, None),
    "GRAPH_SPLITTING_ENABLED": (dict(graphSplittingEnabled=True), Divergence(X86_EXEC.format("Execute"), (True,) * 7),
                                None),
    "CONCURRENT_DESERIALIZATION_PATCH": (dict(concurrentDeserializationPatchFd=-1), SAME, None),
    "GRAPH_SPLITTING_CONFIGS": (dict(graphSplittingConfigs={"graphSplittingEnabled": True}),
                                Divergence(X86_EXEC.format("Execute"), (True,) * 7), None),
    "LORA_PRELOAD_BUFFER_GROUPS": (dict(), SAME, None),
    "PARALLEL_WEIGHT_LOADING": (dict(parallelWeightLoading={"mode": 1}), Divergence(X86_ONLY, (True,) * 7), None),
}
for _name, (_fields, _rel, _warn) in CONTEXT_ROWS.items():
    row(f"context {_name}", ccustom(_name, **_fields), _rel, warn=_warn)
for _o in (0, 14, 15, 24, Q.QNN_HTP_CONTEXT_CONFIG_OPTION_UNKNOWN):
    row(f"context custom option {_o}", ccustom(_o))
row("context custom option 26 (undefined)", ccustom(26), warn="QNNEMU-context-config-option-ignored")
row("context FILE_READ_MEMORY_BUDGET 0", ccustom("FILE_READ_MEMORY_BUDGET", fileReadMemoryBudgetInMb=0))
row("context SHARE_RESOURCES_OPTIMIZATION_TYPE 9", ccustom("SHARE_RESOURCES_OPTIMIZATION_TYPE", shareResOptType=9))
for _p in (0, 50, 100, 200, 300, 500, 600):
    row(f"context PRIORITY {_p}", cplain(Q.QNN_CONTEXT_CONFIG_OPTION_PRIORITY, priority=_p),
        warn="QNNEMU-priority-level-mapped" if _p in (50, 300, 500) else None)
row("context ERROR_REPORTING brief", cplain(Q.QNN_CONTEXT_CONFIG_OPTION_ERROR_REPORTING,
                                            errorConfig={"reportingLevel": Q.QNN_ERROR_REPORTING_LEVEL_BRIEF}))
PLAIN_LOAD = "the vendor answers NOT_SUPPORTED to this option at contextCreate; qnnemu records it (a load-time " \
             "option or a hint, harmless on a created context)"
row("context MEMORY_LIMIT_HINT 100", cplain(Q.QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT, memoryLimitHint=100),
    Divergence(PLAIN_LOAD, (True,) * 7))
row("context PERSISTENT_BINARY 1", cplain(Q.QNN_CONTEXT_CONFIG_PERSISTENT_BINARY, isPersistentBinary=1),
    Divergence(PLAIN_LOAD, (True,) * 7))
row("context DEFER_GRAPH_INIT 1", cplain(Q.QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT, isGraphInitDeferred=1),
    Divergence(PLAIN_LOAD, (True,) * 7))
row("context option 99", cplain(99))
row("context option UNDEFINED", cplain(Q.QNN_CONTEXT_CONFIG_UNDEFINED))


# ------------------------------------------------------------------------------------ tensors
def tensor_row(*specs):
    """graphCreate, then tensorCreateGraphTensor of each ``abi.tensor`` spec (kwargs dicts)."""
    def build(s):
        code, g = s.graph("g")
        return Result((code,) + tuple(s.tensor(g, abi.tensor(**kw)) for kw in specs))
    return build


def t(name="t", dims=(2, 3), **kw):
    return dict(name=name, dims=dims, **kw)


row("tensor NULL rank 1 [0]", tensor_row(t(dims=(0,), type_=NULLT)))
row("tensor NULL rank 2 [0, 0]", tensor_row(t(dims=(0, 0), type_=NULLT)))
row("tensor NULL rank 0", tensor_row(t(dims=(), type_=NULLT)))
row("tensor NULL rank 1 [3]", tensor_row(t(dims=(3,), type_=NULLT)))
row("tensor NULL v1 [0]", tensor_row(t(dims=(0,), type_=NULLT, version=1)))
row("tensor NULL empty name [0]", tensor_row(t(name="", dims=(0,), type_=NULLT)))
row("tensor NULL rank 1 with NULL dimensions", tensor_row(t(dims=None, rank=1, type_=NULLT)),
    VendorCrash("the vendor reads the NULL dimensions pointer (SIGSEGV)", (True, False)))
row("tensor APP_WRITE rank 2 with NULL dimensions", tensor_row(t(dims=None, rank=2)),
    VendorCrash("the vendor reads the NULL dimensions pointer (SIGSEGV)", (True, False)))
row("tensor APP_WRITE [2, 0, 3]", tensor_row(t(dims=(2, 0, 3))))
row("tensor NATIVE [0]", tensor_row(t(dims=(0,), type_=NATIVE)))
row("tensor STATIC [0]", tensor_row(t(dims=(0,), type_=STATIC, data=b"")))
row("tensor rank 0 APP_WRITE", tensor_row(t(dims=())))
row("tensor rank 0 STATIC", tensor_row(t(dims=(), type_=STATIC, data=np.float32(1).tobytes())))
for _r in (5, 6, 7, 8, 16):
    row(f"tensor rank {_r}", tensor_row(t(dims=(1,) * _r)))
row("tensor huge dimension 2^31", tensor_row(t(dims=(2 ** 31,))))
row("tensor empty name", tensor_row(t(name="")))
row("tensor NULL name", tensor_row(t(name=None)))
row("tensor duplicate name", tensor_row(t(name="d"), t(name="d")))
row("tensor duplicate empty name", tensor_row(t(name=""), t(name="")))
row("tensor version 1", tensor_row(t(version=1)))
BAD_VERSION = "the vendor creates a tensor of an undefined Qnn_Tensor_t version (it cannot know the struct's " \
              "layout); qnnemu refuses it"
row("tensor version 0", tensor_row(t(version=0)), Divergence(BAD_VERSION, (True, False)))
row("tensor version 3", tensor_row(t(version=3)), Divergence(BAD_VERSION, (True, False)))
for _type in ("APP_WRITE", "APP_READ", "NATIVE", "UPDATEABLE_NATIVE", "UPDATEABLE_APP_WRITE", "UPDATEABLE_APP_READ",
              "OPTIONAL_APP_WRITE", "OPTIONAL_APP_READ", "UNDEFINED"):
    row(f"tensor type {_type}", tensor_row(t(type_=getattr(Q, f"QNN_TENSOR_TYPE_{_type}"))))
row("tensor type APP_READWRITE", tensor_row(t(type_=Q.QNN_TENSOR_TYPE_APP_READWRITE)),
    Divergence("the x86 library refuses APP_READWRITE; the HTP backend documentation uses it for native KV "
               "cache graph inputs/outputs, which qnnemu emulates", (True, True)))
row("tensor type 99", tensor_row(t(type_=99)),
    Divergence("the vendor creates a tensor of an undefined Qnn_TensorType_t; qnnemu cannot give it a role "
               "and refuses it", (True, False)))
row("tensor dataFormat SPARSE", tensor_row(t(data_format=Q.QNN_TENSOR_DATA_FORMAT_SPARSE)))
row("tensor dataFormat 99", tensor_row(t(data_format=99)))
row("tensor STATIC no data", tensor_row(t(type_=STATIC)))
row("tensor STATIC larger buffer", tensor_row(t(type_=STATIC, data=b"\0" * 100)),
    warn="QNNEMU-tensor-static-size-larger")
row("tensor STATIC smaller buffer", tensor_row(t(type_=STATIC, data=b"\0" * 8)),
    Divergence("the vendor accepts a STATIC buffer smaller than the tensor and reads past it; qnnemu refuses "
               "(QNNEMU-tensor-static-size)", (True, False)))

# UINT_64, FLOAT_64, 4-bit fixed point and (v73) BFLOAT_16 tensors: refused by both (qnnemu's
# QNNEMU-htp-tensor-dtype, measured per arch: qnnemu/htp/op_support.json, docs/op-support.md).
for _v, _n in sorted(Q.enum("QNN_DATATYPE_").items()):
    if _n.endswith("UNDEFINED"):
        continue
    _short = _n[len("QNN_DATATYPE_"):]
    _quant = (0.5, 0) if "FIXED" in _short else None
    row(f"tensor dtype {_short}", tensor_row(t(dtype=_v, quant=_quant)))
row("tensor dtype 0x9999", tensor_row(t(dtype=0x9999)))


def _quant_row(encoding):
    def build(s):
        code, g = s.graph("g")
        tt = abi.tensor("t", (2, 3), Q.QNN_DATATYPE_UFIXED_POINT_8)
        q = tt.v.quantizeParams
        q.encodingDefinition, q.quantizationEncoding = Q.QNN_DEFINITION_DEFINED, encoding
        return Result((code, s.tensor(g, tt)))
    return build


NO_KERNEL_ENCODING = "the vendor creates a fixed-point tensor with this (zeroed) encoding; qnnemu has no kernel " \
                     "path for it and refuses it at creation (QNNEMU-tensor-quant-encoding) rather than at execute"
for _e in ("MICROSCALING", "ARRAY_OF", "UNDEFINED"):
    row(f"tensor quant encoding {_e} (zeroed)", _quant_row(getattr(Q, f"QNN_QUANTIZATION_ENCODING_{_e}")),
        Divergence(NO_KERNEL_ENCODING, (True, False)))
row("tensor quant encoding VECTOR (zeroed)", _quant_row(Q.QNN_QUANTIZATION_ENCODING_VECTOR))
row("tensor quant encoding BLOCK (zeroed)", _quant_row(Q.QNN_QUANTIZATION_ENCODING_BLOCK),
    VendorCrash("the vendor dereferences the zeroed block encoding's NULL pointers (SIGSEGV)", (True, False)))


# ------------------------------------------------------------------------ nodes and op params
def relu_nodes(*names):
    """x -> Relu(name_k) -> y_k for each name (all reading x)."""
    def build(s):
        code, g = s.graph("g")
        x = abi.tensor("x", (2, 3))
        ys = [abi.tensor(f"y{k}", (2, 3), type_=APP_READ) for k in range(len(names))]
        codes = [code, s.tensor(g, x)] + [s.tensor(g, y) for y in ys]
        codes += [s.node(g, abi.op_config(n, "Relu", [x], [y])) for n, y in zip(names, ys)]
        return Result(tuple(codes) + (s.finalize(g),))
    return build


row("node name empty", relu_nodes(""))
row("node name empty twice", relu_nodes("", ""))
row("node name duplicate", relu_nodes("n", "n"))
row("node name NULL", relu_nodes(None),
    VendorCrash("the vendor dereferences the NULL node name (SIGSEGV)", (True, True, True, False, False)))


def reshape_empty_name(s):
    code, g = s.graph("g")
    x, y = abi.tensor("x", (2, 3)), abi.tensor("y", (3, 2), type_=APP_READ)
    codes = (code, s.tensor(g, x), s.tensor(g, y), s.node(g, abi.op_config("", "Reshape", [x], [y])), s.finalize(g))
    if any(codes):
        return Result(codes)
    a, out = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((3, 2), np.float32)
    return Result(codes + (s.execute(g, [(x, a)], [(y, out)]),), [out])


row("node Reshape with an empty name", reshape_empty_name, SAME_VALUES)


# Op parameters: graphAddNode takes what the vendor's takes (qnnemu/ops/base.py, "Parameters as
# graphAddNode takes them"), backendValidateOpConfig checks the op definition strictly (as the
# vendor's does).  Measured with these rows and the wider probe the module docstring of
# qnnemu/ops/base.py summarizes.
def _short(dtype: int) -> str:
    return dtype_name(dtype).removeprefix("QNN_DATATYPE_")


U8, U16, I8, I64, U64 = (Q.QNN_DATATYPE_UINT_8, Q.QNN_DATATYPE_UINT_16, Q.QNN_DATATYPE_INT_8,
                         Q.QNN_DATATYPE_INT_64, Q.QNN_DATATYPE_UINT_64)
B8, F16, F64, U32 = Q.QNN_DATATYPE_BOOL_8, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_FLOAT_64, Q.QNN_DATATYPE_UINT_32
MEMBER = {F32: "floatValue", F16: "floatValue", F64: "doubleValue", I32: "int32Value", U8: "uint8Value",
          U16: "uint16Value", I8: "int8Value", I64: "int64Value", U64: "uint64Value", B8: "bool8Value",
          Q.QNN_DATATYPE_UINT_32: "uint32Value", Q.QNN_DATATYPE_UFIXED_POINT_8: "uint8Value",
          Q.QNN_DATATYPE_SFIXED_POINT_32: "int32Value"}
X23 = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
B23 = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
X34 = np.arange(12, dtype=np.float32).reshape(3, 4)


def scalar(name, dtype, value):
    """A scalar parameter builder ``(s, g, codes) -> Qnn_Param_t``."""
    def build(s, g, codes):
        if dtype == Q.QNN_DATATYPE_STRING:
            p = abi.scalar_param(name, dtype, "uint32Value", 0)
            p.ptr.scalarParam.stringValue = abi.cstr("abc", p.keep)
            return p
        return abi.scalar_param(name, dtype, MEMBER[dtype], value)
    return build


def tparam(name, array, dtype=None):
    """A tensor parameter whose STATIC tensor is created in the graph first (a step of the row),
    as the vendor requires; without a graph (backendValidateOpConfig) it is never created."""
    def build(s, g, codes):
        a = np.asarray(array)
        t = (abi.static_tensor(f"p{len(codes)}_{name}", a) if dtype is None else
             abi.tensor(f"p{len(codes)}_{name}", a.shape, dtype, STATIC, data=a))
        if g is not None:
            codes.append(s.tensor(g, t))
        return abi.tensor_param(name, t)
    return build


def tparam_inline(name, array):
    """A tensor parameter whose STATIC tensor was never created (inline data only)."""
    return lambda s, g, codes: abi.tensor_param(name, abi.static_tensor(f"p_{name}", np.asarray(array)))


def op_row(op, params=(), inputs=(X23,), y_shape=(2, 3), y_dtype=F32):
    """in0 (APP_WRITE, fed) and in1.. (STATIC) -> op(params) -> y, executed: the codes of every
    step (param tensors included) and y."""
    def build(s):
        code, g = s.graph("g")
        ins = [abi.tensor("x", inputs[0].shape)] + [abi.static_tensor(f"in{k}", a) for k, a in enumerate(inputs[1:], 1)]
        y = abi.tensor("y", y_shape, y_dtype, type_=APP_READ)
        codes = [code] + [s.tensor(g, t) for t in (*ins, y)]
        ps = [p(s, g, codes) for p in params]
        out = np.zeros(y_shape, np.int32 if y_dtype == I32 else np.float32)
        for step in (lambda: s.node(g, abi.op_config("n", op, ins, [y], ps)), lambda: s.finalize(g),
                     lambda: s.execute(g, [(ins[0], inputs[0])], [(y, out)])):
            if any(codes):
                break
            codes.append(step())
        return Result(tuple(codes), [out] if not any(codes) else None)
    return build


def validate_row(op, params=(), inputs=(X23,), y_shape=(2, 3)):
    """backendValidateOpConfig of the op config op_row would add: one code."""
    def build(s):
        ins = [abi.tensor("x", inputs[0].shape)] + [abi.static_tensor(f"in{k}", a) for k, a in enumerate(inputs[1:], 1)]
        y = abi.tensor("y", y_shape, type_=APP_READ)
        ps = [p(s, None, []) for p in params]
        op_cfg = abi.op_config("n", op, ins, [y], ps)
        s.keep.append(op_cfg)
        return Result((s.call("backendValidateOpConfig", abi.vp(s.be), op_cfg),))
    return build


def prow(id, build, relation=SAME_VALUES, warn=None):
    row(f"param {id}", build, relation, warn=warn)


MIN = scalar("min_value", F32, -1.0)
COERCED, UNKNOWN, DUPLICATE = ("QNNEMU-op-param-type-coerced", "QNNEMU-op-param-unknown-ignored",
                               "QNNEMU-op-param-duplicate-ignored")
AS_TENSOR, AS_SCALAR, RESHAPED = ("QNNEMU-op-param-scalar-as-tensor", "QNNEMU-op-param-tensor-as-scalar",
                                  "QNNEMU-op-param-shape-reshaped")
# names and repeats: ignored / the first one used (a later one is not even read)
prow("unknown name (Relu)", op_row("Relu", [scalar("bogus", F32, 1.0)]), warn=UNKNOWN)
prow("unknown name of an INT_64 scalar (Relu)", op_row("Relu", [scalar("bogus", I64, 1)]), warn=UNKNOWN)
prow("unknown name of a tensor (Transpose)", op_row("Transpose", [tparam("perm", np.array([1, 0], np.uint32)),
                                                                   tparam("bogus", np.array([7], np.uint32))],
                                                     y_shape=(3, 2)), warn=UNKNOWN)
prow("ReluMinMax max_value twice: the first is used", op_row(
    "ReluMinMax", [MIN, scalar("max_value", F32, 2.0), scalar("max_value", F32, 1.0)]), warn=DUPLICATE)
prow("Softmax beta twice, the second INT_64", op_row("Softmax", [scalar("beta", F32, 2.0), scalar("beta", I64, 2)]),
     warn=DUPLICATE)
prow("Softmax beta twice, the first INT_64", op_row("Softmax", [scalar("beta", I64, 2), scalar("beta", F32, 2.0)]),
     SAME)
prow("Argmax axis twice", op_row("Argmax", [scalar("axis", U32, 1), scalar("axis", U32, 0)], y_shape=(2,),
                                 y_dtype=I32), warn=DUPLICATE)
prow("ReluMinMax missing max_value", op_row("ReluMinMax", [MIN]), SAME)
prow("ReluMinMax Max_value (names are case-sensitive)", op_row("ReluMinMax", [MIN, scalar("Max_value", F32, 2.0)]),
     SAME)
# scalars of another type: converted by value
for _dt, _v in ((U32, 2), (I32, 2), (I8, 2), (U16, 2), (Q.QNN_DATATYPE_UFIXED_POINT_8, 2)):
    prow(f"ReluMinMax max_value as {_short(_dt)}", op_row("ReluMinMax", [MIN, scalar("max_value", _dt, _v)]),
         warn=COERCED)
prow("Softmax beta as INT_32", op_row("Softmax", [scalar("beta", I32, 2)]), warn=COERCED)
prow("Softmax axis as INT_32", op_row("Softmax", [scalar("axis", I32, 1)]), warn=COERCED)
prow("Softmax axis as FLOAT_32", op_row("Softmax", [scalar("axis", F32, 1.0)]), warn=COERCED)
prow("Softmax axis as BOOL_8", op_row("Softmax", [scalar("axis", B8, 1)]), warn=COERCED)
prow("Concat axis as BOOL_8", op_row("Concat", [scalar("axis", B8, 1)], inputs=(X23, B23), y_shape=(2, 6)),
     warn=COERCED)
prow("Gather axis as UINT_32", op_row("Gather", [scalar("axis", U32, 1)], inputs=(X34, np.array([2, 0], np.int32)),
                                      y_shape=(3, 2)))
for _dt, _v in ((U32, 1), (I32, 1), (F32, 1.0), (U8, 1)):
    prow(f"MatMul transpose_in1 as {_short(_dt)}",
         op_row("MatMul", [scalar("transpose_in1", _dt, _v)], inputs=(X23, B23), y_shape=(2, 2)), warn=COERCED)
prow("MatMul transpose_in1 BOOL_8 2", op_row("MatMul", [scalar("transpose_in1", B8, 2)], inputs=(X23, B23),
                                              y_shape=(2, 2)))
prow("ReduceMean keep_dims as UINT_32", op_row("ReduceMean", [tparam("axes", np.array([1], np.uint32)),
                                                              scalar("keep_dims", U32, 1)], y_shape=(2, 1)),
     warn=COERCED)
D2S_X = np.arange(16, dtype=np.float32).reshape(1, 1, 1, 16)
prow("DepthToSpace mode as INT_32", op_row("DepthToSpace", [tparam("block_size", np.array([2, 2], np.uint32)),
                                                            scalar("mode", I32, 1)], inputs=(D2S_X,),
                                           y_shape=(1, 2, 2, 4)), warn=COERCED)
PAD11 = np.array([[1, 1], [1, 1]], np.uint32)
prow("Pad scheme as FLOAT_32", op_row("Pad", [tparam("pad_amount", PAD11), scalar("scheme", F32, 0.0)],
                                      y_shape=(4, 5)), warn=COERCED)
prow("Transpose perm as INT_32", op_row("Transpose", [tparam("perm", np.array([1, 0], np.int32))], y_shape=(3, 2)),
     warn=COERCED)
prow("Tile multiples as INT_32", op_row("Tile", [tparam("multiples", np.array([2, 2], np.int32))], y_shape=(4, 6)),
     warn=COERCED)
prow("ReduceMean axes as INT_32", op_row("ReduceMean", [tparam("axes", np.array([1], np.int32))], y_shape=(2,)),
     warn=COERCED)
# a scalar for a tensor parameter, a tensor for a scalar one
prow("ReduceMean axes as a UINT_32 scalar", op_row("ReduceMean", [scalar("axes", U32, 1)], y_shape=(2,)),
     warn=AS_TENSOR)
prow("ReduceMean axes 0 as a scalar", op_row("ReduceMean", [scalar("axes", U32, 0)], y_shape=(3,)), warn=AS_TENSOR)
prow("LayerNorm axes as a scalar", op_row("LayerNorm", [scalar("axes", U32, 1)], inputs=(X23, np.ones(3, np.float32))),
     warn=AS_TENSOR)
prow("ReluMinMax max_value as a tensor [1]",
     op_row("ReluMinMax", [MIN, tparam("max_value", np.array([2.0], np.float32))]), warn=AS_SCALAR)
prow("ReluMinMax max_value as a UINT_32 tensor [1]",
     op_row("ReluMinMax", [MIN, tparam("max_value", np.array([2], np.uint32))]), warn=AS_SCALAR)
prow("Softmax beta as a tensor [2]: its first value",
     op_row("Softmax", [tparam("beta", np.array([2.0, 3.0], np.float32))]), warn=AS_SCALAR)
prow("Elu alpha as a tensor [1]", op_row("Elu", [tparam("alpha", np.array([2.0], np.float32))]), warn=AS_SCALAR)
prow("Concat axis as a rank-0 tensor", op_row("Concat", [tparam("axis", np.array(1, np.uint32))], inputs=(X23, B23),
                                              y_shape=(2, 6)), warn=AS_SCALAR)
prow("Gather axis as a tensor [1]", op_row("Gather", [tparam("axis", np.array([1], np.int32))],
                                           inputs=(X34, np.array([2, 0], np.int32)), y_shape=(3, 2)), warn=AS_SCALAR)
prow("MatMul transpose_in1 as a BOOL_8 tensor [1]",
     op_row("MatMul", [tparam("transpose_in1", np.array([1], np.uint8), B8)], inputs=(X23, B23), y_shape=(2, 2)),
     warn=AS_SCALAR)
prow("Argmax axis as a tensor [1]", op_row("Argmax", [tparam("axis", np.array([1], np.uint32))], y_shape=(2,),
                                           y_dtype=I32), warn=AS_SCALAR)
# tensor parameters of another shape whose values fit
prow("Transpose perm [1, 2]", op_row("Transpose", [tparam("perm", np.array([[1, 0]], np.uint32))], y_shape=(3, 2)),
     warn=RESHAPED)
prow("Pad pad_amount [4]", op_row("Pad", [tparam("pad_amount", np.array([1, 0, 2, 1], np.uint32))], y_shape=(3, 6)),
     warn=RESHAPED)
prow("Pad pad_amount [1, 4]", op_row("Pad", [tparam("pad_amount", np.array([[1, 0, 2, 1]], np.uint32))],
                                     y_shape=(3, 6)), warn=RESHAPED)
for _shape in ((6,), (3, 2)):
    prow(f"StridedSlice ranges {list(_shape)}", op_row("StridedSlice", [tparam("ranges", np.array(
        [0, 2, 1, 1, 4, 2], np.int32).reshape(_shape))], inputs=(X34,), y_shape=(2, 2)), warn=RESHAPED)
prow("DepthToSpace block_size [1, 2]", op_row("DepthToSpace", [tparam("block_size", np.array([[2, 2]], np.uint32))],
                                              inputs=(D2S_X,), y_shape=(1, 2, 2, 4)), warn=RESHAPED)
# what neither takes
prow("ReluMinMax max_value SFIXED_POINT_32", op_row("ReluMinMax", [MIN, scalar("max_value",
                                                                           Q.QNN_DATATYPE_SFIXED_POINT_32, 2)]), SAME)
prow("Softmax beta STRING", op_row("Softmax", [scalar("beta", Q.QNN_DATATYPE_STRING, None)]), SAME)
BOTH_REFUSE = "both refuse; qnnemu at graphAddNode with the parameter's rule, the vendor at graphFinalize"
prow("MatMul transpose_in1 UINT_32 2", op_row("MatMul", [scalar("transpose_in1", U32, 2)], inputs=(X23, B23),
                                              y_shape=(2, 2)), Divergence(BOTH_REFUSE, (True,) * 4 + (False,)))
prow("MatMul transpose_in1 FLOAT_32 0.5", op_row("MatMul", [scalar("transpose_in1", F32, 0.5)], inputs=(X23, B23),
                                                 y_shape=(2, 2)), Divergence(BOTH_REFUSE, (True,) * 4 + (False,)))
prow("Softmax axis INT_32 -1", op_row("Softmax", [scalar("axis", I32, -1)]),
     Divergence(BOTH_REFUSE, (True,) * 3 + (False,)))
prow("Softmax axis FLOAT_32 1.5", op_row("Softmax", [scalar("axis", F32, 1.5)]),
     Divergence(BOTH_REFUSE, (True,) * 3 + (False,)))
prow("Concat axis 5", op_row("Concat", [scalar("axis", U32, 5)], inputs=(X23, B23), y_shape=(2, 6)),
     Divergence(BOTH_REFUSE, (True,) * 4 + (False,)))
# the vendor's answers that look like bugs; qnnemu keeps its own (docs/validation.md)
GARBAGE = "the vendor accepts it and computes with {}; qnnemu refuses it ({})"
prow("Softmax beta BOOL_8 1", op_row("Softmax", [scalar("beta", B8, 1)]),
     Divergence(GARBAGE.format("beta 0 (it reads the byte as a float's bits)", "QNNEMU-op-param-type"),
                (True,) * 3 + (False,)))
prow("ReluMinMax max_value BOOL_8 1", op_row("ReluMinMax", [MIN, scalar("max_value", B8, 1)]),
     Divergence(GARBAGE.format("every output at min_value", "QNNEMU-op-param-type"), (True,) * 3 + (False,)))
prow("Transpose perm as a scalar", op_row("Transpose", [scalar("perm", U32, 1)], y_shape=(3, 2)),
     Divergence(GARBAGE.format("the tensor left as it is", "a perm of 1 value for a rank-2 tensor: "
                               "QNNEMU-Transpose-perm"), (True,) * 3 + (False,)))
prow("Transpose perm of the wrong length", op_row("Transpose", [tparam("perm", np.array([1, 0, 2], np.uint32))],
                                                  y_shape=(3, 2)),
     Divergence(GARBAGE.format("the tensor left as it is", "QNNEMU-Transpose-perm"), (True,) * 4 + (False,)))
prow("Pad pad_amount [3]", op_row("Pad", [tparam("pad_amount", np.array([1, 1, 1], np.uint32))], y_shape=(4, 5)),
     Divergence(GARBAGE.format("values read past the parameter", "QNNEMU-op-param-shape"), (True,) * 4 + (False,)))
# qnnemu takes more than the vendor where one of its kernels has no form for the type
MORE = "qnnemu converts it by value; the vendor's {} (its {} takes one)"
prow("Elu alpha UINT_32 2", op_row("Elu", [scalar("alpha", U32, 2)]),
     Divergence(MORE.format("Elu kernel has no integer alpha: graphFinalize fails", "ReluMinMax"), (True,) * 6),
     warn=COERCED)
prow("Gather axis as FLOAT_32", op_row("Gather", [scalar("axis", F32, 1.0)], inputs=(X34, np.array([2, 0], np.int32)),
                                       y_shape=(3, 2)),
     Divergence(MORE.format("Gather kernel has no float axis: graphFinalize fails", "Softmax"), (True,) * 7),
     warn=COERCED)
prow("Concat axis UINT_8", op_row("Concat", [scalar("axis", U8, 1)], inputs=(X23, B23), y_shape=(2, 6)),
     Divergence("qnnemu reads a 1-byte axis by value; the vendor's Concat reads 4 bytes of it (graphFinalize "
                "fails: 'bad concat')", (True,) * 7))
NATIVE_WIDE = "qnnemu takes a {} scalar of a parameter of its kind (its tools and clients emit them); the vendor's " \
              "graphAddNode builds no parameter from it"
prow("ReluMinMax max_value FLOAT_64", op_row("ReluMinMax", [MIN, scalar("max_value", F64, 2.0)]),
     Divergence(NATIVE_WIDE.format("FLOAT_64"), (True,) * 6))
prow("Concat axis INT_64", op_row("Concat", [scalar("axis", I64, 1)], inputs=(X23, B23), y_shape=(2, 6)),
     Divergence(NATIVE_WIDE.format("INT_64"), (True,) * 7))
prow("Transpose perm (inline STATIC tensor)", op_row("Transpose", [tparam_inline("perm", np.array([1, 0], np.uint32))],
                                                     y_shape=(3, 2)),
     Divergence("the vendor refuses a tensor parameter whose STATIC tensor was not created with "
                "tensorCreateGraphTensor (6001); qnnemu takes its inline data", (True,) * 6))
CRASH = "the vendor's graphFinalize crashes on a float {} (SIGSEGV)"
prow("Concat axis FLOAT_32", op_row("Concat", [scalar("axis", F32, 1.0)], inputs=(X23, B23), y_shape=(2, 6)),
     VendorCrash(CRASH.format("Concat axis"), (True,) * 7))
prow("Transpose perm FLOAT_32", op_row("Transpose", [tparam("perm", np.array([1.0, 0.0], np.float32))], y_shape=(3, 2)),
     VendorCrash(CRASH.format("perm"), (True,) * 7))
prow("NULL name", op_row("Softmax", [scalar(None, F32, 2.0)]),
     VendorCrash("the vendor dereferences the NULL parameter name (SIGSEGV)", (True,) * 3 + (False,)))
# backendValidateOpConfig: the op definition, strictly, on both
for _id, _op, _ps, _kw in [
        ("valid", "ReluMinMax", [MIN, scalar("max_value", F32, 2.0)], {}),
        ("unknown name", "Relu", [scalar("bogus", F32, 1.0)], {}),
        ("UINT_32 for a float", "ReluMinMax", [MIN, scalar("max_value", U32, 2)], {}),
        ("name twice", "ReluMinMax", [MIN, scalar("max_value", F32, 2.0), scalar("max_value", F32, 1.0)], {}),
        ("scalar for a tensor", "Transpose", [scalar("perm", U32, 1)], dict(y_shape=(3, 2))),
        ("tensor for a scalar", "Softmax", [tparam("beta", np.array([2.0], np.float32))], {}),
        ("perm [1, 2]", "Transpose", [tparam("perm", np.array([[1, 0]], np.uint32))], dict(y_shape=(3, 2))),
        ("INT_32 perm", "Transpose", [tparam("perm", np.array([1, 0], np.int32))], dict(y_shape=(3, 2))),
        ("negative UINT", "Softmax", [scalar("axis", I32, -1)], {})]:
    row(f"validateOpConfig {_id}", validate_row(_op, _ps, **_kw))
row("op type unknown", op_row("NoSuchOp"),
    Divergence("both refuse; qnnemu at graphAddNode (QNNEMU-op-type-unknown), the vendor at graphFinalize -- "
               "clients ask backendValidateOpConfig first", (True, True, True, False)))


# ----------------------------------------------------------------------------- index semantics
XI = np.arange(1, 13, dtype=np.float32).reshape(3, 4)


def index_row(op, ind, params, out_shape, upd=None, static=False):
    def build(s):
        code, g = s.graph("g")
        x = abi.tensor("x", XI.shape)
        i = (abi.tensor("i", ind.shape, I32, STATIC, data=ind) if static else abi.tensor("i", ind.shape, I32))
        y = abi.tensor("y", out_shape, type_=APP_READ)
        ins, feeds = [x, i], [(x, XI)] + ([] if static else [(i, ind)])
        if upd is not None:
            u = abi.tensor("u", upd.shape)
            ins.append(u)
            feeds.append((u, upd))
        ps = [abi.scalar_param(k, I32, "int32Value", v) for k, v in params.items()]
        codes = [code] + [s.tensor(g, tt) for tt in (*ins, y)]
        out = np.zeros(out_shape, np.float32)
        for step in (lambda: s.node(g, abi.op_config("n", op, ins, [y], ps)), lambda: s.finalize(g),
                     lambda: s.execute(g, feeds, [(y, out)])):
            if any(codes):
                break
            codes.append(step())
        return Result(tuple(codes), [out] if not any(codes) else None)
    return build


UPD4 = np.full((1, 4), 100, np.float32)
INDEX_CASES = [
    # id, op, indices, params, output shape, updates, warning rule (dynamic / static)
    ("Gather axis 1 negative", "Gather", np.array([-1, -4, 1], np.int32), {"axis": 1}, (3, 3), None,
     "QNNEMU-index-negative-wrapped"),
    ("Gather axis 0 out of range 3", "Gather", np.array([3, 0], np.int32), {"axis": 0}, (2, 4), None, None),
    ("Gather axis 0 out of range -4", "Gather", np.array([-4, 0], np.int32), {"axis": 0}, (2, 4), None, None),
    ("GatherElements negative", "GatherElements", np.array([[-1, 0, 1, -3]] * 3, np.int32), {"axis": 0}, (3, 4),
     None, "QNNEMU-index-invalid-zeroed"),
    ("GatherElements out of range", "GatherElements", np.array([[3, 0, 1, -4]] * 3, np.int32), {"axis": 0},
     (3, 4), None, "QNNEMU-index-invalid-zeroed"),
    ("ScatterElements negative", "ScatterElements", np.array([[-1, 0, 1, -3]], np.int32), {"axis": 0}, (3, 4), UPD4,
     "QNNEMU-index-invalid-skipped"),
    ("ScatterElements out of range", "ScatterElements", np.array([[3, -4, 1, 0]], np.int32), {"axis": 0}, (3, 4),
     UPD4, "QNNEMU-index-invalid-skipped"),
    ("GatherNd negative", "GatherNd", np.array([[-1, -1], [0, 1]], np.int32), {}, (2,), None,
     "QNNEMU-index-negative-wrapped"),
    ("GatherNd out of range", "GatherNd", np.array([[3, 0], [0, 4]], np.int32), {}, (2,), None, None),
    ("ScatterNd negative", "ScatterNd", np.array([[-1, -1], [0, 1]], np.int32), {}, (3, 4),
     np.full((2,), 100, np.float32), "QNNEMU-index-invalid-skipped"),
    ("ScatterNd out of range", "ScatterNd", np.array([[3, 0], [0, 4]], np.int32), {}, (3, 4),
     np.full((2,), 100, np.float32), "QNNEMU-index-invalid-skipped"),
]
GATHER_AXIS0_DYNAMIC = "the vendor fails graphExecute on a dynamic negative Gather index on axis 0 but wraps it " \
                       "on axis 1 and wraps a static one on axis 0 (two kernels disagree); qnnemu wraps it always"
GATHERND_STATIC = "the vendor reads a static negative GatherNd index as 0 while it wraps a dynamic one; " \
                  "qnnemu wraps it always"
GATHERND_STATIC_OOR = "the vendor reads a static out-of-range GatherNd index past its dimension (another row's " \
                      "element); qnnemu fails graphExecute as the vendor does for a dynamic one"
for _id, _op, _ind, _ps, _shape, _upd, _warn in INDEX_CASES:
    for _static in (False, True):
        _rel, _w = SAME_VALUES, _warn
        if _static and _warn is None:
            _w = "QNNEMU-index-static-out-of-range"
        if _static and _id == "GatherNd negative":
            _rel = Divergence(GATHERND_STATIC, (True,) * 7)
        if _static and _id == "GatherNd out of range":
            _rel = Divergence(GATHERND_STATIC_OOR, (True,) * 6 + (False,))
        row(f"index {_id} {'static' if _static else 'dynamic'}", index_row(_op, _ind, _ps, _shape, _upd, _static),
            _rel, warn=_w)
row("index Gather axis 0 negative dynamic", index_row("Gather", np.array([-1, 0, 2], np.int32), {"axis": 0}, (3, 4)),
    Divergence(GATHER_AXIS0_DYNAMIC, (True,) * 7), warn="QNNEMU-index-negative-wrapped")
row("index Gather axis 0 negative static", index_row("Gather", np.array([-1, 0, 2], np.int32), {"axis": 0}, (3, 4),
                                                     static=True), SAME_VALUES, warn="QNNEMU-index-negative-wrapped")


# The Lstm path of ONNX Runtime's QNN EP (NULL tensors of dimensions [0] as absent optional
# inputs, created with tensorCreateGraphTensor) runs through the EP on both libraries in
# tests/test_onnxruntime_lstm.py; here the NULL tensors themselves are rows of the tensor section.


# --------------------------------------------------------------------------------- the check
def run(lib: abi.Library, r: Row) -> tuple[Result, abi.Session]:
    s = abi.Session(lib, soc=r.soc, log_level=Q.QNN_LOG_LEVEL_WARN)
    try:
        return _result(r.build(s)), s
    finally:
        s.close()


def vendor_main() -> None:
    """Runs every row on the vendor's library and prints the results as JSON (the subprocess of
    the ``vendor_results`` fixture: the vendor library keeps the last configured SoC and more
    process-wide, which would change what later tests of this process see from it)."""
    lib = abi.library(VENDOR_PATH)
    out = {}
    for r in ROWS:
        if isinstance(r.relation, VendorCrash):
            continue
        res, _ = run(lib, r)
        out[r.id] = {"codes": list(res.codes),
                     "values": None if res.values is None else [np.asarray(v).tolist() for v in res.values]}
    print("RESULT " + json.dumps(out))


@pytest.fixture(scope="module")
def vendor_results() -> dict:
    env = vendor_env()
    here = Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), str(here), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", "import test_acceptance_vendor as m; m.vendor_main()"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=str(here))
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"the vendor subprocess printed no result (rc {proc.returncode}): {proc.stderr[-1500:]}"
    return json.loads(line[-1][len("RESULT "):])


def _values_close(a: list, b: list) -> bool:
    return len(a) == len(b) and all(np.allclose(np.asarray(x, np.float32), np.asarray(y, np.float32),
                                                rtol=2e-2, atol=2e-2) for x, y in zip(a, b))


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_acceptance(r: Row, vendor_results):
    ours, ours_s = run(abi.library(), r)
    if isinstance(r.relation, VendorCrash):
        assert ours.outcome == r.relation.ours, \
            f"{r.id}: qnnemu answers {ours.codes} (the vendor crashes: {r.relation.reason}); expected success " \
            f"pattern {r.relation.ours}"
        return
    theirs = Result(tuple(vendor_results[r.id]["codes"]), vendor_results[r.id]["values"])
    if isinstance(r.relation, Divergence):
        assert ours.outcome == r.relation.ours, \
            f"{r.id}: documented divergence ({r.relation.reason}): qnnemu answers {ours.codes}, expected success " \
            f"pattern {r.relation.ours}"
        assert theirs.outcome != ours.outcome or (theirs.values is not None and ours.values is not None
                                                  and not _values_close(theirs.values, ours.values)), \
            f"{r.id}: the vendor now answers like qnnemu ({theirs.codes}): the divergence is gone, drop it"
    else:
        assert ours.outcome == theirs.outcome, \
            f"{r.id}: vendor {theirs.codes} vs qnnemu {ours.codes}: qnnemu must accept what the vendor accepts " \
            f"and refuse what it refuses (step for step); qnnemu log: {ours_s.rec.records[-3:]}"
        if r.relation == SAME_VALUES and theirs.values is not None:
            assert ours.values is not None and _values_close(theirs.values, ours.values), \
                f"{r.id}: vendor computes {theirs.values}, qnnemu {[v.tolist() for v in ours.values or []]}"
    if r.warn is not None:
        assert r.warn in ours_s.rec.rules(), f"{r.id}: qnnemu tolerates it with warning rule {r.warn}; logged " \
                                             f"{ours_s.rec.rules()}"
        assert all(lv == Q.QNN_LOG_LEVEL_WARN for lv, m in ours_s.rec.records if f"[{r.warn}]" in m), \
            f"{r.id}: {r.warn} is logged at WARN"


_HVX_SCRIPT = r"""
import json, sys
sys.path.insert(0, {tests!r})
import abi
from qnnemu.headers import Q
from qnnemu.system_client import SystemLibrary
lib = abi.library({lib!r})
system = SystemLibrary({system!r})
out = {{}}
for model in {models!r}:
    s = abi.Session(lib, soc=model, log_level=Q.QNN_LOG_LEVEL_ERROR)
    codes = s.relu_graph(s.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS, numHvxThreads=100),
                         execute=False)
    size = abi.ffi.new("Qnn_ContextBinarySize_t *")
    s.call("contextGetBinarySize", abi.vp(s.ctx), size)
    buf = abi.ffi.new("char[]", int(size[0]))
    written = abi.ffi.new("Qnn_ContextBinarySize_t *")
    code = s.call("contextGetBinary", abi.vp(s.ctx), buf, int(size[0]), written)
    info = system.binary_info(bytes(abi.ffi.buffer(buf, int(written[0]))), details=True)
    out[model] = [list(codes) + [code], info["graphs"][0]["graph_blob_info"]["num_hvx_threads"]]
    s.close()
print("RESULT " + json.dumps(out))
"""


def test_hvx_thread_maximum_per_soc_as_the_vendor_clips():
    """The SoC table's NUM_HVX_THREADS maximum (qnnemu/htp/soc.py MEASURED_HVX_THREADS) is what the
    vendor records in its context binary for a request above it.  In a subprocess: a vendor
    context binary of another SoC leaves the vendor library in a state later ONNX Runtime
    sessions of this process trip over."""
    from qnnemu.htp import soc as socs
    models = [SM8350, SM8550, SM8750, SM8850, Q.QNN_SOC_MODEL_SM7325]
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    script = _HVX_SCRIPT.format(tests=str(Path(__file__).parent), lib=str(VENDOR_PATH),
                                system=str(vendor_library("libQnnSystem.so")), models=models)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"the measuring subprocess printed no result: {proc.stderr[-800:]}"
    for model, (codes, got) in json.loads(line[-1][len("RESULT "):]).items():
        assert codes == [OK] * 6, f"soc {model}: the vendor builds and saves the graph: {codes}"
        assert got == socs.SOCS[int(model)].hvx_threads, \
            f"soc {model}: the vendor clips NUM_HVX_THREADS to {got}, qnnemu's table says " \
            f"{socs.SOCS[int(model)].hvx_threads}"


def test_rows_cover_every_settings_option():
    """Every graph option, optimization type and context option of qnnemu/htp/settings.py has a row."""
    ids = " | ".join(r.id for r in ROWS)
    for name in settings.GRAPH_OPTIONS:
        assert f"graph {name}" in ids, f"graph option {name} has a row"
    for name in settings.OPTIMIZATION_TYPES:
        assert f"OPTIMIZATION {name} " in ids, f"optimization type {name} has a row"
    for name in settings.CONTEXT_OPTIONS:
        assert f"context {name}" in ids, f"context option {name} has a row"
