"""The exact integer accumulator of quantized Conv2d / DepthWiseConv2d / FullyConnected / MatMul
(QNN op definitions of those ops; docs/numerics.md "Accumulating ops") in the C kernels of
csrc/eng_qgemm.c: sum((x_code + x_offset) * w) over the reduction, exact for every 8/16-bit
activation code and int8 weight (the Python float32 formula is exact only below 2**24).

The plan's IntegerAccumulation (qnnemu/core/plan.py) calls ``QAcc`` when the C kernels are
enabled (``_fast.enabled()``), and the C engine's step (qnnemu/core/engine/lower_qgemm.py)
runs the same C pipeline with the same packed weights and geometry, so both paths compute
the same accumulator; ``QNNEMU_KERNELS=reference`` keeps the numpy formula.
"""
from __future__ import annotations

import math

import numpy as np

from . import _fast

# numpy code dtype -> csrc/engine.h element type code
CODE_TYPES = {np.dtype(np.uint8): 0, np.dtype(np.int8): 1, np.dtype(np.uint16): 2,
              np.dtype(np.int16): 3}
# the unsigned shift of each code type (int8 +128, int16 +32768) and the unsigned range
_SHIFT = {0: 0, 1: 128, 2: 0, 3: 32768}
_TOP = {0: 255, 1: 255, 2: 65535, 3: 65535}
# csrc/eng_qgemm.h QG_* (the geometry array)
(QG_KIND, QG_TYPE, QG_M, QG_K, QG_N, QG_GROUP, QG_LDA, QG_BATCH, QG_H, QG_W, QG_CIN, QG_FH, QG_FW,
 QG_OH, QG_OW, QG_SH, QG_SW, QG_PT, QG_PL, QG_DH, QG_DW, QG_PAD_CODE, QG_LDO, QG_LEN) = range(24)
MAX_K = 65536
ISA_NAMES = {4: "amx-int8", 3: "avx512-vnni", 2: "avx-vnni", 1: "avx2", 0: "scalar"}


def isa() -> str:
    """The integer GEMM's instruction set on this machine (csrc/eng_qgemm.c qe_qgemm_isa_level)."""
    lib, _ = _fast.library()
    return ISA_NAMES[lib.qe_qgemm_isa_level()] if lib is not None else "none"


def pack(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 [K, N] GEMM operand -> (packed bytes, int32 column sums)."""
    lib, ffi = _fast.library()
    K, N = b.shape
    if b.dtype == np.int8 and b.T.flags.c_contiguous and not b.flags.c_contiguous:
        src, rsb, csb = b.T, 1, K         # a transposed weight ([N, K] as stored): read in place
    else:
        src, rsb, csb = np.ascontiguousarray(b, dtype=np.int8), N, 1
    packed = _fast.aligned_empty(max(int(lib.qe_qgemm_packed_size(K, N)), 1), np.int8)
    wsum = np.empty(max(N, 1), np.int32)
    lib.qe_qgemm_pack(K, N, ffi.cast("int8_t *", ffi.from_buffer(src)), rsb, csb,
                      ffi.cast("int8_t *", ffi.from_buffer(packed)),
                      ffi.cast("int32_t *", ffi.from_buffer(wsum)))
    return packed, wsum


def _column_abs_sums(b: np.ndarray, given: np.ndarray | None) -> np.ndarray:
    """int64 sum of |b| per column of the [K, N] operand: ``given`` (the caller's per-channel
    sums of the same weights) when it has N entries, else computed (on a transposed view that
    reduction is slow: a ResNet-50's classifier took 70 ms)."""
    if given is not None and np.shape(given) == (b.shape[1],):
        return np.asarray(given, dtype=np.int64)
    return np.abs(np.ascontiguousarray(b).astype(np.int64)).sum(axis=0)


def _int8(w: np.ndarray) -> np.ndarray | None:
    if w.dtype == np.int8:
        return w
    if w.size and (w.min() < -128 or w.max() > 127):
        return None
    return w.astype(np.int8)


class QAcc:
    """The C accumulator of one op: ``kind`` "gemm" (rows or im2col rows times packed int8
    weights), "dwi" (direct depthwise in int32, channel multiplier 1; ``xw`` float64
    x_offset * wsum) or "dw" (direct depthwise, float64 weights); ``geo`` the int64 geometry
    array of csrc/eng_qgemm.h; ``weights`` the packed operand (gemm), [taps, c] int32 (dwi) or
    [taps, c_out] float64 (dw);
    ``wsum`` int32 per output channel (gemm); ``out_shape`` the op's output shape."""

    def __init__(self, kind: str, geo: np.ndarray, weights: np.ndarray, wsum: np.ndarray | None,
                 x_shape: tuple, x_dtype: np.dtype, x_offset: float, out_shape: tuple):
        self.kind, self.geo, self.weights, self.wsum = kind, geo, weights, wsum
        self.x_shape, self.x_dtype, self.x_offset = tuple(x_shape), np.dtype(x_dtype), float(x_offset)
        self.out_shape = tuple(out_shape)
        self.rows = int(geo[QG_M])
        self.cols = int(geo[QG_LDO])
        self.xw: np.ndarray | None = None
        # sum |w| per output channel (int64), for the engine's int32 requantization bounds
        self.wabs: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        """float64 accumulator shaped like the op's output; None for an input this was not
        prepared for (another shape or type)."""
        if not _fast.enabled() or x.dtype != self.x_dtype or tuple(x.shape) != self.x_shape:
            return None
        lib, ffi = _fast.library()
        x = np.ascontiguousarray(x)
        acc = np.empty((self.rows, self.cols), np.float64)
        geo = ffi.cast("int64_t *", ffi.from_buffer(self.geo))
        xp = ffi.cast("void *", ffi.from_buffer(x)) if x.size else ffi.NULL
        out = ffi.cast("double *", ffi.from_buffer(acc)) if acc.size else ffi.NULL
        if self.kind == "gemm":
            rc = lib.qe_qacc(geo, xp, ffi.cast("int8_t *", ffi.from_buffer(self.weights)),
                             ffi.cast("int32_t *", ffi.from_buffer(self.wsum)), self.x_offset, out)
        elif self.kind == "dwi":
            rc = lib.qe_qacc_dw_i32(geo, xp, ffi.cast("int32_t *", ffi.from_buffer(self.weights)),
                                    ffi.cast("double *", ffi.from_buffer(self.xw)), out)
        else:
            rc = lib.qe_qacc_dw(geo, xp, ffi.cast("double *", ffi.from_buffer(self.weights)),
                                self.x_offset, out)
        if rc != 0:
            return None
        return acc.reshape(self.out_shape)


def _geo(**values) -> np.ndarray:
    geo = np.zeros(QG_LEN, np.int64)
    geo[QG_GROUP] = 1
    for name, v in values.items():
        geo[globals()["QG_" + name.upper()]] = int(v)
    return geo


def _pad_code(x_type: int, x_offset: float) -> int | None:
    """The unsigned code whose value code + x_offset is 0 (padding), None if there is none."""
    u = _SHIFT[x_type] - x_offset
    return int(u) if float(u).is_integer() and 0 <= u <= _TOP[x_type] else None


def prepare(op_type: str, params: dict, x_shape, x_dtype, x_offset: float, w_int: np.ndarray,
            out_shape, transpose_in1: bool = False, wabs: np.ndarray | None = None) -> QAcc | None:
    """The QAcc of a static-weight op (``w_int``: the integer weights the plan uses, in the
    op's layout: integer-valued float64, or an integer array), or None when the C kernels are
    not built or the op's form is not covered (the plan then keeps its float formula).
    ``wabs``: the int64 sum of |w| per output channel when the caller has it (then no pass
    over the weights computes it)."""
    if not _fast.available():
        return None
    x_dtype = np.dtype(x_dtype)
    t = CODE_TYPES.get(x_dtype)
    if t is None or not float(x_offset).is_integer():
        return None
    x_shape, out_shape = tuple(int(d) for d in x_shape), tuple(int(d) for d in out_shape)
    w_int = np.asarray(w_int)
    if w_int.dtype.kind != "i":   # integer values: no float64 copy of the weights
        w_int = np.asarray(w_int, dtype=np.float64)
    try:
        if op_type in ("Conv2d", "DepthWiseConv2d"):
            return _prepare_conv(op_type, params, x_shape, x_dtype, t, x_offset, w_int, out_shape, wabs)
        if op_type == "FullyConnected":
            N, K = w_int.shape
            b = _int8(w_int.T)
            if b is None or K > MAX_K or len(x_shape) < 1 or x_shape[-1] != K:
                return None
            M = math.prod(x_shape) // K if K else 0
            if math.prod(out_shape) != M * N:
                return None
            packed, wsum = pack(b)
            q = QAcc("gemm", _geo(kind=0, type=t, m=M, k=K, n=N, lda=K, ldo=N), packed, wsum,
                     x_shape, x_dtype, x_offset, out_shape)
            q.wabs = _column_abs_sums(b, wabs)
            return q
        if op_type == "MatMul":
            if params.get("transpose_in0", False) or w_int.ndim < 2 or len(x_shape) < 2 \
                    or any(d != 1 for d in w_int.shape[:-2]):
                return None
            w2 = w_int.reshape(w_int.shape[-2:])
            w2 = w2.T if transpose_in1 else w2
            K, N = w2.shape
            b = _int8(w2)
            if b is None or K > MAX_K or x_shape[-1] != K:
                return None
            M = math.prod(x_shape[:-1])
            if math.prod(out_shape) != M * N:
                return None
            packed, wsum = pack(b)
            q = QAcc("gemm", _geo(kind=0, type=t, m=M, k=K, n=N, lda=K, ldo=N), packed, wsum,
                     x_shape, x_dtype, x_offset, out_shape)
            q.wabs = _column_abs_sums(b, wabs)
            return q
    except (ValueError, TypeError, KeyError):
        return None
    return None


def _prepare_conv(op_type, params, x_shape, x_dtype, t, x_offset, w_int, out_shape,
                  wabs: np.ndarray | None = None) -> QAcc | None:
    if len(x_shape) != 4 or w_int.ndim != 4 or len(out_shape) != 4:
        return None
    n, h, w, cin = x_shape
    fh, fw, cig, cout = w_int.shape
    _, oh, ow, oc = out_shape
    stride = np.asarray(params.get("stride", [1, 1]), np.int64).reshape(-1)
    dil = np.asarray(params.get("dilation", [1, 1]), np.int64).reshape(-1)
    pad = np.asarray(params.get("pad_amount", [[0, 0], [0, 0]]), np.int64).reshape(2, 2)
    if stride.size != 2 or dil.size != 2 or oc != cout:
        return None
    geo = dict(type=t, m=n * oh * ow, batch=n, h=h, w=w, cin=cin, fh=fh, fw=fw, oh=oh, ow=ow,
               sh=stride[0], sw=stride[1], pt=pad[0, 0], pl=pad[1, 0], dh=dil[0], dw=dil[1])
    if op_type == "DepthWiseConv2d":
        if cig != 1 or cin == 0 or cout % cin:
            return None
        w64 = np.ascontiguousarray(w_int.reshape(fh * fw, cout), dtype=np.float64)
        dwi = _prepare_dw_i32(w64, t, x_offset, any(pad.reshape(-1)), cin, cout)
        if dwi is not None:
            w32, xw, pad_code = dwi
            q = QAcc("dwi", _geo(kind=2, k=fh * fw, n=cout, ldo=cout, pad_code=pad_code, **geo), w32,
                     None, x_shape, x_dtype, x_offset, out_shape)
            q.xw = xw
            q.wabs = np.abs(w32.astype(np.int64)).sum(axis=0)
            return q
        return QAcc("dw", _geo(kind=2, k=fh * fw, n=cout, ldo=cout, **geo), w64, None,
                    x_shape, x_dtype, x_offset, out_shape)
    group = int(params.get("group", 1))
    if group < 1 or cin != cig * group or cout % group:
        return None
    cog, K = cout // group, fh * fw * cig
    padded = any(pad.reshape(-1))
    pad_code = _pad_code(t, x_offset) if padded else 0
    if pad_code is None or K > MAX_K:
        return None
    parts, sums = [], []
    for gi in range(group):
        b = _int8(w_int[..., gi * cog:(gi + 1) * cog].reshape(K, cog))
        if b is None:
            return None
        packed, wsum = pack(b)
        parts.append(packed)
        sums.append(wsum[:cog])
    # one group's packed operand as packed (64-byte aligned: the engine takes it in place);
    # groups joined into one aligned buffer
    weights = parts[0] if len(parts) == 1 else \
        np.concatenate(parts, out=_fast.aligned_empty(sum(p.size for p in parts), np.int8))
    q = QAcc("gemm", _geo(kind=1, k=K, n=cog, group=group, pad_code=pad_code, ldo=cout, **geo),
             weights, np.concatenate(sums).astype(np.int32), x_shape, x_dtype, x_offset, out_shape)
    q.wabs = np.asarray(wabs, dtype=np.int64) if wabs is not None and np.shape(wabs) == (cout,) else \
        np.abs(w_int).reshape(K, cout).sum(axis=0).astype(np.int64)
    return q


# the largest |code| of each code type (uint8, int8, uint16, int16)
_ABS_CODE = {0: 255, 1: 128, 2: 65535, 3: 32768}


def _prepare_dw_i32(w64: np.ndarray, t: int, x_offset: float, padded: bool, cin: int,
                    cout: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(int32 weights [taps, c], float64 x_offset * wsum, raw pad code) of the int32 depthwise
    kernel (qe_qacc_dw_i32), or None where it does not apply: a channel multiplier, a padded
    input whose zero point is not a code of its type, or sums that could leave int32."""
    if cin != cout or not float(x_offset).is_integer():
        return None
    lo, hi = {0: (0, 255), 1: (-128, 127), 2: (0, 65535), 3: (-32768, 32767)}[t]
    pad_code = int(-x_offset)
    if not padded:
        pad_code = lo
    elif not lo <= pad_code <= hi:
        return None
    if w64.size and (np.abs(w64).max() > 2**15 or
                     _ABS_CODE[t] * float(np.abs(w64).sum(axis=0).max()) >= 2**31):
        return None
    w32 = np.ascontiguousarray(w64.astype(np.int32))
    xw = np.ascontiguousarray(float(x_offset) * w64.sum(axis=0))
    return w32, xw, pad_code


def dynamic_matmul(x: np.ndarray, x_offset: float, w_int: np.ndarray, transpose_in1: bool,
                   out_shape, transpose_in0: bool = False) -> np.ndarray | None:
    """The exact accumulator of a MatMul with a dynamic in1 (``w_int``: int8-range integers
    from htp_int8_operand, in1's layout); None when the C kernels are off, in0 is transposed
    or the batch layout is not the same on both sides (or in1 has none)."""
    if not _fast.enabled() or transpose_in0 or x.ndim < 2 or w_int.ndim < 2:
        return None
    t = CODE_TYPES.get(x.dtype)
    if t is None or not float(x_offset).is_integer():
        return None
    wb = w_int if not transpose_in1 else np.swapaxes(w_int, -1, -2)
    K, N = wb.shape[-2:]
    M = x.shape[-2]
    if x.shape[-1] != K or K > MAX_K:
        return None
    xb, wbb = x.shape[:-2], wb.shape[:-2]
    if math.prod(wbb) == 1:
        wlist = [wb.reshape(K, N)]
        xs = [np.ascontiguousarray(x).reshape(-1, K)]
        M = xs[0].shape[0]
    elif xb == wbb:
        wlist = list(wb.reshape(-1, K, N))
        xs = list(np.ascontiguousarray(x).reshape(-1, M, K))
    else:
        return None
    out = []
    lib, ffi = _fast.library()
    for xi, wi in zip(xs, wlist):
        b = _int8(wi)
        if b is None:
            return None
        packed, wsum = pack(b)
        q = QAcc("gemm", _geo(kind=0, type=t, m=xi.shape[0], k=K, n=N, lda=K, ldo=N), packed, wsum,
                 xi.shape, xi.dtype, x_offset, (xi.shape[0], N))
        acc = q(xi)
        if acc is None:
            return None
        out.append(acc)
    acc = np.stack(out) if len(out) > 1 else out[0]
    if acc.size != math.prod(out_shape):
        return None
    return acc.reshape(out_shape)


__all__ = ["QAcc", "prepare", "pack", "dynamic_matmul", "isa", "CODE_TYPES", "MAX_K"]
