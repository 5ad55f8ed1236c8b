"""The backend and context objects of qnnemu.client: a loaded QNN backend library (QnnInterface.h
``QnnInterface_getProviders``, its log, backend and device handles) and its contexts
(QnnContext.h: create, create from binary, get binary, binary sections).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..headers import Q, backend_library_path
from . import cabi
from .cabi import _LOG_LEVELS, ApiVersion, QnnCallError, _null_terminated, ffi, pick_provider
from .configs import _PRECISIONS, GraphConfig, _config_ptrs, htp_graph_config
from .graph import Graph
from .profile import Profile


class Backend:
    """A loaded backend library with its log, backend and (if supported) device handles.

    ``path`` defaults to our ``libQnnHtpEmu.so``. The provider is the one whose core API
    major version equals ours and whose minor is at least ours (``backend_id`` narrows the
    choice). ``log_level`` is one of error/warn/info/verbose/debug, or None for no logger;
    messages go to the Python logger ``qnnemu.client``. ``device=False`` skips deviceCreate;
    ``device_configs`` (:func:`htp_device_config` objects or ``QnnDevice_Config_t *`` cdata)
    are passed to it; ``backend_configs`` (``QnnBackend_Config_t *`` cdata or config objects)
    to backendCreate.
    """

    def __init__(self, path: str | None = None, log_level: str | None = "warn",
                 device: bool = True, backend_id: int | None = None,
                 device_configs: Sequence[Any] = (), backend_configs: Sequence[Any] = ()):
        if path is None:
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
                # looked up here: a caller may replace the module's callback (tools/probe_op_support.py)
                self.call("logCreate", cabi._log_callback, _LOG_LEVELS[log_level], out)
                self._log = out[0]
            out = ffi.new("Qnn_BackendHandle_t *")
            bcfg = (_null_terminated(_config_ptrs(backend_configs, self._keep), "QnnBackend_Config_t")
                    if backend_configs else ffi.NULL)
            self._keep.append(bcfg)
            self.call("backendCreate", self._log or ffi.NULL, bcfg, out)
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
        def describe(p) -> str:
            core = p.apiVersion.coreApiVersion
            return (f"{ffi.string(p.providerName).decode()} (id {p.backendId}, "
                    f"core {core.major}.{core.minor})")

        def accepts(p) -> bool:
            core = p.apiVersion.coreApiVersion
            return ((backend_id is None or p.backendId == backend_id)
                    and core.major == Q.QNN_API_VERSION_MAJOR and core.minor >= Q.QNN_API_VERSION_MINOR)
        provider, seen = pick_provider(providers[0], count[0], describe, accepts)
        if provider is None:
            raise RuntimeError(f"{self.path}: no provider with core API "
                               f"{Q.QNN_API_VERSION_MAJOR}.>={Q.QNN_API_VERSION_MINOR}; "
                               f"found {', '.join(seen) or 'none'}")
        return provider

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
        except Exception:  # noqa: BLE001 - the probed library's errorGetMessage failed: no message
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
    def context(self, configs: Sequence[Any] = ()) -> Context:
        """contextCreate; ``configs`` are :func:`htp_context_config` objects or
        ``QnnContext_Config_t *`` cdata (the latter kept by the caller)."""
        ctx = Context(self, configs)
        self._contexts.append(ctx)
        return ctx

    def context_from_binary(self, blob: bytes | np.ndarray, configs: Sequence[Any] = (),
                            profile: Profile | None = None) -> Context:
        """contextCreateFromBinary on this backend's device (as :meth:`context`); its graphs
        come from :meth:`Context.retrieve_graph`. ``profile`` collects the load's events."""
        ctx = Context(self, configs, binary=blob, profile=profile)
        self._contexts.append(ctx)
        return ctx

    def profile(self, level: str | int = "basic", optrace: bool = False) -> Profile:
        """profileCreate at ``level`` ("basic", "detailed", "linting" or a QnnProfile_Level_t
        value); ``optrace``: QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE."""
        prof = Profile(self, level, optrace)
        self._profiles.append(prof)
        return prof

    def free(self) -> None:
        """Frees contexts (newest first), profiles, device, backend and log; safe to call
        twice."""
        errors: list[QnnCallError] = []
        for owned in (self._contexts, self._profiles):
            for obj in reversed(owned):
                try:
                    obj.free()
                except QnnCallError as e:
                    errors.append(e)
            owned.clear()
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

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class Context:
    """A QNN context: made with ``contextCreate`` or, given ``binary``, with
    ``contextCreateFromBinary``; owns its graphs."""

    def __init__(self, backend: Backend, configs: Sequence[Any] = (), *,
                 binary: bytes | np.ndarray | None = None, profile: Profile | None = None):
        self.backend = backend
        self._keep: list[Any] = []
        cfg = _null_terminated(_config_ptrs(configs, self._keep), "QnnContext_Config_t")
        self._keep.append(cfg)
        out = ffi.new("Qnn_ContextHandle_t *")
        device = backend.device or ffi.NULL
        if binary is None:
            backend.call("contextCreate", backend.handle, device, cfg, out)
        else:
            # Kept with the context: the API does not promise that the backend copied it.  A
            # numpy buffer is passed as it is (the caller placed it: LPAI's TCM, for instance).
            blob = ffi.from_buffer(binary if isinstance(binary, np.ndarray) else bytes(binary))
            self._keep.append(blob)
            backend.call("contextCreateFromBinary", backend.handle, device, cfg, blob,
                         len(blob), out, profile.handle if profile is not None else ffi.NULL)
        self.from_binary = binary is not None
        self.handle = out[0]
        self.graphs: list[Graph] = []

    def graph(self, name: str, precision: str | None = None,
              configs: Iterable[GraphConfig] = (), tensor_version: int = 2) -> Graph:
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
                       outputs: Sequence[Mapping[str, Any]], tensor_version: int = 2) -> Graph:
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

    def binary_section(self, graph: Graph | None = None, section: str | int = "updatable") -> bytes:
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

    def apply_binary_section(self, blob: bytes, graph: Graph | None = None,
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

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


_SECTION_TYPES = {"updatable": Q.QNN_CONTEXT_SECTION_UPDATABLE,
                  "weights": Q.QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS,
                  "quant_params": Q.QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS}


def _section_type(section: str | int) -> int:
    if isinstance(section, str):
        if section not in _SECTION_TYPES:
            raise ValueError(f"binary section {section!r} is not one of {', '.join(_SECTION_TYPES)}")
        return _SECTION_TYPES[section]
    return int(section)
