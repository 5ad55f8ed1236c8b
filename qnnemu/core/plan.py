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

Float16 math (QNN HTP backend documentation, "QNN HTP Precision": the HTP converts float32
graph inputs to float16 and runs float16 math, returning float32 outputs; "float32 math is
not supported by QNN HTP"): ``float_math`` decides per graph -- the device's arch (v69 and
later; v68 computes float32), unless QNNEMU_FLOAT_MATH or the graph's ``qnnemu_float_math``
finalize config says otherwise; the deprecated PRECISION config is ignored, as by the vendor.
In float16 math each step rounds the float32 graph inputs it reads, static weights are stored
as float16 once, every op result is rounded and graph outputs leave through the HTP's
float16 -> float32 conversion; qnnemu/core/float16.py says how each op deviates from that
(rounding of ties, float32 operands, its own kernels) per arch, and which ops compute in
float16 even on v68 (docs/numerics.md "Float16 math").

Updatable tensors (QnnTensor_updateGraphTensors, QnnContext_applyBinarySection): static values
are prepared once here, so an update of a tensor's data or quantization must replace what was
derived from it.  ``refresh_plan`` makes a new plan whose steps for the nodes reading or
writing the updated tensors are recompiled (with their static values), sharing every other
step; the graph swaps plans in one assignment.  ``Plan.run`` is the same code either way.

Native KV cache tensors (``QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT``, qnnemu/htp/kvcache.py): the
buffers hold the HMX weight layout, the ops compute on the logical (flat) values, so the plan
converts at the graph boundary -- native inputs to flat in ``input_conv``, native outputs back in
``output_conv`` -- and nothing else changes.  Variable batch (``Graph.execute(batch=n)``) runs
this plan n times on row slices; ``Plan.run`` itself always sees the prepared shapes.

Requantization rounding differs between HTP ops; ``ROUNDING_BY_OP`` records what the
vendor's backend was seen to do (tests/test_quant_vendor.py checks it), everything else rounds
half to even.

Where the HTP computes in fixed point in a way the float path does not reproduce, the step runs
on the integer codes instead (docs/numerics.md, "Fixed point"):

- ``IntegerAccumulation`` (``INTEGER_ACCUMULATION_OPS``: Conv2d, DepthWiseConv2d,
  FullyConnected, MatMul with 8/16-bit activations and 8-bit weights): the exact integer
  accumulator, requantized by ``quant.AccRequant`` (int8 weight storage, 11-significant-bit
  multiplier, the HTP's shifts and zero-point terms);
- ``IntegerAdd`` (``INTEGER_ELEMENTWISE_OPS``: ElementWiseAdd, all 8-bit or all 16-bit):
  fixed-point multipliers per input.

Relu folding (QNN HTP backend documentation, graph custom configs:
QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF unset, the
default): a Relu / ReluMinMax after a Conv2d, DepthWiseConv2d, TransposeConv2d or FullyConnected
(``folded_activations``) takes its codes from the producer's step, which requantizes its
accumulator (or real result) once more, straight into the activation's encoding -- no rounding
to and no clipping by the producer's own encoding; the activation's step only hands them on
(``FoldedActivation``).  A producer whose codes nothing else reads skips them.  With the config
set, every tensor keeps its requested encoding (docs/numerics.md "Relu folded into convolutions").

Floating-point exceptions (NaN/inf data, overflowing casts, degenerate scales) never become
numpy warnings, which would print on the application's stderr: compiling and running a plan
happens under ``np.errstate`` with divide/overflow/invalid routed to the ``qnnemu.numerics``
Python logger at DEBUG (``routed_fp_errors``).  It is thread-local and scoped to the plan, not
a process-wide filter.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import rules
from ..errors import QnnError
from ..headers import Q
from ..htp.settings import device_model, graph_settings
from ..ops import _fast_qgemm
from ..ops.base import htp_fp16_round, htp_fp16_static, htp_fp16_to_fp32
from ..spec import dtypes
from ..spec.quant import (
    DEFAULT_ROUNDING,
    ROUNDING_BY_OP,
    AccRequant,
    Dequantizer,
    Requantize,
    code_range,
    htp_int8_operand,
    htp_int8_weight_codes,
    htp_int8_weights,
    rounding_for,
    same_encoding,
)
from . import float16, threads
from .constfold import ConstantFolded, FoldedView, fold_constants
from .tensor import is_static

FLOAT32 = Q.QNN_DATATYPE_FLOAT_32
FLOAT16 = Q.QNN_DATATYPE_FLOAT_16

_FP_LOG = logging.getLogger("qnnemu.numerics")
_F32_MAX = float(np.finfo(np.float32).max)


def _log_fp_error(kind: str, flag: int) -> None:
    if _FP_LOG.isEnabledFor(logging.DEBUG):
        _FP_LOG.debug("floating-point %s in a graph's plan (numpy flag %d)", kind, flag)


def routed_fp_errors(fn):
    """Runs ``fn`` with numpy's floating-point errors (divide, overflow, invalid) sent to the
    ``qnnemu.numerics`` logger instead of warnings; underflow stays ignored (numpy's default)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(divide="call", over="call", invalid="call", under="ignore", call=_log_fp_error):
            return fn(*args, **kwargs)
    return wrapper

# -- accumulating ops in integers ---------------------------------------------------------------

# Quantized ops whose requantization follows the HTP's integer pipeline (AccRequant) instead
# of float dequantize -> op -> requantize; see docs/numerics.md "Accumulating ops".  Remove an
# entry to get the float path back for that op.
INTEGER_ACCUMULATION_OPS = {"Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul"}
# Elementwise ops computed in the HTP's fixed point (IntegerAdd) when inputs and output are all
# 8-bit or all 16-bit fixed point.
INTEGER_ELEMENTWISE_OPS = {"ElementWiseAdd"}
_EIGHT_BIT = {Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8}
_SIXTEEN_BIT = {Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16}
_INT32 = {Q.QNN_DATATYPE_SFIXED_POINT_32, Q.QNN_DATATYPE_UFIXED_POINT_32}
_EXACT = float(1 << 24)   # float32 sums of integers are exact below this
# From v73 on (the vendor's libQnnHtp.so with SM8550 .. SM8850; v68 and v69 agree with each
# other) an accumulating op with a 16-bit output requantizes its accumulator in one step with a
# float32-precision multiplier (AccRequant ``fine``, 24 significant bits) instead of v68's
# shifted 11-bit one: docs/numerics.md "Accumulating ops".
WIDE_OUTPUT_FINE_FROM_ARCH = 73
WIDE_OUTPUT_MULTIPLIER_BITS = 24
# When the worst-case partial sum of an accumulating op can pass 2**24, True splits the input
# into digits and runs one float32 GEMM per digit (exact, as the HTP's int32 accumulator);
# False runs one GEMM, whose float32 rounding can move the accumulator by a few units and so
# an output code by one where it sits on a requantization boundary.  Environment:
# QNNEMU_EXACT_ACCUMULATION=0/1.  Only for the float32 formula: with the C kernels on the
# accumulator is the exact integer one of csrc/eng_qgemm.c (docs/engine-qgemm.md).
EXACT_ACCUMULATION = os.environ.get("QNNEMU_EXACT_ACCUMULATION", "0") not in ("0", "")


def _per_tensor(q) -> bool:
    return q is not None and q.axis is None and q.block_scales is None


class IntegerAccumulation:
    """A quantized Conv2d / DepthWiseConv2d / FullyConnected / MatMul run on integer codes.

    The accumulator sum((x_code + x_offset) * w) comes from the C integer GEMM (``cacc``,
    exact, the one the C engine's step runs) when the C kernels are on, else from the wrapped
    op run on integer-valued float32 operands (split into base-2**d digits of the input when a
    single float32 pass could exceed 2**24); AccRequant turns it into output codes as the HTP
    does.
    Static 8-bit weights are stored the HTP's way first (htp_int8_weights)."""

    def __init__(self, node, impl, ins, out, channel_axis: int, fine: bool = False, arch: int | None = None):
        self.impl = impl
        x, w = ins[0], ins[1]
        self.x_offset = float(x.quant.offset)
        self.wide = x.dtype in _SIXTEEN_BIT
        self.w_static = is_static(w)
        self.transpose_in0 = bool(node.params.get("transpose_in0", False))
        self.transpose_in1 = bool(node.params.get("transpose_in1", False))
        wq = w.quant
        rank = len(w.dims)
        self._w_f32: np.ndarray | None = None
        self._w_values: np.ndarray | None = None
        wabs = None
        if self.w_static:
            # One C pass from the codes (int16 values, sums; finalize time of a quantized
            # model), else the float64 route whose values those are exactly.
            fast = htp_int8_weight_codes(w.data, wq.offset, channel_axis, requantize=not fine) \
                if wq.axis is None or wq.axis == channel_axis else None
            if fast is not None:
                w_int, factor, wsum, wabs = fast
                self._w_values = w_int
                self.wl1 = float(wabs.max())
                self.wsum = wsum.astype(np.float64)
            else:
                off = np.asarray(wq.offset, dtype=np.float64)
                if wq.axis is not None:
                    shape = [1] * rank
                    shape[wq.axis] = -1
                    off = off.reshape(shape)
                w_int = np.asarray(w.data, dtype=np.float64) + off
                if fine:   # the strided depthwise kernels take the weights as they are
                    factor = np.ones(w_int.shape[channel_axis])
                else:
                    w_int, factor = htp_int8_weights(w_int, channel_axis)
                self._w_f32 = w_int.astype(np.float32)
                # the largest sum of |w| over one channel's reduction: bounds every partial sum
                self.wl1 = float(np.abs(np.moveaxis(w_int, channel_axis, -1)).reshape(
                    -1, w_int.shape[channel_axis]).sum(axis=0).max()) if w_int.size else 0.0
                self.wsum = np.moveaxis(w_int, channel_axis, -1).reshape(
                    -1, w_int.shape[channel_axis]).sum(axis=0)
        else:
            factor = np.ones(1)
            self.w_offset = float(wq.offset)
        ws = wq.scale if wq.axis is None else np.asarray(wq.scale)
        nch = len(factor)
        ws = np.broadcast_to(np.asarray(ws, dtype=np.float64), (nch,))
        bias = None
        if len(ins) > 2 and ins[2] is not None:
            b = ins[2]
            bq = b.quant
            bscale = np.broadcast_to(np.asarray(bq.scale, dtype=np.float64), (nch,))
            boff = np.broadcast_to(np.asarray(bq.offset, dtype=np.float64), (nch,))
            unit = np.float64(np.float32(x.quant.scale)) * ws.astype(np.float32).astype(np.float64) * factor
            if is_static(b):
                bias = (np.asarray(b.data, dtype=np.float64) + boff) * bscale / unit
                # integer codes in units of xs * ws stay exact integers
                same = np.float32(bscale) == (np.float32(x.quant.scale) * ws.astype(np.float32))
                bias = np.where(same & (factor == 1.0),
                                np.asarray(b.data, dtype=np.float64) + boff, bias)
        lo, hi = code_range(out.dtype, out.quant.bitwidth)
        self.fine, self.arch = fine, arch
        self.requant_args = (x.quant.scale, x.quant.offset, ws, out.quant.scale, out.quant.offset,
                             self.wide, lo, hi, *self._mode(out.dtype))
        self.requant = AccRequant(x.quant.scale, x.quant.offset, ws, factor, out.quant.scale,
                                  out.quant.offset, bias, self.wide, lo, hi, *self._mode(out.dtype))
        self.np_dtype = dtypes.numpy_dtype(out.dtype)
        self._fold_args = (x.quant.scale, x.quant.offset, ws, factor, bias)
        # The exact C accumulator (csrc/eng_qgemm.c, shared with the C engine's step): used
        # whenever the C kernels are enabled; the float32 formula of ``_acc`` otherwise.
        self.out_shape = tuple(int(d) for d in out.dims)
        self.cacc = _fast_qgemm.prepare(node.op_type, node.params, x.dims, dtypes.numpy_dtype(x.dtype),
                                        self.x_offset, w_int, self.out_shape, self.transpose_in1, wabs) \
            if self.w_static else None
        # Folded activations (``fold_into``): further outputs requantized from the same
        # accumulator straight into each folded Relu's encoding; ``keep_own`` False skips the
        # op's own codes when nothing but those activations reads them.
        self.folded: list[tuple[AccRequant, np.dtype]] = []
        self.keep_own = True

    @property
    def w_int(self) -> np.ndarray:
        """The static integer weights as float32 (the float formula's GEMM operand), made on
        first use: with the C kernels on only the reference path reads them."""
        if self._w_f32 is None and self._w_values is not None:
            self._w_f32 = self._w_values.astype(np.float32)
        assert self._w_f32 is not None, "static weights only"
        return self._w_f32

    def fold_into(self, outs, keep_own: bool) -> None:
        """Also requantize the accumulator into each tensor of ``outs`` (folded Relu outputs,
        clamped by their encodings only); only for static weights (one fixed multiplier)."""
        assert self.w_static, "folding needs the static weights' fixed multipliers"
        xs, xo, ws, factor, bias = self._fold_args
        for t in outs:
            lo, hi = code_range(t.dtype, t.quant.bitwidth)
            self.folded.append((AccRequant(xs, xo, ws, factor, t.quant.scale, t.quant.offset, bias,
                                           self.wide, lo, hi, *self._mode(t.dtype)), dtypes.numpy_dtype(t.dtype)))
        self.keep_own = keep_own

    def _mode(self, out_dtype) -> tuple[bool, int | None]:
        """(``fine``, multiplier bits) of AccRequant for an output of ``out_dtype``: strided
        depthwise kernels run the fine path everywhere; from v73 on a 16-bit output is
        requantized in one step with a float32 multiplier (``WIDE_OUTPUT_FINE_FROM_ARCH``)."""
        if self.fine:
            return True, None
        if self.arch is not None and self.arch >= WIDE_OUTPUT_FINE_FROM_ARCH and out_dtype in _SIXTEEN_BIT:
            return True, WIDE_OUTPUT_MULTIPLIER_BITS
        return False, None

    def _acc(self, x_int: np.ndarray, w: np.ndarray, wl1: float) -> np.ndarray:
        """sum(x_int * w) exactly (float64), with float32 op passes: |partial sums| stay below
        max|x| * ``wl1`` (the largest per-channel sum of |w|), kept under 2**24 per pass."""
        run = self.impl.run
        xmax = max(-float(x_int.min()), float(x_int.max())) if x_int.size else 0.0
        bound = max(wl1, 1.0)
        if xmax * bound < _EXACT or not EXACT_ACCUMULATION:
            return run(x_int, w)[0].astype(np.float64)
        digit_bits = max(int(np.floor(np.log2((_EXACT - 1) / bound))), 1)
        base = float(1 << digit_bits)
        acc = None
        rest = x_int
        weight = 1.0
        while True:
            if float(np.abs(rest).max()) * bound < _EXACT:
                part = run(rest.astype(np.float32), w)[0].astype(np.float64)
                acc = part * weight if acc is None else acc + part * weight
                return acc
            low = np.mod(rest, base)
            part = run(low.astype(np.float32), w)[0].astype(np.float64)
            acc = part * weight if acc is None else acc + part * weight
            rest = (rest - low) / base
            weight *= base

    def run(self, x, w, b=None):
        w_f: np.ndarray | None = None     # static weights: self.w_int, made only when needed
        if self.w_static:
            wl1, wsum = self.wl1, self.wsum
            requant = self.requant
            acc = self.cacc(x) if self.cacc is not None else None
        else:
            # a dynamic in1: columns outside int8 are requantized now (htp_int8_operand)
            k_axis = -1 if self.transpose_in1 else -2
            w_int, factor = htp_int8_operand(np.asarray(w, dtype=np.float64) + self.w_offset, k_axis)
            w_f = w_int.astype(np.float32)
            wl1 = float(np.abs(w_int).sum(axis=k_axis).max()) if w_int.size else 0.0
            wsum = np.expand_dims(w_int.sum(axis=k_axis), -2)
            factor = np.expand_dims(np.squeeze(factor, axis=k_axis), -2)   # [..., 1, n]
            requant = self.requant if np.all(factor == 1.0) else self._dynamic_requant(factor)
            acc = _fast_qgemm.dynamic_matmul(x, self.x_offset, w_int, self.transpose_in1, self.out_shape,
                                             self.transpose_in0)
        if acc is None:
            # codes + offset are integers below 2**17: exact in float32, the GEMM's operand type
            x_int = x.astype(np.float32)
            x_int += np.float32(self.x_offset)
            acc = self._acc(x_int, self.w_int if w_f is None else w_f, wl1)
        if not self.folded:
            return (requant(acc, wsum).astype(self.np_dtype),)
        # AccRequant works in place on a float64 accumulator: every requantization but the
        # last gets a copy.
        last = len(self.folded) - 1
        own = requant(acc.copy(), wsum).astype(self.np_dtype) if self.keep_own else None
        return (own, *(rq(acc.copy() if k < last else acc, wsum).astype(dt)
                       for k, (rq, dt) in enumerate(self.folded)))

    def _dynamic_requant(self, factor):
        xs, xo, ws, ys, yo, wide, lo, hi, fine, bits = self.requant_args
        ws = np.broadcast_to(np.asarray(ws, dtype=np.float64).reshape(-1)[0], factor.shape)
        return AccRequant(xs, xo, ws, factor, ys, yo, None, wide, lo, hi, fine, bits)


def _integer_accumulation(node, impl, ins, outs, arch: int | None = None):
    """An IntegerAccumulation for a node the HTP requantizes in integers, else None."""
    if node.op_type not in INTEGER_ACCUMULATION_OPS or len(outs) != 1 or len(ins) < 2:
        return None
    x, w, out = ins[0], ins[1], outs[0]
    if x is None or w is None:
        return None
    if not (x.dtype in _EIGHT_BIT | _SIXTEEN_BIT and _per_tensor(x.quant)
            and out.dtype in _EIGHT_BIT | _SIXTEEN_BIT and _per_tensor(out.quant)
            and w.dtype in _EIGHT_BIT and w.quant is not None and w.quant.block_scales is None):
        return None
    rank = len(w.dims)
    fine = False
    if node.op_type in ("Conv2d", "DepthWiseConv2d"):
        if rank != 4:
            return None
        # strided depthwise: a finer multiplier and no shift (AccRequant ``fine``)
        fine = node.op_type == "DepthWiseConv2d" and any(
            int(v) != 1 for v in np.ravel(node.params.get("stride", 1)))
        channel_axis = 3
    elif node.op_type == "FullyConnected":
        channel_axis = 0
    else:
        t1 = bool(node.params.get("transpose_in1", False))
        channel_axis = rank - 2 if t1 else rank - 1
        if not is_static(w) and not _per_tensor(w.quant):
            return None
    if w.quant.axis is not None and w.quant.axis != channel_axis:
        return None
    if len(ins) > 2 and ins[2] is not None:
        b = ins[2]
        if not is_static(b) or b.dtype not in _INT32 or b.quant is None \
                or b.quant.block_scales is not None:
            return None
    return IntegerAccumulation(node, impl, ins, out, channel_axis, fine, arch)


class IntegerAdd:
    """ElementWiseAdd of two fixed-point inputs the way the HTP computes it (docs/numerics.md,
    "ElementWiseAdd"): each input's codes times a fixed-point multiplier M = input scale /
    output scale, summed and rounded half up.

    - 16-bit: both multipliers are int16 sharing one shift ``k`` (the largest keeping them below
      2**15); y = floor((m_a * (a + a_off) + m_b * (b + b_off)) / 2**k + 0.5) - y_off.
    - 8-bit: each multiplier has 13 fractional bits (fewer from 2 up: at most 14 significant
      bits); the constant -y_off + m_a * a_off + m_b * b_off is rounded to 1/32;
      y = floor(m_a * a + m_b * b + constant + 0.5)."""

    def __init__(self, ins, out):
        f32 = np.float32
        ys = f32(out.quant.scale)
        with np.errstate(over="ignore", under="ignore", divide="ignore"):
            # a tiny output scale: multipliers saturate to the largest float32
            ms = [min(float(f32(t.quant.scale) / ys), _F32_MAX) for t in ins]
        offs = [float(t.quant.offset) for t in ins]
        y_off = float(out.quant.offset)
        self.wide = out.dtype in _SIXTEEN_BIT
        if self.wide:
            top = max(ms)
            k = 0
            while top * 2.0 ** (k + 1) < 32767.5 and k < 64:   # top 0: both input scales underflow
                k += 1
            while k > -30 and top * 2.0 ** k >= 32767.5:
                k -= 1
            self.mult = [float(np.rint(m * 2.0 ** k)) / 2.0 ** k for m in ms]
            self.const = -y_off + sum(m * o for m, o in zip(self.mult, offs))
        else:
            self.mult = []
            for m in ms:
                _, e = np.frexp(m)                      # m in [2**(e-1), 2**e)
                frac = min(13, 14 - int(e))
                self.mult.append(float(np.rint(m * 2.0 ** frac)) / 2.0 ** frac)
            exact = -y_off + sum(m * o for m, o in zip(self.mult, offs))
            self.const = float(np.rint(exact * 32.0)) / 32.0
        self.lo, self.hi = code_range(out.dtype, out.quant.bitwidth)
        self.np_dtype = dtypes.numpy_dtype(out.dtype)

    def run(self, a, b):
        acc = np.asarray(a, dtype=np.float64) * self.mult[0]
        acc = acc + np.asarray(b, dtype=np.float64) * self.mult[1]
        y = np.floor(acc + (self.const + 0.5))
        return (np.clip(y, self.lo, self.hi).astype(self.np_dtype),)


def _integer_add(node, ins, outs):
    if node.op_type != "ElementWiseAdd" or "ElementWiseAdd" not in INTEGER_ELEMENTWISE_OPS:
        return None
    if len(ins) != 2 or len(outs) != 1 or any(t is None for t in ins):
        return None
    for bits in (_EIGHT_BIT, _SIXTEEN_BIT):
        if all(t.dtype in bits and _per_tensor(t.quant) for t in ins + outs):
            return IntegerAdd(ins, outs[0])
    return None


# -- relu folded into convolutions (HTP graph config FOLD_RELU_ACTIVATION_INTO_CONV_OFF) ----------

# Producers the HTP folds a following Relu / ReluMinMax into, and the activations it folds, as
# the vendor's libQnnHtp.so (QNN 2.51) does with folding on (docs/numerics.md "Relu folded into
# convolutions"): Conv2d, DepthWiseConv2d (strided too), TransposeConv2d and FullyConnected were
# seen folded; MatMul, Relu6 and Relu1 were not.
FOLDING_PRODUCERS = {"Conv2d", "DepthWiseConv2d", "TransposeConv2d", "FullyConnected"}
FOLDED_ACTIVATIONS = {"Relu", "ReluMinMax"}


def _relu_encoding_folds(node, out) -> bool:
    """Whether the HTP folds activation ``node`` given its output encoding (probed on the
    vendor): a Relu only when its output's lowest code is exactly real 0 (zero point at the
    bottom of the code range); a ReluMinMax when its output's lowest real value is at least
    min(min_value, 0).  Folded, the activation's own clamp is dropped: the encoding's range
    is the only clamp (a ReluMinMax max_value below the encoding's top is not applied)."""
    lo, _ = code_range(out.dtype, out.quant.bitwidth)
    bottom = float(np.float32(out.quant.scale)) * (lo + int(out.quant.offset))
    if node.op_type == "Relu":
        return lo + int(out.quant.offset) == 0
    floor_value = float(np.float32(node.params.get("min_value", 0.0)))
    return bottom >= min(floor_value, 0.0)


def folded_activations(graph) -> dict[int, int]:
    """Node index of each activation the HTP folds into its producer -> the producer's node
    index (with FOLD_RELU_ACTIVATION_INTO_CONV on, the default).  Every Relu / ReluMinMax
    reading a FOLDING_PRODUCERS output qualifies -- also when that output is a graph output or
    has other readers (the vendor folds then too; the producer still writes its own codes) --
    given 8/16-bit per-tensor fixed-point tensors, the encoding rule of ``_relu_encoding_folds``
    and, for the integer pipeline, static weights."""
    index = {node.name: k for k, node in enumerate(graph.nodes)}
    bits = _EIGHT_BIT | _SIXTEEN_BIT
    folds: dict[int, int] = {}
    for k, node in enumerate(graph.nodes):
        if node.op_type not in FOLDED_ACTIVATIONS or len(node.outputs) != 1 or not node.inputs \
                or node.inputs[0] is None:
            continue
        src, out = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        p = index.get(src.producer) if src is not None else None
        if p is None or out is None:
            continue
        producer = graph.nodes[p]
        if producer.op_type not in FOLDING_PRODUCERS or len(producer.outputs) != 1:
            continue
        if not (src.dtype in bits and _per_tensor(src.quant) and out.dtype in bits and _per_tensor(out.quant)):
            continue
        if producer.op_type in INTEGER_ACCUMULATION_OPS and len(producer.inputs) > 1 \
                and producer.inputs[1] is not None and not is_static(graph.tensor(producer.inputs[1])):
            continue   # dynamic weights: no fixed multiplier to requantize with
        if _relu_encoding_folds(node, out):
            folds[k] = p
    return folds


def _fold_relu_setting(graph) -> bool:
    """FOLD_RELU_ACTIVATION_INTO_CONV_OFF as resolved by the HTP settings (on by default)."""
    return graph_settings(graph).fold_relu_into_conv


# A slot key: a tensor id, or (for a value derived from a tensor) a tagged tensor id.
SlotKey = int | tuple[str, int]


def _folded_slot_key(tid: int) -> tuple[str, int]:
    """The slot key of a folded activation's codes, written by its producer's step."""
    return ("folded", tid)


class FoldedActivation:
    """The step of a folded Relu / ReluMinMax: its producer already wrote its output codes."""

    def run(self, codes):
        return (codes,)


class _Tee:
    """A float-path producer with folded activations: its real-valued result once per folded
    activation after its own (each requantized into that activation's encoding)."""

    def __init__(self, impl, n: int):
        self.impl, self.n = impl, n

    def run(self, *args):
        results = self.impl.run(*args)
        return (*results, *(results[0],) * self.n)


def _discard(_value):
    return None


# Float graphs (issue 13): a Relu / ReluMinMax whose float32 input is the result of a Conv2d,
# DepthWiseConv2d, TransposeConv2d, FullyConnected or MatMul that nothing else reads (and that is
# no graph output) is applied by the producer's step: its C kernel clamps each finished tile, so
# the activation is no pass of its own over memory (the HTP folds them too: no number changes,
# max / min being exact).  The producer's step writes the activation's output
# (``ActivationEpilogue``); the activation's step stays in the plan, writing nothing
# (``FoldedIntoProducer``), so per-node profiles still list it.  FOLD_RELU_ACTIVATION_INTO_CONV_OFF
# turns it off, as the fixed-point fold.  Float16 math: the activation is applied to the
# producer's rounded result (then rounded again, which changes nothing), so NaN -- rounded to
# the largest float16 value before the activation -- gives the unfolded bytes; clip bounds must
# be float16 values.
FLOAT_FOLDING_PRODUCERS = FOLDING_PRODUCERS | {"MatMul"}


class ActivationEpilogue:
    """A float producer's step with the activation folded into it: ``activation`` (the Relu /
    ReluMinMax op instance) applied to the op's result -- after ``rounded`` (the producer's
    float16 output rounding) in float16 math, or a ``SiluProduct`` (float32 math).  ``mode`` /
    ``lo`` / ``hi`` say the same for the C kernels (1: numpy.maximum(x, 0); 2: numpy.clip(x, lo,
    hi), bounds as float32; 3 / 4: the SiLU x * sigmoid(x) / sigmoid(x) * x)."""

    def __init__(self, impl, activation, activation_node, rounded: Callable | None):
        self.impl, self.activation, self.activation_node, self.rounded = impl, activation, activation_node, rounded
        if isinstance(activation, SiluProduct):   # 3: x * sigmoid(x), 4: sigmoid(x) * x; 5, 6: rounding
            self.mode = (3 if activation.x_first else 4) + (2 if activation.rounded is not None else 0)
            self.lo, self.hi = 0.0, 0.0
        elif activation_node.op_type == "Relu":
            self.mode, self.lo, self.hi = 1, 0.0, 0.0
        else:
            self.mode = 2
            self.lo = float(np.float32(activation.param_values["min_value"]))
            self.hi = float(np.float32(activation.param_values["max_value"]))

    def run(self, *args):
        y = self.impl.run(*args)[0]
        if self.rounded is not None:
            y = self.rounded(y)
        return self.activation.run(y)


class FoldedIntoProducer:
    """The step of a float activation its producer applied (``ActivationEpilogue``): nothing to do."""

    def run(self):
        return ()


# Float element-wise folds (issue 13), the same way:
# - an ElementWiseAdd (numpy broadcasting included) whose float32 result only a Relu / ReluMinMax
#   reads applies it as it stores the sum (``EltwiseActivationEpilogue``; float32 math only);
# - SiLU: a Sigmoid whose float32 result only an ElementWiseMultiply of the Sigmoid's own input
#   by it reads (x * sigmoid(x), either operand order, same shapes) is computed by the
#   Multiply's step (``SiluProduct``: it reads x, writes the product), the Sigmoid's step stays
#   as ``FoldedIntoProducer``: the Sigmoid's own output is never stored, one read and one write
#   per element.  When x is the result of a Conv2d / DepthWiseConv2d / TransposeConv2d /
#   FullyConnected / MatMul that only the Sigmoid and the Multiply read, the producer's step
#   computes the SiLU as its epilogue (``ActivationEpilogue`` of the ``SiluProduct``: the C
#   kernels apply it to each finished tile, still in L1) and the Multiply's step is
#   ``FoldedIntoProducer`` too: x is never stored either (EfficientNet's 49 SiLUs).  In float16
#   math only this fold into a producer is made, the ``SiluProduct`` then rounding the Sigmoid's
#   result and the product as the two steps do (C: a table over the float16 values).
#   All are no change of a number: the same float32 operations on the same values.
ELTWISE_FOLDING_PRODUCERS = {"ElementWiseAdd"}


class EltwiseActivationEpilogue(ActivationEpilogue):
    """``ActivationEpilogue`` of an ElementWiseAdd (its own type: the C engine lowers it with the
    element-wise kernels, qnnemu/core/engine/lower_eltwise.py)."""


class SiluProduct:
    """The Multiply's step of a folded SiLU: ``sigmoid`` (the Sigmoid op instance) of x, then
    ``multiply`` (the ElementWiseMultiply op instance) of x and it in the node's operand order
    (``x_first``: x * s, else s * x)."""

    def __init__(self, sigmoid, multiply, x_first: bool, sigmoid_node, rounded: Callable | None = None):
        self.sigmoid, self.multiply, self.x_first, self.sigmoid_node = sigmoid, multiply, x_first, sigmoid_node
        self.rounded = rounded   # float16 math: both steps' rounding (only in a producer's epilogue)

    def run(self, x):
        s = self.sigmoid.run(x)[0]
        if self.rounded is not None:
            s = self.rounded(s)
        y = self.multiply.run(x, s) if self.x_first else self.multiply.run(s, x)
        if self.rounded is not None:
            y = [self.rounded(y[0]), *y[1:]]
        return y


def _fp16_value(v: float) -> bool:
    return bool(np.isfinite(v)) and abs(v) <= 65504.0 and float(np.float16(v)) == float(np.float32(v))


def float_folded_activations(graph, fp16: bool, arch: int | None, islands: bool) -> dict[int, int]:
    """Node index of each float Relu / ReluMinMax folded into its producer (see above) -> the
    producer's node index (FOLD_RELU_ACTIVATION_INTO_CONV on)."""
    index = {node.name: k for k, node in enumerate(graph.nodes)}
    folds: dict[int, int] = {}
    for k, node in enumerate(graph.nodes):
        if node.op_type == "Sigmoid":
            m = _silu_multiply(graph, node, index, arch, islands, fp16)
            p = None if m is None else _silu_producer(graph, node, graph.nodes[m], index, arch, islands, fp16)
            if m is not None and (p is not None or not fp16):   # (float16 math: into a producer only)
                folds[k] = m
                if p is not None:
                    folds[m] = p
            continue
        if node.op_type not in FOLDED_ACTIVATIONS or len(node.inputs) != 1 or len(node.outputs) != 1 \
                or node.inputs[0] is None:
            continue
        src, out = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        p = index.get(src.producer) if src is not None else None
        if p is None or out is None or src.dtype != FLOAT32 or out.dtype != FLOAT32:
            continue
        producer = graph.nodes[p]
        if producer.op_type not in FLOAT_FOLDING_PRODUCERS | ELTWISE_FOLDING_PRODUCERS \
                or len(producer.outputs) != 1 or producer.outputs[0] != src.id:
            continue
        if producer.op_type in ELTWISE_FOLDING_PRODUCERS and \
                (fp16 or not _plain_float32_step(graph, producer, arch, islands)):
            continue
        if src.type != Q.QNN_TENSOR_TYPE_NATIVE or list(src.consumers) != [node.name]:
            continue   # another reader, or a graph output: the producer's own value is needed
        if fp16 and node.op_type == "ReluMinMax" and not (_fp16_value(node.params.get("min_value", 0.0))
                                                           and _fp16_value(node.params.get("max_value", 0.0))):
            continue
        # the activation's step as it would be: the op itself, no input converter, its output
        # left as float32 (float32 math) or rounded to float16 (float16 math)
        step = _compile_step(graph, node, _Slots(), {}, fp16, arch=arch, islands=islands)
        conv = step.out_conv[0]
        if type(step.impl) is not node.op_cls or step.in_conv != [None] or \
                not (conv in (_fp16_round, _fp16_round_even) if fp16 else
                     conv is None or getattr(conv, "__qualname__", "") == "_cast_to.<locals>.cast"):
            continue
        folds[k] = p
    return folds


def _rounds_alike(convs) -> bool:
    """Every output converter is float16 math's rounding, all of one kind (ties away / even)."""
    return all(c is _fp16_round for c in convs) or all(c is _fp16_round_even for c in convs)


def _plain_float32_step(graph, node, arch: int | None, islands: bool, fp16: bool = False) -> bool:
    """Node's step is its own op on float32 tensors, without converters (float32 math); in
    float16 math (``fp16``), without input converters and rounding its results to float16."""
    if any(t is None or graph.tensor(t) is None or graph.tensor(t).dtype != FLOAT32
           for t in [*node.inputs, *node.outputs]):
        return False
    step = _compile_step(graph, node, _Slots(), {}, fp16, arch=arch, islands=islands)
    if type(step.impl) is not node.op_cls or any(c is not None for c in step.in_conv):
        return False
    if fp16:
        return _rounds_alike(step.out_conv)
    return all(c is None or getattr(c, "__qualname__", "") == "_cast_to.<locals>.cast" for c in step.out_conv)


def _silu_multiply(graph, node, index: dict, arch: int | None, islands: bool, fp16: bool = False) -> int | None:
    """The node index of the ElementWiseMultiply that folds this Sigmoid (SiLU, see above), or None."""
    if len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0] is None:
        return None
    x, s = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
    if x is None or s is None or x.id == s.id or s.type != Q.QNN_TENSOR_TYPE_NATIVE or len(s.consumers) != 1:
        return None
    m = index.get(s.consumers[0])
    if m is None:
        return None
    mul = graph.nodes[m]
    if mul.op_type != "ElementWiseMultiply" or len(mul.outputs) != 1 or len(mul.inputs) != 2 \
            or sorted(mul.inputs) != sorted((x.id, s.id)):
        return None
    y = graph.tensor(mul.outputs[0])
    if y is None or not (tuple(x.dims) == tuple(s.dims) == tuple(y.dims)):
        return None
    if not (_plain_float32_step(graph, node, arch, islands, fp16)
            and _plain_float32_step(graph, mul, arch, islands, fp16)):
        return None
    return m


def _silu_producer(graph, sigmoid, mul, index: dict, arch: int | None, islands: bool,
                   fp16: bool = False) -> int | None:
    """The node index of the product or convolution whose epilogue computes this SiLU (see
    above), or None: x's producer writes x alone, and only the Sigmoid and the Multiply read x."""
    x = graph.tensor(sigmoid.inputs[0])
    p = index.get(x.producer) if x is not None else None
    if p is None or x.dtype != FLOAT32 or x.type != Q.QNN_TENSOR_TYPE_NATIVE \
            or sorted(x.consumers) != sorted((sigmoid.name, mul.name)):
        return None
    producer = graph.nodes[p]
    if producer.op_type not in FLOAT_FOLDING_PRODUCERS or list(producer.outputs) != [x.id]:
        return None
    if fp16:   # its own op, rounding its result (its inputs may be rounded on the way in)
        step = _compile_step(graph, producer, _Slots(), {}, True, arch=arch, islands=islands)
        if type(step.impl) is not producer.op_cls or not _rounds_alike(step.out_conv):
            return None
    elif not _plain_float32_step(graph, producer, arch, islands):
        return None
    return p


def _float_fold_step(graph, k: int, step: Step, folds: dict[int, int], slot_of, fp16: bool, arch: int | None,
                     islands: bool) -> Step:
    """Node k's step with a float fold applied: an activation's becomes ``FoldedIntoProducer``,
    a producer's writes the activation's output through ``ActivationEpilogue``."""
    if k in folds:
        return Step(step.node, FoldedIntoProducer(), [], [], [], [])
    a = next((r for r, p in folds.items() if p == k), None)
    if a is None:
        return step
    node = graph.nodes[a]
    act = _compile_step(graph, node, _Slots(), {}, fp16, arch=arch, islands=islands).impl   # the op instance
    if node.op_type == "ElementWiseMultiply":   # SiLU in the producer's epilogue
        sig = graph.nodes[next(r for r, p in folds.items() if p == a)]
        sig_op = _compile_step(graph, sig, _Slots(), {}, fp16, arch=arch, islands=islands).impl
        rounded = step.out_conv[0] if step.out_conv[0] in (_fp16_round, _fp16_round_even) else None
        silu = SiluProduct(sig_op, act, node.inputs[0] == sig.inputs[0], sig, rounded)
        y = graph.tensor(node.outputs[0])
        return Step(step.node, ActivationEpilogue(step.impl, silu, node, rounded), list(step.reads),
                    [slot_of(y.id)], list(step.in_conv), list(step.out_conv))
    if node.op_type == "Sigmoid":   # SiLU: the Multiply reads x alone
        x_first = graph.nodes[k].inputs[0] == node.inputs[0]
        x_slot = step.reads[0 if x_first else 1]
        return Step(step.node, SiluProduct(act, step.impl, x_first, node), [x_slot], list(step.writes),
                    [None], list(step.out_conv))
    rounded = step.out_conv[0] if step.out_conv[0] in (_fp16_round, _fp16_round_even) else None
    out = graph.tensor(node.outputs[0])
    wrap = EltwiseActivationEpilogue if step.node.op_type in ELTWISE_FOLDING_PRODUCERS else ActivationEpilogue
    return Step(step.node, wrap(step.impl, act, node, rounded), list(step.reads),
                [slot_of(out.id)], list(step.in_conv), list(step.out_conv))


# -- float16 math (QNN HTP backend documentation, "QNN HTP Precision") --------------------------

FLOAT_MATH_ENV = "QNNEMU_FLOAT_MATH"
# The emulator-specific per-graph option: a QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG with this
# key and a string value (the vendor's backend accepts unknown finalize keys and ignores them).
FLOAT_MATH_CONFIG_KEY = "qnnemu_float_math"
# The values of both: "soc" (the default: float16 math where the device's arch runs it,
# SocInfo.float16_math; its float32 kernels elsewhere), "float32" (exact float32 reference runs
# on every SoC: no float16 anywhere), "float16" (float16 math on every SoC, v68 included).
FLOAT_MATH_VALUES = ("soc", "float32", "float16")


@dataclass(frozen=True)
class FloatMath:
    """How a graph's float32 tensors compute: ``float16`` math or not, and where that was
    decided (``source``: "soc", "environment" or "config").  ``device_kernels``: float32 math
    as the device runs it (v68), float16 islands included (float16.FLOAT16_ON_FLOAT32_DEVICES);
    not with an explicit "float32", the exact reference."""
    float16: bool
    source: str

    @property
    def device_kernels(self) -> bool:
        return self.source == "soc"


def float_math(graph) -> FloatMath:
    """The float math of ``graph``: its ``qnnemu_float_math`` finalize config, else
    QNNEMU_FLOAT_MATH, else its device's arch (``SocInfo.float16_math``; a graph loaded from a
    context binary: the device it was prepared for).  The deprecated PRECISION graph config
    does not decide it: the vendor's backend ignores it (rule QNNEMU-graph-precision-deprecated
    says so when it asks for the other math).  Invalid values are QnnErrors (rules
    QNNEMU-graphFinalize-float-math-config, QNNEMU-graphFinalize-float-math-env)."""
    finalize = (getattr(graph, "configs", None) or {}).get("htp_finalize_config") or {}
    if FLOAT_MATH_CONFIG_KEY in finalize:
        value = finalize[FLOAT_MATH_CONFIG_KEY]
        text = value.strip().lower() if isinstance(value, str) else None
        if text not in FLOAT_MATH_VALUES:
            raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                           f"graph '{graph.name}': QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG key "
                           f"'{FLOAT_MATH_CONFIG_KEY}': {value!r} is not a string among "
                           f"{', '.join(FLOAT_MATH_VALUES)}", rule="QNNEMU-graphFinalize-float-math-config")
        if text != "soc":
            return FloatMath(text == "float16", "config")
    else:
        text = os.environ.get(FLOAT_MATH_ENV, "").strip().lower() or "soc"
        if text not in FLOAT_MATH_VALUES:
            raise QnnError(Q.QNN_GRAPH_ERROR_INVALID_ARGUMENT,
                           f"graph '{graph.name}': environment: {FLOAT_MATH_ENV}: {text!r} is not one of "
                           f"{', '.join(FLOAT_MATH_VALUES)}", rule="QNNEMU-graphFinalize-float-math-env")
        if text != "soc":
            return FloatMath(text == "float16", "environment")
    return FloatMath(device_model(graph).soc.float16_math, "soc")


def warn_precision_ignored(graph, math: FloatMath, func: str = "graphFinalize") -> None:
    """Rule QNNEMU-graph-precision-deprecated (WARNING): the graph's PRECISION config asks for
    the math the graph does not get.  The vendor's backend accepts the deprecated option and
    ignores it (FLOAT16 on v68 still computes float32, FLOAT32 on v69+ float16)."""
    cfg = ((getattr(graph, "configs", None) or {}).get("htp") or {}).get("QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION")
    if not isinstance(cfg, dict) or "precision" not in cfg:
        return
    asked16 = cfg.get("precision") == Q.QNN_PRECISION_FLOAT16
    fp16 = math.float16
    if asked16 == fp16:
        return
    model = device_model(graph)
    why = {"environment": f"{FLOAT_MATH_ENV} asks for {'float16' if fp16 else 'float32'} math",
           "config": f"its '{FLOAT_MATH_CONFIG_KEY}' finalize config asks for {'float16' if fp16 else 'float32'} math",
           }.get(math.source, f"the device, {model.name} (v{model.arch}), computes float32 graphs in "
                              f"{'float16' if fp16 else 'float32'} math")
    rules.warn("QNNEMU-graph-precision-deprecated", func, "config[].customConfig.precision",
               f"graph '{graph.name}': QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION "
               f"{'QNN_PRECISION_FLOAT16' if asked16 else 'QNN_PRECISION_FLOAT32'} is deprecated since QNN "
               f"2.35 and ignored, as by the HTP: {why}", logger=graph.log)


def _fp16_round(x: np.ndarray) -> np.ndarray:
    """A float32 value entering float16 math (graph inputs, op results)."""
    return htp_fp16_round(x)


def _fp16_round_even(x: np.ndarray) -> np.ndarray:
    return htp_fp16_round(x, "even")


def _fp16_island_output(x: np.ndarray) -> np.ndarray:
    """The result of a float16 kernel in a float32 graph (v68's LayerNorm), as float32."""
    return htp_fp16_to_fp32(htp_fp16_round(x))


def _arch(graph) -> int:
    """The HTP arch ``graph`` is prepared for (its device's; a loaded binary's recorded one)."""
    return int(device_model(graph).arch)


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
    slots: dict[SlotKey, int]              # tensor id (or a derived key, see _Slots) -> slot
    statics: dict[int, np.ndarray]         # slot -> prepared static value
    steps: list[Step]
    input_conv: dict[int, Callable | None]  # tensor id -> converter applied to fed inputs
    n_slots: int
    fp16: bool
    notes: list[str] = field(default_factory=list)
    # tensor id -> converter applied to a returned output (native KV cache outputs: flat ->
    # HMX weight layout); empty for most graphs, so run() pays one truth test.
    output_conv: dict[int, Callable] = field(default_factory=dict)
    # relu folding (FOLD_RELU_ACTIVATION_INTO_CONV_OFF unset) and the folds made: activation
    # node index -> producer node index (``folded_activations``)
    fold_relu: bool = True
    folds: dict[int, int] = field(default_factory=dict)
    # float32 math with the device's kernels and their float16 islands (v68's LayerNorm)
    float16_islands: bool = False
    # the C program compiled from these steps (qnnemu/core/engine, set by the graph after
    # compile_plan / refresh_plan; None: the steps run here)
    engine: Any = None
    # the HTP's MaskedSoftmax rewrite: Softmax node index -> the pattern it replaces
    # (``masked_softmax_rewrites``)
    masked_softmax: dict[int, MaskedSoftmaxPattern] = field(default_factory=dict)
    # constant folding at finalize (qnnemu/core/constfold.py): folded node index -> its
    # outputs, and those outputs as the static tensors the other steps read
    constant_folds: dict[int, tuple[int, ...]] = field(default_factory=dict)
    constant_tensors: dict[int, Any] = field(default_factory=dict)
    # float activations applied by their producers' steps (``float_folded_activations``):
    # activation node index -> producer node index
    float_folds: dict[int, int] = field(default_factory=dict)

    @routed_fp_errors
    def run(self, feeds: dict[int, np.ndarray], wanted: list[int], observer=None) -> dict[int, np.ndarray]:
        # Executes running at once share the cores (qnnemu/core/threads.py).
        threads.enter()
        try:
            if self.engine is not None:
                out = self.engine.run(feeds, wanted, observer)
                if out is not None:    # None: fed arrays the program was not built for
                    return out
            return self._run(feeds, wanted, observer)
        finally:
            threads.leave()

    @routed_fp_errors
    def run_env(self, feeds: dict[int, np.ndarray]) -> list[Any]:
        """Every slot's value after running the Python steps (the engine's bit-identity check)."""
        env: list[Any] = []
        self._run(feeds, [], None, env)
        return env

    def _run(self, feeds: dict[int, np.ndarray], wanted: list[int], observer,
             keep: list[Any] | None = None) -> dict[int, np.ndarray]:
        env: list[Any] = [None] * self.n_slots
        if keep is not None:
            keep[:] = env
            env = keep
        for slot, value in self.statics.items():
            env[slot] = value
        slots = self.slots
        for tid, arr in feeds.items():
            conv = self.input_conv.get(tid)
            env[slots[tid]] = conv(arr) if conv is not None else arr
        timed = observer is not None
        for step in self.steps:
            args: list[Any] = []
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
        if self.output_conv:
            out_conv = self.output_conv
            return {tid: out_conv[tid](env[slots[tid]]) if tid in out_conv else env[slots[tid]]
                    for tid in wanted}
        return {tid: env[slots[tid]] for tid in wanted}


def _static_value(t, consumer_raw: bool, fp16: bool) -> np.ndarray:
    """What a static tensor looks like to its consumers: real values unless they take codes."""
    data = t.data
    if t.dtype in dtypes.FIXED_POINT_TYPES and not consumer_raw:
        return Dequantizer(t.quant)(data) if t.quant is not None else data
    if fp16 and t.dtype == FLOAT32:
        return htp_fp16_static(data)
    return data


class _Slots:
    """Tensor id -> slot in the plan's value list, assigned on first use (also the derived keys:
    a static tensor's raw codes, a folded activation's or a float32 copy's value)."""

    def __init__(self, slots: dict[SlotKey, int] | None = None):
        self.slots: dict[SlotKey, int] = dict(slots or {})

    def __call__(self, tid: SlotKey) -> int:
        slot = self.slots.get(tid)
        if slot is None:
            slot = self.slots[tid] = len(self.slots)
        return slot


def _raw_slot_key(tid: int) -> int:
    """The slot key of a static fixed-point tensor's codes when a consumer reads them raw (its
    real values, if also read, keep the tensor id's own slot)."""
    return -tid - 1


def _as_fixed_slot_key(tid: int) -> tuple[str, int]:
    return ("as-fixed", tid)


def _float32_slot_key(tid: int) -> tuple[str, int]:
    """The slot key of a float32 static tensor an op keeps in float32 under float16 math
    (float16.STATIC_FLOAT32_INPUTS); its float16 value, if also read, keeps the id's slot."""
    return ("float32", tid)


# A16W16 (QNN HTP backend documentation, "QNN HTP Precision" / A16W16: "Due to Hexagon hardware
# limitation, INT16 weight have a special limitation that the range of weight value will be 0x8000
# to 0x7F7F"): the vendor's libQnnHtp.so computes FullyConnected and MatMul with int16 weight
# codes above 0x7F7F exactly as with 0x7F7F (probed with 0x7F80, 0x7FC0, 0x7FFF; static weights and
# MatMul's dynamic in[1]; tests/test_a16w16.py), so the plan clips them; static weights with such
# codes are reported by the warning rule QNNEMU-a16w16-weight-clipped at finalize.
A16W16_WEIGHT_OPS = frozenset({"Conv2d", "DepthWiseConv2d", "TransposeConv2d", "FullyConnected", "MatMul"})
INT16_WEIGHT_MAX = 0x7F7F
_INT16 = Q.QNN_DATATYPE_SFIXED_POINT_16


class ClipInt16Weights:
    """Int16 weight codes clipped to 0x7F7F, then dequantized (a dynamic MatMul in[1])."""

    def __init__(self, dequantize: Dequantizer):
        self.dequantize = dequantize

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        return self.dequantize(np.minimum(codes, np.int16(INT16_WEIGHT_MAX)))


def _int16_weights_clipped(node, t):
    """Static int16 weights with their codes above 0x7F7F clipped (warned); others as they are."""
    if not is_static(t) or t.data is None:
        return t
    data = np.asarray(t.data)
    over = int(np.count_nonzero(data > INT16_WEIGHT_MAX))
    if not over:
        return t
    rules.warn("QNNEMU-a16w16-weight-clipped", "graphFinalize", f"node '{node.name}' ({node.op_type}) inputTensors[1]",
               f"{over} int16 weight code(s) above 0x7F7F (the HTP's int16 weight range is 0x8000..0x7F7F): "
               f"computed as 0x7F7F, as the vendor's backend does")
    return dataclasses.replace(t, data=np.minimum(data, np.int16(INT16_WEIGHT_MAX)))


# The zero point per-axis weights are computed with (the vendor's, probed): none for signed codes,
# the middle code for unsigned ones (a symmetric encoding either way).
_SYMMETRIC_OFFSET = {Q.QNN_DATATYPE_UFIXED_POINT_8: -128}   # uint16 weights: not probed, left as they are
_SIGNED_WEIGHTS = frozenset({Q.QNN_DATATYPE_SFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_16})


def _axis_weight_offsets_ignored(node, t):
    """Static per-axis weights (AXIS_SCALE_OFFSET) of a weight op whose offsets are not the
    symmetric one: computed with the symmetric offset (warned), as the vendor's backend computes
    them; others as they are.

    The QNN HTP backend documentation asks for symmetric weights (A16W16: "All weights/filters
    need to be symmetrically quantized"); the vendor's libQnnHtp.so 2.51 takes per-axis weights
    with any offsets and computes every channel with offset 0 for signed codes (probed on SM8550
    for Conv2d, DepthWiseConv2d, TransposeConv2d, FullyConnected and MatMul, int16 and int8
    weights, 8- and 16-bit activations) and -128 for uint8 codes (FullyConnected, offsets 0, -50,
    -100, -128 alike): tests/test_a16w16.py.  Per-tensor offsets are applied (probed)."""
    q = getattr(t, "quant", None)
    if (node.op_type not in A16W16_WEIGHT_OPS or not is_static(t) or q is None or q.axis is None
            or q.block_scales is not None or t.dtype not in _SIGNED_WEIGHTS | set(_SYMMETRIC_OFFSET)):
        return t
    symmetric = _SYMMETRIC_OFFSET.get(t.dtype, 0)
    offsets = np.atleast_1d(np.asarray(q.offset))
    other = offsets != symmetric
    count = int(np.count_nonzero(other))
    if not count:
        return t
    rules.warn("QNNEMU-weight-axis-offset-ignored", "graphFinalize",
               f"node '{node.name}' ({node.op_type}) inputTensors[1].quantizeParams.axisScaleOffsetEncoding",
               f"{count} of {offsets.size} per-axis weight offset(s) are not {symmetric} "
               f"(first: {int(offsets[other][0])}); the HTP takes symmetric weights: computed with offset "
               f"{symmetric}, as the vendor's backend does")
    return dataclasses.replace(t, quant=dataclasses.replace(q, offset=np.full_like(offsets, symmetric)))


def _compile_step(graph, node, slot_of: _Slots, statics: dict[int, np.ndarray], precision_fp16: bool,
                  fold_outs: list | tuple = (), keep_own: bool = True, folded: bool = False,
                  arch: int | None = None, islands: bool = False) -> Step:
    """One node's step; the static values it reads are (re)derived into ``statics``.

    Relu folding: ``fold_outs`` are the output tensors of the activations folded into this node
    (its step also writes their codes, ``keep_own`` False when nothing else needs its own
    codes); ``folded`` makes this activation's step take the codes its producer wrote.

    ``precision_fp16``: float32 tensors in float16 math, as ``float16.rules_for`` says for this
    node on HTP ``arch`` (graph inputs rounded as this step reads them, statics stored as
    float16, results rounded); ``arch`` also reaches the op (``Op.htp_arch``) for its
    arch-dependent semantics.  ``islands``: float32 math with the device's kernels, some of
    which compute in float16 (float16.FLOAT16_ON_FLOAT32_DEVICES: every float32 input
    rounded, the result rounded and converted back to float32)."""
    fixed = dtypes.FIXED_POINT_TYPES
    cls = node.op_cls
    ins = [graph.tensor(i) if i is not None else None for i in node.inputs]
    if len(ins) > 1 and ins[1] is not None:
        ins[1] = _axis_weight_offsets_ignored(node, ins[1])
    outs = [graph.tensor(i) for i in node.outputs]
    if folded:
        out = outs[0]
        return Step(node, FoldedActivation(), [slot_of(_folded_slot_key(out.id))], [slot_of(out.id)],
                    [None], [None])
    raw = cls.handles_quant
    params_impl = cls(node.params, node.input_specs, node.output_specs)
    # plain integer / BOOL_8 tensors the op computes as fixed point with scale 1 (ops/base.py)
    view = getattr(params_impl, "fixed_view", None)
    island = (islands and not precision_fp16 and node.op_type in float16.FLOAT16_ON_FLOAT32_DEVICES
              and any(t is not None and t.dtype == FLOAT32 for t in ins[:1]))
    params_impl.htp_arch = arch
    # Quantize, Dequantize, Cast, Convert (handles_quant) keep their float32 side exact: the
    # vendor's Dequantize returns exact float32 values on v73 too.
    fp16_step = (precision_fp16 or island) and not cls.handles_quant
    params_impl.float16_math = fp16_step
    rules = float16.rules_for(node, ins, arch or 0) if fp16_step else None
    accumulate = None if raw else (_integer_accumulation(node, params_impl, ins, outs, arch)
                                   or _integer_add(node, ins, outs))
    if accumulate is not None:
        raw, params_impl = True, accumulate
    if not raw and cls.quant_passthrough:
        encodings = [(t.dtype, t.quant) for t in ins + outs if t is not None and t.dtype in fixed]
        if encodings and all(d == encodings[0][0] and same_encoding(q, encodings[0][1])
                             for d, q in encodings) and all(
                t is None or t.dtype in fixed or t.dtype in dtypes.INT_TYPES or t.dtype in dtypes.BOOL_TYPES
                for t in ins + outs):
            raw = True
    in_conv: list[Callable | None] = []
    reads: list[int] = []
    for i, t in enumerate(ins):
        if t is None:
            reads.append(-1)
            in_conv.append(None)
            continue
        if i == 1 and not raw and t.dtype == _INT16 and node.op_type in A16W16_WEIGHT_OPS:
            t = _int16_weights_clipped(node, t)
        s = slot_of(t.id)
        reads.append(s)
        if is_static(t):
            # Statics are prepared once; a static read both raw and real keeps two slots.
            if raw and t.dtype in fixed:
                s = slot_of(_raw_slot_key(t.id))  # a separate slot for the codes
                reads[-1] = s
                statics[s] = t.data
            elif rules is not None and i in rules.float32_statics:
                s = slot_of(_float32_slot_key(t.id))
                reads[-1] = s
                statics[s] = t.data
            elif view is not None and not raw and i in view.inputs:
                s = slot_of(_as_fixed_slot_key(t.id))
                reads[-1] = s
                statics[s] = view.dequantize(t.data)
            else:
                statics[s] = _static_value(t, raw, precision_fp16)
            in_conv.append(None)
            continue
        if not raw and t.dtype in fixed:
            dq = Dequantizer(t.quant)
            in_conv.append(ClipInt16Weights(dq) if i == 1 and t.dtype == _INT16
                           and node.op_type in A16W16_WEIGHT_OPS else dq)
        elif view is not None and not raw and i in view.inputs:
            in_conv.append(view.dequantize)
        elif rules is not None and t.dtype == FLOAT32 and (island or float16.is_graph_input(t)) \
                and i not in rules.float32_inputs:
            in_conv.append(_fp16_round)   # a float32 value enters float16 math
        else:
            in_conv.append(None)
    out_conv: list[Callable | None] = []
    writes: list[int] = []
    mode = rounding_for(node.op_type)
    for k, t in enumerate(outs):
        writes.append(slot_of(t.id))
        if view is not None and not raw and k in view.outputs:
            out_conv.append(functools.partial(view.requantize, dtype=t.dtype, mode=mode))
        elif t.dtype == FLOAT32 and rules is not None:
            out_conv.append(_fp16_island_output if island else
                            _fp16_round_even if rules.ties == "even" else _fp16_round)
        elif raw:
            out_conv.append(_cast_to(t.dtype) if t.dtype not in fixed else None)
        elif t.dtype in fixed:
            out_conv.append(Requantize(t.quant, t.dtype, mode))
        else:
            out_conv.append(_cast_to(t.dtype))
    if rules is not None and rules.kernel is not None and not raw:
        params_impl = rules.kernel(params_impl)
    if fold_outs:
        # The folded activations' codes come from this op's accumulator (integer pipeline) or
        # its real result (float path), requantized once into their encodings: no pass
        # through this op's own encoding, whose range therefore clips nothing.
        if isinstance(params_impl, IntegerAccumulation):
            params_impl.fold_into(fold_outs, keep_own)
        else:
            params_impl = _Tee(params_impl, len(fold_outs))
            if not keep_own:
                out_conv[0] = _discard
        for t in fold_outs:
            writes.append(slot_of(_folded_slot_key(t.id)))
            out_conv.append(None if isinstance(params_impl, IntegerAccumulation)
                            else Requantize(t.quant, t.dtype, mode))
    return Step(node, params_impl, reads, writes, in_conv, out_conv)


def _fold_layout(graph, folds: dict[int, int]):
    """Per producer index: (folded activation output tensors, whether its own codes are needed)."""
    by_producer: dict[int, list[int]] = {}
    for relu, producer in folds.items():
        by_producer.setdefault(producer, []).append(relu)
    layout = {}
    for p, relus in by_producer.items():
        own = graph.tensor(graph.nodes[p].outputs[0])
        folded_names = {graph.nodes[r].name for r in relus}
        keep_own = own.type != Q.QNN_TENSOR_TYPE_NATIVE or any(c not in folded_names for c in own.consumers)
        layout[p] = ([graph.tensor(graph.nodes[r].outputs[0]) for r in sorted(relus)], keep_own)
    return layout


def _compile_node(graph, k: int, slot_of: _Slots, statics, fp16: bool, folds: dict[int, int], layout,
                  arch: int | None, islands: bool = False, masked: dict | None = None,
                  float_folds: dict[int, int] | None = None) -> Step:
    if masked and k in masked:
        return _masked_softmax_step(graph, graph.nodes[k], masked[k], slot_of)
    fold_outs, keep_own = layout.get(k, ((), True))
    step = _compile_step(graph, graph.nodes[k], slot_of, statics, fp16, fold_outs, keep_own, k in folds, arch,
                         islands)
    return _float_fold_step(graph, k, step, float_folds, slot_of, fp16, arch, islands) if float_folds else step


@routed_fp_errors
def compile_plan(graph, precision_fp16: bool | None = None, fold_relu: bool | None = None) -> Plan:
    """Builds the plan of a graph whose nodes were all checked by graphAddNode.

    ``precision_fp16``: float32 tensors computed in float16 math (True) or as exact float32
    (False); None decides by ``float_math(graph)``.  ``fold_relu``: fold Relu / ReluMinMax into
    their convolutions (``folded_activations``); None takes the graph's setting (on unless
    FOLD_RELU_ACTIVATION_INTO_CONV_OFF)."""
    if precision_fp16 is None:
        math = float_math(graph)
        warn_precision_ignored(graph, math)
    else:
        math = FloatMath(bool(precision_fp16), "argument")
    precision_fp16 = math.float16
    if fold_relu is None:
        fold_relu = _fold_relu_setting(graph)
    folds = folded_activations(graph) if fold_relu else {}
    layout = _fold_layout(graph, folds)
    slot_of = _Slots()
    statics: dict[int, np.ndarray] = {}
    arch = _arch(graph)
    islands = math.device_kernels and not precision_fp16
    masked = masked_softmax_rewrites(graph)
    view, constant_folds = fold_constants(
        graph, lambda v, node, slots, values: _compile_step(v, node, slots, values, precision_fp16, arch=arch,
                                                            islands=islands))
    float_folds = float_folded_activations(view, precision_fp16, arch, islands) if fold_relu else {}
    steps = [_folded_constant_step(graph, k) if k in constant_folds else
             _compile_node(view, k, slot_of, statics, precision_fp16, folds, layout, arch, islands, masked,
                           float_folds)
             for k in range(len(graph.nodes))]
    notes: list[str] = [f"MaskedSoftmax rewrite (pattern {m.pattern}): {graph.nodes[k].name} = "
                        f"MaskedSoftmax({' -> '.join(m.nodes)})" for k, m in sorted(masked.items())]
    if constant_folds:
        notes.append(f"{len(constant_folds)} node(s) of constant inputs computed at finalize: "
                     + ", ".join(graph.nodes[k].name for k in sorted(constant_folds)))
    if float_folds:
        notes.append(f"{len(float_folds)} float activation(s) applied by their producers: "
                     + ", ".join(f"{graph.nodes[r].name} -> {graph.nodes[p].name}"
                                 for r, p in sorted(float_folds.items())))
    if folds:
        notes.append(f"{len(folds)} relu(s) folded into their convolutions: "
                     + ", ".join(f"{graph.nodes[r].name} -> {graph.nodes[p].name}" for r, p in sorted(folds.items())))
    input_conv: dict[int, Callable | None] = {}
    output_conv: dict[int, Callable] = {}
    for t in graph.app_inputs():
        slot_of(t.id)
        input_conv[t.id] = None   # float16 math: each step rounds the graph inputs it reads
    for t in graph.tensors.values():
        slot_of(t.id)
    if precision_fp16:
        notes.append("float32 tensors computed in float16 math (rounded at op boundaries)")
        # float16 results leave as float32 through the HTP's conversion (htp_fp16_to_fp32);
        # Dequantize & co. (handles_quant) write exact float32
        producers = {node.name: node for node in graph.nodes}
        for t in graph.app_outputs():
            producer = producers.get(t.producer)
            if t.dtype == FLOAT32 and producer is not None and not producer.op_cls.handles_quant:
                output_conv[t.id] = htp_fp16_to_fp32
    # Native KV cache tensors (qnnemu/htp/kvcache.py): the ops see the flat (logical) codes; the
    # layout is converted at the graph boundary, as a pure permutation of the uint8 codes.
    for kv in (getattr(graph, "native_kv", None) or {}).values():
        if kv.is_input:
            input_conv[kv.tensor_id] = kv.to_flat
            if kv.index_bound is not None:   # fed scatter indices: the documented bound, checked as they arrive
                input_conv[kv.index_bound.tensor_id] = kv.index_bound
        else:
            output_conv[kv.tensor_id] = kv.to_native
        notes.append(f"native KV {kv.kind} cache '{kv.name}' converted "
                     f"{'HMX weight layout -> flat' if kv.is_input else 'flat -> HMX weight layout'}")
    plan = Plan(slot_of.slots, statics, steps, input_conv, len(slot_of.slots), precision_fp16, notes, output_conv,
                fold_relu, folds, islands, masked_softmax=masked, constant_folds=constant_folds,
                constant_tensors=view._tensors, float_folds=float_folds)
    return plan


def _folded_constant_step(graph, k: int) -> Step:
    """Node k was computed at finalize (constfold): a step without reads or writes."""
    return Step(graph.nodes[k], ConstantFolded(), [], [], [], [])


def nodes_touching(graph, tensor_ids) -> list[int]:
    """Positions (in ``graph.nodes``, hence in the plan's steps) of the nodes that read or write
    one of ``tensor_ids``: what an update of those tensors' data or quantization changes."""
    ids = set(tensor_ids)
    return [k for k, node in enumerate(graph.nodes)
            if ids.intersection(i for i in node.inputs if i is not None) or ids.intersection(node.outputs)]


@routed_fp_errors
def refresh_plan(plan: Plan, graph, tensor_ids) -> Plan:
    """A new plan equal to ``plan`` except for the steps of the nodes touching ``tensor_ids``,
    recompiled from the tensors' current data and quantization (QnnTensor_updateGraphTensors,
    QnnContext_applyBinarySection).

    Only what finalize derived from those tensors is rebuilt -- the static values they feed
    (dequantized / float16-rounded / integer-packed weights), the affected ops' prepared
    operands and the quantization converters around them -- so an update costs about as much
    as preparing those weights once, and ``Plan.run`` is untouched: execute speed does not
    change.  The old plan is left intact (a running execute keeps using it), the caller swaps
    the graph's plan in one assignment.
    """
    assert len(plan.steps) == len(graph.nodes), "a plan has one step per node"
    if plan.constant_folds and set(nodes_touching(graph, tensor_ids)) & set(plan.constant_folds):
        # an updated tensor feeds a node computed at finalize: everything it fed changes
        return compile_plan(graph, plan.fp16, plan.fold_relu)
    view = FoldedView(graph, plan.constant_tensors)
    slot_of = _Slots(plan.slots)
    statics = dict(plan.statics)
    for tid in tensor_ids:   # consumers below re-derive whatever is still needed
        for key in (tid, _raw_slot_key(tid), _float32_slot_key(tid)):
            slot = plan.slots.get(key)
            if slot is not None:
                statics.pop(slot, None)
    steps = list(plan.steps)
    # Whether a relu folds depends on its encoding, and a producer's step computes its folded
    # activations' codes: an update touching either side recompiles both.
    folds = folded_activations(graph) if plan.fold_relu else {}
    touched = set(nodes_touching(graph, tensor_ids))
    float_folds = float_folded_activations(view, plan.fp16, _arch(graph), plan.float16_islands) \
        if plan.fold_relu else {}
    for relu, producer in [*plan.folds.items(), *folds.items(), *plan.float_folds.items(), *float_folds.items()]:
        if relu in touched or producer in touched:
            touched.update((relu, producer))
    layout = _fold_layout(graph, folds)
    # The MaskedSoftmax rewrite depends on the mask constants (B <= -20.0, the compared zero): an
    # update may make or unmake it, so every Softmax whose status changes is recompiled too.
    masked = masked_softmax_rewrites(graph)
    touched.update(k for k in set(plan.masked_softmax) ^ set(masked))
    touched.update(k for k, m in masked.items() if touched.intersection(m.node_indices))
    for k in sorted(touched):
        steps[k] = _compile_node(view, k, slot_of, statics, plan.fp16, folds, layout, _arch(graph),
                                 plan.float16_islands, masked, float_folds)
    new = Plan(slot_of.slots, statics, steps, plan.input_conv, len(slot_of.slots), plan.fp16, list(plan.notes),
               plan.output_conv, plan.fold_relu, folds, plan.float16_islands, masked_softmax=masked,
               constant_folds=plan.constant_folds, constant_tensors=plan.constant_tensors, float_folds=float_folds)
    return new


# -- the MaskedSoftmax rewrite (QNN HTP backend documentation, "MaskedSoftmax") ----------------
# The HTP replaces Softmax(Where(condition, In, Add(ReduceMin(In), B))) -- the attention-mask
# structure of LLMs -- by MaskedSoftmax(In, condition): the softmax runs on In itself (no pass
# through the Where output's wide encoding, which had to cover min(In) + B) and masked entries
# output exactly 0.  Three patterns, differing in how the attention mask becomes the condition:
# A: ElementWiseEqual(mask, 0) of a uint16 mask (zero entries kept); B: ElementWiseNotEqual(mask,
# 0) of a uint16 mask (zero entries masked); C: the uint8 mask itself (zero entries masked).
# Only uint8 / uint16 quantization, and B <= -20.0 (so the original's masked outputs are 0 too).
MASKED_SOFTMAX_FILL_MAX = -20.0
_MASKED_SOFTMAX_DTYPES = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_UFIXED_POINT_16)
_PATTERN_C_MASKS = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_BOOL_8, Q.QNN_DATATYPE_UINT_8)


@dataclass(frozen=True)
class MaskedSoftmaxPattern:
    pattern: str                   # "A", "B" or "C"
    data: int                      # tensor id of In
    condition: int                 # tensor id of the Where condition
    nodes: tuple[str, ...]         # the names of the nodes the rewrite covers, mask side first
    node_indices: tuple[int, ...] = ()


def _static_reals(t) -> np.ndarray | None:
    """A static tensor's real values (dequantized), or None for a tensor that is not static."""
    if t is None or not is_static(t) or t.data is None:
        return None
    if t.dtype in dtypes.FIXED_POINT_TYPES and t.quant is not None:
        return np.asarray(Dequantizer(t.quant)(t.data), np.float64)
    return np.asarray(t.data, np.float64)


def masked_softmax_rewrites(graph) -> dict[int, MaskedSoftmaxPattern]:
    """Softmax node index -> the MaskedSoftmax pattern (A, B or C) it ends, for every Softmax the
    HTP rewrites (see the comment above); a structure that misses a condition stays as it is."""
    index = {node.name: k for k, node in enumerate(graph.nodes)}

    def producer(tid):
        t = graph.tensor(tid) if tid is not None else None
        k = index.get(t.producer) if t is not None else None
        return (k, graph.nodes[k]) if k is not None else (None, None)

    def uint_fixed(t) -> bool:
        return t is not None and t.dtype in _MASKED_SOFTMAX_DTYPES and _per_tensor(t.quant)

    found: dict[int, MaskedSoftmaxPattern] = {}
    for k, node in enumerate(graph.nodes):
        if node.op_type != "Softmax" or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        src, out = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if not (uint_fixed(src) and uint_fixed(out)) or node.params.get("axis") not in (None, len(src.dims) - 1):
            continue
        w, where = producer(node.inputs[0])
        if where is None or where.op_type != "ElementWiseSelect" or len(where.inputs) != 3:
            continue
        cond_id, data_id, fill_id = where.inputs
        data = graph.tensor(data_id)
        if not uint_fixed(data) or is_static(data):
            continue
        a, add = producer(fill_id)
        if add is None or add.op_type != "ElementWiseAdd" or len(add.inputs) != 2:
            continue
        r = b = None
        for first, second in (add.inputs, add.inputs[::-1]):
            rk, red = producer(first)
            if red is not None and red.op_type == "ReduceMin" and red.inputs[:1] == [data_id]:
                r, b = rk, graph.tensor(second)
        fill = _static_reals(b)
        if r is None or fill is None or fill.size == 0 or float(fill.max()) > MASKED_SOFTMAX_FILL_MAX:
            continue
        c, compare = producer(cond_id)
        pattern, names, indices = "", [], [r, a, w]
        if compare is not None and compare.op_type in ("ElementWiseEqual", "ElementWiseNotEqual") \
                and len(compare.inputs) == 2:
            for mask_id, zero_id in (compare.inputs, compare.inputs[::-1]):
                mask, zero = graph.tensor(mask_id), _static_reals(graph.tensor(zero_id))
                if mask is not None and mask.dtype == Q.QNN_DATATYPE_UFIXED_POINT_16 and not is_static(mask) \
                        and zero is not None and zero.size and not zero.any():
                    pattern = "A" if compare.op_type == "ElementWiseEqual" else "B"
            names, indices = [compare.name], [c, *indices]
        else:
            cond = graph.tensor(cond_id)
            if cond is not None and cond.dtype in _PATTERN_C_MASKS and not is_static(cond):
                pattern = "C"
        if not pattern:
            continue
        names += [graph.nodes[r].name, add.name, where.name]
        found[k] = MaskedSoftmaxPattern(pattern, data_id, cond_id, tuple(names), tuple(indices))
    return found


class MaskedSoftmaxRewrite:
    """The step of a rewritten Softmax: MaskedSoftmax of In (real values) under the Where
    condition (entries whose condition is false output exactly 0)."""

    def __init__(self, beta: float):
        self.beta = beta

    def run(self, data, condition):
        from ..ops.masked_softmax import masked_softmax
        keep = np.asarray(condition) != 0
        return (masked_softmax(np.asarray(data, np.float32), keep, -1, self.beta),)


def _masked_softmax_step(graph, node, m: MaskedSoftmaxPattern, slot_of: _Slots) -> Step:
    data, cond, out = graph.tensor(m.data), graph.tensor(m.condition), graph.tensor(node.outputs[0])
    beta = node.params.get("beta")
    cond_conv = Dequantizer(cond.quant) if cond.dtype in dtypes.FIXED_POINT_TYPES and cond.quant else None
    return Step(node, MaskedSoftmaxRewrite(1.0 if beta is None else float(beta)),
                [slot_of(data.id), slot_of(cond.id)], [slot_of(out.id)],
                [Dequantizer(data.quant), cond_conv],
                [Requantize(out.quant, out.dtype, rounding_for(node.op_type))])


def _cast_to(dtype: int):
    np_dtype = dtypes.numpy_dtype(dtype)

    def cast(x: np.ndarray) -> np.ndarray:
        return x if x.dtype == np_dtype else x.astype(np_dtype)
    return cast


__all__ = ["Plan", "Step", "compile_plan", "refresh_plan", "nodes_touching", "ROUNDING_BY_OP",
           "DEFAULT_ROUNDING", "rounding_for", "Requantize", "INTEGER_ACCUMULATION_OPS", "INTEGER_ELEMENTWISE_OPS",
           "IntegerAccumulation", "IntegerAdd", "FOLDING_PRODUCERS", "FOLDED_ACTIVATIONS",
           "folded_activations", "FoldedActivation", "FLOAT_FOLDING_PRODUCERS", "float_folded_activations",
           "ActivationEpilogue", "FoldedIntoProducer", "EltwiseActivationEpilogue", "SiluProduct",
           "ELTWISE_FOLDING_PRODUCERS", "routed_fp_errors", "masked_softmax_rewrites",
           "MaskedSoftmaxPattern", "MaskedSoftmaxRewrite", "MASKED_SOFTMAX_FILL_MAX"]
