"""The rule registry (qnnemu/rules.py ``RULES``: ``ERROR_RULES`` and ``WARNING_RULES``) is exact.

What "raised" and "tested" mean (the scans are tests/rule_scan.py's):

- **raised**: the id is a string constant of qnnemu/*.py (rules.py, the registry, excepted), or an
  f-string starting with ``QNNEMU-`` makes it -- ``{op}`` (the op's type) kept as a template,
  every other placeholder resolved through the calls of the function around it (a factory such as
  ``rule_error(op, "axis", ...)``, ``_g_err(..., "graph-num-cores")``), a ``for`` loop over
  constants or a local variable assigned constants.  A placeholder the scan cannot resolve fails
  ``test_every_rule_id_placeholder_resolves``.
- **registered**: the id is a key of ``RULES``; an op rule id ``QNNEMU-<OpType>-<suffix>`` also
  when ``QNNEMU-{op}-<suffix>`` is one, a ``QNNEMU-{op}-<suffix>`` template also when explicit
  ids of it are (the per-op warning rules of ``WARNING_RULES``).
- **tested**: a test module (this one and rule_scan.py excepted) holds the id as a whole word in
  a string constant that is not a docstring -- the ids of ``assert_rule`` / ``assert_warning`` /
  ``expect_rule`` calls, of ``err.rule ==`` assertions and of the negative tables (test_negative's
  ``CASES``, the feature modules' ``RULE_CASES`` / ``RULE_IDS``); an op rule
  ``QNNEMU-<OpType>-<suffix>`` also when a module calling optest's ``expect_rule`` (which asserts
  ``QNNEMU-<op_type>-<rule>``) has both ``<OpType>`` and ``<suffix>`` as string constants (a row
  of its negative table), a ``QNNEMU-{op}-<suffix>`` template when such a module has ``<suffix>``
  or a test names ``QNNEMU-<OpType>-<suffix>``.

Zero exceptions: every raised id is registered, every registered id is raised and tested.
"""
from __future__ import annotations

import pathlib
import re

import pytest
import rule_scan

from qnnemu import rules
from qnnemu.errors import QnnError
from qnnemu.headers import Q, constants
from qnnemu.location import Location

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "validation.md"


def _registered(rule: str) -> bool:
    if rule in rules.RULES or rules.rule_of(rule) is not None:
        return True
    return "{op}" in rule and any(rule_scan.template_matches(rule, known) for known in rules.RULES)


def _raised(rule: str, raised: dict) -> bool:
    if rule in raised:
        return True
    return "{op}" not in rule and any("{op}" in t and rule_scan.template_matches(t, rule) for t in raised)


def test_every_rule_id_placeholder_resolves():
    assert rule_scan.unresolved() == (), \
        f"f-string rule ids whose placeholder the scan cannot resolve (write them so it can): {rule_scan.unresolved()}"


def test_every_raised_rule_id_is_registered():
    raised = rule_scan.raised_ids()
    assert len(raised) > 300, f"the scan finds the ids qnnemu raises ({len(raised)} found)"
    missing = {rule: sorted(places)[:3] for rule, places in raised.items() if not _registered(rule)}
    assert not missing, f"rule ids raised in qnnemu/ but not registered in qnnemu/rules.py: {missing}"


def test_every_registered_rule_is_raised():
    raised = rule_scan.raised_ids()
    stale = sorted(rule for rule in rules.RULES if not _raised(rule, raised))
    assert not stale, f"registered rule ids that qnnemu/ never raises: {stale}"


def test_every_registered_rule_is_tested():
    untested = sorted(rule for rule in rules.RULES if not rule_scan.is_tested(rule))
    assert not untested, f"registered rule ids without a negative test (see this module's docstring): {untested}"


def test_the_registry_holds_both_severities():
    errors = {r for r, rule in rules.RULES.items() if rule.severity == "error"}
    warnings = {r for r, rule in rules.RULES.items() if rule.severity == "warning"}
    assert errors == set(rules.ERROR_RULES), "the error rules of RULES are ERROR_RULES"
    assert warnings == set(rules.WARNING_RULES), "the warning rules of RULES are WARNING_RULES"
    assert not errors & warnings, f"an id is an error and a warning rule: {sorted(errors & warnings)}"


@pytest.mark.parametrize("rule", sorted(rules.ERROR_RULES))
def test_error_rule_entry(rule):
    names, what = rules.ERROR_RULES[rule]
    assert re.fullmatch(r"QNNEMU-(\{op\}-)?[A-Za-z0-9]+(-[A-Za-z0-9]+)*", rule), f"{rule}: a well-formed id"
    assert names, f"{rule}: at least one QNN error code"
    for name in names:
        assert re.fullmatch(r"QNN_\w*ERROR_\w+", name) and name in constants(), \
            f"{rule}: {name} is a QNN error code of the headers"
        assert constants()[name] != Q.QNN_SUCCESS, f"{rule}: {name} is not QNN_SUCCESS"
    assert len(set(names)) == len(names), f"{rule}: each code once"
    assert what and "\n" not in what and what == what.strip(), f"{rule}: a one-line description"
    registered = rules.RULES[rule]
    assert (registered.severity, registered.code) == ("error", constants()[names[0]]), \
        f"{rule}: RULES holds it as an error rule with its first code"


def test_registered_codes_include_the_raise_sites_literal_codes():
    """Where a raise site names its code (``Q.QNN_..._ERROR_...`` next to the id), the registry
    lists that code (by value: components share values) for the id."""
    wrong = {}
    for rule, names in rule_scan.literal_codes().items():
        if rule in rules.ERROR_RULES:
            registered = {constants()[n] for n in rules.ERROR_RULES[rule][0]}
            missing = {n for n in names if constants()[n] not in registered}
            if missing:
                wrong[rule] = sorted(missing)
    assert not wrong, f"codes raise sites return that the registry does not list: {wrong}"


def test_error_takes_the_registered_code():
    loc = Location("graphAddNode").field("opConfig").field("v1").index("params", 0)
    err = rules.error(loc, "QNNEMU-op-param-value", "1.5 is not a whole number")
    assert isinstance(err, QnnError) and err.code == Q.QNN_GRAPH_ERROR_INVALID_OP_CONFIG, \
        f"error() without a code: the registered one ({err.code})"
    assert err.rule == "QNNEMU-op-param-value" and "graphAddNode: opConfig.v1.params[0]: 1.5" in str(err), \
        f"error() names the rule, the function and the path: {err}"
    op_err = rules.error(Location("graphAddNode"), "QNNEMU-Conv2d-stride", "bad stride")
    assert op_err.code == rules.RULES["QNNEMU-{op}-stride"].code, \
        "an op rule id takes the code of its QNNEMU-{op}- entry"
    assert rules.rule_of("QNNEMU-Conv2d-stride") is rules.RULES["QNNEMU-{op}-stride"], "rule_of resolves op ids"
    assert rules.rule_of("QNNEMU-no-such-rule") is None, "rule_of of an unknown id"
    explicit = rules.error(loc, "QNNEMU-op-param-value", "x", code=Q.QNN_BACKEND_ERROR_NOT_SUPPORTED)
    assert explicit.code == Q.QNN_BACKEND_ERROR_NOT_SUPPORTED, "an explicit code wins over the registered one"


def test_register_error_refuses_another_code_for_a_known_id():
    known = rules.RULES["QNNEMU-graphFinalize-empty"]
    assert rules.register_error(known.id, known.codes, known.description) == known, \
        "registering the same rule again is a no-op"
    with pytest.raises(ValueError, match="QNNEMU-graphFinalize-empty"):
        rules.register_error("QNNEMU-graphFinalize-empty", Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT, "another code")
    assert rules.RULES["QNNEMU-graphFinalize-empty"] == known, "a refused registration changes nothing"


def test_validation_doc_lists_the_error_rules():
    """docs/validation.md's error rule table is ``error_rules_table()`` (regenerate it with
    ``python3 -c "from qnnemu.rules import error_rules_table; print(error_rules_table())"``)."""
    doc = DOC.read_text()
    assert rules.error_rules_table() in doc, "docs/validation.md has the generated table, as ERROR_RULES is now"
    section = doc.split("## Error rules", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(QNNEMU-[A-Za-z0-9{}_-]+)` \|", section, re.M)
    assert listed == list(rules.ERROR_RULES), \
        f"the section lists exactly the registered ids: extra {sorted(set(listed) - set(rules.ERROR_RULES))}, " \
        f"missing {sorted(set(rules.ERROR_RULES) - set(listed))}"
