"""A Python client of any QNN System library (``libQnnSystem.so``): context binary inspection.

Implements the client side of System/QnnSystemInterface.h and System/QnnSystemContext.h
(``QnnSystemInterface_getProviders`` -> ``systemContextCreate`` -> ``systemContextGetBinaryInfo``
-> ``systemContextFree``) in cffi ABI mode, with declarations generated from our own headers
(``qnnemu.headers.cdef()``), so it reads binaries through our ``qnnemu/lib/libQnnSystem.so`` as
well as through the vendor's ``libQnnSystem.so``::

    from qnnemu.system_client import SystemLibrary
    info = SystemLibrary().binary_info(blob)        # None -> our libQnnSystem.so
    for g in info["graphs"]:
        print(g["name"], [t["name"] for t in g["inputs"]], g["spill_fill_bytes"])

``binary_info(blob)`` returns::

    {"binary_info_version": 1|2|3, "backend_id": int, "build_id": str,
     "core_api": [M, m, p], "backend_api": [M, m, p], "soc_model": int | None,
     "htp_arch": int | None, "context_tensors": [tensor, ...],
     "graphs": [{"name": str, "inputs": [tensor, ...], "outputs": [tensor, ...],
                 "spill_fill_bytes": int | None}, ...]}

    tensor = {"name": str, "id": int, "type": int, "dataType": int, "dims": [int, ...],
              "quant": None
                       | {"encoding": int, "scale": float, "offset": int[, "bitwidth": int]}
                       | {"encoding": int, "axis": int, "scales": [...], "offsets": [...]
                          [, "bitwidth": int]}
                       | {"encoding": int}   (block / vector encodings: not decoded)}

BinaryInfo versions 1-3, graph info versions 1-3 and ``Qnn_Tensor_t`` versions 1 and 2 are
read. ``soc_model`` is BinaryInfo v3's ``socModel`` (else the HTP platform info's, else None);
``htp_arch`` comes from the HTP device-info extension of the platform info (v2/v3) when the
library provides one; ``spill_fill_bytes`` from graph info v3's
``QnnHtpSystemContext_GraphBlobInfo_t`` (HTP/QnnHtpSystemContext.h), else None.  A binary of
the LPAI backend (``backend_id`` QNN_BACKEND_ID_LPAI) has, per graph, ``lpai_memory``: the
``scratch_mem_size``, ``persistent_mem_size``, ``io_size`` and ``naive_scratch_size`` of its
memory plan (docs/lpai.md, "Context binaries").
``binary_info(blob, details=True)`` adds the remaining fields (sizes, blob versions,
socVersion, per-graph VTCM/HVX/optimization info, updateable tensors, op index range) for
``qnnemu-context-binary-utility``.

Every failing call raises :class:`SystemCallError` with the function name and code.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import cffi

from .client.cabi import _LOG_LEVELS, make_log_callback, pick_provider
from .client.quant import read_quant
from .headers import Q, cdef, system_library_path

__all__ = ["SystemLibrary", "SystemCallError", "default_system_library_path", "tensor_dict",
           "quant_dict", "ffi"]

log = logging.getLogger("qnnemu.system_client")

ffi = cffi.FFI()
ffi.cdef(cdef(("System/QnnSystemInterface.h", "HTP/QnnHtpSystemContext.h", "HTP/QnnHtpDevice.h")))
ffi.cdef("int vsnprintf(char *str, size_t size, const char *format, void *ap);")
_libc = ffi.dlopen(None)

# Bounds on counts read from a library's reply: a corrupted reply must not make us walk
# gigabytes of memory.
_MAX_COUNT = 1 << 20


_log_callback = make_log_callback(ffi, _libc, log)


class SystemCallError(RuntimeError):
    """A System API function returned an error code."""

    def __init__(self, function: str, code: int, message: str = ""):
        self.function = function
        self.code = int(code)
        name = Q.enum("QNN_SYSTEM_CONTEXT_ERROR_").get(self.code) or \
            Q.enum("QNN_COMMON_ERROR_").get(self.code) or ""
        text = f"{function} failed with error {self.code}" + (f" ({name})" if name else "")
        super().__init__(f"{text}: {message}" if message else text)


def default_system_library_path() -> str:
    """Our libQnnSystem.so (``qnnemu.system_library_path()``)."""
    return system_library_path()


def _str(p) -> str | None:
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")


def _version(v) -> list[int]:
    return [int(v.major), int(v.minor), int(v.patch)]


def _count(n, what: str) -> int:
    n = int(n)
    if n > _MAX_COUNT:
        raise SystemCallError("systemContextGetBinaryInfo", Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
                              f"implausible {what} count {n} in the reply")
    return n


def quant_dict(qp) -> dict | None:
    """``Qnn_QuantizeParams_t`` (any cffi FFI) -> None or the dict form of the module doc
    (qnnemu.client.quant's converter, counts bounded as every count of a reply)."""
    return read_quant(ffi, qp, _count)


def tensor_dict(t) -> dict:
    """``Qnn_Tensor_t`` (version 1 or 2) -> the tensor dict of the module doc."""
    version = int(t.version)
    if version not in (Q.QNN_TENSOR_VERSION_1, Q.QNN_TENSOR_VERSION_2):
        raise SystemCallError("systemContextGetBinaryInfo", Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
                              f"tensor struct version {version} is neither 1 nor 2")
    # Qnn_TensorV2_t starts with the fields of Qnn_TensorV1_t, in the same layout.
    v = t.v2 if version == Q.QNN_TENSOR_VERSION_2 else t.v1
    rank = _count(v.rank, "dimension")
    dims = [int(v.dimensions[i]) for i in range(rank)] if v.dimensions != ffi.NULL else []
    return {"name": _str(v.name) or "", "id": int(v.id), "type": int(v.type),
            "dataType": int(v.dataType), "dims": dims, "quant": quant_dict(v.quantizeParams)}


def _tensors(ptr, n, what: str) -> list[dict]:
    n = _count(n, what)
    if not n or ptr == ffi.NULL:
        return []
    return [tensor_dict(ptr[i]) for i in range(n)]


def _htp_device_info(platform) -> dict | None:
    """SoC model and arch from a QnnDevice_PlatformInfo_t's first HTP device extension."""
    if platform == ffi.NULL or int(platform.version) != Q.QNN_DEVICE_PLATFORM_INFO_VERSION_1:
        return None
    p = platform.v1
    out: dict[str, Any] = {"num_hw_devices": int(p.numHwDevices)}
    if p.hwDevices == ffi.NULL or not p.numHwDevices:
        return out
    d = p.hwDevices[0]
    if int(d.version) != Q.QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1:
        return out
    out.update(device_id=int(d.v1.deviceId), device_type=int(d.v1.deviceType),
               num_cores=int(d.v1.numCores))
    if d.v1.deviceInfoExtension != ffi.NULL:
        ext = ffi.cast("QnnHtpDevice_DeviceInfoExtension_t *", d.v1.deviceInfoExtension)
        if int(ext.devType) == Q.QNN_HTP_DEVICE_TYPE_ON_CHIP:
            chip = ext.onChipDevice
            out.update(soc_model=int(chip.socModel), arch=int(chip.arch),
                       vtcm_size=int(chip.vtcmSize))
    return out


def _graph_blob_info(ptr, size: int) -> dict | None:
    """A QnnHtpSystemContext_GraphBlobInfo_t behind graph info v3's graphBlobInfo."""
    if ptr == ffi.NULL or size < ffi.sizeof("QnnHtpSystemContext_GraphInfoBlobVersion_t"):
        return None
    blob = ffi.cast("QnnHtpSystemContext_GraphBlobInfo_t *", ptr)
    version = int(blob.version)
    if version != Q.QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V1 or \
            size < ffi.sizeof("QnnHtpSystemContext_GraphBlobInfo_t"):
        return {"version": version}
    v1 = blob.contextBinaryGraphBlobInfoV1
    return {"version": version, "spill_fill_bytes": int(v1.spillFillBufferSize),
            "vtcm_size": int(v1.vtcmSize), "optimization_level": int(v1.optimizationLevel),
            "htp_dlbc": int(v1.htpDlbc), "num_hvx_threads": int(v1.numHvxThreads)}


LPAI_BLOB_FIELDS = ("scratch_mem_size", "persistent_mem_size", "io_size", "naive_scratch_size")


def _lpai_blob_info(ptr, size: int) -> dict | None:
    """The memory sizes of an LPAI graph behind graph info v3's graphBlobInfo (qnnemu's layout:
    uint32_t[5], version 1 then the sizes; docs/lpai.md)."""
    if ptr == ffi.NULL or size < 4:
        return None
    words = ffi.cast("uint32_t *", ptr)
    if int(words[0]) != 1 or size < 4 * (1 + len(LPAI_BLOB_FIELDS)):
        return {"version": int(words[0])}
    return {"version": 1, **{k: int(words[1 + i]) for i, k in enumerate(LPAI_BLOB_FIELDS)}}


def _versioned(struct, enum_prefix: str, member_prefix: str, what: str) -> tuple[int, Any]:
    """(version, the member of versions 1-3) of a versioned System struct; another version is a
    malformed reply."""
    version = int(struct.version)
    for n in (1, 2, 3):
        if version == getattr(Q, f"{enum_prefix}{n}"):
            return version, getattr(struct, f"{member_prefix}{n}")
    raise SystemCallError("systemContextGetBinaryInfo", Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY,
                          f"{what} version {version} is not 1, 2 or 3")


def _graph(gi, details: bool, lpai: bool = False) -> dict:
    version, g = _versioned(gi, "QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_", "graphInfoV", "graph info")
    out = {"name": _str(g.graphName) or "",
           "inputs": _tensors(g.graphInputs, g.numGraphInputs, "graph input"),
           "outputs": _tensors(g.graphOutputs, g.numGraphOutputs, "graph output"),
           "spill_fill_bytes": None}
    blob_info = None
    if version == Q.QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3 and lpai:
        blob_info = _lpai_blob_info(g.graphBlobInfo, int(g.graphBlobInfoSize))
        if blob_info is not None and "scratch_mem_size" in blob_info:
            out["lpai_memory"] = {k: blob_info[k] for k in LPAI_BLOB_FIELDS}
    elif version == Q.QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3:
        blob_info = _graph_blob_info(g.graphBlobInfo, int(g.graphBlobInfoSize))
        if blob_info is not None and "spill_fill_bytes" in blob_info:
            out["spill_fill_bytes"] = blob_info["spill_fill_bytes"]
    if details:
        out["graph_info_version"] = version
        if version >= Q.QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_2:
            out["updateable_tensors"] = _tensors(g.updateableTensors, g.numUpdateableTensors,
                                                 "updateable tensor")
        if version == Q.QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3:
            out["graph_blob_info"] = blob_info
            out["graph_blob_info_size"] = int(g.graphBlobInfoSize)
            out["op_index_range"] = [int(g.startOpIndex), int(g.endOpIndex)]
    return out


def _binary_info(info, details: bool) -> dict:
    version, b = _versioned(info, "QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_", "contextBinaryInfoV", "binary info")
    platform = (_htp_device_info(b.platformInfo)
                if version >= Q.QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_2 else None) or {}
    soc_model = (int(b.socModel) if version == Q.QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3
                 else platform.get("soc_model"))
    n_graphs = _count(b.numGraphs, "graph")
    lpai = int(b.backendId) == Q.QNN_BACKEND_ID_LPAI
    graphs = ([_graph(b.graphs[i], details, lpai) for i in range(n_graphs)]
              if b.graphs != ffi.NULL else [])
    out = {"binary_info_version": version, "backend_id": int(b.backendId),
           "build_id": _str(b.buildId) or "", "core_api": _version(b.coreApiVersion),
           "backend_api": _version(b.backendApiVersion), "soc_model": soc_model,
           "htp_arch": platform.get("arch"),
           "context_tensors": _tensors(b.contextTensors, b.numContextTensors, "context tensor"),
           "graphs": graphs}
    if details:
        out["soc_version"] = _str(b.socVersion)
        out["context_blob_version"] = _version(b.contextBlobVersion)
        out["context_blob_size"] = int(b.contextBlobSize)
        if version < Q.QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3:
            out["hw_info_blob_version"] = _version(b.hwInfoBlobVersion)
            out["hw_info_blob_size"] = int(b.hwInfoBlobSize)
        else:
            out["context_metadata_size"] = int(b.contextMetadataSize)
        if platform:
            out["platform_info"] = platform
    return out


class SystemLibrary:
    """A loaded libQnnSystem.so and its System interface provider.

    ``path`` defaults to our ``qnnemu/lib/libQnnSystem.so``. The provider is the first with
    System API major version 1 (``QNN_SYSTEM_API_VERSION_MAJOR``) and a minor of at least 7
    (the ``v1_14`` table this client reads). ``log_level`` (error/warn/info/verbose/debug)
    creates a System logger (``systemLogCreate``) whose messages go to the Python logger
    ``qnnemu.system_client``; None creates none.
    """

    MIN_MINOR = 7

    def __init__(self, path: str | os.PathLike | None = None, log_level: str | None = None):
        self.path = os.fspath(path) if path is not None else default_system_library_path()
        try:
            self._lib = ffi.dlopen(self.path)
        except OSError as e:
            raise OSError(f"cannot load the System library {self.path}: {e}") from None
        self._log = None
        self._provider = self._pick_provider()
        self.fn = self._provider.v1_14
        if log_level is not None:
            if log_level not in _LOG_LEVELS:
                raise ValueError(f"log level {log_level!r}: expected one of {list(_LOG_LEVELS)}")
            out = ffi.new("Qnn_LogHandle_t *")
            self.call("systemLogCreate", _log_callback, _LOG_LEVELS[log_level], out)
            self._log = out[0]

    def _pick_provider(self):
        providers = ffi.new("QnnSystemInterface_t ***")
        count = ffi.new("uint32_t *")
        try:
            get_providers = self._lib.QnnSystemInterface_getProviders
        except AttributeError:
            raise RuntimeError(f"{self.path}: not a QNN System library "
                               f"(it does not export QnnSystemInterface_getProviders)") from None
        code = get_providers(ffi.cast("const QnnSystemInterface_t ***", providers), count)
        if code != Q.QNN_SUCCESS:
            raise SystemCallError("QnnSystemInterface_getProviders", code)
        provider, seen = pick_provider(
            providers[0], min(int(count[0]), 64),
            lambda p: f"{_str(p.providerName)} (System API {p.systemApiVersion.major}.{p.systemApiVersion.minor})",
            lambda p: (p.systemApiVersion.major == Q.QNN_SYSTEM_API_VERSION_MAJOR
                       and p.systemApiVersion.minor >= self.MIN_MINOR))
        if provider is not None:
            return provider
        raise RuntimeError(f"{self.path}: no System provider with API "
                           f"{Q.QNN_SYSTEM_API_VERSION_MAJOR}.>={self.MIN_MINOR}; "
                           f"found {', '.join(seen) or 'none'}")

    @property
    def provider_name(self) -> str:
        return _str(self._provider.providerName) or ""

    @property
    def api_version(self) -> tuple[int, int, int]:
        return tuple(_version(self._provider.systemApiVersion))

    def call(self, function: str, *args) -> None:
        fn = getattr(self.fn, function)
        if fn == ffi.NULL:
            raise SystemCallError(function, Q.QNN_SYSTEM_CONTEXT_ERROR_UNSUPPORTED_FEATURE,
                                  "not provided by this System library")
        code = fn(*args)
        if code != Q.QNN_SUCCESS:
            raise SystemCallError(function, code)

    def binary_info(self, blob: bytes, details: bool = False) -> dict:
        """The graphs and tensors of a context binary (see the module doc), read with
        systemContextCreate / systemContextGetBinaryInfo / systemContextFree."""
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise TypeError(f"binary_info: blob must be bytes, not {type(blob).__name__}")
        if not len(blob):
            raise ValueError("binary_info: the context binary is empty")
        handle = ffi.new("QnnSystemContext_Handle_t *")
        self.call("systemContextCreate", handle)
        # The library may keep pointers into the buffer until systemContextFree: a private,
        # writable copy (the API takes a non-const pointer) that lives until then.
        buf = ffi.new("uint8_t[]", bytes(blob))
        try:
            info = ffi.new("const QnnSystemContext_BinaryInfo_t **")
            size = ffi.new("Qnn_ContextBinarySize_t *")
            self.call("systemContextGetBinaryInfo", handle[0], buf, len(blob), info, size)
            if info[0] == ffi.NULL:
                raise SystemCallError("systemContextGetBinaryInfo",
                                      Q.QNN_SYSTEM_CONTEXT_ERROR_OPERATION_FAILED,
                                      "succeeded but returned a NULL binaryInfo")
            out = _binary_info(info[0], details)
            if details:
                out["binary_info_size"] = int(size[0])
                out["binary_size"] = len(blob)
            return out
        finally:
            self.call("systemContextFree", handle[0])
            del buf

    def free(self) -> None:
        """Frees the System logger, if any (the library stays loaded)."""
        if self._log is not None:
            handle, self._log = self._log, None
            self.call("systemLogFree", handle)

    def __enter__(self) -> SystemLibrary:
        return self

    def __exit__(self, *exc) -> None:
        self.free()
