/* qnnemu C kernels: float32 GEMM (FullyConnected, MatMul, Conv2d via im2col) and
 * a direct depthwise convolution (DepthWiseConv2d, Conv2d with one input channel per group).
 *
 * Built with -O3 -march=x86-64-v2 (SSE4.2).  The GEMM micro-kernel also has an AVX2+FMA
 * variant compiled with __attribute__((target)) and picked at run time with
 * __builtin_cpu_supports, so the library still loads and runs on any x86-64-v2 machine.
 *
 * GEMM layout (BLIS style): C[M,N] (+)= A[M,K] * B[K,N], A and B addressed through row and
 * column strides (so transposed operands cost nothing extra: packing reads them either way),
 * C row-major with leading dimension ldc.  Loops: N in NC blocks, K in KC blocks (B packed
 * into NR-wide panels), M in MC blocks (A packed into MR-high panels), then an MR x NR
 * register-tiled micro-kernel.  Accumulation order per output is fixed (k ascending within
 * each KC block), so results do not depend on M/N tiling.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KC 256
#define MC 120   /* multiple of MR (6) */
#define NC 2048  /* multiple of both NR values (8, 16) */
#define MR 6

typedef float v4f __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));

static void *aligned_buf(size_t nfloats)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (nfloats ? nfloats : 1) * sizeof(float)) != 0)
        return NULL;
    return p;
}

/* Pack A[m0:m0+mc, k0:k0+kc] into MR-row panels, k-major inside a panel, zero padded. */
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

/* Pack B[k0:k0+kc, n0:n0+nc] into nr-column panels, k-major inside a panel, zero padded. */
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

/* Writes an MR x nr_w tile held in `t` into C (mr x nr valid part); first: C = t (+bias),
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
        v8f b0, b1;
        memcpy(&b0, Bp, 32);
        memcpy(&b1, Bp + 8, 32);
        for (int r = 0; r < MR; r++) {
            float s = Ap[r];
            v8f a = (v8f){s, s, s, s, s, s, s, s};
            c[r][0] += a * b0;  /* contracted to vfmadd with -ffp-contract=fast (GCC default) */
            c[r][1] += a * b1;
        }
        Ap += MR;
        Bp += 16;
    }
    float t[MR * 16] __attribute__((aligned(32)));
    for (int r = 0; r < MR; r++) {
        memcpy(t + r * 16, &c[r][0], 32);
        memcpy(t + r * 16 + 8, &c[r][1], 32);
    }
    store_tile(t, 16, mr, nr, C, ldc, first, bias);
}

typedef void (*ukernel_fn)(int, const float *, const float *, float *, long, int, int, int,
                           const float *);

static int g_isa = -1;  /* 0: SSE, 1: AVX2+FMA; decided once */

static int use_avx2(void)
{
    if (g_isa < 0) {
        __builtin_cpu_init();
        g_isa = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
        const char *force = getenv("QNNEMU_KERNELS_ISA");  /* "sse" forces the baseline path */
        if (force && strcmp(force, "sse") == 0) g_isa = 0;
    }
    return g_isa;
}

/* 1 if the AVX2+FMA micro-kernel is in use, 0 for the SSE one. */
int qe_isa(void) { return use_avx2(); }

/* Packs rows [i0, i0+mc) x columns [p0, p0+kc) of the A operand into MR-row panels. */
typedef void (*pack_a_fn)(const void *ctx, int i0, int mc, int p0, int kc, float *Ap);

struct strided_a { const float *A; long rsa, csa; };

static void pack_a_strided(const void *ctx, int i0, int mc, int p0, int kc, float *Ap)
{
    const struct strided_a *s = ctx;
    pack_a(mc, kc, s->A + (long)i0 * s->rsa + (long)p0 * s->csa, s->rsa, s->csa, Ap);
}

static int gemm_core(int M, int N, int K, pack_a_fn pa, const void *actx, const float *B,
                     long rsb, long csb, float *C, long ldc, const float *bias);

/* C[M,N] = A[M,K] * B[K,N] (+ bias[N] per column when bias != NULL).
 * Element (i,p) of A is A[i*rsa + p*csa]; (p,j) of B is B[p*rsb + j*csb].
 * Returns 0, or -1 when out of memory. */
int qe_sgemm(int M, int N, int K, const float *A, long rsa, long csa, const float *B,
             long rsb, long csb, float *C, long ldc, const float *bias)
{
    struct strided_a s = {A, rsa, csa};
    return gemm_core(M, N, K, pack_a_strided, &s, B, rsb, csb, C, ldc, bias);
}

static int gemm_core(int M, int N, int K, pack_a_fn pa, const void *actx, const float *B,
                     long rsb, long csb, float *C, long ldc, const float *bias)
{
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {  /* empty sum: C = bias or 0 */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(long)i * ldc + j] = bias ? bias[j] : 0.0f;
        return 0;
    }
    int avx = use_avx2();
    int NR = avx ? 16 : 8;
    ukernel_fn uk = avx ? ukernel_avx2 : ukernel_sse;
    int nc_max = N < NC ? ((N + NR - 1) / NR) * NR : NC;
    int kc_max = K < KC ? K : KC;
    int mc_max = M < MC ? ((M + MR - 1) / MR) * MR : MC;
    float *Bp = aligned_buf((size_t)nc_max * kc_max);
    float *Ap = aligned_buf((size_t)mc_max * kc_max);
    if (!Bp || !Ap) { free(Bp); free(Ap); return -1; }
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            pack_b(kc, nc, NR, B + (long)pc * rsb + (long)jc * csb, rsb, csb, Bp);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                pa(actx, ic, mc, pc, kc, Ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    const float *bb = bias ? bias + jc + jr : NULL;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
                        uk(kc, Ap + (long)ir * kc, Bp + (long)jr * kc,
                           C + (long)(ic + ir) * ldc + jc + jr, ldc, mr, nr, pc == 0, bb);
                    }
                }
            }
        }
    }
    free(Bp);
    free(Ap);
    return 0;
}

/* Batched GEMM: for b < batch, C_b = A_b * B_b (+ bias), A_b = A + a_off[b] (elements),
 * B_b = B + b_off[b], C_b = C + b*M*ldc.  Offsets let numpy express broadcast batches. */
int qe_sgemm_batched(int batch, const int64_t *a_off, const int64_t *b_off, int M, int N,
                     int K, const float *A, long rsa, long csa, const float *B, long rsb,
                     long csb, float *C, long ldc, const float *bias)
{
    for (int b = 0; b < batch; b++) {
        int rc = qe_sgemm(M, N, K, A + a_off[b], rsa, csa, B + b_off[b], rsb, csb,
                          C + (long)b * M * ldc, ldc, bias);
        if (rc) return rc;
    }
    return 0;
}

/* Depthwise convolution, NHWC input [n,h,w,c_in], filter [fh,fw,1,c_out] with
 * c_out = c_in * mult; output channel o reads input channel o / mult. */
static void conv2d_depthwise(int n, int h, int w, int c_in, int fh, int fw, int c_out,
                             int oh, int ow, int sh, int sw, int pt, int pl, int dh, int dw,
                             const float *x, const float *f, const float *bias, float *y)
{
    int mult = c_out / c_in;
    for (int b = 0; b < n; b++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                float *out = y + (((long)b * oh + oy) * ow + ox) * c_out;
                for (int o = 0; o < c_out; o++) out[o] = bias ? bias[o] : 0.0f;
                for (int ky = 0; ky < fh; ky++) {
                    int iy = oy * sh - pt + ky * dh;
                    if (iy < 0 || iy >= h) continue;
                    for (int kx = 0; kx < fw; kx++) {
                        int ix = ox * sw - pl + kx * dw;
                        if (ix < 0 || ix >= w) continue;
                        const float *in = x + (((long)b * h + iy) * w + ix) * c_in;
                        const float *wt = f + ((long)ky * fw + kx) * c_out;
                        if (mult == 1) {
                            for (int o = 0; o < c_out; o++) out[o] += in[o] * wt[o];
                        } else {
                            for (int c = 0; c < c_in; c++) {
                                float v = in[c];
                                for (int q = 0; q < mult; q++)
                                    out[c * mult + q] += v * wt[c * mult + q];
                            }
                        }
                    }
                }
            }
}

/* Implicit im2col: row i of the A operand is output pixel i of one image, column p is
 * filter tap p / cig (row-major over fh, fw) and channel p % cig of group g; padding reads 0.
 * Packing straight from the image avoids writing and re-reading an im2col buffer. */
struct conv_a {
    const float *x;  /* image b, channel offset g*cig applied */
    int h, w, c_in, cig, fw, ow, sh, sw, pt, pl, dh, dw;
};

static void pack_a_conv(const void *ctx, int i0, int mc, int p0, int kc, float *Ap)
{
    const struct conv_a *c = ctx;
    for (int i = 0; i < mc; i += MR) {
        int mr = mc - i < MR ? mc - i : MR;
        float *panel = Ap + (long)i * kc;
        for (int r = 0; r < MR; r++) {
            if (r >= mr) {  /* zero rows pad the last panel */
                for (int p = 0; p < kc; p++) panel[(long)p * MR + r] = 0.0f;
                continue;
            }
            int pix = i0 + i + r, oy = pix / c->ow, ox = pix % c->ow;
            int p = p0;
            while (p < p0 + kc) {  /* one filter tap (a run of <= cig channels) per step */
                int tap = p / c->cig, ci = p % c->cig;
                int n = c->cig - ci;
                if (n > p0 + kc - p) n = p0 + kc - p;
                int iy = oy * c->sh - c->pt + (tap / c->fw) * c->dh;
                int ix = ox * c->sw - c->pl + (tap % c->fw) * c->dw;
                float *dst = panel + (long)(p - p0) * MR + r;
                if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w) {
                    for (int q = 0; q < n; q++) dst[(long)q * MR] = 0.0f;
                } else {
                    const float *src = c->x + ((long)iy * c->w + ix) * c->c_in + ci;
                    for (int q = 0; q < n; q++) dst[(long)q * MR] = src[q];
                }
                p += n;
            }
        }
    }
}

/* Conv2d, NHWC input [n,h,w,c_in], HWIO filter [fh,fw,c_in/group,c_out], optional bias
 * [c_out], output [n,oh,ow,c_out] (oh/ow computed by the caller).  Returns 0 or -1 (OOM). */
int qe_conv2d(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh, int ow,
              int sh, int sw, int pt, int pl, int dh, int dw, int group, const float *x,
              const float *f, const float *bias, float *y)
{
    int cig = c_in / group, cog = c_out / group;
    if (cig == 1 && group == c_in) {
        conv2d_depthwise(n, h, w, c_in, fh, fw, c_out, oh, ow, sh, sw, pt, pl, dh, dw, x, f,
                         bias, y);
        return 0;
    }
    int K = fh * fw * cig;
    long P = (long)oh * ow;
    int pointwise = fh == 1 && fw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 &&
                    oh == h && ow == w;
    for (int b = 0; b < n; b++) {
        const float *xb = x + (long)b * h * w * c_in;
        float *yb = y + (long)b * P * c_out;
        for (int g = 0; g < group; g++) {
            const float *fg = f + (long)g * cog;  /* B(p, j) = f[p*c_out + g*cog + j] */
            const float *bg = bias ? bias + (long)g * cog : NULL;
            int rc;
            if (pointwise) {  /* 1x1 conv: the input itself is the A matrix */
                rc = qe_sgemm((int)P, cog, K, xb + (long)g * cig, c_in, 1, fg, c_out, 1,
                              yb + (long)g * cog, c_out, bg);
            } else {
                struct conv_a ca = {xb + (long)g * cig, h, w, c_in, cig, fw, ow,
                                    sh, sw, pt, pl, dh, dw};
                rc = gemm_core((int)P, cog, K, pack_a_conv, &ca, fg, c_out, 1,
                               yb + (long)g * cog, c_out, bg);
            }
            if (rc) return rc;
        }
    }
    return 0;
}
