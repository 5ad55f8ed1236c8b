"""Reads our own QNN headers (include/QNN, see QnnCommon.h ... QnnInterface.h) at run time.

Two products, so that no C declaration or constant is ever written twice:
- ``constants()``: every enum value and integer/string macro as a name -> value dict;
- ``cdef(roots)``: C declarations for cffi (both the embedded library and the ABI-mode client),
  obtained by following ``#include`` from the given root headers.

The headers are produced by tools/gen_headers.py in a regular format; this reader relies on
that format (one declaration per line group, guards, ``extern "C"`` blocks) rather than on a
C preprocessor, so it works on machines without a compiler.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def include_dir() -> str:
    """Directory to pass as ``-I`` to compile applications against our QNN headers.

    Installed packages carry the headers inside the package; a source checkout has them at
    the top level next to the package.
    """
    for candidate in (_PKG / "include", _PKG.parent / "include"):
        if (candidate / "QNN" / "QnnInterface.h").is_file():
            return str(candidate)
    raise FileNotFoundError("qnnemu: QNN headers not found next to the package")


def library_dir() -> str:
    """Directory holding libQnnHtpEmu.so (and libQnnSystem.so), as ONNX Runtime expects (here,
    in the base layer, so that the core can find the libraries without the package facade)."""
    return str(_PKG / "lib")


def backend_library_path() -> str:
    """Our backend, libQnnHtpEmu.so (here, not in the package facade, so that client and tools
    find it without importing the facade, which imports tools)."""
    return str(Path(library_dir()) / "libQnnHtpEmu.so")


def lpai_library_path() -> str:
    """Our LPAI backend, libQnnLpaiEmu.so (LPAI/QnnLpaiCommon.h: QNN_BACKEND_ID_LPAI), beside the
    HTP backend: one more provider of the same Python core."""
    return str(Path(library_dir()) / "libQnnLpaiEmu.so")


def system_library_path() -> str:
    """Our System library's location: beside the backend, under the name clients look for."""
    return str(Path(library_dir()) / "libQnnSystem.so")


def qnn_dir() -> Path:
    return Path(include_dir()) / "QNN"


_DEFINE = re.compile(r"^#define\s+(\w+)\s+(.+?)\s*$")
_ENUM_VALUE = re.compile(r"^\s+(\w+)\s*=\s*(.+?),?\s*$")
_INT = re.compile(r"^\(?(-?)(0x[0-9A-Fa-f]+|\d+)(u|ull|ll|ul)?\)?$")


def _int_literal(text: str) -> int | None:
    m = _INT.match(text.strip())
    if not m:
        return None
    value = int(m.group(2), 0)
    return -value if m.group(1) else value


@functools.cache
def constants() -> dict[str, int | str]:
    """All enum values and literal integer/string macros of every header."""
    out: dict[str, int | str] = {}
    for path in sorted(qnn_dir().rglob("*.h")):
        in_enum = False
        for line in path.read_text().splitlines():
            if line.startswith("typedef enum {"):
                in_enum = True
                continue
            if in_enum:
                if line.startswith("}"):
                    in_enum = False
                    continue
                m = _ENUM_VALUE.match(line)
                if m:
                    value = _int_literal(m.group(2))
                    if value is not None:
                        out[m.group(1)] = value
                continue
            m = _DEFINE.match(line)
            if not m:
                continue
            name, body = m.groups()
            if body.startswith('"') and body.endswith('"'):
                out.setdefault(name, bytes(body[1:-1], "utf-8").decode("unicode_escape"))
                continue
            value = _int_literal(body)
            if value is not None:
                out.setdefault(name, value)
    return out


@functools.cache
def _enum(prefix: str) -> dict[int, str]:
    """Q.enum's table, made once per prefix (the entries ask for it on every call that reads a
    config; the walk over every constant took about a millisecond)."""
    out: dict[int, str] = {}
    for k, v in constants().items():
        if k.startswith(prefix) and isinstance(v, int):
            out.setdefault(v, k)
    return out


class _Constants:
    """The constants as attributes (see _Namespace)."""

    def enum(self, prefix: str) -> dict[int, str]:
        """value -> name for every constant starting with prefix (first name wins)."""
        return dict(_enum(prefix))   # (a copy: the caller may change it)


class _Namespace(_Constants):
    """Attribute access to constants(): ``Q.QNN_DATATYPE_FLOAT_32``.  The first access copies
    every constant into the instance and drops this ``__getattr__`` (the instance becomes a
    plain _Constants), so later reads are plain attribute reads: the entries' hot paths read
    dozens per call, and the lookup through ``__getattr__`` cost about a microsecond each."""

    def __getattr__(self, name: str):
        table = constants()
        self.__dict__.update(table)
        object.__setattr__(self, "__class__", _Constants)
        try:
            return table[name]
        except KeyError:
            raise AttributeError(name) from None


Q = _Namespace()


def struct_fields(header: str, tag: str) -> list[tuple[str, str]]:
    """(type, name) of each one-line member of ``struct tag { ... };`` in ``header`` (relative to
    include/QNN): the function tables, whose members are all function-pointer typedefs."""
    text = (qnn_dir() / header).read_text()
    m = re.search(rf"^struct {tag} \{{(.*?)^\}};", text, re.S | re.M)
    if m is None:
        raise KeyError(f"struct {tag} is not defined in {header}")
    return re.findall(r"^\s*(\w+) (\w+);", m.group(1), re.M)


def interface_fields() -> list[str]:
    """The core table's slot names (QnnInterface_ImplementationV<major>_<minor>_t), in order."""
    return [name for _, name in struct_fields("QnnInterface.h", INTERFACE_TABLE_TAG)]


def system_interface_fields() -> list[str]:
    """The System table's slot names, in order."""
    return [name for _, name in struct_fields("System/QnnSystemInterface.h", SYSTEM_TABLE_TAG)]


# The tables our headers declare (QNN_INTERFACE_VER_TYPE / QNN_SYSTEM_INTERFACE_VER_TYPE).
INTERFACE_TABLE_TAG = "_QnnInterface_ImplementationV2_39_t"
SYSTEM_TABLE_TAG = "_QnnSystemInterface_ImplementationV1_14_t"


_PROTOTYPE = re.compile(r"^(?!typedef)[A-Za-z_][\w \*]*\b\w+\(.*\);$")


def _strip_for_cdef(text: str, prototypes: bool) -> tuple[list[str], str]:
    """Returns (included headers, declarations) of one header, preprocessor lines removed.

    Without ``prototypes`` the exported-function prototypes (QnnBackend_create, ...) are
    dropped: a library that implements the API through its table must not reference them.
    """
    includes: list[str] = []
    body: list[str] = []
    skip_depth = 0
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            m = re.match(r'#include\s+"([^"]+)"', stripped)
            if m:
                includes.append(m.group(1))
            if stripped.startswith("#ifdef __cplusplus"):
                skip_depth += 1
            elif stripped.startswith("#endif") and skip_depth:
                skip_depth -= 1
            continue
        if skip_depth or (not prototypes and _PROTOTYPE.match(line)):
            continue
        body.append(line)
    decls = "\n".join(body)
    decls = re.sub(r"/\*.*?\*/", "", decls, flags=re.S)
    # On x86-64 a va_list parameter is passed as a pointer; cffi has no va_list type.
    decls = re.sub(r"\bva_list\b", "void *", decls)
    return includes, decls


@functools.cache
def cdef(roots: tuple[str, ...] = ("QnnInterface.h", "HTP/QnnHtpDevice.h", "HTP/QnnHtpGraph.h",
                                    "HTP/QnnHtpContext.h", "HTP/QnnHtpPerfInfrastructure.h",
                                    "HTP/QnnHtpProfile.h", "HTP/QnnHtpMem.h",
                                    "HTP/QnnHtpProperty.h", "HTP/QnnHtpCommon.h",
                                    "QnnOpDef.h", "LPAI/QnnLpaiCommon.h", "LPAI/QnnLpaiTypes.h",
                                    "LPAI/QnnLpaiMem.h", "LPAI/QnnLpaiBackend.h", "LPAI/QnnLpaiContext.h",
                                    "LPAI/QnnLpaiGraph.h"), prototypes: bool = True) -> str:
    """cffi declarations for the given headers and everything they include, in order (the LPAI
    headers but LPAI/QnnLpaiDevice.h, whose struct tag HTP/QnnHtpDevice.h defines too)."""
    base = qnn_dir()
    seen: set[str] = set()
    chunks: list[str] = []

    def visit(rel: str) -> None:
        path = os.path.normpath(rel)
        if path in seen:
            return
        seen.add(path)
        includes, decls = _strip_for_cdef((base / path).read_text(), prototypes)
        folder = os.path.dirname(path)
        for inc in includes:
            visit(os.path.normpath(os.path.join(folder, inc)))
        chunks.append(decls)

    for root in roots:
        visit(root)
    return "\n".join(chunks)
