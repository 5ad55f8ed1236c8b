/* Finalize-time helpers of the C execution engine (issue 13 item 4: graphFinalize of a
 * ResNet-50-size quantized graph below the vendor's session creation).  Not step kernels: the
 * Python prepare code calls them once per static tensor (qnnemu/spec/quant.py). */
#ifndef QNNEMU_ENG_PREPARE_H
#define QNNEMU_ENG_PREPARE_H

#include <stdint.h>

/* cdef begin */
int qe_int8_requant(const double *w, int64_t rows, int64_t channels, const double *mult,
                    const uint8_t *over, double *out);
/* cdef end */

#endif /* QNNEMU_ENG_PREPARE_H */
