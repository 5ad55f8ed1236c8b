"""Locates the vendor's QNN libraries (shipped in the onnxruntime_qnn wheel) and our own build.

A plain helper module for the tests: nothing here skips or fails by itself, callers decide.
"""
from __future__ import annotations

import os
from pathlib import Path


def vendor_dir() -> Path | None:
    """Directory holding libQnnHtp.so/libQnnSaver.so, or None when onnxruntime_qnn is absent."""
    try:
        import onnxruntime_qnn
    except ImportError:
        return None
    d = Path(onnxruntime_qnn.__file__).resolve().parent
    return d if (d / "libQnnHtp.so").is_file() else None


def vendor_library(name: str = "libQnnHtp.so") -> Path | None:
    d = vendor_dir()
    return d / name if d is not None and (d / name).is_file() else None


def vendor_env() -> dict[str, str]:
    """Environment for a subprocess using the vendor backend: it dlopens its helper libraries
    (libHtpPrepare.so, ...) by name, so their directory must be on LD_LIBRARY_PATH. Python's
    stdout unbuffered: the vendor's library prints log lines on stdout too, and a probe's
    result line must come out when printed, not after those at exit (a plain shell, as in CI,
    does not set PYTHONUNBUFFERED)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    d = vendor_dir()
    if d is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(d), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def vendor_probe(script: str, tmp_path: Path, timeout: int = 600):
    """Runs ``script`` (``python -c``) in a subprocess on the vendor's library -- argv: the tests
    directory, the library's path, the JSON file to write -- and returns what it wrote; skips the
    calling test when onnxruntime_qnn is not installed."""
    import json
    import subprocess
    import sys

    import pytest
    library = vendor_library()
    if library is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    result = tmp_path / "vendor.json"
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).resolve().parent), str(library),
                           str(result)], env=vendor_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0 and result.exists(), f"vendor probe failed: {proc.stderr[-2000:]}"
    return json.loads(result.read_text())


def our_library() -> Path | None:
    """Our libQnnHtpEmu.so, or None when it has not been built."""
    import qnnemu
    p = Path(qnnemu.backend_library_path())
    return p if p.is_file() else None


_VENDOR_BINARY_SCRIPT = """
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
import onnxruntime as ort
import qnnemu.onnxruntime as qort
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
m = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                      opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 10
onnx.save(m, r"{d}/m.onnx")
so = ort.SessionOptions()
so.add_session_config_entry("ep.context_enable", "1")
so.add_session_config_entry("ep.context_embed_mode", "0")
so.add_session_config_entry("ep.context_file_path", r"{d}/m_ctx.onnx")
qort.session(r"{d}/m.onnx", session_options=so, provider_options={{"backend_path": r"{lib}"}})
"""


def vendor_context_binary(directory: Path) -> tuple[bytes | None, str]:
    """A real context binary of the vendor's libQnnHtp.so (one Add graph, dumped by ONNX Runtime's
    QNN EP as an EPContext model in ``directory``, in a subprocess with the vendor's environment);
    (None, why) when the vendor package is absent or the dump failed."""
    import subprocess
    import sys
    lib = vendor_library()
    if lib is None:
        return None, "the vendor's libQnnHtp.so (onnxruntime-qnn) is not installed"
    env = vendor_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _VENDOR_BINARY_SCRIPT.format(d=directory, lib=lib)],
                          env=env, capture_output=True, timeout=300)
    bins = sorted(Path(directory).glob("*.bin"))
    if proc.returncode != 0 or not bins:
        return None, f"could not make a vendor context binary: {proc.stderr.decode()[-400:]}"
    return bins[0].read_bytes(), ""
