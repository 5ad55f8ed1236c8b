"""libQnnSystem.so (System/QnnSystemInterface.h): exports, the provider and its padded table,
loading from C and from Python next to libQnnHtpEmu.so (both embedded in one interpreter, loaded
and unloaded repeatedly), the System log entries, profile serialization targets writing real
files (qnnemu/core/system_profile.py describes the format), the DLC entries that answer
UNSUPPORTED_FEATURE, and every System rule id (the system context and tensor footprint rules
have their cases in tests/test_system_context.py, ``RULE_IDS``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import cffi
import pytest
from helpers.system_lib import LIB, LOADED, Events, Recorder, create_target, ffi, provider, table

import qnnemu
from qnnemu.core.system_profile import read_profile_log
from qnnemu.headers import Q

BACKEND = Path(qnnemu.backend_library_path())
INCLUDE = Path(qnnemu.include_dir()) / "QNN"

pytestmark = pytest.mark.skipif(not LIB.exists(), reason="libQnnSystem.so is not built (pip install -e .)")

UNSUPPORTED = Q.QNN_SYSTEM_COMMON_ERROR_UNSUPPORTED_FEATURE
BAD_ARG = Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT
BAD_HANDLE = Q.QNN_SYSTEM_PROFILE_ERROR_INVALID_HANDLE


@pytest.fixture
def syslog():
    """A System logger at DEBUG (the newest, so it gets the System library's messages)."""
    rec = Recorder()
    out = ffi.new("Qnn_LogHandle_t *")
    assert table().systemLogCreate(rec.callback, Q.QNN_LOG_LEVEL_DEBUG, out) == Q.QNN_SUCCESS
    rec.handle = out[0]
    yield rec
    assert table().systemLogFree(out[0]) == Q.QNN_SUCCESS


US, CYC = Q.QNN_PROFILE_EVENTUNIT_MICROSEC, Q.QNN_PROFILE_EVENTUNIT_CYCLES
EXEC = {"type": Q.QNN_PROFILE_EVENTTYPE_EXECUTE, "unit": US, "value": 1234, "id": "QNN (execute) time"}


# ---------------------------------------------------------------------------------- provider
def test_only_the_entry_point_is_exported():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == {"QnnSystemInterface_getProviders"}, f"exported: {sorted(names)}"


def test_provider_and_table():
    p = provider()
    assert LOADED["n"] == 1, "one provider"
    assert ffi.string(p.providerName) == b"QNNEMU_SYSTEM"
    assert p.backendId == Q.QNN_BACKEND_ID_NULL, "the System library belongs to no backend"
    v = p.systemApiVersion
    assert (v.major, v.minor, v.patch) == (1, 15, 0), "System API 1.15.0 (what ONNX Runtime's QNN EP requires)"
    names = [n for n, _ in ffi.typeof("QnnSystemInterface_ImplementationV1_14_t").fields]
    assert len(names) == 89 and all(getattr(table(), n) != ffi.NULL for n in names), "all 89 slots filled"
    slots = ffi.cast("void **", ffi.addressof(p.v1_14))
    for i in range(89, 93):  # clients built against newer headers read past our 89 entries
        assert ffi.cast("Qnn_ErrorHandle_t (*)(void)", slots[i])() == UNSUPPORTED, f"padded slot {i}"


def test_get_providers_null_arguments():
    lib = (provider(), LOADED["lib"])[1]
    n = ffi.new("uint32_t *")
    assert lib.QnnSystemInterface_getProviders(ffi.NULL, n) == Q.QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER
    assert lib.QnnSystemInterface_getProviders(ffi.new("const QnnSystemInterface_t ***"), ffi.NULL) == \
        Q.QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER


# ---------------------------------------------------------------------------------- logging
def test_system_log(syslog):
    t = table()
    assert t.systemLogSetLogLevel(syslog.handle, Q.QNN_LOG_LEVEL_WARN) == Q.QNN_SUCCESS
    assert t.systemLogSetLogLevel(syslog.handle, 0) == Q.QNN_LOG_ERROR_INVALID_ARGUMENT
    assert "QNNEMU-systemLog-level" in syslog.rules(), "errors reach the System logger with their rule id"
    assert t.systemLogSetLogLevel(ffi.cast("void *", 0xDEAD0008), 3) == Q.QNN_LOG_ERROR_INVALID_HANDLE
    out = ffi.new("Qnn_LogHandle_t *")
    assert t.systemLogCreate(ffi.NULL, 99, out) == Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "bad level"
    assert t.systemLogCreate(ffi.NULL, 3, ffi.NULL) == Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "NULL logger"
    assert t.systemLogCreate(ffi.NULL, 3, out) == Q.QNN_SUCCESS, "a logger without callback"
    assert t.systemLogFree(out[0]) == Q.QNN_SUCCESS
    assert t.systemLogFree(out[0]) == Q.QNN_LOG_ERROR_INVALID_HANDLE, "double free"


# ----------------------------------------------------------------------------- serialization
def test_serialization_writes_a_file(tmp_path, syslog):
    ev = Events()
    code, target = create_target(tmp_path, configs=[
        (Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_SERIALIZATION_HEADER, ("App", "1.2", "2.40.0"))],
        keep=ev.keep)
    assert code == Q.QNN_SUCCESS, "createSerializationTarget"
    node = {"type": Q.QNN_PROFILE_EVENTTYPE_NODE, "unit": CYC, "value": 77, "id": "fc:OpId_0 (cycles)"}
    records = [
        ev.data([{"type": Q.QNN_PROFILE_EVENTTYPE_FINALIZE, "unit": US, "value": 10, "id": "QNN (finalize) time"}],
                method=Q.QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_FINALIZE),
        ev.data([
            {"type": Q.QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_ACCEL_TIME_CYCLE, "unit": CYC, "value": 99,
             "id": "Accelerator (execute) time (cycles)", "sub": [node]},
            EXEC,
            {"kind": "ext", "type": 3004, "unit": US, "ts": 1700000000000000, "id": "ext u64",
             "scalar": (Q.QNN_DATATYPE_UINT_64, "uint64Value", 2**40)},
            {"kind": "ext", "type": 1001, "unit": Q.QNN_PROFILE_EVENTUNIT_BACKEND, "id": "ext double",
             "scalar": (Q.QNN_DATATYPE_FLOAT_64, "doubleValue", 0.25)},
            {"kind": "ext", "type": 1002, "unit": Q.QNN_PROFILE_EVENTUNIT_NONE, "id": "ext string",
             "scalar": (Q.QNN_DATATYPE_STRING, "stringValue", "hello")},
            {"kind": "ext", "type": 1003, "unit": Q.QNN_PROFILE_EVENTUNIT_OBJECT, "id": "ext object",
             "object": b"\x01\x02\x03"},
        ]),
    ]
    assert ev.serialize(target, records) == Q.QNN_SUCCESS, "serializeEventData"
    assert table().systemProfileFreeSerializationTarget(target) == Q.QNN_SUCCESS
    header, recs = read_profile_log(str(tmp_path / "out_qnn.log"))
    assert (header["appName"], header["appVersion"], header["backendVersion"]) == ("App", "1.2", "2.40.0")
    assert header["systemApiVersion"] == "1.15.0" and header["version"] == 1
    assert [r["header"]["methodTypeName"] for r in recs] == ["BACKEND_FINALIZE", "BACKEND_EXECUTE"]
    h = recs[1]["header"]
    assert (h["startTime"], h["stopTime"], h["stopMem"], h["graphName"], h["visibilityName"]) == \
        (100, 250, 4096, "g0", "PUBLIC")
    cyc, ex, u64, dbl, txt, obj = recs[1]["events"]
    assert (cyc["typeName"], cyc["unitName"], cyc["value"]) == ("HTP_GRAPH_EXECUTE_ACCEL_TIME_CYCLE", "CYCLES", 99)
    assert [(s["typeName"], s["value"], s["identifier"]) for s in cyc["subEvents"]] == \
        [("NODE", 77, "fc:OpId_0 (cycles)")], "sub-events are nested"
    assert (ex["dataType"], ex["typeName"], ex["value"], ex["identifier"]) == \
        ("EVENT_DATA", "EXECUTE", 1234, "QNN (execute) time")
    assert (u64["dataType"], u64["value"], u64["timestamp"]) == ("EXTENDED_EVENT_DATA", 2**40, 1700000000000000)
    assert dbl["value"] == 0.25 and dbl["valueDataType"] == Q.QNN_DATATYPE_FLOAT_64
    assert txt["value"] == "hello"
    assert obj["object"] == {"fileName": "obj.bin", "len": 3, "dataBase64": "AQID"}


def test_targets_append_to_an_existing_file(tmp_path):
    ev = Events()
    for _ in range(2):
        code, target = create_target(tmp_path, keep=ev.keep)
        assert code == Q.QNN_SUCCESS
        assert ev.serialize(target, [ev.data([EXEC])]) == Q.QNN_SUCCESS
        assert table().systemProfileFreeSerializationTarget(target) == Q.QNN_SUCCESS
    lines = (tmp_path / "out_qnn.log").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["header", "profileData", "profileData"], \
        "one header, then the records of both targets (as the vendor library appends)"
    header, _ = read_profile_log(str(tmp_path / "out_qnn.log"))
    assert header["appName"] is None, "no SERIALIZATION_HEADER config: null header strings"


def test_max_num_messages(tmp_path, syslog):
    ev = Events()
    code, target = create_target(tmp_path, configs=[
        (Q.QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_MAX_NUM_MESSAGES, 2)], keep=ev.keep)
    assert code == Q.QNN_SUCCESS
    assert ev.serialize(target, [ev.data([EXEC]) for _ in range(3)]) == Q.QNN_SUCCESS
    assert ev.serialize(target, [ev.data([EXEC])]) == Q.QNN_SUCCESS
    assert table().systemProfileFreeSerializationTarget(target) == Q.QNN_SUCCESS
    _, recs = read_profile_log(str(tmp_path / "out_qnn.log"))
    assert len(recs) == 2, "writing stops after maxNumMessages records"
    assert sum("MAX_NUM_MESSAGES" in m for _, m in syslog.records) == 1, "said once"


def test_free_and_use_after_free(tmp_path, syslog):
    ev = Events()
    code, target = create_target(tmp_path, keep=ev.keep)
    assert table().systemProfileFreeSerializationTarget(target) == Q.QNN_SUCCESS
    assert table().systemProfileFreeSerializationTarget(target) == BAD_HANDLE, "double free"
    assert ev.serialize(target, [ev.data([EXEC])]) == BAD_HANDLE, "serialize after free"
    assert table().systemProfileFreeSerializationTarget(ffi.NULL) == BAD_HANDLE
    assert {"QNNEMU-handle-freed", "QNNEMU-handle-null"} <= syslog.rules()


# -------------------------------------------------------------------------- unsupported entries
def _call_zeros(name):
    """Calls a table entry with NULL / 0 arguments; a by-value struct (Qnn_Tensor_t,
    QnnInterface_t: larger than 16 bytes, so passed in memory) is given as a zeroed blob of
    the same size."""
    fn = getattr(table(), name)
    ftype = ffi.typeof(fn)
    params, args = [], []
    for t in ftype.args:
        if t.kind == "struct":
            size = ffi.sizeof(t)
            assert size % 8 == 0 and size > 16, f"no by-value stand-in for {t.cname}"
            blob = f"t_Blob{size}_t"
            try:
                ffi.sizeof(blob)
            except cffi.CDefError:
                ffi.cdef(f"typedef struct {{ uint64_t w[{size // 8}]; }} {blob};")
            params.append(blob)
            args.append(ffi.new(f"{blob} *")[0])
        else:
            params.append(t.cname)
            args.append(ffi.NULL if t.kind in ("pointer", "function") else 0)
    fn = ffi.cast(f"{ftype.result.cname}(*)({', '.join(params)})", fn)
    return fn(*args)


# The emulator has no DLC reader (System/QnnSystemDlc.h).
UNSUPPORTED_ENTRIES = ["systemDlcCreateFromFile", "systemDlcCreateFromBinary", "systemDlcComposeGraphs",
                       "systemDlcGetOpMappings", "systemDlcFree"]


@pytest.mark.parametrize("name", UNSUPPORTED_ENTRIES)
def test_unsupported_entries(syslog, name):
    syslog.records.clear()
    assert _call_zeros(name) == Q.QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE == UNSUPPORTED, \
        f"{name} answers QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE"
    msgs = [m for _, m in syslog.records if "[QNNEMU-system-not-supported]" in m]
    assert msgs and name in msgs[-1] and "not supported" in msgs[-1] and "no DLC reader" in msgs[-1], \
        f"{name}: says why: {syslog.records}"


# ---------------------------------------------------------------------------- rule ids
RULE_CASES: dict = {}


def rule_case(rule, code, path):
    def deco(fn):
        RULE_CASES[rule] = (code, path, fn)
        return fn
    return deco


@rule_case("QNNEMU-systemLog-level", Q.QNN_LOG_ERROR_INVALID_ARGUMENT, "maxLogLevel")
def _(tmp_path):
    return table().systemLogCreate(ffi.NULL, 0, ffi.new("Qnn_LogHandle_t *"))


@rule_case("QNNEMU-system-arg-null", BAD_ARG, "serializationTarget")
def _(tmp_path):
    fn = ffi.cast("t_CreateTargetFn_t", table().systemProfileCreateSerializationTarget)
    return fn(ffi.new("t_Target_t *")[0], ffi.NULL, 0, ffi.NULL)


@rule_case("QNNEMU-system-not-supported", UNSUPPORTED, "systemDlcFree")
def _(tmp_path):
    return table().systemDlcFree(ffi.NULL)


@rule_case("QNNEMU-systemProfile-target-type", BAD_ARG, "serializationTargetInfo.type")
def _(tmp_path):
    return create_target(tmp_path, type_=7)[0]


@rule_case("QNNEMU-systemProfile-target-name", BAD_ARG, "serializationTargetInfo.file.fileName")
def _(tmp_path):
    return create_target(tmp_path, name=None)[0]


@rule_case("QNNEMU-systemProfile-target-directory", BAD_ARG, "fileDirectory")
def _(tmp_path):
    return create_target(tmp_path / "missing")[0]


@rule_case("QNNEMU-systemProfile-target-open", BAD_ARG, "serializationTargetInfo.file")
def _(tmp_path):
    (tmp_path / "adir").mkdir()
    return create_target(tmp_path, name="adir")[0]  # a directory cannot be opened for writing


@rule_case("QNNEMU-systemProfile-config-type", BAD_ARG, "configs[0].type")
def _(tmp_path):
    return create_target(tmp_path, configs=[(77,)])[0]


def _serialize_case(tmp_path, make):
    ev = Events()
    code, target = create_target(tmp_path, keep=ev.keep)
    assert code == Q.QNN_SUCCESS
    try:
        return make(ev, target)
    finally:
        table().systemProfileFreeSerializationTarget(target)


@rule_case("QNNEMU-systemProfile-data-version", BAD_ARG, "eventData[0].version")
def _(tmp_path):
    return _serialize_case(tmp_path, lambda ev, t: ev.serialize(t, [ev.data([EXEC], version=9)]))


@rule_case("QNNEMU-systemProfile-events-null", BAD_ARG, "eventData[0].v1.profilingEvents")
def _(tmp_path):
    def make(ev, t):
        d = ev.data([])
        d.v1.numProfilingEvents = 2
        return ev.serialize(t, [d])
    return _serialize_case(tmp_path, make)


@rule_case("QNNEMU-systemProfile-event-type", BAD_ARG, "eventData[0].v1.profilingEvents[0].type")
def _(tmp_path):
    return _serialize_case(tmp_path, lambda ev, t: ev.serialize(t, [ev.data([dict(EXEC, raw_type=5)])]))


@rule_case("QNNEMU-systemProfile-extended-version", BAD_ARG, "extendedEventData.version")
def _(tmp_path):
    spec = {"kind": "ext", "version": 3, "type": 400, "unit": US, "id": "x",
            "scalar": (Q.QNN_DATATYPE_UINT_64, "uint64Value", 1)}
    return _serialize_case(tmp_path, lambda ev, t: ev.serialize(t, [ev.data([spec])]))


@rule_case("QNNEMU-systemProfile-events-depth", BAD_ARG, "profileSubEventData")
def _(tmp_path):
    def make(ev, t):
        d = ev.data([EXEC])
        e = d.v1.profilingEvents
        e[0].profileSubEventData, e[0].numSubEvents = e, 1  # an event that is its own sub-event
        return ev.serialize(t, [d])
    return _serialize_case(tmp_path, make)


@rule_case("QNNEMU-systemProfile-events-count", BAD_ARG, "more than")
def _(tmp_path):
    from qnnemu.abi import system_entry
    old = system_entry.MAX_EVENTS_PER_CALL
    system_entry.MAX_EVENTS_PER_CALL = 3
    try:
        return _serialize_case(tmp_path, lambda ev, t: ev.serialize(t, [ev.data([EXEC] * 4)]))
    finally:
        system_entry.MAX_EVENTS_PER_CALL = old


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_rule(tmp_path, syslog, rule):
    code, path, trigger = RULE_CASES[rule]
    syslog.records.clear()
    got = trigger(tmp_path)
    assert got == code, f"{rule}: returned {got}, expected {code}"
    msgs = [m for _, m in syslog.records if f"[{rule}]" in m]
    assert msgs, f"{rule}: not logged to the System logger: {syslog.records}"
    assert syslog.rules() == {rule}, f"{rule}: exactly this rule fires; logged {syslog.rules()}"
    assert path in msgs[-1], f"{rule}: message names '{path}': {msgs[-1]!r}"


# Rules that cannot be reached through the ABI (tested on the core, below).
CORE_LEVEL_RULES = {"QNNEMU-systemProfile-target-closed", "QNNEMU-env-system-api"}


def test_rule_target_closed_core_level(tmp_path):
    """QNNEMU-systemProfile-target-closed: freeing releases the handle first, so only a call
    racing with the free sees a closed target."""
    from qnnemu.core.system_profile import SerializationTarget
    from qnnemu.errors import QnnError
    t = SerializationTarget(str(tmp_path / "x.log"), None, None, (1, 15, 0))
    t.close()
    with pytest.raises(QnnError) as e:
        t.append([{"kind": "profileData"}], "systemProfileSerializeEventData")
    assert e.value.rule == "QNNEMU-systemProfile-target-closed" and e.value.code == BAD_HANDLE


def test_every_system_rule_has_a_case():
    """The System library's rule ids have a case here or a negative test elsewhere (the
    QnnSystemContext rules: tests/test_system_context.py's RULE_CASES; tests/rule_scan.py reads
    them, so this module imports no other test module)."""
    import rule_scan
    root = Path(qnnemu.__file__).parent
    found = set()
    for path in (root / "core" / "system_profile.py", root / "abi" / "system_entry.py"):
        found |= set(re.findall(r'"(QNNEMU-[A-Za-z0-9_-]+)"', path.read_text()))
    covered = set(RULE_CASES) | CORE_LEVEL_RULES | {rule for rule in found if rule_scan.is_tested(rule)}
    assert found - covered == set(), f"System rule ids without a case: {sorted(found - covered)}"


# ------------------------------------------------------------------------ loading from C
PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "QnnInterface.h"
#include "System/QnnSystemInterface.h"
typedef Qnn_ErrorHandle_t (*GetBe)(const QnnInterface_t ***, uint32_t *);
typedef Qnn_ErrorHandle_t (*GetSys)(const QnnSystemInterface_t ***, uint32_t *);
/* argv: system lib, backend lib ("-" for none), output dir, rounds.  Each round loads both
 * libraries (alternating which comes first), profiles a finalize on the backend, serializes
 * it through the System library, asks a system context about a buffer that is no context
 * binary, calls a padding slot, frees all and unloads both. */
int main(int argc, char **argv) {
  const char *sys_path = argv[1], *be_path = argv[2], *dir = argv[3];
  int rounds = atoi(argv[4]);
  for (int r = 0; r < rounds; r++) {
    int sys_first = r % 2 == 0;
    void *hs = NULL, *hb = NULL;
    if (sys_first) hs = dlopen(sys_path, RTLD_NOW | RTLD_LOCAL);
    if (strcmp(be_path, "-")) hb = dlopen(be_path, RTLD_NOW | RTLD_LOCAL);
    if (!sys_first) hs = dlopen(sys_path, RTLD_NOW | RTLD_LOCAL);
    if (!hs || (strcmp(be_path, "-") && !hb)) { printf("dlopen failed: %s\n", dlerror()); return 200; }
    GetSys gs = (GetSys)dlsym(hs, "QnnSystemInterface_getProviders");
    const QnnSystemInterface_t **sl = NULL;
    uint32_t n = 0;
    Qnn_ErrorHandle_t rc = gs(&sl, &n);
    printf("round %d system rc %lu n %u\n", r, (unsigned long)rc, n);
    if (rc) return 100;
    const QnnSystemInterface_t *s = sl[0];
    printf("system %s %u.%u.%u\n", s->providerName, s->systemApiVersion.major, s->systemApiVersion.minor,
           s->systemApiVersion.patch);
    QNN_SYSTEM_INTERFACE_VER_TYPE st = s->QNN_SYSTEM_INTERFACE_VER_NAME;
    QnnSystemProfile_SerializationTarget_t t;
    memset(&t, 0, sizeof t);
    t.type = QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE;
    char name[64];
    snprintf(name, sizeof name, "round%d_qnn.log", r);
    t.file.fileName = name;
    t.file.fileDirectory = dir;
    QnnSystemProfile_SerializationTargetHandle_t th = NULL;
    if (st.systemProfileCreateSerializationTarget(t, NULL, 0, &th)) return 101;
    QnnProfile_EventData_t ev = {QNN_PROFILE_EVENTTYPE_FINALIZE, QNN_PROFILE_EVENTUNIT_MICROSEC, 0, "none"};
    QnnProfile_FreeFn_t free_profile = NULL;
    QnnBackend_FreeFn_t free_backend = NULL;
    Qnn_ProfileHandle_t the_profile = NULL;
    Qnn_BackendHandle_t the_backend = NULL;
    if (hb) {
      GetBe gb = (GetBe)dlsym(hb, "QnnInterface_getProviders");
      const QnnInterface_t **bl = NULL;
      if (gb(&bl, &n)) return 102;
      QNN_INTERFACE_VER_TYPE bt = bl[0]->QNN_INTERFACE_VER_NAME;
      Qnn_BackendHandle_t be = NULL;
      Qnn_ContextHandle_t ctx = NULL;
      Qnn_GraphHandle_t g = NULL;
      Qnn_ProfileHandle_t prof = NULL;
      if (bt.backendCreate(NULL, NULL, &be) || bt.contextCreate(be, NULL, NULL, &ctx) ||
          bt.graphCreate(ctx, "g", NULL, &g) || bt.profileCreate(be, QNN_PROFILE_LEVEL_BASIC, &prof)) return 103;
      /* An empty graph does not finalize; the failed call leaves the profile empty. */
      if (bt.graphFinalize(g, prof, NULL) == QNN_SUCCESS) return 104;
      const QnnProfile_EventId_t *ids = NULL;
      uint32_t ne = 7;
      if (bt.profileGetEvents(prof, &ids, &ne) || ne != 0) return 105;
      if (bt.contextFree(ctx, prof)) return 106;
      if (bt.profileGetEvents(prof, &ids, &ne) || ne != 1 || bt.profileGetEventData(ids[0], &ev)) return 107;
      free_profile = bt.profileFree;
      free_backend = bt.backendFree;
      the_profile = prof;
      the_backend = be;
    }
    struct QnnSystemProfile_ProfileEventV1_t_ { QnnSystemProfile_EventDataType_t type;
      union { QnnProfile_EventData_t eventData; QnnProfile_ExtendedEventData_t x; } u;
      void *sub; uint32_t numSub; } sev;
    memset(&sev, 0, sizeof sev);
    sev.type = QNN_SYSTEM_PROFILE_EVENT_DATA;
    sev.u.eventData = ev;
    QnnSystemProfile_ProfileData_t pd;
    memset(&pd, 0, sizeof pd);
    pd.version = QNN_SYSTEM_PROFILE_DATA_VERSION_1;
    pd.v1.header.methodType = QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_DEINIT;
    pd.v1.profilingEvents = (QnnSystemProfile_ProfileEventV1_t *)&sev;
    pd.v1.numProfilingEvents = 1;
    const QnnSystemProfile_ProfileData_t *list[1] = {&pd};
    if (st.systemProfileSerializeEventData(th, list, 1) || st.systemProfileFreeSerializationTarget(th)) return 109;
    /* The event's identifier belongs to the profile: free it only now. */
    if (hb && (free_profile(the_profile) || free_backend(the_backend))) return 108;
    QnnSystemContext_Handle_t sc = NULL;
    Qnn_ErrorHandle_t created = st.systemContextCreate(&sc);
    char junk[256];
    memset(junk, 0x5a, sizeof junk);
    const QnnSystemContext_BinaryInfo_t *info = NULL;
    Qnn_ContextBinarySize_t info_size = 0;
    Qnn_ErrorHandle_t inspected = st.systemContextGetBinaryInfo(sc, junk, sizeof junk, &info, &info_size);
    printf("round %d context %lu info %lu free %lu\n", r, (unsigned long)created, (unsigned long)inspected,
           (unsigned long)st.systemContextFree(sc));
    void *const *slots = (void *const *)&s->QNN_SYSTEM_INTERFACE_VER_NAME;
    Qnn_ErrorHandle_t (*extra)(void) = (Qnn_ErrorHandle_t (*)(void))slots[20];
    printf("round %d slot20 %lu\n", r, (unsigned long)extra());
    if (hb) dlclose(hb);
    dlclose(hs);
  }
  printf("done\n");
  return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    d = tmp_path_factory.mktemp("sysprobe")
    (d / "probe.c").write_text(PROBE_C)
    exe = d / "probe"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(INCLUDE), str(d / "probe.c"), "-o", str(exe),
                    "-ldl"], check=True)
    return exe


def run_probe(probe: Path, out: Path, backend: bool = True, rounds: int = 1, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
    full.update(env)
    return subprocess.run([str(probe), str(LIB), str(BACKEND) if backend else "-", str(out), str(rounds)],
                          capture_output=True, text=True, env=full, timeout=300)


def test_c_app_loads_system_library_alone(probe, tmp_path):
    r = run_probe(probe, tmp_path, backend=False)
    assert r.returncode == 0, f"probe failed ({r.returncode}): {r.stdout} {r.stderr}"
    assert "system QNNEMU_SYSTEM 1.15.0" in r.stdout
    assert f"context 0 info {Q.QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY} free 0" in r.stdout, \
        "a system context refuses a buffer that is no context binary, from C"
    assert f"slot20 {UNSUPPORTED}" in r.stdout, "padding slots answer UNSUPPORTED_FEATURE"
    _, recs = read_profile_log(str(tmp_path / "round0_qnn.log"))
    assert recs[0]["header"]["methodTypeName"] == "BACKEND_DEINIT"


@pytest.mark.skipif(not BACKEND.exists(), reason="libQnnHtpEmu.so is not built")
def test_c_app_loads_both_libraries_repeatedly(probe, tmp_path):
    """Both cffi-embedded libraries in one interpreter, either loaded first, loaded and unloaded
    four times; the backend's profile events go through the System library into a file."""
    r = run_probe(probe, tmp_path, backend=True, rounds=4)
    assert r.returncode == 0, f"probe failed ({r.returncode}): {r.stdout} {r.stderr}"
    assert r.stdout.count("system QNNEMU_SYSTEM 1.15.0") == 4 and "done" in r.stdout
    for i in range(4):
        _, recs = read_profile_log(str(tmp_path / f"round{i}_qnn.log"))
        [event] = recs[0]["events"]
        assert (event["typeName"], event["identifier"]) == ("DEINIT", "QNN (deinit) time"), \
            "the backend's contextFree event, serialized"


@pytest.mark.parametrize("value,expect", [("1.20.3", "1.20.3"), ("1.7", "1.7.0")])
def test_system_api_version_override(probe, tmp_path, value, expect):
    r = run_probe(probe, tmp_path, backend=False, QNNEMU_SYSTEM_API_VERSION=value)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"system QNNEMU_SYSTEM {expect}" in r.stdout


@pytest.mark.parametrize("value", ["2.15", "1.6", "x"])
def test_bad_system_api_version_fails_the_load(probe, tmp_path, value):
    r = run_probe(probe, tmp_path, backend=False, QNNEMU_SYSTEM_API_VERSION=value)
    assert r.returncode == 100, r.stdout + r.stderr
    assert f"system rc {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES} n 0" in r.stdout, "never success without a table"


def test_python_can_load_system_library_after_backend():
    """In this process the backend may already be loaded (tests/abi.py): the System library
    joins the same interpreter, and both keep working."""
    import abi
    if not abi.library_available():
        pytest.skip("libQnnHtpEmu.so is not built")
    abi.table()
    assert provider().systemApiVersion.minor == 15
    code, be = abi.create("backendCreate", abi.NULL, abi.NULL)
    assert code == Q.QNN_SUCCESS and abi.call("backendFree", abi.vp(be)) == Q.QNN_SUCCESS
