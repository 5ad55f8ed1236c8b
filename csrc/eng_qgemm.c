/* The HTP's exact integer pipeline of quantized accumulating ops and of ElementWiseAdd (QNN op
 * definitions "Conv2d", "DepthWiseConv2d", "FullyConnected", "MatMul", "ElementWiseAdd";
 * docs/numerics.md "Accumulating ops" and "ElementWiseAdd"), for the C engine (issue 13) and for
 * the Python plan's IntegerAccumulation, which calls qe_qacc / qe_qacc_dw so both paths share one
 * accumulator.
 *
 * - The GEMM: acc[m, n] = sum_k (code[m, k] + x_offset) * w[k, n], exact.  Activation codes
 *   (uint8/int8/uint16/int16) are mapped to unsigned u (int8: +128, int16: +32768), 16-bit ones
 *   split into two bytes u = 256 * hi + lo; each byte plane times the int8 weights accumulates in
 *   int32 (|sum| < 255 * 128 * K: exact for K <= QG_MAX_K), and
 *   acc = C_lo + 256 * C_hi + (x_offset - u shift) * wsum[n] in int64, exact in float64.
 *   Kernels: AMX int8 tiles (tdpbusd, 32 x 32 per step), AVX-512 VNNI (vpdpbusd, 4 rows x 64
 *   columns), AVX-VNNI (256-bit vpdpbusd), AVX2 (vpmaddwd on bytes widened to int16) and
 *   scalar, chosen at run time (qe_qgemm_isa_level; QNNEMU_KERNELS_ISA caps it).
 *   Weights are packed once (qe_qgemm_pack: blocks of 16 columns, k in groups of 4 bytes).
 * - Convolutions gather each output pixel's receptive field of codes (im2col) with padded
 *   positions set to the input's zero point, so they contribute exactly 0 as the Python path's
 *   zero padding of code + offset does; grouped convolutions run one GEMM per group.
 * - DepthWiseConv2d: direct, in float64 (products and sums of integers below 2**53: exact).
 * - AccRequant (qnnemu/spec/quant.py) in float64 with numpy's operation order (the build turns
 *   FMA contraction off), per output channel, for the op's own output and each folded Relu's.
 * - ElementWiseAdd (IntegerAdd): y = floor(a * m_a + b * m_b + (const + 0.5)), clipped.
 * Row blocks are split over qe_threads() pool threads; results do not depend on the split.
 */
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "eng_qgemm.h"
#include "engine.h"
#include "kernels.h"
#include "pool.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define NB 16            /* columns per packed block */
#define MC 64            /* rows per job chunk */
#define QG_MAX_K 65536   /* int32 accumulation stays exact: 255 * 128 * 65536 < 2**31 */
/* Wider vectors for the float64 loops where the CPU has them (same results: IEEE operations,
 * no contraction); the ifunc resolver picks one at load time. */
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* -- ISA choice ------------------------------------------------------------------------- */
static int g_qisa = -1;

/* AMX int8 tiles: the CPU has them (CPUID.7.0:EDX bits 24, 25) and Linux grants this process
 * the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, once). */
static int amx_usable(void)
{
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1) || !((d >> 25) & 1))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

/* The integer GEMM's kernel: QG_AMX (AMX int8 tiles), QG_VNNI512 (AVX-512 VNNI), QG_AVXVNNI
 * (AVX-VNNI, 256-bit), QG_AVX2 (vpmaddwd), QG_SCALAR.  QNNEMU_KERNELS_ISA=sse / avx2 / avxvnni
 * / avx512 caps it (avx512: VNNI without AMX). */
enum { QG_SCALAR, QG_AVX2, QG_AVXVNNI, QG_VNNI512, QG_AMX };

int qe_qgemm_isa_level(void)
{
    if (g_qisa < 0) {
        __builtin_cpu_init();
        int isa = QG_SCALAR;
        if (__builtin_cpu_supports("avx2"))
            isa = QG_AVX2;
        if (isa && __builtin_cpu_supports("avxvnni"))
            isa = QG_AVXVNNI;
        if (isa && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vnni"))
            isa = QG_VNNI512;
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        int cap = QG_AMX;
        if (force && strcmp(force, "sse") == 0) cap = QG_SCALAR;
        if (force && strcmp(force, "avx2") == 0) cap = QG_AVX2;
        if (force && strcmp(force, "avxvnni") == 0) cap = QG_AVXVNNI;
        if (force && strcmp(force, "avx512") == 0) cap = QG_VNNI512;
        if (cap == QG_AVXVNNI && isa >= QG_AVXVNNI && !__builtin_cpu_supports("avxvnni"))
            cap = QG_AVX2;   /* AVX-512 VNNI without AVX-VNNI */
        if (isa == QG_VNNI512 && cap == QG_AMX && amx_usable())
            isa = QG_AMX;
        g_qisa = isa < cap ? isa : cap;
    }
    return g_qisa;
}

/* The path's name (qnnemu/core/engine/isa.py asks every family's qe_<family>_isa). */
int qe_qgemm_isa(char *buf, int n)
{
    static const char *const names[] = {"scalar", "avx2", "avx-vnni", "avx512-vnni",
                                        "amx-int8"};
    if (!buf || n < 1) return -1;
    snprintf(buf, (size_t)n, "%s", names[qe_qgemm_isa_level()]);
    return 0;
}

static int threads_for(double macs, long chunks)
{
    int t = qe_threads();
    int c = qe_call_threads();
    if (c > 0 && c < t) t = c;
    /* below ~2M multiply-adds a second thread costs more than it saves */
    long want = (long)(macs / 2e6) + 1;
    if (want < t) t = (int)want;
    if (t > chunks) t = (int)chunks;
    if (t > 64) t = 64;
    return t < 1 ? 1 : t;
}

/* -- packing ---------------------------------------------------------------------------- */
/* K padded for the packed layout: groups of 4 bytes; whole 64-byte tile rows for AMX. */
static long kpad(long K) { return qe_qgemm_isa_level() == QG_AMX ? (K + 63) & ~63L : (K + 3) & ~3L; }
static long nblocks(long N) { return (N + NB - 1) / NB; }

long qe_qgemm_packed_size(long K, long N) { return kpad(K) * nblocks(N) * NB; }

/* Column blocks [b0, b1) of qe_qgemm_pack (each block's bytes and its columns' sums). */
static void pack_blocks(long K, long N, const int8_t *B, long rsb, long csb, int8_t *Bp,
                        int32_t *wsum, long b0, long b1)
{
    long Kp = kpad(K);
    long c0 = b0 * NB, c1 = b1 * NB < N ? b1 * NB : N;
    memset(Bp + b0 * Kp * NB, 0, (size_t)((b1 - b0) * Kp * NB));
    if (rsb == 1 && csb != 1) {
        for (long n = c0; n < c1; n++) {
            int32_t s = 0;
            int8_t *blk = Bp + (n / NB) * Kp * NB + (n % NB) * 4;
            for (long k = 0; k < K; k++) {
                int8_t v = B[k + n * csb];
                s += v;
                blk[(k / 4) * NB * 4 + (k % 4)] = v;
            }
            if (wsum) wsum[n] = s;
        }
        return;
    }
    if (wsum)
        for (long n = c0; n < c1; n++)
            wsum[n] = 0;
    for (long k = 0; k < K; k++) {
        const int8_t *row = B + k * rsb;
        int8_t *line = Bp + (k / 4) * NB * 4 + (k % 4);
        for (long b = b0; b < b1; b++) {
            long n0 = b * NB, n1 = n0 + NB < N ? n0 + NB : N;
            int8_t *dst = line + b * Kp * NB;
            for (long n = n0; n < n1; n++) {
                int8_t v = row[n * csb];
                dst[(n - n0) * 4] = v;
                if (wsum) wsum[n] += v;
            }
        }
    }
}

typedef struct { long K, N; const int8_t *B; long rsb, csb; int8_t *Bp; int32_t *wsum; long b0, b1; } pack_job;

static void pack_job_run(void *p)
{
    const pack_job *j = p;
    if (j->b1 > j->b0) pack_blocks(j->K, j->N, j->B, j->rsb, j->csb, j->Bp, j->wsum, j->b0, j->b1);
}

/* Bp[block][k / 4][column in block][k % 4]; zero beyond K and N.  wsum[n] = sum_k B[k, n].
 * B is read along its contiguous direction (a walk across it strides through the whole matrix:
 * at finalize every weight of a quantized model passes through here): column by column when
 * its columns are contiguous (rsb 1), else row by row, each group of 4 rows filling one 64-byte
 * line of every block.  Large operands are split over the pool's threads by column blocks
 * (each writes its own blocks and sums: the bytes do not depend on the split; ResNet-50's
 * weights took 18 ms on one thread at finalize). */
int qe_qgemm_pack(long K, long N, const int8_t *B, long rsb, long csb, int8_t *Bp,
                  int32_t *wsum)
{
    long nbk = nblocks(N);
    int T = qe_threads();
    long want = K * N / (256L << 10) + 1;
    if (want < T) T = (int)want;
    if (T > nbk) T = (int)nbk;
    if (T > 16) T = 16;
    if (T <= 1) {
        pack_blocks(K, N, B, rsb, csb, Bp, wsum, 0, nbk);
        return 0;
    }
    pack_job jobs[16];
    long per = (nbk + T - 1) / T;
    int cnt = 0;
    for (long b = 0; b < nbk && cnt < 16; b += per)
        jobs[cnt++] = (pack_job){K, N, B, rsb, csb, Bp, wsum, b, b + per < nbk ? b + per : nbk};
    qe_pool_run(pack_job_run, jobs, sizeof jobs[0], cnt);
    return 0;
}

/* -- micro-kernels: C[rows, 16 * nbk columns] (int32) = A (u8, lda Kp) x Bp ---------------- */
ALWAYS_INLINE void store_cols(int32_t *dst, const int32_t *v, long ncols)
{
    memcpy(dst, v, (size_t)ncols * 4);
}

static void kern_scalar(long rows, long nbk, long Kp, const uint8_t *A, const int8_t *Bp,
                        int32_t *C, long ldc, long N)
{
    for (long m = 0; m < rows; m++)
        for (long b = 0; b < nbk; b++) {
            int32_t acc[NB] = {0};
            const int8_t *blk = Bp + b * Kp * NB;
            const uint8_t *a = A + m * Kp;
            for (long kg = 0; kg < Kp / 4; kg++)
                for (int j = 0; j < NB; j++)
                    for (int q = 0; q < 4; q++)
                        acc[j] += (int32_t)a[kg * 4 + q] * blk[(kg * NB + j) * 4 + q];
            long c0 = b * NB, nc = N - c0 < NB ? N - c0 : NB;
            store_cols(C + m * ldc + c0, acc, nc);
        }
}

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

VNNI_TARGET ALWAYS_INLINE void vnni_tile(int MR, int NR, long Kp, const uint8_t *A,
                                         const int8_t *Bp, int32_t *C, long ldc, long c0, long N)
{
    __m512i acc[4][4];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm512_setzero_si512();
    const long bstride = Kp * NB;
    for (long kg = 0; kg < Kp / 4; kg++) {
        __m512i b[4];
        for (int j = 0; j < NR; j++)
            b[j] = _mm512_loadu_si512((const void *)(Bp + j * bstride + kg * 64));
        for (int i = 0; i < MR; i++) {
            int32_t a4;
            memcpy(&a4, A + i * Kp + kg * 4, 4);
            __m512i a = _mm512_set1_epi32(a4);
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a, b[j]);
        }
    }
    for (int j = 0; j < NR; j++) {
        long c = c0 + j * NB;
        long nc = N - c < NB ? N - c : NB;
        __mmask16 mask = (__mmask16)((1u << nc) - 1u);
        for (int i = 0; i < MR; i++)
            _mm512_mask_storeu_epi32(C + i * ldc + c, mask, acc[i][j]);
    }
}

VNNI_TARGET static void kern_vnni(long rows, long nbk, long Kp, const uint8_t *A,
                                  const int8_t *Bp, int32_t *C, long ldc, long N)
{
    const long bstride = Kp * NB;
    long b = 0;
    for (; b + 4 <= nbk; b += 4) {
        long m = 0;
        for (; m + 4 <= rows; m += 4)
            vnni_tile(4, 4, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
        for (; m < rows; m++)
            vnni_tile(1, 4, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
    }
    for (; b < nbk; b++) {
        long m = 0;
        for (; m + 4 <= rows; m += 4)
            vnni_tile(4, 1, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
        for (; m < rows; m++)
            vnni_tile(1, 1, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
    }
}

#define AVXVNNI_TARGET __attribute__((target("avx2,avxvnni")))

/* AVX-VNNI: one 16-column block as two 8-lane halves, MR rows. */
AVXVNNI_TARGET ALWAYS_INLINE void avxvnni_tile(int MR, long Kp, const uint8_t *A,
                                               const int8_t *Bp, int32_t *C, long ldc, long c0,
                                               long N)
{
    __m256i acc[4][2];
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (long kg = 0; kg < Kp / 4; kg++) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(Bp + kg * 64));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(Bp + kg * 64 + 32));
        for (int i = 0; i < MR; i++) {
            int32_t a4;
            memcpy(&a4, A + i * Kp + kg * 4, 4);
            __m256i a = _mm256_set1_epi32(a4);
            acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], a, b0);
            acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], a, b1);
        }
    }
    long nc = N - c0 < NB ? N - c0 : NB;
    for (int i = 0; i < MR; i++) {
        int32_t out[NB];
        _mm256_storeu_si256((__m256i *)out, acc[i][0]);
        _mm256_storeu_si256((__m256i *)(out + 8), acc[i][1]);
        store_cols(C + i * ldc + c0, out, nc);
    }
}

AVXVNNI_TARGET static void kern_avxvnni(long rows, long nbk, long Kp, const uint8_t *A,
                                        const int8_t *Bp, int32_t *C, long ldc, long N)
{
    const long bstride = Kp * NB;
    for (long b = 0; b < nbk; b++) {
        long m = 0;
        for (; m + 4 <= rows; m += 4)
            avxvnni_tile(4, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
        for (; m < rows; m++)
            avxvnni_tile(1, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
    }
}

#define AVX2_TARGET __attribute__((target("avx2")))

/* One 16-column block, MR rows: bytes widened to int16, vpmaddwd gives per column two partial
 * sums (k0 + k1, k2 + k3) per 4-byte group; a final horizontal add pairs them. */
AVX2_TARGET ALWAYS_INLINE void avx2_tile(int MR, long Kp, const uint8_t *A, const int8_t *Bp,
                                         int32_t *C, long ldc, long c0, long N)
{
    __m256i acc[4][4];   /* [row][column quarter: 4 columns each] */
    for (int i = 0; i < MR; i++)
        for (int q = 0; q < 4; q++)
            acc[i][q] = _mm256_setzero_si256();
    for (long kg = 0; kg < Kp / 4; kg++) {
        const int8_t *blk = Bp + kg * 64;
        __m256i b[4];
        for (int q = 0; q < 4; q++)
            b[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + q * 16)));
        for (int i = 0; i < MR; i++) {
            uint32_t a4;
            memcpy(&a4, A + i * Kp + kg * 4, 4);
            __m256i a = _mm256_cvtepu8_epi16(_mm_set1_epi32((int)a4));
            for (int q = 0; q < 4; q++)
                acc[i][q] = _mm256_add_epi32(acc[i][q], _mm256_madd_epi16(a, b[q]));
        }
    }
    long nc = N - c0 < NB ? N - c0 : NB;
    for (int i = 0; i < MR; i++) {
        int32_t out[NB];
        for (int q = 0; q < 4; q += 2) {
            /* hadd within 128-bit lanes: [q lo pairs, q+1 lo pairs, q hi pairs, q+1 hi pairs] */
            __m256i h = _mm256_hadd_epi32(acc[i][q], acc[i][q + 1]);
            h = _mm256_permute4x64_epi64(h, 0xD8);
            _mm256_storeu_si256((__m256i *)(out + q * 4), h);
        }
        store_cols(C + i * ldc + c0, out, nc);
    }
}

AVX2_TARGET static void kern_avx2(long rows, long nbk, long Kp, const uint8_t *A,
                                  const int8_t *Bp, int32_t *C, long ldc, long N)
{
    const long bstride = Kp * NB;
    for (long b = 0; b < nbk; b++) {
        long m = 0;
        for (; m + 4 <= rows; m += 4)
            avx2_tile(4, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
        for (; m < rows; m++)
            avx2_tile(1, Kp, A + m * Kp, Bp + b * bstride, C + m * ldc, ldc, b * NB, N);
    }
}

#define AMX_TARGET __attribute__((target("amx-tile,amx-int8")))

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* AMX: C tiles of 16 rows x 16 columns; A tiles 16 rows x 64 bytes (stride Kp), B tiles one
 * packed block's 16 groups of 4 k (stride 64).  Rows are processed in whole tiles (A and C
 * have room for them: up to MC rows, MC a multiple of 16); ldc covers whole blocks. */
AMX_TARGET static void kern_amx(long rows, long nbk, long Kp, const uint8_t *A, const int8_t *Bp,
                                int32_t *C, long ldc)
{
    struct tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    const long bstride = Kp * NB;
    for (long m = 0; m < rows; m += 32) {
        int two_rows = m + 16 < rows;
        long b = 0;
        for (; b + 2 <= nbk; b += 2) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (long kc = 0; kc < Kp; kc += 64) {
                _tile_loadd(4, A + m * Kp + kc, Kp);
                _tile_loadd(6, Bp + b * bstride + kc * NB, 64);
                _tile_loadd(7, Bp + (b + 1) * bstride + kc * NB, 64);
                _tile_dpbusd(0, 4, 6);
                _tile_dpbusd(1, 4, 7);
                if (two_rows) {
                    _tile_loadd(5, A + (m + 16) * Kp + kc, Kp);
                    _tile_dpbusd(2, 5, 6);
                    _tile_dpbusd(3, 5, 7);
                }
            }
            _tile_stored(0, C + m * ldc + b * NB, ldc * 4);
            _tile_stored(1, C + m * ldc + (b + 1) * NB, ldc * 4);
            if (two_rows) {
                _tile_stored(2, C + (m + 16) * ldc + b * NB, ldc * 4);
                _tile_stored(3, C + (m + 16) * ldc + (b + 1) * NB, ldc * 4);
            }
        }
        for (; b < nbk; b++) {
            _tile_zero(0);
            _tile_zero(2);
            for (long kc = 0; kc < Kp; kc += 64) {
                _tile_loadd(4, A + m * Kp + kc, Kp);
                _tile_loadd(6, Bp + b * bstride + kc * NB, 64);
                _tile_dpbusd(0, 4, 6);
                if (two_rows) {
                    _tile_loadd(5, A + (m + 16) * Kp + kc, Kp);
                    _tile_dpbusd(2, 5, 6);
                }
            }
            _tile_stored(0, C + m * ldc + b * NB, ldc * 4);
            if (two_rows) _tile_stored(2, C + (m + 16) * ldc + b * NB, ldc * 4);
        }
    }
    _tile_release();
}

static void gemm_u8s8(long rows, long N, long Kp, const uint8_t *A, const int8_t *Bp,
                      int32_t *C, long ldc)
{
    long nbk = nblocks(N);
    switch (qe_qgemm_isa_level()) {
    case QG_AMX: kern_amx(rows, nbk, Kp, A, Bp, C, ldc); break;
    case QG_VNNI512: kern_vnni(rows, nbk, Kp, A, Bp, C, ldc, N); break;
    case QG_AVXVNNI: kern_avxvnni(rows, nbk, Kp, A, Bp, C, ldc, N); break;
    case QG_AVX2: kern_avx2(rows, nbk, Kp, A, Bp, C, ldc, N); break;
    default: kern_scalar(rows, nbk, Kp, A, Bp, C, ldc, N); break;
    }
}

/* -- gathering rows of activation codes as unsigned byte planes ------------------------------ */
static int wide_type(int type) { return type == QE_U16 || type == QE_I16; }

static double u_shift(int type)
{
    return type == QE_I8 ? 128.0 : type == QE_I16 ? 32768.0 : 0.0;
}

/* cnt codes from x[base] as unsigned byte planes (lo; hi for 16-bit codes). */
static void to_planes(int type, const void *x, long base, long cnt, uint8_t *l, uint8_t *h)
{
    switch (type) {
    case QE_U8: memcpy(l, (const uint8_t *)x + base, (size_t)cnt); break;
    case QE_I8: {
        const uint8_t *s = (const uint8_t *)x + base;
        for (long c = 0; c < cnt; c++) l[c] = (uint8_t)(s[c] ^ 0x80u);   /* code + 128 */
        break;
    }
    case QE_U16: {
        const uint16_t *s = (const uint16_t *)x + base;
        for (long c = 0; c < cnt; c++) {
            l[c] = (uint8_t)s[c];
            h[c] = (uint8_t)(s[c] >> 8);
        }
        break;
    }
    default: {
        const uint16_t *s = (const uint16_t *)x + base;
        for (long c = 0; c < cnt; c++) {
            uint16_t u = (uint16_t)(s[c] ^ 0x8000u);                      /* code + 32768 */
            l[c] = (uint8_t)u;
            h[c] = (uint8_t)(u >> 8);
        }
        break;
    }
    }
}

/* Rows [p0, p1) of group g into lo (and hi for 16-bit codes), Kp bytes each, zero beyond K. */
static void gather(const int64_t *geo, const void *x, long g, long p0, long p1, uint8_t *lo,
                   uint8_t *hi)
{
    int type = (int)geo[QG_TYPE];
    long K = geo[QG_K], Kp = kpad(K);
    int wide = wide_type(type);
    for (long p = p0; p < p1; p++) {
        uint8_t *l = lo + (p - p0) * Kp, *h = wide ? hi + (p - p0) * Kp : NULL;
        if (geo[QG_KIND] == 0) {
            to_planes(type, x, p * geo[QG_LDA], K, l, h);
        } else {
            long ow = geo[QG_OW], oh = geo[QG_OH], w = geo[QG_W], hh = geo[QG_H];
            long cin = geo[QG_CIN], cig = K / (geo[QG_FH] * geo[QG_FW]);
            long n = p / (oh * ow), r = p % (oh * ow), oy = r / ow, ox = r % ow;
            uint32_t pad = (uint32_t)geo[QG_PAD_CODE];
            long k = 0;
            long ix0 = ox * geo[QG_SW] - geo[QG_PL], fw = geo[QG_FW];
            /* one group, no horizontal dilation, the filter row inside the image: a filter row
             * of taps is one contiguous run of fw * c_in codes */
            int whole_rows = cig == cin && geo[QG_DW] == 1 && ix0 >= 0 && ix0 + fw <= w;
            for (long ky = 0; ky < geo[QG_FH]; ky++) {
                long iy = oy * geo[QG_SH] - geo[QG_PT] + ky * geo[QG_DH];
                if (whole_rows && iy >= 0 && iy < hh) {
                    long cnt = fw * cin;
                    to_planes(type, x, ((n * hh + iy) * w + ix0) * cin, cnt, l + k, wide ? h + k : NULL);
                    k += cnt;
                    continue;
                }
                for (long kx = 0; kx < fw; kx++, k += cig) {
                    long ix = ox * geo[QG_SW] - geo[QG_PL] + kx * geo[QG_DW];
                    if (iy < 0 || iy >= hh || ix < 0 || ix >= w) {
                        memset(l + k, (int)(pad & 255), (size_t)cig);
                        if (wide) memset(h + k, (int)(pad >> 8), (size_t)cig);
                        continue;
                    }
                    to_planes(type, x, ((n * hh + iy) * w + ix) * cin + g * cig, cig, l + k,
                              wide ? h + k : NULL);
                }
            }
        }
        memset(l + K, 0, (size_t)(Kp - K));
        if (wide) memset(h + K, 0, (size_t)(Kp - K));
    }
}

/* -- AccRequant (qnnemu/spec/quant.py), one output's parameters ------------------------------ */
typedef struct requant {
    const double *cst, *inv_shift, *scale, *dead;   /* per channel (N total) */
    const double *wsum;                             /* per channel, the 16-bit path's */
    int wide, type, has_dead;
    double lo, hi, dead_code, zp_x;
    void *out;
    /* the exact integer form, or NULL: int32 [8][ntot] rows B, s, E, tlo, thi, mult, rnd, r
     * (qnnemu/core/engine/lower_qgemm.py _int_requant) */
    const int32_t *itab;
    long ntot;
} requant;

/* y[i] = AccRequant of acc[i] for channels n0 + i (numpy's operation order, float64). */
CLONES static void requant_row(const requant *q, long n0, const double *acc, double *y, long cnt)
{
    const double *cst = q->cst + n0, *sc = q->scale + n0;
    if (q->wide) {
        const double *ws = q->wsum + n0;
        double zp = q->zp_x;
        for (long i = 0; i < cnt; i++) {
            double zw = zp * ws[i];
            double data = acc[i] + zw;
            double a = floor(data / 256.0) - floor(zw / 256.0 + 0.5);
            a = a + cst[i];
            y[i] = floor(a * sc[i] + 0.5);
        }
    } else {
        const double *inv = q->inv_shift + n0;
        for (long i = 0; i < cnt; i++) {
            double a = acc[i] + cst[i];
            a = a * inv[i];
            a = floor(a);
            a = a * sc[i];
            a = a + 0.5;
            y[i] = floor(a);
        }
    }
    double lo = q->lo, hi = q->hi;
    for (long i = 0; i < cnt; i++) {       /* np.clip: maximum(lo), then minimum(hi) */
        double v = y[i] < lo ? lo : y[i];
        y[i] = v > hi ? hi : v;
    }
    if (q->has_dead) {
        const double *dead = q->dead + n0;
        for (long i = 0; i < cnt; i++)
            if (dead[i] != 0.0) y[i] = q->dead_code;
    }
}

static void store_codes(int type, void *out, long i0, const double *y, long cnt)
{
    switch (type) {
    case QE_U8: { uint8_t *o = (uint8_t *)out + i0; for (long i = 0; i < cnt; i++) o[i] = (uint8_t)(int)y[i]; break; }
    case QE_I8: { int8_t *o = (int8_t *)out + i0; for (long i = 0; i < cnt; i++) o[i] = (int8_t)(int)y[i]; break; }
    case QE_U16: { uint16_t *o = (uint16_t *)out + i0; for (long i = 0; i < cnt; i++) o[i] = (uint16_t)(int)y[i]; break; }
    default: { int16_t *o = (int16_t *)out + i0; for (long i = 0; i < cnt; i++) o[i] = (int16_t)(int)y[i]; break; }
    }
}

ALWAYS_INLINE void store_code(const requant *q, long i, double y)
{
    store_codes(q->type, q->out, i, &y, 1);
}

/* What a job does with the exact accumulators of output row p, columns [n0, n0 + cnt). */
typedef struct sink {
    double *acc;               /* float64 accumulators (the Python path), or NULL */
    const requant *rq;         /* else these R requantizations */
    int R;
    long ldo;
} sink;

#define ROW_PIECE 256

static void emit_row(const sink *s, long p, long n0, const double *acc, long cnt)
{
    long i0 = p * s->ldo + n0;
    if (s->acc) {
        memcpy(s->acc + i0, acc, (size_t)cnt * sizeof(double));
        return;
    }
    double y[ROW_PIECE];
    for (long c = 0; c < cnt; c += ROW_PIECE) {
        long k = cnt - c < ROW_PIECE ? cnt - c : ROW_PIECE;
        for (int r = 0; r < s->R; r++) {
            requant_row(&s->rq[r], n0 + c, acc + c, y, k);
            store_codes(s->rq[r].type, s->rq[r].out, i0 + c, y, k);
        }
    }
}

/* -- the fused epilogue: int32 accumulators straight to codes ------------------------------- */
#define E512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

static int g_e512 = -1;

/* AVX-512 (F, BW, VL, DQ) for the fused requantization; QNNEMU_KERNELS_ISA=sse/avx2/avxvnni
 * turn it off (the portable loop computes the same float64 operations). */
static int e512_usable(void)
{
    if (g_e512 < 0) {
        __builtin_cpu_init();
        const char *force = getenv("QNNEMU_KERNELS_ISA");
        int capped = force && (strcmp(force, "sse") == 0 || strcmp(force, "avx2") == 0
                               || strcmp(force, "avxvnni") == 0);
        g_e512 = !capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }
    return g_e512;
}

#define FLOOR_PD(v) _mm512_roundscale_pd((v), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)

/* AccRequant of cnt accumulators acc[i] = cl[i] (+ 256 * ch[i]) + xw[i] (exact integers in
 * float64, as the portable path's int64 sum) for channels n0 + i, codes to q->out[i0 + i]:
 * requant_row's float64 operations in the same order, 8 channels per vector. */
E512_TARGET static void rq_store_512(const requant *q, long n0, const int32_t *cl,
                                     const int32_t *ch, const double *xw, long cnt, long i0);

/* rows output rows (p0 + r, accumulators at cl + r * ldc) of the int32 form: each 16-channel
 * block's table vectors loaded once for all rows. */
E512_TARGET static void rq_rows_int_512(const requant *q, long n0, const int32_t *cl,
                                        const int32_t *ch, long ldc, long rows, long cnt, long i0,
                                        long ldo)
{
    const long nt = q->ntot;
    const int32_t *B = q->itab + n0, *S = B + nt, *E = S + nt, *TL = E + nt, *TH = TL + nt;
    const int32_t *MU = TH + nt, *RN = MU + nt, *RS = RN + nt;
    const __m512i ilo = _mm512_set1_epi32((int)q->lo), ihi = _mm512_set1_epi32((int)q->hi);
    const int bytes = q->type == QE_U8 || q->type == QE_I8;
    for (long i = 0; i < cnt; i += 16) {
        long k = cnt - i < 16 ? cnt - i : 16;
        __mmask16 m = (__mmask16)((1u << k) - 1u);
        const __m512i b = _mm512_maskz_loadu_epi32(m, B + i), sh = _mm512_maskz_loadu_epi32(m, S + i);
        const __m512i tl = _mm512_maskz_loadu_epi32(m, TL + i), th = _mm512_maskz_loadu_epi32(m, TH + i);
        const __m512i mu = _mm512_maskz_loadu_epi32(m, MU + i), rn = _mm512_maskz_loadu_epi32(m, RN + i);
        const __m512i rs = _mm512_maskz_loadu_epi32(m, RS + i), e = _mm512_maskz_loadu_epi32(m, E + i);
        for (long r = 0; r < rows; r++) {
            __m512i t = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, cl + r * ldc + i), b);
            t = _mm512_srav_epi32(t, sh);
            if (ch)
                t = _mm512_add_epi32(t, _mm512_maskz_loadu_epi32(m, ch + r * ldc + i));
            t = _mm512_add_epi32(t, e);
            t = _mm512_min_epi32(_mm512_max_epi32(t, tl), th);
            t = _mm512_srav_epi32(_mm512_add_epi32(_mm512_mullo_epi32(t, mu), rn), rs);
            t = _mm512_min_epi32(_mm512_max_epi32(t, ilo), ihi);
            long o = i0 + r * ldo + i;
            if (bytes)
                _mm_mask_storeu_epi8((char *)q->out + o, m, _mm512_cvtepi32_epi8(t));
            else
                _mm256_mask_storeu_epi16((int16_t *)q->out + o, m, _mm512_cvtepi32_epi16(t));
        }
    }
}

E512_TARGET static void rq_store_512(const requant *q, long n0, const int32_t *cl,
                                     const int32_t *ch, const double *xw, long cnt, long i0)
{
    const double *cst = q->cst + n0, *sc = q->scale + n0, *inv = q->inv_shift + n0;
    const double *ws = q->wsum ? q->wsum + n0 : NULL, *dead = q->dead + n0;
    const __m512d lo = _mm512_set1_pd(q->lo), hi = _mm512_set1_pd(q->hi);
    const __m512d half = _mm512_set1_pd(0.5), c256 = _mm512_set1_pd(256.0);
    const __m512d r256 = _mm512_set1_pd(1.0 / 256.0), zp = _mm512_set1_pd(q->zp_x);
    const __m512d dc = _mm512_set1_pd(q->dead_code), zero = _mm512_setzero_pd();
    const int wide = q->wide, has_dead = q->has_dead, type = q->type;
    for (long i = 0; i < cnt; i += 8) {
        long k = cnt - i < 8 ? cnt - i : 8;
        __mmask8 m = (__mmask8)((1u << k) - 1u);
        __m512d acc = _mm512_cvtepi32_pd(_mm256_maskz_loadu_epi32(m, cl + i));
        if (ch)
            acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_maskz_loadu_epi32(m, ch + i)), c256));
        acc = _mm512_add_pd(acc, _mm512_maskz_loadu_pd(m, xw + i));
        __m512d y;
        if (wide) {
            __m512d zw = _mm512_mul_pd(zp, _mm512_maskz_loadu_pd(m, ws + i));
            __m512d data = _mm512_add_pd(acc, zw);
            /* x / 256.0 == x * (1 / 256.0) exactly: these are integers, far from subnormals */
            __m512d a = _mm512_sub_pd(FLOOR_PD(_mm512_mul_pd(data, r256)),
                                      FLOOR_PD(_mm512_add_pd(_mm512_mul_pd(zw, r256), half)));
            a = _mm512_add_pd(a, _mm512_maskz_loadu_pd(m, cst + i));
            y = FLOOR_PD(_mm512_add_pd(_mm512_mul_pd(a, _mm512_maskz_loadu_pd(m, sc + i)), half));
        } else {
            __m512d a = _mm512_add_pd(acc, _mm512_maskz_loadu_pd(m, cst + i));
            a = _mm512_mul_pd(a, _mm512_maskz_loadu_pd(m, inv + i));
            a = FLOOR_PD(a);
            a = _mm512_mul_pd(a, _mm512_maskz_loadu_pd(m, sc + i));
            a = _mm512_add_pd(a, half);
            y = FLOOR_PD(a);
        }
        y = _mm512_min_pd(_mm512_max_pd(y, lo), hi);
        if (has_dead) {
            __mmask8 d = _mm512_cmp_pd_mask(_mm512_maskz_loadu_pd(m, dead + i), zero, _CMP_NEQ_OQ);
            y = _mm512_mask_mov_pd(y, d, dc);
        }
        __m256i v = _mm512_cvttpd_epi32(y);
        switch (type) {
        case QE_U8:
        case QE_I8:
            _mm_mask_storeu_epi8((char *)q->out + i0 + i, m, _mm256_cvtepi32_epi8(v));
            break;
        default:
            _mm_mask_storeu_epi16((int16_t *)q->out + i0 + i, m, _mm256_cvtepi32_epi16(v));
            break;
        }
    }
}

static void emit_row_i32(const sink *s, long p, long n0, const int32_t *cl, const int32_t *ch,
                         const double *xw, long cnt);

/* Output rows p0 .. p0 + rows - 1, channels [n0, n0 + cnt): accumulators at cl (+ r * ldc),
 * ch likewise (16-bit codes' high byte plane, or NULL), offset term xw per channel. */
static void emit_rows_i32(const sink *s, long p0, long rows, long n0, const int32_t *cl,
                          const int32_t *ch, long ldc, const double *xw, long cnt)
{
    if (!s->acc && e512_usable()) {
        for (int r = 0; r < s->R; r++) {
            const requant *q = &s->rq[r];
            if (q->itab && (!ch || q->wide)) {
                rq_rows_int_512(q, n0, cl, ch, ldc, rows, cnt, p0 * s->ldo + n0, s->ldo);
                continue;
            }
            for (long i = 0; i < rows; i++)
                rq_store_512(q, n0, cl + i * ldc, ch ? ch + i * ldc : NULL, xw, cnt,
                             (p0 + i) * s->ldo + n0);
        }
        return;
    }
    for (long i = 0; i < rows; i++)
        emit_row_i32(s, p0 + i, n0, cl + i * ldc, ch ? ch + i * ldc : NULL, xw, cnt);
}

/* Output row p, channels [n0, n0 + cnt): int32 accumulators cl (+ 256 * ch: the high byte
 * plane of 16-bit codes) plus xw (the offset term, float64) through the sink. */
static void emit_row_i32(const sink *s, long p, long n0, const int32_t *cl, const int32_t *ch,
                         const double *xw, long cnt)
{
    if (!s->acc && e512_usable()) {
        for (int r = 0; r < s->R; r++)
            rq_store_512(&s->rq[r], n0, cl, ch, xw, cnt, p * s->ldo + n0);
        return;
    }
    double accrow[ROW_PIECE];
    for (long c = 0; c < cnt; c += ROW_PIECE) {
        long k = cnt - c < ROW_PIECE ? cnt - c : ROW_PIECE;
        if (ch)
            for (long n = 0; n < k; n++)
                accrow[n] = (double)((int64_t)cl[c + n] + (int64_t)ch[c + n] * 256) + xw[c + n];
        else
            for (long n = 0; n < k; n++)
                accrow[n] = (double)cl[c + n] + xw[c + n];
        emit_row(s, p, n0 + c, accrow, k);
    }
}

/* -- the GEMM pipeline ---------------------------------------------------------------------- */
typedef struct qjob {
    const int64_t *geo;
    const void *x;
    const int8_t *Bp;
    const int32_t *wsum;
    double xoff;               /* x_offset - the unsigned shift of the code type */
    const sink *out;
    long c0, c1;               /* row chunks [c0, c1) */
    int err;
} qjob;

static void qjob_run(void *arg)
{
    qjob *j = arg;
    const int64_t *geo = j->geo;
    long M = geo[QG_M], K = geo[QG_K], N = geo[QG_N], G = geo[QG_GROUP], Kp = kpad(K);
    int wide = wide_type((int)geo[QG_TYPE]);
    long Np = nblocks(N) * NB;   /* C rows cover whole blocks (AMX stores 16 columns) */
    size_t abytes = (size_t)(MC * Kp), cbytes = (size_t)MC * (size_t)Np * 4;
    uint8_t *lo = malloc(abytes * (wide ? 2 : 1) + cbytes * (wide ? 2 : 1) + 64);
    if (!lo) {
        j->err = 3;
        return;
    }
    uint8_t *hi = wide ? lo + abytes : NULL;
    int32_t *clo = (int32_t *)(((uintptr_t)(lo + abytes * (wide ? 2 : 1)) + 63) & ~(uintptr_t)63);
    int32_t *chi = wide ? clo + (size_t)MC * Np : NULL;
    long pb_size = qe_qgemm_packed_size(K, N);
    double *accrow = malloc((size_t)N * 2 * sizeof(double));
    if (!accrow) {
        free(lo);
        j->err = 3;
        return;
    }
    double *xw = accrow + N;   /* (x_offset - shift) * wsum: exact (|.| < 2**17 * 2**31) */
    for (long c = j->c0; c < j->c1; c++) {
        long p0 = c * MC, p1 = p0 + MC < M ? p0 + MC : M, rows = p1 - p0;
        for (long g = 0; g < G; g++) {
            const int8_t *Bp = j->Bp + g * pb_size;
            const int32_t *ws = j->wsum + g * N;
            for (long n = 0; n < N; n++) xw[n] = j->xoff * (double)ws[n];
            gather(geo, j->x, g, p0, p1, lo, hi);
            gemm_u8s8(rows, N, Kp, lo, Bp, clo, Np);
            if (wide) gemm_u8s8(rows, N, Kp, hi, Bp, chi, Np);
            emit_rows_i32(j->out, p0, rows, g * N, clo, wide ? chi : NULL, Np, xw, N);
        }
    }
    free(accrow);
    free(lo);
}

static int qgemm_run(const int64_t *geo, const void *x, const int8_t *Bp, const int32_t *wsum,
                     double x_offset, const sink *out)
{
    long M = geo[QG_M], K = geo[QG_K];
    if (K > QG_MAX_K || K < 0 || M < 0 || geo[QG_N] < 0 || geo[QG_GROUP] < 1)
        return 2;
    if (M == 0 || geo[QG_N] == 0)
        return 0;
    double xoff = x_offset - u_shift((int)geo[QG_TYPE]);
    long chunks = (M + MC - 1) / MC;
    double macs = (double)M * (double)K * (double)geo[QG_N] * (double)geo[QG_GROUP];
    /* the integer GEMM does ~100 multiply-adds per ns here: below ~8M a second thread's wake-up
     * (a condition variable) costs about what it saves, more on a loaded machine */
    int T = threads_for(macs * (wide_type((int)geo[QG_TYPE]) ? 2 : 1) / 4, chunks);
    qjob jobs[64];
    long per = (chunks + T - 1) / T;
    int cnt = 0;
    for (long c = 0; c < chunks; c += per)
        jobs[cnt++] = (qjob){geo, x, Bp, wsum, xoff, out, c, c + per < chunks ? c + per : chunks, 0};
    if (cnt == 1)
        qjob_run(&jobs[0]);
    else
        qe_pool_run(qjob_run, jobs, sizeof jobs[0], cnt);
    for (int i = 0; i < cnt; i++)
        if (jobs[i].err) return jobs[i].err;
    return 0;
}

int qe_qacc(const int64_t *geo, const void *x, const int8_t *Bp, const int32_t *wsum,
            double x_offset, double *acc)
{
    sink s = {acc, NULL, 0, geo[QG_LDO]};
    return qgemm_run(geo, x, Bp, wsum, x_offset, &s);
}

/* -- depthwise ------------------------------------------------------------------------------ */
typedef struct dwjob {
    const int64_t *geo;
    const void *x;
    const double *w;      /* [fh * fw, c_out] */
    double x_offset;
    const sink *out;
    long p0, p1;
} dwjob;

ALWAYS_INLINE double code_value(int type, const void *x, long i)
{
    switch (type) {
    case QE_U8: return ((const uint8_t *)x)[i];
    case QE_I8: return ((const int8_t *)x)[i];
    case QE_U16: return ((const uint16_t *)x)[i];
    default: return ((const int16_t *)x)[i];
    }
}

/* acc[c] += (code[c / mult] + off) * w[c], c < cout (exact in float64). */
#define DW_TAP(T)                                                                          \
    do {                                                                                   \
        const T *s = (const T *)src;                                                       \
        if (mult == 1)                                                                     \
            for (long c = 0; c < cout; c++) acc[c] += ((double)s[c] + off) * wt[c];        \
        else                                                                               \
            for (long c = 0; c < cout; c++) acc[c] += ((double)s[c / mult] + off) * wt[c]; \
    } while (0)

/* Output rows [p0, p1) (p = batch * oh + output row): taps outer, pixels and channels inner. */
CLONES static void dwjob_run(void *arg)
{
    dwjob *j = arg;
    const int64_t *geo = j->geo;
    const int type = (int)geo[QG_TYPE];
    const long cout = geo[QG_N], cin = geo[QG_CIN], mult = cout / cin;
    const long ow = geo[QG_OW], oh = geo[QG_OH], w = geo[QG_W], hh = geo[QG_H];
    const long fh = geo[QG_FH], fw = geo[QG_FW], sh = geo[QG_SH], sw = geo[QG_SW];
    const long pt = geo[QG_PT], pl = geo[QG_PL], dh = geo[QG_DH], dwd = geo[QG_DW];
    const long esize = type == QE_U8 || type == QE_I8 ? 1 : 2;
    const double off = j->x_offset;
    double *row = malloc((size_t)(ow * cout) * sizeof(double));
    if (!row) return;
    for (long p = j->p0; p < j->p1; p++) {
        long n = p / oh, oy = p % oh;
        memset(row, 0, (size_t)(ow * cout) * sizeof(double));
        for (long ky = 0; ky < fh; ky++) {
            long iy = oy * sh - pt + ky * dh;
            if (iy < 0 || iy >= hh) continue;
            for (long kx = 0; kx < fw; kx++) {
                const double *wt = j->w + (ky * fw + kx) * cout;
                for (long ox = 0; ox < ow; ox++) {
                    long ix = ox * sw - pl + kx * dwd;
                    if (ix < 0 || ix >= w) continue;
                    const char *src = (const char *)j->x + (((n * hh + iy) * w + ix) * cin) * esize;
                    double *acc = row + ox * cout;
                    switch (type) {
                    case QE_U8: DW_TAP(uint8_t); break;
                    case QE_I8: DW_TAP(int8_t); break;
                    case QE_U16: DW_TAP(uint16_t); break;
                    default: DW_TAP(int16_t); break;
                    }
                }
            }
        }
        for (long ox = 0; ox < ow; ox++)
            emit_row(j->out, n * oh * ow + oy * ow + ox, 0, row + ox * cout, cout);
    }
    free(row);
}

static int dw_run(const int64_t *geo, const void *x, const double *w, double x_offset,
                  const sink *out)
{
    long M = geo[QG_M], cout = geo[QG_N], cin = geo[QG_CIN];
    if (M < 0 || cin < 1 || cout % cin != 0 || geo[QG_OH] < 1 || geo[QG_OW] < 1)
        return M == 0 ? 0 : 2;
    if (M == 0 || cout == 0)
        return 0;
    long rows = geo[QG_BATCH] * geo[QG_OH];
    double work = (double)M * (double)cout * (double)(geo[QG_FH] * geo[QG_FW]);
    int T = threads_for(work * 4, rows);
    dwjob jobs[64];
    long per = (rows + T - 1) / T;
    int cnt = 0;
    for (long p = 0; p < rows; p += per)
        jobs[cnt++] = (dwjob){geo, x, w, x_offset, out, p, p + per < rows ? p + per : rows};
    if (cnt == 1)
        dwjob_run(&jobs[0]);
    else
        qe_pool_run(dwjob_run, jobs, sizeof jobs[0], cnt);
    return 0;
}

int qe_qacc_dw(const int64_t *geo, const void *x, const double *w, double x_offset, double *acc)
{
    sink s = {acc, NULL, 0, geo[QG_LDO]};
    return dw_run(geo, x, w, x_offset, &s);
}

/* -- depthwise on int32 (channel multiplier 1) ----------------------------------------------- */
/* acc[c] = sum over taps of code * w[tap, c] in int32 (raw codes; a padded tap reads the pad
 * code -x_offset, so (code + x_offset) * w is 0 there as in the Python path), then
 * + xw[c] = x_offset * wsum[c] in the epilogue: exact while max|code| * sum|w| < 2**31, which
 * qnnemu/ops/_fast_qgemm.py checks before choosing this kernel.  Vectorised over channels. */
typedef struct dwijob {
    const int64_t *geo;
    const void *x;
    const int32_t *w;     /* [fh * fw, c] */
    const int32_t *wp;    /* 8-bit codes: int16 weight pairs of taps (2p, 2p + 1) [pairs, c], or NULL */
    const double *xw;     /* [c] */
    const sink *out;
    long p0, p1;
    int err;
} dwijob;

#define DWI_LOAD_U8(p, m) _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((m), (p)))
#define DWI_LOAD_I8(p, m) _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8((m), (p)))
#define DWI_LOAD_U16(p, m) _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16((m), (p)))
#define DWI_LOAD_I16(p, m) _mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16((m), (p)))

#define DWI_PIXEL_512(NAME, T, LOAD)                                                            \
    E512_TARGET static void NAME(const char *const *src, long taps, const int32_t *w, long c,  \
                                 int32_t *acc)                                                  \
    {                                                                                           \
        for (long c0 = 0; c0 < c; c0 += 16) {                                                   \
            long k = c - c0 < 16 ? c - c0 : 16;                                                 \
            __mmask16 m = (__mmask16)((1u << k) - 1u);                                          \
            __m512i s = _mm512_setzero_si512();                                                 \
            for (long t = 0; t < taps; t++) {                                                   \
                __m512i v = LOAD((const T *)src[t] + c0, m);                                    \
                s = _mm512_add_epi32(s, _mm512_mullo_epi32(v, _mm512_maskz_loadu_epi32(m, w + t * c + c0))); \
            }                                                                                   \
            _mm512_mask_storeu_epi32(acc + c0, m, s);                                           \
        }                                                                                       \
    }
DWI_PIXEL_512(dwi_pixel_u8, uint8_t, DWI_LOAD_U8)
DWI_PIXEL_512(dwi_pixel_i8, int8_t, DWI_LOAD_I8)
DWI_PIXEL_512(dwi_pixel_u16, uint16_t, DWI_LOAD_U16)
DWI_PIXEL_512(dwi_pixel_i16, int16_t, DWI_LOAD_I16)

#define DWI_PIXEL_C(NAME, T)                                                                    \
    CLONES static void NAME(const char *const *src, long taps, const int32_t *w, long c,       \
                            int32_t *acc)                                                       \
    {                                                                                           \
        memset(acc, 0, (size_t)c * sizeof(int32_t));                                            \
        for (long t = 0; t < taps; t++) {                                                       \
            const T *s = (const T *)src[t];                                                     \
            const int32_t *wt = w + t * c;                                                      \
            for (long i = 0; i < c; i++) acc[i] += (int32_t)s[i] * wt[i];                       \
        }                                                                                       \
    }
DWI_PIXEL_C(dwi_pixel_u8_c, uint8_t)
DWI_PIXEL_C(dwi_pixel_i8_c, int8_t)
DWI_PIXEL_C(dwi_pixel_u16_c, uint16_t)
DWI_PIXEL_C(dwi_pixel_i16_c, int16_t)

typedef void (*dwi_pixel_fn)(const char *const *, long, const int32_t *, long, int32_t *);

/* 8-bit codes, taps in pairs: one vpdpwssd multiplies a channel's two codes (int16 halves of a
 * lane) by its two weights and adds both products (exact int32, as the single-tap kernel). */
#define DWI_PAIRS_512(NAME, LOAD, MASK16)                                                       \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void NAME(          \
        const char *const *src, long pairs, const int32_t *wp, long c, int32_t *acc)            \
    {                                                                                           \
        const __m512i lo16 = _mm512_set1_epi32(0xffff);                                         \
        for (long c0 = 0; c0 < c; c0 += 16) {                                                   \
            long k = c - c0 < 16 ? c - c0 : 16;                                                 \
            __mmask16 m = (__mmask16)((1u << k) - 1u);                                          \
            __m512i s = _mm512_setzero_si512();                                                 \
            for (long p = 0; p < pairs; p++) {                                                  \
                __m512i a = LOAD(src[2 * p] + c0, m), b = LOAD(src[2 * p + 1] + c0, m);        \
                if (MASK16) a = _mm512_and_si512(a, lo16);                                      \
                __m512i v = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));                       \
                s = _mm512_dpwssd_epi32(s, v, _mm512_maskz_loadu_epi32(m, wp + p * c + c0));    \
            }                                                                                   \
            _mm512_mask_storeu_epi32(acc + c0, m, s);                                           \
        }                                                                                       \
    }
DWI_PAIRS_512(dwi_pairs_u8, DWI_LOAD_U8, 0)
DWI_PAIRS_512(dwi_pairs_i8, DWI_LOAD_I8, 1)

static int vnni_usable(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = e512_usable() && __builtin_cpu_supports("avx512vnni");
    }
    return ok;
}

static void dwijob_run(void *arg)
{
    dwijob *j = arg;
    const int64_t *geo = j->geo;
    const int type = (int)geo[QG_TYPE];
    const long c = geo[QG_N], ow = geo[QG_OW], oh = geo[QG_OH], w = geo[QG_W], hh = geo[QG_H];
    const long fh = geo[QG_FH], fw = geo[QG_FW], sh = geo[QG_SH], sw = geo[QG_SW];
    const long pt = geo[QG_PT], pl = geo[QG_PL], dh = geo[QG_DH], dwd = geo[QG_DW];
    const long esize = type == QE_U8 || type == QE_I8 ? 1 : 2, taps = fh * fw;
    int e512 = e512_usable();
    static const dwi_pixel_fn v512[] = {dwi_pixel_u8, dwi_pixel_i8, dwi_pixel_u16, dwi_pixel_i16};
    static const dwi_pixel_fn vc[] = {dwi_pixel_u8_c, dwi_pixel_i8_c, dwi_pixel_u16_c,
                                      dwi_pixel_i16_c};
    dwi_pixel_fn pixel = (e512 ? v512 : vc)[type & 3];
    const int32_t *wp = j->wp && (type == QE_U8 || type == QE_I8) && vnni_usable() ? j->wp : NULL;
    dwi_pixel_fn pairs_fn = type == QE_U8 ? dwi_pairs_u8 : dwi_pairs_i8;
    const long npairs = (taps + 1) / 2;
    /* acc (one output row: ow * c int32), the pad row (c codes; 64 spare bytes for masked vector reads), tap pointers */
    size_t accb = ((size_t)(ow * c) * 4 + 63) & ~(size_t)63, padb = ((size_t)(c * esize) + 127) & ~(size_t)63;
    char *mem = malloc(accb + padb + (size_t)(taps + 1) * sizeof(char *));
    if (!mem) {
        j->err = 3;
        return;
    }
    int32_t *acc = (int32_t *)mem;
    char *pad = mem + accb;
    const char **src = (const char **)(pad + padb);
    int64_t pc = geo[QG_PAD_CODE];
    for (long i = 0; i < c; i++) {
        if (esize == 1) pad[i] = (char)(int8_t)pc;
        else ((int16_t *)pad)[i] = (int16_t)pc;
    }
    for (long p = j->p0; p < j->p1; p++) {
        long n = p / oh, oy = p % oh;
        for (long ox = 0; ox < ow; ox++) {
            long t = 0;
            for (long ky = 0; ky < fh; ky++) {
                long iy = oy * sh - pt + ky * dh;
                for (long kx = 0; kx < fw; kx++, t++) {
                    long ix = ox * sw - pl + kx * dwd;
                    src[t] = (iy < 0 || iy >= hh || ix < 0 || ix >= w)
                                 ? pad
                                 : (const char *)j->x + (((n * hh + iy) * w + ix) * c) * esize;
                }
            }
            if (wp) {
                src[taps] = pad;   /* an odd tap count's last pair: weight 0 */
                pairs_fn(src, npairs, wp, c, acc + ox * c);
            } else {
                pixel(src, taps, j->w, c, acc + ox * c);
            }
        }
        emit_rows_i32(j->out, (n * oh + oy) * ow, ow, 0, acc, NULL, c, j->xw, c);
    }
    free(mem);
}

static int dwi_run(const int64_t *geo, const void *x, const int32_t *w, const int32_t *wp,
                   const double *xw, const sink *out)
{
    long M = geo[QG_M], cout = geo[QG_N], cin = geo[QG_CIN];
    if (M < 0 || cin != cout || geo[QG_OH] < 0 || geo[QG_OW] < 0 || geo[QG_TYPE] < 0
        || geo[QG_TYPE] > 3)
        return 2;
    if (M == 0 || cout == 0)
        return 0;
    long rows = geo[QG_BATCH] * geo[QG_OH];
    double work = (double)M * (double)cout * (double)(geo[QG_FH] * geo[QG_FW]);
    int T = threads_for(work * 2, rows);
    dwijob jobs[64];
    long per = (rows + T - 1) / T;
    int cnt = 0;
    for (long p = 0; p < rows; p += per)
        jobs[cnt++] = (dwijob){geo, x, w, wp, xw, out, p, p + per < rows ? p + per : rows, 0};
    if (cnt == 1)
        dwijob_run(&jobs[0]);
    else
        qe_pool_run(dwijob_run, jobs, sizeof jobs[0], cnt);
    for (int i = 0; i < cnt; i++)
        if (jobs[i].err) return jobs[i].err;
    return 0;
}

int qe_qacc_dw_i32(const int64_t *geo, const void *x, const int32_t *w, const double *xw,
                   double *acc)
{
    sink s = {acc, NULL, 0, geo[QG_LDO]};
    return dwi_run(geo, x, w, NULL, xw, &s);
}

/* -- engine steps ------------------------------------------------------------------------- */
/* ints: geo[QG_LEN], R, then per output (wide, lo, hi, type, has_dead, has_itab);
 * dbls: x_offset, then per output (dead_code, zp_x);
 * params (float64, per output 4 * N total): const, inv_shift, scale, dead;
 * after the R outputs' buffers, the int32 table of each output with has_itab. */
static int requants(const qe_args *a, int first_out, const double *params, const double *wsum,
                    requant *rq, sink *s)
{
    const int64_t *geo = a->i;
    int R = (int)a->i[QG_LEN];
    if (R < 1 || R > 8 || a->ni < QG_LEN + 1 + 6 * R || a->nd < 1 + 2 * R
        || a->np < first_out + R)
        return 2;
    long ntot = geo[QG_N] * geo[QG_GROUP];
    int next_tab = first_out + R;
    for (int r = 0; r < R; r++) {
        const int64_t *oi = a->i + QG_LEN + 1 + 6 * r;
        const double *pr = params + 4 * ntot * r;
        const int32_t *itab = NULL;
        if (oi[5]) {
            if (next_tab >= a->np) return 2;
            itab = a->p[next_tab++];
        }
        rq[r] = (requant){pr, pr + ntot, pr + 2 * ntot, pr + 3 * ntot, wsum, (int)oi[0],
                          (int)oi[3], (int)oi[4], (double)oi[1], (double)oi[2],
                          a->d[1 + 2 * r], a->d[2 + 2 * r], a->p[first_out + r], itab, ntot};
    }
    *s = (sink){NULL, rq, R, geo[QG_LDO]};
    return 0;
}

/* p: x, packed weights, wsum (int32), wsum (float64), requant params, outputs... */
int qe_k_qgemm(const qe_args *a)
{
    requant rq[8];
    sink s;
    if (a->ni < QG_LEN + 1 || a->np < 6) return 2;
    int rc = requants(a, 5, a->p[4], a->p[3], rq, &s);
    if (rc) return rc;
    return qgemm_run(a->i, a->p[0], a->p[1], a->p[2], a->d[0], &s);
}

/* p: x, weights (float64 [taps, c_out]), wsum (float64), requant params, outputs... */
int qe_k_qdw(const qe_args *a)
{
    requant rq[8];
    sink s;
    if (a->ni < QG_LEN + 1 || a->np < 5) return 2;
    int rc = requants(a, 4, a->p[3], a->p[2], rq, &s);
    if (rc) return rc;
    return dw_run(a->i, a->p[0], a->p[1], a->d[0], &s);
}

/* p: x, weights (int32 [taps, c]), weight pairs (int32 [pairs, c]: int16 halves; or the
 * weights again when geo's kind is not 3), xw (float64 x_offset * wsum), wsum (float64),
 * requant params, outputs... */
int qe_k_qdw_i32(const qe_args *a)
{
    requant rq[8];
    sink s;
    if (a->ni < QG_LEN + 1 || a->np < 7) return 2;
    int rc = requants(a, 6, a->p[5], a->p[4], rq, &s);
    if (rc) return rc;
    return dwi_run(a->i, a->p[0], a->p[1], a->i[QG_KIND] == 3 ? a->p[2] : NULL, a->p[3], &s);
}

/* -- MatMul with a dynamic in1 -------------------------------------------------------------- */
/* htp_int8_operand (qnnemu/spec/quant.py) of in1's columns: values code + w_offset; a column
 * leaving [-128, 127] is requantized symmetrically (factor f rounded to 11 fractional bits,
 * values round(w * round(2**16 / f) / 2**16) half away from zero).  b: int8 [K, N]. */
static int int8_operand(long K, long N, int wtype, const void *w, long rs, long cs, double woff,
                        int8_t *b, double *factor, double *wsum)
{
    for (long n = 0; n < N; n++) {
        double hi = -INFINITY, lo = INFINITY;
        for (long k = 0; k < K; k++) {
            double v = code_value(wtype, w, k * rs + n * cs) + woff;
            hi = v > hi ? v : hi;
            lo = v < lo ? v : lo;
        }
        int over = hi > 127 || lo < -128;
        double mul = 1.0, f = 1.0;
        if (over) {
            double a = hi / 127.0, c = -lo / 128.0;
            f = rint((a > c ? a : c) * 2048.0) / 2048.0;
            mul = rint(65536.0 / f) * (1.0 / 65536.0);
        }
        double sum = 0.0;
        for (long k = 0; k < K; k++) {
            double v = code_value(wtype, w, k * rs + n * cs) + woff;
            if (over) {
                double a = v * mul;
                int negative = signbit(a);
                a = floor(fabs(a) + 0.5);
                v = negative ? -a : a;
            }
            if (v < -128 || v > 127) return 4;
            b[k * N + n] = (int8_t)(int)v;
            sum += v;
        }
        factor[n] = f;
        wsum[n] = sum;
    }
    return 0;
}

static double round_significant(double m, int bits)
{
    int e;
    double mant = frexp(m, &e);
    return ldexp(rint(mant * (double)(1L << bits)) / (double)(1L << bits), e);
}

/* AccRequant's per-channel tables (qnnemu/spec/quant.py; no bias) for a weight scale factor. */
static void accrequant_params(const double *d, int wide, int fine, int bits, double factor,
                              double *cst, double *inv_shift, double *scale, double *dead)
{
    float xs = (float)d[2], ws = (float)d[3], ys = (float)d[4];
    double zp_y = -d[5];
    float m0 = (xs * ws) / ys;
    float m = factor != 1.0 ? m0 * (float)factor : m0;
    m = m > FLT_MAX ? FLT_MAX : m;
    *dead = m == 0.0f ? 1.0 : 0.0;
    if (m == 0.0f) m = 1.0f;
    double mq = round_significant((double)m, bits ? bits : (fine ? 15 : 11));
    double shift;
    if (wide && !fine) {
        shift = 256.0;
        float k = 0.0f + (float)zp_y / m;
        *cst = floor((double)k / 256.0);
    } else {
        int e;
        frexp(mq, &e);
        int sh = fine ? 0 : (-3 - e > 0 ? -3 - e : 0);
        shift = exp2((double)sh);
        *cst = rint(0.0 + zp_y / (double)m);
    }
    *scale = shift * mq;
    *inv_shift = 1.0 / shift;
}

/* p: x codes, in1 codes, output codes.
 * ints: x_type, w_type, batches, M, K, N, w batch stride (elements, 0: shared), transpose_in1,
 *       out_type, lo, hi, wide (16-bit x), fine, multiplier bits (0: default);
 * dbls: x_offset, w_offset, x scale, w scale, y scale, y_offset. */
int qe_k_qmatmul_dyn(const qe_args *a)
{
    if (a->np < 3 || a->ni < 14 || a->nd < 6) return 2;
    const int64_t *I = a->i;
    int xtype = (int)I[0], wtype = (int)I[1], otype = (int)I[8];
    long B = I[2], M = I[3], K = I[4], N = I[5], wbs = I[6];
    int t1 = (int)I[7], wide = (int)I[11], fine = (int)I[12], bits = (int)I[13];
    if (B < 0 || M < 0 || K < 0 || N < 0 || K > QG_MAX_K) return 2;
    if (B == 0 || M == 0 || N == 0) return 0;
    long esx = xtype == QE_U8 || xtype == QE_I8 ? 1 : 2;
    long eso = otype == QE_U8 || otype == QE_I8 ? 1 : 2;
    long esw = wtype == QE_U8 || wtype == QE_I8 ? 1 : 2;
    size_t pk = (size_t)qe_qgemm_packed_size(K, N);
    int8_t *bi8 = malloc((size_t)(K * N) + pk + 64);
    double *tab = malloc((size_t)N * 7 * sizeof(double));
    int32_t *wsum = malloc((size_t)N * sizeof(int32_t));
    int rc = 0;
    if (!bi8 || !tab || !wsum) {
        rc = 3;
        goto done;
    }
    int8_t *packed = (int8_t *)(((uintptr_t)(bi8 + K * N) + 63) & ~(uintptr_t)63);
    double *cst = tab, *inv = tab + N, *scale = tab + 2 * N, *dead = tab + 3 * N;
    double *wsum_d = tab + 4 * N, *factor = tab + 5 * N;
    int64_t geo[QG_LEN] = {0};
    geo[QG_KIND] = 0;
    geo[QG_TYPE] = xtype;
    geo[QG_M] = M;
    geo[QG_K] = K;
    geo[QG_N] = N;
    geo[QG_GROUP] = 1;
    geo[QG_LDA] = K;
    geo[QG_LDO] = N;
    for (long b = 0; b < B; b++) {
        const char *w = (const char *)a->p[1] + b * wbs * esw;
        rc = int8_operand(K, N, wtype, w, t1 ? 1 : N, t1 ? K : 1, a->d[1], bi8, factor, wsum_d);
        if (rc) goto done;
        int any_dead = 0;
        for (long n = 0; n < N; n++) {
            accrequant_params(a->d, wide, fine, bits, factor[n], cst + n, inv + n, scale + n,
                              dead + n);
            any_dead |= dead[n] != 0.0;
        }
        qe_qgemm_pack(K, N, bi8, N, 1, packed, wsum);
        double yoff = a->d[5];
        double ylo = (double)I[9], yhi = (double)I[10];
        double dead_code = -yoff < ylo ? ylo : (-yoff > yhi ? yhi : -yoff);
        requant rq = {cst, inv, scale, dead, wsum_d, wide && !fine, otype, any_dead, ylo, yhi,
                      dead_code, -a->d[0], (char *)a->p[2] + b * M * N * eso};
        sink s = {NULL, &rq, 1, N};
        rc = qgemm_run(geo, (const char *)a->p[0] + b * M * K * esx, packed, wsum, a->d[0], &s);
        if (rc) goto done;
    }
done:
    free(bi8);
    free(tab);
    free(wsum);
    return rc;
}

/* -- ElementWiseAdd ------------------------------------------------------------------------ */
/* v[i] = code[base + i * stride], i < cnt, as float64. */
CLONES static void load_codes(int type, const void *x, long base, long stride, long cnt, double *v)
{
#define LOAD_CODES(T)                                                                  \
    do {                                                                               \
        const T *s = (const T *)x + base;                                              \
        if (stride == 1)                                                               \
            for (long i = 0; i < cnt; i++) v[i] = (double)s[i];                        \
        else                                                                           \
            for (long i = 0; i < cnt; i++) v[i] = (double)s[i * stride];               \
    } while (0)
    switch (type) {
    case QE_U8: LOAD_CODES(uint8_t); break;
    case QE_I8: LOAD_CODES(int8_t); break;
    case QE_U16: LOAD_CODES(uint16_t); break;
    default: LOAD_CODES(int16_t); break;
    }
#undef LOAD_CODES
}

/* IntegerAdd.run: acc = a * m_a; acc = acc + b * m_b; y = clip(floor(acc + (const + 0.5))). */
CLONES static void add_row(const double *va, const double *vb, long cnt, double ma, double mb,
                           double c05, double lo, double hi, double *y)
{
    for (long i = 0; i < cnt; i++) {
        double acc = va[i] * ma;
        acc = acc + vb[i] * mb;
        double v = floor(acc + c05);
        v = v < lo ? lo : v;
        y[i] = v > hi ? hi : v;
    }
}

/* add_row + store over contiguous codes of both inputs, 8 per vector: the same float64
 * operations (a * m_a, + b * m_b, + (const + 0.5), floor, clip). */
#define QADD_LOAD(t, p, i, m)                                                                   \
    ((t) == QE_U8 ? _mm512_cvtepi32_pd(_mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8((m), (const uint8_t *)(p) + (i)))) \
     : (t) == QE_I8 ? _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_maskz_loadu_epi8((m), (const int8_t *)(p) + (i)))) \
     : (t) == QE_U16 ? _mm512_cvtepi32_pd(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16((m), (const uint16_t *)(p) + (i)))) \
     : _mm512_cvtepi32_pd(_mm256_cvtepi16_epi32(_mm_maskz_loadu_epi16((m), (const int16_t *)(p) + (i)))))

E512_TARGET static void qadd_contig_512(int ta, int tb, int to, const void *pa, const void *pb,
                                        void *po, long n, double ma, double mb, double c05,
                                        double lo, double hi)
{
    const __m512d vma = _mm512_set1_pd(ma), vmb = _mm512_set1_pd(mb), vc = _mm512_set1_pd(c05);
    const __m512d vlo = _mm512_set1_pd(lo), vhi = _mm512_set1_pd(hi);
    for (long i = 0; i < n; i += 8) {
        long k = n - i < 8 ? n - i : 8;
        __mmask8 m = (__mmask8)((1u << k) - 1u);
        __m512d acc = _mm512_mul_pd(QADD_LOAD(ta, pa, i, m), vma);
        acc = _mm512_add_pd(acc, _mm512_mul_pd(QADD_LOAD(tb, pb, i, m), vmb));
        __m512d v = FLOOR_PD(_mm512_add_pd(acc, vc));
        v = _mm512_min_pd(_mm512_max_pd(v, vlo), vhi);
        __m256i c = _mm512_cvttpd_epi32(v);
        if (to == QE_U8 || to == QE_I8)
            _mm_mask_storeu_epi8((char *)po + i, m, _mm256_cvtepi32_epi8(c));
        else
            _mm_mask_storeu_epi16((int16_t *)po + i, m, _mm256_cvtepi32_epi16(c));
    }
}

typedef struct addjob {
    const qe_args *a;
    long r0, r1;        /* outer rows */
} addjob;

static void addjob_run(void *arg)
{
    const addjob *j = arg;
    const qe_args *a = j->a;
    int ta = (int)a->i[0], tb = (int)a->i[1], to = (int)a->i[2];
    double lo = (double)a->i[3], hi = (double)a->i[4];
    int rank = (int)a->i[5];
    const int64_t *dims = a->i + 6, *sa = dims + rank, *sb = sa + rank;
    double ma = a->d[0], mb = a->d[1], c05 = a->d[2];
    long inner = dims[rank - 1];
    double va[ROW_PIECE], vb[ROW_PIECE], y[ROW_PIECE];
    int contig = sa[rank - 1] == 1 && sb[rank - 1] == 1 && e512_usable();
    for (long r = j->r0; r < j->r1; r++) {
        long ia = 0, ib = 0, rest = r;
        for (int d = rank - 2; d >= 0; d--) {   /* r unravelled over dims[0 .. rank - 2] */
            long i = rest % dims[d];
            rest /= dims[d];
            ia += i * sa[d];
            ib += i * sb[d];
        }
        long o = r * inner;
        if (contig) {
            long ea = ta == QE_U8 || ta == QE_I8 ? 1 : 2, eb = tb == QE_U8 || tb == QE_I8 ? 1 : 2;
            long eo = to == QE_U8 || to == QE_I8 ? 1 : 2;
            qadd_contig_512(ta, tb, to, (const char *)a->p[0] + ia * ea, (const char *)a->p[1] + ib * eb,
                            (char *)a->p[2] + o * eo, inner, ma, mb, c05, lo, hi);
            continue;
        }
        for (long k0 = 0; k0 < inner; k0 += ROW_PIECE) {
            long cnt = inner - k0 < ROW_PIECE ? inner - k0 : ROW_PIECE;
            load_codes(ta, a->p[0], ia + k0 * sa[rank - 1], sa[rank - 1], cnt, va);
            load_codes(tb, a->p[1], ib + k0 * sb[rank - 1], sb[rank - 1], cnt, vb);
            add_row(va, vb, cnt, ma, mb, c05, lo, hi, y);
            store_codes(to, a->p[2], o + k0, y, cnt);
        }
    }
}

/* p: a, b, out; ints: a_type, b_type, out_type, lo, hi, rank, dims[rank], a_strides[rank],
 * b_strides[rank] (elements; 0 on broadcast axes); dbls: m_a, m_b, const + 0.5.
 * Outer rows are split over the pool's threads for large tensors. */
int qe_k_qadd(const qe_args *a)
{
    if (a->np < 3 || a->ni < 6 || a->nd < 3) return 2;
    int rank = (int)a->i[5];
    if (rank < 1 || rank > 8 || a->ni < 6 + 3 * rank) return 2;
    const int64_t *dims = a->i + 6;
    long outer = 1;
    for (int d = 0; d < rank - 1; d++) outer *= dims[d];
    if (outer == 0 || dims[rank - 1] == 0) return 0;
    /* ~1 ns per element: a second thread pays off from about 2**18 elements */
    int T = threads_for((double)outer * (double)dims[rank - 1] * 8.0, outer);
    addjob jobs[64];
    long per = (outer + T - 1) / T;
    int cnt = 0;
    for (long r = 0; r < outer; r += per)
        jobs[cnt++] = (addjob){a, r, r + per < outer ? r + per : outer};
    if (cnt == 1)
        addjob_run(&jobs[0]);
    else
        qe_pool_run(addjob_run, jobs, sizeof jobs[0], cnt);
    return 0;
}
