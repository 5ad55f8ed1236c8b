"""Static checks in the test suite (issue 12, "Static checks in CI"): ruff (lint, the rules and
ignores configured in pyproject.toml's [tool.ruff]) and mypy (pyproject.toml's [tool.mypy]:
checked on the base modules, spec, htp, core and abi; gradual on ops, client and tools).

Each check runs the tool the way a developer would from the repository root and fails with the
tool's own output.  A tool that is not installed skips its test (``pip install -e .[test]``
installs both).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# ruff is clean on all of these: every Python path of the repository.
RUFF_CLEAN = ["qnnemu/errors.py", "qnnemu/location.py", "qnnemu/rules.py", "qnnemu/headers.py",
              "qnnemu/_version.py", "qnnemu/spec", "qnnemu/htp", "qnnemu/lpai", "qnnemu/core", "qnnemu/abi",
              "qnnemu/__init__.py", "qnnemu/onnxruntime.py", "qnnemu/system_client.py", "qnnemu/ops",
              "qnnemu/client", "qnnemu/tools", "benchmarks", "tools", "setup.py", "csrc", "examples",
              "tests"]


def _tool(module: str) -> list[str]:
    """The command running ``module`` (its console script, else ``python -m``), or a skip."""
    if importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module]
    exe = shutil.which(module)
    if exe is None:
        pytest.skip(f"{module} is not installed (pip install -e .[test])")
    return [exe]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _ruff(paths: list[str]) -> subprocess.CompletedProcess:
    return _run([*_tool("ruff"), "check", "--no-cache", "--output-format", "concise", *paths])


def test_ruff_clean_layers():
    r = _ruff(RUFF_CLEAN)
    assert r.returncode == 0, f"ruff check {' '.join(RUFF_CLEAN)} found problems:\n{r.stdout}{r.stderr}"


def test_ruff_configuration_covers_the_repository():
    """Every Python path of the repository is checked by the ruff test (a new top-level module or
    directory must be added to RUFF_CLEAN)."""
    listed = {Path(p) for p in RUFF_CLEAN}
    r = _run([*_tool("ruff"), "check", "--no-cache", "--show-files", "."])
    assert r.returncode == 0, f"ruff --show-files failed:\n{r.stdout}{r.stderr}"
    files = [Path(line.strip()).resolve().relative_to(ROOT) for line in r.stdout.splitlines()
             if line.strip().endswith((".py", ".pyi"))]
    assert files, "ruff --show-files listed no file: the configuration excludes everything"
    unlisted = sorted(str(f) for f in files if not any(f == p or p in f.parents for p in listed))
    assert not unlisted, f"files ruff checks that RUFF_CLEAN does not name: {unlisted}"


def test_mypy_clean():
    r = _run([*_tool("mypy"), "--config-file", str(ROOT / "pyproject.toml")])
    assert r.returncode == 0, f"mypy (pyproject.toml [tool.mypy]) found problems:\n{r.stdout}{r.stderr}"
