"""QnnSignal.h: signal objects that abort or time out a long-running API call.

A ``Signal`` (``signalCreate``) is configured with at most one of

- ``QNN_SIGNAL_CONFIG_OPTION_ABORT``: ``signalTrigger`` asks the call using the signal to stop at
  its next check point;
- ``QNN_SIGNAL_CONFIG_OPTION_TIMEOUT`` (``timeoutDurationUs``, microseconds): the call using the
  signal stops at its first check point after that long (measured from when the call began
  using the signal);

the two are mutually exclusive. With no config the signal does nothing.

State machine (QnnSignal.h):

- *idle*: available; ``signalSetConfig`` and ``signalFree`` are allowed, ``signalTrigger``
  answers ``QNN_SIGNAL_ERROR_SIGNAL_IDLE``;
- *in use*: from the moment an API call takes the signal (``Signal.use``) until that call
  returns. A second call given the same signal fails with ``QNN_SIGNAL_ERROR_SIGNAL_IN_USE``;
  ``signalSetConfig`` / ``signalFree`` too. ``signalTrigger`` on an ABORT signal marks it
  triggered and, from another thread, blocks until the call has cleaned up and returned (the
  header's "gracefully cease execution ... block until the targeted call has released associated
  resources"). Triggered from the thread running the call (e.g. from a notification callback
  of ``contextCreateFromBinaryListAsync``) it cannot wait for its own caller, so it returns at once
  and the call stops at its next check point. Triggering a TIMEOUT or unconfigured signal answers
  ``QNN_SIGNAL_ERROR_INCOMPATIBLE_SIGNAL_TYPE``.

Where the emulator checks (``SignalUse.check``): context loading after the header, after the
metadata, before each graph and at the end (qnnemu/core/binary.py), between the binaries of a
``contextCreateFromBinaryListAsync`` call; ``graphExecute`` before the run and after every
step of the plan; ``graphFinalize`` before compiling (compiling the plan is one step).
"""
from __future__ import annotations

import contextlib
import threading
import time

from ..headers import Q
from ..location import Location
from ..rules import fail
from .log import NULL_LOGGER

ABORT = "abort"
TIMEOUT = "timeout"


class Signal:
    def __init__(self, backend=None, logger=None):
        self.backend = backend
        self.log = logger or NULL_LOGGER
        self.kind: str | None = None         # ABORT, TIMEOUT or None (unconfigured)
        self.timeout_us = 0
        self._cond = threading.Condition()
        self.user: str | None = None         # the API function using the signal
        self.user_thread: int | None = None
        self.triggered = False
        self.started_ns = 0
        self.freed = False

    # ---- configuration ---------------------------------------------------------------------
    @property
    def in_use(self) -> bool:
        return self.user is not None

    def _check_idle(self, func: str, what: str) -> None:
        if self.in_use:
            fail(Location(func).field(what), "QNNEMU-signal-in-use",
                 f"the signal is in use by {self.user}; wait until that call returns",
                 code=Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE)

    def configure(self, kind: str | None, timeout_us: int, func: str) -> None:
        """Replaces the configuration (``signalCreate`` / ``signalSetConfig``)."""
        with self._cond:
            self._check_idle(func, "signal")
            self.kind = kind
            self.timeout_us = int(timeout_us) if kind == TIMEOUT else 0

    def free(self, func: str = "signalFree") -> None:
        with self._cond:
            self._check_idle(func, "signal")
            self.freed = True

    # ---- use by an API call ----------------------------------------------------------------
    @contextlib.contextmanager
    def use(self, func: str, aborted_code: int, timed_out_code: int,
            in_use_code: int = Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE):
        """Marks the signal in use by ``func`` for the duration of the block; yields the
        ``SignalUse`` whose ``check()`` raises the call's ABORTED / TIMED_OUT error."""
        with self._cond:
            if self.in_use:
                fail(Location(func).path("signal"), "QNNEMU-signal-in-use",
                     f"the signal is already in use by {self.user} "
                     f"(a signal serves one call at a time)", code=in_use_code)
            self.user = func
            self.user_thread = threading.get_ident()
            self.triggered = False
            self.started_ns = time.monotonic_ns()
        try:
            yield SignalUse(self, func, aborted_code, timed_out_code)
        finally:
            with self._cond:
                self.user = None
                self.user_thread = None
                self.triggered = False
                self._cond.notify_all()

    def trigger(self, func: str = "signalTrigger") -> None:
        with self._cond:
            if not self.in_use:
                fail(Location(func).path("signal"), "QNNEMU-signalTrigger-idle",
                     "the signal is idle (no call is using it), nothing to trigger",
                     code=Q.QNN_SIGNAL_ERROR_SIGNAL_IDLE)
            if self.kind != ABORT:
                fail(Location(func).path("signal"), "QNNEMU-signalTrigger-type",
                     "only QNN_SIGNAL_CONFIG_OPTION_ABORT signals can be triggered; "
                     f"this one is {'a TIMEOUT' if self.kind == TIMEOUT else 'an unconfigured'} signal",
                     code=Q.QNN_SIGNAL_ERROR_INCOMPATIBLE_SIGNAL_TYPE)
            self.triggered = True
            user = self.user
            self.log.info(f"{func}: abort requested for {user}")
            if self.user_thread == threading.get_ident():
                return  # triggered from inside the call (a callback): it stops at its next check
            while self.in_use and self.user == user:
                self._cond.wait()


class SignalUse:
    """One call's use of a signal."""

    __slots__ = ("signal", "func", "aborted_code", "timed_out_code")

    def __init__(self, signal: Signal, func: str, aborted_code: int, timed_out_code: int):
        self.signal = signal
        self.func = func
        self.aborted_code = aborted_code
        self.timed_out_code = timed_out_code

    def check(self, *_ignored) -> None:
        """Raises the call's ABORTED error once triggered, TIMED_OUT once the timeout passed.
        (Extra arguments are ignored so that it can be a plan observer.)"""
        s = self.signal
        if s.kind == ABORT and s.triggered:
            fail(Location(self.func).path("signal"), "QNNEMU-signal-aborted", "aborted by signalTrigger",
                 code=self.aborted_code)
        if s.kind == TIMEOUT:
            elapsed_us = (time.monotonic_ns() - s.started_ns) // 1000
            if elapsed_us >= s.timeout_us:
                fail(Location(self.func).path("signal"), "QNNEMU-signal-timeout",
                     f"timed out after {elapsed_us} us (timeoutDurationUs "
                     f"{s.timeout_us})", code=self.timed_out_code)


def checker(use: SignalUse | None):
    """``check_abort`` for binary.deserialize (None without a signal)."""
    return None if use is None else use.check
