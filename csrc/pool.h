/* The intra-op thread pool of qnnemu's C kernels (csrc/pool.c; issue 13). */
#ifndef QNNEMU_POOL_H
#define QNNEMU_POOL_H

#include <stddef.h>

/* Runs fn(base + i * stride) for i in [0, n), each item once, on the calling thread and the
 * pool's workers that come to help (started on first use, up to 63, kept waiting between calls;
 * a forked child starts its own).  Returns when every item has finished.  Items must not call
 * qe_pool_run. */
void qe_pool_run(void (*fn)(void *), void *base, size_t stride, int n);

#endif /* QNNEMU_POOL_H */
