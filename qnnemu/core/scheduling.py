"""Executes scheduled by the shared HTP's rules (QNN "HTP Yielding and Pre-Emption"; QNN HTP
backend documentation, "Yielding and Pre-Emption", "Graph Priority"; issue 14 item 2).

Every graphExecute -- through Python (``Graph.execute``) or the C fast path -- runs inside the
scheduler of qnnemu._kernels (csrc/eng_sched.c): per emulated device, an execute starts when no
execute of another priority runs and none of a higher priority waits; a higher-priority arrival
makes the running lower-priority executes yield at their next op boundary (a step boundary of
the program) and wait until it is done; equal or lower priority waits.  Executes of the same
priority run side by side on the host's cores (the HTP timeline still serializes them) unless
``QNNEMU_HTP_STRICT=1`` makes them take turns as on the device.

``executing(graph)`` brackets one execute and leaves ``graph.last_schedule``: yields, waits (the
BASIC profile's GRAPH_EXECUTE_YIELD_COUNT and pre-emption wait).  ``point()`` is the yield point
the Python steps call between ops (C steps call it inside qe_run).  Without the compiled kernels
there is no scheduler: executes run as before and report no yields.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

from ..htp import cost, perf, rpc, runtime, settings
from ..ops import _fast
from ..rules import warn

_next_slot = 0
DEVICE_SLOTS = 64        # csrc/eng_sched.h QE_SCHED_DEVICES
_strict_applied: bool | None = None


@dataclass(frozen=True)
class Schedule:
    """What the scheduler did to one execute."""
    yields: int          # times it yielded to a higher-priority execute
    wait_us: int         # waiting before it could start
    preempt_us: int      # waiting after its yields
    os_priority: int     # the Hexagon OS priority it ran with
    spans: tuple[tuple[int, int], ...] = ()   # (yielded, resumed), epoch us, the first 8 yields
    virtual_start_us: float = 0.0   # on the device's virtual clock (qnnemu/htp/runtime.py)
    virtual_end_us: float = 0.0
    batch: int = 1                  # the batch multiple it ran with ("QNN HTP Variable Batch")
    accel_cycles: int = 0           # its modelled accelerator cycles (the batch's weight reuse included)
    span: rpc.ExecuteSpan | None = None   # its RPC and place on the host threads' timeline (qnnemu/htp/rpc.py)


NO_SCHEDULE = Schedule(0, 0, 0, 0)


def strict() -> bool:
    """QNNEMU_HTP_STRICT=1: executes of equal priority take turns on a device."""
    return os.environ.get("QNNEMU_HTP_STRICT", "").strip() not in ("", "0")


def _lib():
    lib = _fast.library()
    if lib[0] is None:
        return None
    global _strict_applied
    want = strict()
    if want != _strict_applied:
        lib[0].qe_sched_set_strict(int(want))
        _strict_applied = want
    return lib


def device_slot(device) -> int:
    """The scheduler's slot of an emulated device (devices of one process share none unless they
    are the same object; a process has few)."""
    global _next_slot
    if device is None:
        return 0
    slot = getattr(device, "scheduler_slot", None)
    if slot is None:
        slot = 1 + _next_slot % (DEVICE_SLOTS - 1)
        _next_slot += 1
        device.scheduler_slot = slot
    return slot


def os_priority(graph) -> int:
    """The Hexagon OS priority the graph acquires the HTP with (qnnemu/htp/priority.py)."""
    prio = getattr(graph, "thread_priorities", None)
    return int(prio[0]) if prio else 0xC0


@contextmanager
def executing(graph, batch: int = 1):
    """One execute of ``graph`` (batch multiple ``batch``) under the device's scheduler (blocks
    while it may not run)."""
    lib = _lib()
    if lib is None:
        graph.last_schedule = NO_SCHEDULE
        yield
        return
    clib, ffi = lib
    exec_ = ffi.new("qe_sched_exec *")
    prio = os_priority(graph)
    device = getattr(getattr(graph, "context", None), "device", None)
    clib.qe_sched_begin(exec_, device_slot(device), prio)   # cffi releases the GIL while it waits
    try:
        yield
    finally:
        clib.qe_sched_end(exec_)
        n = min(int(exec_.yields), 8)
        shift = time.time_ns() - time.monotonic_ns()    # CLOCK_MONOTONIC -> epoch
        spans = tuple(((int(exec_.yield_start_ns[i]) + shift) // 1000, (int(exec_.yield_end_ns[i]) + shift) // 1000)
                      for i in range(n))
        v0, v1, cycles, span = _on_virtual_clock(graph, int(exec_.yields), batch)
        graph.last_schedule = Schedule(int(exec_.yields), int(exec_.wait_ns) // 1000,
                                       int(exec_.preempt_ns) // 1000, prio, spans, v0, v1, batch, cycles, span)
        if exec_.yields:
            # the vendor's backend logs "Releasing VTCM" / "Releasing and Re-Acquiring VTCM" at
            # WARNING around each pre-emption
            warn("QNNEMU-graphExecute-yielded", "graphExecute", f"graph '{graph.name}'",
                 f"pre-empted {int(exec_.yields)} time(s) by a higher-priority graph at an op boundary: "
                 f"Releasing VTCM; Releasing and Re-Acquiring VTCM (waited {int(exec_.preempt_ns) // 1000} us)")


def _on_virtual_clock(graph, yields: int, batch: int = 1) -> tuple[float, float, int, rpc.ExecuteSpan | None]:
    """The execute on its device's virtual clock (``HtpRuntime``): it starts when the device's
    clock stands and takes the plan's modelled time (its cycles -- with batch n, n runs less the
    weights they reuse, qnnemu/htp/rpc.py -- at the voted clocks), so a sequence of executes has
    a deterministic HTP timeline besides the wall clock; the runtime's log gets an "execute"
    entry (and one "yielded" entry per pre-emption).  The same execute is placed, with its
    modelled RPC and wake-ups, on the host threads' timeline of the device (``rpc.timeline_for``).
    Returns (start, end, accelerator cycles, its span on the host threads' timeline)."""
    plan = getattr(graph, "htp_plan", None)
    if plan is None:
        return 0.0, 0.0, 0, None
    try:
        rt = runtime.runtime_for(settings.device_model(graph).soc)
        cycles = rpc.execute_cycles(graph, plan, batch)
        took = cost.cycles_to_us(cycles, perf.current_clocks(arch=plan.arch))
    except Exception:  # noqa: BLE001 - an unknown device has no shared runtime: no virtual time
        return 0.0, 0.0, 0, None
    with rt._lock:
        start = rt.now
        rt.now = start + took
        for _ in range(yields):
            rt.log.append((start, "yielded", graph.name))
        rt.log.append((start, "execute", graph.name))
    span = rpc.timeline_for(rt).execute(graph.name, took, rpc.current_vote(), batch=batch,
                                        uses_hmx=rpc.plan_uses_hmx(plan))
    return start, start + took, cycles, span


def point() -> None:
    """A yield point between two Python steps of the running execute."""
    clib = _fast.library()[0]
    if clib is not None:
        clib.qe_sched_point()


def fast_path_fields(graph) -> tuple[int, int, int]:
    """(qe_sched_begin address, qe_sched_end address, device slot << 16 | os priority) for the C
    fast path's descriptor (csrc/fast_execute.h), or zeros without the scheduler."""
    lib = _lib()
    if lib is None:
        return 0, 0, 0
    clib, ffi = lib

    def address(name: str) -> int:
        return int(ffi.cast("intptr_t", ffi.addressof(clib, name)))
    device = getattr(getattr(graph, "context", None), "device", None)
    return address("qe_sched_begin"), address("qe_sched_end"), (device_slot(device) << 16) | os_priority(graph)
