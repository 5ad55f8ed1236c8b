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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eng_eltwise.h"
#include "kernels.h"

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

EW_INLINE void bin_row(int op, const float *a, const float *b, void *yv, int64_t n, int64_t sa,
                       int64_t sb)
{
    switch (op) {
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
    case QE_BIN_PRELU: BIN_ROW(float, np_maxf(x0, 0.0f) + x1 * np_minf(x0, 0.0f)); break;
    case QE_BIN_EQ: BIN_ROW(uint8_t, x0 == x1); break;
    case QE_BIN_NE: BIN_ROW(uint8_t, x0 != x1); break;
    case QE_BIN_GT: BIN_ROW(uint8_t, x0 > x1); break;
    case QE_BIN_GE: BIN_ROW(uint8_t, x0 >= x1); break;
    case QE_BIN_LT: BIN_ROW(uint8_t, x0 < x1); break;
    case QE_BIN_LE: BIN_ROW(uint8_t, x0 <= x1); break;
    default: break;
    }
}

/* The rows of a broadcast: rank r (>= 1), out shape d[r], element strides sa[r], sb[r]. */
EW_INLINE void bin_all(int op, const float *a, const float *b, char *y, int r, const int64_t *d,
                       const int64_t *sa, const int64_t *sb, int out_size)
{
    int64_t idx[8] = {0};
    int64_t rows = 1, n = d[r - 1];
    for (int k = 0; k < r - 1; k++) rows *= d[k];
    int64_t oa = 0, ob = 0;
    for (int64_t row = 0; row < rows; row++) {
        bin_row(op, a + oa, b + ob, y + row * n * out_size, n, sa[r - 1], sb[r - 1]);
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

static void bin_all_base(int op, const float *a, const float *b, char *y, int r, const int64_t *d,
                         const int64_t *sa, const int64_t *sb, int out_size)
{
    bin_all(op, a, b, y, r, d, sa, sb, out_size);
}

__attribute__((target("avx2"))) static void bin_all_avx2(int op, const float *a, const float *b,
                                                         char *y, int r, const int64_t *d,
                                                         const int64_t *sa, const int64_t *sb,
                                                         int out_size)
{
    bin_all(op, a, b, y, r, d, sa, sb, out_size);
}

/* p: in[0], in[1], out; i: op, rank r (1..8), out shape[r], in[0] strides[r], in[1] strides[r]
 * (elements; 0 where an input broadcasts). */
int qe_k_binary_f32(const qe_args *a)
{
    if (a->np != 3 || a->ni < 2) return 1;
    int op = (int)a->i[0], r = (int)a->i[1];
    if (op < 0 || op >= QE_BIN_COUNT || r < 1 || r > 8 || a->ni != 2 + 3 * r) return 2;
    const int64_t *d = a->i + 2, *sa = d + r, *sb = sa + r;
    for (int k = 0; k < r; k++)
        if (d[k] == 0) return 0;
    int out_size = op >= QE_BIN_FIRST_COMPARE ? 1 : 4;
    if (qe_isa())
        bin_all_avx2(op, a->p[0], a->p[1], a->p[2], r, d, sa, sb, out_size);
    else
        bin_all_base(op, a->p[0], a->p[1], a->p[2], r, d, sa, sb, out_size);
    return 0;
}

/* ---- unary ops ------------------------------------------------------------------------------- */
/* Gelu, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2). */
EW_INLINE double gelu_d(double x)
{
    if (x != x) return x;
    if (isinf(x)) return x > 0 ? x : 0.0;
    double t = erfc(fabs(x) * 0.70710678118654752440);
    double f = x >= 0 ? 2.0 - t : t;
    return 0.5 * (x * f);
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
    case QE_UN_EXP: UN_LOOP((float)exp((double)v)); break;
    case QE_UN_LOG: UN_LOOP((float)log((double)v)); break;
    case QE_UN_SIGMOID: UN_LOOP((float)(1.0 / (1.0 + exp(-(double)v)))); break;
    case QE_UN_TANH: UN_LOOP((float)tanh((double)v)); break;
    case QE_UN_ELU: {  /* max(x, 0) + alpha expm1(min(x, 0)); prm: alpha */
        double al = prm[0];
        UN_LOOP((float)((double)np_maxf(v, 0.0f) + al * expm1((double)np_minf(v, 0.0f))));
        break;
    }
    case QE_UN_GELU: UN_LOOP((float)gelu_d((double)v)); break;
    case QE_UN_ERF: UN_LOOP((float)erf((double)v)); break;
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

/* y[i] = op(x[i]) for i < n; prm: the op's parameters (see un_all). */
int qe_ew_unary_f32(int op, const float *x, float *y, int64_t n, const double *prm)
{
    static const double none[2] = {0.0, 0.0};
    if (op < 0 || op >= QE_UN_COUNT || n < 0) return 2;
    if (!prm) prm = none;
    return qe_isa() ? un_all_avx2(op, x, y, n, prm) : un_all_base(op, x, y, n, prm);
}

/* p: x, y; i: op, n; d: the op's parameters (2 of them at least). */
int qe_k_unary_f32(const qe_args *a)
{
    if (a->np != 2 || a->ni != 2 || a->nd < 2) return 1;
    return qe_ew_unary_f32((int)a->i[0], a->p[0], a->p[1], a->i[1], a->d);
}

/* ---- Softmax / LogSoftmax ---------------------------------------------------------------------- */
/* x viewed as [outer, len, inner], normalized along len: z = beta x (float64), m = max z,
 * e = exp(z - m), softmax e / sum(e), log-softmax (z - m) - log(sum(e)); NaN anywhere in a
 * row makes the row NaN (as numpy's max).  scratch: len doubles. */
int qe_ew_softmax_f32(const float *x, float *y, double *e, int64_t outer, int64_t len,
                      int64_t inner, double beta, int log_form)
{
    if (len <= 0) return 0;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            const float *xr = x + o * len * inner + in;
            float *yr = y + o * len * inner + in;
            double m = beta * (double)xr[0];
            for (int64_t k = 1; k < len; k++) {
                double z = beta * (double)xr[k * inner];
                if (z > m || z != z) m = z;
                if (m != m) break;
            }
            double s = 0.0;
            for (int64_t k = 0; k < len; k++) {
                double z = beta * (double)xr[k * inner] - m;
                e[k] = log_form ? z : exp(z);
                s += log_form ? exp(z) : e[k];
            }
            if (log_form) {
                double ls = log(s);
                for (int64_t k = 0; k < len; k++) yr[k * inner] = (float)(e[k] - ls);
            } else {
                for (int64_t k = 0; k < len; k++) yr[k * inner] = (float)(e[k] / s);
            }
        }
    }
    return 0;
}

/* p: x, y, scratch (len doubles); i: outer, len, inner, log_form; d: beta. */
int qe_k_softmax_f32(const qe_args *a)
{
    if (a->np != 3 || a->ni != 4 || a->nd != 1) return 1;
    return qe_ew_softmax_f32(a->p[0], a->p[1], a->p[2], a->i[0], a->i[1], a->i[2], a->d[0],
                             (int)a->i[3]);
}
