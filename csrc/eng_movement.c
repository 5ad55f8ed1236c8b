/* Step kernels of the data-movement family of qnnemu's C execution engine (issue 13; the
 * lowering that emits them is qnnemu/core/engine/lower_movement.py).
 *
 * QNN ops moving values without computing (QnnOpDef.h: Reshape, Transpose, Concat, Split,
 * StridedSlice, Pad, Tile, DepthToSpace, ...) are all expressed as strided copies of elements of
 * 1, 2, 4 or 8 bytes (qe_k_move), a constant fill (qe_k_fill) or a row gather through an index
 * table (qe_k_gather_rows): the lowering derives the strides from the Python op itself, so
 * this file knows no op.  Pooling (PoolMax2d / PoolAvg2d) calls kernels.c's qe_pool2d, the
 * function the Python op's fast path calls.  Float reductions (ReduceSum / ReduceMean /
 * ReduceMax / ReduceMin) run qe_reduce_f32, which the Python ops' fast path calls too (numpy's
 * pairwise float sums cannot be reproduced in C), so both paths share one summation order.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eng_movement.h"
#include "kernels.h"
#include "pool.h"

#define QE_MOVE_MAX_RANK 16

/* Copies one row of n elements of size es with element strides ss (source), ds (dest). */
static void move_row(char *dst, const char *src, int64_t n, int64_t ss, int64_t ds, int es)
{
    if (ss == 1 && ds == 1) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 1:
        for (int64_t j = 0; j < n; j++) dst[j * ds] = src[j * ss];
        break;
    case 2: {
        uint16_t *d = (uint16_t *)dst;
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t j = 0; j < n; j++) d[j * ds] = s[j * ss];
        break;
    }
    case 4: {
        uint32_t *d = (uint32_t *)dst;
        const uint32_t *s = (const uint32_t *)src;
        for (int64_t j = 0; j < n; j++) d[j * ds] = s[j * ss];
        break;
    }
    default: {
        uint64_t *d = (uint64_t *)dst;
        const uint64_t *s = (const uint64_t *)src;
        for (int64_t j = 0; j < n; j++) d[j * ds] = s[j * ss];
        break;
    }
    }
}

/* A 2-D block: dst[i * dn + j] = src[i + j * sm] for i < m, j < n, in 32 x 32 tiles (a
 * transpose reads and writes whole cache lines of both sides). */
#define TILE 32
#define TRANSPOSE_2D(T)                                                                     \
    do {                                                                                    \
        const T *s_ = (const T *)src;                                                       \
        T *d_ = (T *)dst;                                                                   \
        for (int64_t i0 = 0; i0 < m; i0 += TILE) {                                          \
            int64_t i1 = i0 + TILE < m ? i0 + TILE : m;                                     \
            for (int64_t j0 = 0; j0 < n; j0 += TILE) {                                      \
                int64_t j1 = j0 + TILE < n ? j0 + TILE : n;                                 \
                for (int64_t i = i0; i < i1; i++)                                           \
                    for (int64_t j = j0; j < j1; j++) d_[i * dn + j] = s_[i + j * sm];      \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* AVX2 is used unless QNNEMU_KERNELS_ISA caps the kernels at SSE. */
static int avx2_usable(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        ok = !(force && strcmp(force, "sse") == 0) && __builtin_cpu_supports("avx2");
    }
    return ok;
}

/* 4-byte elements with AVX2: 8 x 8 blocks transposed in registers (8 row loads, 24 shuffles,
 * 8 row stores) inside the 32 x 32 tiles; the edges one element at a time. */
__attribute__((target("avx2"))) static void transpose_2d_4_avx2(char *dst, const char *src,
                                                                 int64_t m, int64_t n, int64_t dn,
                                                                 int64_t sm)
{
    const float *s_ = (const float *)src;
    float *d_ = (float *)dst;
    for (int64_t i0 = 0; i0 < m; i0 += TILE) {
        int64_t i1 = i0 + TILE < m ? i0 + TILE : m;
        for (int64_t j0 = 0; j0 < n; j0 += TILE) {
            int64_t j1 = j0 + TILE < n ? j0 + TILE : n;
            int64_t ib = i0 + (i1 - i0) / 8 * 8, jb = j0 + (j1 - j0) / 8 * 8;
            for (int64_t i = i0; i < ib; i += 8)
                for (int64_t j = j0; j < jb; j += 8) {
                    const float *s = s_ + i + j * sm;
                    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + sm);
                    __m256 r2 = _mm256_loadu_ps(s + 2 * sm), r3 = _mm256_loadu_ps(s + 3 * sm);
                    __m256 r4 = _mm256_loadu_ps(s + 4 * sm), r5 = _mm256_loadu_ps(s + 5 * sm);
                    __m256 r6 = _mm256_loadu_ps(s + 6 * sm), r7 = _mm256_loadu_ps(s + 7 * sm);
                    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
                    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
                    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
                    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
                    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
                    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
                    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
                    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
                    float *d = d_ + i * dn + j;
                    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
                    _mm256_storeu_ps(d + dn, _mm256_permute2f128_ps(u1, u5, 0x20));
                    _mm256_storeu_ps(d + 2 * dn, _mm256_permute2f128_ps(u2, u6, 0x20));
                    _mm256_storeu_ps(d + 3 * dn, _mm256_permute2f128_ps(u3, u7, 0x20));
                    _mm256_storeu_ps(d + 4 * dn, _mm256_permute2f128_ps(u0, u4, 0x31));
                    _mm256_storeu_ps(d + 5 * dn, _mm256_permute2f128_ps(u1, u5, 0x31));
                    _mm256_storeu_ps(d + 6 * dn, _mm256_permute2f128_ps(u2, u6, 0x31));
                    _mm256_storeu_ps(d + 7 * dn, _mm256_permute2f128_ps(u3, u7, 0x31));
                }
            /* the edges: rows past ib (all columns), columns past jb (rows up to ib) */
            for (int64_t i = ib; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) d_[i * dn + j] = s_[i + j * sm];
            for (int64_t i = i0; i < ib; i++)
                for (int64_t j = jb; j < j1; j++) d_[i * dn + j] = s_[i + j * sm];
        }
    }
}

static void transpose_2d(char *dst, const char *src, int64_t m, int64_t n, int64_t dn, int64_t sm,
                         int es)
{
    if (es == 4 && m >= 8 && n >= 8 && avx2_usable()) {
        transpose_2d_4_avx2(dst, src, m, n, dn, sm);
        return;
    }
    switch (es) {
    case 1: TRANSPOSE_2D(uint8_t); break;
    case 2: TRANSPOSE_2D(uint16_t); break;
    case 4: TRANSPOSE_2D(uint32_t); break;
    default: TRANSPOSE_2D(uint64_t); break;
    }
}

/* The copy of a view whose innermost destination dimension (stride 1) reads the source with a
 * stride while another dimension k reads it contiguously: tiles over (k, last). */
static int move_transposed(char *dst, const char *src, int r, int k, const int64_t *shape,
                           const int64_t *ss, const int64_t *ds, int es)
{
    int64_t idx[QE_MOVE_MAX_RANK] = {0};
    int64_t blocks = 1;
    for (int j = 0; j < r - 1; j++)
        if (j != k) blocks *= shape[j];
    int64_t so = 0, dof = 0;
    for (int64_t b = 0; b < blocks; b++) {
        transpose_2d(dst + dof * es, src + so * es, shape[k], shape[r - 1], ds[k], ss[r - 1], es);
        for (int j = r - 2; j >= 0; j--) {
            if (j == k) continue;
            so += ss[j]; dof += ds[j];
            if (++idx[j] < shape[j]) break;
            so -= ss[j] * shape[j]; dof -= ds[j] * shape[j];
            idx[j] = 0;
        }
    }
    return 0;
}

#define SHORT_ROWS(B)                                                                       \
    for (int64_t i = 0; i < rows; i++) memcpy(dst + i * dstep, src + i * sstep, B);         \
    return

/* rows x ``bytes`` (at most 256) from src (rows sstep bytes apart) to dst (dstep apart). */
static void short_rows(char *dst, const char *src, int64_t rows, int64_t bytes, int64_t sstep,
                       int64_t dstep)
{
    switch (bytes) {
    case 16: SHORT_ROWS(16);
    case 32: SHORT_ROWS(32);
    case 64: SHORT_ROWS(64);
    case 128: SHORT_ROWS(128);
    case 256: SHORT_ROWS(256);
    default: break;
    }
    for (int64_t i = 0; i < rows; i++) {
        char *d = dst + i * dstep;
        const char *s = src + i * sstep;
        int64_t b = 0;
        for (; b + 32 <= bytes; b += 32) memcpy(d + b, s + b, 32);
        for (; b + 8 <= bytes; b += 8) memcpy(d + b, s + b, 8);
        for (; b < bytes; b++) d[b] = s[b];
    }
}

/* Planes interleaved: dst[p * n + c] = src[p + c * plane] for p < rows, c < n (2..4) of 4-byte
 * elements: an NCHW image's NHWC transpose (a network's input, 3 channels), where the 8x8
 * transposes leave most of each tile unused (224x224x3: 71 -> 30 us). */
#define INTERLEAVE_BODY(N)                                                               \
    for (int64_t p = 0; p < rows; p++)                                                   \
        for (int c = 0; c < (N); c++) d[p * ds0 + c] = s[p + c * plane];
static void interleave_planes(uint32_t *restrict d, const uint32_t *restrict s, int64_t rows,
                              int n, int64_t plane, int64_t ds0)
{
    switch (n) {
    case 2: INTERLEAVE_BODY(2) break;
    case 3: INTERLEAVE_BODY(3) break;
    default: INTERLEAVE_BODY(4) break;
    }
}

/* The copy of one box: shape[r], element strides ss (source) / ds (destination). */
static void move_box(char *dst, const char *src, int r, const int64_t *shape, const int64_t *ss,
                     const int64_t *ds, int es)
{
    int64_t rows = 1;
    for (int k = 0; k < r - 1; k++) {
        if (shape[k] <= 0) return;
        rows *= shape[k];
    }
    int64_t n = shape[r - 1];
    if (n <= 0) return;
    if (r == 2 && es == 4 && ds[1] == 1 && ss[0] == 1 && n >= 2 && n <= 4 && ds[0] >= n) {
        interleave_planes((uint32_t *)dst, (const uint32_t *)src, shape[0], (int)n, ss[1], ds[0]);
        return;
    }
    if (r >= 2 && ds[r - 1] == 1 && ss[r - 1] != 1 && n >= 2)
        for (int k = r - 2; k >= 0; k--)
            if (ss[k] == 1 && shape[k] >= 8) {
                move_transposed(dst, src, r, k, shape, ss, ds, es);
                return;
            }
    if (r == 2 && ss[1] == 1 && ds[1] == 1 && n * es <= 256) {
        /* short contiguous rows (a channel Concat in NHWC): copies of a constant size,
         * inlined, instead of a memcpy call per row */
        short_rows(dst, src, shape[0], n * es, ss[0] * es, ds[0] * es);
        return;
    }
    int64_t idx[QE_MOVE_MAX_RANK] = {0};
    int64_t so = 0, dof = 0;
    for (int64_t row = 0; row < rows; row++) {
        move_row(dst + dof * es, src + so * es, n, ss[r - 1], ds[r - 1], es);
        /* next row: an odometer over the outer dimensions */
        for (int k = r - 2; k >= 0; k--) {
            so += ss[k]; dof += ds[k];
            if (++idx[k] < shape[k]) break;
            so -= ss[k] * shape[k]; dof -= ds[k] * shape[k];
            idx[k] = 0;
        }
    }
}

/* Bytes a copy moves before it is split over the pool's threads.  The workers spin between ops,
 * so a split costs a few microseconds, but the pieces of a small copy read what the other core
 * just wrote: through the EP on the quiet machine, shufflenet_v2 float (72 transposes, slices
 * and Concats) took 3.4-3.5 ms splitting from 32 KiB and 2.7-2.8 from 256 KiB, squeezenet1_1
 * the same either way (3.15-3.28). */
#define MOVE_SPLIT_BYTES (256 << 10)

/* Threads for a pass moving ``bytes`` (bytes / MOVE_SPLIT_BYTES, at most the call's share of
 * the pool and 64). */
static int move_threads(int64_t bytes)
{
    static int64_t split = -1;
    if (split < 0) {
        const char *e = getenv("QNNEMU_MOVE_SPLIT_BYTES");   /* tuning only */
        split = e && atoll(e) > 0 ? atoll(e) : MOVE_SPLIT_BYTES;
    }
    int t = qe_threads();
    int c = qe_call_threads();
    if (c > 0 && c < t) t = c;
    int64_t want = bytes / split;
    if (want < t) t = (int)want;
    if (t > 64) t = 64;
    return t < 1 ? 1 : t;
}

/* One piece of a split copy: the box with dimension ``axis`` cut to [lo, hi). */
typedef struct {
    char *dst;
    const char *src;
    const int64_t *shape, *ss, *ds;
    int r, es, axis;
    int64_t lo, hi;
} move_job;

static void move_job_run(void *p)
{
    const move_job *j = p;
    if (j->hi <= j->lo) return;
    int64_t shape[QE_MOVE_MAX_RANK];
    memcpy(shape, j->shape, (size_t)j->r * sizeof shape[0]);
    shape[j->axis] = j->hi - j->lo;
    move_box(j->dst + j->lo * j->ds[j->axis] * j->es, j->src + j->lo * j->ss[j->axis] * j->es,
             j->r, shape, j->ss, j->ds, j->es);
}

/* The copy of a box over up to move_threads() threads: the pieces are sub-boxes along its
 * longest outer dimension (the innermost when it is the only long one; 64-byte multiples),
 * each element copied once, so the result does not depend on the split. */
static void move_split(char *dst, const char *src, int r, const int64_t *shape,
                       const int64_t *ss, const int64_t *ds, int es)
{
    int64_t total = 1;
    for (int k = 0; k < r; k++) total *= shape[k] > 0 ? shape[k] : 0;
    /* a copy of contiguous rows splits from MOVE_SPLIT_BYTES; a gather (a transpose, a channel
     * shuffle: the source's innermost axis strided, each cache line read in pieces) from 8x that */
    int rows = ss[r - 1] == 1 && ds[r - 1] == 1;
    int T = total > 0 ? move_threads(rows ? total * es : total * es / 8) : 1;
    for (int k = 0; k < r; k++)
        if (shape[k] > 1 && ds[k] == 0) T = 1;   /* an element written twice: one order */
    /* an outer axis only where each of its steps writes at least 256 bytes further on: cutting
     * an axis of small destination stride (the inner axes of a transpose, a channel shuffle)
     * makes the threads write the same cache lines (shufflenet_v2 float: 2.8 -> 3.7 ms) */
    int axis = -1;
    for (int k = 0; k < r - 1; k++) {
        int64_t step = (ds[k] < 0 ? -ds[k] : ds[k]) * es;
        if (shape[k] >= 2 * T && step >= 256 && (axis < 0 || shape[k] > shape[axis])) axis = k;
    }
    int64_t granule = 1;
    if (axis < 0) {
        if (ds[r - 1] != 1) {            /* a strided innermost axis: one thread */
            move_box(dst, src, r, shape, ss, ds, es);
            return;
        }
        axis = r - 1;
        granule = 64 / es;
    }
    if (T < 2 || shape[axis] < 2 * granule) {
        move_box(dst, src, r, shape, ss, ds, es);
        return;
    }
    move_job jobs[64];
    int64_t per = ((shape[axis] + T - 1) / T + granule - 1) / granule * granule;
    int cnt = 0;
    for (int64_t lo = 0; lo < shape[axis] && cnt < 64; lo += per)
        jobs[cnt++] = (move_job){dst, src, shape, ss, ds, r, es, axis, lo,
                                 lo + per < shape[axis] ? lo + per : shape[axis]};
    qe_pool_run(move_job_run, jobs, sizeof jobs[0], cnt);
}

/* p: src, dst.  i: element size, rank r, source offset, destination offset (elements), then
 * shape[r], source strides[r], destination strides[r] (elements; any sign, 0 repeats). */
int qe_k_move(const qe_args *a)
{
    int es = (int)a->i[0], r = (int)a->i[1];
    if (r < 1 || r > QE_MOVE_MAX_RANK || a->ni != 4 + 3 * r) return 1;
    if (es != 1 && es != 2 && es != 4 && es != 8) return 2;
    const int64_t *shape = a->i + 4, *ss = shape + r, *ds = ss + r;
    const char *src = (const char *)a->p[0] + a->i[2] * es;
    char *dst = (char *)a->p[1] + a->i[3] * es;
    move_split(dst, src, r, shape, ss, ds, es);
    return 0;
}

/* p: dst, one element holding the value.  i: element count, element size. */
int qe_k_fill(const qe_args *a)
{
    int64_t n = a->i[0];
    int es = (int)a->i[1];
    char *dst = (char *)a->p[0];
    const char *v = (const char *)a->p[1];
    if (n <= 0) return 0;
    memcpy(dst, v, (size_t)es);
    int64_t done = 1;   /* doubling copies */
    while (done < n) {
        int64_t m = done < n - done ? done : n - done;
        memcpy(dst + done * es, dst, (size_t)(m * es));
        done += m;
    }
    return 0;
}

/* out[o, j, :] = src[o, index[j], :]: p: src, dst, index table (int64, values in [0, dim)),
 * and optionally a fill element: a negative index then fills its row with that element.
 * i: element size, outer, index count, dim (the source's size along the gathered axis),
 * inner (elements per row). */
int qe_k_gather_rows(const qe_args *a)
{
    int es = (int)a->i[0];
    int64_t outer = a->i[1], m = a->i[2], dim = a->i[3], inner = a->i[4];
    const char *src = (const char *)a->p[0];
    char *dst = (char *)a->p[1];
    const int64_t *index = (const int64_t *)a->p[2];
    size_t row = (size_t)(inner * es);
    if (a->np > 3) {
        const char *fill = (const char *)a->p[3];
        for (int64_t o = 0; o < outer; o++) {
            const char *base = src + (size_t)o * dim * row;
            char *out = dst + (size_t)o * m * row;
            for (int64_t j = 0; j < m; j++) {
                char *r = out + (size_t)j * row;
                if (index[j] >= 0) {
                    memcpy(r, base + (size_t)index[j] * row, row);
                } else {
                    for (int64_t e = 0; e < inner; e++) memcpy(r + e * es, fill, (size_t)es);
                }
            }
        }
        return 0;
    }
    for (int64_t o = 0; o < outer; o++) {
        const char *base = src + (size_t)o * dim * row;
        char *out = dst + (size_t)o * m * row;
        if (row == (size_t)es) {
            switch (es) {
            case 1:
                for (int64_t j = 0; j < m; j++) out[j] = base[index[j]];
                break;
            case 2:
                for (int64_t j = 0; j < m; j++)
                    ((uint16_t *)out)[j] = ((const uint16_t *)base)[index[j]];
                break;
            case 4:
                for (int64_t j = 0; j < m; j++)
                    ((uint32_t *)out)[j] = ((const uint32_t *)base)[index[j]];
                break;
            default:
                for (int64_t j = 0; j < m; j++)
                    ((uint64_t *)out)[j] = ((const uint64_t *)base)[index[j]];
                break;
            }
            continue;
        }
        for (int64_t j = 0; j < m; j++)
            memcpy(out + (size_t)j * row, base + (size_t)index[j] * row, row);
    }
    return 0;
}

/* Index i of a dynamic index tensor of type code t (QE_I32, QE_U32, QE_I64). */
static inline int64_t dyn_index(const void *ind, int t, int64_t i)
{
    if (t == QE_I32) return ((const int32_t *)ind)[i];
    if (t == QE_U32) return ((const uint32_t *)ind)[i];
    return ((const int64_t *)ind)[i];
}

/* Gather with dynamic indices (QNN op Gather; a token embedding's lookup): out[o, j, :] =
 * src[o, index[j], :].  Indices are checked before anything is written: any outside [0, dim)
 * -- a negative one, which the op wraps with a warning, or one beyond, which fails the execute
 * -- returns QE_RC_PYTHON and the node runs its Python step, which warns or fails as the op
 * does (a C step has no warning channel).  p: src, dst, index; i: element size, outer, index
 * count, dim, inner (elements per row), index type (QE_I32, QE_U32 or QE_I64). */
int qe_k_gather_dyn(const qe_args *a)
{
    if (a->np != 3 || a->ni != 6) return 1;
    int es = (int)a->i[0], t = (int)a->i[5];
    int64_t outer = a->i[1], m = a->i[2], dim = a->i[3], inner = a->i[4];
    const char *src = (const char *)a->p[0];
    char *dst = (char *)a->p[1];
    const void *ind = a->p[2];
    for (int64_t j = 0; j < m; j++) {
        int64_t v = dyn_index(ind, t, j);
        if (v < 0 || v >= dim) return QE_RC_PYTHON;
    }
    size_t row = (size_t)(inner * es);
    for (int64_t o = 0; o < outer; o++) {
        const char *base = src + (size_t)o * dim * row;
        char *out = dst + (size_t)o * m * row;
        for (int64_t j = 0; j < m; j++)
            memcpy(out + (size_t)j * row, base + (size_t)dyn_index(ind, t, j) * row, row);
    }
    return 0;
}

/* GatherNd (QNN op GatherNd): out[b, j, :] = x[b, t, :] for index tuple t = index[b, j, 0:k] of
 * the k dimensions after the batch_dims ones.  As qe_k_gather_dyn: every tuple is checked first,
 * and any index outside [0, dim) (the op wraps a negative one with a warning, fails beyond)
 * returns QE_RC_PYTHON.  p: x, out, index; i: element size, batches, tuples per batch, k,
 * inner (elements per row), index type (QE_I32, QE_U32, QE_I64), then the k dimensions. */
int qe_k_gather_nd(const qe_args *a)
{
    if (a->np != 3 || a->ni < 6 || a->ni != 6 + a->i[3] || a->i[3] < 1) return 1;
    int es = (int)a->i[0], t = (int)a->i[5];
    int64_t nb = a->i[1], m = a->i[2], k = a->i[3], inner = a->i[4];
    const int64_t *dims = a->i + 6;
    const char *src = (const char *)a->p[0];
    char *dst = (char *)a->p[1];
    const void *ind = a->p[2];
    int64_t rows = 1;
    for (int64_t d = 0; d < k; d++) rows *= dims[d];
    for (int64_t e = 0; e < nb * m * k; e++) {
        int64_t v = dyn_index(ind, t, e);
        if (v < 0 || v >= dims[e % k]) return QE_RC_PYTHON;
    }
    size_t row = (size_t)(inner * es);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < m; j++) {
            int64_t lin = 0, at = (b * m + j) * k;
            for (int64_t d = 0; d < k; d++) lin = lin * dims[d] + dyn_index(ind, t, at + d);
            memcpy(dst + (size_t)(b * m + j) * row, src + (size_t)(b * rows + lin) * row, row);
        }
    return 0;
}

/* ScatterNd without reduction (QNN op ScatterNd, reduction NONE): out = x, then row lin(t) of out
 * = updates row j for each index tuple t = index[j, 0:k] in order (a repeated tuple: the last
 * one's row).  Every tuple is checked first: any outside the data's dimensions (the op skips
 * those updates with a warning) returns QE_RC_PYTHON.  p: x, updates, out, index; i: element
 * size, rows (the product of the k dimensions), inner (elements per row), tuples, k, index
 * type (QE_I32, QE_U32, QE_I64), then the k dimensions. */
int qe_k_scatter_nd(const qe_args *a)
{
    if (a->np != 4 || a->ni < 6 || a->ni != 6 + a->i[4] || a->i[4] < 1) return 1;
    int es = (int)a->i[0], t = (int)a->i[5];
    int64_t rows = a->i[1], inner = a->i[2], m = a->i[3], k = a->i[4];
    const int64_t *dims = a->i + 6;
    const char *x = (const char *)a->p[0], *upd = (const char *)a->p[1];
    char *out = (char *)a->p[2];
    const void *ind = a->p[3];
    for (int64_t e = 0; e < m * k; e++) {
        int64_t v = dyn_index(ind, t, e);
        if (v < 0 || v >= dims[e % k]) return QE_RC_PYTHON;
    }
    size_t row = (size_t)(inner * es);
    if (out != x) memcpy(out, x, (size_t)rows * row);
    for (int64_t j = 0; j < m; j++) {
        int64_t lin = 0;
        for (int64_t d = 0; d < k; d++) lin = lin * dims[d] + dyn_index(ind, t, j * k + d);
        memcpy(out + (size_t)lin * row, upd + (size_t)j * row, row);
    }
    return 0;
}

/* GatherElements / ScatterElements without reduction (QNN ops): for each position p of the
 * index tensor, in row-major order, the data element at p with its axis coordinate replaced by
 * index[p] is read into out[p] (mode 0), or (mode 1: out = x first) written with updates[p] (a
 * repeated target: the last one's value).  The indices are checked first: any outside
 * [0, dims[axis]) (the ops read 0 / skip the update there, with a warning) returns
 * QE_RC_PYTHON.  p: x, out, index[, updates]; i: mode, element size, rank (<= 8), axis, index
 * type (QE_I32, QE_U32, QE_I64), the index dimensions, the data dimensions. */
int qe_k_elements(const qe_args *a)
{
    if (a->ni < 5) return 1;
    int mode = (int)a->i[0], es = (int)a->i[1], r = (int)a->i[2], axis = (int)a->i[3], t = (int)a->i[4];
    if (r < 1 || r > 8 || axis < 0 || axis >= r || a->ni != 5 + 2 * r || a->np != (mode ? 4 : 3)) return 1;
    const int64_t *idims = a->i + 5, *xdims = idims + r;
    const char *x = (const char *)a->p[0];
    char *out = (char *)a->p[1];
    const void *ind = a->p[2];
    const char *upd = mode ? (const char *)a->p[3] : NULL;
    int64_t n = 1, xn = 1, stride[8];
    for (int d = r - 1; d >= 0; d--) {
        stride[d] = xn;
        xn *= xdims[d];
        n *= idims[d];
    }
    for (int64_t e = 0; e < n; e++) {
        int64_t v = dyn_index(ind, t, e);
        if (v < 0 || v >= xdims[axis]) return QE_RC_PYTHON;
    }
    if (mode && out != x) memcpy(out, x, (size_t)(xn * es));
    int64_t c[8] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int d = 0; d < r; d++) off += (d == axis ? dyn_index(ind, t, e) : c[d]) * stride[d];
        if (mode) memcpy(out + (size_t)off * es, upd + (size_t)e * es, (size_t)es);
        else memcpy(out + (size_t)e * es, x + (size_t)off * es, (size_t)es);
        for (int d = r - 1; d >= 0; d--) {   /* the next position: an odometer */
            if (++c[d] < idims[d]) break;
            c[d] = 0;
        }
    }
    return 0;
}

/* p: x, y (float32 NHWC).  i: the 16 integer arguments of qe_pool2d after ``kind``'s
 * position: kind, n, h, w, c, fh, fw, oh, ow, sh, sw, pt, pb, pl, pr, count_pad. */
int qe_k_pool2d(const qe_args *a)
{
    const int64_t *v = a->i;
    if (a->ni != 16) return 1;
    return qe_pool2d((int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], (int)v[5],
                     (int)v[6], (int)v[7], (int)v[8], (int)v[9], (int)v[10], (int)v[11],
                     (int)v[12], (int)v[13], (int)v[14], (int)v[15], (const float *)a->p[0],
                     (float *)a->p[1]);
}

/* -- float32 pooling in registers ------------------------------------------------------------- */
/* qe_pool2d's (kernels.c) max and global-average pooling, computed the same way value for value
 * (the op's fast path calls qe_pool2d: the two must agree bit for bit), but 16 channels per
 * AVX-512 register and split over the pool's threads:
 * - max: a window whose cells are not all inside the input starts from 0 (the HTP's zero
 *   padding), else from its first cell; then, cell by cell in row order,
 *   out = in > out ? in : out, which is what MAXPS(in, out) computes (NaN and equal operands
 *   give the second), so NaNs and signed zeros land as in qe_pool2d;
 * - global average (one window covering the whole input, no padding): per channel the float64
 *   sum from 0.0 of the cells in row order, times 1.0 / (h * w) in float64, rounded once; the
 *   same value unless it is a NaN, whose sign the compiler's operand order decides: then
 *   qe_pool2d computes the step. */
typedef struct {
    int64_t h, w, c, fh, fw, oh, ow, sh, sw, pt, pl, p0, p1;
    const float *x;
    float *y;
} pool_job;

static int avx512_usable(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        int capped = qe_isa_avx512_capped();
        ok = !capped && __builtin_cpu_supports("avx512f");
    }
    return ok;
}

/* Output pixels [p0, p1) of max pooling. */
__attribute__((target("avx512f"))) static void maxpool_f32_run(void *arg)
{
    const pool_job *j = arg;
    const int64_t h = j->h, w = j->w, c = j->c, fh = j->fh, fw = j->fw;
    for (int64_t p = j->p0; p < j->p1; p++) {
        int64_t b = p / (j->oh * j->ow), rem = p % (j->oh * j->ow);
        int64_t y0 = rem / j->ow * j->sh - j->pt, x0 = rem % j->ow * j->sw - j->pl;
        int64_t iy0 = y0 < 0 ? 0 : y0, iy1 = y0 + fh > h ? h : y0 + fh;
        int64_t ix0 = x0 < 0 ? 0 : x0, ix1 = x0 + fw > w ? w : x0 + fw;
        int64_t inside = (iy1 > iy0 ? iy1 - iy0 : 0) * (ix1 > ix0 ? ix1 - ix0 : 0);
        const float *xb = j->x + b * h * w * c;
        float *out = j->y + p * c;
        for (int64_t c0 = 0; c0 < c; c0 += 16) {
            int64_t k = c - c0 < 16 ? c - c0 : 16;
            __mmask16 m = k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
            __m512 acc = _mm512_setzero_ps();
            int first = inside == fh * fw;
            for (int64_t iy = iy0; iy < iy1; iy++)
                for (int64_t ix = ix0; ix < ix1; ix++) {
                    __m512 v = _mm512_maskz_loadu_ps(m, xb + (iy * w + ix) * c + c0);
                    acc = first ? v : _mm512_max_ps(v, acc);
                    first = 0;
                }
            _mm512_mask_storeu_ps(out + c0, m, acc);
        }
    }
}

/* Channels [p0, p1) (multiples of 16 but the last) of a global average pool. */
__attribute__((target("avx512f"))) static void avgpool_global_f32_run(void *arg)
{
    const pool_job *j = arg;
    const int64_t cells = j->h * j->w, c = j->c;
    const double inv = 1.0 / (double)cells;
    for (int64_t b = 0; b < j->fh; b++) {     /* (fh carries the batch here) */
        const float *xb = j->x + b * cells * c;
        float *out = j->y + b * c;
        for (int64_t c0 = j->p0; c0 < j->p1; c0 += 16) {
            int64_t k = j->p1 - c0 < 16 ? j->p1 - c0 : 16;
            __mmask16 m = k == 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1);
            __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
            for (int64_t q = 0; q < cells; q++) {
                __m512 v = _mm512_maskz_loadu_ps(m, xb + q * c + c0);
                lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), lo);
                hi = _mm512_add_pd(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), hi);
            }
            __m512d s = _mm512_set1_pd(inv);
            __m256 rlo = _mm512_cvtpd_ps(_mm512_mul_pd(lo, s)), rhi = _mm512_cvtpd_ps(_mm512_mul_pd(hi, s));
            __m512 r = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(rlo)),
                                                           _mm256_castps_pd(rhi), 1));
            _mm512_mask_storeu_ps(out + c0, m, r);
        }
    }
}

/* jobs over [0, n) in up to T contiguous pieces of a multiple of ``granule``. */
static void pool_split(void (*fn)(void *), pool_job base, int64_t n, int T, int64_t granule)
{
    pool_job jobs[64];
    if (T > 64) T = 64;
    int64_t per = ((n + T - 1) / T + granule - 1) / granule * granule;
    if (per < granule) per = granule;
    int cnt = 0;
    for (int64_t lo = 0; lo < n && cnt < 64; lo += per) {
        jobs[cnt] = base;
        jobs[cnt].p0 = lo;
        jobs[cnt].p1 = lo + per < n ? lo + per : n;
        cnt++;
    }
    if (cnt == 1) fn(&jobs[0]);
    else qe_pool_run(fn, jobs, sizeof jobs[0], cnt);
}

/* PoolMax2d on float32 NHWC.  p: x, y.  i: n, h, w, c, fh, fw, oh, ow, sh, sw, pt, pl.  Without
 * AVX-512: kernels.c's qe_pool2d. */
int qe_k_maxpool_f32(const qe_args *a)
{
    if (a->ni != 12 || a->np != 2) return 1;
    const int64_t *I = a->i;
    int64_t n = I[0], h = I[1], w = I[2], c = I[3], fh = I[4], fw = I[5], oh = I[6], ow = I[7];
    if (!avx512_usable())   /* (pb / pr only change average pooling's counts) */
        return qe_pool2d(0, (int)n, (int)h, (int)w, (int)c, (int)fh, (int)fw, (int)oh, (int)ow,
                         (int)I[8], (int)I[9], (int)I[10], 0, (int)I[11], 0, 0,
                         (const float *)a->p[0], (float *)a->p[1]);
    pool_job base = {h, w, c, fh, fw, oh, ow, I[8], I[9], I[10], I[11], 0, 0,
                     (const float *)a->p[0], (float *)a->p[1]};
    int64_t items = n * oh * ow;
    pool_split(maxpool_f32_run, base, items, move_threads(items * fh * fw * c), 1);
    return 0;
}

/* PoolAvg2d on float32 NHWC whose one window covers the whole input (no padding).  p: x, y.
 * i: n, h, w, c.  Without AVX-512: kernels.c's qe_pool2d. */
int qe_k_avgpool_global_f32(const qe_args *a)
{
    if (a->ni != 4 || a->np != 2) return 1;
    int64_t n = a->i[0], h = a->i[1], w = a->i[2], c = a->i[3];
    if (!avx512_usable())
        return qe_pool2d(1, (int)n, (int)h, (int)w, (int)c, (int)h, (int)w, 1, 1, (int)h, (int)w,
                         0, 0, 0, 0, 0, (const float *)a->p[0], (float *)a->p[1]);
    pool_job base = {h, w, c, n, 0, 1, 1, 0, 0, 0, 0, 0, 0, (const float *)a->p[0], (float *)a->p[1]};
    pool_split(avgpool_global_f32_run, base, c, move_threads(n * h * w * c * 4), 16);
    /* A NaN sum's sign and payload depend on which operand of each add the compiler put first
     * (additions commute for it): a NaN output is recomputed by qe_pool2d itself. */
    const float *y = (const float *)a->p[1];
    for (int64_t q = 0; q < n * c; q++)
        if (isnan(y[q]))
            return qe_pool2d(1, (int)n, (int)h, (int)w, (int)c, (int)h, (int)w, 1, 1, (int)h,
                             (int)w, 0, 0, 0, 0, 0, (const float *)a->p[0], (float *)a->p[1]);
    return 0;
}

enum { QE_RED_SUM = 0, QE_RED_MEAN = 1, QE_RED_MAX = 2, QE_RED_MIN = 3 };

/* The float32 reduction of x viewed as [outer, red, inner] over its middle axis into y
 * [outer, inner]; acc: ``inner`` doubles of scratch.  Sum and mean add the float64 values of
 * x in index order (then mean divides by red in float64) and round once to float32; max / min
 * keep the first NaN met (as numpy's scalar loop: in1 >= in2 || isnan(in1) ? in1 : in2). */
int qe_reduce_f32(int kind, const float *x, float *y, double *acc, int64_t outer, int64_t red,
                  int64_t inner)
{
    if (red < 1) return 1;
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * red * inner;
        float *yo = y + o * inner;
        if (inner == 1) {    /* one contiguous run: the same order, without the row loop */
            if (kind == QE_RED_SUM || kind == QE_RED_MEAN) {
                double t = (double)xo[0];
                for (int64_t r = 1; r < red; r++) t += (double)xo[r];
                yo[0] = kind == QE_RED_MEAN ? (float)(t / (double)red) : (float)t;
            } else if (kind == QE_RED_MAX || kind == QE_RED_MIN) {
                float m = xo[0];
                for (int64_t r = 1; r < red; r++) {
                    float v = xo[r];
                    if (kind == QE_RED_MAX) m = (m >= v || isnan(m)) ? m : v;
                    else m = (m <= v || isnan(m)) ? m : v;
                }
                yo[0] = m;
            } else {
                return 2;
            }
            continue;
        }
        if (kind == QE_RED_SUM || kind == QE_RED_MEAN) {
            for (int64_t i = 0; i < inner; i++) acc[i] = (double)xo[i];
            for (int64_t r = 1; r < red; r++) {
                const float *row = xo + r * inner;
                for (int64_t i = 0; i < inner; i++) acc[i] += (double)row[i];
            }
            if (kind == QE_RED_MEAN)
                for (int64_t i = 0; i < inner; i++) yo[i] = (float)(acc[i] / (double)red);
            else
                for (int64_t i = 0; i < inner; i++) yo[i] = (float)acc[i];
        } else if (kind == QE_RED_MAX || kind == QE_RED_MIN) {
            memcpy(yo, xo, (size_t)inner * sizeof(float));
            for (int64_t r = 1; r < red; r++) {
                const float *row = xo + r * inner;
                if (kind == QE_RED_MAX) {
                    for (int64_t i = 0; i < inner; i++)
                        yo[i] = (yo[i] >= row[i] || isnan(yo[i])) ? yo[i] : row[i];
                } else {
                    for (int64_t i = 0; i < inner; i++)
                        yo[i] = (yo[i] <= row[i] || isnan(yo[i])) ? yo[i] : row[i];
                }
            }
        } else {
            return 2;
        }
    }
    return 0;
}

/* p: x, y, scratch (inner doubles).  i: kind, outer, red, inner. */
int qe_k_reduce_f32(const qe_args *a)
{
    return qe_reduce_f32((int)a->i[0], (const float *)a->p[0], (float *)a->p[1],
                         (double *)a->p[2], a->i[1], a->i[2], a->i[3]);
}

#define MINMAX_INT(T)                                                                       \
    do {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                               \
            const T *xo = (const T *)a->p[0] + o * red * inner;                             \
            T *yo = (T *)a->p[1] + o * inner;                                               \
            if (inner == 1) {                                                               \
                T m = xo[0];                                                                \
                for (int64_t r = 1; r < red; r++)                                           \
                    if (is_max ? xo[r] > m : xo[r] < m) m = xo[r];                          \
                yo[0] = m;                                                                  \
                continue;                                                                   \
            }                                                                               \
            memcpy(yo, xo, (size_t)inner * sizeof(T));                                      \
            for (int64_t r = 1; r < red; r++) {                                             \
                const T *row = xo + r * inner;                                              \
                if (is_max) { for (int64_t i = 0; i < inner; i++) if (row[i] > yo[i]) yo[i] = row[i]; } \
                else { for (int64_t i = 0; i < inner; i++) if (row[i] < yo[i]) yo[i] = row[i]; }        \
            }                                                                               \
        }                                                                                   \
    } while (0)

/* Max / min of integer codes (exact in any order).  p: x, y.  i: is_max, type code, outer,
 * red, inner. */
int qe_k_reduce_minmax(const qe_args *a)
{
    int is_max = (int)a->i[0], t = (int)a->i[1];
    int64_t outer = a->i[2], red = a->i[3], inner = a->i[4];
    if (red < 1) return 1;
    switch (t) {
    case QE_U8: MINMAX_INT(uint8_t); break;
    case QE_I8: MINMAX_INT(int8_t); break;
    case QE_U16: MINMAX_INT(uint16_t); break;
    case QE_I16: MINMAX_INT(int16_t); break;
    case QE_U32: MINMAX_INT(uint32_t); break;
    case QE_I32: MINMAX_INT(int32_t); break;
    default: return 2;
    }
    return 0;
}

/* Separable interpolation along one axis of x viewed as [outer, n_in, inner]:
 * y[o, j, i] = sum_t w[j, t] * x[o, idx[j, t], i] in float32, the products rounded, added from
 * t = 0 up (the order the Resize ops' fast path and the engine share; csrc-side twin of
 * qnnemu/ops/resize.py apply_taps). */
int qe_resize_taps(const float *x, float *y, int64_t outer, int64_t n_in, int64_t inner,
                   int64_t n_out, int64_t k, const int64_t *idx, const float *w)
{
    if (k < 1) return 1;
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * n_in * inner;
        for (int64_t j = 0; j < n_out; j++) {
            float *yr = y + (o * n_out + j) * inner;
            const int64_t *ij = idx + j * k;
            const float *wj = w + j * k;
            const float *xr = xo + ij[0] * inner;
            float w0 = wj[0];
            for (int64_t i = 0; i < inner; i++) yr[i] = xr[i] * w0;
            for (int64_t t = 1; t < k; t++) {
                const float *xt = xo + ij[t] * inner;
                float wt = wj[t];
                for (int64_t i = 0; i < inner; i++) {
                    float prod = xt[i] * wt;
                    yr[i] = yr[i] + prod;
                }
            }
        }
    }
    return 0;
}

/* p: x, y, idx (int64 [n_out, k]), w (float32 [n_out, k]).  i: outer, n_in, inner, n_out, k. */
int qe_k_resize_taps(const qe_args *a)
{
    return qe_resize_taps((const float *)a->p[0], (float *)a->p[1], a->i[0], a->i[1], a->i[2],
                          a->i[3], a->i[4], (const int64_t *)a->p[2], (const float *)a->p[3]);
}

int qe_movement_isa(char *buf, int n)
{
    /* max pooling on codes takes AVX-512BW where the CPU has it; Concat moves codes through
     * tables; float pooling is kernels.c's qe_pool2d */
    const char *s = __builtin_cpu_supports("avx512bw")
                        ? "memcpy + strided copies split over threads, transposes avx2 8x8; float max / global average pooling avx512f; max pooling on codes avx512bw; Concat via code tables; Reshape / one-run slices share bytes"
                        : "memcpy + strided copies split over threads; max pooling on codes scalar; Concat via code tables; Reshape / one-run slices share bytes";
    if (n > 0) {
        strncpy(buf, s, (size_t)n - 1);
        buf[n - 1] = 0;
    }
    return 0;
}

/* -- fixed-point codes without dequantizing (8/16-bit, per-tensor encodings) ------------------- */
/* A code's index in its type's table: code - the type's smallest code. */
#define CODE_AT(t, p, i)                                                                     \
    ((t) == QE_U8 ? (int32_t)((const uint8_t *)(p))[i]                                       \
     : (t) == QE_I8 ? (int32_t)((const int8_t *)(p))[i] + 128                                \
     : (t) == QE_U16 ? (int32_t)((const uint16_t *)(p))[i]                                   \
     : (int32_t)((const int16_t *)(p))[i] + 32768)

static int code_size(int t) { return t == QE_U8 || t == QE_I8 ? 1 : 2; }

/* Row of n codes mapped through lut (output codes indexed by input code - min). */
static void lut_row(char *dst, const char *src, int64_t n, int64_t ss, int64_t ds, int ti,
                    int dsize, const void *lut)
{
    if (dsize == 1) {
        const uint8_t *l = lut;
        uint8_t *d = (uint8_t *)dst;
        if (ti == QE_U8 && ss == 1 && ds == 1) {
            const uint8_t *s = (const uint8_t *)src;
            for (int64_t j = 0; j < n; j++) d[j] = l[s[j]];
            return;
        }
        for (int64_t j = 0; j < n; j++) d[j * ds] = l[CODE_AT(ti, src, j * ss)];
    } else {
        const uint16_t *l = lut;
        uint16_t *d = (uint16_t *)dst;
        for (int64_t j = 0; j < n; j++) d[j * ds] = l[CODE_AT(ti, src, j * ss)];
    }
}

/* qe_k_move with every code mapped through a table (a Concat input whose encoding differs from
 * the output's: the table is the plan's own dequantize + requantize run on every code).
 * p: src, dst, lut.  i: input code type, output code type, rank r, source offset, destination
 * offset (elements), then shape[r], source strides[r], destination strides[r]. */
int qe_k_move_lut(const qe_args *a)
{
    int ti = (int)a->i[0], to = (int)a->i[1], r = (int)a->i[2];
    if (r < 1 || r > QE_MOVE_MAX_RANK || a->ni != 5 + 3 * r || a->np < 3) return 1;
    if (ti < QE_U8 || ti > QE_I16 || to < QE_U8 || to > QE_I16) return 2;
    int si = code_size(ti), so_ = code_size(to);
    const int64_t *shape = a->i + 5, *ss = shape + r, *ds = ss + r;
    const char *src = (const char *)a->p[0] + a->i[3] * si;
    char *dst = (char *)a->p[1] + a->i[4] * so_;
    int64_t rows = 1;
    for (int k = 0; k < r - 1; k++) {
        if (shape[k] <= 0) return 0;
        rows *= shape[k];
    }
    int64_t n = shape[r - 1];
    if (n <= 0) return 0;
    int64_t idx[QE_MOVE_MAX_RANK] = {0};
    int64_t so = 0, dof = 0;
    for (int64_t row = 0; row < rows; row++) {
        lut_row(dst + dof * so_, src + so * si, n, ss[r - 1], ds[r - 1], ti, so_, a->p[2]);
        for (int k = r - 2; k >= 0; k--) {
            so += ss[k]; dof += ds[k];
            if (++idx[k] < shape[k]) break;
            so -= ss[k] * shape[k]; dof -= ds[k] * shape[k];
            idx[k] = 0;
        }
    }
    return 0;
}

/* One output pixel's window: the largest code per channel into o (c codes). */
#define MAXPOOL_FN(NAME, T)                                                                  \
    __attribute__((target_clones("avx2", "default"))) static int NAME(                       \
        const T *restrict x, T *restrict o, int64_t b, int64_t oy, int64_t ox, const int64_t *g)             \
    {                                                                                        \
        int64_t h = g[0], w = g[1], c = g[2], kh = g[3], kw = g[4], sh = g[5], sw = g[6];    \
        int64_t pt = g[7], pl = g[8];                                                        \
        int first = 1;                                                                       \
        for (int64_t ky = 0; ky < kh; ky++) {                                                \
            int64_t iy = oy * sh - pt + ky;                                                  \
            if (iy < 0 || iy >= h) continue;                                                 \
            for (int64_t kx = 0; kx < kw; kx++) {                                            \
                int64_t ix = ox * sw - pl + kx;                                              \
                if (ix < 0 || ix >= w) continue;                                             \
                const T *s = x + ((b * h + iy) * w + ix) * c;                                \
                if (first) {                                                                 \
                    for (int64_t i = 0; i < c; i++) o[i] = s[i];                             \
                    first = 0;                                                               \
                } else {                                                                     \
                    for (int64_t i = 0; i < c; i++) o[i] = s[i] > o[i] ? s[i] : o[i];        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        return first;                                                                        \
    }

/* The same with AVX-512BW: 64 bytes per vector, the channel tail masked (no scalar loop for
 * the small channel counts of CNN stems). */
#define MAXPOOL_512(NAME, MAXFN)                                                             \
    __attribute__((target("avx512f,avx512bw"))) static int NAME(                             \
        const char *x, char *o, int es, int64_t b, int64_t oy, int64_t ox, const int64_t *g) \
    {                                                                                        \
        int64_t h = g[0], w = g[1], c = g[2] * es, kh = g[3], kw = g[4], sh = g[5];          \
        int64_t sw = g[6], pt = g[7], pl = g[8];                                             \
        int first = 1;                                                                       \
        for (int64_t i = 0; i < c; i += 64) {                                                \
            int64_t k = c - i < 64 ? c - i : 64;                                             \
            __mmask64 m = k == 64 ? ~(__mmask64)0 : (((__mmask64)1 << k) - 1);               \
            __m512i acc = _mm512_setzero_si512();                                            \
            first = 1;                                                                       \
            for (int64_t ky = 0; ky < kh; ky++) {                                            \
                int64_t iy = oy * sh - pt + ky;                                              \
                if (iy < 0 || iy >= h) continue;                                             \
                for (int64_t kx = 0; kx < kw; kx++) {                                        \
                    int64_t ix = ox * sw - pl + kx;                                          \
                    if (ix < 0 || ix >= w) continue;                                         \
                    __m512i v = _mm512_maskz_loadu_epi8(m, x + ((b * h + iy) * w + ix) * c + i); \
                    acc = first ? v : MAXFN(acc, v);                                         \
                    first = 0;                                                               \
                }                                                                            \
            }                                                                                \
            _mm512_mask_storeu_epi8(o + i, m, acc);                                          \
        }                                                                                    \
        return first;                                                                        \
    }
MAXPOOL_512(maxpool_u8_512, _mm512_max_epu8)
MAXPOOL_512(maxpool_i8_512, _mm512_max_epi8)
MAXPOOL_512(maxpool_u16_512, _mm512_max_epu16)
MAXPOOL_512(maxpool_i16_512, _mm512_max_epi16)

static int bw_usable(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        int capped = qe_isa_avx512_capped();
        ok = !capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    }
    return ok;
}
MAXPOOL_FN(maxpool_u8, uint8_t)
MAXPOOL_FN(maxpool_i8, int8_t)
MAXPOOL_FN(maxpool_u16, uint16_t)
MAXPOOL_FN(maxpool_i16, int16_t)

/* Max pooling on codes (NHWC): the largest code of each window's input cells (cells outside
 * the input are ignored, as fixed-point max pooling does), then through lut when the output
 * encoding differs.  Exact because the plan's dequantization never decreases with the code
 * (the lowering checks every code), so the window's largest value is its largest code's.
 * p: x, y, [lut].  i: input type, output type, n, h, w, c, kh, kw, oh, ow, sh, sw, pt, pl,
 * has_lut. */
int qe_k_maxpool_codes(const qe_args *a)
{
    if (a->ni < 15 || a->np < 2) return 1;
    const int64_t *I = a->i;
    int ti = (int)I[0], to = (int)I[1], has_lut = (int)I[14];
    int64_t n = I[2], h = I[3], w = I[4], c = I[5], kh = I[6], kw = I[7], oh = I[8], ow = I[9];
    int64_t sh = I[10], sw = I[11], pt = I[12], pl = I[13];
    if (ti < QE_U8 || ti > QE_I16 || to < QE_U8 || to > QE_I16 || (has_lut && a->np < 3)) return 2;
    if (!has_lut && ti != to) return 2;
    int es = code_size(ti);
    char *row = has_lut ? malloc((size_t)(c * es) + 64) : NULL;
    if (has_lut && !row) return 3;
    const char *x = a->p[0];
    char *y = a->p[1];
    int eo = code_size(to);
    const int64_t g[9] = {h, w, c, kh, kw, sh, sw, pt, pl};
    const int bw512 = bw_usable();
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                char *o = has_lut ? row : y + (((b * oh + oy) * ow + ox) * c) * eo;
                int empty;
                if (bw512) {
                    int64_t es2 = code_size(ti);
                    switch (ti) {
                    case QE_U8: empty = maxpool_u8_512(x, o, 1, b, oy, ox, g); break;
                    case QE_I8: empty = maxpool_i8_512(x, o, 1, b, oy, ox, g); break;
                    case QE_U16: empty = maxpool_u16_512(x, o, (int)es2, b, oy, ox, g); break;
                    default: empty = maxpool_i16_512(x, o, (int)es2, b, oy, ox, g); break;
                    }
                } else switch (ti) {
                case QE_U8: empty = maxpool_u8((const uint8_t *)x, (uint8_t *)o, b, oy, ox, g); break;
                case QE_I8: empty = maxpool_i8((const int8_t *)x, (int8_t *)o, b, oy, ox, g); break;
                case QE_U16: empty = maxpool_u16((const uint16_t *)x, (uint16_t *)o, b, oy, ox, g); break;
                default: empty = maxpool_i16((const int16_t *)x, (int16_t *)o, b, oy, ox, g); break;
                }
                if (empty) {   /* no input cell (the lowering never emits such a window) */
                    free(row);
                    return 4;
                }
                if (has_lut)
                    lut_row(y + (((b * oh + oy) * ow + ox) * c) * eo, o, c, 1, 1, ti, eo, a->p[2]);
            }
    free(row);
    return 0;
}
