"""libQnnHtpEmu.so as a library (QnnInterface.h QnnInterface_getProviders): exports, loading
from C and from Python, failure to initialise, version negotiation, the padded table, and
that a Python exception inside an entry never comes back as QNN_SUCCESS.

Portability: the built files hold nothing of the build machine (no RUNPATH, no DT_NEEDED on
libpython or libcdsprpc, no build paths); the C programs here run with no Python hint in their
environment (the library finds its interpreter from its own location); a copy renamed
libQnnHtp.so and a symlink load; a copy that cannot find the package, a bad QNNEMU_PYTHONHOME
and a package of another version fail with one "qnnemu: " line on stderr (no logger exists
yet) and nothing on stdout.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
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
  if (rc) {
    /* A failed load answers the same again, without repeating its message. */
    printf("again %lu\n", (unsigned long)get(&list, &n));
    return 100;
  }
  /* The backend brought our FastRPC library in: apps dlopen it by its soname. */
  printf("rpcmem %d\n", dlopen("libcdsprpc.so", RTLD_NOW | RTLD_NOLOAD) != NULL);
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


def clean_env(**env) -> dict[str, str]:
    """An app's environment without any Python hint (no PYTHONPATH, PYTHONHOME, VIRTUAL_ENV,
    QNNEMU_*), plus ``env``."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("QNNEMU_")}
    full.update(env)
    return full


def run_probe(probe: Path, lib: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(probe), str(lib)], capture_output=True, text=True, env=clean_env(**env),
                          timeout=120)


# The directory holding the package being tested (a clone, or site-packages).
PACKAGE_PARENT = str(Path(qnnemu.__file__).resolve().parent.parent)


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
    r = run_probe(probe, fake / "lib" / "libQnnHtpEmu.so", QNNEMU_PYTHONHOME=sys.prefix)
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
    assert f"rc {Q.QNN_COMMON_ERROR_GENERAL}" in r.stdout, \
        f"exception -> QNN_COMMON_ERROR_GENERAL: {r.stdout} {r.stderr}"
    assert "logged True" in r.stdout, f"the exception was logged through the app's QnnLog callback: {r.stdout}"


# ------------------------------------------------------------------------------- portability
def _built_files() -> list[Path]:
    pkg = Path(qnnemu.__file__).resolve().parent
    return sorted(LIB.parent.glob("*.so")) + sorted(pkg.glob("_kernels*.so"))


def _build_machine_paths() -> set[str]:
    """Absolute paths of this machine that a build could bake in (the tree, the interpreter's
    prefixes, site-packages and headers); bare /usr-like prefixes are too short to search for."""
    paths = {str(Path(qnnemu.__file__).resolve().parent.parent), sys.prefix, sys.base_prefix,
             sys.exec_prefix, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
             sysconfig.get_paths()["include"], str(sysconfig.get_config_var("LIBDIR"))}
    return {p for p in paths if p and p.count("/") >= 2}


@pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("strings") is None, reason="needs binutils")
def test_built_files_hold_nothing_of_the_build_machine():
    """No RUNPATH/RPATH (at most $ORIGIN), no DT_NEEDED but libc's, no build paths in any string."""
    files = _built_files()
    names = {f.name for f in files}
    assert {"libQnnHtpEmu.so", "libQnnSystem.so", "libcdsprpc.so", "_qnnemu_htp_abi.so",
            "_qnnemu_system_abi.so"} <= names, f"the loaders, the cffi modules and libcdsprpc.so are built: {names}"
    # ld-linux: __tls_get_addr, for the thread-local state of the fork handlers (fork_python.h)
    allowed_needed = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"}
    machine = _build_machine_paths()
    for f in files:
        dyn = subprocess.run(["readelf", "-d", str(f)], capture_output=True, text=True, check=True).stdout
        assert "(RPATH)" not in dyn, f"{f.name}: no DT_RPATH: {dyn}"
        runpath = re.findall(r"\(RUNPATH\)\s+Library runpath: \[(.*)\]", dyn)
        assert runpath in ([], ["$ORIGIN"]), f"{f.name}: RUNPATH is $ORIGIN at most, got {runpath}"
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn))
        assert needed <= allowed_needed, \
            f"{f.name}: DT_NEEDED only libc's family (no libpython, no libcdsprpc): {needed}"
        strings = subprocess.run(["strings", "-n", "4", str(f)], capture_output=True, text=True, check=True).stdout
        baked = sorted(p for p in machine if p in strings)
        assert not baked, f"{f.name}: no path of the build machine baked in: {baked}"


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils")
def test_loaders_use_no_python_symbol():
    """The loaders look every Python function up at run time (after loading libpython themselves)."""
    for lib in (LIB, Path(qnnemu.system_library_path())):
        undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True,
                                   check=True).stdout.split()
        python = [s for s in undefined if s.startswith(("Py", "_Py"))]
        assert not python, f"{lib.name} references no Python symbol at load time: {python}"


def test_renamed_copy_and_symlink_load(probe, tmp_path):
    """`cp libQnnHtpEmu.so app/libQnnHtp.so` and a symlink of that name both load; the symlink
    finds everything from where it points, the copy through QNNEMU_PYTHONHOME/QNNEMU_PYTHONPATH."""
    link = tmp_path / "linked" / "libQnnHtp.so"
    link.parent.mkdir()
    link.symlink_to(LIB)
    r = run_probe(probe, link)
    assert r.returncode == 0 and "name QNNEMU_HTP" in r.stdout, f"loaded through a symlink: {r.stdout} {r.stderr}"
    assert "rpcmem 1" in r.stdout, f"libcdsprpc.so is loaded once getProviders answered: {r.stdout}"
    copy = tmp_path / "app" / "libQnnHtp.so"
    copy.parent.mkdir()
    shutil.copy(LIB, copy)
    r = run_probe(probe, copy, QNNEMU_PYTHONHOME=sys.prefix, QNNEMU_PYTHONPATH=PACKAGE_PARENT)
    assert r.returncode == 0 and "name QNNEMU_HTP" in r.stdout, f"a renamed copy loads: {r.stdout} {r.stderr}"
    assert "rpcmem 1" in r.stdout, f"the copy loads the package's libcdsprpc.so: {r.stdout}"
    assert "qnnemu:" not in r.stderr, f"no loader message when all is well: {r.stderr}"


def test_renamed_copy_in_a_python_process(tmp_path):
    """In a Python process (ctypes) the running interpreter is used; the copy finds the package
    through it."""
    copy = tmp_path / "libQnnHtp.so"
    shutil.copy(LIB, copy)
    r = _python(f"""
        import ctypes
        lib = ctypes.CDLL({str(copy)!r})
        plist = ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_uint32()
        print("rc", lib.QnnInterface_getProviders(ctypes.byref(plist), ctypes.byref(n)), "n", n.value)
    """)
    assert "rc 0 n 1" in r.stdout, f"a copy loads through ctypes: {r.stdout} {r.stderr}"


def _one_loader_line(r: subprocess.CompletedProcess, library: Path) -> str:
    lines = r.stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith("qnnemu:")]
    assert len(ours) == 1 and lines == ours, f"exactly one stderr line, the loader's: {r.stderr!r}"
    assert ours[0].startswith(f"qnnemu: {library}: "), f"it names the library: {ours[0]}"
    assert "qnnemu" not in r.stdout.replace("QNNEMU_HTP", ""), f"nothing from the library on stdout: {r.stdout}"
    return ours[0]


def test_copy_without_the_package_says_why_once(probe, tmp_path):
    """A copy whose interpreter has no qnnemu: QNN_COMMON_ERROR_LOADING_BINARIES and one line on
    stderr saying what was tried and how to choose another Python (not repeated by a retry)."""
    venv = tmp_path / "empty-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    copy = tmp_path / "app" / "libQnnHtp.so"
    copy.parent.mkdir()
    shutil.copy(LIB, copy)
    r = run_probe(probe, copy, QNNEMU_PYTHONHOME=str(venv))
    assert r.returncode == 100, f"getProviders fails: {r.stdout} {r.stderr}"
    code = Q.QNN_COMMON_ERROR_LOADING_BINARIES
    assert f"rc {code} n 0" in r.stdout and f"again {code}" in r.stdout, \
        f"QNN_COMMON_ERROR_LOADING_BINARIES, twice: {r.stdout}"
    line = _one_loader_line(r, copy)
    assert "cannot import the qnnemu package" in line and "ModuleNotFoundError" in line, f"why: {line}"
    assert f"at {venv}" in line and "Python found via QNNEMU_PYTHONHOME" in line and "QNNEMU_PYTHONPATH" in line, \
        f"which Python was used and how to choose another: {line}"


@pytest.mark.parametrize("case", ["missing", "not-python", "other-version"])
def test_bad_qnnemu_pythonhome_says_why(probe, tmp_path, case):
    home = tmp_path / "home"
    if case == "not-python":
        home.mkdir()
    elif case == "other-version":
        home.mkdir()
        (home / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).parent}\nversion = 3.99.1\n")
    r = run_probe(probe, LIB, QNNEMU_PYTHONHOME=str(home))
    assert r.returncode == 100 and f"rc {Q.QNN_COMMON_ERROR_LOADING_BINARIES} n 0" in r.stdout, \
        f"QNNEMU_PYTHONHOME={case}: LOADING_BINARIES: {r.stdout} {r.stderr}"
    line = _one_loader_line(r, LIB)
    expected = (f"is Python 3.99.1; this library is built for Python {sys.version_info.major}."
                f"{sys.version_info.minor}" if case == "other-version"
                else "(QNNEMU_PYTHONHOME) is neither a venv (pyvenv.cfg) nor a Python")
    assert expected in line and str(home) in line, f"QNNEMU_PYTHONHOME={case}: {line}"


@pytest.mark.parametrize("venv_kind", ["with-dependencies", "empty"])
def test_in_tree_build_uses_the_interpreter_that_built_it(probe, tmp_path, venv_kind):
    """A clone's qnnemu/lib holds inplace-python.txt, the interpreter of its in-tree build (here a
    venv): a C app with no hint uses it (a venv lacking numpy proves which one was taken)."""
    clone = tmp_path / "clone"
    shutil.copytree(Path(qnnemu.__file__).resolve().parent, clone / "qnnemu",
                    ignore=shutil.ignore_patterns("__pycache__", "inplace-python.txt", "include"))
    shutil.copytree(qnnemu.include_dir(), clone / "include")  # where a clone keeps the headers
    venv = tmp_path / "venv"
    cmd = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
    if venv_kind == "with-dependencies":
        cmd.insert(-1, "--system-site-packages")  # numpy and cffi of the interpreter running the tests
    subprocess.run(cmd, check=True, timeout=120)
    if venv_kind == "with-dependencies":
        # --system-site-packages only reaches the base interpreter's packages; when the tests run
        # in a venv (README.md's test command) numpy and cffi are in that venv's: name their dirs
        import cffi
        import numpy
        site = next((venv / "lib").glob("python*/site-packages"))
        dirs = sorted({str(Path(m.__file__).resolve().parent.parent) for m in (numpy, cffi)})
        (site / "test_dependencies.pth").write_text("\n".join(dirs) + "\n")
    (clone / "qnnemu" / "lib" / "inplace-python.txt").write_text(f"{venv / 'bin' / 'python'}\n")
    lib = clone / "qnnemu" / "lib" / "libQnnHtpEmu.so"
    r = run_probe(probe, lib)
    if venv_kind == "with-dependencies":
        assert r.returncode == 0 and "name QNNEMU_HTP" in r.stdout and not r.stderr.strip(), \
            f"the in-tree library loads with the recorded venv: {r.stdout} {r.stderr}"
    else:
        assert r.returncode == 100, f"the recorded venv has no numpy: {r.stdout} {r.stderr}"
        line = _one_loader_line(r, lib)
        assert f"at {venv}: ModuleNotFoundError" in line and \
            "found via the interpreter of this in-tree build (inplace-python.txt)" in line, \
            f"the recorded venv was used: {line}"


def test_library_in_a_broken_venv_says_why(probe, tmp_path):
    """Installed in a venv whose base interpreter is gone: that is the error (no other Python is
    started instead)."""
    venv = tmp_path / "venv"
    pkg = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "qnnemu"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (venv / "pyvenv.cfg").write_text(f"home = {tmp_path / 'gone' / 'bin'}\n")
    lib = pkg / "lib" / "libQnnHtpEmu.so"
    shutil.copy(LIB, lib)
    r = run_probe(probe, lib)
    assert r.returncode == 100 and f"rc {Q.QNN_COMMON_ERROR_LOADING_BINARIES} n 0" in r.stdout, \
        f"LOADING_BINARIES: {r.stdout} {r.stderr}"
    line = _one_loader_line(r, lib)
    assert (f"the venv {venv} (found via the venv holding the library): its base interpreter's directory "
            f"{tmp_path / 'gone' / 'bin'} holds no Python") in line, f"why: {line}"


def test_package_of_another_version_says_why(probe, tmp_path):
    """The library's version is baked in; an importable package of another version is refused
    with QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES and the reason on the app's stderr."""
    site = tmp_path / "site"
    (site / "qnnemu" / "lib").mkdir(parents=True)
    (site / "qnnemu" / "__init__.py").write_text("")
    (site / "qnnemu" / "_version.py").write_text('__version__ = "9.9.9"\n')
    lib = site / "qnnemu" / "lib" / "libQnnHtpEmu.so"
    shutil.copy(LIB, lib)
    r = run_probe(probe, lib, QNNEMU_PYTHONHOME=sys.prefix)
    assert r.returncode == 100 and f"rc {Q.QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES} n 0" in r.stdout, \
        f"INCOMPATIBLE_BINARIES: {r.stdout} {r.stderr}"
    line = _one_loader_line(r, lib)
    assert (f"libQnnHtpEmu.so was built for qnnemu {qnnemu.__version__} but this Python imports qnnemu 9.9.9 "
            f"from {site / 'qnnemu'}; rebuild or reinstall so they match") in line, f"why: {line}"


RACE_C = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
typedef uint64_t (*get_fn)(const void ***, uint32_t *);
static pthread_barrier_t barrier;
/* dlopen a library, wait for the other thread, then call its getProviders. */
static void *load(void *arg) {
  const char **a = arg;
  void *h = dlopen(a[0], RTLD_NOW | RTLD_LOCAL);
  if (!h) { printf("dlopen failed: %s\n", dlerror()); return (void *)1; }
  get_fn get = (get_fn)dlsym(h, a[1]);
  const void **list;
  uint32_t n = 0;
  pthread_barrier_wait(&barrier);
  uint64_t rc = get(&list, &n);
  printf("%s rc %lu n %u\n", a[1], (unsigned long)rc, n);
  return (void *)(uintptr_t)(rc != 0 || n != 1);
}
int main(int argc, char **argv) {
  const char *backend[2] = {argv[1], "QnnInterface_getProviders"};
  const char *system[2] = {argv[2], "QnnSystemInterface_getProviders"};
  pthread_t t1, t2;
  void *r1, *r2;
  pthread_barrier_init(&barrier, NULL, 2);
  pthread_create(&t1, NULL, load, backend);
  pthread_create(&t2, NULL, load, system);
  pthread_join(t1, &r1);
  pthread_join(t2, &r2);
  return r1 || r2;
}
"""


def test_backend_and_system_library_started_at_once(tmp_path):
    """Two threads of a C app start the backend and the System library at the same moment: one
    interpreter is started (both loaders take cffi's start-up lock), both tables come back."""
    (tmp_path / "race.c").write_text(RACE_C)
    exe = tmp_path / "race"
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Werror", str(tmp_path / "race.c"), "-o", str(exe), "-ldl",
                    "-lpthread"], check=True)
    for attempt in range(5):
        r = subprocess.run([str(exe), str(LIB), qnnemu.system_library_path()], capture_output=True, text=True,
                           env=clean_env(), timeout=120)
        assert r.returncode == 0, \
            f"attempt {attempt}: both libraries start (exit {r.returncode}): {r.stdout} {r.stderr}"
        assert "QnnInterface_getProviders rc 0 n 1" in r.stdout and \
            "QnnSystemInterface_getProviders rc 0 n 1" in r.stdout, f"attempt {attempt}: {r.stdout}"
