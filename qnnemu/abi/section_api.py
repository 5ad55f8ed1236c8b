"""QnnContext.h binary sections (contextGetBinarySectionSize/GetBinarySection/ApplyBinarySection,
contextGetBinarySectionUpdate/FreeBinarySectionUpdate) and QnnTensor.h updatable tensors
(tensorUpdateGraphTensors, tensorUpdateContextTensors).

Imported by entry.py so that the ``@entry`` functions fill their table slots.
"""
from __future__ import annotations

from ..headers import Q
from .entry import not_supported

for _name in ("contextGetBinarySectionSize", "contextGetBinarySection", "contextApplyBinarySection",
              "contextGetBinarySectionUpdate", "contextFreeBinarySectionUpdate"):
    not_supported(_name, Q.QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE, "binary sections are not implemented yet")
for _name in ("tensorUpdateGraphTensors", "tensorUpdateContextTensors"):
    not_supported(_name, Q.QNN_TENSOR_ERROR_UNSUPPORTED_FEATURE, "updatable tensors are not implemented yet")
