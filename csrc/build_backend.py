"""Build of libQnnHtpEmu.so (QnnInterface.h: QnnInterface_getProviders) and its parts.

The backend is two shared objects in qnnemu/lib:
- ``libQnnHtpEmu.so``, the loader (csrc/loader.c + csrc/embed_python.h): plain C, linked to libc
  only, exporting ``QnnInterface_getProviders``; it finds and starts the interpreter from its own
  location, imports the package and loads
- ``_qnnemu_htp_abi.so``, the cffi embedding module: every entry of
  QnnInterface_ImplementationV2_39_t as an ``extern "Python+C"`` function, implemented in
  qnnemu/abi (installed by qnnemu/abi/entry.py) with ``ffi.def_extern``, and csrc/shim.c (the shim
  body csrc/abi_shim.h), which checks the baked package version and hands out the (padded)
  function table; built by the helper both ABI libraries share, csrc/build_abi.py; its Python
  symbols resolve against the libpython the loader made global, as an extension module's do (no DT_NEEDED on libpython);
- generated headers: ``qnnemu_entries.h`` (the entry prototypes and the table initializer,
  derived from our QnnInterface.h so that no declaration is written twice) and
  ``qnnemu_loader_config.h`` (package version, Python X.Y, libpython's soname: relative facts
  only -- nothing about the build machine is baked into any library).

Every generated header is rewritten only when its text changes and is listed in the extension's
``depends``, with every other input (csrc/ sources, headers and maps, include/QNN, the package
version): a build directory left from an older version is rebuilt, not reused.

``libcdsprpc.so`` (csrc/rpcmem.c, our FastRPC shared-memory library) is not a DT_NEEDED: the
loader dlopens it on the first QnnInterface_getProviders (see csrc/loader.c).
"""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import build_abi  # noqa: E402
from build_abi import build_inputs, portable_compile_args, write_if_changed  # noqa: E402

from qnnemu._version import __version__  # noqa: E402
from qnnemu.headers import INTERFACE_TABLE_TAG, qnn_dir  # noqa: E402

# The LPAI headers the module knows (LPAI/QnnLpaiDevice.h is left out: it defines the same
# struct tag, _QnnDevice_DeviceInfoExtension_t, as HTP/QnnHtpDevice.h).
LPAI_HEADERS = ("LPAI/QnnLpaiCommon.h", "LPAI/QnnLpaiTypes.h", "LPAI/QnnLpaiMem.h", "LPAI/QnnLpaiBackend.h",
                "LPAI/QnnLpaiContext.h", "LPAI/QnnLpaiGraph.h")
LPAI_ENTRY_PREFIX = "qnnemu_lpai_"

HTP_MODULE = build_abi.AbiModule(
    module_name="_qnnemu_htp_abi",
    entry_prefix="qnnemu_abi_",
    cdef_roots=("QnnInterface.h", "QnnOpDef.h", "HTP/QnnHtpCommon.h", "HTP/QnnHtpDevice.h",
                "HTP/QnnHtpGraph.h", "HTP/QnnHtpContext.h", "HTP/QnnHtpPerfInfrastructure.h",
                "HTP/QnnHtpProfile.h", "HTP/QnnHtpMem.h", "HTP/QnnHtpProperty.h") + LPAI_HEADERS,
    table_header="QnnInterface.h",
    table_tag=INTERFACE_TABLE_TAG,
    entries_header="qnnemu_entries.h",
    macro_prefix="QNNEMU",
    header_includes=("QnnInterface.h", "HTP/QnnHtpPerfInfrastructure.h"),
    init_symbol="qnnemu_embed_init",
    init_module="qnnemu.abi.entry",
    log_emit="qnnemu_log_emit",
    shim="shim.c",
    module_map="htp_module.map",
    preamble_includes=("QnnInterface.h", "HTP/QnnHtpCommon.h", "HTP/QnnHtpDevice.h", "HTP/QnnHtpGraph.h",
                       "HTP/QnnHtpContext.h", "HTP/QnnHtpPerfInfrastructure.h", "HTP/QnnHtpProfile.h",
                       "HTP/QnnHtpMem.h", "HTP/QnnHtpProperty.h", "QnnOpDef.h") + LPAI_HEADERS,
    # The HTP performance infrastructure functions handed out by deviceGetInfrastructure.
    extra_tables=(("HTP/QnnHtpDevice.h", "_QnnHtpDevice_PerfInfrastructure_t", "qnnemu_perf_"),),
    # graphExecute's C fast path for graphs compiled entirely to C (csrc/fast_execute.h).
    fronts=(("graphExecute", "qnnemu_fast_graphExecute"),),
    # libQnnLpaiEmu.so's table: the same slots as qnnemu_lpai_<slot> (qnnemu/abi/lpai_api.py),
    # handed out by qnnemu_lpai_providers (csrc/shim.c) to the LPAI loader.
    variant_tables=((LPAI_ENTRY_PREFIX, "QNNEMU_LPAI"),),
    extra_cdef=("int qnnemu_fast_register(uint64_t handle, const int64_t *desc);\n"
                "void qnnemu_fast_clear(void);\n"
                "int qnnemu_fast_count(void);\n"
                # the backend loaders of the process (library layout, qnnemu/abi/library_copies.py)
                "const char *qnnemu_loader_first(void);\n"
                "const char *qnnemu_loader_via(void);\n"),
)
MODULE_NAME = HTP_MODULE.module_name
ENTRY_PREFIX = HTP_MODULE.entry_prefix


def interface_entries() -> list[tuple[str, str, str]]:
    """(field name, function-pointer type, C signature text) of the 75-entry table, in order."""
    return build_abi.table_entries(HTP_MODULE)


def make_ffi(build_dir: str | os.PathLike):
    """The cffi module _qnnemu_htp_abi.so: the FFI and its extension keyword arguments."""
    return build_abi.make_ffi(HTP_MODULE, build_dir)


def libpython_soname() -> str:
    """libpythonX.Y's soname (a build without a shared libpython still names it so)."""
    return f"libpython{sysconfig.get_config_var('LDVERSION')}.so.1.0"


def write_loader_header(build_dir: Path) -> Path:
    """qnnemu_loader_config.h: the relative facts the loaders need (csrc/embed_python.h)."""
    lines = [
        "/* Generated by csrc/build_backend.py; do not edit.  Relative facts only. */",
        "#ifndef QNNEMU_LOADER_CONFIG_H",
        "#define QNNEMU_LOADER_CONFIG_H",
        f'#define QNNEMU_PACKAGE_VERSION "{__version__}"',
        f'#define QNNEMU_PYTHON_VERSION "{sys.version_info.major}.{sys.version_info.minor}"',
        f'#define QNNEMU_LIBPYTHON "{libpython_soname()}"',
        "#endif",
        "",
    ]
    return write_if_changed(Path(build_dir) / "qnnemu_loader_config.h", "\n".join(lines))


RPCMEM_SONAME = "libcdsprpc.so"
RPCMEM_SOURCES = [str(HERE / "rpcmem.c")]
RPCMEM_COMPILE_ARGS = ["-O2", "-fvisibility=hidden", "-Wall"]
RPCMEM_LINK_ARGS = [f"-Wl,-soname,{RPCMEM_SONAME}", "-pthread"]

INNER_MODULE_FILE = MODULE_NAME + ".so"
LOADER_SOURCES = [str(HERE / "loader.c")]


def loader_kwargs(build_dir: str | os.PathLike, system: bool = False, lpai: bool = False) -> dict:
    """Extension arguments of a loader: libQnnHtpEmu.so, libQnnSystem.so when ``system``,
    libQnnLpaiEmu.so when ``lpai`` (the backend's loader asking the same module for the LPAI
    provider)."""
    build_dir = Path(build_dir)
    header = write_loader_header(build_dir)
    exports = HERE / ("system_exports.map" if system else "exports.map")
    return dict(
        sources=LOADER_SOURCES,
        include_dirs=[str(qnn_dir()), str(build_dir), sysconfig.get_paths()["include"]],
        define_macros=[("QNNEMU_LOADER_SYSTEM", "1")] if system else [("QNNEMU_LOADER_LPAI", "1")] if lpai else [],
        # Python.h is included for types and layouts only: every Python function is looked up
        # with dlsym after the loader has loaded libpython itself.
        extra_compile_args=["-O2", "-fvisibility=hidden", "-Wall"] + portable_compile_args(),
        # Only the entry point leaves the library; -z defs proves nothing is left to resolve but
        # libc's (no libpython, no libcdsprpc); nodelete: the interpreter it starts keeps
        # pointers into the cffi module it loads, and a reload must find the same state.
        extra_link_args=[f"-Wl,--version-script={exports}", "-Wl,-z,nodelete", "-Wl,-z,defs"],
        libraries=["dl", "pthread"],
        depends=[str(header)] + build_inputs(),
    )
