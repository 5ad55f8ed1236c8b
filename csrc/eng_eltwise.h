/* Element-wise kernels of the C engine (issue 13): QNN op definitions ElementWise* binary and
 * unary ops, the activations (Relu ... Gelu, ElementWiseNeuron), Prelu, Softmax / LogSoftmax,
 * LayerNorm, RmsNorm, InstanceNorm, GroupNorm.
 * Implemented in csrc/eng_eltwise.c; lowered by qnnemu/core/engine/lower_eltwise.py.  The
 * qe_ew_* functions are also what the ops' fast paths call (qnnemu/ops/_fast_eltwise.py), so
 * both paths share one implementation of the transcendental functions. */
#ifndef QNNEMU_ENG_ELTWISE_H
#define QNNEMU_ENG_ELTWISE_H

#include <stdint.h>

/* cdef begin */
int qe_ew_unary_f32(int op, const float *x, float *y, int64_t n, const double *prm);
int qe_ew_softmax_f32(const float *x, float *y, double *scratch, int64_t outer, int64_t len,
                      int64_t inner, double beta, int log_form);
int qe_ew_norm_f32(const float *x, float *y, const double *gamma, const double *beta, int64_t nb,
                   int64_t ns, int64_t ng, int64_t ncg, double eps, int center, int scale);
int qe_ew_binary_f32(int op, const float *a, const float *b, void *y, int rank, const int64_t *dims,
                     const int64_t *sa, const int64_t *sb);
int qe_k_binary_f32(const qe_args *a);
int qe_k_norm_f32(const qe_args *a);
int qe_k_binary_i32(const qe_args *a);
int qe_k_unary_i32(const qe_args *a);
int qe_eltwise_isa(char *buf, int n);
int qe_k_unary_f32(const qe_args *a);
int qe_k_softmax_f32(const qe_args *a);
int qe_k_lut(const qe_args *a);
int qe_k_qbinary(const qe_args *a);
int qe_k_iadd(const qe_args *a);
int qe_k_silu_f32(const qe_args *a);
long qe_ew_set_split_ns(long ns);
void qe_ew_silu_inplace(float *y, int64_t n, int x_first);
int qe_k_sigmoid_f16(const qe_args *a);
int qe_k_silu_f16(const qe_args *a);
void qe_ew_silu_f16_inplace(float *y, int64_t n, int x_first, int even);
/* cdef end */

/* Unary operation codes (qe_ew_unary_f32's op; mirrored in qnnemu/ops/_fast_eltwise.py). */
enum {
    QE_UN_NEG = 0, QE_UN_ABS, QE_UN_SQRT, QE_UN_FLOOR, QE_UN_CEIL, QE_UN_RINT, QE_UN_RSQRT,
    QE_UN_RECIP, QE_UN_SIGN, QE_UN_RELU, QE_UN_CLIP, QE_UN_HARD_SIGMOID, QE_UN_HARD_SWISH,
    QE_UN_THRESHOLD, QE_UN_EXP, QE_UN_LOG, QE_UN_SIGMOID, QE_UN_TANH, QE_UN_ELU, QE_UN_GELU,
    QE_UN_SOFTPLUS, QE_UN_ERF, QE_UN_HTP_RECIP, QE_UN_SIN, QE_UN_COS, QE_UN_ASIN,
    QE_UN_ATAN, QE_UN_SIGMOID_EXACT, QE_UN_COUNT
};

/* Binary operation codes (qe_k_binary_f32's op). */
enum {
    QE_BIN_ADD = 0, QE_BIN_SUB, QE_BIN_MUL, QE_BIN_DIV, QE_BIN_MAX, QE_BIN_MIN, QE_BIN_SQDIFF,
    QE_BIN_FLOORDIV, QE_BIN_FMOD, QE_BIN_MOD, QE_BIN_PRELU, QE_BIN_POW,
    QE_BIN_EQ, QE_BIN_NE, QE_BIN_GT, QE_BIN_GE, QE_BIN_LT, QE_BIN_LE, QE_BIN_COUNT
};
#define QE_BIN_FIRST_COMPARE QE_BIN_EQ

#endif /* QNNEMU_ENG_ELTWISE_H */
