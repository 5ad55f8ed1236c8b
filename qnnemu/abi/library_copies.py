"""Library layout (QNN HTP backend documentation, "HTP Session & Artifact Usage Guidelines":
"Supported Library Use", "Unsupported Library Use"): one copy of the backend library per process.

The document: a second copy of libQnnHtp.so loaded from another directory (or a duplicate file
system) is detected at run time, and QnnBackend_registerOpPackage, QnnBackend_validateOpConfig,
QnnContext_create, QnnDevice_create and QnnGraph_create then return
QNN_COMMON_ERROR_LOADING_BINARIES.  The vendor's x86-64 libQnnHtp.so (QNN 2.51) takes a second
copy: every one of those calls succeeds through it (tests/test_library_layout.py pins this).  So
qnnemu accepts it as the vendor does and says so through a warning rule,
``QNNEMU-library-second-copy``, on each of the five calls made through the second copy.

How a call is attributed to a copy: every libQnnHtpEmu.so loader in the process registers its real
path with the cffi module they share (csrc/loader.c, csrc/shim.c); the first to call
QnnInterface_getProviders is the backend, a loader at another path is a second copy and hands out
its own copy of the provider whose five entries mark the calling thread while they run
(``qnnemu_loader_via``).  Symbolic links resolve to the same file, hence the same copy.
"""
from __future__ import annotations

from .. import rules
from ..location import Location
from .library import ffi, lib

# The entries the document names (QnnInterface.h table fields).
GUARDED = frozenset({"backendRegisterOpPackage", "backendValidateOpConfig", "contextCreate", "deviceCreate",
                     "graphCreate"})
RULE = "QNNEMU-library-second-copy"


def _text(ptr) -> str:
    return ffi.string(ptr).decode("utf-8", "replace") if ptr != ffi.NULL else ""


def first_copy() -> str:
    """The real path of the backend library that answered QnnInterface_getProviders first ("": none
    through a loader, e.g. the module imported without one)."""
    return _text(lib.qnnemu_loader_first())


def calling_copy() -> str:
    """The real path of the second copy the running call came through, or ""."""
    return _text(lib.qnnemu_loader_via())


def check(name: str) -> None:
    """Warns when guarded entry ``name`` runs through a second copy of the library."""
    via = calling_copy()
    if via:
        rules.warn_at(Location(name).field("library"), RULE,
                      f"called through a second copy of the backend library, {via} (the first: "
                      f"{first_copy()}); the HTP backend documentation does not support two copies in "
                      f"one process (\"Unsupported Library Use\": QNN_COMMON_ERROR_LOADING_BINARIES), "
                      f"the vendor's x86-64 libQnnHtp.so runs the call, so does qnnemu")
