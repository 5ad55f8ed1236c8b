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
    (libHtpPrepare.so, ...) by name, so their directory must be on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    d = vendor_dir()
    if d is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(d), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def our_library() -> Path | None:
    """Our libQnnHtpEmu.so, or None when it has not been built."""
    import qnnemu
    p = Path(qnnemu.backend_library_path())
    return p if p.is_file() else None
