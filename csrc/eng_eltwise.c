/* Element-wise kernels of the C engine (issue 13; QNN op definitions ElementWise*, Relu, Relu1,
 * Relu6, ReluMinMax, HardSwish, Sigmoid, Tanh, Elu, Gelu, Erf, ThresholdedRelu, Prelu,
 * ElementWiseNeuron, ElementWiseSoftplus, Softmax, LogSoftmax).
 *
 * Two kinds of operation:
 * - exact ones (add ... divide, maximum, minimum, clip, the float64 formulas of HardSwish /
 *   HardSigmoid, comparisons, floor / ceil / rint / sqrt ...): written in the same float
 *   arithmetic, in the same order, as the numpy code of qnnemu/ops, with numpy's choices for
 *   signed zeros and NaN (maximum(a, b) / minimum(a, b) return b when a == b and a when a is
 *   NaN, as numpy's SIMD loops do; clip(x, lo, hi) keeps x when it equals a bound);
 * - transcendental ones (exp, log, sigmoid, tanh, elu, gelu, erf, softplus, softmax): numpy's
 *   SIMD code cannot be reproduced, so these are computed here in float64 with the C library's
 *   functions (< 1 ulp of float64, so the float32 result is the correctly rounded one but for
 *   rare ties) and the ops' fast paths call the same functions (qnnemu/ops/_fast_eltwise.py):
 *   the Python plan and the engine share one implementation.
 *
 * Every loop is written once (ALWAYS_INLINE bodies) and compiled for the baseline and for
 * AVX2, chosen at run time (qe_isa()). */
/* Value-preserving: no floating-point exception flags or errno to keep, so the compiler may
 * vectorize loops with comparisons and sqrt (results are the same bits either way). */
#pragma GCC optimize("no-trapping-math", "no-math-errno")

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eng_eltwise.h"
#include "kernels.h"
#include "pool.h"

#define EW_INLINE static inline __attribute__((always_inline))

/* numpy's float maximum / minimum (its SIMD loops: x86 max/min with NaN of a kept). */
EW_INLINE float np_maxf(float a, float b) { return a != a ? a : (a > b ? a : b); }
EW_INLINE float np_minf(float a, float b) { return a != a ? a : (a < b ? a : b); }
/* numpy's clip: x unless it is beyond a bound (x itself when it equals one; NaN stays). */
EW_INLINE float np_clipf(float x, float lo, float hi)
{
    float t = lo > x ? lo : x;
    return hi < t ? hi : t;
}
EW_INLINE double np_clipd(double x, double lo, double hi)
{
    double t = lo > x ? lo : x;
    return hi < t ? hi : t;
}
/* numpy's float32 remainder (npy_divmodf): the sign of the divisor. */
EW_INLINE float np_modf(float a, float b)
{
    float mod = fmodf(a, b);
    if (!b) return mod;
    if (mod) {
        if ((b < 0) != (mod < 0)) mod += b;
    } else {
        mod = copysignf(0.0f, b);
    }
    return mod;
}

/* ---- threads and ISA levels --------------------------------------------------------------------- */
/* 2: AVX-512 (F, BW, DQ, VL), 1: AVX2, 0: baseline; QNNEMU_KERNELS_ISA=sse / avx2 caps it. */
static int ew_level(void)
{
    static int level = -1;
    if (level < 0) {
        __builtin_cpu_init();
        int l = qe_isa() ? 1 : 0;
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        if (l && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
            && !(force && (strcmp(force, "sse") == 0 || strcmp(force, "avx2") == 0)))
            l = 2;
        level = l;
    }
    return level;
}

/* AVX-512 VBMI (vpermi2b): the 256-entry byte table lookup 64 codes at a time. */
static int ew_vbmi(void)
{
    static int on = -1;
    if (on < 0) on = ew_level() == 2 && __builtin_cpu_supports("avx512vbmi");
    return on;
}

/* Work (ns) per thread below which a pass is not split further: QNNEMU_EW_SPLIT_US (default
 * 10 us, as the memory-bound kernels of kernels.c).  The pool's workers spin before they sleep,
 * so on an idle machine a split costs a few us: efficientnet_b0 float, quiet machine, 2 threads:
 * 13.3 ms per inference splitting from 200 us, 10.9 from 50, 9.6 from 20, 9.2 from 10.  On a
 * machine whose cores other processes hold, a second thread waits for one, and splitting 50-250 us
 * passes was measured 1.2-2x slower than one thread (load 8 on 2 cores: docs/engine-eltwise.md);
 * the caller then runs the pieces nobody took (csrc/pool.c), which bounds the loss. */
static double ew_split = -1.0;   /* ns; < 0: not read yet */
static double ew_split_ns(void)
{
    if (ew_split < 0.0) {
        const char *env = getenv("QNNEMU_EW_SPLIT_US");
        double us = env && *env ? atof(env) : 10.0;
        ew_split = (us > 0.0 ? us : 10.0) * 1000.0;
    }
    return ew_split;
}

/* Sets the split threshold (ns of work per thread; <= 0: back to QNNEMU_EW_SPLIT_US or the
 * default) and returns the previous one: for measurements and tests. */
long qe_ew_set_split_ns(long ns)
{
    long old = (long)ew_split_ns();
    ew_split = ns > 0 ? (double)ns : -1.0;
    return old;
}

/* Threads for a pass over n elements at about ns_per_elem each: one per ew_split_ns() of work
 * at most the call's share of the pool (qe_call_threads) and 64. */
static int ew_threads(int64_t n, double ns_per_elem)
{
    int t = qe_threads();
    int c = qe_call_threads();
    if (c > 0 && c < t) t = c;
    double want = (double)n * ns_per_elem / ew_split_ns();
    if (want < t) t = (int)want;
    if (t > 64) t = 64;
    return t < 1 ? 1 : t;
}

/* fn(ctx, e0, e1) over [0, n) in T contiguous pieces (multiples of 64 elements). */
typedef void (*ew_range_fn)(const void *ctx, int64_t e0, int64_t e1);
typedef struct { ew_range_fn fn; const void *ctx; int64_t e0, e1; } ew_job;

static void ew_job_run(void *p)
{
    ew_job *j = p;
    if (j->e1 > j->e0) j->fn(j->ctx, j->e0, j->e1);
}

/* fn(ctx, i0, i1) over [0, n) items in up to T contiguous pieces of a multiple of granule items. */
static void ew_parallel_items(ew_range_fn fn, const void *ctx, int64_t n, double ns_per_item,
                              int64_t granule)
{
    int T = ew_threads(n, ns_per_item);
    if (T < 2 || n <= granule) {
        fn(ctx, 0, n);
        return;
    }
    ew_job jobs[64];
    int64_t per = ((n + T - 1) / T + granule - 1) / granule * granule;
    int cnt = 0;
    for (int64_t e = 0; e < n && cnt < 64; e += per)
        jobs[cnt++] = (ew_job){fn, ctx, e, e + per < n ? e + per : n};
    qe_pool_run(ew_job_run, jobs, sizeof jobs[0], cnt);
}

static void ew_parallel(ew_range_fn fn, const void *ctx, int64_t n, double ns_per_elem)
{
    int T = ew_threads(n, ns_per_elem);
    if (T < 2) {
        fn(ctx, 0, n);
        return;
    }
    ew_job jobs[64];
    int64_t per = ((n + T - 1) / T + 63) & ~(int64_t)63;
    int cnt = 0;
    for (int64_t e = 0; e < n && cnt < 64; e += per)
        jobs[cnt++] = (ew_job){fn, ctx, e, e + per < n ? e + per : n};
    qe_pool_run(ew_job_run, jobs, sizeof jobs[0], cnt);
}

/* ---- binary ops with broadcasting ------------------------------------------------------------ */
/* One row: n elements, a and b at element strides sa / sb (0: broadcast). */
#define BIN_ROW(TOUT, EXPR)                                                                       \
    do {                                                                                          \
        TOUT *y_ = (TOUT *)yv;                                                                    \
        if (sa == 1 && sb == 1) {                                                                 \
            for (int64_t i = 0; i < n; i++) { float x0 = a[i], x1 = b[i]; y_[i] = (EXPR); }       \
        } else if (sa == 1 && sb == 0) {                                                          \
            float x1 = b[0];                                                                      \
            for (int64_t i = 0; i < n; i++) { float x0 = a[i]; y_[i] = (EXPR); }                  \
        } else if (sa == 0 && sb == 1) {                                                          \
            float x0 = a[0];                                                                      \
            for (int64_t i = 0; i < n; i++) { float x1 = b[i]; y_[i] = (EXPR); }                  \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                float x0 = a[i * sa], x1 = b[i * sb];                                             \
                y_[i] = (EXPR);                                                                   \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* Internal codes of an Add whose Relu / ReluMinMax is applied as it stores (qe_k_binary_f32's
 * activation; qnnemu/core/plan.py float folds): numpy.maximum(x0 + x1, 0), numpy.clip(x0 + x1,
 * lo, hi) -- the Add's float32 sum, then the activation's exact max / clip. */
enum { BIN_ADD_RELU = QE_BIN_COUNT, BIN_ADD_CLIP };

EW_INLINE void bin_row(int op, const float *a, const float *b, void *yv, int64_t n, int64_t sa,
                       int64_t sb, float lo, float hi)
{
    switch (op) {
    case BIN_ADD_RELU: BIN_ROW(float, np_maxf(x0 + x1, 0.0f)); break;
    case BIN_ADD_CLIP: BIN_ROW(float, np_clipf(x0 + x1, lo, hi)); break;
    case QE_BIN_ADD: BIN_ROW(float, x0 + x1); break;
    case QE_BIN_SUB: BIN_ROW(float, x0 - x1); break;
    case QE_BIN_MUL: BIN_ROW(float, x0 * x1); break;
    case QE_BIN_DIV: BIN_ROW(float, x0 / x1); break;
    case QE_BIN_MAX: BIN_ROW(float, np_maxf(x0, x1)); break;
    case QE_BIN_MIN: BIN_ROW(float, np_minf(x0, x1)); break;
    case QE_BIN_SQDIFF: BIN_ROW(float, (float)(((double)x0 - (double)x1) * ((double)x0 - (double)x1))); break;
    case QE_BIN_FLOORDIV: BIN_ROW(float, floorf(x0 / x1)); break;
    case QE_BIN_FMOD: BIN_ROW(float, fmodf(x0, x1)); break;
    case QE_BIN_MOD: BIN_ROW(float, np_modf(x0, x1)); break;
    /* Prelu: max(x, 0) + coeff * min(x, 0) (ops/activation.py) */
    /* (x NaN: numpy's sum is that NaN quieted; written out, as gcc may swap the addends and
     * with two NaN operands x86 returns the first) */
    case QE_BIN_PRELU: BIN_ROW(float, x0 != x0 ? x0 + x0 : np_maxf(x0, 0.0f) + x1 * np_minf(x0, 0.0f)); break;
    /* shared with ElementWisePower's fast path: float64 pow, one rounding */
    case QE_BIN_POW: BIN_ROW(float, (float)pow((double)x0, (double)x1)); break;
    case QE_BIN_EQ: BIN_ROW(uint8_t, x0 == x1); break;
    case QE_BIN_NE: BIN_ROW(uint8_t, x0 != x1); break;
    case QE_BIN_GT: BIN_ROW(uint8_t, x0 > x1); break;
    case QE_BIN_GE: BIN_ROW(uint8_t, x0 >= x1); break;
    case QE_BIN_LT: BIN_ROW(uint8_t, x0 < x1); break;
    case QE_BIN_LE: BIN_ROW(uint8_t, x0 <= x1); break;
    default: break;
    }
}

/* Output elements [e0, e1) of a broadcast, row by row (the first and last rows may be partial):
 * rank r (>= 1), out shape d[r], element strides sa[r], sb[r]. */
EW_INLINE void bin_all(int op, const float *a, const float *b, char *y, int r, const int64_t *d,
                       const int64_t *sa, const int64_t *sb, int out_size, float lo, float hi,
                       int64_t e0, int64_t e1)
{
    int64_t n = d[r - 1];
    int64_t row = e0 / n, col = e0 % n;
    int64_t idx[8] = {0}, oa = 0, ob = 0, rest = row;
    for (int k = r - 2; k >= 0; k--) {   /* the first row's index over the outer dimensions */
        idx[k] = rest % d[k];
        rest /= d[k];
        oa += idx[k] * sa[k];
        ob += idx[k] * sb[k];
    }
    for (int64_t e = e0; e < e1;) {
        int64_t cnt = n - col < e1 - e ? n - col : e1 - e;
        bin_row(op, a + oa + col * sa[r - 1], b + ob + col * sb[r - 1], y + e * out_size, cnt,
                sa[r - 1], sb[r - 1], lo, hi);
        e += cnt;
        col = 0;
        for (int k = r - 2; k >= 0; k--) {   /* odometer over the outer dimensions */
            oa += sa[k];
            ob += sb[k];
            if (++idx[k] < d[k]) break;
            oa -= sa[k] * d[k];
            ob -= sb[k] * d[k];
            idx[k] = 0;
        }
    }
}

typedef struct {
    int op, r, out_size;
    const float *a, *b;
    char *y;
    const int64_t *d, *sa, *sb;
    float lo, hi;
} bin_ctx;

static void bin_all_base(const bin_ctx *c, int64_t e0, int64_t e1)
{
    bin_all(c->op, c->a, c->b, c->y, c->r, c->d, c->sa, c->sb, c->out_size, c->lo, c->hi, e0, e1);
}

__attribute__((target("avx2"))) static void bin_all_avx2(const bin_ctx *c, int64_t e0, int64_t e1)
{
    bin_all(c->op, c->a, c->b, c->y, c->r, c->d, c->sa, c->sb, c->out_size, c->lo, c->hi, e0, e1);
}

static void bin_range(const void *cp, int64_t e0, int64_t e1)
{
    const bin_ctx *c = cp;
    /* (memory-bound: AVX2 is enough) */
    if (qe_isa()) bin_all_avx2(c, e0, e1);
    else bin_all_base(c, e0, e1);
}

/* y = a op b broadcast: rank r (1..8), out dims[r], element strides sa[r], sb[r] (0 where an
 * input broadcasts); y float32, or uint8 0 / 1 for the comparisons.  Large outputs are split
 * over the pool's threads (each element is computed alike whatever the split). */
static int binary_f32(int op, const float *a, const float *b, void *y, int r, const int64_t *d,
                      const int64_t *sa, const int64_t *sb, float lo, float hi)
{
    if (r < 1 || r > 8) return 2;
    int64_t total = 1;
    for (int k = 0; k < r; k++) total *= d[k];
    if (total <= 0) return 0;
    int compare = op >= QE_BIN_FIRST_COMPARE && op < QE_BIN_COUNT;
    bin_ctx c = {op, r, compare ? 1 : 4, a, b, y, d, sa, sb, lo, hi};
    /* memory-bound but for the float64 pow, fmod and the divisions */
    double ns = op == QE_BIN_POW ? 20.0 : (op == QE_BIN_FMOD || op == QE_BIN_MOD) ? 5.0 : 0.3;
    ew_parallel(bin_range, &c, total, ns);
    return 0;
}

int qe_ew_binary_f32(int op, const float *a, const float *b, void *y, int r, const int64_t *d,
                     const int64_t *sa, const int64_t *sb)
{
    if (op < 0 || op >= QE_BIN_COUNT) return 2;
    return binary_f32(op, a, b, y, r, d, sa, sb, 0.0f, 0.0f);
}

/* p: in[0], in[1], out; i: op, rank r, out shape[r], in[0] strides[r], in[1] strides[r], and
 * optionally an activation applied as the result is stored (plan.float_folds: an Add's Relu /
 * ReluMinMax): 0 none, 1 numpy.maximum(y, 0), 2 numpy.clip(y, lo, hi) with d: lo, hi (float32
 * values). */
int qe_k_binary_f32(const qe_args *a)
{
    if (a->np != 3 || a->ni < 2) return 1;
    int op = (int)a->i[0], r = (int)a->i[1];
    if (op < 0 || op >= QE_BIN_COUNT || r < 1 || r > 8) return 2;
    if (a->ni != 2 + 3 * r && a->ni != 3 + 3 * r) return 2;
    const int64_t *d = a->i + 2;
    int act = a->ni == 3 + 3 * r ? (int)a->i[2 + 3 * r] : 0;
    if (act == 0) return binary_f32(op, a->p[0], a->p[1], a->p[2], r, d, d + r, d + 2 * r, 0.0f, 0.0f);
    /* (the Add alone folds an activation: the plan folds nothing else) */
    if (op != QE_BIN_ADD || act > 2 || (act == 2 && a->nd != 2)) return 2;
    float lo = act == 2 ? (float)a->d[0] : 0.0f, hi = act == 2 ? (float)a->d[1] : 0.0f;
    return binary_f32(act == 1 ? BIN_ADD_RELU : BIN_ADD_CLIP, a->p[0], a->p[1], a->p[2], r, d, d + r,
                      d + 2 * r, lo, hi);
}

/* ---- vectorizable float64 exp --------------------------------------------------------------- */
/* exp(x) in float64 without branches or tables, so that the loops calling it vectorize: x
 * clamped to [-700, 700] (beyond it every caller's float32 result is already 0 / inf / 1),
 * x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite, two parts of ln2), e^r by its Taylor series to
 * r^13 / 13! (truncation < 3e-17 relative), times 2^k built in the exponent bits.  Relative
 * error ~3e-16: the float32 results are correctly rounded but for ties within that.  NaN stays
 * NaN. */
#define EXP_SHIFT 6755399441055744.0            /* 1.5 * 2^52: rounds to an integer */
EW_INLINE double exp_d(double x)
{
    x = x < -700.0 ? -700.0 : x;
    x = x > 700.0 ? 700.0 : x;
    double kd = x * 1.4426950408889634074 + EXP_SHIFT;
    double kf = kd - EXP_SHIFT;
    double r = (x - kf * 6.93147180369123816490e-01) - kf * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;                           /* 1/13! */
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t kb, shift_bits;
    double shift = EXP_SHIFT, scale;
    memcpy(&kb, &kd, sizeof kb);
    memcpy(&shift_bits, &shift, sizeof shift_bits);
    int64_t sb = (kb - shift_bits + 1023) << 52;
    memcpy(&scale, &sb, sizeof scale);
    return p * scale;
}

/* The exact formula (QE_UN_SIGMOID_EXACT; QE_UN_SIGMOID's lanes with |x| > 87 or NaN):
 * 1 / (1 + exp_d(-x)) in float64, rounded once to float32. */
EW_INLINE float sigmoid_exact(float v) { return (float)(1.0 / (1.0 + exp_d(-(double)v))); }

/* ---- Sigmoid: a float32 evaluation, the same bits on every ISA --------------------------------
 * QE_UN_SIGMOID (the Sigmoid op, the SiLU folds, the recurrent ops' gates): float32 operations,
 * each IEEE-rounded, and the fused multiply-adds the source spells out (the build has
 * -ffp-contract=off), in the same order in the scalar, AVX2 and AVX-512 code, so every ISA gives
 * the same bytes:
 *   a = -|x|; k = rint(a log2(e)); r = a - k ln2 (two fused steps, ln2 in two parts);
 *   p = e^r by its Taylor polynomial to r^7 / 7! (|r| <= 0.35: truncation below 2^-27);
 *   t = p 2^k = e^-|x|; d = 1 + t; q = 1 / d from a quadratic start (1% on [1, 2]) and two
 *   Newton steps (2^-26); sigmoid = q for x >= 0, t q for x < 0 (e^x / (1 + e^x)).
 * Within 2 float32 ulps of the exact formula (sigmoid_exact, 1 / (1 + exp(-x)) in float64, one
 * rounding) on every input -- the vendor's own Sigmoid is an approximation (docs/numerics.md) --
 * at a third of the float64 pass's cost (tools/exhaustive_sigmoid.py: the distribution over all
 * 2^32 inputs, and the ISAs' bytes compared).  |x| > 87 (where e^-|x| leaves float32's normal
 * range) and NaN take the exact formula. */
#define SIG_X_MAX 87.0f
#define SIG_LOG2E 1.44269502162933349609f
#define SIG_LN2_HI 0.693145751953125f                   /* 0x3f317200: k ln2_hi is exact */
#define SIG_LN2_LO 1.428606765330187045e-06f            /* ln2 - ln2_hi */
#define SIG_Q0 2.12121200561523437500f                  /* ~1 / d on [1, 2] (Chebyshev) */
#define SIG_Q1 -1.45454549789428710938f
#define SIG_Q2 0.32323232293128967285f

EW_INLINE float sigmoid_f32(float v)
{
    float ax = fabsf(v);
    if (!(ax <= SIG_X_MAX)) return sigmoid_exact(v);
    float a = -ax;
    float k = rintf(a * SIG_LOG2E);
    float r = fmaf(k, -SIG_LN2_HI, a);
    r = fmaf(k, -SIG_LN2_LO, r);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t sb = ((int32_t)k + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float t = p * scale;
    float d = 1.0f + t;
    float q = fmaf(fmaf(SIG_Q2, d, SIG_Q1), d, SIG_Q0);
    q = fmaf(q, fmaf(-d, q, 1.0f), q);
    q = fmaf(q, fmaf(-d, q, 1.0f), q);
    float dl = (1.0f - d) + t;                      /* d's rounding error, exactly */
    float e = fmaf(-dl, q, fmaf(-d, q, 1.0f));      /* 1 - (d + dl) q */
    float tq = t * q;
    return v >= 0.0f ? fmaf(q, e, q) : fmaf(tq, e, tq);
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline __m512 sigmoid16_avx512(__m512 v, __m512 ax)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 a = _mm512_sub_ps(_mm512_setzero_ps(), ax);
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(SIG_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-SIG_LN2_HI), a);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(-SIG_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    __m512i sb = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    __m512 t = _mm512_mul_ps(p, _mm512_castsi512_ps(sb));
    __m512 d = _mm512_add_ps(one, t);
    __m512 q = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(SIG_Q2), d, _mm512_set1_ps(SIG_Q1)), d,
                               _mm512_set1_ps(SIG_Q0));
    q = _mm512_fmadd_ps(q, _mm512_fnmadd_ps(d, q, one), q);
    q = _mm512_fmadd_ps(q, _mm512_fnmadd_ps(d, q, one), q);
    __m512 dl = _mm512_add_ps(_mm512_sub_ps(one, d), t);
    __m512 e = _mm512_fnmadd_ps(dl, q, _mm512_fnmadd_ps(d, q, one));
    __m512 tq = _mm512_mul_ps(t, q);
    __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_fmadd_ps(_mm512_mask_blend_ps(neg, q, tq), e, _mm512_mask_blend_ps(neg, q, tq));
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static void sigmoid_rows_avx512(const float *x,
                                                                                    float *y,
                                                                                    int64_t n)
{
    const __m512 xmax = _mm512_set1_ps(SIG_X_MAX);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 ax = _mm512_abs_ps(v);
        __mmask16 exact = _mm512_mask_cmp_ps_mask(m, ax, xmax, _CMP_NLE_UQ);   /* |x| > 87, NaN */
        _mm512_mask_storeu_ps(y + i, m, sigmoid16_avx512(v, ax));
        if (__builtin_expect(exact != 0, 0))
            for (int l = 0; l < 16; l++)
                if (exact >> l & 1) y[i + l] = sigmoid_exact(x[i + l]);
    }
}

__attribute__((target("avx2,fma"))) static void sigmoid_rows_avx2(const float *x, float *y, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), xmax = _mm256_set1_ps(SIG_X_MAX);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 ax = _mm256_and_ps(v, absmask);
        int exact = _mm256_movemask_ps(_mm256_cmp_ps(ax, xmax, _CMP_NLE_UQ));   /* |x| > 87, NaN */
        __m256 a = _mm256_sub_ps(_mm256_setzero_ps(), ax);
        __m256 k = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(SIG_LOG2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-SIG_LN2_HI), a);
        r = _mm256_fmadd_ps(k, _mm256_set1_ps(-SIG_LN2_LO), r);
        __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
        p = _mm256_fmadd_ps(p, r, one);
        p = _mm256_fmadd_ps(p, r, one);
        __m256i sb = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
        __m256 t = _mm256_mul_ps(p, _mm256_castsi256_ps(sb));
        __m256 d = _mm256_add_ps(one, t);
        __m256 q = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(SIG_Q2), d, _mm256_set1_ps(SIG_Q1)), d,
                                   _mm256_set1_ps(SIG_Q0));
        q = _mm256_fmadd_ps(q, _mm256_fnmadd_ps(d, q, one), q);
        q = _mm256_fmadd_ps(q, _mm256_fnmadd_ps(d, q, one), q);
        __m256 dl = _mm256_add_ps(_mm256_sub_ps(one, d), t);
        __m256 e = _mm256_fnmadd_ps(dl, q, _mm256_fnmadd_ps(d, q, one));
        __m256 u = _mm256_blendv_ps(q, _mm256_mul_ps(t, q), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(u, e, u));
        if (__builtin_expect(exact != 0, 0))
            for (int l = 0; l < 8; l++)
                if (exact >> l & 1) y[i + l] = sigmoid_exact(x[i + l]);
    }
    for (; i < n; i++) y[i] = sigmoid_f32(x[i]);
}

/* The vector pass of this machine (AVX-512, AVX2 + FMA), or 0: sigmoid_f32 element by element
 * (the same bytes). */
static int sig_fast_level(void)
{
    static int level = -1;
    if (level < 0) {
        __builtin_cpu_init();
        level = ew_level() == 2 ? 2 : (ew_level() == 1 && __builtin_cpu_supports("fma") ? 1 : 0);
    }
    return level;
}

/* tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)); below 2^-9 the odd series x - x^3/3 + 2x^5/15
 * - 17x^7/315 (the other form cancels there). */
EW_INLINE double tanh_d(double x)
{
    double a = fabs(x);
    double big = 1.0 - 2.0 / (exp_d(2.0 * (a > 20.0 ? 20.0 : a)) + 1.0);
    double a2 = a * a;
    double small = a + a * a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0)));
    double t = a < 0x1p-9 ? small : big;
    return x != x ? x : copysign(t, x);
}

/* erfc(z) for z >= 0 as exp(-z^2) erfcx(z), erfcx = exp(z^2) erfc(z) smooth on [0, 10]: tabulated
 * with its derivative from the C library's erfc every 1/1024 and interpolated by cubic Hermite
 * polynomials (the construction of qnnemu/ops/activation.py; relative error < 1e-11), one gather
 * of four coefficients per element so the loops vectorize.  0 past z = 10 (erfc < 3e-45). */
#define ERF_STEPS 1024
#define ERF_ROWS (10 * ERF_STEPS + 1)
static double erf_c0[ERF_ROWS], erf_c1[ERF_ROWS], erf_c2[ERF_ROWS], erf_c3[ERF_ROWS];
static pthread_once_t erf_once = PTHREAD_ONCE_INIT;

static void erf_table_init(void)
{
    const double h = 1.0 / ERF_STEPS, two_over_sqrt_pi = 1.12837916709551257390;
    double f0 = 1.0, d0 = -two_over_sqrt_pi * h;   /* erfcx(0), erfcx'(0) h */
    for (int j = 0; j < ERF_ROWS; j++) {
        double z = (j + 1) * h;
        double f1 = exp(z * z) * erfc(z);
        double d1 = (2.0 * z * f1 - two_over_sqrt_pi) * h;
        erf_c0[j] = f0;
        erf_c1[j] = d0;
        erf_c2[j] = 3.0 * (f1 - f0) - 2.0 * d0 - d1;
        erf_c3[j] = 2.0 * (f0 - f1) + d0 + d1;
        f0 = f1;
        d0 = d1;
    }
}

EW_INLINE double erfc_tab(double z)
{
    double u = z * ERF_STEPS;
    u = u < (double)(ERF_ROWS - 1) ? u : (double)(ERF_ROWS - 1);
    double jd = floor(u);   /* (u - (double)(int)u keeps gcc from vectorizing) */
    int64_t j = (int64_t)jd;
    u -= jd;
    double p = ((erf_c3[j] * u + erf_c2[j]) * u + erf_c1[j]) * u + erf_c0[j];
    double y = exp_d(-(z * z)) * p;
    return z > 10.0 ? 0.0 : y;
}

/* ---- unary ops ------------------------------------------------------------------------------- */
/* Gelu, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2); gelu(-inf) = 0,
 * NaN stays. */
EW_INLINE double gelu_d(double x)
{
    double a = fabs(x);
    double z = (a < 20.0 ? a : 20.0) * 0.70710678118654752440;   /* NaN -> 20: fixed below */
    double t = erfc_tab(z);
    double f = x >= 0 ? 2.0 - t : t;
    double y = 0.5 * (x * f);
    y = x == -INFINITY ? 0.0 : y;
    return x != x ? x : y;
}

/* Gelu's loop in functions of its own, written out in each: inside un_all's switch, or inlined
 * from a helper, gcc does not vectorize it. */
#define GELU_ROWS for (int64_t i = 0; i < n; i++) y[i] = (float)gelu_d((double)x[i])
static void gelu_rows_base(const float *x, float *y, int64_t n) { GELU_ROWS; }
__attribute__((target("avx2"))) static void gelu_rows_avx2(const float *x, float *y, int64_t n)
{
    GELU_ROWS;
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) static void gelu_rows_avx512(const float *x,
                                                                                  float *y,
                                                                                  int64_t n)
{
    GELU_ROWS;
}

/* float16.ReciprocalDivide's r(b): 1 / |b| * bias in float32 (NaN -> 0), truncated toward zero
 * to the HTP's float16 grid (htp_fp16_trunc: 10 mantissa bits, multiples of 2^-24 below 2^-14),
 * saturated at 131008, with b's sign. */
EW_INLINE float htp_recip(float b, float bias)
{
    float r = 1.0f / fabsf(b) * bias;
    r = r != r ? 0.0f : r;
    uint32_t bits;
    memcpy(&bits, &r, 4);
    bits &= 0xffffe000u;
    float t;
    memcpy(&t, &bits, 4);
    if (r < 0x1p-14f) t = (float)(floor((double)r * 16777216.0) * (1.0 / 16777216.0));
    t = t > 131008.0f ? 131008.0f : t;
    return copysignf(t, b);
}

#define UN_LOOP(EXPR)                                                                             \
    do {                                                                                          \
        for (int64_t i = 0; i < n; i++) { float v = x[i]; y[i] = (EXPR); }                        \
    } while (0)

EW_INLINE int un_all(int op, const float *x, float *y, int64_t n, const double *prm)
{
    switch (op) {
    case QE_UN_NEG: UN_LOOP(-v); break;
    case QE_UN_ABS: UN_LOOP(fabsf(v)); break;
    case QE_UN_SQRT: UN_LOOP(sqrtf(v)); break;
    case QE_UN_FLOOR: UN_LOOP(floorf(v)); break;
    case QE_UN_CEIL: UN_LOOP(ceilf(v)); break;
    case QE_UN_RINT: UN_LOOP(rintf(v)); break;
    case QE_UN_RSQRT: UN_LOOP(1.0f / sqrtf(v)); break;
    case QE_UN_RECIP: UN_LOOP(1.0f / v); break;
    case QE_UN_SIGN: UN_LOOP(v > 0 ? 1.0f : (v < 0 ? -1.0f : (v == 0 ? 0.0f : v))); break;
    case QE_UN_RELU: UN_LOOP(np_maxf(v, 0.0f)); break;
    case QE_UN_CLIP: {  /* prm: lo, hi (float32 values) */
        float lo = (float)prm[0], hi = (float)prm[1];
        UN_LOOP(np_clipf(v, lo, hi));
        break;
    }
    case QE_UN_HARD_SIGMOID: {  /* clip(alpha x + beta, 0, 1) in float64 */
        double al = prm[0], be = prm[1];
        UN_LOOP((float)np_clipd(al * (double)v + be, 0.0, 1.0));
        break;
    }
    case QE_UN_HARD_SWISH: {  /* x clip(alpha x + beta, 0, 1) in float64 */
        double al = prm[0], be = prm[1];
        UN_LOOP((float)((double)v * np_clipd(al * (double)v + be, 0.0, 1.0)));
        break;
    }
    case QE_UN_THRESHOLD: {  /* x where x > alpha else 0 */
        float al = (float)prm[0];
        UN_LOOP(v > al ? v : 0.0f);
        break;
    }
    /* float64 evaluations, rounded once to float32 */
    case QE_UN_EXP: UN_LOOP((float)exp_d((double)v)); break;
    case QE_UN_LOG: UN_LOOP((float)log((double)v)); break;
    case QE_UN_SIGMOID: UN_LOOP(sigmoid_f32(v)); break;
    case QE_UN_SIGMOID_EXACT: UN_LOOP(sigmoid_exact(v)); break;
    case QE_UN_TANH: UN_LOOP((float)tanh_d((double)v)); break;
    case QE_UN_ELU: {  /* max(x, 0) + alpha expm1(min(x, 0)); prm: alpha */
        double al = prm[0];
        UN_LOOP((float)((double)np_maxf(v, 0.0f) + al * expm1((double)np_minf(v, 0.0f))));
        break;
    }
    case QE_UN_GELU: return 3;   /* qe_ew_unary_f32 runs gelu_rows */
    case QE_UN_ERF: UN_LOOP((float)erf((double)v)); break;
    case QE_UN_SIN: UN_LOOP((float)sin((double)v)); break;
    case QE_UN_COS: UN_LOOP((float)cos((double)v)); break;
    case QE_UN_ASIN: UN_LOOP((float)asin((double)v)); break;
    case QE_UN_ATAN: UN_LOOP((float)atan((double)v)); break;
    case QE_UN_HTP_RECIP: {  /* the float16 reciprocal of float16.ReciprocalDivide; prm: bias */
        float bias = (float)prm[0];
        UN_LOOP(htp_recip(v, bias));
        break;
    }
    case QE_UN_SOFTPLUS: {  /* log(1 + exp(beta x)) / beta, x where beta x > threshold */
        double be = prm[0], th = prm[1];
        for (int64_t i = 0; i < n; i++) {
            double z = be * (double)x[i];
            y[i] = z > th ? x[i] : (float)(log1p(exp(z != z || z < th ? z : th)) / be);
        }
        break;
    }
    default:
        return 2;
    }
    return 0;
}

static int un_all_base(int op, const float *x, float *y, int64_t n, const double *prm)
{
    return un_all(op, x, y, n, prm);
}

__attribute__((target("avx2"))) static int un_all_avx2(int op, const float *x, float *y, int64_t n,
                                                       const double *prm)
{
    return un_all(op, x, y, n, prm);
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static int un_all_avx512(int op, const float *x,
                                                                              float *y, int64_t n,
                                                                              const double *prm)
{
    return un_all(op, x, y, n, prm);
}

static int use_avx512(void)
{
    static int on = -1;
    if (on < 0) {
        __builtin_cpu_init();
        on = qe_isa() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")
             && __builtin_cpu_supports("avx512vl");
    }
    return on;
}

typedef struct { int op; const float *x; float *y; const double *prm; } un_ctx;

static void un_range(const void *cp, int64_t e0, int64_t e1)
{
    const un_ctx *c = cp;
    const float *x = c->x + e0;
    float *y = c->y + e0;
    int64_t n = e1 - e0;
    if (c->op == QE_UN_SIGMOID && sig_fast_level() == 2) {
        sigmoid_rows_avx512(x, y, n);
    } else if (c->op == QE_UN_SIGMOID && sig_fast_level() == 1) {
        sigmoid_rows_avx2(x, y, n);
    } else if (c->op == QE_UN_GELU) {
        if (use_avx512()) gelu_rows_avx512(x, y, n);
        else if (qe_isa()) gelu_rows_avx2(x, y, n);
        else gelu_rows_base(x, y, n);
    } else if (use_avx512()) {
        un_all_avx512(c->op, x, y, n, c->prm);
    } else if (qe_isa()) {
        un_all_avx2(c->op, x, y, n, c->prm);
    } else {
        un_all_base(c->op, x, y, n, c->prm);
    }
}

/* y[i] = op(x[i]) for i < n; prm: the op's parameters (see un_all).  Large arrays are split over
 * the pool's threads (each element is computed alike whatever the split). */
int qe_ew_unary_f32(int op, const float *x, float *y, int64_t n, const double *prm)
{
    static const double none[2] = {0.0, 0.0};
    if (op < 0 || op >= QE_UN_COUNT || n < 0) return 2;
    if (!prm) prm = none;
    if (op == QE_UN_GELU) pthread_once(&erf_once, erf_table_init);
    /* the float64 functions cost ~1.5 ns an element here, the rest is memory-bound */
    double ns = op == QE_UN_SIGMOID && sig_fast_level() ? (sig_fast_level() == 2 ? 0.2 : 0.4)
              : op >= QE_UN_EXP && op != QE_UN_HTP_RECIP ? 1.5 : 0.3;
    un_ctx c = {op, x, y, prm};
    ew_parallel(un_range, &c, n, ns);
    return 0;
}

/* p: x, y; i: op, n; d: the op's parameters (2 of them at least). */
int qe_k_unary_f32(const qe_args *a)
{
    if (a->np != 2 || a->ni != 2 || a->nd < 2) return 1;
    return qe_ew_unary_f32((int)a->i[0], a->p[0], a->p[1], a->i[1], a->d);
}

/* ---- SiLU: a Sigmoid and the Multiply of its input by it, in one pass ----------------------- */
/* y = x * sigmoid(x) as the two steps compute it (s = the Sigmoid's float32 result, then the
 * Multiply's float32 product in the node's operand order), block by block so that x and s are
 * read back from L1: one read of x and one write (s in a block on the stack: the plan folded the
 * Sigmoid, nothing reads its output) or two (s written too) instead of three reads and two. */
typedef struct { const float *x; float *s, *y; int x_first; } silu_ctx;

#define SILU_BLOCK 2048
__attribute__((target("avx2"))) static void silu_mul_avx2(const float *a, const float *b, float *y,
                                                         int64_t n)
{
    bin_row(QE_BIN_MUL, a, b, y, n, 1, 1, 0.0f, 0.0f);
}

static void silu_range(const void *cp, int64_t e0, int64_t e1)
{
    const silu_ctx *c = cp;
    float own[SILU_BLOCK] __attribute__((aligned(64)));
    for (int64_t b = e0; b < e1; b += SILU_BLOCK) {
        int64_t n = e1 - b < SILU_BLOCK ? e1 - b : SILU_BLOCK;
        const float *x = c->x + b;
        float *s = c->s ? c->s + b : own, *y = c->y + b;
        if (sig_fast_level() == 2) sigmoid_rows_avx512(x, s, n);
        else if (sig_fast_level() == 1) sigmoid_rows_avx2(x, s, n);
        else if (qe_isa()) un_all_avx2(QE_UN_SIGMOID, x, s, n, NULL);
        else un_all_base(QE_UN_SIGMOID, x, s, n, NULL);
        const float *a = c->x_first ? x : s, *bb = c->x_first ? s : x;
        if (qe_isa()) silu_mul_avx2(a, bb, y, n);
        else bin_row(QE_BIN_MUL, a, bb, y, n, 1, 1, 0.0f, 0.0f);
    }
}

/* SiLU folded into the epilogue of a product or convolution (qnnemu/core/plan.py: the
 * ActivationEpilogue of a SiluProduct): y[0:n] = y * sigmoid(y) in place, the product in the
 * Multiply's operand order (x_first: x * s, else s * x; which NaN a product of two NaNs carries
 * depends on it), the same float32 values as silu_range. */
void qe_ew_silu_inplace(float *y, int64_t n, int x_first)
{
    silu_ctx c = {y, NULL, y, x_first};
    silu_range(&c, 0, n);
}

/* ---- Sigmoid and SiLU in float16 math: tables over the float16 values ------------------------
 * In float16 math each step's float32 result is rounded to a float16 value (qe_fp16_round_inplace;
 * ties away from zero, or to even on the SoCs that round so), so a Sigmoid reads one of 65536
 * values.  The tables hold, per float16 bit pattern h of value v, what the steps compute:
 * sig16[e][h] = round(sigmoid(v)) and silu16[e][h] = round(v * sig16[e][h]) (e: ties to even),
 * made by the same kernels (sigmoid_rows, bin_row, the rounding) at first use.  A vector of 16
 * inputs that are all float16 values (converted to float16 and back unchanged) is looked up;
 * any other vector (a graph input not rounded, NaN) is computed step by step as the tables were
 * made, so the values are the two steps' bytes for every input. */
static float *sig16_tab[2], *silu16_tab[2];
static pthread_once_t sig16_once = PTHREAD_ONCE_INIT;

static void sig16_rows_steps(const float *x, float *s, float *y, int64_t n, int x_first, int even);

static void sig16_init(void)
{
    float *v = malloc(sizeof(float) * 65536);
    for (int e = 0; e < 2; e++) {
        sig16_tab[e] = malloc(sizeof(float) * 65536);
        silu16_tab[e] = malloc(sizeof(float) * 65536);
    }
    if (!v || !sig16_tab[0] || !sig16_tab[1] || !silu16_tab[0] || !silu16_tab[1]) {
        free(v);
        for (int e = 0; e < 2; e++) {
            free(sig16_tab[e]);
            free(silu16_tab[e]);
            sig16_tab[e] = silu16_tab[e] = NULL;   /* the kernels then compute step by step */
        }
        return;
    }
    for (int h = 0; h < 65536; h++) {   /* the float16 value of bit pattern h */
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        float mag = e == 0 ? ldexpf((float)m, -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                  : ldexpf((float)(m | 0x400), e - 25);
        v[h] = (h & 0x8000) ? -mag : mag;
    }
    for (int e = 0; e < 2; e++) sig16_rows_steps(v, sig16_tab[e], silu16_tab[e], 65536, 1, e);
    free(v);
}

/* The two steps: s = round(sigmoid(x)), y = round(x * s) (or s * x); s or y may be NULL. */
static void sig16_rows_steps(const float *x, float *s, float *y, int64_t n, int x_first, int even)
{
    float own[SILU_BLOCK] __attribute__((aligned(64)));
    for (int64_t b = 0; b < n; b += SILU_BLOCK) {
        int64_t m = n - b < SILU_BLOCK ? n - b : SILU_BLOCK;
        float *sb = s ? s + b : own;
        un_range(&(un_ctx){QE_UN_SIGMOID, x + b, sb, NULL}, 0, m);
        qe_fp16_round_inplace(sb, m, even);
        if (!y) continue;
        const float *a = x_first ? x + b : sb, *bb = x_first ? sb : x + b;
        bin_row(QE_BIN_MUL, a, bb, y + b, m, 1, 1, 0.0f, 0.0f);
        qe_fp16_round_inplace(y + b, m, even);
    }
}

typedef struct { const float *x; float *s, *y; int x_first, even; } sig16_ctx;

__attribute__((target("avx512f,f16c"))) static void sig16_range_avx512(const void *cp, int64_t e0, int64_t e1)
{
    const sig16_ctx *c = cp;
    const float *st = sig16_tab[c->even], *yt = silu16_tab[c->even];
    int64_t i = e0;
    for (; i + 16 <= e1; i += 16) {
        __m512 xv = _mm512_loadu_ps(c->x + i);
        __m256i h = _mm512_cvtps_ph(xv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm512_cmp_ps_mask(_mm512_cvtph_ps(h), xv, _CMP_EQ_OQ) != 0xFFFF) {
            sig16_rows_steps(c->x + i, c->s ? c->s + i : NULL, c->y ? c->y + i : NULL, 16, c->x_first, c->even);
            continue;
        }
        __m512i idx = _mm512_cvtepu16_epi32(h);
        if (c->s) _mm512_storeu_ps(c->s + i, _mm512_i32gather_ps(idx, st, 4));
        if (c->y) _mm512_storeu_ps(c->y + i, _mm512_i32gather_ps(idx, yt, 4));
    }
    if (i < e1)
        sig16_rows_steps(c->x + i, c->s ? c->s + i : NULL, c->y ? c->y + i : NULL, e1 - i, c->x_first, c->even);
}

static void sig16_range(const void *cp, int64_t e0, int64_t e1)
{
    const sig16_ctx *c = cp;
    if (sig16_tab[0] && use_avx512()) {
        sig16_range_avx512(cp, e0, e1);
        return;
    }
    sig16_rows_steps(c->x + e0, c->s ? c->s + e0 : NULL, c->y ? c->y + e0 : NULL, e1 - e0, c->x_first, c->even);
}

/* SiLU in float16 math in place, on the calling thread: y = round(y * round(sigmoid(y))) (or
 * the other operand order): a product's or convolution's epilogue (csrc/kernels.c). */
void qe_ew_silu_f16_inplace(float *y, int64_t n, int x_first, int even)
{
    pthread_once(&sig16_once, sig16_init);
    sig16_ctx c = {y, NULL, y, x_first, even};
    sig16_range(&c, 0, n);
}

/* Sigmoid in float16 math: y = round(sigmoid(x)).  p: x, y; i: n, ties (0 away, 1 even). */
int qe_k_sigmoid_f16(const qe_args *a)
{
    if (a->np != 2 || a->ni != 2) return 1;
    pthread_once(&sig16_once, sig16_init);
    sig16_ctx c = {a->p[0], a->p[1], NULL, 1, (int)a->i[1] != 0};
    ew_parallel(sig16_range, &c, a->i[0], 0.15);
    return 0;
}

/* SiLU in float16 math (a Sigmoid and the Multiply of its input by it, each step rounding):
 * s = round(sigmoid(x)), y = round(x * s) (x_first) or round(s * x).  p: x, s, y; i: n,
 * x_first, ties (0 away, 1 even). */
int qe_k_silu_f16(const qe_args *a)
{
    if (a->np != 3 || a->ni != 3) return 1;
    pthread_once(&sig16_once, sig16_init);
    sig16_ctx c = {a->p[0], a->p[1], a->p[2], (int)a->i[1] != 0, (int)a->i[2] != 0};
    ew_parallel(sig16_range, &c, a->i[0], 0.2);
    return 0;
}

/* p: x, s (the Sigmoid's output; left out when nothing reads it), y (the Multiply's); i: n,
 * x_first (1: the Multiply computes x * s, 0: s * x). */
int qe_k_silu_f32(const qe_args *a)
{
    if ((a->np != 3 && a->np != 2) || a->ni != 2) return 1;
    silu_ctx c = {a->p[0], a->np == 3 ? a->p[1] : NULL, a->p[a->np - 1], (int)a->i[1]};
    ew_parallel(silu_range, &c, a->i[0], sig_fast_level() == 2 ? 0.6 : (sig_fast_level() ? 1.0 : 1.8));
    return 0;
}

/* ---- Softmax / LogSoftmax ---------------------------------------------------------------------- */
/* x viewed as [outer, len, inner], normalized along len: z = beta x (float64), m = max z,
 * e = exp(z - m), softmax e / sum(e), log-softmax (z - m) - log(sum(e)); NaN anywhere in a
 * row makes the row NaN (as numpy's max); a row of -inf is NaN too (-inf - -inf).  scratch: 2 len doubles. */
EW_INLINE void softmax_rows(const float *x, float *y, double *e, int64_t r0, int64_t r1, int64_t len,
                             int64_t inner, double beta, int log_form)
{
    double *z = e + len;   /* scratch: 2 len doubles */
    for (int64_t row = r0; row < r1; row++) {   /* row = o inner + in */
        {
            int64_t o = row / inner, in = row % inner;
            const float *xr = x + o * len * inner + in;
            float *yr = y + o * len * inner + in;
            double m = -INFINITY;
            int nan = 0;
            for (int64_t k = 0; k < len; k++) {
                double v = beta * (double)xr[k * inner];
                z[k] = v;
                m = v > m ? v : m;
                nan |= v != v;
            }
            if (nan) m = NAN;
            for (int64_t k = 0; k < len; k++) {
                z[k] -= m;
                e[k] = exp_d(z[k]);
            }
            /* eight partial sums in a vector (e >= 0: no cancellation, any order is as exact) */
            typedef double v8d __attribute__((vector_size(64)));
            v8d acc = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
            int64_t k = 0;
            for (; k + 8 <= len; k += 8) {
                v8d v;
                memcpy(&v, e + k, sizeof v);
                acc += v;
            }
            double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; k < len; k++) s += e[k];
            if (log_form) {
                double ls = log(s);
                for (int64_t k = 0; k < len; k++) yr[k * inner] = (float)(z[k] - ls);
            } else {
                double r = 1.0 / s;   /* (one division per row; the float32 result is unchanged
                                         * but where e / s is within 2^-52 of a float32 tie) */
                for (int64_t k = 0; k < len; k++) yr[k * inner] = (float)(e[k] * r);
            }
        }
    }
}

#define SOFTMAX_ARGS const float *x, float *y, double *e, int64_t r0, int64_t r1, int64_t len, \
                     int64_t inner, double beta, int log_form
static void softmax_base(SOFTMAX_ARGS) { softmax_rows(x, y, e, r0, r1, len, inner, beta, log_form); }
__attribute__((target("avx2"))) static void softmax_avx2(SOFTMAX_ARGS)
{
    softmax_rows(x, y, e, r0, r1, len, inner, beta, log_form);
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) static void softmax_avx512(SOFTMAX_ARGS)
{
    softmax_rows(x, y, e, r0, r1, len, inner, beta, log_form);
}

typedef struct {
    const float *x;
    float *y;
    double *e;            /* 2 len doubles of scratch for this piece */
    int64_t r0, r1, len, inner;
    double beta;
    int log_form;
} sm_job;

static void softmax_job(void *p)
{
    const sm_job *j = p;
    if (use_avx512()) softmax_avx512(j->x, j->y, j->e, j->r0, j->r1, j->len, j->inner, j->beta, j->log_form);
    else if (qe_isa()) softmax_avx2(j->x, j->y, j->e, j->r0, j->r1, j->len, j->inner, j->beta, j->log_form);
    else softmax_base(j->x, j->y, j->e, j->r0, j->r1, j->len, j->inner, j->beta, j->log_form);
}

/* Softmax / LogSoftmax of x viewed as [outer, len, inner] along len; e: scratch of 2 len doubles.
 * The rows are split over the pool's threads when there is enough work (each row is computed
 * alike whatever the split; the other pieces get scratch of their own). */
int qe_ew_softmax_f32(const float *x, float *y, double *e, int64_t outer, int64_t len,
                      int64_t inner, double beta, int log_form)
{
    if (len <= 0 || outer <= 0 || inner <= 0) return 0;
    int64_t rows = outer * inner;
    int T = ew_threads(rows, 3.0 * (double)len);
    if (T > rows) T = (int)rows;
    double *more = T > 1 ? malloc((size_t)(T - 1) * (size_t)(2 * len) * sizeof(double)) : NULL;
    if (!more) T = 1;
    sm_job jobs[64];
    int64_t per = (rows + T - 1) / T;
    int cnt = 0;
    for (int64_t r = 0; r < rows; r += per, cnt++)
        jobs[cnt] = (sm_job){x, y, cnt ? more + (cnt - 1) * 2 * len : e, r, r + per < rows ? r + per : rows,
                             len, inner, beta, log_form};
    if (cnt == 1) softmax_job(&jobs[0]);
    else qe_pool_run(softmax_job, jobs, sizeof jobs[0], cnt);
    free(more);
    return 0;
}

/* p: x, y, scratch (2 len doubles); i: outer, len, inner, log_form; d: beta. */
int qe_k_softmax_f32(const qe_args *a)
{
    if (a->np != 3 || a->ni != 4 || a->nd != 1) return 1;
    return qe_ew_softmax_f32(a->p[0], a->p[1], a->p[2], a->i[0], a->i[1], a->i[2], a->d[0],
                             (int)a->i[3]);
}

/* ---- LayerNorm, RmsNorm, InstanceNorm, GroupNorm ------------------------------------------------ */
/* x viewed as [nb, ns, ng, ncg]: statistics per (b, g) over (s, cg), in float64 (group_sum's
 * order) -- the mean
 * (center), then the mean of squared deviations (scale): v = x - mean, v / sqrt(ms + eps) --
 * then * gamma[g ncg + cg] and + beta[g ncg + cg] (float64 vectors, NULL: none), rounded once to
 * float32.  The layouts of qnnemu/ops/norm.py: LayerNorm / RmsNorm over the last axes
 * [outer, 1, 1, n]; InstanceNorm across spatial [b, s, c, 1], across channel [b s, 1, 1, c],
 * across all [b, s, 1, c]; GroupNorm [b, s, group, c / group]. */
typedef struct {
    const float *x;
    float *y;
    const double *gamma, *beta;
    int64_t ns, ng, ncg;
    double eps;
    int center, scale;
} norm_ctx;

/* The sum over a group's elements (rows s of ncg values, stride apart) of v = x - mean, or of
 * v * v (squares): element t of the group (in row order) goes to partial sum t % 8, the eight
 * combined pairwise at the end -- a fixed order whatever the layout, vectorized for rows of a
 * multiple of 8 (a sequential float64 sum waits on every add). */
EW_INLINE double group_sum(const float *xb, int64_t ns, int64_t stride, int64_t ncg, double mean,
                           int squares)
{
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t t = 0;
    for (int64_t s_ = 0; s_ < ns; s_++) {
        const float *xr = xb + s_ * stride;
        if ((ncg & 7) == 0) {   /* t stays a multiple of 8: lane l */
            for (int64_t k = 0; k < ncg; k += 8)
                for (int l = 0; l < 8; l++) {
                    double v = (double)xr[k + l] - mean;
                    acc[l] += squares ? v * v : v;
                }
        } else {
            for (int64_t k = 0; k < ncg; k++) {
                double v = (double)xr[k] - mean;
                acc[(t + k) & 7] += squares ? v * v : v;
            }
        }
        t += ncg;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The (b, g) groups [q0, q1), q = b ng + g. */
EW_INLINE void norm_body(const norm_ctx *c, int64_t q0, int64_t q1)
{
    int64_t ns = c->ns, ng = c->ng, ncg = c->ncg, count = ns * ncg;
    for (int64_t q = q0; q < q1; q++) {
        int64_t b = q / ng, g = q % ng;
        {
            const float *xb = c->x + b * ns * ng * ncg + g * ncg;
            float *yb = c->y + b * ns * ng * ncg + g * ncg;
            double mean = 0.0, inv = 1.0;
            if (c->center) mean = group_sum(xb, ns, ng * ncg, ncg, 0.0, 0) / (double)count;
            if (c->scale) inv = 1.0 / sqrt(group_sum(xb, ns, ng * ncg, ncg, mean, 1) / (double)count + c->eps);
            const double *gr = c->gamma ? c->gamma + g * ncg : NULL;
            const double *br = c->beta ? c->beta + g * ncg : NULL;
            for (int64_t s_ = 0; s_ < ns; s_++) {
                const float *xr = xb + s_ * ng * ncg;
                float *yr = yb + s_ * ng * ncg;
                for (int64_t k = 0; k < ncg; k++) {
                    double v = ((double)xr[k] - mean) * inv;
                    if (gr) v *= gr[k];
                    if (br) v += br[k];
                    yr[k] = (float)v;
                }
            }
        }
    }
}

static void norm_base(const norm_ctx *c, int64_t q0, int64_t q1) { norm_body(c, q0, q1); }
__attribute__((target("avx2"))) static void norm_avx2(const norm_ctx *c, int64_t q0, int64_t q1)
{
    norm_body(c, q0, q1);
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) static void norm_avx512(const norm_ctx *c,
                                                                            int64_t q0, int64_t q1)
{
    norm_body(c, q0, q1);
}

static void norm_range(const void *cp, int64_t q0, int64_t q1)
{
    if (use_avx512()) norm_avx512(cp, q0, q1);
    else if (qe_isa()) norm_avx2(cp, q0, q1);
    else norm_base(cp, q0, q1);
}

/* The groups are split over the pool's threads when there is enough work (each group is
 * computed alike whatever the split: its sums stay sequential). */
int qe_ew_norm_f32(const float *x, float *y, const double *gamma, const double *beta, int64_t nb,
                   int64_t ns, int64_t ng, int64_t ncg, double eps, int center, int scale)
{
    int64_t count = ns * ncg;
    if (count <= 0 || nb <= 0 || ng <= 0) return 0;
    norm_ctx c = {x, y, gamma, beta, ns, ng, ncg, eps, center, scale};
    ew_parallel_items(norm_range, &c, nb * ng, 3.0 * (double)count, 1);
    return 0;
}

/* p: x, y, gamma (float64, or any buffer when flag bit 2 is clear), beta (likewise); i: nb, ns,
 * ng, ncg, flags (1 center, 2 scale, 4 gamma, 8 beta); d: eps. */
int qe_k_norm_f32(const qe_args *a)
{
    if (a->np != 4 || a->ni != 5 || a->nd != 1) return 1;
    int64_t f = a->i[4];
    return qe_ew_norm_f32(a->p[0], a->p[1], (f & 4) ? a->p[2] : NULL, (f & 8) ? a->p[3] : NULL,
                          a->i[0], a->i[1], a->i[2], a->i[3], a->d[0], (int)(f & 1),
                          (int)((f >> 1) & 1));
}

/* ---- INT_32 / UINT_32 element-wise ops (numpy's integer arithmetic in qnnemu/ops/elementwise.py) -- */
/* Wrapping like the C types (computed unsigned); division, floor division, fmod and mod by 0
 * give 0; INT32_MIN / -1 wraps to INT32_MIN (numpy's floor_divide). */
EW_INLINE int32_t i32_wrap(uint32_t v) { int32_t r; memcpy(&r, &v, 4); return r; }
EW_INLINE int32_t i32_floordiv(int32_t a, int32_t b)
{
    if (b == 0) return 0;
    if (b == -1) return i32_wrap(0u - (uint32_t)a);
    int32_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
EW_INLINE int32_t i32_truncdiv(int32_t a, int32_t b)
{
    if (b == 0) return 0;
    if (b == -1) return i32_wrap(0u - (uint32_t)a);
    return a / b;
}
EW_INLINE int32_t i32_fmod(int32_t a, int32_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
EW_INLINE int32_t i32_mod(int32_t a, int32_t b)
{
    if (b == 0 || b == -1) return 0;
    int32_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#define IBIN_ROW(TIN, TOUT, EXPR)                                                                 \
    do {                                                                                          \
        const TIN *a_ = (const TIN *)av, *b_ = (const TIN *)bv;                                   \
        TOUT *y_ = (TOUT *)yv;                                                                    \
        for (int64_t i = 0; i < n; i++) { TIN x0 = a_[i * sa], x1 = b_[i * sb]; y_[i] = (EXPR); } \
    } while (0)

EW_INLINE void ibin_row(int op, int is_signed, const void *av, const void *bv, void *yv, int64_t n,
                        int64_t sa, int64_t sb)
{
    if (is_signed) {
        switch (op) {
        case QE_BIN_ADD: IBIN_ROW(int32_t, int32_t, i32_wrap((uint32_t)x0 + (uint32_t)x1)); break;
        case QE_BIN_SUB: IBIN_ROW(int32_t, int32_t, i32_wrap((uint32_t)x0 - (uint32_t)x1)); break;
        case QE_BIN_MUL: IBIN_ROW(int32_t, int32_t, i32_wrap((uint32_t)x0 * (uint32_t)x1)); break;
        case QE_BIN_DIV: IBIN_ROW(int32_t, int32_t, i32_truncdiv(x0, x1)); break;
        case QE_BIN_MAX: IBIN_ROW(int32_t, int32_t, x0 > x1 ? x0 : x1); break;
        case QE_BIN_MIN: IBIN_ROW(int32_t, int32_t, x0 < x1 ? x0 : x1); break;
        case QE_BIN_SQDIFF:
            IBIN_ROW(int32_t, int32_t, i32_wrap(((uint32_t)x0 - (uint32_t)x1) * ((uint32_t)x0 - (uint32_t)x1)));
            break;
        case QE_BIN_FLOORDIV: IBIN_ROW(int32_t, int32_t, i32_floordiv(x0, x1)); break;
        case QE_BIN_FMOD: IBIN_ROW(int32_t, int32_t, i32_fmod(x0, x1)); break;
        case QE_BIN_MOD: IBIN_ROW(int32_t, int32_t, i32_mod(x0, x1)); break;
        case QE_BIN_EQ: IBIN_ROW(int32_t, uint8_t, x0 == x1); break;
        case QE_BIN_NE: IBIN_ROW(int32_t, uint8_t, x0 != x1); break;
        case QE_BIN_GT: IBIN_ROW(int32_t, uint8_t, x0 > x1); break;
        case QE_BIN_GE: IBIN_ROW(int32_t, uint8_t, x0 >= x1); break;
        case QE_BIN_LT: IBIN_ROW(int32_t, uint8_t, x0 < x1); break;
        case QE_BIN_LE: IBIN_ROW(int32_t, uint8_t, x0 <= x1); break;
        default: break;
        }
    } else {
        switch (op) {
        case QE_BIN_ADD: IBIN_ROW(uint32_t, uint32_t, x0 + x1); break;
        case QE_BIN_SUB: IBIN_ROW(uint32_t, uint32_t, x0 - x1); break;
        case QE_BIN_MUL: IBIN_ROW(uint32_t, uint32_t, x0 * x1); break;
        case QE_BIN_DIV: case QE_BIN_FLOORDIV: IBIN_ROW(uint32_t, uint32_t, x1 ? x0 / x1 : 0u); break;
        case QE_BIN_MAX: IBIN_ROW(uint32_t, uint32_t, x0 > x1 ? x0 : x1); break;
        case QE_BIN_MIN: IBIN_ROW(uint32_t, uint32_t, x0 < x1 ? x0 : x1); break;
        case QE_BIN_SQDIFF: IBIN_ROW(uint32_t, uint32_t, (x0 - x1) * (x0 - x1)); break;
        case QE_BIN_FMOD: case QE_BIN_MOD: IBIN_ROW(uint32_t, uint32_t, x1 ? x0 % x1 : 0u); break;
        case QE_BIN_EQ: IBIN_ROW(uint32_t, uint8_t, x0 == x1); break;
        case QE_BIN_NE: IBIN_ROW(uint32_t, uint8_t, x0 != x1); break;
        case QE_BIN_GT: IBIN_ROW(uint32_t, uint8_t, x0 > x1); break;
        case QE_BIN_GE: IBIN_ROW(uint32_t, uint8_t, x0 >= x1); break;
        case QE_BIN_LT: IBIN_ROW(uint32_t, uint8_t, x0 < x1); break;
        case QE_BIN_LE: IBIN_ROW(uint32_t, uint8_t, x0 <= x1); break;
        default: break;
        }
    }
}

/* p: in[0], in[1], out; i: op, signed (1: INT_32, 0: UINT_32), rank r, out shape[r],
 * in[0] strides[r], in[1] strides[r]. */
int qe_k_binary_i32(const qe_args *a)
{
    if (a->np != 3 || a->ni < 3) return 1;
    int op = (int)a->i[0], is_signed = (int)a->i[1], r = (int)a->i[2];
    if (op < 0 || op >= QE_BIN_COUNT || op == QE_BIN_PRELU || op == QE_BIN_POW) return 2;
    if (r < 1 || r > 8 || a->ni != 3 + 3 * r) return 2;
    const int64_t *d = a->i + 3, *sa = d + r, *sb = sa + r;
    for (int k = 0; k < r; k++)
        if (d[k] == 0) return 0;
    int out_size = op >= QE_BIN_FIRST_COMPARE ? 1 : 4;
    const char *pa = a->p[0], *pb = a->p[1];
    char *py = a->p[2];
    int64_t idx[8] = {0}, rows = 1, n = d[r - 1], oa = 0, ob = 0;
    for (int k = 0; k < r - 1; k++) rows *= d[k];
    for (int64_t row = 0; row < rows; row++) {
        ibin_row(op, is_signed, pa + oa * 4, pb + ob * 4, py + row * n * out_size, n, sa[r - 1],
                 sb[r - 1]);
        for (int k = r - 2; k >= 0; k--) {
            oa += sa[k];
            ob += sb[k];
            if (++idx[k] < d[k]) break;
            oa -= sa[k] * d[k];
            ob -= sb[k] * d[k];
            idx[k] = 0;
        }
    }
    return 0;
}

/* p: x, y; i: op (QE_UN_NEG, QE_UN_ABS, QE_UN_SIGN), signed, n. */
int qe_k_unary_i32(const qe_args *a)
{
    if (a->np != 2 || a->ni != 3) return 1;
    int op = (int)a->i[0], is_signed = (int)a->i[1];
    int64_t n = a->i[2];
    if (is_signed) {
        const int32_t *x = a->p[0];
        int32_t *y = a->p[1];
        switch (op) {
        case QE_UN_NEG: for (int64_t i = 0; i < n; i++) y[i] = i32_wrap(0u - (uint32_t)x[i]); break;
        case QE_UN_ABS:
            for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? i32_wrap(0u - (uint32_t)x[i]) : x[i];
            break;
        case QE_UN_SIGN: for (int64_t i = 0; i < n; i++) y[i] = (x[i] > 0) - (x[i] < 0); break;
        default: return 2;
        }
    } else {
        const uint32_t *x = a->p[0];
        uint32_t *y = a->p[1];
        switch (op) {
        case QE_UN_NEG: for (int64_t i = 0; i < n; i++) y[i] = 0u - x[i]; break;
        case QE_UN_ABS: for (int64_t i = 0; i < n; i++) y[i] = x[i]; break;
        case QE_UN_SIGN: for (int64_t i = 0; i < n; i++) y[i] = x[i] != 0; break;
        default: return 2;
        }
    }
    return 0;
}

/* The ISA paths this family takes here (qnnemu/core/engine/isa.py asks every qe_<family>_isa). */
int qe_eltwise_isa(char *buf, int n)
{
    const char *unary = use_avx512() ? "avx512f+dq+vl" : (qe_isa() ? "avx2" : "sse4.2");
    const char *binary = qe_isa() ? "avx2" : "sse4.2";
    const char *fixed = ew_level() == 2 ? "avx512f+bw+dq+vl" : (ew_level() == 1 ? "avx2" : "sse4.2");
    const char *sigmoid = sig_fast_level() == 2 ? "avx512f+dq+vl" : (sig_fast_level() ? "avx2+fma" : "scalar");
    return snprintf(buf, (size_t)n,
                    "unary/softmax/gelu/norm %s (float32 Sigmoid %s), binary %s, fixed-point binary %s, 8-bit tables %s",
                    unary, sigmoid, binary, fixed, ew_vbmi() ? "avx512vbmi" : "scalar");
}

/* ==== fixed-point element-wise steps (8/16-bit codes in and out) ================================ */
/* The plan computes such a step as dequantize -> float32 op -> requantize (qnnemu/core/plan.py:
 * Dequantizer, the op, Requantize).  Two kernels do it without float32 temporaries:
 * - qe_k_lut: a per-element unary op as a table of output codes indexed by the input code,
 *   built at finalize by running the plan's own step on every code (lower_eltwise.py), so it
 *   is the plan's result by construction;
 * - qe_k_qbinary: add / sub / mul / div / max / min of two operands (codes, dequantized as
 *   Dequantizer does, or float32 values) requantized as Requantize does, in one pass per
 *   block of elements, with the same float32 operations in the same order.
 * Large tensors are split over the pool's threads (qe_pool_run); every element is computed
 * the same way whatever the split. */
/* ---- qe_k_lut ---------------------------------------------------------------------------------- */
typedef struct { const void *x; const void *table; void *y; int in_bytes, out_bytes; } lut_ctx;

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void lut8_vbmi(const uint8_t *x,
                                                                          const uint8_t *t,
                                                                          uint8_t *y, int64_t n)
{
    __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    __m512i t2 = _mm512_loadu_si512(t + 128), t3 = _mm512_loadu_si512(t + 192);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i v = _mm512_loadu_si512(x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);   /* entries 0..127 by bits 0-6 */
        __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);   /* entries 128..255 */
        __mmask64 top = _mm512_movepi8_mask(v);             /* bit 7 */
        _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(top, lo, hi));
    }
    if (i < n) {
        __mmask64 m = (__mmask64)(~0ULL >> (64 - (n - i)));
        __m512i v = _mm512_maskz_loadu_epi8(m, x + i);
        __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
        __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
        __mmask64 top = _mm512_movepi8_mask(v);
        _mm512_mask_storeu_epi8(y + i, m, _mm512_mask_blend_epi8(top, lo, hi));
    }
}

#define LUT_LOOP(TIN, TOUT)                                                                       \
    do {                                                                                          \
        const TIN *x_ = (const TIN *)c->x + e0;                                                   \
        const TOUT *t_ = (const TOUT *)c->table;                                                  \
        TOUT *y_ = (TOUT *)c->y + e0;                                                             \
        int64_t n_ = e1 - e0, i_ = 0;                                                             \
        for (; i_ + 4 <= n_; i_ += 4) {                                                           \
            TOUT v0 = t_[x_[i_]], v1 = t_[x_[i_ + 1]], v2 = t_[x_[i_ + 2]], v3 = t_[x_[i_ + 3]];  \
            y_[i_] = v0; y_[i_ + 1] = v1; y_[i_ + 2] = v2; y_[i_ + 3] = v3;                       \
        }                                                                                         \
        for (; i_ < n_; i_++) y_[i_] = t_[x_[i_]];                                                \
    } while (0)

static void lut_range(const void *ctxp, int64_t e0, int64_t e1)
{
    const lut_ctx *c = ctxp;
    if (c->in_bytes == 1 && c->out_bytes == 1) {
        if (ew_vbmi()) lut8_vbmi((const uint8_t *)c->x + e0, c->table, (uint8_t *)c->y + e0, e1 - e0);
        else LUT_LOOP(uint8_t, uint8_t);
    } else if (c->in_bytes == 1) {
        LUT_LOOP(uint8_t, uint16_t);
    } else if (c->out_bytes == 1) {
        LUT_LOOP(uint16_t, uint8_t);
    } else {
        LUT_LOOP(uint16_t, uint16_t);
    }
}

/* y[k] = table[x[k]] with x's codes read as unsigned (the table has 2**(8 in_bytes) entries of
 * out_bytes each).  p: x, table, y; i: n, in_bytes (1 / 2), out_bytes (1 / 2). */
int qe_k_lut(const qe_args *a)
{
    if (a->np != 3 || a->ni != 3) return 1;
    int64_t n = a->i[0];
    int ib = (int)a->i[1], ob = (int)a->i[2];
    if ((ib != 1 && ib != 2) || (ob != 1 && ob != 2) || n < 0) return 2;
    lut_ctx c = {a->p[0], a->p[1], a->p[2], ib, ob};
    double ns = ib == 1 && ob == 1 && ew_vbmi() ? 0.02 : 0.5;
    ew_parallel(lut_range, &c, n, ns);
    return 0;
}

/* ---- qe_k_qbinary ------------------------------------------------------------------------------ */
#define QB_BLOCK 512

typedef struct {
    const void *a, *b;
    void *y;
    int op, ta, tb, to, mode, rank;
    float sa_, oa, sb_, ob, inv, oy, lo, hi;
    const int64_t *d, *sa, *sb;
} qb_ctx;

/* n operand values as the op receives them: codes dequantized as Dequantizer does
 * (((float)q + offset) * scale), or float32 values; element stride s (0: broadcast). */
EW_INLINE void qb_load(int t, const void *p, int64_t s, int64_t n, float sc, float of, float *o)
{
#define QB_LOAD(T)                                                                                \
    do {                                                                                          \
        const T *q = p;                                                                           \
        if (s == 1) {                                                                             \
            for (int64_t i = 0; i < n; i++) { float v = (float)q[i]; v += of; o[i] = v * sc; }    \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) { float v = (float)q[i * s]; v += of; o[i] = v * sc; } \
        }                                                                                         \
    } while (0)
    switch (t) {
    case QE_U8: QB_LOAD(uint8_t); break;
    case QE_I8: QB_LOAD(int8_t); break;
    case QE_U16: QB_LOAD(uint16_t); break;
    case QE_I16: QB_LOAD(int16_t); break;
    default: {
        const float *f = p;
        if (s == 1) memcpy(o, f, (size_t)n * sizeof(float));
        else for (int64_t i = 0; i < n; i++) o[i] = f[i * s];
    }
    }
#undef QB_LOAD
}

/* fa = fa op fb: the float32 arithmetic of bin_row. */
EW_INLINE void qb_op(int op, float *fa, const float *fb, int64_t n)
{
    switch (op) {
    case QE_BIN_ADD: for (int64_t i = 0; i < n; i++) fa[i] = fa[i] + fb[i]; break;
    case QE_BIN_SUB: for (int64_t i = 0; i < n; i++) fa[i] = fa[i] - fb[i]; break;
    case QE_BIN_MUL: for (int64_t i = 0; i < n; i++) fa[i] = fa[i] * fb[i]; break;
    case QE_BIN_DIV: for (int64_t i = 0; i < n; i++) fa[i] = fa[i] / fb[i]; break;
    case QE_BIN_MAX: for (int64_t i = 0; i < n; i++) fa[i] = np_maxf(fa[i], fb[i]); break;
    case QE_BIN_MIN: for (int64_t i = 0; i < n; i++) fa[i] = np_minf(fa[i], fb[i]); break;
    default: break;
    }
}

/* Requantize's per-tensor float32 path: y = x * inv, rounded (mode 0 half to even, 1 half up,
 * 2 half away from zero), - offset, fmin(y, hi) (NaN -> hi), max(y, lo), to the code type. */
EW_INLINE void qb_store(int t, int mode, const float *x, int64_t n, float inv, float of, float lo,
                        float hi, void *out)
{
#define QB_STORE(T, ROUND)                                                                        \
    do {                                                                                          \
        T *o = out;                                                                               \
        for (int64_t i = 0; i < n; i++) {                                                         \
            float y = x[i] * inv;                                                                 \
            y = ROUND;                                                                            \
            y -= of;                                                                              \
            y = y < hi ? y : hi;                                                                  \
            y = y < lo ? lo : y;                                                                  \
            o[i] = (T)(int32_t)y;                                                                 \
        }                                                                                         \
    } while (0)
#define QB_STORE_MODES(T)                                                                         \
    do {                                                                                          \
        if (mode == 0) QB_STORE(T, rintf(y));                                                     \
        else if (mode == 1) QB_STORE(T, floorf(y + 0.5f));                                        \
        else QB_STORE(T, truncf(y + copysignf(0.5f, y)));                                         \
    } while (0)
    switch (t) {
    case QE_U8: QB_STORE_MODES(uint8_t); break;
    case QE_I8: QB_STORE_MODES(int8_t); break;
    case QE_U16: QB_STORE_MODES(uint16_t); break;
    default: QB_STORE_MODES(int16_t); break;
    }
#undef QB_STORE_MODES
#undef QB_STORE
}

static int qe_type_bytes(int t) { return t == QE_U8 || t == QE_I8 ? 1 : (t == QE_F32 ? 4 : 2); }

/* Output elements [e0, e1): row by row of the merged broadcast layout, in blocks. */
EW_INLINE void qb_range_body(const qb_ctx *c, int64_t e0, int64_t e1)
{
    float fa[QB_BLOCK] __attribute__((aligned(64))), fb[QB_BLOCK] __attribute__((aligned(64)));
    int r = c->rank;
    int64_t inner = c->d[r - 1], sa1 = c->sa[r - 1], sb1 = c->sb[r - 1];
    int ba = qe_type_bytes(c->ta), bb = qe_type_bytes(c->tb), by = qe_type_bytes(c->to);
    int64_t row = e0 / inner, col = e0 % inner;
    int64_t idx[8] = {0}, oa = 0, ob = 0, rest = row;
    for (int k = r - 2; k >= 0; k--) {   /* the row's index over the outer dimensions */
        idx[k] = rest % c->d[k];
        rest /= c->d[k];
        oa += idx[k] * c->sa[k];
        ob += idx[k] * c->sb[k];
    }
    int64_t e = e0;
    while (e < e1) {
        int64_t stop = e + (inner - col) < e1 ? e + (inner - col) : e1;
        for (int64_t p = e; p < stop; p += QB_BLOCK) {
            int64_t n = stop - p < QB_BLOCK ? stop - p : QB_BLOCK;
            int64_t cc = col + (p - e);
            qb_load(c->ta, (const char *)c->a + (oa + cc * sa1) * ba, sa1, n, c->sa_, c->oa, fa);
            qb_load(c->tb, (const char *)c->b + (ob + cc * sb1) * bb, sb1, n, c->sb_, c->ob, fb);
            qb_op(c->op, fa, fb, n);
            qb_store(c->to, c->mode, fa, n, c->inv, c->oy, c->lo, c->hi, (char *)c->y + p * by);
        }
        e = stop;
        col = 0;
        for (int k = r - 2; k >= 0; k--) {   /* odometer: the next row */
            oa += c->sa[k];
            ob += c->sb[k];
            if (++idx[k] < c->d[k]) break;
            oa -= c->sa[k] * c->d[k];
            ob -= c->sb[k] * c->d[k];
            idx[k] = 0;
        }
    }
}

/* How an operand's elements follow the output's in the merged layout. */
enum { QB_GENERAL = 0, QB_FLAT, QB_ROW, QB_SCALAR };
#define QB_TILE 4096   /* longest row a QB_ROW operand is tiled for */

static int qb_kind(int r, const int64_t *d, const int64_t *s)
{
    int64_t cs = 1;
    int flat = 1, zero_outer = 1;
    for (int k = r - 1; k >= 0; k--) {
        if (s[k] != cs && d[k] != 1) flat = 0;
        if (k < r - 1 && s[k] != 0 && d[k] != 1) zero_outer = 0;
        cs *= d[k];
    }
    if (flat) return QB_FLAT;
    if (zero_outer && (s[r - 1] == 0 || d[r - 1] == 1)) return QB_SCALAR;
    if (zero_outer && s[r - 1] == 1 && d[r - 1] <= QB_TILE) return QB_ROW;
    return QB_GENERAL;
}

/* Both operands flat, a repeated row (the SE blocks' [1,1,1,C]) or a scalar: the output as one
 * flat run in blocks; a repeated operand is dequantized once into a tile as long as a block
 * plus a row, and each block reads it from (element % row length). */
EW_INLINE void qb_flat_body(const qb_ctx *c, int ka, int kb, int64_t e0, int64_t e1)
{
    float fa[QB_BLOCK] __attribute__((aligned(64))), fb[QB_BLOCK] __attribute__((aligned(64)));
    float ta[QB_TILE + QB_BLOCK] __attribute__((aligned(64)));
    float tb[QB_TILE + QB_BLOCK] __attribute__((aligned(64)));
    int r = c->rank;
    int64_t inner = c->d[r - 1];
    int ba = qe_type_bytes(c->ta), bb = qe_type_bytes(c->tb), by = qe_type_bytes(c->to);
    const int kinds[2] = {ka, kb};
    float *tiles[2] = {ta, tb};
    for (int o = 0; o < 2; o++) {
        if (kinds[o] == QB_FLAT) continue;
        int t = o ? c->tb : c->ta;
        const void *src = o ? c->b : c->a;
        float sc = o ? c->sb_ : c->sa_, of = o ? c->ob : c->oa;
        int64_t len = kinds[o] == QB_ROW ? inner : 1;
        qb_load(t, src, kinds[o] == QB_ROW ? 1 : 0, len, sc, of, tiles[o]);
        for (int64_t k = len; k < len + QB_BLOCK; k++) tiles[o][k] = tiles[o][k - len];
    }
    for (int64_t p = e0; p < e1; p += QB_BLOCK) {
        int64_t n = e1 - p < QB_BLOCK ? e1 - p : QB_BLOCK;
        float *pa = fa;
        const float *pb = fb;
        if (ka == QB_FLAT) qb_load(c->ta, (const char *)c->a + p * ba, 1, n, c->sa_, c->oa, fa);
        else if (ka == QB_ROW) memcpy(fa, ta + p % inner, (size_t)n * sizeof(float));
        else memcpy(fa, ta, (size_t)n * sizeof(float));
        if (kb == QB_FLAT) qb_load(c->tb, (const char *)c->b + p * bb, 1, n, c->sb_, c->ob, fb);
        else if (kb == QB_ROW) pb = tb + p % inner;
        else pb = tb;
        qb_op(c->op, pa, pb, n);
        qb_store(c->to, c->mode, pa, n, c->inv, c->oy, c->lo, c->hi, (char *)c->y + p * by);
    }
}

static void qb_range_base(const qb_ctx *c, int64_t e0, int64_t e1) { qb_range_body(c, e0, e1); }
__attribute__((target("avx2"))) static void qb_range_avx2(const qb_ctx *c, int64_t e0, int64_t e1)
{
    qb_range_body(c, e0, e1);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
qb_range_avx512(const qb_ctx *c, int64_t e0, int64_t e1)
{
    qb_range_body(c, e0, e1);
}
static void qb_flat_base(const qb_ctx *c, int ka, int kb, int64_t e0, int64_t e1)
{
    qb_flat_body(c, ka, kb, e0, e1);
}
__attribute__((target("avx2"))) static void qb_flat_avx2(const qb_ctx *c, int ka, int kb, int64_t e0,
                                                         int64_t e1)
{
    qb_flat_body(c, ka, kb, e0, e1);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
qb_flat_avx512(const qb_ctx *c, int ka, int kb, int64_t e0, int64_t e1)
{
    qb_flat_body(c, ka, kb, e0, e1);
}

static void qb_range(const void *ctxp, int64_t e0, int64_t e1)
{
    const qb_ctx *c = ctxp;
    int l = ew_level();
    int ka = qb_kind(c->rank, c->d, c->sa), kb = qb_kind(c->rank, c->d, c->sb);
    if (ka != QB_GENERAL && kb != QB_GENERAL) {
        if (l == 2) qb_flat_avx512(c, ka, kb, e0, e1);
        else if (l == 1) qb_flat_avx2(c, ka, kb, e0, e1);
        else qb_flat_base(c, ka, kb, e0, e1);
        return;
    }
    if (l == 2) qb_range_avx512(c, e0, e1);
    else if (l == 1) qb_range_avx2(c, e0, e1);
    else qb_range_base(c, e0, e1);
}

/* y = requantize(dequantize(a) op dequantize(b)) with broadcasting.
 * p: a, b, y; i: op (QE_BIN_ADD .. QE_BIN_MIN), a type, b type (QE_U8 / I8 / U16 / I16 codes,
 * or QE_F32 values), y type (8/16-bit codes), rounding mode (0 half even, 1 half up, 2 half
 * away from zero), lo, hi, rank r, out dims[r], a strides[r], b strides[r] (elements, 0 where
 * broadcast); d: a scale, a offset, b scale, b offset (float32 values; unused for QE_F32),
 * 1 / y scale, y offset (float32 values). */
int qe_k_qbinary(const qe_args *a)
{
    if (a->np != 3 || a->ni < 8 || a->nd != 6) return 1;
    int r = (int)a->i[7];
    if (r < 1 || r > 8 || a->ni != 8 + 3 * r) return 2;
    qb_ctx c = {a->p[0], a->p[1], a->p[2], (int)a->i[0], (int)a->i[1], (int)a->i[2], (int)a->i[3],
                (int)a->i[4], r, (float)a->d[0], (float)a->d[1], (float)a->d[2], (float)a->d[3],
                (float)a->d[4], (float)a->d[5], (float)a->i[5], (float)a->i[6], a->i + 8,
                a->i + 8 + r, a->i + 8 + 2 * r};
    if (c.op < QE_BIN_ADD || c.op > QE_BIN_MIN || c.mode < 0 || c.mode > 2) return 2;
    if (c.to > QE_I16 || c.to < QE_U8) return 2;
    for (int k = 0; k < 2; k++) {
        int t = k ? c.tb : c.ta;
        if (!(t >= QE_U8 && t <= QE_I16) && t != QE_F32) return 2;
    }
    int64_t n = 1;
    for (int k = 0; k < r; k++) n *= c.d[k];
    if (n <= 0) return 0;
    ew_parallel(qb_range, &c, n, 0.6);
    return 0;
}

/* ---- qe_k_iadd: plan.IntegerAdd (the HTP's ElementWiseAdd on 8/16-bit codes) ------------------- */
/* IntegerAdd.run in float64: acc = a * m_a; acc = acc + b * m_b; y = floor(acc + (const + 0.5)),
 * clipped to [lo, hi].  The arguments of qe_k_qadd (csrc/eng_qgemm.c, the same arithmetic row by
 * row); here flat, repeated-row and scalar operands run as one flat pass in blocks (a repeated
 * operand's products computed once per thread), the rest row by row. */
typedef struct {
    const void *a, *b;
    void *y;
    int ta, tb, to, rank;
    double lo, hi, ma, mb, c05;
    const int64_t *d, *sa, *sb;
} ia_ctx;

/* v[i] = (double)code[i * s] * m: the operand's product as IntegerAdd computes it. */
EW_INLINE void ia_load(int t, const void *p, int64_t s, int64_t n, double m, double *v)
{
#define IA_LOAD(T)                                                                                \
    do {                                                                                          \
        const T *q = p;                                                                           \
        if (s == 1) for (int64_t i = 0; i < n; i++) v[i] = (double)q[i] * m;                      \
        else for (int64_t i = 0; i < n; i++) v[i] = (double)q[i * s] * m;                         \
    } while (0)
    switch (t) {
    case QE_U8: IA_LOAD(uint8_t); break;
    case QE_I8: IA_LOAD(int8_t); break;
    case QE_U16: IA_LOAD(uint16_t); break;
    default: IA_LOAD(int16_t); break;
    }
#undef IA_LOAD
}

EW_INLINE void ia_store(int t, const double *pa, const double *pb, int64_t n, double c05, double lo,
                        double hi, void *out)
{
#define IA_STORE(T)                                                                               \
    do {                                                                                          \
        T *o = out;                                                                               \
        for (int64_t i = 0; i < n; i++) {                                                         \
            double acc = pa[i] + pb[i];                                                           \
            double v = floor(acc + c05);                                                          \
            v = v < lo ? lo : v;                                                                  \
            v = v > hi ? hi : v;                                                                  \
            o[i] = (T)(int32_t)v;                                                                 \
        }                                                                                         \
    } while (0)
    switch (t) {
    case QE_U8: IA_STORE(uint8_t); break;
    case QE_I8: IA_STORE(int8_t); break;
    case QE_U16: IA_STORE(uint16_t); break;
    default: IA_STORE(int16_t); break;
    }
#undef IA_STORE
}

EW_INLINE void ia_flat_body(const ia_ctx *c, int ka, int kb, double *ta, double *tb, int64_t e0,
                            int64_t e1)
{
    double fa[QB_BLOCK] __attribute__((aligned(64))), fb[QB_BLOCK] __attribute__((aligned(64)));
    int64_t inner = c->d[c->rank - 1];
    int ba = qe_type_bytes(c->ta), bb = qe_type_bytes(c->tb), by = qe_type_bytes(c->to);
    for (int o = 0; o < 2; o++) {
        int kind = o ? kb : ka;
        if (kind == QB_FLAT) continue;
        double *tile = o ? tb : ta;
        int64_t len = kind == QB_ROW ? inner : 1;
        ia_load(o ? c->tb : c->ta, o ? c->b : c->a, kind == QB_ROW ? 1 : 0, len, o ? c->mb : c->ma, tile);
        for (int64_t k = len; k < len + QB_BLOCK; k++) tile[k] = tile[k - len];
    }
    for (int64_t p = e0; p < e1; p += QB_BLOCK) {
        int64_t n = e1 - p < QB_BLOCK ? e1 - p : QB_BLOCK;
        const double *pa = fa, *pb = fb;
        if (ka == QB_FLAT) ia_load(c->ta, (const char *)c->a + p * ba, 1, n, c->ma, fa);
        else pa = ka == QB_ROW ? ta + p % inner : ta;
        if (kb == QB_FLAT) ia_load(c->tb, (const char *)c->b + p * bb, 1, n, c->mb, fb);
        else pb = kb == QB_ROW ? tb + p % inner : tb;
        ia_store(c->to, pa, pb, n, c->c05, c->lo, c->hi, (char *)c->y + p * by);
    }
}

/* Elements [e0, e1) row by row (any broadcast). */
EW_INLINE void ia_rows_body(const ia_ctx *c, int64_t e0, int64_t e1)
{
    double fa[QB_BLOCK] __attribute__((aligned(64))), fb[QB_BLOCK] __attribute__((aligned(64)));
    int r = c->rank;
    int64_t inner = c->d[r - 1], sa1 = c->sa[r - 1], sb1 = c->sb[r - 1];
    int ba = qe_type_bytes(c->ta), bb = qe_type_bytes(c->tb), by = qe_type_bytes(c->to);
    int64_t row = e0 / inner, col = e0 % inner;
    int64_t idx[8] = {0}, oa = 0, ob = 0, rest = row;
    for (int k = r - 2; k >= 0; k--) {
        idx[k] = rest % c->d[k];
        rest /= c->d[k];
        oa += idx[k] * c->sa[k];
        ob += idx[k] * c->sb[k];
    }
    for (int64_t e = e0; e < e1;) {
        int64_t stop = e + (inner - col) < e1 ? e + (inner - col) : e1;
        for (int64_t p = e; p < stop; p += QB_BLOCK) {
            int64_t n = stop - p < QB_BLOCK ? stop - p : QB_BLOCK;
            int64_t cc = col + (p - e);
            ia_load(c->ta, (const char *)c->a + (oa + cc * sa1) * ba, sa1, n, c->ma, fa);
            ia_load(c->tb, (const char *)c->b + (ob + cc * sb1) * bb, sb1, n, c->mb, fb);
            ia_store(c->to, fa, fb, n, c->c05, c->lo, c->hi, (char *)c->y + p * by);
        }
        e = stop;
        col = 0;
        for (int k = r - 2; k >= 0; k--) {
            oa += c->sa[k];
            ob += c->sb[k];
            if (++idx[k] < c->d[k]) break;
            oa -= c->sa[k] * c->d[k];
            ob -= c->sb[k] * c->d[k];
            idx[k] = 0;
        }
    }
}

#define IA_FLAT_ARGS const ia_ctx *c, int ka, int kb, double *ta, double *tb, int64_t e0, int64_t e1
static void ia_flat_base(IA_FLAT_ARGS) { ia_flat_body(c, ka, kb, ta, tb, e0, e1); }
__attribute__((target("avx2"))) static void ia_flat_avx2(IA_FLAT_ARGS)
{
    ia_flat_body(c, ka, kb, ta, tb, e0, e1);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void ia_flat_avx512(IA_FLAT_ARGS)
{
    ia_flat_body(c, ka, kb, ta, tb, e0, e1);
}
static void ia_rows_base(const ia_ctx *c, int64_t e0, int64_t e1) { ia_rows_body(c, e0, e1); }
__attribute__((target("avx2"))) static void ia_rows_avx2(const ia_ctx *c, int64_t e0, int64_t e1)
{
    ia_rows_body(c, e0, e1);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void
ia_rows_avx512(const ia_ctx *c, int64_t e0, int64_t e1)
{
    ia_rows_body(c, e0, e1);
}

static void ia_range(const void *cp, int64_t e0, int64_t e1)
{
    const ia_ctx *c = cp;
    int l = ew_level();
    int ka = qb_kind(c->rank, c->d, c->sa), kb = qb_kind(c->rank, c->d, c->sb);
    if (ka != QB_GENERAL && kb != QB_GENERAL) {
        /* tiles of the repeated operands' products (a block past a row's end) */
        size_t tile = (size_t)(QB_TILE + QB_BLOCK) * sizeof(double);
        double *ta = ka == QB_FLAT ? NULL : malloc(tile), *tb = kb == QB_FLAT ? NULL : malloc(tile);
        if ((ka == QB_FLAT || ta) && (kb == QB_FLAT || tb)) {
            if (l == 2) ia_flat_avx512(c, ka, kb, ta, tb, e0, e1);
            else if (l == 1) ia_flat_avx2(c, ka, kb, ta, tb, e0, e1);
            else ia_flat_base(c, ka, kb, ta, tb, e0, e1);
            free(ta);
            free(tb);
            return;
        }
        free(ta);
        free(tb);
    }
    if (l == 2) ia_rows_avx512(c, e0, e1);
    else if (l == 1) ia_rows_avx2(c, e0, e1);
    else ia_rows_base(c, e0, e1);
}

/* p: a, b, out; i: a type, b type, out type (8/16-bit codes), lo, hi, rank r, dims[r],
 * a strides[r], b strides[r] (elements; 0 on broadcast axes); d: m_a, m_b, const + 0.5. */
int qe_k_iadd(const qe_args *a)
{
    if (a->np != 3 || a->ni < 6 || a->nd != 3) return 1;
    int r = (int)a->i[5];
    if (r < 1 || r > 8 || a->ni != 6 + 3 * r) return 2;
    ia_ctx c = {a->p[0], a->p[1], a->p[2], (int)a->i[0], (int)a->i[1], (int)a->i[2], r,
                (double)a->i[3], (double)a->i[4], a->d[0], a->d[1], a->d[2], a->i + 6, a->i + 6 + r,
                a->i + 6 + 2 * r};
    for (int k = 0; k < 3; k++) {
        int t = k == 0 ? c.ta : (k == 1 ? c.tb : c.to);
        if (t < QE_U8 || t > QE_I16) return 2;
    }
    int64_t n = 1;
    for (int k = 0; k < r; k++) n *= c.d[k];
    if (n <= 0) return 0;
    ew_parallel(ia_range, &c, n, 0.3);
    return 0;
}
