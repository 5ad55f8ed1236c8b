"""Float16 math for float32 graphs, per op and per HTP arch (QNN HTP backend documentation,
"QNN HTP Precision": the HTP converts float32 inputs to float16, runs float16 math and returns
float32 outputs; "float32 math is not supported by QNN HTP").

The execution plan (qnnemu/core/plan.py) decides per graph whether its float32 tensors run in
float16 math (``plan.float_math``) and then asks this module, per node, how (``rules_for``):

- which inputs enter as float32 (a graph input is otherwise rounded to float16 as it arrives,
  ``htp_fp16_round``), and which static inputs keep float32 (otherwise stored the IEEE way,
  ``htp_fp16_static``);
- how the op's result is rounded to float16: half away from zero, or half to even;
- whether the op runs a float16 kernel of its own here (``ReciprocalDivide``).

Everything here is what the vendor's libQnnHtp.so (QNN 2.51, x86-64) computes for the SoC of
each arch (docs/numerics.md "Float16 math"; tests/test_numerics_vendor.py pins it): ops whose
result is not listed compute exactly on the float16 operands (Conv2d, DepthWiseConv2d, MatMul,
FullyConnected: exact sums of exact products; LayerNorm and RmsNorm: exact normalization) and
round once.  Not reproduced: the vendor's transcendental approximations (Sigmoid, Tanh, Gelu,
Softmax, Exp, Log: within a few float16 ulps of the exact result) and the partial-sum
rounding of average pooling over padded borders.

The devices themselves differ between archs ("QNN HTP FP16 output difference between SM8550 and
SM8650": the v75 hardware "changed the associativity of some of the computations"), which the
vendor's x86 library does not show (bit-identical on v73, v75, v79, v81: docs/device-variants.md).
``QNNEMU_FLOAT16_ASSOCIATIVITY=device`` (default ``vendor``) switches on the device model of that
difference: MatMul, FullyConnected and Conv2d sum their contraction in blocks whose float32
partial sums are added in the arch's order (qnnemu/htp/soc.py ``float16_reduction_order``:
sequential up to v73, pairwise from v75) -- ``BlockedReduction``.  It runs on the Python path
(the C engine computes the vendor's order).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import QnnError
from ..headers import Q
from ..htp import soc as socs
from ..ops.base import HTP_FP16_MAX, htp_fp16_round
from .tensor import APP_INPUT_TYPES, is_static

FLOAT32 = Q.QNN_DATATYPE_FLOAT_32

# Ops that compute in float16 even where float32 graphs run float32 kernels (v68): their
# float32 inputs are rounded to float16 and their result converted back (htp_fp16_to_fp32).
FLOAT16_ON_FLOAT32_DEVICES = frozenset({"LayerNorm"})

# Static inputs an op keeps in float32 under float16 math: LayerNorm's gamma and beta (its
# other static inputs, and those of every other op, are stored as float16).
STATIC_FLOAT32_INPUTS: dict[str, tuple[int, ...]] = {"LayerNorm": (1, 2)}

# v73 and later: a same-shape ElementWiseAdd whose last dimension has at least this many
# elements runs the HTP's IEEE float16 add (ties to even); others round half away from zero.
EVEN_ADD_MIN_DEPTH = 16
EVEN_ADD_FROM_ARCH = 73
# A dynamic vector added along the last axis ([..., C] + [C] or [1, .., 1, C]), C a multiple
# of this, runs on the float32 graph inputs: the vendor does not round them to float16 first.
FLOAT32_BIAS_ADD_DEPTH = 32

# ElementWiseDivide multiplies by a float16 reciprocal that errs low: 1/b scaled by this
# factor, truncated to float16 (fitted to the vendor: 97% of its reciprocals; rounding to
# nearest gives 59%, plain truncation 93%).
RECIPROCAL_BIAS = 1.0 + 4e-5

# The device model of the per-arch float16 reduction order (module docstring): "vendor" (the
# vendor's x86 library: one order on every arch) or "device".
ASSOCIATIVITY_ENV = "QNNEMU_FLOAT16_ASSOCIATIVITY"
ASSOCIATIVITY_VALUES = ("vendor", "device")
# op -> (the input holding the contraction, its axis: None = the op decides), the bias input
BLOCKED_REDUCTION_OPS = {"MatMul": (0, None), "FullyConnected": (0, -1), "Conv2d": (0, -1)}
BIAS_INPUT = 2


def associativity() -> str:
    """QNNEMU_FLOAT16_ASSOCIATIVITY: "vendor" (unset) or "device"; another value fails the
    finalize that reads it (rule QNNEMU-graphFinalize-float16-associativity-env)."""
    import os
    text = os.environ.get(ASSOCIATIVITY_ENV, "").strip().lower() or "vendor"
    if text not in ASSOCIATIVITY_VALUES:
        raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                       f"environment: {ASSOCIATIVITY_ENV}: {text!r} is not one of {', '.join(ASSOCIATIVITY_VALUES)}",
                       rule="QNNEMU-graphFinalize-float16-associativity-env")
    return text


@dataclass
class Float16Rules:
    """How one node runs under float16 math (see the module docstring)."""
    ties: str = "away"                                       # rounding of the op's result
    float32_inputs: set[int] = field(default_factory=set)    # graph inputs taken unrounded
    float32_statics: set[int] = field(default_factory=set)   # static inputs kept float32
    kernel: Callable[[Any], Any] | None = None               # wraps the op's impl


def _dims(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.dims)


def _add_rules(ins, arch: int) -> Float16Rules:
    a, b = ins
    da, db = _dims(a), _dims(b)
    rules = Float16Rules()
    if da == db and da and da[-1] >= EVEN_ADD_MIN_DEPTH and arch >= EVEN_ADD_FROM_ARCH:
        rules.ties = "even"
    vector = len(da) >= 1 and len(db) >= 1 and db[-1] == da[-1] and all(d == 1 for d in db[:-1]) \
        and len(db) <= len(da) and math.prod(db) < math.prod(da)
    if vector and da[-1] % FLOAT32_BIAS_ADD_DEPTH == 0 and not is_static(a) and not is_static(b):
        rules.float32_inputs = {0, 1}
        rules.kernel = Float32BiasAdd
    return rules


def rules_for(node, ins: list, arch: int) -> Float16Rules:
    """The float16 behaviour of ``node`` (inputs ``ins``, graph Tensors or None) on HTP ``arch``."""
    op = node.op_type
    if op == "ElementWiseAdd" and len(ins) == 2 and all(t is not None and t.dtype == FLOAT32 for t in ins):
        rules = _add_rules(ins, arch)
    else:
        rules = Float16Rules()
    if op == "ElementWiseDivide":
        rules.kernel = ReciprocalDivide
    if op in BLOCKED_REDUCTION_OPS and arch >= socs.FLOAT16_MATH_FROM_ARCH and associativity() == "device" \
            and all(t is None or t.dtype == FLOAT32 for t in ins):
        order = socs.float16_reduction_order(arch)
        rules.kernel = lambda impl, node=node: BlockedReduction(impl, node, order)
    rules.float32_statics = {i for i in STATIC_FLOAT32_INPUTS.get(op, ())
                             if i < len(ins) and ins[i] is not None and is_static(ins[i])
                             and ins[i].dtype == FLOAT32}
    return rules


def is_graph_input(t) -> bool:
    return t is not None and t.type in APP_INPUT_TYPES


def htp_fp16_trunc(x: np.ndarray) -> np.ndarray:
    """float32 values truncated (toward zero) to the HTP's float16 grid, saturating."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    r = (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    small = a < np.float32(2.0 ** -14)
    if small.any():
        r[small] = (np.floor(a[small].astype(np.float64) * 2.0 ** 24) * 2.0 ** -24).astype(np.float32)
    return np.copysign(htp_fp16_round(r), x, dtype=np.float32)


def _htp_fp16_half_up(v: np.ndarray) -> np.ndarray:
    """float64 values to the HTP's float16 grid, ties toward +inf, saturating."""
    v = np.asarray(v, dtype=np.float64)
    q = np.ldexp(1.0, np.frexp(np.maximum(np.abs(v), 2.0 ** -14))[1] - 11)   # the float16 quantum
    return np.clip(np.floor(v / q + 0.5) * q, -HTP_FP16_MAX, HTP_FP16_MAX)


class Float32BiasAdd:
    """ElementWiseAdd of a dynamic [C] vector (C a multiple of FLOAT32_BIAS_ADD_DEPTH) along the
    last axis: the vendor adds the float32 values (its graph inputs are not rounded to float16
    first: ``float32_inputs``) and rounds the sum to float16 with ties toward +inf -- toward
    -inf when both addends are negative (every tie of 4096 probed sums)."""

    def __init__(self, impl):
        self.impl = impl

    def run(self, a, b):
        a64 = np.asarray(a, dtype=np.float64)
        b64 = np.asarray(b, dtype=np.float64)
        total = a64 + b64
        both_negative = (a64 < 0) & (b64 < 0)
        up = _htp_fp16_half_up(total)
        down = -_htp_fp16_half_up(-total)
        return (np.where(both_negative, down, up).astype(np.float32),)


class BlockedReduction:
    """The device model's float16 reduction (module docstring): the op's contraction split into
    blocks of ``soc.FLOAT16_REDUCTION_BLOCK`` input channels -- the op run once per block on its
    input with the other channels zeroed (so any geometry, stride or group is kept), bias 0 --
    each block's result a float32 partial sum, the partials added in ``order`` ("sequential" or
    "pairwise") in float32, then the bias; the plan rounds the result to float16 as before."""

    def __init__(self, impl, node, order: str):
        self.impl = impl
        self.order = order
        self.transpose_in0 = bool(node.params.get("transpose_in0", False))
        self.op = node.op_type

    def _axis(self, x: np.ndarray) -> int:
        if self.op == "MatMul":
            return x.ndim - 2 if self.transpose_in0 else x.ndim - 1
        return x.ndim - 1

    def run(self, x, *rest):
        x = np.asarray(x, dtype=np.float32)
        axis = self._axis(x)
        k = x.shape[axis]
        block = socs.FLOAT16_REDUCTION_BLOCK
        bias = rest[BIAS_INPUT - 1] if len(rest) >= BIAS_INPUT and rest[BIAS_INPUT - 1] is not None else None
        others = list(rest)
        if bias is not None:
            others[BIAS_INPUT - 1] = np.zeros_like(np.asarray(bias, dtype=np.float32))
        if k <= block:
            return self.impl.run(x, *rest)
        partials = []
        for start in range(0, k, block):
            part = np.zeros_like(x)
            index = [slice(None)] * x.ndim
            index[axis] = slice(start, start + block)
            part[tuple(index)] = x[tuple(index)]
            partials.append(np.asarray(self.impl.run(part, *others)[0], dtype=np.float32))
        total = self._sum(partials)
        if bias is not None:
            total = (total + np.asarray(bias, dtype=np.float32)).astype(np.float32)
        return (total,)

    def _sum(self, partials: list[np.ndarray]) -> np.ndarray:
        if self.order == "sequential":
            total = partials[0]
            for p in partials[1:]:
                total = (total + p).astype(np.float32)
            return total
        while len(partials) > 1:
            pairs = [(partials[i] + partials[i + 1]).astype(np.float32) for i in range(0, len(partials) - 1, 2)]
            partials = pairs + ([partials[-1]] if len(partials) % 2 else [])
        return partials[0]


class ReciprocalDivide:
    """ElementWiseDivide in float16 math: a * r(b), r(b) the float16 reciprocal of b the way the
    vendor's kernel makes it (slightly low: ``RECIPROCAL_BIAS``, truncated); the product of two
    float16 values is exact in float32 and the plan rounds it half away from zero.  Division by
    zero gives the largest float16 value with the dividend's sign (0 / 0: 0)."""

    def __init__(self, impl):
        self.impl = impl

    def run(self, a, b):
        a = np.asarray(a, dtype=np.float32)
        b = np.asarray(b, dtype=np.float32)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            r = np.float32(1.0) / np.abs(b) * np.float32(RECIPROCAL_BIAS)
            r = np.copysign(htp_fp16_trunc(np.nan_to_num(r, posinf=np.inf)), b)
            return (np.multiply(a, r, dtype=np.float32),)


__all__ = ["BlockedReduction", "associativity",
           "Float16Rules", "rules_for", "FLOAT16_ON_FLOAT32_DEVICES", "Float32BiasAdd", "is_graph_input",
           "htp_fp16_trunc", "ReciprocalDivide", "STATIC_FLOAT32_INPUTS", "RECIPROCAL_BIAS"]
