"""Numerics and validation of Resize, ResizeBilinear, ResizeNearestNeighbor, GridSample,
RoiAlign and Lstm (qnnemu/ops/resize.py, sample.py, lstm.py).

References: onnx.reference.ReferenceEvaluator (ONNX Resize / GridSample / RoiAlign / LSTM, run
in float64 on NCHW-transposed data) where the QNN semantics map onto ONNX, and float64 loops
written here (TensorFlow's resize formulas with exact fractions, Caffe2's RoIAlign, TFLite's
LSTM cell) for the rest.  Negative tests: one per rule id, asserting the id and the path.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from optest import assert_close, check, expect_rule, spec, to_param

from qnnemu import ops
from qnnemu.core import dtypes
from qnnemu.errors import OpCheckError, OpUnsupportedError
from qnnemu.headers import Q
from qnnemu.ops import QuantSpec, TensorSpec

RNG = np.random.default_rng(20240611)
F32, F16, I32 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16, Q.QNN_DATATYPE_INT_32
U8 = Q.QNN_DATATYPE_UFIXED_POINT_8
# BFLOAT_16: no op takes it (a plain integer / BOOL_8 is fixed point with scale 1 to the ops
# that have no kernel for it, ops/base.py AS_FIXED)
BF16 = Q.QNN_DATATYPE_BFLOAT_16


# ---- helpers --------------------------------------------------------------------------------
def run_op(op_type, arrays, params=None, out_shape=None):
    """check + run on numpy arrays (None = absent optional input); returns all outputs."""
    cls = ops.get(op_type)
    assert cls is not None, f"op {op_type} is registered"
    ps = {k: to_param(k, v) for k, v in (params or {}).items()}
    specs = [None if a is None else TensorSpec(a.shape, dtypes.from_numpy(a.dtype))
             for a in arrays]
    declared = None if out_shape is None else [spec(out_shape, specs[0].dtype)]
    outs = cls.check(specs, ps, declared_outputs=declared)
    ys = cls(cls.parse_params(ps), specs, outs).run(*arrays)
    for y, o in zip(ys, outs):
        assert tuple(y.shape) == tuple(o.shape), \
            f"{op_type}: run() shape {y.shape} equals inferred shape {o.shape}"
        assert y.dtype == arrays[0].dtype, f"{op_type}: output dtype {y.dtype} == input dtype"
    return ys


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def onnx_run(op_type, inputs: dict, opset: int, n_out=1, **attrs):
    """Runs one ONNX node in the reference evaluator; inputs name -> array ("" = absent)."""
    names = list(inputs)
    node = helper.make_node(op_type, [n if inputs[n] is not None else "" for n in names],
                            [f"Y{i}" for i in range(n_out)], **attrs)
    vis = []
    for n in names:
        a = inputs[n]
        if a is not None:
            et = TensorProto.INT64 if a.dtype.kind in "iu" else TensorProto.DOUBLE
            vis.append(helper.make_tensor_value_info(n, et, None))
    outs = [helper.make_tensor_value_info(f"Y{i}", TensorProto.DOUBLE, None) for i in range(n_out)]
    model = helper.make_model(helper.make_graph([node], "g", vis, outs),
                              opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in inputs.items() if a is not None}
    return ReferenceEvaluator(model).run(None, feeds)


def nchw(x):
    return np.moveaxis(np.asarray(x, np.float64), -1, 1)


def nhwc(x):
    return np.moveaxis(x, 1, -1)


# ---- Resize ----------------------------------------------------------------------------------
TRANSFORMS = {0: "half_pixel", 1: "pytorch_half_pixel", 2: "align_corners", 3: "asymmetric"}
NEAREST_MODES = {0: "round_prefer_floor", 1: "round_prefer_ceil", 2: "floor", 3: "ceil"}
INTERP = {0: "nearest", 1: "linear", 2: "cubic"}


def onnx_resize(x_nhwc, out_shape, **attrs):
    sizes = np.array((out_shape[0], out_shape[-1]) + tuple(out_shape[1:-1]), np.int64)
    (y,) = onnx_run("Resize", {"X": nchw(x_nhwc), "roi": None, "scales": None, "S": sizes},
                    19, **attrs)
    return nhwc(y)


RESIZE_SHAPES = [((2, 4, 5, 3), (2, 7, 3, 3)), ((1, 3, 3, 2), (1, 9, 8, 2)),
                 ((1, 6, 10, 2), (1, 4, 15, 2)), ((1, 5, 5, 1), (1, 1, 1, 1)),
                 ((1, 7, 3, 2), (1, 10, 6, 2))]


@pytest.mark.parametrize("xs,os", RESIZE_SHAPES)
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_resize_nearest_and_linear_vs_onnx(xs, os, transform):
    x = rand(*xs)
    for mode in (0, 1):
        for nm in (sorted(NEAREST_MODES) if mode == 0 else [0]):
            y, = run_op("Resize", [x], {"transformation_mode": transform,
                                        "interpolation_mode": mode, "nearest_mode": nm}, os)
            ref = onnx_resize(x, os, mode=INTERP[mode],
                              coordinate_transformation_mode=TRANSFORMS[transform],
                              nearest_mode=NEAREST_MODES[nm])
            assert_close(y, ref, f"Resize {xs}->{os} {INTERP[mode]} {TRANSFORMS[transform]} "
                                 f"{NEAREST_MODES[nm]} vs ONNX")


@pytest.mark.parametrize("xs,os", RESIZE_SHAPES[:3] + [((1, 6, 7, 2), (1, 3, 2, 2))])
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize("exclude", [False, True])
def test_resize_cubic_vs_onnx(xs, os, transform, exclude):
    x = rand(*xs)
    for a in (-0.75, -0.5):
        y, = run_op("Resize", [x], {"transformation_mode": transform, "interpolation_mode": 2,
                                    "exclude_outside": exclude, "cubic_coeff": a}, os)
        ref = onnx_resize(x, os, mode="cubic", coordinate_transformation_mode=TRANSFORMS[transform],
                          exclude_outside=int(exclude), cubic_coeff_a=a)
        assert_close(y, ref, f"Resize cubic A={a} exclude_outside={exclude} {xs}->{os} "
                             f"{TRANSFORMS[transform]} vs ONNX")


def test_resize_defaults_are_half_pixel_round_prefer_floor_nearest():
    x = rand(1, 5, 4, 2)
    y, = run_op("Resize", [x], {}, (1, 3, 7, 2))
    ref = onnx_resize(x, (1, 3, 7, 2), mode="nearest", coordinate_transformation_mode="half_pixel",
                      nearest_mode="round_prefer_floor")
    assert_close(y, ref, "Resize with no params = NEAREST, HALF_PIXEL, ROUND_PREFER_FLOOR")


@pytest.mark.parametrize("xs,os", [((2, 5, 3), (2, 9, 3)), ((1, 3, 4, 5, 2), (1, 5, 2, 7, 2))])
def test_resize_rank3_and_rank5(xs, os):
    x = rand(*xs)
    for mode in (0, 1, 2):
        y, = run_op("Resize", [x], {"interpolation_mode": mode, "transformation_mode": 3}, os)
        ref = onnx_resize(x, os, mode=INTERP[mode], coordinate_transformation_mode="asymmetric")
        assert_close(y, ref, f"Resize rank {len(xs)} {INTERP[mode]} {xs}->{os} vs ONNX")


def test_resize_pytorch_half_pixel_size_one_reads_coordinate_zero():
    # PYTORCH_HALF_PIXEL maps every index of a size-1 output axis to coordinate 0 (the ONNX
    # spec and ONNX Runtime; the ONNX reference evaluator uses -0.5, which only differs for
    # cubic), so cubic reads exactly the first row/column.
    x = rand(1, 5, 6, 2)
    y, = run_op("Resize", [x], {"transformation_mode": 1, "interpolation_mode": 2}, (1, 1, 6, 2))
    assert np.array_equal(y[:, 0], x[:, 0]), "size-1 axis with PYTORCH_HALF_PIXEL reads index 0"


def test_resize_nearest_rounding_is_exact():
    # 6 -> 10 ASYMMETRIC: x * 0.6 lands on integers at x = 5 (3.0) -- in float 5 / (10/6)
    # may come out as 2.9999999999999996; FLOOR must still pick 3.  Compare with Fractions.
    x = np.arange(6, dtype=np.float32).reshape(1, 6, 1, 1)
    for nm, fn in ((2, math.floor), (3, math.ceil)):
        y, = run_op("Resize", [x], {"transformation_mode": 3, "nearest_mode": nm}, (1, 10, 1, 1))
        want = [min(max(fn(Fraction(i * 6, 10)), 0), 5) for i in range(10)]
        assert y.ravel().tolist() == want, f"nearest_mode {nm}: exact indices {want}: {y.ravel()}"
    # HALF_PIXEL 2 -> 4: coordinates -0.25, 0.25, 0.75, 1.25; 3 -> 2: 0.25, 1.75; 1 -> 2 ties.
    x = np.array([10.0, 20.0, 30.0], np.float32).reshape(1, 3, 1, 1)
    y, = run_op("Resize", [x], {"nearest_mode": 0}, (1, 6, 1, 1))  # coords (2i+1)/4-1/2: ties
    assert y.ravel().tolist() == [10, 10, 20, 20, 30, 30], \
        f"HALF_PIXEL ROUND_PREFER_FLOOR 3->6 (ties -0.25,0.25,0.75: no tie) {y.ravel()}"
    x2 = np.array([10.0, 20.0], np.float32).reshape(1, 2, 1, 1)
    y, = run_op("Resize", [x2], {"transformation_mode": 2, "nearest_mode": 0}, (1, 3, 1, 1))
    assert y.ravel().tolist() == [10, 10, 20], f"ALIGN_CORNERS 2->3: 0.5 ties down: {y.ravel()}"
    y, = run_op("Resize", [x2], {"transformation_mode": 2, "nearest_mode": 1}, (1, 3, 1, 1))
    assert y.ravel().tolist() == [10, 20, 20], f"ALIGN_CORNERS 2->3: 0.5 ties up: {y.ravel()}"


def test_resize_float16():
    x = rand(1, 4, 5, 3, dtype=np.float16)
    for mode in (0, 1, 2):
        y, = run_op("Resize", [x], {"interpolation_mode": mode}, (1, 7, 3, 3))
        assert y.dtype == np.float16, "float16 Resize returns float16"
        ref = onnx_resize(x.astype(np.float64), (1, 7, 3, 3), mode=INTERP[mode])
        assert_close(y, ref, f"float16 Resize {INTERP[mode]}", rel=2e-3)


def test_resize_same_size_is_identity():
    x = rand(1, 4, 5, 3)
    for mode in (0, 1, 2):
        for tr in sorted(TRANSFORMS):
            y, = run_op("Resize", [x], {"interpolation_mode": mode, "transformation_mode": tr},
                        (1, 4, 5, 3))
            assert np.array_equal(y, x), f"same-size Resize {INTERP[mode]} {TRANSFORMS[tr]}"


# ---- ResizeBilinear / ResizeNearestNeighbor (TensorFlow semantics) ---------------------------
def tf_scale(n_in, n_out, align_corners):
    if align_corners and n_out > 1:
        return Fraction(n_in - 1, n_out - 1)
    return Fraction(n_in, n_out)


def ref_tf_nearest(x, oh, ow, align_corners, half_pixel):
    """TensorFlow resize_nearest_neighbor, exact."""
    n, h, w, c = x.shape
    y = np.zeros((n, oh, ow, c))

    def src(i, n_in, n_out):
        s = tf_scale(n_in, n_out, align_corners)
        v = (i + Fraction(1, 2)) * s if half_pixel else i * s
        j = math.floor(v + Fraction(1, 2)) if align_corners else math.floor(v)  # round half up
        return max(0, min(j, n_in - 1))
    for oy in range(oh):
        for ox in range(ow):
            y[:, oy, ox] = x[:, src(oy, h, oh), src(ox, w, ow)]
    return y


def ref_tf_bilinear(x, oh, ow, align_corners, half_pixel):
    """TensorFlow resize_bilinear in float64."""
    n, h, w, c = x.shape
    x = x.astype(np.float64)
    y = np.zeros((n, oh, ow, c))

    def src(i, n_in, n_out):
        s = float(tf_scale(n_in, n_out, align_corners))
        v = (i + 0.5) * s - 0.5 if half_pixel else i * s
        lo = math.floor(v)
        return max(lo, 0), min(lo + 1, n_in - 1), v - lo
    for oy in range(oh):
        y0, y1, fy = src(oy, h, oh)
        for ox in range(ow):
            x0, x1, fx = src(ox, w, ow)
            top = x[:, y0, x0] + (x[:, y0, x1] - x[:, y0, x0]) * fx
            bot = x[:, y1, x0] + (x[:, y1, x1] - x[:, y1, x0]) * fx
            y[:, oy, ox] = top + (bot - top) * fy
    return y


TF_SHAPES = [((2, 4, 5, 3), (7, 3)), ((1, 3, 3, 2), (9, 8)), ((1, 6, 10, 2), (4, 15)),
             ((1, 5, 5, 1), (1, 1)), ((1, 2, 3, 2), (5, 7)), ((1, 12, 9, 2), (5, 4))]
TF_FLAGS = [(False, False), (True, False), (False, True)]


@pytest.mark.parametrize("xs,ohw", TF_SHAPES)
@pytest.mark.parametrize("ac,hp", TF_FLAGS)
def test_resize_bilinear_vs_tensorflow_formula(xs, ohw, ac, hp):
    x = rand(*xs)
    out = (xs[0],) + ohw + (xs[3],)
    y, = run_op("ResizeBilinear", [x], {"align_corners": ac, "half_pixel_centers": hp}, out)
    assert_close(y, ref_tf_bilinear(x, *ohw, ac, hp),
                 f"ResizeBilinear {xs}->{ohw} align_corners={ac} half_pixel={hp}")
    tr = "align_corners" if ac else ("half_pixel" if hp else "asymmetric")
    assert_close(y, onnx_resize(x, out, mode="linear", coordinate_transformation_mode=tr),
                 f"ResizeBilinear == ONNX linear {tr}")


@pytest.mark.parametrize("xs,ohw", TF_SHAPES + [((1, 6, 6, 1), (10, 10)), ((1, 5, 7, 1), (3, 9))])
@pytest.mark.parametrize("ac,hp", TF_FLAGS)
def test_resize_nearest_neighbor_vs_tensorflow_formula(xs, ohw, ac, hp):
    x = rand(*xs)
    out = (xs[0],) + ohw + (xs[3],)
    y, = run_op("ResizeNearestNeighbor", [x], {"align_corners": ac, "half_pixel_centers": hp},
                out)
    assert np.array_equal(y, ref_tf_nearest(x, *ohw, ac, hp)), \
        f"ResizeNearestNeighbor {xs}->{ohw} align_corners={ac} half_pixel={hp}: exact TF indices"


@pytest.mark.parametrize("xs,ohw", [((1, 12, 9, 2), (5, 4)), ((1, 10, 10, 1), (3, 7)),
                                    ((1, 4, 6, 2), (8, 3))])
def test_resize_bilinear_antialias(xs, ohw):
    # Shrinking axes: triangle kernel widened by 1/scale, outside taps dropped and weights
    # renormalized (tf.image.resize antialias = ONNX antialias + exclude_outside).
    x = rand(*xs)
    out = (xs[0],) + ohw + (xs[3],)
    y, = run_op("ResizeBilinear", [x], {"half_pixel_centers": True, "antialias": True}, out)
    ref = onnx_resize(x, out, mode="linear", antialias=1, exclude_outside=1)
    assert_close(y, ref, f"ResizeBilinear antialias {xs}->{ohw} vs ONNX antialias")
    # A growing axis is unaffected by antialias.
    y2, = run_op("ResizeBilinear", [x], {"half_pixel_centers": True}, out)
    if ohw[0] >= xs[1] and ohw[1] >= xs[2]:
        assert np.array_equal(y, y2), "antialias does not change an upsampling"


def test_resize_nearest_neighbor_int_passthrough_and_float16():
    assert ops.get("ResizeNearestNeighbor").quant_passthrough, \
        "ResizeNearestNeighbor moves values only: quant_passthrough"
    x = rand(1, 3, 4, 2, dtype=np.float16)
    y, = run_op("ResizeNearestNeighbor", [x], {"half_pixel_centers": True}, (1, 5, 5, 2))
    assert y.dtype == np.float16 and np.array_equal(
        y, ref_tf_nearest(x.astype(np.float64), 5, 5, False, True).astype(np.float16)), \
        "float16 ResizeNearestNeighbor copies values"
    op = ops.get("ResizeNearestNeighbor")
    inst = op(op.parse_params({}), [spec((1, 3, 4, 2), U8, quant=QuantSpec(0, 0.1, -3))],
              [spec((1, 6, 8, 2), U8)])
    q = np.arange(24, dtype=np.uint8).reshape(1, 3, 4, 2)
    (y,) = inst.run(q)
    assert y.dtype == np.uint8 and np.array_equal(y, q.repeat(2, 1).repeat(2, 2)), \
        "raw fixed-point values pass through a 2x nearest upsampling unchanged"


# ---- GridSample --------------------------------------------------------------------------------
def onnx_grid_sample(x, grid, mode, padding, align_corners):
    (y,) = onnx_run("GridSample", {"X": nchw(x), "G": grid.astype(np.float64)}, 20,
                    mode=["linear", "nearest"][mode],
                    padding_mode=["zeros", "border", "reflection"][padding],
                    align_corners=int(align_corners))
    return nhwc(y)


@pytest.mark.parametrize("xs", [(2, 4, 5, 3), (1, 1, 3, 2)])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("ac", [False, True])
def test_grid_sample_vs_onnx(xs, mode, padding, ac):
    if ac and padding == 2 and min(xs[1:3]) == 1:
        pytest.skip("the ONNX reference divides by zero reflecting a size-1 axis")
    x = rand(*xs)
    grid = RNG.uniform(-1.6, 1.6, (xs[0], 3, 4, 2)).astype(np.float32)
    grid[0, 0, :3] = [[1, 1], [-1, -1], [0, 0]]
    y, = run_op("GridSample", [x, grid], {"mode": mode, "padding_mode": padding,
                                          "align_corners": ac})
    ref = onnx_grid_sample(x, grid, mode, padding, ac)
    # The ONNX reference unnormalizes in float32: ~1e-7 coordinate error.
    assert_close(y, ref, f"GridSample {xs} mode={mode} padding={padding} align_corners={ac}",
                 rel=1e-5)


def test_grid_sample_nearest_rounds_half_to_even():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 4, 1)
    # align_corners=False: pixel x = ((g + 1) * 4 - 1) / 2; g = 0 -> 1.5, g = 0.5 -> 2.5.
    grid = np.array([[[[0.0, 0.0], [0.5, 0.0]]]], np.float32)
    y, = run_op("GridSample", [x, grid], {"mode": 1})
    assert y.ravel().tolist() == [2.0, 2.0], f"1.5 -> 2 and 2.5 -> 2 (half to even): {y.ravel()}"


def test_grid_sample_reflection_size_one_align_corners():
    x = rand(1, 1, 1, 3)
    grid = np.array([[[[0.7, -3.0], [-2.5, 1.9]]]], np.float32)
    y, = run_op("GridSample", [x, grid], {"padding_mode": 2, "align_corners": True})
    assert np.allclose(y, np.broadcast_to(x[:, :, :1], y.shape)), \
        "reflection on a size-1 axis with align_corners reads its only pixel"


def test_grid_sample_float16():
    x = rand(1, 4, 4, 2, dtype=np.float16)
    grid = RNG.uniform(-1, 1, (1, 2, 3, 2)).astype(np.float16)
    y, = run_op("GridSample", [x, grid], {})
    assert y.dtype == np.float16, "float16 GridSample returns float16"
    assert_close(y, onnx_grid_sample(x.astype(np.float64), grid, 0, 0, False),
                 "float16 GridSample", rel=2e-3)


# ---- RoiAlign ----------------------------------------------------------------------------------
def ref_roi_align(x, rois, bidx, oh, ow, ratio, samples, aligned):
    """Caffe2/Detectron RoIAlign ("avg") in float64 with explicit loops."""
    _, h, w, c = x.shape
    x = x.astype(np.float64)

    def bilinear(img, y, xx):
        if y < -1.0 or y > h or xx < -1.0 or xx > w:
            return np.zeros(c)
        y, xx = max(y, 0.0), max(xx, 0.0)
        y0, x0 = int(y), int(xx)
        if y0 >= h - 1:
            y0 = y1 = h - 1
            y = float(y0)
        else:
            y1 = y0 + 1
        if x0 >= w - 1:
            x0 = x1 = w - 1
            xx = float(x0)
        else:
            x1 = x0 + 1
        ly, lx = y - y0, xx - x0
        return ((1 - ly) * (1 - lx) * img[y0, x0] + (1 - ly) * lx * img[y0, x1]
                + ly * (1 - lx) * img[y1, x0] + ly * lx * img[y1, x1])

    out = np.zeros((len(rois), oh, ow, c))
    off = 0.5 if aligned else 0.0
    for r, (x1, y1, x2, y2) in enumerate(np.asarray(rois, np.float64)):
        sh, sw = y1 / ratio[0] - off, x1 / ratio[1] - off
        rh, rw = y2 / ratio[0] - off - sh, x2 / ratio[1] - off - sw
        if not aligned:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bh, bw = rh / oh, rw / ow
        gy = samples[0] if samples[0] > 0 else math.ceil(rh / oh)
        gx = samples[1] if samples[1] > 0 else math.ceil(rw / ow)
        img = x[int(bidx[r])]
        for ph in range(oh):
            for pw in range(ow):
                acc = np.zeros(c)
                for iy in range(gy):
                    yy = sh + ph * bh + (iy + 0.5) * bh / gy
                    for ix in range(gx):
                        acc += bilinear(img, yy, sw + pw * bw + (ix + 0.5) * bw / gx)
                out[r, ph, pw] = acc / max(gy * gx, 1)
    return out


ROIS = np.array([[0, 0, 20, 16], [3.3, 2.1, 9.7, 15.2], [-4, -3, 30, 25], [10, 10, 10.5, 10.2],
                 [15, 1, 16, 2]], np.float32)
BIDX = np.array([0, 1, 1, 0, 1], np.int32)


@pytest.mark.parametrize("samples", [(-1, -1), (0, 0), (2, 3), (1, 1)])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ohw", [(3, 4), (1, 1)])
def test_roi_align_vs_float64_loops(samples, aligned, ohw):
    x = rand(2, 9, 11, 3)
    ratio = [2.0, 1.5]
    y, = run_op("RoiAlign", [x, ROIS, BIDX],
                {"img_size_ratio": ratio, "num_samples_y": samples[0],
                 "num_samples_x": samples[1], "aligned": aligned},
                (len(ROIS),) + ohw + (3,))
    ref = ref_roi_align(x, ROIS, BIDX, *ohw, ratio, samples, aligned)
    assert_close(y, ref, f"RoiAlign samples={samples} aligned={aligned} out={ohw}")


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_vs_onnx(aligned):
    x = rand(2, 9, 11, 3)
    y, = run_op("RoiAlign", [x, ROIS, BIDX], {"img_size_ratio": [2.0, 2.0], "aligned": aligned},
                (len(ROIS), 3, 2, 3))
    (ref,) = onnx_run("RoiAlign", {"X": nchw(x), "R": ROIS.astype(np.float64),
                                   "B": BIDX.astype(np.int64)}, 16, output_height=3,
                      output_width=2, sampling_ratio=0, spatial_scale=0.5,
                      coordinate_transformation_mode="half_pixel" if aligned
                      else "output_half_pixel")
    assert_close(y, nhwc(ref), f"RoiAlign == ONNX RoiAlign (avg, aligned={aligned})")


def test_roi_align_float16_and_bad_batch_index_at_run():
    x = rand(2, 6, 6, 2, dtype=np.float16)
    rois = np.array([[0, 0, 5, 5], [1, 2, 4, 6]], np.float16)
    b = np.array([1, 0], np.int32)
    y, = run_op("RoiAlign", [x, rois, b], {"img_size_ratio": [1.0, 1.0]}, (2, 2, 2, 2))
    assert y.dtype == np.float16, "float16 RoiAlign returns float16"
    assert_close(y, ref_roi_align(x, rois, b, 2, 2, [1, 1], (-1, -1), False),
                 "float16 RoiAlign", rel=2e-3)
    with pytest.raises(OpCheckError) as info:
        run_op("RoiAlign", [x, rois, np.array([0, 2], np.int32)], {"img_size_ratio": [1.0, 1.0]},
               (2, 2, 2, 2))
    assert info.value.rule == "QNNEMU-RoiAlign-batch-index" and \
        info.value.path == "inputTensors[2]", f"batch index 2 of 2 maps rejected: {info.value}"


def test_roi_align_invalid_roi_allowed():
    x = rand(1, 6, 6, 2)
    bad = np.array([[4, 4, 1, 1]], np.float32)
    ok = check("RoiAlign", [spec((1, 6, 6, 2)), spec((1, 4), data=bad), spec((1,), I32)],
               {"img_size_ratio": [1.0, 1.0], "allow_invalid_roi": True},
               [spec((1, 2, 2, 2))])
    assert ok[0].shape == (1, 2, 2, 2), "allow_invalid_roi accepts x2 < x1 static rois"
    y, = run_op("RoiAlign", [x, bad, np.zeros(1, np.int32)],
                {"img_size_ratio": [1.0, 1.0], "allow_invalid_roi": True}, (1, 2, 2, 2))
    assert_close(y, ref_roi_align(x, bad, [0], 2, 2, [1, 1], (-1, -1), False),
                 "an inverted roi is computed by the same formulas (1-pixel minimum size)")


# ---- Lstm --------------------------------------------------------------------------------------
def onnx_lstm(x, w, r, b, h0, c0, p, direction):
    return onnx_run("LSTM", {"X": x, "W": w, "R": r, "B": b, "seq": None, "h0": h0, "c0": c0,
                             "P": p}, 14, n_out=3, hidden_size=r.shape[-1],
                    direction=direction)


def qnn_lstm_inputs(w, r, b, p, d, n):
    """The QNN Lstm inputs the ONNX Runtime QNN EP slices from ONNX W/R/B/P (gates iofc)."""
    def gate(a, k):
        return a[d, k * n:(k + 1) * n].astype(np.float32)
    q = [None] * 25
    q[1], q[2], q[3], q[16] = gate(w, 2), gate(w, 3), gate(w, 1), gate(w, 0)
    q[4], q[5], q[6], q[17] = gate(r, 2), gate(r, 3), gate(r, 1), gate(r, 0)
    bb = b[d] if b is not None else np.zeros(8 * n)
    q[7], q[8], q[9], q[21] = (
        (bb[k * n:(k + 1) * n] + bb[(k + 4) * n:(k + 5) * n]).astype(np.float32)
        for k in (2, 3, 1, 0))
    if p is not None:
        q[18], q[19], q[20] = (p[d, k * n:(k + 1) * n].astype(np.float32) for k in (0, 2, 1))
    return q


def lstm_params(direction=0, time_major=False, **kw):
    return {"direction": direction, "time_major": time_major, "cell_clip_threshold": 0.0,
            "output_clip_threshold": 0.0, **kw}


def trim(q):
    q = list(q)
    while q and q[-1] is None:
        q.pop()
    return q


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_optional", [False, True])
def test_lstm_vs_onnx(direction, with_optional):
    t, b, i_sz, n = 5, 3, 4, 6
    nd = 2 if direction == "bidirectional" else 1
    x = RNG.standard_normal((t, b, i_sz))
    w = RNG.standard_normal((nd, 4 * n, i_sz)) * 0.5
    r = RNG.standard_normal((nd, 4 * n, n)) * 0.5
    bias = RNG.standard_normal((nd, 8 * n)) if with_optional else None
    peep = RNG.standard_normal((nd, 3 * n)) if with_optional else None
    h0 = RNG.standard_normal((nd, b, n)) if with_optional else None
    c0 = RNG.standard_normal((nd, b, n)) if with_optional else None
    ys, yh, yc = onnx_lstm(x, w, r, bias, h0, c0, peep, direction)
    for d in range(nd):
        rev = int(direction == "reverse" or d == 1)
        q = qnn_lstm_inputs(w, r, bias, peep, d, n)
        if with_optional:
            q[10], q[11] = h0[d].astype(np.float32), c0[d].astype(np.float32)
        what = f"Lstm {direction}[{d}] optional={with_optional}"
        # One 3-D time-major node (the EP's monolithic lowering) ...
        q[0] = x.astype(np.float32)
        y, c, h = run_op("Lstm", trim(q), lstm_params(rev, True))
        assert_close(y, ys[:, d], f"{what} 3-D time-major Y")
        assert_close(h, yh[d], f"{what} Y_h")
        assert_close(c, yc[d], f"{what} Y_c")
        # ... the same batch-major ...
        q[0] = np.ascontiguousarray(x.transpose(1, 0, 2)).astype(np.float32)
        y, _, _ = run_op("Lstm", trim(q), lstm_params(rev, False))
        assert_close(y.transpose(1, 0, 2), ys[:, d], f"{what} 3-D batch-major Y")
        # ... and one 2-D node per step chained through out[2]/out[1] (the EP's unrolling).
        h_s = q[10] if with_optional else np.zeros((b, n), np.float32)
        c_s = q[11] if with_optional else np.zeros((b, n), np.float32)
        steps = [None] * t
        for s in (range(t - 1, -1, -1) if rev else range(t)):
            q[0], q[10], q[11] = x[s].astype(np.float32), h_s, c_s
            steps[s], c_s, h_s = run_op("Lstm", trim(q), lstm_params(rev))
        assert_close(np.stack(steps), ys[:, d], f"{what} unrolled 2-D steps Y")
        assert_close(c_s, yc[d], f"{what} unrolled Y_c")


def ref_tflite_lstm(x, q, cell_clip=0.0, proj_clip=0.0, reverse=False):
    """TFLite's float LSTM (peephole, CIFG, layer norm, projection) in float64, time-major x."""
    g = [None if a is None else np.asarray(a, np.float64) for a in q] + [None] * (25 - len(q))
    n, p = g[1].shape[0], g[4].shape[1]
    b = x.shape[1]
    h = g[10] if g[10] is not None else np.zeros((b, p))
    c = g[11] if g[11] is not None else np.zeros((b, n))

    def sig(v):
        return 1.0 / (1.0 + np.exp(-v))

    def gate(wx, wh, bias, xt, hp, peep, cell, ln):
        v = xt @ wx.T + hp @ wh.T
        if peep is not None:
            v = v + peep * cell
        if ln is not None:
            mu = v.mean(axis=1, keepdims=True)
            sd = np.sqrt(((v - mu) ** 2).mean(axis=1, keepdims=True) + 1e-8)
            v = (v - mu) / sd * ln
        return v + bias
    ys = [None] * x.shape[0]
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        xt = x[t].astype(np.float64)
        f = sig(gate(g[1], g[4], g[7], xt, h, g[19], c, g[13]))
        if g[16] is None:
            i = 1.0 - f
        else:
            i = sig(gate(g[16], g[17], g[21], xt, h, g[18], c, g[12]))
        cc = np.tanh(gate(g[2], g[5], g[8], xt, h, None, c, g[14]))
        c = f * c + i * cc
        if cell_clip > 0:
            c = np.clip(c, -cell_clip, cell_clip)
        o = sig(gate(g[3], g[6], g[9], xt, h, g[20], c, g[15]))
        m = o * np.tanh(c)
        if g[22] is not None:
            h = m @ g[22].T + (g[23] if g[23] is not None else 0.0)
            if proj_clip > 0:
                h = np.clip(h, -proj_clip, proj_clip)
        else:
            h = m
        ys[t] = h
    return np.stack(ys), c, h


def random_qnn_lstm(b, i_sz, n, p, cifg=False, peephole=False, layer_norm=False,
                    projection=False, states=True):
    def r(*s, scale=0.5):
        return (RNG.standard_normal(s) * scale).astype(np.float32)
    q = [None] * 25
    q[1], q[2], q[3] = r(n, i_sz), r(n, i_sz), r(n, i_sz)
    q[4], q[5], q[6] = r(n, p), r(n, p), r(n, p)
    q[7], q[8], q[9] = r(n), r(n), r(n)
    if states:
        q[10], q[11] = r(b, p), r(b, n, scale=2.0)
    if not cifg:
        q[16], q[17], q[21] = r(n, i_sz), r(n, p), r(n)
    if peephole:
        q[19], q[20] = r(n), r(n)
        if not cifg:
            q[18] = r(n)
    if layer_norm:
        q[13], q[14], q[15] = r(n, scale=1.0), r(n, scale=1.0), r(n, scale=1.0)
        if not cifg:
            q[12] = r(n, scale=1.0)
    if projection:
        q[22], q[23] = r(p, n), r(p)
    return q


LSTM_VARIANTS = [
    dict(),
    dict(cifg=True),
    dict(peephole=True),
    dict(cifg=True, peephole=True),
    dict(layer_norm=True),
    dict(cifg=True, layer_norm=True, peephole=True),
    dict(projection=True, proj_clip=0.3),
    dict(projection=True, layer_norm=True, cell_clip=0.5),
    dict(cell_clip=0.4, states=False),
]


@pytest.mark.parametrize("variant", LSTM_VARIANTS, ids=lambda v: "-".join(sorted(v)) or "plain")
@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_vs_tflite_formulas(variant, reverse):
    v = dict(variant)
    cell_clip, proj_clip = v.pop("cell_clip", 0.0), v.pop("proj_clip", 0.0)
    t, b, i_sz, n = 4, 2, 3, 5
    p = 4 if v.get("projection") else n
    q = random_qnn_lstm(b, i_sz, n, p, **v)
    x = rand(t, b, i_sz) * 2
    q[0] = x
    y, c, h = run_op("Lstm", trim(q), lstm_params(int(reverse), True,
                                                   cell_clip_threshold=cell_clip,
                                                   output_clip_threshold=proj_clip))
    ry, rc, rh = ref_tflite_lstm(x, q, cell_clip, proj_clip, reverse)
    what = f"Lstm {variant} reverse={reverse}"
    assert_close(y, ry, f"{what} h sequence")
    assert_close(c, rc, f"{what} last c")
    assert_close(h, rh, f"{what} last h")
    if cell_clip:
        assert np.abs(c).max() <= cell_clip + 1e-7, f"{what}: |c| <= cell_clip_threshold"
    if proj_clip:
        assert np.abs(y).max() <= proj_clip + 1e-7, f"{what}: |h| <= output_clip_threshold"


def test_lstm_null_inputs_and_trailing_trim_agree():
    q = random_qnn_lstm(2, 3, 4, 4)
    q[0] = rand(2, 3)
    full = run_op("Lstm", q[:24], lstm_params())             # explicit None (NULL) entries
    short = run_op("Lstm", trim(q), lstm_params())           # trailing inputs left off
    for a, b_, name in zip(full, short, ("out[0]", "out[1]", "out[2]")):
        assert np.array_equal(a, b_), f"NULL trailing inputs == absent inputs ({name})"
    assert np.array_equal(full[0], full[2]), "2-D Lstm: out[0] and out[2] are both the new h"
    # The execution plan (core/plan.py) passes only the present arrays; None specs mark the
    # absent positions.
    cls = ops.get("Lstm")
    specs = [None if a is None else TensorSpec(a.shape, F32) for a in q[:24]]
    outs = cls.check(specs, {})
    packed = cls(cls.parse_params({}), specs, outs).run(*[a for a in q[:24] if a is not None])
    for a, b_, name in zip(full, packed, ("out[0]", "out[1]", "out[2]")):
        assert np.array_equal(a, b_), f"present-only arrays are put back at their positions " \
                                      f"({name})"
    quant = dict.fromkeys(("input_gate_qscale", "forget_gate_qscale", "cell_gate_qscale", "output_gate_qscale",
                           "hidden_state_qscale"), 0.25)
    with_q = run_op("Lstm", trim(q), lstm_params(**quant, hidden_state_offset=3.0))
    assert np.array_equal(with_q[0], full[0]), "quantization params do not change real results"


def test_lstm_float16():
    q = [None if a is None else a.astype(np.float16) for a in random_qnn_lstm(2, 3, 4, 4)]
    q[0] = rand(3, 2, 3, dtype=np.float16)
    y, c, h = run_op("Lstm", trim(q), lstm_params(time_major=True))
    assert y.dtype == c.dtype == h.dtype == np.float16, "float16 Lstm returns float16"
    ry, rc, _ = ref_tflite_lstm(q[0], q)
    assert_close(y, ry, "float16 Lstm", rel=5e-3)
    assert_close(c, rc, "float16 Lstm c", rel=5e-3)


def test_lstm_output_shapes():
    s = [spec((7, 2, 3))] + [spec((4, 3))] * 3 + [spec((4, 5))] * 3 + [spec((4,))] * 3
    s += [None] * 12 + [spec((5, 4)), spec((5,))]
    outs = check("Lstm", s, {"time_major": True})
    assert [o.shape for o in outs] == [(7, 2, 5), (2, 4), (2, 5)], \
        f"time-major [T,B,I] with projection: [T,B,P], [B,N], [B,P]: {[o.shape for o in outs]}"
    s[0] = spec((2, 7, 3))
    outs = check("Lstm", s, {})
    assert [o.shape for o in outs] == [(2, 7, 5), (2, 4), (2, 5)], \
        "batch-major default: [B,T,P], [B,N], [B,P]"


# ---- negative tests: one per rule id --------------------------------------------------------
X4 = spec((1, 4, 4, 2))
OUT4 = [spec((1, 8, 8, 2))]
QU8 = spec((1, 4, 4, 2), U8)          # fixed point without quantization parameters
INT4 = spec((1, 4, 4, 2), BF16)    # a type no op takes (the name is kept)


def lstm_specs(**over):
    s = [spec((2, 3))] + [spec((4, 3))] * 3 + [spec((4, 4))] * 3 + [spec((4,))] * 3
    s += [None] * 15
    for k, v in over.items():
        s[int(k[1:])] = v
    return trim(s)


NEGATIVE = []
for _op in ("Resize", "ResizeBilinear", "ResizeNearestNeighbor"):
    NEGATIVE += [
        (_op, [spec((1, 4, 4, 2, 1, 1))], {}, OUT4, "input-rank", "inputTensors[0].rank"),
        (_op, [INT4], {}, OUT4, "dtype", "inputTensors[0].dataType"),
        (_op, [QU8], {}, OUT4, "quant-missing", "inputTensors[0].quantizeParams"),
        (_op, [X4], {}, None, "output-unknown", "outputTensors[0].dimensions"),
        (_op, [X4], {}, [spec((1, 8, 8, 3))], "output-shape", "outputTensors[0].dimensions"),
    ]
NEGATIVE += [
    ("Resize", [X4], {"transformation_mode": 4}, OUT4, "transformation-mode",
     "params[transformation_mode]"),
    ("Resize", [X4], {"interpolation_mode": 3}, OUT4, "interpolation-mode",
     "params[interpolation_mode]"),
    ("Resize", [X4], {"nearest_mode": 4}, OUT4, "nearest-mode", "params[nearest_mode]"),
    ("Resize", [X4], {}, [spec((2, 8, 8, 2))], "output-shape", "outputTensors[0].dimensions"),
    ("Resize", [X4], {}, [spec((1, 0, 8, 2))], "output-shape", "outputTensors[0].dimensions"),
    ("ResizeBilinear", [X4], {"align_corners": True, "half_pixel_centers": True}, OUT4,
     "align-corners-half-pixel", "params[half_pixel_centers]"),
    ("ResizeNearestNeighbor", [X4], {"align_corners": True, "half_pixel_centers": True}, OUT4,
     "align-corners-half-pixel", "params[half_pixel_centers]"),
    ("ResizeBilinear", [spec((4, 4, 2))], {}, [spec((8, 8, 2))], "input-rank",
     "inputTensors[0].rank"),
    # GridSample
    ("GridSample", [spec((4, 4, 2)), spec((1, 2, 2, 2))], {}, None, "input-rank",
     "inputTensors[0].rank"),
    ("GridSample", [X4, spec((1, 2, 2))], {}, None, "input-rank", "inputTensors[1].rank"),
    ("GridSample", [INT4, spec((1, 2, 2, 2))], {}, None, "dtype", "inputTensors[0].dataType"),
    ("GridSample", [X4, spec((1, 2, 2, 2), U8)], {}, None, "quant-missing",
     "inputTensors[1].quantizeParams"),
    ("GridSample", [X4, spec((1, 2, 2, 3))], {}, None, "grid-shape",
     "inputTensors[1].dimensions"),
    ("GridSample", [X4, spec((2, 2, 2, 2))], {}, None, "grid-shape",
     "inputTensors[1].dimensions"),
    ("GridSample", [X4, spec((1, 2, 2, 2))], {"mode": 2}, None, "mode", "params[mode]"),
    ("GridSample", [X4, spec((1, 2, 2, 2))], {"padding_mode": 3}, None, "padding-mode",
     "params[padding_mode]"),
]
_R = {"img_size_ratio": [1.0, 1.0]}
_RS = [X4, spec((3, 4)), spec((3,), I32)]
_RO = [spec((3, 2, 2, 2))]
NEGATIVE += [
    ("RoiAlign", [spec((4, 4, 2)), _RS[1], _RS[2]], _R, _RO, "input-rank", "inputTensors[0].rank"),
    ("RoiAlign", [X4, spec((12,)), _RS[2]], _R, _RO, "input-rank", "inputTensors[1].rank"),
    ("RoiAlign", [X4, _RS[1], spec((3, 1), I32)], _R, _RO, "input-rank", "inputTensors[2].rank"),
    ("RoiAlign", [INT4, _RS[1], _RS[2]], _R, _RO, "dtype", "inputTensors[0].dataType"),
    ("RoiAlign", [X4, spec((3, 4), U8), _RS[2]], _R, _RO, "quant-missing",
     "inputTensors[1].quantizeParams"),
    ("RoiAlign", [X4, _RS[1], spec((3,))], _R, _RO, "index-dtype", "inputTensors[2].dataType"),
    ("RoiAlign", [X4, spec((3, 5)), _RS[2]], _R, _RO, "rois-shape", "inputTensors[1].dimensions"),
    ("RoiAlign", [X4, _RS[1], spec((2,), I32)], _R, _RO, "batch-indices-shape",
     "inputTensors[2].dimensions"),
    ("RoiAlign", _RS, {"img_size_ratio": [1.0, 0.0]}, _RO, "img-size-ratio",
     "params[img_size_ratio]"),
    ("RoiAlign", [X4, _RS[1], spec((3,), I32, data=np.array([0, 1, 0], np.int32))], _R, _RO,
     "batch-index", "inputTensors[2]"),
    ("RoiAlign", [X4, spec((3, 4), data=np.array([[0, 0, 2, 2], [3, 1, 1, 2], [0, 0, 1, 1]],
                                                 np.float32)), _RS[2]], _R, _RO,
     "invalid-roi", "inputTensors[1]"),
    ("RoiAlign", _RS, _R, None, "output-unknown", "outputTensors[0].dimensions"),
    ("RoiAlign", _RS, _R, [spec((3, 2, 2, 5))], "output-shape", "outputTensors[0].dimensions"),
    ("RoiAlign", _RS, _R, [spec((2, 2, 2, 2))], "output-shape", "outputTensors[0].dimensions"),
    # Lstm
    ("Lstm", lstm_specs(i4=None), {}, None, "input-missing", "inputTensors[4].type"),
    ("Lstm", lstm_specs(i0=spec((2,))), {}, None, "input-rank", "inputTensors[0].rank"),
    ("Lstm", lstm_specs(i2=spec((4, 3), BF16)), {}, None, "dtype", "inputTensors[2].dataType"),
    ("Lstm", lstm_specs(i1=spec((4, 3), U8)), {}, None, "quant-missing",
     "inputTensors[1].quantizeParams"),
    ("Lstm", lstm_specs(i24=spec((1,), Q.QNN_DATATYPE_BOOL_8)), {}, None, "reset",
     "inputTensors[24]"),
    ("Lstm", lstm_specs(i3=spec((4, 2))), {}, None, "weight-shape", "inputTensors[3].dimensions"),
    ("Lstm", lstm_specs(i5=spec((4, 3))), {}, None, "weight-shape", "inputTensors[5].dimensions"),
    ("Lstm", lstm_specs(i8=spec((5,))), {}, None, "vector-shape", "inputTensors[8].dimensions"),
    ("Lstm", lstm_specs(i11=spec((3, 4))), {}, None, "state-shape", "inputTensors[11].dimensions"),
    ("Lstm", lstm_specs(i16=spec((4, 3)), i17=spec((4, 4))), {}, None, "cifg",
     "inputTensors[21].type"),
    ("Lstm", lstm_specs(i18=spec((4,)), i19=spec((4,)), i20=spec((4,))), {}, None, "cifg",
     "inputTensors[18].type"),
    ("Lstm", lstm_specs(i19=spec((4,))), {}, None, "peephole", "inputTensors[20].type"),
    ("Lstm", lstm_specs(i16=spec((4, 3)), i17=spec((4, 4)), i21=spec((4,)), i19=spec((4,)),
                        i20=spec((4,))), {}, None, "peephole", "inputTensors[18].type"),
    ("Lstm", lstm_specs(i13=spec((4,)), i14=spec((4,))), {}, None, "layer-norm",
     "inputTensors[15].type"),
    ("Lstm", lstm_specs(i12=spec((4,)), i13=spec((4,)), i14=spec((4,)), i15=spec((4,))), {},
     None, "layer-norm", "inputTensors[12].type"),
    ("Lstm", lstm_specs(i23=spec((4,))), {}, None, "projection", "inputTensors[23].type"),
    ("Lstm", lstm_specs(i4=spec((4, 5)), i5=spec((4, 5)), i6=spec((4, 5))), {}, None,
     "projection", "inputTensors[4].dimensions"),
    ("Lstm", lstm_specs(), {"direction": 2}, None, "direction", "params[direction]"),
    ("Lstm", lstm_specs(), {"cell_clip_threshold": -1.0}, None, "clip",
     "params[cell_clip_threshold]"),
    ("Lstm", lstm_specs(), {}, [spec((2, 4))] * 4, "outputs", "numOfOutputs"),
]


@pytest.mark.parametrize("op_type,specs,params,declared,rule,path", NEGATIVE,
                         ids=[f"{n[0]}-{n[4]}-{i}" for i, n in enumerate(NEGATIVE)])
def test_rule(op_type, specs, params, declared, rule, path):
    err = expect_rule(op_type, specs, params, declared, rule, path)
    if rule in ("dtype", "reset", "outputs"):
        assert isinstance(err, OpUnsupportedError), f"{rule}: reported as unsupported"


def test_every_rule_id_is_tested():
    """Each rule id in the three modules' sources has a row in NEGATIVE."""
    import inspect
    import re

    from qnnemu.ops import lstm, resize, sample
    tested = {(n[0], n[4]) for n in NEGATIVE}
    text = "".join(inspect.getsource(m) for m in (resize, sample, lstm))
    suffixes = set(re.findall(r"QNNEMU-(?:\{op\}|\{cls\.op_type\}|\{self\.op_type\}|"
                              r"RoiAlign|Lstm)-([a-z-]+)", text))
    suffixes |= set(re.findall(r'_fail\("([a-z-]+)"', text))
    assert suffixes, "found rule ids in the sources"
    missing = suffixes - {r for (_, r) in tested}
    assert not missing, f"every rule suffix has a negative test: missing {missing}"
    for op_type in ("Resize", "ResizeBilinear", "ResizeNearestNeighbor", "GridSample",
                    "RoiAlign", "Lstm"):
        assert any(o == op_type for (o, _) in tested), f"{op_type} has negative tests"
