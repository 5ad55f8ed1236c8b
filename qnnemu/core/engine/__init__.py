"""The C execution engine of finalized graphs (QnnGraph_finalize / QnnGraph_execute; issue 13).

graphFinalize compiles the Python plan (qnnemu/core/plan.py, which stays the reference
implementation) into a flat program of C steps (program.py): each node is lowered by the
lowering of its op family (lowering.py, lower_*.py) into C steps with pre-resolved buffers,
shapes, quantization parameters and packed weights, or, when no lowering reproduces it bit for
bit, kept as a Python fallback step.  graphExecute fills the io table with the fed arrays, runs
each maximal run of C nodes in one ``qe_run`` call (cffi releases the GIL around it, so graphs
in other threads run at the same time), runs the fallback steps in Python on numpy views of the
arena, and copies the outputs out.

``QNNEMU_ENGINE`` selects, at finalize: ``c`` (the default), ``python`` (the Python plan only)
or ``check`` (every execute runs both and raises ``EngineMismatch`` at the first value whose
bytes differ: the bit-identity test runs the op test-suites this way).  Fallbacks are counted
(``Engine.fallbacks``: node name, op type, reason) and logged on the ``qnnemu.engine`` logger at
DEBUG when the program is built.
"""
from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections import Counter
from typing import Any

import numpy as np

from ...headers import Q
from ...ops.base import htp_fp16_to_fp32
from .. import plan as plan_mod, scheduling
from . import chain
from .lowering import F32, IMPL_LOWERINGS, LowerCtx, Unsupported, load_lowerings
from .program import Builder, NodeCode, Program, aligned_empty

ENGINE_ENV = "QNNEMU_ENGINE"
MODES = ("c", "python", "check")
_log = logging.getLogger("qnnemu.engine")


class EngineMismatch(AssertionError):
    """QNNEMU_ENGINE=check: the C program and the Python plan computed different bytes."""


def engine_mode() -> str:
    mode = os.environ.get(ENGINE_ENV, "c").strip().lower() or "c"
    return mode if mode in MODES else "c"


def _lower_node(builder: Builder, k: int, step) -> None:
    """Emits node k's C steps; raises Unsupported when it stays in Python."""
    impl, n_out, tee = step.impl, None, 0
    if type(impl) is plan_mod.ConstantFolded:   # computed at finalize: nothing to run
        return
    if type(impl) is plan_mod.FoldedActivation:
        ctx = LowerCtx(builder, k, step)
        n = int(np.prod(ctx.out_shape(0), dtype=np.int64)) * ctx.out_dtype(0).itemsize
        if ctx.in_dtype(0) != ctx.out_dtype(0) or ctx.in_shape(0) != ctx.out_shape(0):
            raise Unsupported("a folded activation whose codes change type")
        ctx.emit("qe_k_copy", (ctx.input_raw(0), ctx.output_raw(0)), (n,))
        return
    if type(impl) is plan_mod._Tee:
        tee = impl.n
        impl, n_out = impl.impl, len(step.writes) - impl.n
    by_op = load_lowerings()    # (imports the lower_* modules, which fill IMPL_LOWERINGS too)
    lower = IMPL_LOWERINGS.get(type(impl)) or by_op.get(step.node.op_type)
    if lower is None:
        raise Unsupported(f"no C lowering for {step.node.op_type}")
    ctx = LowerCtx(builder, k, step, impl, n_out)
    if tee:
        _lower_tee(ctx, lower, tee)
    else:
        lower(ctx)
        ctx.finish()
    if ctx.emitted == 0:
        raise Unsupported("the lowering emitted no step")


def _lower_tee(ctx: LowerCtx, lower, tee: int) -> None:
    """A float-path producer with folded activations: its float32 result converted once into
    its own output (unless discarded) and once into each folded activation's codes."""
    own = len(ctx.step.writes) - tee
    if own != 1:
        raise Unsupported("a folding producer with several outputs")
    slot = ctx.step.writes[0]
    n = int(np.prod(ctx.b.slot_shape(slot), dtype=np.int64))
    result = ctx.scratch(4 * n)
    real_output_f32 = ctx.output_f32
    ctx.output_f32 = lambda k: result if k == 0 else real_output_f32(k)  # type: ignore[method-assign]
    lower(ctx)
    for k in range(len(ctx.step.writes)):
        conv = ctx.step.out_conv[k]
        if conv is plan_mod._discard:
            continue
        if conv is None:
            raise Unsupported("a folded output without a converter")
        s = ctx.step.writes[k]
        ctx.b.convert(conv, result, F32, ctx.b.slot_buffer(s, ctx.index), ctx.b.slot_dtype(s),
                      int(np.prod(ctx.b.slot_shape(s), dtype=np.int64)), ctx.index, "out")


def _lower_output_conversions(builder: Builder, plan, graph, end: int):
    """Float16-math results leave as float32 through the HTP's conversion (the plan's
    ``output_conv``, htp_fp16_to_fp32): C steps after the last node write each converted output
    into a region of its own.  Returns ((first, last) C steps, {tensor id: buffer})."""
    first = len(builder.steps)
    converted: dict[int, int] = {}
    for t in graph.app_outputs():
        conv = plan.output_conv.get(t.id)
        slot = plan.slots.get(t.id)
        if conv is not htp_fp16_to_fp32 or slot is None or slot not in builder.slot_buf:
            continue
        if builder.slot_dtype(slot) != F32:
            continue
        n = int(np.prod(builder.slot_shape(slot), dtype=np.int64))
        dst = builder.scratch_buffer(4 * n, end)
        builder.emit("qe_k_fp16_to_fp32", (builder.slot_buffer(slot, end), dst), (n,))
        converted[t.id] = dst
    return (first, len(builder.steps)), converted


def build_engine(plan, graph) -> Engine | None:
    """The C program of ``plan`` (None with QNNEMU_ENGINE=python or without the C kernels)."""
    mode = engine_mode()
    builder = None
    if mode != "python":
        try:
            builder = Builder(plan, graph)
        except Exception as exc:   # noqa: BLE001 - no engine is a supported configuration
            _log.debug("graph '%s': no C engine (%s)", graph.name, exc)
            return None
        if builder.lib is None:
            return None
    if builder is None:
        return None
    nodes: list[NodeCode] = []
    for k, step in enumerate(plan.steps):
        m = builder.mark()
        first = len(builder.steps)
        try:
            _lower_node(builder, k, step)
            nodes.append(NodeCode(first, len(builder.steps)))
        except Unsupported as why:
            builder.rollback(m)
            nodes.append(NodeCode(first, first, str(why) or "unsupported"))
            for slot in [*step.reads, *step.writes]:
                if slot >= 0:
                    with contextlib.suppress(Unsupported):
                        builder.slot_buffer(slot, k)
    end = len(plan.steps)
    for t in graph.app_inputs():   # every graph input has its place, read or not
        if t.id in plan.slots:
            with contextlib.suppress(Unsupported):
                builder.slot_buffer(plan.slots[t.id], 0)
    outputs = [plan.slots[t.id] for t in graph.app_outputs() if t.id in plan.slots]
    builder.extend_outputs(outputs, end)
    epilogue, converted = _lower_output_conversions(builder, plan, graph, end)
    arena_bytes = builder.plan_arena(end + 1)
    nodes, epilogue, chains = chain.fuse(builder, nodes, epilogue)
    program = builder.program(nodes, arena_bytes)
    engine = Engine(plan, graph, builder, program, check=mode == "check", epilogue=epilogue,
                    converted_outputs=converted)
    engine.chains = chains
    if engine.fallbacks and _log.isEnabledFor(logging.DEBUG):
        _log.debug("graph '%s': %d of %d nodes run as Python fallback steps: %s", graph.name,
                   len(engine.fallbacks), len(plan.steps),
                   "; ".join(f"{name} ({op}): {why}" for name, op, why in engine.fallbacks))
    return engine


class Engine:
    """A compiled program and what its executes need (see the module docstring)."""

    def __init__(self, plan, graph, builder: Builder, program: Program, check: bool = False,
                 epilogue: tuple[int, int] = (0, 0), converted_outputs: dict[int, int] | None = None):
        self.plan, self.program, self.check = plan, program, check
        self.lib, self.ffi = builder.lib, builder.ffi
        self.graph_name = graph.name
        self.fallbacks = [(step.node.name, step.node.op_type, code.fallback)
                          for step, code in zip(plan.steps, program.nodes) if code.fallback]
        self.c_nodes = len(plan.steps) - len(self.fallbacks)
        self.c_steps = len(program.steps)
        self.kernel_names = tuple(builder.kernel_names)   # step k's kernel (tests, profiles)
        self.fp16_moves = frozenset(builder.fp16_moves)     # nodes not rounding again (lowering.py)
        self.arena_bytes = program.arena_bytes
        self.naive_arena_bytes = int(getattr(builder, "naive_bytes", program.arena_bytes))
        # An arena the caller provides instead of the engine's own (a uint8 array of at least
        # arena_bytes, ALIGN-aligned): the LPAI backend runs in the application's scratch
        # buffer (qnnemu/lpai/memory.py).  The caller serializes executes on it.
        self.external_arena: np.ndarray | None = None
        # graph input tensor id -> its arena offset (each execute copies the fed array there)
        self.input_offsets = {tid: int(builder.bufs[buf][1]) for tid, buf in builder.io_of_tid.items()}
        self._slot_buf = dict(builder.slot_buf)
        self._bufs = program.bufs
        self._dtypes = {slot: builder._info(slot) for slot in builder.slot_buf}
        # segments: ("c", first C step, last C step, first node, last node) or ("py", node)
        segments: list[tuple] = []
        for k, code in enumerate(program.nodes):
            if code.fallback:
                segments.append(("py", k))
            elif segments and segments[-1][0] == "c":
                kind, first, _, n0, _ = segments[-1]
                segments[-1] = ("c", first, code.last, n0, k + 1)
            else:
                segments.append(("c", code.first, code.last, k, k + 1))
        self.segments = segments
        # C steps after the last node (outputs' float16 -> float32 conversions) and the buffers
        # holding those converted outputs
        self.epilogue = epilogue
        self.converted = {tid: (buf, int(program.bufs[buf][1])) for tid, buf in (converted_outputs or {}).items()}
        self.written = {slot for step in plan.steps for slot in step.writes}
        self._input_slots = {plan.slots[tid] for tid in builder.io_of_tid}
        # Graph inputs a node also writes (an APP_READWRITE tensor carrying a value to the next
        # execute): a fed value is copied into the arena too, where the nodes before its writer
        # read it (the builder keeps them out of io_of_tid: they are written, not only fed).
        self.carried_inputs = {t.id for t in graph.app_inputs()
                               if plan.slots.get(t.id) in self.written and plan.slots[t.id] in self._slot_buf
                               and int(program.bufs[self._slot_buf[plan.slots[t.id]]][0]) == 1}
        self._arena = aligned_empty(max(program.arena_bytes, 1))
        self._arena_lock = threading.Lock()
        p = program
        ffi = self.ffi
        self._cargs = (ffi.cast("int64_t *", p.steps.ctypes.data), ffi.cast("int64_t *", p.pbuf.ctypes.data),
                       ffi.cast("int64_t *", p.ints.ctypes.data), ffi.cast("double *", p.dbls.ctypes.data),
                       ffi.cast("int64_t *", p.bufs.ctypes.data))
        self._no_io = self.ffi.new("void *[]", 1)
        self.chains: list[tuple[int, int]] = []   # (header step, steps): element-wise chains
        self._node_firsts = [code.first for code in program.nodes]
        self._rc_python = int(self.lib.qe_rc_python())   # csrc/engine.h QE_RC_PYTHON

    def fast_descriptor(self, graph) -> np.ndarray | None:
        """The descriptor of graphExecute's C fast path (csrc/fast_execute.h) for this program,
        or None when an execute needs Python: a fallback step, converters at the graph boundary
        (float16 outputs, native KV caches), the check mode, an input or output outside the
        arena.  It points into this engine (program tables, a private arena): keep it and the
        engine alive while it is registered."""
        plan = self.plan
        if self.external_arena is not None:   # the LPAI backend's executes need Python
            return None
        if self.fallbacks or self.check or any(c is not None for c in plan.input_conv.values()) \
                or set(plan.output_conv) - set(self.converted):
            return None
        ins, outs = list(graph.app_inputs()), list(graph.app_outputs())
        if len(ins) > 64 or len(outs) > 64:
            return None
        records = []
        keep = []
        for t in ins + outs:
            slot = plan.slots.get(t.id)
            buf = self._slot_buf.get(slot) if slot is not None else None
            if buf is None or int(self._bufs[buf][0]) != 1:
                return None
            shape, dtype = self._dtypes[slot]
            dims = np.asarray(shape, dtype=np.uint32)
            keep.append(dims)
            offset = self.converted[t.id][1] if t.id in self.converted else int(self._bufs[buf][1])
            records.append([t.id, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, len(shape),
                            dims.ctypes.data, offset, 0])
        arena = aligned_empty(max(self.arena_bytes, 1))
        keep.append(arena)
        p, ffi, lib = self.program, self.ffi, self.lib

        def address(name: str) -> int:
            return int(ffi.cast("intptr_t", ffi.addressof(lib, name)))
        header = [2, address("qe_run"), p.steps.ctypes.data, len(p.steps), p.pbuf.ctypes.data, p.ints.ctypes.data,
                  p.dbls.ctypes.data, p.bufs.ctypes.data, arena.ctypes.data, len(ins), len(outs),
                  address("qe_set_call_threads"), address("qe_threads"), *scheduling.fast_path_fields(graph)]
        desc = np.asarray(header + [v for r in records for v in r], dtype=np.int64)
        self._fast_keep = keep   # the dimension arrays and the arena the descriptor points into
        return desc

    def summary(self) -> dict[str, Any]:
        reasons = Counter(op for _, op, _ in self.fallbacks)
        return {"nodes": len(self.plan.steps), "c_nodes": self.c_nodes, "c_steps": self.c_steps,
                "fallbacks": len(self.fallbacks), "fallback_ops": dict(reasons),
                "arena_bytes": self.arena_bytes, "chains": len(self.chains),
                "chained_steps": sum(m for _, m in self.chains)}

    # -- views -----------------------------------------------------------------------------
    def _view(self, slot: int, arena: np.ndarray, feeds_by_io: list):
        if slot < 0:
            return None
        buf = self._slot_buf.get(slot)
        if buf is None:
            return self.plan.statics.get(slot)
        kind, value = int(self._bufs[buf][0]), int(self._bufs[buf][1])
        if kind == 0:
            return self.plan.statics[slot]
        if kind == 2:
            return feeds_by_io[value]
        if slot not in self.written and slot not in self._input_slots:
            return None
        shape, dtype = self._dtypes[slot]
        return np.ndarray(shape, dtype, buffer=arena, offset=value)

    # -- execute ---------------------------------------------------------------------------
    def run(self, feeds: dict[int, np.ndarray], wanted: list[int], observer=None):
        """The outputs ``wanted``; None when the fed arrays do not have the types and sizes the
        program was built for (the caller then runs the Python steps)."""
        if self.check:
            return self._run_checked(feeds, wanted, observer)
        if self.external_arena is not None:
            return self._run(feeds, wanted, observer, self.external_arena)
        if self._arena_lock.acquire(blocking=False):
            try:
                return self._run(feeds, wanted, observer, self._arena)
            finally:
                self._arena_lock.release()
        return self._run(feeds, wanted, observer, aligned_empty(max(self.arena_bytes, 1)))

    def _run(self, feeds, wanted, observer, arena, after_node=None):
        plan = self.plan
        slots = plan.slots
        io: list = []
        ptrs = self._no_io
        for tid, arr in feeds.items():
            conv = plan.input_conv.get(tid)
            if conv is not None:
                arr = conv(arr)
            if tid not in self.input_offsets and tid not in self.carried_inputs:
                continue
            dst = self._view(slots[tid], arena, io)
            a = np.asarray(arr)
            if a.dtype != dst.dtype or a.size != dst.size:
                return None    # not what the program was built for: the Python steps run
            np.copyto(dst, a.reshape(dst.shape))
        arena_ptr = self.ffi.cast("char *", arena.ctypes.data)
        steps, pbuf, ints, dbls, bufs = self._cargs
        run = self.lib.qe_run
        sched_point = self.lib.qe_sched_point
        by_node = observer is not None or after_node is not None
        for seg in self.segments:
            if seg[0] == "c":
                if by_node:
                    for k in range(seg[3], seg[4]):
                        code = self.program.nodes[k]
                        sched_point()
                        t0 = _clock()
                        rc = run(steps, code.first, code.last, pbuf, ints, dbls, bufs, arena_ptr, ptrs)
                        if rc != -1 and rc & 0xff == self._rc_python:
                            self._fallback(plan.steps[k], arena, io, observer)   # (it reports the time)
                        else:
                            self._check_rc(rc)
                            if observer is not None:
                                observer(plan.steps[k], _clock() - t0)
                        if after_node is not None:
                            after_node(k, arena, io)
                else:
                    first = seg[1]
                    while True:
                        rc = run(steps, first, seg[2], pbuf, ints, dbls, bufs, arena_ptr, ptrs)
                        if rc == -1 or rc & 0xff != self._rc_python:
                            self._check_rc(rc)
                            break
                        # a step left its node to Python (QE_RC_PYTHON): that node's Python step,
                        # then the C steps of the nodes after it
                        k = self._node_of_step(rc >> 8)
                        self._fallback(plan.steps[k], arena, io, observer)
                        first = self.program.nodes[k].last
            else:
                sched_point()    # an op boundary of the Python steps (C steps: inside qe_run)
                self._fallback(plan.steps[seg[1]], arena, io, observer)
                sched_point()    # (and before the C steps that follow)
                if after_node is not None:
                    after_node(seg[1], arena, io)
        if self.epilogue[1] > self.epilogue[0]:
            self._check_rc(run(steps, self.epilogue[0], self.epilogue[1], pbuf, ints, dbls, bufs, arena_ptr, ptrs))
        out: dict[int, Any] = {}
        out_conv = plan.output_conv
        for tid in wanted:
            if tid in self.converted:
                shape, _ = self._dtypes[slots[tid]]
                out[tid] = np.ndarray(shape, np.float32, buffer=arena, offset=self.converted[tid][1]).copy()
                continue
            v = self._view(slots[tid], arena, io)
            v = np.array(v, copy=True) if v is not None else None
            out[tid] = out_conv[tid](v) if tid in out_conv else v
        return out

    def _node_of_step(self, step: int) -> int:
        """The node whose C steps include ``step``."""
        k = bisect.bisect_right(self._node_firsts, step) - 1
        while self.program.nodes[k].last <= step:
            k -= 1
        return k

    def _check_rc(self, rc: int) -> None:
        if rc != -1:
            k, code = rc >> 8, rc & 0xff
            raise RuntimeError(f"graph '{self.graph_name}': C step {k} failed with code {code}")

    def _fallback(self, step, arena, io, observer) -> None:
        args: list[Any] = []
        for slot, conv in zip(step.reads, step.in_conv):
            if slot < 0:
                args.append(None)
                continue
            v = self._view(slot, arena, io)
            args.append(conv(v) if conv is not None else v)
        t0 = _clock() if observer is not None else 0.0
        results = step.impl.run(*args)
        if observer is not None:
            observer(step, _clock() - t0)
        for slot, conv, value in zip(step.writes, step.out_conv, results):
            value = conv(value) if conv is not None else value
            if value is None:
                continue
            dst = self._view(slot, arena, io)
            value = np.asarray(value)
            if dst is None or dst.shape != value.shape or dst.dtype != value.dtype:
                raise EngineMismatch(
                    f"graph '{self.graph_name}': node '{step.node.name}' ({step.node.op_type}) wrote "
                    f"{value.dtype}{value.shape} into a slot stored as "
                    f"{None if dst is None else (dst.dtype, dst.shape)}")
            np.copyto(dst, value)

    def _run_checked(self, feeds, wanted, observer):
        """Runs the program node by node and compares every value a node writes, right after
        it (the arena reuses bytes later), with the Python plan's."""
        env = self.plan.run_env(feeds)

        def compare(k, arena, io):
            step = self.plan.steps[k]
            for slot in step.writes:
                ref = env[slot]
                got = self._view(slot, arena, io)
                if ref is None or got is None:
                    continue
                ref = np.asarray(ref)
                if got.dtype != ref.dtype or got.shape != ref.shape or got.tobytes() != ref.tobytes():
                    where = "Python fallback" if self.program.nodes[k].fallback else "C"
                    bad = "" if got.shape != ref.shape or got.dtype != ref.dtype else \
                        f"; {int(np.count_nonzero(got.view(np.uint8) != ref.view(np.uint8)))} bytes differ"
                    raise EngineMismatch(
                        f"graph '{self.graph_name}': node {k} '{step.node.name}' ({step.node.op_type}, {where}) "
                        f"slot {slot}: engine {got.dtype}{got.shape} vs plan {ref.dtype}{ref.shape}{bad}")

        arena = self.external_arena if self.external_arena is not None else aligned_empty(max(self.arena_bytes, 1))
        return self._run(feeds, wanted, observer, arena, compare)


def _clock() -> float:
    import time
    return time.perf_counter()


def check_plan(plan, feeds: dict[int, np.ndarray]) -> None:
    """Runs ``plan``'s engine and its Python steps on ``feeds``; raises EngineMismatch at the
    first value whose bytes differ (tests)."""
    engine = plan.engine
    if engine is None:
        raise EngineMismatch("the plan has no C engine")
    saved = engine.check
    engine.check = True
    try:
        engine.run(feeds, [])
    finally:
        engine.check = saved


__all__ = ["Engine", "EngineMismatch", "Unsupported", "build_engine", "check_plan", "engine_mode",
           "ENGINE_ENV", "Q"]
