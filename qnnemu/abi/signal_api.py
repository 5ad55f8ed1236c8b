"""QnnSignal.h entries: signalCreate, signalSetConfig, signalTrigger, signalFree (the signal
objects and their state machine are qnnemu/core/signal.py), plus ``use_signal``, how the calls
that take a ``Qnn_SignalHandle_t`` (contextCreateFromBinaryWithSignal / WithCallback / ListAsync,
graphFinalize, graphExecute) take one.

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

import contextlib

from ..core.backend import Backend
from ..core.handles import HANDLES
from ..core.signal import ABORT, TIMEOUT, Signal
from ..headers import Q
from ..location import Location
from ..rules import fail
from .framework import CONFIG_LIST_LIMIT, null_terminated
from .library import entry, ffi, hval as _hval


def _signal(handle) -> Signal:
    return HANDLES.get(_hval(handle), Signal, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "signal")


def _parse_configs(config, func: str) -> tuple[str | None, int]:
    """(kind, timeout in us) of a NULL-terminated QnnSignal_Config_t list; the last of each
    option wins, ABORT and TIMEOUT together are refused (mutually exclusive)."""
    kind, timeout_us, seen = None, 0, set()
    listed = null_terminated(config, CONFIG_LIST_LIMIT, Location(func).field("config"),
                             Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, rule="QNNEMU-signal-config-option")
    for i, c in enumerate(listed):
        opt = int(c.option)
        if opt == Q.QNN_SIGNAL_CONFIG_OPTION_ABORT:
            kind = ABORT
            seen.add(ABORT)
        elif opt == Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT:
            timeout_us = int(c.timeoutDurationUs)
            if timeout_us == 0:
                fail(Location(func).path(f"config[{i}].timeoutDurationUs"), "QNNEMU-signal-config-timeout",
                     "0 (a timeout must be at least 1 us)", code=Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT)
            kind = TIMEOUT
            seen.add(TIMEOUT)
        elif opt == Q.QNN_SIGNAL_CONFIG_OPTION_CUSTOM:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-signal-config-option",
                 "QNN_SIGNAL_CONFIG_OPTION_CUSTOM: the HTP backend "
                 "defines no custom signal configs", code=Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT)
        else:
            fail(Location(func).path(f"config[{i}].option"), "QNNEMU-signal-config-option",
                 f"unknown option {opt}", code=Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT)
    if len(seen) > 1:
        fail(Location(func).path("config"), "QNNEMU-signal-config-exclusive",
             "QNN_SIGNAL_CONFIG_OPTION_ABORT and QNN_SIGNAL_CONFIG_OPTION_TIMEOUT are "
             "mutually exclusive", code=Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT)
    return kind, timeout_us


@entry
def signalCreate(backend, config, signal):
    func = "signalCreate"
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "backend")
    if signal == ffi.NULL:
        fail(Location(func), "QNNEMU-arg-null", "signal is NULL", code=Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT)
    kind, timeout_us = _parse_configs(config, func)
    sig = Signal(be, be.log)
    sig.configure(kind, timeout_us, func)
    handle = HANDLES.new(sig)
    be.signals.append(handle)
    signal[0] = ffi.cast("Qnn_SignalHandle_t", handle)


@entry
def signalSetConfig(signal, config):
    func = "signalSetConfig"
    sig = _signal(signal)
    kind, timeout_us = _parse_configs(config, func)
    sig.configure(kind, timeout_us, func)  # NULL config resets the signal to "does nothing"


@entry
def signalTrigger(signal):
    _signal(signal).trigger("signalTrigger")


@entry
def signalFree(signal):
    sig = _signal(signal)
    sig.free("signalFree")
    HANDLES.release(_hval(signal))
    be = sig.backend
    if be is not None and _hval(signal) in be.signals:
        be.signals.remove(_hval(signal))


@contextlib.contextmanager
def use_signal(handle, func: str, invalid_handle_code: int, aborted_code: int, timed_out_code: int,
               in_use_code: int = Q.QNN_SIGNAL_ERROR_SIGNAL_IN_USE):
    """The signal argument of an API call: yields None for NULL, else a SignalUse (the signal is
    in use until the block ends)."""
    if handle == ffi.NULL:
        yield None
        return
    sig = HANDLES.get(_hval(handle), Signal, invalid_handle_code, "signal")
    with sig.use(func, aborted_code, timed_out_code, in_use_code) as use:
        yield use
