"""libQnnHtpEmu.so's ABI library object (QnnInterface.h, QnnInterface_getProviders): the
:class:`~qnnemu.abi.framework.Library` every component module registers its table slots with,
and the helpers those modules share (handle lookup, config lists, the optional logger argument).

Component modules (qnnemu/abi/__init__.py maps them to the QNN components) decorate their
implementations with ``@entry``; qnnemu/abi/entry.py imports them all and installs the table.
"""
from __future__ import annotations

from ..core import faults
from ..core.context import Context
from ..core.handles import HANDLES
from ..core.log import Logger
from ..location import Location
from ..rules import fail
from . import framework
from .framework import Library, get, hval, newest_logger, require_pointer
from .marshal import config_list as configs


def active_logger() -> Logger:
    """The app logger for messages that belong to no handle: the newest live one."""
    return newest_logger(Logger)


def logger_for_args(args) -> Logger:
    """The app logger of the first live handle among a call's arguments (its backend's)."""
    for a in args:
        if isinstance(a, framework._FFI.CData) and framework._FFI.typeof(a).kind == "pointer" and a != framework.NULL:
            obj = HANDLES.lookup(hval(a))
            if isinstance(obj, Logger):
                return obj
            log = getattr(obj, "log", None)
            if isinstance(log, Logger):
                return log
    return active_logger()


# entries an application calls on a context a SubSystem Restart invalidated, to get rid of it
SSR_CLEANUP_ENTRIES = frozenset({"contextFree", "memDeRegister", "errorGetMessage", "errorGetVerboseMessage",
                                 "errorFreeVerboseMessage", "logFree", "profileFree", "backendFree", "deviceFree"})


def fault_hook(name: str, args) -> None:
    """Injected faults (qnnemu/core/faults.py) and the answer of contexts a SubSystem Restart
    invalidated: 1007 for any call naming one of them (its graphs, its registered memory)."""
    if faults._armed:
        faults.check(name, lambda: HANDLES.live(Context))
    if faults._invalidated and name not in SSR_CLEANUP_ENTRIES:
        for a in args:
            if isinstance(a, framework._FFI.CData) and framework._FFI.typeof(a).kind == "pointer" \
                    and a != framework.NULL:
                obj = HANDLES.lookup(hval(a))
                ctx = obj if isinstance(obj, Context) else getattr(obj, "context", None)
                if isinstance(ctx, Context):
                    faults.check_invalidated(name, ctx, "context" if obj is ctx else type(obj).__name__)


LIBRARY = Library("libQnnHtpEmu.so", "QnnInterface_getProviders", "qnnemu_abi_", "qnnemu_embed_init", "table",
                  active_logger, logger_for_args)
PERF_PREFIX = "qnnemu_perf_"   # the HTP perf infrastructure functions (deviceGetInfrastructure)
keepalive: dict[str, object] = {}   # C objects handed out once and kept for the process


class _Bound:
    """``ffi`` / ``lib`` of the installed cffi module, for the component modules' bodies."""

    __slots__ = ("_attr",)

    def __init__(self, attr: str):
        self._attr = attr

    def __getattr__(self, name):
        return getattr(getattr(LIBRARY, self._attr), name)


ffi = _Bound("ffi")
lib = _Bound("lib")


def entry(fn):
    """Registers ``fn`` as the implementation of table slot ``fn.__name__``."""
    return LIBRARY.entry(fn)


def perf_entry(fn):
    """Registers an HTP perf infrastructure function handed out by deviceGetInfrastructure."""
    return LIBRARY.entry(fn, prefix=PERF_PREFIX)


def not_supported(name: str, code: int, why: str, check=None) -> None:
    """Table slot ``name`` answers ``code`` (rule QNNEMU-not-supported) and logs why."""
    LIBRARY.not_supported(name, code, why, "QNNEMU-not-supported", check)


def no_properties(properties, ctype: str, loc: Location, arg_code: int, code: int, rule: str, why: str) -> None:
    """A ``*GetProperty`` entry of a component for which the HTP backend answers no property:
    a NULL list is refused with ``arg_code``, the first property asked for with ``code``."""
    require_pointer(properties, loc.field("properties"), arg_code)
    for i, p in enumerate(configs(properties, ctype, loc.field("properties"))):
        fail(loc.index("properties", i).field("option"), rule, f"{int(p.option)}: {why}", code=code)


def optional_logger(handle, code: int) -> Logger | None:
    """A ``Qnn_LogHandle_t`` argument that may be NULL; a garbage or freed one is refused."""
    if handle == framework.NULL:
        return None
    return get(handle, Logger, code, "logger")


__all__ = ["LIBRARY", "ffi", "lib", "entry", "perf_entry", "not_supported", "configs", "optional_logger",
           "active_logger", "get", "hval", "keepalive"]
