"""Sampling at computed positions: GridSample and RoiAlign (QnnOpDef.h QNN_OP_GRID_SAMPLE,
QNN_OP_ROI_ALIGN).

GridSample (ONNX GridSample / torch.nn.functional.grid_sample, channel-last): input
[b, h, w, c], grid [b, h_out, w_out, 2] holding normalized (x, y) in [-1, 1] (x along the
width); output [b, h_out, w_out, c].  A normalized coordinate g maps to the pixel coordinate
(g + 1) / 2 * (size - 1) with ``align_corners``, else ((g + 1) * size - 1) / 2.
``padding_mode`` ZEROS: taps outside the input read 0; BORDER: coordinates are clamped into
[0, size - 1]; REFLECTION: coordinates are reflected at the borders (at 0 and size - 1 with
align_corners, at -0.5 and size - 0.5 without) and then clamped.  ``mode`` BILINEAR
interpolates the 4 neighbours; NEAREST takes the pixel at the coordinate rounded half to even
(as PyTorch and ONNX do).

RoiAlign (Mask R-CNN's RoIAlign; NNAPI ROI_ALIGN, ONNX RoiAlign with mode "avg"): features
[b, h, w, c], rois [n, 4] as (x1, y1, x2, y2) in image coordinates, batch indices [n] (which
feature map each roi reads); output [n, out_h, out_w, c], its size from the declared output.
Feature coordinates are image coordinates divided by ``img_size_ratio`` = [height ratio, width
ratio] (the ONNX Runtime QNN EP passes 1 / spatial_scale twice).  With ``aligned`` the roi is
shifted by -0.5 pixel and kept as is (ONNX "half_pixel"); without, it is not shifted and each
side is at least 1 pixel ("output_half_pixel").  Each output cell averages a grid of
``num_samples_y`` x ``num_samples_x`` bilinear samples placed at the centres of equal
sub-cells; a count <= 0 means adaptive: ceil(roi size / output size) per roi (the QNN default
-1; the EP passes ONNX's sampling_ratio, 0 for adaptive).  A sample further than one pixel
outside the map reads 0; otherwise its coordinate is clamped into the map.
``allow_invalid_roi``: without it, rois with x2 < x1 or y2 < y1 are rejected when the rois
are static; rois that arrive at execution are computed by the same formulas either way.
"""
from __future__ import annotations

import math

import numpy as np

from ..headers import Q
from .base import (
    Op,
    OpCheckError,
    ParamSpec,
    TensorSpec,
    check_index,
    check_rank,
    check_real,
    from_compute,
    same_spec,
    to_compute,
)

BILINEAR = Q.QNN_OP_GRID_SAMPLE_MODE_BILINEAR
NEAREST = Q.QNN_OP_GRID_SAMPLE_MODE_NEAREST
ZEROS = Q.QNN_OP_GRID_SAMPLE_PADDING_MODE_ZEROS
BORDER = Q.QNN_OP_GRID_SAMPLE_PADDING_MODE_BORDER
REFLECTION = Q.QNN_OP_GRID_SAMPLE_PADDING_MODE_REFLECTION


# ---- GridSample -------------------------------------------------------------------------------
def _unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return (g + 1.0) / 2.0 * (size - 1)
    return ((g + 1.0) * size - 1.0) / 2.0


def _reflect(c: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflects coordinates into [lo, hi] (PyTorch's reflect_coordinates)."""
    span = hi - lo
    if span <= 0:
        return np.zeros_like(c)
    d = np.abs(c - lo)
    flips = np.floor(d / span)
    extra = d - flips * span
    return np.where(flips % 2 == 0, lo + extra, hi - extra)


def _source_coord(g: np.ndarray, size: int, align_corners: bool, padding: int) -> np.ndarray:
    c = _unnormalize(g, size, align_corners)
    if padding == BORDER:
        c = np.clip(c, 0.0, size - 1)
    elif padding == REFLECTION:
        c = _reflect(c, 0.0, size - 1.0) if align_corners else _reflect(c, -0.5, size - 0.5)
        c = np.clip(c, 0.0, size - 1)
    return c


def grid_sample_nhwc(x: np.ndarray, grid: np.ndarray, mode: int, padding: int,
                     align_corners: bool) -> np.ndarray:
    n, h, w, _ = x.shape
    g = grid.astype(np.float64)
    cx = _source_coord(g[..., 0], w, align_corners, padding)
    cy = _source_coord(g[..., 1], h, align_corners, padding)
    b = np.arange(n).reshape(n, 1, 1)
    if mode == NEAREST:
        ix, iy = np.rint(cx).astype(np.int64), np.rint(cy).astype(np.int64)
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        y = x[b, np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)]
        return np.where(inside[..., None], y, np.zeros((), x.dtype))
    x0, y0 = np.floor(cx).astype(np.int64), np.floor(cy).astype(np.int64)
    fx, fy = cx - x0, cy - y0
    out = np.zeros(grid.shape[:3] + (x.shape[3],), x.dtype)
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            iy, ix = y0 + dy, x0 + dx
            inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
            weight = np.where(inside, wy * wx, 0.0).astype(x.dtype)
            out += x[b, np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)] * weight[..., None]
    return out


class GridSample(Op):
    inputs = ("in[0]", "in[1]")
    params = {
        "align_corners": ParamSpec("scalar", ("bool",), default=False),
        "mode": ParamSpec("scalar", ("uint",), default=BILINEAR),
        "padding_mode": ParamSpec("scalar", ("uint",), default=ZEROS),
    }

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        x, grid = inputs
        check_rank(op, 0, x, (4,))
        check_rank(op, 1, grid, (4,))
        check_real(op, 0, x)
        check_real(op, 1, grid)
        if grid.shape[3] != 2 or grid.shape[0] != x.shape[0]:
            raise OpCheckError(f"QNNEMU-{op}-grid-shape", "inputTensors[1].dimensions",
                               f"grid must be [batch {x.shape[0]}, h_out, w_out, 2]; got "
                               f"{list(grid.shape)} for input {list(x.shape)}")
        if params["mode"] not in (BILINEAR, NEAREST):
            raise OpCheckError(f"QNNEMU-{op}-mode", "params[mode]",
                               f"mode must be {BILINEAR} (BILINEAR) or {NEAREST} (NEAREST); "
                               f"got {params['mode']}")
        if params["padding_mode"] not in (ZEROS, BORDER, REFLECTION):
            raise OpCheckError(f"QNNEMU-{op}-padding-mode", "params[padding_mode]",
                               f"padding_mode must be {ZEROS} (ZEROS), {BORDER} (BORDER) or "
                               f"{REFLECTION} (REFLECTION); got {params['padding_mode']}")
        return [same_spec(x, shape=(x.shape[0], grid.shape[1], grid.shape[2], x.shape[3]))]

    def _run(self, x, grid, align_corners, mode, padding_mode):
        dtype = x.dtype
        y = grid_sample_nhwc(to_compute(x), to_compute(grid), mode, padding_mode, align_corners)
        return from_compute(y, dtype)


# ---- RoiAlign ---------------------------------------------------------------------------------
def _sample_weights(start: float, bin_size: float, n_bins: int, grid: int,
                    size: int) -> np.ndarray:
    """[n_bins, size]: the average over ``grid`` samples per bin of the 1-D bilinear weights
    (samples further than 1 outside [0, size] contribute nothing)."""
    a = np.zeros((n_bins, size))
    if grid <= 0:
        return a
    p = np.arange(n_bins)[:, None]
    i = np.arange(grid)[None, :]
    c = (start + p * bin_size + (i + 0.5) * bin_size / grid).ravel()  # [n_bins * grid]
    valid = (c >= -1.0) & (c <= size)
    c = np.maximum(c, 0.0)
    lo = np.floor(c).astype(np.int64)
    at_end = lo >= size - 1
    lo = np.where(at_end, size - 1, lo)
    hi = np.where(at_end, size - 1, lo + 1)
    c = np.where(at_end, lo.astype(np.float64), c)
    frac = c - lo
    rows = np.repeat(np.arange(n_bins), grid)
    np.add.at(a, (rows[valid], lo[valid]), (1.0 - frac)[valid])
    np.add.at(a, (rows[valid], hi[valid]), frac[valid])
    return a / grid


def roi_align_nhwc(x: np.ndarray, rois: np.ndarray, batch: np.ndarray, out_hw: tuple[int, int],
                   ratio: tuple[float, float], samples: tuple[int, int],
                   aligned: bool) -> np.ndarray:
    _, h, w, c = x.shape
    oh, ow = out_hw
    out = np.zeros((rois.shape[0], oh, ow, c), x.dtype)
    offset = 0.5 if aligned else 0.0
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = (float(v) for v in rois[r])
        sy0, sx0 = y1 / ratio[0] - offset, x1 / ratio[1] - offset
        rh, rw = y2 / ratio[0] - offset - sy0, x2 / ratio[1] - offset - sx0
        if not aligned:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bh, bw = rh / oh, rw / ow
        gy = samples[0] if samples[0] > 0 else math.ceil(rh / oh)
        gx = samples[1] if samples[1] > 0 else math.ceil(rw / ow)
        ay = _sample_weights(sy0, bh, oh, gy, h)  # [oh, h]
        ax = _sample_weights(sx0, bw, ow, gx, w)  # [ow, w]
        rows = np.flatnonzero(ay.any(axis=0))
        cols = np.flatnonzero(ax.any(axis=0))
        if rows.size == 0 or cols.size == 0:
            continue
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        feat = x[int(batch[r]), r0:r1, c0:c1]
        t = np.tensordot(ay[:, r0:r1].astype(x.dtype), feat, axes=(1, 0))  # [oh, cols, c]
        out[r] = np.einsum("qw,pwc->pqc", ax[:, c0:c1].astype(x.dtype), t)
    return out


class RoiAlign(Op):
    inputs = ("in[0]", "in[1]", "in[2]")
    native_int_inputs = (2,)            # batch indices
    params = {
        "img_size_ratio": ParamSpec("tensor", ("float",), shape=(2,), required=True),
        "num_samples_y": ParamSpec("scalar", ("int", "uint"), default=-1),
        "num_samples_x": ParamSpec("scalar", ("int", "uint"), default=-1),
        "aligned": ParamSpec("scalar", ("bool",), default=False),
        "allow_invalid_roi": ParamSpec("scalar", ("bool",), default=False),
    }

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        x, rois, batch = inputs
        check_rank(op, 0, x, (4,))
        check_rank(op, 1, rois, (2,))
        check_rank(op, 2, batch, (1,))
        check_real(op, 0, x)
        check_real(op, 1, rois)
        check_index(op, 2, batch)
        n = rois.shape[0]
        if rois.shape[1] != 4:
            raise OpCheckError(f"QNNEMU-{op}-rois-shape", "inputTensors[1].dimensions",
                               f"rois must be [num_rois, 4] (x1, y1, x2, y2); got "
                               f"{list(rois.shape)}")
        if batch.shape[0] != n:
            raise OpCheckError(f"QNNEMU-{op}-batch-indices-shape", "inputTensors[2].dimensions",
                               f"batch indices must be [num_rois] = [{n}]; got "
                               f"{list(batch.shape)}")
        ratio = np.asarray(params["img_size_ratio"], np.float64).reshape(-1)
        if not np.all(ratio > 0):
            raise OpCheckError(f"QNNEMU-{op}-img-size-ratio", "params[img_size_ratio]",
                               f"img_size_ratio values must be > 0; got {ratio.tolist()}")
        if batch.data is not None:
            b = np.asarray(batch.data).reshape(-1).astype(np.int64)
            if b.size and (b.min() < 0 or b.max() >= x.shape[0]):
                raise OpCheckError(f"QNNEMU-{op}-batch-index", "inputTensors[2]",
                                   f"batch indices must be in [0, {x.shape[0] - 1}]; got "
                                   f"{b.tolist()}")
        if rois.data is not None and not params["allow_invalid_roi"] and rois.quant is None:
            r = np.asarray(rois.data, np.float64).reshape(-1, 4)
            bad = np.flatnonzero((r[:, 2] < r[:, 0]) | (r[:, 3] < r[:, 1]))
            if bad.size:
                raise OpCheckError(f"QNNEMU-{op}-invalid-roi", "inputTensors[1]",
                                   f"roi {int(bad[0])} {r[bad[0]].tolist()} has x2 < x1 or "
                                   f"y2 < y1 (set allow_invalid_roi to accept it)")
        if not declared_outputs:
            raise OpCheckError(f"QNNEMU-{op}-output-unknown", "outputTensors[0].dimensions",
                               f"{op} takes its output size from the declared output tensor, "
                               f"and none was given")
        want = tuple(int(d) for d in declared_outputs[0].shape)
        if len(want) != 4 or want[0] != n or want[3] != x.shape[3] or min(want[1:3]) < 1:
            raise OpCheckError(f"QNNEMU-{op}-output-shape", "outputTensors[0].dimensions",
                               f"the output must be [num_rois {n}, out_h >= 1, out_w >= 1, "
                               f"channels {x.shape[3]}]; got {list(want)}")
        return [same_spec(x, shape=want)]

    def _run(self, x, rois, batch, img_size_ratio, num_samples_y, num_samples_x, aligned,
             allow_invalid_roi):
        if not self.output_specs:
            raise OpCheckError("QNNEMU-RoiAlign-output-unknown", "outputTensors[0].dimensions",
                               "RoiAlign needs its output spec to run")
        b = np.asarray(batch).astype(np.int64)
        if b.size and (b.min() < 0 or b.max() >= x.shape[0]):
            raise OpCheckError("QNNEMU-RoiAlign-batch-index", "inputTensors[2]",
                               f"batch indices must be in [0, {x.shape[0] - 1}]; got "
                               f"{b.tolist()}")
        dtype = x.dtype
        ratio = np.asarray(img_size_ratio, np.float64).reshape(-1)
        out_hw = tuple(int(d) for d in self.output_specs[0].shape[1:3])
        y = roi_align_nhwc(to_compute(x), np.asarray(rois, np.float64), b, out_hw,
                           (float(ratio[0]), float(ratio[1])),
                           (int(num_samples_y), int(num_samples_x)), bool(aligned))
        return from_compute(y, dtype)


__all__ = ["GridSample", "RoiAlign", "grid_sample_nhwc", "roi_align_nhwc"]
