"""ONNX Runtime's QNN execution provider for the tests (qnnemu/onnxruntime.py; README "Shared memory
(memRegister) and ONNX Runtime"): the one place tests register onnxruntime-qnn's EP plugin
library, through ``qnnemu.onnxruntime.register_qnn_ep`` (once per process, tolerating an earlier
registration), and get its ``OrtEpDevice``.

In-process tests call ``qnn_ep_device()``; a subprocess script (vendor runs need their own
LD_LIBRARY_PATH) calls ``qnnemu.onnxruntime.qnn_device()`` itself."""
from __future__ import annotations

import qnnemu.onnxruntime as qort

EP_NAME = qort.EP_NAME


def qnn_ep_device():
    """The QNN EP's ``OrtEpDevice`` after registering onnxruntime-qnn's EP library (once)."""
    return qort.qnn_device()

