"""The LPAI memory model (QNN LPAI Memory Allocations; QNN LPAI Memory Management: "Scratch
Memory", "Persistent Memory", "IO Memory", "Memory Lifetime and Allocation Requirements",
"Recommended Workflow").

The planner runs when the graph is prepared: at the first SCRATCH_MEM_SIZE /
PERSISTENT_MEM_SIZE query (the workflow queries before it allocates and finalizes) or at
graphFinalize, and again if nodes were added since.  Preparing compiles the graph as
graphFinalize does and reopens it (it still takes nodes until graphFinalize).

- **Scratch**: every value the C engine keeps in its arena -- intermediates, and the graph
  inputs and outputs (IO memory is planned into scratch by default) -- at the offset the
  engine's liveness packing gave it (first fit over lifetimes, 64-byte aligned: values whose
  lifetimes do not overlap share bytes).  The scratch size is that arena rounded up to the
  size alignment; ``naive_bytes`` is what the same values would take without sharing.
- **Persistent**: state that survives executes.  A state tensor is an APP_READWRITE tensor that
  a node writes: nodes read its value from the previous execute, the writing node sets the
  next one (an RNN's hidden state).  Each gets an aligned offset in the persistent pool; it
  starts as zero bytes at graphFinalize.

At execute the graph runs IN the application's buffers: the C engine's arena is the scratch
buffer the application passed (graphSetConfig SCRATCH_MEM, replaceable between executes), and
each state tensor is read from and written back to the persistent buffer.  Writing into scratch
between executes therefore changes nothing; writing into persistent memory changes the state.
Without the C engine (QNNEMU_ENGINE=python) the sizes are still planned, from the plan's
values, but the Python steps compute in their own memory (docs/lpai.md).
"""
from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass, field

import numpy as np

from ..spec import dtypes
from ..spec.tensor import APP_INPUT_TYPES, APP_OUTPUT_TYPES, APP_READWRITE_TYPES
from . import device


@dataclass
class StateSlot:
    tensor_id: int
    name: str
    offset: int
    nbytes: int
    dtype: np.dtype
    shape: tuple
    arena_offset: int | None = None   # where the engine's nodes read it in scratch


@dataclass
class MemoryPlan:
    scratch_bytes: int        # what SCRATCH_MEM_SIZE reports (size-aligned)
    arena_bytes: int          # the packed arena the engine computes in
    naive_bytes: int          # the same values without sharing bytes
    persistent_bytes: int     # what PERSISTENT_MEM_SIZE reports (size-aligned)
    state: list[StateSlot] = field(default_factory=list)
    io_offsets: dict[str, int] = field(default_factory=dict)   # graph IO tensor name -> scratch offset
    in_scratch: bool = True   # False: no C engine, the Python steps compute elsewhere
    io_bytes: int = 0         # the graph inputs' and outputs' bytes (IO memory)

    def binary_record(self) -> dict:
        """What a context binary keeps of the plan (the graph's ``configs["lpai"]``): the sizes the
        graph properties report, read back by the System library without preparing the graph."""
        return {"scratch_mem_size": self.scratch_bytes, "persistent_mem_size": self.persistent_bytes,
                "naive_scratch_size": self.naive_bytes, "io_size": self.io_bytes,
                "state_tensors": len(self.state)}

    def summary(self) -> str:
        saved = 100.0 * (1 - self.arena_bytes / self.naive_bytes) if self.naive_bytes else 0.0
        return (f"scratch {self.scratch_bytes} bytes (arena {self.arena_bytes}, naive sum {self.naive_bytes}: "
                f"{saved:.0f}% shared), persistent {self.persistent_bytes} bytes ({len(self.state)} state tensors)")


@dataclass
class Buffer:
    """A SCRATCH_MEM / PERSISTENT_MEM buffer of the application."""

    addr: int
    size: int
    mem_type: int

    def array(self, nbytes: int | None = None) -> np.ndarray:
        n = self.size if nbytes is None else nbytes
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.addr))


@dataclass
class GraphMemory:
    """The LPAI state of one graph: its buffers, its plan, its other LPAI configs."""

    scratch: Buffer | None = None
    persistent: Buffer | None = None
    plan: MemoryPlan | None = None
    planned_nodes: int = -1
    configs: dict = field(default_factory=dict)   # PERF_CFG, CORE_AFFINITY, PREPARE
    bound: bool = False   # graphFinalize took the buffers: executes run in them
    offline: bool = False   # finalized by an offline prepare (PREPARE, no buffers): serializable only

    def stale(self, graph) -> bool:
        return self.plan is None or self.planned_nodes != len(graph.nodes)


def state_tensors(graph) -> list:
    """APP_READWRITE tensors a node writes (their values survive executes)."""
    return [t for t in graph.tensors.values() if t.type in APP_READWRITE_TYPES and t.producer is not None]


def plan_memory(graph) -> MemoryPlan:
    """The plan of a compiled graph (graph.plan set)."""
    engine = getattr(graph.plan, "engine", None)
    state: list[StateSlot] = []
    offset = 0
    for t in state_tensors(graph):
        np_dtype = dtypes.numpy_dtype(t.dtype)
        nbytes = int(np.prod(t.dims, dtype=np.int64)) * np_dtype.itemsize
        state.append(StateSlot(t.id, t.name, offset, nbytes, np_dtype, tuple(t.dims)))
        offset += device.align_up(nbytes, 64)
    persistent = device.align_up(offset)
    io_offsets: dict[str, int] = {}
    if engine is not None:
        arena, naive = int(engine.arena_bytes), int(engine.naive_arena_bytes)
        for st in state:
            buf = engine._slot_buf.get(graph.plan.slots.get(st.tensor_id))
            if buf is not None and int(engine._bufs[buf][0]) == 1:
                st.arena_offset = int(engine._bufs[buf][1])
        for t in graph.tensors.values():
            if t.type not in APP_INPUT_TYPES and t.type not in APP_OUTPUT_TYPES:
                continue
            slot = graph.plan.slots.get(t.id)
            buf = engine._slot_buf.get(slot) if slot is not None else None
            if buf is not None and int(engine._bufs[buf][0]) == 1:
                io_offsets[t.name] = int(engine._bufs[buf][1])
        in_scratch = True
    else:
        # No C engine: every non-static value once (nothing is shared).
        arena = naive = sum(device.align_up(int(np.prod(t.dims, dtype=np.int64))
                                            * dtypes.numpy_dtype(t.dtype).itemsize, 64)
                            for t in graph.tensors.values()
                            if t.producer is not None or t.type in APP_INPUT_TYPES)
        in_scratch = False
    io_bytes = sum(int(np.prod(t.dims, dtype=np.int64)) * dtypes.numpy_dtype(t.dtype).itemsize
                   for t in graph.tensors.values() if t.type in APP_INPUT_TYPES or t.type in APP_OUTPUT_TYPES)
    return MemoryPlan(device.align_up(max(arena, 1)), arena, naive, persistent, state, io_offsets, in_scratch,
                      io_bytes)


def prepare(graph) -> MemoryPlan:
    """Compiles the graph (as graphFinalize does) if it changed since it was last planned, and
    plans its memory; an unfinalized graph is reopened (it takes nodes until graphFinalize)."""
    mem: GraphMemory = graph.lpai
    if mem.plan is not None and not mem.stale(graph):
        return mem.plan
    if not graph.finalized:
        graph.finalize()
        graph.finalized = False
    plan = mem.plan = plan_memory(graph)
    mem.planned_nodes = len(graph.nodes)
    graph.log.info(f"LPAI graph '{graph.name}' planned: {plan.summary()}")
    return plan


def bind(graph) -> None:
    """graphFinalize (of a built graph, or of one retrieved from a context binary): the state
    starts as zero bytes; executes run in the app's buffers."""
    mem: GraphMemory = graph.lpai
    assert mem.plan is not None   # (graphFinalize planned it)
    if mem.persistent is not None and mem.plan.persistent_bytes:
        mem.persistent.array(mem.plan.persistent_bytes)[:] = 0
    graph.execute = types.MethodType(_execute, graph)
    mem.bound = True


def _execute(graph, feeds, wanted, observer=None, batch: int = 1):
    """Graph.execute of an LPAI graph: state fed from persistent memory and written back; the
    engine's arena is the current scratch buffer."""
    mem: GraphMemory = graph.lpai
    plan = mem.plan
    assert plan is not None and mem.scratch is not None   # (graphFinalize checked both)
    feeds = dict(feeds)
    persistent = np.empty(0, np.uint8)
    if plan.state:
        assert mem.persistent is not None   # (graphFinalize checked it)
        persistent = mem.persistent.array(plan.persistent_bytes)
    for s in plan.state:
        if s.tensor_id not in feeds:    # the app may pass a state tensor: it then sets the state
            feeds[s.tensor_id] = persistent[s.offset:s.offset + s.nbytes].view(s.dtype).reshape(s.shape).copy()
    want = list(wanted) + [s.tensor_id for s in plan.state if s.tensor_id not in wanted]
    engine = getattr(graph.plan, "engine", None)
    if engine is not None and engine.arena_bytes:
        # (the engine copies each state value fed here into its place in scratch, as it does
        # graph inputs: Engine.carried_inputs)
        engine.external_arena = mem.scratch.array(engine.arena_bytes)
    try:
        out = type(graph).execute(graph, feeds, want, observer=observer, batch=batch)
    finally:
        if engine is not None:
            engine.external_arena = None
    for s in plan.state:
        persistent[s.offset:s.offset + s.nbytes] = np.ascontiguousarray(out[s.tensor_id]).view(np.uint8).reshape(-1)
    return {tid: out[tid] for tid in wanted}
