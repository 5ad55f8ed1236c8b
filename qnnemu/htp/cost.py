"""The HTP cost model: deterministic per-op cycle estimates on the HVX, HMX and DMA resources
(issue 5 item 4), the "cost information" the prepare pipeline (QNN HTP backend documentation,
"Scheduling and Allocation") orders and re-schedules ops with, and what profiling reports as op
cycles; for an op split into tiles, the cycles of one tile's share of its work
(``op_cost(..., share=...)``), of its DMA fills and spills (``tile_copy_cycles``) and the op's
duration with the fills of tile i+1 overlapping the compute of tile i (``tiled_cycles``).

Everything here is a model with documented constants (docs/htp-prepare.md "Cost model"), not a
measurement of silicon.  All cycle counts are *reference cycles*: core-clock cycles at the
reference clocks ``REFERENCE`` (qnnemu.htp.perf.NOMINAL).  HMX work and DMA transfers are
converted into that one time base with the reference clock ratios, so a schedule mixes
resources on one axis; ``cycles_to_us(cycles, clocks, resource)`` turns reference cycles of work
on ``resource`` into microseconds at the clocks the performance votes give
(``qnnemu.htp.perf.current_clocks()``): HVX/CPU work scales with the core clock, HMX work with the
HMX clock and DMA transfers with the bus clock.

``op_cost(node, graph, soc, settings) -> OpCost``: ``soc`` is the device model
(qnnemu.htp.device_model.DeviceModel: ``arch``, ``hmx``, ``hvx_threads``; read with getattr and
defaults), ``settings`` the graph's qnnemu.htp.settings.GraphSettings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..headers import Q
from ..spec import dtypes
from ..spec.tensor import STATIC_TYPES
from . import perf

REFERENCE = perf.NOMINAL                   # the clocks reference cycles are counted at
RESOURCE_CLOCK = {"HVX": "core_mhz", "CPU": "core_mhz", "HMX": "hmx_mhz", "DMA": "bus_mhz"}

# ---- machine constants of the model -------------------------------------------------------
HVX_VECTOR_BYTES = 128                     # one HVX vector; one vector op per cycle per thread
# MACs per cycle of one HVX thread by arithmetic precision (vrmpy-style reductions for 8-bit,
# halfword multiplies for 16-bit, qf16 / qf32 vector float for fp16 / fp32).
HVX_MACS_PER_CYCLE = {"int8": 256, "int16": 128, "fp16": 64, "fp32": 32}
# Elementwise lanes per vector op; fp32 is emulated in qf32 and costs two passes per vector.
HVX_LANES = {"int8": 128, "int16": 64, "fp16": 64, "fp32": 32}
HVX_PASSES = {"int8": 1, "int16": 1, "fp16": 1, "fp32": 2}
# HMX 8-bit MACs per HMX cycle by arch; 16-bit activations run at half, fp16 at a quarter of it.
HMX_INT8_MACS_PER_CYCLE = {68: 2048, 69: 2048, 73: 4096, 75: 4096, 79: 8192, 81: 8192, 85: 8192}
HMX_PRECISION_DIVISOR = {"int8": 1, "int16": 2, "fp16": 4}
HMX_FP16_MIN_ARCH = 73                     # fp16 on HMX from v73; earlier archs run it on HVX
HMX_TILE = 32                              # HMX works on 32-deep x 32-wide tiles (padding waste)
SHORT_DEPTH = 32                           # a convolution with fewer input channels is "short depth"
DMA_BYTES_PER_BUS_CYCLE = 16               # DDR <-> VTCM DMA bandwidth
DMA_SETUP_CYCLES = 200                     # descriptor set-up per transfer (reference cycles)
OP_OVERHEAD_CYCLES = 150                   # scheduling an op on a thread
HMX_SETUP_CYCLES = 300                     # loading an HMX job (weights layout, accumulators)
THREAD_SLICE_CYCLES = 1024                 # an HVX op is split across threads in slices of this much work
STREAM_CHUNK_BYTES = 64 * 1024             # DDR tensors are streamed through 2 chunks of VTCM
SCRATCH_ALIGN = 2048
WIDE_ELEMENT_BYTES = 2                     # "widen" ops (Softmax, norms) work on 16-bit data
# Bandwidth options (QNN HTP backend documentation, "Deep Learning Bandwidth Compression (DLBC)"
# and "Enabling the system level cache allocator"): the document gives no ratios; these are the
# model's choices (docs/htp-prepare.md "Bandwidth options").
DLBC_INPUT_RATIO = 0.6                     # ENABLE_DLBC: graph inputs cross the bus compressed
DLBC_WEIGHT_RATIO = 0.75                   # ENABLE_DLBC_WEIGHTS: static weights compressed
SLC_BANDWIDTH_FACTOR = 1.5                 # ENABLE_SLC_ALLOCATOR: spill/fill copies hit the SLC


def dma_bytes_per_cycle() -> float:
    """DMA bytes per reference (core) cycle."""
    return DMA_BYTES_PER_BUS_CYCLE * REFERENCE.bus_mhz / REFERENCE.core_mhz


def dma_copy_cycles(nbytes: int) -> int:
    """Reference cycles of one DMA transfer of ``nbytes`` (spill, fill, streaming)."""
    return DMA_SETUP_CYCLES + math.ceil(nbytes / dma_bytes_per_cycle()) if nbytes > 0 else 0


def spill_fill_cycles(nbytes: int, settings=None) -> int:
    """Reference cycles of one spill or fill copy of ``nbytes``: with the SLC allocator the
    spill-fill traffic is served by the system level cache at ``SLC_BANDWIDTH_FACTOR`` times the
    DDR bandwidth."""
    if nbytes <= 0:
        return 0
    factor = SLC_BANDWIDTH_FACTOR if getattr(settings, "slc_allocator", False) else 1.0
    return DMA_SETUP_CYCLES + math.ceil(nbytes / (dma_bytes_per_cycle() * factor))


def cycles_to_us(cycles: float, clocks, resource: str = "HVX") -> float:
    """Microseconds that ``cycles`` reference cycles of work on ``resource`` take at ``clocks``
    (a qnnemu.htp.perf.Clocks: core_mhz, hmx_mhz, bus_mhz)."""
    attr = RESOURCE_CLOCK.get(resource)
    if attr is None:
        raise ValueError(f"cycles_to_us: resource {resource!r} is not one of {sorted(RESOURCE_CLOCK)}")
    # reference cycles -> cycles of the resource's own clock at the reference clocks -> time now
    own_cycles = cycles * getattr(REFERENCE, attr) / REFERENCE.core_mhz
    return own_cycles / getattr(clocks, attr)


# ---- op classes ----------------------------------------------------------------------------
@dataclass(frozen=True)
class OpClass:
    """How an op type is costed.

    kind: "mac" (matrix ops: HMX-capable), "depthwise", "elementwise" (``factor`` vector passes per
    output element), "reduce" (``factor`` passes per input element), "pool" (window elements per
    output element), "move" (bytes moved through HVX), "view" (no data touched), "recurrent"
    (weight MACs per time step on HVX).  ``scratch`` names the per-op VTCM scratch rule:
    "rows" = one fp32 accumulator row (last dimension) per HVX thread, "widen" = the op works
    on 16-bit data (8-bit activations widened: one more byte per element of its inputs and
    outputs, measured on the vendor's backend: docs/htp-prepare.md "Tiling"), "" = none."""
    kind: str
    factor: int = 1
    scratch: str = ""


_MAC = ("Conv1d", "Conv2d", "Conv3d", "TransposeConv1d", "TransposeConv2d", "TransposeConv3d",
        "FullyConnected", "MatMul")
_CONV = {"Conv1d", "Conv2d", "Conv3d", "TransposeConv1d", "TransposeConv2d", "TransposeConv3d"}
_ELEMENTWISE_1 = ("Cast", "Convert", "Dequantize", "Quantize", "ElementWiseAbs", "ElementWiseAdd",
                  "ElementWiseAnd", "ElementWiseBinary", "ElementWiseCeil", "ElementWiseEqual",
                  "ElementWiseFloor", "ElementWiseGreater", "ElementWiseGreaterEqual", "ElementWiseLess",
                  "ElementWiseLessEqual", "ElementWiseMaximum", "ElementWiseMinimum", "ElementWiseMultiply",
                  "ElementWiseNeg", "ElementWiseNot", "ElementWiseNotEqual", "ElementWiseOr",
                  "ElementWiseRound", "ElementWiseSelect", "ElementWiseSign", "ElementWiseSubtract",
                  "ElementWiseUnary", "ElementWiseXor", "ElementWiseNeuron", "Prelu", "Relu", "Relu1",
                  "Relu6", "ReluMinMax", "HardSwish", "Batchnorm", "ElementWiseSquaredDifference")
_ELEMENTWISE_4 = ("ElementWiseDivide", "ElementWiseFloorDiv", "ElementWiseFmod", "ElementWiseMod",
                  "ElementWiseRsqrt", "ElementWiseSquareRoot")
_ELEMENTWISE_8 = ("ElementWiseExp", "ElementWiseLog", "ElementWiseSin", "ElementWiseCos",
                  "ElementWiseAsin", "ElementWiseAtan", "ElementWisePower", "ElementWiseSoftplus",
                  "Sigmoid", "Tanh", "Elu", "Gelu")
_ROW_REDUCE = ("Softmax", "LogSoftmax", "MaskedSoftmax", "LayerNorm", "RmsNorm", "GroupNorm", "InstanceNorm", "L2Norm")
_REDUCE = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
           "Argmax", "Argmin", "CumulativeSum", "TopK", "Lrn")
_MOVE = ("BatchToSpace", "ChannelShuffle", "Concat", "DepthToSpace", "Gather", "GatherElements",
         "GatherNd", "Pack", "Pad", "Resize", "ResizeBilinear", "ResizeNearestNeighbor", "ScatterElements",
         "ScatterNd", "SpaceToBatch", "SpaceToDepth", "Split", "StridedSlice", "Tile", "Transpose",
         "UnPack", "GridSample", "RoiAlign")
_VIEW = ("Reshape", "Squeeze", "ExpandDims")

OP_CLASSES: dict[str, OpClass] = {
    **{t: OpClass("mac") for t in _MAC},
    "DepthWiseConv1d": OpClass("depthwise"), "DepthWiseConv2d": OpClass("depthwise"),
    **{t: OpClass("elementwise", 1) for t in _ELEMENTWISE_1},
    **{t: OpClass("elementwise", 4) for t in _ELEMENTWISE_4},
    **{t: OpClass("elementwise", 8) for t in _ELEMENTWISE_8},
    **{t: OpClass("reduce", 6, "widen") for t in _ROW_REDUCE},
    **{t: OpClass("reduce", 2) for t in _REDUCE},
    "PoolAvg2d": OpClass("pool"), "PoolAvg3d": OpClass("pool"),
    "PoolMax2d": OpClass("pool"), "PoolMax3d": OpClass("pool"),
    **{t: OpClass("move") for t in _MOVE},
    **{t: OpClass("view") for t in _VIEW},
    "Lstm": OpClass("recurrent", 1, "rows"),
    # the ops added with QNN 2.50 / ONNX Runtime's QNN EP (qnnemu/ops: rnn, attention, random,
    # index, ...): the nearest existing class of work
    "Gru": OpClass("recurrent", 1, "rows"), "GroupQueryAttention": OpClass("mac"),
    "RotaryEmbedding": OpClass("elementwise", 4), "Erf": OpClass("elementwise", 8),
    "IsNan": OpClass("elementwise", 1), "ThresholdedRelu": OpClass("elementwise", 1),
    "ElementWiseMux": OpClass("elementwise", 1), "Inverse": OpClass("elementwise", 8),
    "RandomUniformLike": OpClass("elementwise", 4), "RandomNormalLike": OpClass("elementwise", 8),
    "NonZero": OpClass("reduce", 2), "Identity": OpClass("view"),
}
DEFAULT_CLASS = OpClass("elementwise", 1)
RELU_TYPES = ("Relu", "Relu1", "Relu6", "ReluMinMax")


def op_class(op_type: str) -> OpClass:
    return OP_CLASSES.get(op_type, DEFAULT_CLASS)


# ---- memory kind of a tensor (shared with the prepare pipeline) ---------------------------
PLAIN_TYPES = frozenset({*STATIC_TYPES, Q.QNN_TENSOR_TYPE_APP_WRITE, Q.QNN_TENSOR_TYPE_APP_READ,
                         Q.QNN_TENSOR_TYPE_APP_READWRITE, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE,
                         Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READ, Q.QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE})


def in_ddr(tensor) -> bool:
    """Graph inputs/outputs (client buffers) and static weights live in DDR ("Plain" blocks,
    streamed through VTCM by DMA); every other tensor (NATIVE activations) is a TCM block."""
    return tensor.type in PLAIN_TYPES


def tensor_bytes(tensor) -> int:
    return int(math.prod(tensor.dims)) * dtypes.itemsize(tensor.dtype)


def vtcm_tensor_bytes(tensor) -> int:
    """Bytes a tensor takes in VTCM: float32 activations are held as float16 (the HTP runs float32
    graphs in float16 math, "QNN HTP Precision"); other types at their size."""
    if tensor.dtype == Q.QNN_DATATYPE_FLOAT_32:
        return int(math.prod(tensor.dims)) * 2
    return tensor_bytes(tensor)


# ---- precision ----------------------------------------------------------------------------
def precision_of(dtype: int, settings) -> str:
    """The arithmetic an op on ``dtype`` data runs in: "int8", "int16", "fp16" or "fp32".

    Float32 runs as fp16 where the SoC computes float32 graphs in float16 math (v69 and later,
    ``GraphSettings.float16_math``) or the graph's PRECISION config asks for FLOAT16; otherwise
    it is emulated in qf32 on HVX ("fp32"). 32-bit integers cost like fp32 (32 lanes)."""
    if dtype in (Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_BFLOAT_16):
        return "fp16"
    if dtype in (Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_64):
        return "fp16" if (getattr(settings, "precision_fp16", False)
                          or getattr(settings, "float16_math", False)) else "fp32"
    size = dtypes.itemsize(dtype) if dtypes.is_known(dtype) else 1
    return {1: "int8", 2: "int16"}.get(size, "fp32")


# ---- the cost -----------------------------------------------------------------------------
@dataclass(frozen=True)
class OpCost:
    """Reference cycles of one op.  ``cycles`` is the op's duration on ``resource``: its compute
    and its DMA streaming of DDR tensors overlap, so it is the larger of the two plus the
    per-op overhead; ``threads`` HVX threads run it (HMX ops: 1)."""
    resource: str                  # "HVX" or "HMX"
    cycles: int
    hvx_cycles: int                # compute on HVX (0 for HMX ops)
    hmx_cycles: int                # compute on HMX (0 for HVX ops)
    dma_cycles: int                # streaming DDR tensors in/out
    dma_bytes: int
    macs: int
    elements: int
    threads: int
    precision: str
    resources: tuple[str, ...]     # every resource the op uses (e.g. ("HMX", "DMA"))
    note: str = ""                 # why it runs where it runs (HVX fallback reasons)


def _prod(shape) -> int:
    return int(math.prod(shape)) if shape else 1


def _spec(specs, i):
    return specs[i] if i < len(specs) and specs[i] is not None else None


def _param(node, name, default=None):
    params = getattr(node, "params", None) or {}
    value = params.get(name, default) if isinstance(params, dict) else default
    return default if value is None else value


def op_macs(node) -> int:
    """Multiply-accumulates of a "mac", "depthwise" or "recurrent" op from its shapes."""
    ins, outs = node.input_specs, node.output_specs
    x, w, y = _spec(ins, 0), _spec(ins, 1), _spec(outs, 0)
    if x is None or y is None:
        return 0
    op = node.op_type
    if op in ("FullyConnected",):
        k = w.shape[-1] if w is not None and w.shape else x.shape[-1]
        return _prod(y.shape) * int(k)
    if op == "MatMul":
        k = x.shape[-2] if _param(node, "transpose_in0", False) and len(x.shape) >= 2 else x.shape[-1]
        return _prod(y.shape) * int(k)
    if op.startswith("TransposeConv") and w is not None:
        # every input element is scattered through the kernel into each output channel
        return _prod(x.shape) * _prod(w.shape[:-2]) * int(w.shape[-1])
    if op in _CONV and w is not None:
        # weights [*kernel, in_channels / group, out_channels]
        return _prod(y.shape) * _prod(w.shape[:-2]) * int(w.shape[-2])
    if op.startswith("DepthWiseConv") and w is not None:
        return _prod(y.shape) * _prod(w.shape[:-2])
    if op in ("Lstm", "Gru"):
        weights = sum(_prod(s.shape) for s in ins[1:] if s is not None and s.data is not None
                      and len(s.shape) == 2)
        return weights * _prod(x.shape[:-1])
    return _prod(y.shape)


def _window(node) -> int:
    k = _param(node, "filter_size")
    try:
        return max(1, _prod(tuple(int(v) for v in k)))
    except TypeError:
        return 1


def _hmx_reason(node, cls: OpClass, precision: str, soc, settings) -> str:
    """Why a "mac" op does not run on HMX ("" when it does)."""
    if not getattr(soc, "hmx", True):
        return "the SoC has no HMX"
    if precision == "fp32":
        return "fp32 math runs on HVX (qf32); HMX takes fixed point and fp16"
    if precision == "fp16" and getattr(soc, "arch", 73) < HMX_FP16_MIN_ARCH:
        return f"fp16 on HMX needs v{HMX_FP16_MIN_ARCH}+"
    w = _spec(node.input_specs, 1)
    if node.op_type in _CONV and w is not None and w.shape and int(w.shape[-2]) < SHORT_DEPTH \
            and not getattr(settings, "short_depth_conv_on_hmx", True):
        return f"short-depth convolution ({int(w.shape[-2])} < {SHORT_DEPTH} input channels) with " \
               f"SHORT_DEPTH_CONV_ON_HMX_OFF"
    return ""


def _hmx_efficiency(node) -> float:
    """Fraction of HMX tile MACs doing useful work: depths and widths pad up to 32."""
    w = _spec(node.input_specs, 1)
    if w is None or len(w.shape) < 2:
        return 1.0
    if node.op_type in _CONV:
        depth, width = int(w.shape[-2]), int(w.shape[-1])
    elif node.op_type == "FullyConnected":
        width, depth = int(w.shape[0]), int(w.shape[-1])
    else:  # MatMul: the reduction and output widths of the second operand
        depth, width = int(w.shape[-2]), int(w.shape[-1])
    pad = lambda n: math.ceil(max(n, 1) / HMX_TILE) * HMX_TILE  # noqa: E731
    return (max(depth, 1) / pad(depth)) * (max(width, 1) / pad(width))


def folded_relu(node, graph, settings) -> bool:
    """A Relu the convolution producing its input applies (relu folding on, the default), so
    the Relu costs nothing.  Fixed-point graphs: exactly the activations the numeric plan folds
    (``Plan.folds``: the vendor's rules, core/plan.py).  Float graphs, where folding changes no
    number: a Relu-type op whose only input is a convolution's output that nothing else reads."""
    if node.op_type not in RELU_TYPES or not getattr(settings, "fold_relu_into_conv", True):
        return False
    if not node.inputs or node.inputs[0] is None:
        return False
    t = graph.tensor(node.inputs[0])
    plan = getattr(graph, "plan", None)
    if t is not None and t.dtype in dtypes.FIXED_POINT_TYPES and plan is not None and hasattr(plan, "folds"):
        k = next((i for i, n in enumerate(graph.nodes) if n is node), None)
        return k is not None and k in plan.folds
    if t is None or t.producer is None or len(set(t.consumers)) != 1:
        return False
    producer = next((n for n in graph.nodes if n.name == t.producer), None)
    return producer is not None and (producer.op_type in _CONV or producer.op_type.startswith("DepthWiseConv"))


def _distinct_inputs(node, graph):
    """The op's input tensors, each once (an op may read one tensor twice), absent ones skipped."""
    seen = set()
    for tid in node.inputs:
        if tid is None or tid in seen:
            continue
        seen.add(tid)
        t = graph.tensor(tid)
        if t is not None:
            yield t


def streamed_bytes(node, graph, settings=None) -> tuple[int, int]:
    """(bytes read from DDR, bytes written to DDR) by the op: its Plain inputs (weights, graph
    inputs) and Plain outputs (graph outputs).  With WEIGHTS_PACKING, 8-bit static weights whose
    quantization is 4-bit are read packed (half the bytes)."""
    read = sum(_packed_bytes(t, settings) for t in _distinct_inputs(node, graph) if in_ddr(t))
    written = 0
    for tid in node.outputs:
        t = graph.tensor(tid)
        if t is not None and in_ddr(t):
            written += tensor_bytes(t)
    return read, written


def bus_bytes(node, graph, settings, share: float = 1.0) -> int:
    """Bytes the op's DMA moves over the bus: its streamed DDR bytes (``streamed_bytes``; a tile
    streams the weights whole and its ``share`` of the rest), graph inputs compressed with
    ENABLE_DLBC and static weights with ENABLE_DLBC_WEIGHTS (``DLBC_*_RATIO``)."""
    dlbc_in = bool(getattr(settings, "dlbc", False))
    dlbc_w = bool(getattr(settings, "dlbc_weights", False))
    weights = inputs = 0
    for t in _distinct_inputs(node, graph):
        if not in_ddr(t):
            continue
        if t.type in STATIC_TYPES:
            weights += _packed_bytes(t, settings)
        else:
            inputs += tensor_bytes(t)
    rest = (math.ceil(inputs * DLBC_INPUT_RATIO) if dlbc_in else inputs) + streamed_bytes(node, graph, settings)[1]
    if share < 1:
        rest = math.ceil(rest * share)
    return (math.ceil(weights * DLBC_WEIGHT_RATIO) if dlbc_w else weights) + rest


def widened_element_bytes(node) -> int:
    """Bytes per element the op holds its activations in while it works: 2 for the "widen" ops
    (Softmax, norms: 8-bit data widened to 16 bits), 0 for the others (their own size)."""
    return WIDE_ELEMENT_BYTES if op_class(node.op_type).scratch == "widen" else 0


def _vtcm_activation_specs(node, graph):
    """Specs of the op's activations that live in VTCM: non-static inputs and outputs, without
    the graph's inputs and outputs when ``graph`` is given (those are streamed from DDR)."""
    out = []
    for tid, spec in (*zip(node.inputs, node.input_specs), *zip(node.outputs, node.output_specs)):
        if tid is None or spec is None or spec.data is not None:
            continue
        t = graph.tensor(tid) if graph is not None else None
        if t is None or not in_ddr(t):
            out.append(spec)
    return out


def _packed_bytes(t, settings) -> int:
    """Bytes a DDR tensor streams: 8-bit static weights quantized to 4 bits are read packed with
    WEIGHTS_PACKING (half the bytes)."""
    n = tensor_bytes(t)
    q = getattr(t, "quant", None)
    if settings is not None and getattr(settings, "weights_packing", False) and t.type in STATIC_TYPES \
            and dtypes.is_known(t.dtype) and dtypes.itemsize(t.dtype) == 1 and getattr(q, "bitwidth", None) == 4:
        n = (n + 1) // 2
    return n


def scratch_bytes(node, settings, graph=None) -> int:
    """VTCM scratch the op needs besides its inputs and outputs (rounded to 2 KiB): the rule of
    its class ("rows": one fp32 row of the last dimension per HVX thread; "widen": the bytes
    that widen its 8-bit VTCM activations to 16 bits)."""
    cls = op_class(node.op_type)
    if cls.scratch == "widen":
        extra = sum(_prod(s.shape) * max(0, WIDE_ELEMENT_BYTES - dtypes.itemsize(s.dtype))
                    for s in _vtcm_activation_specs(node, graph) if dtypes.is_known(s.dtype))
        return _round_up(extra, SCRATCH_ALIGN)
    if cls.scratch != "rows":
        return 0
    x = _spec(node.input_specs, 0)
    row = int(x.shape[-1]) if x is not None and x.shape else 1
    threads = max(1, int(getattr(settings, "hvx_threads", 4) or 4))
    return _round_up(row * 4 * threads, SCRATCH_ALIGN)


def depth_row_bytes(spec, widen: int = 0) -> int:
    """VTCM bytes of one row of a tensor's last axis (its depth): the least of it a tile or a
    stream chunk can hold (the HTP never splits the depth).  Float32 is held as float16."""
    if spec is None:
        return 0
    depth = int(spec.shape[-1]) if spec.shape else 1
    size = 2 if spec.dtype == Q.QNN_DATATYPE_FLOAT_32 else \
        (dtypes.itemsize(spec.dtype) if dtypes.is_known(spec.dtype) else 1)
    return depth * max(size, widen)


def stream_rows_bytes(node, graph) -> int:
    """Depth rows of the op's DDR activations (graph inputs and outputs; not static weights):
    the stream buffer holds at least one row of each."""
    widen = widened_element_bytes(node)
    total = 0
    for tid, spec in (*zip(node.inputs, node.input_specs), *zip(node.outputs, node.output_specs)):
        if tid is None or spec is None:
            continue
        t = graph.tensor(tid)
        if t is not None and in_ddr(t) and t.type not in STATIC_TYPES:
            total += depth_row_bytes(spec, widen)
    return total


def stream_buffer_bytes(ddr_bytes: int, rows: int = 0) -> int:
    """VTCM buffer an op streams its DDR tensors through: 2 chunks of at most 64 KiB (DMA fills
    one while the op reads the other), but at least one depth row of each DDR activation
    (``rows``; one buffer of them when rows are bigger than a chunk)."""
    if ddr_bytes <= 0:
        return 0
    return max(2 * _round_up(min(ddr_bytes, STREAM_CHUNK_BYTES), SCRATCH_ALIGN), _round_up(rows, SCRATCH_ALIGN))


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def op_cost(node, graph, soc, settings, share: float = 1.0) -> OpCost:
    """The cost of ``node`` (a qnnemu.core.graph.Node) in ``graph`` on ``soc`` with ``settings``.

    ``share`` < 1: the cost of one tile of a tiled op holding that fraction of the op's
    iteration space: its share of the compute and of the streamed DDR activations (graph inputs
    and outputs); static weights are streamed whole for every tile; the per-op overhead and HMX
    set-up are paid per tile."""
    cls = op_class(node.op_type)
    x = _spec(node.input_specs, 0)
    y = _spec(node.output_specs, 0)
    act_dtype = (x or y).dtype if (x or y) is not None else Q.QNN_DATATYPE_UFIXED_POINT_8
    precision = precision_of(act_dtype, settings)
    out_elems = sum(_prod(s.shape) for s in node.output_specs if s is not None)
    in_elems = sum(_prod(s.shape) for s in node.input_specs if s is not None and s.data is None)
    threads_max = max(1, int(getattr(settings, "hvx_threads", 4) or 4))
    dma_bytes = bus_bytes(node, graph, settings, share)
    dma_cycles = dma_copy_cycles(dma_bytes)
    macs = 0
    note = ""
    resource = "HVX"
    hmx_cycles = 0
    if cls.kind in ("mac", "depthwise", "recurrent"):
        macs = math.ceil(op_macs(node) * share)
        note = _hmx_reason(node, cls, precision, soc, settings) if cls.kind == "mac" else \
            ("depthwise convolutions have no reduction depth for HMX tiles; they run on HVX"
             if cls.kind == "depthwise" else "recurrent ops run on HVX")
        if cls.kind == "mac" and not note:
            resource = "HMX"
            rate = HMX_INT8_MACS_PER_CYCLE.get(int(getattr(soc, "arch", 73)), 4096) \
                / HMX_PRECISION_DIVISOR[precision]
            hmx_own = macs / (rate * _hmx_efficiency(node))
            # HMX clock cycles -> reference core cycles
            hmx_cycles = HMX_SETUP_CYCLES + math.ceil(hmx_own * REFERENCE.core_mhz / REFERENCE.hmx_mhz)
        single = math.ceil(macs / HVX_MACS_PER_CYCLE[precision])
    elif cls.kind == "elementwise":
        single = math.ceil(out_elems * share * cls.factor * HVX_PASSES[precision] / HVX_LANES[precision])
    elif cls.kind == "reduce":
        single = math.ceil(max(in_elems, out_elems) * share * cls.factor * HVX_PASSES[precision]
                           / HVX_LANES[precision])
    elif cls.kind == "pool":
        single = math.ceil(out_elems * share * _window(node) * HVX_PASSES[precision] / HVX_LANES[precision])
    elif cls.kind == "move":
        moved = sum(_prod(s.shape) * dtypes.itemsize(s.dtype) for s in node.output_specs if s is not None)
        single = math.ceil(moved * share / HVX_VECTOR_BYTES)
    else:  # view: no data touched
        single = 0
    if folded_relu(node, graph, settings):
        single, note = 0, "folded into the producing convolution (FOLD_RELU_ACTIVATION_INTO_CONV)"
    if resource == "HMX":
        hvx_cycles, threads = 0, 1
        cycles = max(hmx_cycles, dma_cycles) + OP_OVERHEAD_CYCLES
    else:
        threads = min(threads_max, max(1, math.ceil(single / THREAD_SLICE_CYCLES)))
        hvx_cycles = math.ceil(single / threads)
        cycles = max(hvx_cycles, dma_cycles) + OP_OVERHEAD_CYCLES
    resources = (resource, "DMA") if dma_bytes else (resource,)
    return OpCost(resource, int(cycles), int(hvx_cycles), int(hmx_cycles), int(dma_cycles), int(dma_bytes),
                  int(macs), math.ceil(out_elems * share), int(threads), precision, resources, note)


# ---- tiles ----------------------------------------------------------------------------------
def static_streamed_bytes(node, graph, settings=None) -> int:
    """Bytes of the op's static inputs (weights) streamed from DDR (packed with WEIGHTS_PACKING)."""
    return sum(_packed_bytes(t, settings) for t in _distinct_inputs(node, graph) if t.type in STATIC_TYPES)


def vtcm_streamed_bytes(node, graph, settings, resource: str, activations: bool = True) -> int:
    """DDR bytes the op streams through a VTCM buffer: its graph inputs and outputs (with
    ``activations``), and its static weights when it runs on HMX (HMX reads only VTCM); an HVX
    op reads its weights through the L2 cache (the vendor's backend fits a LayerNorm or an Add
    of a constant whose activations alone fill the budget: docs/htp-prepare.md "Tiling")."""
    read, written = streamed_bytes(node, graph, settings)
    weights = static_streamed_bytes(node, graph, settings)
    kept = weights if resource == "HMX" else 0
    return (read + written - weights + kept) if activations else kept


def tile_copy_cycles(slices, settings=None) -> int:
    """Reference cycles of one tile's DMA fill or spill: one transfer per tensor slice (through
    the SLC with the SLC allocator, as every spill and fill)."""
    return sum(spill_fill_cycles(int(n), settings) for n in slices if n > 0)


def tiled_cycles(fills: list[int], computes: list[int], spills: list[int], buffers: int) -> int:
    """Duration of a tiled op, tile i's fill, compute and spill taking ``fills[i]``,
    ``computes[i]`` and ``spills[i]`` cycles, fills and spills sharing the one DMA queue in
    runlist order.

    ``buffers`` 1: one tile's buffers at a time: tile i+1's fill waits for tile i's compute (its
    input buffer is reused) and its compute for tile i's spill (the output buffer).
    ``buffers`` 2 (double-buffered): the runlist is fill 0, fill 1, compute 0, then per tile
    fill i+1, compute i, spill i-1: fill i+1 runs while tile i computes; a buffer is reused by
    the tile after next (fill i waits for compute i-2, compute i for spill i-2)."""
    n = len(computes)
    if n == 0:
        return 0
    f_end, c_end, s_end = [0] * n, [0] * n, [0] * n
    dma = 0
    lag = max(1, buffers)

    def fill(i):
        nonlocal dma
        start = max(dma, c_end[i - lag] if i >= lag else 0)
        f_end[i] = dma = start + fills[i]

    def compute(i):
        start = max(f_end[i], c_end[i - 1] if i else 0, s_end[i - lag] if i >= lag else 0)
        c_end[i] = start + computes[i]

    def spill(i):
        nonlocal dma
        start = max(dma, c_end[i])
        s_end[i] = dma = start + spills[i]
    if lag == 1:
        for i in range(n):
            fill(i)
            compute(i)
            spill(i)
    else:
        fill(0)
        if n > 1:
            fill(1)
        compute(0)
        for i in range(1, n):
            if i + 1 < n:
                fill(i + 1)
            compute(i)
            spill(i - 1)
        spill(n - 1)
    return max(s_end[-1], c_end[-1])


# ---- variable batch: weights reused across the batch -----------------------------------------
@dataclass(frozen=True)
class StepReuse:
    """What one runlist step saves per extra batch element whose weights it does not re-read
    (QNN HTP backend documentation, "Benefits of batch inference and multi-threaded inference")."""
    step: int               # the step's index in the runlist
    saving_cycles: int      # a batch element reusing the step's weights costs this much less
    group: int              # batch elements whose activations fit in VTCM with its weights


def weight_bus_bytes(node, graph, settings) -> int:
    """Bytes of the op's static inputs (weights) that cross the bus (packed with
    WEIGHTS_PACKING, compressed with ENABLE_DLBC_WEIGHTS)."""
    weights = static_streamed_bytes(node, graph, settings)
    return math.ceil(weights * DLBC_WEIGHT_RATIO) if getattr(settings, "dlbc_weights", False) else weights


def batch_reuse(graph, plan, soc, settings) -> list[StepReuse]:
    """Per op step of ``plan`` (untiled ops with weights): the cycles an extra batch element
    saves by reusing the weights the first one brought in, and how many batch elements share
    them.  A batch element's op costs, without the weights' DMA and the op's set-up, the larger
    of its compute and its activations' DMA (``op_cost``'s overlap rule); the weights stay in
    VTCM for as many batch elements as fit in the VTCM budget beside them (the step's live VTCM
    bytes each; HMX ops also hold their weights in VTCM), so "with large resolution models ...
    weights are reused for lesser number of activations"."""
    out = []
    budget = int(plan.vtcm_budget_bytes or getattr(settings, "vtcm_bytes", 0) or 0)
    for s in plan.steps:
        if s.kind not in ("op", "launch") or s.node_index is None or s.tile is not None:
            continue
        node = graph.nodes[s.node_index]
        weights = weight_bus_bytes(node, graph, settings)
        if weights <= 0:
            continue
        c = op_cost(node, graph, soc, settings)
        compute = c.hmx_cycles if c.resource == "HMX" else c.hvx_cycles
        shared = max(compute, dma_copy_cycles(max(0, c.dma_bytes - weights)))
        saving = max(0, int(s.cycles) - shared)
        if saving == 0:
            continue
        held = static_streamed_bytes(node, graph, settings) if c.resource == "HMX" else 0
        group = max(1, (budget - held) // max(1, int(s.vtcm_bytes))) if budget > held else 1
        out.append(StepReuse(s.index, saving, int(group)))
    return out


def batch_cycles(plan, reuse: list[StepReuse], n: int) -> int:
    """Reference cycles of one execute with batch multiple ``n`` ("QNN HTP Variable Batch": n x
    the prepared batch): n runs of the plan, less what each op saves on the batch elements that
    reuse its weights (``n - ceil(n / group)`` of them).  The savings of steps that run beside
    others shorten the makespan by the plan's parallel fraction (makespan / sum of step cycles)."""
    n = max(1, int(n))
    total = int(plan.total_cycles)
    if n == 1 or not reuse:
        return total * n
    busy = sum(int(s.cycles) for s in plan.steps) or 1
    scale = min(1.0, total / busy)
    saved = sum((n - math.ceil(n / r.group)) * r.saving_cycles for r in reuse)
    return max(math.ceil(total * n - saved * scale), total)
