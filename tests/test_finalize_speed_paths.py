"""The fast graphFinalize paths of quantized graphs (issue 13 item 4: graphFinalize of a
ResNet-50-size graph below the vendor's session creation) compute exactly what the formulas they
replace computed (QNN HTP backend documentation, "QNN HTP Precision": the HTP's 8-bit weights and
integer requantization, docs/numerics.md "Accumulating ops"):

- csrc/eng_prepare.c qe_int_requant_table == lower_qgemm._int_requant_reference (the Python loop);
- quant.htp_int8_weight_codes (qe_weight_codes, from the codes) == htp_int8_weights on code +
  offset in float64, with the per-channel sums and magnitude sums;
- csrc/eng_qgemm.c qe_qgemm_pack (rows in order) == the packed layout, spelled out in numpy;
- IntegerAccumulation built through the fast path == built through the float64 route (weights,
  sums, requantization, the C accumulator's packed operand), for Conv2d, DepthWiseConv2d (strided
  too), FullyConnected and MatMul;
- tiling.TileCatalog's options listed on first use == the ones listed at construction.

Property tests only: no timing here (benchmarks/bench_models.py measures session creation)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, GraphBuilder, new_context
from hypothesis import given, settings, strategies as st

from qnnemu.core import plan as plan_mod
from qnnemu.core.engine import lower_qgemm
from qnnemu.headers import Q
from qnnemu.ops import _fast, _fast_qgemm
from qnnemu.spec import quant
from qnnemu.spec.quant import AccRequant, code_range

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")
# the fast paths themselves (QNNEMU_KERNELS=reference turns them off: the formulas only)
fast_paths = pytest.mark.skipif(quant._prepare_kernels() is None, reason="QNNEMU_KERNELS=reference")

U8, S8 = Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8
U16, S16 = Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16
NP = {U8: np.uint8, S8: np.int8, U16: np.uint16, S16: np.int16}


# -- the int32 requantization table ---------------------------------------------------------------

def _random_requant(rng, n: int):
    """An AccRequant with the parameters quantized graphs give it (and, now and then, extreme
    ones), plus the xw / clmax / wsum / chmax arguments the lowering passes with it."""
    wide_in = bool(rng.random() < 0.5)
    y_dtype = [U8, S8, U16, S16][int(rng.integers(0, 4))]
    lo, hi = code_range(y_dtype)
    xs = float(rng.uniform(1e-4, 0.2))
    x_offset = -float(rng.integers(0, 65536 if wide_in else 256))
    ws = rng.uniform(1e-4, 0.05, n).astype(np.float32)
    if rng.random() < 0.2:
        ws[int(rng.integers(0, n))] = np.float32(1e-45)        # a dead channel
    factor = np.where(rng.random(n) < 0.5, rng.integers(2049, 8192, n) / 2048.0, 1.0)
    ys = float(rng.uniform(1e-4, 1.0)) * (1e-3 if rng.random() < 0.1 else 1.0)
    y_offset = -float(rng.integers(lo, hi + 1))
    bias = None
    if rng.random() < 0.6:
        bias = rng.integers(-2**20, 2**20, n).astype(np.float64)
        if rng.random() < 0.3:
            bias = bias + rng.random(n)                        # a fractional bias term
    fine = bool(rng.random() < 0.2)
    bits = 24 if (not fine and rng.random() < 0.2) else None
    rq = AccRequant(xs, x_offset, ws, factor, ys, y_offset, bias, wide_in, lo, hi, fine, bits)
    wsum = rng.integers(-5000, 5000, n).astype(np.float64)
    wabs = np.abs(wsum).astype(np.int64) + rng.integers(0, 20000, n)
    if rng.random() < 0.1:
        wabs[0] = 2**40                                         # past int32: the table is refused
    shift = 128.0 if rng.random() < 0.3 else 0.0
    xw = (x_offset - shift) * wsum
    if rng.random() < 0.1:
        xw = xw + 0.5                                           # a fractional offset term
    chmax = 255 if (wide_in and rng.random() < 0.5) else 0
    top = 65535 if wide_in else 255
    return rq, xw, top * wabs, wsum, chmax


@fast_paths
@settings(max_examples=300)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12))
def test_int_requant_table_matches_python_loop(seed, n):
    rq, xw, clmax, wsum, chmax = _random_requant(np.random.default_rng(seed), n)
    with np.errstate(all="ignore"):
        got = lower_qgemm._int_requant(rq, n, xw, clmax, wsum, chmax)
        ref = lower_qgemm._int_requant_reference(rq, n, xw, clmax, wsum, chmax)
    assert (got is None) == (ref is None), f"C table {'refused' if got is None else 'built'}, Python loop " \
                                           f"{'refused' if ref is None else 'built'} it"
    if ref is not None:
        assert got.dtype == ref.dtype and np.array_equal(got, ref), \
            f"int32 requantization tables differ:\nC {got}\nPython {ref}"


@fast_paths
def test_int_requant_table_builds_on_real_parameters():
    """The random parameters above reach built tables, not only refusals (else the property
    would compare Nones)."""
    built = 0
    for seed in range(200):
        rq, xw, clmax, wsum, chmax = _random_requant(np.random.default_rng(seed), 4)
        with np.errstate(all="ignore"):
            built += lower_qgemm._int_requant(rq, 4, xw, clmax, wsum, chmax) is not None
    assert built >= 40, f"only {built} of 200 random requantizations gave an int32 table"


# -- weights from their codes -------------------------------------------------------------------

@fast_paths
@settings(max_examples=300)
@given(seed=st.integers(0, 2**32 - 1), signed=st.booleans(), requantize=st.booleans(),
       offsets=st.sampled_from(["one", "per-channel", "symmetric", "huge"]),
       shape=st.lists(st.integers(1, 7), min_size=1, max_size=4))
def test_weight_codes_match_float64_route(seed, signed, requantize, offsets, shape):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(0, len(shape)))
    n = shape[axis]
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    codes = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    if rng.random() < 0.3:                     # narrow channels: some stay inside int8
        codes = (codes // int(rng.integers(2, 60))).astype(dtype)
    off = {"one": float(rng.integers(-300, 300)),
           "per-channel": rng.integers(-300, 300, n).astype(np.float64),
           "symmetric": np.full(n, 0.0 if signed else -128.0),
           "huge": rng.integers(-70000, 70000, n).astype(np.float64)}[offsets]
    fast = quant.htp_int8_weight_codes(codes, off, axis, requantize)
    bshape = [1] * len(shape)
    bshape[axis] = -1
    w = codes.astype(np.float64) + np.reshape(off, bshape if np.ndim(off) else ())
    with np.errstate(all="ignore"):
        ref, factor = quant.htp_int8_weights(w, axis) if requantize else (w, np.ones(n))
    if fast is None:
        # only values the integer lanes do not take: offsets past 65280 or values past int16
        assert offsets == "huge" or np.abs(ref).max() > 32767, \
            f"the fast path refused weights it takes: offsets {off}, values up to {np.abs(ref).max()}"
        return
    values, got_factor, wsum, wabs = fast
    per_channel = np.moveaxis(ref, axis, -1).reshape(-1, n)
    assert values.shape == ref.shape and np.array_equal(values.astype(np.float64), ref), "values differ"
    assert values.dtype == (np.int8 if ref.max() <= 127 and ref.min() >= -128 else np.int16), \
        f"values stored as {values.dtype}"
    assert np.array_equal(got_factor, factor), f"factor {got_factor} != {factor}"
    assert np.array_equal(wsum, per_channel.sum(axis=0)), "per-channel sums differ"
    assert np.array_equal(wabs, np.abs(per_channel).sum(axis=0)), "per-channel magnitude sums differ"


def test_weight_codes_off_without_kernels(monkeypatch):
    """QNNEMU_KERNELS=reference keeps the float64 route."""
    monkeypatch.setenv("QNNEMU_KERNELS", "reference")
    assert quant.htp_int8_weight_codes(np.zeros((2, 3), np.uint8), -128.0, 1) is None, \
        "the C pass ran with the kernels set to reference"


# -- qgemm packing ------------------------------------------------------------------------------

def _pack_reference(b: np.ndarray, kp: int) -> tuple[np.ndarray, np.ndarray]:
    """Bp[block][k / 4][column in block][k % 4] (zero beyond K and N) and int32 column sums."""
    k, n = b.shape
    nb = -(-n // 16)
    full = np.zeros((kp, nb * 16), np.int8)
    full[:k, :n] = b
    packed = full.reshape(kp // 4, 4, nb, 16).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(packed).reshape(-1), b.astype(np.int32).sum(axis=0)


@settings(max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 300), n=st.integers(1, 70), transposed=st.booleans())
def test_qgemm_pack_layout(seed, k, n, transposed):
    """Row-major [K, N] operands are read row by row, transposed views of [N, K] weights
    (FullyConnected) column by column: the same packed bytes either way."""
    lib, _ = _fast.library()
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8).T if transposed else \
        rng.integers(-128, 128, (k, n)).astype(np.int8)
    packed, wsum = _fast_qgemm.pack(b)
    kp = int(lib.qe_qgemm_packed_size(k, n)) // (16 * -(-n // 16))
    ref, ref_sum = _pack_reference(b, kp)
    assert packed.shape == ref.shape and np.array_equal(packed, ref), f"packed layout of [{k}, {n}] differs"
    assert np.array_equal(wsum[:n], ref_sum), "column sums differ"


@pytest.mark.parametrize("transposed", [False, True])
def test_large_operands_split_over_threads_pack_the_same_bytes(transposed):
    """qe_qgemm_pack and qe_weight_codes split large operands over the pool's threads by column
    blocks / channel ranges (from 256 Ki weights): the same packed bytes, sums and values as
    the layouts they must have (a 1152 x 700 operand: several ranges, a partial last block)."""
    lib, _ = _fast.library()
    before = _fast.threads()
    _fast.set_threads(3)     # (2 cores here: 3 ranges still run, some on the same core)
    try:
        _split_operands(lib, transposed)
    finally:
        _fast.set_threads(before)


def _split_operands(lib, transposed: bool) -> None:
    rng = np.random.default_rng(21)
    k, n = 1152, 700
    b = rng.integers(-128, 128, (n, k)).astype(np.int8).T if transposed else \
        rng.integers(-128, 128, (k, n)).astype(np.int8)
    packed, wsum = _fast_qgemm.pack(b)
    kp = int(lib.qe_qgemm_packed_size(k, n)) // (16 * -(-n // 16))
    ref, ref_sum = _pack_reference(b, kp)
    assert np.array_equal(packed, ref), f"packed layout of [{k}, {n}] split over threads differs"
    assert np.array_equal(wsum[:n], ref_sum), "column sums split over threads differ"
    codes = rng.integers(0, 256, (k, n)).astype(np.uint8)
    off = rng.integers(-300, 300, n).astype(np.float64)
    values, factor, wsum, wabs = quant.htp_int8_weight_codes(codes, off, 1, True)
    with np.errstate(all="ignore"):
        want, want_factor = quant.htp_int8_weights(codes.astype(np.float64) + off, 1)
    assert np.array_equal(values.astype(np.float64), want), "weight codes split over threads differ"
    assert np.array_equal(factor, want_factor), "requantization factors differ"
    assert np.array_equal(wsum, want.sum(axis=0)) and np.array_equal(wabs, np.abs(want).sum(axis=0)), \
        "per-channel sums split over threads differ"


# -- IntegerAccumulation: fast path == float64 route -----------------------------------------------

def _build(op: str, seed: int, unsigned_w: bool, per_channel: bool, x_dtype: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(new_context(), "qfin")
    xq = (0.02, -int(rng.integers(*((0, 256) if x_dtype == U8 else (0, 65536)))))
    yq = (0.05, -int(rng.integers(0, 256)))
    cin, cout = int(rng.integers(1, 6)), int(rng.integers(1, 7))
    stride = int(rng.integers(1, 3))
    params = {}
    if op == "Conv2d":
        x_shape, w_shape, axis = (1, 6, 6, cin), (3, 3, cin, cout), 3
        y_shape = (1, (6 - 3) // stride + 1, (6 - 3) // stride + 1, cout)
        params = {"stride": [stride, stride]}
    elif op == "DepthWiseConv2d":
        cout = cin
        x_shape, w_shape, axis = (1, 6, 6, cin), (3, 3, 1, cin), 3
        y_shape = (1, (6 - 3) // stride + 1, (6 - 3) // stride + 1, cin)
        params = {"stride": [stride, stride]}
    elif op == "FullyConnected":
        x_shape, w_shape, axis, y_shape = (2, cin), (cout, cin), 0, (2, cout)
    else:
        x_shape, w_shape, axis, y_shape = (3, cin), (cin, cout), 1, (3, cout)
    n = w_shape[axis]
    if unsigned_w:
        data = rng.integers(0, 256, w_shape).astype(np.uint8)
        offsets = rng.integers(-255, 0, n) if per_channel else np.array([int(rng.integers(-255, 0))])
    else:
        data = rng.integers(-128, 128, w_shape).astype(np.int8)
        offsets = np.zeros(n if per_channel else 1, np.int64)
    scales = rng.uniform(0.001, 0.05, n if per_channel else 1).astype(np.float32)
    wq = {"axis": axis, "scales": scales, "offsets": offsets} if per_channel else (float(scales[0]), int(offsets[0]))
    x = b.tensor("x", x_shape, x_dtype, APP_WRITE, quant=xq)
    w = b.tensor("w", w_shape, U8 if unsigned_w else S8, STATIC, data, wq)
    y = b.tensor("y", y_shape, U8, APP_READ, quant=yq)
    b.node(op, "op", [x, w], [y], **params)
    b.graph.finalize()
    impls = [s.impl for s in b.graph.plan.steps if type(s.impl) is plan_mod.IntegerAccumulation]
    b.graph.context.free()
    assert len(impls) == 1, f"{op}: expected one IntegerAccumulation step, got {len(impls)}"
    return impls[0]


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


@fast_paths
@settings(max_examples=60)
@given(seed=st.integers(0, 2**31), op=st.sampled_from(["Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul"]),
       unsigned_w=st.booleans(), per_channel=st.booleans(), wide=st.booleans())
def test_integer_accumulation_fast_path_matches_float64_route(seed, op, unsigned_w, per_channel, wide):
    x_dtype = U16 if wide else U8
    fast = _build(op, seed, unsigned_w, per_channel, x_dtype)
    assert fast._w_values is not None, f"{op}: the fast path was not taken"
    mp = pytest.MonkeyPatch()
    mp.setattr(plan_mod, "htp_int8_weight_codes", lambda *a, **k: None)
    try:
        slow = _build(op, seed, unsigned_w, per_channel, x_dtype)
    finally:
        mp.undo()
    assert slow._w_values is None, "the float64 route was not taken"
    assert _same(fast.w_int, slow.w_int), f"{op}: float32 weights differ"
    assert _same(fast.wsum, slow.wsum) and fast.wl1 == slow.wl1, f"{op}: weight sums differ"
    for name in ("m32", "mq", "const", "scale", "inv_shift", "shift"):
        assert _same(getattr(fast.requant, name), getattr(slow.requant, name)), f"{op}: requant.{name} differs"
    fa, sa = fast.cacc, slow.cacc
    assert (fa is None) == (sa is None), f"{op}: C accumulator built on one path only"
    if fa is not None:
        assert fa.kind == sa.kind and _same(fa.geo, sa.geo) and _same(fa.weights, sa.weights), \
            f"{op}: packed operand differs"
        for name in ("wsum", "wabs", "xw"):
            got, ref = getattr(fa, name), getattr(sa, name)
            assert (got is None and ref is None) or _same(got, ref), f"{op}: accumulator {name} differs"


# -- tiling catalog: options on first use ---------------------------------------------------------

def test_tile_catalog_lazy_options_match_eager():
    from qnnemu.htp import tiling
    p = tiling.Pattern("test", (4, 37, 5), (True, True, False), (), ())
    x = tiling.Tensor(tiling.Slice(0, (tiling.AxisMap("same", axis=0), tiling.AxisMap("same", axis=1),
                                       tiling.AxisMap("same", axis=2)), (4, 37, 5)), 1.0, 740, 0)
    y = tiling.Tensor(tiling.Slice(0, (tiling.AxisMap("same", axis=0), tiling.AxisMap("same", axis=1),
                                       tiling.AxisMap("same", axis=2)), (4, 37, 5)), 1.0, 740, 1)
    lazy = tiling.TileCatalog(p, [x], [y], lambda share: int(1000 * share))
    eager = tiling.TileCatalog(p, [x], [y], lambda share: int(1000 * share))
    listed = eager.options        # listed now; ``lazy`` lists them inside best()
    assert listed, "the catalog lists tilings"
    assert lazy.finest == eager.finest and lazy.finest is not None, "finest grid differs"
    assert lazy.finest.tiles == max(o.tiles for o in listed), "the finest grid has the most tiles"
    for budget in sorted({o.working_set for o in listed} | {0, 1, 10**9}):
        assert lazy.best(budget) == eager.best(budget), f"best({budget}) differs"
    assert lazy.options == listed, "option lists differ"
