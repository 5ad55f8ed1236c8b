"""The bit-identity test of the C execution engine (issue 13): the test modules that execute
graphs -- op semantics, numerics, quantization, the differential and vendor-recorded suites,
ONNX Runtime models and onnx's node suite -- run again with ``QNNEMU_ENGINE=check``, where every
execute runs the C program and the Python plan and fails at the first value whose bytes differ
(float32, float16 emulation and every fixed-point pipeline alike; qnnemu/core/engine).

The ``ci`` hypothesis profile runs a fixed sample of those modules (the node suite on a sample
of its cases); ``dev`` runs every test module but this one and the static checks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qnnemu.ops import _fast

HERE = Path(__file__).resolve().parent
SAMPLE = ["test_engine.py", "test_plan.py", "test_graph_execute.py", "test_numerics.py", "test_htp_fold.py",
          "test_htp_batch.py", "test_htp_kvcache.py", "test_context_binary.py", "test_differential.py",
          "test_quant_vendor.py", "test_ops_vendor_accepts.py", "test_onnxruntime_models.py",
          "test_onnx_node_suite.py", "test_weights_packing.py", "test_sections.py"]
NOT_REPEATED = {"test_engine_identity.py", "test_static_checks.py", "test_test_hygiene.py", "test_layers.py",
                "test_vocabulary.py", "test_docs_links.py", "test_rule_registry.py"}


def modules() -> list[str]:
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "dev":
        return sorted(p.name for p in HERE.glob("test_*.py") if p.name not in NOT_REPEATED)
    # the engine families' own modules are always in
    return sorted(set(SAMPLE) | {p.name for p in HERE.glob("test_engine_*.py")} - NOT_REPEATED)


@pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")
def test_graph_suites_are_bit_identical_on_the_c_engine_and_the_python_plan():
    env = dict(os.environ, QNNEMU_ENGINE="check")
    env.setdefault("QNNEMU_NODE_SUITE_CASES", "300")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *modules()]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=1800, check=False)
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
    assert proc.returncode == 0, f"QNNEMU_ENGINE=check over {len(modules())} test modules:\n{tail}"
