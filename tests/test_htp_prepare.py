"""The HTP prepare pipeline at graphFinalize (qnnemu/htp/prepare.py; QNN HTP backend
documentation, "Scheduling and Allocation"; docs/htp-prepare.md): each pass's inspectable result,
spill/fill under small VTCM budgets (monotone in the budget), launch/wait pairs, VTCM offsets with
no live overlap, a valid parallel schedule, the working-set failure, unchanged numerics, and
properties over random DAGs (spill bytes never grow with the budget; at equal spill, fill bytes;
at equal spill and fill, tiles and tile bytes).

Graphs are built on the core objects (as the ABI layer hands them over), through the C ABI with
qnnemu.client (VTCM_SIZE config), or as light stand-ins (tests/helpers/fake_graph.py FakeGraph) for
hypothesis."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.fake_graph import APP_READ, APP_WRITE, F32, NATIVE, S8, SM8550, STATIC, U8, FakeGraph
from hypothesis import given, settings, strategies as st

from qnnemu.core.backend import Backend
from qnnemu.core.context import Context
from qnnemu.core.device import Device, DeviceModel, model_for
from qnnemu.core.graph import OpConfigDesc, ParamDesc
from qnnemu.core.handles import HANDLES
from qnnemu.core.log import NULL_LOGGER
from qnnemu.core.tensor import RawQuant, TensorDesc
from qnnemu.errors import QnnError
from qnnemu.headers import Q
from qnnemu.htp import prepare
from qnnemu.htp.plan_types import PLAIN, TCM
from qnnemu.htp.soc import SOCS

KIB = 1024


# ------------------------------------------------------------------------- core builders
def _quant(q) -> RawQuant:
    if q is None:
        return RawQuant(Q.QNN_DEFINITION_UNDEFINED, Q.QNN_QUANTIZATION_ENCODING_UNDEFINED)
    return RawQuant(Q.QNN_DEFINITION_DEFINED, Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, scale=q[0], offset=q[1])


class Builder:
    """A core graph: tensors and nodes as the ABI layer would create them."""

    def __init__(self, name="g", model: DeviceModel = SM8550, vtcm: int | None = None):
        device = Device(model, NULL_LOGGER)
        self.ctx = Context(Backend(), device, None, None)
        self.graph = HANDLES.lookup(self.ctx.create_graph(name))
        if vtcm is not None:
            set_vtcm(self.graph, vtcm)
        self.rng = np.random.default_rng(7)

    def tensor(self, name, dims, dtype=F32, type_=NATIVE, data=None, quant=None):
        raw = None if data is None else np.ascontiguousarray(data).tobytes()
        d = TensorDesc(2, 0, name, type_, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, dtype, _quant(quant), tuple(dims),
                       Q.QNN_TENSORMEMTYPE_RAW, raw, len(raw) if raw else 0, raw is not None)
        return self.graph.create_tensor(d)

    def node(self, op, name, inputs, outputs):
        ref = lambda t: TensorDesc(2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,  # noqa: E731
                                   t.dtype, _quant(None), t.dims, Q.QNN_TENSORMEMTYPE_RAW)
        self.graph.add_node(OpConfigDesc(1, name, "qti.aisw", op, [], [ref(t) for t in inputs],
                                         [ref(t) for t in outputs]))

    def conv(self, name, x, cout, k=1, out_type=NATIVE):
        cin = x.dims[-1]
        w = self.tensor(f"{name}_w", (k, k, cin, cout), type_=STATIC,
                        data=(self.rng.standard_normal((k, k, cin, cout)) / np.sqrt(cin * k * k)).astype(np.float32))
        y = self.tensor(f"{name}_out", (*x.dims[:-1], cout), type_=out_type)
        self.node("Conv2d", name, [x, w], [y])
        return y


def set_vtcm(graph, nbytes: int) -> None:
    """The VTCM budget as a VTCM_SIZE_IN_BYTES request (the record qnnemu/htp/settings.py reads)."""
    graph.configs["htp_vtcm"] = {"option": "VTCM_SIZE_IN_BYTES", "bytes": int(nbytes)}


def long_lived_graph(vtcm: int | None = None, hw=16) -> Builder:
    """x -> A (kept until the end) -> P1 (64 ch) -> P2 (64 ch) -> P3 -> y = A + P3.  A stays live
    through the chain's big intermediates: a small budget must spill it."""
    b = Builder("long_lived", vtcm=vtcm)
    x = b.tensor("x", (1, hw, hw, 8), type_=APP_WRITE)
    a = b.conv("A", x, 32)
    p1 = b.conv("P1", a, 64)
    p2 = b.conv("P2", p1, 64)
    p3 = b.conv("P3", p2, 32)
    y = b.tensor("y", a.dims, type_=APP_READ)
    b.node("ElementWiseAdd", "add", [a, p3], [y])
    b.x, b.y = x, y
    return b


def branchy_graph() -> Builder:
    """x -> t -> two parallel branches, each widening to a big tensor then narrowing, joined by
    an Add.  Graph order runs both widening convs first (both big tensors live at once); a
    better order finishes one branch before starting the other."""
    b = Builder("branchy")
    x = b.tensor("x", (1, 16, 16, 8), type_=APP_WRITE)
    t = b.conv("stem", x, 8)
    big_l = b.conv("left_wide", t, 128)
    big_r = b.conv("right_wide", t, 128)
    small_l = b.conv("left_narrow", big_l, 8)
    small_r = b.conv("right_narrow", big_r, 8)
    y = b.tensor("y", small_l.dims, type_=APP_READ)
    b.node("ElementWiseAdd", "join", [small_l, small_r], [y])
    b.x, b.y = x, y
    return b


def check_plan(plan, nodes: int) -> None:
    """Invariants every prepared plan keeps."""
    order = plan.prescheduled_order
    assert sorted(order) == list(range(nodes)), "the runlist holds every op once"
    steps = plan.steps
    assert [s.index for s in steps] == list(range(len(steps))), "step indices are positions"
    assert prepare.overlapping_live_blocks(plan.blocks) == [], "no two live TCM blocks share VTCM bytes"
    assert plan.peak_vtcm_bytes <= plan.vtcm_budget_bytes, \
        f"peak VTCM {plan.peak_vtcm_bytes} within the budget {plan.vtcm_budget_bytes}"
    placed = [b for b in plan.blocks if b.kind == TCM and b.first_step is not None]
    assert plan.peak_vtcm_bytes == max((b.offset + b.size for b in placed), default=0), \
        "peak VTCM = max offset + size"
    tiled = {t.node for t in plan.tilings}
    for b in plan.blocks:
        if b.kind == TCM and b.first_step is None:
            assert b.offset is None and (b.role == "tensor" or b.name.split("#")[0] in tiled), \
                f"{b.name}: a TCM block no step needs in VTCM (a tiled op's whole tensor, or the scratch its " \
                f"tiles do without) has no offset"
    for b in placed:
        assert b.offset % b.align == 0 and b.size % prepare.TCM_ALIGN == 0, f"{b.name}: 2 KiB granule"
    # the schedule: dependencies, constraints and resources
    after = {i: set(s.deps) for i, s in enumerate(steps)}
    for a, b_ in plan.constraints:
        assert a < b_, f"constraint ({a}, {b_}) points forward in the runlist"
        after[b_].add(a)
    for i, s in enumerate(steps):
        for d in after[i]:
            assert s.start_cycle >= steps[d].end_cycle, f"step {i} '{s.name}' starts after step {d} ends"
        assert s.end_cycle - s.start_cycle == s.cycles, f"step {i}: runs its cycles"
        assert s.wait_cycles == s.start_cycle - s.ready_cycle >= 0, f"step {i}: wait = start - ready"
        assert 0 <= s.overlap_cycles <= s.cycles, f"step {i}: overlap within its run"
    for resource, cap in (("HVX", plan.hvx_threads), ("HMX", 1), ("DMA", 1)):
        events = sorted([(s.start_cycle, s.threads if resource == "HVX" else 1) for s in steps
                         if s.resource == resource and s.cycles] +
                        [(s.end_cycle, -(s.threads if resource == "HVX" else 1)) for s in steps
                         if s.resource == resource and s.cycles], key=lambda e: (e[0], e[1]))
        busy = 0
        for _, d in events:
            busy += d
            assert busy <= cap, f"{resource}: at most {cap} unit(s) busy"
    assert plan.total_cycles == max((s.end_cycle for s in steps), default=0), "total = last end"
    assert plan.total_cycles >= plan.critical_path_cycles, "no schedule beats the critical path"
    for s in steps:
        if s.kind in ("launch", "spill", "fill"):
            w = steps[s.pair]
            assert w.kind == "wait" and w.pair == s.index and w.deps == [s.index], f"{s.name}: its wait step"
    json.dumps(plan.to_optrace())


# ------------------------------------------------------------------------------ the passes
def test_passes_and_blocks():
    b = long_lived_graph()
    b.graph.finalize()
    plan = b.graph.htp_plan
    assert [p.split(":")[0] for p in plan.passes] == \
        ["register blocks", "pre-schedule", "spill/fill", "launch/wait", "allocate", "re-schedule"], \
        "one line per pass of \"Scheduling and Allocation\", in order"
    kinds = {blk.name: (blk.kind, blk.role) for blk in plan.blocks}
    assert kinds["x"] == (PLAIN, "tensor") and kinds["y"] == (PLAIN, "tensor"), "graph I/O in DDR"
    assert kinds["A_w"] == (PLAIN, "tensor"), "static weights in DDR (streamed)"
    assert kinds["A_out"] == (TCM, "tensor"), "activations in VTCM"
    assert kinds["A#scratch"] == (TCM, "scratch"), "an op streaming DDR tensors has a stream buffer"
    a = plan.block_named("A_out")
    assert (a.size, a.align) == (16 * 16 * 32 * 2, prepare.TCM_ALIGN), \
        "a 16x16x32 fp32 activation is held as fp16 in VTCM: 16 KiB, 2 KiB aligned"
    w = plan.block_named("A_w")
    assert (w.size, w.align) == (1024, prepare.PLAIN_ALIGN), "8x32 fp32 weights, 256 B granule"
    assert plan.spill_bytes == 0 and b.graph.spill_fill_bytes == 0, "the default 4 MiB budget fits"
    check_plan(plan, len(b.graph.nodes))


def test_in_place_outputs_share_blocks():
    """A relu folded into its convolution and a reshape of a tensor nothing else reads write
    over their input: no block of their own, and readers wait for the in-place op."""
    b = Builder("in_place")
    x = b.tensor("x", (1, 8, 8, 8), type_=APP_WRITE)
    c = b.conv("conv", x, 16)
    r = b.tensor("relu_out", c.dims)
    b.node("Relu", "relu", [c], [r])
    flat = b.tensor("flat", (1, 8 * 8 * 16))
    b.node("Reshape", "reshape", [r], [flat])
    y = b.tensor("y", flat.dims, type_=APP_READ)
    b.node("Sigmoid", "act", [flat], [y])
    b.graph.finalize()
    plan = b.graph.htp_plan
    assert plan.aliases == {"relu_out": "conv_out", "flat": "conv_out"}, f"in-place outputs: {plan.aliases}"
    assert plan.block_named("relu_out") is None and plan.block_named("flat") is None, "no blocks of their own"
    relu, reshape, act = plan.step_named("relu"), plan.step_named("reshape"), plan.step_named("act")
    assert relu.outputs == ["conv_out"] and reshape.deps == [relu.index] and act.deps == [reshape.index], \
        "each in-place op rewrites the block; the next reader waits for it"
    assert relu.vtcm_bytes == plan.block_named("conv_out").size, "the relu needs only the one block"
    check_plan(plan, len(b.graph.nodes))
    b2 = Builder("in_place_off")
    b2.graph.configs = {"htp": {"QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF":
                                {"foldReluActivationIntoConvOff": True}}}
    x2 = b2.tensor("x", (1, 8, 8, 8), type_=APP_WRITE)
    c2 = b2.conv("conv", x2, 16)
    r2 = b2.tensor("relu_out", c2.dims, type_=APP_READ)
    b2.node("Relu", "relu", [c2], [r2])
    b2.graph.finalize()
    assert b2.graph.htp_plan.aliases == {}, "relu folding off (or a DDR output): the relu writes its own block"


def test_preschedule_beats_graph_order_on_branches():
    b = branchy_graph()
    b.graph.finalize()
    plan = b.graph.htp_plan
    names = [b.graph.nodes[i].name for i in plan.prescheduled_order]
    assert plan.runlist_peak_bytes < plan.graph_order_peak_bytes, \
        f"runlist peak {plan.runlist_peak_bytes} below graph order's {plan.graph_order_peak_bytes}"
    wide = 16 * 16 * 128 * 2
    assert plan.graph_order_peak_bytes - plan.runlist_peak_bytes >= wide - 16 * 16 * 8 * 2, \
        "the two wide tensors are never live together"
    assert names.index("left_narrow") < names.index("right_wide") or \
        names.index("right_narrow") < names.index("left_wide"), f"one branch finishes first: {names}"
    check_plan(plan, len(b.graph.nodes))
    again = branchy_graph()
    again.graph.finalize()
    assert again.graph.htp_plan.to_optrace() == plan.to_optrace(), "prepare is deterministic"


def test_partitioning_at_low_tcm_boundaries(monkeypatch):
    """With a tiny state limit the pre-scheduler must cut the graph; it cuts where few bytes are
    live and the order stays a valid topological order no worse than graph order."""
    monkeypatch.setattr(prepare, "PRESCHEDULE_STATE_LIMIT", 4)
    b = branchy_graph()
    b.graph.finalize()
    plan = b.graph.htp_plan
    assert len(plan.partitions) > 1, "the graph was partitioned"
    assert [v for p in plan.partitions for v in p] == plan.prescheduled_order, "partitions in runlist order"
    assert plan.runlist_peak_bytes <= plan.graph_order_peak_bytes, "never worse than graph order"
    check_plan(plan, len(b.graph.nodes))


def bounds(b: Builder) -> tuple[int, int]:
    """(largest working set, live peak of graph order) of a built graph."""
    a = prepare._Analysis(b.graph, prepare.device_model(b.graph), prepare.graph_settings(b.graph))
    return max(n.working_set for n in a.nodes), prepare.live_peak(a, list(range(len(a.nodes))))


def skip_graph(vtcm: int | None = None, hw: int = 48) -> Builder:
    """x -> A -> B -> P1 -> P2 -> P3 (1x1 convs, 64 channels); y1 = A + P3, y2 = B + P3: A and
    B stay live through the chain (at 48x48 every activation is 288 KiB of float16)."""
    b = Builder("skip", vtcm=vtcm)
    x = b.tensor("x", (1, hw, hw, 64), type_=APP_WRITE)
    a = b.conv("A", x, 64)
    bb = b.conv("B", a, 64)
    p3 = b.conv("P3", b.conv("P2", b.conv("P1", bb, 64), 64), 64)
    for name, src in (("y1", a), ("y2", bb)):
        y = b.tensor(name, a.dims, type_=APP_READ)
        b.node("ElementWiseAdd", f"add{name[1]}", [src, p3], [y])
    b.x, b.y = x, b.graph.tensor(b.graph.by_name["y2"])
    return b


def test_small_budget_spills_and_fills():
    # every op fits 1 MiB whole (the largest working set is 704 KiB) but the live peak
    # (1152 KiB) does not: B is spilled and filled back, no op tiled
    floor, peak = bounds(skip_graph())
    budget = 1 << 20
    assert floor < budget < peak, "the long-lived tensors make the graph need more than any one op"
    big, small = skip_graph(), skip_graph(vtcm=budget)
    big.graph.finalize()
    small.graph.finalize()
    plan = small.graph.htp_plan
    kinds = [s.kind for s in plan.steps]
    assert "spill" in kinds and "fill" in kinds, f"a budget below the live peak spills: {kinds}"
    assert plan.tiles == 0 and plan.tilings == [], "every op fits whole: nothing is tiled"
    assert plan.spill_bytes > 0 and plan.fill_bytes >= plan.spill_bytes, "each spilled block comes back"
    assert plan.spill_fill_buffer_bytes >= max(b.size for b in plan.blocks if b.role == "spill"), \
        "the spill-fill buffer holds the spilled copies"
    assert small.graph.spill_fill_bytes == plan.spill_fill_buffer_bytes, "graph.spill_fill_bytes from the plan"
    spill = next(s for s in plan.steps if s.kind == "spill")
    fill = next(s for s in plan.steps if s.kind == "fill")
    assert spill.resource == fill.resource == "DMA", "spill and fill copies run on DMA"
    assert fill.pair in plan.step_named("add2").deps, "the consumer waits for the fill"
    assert spill.inputs == ["B_out"] and fill.outputs == ["B_out#fill1"], "a long-lived tensor is spilled"
    check_plan(plan, len(small.graph.nodes))
    # the plan is a model: the numbers do not change
    x = np.random.default_rng(1).standard_normal(big.x.dims).astype(np.float32)
    out_big = big.graph.execute({big.x.id: x}, [big.y.id])[big.y.id]
    out_small = small.graph.execute({small.x.id: x}, [small.y.id])[small.y.id]
    assert np.array_equal(out_big, out_small), "spilling changes no output bit"


def test_vtcm_sweep_spill_bytes_never_grow():
    """From the least budget the graph finalizes at (its ops' smallest tiles) to above its live
    peak: spill bytes, tiles and tile bytes never grow with VTCM."""
    g = long_lived_graph()
    least = prepare._Analysis(g.graph, prepare.device_model(g.graph), prepare.graph_settings(g.graph)).floor()
    _, peak = bounds(g)
    results = []
    for kib in range(-(-least // KIB), peak // KIB + 16, 2):
        b = long_lived_graph(vtcm=kib * KIB)
        b.graph.finalize()
        plan = b.graph.htp_plan
        check_plan(plan, len(b.graph.nodes))
        results.append((kib, plan.spill_bytes, plan.tiles, plan.tile_fill_bytes + plan.tile_spill_bytes))
    for k, what in ((1, "spill bytes"), (2, "tiles"), (3, "tile bytes")):
        series = [r[k] for r in results]
        assert series[0] > 0 and series[-1] == 0, f"{what}: some at the least budget, none above the peak: {results}"
        assert all(x >= y for x, y in zip(series, series[1:])), f"{what} never grow with VTCM: {results}"


def test_vtcm_config_through_the_abi():
    """QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE (MiB) through graphCreate: 1 MiB spills, more does
    not; the plan hangs off the graph; outputs are identical."""
    from qnnemu.client import Backend as ClientBackend, ffi, htp_graph_config
    rng = np.random.default_rng(3)
    weights = {n: (rng.standard_normal((1, 1, 64, 64)) / 8).astype(np.float32) for n in ("A", "B", "P1", "P2", "P3")}
    # 48x48x64 fp32: 288 KiB each in VTCM (fp16); A, B, P1, P2 live together need 1152 KiB
    x = rng.standard_normal((1, 48, 48, 64)).astype(np.float32)
    plans, outs = {}, {}
    with ClientBackend() as be:
        ctx = be.context()
        for mb in (1, 2, 4):
            g = ctx.graph(f"vtcm{mb}", configs=[htp_graph_config("VTCM_SIZE", vtcmSizeInMB=mb)])
            t = g.input("x", x.shape)
            prev = {}
            for name, src in (("A", "x"), ("B", "A"), ("P1", "B"), ("P2", "P1"), ("P3", "P2")):
                w = g.static(f"{name}_w", weights[name])
                prev[name] = g.node("Conv2d", [prev.get(src, t), w], [(name, x.shape, np.float32)])
            # A and B are read again after P3: they stay live through the chain
            g.node("ElementWiseAdd", [prev["A"], prev["P3"]], [("y1", x.shape, np.float32)], app_read=True)
            g.node("ElementWiseAdd", [prev["B"], prev["P3"]], [("y2", x.shape, np.float32)], app_read=True)
            g.finalize()
            core = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))
            plans[mb], outs[mb] = core.htp_plan, g.execute({"x": x})
    assert plans[1].vtcm_budget_bytes == 1 << 20, "VTCM_SIZE 1 MiB is the budget"
    assert plans[1].spill_bytes > 0, f"1 MiB spills: {plans[1].passes[2]}"
    assert plans[1].spill_bytes >= plans[2].spill_bytes >= plans[4].spill_bytes == 0, "monotone in VTCM"
    assert all(np.array_equal(outs[1][k], o[k]) for o in outs.values() for k in ("y1", "y2")), \
        "identical outputs at every budget"


def test_hmx_ops_split_into_launch_and_wait():
    b = Builder("quant")
    x = b.tensor("x", (1, 16, 16, 64), U8, APP_WRITE, quant=(0.05, -128))
    w = b.tensor("w", (3, 3, 64, 64), S8, STATIC, data=b.rng.integers(-100, 100, (3, 3, 64, 64), dtype=np.int8),
                 quant=(0.01, 0))
    c = b.tensor("c", (1, 14, 14, 64), U8, quant=(0.1, -128))
    b.node("Conv2d", "conv", [x, w], [c])
    y = b.tensor("y", (1, 14, 14, 64), U8, APP_READ, quant=(0.1, -128))
    b.node("Sigmoid", "act", [c], [y])
    b.graph.finalize()
    plan = b.graph.htp_plan
    launch, wait = plan.step_named("conv:launch"), plan.step_named("conv:wait")
    assert launch.kind == "launch" and launch.resource == "HMX" and launch.resources == ["HMX", "DMA"], \
        "an 8-bit conv launches on HMX, streaming its weights by DMA"
    assert wait.kind == "wait" and wait.deps == [launch.index], "its wait waits for the launch"
    act = plan.step_named("act")
    assert act.deps == [wait.index] and act.resource == "HVX", "the consumer waits for the wait step"
    check_plan(plan, 2)
    no_hmx = Builder("quant", model=replace(SM8550, hmx=False))
    no_hmx.graph.configs = b.graph.configs
    # the same graph on an SoC without HMX: one HVX op step, no launch/wait
    for t in (x, w, c, y):
        no_hmx.tensor(t.name, t.dims, t.dtype, t.type, t.data, quant=(t.quant.scale, t.quant.offset))
    ids = {n: no_hmx.graph.tensor(no_hmx.graph.by_name[n]) for n in ("x", "w", "c", "y")}
    no_hmx.node("Conv2d", "conv", [ids["x"], ids["w"]], [ids["c"]])
    no_hmx.node("Sigmoid", "act", [ids["c"]], [ids["y"]])
    no_hmx.graph.finalize()
    conv = no_hmx.graph.htp_plan.step_named("conv")
    assert conv.kind == "op" and conv.resource == "HVX", "without HMX the conv is an HVX op"


def test_reschedule_overlaps_independent_branches():
    """Two branches of small (one-thread) HVX ops run side by side on the HVX threads."""
    b = Builder("two_branches")
    x = b.tensor("x", (1, 8, 8, 8), type_=APP_WRITE)
    ends = []
    for side in ("left", "right"):
        h = x
        for k, op in enumerate(("Sigmoid", "Tanh", "Sigmoid")):
            out = b.tensor(f"{side}{k}", x.dims)
            b.node(op, f"{side}_{op}{k}", [h], [out])
            h = out
        ends.append(h)
    y = b.tensor("y", x.dims, type_=APP_READ)
    b.node("ElementWiseAdd", "join", ends, [y])
    b.graph.finalize()
    plan = b.graph.htp_plan
    check_plan(plan, len(b.graph.nodes))
    ops = [s for s in plan.steps if s.cycles]
    assert any(s.overlap_cycles > 0 and s.overlap_steps for s in ops), "parallel branches overlap in time"
    for s in ops:
        for j in s.overlap_steps:
            o = plan.steps[j]
            assert o.start_cycle < s.end_cycle and s.start_cycle < o.end_cycle, f"{s.name} overlaps {o.name}"
    serial = sum(s.cycles for s in plan.steps)
    assert plan.total_cycles < serial, f"parallel schedule {plan.total_cycles} beats serial {serial}"


def long_row_graph(n: int, vtcm: int) -> Builder:
    """x [1, n] (graph input) -> Softmax over the row -> a -> Tanh -> y: the row is the depth
    (the last axis), which tiles never split."""
    b = Builder("long_row", vtcm=vtcm)
    x = b.tensor("x", (1, n), type_=APP_WRITE)
    a = b.tensor("a", (1, n))
    b.node("Softmax", "softmax", [x], [a])
    y = b.tensor("y", (1, n), type_=APP_READ)
    b.node("Tanh", "tanh", [a], [y])
    return b


def test_working_set_too_big_fails_finalize():
    """An op whose smallest tile does not fit fails finalize.  A [1, n] Softmax has only the
    depth to split, and the depth is never split: its float16 row in (the streamed graph input)
    and out must fit together -- at 1 MiB, n = 262144 does (512 + 512 KiB) and n = 266240 does
    not, the vendor's thresholds (tests/test_htp_tiling.py probes them)."""
    fits = long_row_graph(262144, 1 << 20)
    fits.graph.finalize()
    assert fits.graph.htp_plan.tilings == [], "a row that fits runs whole"
    b = long_row_graph(266240, 1 << 20)
    with pytest.raises(QnnError) as info:
        b.graph.finalize()
    e = info.value
    assert e.code == Q.QNN_GRAPH_ERROR_MEM_ALLOC, f"MEM_ALLOC (the HTP's code for an op over VTCM), got {e.code}"
    assert e.rule == "QNNEMU-prepare-working-set", "rule id"
    msg = str(e)
    assert "graphFinalize" in msg and "node 'softmax' (Softmax)" in msg, f"function and node named: {msg}"
    row = 266240 * 2
    assert f"working set of {2 * row} bytes" in msg and f"inputs 0 + outputs {row} + scratch {row}" in msg \
        and "budget of 1048576 bytes" in msg, f"the numbers (the streamed input row is the scratch): {msg}"
    assert "cannot be tiled" in msg and "depth" in msg, f"why no tile helps: {msg}"
    assert not b.graph.finalized, "the graph stays unfinalized"
    # A tileable op fails when even its smallest tile (one index of every tileable axis, the
    # whole depth, single-buffered) does not fit; the message gives that tile's numbers.
    w = Builder("wide_rows", vtcm=64 * KIB)
    x = w.tensor("x", (1, 4, 8192), type_=APP_WRITE)
    s1 = w.tensor("s1", x.dims)
    w.node("Sigmoid", "sig", [x], [s1])
    y = w.tensor("y", x.dims, type_=APP_READ)
    w.node("Tanh", "tanh", [s1], [y])
    with pytest.raises(QnnError) as info:
        w.graph.finalize()
    msg = str(info.value)
    assert info.value.rule == "QNNEMU-prepare-working-set" and "node 'sig' (Sigmoid)" in msg, msg
    # one row: 16 KiB of float16 output + the stream buffer of its share of the graph input
    assert "smallest tile (elementwise rule: a [1, 1, 8192] box of its [1, 4, 8192] iteration space, 4 tiles): " \
           "81920 bytes (tile inputs 0 + tile outputs 16384 + scratch 65536)" in msg, f"the smallest tile: {msg}"


def test_fragmentation_fallback(monkeypatch):
    """When no spill plan's offsets fit the budget (forced here by an allocator that wastes
    space for every plan but the flush plan), the flush plan -- every op's blocks through DDR --
    is taken, and it fits."""
    real = prepare.allocate

    def wasteful(st, budget, compact=False):
        peak, constraints, buffer = real(st, budget, compact)
        return (peak if st.flush else peak + (10 << 20)), constraints, buffer
    monkeypatch.setattr(prepare, "allocate", wasteful)
    b = long_lived_graph(vtcm=200 * KIB)
    b.graph.finalize()
    plan = b.graph.htp_plan
    check_plan(plan, len(b.graph.nodes))
    assert "fragmentation fallback" in plan.passes[2], plan.passes[2]
    assert plan.peak_vtcm_bytes <= max(n.working_set for n in prepare._Analysis(
        b.graph, prepare.device_model(b.graph), prepare.graph_settings(b.graph)).nodes), "one op's blocks at a time"


def test_budget_ladder_nests():
    floor, peak = 70 * KIB, 300 * KIB
    for small in range(2 * KIB, 600 * KIB, 22 * KIB):
        for big in (small + 2 * KIB, small + 64 * KIB, small + 300 * KIB):
            assert set(prepare.budget_ladder(small, floor, peak)) <= set(prepare.budget_ladder(big, floor, peak)), \
                f"the ladder of {small} is inside the ladder of {big}"
    ladder = prepare.budget_ladder(400 * KIB, floor, peak)
    assert ladder[:4] == [384 * KIB, 320 * KIB, peak, 256 * KIB], "64 KiB multiples and the runlist peak"
    assert ladder[-2:] == [floor + 2 * KIB, floor], "2 KiB steps above the largest working set"
    assert prepare.budget_ladder(floor - 2 * KIB, floor, peak) == [], "nothing below the largest working set"


# ------------------------------------------------------------------------- random graphs
@st.composite
def random_dags(draw):
    """Ops reading one or two earlier tensors (Add; Relu, Reshape or Softmax with scratch;
    activations NATIVE, [rows, 512 x k] uint8 of 2-48 KiB: rows tile, the depth does not),
    graph input and output in DDR."""
    g = FakeGraph("random")
    rows = draw(st.integers(1, 4))
    x = g.add_tensor("x", (rows, draw(st.integers(1, 8)) * 512), U8, APP_WRITE)
    live = [x]
    n = draw(st.integers(2, 14))
    for k in range(n):
        picks = draw(st.lists(st.integers(0, len(live) - 1), min_size=1, max_size=2, unique=True))
        ins = [live[i] for i in picks]
        op = "ElementWiseAdd" if len(ins) == 2 else draw(st.sampled_from(["Relu", "Reshape", "Softmax"]))
        # a Reshape keeps the shape (written in place when nothing else reads its input)
        dims = ins[0].dims if op == "Reshape" else (draw(st.integers(1, 4)) * rows, draw(st.integers(1, 12)) * 1024)
        if op == "ElementWiseAdd":
            dims = (max(t.dims[0] for t in ins), dims[1])
            ins = [t if t.dims[0] in (1, dims[0]) and t.dims[1] in (1, dims[1]) else
                   _bridge(g, t, dims, k) for t in ins]
        out = g.add_tensor(f"t{k}", dims, U8, APP_READ if k == n - 1 else NATIVE)
        g.add_node(op, f"op{k}", ins, [out])
        live.append(out)
    return g


def _bridge(g: FakeGraph, t, dims, k):
    """A Relu giving ``t``'s data the Add's shape (so the Add broadcasts nothing)."""
    out = g.add_tensor(f"t{k}_{t.name}", dims, U8)
    g.add_node("Relu", f"op{k}_{t.name}", [t], [out])
    return out


def _prepared(g: FakeGraph, budget: int):
    g.set_vtcm(budget)
    return prepare.prepare_graph(g)


def check_monotone_in_vtcm(seen) -> None:
    """What the ladder search guarantees as VTCM grows (``seen``: (budget, spill bytes, fill
    bytes, planning budget, tiles, tile bytes), budgets ascending).  The kept plan is the best by
    (spill bytes, fill bytes, largest planning budget) of a candidate set that only grows with
    VTCM, so: spill bytes never grow; at equal spill bytes fill bytes never grow; at equal spill
    and fill bytes the planning budget never shrinks, so tiles and tile bytes never grow.  Tiles
    alone may grow when the larger VTCM admits a plan that moves fewer bytes by tiling more
    (test_more_vtcm_may_tile_more_to_move_less)."""
    for a, b in itertools.pairwise(seen):
        assert a[1] >= b[1], f"spill bytes never grow with VTCM: {a[0]} -> {b[0]} B in {seen}"
        if a[1] == b[1]:
            assert a[2] >= b[2], f"fill bytes never grow with VTCM at equal spill: {a[0]} -> {b[0]} B in {seen}"
        if a[1:3] == b[1:3]:
            assert a[3] <= b[3], f"planning budget never shrinks at equal spill and fill: {a[0]} -> {b[0]} B in {seen}"
            assert a[4] >= b[4] and a[5] >= b[5], \
                f"tiles and tile bytes never grow at equal spill and fill: {a[0]} -> {b[0]} B in {seen}"


@settings(max_examples=60, deadline=None)
@given(random_dags(), st.data())
def test_random_dags(g, data):
    """From the least budget the graph finalizes at to above its live peak: valid plans,
    deterministic, monotone in VTCM as check_monotone_in_vtcm states."""
    base = prepare._Analysis(g, prepare.device_model(g), prepare.graph_settings(g))
    least = base.floor()
    top = max(prepare.live_peak(base, list(range(len(g.nodes)))), max(n.working_set for n in base.nodes)) + 4096
    budgets = sorted(set(data.draw(st.lists(st.integers(-(-least // 2048), top // 2048), min_size=2, max_size=5))))
    seen = []
    for units in budgets:
        plan = _prepared(g, units * 2048)
        check_plan(plan, len(g.nodes))
        assert plan.runlist_peak_bytes <= plan.graph_order_peak_bytes, "pre-schedule never worse than graph order"
        assert _prepared(g, units * 2048).to_optrace() == plan.to_optrace(), "deterministic"
        for t in plan.tilings:
            assert t.working_set_bytes <= plan.planning_budget_bytes < t.untiled_working_set_bytes, \
                f"{t.node}: tiled because it does not fit whole, its tiles fit"
        seen.append((units * 2048, plan.spill_bytes, plan.fill_bytes, plan.planning_budget_bytes, plan.tiles,
                     plan.tile_fill_bytes + plan.tile_spill_bytes))
    check_monotone_in_vtcm(seen)


@settings(max_examples=40, deadline=None)
@given(random_dags(), st.data())
def test_ladder_reuse_equals_every_pass(g, data):
    """The ladder search reuses a pass for lower rungs with the same choices at or above its
    ``reuse_floor`` (a finalize-time saving): every rung's result, ladder and flush plans, must
    equal the pass run at that rung."""
    a = prepare._Analysis(g, prepare.device_model(g), prepare.graph_settings(g))
    order = list(range(len(g.nodes)))
    least = a.floor()
    top = max(prepare.live_peak(a, order), max(n.working_set for n in a.nodes)) + 4096
    budget = data.draw(st.integers(-(-least // 2048), top // 2048)) * 2048
    ladder = prepare.budget_ladder(budget, least, prepare.live_peak(a, order))
    for flush in (False, True):
        reused = prepare._spill_passes(a, order, ladder, flush=flush)
        for b, r in zip(ladder, reused, strict=True):
            fresh = prepare.spill_pass(a, order, b, flush)
            assert (r.budget, r.entries, r.key(), r.tilings, r.reused_copies, r.need_peak) == \
                (fresh.budget, fresh.entries, fresh.key(), fresh.tilings, fresh.reused_copies, fresh.need_peak), \
                f"rung {b} B (flush {flush}) of ladder {ladder}: the reused pass differs from the pass run there"


@settings(max_examples=40, deadline=None)
@given(random_dags(), st.data())
def test_pruned_search_keeps_the_exhaustive_plan(g, data):
    """_memory_plan makes a rung only while its tilings' spill bytes could still rank it first:
    the plan it keeps must be the one a search over every rung (ladder and flush plans, best
    key first, the first that allocates within the budget) keeps."""
    model, settings_ = prepare.device_model(g), prepare.graph_settings(g)
    a = prepare._Analysis(g, model, settings_)
    least = a.floor()
    order = list(range(len(g.nodes)))
    top = max(prepare.live_peak(a, order), max(n.working_set for n in a.nodes)) + 4096
    budget = data.draw(st.integers(-(-least // 2048), top // 2048)) * 2048
    plan = prepare.PreparedPlan(graph=g.name, soc_model=model.soc_model, arch=model.arch, vtcm_budget_bytes=budget,
                                hvx_threads=settings_.hvx_threads, hmx=True, reference_clocks={})
    prepare.register_blocks(a, plan)
    order = prepare.preschedule(a, plan)
    kept = prepare._memory_plan(a, plan, order, budget)[0]
    ladder = prepare.budget_ladder(budget, least, plan.runlist_peak_bytes) or [budget]
    every = [prepare.spill_pass(a, order, b, flush) for flush in (False, True) for b in ladder]
    for r in sorted(every, key=prepare._SpillResult.key):
        steps = prepare.build_steps(a, plan, r)
        if any(prepare.allocate(steps, r.budget, compact)[0] <= budget for compact in (False, True)):
            break
    assert (kept.key(), kept.entries) == (r.key(), r.entries), \
        f"budget {budget} B: the pruned search kept {kept.key()}, the exhaustive one {r.key()}"


# A random DAG hypothesis found (uint8 activations, x a graph input, t11 the graph output):
# (op, node, inputs, (output, shape)) in graph order.
MORE_TILES_DAG = (
    ("Reshape", "op0", ("x",), ("t0", (3, 3584))), ("Relu", "op1", ("t0",), ("t1", (9, 4096))),
    ("Relu", "op2", ("t1",), ("t2", (12, 7168))), ("Reshape", "op3", ("t2",), ("t3", (12, 7168))),
    ("Relu", "op4_t1", ("t1",), ("t4_t1", (12, 9216))), ("Relu", "op4_t2", ("t2",), ("t4_t2", (12, 9216))),
    ("ElementWiseAdd", "op4", ("t4_t1", "t4_t2"), ("t4", (12, 9216))), ("Relu", "op5", ("t3",), ("t5", (12, 1024))),
    ("Relu", "op6", ("t5",), ("t6", (3, 1024))), ("Reshape", "op7", ("x",), ("t7", (3, 3584))),
    ("Reshape", "op8", ("t6",), ("t8", (3, 1024))), ("Relu", "op9_t1", ("t1",), ("t9_t1", (12, 4096))),
    ("Relu", "op9_t5", ("t5",), ("t9_t5", (12, 4096))),
    ("ElementWiseAdd", "op9", ("t9_t1", "t9_t5"), ("t9", (12, 4096))), ("Relu", "op10", ("x",), ("t10", (3, 1024))),
    ("Relu", "op11", ("x",), ("t11", (12, 9216))))


def _dag(spec, x=(3, 3584)) -> FakeGraph:
    """A random_dags graph from its table: uint8, ``x`` the graph input, the last output the
    graph output, the others NATIVE."""
    g = FakeGraph("dag")
    tensors = {"x": g.add_tensor("x", x, U8, APP_WRITE)}
    for k, (op, name, ins, (out, dims)) in enumerate(spec):
        tensors[out] = g.add_tensor(out, dims, U8, APP_READ if k == len(spec) - 1 else NATIVE)
        g.add_node(op, name, [tensors[t] for t in ins], [tensors[out]])
    return g


def test_more_vtcm_may_tile_more_to_move_less():
    """Pinned hypothesis counterexample to "tiles never grow with VTCM" (at equal spill bytes):
    why it is not a property of a planner that minimizes DMA bytes.

    Both budgets plan below 256 KiB on the same ladder (64 KiB multiples above 64 KiB, 2 KiB
    steps from the floor).  The 196608 B rung runs op4_t2 whole: t2 (86016 B) in and t4_t2
    (110592 B) out take all of it, so t1 (36864 B) is evicted and filled back a second time.
    The 194560 B rung tiles op4_t2 (3 double-buffered tiles, 131072 B): t2 streams from its DDR
    copy and t4_t2 to DDR (op4, itself tiled, reads it there anyway -- the same spill bytes), and
    t1 stays resident: 36864 fill bytes fewer.  That plan never holds more than its 194560 B of
    live blocks, but its blocks' lifetimes only pack into 221184 B of addresses: it cannot be
    placed in 215040 B and can in 245760 B.  So more VTCM admits the plan that moves fewer
    bytes (and is modelled faster), with 3 more tiles; keeping the 4-tile plan instead would
    make the larger VTCM move more bytes."""
    g = _dag(MORE_TILES_DAG)
    small, big = _prepared(g, 215040), _prepared(g, 245760)
    for plan in (small, big):
        check_plan(plan, len(g.nodes))

    def tiled(plan):
        return {t.node: t.tiles for t in plan.tilings}

    def t1_fills(plan):
        return [s.outputs for s in plan.steps if s.kind == "fill" and s.inputs == ["t1#spill"]]

    assert tiled(small) == {"op4": 4} and tiled(big) == {"op4_t2": 3, "op4": 4}, \
        f"op4_t2 runs whole at 215040 B and tiled at 245760 B: {tiled(small)}, {tiled(big)}"
    assert small.spill_bytes == big.spill_bytes == 454656, \
        f"the same spill bytes at both budgets: {small.spill_bytes}, {big.spill_bytes}"
    assert big.fill_bytes == small.fill_bytes - 36864, \
        f"tiling op4_t2 saves t1's second fill (36864 B): {small.fill_bytes} -> {big.fill_bytes}"
    assert len(t1_fills(small)) == 2 and len(t1_fills(big)) == 1, \
        f"t1 filled twice with op4_t2 whole, once with it tiled: {t1_fills(small)}, {t1_fills(big)}"
    op4_t2 = next(t for t in big.tilings if t.node == "op4_t2")
    assert big.planning_budget_bytes == 194560 < op4_t2.untiled_working_set_bytes == 196608 == \
        small.planning_budget_bytes, "op4_t2 (196608 B whole) fits the 196608 B rung, not the 194560 B one"
    live = max(s.vtcm_bytes for s in big.steps)
    assert live <= big.planning_budget_bytes < 215040 < big.peak_vtcm_bytes <= 245760, \
        f"the 194560 B plan holds {live} B live but needs {big.peak_vtcm_bytes} B of addresses: " \
        "placed in 245760 B, not in 215040 B"
    assert big.total_cycles < small.total_cycles, \
        f"the plan moving fewer bytes is modelled faster: {small.total_cycles} -> {big.total_cycles} cycles"
    check_monotone_in_vtcm([(v, p.spill_bytes, p.fill_bytes, p.planning_budget_bytes, p.tiles,
                             p.tile_fill_bytes + p.tile_spill_bytes) for v, p in ((215040, small), (245760, big))])


# A random DAG hypothesis found: x [2, 2560] the graph input, t9 the graph output.
SAME_ENTRIES_DAG = (
    ("Relu", "op0", ("x",), ("t0", (2, 9216))), ("Relu", "op1_x", ("x",), ("t1_x", (2, 10240))),
    ("Relu", "op1_t0", ("t0",), ("t1_t0", (2, 10240))),
    ("ElementWiseAdd", "op1", ("t1_x", "t1_t0"), ("t1", (2, 10240))),
    ("Relu", "op2_x", ("x",), ("t2_x", (2, 4096))), ("Relu", "op2_t0", ("t0",), ("t2_t0", (2, 4096))),
    ("ElementWiseAdd", "op2", ("t2_x", "t2_t0"), ("t2", (2, 4096))), ("Reshape", "op3", ("x",), ("t3", (2, 2560))),
    ("Reshape", "op4", ("x",), ("t4", (2, 2560))), ("Reshape", "op5", ("x",), ("t5", (2, 2560))),
    ("Relu", "op6_x", ("x",), ("t6_x", (2, 1024))), ("Relu", "op6_t0", ("t0",), ("t6_t0", (2, 1024))),
    ("ElementWiseAdd", "op6", ("t6_x", "t6_t0"), ("t6", (2, 1024))), ("Relu", "op7_t2", ("t2",), ("t7_t2", (2, 5120))),
    ("Relu", "op7_x", ("x",), ("t7_x", (2, 5120))), ("ElementWiseAdd", "op7", ("t7_t2", "t7_x"), ("t7", (2, 5120))),
    ("Reshape", "op8", ("x",), ("t8", (2, 2560))), ("Relu", "op9_t1", ("t1",), ("t9_t1", (2, 11264))),
    ("Relu", "op9_t3", ("t3",), ("t9_t3", (2, 11264))),
    ("ElementWiseAdd", "op9", ("t9_t1", "t9_t3"), ("t9", (2, 11264))))


def test_rungs_with_the_same_plan_are_each_placed_within_their_own_budget():
    """Pinned hypothesis counterexample to "spill bytes never grow with VTCM": the 71680 B and
    69632 B rungs plan the same spills and tiles, but placed within 71680 B the blocks fragment
    to 77824 B (packed lowest-first 75776 B) while within 69632 B they fit exactly.  The search
    once skipped a rung whose entries an earlier rung had tried, so 71680 B fell back to a
    59392 B plan with 43008 more spill bytes than 69632 B's."""
    g = _dag(SAME_ENTRIES_DAG, x=(2, 2560))
    small, big = _prepared(g, 69632), _prepared(g, 71680)
    for plan in (small, big):
        check_plan(plan, len(g.nodes))
    assert small.planning_budget_bytes == big.planning_budget_bytes == 69632 == small.peak_vtcm_bytes, \
        f"both keep the 69632 B rung, placed within it: {small.planning_budget_bytes}, " \
        f"{big.planning_budget_bytes} B, peak {small.peak_vtcm_bytes} B"
    assert (big.spill_bytes, big.fill_bytes, big.tiles) == (small.spill_bytes, small.fill_bytes, small.tiles) == \
        (63488, 63488, 2), f"the same plan at both budgets: {small.passes[2]} / {big.passes[2]}"


# ------------------------------------------------------------------------------- scale
def resnet18_graph() -> Builder:
    """ResNet-18 topology at 1x224x224x3, uint8 activations and int8 weights (HMX convs)."""
    b = Builder("resnet18")
    rng = b.rng
    q = (0.05, -128)

    def conv(name, x, cout, k, stride=1):
        cin = x.dims[-1]
        w = b.tensor(f"{name}_w", (k, k, cin, cout), S8, STATIC,
                     rng.integers(-50, 50, (k, k, cin, cout), dtype=np.int8),
                     quant=(0.01, 0))
        h = (x.dims[1] + 2 * (k // 2) - k) // stride + 1
        y = b.tensor(f"{name}_out", (1, h, h, cout), U8, quant=q)
        pad = ParamDesc("pad_amount", "tensor", Q.QNN_DATATYPE_UINT_32, tensor=_param_tensor(
            f"{name}.pad", np.array([[k // 2, k // 2]] * 2, np.uint32)))
        strides = ParamDesc("stride", "tensor", Q.QNN_DATATYPE_UINT_32, tensor=_param_tensor(
            f"{name}.stride", np.array([stride, stride], np.uint32)))
        ref = lambda t: TensorDesc(2, t.id, t.name, t.type, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,  # noqa: E731
                                   t.dtype, _quant(None), t.dims, Q.QNN_TENSORMEMTYPE_RAW)
        b.graph.add_node(OpConfigDesc(1, name, "qti.aisw", "Conv2d", [pad, strides], [ref(x), ref(w)], [ref(y)]))
        return y

    def relu(name, x):
        y = b.tensor(f"{name}_out", x.dims, U8, quant=q)
        b.node("Relu", name, [x], [y])
        return y

    x = b.tensor("x", (1, 224, 224, 3), U8, APP_WRITE, quant=q)
    h = relu("relu1", conv("conv1", x, 64, 7, 2))
    h = relu("pool1", conv("pool1c", h, 64, 3, 2))     # stands in for the max pool
    for stage, (cout, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2))):
        for block in range(2):
            s = stride if block == 0 else 1
            name = f"s{stage}b{block}"
            m = relu(f"{name}_r1", conv(f"{name}_c1", h, cout, 3, s))
            m = conv(f"{name}_c2", m, cout, 3)
            short = conv(f"{name}_sc", h, cout, 1, s) if (s != 1 or h.dims[-1] != cout) else h
            out = b.tensor(f"{name}_add", m.dims, U8, quant=q)
            b.node("ElementWiseAdd", f"{name}_add", [m, short], [out])
            h = relu(f"{name}_r2", out)
    y = b.tensor("y", h.dims, U8, APP_READ, quant=q)
    b.node("Relu", "head", [h], [y])
    return b


def _param_tensor(name, arr):
    raw = arr.tobytes()
    return TensorDesc(2, 0, name, STATIC, Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, Q.QNN_DATATYPE_UINT_32,
                      _quant(None), arr.shape, Q.QNN_TENSORMEMTYPE_RAW, raw, len(raw), True)


def test_resnet18_sized_graph():
    b = resnet18_graph()
    b.graph.finalize()
    plan = b.graph.htp_plan
    check_plan(plan, len(b.graph.nodes))
    launches = [s for s in plan.steps if s.kind == "launch"]
    assert len(launches) == sum(1 for n in b.graph.nodes if n.op_type == "Conv2d"), "every int8 conv on HMX"
    assert plan.critical_path_cycles > 0 and plan.total_cycles >= plan.critical_path_cycles, "scheduled"
    set_vtcm(b.graph, 2 << 20)
    small = prepare.prepare_graph(b.graph)
    check_plan(small, len(b.graph.nodes))
    assert small.spill_bytes >= plan.spill_bytes, "2 MiB spills at least as much as 4 MiB"


def _at_level(level: int, model=SM8550, vtcm: int | None = None) -> Builder:
    b = branchy_graph() if model is SM8550 and vtcm is None else None
    if b is None:
        b = Builder("branchy", model=model, vtcm=vtcm)
        x = b.tensor("x", (1, 16, 16, 8), type_=APP_WRITE)
        t = b.conv("stem", x, 8)
        left, right = b.conv("left_narrow", b.conv("left_wide", t, 128), 8), \
            b.conv("right_narrow", b.conv("right_wide", t, 128), 8)
        b.node("ElementWiseAdd", "join", [left, right], [b.tensor("y", left.dims, type_=APP_READ)])
    b.graph.configs["htp_optimization"] = {"FINALIZE_OPTIMIZATION_FLAG": float(level)}
    b.graph.finalize()
    return b


def test_optimization_level_changes_the_plan():
    """FINALIZE_OPTIMIZATION_FLAG (QNN HTP backend documentation, graph optimization options):
    level 1 is the fast prepare (graph order, no budget search, runlist priority), 2 the default
    searches, 3 with the SoC configured a deeper search that keeps the shorter schedule."""
    plans = {level: _at_level(level).graph.htp_plan for level in (1, 2, 3)}
    o1, o2, o3 = plans[1], plans[2], plans[3]
    assert [p.optimization_level for p in (o1, o2, o3)] == [1, 2, 3], "the plan records its level"
    assert o1.prescheduled_order == list(range(6)), f"O1 keeps graph order: {o1.prescheduled_order}"
    assert "skipped at optimization level 1" in o1.passes[1], f"O1's pre-schedule line: {o1.passes[1]}"
    assert o2.runlist_peak_bytes < o1.runlist_peak_bytes, \
        f"O2's runlist peak {o2.runlist_peak_bytes} B below O1's graph order {o1.runlist_peak_bytes} B"
    assert o1.schedule_policy == "runlist" and o2.schedule_policy == "critical-path", \
        f"priority rules: O1 {o1.schedule_policy}, O2 {o2.schedule_policy}"
    assert o3.total_cycles <= o2.total_cycles, f"O3 {o3.total_cycles} cycles never above O2's {o2.total_cycles}"
    assert "both rules tried" in o3.passes[-1], f"O3 with the SoC configured: {o3.passes[-1]}"
    for plan in plans.values():
        check_plan(plan, 6)


def test_optimization_level_3_without_a_soc_is_level_2():
    """O3 "takes into account QNN_HTP_DEVICE_CONFIG_OPTION_SOC when possible": without a SoC
    device config it plans as O2."""
    from dataclasses import replace as dc_replace
    unset = dc_replace(SM8550, soc_configured=False)
    o2, o3 = (_at_level(level, model=unset).graph.htp_plan for level in (2, 3))
    same = lambda d: {k: v for k, v in d.items() if k != "passes"}  # noqa: E731
    assert same(o3.to_optrace()) == same(o2.to_optrace()), "O3 without the SoC configured gives O2's plan"
    assert "both rules tried" not in o3.passes[-1], f"no extra search: {o3.passes[-1]}"


def test_reschedule_runlist_policy_is_no_better_on_a_critical_path_graph():
    """The runlist priority of O1 is never shorter here than the critical-path rule: the long
    branch comes second in graph order."""
    b = Builder("skewed")
    x = b.tensor("x", (1, 32, 32, 32), type_=APP_WRITE)
    short = b.conv("short", x, 32)
    long_ = x
    for i in range(6):
        long_ = b.conv(f"long{i}", long_, 32)
    b.node("ElementWiseAdd", "join", [short, long_], [b.tensor("y", short.dims, type_=APP_READ)])
    b.graph.configs["htp_optimization"] = {"FINALIZE_OPTIMIZATION_FLAG": 1.0}
    b.graph.finalize()
    plan = b.graph.htp_plan
    runlist_total = plan.total_cycles
    cp_total, _ = prepare.reschedule(plan.steps, plan.constraints, plan.hvx_threads, plan.hmx, "critical-path")
    assert cp_total <= runlist_total, f"critical path {cp_total} <= runlist {runlist_total} cycles"
    with pytest.raises(ValueError, match="policy"):
        prepare.reschedule(plan.steps, plan.constraints, plan.hvx_threads, plan.hmx, "random")


SM8750 = model_for(SOCS[Q.QNN_SOC_MODEL_SM8750], soc_configured=True)   # v79: DLBC and SLC
SA8797 = model_for(SOCS[Q.QNN_SOC_MODEL_SA8797], soc_configured=True)   # v81, 2 HTP cores


def _skip_graph_on(model, configs: dict, vtcm: int | None = None) -> Builder:
    b = Builder("skip", model=model, vtcm=vtcm)
    b.graph.configs.update(configs)
    x = b.tensor("x", (1, 48, 48, 64), type_=APP_WRITE)
    a = b.conv("A", x, 64)
    bb = b.conv("B", a, 64)
    p3 = b.conv("P3", b.conv("P2", b.conv("P1", bb, 64), 64), 64)
    for name, src in (("y1", a), ("y2", bb)):
        b.node("ElementWiseAdd", f"add{name[1]}", [src, p3], [b.tensor(name, a.dims, type_=APP_READ)])
    b.graph.finalize()
    return b


def test_dlbc_lowers_the_modelled_dma_of_inputs_and_weights():
    """ENABLE_DLBC compresses graph inputs, ENABLE_DLBC_WEIGHTS static weights on the bus
    (QNN HTP backend documentation, "Deep Learning Bandwidth Compression (DLBC)"): the first
    conv's DMA bytes shrink by the model's ratios; a SoC without DLBC is unchanged."""
    from qnnemu.htp import cost, settings as htp_settings

    def first_conv_dma(model, opts):
        b = _skip_graph_on(model, {"htp_optimization": opts} if opts else {})
        node = b.graph.nodes[0]
        c = cost.op_cost(node, b.graph, model, htp_settings.graph_settings(b.graph))
        return c.dma_bytes, b.graph.htp_plan.total_cycles
    x_bytes, w_bytes = 48 * 48 * 64 * 4, 64 * 64 * 4
    plain, _ = first_conv_dma(SM8750, {})
    assert plain == x_bytes + w_bytes, f"no compression: input + weights = {plain} B"
    dlbc, _ = first_conv_dma(SM8750, {"ENABLE_DLBC": 1.0})
    assert dlbc == int(np.ceil(x_bytes * cost.DLBC_INPUT_RATIO)) + w_bytes, f"inputs compressed: {dlbc} B"
    both, _ = first_conv_dma(SM8750, {"ENABLE_DLBC": 1.0, "ENABLE_DLBC_WEIGHTS": 1.0})
    assert both == int(np.ceil(x_bytes * cost.DLBC_INPUT_RATIO)) + int(np.ceil(w_bytes * cost.DLBC_WEIGHT_RATIO)), \
        f"inputs and weights compressed: {both} B"
    v73, _ = first_conv_dma(SM8550, {"ENABLE_DLBC": 1.0})
    assert v73 == plain, "SM8550 has no DLBC: the option is recorded without effect"


def test_slc_allocator_speeds_up_spill_and_fill_copies():
    """ENABLE_SLC_ALLOCATOR ("Enabling the system level cache allocator"): spill/fill copies are
    served by the SLC, modelled at SLC_BANDWIDTH_FACTOR times the DDR bandwidth."""
    from qnnemu.htp import cost
    off = _skip_graph_on(SM8750, {}, vtcm=1 << 20).graph.htp_plan
    on = _skip_graph_on(SM8750, {"htp_optimization": {"ENABLE_SLC_ALLOCATOR": 1.0}}, vtcm=1 << 20).graph.htp_plan
    spills_off = [s for s in off.steps if s.kind in ("spill", "fill")]
    spills_on = [s for s in on.steps if s.kind in ("spill", "fill")]
    assert spills_off and [s.bytes for s in spills_on] == [s.bytes for s in spills_off], \
        "the same copies are planned with and without the SLC allocator"
    for a_, b_ in zip(spills_off, spills_on):
        assert b_.cycles == cost.spill_fill_cycles(a_.bytes, SimpleNamespace(slc_allocator=True)) < a_.cycles, \
            f"{a_.name}: {b_.cycles} cycles through the SLC, {a_.cycles} through DDR"
    assert on.total_cycles <= off.total_cycles, f"the schedule is no longer: {on.total_cycles} <= {off.total_cycles}"


def test_num_cores_spreads_the_schedule():
    """NUM_CORES on a two-core SoC (SA8797): each core brings its HVX threads, HMX and DMA queue,
    so independent branches run side by side; on one core they share the HMX."""
    def plan(cores):
        b = Builder("two_branches", model=SA8797)
        if cores:
            b.graph.configs["htp"] = {"QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES": {"numCores": cores}}
        x = b.tensor("x", (1, 32, 32, 64), type_=APP_WRITE)
        # (two ops whose outputs live together: the allocator gives them distinct addresses)
        left, right = b.conv("l0", x, 64), b.conv("r0", x, 64)
        b.node("ElementWiseAdd", "join", [left, right], [b.tensor("y", left.dims, type_=APP_READ)])
        b.graph.finalize()
        return b.graph.htp_plan
    one, two = plan(0), plan(2)
    assert one.cores == 1 and two.cores == 2, f"cores planned: {one.cores}, {two.cores}"
    assert two.total_cycles < one.total_cycles, f"2 cores: {two.total_cycles} < 1 core: {one.total_cycles} cycles"
    assert "on each of 2 cores" in two.passes[-1], f"the re-schedule line names the cores: {two.passes[-1]}"
