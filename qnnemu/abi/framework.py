"""The ABI entry framework of both embedded libraries (QnnInterface.h for libQnnHtpEmu.so,
System/QnnSystemInterface.h for libQnnSystem.so): how a Python function becomes a C table slot,
how its failures reach the application, and the bounded checks every entry makes on C input.

One :class:`Library` per embedded cffi module (``_qnnemu_htp_abi``, ``_qnnemu_system_abi``):

- ``@library.entry`` registers a function as the implementation of the table slot of its name;
  ``library.not_supported(name, code, why)`` fills a slot that answers a not-supported code;
- ``library.install(ffi, lib, expected, api_version)`` (called by the embedding init code, see
  csrc/abi_shim.h) binds every entry to its ``extern "Python+C"`` symbol with a non-zero
  ``error=`` (QNN_COMMON_ERROR_GENERAL) and an ``onerror`` that logs: an unexpected Python
  exception never comes back as QNN_SUCCESS;
- an expected failure is a ``QnnError`` (built with ``qnnemu.rules.fail(Location(...), rule,
  message, code=...)``): its text -- ``[rule] function: parameter path: message`` -- is logged at
  ERROR through the application's logger and kept for ``errorGetMessage`` (``library.messages``),
  and its code is returned;
- warning rules raised during a call go to the logger of the call's handles (qnnemu/rules.py).

The validation primitives are bounded: a NULL-terminated list is walked at most
``CONFIG_LIST_LIMIT`` entries (``NAME_LIST_LIMIT`` for graph name lists; :func:`null_terminated`),
so a list without its terminator is refused, never walked until the process faults.
``SCALAR_MEMBERS`` is the one Qnn_DataType_t -> Qnn_Scalar_t member table (op parameters,
finalize configs, System profile events).
"""
from __future__ import annotations

import importlib
import threading
import traceback
from collections.abc import Callable

from .. import _version, rules
from ..core.handles import HANDLES
from ..core.log import NULL_LOGGER, PY_LOGGER, Logger
from ..errors import QnnError
from ..headers import Q
from ..location import Location

# Pointer tests and casts need no declarations: cdata of every FFI share one backend, so a plain
# FFI compares and casts the pointers of either library.  The backend's own FFI type (what the
# compiled modules' ``ffi`` objects are) needs no C parser: ``cffi.FFI()`` imports pycparser,
# a tenth of the library's load time.
_FFI = importlib.import_module("_cffi_backend").FFI()
NULL = _FFI.NULL
_UINTPTR = _FFI.typeof("uintptr_t")

# The limits of the NULL-terminated lists the libraries read; a list without its terminator
# within its limit is refused.  Every list of structs (the config lists of every component,
# signal and profile configs, contextCreateFromBinaryListAsync's parameters) holds a handful of
# entries: CONFIG_LIST_LIMIT.  Graph name lists (ENABLE_GRAPHS, GRAPH_RETENTION_ORDER) name
# graphs of a context, which may hold many: NAME_LIST_LIMIT.
CONFIG_LIST_LIMIT = 4096
NAME_LIST_LIMIT = 65536

# Qnn_DataType_t -> the Qnn_Scalar_t member (QnnTypes.h) holding a scalar of that type.  Fixed
# point scalars are read from the member of their storage width and signedness (UFIXED_POINT_8
# is a uint8_t), as their tensors are stored: the union is little-endian, so a client that
# wrote the wider member (uint32Value) with an in-range value reads the same; FLOAT_16 scalars
# travel as floatValue (the union has no half member).  tests/test_abi_framework.py pins it.
SCALAR_MEMBERS: dict[int, str] = {
    Q.QNN_DATATYPE_FLOAT_32: "floatValue", Q.QNN_DATATYPE_FLOAT_64: "doubleValue",
    Q.QNN_DATATYPE_UINT_64: "uint64Value", Q.QNN_DATATYPE_INT_64: "int64Value",
    Q.QNN_DATATYPE_UINT_32: "uint32Value", Q.QNN_DATATYPE_INT_32: "int32Value",
    Q.QNN_DATATYPE_UINT_16: "uint16Value", Q.QNN_DATATYPE_INT_16: "int16Value",
    Q.QNN_DATATYPE_UINT_8: "uint8Value", Q.QNN_DATATYPE_INT_8: "int8Value",
    Q.QNN_DATATYPE_BOOL_8: "bool8Value", Q.QNN_DATATYPE_BFLOAT_16: "bfloat16Value",
    Q.QNN_DATATYPE_STRING: "stringValue",
    Q.QNN_DATATYPE_UFIXED_POINT_8: "uint8Value", Q.QNN_DATATYPE_SFIXED_POINT_8: "int8Value",
    Q.QNN_DATATYPE_UFIXED_POINT_16: "uint16Value", Q.QNN_DATATYPE_SFIXED_POINT_16: "int16Value",
    Q.QNN_DATATYPE_UFIXED_POINT_32: "uint32Value", Q.QNN_DATATYPE_SFIXED_POINT_32: "int32Value",
    Q.QNN_DATATYPE_FLOAT_16: "floatValue",
}


# ------------------------------------------------------------------------ C values, handles
def hval(handle) -> int:
    """The integer value of a handle (any pointer cdata)."""
    return int(_FFI.cast(_UINTPTR, handle))


def get(handle, kind, code: int, what: str):
    """The live object of ``kind`` behind C handle ``handle``, or QnnError(code) (NULL, freed,
    foreign or of another kind: qnnemu/core/handles.py)."""
    return HANDLES.get(hval(handle), kind, code, what)


def c_str(p) -> str | None:
    """A copy of a C string (None for NULL); invalid UTF-8 is replaced, never refused."""
    if p == NULL:
        return None
    return _FFI.string(p).decode("utf-8", errors="replace")


def read_scalar(s) -> tuple[int, object]:
    """(dataType, value) of a Qnn_Scalar_t; value None for a type without a member."""
    dtype = int(s.dataType)
    member = SCALAR_MEMBERS.get(dtype)
    if member is None:
        return dtype, None
    value = getattr(s, member)
    if member == "stringValue":
        value = c_str(value)
    elif member == "bool8Value":
        value = bool(value)
    return dtype, value


# ------------------------------------------------------------------- validation primitives
def require_pointer(ptr, loc: Location, code: int, rule: str = "QNNEMU-arg-null") -> None:
    """Refuses a NULL pointer argument or member at ``loc``: ``[rule] function: path is NULL``
    (the one message form every NULL refusal has had; tests match it)."""
    if ptr == NULL:
        rules.fail(Location(loc.function), rule, f"{loc.parameter} is NULL", code=code)


def null_terminated(array, limit: int, loc: Location, code: int,
                    rule: str = "QNNEMU-config-list-unterminated", what: str = "entries") -> list:
    """The entries of a NULL-terminated ``const X **`` list (a NULL list: no entries), read up
    to ``limit`` entries; a list without its terminator within ``limit`` is refused at ``loc``
    (its entry ``limit`` is the last one read)."""
    out: list = []
    if array == NULL:
        return out
    for i in range(limit + 1):
        item = array[i]
        if item == NULL:
            return out
        if i == limit:
            break
        out.append(item)
    rules.fail(loc, rule, f"no NULL terminator within {limit} {what}", code=code)


def enum_value(value, enum: str, loc: Location, code: int, rule: str, accept=None) -> str:
    """The name of ``value`` in the QNN enum whose constants start with ``enum`` (e.g.
    ``"QNN_SIGNAL_CONFIG_OPTION_"``); a value the enum lacks (or ``accept(name)`` refuses) is
    refused at ``loc``."""
    number = int(value)
    name = Q.enum(enum).get(number)
    if name is None or (accept is not None and not accept(name)):
        rules.fail(loc, rule, f"{number} is not a {enum.rstrip('_')}* value", code=code)
    return name


# ----------------------------------------------------------------------------- the library
class Library:
    """One embedded library: its table slots, its FFI once installed, its error messages.

    ``active_logger()`` is the application logger for messages that belong to no handle;
    ``call_logger(args)`` (optional) the logger of the first live handle among a call's
    arguments -- failures and warning rules of that call go there.
    """

    def __init__(self, library: str, provider: str, prefix: str, init_symbol: str, table: str,
                 active_logger: Callable[[], Logger], call_logger: Callable | None = None):
        self.library = library              # "libQnnHtpEmu.so"
        self.provider = provider            # its C entry point: "QnnInterface_getProviders"
        self.prefix = prefix                # C symbol prefix of the slots: "qnnemu_abi_"
        self.init_symbol = init_symbol      # the embedding API's init: "qnnemu_embed_init"
        self.table = table                  # "table" / "System table" (init failure text)
        self.active_logger = active_logger
        self.call_logger = call_logger
        self.ffi = None
        self.lib = None
        self.entries: dict[str, Callable] = {}          # slot name -> wrapper
        self.raw: dict[str, Callable] = {}              # slot name -> its implementation (unwrapped)
        self.extra: dict[str, dict[str, Callable]] = {}  # other symbol prefix -> name -> wrapper
        self.lock = threading.Lock()
        self.messages: dict[int, tuple[str, str]] = {}  # code -> (function, last message)
        self.init_failure: str | None = None            # why embed_init refused (the shim prints it)
        # Called before every entry whose name is not in ``hook_exempt`` (the HTP library:
        # graphExecute's C fast path is withdrawn before any other call, qnnemu/abi/fast_execute.py).
        self.before_entry: Callable[[], None] | None = None
        self.hook_exempt: frozenset[str] = frozenset()
        # Called first in every entry with (name, args) (the HTP library: injected faults and
        # contexts invalidated by a SubSystem Restart, qnnemu/core/faults.py); raises QnnError.
        self.fault_hook: Callable[[str, tuple], None] | None = None

    # ---- failures
    def record(self, code: int, func: str, text: str) -> None:
        """Keeps ``text`` as the last message of error ``code`` (errorGetMessage)."""
        with self.lock:
            self.messages[code] = (func, text)

    def message(self, code: int) -> tuple[str, str]:
        with self.lock:
            return self.messages.get(code, ("", "no further detail recorded"))

    def fail(self, func: str, err: QnnError, logger: Logger | None = None) -> int:
        """A failed call: its message names ``func``, is kept and logged at ERROR; returns the code."""
        if not err.detail.startswith(func + ":"):
            err = rules.error(Location(func), err.rule, err.detail, code=err.code)
        self.record(err.code, func, str(err))
        (logger or self.active_logger()).error(str(err))
        return err.code

    def onerror_for(self, func: str):
        """cffi's ``onerror`` of slot ``func``: an unexpected exception is logged, the call
        returns the slot's ``error=`` value."""
        def onerror(exc_type, exc_value, tb):
            msg = f"{func}: internal error (returned QNN_COMMON_ERROR_GENERAL): {exc_value!r}"
            try:
                self.record(Q.QNN_COMMON_ERROR_GENERAL, func, msg)
                self.active_logger().error(msg)
                PY_LOGGER.debug("".join(traceback.format_exception(exc_type, exc_value, tb)))
            except Exception:  # noqa: BLE001 - logging must not raise inside cffi's error path
                pass
            return None
        return onerror

    # ---- registering slots
    def entry(self, fn: Callable, prefix: str | None = None) -> Callable:
        """Registers ``fn`` as the implementation of slot ``fn.__name__`` (of symbol ``prefix``
        + name when ``prefix`` is given: functions handed out by an entry, not table slots)."""
        name = fn.__name__
        call_logger = self.call_logger
        library = self

        def wrapper(*args):
            if library.before_entry is not None and name not in library.hook_exempt:
                library.before_entry()
            # Warning rules raised during the call go to the app logger of its handles (found
            # only when one is raised: the execute hot path pays a context-variable set only).
            token = rules._CURRENT.set(_CallLogger(call_logger, args)) if call_logger else None
            try:
                if library.fault_hook is not None:
                    library.fault_hook(name, args)
                code = fn(*args)
                return Q.QNN_SUCCESS if code is None else code
            except QnnError as err:
                return self.fail(name, err, call_logger(args) if call_logger else None)
            finally:
                if token is not None:
                    rules._CURRENT.reset(token)

        wrapper.__name__ = name
        if prefix is None:
            self.entries[name] = wrapper
            self.raw[name] = fn
        else:
            self.extra.setdefault(prefix, {})[name] = wrapper
        return fn

    def not_supported(self, name: str, code: int, why: str, rule: str, check: Callable | None = None) -> None:
        """Slot ``name`` answers ``code`` and logs why; ``check(*args)`` first validates what
        the vendor's library validates before answering (e.g. the handle argument)."""
        def fn(*args):
            if check is not None:
                check(*args)
            rules.fail(Location(name), rule, f"not supported by qnnemu {_version.__version__}: {why}", code=code)
        fn.__name__ = name
        self.entry(fn)

    # ---- installing
    def install(self, the_ffi, the_lib, expected: tuple[str, ...], api_version: Callable[[], tuple]) -> None:
        """Binds every slot to its ``extern "Python+C"`` symbol and defines the embedding init
        (``<init_symbol>(baked_version, uint32_t version[3])``, csrc/abi_shim.h): 1 and the API
        version when the table can be handed out, else a negative code and ``init_failure``.

        ``expected`` are the table's field names as the library was built; a slot without a
        Python implementation would fail at call time, so it fails the load instead."""
        self.ffi, self.lib = the_ffi, the_lib
        missing = sorted(set(expected) - set(self.entries))
        for name, wrapper in self.entries.items():
            the_ffi.def_extern(name=self.prefix + name, error=Q.QNN_COMMON_ERROR_GENERAL,
                               onerror=self.onerror_for(name))(wrapper)
        for prefix, wrappers in self.extra.items():
            for name, wrapper in wrappers.items():
                the_ffi.def_extern(name=prefix + name, error=Q.QNN_COMMON_ERROR_GENERAL,
                                   onerror=self.onerror_for(name))(wrapper)
        library = self

        @the_ffi.def_extern(name=self.init_symbol, error=0, onerror=self.onerror_for(self.provider))
        def embed_init(baked_version, version):
            if missing:
                library.init_failure = f"no implementation for {library.table} entries {missing}"
                return -3
            baked = c_str(baked_version)
            if baked != _version.__version__:
                library.init_failure = (f"{library.library} was built for qnnemu {baked} but the importable "
                                        f"package is {_version.__version__}; rebuild/reinstall so they match")
                return -1
            try:
                triple = api_version()
            except QnnError as err:
                library.init_failure = str(err)
                return -2
            version[0], version[1], version[2] = triple
            return 1


class _CallLogger:
    """The logger of one API call for warning rules (qnnemu/rules.py), found from its
    arguments when the first warning is logged."""

    __slots__ = ("find", "args")

    def __init__(self, find, args):
        self.find, self.args = find, args

    def warn(self, text: str) -> None:
        self.find(self.args).warn(text)


def newest_logger(kind=Logger, unwrap: Callable = lambda obj: obj) -> Logger:
    """The newest live handle of ``kind`` as a logger (NULL_LOGGER without one)."""
    live = HANDLES.live(kind)
    return unwrap(live[-1]) if live else NULL_LOGGER


__all__ = ["Library", "CONFIG_LIST_LIMIT", "NAME_LIST_LIMIT", "SCALAR_MEMBERS", "NULL", "hval", "get", "c_str",
           "read_scalar", "require_pointer", "null_terminated", "enum_value", "newest_logger"]
