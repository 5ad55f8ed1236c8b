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
int qe_k_chain(const qe_args *a);
/* 1 when QNNEMU_KERNELS_ISA keeps the kernels below AVX-512 (sse, avx2, avxvnni): the families'
 * AVX-512 paths check it once. */
int qe_isa_avx512_capped(void);
int qe_k_dequant(const qe_args *a);
int qe_k_requant(const qe_args *a);
int qe_k_fp16_round(const qe_args *a);
int qe_k_fp16_to_fp32(const qe_args *a);
int qe_k_cast(const qe_args *a);
int qe_k_nan_to_num(const qe_args *a);
int qe_k_dequant64(const qe_args *a);
void qe_fp16_round_inplace(float *y, int64_t n, int even);
int qe_fp16_round_act_inplace(float *y, int64_t n, int even, int act, float lo, float hi);
/* QE_RC_PYTHON, for the engine's Python side */
int qe_rc_python(void);
/* cdef end */

/* Step table columns (int64 each), one row per step. */
enum { QE_STEP_FN, QE_STEP_POFF, QE_STEP_NP, QE_STEP_IOFF, QE_STEP_NI, QE_STEP_DOFF,
       QE_STEP_ND, QE_STEP_COLS };

/* The buffer count of a chain header's step row (csrc/engine.c qe_run). */
#define QE_CHAIN_MARK (-1)

/* Buffer kinds (column 0 of the buffer table; column 1 is the address, offset or index). */
enum { QE_BUF_ABSOLUTE = 0, QE_BUF_ARENA = 1, QE_BUF_IO = 2 };

/* Element type codes of the converter kernels. */
enum { QE_U8 = 0, QE_I8 = 1, QE_U16 = 2, QE_I16 = 3, QE_U32 = 4, QE_I32 = 5, QE_F32 = 6,
       QE_F16 = 7, QE_F64 = 8, QE_I64 = 9, QE_U64 = 10, QE_BOOL = 11 };

#define QE_MAX_STEP_BUFFERS 512

/* A step kernel's return code for values it leaves to the node's Python step (an index the op
 * wraps with a warning or fails on): qe_run stops there, the engine runs the node in Python and
 * goes on with the next node's steps (qnnemu/core/engine, Engine._run). */
#define QE_RC_PYTHON 0x7d

/* (shared by the converter kernels of engine.c and eng_convert.c; not declared to cffi) */
#include <math.h>
#include <string.h>

/* IEEE float32 -> float16 -> float32, round half to even (numpy's astype(float16)); finite
 * inputs of magnitude <= 65504 only (the caller clipped). */
static inline float f16_rne(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = b & 0x80000000u, m = b & 0x7fffffffu;
    if (m >= 0x38800000u) {                       /* a normal float16 */
        uint32_t odd = (m >> 13) & 1u;
        m = (m + 0x0fffu + odd) & 0xffffe000u;
    } else {                                      /* subnormal: multiples of 2**-24 */
        float am;
        memcpy(&am, &m, 4);
        double q = nearbyint((double)am * 16777216.0);
        float r = (float)(q / 16777216.0);
        memcpy(&m, &r, 4);
    }
    m |= sign;
    float out;
    memcpy(&out, &m, 4);
    return out;
}

#endif /* QNNEMU_ENGINE_H */
