"""QnnInterface.h: libQnnHtpEmu.so's table, QnnInterface_ImplementationV2_39_t (75 entries), and
libQnnLpaiEmu.so's table on the same core (qnnemu/abi/lpai_api.py).

The table assembly: every component module (qnnemu/abi/__init__.py lists them) registers its
``@entry`` implementations with the library object (qnnemu/abi/library.py) when imported here;
:func:`install`, called by the embedding init code (csrc/build_backend.py INIT_CODE), binds
them to their ``extern "Python+C"`` slots through the entry framework (qnnemu/abi/framework.py:
non-zero ``error=``, logged failures, errorGetMessage texts).  No component imports this module.
"""
from __future__ import annotations

from ..core import backend as core_backend, faults
from . import (
    backend_api,
    context_api,
    context_lifecycle_api,
    device_api,
    error_api,
    fast_execute,
    graph_api,
    library_copies,
    log_api,
    lpai_api,
    marshal,
    mem_api,
    op_package_api,
    perf_api,
    profile_api,
    section_api,
    signal_api,
    tensor_api,
    validate_api,
)
from .library import LIBRARY, PERF_PREFIX, fault_hook

# The components, in the order of QnnInterface.h's table (import order is irrelevant: each
# module registers the slots it implements).
COMPONENTS = (log_api, backend_api, op_package_api, device_api, context_lifecycle_api, context_api, graph_api,
              tensor_api, section_api, mem_api, profile_api, signal_api, validate_api, error_api, perf_api)


def __getattr__(name: str):
    # Why the embedded init refused the table, read by the C shim as this module's attribute.
    if name == "init_failure":
        return LIBRARY.init_failure
    raise AttributeError(name)


def _entry_hook(name: str, args) -> None:
    """First in every entry: the library layout's warning on the five entries it guards
    (qnnemu/abi/library_copies.py), then injected faults and SubSystem Restart."""
    if name in library_copies.GUARDED:
        library_copies.check(name)
    fault_hook(name, args)


def install(the_ffi, the_lib, expected: tuple[str, ...] = ()) -> None:
    """Binds every entry to its ``extern "Python+C"`` slot; called from the embedding init code.

    ``expected`` are the table's field names as the library was built; a slot without a
    Python implementation would fail at call time, so it fails the load instead.
    """
    marshal.ffi = the_ffi
    lpai_api.register_neutral_slots()   # libQnnLpaiEmu.so's table: the same slots, LPAI's own where needed
    LIBRARY.install(the_ffi, the_lib, expected, core_backend.core_api_version)
    # graphExecute's C fast path is withdrawn before every call that may change what it runs:
    # all but graphExecute itself, the read-only queries and the perf votes (which change the
    # modelled timing, not the results).
    LIBRARY.before_entry = fast_execute.clear
    # injected faults and SubSystem Restart (qnnemu/core/faults.py): checked first in every entry;
    # arming one on graphExecute (or a restart) withdraws the C fast path, which cannot fail calls
    LIBRARY.fault_hook = _entry_hook
    faults.on_change.append(fast_execute.clear)
    try:
        faults.load_env()
    except ValueError as exc:
        LIBRARY.active_logger().error(str(exc))
    LIBRARY.hook_exempt = frozenset({"graphExecute", "errorGetMessage", "errorGetVerboseMessage",
                                     "errorFreeVerboseMessage", "backendGetApiVersion", "backendGetBuildId",
                                     "propertyHasCapability", "logSetLogLevel",
                                     *LIBRARY.extra.get(PERF_PREFIX, {})})
