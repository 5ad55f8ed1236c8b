"""The package's layering contract (docs/architecture.md "Layers"): every import points down.

Layers, lowest first: base (errors, location, rules, headers, version) -> spec (dtypes,
tensor/quant/param specs shared by ops and core) -> ops -> htp (device model, prepare, cost; the
LPAI device model and memory planner, qnnemu.lpai, is on the same level) ->
core (object model: Backend, Device, Context owning Graph objects) -> abi (C marshalling, entry
tables, handles) -> top (client, system_client, onnxruntime, tools, the package facade).

Every module under qnnemu/ is parsed with ``ast``; every ``import`` and ``from ... import`` is
taken, at module level and inside functions and classes (only ``if TYPE_CHECKING:`` blocks are
skipped: they never run).  A module may import its own layer or a lower one, and no set of
modules may import each other in a cycle (module or function level).  No import-linter: the
contract is written here with ``ast`` so it needs no new dependency.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qnnemu"

# Lowest first.  A module's layer is the longest prefix of its dotted name listed here.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("qnnemu.errors", "qnnemu.location", "qnnemu.rules", "qnnemu.headers",
              "qnnemu._version", "qnnemu._kernels")),  # _kernels: the compiled C, a leaf
    ("spec", ("qnnemu.spec",)),
    ("ops", ("qnnemu.ops",)),
    ("htp", ("qnnemu.htp", "qnnemu.lpai")),
    ("core", ("qnnemu.core",)),
    ("abi", ("qnnemu.abi",)),
    ("top", ("qnnemu", "qnnemu.client", "qnnemu.system_client", "qnnemu.onnxruntime",
             "qnnemu.tools")),
]
RANK = {prefix: rank for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}

# Upward imports tolerated for now, each with why and who removes it (keep this list short).
TEMPORARY_EXCEPTIONS: dict[str, str] = {}
# Cycles inside one layer still to remove, layer -> why and who removes it (delete the entry when
# it is gone: a test says so).  Empty: no cycle is tolerated.
TEMPORARY_CYCLE_LAYERS: dict[str, str] = {}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} (line {self.line}) imports {self.target}"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()
# Compiled C extensions (csrc/build_kernels.py): leaves that import nothing of the package.
EXTENSIONS = {"qnnemu._kernels"}


def _known(name: str) -> str | None:
    """The module ``name`` refers to: itself, or the package that defines the attribute."""
    while name and name not in MODULES and name not in EXTENSIONS:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str) -> list[Edge]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: list[Edge] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                targets = [_known(alias.name) for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[:len(package.split(".")) - (child.level - 1)]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                targets = [_known(f"{source}.{alias.name}") if f"{source}.{alias.name}" in MODULES
                           else _known(source) for alias in child.names]
            else:
                targets = []
            edges.extend(Edge(module, t, child.lineno) for t in targets if t and t != module)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return edges


EDGES = [edge for module in MODULES for edge in _imports(module)]


def layer_of(module: str) -> int:
    name = module
    while name not in RANK:
        assert "." in name, f"{module} is in no layer of tests/test_layers.py LAYERS"
        name = name.rpartition(".")[0]
    return RANK[name]


def _cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in [*MODULES, *EXTENSIONS]}
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_module_has_a_layer():
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except AssertionError as e:
            missing.append(str(e))
    assert not missing, "modules outside every layer: " + "; ".join(missing)


def test_imports_point_down():
    upward = [f"{e} ({LAYERS[layer_of(e.source)][0]} -> {LAYERS[layer_of(e.target)][0]})"
              for e in EDGES
              if layer_of(e.target) > layer_of(e.source) and e.target not in TEMPORARY_EXCEPTIONS]
    assert not upward, "imports of a higher layer:\n  " + "\n  ".join(upward)


def _tolerated(component: list[str]) -> bool:
    layers = {LAYERS[layer_of(m)][0] for m in component}
    return len(layers) == 1 and layers <= set(TEMPORARY_CYCLE_LAYERS)


def test_no_import_cycles():
    cycles = [c for c in _cycles(EDGES) if not _tolerated(c)]
    described = []
    for component in cycles:
        members = set(component)
        inner = [str(e) for e in EDGES if e.source in members and e.target in members]
        described.append(f"cycle among {component}:\n    " + "\n    ".join(inner))
    assert not cycles, "import cycles (module or function level):\n  " + "\n  ".join(described)


def test_temporary_exceptions_are_still_needed():
    """An exception nobody needs any more must be deleted, not left to hide a new edge."""
    used = {e.target for e in EDGES if e.target in TEMPORARY_EXCEPTIONS
            and layer_of(e.target) > layer_of(e.source)}
    stale = sorted(set(TEMPORARY_EXCEPTIONS) - used)
    assert not stale, f"TEMPORARY_EXCEPTIONS entries no module needs: {stale}"
    cycling = {LAYERS[layer_of(c[0])][0] for c in _cycles(EDGES) if _tolerated(c)}
    stale_layers = sorted(set(TEMPORARY_CYCLE_LAYERS) - cycling)
    assert not stale_layers, f"TEMPORARY_CYCLE_LAYERS entries without a cycle any more: {stale_layers}"


def test_nothing_in_the_package_imports_the_facade():
    """The facade ``qnnemu`` (qnnemu/__init__.py) is for applications; its sdk_root() imports
    tools, so a module that imported the facade back would close a cycle.  Client, tools and
    onnxruntime take the libraries' locations from ``qnnemu.headers``."""
    users = [str(e) for e in EDGES if e.target == "qnnemu"]
    assert not users, "modules importing the package facade qnnemu:\n  " + "\n  ".join(users)


def test_handle_table_stays_at_the_abi_boundary():
    """htp never looks objects up in the global handle table: collaborators are passed in."""
    users = [str(e) for e in EDGES if e.target == "qnnemu.core.handles" and layer_of(e.source) < RANK["qnnemu.core"]]
    assert not users, "modules below core using the handle table:\n  " + "\n  ".join(users)


# What the object model may do with the handle table: give an object its handle and release it.
# Looking objects up by handle belongs to the ABI boundary; below it collaborators are passed in.
HANDLE_LOOKUPS = {"lookup", "live", "get", "_objects"}


def test_no_object_is_looked_up_by_handle_below_the_abi():
    found = []
    for module, path in MODULES.items():
        if layer_of(module) >= RANK["qnnemu.abi"]:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id == "HANDLES" and node.attr in HANDLE_LOOKUPS:
                found.append(f"{module} (line {node.lineno}): HANDLES.{node.attr}")
    assert not found, "objects looked up through the handle table below the ABI layer:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("source, expected", [
    ("import qnnemu.abi.entry\n", ["qnnemu.abi.entry"]),
    ("def f():\n    from ..core import graph\n", ["qnnemu.core.graph"]),
    ("from . import cost, tiling\n", ["qnnemu.htp.cost", "qnnemu.htp.tiling"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..core.graph import Graph\n", []),
    ("from ..headers import Q\n", ["qnnemu.headers"]),
])
def test_the_parser_sees_imports_at_any_depth(tmp_path, monkeypatch, source, expected):
    """The contract's own parser: function-level imports count, TYPE_CHECKING ones do not."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "qnnemu.htp.probe", path)
    got = sorted({e.target for e in _imports("qnnemu.htp.probe")})
    assert got == sorted(expected), f"imports parsed from {source!r}"


def test_the_cycle_finder_finds_a_function_level_cycle():
    edges = [Edge("qnnemu.core.graph", "qnnemu.core.plan", 1), Edge("qnnemu.core.plan", "qnnemu.core.graph", 9)]
    assert _cycles(edges) == [["qnnemu.core.graph", "qnnemu.core.plan"]], "a two-module cycle is found"
    assert _cycles(edges[:1]) == [], "one edge is no cycle"
