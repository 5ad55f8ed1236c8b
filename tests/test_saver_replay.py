"""Replays QNN API traces recorded by the vendor's QNN Saver on the vendor backend and on ours.

Recipe:
1. build small float ONNX models here with the ``onnx`` helper API;
2. run each once with ONNX Runtime's QNN execution provider (the onnxruntime_qnn plugin) with
   provider options ``backend_path=<vendor libQnnHtp.so>`` and ``qnn_saver_path=<vendor
   libQnnSaver.so>`` and ``session.disable_cpu_ep_fallback=1`` (so every node goes to QNN).
   The EP then talks to the Saver, which records every QNN call into ``saver_output/
   saver_output.c`` plus ``saver_output/params.bin`` (weights and inputs) under the working
   directory. This runs in a subprocess whose working directory is under pytest's tmp_path;
3. compile ``saver_output.c`` unmodified against our include/QNN. It is a complete program
   (its own ``main``) that calls ``QnnInterface_getProviders`` directly, so it is linked
   against the backend library itself (``cc saver_output.c <backend>.so -Wl,-rpath,<dir>``);
4. run it in the directory holding ``params.bin`` (it opens it from the working directory);
   it prints ``ERROR! Line N ...`` for every failing QNN call and returns the error code.

The recorded trace itself runs on the Saver, which computes nothing, so only the replay's
success is checked, not numbers.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from vendor import our_library, vendor_dir, vendor_env

import qnnemu

pytest.importorskip("onnx", reason="the onnx package (test extra) is needed to build models")
pytest.importorskip("onnxruntime", reason="onnxruntime is needed to record a Saver trace")
if vendor_dir() is None or not (vendor_dir() / "libQnnSaver.so").is_file():
    pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so/libQnnSaver.so) not installed",
                allow_module_level=True)
if shutil.which("cc") is None:
    pytest.skip("a C compiler (cc) is needed to build the replay", allow_module_level=True)

from helpers.float_graphs import SMALL_FLOAT_GRAPHS
from onnx import helper

# The recording step, run as a subprocess in the directory that receives saver_output/.
RECORD = textwrap.dedent("""
    import sys, numpy as np, onnxruntime as ort
    from qnnemu.onnxruntime import qnn_device
    model, backend, saver = sys.argv[1:4]
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices([qnn_device()], {"backend_path": backend, "qnn_saver_path": saver})
    sess = ort.InferenceSession(model, so)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    sess.run(None, feeds)
    print("recorded")
""")


def _env() -> dict[str, str]:
    # The vendor backend needs its directory on LD_LIBRARY_PATH; our embedded-Python backend
    # needs to import the qnnemu under test.
    env = vendor_env()
    pkg_parent = str(Path(qnnemu.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture(scope="module", params=sorted(SMALL_FLOAT_GRAPHS))
def recording(request, tmp_path_factory) -> Path:
    """Directory holding saver_output.c and params.bin for one model."""
    import onnx
    work = tmp_path_factory.mktemp(f"saver_{request.param}")
    model = helper.make_model(SMALL_FLOAT_GRAPHS[request.param](), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(work / "model.onnx"))
    (work / "record.py").write_text(RECORD)
    vd = vendor_dir()
    proc = subprocess.run([sys.executable, "record.py", "model.onnx", str(vd / "libQnnHtp.so"),
                           str(vd / "libQnnSaver.so")], cwd=work, env=_env(),
                          capture_output=True, text=True, timeout=600)
    out = work / "saver_output"
    assert proc.returncode == 0 and "recorded" in proc.stdout, \
        f"ONNX Runtime QNN EP session with the Saver ran: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    assert (out / "saver_output.c").is_file() and (out / "params.bin").is_file(), \
        "the Saver wrote saver_output/saver_output.c and params.bin"
    return out


def replay(recording: Path, backend: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """Compiles the recorded program against include/QNN and the backend, runs it."""
    exe = tmp_path / "replay"
    # -w: the generated code has printf format mismatches; it is compiled unmodified.
    build = subprocess.run(
        ["cc", "-O0", "-w", f"-I{qnnemu.include_dir()}/QNN", str(recording / "saver_output.c"),
         "-o", str(exe), str(backend), f"-Wl,-rpath,{backend.parent}"],
        capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"saver_output.c compiles against include/QNN: {build.stderr[-4000:]}"
    return subprocess.run([str(exe), "--logging", "error"], cwd=recording, env=_env(),
                          capture_output=True, text=True, timeout=600)


def check(proc: subprocess.CompletedProcess, what: str) -> None:
    lines = proc.stdout.splitlines()
    detail = f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert not [line for line in lines if line.startswith("ERROR!")], \
        f"{what}: no 'ERROR!' lines from the replay: {detail}"
    # The generated VALIDATE macro treats QNN_COMMON_ERROR_NOT_SUPPORTED as a warning and exits
    # 0, so a backend answering NOT_SUPPORTED to graphFinalize would pass unnoticed otherwise.
    assert not [line for line in lines if line.startswith("WARNING!")], \
        f"{what}: no call of the replay answered NOT_SUPPORTED ('WARNING!' lines): {detail}"
    assert proc.returncode == 0, f"{what}: replay exits 0: {detail}"


def test_saver_trace_is_complete(recording):
    text = (recording / "saver_output.c").read_text()
    for call in ("backendCreate", "contextCreate", "graphCreate", "tensorCreateGraphTensor",
                 "graphAddNode", "graphFinalize", "graphExecute", "contextFree"):
        assert re.search(rf"interface\.{call}\(", text), f"the Saver trace calls {call}"


def test_replay_on_vendor_backend(recording, tmp_path):
    check(replay(recording, vendor_dir() / "libQnnHtp.so", tmp_path), "vendor libQnnHtp.so")


def test_replay_on_our_backend(recording, tmp_path):
    lib = our_library()
    if lib is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    check(replay(recording, lib, tmp_path), "our libQnnHtpEmu.so")
