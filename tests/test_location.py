"""Every error message names its function and parameter path through one helper
(qnnemu/location.py ``Location`` + qnnemu/rules.py ``fail`` / ``error``): no module in qnnemu/
builds the ``<function>: <path>: `` prefix of a ``QnnError`` by hand (issue 12, item 3).

The scan reads the sources with ``ast``: a ``QnnError(code, message, ...)`` call whose message
(an f-string, a string, or the left end of a ``+``) starts with a placeholder followed by
``": "`` (``f"{func}: ..."``, ``f"{name}: ..."``) or with a literal API name followed by ``": "``
(``"graphCreate: ..."``) is a hand-built prefix.
"""
from __future__ import annotations

import ast
import pathlib
import re

import qnnemu
from qnnemu.errors import QnnError
from qnnemu.location import Location
from qnnemu.rules import error

PACKAGE = pathlib.Path(qnnemu.__file__).parent

# The one place that builds the prefix: rules.error itself, from a Location.
ALLOWED = {("rules.py", "error")}

API_NAME_PREFIX = re.compile(r"[a-z]+[A-Z][A-Za-z0-9]*: ")


def _message_start(node: ast.expr) -> tuple[str | None, str]:
    """(``"placeholder"`` / ``"literal"`` / None, the text after the first placeholder or the
    literal start) of a message expression."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _message_start(node.left)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "literal", node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant):
            return "literal", str(first.value)
        if isinstance(first, ast.FormattedValue) and len(node.values) > 1 \
                and isinstance(node.values[1], ast.Constant):
            return "placeholder", str(node.values[1].value)
    return None, ""


def hand_built_prefixes(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, enclosing function) of every QnnError call in ``source`` whose message starts with
    a hand-built ``<function>: `` prefix."""
    tree = ast.parse(source, filename)
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if callee == "QnnError":
                message = node.args[1] if len(node.args) > 1 else \
                    next((k.value for k in node.keywords if k.arg == "message"), None)
                if message is not None:
                    kind, text = _message_start(message)
                    if (kind == "placeholder" and text.startswith(": ")) or \
                            (kind == "literal" and API_NAME_PREFIX.match(text)):
                        found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_the_scan_finds_hand_built_prefixes():
    """The scan flags each form it is meant to find and passes the Location form (so the
    package-wide test below can fail)."""
    samples = {
        'raise QnnError(1, f"{func}: {path}: bad", rule="QNNEMU-x")': 1,
        'raise QnnError(1, f"{name}: bad value {v}", rule="QNNEMU-x")': 1,
        'raise QnnError(1, "graphCreate: graphName is NULL", rule="QNNEMU-x")': 1,
        'raise QnnError(1, f"graphExecute: inputs: {n} missing", rule="QNNEMU-x")': 1,
        'raise QnnError(1, f"{func}: " + text, rule="QNNEMU-x")': 1,
        'e = errors.QnnError(code, message=f"{func}: x")': 1,
        'fail(Location(func).path("graphName"), "QNNEMU-x", "is NULL", code=1)': 0,
        'raise QnnError(1, f"QNNEMU_CORE_API_VERSION={text!r} is not a version", rule="QNNEMU-x")': 0,
        'raise QnnError(e.code, e.detail, rule=e.rule)': 0,
    }
    for source, want in samples.items():
        got = hand_built_prefixes(source)
        assert len(got) == want, f"scan of {source!r}: expected {want} hand-built prefix(es), found {got}"


def test_no_module_builds_an_error_prefix_by_hand():
    """No QnnError in qnnemu/ gets a hand-built ``<function>: `` prefix: build its Location and
    raise it with qnnemu.rules.fail (or return qnnemu.rules.error)."""
    offenders = []
    allowed_seen = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, function in hand_built_prefixes(path.read_text(encoding="utf-8"), str(path)):
            if (rel, function) in ALLOWED:
                allowed_seen.add((rel, function))
            else:
                offenders.append(f"qnnemu/{rel}:{line} ({function})")
    assert not offenders, f"hand-built 'function: ' error prefixes (use Location + rules.fail): {offenders}"
    assert allowed_seen == ALLOWED, \
        f"the allowed exceptions still exist and are the only ones: {sorted(ALLOWED - allowed_seen)} are gone"


def test_location_message_form():
    """rules.error builds ``[rule] function: path: message`` from a Location, and the function
    alone when the Location has no path."""
    loc = Location("graphAddNode").field("opConfig").field("v1").index("inputTensors", 1)
    err = error(loc, "QNNEMU-op-input-count", "is missing", code=6001)
    assert isinstance(err, QnnError) and err.code == 6001 and err.rule == "QNNEMU-op-input-count", \
        f"rules.error returns the QnnError with the given code and rule: {err!r}"
    assert str(err) == "[QNNEMU-op-input-count] graphAddNode: opConfig.v1.inputTensors[1]: is missing", \
        f"the message is [rule] function: path: message: {err}"
    assert error(Location("graphCreate"), "QNNEMU-graphCreate-name", "graphName is NULL", code=1).detail \
        == "graphCreate: graphName is NULL", "a Location without a path gives 'function: message'"
