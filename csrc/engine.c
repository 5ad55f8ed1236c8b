/* The program runner of qnnemu's C execution engine and the converter kernels around ops
 * (issue 13; the Python side, which compiles programs, is qnnemu/core/engine).
 *
 * A program is four int64/float64 tables the compiler filled at graphFinalize:
 * - steps[k] = {kernel function address, first buffer reference, count, first int parameter,
 *   count, first float parameter, count} (QE_STEP_* columns);
 * - pbuf: buffer ids, the references of all steps one after the other;
 * - ints, dbls: the parameters;
 * - bufs[b] = {kind, value}: an absolute address (statics, constants), an arena offset, or an
 *   index into the io table (the graph inputs of this execute).
 * qe_run resolves each step's buffer ids to pointers and calls its kernel; it needs no
 * interpreter, and cffi releases the GIL around it.
 *
 * Element-wise chains: a qe_k_chain step heads m steps that all compute element i of their
 * outputs from element i of their inputs (or from a broadcast scalar), over the same n
 * elements, on buffers that either coincide or do not overlap (qnnemu/core/engine/chain.py
 * checks all that).  When the whole chain is in the range being run, qe_run runs it block by
 * block: every step on elements [e, e + block) before any step on the next block, the blocks
 * split over the pool's threads.  Each value is computed by the same kernel on the same
 * operands, so the bytes are those of the steps one after the other; what changes is that a
 * block's intermediates are still in L1 when the next step reads them, and that a chain of
 * small steps splits over the cores as one piece of work.  A range that starts inside a chain
 * (a profiled or checked execute runs node by node) runs the steps one after the other.
 *
 * The converters reproduce, bit for bit, the Python plan's (qnnemu/spec/quant.py Dequantizer
 * and Requantize, qnnemu/ops/base.py htp_fp16_round and htp_fp16_to_fp32): the same float32 /
 * float64 operations in the same order.  The build turns FMA contraction off
 * (-ffp-contract=off), as numpy never fuses.
 */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eng_sched.h"
#include "kernels.h"
#include "pool.h"

static inline void *resolve(const int64_t *bufs, int64_t id, char *arena, void *const *io)
{
    const int64_t *b = bufs + 2 * id;
    switch (b[0]) {
    case QE_BUF_ABSOLUTE: return (void *)(intptr_t)b[1];
    case QE_BUF_ARENA: return arena + b[1];
    default: return io[b[1]];
    }
}

/* A header's int parameters: m, n, then per step: n_index, n_mult, np, element size of each
 * buffer (0: a broadcast value, not offset), ni, the step's int parameters rewritten for a
 * block (the block's element count times n_mult goes to n_index: qe_k_copy counts bytes). */
#define CHAIN_MAX_STEPS 32
#define CHAIN_MAX_PTRS 8
#define CHAIN_MAX_INTS 16

typedef struct {
    qe_kernel_fn fn;
    void *base[CHAIN_MAX_PTRS];
    int64_t esize[CHAIN_MAX_PTRS];
    int64_t ints[CHAIN_MAX_INTS];
    const double *d;
    int np, ni, nd, n_index;
    int64_t n_mult;
} chain_step;

typedef struct {
    const chain_step *st;
    int m;
    int64_t n, block, b0, b1;     /* this piece: blocks [b0, b1) */
    long first;                   /* the program index of the chain's first step */
    atomic_long *err;
} chain_piece;

static void chain_piece_run(void *pp)
{
    chain_piece *c = pp;
    int prev = qe_call_threads();
    qe_set_call_threads(1);       /* the steps' kernels must not split a block again */
    void *ptrs[CHAIN_MAX_PTRS];
    int64_t ints[CHAIN_MAX_INTS];
    for (int64_t b = c->b0; b < c->b1; b++) {
        int64_t e0 = b * c->block, len = c->n - e0 < c->block ? c->n - e0 : c->block;
        for (int j = 0; j < c->m; j++) {
            const chain_step *st = &c->st[j];
            for (int q = 0; q < st->np; q++)
                ptrs[q] = (char *)st->base[q] + e0 * st->esize[q];
            memcpy(ints, st->ints, (size_t)st->ni * sizeof ints[0]);
            ints[st->n_index] = len * st->n_mult;
            qe_args a = {ptrs, ints, st->d, st->np, st->ni, st->nd};
            int rc = st->fn(&a);
            if (rc != 0) {
                long code = ((c->first + j) << 8) | (rc & 0xff);
                long none = -1;
                atomic_compare_exchange_strong(c->err, &none, code);
                qe_set_call_threads(prev);
                return;
            }
        }
    }
    qe_set_call_threads(prev);
}

/* Elements per block (QNNEMU_CHAIN_BLOCK overrides; a multiple of 64). */
static int64_t chain_block(void)
{
    static int64_t blk = 0;
    if (blk == 0) {
        const char *env = getenv("QNNEMU_CHAIN_BLOCK");
        long v = env && *env ? strtol(env, NULL, 10) : 4096;
        blk = v < 64 ? 64 : (v + 63) / 64 * 64;
    }
    return blk;
}

/* Runs the chain headed by step k (its m steps follow it); -1 or an error code as qe_run. */
static long run_chain(const int64_t *steps, long k, const int64_t *pbuf, const int64_t *ints,
                      const double *dbls, const int64_t *bufs, char *arena, void *const *io)
{
    const int64_t *h = ints + steps[k * QE_STEP_COLS + QE_STEP_IOFF];
    int m = (int)h[0];
    int64_t n = h[1];
    if (m < 1 || m > CHAIN_MAX_STEPS) return (k << 8) | 0xfd;
    chain_step st[CHAIN_MAX_STEPS];
    const int64_t *q = h + 2;
    for (int j = 0; j < m; j++) {
        const int64_t *s = steps + (k + 1 + j) * QE_STEP_COLS;
        chain_step *c = &st[j];
        c->fn = (qe_kernel_fn)(intptr_t)s[QE_STEP_FN];
        c->n_index = (int)q[0];
        c->n_mult = q[1];
        q++;
        c->np = (int)q[1];
        if (c->np != (int)s[QE_STEP_NP] || c->np > CHAIN_MAX_PTRS) return (k << 8) | 0xfd;
        const int64_t *ids = pbuf + s[QE_STEP_POFF];
        for (int p = 0; p < c->np; p++) {
            c->base[p] = resolve(bufs, ids[p], arena, io);
            c->esize[p] = q[2 + p];
        }
        q += 2 + c->np;
        c->ni = (int)q[0];
        if (c->ni > CHAIN_MAX_INTS || c->n_index < 0 || c->n_index >= c->ni) return (k << 8) | 0xfd;
        memcpy(c->ints, q + 1, (size_t)c->ni * sizeof c->ints[0]);
        q += 1 + c->ni;
        c->d = dbls + s[QE_STEP_DOFF];
        c->nd = (int)s[QE_STEP_ND];
    }
    int64_t block = chain_block();
    int64_t nblocks = (n + block - 1) / block;
    /* threads: one per ~20 us of work at ~0.3 ns per element and step (memory-bound kernels
     * in cache); the pieces are whole blocks */
    int t = qe_threads();
    int ct = qe_call_threads();
    if (ct > 0 && ct < t) t = ct;
    double work_ns = (double)n * m * 0.3;
    if (work_ns / 20000.0 < t) t = (int)(work_ns / 20000.0);
    if (t > nblocks) t = (int)nblocks;
    if (t > 16) t = 16;
    if (t < 1) t = 1;
    atomic_long err;
    atomic_init(&err, -1);
    chain_piece pieces[16];
    int64_t per = (nblocks + t - 1) / t;
    int cnt = 0;
    for (int64_t b = 0; b < nblocks && cnt < 16; b += per)
        pieces[cnt++] = (chain_piece){st, m, n, block, b, b + per < nblocks ? b + per : nblocks,
                                      k + 1, &err};
    if (cnt == 1) chain_piece_run(&pieces[0]);
    else qe_pool_run(chain_piece_run, pieces, sizeof pieces[0], cnt);
    return atomic_load(&err);
}

int qe_isa_avx512_capped(void)
{
    static int capped = -1;
    if (capped < 0) {
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        capped = force && (strcmp(force, "sse") == 0 || strcmp(force, "avx2") == 0
                           || strcmp(force, "avxvnni") == 0);
    }
    return capped;
}

/* A chain header (see the top of this file; its step row has QE_CHAIN_MARK buffers); run by
 * itself it does nothing. */
int qe_k_chain(const qe_args *a)
{
    (void)a;
    return 0;
}

long qe_run(const int64_t *steps, long first, long last, const int64_t *pbuf,
            const int64_t *ints, const double *dbls, const int64_t *bufs, char *arena,
            void *const *io)
{
    void *ptrs[QE_MAX_STEP_BUFFERS];
    for (long k = first; k < last; k++) {
        if (k > first)
            qe_sched_point();   /* an op boundary: yield to a higher-priority execute if asked */
        const int64_t *s = steps + k * QE_STEP_COLS;
        qe_kernel_fn fn = (qe_kernel_fn)(intptr_t)s[QE_STEP_FN];
        /* (a header is marked by its buffer count: the kernel address the compiler has is cffi's
         * trampoline, not this file's qe_k_chain) */
        if (s[QE_STEP_NP] == QE_CHAIN_MARK) {
            long m = (long)ints[s[QE_STEP_IOFF]];
            if (k + m < last) {   /* the whole chain is in this range */
                long rc = run_chain(steps, k, pbuf, ints, dbls, bufs, arena, io);
                if (rc != -1) return rc;
                k += m;
            }
            continue;
        }
        int np = (int)s[QE_STEP_NP];
        if (np > QE_MAX_STEP_BUFFERS) return (k << 8) | 0xfe;
        const int64_t *ids = pbuf + s[QE_STEP_POFF];
        for (int j = 0; j < np; j++)
            ptrs[j] = resolve(bufs, ids[j], arena, io);
        qe_args a = {ptrs, ints + s[QE_STEP_IOFF], dbls + s[QE_STEP_DOFF], np,
                     (int32_t)s[QE_STEP_NI], (int32_t)s[QE_STEP_ND]};
        int rc = fn(&a);
        if (rc != 0) return (k << 8) | (rc & 0xff);
    }
    return -1;   /* every step ran */
}

int qe_rc_python(void) { return QE_RC_PYTHON; }

/* p[0] -> p[1], i[0] bytes. */
int qe_k_copy(const qe_args *a)
{
    memcpy(a->p[1], a->p[0], (size_t)a->i[0]);
    return 0;
}

/* Element i of a buffer of type code t, as a double (exact for every code type but 64-bit
 * integers beyond 2**53, which no converter reads). */
static inline double load_as_double(const void *p, int t, int64_t i)
{
    switch (t) {
    case QE_U8: case QE_BOOL: return ((const uint8_t *)p)[i];
    case QE_I8: return ((const int8_t *)p)[i];
    case QE_U16: return ((const uint16_t *)p)[i];
    case QE_I16: return ((const int16_t *)p)[i];
    case QE_U32: return ((const uint32_t *)p)[i];
    case QE_I32: return ((const int32_t *)p)[i];
    case QE_F32: return ((const float *)p)[i];
    case QE_F64: return ((const double *)p)[i];
    case QE_I64: return (double)((const int64_t *)p)[i];
    case QE_U64: return (double)((const uint64_t *)p)[i];
    default: return 0.0;
    }
}

/* Dequantizer (per tensor): y = ((float)q + offset) * scale in float32.
 * p: codes, float32 out; i: n, code type; d: scale, offset (float32 values). */
/* A step that computes nothing: a node whose values another step wrote (an activation folded
 * into its float producer, the Multiply of a fused SiLU). */
int qe_k_nop(const qe_args *a)
{
    (void)a;
    return 0;
}

int qe_k_dequant(const qe_args *a)
{
    int64_t n = a->i[0];
    int t = (int)a->i[1];
    const float scale = (float)a->d[0], offset = (float)a->d[1];
    float *y = a->p[1];
    const void *q = a->p[0];
    switch (t) {
    case QE_U8: { const uint8_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    case QE_I8: { const int8_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    case QE_U16: { const uint16_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    case QE_I16: { const int16_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    case QE_I32: { const int32_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    case QE_U32: { const uint32_t *s = q; for (int64_t k = 0; k < n; k++) { float v = (float)s[k]; v += offset; y[k] = v * scale; } break; }
    default: return 2;
    }
    return 0;
}

static inline float store_round(float y, int mode)
{
    switch (mode) {
    case 0: return rintf(y);
    case 1: return floorf(y + 0.5f);
    case 3:
        if (y < -65504.0f) y = -65504.0f;
        else if (y > 65504.0f) y = 65504.0f;
        if (y == y) y = f16_rne(y);
        /* fall through: half away from zero */
    default: return truncf(y + copysignf(0.5f, y));
    }
}


/* Mode 3 (Quantize's 8-bit rounding) eight at a time with F16C: clip to +-65504 (NaN kept),
 * float16 round half to even (vcvtps2ph: f16_rne for these values, subnormals included), half
 * away from zero, - offset, clamp -- the scalar steps, in the same order. */
__attribute__((target("avx2,f16c"))) static int64_t requant_fp16_f16c(const float *xb, float *codes,
                                                                      int64_t n, float inv,
                                                                      float offset, float lo,
                                                                      float hi)
{
    const __m256 vinv = _mm256_set1_ps(inv), lo16 = _mm256_set1_ps(-65504.0f),
                 hi16 = _mm256_set1_ps(65504.0f), half = _mm256_set1_ps(0.5f),
                 sign = _mm256_set1_ps(-0.0f), voff = _mm256_set1_ps(offset),
                 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 y = _mm256_mul_ps(_mm256_loadu_ps(xb + k), vinv);
        y = _mm256_blendv_ps(y, lo16, _mm256_cmp_ps(y, lo16, _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, hi16, _mm256_cmp_ps(y, hi16, _CMP_GT_OQ));
        y = _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT));
        __m256 h = _mm256_or_ps(half, _mm256_and_ps(y, sign));
        y = _mm256_round_ps(_mm256_add_ps(y, h), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        y = _mm256_sub_ps(y, voff);
        y = _mm256_blendv_ps(vhi, y, _mm256_cmp_ps(y, vhi, _CMP_LT_OQ));
        y = _mm256_blendv_ps(y, vlo, _mm256_cmp_ps(y, vlo, _CMP_LT_OQ));
        _mm256_storeu_ps(codes + k, y);
    }
    return k;
}

static int has_f16c(void)
{
    static int on = -1;
    if (on < 0) {
        __builtin_cpu_init();
        on = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    return on;
}

/* codes[k] = clamp(round(x[k] * inv) - offset): one loop per rounding mode, so that each
 * vectorizes (AVX-512 / AVX2 clones chosen at load time; IEEE operations only, the same bits on
 * every clone).  fmin(y, hi) as y < hi ? y : hi: NaN -> hi, the same value otherwise. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void requant_block(const float *xb, float *codes, int64_t n, int mode, float inv,
                          float offset, float lo, float hi)
{
#define REQUANT_LOOP(ROUND)                                                                       \
    for (int64_t k = 0; k < n; k++) {                                                             \
        float y = xb[k] * inv;                                                                    \
        y = ROUND;                                                                                \
        y -= offset;                                                                              \
        y = y < hi ? y : hi;                                                                      \
        codes[k] = y < lo ? lo : y;                                                               \
    }
    switch (mode) {
    case 0: REQUANT_LOOP(rintf(y)); break;
    case 1: REQUANT_LOOP(floorf(y + 0.5f)); break;
    case 3: {
        int64_t done = has_f16c() ? requant_fp16_f16c(xb, codes, n, inv, offset, lo, hi) : 0;
        xb += done;
        codes += done;
        n -= done;
        REQUANT_LOOP(store_round(y, 3));
        break;
    }
    default: REQUANT_LOOP(truncf(y + copysignf(0.5f, y))); break;
    }
#undef REQUANT_LOOP
}

/* Requantize (per tensor, codes of at most 16 bits): float32 x -> codes.
 * p: float32 x, codes out; i: n, code type, mode (0 half_even, 1 half_up,
 * 2 half_away_from_zero, 3 fp16_half_away_from_zero, 4 exact_half_away_from_zero), lo, hi;
 * d: inv (float32 1/scale), offset (float32).  Works in blocks through a float buffer. */
int qe_k_requant(const qe_args *a)
{
    int64_t n_all = a->i[0];
    int t = (int)a->i[1], mode = (int)a->i[2];
    const float lo = (float)a->i[3], hi = (float)a->i[4];
    const float inv = (float)a->d[0], offset = (float)a->d[1];
    const double lo64 = (double)a->i[3], hi64 = (double)a->i[4];
    const float *x = a->p[0];
    float codes[1024];
    for (int64_t base = 0; base < n_all; base += 1024) {
        int64_t n = n_all - base < 1024 ? n_all - base : 1024;
        const float *xb = x + base;
        if (mode == 4) {
            for (int64_t k = 0; k < n; k++) {
                double y = (double)xb[k] * (double)inv;
                y = trunc(y + copysign(0.5, y));
                y -= (double)offset;
                y = fmin(y, hi64);          /* NaN -> hi */
                y = y < lo64 ? lo64 : y;
                codes[k] = (float)y;         /* an integer below 2**17: exact */
            }
        } else {
            requant_block(xb, codes, n, mode, inv, offset, lo, hi);
        }
        switch (t) {
        case QE_U8: { uint8_t *o = (uint8_t *)a->p[1] + base; for (int64_t k = 0; k < n; k++) o[k] = (uint8_t)codes[k]; break; }
        case QE_I8: { int8_t *o = (int8_t *)a->p[1] + base; for (int64_t k = 0; k < n; k++) o[k] = (int8_t)codes[k]; break; }
        case QE_U16: { uint16_t *o = (uint16_t *)a->p[1] + base; for (int64_t k = 0; k < n; k++) o[k] = (uint16_t)codes[k]; break; }
        case QE_I16: { int16_t *o = (int16_t *)a->p[1] + base; for (int64_t k = 0; k < n; k++) o[k] = (int16_t)codes[k]; break; }
        default: return 2;
        }
    }
    return 0;
}

#define HTP_FP16_MAX 131008.0f
#define FP16_MIN_NORMAL (1.0f / 16384.0f)

/* htp_fp16_round: float32 -> the HTP's float16 grid, as float32.
 * p: x, y (float32; may be the same buffer); i: n, ties (0 away, 1 even).
 * Branch-free so that it vectorizes (AVX-512 / AVX2 clones; integer operations, the same bits on
 * every clone): a normal float16 rounds the float32 bits at bit 13, a subnormal one below. */
/* Below 2**-14 the float16 grid is k * 2**-24: |x| = M * 2**(E - 150) (E the biased exponent,
 * M the mantissa with its hidden bit; E 0: M * 2**-149), so |x| * 2**24 = M >> s with
 * s = 126 - E (125 for E 0), at least 14 there; rounded in integers (s clamped to 31: M < 2**24
 * rounds to 0 then), times 2**-24 exactly. */
#define FP16_ROUND_LOOP(EVEN)                                                                       \
    for (int64_t k = 0; k < n; k++) {                                                               \
        uint32_t vb;                                                                                \
        __builtin_memcpy(&vb, &x[k], 4);                                                            \
        uint32_t bits = vb & 0x7fffffffu, sign = vb & 0x80000000u;                                  \
        uint32_t rb = EVEN ? (bits + 0x0fffu + ((bits >> 13) & 1u)) & 0xffffe000u                  \
                           : (bits + 0x1000u) & 0xffffe000u;                                        \
        uint32_t e = bits >> 23;                                                                    \
        uint32_t m = (bits & 0x7fffffu) | (e ? 0x800000u : 0u);                                    \
        uint32_t sh = e ? 126u - e : 125u;                                                          \
        uint32_t sub = -(uint32_t)(bits < 0x38800000u);   /* masks, not selects: vectorizes */     \
        sh = ((sh < 31u ? sh : 31u) & sub) | (14u & ~sub);                                          \
        uint32_t half = 1u << (sh - 1u);                                                            \
        uint32_t qi = EVEN ? (m + half - 1u + ((m >> sh) & 1u)) >> sh : (m + half) >> sh;          \
        float rs = (float)(int32_t)qi * (1.0f / 16777216.0f);                                       \
        uint32_t sb;                                                                                \
        __builtin_memcpy(&sb, &rs, 4);                                                              \
        rb = (sb & sub) | (rb & ~sub);                                                              \
        uint32_t big = -(uint32_t)((bits > 0x7f800000u) | (rb > 0x47ffe000u));  /* NaN, > 131008 */ \
        rb = (0x47ffe000u & big) | (rb & ~big);                                                     \
        rb |= sign;                                                                                 \
        __builtin_memcpy(&y[k], &rb, 4);                                                            \
    }

/* (the bounds compare the bits: 0x38800000 is 2**-14, 0x47ffe000 is 131008) */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void fp16_round_block(const float *x, float *y, int64_t n, int even)
{
    if (even)
        FP16_ROUND_LOOP(1)
    else
        FP16_ROUND_LOOP(0)
}
#undef FP16_ROUND_LOOP

/* Element-wise passes of the float16 conversions, split over the pool's threads from about
 * 10 us of work per thread (~0.3 ns an element); pieces of whole 64-element blocks. */
typedef struct { int kind; const float *x; float *y; int64_t e0, e1; int even; } fp16_piece;

static void fp16_block(const float *x, float *y, int64_t n, int kind, int even);

static void fp16_piece_run(void *p)
{
    fp16_piece *c = p;
    if (c->e1 > c->e0) fp16_block(c->x + c->e0, c->y + c->e0, c->e1 - c->e0, c->kind, c->even);
}

#define FP16_SPLIT_ELEMS 32768

static void fp16_parallel(const float *x, float *y, int64_t n, int kind, int even)
{
    int t = qe_threads();
    int c = qe_call_threads();
    if (c > 0 && c < t) t = c;
    int64_t want = n / FP16_SPLIT_ELEMS;
    if (want < t) t = (int)want;
    if (t > 16) t = 16;
    if (t < 2) {
        fp16_block(x, y, n, kind, even);
        return;
    }
    fp16_piece pieces[16];
    int64_t per = ((n + t - 1) / t + 63) / 64 * 64;
    int cnt = 0;
    for (int64_t e = 0; e < n && cnt < 16; e += per)
        pieces[cnt++] = (fp16_piece){kind, x, y, e, e + per < n ? e + per : n, even};
    qe_pool_run(fp16_piece_run, pieces, sizeof pieces[0], cnt);
}

/* The same rounding, 16 (AVX-512) or 8 (AVX2) lanes at a time.  A normal float16 (or beyond:
 * > 131008, infinity and NaN round to bits above 0x47ffe000 and clamp to it by an unsigned
 * minimum) needs only the bit-13 rounding; a vector with a float16 subnormal (a nonzero
 * |x| < 2**-14) also computes those lanes in float arithmetic, all exact: s = |x| * 2**24 (a
 * power of two), its integer part t (truncation) and fraction s - t, rounded to q (ties even:
 * the rounding instruction; ties away: t + (fraction >= 0.5)), times 2**-24.  (Conv and GEMM
 * outputs of random-weight models have a subnormal in a few percent of their vectors: a scalar
 * loop there took 12% of MobileNetV2 in float16 math.)  The same bits as fp16_round_block for
 * every float32 (checked over all 2**32 patterns in both tie modes: tests/test_engine_convert.py
 * samples them, the exhaustive run is tools/exhaustive_fp16_round.py). */
/* One vector of 16 lanes rounded (the sign back included); 'sub' the float16-subnormal lanes. */
__attribute__((target("avx512f"), always_inline)) static inline __m512i fp16_round16(__m512i v, int even,
                                                                                 int always)
{
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    __m512i bits = _mm512_and_si512(v, absmask);
    __mmask16 sub = _mm512_mask_cmpneq_epi32_mask(
        _mm512_cmplt_epu32_mask(bits, _mm512_set1_epi32(0x38800000)), bits, _mm512_setzero_si512());
    __m512i add = even ? _mm512_add_epi32(_mm512_set1_epi32(0x0fff),
                                          _mm512_and_si512(_mm512_srli_epi32(bits, 13), _mm512_set1_epi32(1)))
                       : _mm512_set1_epi32(0x1000);
    __m512i rb = _mm512_and_si512(_mm512_add_epi32(bits, add), _mm512_set1_epi32((int)0xffffe000u));
    rb = _mm512_min_epu32(rb, _mm512_set1_epi32(0x47ffe000));
    if (always || sub) {
    __m512 sc = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(16777216.0f));
    __m512 q;
    if (even) {
        q = _mm512_roundscale_ps(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
        __m512 t = _mm512_roundscale_ps(sc, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(sc, t), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
        q = _mm512_mask_add_ps(t, up, t, _mm512_set1_ps(1.0f));
    }
    q = _mm512_mul_ps(q, _mm512_set1_ps(1.0f / 16777216.0f));
    rb = _mm512_mask_mov_epi32(rb, sub, _mm512_castps_si512(q));
    }
    return _mm512_or_si512(rb, _mm512_andnot_si512(absmask, v));   /* the sign back */
}

/* The rounding, then (act 1) a ReLU or (act 2) a clip to [lo, hi] as csrc/kernels.c applies them
 * (a rounded value is never NaN), in one pass; the tail by masked loads and stores. */
__attribute__((target("avx512f"))) static void fp16_round_avx512(const float *x, float *y, int64_t n,
                                                               int even, int act, float lo, float hi,
                                                               int always)
{
    const __m512 l = _mm512_set1_ps(lo), u = _mm512_set1_ps(hi), z = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1u);
        __m512 r = _mm512_castsi512_ps(fp16_round16(_mm512_maskz_loadu_epi32(m, x + k), even, always));
        if (act == 1)
            r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, z, _CMP_NLE_UQ), r);
        else if (act == 2)
            r = _mm512_min_ps(u, _mm512_max_ps(l, r));
        _mm512_mask_storeu_ps(y + k, m, r);
    }
}

__attribute__((target("avx2"))) static void fp16_round_avx2(const float *x, float *y, int64_t n, int even)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff), min_normal = _mm256_set1_epi32(0x38800000);
    const __m256i top = _mm256_set1_epi32(0x47ffe000), keep = _mm256_set1_epi32((int)0xffffe000u);
    const __m256i half = _mm256_set1_epi32(even ? 0x0fff : 0x1000), one = _mm256_set1_epi32(1);
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u), zero = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + k));
        __m256i bits = _mm256_and_si256(v, absmask);
        /* (bits < 2**31: a signed compare is an unsigned one) */
        __m256i sub = _mm256_andnot_si256(_mm256_cmpeq_epi32(bits, zero), _mm256_cmpgt_epi32(min_normal, bits));
        __m256i add = even ? _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(bits, 13), one)) : half;
        __m256i rb = _mm256_and_si256(_mm256_add_epi32(bits, add), keep);
        rb = _mm256_min_epu32(rb, top);
        if (__builtin_expect(!_mm256_testz_si256(sub, sub), 0)) {
            __m256 sc = _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(16777216.0f));
            __m256 q;
            if (even) {
                q = _mm256_round_ps(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            } else {
                __m256 t = _mm256_round_ps(sc, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                __m256 up = _mm256_cmp_ps(_mm256_sub_ps(sc, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
                q = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_set1_ps(1.0f)));
            }
            q = _mm256_mul_ps(q, _mm256_set1_ps(1.0f / 16777216.0f));
            rb = _mm256_blendv_epi8(rb, _mm256_castps_si256(q), sub);
        }
        rb = _mm256_or_si256(rb, _mm256_and_si256(v, sign));
        _mm256_storeu_si256((__m256i *)(y + k), rb);
    }
    if (k < n) fp16_round_block(x + k, y + k, n - k, even);
}

static int fp16_level(void)
{
    static int level = -1;
    if (level < 0) {
        __builtin_cpu_init();
        level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
        const char *force = getenv("QNNEMU_KERNELS_ISA");   /* as the GEMM's (csrc/kernels.c) */
        if (force && strcmp(force, "avx2") == 0 && level > 1) level = 1;
        if (force && strcmp(force, "sse") == 0) level = 0;
    }
    return level;
}

static void fp16_round_fast(const float *x, float *y, int64_t n, int even, int always)
{
    int level = fp16_level();
    if (level == 2) fp16_round_avx512(x, y, n, even, 0, 0.0f, 0.0f, always);
    else if (level == 1) fp16_round_avx2(x, y, n, even);
    else fp16_round_block(x, y, n, even);
}

/* y[0:n] rounded to float16 values in place on the calling thread (ties: 0 away, 1 even): the
 * epilogue of a GEMM or convolution in float16 math (csrc/kernels.c), qe_k_fp16_round's values. */
void qe_fp16_round_inplace(float *y, int64_t n, int even) { fp16_round_fast(y, y, n, even, 1); }

/* The same rounding and then act (1 ReLU, 2 clip to [lo, hi]) in one pass when AVX-512 is on:
 * returns 1 then, 0 (nothing done) otherwise. */
int qe_fp16_round_act_inplace(float *y, int64_t n, int even, int act, float lo, float hi)
{
    if (fp16_level() != 2) return 0;
    fp16_round_avx512(y, y, n, even, act, lo, hi, 1);
    return 1;
}

/* p: x, y; i: n, ties (0 away, 1 even); i[2] if present: 1 runs the plain loop alone (the
 * tests compare the two). */
int qe_k_fp16_round(const qe_args *a)
{
    fp16_parallel(a->p[0], a->p[1], a->i[0], a->ni > 2 && a->i[2] == 1 ? 2 : 0, (int)a->i[1]);
    return 0;
}

/* htp_fp16_to_fp32: a float16-math result delivered as float32 (one float32 ulp of the value's
 * binade away from zero, the binade at least float16's smallest normal 2**-14; zeros stay
 * zeros, infinities as they are, NaNs quiet).  p: x, y; i: n.  Vectorizes: for |v| >= 2**-14 one
 * ulp up is the next float32 (its bits + 1); below, |v| + 2**-37 (exact: |v| is a multiple of
 * 2**-38 at most 2**-15 there). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void fp16_to_fp32_block(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        float v = x[k];
        uint32_t vb;
        __builtin_memcpy(&vb, &v, 4);
        uint32_t bits = vb & 0x7fffffffu, sign = vb & 0x80000000u;
        float av;
        __builtin_memcpy(&av, &bits, 4);
        uint32_t nb = bits + 1u;
        float next;
        __builtin_memcpy(&next, &nb, 4);
        float small = av + 7.275957614183426e-12f;   /* 2**-37 */
        float up = av < FP16_MIN_NORMAL ? small : next;
        uint32_t qb = bits > 0x7f800000u ? bits | 0x00400000u : bits;   /* a NaN comes out quiet */
        float same;
        __builtin_memcpy(&same, &qb, 4);
        up = (bits == 0u || bits >= 0x7f800000u) ? same : up;   /* zero, infinity, NaN */
        uint32_t ob;
        __builtin_memcpy(&ob, &up, 4);
        ob |= sign;
        __builtin_memcpy(&y[k], &ob, 4);
    }
}

static void fp16_block(const float *x, float *y, int64_t n, int kind, int even)
{
    if (kind == 0) fp16_round_fast(x, y, n, even, 0);
    else if (kind == 2) fp16_round_block(x, y, n, even);
    else fp16_to_fp32_block(x, y, n);
}

int qe_k_fp16_to_fp32(const qe_args *a)
{
    fp16_parallel(a->p[0], a->p[1], a->i[0], 1, 0);
    return 0;
}

/* numpy astype between the float types and from float32 to float16 (round half to even) or
 * integer-to-integer/float widening: p: x, y; i: n, from type, to type.  Only the casts the
 * lowering proved exact/defined are emitted (no float -> integer). */
int qe_k_cast(const qe_args *a)
{
    int64_t n = a->i[0];
    int from = (int)a->i[1], to = (int)a->i[2];
    const void *x = a->p[0];
    void *y = a->p[1];
    if (from == QE_F32 && to == QE_F16) {
        _Float16 *o = y;
        const float *s = x;
        for (int64_t k = 0; k < n; k++) o[k] = (_Float16)s[k];
        return 0;
    }
    if (from == QE_F16 && to == QE_F32) {
        const _Float16 *s = x;
        float *o = y;
        for (int64_t k = 0; k < n; k++) o[k] = (float)s[k];
        return 0;
    }
    for (int64_t k = 0; k < n; k++) {
        double v = load_as_double(x, from, k);
        switch (to) {
        case QE_F32: ((float *)y)[k] = (float)v; break;
        case QE_F64: ((double *)y)[k] = v; break;
        case QE_I32: ((int32_t *)y)[k] = (int32_t)v; break;
        case QE_I64: ((int64_t *)y)[k] = (int64_t)v; break;
        case QE_U8: case QE_BOOL: ((uint8_t *)y)[k] = (uint8_t)v; break;
        case QE_I8: ((int8_t *)y)[k] = (int8_t)v; break;
        case QE_U16: ((uint16_t *)y)[k] = (uint16_t)v; break;
        case QE_I16: ((int16_t *)y)[k] = (int16_t)v; break;
        case QE_U32: ((uint32_t *)y)[k] = (uint32_t)v; break;
        default: return 2;
        }
    }
    return 0;
}

/* numpy.nan_to_num of float32 (NaN -> 0, +-inf -> +-FLT_MAX): p: x, y; i: n. */
int qe_k_nan_to_num(const qe_args *a)
{
    int64_t n = a->i[0];
    const float *x = a->p[0];
    float *y = a->p[1];
    for (int64_t k = 0; k < n; k++) {
        float v = x[k];
        if (v != v) v = 0.0f;
        else if (v == INFINITY) v = 3.40282346638528859812e+38f;
        else if (v == -INFINITY) v = -3.40282346638528859812e+38f;
        y[k] = v;
    }
    return 0;
}

/* quant.dequantize: (float)(scale * ((double)q + offset)) in float64, per tensor or per axis.
 * p: codes, float32 out; i: n, code type, channels, inner (index = (k / inner) % channels);
 * d: scale[channels], offset[channels]. */
int qe_k_dequant64(const qe_args *a)
{
    int64_t n = a->i[0], ch = a->i[2], inner = a->i[3];
    int t = (int)a->i[1];
    const double *scale = a->d, *offset = a->d + ch;
    float *y = a->p[1];
    for (int64_t k = 0; k < n; k++) {
        int64_t c = ch == 1 ? 0 : (k / inner) % ch;
        y[k] = (float)(scale[c] * (load_as_double(a->p[0], t, k) + offset[c]));
    }
    return 0;
}
