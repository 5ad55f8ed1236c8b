"""ONNX Runtime's QNN EP provider options that select or tune the HTP device, on qnnemu: one
test each for ``soc_model``, ``htp_arch``, ``vtcm_mb``, ``htp_performance_mode``,
``enable_htp_fp16_precision`` and ``htp_graph_finalization_optimization_mode``.

Each test creates a session with the option (CPU fallback disabled), runs it (the result matches
ORT's CPU EP), and checks that the option reached qnnemu in the form the EP passes it through
the QNN API -- read from the live backend objects of this process (our library runs in the same
Python interpreter): the device the graph was prepared for (QnnDevice_Config_t SOC/ARCH), the
graph's HTP configs and resolved settings (QnnHtpGraph_CustomConfig_t VTCM_SIZE, PRECISION,
OPTIMIZATION FINALIZE_OPTIMIZATION_FLAG), the prepared plan, and the clocks the power votes
give (QnnHtpPerfInfrastructure_SetPowerConfig). Each option is tried with two or more values and
without it, so an option that did not arrive would fail the test.

``test_vendor_accepts_the_same_options`` creates and runs the same sessions on the vendor's
libQnnHtp.so (in a subprocess; skipped without the onnxruntime-qnn wheel), so that the values
used here are ones the real backend accepts.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")
if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)

from onnx import TensorProto, helper  # noqa: E402
from vendor import vendor_env, vendor_library  # noqa: E402

import qnnemu.onnxruntime as qort  # noqa: E402
from qnnemu.core.graph import Graph  # noqa: E402
from qnnemu.core.handles import HANDLES  # noqa: E402
from qnnemu.headers import Q  # noqa: E402
from qnnemu.htp import perf  # noqa: E402
from qnnemu.htp.settings import DEFAULT_OPTIMIZATION_LEVEL, DEFAULT_VTCM_BYTES, device_model, graph_settings  # noqa: E402
from qnnemu.htp.soc import SOCS  # noqa: E402

MIB = 1 << 20
SM8550 = int(Q.QNN_SOC_MODEL_SM8550)   # 43, v73, 8 MiB VTCM
SM8650 = int(Q.QNN_SOC_MODEL_SM8650)   # 57, v75
SM8350 = int(Q.QNN_SOC_MODEL_SM8350)   # 30, v68


def conv_relu_model() -> bytes:
    """y = Relu(Conv3x3(x, W) + b): float32, 1x3x8x8 -> 1x4x8x8."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(4) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


MODEL = conv_relu_model()
FEEDS = {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@contextlib.contextmanager
def qnnemu_session(**options):
    """A QNN EP session on qnnemu with ``options``, run once and checked against the CPU EP;
    yields (the graph qnnemu built for it, qnnemu's log records meanwhile)."""
    records: list[logging.LogRecord] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("qnnemu")
    handler, level = _Collect(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    before = {id(g) for g in HANDLES.live(Graph)}
    sess = None
    try:
        sess = qort.session(MODEL, provider_options=options)
        assert sess.get_providers()[0] == "QNNExecutionProvider", f"{options}: {sess.get_providers()}"
        got = sess.run(None, FEEDS)[0]
        want = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"]).run(None, FEEDS)[0]
        err = float(np.max(np.abs(got - want)))
        assert err <= 1e-2 * float(np.max(np.abs(want))), f"{options}: max |qnnemu - CPU EP| = {err:.3g}"
        graphs = [g for g in HANDLES.live(Graph) if id(g) not in before]
        assert len(graphs) == 1, f"{options}: the session made one qnnemu graph, found {len(graphs)}"
        assert graphs[0].finalized and graphs[0].htp_plan is not None, f"{options}: the graph was prepared"
        yield graphs[0], records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        del sess
        gc.collect()


def _messages(records) -> list[str]:
    return [r.getMessage() for r in records]


@pytest.mark.parametrize("soc", [SM8550, SM8650, SM8350])
def test_soc_model(soc):
    row = SOCS[soc]
    with qnnemu_session(soc_model=soc) as (graph, records):
        model = device_model(graph)
        assert (model.soc_model, model.arch, model.vtcm_mb) == (soc, row.arch, row.vtcm_mb), \
            f"soc_model={soc}: the device is {row.name} (v{row.arch}, {row.vtcm_mb} MiB VTCM): {model}"
        plan = graph.htp_plan
        assert (plan.soc_model, plan.arch) == (soc, row.arch), \
            f"soc_model={soc}: the graph was prepared for it: plan soc {plan.soc_model} v{plan.arch}"
        created = [m for m in _messages(records) if m.startswith("deviceCreate:")]
        assert created and f"SoC model {soc}" in created[-1], f"soc_model={soc}: deviceCreate logs it: {created}"


@pytest.mark.parametrize("arch", [68, 73, 75])
def test_htp_arch(arch):
    with qnnemu_session(htp_arch=arch) as (graph, records):
        model = device_model(graph)
        assert model.arch == arch, f"htp_arch={arch}: the device is v{model.arch} ({model.name})"
        assert SOCS[model.soc_model].arch == arch, f"htp_arch={arch}: a SoC of that arch: {model.name}"
        assert graph.htp_plan.arch == arch, f"htp_arch={arch}: the plan is for v{graph.htp_plan.arch}"
        assert any(f"emulated HTP v{arch}" in m for m in _messages(records)), f"htp_arch={arch}: deviceCreate logs it"


@pytest.mark.parametrize("vtcm_mb", [None, 1, 2, 8])
def test_vtcm_mb(vtcm_mb):
    options = {"soc_model": SM8550} if vtcm_mb is None else {"soc_model": SM8550, "vtcm_mb": vtcm_mb}
    want = DEFAULT_VTCM_BYTES if vtcm_mb is None else vtcm_mb * MIB
    with qnnemu_session(**options) as (graph, records):
        settings = graph_settings(graph)
        assert settings.vtcm_bytes == want, f"{options}: VTCM {settings.vtcm_bytes} B, expected {want} B"
        assert settings.vtcm_source == ("default" if vtcm_mb is None else "VTCM_SIZE_IN_MB"), \
            f"{options}: the VTCM size came from {settings.vtcm_source}"
        assert graph.htp_plan.vtcm_budget_bytes == want, \
            f"{options}: the plan's VTCM budget {graph.htp_plan.vtcm_budget_bytes} B, expected {want} B"


# The EP's own votes per htp_performance_mode (ONNX Runtime's QNN EP, SetHtpPowerConfig): the
# core voltage corner they set; "default" places no vote (the arch's nominal clocks).
EP_PERFORMANCE_CORNERS = {
    "burst": "MAX_VOLTAGE_CORNER", "sustained_high_performance": "MAX_VOLTAGE_CORNER",
    "high_performance": "TURBO", "balanced": "NOM_PLUS", "low_balanced": "NOM",
    "high_power_saver": "SVS_PLUS", "power_saver": "SVS", "low_power_saver": "SVS2",
    "extreme_power_saver": "MIN_VOLTAGE_CORNER", "default": None,
}


@pytest.mark.parametrize("mode", list(EP_PERFORMANCE_CORNERS))
def test_htp_performance_mode(mode):
    corner = EP_PERFORMANCE_CORNERS[mode]
    with qnnemu_session(soc_model=SM8550, htp_performance_mode=mode) as (graph, records):
        active = perf.PERF.active(0, 0)
        clocks = perf.current_clocks(0, 0)
        if corner is None:
            assert active is None and clocks == perf.nominal_clocks(73), \
                f"{mode}: no vote, nominal v73 clocks: {active}, {clocks}"
        else:
            assert active is not None, f"{mode}: the EP's power votes reached qnnemu"
            assert clocks.corner == corner, f"{mode}: core corner {clocks.corner}, the EP votes {corner}"
            assert any(m.startswith("setPowerConfig:") for m in _messages(records)), f"{mode}: the vote is logged"
    assert perf.PERF.active(0, 0) is None, f"{mode}: the session's votes went with it"


def test_htp_performance_mode_orders_the_clocks():
    core = {}
    for mode in ("burst", "high_performance", "balanced", "power_saver", "low_power_saver"):
        with qnnemu_session(soc_model=SM8550, htp_performance_mode=mode):
            core[mode] = perf.current_clocks(0, 0).core_mhz
    values = list(core.values())
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values), \
        f"faster modes give higher core clocks: {core}"


@pytest.mark.parametrize("fp16", [None, "0", "1"])
def test_enable_htp_fp16_precision(fp16):
    options = {"soc_model": SM8550}  # the EP refuses fp16 precision without a soc_model
    if fp16 is not None:
        options["enable_htp_fp16_precision"] = fp16
    with qnnemu_session(**options) as (graph, records):
        htp = graph.configs.get("htp", {})
        precision = htp.get("QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION", {}).get("precision")
        if fp16 == "1":
            assert precision == Q.QNN_PRECISION_FLOAT16, f"{options}: PRECISION config {precision}"
            assert graph_settings(graph).precision_fp16, f"{options}: the graph runs with FLOAT16 precision"
        else:
            assert precision in (None, Q.QNN_PRECISION_FLOAT32), f"{options}: PRECISION config {precision}"
            assert not graph_settings(graph).precision_fp16, f"{options}: no FLOAT16 precision"


def test_enable_htp_fp16_precision_needs_soc_model():
    """The EP itself refuses fp16 precision without soc_model (before any backend call)."""
    with pytest.raises(Exception, match="soc_model"):
        qort.session(MODEL, provider_options={"enable_htp_fp16_precision": "1"})


@pytest.mark.parametrize("mode", [None, "1", "2", "3"])
def test_htp_graph_finalization_optimization_mode(mode):
    options = {"soc_model": SM8550}
    if mode is not None:
        options["htp_graph_finalization_optimization_mode"] = mode
    with qnnemu_session(**options) as (graph, records):
        flag = graph.configs.get("htp_optimization", {}).get("FINALIZE_OPTIMIZATION_FLAG")
        level = graph_settings(graph).optimization_level
        if mode is None:
            assert flag is None and level == DEFAULT_OPTIMIZATION_LEVEL, \
                f"no option: no OPTIMIZATION config ({flag}), level {level}"
        else:
            assert flag == float(mode), f"{options}: OPTIMIZATION FINALIZE_OPTIMIZATION_FLAG {flag}"
            assert level == int(mode), f"{options}: the graph is finalized at level {level}"


# ---------------------------------------------------------------------------------------------
# the same values on the vendor's backend
# ---------------------------------------------------------------------------------------------

VENDOR_OPTION_SETS = [
    {"soc_model": str(SM8550)}, {"soc_model": str(SM8650)}, {"htp_arch": "73"}, {"htp_arch": "75"},
    {"soc_model": str(SM8550), "vtcm_mb": "2"}, {"soc_model": str(SM8550), "htp_performance_mode": "burst"},
    {"soc_model": str(SM8550), "htp_performance_mode": "extreme_power_saver"},
    {"soc_model": str(SM8550), "enable_htp_fp16_precision": "1"},
    {"soc_model": str(SM8550), "htp_graph_finalization_optimization_mode": "3"},
]

VENDOR_SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, onnxruntime as ort
    from qnnemu.onnxruntime import qnn_device
    model, feeds, library, sets = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    x = np.load(feeds)
    dev = qnn_device()
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    out = []
    for options in sets:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices([dev], {"backend_path": library, **options})
        try:
            sess = ort.InferenceSession(model, so)
            got = sess.run(None, {"x": x})[0]
            out.append(float(np.max(np.abs(got - want))))
        except Exception as e:
            out.append(str(e).splitlines()[0])
    print(json.dumps(out))
""")


def test_vendor_accepts_the_same_options(tmp_path):
    library = vendor_library()
    if library is None:
        pytest.skip("the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed")
    model, feeds = tmp_path / "conv_relu.onnx", tmp_path / "x.npy"
    model.write_bytes(MODEL)
    np.save(feeds, FEEDS["x"])
    r = subprocess.run([sys.executable, "-c", VENDOR_SCRIPT, str(model), str(feeds), str(library),
                        json.dumps(VENDOR_OPTION_SETS)], capture_output=True, text=True, timeout=600,
                       env=vendor_env())
    assert r.returncode == 0, f"vendor subprocess: exit {r.returncode}: {r.stderr[-2000:]}"
    results = json.loads(r.stdout.strip().splitlines()[-1])
    for options, result in zip(VENDOR_OPTION_SETS, results):
        assert isinstance(result, float), f"the vendor refuses {options}: {result}"
        assert result <= 5e-2, f"the vendor runs {options} with max |diff| {result:.3g} from the CPU EP"
