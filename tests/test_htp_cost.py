"""The HTP cost model (qnnemu/htp/cost.py, docs/htp-prepare.md "Cost model"): the op-class table
covers every op, each class's formula, where ops run (HVX / HMX by precision, arch, config),
HVX thread splitting, DMA streaming, relu folding, weights packing, scratch, and cycles -> time
at the clocks of the performance votes.

Nodes here are light stand-ins (``fake_node`` / ``FakeGraph``, tests/helpers/fake_graph.py) with
the attributes the cost model and the prepare pipeline read from qnnemu.core.graph.Node / Graph;
tests/test_htp_prepare.py uses them for random graphs too."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers.fake_graph import APP_READ, APP_WRITE, F16, F32, S8, SM8550, STATIC, U8, U16, FakeGraph, fake_node

from qnnemu import ops
from qnnemu.htp import cost, perf
from qnnemu.htp.settings import graph_settings
from qnnemu.ops.base import QuantSpec


def settings_for(**kw):
    base = graph_settings(FakeGraph())
    return replace(base, **kw)


# Every test names its SoC: SM8550 (v73, 8 MiB VTCM, 4 HVX threads), not the default device.
V73 = SM8550
NO_HMX = replace(SM8550, hmx=False)
SETTINGS = settings_for(hvx_threads=4)
# float32 computed in float32 (v68, or the exact-float32 opt-out); v69+ runs it in float16 math.
F32_MATH = replace(SETTINGS, float16_math=False)


# ---------------------------------------------------------------------------- the tables
def test_every_registered_op_has_a_cost_class():
    missing = sorted(set(ops.REGISTRY) - set(cost.OP_CLASSES))
    assert missing == [], f"op types without a row in cost.OP_CLASSES: {missing}"


# one representative shape set per class kind: (inputs, output, weight)
_SHAPES = {
    "mac": ([(1, 16, 16, 64)], (1, 16, 16, 64), (3, 3, 64, 64)),
    "depthwise": ([(1, 16, 16, 64)], (1, 16, 16, 64), (3, 3, 1, 64)),
    "elementwise": ([(1, 16, 16, 64)], (1, 16, 16, 64), None),
    "reduce": ([(1, 16, 16, 64)], (1, 16, 16, 64), None),
    "pool": ([(1, 16, 16, 64)], (1, 8, 8, 64), None),
    "move": ([(1, 16, 16, 64)], (1, 16, 16, 64), None),
    "view": ([(1, 16, 16, 64)], (1, 256, 64), None),
    "recurrent": ([(1, 4, 64)], (1, 4, 64), (256, 64)),
}


@pytest.mark.parametrize("op_type", sorted(cost.OP_CLASSES))
def test_each_op_class_row(op_type):
    cls = cost.OP_CLASSES[op_type]
    ins, out, w = _SHAPES[cls.kind]
    if op_type == "FullyConnected":
        ins, out, w = [(16, 256)], (16, 64), (64, 256)
    elif op_type == "MatMul":
        ins, out, w = [(16, 256)], (16, 64), (256, 64)
    node, g = fake_node(op_type, ins, out, weight=w, filter_size=[2, 2])
    c = cost.op_cost(node, g, V73, SETTINGS)
    assert c == cost.op_cost(node, g, V73, SETTINGS), f"{op_type}: the cost is deterministic"
    assert c.cycles >= cost.OP_OVERHEAD_CYCLES, f"{op_type}: at least the per-op overhead, got {c.cycles}"
    want = "HMX" if cls.kind == "mac" else "HVX"
    assert c.resource == want, f"{op_type} ({cls.kind}, uint8, v73): runs on {want}, got {c.resource} ({c.note})"
    if cls.kind == "view":
        assert c.hvx_cycles == 0, f"{op_type}: a view touches no data"
    else:
        assert c.hvx_cycles + c.hmx_cycles > 0, f"{op_type}: a {cls.kind} op computes something"
    # uint8 activations: "rows" (Lstm) and "widen" (8-bit widened to 16 bits) need scratch
    assert (cost.scratch_bytes(node, SETTINGS) > 0) == (cls.scratch in ("rows", "widen")), \
        f"{op_type}: scratch rule {cls.scratch!r}"


@pytest.mark.parametrize("precision,dtype", [("int8", U8), ("int16", U16), ("fp16", F16), ("fp32", F32)])
def test_hvx_mac_rate_rows(precision, dtype):
    """A depthwise convolution (always HVX): cycles = MACs / (MACs per cycle of the precision x
    threads it is split across) + overhead (no DDR tensors: the weight is NATIVE here)."""
    g = FakeGraph()
    x = g.add_tensor("x", (1, 32, 32, 64), dtype)
    w = g.add_tensor("w", (3, 3, 1, 64), dtype)
    y = g.add_tensor("y", (1, 32, 32, 64), dtype)
    node = g.add_node("DepthWiseConv2d", "dw", [x, w], [y])
    c = cost.op_cost(node, g, V73, F32_MATH)
    macs = 32 * 32 * 64 * 9
    assert c.macs == macs and c.precision == precision, "MACs = output elements x kernel window"
    single = math.ceil(macs / cost.HVX_MACS_PER_CYCLE[precision])
    threads = min(4, math.ceil(single / cost.THREAD_SLICE_CYCLES))
    assert c.threads == threads, f"{precision}: split across {threads} threads"
    assert c.cycles == math.ceil(single / threads) + cost.OP_OVERHEAD_CYCLES, f"{precision}: HVX formula"


@pytest.mark.parametrize("arch", sorted(cost.HMX_INT8_MACS_PER_CYCLE))
def test_hmx_rate_rows(arch):
    node, g = fake_node("Conv2d", [(1, 32, 32, 64)], (1, 32, 32, 64), weight=(1, 1, 64, 64))
    # the weight is STATIC (DDR): make it NATIVE-free of DMA by checking the HMX part only
    c = cost.op_cost(node, g, replace(V73, arch=arch), SETTINGS)
    macs = 32 * 32 * 64 * 64
    hmx = math.ceil(macs / cost.HMX_INT8_MACS_PER_CYCLE[arch] * perf.NOMINAL.core_mhz / perf.NOMINAL.hmx_mhz)
    assert c.resource == "HMX" and c.hmx_cycles == cost.HMX_SETUP_CYCLES + hmx, \
        f"v{arch}: HMX cycles = setup + MACs / {cost.HMX_INT8_MACS_PER_CYCLE[arch]} per cycle"
    assert c.resources == ("HMX", "DMA"), "the static weight streams from DDR by DMA"


def test_hmx_precision_and_padding():
    node8, g8 = fake_node("Conv2d", [(1, 16, 16, 64)], (1, 16, 16, 64), weight=(1, 1, 64, 64))
    node16, g16 = fake_node("Conv2d", [(1, 16, 16, 64)], (1, 16, 16, 64), U16, weight=(1, 1, 64, 64), weight_dtype=U8)
    nodef, gf = fake_node("Conv2d", [(1, 16, 16, 64)], (1, 16, 16, 64), F16, weight=(1, 1, 64, 64))
    c8, c16, cf = (cost.op_cost(n, g, V73, SETTINGS) for n, g in ((node8, g8), (node16, g16), (nodef, gf)))
    own = lambda c: c.hmx_cycles - cost.HMX_SETUP_CYCLES  # noqa: E731
    assert own(c16) == 2 * own(c8) and own(cf) == 4 * own(c8), "16-bit activations half rate, fp16 quarter"
    narrow, gn = fake_node("Conv2d", [(1, 16, 16, 40)], (1, 16, 16, 64), weight=(1, 1, 40, 64))
    cn = cost.op_cost(narrow, gn, V73, SETTINGS)
    assert own(cn) == own(c8), "40 input channels pad to 64 on 32-deep HMX tiles: same time as 64"


def test_where_mac_ops_run():
    fp32, g32 = fake_node("FullyConnected", [(8, 256)], (8, 64), F32, weight=(64, 256))
    c = cost.op_cost(fp32, g32, V73, F32_MATH)
    assert c.resource == "HVX" and "fp32" in c.note, "fp32 math: HVX in qf32"
    c = cost.op_cost(fp32, g32, V73, SETTINGS)
    assert c.resource == "HMX" and c.precision == "fp16", "v73 runs float32 graphs in float16 math, on HMX"
    c = cost.op_cost(fp32, g32, V73, replace(F32_MATH, precision_fp16=True))
    assert c.resource == "HMX" and c.precision == "fp16", "PRECISION FLOAT16: fp32 graphs run fp16 on HMX"
    fp16, g16 = fake_node("FullyConnected", [(8, 256)], (8, 64), F16, weight=(64, 256))
    assert cost.op_cost(fp16, g16, replace(V73, arch=69), SETTINGS).resource == "HVX", "fp16 HMX needs v73+"
    q, gq = fake_node("FullyConnected", [(8, 256)], (8, 64), weight=(64, 256))
    c = cost.op_cost(q, gq, NO_HMX, SETTINGS)
    assert c.resource == "HVX" and "no HMX" in c.note, "a SoC without HMX runs matrix ops on HVX"


def test_short_depth_conv_config():
    node, g = fake_node("Conv2d", [(1, 16, 16, 3)], (1, 16, 16, 32), weight=(3, 3, 3, 32))
    on = cost.op_cost(node, g, V73, SETTINGS)
    off = cost.op_cost(node, g, V73, replace(SETTINGS, short_depth_conv_on_hmx=False))
    assert on.resource == "HMX", "short-depth convolutions run on HMX by default"
    assert off.resource == "HVX" and "SHORT_DEPTH" in off.note, "SHORT_DEPTH_CONV_ON_HMX_OFF: HVX"
    deep, gd = fake_node("Conv2d", [(1, 16, 16, 64)], (1, 16, 16, 32), weight=(3, 3, 64, 32))
    assert cost.op_cost(deep, gd, V73, replace(SETTINGS, short_depth_conv_on_hmx=False)).resource == "HMX", \
        "the config only moves convolutions with fewer than 32 input channels"


def test_hvx_threads_split_big_ops_only():
    big, gb = fake_node("ElementWiseAdd", [(1, 64, 64, 256), (1, 64, 64, 256)], (1, 64, 64, 256))
    small, gs = fake_node("ElementWiseAdd", [(1, 4, 4, 8), (1, 4, 4, 8)], (1, 4, 4, 8))
    c1 = cost.op_cost(big, gb, V73, replace(SETTINGS, hvx_threads=1))
    c4 = cost.op_cost(big, gb, V73, replace(SETTINGS, hvx_threads=4))
    assert (c1.threads, c4.threads) == (1, 4), "a big op uses every thread it is given"
    assert c4.cycles < c1.cycles, f"more HVX threads, fewer cycles ({c4.cycles} vs {c1.cycles})"
    assert cost.op_cost(small, gs, V73, replace(SETTINGS, hvx_threads=4)).threads == 1, \
        "a small op is not worth splitting"


def test_dma_streaming_and_copy_formula():
    per_cycle = cost.DMA_BYTES_PER_BUS_CYCLE * perf.NOMINAL.bus_mhz / perf.NOMINAL.core_mhz
    assert cost.dma_bytes_per_cycle() == per_cycle, "bytes per reference cycle from the bus/core clocks"
    assert cost.dma_copy_cycles(0) == 0, "nothing to copy"
    assert cost.dma_copy_cycles(1 << 20) == cost.DMA_SETUP_CYCLES + math.ceil((1 << 20) / per_cycle), "copy formula"
    g = FakeGraph()
    x = g.add_tensor("x", (1, 64, 64, 32), U8, APP_WRITE)
    y = g.add_tensor("y", (1, 64, 64, 32), U8, APP_READ)
    node = g.add_node("Relu", "r", [x], [y])
    c = cost.op_cost(node, g, V73, SETTINGS)
    assert c.dma_bytes == 2 * 64 * 64 * 32 and c.resources == ("HVX", "DMA"), "graph I/O streams through DMA"
    assert c.cycles == max(c.hvx_cycles, c.dma_cycles) + cost.OP_OVERHEAD_CYCLES, "compute and streaming overlap"
    assert cost.stream_buffer_bytes(c.dma_bytes) == 2 * cost.STREAM_CHUNK_BYTES, "two 64 KiB stream chunks"
    assert cost.stream_buffer_bytes(3000) == 2 * 4096, "small transfers: two chunks of their size (2 KiB granule)"


def test_relu_folding():
    g = FakeGraph()
    x = g.add_tensor("x", (1, 32, 32, 64))
    w = g.add_tensor("w", (1, 1, 64, 64), type_=STATIC)
    c = g.add_tensor("c", (1, 32, 32, 64))
    r = g.add_tensor("r", (1, 32, 32, 64))
    g.add_node("Conv2d", "conv", [x, w], [c])
    relu = g.add_node("Relu", "relu", [c], [r])
    folded = cost.op_cost(relu, g, V73, SETTINGS)
    kept = cost.op_cost(relu, g, V73, replace(SETTINGS, fold_relu_into_conv=False))
    assert folded.hvx_cycles == 0 and "folded" in folded.note, "relu after a conv: folded (no compute)"
    assert kept.hvx_cycles > 0, "FOLD_RELU_ACTIVATION_INTO_CONV_OFF: the relu computes"


def test_weights_packing_halves_4bit_weight_streaming():
    g = FakeGraph()
    x = g.add_tensor("x", (8, 256))
    w = g.add_tensor("w", (64, 256), S8, STATIC, quant=QuantSpec(0, 0.1, 0, bitwidth=4))
    y = g.add_tensor("y", (8, 64))
    node = g.add_node("FullyConnected", "fc", [x, w], [y])
    plain = cost.op_cost(node, g, V73, SETTINGS)
    packed = cost.op_cost(node, g, V73, replace(SETTINGS, weights_packing=True))
    assert (plain.dma_bytes, packed.dma_bytes) == (64 * 256, 64 * 128), "4-bit weights stream packed"


def test_row_scratch_rule():
    node, g = fake_node("Lstm", [(4, 8, 1000)], (4, 8, 64))
    assert cost.scratch_bytes(node, replace(SETTINGS, hvx_threads=4)) == 16384, \
        "Lstm: one fp32 row of 1000 per thread, 4 threads, rounded to 2 KiB"


def test_widen_scratch_rule():
    """Softmax and the norms work on 16-bit data (the vendor's thresholds, docs/htp-prepare.md
    "Tiling"): 8-bit VTCM activations need one more byte per element, 16-bit and float ones
    (float32 is held as float16) none; graph inputs and outputs stream (their rows count in the
    stream buffer instead)."""
    node, g = fake_node("Softmax", [(4, 1000)], (4, 1000), dtype=U8)
    assert cost.scratch_bytes(node, SETTINGS, g) == 8192, "uint8: 4000 + 4000 widened bytes, 2 KiB granule"
    for dtype in (U16, F16, F32):
        node, g = fake_node("LayerNorm", [(4, 1000)], (4, 1000), dtype=dtype)
        assert cost.scratch_bytes(node, SETTINGS, g) == 0, f"{dtype}: already 16 bits in VTCM"
    g = FakeGraph()
    x = g.add_tensor("x", (4, 1000), U8, APP_WRITE)
    y = g.add_tensor("y", (4, 1000), U8)
    node = g.add_node("Softmax", "s", [x], [y])
    assert cost.scratch_bytes(node, SETTINGS, g) == 4096, "the streamed graph input is not widened here"
    assert cost.stream_rows_bytes(node, g) == 2000, "its row counts at 16 bits in the stream buffer"


def test_stream_buffer_holds_a_depth_row():
    """The stream buffer holds at least one row of the depth (last axis) of every streamed
    graph input / output: rows bigger than a 64 KiB chunk make it one buffer of those rows."""
    assert cost.stream_buffer_bytes(1 << 20, 0) == 2 * cost.STREAM_CHUNK_BYTES, "two 64 KiB chunks"
    assert cost.stream_buffer_bytes(1 << 20, 512 * 1024) == 512 * 1024, "one row of 512 KiB"
    g = FakeGraph()
    x = g.add_tensor("x", (1, 262144), F32, APP_WRITE)
    y = g.add_tensor("y", (1, 262144), F32, APP_READ)
    node = g.add_node("Sigmoid", "s", [x], [y])
    assert cost.stream_rows_bytes(node, g) == 2 * 262144 * 2, "float32 rows held as float16, in and out"


def test_tile_share_and_tiled_cycles():
    """A tile's cost: its share of the compute and of the streamed graph I/O, the weights
    whole; the tiled op's duration overlaps fills with compute when double-buffered."""
    g = FakeGraph()
    x = g.add_tensor("x", (64, 256), U8, APP_WRITE)
    w = g.add_tensor("w", (64, 256), U8, STATIC)
    y = g.add_tensor("y", (64, 64), U8)
    node = g.add_node("FullyConnected", "fc", [x, w], [y])
    whole = cost.op_cost(node, g, NO_HMX, SETTINGS)
    quarter = cost.op_cost(node, g, NO_HMX, SETTINGS, share=0.25)
    assert quarter.macs == whole.macs // 4, "a quarter of the MACs"
    assert quarter.dma_bytes == 64 * 256 + 64 * 256 // 4, "all the weights, a quarter of the input"
    assert quarter.hvx_cycles * 4 <= whole.hvx_cycles + 4 * cost.THREAD_SLICE_CYCLES, "about a quarter of the work"
    assert cost.tile_copy_cycles([4096, 0, 2048]) == cost.dma_copy_cycles(4096) + cost.dma_copy_cycles(2048), \
        "one transfer per slice"
    fills, runs, spills = [100] * 4, [300] * 4, [50] * 4
    assert cost.tiled_cycles(fills, runs, spills, 1) == 4 * (100 + 300 + 50), "single-buffered: one after another"
    # double-buffered: fill 0, then compute back to back (fills and spills hide under it), last spill
    assert cost.tiled_cycles(fills, runs, spills, 2) == 100 + 4 * 300 + 50, "fills overlap the compute"
    # DMA-bound: the DMA queue sets the pace
    assert cost.tiled_cycles([400] * 4, [10] * 4, [400] * 4, 2) == 8 * 400, "DMA-bound: the queue's total"


# ------------------------------------------------------------------------------- time
def test_cycles_to_us_follows_each_resource_clock():
    nominal = perf.NOMINAL
    for resource in ("HVX", "CPU", "HMX", "DMA"):
        assert cost.cycles_to_us(1000, nominal, resource) == pytest.approx(1000 / nominal.core_mhz), \
            f"{resource}: at the reference clocks a reference cycle is one core cycle"
    fast = perf.Clocks(nominal.core_mhz * 2, nominal.hmx_mhz * 4, nominal.bus_mhz / 2, "TURBO")
    assert cost.cycles_to_us(1000, fast, "HVX") == pytest.approx(1000 / nominal.core_mhz / 2), "core x2"
    assert cost.cycles_to_us(1000, fast, "HMX") == pytest.approx(1000 / nominal.core_mhz / 4), "HMX x4"
    assert cost.cycles_to_us(1000, fast, "DMA") == pytest.approx(1000 / nominal.core_mhz * 2), "bus / 2"
    with pytest.raises(ValueError, match="resource"):
        cost.cycles_to_us(1, nominal, "GPU")


def test_cycles_to_us_with_the_current_votes():
    clocks = perf.current_clocks()
    assert cost.cycles_to_us(5000, clocks, "HVX") == pytest.approx(5000 / clocks.core_mhz), \
        "HVX work takes cycles / core MHz at the voted clocks"
