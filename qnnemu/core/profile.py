"""QnnProfile.h + HTP/QnnHtpProfile.h: profile objects, their events and what each value means
(QNN HTP backend documentation, "QNN HTP Profiling": basic profiling, detailed and linting
profiling, optrace, DSP heap profiling).

A ``Profile`` (``profileCreate``) collects the events of the profiled API calls it is passed
to (``graphFinalize``, ``graphExecute``, ``contextCreateFromBinary*``, ``contextFree``).  As
QnnGraph.h/QnnContext.h say of the ``profile`` argument ("a handle being re-used would reset and
is populated with values from the current call"), and as the vendor's HTP backend does, every
profiled call *replaces* the events of the previous one: ``profileGetEvents`` returns the events
of the most recent successful profiled call, as often as it is asked.  A call that fails leaves
the previous events in place.

Event ids are process-wide, start at 1 and are never reused, so a stale id can never alias a
newer event.  An id stays valid until ``profileFree`` or until a later profiled call on the
same handle replaced its events; after that it is reported as stale (INVALID_HANDLE).  Memory
handed out for an event (identifier strings, id arrays, the optrace object) lives as long as
the event.

Where the numbers come from.  Host-side times are measured wall time.  Everything that happens
"on the accelerator" comes from the HTP device model: the graph's prepared plan
(``graph.htp_plan``, qnnemu/htp/plan_types.py: the runlist with each step's cycles, start/end,
wait and overlap cycles) and the clocks of the active performance vote
(``qnnemu.htp.perf.current_clocks()``; the plan's cycles are the cost model's reference
cycles, qnnemu/htp/cost.py, and its schedule runs at the core clock, so microseconds =
cost.cycles_to_us(cycles, clocks, "HVX") = cycles / core MHz).  The model's cycles do not depend
on the host, so two runs of a graph report the same accelerator numbers.

Levels: QNN_PROFILE_LEVEL_BASIC, QNN_PROFILE_LEVEL_DETAILED and the HTP level
QNN_HTP_PROFILE_LEVEL_LINTING (DETAILED plus the per-op linting report).

Events (type, unit, identifier -- the identifiers are the ones of the documentation's showcase
outputs):

graphFinalize (every level)
  FINALIZE (300)  us  "QNN (finalize) time"   wall time of the whole graphFinalize call
  with QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, last:
  TRACE (600)     object  "Schematic"   the graph's schematic: fileName "<graph>_schematic.json",
      data the UTF-8 JSON of ``htp_plan.to_optrace()`` plus "nodes" (``node_table``); the
      context-binary generator's ``--profiling_option optrace`` writes ``<binary>_schematic.bin``

graphExecute (every level, in this order: ``EXECUTE_EVENT_TABLE``)
  GRAPH_NUMBER_OF_HVX_THREADS (8001)      count   "Number of HVX threads used"
      the HVX threads the graph runs with (qnnemu.htp.settings.graph_settings)
  GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC (3001)  us "RPC (execute) time"
      measured: the emulated RPC, the ``Graph.execute`` call that gets the checked buffers
  GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC (3002)   us "QNN accelerator (execute) time"
      measured: the accelerator side of that call, first plan step start to last step end
  GRAPH_EXECUTE_YIELD_COUNT (3009)        count   "Num times yield occured"
      the times the execute yielded to a higher-priority graph at an op boundary
      (qnnemu/core/scheduling.py); when > 0 its sub-event GRAPH_EXECUTE_YIELD_INSTANCE_WAIT_TIME
      (3007, us, "Time waited for pre-empting graphs") is the measured wait over those yields
  GRAPH_EXECUTE_VTCM_ACQUIRE_TIME (3010)  us      "Time for initial VTCM acquire"
  GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME (3011) us  "Time for HVX + HMX power on and acquire"
      the model's resource acquisition (``RESOURCE_ACQUIRE_US``): a graph acquires VTCM and
      powers its HVX (and HMX, when a step of its plan uses HMX) at its first execution; later
      executions keep them (0 us), as in the documentation's showcase averages -- unless the
      device idled past the voted HMX timeout before the execute: then the HMX powers up again
      (``qnnemu.htp.rpc.HMX_POWER_UP_US``, docs/htp-rpc.md)
  GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE (6001) cycles
                          "Accelerator (critical path execute) time (cycles)"
      ``htp_plan.critical_path_cycles``
      LINTING: Input, one NODE sub-event per plan step, Output (see below) with the linting
      sub-events
  GRAPH_EXECUTE_ACCEL_TIME_CYCLE (3003)   cycles  "Accelerator (execute) time (cycles)"
      ``htp_plan.total_cycles`` (the schedule's makespan); an execute with batch multiple n
      ("QNN HTP Variable Batch") reports n runs less the weights they reuse
      (``Schedule.accel_cycles``, qnnemu/htp/rpc.py, docs/htp-rpc.md)
      DETAILED: one NODE (404) sub-event per plan step, in runlist order, unit cycles, value the
      step's cycles, identifier "<step name>:OpId_<k> (cycles)" (``step_label``): k is the
      node's 0-based position in graphAddNode order for op / launch / wait steps (so "fc:OpId_0
      (cycles)", the vendor's format, which ONNX Runtime shows per node) and
      ``len(graph.nodes) + step index`` for the steps the HTP inserts itself (spill, fill:
      "h:spill:OpId_7 (cycles)"); an op split into tiles (docs/htp-prepare.md "Tiling") has one
      sub-event per tile step: its computes under its own k ("mul:tile0:OpId_2 (cycles)"), its
      tile fills and spills as inserted steps ("mul:tile0:fill:OpId_9 (cycles)")
  GRAPH_EXECUTE_ACCEL_TIME_MICROSEC (3004)    us  "Accelerator (execute) time"
      ``total_cycles`` at the core clock of the current clocks
  EXECUTE (400)                               us  "QNN (execute) time"
      measured: wall time of the whole graphExecute call
  with QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE, last:
  TRACE (600)     object  "Optrace"   extended data: a QnnProfile_BackendOpaqueObject_t, fileName
      "<graph>.optrace.json", data the UTF-8 JSON of ``htp_plan.to_optrace()`` plus "nodes" and
      "execution": {"start_us", "end_us", "clocks": {core_mhz, hmx_mhz, bus_mhz, corner},
      "runs": [{"execution", "start_us", "end_us", "accel_start_us", "accel_end_us",
      "total_cycles", "critical_path_cycles", "yields", "vtcm_acquire_us", "power_on_us",
      "batch", "rpc"}]}
      (``*_us``: microseconds since the epoch; the steps' cycle 0 is ``accel_start_us``;
      "rpc" is the execute's modelled RPC on the device's host-thread timeline --
      ``qnnemu.htp.rpc.ExecuteSpan.to_dict()``: issue / device start / device end / return in
      virtual us and the send, DSP wake-up, queue, completion path and return -- or null);
      its plain event data value is the object's length in bytes
  so EXECUTE >= HOST_RPC >= HTP_RPC (measured) for every execution.

LINTING, the "Input OpId_<k>" pseudo-op, then per plan step (NODE (404) cycles "<label>
(cycles)", value the step's own cycles), then the "Output OpId_<k>" pseudo-op, with the numbers
of the documentation's main-thread model over the re-scheduler's schedule (``lint_plan`` /
``lint_schedule``; docs/profiling-tools.md):
  NODE_WAIT (5001)          cycles "Wait (Scheduler) time"   a main-thread entry: the cycles since
      the previous main-thread entry ended; a background step: ready -> start
  NODE_OVERLAP (5002)       cycles "Overlap time"            cycles of its run other steps cover,
      the steps it waits on excluded, with one NODE_CRITICAL_BG_OP_ID (5005) sub-event per
      contributing step (at most ``MAX_CONTRIBUTORS``), unit none, identifier its label, value
      its OpId k
  NODE_WAIT_OVERLAP (5003)  cycles "Overlap (wait) time"     the same over its wait window, with one
      NODE_WAIT_BG_OP_ID (5006) sub-event per contributing step (at most 10)
  NODE_RESOURCEMASK (5004)  none   "Resources: HVX, HMX, DMA"  value the mask of
      ``RESOURCE_BITS`` over the step's resources; identifier "Resources:" alone for a step
      using none of them (CPU work)

contextCreateFromBinary* (every level)
  INIT (100)      us  "QNN (init) time"       wall time of the whole call
  DSP heap profiling (QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED set on the
  context being created, and no other context alive -- the first context):
  BACKEND (1000)  bytes  "DSP:before_context_created"  the DSP heap with no context
contextFree (every level)
  DEINIT (500)    us  "QNN (deinit) time"     wall time of freeing the context and its graphs
  DSP heap profiling (the option set on the freed context, at creation or by contextSetConfig,
  and no other context left -- the last context):
  BACKEND (1000)  bytes  "DSP:after_context_freed"     the DSP heap with no context
  The emulator's DSP heap model (``DSP_HEAP_MODEL``): with no context loaded the DSP heap holds
  the HTP runtime's session (``runtime_bytes``); contexts release everything they allocated, so
  both events report that number.

Timestamps (extended event data ``timestamp``) are microseconds since the Unix epoch at the
start of what the event measures.  Microsecond values are rounded to the nearest integer.
"""
from __future__ import annotations

import bisect
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .. import rules
from ..headers import Q
from ..htp import (
    perf as htp_perf,  # htp_perf.current_clocks: read at call time (tests vary the clocks)
    rpc as htp_rpc,
)
from ..htp.cost import cycles_to_us as reference_cycles_to_us
from ..htp.services import is_background_service
from ..htp.settings import graph_settings
from ..location import Location
from ..rules import fail
from .log import NULL_LOGGER, Logger

LEVEL_NAMES = {
    Q.QNN_PROFILE_LEVEL_BASIC: "BASIC",
    Q.QNN_PROFILE_LEVEL_DETAILED: "DETAILED",
    Q.QNN_HTP_PROFILE_LEVEL_LINTING: "HTP LINTING",
}
# Default QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS: events (sub-events included) one call may store.
DEFAULT_MAX_EVENTS = 1 << 20

US, CYCLES, COUNT, BYTES, OBJECT, NONE = (
    Q.QNN_PROFILE_EVENTUNIT_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_CYCLES, Q.QNN_PROFILE_EVENTUNIT_COUNT,
    Q.QNN_PROFILE_EVENTUNIT_BYTES, Q.QNN_PROFILE_EVENTUNIT_OBJECT, Q.QNN_PROFILE_EVENTUNIT_NONE)


@dataclass(frozen=True)
class EventKind:
    """One row of the event tables: what an event is called and measured in."""
    key: str
    type: int
    unit: int
    identifier: str


# The graphExecute events, in the order they are reported (QNN HTP backend documentation, "QNN HTP
# Profiling", "Execute Stats").
EXECUTE_EVENT_TABLE = (
    EventKind("hvx_threads", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_NUMBER_OF_HVX_THREADS, COUNT,
              "Number of HVX threads used"),
    EventKind("host_rpc", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC, US, "RPC (execute) time"),
    EventKind("htp_rpc", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC, US,
              "QNN accelerator (execute) time"),
    EventKind("yields", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_COUNT, COUNT, "Num times yield occured"),
    EventKind("vtcm_acquire", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_VTCM_ACQUIRE_TIME, US,
              "Time for initial VTCM acquire"),
    EventKind("power_on", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_RESOURCE_POWER_UP_TIME, US,
              "Time for HVX + HMX power on and acquire"),
    EventKind("critical_cycles", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_CRITICAL_ACCEL_TIME_CYCLE, CYCLES,
              "Accelerator (critical path execute) time (cycles)"),
    EventKind("accel_cycles", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE, CYCLES,
              "Accelerator (execute) time (cycles)"),
    EventKind("accel_us", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC, US,
              "Accelerator (execute) time"),
    EventKind("execute", Q.QNN_PROFILE_EVENTTYPE_EXECUTE, US, "QNN (execute) time"),
)
def _yield_record(sched) -> int | list[dict]:
    """The optrace run's ``yields``: the pre-emption spans the scheduler recorded (the profile
    viewer draws them on the run's lanes), else the count."""
    spans = getattr(sched, "spans", ())
    if spans:
        return [{"start_us": a, "end_us": b} for a, b in spans]
    return int(getattr(sched, "yields", 0))


YIELD_WAIT_EVENT = EventKind("yield_wait", Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_YIELD_INSTANCE_WAIT_TIME, US,
                             "Time waited for pre-empting graphs")
OPTRACE_EVENT = EventKind("optrace", Q.QNN_PROFILE_EVENTTYPE_TRACE, OBJECT, "Optrace")
SCHEMATIC_EVENT = EventKind("schematic", Q.QNN_PROFILE_EVENTTYPE_TRACE, OBJECT, "Schematic")


def node_table(graph) -> list[dict]:
    """The graph's nodes for the optrace / schematic documents' ``nodes``: index, name, QNN op
    type, package and the names of the tensors each reads and writes (the topology the viewer's
    --zoom_start/--zoom_end, flow events and htp_json use)."""
    def names(tids) -> list[str]:
        return [graph.tensor(t).name for t in tids if t is not None]
    return [{"index": k, "name": n.name, "type": n.op_type, "package": n.package, "inputs": names(n.inputs),
             "outputs": names(n.outputs)} for k, n in enumerate(graph.nodes)]


def tensor_table(graph) -> dict[str, dict]:
    """The graph's tensors the nodes use: name -> {"type": Qnn_TensorType_t, "data_type":
    Qnn_DataType_t, "dims"} (the optrace / schematic documents' ``tensors``)."""
    out: dict[str, dict] = {}
    for n in graph.nodes:
        for tid in (*n.inputs, *n.outputs):
            if tid is not None:
                t = graph.tensor(tid)
                out.setdefault(t.name, {"type": int(t.type), "data_type": int(t.dtype),
                                        "dims": [int(d) for d in t.dims]})
    return out

# The linting sub-events of one step (QNN HTP backend documentation, "Detailed and Linting
# Profiling").
LINTING_EVENT_TABLE = (
    EventKind("wait", Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT, CYCLES, "Wait (Scheduler) time"),
    EventKind("overlap", Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_OVERLAP, CYCLES, "Overlap time"),
    EventKind("overlap_wait", Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT_OVERLAP, CYCLES, "Overlap (wait) time"),
    EventKind("resources", Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_RESOURCEMASK, NONE, "Resources:"),
)
# Sub-events naming the steps that contributed to an overlap entry.
CONTRIBUTOR_TYPES = {"overlap": Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_CRITICAL_BG_OP_ID,
                     "overlap_wait": Q.QNN_HTP_PROFILE_EVENTTYPE_NODE_WAIT_BG_OP_ID}
# "Each of the overlap entries also has several indented lines (10 maximum)".
MAX_CONTRIBUTORS = 10
# NODE_RESOURCEMASK bits (the HTP resources a step occupies; CPU work is none of them).
RESOURCE_BITS = {"HVX": 1, "HMX": 2, "DMA": 4}

# The emulator's resource-acquisition model for a graph's first execution (microseconds):
# acquiring its VTCM, powering on the HVX, and the HMX when its plan has an HMX step.
RESOURCE_ACQUIRE_US = {"VTCM": 12, "HVX": 25, "HMX": htp_rpc.HMX_POWER_UP_US}

# The emulator's DSP heap model (DSP heap profiling): bytes of the DSP heap with no context
# loaded (the HTP runtime's session: code, scheduler, perf client).
DSP_HEAP_MODEL = {"runtime_bytes": 3 << 20}
DSP_PROFILING_OPTION = "QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED"
DSP_BEFORE_CONTEXT_CREATED = "DSP:before_context_created"
DSP_AFTER_CONTEXT_FREED = "DSP:after_context_freed"

_EVENT_IDS = itertools.count(1)
_EVENTS: dict[int, ProfileEvent] = {}
_EVENTS_LOCK = threading.Lock()
_HIGHEST_ID = [0]


@dataclass
class ProfileEvent:
    """One event: ``value`` is an int (uint64) or a float (reported as a double when read as
    extended data, rounded in QnnProfile_EventData_t).  A unit OBJECT event carries its bytes
    in ``payload`` (and ``file_name``); its ``value`` is their length."""

    type: int
    unit: int
    value: int | float
    identifier: str | None
    timestamp_us: int = 0
    sub: list[ProfileEvent] = field(default_factory=list)
    id: int = 0
    payload: bytes | None = None
    file_name: str | None = None
    # Opaque storage for the ABI layer (C copies of the identifier, id arrays); dropped with
    # the event.  The core never looks inside.
    abi: dict = field(default_factory=dict, repr=False)

    def walk(self):
        yield self
        for s in self.sub:
            yield from s.walk()


def micros(seconds: float) -> int:
    return max(0, round(seconds * 1e6))


def cycles_to_us(n: int, clocks) -> int:
    """Reference cycles of the plan's schedule (qnnemu/htp/cost.py: one time axis for every
    resource) as whole microseconds at ``clocks`` (qnnemu.htp.perf.Clocks): the schedule runs at
    the core clock."""
    return max(0, round(reference_cycles_to_us(n, clocks, "HVX")))


def event(kind: EventKind, value, timestamp_us: int, identifier: str | None = None) -> ProfileEvent:
    return ProfileEvent(kind.type, kind.unit, value, kind.identifier if identifier is None else identifier,
                        timestamp_us)


def _now_us() -> int:
    return time.time_ns() // 1000


def lookup_event(event_id: int, code: int, func: str) -> ProfileEvent:
    """The live event behind ``event_id`` or QnnError(code)."""
    with _EVENTS_LOCK:
        ev = _EVENTS.get(event_id)
        highest = _HIGHEST_ID[0]
    if ev is not None:
        return ev
    if 0 < event_id <= highest:
        fail(Location(func), "QNNEMU-profile-event-stale",
             f"eventId {event_id} is stale: its profile was freed or a later "
             f"profiled call on the same handle replaced its events", code=code)
    fail(Location(func), "QNNEMU-profile-event-unknown", f"eventId {event_id} does not identify a profiling event",
         code=code)


class Profile:
    """A profile handle's object: level, configuration and the current events."""

    def __init__(self, backend, level: int, logger: Logger | None = None):
        self.backend = backend
        self.level = level
        self.log = logger or NULL_LOGGER
        self.max_events = DEFAULT_MAX_EVENTS
        self.optrace = False
        self.events: list[ProfileEvent] = []
        self.freed = False
        self.active_calls = 0
        self.lock = threading.Lock()
        # Opaque storage for the ABI layer (the C array handed out by profileGetEvents).
        self.abi: dict = {}

    @property
    def detailed(self) -> bool:
        return self.level in (Q.QNN_PROFILE_LEVEL_DETAILED, Q.QNN_HTP_PROFILE_LEVEL_LINTING)

    @property
    def linting(self) -> bool:
        return self.level == Q.QNN_HTP_PROFILE_LEVEL_LINTING

    # ---- configuration ----------------------------------------------------------------
    def set_max_events(self, n: int, func: str, path: str) -> None:
        if n < 1:
            fail(Location(func).field(f"{path}.numMaxEvents"), "QNNEMU-profileSetConfig-max-events",
                 f"{n}: at least 1 event must fit", code=Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT)
        self.max_events = n

    def set_optrace(self, enable: bool, func: str, path: str) -> None:
        if enable and not self.detailed:
            # As the vendor backend: op traces exist on the DETAILED level only (QnnProfile.h).
            fail(Location(func).field(f"{path}.enableOptrace"), "QNNEMU-profileSetConfig-optrace-level",
                 "optrace needs a DETAILED (or HTP linting) "
                 f"profile; this one is {LEVEL_NAMES.get(self.level, self.level)}",
                 code=Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT)
        self.optrace = enable

    def check_not_in_use(self, func: str, what: str) -> None:
        if self.active_calls:
            fail(Location(func).field(what), "QNNEMU-profile-in-use",
                 f"the profile is in use by {self.active_calls} running API "
                 f"call(s)", code=Q.QNN_PROFILE_ERROR_HANDLE_IN_USE)

    # ---- events -------------------------------------------------------------------------
    def _drop_events(self) -> None:
        with _EVENTS_LOCK:
            for top in self.events:
                for ev in top.walk():
                    _EVENTS.pop(ev.id, None)
                    ev.abi.clear()
        self.events = []
        self.abi.clear()

    def replace_events(self, events: list[ProfileEvent], func: str) -> None:
        """Installs the events of one call (keeping at most ``max_events``), freeing the old."""
        kept: list[ProfileEvent] = []
        budget = self.max_events
        dropped = 0
        for top in events:
            n = sum(1 for _ in top.walk())
            if budget <= 0:
                dropped += n
                continue
            if n > budget:
                # Keep the event and as many of its sub-events as fit (depth first).
                dropped += n - budget
                top = _truncate(top, budget)
                n = budget
            kept.append(top)
            budget -= n
        with self.lock:
            if self.freed:
                return
            self._drop_events()
            with _EVENTS_LOCK:
                for top in kept:
                    for ev in top.walk():
                        ev.id = next(_EVENT_IDS)
                        _EVENTS[ev.id] = ev
                        _HIGHEST_ID[0] = ev.id
            self.events = kept
        if dropped:
            rules.warn("QNNEMU-profile-max-events-reached", func, "profile",
                       f"{dropped} event(s) not stored: the profile's MAX_EVENTS ({self.max_events}) was reached",
                       logger=self.log)

    def free(self) -> None:
        with self.lock:
            self.freed = True
            self._drop_events()


def _truncate(ev: ProfileEvent, budget: int) -> ProfileEvent:
    """A copy of ``ev`` with at most ``budget`` events in its tree (``budget`` >= 1)."""
    out = ProfileEvent(ev.type, ev.unit, ev.value, ev.identifier, ev.timestamp_us,
                       payload=ev.payload, file_name=ev.file_name)
    budget -= 1
    for s in ev.sub:
        if budget <= 0:
            break
        n = min(budget, sum(1 for _ in s.walk()))
        out.sub.append(_truncate(s, n))
        budget -= n
    return out


# ------------------------------------------------------------------- the HTP device model
def step_label(step, n_nodes: int) -> tuple[str, int]:
    """("<step name>:OpId_<k>", k) of a plan step: k is the node's index for steps of a node,
    ``n_nodes + step.index`` for the steps the HTP inserted (spill, fill)."""
    k = step.node_index if step.node_index is not None else n_nodes + step.index
    return f"{step.name}:OpId_{k}", k


def step_resources(step) -> list[str]:
    """The HTP resources (of RESOURCE_BITS, in that order) a step occupies."""
    used = set(getattr(step, "resources", None) or [step.resource])
    return [r for r in RESOURCE_BITS if r in used]


@dataclass
class StepLint:
    """The linting numbers of one plan step (QNN HTP backend documentation, "Detailed and Linting
    Profiling")."""
    label: str
    op_id: int
    cycles: int
    wait: int
    overlap: int
    overlap_by: list[int]        # step indices that ran while it ran
    overlap_wait: int
    overlap_wait_by: list[int]   # step indices that ran while it waited
    resources: list[str]


# Steps the main thread hands to a background unit and does not execute itself (HMX launches,
# DMA spills and fills, the background System Services); ops, waits, sync ops, checkpoint waits
# and block zaps are the main thread's.
BACKGROUND_KINDS = ("launch", "spill", "fill")


def is_main_thread(kind: str, op_type: str | None) -> bool:
    if kind == "service":
        return not is_background_service(op_type)
    return kind not in BACKGROUND_KINDS


@dataclass(frozen=True)
class LintStep:
    """What the linting model needs of one scheduled step (a plan Step or an optrace step)."""
    index: int
    kind: str
    start: int
    end: int
    sched_wait: int              # the re-scheduler's wait (ready -> start)
    deps: tuple[int, ...]
    pair: int | None
    main: bool = True            # run by the main thread (is_main_thread)


def _covered(lo: int, hi: int, spans: list[tuple[int, int]]) -> int:
    """Cycles of [lo, hi) covered by the union of ``spans``."""
    total = 0
    cur: tuple[int, int] | None = None    # the union's current run
    for a, b in sorted((max(lo, a), min(hi, b)) for a, b in spans if min(hi, b) > max(lo, a)):
        if cur is None or a > cur[1]:
            total += 0 if cur is None else cur[1] - cur[0]
            cur = (a, b)
        else:
            cur = (cur[0], max(cur[1], b))
    return total + (0 if cur is None else cur[1] - cur[0])


def waited_on(step: LintStep, by_index: dict[int, LintStep]) -> set[int]:
    """The steps ``step`` waits for: its dependencies, the launch behind each wait step it
    depends on, and (a wait step) its own launch."""
    out = set(step.deps)
    for d in step.deps:
        dep = by_index.get(d)
        if dep is not None and dep.kind == "wait" and dep.pair is not None:
            out.add(dep.pair)
    if step.kind == "wait" and step.pair is not None:
        out.add(step.pair)
    return out


def lint_schedule(steps: list[LintStep], total_cycles: int) -> list[tuple]:
    """The linting numbers of a schedule (QNN HTP backend documentation, "Detailed and Linting
    Profiling"), per step in the given order, then the Output pseudo-op:
    ``(index | "Input" | "Output", wait, overlap, overlap_by, overlap_wait, overlap_wait_by)``,
    the Input pseudo-op first.

    * The main thread runs the ops and waits in start order; a main-thread step's "Wait" is the
      time since the previous main-thread step ended ("each op has to wait for some cycles since
      the execution of the last op"), 0 while another main-thread step still runs.  A background
      step (launch, spill, fill) keeps the re-scheduler's wait (ready -> start).
    * "Overlap" / "Overlap (wait)": the cycles of the step's run / wait window covered by other
      steps -- except the background steps it waits on ("Background ops that are being waited on
      by main thread ops are not considered as background activity"), so a wait step's own launch
      and an op's filled inputs never count.
    * Input: cycle 0, nothing before it.  Output: from the last main-thread step's end to the end
      of the schedule, waiting for everything still running (so no overlap)."""
    by_index = {s.index: s for s in steps}
    spans = sorted((s.start, s.end, s.index) for s in steps if s.end > s.start)
    starts = [a for a, _, _ in spans]
    reach, top = [], 0
    for _, b, _ in spans:
        top = max(top, b)
        reach.append(top)

    def background(lo: int, hi: int, exclude: set[int]) -> tuple[int, list[int]]:
        if hi <= lo:
            return 0, []
        others = []
        j = bisect.bisect_left(starts, hi) - 1
        while j >= 0 and reach[j] > lo:
            a, b, k = spans[j]
            if b > lo and k not in exclude:
                others.append((a, b, k))
            j -= 1
        return _covered(lo, hi, [(a, b) for a, b, _ in others]), sorted(k for _, _, k in others)

    main_wait_from: dict[int, int] = {}
    main_end = 0
    for s in sorted((s for s in steps if s.main), key=lambda s: (s.start, s.index)):
        main_wait_from[s.index] = main_end if main_end <= s.start else s.start   # busy: no wait
        main_end = max(main_end, s.end)
    out: list[tuple] = [("Input", 0, 0, [], 0, [])]
    for s in steps:
        lo = main_wait_from.get(s.index, s.start - s.sched_wait)
        exclude = waited_on(s, by_index) | {s.index}
        overlap, by = background(s.start, s.end, exclude)
        overlap_wait, wait_by = background(lo, s.start, exclude)
        out.append((s.index, s.start - lo, overlap, by, overlap_wait, wait_by))
    out.append(("Output", max(0, total_cycles - main_end), 0, [], 0, []))
    return out


def _lint_steps_of_plan(plan) -> list[LintStep]:
    return [LintStep(s.index, s.kind, s.start_cycle, s.end_cycle, s.wait_cycles, tuple(s.deps or ()), s.pair,
                     is_main_thread(s.kind, s.op_type)) for s in plan.steps]


def pseudo_op_ids(n_nodes: int, n_steps: int) -> dict[str, int]:
    """The OpIds of the Input and Output pseudo-ops: after every node's and inserted step's."""
    return {"Input": n_nodes + n_steps, "Output": n_nodes + n_steps + 1}


def lint_plan(plan, n_nodes: int) -> list[StepLint]:
    """The linting report of a prepared plan: the Input pseudo-op, one entry per step in runlist
    order, the Output pseudo-op (labelled ``Input OpId_<k>`` / ``Output OpId_<k>`` as in the
    documentation's listings); numbers from :func:`lint_schedule` over the re-scheduler's
    schedule (qnnemu/htp/prepare.py)."""
    steps = {s.index: s for s in plan.steps}
    ids = pseudo_op_ids(n_nodes, len(plan.steps))
    out = []
    for key, wait, overlap, by, overlap_wait, wait_by in lint_schedule(_lint_steps_of_plan(plan), plan.total_cycles):
        if isinstance(key, str):
            out.append(StepLint(f"{key} OpId_{ids[key]}", ids[key], 0, wait, overlap, by, overlap_wait, wait_by,
                                []))
            continue
        s = steps[key]
        label, k = step_label(s, n_nodes)
        out.append(StepLint(label, k, s.cycles, wait, overlap, by, overlap_wait, wait_by, step_resources(s)))
    return out


def execute_accel_cycles(plan, sched) -> int:
    """The modelled accelerator cycles of the execute ``sched`` records (qnnemu/core/scheduling.py
    ``Schedule.accel_cycles``: with batch n, n runs of the plan less the weights they reuse,
    qnnemu/htp/rpc.py); the plan's total cycles without a record."""
    cycles = int(getattr(sched, "accel_cycles", 0) or 0)
    return cycles if cycles > 0 else int(plan.total_cycles)


def plan_uses(plan, resource: str) -> bool:
    return any(resource in step_resources(s) for s in plan.steps)


def resource_acquire_us(plan, first_execution: bool) -> tuple[int, int]:
    """(VTCM acquire us, HVX + HMX power-on us) of an execution (RESOURCE_ACQUIRE_US)."""
    if not first_execution:
        return 0, 0
    power = RESOURCE_ACQUIRE_US["HVX"] + (RESOURCE_ACQUIRE_US["HMX"] if plan_uses(plan, "HMX") else 0)
    return RESOURCE_ACQUIRE_US["VTCM"], power


def dsp_profiling_enabled(context) -> bool:
    """QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED is set on ``context``."""
    htp = (getattr(context, "configs", None) or {}).get("htp") or {}
    cfg = htp.get(DSP_PROFILING_OPTION)
    return isinstance(cfg, dict) and bool(cfg.get("dspMemoryProfilingEnabled"))


class CallRecorder:
    """Collects the events of one profiled API call; ``commit`` hands them to the profile.

    ``on_step`` is the ``observer`` of ``Graph.execute`` (called after each plan step with the
    step and its seconds: it marks when the accelerator side ran).  The ABI layer calls
    ``begin_wait()`` / ``end_wait()`` around ``Graph.execute`` (the emulated RPC), then
    ``commit`` once the whole API call succeeded.  For the context calls it first calls
    ``watch_contexts(backend)``: the contexts alive before the call tell whether the call
    created the first or freed the last context (DSP heap profiling).
    """

    def __init__(self, profile: Profile, func: str, start_ns: int | None = None,
                 start_epoch_us: int | None = None, graph=None):
        self.profile = profile
        self.func = func
        self.detailed = profile.detailed
        self.start_ns = time.perf_counter_ns() if start_ns is None else start_ns
        self.start_us = _now_us() if start_epoch_us is None else start_epoch_us
        self.rpc_start_ns: int | None = None
        self.rpc_end_ns: int | None = None
        self.rpc_start_us = 0
        self.run_start_ns: int | None = None
        self.run_start_us = 0
        self.run_end_ns: int | None = None
        self.graph = graph
        self.backend = None
        self.contexts_before: dict[int, Any] = {}
        self.extra_events: list[ProfileEvent] = []   # add_backend_event: reported after the call's own

    # ---- called by the ABI layer --------------------------------------------------------
    def begin_wait(self) -> None:
        self.rpc_start_ns = time.perf_counter_ns()
        self.rpc_start_us = _now_us()

    def end_wait(self) -> None:
        self.rpc_end_ns = time.perf_counter_ns()

    def add_backend_event(self, identifier: str, value: int, unit: int = US) -> None:
        """An extra QNN_PROFILE_EVENTTYPE_BACKEND event of this call, reported after its own
        events (e.g. the load of a graph switch, qnnemu/htp/switching.py)."""
        self.extra_events.append(ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_BACKEND, unit, value, identifier, _now_us()))

    def watch_contexts(self, backend) -> None:
        self.backend = backend
        self.contexts_before = dict(backend.contexts)

    # ---- called by the graph's plan -----------------------------------------------------
    def on_step(self, step, seconds: float) -> None:
        """Observer of ``Graph.execute``: one plan step took ``seconds``."""
        now = time.perf_counter_ns()
        if self.run_start_ns is None:
            self.run_start_ns = now - int(seconds * 1e9)
            self.run_start_us = _now_us() - micros(seconds)
        self.run_end_ns = now

    # ---- building the events ------------------------------------------------------------
    def _elapsed(self, a: int | None, b: int | None) -> float:
        if a is None or b is None:
            return 0.0
        return max(0, b - a) / 1e9

    def finalize_events(self, end_ns: int) -> list[ProfileEvent]:
        total = self._elapsed(self.start_ns, end_ns)
        out = [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_FINALIZE, US, micros(total), "QNN (finalize) time",
                            self.start_us)]
        schematic = self.schematic_event() if self.profile.optrace else None
        return out + ([schematic] if schematic is not None else [])

    def execute_events(self, end_ns: int) -> list[ProfileEvent]:
        graph = self.graph
        plan = graph.htp_plan
        n_nodes = len(graph.nodes)
        clocks = htp_perf.current_clocks(arch=plan.arch)   # priced for the arch the graph was prepared for
        total = self._elapsed(self.start_ns, end_ns)
        rpc_end = self.rpc_end_ns if self.rpc_end_ns is not None else end_ns
        host_rpc = min(total, self._elapsed(self.rpc_start_ns, rpc_end))
        htp_rpc = min(host_rpc, self._elapsed(self.run_start_ns, self.run_end_ns))
        rpc_us = self.rpc_start_us or self.start_us
        run_us = self.run_start_us or rpc_us
        first = getattr(graph, "executions", 0) <= 1
        vtcm_us, power_us = resource_acquire_us(plan, first)
        sched = getattr(graph, "last_schedule", None)
        span = getattr(sched, "span", None)
        if not first and span is not None:
            power_us += round(span.rpc.hmx_power_up_us)   # the HMX timed out since the last execute
        accel_cycles = execute_accel_cycles(plan, sched)
        accel_us = cycles_to_us(accel_cycles, clocks)
        yields = int(getattr(sched, "yields", 0))
        values = {"hvx_threads": graph_settings(graph).hvx_threads, "host_rpc": micros(host_rpc),
                  "htp_rpc": micros(htp_rpc), "yields": yields, "vtcm_acquire": vtcm_us, "power_on": power_us,
                  "critical_cycles": plan.critical_path_cycles, "accel_cycles": accel_cycles,
                  "accel_us": accel_us, "execute": micros(total)}
        stamps = {"host_rpc": rpc_us, "execute": self.start_us}
        events = {k.key: event(k, values[k.key], stamps.get(k.key, run_us)) for k in EXECUTE_EVENT_TABLE}
        if yields:
            # pre-empted: how long it waited for the higher-priority graph(s), over its yields
            events["yields"].sub = [event(YIELD_WAIT_EVENT, int(getattr(sched, "preempt_us", 0)),
                                          run_us)]
        profile = self.profile
        if profile.linting:
            events["critical_cycles"].sub = self._linting_events(plan, n_nodes, run_us, clocks)
        elif self.detailed:
            events["accel_cycles"].sub = self._step_events(plan, n_nodes, run_us, clocks)
        out = [events[k.key] for k in EXECUTE_EVENT_TABLE]
        if profile.optrace:
            out.append(self._optrace_event(plan, clocks, run_us, accel_us, vtcm_us, power_us, end_ns))
        return out + self.extra_events

    @staticmethod
    def _step_time(step, run_us: int, clocks) -> int:
        return run_us + cycles_to_us(step.start_cycle, clocks)

    def _step_events(self, plan, n_nodes: int, run_us: int, clocks) -> list[ProfileEvent]:
        return [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_NODE, CYCLES, s.cycles,
                             f"{step_label(s, n_nodes)[0]} (cycles)", self._step_time(s, run_us, clocks))
                for s in plan.steps]

    def _linting_events(self, plan, n_nodes: int, run_us: int, clocks) -> list[ProfileEvent]:
        steps = {s.index: s for s in plan.steps}
        kinds = {k.key: k for k in LINTING_EVENT_TABLE}
        out = []
        lints = lint_plan(plan, n_nodes)
        starts = [0] + [s.start_cycle for s in plan.steps] + [max((s.end_cycle for s in plan.steps), default=0)]
        for start, lint in zip(starts, lints):
            t = run_us + cycles_to_us(start, clocks)
            node = ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_NODE, CYCLES, lint.cycles, f"{lint.label} (cycles)", t)
            wait = event(kinds["wait"], lint.wait, t - cycles_to_us(lint.wait, clocks))
            overlap = event(kinds["overlap"], lint.overlap, t)
            overlap_wait = event(kinds["overlap_wait"], lint.overlap_wait, wait.timestamp_us)
            for ev, by, key in ((overlap, lint.overlap_by, "overlap"), (overlap_wait, lint.overlap_wait_by,
                                                                         "overlap_wait")):
                for i in by[:MAX_CONTRIBUTORS]:
                    label, k = step_label(steps[i], n_nodes)
                    ev.sub.append(ProfileEvent(CONTRIBUTOR_TYPES[key], NONE, k, label, ev.timestamp_us))
            mask = sum(RESOURCE_BITS[r] for r in lint.resources)
            resources = event(kinds["resources"], mask, t,
                              " ".join(["Resources:", ", ".join(lint.resources)]).rstrip())
            node.sub = [wait, overlap, overlap_wait, resources]
            out.append(node)
        return out

    def _optrace_event(self, plan, clocks, run_us, accel_us, vtcm_us, power_us, end_ns) -> ProfileEvent:
        """The QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE object: the plan's optrace document plus
        this execution (clocks, wall-clock span, the runtrace of the run)."""
        graph = self.graph
        doc = plan.to_optrace()
        doc["nodes"], doc["tensors"] = node_table(graph), tensor_table(graph)
        end_us = self.start_us + micros(self._elapsed(self.start_ns, end_ns))
        sched = getattr(graph, "last_schedule", None)
        span = getattr(sched, "span", None)
        doc["execution"] = {
            "start_us": self.start_us, "end_us": end_us,
            "clocks": {"core_mhz": clocks.core_mhz, "hmx_mhz": clocks.hmx_mhz, "bus_mhz": clocks.bus_mhz,
                       "corner": clocks.corner},
            "runs": [{"execution": int(getattr(graph, "executions", 0)), "start_us": self.start_us,
                      "end_us": end_us, "accel_start_us": run_us, "accel_end_us": run_us + accel_us,
                      "total_cycles": execute_accel_cycles(plan, sched),
                      "critical_path_cycles": plan.critical_path_cycles,
                      "yields": _yield_record(sched),
                      "vtcm_acquire_us": vtcm_us, "power_on_us": power_us,
                      "batch": int(getattr(sched, "batch", 1) or 1),
                      "rpc": span.to_dict() if span is not None else None}],
        }
        payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        return ProfileEvent(OPTRACE_EVENT.type, OPTRACE_EVENT.unit, len(payload), OPTRACE_EVENT.identifier,
                            self.start_us, payload=payload, file_name=f"{graph.name}.optrace.json")

    def schematic_event(self) -> ProfileEvent | None:
        """graphFinalize with QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE: the graph's schematic --
        its prepared plan's optrace document with the node table -- as an OBJECT event
        ``"Schematic"`` (file ``<graph>_schematic.json``); qnnemu-context-binary-generator's
        ``--profiling_option optrace`` writes it into ``<binary>_schematic.bin``."""
        graph = self.graph
        plan = getattr(graph, "htp_plan", None)
        if plan is None:
            return None
        doc = plan.to_optrace()
        doc["nodes"], doc["tensors"] = node_table(graph), tensor_table(graph)
        payload = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        return ProfileEvent(SCHEMATIC_EVENT.type, SCHEMATIC_EVENT.unit, len(payload), SCHEMATIC_EVENT.identifier,
                            self.start_us, payload=payload, file_name=f"{graph.name}_schematic.json")

    def _dsp_event(self, identifier: str) -> ProfileEvent:
        # Both DSP heap events are taken with no context loaded: the runtime's heap.
        return ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_BACKEND, BYTES, DSP_HEAP_MODEL["runtime_bytes"], identifier,
                            self.start_us)

    def deinit_events(self, end_ns: int) -> list[ProfileEvent]:
        out = [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_DEINIT, US, micros(self._elapsed(self.start_ns, end_ns)),
                            "QNN (deinit) time", self.start_us)]
        if self.backend is not None and not self.backend.contexts:
            freed = [c for h, c in self.contexts_before.items() if h not in self.backend.contexts]
            if any(dsp_profiling_enabled(c) for c in freed):
                out.append(self._dsp_event(DSP_AFTER_CONTEXT_FREED))
        return out

    def init_events(self, end_ns: int) -> list[ProfileEvent]:
        out = [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_INIT, US, micros(self._elapsed(self.start_ns, end_ns)),
                            "QNN (init) time", self.start_us)]
        if self.backend is not None and not self.contexts_before:
            created = list(self.backend.contexts.values())
            if any(dsp_profiling_enabled(c) for c in created):
                out.append(self._dsp_event(DSP_BEFORE_CONTEXT_CREATED))
        return out

    def commit(self, kind: str) -> None:
        end = time.perf_counter_ns()
        events = {"finalize": self.finalize_events, "execute": self.execute_events,
                  "deinit": self.deinit_events, "init": self.init_events}[kind](end)
        self.profile.replace_events(events, self.func)
