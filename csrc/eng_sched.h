/* The shared HTP's execute scheduler (QNN "HTP Yielding and Pre-Emption"; issue 14 item 2): who of
 * the executes in flight may run on an emulated device, and the yield points of the running ones.
 * One instance per process, in qnnemu._kernels, used by the Python execute path
 * (qnnemu/core/scheduling.py) and by graphExecute's C fast path (csrc/fast_execute.h), so both
 * obey the same rules. */
#ifndef QNNEMU_ENG_SCHED_H
#define QNNEMU_ENG_SCHED_H

#include <stdint.h>

/* cdef begin */
typedef struct qe_sched_exec {
    int32_t device;          /* emulated device slot, 0 .. QE_SCHED_DEVICES - 1 */
    int32_t os_priority;     /* Hexagon OS priority of the graph: lower runs first (0xBB HIGH .. 0xC5 LOW) */
    int32_t yields;          /* times this execute yielded to a higher-priority one */
    int32_t waited_first;    /* 1 when it waited before it could start */
    int64_t wait_ns;         /* waiting before the start */
    int64_t preempt_ns;      /* waiting after its yields (pre-emption) */
    int64_t start_ns, end_ns;
    uint64_t ticket;
    int32_t state;           /* internal */
    int32_t yield_req;       /* internal: set by a higher-priority arrival */
    struct qe_sched_exec *next;   /* internal */
    int64_t yield_start_ns[8];    /* the first 8 pre-emptions: when it yielded ... */
    int64_t yield_end_ns[8];      /* ... and when it resumed (CLOCK_MONOTONIC) */
} qe_sched_exec;

int qe_sched_begin(qe_sched_exec *e, int32_t device, int32_t os_priority);
int qe_sched_end(qe_sched_exec *e);
int qe_sched_point(void);
void qe_sched_set_strict(int strict);
int qe_sched_strict(void);
long qe_sched_total_yields(void);
/* cdef end */

#define QE_SCHED_DEVICES 64

#endif /* QNNEMU_ENG_SCHED_H */
