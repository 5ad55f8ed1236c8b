/* Data movement, pooling and reduction step kernels of the C execution engine (issue 13; the
 * lowering is qnnemu/core/engine/lower_movement.py). */
#ifndef QNNEMU_ENG_MOVEMENT_H
#define QNNEMU_ENG_MOVEMENT_H

#include <stdint.h>
#include "engine.h"

/* cdef begin */
int qe_k_move(const qe_args *a);
int qe_k_fill(const qe_args *a);
int qe_k_gather_rows(const qe_args *a);
int qe_k_gather_dyn(const qe_args *a);
int qe_k_gather_nd(const qe_args *a);
int qe_k_scatter_nd(const qe_args *a);
int qe_k_elements(const qe_args *a);
int qe_k_pool2d(const qe_args *a);
int qe_k_maxpool_f32(const qe_args *a);
int qe_k_avgpool_global_f32(const qe_args *a);
int qe_k_reduce_f32(const qe_args *a);
int qe_k_reduce_minmax(const qe_args *a);
int qe_reduce_f32(int kind, const float *x, float *y, double *acc, int64_t outer, int64_t red,
                  int64_t inner);
int qe_k_resize_taps(const qe_args *a);
int qe_resize_taps(const float *x, float *y, int64_t outer, int64_t n_in, int64_t inner,
                   int64_t n_out, int64_t k, const int64_t *idx, const float *w);
int qe_k_move_lut(const qe_args *a);
int qe_k_maxpool_codes(const qe_args *a);
int qe_movement_isa(char *buf, int n);
/* cdef end */

#endif /* QNNEMU_ENG_MOVEMENT_H */
