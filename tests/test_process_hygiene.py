"""libQnnHtpEmu.so inside an application's process (QnnInterface.h through dlopen): fork() during a
QNN call, the application's locale and environment, and what the embedded interpreter may not do
to the process.

The C harness tests/c/process_hygiene.c is what an application does (threads, fork, setlocale);
it runs on our library, and on the vendor's libQnnHtp.so where the vendor is the reference.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import qnnemu
from vendor import vendor_dir, vendor_env, vendor_library

HERE = Path(__file__).resolve().parent
HARNESS_C = HERE / "c" / "process_hygiene.c"
LIB = Path(qnnemu.backend_library_path())
SYSTEM_LIB = Path(qnnemu.system_library_path())
INCLUDE = Path(qnnemu.include_dir()) / "QNN"

pytestmark = [
    pytest.mark.skipif(not LIB.exists(), reason="libQnnHtpEmu.so is not built (pip install -e .)"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("hygiene") / "process_hygiene"
    subprocess.run(["gcc", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", str(INCLUDE), str(HARNESS_C),
                    "-o", str(exe), "-ldl", "-lm", "-pthread"], check=True)
    return exe


def app_env(**changes) -> dict[str, str]:
    """The test process's environment without QNNEMU_* settings; ``None`` values remove a variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNNEMU_")}
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(harness: Path, *args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([str(harness), *map(str, args)], capture_output=True, text=True,
                          env=env if env is not None else app_env(), timeout=timeout)


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"


# ------------------------------------------------------------------------------------- fork
# numpy's OpenBLAS thread pool cannot be forked while a multi-threaded GEMM runs (its own
# pthread_atfork handler joins a busy worker: numpy alone, without qnnemu, hangs the same way);
# the graphs here are small, and single-threaded BLAS keeps the test about our library only.
FORK_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def test_fork_while_another_thread_executes_leaves_a_usable_child(harness):
    """Each fork happens while another thread is inside graphExecute; each child creates a
    backend, context and graph, executes it, and executes the graph the parent's thread was
    executing (its lock was held at fork time).  Before the atfork handlers every child
    blocked forever in take_gil."""
    proc = run(harness, "fork", LIB, 6, env=app_env(**FORK_ENV))
    assert proc.returncode == 0, f"every child must create a backend and execute: {describe(proc)}"
    m = re.search(r"forks (\d+) ok (\d+) inside_call (\d+)", proc.stdout)
    assert m and m.group(1) == m.group(2) == "6", f"6 forks, 6 usable children: {proc.stdout}"
    assert int(m.group(3)) >= 3, f"most forks happened while the other thread was inside a call: {proc.stdout}"


def test_fork_with_the_system_library_loaded_too(harness):
    """Both libraries install fork handlers; the first to run takes the GIL, the other sees it
    held and leaves it alone (csrc/fork_python.h), and the child is usable."""
    proc = run(harness, "fork", LIB, 3, SYSTEM_LIB, env=app_env(**FORK_ENV))
    assert proc.returncode == 0 and "forks 3 ok 3" in proc.stdout, \
        f"3 usable children with libQnnSystem.so loaded as well: {describe(proc)}"


_PYTHON_FORK = textwrap.dedent("""
    import os, sys, threading
    import numpy as np
    from qnnemu.client import Backend

    def small_graph(be, name):
        g = be.context().graph(name)
        x = g.input("x", (8, 64), np.float32)
        w = g.static("w", np.full((16, 64), 0.5, np.float32))
        g.node("FullyConnected", [x, w], outputs=[("y", (8, 16), np.float32)], app_read=True)
        g.finalize()
        return g

    be = Backend(None)
    g = small_graph(be, "parent")
    x = np.ones((8, 64), np.float32)
    inside, stop = threading.Event(), threading.Event()

    def loop():
        while not stop.is_set():
            inside.set()
            g.execute({"x": x})

    t = threading.Thread(target=loop)
    t.start()
    inside.wait()
    results = []
    for i in range(4):
        pid = os.fork()
        if pid == 0:
            ok = small_graph(Backend(None), "child").execute({"x": x})["y"]
            again = g.execute({"x": x})["y"]
            os._exit(0 if np.allclose(ok, 32.0) and np.allclose(again, 32.0) else 1)
        results.append(os.waitpid(pid, 0)[1])
    stop.set()
    t.join()
    print("children", results)
    sys.exit(0 if results == [0, 0, 0, 0] else 1)
""")


def test_os_fork_in_a_python_application(tmp_path):
    """A Python application (ONNX Runtime in Python, a client script) forking with os.fork():
    Python prepares the interpreter itself, our handlers stay out of its way, and the
    package's locks are re-initialised in the child (qnnemu/core/forksafe.py), so the child
    executes a new graph and the graph whose lock the other thread held."""
    script = tmp_path / "fork.py"
    script.write_text(_PYTHON_FORK)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=app_env(**FORK_ENV))
    assert proc.returncode == 0, f"4 usable children after os.fork(): {describe(proc)}"


@pytest.mark.skipif(vendor_dir() is None, reason="needs onnxruntime_qnn (the vendor's libQnnHtp.so)")
def test_vendor_child_after_fork_is_not_usable(harness):
    """The vendor's x86 libQnnHtp.so is no reference here: its children block on their first
    call after fork() even when no call was running (its own worker threads).  Pinned so that
    a vendor release that fixes it is noticed."""
    env = {k: v for k, v in vendor_env().items() if not k.startswith("QNNEMU_")}
    env.update(FORK_ENV, PH_IDLE="1", PH_CHILD_TIMEOUT="5")
    proc = run(harness, "fork", vendor_library(), 1, env=env)
    assert "forks 1 ok 0" in proc.stdout, f"the vendor's child blocks (or fails) after fork: {describe(proc)}"


# ----------------------------------------------------------------------- locale, environ
@pytest.mark.parametrize("app_locale", [None, "C.UTF-8"], ids=["c-locale", "app-set-locale"])
def test_loading_leaves_locale_and_environment_alone(harness, app_locale):
    """With LANG and LC_* unset (a service, a container), loading and using the backend
    changes neither the application's setlocale() state nor its environment: before, Python's
    start-up set LC_CTYPE to C.UTF-8 and exported LC_CTYPE=C.UTF-8 to every child process."""
    env = app_env(LANG=None, LC_ALL=None, LC_CTYPE=None, PYTHONUTF8=None, PYTHONCOERCECLOCALE=None)
    args = ["locale", LIB] + ([app_locale] if app_locale else [])
    proc = run(harness, *args, env=env)
    assert "environ added" not in proc.stdout, f"loading the backend adds nothing to environ: {proc.stdout}"
    assert proc.returncode == 0 and "locale unchanged" in proc.stdout, \
        f"setlocale(LC_ALL, NULL) and environ are identical before and after: {describe(proc)}"


# ---------------------------------------------------------------------------------- handles
def test_freed_handles_cost_no_memory(qnn_abi):
    """Create/free cycles (a logger, a backend, a context) through the C ABI leave nothing
    behind: the handle table holds the live objects only (qnnemu/core/handles.py).  Before,
    the table of freed handles grew by ~190 bytes per cycle (3000 cycles: ~580 KB)."""
    import tracemalloc

    import abi
    from qnnemu.headers import Q

    def cycle():
        code, log = abi.create("logCreate", abi.NULL, Q.QNN_LOG_LEVEL_ERROR)
        assert code == Q.QNN_SUCCESS, f"logCreate returned {code}"
        code, be = abi.create("backendCreate", abi.vp(log), abi.NULL)
        assert code == Q.QNN_SUCCESS, f"backendCreate returned {code}"
        code, ctx = abi.create("contextCreate", abi.vp(be), abi.NULL, abi.NULL)
        assert code == Q.QNN_SUCCESS, f"contextCreate returned {code}"
        for name, handle in (("contextFree", ctx), ("backendFree", be), ("logFree", log)):
            args = (abi.vp(handle), abi.NULL) if name == "contextFree" else (abi.vp(handle),)
            assert abi.call(name, *args) == Q.QNN_SUCCESS, f"{name} of a live handle succeeds"
        return ctx

    for _ in range(200):   # warm: lazily built tables, interned strings
        cycle()
    n = 3000
    only_ours = [tracemalloc.Filter(True, "*qnnemu*")]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(only_ours)
        for _ in range(n):
            last = cycle()
        after = tracemalloc.take_snapshot().filter_traces(only_ours)
    finally:
        tracemalloc.stop()
    growth = sum(d.size_diff for d in after.compare_to(before, "filename"))
    assert growth / n < 4, f"memory held by qnnemu grows {growth / n:.1f} bytes per create/free cycle ({growth} B)"
    # ... and the freed handles are still recognised as freed (and as what they were).
    from qnnemu.core.handles import HANDLES
    assert HANDLES.freed_kind(last) == "Context", "a context freed 3000 cycles ago is still known as a freed Context"


def test_handle_table_recognises_freed_unknown_and_live_values():
    """The handle value carries its serial and kind: freed values of every kind are known as
    freed after many newer handles, values never issued (foreign, misaligned, past the last
    serial) are unknown; live handles are never reported freed."""
    from qnnemu.core.handles import HandleTable

    class Graph: ...

    class Context: ...

    table = HandleTable()
    g, c = table.new(Graph()), table.new(Context())
    table.release(g)
    newer = [table.new(Context()) for _ in range(1000)]
    for h in newer[:-1]:
        table.release(h)
    assert table.freed_kind(g) == "Graph", "a freed Graph handle stays known as a freed Graph"
    assert table.freed_kind(newer[0]) == "Context", "a freed Context handle is known as one"
    assert table.freed_kind(c) is None and table.freed_kind(newer[-1]) is None, "live handles are not freed"
    assert table.lookup(c) is not None and table.lookup(g) is None, "lookup finds live handles only"
    past_last = newer[-1] + 0x100
    for value in (0x1234, 0xDEAD0010, g + 8, past_last, 0x51EE0000 - 0x10):
        assert table.freed_kind(value) is None, f"0x{value:x} was never issued: unknown, not freed"
    assert len({*newer, g, c}) == 1002, "handle values are never reused"
    assert all(h % 16 == 0 for h in newer), "handle values are 16-byte aligned like pointers"
