"""Source scans for the rule registry's meta-test (tests/test_rule_registry.py): which rule ids
qnnemu raises and which ids the tests assert (the validation rules of docs/validation.md,
qnnemu/rules.py ``RULES``).

Raised ids (``raised_ids``) are read from the Python sources of qnnemu/ (qnnemu/rules.py, the
registry itself, excepted) with ``ast``, in four forms:

1. a string constant that is a whole id, ``"QNNEMU-graphFinalize-empty"``;
2. an f-string starting with ``QNNEMU-`` whose placeholders are the op's type (``{op}``,
   ``{cls.op_type}``, ``{self.op_type}``): the *template* ``QNNEMU-{op}-dtype``, one id per op
   type that reaches the check;
3. an f-string with a placeholder that is a parameter of the function around it
   (``f"QNNEMU-{op}-{rule}"`` in a factory, ``f"QNNEMU-{rule}"``, ``{name.replace('_', '-')}``):
   the placeholder is resolved through every call of that function (the string constant passed
   for the parameter, its default, or -- when the caller passes its own parameter on -- that
   caller's calls in turn);
4. a placeholder bound by a ``for`` loop over a tuple of constant tuples.

A placeholder none of these resolves is reported by ``unresolved`` (the meta-test fails on it:
write the id so that a reader -- and this scan -- can see it).

Tested ids (``asserted_strings``): every string constant of tests/*.py that is not a docstring
(the ids in assertions, ``assert_rule`` calls and the rule tables of the negative tests), and
the rule suffixes of the op modules' negative tables (a string constant in a module that uses
optest's ``expect_rule``, which asserts ``QNNEMU-<op type>-<suffix>``).
"""
from __future__ import annotations

import ast
import functools
import pathlib
import re

import qnnemu

PACKAGE = pathlib.Path(qnnemu.__file__).parent
TESTS = pathlib.Path(__file__).parent
ID_RE = re.compile(r"QNNEMU-[A-Za-z0-9-]+")
OP_PLACEHOLDERS = {"op", "cls.op_type", "self.op_type", "op_type"}


def _parents(tree: ast.AST) -> dict:
    parent = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    return parent


class _Module:
    def __init__(self, path: pathlib.Path):
        self.path = path
        self.name = str(path.relative_to(PACKAGE.parent))
        self.tree = ast.parse(path.read_text())
        self.parent = _parents(self.tree)
        self.source = path.read_text()
        # name -> the module it is imported from (last dotted part: ``from .shape import fail``)
        self.imported_from = {a.asname or a.name: (n.module or "").rsplit(".", 1)[-1]
                              for n in ast.walk(self.tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        self.imported = set(self.imported_from)

    def enclosing(self, node, kinds=(ast.FunctionDef, ast.AsyncFunctionDef)):
        node = self.parent.get(node)
        while node is not None and not isinstance(node, kinds):
            node = self.parent.get(node)
        return node


@functools.lru_cache(maxsize=1)
def _modules() -> tuple[_Module, ...]:
    return tuple(_Module(p) for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "rules.py")


def _call_name(call: ast.Call) -> tuple[str | None, str | None]:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id, None
    if isinstance(f, ast.Attribute):
        return f.attr, ast.unparse(f.value)
    return None, None


def _calls_of(mod: _Module, func: ast.FunctionDef):
    """(module, call) for every call of ``func``: inside the function around it when it is
    nested, else in its module and the modules that import it by name or call it through its
    module's name."""
    outer = mod.enclosing(func)
    if outer is not None:
        scopes = [(mod, outer)]
    else:
        stem = mod.path.stem
        scopes = [(m, m.tree) for m in _modules()
                  if m is mod or m.imported_from.get(func.name) == stem or f"{stem}.{func.name}(" in m.source]
    for m, scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Call):
                name, owner = _call_name(node)
                if name == func.name and (m is mod or owner in (None, mod.path.stem, "self", "cls")):
                    yield m, node


def _argument(func: ast.FunctionDef, call: ast.Call, param: str):
    """The expression ``call`` passes for ``param`` of ``func`` (its default when absent)."""
    names = [a.arg for a in func.args.args]
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    if param in names:
        i = names.index(param)
        if names and names[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            i -= 1
        if 0 <= i < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:i + 1]):
            return call.args[i]
        defaults = func.args.defaults
        j = names.index(param) - (len(names) - len(defaults))
        if 0 <= j < len(defaults):
            return defaults[j]
    kwonly = [a.arg for a in func.args.kwonlyargs]
    if param in kwonly:
        d = func.args.kw_defaults[kwonly.index(param)]
        if d is not None:
            return d
    return None


def _values(mod: _Module, node: ast.AST, expr: ast.AST, depth: int = 0) -> set[str] | None:
    """The string values placeholder ``expr`` (at ``node``) takes, or None when unknown."""
    transform = None
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "replace"
            and all(isinstance(a, ast.Constant) for a in expr.args)):
        old, new = (a.value for a in expr.args)
        transform, expr = (lambda s, o=old, n=new: s.replace(o, n)), expr.func.value
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        got = {expr.value}
    elif isinstance(expr, ast.Name) and depth < 6:
        got = _name_values(mod, node, expr.id, depth)
    else:
        return None
    if got is None:
        return None
    return {transform(v) for v in got} if transform else got


def _name_values(mod: _Module, node: ast.AST, name: str, depth: int) -> set[str] | None:
    # a for loop around the node binding the name from a tuple of constant tuples
    loop = mod.parent.get(node)
    while loop is not None and not isinstance(loop, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(loop, ast.For) and isinstance(loop.iter, (ast.Tuple, ast.List)):
            targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
            for i, t in enumerate(targets):
                if isinstance(t, ast.Name) and t.id == name:
                    out = set()
                    for item in loop.iter.elts:
                        v = item.elts[i] if isinstance(item, ast.Tuple) and len(targets) > 1 else item
                        if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
                            return None
                        out.add(v.value)
                    return out
        loop = mod.parent.get(loop)
    func = mod.enclosing(node)
    if func is None:
        return None
    if name not in {a.arg for a in func.args.args + func.args.kwonlyargs}:
        return _assigned_values(func, name)
    out: set[str] = set()
    for m, call in _calls_of(mod, func):
        arg = _argument(func, call, name)
        if arg is None:
            continue
        got = _values(m, call, arg, depth + 1)
        if got is None:
            return None
        out |= got
    return out


def _constants(expr: ast.AST) -> set[str] | None:
    """The strings a constant, ``a if c else b`` of constants or ``{...: const}[key]`` is."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        a, b = _constants(expr.body), _constants(expr.orelse)
        return None if a is None or b is None else a | b
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Dict):
        out: set[str] = set()
        for v in expr.value.values:
            got = _constants(v)
            if got is None:
                return None
            out |= got
        return out
    return None


def _assigned_values(func: ast.FunctionDef, name: str) -> set[str] | None:
    """A local variable of ``func``: the union of the constants assigned to it (None when one
    assignment is no constant)."""
    out: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            got = _constants(node.value)
            if got is None:
                return None
            out |= got
    return out or None


def _fstring_ids(mod: _Module, node: ast.JoinedStr) -> tuple[set[str], list[str]]:
    """The ids (templates with ``{op}``) an f-string starting with ``QNNEMU-`` makes, and the
    placeholders it could not resolve."""
    texts, unresolved = {""}, []
    for part in node.values:
        if isinstance(part, ast.Constant):
            texts = {t + str(part.value) for t in texts}
            continue
        src = ast.unparse(part.value)
        if src in OP_PLACEHOLDERS:
            texts = {t + "{op}" for t in texts}
            continue
        got = _values(mod, node, part.value)
        if got is None:
            unresolved.append(f"{mod.name}:{node.lineno}: {{{src}}}")
            texts = {t + "{?}" for t in texts}
        else:
            texts = {t + v for t in texts for v in got}
    return texts, unresolved


@functools.lru_cache(maxsize=1)
def _scan() -> tuple[dict[str, set[str]], tuple[str, ...]]:
    raised: dict[str, set[str]] = {}
    unresolved: list[str] = []
    for mod in _modules():
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and ID_RE.fullmatch(node.value) and not isinstance(mod.parent.get(node), ast.JoinedStr):
                raised.setdefault(node.value, set()).add(f"{mod.name}:{node.lineno}")
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                    and str(node.values[0].value).startswith("QNNEMU-"):
                ids, bad = _fstring_ids(mod, node)
                unresolved += bad
                for rule in ids:
                    if "{?}" not in rule:
                        raised.setdefault(rule, set()).add(f"{mod.name}:{node.lineno}")
    return raised, tuple(unresolved)


def raised_ids() -> dict[str, set[str]]:
    """Every id (or ``{op}`` template) qnnemu/ raises -> the ``file:line`` places."""
    return _scan()[0]


def unresolved() -> tuple[str, ...]:
    """The f-string placeholders ``raised_ids`` could not resolve (``file:line: {expr}``)."""
    return _scan()[1]


def _is_docstring(parent: dict, node: ast.Constant) -> bool:
    expr = parent.get(node)
    return isinstance(expr, ast.Expr) and isinstance(parent.get(expr),
                                                     (ast.Module, ast.FunctionDef, ast.ClassDef))


@functools.lru_cache(maxsize=1)
def asserted_strings() -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """(the string constants of tests/*.py that are no docstrings, the string constants of each
    test module that uses optest's ``expect_rule``), tests/test_rule_registry.py and this file
    excepted."""
    strings: set[str] = set()
    op_rows: list[frozenset[str]] = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in ("test_rule_registry.py", "rule_scan.py"):
            continue
        tree = ast.parse(path.read_text())
        parent = _parents(tree)
        consts = {n.value for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and not _is_docstring(parent, n)}
        consts |= {"".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values)
                   for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)}
        strings |= consts
        if any(isinstance(n, ast.Name) and n.id == "expect_rule" for n in ast.walk(tree)):
            op_rows.append(frozenset(consts))
    return frozenset(strings), tuple(op_rows)


OP_RULE_RE = re.compile(r"QNNEMU-([A-Z][A-Za-z0-9]*)-([a-z0-9-]+)")


def is_tested(rule: str) -> bool:
    """An id is tested when a test string constant names it as a whole word; an op rule
    ``QNNEMU-<op type>-<suffix>`` also when an ``expect_rule`` module (an op negative table) has
    both ``<op type>`` and ``<suffix>`` as string constants; an op template
    ``QNNEMU-{op}-<suffix>`` when a test names ``QNNEMU-<op type>-<suffix>`` for some op type, or
    an ``expect_rule`` module has ``<suffix>`` as a string constant."""
    strings, op_rows = asserted_strings()
    if "{op}" not in rule:
        word = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(rule)}(?![A-Za-z0-9-])")
        if any(rule in s and word.search(s) for s in strings):
            return True
        op_rule = OP_RULE_RE.fullmatch(rule)
        return op_rule is not None and any({op_rule[1], op_rule[2]} <= rows for rows in op_rows)
    prefix, suffix = rule.split("{op}-", 1)
    word = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(prefix)}[A-Z][A-Za-z0-9]*-{re.escape(suffix)}(?![A-Za-z0-9-])")
    return any(suffix in rows for rows in op_rows) or any(suffix in s and word.search(s) for s in strings)


def template_matches(template: str, rule: str) -> bool:
    """Whether explicit id ``rule`` is one of ``template``'s (``{op}``: an op type)."""
    if "{op}" not in template:
        return template == rule
    prefix, suffix = template.split("{op}", 1)
    return re.fullmatch(re.escape(prefix) + r"[A-Z][A-Za-z0-9]*" + re.escape(suffix), rule) is not None


@functools.lru_cache(maxsize=1)
def literal_codes() -> dict[str, frozenset[str]]:
    """id -> the ``Q.QNN_..._ERROR_...`` codes its raise sites name: an argument of the call the
    id constant is an argument of (``QnnError(Q.X, ..., rule="id")``, ``_bad(func, "id", ...,
    Q.X)``), or the value of a ``{"id": Q.X}`` table."""
    codes: dict[str, set[str]] = {}
    for mod in _modules():
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and ID_RE.fullmatch(node.value)):
                continue
            owner = mod.parent.get(node)
            if isinstance(owner, ast.keyword):
                owner = mod.parent.get(owner)
            if isinstance(owner, ast.Call):
                # ``arg_code=``: the code of another rule checked by the same helper (a NULL list)
                values = list(owner.args) + [k.value for k in owner.keywords if k.arg != "arg_code"]
            elif isinstance(owner, ast.Dict) and node in owner.keys:
                values = [owner.values[owner.keys.index(node)]]
            else:
                continue
            for v in values:
                if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "Q" \
                        and "_ERROR_" in v.attr:
                    codes.setdefault(node.value, set()).add(v.attr)
    return {rule: frozenset(names) for rule, names in codes.items()}
