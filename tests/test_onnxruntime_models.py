"""Whole models (tests/models.py) through ONNX Runtime's QNN execution provider on
libQnnHtpEmu.so, with ``session.disable_cpu_ep_fallback=1``: every node must run on our backend.

- float models: outputs within 1e-4 of ORT's CPU EP, relative to the output's max magnitude;
- QDQ models (quantize_static, 8/16-bit activations, 8-bit weights, per-tensor/per-channel):
  compared in LSBs of the output's scale with the CPU EP's QDQ result and, for the small models,
  with the vendor's libQnnHtp.so (same provider options on both backends). The assertion: ours
  is at least as close to the vendor's as the CPU EP's QDQ result is (max |diff| in LSBs and the
  fraction of elements within 1 LSB). For the ResNet-18 cases and without the vendor library,
  ours must be within ``CPU_BOUND`` of the CPU EP's result.

Each run prints a line of metrics (``pytest -rP`` shows them). When our backend refuses a model,
the failure message carries ONNX Runtime's error and our backend's log (the ``qnnemu`` Python
logger, captured during the session), which name the missing op, parameter or dtype.

The ResNet-18-class model is marked ``slow`` (deselect with ``-m "not slow"``); it is compared
with the CPU EP only (the vendor needs seconds per inference on it: benchmarks/bench_resnet18.py).
"""
from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")

import models  # noqa: E402
from helpers.ort import pin_our_library, qnn_ep_device  # noqa: E402
from vendor import vendor_env, vendor_library  # noqa: E402

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)

# The same HTP provider options on both backends: float graphs in float32 (the EP would ask for
# fp16 precision otherwise), graph-input Quantize / output Dequantize inside the QNN graph (by
# default the EP leaves them to the CPU EP, which disable_cpu_ep_fallback forbids).
PROVIDER_OPTIONS = {"enable_htp_fp16_precision": "0", "offload_graph_io_quantization": "0"}

FLOAT_RTOL = 1e-4
# "Ours at least as close to the vendor as the CPU EP is": allowed excess in max |diff| (LSBs)
# and shortfall in the fraction within 1 LSB. Zero: the emulator aims at the vendor's numerics.
VENDOR_SLACK_LSB, VENDOR_SLACK_WITHIN1 = 0.0, 0.0
# Ours vs the CPU EP's QDQ result, in output LSBs: (max |diff|, minimum fraction within 1 LSB),
# for the ResNet-18 QDQ cases and when the vendor library is absent. The vendor's own distance
# to the CPU EP stays inside these (measured: 8-bit outputs <= 10 LSB and >= 40% within 1 LSB;
# 16-bit outputs up to 2813 LSB on ResNet-18 a16w8, where the CPU EP computes in float between
# Q/DQ pairs and HTP does not).
CPU_BOUND = {8: (16.0, 0.3), 16: (4096.0, 0.0)}

# The Erf-based Gelu has no QDQ case: the QNN EP cannot fuse the Q/DQ-separated Erf pattern
# into Gelu and HTP has no quantized Erf, so the vendor's backend refuses it as well.
QDQ_SMALL = [m for m in models.SMALL_MODELS if m != "transformer_gelu_erf"]
QDQ_CASES = [pytest.param(m, c, id=f"{m}-{c}") for m in QDQ_SMALL for c in models.QDQ_CONFIGS]
QDQ_CASES += [pytest.param(m, c, id=f"{m}-{c}", marks=pytest.mark.slow)
              for m in models.BIG_MODELS for c in ("a8w8", "a16w8s_pc")]
FLOAT_CASES = [pytest.param(m, id=m) for m in models.SMALL_MODELS]
FLOAT_CASES += [pytest.param(m, id=m, marks=pytest.mark.slow) for m in models.BIG_MODELS]


# ---------------------------------------------------------------------------------------------
# fixtures: the QNN EP device, models built once per test session
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qnn_device():
    # Our library stays loaded (pin_our_library says why): a reload after the vendor's must not
    # take the whole test run down; test_backend_library_reloaded_after_another_backend checks
    # that case in a subprocess.
    pin_our_library()
    return qnn_ep_device()


class ModelCache:
    """Float models and their QDQ versions, written once per test session."""

    def __init__(self, root: Path):
        self.root = root
        self._float: dict[str, tuple[Path, onnx.ModelProto]] = {}
        self._qdq: dict[tuple[str, str], Path] = {}

    def float(self, name: str) -> tuple[Path, onnx.ModelProto]:
        if name not in self._float:
            m = models.MODELS[name]()
            path = self.root / f"{name}.onnx"
            onnx.save(m, path)
            self._float[name] = (path, m)
        return self._float[name]

    def qdq(self, name: str, config: str) -> Path:
        key = (name, config)
        if key not in self._qdq:
            _, m = self.float(name)
            self._qdq[key] = models.quantize(m, self.root / f"{name}.{config}.onnx",
                                             models.QDQ_CONFIGS[config])
        return self._qdq[key]


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> ModelCache:
    return ModelCache(tmp_path_factory.mktemp("onnx_models"))


# ---------------------------------------------------------------------------------------------
# sessions, our log
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def qnnemu_log():
    """Collects what our backend logs (the ``qnnemu`` Python logger) meanwhile."""
    records: list[logging.LogRecord] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("qnnemu")
    handler, level, propagate = _Collect(logging.DEBUG), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # summarised by describe_log, not dumped by pytest's log capture
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def describe_log(records: list[logging.LogRecord], limit: int = 12) -> str:
    """Our backend's errors, warnings and rule-id messages (validation refusals are logged at
    INFO: ORT asks backendValidateOpConfig about every node), deduplicated, with the last
    internal traceback."""
    seen: dict[str, int] = {}
    for r in records:
        if r.levelno >= logging.WARNING or r.getMessage().startswith("[QNNEMU-"):
            msg = r.getMessage()
            seen[msg] = seen.get(msg, 0) + 1
    lines = [f"  {msg}" + (f"  (x{n})" if n > 1 else "") for msg, n in list(seen.items())[:limit]]
    if len(seen) > limit:
        lines.append(f"  ... {len(seen) - limit} more distinct messages")
    tracebacks = [r.getMessage() for r in records
                  if r.levelno < logging.WARNING and r.getMessage().startswith("Traceback")]
    if tracebacks:
        lines.append("  last internal traceback:\n" + "\n".join(
            "    " + ln for ln in tracebacks[-1].strip().splitlines()[-8:]))
    return "\n".join(lines) if lines else "  (our backend logged no warning or error)"


def run_qnn(path: Path, backend: str, device, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # ORT errors only; the messages below carry our log
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([device], {"backend_path": backend, **PROVIDER_OPTIONS})
    sess = ort.InferenceSession(str(path), so)
    sess.disable_fallback()  # a failing run raises instead of retrying on the CPU EP
    return sess.run(None, feeds)


def run_ours(path: Path, device, feeds, what: str) -> list[np.ndarray]:
    with qnnemu_log() as records:
        try:
            return run_qnn(path, qnnemu.backend_library_path(), device, feeds)
        except Exception as e:  # reported with our log
            error = str(e).strip()
    pytest.fail(f"{what}: the QNN EP on qnnemu failed: {error[:600]}\n"
                f"qnnemu log:\n{describe_log(records)}", pytrace=False)


def run_cpu(path: Path, feeds) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


# ---------------------------------------------------------------------------------------------
# float models
# ---------------------------------------------------------------------------------------------

# Compared with the CPU EP's float32: our exact float32 reference runs (the default device's
# LayerNorm computes in float16, as the HTP's; tests/test_numerics_vendor.py compares that math
# with the vendor's).
@pytest.mark.float_math("float32")
@pytest.mark.soc("SM8550")   # the HTP has no float Gelu on v68 (docs/op-support.md)
@pytest.mark.parametrize("name", FLOAT_CASES)
def test_float_model_matches_cpu_ep(model_cache, qnn_device, name):
    path, model = model_cache.float(name)
    feeds = models.random_feeds(model)
    want = run_cpu(path, feeds)
    got = run_ours(path, qnn_device, feeds, name)
    for out, g, w in zip(model.graph.output, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (out.name, g.shape, w.shape)
        err = float(np.max(np.abs(g.astype(np.float64) - w)))
        bound = FLOAT_RTOL * float(np.max(np.abs(w)))
        print(f"{name} {out.name}: max |ours - cpu_ep| = {err:.3g} (max |cpu_ep| {np.max(np.abs(w)):.3g})")
        assert err <= bound, (f"{name} output {out.name}: max |ours - CPU EP| {err:.3g} > "
                              f"{FLOAT_RTOL:g} x max|CPU EP| = {bound:.3g}")


# ---------------------------------------------------------------------------------------------
# QDQ models
# ---------------------------------------------------------------------------------------------

@dataclass
class LsbDiff:
    max_lsb: float    # max |a - b| / scale
    within1: float    # fraction of elements with |a - b| <= 1 LSB

    def __str__(self) -> str:
        return f"max {self.max_lsb:5.0f} LSB, {100 * self.within1:6.2f}% within 1 LSB"


def lsb_diff(a: np.ndarray, b: np.ndarray, scale: float) -> LsbDiff:
    # Both are (q - zp) * scale rounded to float32: their difference is a whole number of LSBs
    # up to float rounding, so count in whole LSBs.
    d = np.rint(np.abs(a.astype(np.float64) - b.astype(np.float64)) / scale)
    return LsbDiff(float(d.max()), float(np.mean(d <= 1)))


@pytest.mark.parametrize("name,config", QDQ_CASES)
def test_qdq_model_vs_cpu_ep_and_vendor(model_cache, qnn_device, name, config):
    path = model_cache.qdq(name, config)
    qmodel = onnx.load(str(path))
    scales = models.output_scales(qmodel)
    bits = 16 if "16" in models.QDQ_CONFIGS[config].activation_type else 8
    feeds = models.random_feeds(qmodel)
    cpu = run_cpu(path, feeds)
    vendor = vendor_library() if name in models.SMALL_MODELS else None
    ref = run_qnn(path, str(vendor), qnn_device, feeds) if vendor is not None else None
    ours = run_ours(path, qnn_device, feeds, f"{name}-{config}")

    problems = []
    for i, out in enumerate(qmodel.graph.output):
        assert out.name in scales, f"{name}-{config}: output {out.name} is not produced by a DequantizeLinear"
        s = scales[out.name]
        o_c = lsb_diff(ours[i], cpu[i], s)
        line = f"{name}-{config} {out.name} (scale {s:.3g}): ours~cpu {o_c}"
        if ref is not None:
            o_v, c_v = lsb_diff(ours[i], ref[i], s), lsb_diff(cpu[i], ref[i], s)
            line += f" | ours~vendor {o_v} | cpu~vendor {c_v}"
            if (o_v.max_lsb > c_v.max_lsb + VENDOR_SLACK_LSB
                    or o_v.within1 < c_v.within1 - VENDOR_SLACK_WITHIN1 - 1e-12):
                problems.append(f"{out.name}: ours is farther from the vendor than the CPU EP is: "
                                f"ours~vendor {o_v}; cpu~vendor {c_v}")
        else:
            max_lsb, within1 = CPU_BOUND[bits]
            if o_c.max_lsb > max_lsb or o_c.within1 < within1:
                problems.append(f"{out.name}: ours~cpu {o_c} exceeds max {max_lsb} LSB / "
                                f"{100 * within1}% within 1 LSB")
        print(line)
    assert not problems, f"{name}-{config}:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# our library unloaded and loaded again in one process
# ---------------------------------------------------------------------------------------------

RELOAD = textwrap.dedent("""
    import sys, numpy as np, onnxruntime as ort
    from onnx import TensorProto, helper
    from qnnemu.onnxruntime import qnn_device
    ours, vendor = sys.argv[1:3]
    dev = qnn_device()
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None]
    for backend in (ours, vendor, ours, vendor, ours):
        so = ort.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        so.add_provider_for_devices([dev], {"backend_path": backend})
        sess = ort.InferenceSession(m.SerializeToString(), so)
        assert np.array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0)), backend
        del sess  # the last session on a backend unloads its library
    print("reloaded")
""")


def test_backend_library_reloaded_after_another_backend():
    """ORT dlcloses a backend library with its last session. Loading the vendor's library in
    between makes ours come back at another address; nothing from the first load (e.g. the HTP
    perf infrastructure's function pointers) may be handed out again. Run in a subprocess: the
    failure mode is a segfault in QnnBackendManager::CreateHtpPowerCfgId."""
    vendor = vendor_library()
    if vendor is None:
        pytest.skip("the vendor's libQnnHtp.so is not installed")
    r = subprocess.run([sys.executable, "-c", RELOAD, qnnemu.backend_library_path(), str(vendor)],
                       capture_output=True, text=True, timeout=300, env=vendor_env())
    stderr = "\n".join(ln for ln in r.stderr.splitlines() if "[W:onnxruntime" not in ln)
    how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}"
    assert r.returncode == 0 and "reloaded" in r.stdout, \
        f"ours, vendor, ours, ... sessions in one process: {how}\n" \
        f"stdout: {r.stdout[-2000:]}\nstderr: {stderr[-3000:]}"
