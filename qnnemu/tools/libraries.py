"""Which QNN libraries a tool loads: ``--backend`` and ``--system_library`` resolved to a path
(qnnemu's own libraries by default, a name looked up in LD_LIBRARY_PATH or the onnxruntime-qnn
package of the vendor's libraries otherwise), as the QNN SDK tools take them.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..headers import backend_library_path, system_library_path
from .reporting import ToolError

_OUR_NAMES = {"qnnemu", "htp-emu", "htpemu", "libQnnHtpEmu.so"}


def vendor_library_dir() -> Path | None:
    """The directory of the vendor's QNN libraries of the onnxruntime-qnn package, if any."""
    try:
        import onnxruntime_qnn
    except ImportError:
        return None
    d = Path(onnxruntime_qnn.__file__).resolve().parent
    return d if (d / "libQnnHtp.so").is_file() else None


def resolve_backend(value: str | None) -> str:
    """``--backend``: a path; or a name: ``qnnemu`` / ``libQnnHtpEmu.so`` (ours, the default),
    else a file name looked up in LD_LIBRARY_PATH, then in the onnxruntime-qnn package
    (``libQnnHtp.so``; ``htp`` is short for it)."""
    if value is None or value in _OUR_NAMES:
        return backend_library_path()
    if os.sep in value or os.path.exists(value):
        if not os.path.isfile(value):
            raise ToolError(f"--backend {value}: no such file")
        return os.path.abspath(value)
    name = "libQnnHtp.so" if value == "htp" else value
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    vendor = vendor_library_dir()
    if vendor is not None:
        dirs.append(str(vendor))
    for d in dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate):
            return candidate
    raise ToolError(f"--backend {value}: not a file, and no {name} in LD_LIBRARY_PATH "
                    f"or the onnxruntime-qnn package")


def resolve_system_library(value: str | None, backend: str | None) -> str:
    """``--system_library``: the given path; else the libQnnSystem.so next to the backend;
    else ours."""
    if value is not None:
        if not os.path.isfile(value):
            raise ToolError(f"--system_library {value}: no such file")
        return os.path.abspath(value)
    if backend is not None:
        beside = os.path.join(os.path.dirname(os.path.abspath(backend)), "libQnnSystem.so")
        if os.path.isfile(beside):
            return beside
    return system_library_path()
