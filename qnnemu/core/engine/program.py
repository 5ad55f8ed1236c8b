"""The C program of a finalized graph and its arena (QnnGraph_finalize; issue 13's C engine).

``Builder`` turns the Python plan (qnnemu/core/plan.py) into the tables csrc/engine.c runs:

- every slot becomes a buffer: a static value -> its numpy array (absolute address, kept
  alive by the program); every other value, graph inputs included (each execute copies them
  in) -> an offset in one arena;
- each node is lowered (lowering.py) into C steps, or kept as a Python fallback step;
- the arena is planned by liveness: a value lives from the node that writes it to the last node
  that reads it (graph outputs to the end), a scratch region for one node only; regions whose
  lifetimes do not overlap share bytes (first fit, 64-byte aligned).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ...headers import Q
from ...ops import _fast
from ...spec import dtypes
from .lowering import F32, emit_converter, redundant_roundings

ALIGN = 64
ABSOLUTE, ARENA, IO = 0, 1, 2
STEP_COLS = 7


@dataclass
class NodeCode:
    """What runs for node k: C steps [first, last) of the program, or a Python fallback."""
    first: int
    last: int
    fallback: str | None = None      # why the node runs in Python (None: it runs in C)


@dataclass
class Program:
    steps: np.ndarray                # int64 [n, STEP_COLS]
    pbuf: np.ndarray                 # int64 buffer ids
    ints: np.ndarray                 # int64
    dbls: np.ndarray                 # float64
    bufs: np.ndarray                 # int64 [n_buffers, 2]
    arena_bytes: int
    nodes: list[NodeCode]
    keep: list = field(default_factory=list)     # arrays the absolute addresses point into


class Builder:
    def __init__(self, plan, graph):
        self.plan, self.graph = plan, graph
        self.lib, self.ffi = _fast.library()
        self.steps: list[list[int]] = []
        self.kernel_names: list[str] = []    # the kernel of each step (chain.py reads them)
        self.pbuf: list[int] = []
        self.ints: list[int] = []
        self.dbls: list[float] = []
        self.bufs: list[list[int]] = []      # [kind, value] (ARENA: value = region index)
        self.keep: list = []
        self.slot_buf: dict[int, int] = {}
        self.regions: list[list[int]] = []   # [nbytes, first node, last node]
        self.region_of_buf: dict[int, int] = {}
        self.region_delta: dict[int, int] = {}   # alias buffer -> its byte offset in the region
        self.io_of_tid: dict[int, int] = {}
        self._fn_cache: dict[str, int] = {}
        self._slot_info: dict[int, tuple[tuple[int, ...], np.dtype] | None] = {}
        self._static_arrays: dict[int, np.ndarray] = {}
        self._key_of_slot = {slot: key for key, slot in plan.slots.items()}
        # graph inputs no step writes (an APP_READWRITE tensor with a producer lives in the arena)
        written = {slot for step in plan.steps for slot in step.writes}
        self.inputs = {t.id for t in graph.app_inputs() if plan.slots.get(t.id) not in written}
        # float16 math: the moves whose output rounding changes no byte (lowering.py)
        self.fp16_moves: set[int] = set()
        if getattr(plan, "fp16", False):
            counts = Counter(slot for step in plan.steps for slot in step.writes)
            carried = {slot for slot, n in counts.items() if n > 1}
            carried |= {plan.slots.get(t.id) for t in graph.app_inputs()}
            self.fp16_moves = redundant_roundings(plan, self._dtype_or_none, carried)

    # -- slots -----------------------------------------------------------------------------
    def _dtype_or_none(self, slot: int):
        info = self._info(slot)
        return None if info is None else info[1]

    def _info(self, slot: int):
        if slot not in self._slot_info:
            self._slot_info[slot] = self._derive_info(slot)
        return self._slot_info[slot]

    def _derive_info(self, slot: int):
        if slot in self.plan.statics:
            a = self.static_value(slot)
            return tuple(a.shape), a.dtype
        key = self._key_of_slot.get(slot)
        tid = key if isinstance(key, int) else key[1] if isinstance(key, tuple) else None
        if tid is None or tid < 0:
            return None
        t = self.graph.tensor(tid)
        if t is None:
            return None
        try:
            dt = dtypes.numpy_dtype(t.dtype)
        except (KeyError, TypeError):
            return None
        return tuple(int(d) for d in t.dims), np.dtype(dt)

    def slot_shape(self, slot: int) -> tuple[int, ...]:
        info = self._info(slot)
        if info is None:
            from .lowering import Unsupported
            raise Unsupported(f"slot {slot} has no known storage")
        return info[0]

    def slot_dtype(self, slot: int) -> np.dtype:
        info = self._info(slot)
        if info is None:
            from .lowering import Unsupported
            raise Unsupported(f"slot {slot} has no known storage")
        return info[1]

    def static_value(self, slot: int) -> np.ndarray:
        a = self._static_arrays.get(slot)
        if a is None:
            a = np.ascontiguousarray(np.asarray(self.plan.statics[slot]))
            self._static_arrays[slot] = a
        return a

    def slot_buffer(self, slot: int, node: int) -> int:
        """The buffer of ``slot``, its arena region's lifetime extended to ``node``."""
        buf = self.slot_buf.get(slot)
        if buf is None:
            key = self._key_of_slot.get(slot)
            if slot in self.plan.statics:
                buf = self._absolute(self.static_value(slot))
            elif isinstance(key, int) and key in self.inputs:
                # a graph input: copied into the arena by each execute (aligned, contiguous; the
                # client's buffer may be neither), live from the start
                shape, dtype = self.slot_shape(slot), self.slot_dtype(slot)
                buf = self._region(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 0)
                self.io_of_tid[key] = buf
            else:
                shape, dtype = self.slot_shape(slot), self.slot_dtype(slot)
                buf = self._region(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, node)
            self.slot_buf[slot] = buf
        region = self.region_of_buf.get(buf)
        if region is not None:
            r = self.regions[region]
            r[1], r[2] = min(r[1], node), max(r[2], node)
        return buf

    def alias(self, slot: int, src_slot: int, node: int, delta: int = 0) -> int | None:
        """Gives ``slot`` (written by node ``node`` only) the arena bytes of ``src_slot`` from
        byte ``delta`` on: a value whose bytes another value already holds (a Reshape, a
        contiguous slice) needs no copy; the region then lives as long as either does.  None
        (nothing changed) when ``slot`` already has a buffer, either slot is a graph input or
        written by more than one node, ``src_slot`` is not in the arena or ``delta`` is not
        ALIGN-aligned."""
        if slot in self.slot_buf or delta % ALIGN or delta < 0:
            return None
        if not hasattr(self, "_write_counts"):
            counts: dict[int, int] = {}
            for step in self.plan.steps:
                for w in step.writes:
                    counts[w] = counts.get(w, 0) + 1
            self._write_counts = counts
            self._input_slots = {self.plan.slots.get(t.id) for t in self.graph.app_inputs()}
        if self._write_counts.get(slot, 0) != 1 or self._write_counts.get(src_slot, 0) > 1 \
                or slot in self._input_slots or src_slot in self.plan.statics:
            return None
        if src_slot in self._input_slots and self._write_counts.get(src_slot, 0):
            return None    # a carried APP_READWRITE input: its bytes change mid-execute
        buf = self.slot_buffer(src_slot, node)
        region = self.region_of_buf.get(buf)
        if region is None or self.region_delta.get(buf, 0):
            return None
        new = self._new_buf(ARENA, region)
        self.region_of_buf[new] = region
        self.region_delta[new] = delta
        self.slot_buf[slot] = new
        return new

    def _new_buf(self, kind: int, value: int) -> int:
        self.bufs.append([kind, value])
        return len(self.bufs) - 1

    def _absolute(self, array: np.ndarray) -> int:
        self.keep.append(array)
        return self._new_buf(ABSOLUTE, int(array.ctypes.data))

    def _region(self, nbytes: int, node: int) -> int:
        self.regions.append([max(nbytes, 1), node, node])
        buf = self._new_buf(ARENA, len(self.regions) - 1)
        self.region_of_buf[buf] = len(self.regions) - 1
        return buf

    def const_buffer(self, array: np.ndarray) -> int:
        a = np.ascontiguousarray(array)
        return self._absolute(a if a.ctypes.data % ALIGN == 0 else _aligned_copy(a))

    def scratch_buffer(self, nbytes: int, node: int) -> int:
        return self._region(nbytes, node)

    # -- steps -----------------------------------------------------------------------------
    def fn_address(self, name: str) -> int:
        addr = self._fn_cache.get(name)
        if addr is None:
            try:
                addr = int(self.ffi.cast("intptr_t", self.ffi.addressof(self.lib, name)))
            except AttributeError:   # a stale qnnemu._kernels: the step stays in Python
                from .lowering import Unsupported
                raise Unsupported(f"kernel {name} is not in this build of qnnemu._kernels") from None
            self._fn_cache[name] = addr
        return addr

    def emit(self, kernel: str, bufs, ints=(), dbls=()) -> None:
        self.steps.append([self.fn_address(kernel), len(self.pbuf), len(bufs), len(self.ints), len(ints),
                           len(self.dbls), len(dbls)])
        self.kernel_names.append(kernel)
        self.pbuf.extend(int(b) for b in bufs)
        self.ints.extend(int(v) for v in ints)
        self.dbls.extend(float(v) for v in dbls)

    def convert(self, conv, src, src_dtype, dst, dst_dtype, n, node, direction) -> None:
        emit_converter(self, conv, src, src_dtype, dst, dst_dtype, n)

    def mark(self) -> tuple[int, int, int, int, int, int, int]:
        return (len(self.steps), len(self.pbuf), len(self.ints), len(self.dbls), len(self.bufs),
                len(self.regions), len(self.keep))

    def rollback(self, m) -> None:
        """Forgets everything emitted or allocated since ``mark()`` (a lowering gave up)."""
        ns, npb, ni, nd, nb, nr, nk = m
        del self.steps[ns:], self.kernel_names[ns:], self.pbuf[npb:], self.ints[ni:], self.dbls[nd:], self.keep[nk:]
        for slot in [s for s, b in self.slot_buf.items() if b >= nb]:
            del self.slot_buf[slot]
        for tid in [t for t, b in self.io_of_tid.items() if b >= nb]:
            del self.io_of_tid[tid]
        for buf in [b for b in self.region_of_buf if b >= nb]:
            del self.region_of_buf[buf]
            self.region_delta.pop(buf, None)
        del self.bufs[nb:], self.regions[nr:]

    # -- the arena ---------------------------------------------------------------------------
    def plan_arena(self, end: int) -> int:
        """Offsets for every region (first fit over lifetimes); the arena's size."""
        order = sorted(range(len(self.regions)), key=lambda r: (self.regions[r][1], -self.regions[r][0]))
        placed: list[tuple[int, int, int, int]] = []      # (offset, size, first, last)
        offsets = [0] * len(self.regions)
        top = 0
        for r in order:
            size, first, last = self.regions[r]
            size = -(-size // ALIGN) * ALIGN
            live = sorted((o, s) for o, s, f, l_ in placed if not (l_ < first or f > last))
            off = 0
            for o, s in live:
                if off + size <= o:
                    break
                off = max(off, o + s)
            offsets[r] = off
            placed.append((off, size, first, last))
            top = max(top, off + size)
        for buf, r in self.region_of_buf.items():
            self.bufs[buf][1] = offsets[r] + self.region_delta.get(buf, 0)
        # What the regions would take without sharing bytes (the LPAI memory planner reports
        # the arena against it: qnnemu/lpai/memory.py).
        self.naive_bytes = sum(-(-size // ALIGN) * ALIGN for size, _, _ in self.regions)
        return top

    def extend_outputs(self, slots, end: int) -> None:
        """Values the caller reads after the last node live to the end."""
        for slot in slots:
            buf = self.slot_buf.get(slot)
            if buf is not None and buf in self.region_of_buf:
                self.regions[self.region_of_buf[buf]][2] = end

    def program(self, nodes: list[NodeCode], arena_bytes: int) -> Program:
        steps = np.asarray(self.steps, dtype=np.int64).reshape(-1, STEP_COLS)
        return Program(steps, np.asarray(self.pbuf or [0], np.int64), np.asarray(self.ints or [0], np.int64),
                       np.asarray(self.dbls or [0.0], np.float64), np.asarray(self.bufs or [[0, 0]], np.int64),
                       arena_bytes, nodes, self.keep)


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    raw = np.empty(a.nbytes + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def aligned_empty(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` starting on an ALIGN boundary."""
    raw = np.zeros(nbytes + ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes]


__all__ = ["Builder", "Program", "NodeCode", "aligned_empty", "F32", "Q"]
