"""The LPAI memory model on libQnnLpaiEmu.so (QNN LPAI Memory Allocations; QNN LPAI Memory
Management: scratch, persistent and IO memory, "Memory Lifetime and Allocation Requirements",
"Recommended Workflow"; qnnemu/lpai/memory.py, docs/lpai.md).

No vendor LPAI library exists for x86 (the onnxruntime-qnn wheel ships none: pinned below), so
these tests pin the documented behaviour: sizes planned by liveness, execution in the
application's buffers, state in persistent memory, the documented memory rules.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from abi import LpaiSession, aligned_bytes, op_config, tensor, vp

import qnnemu
from qnnemu.core.engine import engine_mode
from qnnemu.headers import Q

pytestmark = pytest.mark.skipif(not os.path.isfile(qnnemu.lpai_library_path()),
                                reason="libQnnLpaiEmu.so is not built")

# Without the C engine the Python steps compute in their own memory and nothing is shared
# (docs/lpai.md): the tests of packing and of execution in the app's scratch need the engine.
needs_engine = pytest.mark.skipif(engine_mode() == "python", reason="QNNEMU_ENGINE=python: no C engine arena")
U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
Q1 = (1.0, 0)          # scale 1, offset 0: codes are the real values
SCRATCH = Q.QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE
PERSISTENT = Q.QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE


def chain_graph(s: LpaiSession, n_relu: int, shape=(1, 64, 64, 4)):
    """x -> Relu -> ... -> Relu -> y (n_relu nodes, uint8 fixed point): (graph, x, y)."""
    code, g = s.graph(f"chain{n_relu}")
    assert code == 0, f"graphCreate: {code}"
    x = tensor("x", shape, U8, quant=Q1)
    assert s.tensor(g, x) == 0, "tensorCreateGraphTensor x"
    prev = x
    for k in range(n_relu):
        last = k == n_relu - 1
        out = tensor("y" if last else f"t{k}", shape, U8,
                     Q.QNN_TENSOR_TYPE_APP_READ if last else Q.QNN_TENSOR_TYPE_NATIVE, quant=Q1)
        assert s.tensor(g, out) == 0, f"tensorCreateGraphTensor {k}"
        assert s.node(g, op_config(f"r{k}", "Relu", [prev], [out])) == 0, f"graphAddNode r{k}: {s.rec.errors()}"
        prev = out
    return g, x, prev


def state_graph(s: LpaiSession, shape=(1, 8)):
    """An RNN-like graph: y = x + state; state' = Relu(y) (state: an APP_READWRITE tensor a node
    writes, kept in persistent memory).  (graph, x, y)."""
    code, g = s.graph("rnn")
    assert code == 0, f"graphCreate: {code}"
    x = tensor("x", shape, U8, quant=Q1)
    st = tensor("state", shape, U8, Q.QNN_TENSOR_TYPE_APP_READWRITE, quant=Q1)
    y = tensor("y", shape, U8, Q.QNN_TENSOR_TYPE_APP_READ, quant=Q1)
    for t in (x, st, y):
        assert s.tensor(g, t) == 0, f"tensorCreateGraphTensor: {s.rec.errors()}"
    assert s.node(g, op_config("add", "ElementWiseAdd", [x, st], [y])) == 0, f"add: {s.rec.errors()}"
    assert s.node(g, op_config("keep", "Relu", [y], [st])) == 0, f"keep: {s.rec.errors()}"
    return g, x, y


def sizes(s: LpaiSession, g: int) -> tuple[int, int]:
    code, scratch = s.graph_property(g, SCRATCH)
    assert code == 0, f"graphGetProperty SCRATCH_MEM_SIZE: {code} {s.rec.errors()}"
    code, persistent = s.graph_property(g, PERSISTENT)
    assert code == 0, f"graphGetProperty PERSISTENT_MEM_SIZE: {code} {s.rec.errors()}"
    return scratch, persistent


@pytest.fixture
def session():
    s = LpaiSession()
    yield s
    s.close()


def test_the_vendor_wheel_has_no_lpai_library():
    """The onnxruntime-qnn wheel ships HTP, GPU, IR and Saver backends but no LPAI one: nothing
    to probe (if a later wheel adds one, LPAI tests against it belong here)."""
    try:
        import onnxruntime_qnn
    except ImportError:
        pytest.skip("onnxruntime_qnn is not installed")
    libs = sorted(p.name for p in Path(onnxruntime_qnn.__file__).parent.glob("libQnn*.so"))
    assert "libQnnHtp.so" in libs, f"the wheel's backends: {libs}"
    assert not [n for n in libs if "Lpai" in n], f"a vendor LPAI library appeared: {libs}; probe it"


@needs_engine
def test_planner_packs_intermediates_by_liveness(session):
    """Scratch holds every intermediate and the graph IO, packed by liveness: a chain of 6 Relus
    on 16 KiB tensors needs a few live tensors at a time, not all 7."""
    g, _, _ = chain_graph(session, 6)
    scratch, persistent = sizes(session, g)
    plan = qnnemu_plan(g)
    tensor_bytes = 64 * 64 * 4
    assert persistent == 0, f"a stateless graph needs no persistent memory (got {persistent})"
    assert scratch % 128 == 0, f"the scratch size meets the size alignment: {scratch}"
    assert plan.naive_bytes >= 7 * tensor_bytes, f"naive sum covers the 7 values: {plan.summary()}"
    # One Relu's working set: its input and output codes plus, at most (a C engine step that
    # dequantizes, computes in float32 and requantizes; a code table needs none), the float32
    # value it computes on and its float32 result (4 bytes an element).
    working_set = 2 * tensor_bytes + 2 * 4 * tensor_bytes
    assert tensor_bytes * 2 <= scratch <= working_set and scratch < plan.naive_bytes, \
        f"liveness packing keeps one Relu's working set ({working_set} bytes) live, not every value " \
        f"of the chain: {plan.summary()}"
    assert set(plan.io_offsets) == {"x", "y"}, f"IO is planned into scratch by default: {plan.io_offsets}"


def qnnemu_plan(g: int):
    """The memory plan of graph handle ``g`` (the library runs in this process)."""
    from qnnemu.core.handles import HANDLES
    return HANDLES.lookup(g).lpai.plan


def run_state_graph(session, scratch_fill=0):
    g, x, y = state_graph(session)
    scratch_size, persistent_size = sizes(session, g)
    assert persistent_size == 128, f"one 8-byte state tensor, size-aligned: {persistent_size}"
    scratch = aligned_bytes(scratch_size, fill=scratch_fill)
    persistent = aligned_bytes(persistent_size, fill=0xEE)
    assert session.set_graph(g, session.mem("scratch", scratch), session.mem("persistent", persistent)) == 0, \
        f"graphSetConfig SCRATCH_MEM/PERSISTENT_MEM: {session.rec.errors()}"
    assert session.finalize(g) == 0, f"graphFinalize: {session.rec.errors()}"
    assert not persistent.any(), "graphFinalize starts the state as zero bytes in the app's persistent buffer"
    return g, x, y, scratch, persistent


def step(session, g, x, y, value: int) -> np.ndarray:
    out = np.zeros((1, 8), np.uint8)
    code = session.execute_aligned(g, [(x, np.full((1, 8), value, np.uint8))], [(y, out)])
    assert code == 0, f"graphExecute: {code} {session.rec.errors()}"
    return out


@needs_engine
def test_state_lives_in_persistent_memory_and_intermediates_in_scratch(session):
    g, x, y, scratch, persistent = run_state_graph(session, scratch_fill=0xAB)
    assert step(session, g, x, y, 1)[0, 0] == 1, "first execute: 1 + zero state"
    assert (scratch != 0xAB).any(), "the execute computed in the application's scratch buffer"
    assert step(session, g, x, y, 1)[0, 0] == 2, "second execute: the state carried over"
    assert persistent[0] == 2, f"the state is in the app's persistent buffer: {persistent[:8]}"
    scratch[:] = 0x5A        # garbage into scratch between executes: nothing changes
    assert step(session, g, x, y, 1)[0, 0] == 3, "scratch garbage between executes changes nothing"
    persistent[:8] = 40      # corrupting the persistent state does change the result
    assert step(session, g, x, y, 1)[0, 0] == 41, "the state is read from persistent memory"


@needs_engine
def test_scratch_can_be_replaced_between_executes(session):
    g, x, y, scratch, _ = run_state_graph(session)
    assert step(session, g, x, y, 2)[0, 0] == 2, "first execute"
    other = aligned_bytes(scratch.nbytes, fill=0x77)
    assert session.set_graph(g, session.mem("scratch", other)) == 0, \
        f"graphSetConfig SCRATCH_MEM after finalize (a replacement): {session.rec.errors()}"
    assert step(session, g, x, y, 2)[0, 0] == 4, "the execute ran in the new scratch buffer, state intact"
    assert (other != 0x77).any(), "the replacement scratch buffer is the one used"


@needs_engine
def test_sizes_are_planned_again_when_nodes_follow_the_query(session):
    """The workflow queries sizes before finalize; nodes added after a query re-plan."""
    g, _, y = chain_graph(session, 1, shape=(1, 16))
    first, _ = sizes(session, g)
    y2 = tensor("y2", (1, 16), U8, Q.QNN_TENSOR_TYPE_APP_READ, quant=Q1)
    assert session.tensor(g, y2) == 0
    assert session.node(g, op_config("r2", "Relu", [y], [y2])) == 0, f"{session.rec.errors()}"
    second, _ = sizes(session, g)
    assert second >= first, f"re-planned after a new node: {first} -> {second}"
    assert qnnemu_plan(g).io_offsets.keys() >= {"x", "y", "y2"}, "the new output is planned too"


def test_shared_buffer_io_works_on_lpai(session):
    """memRegister (QNN_MEM_TYPE_ION on our libcdsprpc.so's rpcmem) then graphExecute with
    QNN_TENSORMEMTYPE_MEMHANDLE inputs and outputs, as on HTP ("Shared Buffers in the LPAI
    Backend")."""
    import cffi
    from abi import Struct, ffi, tensor_array
    g, x, y, _, _ = run_state_graph(session)
    rpc_ffi = cffi.FFI()
    rpc_ffi.cdef("void *rpcmem_alloc(int heapid, uint32_t flags, int size); void rpcmem_free(void *po);"
                 "int rpcmem_to_fd(void *po);")
    rpc = rpc_ffi.dlopen(str(Path(qnnemu.library_dir()) / "libcdsprpc.so"))
    bufs = [rpc.rpcmem_alloc(25, 1, 8) for _ in range(2)]
    assert all(p != rpc_ffi.NULL for p in bufs), "rpcmem_alloc"
    views = [np.frombuffer(rpc_ffi.buffer(p, 8), np.uint8) for p in bufs]
    descs = ffi.new("Qnn_MemDescriptor_t[]", 2)
    dims = ffi.new("uint32_t[]", [1, 8])
    for d, p in zip(descs, bufs):
        d.memShape.numDim, d.memShape.dimSize, d.memShape.shapeConfig = 2, dims, ffi.NULL
        d.dataType, d.memType = U8, Q.QNN_MEM_TYPE_ION
        d.ionInfo.fd = rpc.rpcmem_to_fd(p)
    handles = ffi.new("Qnn_MemHandle_t[]", 2)
    try:
        assert session.call("memRegister", vp(session.ctx), descs, 2, handles) == 0, \
            f"memRegister: {session.rec.errors()}"
        views[0][:] = 3
        io = []
        for t, k in ((x, 0), (y, 1)):
            c = Struct(ffi.new("Qnn_Tensor_t *", t.ptr[0]), [t])
            c.v.memType, c.v.memHandle = Q.QNN_TENSORMEMTYPE_MEMHANDLE, handles[k]
            io.append(c)
        for expected in (3, 6):
            code = session.call("graphExecute", vp(g), tensor_array(io[:1], session.keep), 1,
                                tensor_array(io[1:], session.keep), 1, ffi.NULL, ffi.NULL)
            assert code == 0, f"graphExecute on registered memory: {session.rec.errors()}"
            assert (views[1] == expected).all(), f"the output is in the shared buffer: {views[1]} (want {expected})"
        assert session.call("memDeRegister", handles, 2) == 0, f"memDeRegister: {session.rec.errors()}"
    finally:
        for p in bufs:
            rpc.rpcmem_free(p)


@needs_engine
def test_planner_report_on_three_graphs(session):
    """The planner's scratch vs the naive sum (docs/lpai.md quotes these numbers)."""
    rows = []
    for n in (2, 4, 8):
        g, _, _ = chain_graph(session, n)
        sizes(session, g)
        plan = qnnemu_plan(g)
        rows.append((n, plan.arena_bytes, plan.naive_bytes))
        print(f"Relu chain of {n}: {plan.summary()}")
        assert plan.arena_bytes < plan.naive_bytes, f"Relu chain of {n}: {plan.summary()}"
    assert rows[-1][1] == rows[0][1], f"the pool does not grow with the chain's length: {rows}"


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_sample_lpai_memory_runs_the_recommended_workflow(tmp_path):
    """samples/lpai_memory.c: the 8 steps of "Recommended Workflow", built with the samples'
    Makefile and run against libQnnLpaiEmu.so."""
    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "lpai_memory"
    build = subprocess.run(["make", "-s", "-C", str(root / "samples"), f"LPAI_OUT={out}", "lpai_memory"],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"make lpai_memory failed: {build.stdout}{build.stderr}"
    env = dict(os.environ, PYTHONPATH=str(root))
    run = subprocess.run([str(out), qnnemu.lpai_library_path()], capture_output=True, text=True, timeout=120,
                         env=env)
    assert run.returncode == 0, f"lpai_memory failed ({run.returncode}): {run.stdout}{run.stderr}"
    for step_text in ("1. alignment", "2. scratch size", "3. persistent size", "4. allocated",
                      "5. set", "6. finalized", "7. user IO", "8. executed"):
        assert step_text in run.stdout, f"the sample reports step '{step_text}': {run.stdout}"
    assert run.stdout.rstrip().endswith("result ok\nPASSED"), f"the sample checked its outputs: {run.stdout}"


def test_context_binary_round_trip_keeps_the_memory_model(session):
    """A context prepared here (the x86 target) serializes; libQnnLpaiEmu.so loads it back; the
    retrieved graph reports the same sizes, takes its buffers, is finalized again (binding them)
    and keeps its state in the new persistent buffer.  Executing it before that is refused."""
    from abi import ffi
    g, x, y, _, _ = run_state_graph(session)
    planned = sizes(session, g)
    size = ffi.new("Qnn_ContextBinarySize_t *")
    assert session.call("contextGetBinarySize", vp(session.ctx), size) == 0, f"{session.rec.errors()}"
    blob = ffi.new("char[]", size[0])
    written = ffi.new("Qnn_ContextBinarySize_t *")
    assert session.call("contextGetBinary", vp(session.ctx), blob, size[0], written) == 0, \
        f"contextGetBinary: {session.rec.errors()}"
    ctx = ffi.new("Qnn_ContextHandle_t *")
    assert session.call("contextCreateFromBinary", vp(session.be), vp(session.dev), ffi.NULL, blob, written[0],
                        ctx, ffi.NULL) == 0, f"contextCreateFromBinary: {session.rec.errors()}"
    session.contexts.append(int(ffi.cast("uintptr_t", ctx[0])))
    g2 = ffi.new("Qnn_GraphHandle_t *")
    assert session.call("graphRetrieve", ctx[0], b"rnn", g2) == 0, f"graphRetrieve: {session.rec.errors()}"
    g2 = int(ffi.cast("uintptr_t", g2[0]))
    assert sizes(session, g2) == planned, "the loaded graph plans the same scratch and persistent sizes"
    session.rec.clear()
    out = np.zeros((1, 8), np.uint8)
    code = session.execute_aligned(g2, [(x, np.ones((1, 8), np.uint8))], [(y, out)])
    session.rec.assert_rule(code, Q.QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED, "QNNEMU-lpai-graph-mem-missing",
                            "graphExecute", "no scratch buffer")
    scratch, persistent = aligned_bytes(planned[0]), aligned_bytes(planned[1], fill=9)
    assert session.set_graph(g2, session.mem("scratch", scratch), session.mem("persistent", persistent)) == 0, \
        f"buffers of the loaded graph: {session.rec.errors()}"
    assert session.finalize(g2) == 0, f"graphFinalize of the loaded graph: {session.rec.errors()}"
    assert [step(session, g2, x, y, 2)[0, 0] for _ in range(2)] == [2, 4], "its state starts at zero and carries"
    assert persistent[0] == 4, "in the new persistent buffer"
