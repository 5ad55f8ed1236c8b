"""The newcomer's documents point at things that exist (docs/architecture.md, docs/contributing.md).

Every repository path they name (``qnnemu/...``, ``csrc/...``, ``tests/...``, ``tools/...``,
``include/...``, ``docs/...``, ``benchmarks/...``, ``samples/...``) must exist; every
``path.py:name`` / ``path.py:Class.method`` (or ``qnnemu.module:name``) must be defined there --
a function, class or module-level name of that Python file, or an identifier of that C file; every
relative Markdown link must reach a file.  A rename that leaves the map behind fails here.
"""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "docs" / "architecture.md", ROOT / "docs" / "contributing.md"]

_PREFIXES = "qnnemu|csrc|tests|tools|include|docs|benchmarks|samples"
# A path starts a word (not inside another path: qnnemu/tools/ is one path, not tools/).
PATH = re.compile(rf"(?<![\w/.-])((?:{_PREFIXES})/[\w./-]*[\w/])(?::(\w+(?:\.\w+)*))?")
MODULE_NAME = re.compile(r"(?<![\w/.-])(qnnemu(?:\.\w+)+):(\w+(?:\.\w+)*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@cache
def _python_names(path: Path) -> frozenset[str]:
    """Dotted names defined in a Python file: top-level functions, classes and assignments, and
    the methods and class attributes of its classes (``Class.method``)."""
    names: set[str] = set()

    def assigned(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        return []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")
            else:
                names.update(prefix + n for n in assigned(node))

    visit(ast.parse(path.read_text(), str(path)).body, "")
    return frozenset(names)


def _defines(path: Path, name: str) -> bool:
    if path.suffix == ".py":
        return name in _python_names(path)
    # C sources and headers: the identifier (function, macro, type) appears as a word.
    return re.search(rf"\b{re.escape(name)}\b", path.read_text()) is not None


def _module_path(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def references(text: str) -> tuple[list[str], list[tuple[str, Path, str]], list[str]]:
    """(paths, (as written, file, name) pairs, relative links) named in ``text``."""
    paths, names = [], []
    for m in PATH.finditer(text):
        paths.append(m.group(1))
        if m.group(2):
            names.append((m.group(0), ROOT / m.group(1), m.group(2)))
    for m in MODULE_NAME.finditer(text):
        names.append((m.group(0), _module_path(m.group(1)), m.group(2)))
    links = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    return paths, names, links


def problems(doc: Path, text: str | None = None) -> list[str]:
    text = doc.read_text() if text is None else text
    paths, names, links = references(text)
    found = [f"path {p} does not exist" for p in paths if not (ROOT / p).exists()]
    for written, path, name in names:
        if not path.is_file():
            found.append(f"{written}: no file {path.relative_to(ROOT)}")
        elif not _defines(path, name):
            found.append(f"{written}: {path.relative_to(ROOT)} defines no {name}")
    found += [f"link ({link}) reaches no file" for link in links if not (doc.parent / link).exists()]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_path_and_name_exists(doc):
    assert doc.is_file(), f"{doc.relative_to(ROOT)} exists"
    paths, names, _ = references(doc.read_text())
    assert len(paths) >= 20 and len(names) >= 10, \
        f"{doc.name} names paths and functions ({len(paths)} paths, {len(names)} names found): the scan reads it"
    bad = problems(doc)
    assert not bad, f"{doc.name} points at things that do not exist:\n  " + "\n  ".join(bad)


def test_the_checker_reports_what_is_missing():
    """The checker itself: a missing path, a missing function, a missing method, a missing C
    identifier and a dead link are each reported; existing ones are not."""
    doc = ROOT / "docs" / "architecture.md"
    text = ("`qnnemu/core/graph.py:Graph.execute` `qnnemu/core/plan.py:compile_plan` `csrc/kernels.h:qe_sgemm` "
            "`qnnemu.core.plan:Plan.run` [layers](layers.md)\n"
            "`qnnemu/core/nothing.py` `qnnemu/core/graph.py:Graph.no_such_method` `qnnemu/core/plan.py:nope` "
            "`csrc/kernels.h:qe_missing` `qnnemu.core.plan:missing` [x](missing.md)")
    got = problems(doc, text)
    assert got == ["path qnnemu/core/nothing.py does not exist",
                   "qnnemu/core/graph.py:Graph.no_such_method: qnnemu/core/graph.py defines no Graph.no_such_method",
                   "qnnemu/core/plan.py:nope: qnnemu/core/plan.py defines no nope",
                   "csrc/kernels.h:qe_missing: csrc/kernels.h defines no qe_missing",
                   "qnnemu.core.plan:missing: qnnemu/core/plan.py defines no missing",
                   "link (missing.md) reaches no file"], f"the checker's findings on a probe text: {got}"
