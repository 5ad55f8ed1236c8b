"""A batch of n reuses the weights (QNN HTP backend documentation, "Benefits of batch inference and
multi-threaded inference", "QNN HTP Variable Batch"; qnnemu/htp/cost.py ``batch_reuse`` /
``batch_cycles``, qnnemu/htp/rpc.py, docs/htp-rpc.md): an execute with batch multiple n costs
less than n single executes when its ops re-read weights per inference, less so when the
activations take the VTCM the weights would be kept in; the page's ResNet-50 example (SM8550,
batches of 5 and 2 threads: about 1.8x the inferences per second of 1 batch and 1 thread)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.resnet50_graph import build_resnet50

from qnnemu.client import Backend, ffi, htp_device_config, htp_graph_config
from qnnemu.client.cabi import _set_buffer
from qnnemu.client.perf import PerfInfrastructure
from qnnemu.core.handles import HANDLES
from qnnemu.headers import Q
from qnnemu.htp import cost, perf, rpc, runtime, settings

ACCEL_CYCLES = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE
SM8550 = int(Q.QNN_SOC_MODEL_SM8550)
IN, OUT = 512, 1024     # FullyConnected [1, IN] x [OUT, IN]: 2 MB of float32 weights, tiny activations
BIG_BATCH = 32          # more batch elements than fit beside the weights in a 256 KB budget



def core_of(g):
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle)))


def fc_graph(ctx, name: str, vtcm_bytes: int | None = None):
    configs = [] if vtcm_bytes is None else [htp_graph_config("VTCM_SIZE_IN_BYTES", vtcmSizeInBytes=vtcm_bytes)]
    g = ctx.graph(name, configs=configs)
    x = g.input("x", (1, IN))
    w = g.static("w", np.random.default_rng(1).standard_normal((OUT, IN)).astype(np.float32) / 16)
    g.node("FullyConnected", [x, w], [("y", (1, OUT), np.float32)], app_read=True)
    g.finalize()
    return g


def execute_batch(be, g, n: int, prof) -> tuple[np.ndarray, int]:
    """graphExecute with every argument [n*1, ...] (variable batch n); (y, the profile's
    accelerator cycles)."""
    keep = []
    x = np.random.default_rng(n).standard_normal((n, IN)).astype(np.float32)
    y = np.zeros((n, OUT), np.float32)
    args = []
    for t, arr in ((g.inputs[0], x), (g.outputs[0], y)):
        c = ffi.new("Qnn_Tensor_t[]", 1)
        c[0] = t.struct[0]
        dims = ffi.new("uint32_t[]", list(arr.shape))
        c[0].v2.dimensions = dims
        _set_buffer(c[0], ffi.from_buffer(arr), arr.nbytes, keep)
        keep += [c, dims]
        args.append(c)
    be.call("graphExecute", g.handle, args[0], 1, args[1], 1, prof.handle, ffi.NULL)
    cycles = [e["value"] for e in prof.events() if e["type"] == ACCEL_CYCLES]
    assert len(cycles) == 1, "the execute reports its accelerator cycles"
    return y, cycles[0]


def test_a_batch_of_five_costs_less_than_five_single_executes():
    """The profile's accelerator cycles and the device's virtual clock: batch 5 of a
    weight-bound FullyConnected reads its 2 MB of weights once, not five times."""
    with Backend() as be:
        g = fc_graph(be.context(), "fc")
        core = core_of(g)
        plan = core.htp_plan
        prof = be.profile("basic")
        rt = runtime.runtime_for(settings.device_model(core).soc)
        _, single = execute_batch(be, g, 1, prof)
        before = rt.now
        y5, five = execute_batch(be, g, 5, prof)
        took = rt.now - before
        prof.free()
    assert single == plan.total_cycles, "batch 1: the plan's cycles"
    assert plan.total_cycles < five < 5 * plan.total_cycles, \
        f"batch 5: more than one run, less than five ({five} vs 5 x {plan.total_cycles})"
    assert five == rpc.execute_cycles(core, plan, 5), "the profile reports the cost model's batch cycles"
    assert five < 0.5 * 5 * plan.total_cycles, f"a weight-bound op saves most of the weights' DMA: {five}"
    assert took == pytest.approx(cost.cycles_to_us(five, perf.current_clocks(arch=plan.arch))), \
        "the device's virtual clock moves by the batch's modelled time"
    assert core.last_schedule.batch == 5 and core.last_schedule.span.batch == 5, "the schedule records the batch"
    assert y5.shape == (5, OUT) and np.isfinite(y5).all(), "the batch computed"


def test_activations_filling_vtcm_reuse_the_weights_for_fewer_batch_elements():
    """"With large resolution models, as the activations take up more VTCM space, ... weights are
    reused for lesser number of activations": the same op with a smaller VTCM budget keeps its
    weights for fewer batch elements, so its batch costs relatively more."""
    with Backend() as be:
        ctx = be.context()
        ratios, groups = {}, {}
        for label, budget in (("roomy", None), ("tight", 256 * 1024)):
            g = fc_graph(ctx, label, budget)
            core = core_of(g)
            plan = core.htp_plan
            reuse = rpc.batch_reuse(core, plan)
            assert reuse, f"{label}: the FullyConnected step reuses its weights"
            groups[label] = min(r.group for r in reuse)
            ratios[label] = rpc.execute_cycles(core, plan, BIG_BATCH) / (BIG_BATCH * plan.total_cycles)
    assert groups["tight"] < BIG_BATCH <= groups["roomy"], f"fewer batch elements fit beside the weights: {groups}"
    assert ratios["roomy"] < ratios["tight"] < 1.0, f"batch {BIG_BATCH} / {BIG_BATCH} single runs: {ratios}"


def test_no_reuse_without_weights():
    """An op without weights has nothing to reuse: batch n costs n runs."""
    with Backend() as be:
        g = be.context().graph("add")
        a, b = g.input("a", (1, 256)), g.input("b", (1, 256))
        g.node("ElementWiseAdd", [a, b], [("s", (1, 256), np.float32)], app_read=True)
        g.finalize()
        core = core_of(g)
        plan = core.htp_plan
        assert rpc.batch_reuse(core, plan) == [], "no static inputs: no reuse"
        assert rpc.execute_cycles(core, plan, 4) == 4 * plan.total_cycles, "batch 4 = four runs"


@pytest.fixture(scope="module")
def resnet50():
    with Backend(None, log_level=None, device_configs=[htp_device_config("SOC", socModel=SM8550)]) as be:
        g = build_resnet50(be.context())
        core = core_of(g)
        yield be, core, core.htp_plan


def test_resnet50_batch_five_and_two_threads_about_1_8x(resnet50, isolated_votes):
    """The documentation's example: ResNet-50 on SM8550, 1 batch and 1 thread about 1500 inf/s;
    batches of 5 and 2 threads about 2800 inf/s (about 1.8x).  Modelled: the burst profile
    (what a throughput run votes), the plan's batch-5 cycles with the weights reused, two host
    threads on one device timeline; accepted within 1.6x..2.0x.  Each of the two alone gains
    less."""
    be, core, plan = resnet50
    assert plan.arch == 73, "SM8550 is v73"
    infra = PerfInfrastructure(be)
    try:
        pid = infra.create_power_config_id()
        infra.set_power(pid, perf.profile_votes("burst", pid))
        clocks = perf.current_clocks(arch=plan.arch)
        vote = rpc.current_vote()
    finally:
        infra.close()
    one = cost.cycles_to_us(rpc.execute_cycles(core, plan, 1), clocks)
    five = cost.cycles_to_us(rpc.execute_cycles(core, plan, 5), clocks)
    assert five < 5 * one, f"batch 5 reuses the weights: {five:.0f} us < 5 x {one:.0f} us"
    base = rpc.throughput(one, vote, threads=1, batch=1)["inferences_per_s"]
    both = rpc.throughput(five, vote, threads=2, batch=5)["inferences_per_s"]
    batch_only = rpc.throughput(five, vote, threads=1, batch=5)["inferences_per_s"]
    threads_only = rpc.throughput(one, vote, threads=2, batch=1)["inferences_per_s"]
    gain = both / base
    assert 1.6 <= gain <= 2.0, f"batch 5 x 2 threads vs 1 x 1: {gain:.2f}x ({both:.0f} vs {base:.0f} inf/s)"
    assert 1.0 < batch_only / base < gain and 1.0 < threads_only / base < gain, \
        f"each alone gains less: batch {batch_only / base:.2f}x, threads {threads_only / base:.2f}x"
