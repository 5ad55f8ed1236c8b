"""Graph priority -> HTP thread priorities (QNN HTP backend documentation, "Graph Priority"; QNN
"HTP Yielding and Pre-Emption", table "QNN HTP Priority Mapping").

A graph runs with a ``Qnn_Priority_t``: ``QNN_GRAPH_CONFIG_OPTION_PRIORITY`` at graphCreate /
graphSetConfig, or ``QNN_CONTEXT_CONFIG_OPTION_PRIORITY`` of its context (contextCreate; at
contextSetConfig "all graph priorities in this context are updated"), ``QNN_PRIORITY_DEFAULT``
when neither is given.  The documentation maps a priority level X to an HTP thread priority Y: the
HMX thread(s) get Y, the HVX thread(s) Y + 1 (a higher number is a lower execution priority).  Y is
also the Hexagon OS thread priority the graph acquires VTCM with (QNN "HTP Yielding and
Pre-Emption"; on Windows all levels map to 0xc0 under MCDM -- the emulator models the Hexagon OS
mapping).

``thread_priorities(graph) -> (hmx, hvx)`` is the observable result; Graph.finalize and
Graph.execute log it at INFO.  Scheduling among executes by these priorities (yielding,
pre-emption) is qnnemu/core/scheduling.py's.

The documentation restricts ``QNN_PRIORITY_NORMAL_HIGH`` and ``QNN_PRIORITY_HIGH`` "from general
developers"; the emulator has no notion of privileged clients, so it accepts them and says so in
the log (``PriorityLevel.restricted``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..headers import Q
from ..location import Location
from ..rules import fail

HVX_PRIORITY_OFFSET = 1   # "HVX thread(s) are assigned priority Y + 1"


@dataclass(frozen=True)
class PriorityLevel:
    name: str                 # Qnn_Priority_t enumerator (QNN_PRIORITY_DEFAULT is NORMAL's alias)
    value: int                # Qnn_Priority_t value
    hexagon_os_priority: int  # QNN "HTP Yielding and Pre-Emption", "QNN HTP Priority Mapping"
    # The next two: QNN HTP backend documentation, "QNN to HTP Thread Priority Mapping".
    hmx_thread_priority: int
    hvx_thread_priority: int
    restricted: bool          # "restricted from general developers"


# Qnn_Priority_t -> the row of the two priority tables.
PRIORITY_TABLE: dict[int, PriorityLevel] = {
    Q.QNN_PRIORITY_LOW: PriorityLevel("QNN_PRIORITY_LOW", Q.QNN_PRIORITY_LOW, 0xC5, 0xC5, 0xC6, False),
    Q.QNN_PRIORITY_NORMAL: PriorityLevel("QNN_PRIORITY_NORMAL", Q.QNN_PRIORITY_NORMAL, 0xC0, 0xC0, 0xC1, False),
    Q.QNN_PRIORITY_NORMAL_HIGH: PriorityLevel("QNN_PRIORITY_NORMAL_HIGH", Q.QNN_PRIORITY_NORMAL_HIGH,
                                              0xBD, 0xBD, 0xBE, True),
    Q.QNN_PRIORITY_HIGH: PriorityLevel("QNN_PRIORITY_HIGH", Q.QNN_PRIORITY_HIGH, 0xBB, 0xBB, 0xBC, True),
}
DEFAULT_PRIORITY = Q.QNN_PRIORITY_DEFAULT   # "set to QNN_PRIORITY_DEFAULT by default"


# The vendor's backend takes any Qnn_Priority_t in 0..500 (QNN 2.50 adds LOWEST 0, NORMAL_LOW 50,
# HIGH_PLUS 300, CRITICAL 400, CRITICAL_PLUS/HIGHEST 500) and refuses the rest ("Valid range:
# 0-500"); the documentation's mapping table has four rows.
MAX_PRIORITY = 500


def table_row(value: int) -> PriorityLevel | None:
    """The mapping row a priority in 0..500 runs with: its own row, else the row of the nearest
    documented level below it (NORMAL_LOW 50 -> LOW, HIGH_PLUS..CRITICAL_PLUS -> HIGH)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_PRIORITY:
        return None
    return PRIORITY_TABLE[max(v for v in PRIORITY_TABLE if v <= value)]


def priority_level(value: int, func: str, path: str, code: int = Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT) -> PriorityLevel:
    """The table row of a Qnn_Priority_t; ``QNN_PRIORITY_UNDEFINED`` means "not set" (the
    default); a value in 0..500 without a row runs with the nearest documented level below it
    (``table_row``).  Any other value is refused (rule QNNEMU-priority-value): the HTP has no
    thread priority for it."""
    if value == Q.QNN_PRIORITY_UNDEFINED:
        value = DEFAULT_PRIORITY
    # configs restored from a context binary are data: anything but an int has no row either
    level = table_row(value)
    if level is None:
        known = ", ".join(f"{lv.name} ({lv.value})" for lv in PRIORITY_TABLE.values())
        fail(Location(func).field(path), "QNNEMU-priority-value",
             f"Qnn_Priority_t {value!r} has no HTP thread priority (known: {known})", code=code)
    return level


def graph_priority(graph) -> tuple[int, str]:
    """(Qnn_Priority_t, where it came from) of a graph: its own config, else its context's,
    else the default.  Reads the configs defensively (missing dicts, missing context)."""
    value = (getattr(graph, "configs", None) or {}).get("priority")
    if value is not None:
        return value, "graph config QNN_GRAPH_CONFIG_OPTION_PRIORITY"
    ctx = getattr(graph, "context", None)
    value = (getattr(ctx, "configs", None) or {}).get("priority")
    if value is not None:
        return value, "context config QNN_CONTEXT_CONFIG_OPTION_PRIORITY"
    return DEFAULT_PRIORITY, "default"


def level_of(graph, func: str = "graphFinalize") -> PriorityLevel:
    value, source = graph_priority(graph)
    return priority_level(value, func, f"graph '{getattr(graph, 'name', '?')}': priority ({source})")


def thread_priorities(graph, func: str = "graphFinalize") -> tuple[int, int]:
    """(HMX thread priority, HVX thread priority) the graph runs with."""
    level = level_of(graph, func)
    return level.hmx_thread_priority, level.hvx_thread_priority


def describe(graph, func: str = "graphFinalize") -> str:
    """The log line: priority level, source, thread priorities."""
    value, source = graph_priority(graph)
    level = level_of(graph, func)
    note = " (restricted from general developers; accepted by the emulator)" if level.restricted else ""
    return (f"{func}: graph '{getattr(graph, 'name', '?')}': priority {level.name} ({level.value}) from the "
            f"{source}{note}: HMX thread priority 0x{level.hmx_thread_priority:x}, HVX thread priority "
            f"0x{level.hvx_thread_priority:x} (Hexagon OS thread priority 0x{level.hexagon_os_priority:x})")


__all__ = ["PRIORITY_TABLE", "PriorityLevel", "DEFAULT_PRIORITY", "HVX_PRIORITY_OFFSET", "priority_level", "table_row",
           "MAX_PRIORITY",
           "graph_priority", "level_of", "thread_priorities", "describe"]
