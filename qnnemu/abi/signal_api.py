"""QnnSignal.h entries: signalCreate, signalSetConfig, signalTrigger, signalFree.

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

from ..headers import Q
from .entry import not_supported

for _name in ("signalCreate", "signalSetConfig", "signalTrigger", "signalFree"):
    not_supported(_name, Q.QNN_SIGNAL_ERROR_UNSUPPORTED, "signals are not implemented yet")
