"""C lowering of the recurrent ops (QNN op definitions "Lstm" and "Gru"; qnnemu/ops/lstm.py,
qnnemu/ops/rnn.py), kernels in csrc/eng_rnn.c:

- ``qe_k_lstm``: Lstm, every variant the op runs (2-D one step or a 3-D sequence, time major or
  not, FORWARD / REVERSE, CIFG, peephole, layer norm, projection with or without bias, cell and
  output clipping, with or without initial states);
- ``qe_k_gru``: Gru (2-D or 3-D, either direction, linear_before_reset 0 / 1, with or without
  initial h), computed in float64 as the op does.

Both run on float32 values: in float16 math (v69 and later) the plan's roundings of the inputs
and of the three results, and for fixed-point tensors its dequantize / requantize, are the
core's converters around the step (``ctx.input_f32`` / ``ctx.output_f32``), exactly as for the
Python step.  The kernels are the very functions the ops' fast paths call
(qnnemu/ops/_fast_rnn.py), so they are lowered only while those fast paths are on
(``QNNEMU_KERNELS=reference`` or ``QNNEMU_GEMM=blas`` keep numpy there: the step falls back).
Static weights are read in place; the recurrence's work rows are a scratch region of the arena.
"""
from __future__ import annotations

import numpy as np

from ...ops import _fast_rnn
from ...ops.lstm import FORWARD as LSTM_FORWARD, Lstm
from ...ops.rnn import REVERSE as GRU_REVERSE, Gru
from .lowering import F32, Unsupported, lowers


def _float_inputs(ctx, count: int) -> tuple[list[int], int]:
    """The float32 buffers of the present inputs among positions [0, count) and their bit
    mask; Unsupported for an input the op would not receive as float32."""
    bufs, mask = [], 0
    for i in range(min(count, ctx.n_in)):
        if not ctx.present(i):
            continue
        if ctx.in_conv(i) is None and ctx.in_dtype(i) != F32:
            raise Unsupported(f"input {i} is stored as {ctx.in_dtype(i)}")
        bufs.append(ctx.input_f32(i))
        mask |= 1 << i
    return bufs, mask


def _scratch_size(fn_name: str, dims: list[int]) -> int:
    from ...ops import _fast
    lib, ffi = _fast.library()
    d = np.asarray(dims, dtype=np.int64)
    return int(getattr(lib, fn_name)(ffi.cast("int64_t *", d.ctypes.data)))


def _check_cell(ctx, cls, inputs: int, outputs: int) -> dict:
    """The op's parameters, or Unsupported for what the recurrent kernels do not run."""
    op = ctx.impl
    if type(op) is not cls:
        raise Unsupported(f"a wrapped {cls.__name__} ({type(op).__name__})")
    if not _fast_rnn.available():
        raise Unsupported(f"the Python path's {cls.__name__} runs in numpy (QNNEMU_GEMM=blas or "
                          "QNNEMU_KERNELS=reference)")
    if ctx.n_in > inputs and ctx.present(inputs):
        raise Unsupported("the reset input")
    if ctx.n_out != outputs:
        raise Unsupported(f"{ctx.n_out} outputs")
    return op.param_values


@lowers("Lstm")
def lstm(ctx) -> None:
    prm = _check_cell(ctx, Lstm, _fast_rnn.LSTM_INPUTS, 3)
    x_shape = ctx.in_shape(0)
    n, p = ctx.in_shape(1)[0], ctx.in_shape(4)[1]
    dims = _fast_rnn.lstm_dims(x_shape, n, p, bool(prm["time_major"]),
                               prm["direction"] != LSTM_FORWARD)
    bufs, mask = _float_inputs(ctx, _fast_rnn.LSTM_INPUTS)
    outs = [ctx.output_f32(k) for k in range(3)]
    scratch = ctx.scratch(4 * _scratch_size("qe_lstm_scratch_floats", dims))
    ctx.emit("qe_k_lstm", tuple(bufs) + tuple(outs) + (scratch,), tuple(dims) + (mask,),
             (float(prm["cell_clip_threshold"]), float(prm["output_clip_threshold"])))


@lowers("Gru")
def gru(ctx) -> None:
    prm = _check_cell(ctx, Gru, _fast_rnn.GRU_INPUTS, 2)
    dims = _fast_rnn.gru_dims(ctx.in_shape(0), ctx.in_shape(1)[0], bool(prm["time_major"]),
                              prm["direction"] == GRU_REVERSE, bool(int(prm["linear_before_reset"])))
    bufs, mask = _float_inputs(ctx, _fast_rnn.GRU_INPUTS)
    outs = [ctx.output_f32(k) for k in range(2)]
    scratch = ctx.scratch(8 * _scratch_size("qe_gru_scratch_doubles", dims))
    ctx.emit("qe_k_gru", tuple(bufs) + tuple(outs) + (scratch,), tuple(dims) + (mask,))
