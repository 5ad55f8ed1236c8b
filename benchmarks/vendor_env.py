"""Where the vendor's QNN libraries are (the onnxruntime-qnn package) and the environment a
benchmark worker process runs in: this checkout first on PYTHONPATH; for the vendor's backend,
its directory on LD_LIBRARY_PATH (libQnnHtp.so dlopens libHtpPrepare.so & co. by name).
Shared by bench_models.py and onnx_node_suite.py."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def vendor_dir() -> Path | None:
    """The onnxruntime-qnn package directory holding libQnnHtp.so, or None."""
    try:
        import onnxruntime_qnn
    except ImportError:
        return None
    d = Path(onnxruntime_qnn.__file__).resolve().parent
    return d if (d / "libQnnHtp.so").is_file() else None


def worker_env(backend: str) -> dict[str, str]:
    """os.environ for a worker running ``backend`` ("vendor", "qnnemu", "cpu")."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    d = vendor_dir()
    if backend == "vendor" and d is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(d), env.get("LD_LIBRARY_PATH", "")) if p)
    return env
