"""The test suite's own structure (tests/helpers/__init__.py says where shared test code lives):

- no test module imports another test module -- at module level, inside a function, or in a
  subprocess script it writes (an ``import test_x`` / ``from test_x import`` line in a string;
  a script may import the module that writes it, to run that module's own table in a clean
  process, as tests/test_acceptance_vendor.py does on the vendor's library);
- the shared helpers (tests/helpers/ and the top-level helper modules) import no test module;
- ONNX Runtime's QNN EP is registered in one place, ``qnnemu.onnxruntime`` (tests reach it
  through tests/helpers/ort.py or ``qnnemu.onnxruntime.qnn_device`` in subprocess scripts).

One exception, kept narrow: the meta-tests that collect the rule tables (``RULE_IDS``,
``RULE_CASES``, ``CORE_LEVEL_RULES``) of other test modules may import those modules inside
the meta-test function and read nothing else from them.  They go when the rule registry in the
package (qnnemu/rules.py) replaces the tables.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
HELPER_MODULES = ("abi.py", "optest.py", "strategies.py", "vendor.py", "models.py", "conftest.py")
RULE_TABLES = {"RULE_IDS", "RULE_CASES", "CORE_LEVEL_RULES"}
# (file, function) pairs allowed to import test modules for their rule tables only.
RULE_TABLE_COLLECTORS = {
    ("test_negative.py", "test_every_core_and_abi_rule_has_a_case"),
    ("test_system_lib.py", "test_every_system_rule_has_a_case"),
}
# An import of a test module in a script held in a string (python -c, a file written for a
# subprocess): "import test_x", "from test_x import", "from tests.test_x import", "import tests.test_x".
SCRIPT_IMPORT = re.compile(r"^\s*(?:from|import)\s+(?:tests\.)?(test_\w+)", re.MULTILINE)


def _is_test_module(name: str | None) -> bool:
    """``test_x``, ``tests.test_x`` (and their submodules) name test modules."""
    parts = (name or "").split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    return bool(parts) and parts[0].startswith("test_")


def find_test_module_imports(tree: ast.AST) -> list[tuple[int, str, str | None, set[str], bool]]:
    """(line, test module, enclosing top-level function or None, names the import binds, whether
    it binds the module itself) of every import of a test module in ``tree``, at any depth."""
    found = []

    def visit(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name if func is None else func)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if _is_test_module(alias.name):
                        found.append((child.lineno, alias.name, func, {alias.asname or alias.name.split(".")[0]},
                                      True))
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if (child.level and not module) or (not child.level and module == "tests"):
                    for alias in child.names:   # from . import test_x / from tests import test_x
                        if alias.name.startswith("test_"):
                            found.append((child.lineno, alias.name, func, {alias.asname or alias.name}, True))
                elif (child.level and module.startswith("test_")) or _is_test_module(module):
                    found.append((child.lineno, module, func, {a.asname or a.name for a in child.names}, False))
            visit(child, func)

    visit(tree, None)
    return found


def script_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, test module) of every test-module import inside a string constant of ``tree``."""
    return [(node.lineno, m.group(1)) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            for m in SCRIPT_IMPORT.finditer(node.value)]


def non_table_reads(tree: ast.AST, func: str, modules: set[str]) -> list[str]:
    """What function ``func`` reads from the module names ``modules`` other than rule tables."""
    function = next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and n.name == func)
    table_reads = {id(n.value) for n in ast.walk(function) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.attr in RULE_TABLES}
    reads = []
    for n in ast.walk(function):
        if isinstance(n, ast.Name) and n.id in modules and id(n) not in table_reads:
            parent = next((a for a in ast.walk(function) if isinstance(a, ast.Attribute) and a.value is n), None)
            reads.append(f"{n.id}.{parent.attr}" if parent is not None else n.id)
    return reads


def violations(path: Path, source: str) -> list[str]:
    """Every test-module import in ``source`` (the file at ``path``) the rules above forbid."""
    tree = ast.parse(source, str(path))
    is_helper = path.parent.name == "helpers" or path.name in HELPER_MODULES
    out = []
    for line, module, func, bound, binds_module in find_test_module_imports(tree):
        if not is_helper and (path.name, func) in RULE_TABLE_COLLECTORS:
            extra = non_table_reads(tree, func, bound) if binds_module else sorted(bound - RULE_TABLES)
            if not extra:
                continue
            out.append(f"{path.name}:{line}: {func} reads {extra} from test module {module}: "
                       f"only the rule tables {sorted(RULE_TABLES)} may be read there")
            continue
        where = f" (in {func})" if func else ""
        out.append(f"{path.name}:{line}{where}: imports test module {module}")
    for line, module in script_imports(tree):
        if module != path.stem:   # a module may run its own tables in a subprocess
            out.append(f"{path.name}:{line}: a script in a string imports test module {module}")
    return out


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts)


# ------------------------------------------------------------------------------ the scanner
@pytest.mark.parametrize("source, expected", [
    ("import test_a\n", "imports test module test_a"),
    ("from test_a import Env\n", "imports test module test_a"),
    ("from tests.test_a import Env\n", "imports test module tests.test_a"),
    ("from tests import test_a\n", "imports test module test_a"),
    ("def f():\n    import test_a as t\n    return t.Env\n", "(in f): imports test module test_a"),
    ("S = '''\nimport sys\nimport test_a as T\n'''\n", "a script in a string imports test module test_a"),
    ("S = 'from test_a import x'\n", "a script in a string imports test module test_a"),
    ("S = 'import test_example as m; m.main()'\ndef f():\n    import test_example\n",
     "(in f): imports test module test_example"),
])
def test_the_scanner_finds_each_kind_of_import(source, expected):
    """The checks below can fail: each form of a test-module import is reported."""
    found = violations(TESTS / "test_example.py", source)
    assert any(expected in v for v in found), f"{source!r}: expected a violation with {expected!r}, got {found}"


def test_the_scanner_passes_helpers_and_package_imports():
    source = ("import abi\nfrom helpers.graph_env import Env\nfrom qnnemu.ops import test_support\n"
              "import pytest_timeout\nX = 'the test_negative module'\n"
              "SCRIPT = 'import test_example as m; m.vendor_main()'\n")
    assert violations(TESTS / "test_example.py", source) == [], \
        "helper and package imports, and a script running its own module, are no violation"


def test_the_rule_table_exception_is_narrow():
    """Inside a listed collector, reading a rule table passes; reading anything else does not,
    and the same import elsewhere (or in a helper) is a violation."""
    ok = ("def test_every_system_rule_has_a_case():\n    import test_a\n    return test_a.RULE_IDS\n")
    assert violations(TESTS / "test_system_lib.py", ok) == [], "a rule table read in a listed collector"
    reads_env = ("def test_every_system_rule_has_a_case():\n    import test_a\n    return test_a.Env\n")
    assert violations(TESTS / "test_system_lib.py", reads_env), "reading Env through the exception"
    assert violations(TESTS / "test_signal.py", ok), "the same import in a module that is not listed"
    assert violations(TESTS / "helpers" / "x.py", ok), "the same import in a helper"


# ------------------------------------------------------------------------------ the suite
def test_no_test_module_imports_another_test_module():
    """Every test module but this one (its examples above are violations on purpose)."""
    problems = [v for path in _python_files() if path.name.startswith("test_") and path != Path(__file__).resolve()
                for v in violations(path, path.read_text())]
    assert problems == [], "test modules import test modules (move the shared code to tests/helpers/):\n" + \
        "\n".join(problems)


def test_helpers_import_no_test_module():
    helpers = [p for p in _python_files() if p.parent.name == "helpers" or p.name in HELPER_MODULES]
    assert len(helpers) >= len(HELPER_MODULES) + 1, f"the helper modules are found: {[p.name for p in helpers]}"
    problems = [v for path in helpers for v in violations(path, path.read_text())]
    assert problems == [], "shared helpers import test modules:\n" + "\n".join(problems)


def test_helper_modules_have_docstrings():
    """House rule: every module starts with a docstring saying what it is for."""
    missing = [str(p.relative_to(TESTS)) for p in _python_files()
               if p.parent.name == "helpers" and not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == [], f"helper modules without a docstring: {missing}"


def test_the_qnn_ep_is_registered_in_one_place():
    """ORT's EP plugin library is registered by qnnemu.onnxruntime.register_qnn_ep only: no test
    (nor a script it runs) calls register_execution_provider_library itself."""
    copies = [f"{p.relative_to(TESTS)}:{n}" for p in _python_files() if p != Path(__file__).resolve()
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if "register_execution_provider_library" in line]
    assert copies == [], f"QNN EP registrations outside qnnemu.onnxruntime: {copies}"
