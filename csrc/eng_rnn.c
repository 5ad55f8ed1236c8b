/* Step kernels of the C engine's recurrent family (issue 13): Lstm and Gru (QNN op definitions
 * "Lstm" and "Gru"; formulas, input positions and layouts: qnnemu/ops/lstm.py, qnnemu/ops/rnn.py).
 *
 * One implementation for both paths: the ops' fast paths call qe_lstm_f32 / qe_gru_f32 through
 * qnnemu/ops/_fast_rnn.py, and the engine's steps (qe_k_lstm / qe_k_gru, lowered by
 * qnnemu/core/engine/lower_rnn.py) call the very same functions, so the Python plan and the
 * engine give the same bytes by construction.  What the result depends on: the operand values
 * and the shapes (which product kernel is used is decided from the shapes alone), not the
 * strides of x or the output, not the thread split.
 *
 * Lstm computes in float32, as the op's numpy formula does: the products (input projection of
 * every step at once, then the recurrent product per step) as float32 sums, the gates'
 * element-wise arithmetic in the numpy formula's float32 operations and order, the logistic and
 * tanh by the element-wise family's C functions (qe_ew_unary_f32: float64, rounded once -- as
 * the activations' fast paths), the layer norm (TFLite's layer-norm LSTM) in float64 rounded
 * once.  Gru computes in float64 as its numpy formula does (its inputs widened, its outputs
 * rounded to float32 once), tanh from the C library.
 *
 * Products: M >= RNN_GEMM_MIN_ROWS rows go to csrc/kernels.c's qe_sgemm; fewer (the recurrent
 * product of a small batch, one step of a 2-D Lstm) to a dot-product kernel over the weights'
 * own rows (W[j, :] . a[m, :], 16 float32 / 8 float64 partial sums combined pairwise): the
 * operand is read once, not packed per call.  Its lanes run the same operations on every ISA
 * (no contraction: the build's -ffp-contract=off), so the AVX-512 / AVX2 / baseline clones give
 * the same bits.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"
#include "eng_eltwise.h"
#include "eng_rnn.h"
#include "kernels.h"

#define RNN_INLINE static inline __attribute__((always_inline))
#define RNN_GEMM_MIN_ROWS 8
#define QE_ERR_ARGS 1
#define QE_ERR_NOMEM 2

/* ---- dot-product kernels: y[m, j] = sum_k a[m, k] w[j, k] (+ bias[j]) ------------------------- */
RNN_INLINE float dot_f32(const float *a, const float *w, int64_t k)
{
    float acc[16];
    for (int l = 0; l < 16; l++) acc[l] = 0.0f;
    int64_t q = 0;
    for (; q + 16 <= k; q += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[q + l] * w[q + l];
    /* the tail's missing lanes add 0 * 0, so every lane sees the same operation count */
    for (int l = 0; l < 16; l++) acc[l] += q + l < k ? a[q + l] * w[q + l] : 0.0f * 0.0f;
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

RNN_INLINE void rows_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                         const float *w, float *y, int64_t ldy, const float *bias)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float v = dot_f32(a + i * rsa, w + j * k, k);
            y[i * ldy + j] = bias ? v + bias[j] : v;
        }
}

RNN_INLINE double dot_f64(const double *a, const float *w, int64_t k)
{
    double acc[8];
    for (int l = 0; l < 8; l++) acc[l] = 0.0;
    int64_t q = 0;
    for (; q + 8 <= k; q += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[q + l] * (double)w[q + l];
    for (int l = 0; l < 8; l++) acc[l] += q + l < k ? a[q + l] * (double)w[q + l] : 0.0 * 0.0;
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

RNN_INLINE void rows_f64(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa,
                         const float *w, double *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) y[i * ldy + j] = dot_f64(a + i * rsa, w + j * k, k);
}

static void rows_f32_base(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                          const float *w, float *y, int64_t ldy, const float *bias)
{
    rows_f32(m, n, k, a, rsa, w, y, ldy, bias);
}
__attribute__((target("avx2"))) static void rows_f32_avx2(int64_t m, int64_t n, int64_t k,
                                                          const float *a, int64_t rsa,
                                                          const float *w, float *y, int64_t ldy,
                                                          const float *bias)
{
    rows_f32(m, n, k, a, rsa, w, y, ldy, bias);
}
/* The AVX-512 clone of rows_f32, four weight rows at a time (the additions of one sum wait on
 * each other; four independent sums keep the adder busy): per output the very operations of
 * dot_f32 -- 16 lanes, the tail's missing lanes adding 0 * 0 (zero-masked loads), the same
 * pairwise combination -- so the bits are those of the portable clones. */
__attribute__((target("avx512f"))) static inline float hsum16_avx512(__m512 s)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

__attribute__((target("avx512f"))) static void rows_f32_avx512(int64_t m, int64_t n, int64_t k,
                                                               const float *a, int64_t rsa,
                                                               const float *w, float *y,
                                                               int64_t ldy, const float *bias)
{
    const int64_t kf = k & ~(int64_t)15;
    const __mmask16 tail = (__mmask16)((1u << (k - kf)) - 1u);
    for (int64_t i = 0; i < m; i++) {
        const float *ar = a + i * rsa;
        float *yr = y + i * ldy;
        int64_t j = 0;
        for (; j + 4 <= n; j += 4) {
            const float *w0 = w + j * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int64_t q = 0; q < kf; q += 16) {
                __m512 av = _mm512_loadu_ps(ar + q);
                s0 = _mm512_add_ps(s0, _mm512_mul_ps(av, _mm512_loadu_ps(w0 + q)));
                s1 = _mm512_add_ps(s1, _mm512_mul_ps(av, _mm512_loadu_ps(w1 + q)));
                s2 = _mm512_add_ps(s2, _mm512_mul_ps(av, _mm512_loadu_ps(w2 + q)));
                s3 = _mm512_add_ps(s3, _mm512_mul_ps(av, _mm512_loadu_ps(w3 + q)));
            }
            __m512 av = _mm512_maskz_loadu_ps(tail, ar + kf);
            s0 = _mm512_add_ps(s0, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(tail, w0 + kf)));
            s1 = _mm512_add_ps(s1, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(tail, w1 + kf)));
            s2 = _mm512_add_ps(s2, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(tail, w2 + kf)));
            s3 = _mm512_add_ps(s3, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(tail, w3 + kf)));
            float v0 = hsum16_avx512(s0), v1 = hsum16_avx512(s1), v2 = hsum16_avx512(s2),
                  v3 = hsum16_avx512(s3);
            if (bias) {
                v0 = v0 + bias[j]; v1 = v1 + bias[j + 1]; v2 = v2 + bias[j + 2]; v3 = v3 + bias[j + 3];
            }
            yr[j] = v0; yr[j + 1] = v1; yr[j + 2] = v2; yr[j + 3] = v3;
        }
        for (; j < n; j++) {
            const float *w0 = w + j * k;
            __m512 s0 = _mm512_setzero_ps();
            for (int64_t q = 0; q < kf; q += 16)
                s0 = _mm512_add_ps(s0, _mm512_mul_ps(_mm512_loadu_ps(ar + q), _mm512_loadu_ps(w0 + q)));
            s0 = _mm512_add_ps(s0, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, ar + kf),
                                                 _mm512_maskz_loadu_ps(tail, w0 + kf)));
            float v0 = hsum16_avx512(s0);
            yr[j] = bias ? v0 + bias[j] : v0;
        }
    }
}
static void rows_f64_base(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa,
                          const float *w, double *y, int64_t ldy)
{
    rows_f64(m, n, k, a, rsa, w, y, ldy);
}
__attribute__((target("avx2"))) static void rows_f64_avx2(int64_t m, int64_t n, int64_t k,
                                                          const double *a, int64_t rsa,
                                                          const float *w, double *y, int64_t ldy)
{
    rows_f64(m, n, k, a, rsa, w, y, ldy);
}
__attribute__((target("avx512f"))) static void rows_f64_avx512(int64_t m, int64_t n, int64_t k,
                                                               const double *a, int64_t rsa,
                                                               const float *w, double *y,
                                                               int64_t ldy)
{
    rows_f64(m, n, k, a, rsa, w, y, ldy);
}

static int rnn_isa(void)
{
    static int level = -1;
    if (level < 0) {
        /* the GEMM's choice (QNNEMU_KERNELS_ISA=sse / avx2 force the other clones) */
        level = qe_gemm_avx512() ? 2 : (qe_isa() ? 1 : 0);
    }
    return level;
}

/* a[M, K] (rows rsa apart) times w[N, K]^T into y (rows ldy apart), + bias[N] if given. */
static int product_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                       const float *w, float *y, int64_t ldy, const float *bias)
{
    if (m <= 0 || n <= 0) return 0;
    if (m >= RNN_GEMM_MIN_ROWS)
        return qe_sgemm(m, n, (int)k, a, rsa, 1, w, 1, k, y, ldy, bias) ? QE_ERR_NOMEM : 0;
    int level = rnn_isa();
    if (level == 2) rows_f32_avx512(m, n, k, a, rsa, w, y, ldy, bias);
    else if (level == 1) rows_f32_avx2(m, n, k, a, rsa, w, y, ldy, bias);
    else rows_f32_base(m, n, k, a, rsa, w, y, ldy, bias);
    return 0;
}

static void product_f64(int64_t m, int64_t n, int64_t k, const double *a, int64_t rsa,
                        const float *w, double *y, int64_t ldy)
{
    int level = rnn_isa();
    if (level == 2) rows_f64_avx512(m, n, k, a, rsa, w, y, ldy);
    else if (level == 1) rows_f64_avx2(m, n, k, a, rsa, w, y, ldy);
    else rows_f64_base(m, n, k, a, rsa, w, y, ldy);
}

/* ---- Lstm ------------------------------------------------------------------------------------ */
/* Input positions (qnnemu/ops/lstm.py) */
enum {
    L_X, L_W_XF, L_W_XC, L_W_XO, L_W_HF, L_W_HC, L_W_HO, L_B_F, L_B_C, L_B_O, L_H0, L_C0,
    L_LN_I, L_LN_F, L_LN_C, L_LN_O, L_W_XI, L_W_HI, L_W_CI, L_W_CF, L_W_CO, L_B_I, L_W_PROJ,
    L_B_PROJ, L_INPUTS
};
/* dims: steps, batch, input size, num_units, output size, x's step and batch strides, the
 * sequence output's step and batch strides (elements), reverse */
enum { D_T, D_B, D_I, D_N, D_P, D_XT, D_XB, D_OT, D_OB, D_REV, LSTM_DIMS };

/* float32 elements of qe_lstm_f32's scratch */
long qe_lstm_scratch_floats(const int64_t *d)
{
    int64_t t = d[D_T], b = d[D_B], n = d[D_N], p = d[D_P];
    /* xg [T, B, 4N], gates [B, 4N], eight [B, N] work rows, h [B, P], m [B, N] (projected) */
    return t * b * 4 * n + b * 4 * n + 9 * b * n + b * p + 16;
}

/* v[B, N] in place: (v - mean) / sqrt(var + 1e-8) * w over each row in float64, rounded to
 * float32, then + bias in float32 (TFLite's layer-norm LSTM, qnnemu/ops/lstm.py _layer_norm). */
static void layer_norm(float *v, const float *w, const float *bias, int64_t b, int64_t n)
{
    for (int64_t r = 0; r < b; r++) {
        float *row = v + r * n;
        double s = 0.0;
        for (int64_t j = 0; j < n; j++) s += (double)row[j];
        double mean = s / (double)n, q = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double e = (double)row[j] - mean;
            q += e * e;
        }
        double inv = 1.0 / sqrt(q / (double)n + 1e-8);
        for (int64_t j = 0; j < n; j++) {
            float y = (float)(((double)row[j] - mean) * inv * (double)w[j]);
            row[j] = y + bias[j];
        }
    }
}

RNN_INLINE float clipf(float x, float lim)
{
    /* numpy.clip(x, -lim, lim): x when it equals a bound; NaN stays */
    float t = -lim > x ? -lim : x;
    return lim < t ? lim : t;
}

/* gate block g of gates[B, 4N] (rows 4N apart) into dst[B, N], + peephole c * pw if given */
static void gate_rows(float *dst, const float *gates, int64_t g, int64_t gn, int64_t b, int64_t n,
                      const float *c, const float *pw)
{
    for (int64_t r = 0; r < b; r++) {
        const float *src = gates + r * gn + g * n;
        float *out = dst + r * n;
        if (pw) {
            const float *cr = c + r * n;
            for (int64_t j = 0; j < n; j++) out[j] = src[j] + cr[j] * pw[j];
        } else {
            memcpy(out, src, (size_t)n * sizeof(float));
        }
    }
}

int qe_lstm_f32(const float *const *w, const int64_t *d, const double *clips, float *out_seq,
                float *out_c, float *out_h, float *scratch)
{
    const int64_t steps = d[D_T], b = d[D_B], ni = d[D_I], n = d[D_N], p = d[D_P];
    if (steps < 0 || b < 0 || ni < 0 || n <= 0 || p <= 0) return QE_ERR_ARGS;
    const int cifg = w[L_W_XI] == NULL, ln = w[L_LN_F] != NULL;
    const int64_t ng = cifg ? 3 : 4, gn = ng * n, bn = b * n;
    const float *wx[4], *wh[4], *bias[4], *lnw[4];
    const int k = cifg ? 0 : 1;   /* the forget gate's block */
    if (!cifg) {
        wx[0] = w[L_W_XI]; wh[0] = w[L_W_HI]; bias[0] = w[L_B_I]; lnw[0] = w[L_LN_I];
    }
    wx[k] = w[L_W_XF]; wh[k] = w[L_W_HF]; bias[k] = w[L_B_F]; lnw[k] = w[L_LN_F];
    wx[k + 1] = w[L_W_XC]; wh[k + 1] = w[L_W_HC]; bias[k + 1] = w[L_B_C]; lnw[k + 1] = w[L_LN_C];
    wx[k + 2] = w[L_W_XO]; wh[k + 2] = w[L_W_HO]; bias[k + 2] = w[L_B_O]; lnw[k + 2] = w[L_LN_O];

    float *xg = scratch, *gates = xg + steps * b * 4 * n;
    float *fp = gates + b * 4 * n, *ip = fp + bn, *gp = ip + bn, *op = gp + bn;
    float *fg = op + bn, *ig = fg + bn, *c = ig + bn, *tc = c + bn;
    float *h = tc + bn, *hp = h + b * p;

    /* the input contributions of every step, [T, B, G N] (biases folded in without layer norm) */
    for (int64_t r = 0; r < b; r++)
        for (int64_t g = 0; g < ng; g++) {
            int rc = product_f32(steps, n, ni, w[L_X] + r * d[D_XB], d[D_XT], wx[g],
                                 xg + r * gn + g * n, b * gn, ln ? NULL : bias[g]);
            if (rc) return rc;
        }
    if (w[L_H0]) memcpy(h, w[L_H0], (size_t)(b * p) * sizeof(float));
    else memset(h, 0, (size_t)(b * p) * sizeof(float));
    if (w[L_C0]) memcpy(c, w[L_C0], (size_t)bn * sizeof(float));
    else memset(c, 0, (size_t)bn * sizeof(float));
    const float cell_clip = (float)clips[0], out_clip = (float)clips[1];
    const double no_prm[2] = {0.0, 0.0};   /* the unary kernel's parameter vector (unused here) */

    for (int64_t s = 0; s < steps; s++) {
        int64_t t = d[D_REV] ? steps - 1 - s : s;
        /* gates = xg[t] + h W_h^T */
        for (int64_t g = 0; g < ng; g++) {
            int rc = product_f32(b, n, p, h, p, wh[g], gates + g * n, gn, NULL);
            if (rc) return rc;
        }
        const float *xt = xg + t * b * gn;
        for (int64_t e = 0; e < b * gn; e++) gates[e] = xt[e] + gates[e];

        gate_rows(fp, gates, k, gn, b, n, c, w[L_W_CF]);
        if (ln) layer_norm(fp, lnw[k], bias[k], b, n);
        qe_ew_unary_f32(QE_UN_SIGMOID, fp, fg, bn, no_prm);
        if (cifg) {
            for (int64_t e = 0; e < bn; e++) ig[e] = 1.0f - fg[e];
        } else {
            gate_rows(ip, gates, 0, gn, b, n, c, w[L_W_CI]);
            if (ln) layer_norm(ip, lnw[0], bias[0], b, n);
            qe_ew_unary_f32(QE_UN_SIGMOID, ip, ig, bn, no_prm);
        }
        gate_rows(gp, gates, k + 1, gn, b, n, NULL, NULL);
        if (ln) layer_norm(gp, lnw[k + 1], bias[k + 1], b, n);
        /* (never in place: the fast logistic recomputes some lanes from its input) */
        qe_ew_unary_f32(QE_UN_TANH, gp, tc, bn, no_prm);
        for (int64_t e = 0; e < bn; e++) {
            float fc = fg[e] * c[e], ic = ig[e] * tc[e];
            float v = fc + ic;
            c[e] = clips[0] > 0 ? clipf(v, cell_clip) : v;
        }
        gate_rows(op, gates, k + 2, gn, b, n, c, w[L_W_CO]);
        if (ln) layer_norm(op, lnw[k + 2], bias[k + 2], b, n);
        qe_ew_unary_f32(QE_UN_SIGMOID, op, fg, bn, no_prm);
        qe_ew_unary_f32(QE_UN_TANH, c, tc, bn, no_prm);
        float *m = w[L_W_PROJ] ? hp : h;   /* without a projection h = m (P == N) */
        for (int64_t e = 0; e < bn; e++) m[e] = fg[e] * tc[e];
        if (w[L_W_PROJ]) {
            int rc = product_f32(b, p, n, hp, n, w[L_W_PROJ], h, p, w[L_B_PROJ]);
            if (rc) return rc;
            if (clips[1] > 0)
                for (int64_t e = 0; e < b * p; e++) h[e] = clipf(h[e], out_clip);
        }
        for (int64_t r = 0; r < b; r++)
            memcpy(out_seq + t * d[D_OT] + r * d[D_OB], h + r * p, (size_t)p * sizeof(float));
    }
    memcpy(out_c, c, (size_t)bn * sizeof(float));
    memcpy(out_h, h, (size_t)(b * p) * sizeof(float));
    return 0;
}

/* p: the present inputs in position order (i[LSTM_DIMS] is the bit mask of the present
 * positions), out_seq, out_c, out_h, scratch; i: dims, mask; d: cell clip, output clip. */
int qe_k_lstm(const qe_args *a)
{
    if (a->ni != LSTM_DIMS + 1 || a->nd != 2) return QE_ERR_ARGS;
    const float *w[L_INPUTS];
    int64_t mask = a->i[LSTM_DIMS];
    int q = 0;
    for (int i = 0; i < L_INPUTS; i++) w[i] = (mask >> i & 1) ? (const float *)a->p[q++] : NULL;
    if (a->np != q + 4) return QE_ERR_ARGS;
    return qe_lstm_f32(w, a->i, a->d, a->p[q], a->p[q + 1], a->p[q + 2], a->p[q + 3]);
}

/* ---- Gru ------------------------------------------------------------------------------------- */
enum {
    G_X, G_W_XZ, G_W_XR, G_W_XN, G_W_HZ, G_W_HR, G_W_HN, G_B_XZ, G_B_XR, G_B_XN, G_B_HZ, G_B_HR,
    G_B_HN, G_H0, G_INPUTS
};
/* dims: steps, batch, input size, hidden size, x's step and batch strides, the sequence
 * output's step and batch strides, reverse, linear_before_reset */
enum { GD_T, GD_B, GD_I, GD_H, GD_XT, GD_XB, GD_OT, GD_OB, GD_REV, GD_LBR, GRU_DIMS };

long qe_gru_scratch_doubles(const int64_t *d)
{
    int64_t t = d[GD_T], b = d[GD_B], i = d[GD_I], h = d[GD_H];
    /* x in float64 [T, B, I], xg [T, B, 3H], the recurrent products [B, 3H], h, r * h [B, H] */
    return t * b * i + t * b * 3 * h + b * 3 * h + 2 * b * h + 8;
}

RNN_INLINE double sigmoid_d(double v) { return 0.5 * (1.0 + tanh(0.5 * v)); }

int qe_gru_f32(const float *const *w, const int64_t *d, float *out_seq, float *out_h,
               double *scratch)
{
    const int64_t steps = d[GD_T], b = d[GD_B], ni = d[GD_I], hs = d[GD_H];
    if (steps < 0 || b < 0 || ni < 0 || hs <= 0) return QE_ERR_ARGS;
    const int64_t h3 = 3 * hs, bh = b * hs;
    double *xd = scratch, *xg = xd + steps * b * ni, *rec = xg + steps * b * h3;
    double *hid = rec + b * h3, *rh = hid + bh;
    const float *wx[3] = {w[G_W_XZ], w[G_W_XR], w[G_W_XN]};
    const float *bx[3] = {w[G_B_XZ], w[G_B_XR], w[G_B_XN]};
    const float *wh[3] = {w[G_W_HZ], w[G_W_HR], w[G_W_HN]};
    const float *bh_[3] = {w[G_B_HZ], w[G_B_HR], w[G_B_HN]};

    /* x widened to float64, [T, B, I] */
    for (int64_t t = 0; t < steps; t++)
        for (int64_t r = 0; r < b; r++) {
            const float *src = w[G_X] + t * d[GD_XT] + r * d[GD_XB];
            double *dst = xd + (t * b + r) * ni;
            for (int64_t q = 0; q < ni; q++) dst[q] = (double)src[q];
        }
    /* xg = x W_x^T + b_x, every step at once */
    for (int64_t g = 0; g < 3; g++) {
        product_f64(steps * b, hs, ni, xd, ni, wx[g], xg + g * hs, h3);
        for (int64_t e = 0; e < steps * b; e++)
            for (int64_t j = 0; j < hs; j++) xg[e * h3 + g * hs + j] += (double)bx[g][j];
    }
    if (w[G_H0])
        for (int64_t e = 0; e < bh; e++) hid[e] = (double)w[G_H0][e];
    else
        memset(hid, 0, (size_t)bh * sizeof(double));

    for (int64_t s = 0; s < steps; s++) {
        int64_t t = d[GD_REV] ? steps - 1 - s : s;
        const double *xt = xg + t * b * h3;
        /* z and r: sigmoid((xg + h W_h^T) + b_h) */
        for (int64_t g = 0; g < 2; g++) product_f64(b, hs, hs, hid, hs, wh[g], rec + g * hs, h3);
        if (d[GD_LBR]) product_f64(b, hs, hs, hid, hs, wh[2], rec + 2 * hs, h3);
        for (int64_t r = 0; r < b; r++) {
            double *rr = rec + r * h3;
            const double *xr = xt + r * h3;
            for (int64_t j = 0; j < 2 * hs; j++) {
                const float *bb = bh_[j / hs];
                rr[j] = sigmoid_d((xr[j] + rr[j]) + (double)bb[j % hs]);
            }
        }
        if (d[GD_LBR]) {
            for (int64_t r = 0; r < b; r++) {
                double *rr = rec + r * h3;
                const double *xr = xt + r * h3;
                for (int64_t j = 0; j < hs; j++)
                    rr[2 * hs + j] = tanh(xr[2 * hs + j] +
                                          rr[hs + j] * (rr[2 * hs + j] + (double)bh_[2][j]));
            }
        } else {
            for (int64_t r = 0; r < b; r++)
                for (int64_t j = 0; j < hs; j++) rh[r * hs + j] = rec[r * h3 + hs + j] * hid[r * hs + j];
            product_f64(b, hs, hs, rh, hs, wh[2], rec + 2 * hs, h3);
            for (int64_t r = 0; r < b; r++) {
                double *rr = rec + r * h3;
                const double *xr = xt + r * h3;
                for (int64_t j = 0; j < hs; j++)
                    rr[2 * hs + j] = tanh((xr[2 * hs + j] + rr[2 * hs + j]) + (double)bh_[2][j]);
            }
        }
        for (int64_t r = 0; r < b; r++) {
            const double *rr = rec + r * h3;
            double *hr = hid + r * hs;
            float *o = out_seq + t * d[GD_OT] + r * d[GD_OB];
            for (int64_t j = 0; j < hs; j++) {
                double z = rr[j], nv = rr[2 * hs + j];
                hr[j] = (1.0 - z) * nv + z * hr[j];
                o[j] = (float)hr[j];
            }
        }
    }
    for (int64_t e = 0; e < bh; e++) out_h[e] = (float)hid[e];
    return 0;
}

/* p: the present inputs in position order (i[GRU_DIMS]: bit mask of the present positions),
 * out_seq, out_h, scratch (float64); i: dims, mask. */
int qe_k_gru(const qe_args *a)
{
    if (a->ni != GRU_DIMS + 1) return QE_ERR_ARGS;
    const float *w[G_INPUTS];
    int64_t mask = a->i[GRU_DIMS];
    int q = 0;
    for (int i = 0; i < G_INPUTS; i++) w[i] = (mask >> i & 1) ? (const float *)a->p[q++] : NULL;
    if (a->np != q + 3) return QE_ERR_ARGS;
    return qe_gru_f32(w, a->i, a->p[q], a->p[q + 1], a->p[q + 2]);
}
