/* Step kernels of the C execution engine (issue 13) for ops that had no C lowering: Cast,
 * ElementWiseSelect, the BOOL_8 logic ops, Argmax / Argmin, CumulativeSum and TopK
 * (the lowering is qnnemu/core/engine/lower_misc.py; docs/engine-misc.md). */
#ifndef QNNEMU_ENG_MISC_H
#define QNNEMU_ENG_MISC_H

#include <stdint.h>
#include "engine.h"

/* cdef begin */
int qe_k_misc_cast(const qe_args *a);
int qe_k_misc_logic(const qe_args *a);
int qe_k_misc_select(const qe_args *a);
int qe_k_misc_arg(const qe_args *a);
int qe_k_misc_cumsum(const qe_args *a);
int qe_k_misc_topk(const qe_args *a);
/* cdef end */

#endif /* QNNEMU_ENG_MISC_H */
