/* The exact integer pipeline of quantized Conv2d / DepthWiseConv2d / FullyConnected / MatMul and
 * ElementWiseAdd (csrc/eng_qgemm.c; issue 13's C engine, kernel family "qgemm").  What each
 * function computes: the comment at the top of eng_qgemm.c; the geometry array: QG_* below. */
#ifndef QNNEMU_ENG_QGEMM_H
#define QNNEMU_ENG_QGEMM_H

#include <stdint.h>

#include "engine.h"

/* cdef begin */
int qe_qgemm_isa_level(void);
int qe_qgemm_isa(char *buf, int n);
long qe_qgemm_packed_size(long K, long N);
int qe_qgemm_pack(long K, long N, const int8_t *B, long rsb, long csb, int8_t *Bp,
                  int32_t *wsum);
int qe_qacc(const int64_t *geo, const void *x, const int8_t *Bp, const int32_t *wsum,
            double x_offset, double *acc);
int qe_qacc_dw(const int64_t *geo, const void *x, const double *w, double x_offset,
               double *acc);
int qe_qacc_dw_i32(const int64_t *geo, const void *x, const int32_t *w, const double *xw,
                   double *acc);
int qe_k_qgemm(const qe_args *a);
int qe_k_qdw(const qe_args *a);
int qe_k_qdw_i32(const qe_args *a);
int qe_k_qadd(const qe_args *a);
int qe_k_qmatmul_dyn(const qe_args *a);
/* cdef end */

/* Layout of the geometry array ``geo`` (int64) of qe_qacc / qe_k_qgemm / qe_qacc_dw / qe_k_qdw:
 * rows of the GEMM are either rows of a matrix (kind 0: row m at x + m * lda elements) or the
 * receptive fields of a 2-D NHWC convolution's output pixels (kind 1, im2col order: taps row
 * major, then the group's input channels).  Output row stride: ldo elements. */
enum {
    QG_KIND, QG_TYPE, QG_M, QG_K, QG_N, QG_GROUP, QG_LDA,
    QG_BATCH, QG_H, QG_W, QG_CIN, QG_FH, QG_FW, QG_OH, QG_OW, QG_SH, QG_SW, QG_PT, QG_PL,
    QG_DH, QG_DW, QG_PAD_CODE, QG_LDO, QG_LEN
};

#endif /* QNNEMU_ENG_QGEMM_H */
