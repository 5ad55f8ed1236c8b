"""The C engine's fast movement paths (issue 13; csrc/eng_movement.c, qnnemu/core/engine/
lower_movement.py and program.py ``Builder.alias``): Reshape-like ops and slices that are one
contiguous run of their input (QNN op definitions Reshape, StridedSlice, Split) share the
input's arena bytes instead of copying; copies are split over the pool's threads; 4-byte
transposes go through AVX2 8 x 8 register blocks; float32 PoolMax2d and global PoolAvg2d run
16 channels a register and must give kernels.c's ``qe_pool2d`` values (the op's fast path)
bit for bit, NaNs and signed zeros included."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.binary_builders import APP_READ, APP_WRITE, STATIC, GraphBuilder, desc, new_context
from helpers.step_kernels import call
from hypothesis import given, strategies as st

from qnnemu.core.engine import check_plan
from qnnemu.core.graph import ParamDesc
from qnnemu.headers import Q
from qnnemu.ops import _fast

pytestmark = pytest.mark.skipif(not _fast.available(), reason="qnnemu._kernels is not built")

lib, ffi = _fast.library()
I32 = Q.QNN_DATATYPE_INT_32


@pytest.fixture
def two_threads():
    """The kernels' pool at 2 threads (restored after)."""
    before = _fast.threads()
    _fast.set_threads(2)
    yield
    _fast.set_threads(before)


def special_floats(rng, shape) -> np.ndarray:
    """Normal values salted with NaNs, infinities and zeros of both signs."""
    x = rng.standard_normal(shape).astype(np.float32)
    picks = rng.integers(0, 12, shape)
    x[picks == 0] = np.nan
    x[picks == 1] = 0.0
    x[picks == 2] = -0.0
    x[picks == 3] = np.inf
    x[picks == 4] = -np.inf
    return x


# -- transposes and split copies ----------------------------------------------------------------------
@given(m=st.integers(8, 90), n=st.integers(8, 90), batch=st.integers(1, 3), es=st.sampled_from([1, 2, 4, 8]))
def test_transposes_match_numpy(m, n, batch, es):
    """[batch, n, m] -> [batch, m, n] for every element size (4 bytes: the AVX2 8 x 8 blocks,
    partial blocks and tiles at the edges)."""
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[es]
    src = np.random.default_rng(m * n).integers(0, 2**31, (batch, n, m)).astype(dtype)
    dst = np.zeros((batch, m, n), dtype)
    rc = call("qe_k_move", [src, dst], (es, 3, 0, 0, batch, m, n, n * m, 1, m, m * n, n, 1))
    assert rc == 0, "qe_k_move returns 0"
    assert np.array_equal(dst, src.transpose(0, 2, 1)), f"transpose of {batch}x{n}x{m} ({es}-byte elements)"


@pytest.mark.parametrize("shape,perm", [((1, 96, 56, 56), (0, 2, 3, 1)), ((1, 56, 56, 96), (0, 3, 1, 2)),
                                        ((1, 3, 224, 224), (0, 2, 3, 1)), ((1, 2, 58, 28, 28), (0, 2, 1, 3, 4)),
                                        ((600, 700), (1, 0))])
def test_large_copies_split_over_threads_give_the_same_bytes(shape, perm, two_threads):
    """Copies big enough to be split (MOVE_SPLIT_BYTES) equal numpy's on 1 and 2 threads."""
    src = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    want = np.ascontiguousarray(src.transpose(perm))
    out_strides = np.cumprod((1,) + tuple(want.shape[::-1]))[:-1][::-1]
    in_strides = np.cumprod((1,) + shape[::-1])[:-1][::-1]
    ss = [int(in_strides[p]) for p in perm]
    for threads in (2, 1):
        _fast.set_threads(threads)
        dst = np.zeros(want.shape, np.float32)
        rc = call("qe_k_move", [src, dst], (4, len(shape), 0, 0, *want.shape, *ss, *out_strides))
        assert rc == 0, "qe_k_move returns 0"
        assert np.array_equal(dst, want), f"{shape} transposed by {perm} on {threads} threads"


def test_large_concat_slabs_split_over_threads(two_threads):
    """A channel Concat in NHWC (rows of 64 floats into rows of 128) split over two threads."""
    a = np.random.default_rng(1).standard_normal((55 * 55, 64)).astype(np.float32)
    out = np.zeros((55 * 55, 128), np.float32)
    assert call("qe_k_move", [a, out], (4, 2, 0, 64, 55 * 55, 64, 64, 1, 128, 1)) == 0, "qe_k_move returns 0"
    assert np.array_equal(out[:, 64:], a) and not out[:, :64].any(), "the slab lands in its columns only"


@pytest.mark.parametrize("es", [1, 2, 4, 8])
@pytest.mark.parametrize("cols", [1, 3, 4, 8, 16, 29, 32, 50, 64, 100])
def test_short_contiguous_rows(es, cols):
    """Rows of at most 256 bytes between rows of other lengths (a channel Concat in NHWC; the
    constant-size copies of 16..256 bytes and the 32/8/1-byte pieces of other sizes)."""
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[es]
    rows = 37
    src = np.random.default_rng(cols).integers(1, 2**31, (rows, cols + 3)).astype(dtype)
    out = np.zeros((rows, 2 * cols + 1), dtype)
    rc = call("qe_k_move", [src, out], (es, 2, 2, cols, rows, cols, cols + 3, 1, 2 * cols + 1, 1))
    assert rc == 0, "qe_k_move returns 0"
    assert np.array_equal(out[:, cols:2 * cols], src[:, 2:cols + 2]), f"{rows} rows of {cols * es} bytes"
    assert not out[:, :cols].any() and not out[:, 2 * cols:].any(), "nothing written outside the rows"


# -- float pooling: the register kernels against qe_pool2d ----------------------------------------------
def qe_pool2d(kind, x, k, s, pads, out, count_pad=0) -> np.ndarray:
    n, h, w, c = x.shape
    y = np.zeros((n, out[0], out[1], c), np.float32)
    lib.qe_pool2d(kind, n, h, w, c, k[0], k[1], out[0], out[1], s[0], s[1], pads[0], pads[1], pads[2], pads[3],
                  count_pad, ffi.cast("float *", x.ctypes.data), ffi.cast("float *", y.ctypes.data))
    return y


@given(data=st.data())
def test_max_pooling_kernel_equals_qe_pool2d(data):
    """Windows inside and across the border (zero padding), channel tails of any length, NaNs,
    infinities and signed zeros: qe_k_maxpool_f32 writes qe_pool2d's bytes, on 1 and 2 threads."""
    n, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    c = data.draw(st.sampled_from([1, 3, 15, 16, 17, 33, 64, 70]))
    k = [data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))]
    s = [data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))]
    pt, pl = data.draw(st.integers(0, k[0] - 1)), data.draw(st.integers(0, k[1] - 1))
    oh = max(1, (h + pt - k[0]) // s[0] + 1 + data.draw(st.integers(0, 1)))
    ow = max(1, (w + pl - k[1]) // s[1] + 1 + data.draw(st.integers(0, 1)))
    x = special_floats(np.random.default_rng(data.draw(st.integers(0, 99))), (n, h, w, c))
    want = qe_pool2d(0, x, k, s, (pt, 0, pl, 0), (oh, ow))
    before = _fast.threads()
    try:
        for threads in (1, 2):
            _fast.set_threads(threads)
            y = np.full((n, oh, ow, c), 7.0, np.float32)
            rc = call("qe_k_maxpool_f32", [x, y], (n, h, w, c, k[0], k[1], oh, ow, s[0], s[1], pt, pl))
            assert rc == 0, "qe_k_maxpool_f32 returns 0"
            assert y.tobytes() == want.tobytes(), \
                f"max pooling {x.shape} k{k} s{s} pads ({pt}, {pl}) -> ({oh}, {ow}) on {threads} threads"
    finally:
        _fast.set_threads(before)


@given(data=st.data())
def test_global_average_kernel_equals_qe_pool2d(data):
    """Float64 channel sums in cell order times 1 / cells: qe_k_avgpool_global_f32 writes
    qe_pool2d's bytes for any channel count (masked tails), batch and special values."""
    n, h, w = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 20)), data.draw(st.integers(1, 20))
    c = data.draw(st.sampled_from([1, 5, 16, 31, 32, 96, 100]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    x = special_floats(rng, (n, h, w, c)) if data.draw(st.booleans()) else \
        (rng.standard_normal((n, h, w, c)) * 10.0 ** rng.integers(-30, 30, (n, h, w, c))).astype(np.float32)
    want = qe_pool2d(1, x, (h, w), (h, w), (0, 0, 0, 0), (1, 1))
    y = np.full((n, 1, 1, c), 7.0, np.float32)
    assert call("qe_k_avgpool_global_f32", [x, y], (n, h, w, c)) == 0, "qe_k_avgpool_global_f32 returns 0"
    assert y.tobytes() == want.tobytes(), f"global average of {x.shape}"


# -- values sharing arena bytes ------------------------------------------------------------------------
def int32_param(name, values) -> ParamDesc:
    arr = np.asarray(values, np.int32)
    return ParamDesc(name, "tensor", I32, tensor=desc(f"{name}.param", arr.shape, I32, STATIC, arr))


def kernel_names(graph) -> list[str]:
    names = {int(ffi.cast("intptr_t", ffi.addressof(lib, k))): k
             for k in ("qe_k_nop", "qe_k_copy", "qe_k_move", "qe_k_binary_f32") if hasattr(lib, k)}
    return [names.get(int(row[0]), "other") for row in graph.plan.engine.program.steps]


def offset_of(graph, tensor) -> int:
    engine = graph.plan.engine
    return int(engine.program.bufs[engine._slot_buf[graph.plan.slots[tensor.id]]][1])


def test_reshape_shares_bytes_and_keeps_them_while_either_value_lives():
    """x -> Relu a -> Reshape b; b is read again after two more Relus whose outputs could have
    reused a's bytes once a's last direct reader (the Reshape) ran: they must not."""
    b = GraphBuilder(new_context(), "g")
    try:
        x = b.tensor("x", (1, 32, 4, 4), type_=APP_WRITE)
        a, r = b.tensor("a", (1, 32, 4, 4)), b.tensor("r", (1, 512))
        c, d = b.tensor("c", (1, 512)), b.tensor("d", (1, 512))
        y = b.tensor("y", (1, 512), type_=APP_READ)
        b.node("Relu", "relu_a", [x], [a])
        b.node("Reshape", "reshape", [a], [r])
        b.node("ElementWiseNeg", "neg_c", [r], [c])
        b.node("ElementWiseNeg", "neg_d", [c], [d])
        b.node("ElementWiseSubtract", "sub", [r, d], [y])
        b.graph.finalize()
        graph = b.graph
        assert graph.plan.engine.fallbacks == [], f"all in C: {graph.plan.engine.fallbacks}"
        assert offset_of(graph, r) == offset_of(graph, a), "the Reshape's output is its input's bytes"
        assert {offset_of(graph, c), offset_of(graph, d)}.isdisjoint({offset_of(graph, a)}), \
            "values written while the reshaped value lives take other bytes"
        feeds = {x.id: np.random.default_rng(3).standard_normal((1, 32, 4, 4)).astype(np.float32)}
        check_plan(graph.plan, feeds)
        out = graph.execute(feeds, [y.id])[y.id]
        assert np.array_equal(out, np.zeros((1, 512), np.float32)), "r - (-(-r)) is 0 everywhere"
    finally:
        b.graph.context.free()


@pytest.mark.parametrize("begin,shared", [(16, True), (1, False)])
def test_slice_of_one_run_shares_bytes_when_aligned(begin, shared):
    """StridedSlice of channels [begin, begin + 8) of [1, 32, 2, 2]: one contiguous run of the
    input; at channel 16 it starts on a 64-byte boundary and shares the input's bytes (a no-op
    step), at channel 1 (byte 16) it does not and is copied."""
    b = GraphBuilder(new_context(), "g")
    try:
        x = b.tensor("x", (1, 32, 2, 2), type_=APP_WRITE)
        a = b.tensor("a", (1, 32, 2, 2))
        s = b.tensor("s", (1, 8, 2, 2))
        y = b.tensor("y", (1, 8, 2, 2), type_=APP_READ)
        b.node("Relu", "relu", [x], [a])
        ranges = [[0, 1, 1], [begin, begin + 8, 1], [0, 2, 1], [0, 2, 1]]
        b.graph.add_node(_cfg("StridedSlice", [a], [s], ranges=int32_param("ranges", ranges)))
        b.node("Relu", "relu2", [s], [y])
        b.graph.finalize()
        graph = b.graph
        names = kernel_names(graph)
        assert graph.plan.engine.fallbacks == [], f"all in C: {graph.plan.engine.fallbacks}"
        if shared:
            assert "qe_k_nop" in names and "qe_k_move" not in names, f"an aligned run is shared: {names}"
            assert offset_of(graph, s) == offset_of(graph, a) + begin * 4 * 4, "the slice starts at its run"
        else:
            assert "qe_k_move" in names, f"an unaligned run is copied: {names}"
        feeds = {x.id: np.random.default_rng(4).standard_normal((1, 32, 2, 2)).astype(np.float32)}
        check_plan(graph.plan, feeds)
        out = graph.execute(feeds, [y.id])[y.id]
        assert np.array_equal(out, np.maximum(feeds[x.id][:, begin:begin + 8], 0)), "the slice's values"
    finally:
        b.graph.context.free()


def test_split_halves_share_bytes():
    """Split of [1, 32, 4, 4] into two 16-channel halves: each a run of the input, both shared."""
    b = GraphBuilder(new_context(), "g")
    try:
        x = b.tensor("x", (1, 32, 4, 4), type_=APP_WRITE)
        a = b.tensor("a", (1, 32, 4, 4))
        h0, h1 = b.tensor("h0", (1, 16, 4, 4)), b.tensor("h1", (1, 16, 4, 4))
        y = b.tensor("y", (1, 16, 4, 4), type_=APP_READ)
        b.node("Relu", "relu", [x], [a])
        b.node("Split", "split", [a], [h0, h1], axis=1, split_index=[16])
        b.node("ElementWiseSubtract", "sub", [h1, h0], [y])
        b.graph.finalize()
        graph = b.graph
        assert graph.plan.engine.fallbacks == [], f"all in C: {graph.plan.engine.fallbacks}"
        assert offset_of(graph, h0) == offset_of(graph, a), "the first half is the input's first bytes"
        assert offset_of(graph, h1) == offset_of(graph, a) + 16 * 16 * 4, "the second half starts at channel 16"
        feeds = {x.id: np.random.default_rng(5).standard_normal((1, 32, 4, 4)).astype(np.float32)}
        check_plan(graph.plan, feeds)
        r = np.maximum(feeds[x.id], 0)
        assert np.array_equal(graph.execute(feeds, [y.id])[y.id], r[:, 16:] - r[:, :16]), "h1 - h0"
    finally:
        b.graph.context.free()


def _cfg(op, inputs, outputs, **params):
    from helpers.binary_builders import ref

    from qnnemu.core.graph import OpConfigDesc
    return OpConfigDesc(1, op.lower(), "qti.aisw", op, list(params.values()) if all(
        isinstance(v, ParamDesc) for v in params.values()) else [],
        [ref(t) for t in inputs], [ref(t) for t in outputs])
