"""ONNX Runtime's QNN execution provider on libQnnHtpEmu.so: the library loaded by ORT inside a
Python process, every node on our backend (CPU fallback disabled), numbers vs ORT's CPU EP.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qnnemu

ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is not installed")
pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")
onnx = pytest.importorskip("onnx", reason="onnx (test extra) is not installed")

# the same small float models as the Saver replay
from helpers.float_graphs import SMALL_FLOAT_GRAPHS  # noqa: E402
from helpers.ort import qnn_ep_device  # noqa: E402
from onnx import helper  # noqa: E402

if not Path(qnnemu.backend_library_path()).exists():
    pytest.skip("libQnnHtpEmu.so is not built", allow_module_level=True)


@pytest.fixture(scope="module")
def qnn_device():
    return qnn_ep_device()


@pytest.mark.parametrize("name", sorted(SMALL_FLOAT_GRAPHS))
def test_qnn_ep_runs_every_node_on_qnnemu(tmp_path, qnn_device, name):
    model = helper.make_model(SMALL_FLOAT_GRAPHS[name](), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([qnn_device], {"backend_path": qnnemu.backend_library_path()})
    sess = ort.InferenceSession(path, so)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    got = sess.run(None, feeds)[0]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    err = float(np.max(np.abs(got - want)))
    assert err <= 1e-5 * max(1.0, float(np.max(np.abs(want)))), \
        f"{name}: QNN EP on qnnemu vs ORT CPU EP max abs difference {err:.3g}"
