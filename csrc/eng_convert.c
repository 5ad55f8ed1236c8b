/* Quantize (QNN op definition "Quantize"; docs/numerics.md "Quantize") of a float32 tensor to
 * 8/16-bit codes in one pass, for the C engine (issue 13): csrc/engine.c's qe_k_nan_to_num then
 * qe_k_requant in the modes Quantize uses, fused and vectorised with the same IEEE operations:
 *  - 8-bit codes ("fp16_half_away_from_zero", mode 3): y = x * inv (float32), clipped to
 *    +-65504, rounded to float16 (nearest even: F16C's conversion is IEEE's, as numpy's
 *    astype(float16) and engine.c's f16_rne), then trunc(y + copysign(0.5, y)) in float32;
 *  - 16-bit codes ("exact_half_away_from_zero", mode 4): the same in float64 on the exact
 *    product x * inv, without the float16 step;
 * then y - offset, clipped to [lo, hi].  NaN becomes 0 and infinities +-FLT_MAX first
 * (nan_to_num).  Other machines (no AVX-512 / F16C) run the scalar loop of engine.c's order. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eng_convert.h"
#include "engine.h"

#define CV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

static int cv_usable(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        int capped = qe_isa_avx512_capped();
        ok = !capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
             && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
             && __builtin_cpu_supports("f16c");
    }
    return ok;
}

static inline float nan_to_num(float v)
{
    if (v != v) return 0.0f;
    if (v == INFINITY) return FLT_MAX;
    if (v == -INFINITY) return -FLT_MAX;
    return v;
}

static void store_code(int t, void *out, int64_t k, float y)
{
    switch (t) {
    case QE_U8: ((uint8_t *)out)[k] = (uint8_t)y; break;
    case QE_I8: ((int8_t *)out)[k] = (int8_t)y; break;
    case QE_U16: ((uint16_t *)out)[k] = (uint16_t)y; break;
    default: ((int16_t *)out)[k] = (int16_t)y; break;
    }
}

static void quantize_scalar(const float *x, void *out, int64_t k0, int64_t n, int t, int mode,
                            float inv, float offset, float lo, float hi)
{
    for (int64_t k = k0; k < n; k++) {
        float v = nan_to_num(x[k]);
        float c;
        if (mode == 4) {
            double y = (double)v * (double)inv;
            y = trunc(y + copysign(0.5, y));
            y -= (double)offset;
            y = fmin(y, (double)hi);
            y = y < (double)lo ? (double)lo : y;
            c = (float)y;
        } else {
            float y = v * inv;
            if (y < -65504.0f) y = -65504.0f;
            else if (y > 65504.0f) y = 65504.0f;
            y = f16_rne(y);
            y = truncf(y + copysignf(0.5f, y));
            y -= offset;
            y = fminf(y, hi);
            c = y < lo ? lo : y;
        }
        store_code(t, out, k, c);
    }
}

CV_TARGET static void store16(int t, void *out, int64_t k, __m512i v, __mmask16 m)
{
    if (t == QE_U8 || t == QE_I8)
        _mm_mask_storeu_epi8((char *)out + k, m, _mm512_cvtepi32_epi8(v));
    else
        _mm256_mask_storeu_epi16((int16_t *)out + k, m, _mm512_cvtepi32_epi16(v));
}

CV_TARGET static void quantize_512(const float *x, void *out, int64_t n, int t, int mode,
                                   float inv, float offset, float lo, float hi)
{
    const __m512 vmax = _mm512_set1_ps(FLT_MAX), vmin = _mm512_set1_ps(-FLT_MAX);
    const __m512 h = _mm512_set1_ps(65504.0f), nh = _mm512_set1_ps(-65504.0f);
    const __m512 half = _mm512_set1_ps(0.5f), vinv = _mm512_set1_ps(inv);
    const __m512 voff = _mm512_set1_ps(offset), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512d dinv = _mm512_set1_pd((double)inv), dhalf = _mm512_set1_pd(0.5);
    const __m512d doff = _mm512_set1_pd((double)offset), dlo = _mm512_set1_pd((double)lo);
    const __m512d dhi = _mm512_set1_pd((double)hi);
    const __m512i dsign = _mm512_set1_epi64((long long)0x8000000000000000ull);
    for (int64_t k = 0; k < n; k += 16) {
        int64_t cnt = n - k < 16 ? n - k : 16;
        __mmask16 m = (__mmask16)((1u << cnt) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, x + k);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        v = _mm512_mask_mov_ps(v, nan, _mm512_setzero_ps());
        v = _mm512_min_ps(_mm512_max_ps(v, vmin), vmax);
        __m512i codes;
        if (mode == 4) {
            __m256i part[2];
            for (int hlf = 0; hlf < 2; hlf++) {
                __m256 v8 = hlf ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v);
                __m512d y = _mm512_mul_pd(_mm512_cvtps_pd(v8), dinv);
                __m512d s = _mm512_castsi512_pd(_mm512_or_si512(
                    _mm512_and_si512(_mm512_castpd_si512(y), dsign), _mm512_castpd_si512(dhalf)));
                y = _mm512_roundscale_pd(_mm512_add_pd(y, s), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                y = _mm512_sub_pd(y, doff);
                y = _mm512_max_pd(_mm512_min_pd(y, dhi), dlo);
                part[hlf] = _mm512_cvttpd_epi32(y);
            }
            codes = _mm512_inserti64x4(_mm512_castsi256_si512(part[0]), part[1], 1);
        } else {
            __m512 y = _mm512_mul_ps(v, vinv);
            y = _mm512_min_ps(_mm512_max_ps(y, nh), h);
            y = _mm512_cvtph_ps(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m512 s = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(y), sign), _mm512_castps_si512(half)));
            y = _mm512_roundscale_ps(_mm512_add_ps(y, s), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            y = _mm512_sub_ps(y, voff);
            y = _mm512_max_ps(_mm512_min_ps(y, vhi), vlo);
            codes = _mm512_cvttps_epi32(y);
        }
        store16(t, out, k, codes, m);
    }
}

/* p: float32 x, codes out; i: n, code type, mode (3: 8-bit float16 step, 4: 16-bit exact
 * product), lo, hi; d: inv (float32 1 / scale), offset (float32). */
int qe_k_quantize_f32(const qe_args *a)
{
    if (a->np < 2 || a->ni < 5 || a->nd < 2) return 2;
    int64_t n = a->i[0];
    int t = (int)a->i[1], mode = (int)a->i[2];
    if (t < QE_U8 || t > QE_I16 || (mode != 3 && mode != 4)) return 2;
    float lo = (float)a->i[3], hi = (float)a->i[4];
    float inv = (float)a->d[0], offset = (float)a->d[1];
    if (n <= 0) return 0;
    if (cv_usable())
        quantize_512(a->p[0], a->p[1], n, t, mode, inv, offset, lo, hi);
    else
        quantize_scalar(a->p[0], a->p[1], 0, n, t, mode, inv, offset, lo, hi);
    return 0;
}
