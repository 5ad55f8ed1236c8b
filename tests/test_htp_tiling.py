"""Tiling of ops through VTCM in the HTP prepare pipeline (qnnemu/htp/tiling.py,
qnnemu/htp/prepare.py; docs/htp-prepare.md "Tiling"; QNN HTP backend documentation "Scheduling
and Allocation" and "QNN Context Binary size": heavy operations are split into smaller
operations to fit into the VTCM).

- the access rule of each op family: which axes split, which input box a tile reads (halo rows
  of windows, whole reduced axes, broadcast, concat parts, streamed weights);
- plans of tiled ops through the C ABI on an explicit SoC (SM8550): tiles, tile shapes, bytes
  filled and spilled per tile, the DMA steps, the spill-fill buffer, double buffering (tile
  i+1's fill overlaps tile i's compute) and the cost model's estimate of it;
- outputs bit-identical to the untiled plan (tiling is a model: the numeric plan is the same);
- a VTCM sweep 1 -> 8 MiB on 2 MiB activations: every step finalizes, tiles and spill/tile bytes
  never rise;
- ONNX Runtime's QNN EP on qnnemu with ``vtcm_mb=1``: the float [1,32,160,160] Mul that used to
  fail finalize and a uint8 graph, outputs equal to the CPU EP;
- the vendor's libQnnHtp.so as the reference: every large-activation graph it finalizes at
  vtcm_mb 1 (float and uint8: elementwise, conv, matmul, softmax, layernorm, pooling, concat,
  transpose, resize) qnnemu finalizes, and the depth-row thresholds where it refuses (1002),
  qnnemu refuses too (skipped without onnxruntime-qnn).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.ort import pin_our_library
from vendor import vendor_env, vendor_library

import qnnemu
from qnnemu.client import Backend, ffi, htp_device_config, htp_graph_config
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import prepare, tiling
from qnnemu.ops.base import TensorSpec

KIB, MIB = 1024, 1 << 20
SOC = 43                     # SM8550 (v73, 8 MiB VTCM): every test names its SoC
F32, F16, U8 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_UFIXED_POINT_8
QU8 = (0.02, -128)           # a uint8 encoding for the fixed-point graphs

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)


# ------------------------------------------------------------------------- access rules
def spec(shape, dtype=F32, data=None):
    return TensorSpec(tuple(shape), dtype, None, data)


def node(op, ins, outs, **params):
    return SimpleNamespace(op_type=op, params=params, input_specs=ins, output_specs=outs)


def test_axis_maps():
    window = tiling.AxisMap("window", 1, 10, kernel=3, stride=1, pad=1)
    assert [window.needed(a, a + 1) for a in range(10)] == [2] + [3] * 8 + [2], \
        "a 3-row window (pad 1) reads 3 input rows, 2 at the clipped edges"
    assert window.needed(2, 6) == 6, "4 output rows read 4 + 2 halo rows"
    strided = tiling.AxisMap("window", 1, 20, kernel=3, stride=2, pad=1)
    assert strided.needed(0, 10) == 20 and strided.needed(3, 5) == 5, "stride 2: 2 rows per output row + halo"
    dilated = tiling.AxisMap("window", 1, 20, kernel=5, stride=1, pad=2)   # 3x3 dilated by 2
    assert dilated.needed(5, 6) == 5, "a dilated kernel's extent is its halo"
    pointwise = tiling.AxisMap("window", 1, 20, kernel=1, stride=2, pad=0)
    assert pointwise.needed(0, 3) == 6, "a kernel smaller than the stride fetches whole stride groups"
    scatter = tiling.AxisMap("scatter", 1, 8, kernel=2, stride=2, pad=0)   # 2x2 stride-2 transposed conv
    assert [scatter.needed(a, a + 2) for a in range(0, 16, 2)] == [1] * 8, "each input row makes 2 output rows"
    part = tiling.AxisMap("part", 1, 4, offset=6)
    assert (part.needed(0, 6), part.needed(4, 8), part.needed(7, 20)) == (0, 2, 3), "a concat input's share"
    scale = tiling.AxisMap("scale", 1, 10, out=20)
    assert scale.needed(0, 2) == 2 and scale.needed(10, 12) == 3, "a 2x resize: half the rows, one of halo"
    for m in (tiling.AxisMap("same", 0, 7), tiling.AxisMap("one", 0, 1), tiling.AxisMap("full", extent=5)):
        assert m.needed(2, 4) == {"same": 2, "one": 1, "full": 5}[m.kind], m.kind


REDUCE = {   # op -> (reduced axes of the input space, input reads when a reduced axis is split)
    "Softmax3": ((False, False, False, True), 2), "Softmax1": ((False, True, False, False), 2),
    "LayerNorm": ((False, False, True), 2), "ReduceSum": ((False, True, False, False), 1),
    "InstanceNorm": ((False, True, True, False), 2),
}


@pytest.mark.parametrize("case", [
    # op, inputs, output, params, rule, tileable axes of the iteration space
    ("ElementWiseMultiply", [(1, 32, 160, 160), (1, 1, 1, 160)], (1, 32, 160, 160), {}, "elementwise",
     (True, True, True, False)),
    ("Conv2d", [(1, 64, 64, 16), (3, 3, 16, 32)], (1, 64, 64, 32),
     {"stride": np.array([1, 1]), "pad_amount": np.array([[1, 1], [1, 1]]), "dilation": np.array([1, 1])},
     "window", (True, True, True, False)),
    ("PoolMax2d", [(1, 64, 64, 16)], (1, 32, 32, 16),
     {"filter_size": np.array([2, 2]), "stride": np.array([2, 2]), "pad_amount": np.zeros((2, 2))},
     "window", (True, True, True, False)),
    ("TransposeConv2d", [(1, 32, 32, 16), (2, 2, 16, 8)], (1, 64, 64, 8),
     {"stride": np.array([2, 2]), "pad_amount": np.zeros((2, 2))}, "transposed-window", (True, True, True, False)),
    # MatMul / FullyConnected: the space is the output and the reduction depth K, all split
    ("MatMul", [(1, 4096, 512), (512, 256)], (1, 4096, 256), {}, "matmul", (True, True, True, True)),
    ("FullyConnected", [(4096, 512), (256, 512)], (4096, 256), {}, "fully-connected", (True, True, True)),
    ("Softmax3", [(1, 16, 512, 512)], (1, 16, 512, 512), {"axis": 3}, "reduce", (True, True, True, False)),
    ("Softmax1", [(1, 16, 512, 512)], (1, 16, 512, 512), {"axis": 1}, "reduce", (True, True, True, False)),
    ("LayerNorm", [(1, 4096, 512), (512,)], (1, 4096, 512), {"axes": np.array([2])}, "reduce", (True, True, False)),
    ("ReduceSum", [(1, 64, 64, 32)], (1, 64, 32), {"axes": np.array([1]), "keep_dims": False}, "reduce",
     (True, True, True, False)),
    ("InstanceNorm", [(2, 64, 64, 32), (32,), (32,)], (2, 64, 64, 32), {}, "reduce", (True, True, True, False)),
    ("Concat", [(1, 32, 160, 16), (1, 32, 160, 16)], (1, 32, 160, 32), {"axis": 3}, "concat",
     (True, True, True, False)),
    ("Transpose", [(1, 32, 160, 160)], (1, 160, 160, 32), {"perm": np.array([0, 2, 3, 1])}, "transpose",
     (True, True, True, False)),
    ("ResizeNearestNeighbor", [(1, 80, 80, 16)], (1, 160, 160, 16), {}, "resize", (True, True, True, False)),
    ("Gather", [(1000, 64), (1, 512)], (1, 512, 64), {"axis": 0}, "stream", (True, True, False)),
])
def test_access_rules(case):
    """Per op family: the rule and the axes tiles split -- never the depth (the last axis);
    reductions split their reduced axes too (partial results; norms then read twice)."""
    op, ins, out, params, rule, tileable = case
    p = tiling.access_pattern(node(op.rstrip("13"), [spec(s) for s in ins], [spec(out)], **params))
    assert p.rule == rule, f"{op}: the {rule} rule, got {p.rule}"
    assert p.tileable == tileable, f"{op}: tiles split axes {tileable}, got {p.tileable}"
    if op in REDUCE:
        assert (p.reduced, p.passes) == REDUCE[op], f"{op}: reduced axes and passes {REDUCE[op]}"


@pytest.mark.parametrize("op,ins,out,params", [
    ("ElementWiseMultiply", [(1, 32, 40, 40), (1, 1, 1, 40)], (1, 32, 40, 40), {}),
    ("Conv2d", [(1, 33, 31, 16), (3, 3, 16, 32)], (1, 17, 16, 32),
     {"stride": np.array([2, 2]), "pad_amount": np.array([[1, 1], [1, 1]]), "dilation": np.array([1, 1])}),
    ("TransposeConv2d", [(1, 16, 16, 16), (2, 2, 16, 8)], (1, 32, 32, 8),
     {"stride": np.array([2, 2]), "pad_amount": np.zeros((2, 2))}),
    ("MatMul", [(1, 96, 64), (64, 48)], (1, 96, 48), {}),
    ("InstanceNorm", [(2, 24, 24, 8), (8,), (8,)], (2, 24, 24, 8), {}),
    ("Concat", [(1, 8, 40, 16), (1, 8, 40, 16)], (1, 8, 40, 32), {"axis": 3}),
    ("ResizeNearestNeighbor", [(1, 20, 20, 16), ], (1, 40, 40, 16), {}),
])
def test_catalog_tile_bytes_equal_tensor_tile_bytes(op, ins, out, params):
    """The catalog measures its options with its own grouping of each tensor's maps, made once
    (finalize time): every (axis, chunk) must give tensor_tile_bytes' numbers."""
    p = tiling.access_pattern(node(op, [spec(x, F16) for x in ins], [spec(out, F16)], **params))
    tensors = [tiling.Tensor(sl, 2.0, 2 * math.prod(sl.shape), k) for k, sl in enumerate([*p.inputs, *p.outputs])]
    cat = tiling.TileCatalog(p, tensors[:len(p.inputs)], tensors[len(p.inputs):], lambda share: 0)
    checked = 0
    for axis, extent in enumerate(p.space):
        for chunk in sorted({1, 2, 3, max(1, extent // 3), extent}):
            starts = range(0, extent, chunk)
            for t in tensors:
                want = tiling.tensor_tile_bytes(t, p.space, p.tileable, axis, chunk, list(starts))
                assert cat._tile_bytes(t, axis, chunk, len(starts)) == want, \
                    f"{op}: axis {axis} chunk {chunk} tensor {t.slice.index}: {want}"
                checked += 1
    assert checked > 0, f"{op}: some options were measured"


def test_split_reduction_reads_its_tiles_twice():
    """InstanceNorm reduces over the spatial axes: split there, a tile reads its input twice
    (statistics, then the normalized values); split over the batch only, once."""
    n = node("InstanceNorm", [spec((2, 64, 64, 32), F16), spec((32,), F16), spec((32,), F16)],
             [spec((2, 64, 64, 32), F16)])
    p = tiling.access_pattern(n)
    x = tiling.Tensor(p.inputs[0], 2.0, 2 * 64 * 64 * 32 * 2, 1)
    y = tiling.Tensor(p.outputs[0], 2.0, 2 * 64 * 64 * 32 * 2, 2)
    cat = tiling.TileCatalog(p, [x], [y], lambda share: 0)
    batch, rows = cat._option(0, 1, 2), cat._option(1, 16, 2)
    assert (batch.fill_bytes, batch.spill_bytes) == (x.total_bytes, y.total_bytes), "per image: read once"
    assert (rows.fill_bytes, rows.spill_bytes) == (2 * x.total_bytes, y.total_bytes), "split rows: read twice"
    assert all(len(t.fills) == 2 for t in tiling.tiles_of(cat, rows)), "two transfers per tile"


def test_window_input_box_has_halo_rows():
    """A conv tile of output rows [a, b) reads input rows [a*s - p, (b-1)*s - p + k) (clipped):
    the catalog's slices add the halo to every tile; channels stay whole."""
    n = node("Conv2d", [spec((1, 64, 64, 16), F16), spec((3, 3, 16, 32), F16)], [spec((1, 64, 64, 32), F16)],
             stride=np.array([1, 1]), pad_amount=np.array([[1, 1], [1, 1]]), dilation=np.array([1, 1]))
    p = tiling.access_pattern(n)
    x = tiling.Tensor(p.inputs[0], 2.0, 64 * 64 * 16 * 2, 1)
    y = tiling.Tensor(p.outputs[0], 2.0, 64 * 64 * 32 * 2, 2)
    cat = tiling.TileCatalog(p, [x], [y], lambda share: 0)
    option = cat._option(1, 8, 2)                       # 8 output rows per tile
    tiles = tiling.tiles_of(cat, option)
    assert len(tiles) == option.tiles == 8, "64 rows in chunks of 8"
    row_in, row_out = 64 * 16 * 2, 64 * 32 * 2
    assert [t.fills[0] for t in tiles] == [9 * row_in] + [10 * row_in] * 6 + [9 * row_in], \
        "each tile reads its 8 rows + 2 halo rows (1 at the image edges)"
    assert all(t.spills[0] == 8 * row_out for t in tiles), "each tile writes its 8 output rows"
    assert option.fill_bytes == sum(t.fills[0] for t in tiles) == (64 + 14) * row_in, "7 boundaries re-read 2 rows"
    assert option.in_bytes == 10 * row_in and option.out_bytes == 8 * row_out, "the largest tile's slices"


# --------------------------------------------------------------------------- C ABI graphs
def backend() -> Backend:
    return Backend(device_configs=[htp_device_config("SOC", socModel=SOC)])


def core_of(g):
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))


def graph(be: Backend, name: str, mb: int | None):
    configs = [htp_graph_config("VTCM_SIZE", vtcmSizeInMB=mb)] if mb else []
    return be.context().graph(name, configs=configs)


def check_plan(plan) -> None:
    """The invariants of a plan with tiles (tests/test_htp_prepare.py checks the rest)."""
    assert prepare.overlapping_live_blocks(plan.blocks) == [], "no two live TCM blocks share VTCM bytes"
    assert plan.peak_vtcm_bytes <= plan.vtcm_budget_bytes, "within the budget"
    steps = plan.steps
    for s in steps:
        for d in s.deps:
            assert s.start_cycle >= steps[d].end_cycle, f"{s.name} starts after its dependency {steps[d].name}"
    for a, b in plan.constraints:
        assert steps[b].start_cycle >= steps[a].end_cycle, f"constraint {steps[a].name} -> {steps[b].name}"
    dma = sorted((s.start_cycle, s.end_cycle) for s in steps if s.resource == "DMA" and s.cycles)
    assert all(e <= s2 for (_, e), (s2, _) in zip(dma, dma[1:])), "one DMA queue: copies never overlap"
    for t in plan.tilings:
        own = [steps[i] for i in t.steps]
        assert {s.tile_node for s in own} == {t.node_index}, f"{t.node}: its steps name it"
        assert sorted({s.tile for s in own}) == list(range(t.tiles)), f"{t.node}: every tile has steps"
        fills = [s for s in own if s.kind == "fill"]
        spills = [s for s in own if s.kind == "spill"]
        assert sum(s.bytes for s in fills) == t.fill_bytes and sum(s.bytes for s in spills) == t.spill_bytes, \
            f"{t.node}: the tile steps move the tiling's bytes"
        assert all(s.resource == "DMA" and steps[s.pair].kind == "wait" for s in fills + spills), \
            f"{t.node}: tile fills and spills are DMA launches with their waits"
        assert t.working_set_bytes <= plan.planning_budget_bytes, f"{t.node}: the tiles fit the planning budget"


def mul_graph(be: Backend, mb: int | None, shape=(1, 32, 160, 160), dtype=np.float32, quant=None, name="mul"):
    """x -> Sigmoid -> a, x -> Tanh -> b, m = a * b ('p2o.Mul.8'), y = Relu(m): the Mul's
    inputs and output are activations (VTCM)."""
    g = graph(be, name, mb)
    x = g.input("x", shape, dtype, quant=quant)
    q = () if quant is None else (quant,)
    a = g.node("Sigmoid", [x], [("a", shape, dtype, *q)])
    b = g.node("Tanh", [x], [("b", shape, dtype, *q)])
    m = g.node("ElementWiseMultiply", [a, b], [("m", shape, dtype, *q)], name="p2o.Mul.8")
    g.node("Relu", [m], [("y", shape, dtype, *q)], app_read=True)
    g.finalize()
    return g


def test_float_mul_over_vtcm_is_tiled():
    """The measured failure: a float [1,32,160,160] Mul needs 4915200 bytes of VTCM whole
    (three float16 tensors); at the default 4 MiB and at 1 MiB it is tiled along its channels."""
    with backend() as be:
        for mb, tiles in ((None, 3), (1, 11)):
            g = mul_graph(be, mb)
            plan = core_of(g).htp_plan
            check_plan(plan)
            t = plan.tiling_of("p2o.Mul.8")
            assert t is not None and t.untiled_working_set_bytes == 4915200, "the Mul's whole working set"
            assert (t.rule, t.axis, t.buffers, t.tiles) == ("elementwise", 1, 2, tiles), \
                f"VTCM {mb or 4} MiB: {tiles} double-buffered tiles along the channels: {t}"
            rows = t.tile_shape[1]
            slab = rows * 160 * 160 * 2
            assert t.tile_shape == [1, rows, 160, 160] and t.fill_bytes_per_tile == 2 * slab \
                and t.spill_bytes_per_tile == slab, f"a tile fills its two input slabs, spills one: {t}"
            assert t.fill_bytes == 2 * 32 * 160 * 160 * 2 and t.spill_bytes == 32 * 160 * 160 * 2, \
                "elementwise tiles read and write every element once"
            assert t.working_set_bytes == 2 * (t.tile_in_bytes + t.tile_out_bytes) + t.scratch_bytes, \
                "two tiles' buffers (double-buffered)"
            names = [plan.steps[i].name for i in t.steps]
            assert names[:6] == ["p2o.Mul.8:tile0:fill", "p2o.Mul.8:tile0:fill:wait", "p2o.Mul.8:tile1:fill",
                                 "p2o.Mul.8:tile1:fill:wait", "p2o.Mul.8:tile0", "p2o.Mul.8:tile2:fill"], \
                f"runlist: fill 0, fill 1, compute 0, fill 2, ...: {names[:6]}"
            assert plan.spill_fill_buffer_bytes >= 32 * 160 * 160 * 2, "tiles stage through the spill-fill buffer"
            assert core_of(g).spill_fill_bytes == plan.spill_fill_buffer_bytes, "the graph reports it"
            assert plan.tile_fill_bytes >= t.fill_bytes and plan.fill_bytes >= plan.tile_fill_bytes, \
                "the plan's fill bytes include the tiles'"
            assert "tiled into" in plan.passes[2], f"the spill/fill pass says so: {plan.passes[2]}"
            doc = plan.to_optrace()
            assert doc["tilings"][[x["node"] for x in doc["tilings"]].index("p2o.Mul.8")]["tiles"] == tiles, \
                "the optrace document lists the tilings"


def test_double_buffering_overlaps_fills_with_compute():
    """Tile i+1's fill runs on the DMA queue while tile i computes; the tiled op takes the cost
    model's pipelined estimate, less than fill + compute + spill of every tile in a row."""
    with backend() as be:
        g = graph(be, "conv", 1)
        x = g.input("x", (1, 96, 96, 64))
        w = g.static("w", (np.random.default_rng(0).standard_normal((3, 3, 64, 64)) / 24).astype(np.float32))
        a = g.node("Sigmoid", [x], [("a", (1, 96, 96, 64), np.float32)])
        c = g.node("Conv2d", [a, w], [("c", (1, 96, 96, 64), np.float32)], name="conv",
                   params={"pad_amount": np.array([[1, 1], [1, 1]], np.uint32)})
        g.node("Tanh", [c], [("y", (1, 96, 96, 64), np.float32)], app_read=True)
        g.finalize()
        plan = core_of(g).htp_plan
    check_plan(plan)
    t = plan.tiling_of("conv")
    assert t is not None and t.rule == "window" and t.buffers == 2 and t.tiles > 2, f"the conv is tiled: {t}"
    steps = [plan.steps[i] for i in t.steps]
    compute = {s.tile: s for s in steps if s.kind in ("op", "launch")}
    fills = {s.tile: s for s in steps if s.kind == "fill"}
    overlapped = [i for i in range(t.tiles - 1) if fills[i + 1].start_cycle < compute[i].end_cycle
                  and compute[i].start_cycle < fills[i + 1].end_cycle]
    assert overlapped, "some tile's fill runs while the previous tile computes"
    span = max(s.end_cycle for s in steps) - min(s.start_cycle for s in steps)
    assert t.pipelined_cycles < t.serial_cycles, f"the estimate overlaps: {t.pipelined_cycles} < {t.serial_cycles}"
    assert span <= t.pipelined_cycles, f"the schedule ({span}) is no slower than the estimate ({t.pipelined_cycles})"
    busiest = max(sum(s.cycles for s in steps if s.resource == "DMA"),
                  sum(s.cycles for s in steps if s.kind in ("op", "launch")))
    assert span >= busiest, "no faster than its busiest resource"
    row_in = 96 * 64 * 2
    assert t.fill_bytes_per_tile == (t.tile_shape[1] + 2) * row_in, "a full tile reads its rows + 2 halo rows"


# ------------------------------------------------------------------ the numbers do not change
def build_families(g, dtype, quant, hw: int):
    """One graph with a large activation through every op family (elementwise, conv, depthwise
    conv, pool, matmul, softmax, layer norm, reduce, concat, transpose, resize)."""
    rng = np.random.default_rng(3)
    q = () if quant is None else (quant,)
    shape = (1, hw, hw, 64)
    x = g.input("x", shape, dtype, quant=quant)

    def out(name, s):
        return [(name, s, dtype, *q)]

    def weights(name, s):
        data = (rng.standard_normal(s) / math.sqrt(np.prod(s[:-1]))).astype(np.float32)
        if quant is None:
            return g.static(name, data)
        return g.static(name, np.clip(np.round(data / 0.01), -127, 127).astype(np.int8),
                        dtype=Q.QNN_DATATYPE_SFIXED_POINT_8, quant=(0.01, 0))
    a = g.node("Sigmoid", [x], out("a", shape))
    pad = {"pad_amount": np.array([[1, 1], [1, 1]], np.uint32)}
    c = g.node("Conv2d", [a, weights("w", (3, 3, 64, 64))], out("c", shape), params=pad)
    d = g.node("DepthWiseConv2d", [c, weights("dw", (3, 3, 1, 64))], out("d", shape), params=pad)
    m = g.node("ElementWiseMultiply", [c, d], out("m", shape))
    p = g.node("PoolMax2d", [m], out("p", (1, hw // 2, hw // 2, 64)),
               params={"filter_size": np.array([2, 2], np.uint32), "stride": np.array([2, 2], np.uint32)})
    r = g.node("ResizeNearestNeighbor", [p], out("r", shape))
    cat = g.node("Concat", [r, m], out("cat", (1, hw, hw, 128)), params={"axis": np.uint32(3)})
    flat = g.node("Reshape", [cat], out("flat", (1, hw * hw, 128)))
    mm = g.node("MatMul", [flat, weights("mw", (128, 128))], out("mm", (1, hw * hw, 128)))
    sm = g.node("Softmax", [mm], out("sm", (1, hw * hw, 128)))
    ln = g.node("LayerNorm", [sm, g.static("gamma", np.ones(128, np.float32)) if quant is None else
                              g.static("gamma", np.full(128, 100, np.uint8), dtype=U8, quant=(0.01, 0))],
                out("ln", (1, hw * hw, 128)), params={"axes": np.array([2], np.uint32)})
    tr = g.node("Transpose", [ln], out("tr", (1, 128, hw * hw)), params={"perm": np.array([0, 2, 1], np.uint32)})
    g.node("ReduceMean", [tr], out("y", (1, 128, 1)), params={"axes": np.array([2], np.uint32),
                                                             "keep_dims": np.bool_(True)}, app_read=True)
    return x


# activations of 648 KiB (float32 held as float16, 72x72x64) and 676 KiB (uint8, 104x104x64)
@pytest.mark.parametrize("dtype,quant,hw", [(np.float32, None, 72), (U8, QU8, 104)], ids=["float32", "uint8"])
def test_tiled_outputs_are_bit_identical(dtype, quant, hw):
    """Tiling is a model of the prepared plan: the same graph at 1 MiB (ops tiled) and at
    8 MiB (none) computes bit-identical outputs, and the numeric plan (qnnemu/core/plan.py) is
    the same step for step."""
    rng = np.random.default_rng(9)
    outs, plans = {}, {}
    with backend() as be:
        for mb in (1, 8):
            g = graph(be, f"families{mb}", mb)
            x = build_families(g, dtype, quant, hw)
            g.finalize()
            core = core_of(g)
            plans[mb] = core
            feed = rng.standard_normal(x.shape).astype(np.float32) if quant is None else \
                rng.integers(0, 256, x.shape).astype(np.uint8)
            rng = np.random.default_rng(9)
            outs[mb] = g.execute({"x": feed})["y"]
            check_plan(core.htp_plan)
        small, big = plans[1], plans[8]
        tiled = {t.op_type for t in small.htp_plan.tilings}
        assert {"Conv2d", "ElementWiseMultiply", "Concat", "MatMul", "Softmax", "LayerNorm", "Transpose"} <= tiled, \
            f"1 MiB tiles every family: {sorted(tiled)}"
        assert big.htp_plan.tilings == [], "8 MiB fits every op whole"
        steps = small.htp_plan.steps
        conv = small.htp_plan.tiling_of("Conv2d_1")
        kinds = {steps[i].kind for i in conv.steps}
        # SM8550 (v73) runs 8-bit and (float32 graphs in) float16 math on HMX: the tiles launch there
        assert "launch" in kinds, "conv tiles launch on HMX (8-bit, and float16 math on v73)"
        reshape = next(s_ for s_ in steps if s_.op_type == "Reshape")
        assert reshape.inputs[0].endswith("#spill") and "on their DDR copy" in small.htp_plan.passes[2], \
            "the in-place Reshape of a tensor bigger than VTCM runs on its DDR copy"
        numeric = [[(s.node.name, type(s.impl).__name__, s.reads, s.writes) for s in c.plan.steps] + [c.plan.folds]
                   for c in (small, big)]
        assert numeric[0] == numeric[1], "the numeric plan does not depend on the VTCM budget"
    assert outs[1].dtype == outs[8].dtype and np.array_equal(outs[1], outs[8]), "tiling changes no output bit"


# ---------------------------------------------------------------------------- VTCM sweep
def test_vtcm_sweep_1_to_8_mib():
    """2 MiB activations ([1, 64, 128, 128] float, held as float16): at every VTCM size from 1 to
    8 MiB the graph finalizes; tiles fall as VTCM grows, spill and tile bytes never rise."""
    rows = []
    with backend() as be:
        for mb in range(1, 9):
            g = graph(be, f"sweep{mb}", mb)
            x = g.input("x", (1, 64, 128, 128))
            a = g.node("Sigmoid", [x], [("a", x.shape, np.float32)])
            b = g.node("Tanh", [x], [("b", x.shape, np.float32)])
            c = g.node("ElementWiseAdd", [a, b], [("c", x.shape, np.float32)])
            d = g.node("ElementWiseMultiply", [c, a], [("d", x.shape, np.float32)])
            g.node("ElementWiseSubtract", [d, b], [("y", x.shape, np.float32)], app_read=True)
            g.finalize()
            plan = core_of(g).htp_plan
            assert plan.vtcm_budget_bytes == mb * MIB, "VTCM_SIZE is the budget"
            check_plan(plan)
            rows.append((mb, plan.tiles, plan.spill_bytes, plan.tile_fill_bytes + plan.tile_spill_bytes,
                         plan.total_cycles))
    tiles = [r[1] for r in rows]
    assert tiles[0] > 0 and tiles[-1] == 0, f"1 MiB tiles, 8 MiB does not: {rows}"
    for k, what in ((1, "tiles"), (2, "spill bytes"), (3, "tile bytes")):
        series = [r[k] for r in rows]
        assert all(a >= b for a, b in zip(series, series[1:])), f"{what} never rise with VTCM: {rows}"
    assert any(a > b for a, b in zip(tiles, tiles[1:])), f"tile counts fall: {rows}"


# ----------------------------------------------------------------------- ONNX Runtime
try:   # the ONNX Runtime tests skip without the test extras (fixture ``ep``); the rest still run
    import models
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:
    onnx = ort = None
import qnnemu.onnxruntime as qort  # noqa: E402
from qnnemu.core.graph import Graph  # noqa: E402

VENDOR = vendor_library()


@pytest.fixture(scope="module")
def ep():
    """The QNN EP (onnxruntime-qnn) on qnnemu, our library pinned (ORT unloads a backend with
    its last session; tests/test_onnxruntime_models.py explains why that matters)."""
    if ort is None or onnx is None:
        pytest.skip("onnxruntime and onnx (test extras) are not installed")
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    pin_our_library()
    qort.register_qnn_ep()
    return qort


def save(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = models.IR_VERSION
    onnx.save(m, path)
    return path


def act(x, y, op="Sigmoid"):
    return helper.make_node(op, [x], [y])


def onnx_case(kind: str, path: Path) -> Path:
    """Large-activation ONNX graphs (NCHW as ONNX has them; the EP makes conv/pool NHWC)."""
    rng = np.random.default_rng(1)
    img = [1, 32, 160, 160]              # 800 KiB per activation at 8 bits, 1600 KiB in float16
    if kind == "mul":
        mul = helper.make_node("Mul", ["a", "b"], ["m"], name="p2o.Mul.8")
        return save(path, [act("x", "a"), act("x", "b", "Tanh"), mul, act("m", "y", "Relu")],
                    [("x", img)], [("y", img)])
    if kind == "conv":
        w = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32), "w")
        return save(path, [act("x", "a"), helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]),
                           act("c", "y", "Tanh")], [("x", img)], [("y", img)], [w])
    if kind == "matmul":
        w = numpy_helper.from_array((rng.standard_normal((512, 512)) / 23).astype(np.float32), "w")
        return save(path, [act("x", "a"), helper.make_node("MatMul", ["a", "w"], ["b"]), act("b", "y", "Tanh")],
                    [("x", [1, 4096, 512])], [("y", [1, 4096, 512])], [w])
    if kind == "softmax":
        return save(path, [act("x", "a"), helper.make_node("Softmax", ["a"], ["b"], axis=-1), act("b", "y", "Tanh")],
                    [("x", [1, 8, 512, 512])], [("y", [1, 8, 512, 512])])
    if kind == "layernorm":
        inits = [numpy_helper.from_array(np.ones(512, np.float32), "g"),
                 numpy_helper.from_array(np.zeros(512, np.float32), "b0")]
        return save(path, [act("x", "a"), helper.make_node("LayerNormalization", ["a", "g", "b0"], ["b"], axis=-1),
                           act("b", "y", "Tanh")], [("x", [1, 4096, 512])], [("y", [1, 4096, 512])], inits)
    if kind == "pool":
        pool = helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        return save(path, [act("x", "a"), pool,
                           helper.make_node("AveragePool", ["b"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
                           act("c", "y", "Tanh")], [("x", img)], [("y", [1, 32, 80, 80])])
    if kind == "concat":
        return save(path, [act("x", "a"), act("x", "b", "Tanh"), helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
                           act("c", "y", "Relu")], [("x", img)], [("y", [1, 64, 160, 160])])
    if kind == "transpose":
        return save(path, [act("x", "a"), helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 3, 1]),
                           act("b", "y", "Tanh")], [("x", img)], [("y", [1, 160, 160, 32])])
    if kind == "instancenorm":     # reduces over the image per channel: 1 MiB of float16 per tensor
        inits = [numpy_helper.from_array(np.ones(32, np.float32), "g"),
                 numpy_helper.from_array(np.zeros(32, np.float32), "b0")]
        return save(path, [act("x", "a"), helper.make_node("InstanceNormalization", ["a", "g", "b0"], ["b"]),
                           act("b", "y", "Tanh")], [("x", [1, 32, 128, 128])], [("y", [1, 32, 128, 128])], inits)
    if kind == "reduceall":
        return save(path, [act("x", "a"), helper.make_node("ReduceMean", ["a"], ["b"], keepdims=1),
                           act("b", "y", "Tanh")], [("x", [1, 32, 128, 128])], [("y", [1, 1, 1, 1])])
    if kind == "resize":
        scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")
        return save(path, [act("x", "a"), helper.make_node("Resize", ["a", "", "s"], ["b"], mode="nearest"),
                           act("b", "y", "Tanh")], [("x", [1, 16, 160, 160])], [("y", [1, 16, 320, 320])], [scales])
    # [1, n] rows: the depth is the whole tensor (never split), the vendor's thresholds
    op, n = kind.split("_")
    n = int(n)
    if op in ("matmulwide", "matmuldeep"):   # activation x activation, the second operand 2 MiB
        k, cols = (64, n) if op == "matmulwide" else (n, 64)
        return save(path, [act("a0", "a"), act("b0", "b"), helper.make_node("MatMul", ["a", "b"], ["c"]),
                           act("c", "y", "Tanh")], [("a0", [1, 64, k]), ("b0", [1, k, cols])], [("y", [1, 64, cols])])
    if op == "softmaxrow":
        return save(path, [act("x", "a"), helper.make_node("Softmax", ["a"], ["b"], axis=-1), act("b", "y", "Tanh")],
                    [("x", [1, n])], [("y", [1, n])])
    if op == "row":
        return save(path, [act("x", "a"), act("a", "y", "Tanh")], [("x", [1, n])], [("y", [1, n])])
    if op == "column":    # the same elements along the width: tiles split it
        return save(path, [act("x", "a"), act("a", "y", "Tanh")], [("x", [1, 1, n, 1])], [("y", [1, 1, n, 1])])
    if op == "layernormrow":
        inits = [numpy_helper.from_array(np.ones(n, np.float32), "g"),
                 numpy_helper.from_array(np.zeros(n, np.float32), "b0")]
        return save(path, [act("x", "a"), helper.make_node("LayerNormalization", ["a", "g", "b0"], ["b"], axis=-1),
                           act("b", "y", "Tanh")], [("x", [1, n])], [("y", [1, n])], inits)
    if op == "addconst":
        c = numpy_helper.from_array((np.arange(n, dtype=np.float32) % 7 / 7).reshape(1, n), "c")
        return save(path, [act("x", "a"), helper.make_node("Add", ["a", "c"], ["b"]), act("b", "y", "Tanh")],
                    [("x", [1, n])], [("y", [1, n])], [c])
    raise ValueError(kind)


@pytest.fixture(scope="module")
def onnx_models(ep, tmp_path_factory):
    root = tmp_path_factory.mktemp("tiling_models")
    made: dict[tuple[str, bool], Path] = {}

    def get(kind: str, uint8: bool) -> Path:
        if (kind, uint8) not in made:
            path = onnx_case(kind, root / f"{kind}.onnx")
            if uint8:
                path = models.quantize(onnx.load(path), root / f"{kind}.a8w8.onnx", models.QDQ_CONFIGS["a8w8"],
                                       calib_samples=2)
            made[(kind, uint8)] = path
        return made[(kind, uint8)]
    return get


# The vendor's backend runs in a subprocess: an ONNX Runtime session that configures its device
# (soc_model) leaves that state in the loaded library for every later user in the process.
_VENDOR_RUNNER = """
import json, sys, numpy as np, onnxruntime as ort
import qnnemu.onnxruntime as qort
lib, soc, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = []
for path, vtcm, feeds in cases:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = qort.session(path, session_options=so,
                            provider_options=qort.provider_options(backend_path=lib, vtcm_mb=vtcm, soc_model=soc))
    except Exception as e:
        out.append([False, str(e)[:2000]])
        continue
    if feeds:
        np.save(feeds + ".out.npy", sess.run(None, dict(np.load(feeds)))[0])
    out.append([True, ""])
    del sess
print(json.dumps(out))
"""


def vendor_runs(cases: list[tuple[Path, int, Path | None]]) -> list[tuple[bool, str]]:
    """(finalized, error) of the vendor's backend for each (model, vtcm_mb, feeds .npz or None);
    with feeds it also runs the model and saves the first output next to them (.out.npy)."""
    arg = json.dumps([[str(p), v, str(f) if f else ""] for p, v, f in cases])
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _VENDOR_RUNNER, str(VENDOR), str(SOC), arg], env=env,
                          capture_output=True, timeout=900)
    assert proc.returncode == 0, f"the vendor runner failed: {proc.stderr.decode()[-1500:]}"
    return [tuple(r) for r in json.loads(proc.stdout.decode().strip().splitlines()[-1])]


def session(ep, path: Path, vtcm_mb: int):
    """An ORT session of ``path`` on qnnemu at ``vtcm_mb`` on the test's SoC."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ep.session(str(path), provider_options=ep.provider_options(vtcm_mb=vtcm_mb, soc_model=SOC),
                      session_options=so)


def finalizes(ep, path: Path, vtcm_mb: int) -> tuple[bool, str]:
    """Whether qnnemu finalizes the model's graph at ``vtcm_mb`` (ORT session creation)."""
    try:
        sess = session(ep, path, vtcm_mb)
    except Exception as e:
        return False, str(e)
    del sess
    return True, ""


def feeds_for(sess) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}


def tiled_plans(names=("p2o.Mul.8",)):
    return [g.htp_plan for g in HANDLES.live(Graph)
            if g.htp_plan is not None and any(g.htp_plan.tiling_of(n) for n in names)]


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
def test_ort_mul_at_vtcm_mb_1(ep, onnx_models, uint8):
    """ONNX Runtime's QNN EP on qnnemu, ``vtcm_mb=1``: the [1,32,160,160] Mul graph finalizes
    (its ops tiled) and runs; float: equal to the CPU EP within float16 rounding (SM8550 runs
    float32 graphs in float16 math), and bit for bit to the same session at ``vtcm_mb=8``;
    uint8 (QDQ a8w8): the same bits as at ``vtcm_mb=8``, as close to the vendor's output as the
    CPU EP's."""
    path = onnx_models("mul", uint8)
    sess = session(ep, path, 1)
    feeds = feeds_for(sess)
    got = sess.run(None, feeds)[0]
    assert tiled_plans(), "the Mul of the graph ORT made is tiled"
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    del sess
    if not uint8:
        err = float(np.max(np.abs(got - want)))
        assert err <= 2e-3 * float(np.max(np.abs(want))), f"float: max |qnnemu - CPU EP| = {err:.3g}"
        wide = session(ep, path, 8)
        assert np.array_equal(wide.run(None, feeds)[0], got), "float: vtcm_mb 1 (tiled) = vtcm_mb 8 bit for bit"
        return
    wide = session(ep, path, 8)
    assert np.array_equal(wide.run(None, feeds)[0], got), "uint8: vtcm_mb 1 (tiled) = vtcm_mb 8 bit for bit"
    del wide
    scale = models.output_scales(onnx.load(str(path)))["y"]

    def lsb(a, b) -> float:
        return float(np.max(np.rint(np.abs(a.astype(np.float64) - b) / scale)))
    # the CPU EP computes in float between Q/DQ pairs, HTP does not: 8-bit outputs differ by up
    # to 10 LSB on the vendor too (tests/test_onnxruntime_models.py); the vendor is the reference
    assert lsb(got, want) <= 10, f"uint8: max |qnnemu - CPU EP| = {lsb(got, want):.0f} LSB"
    if VENDOR is not None:
        npz = path.with_suffix(".feeds.npz")
        np.savez(npz, **feeds)
        [(ok, err)] = vendor_runs([(path, 1, npz)])
        assert ok, f"the vendor runs it: {err[:300]}"
        theirs = np.load(str(npz) + ".out.npy")
        assert lsb(got, theirs) <= lsb(want, theirs), \
            f"uint8: qnnemu {lsb(got, theirs):.0f} LSB from the vendor, the CPU EP {lsb(want, theirs):.0f}"


# What the vendor's libQnnHtp.so (QNN 2.51, SM8550) does at these VTCM sizes, probed through
# ONNX Runtime: True = finalizes.  Large activations tile, reductions over the image too
# (InstanceNorm, a ReduceMean of everything), MatMuls over their columns and reduction depth
# (a [64, 16384] or [16384, 64] second operand); a [1, n] row is the depth, never split:
# an op whose float16 rows in + out exceed the budget fails (1002) -- n = 262144 fits 1 MiB,
# 266240 does not; n = 1048576 needs 4 MiB (the vendor takes 12 s on that one at 4 MiB, so only
# its refusal at 2 MiB is probed here); LayerNorm weights take no VTCM (nor does an Add's
# constant: the vendor finalizes [1, 262144] + constant at 1 MiB, but takes 18 s to).
VENDOR_FINALIZES = [
    *[(kind, uint8, 1, True) for kind in ("mul", "conv", "matmul", "softmax", "layernorm", "pool", "concat",
                                          "transpose", "resize") for uint8 in (False, True)],
    ("instancenorm", False, 1, True), ("reduceall", False, 1, True),
    ("matmulwide_16384", False, 1, True), ("matmuldeep_16384", False, 1, True),
    ("softmaxrow_262144", False, 1, True), ("softmaxrow_266240", False, 1, False),
    ("softmaxrow_266240", False, 2, True), ("softmaxrow_1048576", False, 2, False),
    ("softmaxrow_262144", True, 1, True),
    ("softmaxrow_266240", True, 1, False), ("row_266240", False, 1, False), ("column_524288", False, 1, True),
    ("layernormrow_262144", False, 1, True),
]


@pytest.fixture(scope="module")
def vendor_outcomes(onnx_models) -> dict[tuple, tuple[bool, str]]:
    """The vendor's (finalized, error) for every VENDOR_FINALIZES case, one subprocess."""
    if VENDOR is None:
        return {}
    cases = [(k, u, v) for k, u, v, _ in VENDOR_FINALIZES]
    return dict(zip(cases, vendor_runs([(onnx_models(k, u), v, None) for k, u, v in cases])))


@pytest.mark.parametrize("kind,uint8,vtcm_mb,expected", VENDOR_FINALIZES,
                         ids=[f"{k}-{'u8' if u else 'f32'}-{v}MiB" for k, u, v, _ in VENDOR_FINALIZES])
def test_finalizes_what_the_vendor_finalizes(ep, onnx_models, vendor_outcomes, kind, uint8, vtcm_mb, expected):
    """qnnemu finalizes exactly where the vendor does (pinned above; re-probed when
    onnxruntime-qnn's libQnnHtp.so is installed), refusing with QNNEMU-prepare-working-set."""
    path = onnx_models(kind, uint8)
    if VENDOR is not None:
        vendor_ok, vendor_err = vendor_outcomes[(kind, uint8, vtcm_mb)]
        assert vendor_ok == expected, f"the vendor {'finalizes' if vendor_ok else 'refuses'} it now: {vendor_err[:300]}"
        if not vendor_ok:
            assert "1002" in vendor_err or "MEM_ALLOC" in vendor_err, f"the vendor's refusal: {vendor_err[:300]}"
    ours_ok, ours_err = finalizes(ep, path, vtcm_mb)
    assert ours_ok == expected, f"qnnemu {'finalizes' if ours_ok else 'refuses'} it: {ours_err[:600]}"
    if not ours_ok:
        assert "QNNEMU-prepare-working-set" in ours_err and "MEM_ALLOC" in ours_err, ours_err[:600]
