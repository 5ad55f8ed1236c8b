"""FINALIZE_OPTIMIZATION_FLAG (QNN HTP backend documentation, "QNN HTP Graph Config Options" and
the online-prepare note: "a fast prepare (e.g., by setting ... FINALIZE_OPTIMIZATION_FLAG to 1) to
execute with a sub-optimal context, and then ... a slow prepare (... 3)") reaches the prepared
plan (qnnemu/htp/prepare.py) and its modelled cost:

- O1: pre-schedule keeps graph order and the re-schedule starts the steps in order: a higher
  peak of live TCM and more cycles than O2 on a graph of independent branches;
- O2 (the default): as before;
- O3 (with the SoC configured, as here): the exact ordering searches ``O3_SEARCH_FACTOR`` times
  more prefixes per partition and both re-schedule rules are tried; never worse than O2.

Before, the level was recorded but the plan never read it (issue 16 item 1).
"""
from __future__ import annotations

import numpy as np
import pytest
from vendor import our_library

from qnnemu.headers import Q

SM8650 = int(Q.QNN_SOC_MODEL_SM8650)
SHAPE = (1, 64, 64, 32)


def plan_at(level: int | None, branches: int = 6):
    """The prepared plan of ``branches`` Conv2d + Relu branches of one input, summed, at
    FINALIZE_OPTIMIZATION_FLAG ``level`` (None: not configured)."""
    from qnnemu.client import Backend, ffi, htp_device_config, htp_graph_config
    from qnnemu.core.handles import HANDLES
    with Backend(str(our_library()), log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8650)]) as be:
        ctx = be.context()
        configs = [] if level is None else [htp_graph_config("OPTIMIZATION", optimizationOption={
            "type": Q.QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG, "floatValue": float(level)})]
        g = ctx.graph("g", configs=configs)
        x = g.input("x", SHAPE)
        outs = []
        for i in range(branches):
            w = g.static(f"w{i}", np.random.default_rng(i).standard_normal((3, 3, 32, 32)).astype(np.float32) * 0.1)
            c = g.node("Conv2d", [x, w, g.static(f"b{i}", np.zeros(32, np.float32))], [(f"c{i}", SHAPE, np.float32)],
                       params={"pad_amount": np.array([[1, 1], [1, 1]], np.uint32)})
            outs.append(g.node("Relu", [c], [(f"r{i}", SHAPE, np.float32)]))
        acc = outs[0]
        for i, o in enumerate(outs[1:]):
            acc = g.node("ElementWiseAdd", [acc, o], [(f"s{i}", SHAPE, np.float32)], app_read=i == len(outs) - 2)
        g.finalize()
        plan = HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle))).htp_plan
        ctx.free()
        return plan


@pytest.fixture(scope="module")
def plans():
    return {level: plan_at(level) for level in (None, 1, 2, 3)}


def test_o1_is_a_faster_less_optimal_prepare(plans):
    o1, o2 = plans[1], plans[2]
    assert o1.prescheduled_order == list(range(len(o1.prescheduled_order))), "O1 keeps graph order"
    assert o2.prescheduled_order != o1.prescheduled_order, "O2 reorders this graph"
    assert o1.runlist_peak_bytes > o2.runlist_peak_bytes, \
        f"O1's peak of live TCM {o1.runlist_peak_bytes} B above O2's {o2.runlist_peak_bytes} B"
    assert o1.total_cycles > o2.total_cycles, f"O1's modelled cycles {o1.total_cycles} above O2's {o2.total_cycles}"
    assert any("optimization level 1" in p for p in o1.passes), f"the plan's passes say O1: {o1.passes}"


def test_o2_is_the_default(plans):
    d, o2 = plans[None], plans[2]
    assert (d.prescheduled_order, d.total_cycles, d.runlist_peak_bytes) == \
        (o2.prescheduled_order, o2.total_cycles, o2.runlist_peak_bytes), "no flag: the O2 plan"


def test_o3_is_never_worse_than_o2(plans):
    o2, o3 = plans[2], plans[3]
    assert o3.runlist_peak_bytes <= o2.runlist_peak_bytes and o3.total_cycles <= o2.total_cycles, \
        f"O3 ({o3.runlist_peak_bytes} B, {o3.total_cycles} cycles) vs O2 ({o2.runlist_peak_bytes} B, {o2.total_cycles})"


def test_in_order_reschedule_never_beats_list_scheduling():
    """The O1 re-schedule on the same steps: never fewer cycles than the list scheduler."""

    from qnnemu.htp.plan_types import Step
    from qnnemu.htp.prepare import reschedule
    def steps():
        spec = [("DMA", 100, []), ("HVX", 50, [0]), ("HVX", 10, []), ("HVX", 10, [2])]
        return [Step(index=i, kind="op", name=f"s{i}", resource=r, cycles=c, deps=d)
                for i, (r, c, d) in enumerate(spec)]
    free, _ = reschedule(steps(), [], 1, True)
    ordered, _ = reschedule(steps(), [], 1, True, "runlist")
    assert free == 150, f"list scheduling runs s2, s3 while the DMA copy runs: {free}"
    assert ordered > free, f"in order ({ordered}) s2 waits behind s1: more than list scheduled ({free})"
