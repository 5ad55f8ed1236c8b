/* The prototypes of qnnemu's C kernels (csrc/kernels.c; what each does: the comment at its top).
 * One declaration for both readers: kernels.c includes this header, and csrc/build_kernels.py
 * hands the declarations between the markers below to cffi as the module's cdef (so keep them
 * plain C declarations: no macros, no preprocessor lines between the markers). */
#ifndef QNNEMU_KERNELS_H
#define QNNEMU_KERNELS_H

#include <stdint.h>

/* cdef begin */
int qe_isa(void);
int qe_gemm_avx512(void);
void qe_set_threads(int n);
int qe_threads(void);
void qe_set_call_threads(int n);
int qe_call_threads(void);
void qe_set_split_costs(double fmas_per_thread, double ns_per_thread);
int qe_sgemm(long M, long N, int K, const float *A, long rsa, long csa, const float *B,
             long rsb, long csb, float *C, long ldc, const float *bias);
int qe_sconv2d(int n, int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh, int sw,
               int pt, int pl, int dh, int dw, int group, long cog, const float *x,
               const float *B, long rsb, long csb, long b_gstride, const float *Bpacked,
               float *C, long ldc, const float *bias);
long qe_packed_b_size(long N, int K);
void qe_pack_b(long N, int K, const float *B, long rsb, long csb, float *Bp);
int qe_sgemm_packed(long M, long N, int K, const float *A, long rsa, long csa,
                    const float *Bpacked, float *C, long ldc, const float *bias);
int qe_sgemm_batched(int batch, const int64_t *a_off, const int64_t *b_off, long M, long N,
                     int K, const float *A, long rsa, long csa, const float *B, long rsb,
                     long csb, float *C, long ldc, const float *bias);
void qe_im2col2d(int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh, int sw,
                 int pt, int pl, int dh, int dw, int c0, int cig, long p0, long p1,
                 const float *x, float *cols);
void qe_col2im2d(int n, int h, int w, int group, int cog, int fh, int fw, int oh, int ow,
                 int sh, int sw, int pt, int pl, int dh, int dw, const float *cols,
                 long gstride, long pstride, float *y);
void qe_depthwise2d(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh, int ow,
                    int sh, int sw, int pt, int pl, int dh, int dw, const float *x,
                    const float *f, const float *bias, float *y);
/* a Relu / ReluMinMax / SiLU folded into a product or convolution: act is one of 0 (none),
 * 1 (numpy.maximum(x, 0)), 2 (numpy.clip(x, lo, hi)), 3 (x * sigmoid(x)), 4 (sigmoid(x) * x)
 * -- QE_ACT_* in kernels.c */
int qe_sgemm_act(long M, long N, int K, const float *A, long rsa, long csa, const float *B,
                 long rsb, long csb, float *C, long ldc, const float *bias, int act, float lo,
                 float hi);
int qe_sgemm_packed_act(long M, long N, int K, const float *A, long rsa, long csa,
                        const float *Bpacked, float *C, long ldc, const float *bias, int act,
                        float lo, float hi);
int qe_sconv2d_act(int n, int h, int w, int c_in, int fh, int fw, int oh, int ow, int sh,
                   int sw, int pt, int pl, int dh, int dw, int group, long cog, const float *x,
                   const float *B, long rsb, long csb, long b_gstride, const float *Bpacked,
                   float *C, long ldc, const float *bias, int act, float lo, float hi);
void qe_depthwise2d_act(int n, int h, int w, int c_in, int fh, int fw, int c_out, int oh,
                        int ow, int sh, int sw, int pt, int pl, int dh, int dw, const float *x,
                        const float *f, const float *bias, float *y, int act, float lo, float hi);
void qe_act_apply(float *y, long n, int mode, float lo, float hi);
int qe_pool2d(int kind, int n, int h, int w, int c, int fh, int fw, int oh, int ow, int sh,
              int sw, int pt, int pb, int pl, int pr, int count_pad, const float *x, float *y);
/* cdef end */

#endif /* QNNEMU_KERNELS_H */
