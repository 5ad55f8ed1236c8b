/* Finalize-time helpers of the C execution engine (issue 13 item 4: graphFinalize of a
 * ResNet-50-size quantized graph below the vendor's session creation).  Not step kernels: the
 * Python prepare code calls them once per static tensor (qnnemu/spec/quant.py). */
#ifndef QNNEMU_ENG_PREPARE_H
#define QNNEMU_ENG_PREPARE_H

#include <stdint.h>

/* cdef begin */
int qe_int8_requant(const double *w, int64_t rows, int64_t channels, const double *mult,
                    const uint8_t *over, double *out);
int qe_int_requant_table(int64_t n, const double *xw, const double *cst, const double *inv,
                         const double *scale, const uint8_t *dead, const double *zw,
                         const double *fz, const int64_t *clmax, int64_t chmax, int64_t wide,
                         int64_t lo, int64_t hi, int64_t dead_code, int32_t *tab);
int qe_weight_codes(const void *codes, int64_t code_type, int64_t rows, int64_t channels,
                    const int32_t *off, const uint32_t *recip, void *out, int64_t out_bytes,
                    int64_t *wsum, int64_t *wabs);
int qe_code_minmax(const void *codes, int64_t code_type, int64_t rows, int64_t channels, int32_t *mn,
                   int32_t *mx);
/* cdef end */

#endif /* QNNEMU_ENG_PREPARE_H */
