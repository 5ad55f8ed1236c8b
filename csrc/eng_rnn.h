/* The C engine's recurrent family (csrc/eng_rnn.c): Lstm and Gru (QNN op definitions "Lstm",
 * "Gru") on float32 values.  The ops' fast paths (qnnemu/ops/_fast_rnn.py) and the engine's
 * steps (qnnemu/core/engine/lower_rnn.py) run the same functions. */
#ifndef QNNEMU_ENG_RNN_H
#define QNNEMU_ENG_RNN_H

#include <stdint.h>

#include "engine.h"

/* cdef begin */
long qe_lstm_scratch_floats(const int64_t *dims);
int qe_lstm_f32(const float *const *w, const int64_t *dims, const double *clips, float *out_seq,
                float *out_c, float *out_h, float *scratch);
int qe_k_lstm(const qe_args *a);
long qe_gru_scratch_doubles(const int64_t *dims);
int qe_gru_f32(const float *const *w, const int64_t *dims, float *out_seq, float *out_h,
               double *scratch);
int qe_k_gru(const qe_args *a);
/* cdef end */

#endif /* QNNEMU_ENG_RNN_H */
