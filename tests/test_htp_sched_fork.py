"""fork() and the shared HTP's execute scheduler (csrc/eng_sched.c; QNN "HTP Yielding and
Pre-Emption"): a forked child starts with idle emulated devices and a fresh scheduler lock, even
when the parent forked while an execute ran and another thread was inside the scheduler."""
from __future__ import annotations

import os
import threading
import time

import pytest

_kernels = pytest.importorskip("qnnemu._kernels")


def test_a_forked_child_starts_with_idle_devices():
    """fork() while a HIGH execute runs and another thread is inside the scheduler: the child
    (pthread_atfork handler, csrc/eng_sched.c) starts with no executes on any device and a fresh
    lock, so a LOW execute there starts at once."""
    lib, ffi = _kernels.lib, _kernels.ffi
    high = ffi.new("qe_sched_exec *")
    assert lib.qe_sched_begin(high, 61, 0xBB) == 0
    stop = threading.Event()

    def churn():   # keeps the scheduler's lock busy while the parent forks
        rec = ffi.new("qe_sched_exec *")
        while not stop.is_set():
            lib.qe_sched_begin(rec, 60, 0xC0)
            lib.qe_sched_end(rec)
    th = threading.Thread(target=churn)
    th.start()
    try:
        for _ in range(10):
            pid = os.fork()
            if pid == 0:   # the child: exit code 0 when LOW started without waiting
                low = ffi.new("qe_sched_exec *")
                ok = lib.qe_sched_begin(low, 61, 0xC5) == 0 and low.waited_first == 0
                lib.qe_sched_end(low)
                os._exit(0 if ok else 1)
            deadline = time.monotonic() + 20
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            if not done:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            assert done and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
                "the forked child's LOW execute started at once (no inherited HIGH, no inherited lock)"
    finally:
        stop.set()
        th.join()
        lib.qe_sched_end(high)
