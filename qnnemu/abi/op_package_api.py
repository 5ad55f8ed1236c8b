"""QnnBackend.h op package entries: backendRegisterOpPackage and (QNN 2.50)
backendRegisterOpPackageFromBinary.  Op packages are not emulated: every op comes from the
built-in qti.aisw package (qnnemu/ops); both answer NOT_SUPPORTED after checking the backend
handle, as the vendor's x86 library does.
"""
from __future__ import annotations

from .. import _version
from ..core.backend import Backend
from ..headers import Q
from ..location import Location
from ..rules import fail
from .library import entry, get as _get, not_supported

# The vendor's library checks the backend handle first (INVALID_HANDLE, NULL included).
not_supported("backendRegisterOpPackage", Q.QNN_BACKEND_ERROR_NOT_SUPPORTED,
              "op packages are not emulated yet; all ops come from the built-in qti.aisw package",
              check=lambda backend, *_: _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend"))


@entry
def backendRegisterOpPackageFromBinary(backend, opPackageBuffer, opPackageBufferSize, interfaceProvider, target):
    """QNN 2.50.  The vendor's x86 library (2.51) checks the backend handle (INVALID_HANDLE) and
    then answers NOT_SUPPORTED whatever the buffer holds ("Register Op Package from binary is not
    supported"); qnnemu does the same."""
    _get(backend, Backend, Q.QNN_BACKEND_ERROR_INVALID_HANDLE, "backend")
    fail(Location("backendRegisterOpPackageFromBinary"), "QNNEMU-not-supported",
         f"not supported by qnnemu {_version.__version__}: op "
         f"packages are not emulated (from a file or from a buffer), as the vendor's x86 library does "
         f"not register them from a buffer either; all ops come from the built-in qti.aisw package",
         code=Q.QNN_BACKEND_ERROR_NOT_SUPPORTED)
