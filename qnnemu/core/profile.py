"""QnnProfile.h + HTP/QnnHtpProfile.h: profile objects, their events and what each value means.

A ``Profile`` (``profileCreate``) collects the events of the profiled API calls it is passed
to (``graphFinalize``, ``graphExecute``, ``contextFree``).  As QnnGraph.h/QnnContext.h say of
the ``profile`` argument ("a handle being re-used would reset and is populated with values
from the current call"), and as the vendor's HTP backend does, every profiled call *replaces*
the events of the previous one: ``profileGetEvents`` returns the events of the most recent
successful profiled call, as often as it is asked.  A call that fails leaves the previous
events in place.

Event ids are process-wide, start at 1 and are never reused, so a stale id can never alias a
newer event.  An id stays valid until ``profileFree`` or until a later profiled call on the
same handle replaced its events; after that it is reported as stale (INVALID_HANDLE).

Levels: QNN_PROFILE_LEVEL_BASIC, QNN_PROFILE_LEVEL_DETAILED and the HTP level
QNN_HTP_PROFILE_LEVEL_LINTING, which is accepted and behaves as DETAILED for now (the linting
report of the device, per-op HVX/HMX utilisation, needs the HTP performance model).

Events (type, unit, identifier -- the identifiers follow the vendor backend's wording):

graphFinalize (both levels)
  FINALIZE (300)  us  "QNN (finalize) time"   wall time of the whole graphFinalize call

graphExecute (both levels, in this order)
  GRAPH_NUMBER_OF_HVX_THREADS (8001)          count  "Number of HVX threads used"  always 0:
      no HVX threads, the ops run on the host CPU (the vendor's x86-64 backend also says 0)
  GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC (3001) us  "RPC (execute) time"
      the emulated RPC into the accelerator: the ``Graph.execute`` call that gets the checked
      buffers (waiting for the graph's lock, setting up the plan, running it, collecting outputs)
  GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC (3002)  us  "QNN accelerator (execute) time"
      the accelerator side of that call: first node start to last node end, the plan's work
      between nodes (quantization converters) included
  GRAPH_EXECUTE_ACCEL_TIME_CYCLE (3003)   cycles  "Accelerator (execute) time (cycles)"
      the sum of the per-node times, as cycles of a nominal 1 GHz HTP clock (1 cycle = 1 ns
      of host time: finer than the microsecond events)
      DETAILED: one NODE (404) sub-event per node, in execution order, unit cycles,
      identifier "<node name>:OpId_<k> (cycles)" -- the vendor's format, which ONNX Runtime
      strips back to the node name; k is the node's 0-based position in graphAddNode order
  GRAPH_EXECUTE_ACCEL_TIME_MICROSEC (3004)    us  "Accelerator (execute) time"  same sum, us
  EXECUTE (400)                               us  "QNN (execute) time"
      wall time of the whole graphExecute call (argument checks, inputs, run, outputs)
  so EXECUTE >= HOST_RPC >= HTP_RPC >= ACCEL for every execution.

contextFree (both levels)
  DEINIT (500)    us  "QNN (deinit) time"     wall time of freeing the context and its graphs

Timestamps (extended event data ``timestamp``) are microseconds since the Unix epoch at the
start of what the event measures.  Microsecond values are rounded to the nearest integer.
"""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import QnnError
from ..headers import Q
from .log import NULL_LOGGER, Logger

LEVEL_NAMES = {
    Q.QNN_PROFILE_LEVEL_BASIC: "BASIC",
    Q.QNN_PROFILE_LEVEL_DETAILED: "DETAILED",
    Q.QNN_HTP_PROFILE_LEVEL_LINTING: "HTP LINTING (treated as DETAILED)",
}
# Default QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS: events (sub-events included) one call may store.
DEFAULT_MAX_EVENTS = 1 << 20
# The nominal HTP clock the cycle events are expressed in.
NOMINAL_CLOCK_HZ = 1_000_000_000

_EVENT_IDS = itertools.count(1)
_EVENTS: dict[int, "ProfileEvent"] = {}
_EVENTS_LOCK = threading.Lock()
_HIGHEST_ID = [0]


@dataclass
class ProfileEvent:
    """One event: ``value`` is an int (uint64) or a float (reported as a double when read as
    extended data, rounded in QnnProfile_EventData_t)."""

    type: int
    unit: int
    value: int | float
    identifier: str | None
    timestamp_us: int = 0
    sub: list["ProfileEvent"] = field(default_factory=list)
    id: int = 0
    # Opaque storage for the ABI layer (C copies of the identifier, id arrays); dropped with
    # the event.  The core never looks inside.
    abi: dict = field(default_factory=dict, repr=False)

    def walk(self):
        yield self
        for s in self.sub:
            yield from s.walk()


def micros(seconds: float) -> int:
    return max(0, int(round(seconds * 1e6)))


def cycles(seconds: float) -> int:
    return max(0, int(round(seconds * NOMINAL_CLOCK_HZ)))


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
        raise QnnError(code, f"{func}: eventId {event_id} is stale: its profile was freed or a later "
                             f"profiled call on the same handle replaced its events",
                       rule="QNNEMU-profile-event-stale")
    raise QnnError(code, f"{func}: eventId {event_id} does not identify a profiling event",
                   rule="QNNEMU-profile-event-unknown")


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

    # ---- configuration ----------------------------------------------------------------
    def set_max_events(self, n: int, func: str, path: str) -> None:
        if n < 1:
            raise QnnError(Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{func}: {path}.numMaxEvents: {n}: at least 1 event must fit",
                           rule="QNNEMU-profileSetConfig-max-events")
        self.max_events = n

    def set_optrace(self, enable: bool, func: str, path: str) -> None:
        if enable and not self.detailed:
            # As the vendor backend: op traces exist on the DETAILED level only (QnnProfile.h).
            raise QnnError(Q.QNN_PROFILE_ERROR_INVALID_ARGUMENT,
                           f"{func}: {path}.enableOptrace: optrace needs a DETAILED (or HTP linting) "
                           f"profile; this one is {LEVEL_NAMES.get(self.level, self.level)}",
                           rule="QNNEMU-profileSetConfig-optrace-level")
        self.optrace = enable

    def check_not_in_use(self, func: str, what: str) -> None:
        if self.active_calls:
            raise QnnError(Q.QNN_PROFILE_ERROR_HANDLE_IN_USE,
                           f"{func}: {what}: the profile is in use by {self.active_calls} running API "
                           f"call(s)", rule="QNNEMU-profile-in-use")

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
            self.log.warn(f"{func}: profile: {dropped} event(s) not stored, the profile's MAX_EVENTS "
                          f"({self.max_events}) was reached")

    def free(self) -> None:
        with self.lock:
            self.freed = True
            self._drop_events()


def _truncate(ev: ProfileEvent, budget: int) -> ProfileEvent:
    """A copy of ``ev`` with at most ``budget`` events in its tree (``budget`` >= 1)."""
    out = ProfileEvent(ev.type, ev.unit, ev.value, ev.identifier, ev.timestamp_us)
    budget -= 1
    for s in ev.sub:
        if budget <= 0:
            break
        n = min(budget, sum(1 for _ in s.walk()))
        out.sub.append(_truncate(s, n))
        budget -= n
    return out


class CallRecorder:
    """Collects the events of one profiled API call; ``commit`` hands them to the profile.

    ``on_step`` is the ``observer`` of ``Graph.execute`` (called after each node with the plan
    step, whose ``node`` is the graph's Node, and the node's seconds).  The ABI layer calls
    ``begin_wait()`` / ``end_wait()`` around ``Graph.execute`` (the emulated RPC), then
    ``commit`` once the whole API call succeeded.
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
        self.nodes: list[tuple[Any, float]] = []
        self.graph = graph

    # ---- called by the ABI layer --------------------------------------------------------
    def begin_wait(self) -> None:
        self.rpc_start_ns = time.perf_counter_ns()
        self.rpc_start_us = _now_us()

    def end_wait(self) -> None:
        self.rpc_end_ns = time.perf_counter_ns()

    # ---- called by the graph's plan -----------------------------------------------------
    def on_step(self, step, seconds: float) -> None:
        """Observer of ``Graph.execute``: one node (``step.node``) took ``seconds``."""
        now = time.perf_counter_ns()
        if self.run_start_ns is None:
            self.run_start_ns = now - int(seconds * 1e9)
            self.run_start_us = _now_us() - micros(seconds)
        self.run_end_ns = now
        self.nodes.append((getattr(step, "node", step), seconds))

    # ---- building the events ------------------------------------------------------------
    def _elapsed(self, a: int | None, b: int | None) -> float:
        if a is None or b is None:
            return 0.0
        return max(0, b - a) / 1e9

    def finalize_events(self, end_ns: int) -> list[ProfileEvent]:
        total = self._elapsed(self.start_ns, end_ns)
        return [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_FINALIZE, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
                             micros(total), "QNN (finalize) time", self.start_us)]

    def execute_events(self, end_ns: int) -> list[ProfileEvent]:
        total = self._elapsed(self.start_ns, end_ns)
        rpc_end = self.rpc_end_ns if self.rpc_end_ns is not None else end_ns
        host_rpc = min(total, self._elapsed(self.rpc_start_ns, rpc_end))
        htp_rpc = min(host_rpc, self._elapsed(self.run_start_ns, self.run_end_ns))
        accel = min(htp_rpc, sum(s for _, s in self.nodes))
        rpc_us = self.rpc_start_us or self.start_us
        run_us = self.run_start_us or rpc_us
        M, C, N = Q.QNN_PROFILE_EVENTUNIT_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_CYCLES, Q.QNN_PROFILE_EVENTUNIT_COUNT
        cyc = ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE, C, cycles(accel),
                           "Accelerator (execute) time (cycles)", run_us)
        if self.detailed:
            order = {id(n): k for k, n in enumerate(getattr(self.graph, "nodes", []))}
            t = run_us
            for node, s in self.nodes:
                k = order.get(id(node), len(order))
                cyc.sub.append(ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_NODE, C, cycles(s),
                                            f"{node.name}:OpId_{k} (cycles)", t))
                t += micros(s)
        return [
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_NUMBER_OF_HVX_THREADS, N, 0,
                         "Number of HVX threads used", run_us),
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HOST_RPC_TIME_MICROSEC, M, micros(host_rpc),
                         "RPC (execute) time", rpc_us),
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_HTP_RPC_TIME_MICROSEC, M, micros(htp_rpc),
                         "QNN accelerator (execute) time", run_us),
            cyc,
            ProfileEvent(Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_MICROSEC, M, micros(accel),
                         "Accelerator (execute) time", run_us),
            ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_EXECUTE, M, micros(total), "QNN (execute) time", self.start_us),
        ]

    def deinit_events(self, end_ns: int) -> list[ProfileEvent]:
        return [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_DEINIT, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
                             micros(self._elapsed(self.start_ns, end_ns)), "QNN (deinit) time", self.start_us)]

    def init_events(self, end_ns: int) -> list[ProfileEvent]:
        return [ProfileEvent(Q.QNN_PROFILE_EVENTTYPE_INIT, Q.QNN_PROFILE_EVENTUNIT_MICROSEC,
                             micros(self._elapsed(self.start_ns, end_ns)), "QNN (init) time", self.start_us)]

    def commit(self, kind: str) -> None:
        end = time.perf_counter_ns()
        events = {"finalize": self.finalize_events, "execute": self.execute_events,
                  "deinit": self.deinit_events, "init": self.init_events}[kind](end)
        self.profile.replace_events(events, self.func)
