/* The C engine's float GEMM family (csrc/eng_gemm.c): FullyConnected, MatMul and the float
 * convolutions, each step the same calls of csrc/kernels.c's GEMM that qnnemu/ops/_fast.py makes
 * for the Python plan (qnnemu/core/engine/lower_gemm.py lowers the steps). */
#ifndef QNNEMU_ENG_GEMM_H
#define QNNEMU_ENG_GEMM_H

#include "engine.h"

/* cdef begin */
int qe_k_gemm(const qe_args *a);
int qe_k_gemm_batched(const qe_args *a);
int qe_k_conv2d(const qe_args *a);
int qe_k_depthwise2d(const qe_args *a);
int qe_k_tconv2d(const qe_args *a);
int qe_k_act(const qe_args *a);
/* cdef end */

#endif /* QNNEMU_ENG_GEMM_H */
