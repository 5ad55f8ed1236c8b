"""Spatial resizing of channel-last tensors: Resize, ResizeBilinear, ResizeNearestNeighbor
(QnnOpDef.h QNN_OP_RESIZE, QNN_OP_RESIZE_BILINEAR, QNN_OP_RESIZE_NEAREST_NEIGHBOR).

None of the three has a size parameter: the output size is the node's declared output tensor
(``declared_outputs``), whose batch and channel dimensions must equal the input's.  Layouts are
channel-last: Resize takes [b, w, c], [b, h, w, c] or [b, d, h, w, c] (the ONNX Runtime QNN EP
emits Resize for ranks 3 to 5), the other two [b, h, w, c].

Resize follows the ONNX Resize operator (QNN's parameters are ONNX's attributes):

- ``transformation_mode`` maps an output index x of an axis (in size ``n_in``, out size
  ``n_out``, scale s = n_out / n_in) to an input coordinate: HALF_PIXEL (x + 0.5) / s - 0.5;
  PYTORCH_HALF_PIXEL the same when n_out > 1, else 0; ALIGN_CORNERS x (n_in - 1) / (n_out - 1)
  when n_out > 1, else 0; ASYMMETRIC x / s.
- ``interpolation_mode`` NEAREST rounds that coordinate by ``nearest_mode``
  (ROUND_PREFER_FLOOR / ROUND_PREFER_CEIL: to nearest, ties down / up; FLOOR; CEIL) and clamps
  it into the input; the rounding is done in exact rational arithmetic, so integral coordinates
  never fall on the wrong side through float error.  LINEAR and CUBIC are separable (one axis
  after the other) with edge replication outside the input; CUBIC uses Keys' kernel with
  A = ``cubic_coeff``.  ``exclude_outside`` gives taps outside the input weight 0 and
  renormalizes the others (it only changes CUBIC results).

ResizeBilinear and ResizeNearestNeighbor follow TensorFlow's resize_bilinear and
resize_nearest_neighbor (``align_corners`` / ``half_pixel_centers``, at most one of them set):

- ResizeBilinear = Resize LINEAR with ALIGN_CORNERS, HALF_PIXEL or (neither flag) ASYMMETRIC.
  ``antialias`` (tf.image.resize's antialias): when an axis shrinks (s < 1), the triangle
  kernel is widened to 1/s input pixels, taps outside the input are dropped and the weights
  renormalized (TensorFlow's scale_and_translate); growing axes are unaffected.
- ResizeNearestNeighbor: align_corners -> round(x (n_in - 1) / (n_out - 1)) with ties up;
  half_pixel_centers -> floor((x + 0.5) n_in / n_out); neither -> floor(x n_in / n_out);
  clamped into the input.  (These are ONNX ALIGN_CORNERS + ROUND_PREFER_CEIL, HALF_PIXEL +
  ROUND_PREFER_CEIL and ASYMMETRIC + FLOOR.)

Kernels: "fast" adds the float32 products of the interpolation taps in C, from the first tap
up (csrc/eng_movement.c ``qe_resize_taps``, the C engine's step as well); "reference" sums
them with numpy, whose order depends on the layout.
"""
from __future__ import annotations

import numpy as np

from ..headers import Q
from . import _fast, _fast_movement
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, check_real, from_compute, same_spec, to_compute

NEAREST = Q.QNN_OP_RESIZE_INTERPOLATION_MODE_NEAREST
LINEAR = Q.QNN_OP_RESIZE_INTERPOLATION_MODE_LINEAR
CUBIC = Q.QNN_OP_RESIZE_INTERPOLATION_MODE_CUBIC

HALF_PIXEL = Q.QNN_OP_RESIZE_TRANSFORMATION_MODE_HALF_PIXEL
PYTORCH_HALF_PIXEL = Q.QNN_OP_RESIZE_TRANSFORMATION_MODE_PYTORCH_HALF_PIXEL
ALIGN_CORNERS = Q.QNN_OP_RESIZE_TRANSFORMATION_MODE_ALIGN_CORNERS
ASYMMETRIC = Q.QNN_OP_RESIZE_TRANSFORMATION_MODE_ASYMMETRIC

ROUND_PREFER_FLOOR = Q.QNN_OP_RESIZE_NEAREST_MODE_ROUND_PREFER_FLOOR
ROUND_PREFER_CEIL = Q.QNN_OP_RESIZE_NEAREST_MODE_ROUND_PREFER_CEIL
FLOOR = Q.QNN_OP_RESIZE_NEAREST_MODE_FLOOR
CEIL = Q.QNN_OP_RESIZE_NEAREST_MODE_CEIL

_TRANSFORM_NAMES = {HALF_PIXEL: "HALF_PIXEL", PYTORCH_HALF_PIXEL: "PYTORCH_HALF_PIXEL",
                    ALIGN_CORNERS: "ALIGN_CORNERS", ASYMMETRIC: "ASYMMETRIC"}
_INTERP_NAMES = {NEAREST: "NEAREST", LINEAR: "LINEAR", CUBIC: "CUBIC"}
_ROUND_NAMES = {ROUND_PREFER_FLOOR: "ROUND_PREFER_FLOOR", ROUND_PREFER_CEIL: "ROUND_PREFER_CEIL",
                FLOOR: "FLOOR", CEIL: "CEIL"}


# ---- coordinate maps (one axis) ---------------------------------------------------------------
def _rational_coord(n_out: int, n_in: int, transform: int) -> tuple[np.ndarray, int]:
    """Input coordinates of output indices 0..n_out-1 as (numerators, common denominator)."""
    x = np.arange(n_out, dtype=np.int64)
    if transform in (HALF_PIXEL, PYTORCH_HALF_PIXEL):
        if transform == PYTORCH_HALF_PIXEL and n_out == 1:
            return np.zeros(1, np.int64), 1
        return (2 * x + 1) * n_in - n_out, 2 * n_out
    if transform == ALIGN_CORNERS:
        if n_out == 1:
            return np.zeros(1, np.int64), 1
        return x * (n_in - 1), n_out - 1
    return x * n_in, n_out  # ASYMMETRIC


def nearest_indices(n_out: int, n_in: int, transform: int, rounding: int) -> np.ndarray:
    """Nearest input index per output index (exact rounding of a rational coordinate)."""
    num, den = _rational_coord(n_out, n_in, transform)
    if rounding == FLOOR:
        idx = num // den
    elif rounding == CEIL:
        idx = -((-num) // den)
    elif rounding == ROUND_PREFER_CEIL:  # floor(v + 1/2)
        idx = (2 * num + den) // (2 * den)
    else:  # ROUND_PREFER_FLOOR: ceil(v - 1/2)
        idx = -((den - 2 * num) // (2 * den))
    return np.clip(idx, 0, n_in - 1)


def float_coords(n_out: int, n_in: int, transform: int) -> np.ndarray:
    num, den = _rational_coord(n_out, n_in, transform)
    return num.astype(np.float64) / den


def _keys_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic weights of taps floor(c)-1 .. floor(c)+2 for fractional parts t: [n, 4]."""
    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def interp_taps(coords: np.ndarray, n_in: int, mode: int, cubic_coeff: float = -0.75,
                exclude_outside: bool = False, antialias_scale: float | None = None):
    """(indices [n_out, k], weights [n_out, k]) of a separable interpolation along one axis.

    Indices are clamped into the input (edge replication) after ``exclude_outside`` has zeroed
    and renormalized the weights of outside taps.  ``antialias_scale`` (< 1): triangle kernel
    widened to 1/scale input pixels.
    """
    base = np.floor(coords).astype(np.int64)
    t = coords - base
    if mode == CUBIC:
        idx = base[:, None] + np.arange(-1, 3)
        w = _keys_weights(t, cubic_coeff)
    elif antialias_scale is not None and antialias_scale < 1.0:
        s = antialias_scale
        start = int(np.floor(-1.0 / s)) + 1
        idx = base[:, None] + np.arange(start, 2 - start)
        w = np.clip(1.0 - np.abs(idx - coords[:, None]) * s, 0.0, 1.0)
        w = w / w.sum(axis=1, keepdims=True)
    else:
        idx = base[:, None] + np.arange(2)
        w = np.stack([1.0 - t, t], axis=1)
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), w


def apply_gather(x: np.ndarray, axis: int, idx: np.ndarray) -> np.ndarray:
    return np.take(x, idx, axis=axis)


def apply_taps(x: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_k w[o, k] * x[..., idx[o, k], ...] along ``axis``."""
    g = np.take(x, idx, axis=axis)  # [..., n_out, k, ...]
    shape = (1,) * axis + w.shape + (1,) * (x.ndim - axis - 1)
    return np.sum(g * w.reshape(shape).astype(x.dtype), axis=axis + 1)


# ---- ops ----------------------------------------------------------------------------------------
def _check_enum(op: str, params, name: str, names: dict) -> None:
    v = params[name]
    if v not in names:
        allowed = ", ".join(f"{k} ({n})" for k, n in sorted(names.items()))
        raise OpCheckError(f"QNNEMU-{op}-{name.replace('_', '-')}", f"params[{name}]",
                           f"{name} must be one of {allowed}; got {v}")


class _ResizeBase(Op, register=False):
    inputs = ("in[0]",)
    ranks: tuple[int, ...] = (4,)

    @classmethod
    def check_params(cls, params) -> None:
        pass

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        x = inputs[0]
        check_rank(op, 0, x, cls.ranks)
        check_real(op, 0, x)
        cls.check_params(params)
        if not declared_outputs:
            raise OpCheckError(f"QNNEMU-{op}-output-unknown", "outputTensors[0].dimensions",
                               f"{op} takes its output size from the declared output tensor, "
                               f"and none was given")
        want = tuple(int(d) for d in declared_outputs[0].shape)
        if (len(want) != x.rank or want[0] != x.shape[0] or want[-1] != x.shape[-1]
                or min(want[1:-1]) < 1):
            raise OpCheckError(f"QNNEMU-{op}-output-shape", "outputTensors[0].dimensions",
                               f"the output must have the input's rank {x.rank}, batch "
                               f"{x.shape[0]} and channels {x.shape[-1]}, and spatial sizes "
                               f">= 1; input {list(x.shape)}, output {list(want)}")
        return [same_spec(x, shape=want)]

    # Per-axis plans: ("gather", idx) or ("taps", idx, w), computed once per shape pair.
    def axis_plan(self, n_out: int, n_in: int, params):
        raise NotImplementedError

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        self._plans: dict = {}

    def _plan(self, in_shape, out_shape, params):
        key = (tuple(in_shape), tuple(out_shape))
        plan = self._plans.get(key)
        if plan is None:
            # Every mapping is the identity on an axis whose size does not change.
            plan = [(axis, self.axis_plan(int(out_shape[axis]), int(in_shape[axis]), params))
                    for axis in range(1, len(in_shape) - 1) if in_shape[axis] != out_shape[axis]]
            self._plans[key] = plan
        return plan

    def _run(self, x, **params):
        if not self.output_specs:
            raise OpCheckError(f"QNNEMU-{self.op_type}-output-unknown",
                               "outputTensors[0].dimensions",
                               f"{self.op_type} needs its output spec to run")
        out_shape = self.output_specs[0].shape
        dtype = x.dtype
        y = to_compute(x)
        fast = _fast.fast()
        for axis, step in self._plan(x.shape, out_shape, params):
            if step[0] == "gather":
                y = apply_gather(y, axis, step[1])
            else:
                # fast path: the C interpolation the C engine runs too (one summation order)
                z = _fast_movement.resize_taps(y, axis, step[1], step[2]) if fast else None
                y = z if z is not None else apply_taps(y, axis, step[1], step[2])
        return from_compute(np.ascontiguousarray(y), dtype)


class Resize(_ResizeBase):
    ranks = (3, 4, 5)
    params = {
        "exclude_outside": ParamSpec("scalar", ("bool",), default=False),
        "transformation_mode": ParamSpec("scalar", ("uint",), default=HALF_PIXEL),
        "interpolation_mode": ParamSpec("scalar", ("uint",), default=NEAREST),
        "nearest_mode": ParamSpec("scalar", ("uint",), default=ROUND_PREFER_FLOOR),
        "cubic_coeff": ParamSpec("scalar", ("float",), default=-0.75),
    }

    @classmethod
    def check_params(cls, params) -> None:
        _check_enum(cls.op_type, params, "transformation_mode", _TRANSFORM_NAMES)
        _check_enum(cls.op_type, params, "interpolation_mode", _INTERP_NAMES)
        _check_enum(cls.op_type, params, "nearest_mode", _ROUND_NAMES)

    def axis_plan(self, n_out, n_in, params):
        transform = params["transformation_mode"]
        mode = params["interpolation_mode"]
        if mode == NEAREST:
            return ("gather", nearest_indices(n_out, n_in, transform, params["nearest_mode"]))
        idx, w = interp_taps(float_coords(n_out, n_in, transform), n_in, mode,
                             params["cubic_coeff"], params["exclude_outside"])
        return ("taps", idx, w)


def _tf_flags(op: str, params) -> None:
    if params["align_corners"] and params["half_pixel_centers"]:
        raise OpCheckError(f"QNNEMU-{op}-align-corners-half-pixel", "params[half_pixel_centers]",
                           "align_corners and half_pixel_centers cannot both be true "
                           "(got align_corners=1, half_pixel_centers=1)")


def _tf_transform(params) -> int:
    if params["align_corners"]:
        return ALIGN_CORNERS
    return HALF_PIXEL if params["half_pixel_centers"] else ASYMMETRIC


_TF_FLAGS = {
    "align_corners": ParamSpec("scalar", ("bool",), default=False),
    "half_pixel_centers": ParamSpec("scalar", ("bool",), default=False),
}


class _TfResize(_ResizeBase, register=False):
    """ResizeBilinear / ResizeNearestNeighbor: the TensorFlow-style align_corners and
    half_pixel_centers flags (at most one of them true) pick the coordinate transform."""
    params = _TF_FLAGS

    @classmethod
    def check_params(cls, params) -> None:
        _tf_flags(cls.op_type, params)


class ResizeBilinear(_TfResize):
    params = {**_TF_FLAGS, "antialias": ParamSpec("scalar", ("bool",), default=False)}

    def axis_plan(self, n_out, n_in, params):
        coords = float_coords(n_out, n_in, _tf_transform(params))
        if params["antialias"] and n_out < n_in:
            idx, w = interp_taps(coords, n_in, LINEAR, exclude_outside=True,
                                 antialias_scale=n_out / n_in)
        else:
            idx, w = interp_taps(coords, n_in, LINEAR)
        return ("taps", idx, w)


class ResizeNearestNeighbor(_TfResize):
    quant_passthrough = True

    def axis_plan(self, n_out, n_in, params):
        if params["align_corners"] or params["half_pixel_centers"]:
            return ("gather", nearest_indices(n_out, n_in, _tf_transform(params),
                                              ROUND_PREFER_CEIL))
        return ("gather", nearest_indices(n_out, n_in, ASYMMETRIC, FLOOR))


__all__ = ["Resize", "ResizeBilinear", "ResizeNearestNeighbor", "nearest_indices",
           "float_coords", "interp_taps", "apply_taps", "apply_gather"]
