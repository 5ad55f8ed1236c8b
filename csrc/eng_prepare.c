/* Finalize-time helpers (csrc/eng_prepare.h): the HTP's symmetric requantization of 8-bit
 * weights (qnnemu/spec/quant.py _int8_requant, whose numpy formula is the reference), one pass
 * over the weights instead of numpy's eight. */
#include <math.h>
#include <stdlib.h>
#include "eng_prepare.h"
#include "kernels.h"
#include "pool.h"

/* w and out: [rows, channels] row-major (channel fastest).  For a channel with over[c] set,
 * out = round_half_away(w * mult[c]) with mult[c] = recip / 65536 (w * recip is an exact
 * integer below 2**26 and the scaling by 2**-16 is exact, so this is the numpy formula's value);
 * other channels are copied.  out may equal w. */
int qe_int8_requant(const double *w, int64_t rows, int64_t channels, const double *mult,
                    const uint8_t *over, double *out)
{
    if (rows < 0 || channels < 0)
        return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const double *src = w + r * channels;
        double *dst = out + r * channels;
        for (int64_t c = 0; c < channels; ++c) {
            double v = src[c];
            if (over[c]) {
                double a = v * mult[c];
                /* |a| < 2**26: truncating |a| + 0.5 is its floor; the sign is put back as is */
                double m = (double)(int64_t)(fabs(a) + 0.5);
                v = copysign(m, a);
            }
            dst[c] = v;
        }
    }
    return 0;
}

/* floor(a / b) for b > 0 (C division truncates toward zero) */
static int64_t floordiv_pos(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* floor(t * mult / 2**r + 0.5) in integers (lower_qgemm.py _floor_half); >> of a negative
 * int64 is an arithmetic (floor) shift with gcc and clang */
static int64_t floor_half(int64_t t, int64_t mult, int64_t r)
{
    return (t * mult + ((int64_t)1 << r >> 1)) >> r;
}

static int integral_term(double v)
{
    return isfinite(v) && v == floor(v) && fabs(v) < 1125899906842624.0;   /* 2**50 */
}

/* The exact int32 requantization table of qnnemu/core/engine/lower_qgemm.py _int_requant (its
 * Python loop is the reference and the derivation): per channel c the rows
 * [B, s, E, tlo, thi, mult, rnd, r] of tab ([8, n], row-major).  Returns 1 where the Python
 * code returns None (a value that int32 steps could not reproduce), 0 when tab is complete.
 * Every intermediate stays inside int64: the checks bound |t| below 2**31 and mult below 2**31
 * before any product. */
int qe_int_requant_table(int64_t n, const double *xw, const double *cst, const double *inv,
                         const double *scale, const uint8_t *dead, const double *zw,
                         const double *fz, const int64_t *clmax, int64_t chmax, int64_t wide,
                         int64_t lo, int64_t hi, int64_t dead_code, int32_t *tab)
{
    const int64_t lim = 2147483647;
    if (n < 0)
        return 1;
    for (int64_t c = 0; c < n; ++c) {
        int64_t row[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (dead[c]) {
            row[6] = dead_code;
        } else {
            double iv = inv[c], sc = scale[c];
            int64_t bi, s, ei;
            if (!integral_term(xw[c]) || !integral_term(cst[c]))
                return 1;
            if (wide) {
                if (!integral_term(zw[c]) || !integral_term(fz[c]))
                    return 1;
                bi = (int64_t)xw[c] + (int64_t)zw[c];
                s = 8;
                ei = (int64_t)cst[c] - (int64_t)fz[c];
            } else {
                int e;
                if (!(0 < iv && iv <= 1))
                    return 1;
                if (frexp(iv, &e) != 0.5)
                    return 1;
                bi = (int64_t)xw[c] + (int64_t)cst[c];
                s = 1 - e < 31 ? 1 - e : 31;
                ei = 0;
            }
            if (clmax[c] < 0 || clmax[c] >= lim)
                return 1;
            int64_t cm = clmax[c], hm = cm * chmax / 255;   /* both >= 0: / floors */
            if (llabs(bi) + cm >= lim || !(0 < sc && sc < 2147483648.0) || !isfinite(sc))
                return 1;
            /* sc.as_integer_ratio(): num / 2**r in lowest terms */
            int e2;
            double m = frexp(sc, &e2);
            int64_t num = (int64_t)ldexp(m, 53), r;
            int tz = __builtin_ctzll((unsigned long long)num);
            num >>= tz;
            int64_t ex = (int64_t)e2 - 53 + tz;
            if (ex >= 0) {
                num <<= ex;
                r = 0;
            } else {
                r = -ex;
            }
            if (r > 30 || num >= lim)
                return 1;
            int64_t tmin = ((bi - cm) >> s) - hm + ei, tmax = ((bi + cm) >> s) + hm + ei;
            int64_t tabs = llabs(tmin) > llabs(tmax) ? llabs(tmin) : llabs(tmax);
            if (tabs >= lim || tabs * num + ((int64_t)1 << r) >= ((int64_t)1 << 52))
                return 1;
            int64_t half = (int64_t)1 << r >> 1;
            int64_t tlo = floordiv_pos(lo * ((int64_t)1 << r) - half, num);
            while (floor_half(tlo + 1, num, r) <= lo)
                ++tlo;
            while (floor_half(tlo, num, r) > lo)
                --tlo;
            int64_t thi = -floordiv_pos(-(hi * ((int64_t)1 << r) - half), num);
            while (floor_half(thi - 1, num, r) >= hi)
                --thi;
            while (floor_half(thi, num, r) < hi)
                ++thi;
            int64_t plo = llabs(tlo * num), phi = llabs(thi * num);
            if ((plo > phi ? plo : phi) + ((int64_t)1 << r) >= lim || llabs(tlo) >= lim || llabs(thi) >= lim)
                return 1;
            row[0] = bi; row[1] = s; row[2] = ei; row[3] = tlo; row[4] = thi;
            row[5] = num; row[6] = half; row[7] = r;
        }
        for (int k = 0; k < 8; ++k)   /* numpy's astype(int32): modulo 2**32 */
            tab[k * n + c] = (int32_t)(uint32_t)(uint64_t)row[k];
    }
    return 0;
}

/* The integer weights of an accumulating op straight from its 8-bit codes (qnnemu/spec/quant.py
 * htp_int8_weight_codes; the float64 route of htp_int8_weights and qe_int8_requant is the
 * reference).  codes: [rows, channels] row-major (code_type 0 uint8, 1 int8); per channel the
 * integer QNN offset off[c] (|off| <= 65280, so |code + off| <= 65535) and recip[c] in
 * [1, 65536]: 65536 for a channel kept as it is, round(2**16 / f) for one the HTP requantizes.
 *
 * The reference computes round_half_away(x * (recip / 2**16)) in float64 with x = code + off.
 * recip / 2**16 is exact, x * recip < 2**32 is exact, so |a| = |x| * recip / 2**16 and
 * |a| + 0.5 = (|x| * recip + 2**15) / 2**16 are exact too, and its floor is
 * (|x| * recip + 2**15) >> 16 in uint32 (< 2**32: 65535 * 65536 + 32768); recip 65536 gives x
 * back.  So the values are the reference's, in integer lanes the compiler vectorizes (ResNet-50
 * has 25 million weights).
 *
 * Writes the values as int8 (out_bytes 1) or int16 (2), and per channel their sum (wsum) and
 * the sum of their magnitudes (wabs).  Returns 0; 2 when a value does not fit out_bytes (int16:
 * [-32767, 32767]); 1 for bad arguments. */
#define CODES_CHUNK 32768   /* rows per int32 partial sum: 32768 * 32767 < 2**31 */

#define WEIGHT_CODES_ROWS(NAME, SRC_T, DST_T, LO, HI)                                             \
    __attribute__((target_clones("avx512f", "avx2", "default")))                                 \
    static int NAME(const SRC_T *restrict src, int64_t rows, int64_t n, int64_t ld,               \
                    const int32_t *restrict off, const uint32_t *restrict recip,                  \
                    DST_T *restrict dst, int32_t *restrict sum, int32_t *restrict sabs)           \
    {                                                                                             \
        int32_t bad = 0;                                                                          \
        for (int64_t r = 0; r < rows; ++r) {                                                      \
            const SRC_T *restrict s = src + r * ld;                                               \
            DST_T *restrict d = dst + r * ld;                                                     \
            for (int64_t c = 0; c < n; ++c) {                                                     \
                int32_t x = (int32_t)s[c] + off[c];                                               \
                uint32_t ax = (uint32_t)(x < 0 ? -x : x);                                         \
                uint32_t y = (ax * recip[c] + 32768u) >> 16;                                      \
                int32_t v = x < 0 ? -(int32_t)y : (int32_t)y;                                     \
                bad |= (v < (LO)) | (v > (HI));                                                   \
                d[c] = (DST_T)v;                                                                  \
                sum[c] += v;                                                                      \
                sabs[c] += (int32_t)y;                                                            \
            }                                                                                     \
        }                                                                                         \
        return bad;                                                                               \
    }

WEIGHT_CODES_ROWS(codes_u8_i8, uint8_t, int8_t, -128, 127)
WEIGHT_CODES_ROWS(codes_s8_i8, int8_t, int8_t, -128, 127)
WEIGHT_CODES_ROWS(codes_u8_i16, uint8_t, int16_t, -32767, 32767)
WEIGHT_CODES_ROWS(codes_s8_i16, int8_t, int16_t, -32767, 32767)

/* Channels [c0, c1) of qe_weight_codes: 0, or 2 when a value does not fit, 1 out of memory. */
static int weight_codes_channels(const void *codes, int64_t code_type, int64_t rows, int64_t channels,
                                 const int32_t *off, const uint32_t *recip, void *out, int64_t out_bytes,
                                 int64_t *wsum, int64_t *wabs, int64_t c0, int64_t c1)
{
    int64_t n = c1 - c0;
    int32_t *part = calloc((size_t)(n ? n : 1) * 2, sizeof(int32_t));
    if (!part)
        return 1;
    int32_t *sum = part, *sabs = part + n;
    int bad = 0;
    for (int64_t c = c0; c < c1; ++c)
        wsum[c] = wabs[c] = 0;
    for (int64_t r0 = 0; r0 < rows; r0 += CODES_CHUNK) {
        int64_t nr = rows - r0 < CODES_CHUNK ? rows - r0 : CODES_CHUNK;
        int64_t at = r0 * channels + c0;
        if (code_type == 0 && out_bytes == 1)
            bad |= codes_u8_i8((const uint8_t *)codes + at, nr, n, channels, off + c0, recip + c0,
                               (int8_t *)out + at, sum, sabs);
        else if (code_type == 1 && out_bytes == 1)
            bad |= codes_s8_i8((const int8_t *)codes + at, nr, n, channels, off + c0, recip + c0,
                               (int8_t *)out + at, sum, sabs);
        else if (code_type == 0)
            bad |= codes_u8_i16((const uint8_t *)codes + at, nr, n, channels, off + c0, recip + c0,
                                (int16_t *)out + at, sum, sabs);
        else
            bad |= codes_s8_i16((const int8_t *)codes + at, nr, n, channels, off + c0, recip + c0,
                                (int16_t *)out + at, sum, sabs);
        for (int64_t c = 0; c < n; ++c) {
            wsum[c0 + c] += sum[c];
            wabs[c0 + c] += sabs[c];
            sum[c] = sabs[c] = 0;
        }
    }
    free(part);
    return bad ? 2 : 0;
}

typedef struct {
    const void *codes;
    int64_t code_type, rows, channels;
    const int32_t *off;
    const uint32_t *recip;
    void *out;
    int64_t out_bytes, *wsum, *wabs, c0, c1;
    int rc;
} codes_job;

static void codes_job_run(void *p)
{
    codes_job *j = p;
    j->rc = j->c1 > j->c0 ? weight_codes_channels(j->codes, j->code_type, j->rows, j->channels, j->off,
                                                  j->recip, j->out, j->out_bytes, j->wsum, j->wabs, j->c0,
                                                  j->c1)
                          : 0;
}

int qe_weight_codes(const void *codes, int64_t code_type, int64_t rows, int64_t channels,
                    const int32_t *off, const uint32_t *recip, void *out, int64_t out_bytes,
                    int64_t *wsum, int64_t *wabs)
{
    if (rows < 0 || channels < 0 || (code_type != 0 && code_type != 1) || (out_bytes != 1 && out_bytes != 2))
        return 1;
    for (int64_t c = 0; c < channels; ++c)
        if (off[c] < -65280 || off[c] > 65280 || recip[c] < 1 || recip[c] > 65536)
            return 1;
    /* channel ranges over the pool's threads from 256 Ki weights (ResNet-50's 25 M took 15 ms on
     * one thread at finalize); each range's sums are its own, so the results do not depend on it */
    int T = qe_threads();
    int64_t want = rows * channels / (256 << 10) + 1, groups = (channels + 63) / 64;
    if (want < T) T = (int)want;
    if (groups < T) T = (int)groups;
    if (T > 16) T = 16;
    if (T <= 1)
        return weight_codes_channels(codes, code_type, rows, channels, off, recip, out, out_bytes, wsum, wabs,
                                     0, channels);
    codes_job jobs[16];
    int64_t per = ((channels + T - 1) / T + 63) / 64 * 64;
    int cnt = 0;
    for (int64_t c = 0; c < channels && cnt < 16; c += per)
        jobs[cnt++] = (codes_job){codes, code_type, rows, channels, off, recip, out, out_bytes, wsum, wabs,
                                  c, c + per < channels ? c + per : channels, 0};
    qe_pool_run(codes_job_run, jobs, sizeof jobs[0], cnt);
    int rc = 0;
    for (int t = 0; t < cnt; t++)
        if (jobs[t].rc == 1 || (jobs[t].rc && !rc)) rc = jobs[t].rc;
    return rc;
}

/* Per-channel minimum and maximum of 8-bit weight codes [rows, channels] (code_type 0 uint8,
 * 1 int8): which channels qe_weight_codes requantizes (numpy's reduction along the rows was
 * most of the weights' finalize time). */
#define CODE_MINMAX(NAME, SRC_T)                                                                  \
    __attribute__((target_clones("avx512f", "avx2", "default")))                                 \
    static void NAME(const SRC_T *restrict src, int64_t rows, int64_t n, int32_t *restrict mn,   \
                     int32_t *restrict mx)                                                       \
    {                                                                                            \
        for (int64_t r = 0; r < rows; ++r) {                                                     \
            const SRC_T *restrict s = src + r * n;                                               \
            for (int64_t c = 0; c < n; ++c) {                                                    \
                int32_t v = s[c];                                                                \
                mn[c] = v < mn[c] ? v : mn[c];                                                   \
                mx[c] = v > mx[c] ? v : mx[c];                                                   \
            }                                                                                    \
        }                                                                                        \
    }

CODE_MINMAX(minmax_u8, uint8_t)
CODE_MINMAX(minmax_s8, int8_t)

int qe_code_minmax(const void *codes, int64_t code_type, int64_t rows, int64_t channels, int32_t *mn,
                   int32_t *mx)
{
    if (rows < 1 || channels < 0 || (code_type != 0 && code_type != 1))
        return 1;
    for (int64_t c = 0; c < channels; ++c) {
        mn[c] = 255;
        mx[c] = -128;
    }
    if (code_type == 0)
        minmax_u8((const uint8_t *)codes, rows, channels, mn, mx);
    else
        minmax_s8((const int8_t *)codes, rows, channels, mn, mx);
    return 0;
}
