"""A probe script run in fresh processes at the default ISA and with QNNEMU_KERNELS_ISA=avx2
(csrc/kernels.c picks its kernels once per process): the digests it prints, to compare the
AVX-512 and AVX2 kernels' bytes (tests/test_engine_gemm.py, tests/test_kernels_split.py)."""
from __future__ import annotations

import os
import subprocess
import sys


def digests_by_isa(probe: str, what: str, isas=("", "avx2")) -> dict[str, str]:
    """{"avx512": stdout at the default ISA, "avx2": stdout with QNNEMU_KERNELS_ISA=avx2} (and
    "sse", the scalar code, when ``isas`` names it)."""
    digests = {}
    for isa in isas:
        env = dict(os.environ, QNNEMU_KERNELS_ISA=isa)
        run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"the {what} probe ran (ISA {isa or 'default'}): {run.stderr[-2000:]}"
        digests[isa or "avx512"] = run.stdout.strip()
    return digests
