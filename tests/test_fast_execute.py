"""graphExecute's C fast path (csrc/fast_execute.h, qnnemu/abi/fast_execute.py; issue 13): a graph
the C engine compiled entirely runs through the C ABI without the interpreter after its first
execute -- with the same results, withdrawn by any other call, declined for anything it does
not cover (which the Python entry then validates as always)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from qnnemu import client
from qnnemu.client import ffi
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")


def quantize_graph(ctx, name="qd", scale=0.05):
    """x float32 [2,4] -> Quantize (u8) -> Dequantize -> y: lowered to C entirely."""
    g = ctx.graph(name)
    x = g.input("x", (2, 4), np.float32)
    q = g.node("Quantize", [x], [("q", (2, 4), np.dtype("uint8"), (scale, -128))])
    g.node("Dequantize", [q], [("y", (2, 4), np.float32)], app_read=True)
    g.finalize()
    return g, x


class Raw:
    """The table's graphExecute called with tensors built once (as a C application does)."""

    def __init__(self, be, g, x, feed):
        self.keep: list = []
        self.feed = feed
        self.cin = ffi.new("Qnn_Tensor_t[]", 1)
        self.cin[0] = x.struct[0]
        client._set_buffer(self.cin[0], ffi.from_buffer(feed), feed.nbytes, self.keep)
        self.y = np.zeros((2, 4), np.float32)
        self.cout = ffi.new("Qnn_Tensor_t[]", 1)
        self.cout[0] = g.outputs[0].struct[0]
        client._set_buffer(self.cout[0], ffi.from_buffer(self.y), self.y.nbytes, self.keep)
        self.fn, self.g = be.fn.graphExecute, g

    def __call__(self, profile=ffi.NULL) -> int:
        return self.fn(self.g.handle, self.cin, 1, self.cout, 1, profile, ffi.NULL)


def executions(g) -> int:
    """Executes that went through the Python entry (the fast path does not count them)."""
    from qnnemu.core.handles import HANDLES
    return HANDLES.lookup(int(ffi.cast("uintptr_t", g.handle))).executions


@pytest.fixture
def backend():
    from qnnemu.abi import fast_execute
    be = client.Backend(None, log_level=None)
    yield be, fast_execute
    be.free()


def test_fast_path_after_first_execute_gives_the_python_results(backend):
    be, fast = backend
    g, x = quantize_graph(be.context())
    feed = np.linspace(-8, 8, 8, dtype=np.float32).reshape(2, 4)
    ref = g.execute({"x": feed})["y"]
    assert fast.registered() == 1, "a graph compiled entirely to C is registered after one execute"
    raw = Raw(be, g, x, feed)
    before = executions(g)
    for k in range(3):
        feed[0, 0] = np.float32(k)
        assert raw() == Q.QNN_SUCCESS, "the fast execute succeeds"
        fast_out = raw.y.copy()
        fast.clear()                          # the next execute takes the Python entry
        assert raw() == Q.QNN_SUCCESS and raw.y.tobytes() == fast_out.tobytes(), \
            "fast path output equals the Python entry's, byte for byte"
        assert fast.registered() == 1, "offered again after the Python execute"
    assert executions(g) == before + 3, "only the three executes after a clear ran through Python"
    assert ref.shape == (2, 4), "the client's first execute returned the output"


def test_other_calls_withdraw_it_and_the_next_execute_offers_it_again(backend):
    be, fast = backend
    g, x = quantize_graph(be.context())
    feed = np.ones((2, 4), np.float32)
    g.execute({"x": feed})
    assert fast.registered() == 1, "registered after the first execute"
    be.context()     # contextCreate: any entry but graphExecute and the queries withdraws it
    assert fast.registered() == 0, "withdrawn by another ABI call"
    raw = Raw(be, g, x, feed)
    n = executions(g)
    assert raw() == Q.QNN_SUCCESS and executions(g) == n + 1, "the next execute goes through Python"
    assert fast.registered() == 1, "... and offers the graph again"


def test_declined_calls_reach_the_python_entry(backend):
    be, fast = backend
    g, x = quantize_graph(be.context())
    feed = np.ones((2, 4), np.float32)
    g.execute({"x": feed})
    raw = Raw(be, g, x, feed)
    raw.cin[0].v1.clientBuf.dataSize = 4     # wrong size: the fast path must not guess
    assert raw() == Q.QNN_GRAPH_ERROR_INVALID_TENSOR, \
        "a wrong dataSize is declined by the fast path and refused by the Python entry"
    assert "QNNEMU-graphExecute-buffer-size" in be.error_message(Q.QNN_GRAPH_ERROR_INVALID_TENSOR), \
        "with the Python entry's rule"


def test_profiled_execute_takes_the_python_entry(backend):
    be, fast = backend
    g, x = quantize_graph(be.context())
    feed = np.ones((2, 4), np.float32)
    g.execute({"x": feed})
    prof = be.profile()
    raw = Raw(be, g, x, feed)
    n = executions(g)
    assert raw(prof.handle) == Q.QNN_SUCCESS and executions(g) == n + 1, \
        "an execute with a profile handle runs through Python (profiling observes its steps)"


def test_two_graphs_in_two_threads(backend):
    be, fast = backend
    ctx = be.context()
    graphs = [quantize_graph(ctx, f"g{k}", scale=0.05 * (k + 1)) for k in range(2)]
    feeds = [np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4) * (k + 1) for k in range(2)]
    refs = [g.execute({"x": f})["y"] for (g, _), f in zip(graphs, feeds)]
    assert fast.registered() == 2, "both graphs registered"
    raws = [Raw(be, g, x, f) for (g, x), f in zip(graphs, feeds)]
    errors: list = []

    def loop(k):
        for _ in range(2000):
            if raws[k]() != 0 or raws[k].y.tobytes() != refs[k].tobytes():
                errors.append(k)
                return

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], "2 x 2000 concurrent fast executes of two graphs all give their reference outputs"


def test_switched_off_by_environment():
    code = ("import numpy as np\nfrom qnnemu import client\nfrom qnnemu.abi import fast_execute\n"
            "be = client.Backend(None, log_level=None)\ng = be.context().graph('g')\n"
            "x = g.input('x', (1, 4), np.float32)\n"
            "q = g.node('Quantize', [x], [('q', (1, 4), np.dtype('uint8'), (0.1, 0))])\n"
            "g.node('Dequantize', [q], [('y', (1, 4), np.float32)], app_read=True)\n"
            "g.finalize(); g.execute({'x': np.ones((1, 4), np.float32)})\n"
            "print(fast_execute.registered())\n")
    env = dict(os.environ, QNNEMU_FAST_EXECUTE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", "QNNEMU_FAST_EXECUTE=0: no graph is registered"
