"""The prepared plan in a context binary (format version 3; docs/context-binary.md "Sequencing and
data paging"): QNN HTP backend documentation, "QNN Context Binary size" -- "the Context Binary must
also need to store information about the sequence of operations and the information about data
paging (which operation needs to be written to DDR and which needs to be brought back into VTCM
during execution)".

``encode(plan)`` turns the ``PreparedPlan`` graphFinalize made (qnnemu/htp/plan_types.py: the
runlist of steps with their schedule, the VTCM blocks with their offsets, the spills and fills,
the tilings) into the graph's ``"plan"`` record; ``decode`` checks a record field by field (types
and ranges from the dataclasses' own annotations, indices against the graph) and rebuilds the
plan, which the loader installs instead of preparing the graph again.  Steps and blocks are
stored as columns + rows (the field names once): a step costs a few hundred bytes of JSON
(docs/context-binary.md "Size effects").

``describe(plan)`` is the sequence and paging summary ``qnnemu-context-binary-utility`` prints.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ...htp.plan_types import PLAIN, STEP_KINDS, TCM, Block, PreparedPlan, Step, Tiling
from .format import _Bad

# Bounds for values read from a binary (a corrupted record must never drive an allocation).
_MAX_INT = 2**63 - 1
_TABLES = {"steps": Step, "blocks": Block}     # stored as {"columns": [...], "rows": [[...], ...]}
_NESTED = {"tilings": Tiling}                  # stored as a list of objects


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else 0.0
    return int(value)


def encode(plan: PreparedPlan) -> dict:
    """The ``"plan"`` record of a graph (plain JSON types; deterministic)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(PreparedPlan):
        value = getattr(plan, f.name)
        if f.name in _TABLES:
            cls = _TABLES[f.name]
            columns = [c.name for c in dataclasses.fields(cls)]
            out[f.name] = {"columns": columns,
                           "rows": [[_plain(getattr(item, c)) for c in columns] for item in value]}
        elif f.name in _NESTED:
            out[f.name] = [_plain(dataclasses.asdict(item)) for item in value]
        else:
            out[f.name] = _plain(value)
    return out


# ------------------------------------------------------------------------------ decoding
def _check(value: Any, annotation: str, path: str) -> Any:
    """``value`` checked against a dataclass field annotation (the annotations of
    plan_types.py: int, str, bool, dict, X | None, list[X], tuple[int, int], dict[str, str])."""
    annotation = annotation.replace(" ", "")
    if annotation.endswith("|None"):
        return None if value is None else _check(value, annotation[:-5], path)
    if annotation == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not -_MAX_INT <= value <= _MAX_INT:
            raise _Bad(f"{path}: expected an integer, got {value!r:.40}")
        return value
    if annotation == "str":
        if not isinstance(value, str):
            raise _Bad(f"{path}: expected a string, got {value!r:.40}")
        return value
    if annotation == "bool":
        if not isinstance(value, bool):
            raise _Bad(f"{path}: expected true/false, got {value!r:.40}")
        return value
    if annotation in ("dict", "dict[str,str]"):
        if not isinstance(value, dict):
            raise _Bad(f"{path}: expected an object, got {value!r:.40}")
        for k, v in value.items():
            if annotation == "dict[str,str]" and not isinstance(v, str):
                raise _Bad(f"{path}.{k}: expected a string, got {v!r:.40}")
            if annotation == "dict" and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise _Bad(f"{path}.{k}: expected a number, got {v!r:.40}")
        return dict(value)
    if annotation == "tuple[int,int]":
        if not isinstance(value, list) or len(value) != 2:
            raise _Bad(f"{path}: expected a pair of integers, got {value!r:.40}")
        return (_check(value[0], "int", f"{path}[0]"), _check(value[1], "int", f"{path}[1]"))
    if annotation.startswith("list[") and annotation.endswith("]"):
        if not isinstance(value, list):
            raise _Bad(f"{path}: expected a list, got {value!r:.40}")
        inner = annotation[5:-1]
        return [_check(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
    raise _Bad(f"{path}: no reader for a field of type {annotation}")   # (a new plan field: never silent)


def _record(cls, values: dict, path: str):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue            # a field the writer did not have: its default
        kwargs[f.name] = _check(values[f.name], str(f.type), f"{path}.{f.name}")
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise _Bad(f"{path}: unknown field(s) {unknown}")
    try:
        return cls(**kwargs)
    except TypeError as e:      # a required field missing
        raise _Bad(f"{path}: {e}") from None


def _table(value: Any, cls, path: str, limit: int) -> list:
    if not isinstance(value, dict) or set(value) != {"columns", "rows"}:
        raise _Bad(f"{path}: expected {{\"columns\": [...], \"rows\": [...]}}")
    columns, rows = value["columns"], value["rows"]
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or \
            len(set(columns)) != len(columns):
        raise _Bad(f"{path}.columns: expected distinct field names")
    if not isinstance(rows, list) or len(rows) > limit:
        raise _Bad(f"{path}.rows: expected a list of at most {limit} rows")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(columns):
            raise _Bad(f"{path}.rows[{i}]: expected {len(columns)} values")
        out.append(_record(cls, dict(zip(columns, row)), f"{path}.rows[{i}]"))
    return out


def decode(value: Any, path: str, graph_name: str, node_count: int, limit: int) -> PreparedPlan:
    """The plan of a ``"plan"`` record, checked: every field typed, step indices in order,
    node indices within the graph's ``node_count`` nodes, references between steps and blocks
    inside the plan.  ``limit`` bounds the number of steps and blocks (the metadata's size)."""
    if not isinstance(value, dict):
        raise _Bad(f"{path}: expected an object")
    values = dict(value)
    tables = {}
    for name, cls in _TABLES.items():
        tables[name] = _table(values.pop(name, {"columns": [], "rows": []}), cls, f"{path}.{name}", limit)
    nested = {}
    for name, cls in _NESTED.items():
        items = values.pop(name, [])
        if not isinstance(items, list) or len(items) > limit:
            raise _Bad(f"{path}.{name}: expected a list of at most {limit} objects")
        nested[name] = [_record(cls, v if isinstance(v, dict) else {"": v}, f"{path}.{name}[{i}]")
                        for i, v in enumerate(items)]
    plan = _record(PreparedPlan, values, path)
    plan.steps, plan.blocks, plan.tilings = tables["steps"], tables["blocks"], nested["tilings"]
    if plan.graph != graph_name:
        raise _Bad(f"{path}.graph: '{plan.graph}' is not the graph's name '{graph_name}'")
    n = len(plan.steps)
    names = set()
    for b in plan.blocks:
        if b.kind not in (TCM, PLAIN) or b.name in names:
            raise _Bad(f"{path}.blocks: block '{b.name}' has kind {b.kind!r} or is listed twice")
        names.add(b.name)
        for k in (b.first_step, b.last_step):
            if k is not None and not 0 <= k < n:
                raise _Bad(f"{path}.blocks: block '{b.name}' names step {k} of {n}")
    for i, s in enumerate(plan.steps):
        where = f"{path}.steps.rows[{i}]"
        if s.index != i:
            raise _Bad(f"{where}.index: {s.index}, expected {i} (the runlist order)")
        if s.kind not in STEP_KINDS:
            raise _Bad(f"{where}.kind: {s.kind!r} is not one of {list(STEP_KINDS)}")
        for k in (s.node_index, s.tile_node):
            if k is not None and not 0 <= k < node_count:
                raise _Bad(f"{where}: node index {k} outside the graph's {node_count} nodes")
        for k in (s.pair, *s.deps, *s.overlap_steps, *s.overlap_wait_steps):
            if k is not None and not 0 <= k < n:
                raise _Bad(f"{where}: step reference {k} outside the {n} steps")
    for k in plan.prescheduled_order:
        if not 0 <= k < node_count:
            raise _Bad(f"{path}.prescheduled_order: node index {k} outside the graph's {node_count} nodes")
    for a, b in plan.constraints:
        if not (0 <= a < n and 0 <= b < n):
            raise _Bad(f"{path}.constraints: ({a}, {b}) outside the {n} steps")
    return plan


# ------------------------------------------------------------------------------ summary
def describe(plan: PreparedPlan) -> dict:
    """The sequence and data paging of a plan, as ``qnnemu-context-binary-utility`` reports them:
    the runlist (one line per step: index, kind, name, resource and unit, start..end cycles) and
    which tensors stay in VTCM, which are paged out to DDR (spilled) and brought back (filled),
    which live in DDR (graph I/O, weights) and which ops are tiled."""
    spilled = sorted({s.name.rsplit(":", 1)[0] for s in plan.steps if s.kind == "spill" and s.tile is None})
    filled = sorted({s.name.rsplit(":", 1)[0] for s in plan.steps if s.kind == "fill" and s.tile is None})
    paged = set(spilled) | set(filled)
    resident = sorted(b.name for b in plan.blocks
                      if b.kind == TCM and b.role == "tensor" and b.name not in paged)
    return {
        "sequence": [f"{s.index} {s.kind} {s.name} {s.resource}{s.thread} {s.start_cycle}..{s.end_cycle}"
                     for s in plan.steps],
        "runlist": list(plan.prescheduled_order),
        "paging": {"vtcm_resident": resident, "spilled": spilled, "filled": filled,
                   "ddr": sorted(b.name for b in plan.blocks if b.kind == PLAIN and b.role == "tensor"),
                   "tiled": [t.node for t in plan.tilings],
                   "spill_bytes": plan.spill_bytes, "fill_bytes": plan.fill_bytes,
                   "spill_fill_buffer_bytes": plan.spill_fill_buffer_bytes,
                   "peak_vtcm_bytes": plan.peak_vtcm_bytes, "vtcm_budget_bytes": plan.vtcm_budget_bytes},
        "total_cycles": plan.total_cycles,
        "schedule_policy": plan.schedule_policy,
    }
