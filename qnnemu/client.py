"""A small Pythonic client that drives any QNN backend library through its C ABI.

It uses cffi in ABI mode (``ffi.dlopen``) with declarations generated from our own headers
(``qnnemu.headers.cdef()``), so it works with our ``libQnnHtpEmu.so`` as well as with the
vendor's ``libQnnHtp.so``/``libQnnSaver.so``::

    from qnnemu.client import Backend
    with Backend(path) as be:                       # None -> qnnemu.backend_library_path()
        ctx = be.context()
        g = ctx.graph("g0", precision="fp16")       # HTP custom graph config
        x = g.input("x", (1, 8, 8, 3), np.float32)  # APP_WRITE
        w = g.static("w", weights)                  # STATIC
        y = g.node("Conv2d", [x, w, b], params={"stride": np.array([1, 1], np.uint32), ...},
                   outputs=[("y", (1, 8, 8, 4), np.float32)], app_read=True)
        g.finalize()
        out = g.execute({"x": arr})                 # {"y": ndarray}
        blob = ctx.get_binary()                     # contextGetBinarySize + contextGetBinary

    with Backend(path) as be:                       # later, maybe in another process
        ctx = be.context_from_binary(blob)          # contextCreateFromBinary
        info = SystemLibrary().binary_info(blob)    # qnnemu.system_client: graphs and tensors
        g = ctx.retrieve_graph("g0", info["graphs"][0]["inputs"], info["graphs"][0]["outputs"])
        out = g.execute({"x": arr})                 # graphRetrieve'd graphs execute the same way

Graph inputs and outputs are fed and returned in the tensor's own storage type
(``Tensor.numpy_dtype``): a quantized tensor takes and gives its fixed-point codes, quantization
is the caller's (``Tensor.quant`` holds its encoding in the system-client dict form).

Parameter rule (``Graph.node(params=...)``):

- an ``np.ndarray`` with ``ndim >= 1`` becomes a tensor parameter: a STATIC tensor created
  with ``tensorCreateGraphTensor`` (named ``<node>.<param>``), as QNN requires;
- a numpy scalar (or 0-d array) becomes a scalar of the matching QNN type
  (``np.uint32`` -> ``QNN_DATATYPE_UINT_32``, ``np.float32`` -> ``FLOAT_32``,
  ``np.bool_`` -> ``BOOL_8``, ...);
- a Python ``bool`` -> ``BOOL_8``; a Python ``float`` -> ``FLOAT_32``; a Python ``int`` ->
  ``UINT_32`` when non-negative (most QNN integer parameters, e.g. ``group`` and ``axis``, are
  ``uint32``), else ``INT_32``. Pass ``np.int32(...)`` to force ``INT_32``.

Every QNN call's status is checked; a failure raises :class:`QnnCallError` carrying the API
function name, the code and the backend's own ``errorGetMessage`` text. All memory handed to
the backend (names, dimensions, static data, configs) stays referenced by the owning
graph/context/backend object until that object is freed; handles are freed in reverse order
of creation (contexts, which free their graphs, then device, backend, log).
"""
from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import cffi
import numpy as np

from .core import dtypes
from .headers import Q, cdef

__all__ = ["Backend", "Context", "Graph", "Tensor", "Profile", "QnnCallError", "ApiVersion",
           "GraphConfig", "htp_graph_config", "htp_context_config", "htp_device_config", "ffi"]

log = logging.getLogger("qnnemu.client")

ffi = cffi.FFI()
ffi.cdef(cdef())
# The log callback receives a va_list, which on x86-64 is passed as a pointer; libc's
# vsnprintf is declared with a void * last argument so that it can be forwarded unchanged.
ffi.cdef("int vsnprintf(char *str, size_t size, const char *format, void *ap);")
# graphAddNode and backendValidateOpConfig take Qnn_OpConfig_t by value; cffi's ABI mode cannot
# pass a struct containing an anonymous union, so the calls go through a pointer type whose
# argument is a layout-identical struct with a named member (80 bytes, passed in memory).
ffi.cdef("typedef struct { Qnn_OpConfigVersion_t version; Qnn_OpConfigV1_t v1; } "
         "qnnemu_OpConfigByValue_t;"
         "typedef Qnn_ErrorHandle_t (*qnnemu_AddNodeFn_t)(void *, qnnemu_OpConfigByValue_t);")
assert ffi.sizeof("qnnemu_OpConfigByValue_t") == ffi.sizeof("Qnn_OpConfig_t")
_libc = ffi.dlopen(None)

_LOG_LEVELS = {
    "error": Q.QNN_LOG_LEVEL_ERROR, "warn": Q.QNN_LOG_LEVEL_WARN, "info": Q.QNN_LOG_LEVEL_INFO,
    "verbose": Q.QNN_LOG_LEVEL_VERBOSE, "debug": Q.QNN_LOG_LEVEL_DEBUG,
}
_PY_LEVELS = {
    Q.QNN_LOG_LEVEL_ERROR: logging.ERROR, Q.QNN_LOG_LEVEL_WARN: logging.WARNING,
    Q.QNN_LOG_LEVEL_INFO: logging.INFO, Q.QNN_LOG_LEVEL_VERBOSE: logging.DEBUG,
    Q.QNN_LOG_LEVEL_DEBUG: logging.DEBUG,
}
_PRECISIONS = {"fp16": Q.QNN_PRECISION_FLOAT16, "fp32": Q.QNN_PRECISION_FLOAT32}


def make_log_callback(the_ffi, libc, logger: logging.Logger):
    """A QnnLog_Callback_t (of ``the_ffi``, which declares it and ``vsnprintf`` in ``libc``)
    that formats the message and hands it to ``logger`` at the matching Python level.  Keep it
    for the whole process: libraries may log from their own threads and even after logFree."""
    @the_ffi.callback("QnnLog_Callback_t")
    def callback(fmt, level, timestamp, args):
        try:
            buf = the_ffi.new("char[]", 4096)
            libc.vsnprintf(buf, 4096, fmt, args)
            logger.log(_PY_LEVELS.get(level, logging.DEBUG), "%s",
                       the_ffi.string(buf).decode("utf-8", "replace").rstrip("\n"))
        except Exception:  # an exception must never cross back into C
            pass
    return callback


_log_callback = make_log_callback(ffi, _libc, log)


class QnnCallError(RuntimeError):
    """A QNN API function returned an error code."""

    def __init__(self, function: str, code: int, message: str | None = None):
        self.function = function
        self.code = int(code)
        self.message = message or ""
        text = f"{function} failed with error {self.code}"
        super().__init__(f"{text}: {self.message}" if self.message else text)


@dataclass(frozen=True)
class ApiVersion:
    """``Qnn_ApiVersion_t``: the core API version and the backend's own API version."""
    core: tuple[int, int, int]
    backend: tuple[int, int, int]


class GraphConfig:
    """One QNN config struct (``QnnGraph_Config_t``, ``QnnContext_Config_t`` or
    ``QnnDevice_Config_t``) plus whatever it points to (kept alive with it)."""

    def __init__(self, config, keep: Sequence[Any] = ()):
        self.config = config  # cdata "<kind>_Config_t *"
        self._keep = list(keep)


Config = GraphConfig


def _htp_custom_config(kind: str, custom_type: str, prefix: str, option: str | int,
                       field: Mapping[str, Any]) -> GraphConfig:
    if len(field) != 1:
        raise TypeError(f"{custom_type}: give exactly one union member")
    custom = ffi.new(f"{custom_type} *")
    custom.option = option if isinstance(option, int) else getattr(Q, f"{prefix}{option}")
    (member, value), = field.items()
    setattr(custom, member, value)
    config = ffi.new(f"{kind}_Config_t *")
    config.option = getattr(Q, f"QNN_{kind.split('Qnn')[1].upper()}_CONFIG_OPTION_CUSTOM")
    config.customConfig = custom
    return GraphConfig(config, [custom])


def htp_graph_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom graph config (``QnnHtpGraph_CustomConfig_t``, HTP/QnnHtpGraph.h).

    ``option`` is the suffix of ``QNN_HTP_GRAPH_CONFIG_OPTION_*`` (or its value) and exactly one
    keyword names the union member to set, e.g.
    ``htp_graph_config("PRECISION", precision=Q.QNN_PRECISION_FLOAT16)`` or
    ``htp_graph_config("VTCM_SIZE", vtcmSizeInMB=8)``; a struct member takes a dict
    (``optimizationOption={"type": ..., "floatValue": 2.0}``).
    """
    return _htp_custom_config("QnnGraph", "QnnHtpGraph_CustomConfig_t",
                              "QNN_HTP_GRAPH_CONFIG_OPTION_", option, field)


def htp_context_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom context config (``QnnHtpContext_CustomConfig_t``), for
    :meth:`Backend.context` / :meth:`Backend.context_from_binary`, e.g.
    ``htp_context_config("WEIGHT_SHARING_ENABLED", weightSharingEnabled=True)``."""
    return _htp_custom_config("QnnContext", "QnnHtpContext_CustomConfig_t",
                              "QNN_HTP_CONTEXT_CONFIG_OPTION_", option, field)


def htp_device_config(option: str | int, **field: Any) -> GraphConfig:
    """An HTP custom device config (``QnnHtpDevice_CustomConfig_t``), for ``Backend(...,
    device_configs=...)``, e.g. ``htp_device_config("SOC", socModel=43)`` or
    ``htp_device_config("ARCH", arch={"deviceId": 0, "arch": 73})``."""
    return _htp_custom_config("QnnDevice", "QnnHtpDevice_CustomConfig_t",
                              "QNN_HTP_DEVICE_CONFIG_OPTION_", option, field)


def _config_ptrs(configs: Iterable[Any], keep: list) -> list:
    """Config cdata pointers from GraphConfig objects or raw ``*_Config_t *`` cdata."""
    out = []
    for c in configs:
        if isinstance(c, GraphConfig):
            keep.append(c)
            out.append(c.config)
        else:
            out.append(c)
    return out


def _null_terminated(ptrs: Sequence[Any], ctype: str):
    """A NULL-terminated ``const T **`` array, as QNN config arguments are."""
    if not ptrs:
        return ffi.NULL
    arr = ffi.new(f"{ctype} *[]", len(ptrs) + 1)
    for i, p in enumerate(ptrs):
        arr[i] = p
    return arr


class Backend:
    """A loaded backend library with its log, backend and (if supported) device handles.

    ``path`` defaults to our ``libQnnHtpEmu.so``. The provider is the one whose core API
    major version equals ours and whose minor is at least ours (``backend_id`` narrows the
    choice). ``log_level`` is one of error/warn/info/verbose/debug, or None for no logger;
    messages go to the Python logger ``qnnemu.client``. ``device=False`` skips deviceCreate;
    ``device_configs`` (:func:`htp_device_config` objects or ``QnnDevice_Config_t *`` cdata)
    are passed to it.
    """

    def __init__(self, path: str | None = None, log_level: str | None = "warn",
                 device: bool = True, backend_id: int | None = None,
                 device_configs: Sequence[Any] = ()):
        if path is None:
            from . import backend_library_path
            path = backend_library_path()
        self.path = str(path)
        self._lib = ffi.dlopen(self.path)
        self._log = self._backend = self._device = None
        self._contexts: list[Context] = []
        self._profiles: list[Profile] = []
        self._keep: list[Any] = []
        self._provider = self._pick_provider(backend_id)
        self.fn = self._provider.v2_39  # the function table, for calls this API does not wrap
        try:
            if log_level is not None:
                out = ffi.new("Qnn_LogHandle_t *")
                self.call("logCreate", _log_callback, _LOG_LEVELS[log_level], out)
                self._log = out[0]
            out = ffi.new("Qnn_BackendHandle_t *")
            self.call("backendCreate", self._log or ffi.NULL, ffi.NULL, out)
            self._backend = out[0]
            if device and self._has_capability("propertyHasCapability",
                                               Q.QNN_PROPERTY_GROUP_DEVICE):
                out = ffi.new("Qnn_DeviceHandle_t *")
                cfg = _null_terminated(_config_ptrs(device_configs, self._keep),
                                       "QnnDevice_Config_t")
                self._keep.append(cfg)
                self.call("deviceCreate", self._log or ffi.NULL, cfg, out)
                self._device = out[0]
        except BaseException:
            self.free()
            raise

    def _pick_provider(self, backend_id):
        providers = ffi.new("const QnnInterface_t ***")
        count = ffi.new("uint32_t *")
        try:
            get_providers = self._lib.QnnInterface_getProviders
        except AttributeError:
            raise RuntimeError(f"{self.path}: not a QNN backend library "
                               f"(it does not export QnnInterface_getProviders)") from None
        code = get_providers(providers, count)
        if code != Q.QNN_SUCCESS:
            raise QnnCallError("QnnInterface_getProviders", code)
        seen = []
        for i in range(count[0]):
            p = providers[0][i]
            core = p.apiVersion.coreApiVersion
            seen.append(f"{ffi.string(p.providerName).decode()} (id {p.backendId}, "
                        f"core {core.major}.{core.minor})")
            if backend_id is not None and p.backendId != backend_id:
                continue
            if core.major == Q.QNN_API_VERSION_MAJOR and core.minor >= Q.QNN_API_VERSION_MINOR:
                return p
        raise RuntimeError(f"{self.path}: no provider with core API "
                           f"{Q.QNN_API_VERSION_MAJOR}.>={Q.QNN_API_VERSION_MINOR}; "
                           f"found {', '.join(seen) or 'none'}")

    # -- information --------------------------------------------------------------------
    @property
    def provider_name(self) -> str:
        return ffi.string(self._provider.providerName).decode()

    @property
    def backend_id(self) -> int:
        return int(self._provider.backendId)

    @property
    def api_version(self) -> ApiVersion:
        a = self._provider.apiVersion
        return ApiVersion((a.coreApiVersion.major, a.coreApiVersion.minor, a.coreApiVersion.patch),
                          (a.backendApiVersion.major, a.backendApiVersion.minor,
                           a.backendApiVersion.patch))

    @property
    def build_id(self) -> str:
        out = ffi.new("const char **")
        self.call("backendGetBuildId", out)
        return ffi.string(out[0]).decode() if out[0] != ffi.NULL else ""

    def supported_operations(self) -> list[str]:
        """Op type names from ``backendGetSupportedOperations``."""
        n = ffi.new("uint32_t *")
        ops = ffi.new("const QnnBackend_OperationName_t **")
        self.call("backendGetSupportedOperations", self._backend, n, ops)
        return [ffi.string(ops[0][i].name).decode() for i in range(n[0])
                if ops[0][i].name != ffi.NULL]

    @property
    def device(self):
        """The device handle, or None when the backend has no device support."""
        return self._device

    @property
    def handle(self):
        return self._backend

    # -- calls --------------------------------------------------------------------------
    def error_message(self, code: int) -> str | None:
        fn = self.fn.errorGetMessage
        if fn == ffi.NULL:
            return None
        out = ffi.new("const char **")
        try:
            if fn(code, out) != Q.QNN_SUCCESS or out[0] == ffi.NULL:
                return None
        except Exception:
            return None
        return ffi.string(out[0]).decode("utf-8", "replace")

    def call(self, function: str, *args) -> None:
        """Calls ``function`` from the provider's table; raises QnnCallError on failure.

        A ``Qnn_OpConfig_t`` argument (graphAddNode, backendValidateOpConfig) is given as a
        ``Qnn_OpConfig_t *`` and passed by value."""
        fn = getattr(self.fn, function)
        if fn == ffi.NULL:
            raise QnnCallError(function, Q.QNN_COMMON_ERROR_NOT_SUPPORTED,
                               "not provided by this backend")
        if function in ("graphAddNode", "backendValidateOpConfig"):
            handle, op = args
            fn = ffi.cast("qnnemu_AddNodeFn_t", fn)
            args = (handle, ffi.cast("qnnemu_OpConfigByValue_t *", op)[0])
        code = fn(*args)
        if code != Q.QNN_SUCCESS:
            raise QnnCallError(function, code, self.error_message(code))

    def _has_capability(self, function: str, key: int) -> bool:
        fn = getattr(self.fn, function)
        return fn != ffi.NULL and fn(key) == Q.QNN_PROPERTY_SUPPORTED

    # -- objects ------------------------------------------------------------------------
    def context(self, configs: Sequence[Any] = ()) -> "Context":
        """contextCreate; ``configs`` are :func:`htp_context_config` objects or
        ``QnnContext_Config_t *`` cdata (the latter kept by the caller)."""
        ctx = Context(self, configs)
        self._contexts.append(ctx)
        return ctx

    def context_from_binary(self, blob: bytes, configs: Sequence[Any] = (),
                            profile: "Profile | None" = None) -> "Context":
        """contextCreateFromBinary on this backend's device (as :meth:`context`); its graphs
        come from :meth:`Context.retrieve_graph`. ``profile`` collects the load's events."""
        ctx = Context(self, configs, binary=blob, profile=profile)
        self._contexts.append(ctx)
        return ctx

    def profile(self, level: str | int = "basic", optrace: bool = False) -> "Profile":
        """profileCreate at ``level`` ("basic", "detailed", "linting" or a QnnProfile_Level_t
        value); ``optrace``: QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE."""
        prof = Profile(self, level, optrace)
        self._profiles.append(prof)
        return prof

    def free(self) -> None:
        """Frees contexts (newest first), profiles, device, backend and log; safe to call
        twice."""
        errors = []
        for ctx in reversed(self._contexts):
            try:
                ctx.free()
            except QnnCallError as e:
                errors.append(e)
        self._contexts.clear()
        for prof in reversed(self._profiles):
            try:
                prof.free()
            except QnnCallError as e:
                errors.append(e)
        self._profiles.clear()
        for attr, function in (("_device", "deviceFree"), ("_backend", "backendFree"),
                               ("_log", "logFree")):
            handle = getattr(self, attr)
            if handle is not None:
                setattr(self, attr, None)
                try:
                    self.call(function, handle)
                except QnnCallError as e:
                    errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class Context:
    """A QNN context: made with ``contextCreate`` or, given ``binary``, with
    ``contextCreateFromBinary``; owns its graphs."""

    def __init__(self, backend: Backend, configs: Sequence[Any] = (), *,
                 binary: bytes | None = None, profile: "Profile | None" = None):
        self.backend = backend
        self._keep: list[Any] = []
        cfg = _null_terminated(_config_ptrs(configs, self._keep), "QnnContext_Config_t")
        self._keep.append(cfg)
        out = ffi.new("Qnn_ContextHandle_t *")
        device = backend.device or ffi.NULL
        if binary is None:
            backend.call("contextCreate", backend.handle, device, cfg, out)
        else:
            # Kept with the context: the API does not promise that the backend copied it.
            blob = ffi.from_buffer(bytes(binary))
            self._keep.append(blob)
            backend.call("contextCreateFromBinary", backend.handle, device, cfg, blob,
                         len(blob), out, profile.handle if profile is not None else ffi.NULL)
        self.from_binary = binary is not None
        self.handle = out[0]
        self.graphs: list[Graph] = []

    def graph(self, name: str, precision: str | None = None,
              configs: Iterable[GraphConfig] = (), tensor_version: int = 2) -> "Graph":
        """graphCreate. ``precision`` ("fp16"/"fp32") adds the HTP PRECISION custom config;
        ``configs`` are further :class:`GraphConfig` objects (see :func:`htp_graph_config`);
        ``tensor_version`` 1 or 2 picks the tensor struct version used for every tensor."""
        configs = list(configs)
        if precision is not None:
            configs.insert(0, htp_graph_config("PRECISION", precision=_PRECISIONS[precision]))
        g = Graph(self, name, configs, tensor_version)
        self.graphs.append(g)
        return g

    def retrieve_graph(self, name: str, inputs: Sequence[Mapping[str, Any]],
                       outputs: Sequence[Mapping[str, Any]], tensor_version: int = 2) -> "Graph":
        """graphRetrieve of graph ``name`` in a context loaded from a binary. ``inputs`` and
        ``outputs`` describe its graph inputs and outputs as tensor dicts of
        ``qnnemu.system_client`` (name, id, type, dataType, dims, quant), e.g.
        ``SystemLibrary().binary_info(blob)["graphs"][0]["inputs"]``; they become the
        ``Qnn_Tensor_t`` structs :meth:`Graph.execute` passes to graphExecute."""
        g = Graph(self, name, tensor_version=tensor_version, retrieve=True)
        for spec in inputs:
            g.inputs.append(g._described_tensor(spec))
        for spec in outputs:
            g.outputs.append(g._described_tensor(spec))
        self.graphs.append(g)
        return g

    def binary_size(self) -> int:
        """contextGetBinarySize: the buffer size contextGetBinary needs at most."""
        size = ffi.new("Qnn_ContextBinarySize_t *")
        self.backend.call("contextGetBinarySize", self.handle, size)
        return int(size[0])

    def get_binary(self) -> bytes:
        """The serialized context: contextGetBinarySize, then contextGetBinary into a buffer
        of that size; returns the bytes written."""
        size = self.binary_size()
        buf = ffi.new("uint8_t[]", max(size, 1))
        written = ffi.new("Qnn_ContextBinarySize_t *")
        self.backend.call("contextGetBinary", self.handle, buf, size, written)
        if written[0] > size:
            raise QnnCallError("contextGetBinary", Q.QNN_CONTEXT_ERROR_GET_BINARY_FAILED,
                               f"writtenBufferSize {written[0]} exceeds the buffer size {size}")
        return bytes(ffi.buffer(buf, written[0]))

    def binary_section(self, graph: "Graph | None" = None, section: str | int = "updatable") -> bytes:
        """contextGetBinarySectionSize + contextGetBinarySection: the ``section`` ("updatable",
        "weights", "quant_params" or a ``QnnContext_SectionType_t``) of ``graph``'s updatable
        tensors (None: every graph's and the context tensors'), the current values -- the
        bytes a LoRA adapter file holds (ONNX Runtime's QNN EP applies such a file with
        contextApplyBinarySection, see tests/test_onnxruntime_lora.py)."""
        kind = _section_type(section)
        handle = graph.handle if graph is not None else ffi.NULL
        size = ffi.new("Qnn_ContextBinarySize_t *")
        self.backend.call("contextGetBinarySectionSize", self.handle, handle, kind, size)
        buf = ffi.new("uint8_t[]", max(int(size[0]), 1))
        cb = ffi.new("QnnContext_Buffer_t *")
        cb.version = Q.QNN_CONTEXT_BUFFER_VERSION_1
        cb.v1.memType = Q.QNN_CONTEXTMEMTYPE_RAW
        cb.v1.binaryBuf.data = buf
        cb.v1.binaryBuf.dataSize = int(size[0])
        written = ffi.new("Qnn_ContextBinarySize_t *")
        self.backend.call("contextGetBinarySection", self.handle, handle, kind, cb, written,
                          ffi.NULL, ffi.NULL)
        if written[0] > size[0]:
            raise QnnCallError("contextGetBinarySection", Q.QNN_CONTEXT_ERROR_INVALID_ARGUMENT,
                               f"writtenBufferSize {written[0]} exceeds the buffer size {size[0]}")
        return bytes(ffi.buffer(buf, written[0]))

    def apply_binary_section(self, blob: bytes, graph: "Graph | None" = None,
                             section: str | int = "updatable") -> None:
        """contextApplyBinarySection: installs a section made by :meth:`binary_section` (here
        or in another context holding the same graph)."""
        data = ffi.from_buffer(bytes(blob))
        cb = ffi.new("QnnContext_Buffer_t *")
        cb.version = Q.QNN_CONTEXT_BUFFER_VERSION_1
        cb.v1.memType = Q.QNN_CONTEXTMEMTYPE_RAW
        cb.v1.binaryBuf.data = data
        cb.v1.binaryBuf.dataSize = len(blob)
        self.backend.call("contextApplyBinarySection", self.handle,
                          graph.handle if graph is not None else ffi.NULL, _section_type(section),
                          cb, ffi.NULL, ffi.NULL)

    def free(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.backend.call("contextFree", handle, ffi.NULL)
            for g in self.graphs:
                g.handle = None
            self.graphs.clear()  # the graphs' buffers may go now

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class Tensor:
    """A graph tensor: its name, QNN id, type, shape, data type and quantization encoding
    (``quant``: None or the ``qnnemu.system_client`` dict form, e.g.
    ``{"encoding": 0, "scale": 0.1, "offset": -128}``)."""

    def __init__(self, struct, name: str, shape: tuple[int, ...], dtype: int, type_: int,
                 quant: dict | None = None):
        self.struct = struct  # cdata "Qnn_Tensor_t *" as created (id filled in)
        self.name = name
        self.shape = shape
        self.dtype = dtype  # Qnn_DataType_t
        self.type = type_   # Qnn_TensorType_t
        self.quant = quant

    @property
    def id(self) -> int:
        s = self.struct
        return int(s.v2.id if s.version == Q.QNN_TENSOR_VERSION_2 else s.v1.id)

    @property
    def numpy_dtype(self) -> np.dtype:
        return dtypes.numpy_dtype(self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.shape}, {dtypes.name(self.dtype)})"


class Graph:
    """A QNN graph under construction, then finalized and executable.

    ``tensor_version`` selects ``Qnn_TensorV2_t`` (default) or ``Qnn_TensorV1_t`` structs.
    """

    def __init__(self, context: Context, name: str, configs: Sequence[GraphConfig] = (),
                 tensor_version: int = 2, retrieve: bool = False):
        self.context = context
        self.backend = context.backend
        self.name = name
        self.tensor_version = tensor_version
        self._keep: list[Any] = list(configs)
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.tensors: dict[str, Tensor] = {}
        self._nodes = 0
        cfg = _null_terminated([c.config for c in configs], "QnnGraph_Config_t")
        self._keep.append(cfg)
        cname = ffi.new("char[]", name.encode())
        self._keep.append(cname)
        out = ffi.new("Qnn_GraphHandle_t *")
        if retrieve:
            self.backend.call("graphRetrieve", context.handle, cname, out)
        else:
            self.backend.call("graphCreate", context.handle, cname, cfg, out)
        self.handle = out[0]

    # -- tensors ------------------------------------------------------------------------
    def _new_struct(self, name: str, shape: tuple[int, ...], qtype: int, type_: int,
                    quant, tensor_id: int = 0):
        """A ``Qnn_Tensor_t`` (of this graph's tensor version) without data."""
        t = ffi.new("Qnn_Tensor_t *")
        t.version = (Q.QNN_TENSOR_VERSION_2 if self.tensor_version == 2
                     else Q.QNN_TENSOR_VERSION_1)
        v = t.v2 if self.tensor_version == 2 else t.v1
        cname = ffi.new("char[]", name.encode())
        # A rank-0 tensor gets a NULL dimensions pointer (as ONNX Runtime's QNN EP passes it:
        # the vendor's backend crashes in some ops when a rank-0 tensor points at dimensions).
        dims = ffi.new("uint32_t[]", list(shape)) if shape else ffi.NULL
        self._keep += [cname, dims]
        v.id = tensor_id
        v.name = cname
        v.type = type_
        v.dataFormat = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER
        v.dataType = qtype
        if quant is None:
            v.quantizeParams.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
            v.quantizeParams.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_UNDEFINED
        else:
            self._set_quant(v.quantizeParams, quant)
        v.rank = len(shape)
        v.dimensions = dims
        v.memType = Q.QNN_TENSORMEMTYPE_RAW
        v.clientBuf.data = ffi.NULL
        v.clientBuf.dataSize = 0
        if self.tensor_version == 2:
            v.isDynamicDimensions = ffi.NULL
            v.sparseParams.type = Q.QNN_SPARSE_LAYOUT_UNDEFINED
            v.isProduced = 0
        return t, v

    def _tensor(self, name: str, shape, dtype, type_: int, data: np.ndarray | None = None,
                quant: tuple[float, int] | None = None) -> Tensor:
        if name in self.tensors:
            raise ValueError(f"graph {self.name}: tensor {name!r} already exists")
        shape = tuple(int(d) for d in shape)
        qtype = dtype if isinstance(dtype, int) else dtypes.from_numpy(dtype)
        t, v = self._new_struct(name, shape, qtype, type_, quant)
        if data is not None:
            data = _contiguous(data, dtypes.numpy_dtype(qtype))
            if data.shape != shape:
                raise ValueError(f"tensor {name!r}: data shape {data.shape} != {shape}")
            buf = ffi.from_buffer(data)
            self._keep += [data, buf]
            v.clientBuf.data = buf
            v.clientBuf.dataSize = data.nbytes
        self.backend.call("tensorCreateGraphTensor", self.handle, t)
        tensor = Tensor(t, name, shape, qtype, type_, _quant_dict(quant))
        self.tensors[name] = tensor
        return tensor

    def _described_tensor(self, spec: Mapping[str, Any]) -> Tensor:
        """A Tensor for a graph input/output of a retrieved graph, from a system-client dict."""
        try:
            name, qtype, type_ = str(spec["name"]), int(spec["dataType"]), int(spec["type"])
            shape = tuple(int(d) for d in spec["dims"])
            tensor_id = int(spec["id"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"graph {self.name}: tensor description {dict(spec)!r} lacks or "
                             f"has a bad name/id/type/dataType/dims ({e})") from None
        if not dtypes.is_known(qtype):
            raise ValueError(f"graph {self.name}: tensor {name!r}: unknown dataType {qtype}")
        quant = spec.get("quant")
        t, _ = self._new_struct(name, shape, qtype, type_, _quant_arg(quant), tensor_id)
        tensor = Tensor(t, name, shape, qtype, type_, dict(quant) if quant else None)
        self.tensors[name] = tensor
        return tensor

    def _set_quant(self, qp, quant) -> None:
        """``quant``: ``(scale, offset)`` per tensor (``(scale, offset, bitwidth)``: the
        BW_SCALE_OFFSET form), or a dict ``{"axis", "scales", "offsets"}`` per axis
        (``"bitwidth"`` makes it the BW_ form)."""
        qp.encodingDefinition = Q.QNN_DEFINITION_DEFINED
        if not isinstance(quant, dict):
            if len(quant) > 2 and quant[2]:
                qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET
                b = qp.bwScaleOffsetEncoding
                b.bitwidth, b.scale, b.offset = int(quant[2]), quant[0], quant[1]
                return
            qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
            qp.scaleOffsetEncoding.scale = quant[0]
            qp.scaleOffsetEncoding.offset = quant[1]
            return
        scales = [float(x) for x in quant["scales"]]
        offsets = [int(x) for x in quant.get("offsets", [0] * len(scales))]
        if quant.get("bitwidth"):
            qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET
            cs = ffi.new("float[]", scales)
            co = ffi.new("int32_t[]", offsets)
            self._keep += [cs, co]
            b = qp.bwAxisScaleOffsetEncoding
            b.bitwidth, b.axis, b.numElements, b.scales, b.offsets = (
                int(quant["bitwidth"]), int(quant["axis"]), len(scales), cs, co)
        else:
            qp.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
            arr = ffi.new("Qnn_ScaleOffset_t[]", list(zip(scales, offsets)))
            self._keep.append(arr)
            a = qp.axisScaleOffsetEncoding
            a.axis, a.numScaleOffsets, a.scaleOffset = int(quant["axis"]), len(scales), arr

    def input(self, name: str, shape, dtype=np.float32,
              quant: tuple[float, int] | None = None) -> Tensor:
        """An APP_WRITE tensor, fed by :meth:`execute`."""
        t = self._tensor(name, shape, dtype, Q.QNN_TENSOR_TYPE_APP_WRITE, quant=quant)
        self.inputs.append(t)
        return t

    def static(self, name: str, data: np.ndarray, dtype=None,
               quant: tuple[float, int] | dict | None = None, updatable: bool = False) -> Tensor:
        """A STATIC tensor holding ``data`` (its dtype unless ``dtype`` is given). With
        ``updatable`` it is ``QNN_TENSOR_TYPE_UPDATEABLE_STATIC``: computed the same way, but its
        data (and quantization) can be replaced after finalize with :meth:`update_tensors` or a
        binary section (:meth:`Context.binary_section`, :meth:`Context.apply_binary_section`)."""
        data = np.asarray(data)
        type_ = Q.QNN_TENSOR_TYPE_UPDATEABLE_STATIC if updatable else Q.QNN_TENSOR_TYPE_STATIC
        return self._tensor(name, data.shape, data.dtype if dtype is None else dtype,
                            type_, data=data, quant=quant)

    def update_tensors(self, values: Mapping[str, np.ndarray],
                       quant: Mapping[str, Any] | None = None) -> None:
        """tensorUpdateGraphTensors: new data for UPDATEABLE_STATIC tensors of this graph
        (``values``: tensor name -> array of the tensor's shape, converted to its storage type)
        and, in ``quant`` (tensor name -> a quant argument as for :meth:`static`), new
        quantization for fixed-point ones; a tensor with new data but no new quant keeps its
        quantization. All updates are one atomic call; they take effect for the next execute."""
        quant = dict(quant or {})
        unknown = [n for n in list(values) + list(quant) if n not in self.tensors]
        if unknown:
            raise KeyError(f"graph {self.name}: no tensors {sorted(set(unknown))}")
        keep: list[Any] = []
        structs = []
        for name in dict.fromkeys(list(values) + list(quant)):
            t = self.tensors[name]
            q = quant[name] if name in quant else _quant_arg(t.quant)
            struct, v = self._new_struct(name, t.shape, t.dtype, t.type, q, t.id)
            if name in values:
                data = _contiguous(values[name], t.numpy_dtype)
                if data.shape != t.shape:
                    raise ValueError(f"tensor {name!r}: update shape {data.shape} != {t.shape}")
                buf = ffi.from_buffer(data)
                keep += [data, buf]
                v.clientBuf.data = buf
                v.clientBuf.dataSize = data.nbytes
            structs.append(struct)
        ptrs = ffi.new("Qnn_Tensor_t *[]", structs)
        self.backend.call("tensorUpdateGraphTensors", self.handle, ptrs, len(structs))
        for name, q in quant.items():
            self.tensors[name].quant = _quant_dict(q)

    # -- nodes --------------------------------------------------------------------------
    def _scalar(self, value) -> tuple[int, str, Any]:
        if isinstance(value, (bool, np.bool_)):
            return Q.QNN_DATATYPE_BOOL_8, "bool8Value", int(bool(value))
        if isinstance(value, float) and not isinstance(value, np.generic):
            return Q.QNN_DATATYPE_FLOAT_32, "floatValue", value
        if isinstance(value, int) and not isinstance(value, np.generic):
            if value >= 0:
                return Q.QNN_DATATYPE_UINT_32, "uint32Value", value
            return Q.QNN_DATATYPE_INT_32, "int32Value", value
        arr = np.asarray(value)
        qtype = dtypes.from_numpy(arr.dtype)
        member = {
            np.dtype(np.float32): "floatValue", np.dtype(np.float64): "doubleValue",
            np.dtype(np.uint64): "uint64Value", np.dtype(np.int64): "int64Value",
            np.dtype(np.uint32): "uint32Value", np.dtype(np.int32): "int32Value",
            np.dtype(np.uint16): "uint16Value", np.dtype(np.int16): "int16Value",
            np.dtype(np.uint8): "uint8Value", np.dtype(np.int8): "int8Value",
        }.get(arr.dtype)
        if member is None:
            raise TypeError(f"no QNN scalar for numpy dtype {arr.dtype}")
        return qtype, member, arr.item()

    def node(self, op_type: str, inputs: Sequence[Tensor], outputs: Sequence[Any],
             params: Mapping[str, Any] | None = None, name: str | None = None,
             package: str = "qti.aisw", app_read: bool | Iterable[str] = False,
             validate: bool = False):
        """graphAddNode. ``outputs`` are ``(name, shape, dtype[, (scale, offset)])`` tuples;
        they become NATIVE tensors, or APP_READ graph outputs when ``app_read`` is True or
        names them. With ``validate`` the op config first goes through
        ``backendValidateOpConfig`` (the vendor's graphAddNode accepts unknown op types and
        only graphFinalize rejects them). Returns the output Tensor (a list if several)."""
        name = name or f"{op_type}_{self._nodes}"
        self._nodes += 1
        params = dict(params or {})
        read = (set(o[0] for o in outputs) if app_read is True
                else set() if app_read is False else set(app_read))
        out_tensors = []
        for spec in outputs:
            oname, shape, dtype = spec[:3]
            quant = spec[3] if len(spec) > 3 else None
            type_ = Q.QNN_TENSOR_TYPE_APP_READ if oname in read else Q.QNN_TENSOR_TYPE_NATIVE
            t = self._tensor(oname, shape, dtype, type_, quant=quant)
            if oname in read:
                self.outputs.append(t)
            out_tensors.append(t)

        cparams = ffi.new("Qnn_Param_t[]", max(len(params), 1))
        keep: list[Any] = [cparams]
        for i, (pname, value) in enumerate(params.items()):
            p = cparams[i]
            pn = ffi.new("char[]", pname.encode())
            keep.append(pn)
            p.name = pn
            if isinstance(value, np.ndarray) and value.ndim >= 1:
                t = self._tensor(f"{name}.{pname}", value.shape, value.dtype,
                                 Q.QNN_TENSOR_TYPE_STATIC, data=value)
                p.paramType = Q.QNN_PARAMTYPE_TENSOR
                p.tensorParam = t.struct[0]
            elif isinstance(value, Tensor):
                p.paramType = Q.QNN_PARAMTYPE_TENSOR
                p.tensorParam = value.struct[0]
            else:
                qtype, member, v = self._scalar(value)
                p.paramType = Q.QNN_PARAMTYPE_SCALAR
                p.scalarParam.dataType = qtype
                setattr(p.scalarParam, member, v)
        cin = ffi.new("Qnn_Tensor_t[]", max(len(inputs), 1))
        for i, t in enumerate(inputs):
            cin[i] = t.struct[0]
        cout = ffi.new("Qnn_Tensor_t[]", max(len(out_tensors), 1))
        for i, t in enumerate(out_tensors):
            cout[i] = t.struct[0]
        cname = ffi.new("char[]", name.encode())
        ctype = ffi.new("char[]", op_type.encode())
        cpkg = ffi.new("char[]", package.encode())
        keep += [cin, cout, cname, ctype, cpkg]
        self._keep += keep
        op = ffi.new("Qnn_OpConfig_t *")
        op.version = Q.QNN_OPCONFIG_VERSION_1
        op.v1.name = cname
        op.v1.packageName = cpkg
        op.v1.typeName = ctype
        op.v1.numOfParams = len(params)
        op.v1.params = cparams if params else ffi.NULL
        op.v1.numOfInputs = len(inputs)
        op.v1.inputTensors = cin if inputs else ffi.NULL
        op.v1.numOfOutputs = len(out_tensors)
        op.v1.outputTensors = cout
        if validate:
            self.backend.call("backendValidateOpConfig", self.backend.handle, op)
        self.backend.call("graphAddNode", self.handle, op)
        return out_tensors[0] if len(out_tensors) == 1 else out_tensors

    # -- validate / finalize / execute -----------------------------------------------------
    def validate(self) -> dict:
        """graphValidate (QNN 2.50): what graphAddNode / graphFinalize would say about each node,
        without finalizing. Returns ``{"overall": code, "message": errorGetMessage(code) or None,
        "nodes": [{"name", "supported", "code", "message"}, ...]}`` (graph order); the backend's
        result is released with graphFreeValidationResult before returning."""
        out = ffi.new("QnnGraph_ValidationResult_t **")
        self.backend.call("graphValidate", self.handle, ffi.NULL, out)
        r = out[0]
        try:
            nodes = []
            for i in range(r.numResults):
                n = r.results[i]
                nodes.append({
                    "name": ffi.string(n.nodeName).decode() if n.nodeName != ffi.NULL else None,
                    "supported": int(n.status) == Q.QNN_GRAPH_NODE_VALIDATION_STATUS_SUPPORTED,
                    "code": int(n.errorCode),
                    "message": (ffi.string(n.errorMessage).decode("utf-8", "replace")
                                if n.errorMessage != ffi.NULL else None)})
            overall = int(r.overallStatus)
        finally:
            self.backend.call("graphFreeValidationResult", r)
        message = self.backend.error_message(overall) if overall != Q.QNN_SUCCESS else None
        return {"overall": overall, "message": message, "nodes": nodes}

    def finalize(self, profile: "Profile | None" = None) -> None:
        self.backend.call("graphFinalize", self.handle,
                          profile.handle if profile is not None else ffi.NULL, ffi.NULL)

    def execute(self, feeds: Mapping[str, np.ndarray],
                profile: "Profile | None" = None) -> dict[str, np.ndarray]:
        """graphExecute with ``feeds`` (input name -> array in the input's storage type, see
        ``Tensor.numpy_dtype``); returns output name -> array. ``profile`` collects the
        call's events."""
        missing = [t.name for t in self.inputs if t.name not in feeds]
        if missing:
            raise KeyError(f"graph {self.name}: no data for inputs {missing}")
        keep = []
        cin = ffi.new("Qnn_Tensor_t[]", max(len(self.inputs), 1))
        for i, t in enumerate(self.inputs):
            arr = _contiguous(feeds[t.name], t.numpy_dtype)
            if arr.shape != t.shape:
                raise ValueError(f"input {t.name!r}: shape {arr.shape} != {t.shape}")
            keep.append(arr)
            cin[i] = t.struct[0]
            _set_buffer(cin[i], ffi.from_buffer(arr), arr.nbytes, keep)
        results = {}
        cout = ffi.new("Qnn_Tensor_t[]", max(len(self.outputs), 1))
        for i, t in enumerate(self.outputs):
            arr = np.zeros(t.shape, dtype=t.numpy_dtype)
            results[t.name] = arr
            cout[i] = t.struct[0]
            _set_buffer(cout[i], ffi.from_buffer(arr), arr.nbytes, keep)
        self.backend.call("graphExecute", self.handle, cin, len(self.inputs), cout,
                          len(self.outputs), profile.handle if profile is not None else ffi.NULL,
                          ffi.NULL)
        return results


def _contiguous(value, dtype) -> np.ndarray:
    """A C-contiguous array of ``dtype`` with ``value``'s shape (np.ascontiguousarray would make
    a rank-0 value 1-D)."""
    arr = np.asarray(value, dtype=dtype)
    return arr.copy() if arr.ndim == 0 else np.ascontiguousarray(arr)


def _set_buffer(t, buf, size: int, keep: list) -> None:
    keep.append(buf)
    v = t.v2 if t.version == Q.QNN_TENSOR_VERSION_2 else t.v1
    v.clientBuf.data = buf
    v.clientBuf.dataSize = size


def _quant_dict(quant) -> dict | None:
    """The system-client dict form of a ``Graph`` quant argument."""
    if quant is None:
        return None
    if not isinstance(quant, dict):
        out = {"encoding": (Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET
                            if len(quant) > 2 and quant[2] else
                            Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET),
               "scale": float(np.float32(quant[0])), "offset": int(quant[1])}
        if len(quant) > 2 and quant[2]:
            out["bitwidth"] = int(quant[2])
        return out
    scales = [float(np.float32(x)) for x in quant["scales"]]
    out = {"encoding": (Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET if quant.get("bitwidth")
                        else Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET),
           "axis": int(quant["axis"]), "scales": scales,
           "offsets": [int(x) for x in quant.get("offsets", [0] * len(scales))]}
    if quant.get("bitwidth"):
        out["bitwidth"] = int(quant["bitwidth"])
    return out


def _quant_arg(quant: Mapping[str, Any] | None):
    """A ``Graph`` quant argument from the system-client dict form (None: not quantized)."""
    if not quant:
        return None
    enc = int(quant["encoding"])
    if enc in (Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET):
        bitwidth = quant.get("bitwidth") if enc == Q.QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET else None
        return (float(quant["scale"]), int(quant["offset"]), bitwidth)
    if enc in (Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET,
               Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET):
        out = {"axis": int(quant["axis"]), "scales": list(quant["scales"]),
               "offsets": list(quant["offsets"])}
        if enc == Q.QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET:
            out["bitwidth"] = int(quant.get("bitwidth") or 8)
        return out
    raise ValueError(f"quantization encoding {enc} ({Q.enum('QNN_QUANTIZATION_ENCODING_').get(enc)}) "
                     f"is not supported for graph inputs/outputs by qnnemu.client")


_SECTION_TYPES = {"updatable": Q.QNN_CONTEXT_SECTION_UPDATABLE,
                  "weights": Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS,
                  "quant_params": Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS}


def _section_type(section: str | int) -> int:
    if isinstance(section, str):
        if section not in _SECTION_TYPES:
            raise ValueError(f"binary section {section!r} is not one of {', '.join(_SECTION_TYPES)}")
        return _SECTION_TYPES[section]
    return int(section)


_PROFILE_LEVELS = {"basic": Q.QNN_PROFILE_LEVEL_BASIC, "detailed": Q.QNN_PROFILE_LEVEL_DETAILED,
                   "linting": Q.QNN_HTP_PROFILE_LEVEL_LINTING}


class Profile:
    """A ``profileCreate`` handle: pass it to graphFinalize / graphExecute /
    contextCreateFromBinary, then read :meth:`events` (each profiled call replaces the
    previous call's events, as the API says)."""

    def __init__(self, backend: Backend, level: str | int = "basic", optrace: bool = False):
        self.backend = backend
        if isinstance(level, str):
            if level not in _PROFILE_LEVELS:
                raise ValueError(f"profile level {level!r}: expected one of {sorted(_PROFILE_LEVELS)}")
            level = _PROFILE_LEVELS[level]
        self.level = int(level)
        out = ffi.new("Qnn_ProfileHandle_t *")
        backend.call("profileCreate", backend.handle, self.level, out)
        self.handle = out[0]
        if optrace:  # QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE (DETAILED / linting levels)
            cfg = ffi.new("QnnProfile_Config_t *")
            cfg.option = Q.QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE
            cfg.enableOptrace = 1
            lst = ffi.new("const QnnProfile_Config_t *[]", [cfg, ffi.NULL])
            backend.call("profileSetConfig", self.handle, lst)

    def _event(self, event_id: int, depth: int) -> dict:
        data = ffi.new("QnnProfile_EventData_t *")
        self.backend.call("profileGetEventData", event_id, data)
        ident = ffi.string(data.identifier).decode("utf-8", "replace") \
            if data.identifier != ffi.NULL else ""
        event = {"identifier": ident, "type": int(data.type),
                 "type_name": _EVENT_TYPES.get(int(data.type), ""), "value": int(data.value),
                 "unit": int(data.unit), "unit_name": _EVENT_UNITS.get(int(data.unit), "")}
        ext = ffi.new("QnnProfile_ExtendedEventData_t *")
        try:
            self.backend.call("profileGetExtendedEventData", event_id, ext)
        except QnnCallError:
            ext = None  # a backend without extended event data
        if ext is not None and int(ext.version) == Q.QNN_PROFILE_DATA_VERSION_1:
            event["timestamp_us"] = int(ext.v1.timestamp)
            obj = ext.v1.backendOpaqueObject
            if int(ext.v1.unit) == Q.QNN_PROFILE_EVENTUNIT_OBJECT and obj.opaqueObject.data != ffi.NULL:
                payload = bytes(ffi.buffer(obj.opaqueObject.data, int(obj.opaqueObject.len)))
                event["file_name"] = ffi.string(obj.fileName).decode("utf-8", "replace") \
                    if obj.fileName != ffi.NULL else ""
                try:  # the emulator's optrace object is UTF-8 JSON
                    event["object"] = json.loads(payload.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    event["object_base64"] = base64.b64encode(payload).decode("ascii")
        if depth < 8:  # QNN nests one or two levels; the bound only guards a cyclic reply
            ids = ffi.new("const QnnProfile_EventId_t **")
            n = ffi.new("uint32_t *")
            try:
                self.backend.call("profileGetSubEvents", event_id, ids, n)
            except QnnCallError:
                n[0] = 0
            subs = [self._event(int(ids[0][i]), depth + 1) for i in range(n[0])]
            if subs:
                event["sub_events"] = subs
        return event

    def events(self) -> list[dict]:
        """The events of the last profiled call: ``{"identifier", "type", "type_name",
        "value", "unit", "unit_name"[, "sub_events"]}`` dicts."""
        ids = ffi.new("const QnnProfile_EventId_t **")
        n = ffi.new("uint32_t *")
        self.backend.call("profileGetEvents", self.handle, ids, n)
        return [self._event(int(ids[0][i]), 0) for i in range(n[0])]

    def free(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            self.backend.call("profileFree", handle)


# Generic event types first; the HTP-specific ones (QnnHtpProfile.h) fill the other values.
_EVENT_TYPES = {**{v: "HTP_" + k[len("QNN_HTP_PROFILE_EVENTTYPE_"):]
                   for v, k in Q.enum("QNN_HTP_PROFILE_EVENTTYPE_").items()},
                **{v: k[len("QNN_PROFILE_EVENTTYPE_"):]
                   for v, k in Q.enum("QNN_PROFILE_EVENTTYPE_").items()}}
_EVENT_UNITS = {v: k[len("QNN_PROFILE_EVENTUNIT_"):]
                for v, k in Q.enum("QNN_PROFILE_EVENTUNIT_").items()}
