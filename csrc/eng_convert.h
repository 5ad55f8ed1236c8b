/* Quantize of float32 input to 8/16-bit codes in one vectorised pass (csrc/eng_convert.c; issue
 * 13's C engine; the lowering is qnnemu/core/engine/lower_convert.py). */
#ifndef QNNEMU_ENG_CONVERT_H
#define QNNEMU_ENG_CONVERT_H

#include <stdint.h>
#include "engine.h"

/* cdef begin */
int qe_k_quantize_f32(const qe_args *a);
/* cdef end */

#endif /* QNNEMU_ENG_CONVERT_H */
