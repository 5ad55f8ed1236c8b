"""qnnemu: an emulator of the QNN HTP backend (libQnnHtpEmu.so) for x86-64 Linux.

Python entry points:
- ``include_dir()``: the directory holding ``QNN/`` headers, for ``-I``;
- ``backend_library_path()``: the path of ``libQnnHtpEmu.so``;
- ``system_library_path()``: where ``libQnnSystem.so`` lives (next to the backend);
- ``qnnemu.client``: a small Pythonic API that drives any QNN backend library through its C ABI.
"""
from __future__ import annotations

from pathlib import Path

from ._version import __version__
from .headers import include_dir

_LIB_DIR = Path(__file__).resolve().parent / "lib"


def library_dir() -> str:
    """Directory holding libQnnHtpEmu.so (and libQnnSystem.so), as ONNX Runtime expects."""
    return str(_LIB_DIR)


def backend_library_path() -> str:
    return str(_LIB_DIR / "libQnnHtpEmu.so")


def system_library_path() -> str:
    """Our System library's location: beside the backend, under the name clients look for."""
    return str(_LIB_DIR / "libQnnSystem.so")


__all__ = ["__version__", "include_dir", "library_dir", "backend_library_path",
           "system_library_path"]
