/* qnnemu C kernels for the NHWC convolution, pooling and matrix-product ops.
 *
 * - qe_sgemm / qe_sgemm_packed / qe_sgemm_batched: BLIS-style float32 GEMM (packed panels;
 *   6 x 16 AVX2 or 6 x 8 SSE micro-kernel; with AVX-512, 8 x 32 / 8 x 16 micro-kernels that read
 *   the rows of A in place, as segments, and a pre-packed B prefetched panel by panel), large
 *   products split over
 *   qe_set_threads() threads (created per call: nothing stays running between calls), at most
 *   qe_set_call_threads() for the calling thread when it set a limit;
 *   qe_pack_b packs a static right-hand operand once.  qnnemu.ops._fast uses it instead of
 *   numpy's BLAS where it is faster: on CPUs with AVX-512 when OpenBLAS runs AVX2 kernels
 *   (OPENBLAS_CORETYPE=Haswell, or an OpenBLAS that does not know the CPU);
 * - qe_sconv2d: a 2-D convolution as an implicit GEMM: the AVX-512 kernels read the receptive
 *   fields in place (one segment per filter row or tap, padding from a block of zeros); the
 *   other micro-kernels pack them;
 * - qe_im2col2d: gathers the receptive fields of a range of output pixels into GEMM rows,
 *   zero filling the padding, so the input is never copied into a padded buffer;
 * - qe_col2im2d: scatters the per-tap GEMM products of a transposed convolution into its
 *   output (the adjoint of im2col);
 * - qe_depthwise2d: direct depthwise convolution (one input channel per group), which has too
 *   little arithmetic per byte for a GEMM (3x3 and 5x5 with the filter in AVX-512 registers);
 * - qe_pool2d: max / average pooling (max pooling 16 channels per AVX-512 vector).
 * The memory-bound kernels split their output pixels over the threads as the GEMM splits rows.
 *
 * Built with -O3 -march=x86-64-v2 (SSE4.2).  The hot loops are compiled a second time with
 * __attribute__((target("avx2,fma"))) (the GEMM micro-kernel also for "avx512f") and picked
 * at run time with __builtin_cpu_supports, so the library still loads and runs on any
 * x86-64-v2 machine.  QNNEMU_KERNELS_ISA=sse forces the baseline variants, =avx2 keeps the
 * GEMM off AVX-512.  Layouts: input NHWC [n, h, w, c]; padding [top, left] given explicitly,
 * the bottom/right padding is implied by the output size the caller computed.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "eng_eltwise.h"   /* qe_ew_silu_inplace: a folded SiLU */
#include "kernels.h"
#include "pool.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Folded activations (the act argument of the *_act kernels; kernels.h) */
#define QE_ACT_NONE 0
#define QE_ACT_RELU 1   /* numpy.maximum(x, 0) */
#define QE_ACT_CLIP 2   /* numpy.clip(x, lo, hi) */
#define QE_ACT_SILU 3   /* x * sigmoid(x): the Sigmoid's float32 value, then the float32 product */
#define QE_ACT_SILU_SX 4    /* sigmoid(x) * x (the Multiply's other operand order) */
#define QE_ACT_SILU16 5     /* float16 math's SiLU: both steps round (after the result's rounding) */
#define QE_ACT_SILU16_SX 6
/* The bits above the mode: float16 math's rounding of the result before the activation (1: ties
 * away from zero, 2: ties to even; qe_fp16_round_inplace), applied to each finished row block. */
#define QE_ACT_MODE(a) ((a) & 0xff)
#define QE_ACT_ROUND(a) ((a) >> 8)
/* Whether the micro-kernels apply the activation to the values they store (act512) or the row
 * block gets it after (rounding first, a SiLU) */
#define QE_ACT_IN_STORE(a) ((a) < QE_ACT_SILU)

typedef float v8f __attribute__((vector_size(32)));

ALWAYS_INLINE v8f ld8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

ALWAYS_INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }

static int g_isa = -1;  /* 0: baseline (SSE4.2), 1: AVX2+FMA; decided once */

static int use_avx2(void)
{
    if (g_isa < 0) {
        __builtin_cpu_init();
        int isa = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
        const char *force = getenv("QNNEMU_KERNELS_ISA");  /* "sse" forces the baseline path */
        if (force && strcmp(force, "sse") == 0) isa = 0;
        g_isa = isa;
    }
    return g_isa;
}

/* 1 if the AVX2+FMA variants are in use, 0 for the baseline ones. */
int qe_isa(void) { return use_avx2(); }

/* Defines NAME_base and NAME_avx2: the body NAME_body compiled for the baseline and for
 * AVX2+FMA (the public qe_* function picks one). */
#define VARIANTS(NAME, PARAMS, ARGS)                                                       \
    static void NAME##_base PARAMS { NAME##_body ARGS; }                                  \
    __attribute__((target("avx2,fma"))) static void NAME##_avx2 PARAMS { NAME##_body ARGS; }

/* ---- GEMM -------------------------------------------------------------------------------- */

#define KC 256     /* at most; K is split into equal blocks of <= KC */
#define MC 120     /* multiple of MR and SMR (row_unit below) */
#define NC 4096    /* multiple of every NR (8, 16, 32) */
#define MR 6

typedef float v4f __attribute__((vector_size(16)));

static int g_threads = 1;
/* The calling thread's own limit (0: none): several application threads executing graphs at
 * once share the cores (qnnemu/core/threads.py sets it per execute), so each splits its work
 * over fewer threads instead of oversubscribing them. */
static __thread int t_call_threads;

/* Threads a large GEMM (or a batch of GEMMs) is split over; 1 runs in the caller only. */
void qe_set_threads(int n) { g_threads = n < 1 ? 1 : (n > 64 ? 64 : n); }
int qe_threads(void) { return g_threads; }
void qe_set_call_threads(int n) { t_call_threads = n < 0 ? 0 : (n > 64 ? 64 : n); }
int qe_call_threads(void) { return t_call_threads; }

/* The threads this call may use: the global setting, capped by the calling thread's limit. */
static int threads_now(void)
{
    return t_call_threads > 0 && t_call_threads < g_threads ? t_call_threads : g_threads;
}

static int g_avx512 = -1;

/* 1 if the AVX-512 GEMM micro-kernel is in use (QNNEMU_KERNELS_ISA=sse or avx2 turns it off). */
int qe_gemm_avx512(void)
{
    if (g_avx512 < 0) {
        __builtin_cpu_init();
        int on = __builtin_cpu_supports("avx512f") && use_avx2();
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        if (force && (strcmp(force, "sse") == 0 || strcmp(force, "avx2") == 0)) on = 0;
        g_avx512 = on;
    }
    return g_avx512;
}

static void *aligned_buf(size_t nfloats)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (nfloats ? nfloats : 1) * sizeof(float)) != 0)
        return NULL;
    return p;
}

/* Pack A[i0:i0+mc, p0:p0+kc] (strided) into MR-row panels, k-major inside a panel,
 * zero padded. */
static void pack_a(int mc, int kc, const float *A, long rsa, long csa, float *Ap)
{
    for (int i = 0; i < mc; i += MR) {
        int mr = mc - i < MR ? mc - i : MR;
        for (int p = 0; p < kc; p++) {
            const float *a = A + (long)i * rsa + (long)p * csa;
            int r = 0;
            for (; r < mr; r++) Ap[r] = a[(long)r * rsa];
            for (; r < MR; r++) Ap[r] = 0.0f;
            Ap += MR;
        }
    }
}

/* pack_a for rows with unit column stride: 8 columns of the 6 rows at a time, transposed in
 * registers (8 x 8 with 2 zero rows) and stored as 8 overlapping 8-float writes of which 6
 * are kept (Ap needs 2 floats of slack at its end). */
__attribute__((target("avx2,fma")))
static void pack_a_rows_avx2(int mc, int kc, const float *A, long rsa, float *Ap)
{
    for (int i = 0; i < mc; i += MR) {
        int mr = mc - i < MR ? mc - i : MR;
        const float *a = A + (long)i * rsa;
        if (mr < MR) {
            pack_a(mr, kc, a, rsa, 1, Ap);
            Ap += (long)MR * kc;
            continue;
        }
        int p = 0;
        for (; p + 8 <= kc; p += 8) {
            __m256 r0 = _mm256_loadu_ps(a + p), r1 = _mm256_loadu_ps(a + rsa + p);
            __m256 r2 = _mm256_loadu_ps(a + 2 * rsa + p), r3 = _mm256_loadu_ps(a + 3 * rsa + p);
            __m256 r4 = _mm256_loadu_ps(a + 4 * rsa + p), r5 = _mm256_loadu_ps(a + 5 * rsa + p);
            __m256 z = _mm256_setzero_ps();
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
            __m256 t6 = _mm256_unpacklo_ps(z, z), t7 = t6;
            __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
            __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
            /* column c of the 8 x 8 block: rows 0-3 from s*, rows 4-7 from s*+4 */
            __m256 c0 = _mm256_permute2f128_ps(s0, s4, 0x20);
            __m256 c4 = _mm256_permute2f128_ps(s0, s4, 0x31);
            __m256 c1 = _mm256_permute2f128_ps(s1, s5, 0x20);
            __m256 c5 = _mm256_permute2f128_ps(s1, s5, 0x31);
            __m256 c2 = _mm256_permute2f128_ps(s2, s6, 0x20);
            __m256 c6 = _mm256_permute2f128_ps(s2, s6, 0x31);
            __m256 c3 = _mm256_permute2f128_ps(s3, s7, 0x20);
            __m256 c7 = _mm256_permute2f128_ps(s3, s7, 0x31);
            float *d = Ap + (long)p * MR;
            _mm256_storeu_ps(d, c0);
            _mm256_storeu_ps(d + 6, c1);
            _mm256_storeu_ps(d + 12, c2);
            _mm256_storeu_ps(d + 18, c3);
            _mm256_storeu_ps(d + 24, c4);
            _mm256_storeu_ps(d + 30, c5);
            _mm256_storeu_ps(d + 36, c6);
            _mm256_storeu_ps(d + 42, c7);
        }
        for (; p < kc; p++)
            for (int r = 0; r < MR; r++) Ap[(long)p * MR + r] = a[(long)r * rsa + p];
        Ap += (long)MR * kc;
    }
}

/* Pack B[0:kc, 0:nc] into nr_w-column panels, k-major inside a panel, zero padded. */
static void pack_b(int kc, int nc, int nr_w, const float *B, long rsb, long csb, float *Bp)
{
    for (int j = 0; j < nc; j += nr_w) {
        int nr = nc - j < nr_w ? nc - j : nr_w;
        for (int p = 0; p < kc; p++) {
            const float *b = B + (long)p * rsb + (long)j * csb;
            int c = 0;
            if (csb == 1)
                for (; c < nr; c++) Bp[c] = b[c];
            else
                for (; c < nr; c++) Bp[c] = b[(long)c * csb];
            for (; c < nr_w; c++) Bp[c] = 0.0f;
            Bp += nr_w;
        }
    }
}

/* Writes the mr x nr valid part of an MR x nr_w tile into C; first: C = t (+ bias),
 * else C += t. */
static inline void store_tile(const float *t, int nr_w, int mr, int nr, float *C, long ldc,
                              int first, const float *bias)
{
    for (int r = 0; r < mr; r++) {
        float *c = C + (long)r * ldc;
        const float *tr = t + r * nr_w;
        if (first) {
            if (bias)
                for (int j = 0; j < nr; j++) c[j] = tr[j] + bias[j];
            else
                for (int j = 0; j < nr; j++) c[j] = tr[j];
        } else {
            for (int j = 0; j < nr; j++) c[j] += tr[j];
        }
    }
}

typedef void (*ukernel_fn)(int, const float *, const float *, float *, long, int, int, int,
                           const float *);

/* SSE micro-kernel: 6 x 8 (12 accumulators + 2 B vectors + 1 broadcast = 15 xmm). */
static void ukernel_sse(int kc, const float *Ap, const float *Bp, float *C, long ldc,
                        int mr, int nr, int first, const float *bias)
{
    v4f c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = (v4f){0, 0, 0, 0};
    for (int p = 0; p < kc; p++) {
        v4f b0, b1;
        memcpy(&b0, Bp, 16);
        memcpy(&b1, Bp + 4, 16);
        for (int r = 0; r < MR; r++) {
            v4f a = (v4f){Ap[r], Ap[r], Ap[r], Ap[r]};
            c[r][0] += a * b0;
            c[r][1] += a * b1;
        }
        Ap += MR;
        Bp += 8;
    }
    float t[MR * 8] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++) {
        memcpy(t + r * 8, &c[r][0], 16);
        memcpy(t + r * 8 + 4, &c[r][1], 16);
    }
    store_tile(t, 8, mr, nr, C, ldc, first, bias);
}

/* AVX2+FMA micro-kernel: 6 x 16 (12 ymm accumulators + 2 B + 1 broadcast). */
__attribute__((target("avx2,fma")))
static void ukernel_avx2(int kc, const float *Ap, const float *Bp, float *C, long ldc,
                         int mr, int nr, int first, const float *bias)
{
    v8f c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = (v8f){0, 0, 0, 0, 0, 0, 0, 0};
    for (int p = 0; p < kc; p++) {
        v8f b0 = ld8(Bp), b1 = ld8(Bp + 8);
        for (int r = 0; r < MR; r++) {
            float s = Ap[r];
            v8f a = (v8f){s, s, s, s, s, s, s, s};
            c[r][0] += a * b0;  /* product rounded, then added: the build's -ffp-contract=off */
            c[r][1] += a * b1;
        }
        Ap += MR;
        Bp += 16;
    }
    float t[MR * 16] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++) {
        st8(t + r * 16, c[r][0]);
        st8(t + r * 16 + 8, c[r][1]);
    }
    store_tile(t, 16, mr, nr, C, ldc, first, bias);
}

/* The AVX-512 micro-kernel for the last 1 to 3 rows of a product (all rows of a matrix-vector
 * like product: FullyConnected on a batch of 1): only the valid rows are multiplied (~25% less
 * time for 1 x 512 x 1000; with 4 or 5 rows the 6-row kernel was as fast).  Each element is
 * the same chain of fused multiply-adds as in the 6-row kernel and goes through the same
 * store_tile, so the results are those of the 6-row kernel, bit for bit. */
#define QE_SMALL_ROWS(R)                                                                     \
__attribute__((target("avx512f")))                                                           \
static void ukernel_avx512_rows##R(int kc, const float *Ap, const float *Bp, float *C,       \
                                   long ldc, int nr, int first, const float *bias)           \
{                                                                                            \
    __m512 acc[R][2];                                                                        \
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();                \
    for (int p = 0; p < kc; p++) {                                                           \
        __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16);                      \
        for (int r = 0; r < R; r++) {                                                        \
            __m512 a = _mm512_set1_ps(Ap[r]);                                                \
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);                                   \
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);                                   \
        }                                                                                    \
        Ap += MR;                                                                            \
        Bp += 32;                                                                            \
    }                                                                                        \
    float t[R * 32] __attribute__((aligned(64)));                                            \
    for (int r = 0; r < R; r++) {                                                            \
        _mm512_store_ps(t + r * 32, acc[r][0]);                                              \
        _mm512_store_ps(t + r * 32 + 16, acc[r][1]);                                         \
    }                                                                                        \
    store_tile(t, 32, R, nr, C, ldc, first, bias);                                           \
}
QE_SMALL_ROWS(1)
QE_SMALL_ROWS(2)
QE_SMALL_ROWS(3)
#undef QE_SMALL_ROWS

/* AVX-512 micro-kernel: 6 x 32 (12 zmm accumulators); full tiles are stored directly, the
 * last 1 to 3 rows of a product go to the kernels above. */
__attribute__((target("avx512f")))
static void ukernel_avx512(int kc, const float *Ap, const float *Bp, float *C, long ldc,
                           int mr, int nr, int first, const float *bias)
{
    switch (mr) {
    case 1: ukernel_avx512_rows1(kc, Ap, Bp, C, ldc, nr, first, bias); return;
    case 2: ukernel_avx512_rows2(kc, Ap, Bp, C, ldc, nr, first, bias); return;
    case 3: ukernel_avx512_rows3(kc, Ap, Bp, C, ldc, nr, first, bias); return;
    default: break;
    }
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    for (int p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(Bp), b1 = _mm512_loadu_ps(Bp + 16);
        __m512 a;
#define QE_ROW(r, x0, x1)                \
        a = _mm512_set1_ps(Ap[r]);           \
        x0 = _mm512_fmadd_ps(a, b0, x0);     \
        x1 = _mm512_fmadd_ps(a, b1, x1);
        QE_ROW(0, c00, c01)
        QE_ROW(1, c10, c11)
        QE_ROW(2, c20, c21)
        QE_ROW(3, c30, c31)
        QE_ROW(4, c40, c41)
        QE_ROW(5, c50, c51)
#undef QE_ROW
        Ap += MR;
        Bp += 32;
    }
    __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (mr == MR && nr == 32) {
        __m512 bb0 = _mm512_setzero_ps(), bb1 = _mm512_setzero_ps();
        if (first && bias) {
            bb0 = _mm512_loadu_ps(bias);
            bb1 = _mm512_loadu_ps(bias + 16);
        }
        for (int r = 0; r < MR; r++) {
            float *c = C + (long)r * ldc;
            if (first && bias) {
                _mm512_storeu_ps(c, _mm512_add_ps(acc[r][0], bb0));
                _mm512_storeu_ps(c + 16, _mm512_add_ps(acc[r][1], bb1));
            } else if (first) {   /* the sum itself (a -0 stays -0), as store_tile */
                _mm512_storeu_ps(c, acc[r][0]);
                _mm512_storeu_ps(c + 16, acc[r][1]);
            } else {
                _mm512_storeu_ps(c, _mm512_add_ps(_mm512_loadu_ps(c), acc[r][0]));
                _mm512_storeu_ps(c + 16, _mm512_add_ps(_mm512_loadu_ps(c + 16), acc[r][1]));
            }
        }
        return;
    }
    float t[MR * 32] __attribute__((aligned(64)));
    for (int r = 0; r < MR; r++) {
        _mm512_store_ps(t + r * 32, acc[r][0]);
        _mm512_store_ps(t + r * 32 + 16, acc[r][1]);
    }
    store_tile(t, 32, mr, nr, C, ldc, first, bias);
}

/* Packs rows [i0, i0+mc) x columns [p0, p0+kc) of the A operand into MR-row panels. */
typedef void (*pack_a_fn)(const void *ctx, long i0, int mc, int p0, int kc, float *Ap);

struct strided_a { const float *A; long rsa, csa; };

static void pack_a_strided(const void *ctx, long i0, int mc, int p0, int kc, float *Ap)
{
    const struct strided_a *s = ctx;
    const float *a = s->A + i0 * s->rsa + (long)p0 * s->csa;
    if (s->csa == 1 && use_avx2())
        pack_a_rows_avx2(mc, kc, a, s->rsa, Ap);
    else
        pack_a(mc, kc, a, s->rsa, s->csa, Ap);
}

/* ---- AVX-512 GEMM on unpacked rows of A (no packing of A, no im2col) ---------------------- */

/* The rows of A a micro-kernel reads for one tile (up to MR rows) and one K block
 * [p0, p0 + kc): ``nseg`` segments, segment s ``lens[s]`` consecutive K indices read from
 * ``ptrs[s * SMR + r]`` (row r; contiguous floats).  A plain matrix with unit column stride is
 * one segment per tile; a convolution's rows (implicit im2col) are one segment per filter tap
 * (taps contiguous in memory merged), padding read from a zero block. */
/* Rows of a tile of the segment path (8: 16 accumulators of 2 x 16 columns, or 8 of 16 --
 * enough independent chains of multiply-adds to hide their latency). */
#define SMR 8

typedef int (*aseg_fn)(const void *ctx, long i0, int mr, int p0, int kc, const float **ptrs,
                       int *lens);

/* Zeros read in place of the padding of a convolution (a segment never exceeds KC). */
static const float qe_zeros[KC + 16] __attribute__((aligned(64)));

static int aseg_strided(const void *ctx, long i0, int mr, int p0, int kc, const float **ptrs,
                        int *lens)
{
    const struct strided_a *s = ctx;
    for (int r = 0; r < mr; r++) ptrs[r] = s->A + (i0 + r) * s->rsa + p0;
    lens[0] = kc;
    return 1;
}

/* A convolution's left operand: row p is output pixel p of the flattened [n, oh, ow] grid, its
 * K = fh * fw * cig columns the taps (row-major over fh, fw), each channels [c0, c0 + cig) of
 * the NHWC input x (0 in the padding): the im2col matrix of qe_im2col2d, never built. */
struct conv_a {
    int h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, c0, cig;
    const float *x;
};

static int aseg_conv(const void *ctx, long i0, int mr, int p0, int kc, const float **ptrs,
                     int *lens)
{
    const struct conv_a *c = ctx;
    const float *base[SMR];
    int y0[SMR], x0[SMR];
    long ohw = (long)c->oh * c->ow;
    /* the first row's pixel by division, the next ones by stepping (divisions cost more than
     * the products of a small-K tile: a first layer's K is 27) */
    long b = i0 / ohw;
    int rem = (int)(i0 - b * ohw), oy = rem / c->ow, ox = rem - oy * c->ow;
    for (int r = 0; r < mr; r++) {
        base[r] = c->x + b * c->h * (long)c->w * c->c_in + c->c0;
        y0[r] = oy * c->sh - c->pt;
        x0[r] = ox * c->sw - c->pl;
        if (++ox == c->ow) {
            ox = 0;
            if (++oy == c->oh) {
                oy = 0;
                b++;
            }
        }
    }
    int n = 0, end = p0 + kc;
    /* Fast path: the rows are output pixels of one output row whose filter rows lie inside
     * the image horizontally, and a filter row's taps are contiguous in memory (no dilation,
     * all channels): one segment per filter row, row r's pointer row 0's + r * sw * c_in. */
    int row_w = c->fw * c->cig;
    if (c->dw == 1 && c->cig == c->c_in && y0[0] == y0[mr - 1] &&
        base[0] == base[mr - 1] && x0[mr - 1] - x0[0] == (mr - 1) * c->sw && x0[0] >= 0 &&
        x0[mr - 1] + c->fw <= c->w) {
        long rstep = (long)c->sw * c->c_in;
        for (int p = p0; p < end;) {
            int ky = p / row_w, off = p - ky * row_w;
            int len = row_w - off < end - p ? row_w - off : end - p;
            int iy = y0[0] + ky * c->dh;
            const float **q = ptrs + (long)n * SMR;
            if (iy < 0 || iy >= c->h) {
                int merge = n > 0;
                for (int r = 0; r < mr; r++) {
                    q[r] = qe_zeros + (p - p0);
                    merge = merge && ptrs[(long)(n - 1) * SMR + r] + lens[n - 1] == q[r];
                }
                if (merge)
                    lens[n - 1] += len;     /* zeros after zeros */
                else
                    lens[n++] = len;
            } else {
                const float *r0 = base[0] + ((long)iy * c->w + x0[0]) * c->c_in + off;
                for (int r = 0; r < mr; r++) q[r] = r0 + r * rstep;
                lens[n++] = len;
            }
            p += len;
        }
        return n;
    }
    for (int p = p0; p < end;) {
        int t = p / c->cig, off = p - t * c->cig;
        int len = c->cig - off < end - p ? c->cig - off : end - p;
        int ky = t / c->fw, kx = t - ky * c->fw;
        const float **q = ptrs + (long)n * SMR;
        for (int r = 0; r < mr; r++) {
            int iy = y0[r] + ky * c->dh, ix = x0[r] + kx * c->dw;
            q[r] = (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                       ? qe_zeros + (p - p0)
                       : base[r] + ((long)iy * c->w + ix) * c->c_in + off;
        }
        int merge = n > 0;
        for (int r = 0; r < mr && merge; r++)
            merge = q[r] == ptrs[(long)(n - 1) * SMR + r] + lens[n - 1];
        if (merge)
            lens[n - 1] += len;
        else
            lens[n++] = len;
        p += len;
    }
    return n;
}

/* Below this many channels per tap, a convolution's row blocks are materialised (conv_fill,
 * the im2col rows of one block, in cache) rather than read as per-tap segments. */
#define CONV_FILL_CIG 16
static void conv_fill(const void *ctx, long i0, int mc, float *buf);

/* Whether a convolution's row blocks are materialised (conv_fill): few channels per tap,
 * unless a filter row's taps are contiguous in the input (all channels, no dilation): a first
 * layer's 3 channels then make segments of fw * 3 floats per filter row, read in place faster
 * than a block is gathered (224x224x3, 3x3 stride 2, 32 filters: 270 vs 350 us on one core). */
static int conv_fills(const struct conv_a *c)
{
    return c->cig < CONV_FILL_CIG && (c->cig != c->c_in || c->dw != 1);
}

/* Segments a K block of at most kc_max columns may need. */
static int conv_max_segments(const struct conv_a *c, int kc_max)
{
    int taps = c->fh * c->fw, by_len = kc_max / (c->cig > 0 ? c->cig : 1) + 2;
    return by_len < taps ? by_len : taps;
}

/* pack_a (MR-row panels) from segments: the packed path of the AVX2 / SSE micro-kernels. */
struct seg_src {
    aseg_fn fn;
    const void *ctx;
    int maxseg;
    /* optional: writes whole rows [i0, i0 + mc) of A (all K columns) into buf [mc, K]; the
     * AVX-512 path then reads a row block from buf when K is one block (a convolution with
     * few channels per tap, whose segments are too short to pay for themselves) */
    void (*fill)(const void *ctx, long i0, int mc, float *buf);
};

static void pack_a_segments(const void *ctx, long i0, int mc, int p0, int kc, float *Ap)
{
    const struct seg_src *s = ctx;
    const float *ptrs[s->maxseg * SMR];
    int lens[s->maxseg];
    for (int i = 0; i < mc; i += MR) {
        int mr = mc - i < MR ? mc - i : MR;
        int n = s->fn(s->ctx, i0 + i, mr, p0, kc, ptrs, lens);
        int k = 0;
        for (int g = 0; g < n; g++)
            for (int q = 0; q < lens[g]; q++, k++) {
                int r = 0;
                for (; r < mr; r++) Ap[(long)k * MR + r] = ptrs[g * SMR + r][q];
                for (; r < MR; r++) Ap[(long)k * MR + r] = 0.0f;
            }
        Ap += (long)MR * kc;
    }
}

/* The AVX-512 micro-kernels on segments: R rows (1..8) by NV x 16 columns of one packed B
 * panel (32 wide: NV = 1 reads its first 16 columns, for a last panel of at most 16).  Every
 * element is one chain of fused multiply-adds over the K block in increasing K, as in
 * ukernel_avx512, and is stored the same way: first block C = acc (+ bias), else C += acc. */
/* A folded activation on the values a micro-kernel stores (act_scalar's semantics). */
static inline __attribute__((always_inline, target("avx512f")))
__m512 act512(__m512 v, int mode, __m512 lo, __m512 hi)
{
    if (mode == QE_ACT_RELU)
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
    if (mode == QE_ACT_CLIP) return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    return v;
}

/* act: the folded activation of a tile's last K block (QE_ACT_NONE before), applied to the
 * values as they are stored. */
#define QE_SEG_KERNEL(R, NV)                                                                  \
__attribute__((target("avx512f")))                                                            \
static void ukseg_r##R##_v##NV(int nseg, const int *lens, const float *const *ptrs,           \
                               const float *Bp, float *C, long ldc, int nr, int first,        \
                               const float *bias, const float *pf, int pf_lines, int act,     \
                               float act_lo, float act_hi)                                    \
{                                                                                             \
    const __m512 alo = _mm512_set1_ps(act_lo), ahi = _mm512_set1_ps(act_hi);                 \
    int kk = 0;                                                                               \
    __m512 acc[R][NV];                                                                        \
    for (int r = 0; r < R; r++)                                                               \
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();                         \
    for (int s = 0; s < nseg; s++) {                                                          \
        const float *a[R];                                                                    \
        for (int r = 0; r < R; r++) a[r] = ptrs[s * SMR + r];                                  \
        int len = lens[s];                                                                    \
        for (int k = 0; k < len; k++, kk++) {                                                 \
            if (kk < pf_lines) _mm_prefetch((const char *)(pf + (long)kk * 16), _MM_HINT_T1); \
            __m512 b0 = _mm512_loadu_ps(Bp);                                                  \
            __m512 b1 = NV > 1 ? _mm512_loadu_ps(Bp + 16) : b0;                               \
            for (int r = 0; r < R; r++) {                                                     \
                __m512 av = _mm512_set1_ps(a[r][k]);                                          \
                acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);                               \
                if (NV > 1) acc[r][NV - 1] = _mm512_fmadd_ps(av, b1, acc[r][NV - 1]);         \
            }                                                                                 \
            Bp += 32;                                                                         \
        }                                                                                     \
    }                                                                                         \
    /* masked stores (no lane beyond nr is touched; a masked-off lane never faults); loops of  \
     * constant trip count, so the accumulators stay in registers */                          \
    __mmask16 mk[NV];                                                                         \
    for (int v = 0; v < NV; v++) {                                                            \
        int cols = nr - 16 * v;                                                               \
        mk[v] = cols >= 16 ? (__mmask16)0xFFFF                                                \
                           : cols <= 0 ? (__mmask16)0 : (__mmask16)((1u << cols) - 1);        \
    }                                                                                         \
    if (first && bias) {                                                                      \
        __m512 bb[NV];                                                                        \
        for (int v = 0; v < NV; v++) bb[v] = _mm512_maskz_loadu_ps(mk[v], bias + 16 * v);     \
        for (int r = 0; r < R; r++)                                                           \
            for (int v = 0; v < NV; v++)                                                      \
                _mm512_mask_storeu_ps(C + (long)r * ldc + 16 * v, mk[v],                      \
                                      act512(_mm512_add_ps(acc[r][v], bb[v]), act, alo, ahi)); \
    } else if (first) {                                                                       \
        for (int r = 0; r < R; r++)                                                           \
            for (int v = 0; v < NV; v++)                                                      \
                _mm512_mask_storeu_ps(C + (long)r * ldc + 16 * v, mk[v],                      \
                                      act512(acc[r][v], act, alo, ahi));                      \
    } else {                                                                                  \
        for (int r = 0; r < R; r++)                                                           \
            for (int v = 0; v < NV; v++) {                                                    \
                float *c = C + (long)r * ldc + 16 * v;                                        \
                _mm512_mask_storeu_ps(c, mk[v],                                               \
                                      act512(_mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], c),   \
                                                           acc[r][v]), act, alo, ahi));       \
            }                                                                                 \
    }                                                                                         \
}
QE_SEG_KERNEL(1, 1) QE_SEG_KERNEL(2, 1) QE_SEG_KERNEL(3, 1) QE_SEG_KERNEL(4, 1)
QE_SEG_KERNEL(5, 1) QE_SEG_KERNEL(6, 1) QE_SEG_KERNEL(7, 1) QE_SEG_KERNEL(8, 1)
QE_SEG_KERNEL(1, 2) QE_SEG_KERNEL(2, 2) QE_SEG_KERNEL(3, 2) QE_SEG_KERNEL(4, 2)
QE_SEG_KERNEL(5, 2) QE_SEG_KERNEL(6, 2) QE_SEG_KERNEL(7, 2) QE_SEG_KERNEL(8, 2)
#undef QE_SEG_KERNEL

typedef void (*ukseg_fn)(int, const int *, const float *const *, const float *, float *, long,
                         int, int, const float *, const float *, int, int, float, float);
static const ukseg_fn ukseg[2][SMR + 1] = {
    {NULL, ukseg_r1_v1, ukseg_r2_v1, ukseg_r3_v1, ukseg_r4_v1, ukseg_r5_v1, ukseg_r6_v1,
     ukseg_r7_v1, ukseg_r8_v1},
    {NULL, ukseg_r1_v2, ukseg_r2_v2, ukseg_r3_v2, ukseg_r4_v2, ukseg_r5_v2, ukseg_r6_v2,
     ukseg_r7_v2, ukseg_r8_v2},
};

/* One GEMM (or a slice of one): C[m0:m0+M, :N] = A[m0:m0+M, :K] * B[:K, :N] (+ bias[N]),
 * A through ``pa`` (absolute row indices), B/C/bias already offset to the slice's columns,
 * C to its first row. */
struct gemm_job {
    long m0, M, N;
    int K;
    pack_a_fn pa;
    const void *actx;
    const float *B;
    long rsb, csb;
    float *C;
    long ldc;
    const float *bias;
    int rc;
    const float *Bpre;  /* B packed by qe_pack_b (B/rsb/csb unused), or NULL */
    long n0, Npad;      /* with Bpre: the slice's first column, padded N of the packing */
    aseg_fn sa;         /* A's rows as segments (the AVX-512 path reads them unpacked), or NULL */
    const void *sctx;
    int maxseg;         /* segments per tile and K block at most */
    void (*fill)(const void *ctx, long i0, int mc, float *buf);   /* seg_src.fill */
    int act;            /* a folded Relu / ReluMinMax applied to each finished tile (QE_ACT_*) */
    float act_lo, act_hi;
};

/* ---- activation epilogue: a Relu / ReluMinMax folded into the product ------------------------
 * Applied to a tile right after its last K block is stored (the tile is still in L1), with
 * numpy's semantics, so the bytes equal the op followed by the activation's own step:
 * QE_ACT_RELU is numpy.maximum(x, 0) (NaN kept, -0 -> +0), QE_ACT_CLIP numpy.clip(x, lo, hi)
 * (x kept when it equals a bound, NaN kept).  Max / min are exact: no rounding to reproduce. */
ALWAYS_INLINE float act_scalar(float v, int mode, float lo, float hi)
{
    if (mode == QE_ACT_RELU) return v != v ? v : (v > 0.0f ? v : 0.0f);
    float t = lo > v ? lo : v;
    return hi < t ? hi : t;
}

__attribute__((target("avx512f")))
static void act_block_avx512(float *C, long ldc, long rows, long cols, int mode, float lo,
                             float hi)
{
    const __m512 z = _mm512_setzero_ps(), l = _mm512_set1_ps(lo), u = _mm512_set1_ps(hi);
    for (long r = 0; r < rows; r++) {
        float *c = C + r * ldc;
        for (long j = 0; j < cols; j += 16) {
            __mmask16 m = cols - j >= 16 ? (__mmask16)0xFFFF
                                         : (__mmask16)((1u << (cols - j)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, c + j);
            /* relu: v where !(v <= 0) (v > 0 or NaN), else +0; clip: max(lo, .) then min(hi, .)
             * with the bound first (VMAXPS/VMINPS return the second operand on NaN / equality) */
            v = mode == QE_ACT_RELU ? _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, z, _CMP_NLE_UQ), v)
                                    : _mm512_min_ps(u, _mm512_max_ps(l, v));
            _mm512_mask_storeu_ps(c + j, m, v);
        }
    }
}

__attribute__((target("avx2")))
static void act_block_avx2(float *C, long ldc, long rows, long cols, int mode, float lo,
                           float hi)
{
    const __m256 z = _mm256_setzero_ps(), l = _mm256_set1_ps(lo), u = _mm256_set1_ps(hi);
    for (long r = 0; r < rows; r++) {
        float *c = C + r * ldc;
        long j = 0;
        for (; j + 8 <= cols; j += 8) {
            __m256 v = _mm256_loadu_ps(c + j);
            v = mode == QE_ACT_RELU ? _mm256_and_ps(_mm256_cmp_ps(v, z, _CMP_NLE_UQ), v)
                                    : _mm256_min_ps(u, _mm256_max_ps(l, v));
            _mm256_storeu_ps(c + j, v);
        }
        for (; j < cols; j++) c[j] = act_scalar(c[j], mode, lo, hi);
    }
}

static void act_block(float *C, long ldc, long rows, long cols, int mode, float lo, float hi)
{
    if (mode == QE_ACT_NONE || rows <= 0 || cols <= 0) return;
    if (QE_ACT_ROUND(mode)) {   /* float16 math: the rounding first, then the activation */
        int even = QE_ACT_ROUND(mode) == 2;
        int act = QE_ACT_MODE(mode);
        if (act == QE_ACT_RELU || act == QE_ACT_CLIP) {   /* one pass when it can */
            int done = 1;
            if (cols == ldc || rows == 1)
                done = qe_fp16_round_act_inplace(C, rows * cols, even, act, lo, hi);
            else
                for (long r = 0; r < rows && done; r++)
                    done = qe_fp16_round_act_inplace(C + r * ldc, cols, even, act, lo, hi);
            if (done) return;
        }
        if (cols == ldc || rows == 1)
            qe_fp16_round_inplace(C, rows * cols, even);
        else
            for (long r = 0; r < rows; r++) qe_fp16_round_inplace(C + r * ldc, cols, even);
        mode = act;
        if (mode == QE_ACT_SILU16 || mode == QE_ACT_SILU16_SX) {   /* its tables (eng_eltwise.c) */
            int x_first = mode == QE_ACT_SILU16;
            if (cols == ldc || rows == 1)
                qe_ew_silu_f16_inplace(C, rows * cols, x_first, even);
            else
                for (long r = 0; r < rows; r++) qe_ew_silu_f16_inplace(C + r * ldc, cols, x_first, even);
            return;
        }
        if (mode == QE_ACT_NONE) return;
    }
    if (mode >= QE_ACT_SILU16) return;   /* (only after a rounding: the lowering sees to it) */
    if (mode == QE_ACT_SILU || mode == QE_ACT_SILU_SX) {
        /* the element-wise kernels' SiLU (csrc/eng_eltwise.c): row by row, or in one call when
         * the rows are contiguous */
        if (cols == ldc || rows == 1)
            qe_ew_silu_inplace(C, rows * cols, mode == QE_ACT_SILU);
        else
            for (long r = 0; r < rows; r++) qe_ew_silu_inplace(C + r * ldc, cols, mode == QE_ACT_SILU);
        return;
    }
    if (qe_gemm_avx512()) {
        act_block_avx512(C, ldc, rows, cols, mode, lo, hi);
    } else if (use_avx2()) {
        act_block_avx2(C, ldc, rows, cols, mode, lo, hi);
    } else {
        for (long r = 0; r < rows; r++)
            for (long j = 0; j < cols; j++)
                C[r * ldc + j] = act_scalar(C[r * ldc + j], mode, lo, hi);
    }
}

/* The activation of y[0:n] in place (a folded activation after a kernel without an epilogue). */
void qe_act_apply(float *y, long n, int mode, float lo, float hi)
{
    for (long i = 0; i < n; i += 1L << 20) {
        long len = n - i < (1L << 20) ? n - i : (1L << 20);
        act_block(y + i, 0, 1, len, mode, lo, hi);
    }
}

static int gemm_nr(void) { return qe_gemm_avx512() ? 32 : use_avx2() ? 16 : 8; }

/* Rows per K block for an inner dimension K: K split into equal blocks of at most KC. */
static int kc_for(int K)
{
    int kblocks = (K + KC - 1) / KC;
    return (K + kblocks - 1) / kblocks;
}

/* Floats qe_pack_b needs for a K x N operand. */
long qe_packed_b_size(long N, int K)
{
    int NR = gemm_nr();
    return (long)K * ((N + NR - 1) / NR * NR);
}

/* Packs a whole K x N operand the way the GEMM packs its blocks, once (static weights):
 * K block of kc rows at row pc, column panel jp (NR wide, zero padded) at
 * Bp + pc * Npad + jp * kc * NR, Npad = N rounded up to NR. */
void qe_pack_b(long N, int K, const float *B, long rsb, long csb, float *Bp)
{
    int NR = gemm_nr();
    long Npad = (N + NR - 1) / NR * NR;
    int kc_max = kc_for(K);
    for (int pc = 0; pc < K; pc += kc_max) {
        int kc = K - pc < kc_max ? K - pc : kc_max;
        pack_b(kc, (int)N, NR, B + (long)pc * rsb, rsb, csb, Bp + (long)pc * Npad);
    }
}

/* gemm_run on the AVX-512 segment kernels: A read in place through j->sa (no packing), B
 * packed per block (or pre-packed).  Loops: N blocks of NC, K blocks, row blocks of MC (their
 * tiles' segments built once), B panels, row tiles: a B panel stays in L1 while the row tiles
 * of the block stream through it. */
static int gemm_run_seg(const struct gemm_job *j)
{
    long M = j->M, N = j->N;
    int K = j->K, NR = 32;
    long nc_max = N < NC ? ((N + NR - 1) / NR) * NR : NC;
    int kc_max = kc_for(K);
    int maxseg = j->maxseg > 0 ? j->maxseg : 1;
    enum { TILES = MC / SMR };
    float *Bbuf = j->Bpre ? NULL : aligned_buf((size_t)nc_max * kc_max);
    int filled = j->fill && kc_max == K;
    const float **ptrs = malloc(sizeof(float *) * (size_t)TILES * maxseg * SMR);
    int *lens = malloc(sizeof(int) * (size_t)TILES * maxseg);
    float *rows = filled ? aligned_buf((size_t)MC * K) : NULL;
    int nseg[TILES];
    if ((!Bbuf && !j->Bpre) || !ptrs || !lens || (filled && !rows)) {
        free(Bbuf); free(ptrs); free(lens); free(rows);
        return -1;
    }
    for (long jc = 0; jc < N; jc += NC) {
        int nc = (int)(N - jc < NC ? N - jc : NC);
        for (int pc = 0; pc < K; pc += kc_max) {
            int kc = K - pc < kc_max ? K - pc : kc_max;
            const float *Bp;
            if (j->Bpre) {
                Bp = j->Bpre + (long)pc * j->Npad + (j->n0 + jc) / NR * (long)kc * NR;
            } else {
                pack_b(kc, nc, NR, j->B + (long)pc * j->rsb + jc * j->csb, j->rsb, j->csb,
                       Bbuf);
                Bp = Bbuf;
            }
            for (long ic = 0; ic < M; ic += MC) {
                int mc = (int)(M - ic < MC ? M - ic : MC);
                int tiles = (mc + SMR - 1) / SMR;
                if (filled) {
                    struct strided_a ra = {rows - (j->m0 + ic) * K, K, 1};
                    j->fill(j->sctx, j->m0 + ic, mc, rows);
                    for (int t = 0; t < tiles; t++) {
                        int mr = mc - t * SMR < SMR ? mc - t * SMR : SMR;
                        nseg[t] = aseg_strided(&ra, j->m0 + ic + (long)t * SMR, mr, pc, kc,
                                               ptrs + (long)t * maxseg * SMR,
                                               lens + (long)t * maxseg);
                    }
                } else {
                    for (int t = 0; t < tiles; t++) {
                        int mr = mc - t * SMR < SMR ? mc - t * SMR : SMR;
                        nseg[t] = j->sa(j->sctx, j->m0 + ic + (long)t * SMR, mr, pc, kc,
                                        ptrs + (long)t * maxseg * SMR, lens + (long)t * maxseg);
                    }
                }
                if (kc == K && (long)K * nc <= 8192) {
                    /* one K block whose packed panels fit in L1 (32 KiB): each row tile
                     * through every panel, so that C's rows are written whole, in order
                     * (small-K products are bound by their stores: 12544 x 16 x 96, one core,
                     * 486 -> 390-455 us; EfficientNet-B0 float about 1% faster) */
                    for (int t = 0; t < tiles; t++) {
                        int mr = mc - t * SMR < SMR ? mc - t * SMR : SMR;
                        for (int jr = 0; jr < nc; jr += NR) {
                            int nr = nc - jr < NR ? nc - jr : NR;
                            const float *bb = j->bias ? j->bias + jc + jr : NULL;
                            ukseg[nr > 16][mr](nseg[t], lens + (long)t * maxseg,
                                               ptrs + (long)t * maxseg * SMR, Bp + (long)jr * kc,
                                               j->C + (ic + (long)t * SMR) * j->ldc + jc + jr,
                                               j->ldc, nr, 1, bb, NULL, 0,
                                               QE_ACT_IN_STORE(j->act) ? j->act : 0,
                                               j->act_lo, j->act_hi);
                        }
                    }
                } else
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    const float *bb = j->bias ? j->bias + jc + jr : NULL;
                    const float *bp = Bp + (long)jr * kc;
                    /* the first two tiles prefetch the next kc x 32 panel (the next in memory:
                     * pre-packed weights come from L3/DRAM, each panel read once per block) */
                    const float *next = bp + (long)kc * NR;
                    for (int t = 0; t < tiles; t++) {
                        int mr = mc - t * SMR < SMR ? mc - t * SMR : SMR;
                        ukseg[nr > 16][mr](nseg[t], lens + (long)t * maxseg,
                                           ptrs + (long)t * maxseg * SMR, bp,
                                           j->C + (ic + (long)t * SMR) * j->ldc + jc + jr,
                                           j->ldc, nr, pc == 0, bb, next + (long)t * kc * 16,
                                           j->Bpre && t < 2 ? kc : 0,
                                           pc + kc >= K && QE_ACT_IN_STORE(j->act) ? j->act : 0,
                                           j->act_lo, j->act_hi);
                    }
                }
                /* a SiLU or a rounding: the row block gets it here, still in L1 / L2 (per
                 * tile, the calls cost more than the 8 x 32 sigmoids) */
                if (!QE_ACT_IN_STORE(j->act) && pc + kc >= K)
                    act_block(j->C + ic * j->ldc + jc, j->ldc, mc, nc, j->act, j->act_lo,
                              j->act_hi);
            }
        }
    }
    free(Bbuf);
    free(ptrs);
    free(lens);
    free(rows);
    return 0;
}

static int gemm_run(const struct gemm_job *j)
{
    long M = j->M, N = j->N;
    int K = j->K;
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {  /* empty sum: C = bias or 0 */
        for (long i = 0; i < M; i++)
            for (long c = 0; c < N; c++) j->C[i * j->ldc + c] = j->bias ? j->bias[c] : 0.0f;
        act_block(j->C, j->ldc, M, N, j->act, j->act_lo, j->act_hi);
        return 0;
    }
    int isa = qe_gemm_avx512() ? 2 : use_avx2();
    if (isa == 2 && j->sa) return gemm_run_seg(j);
    int NR = gemm_nr();
    ukernel_fn uk = isa == 2 ? ukernel_avx512 : isa == 1 ? ukernel_avx2 : ukernel_sse;
    long nc_max = N < NC ? ((N + NR - 1) / NR) * NR : NC;
    int kc_max = kc_for(K);
    long mc_max = M < MC ? ((M + MR - 1) / MR) * MR : MC;
    float *Bbuf = j->Bpre ? NULL : aligned_buf((size_t)nc_max * kc_max);
    float *Ap = aligned_buf((size_t)mc_max * kc_max + 8);  /* + slack of pack_a_rows_avx2 */
    if ((!Bbuf && !j->Bpre) || !Ap) { free(Bbuf); free(Ap); return -1; }
    for (long jc = 0; jc < N; jc += NC) {
        int nc = (int)(N - jc < NC ? N - jc : NC);
        for (int pc = 0; pc < K; pc += kc_max) {
            int kc = K - pc < kc_max ? K - pc : kc_max;
            const float *Bp;
            if (j->Bpre) {
                Bp = j->Bpre + (long)pc * j->Npad + (j->n0 + jc) / NR * (long)kc * NR;
            } else {
                pack_b(kc, nc, NR, j->B + (long)pc * j->rsb + jc * j->csb, j->rsb, j->csb,
                       Bbuf);
                Bp = Bbuf;
            }
            for (long ic = 0; ic < M; ic += MC) {
                int mc = (int)(M - ic < MC ? M - ic : MC);
                j->pa(j->actx, j->m0 + ic, mc, pc, kc, Ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    const float *bb = j->bias ? j->bias + jc + jr : NULL;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
                        uk(kc, Ap + (long)ir * kc, Bp + (long)jr * kc,
                           j->C + (ic + ir) * j->ldc + jc + jr, j->ldc, mr, nr, pc == 0, bb);
                        if (j->act && QE_ACT_IN_STORE(j->act) && pc + kc >= K)
                            act_block(j->C + (ic + ir) * j->ldc + jc + jr, j->ldc, mr, nr,
                                      j->act, j->act_lo, j->act_hi);
                    }
                }
                if (!QE_ACT_IN_STORE(j->act) && pc + kc >= K)   /* the row block, as above */
                    act_block(j->C + ic * j->ldc + jc, j->ldc, mc, nc, j->act, j->act_lo,
                              j->act_hi);
            }
        }
    }
    free(Bbuf);
    free(Ap);
    return 0;
}

static void gemm_item(void *arg)
{
    struct gemm_job *j = arg;
    j->rc = gemm_run(j);
}

/* Runs jobs[0..n) on up to n threads of the pool (the caller runs job 0); returns 0 or -1
 * (OOM). */
static int run_jobs(struct gemm_job *jobs, int n)
{
    qe_pool_run(gemm_item, jobs, sizeof jobs[0], n);
    int rc = 0;
    for (int t = 0; t < n; t++)
        if (jobs[t].rc) rc = jobs[t].rc;
    return rc;
}

/* Multiply-adds per thread a GEMM needs before it is split: 2^20 take ~12 us on one AVX-512
 * core.  The pool's workers spin between ops (csrc/pool.c), so a split costs a few microseconds
 * (it was 2^22 when each split waited tens of microseconds for a sleeping worker). */
#define FMAS_PER_THREAD (1L << 20)
/* Nanoseconds of estimated work per thread before a memory-bound range is split (was 50 us
 * for the same reason): MobileNetV2's 14x14 and 7x7 depthwise layers (20-40 us) split too. */
#define NS_PER_THREAD 10000.0

/* The split costs in use (qe_set_split_costs; the defaults above). */
static double g_fmas_per_thread = (double)FMAS_PER_THREAD;
static double g_ns_per_thread = NS_PER_THREAD;

/* Sets the work per thread a GEMM (multiply-adds) and a memory-bound range (nanoseconds)
 * need before they are split; a value <= 0 restores its default.  Results never depend on
 * these (the pieces do not change what an element sums): tests set them tiny to split small
 * problems, the tuning script to compare splits. */
void qe_set_split_costs(double fmas_per_thread, double ns_per_thread)
{
    g_fmas_per_thread = fmas_per_thread > 0 ? fmas_per_thread : (double)FMAS_PER_THREAD;
    g_ns_per_thread = ns_per_thread > 0 ? ns_per_thread : NS_PER_THREAD;
}

/* Threads for a product of ``fmas`` multiply-adds in ``items`` independent pieces. */
static int threads_for(double fmas, long items)
{
    double t = fmas / g_fmas_per_thread;
    int limit = threads_now();
    long n = t < limit ? (long)t : limit;
    if (n > items) n = items;
    return n < 2 ? 1 : (int)n;
}

/* ---- parallel ranges (the memory-bound kernels) ---- */

typedef void (*range_fn)(const void *ctx, long p0, long p1);

/* ---- pieces shared by the threads, each thread owning a block of consecutive pieces ----
 * Pieces [0, npieces) are cut into T blocks of consecutive pieces.  The thread that takes pool
 * item t runs block t's pieces in order, then helps with the pieces left in the other blocks, so
 * a thread that starts late (its core busy) takes fewer instead of holding the others up.  On
 * a quiet machine each thread keeps to its own block: the caller (item 0) the first rows of an
 * activation, a worker the next ones, layer after layer, so a memory-bound layer mostly reads
 * what the same core wrote (with pieces handed out one by one in turn, every layer read half of
 * its input from the other core's cache: depthwise layers gained nothing from a second thread).
 * Which thread runs a piece never changes its result. */
struct piece_block { atomic_long next; long end; char pad[64 - 2 * sizeof(long)]; };
struct pieces {
    void (*run)(void *ctx, long piece);
    void *ctx;
    int T;
    struct piece_block blk[64];
};

/* Pool item t of a pieces run: block t first, then the others' leftovers. */
struct piece_slot { struct pieces *ps; int t; };

static void piece_slot_item(void *arg)
{
    const struct piece_slot *slot = arg;
    struct pieces *ps = slot->ps;
    for (int k = 0; k < ps->T; k++) {
        struct piece_block *b = &ps->blk[(slot->t + k) % ps->T];
        for (;;) {
            long i = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
            if (i >= b->end) break;
            ps->run(ps->ctx, i);
        }
    }
}

static void run_pieces(void (*run)(void *ctx, long piece), void *ctx, long npieces, int T)
{
    if (T > 64) T = 64;
    if (T > npieces) T = (int)npieces;
    if (T < 2) {
        for (long i = 0; i < npieces; i++) run(ctx, i);
        return;
    }
    struct pieces ps;
    struct piece_slot slots[64];
    ps.run = run;
    ps.ctx = ctx;
    ps.T = T;
    for (int t = 0; t < T; t++) {
        atomic_init(&ps.blk[t].next, npieces * t / T);
        ps.blk[t].end = npieces * (t + 1) / T;
        slots[t].ps = &ps;
        slots[t].t = t;
    }
    qe_pool_run(piece_slot_item, slots, sizeof slots[0], T);
}

/* fn(ctx, p0, p1) over [0, n) on up to qe_threads() threads, by the estimated cost of an
 * item: pieces of a multiple of ``align`` items (about 8 in all: their size depends on n, not
 * on the thread count) in blocks the threads own (run_pieces). */
struct range_dyn { range_fn fn; const void *ctx; long n, step; };

static void range_piece(void *arg, long i)
{
    const struct range_dyn *d = arg;
    long p0 = i * d->step;
    d->fn(d->ctx, p0, d->n - p0 < d->step ? d->n : p0 + d->step);
}

static void parallel_for_aligned(range_fn fn, const void *ctx, long n, double ns_per_item,
                                 long align)
{
    double t = (double)n * ns_per_item / g_ns_per_thread;
    int limit = threads_now();
    long T = t < limit ? (long)t : limit;
    if (T > n) T = n;
    if (T < 2) {
        fn(ctx, 0, n);
        return;
    }
    if (align < 1) align = 1;
    /* pieces of a fixed size for this n (not for T): about 8 of them, whole ``align`` units */
    long want = (n + 7) / 8;
    struct range_dyn d = {fn, ctx, n, (want + align - 1) / align * align};
    run_pieces(range_piece, &d, (n + d.step - 1) / d.step, (int)T);
}

static void parallel_for(range_fn fn, const void *ctx, long n, double ns_per_item)
{
    parallel_for_aligned(fn, ctx, n, ns_per_item, 1);
}

/* Geometry and buffers of the 2-D kernels below (each uses the fields it needs). */
struct k2d {
    int kind, n, h, w, c_in, fh, fw, c_out, oh, ow, sh, sw, pt, pb, pl, pr, dh, dw;
    int c0, cig, count_pad;
    long p0;           /* im2col: the first row of ``y`` */
    const float *x, *f, *bias;
    float *y;
    int act;           /* depthwise, AVX-512 kernels: a folded activation applied as they store */
    float act_lo, act_hi;
};

/* Defines NAME_range_base / NAME_range_avx2 (range_fn): NAME_range_body for the baseline
 * and for AVX2+FMA. */
#define RANGE_VARIANTS(NAME)                                                                \
    static void NAME##_range_base(const void *a, long p0, long p1)                         \
    { NAME##_range_body(a, p0, p1); }                                                      \
    __attribute__((target("avx2,fma")))                                                    \
    static void NAME##_range_avx2(const void *a, long p0, long p1)                         \
    { NAME##_range_body(a, p0, p1); }

/* Rows of a split product start at multiples of the tile height of the micro-kernel that runs
 * it (SMR for the AVX-512 segment kernels, else MR; MC is a multiple of both): every row then
 * falls in the same tile, at the same position, whatever the split.  The kernels for different
 * tile heights may order the operands of a fused multiply-add differently (the compiler picks
 * the instruction form), which changes which NaN a result made of two NaNs carries: chunks at
 * multiples of MR on the segment path changed the sign of such NaNs with 5 threads
 * (tests/test_kernels_split.py). */
static long row_unit(const struct gemm_job *j) { return qe_gemm_avx512() && j->sa ? SMR : MR; }

/* The chunk size of a split of ``total`` rows / columns into about 4 chunks per thread:
 * multiples of ``unit``, at most ``cap`` (0: no cap). */
static long chunk_step(long total, long unit, int T, long cap)
{
    long want = (total + 4L * T - 1) / (4L * T);
    long step = (want + unit - 1) / unit * unit;
    return cap > 0 && step > cap ? cap : step;
}

/* A product split into chunks run as pieces (run_pieces: each thread owns a block of
 * consecutive chunks, then helps with the others'): a thread that starts late (the other core
 * busy) takes fewer chunks instead of holding everyone up.  Chunks are whole row tiles (by_rows) or whole 32-column panels, so every element is computed
 * exactly as without the split.  Used when B is pre-packed or the split is by columns: no
 * chunk then repacks what another chunk packs too. */
struct dyn_ctx {
    struct gemm_job base;
    int by_rows;
    long step, total;
    atomic_int rc;
};

static void dyn_piece(void *arg, long c)
{
    struct dyn_ctx *d = arg;
    struct gemm_job j = d->base;
    long s0 = c * d->step, len = d->total - s0 < d->step ? d->total - s0 : d->step;
    if (d->by_rows) {
        j.m0 = s0;
        j.M = len;
        j.C = d->base.C + s0 * d->base.ldc;
    } else {
        j.N = len;
        j.B = d->base.B ? d->base.B + s0 * d->base.csb : NULL;
        j.n0 = s0;
        j.C = d->base.C + s0;
        j.bias = d->base.bias ? d->base.bias + s0 : NULL;
    }
    if (gemm_run(&j)) atomic_store(&d->rc, -1);
}

static int gemm_dynamic(const struct gemm_job *base, int T, int by_rows, long step)
{
    struct dyn_ctx d;
    d.base = *base;
    d.by_rows = by_rows;
    d.total = by_rows ? base->M : base->N;
    d.step = step;
    atomic_init(&d.rc, 0);
    run_pieces(dyn_piece, &d, (d.total + d.step - 1) / d.step, T);
    return atomic_load(&d.rc);
}

/* Splits one GEMM over the threads: by rows when B is the smaller operand (each thread
 * packs all of B), else by columns (each thread packs all of A). */
static int gemm_split(long M, long N, int K, pack_a_fn pa, const void *actx,
                      const struct seg_src *seg, const float *B, long rsb, long csb,
                      const float *Bpre, float *C, long ldc, const float *bias, int act,
                      float lo, float hi)
{
    int NR = gemm_nr();
    struct gemm_job base = {0, M, N, K, pa, actx, B, rsb, csb, C, ldc, bias, 0, Bpre, 0,
                            (N + NR - 1) / NR * NR, seg ? seg->fn : NULL,
                            seg ? seg->ctx : NULL, seg ? seg->maxseg : 0,
                            seg ? seg->fill : NULL, act, lo, hi};
    /* the work: the products, plus reading B, which a product of few rows is bound by (a
     * classifier's 1280 x 1000 weights on a batch of 1 stream 5 MB: split by column panels) */
    double work = (double)M * N * K + 8.0 * (double)N * K;
    if (QE_ACT_MODE(act) >= QE_ACT_SILU) work += 64.0 * (double)M * N;   /* a SiLU element: ~0.7 ns */
    int T = threads_for(work, N <= M ? (M + MR - 1) / MR : (N + 31) / 32);
    if (T <= 1) return gemm_run(&base);
    long ru = row_unit(&base);
    if (Bpre || N > M) {
        /* chunks of row tiles (at most MC rows) or of 32-column panels, about 4 per thread; by
         * rows when B is the smaller operand.  (Choosing rows when the columns share out
         * unevenly -- a 7x7 layer's 160 columns are 5 panels -- made each 8-row chunk read all
         * of B again: 7x7x960 -> 160 took 95 -> 120 us.) */
        int by_rows = N <= M;
        long rstep = chunk_step(M, ru, T, MC), cstep = chunk_step(N, 32, T, 0);
        return gemm_dynamic(&base, T, by_rows, by_rows ? rstep : cstep);
    }
    struct gemm_job jobs[64];
    int n = 0;
    if (N <= M) {
        long step = ((M + T - 1) / T + ru - 1) / ru * ru;
        for (long m0 = 0; m0 < M; m0 += step) {
            jobs[n] = base;
            jobs[n].m0 = m0;
            jobs[n].M = M - m0 < step ? M - m0 : step;
            jobs[n].C = C + m0 * ldc;
            n++;
        }
    } else {
        long step = ((N + T - 1) / T + 31) / 32 * 32;
        for (long n0 = 0; n0 < N; n0 += step) {
            jobs[n] = base;
            jobs[n].N = N - n0 < step ? N - n0 : step;
            jobs[n].B = B ? B + n0 * csb : NULL;
            jobs[n].n0 = n0;
            jobs[n].C = C + n0;
            jobs[n].bias = bias ? bias + n0 : NULL;
            n++;
        }
    }
    return run_jobs(jobs, n);
}

/* C[M,N] = A[M,K] * B[K,N] (+ bias[N] per column when bias != NULL).
 * Element (i,p) of A is A[i*rsa + p*csa]; (p,j) of B is B[p*rsb + j*csb]; C row-major with
 * leading dimension ldc.  Returns 0, or -1 when out of memory. */
int qe_sgemm(long M, long N, int K, const float *A, long rsa, long csa, const float *B,
             long rsb, long csb, float *C, long ldc, const float *bias)
{
    return qe_sgemm_act(M, N, K, A, rsa, csa, B, rsb, csb, C, ldc, bias, QE_ACT_NONE, 0, 0);
}

/* qe_sgemm followed by a folded activation (QE_ACT_*; lo, hi: QE_ACT_CLIP's bounds). */
int qe_sgemm_act(long M, long N, int K, const float *A, long rsa, long csa, const float *B,
                 long rsb, long csb, float *C, long ldc, const float *bias, int act, float lo,
                 float hi)
{
    struct strided_a s = {A, rsa, csa};
    struct seg_src seg = {aseg_strided, &s, 1, NULL};
    return gemm_split(M, N, K, pack_a_strided, &s, csa == 1 ? &seg : NULL, B, rsb, csb, NULL,
                      C, ldc, bias, act, lo, hi);
}

/* qe_sgemm with B packed by qe_pack_b (same N, K; same process: the packing follows the
 * micro-kernel picked at run time). */
int qe_sgemm_packed(long M, long N, int K, const float *A, long rsa, long csa,
                    const float *Bpacked, float *C, long ldc, const float *bias)
{
    return qe_sgemm_packed_act(M, N, K, A, rsa, csa, Bpacked, C, ldc, bias, QE_ACT_NONE, 0, 0);
}

/* qe_sgemm_packed followed by a folded activation. */
int qe_sgemm_packed_act(long M, long N, int K, const float *A, long rsa, long csa,
                        const float *Bpacked, float *C, long ldc, const float *bias, int act,
                        float lo, float hi)
{
    struct strided_a s = {A, rsa, csa};
    struct seg_src seg = {aseg_strided, &s, 1, NULL};
    return gemm_split(M, N, K, pack_a_strided, &s, csa == 1 ? &seg : NULL, NULL, 0, 0, Bpacked,
                      C, ldc, bias, act, lo, hi);
}

/* A 2-D convolution as one GEMM per group without an im2col matrix (implicit GEMM): for group
 * g, C[:, g*cog : (g+1)*cog] = A_g B_g (+ bias[g*cog ...]) where A_g is the [n*oh*ow, K]
 * im2col matrix of qe_im2col2d over channels [g*cig, (g+1)*cig) (K = fh*fw*cig) and B_g is
 * B + g*b_gstride (element (p, j) at p*rsb + j*csb) or, with Bpacked (group 1 only), the
 * operand packed by qe_pack_b.  Results equal qe_sgemm on the im2col matrix, bit for bit:
 * the same K blocks and the same chains of multiply-adds, only the reads of A differ. */
int qe_sconv2d(int n, int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh, int sw,
               int pt, int pl, int dh, int dw, int group, long cog, const float *x,
               const float *B, long rsb, long csb, long b_gstride, const float *Bpacked,
               float *C, long ldc, const float *bias)
{
    return qe_sconv2d_act(n, h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, group, cog, x,
                          B, rsb, csb, b_gstride, Bpacked, C, ldc, bias, QE_ACT_NONE, 0, 0);
}

/* qe_sconv2d followed by a folded activation (applied per finished tile). */
int qe_sconv2d_act(int n, int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh,
                   int sw, int pt, int pl, int dh, int dw, int group, long cog, const float *x,
                   const float *B, long rsb, long csb, long b_gstride, const float *Bpacked,
                   float *C, long ldc, const float *bias, int act, float lo, float hi)
{
    int cig = c_in / group;
    long M = (long)n * oh * ow;
    int K = fh * fw * cig;
    for (int g = 0; g < group; g++) {
        struct conv_a a = {h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, g * cig, cig, x};
        struct seg_src seg = {aseg_conv, &a, conv_max_segments(&a, kc_for(K > 0 ? K : 1)),
                              conv_fills(&a) ? conv_fill : NULL};
        int rc = gemm_split(M, cog, K, pack_a_segments, &seg, &seg,
                            Bpacked ? NULL : B + g * b_gstride, rsb, csb, Bpacked,
                            C + g * cog, ldc, bias ? bias + g * cog : NULL, act, lo, hi);
        if (rc) return rc;
    }
    return 0;
}

struct batch_ctx {
    int batch, next;
    const int64_t *a_off, *b_off;
    long M, N;
    int K;
    const float *A;
    long rsa, csa;
    const float *B;
    long rsb, csb;
    float *C;
    long ldc;
    const float *bias;
    pthread_mutex_t lock;
    int rc;
};

static void batch_item(void *arg)
{
    struct batch_ctx *c = *(struct batch_ctx **)arg;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        int b = c->next++;
        pthread_mutex_unlock(&c->lock);
        if (b >= c->batch) break;
        struct strided_a s = {c->A + c->a_off[b], c->rsa, c->csa};
        struct gemm_job j = {0, c->M, c->N, c->K, pack_a_strided, &s, c->B + c->b_off[b],
                             c->rsb, c->csb, c->C + (long)b * c->M * c->ldc, c->ldc, c->bias, 0,
                             NULL, 0, 0, c->csa == 1 ? aseg_strided : NULL, &s, 1};
        if (gemm_run(&j)) {
            pthread_mutex_lock(&c->lock);
            c->rc = -1;
            pthread_mutex_unlock(&c->lock);
        }
    }
    return;
}

/* Batched GEMM: for b < batch, C_b = A_b * B_b (+ bias), A_b = A + a_off[b] (elements),
 * B_b = B + b_off[b], C_b = C + b*M*ldc.  Offsets let numpy express broadcast batches.
 * Batch items are shared among the threads; a batch of one splits the GEMM instead. */
int qe_sgemm_batched(int batch, const int64_t *a_off, const int64_t *b_off, long M, long N,
                     int K, const float *A, long rsa, long csa, const float *B, long rsb,
                     long csb, float *C, long ldc, const float *bias)
{
    int T = threads_for((double)batch * M * N * K, batch);
    if (batch == 1 || T <= 1) {
        for (int b = 0; b < batch; b++) {
            int rc = qe_sgemm(M, N, K, A + a_off[b], rsa, csa, B + b_off[b], rsb, csb,
                              C + (long)b * M * ldc, ldc, bias);
            if (rc) return rc;
        }
        return 0;
    }
    struct batch_ctx c = {batch, 0, a_off, b_off, M, N, K, A, rsa, csa, B, rsb, csb, C, ldc,
                          bias, PTHREAD_MUTEX_INITIALIZER, 0};
    struct batch_ctx *same[64];
    for (int t = 0; t < T && t < 64; t++) same[t] = &c;
    qe_pool_run(batch_item, same, sizeof same[0], T < 64 ? T : 64);
    return c.rc;
}

/* ---- im2col ------------------------------------------------------------------------------ */

/* Rows [p0, p1) of the im2col matrix of a 2-D convolution: row p is output pixel p of the
 * flattened [n, oh, ow] grid, its K = fh * fw * cig columns are the filter taps (row-major
 * over fh, fw), each holding channels [c0, c0 + cig) of the input (0 in the padding).
 * cols is [p1 - p0, K], row-major. */
ALWAYS_INLINE void im2col_body(int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh,
                               int sw, int pt, int pl, int dh, int dw, int c0, int cig,
                               long p0, long p1, const float *restrict x,
                               float *restrict cols)
{
    long K = (long)fh * fw * cig;
    for (long p = p0; p < p1; p++) {
        long b = p / ((long)oh * ow);
        int rem = (int)(p % ((long)oh * ow));
        int oy = rem / ow, ox = rem % ow;
        float *row = cols + (p - p0) * K;
        const float *xb = x + b * h * (long)w * c_in + c0;
        for (int ky = 0; ky < fh; ky++) {
            int iy = oy * sh - pt + ky * dh;
            float *dst = row + (long)ky * fw * cig;
            if (iy < 0 || iy >= h) {
                memset(dst, 0, sizeof(float) * (size_t)fw * cig);
                continue;
            }
            const float *xrow = xb + (long)iy * w * c_in;
            int ix0 = ox * sw - pl;
            if (dw == 1 && cig == c_in && ix0 >= 0 && ix0 + fw <= w) {
                /* the whole filter row is inside the image and contiguous in memory */
                memcpy(dst, xrow + (long)ix0 * c_in, sizeof(float) * (size_t)fw * cig);
                continue;
            }
            for (int kx = 0; kx < fw; kx++, dst += cig) {
                int ix = ix0 + kx * dw;
                if (ix < 0 || ix >= w) {
                    for (int q = 0; q < cig; q++) dst[q] = 0.0f;
                } else {
                    const float *src = xrow + (long)ix * c_in;
                    for (int q = 0; q < cig; q++) dst[q] = src[q];
                }
            }
        }
    }
}

/* Rows [a->p0 + r0, a->p0 + r1) of the im2col matrix into rows [r0, r1) of a->y. */
ALWAYS_INLINE void im2col_range_body(const void *ctx, long r0, long r1)
{
    const struct k2d *a = ctx;
    long K = (long)a->fh * a->fw * a->cig;
    im2col_body(a->h, a->w, a->c_in, a->fh, a->fw, a->oh, a->ow, a->sh, a->sw, a->pt, a->pl,
                a->dh, a->dw, a->c0, a->cig, a->p0 + r0, a->p0 + r1, a->x, a->y + r0 * K);
}

RANGE_VARIANTS(im2col)

/* seg_src.fill of a convolution's rows: im2col rows [i0, i0 + mc) into buf. */
static void conv_fill(const void *ctx, long i0, int mc, float *buf)
{
    const struct conv_a *c = ctx;
    struct k2d a = {0};
    a.h = c->h; a.w = c->w; a.c_in = c->c_in; a.fh = c->fh; a.fw = c->fw; a.oh = c->oh;
    a.ow = c->ow; a.sh = c->sh; a.sw = c->sw; a.pt = c->pt; a.pl = c->pl; a.dh = c->dh;
    a.dw = c->dw; a.c0 = c->c0; a.cig = c->cig; a.p0 = i0; a.x = c->x; a.y = buf;
    (use_avx2() ? im2col_range_avx2 : im2col_range_base)(&a, 0, mc);
}

void qe_im2col2d(int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh, int sw,
                 int pt, int pl, int dh, int dw, int c0, int cig, long p0, long p1,
                 const float *x, float *cols)
{
    struct k2d a = {0};
    a.h = h; a.w = w; a.c_in = c_in; a.fh = fh; a.fw = fw; a.oh = oh; a.ow = ow;
    a.sh = sh; a.sw = sw; a.pt = pt; a.pl = pl; a.dh = dh; a.dw = dw; a.c0 = c0; a.cig = cig;
    a.p0 = p0; a.x = x; a.y = cols;
    /* ~0.1 ns per copied float */
    parallel_for(use_avx2() ? im2col_range_avx2 : im2col_range_base, &a, p1 - p0,
                 0.1 * fh * fw * cig + 5.0);
}

/* ---- col2im (transposed convolution) ----------------------------------------------------- */

/* y[n, oh, ow, group * cog] += the contribution of every input pixel and tap:
 * y[b, iy*sh - pt + ky*dh, ix*sw - pl + kx*dw, g*cog + o] += cols(g, p, ky, kx, o), p the
 * flattened input pixel (b, iy, ix); element (g, p, t, o) of cols is at
 * cols[g*gstride + p*pstride + t*cog + o].  Contributions landing outside y are dropped
 * (pad_amount crops the full transposed-convolution output). */
ALWAYS_INLINE void col2im_body(int n, int h, int w, int group, int cog, int fh, int fw,
                               int oh, int ow, int sh, int sw, int pt, int pl, int dh, int dw,
                               const float *restrict cols, long gstride, long pstride,
                               float *restrict y)
{
    long c_out = (long)group * cog;
    for (int b = 0; b < n; b++)
        for (int iy = 0; iy < h; iy++)
            for (int ix = 0; ix < w; ix++) {
                long p = ((long)b * h + iy) * w + ix;
                for (int ky = 0; ky < fh; ky++) {
                    int oy = iy * sh - pt + ky * dh;
                    if (oy < 0 || oy >= oh) continue;
                    for (int kx = 0; kx < fw; kx++) {
                        int ox = ix * sw - pl + kx * dw;
                        if (ox < 0 || ox >= ow) continue;
                        float *dst = y + (((long)b * oh + oy) * ow + ox) * c_out;
                        const float *src = cols + p * pstride + (long)(ky * fw + kx) * cog;
                        for (int g = 0; g < group; g++) {
                            float *d = dst + (long)g * cog;
                            const float *s = src + g * gstride;
                            for (int o = 0; o < cog; o++) d[o] += s[o];
                        }
                    }
                }
            }
}

VARIANTS(col2im,
         (int n, int h, int w, int group, int cog, int fh, int fw, int oh, int ow, int sh,
          int sw, int pt, int pl, int dh, int dw, const float *cols, long gstride,
          long pstride, float *y),
         (n, h, w, group, cog, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, cols, gstride, pstride,
          y))

void qe_col2im2d(int n, int h, int w, int group, int cog, int fh, int fw, int oh, int ow,
                 int sh, int sw, int pt, int pl, int dh, int dw, const float *cols,
                 long gstride, long pstride, float *y)
{
    (use_avx2() ? col2im_avx2 : col2im_base)(n, h, w, group, cog, fh, fw, oh, ow, sh, sw, pt,
                                              pl, dh, dw, cols, gstride, pstride, y);
}

/* ---- depthwise convolution --------------------------------------------------------------- */

/* NHWC input [n,h,w,c_in], filter [fh,fw,1,c_out] with c_out = c_in * mult (output channel o
 * reads input channel o / mult), optional bias [c_out], output [n,oh,ow,c_out].
 * Channels are processed in blocks of 32 held in registers across all taps. */
/* Output channels a depthwise step expands per block (the channel tail, or every channel when
 * the multiplier is above 1). */
#define DW_EXPAND 1024

ALWAYS_INLINE void depthwise_body(int h, int w, int c_in, int fh, int fw, int c_out,
                                  int oh, int ow, int sh, int sw, int pt, int pl, int dh,
                                  int dw, const float *restrict x, const float *restrict f,
                                  const float *restrict bias, float *restrict y, long p0,
                                  long p1)
{
    int mult = c_out / c_in;
    for (long p = p0; p < p1; p++) {
                int b = (int)(p / ((long)oh * ow)), rem = (int)(p % ((long)oh * ow));
                int oy = rem / ow, ox = rem % ow;
                float *out = y + p * c_out;
                int c = 0;
                if (mult == 1) {
                    for (; c + 32 <= c_out; c += 32) {
                        v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                        if (bias) {
                            a0 = ld8(bias + c); a1 = ld8(bias + c + 8);
                            a2 = ld8(bias + c + 16); a3 = ld8(bias + c + 24);
                        }
                        for (int ky = 0; ky < fh; ky++) {
                            int iy = oy * sh - pt + ky * dh;
                            if (iy < 0 || iy >= h) continue;
                            for (int kx = 0; kx < fw; kx++) {
                                int ix = ox * sw - pl + kx * dw;
                                if (ix < 0 || ix >= w) continue;
                                const float *in = x + (((long)b * h + iy) * w + ix) * c_in + c;
                                const float *wt = f + ((long)ky * fw + kx) * c_out + c;
                                a0 += ld8(in) * ld8(wt);
                                a1 += ld8(in + 8) * ld8(wt + 8);
                                a2 += ld8(in + 16) * ld8(wt + 16);
                                a3 += ld8(in + 24) * ld8(wt + 24);
                            }
                        }
                        st8(out + c, a0); st8(out + c + 8, a1);
                        st8(out + c + 16, a2); st8(out + c + 24, a3);
                    }
                    for (; c + 8 <= c_out; c += 8) {
                        v8f a0 = {0};
                        if (bias) a0 = ld8(bias + c);
                        for (int ky = 0; ky < fh; ky++) {
                            int iy = oy * sh - pt + ky * dh;
                            if (iy < 0 || iy >= h) continue;
                            for (int kx = 0; kx < fw; kx++) {
                                int ix = ox * sw - pl + kx * dw;
                                if (ix < 0 || ix >= w) continue;
                                const float *in = x + (((long)b * h + iy) * w + ix) * c_in + c;
                                a0 += ld8(in) * ld8(f + ((long)ky * fw + kx) * c_out + c);
                            }
                        }
                        st8(out + c, a0);
                    }
                }
                /* channel tail, and every channel when mult > 1 */
                for (int o = c; o < c_out; o++) out[o] = bias ? bias[o] : 0.0f;
                if (c == c_out) continue;
                /* each tap's input pixel expanded to the output channels (input channel o / mult
                 * at o) a block at a time, then 8 products and sums at a time: the same
                 * operations in the same order as a scalar loop (which divided per element: 15x
                 * slower per output than a multiplier of 1) */
                float expd[DW_EXPAND];
                for (int ky = 0; ky < fh; ky++) {
                    int iy = oy * sh - pt + ky * dh;
                    if (iy < 0 || iy >= h) continue;
                    for (int kx = 0; kx < fw; kx++) {
                        int ix = ox * sw - pl + kx * dw;
                        if (ix < 0 || ix >= w) continue;
                        const float *in = x + (((long)b * h + iy) * w + ix) * c_in;
                        const float *wt = f + ((long)ky * fw + kx) * c_out;
                        /* blocks of whole input channels (c is 0 when mult > 1) */
                        int blk = DW_EXPAND / mult * mult;
                        for (int o0 = c; o0 < c_out; o0 += blk) {
                            int n = c_out - o0 < blk ? c_out - o0 : blk;
                            for (int ci = o0 / mult, q = 0; q < n; ci++)
                                for (int m = 0; m < mult; m++) expd[q++] = in[ci];
                            float *ob = out + o0;
                            const float *wb = wt + o0;
                            int q = 0;
                            for (; q + 8 <= n; q += 8)
                                st8(ob + q, ld8(ob + q) + ld8(expd + q) * ld8(wb + q));
                            for (; q < n; q++) ob[q] += expd[q] * wb[q];
                        }
                    }
                }
    }
}

ALWAYS_INLINE void depthwise_range_body(const void *ctx, long p0, long p1)
{
    const struct k2d *a = ctx;
    depthwise_body(a->h, a->w, a->c_in, a->fh, a->fw, a->c_out, a->oh, a->ow, a->sh, a->sw,
                   a->pt, a->pl, a->dh, a->dw, a->x, a->f, a->bias, a->y, p0, p1);
}

RANGE_VARIANTS(depthwise)

/* The row run [ox0, ox0 + run) of 16 channels (mask m) of a depthwise FH x FW with stride SW and
 * dilation 1, in blocks of 8 pixels: each input vector of a filter row is loaded once and used by
 * every pixel it feeds (8 independent chains of adds, the filter vectors wv[] reloaded from L1);
 * the taps outside the row are masked off the adds (the sum keeps its bits, as when skipped),
 * the pixels past the run are not stored. */
#define QE_DW512_BLOCKS(FH, FW, SW, NPX)                                                           \
    for (int q = 0; q < run; q += (NPX)) {                                                        \
        enum { NIN = ((NPX) - 1) * (SW) + (FW) };                                                       \
        int xl = (ox0 + q) * (SW) - a->pl, np = run - q < (NPX) ? run - q : (NPX);                    \
        int inside = xl >= 0 && xl + NIN <= a->w;   /* no masks needed */                     \
        __mmask16 vm[NIN];                                                                    \
        for (int i = 0; i < NIN; i++) vm[i] = xl + i >= 0 && xl + i < a->w ? m : (__mmask16)0; \
        __m512 s[NPX], in[NIN];                                                                 \
        for (int o = 0; o < (NPX); o++) s[o] = bv;                                                \
        for (int ky = 0; ky < (FH); ky++) {                                                   \
            int iy = oy * a->sh - a->pt + ky * a->dh;                                         \
            if (iy < 0 || iy >= a->h) continue;                                               \
            const float *xr = xb + ((long)iy * a->w + xl) * c + c0;                           \
            for (int i = 0; i < NIN; i++) in[i] = _mm512_maskz_loadu_ps(vm[i], xr + (long)i * c); \
            if (inside) {                                                                     \
                for (int kx = 0; kx < (FW); kx++) {                                           \
                    __m512 wk = wv[ky * (FW) + kx];                                           \
                    for (int o = 0; o < (NPX); o++)                                               \
                        s[o] = _mm512_add_ps(s[o], _mm512_mul_ps(in[o * (SW) + kx], wk));     \
                }                                                                             \
            } else {                                                                          \
                for (int kx = 0; kx < (FW); kx++) {                                           \
                    __m512 wk = wv[ky * (FW) + kx];                                           \
                    for (int o = 0; o < (NPX); o++)                                               \
                        s[o] = _mm512_mask_add_ps(s[o], vm[o * (SW) + kx], s[o],              \
                                                  _mm512_mul_ps(in[o * (SW) + kx], wk));      \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (int o = 0; o < np; o++)                                                          \
            _mm512_mask_storeu_ps(yo + (long)(q + o) * c, m, act512(s[o], a->act, alo, ahi)); \
    }

/* Depthwise FH x FW (one input channel per output channel) with AVX-512: 16 channels at a
 * time, their FH * FW filter vectors held in registers across a run of output pixels (each
 * input vector loaded once per tap, no filter reload).  Per channel the arithmetic is that of
 * depthwise_body: the bias (or 0), then + in * w per tap inside the image in tap order, each
 * product rounded before the add (no fused multiply-add), so the results are the same bits. */
#define QE_DW512(FH, FW)                                                                      \
__attribute__((target("avx512f")))                                                            \
static void dw512_##FH##x##FW(const void *ctx, long p0, long p1)                              \
{                                                                                             \
    const struct k2d *a = ctx;                                                                \
    int c = a->c_in;                                                                          \
    long ohw = (long)a->oh * a->ow;                                                           \
    const __m512 alo = _mm512_set1_ps(a->act_lo), ahi = _mm512_set1_ps(a->act_hi);           \
    for (long p = p0; p < p1;) {                                                              \
        /* the run of output pixels [p, p + run) in one output row */                         \
        long b = p / ohw;                                                                     \
        int rem = (int)(p - b * ohw), oy = rem / a->ow, ox0 = rem % a->ow;                    \
        int run = a->ow - ox0 < p1 - p ? a->ow - ox0 : (int)(p1 - p);                         \
        const float *xb = a->x + b * a->h * (long)a->w * c;                                   \
        for (int c0 = 0; c0 < c; c0 += 16) {                                                  \
            __mmask16 m = c - c0 >= 16 ? (__mmask16)0xFFFF                                    \
                                       : (__mmask16)((1u << (c - c0)) - 1);                   \
            __m512 wv[FH * FW];                                                               \
            for (int t = 0; t < FH * FW; t++)                                                 \
                wv[t] = _mm512_maskz_loadu_ps(m, a->f + (long)t * c + c0);                    \
            __m512 bv = a->bias ? _mm512_maskz_loadu_ps(m, a->bias + c0)                      \
                                : _mm512_setzero_ps();                                        \
            float *yo = a->y + p * c + c0;                                                    \
            /* Dilation 1 and stride 1 (blocks of 8 pixels) or 5x5 stride 2 (blocks of 4; for \
             * 3x3 these were no faster than the 4-pixel path below): QE_DW512_BLOCKS */     \
            if (a->dw == 1 && a->sw == 1) {                                                   \
                QE_DW512_BLOCKS(FH, FW, 1, 8)                                                  \
                continue;                                                                     \
            }                                                                                 \
            if (a->dw == 1 && a->sw == 2 && (FW) == 5) {                                                   \
                QE_DW512_BLOCKS(FH, FW, 2, 4)                                                  \
                continue;                                                                     \
            }                                                                                 \
            /* 4 pixels whose taps are all inside the row at a time (4 independent chains of \
             * adds), the others one by one */                                                \
            for (int q = 0; q < run;) {                                                       \
                int ox = ox0 + q;                                                             \
                int xl = ox * a->sw - a->pl;                                                  \
                if (q + 4 <= run && xl >= 0 &&                                                \
                    xl + 3 * a->sw + (FW - 1) * a->dw < a->w) {                               \
                    __m512 s0 = bv, s1 = bv, s2 = bv, s3 = bv;                                \
                    long st = (long)a->sw * c;                                                \
                    for (int ky = 0; ky < FH; ky++) {                                         \
                        int iy = oy * a->sh - a->pt + ky * a->dh;                             \
                        if (iy < 0 || iy >= a->h) continue;                                   \
                        const float *xr = xb + ((long)iy * a->w + xl) * c + c0;               \
                        for (int kx = 0; kx < FW; kx++) {                                     \
                            __m512 wk = wv[ky * FW + kx];                                     \
                            const float *xp = xr + (long)kx * a->dw * c;                      \
                            s0 = _mm512_add_ps(s0, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xp), wk)); \
                            s1 = _mm512_add_ps(s1, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xp + st), wk)); \
                            s2 = _mm512_add_ps(s2, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xp + 2 * st), wk)); \
                            s3 = _mm512_add_ps(s3, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xp + 3 * st), wk)); \
                        }                                                                     \
                    }                                                                         \
                    _mm512_mask_storeu_ps(yo + (long)q * c, m, act512(s0, a->act, alo, ahi));  \
                    _mm512_mask_storeu_ps(yo + (long)(q + 1) * c, m, act512(s1, a->act, alo, ahi)); \
                    _mm512_mask_storeu_ps(yo + (long)(q + 2) * c, m, act512(s2, a->act, alo, ahi)); \
                    _mm512_mask_storeu_ps(yo + (long)(q + 3) * c, m, act512(s3, a->act, alo, ahi)); \
                    q += 4;                                                                   \
                    continue;                                                                 \
                }                                                                             \
                __m512 acc = bv;                                                              \
                for (int ky = 0; ky < FH; ky++) {                                             \
                    int iy = oy * a->sh - a->pt + ky * a->dh;                                 \
                    if (iy < 0 || iy >= a->h) continue;                                       \
                    const float *xr = xb + (long)iy * a->w * c + c0;                          \
                    for (int kx = 0; kx < FW; kx++) {                                         \
                        int ix = xl + kx * a->dw;                                             \
                        if (ix < 0 || ix >= a->w) continue;                                   \
                        __m512 in = _mm512_maskz_loadu_ps(m, xr + (long)ix * c);              \
                        acc = _mm512_add_ps(acc, _mm512_mul_ps(in, wv[ky * FW + kx]));        \
                    }                                                                         \
                }                                                                             \
                _mm512_mask_storeu_ps(yo + (long)q * c, m, act512(acc, a->act, alo, ahi)); \
                q++;                                                                          \
            }                                                                                 \
        }                                                                                     \
        p += run;                                                                             \
    }                                                                                         \
}
QE_DW512(3, 3)
QE_DW512(5, 5)
#undef QE_DW512
#undef QE_DW512_BLOCKS

/* The depthwise range function for the CPU and the filter: the AVX-512 register-filter
 * kernels for 3x3 and 5x5 filters without channel multiplier, else depthwise_body. */
static range_fn depthwise_range_fn(int fh, int fw, int c_in, int c_out)
{
    if (qe_gemm_avx512() && c_in == c_out) {
        if (fh == 3 && fw == 3) return dw512_3x3;
        if (fh == 5 && fw == 5) return dw512_5x5;
    }
    return use_avx2() ? depthwise_range_avx2 : depthwise_range_base;
}

void qe_depthwise2d(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh, int ow,
                    int sh, int sw, int pt, int pl, int dh, int dw, const float *x,
                    const float *f, const float *bias, float *y)
{
    qe_depthwise2d_act(n, h, w, c_in, fh, fw, c_out, oh, ow, sh, sw, pt, pl, dh, dw, x, f, bias,
                       y, QE_ACT_NONE, 0, 0);
}

/* A depthwise range followed by the folded activation, a few output rows at a time (their
 * values still in L1 / L2).  The pieces end at output row boundaries, where the kernels' runs
 * of pixels end anyway: every pixel is computed by the same code path as without the
 * activation (the 4-pixel and the 1-pixel paths may order the adds of two NaNs differently). */
struct dw_act { struct k2d a; range_fn fn; int act; float lo, hi; };

static void depthwise_act_range(const void *ctx, long p0, long p1)
{
    const struct dw_act *d = ctx;
    long c = d->a.c_out, ow = d->a.ow;
    long rows = c * ow >= 4096 ? 1 : 4096 / (c * ow);   /* about 16 KiB of output per pass */
    for (long p = p0; p < p1;) {
        long q = (p / ow + rows) * ow;
        if (q > p1) q = p1;
        d->fn(&d->a, p, q);
        act_block(d->a.y + p * c, 0, 1, (q - p) * c, d->act, d->lo, d->hi);
        p = q;
    }
}

/* qe_depthwise2d followed by a folded activation. */
void qe_depthwise2d_act(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh,
                        int ow, int sh, int sw, int pt, int pl, int dh, int dw, const float *x,
                        const float *f, const float *bias, float *y, int act, float lo, float hi)
{
    struct dw_act d = {{0}, NULL, act, lo, hi};
    struct k2d *a = &d.a;
    a->h = h; a->w = w; a->c_in = c_in; a->fh = fh; a->fw = fw; a->c_out = c_out; a->oh = oh;
    a->ow = ow; a->sh = sh; a->sw = sw; a->pt = pt; a->pl = pl; a->dh = dh; a->dw = dw;
    a->x = x; a->f = f; a->bias = bias; a->y = y;
    d.fn = depthwise_range_fn(fh, fw, c_in, c_out);
    /* the AVX-512 kernels apply the activation to the values they store (act512: the same
     * max / min as act_block, so the same bytes); the others get a pass every few rows */
    int in_kernel = (d.fn == dw512_3x3 || d.fn == dw512_5x5) && QE_ACT_IN_STORE(act);
    if (in_kernel) {
        a->act = act;
        a->act_lo = lo;
        a->act_hi = hi;
    }
    /* ~0.05 ns per multiply-add (vectorized); the same split with or without the activation */
    /* pieces of whole output rows: each run of pixels the kernels compute is the same on any
     * thread count (the 4-pixel and 1-pixel paths may order the adds of two NaNs differently) */
    int pass = act != QE_ACT_NONE && !in_kernel;
    parallel_for_aligned(pass ? depthwise_act_range : d.fn, pass ? (void *)&d : (void *)a,
                         (long)n * oh * ow,
                         0.05 * fh * fw * c_out + 2.0 + (QE_ACT_MODE(act) >= QE_ACT_SILU ? 0.7 * c_out : 0.0),
                         ow);
}

/* ---- pooling ----------------------------------------------------------------------------- */

/* Max (kind 0) or average (kind 1) pooling, NHWC [n,h,w,c] -> [n,oh,ow,c].
 * Window (oy, ox) covers rows oy*sh - pt + [0, fh) and columns ox*sw - pl + [0, fw).
 * Max: cells outside the input count as 0 (the HTP backend's zero padding), so a window
 * that is not entirely inside the input starts from 0.
 * Average: the sum (in double) of the input cells divided by their number, or with
 * count_pad by the number of window cells inside the padded extent
 * [-pt, h + pb) x [-pl, w + pr). */
ALWAYS_INLINE void pool_body(int kind, int h, int w, int c, int fh, int fw, int oh, int ow,
                             int sh, int sw, int pt, int pb, int pl, int pr, int count_pad,
                             const float *restrict x, float *restrict y, long p0, long p1)
{
    double acc[256];  /* average: sums in double, 256 channels at a time */
    for (long p = p0; p < p1; p++) {
        int b = (int)(p / ((long)oh * ow)), rem = (int)(p % ((long)oh * ow));
        int oy = rem / ow, ox = rem % ow;
        int y0 = oy * sh - pt;
        int iy0 = y0 < 0 ? 0 : y0, iy1 = y0 + fh > h ? h : y0 + fh;
        int x0 = ox * sw - pl;
        int ix0 = x0 < 0 ? 0 : x0, ix1 = x0 + fw > w ? w : x0 + fw;
        float *out = y + p * c;
        const float *xb = x + (long)b * h * w * c;
        long inside = (long)(iy1 > iy0 ? iy1 - iy0 : 0) * (ix1 > ix0 ? ix1 - ix0 : 0);
        if (kind == 0) {
            int first = 1;
            if (inside < (long)fh * fw) {
                for (int q = 0; q < c; q++) out[q] = 0.0f;
                first = 0;
            }
            for (int iy = iy0; iy < iy1; iy++)
                for (int ix = ix0; ix < ix1; ix++) {
                    const float *in = xb + ((long)iy * w + ix) * c;
                    if (first) {
                        for (int q = 0; q < c; q++) out[q] = in[q];
                        first = 0;
                    } else {
                        for (int q = 0; q < c; q++) out[q] = in[q] > out[q] ? in[q] : out[q];
                    }
                }
            continue;
        }
        long cnt = inside;
        if (count_pad) {
            int py0 = y0 < -pt ? -pt : y0, py1 = y0 + fh > h + pb ? h + pb : y0 + fh;
            int px0 = x0 < -pl ? -pl : x0, px1 = x0 + fw > w + pr ? w + pr : x0 + fw;
            cnt = (long)(py1 - py0) * (px1 - px0);
        }
        double inv = cnt > 0 ? 1.0 / (double)cnt : 0.0;
        for (int c0 = 0; c0 < c; c0 += 256) {
            int cn = c - c0 < 256 ? c - c0 : 256;
            for (int q = 0; q < cn; q++) acc[q] = 0.0;
            for (int iy = iy0; iy < iy1; iy++)
                for (int ix = ix0; ix < ix1; ix++) {
                    const float *in = xb + ((long)iy * w + ix) * c + c0;
                    for (int q = 0; q < cn; q++) acc[q] += in[q];
                }
            for (int q = 0; q < cn; q++) out[c0 + q] = (float)(acc[q] * inv);
        }
    }
}

ALWAYS_INLINE void pool_range_body(const void *ctx, long p0, long p1)
{
    const struct k2d *a = ctx;
    pool_body(a->kind, a->h, a->w, a->c_in, a->fh, a->fw, a->oh, a->ow, a->sh, a->sw, a->pt,
              a->pb, a->pl, a->pr, a->count_pad, a->x, a->y, p0, p1);
}

RANGE_VARIANTS(pool)

/* Max pooling (kind 0) with AVX-512: 16 channels per vector, the window's cells in pool_body's
 * order, each taken as max(cell, so far) by VMAXPS, which returns its second operand unless the
 * first is greater -- pool_body's ``in > out ? in : out``: the same value, NaN and signed zero
 * included (a NaN cell is skipped, a NaN so far is kept, an equal cell does not replace it). */
__attribute__((target("avx512f")))
static void maxpool512_range(const void *ctx, long p0, long p1)
{
    const struct k2d *a = ctx;
    int c = a->c_in;
    long ohw = (long)a->oh * a->ow;
    long b = p0 / ohw;
    int rem = (int)(p0 - b * ohw), oy = rem / a->ow, ox = rem - oy * a->ow;
    for (long p = p0; p < p1; p++) {
        int y0 = oy * a->sh - a->pt, x0 = ox * a->sw - a->pl;
        int iy0 = y0 < 0 ? 0 : y0, iy1 = y0 + a->fh > a->h ? a->h : y0 + a->fh;
        int ix0 = x0 < 0 ? 0 : x0, ix1 = x0 + a->fw > a->w ? a->w : x0 + a->fw;
        long inside = (long)(iy1 > iy0 ? iy1 - iy0 : 0) * (ix1 > ix0 ? ix1 - ix0 : 0);
        int zero_start = inside < (long)a->fh * a->fw;   /* zero padding counts as a cell */
        const float *xb = a->x + b * a->h * (long)a->w * c;
        float *out = a->y + p * c;
        for (int c0 = 0; c0 < c; c0 += 16) {
            __mmask16 m = c - c0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (c - c0)) - 1);
            __m512 acc = _mm512_setzero_ps();
            int first = !zero_start;
            for (int iy = iy0; iy < iy1; iy++) {
                const float *row = xb + (long)iy * a->w * c + c0;
                for (int ix = ix0; ix < ix1; ix++) {
                    __m512 v = _mm512_maskz_loadu_ps(m, row + (long)ix * c);
                    acc = first ? v : _mm512_max_ps(v, acc);
                    first = 0;
                }
            }
            _mm512_mask_storeu_ps(out + c0, m, acc);
        }
        if (++ox == a->ow) {
            ox = 0;
            if (++oy == a->oh) {
                oy = 0;
                b++;
            }
        }
    }
}

/* Returns 0. */
int qe_pool2d(int kind, int n, int h, int w, int c, int fh, int fw, int oh, int ow, int sh,
              int sw, int pt, int pb, int pl, int pr, int count_pad, const float *x, float *y)
{
    struct k2d a = {0};
    a.kind = kind; a.h = h; a.w = w; a.c_in = c; a.fh = fh; a.fw = fw; a.oh = oh; a.ow = ow;
    a.sh = sh; a.sw = sw; a.pt = pt; a.pb = pb; a.pl = pl; a.pr = pr;
    a.count_pad = count_pad; a.x = x; a.y = y;
    /* ~0.05 ns per window cell and channel */
    range_fn fn = kind == 0 && qe_gemm_avx512() ? maxpool512_range
                  : use_avx2() ? pool_range_avx2 : pool_range_base;
    parallel_for(fn, &a, (long)n * oh * ow, 0.05 * fh * fw * c + 2.0);
    return 0;
}
