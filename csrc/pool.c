/* The intra-op thread pool of qnnemu's C kernels (issue 13): the threads a large GEMM,
 * convolution or batch is split over.  Starting a thread per split cost ~20-60 us per call;
 * the pool's workers are started once and wait on a condition variable between calls.
 *
 * Several application threads may split work at once (graphs executed in parallel): every
 * call queues its items in one shared queue and waits for its own batch only.  A worker never
 * blocks on anything but the queue.  A forked child has no workers: its first call starts
 * new ones (pthread_atfork resets the pool's state in the child).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "pool.h"

#define POOL_MAX_WORKERS 63
#define POOL_QUEUE 1024

struct pool_batch {
    atomic_int pending;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

struct pool_item {
    void (*fn)(void *);
    void *arg;
    struct pool_batch *batch;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static struct pool_item g_queue[POOL_QUEUE];
static long g_head, g_tail;          /* items [g_head, g_tail) are queued */
static int g_workers;                /* started (and still alive in this process) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void finish(struct pool_batch *b)
{
    if (atomic_fetch_sub(&b->pending, 1) == 1) {
        pthread_mutex_lock(&b->mu);
        pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&g_mu);
        while (g_head == g_tail) pthread_cond_wait(&g_cv, &g_mu);
        struct pool_item it = g_queue[g_head % POOL_QUEUE];
        g_head++;
        pthread_mutex_unlock(&g_mu);
        it.fn(it.arg);
        finish(it.batch);
    }
    return NULL;
}

static void child_after_fork(void)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    g_mu = mu;
    g_cv = cv;
    g_head = g_tail = 0;
    g_workers = 0;
}

static void install_fork_handler(void) { pthread_atfork(NULL, NULL, child_after_fork); }

/* Starts workers until there are ``want`` (under g_mu). */
static void grow(int want)
{
    if (want > POOL_MAX_WORKERS) want = POOL_MAX_WORKERS;
    while (g_workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&t, &attr, worker, NULL) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) break;
        g_workers++;
    }
}

/* The process the workers belong to: besides the atfork handler, a child notices it has none
 * (a fork while another thread held the pool's lock must not leave the child waiting). */
static atomic_int g_pid;

void qe_pool_run(void (*fn)(void *), void *base, size_t stride, int n)
{
    char *items = base;
    if (n <= 1) {
        if (n == 1) fn(items);
        return;
    }
    pthread_once(&g_once, install_fork_handler);
    if (atomic_load(&g_pid) != (int)getpid()) {
        if (atomic_load(&g_pid) != 0) child_after_fork();
        atomic_store(&g_pid, (int)getpid());
    }
    struct pool_batch b;
    atomic_init(&b.pending, 0);
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    int queued = 0;
    pthread_mutex_lock(&g_mu);
    grow(n - 1);
    for (int i = 1; i < n && g_workers > 0 && g_tail - g_head < POOL_QUEUE; i++) {
        g_queue[g_tail % POOL_QUEUE] = (struct pool_item){fn, items + (size_t)i * stride, &b};
        g_tail++;
        queued = i;
    }
    atomic_store(&b.pending, queued);
    if (queued) pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    for (int i = queued + 1; i < n; i++) fn(items + (size_t)i * stride);   /* no room: here */
    fn(items);
    if (atomic_load(&b.pending) > 0) {
        pthread_mutex_lock(&b.mu);
        while (atomic_load(&b.pending) > 0) pthread_cond_wait(&b.cv, &b.mu);
        pthread_mutex_unlock(&b.mu);
    }
    pthread_mutex_destroy(&b.mu);
    pthread_cond_destroy(&b.cv);
}
