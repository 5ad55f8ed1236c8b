"""Library layout (QNN HTP backend documentation, "HTP Session & Artifact Usage Guidelines":
"Unsupported Library Use"): a second copy of the backend library loaded from another directory.

The document: QnnBackend_registerOpPackage, QnnBackend_validateOpConfig, QnnContext_create,
QnnDevice_create and QnnGraph_create return QNN_COMMON_ERROR_LOADING_BINARIES.  The vendor's
x86-64 libQnnHtp.so runs every one of them through a second copy (``test_vendor_second_copy``, in
a subprocess: its copies stay loaded), so qnnemu accepts them too and warns,
``QNNEMU-library-second-copy`` (qnnemu/abi/library_copies.py, csrc/loader.c): the copy's provider
table is its own (before: the very table of the first copy, so nothing could tell the calls apart).

The copies are loaded like an application would (cffi dlopen, RTLD_LOCAL by default), the first
being the library's own path (tests/abi.py loads it first).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import abi
import pytest
from abi import NULL, Library, LogRecorder, op_config, tensor, vp
from vendor import vendor_env, vendor_library

from qnnemu.headers import Q

RULE = "QNNEMU-library-second-copy"
GUARDED = ("deviceCreate", "contextCreate", "graphCreate", "backendValidateOpConfig", "backendRegisterOpPackage")


def guarded_calls(lib: Library, rec: LogRecorder) -> dict[str, tuple[int, list[tuple[int, str]]]]:
    """Each of the five guarded entries once on ``lib`` (a fresh logger, backend, device, context):
    entry -> (its code, the log records of that call alone)."""
    keep: list = []
    code, log = lib.create("logCreate", rec.callback, Q.QNN_LOG_LEVEL_WARN)
    assert code == Q.QNN_SUCCESS, f"{lib.path}: logCreate returned {code}"
    code, be = lib.create("backendCreate", vp(log), NULL)
    assert code == Q.QNN_SUCCESS, f"{lib.path}: backendCreate returned {code}"
    out: dict[str, tuple[int, list]] = {}

    def step(name, fn):
        rec.clear()
        result = fn()
        code, handle = result if isinstance(result, tuple) else (result, 0)
        out[name] = (code, list(rec.records))
        return handle

    dev = step("deviceCreate", lambda: lib.create("deviceCreate", vp(log), NULL))
    ctx = step("contextCreate", lambda: lib.create("contextCreate", vp(be), vp(dev), NULL))
    step("graphCreate", lambda: lib.create("graphCreate", vp(ctx), abi.cstr("g", keep), NULL))
    x, y = tensor("x", (2, 3)), tensor("y", (2, 3), type_=Q.QNN_TENSOR_TYPE_APP_READ)
    op = op_config("r", "Relu", [x], [y])
    step("backendValidateOpConfig", lambda: lib.call("backendValidateOpConfig", vp(be), op))
    step("backendRegisterOpPackage",
         lambda: lib.call("backendRegisterOpPackage", vp(be), abi.cstr("/nonexistent/libOpPackage.so", keep),
                          abi.cstr("Provider", keep), NULL))
    lib.call("contextFree", vp(ctx), NULL)
    lib.call("deviceFree", vp(dev))
    lib.call("backendFree", vp(be))
    lib.call("logFree", vp(log))
    return out


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    first = abi.library()          # the library at its own path: the first copy of this process
    directory = tmp_path_factory.mktemp("second-copy")
    copy = directory / "libQnnHtp.so"
    shutil.copy(abi.library_path(), copy)
    return first, Library(str(copy))


def test_second_copy_has_its_own_table(copies):
    first, second = copies
    assert first.table != second.table, "a second copy hands out a provider table of its own"
    assert first.table.graphExecute == second.table.graphExecute, "... forwarding to the same entries"
    assert first.table.deviceCreate != second.table.deviceCreate, "... except the five guarded ones"


def test_second_copy_warns_on_the_guarded_entries(copies):
    first, second = copies
    rec = LogRecorder()
    ours = guarded_calls(first, rec)
    for name, (_code, records) in ours.items():
        assert not [m for _, m in records if RULE in m], f"{name} through the first copy: no warning ({records})"
    theirs = guarded_calls(second, rec)
    for name in GUARDED:
        code, records = theirs[name]
        rec.records[:] = records
        rec.assert_warning(code, RULE, name, "library", want_code=ours[name][0])
        text = [m for _, m in records if RULE in m][-1]
        assert str(second.path) in text and abi.library_path() in text, \
            f"{name}: the warning names the second copy and the first: {text}"


def test_symlink_is_the_same_copy(tmp_path):
    """A symbolic link resolves to the library itself: the same copy, the same table."""
    link = tmp_path / "libQnnHtp.so"
    link.symlink_to(abi.library_path())
    assert Library(str(link)).table == abi.library().table, "a symlink loads the same library"


_VENDOR_PROBE = """
import shutil, sys, tempfile, os
sys.path.insert(0, sys.argv[1])
import abi
from test_library_layout import guarded_calls
from abi import Library, LogRecorder
copy = os.path.join(tempfile.mkdtemp(prefix="vendor-copy-"), "libQnnHtp.so")
shutil.copy(sys.argv[2], copy)
first, second = Library(sys.argv[2]), Library(copy)
rec = LogRecorder()
print("tables", int(first.table != second.table))
for which, lib in (("first", first), ("second", second)):
    for name, (code, _) in guarded_calls(lib, rec).items():
        print(which, name, code)
"""


def test_vendor_second_copy():
    """The vendor's libQnnHtp.so copied to another directory and loaded beside the original: its
    own table, and every guarded call answers as through the first copy (no
    QNN_COMMON_ERROR_LOADING_BINARIES on x86-64)."""
    library = vendor_library()
    if library is None:
        pytest.skip("onnxruntime_qnn (the vendor's libQnnHtp.so) is not installed")
    here = str(Path(__file__).resolve().parent)
    proc = subprocess.run([sys.executable, "-c", _VENDOR_PROBE, here, str(library)], env=vendor_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"vendor probe failed: {proc.stderr[-2000:]}"
    lines = [line.split() for line in proc.stdout.splitlines() if line.startswith(("first ", "second ", "tables "))]
    codes = {(w, n): int(c) for w, n, c in (line for line in lines if len(line) == 3)}
    assert ["tables", "1"] in lines, f"the vendor's copy has a table of its own: {proc.stdout}"
    for name in GUARDED:
        assert codes[("second", name)] == codes[("first", name)], \
            f"vendor {name}: through the second copy {codes[('second', name)]}, the first {codes[('first', name)]}"
        assert codes[("second", name)] != Q.QNN_COMMON_ERROR_LOADING_BINARIES, f"vendor {name}: no LOADING_BINARIES"
    assert all(codes[("second", n)] == Q.QNN_SUCCESS for n in GUARDED if n != "backendRegisterOpPackage"), \
        f"vendor: the four creating / validating calls succeed through the copy: {codes}"


_GLOBAL_FIRST = """
import ctypes, shutil, sys, tempfile, os
sys.path.insert(0, sys.argv[1])
import abi
from abi import Library
ctypes.CDLL(sys.argv[2], mode=ctypes.RTLD_GLOBAL)      # as ONNX Runtime loads a backend
copy = os.path.join(tempfile.mkdtemp(prefix="global-first-"), "libQnnHtp.so")
shutil.copy(sys.argv[2], copy)
first, second = Library(sys.argv[2]), Library(copy)
print("own-table", int(first.table != second.table))
"""


def test_copy_after_a_global_first_copy_knows_its_own_path():
    """The first copy loaded RTLD_GLOBAL (ONNX Runtime's way): the second copy's loader must not
    take the first copy's exported QnnInterface_getProviders for its own location (it did: it
    then registered as the first copy and handed out the shared table)."""
    here = str(Path(__file__).resolve().parent)
    proc = subprocess.run([sys.executable, "-c", _GLOBAL_FIRST, here, abi.library_path()], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"probe failed: {proc.stderr[-2000:]}"
    assert "own-table 1" in proc.stdout, f"the copy hands out its own table: {proc.stdout}"
