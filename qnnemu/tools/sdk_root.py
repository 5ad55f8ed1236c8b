"""``qnnemu-sdk-root DIR``: a QNN-SDK-shaped tree over the installed qnnemu, for projects built
with ``QNN_SDK_ROOT`` (the SDK's layout: headers in ``${QNN_SDK_ROOT}/include/QNN``, x86-64 Linux
libraries in ``${QNN_SDK_ROOT}/lib/x86_64-linux-clang``).

Lays out
    DIR/include/QNN/...                              our QNN headers
    DIR/lib/x86_64-linux-clang/libQnnHtp.so         the backend (libQnnHtpEmu.so)
    DIR/lib/x86_64-linux-clang/libQnnLpai.so        the LPAI backend (libQnnLpaiEmu.so, docs/lpai.md)
    DIR/lib/x86_64-linux-clang/libQnnSystem.so      the System library
    DIR/lib/x86_64-linux-clang/libcdsprpc.so        the FastRPC shared-memory library
as symbolic links into the package (default): a backend reached through a link finds its
package and interpreter from where the link points.  ``--copy`` copies instead (a tree that must
not point into site-packages); a copied backend finds Python through ``QNNEMU_PYTHONHOME``, the
active venv (``VIRTUAL_ENV``) or the system's libpython, and imports qnnemu from there
(``QNNEMU_PYTHONPATH`` adds directories).  Running it again replaces these entries; nothing
else in DIR is touched.

``qnnemu.sdk_root(DIR, copy=False)`` does the same from Python and returns ``DIR`` as a Path.
"""
from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..headers import backend_library_path, include_dir, library_dir, lpai_library_path, system_library_path
from .reporting import ToolError, tool_main

PROG = "qnnemu-sdk-root"
LIB_SUBDIR = Path("lib") / "x86_64-linux-clang"
# SDK file name -> our file.
LIBRARIES = {
    "libQnnHtp.so": backend_library_path,
    "libQnnLpai.so": lpai_library_path,
    "libQnnSystem.so": system_library_path,
    "libcdsprpc.so": lambda: os.path.join(library_dir(), "libcdsprpc.so"),
}


def _replace(path: Path) -> None:
    """Removes a previous entry (a link, a file or the headers directory) at ``path``."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def sdk_root(directory: str | os.PathLike, copy: bool = False) -> Path:
    """Lays out ``directory`` as a QNN SDK root over this qnnemu (links, or copies)."""
    root = Path(directory).absolute()
    headers = Path(include_dir()) / "QNN"
    sources = {name: Path(find()).resolve() for name, find in LIBRARIES.items()}
    missing = [str(p) for p in sources.values() if not p.is_file()]
    if missing:
        raise ToolError(f"the qnnemu libraries are not built: {', '.join(missing)} "
                        "(pip install qnnemu, or build_ext --inplace in a clone)")
    if root.exists() and not root.is_dir():
        raise ToolError(f"{root} exists and is not a directory")
    lib_dir = root / LIB_SUBDIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    (root / "include").mkdir(exist_ok=True)
    target = root / "include" / "QNN"
    if target.is_dir() and not target.is_symlink():
        # Replace a QNN header tree (an earlier --copy), never the package's own headers or an
        # unrelated directory.
        if target.resolve() == headers.resolve():
            raise ToolError(f"{target} is qnnemu's own header directory; choose another DIR")
        if not (target / "QnnInterface.h").is_file():
            raise ToolError(f"{target} exists and does not hold QNN headers; not replacing it")
    _replace(target)
    if copy:
        shutil.copytree(headers, target)
    else:
        target.symlink_to(headers.resolve(), target_is_directory=True)
    for name, source in sources.items():
        dest = lib_dir / name
        _replace(dest)
        if copy:
            shutil.copy2(source, dest)
        else:
            dest.symlink_to(source)
    return root


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Lay out DIR as a QNN SDK root (include/QNN, lib/x86_64-linux-clang/"
                    "{libQnnHtp.so,libQnnLpai.so,libQnnSystem.so,libcdsprpc.so}) over the installed qnnemu, "
                    "for projects configured with QNN_SDK_ROOT=DIR.")
    p.add_argument("directory", metavar="DIR", help="the SDK root to create or update")
    p.add_argument("--copy", action="store_true",
                   help="copy the headers and libraries instead of linking them (a copied backend "
                        "finds Python through QNNEMU_PYTHONHOME, VIRTUAL_ENV or the system's libpython)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    def body(args) -> int:
        root = sdk_root(args.directory, copy=args.copy)
        how = "copies" if args.copy else f"links to {Path(backend_library_path()).resolve().parent}"
        print(f"{PROG}: {root}: include/QNN and {LIB_SUBDIR}/{{{','.join(LIBRARIES)}}} ({how}); "
              f"configure with QNN_SDK_ROOT={root}")
        return 0

    return tool_main(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    raise SystemExit(main())
