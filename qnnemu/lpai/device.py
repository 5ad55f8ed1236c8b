"""The emulated LPAI eNPU (LPAI/QnnLpaiBackend.h: HW_INFO, ENPU_CORE_NUM / ENPU_CORE_INFO,
ALIGNMENT_REQ; QNN LPAI Memory Management, "Get Memory Alignment Requirements").

The numbers are qnnemu's choices (no LPAI hardware or vendor LPAI library was available to
measure; docs/lpai.md says so): one eNPU generation, the header's default hardware version,
two cores, and a 128-byte alignment for buffer start addresses and sizes (a multiple of the
64-byte alignment the C engine's arena offsets have, so a scratch buffer meeting it can hold
the engine's arena as planned).

The eNPU runs fixed-point graphs: tensors of the fixed-point types below, on the ops below.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..headers import Q

HW_VERSION = Q.QNN_LPAI_BACKEND_HW_VERSION_DEFAULT          # V6, the headers' default
TARGET = Q.QNN_LPAI_BACKEND_TARGET_X86                      # the emulator runs on x86-64
CORES = 2
MACS_PER_CORE = 1024
START_ADDR_ALIGNMENT = 128
SIZE_ALIGNMENT = 128

# Fixed point only: 8/16-bit activations and weights, 32-bit fixed point for biases, plain
# 32-bit integers for shape-like inputs (Gather indices, Reshape shapes).
DATA_TYPES = frozenset({
    Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8,
    Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16,
    Q.QNN_DATATYPE_SFIXED_POINT_32, Q.QNN_DATATYPE_UFIXED_POINT_32,
    Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32,
})

# The op types the emulated eNPU takes (qnnemu's executable ops a low-power audio/vision
# accelerator typically runs; all others are refused at graphAddNode).
OPS = frozenset({
    "Concat", "Conv2d", "DepthWiseConv2d", "ElementWiseAdd", "ElementWiseMaximum", "ElementWiseMinimum",
    "ElementWiseMultiply", "ElementWiseSubtract", "FullyConnected", "Gather", "Gru", "HardSwish",
    "LayerNorm", "Lstm", "MatMul", "Pad", "PoolAvg2d", "PoolMax2d", "Prelu", "ReduceMean", "Relu",
    "Relu6", "ReluMinMax", "Reshape", "Resize", "ResizeNearestNeighbor", "Sigmoid", "Softmax", "Split",
    "StridedSlice", "Tanh", "Transpose", "TransposeConv2d",
})


@dataclass
class HwInfo:
    """The backend's HW_INFO config (QnnLpaiBackend_CustomConfigHwInfo_t)."""

    target: int = TARGET
    hw_version: int = HW_VERSION


def core_info() -> list[tuple[int, int, int]]:
    """(coreIndex, macCnt, version) of every eNPU core (ENPU_CORE_INFO)."""
    return [(i, MACS_PER_CORE, HW_VERSION) for i in range(CORES)]


def align_up(n: int, alignment: int = SIZE_ALIGNMENT) -> int:
    return -(-int(n) // alignment) * alignment
