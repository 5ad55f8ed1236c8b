/* The C execution engine of a finalized graph (qnnemu/core/engine; issue 13): the program
 * runner and the converter kernels every lowering shares.  Kernel families add their step
 * kernels in csrc/eng_<family>.c with prototypes in csrc/eng_<family>.h; csrc/build_kernels.py
 * compiles and declares them all.  What a program is: the docstring of qnnemu/core/engine. */
#ifndef QNNEMU_ENGINE_H
#define QNNEMU_ENGINE_H

#include <stdint.h>

/* cdef begin */
typedef struct qe_args {
    void *const *p;
    const int64_t *i;
    const double *d;
    int32_t np, ni, nd;
} qe_args;

typedef int (*qe_kernel_fn)(const qe_args *a);

long qe_run(const int64_t *steps, long first, long last, const int64_t *pbuf,
            const int64_t *ints, const double *dbls, const int64_t *bufs, char *arena,
            void *const *io);

int qe_k_copy(const qe_args *a);
int qe_k_nop(const qe_args *a);
int qe_k_dequant(const qe_args *a);
int qe_k_requant(const qe_args *a);
int qe_k_fp16_round(const qe_args *a);
int qe_k_fp16_to_fp32(const qe_args *a);
int qe_k_cast(const qe_args *a);
int qe_k_nan_to_num(const qe_args *a);
int qe_k_dequant64(const qe_args *a);
/* cdef end */

/* Step table columns (int64 each), one row per step. */
enum { QE_STEP_FN, QE_STEP_POFF, QE_STEP_NP, QE_STEP_IOFF, QE_STEP_NI, QE_STEP_DOFF,
       QE_STEP_ND, QE_STEP_COLS };

/* Buffer kinds (column 0 of the buffer table; column 1 is the address, offset or index). */
enum { QE_BUF_ABSOLUTE = 0, QE_BUF_ARENA = 1, QE_BUF_IO = 2 };

/* Element type codes of the converter kernels. */
enum { QE_U8 = 0, QE_I8 = 1, QE_U16 = 2, QE_I16 = 3, QE_U32 = 4, QE_I32 = 5, QE_F32 = 6,
       QE_F16 = 7, QE_F64 = 8, QE_I64 = 9, QE_U64 = 10, QE_BOOL = 11 };

#define QE_MAX_STEP_BUFFERS 512

#endif /* QNNEMU_ENGINE_H */
