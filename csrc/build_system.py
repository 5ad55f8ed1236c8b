"""Build of libQnnSystem.so (System/QnnSystemInterface.h: QnnSystemInterface_getProviders).

The System library ONNX Runtime's QNN EP loads from the backend's directory (profiling with the
system profile API, EPContext models).  As the backend (csrc/build_backend.py), two shared
objects in qnnemu/lib:
- ``libQnnSystem.so``, the loader: csrc/loader.c built with -DQNNEMU_LOADER_SYSTEM (plain C,
  exports ``QnnSystemInterface_getProviders``; ``build_backend.loader_kwargs(system=True)``);
- ``_qnnemu_system_abi.so``, the cffi module: every entry of
  QnnSystemInterface_ImplementationV1_14_t as an ``extern "Python+C"`` function, implemented in
  qnnemu/abi/system_entry.py, and csrc/system_shim.c (the shim body csrc/abi_shim.h), with a
  generated header (``qnnemu_system_entries.h``) holding the entry prototypes and the table
  initializer, derived from our System/QnnSystemInterface.h, so a new table entry is one more
  Python function.

``make_ffi(build_dir)`` returns the FFI and the extension keyword arguments; both are built by
the helper the two ABI libraries share, csrc/build_abi.py (``SYSTEM_MODULE`` says what differs).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import build_abi  # noqa: E402

from qnnemu.headers import SYSTEM_TABLE_TAG  # noqa: E402

SYSTEM_MODULE = build_abi.AbiModule(
    module_name="_qnnemu_system_abi",
    entry_prefix="qnnemu_sys_",
    cdef_roots=("System/QnnSystemInterface.h",),
    table_header="System/QnnSystemInterface.h",
    table_tag=SYSTEM_TABLE_TAG,
    entries_header="qnnemu_system_entries.h",
    macro_prefix="QNNEMU_SYS",
    header_includes=("System/QnnSystemInterface.h",),
    init_symbol="qnnemu_sys_embed_init",
    init_module="qnnemu.abi.system_entry",
    log_emit="qnnemu_sys_log_emit",
    shim="system_shim.c",
    module_map="system_module.map",
    preamble_includes=("System/QnnSystemInterface.h",),
)
MODULE_NAME = SYSTEM_MODULE.module_name
ENTRY_PREFIX = SYSTEM_MODULE.entry_prefix
LIB_NAME = "libQnnSystem.so"
INNER_MODULE_FILE = MODULE_NAME + ".so"


def system_entries() -> list[tuple[str, str, str]]:
    """(field name, function-pointer type, C signature text) of the System table, in order."""
    return build_abi.table_entries(SYSTEM_MODULE)


def make_ffi(build_dir: str | os.PathLike):
    """The cffi module _qnnemu_system_abi.so: the FFI and its extension keyword arguments."""
    return build_abi.make_ffi(SYSTEM_MODULE, build_dir)
