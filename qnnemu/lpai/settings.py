"""The LPAI custom configs and properties (LPAI/QnnLpaiBackend.h, QnnLpaiContext.h,
QnnLpaiGraph.h, QnnLpaiMem.h) and their rules, on values already read from C
(qnnemu/abi/lpai_api.py reads the structs); QNN LPAI Memory Management, "Memory Lifetime and
Allocation Requirements".

Every refusal is an error rule (qnnemu/rules.py ``ERROR_RULES``, ``QNNEMU-lpai-*``) naming the
function and the parameter path.
"""
from __future__ import annotations

from ..headers import Q
from ..location import Location
from ..rules import fail
from ..spec import dtypes
from . import device

HW_TARGETS = {Q.QNN_LPAI_BACKEND_TARGET_X86, Q.QNN_LPAI_BACKEND_TARGET_ARM, Q.QNN_LPAI_BACKEND_TARGET_ADSP,
              Q.QNN_LPAI_BACKEND_TARGET_TENSILICA}
HW_VERSIONS = {v for v, n in Q.enum("QNN_LPAI_BACKEND_HW_VERSION_").items()
               if not n.endswith(("_NA", "_UNKNOWN"))}
# QNN_LPAI_GRAPH_SET_CFG_PREPARE: named by LPAI/QnnLpaiTypes.h only (its _DEFAULT value).
GRAPH_SET_CFG_PREPARE = Q.QNN_LPAI_GRAPH_SET_CFG_PREPARE_DEFAULT


def mem_type_name(value: int) -> str:
    return Q.enum("QNN_LPAI_MEM_TYPE_").get(int(value), str(int(value)))


def check_hw_info(target: int, hw_version: int, loc: Location) -> device.HwInfo:
    """HW_INFO: a target and hardware version the headers define (NA / UNKNOWN refused).  Every
    version is emulated by the same eNPU model (docs/lpai.md)."""
    if target not in HW_TARGETS:
        fail(loc.field("lpaiTarget"), "QNNEMU-lpai-hw-info",
             f"{target} is not a QnnLpaiBackend_Target_t (X86, ARM, ADSP or TENSILICA)",
             code=Q.QNN_BACKEND_ERROR_INVALID_CONFIG)
    if hw_version not in HW_VERSIONS:
        fail(loc.field("hwVersion"), "QNNEMU-lpai-hw-info",
             f"{hw_version} is not a known QnnLpaiBackend_HwVersion_t (V1..V7, V5_1; not NA or UNKNOWN)",
             code=Q.QNN_BACKEND_ERROR_INVALID_CONFIG)
    return device.HwInfo(target, hw_version)


def check_context_mem_type(value: int, loc: Location, direct_mode: bool = False) -> int:
    """MODEL_BUFFER_MEM_TYPE: where the model buffer lives.  DDR everywhere; TCM in ADSP direct
    mode only (the backend created with HW_INFO target ADSP; QNN LPAI Memory Management, "TCM
    Memory Support in LPAIBackendExtensions (ADSP Direct Mode)": not on ARM or x86 simulation)."""
    value = int(value)
    if value == Q.QNN_LPAI_MEM_TYPE_DDR or (value == Q.QNN_LPAI_MEM_TYPE_TCM and direct_mode):
        return value
    why = ("TCM is available in ADSP direct mode only (HW_INFO target ADSP), not on ARM or x86 "
           "simulation platforms"
           if value == Q.QNN_LPAI_MEM_TYPE_TCM else "only QNN_LPAI_MEM_TYPE_DDR and TCM are defined")
    fail(loc, "QNNEMU-lpai-context-mem-type", f"{mem_type_name(value)}: {why}",
         code=Q.QNN_CONTEXT_ERROR_INVALID_CONFIG)


def check_graph_mem(kind: str, mem_type: int, size: int, addr: int, loc: Location) -> None:
    """A SCRATCH_MEM / PERSISTENT_MEM buffer: DDR (scratch and persistent memory are always in
    DDR), a non-NULL start address and a size meeting ALIGNMENT_REQ."""
    if int(mem_type) != Q.QNN_LPAI_MEM_TYPE_DDR:
        fail(loc.field("memType"), "QNNEMU-lpai-graph-mem-type",
             f"{mem_type_name(mem_type)}: {kind} memory is always allocated in DDR (QNN_LPAI_MEM_TYPE_DDR)",
             code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    if addr == 0:
        fail(loc.field("addr"), "QNNEMU-lpai-graph-mem-null",
             f"the {kind} buffer is NULL: a {kind} buffer must always exist", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    if addr % device.START_ADDR_ALIGNMENT:
        fail(loc.field("addr"), "QNNEMU-lpai-graph-mem-align",
             f"{addr:#x} is not aligned to startAddrAlignment {device.START_ADDR_ALIGNMENT} "
             f"(QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    if size % device.SIZE_ALIGNMENT:
        fail(loc.field("size"), "QNNEMU-lpai-graph-mem-size-align",
             f"{size} is not a multiple of sizeAlignment {device.SIZE_ALIGNMENT} "
             f"(QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ)", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)


def check_perf_cfg(fps: int, ftrt_ratio: int, client_type: int, loc: Location) -> dict:
    """PERF_CFG: a frame rate of at least 1 and a defined client type (ftrtRatio is recorded)."""
    if client_type not in (Q.QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_REAL_TIME,
                           Q.QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_NON_REAL_TIME):
        fail(loc.field("clientType"), "QNNEMU-lpai-perf-cfg",
             f"{client_type} is not REAL_TIME or NON_REAL_TIME", code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    if fps == 0:
        fail(loc.field("fps"), "QNNEMU-lpai-perf-cfg", "0: the frame rate must be at least 1",
             code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    return {"fps": fps, "ftrtRatio": ftrt_ratio, "clientType": client_type}


def check_core_affinity(affinity: int, selection: int, loc: Location) -> dict:
    """CORE_AFFINITY: SOFT or HARD, a non-empty selection of the eNPU's cores."""
    if affinity not in (Q.QNN_LPAI_GRAPH_CORE_AFFINITY_SOFT, Q.QNN_LPAI_GRAPH_CORE_AFFINITY_HARD):
        fail(loc.field("affinity"), "QNNEMU-lpai-core-affinity", f"{affinity} is not SOFT or HARD",
             code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    cores = (1 << device.CORES) - 1
    if selection == 0 or selection & ~cores:
        fail(loc.field("coreSelection"), "QNNEMU-lpai-core-affinity",
             f"{selection:#x} selects no core or a core the eNPU lacks (it has {device.CORES} cores: "
             f"mask {cores:#x}; QNN_LPAI_CORE_AFFINITY(core_id, affinity) sets bit core_id)",
             code=Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT)
    return {"affinity": affinity, "coreSelection": selection}


def check_node(op_type: str, tensors: list[tuple[str, str, int]], loc: Location) -> None:
    """graphAddNode on the eNPU: an op it runs, fixed-point tensors ((path, name, data type))."""
    if op_type not in device.OPS:
        fail(loc.field("typeName"), "QNNEMU-lpai-op",
             f"{op_type} is not an op of the emulated LPAI eNPU (docs/lpai.md lists them)",
             code=Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG)
    for path, name, dtype in tensors:
        if dtype not in device.DATA_TYPES:
            fail(loc.path(path), "QNNEMU-lpai-dtype",
                 f"tensor '{name}' is {dtypes.name(dtype)}: the LPAI eNPU runs fixed-point graphs "
                 f"(UFIXED/SFIXED_POINT_8/16/32, INT_32/UINT_32 indices and shapes)",
                 code=Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG)
