/* Step kernels of the C engine's float GEMM family (issue 13): FullyConnected, MatMul, Conv2d,
 * DepthWiseConv2d, TransposeConv2d on float32 values (QNN op definitions of those ops;
 * layouts: qnnemu/ops/conv.py, qnnemu/ops/matmul.py).
 *
 * Bit identity with the Python plan holds by construction: each kernel makes the same calls of
 * csrc/kernels.c (qe_sgemm / qe_sgemm_packed / qe_sgemm_batched, qe_sconv2d, qe_col2im2d,
 * qe_depthwise2d) with the same M, N, K, the same thread limit and the same bias handling as
 * qnnemu/ops/_fast.py and qnnemu/ops/conv.py's fast path.  What a GEMM result depends on: the
 * operand values, K (its K blocks) and the micro-kernel family picked at run time -- not the
 * thread split or the tiles (every element summed over the same K blocks in the same order,
 * stored the same way), not the operand strides, packing or im2col (they move values only).
 * Products below ``small`` multiply-adds run on the calling thread, as _fast._OneThread does.
 *
 * A float Relu / ReluMinMax folded into the step (qnnemu/core/plan.py, "relu folded into
 * convolutions": plan.ActivationEpilogue) comes as an optional last integer parameter ``act``
 * (QE_ACT_*: 1 relu, 2 clip) with the clip bounds as the float parameters: the GEMM applies it
 * to each finished tile, the depthwise kernel to each few output pixels; max / min are exact,
 * so the bytes are those of the op followed by the activation's step.
 */
#include <stdint.h>
#include <string.h>

#include "eng_gemm.h"
#include "engine.h"
#include "kernels.h"

#define QE_ERR_NOMEM 2

/* The folded activation of a step: integer parameter ``at`` (absent: none), bounds d[0], d[1]. */
struct act { int mode; float lo, hi; };
static const struct act NO_ACT = {0, 0.0f, 0.0f};

static struct act act_of(const qe_args *a, int at)
{
    struct act r = {0, 0.0f, 0.0f};
    if (at >= 0 && a->ni > at && a->i[at]) {
        r.mode = (int)a->i[at];
        if (a->nd >= 2) {
            r.lo = (float)a->d[0];
            r.hi = (float)a->d[1];
        }
    }
    return r;
}

/* A folded activation in place, after the producer's float16 rounding:
 * p: y; i: n, act; d: lo, hi. */
int qe_k_act(const qe_args *a)
{
    struct act act = act_of(a, 1);
    qe_act_apply(a->p[0], a->i[0], act.mode, act.lo, act.hi);
    return 0;
}

/* Runs the GEMM limited to the calling thread when ``one`` (restoring the caller's limit). */
static int gemm_call(int one, long M, long N, int K, const float *A, long rsa, long csa,
                     const float *B, long rsb, long csb, int packed, float *C, long ldc,
                     const float *bias, struct act act)
{
    int prev = qe_call_threads();
    if (one) qe_set_call_threads(1);
    int rc = packed ? qe_sgemm_packed_act(M, N, K, A, rsa, csa, B, C, ldc, bias, act.mode,
                                          act.lo, act.hi)
                    : qe_sgemm_act(M, N, K, A, rsa, csa, B, rsb, csb, C, ldc, bias, act.mode,
                                   act.lo, act.hi);
    if (one) qe_set_call_threads(prev);
    return rc ? QE_ERR_NOMEM : 0;
}

/* C[M,N] = A[M,K] B[K,N] (+ bias): _fast.c_gemm.
 * p: A, B (plain or packed by qe_pack_b), C[, bias]; i: M, N, K, rsa, csa, rsb, csb, packed,
 * has_bias, small (the product runs on the calling thread)[, act]. */
int qe_k_gemm(const qe_args *a)
{
    const int64_t *i = a->i;
    return gemm_call((int)i[9], i[0], i[1], (int)i[2], a->p[0], i[3], i[4], a->p[1], i[5], i[6],
                     (int)i[7], a->p[2], i[1], i[8] ? a->p[3] : NULL, act_of(a, 10));
}

/* numpy.matmul with broadcast batches: _fast._c_matmul (qe_sgemm_batched).
 * p: A, B, C, a_off, b_off (int64 element offsets per batch item);
 * i: batch, M, N, K, rsa, csa, rsb, csb, small[, act] (applied after the products). */
int qe_k_gemm_batched(const qe_args *a)
{
    const int64_t *i = a->i;
    int prev = qe_call_threads();
    if (i[8]) qe_set_call_threads(1);
    int rc = qe_sgemm_batched((int)i[0], a->p[3], a->p[4], i[1], i[2], (int)i[3], a->p[0], i[4],
                              i[5], a->p[1], i[6], i[7], a->p[2], i[2], NULL);
    if (i[8]) qe_set_call_threads(prev);
    struct act act = act_of(a, 9);
    if (!rc && act.mode)
        qe_act_apply(a->p[2], i[0] * i[1] * i[2], act.mode, act.lo, act.hi);
    return rc ? QE_ERR_NOMEM : 0;
}

static int small_product(double fmas, int64_t limit) { return fmas < (double)limit; }

/* A convolution through im2col + GEMM: conv.conv_fast for 2-D geometry.
 * p: x [n,h,w,c_in], W, y [n,oh,ow,c_out], scratch[, bias];
 * i: n, h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, c_out, group, mode, packed,
 *    has_bias, small_limit (_fast.CONV_SINGLE_THREAD_MAX_FMAS), unused, w_group_stride, w_rs
 *    [, act].
 * mode 0, 1x1 without padding (group 1): x itself (strided: its pixels gathered into scratch)
 *   is the left operand, bias in the GEMM;
 * modes 1 (group 1) and 2 (groups): qe_sconv2d, the implicit GEMM of _fast.conv2d (no im2col
 *   matrix; scratch and chunk_rows unused), group g's operand B_g = W + g * w_group_stride with
 *   row stride w_rs (W packed by qe_pack_b: group 1 only), bias in the GEMM. */
int qe_k_conv2d(const qe_args *a)
{
    const int64_t *i = a->i;
    int n = (int)i[0], h = (int)i[1], w = (int)i[2], c_in = (int)i[3], fh = (int)i[4],
        fw = (int)i[5], oh = (int)i[6], ow = (int)i[7], sh = (int)i[8], sw = (int)i[9],
        pt = (int)i[10], pl = (int)i[11], dh = (int)i[12], dw = (int)i[13];
    long c_out = i[14];
    int group = (int)i[15], mode = (int)i[16], packed = (int)i[17], has_bias = (int)i[18];
    int64_t small = i[19];
    long chunk = i[20], wgs = i[21], wrs = i[22];
    const float *x = a->p[0], *W = a->p[1];
    float *y = a->p[2], *scratch = a->p[3];
    const float *bias = has_bias ? a->p[4] : NULL;
    long P = (long)n * oh * ow;
    struct act act = act_of(a, 23);
    if (mode == 0) {
        const float *A = x;
        if (sh != 1 || sw != 1) {
            float *d = scratch;
            for (int b = 0; b < n; b++)
                for (int r = 0; r < oh; r++)
                    for (int c = 0; c < ow; c++) {
                        memcpy(d, x + (((long)b * h + (long)r * sh) * w + (long)c * sw) * c_in,
                               sizeof(float) * c_in);
                        d += c_in;
                    }
            A = scratch;
        }
        return gemm_call(small_product((double)P * c_in * c_out, small), P, c_out, c_in, A,
                         c_in, 1, W, c_out, 1, packed, y, c_out, bias, act);
    }
    /* modes 1 and 2: the implicit GEMM of _fast.conv2d (bias in the GEMM) */
    int cig = c_in / group;
    long K = (long)fh * fw * cig, cog = c_out / group;
    int prev = qe_call_threads();
    int one = small_product((double)P * K * c_out, small);
    if (one) qe_set_call_threads(1);
    int rc = qe_sconv2d_act(n, h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, group, cog,
                            x, packed ? NULL : W, wrs, 1, wgs, packed ? W : NULL, y, c_out, bias,
                            act.mode, act.lo, act.hi);
    if (one) qe_set_call_threads(prev);
    (void)chunk;
    (void)scratch;
    return rc ? QE_ERR_NOMEM : 0;
}

/* Depthwise convolution: _fast.depthwise2d.  p: x, f [fh,fw,1,c_out], y[, bias];
 * i: n, h, w, c_in, fh, fw, c_out, oh, ow, sh, sw, pt, pl, dh, dw, has_bias[, act]. */
int qe_k_depthwise2d(const qe_args *a)
{
    const int64_t *i = a->i;
    struct act act = act_of(a, 16);
    qe_depthwise2d_act((int)i[0], (int)i[1], (int)i[2], (int)i[3], (int)i[4], (int)i[5],
                       (int)i[6], (int)i[7], (int)i[8], (int)i[9], (int)i[10], (int)i[11],
                       (int)i[12], (int)i[13], (int)i[14], a->p[0], a->p[1],
                       i[15] ? a->p[3] : NULL, a->p[2], act.mode, act.lo, act.hi);
    return 0;
}

/* Transposed convolution: conv.transpose_conv_fast (2-D).  One GEMM of the
 * input pixels by W ([c_in, T*c_out], group 1; [group, cig, T*cog] otherwise) into the per-tap
 * products (scratch), then the output set to the bias (or 0) and the products scattered in.
 * p: x [n,h,w,c_in], W, y [n,oh,ow,c_out], scratch[, bias];
 * i: n, h, w, c_in, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, c_out, group, packed, has_bias,
 *    small_limit[, act] (applied after the scatter). */
int qe_k_tconv2d(const qe_args *a)
{
    const int64_t *i = a->i;
    int n = (int)i[0], h = (int)i[1], w = (int)i[2], c_in = (int)i[3], fh = (int)i[4],
        fw = (int)i[5], oh = (int)i[6], ow = (int)i[7], sh = (int)i[8], sw = (int)i[9],
        pt = (int)i[10], pl = (int)i[11], dh = (int)i[12], dw = (int)i[13];
    long c_out = i[14];
    int group = (int)i[15], packed = (int)i[16], has_bias = (int)i[17];
    int64_t small = i[18];
    const float *x = a->p[0], *W = a->p[1];
    float *y = a->p[2], *cols = a->p[3];
    const float *bias = has_bias ? a->p[4] : NULL;
    long nP = (long)n * h * w, T = (long)fh * fw, cog = c_out / group;
    int cig = c_in / group;
    long gstride = 0;
    if (group == 1) {
        int rc = gemm_call(small_product((double)nP * c_in * T * c_out, small), nP, T * c_out,
                           c_in, x, c_in, 1, W, T * c_out, 1, packed, cols, T * c_out, NULL,
                           NO_ACT);
        if (rc) return rc;
    } else {
        gstride = nP * T * cog;
        int one = small_product((double)group * nP * cig * T * cog, small);
        for (int g = 0; g < group; g++) {
            int rc = gemm_call(one, nP, T * cog, cig, x + (long)g * cig, c_in, 1,
                               W + (long)g * cig * T * cog, T * cog, 1, 0, cols + g * gstride,
                               T * cog, NULL, NO_ACT);
            if (rc) return rc;
        }
    }
    long P = (long)n * oh * ow;
    for (long p = 0; p < P; p++) {
        float *r = y + p * c_out;
        if (bias)
            memcpy(r, bias, sizeof(float) * c_out);
        else
            memset(r, 0, sizeof(float) * c_out);
    }
    qe_col2im2d(n, h, w, group, (int)cog, fh, fw, oh, ow, sh, sw, pt, pl, dh, dw, cols, gstride,
                T * cog, y);
    struct act act = act_of(a, 19);
    if (act.mode) qe_act_apply(y, P * c_out, act.mode, act.lo, act.hi);
    return 0;
}
