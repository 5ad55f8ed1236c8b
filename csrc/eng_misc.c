/* Step kernels of the C execution engine (issue 13) for ops that ran as Python fallback steps:
 * Cast (QNN op definition "Cast") between plain integer, BOOL_8 and float types;
 * ElementWiseSelect; the BOOL_8 logic ops ElementWiseAnd / Or / Xor / Not; Argmax / Argmin;
 * the recurrent cells Lstm and Gru.  The lowering is qnnemu/core/engine/lower_misc.py; each
 * kernel reproduces the numpy code of its op (qnnemu/ops/cast.py, elementwise.py, reduce.py)
 * or, for Lstm / Gru, IS the op's fast path (qnnemu/ops/_fast_misc.py calls the same
 * functions), so the engine and the Python plan compute the same bytes. */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "eng_misc.h"
#include "engine.h"

#define MISC_MAX_RANK 8

/* -- element access ---------------------------------------------------------------------------- */
static inline int64_t load_i64(const void *p, int t, int64_t k)
{
    switch (t) {
    case QE_U8: case QE_BOOL: return ((const uint8_t *)p)[k];
    case QE_I8: return ((const int8_t *)p)[k];
    case QE_U16: return ((const uint16_t *)p)[k];
    case QE_I16: return ((const int16_t *)p)[k];
    case QE_U32: return ((const uint32_t *)p)[k];
    case QE_I32: return ((const int32_t *)p)[k];
    case QE_I64: return ((const int64_t *)p)[k];
    case QE_U64: return (int64_t)((const uint64_t *)p)[k];
    default: return 0;
    }
}

/* Stores the low bits of v (numpy's astype between integer types wraps). */
static inline int store_i64(void *p, int t, int64_t k, int64_t v)
{
    switch (t) {
    case QE_U8: case QE_BOOL: ((uint8_t *)p)[k] = (uint8_t)(uint64_t)v; return 0;
    case QE_I8: ((int8_t *)p)[k] = (int8_t)(uint8_t)(uint64_t)v; return 0;
    case QE_U16: ((uint16_t *)p)[k] = (uint16_t)(uint64_t)v; return 0;
    case QE_I16: ((int16_t *)p)[k] = (int16_t)(uint16_t)(uint64_t)v; return 0;
    case QE_U32: ((uint32_t *)p)[k] = (uint32_t)(uint64_t)v; return 0;
    case QE_I32: ((int32_t *)p)[k] = (int32_t)(uint32_t)(uint64_t)v; return 0;
    case QE_I64: ((int64_t *)p)[k] = v; return 0;
    case QE_U64: ((uint64_t *)p)[k] = (uint64_t)v; return 0;
    default: return 2;
    }
}

static inline int is_signed_int(int t)
{
    return t == QE_I8 || t == QE_I16 || t == QE_I32 || t == QE_I64;
}

static inline double load_float(const void *p, int t, int64_t k)
{
    return t == QE_F32 ? (double)((const float *)p)[k] : (double)((const _Float16 *)p)[k];
}

/* -- Cast ---------------------------------------------------------------------------------------
 * p: x, y; i: n, kind, from type, to type; d: (kind 3) lo, hi.
 * kind 0: integer -> integer, wrapping (numpy astype);
 * kind 1: integer -> float32 (one rounding, as numpy's astype);
 * kind 2: anything -> BOOL_8 / 0-1 integer: y = (x != 0) (NaN is != 0);
 * kind 3: float -> integer: trunc toward zero in float64, NaN -> 0, clipped to [lo, hi] (the
 *         float64 bounds ops/cast.py's _float_to_int uses; +-inf clip to them);
 * kind 4: integer -> integer clamped to [lo, hi] (d; may run in place). */
int qe_k_misc_cast(const qe_args *a)
{
    const void *x = a->p[0];
    void *y = a->p[1];
    int64_t n = a->i[0];
    int kind = (int)a->i[1], from = (int)a->i[2], to = (int)a->i[3];
    switch (kind) {
    case 0:
        for (int64_t k = 0; k < n; k++)
            if (store_i64(y, to, k, load_i64(x, from, k))) return 2;
        return 0;
    case 1:
        if (to != QE_F32) return 2;
        for (int64_t k = 0; k < n; k++) {
            float v;
            if (from == QE_U64) v = (float)((const uint64_t *)x)[k];
            else v = (float)load_i64(x, from, k);   /* int64 -> float: one rounding */
            ((float *)y)[k] = v;
        }
        return 0;
    case 2:
        for (int64_t k = 0; k < n; k++) {
            int nz;
            if (from == QE_F32 || from == QE_F16) nz = load_float(x, from, k) != 0.0;
            else nz = load_i64(x, from, k) != 0;
            if (store_i64(y, to, k, nz)) return 2;
        }
        return 0;
    case 3: {
        double lo = a->d[0], hi = a->d[1];
        for (int64_t k = 0; k < n; k++) {
            double v = load_float(x, from, k);
            v = v != v ? 0.0 : trunc(v);
            if (v < lo) v = lo;
            if (v > hi) v = hi;
            int64_t iv;
            if (to == QE_U64) {
                uint64_t u = (uint64_t)v;
                iv = (int64_t)u;
            } else {
                iv = (int64_t)v;
            }
            if (store_i64(y, to, k, iv)) return 2;
        }
        return 0;
    }
    case 4: {
        /* a plain integer through an op's fixed-point view and back (ops/base.py FixedView):
         * the value read as `from` (UINT_32 as INT_32), clamped to [lo, hi] (plain_range) */
        int64_t lo = (int64_t)a->d[0], hi = (int64_t)a->d[1];
        for (int64_t k = 0; k < n; k++) {
            int64_t v = load_i64(x, from, k);
            if (store_i64(y, to, k, v < lo ? lo : (v > hi ? hi : v))) return 2;
        }
        return 0;
    }
    default:
        return 2;
    }
    (void)is_signed_int;
}

/* -- broadcasting -------------------------------------------------------------------------------
 * An odometer over the output's (collapsed) dims; each operand has its own element strides
 * (0 along broadcast dims). */
typedef struct {
    int rank;
    int64_t dims[MISC_MAX_RANK];
    int64_t idx[MISC_MAX_RANK];
} odo;

static inline int odo_next(odo *o, const int64_t *const *strides, int64_t *pos, int nops)
{
    for (int d = o->rank - 2; d >= 0; d--) {
        if (++o->idx[d] < o->dims[d]) {
            for (int q = 0; q < nops; q++) pos[q] += strides[q][d];
            return 1;
        }
        o->idx[d] = 0;
        for (int q = 0; q < nops; q++) pos[q] -= strides[q][d] * (o->dims[d] - 1);
    }
    return 0;
}

/* ElementWiseAnd / Or / Xor (op 0 / 1 / 2) and Not (op 3, one operand) of BOOL_8 values: y = 0/1.
 * p: a, b (Not: a only), y; i: op, rank, dims[rank], sa[rank], sb[rank] (Not: no sb). */
int qe_k_misc_logic(const qe_args *a)
{
    int op = (int)a->i[0], rank = (int)a->i[1];
    if (rank < 1 || rank > MISC_MAX_RANK) return 2;
    const int64_t *dims = a->i + 2, *sa = dims + rank, *sb = sa + rank;
    const uint8_t *x = a->p[0];
    const uint8_t *z = op == 3 ? NULL : a->p[1];
    uint8_t *y = a->p[op == 3 ? 1 : 2];
    odo o = {.rank = rank};
    for (int d = 0; d < rank; d++) { o.dims[d] = dims[d]; o.idx[d] = 0; if (dims[d] == 0) return 0; }
    const int64_t *strides[2] = {sa, op == 3 ? sa : sb};
    int64_t pos[2] = {0, 0}, inner = dims[rank - 1], ia = sa[rank - 1], ib = op == 3 ? 0 : sb[rank - 1];
    int64_t out = 0;
    do {
        const uint8_t *pa = x + pos[0], *pb = z ? z + pos[1] : NULL;
        switch (op) {
        case 0: for (int64_t k = 0; k < inner; k++) y[out + k] = (pa[k * ia] != 0) & (pb[k * ib] != 0); break;
        case 1: for (int64_t k = 0; k < inner; k++) y[out + k] = (pa[k * ia] != 0) | (pb[k * ib] != 0); break;
        case 2: for (int64_t k = 0; k < inner; k++) y[out + k] = (pa[k * ia] != 0) ^ (pb[k * ib] != 0); break;
        case 3: for (int64_t k = 0; k < inner; k++) y[out + k] = pa[k * ia] == 0; break;
        default: return 2;
        }
        out += inner;
    } while (odo_next(&o, strides, pos, 2));
    return 0;
}

/* ElementWiseSelect: y = cond != 0 ? a : b, elements of `size` bytes copied.
 * p: cond (bytes), a, b, y; i: size, rank, dims[rank], sc[rank], sa[rank], sb[rank]. */
int qe_k_misc_select(const qe_args *a)
{
    int64_t size = a->i[0];
    int rank = (int)a->i[1];
    if (rank < 1 || rank > MISC_MAX_RANK) return 2;
    const int64_t *dims = a->i + 2, *sc = dims + rank, *sa = sc + rank, *sb = sa + rank;
    const uint8_t *c = a->p[0];
    const char *xa = a->p[1], *xb = a->p[2];
    char *y = a->p[3];
    odo o = {.rank = rank};
    for (int d = 0; d < rank; d++) { o.dims[d] = dims[d]; o.idx[d] = 0; if (dims[d] == 0) return 0; }
    const int64_t *strides[3] = {sc, sa, sb};
    int64_t pos[3] = {0, 0, 0}, inner = dims[rank - 1];
    int64_t ic = sc[rank - 1], ia = sa[rank - 1], ib = sb[rank - 1];
    char *out = y;
    do {
        const uint8_t *pc = c + pos[0];
        const char *pa = xa + pos[1] * size, *pb = xb + pos[2] * size;
        switch (size) {
        case 1:
            for (int64_t k = 0; k < inner; k++)
                out[k] = pc[k * ic] ? pa[k * ia] : pb[k * ib];
            break;
        case 2:
            for (int64_t k = 0; k < inner; k++)
                ((uint16_t *)out)[k] = pc[k * ic] ? ((const uint16_t *)pa)[k * ia] : ((const uint16_t *)pb)[k * ib];
            break;
        case 4:
            for (int64_t k = 0; k < inner; k++)
                ((uint32_t *)out)[k] = pc[k * ic] ? ((const uint32_t *)pa)[k * ia] : ((const uint32_t *)pb)[k * ib];
            break;
        case 8:
            for (int64_t k = 0; k < inner; k++)
                ((uint64_t *)out)[k] = pc[k * ic] ? ((const uint64_t *)pa)[k * ia] : ((const uint64_t *)pb)[k * ib];
            break;
        default:
            return 2;
        }
        out += inner * size;
    } while (odo_next(&o, strides, pos, 3));
    return 0;
}

/* -- Argmax / Argmin ----------------------------------------------------------------------------
 * numpy.argmax / argmin along one axis: the first extreme; for floats the first NaN wins.
 * p: x, y; i: min (0 max, 1 min), x type, y type, outer, len, inner. */
int qe_k_misc_arg(const qe_args *a)
{
    const void *x = a->p[0];
    void *y = a->p[1];
    int want_min = (int)a->i[0], t = (int)a->i[1], yt = (int)a->i[2];
    int64_t outer = a->i[3], len = a->i[4], inner = a->i[5];
    int is_float = t == QE_F32 || t == QE_F16;
    if (len < 1) return 2;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * len * inner + in, best = 0;
            if (is_float) {
                double bv = load_float(x, t, base);
                if (bv == bv) {
                    for (int64_t k = 1; k < len; k++) {
                        double v = load_float(x, t, base + k * inner);
                        if (v != v) { best = k; break; }
                        if (want_min ? v < bv : v > bv) { bv = v; best = k; }
                    }
                }
            } else if (t == QE_U64) {
                uint64_t bv = ((const uint64_t *)x)[base];
                for (int64_t k = 1; k < len; k++) {
                    uint64_t v = ((const uint64_t *)x)[base + k * inner];
                    if (want_min ? v < bv : v > bv) { bv = v; best = k; }
                }
            } else {
                int64_t bv = load_i64(x, t, base);
                for (int64_t k = 1; k < len; k++) {
                    int64_t v = load_i64(x, t, base + k * inner);
                    if (want_min ? v < bv : v > bv) { bv = v; best = k; }
                }
            }
            if (store_i64(y, yt, o * inner + in, best)) return 2;
        }
    }
    return 0;
}

/* -- CumulativeSum -----------------------------------------------------------------------------
 * ops/reduce.py: the running sum in float64 along the axis (numpy's cumsum: the first partial
 * sum is the first element itself, then one addition per element, in order; reverse walks the
 * axis backwards; exclusive shifts by one with 0 first), then float32 (one rounding) or, for
 * integers, clipped to [lo, hi] and truncated (_saturate).  NaN: the first NaN of the running
 * sum stays (as numpy's accumulate keeps the running sum's NaN operand).
 * p: x, y; i: x type, y type, outer, len, inner, exclusive, reverse; d: lo, hi (integers). */
int qe_k_misc_cumsum(const qe_args *a)
{
    const void *x = a->p[0];
    void *y = a->p[1];
    int xt = (int)a->i[0], yt = (int)a->i[1];
    int64_t outer = a->i[2], len = a->i[3], inner = a->i[4];
    int exclusive = (int)a->i[5], reverse = (int)a->i[6];
    double lo = a->nd > 0 ? a->d[0] : 0.0, hi = a->nd > 1 ? a->d[1] : 0.0;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            double acc = 0.0;
            for (int64_t s = 0; s < len; s++) {
                int64_t k = reverse ? len - 1 - s : s;
                int64_t pos = (o * len + k) * inner + in;
                double v = xt == QE_F32 ? (double)((const float *)x)[pos] : (double)load_i64(x, xt, pos);
                double before = acc;
                /* acc + v with numpy's NaN: the running sum's NaN when it has one, else v's
                 * (x86 keeps the first operand's NaN; the compiler may swap an addition's
                 * operands, so the choice is spelled out) */
                if (s == 0 || (v != v && acc == acc)) acc = v;
                else if (acc == acc) acc = acc + v;
                double r = exclusive ? (s == 0 ? 0.0 : before) : acc;
                if (yt == QE_F32) {
                    ((float *)y)[pos] = (float)r;
                } else {
                    r = r < lo ? lo : (r > hi ? hi : r);
                    if (store_i64(y, yt, pos, (int64_t)r)) return 2;
                }
            }
        }
    }
    return 0;
}

/* -- TopK ---------------------------------------------------------------------------------------
 * ops/reduce.py: the k elements of each last-axis row ranked by key descending (key = x, or -x
 * for largest = 0; integers widened first), NaN above everything, equal keys by the higher index
 * first (numpy's stable ascending argsort, reversed); values copied, indices stored.
 * p: x, values, indices, scratch (n int64 + n double); i: x type, rows, n, k, largest,
 * index type. */
typedef struct { const double *key; } topk_ctx;

static int topk_cmp(const void *pa, const void *pb, void *ctx)
{
    const double *key = ((const topk_ctx *)ctx)->key;
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    double ka = key[ia], kb = key[ib];
    int na = ka != ka, nb = kb != kb;
    if (na != nb) return na ? -1 : 1;                  /* NaN first */
    if (!na && ka != kb) return ka > kb ? -1 : 1;      /* larger key first */
    return ia > ib ? -1 : (ia < ib ? 1 : 0);           /* then the higher index */
}

int qe_k_misc_topk(const qe_args *a)
{
    const char *x = a->p[0];
    char *vals = a->p[1];
    void *idx = a->p[2];
    int64_t *order = a->p[3];
    double *key = (double *)(order + a->i[2]);
    int xt = (int)a->i[0], largest = (int)a->i[4], it = (int)a->i[5];
    int64_t rows = a->i[1], n = a->i[2], k = a->i[3];
    int64_t size = xt == QE_F16 || xt == QE_U16 || xt == QE_I16 ? 2 : xt == QE_U8 || xt == QE_I8 || xt == QE_BOOL ? 1
                 : xt == QE_I64 || xt == QE_U64 ? 8 : 4;
    int is_float = xt == QE_F32 || xt == QE_F16;
    if (k < 1 || k > n || xt == QE_U64) return 2;
    topk_ctx ctx = {key};
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < n; j++) {
            int64_t pos = r * n + j;
            double v;
            if (is_float) {
                v = load_float(x, xt, pos);
                if (!largest) v = -v;
            } else {
                int64_t iv = load_i64(x, xt, pos);
                v = largest ? (double)iv : -(double)iv;   /* |iv| < 2^53 for <= 32-bit types */
            }
            key[j] = v;
            order[j] = j;
        }
        qsort_r(order, (size_t)n, sizeof(int64_t), topk_cmp, &ctx);
        for (int64_t j = 0; j < k; j++) {
            memcpy(vals + (r * k + j) * size, x + (r * n + order[j]) * size, (size_t)size);
            if (store_i64(idx, it, r * k + j, order[j])) return 2;
        }
    }
    return 0;
}
