"""Acceptance of issue 5 ("The HTP device model"), end to end through the C ABI, the System
library, the command-line tools and ONNX Runtime -- the "Done when" list:

- a graph that does not fit a small VTCM budget (QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES /
  VTCM_SIZE_IN_MB given to graphCreate) finalizes with spill/fill steps, and its plan (runlist,
  spill bytes, peak VTCM) is the same seen from Python (``graph.htp_plan``), from
  contextGetProperty(QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE), from our
  libQnnSystem.so (systemContextGetBinaryInfo: graph info v3 graphBlobInfo spillFillBufferSize)
  and in the chrometrace qnnemu-profile-viewer makes of the optrace object (DETAILED +
  QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, read with profileGetExtendedEventData) and of
  qnnemu-net-run's profiling JSON; shrinking VTCM never lowers spill bytes (a sweep through the
  ABI);
- profiling at BASIC, DETAILED, QNN_HTP_PROFILE_LEVEL_LINTING and optrace yields the documented
  events ("QNN HTP Profiling": the execute stats, per-step cycles, the linting children
  Wait (Scheduler) / Overlap / Overlap (wait) / Resources) with the plan's numbers at
  ``qnnemu.htp.perf.current_clocks()``, a burst vote through deviceGetInfrastructure's perf
  infrastructure lowering the microseconds of the same cycles; ONNX Runtime's profiling CSV of a
  model that spills holds the same events;
- the chrometrace validates against the Trace Event Format (the profile viewer tests'
  checker, tests/helpers/trace_check.py) and the QHAS HTML summary of the spilling graph
  parses and, when Debian's chromium is installed, renders headless.

The documentation's tables themselves are walked row by row in their own modules (test_htp_device.py,
test_htp_configs.py, test_htp_perf.py, test_htp_priority.py); this module checks that the pieces
agree with each other on one real graph.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import abi
import numpy as np
import pytest
from abi import NULL, ffi, vp
from helpers.graph_env import H
from helpers.profile_env import (
    ACCEL_CYCLES_AT,
    EXECUTE_EVENTS,
    EXECUTE_TYPES,
    check_execute_events,
    data,
    events,
    expected_lint_tree,
    optrace_object,
    reference_lint_rows,
    sub_events,
    tree,
)
from helpers.trace_check import CHROMIUM, check_trace, counter_series, parse_html, thread_names, x_events

from qnnemu.core.handles import HANDLES
from qnnemu.core.profile import step_label
from qnnemu.headers import Q
from qnnemu.htp import perf
from qnnemu.htp.plan_types import TCM

pytestmark = pytest.mark.usefixtures("qnn_abi")

OK = Q.QNN_SUCCESS
KIB, MIB = 1024, 1 << 20
BASIC, DETAILED, LINTING = (Q.QNN_PROFILE_LEVEL_BASIC, Q.QNN_PROFILE_LEVEL_DETAILED,
                            Q.QNN_HTP_PROFILE_LEVEL_LINTING)
CRITICAL_AT = EXECUTE_TYPES.index(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE)
SPILL_FILL_PROP = Q.QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE

# v81: VTCM_SIZE_IN_BYTES (64 KiB granules) is available there ("Byte-Granularity VTCM").
SOC = Q.QNN_SOC_MODEL_SM8850
# The skip graph at 32x32x64: every activation is 128 KiB in VTCM; A and B stay live through the
# conv chain (live peak 544 KiB), the largest working set is 384 KiB (an Add reading two of them
# plus its scratch).  384 KiB therefore has to spill both A and B.
HW = 32
SMALL_BUDGET = 384 * KIB


@pytest.fixture
def env():
    e = H()
    yield e
    e.close()



# ----------------------------------------------------------------------- the test graph
@dataclass
class Built:
    ctx: int
    g: int
    x: abi.Struct
    y1: abi.Struct
    y2: abi.Struct
    hw: int

    @property
    def core(self):
        return HANDLES.lookup(self.g)

    @property
    def plan(self):
        return self.core.htp_plan


def vtcm_config(env: H, *, nbytes: int | None = None, mb: int | None = None):
    if nbytes is not None:
        return env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES, vtcmSizeInBytes=nbytes)
    return env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB, vtcmSizeInMB=mb)


def skip_graph(env: H, *configs, name: str = "skip", hw: int = HW, ctx: int | None = None,
               finalize: bool = True) -> Built:
    """x -> A -> B -> P1 -> P2 -> P3 (1x1 Conv2d, 64 channels); y1 = A + P3, y2 = B + P3, built
    with raw graphCreate / tensorCreateGraphTensor / graphAddNode calls in a fresh context of a
    v81 device (one graph per context, so the context's spill-fill property is this graph's)."""
    ctx = env.context(SOC) if ctx is None else ctx
    code, g = env.new_graph(ctx, name, *configs)
    assert code == OK, f"setup: graphCreate with {len(configs)} VTCM config(s): {env.rec.errors()[-1:]}"
    rng = np.random.default_rng(5)

    def tensor(tname, type_=Q.QNN_TENSOR_TYPE_NATIVE, data=None):
        t = abi.static_tensor(tname, data) if data is not None else abi.tensor(tname, (1, hw, hw, 64), type_=type_)
        assert env.create_tensor(t, g) == OK, f"setup: tensor {tname}"
        return t
    x = tensor("x", Q.QNN_TENSOR_TYPE_APP_WRITE)
    made = {"x": x}
    for out, src in (("A", "x"), ("B", "A"), ("P1", "B"), ("P2", "P1"), ("P3", "P2")):
        w = tensor(f"{out}_w", data=(rng.standard_normal((1, 1, 64, 64)) / 8).astype(np.float32))
        made[out] = tensor(out)
        assert env.add_node(abi.op_config(out.lower(), "Conv2d", [made[src], w], [made[out]]), g) == OK, \
            f"setup: Conv2d {out}: {env.rec.errors()[-1:]}"
    y1, y2 = tensor("y1", Q.QNN_TENSOR_TYPE_APP_READ), tensor("y2", Q.QNN_TENSOR_TYPE_APP_READ)
    for op, a, y in (("add1", "A", y1), ("add2", "B", y2)):
        assert env.add_node(abi.op_config(op, "ElementWiseAdd", [made[a], made["P3"]], [y]), g) == OK
    built = Built(ctx, g, x, y1, y2, hw)
    if finalize:
        code = abi.call("graphFinalize", vp(g), NULL, NULL)
        assert code == OK, f"setup: graphFinalize returned {code}: {env.rec.errors()[-1:]}"
    return built


def feed(hw: int = HW) -> np.ndarray:
    return np.random.default_rng(11).standard_normal((1, hw, hw, 64)).astype(np.float32)


def execute(env: H, b: Built, profile: int = 0) -> dict[str, np.ndarray]:
    outs = {"y1": np.zeros((1, b.hw, b.hw, 64), np.float32), "y2": np.zeros((1, b.hw, b.hw, 64), np.float32)}
    code = abi.call("graphExecute", vp(b.g), abi.tensor_array([env.io(b.x, feed(b.hw))], env.keep), 1,
                    abi.tensor_array([env.io(b.y1, outs["y1"]), env.io(b.y2, outs["y2"])], env.keep), 2,
                    vp(profile), NULL)
    assert code == OK, f"graphExecute returned {code}: {env.rec.errors()[-1:]}"
    return outs


def profile(env: H, level: int, optrace: bool = False) -> int:
    out = ffi.new("Qnn_ProfileHandle_t *")
    assert abi.call("profileCreate", vp(env.be), level, out) == OK, f"profileCreate(level {level})"
    p = abi.hval(out[0])
    if optrace:
        c = env.own(ffi.new("QnnProfile_Config_t *"))
        c.option, c.enableOptrace = Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, 1
        assert abi.call("profileSetConfig", vp(p), env.lst("QnnProfile_Config_t", c)) == OK, "ENABLE_OPTRACE"
    return p


def context_binary(ctx: int) -> bytes:
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinarySize", vp(ctx), size) == OK, "contextGetBinarySize"
    buf = ffi.new("char[]", int(size[0]))
    written = ffi.new("Qnn_ContextBinarySize_t *")
    assert abi.call("contextGetBinary", vp(ctx), buf, int(size[0]), written) == OK, "contextGetBinary"
    return bytes(ffi.buffer(buf, int(written[0])))


def spill_fill_steps(plan) -> list:
    return [s for s in plan.steps if s.kind in ("spill", "fill")]


# -------------------------------------------------- 1. the plan seen from every side
def test_small_budget_plan_from_python_property_and_system_library(env):
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    plan = b.plan
    # (a) Python: the plan hangs off the graph object behind the handle.
    assert plan.vtcm_budget_bytes == SMALL_BUDGET, "VTCM_SIZE_IN_BYTES at graphCreate is the plan's budget"
    kinds = [s.kind for s in plan.steps]
    assert "spill" in kinds and "fill" in kinds, f"a budget below the live peak spills and fills: {kinds}"
    assert all(s.resource == "DMA" for s in spill_fill_steps(plan)), "spill/fill copies run on DMA"
    assert sorted(plan.prescheduled_order) == list(range(len(b.core.nodes))), "the runlist holds every op once"
    assert 0 < plan.spill_bytes <= plan.fill_bytes, "every spilled block is filled back"
    assert plan.spill_fill_buffer_bytes >= max(blk.size for blk in plan.blocks if blk.role == "spill") > 0
    assert plan.peak_vtcm_bytes <= SMALL_BUDGET < plan.runlist_peak_bytes, \
        f"peak VTCM {plan.peak_vtcm_bytes} fits the budget the unspilled runlist ({plan.runlist_peak_bytes}) exceeds"
    assert plan.peak_vtcm_bytes == max(blk.offset + blk.size for blk in plan.blocks if blk.kind == TCM), \
        "peak VTCM: the highest allocated VTCM byte"
    assert b.core.spill_fill_bytes == plan.spill_fill_buffer_bytes, "graph.spill_fill_bytes is the plan's"
    # (b) the context property
    assert env.property(b.ctx, SPILL_FILL_PROP) == plan.spill_fill_buffer_bytes, \
        "QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE: the plan's spill-fill buffer"
    # (c) our libQnnSystem.so on the context's binary: graph info v3 graphBlobInfo
    from qnnemu.system_client import SystemLibrary
    blob = context_binary(b.ctx)
    with SystemLibrary() as system:
        info = system.binary_info(blob)
    [g] = info["graphs"]
    assert info["binary_info_version"] == 3, "BinaryInfo v3: graph info v3 carries the HTP graphBlobInfo"
    assert (g["name"], g["spill_fill_bytes"]) == ("skip", plan.spill_fill_buffer_bytes), \
        "systemContextGetBinaryInfo: graphBlobInfo spillFillBufferSize is the plan's"
    # ... and a context loaded from that binary answers the size it was prepared with.
    code, loaded = env.load(blob)
    assert code == OK, f"contextCreateFromBinary: {env.rec.errors()[-1:]}"
    assert env.property(loaded, SPILL_FILL_PROP) == plan.spill_fill_buffer_bytes, "the loaded context's property"
    # The plan is a model of the device: spilling changes no output bit.
    roomy = skip_graph(env, name="roomy")
    assert roomy.plan.spill_bytes == 0, "the default 4 MiB budget does not spill"
    small, big = execute(env, b), execute(env, roomy)
    for k in small:
        np.testing.assert_array_equal(small[k], big[k], f"{k}: identical with and without spills")


def test_vtcm_sweep_through_the_abi(env):
    """VTCM_SIZE_IN_BYTES from the largest working set to past the live peak, one graph per
    context: shrinking VTCM never lowers spill bytes; the property follows the plan."""
    seen = []
    for budget in range(SMALL_BUDGET, 1024 * KIB + 1, 64 * KIB):
        b = skip_graph(env, vtcm_config(env, nbytes=budget), name=f"sweep{budget // KIB}")
        plan = b.plan
        assert plan.vtcm_budget_bytes == budget and plan.peak_vtcm_bytes <= budget, \
            f"{budget // KIB} KiB: peak VTCM {plan.peak_vtcm_bytes} within the budget"
        assert env.property(b.ctx, SPILL_FILL_PROP) == plan.spill_fill_buffer_bytes, f"{budget // KIB} KiB: property"
        seen.append((budget // KIB, plan.spill_bytes))
    spills = [s for _, s in seen]
    assert spills[0] > 0 and spills[-1] == 0, f"spills at the smallest budget, none past the live peak: {seen}"
    assert all(a >= b for a, b in zip(spills, spills[1:])), f"spill bytes never grow with VTCM: {seen}"


def test_vtcm_size_in_mb_through_graph_create(env):
    """The MB option (every arch): at 48x48 each activation is 288 KiB, so 1 MiB spills."""
    got = {}
    for mb in (1, 2, 4):
        b = skip_graph(env, vtcm_config(env, mb=mb), name=f"mb{mb}", hw=48)
        assert b.plan.vtcm_budget_bytes == mb * MIB, f"VTCM_SIZE_IN_MB {mb}"
        assert env.property(b.ctx, SPILL_FILL_PROP) == b.plan.spill_fill_buffer_bytes
        got[mb] = b.plan.spill_bytes
    assert got[1] > 0 and got[1] >= got[2] >= got[4] == 0, f"spill bytes by MiB: {got}"


# ------------------------------------------------------------ 1d. the chrometrace
def run_viewer(args, capsys) -> tuple[int, str]:
    from qnnemu.tools import profile_viewer
    status = profile_viewer.main([str(a) for a in args])
    _, err = capsys.readouterr()
    return status, err


def check_spilling_trace(trace: dict, plan, budget: int, runs: int = 1) -> None:
    """The trace of ``runs`` executions of a spilling plan: valid Trace Event Format, the
    spill/fill spans on DMA lanes, the VTCM counter within the budget peaking at the plan's peak."""
    problems = check_trace(trace)
    assert not problems, "the chrometrace follows the Trace Event Format: " + "; ".join(problems[:8])
    names = thread_names(trace)
    for kind in ("spill", "fill"):
        spans = x_events(trace, cat=kind)
        assert len(spans) == runs * sum(1 for s in plan.steps if s.kind == kind) > 0, \
            f"every {kind} step is drawn, once per run"
        lanes = {names[(e["pid"], e["tid"])] for e in spans}
        assert all(lane.startswith("DMA queue") for lane in lanes), f"{kind} spans are on the DMA track: {lanes}"
    ops = {e["name"]: e for e in x_events(trace, cat="op")}
    for s in plan.steps:
        if s.kind == "op":
            assert ops[s.name]["args"]["cycles"] == s.cycles, f"{s.name}: the plan's cycles in the span's args"
    vtcm = [v for _, v in counter_series(trace, "VTCM alloc", "bytes")]
    assert vtcm and max(vtcm) <= budget, f"the VTCM counter never exceeds the {budget}-byte budget: {max(vtcm)}"
    assert max(vtcm) == plan.peak_vtcm_bytes, "the VTCM counter peaks at the plan's peak"
    [summary] = trace["otherData"]["graphs"]
    assert summary["spill_bytes"] == plan.spill_bytes, "otherData: the plan's spill bytes"


def test_optrace_object_to_chrometrace(env, tmp_path, capsys):
    """DETAILED + ENABLE_OPTRACE: the OBJECT event (profileGetExtendedEventData) is the plan's
    optrace document; qnnemu-profile-viewer turns the saved object into a chrometrace."""
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    p = profile(env, DETAILED, optrace=True)
    execute(env, b, p)
    ids = events(p)
    assert [data(i)[0] for i in ids] == EXECUTE_TYPES + [Q.QNN_PROFILE_EVENTTYPE_TRACE], \
        "the execute stats, then the optrace event"
    x, obj, payload = optrace_object(ids[-1])
    name = ffi.string(obj.fileName).decode()
    assert (x.v1.unit, name) == (Q.QNN_PROFILE_EVENTUNIT_OBJECT, "skip.optrace.json"), "an OBJECT <graph>.optrace.json"
    doc = json.loads(payload)
    assert (doc["spill_bytes"], doc["peak_vtcm_bytes"], doc["prescheduled_order"]) == \
        (b.plan.spill_bytes, b.plan.peak_vtcm_bytes, b.plan.prescheduled_order), "the document is the plan's"
    (tmp_path / name).write_bytes(payload)
    status, err = run_viewer(["--input_log", tmp_path / name, "--output", tmp_path / "trace.json"], capsys)
    assert status == 0, err
    check_spilling_trace(json.loads((tmp_path / "trace.json").read_text()), b.plan, SMALL_BUDGET)
    assert abi.call("profileFree", vp(p)) == OK


def test_net_run_optrace_of_the_saved_binary(env, tmp_path, capsys):
    """qnnemu-net-run --retrieve_context on the saved binary with --profiling_level detailed
    --profiling_option optrace; the viewer traces its qnn-profiling-data.json."""
    from qnnemu.tools import net_run
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    (tmp_path / "skip.bin").write_bytes(context_binary(b.ctx))
    feed().tofile(tmp_path / "x.raw")
    (tmp_path / "inputs.txt").write_text(f"x:={tmp_path / 'x.raw'}\n")
    out_dir = tmp_path / "out"
    status = net_run.main(["--retrieve_context", str(tmp_path / "skip.bin"), "--input_list",
                           str(tmp_path / "inputs.txt"), "--output_dir", str(out_dir),
                           "--profiling_level", "detailed", "--profiling_option", "optrace"])
    assert status == 0, capsys.readouterr().err
    capsys.readouterr()
    outputs = execute(env, b)
    got = np.fromfile(out_dir / "Result_0" / "y1.raw", np.float32).reshape(outputs["y1"].shape)
    np.testing.assert_array_equal(got, outputs["y1"], "net-run on the binary computes what the graph does")
    status, err = run_viewer(["--input_log", out_dir / net_run.PROFILE_FILE, "--output", tmp_path / "t.json"],
                             capsys)
    assert status == 0, err
    check_spilling_trace(json.loads((tmp_path / "t.json").read_text()), b.plan, SMALL_BUDGET)


# ------------------------------------------------------------- 1e. a tiled graph
TILED_BUDGET = 256 * KIB   # at 32x32 the Adds need 384 KiB whole (two 128 KiB inputs + the output stream)


def test_tiled_graph_in_detailed_profile_optrace_and_chrometrace(env, tmp_path, capsys):
    """A budget below the largest working set: the Adds are tiled.  Their tile fills and
    spills are DETAILED NODE sub-events like every plan step, DMA steps of the optrace
    document, spans on the chrometrace's DMA lanes carrying the tile (the trace passes the
    Trace Event Format checker), and the outputs are the untiled graph's."""
    b = skip_graph(env, vtcm_config(env, nbytes=TILED_BUDGET), name="tiled")
    plan = b.plan
    # v81 runs the float32 graph in float16 math, its 1x1 convolutions on HMX with their weights
    # streamed through VTCM: at this budget they are tiled too.
    assert {"add1", "add2"} <= {t.node for t in plan.tilings} and plan.tiles >= 4, \
        f"the Adds (384 KiB whole) are tiled at {TILED_BUDGET} bytes: {plan.passes[2]}"
    # DETAILED: one NODE sub-event per plan step -- tile fills / computes / spills included
    p = profile(env, DETAILED)
    outs = execute(env, b, p)
    n = len(b.core.nodes)
    got = [data(i) for i in sub_events(events(p)[ACCEL_CYCLES_AT])]
    assert got == [(Q.QNN_PROFILE_EVENTTYPE_NODE, Q.QNN_PROFILE_EVENTUNIT_CYCLES, s.cycles,
                    f"{step_label(s, n)[0]} (cycles)") for s in plan.steps], "one NODE sub-event per plan step"
    labels = [g[3] for g in got]
    for part in (":tile0:fill:OpId_", ":tile0:OpId_", ":tile1:fill:OpId_"):
        assert any(part in x for x in labels), f"tile steps are profiled ({part}): {labels}"
    assert abi.call("profileFree", vp(p)) == OK
    roomy = skip_graph(env, name="untiled")
    assert roomy.plan.tilings == [], "the default budget tiles nothing"
    for k, v in execute(env, roomy).items():
        np.testing.assert_array_equal(outs[k], v, f"{k}: tiling changes no output bit")
    # optrace: the document lists the tilings and the tile steps; the viewer's chrometrace
    p = profile(env, DETAILED, optrace=True)
    execute(env, b, p)
    _, obj, payload = optrace_object(events(p)[-1])
    doc = json.loads(payload)
    assert [t["node"] for t in doc["tilings"]] == [t.node for t in plan.tilings] and doc["tiles"] == plan.tiles, \
        "the optrace document carries the tilings"
    tile_dma = [s for s in doc["steps"] if s["tile"] is not None and s["kind"] in ("fill", "spill")]
    assert tile_dma and all(s["resource"] == "DMA" for s in tile_dma), "tile fills/spills are DMA steps"
    (tmp_path / "tiled.optrace.json").write_bytes(payload)
    status, err = run_viewer(["--input_log", tmp_path / "tiled.optrace.json", "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    trace = json.loads((tmp_path / "t.json").read_text())
    check_spilling_trace(trace, plan, TILED_BUDGET)
    names = thread_names(trace)
    spans = [e for e in x_events(trace) if e["args"].get("tile") is not None]
    fills = [e for e in spans if e["cat"] == "fill"]
    assert len(spans) == sum(1 for s in plan.steps if s.tile is not None) and fills, "every tile step is drawn"
    assert all(names[(e["pid"], e["tid"])].startswith("DMA queue") for e in spans if e["cat"] in ("fill", "spill")), \
        "tile fills and spills are on the DMA lanes"
    tiled = {t.node for t in plan.tilings}
    assert all(e["args"]["tiled_node"] in tiled and e["args"]["tile_shape"] for e in spans), \
        "each span names its tiled op and tile shape"
    [summary] = trace["otherData"]["graphs"]
    assert (summary["tiles"], summary["tiled_ops"]) == (plan.tiles, len(tiled)), "otherData: tiles and tiled ops"
    assert abi.call("profileFree", vp(p)) == OK


# ------------------------------------------------------- 2. profiling at each level
def test_basic_events_follow_the_plan_and_the_perf_vote(env, isolated_votes):
    """BASIC: the documented execute stats with the plan's cycles at current_clocks(); a burst vote
    (deviceGetInfrastructure -> createPowerConfigId -> setPowerConfig) raises the clocks, so the
    same cycles report fewer microseconds."""
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    p = profile(env, BASIC)
    execute(env, b, p)
    nominal = check_execute_events(events(p), float("inf"), b.g, first_run=True)
    assert all(sub_events(i) == [] for i in events(p)), "BASIC has no sub-events"
    out = ffi.new("QnnHtpDevice_Infrastructure_t **")
    assert abi.call("deviceGetInfrastructure", out) == OK, "deviceGetInfrastructure"
    infra = out[0].perfInfra
    pid_out = ffi.new("uint32_t *")
    assert infra.createPowerConfigId(0, 0, pid_out) == OK, "createPowerConfigId"
    pid = int(pid_out[0])
    try:
        before = perf.current_clocks()
        configs = []
        for option, fields in perf.profile_votes("burst", pid):
            c = env.own(ffi.new("QnnHtpPerfInfrastructure_PowerConfig_t *"))
            c.option, member = option, perf.POWER_OPTION_FIELDS[option]
            if isinstance(fields, dict):   # a struct member (DCVS v3)
                for k, v in fields.items():
                    setattr(getattr(c, member), k, v)
            else:                          # a scalar member (latency, polling, timeout)
                setattr(c, member, fields)
            configs.append(c)
        code = infra.setPowerConfig(pid, env.lst("QnnHtpPerfInfrastructure_PowerConfig_t", *configs))
        assert code == OK, f"setPowerConfig(burst votes): {env.rec.errors()[-1:]}"
        burst = perf.current_clocks()
        assert burst.core_mhz > before.core_mhz, f"burst raises the core clock: {before} -> {burst}"
        execute(env, b, p)
        voted = check_execute_events(events(p), float("inf"), b.g, first_run=False)
    finally:
        assert infra.destroyPowerConfigId(pid) == OK, "destroyPowerConfigId"
    cycles = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE
    us = Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC
    assert voted[cycles] == nominal[cycles] == b.plan.total_cycles, "cycles do not depend on the clocks"
    assert voted[us] == round(b.plan.total_cycles / burst.core_mhz) < nominal[us], \
        f"accelerator us at the burst clock: {voted[us]} < {nominal[us]} at {before.core_mhz} MHz"
    assert perf.current_clocks() == before, "destroying the id removes its votes"


def test_detailed_per_step_events_include_spill_and_fill(env):
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    p = profile(env, DETAILED)
    execute(env, b, p)
    ids = events(p)
    check_execute_events(ids, float("inf"), b.g, first_run=True)
    n = len(b.core.nodes)
    got = [data(s) for s in sub_events(ids[ACCEL_CYCLES_AT])]
    want = [(Q.QNN_PROFILE_EVENTTYPE_NODE, Q.QNN_PROFILE_EVENTUNIT_CYCLES, s.cycles,
             f"{step_label(s, n)[0]} (cycles)") for s in b.plan.steps]
    assert got == want, "one NODE cycles sub-event per plan step, in runlist order"
    labels = [g[3] for g in got]
    assert any(":spill:OpId_" in x for x in labels) and any(":fill:OpId_" in x for x in labels), \
        f"the spill/fill steps are profiled like ops: {labels}"


def test_linting_tree_of_the_spilling_plan(env):
    """QNN_HTP_PROFILE_LEVEL_LINTING: under the critical-path event, per step its cycles, Wait
    (Scheduler), Overlap and Overlap (wait) with the contributing steps' names, Resources."""
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    p = profile(env, LINTING)
    execute(env, b, p)
    ids = events(p)
    assert [data(i)[0] for i in ids] == EXECUTE_TYPES, "the execute stats, as at every level"
    plan, n = b.plan, len(b.core.nodes)
    crit = tree(ids[CRITICAL_AT])
    assert crit[2] == plan.critical_path_cycles, "the critical-path cycles"
    assert crit[4] == expected_lint_tree(reference_lint_rows(plan, n)), \
        "the linting tree is the documentation's report of the plan's schedule, step by step"
    children = {c[3] for node in crit[4] for c in node[4]}
    assert {"Wait (Scheduler) time", "Overlap time", "Overlap (wait) time"} <= children
    dma = [node for node, s in zip(crit[4][1:-1], plan.steps) if s.kind in ("spill", "fill")]
    assert dma and all(node[4][3][3] == "Resources: DMA" for node in dma), "spill/fill steps use the DMA"
    assert any(s.overlap_cycles for s in plan.steps), "the re-scheduler overlapped something (linting has content)"


# ------------------------------------------------------------------- ONNX Runtime
def spilling_onnx_model(path: Path) -> Path:
    """The skip graph as an ONNX model (NCHW, 64 x 48 x 48): with vtcm_mb=1 it spills."""
    onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
    from onnx import TensorProto, helper
    rng = np.random.default_rng(5)
    shape = [1, 64, 48, 48]
    inits, nodes = [], []
    for out, src in (("A", "x"), ("B", "A"), ("P1", "B"), ("P2", "P1"), ("P3", "P2")):
        w = (rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float32)
        inits.append(helper.make_tensor(f"{out}_w", TensorProto.FLOAT, w.shape, w.ravel().tolist()))
        nodes.append(helper.make_node("Conv", [src, f"{out}_w"], [out], name=out.lower()))
    nodes += [helper.make_node("Add", ["A", "P3"], ["y1"], name="add1"),
              helper.make_node("Add", ["B", "P3"], ["y2"], name="add2")]
    graph = helper.make_graph(nodes, "skip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, shape) for y in ("y1", "y2")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def plan_of(doc: dict) -> SimpleNamespace:
    """The fields check_spilling_trace reads, from an optrace document."""
    return SimpleNamespace(steps=[SimpleNamespace(**s) for s in doc["steps"]], peak_vtcm_bytes=doc["peak_vtcm_bytes"],
                           spill_bytes=doc["spill_bytes"])


@pytest.mark.parametrize("level", ["basic", "detailed", "optrace"])
def test_onnxruntime_profiling_of_a_spilling_model(tmp_path, capsys, level):
    """ONNX Runtime's QNN EP with vtcm_mb=1 and profiling_level: the CSV holds the documented execute
    stats per run; from detailed on, per-step rows including the spill/fill steps; at optrace,
    the System library's log next to the CSV holds the optrace documents, whose numbers are the
    CSV's, and the viewer makes a valid chrometrace of it that keeps within the 1 MiB budget."""
    pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
    import csv

    import qnnemu.onnxruntime as qort
    from qnnemu.core.system_profile import optrace_documents, read_profile_log
    model = spilling_onnx_model(tmp_path / "skip.onnx")
    csv_path = tmp_path / f"profile_{level}.csv"
    sess = qort.session(model, provider_options={"vtcm_mb": 1, "profiling_level": level,
                                                 "profiling_file_path": csv_path})
    x = np.random.default_rng(2).standard_normal((1, 64, 48, 48)).astype(np.float32)
    for _ in range(2):
        sess.run(None, {"x": x})
    del sess
    with open(csv_path, newline="") as f:
        rows = [r for r in list(csv.reader(f))[1:] if r]
    idents = [r[6] for r in rows]
    for _, _, ident in EXECUTE_EVENTS:
        assert idents.count(ident) == 2, f"'{ident}' once per run"
    nodes = [(r[6], int(r[2])) for r in rows if r[1] == "NODE"]
    if level == "basic":
        assert nodes == [], "no per-step rows at basic"
        return
    labels = [n for n, _ in nodes]
    assert any(":spill:OpId_" in n for n in labels) and any(":fill:OpId_" in n for n in labels), \
        f"1 MiB of VTCM spills, and the spill/fill steps are rows of the CSV: {labels}"
    if level != "optrace":
        return
    _, records = read_profile_log(str(csv_path.with_name(csv_path.stem + "_qnn.log")))
    docs = optrace_documents(records)
    assert len(docs) == 2, "one optrace document per run"
    doc = docs[0]
    assert doc["vtcm_budget_bytes"] == MIB and doc["spill_bytes"] > 0, "vtcm_mb=1 reached graphCreate and spilled"
    first_run = nodes[:len(nodes) // 2]
    assert [c for _, c in first_run] == [s["cycles"] for s in doc["steps"]], "the CSV's step rows are the document's"
    value = {r[6]: int(r[2]) for r in rows if r[2].isdigit()}   # ORT writes UNKNOWN for the OBJECT row
    mhz = doc["execution"]["clocks"]["core_mhz"]
    assert value["Accelerator (execute) time (cycles)"] == doc["total_cycles"], "the CSV's cycles are the plan's"
    assert value["Accelerator (execute) time"] == round(doc["total_cycles"] / mhz), \
        f"accelerator us: the plan's cycles at the run's {mhz} MHz"
    log_path = csv_path.with_name(csv_path.stem + "_qnn.log")
    status, err = run_viewer(["--input_log", log_path, "--output", tmp_path / "t.json"], capsys)
    assert status == 0, err
    check_spilling_trace(json.loads((tmp_path / "t.json").read_text()), plan_of(doc), MIB, runs=2)


# ------------------------------------------------------------ 4. the HTML summary
def qhas_report(env: H, tmp_path: Path, capsys) -> tuple[Path, object]:
    """qnnemu-profile-viewer --html on the optrace object of the spilling graph's execute."""
    b = skip_graph(env, vtcm_config(env, nbytes=SMALL_BUDGET))
    p = profile(env, DETAILED, optrace=True)
    execute(env, b, p)
    _, _, payload = optrace_object(events(p)[-1])
    (tmp_path / "skip.optrace.json").write_bytes(payload)
    html_path = tmp_path / "qhas.html"
    status, err = run_viewer(["--input_log", tmp_path / "skip.optrace.json", "--html", html_path], capsys)
    assert status == 0, err
    return html_path, b.plan


def test_html_summary_of_the_spilling_graph(env, tmp_path, capsys):
    html_path, plan = qhas_report(env, tmp_path, capsys)
    text = html_path.read_text()
    page = parse_html(text)
    assert not page.external, f"self-contained: {page.external}"
    types = {r[0]: r for r in page.tables["g0-optypes"]["rows"]}
    assert {"Conv2d", "ElementWiseAdd"} <= set(types), f"the graph's op types: {sorted(types)}"
    cycles = sum(float(r[2].replace(",", "")) for r in types.values())
    assert cycles == sum(s.cycles for s in plan.steps), "the op-type table accounts for every step's cycles"
    ops = page.tables["g0-ops"]["rows"]
    assert sorted(r[1] for r in ops) == sorted(s.name for s in plan.steps), "HTP Ops lists every step"
    assert {r[3] for r in ops} >= {"spill", "fill"}, "spill/fill steps are listed"
    assert page.slices["g0-optypes-pie"], "the pie chart is drawn"
    for label, value in (("Peak VTCM (bytes)", plan.peak_vtcm_bytes), ("Spill bytes", plan.spill_bytes),
                         ("VTCM budget (bytes)", SMALL_BUDGET)):
        assert f"{label}</th><td class=num>{value:,}<" in text or f"{label}</th><td class=num>{value}<" in text, \
            f"the overall summary shows {label} = {value}"


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason="Debian chromium not installed")
def test_html_summary_renders_in_headless_chromium(env, tmp_path, capsys):
    html_path, plan = qhas_report(env, tmp_path, capsys)
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom", html_path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "data-ready" in proc.stdout, f"chromium ran the page's script: {proc.stderr[-400:]}"
    rendered = parse_html(proc.stdout)
    assert len(rendered.tables["g0-ops"]["rows"]) == len(plan.steps), "the rendered DOM keeps every step row"
    assert rendered.slices["g0-optypes-pie"], "the pie survives rendering"


# ------------------------------------------- a binary keeps the plan it was prepared with
def test_binary_loaded_on_another_soc_keeps_its_prepared_plan(env):
    """Prepared on SA8797 (v81, 16 MiB) with VTCM MAX, the 128x128 skip graph needs no spill.
    Loaded under PERMISSIVE in a context without a device (the default SM8550, 8 MiB), it is not
    re-planned for 8 MiB: plan, spill-fill property and System library all say what prepare said."""
    ctx = env.context(Q.QNN_SOC_MODEL_SA8797)
    b = skip_graph(env, env.graph_custom(Q.QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB,
                                         vtcmSizeInMB=Q.QNN_HTP_GRAPH_CONFIG_OPTION_MAX), hw=128, ctx=ctx)
    prepared = b.plan
    assert prepared.vtcm_budget_bytes == 16 * MIB and prepared.spill_bytes == 0, \
        f"setup: prepared with the SoC's 16 MiB and no spill ({prepared.vtcm_budget_bytes}, {prepared.spill_bytes})"
    assert prepared.peak_vtcm_bytes > 8 * MIB, "setup: the plan needs more VTCM than the default device has"
    blob = context_binary(b.ctx)
    buf = ffi.new("char[]", blob)
    out = ffi.new("Qnn_ContextHandle_t *")
    code = abi.call("contextCreateFromBinary", vp(env.be), NULL, NULL, buf, len(blob), out, NULL)
    assert code == OK, f"PERMISSIVE load on the default device: {env.rec.errors()[-1:]}"
    loaded_ctx = abi.hval(out[0])
    try:
        code, g = abi.create("graphRetrieve", vp(loaded_ctx), abi.cstr("skip", env.keep))
        assert code == OK, "graphRetrieve"
        plan = HANDLES.lookup(g).htp_plan
        assert (plan.vtcm_budget_bytes, plan.spill_bytes, plan.peak_vtcm_bytes, plan.total_cycles) == \
            (prepared.vtcm_budget_bytes, prepared.spill_bytes, prepared.peak_vtcm_bytes, prepared.total_cycles), \
            "the loaded graph's plan is the prepared one (budget, spill bytes, peak VTCM, cycles)"
        assert plan.arch == 81, f"planned for the binary's v81, not the device's arch (got v{plan.arch})"
    finally:
        assert abi.call("contextFree", vp(loaded_ctx), NULL) == OK, "contextFree of the loaded context"
