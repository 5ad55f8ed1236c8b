"""Lowering of the Python plan's steps to C steps (QnnGraph_finalize; issue 13's C engine).

One lowering function per op family registers for its QNN op types with ``@lowers``; every
``lower_*.py`` module of this package is imported by ``load_lowerings`` (nothing to list by
hand).  A lowering gets a ``LowerCtx`` for one ``plan.Step`` and emits C steps through it, or
raises ``Unsupported``: the step then runs as a Python fallback step, counted and logged.

The contract is bit identity with the Python step (qnnemu/core/plan.py): the converters around
an op (Dequantizer, Requantize, the float16 roundings, casts) are emitted here, by the context,
with C kernels that reproduce the Python ones bit for bit (csrc/engine.c); the op kernels of
each family reproduce the op.
"""
from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any

import numpy as np

from ...spec.quant import Dequantizer, Requantize
from .. import plan as plan_mod

LOWERINGS: dict[str, Callable[[LowerCtx], None]] = {}


class Unsupported(Exception):
    """A step the C engine does not reproduce (yet): it runs as a Python fallback step."""


# Lowerings of a plan wrapper type that several op types share (the integer pipeline's
# plan.IntegerAccumulation and plan.IntegerAdd): tried before the op type's own lowering.
IMPL_LOWERINGS: dict[type, Callable[[LowerCtx], None]] = {}


def lowers_impl(*impl_types: type):
    """Registers the decorated function as the lowering of steps whose ``impl`` is exactly one
    of ``impl_types`` (whatever their op type)."""
    def register(fn):
        for t in impl_types:
            IMPL_LOWERINGS[t] = fn
        return fn
    return register


def lowers(*op_types: str):
    """Registers the decorated function as the lowering of ``op_types``."""
    def register(fn):
        for op_type in op_types:
            LOWERINGS[op_type] = fn
        return fn
    return register


@functools.cache
def load_lowerings() -> dict[str, Callable]:
    """Imports every lower_*.py module of this package once; the registry they filled."""
    for info in pkgutil.iter_modules([os.path.dirname(__file__)]):
        if info.name.startswith("lower_"):
            importlib.import_module(f"{__package__}.{info.name}")
    return LOWERINGS


# numpy dtype -> the element type codes of csrc/engine.h
TYPE_CODES = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.uint16): 2, np.dtype(np.int16): 3,
              np.dtype(np.uint32): 4, np.dtype(np.int32): 5, np.dtype(np.float32): 6,
              np.dtype(np.float16): 7, np.dtype(np.float64): 8, np.dtype(np.int64): 9,
              np.dtype(np.uint64): 10, np.dtype(np.bool_): 11}
# Requantize rounding modes -> qe_k_requant's mode numbers
_REQUANT_MODES = {"half_even": 0, "half_up": 1, "half_away_from_zero": 2,
                  "fp16_half_away_from_zero": 3, "exact_half_away_from_zero": 4}
F32 = np.dtype(np.float32)


def type_code(dtype) -> int:
    code = TYPE_CODES.get(np.dtype(dtype))
    if code is None:
        raise Unsupported(f"element type {np.dtype(dtype)}")
    return code


def _cast_target(conv) -> np.dtype | None:
    """The dtype of a plan ``_cast_to`` converter, else None."""
    if getattr(conv, "__qualname__", "") == "_cast_to.<locals>.cast" and conv.__closure__:
        for cell in conv.__closure__:
            if isinstance(cell.cell_contents, np.dtype):
                return cell.cell_contents
    return None


class LowerCtx:
    """What a lowering sees of one step and how it emits C steps (docs/engine.md)."""

    def __init__(self, builder, index: int, step, impl=None, n_out: int | None = None):
        self.b = builder
        self.index = index
        self.step = step
        self.node = step.node
        self.impl = step.impl if impl is None else impl
        self.graph = builder.graph
        self.plan = builder.plan
        self.n_in = len(step.reads)
        self.n_out = len(step.writes) if n_out is None else n_out
        self.pending: list[tuple[int, Any, int]] = []   # (float buffer, converter, output k)
        self.emitted = 0

    # -- what the step reads and writes ------------------------------------------------------
    def present(self, i: int) -> bool:
        return self.step.reads[i] >= 0

    def in_shape(self, i: int) -> tuple[int, ...]:
        return self.b.slot_shape(self._read(i))

    def in_dtype(self, i: int) -> np.dtype:
        return self.b.slot_dtype(self._read(i))

    def out_shape(self, k: int) -> tuple[int, ...]:
        return self.b.slot_shape(self.step.writes[k])

    def out_dtype(self, k: int) -> np.dtype:
        return self.b.slot_dtype(self.step.writes[k])

    def static(self, i: int) -> np.ndarray | None:
        slot = self.step.reads[i]
        return self.b.static_value(slot) if slot >= 0 and slot in self.b.plan.statics else None

    def in_conv(self, i: int):
        return self.step.in_conv[i]

    def out_conv(self, k: int):
        """Output k's converter; None for float16 math's rounding of a value that is float16
        already (``redundant_rounding``)."""
        conv = self.step.out_conv[k]
        if conv is not None and self.index in self.b.fp16_moves:
            return None
        return conv

    def _read(self, i: int) -> int:
        slot = self.step.reads[i]
        if slot < 0:
            raise Unsupported(f"input {i} is absent")
        return slot

    # -- buffers -------------------------------------------------------------------------------
    def input_raw(self, i: int) -> int:
        if self.step.in_conv[i] is not None:
            raise Unsupported(f"input {i} has a converter ({_name(self.step.in_conv[i])})")
        return self.b.slot_buffer(self._read(i), self.index)

    def input_f32(self, i: int) -> int:
        slot = self._read(i)
        conv = self.step.in_conv[i]
        src = self.b.slot_buffer(slot, self.index)
        dtype, shape = self.b.slot_dtype(slot), self.b.slot_shape(slot)
        n = int(np.prod(shape, dtype=np.int64))
        if conv is None:
            if dtype != F32:
                raise Unsupported(f"input {i} is {dtype}, not float32")
            return src
        tmp = self.scratch(4 * n)
        self.b.convert(conv, src, dtype, tmp, F32, n, self.index, direction="in")
        return tmp

    def output_raw(self, k: int) -> int:
        conv = self.out_conv(k)
        if conv is not None and _cast_target(conv) != self.b.slot_dtype(self.step.writes[k]):
            raise Unsupported(f"output {k} has a converter ({_name(conv)})")
        return self.b.slot_buffer(self.step.writes[k], self.index)

    def output_f32(self, k: int) -> int:
        slot = self.step.writes[k]
        conv = self.out_conv(k)
        dtype = self.b.slot_dtype(slot)
        if (conv is None or _cast_target(conv) == F32) and dtype == F32:
            return self.b.slot_buffer(slot, self.index)
        if conv is None:
            raise Unsupported(f"output {k} is stored as {dtype} without a converter")
        if dtype == F32 and conv in _IN_PLACE_CONVERTERS:
            # float16 math: the kernel stores float32 into the output itself and the rounding
            # pass then rewrites it in place (element by element): no scratch copy, and the
            # values are still in cache when they are rounded
            dst = self.b.slot_buffer(slot, self.index)
            self.pending.append((dst, conv, k))
            return dst
        n = int(np.prod(self.b.slot_shape(slot), dtype=np.int64))
        tmp = self.scratch(4 * n)
        self.pending.append((tmp, conv, k))
        return tmp

    def fused_rounding(self, k: int) -> int:
        """How a GEMM-family kernel rounds float32 output ``k`` to float16 itself (csrc/kernels.c
        QE_ACT_ROUND: 1 ties away from zero, 2 ties to even), or 0: float16 math's output
        rounding (the plan's ``_fp16_round`` / ``_fp16_round_even``) of a float32 slot."""
        conv = self.step.out_conv[k]
        if self.b.slot_dtype(self.step.writes[k]) != F32:
            return 0
        return 1 if conv is plan_mod._fp16_round else 2 if conv is plan_mod._fp16_round_even else 0

    def output_f32_rounding(self, k: int) -> tuple[int, int]:
        """(buffer, rounding) of output ``k`` for a kernel that rounds its result to float16 as it
        finishes each block (``fused_rounding``): no rounding step of its own then, the values
        rounded while still in cache; (``output_f32(k)``, 0) when the rounding is not fused."""
        rounding = self.fused_rounding(k)
        if rounding:
            return self.b.slot_buffer(self.step.writes[k], self.index), rounding
        return self.output_f32(k), 0

    def const(self, array: np.ndarray) -> int:
        return self.b.const_buffer(array)

    def scratch(self, nbytes: int) -> int:
        return self.b.scratch_buffer(int(nbytes), self.index)

    def emit(self, kernel: str, bufs, ints=(), dbls=()) -> None:
        self.b.emit(kernel, bufs, ints, dbls)
        self.emitted += 1

    def finish(self) -> None:
        """The converters of the float32 outputs, after the op's kernels."""
        for tmp, conv, k in self.pending:
            slot = self.step.writes[k]
            n = int(np.prod(self.b.slot_shape(slot), dtype=np.int64))
            self.b.convert(conv, tmp, F32, self.b.slot_buffer(slot, self.index),
                           self.b.slot_dtype(slot), n, self.index, direction="out")
        self.pending = []


# Float16 math rounds every step's float32 result to float16 (qnnemu/core/plan.py).  A step that
# only moves values (these ops, unwrapped) rounds values that are float16 already when every
# float32 value it reads is: the rounding changes no byte (a rounded value is finite: NaN and
# infinities became +-65504), so the C program leaves it out, and a Reshape then shares its
# input's bytes instead of copying them.
FP16_PRESERVING_MOVES = frozenset({
    "Reshape", "Identity", "ExpandDims", "Squeeze", "Transpose", "Split", "StridedSlice", "UnPack",
    "Tile", "DepthToSpace", "SpaceToDepth", "ChannelShuffle", "Concat", "Pack", "Gather"})


def _rounds_to_fp16(conv) -> bool:
    return conv is plan_mod._fp16_round or conv is plan_mod._fp16_round_even


def redundant_roundings(plan, slot_dtype, multi_written) -> set[int]:
    """Indices of the steps whose float16 rounding is redundant (``FP16_PRESERVING_MOVES`` of
    float16 values, in step order, the values a step rounds counting as float16 for the steps
    after it); ``slot_dtype(slot)``: a slot's storage type; ``multi_written``: slots written by
    more than one step (a value carried between executes), never counted."""
    from ...ops import gather as gather_ops, shape as shape_ops  # (the op classes, unwrapped)
    plain = {getattr(shape_ops, name, None) for name in FP16_PRESERVING_MOVES} | {gather_ops.Gather}
    fp16: set[int] = set()
    moves: set[int] = set()
    for k, step in enumerate(plan.steps):
        floats = [(slot, conv) for slot, conv in zip(step.reads, step.in_conv)
                  if slot >= 0 and slot_dtype(slot) == F32]
        move = step.node.op_type in FP16_PRESERVING_MOVES and type(step.impl) in plain and floats \
            and all(slot in fp16 or _rounds_to_fp16(conv) for slot, conv in floats) \
            and all(_rounds_to_fp16(c) for c in step.out_conv) \
            and all(slot_dtype(w) == F32 for w in step.writes)
        if move:
            moves.add(k)
        for slot, conv in zip(step.writes, step.out_conv):
            if slot in multi_written or not (move or _rounds_to_fp16(conv)) or slot_dtype(slot) != F32:
                fp16.discard(slot)
            else:
                fp16.add(slot)
    return moves


# float32 -> float32 converters whose C twins (emit_converter) work element by element, so they
# may run with the same buffer as source and destination
_IN_PLACE_CONVERTERS = (plan_mod._fp16_round, plan_mod._fp16_round_even, plan_mod._fp16_island_output)


def _name(conv) -> str:
    return getattr(conv, "__qualname__", None) or type(conv).__name__


def emit_converter(builder, conv, src: int, src_dtype, dst: int, dst_dtype, n: int) -> None:
    """C steps computing ``dst = conv(src)`` for ``n`` elements exactly as the Python converter
    ``conv`` does; Unsupported for a converter without a C twin."""
    src_dtype, dst_dtype = np.dtype(src_dtype), np.dtype(dst_dtype)
    if type(conv) is Dequantizer:
        if conv.scale is None or conv.offset is None or dst_dtype != F32:
            raise Unsupported("a per-axis or blockwise dequantization")
        builder.emit("qe_k_dequant", (src, dst), (n, type_code(src_dtype)),
                     (float(conv.scale), float(conv.offset)))
        return
    if type(conv) is Requantize:
        if conv.inv is None or conv.offset is None or src_dtype != F32 or dst_dtype != conv.np_dtype \
                or dst_dtype.itemsize > 2 or conv.mode not in _REQUANT_MODES:
            raise Unsupported("a per-axis, 32-bit or unusual requantization")
        builder.emit("qe_k_requant", (src, dst),
                     (n, type_code(dst_dtype), _REQUANT_MODES[conv.mode], int(conv.lo), int(conv.hi)),
                     (float(conv.inv), float(conv.offset)))
        return
    if conv is plan_mod._fp16_round or conv is plan_mod._fp16_round_even:
        if src_dtype != F32 or dst_dtype != F32:
            raise Unsupported("float16 rounding of a non-float32 value")
        builder.emit("qe_k_fp16_round", (src, dst), (n, int(conv is plan_mod._fp16_round_even)))
        return
    if conv is plan_mod._fp16_island_output:
        if src_dtype != F32 or dst_dtype != F32:
            raise Unsupported("a float16 island of a non-float32 value")
        builder.emit("qe_k_fp16_round", (src, dst), (n, 0))
        builder.emit("qe_k_fp16_to_fp32", (dst, dst), (n,))
        return
    target = _cast_target(conv)
    if target is not None:
        if target != dst_dtype:
            raise Unsupported(f"a cast to {target} stored as {dst_dtype}")
        if target == src_dtype:
            builder.emit("qe_k_copy", (src, dst), (n * src_dtype.itemsize,))
            return
        if (src_dtype == F32 and target == np.dtype(np.float16)) or \
                (src_dtype == np.dtype(np.float16) and target == F32):
            builder.emit("qe_k_cast", (src, dst), (n, type_code(src_dtype), type_code(target)))
            return
        raise Unsupported(f"a cast {src_dtype} -> {target}")
    raise Unsupported(f"converter {_name(conv)}")


__all__ = ["LOWERINGS", "IMPL_LOWERINGS", "LowerCtx", "Unsupported", "lowers", "lowers_impl", "load_lowerings",
           "type_code", "emit_converter", "TYPE_CODES"]
