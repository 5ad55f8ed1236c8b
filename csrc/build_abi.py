"""The one build helper of the two embedded ABI libraries' cffi modules (QnnInterface.h for
``_qnnemu_htp_abi``, System/QnnSystemInterface.h for ``_qnnemu_system_abi``).

A library is described by an :class:`AbiModule` (csrc/build_backend.py ``HTP_MODULE``,
csrc/build_system.py ``SYSTEM_MODULE``); from it:

- :func:`write_entries_header` generates ``qnnemu_entries.h`` / ``qnnemu_system_entries.h``: the
  ``extern "Python+C"`` entry prototypes and the table initializer, derived from our headers'
  table struct so that no declaration is written twice;
- :func:`make_ffi` builds the cffi FFI (the headers' cdef, the entries, the embedding API and
  init code) and the extension's keyword arguments: the module's shim (csrc/shim.c or
  csrc/system_shim.c, both the body csrc/abi_shim.h), hidden visibility with one export
  (the module map), ``-z nodelete`` (the interpreter keeps pointers into the module: cffi
  callbacks, the perf infrastructure table, the embedded module's state -- a ``dlclose`` must
  not unmap it, a later ``dlopen`` gets the same initialised module back), no libpython.

Every generated header is rewritten only when its text changes and is listed in the extension's
``depends`` with every other input (:func:`build_inputs`): a build directory left from an older
version is rebuilt, not reused.
"""
from __future__ import annotations

import os
import re
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import cffi  # noqa: E402

from qnnemu._version import __version__  # noqa: E402
from qnnemu.headers import cdef as header_cdef, qnn_dir, struct_fields  # noqa: E402


@dataclass(frozen=True)
class AbiModule:
    """What differs between the two embedded libraries' cffi modules."""

    module_name: str            # "_qnnemu_htp_abi"
    entry_prefix: str           # C symbol prefix of the table's entries: "qnnemu_abi_"
    cdef_roots: tuple           # headers whose declarations the FFI knows
    table_header: str           # the header defining the table struct: "QnnInterface.h"
    table_tag: str              # the table struct's tag
    entries_header: str         # generated header name: "qnnemu_entries.h"
    macro_prefix: str           # "QNNEMU" -> QNNEMU_NUM_ENTRIES, QNNEMU_TABLE_INITIALIZER
    header_includes: tuple      # what the generated header includes
    init_symbol: str            # the embedding API's init function
    init_module: str            # "qnnemu.abi.entry": its install(ffi, lib, expected=...)
    log_emit: str               # the shim's QnnLog forwarding helper Python calls
    shim: str                   # "shim.c"
    module_map: str             # "htp_module.map": the one exported symbol
    preamble_includes: tuple    # headers the generated C source includes
    # Functions handed out by an entry rather than table slots: (header, struct tag, prefix).
    extra_tables: tuple = field(default_factory=tuple)
    # Table slots served by a C front that calls the Python entry only when it cannot answer
    # itself: (field name, front symbol) -- graphExecute's fast path (csrc/fast_execute.h).
    fronts: tuple = field(default_factory=tuple)
    # C helpers the shim defines and Python calls (declarations, one per line).
    extra_cdef: str = ""
    # Further tables of the same table struct served by the same module (one more provider on
    # the same Python core): (entry prefix, macro prefix) -> ``extern "Python+C"`` entries
    # <prefix><slot> and ``<macro prefix>_TABLE_INITIALIZER`` (libQnnLpaiEmu.so's table).
    variant_tables: tuple = field(default_factory=tuple)

    def helpers_cdef(self) -> str:
        return (f"void {self.log_emit}(void *callback, QnnLog_Level_t level, uint64_t timestamp, "
                f"const char *message);\n") + self.extra_cdef

    def embed_api(self) -> str:
        return f"int {self.init_symbol}(const char *baked_version, uint32_t *api_version);\n"

    def init_code(self, expected: tuple) -> str:
        package, module = self.init_module.rsplit(".", 1)
        return (f"from {self.module_name} import ffi, lib\n"
                f"from {package} import {module}\n"
                f"{module}.install(ffi, lib, expected={expected!r})\n")


def _function_pointer_types() -> dict[str, tuple[str, str]]:
    """typedef name -> (return type, parameter list) of every function-pointer type."""
    fnptr = {}
    for path in qnn_dir().rglob("*.h"):
        for m in re.finditer(r"^typedef (.+?)\(\*(\w+)\)\((.*)\);$", path.read_text(), re.M):
            fnptr[m.group(2)] = (m.group(1).strip(), m.group(3))
    return fnptr


def entries(header: str, struct: str, prefix: str) -> list[tuple[str, str, str]]:
    """(field name, function-pointer type, C signature text) of a table struct's fields, in order."""
    fnptr = _function_pointer_types()
    out = []
    for ftype, fname in struct_fields(header, struct):
        ret, args = fnptr[ftype]
        out.append((fname, ftype, f"{ret} {prefix}{fname}({args})"))
    return out


def table_entries(mod: AbiModule) -> list[tuple[str, str, str]]:
    return entries(mod.table_header, mod.table_tag, mod.entry_prefix)


def extra_entries(mod: AbiModule) -> list[tuple[str, str, str]]:
    out = [e for header, tag, prefix in mod.extra_tables for e in entries(header, tag, prefix)]
    return out + [e for prefix, _ in mod.variant_tables for e in entries(mod.table_header, mod.table_tag, prefix)]


def write_if_changed(path: Path, text: str) -> Path:
    """Writes ``text`` unless the file already holds it (its mtime then drives rebuilds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def write_entries_header(mod: AbiModule, build_dir: Path) -> Path:
    """The generated header: package version, entry prototypes, the table initializer."""
    table = table_entries(mod)
    guard = mod.entries_header.upper().replace(".", "_")
    lines = [f"/* Generated by csrc/build_abi.py from include/QNN/{mod.table_header}; do not edit. */",
             f"#ifndef {guard}", f"#define {guard}"]
    lines += [f'#include "{h}"' for h in mod.header_includes]
    lines += [f'#define QNNEMU_PACKAGE_VERSION "{__version__}"',
              f"#define {mod.macro_prefix}_NUM_ENTRIES {len(table)}"]
    lines += [f"{sig};" for _, _, sig in table + extra_entries(mod)]
    fronts = dict(mod.fronts)
    lines += [f"{sig.replace(mod.entry_prefix + fname + '(', fronts[fname] + '(', 1)};"
              for fname, _, sig in table if fname in fronts]
    lines.append(f"#define {mod.macro_prefix}_TABLE_INITIALIZER {{ \\")
    lines += [f"  ({ftype}){fronts.get(fname, mod.entry_prefix + fname)}, \\" for fname, ftype, _ in table]
    lines.append("}")
    for prefix, macro in mod.variant_tables:
        lines.append(f"#define {macro}_TABLE_INITIALIZER {{ \\")
        lines += [f"  ({ftype}){prefix}{fname}, \\" for fname, ftype, _ in table]
        lines.append("}")
    lines += ["#endif", ""]
    return write_if_changed(Path(build_dir) / mod.entries_header, "\n".join(lines))


def portable_compile_args(root: Path = ROOT) -> list[str]:
    """No build-machine paths in the objects: no debug info (it names the compile directory and
    the Python headers' location) and source paths relative to the tree."""
    return ["-g0", f"-ffile-prefix-map={root}=."]


def build_inputs() -> list[str]:
    """Files every library here is built from (besides its own sources): a change rebuilds it."""
    inputs = [HERE / name for name in ("embed_python.h", "log_forward.h", "fork_python.h", "abi_shim.h",
                                       "fast_execute.h",
                                       "loader.c", "shim.c", "system_shim.c", "exports.map",
                                       "system_exports.map", "htp_module.map", "system_module.map",
                                       "build_abi.py", "build_backend.py", "build_system.py")]
    inputs.append(ROOT / "qnnemu" / "_version.py")
    inputs += sorted(qnn_dir().rglob("*.h"))
    return [str(p) for p in inputs if p.exists()]


def make_ffi(mod: AbiModule, build_dir: str | os.PathLike) -> tuple[cffi.FFI, dict]:
    """The cffi module of ``mod``: the FFI and its extension keyword arguments."""
    build_dir = Path(build_dir)
    header = write_entries_header(mod, build_dir)
    signatures = table_entries(mod) + extra_entries(mod)
    ffi = cffi.FFI()
    ffi.cdef(header_cdef(mod.cdef_roots, prototypes=False))
    ffi.cdef(mod.helpers_cdef())
    # cffi sees va_list parameters as void * (x86-64 passes a pointer either way).
    ffi.cdef("\n".join(f'extern "Python+C" {sig};' for _, _, sig in signatures).replace("va_list", "void *"))
    ffi.embedding_api(mod.embed_api())
    ffi.embedding_init_code(mod.init_code(tuple(f for f, _, _ in table_entries(mod))))
    kwargs = dict(
        sources=[str(HERE / mod.shim)],
        include_dirs=[str(qnn_dir()), str(build_dir), sysconfig.get_paths()["include"]],
        # The struct-field check cffi emits for va_list callbacks (QnnLog_CreateFn_t) would
        # otherwise warn.
        extra_compile_args=["-O2", "-fvisibility=hidden", "-Wno-incompatible-pointer-types"]
        + portable_compile_args(),
        # Only the providers function (for the loader) leaves the module.  No libpython: like
        # any extension module it uses the interpreter already in the process.
        extra_link_args=[f"-Wl,--version-script={HERE / mod.module_map}", "-Wl,-z,nodelete"],
        libraries=["dl", "pthread"],
        depends=[str(header)] + build_inputs(),
    )
    preamble = "".join(f'#include "{h}"\n' for h in mod.preamble_includes) + mod.helpers_cdef()
    # (copies: cffi appends -lpythonX.Y to the lists it is given, and the module must not need it)
    ffi.set_source(mod.module_name, preamble, **{k: list(v) for k, v in kwargs.items()})
    return ffi, kwargs
