"""The execution plan graphFinalize compiles and graphExecute runs (QnnGraph_finalize/execute).

Finalize resolves once what every execute would otherwise look up again: each tensor gets a
slot in a flat list; each node becomes a ``Step`` with its op instance, the slots it reads and
writes, and pre-built converters around it:

- fixed-point inputs are dequantized to float32 before the op (the op computes in the real
  domain, see ``qnnemu/ops/base.py``), static ones once at finalize;
- real-valued outputs declared fixed-point are requantized from the op's float result with
  the node's rounding (``rounding_for``); float16 outputs are cast;
- data-movement ops (``quant_passthrough``) whose fixed-point inputs and outputs share one
  encoding run directly on the integer codes, which is exact;
- ops with ``handles_quant`` (Quantize, Dequantize, Convert, Cast) get the raw arrays.

float16 math (``QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION = QNN_PRECISION_FLOAT16``, seed 002 "QNN
HTP Precision"): the HTP converts float32 graph inputs to float16 and runs float16 math,
returning float32 outputs.  The emulator rounds every float32 value to float16 at op
boundaries -- graph inputs, static weights (once) and every op output -- while each op
computes internally in float32.  Graph outputs are the float16-rounded values as float32.

Requantization rounding differs between HTP ops; ``ROUNDING_BY_OP`` records what the
vendor's backend was seen to do (tests/test_quant_vendor.py checks it), everything else rounds
half to even.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..headers import Q
from . import dtypes
from .quant import Dequantizer, code_range, round_half_away, same_encoding

FLOAT32 = Q.QNN_DATATYPE_FLOAT_32
FLOAT16 = Q.QNN_DATATYPE_FLOAT_16

# op type -> rounding of its requantized outputs, as observed on the vendor's libQnnHtp.so
# (values at exact half-LSB ties; see tests/test_quant_vendor.py).
ROUNDING_BY_OP = {
    "Quantize": "half_away_from_zero",
    "ElementWiseAdd": "half_up",
    "ElementWiseMultiply": "half_up",
}
DEFAULT_ROUNDING = "half_even"

_ROUND: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "half_even": np.rint,
    "half_up": lambda y: np.floor(y + np.float32(0.5)),
    "half_away_from_zero": round_half_away,
}


def rounding_for(op_type: str) -> str:
    return ROUNDING_BY_OP.get(op_type, DEFAULT_ROUNDING)


class Requantize:
    """float result -> codes of one output tensor, with one rounding mode."""

    __slots__ = ("spec", "dtype", "round", "lo", "hi", "inv", "offset", "np_dtype", "mode")

    def __init__(self, spec, dtype: int, mode: str):
        self.spec, self.dtype, self.mode = spec, dtype, mode
        self.round = _ROUND[mode]
        self.lo, self.hi = code_range(dtype, spec.bitwidth)
        self.np_dtype = dtypes.numpy_dtype(dtype)
        # 32-bit codes do not fit float32 (2**31 - 1 rounds up to 2**31): the float64 path.
        per_tensor = (spec.axis is None and spec.block_scales is None
                      and dtypes.itemsize(dtype) < 4)
        self.inv = np.float32(1.0) / np.float32(spec.scale) if per_tensor else None
        self.offset = np.float32(spec.offset) if per_tensor else None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.inv is None:
            from .quant import scale_offset_arrays
            scale, offset = scale_offset_arrays(self.spec, x.shape, np.float64)
            y = self.round(np.asarray(x, np.float64) / scale) - offset
        else:
            y = np.multiply(x, self.inv, dtype=np.float32)
            y = self.round(y)
            y -= self.offset
        np.clip(y, self.lo, self.hi, out=y)
        return y.astype(self.np_dtype)


def _fp16_round(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


@dataclass
class Step:
    node: Any
    impl: Any
    reads: list[int]                       # slot per input (-1: absent optional input)
    writes: list[int]
    in_conv: list[Callable | None]
    out_conv: list[Callable | None]


@dataclass
class Plan:
    slots: dict[int, int]                  # tensor id -> slot
    statics: dict[int, np.ndarray]         # slot -> prepared static value
    steps: list[Step]
    input_conv: dict[int, Callable | None]  # tensor id -> converter applied to fed inputs
    n_slots: int
    fp16: bool
    notes: list[str] = field(default_factory=list)

    def run(self, feeds: dict[int, np.ndarray], wanted: list[int], observer=None) -> dict[int, np.ndarray]:
        env: list[Any] = [None] * self.n_slots
        for slot, value in self.statics.items():
            env[slot] = value
        slots = self.slots
        for tid, arr in feeds.items():
            conv = self.input_conv.get(tid)
            env[slots[tid]] = conv(arr) if conv is not None else arr
        timed = observer is not None
        for step in self.steps:
            args = []
            for slot, conv in zip(step.reads, step.in_conv):
                if slot < 0:  # an absent optional input before a present one
                    args.append(None)
                    continue
                v = env[slot]
                args.append(conv(v) if conv is not None else v)
            t0 = time.perf_counter() if timed else 0.0
            results = step.impl.run(*args)
            if timed:
                observer(step, time.perf_counter() - t0)
            for slot, conv, value in zip(step.writes, step.out_conv, results):
                env[slot] = conv(value) if conv is not None else value
        return {tid: env[slots[tid]] for tid in wanted}


def _static_value(t, consumer_raw: bool, fp16: bool) -> np.ndarray:
    """What a static tensor looks like to its consumers: real values unless they take codes."""
    data = t.data
    if t.dtype in dtypes.FIXED_POINT_TYPES and not consumer_raw:
        return Dequantizer(t.quant)(data) if t.quant is not None else data
    if fp16 and t.dtype == FLOAT32:
        return _fp16_round(data)
    return data


def compile_plan(graph, precision_fp16: bool = False) -> Plan:
    """Builds the plan of a graph whose nodes were all checked by graphAddNode."""
    fixed = dtypes.FIXED_POINT_TYPES
    slots: dict[int, int] = {}

    def slot_of(tid: int) -> int:
        if tid not in slots:
            slots[tid] = len(slots)
        return slots[tid]

    statics: dict[int, np.ndarray] = {}
    steps: list[Step] = []
    notes: list[str] = []
    for node in graph.nodes:
        cls = node.op_cls
        ins = [graph.tensor(i) if i is not None else None for i in node.inputs]
        outs = [graph.tensor(i) for i in node.outputs]
        raw = cls.handles_quant
        if not raw and cls.quant_passthrough:
            encodings = [(t.dtype, t.quant) for t in ins + outs if t is not None and t.dtype in fixed]
            if encodings and all(d == encodings[0][0] and same_encoding(q, encodings[0][1])
                                 for d, q in encodings) and all(
                    t is None or t.dtype in fixed or t.dtype in dtypes.INT_TYPES or t.dtype in dtypes.BOOL_TYPES
                    for t in ins + outs):
                raw = True
        in_conv: list[Callable | None] = []
        reads: list[int] = []
        for t in ins:
            if t is None:
                reads.append(-1)
                in_conv.append(None)
                continue
            s = slot_of(t.id)
            reads.append(s)
            if t.type == Q.QNN_TENSOR_TYPE_STATIC:
                # Statics are prepared once; a static read both raw and real keeps two slots.
                if raw and t.dtype in fixed:
                    s = slot_of(-t.id - 1)  # a separate slot for the codes
                    reads[-1] = s
                    statics[s] = t.data
                else:
                    statics[s] = _static_value(t, raw, precision_fp16)
                in_conv.append(None)
                continue
            if not raw and t.dtype in fixed:
                in_conv.append(Dequantizer(t.quant))
            else:
                in_conv.append(None)
        params_impl = cls(node.params, node.input_specs, node.output_specs)
        out_conv: list[Callable | None] = []
        writes: list[int] = []
        mode = rounding_for(node.op_type)
        for t in outs:
            writes.append(slot_of(t.id))
            if raw:
                out_conv.append(_cast_to(t.dtype) if t.dtype not in fixed else None)
            elif t.dtype in fixed:
                out_conv.append(Requantize(t.quant, t.dtype, mode))
            elif t.dtype == FLOAT32 and precision_fp16:
                out_conv.append(_fp16_round)
            else:
                out_conv.append(_cast_to(t.dtype))
        steps.append(Step(node, params_impl, reads, writes, in_conv, out_conv))
    input_conv: dict[int, Callable | None] = {}
    for t in graph.app_inputs():
        slot_of(t.id)
        input_conv[t.id] = _fp16_round if (precision_fp16 and t.dtype == FLOAT32) else None
    for t in graph.tensors.values():
        slot_of(t.id)
    if precision_fp16:
        notes.append("float32 tensors computed with float16 rounding at op boundaries")
    return Plan(slots, statics, steps, input_conv, len(slots), precision_fp16, notes)


def _cast_to(dtype: int):
    np_dtype = dtypes.numpy_dtype(dtype)

    def cast(x: np.ndarray) -> np.ndarray:
        return x if x.dtype == np_dtype else x.astype(np_dtype)
    return cast


__all__ = ["Plan", "Step", "compile_plan", "ROUNDING_BY_OP", "DEFAULT_ROUNDING", "rounding_for",
           "Requantize"]
