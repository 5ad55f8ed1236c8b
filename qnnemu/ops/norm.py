"""Normalizations: Batchnorm, InstanceNorm, LayerNorm, RmsNorm, GroupNorm, L2Norm, Lrn
(QnnOpDef.h QNN_OP_BATCHNORM, QNN_OP_INSTANCE_NORM, ...).

Layouts follow the QNN op definitions: the channel is the LAST dimension (NHWC, [b, ..., c]).

- Batchnorm is QNN's folded form: ``out = in[0] * in[1] + in[2]`` per channel; the client
  (ORT's QNN EP, the QNN converters) folds mean/variance/epsilon into in[1] and in[2].
- InstanceNorm: statistics over ``region`` (ACROSS_SPATIAL: the dimensions between batch and
  channel, per batch and channel; ACROSS_CHANNEL: the channel, per position; ACROSS_ALL: all
  but batch).  ``mode`` MU_SIGMA centres on the mean, RMS does not; with ``normalize_variance``
  false nothing is divided.  Then ``* gamma[c] + beta[c]``.
- LayerNorm / RmsNorm: statistics over ``axes``; gamma (required: the vendor's HTP backend
  fails to prepare a LayerNorm/RmsNorm without it) and beta (optional) have the shape of the
  normalized dimensions (``in[0].shape[axes]``, or a shape numpy broadcasts to it).
  LayerNorm ``(x - mean) / sqrt(var + eps) * gamma + beta`` (epsilon default 0.001);
  RmsNorm ``x / sqrt(mean(x^2) + eps) * gamma`` (epsilon default 1e-6).  RmsNorm's beta is
  accepted but NOT added: the vendor's HTP backend ignores it (a non-zero beta gives
  ``x / rms * gamma`` exactly), and its clients (ORT's QNN EP, ExecuTorch) pass zeros.
- GroupNorm: channels split into ``group`` contiguous groups; statistics per batch and group
  over all non-batch dimensions of the group's channels.
- L2Norm: ``x / sqrt(max(sum(x^2), epsilon))`` over ``axes`` (when given) else ``axis``.
  Without either, the vendor's HTP backend normalizes over axis 0 (not the last axis), so the
  ``axis`` default is 0 here too.
- Lrn: ``x / (bias + alpha * sqr_sum) ^ beta`` where ``sqr_sum`` sums ``x^2`` over channels
  ``c - radius .. c + radius`` (ACROSS_CHANNEL) or over the ``(2 radius + 1)^2`` spatial window
  (WITHIN_CHANNEL), clipped at the edges.  QNN does NOT divide alpha by the window size (ONNX
  LRN does: ORT's QNN EP passes ``alpha / size`` and ``radius = (size - 1) / 2``).  ``radius``
  is mandatory; alpha, beta, bias default to 1, 0.5, 1 (all as measured on the vendor's
  backend).

Statistics are computed in float64 (two passes: mean, then the mean of squared deviations), so
float32 results stay within a few ulps of a float64 reference even for badly centred data.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from . import _fast_eltwise
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_real, from_compute, same_spec, to_compute

MU_SIGMA, RMS = Q.QNN_OP_INSTANCE_NORM_MODE_MU_SIGMA, Q.QNN_OP_INSTANCE_NORM_MODE_RMS
ACROSS_SPATIAL = Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_SPATIAL
ACROSS_CHANNEL = Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_CHANNEL
ACROSS_ALL = Q.QNN_OP_INSTANCE_NORM_REGION_ACROSS_ALL
LRN_ACROSS_CHANNEL = Q.QNN_OP_LRN_REGION_ACROSS_CHANNEL
LRN_WITHIN_CHANNEL = Q.QNN_OP_LRN_REGION_WITHIN_CHANNEL


# ---- shared checks ------------------------------------------------------------------------------
def check_min_rank(op: str, idx: int, spec: TensorSpec, lo: int) -> None:
    if spec.rank < lo:
        raise OpCheckError(f"QNNEMU-{op}-input-rank", f"inputTensors[{idx}].rank",
                           f"{op} input {idx} must have rank >= {lo}, got {spec.rank} "
                           f"(dimensions {list(spec.shape)})")


def real_input(op: str, inputs: list[TensorSpec], min_rank: int = 0, ints: bool = False) -> TensorSpec:
    """in[0], checked: a real tensor (float or fixed point; with ``ints`` plain INT/UINT too) of
    rank >= ``min_rank`` -- the first check of the normalization and reduction ops."""
    x = inputs[0]
    check_real(op, 0, x, ints=ints)
    if min_rank:
        check_min_rank(op, 0, x, min_rank)
    return x


def check_axes(op: str, value, rank: int, name: str = "axes") -> tuple[int, ...]:
    """A QNN ``axes`` tensor: at least one value, each in [0, rank-1]; returned sorted and
    de-duplicated (the vendor's HTP backend accepts a repeated axis as one)."""
    a = np.asarray(value).reshape(-1).astype(np.int64)
    if a.size == 0:
        raise OpCheckError(f"QNNEMU-{op}-axes", f"params[{name}]",
                           f"{name} must hold at least one axis, got an empty tensor")
    if ((a < 0) | (a >= rank)).any():
        raise OpCheckError(f"QNNEMU-{op}-axes", f"params[{name}]",
                           f"every axis must be in [0, {rank - 1}] for input rank {rank}, "
                           f"got {a.tolist()}")
    return tuple(sorted({int(v) for v in a}))


def check_axis(op: str, axis: int, rank: int, name: str = "axis") -> int:
    if not 0 <= axis < rank:
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"{name} must be in [0, {rank - 1}] for input rank {rank}, got {axis}")
    return int(axis)


def _check_vector(op: str, idx: int, spec: TensorSpec, n: int, what: str) -> None:
    """A per-channel input: 1-D of ``n`` elements."""
    check_real(op, idx, spec)
    if tuple(spec.shape) != (n,):
        raise OpCheckError(f"QNNEMU-{op}-{what}-shape", f"inputTensors[{idx}].dimensions",
                           f"{what} must have dimensions [{n}] (input 0's channels), got "
                           f"{list(spec.shape)}")


def _check_affine(op: str, idx: int, spec: TensorSpec, norm_shape: tuple[int, ...],
                  what: str) -> None:
    """gamma/beta of LayerNorm/RmsNorm: the normalized dimensions, or a shape numpy broadcasts
    to them (extra leading dimensions of 1 allowed: the vendor's backend takes gamma [1, h] for
    axes [rank-1])."""
    check_real(op, idx, spec)
    shape = tuple(spec.shape)
    core = _drop_leading_ones(shape, len(norm_shape))
    ok = len(core) <= len(norm_shape) and all(
        g in (1, n) for g, n in zip(core[::-1], norm_shape[::-1]))
    if not ok:
        raise OpCheckError(f"QNNEMU-{op}-{what}-shape", f"inputTensors[{idx}].dimensions",
                           f"{what} must have the normalized dimensions {list(norm_shape)} "
                           f"(input 0 at the axes) or broadcast to them, got {list(shape)}")


def _drop_leading_ones(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    while len(shape) > rank and shape[0] == 1:
        shape = shape[1:]
    return shape


def _out_dtype(x: np.ndarray):
    return x.dtype if x.dtype in (np.float16, np.float32) else np.dtype(np.float32)


def _standardize(xd: np.ndarray, axes: tuple[int, ...], eps: float, center: bool,
                 scale: bool = True) -> np.ndarray:
    """In place on a float64 array: subtract the mean (``center``) and divide by
    sqrt(mean of squares + eps) (``scale``) over ``axes``.

    Two-pass: the mean first, then the mean of squared deviations -- stable for data far from
    zero.  The last-axes case (LayerNorm over the hidden size) runs on a 2-D view.
    """
    r = xd.ndim
    if axes == tuple(range(r - len(axes), r)) and xd.flags.c_contiguous:
        outer = int(np.prod(xd.shape[:r - len(axes)], dtype=np.int64))
        v = xd.reshape(outer, -1)
        n = v.shape[1]
        if center:
            v -= v.mean(axis=1, keepdims=True)
        if scale:
            ms = np.einsum("ij,ij->i", v, v) / n
            v *= (1.0 / np.sqrt(ms + eps))[:, None]
        return xd
    if center:
        xd -= xd.mean(axis=axes, keepdims=True)
    if scale:
        ms = np.mean(np.square(xd), axis=axes, keepdims=True)
        xd *= 1.0 / np.sqrt(ms + eps)
    return xd


def _affine(y: np.ndarray, gamma, beta) -> np.ndarray:
    if gamma is not None:
        y *= gamma
    if beta is not None:
        y += beta
    return y


# ---- Batchnorm ----------------------------------------------------------------------------------
class Batchnorm(Op):
    """out = in[0] * weight[c] + bias[c] (c: the last dimension); bias optional (zeros)."""

    inputs = ("in[0]", "in[1]", "in[2]?")
    params = {}

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1)
        c = x.shape[-1]
        _check_vector(op, 1, inputs[1], c, "weight")
        if len(inputs) > 2:
            _check_vector(op, 2, inputs[2], c, "bias")
        return [same_spec(x)]

    def _run(self, x, w, b=None):
        dtype = _out_dtype(x)
        y = to_compute(x) * to_compute(w)
        if b is not None:
            y += to_compute(b)
        return from_compute(y, dtype)


# ---- InstanceNorm -------------------------------------------------------------------------------
class InstanceNorm(Op):
    inputs = ("in[0]", "in[1]", "in[2]")
    params = {
        "epsilon": ParamSpec("scalar", ("float",), default=1e-12),
        "mode": ParamSpec("scalar", ("uint",), default=MU_SIGMA),
        "normalize_variance": ParamSpec("scalar", ("bool",), default=True),
        "region": ParamSpec("scalar", ("uint",), default=ACROSS_SPATIAL),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=3)
        if params["mode"] not in (MU_SIGMA, RMS):
            raise OpCheckError(f"QNNEMU-{op}-mode", "params[mode]",
                               f"mode must be MU_SIGMA ({MU_SIGMA}) or RMS ({RMS}), "
                               f"got {params['mode']}")
        if params["region"] not in (ACROSS_SPATIAL, ACROSS_CHANNEL, ACROSS_ALL):
            raise OpCheckError(f"QNNEMU-{op}-region", "params[region]",
                               f"region must be ACROSS_SPATIAL ({ACROSS_SPATIAL}), "
                               f"ACROSS_CHANNEL ({ACROSS_CHANNEL}) or ACROSS_ALL ({ACROSS_ALL}), "
                               f"got {params['region']}")
        c = x.shape[-1]
        _check_vector(op, 1, inputs[1], c, "gamma")
        _check_vector(op, 2, inputs[2], c, "beta")
        return [same_spec(x)]

    @staticmethod
    def geometry(shape, region: int) -> tuple[int, int, int, int]:
        """x as [nb, ns, ng, ncg] for _fast_eltwise.norm: statistics per (b, g) over (s, cg)."""
        b, c = int(shape[0]), int(shape[-1])
        s = int(np.prod(shape[1:-1], dtype=np.int64))
        if region == ACROSS_SPATIAL:
            return b, s, c, 1
        if region == ACROSS_CHANNEL:
            return b * s, 1, 1, c
        return b, s, 1, c

    @staticmethod
    def region_axes(rank: int, region: int) -> tuple[int, ...]:
        if region == ACROSS_SPATIAL:
            return tuple(range(1, rank - 1))
        if region == ACROSS_CHANNEL:
            return (rank - 1,)
        return tuple(range(1, rank))

    def _run(self, x, gamma, beta, epsilon=1e-12, mode=MU_SIGMA, normalize_variance=True,
             region=ACROSS_SPATIAL):
        dtype = _out_dtype(x)
        y = _fast_eltwise.norm(x, self.geometry(x.shape, region), to_compute(gamma), to_compute(beta),
                               epsilon, mode == MU_SIGMA, normalize_variance)   # the engine's kernel
        if y is not None:
            return y
        axes = self.region_axes(x.ndim, region)
        y = _standardize(x.astype(np.float64), axes, epsilon, center=(mode == MU_SIGMA),
                         scale=normalize_variance)
        return from_compute(_affine(y, to_compute(gamma), to_compute(beta)), dtype)


# ---- LayerNorm / RmsNorm ------------------------------------------------------------------------
class _AxesNorm(Op, register=False):
    """Normalization over the ``axes`` param with gamma/beta shaped like those dimensions."""

    center = True

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=1)
        axes = check_axes(op, params["axes"], x.rank)
        norm_shape = tuple(x.shape[a] for a in axes)
        for idx, what in ((1, "gamma"), (2, "beta")):
            if len(inputs) > idx:
                _check_affine(op, idx, inputs[idx], norm_shape, what)
        return [same_spec(x)]

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._axes = None
        if self.input_specs:
            self._axes = check_axes(self.op_type, params["axes"], self.input_specs[0].rank)

    @staticmethod
    def _expand(p, x_shape, axes):
        """gamma/beta (shaped like x at ``axes``, maybe broadcast) -> broadcastable to x."""
        if p is None:
            return None
        norm_shape = tuple(x_shape[a] for a in axes)
        full = [1] * len(x_shape)
        for a, n in zip(axes, norm_shape):
            full[a] = n
        p = to_compute(p)
        p = p.reshape(_drop_leading_ones(p.shape, len(norm_shape)))
        return np.broadcast_to(p, norm_shape).reshape(full)

    def fast_layout(self, x_shape, ax, gamma, beta):
        """(geometry, gamma, beta) of _fast_eltwise.norm for normalized trailing axes (the
        affine vectors flattened over them), else None."""
        r = len(x_shape)
        if tuple(ax) != tuple(range(r - len(ax), r)):
            return None
        n = int(np.prod([x_shape[a] for a in ax], dtype=np.int64))
        outer = int(np.prod(x_shape[:r - len(ax)], dtype=np.int64))
        g, b = self._expand(gamma, x_shape, ax), self._expand(beta, x_shape, ax)
        return (outer, 1, 1, n), g, b

    def _run(self, x, gamma=None, beta=None, epsilon=None, axes=None):
        dtype = _out_dtype(x)
        ax = self._axes if self._axes is not None else check_axes(self.op_type, axes, x.ndim)
        layout = self.fast_layout(x.shape, ax, gamma, beta) if x.dtype == np.float32 else None
        if layout is not None:
            y = _fast_eltwise.norm(x, layout[0], layout[1], layout[2], epsilon, type(self).center, True)
            if y is not None:
                return y
        y = _standardize(x.astype(np.float64), ax, epsilon, center=type(self).center)
        return from_compute(_affine(y, self._expand(gamma, x.shape, ax),
                                    self._expand(beta, x.shape, ax)), dtype)


class LayerNorm(_AxesNorm):
    """(x - mean) / sqrt(var + epsilon) * gamma + beta over ``axes``; beta optional.

    Fixed-point output: the HTP adds beta in whole output LSBs -- the result's codes are
    round(normalized * gamma / scale) + round(beta / scale) - offset (docs/numerics.md,
    "LayerNorm"; tests/test_quant_vendor.py pins it).  Beta is snapped to the output grid here
    and the plan's requantization does the other rounding."""

    inputs = ("in[0]", "in[1]", "in[2]?")
    params = {
        "epsilon": ParamSpec("scalar", ("float",), default=0.001),
        "axes": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
    }
    center = True

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        q = self.output_specs[0].quant if self.output_specs else None
        per_tensor = q is not None and q.axis is None and getattr(q, "block_scales", None) is None
        self._beta_grid = float(np.float32(q.scale)) if per_tensor else None

    def snapped_beta(self, beta):
        """beta on the output grid (fixed-point output), else as given."""
        if beta is not None and self._beta_grid is not None:
            step = self._beta_grid
            beta = (np.rint(np.asarray(beta, dtype=np.float64) / step) * step)
        return beta

    def _run(self, x, gamma=None, beta=None, epsilon=None, axes=None):
        return super()._run(x, gamma, self.snapped_beta(beta), epsilon=epsilon, axes=axes)


class RmsNorm(_AxesNorm):
    """x / sqrt(mean(x^2) + epsilon) * gamma over ``axes``; beta optional and ignored (see the
    module docstring)."""

    inputs = ("in[0]", "in[1]", "in[2]?")
    params = {
        "epsilon": ParamSpec("scalar", ("float",), default=1e-6),
        "axes": ParamSpec("tensor", ("uint",), shape=(None,), required=True),
    }
    center = False

    def _run(self, x, gamma=None, beta=None, epsilon=None, axes=None):
        return super()._run(x, gamma, None, epsilon=epsilon, axes=axes)


# ---- GroupNorm ----------------------------------------------------------------------------------
class GroupNorm(Op):
    """Mean/variance per (batch, group of c/group contiguous channels) over all non-batch
    dimensions; then * gamma[c] + beta[c] (optional, ones/zeros)."""

    @staticmethod
    def geometry(shape, group: int) -> tuple[int, int, int, int]:
        """x as [nb, ns, ng, ncg] for _fast_eltwise.norm."""
        b, c = int(shape[0]), int(shape[-1])
        return b, int(np.prod(shape[1:-1], dtype=np.int64)), int(group), c // int(group)

    inputs = ("in[0]", "in[1]?", "in[2]?")
    params = {
        "epsilon": ParamSpec("scalar", ("float",), default=1e-5),
        "group": ParamSpec("scalar", ("uint",), default=1),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs, min_rank=2)
        c, g = x.shape[-1], int(params["group"])
        if g < 1 or c % g != 0:
            raise OpCheckError(f"QNNEMU-{op}-group", "params[group]",
                               f"group must be >= 1 and divide the channels ({c}), got {g}")
        for idx, what in ((1, "gamma"), (2, "beta")):
            if len(inputs) > idx:
                _check_vector(op, idx, inputs[idx], c, what)
        return [same_spec(x)]

    def _run(self, x, gamma=None, beta=None, epsilon=1e-5, group=1):
        dtype = _out_dtype(x)
        b, c = x.shape[0], x.shape[-1]
        y = _fast_eltwise.norm(x, self.geometry(x.shape, group), to_compute(gamma), to_compute(beta),
                               epsilon, True, True)   # the engine's kernel
        if y is not None:
            return y
        xd = x.astype(np.float64).reshape(b, -1, group, c // group)
        y = _standardize(xd, (1, 3), epsilon, center=True).reshape(x.shape)
        return from_compute(_affine(y, to_compute(gamma), to_compute(beta)), dtype)


# ---- L2Norm -------------------------------------------------------------------------------------
class L2Norm(Op):
    """x / sqrt(max(sum(x^2), epsilon)) over ``axes`` (if given and non-empty) else ``axis``
    (default 0, as the vendor's backend does)."""

    inputs = ("in[0]",)
    params = {
        "axis": ParamSpec("scalar", ("uint",), default=0),
        "axes": ParamSpec("tensor", ("uint",), shape=(None,), default=None),
        "epsilon": ParamSpec("scalar", ("float",), default=1e-12),
    }

    @classmethod
    def norm_axes(cls, rank: int, params) -> tuple[int, ...]:
        axes = params.get("axes")
        if axes is not None and np.asarray(axes).size:
            return check_axes(cls.op_type, axes, rank)
        return (check_axis(cls.op_type, int(params.get("axis") or 0), rank),)

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        x = inputs[0]
        check_real(cls.op_type, 0, x)
        check_min_rank(cls.op_type, 0, x, 1)
        cls.norm_axes(x.rank, params)
        return [same_spec(x)]

    def _run(self, x, axis=0, axes=None, epsilon=1e-12):
        dtype = _out_dtype(x)
        ax = self.norm_axes(x.ndim, {"axis": axis, "axes": axes})
        xd = x.astype(np.float64)
        ss = np.sum(np.square(xd), axis=ax, keepdims=True)
        xd /= np.sqrt(np.maximum(ss, epsilon))
        return from_compute(xd, dtype)


# ---- Lrn ----------------------------------------------------------------------------------------
def _window_sum(sq: np.ndarray, axis: int, radius: int) -> np.ndarray:
    """sum of sq[..., i - radius .. i + radius, ...] along ``axis``, clipped at the edges."""
    n = sq.shape[axis]
    cs = np.cumsum(sq, axis=axis)
    pad = [(0, 0)] * sq.ndim
    pad[axis] = (1, 0)
    cs = np.pad(cs, pad)  # cs[i] = sum of sq[:i]
    idx = np.arange(n)
    hi = np.minimum(idx + radius + 1, n)
    lo = np.maximum(idx - radius, 0)
    return np.take(cs, hi, axis=axis) - np.take(cs, lo, axis=axis)


class Lrn(Op):
    """x / (bias + alpha * sqr_sum) ^ beta, sqr_sum over a window of ``radius`` (see module doc)."""

    inputs = ("in[0]",)
    params = {
        "alpha": ParamSpec("scalar", ("float",), default=1.0),
        "beta": ParamSpec("scalar", ("float",), default=0.5),
        "bias": ParamSpec("scalar", ("float",), default=1.0),
        "radius": ParamSpec("scalar", ("int", "uint"), required=True),
        "region": ParamSpec("scalar", ("uint",), default=LRN_ACROSS_CHANNEL),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type
        x = real_input(op, inputs)
        region = params["region"]
        if region not in (LRN_ACROSS_CHANNEL, LRN_WITHIN_CHANNEL):
            raise OpCheckError(f"QNNEMU-{op}-region", "params[region]",
                               f"region must be ACROSS_CHANNEL ({LRN_ACROSS_CHANNEL}) or "
                               f"WITHIN_CHANNEL ({LRN_WITHIN_CHANNEL}), got {region}")
        if region == LRN_WITHIN_CHANNEL and x.rank != 4:
            raise OpCheckError(f"QNNEMU-{op}-input-rank", "inputTensors[0].rank",
                               f"WITHIN_CHANNEL needs a [b, h, w, c] input (rank 4), got rank "
                               f"{x.rank} (dimensions {list(x.shape)})")
        check_min_rank(op, 0, x, 1)
        if params["radius"] < 0:
            raise OpCheckError(f"QNNEMU-{op}-radius", "params[radius]",
                               f"radius must be >= 0, got {params['radius']}")
        return [same_spec(x)]

    def _run(self, x, alpha=1.0, beta=0.5, bias=1.0, radius=0, region=LRN_ACROSS_CHANNEL):
        dtype = _out_dtype(x)
        xd = x.astype(np.float64)
        sq = np.square(xd)
        if region == LRN_WITHIN_CHANNEL:
            s = _window_sum(_window_sum(sq, 1, radius), 2, radius)
        else:
            s = _window_sum(sq, x.ndim - 1, radius)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = xd / np.power(bias + alpha * s, beta)
        return from_compute(y, dtype)


__all__ = ["Batchnorm", "InstanceNorm", "LayerNorm", "RmsNorm", "GroupNorm", "L2Norm", "Lrn",
           "check_axes", "check_axis", "check_min_rank", "real_input"]
