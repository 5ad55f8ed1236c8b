"""qnnemu: an emulator of the QNN HTP backend (libQnnHtpEmu.so) for x86-64 Linux.

Python entry points:
- ``include_dir()``: the directory holding ``QNN/`` headers, for ``-I``;
- ``backend_library_path()``: the path of ``libQnnHtpEmu.so``;
- ``lpai_library_path()``: the path of ``libQnnLpaiEmu.so``, the LPAI backend (docs/lpai.md);
- ``system_library_path()``: where ``libQnnSystem.so`` lives (next to the backend);
- ``sdk_root(directory)``: a QNN-SDK-shaped tree (``include/QNN``,
  ``lib/x86_64-linux-clang/libQnnHtp.so`` ...) over this package, for ``QNN_SDK_ROOT`` builds
  (``qnnemu-sdk-root DIR``; :mod:`qnnemu.tools.sdk_root`);
- ``qnnemu.client``: a small Pythonic API that drives any QNN backend library through its C ABI.

The libraries in ``lib/`` find this package and its interpreter from their own location (see
csrc/embed_python.h); ``QNNEMU_PYTHONHOME`` (a venv or a Python installation) and
``QNNEMU_PYTHONPATH`` choose another for copies made elsewhere.
"""
from __future__ import annotations

from pathlib import Path

from ._version import __version__

# The libraries' locations live in the base layer (qnnemu.headers): client and tools import them
# from there, never from this facade, whose sdk_root() imports tools.
from .headers import backend_library_path, include_dir, library_dir, lpai_library_path, system_library_path


def sdk_root(directory, copy: bool = False) -> Path:
    """Lays out ``directory`` as a QNN SDK root over this package (links, or copies); returns it."""
    from .tools.sdk_root import sdk_root as lay_out  # the tools layer, only when asked for
    return lay_out(directory, copy=copy)


__all__ = ["__version__", "include_dir", "library_dir", "backend_library_path",
           "lpai_library_path", "system_library_path", "sdk_root"]
