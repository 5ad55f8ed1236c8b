"""The RPC and wake-up time around an execute on the modelled HTP, and the virtual timeline of the
host threads that execute on one device (QNN HTP backend documentation, "QNN HTP Performance
Infrastructure API": sleep latency and sleep disable of DCVS v3, RPC control latency, RPC polling,
adaptive polling; "Benefits of batch inference and multi-threaded inference"; "QNN HTP Variable
Batch"; "QNN HTP Profiling": the showcases' "RPC (execute) time" against "QNN accelerator
(execute) time").

An execute, as the model sees it (every constant below is the emulator's, documented in
docs/htp-rpc.md "Constants"; none is a measurement of silicon):

    host thread:  send ──► (DSP wakes up) ──► accelerator runs ──► completion seen ──► return
                  RPC_SEND_US   dsp_wakeup_us     (the cost model)    completion_us    RPC_RETURN_US

* ``dsp_wakeup_us``: when the DSP was idle before the call arrived it sat in the deepest
  low-power mode (``DSP_LOW_POWER_MODES``) whose exit latency the sleep latency vote allows and
  whose residency the idle gap covers; it pays that exit latency.  sleepDisable: no low-power
  mode, no wake-up.  No sleep latency vote: the DSP may use every mode.
* ``completion_us``: how the waiting CPU thread learns the accelerator finished.
  RPC polling off -> the completion interrupt (``INTERRUPT_US``) plus the CPU's own wake-up: the
  exit latency of the deepest CPU idle state (``CPU_IDLE_STATES``) the RPC control latency allows
  (0 = no requirement: every state) and the wait covers.
  RPC polling on (polling time T > 0) -> the CPU spins for up to T us after the send; a call
  that completes within T is seen at once (``POLL_DETECT_US``); a longer one falls back to the
  interrupt path after T.  Adaptive polling (time A > 0, with polling on) -> once the graph's
  previous execute took at least A us on the accelerator, the CPU sleeps and wakes up
  ``ADAPTIVE_WAKE_AHEAD_US`` before the predicted end to poll briefly: seen at once even past T
  ("waking up the CPU just in time to poll for a very short period of time").

``DeviceTimeline`` (one per device runtime, ``timeline_for``) places the executes of every host
thread on one virtual time axis: a thread issues its next execute when its previous one
returned (a thread new to the device starts at the latest issue seen), the accelerator takes
one execute at a time, in arrival order.  So with two threads the second thread's send and
return overlap the first thread's accelerator time, and the device idles less: "the time used by
RPC of the first inference is masked by the inference in the second thread".
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import asdict, dataclass, field

from . import cost, perf, settings

# ---- constants of the model (docs/htp-rpc.md "Constants") --------------------------------------
RPC_SEND_US = 300.0          # FastRPC call CPU -> DSP: marshalling, cache maintenance, DSP dispatch
RPC_RETURN_US = 240.0        # DSP -> CPU: results, cache maintenance, unmarshalling
INTERRUPT_US = 330.0         # the completion interrupt reaching the waiting CPU thread
POLL_DETECT_US = 2.0         # a polling CPU sees the completion flag
ADAPTIVE_WAKE_AHEAD_US = 50.0    # adaptive polling: the CPU wakes this long before the predicted end
RESIDENCY_FACTOR = 2.0       # a low-power state is entered only for an idle gap >= this x its exit latency
# (name, exit latency us): the DSP's low-power modes, shallowest first.  The shallowest exits in
# the smallest sleep latency the documentation allows (10 us).
DSP_LOW_POWER_MODES: tuple[tuple[str, float], ...] = (
    ("clock gating", 10.0), ("retention", 100.0), ("power collapse", 1000.0))
# (name, exit latency us): the CPU's idle states, shallowest first.
CPU_IDLE_STATES: tuple[tuple[str, float], ...] = (
    ("wfi", 1.0), ("core retention", 80.0), ("core power collapse", 300.0),
    ("cluster power collapse", 1200.0))
NO_VOTE_SLEEP_LATENCY_US = perf.SLEEP_LATENCY_RANGE_US[1]   # no sleep vote: every mode allowed
HMX_POWER_UP_US = 40         # powering the HMX up again after its idle timeout (the profile's HMX power-on)


@dataclass(frozen=True)
class RpcVote:
    """The RPC-related part of the active perf vote of a device core (``PERF.active``)."""
    sleep_latency_us: int = NO_VOTE_SLEEP_LATENCY_US
    sleep_disabled: bool = False
    rpc_control_latency_us: int = 0      # 0: no requirement
    rpc_polling_time_us: int = 0         # 0: polling off
    adaptive_polling_time_us: int = 0    # 0: off; only with polling on
    hmx_timeout_us: int = perf.DEFAULT_HMX_TIMEOUT_US   # the HMX powers down after this much idle


def current_vote(device_id: int = 0, core_id: int = 0) -> RpcVote:
    """The RPC vote the perf infrastructure's votes on the core give (aggregated as
    docs/htp-perf.md says: smallest sleep latency, sleep disabled by any id, smallest non-zero
    control latency, longest polling and adaptive polling time)."""
    active = perf.PERF.active(device_id, core_id)
    if active is None:
        return RpcVote()
    return RpcVote(
        sleep_latency_us=active.sleep_latency_us if active.sleep_latency_us is not None
        else NO_VOTE_SLEEP_LATENCY_US,
        sleep_disabled=bool(active.sleep_disabled),
        rpc_control_latency_us=int(active.rpc_control_latency_us or 0),
        rpc_polling_time_us=int(active.rpc_polling_time_us or 0),
        adaptive_polling_time_us=int(active.adaptive_polling_time_us or 0),
        hmx_timeout_us=int(active.hmx_timeout_us))


def _deepest(states: tuple[tuple[str, float], ...], allowed_us: float, idle_us: float) -> tuple[str, float]:
    """The deepest state whose exit latency is within ``allowed_us`` and whose residency the idle
    time covers; ("active", 0) when none."""
    best = ("active", 0.0)
    for name, exit_us in states:
        if exit_us <= allowed_us and idle_us >= RESIDENCY_FACTOR * exit_us:
            best = (name, exit_us)
    return best


def dsp_wakeup(vote: RpcVote, idle_gap_us: float) -> tuple[str, float]:
    """(low-power mode, exit latency us) the DSP wakes up from after ``idle_gap_us`` of idle."""
    if vote.sleep_disabled or idle_gap_us <= 0:
        return "active", 0.0
    return _deepest(DSP_LOW_POWER_MODES, vote.sleep_latency_us, idle_gap_us)


def cpu_wakeup(vote: RpcVote, idle_us: float) -> tuple[str, float]:
    """(idle state, exit latency us) of a CPU thread that slept ``idle_us`` waiting for the DSP:
    the RPC control latency bounds the exit latency (0: no requirement)."""
    allowed = vote.rpc_control_latency_us if vote.rpc_control_latency_us > 0 else math.inf
    return _deepest(CPU_IDLE_STATES, allowed, idle_us)


@dataclass(frozen=True)
class RpcCost:
    """The modelled RPC of one execute (microseconds)."""
    send_us: float
    dsp_wakeup_us: float
    dsp_mode: str             # the low-power mode the DSP woke from ("active": none)
    queue_us: float           # waiting for the accelerator (another thread's execute)
    hmx_power_up_us: float    # the HMX powered down after its idle timeout and powers up again
    accel_us: float           # the accelerator's time (the cost model, batch included)
    completion_us: float
    completion: str           # "interrupt", "polling", "adaptive polling"
    cpu_state: str            # the CPU idle state the waiting thread woke from ("active": none)
    return_us: float
    cpu_polling_us: float     # CPU time spent spinning on the completion flag

    @property
    def overhead_us(self) -> float:
        """Everything but the accelerator and the queue: what RPC and wake-ups add."""
        return self.send_us + self.dsp_wakeup_us + self.hmx_power_up_us + self.completion_us + self.return_us

    @property
    def total_us(self) -> float:
        return self.overhead_us + self.queue_us + self.accel_us


def completion(vote: RpcVote, wait_us: float, predicted_accel_us: float | None) -> tuple[str, float, str, float]:
    """(path, completion us, CPU state, CPU polling us) for a thread that waits ``wait_us`` after
    its send for the accelerator to finish; ``predicted_accel_us`` is the graph's previous
    accelerator time (adaptive polling's prediction; None on its first execute)."""
    polling = vote.rpc_polling_time_us
    if polling > 0:
        adaptive = vote.adaptive_polling_time_us
        if adaptive > 0 and predicted_accel_us is not None and predicted_accel_us >= adaptive:
            return "adaptive polling", POLL_DETECT_US, "active", min(wait_us, ADAPTIVE_WAKE_AHEAD_US)
        if wait_us <= polling:
            return "polling", POLL_DETECT_US, "active", wait_us
        state, exit_us = cpu_wakeup(vote, wait_us - polling)
        return "interrupt", INTERRUPT_US + exit_us, state, float(polling)
    state, exit_us = cpu_wakeup(vote, wait_us)
    return "interrupt", INTERRUPT_US + exit_us, state, 0.0


# ---- the timeline of the host threads on one device ------------------------------------------
@dataclass(frozen=True)
class ExecuteSpan:
    """One execute on the device's timeline (virtual microseconds)."""
    graph: str
    thread: int
    batch: int
    issue_us: float           # the host thread sends the call
    device_start_us: float    # the accelerator starts (after the send, the wake-up, the queue)
    device_end_us: float
    return_us: float          # the host thread has its results
    rpc: RpcCost

    def to_dict(self) -> dict:
        """The span and its RPC as one flat JSON-able dict (the optrace run record's "rpc")."""
        d = asdict(self)
        return {**{k: v for k, v in d.items() if k != "rpc"}, **d["rpc"], "overhead_us": self.rpc.overhead_us}


@dataclass
class DeviceTimeline:
    """The executes of every host thread on one device, on one virtual time axis (see the module
    docstring).  ``busy_us`` is the accelerator's work, ``wall_us`` the span from the first issue
    to the last return: their ratio is how well the threads keep the device busy."""
    thread_clock: dict[int, float] = field(default_factory=dict)
    device_free_us: float = 0.0
    latest_issue_us: float = 0.0
    first_issue_us: float | None = None
    last_return_us: float = 0.0
    busy_us: float = 0.0
    executes: int = 0
    inferences: int = 0
    last_accel_us: dict[str, float] = field(default_factory=dict)   # graph -> its previous accel us
    spans: list[ExecuteSpan] = field(default_factory=list)          # the latest MAX_SPANS
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    MAX_SPANS = 256

    @property
    def wall_us(self) -> float:
        return 0.0 if self.first_issue_us is None else self.last_return_us - self.first_issue_us

    def reset(self) -> None:
        """Starts a new measurement: forgets the threads' clocks and the counters (the device
        stays free from its current time)."""
        with self.lock:
            start = max(self.device_free_us, self.last_return_us, max(self.thread_clock.values(), default=0.0))
            self.thread_clock.clear()
            self.device_free_us = self.latest_issue_us = self.last_return_us = start
            self.first_issue_us = None
            self.busy_us = 0.0
            self.executes = self.inferences = 0
            self.spans.clear()

    def execute(self, graph: str, accel_us: float, vote: RpcVote, *, batch: int = 1,
                thread: int | None = None, uses_hmx: bool = False) -> ExecuteSpan:
        """Places one execute of ``graph`` taking ``accel_us`` on the accelerator, issued by
        ``thread`` (default: the calling thread) under ``vote``; ``uses_hmx``: a step of its plan
        runs on the HMX, which powers up again when the device idled past the HMX timeout."""
        thread = threading.get_ident() if thread is None else thread
        with self.lock:
            issue = self.thread_clock.get(thread, self.latest_issue_us)
            self.latest_issue_us = max(self.latest_issue_us, issue)
            arrive = issue + RPC_SEND_US
            idle_gap = arrive - self.device_free_us
            mode, wake = dsp_wakeup(vote, idle_gap)
            ran_before = self.executes > 0 or self.device_free_us > 0
            hmx_up = float(HMX_POWER_UP_US) if uses_hmx and ran_before and idle_gap >= vote.hmx_timeout_us else 0.0
            start = max(arrive + wake + hmx_up, self.device_free_us)
            end = start + accel_us
            path, done_us, state, spin = completion(vote, end - arrive, self.last_accel_us.get(graph))
            back = end + done_us + RPC_RETURN_US
            rpc = RpcCost(RPC_SEND_US, wake, mode, start - arrive - wake - hmx_up, hmx_up, accel_us, done_us,
                          path, state, RPC_RETURN_US, spin)
            span = ExecuteSpan(graph, thread, batch, issue, start, end, back, rpc)
            self.thread_clock[thread] = back
            self.device_free_us = end
            self.first_issue_us = issue if self.first_issue_us is None else min(self.first_issue_us, issue)
            self.last_return_us = max(self.last_return_us, back)
            self.busy_us += accel_us
            self.executes += 1
            self.inferences += batch
            self.last_accel_us[graph] = accel_us
            self.spans.append(span)
            del self.spans[:-self.MAX_SPANS]
            return span

    def summary(self) -> dict:
        """busy, wall, utilization, executes, inferences and inferences per second of virtual
        time so far."""
        with self.lock:
            wall = self.wall_us
            return {"busy_us": self.busy_us, "wall_us": wall, "executes": self.executes,
                    "inferences": self.inferences,
                    "utilization": self.busy_us / wall if wall > 0 else 0.0,
                    "inferences_per_s": 1e6 * self.inferences / wall if wall > 0 else 0.0}


_TIMELINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TIMELINES_LOCK = threading.Lock()


def timeline_for(runtime) -> DeviceTimeline:
    """The timeline of a device's shared runtime (qnnemu.htp.runtime.HtpRuntime)."""
    with _TIMELINES_LOCK:
        tl = _TIMELINES.get(runtime)
        if tl is None:
            tl = _TIMELINES[runtime] = DeviceTimeline()
        return tl


# ---- the accelerator time of an execute -------------------------------------------------------
def batch_reuse(graph, plan) -> list[cost.StepReuse]:
    """The plan's weight reuse across a batch (qnnemu.htp.cost.batch_reuse), computed once per plan."""
    hit = getattr(plan, "batch_reuse_cache", None)
    if hit is None:
        hit = cost.batch_reuse(graph, plan, settings.device_model(graph), settings.graph_settings(graph))
        plan.batch_reuse_cache = hit   # not a field: the binary and the optrace never carry it
    return hit


def plan_uses_hmx(plan) -> bool:
    """A step of ``plan`` runs on the HMX (cached on the plan)."""
    hit = getattr(plan, "uses_hmx_cache", None)
    if hit is None:
        hit = any(s.resource == "HMX" or "HMX" in (s.resources or ()) for s in plan.steps)
        plan.uses_hmx_cache = hit
    return hit


def execute_cycles(graph, plan, batch: int = 1) -> int:
    """Reference cycles of one execute of ``plan`` with batch multiple ``batch``."""
    if batch <= 1:
        return int(plan.total_cycles)
    return cost.batch_cycles(plan, batch_reuse(graph, plan), batch)


def throughput(timeline_accel_us: float, vote: RpcVote, *, threads: int, batch: int,
               executes_per_thread: int = 8) -> dict:
    """Inferences per second of ``threads`` host threads each executing a graph whose accelerator
    time per execute is ``timeline_accel_us`` (batch ``batch`` included) back to back, in turn,
    on a fresh device timeline (what a parallel-run tool does); with its summary."""
    tl = DeviceTimeline()
    for _ in range(executes_per_thread):
        for t in range(threads):
            tl.execute("model", timeline_accel_us, vote, batch=batch, thread=t)
    return tl.summary()
