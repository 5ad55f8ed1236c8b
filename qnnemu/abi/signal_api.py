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
from ..errors import QnnError
from ..headers import Q
from .library import entry, ffi, hval as _hval

# Each configuration reads at most this many entries (a missing NULL terminator must not run away).
MAX_CONFIGS = 1024




def _signal(handle) -> Signal:
    return HANDLES.get(_hval(handle), Signal, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "signal")


def _parse_configs(config, func: str) -> tuple[str | None, int]:
    """(kind, timeout in us) of a NULL-terminated QnnSignal_Config_t list; the last of each
    option wins, ABORT and TIMEOUT together are refused (mutually exclusive)."""
    kind, timeout_us, seen = None, 0, set()
    if config == ffi.NULL:
        return None, 0
    for i in range(MAX_CONFIGS + 1):
        c = config[i]
        if c == ffi.NULL:
            break
        if i == MAX_CONFIGS:
            raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT,
                           f"{func}: config: no NULL terminator within {MAX_CONFIGS} entries",
                           rule="QNNEMU-signal-config-option")
        opt = int(c.option)
        if opt == Q.QNN_SIGNAL_CONFIG_OPTION_ABORT:
            kind = ABORT
            seen.add(ABORT)
        elif opt == Q.QNN_SIGNAL_CONFIG_OPTION_TIMEOUT:
            timeout_us = int(c.timeoutDurationUs)
            if timeout_us == 0:
                raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT,
                               f"{func}: config[{i}].timeoutDurationUs: 0 (a timeout must be at least 1 us)",
                               rule="QNNEMU-signal-config-timeout")
            kind = TIMEOUT
            seen.add(TIMEOUT)
        elif opt == Q.QNN_SIGNAL_CONFIG_OPTION_CUSTOM:
            raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT,
                           f"{func}: config[{i}].option: QNN_SIGNAL_CONFIG_OPTION_CUSTOM: the HTP backend "
                           f"defines no custom signal configs", rule="QNNEMU-signal-config-option")
        else:
            raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT,
                           f"{func}: config[{i}].option: unknown option {opt}", rule="QNNEMU-signal-config-option")
    if len(seen) > 1:
        raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT,
                       f"{func}: config: QNN_SIGNAL_CONFIG_OPTION_ABORT and QNN_SIGNAL_CONFIG_OPTION_TIMEOUT are "
                       f"mutually exclusive", rule="QNNEMU-signal-config-exclusive")
    return kind, timeout_us


@entry
def signalCreate(backend, config, signal):
    func = "signalCreate"
    be = HANDLES.get(_hval(backend), Backend, Q.QNN_SIGNAL_ERROR_INVALID_HANDLE, "backend")
    if signal == ffi.NULL:
        raise QnnError(Q.QNN_SIGNAL_ERROR_INVALID_ARGUMENT, f"{func}: signal is NULL", rule="QNNEMU-arg-null")
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
