"""The element-wise C kernels the activations' fast paths share with the C engine (issue 13):
exp, log, sigmoid, tanh, elu, gelu, erf, softplus and Softmax / LogSoftmax (QNN op definitions
ElementWiseExp, ElementWiseLog, Sigmoid, Tanh, Elu, Gelu, Erf, ElementWiseSoftplus,
ElementWiseNeuron, Softmax, LogSoftmax) and the normalizations LayerNorm, RmsNorm, InstanceNorm,
GroupNorm, computed in float64 and rounded once to float32 (csrc/eng_eltwise.c).

numpy's SIMD transcendental functions cannot be reproduced in C, so with the fast kernels on
(``_fast.enabled()``) the ops call these and the engine's steps (qnnemu/core/engine/
lower_eltwise.py) call the very same C functions: both paths give the same bytes.  With
``QNNEMU_KERNELS=reference`` the ops keep their numpy formulas.

Every function takes a float32 array and returns a new float32 array, or None when the C
kernels are not available (the caller then uses numpy).
"""
from __future__ import annotations

import numpy as np

from . import _fast

# csrc/eng_eltwise.h, enum QE_UN_*
UNARY = {name: code for code, name in enumerate((
    "neg", "abs", "sqrt", "floor", "ceil", "rint", "rsqrt", "recip", "sign", "relu", "clip",
    "hard_sigmoid", "hard_swish", "threshold", "exp", "log", "sigmoid", "tanh", "elu", "gelu",
    "softplus", "erf", "htp_recip", "sin", "cos", "asin", "atan", "sigmoid_exact"))}
# csrc/eng_eltwise.h, enum QE_BIN_*
BINARY = {name: code for code, name in enumerate((
    "add", "sub", "mul", "div", "max", "min", "sqdiff", "floordiv", "fmod", "mod", "prelu", "pow",
    "eq", "ne", "gt", "ge", "lt", "le"))}
COMPARE = {"eq", "ne", "gt", "ge", "lt", "le"}


def _check(rc: int) -> None:
    if rc != 0:
        raise RuntimeError(f"qnnemu._kernels: element-wise kernel failed (code {rc})")


def broadcast_layout(a_shape, b_shape, out_shape):
    """(dims, a strides, b strides) in elements of the broadcast ``a op b -> out``, with unit
    dimensions dropped and dimensions that stay contiguous for both inputs merged (rank >= 1);
    ValueError when the shapes do not broadcast to ``out_shape`` or need more than 8 dimensions."""
    out_shape = tuple(int(d) for d in out_shape)
    rank = len(out_shape)
    if len(a_shape) > rank or len(b_shape) > rank:
        raise ValueError("an input of higher rank than the output")

    def strides(shape):
        shape = (1,) * (rank - len(shape)) + tuple(int(d) for d in shape)
        st, acc = [0] * rank, 1
        for k in range(rank - 1, -1, -1):
            if shape[k] != 1 and shape[k] != out_shape[k]:
                raise ValueError(f"shape {shape} does not broadcast to {out_shape}")
            st[k] = acc if shape[k] != 1 else 0
            acc *= shape[k]
        return st

    sa, sb = strides(a_shape), strides(b_shape)
    dims: list[int] = []
    xa: list[int] = []
    xb: list[int] = []
    for d, s1, s2 in zip(out_shape, sa, sb):
        if d == 1:
            continue
        if dims and xa[-1] == s1 * d and xb[-1] == s2 * d:
            dims[-1] *= d           # merge into the previous (outer) dimension
            xa[-1], xb[-1] = s1, s2
            continue
        dims.append(d)
        xa.append(s1)
        xb.append(s2)
    if not dims:
        dims, xa, xb = [1], [0], [0]
    if len(dims) > 8:
        raise ValueError(f"a broadcast of rank {len(dims)} (> 8 after merging)")
    return dims, xa, xb


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """a op b (see BINARY) of float32 arrays with numpy broadcasting: float32, or a bool array for
    the comparisons; None without the C kernels."""
    if not _fast.enabled() or a.dtype != np.float32 or b.dtype != np.float32:
        return None
    lib, ffi = _fast.library()
    shape = np.broadcast_shapes(a.shape, b.shape)
    try:
        dims, sa, sb = broadcast_layout(a.shape, b.shape, shape)
    except ValueError:
        return None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty(shape, np.bool_ if op in COMPARE else np.float32)
    ints = ffi.new("int64_t[]", dims + sa + sb)
    r = len(dims)
    rc = lib.qe_ew_binary_f32(BINARY[op], _fast._ptr(a), _fast._ptr(b), ffi.cast("void *", y.ctypes.data),
                              r, ints, ints + r, ints + 2 * r)
    _check(rc)
    return y


def unary_params(op: str, prm=()) -> list[float]:
    """The float64 parameter vector of a unary op (at least two entries, as the kernel reads)."""
    values = [float(v) for v in prm]
    return values + [0.0] * max(0, 2 - len(values))


def unary(op: str, x: np.ndarray, prm=()) -> np.ndarray | None:
    """op(x) for a float32 array (see UNARY), or None without the C kernels."""
    if not _fast.enabled() or x.dtype != np.float32:
        return None
    lib, ffi = _fast.library()
    shape = x.shape
    x = np.ascontiguousarray(x)   # (1-D for a 0-d x: its shape is restored below)
    y = np.empty_like(x)
    params = np.asarray(unary_params(op, prm), dtype=np.float64)
    rc = lib.qe_ew_unary_f32(UNARY[op], _fast._ptr(x), _fast._ptr(y), x.size,
                             ffi.cast("double *", params.ctypes.data))
    _check(rc)
    return y.reshape(shape)


def softmax_geometry(shape, axis: int) -> tuple[int, int, int]:
    """(outer, len, inner) of a row-major array normalized along ``axis``."""
    shape = tuple(int(s) for s in shape)
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, shape[axis], inner


def softmax(x: np.ndarray, axis: int, beta: float, log_form: bool) -> np.ndarray | None:
    """Softmax (or LogSoftmax) of a float32 array along ``axis``, or None without the C kernels."""
    if not _fast.enabled() or x.dtype != np.float32 or x.ndim == 0:
        return None
    lib, ffi = _fast.library()
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    outer, length, inner = softmax_geometry(x.shape, axis)
    scratch = np.empty(2 * max(length, 1), dtype=np.float64)
    rc = lib.qe_ew_softmax_f32(_fast._ptr(x), _fast._ptr(y),
                               ffi.cast("double *", scratch.ctypes.data), outer, length, inner,
                               float(beta), int(log_form))
    _check(rc)
    return y


def _f64(a: np.ndarray | None):
    return None if a is None else np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


def norm(x: np.ndarray, geometry, gamma, beta, eps: float, center: bool, scale: bool) -> np.ndarray | None:
    """The normalization of a float32 array viewed as ``geometry`` = (nb, ns, ng, ncg): statistics
    per (b, g) over (s, cg), then * gamma + beta (float64 vectors of ng * ncg, or None); None
    without the C kernels."""
    if not _fast.enabled() or x.dtype != np.float32:
        return None
    lib, ffi = _fast.library()
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    g, b = _f64(gamma), _f64(beta)
    nb, ns, ng, ncg = (int(v) for v in geometry)
    for v in (g, b):
        if v is not None and v.size != ng * ncg:
            return None
    null = ffi.NULL
    rc = lib.qe_ew_norm_f32(_fast._ptr(x), _fast._ptr(y),
                            null if g is None else ffi.cast("double *", g.ctypes.data),
                            null if b is None else ffi.cast("double *", b.ctypes.data),
                            nb, ns, ng, ncg, float(eps), int(center), int(scale))
    _check(rc)
    return y
