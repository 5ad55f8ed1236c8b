"""QnnGraph.h QnnGraph_executeAsync (issue 14 item 4): executes queued per context and run by
worker threads, their end reported through the app's ``Qnn_NotifyFn_t``.

The call validates and decodes its arguments as graphExecute does (qnnemu/abi/graph_api.py
``_execute_job``: an invalid argument is returned at once and nothing is notified); the input and
output buffers must then stay valid until the notification, as QNN asks.  The job joins the
context's queue, whose depth is the context's ``QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH``
(``DEFAULT_QUEUE_DEPTH`` without it): a full queue makes the call wait for room -- except a call
from the notify function, which takes over the slot of the execute just notified (so an app that
re-submits from its notify function never waits for itself).  Each graph has
one worker thread, so a graph's executes run in call order and different graphs run at once --
and the HTP scheduler (qnnemu/core/scheduling.py) dispatches them by priority exactly as
application threads' executes: a HIGH graph's async execute pre-empts a running LOW one at its
next op boundary.  The worker calls ``notifyFn(notifyParam, {error})`` with QNN_SUCCESS or the
error code of the failed execute.  contextFree waits for the context's queued executes (the
queue drains) before freeing it; a forked child starts with no queues.

The vendor's x86-64 library answers graphExecuteAsync with QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE (1000,
logging "Async execution is unsupported") and contextSetConfig of the queue depth with 1000 while
its contextCreate accepts the depth config (tests/test_async_execute.py pins this); the device
backend the documentation describes queues executes, which is what qnnemu models.
"""
from __future__ import annotations

import logging
import os
import queue
import threading

from ..core.graph import Graph
from ..core.handles import HANDLES
from ..core.signal import Signal
from ..errors import QnnError
from ..headers import Q
from .library import entry, ffi, hval

DEFAULT_QUEUE_DEPTH = 8
_log = logging.getLogger("qnnemu.abi")


class _ContextQueue:
    """The async executes of one context: a slot semaphore of the queue depth, a worker per graph."""

    def __init__(self, depth: int):
        self.depth = depth
        self.slots = threading.BoundedSemaphore(depth)
        self.workers: dict[int, tuple[threading.Thread, queue.Queue]] = {}
        self.pending = 0
        self.idle = threading.Condition()

    def submit(self, graph: Graph, job) -> None:
        if getattr(_local, "slot_of", None) is self:
            # called from this queue's worker (the app's notify function re-submitting, a common
            # pipelining pattern): the execute that just finished hands its slot over -- waiting
            # for room here would wait for that very slot, which is freed only after the notify
            # function returns (a deadlock with depth 1)
            _local.slot_of = None
        else:
            self.slots.acquire()          # a full queue: wait for room
        with self.idle:
            self.pending += 1
        worker = self.workers.get(id(graph))
        if worker is None or not worker[0].is_alive():
            q: queue.Queue = queue.Queue()
            th = threading.Thread(target=self._work, args=(q,), name=f"qnnemu-async-{graph.name}", daemon=True)
            worker = self.workers[id(graph)] = (th, q)
            th.start()
        worker[1].put(job)

    def _work(self, q: queue.Queue) -> None:
        _local.worker = True
        while True:
            job = q.get()
            if job is None:
                return
            _local.slot_of = self     # the slot this job holds (submit may take it over)
            try:
                job()
            finally:
                if _local.slot_of is self:
                    self.slots.release()
                _local.slot_of = None
                with self.idle:
                    self.pending -= 1
                    self.idle.notify_all()

    def drain(self) -> None:
        """Waits until every queued execute ran (not from a worker: its own job is pending)."""
        if getattr(_local, "worker", False):
            return
        with self.idle:
            self.idle.wait_for(lambda: self.pending == 0)

    def stop(self) -> None:
        for _, q in self.workers.values():
            q.put(None)
        self.workers.clear()


_local = threading.local()
_queues: dict[int, _ContextQueue] = {}
_queues_lock = threading.Lock()
_pid = os.getpid()


def _queue_of(context) -> _ContextQueue:
    global _pid
    with _queues_lock:
        if os.getpid() != _pid:       # a forked child: the parent's workers do not exist here
            _queues.clear()
            _pid = os.getpid()
        cq = _queues.get(id(context))
        if cq is None:
            depth = int((getattr(context, "configs", None) or {}).get("asyncExecutionQueueDepth") or 0)
            cq = _queues[id(context)] = _ContextQueue(depth if depth > 0 else DEFAULT_QUEUE_DEPTH)
        return cq


def drain_context(context) -> None:
    """contextFree: the context's async executes finish first; its workers then stop."""
    with _queues_lock:
        cq = _queues.get(id(context)) if os.getpid() == _pid else None
    if cq is None:
        return
    cq.drain()
    if not getattr(_local, "worker", False):
        with _queues_lock:
            _queues.pop(id(context), None)
        cq.stop()


def queued(context) -> int:
    """Async executes of ``context`` queued or running."""
    with _queues_lock:
        cq = _queues.get(id(context))
    return cq.pending if cq is not None else 0


@entry
def graphExecuteAsync(graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle, signalHandle,
                      notifyFn, notifyParam):
    from . import graph_api  # (graph_api's decoding and run; imported late: graph_api imports the table)
    func = "graphExecuteAsync"
    job = graph_api._execute_job(func, graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle)
    if signalHandle != ffi.NULL:   # checked now; used (in use, abort, timeout) when the execute runs
        HANDLES.get(hval(signalHandle), Signal, Q.QNN_GRAPH_ERROR_INVALID_HANDLE, "signalHandle")
    g = job.graph
    cq = _queue_of(g.context)

    def run() -> None:
        status = Q.QNN_SUCCESS
        try:
            graph_api.run_execute_job(job, signalHandle)
        except QnnError as exc:
            status = int(exc.code)
            log = getattr(g, "log", None)
            if log is not None:
                log.error(f"{func}: graph '{g.name}': the queued execute failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - reported to the app through its notify function
            status = Q.QNN_GRAPH_ERROR_GENERAL
            _log.exception("graphExecuteAsync: graph '%s': the queued execute failed: %s", g.name, exc)
        if notifyFn != ffi.NULL:
            st = ffi.new("Qnn_NotifyStatus_t *")
            st.error = status
            notifyFn(notifyParam, st[0])
    cq.submit(g, run)
