"""QnnBackend.h + QnnProperty.h: the backend object, its build id, supported operations and
capabilities.

Freeing a backend invalidates everything created from it (contexts, their graphs); live
contexts at that point are freed as the vendor's library does, with warning
QNNEMU-backend-free-contexts-alive (well-behaved apps free them first).
"""
from __future__ import annotations

from .. import ops, rules
from ..headers import Q, constants
from ..htp import groups as htp_groups
from .api_version import BUILD_ID, DEFAULT_CORE_API, MIN_CORE_API_MINOR, SDK_VERSION, core_api_version  # noqa: F401 (the backend's names)
from .context import Context
from .handles import HANDLES
from .log import NULL_LOGGER

SUPPORTED_PROPERTIES = frozenset({
    Q.QNN_PROPERTY_GROUP_CORE, Q.QNN_PROPERTY_GROUP_BACKEND, Q.QNN_PROPERTY_GROUP_CONTEXT,
    Q.QNN_PROPERTY_GROUP_GRAPH, Q.QNN_PROPERTY_GROUP_TENSOR, Q.QNN_PROPERTY_GROUP_LOG,
    Q.QNN_PROPERTY_GROUP_DEVICE, Q.QNN_PROPERTY_GROUP_ERROR,
    Q.QNN_PROPERTY_DEVICE_SUPPORT_INFRASTRUCTURE,
    Q.QNN_PROPERTY_GRAPH_SUPPORT_EXECUTE, Q.QNN_PROPERTY_GRAPH_SUPPORT_CONFIG,
    Q.QNN_PROPERTY_GRAPH_SUPPORT_NULL_INPUTS,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIGURATION,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_CONTEXT_TENSORS,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_QUANTIZATION_ENCODING_SCALE_OFFSET,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_QUANTIZATION_ENCODING_BW_SCALE_OFFSET,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET,
    Q.QNN_PROPERTY_ERROR_GET_VERBOSE_MESSAGE,
    Q.QNN_PROPERTY_GROUP_PROFILE, Q.QNN_PROPERTY_PROFILE_SUPPORTS_EXTENDED_EVENT,
    Q.QNN_PROPERTY_PROFILE_SUPPORT_MAX_EVENTS_CONFIG, Q.QNN_PROPERTY_PROFILE_SUPPORT_OPTRACE_CONFIG,
    Q.QNN_PROPERTY_GROUP_MEMORY, Q.QNN_PROPERTY_TENSOR_SUPPORT_MEMHANDLE_TYPE,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION,
    # context binaries (abi/context_api.py) and binary sections (abi/section_api.py)
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CACHING, Q.QNN_PROPERTY_CONTEXT_SUPPORT_VALIDATE_BINARY,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_BINARY_COMPATIBILITY_TYPE,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_ENABLE_GRAPHS, Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_PERSISTENT_BINARY,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CREATE_FROM_BINARY_WITH_SIGNALS,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CREATE_FROM_BINARY_LIST_ASYNC,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CREATE_FROM_BINARY_WITH_CALLBACK,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_INCREMENTAL_BINARY,
    Q.QNN_PROPERTY_GROUP_CONTEXT + 16,  # QNN_PROPERTY_CONTEXT_SUPPORT_DEFERRED_GRAPH_INIT (an expression macro)
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CUSTOM_PROPERTY,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_UPDATES, Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_SECTION_FULL_CONTEXT,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_SECTION_UPDATES,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_WEIGHT_ONLY_UPDATES,
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_BINARY_QUANT_ONLY_UPDATES,
    Q.QNN_PROPERTY_GRAPH_SUPPORT_UPDATABLE_WEIGHTS_BINARY_SECTION_CREATION,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_UPDATEABLE_STATIC_TENSORS, Q.QNN_PROPERTY_TENSOR_SUPPORT_UPDATEABLE_NATIVE_TENSORS,
    Q.QNN_PROPERTY_TENSOR_SUPPORT_UPDATEABLE_APP_TENSORS,
    # QnnSignal.h (core/signal.py): loading, finalize and execute
    Q.QNN_PROPERTY_GROUP_SIGNAL, Q.QNN_PROPERTY_SIGNAL_SUPPORT_ABORT, Q.QNN_PROPERTY_SIGNAL_SUPPORT_TIMEOUT,
    Q.QNN_PROPERTY_GRAPH_SUPPORT_SIGNALS, Q.QNN_PROPERTY_GRAPH_SUPPORT_FINALIZE_SIGNAL,
    Q.QNN_PROPERTY_GRAPH_SUPPORT_EXECUTE_SIGNAL,
    # graphValidate / graphFreeValidationResult (QNN 2.50; abi/validate_api.py)
    Q.QNN_PROPERTY_GRAPH_SUPPORT_GRAPH_VALIDATION,
    # graph switching's low-memory mode (htp/switching.py); the vendor's library answers SUPPORTED
    Q.QNN_PROPERTY_CONTEXT_SUPPORT_CONFIG_MEMORY_LIMIT_HINT,
})
KNOWN_PROPERTIES = frozenset(
    v for k, v in constants().items()
    if isinstance(v, int) and k.startswith("QNN_PROPERTY_")
    and (k.startswith("QNN_PROPERTY_GROUP_") or "_SUPPORT" in k))


def has_capability(key: int) -> int:
    if key in SUPPORTED_PROPERTIES:
        return Q.QNN_PROPERTY_SUPPORTED
    if key in KNOWN_PROPERTIES:
        return Q.QNN_PROPERTY_NOT_SUPPORTED
    return Q.QNN_PROPERTY_ERROR_UNKNOWN_KEY


def supported_operations() -> list[tuple[str, str]]:
    """(package, op type) of every op this emulator executes."""
    return [(ops.PACKAGE_NAME, name) for name in sorted(ops.REGISTRY)]


class Backend:
    def __init__(self, logger=None, configs=None):
        self.log = logger or NULL_LOGGER
        self.configs = configs or {}
        self.contexts: dict[int, Context] = {}   # handle -> live context
        self.devices: list[int] = []
        self.signals: list[int] = []  # signalCreate handles, released by backendFree

    def adopt_context(self, ctx: Context) -> int:
        """Registers a context built elsewhere (loaded from a binary) and returns its handle."""
        ctx.handle = HANDLES.new(ctx)
        self.contexts[ctx.handle] = ctx
        htp_groups.context_opened(ctx.handle, ctx)
        return ctx.handle

    def create_context(self, device, logger, configs) -> int:
        return self.adopt_context(Context(self, device, logger or self.log, configs))

    def free_context(self, handle: int) -> None:
        ctx = self.contexts.pop(handle, None)
        if ctx is not None:
            htp_groups.context_closed(handle)
            ctx.free()
        HANDLES.release(handle)

    def free(self) -> None:
        if self.contexts:
            # The vendor's library frees them too, silently (measured).
            rules.warn("QNNEMU-backend-free-contexts-alive", "backendFree", "backend",
                       f"{len(self.contexts)} context(s) still alive; freeing them and their graphs (their "
                       f"handles are invalid from now on)", logger=self.log)
        for handle in list(self.contexts):
            self.free_context(handle)
        for handle in self.signals:  # a signal in use belongs to a call that has returned by now
            HANDLES.release(handle)
        self.signals.clear()
