"""libQnnHtpEmu.so as a library (QnnInterface.h QnnInterface_getProviders): exports, loading
from C and from Python, failure to initialise, version negotiation, the padded table, and
that a Python exception inside an entry never comes back as QNN_SUCCESS.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import qnnemu
from qnnemu.headers import Q

LIB = Path(qnnemu.backend_library_path())
INCLUDE = Path(qnnemu.include_dir()) / "QNN"

pytestmark = [
    pytest.mark.skipif(not LIB.exists(), reason="libQnnHtpEmu.so is not built (pip install -e .)"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "QnnInterface.h"
/* Prints the provider and calls one padded slot; exit code = getProviders' result (mod 256). */
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return 200; }
  Qnn_ErrorHandle_t (*get)(const QnnInterface_t ***, uint32_t *) =
      (Qnn_ErrorHandle_t (*)(const QnnInterface_t ***, uint32_t *))dlsym(h, "QnnInterface_getProviders");
  const QnnInterface_t **list = NULL;
  uint32_t n = 0;
  if (get(NULL, &n) == 0) { printf("NULL providerList accepted\n"); return 201; }
  Qnn_ErrorHandle_t rc = get(&list, &n);
  printf("rc %lu n %u\n", (unsigned long)rc, n);
  if (rc) return 100;
  const QnnInterface_t *p = list[0];
  printf("id %u name %s core %u.%u.%u htp %u.%u.%u\n", p->backendId, p->providerName,
         p->apiVersion.coreApiVersion.major, p->apiVersion.coreApiVersion.minor,
         p->apiVersion.coreApiVersion.patch, p->apiVersion.backendApiVersion.major,
         p->apiVersion.backendApiVersion.minor, p->apiVersion.backendApiVersion.patch);
  /* A client built against newer headers copies more slots: they must answer NOT_SUPPORTED. */
  void *const *slots = (void *const *)&p->QNN_INTERFACE_VER_NAME;
  for (int i = 75; i < 79; i++) {
    Qnn_ErrorHandle_t (*extra)(void) = (Qnn_ErrorHandle_t (*)(void))slots[i];
    printf("slot %d -> %lu\n", i, (unsigned long)extra());
  }
  const char *id = NULL;
  p->QNN_INTERFACE_VER_NAME.backendGetBuildId(&id);
  printf("build %s\n", id);
  return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("probe")
    (d / "probe.c").write_text(PROBE_C)
    exe = d / "probe"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(INCLUDE), str(d / "probe.c"), "-o", str(exe),
                    "-ldl"], check=True)
    return exe


def run_probe(probe: Path, lib: Path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
    full.update(env)
    return subprocess.run([str(probe), str(lib)], capture_output=True, text=True, env=full, timeout=120)


def test_only_the_entry_point_is_exported():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIB)], capture_output=True, text=True, check=True).stdout
    names = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert names == ["QnnInterface_getProviders"], f"exported symbols are only the entry point: {names}"


def test_c_program_loads_with_rtld_local(probe):
    r = run_probe(probe, LIB)
    assert r.returncode == 0, f"probe exit 0 loading RTLD_LOCAL; stdout={r.stdout} stderr={r.stderr}"
    assert "id 6 name QNNEMU_HTP core 2.40.0 htp 5.50.0" in r.stdout, f"provider reported: {r.stdout}"
    for slot in range(75, 79):
        assert f"slot {slot} -> {Q.QNN_COMMON_ERROR_NOT_SUPPORTED}" in r.stdout, \
            f"padded slot {slot} answers QNN_COMMON_ERROR_NOT_SUPPORTED: {r.stdout}"
    assert "build v2.50.0." in r.stdout, f"build id has the vMAJOR.MINOR.PATCH.BUILD form: {r.stdout}"


@pytest.mark.parametrize("version,expect", [("2.32", "core 2.32.0"), ("2.35.1", "core 2.35.1")])
def test_core_api_version_override(probe, version, expect):
    r = run_probe(probe, LIB, QNNEMU_CORE_API_VERSION=version)
    assert r.returncode == 0 and expect in r.stdout, f"QNNEMU_CORE_API_VERSION={version} -> {expect}: {r.stdout}"


@pytest.mark.parametrize("version", ["3.1", "2.31", "two"])
def test_bad_core_api_version_fails_the_load(probe, version):
    r = run_probe(probe, LIB, QNNEMU_CORE_API_VERSION=version)
    assert r.returncode == 100, f"QNNEMU_CORE_API_VERSION={version} makes getProviders fail: {r.stdout}"
    assert f"rc {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES} n 0" in r.stdout, \
        f"the failure is QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES with no providers: {r.stdout}"


def test_unimportable_package_is_an_error_not_success(probe, tmp_path):
    """cffi returns 0 (QNN_SUCCESS) when its embedded init fails; the C entry point must not."""
    fake = tmp_path / "site" / "qnnemu"
    (fake / "lib").mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('qnnemu deliberately broken for this test')\n")
    shutil.copy(LIB, fake / "lib" / "libQnnHtpEmu.so")
    r = run_probe(probe, fake / "lib" / "libQnnHtpEmu.so")
    assert r.returncode == 100, f"getProviders fails when qnnemu cannot be imported: {r.stdout} {r.stderr}"
    assert f"rc {Q.QNN_COMMON_ERROR_LOADING_BINARIES} n 0" in r.stdout, \
        f"the failure is QNN_COMMON_ERROR_LOADING_BINARIES: {r.stdout}"


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_loads_into_a_python_process_through_ctypes():
    r = _python(f"""
        import ctypes
        lib = ctypes.CDLL({str(LIB)!r})
        plist = ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_uint32()
        rc = lib.QnnInterface_getProviders(ctypes.byref(plist), ctypes.byref(n))
        print("rc", rc, "n", n.value)
    """)
    assert "rc 0 n 1" in r.stdout, f"ctypes load in a running interpreter: {r.stdout} {r.stderr}"


def test_baked_version_mismatch_is_refused():
    r = _python(f"""
        import ctypes, qnnemu._version
        qnnemu._version.__version__ = "9.9.9"
        lib = ctypes.CDLL({str(LIB)!r})
        plist = ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_uint32()
        print("rc", lib.QnnInterface_getProviders(ctypes.byref(plist), ctypes.byref(n)), "n", n.value)
    """)
    assert f"rc {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES} n 0" in r.stdout, \
        f"a package version other than the baked one is refused: {r.stdout} {r.stderr}"


def test_python_exception_in_an_entry_is_not_success():
    """An unexpected exception inside def_extern returns QNN_COMMON_ERROR_GENERAL and is logged."""
    r = _python(f"""
        import cffi, qnnemu
        from qnnemu.headers import cdef
        from qnnemu.core import backend
        ffi = cffi.FFI(); ffi.cdef(cdef())
        ffi.cdef("int vsnprintf(char *, size_t, const char *, void *);")
        libc = ffi.dlopen(None)
        lib = ffi.dlopen({str(LIB)!r})
        plist = ffi.new("QnnInterface_t ***"); n = ffi.new("uint32_t *")
        assert lib.QnnInterface_getProviders(ffi.cast("const QnnInterface_t ***", plist), n) == 0
        t = plist[0][0].v2_39
        seen = []
        @ffi.callback("void(const char *, QnnLog_Level_t, uint64_t, void *)")
        def cb(fmt, level, ts, args):
            buf = ffi.new("char[4096]"); libc.vsnprintf(buf, 4096, fmt, args); seen.append(ffi.string(buf).decode())
        log = ffi.new("Qnn_LogHandle_t *")
        assert t.logCreate(ffi.cast("QnnLog_Callback_t", cb), 5, log) == 0
        def boom(*a, **k): raise RuntimeError("injected failure")
        backend.Backend.__init__ = boom
        be = ffi.new("Qnn_BackendHandle_t *")
        print("rc", t.backendCreate(log[0], ffi.NULL, be))
        print("logged", any("backendCreate: internal error" in s and "injected failure" in s for s in seen))
    """)
    assert f"rc {Q.QNN_COMMON_ERROR_GENERAL}" in r.stdout, f"exception -> QNN_COMMON_ERROR_GENERAL: {r.stdout} {r.stderr}"
    assert "logged True" in r.stdout, f"the exception was logged through the app's QnnLog callback: {r.stdout}"
