"""Raw cffi access to libQnnSystem.so (System/QnnSystemInterface.h, QnnSystemProfile.h,
QnnSystemTensor.h, HTP/QnnHtpSystemContext.h): the provider and its function table (ours, or
the vendor's through ``load``), serialization targets and QnnSystemProfile_ProfileData_t records
built from plain specs, and systemTensorGetMemoryFootprint on tensors built here with the cases
both libraries are run on.  Used by tests/test_system_lib.py, tests/test_system_context.py
(also in its vendor subprocess) and tests/test_htp_profiling.py (the System library's log of
the linting tree)."""
from __future__ import annotations

from pathlib import Path

import cffi
from abi import RULE_ID

import qnnemu
from qnnemu.headers import Q, cdef

LIB = Path(qnnemu.system_library_path())

ffi = cffi.FFI()
ffi.cdef(cdef(("System/QnnSystemInterface.h", "HTP/QnnHtpSystemContext.h", "HTP/QnnHtpDevice.h")))
ffi.cdef("int vsnprintf(char *, size_t, const char *, void *);")
# cffi's ABI mode cannot pass QnnSystemProfile_SerializationTarget_t (anonymous union) by value:
# a layout-identical struct with a named member is passed the same way (24 bytes, in memory).
ffi.cdef("""
typedef struct { QnnSystemProfile_SerializationTargetType_t type; QnnSystemProfile_SerializationTargetFile_t file; }
  t_Target_t;
typedef Qnn_ErrorHandle_t (*t_CreateTargetFn_t)(t_Target_t, QnnSystemProfile_SerializationTargetConfig_t *,
                                                uint32_t, QnnSystemProfile_SerializationTargetHandle_t *);
""")
assert ffi.sizeof("t_Target_t") == ffi.sizeof("QnnSystemProfile_SerializationTarget_t")
# Nor Qnn_Tensor_t (anonymous unions): a struct of the same size made of words is passed the
# same way (larger than 16 bytes: in memory).
TENSOR_SIZE = ffi.sizeof("Qnn_Tensor_t")
ffi.cdef(f"typedef struct {{ uint64_t w[{TENSOR_SIZE // 8}]; }} t_TensorBlob_t;"
         "typedef Qnn_ErrorHandle_t (*t_FootprintFn_t)(t_TensorBlob_t, uint64_t *);")
assert TENSOR_SIZE % 8 == 0 and ffi.sizeof("t_TensorBlob_t") == TENSOR_SIZE
libc = ffi.dlopen(None)
LOADED: dict = {}   # the loaded library: lib, plist, n (providers), p (the first), t (its v1_14 table)


def load(path) -> None:
    """Loads the System library at ``path`` (ours unless told: the vendor's, in a subprocess that
    has its LD_LIBRARY_PATH) as the one ``provider()`` / ``table()`` use."""
    lib = ffi.dlopen(str(path))
    plist = ffi.new("const QnnSystemInterface_t ***")
    n = ffi.new("uint32_t *")
    code = lib.QnnSystemInterface_getProviders(plist, n)
    assert code == Q.QNN_SUCCESS, f"QnnSystemInterface_getProviders returned {code}"
    LOADED.update(lib=lib, plist=plist, n=n[0], p=plist[0][0], t=plist[0][0].v1_14)


def provider():
    if "p" not in LOADED:
        load(LIB)
    return LOADED["p"]


def table():
    return provider().v1_14


class Recorder:
    """A QnnLog callback recording (level, message); kept alive for the whole process."""
    _all: list = []

    def __init__(self):
        self.records: list[tuple[int, str]] = []
        self.callback = ffi.callback("QnnLog_Callback_t", self._on_log)
        Recorder._all.append(self)

    def _on_log(self, fmt, level, ts, args):
        try:
            buf = ffi.new("char[]", 8192)
            libc.vsnprintf(buf, 8192, fmt, args)
            self.records.append((int(level), ffi.string(buf).decode("utf-8", "replace")))
        except Exception:
            pass

    def rules(self) -> set[str]:
        return {r for _, m in self.records for r in RULE_ID.findall(m)}

    def with_rule(self, rule: str) -> list[str]:
        return [m for _, m in self.records if f"[{rule}]" in m]


# ------------------------------------------------------------------------- serialization API
def create_target(directory, name="out_qnn.log", configs=(), type_=Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE,
                  keep=None):
    keep = [] if keep is None else keep
    t = ffi.new("t_Target_t *")
    t.type = type_
    for attr, value in (("fileName", name), ("fileDirectory", directory)):
        if value is None:
            setattr(t.file, attr, ffi.NULL)
        else:
            s = ffi.new("char[]", str(value).encode())
            keep.append(s)
            setattr(t.file, attr, s)
    cfg = ffi.new("QnnSystemProfile_SerializationTargetConfig_t[]", max(len(configs), 1))
    for i, c in enumerate(configs):
        cfg[i].type = c[0]
        if c[0] == Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_MAX_NUM_MESSAGES:
            cfg[i].maxNumMessages = c[1]
        elif c[0] == Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_SERIALIZATION_HEADER:
            strs = [ffi.new("char[]", v.encode()) for v in c[1]]
            keep.extend(strs)
            h = cfg[i].serializationHeader
            h.appName, h.appVersion, h.backendVersion = strs
    keep += [t, cfg]
    out = ffi.new("QnnSystemProfile_SerializationTargetHandle_t *")
    fn = ffi.cast("t_CreateTargetFn_t", table().systemProfileCreateSerializationTarget)
    code = fn(t[0], cfg if configs else ffi.NULL, len(configs), out)
    return code, out[0]


class Events:
    """Builds QnnSystemProfile_ProfileData_t records (everything kept alive here)."""

    def __init__(self):
        self.keep: list = []

    def s(self, text):
        b = ffi.new("char[]", text.encode())
        self.keep.append(b)
        return b

    def array(self, specs):
        arr = ffi.new("struct QnnSystemProfile_ProfileEventV1_t[]", max(len(specs), 1))
        self.keep.append(arr)
        for e, spec in zip(arr, specs):
            kind = spec.get("kind", "basic")
            if kind == "basic":
                e.type = Q.QNN_SYSTEM_PROFILE_EVENT_DATA
                e.eventData.type, e.eventData.unit, e.eventData.value = spec["type"], spec["unit"], spec["value"]
                e.eventData.identifier = self.s(spec["id"])
            else:
                e.type = Q.QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA
                x = e.extendedEventData
                x.version = spec.get("version", Q.QNN_PROFILE_DATA_VERSION_1)
                x.v1.type, x.v1.unit, x.v1.timestamp = spec["type"], spec["unit"], spec.get("ts", 0)
                x.v1.identifier = self.s(spec["id"])
                if spec["unit"] == Q.QNN_PROFILE_EVENTUNIT_OBJECT:
                    blob = ffi.new("char[]", spec["object"])
                    self.keep.append(blob)
                    x.v1.backendOpaqueObject.opaqueObject.data = blob
                    x.v1.backendOpaqueObject.opaqueObject.len = len(spec["object"])
                    x.v1.backendOpaqueObject.fileName = self.s("obj.bin")
                else:
                    dt, field, value = spec["scalar"]
                    x.v1.value.dataType = dt
                    setattr(x.v1.value, field, self.s(value) if field == "stringValue" else value)
            if spec.get("raw_type") is not None:
                e.type = spec["raw_type"]
            sub = spec.get("sub", [])
            e.profileSubEventData = self.array(sub) if sub else ffi.NULL
            e.numSubEvents = len(sub)
        return arr

    def data(self, specs, method=Q.QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_EXECUTE, graph="g0", version=1):
        d = ffi.new("QnnSystemProfile_ProfileData_t *")
        self.keep.append(d)
        d.version = version
        h = d.v1.header
        h.startTime, h.stopTime, h.startMem, h.stopMem = 100, 250, 0, 4096
        h.methodType = method
        h.visibility = Q.QNN_SYSTEM_PROFILE_VISIBILITY_PUBLIC
        h.graphName = self.s(graph)
        d.v1.profilingEvents = self.array(specs) if specs else ffi.NULL
        d.v1.numProfilingEvents = len(specs)
        return d

    def serialize(self, target, datas):
        lst = ffi.new("const QnnSystemProfile_ProfileData_t *[]", datas or [ffi.NULL])
        self.keep.append(lst)
        return table().systemProfileSerializeEventData(target, lst, len(datas))


# ------------------------------------------------------------------------ tensor footprints
F32, F16, U8 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_UFIXED_POINT_8
T_INVALID = Q.QNN_SYSTEM_TENSOR_ERROR_INVALID_TENSOR
_TENSOR_MEMORY: list = []  # names and dimension arrays the tensors point to, alive until the process ends


def tensor(version=1, dtype=F32, dims=(2, 3), data_format=Q.QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER,
           null_dims=False, rank=None):
    keep = _TENSOR_MEMORY
    t = ffi.new("Qnn_Tensor_t *")
    t.version = version
    v = t.v2 if version == 2 else t.v1
    name = ffi.new("char[]", b"t")
    d = ffi.new("uint32_t[]", list(dims) or [0])
    keep += [t, name, d]
    v.name, v.type, v.dataType, v.dataFormat = name, Q.QNN_TENSOR_TYPE_APP_WRITE, dtype, data_format
    v.rank = len(dims) if rank is None else rank
    v.dimensions = ffi.NULL if null_dims or not dims else d
    v.memType = Q.QNN_TENSORMEMTYPE_RAW
    return t


def footprint(t, out=True) -> tuple[int, int]:
    blob = ffi.new("t_TensorBlob_t *")
    ffi.memmove(blob, t, TENSOR_SIZE)
    result = ffi.new("uint64_t *", 0xDEADBEEF)
    fn = ffi.cast("t_FootprintFn_t", table().systemTensorGetMemoryFootprint)
    code = fn(blob[0], result if out else ffi.NULL)
    return code, int(result[0])


FOOTPRINT_CASES = {  # name: (tensor kwargs, expected code) -- also run against the vendor's library
    "float32": ({"dims": (2, 3)}, Q.QNN_SUCCESS),
    "uint8 v2": ({"version": 2, "dtype": U8, "dims": (1, 7, 7, 3)}, Q.QNN_SUCCESS),
    "scalar": ({"dtype": F16, "dims": ()}, Q.QNN_SUCCESS),
    "zero dim": ({"dims": (2, 0)}, Q.QNN_SUCCESS),
    "int64": ({"dtype": Q.QNN_DATATYPE_INT_64, "dims": (4, 4)}, Q.QNN_SUCCESS),
    "bfloat16": ({"dtype": Q.QNN_DATATYPE_BFLOAT_16, "dims": (3,)}, Q.QNN_SUCCESS),
    "sfixed4": ({"dtype": Q.QNN_DATATYPE_SFIXED_POINT_4, "dims": (5, 3)}, T_INVALID),
    "ufixed4": ({"dtype": Q.QNN_DATATYPE_UFIXED_POINT_4, "dims": (3,)}, T_INVALID),
    "string": ({"dtype": Q.QNN_DATATYPE_STRING, "dims": (2,)}, T_INVALID),
    "undefined type": ({"dtype": Q.QNN_DATATYPE_UNDEFINED, "dims": (2,)}, T_INVALID),
    "sparse": ({"data_format": Q.QNN_TENSOR_DATA_FORMAT_SPARSE}, T_INVALID),
    "codebook": ({"data_format": Q.QNN_TENSOR_DATA_FORMAT_CODEBOOK}, T_INVALID),
    "mx": ({"data_format": Q.QNN_TENSOR_DATA_FORMAT_MX}, T_INVALID),
    "hmx layout": ({"data_format": Q.QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT}, T_INVALID),
    "null dims": ({"dims": (2, 2), "null_dims": True}, T_INVALID),
}
