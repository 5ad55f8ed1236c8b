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



_PINNED: list = []


def pin_our_library() -> None:
    """Holds one reference to libQnnHtpEmu.so for the rest of the process: ORT dlcloses a backend
    library with its last session, and a library reloaded at another address after the vendor's
    was loaded in between crashes the process (stale function pointers; Python objects living in
    the unloaded image).  tests/test_onnxruntime_models.py checks that case in a subprocess."""
    if not _PINNED:
        import ctypes

        import qnnemu
        _PINNED.append(ctypes.CDLL(qnnemu.backend_library_path()))
