"""Builds the C sample (samples/conv_relu_fc.c) with its Makefile and runs it.

The sample is a plain C11 QNN application; it exits non-zero on any QNN error, on a numeric
mismatch with its C reference, or when the backend accepts an unfinalized execute or an
unknown op type, and prints ``max relative error: <value>``.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import qnnemu
from vendor import our_library, vendor_dir

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
pytestmark = [
    pytest.mark.skipif(not (SAMPLES / "Makefile").is_file(), reason="samples/ not in this tree"),
    pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                       reason="make and a C compiler are needed"),
]
ERROR_RE = re.compile(r"max relative error: (\S+) \(tolerance (\S+)\)")


def make(target: str, build: Path) -> subprocess.CompletedProcess:
    # The Makefile asks Python for the header and library paths: use this interpreter, able
    # to import the qnnemu being tested (installed or from the source tree).
    env = dict(os.environ)
    pkg_parent = str(Path(qnnemu.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH", "")) if p)
    return subprocess.run(["make", "-C", str(SAMPLES), target, f"PYTHON={sys.executable}",
                           f"BUILD={build}"], env=env, capture_output=True, text=True,
                          timeout=600)


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


def test_sample_builds_warning_free(tmp_path):
    proc = make("all", tmp_path)
    assert proc.returncode == 0, f"sample compiles with -std=c11 -Wall -Wextra -Werror: {describe(proc)}"
    assert (tmp_path / "conv_relu_fc").is_file(), "make all produced build/conv_relu_fc"


def check_run(proc, expected_runs: list[float]):
    assert proc.returncode == 0, f"sample run exits 0: {describe(proc)}"
    found = ERROR_RE.findall(proc.stdout)
    assert len(found) == len(expected_runs), \
        f"one 'max relative error' line per run ({len(expected_runs)}): {describe(proc)}"
    for (err, _), tol in zip(found, expected_runs):
        assert float(err) <= tol, f"sample's max relative error {err} <= {tol}"
    assert "ACCEPTED" not in proc.stdout, "the backend refused execute-before-finalize and NoSuchOp"
    assert proc.stdout.count("refused") >= 2, "the sample printed the backend's refusals"


def test_sample_on_our_backend(tmp_path):
    if our_library() is None:
        pytest.skip("our libQnnHtpEmu.so is not built (qnnemu.backend_library_path())")
    check_run(make("run", tmp_path), [1e-4])


def test_sample_on_vendor_backend(tmp_path):
    if vendor_dir() is None:
        pytest.skip("onnxruntime_qnn (vendor libQnnHtp.so) not installed")
    # run-vendor runs the sample twice: float32 (tolerance 1e-4), then HTP fp16 (1e-2).
    check_run(make("run-vendor", tmp_path), [1e-4, 1e-2])
