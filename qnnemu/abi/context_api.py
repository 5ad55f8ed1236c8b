"""QnnContext.h context-binary entries: contextGetBinarySize/GetBinary, incremental binaries,
contextFinalize, contextCreateFromBinary (and its WithSignal, WithCallback and ListAsync
variants) and contextValidateBinary. The format is qnnemu/core/binary.py.

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

from ..headers import Q
from .entry import not_supported

for _name in ("contextGetBinarySize", "contextGetBinary", "contextCreateFromBinary", "contextValidateBinary",
              "contextCreateFromBinaryWithSignal", "contextCreateFromBinaryListAsync",
              "contextGetIncrementalBinary", "contextReleaseIncrementalBinary", "contextFinalize",
              "contextCreateFromBinaryWithCallback"):
    not_supported(_name, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "context binaries are not implemented yet")
