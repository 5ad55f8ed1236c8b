"""Raw C-ABI access to libQnnHtpEmu.so for conformance tests (cffi ABI mode).

Deliberately independent of ``qnnemu.client``: tests here must be able to pass anything a C
program could pass (NULL, garbage and freed handles, handles of the wrong kind, malformed
structs), which a checked, Pythonic wrapper would refuse to do.

- :func:`table` loads the library once per process and returns the
  ``QnnInterface_ImplementationV2_39_t`` function table (``providers[0].v2_39``);
- :func:`call` calls a table entry and returns its raw ``Qnn_ErrorHandle_t``; ``Qnn_OpConfig_t``
  by-value arguments (graphAddNode, backendValidateOpConfig) are given as :class:`OpConfig`;
- :func:`vp` turns an ``int`` handle value into a ``void *`` (every ``Qnn_*Handle_t`` is one);
- :class:`Library` / :func:`library` give the same raw ``call``/``create`` on any backend .so
  (the vendor's libQnnHtp.so for differential tests);
- :class:`LogRecorder` is an app log callback that formats the ``va_list`` with libc
  ``vsnprintf`` and records ``(level, message)``;
- :func:`tensor`, :func:`op_config`, :func:`scalar_param`, :func:`tensor_param` build
  ``Qnn_Tensor_t`` (v1/v2), ``Qnn_Param_t`` and ``Qnn_OpConfig_t`` structs whose buffers
  (names, dimensions, data) stay alive as long as the returned Python object.
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import cffi
import numpy as np

import qnnemu
from qnnemu.core import dtypes
from qnnemu.headers import Q, cdef

ffi = cffi.FFI()
ffi.cdef(cdef())
# The log callback's va_list arrives as a pointer on x86-64 (our cdef maps va_list to void *);
# vsnprintf is declared with a void * last parameter so that it can be forwarded unchanged.
ffi.cdef("int vsnprintf(char *, size_t, const char *, void *);")
# cffi's ABI mode cannot pass Qnn_OpConfig_t by value (a struct holding an anonymous union), so
# graphAddNode / backendValidateOpConfig are called through a pointer type taking a
# layout-identical struct with a named member.
ffi.cdef("typedef struct { Qnn_OpConfigVersion_t version; Qnn_OpConfigV1_t v1; } abi_OpConfigByValue_t;"
         "typedef Qnn_ErrorHandle_t (*abi_OpConfigFn_t)(void *, abi_OpConfigByValue_t);")
assert ffi.sizeof("abi_OpConfigByValue_t") == ffi.sizeof("Qnn_OpConfig_t")
libc = ffi.dlopen(None)
NULL = ffi.NULL
RULE_ID = re.compile(r"\[(QNNEMU-[A-Za-z0-9_-]+)\]")

_loaded: dict[str, Any] = {}
BY_VALUE = ("graphAddNode", "backendValidateOpConfig")


def library_path() -> str:
    return qnnemu.backend_library_path()


def library_available() -> bool:
    return os.path.isfile(library_path())


def table():
    """The provider's function table (``QnnInterface_t.v2_39``), loading the library once."""
    if "table" not in _loaded:
        lib = ffi.dlopen(library_path())
        providers = ffi.new("const QnnInterface_t ***")
        count = ffi.new("uint32_t *")
        code = lib.QnnInterface_getProviders(providers, count)
        assert code == Q.QNN_SUCCESS, f"QnnInterface_getProviders returned {code}"
        assert count[0] >= 1, "QnnInterface_getProviders: no provider"
        _loaded.update(lib=lib, providers=providers, iface=providers[0][0])
        _loaded["table"] = providers[0][0].v2_39
    return _loaded["table"]


class Library:
    """Any backend .so through the same raw calls: ``Library(None)`` is ours (the table above),
    ``Library(path)`` e.g. the vendor's libQnnHtp.so.  ``call``/``create`` behave like the
    module functions of the same name.  Use :func:`library` to load each path once."""

    def __init__(self, path: str | None = None):
        self.path = str(path) if path is not None else library_path()
        self.ours = path is None
        if self.ours:
            self.table = table()
            self.interface = _loaded["iface"]
            return
        self.lib = ffi.dlopen(self.path)
        self.providers = ffi.new("const QnnInterface_t ***")
        count = ffi.new("uint32_t *")
        code = self.lib.QnnInterface_getProviders(self.providers, count)
        assert code == Q.QNN_SUCCESS, f"{self.path}: QnnInterface_getProviders returned {code}"
        assert count[0] >= 1, f"{self.path}: QnnInterface_getProviders: no provider"
        self.interface = self.providers[0][0]
        self.table = self.interface.v2_39

    @property
    def name(self) -> str:
        return "qnnemu" if self.ours else os.path.basename(self.path)

    def call(self, name: str, *args) -> int:
        fn = getattr(self.table, name)
        assert fn != NULL, f"{self.name}: table entry {name} is NULL"
        if name in BY_VALUE:
            handle, op = args
            fn = ffi.cast("abi_OpConfigFn_t", fn)
            args = (handle, ffi.cast("abi_OpConfigByValue_t *", op.ptr)[0])
        return int(fn(*args))

    def create(self, name: str, *args) -> tuple[int, int]:
        out = ffi.new("void **")
        code = self.call(name, *args, ffi.cast(_OUT_TYPES[name], out))
        return code, hval(out[0])


_libraries: dict[str | None, Library] = {}


def library(path=None) -> Library:
    """The :class:`Library` of ``path`` (None: ours), loaded once per process."""
    key = str(path) if path is not None else None
    if key not in _libraries:
        _libraries[key] = Library(key)
    return _libraries[key]


def interface():
    """The ``QnnInterface_t`` (provider name, backend id, API version, table)."""
    table()
    return _loaded["iface"]


def call(name: str, *args) -> int:
    """Calls table entry ``name``; returns the raw error code (an ``int``)."""
    fn = getattr(table(), name)
    assert fn != NULL, f"table entry {name} is NULL"
    if name in BY_VALUE:
        handle, op = args
        fn = ffi.cast("abi_OpConfigFn_t", fn)
        args = (handle, ffi.cast("abi_OpConfigByValue_t *", op.ptr)[0])
    return int(fn(*args))


def vp(value: int | None):
    """A handle value as ``void *`` (``None``/0 -> NULL)."""
    return ffi.cast("void *", value or 0)


def hval(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def create(name: str, *args) -> tuple[int, int]:
    """Calls a creator whose last parameter is a ``Qnn_*Handle_t *`` output.

    Returns ``(code, handle value)``; the handle is 0 when the output was not written."""
    out = ffi.new("void **")
    code = call(name, *args, ffi.cast(_OUT_TYPES[name], out))
    return code, hval(out[0])


_OUT_TYPES = {
    "logCreate": "Qnn_LogHandle_t *", "backendCreate": "Qnn_BackendHandle_t *",
    "deviceCreate": "Qnn_DeviceHandle_t *", "contextCreate": "Qnn_ContextHandle_t *",
    "graphCreate": "Qnn_GraphHandle_t *", "graphRetrieve": "Qnn_GraphHandle_t *",
}


def cstr(text: str | bytes | None, keep: list | None = None):
    if text is None:
        return NULL
    buf = ffi.new("char[]", text.encode() if isinstance(text, str) else text)
    if keep is not None:
        keep.append(buf)
    return buf


def null_terminated(ctype: str, items: Sequence[Any], keep: list):
    """A NULL-terminated ``const T **`` list, as QNN config arguments are."""
    arr = ffi.new(f"{ctype} *[]", len(items) + 1)
    for i, p in enumerate(items):
        arr[i] = p
    keep.append(arr)
    return arr


# ------------------------------------------------------------------------------------ logs
class LogRecorder:
    """An app ``QnnLog_Callback_t`` recording ``(level, message)`` tuples in ``records``.

    Recorders are kept alive for the whole process (the library may call a callback for as
    long as its logger lives), so they never dangle."""

    _all: list[LogRecorder] = []

    def __init__(self):
        self.records: list[tuple[int, str]] = []
        self.callback = ffi.callback("QnnLog_Callback_t", self._on_log)
        LogRecorder._all.append(self)

    def _on_log(self, fmt, level, timestamp, args):
        try:
            buf = ffi.new("char[]", 8192)
            libc.vsnprintf(buf, 8192, fmt, args)
            self.records.append((int(level), ffi.string(buf).decode("utf-8", "replace")))
        except Exception:  # never let an exception cross into C
            pass

    def clear(self) -> None:
        self.records.clear()

    def messages(self, level: int | None = None) -> list[str]:
        return [m for lv, m in self.records if level is None or lv == level]

    def errors(self) -> list[str]:
        return self.messages(Q.QNN_LOG_LEVEL_ERROR)

    def text(self) -> str:
        return "".join(m for _, m in self.records)

    def rules(self) -> set[str]:
        """The rule ids (``[QNNEMU-...]``) of every recorded message."""
        return {r for _, m in self.records for r in RULE_ID.findall(m)}

    def assert_rule(self, code: int, want_code: int, rule: str, func: str, path: str) -> str:
        """The negative-test contract of one rule id: the call returned ``want_code``, exactly
        ``rule`` fired, and its last message names the function and the parameter path.
        Returns that message."""
        assert code == want_code, f"{rule}: {func} returned {code}, expected {want_code}; log {self.errors()}"
        msgs = [m for _, m in self.records if f"[{rule}]" in m]
        assert msgs, f"{rule}: no message with [{rule}] reached the app log callback; got {self.records}"
        assert self.rules() == {rule}, f"{rule}: exactly this rule must fire; logged {self.rules()}"
        assert func in msgs[-1], f"{rule}: the message names the function '{func}': {msgs[-1]!r}"
        assert path in msgs[-1], f"{rule}: the message names the parameter path '{path}': {msgs[-1]!r}"
        return msgs[-1]

    def assert_warning(self, code: int, rule: str, func: str, path: str, want_code: int = Q.QNN_SUCCESS) -> str:
        """The contract of one warning rule (qnnemu/rules.py): the call succeeded (or returned
        ``want_code`` when a later step of the sequence is what refuses), ``rule`` reached the
        app log at QNN_LOG_LEVEL_WARN, no error rule fired, and the message names the function
        and the parameter path.  Returns the message."""
        assert code == want_code, f"{rule}: {func} returned {code}, expected {want_code}; log {self.records}"
        msgs = [(lv, m) for lv, m in self.records if f"[{rule}]" in m]
        assert msgs, f"{rule}: no message with [{rule}] reached the app log callback; got {self.records}"
        assert all(lv == Q.QNN_LOG_LEVEL_WARN for lv, _ in msgs), \
            f"{rule}: a warning rule is logged at QNN_LOG_LEVEL_WARN ({Q.QNN_LOG_LEVEL_WARN}): {msgs}"
        errors = {r for lv, m in self.records if lv == Q.QNN_LOG_LEVEL_ERROR for r in RULE_ID.findall(m)}
        assert want_code != Q.QNN_SUCCESS or not errors, f"{rule}: no error rule may fire; logged {errors}"
        text = msgs[-1][1]
        assert text.lstrip().startswith(("qnnemu [", f"[{rule}]")) and f"[{rule}] {func}: " in text, \
            f"{rule}: the message reads '[{rule}] {func}: <path>: ...': {text!r}"
        assert f"{func}: {path}" in text or path in text, \
            f"{rule}: the message names the parameter path '{path}': {text!r}"
        return text


# --------------------------------------------------------------------------------- structs
class Struct:
    """A cdata pointer (``ptr``) plus everything it points to (``keep``)."""

    def __init__(self, ptr, keep: list):
        self.ptr = ptr
        self.keep = keep

    @property
    def v(self):
        """The version member (``v1``/``v2``) of a tensor or op config."""
        return self.ptr.v2 if int(self.ptr.version) == 2 else self.ptr.v1

    @property
    def id(self) -> int:
        return int(self.v.id)


def tensor(name: str | None, dims: Sequence[int] | None, dtype: int = Q.QNN_DATATYPE_FLOAT_32,
           type_: int = Q.QNN_TENSOR_TYPE_APP_WRITE, version: int = 2, data: np.ndarray | bytes | None = None,
           data_size: int | None = None, rank: int | None = None, tensor_id: int = 0,
           quant: tuple[float, int] | None = None, mem_type: int = Q.QNN_TENSORMEMTYPE_RAW,
           data_format: int = Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
           dynamic: Sequence[bool] | None = None) -> Struct:
    """A ``Qnn_Tensor_t`` (v1 or v2; any other ``version`` is written as-is with v2 fields).

    ``dims=None`` with ``rank`` > 0 gives a NULL dimensions pointer; ``data`` goes to
    clientBuf (``data_size`` overrides its byte count); ``quant`` is (scale, offset) for a
    SCALE_OFFSET encoding; ``dynamic`` fills v2 ``isDynamicDimensions``."""
    keep: list = []
    t = ffi.new("Qnn_Tensor_t *")
    t.version = version
    v = t.v1 if version == 1 else t.v2
    v.id = tensor_id
    v.name = cstr(name, keep)
    v.type = type_
    v.dataFormat = data_format
    v.dataType = dtype
    if quant is None:
        v.quantizeParams.encodingDefinition = Q.QNN_DEFINITION_UNDEFINED
        v.quantizeParams.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_UNDEFINED
    else:
        v.quantizeParams.encodingDefinition = Q.QNN_DEFINITION_DEFINED
        v.quantizeParams.quantizationEncoding = Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET
        v.quantizeParams.scaleOffsetEncoding.scale = quant[0]
        v.quantizeParams.scaleOffsetEncoding.offset = quant[1]
    v.rank = len(dims) if rank is None else rank
    if dims is None:
        v.dimensions = NULL
    else:
        d = ffi.new("uint32_t[]", list(dims) or [0])
        keep.append(d)
        v.dimensions = d
    v.memType = mem_type
    if data is not None:
        raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        buf = ffi.new("char[]", raw or b"\0")
        keep.append(buf)
        v.clientBuf.data = buf
        v.clientBuf.dataSize = len(raw) if data_size is None else data_size
    else:
        v.clientBuf.data = NULL
        v.clientBuf.dataSize = data_size or 0
    if version != 1:
        if dynamic is not None:
            dd = ffi.new("uint8_t[]", [int(b) for b in dynamic] or [0])
            keep.append(dd)
            t.v2.isDynamicDimensions = dd
        else:
            t.v2.isDynamicDimensions = NULL
        t.v2.sparseParams.type = Q.QNN_SPARSE_LAYOUT_UNDEFINED
        t.v2.isProduced = 0
    return Struct(t, keep)


def static_tensor(name: str, array: np.ndarray, version: int = 2, **kw) -> Struct:
    """A STATIC tensor holding ``array`` (its numpy dtype mapped to the plain QNN type)."""
    array = np.ascontiguousarray(array)
    return tensor(name, array.shape, dtypes.from_numpy(array.dtype), Q.QNN_TENSOR_TYPE_STATIC,
                  version, data=array, **kw)


def set_buffer(t: Struct, array: np.ndarray | None, size: int | None = None) -> None:
    """Points a tensor's clientBuf at ``array`` (kept alive with ``t``)."""
    v = t.v
    if array is None:
        v.clientBuf.data = NULL
        v.clientBuf.dataSize = size or 0
        return
    buf = ffi.from_buffer(array)
    t.keep += [array, buf]
    v.clientBuf.data = buf
    v.clientBuf.dataSize = array.nbytes if size is None else size


def tensor_array(tensors: Sequence[Struct], keep: list):
    """A ``Qnn_Tensor_t[]`` copying the given structs (their buffers stay in ``keep``)."""
    arr = ffi.new("Qnn_Tensor_t[]", max(len(tensors), 1))
    for i, t in enumerate(tensors):
        arr[i] = t.ptr[0]
        keep.append(t)
    keep.append(arr)
    return arr


def scalar_param(name: str | None, dtype: int, member: str, value) -> Struct:
    """A ``Qnn_Param_t`` scalar (``member`` is the Qnn_Scalar_t field, e.g. ``floatValue``)."""
    keep: list = []
    p = ffi.new("Qnn_Param_t *")
    p.paramType = Q.QNN_PARAMTYPE_SCALAR
    p.name = cstr(name, keep)
    p.scalarParam.dataType = dtype
    setattr(p.scalarParam, member, value)
    return Struct(p, keep)


def tensor_param(name: str | None, t: Struct) -> Struct:
    keep: list = [t]
    p = ffi.new("Qnn_Param_t *")
    p.paramType = Q.QNN_PARAMTYPE_TENSOR
    p.name = cstr(name, keep)
    p.tensorParam = t.ptr[0]
    return Struct(p, keep)


def op_config(name: str | None, type_name: str | None, inputs: Sequence[Struct] = (),
              outputs: Sequence[Struct] = (), params: Sequence[Struct] = (),
              package: str | None = "qti.aisw", version: int = 1) -> Struct:
    """A ``Qnn_OpConfig_t`` v1 (tensors/params are copied into owned arrays)."""
    keep: list = []
    op = ffi.new("Qnn_OpConfig_t *")
    op.version = version
    v = op.v1
    v.name = cstr(name, keep)
    v.packageName = cstr(package, keep)
    v.typeName = cstr(type_name, keep)
    if params:
        arr = ffi.new("Qnn_Param_t[]", len(params))
        for i, p in enumerate(params):
            arr[i] = p.ptr[0]
        keep += [arr, *params]
        v.params = arr
    else:
        v.params = NULL
    v.numOfParams = len(params)
    v.numOfInputs = len(inputs)
    v.inputTensors = tensor_array(inputs, keep) if inputs else NULL
    v.numOfOutputs = len(outputs)
    v.outputTensors = tensor_array(outputs, keep) if outputs else NULL
    return Struct(op, keep)


# ------------------------------------------------------------------------------ sessions
class Session:
    """logger (recording) -> backend -> device (``soc``: a QNN_SOC_MODEL_*, None: no device
    config) -> context on any :class:`Library` (ours by default), with builders for configs,
    tensors and nodes that keep their C memory alive.  ``close()`` frees what it created.

    Every builder returns raw codes, so the same call sequence can run on two libraries and
    their codes be compared (tests/test_acceptance_vendor.py)."""

    def __init__(self, lib: Library | None = None, soc: int | None = None,
                 log_level: int = Q.QNN_LOG_LEVEL_DEBUG):
        self.lib = lib or library()
        self.keep: list = []
        self.rec = LogRecorder()
        self.contexts: list[int] = []
        code, self.log = self.lib.create("logCreate", self.rec.callback, log_level)
        assert code == Q.QNN_SUCCESS, f"setup: logCreate on {self.lib.name} returned {code}"
        code, self.be = self.lib.create("backendCreate", vp(self.log), NULL)
        assert code == Q.QNN_SUCCESS, f"setup: backendCreate on {self.lib.name} returned {code}"
        dev_cfg = NULL
        if soc is not None:
            dev_cfg = self.list("QnnDevice_Config_t", self.device_custom(Q.QNN_HTP_DEVICE_CONFIG_OPTION_SOC,
                                                                         socModel=soc))
        code, self.dev = self.lib.create("deviceCreate", vp(self.log), dev_cfg)
        assert code == Q.QNN_SUCCESS, f"setup: deviceCreate(soc {soc}) on {self.lib.name} returned {code}"
        code, self.ctx = self.context()
        assert code == Q.QNN_SUCCESS, f"setup: contextCreate on {self.lib.name} returned {code}"
        self.rec.clear()

    def close(self) -> None:
        for ctx in reversed(self.contexts):
            self.lib.call("contextFree", vp(ctx), NULL)
        self.lib.call("deviceFree", vp(self.dev))
        self.lib.call("backendFree", vp(self.be))
        self.lib.call("logFree", vp(self.log))

    # ---- plumbing
    def own(self, cdata):
        self.keep.append(cdata)
        return cdata

    def call(self, name: str, *args) -> int:
        return self.lib.call(name, *args)

    def list(self, ctype: str, *items):
        """A NULL-terminated ``const ctype **`` (NULL when empty)."""
        return null_terminated(ctype, list(items), self.keep) if items else NULL

    @staticmethod
    def _fill(struct, fields: dict) -> None:
        for k, v in fields.items():
            if isinstance(v, dict):
                Session._fill(getattr(struct, k), v)
            else:
                setattr(struct, k, v)

    # ---- configs
    def device_custom(self, option: int, **fields):
        cc = self.own(ffi.new("QnnHtpDevice_CustomConfig_t *"))
        cc.option = option
        self._fill(cc, fields)
        c = self.own(ffi.new("QnnDevice_Config_t *"))
        c.option, c.customConfig = Q.QNN_DEVICE_CONFIG_OPTION_CUSTOM, cc
        return c

    def graph_custom(self, option: int, **fields):
        """A QnnGraph_Config_t CUSTOM -> QnnHtpGraph_CustomConfig_t; a dict sets a struct member,
        ``opt=(type, value)`` the optimization option."""
        cc = self.own(ffi.new("QnnHtpGraph_CustomConfig_t *"))
        cc.option = option
        if "opt" in fields:
            cc.optimizationOption.type, cc.optimizationOption.floatValue = fields.pop("opt")
        self._fill(cc, fields)
        c = self.own(ffi.new("QnnGraph_Config_t *"))
        c.option, c.customConfig = Q.QNN_GRAPH_CONFIG_OPTION_CUSTOM, cc
        return c

    def graph_plain(self, option: int, **fields):
        c = self.own(ffi.new("QnnGraph_Config_t *"))
        c.option = option
        self._fill(c, fields)
        return c

    def context_custom(self, option: int, **fields):
        cc = self.own(ffi.new("QnnHtpContext_CustomConfig_t *"))
        cc.option = option
        self._fill(cc, fields)
        c = self.own(ffi.new("QnnContext_Config_t *"))
        c.option, c.customConfig = Q.QNN_CONTEXT_CONFIG_OPTION_CUSTOM, cc
        return c

    def context_plain(self, option: int, **fields):
        c = self.own(ffi.new("QnnContext_Config_t *"))
        c.option = option
        self._fill(c, fields)
        return c

    # ---- objects
    def context(self, *configs) -> tuple[int, int]:
        code, ctx = self.lib.create("contextCreate", vp(self.be), vp(self.dev),
                                    self.list("QnnContext_Config_t", *configs))
        if code == Q.QNN_SUCCESS:
            self.contexts.append(ctx)
        return code, ctx

    def graph(self, name: str = "g", *configs, ctx: int | None = None) -> tuple[int, int]:
        return self.lib.create("graphCreate", vp(ctx or self.ctx), cstr(name, self.keep),
                               self.list("QnnGraph_Config_t", *configs))

    def set_graph(self, g: int, *configs) -> int:
        return self.call("graphSetConfig", vp(g), self.list("QnnGraph_Config_t", *configs))

    def tensor(self, g: int, t: Struct) -> int:
        self.keep.append(t)
        return self.call("tensorCreateGraphTensor", vp(g), t.ptr)

    def node(self, g: int, op: Struct) -> int:
        self.keep.append(op)
        return self.call("graphAddNode", vp(g), op)

    def finalize(self, g: int) -> int:
        return self.call("graphFinalize", vp(g), NULL, NULL)

    def execute(self, g: int, inputs: Sequence[tuple[Struct, np.ndarray]],
                outputs: Sequence[tuple[Struct, np.ndarray]]) -> int:
        """graphExecute with copies of the created tensors pointing at the arrays (outputs are
        written into theirs)."""
        def io(t, array):
            c = Struct(ffi.new("Qnn_Tensor_t *", t.ptr[0]), [t])
            set_buffer(c, array)
            return c
        ins = [io(t, a) for t, a in inputs]
        outs = [io(t, a) for t, a in outputs]
        return self.call("graphExecute", vp(g), tensor_array(ins, self.keep) if ins else NULL, len(ins),
                         tensor_array(outs, self.keep) if outs else NULL, len(outs), NULL, NULL)

    def relu_graph(self, *configs, name: str = "g", ctx: int | None = None, shape=(2, 3),
                   execute: bool = True) -> tuple[int, ...]:
        """graphCreate(configs) -> x, y -> Relu -> graphFinalize -> graphExecute: the codes of
        the steps run (it stops at the first failure); the result is checked after an execute."""
        code, g = self.graph(name, *configs, ctx=ctx)
        codes = [code]
        if code:
            return tuple(codes)
        x, y = tensor("x", shape), tensor("y", shape, type_=Q.QNN_TENSOR_TYPE_APP_READ)
        for step in (lambda: self.tensor(g, x), lambda: self.tensor(g, y),
                     lambda: self.node(g, op_config("r", "Relu", [x], [y])), lambda: self.finalize(g)):
            codes.append(step())
            if codes[-1]:
                return tuple(codes)
        if execute:
            a = (np.arange(np.prod(shape), dtype=np.float32) - 3).reshape(shape)
            out = np.full(shape, -7.0, np.float32)
            codes.append(self.execute(g, [(x, a)], [(y, out)]))
            if codes[-1] == Q.QNN_SUCCESS:
                assert np.allclose(out, np.maximum(a, 0), rtol=1e-2), f"{self.lib.name}: Relu computed {out}"
        return tuple(codes)


# ------------------------------------------------------------------------------- LPAI
def lpai_library() -> Library:
    """libQnnLpaiEmu.so through the same raw calls (its table: qnnemu/abi/lpai_api.py)."""
    return library(qnnemu.lpai_library_path())


def aligned_bytes(nbytes: int, alignment: int = 128, fill: int = 0, misalign: int = 0) -> np.ndarray:
    """A uint8 array of ``nbytes`` starting ``misalign`` bytes past an ``alignment`` boundary."""
    raw = np.full(nbytes + alignment + misalign, fill, np.uint8)
    start = (-raw.ctypes.data) % alignment + misalign
    return raw[start:start + nbytes]


def addr(array: np.ndarray):
    """The ``void *`` of a numpy array's data."""
    return ffi.cast("void *", array.ctypes.data)


class LpaiSession(Session):
    """A :class:`Session` on libQnnLpaiEmu.so with builders for the LPAI custom configs and
    properties (LPAI/QnnLpai*.h)."""

    def __init__(self, log_level: int = Q.QNN_LOG_LEVEL_DEBUG):
        super().__init__(lpai_library(), log_level=log_level)

    def lpai_custom(self, plain: str, custom: str, option: int, payload):
        """A ``plain`` config (QnnGraph_Config_t ...) CUSTOM -> ``custom`` {option, config}."""
        cc = self.own(ffi.new(f"{custom} *"))
        cc.option, cc.config = option, payload
        c = self.own(ffi.new(f"{plain} *"))
        c.option, c.customConfig = getattr(Q, plain.replace("_Config_t", "").upper().replace("QNN", "QNN_", 1)
                                           + "_CONFIG_OPTION_CUSTOM"), cc
        return c

    def graph_lpai(self, option: int, payload):
        return self.lpai_custom("QnnGraph_Config_t", "QnnLpaiGraph_CustomConfig_t", option, payload)

    def context_lpai(self, option: int, payload):
        return self.lpai_custom("QnnContext_Config_t", "QnnLpaiContext_CustomConfig_t", option, payload)

    def backend_lpai(self, option: int, payload):
        return self.lpai_custom("QnnBackend_Config_t", "QnnLpaiBackend_CustomConfig_t", option, payload)

    def mem(self, kind: str, array: np.ndarray | None, size: int | None = None,
            mem_type: int = Q.QNN_LPAI_MEM_TYPE_DDR):
        """A SCRATCH_MEM / PERSISTENT_MEM graph config for ``array`` (None: a NULL address)."""
        m = self.own(ffi.new("QnnLpaiGraph_Mem_t *"))
        m.memType = mem_type
        m.size = (array.nbytes if array is not None else 0) if size is None else size
        m.addr = addr(array) if array is not None else NULL
        if array is not None:
            self.keep.append(array)
        option = Q.QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM if kind == "scratch" else Q.QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM
        return self.graph_lpai(option, m)

    def graph_property(self, g: int, option: int) -> tuple[int, int]:
        """graphGetProperty of one LPAI custom property: (code, the uint32 answered)."""
        out = self.own(ffi.new("uint32_t *", 0xDEADBEEF))
        cp = self.own(ffi.new("QnnLpaiGraph_CustomProperty_t *"))
        cp.option, cp.property = option, out
        p = self.own(ffi.new("QnnGraph_Property_t *"))
        p.option, p.customProperty = Q.QNN_GRAPH_PROPERTY_OPTION_CUSTOM, cp
        code = self.call("graphGetProperty", vp(g), self.list("QnnGraph_Property_t", p))
        return code, int(out[0])

    def backend_property(self, option: int, out) -> int:
        cp = self.own(ffi.new("QnnLpaiBackend_CustomProperty_t *"))
        cp.option, cp.property = option, out
        p = self.own(ffi.new("QnnBackend_Property_t *"))
        p.option, p.customProperty = Q.QNN_BACKEND_PROPERTY_OPTION_CUSTOM, cp
        return self.call("backendGetProperty", vp(self.be), self.list("QnnBackend_Property_t", p))

    def execute_aligned(self, g: int, inputs, outputs) -> int:
        """graphExecute with every buffer copied into / out of 128-byte aligned memory."""
        ins = []
        for t, a in inputs:
            buf = aligned_bytes(a.nbytes).view(a.dtype).reshape(a.shape)
            buf[...] = a
            ins.append((t, buf))
        outs = [(t, aligned_bytes(a.nbytes).view(a.dtype).reshape(a.shape)) for t, a in outputs]
        code = self.execute(g, ins, outs)
        for (_, a), (_, buf) in zip(outputs, outs):
            a[...] = buf
        return code
