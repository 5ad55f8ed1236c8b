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
from vendor import vendor_dir, vendor_env, vendor_library

import qnnemu

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
    env.update(FORK_ENV, PH_IDLE="1", PH_CHILD_TIMEOUT="2")
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
        # Two windows of n cycles: a leak grows in both; a one-off resize of the live-handle
        # dict (its size depends on how many handles earlier tests keep) lands in one at most.
        snaps = [tracemalloc.take_snapshot().filter_traces(only_ours)]
        for _ in range(2):
            for _ in range(n):
                last = cycle()
            snaps.append(tracemalloc.take_snapshot().filter_traces(only_ours))
    finally:
        tracemalloc.stop()
    growths = [sum(d.size_diff for d in b.compare_to(a, "filename")) for a, b in zip(snaps, snaps[1:])]
    growth = min(growths)
    assert growth / n < 4, f"memory held by qnnemu grows {growth / n:.1f} bytes per create/free cycle in both " \
                           f"windows of {n} cycles ({growths} B)"
    # ... and the freed handles are still recognised as freed (and as what they were).
    from qnnemu.core.handles import HANDLES
    assert HANDLES.freed_kind(last) == "Context", "a context freed 3000 cycles ago is still known as a freed Context"


def test_handle_table_recognises_freed_unknown_and_live_values():
    """The handle value carries its serial and kind: freed values of every kind are known as
    freed after many newer handles, values never issued (foreign, misaligned, past the last
    serial) are unknown; live handles are never reported freed."""
    from qnnemu.core.handles import FIRST_HANDLE, HandleTable

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
    for value in (0x1234, 0xDEAD0010, g + 8, past_last, FIRST_HANDLE - 0x10):
        assert table.freed_kind(value) is None, f"0x{value:x} was never issued: unknown, not freed"
    assert len({*newer, g, c}) == 1002, "handle values are never reused"
    assert all(h % 16 == 0 for h in newer), "handle values are 16-byte aligned like pointers"


# ------------------------------------------------------------------- numpy floating warnings
_DEGENERATE_SCALES = textwrap.dedent("""
    import json, logging
    import numpy as np
    from qnnemu.client import Backend
    from qnnemu.headers import Q

    routed = []
    class Keep(logging.Handler):
        def emit(self, record):
            routed.append(record.getMessage())
    logging.getLogger("qnnemu.numerics").addHandler(Keep())
    logging.getLogger("qnnemu.numerics").setLevel(logging.DEBUG)

    U8, U16, S32 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_32
    TINY = 1e-45   # the smallest float32 subnormal
    SPECIAL = np.array([[np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0]], np.float32)
    X = np.array([[10, 200, 128, 255], [0, 0, 0, 0]], np.uint8)
    out = {}

    def run(name, build, feeds):
        with Backend(None, log_level=None) as be:
            g = be.context().graph("g")
            build(g)
            g.finalize()
            out[name] = g.execute(feeds)["y"].tolist()

    def fc(wq, yq):
        def build(g):
            x = g.input("x", (2, 4), U8, quant=(0.05, -128))
            w = g.static("w", np.array([[130, 140, 120, 128]] * 3, np.uint8), dtype=U8, quant=wq)
            g.node("FullyConnected", [x, w], outputs=[("y", (2, 3), U8, yq)], app_read=True)
        return build

    def add(a_dt, aq, c_dt, cq, y_dt, yq):
        def build(g):
            a = g.input("a", (1, 6), a_dt, quant=aq)
            c = g.input("c", (1, 6), c_dt, quant=cq)
            g.node("ElementWiseAdd", [a, c], outputs=[("y", (1, 6), y_dt, yq)], app_read=True)
        return build

    # a discarded channel (its weight scale too small for float32 math)
    run("fc_dead_channel", fc({"axis": 0, "scales": [0.1, TINY, 0.1], "offsets": [-128] * 3}, (0.1, -128)), {"x": X})
    # an output scale whose reciprocal overflows float32
    run("fc_tiny_output", fc((0.1, -128), (TINY, -128)), {"x": X})
    ones = np.ones((1, 6), np.float32)
    run("add_nan_to_u8", add(np.float32, None, np.float32, None, U8, (0.1, -128)), {"a": SPECIAL, "c": ones})
    run("add_nan_to_u16", add(np.float32, None, np.float32, None, U16, (0.1, -30000)), {"a": SPECIAL, "c": ones})
    codes = np.array([[0, 1, 2, 65535, 40000, 30000]], np.uint16)
    run("add_u16_underflowing_inputs", add(U16, (TINY, 0), U16, (TINY, 0), U16, (1e30, 0)), {"a": codes, "c": codes})
    run("add_u8_tiny_output", add(U8, (0.1, -128), U8, (0.1, -128), U8, (TINY, -128)),
        {"a": np.array([[0, 10, 128, 255, 127, 129]], np.uint8), "c": np.full((1, 6), 128, np.uint8)})
    print(json.dumps({"out": out, "routed": len(routed)}))
""")


@pytest.mark.parametrize("engine", ["c", "python"])
def test_numpy_floating_warnings_never_reach_stderr(tmp_path, engine):
    """Degenerate scales and NaN/inf data used to print numpy RuntimeWarnings on the
    application's stderr (divide by zero / overflow in spec/quant.py, invalid casts).  Now the
    zero-scale paths give defined codes (a dead channel outputs its zero point, NaN the top code,
    overflowing reciprocals saturate) and whatever numpy still flags goes to the qnnemu.numerics
    logger: stderr stays empty with Python's default warning filters.  The same codes with the C
    engine (QNNEMU_ENGINE=c), whose steps raise no numpy events, and with the Python plan."""
    import json

    script = tmp_path / "degenerate.py"
    script.write_text(_DEGENERATE_SCALES)
    env = app_env(PYTHONWARNINGS=None, QNNEMU_ENGINE=engine)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"every degenerate graph executes: {describe(proc)}"
    assert proc.stderr == "", f"nothing reaches stderr (numpy warnings are routed to logging): {proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    out = result["out"]
    assert [row[1] for row in out["fc_dead_channel"]] == [128, 128], \
        f"the dead channel (weight scale 1e-45) outputs its zero point 128: {out['fc_dead_channel']}"
    assert out["fc_tiny_output"] == [[255, 255, 255], [0, 0, 0]], \
        f"an output scale of 1e-45 saturates by the accumulator's sign: {out['fc_tiny_output']}"
    assert out["add_nan_to_u8"] == [[255, 255, 0, 255, 0, 138]], \
        f"NaN -> top code, +-inf and +-1e38 saturate, 1.0 -> 138: {out['add_nan_to_u8']}"
    assert out["add_nan_to_u16"] == [[65535, 65535, 0, 65535, 0, 30010]], f"u16 likewise: {out['add_nan_to_u16']}"
    assert out["add_u16_underflowing_inputs"] == [[0] * 6], \
        f"inputs whose scale ratio underflows to 0 add to real 0: {out['add_u16_underflowing_inputs']}"
    y = out["add_u8_tiny_output"][0]
    assert [y[k] for k in (0, 1, 3, 4, 5)] == [0, 0, 255, 0, 255], \
        f"an output scale of 1e-45 saturates every non-zero sum by its sign: {y}"
    if engine == "python":
        assert result["routed"] > 0, "the floating-point events numpy still raises reach the qnnemu.numerics logger"


@pytest.mark.skipif(vendor_dir() is None, reason="needs onnxruntime_qnn (the vendor's libQnnHtp.so)")
@pytest.mark.parametrize("case", ["dead_channel", "nan_requantized"])
def test_degenerate_values_compute_as_the_vendor(case):
    """Where the vendor accepts a degenerate value, qnnemu gives its codes: a FullyConnected
    channel whose weight scale is too small for float32 (a discarded channel) outputs the zero
    point; a float result NaN requantizes to the top code (+-inf saturate)."""
    import numpy as np

    from qnnemu.client import Backend
    from qnnemu.headers import Q

    U8 = Q.QNN_DATATYPE_UFIXED_POINT_8

    def run(path):
        with Backend(path, log_level=None) as be:
            g = be.context().graph("g")
            if case == "dead_channel":
                x = g.input("x", (2, 4), U8, quant=(0.05, -128))
                w = g.static("w", np.array([[130, 140, 120, 128]] * 3, np.uint8), dtype=U8,
                             quant={"axis": 0, "scales": [0.1, 1e-45, 0.1], "offsets": [-128] * 3})
                g.node("FullyConnected", [x, w], outputs=[("y", (2, 3), U8, (0.1, -128))], app_read=True)
                feeds = {"x": np.array([[10, 200, 128, 255], [0, 0, 0, 0]], np.uint8)}
            else:
                a = g.input("a", (1, 6), np.float32)
                c = g.static("c", np.ones((1, 6), np.float32))
                g.node("ElementWiseAdd", [a, c], outputs=[("y", (1, 6), U8, (0.1, -128))], app_read=True)
                feeds = {"a": np.array([[np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0]], np.float32)}
            g.finalize()
            return g.execute(feeds)["y"].tolist()

    ours, theirs = run(None), run(str(vendor_library()))
    assert ours == theirs, f"{case}: qnnemu {ours} == vendor {theirs}"


def test_zero_scales_quantize_without_floating_point_errors():
    """Scales of exactly 0 (not accepted through tensorCreate*, but reachable inside the core,
    e.g. a per-channel scale underflowing to 0): quantizing, requantizing and an accumulating
    op's requantization divide by no zero and make no NaN (0 * inf), and give defined codes.
    (Saturating a large value may overflow float32 on the way, as with any scale: the plan routes
    that to logging.)"""
    import numpy as np

    from qnnemu.headers import Q
    from qnnemu.ops.base import QuantSpec
    from qnnemu.spec.quant import AccRequant, Requantize, quantize

    U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
    enc_axis = Q.QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET
    x = np.array([[1.0, -1.0, 0.0], [np.nan, 5.0, -5.0]], np.float32)
    with np.errstate(divide="raise", invalid="raise", over="ignore"):
        per_axis = QuantSpec(enc_axis, np.array([0.1, 0.0, 0.1]), np.array([-128, -128, -128]), 1, None)
        codes = quantize(x, per_axis, U8)
        per_tensor = QuantSpec(Q.QNN_QUANTIZATION_ENCODING_SCALE_OFFSET, 0.0, -128, None, None)
        saturated = Requantize(per_tensor, U8)(x)
        acc = AccRequant(0.05, -128, [0.1, 0.0], 1.0, 0.1, -128, np.array([3.0, 3.0]), False, 0, 255)(
            np.array([[100.0, 100.0], [-100.0, -100.0]]), None)
    assert codes[:, 1].tolist() == [128, 128], f"the channel with scale 0 quantizes to its zero point: {codes}"
    assert codes[:, 0].tolist() == [138, 255], f"NaN quantizes to the top code: {codes}"
    assert saturated.tolist() == [[255, 0, 128], [255, 255, 0]], f"scale 0 saturates, 0 stays at 128: {saturated}"
    assert acc[:, 1].tolist() == [128, 128], f"a weight scale of 0 is a dead channel at its zero point: {acc}"


# ------------------------------------------------------------------ free latency, the GIL
def _medians(stdout: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+) n \d+ median_ms ([0-9.]+)", stdout, re.M)}


def test_free_during_concurrent_executes_returns_quickly(harness):
    """contextFree / backendFree while one thread executes a small graph back to back and
    another executes the graph of the very context being freed: the median stays far below
    10 ms (loose for a loaded 2-core CI machine; benchmarks/bench_free_latency.py prints the
    distribution).  A free waits only for the GIL -- no lock is held across graphExecute."""
    proc = run(harness, "free", LIB, 40, 1, 0, 1, env=app_env(**FORK_ENV))
    assert proc.returncode == 0, f"the frees and the executes all succeed: {describe(proc)}"
    medians = _medians(proc.stdout)
    assert set(medians) == {"contextFree", "backendFree"}, f"both frees were timed: {proc.stdout}"
    for name, median in medians.items():
        assert median <= 10.0, f"{name} during concurrent executes: median {median} ms > 10 ms: {proc.stdout}"


def test_kernels_run_without_the_gil(harness):
    """While another thread is inside the 20-40 ms GEMM of a large FullyConnected, a trivial
    QNN call (backendGetBuildId, Python like every entry) returns at once: the GEMM runs with
    the GIL released (numpy's BLAS; cffi around csrc/kernels.c).  A GIL held in the kernel
    would make the call wait for the GEMM (or the 5 ms switch interval)."""
    proc = run(harness, "gil", LIB, 60, env=app_env(**FORK_ENV))
    assert proc.returncode == 0, f"the large executes and the calls succeed: {describe(proc)}"
    median = _medians(proc.stdout)["backendGetBuildId"]
    assert median <= 2.0, f"a trivial call during a long kernel: median {median} ms > 2 ms: {proc.stdout}"


def test_concurrent_executes_share_the_cores():
    """With two executes in flight, each uses half of the kernel threads: OpenBLAS's pool count
    is halved while they overlap and given back as it was, the C kernels get a per-thread limit
    (qnnemu/core/threads.py).  Before, two threads executing GEMM-bound graphs on 2 cores ran at
    0.5-0.8x one thread (OpenBLAS multi-threaded GEMMs from two callers)."""
    from qnnemu.core import threads
    from qnnemu.ops import _fast

    blas = threads._openblas()
    if blas is None or not _fast.enabled():
        pytest.skip("needs numpy's OpenBLAS and the C kernels")
    set_fn, get_fn = blas
    before = get_fn()
    set_fn(2)
    kernel_threads = _fast.threads()
    _fast.set_threads(2)
    try:
        assert threads.in_flight() == 0, "no execute runs in this test process now"
        threads.enter()
        assert get_fn() == 2 and _fast._lib.qe_call_threads() == 0, "one execute alone keeps every thread"
        threads.enter()
        assert get_fn() == 1, "two executes in flight: OpenBLAS runs each GEMM on one of the 2 threads"
        assert _fast._lib.qe_call_threads() == 1, "and the calling thread's C kernels are limited to 1"
        threads.leave()
        assert get_fn() == 2, "back to one execute: OpenBLAS's count is given back"
        threads.leave()
        assert threads.in_flight() == 0 and get_fn() == 2, "nothing in flight, nothing changed"
    finally:
        set_fn(before)
        _fast.set_threads(kernel_threads)
        _fast._lib.qe_set_call_threads(0)
        threads._local.limit = 0
