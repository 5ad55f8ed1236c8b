/* The intra-op thread pool of qnnemu's C kernels (issue 13): the threads a large GEMM,
 * convolution or batch is split over.  Starting a thread per split cost ~20-60 us per call;
 * the pool's workers are started once and wait on a condition variable between calls.
 *
 * Several application threads may split work at once (graphs executed in parallel): every
 * call queues "help" tickets for its batch in one shared queue.  The items of a batch are
 * claimed one at a time through the batch's own counter, by the caller and by any worker that
 * took one of its tickets, so a caller never waits for a worker to start an item it could run
 * itself: when the other cores are busy (two graphs in two threads on two cores), the caller
 * runs its whole batch and takes its unclaimed tickets back.  Which thread runs an item never
 * changes its result (items are independent).  A worker never blocks on anything but the
 * queue.  A forked child has no workers: its first call starts new ones (pthread_atfork resets
 * the pool's state in the child).
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define POOL_MAX_WORKERS 63
#define POOL_QUEUE 1024
#define POOL_SPIN_US 1000

struct pool_batch {
    void (*fn)(void *);
    char *items;
    size_t stride;
    int n;
    atomic_int next;      /* the next unclaimed item */
    int helpers;          /* workers inside this batch (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static struct pool_batch *g_queue[POOL_QUEUE];   /* tickets: the batch to help */
static atomic_long g_head, g_tail;   /* tickets [g_head, g_tail) are queued (written under g_mu) */
static int g_workers;                /* started (and still alive in this process) */
static int g_sleepers;               /* workers waiting on g_cv (under g_mu) */
/* How long an idle worker keeps watching the queue before it sleeps on g_cv: the ops of one
 * inference follow each other within microseconds, and a worker woken through the condition
 * variable arrives tens of microseconds late -- after the caller has run most of a small op's
 * items alone.  QNNEMU_POOL_SPIN_US overrides it (0: always sleep). */
static long g_spin_ns = -1;

static long spin_ns(void)
{
    if (g_spin_ns < 0) {
        const char *env = getenv("QNNEMU_POOL_SPIN_US");
        long us = env && *env ? strtol(env, NULL, 10) : POOL_SPIN_US;
        g_spin_ns = us < 0 ? 0 : us * 1000;
    }
    return g_spin_ns;
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Waits (without the lock) up to spin_ns() for a ticket to be queued. */
static void spin_for_ticket(void)
{
    long limit = spin_ns();
    if (limit == 0) return;
    long t0 = now_ns();
    while (atomic_load_explicit(&g_head, memory_order_relaxed) ==
           atomic_load_explicit(&g_tail, memory_order_relaxed)) {
        for (int i = 0; i < 16; i++) _mm_pause();
        if (now_ns() - t0 > limit) return;
    }
}
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Runs unclaimed items of ``b`` until none is left. */
static void drain(struct pool_batch *b)
{
    for (;;) {
        int i = atomic_fetch_add(&b->next, 1);
        if (i >= b->n) return;
        b->fn(b->items + (size_t)i * b->stride);
    }
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) {
        spin_for_ticket();
        pthread_mutex_lock(&g_mu);
        while (g_head == g_tail) {
            g_sleepers++;
            pthread_cond_wait(&g_cv, &g_mu);
            g_sleepers--;
        }
        struct pool_batch *b = g_queue[g_head % POOL_QUEUE];
        g_head++;
        /* counted while g_mu is held: the caller takes its tickets back under g_mu, so it
         * either removed this ticket or sees this helper */
        pthread_mutex_lock(&b->mu);
        b->helpers++;
        pthread_mutex_unlock(&b->mu);
        pthread_mutex_unlock(&g_mu);
        drain(b);
        pthread_mutex_lock(&b->mu);
        if (--b->helpers == 0) pthread_cond_signal(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
    return NULL;
}

static void child_after_fork(void)
{
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    g_mu = mu;
    g_cv = cv;
    atomic_store(&g_head, 0);
    atomic_store(&g_tail, 0);
    g_workers = 0;
    g_sleepers = 0;
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

/* Removes the tickets of ``b`` still queued (under g_mu), keeping the others in order. */
static void take_back(struct pool_batch *b)
{
    long w = g_head;
    for (long r = g_head; r < g_tail; r++) {
        struct pool_batch *t = g_queue[r % POOL_QUEUE];
        if (t != b) g_queue[w++ % POOL_QUEUE] = t;
    }
    g_tail = w;
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
    struct pool_batch b = {.fn = fn, .items = items, .stride = stride, .n = n, .helpers = 0};
    atomic_init(&b.next, 0);
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    pthread_mutex_lock(&g_mu);
    grow(n - 1);
    int tickets = 0;
    for (int i = 1; i < n && i <= g_workers && g_tail - g_head < POOL_QUEUE; i++) {
        g_queue[g_tail % POOL_QUEUE] = &b;
        g_tail++;
        tickets++;
    }
    if (tickets && g_sleepers > 0) pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    drain(&b);
    if (tickets) {
        pthread_mutex_lock(&g_mu);
        take_back(&b);
        pthread_mutex_unlock(&g_mu);
        /* every helper still inside the batch finishes the item it claimed */
        pthread_mutex_lock(&b.mu);
        while (b.helpers > 0) pthread_cond_wait(&b.cv, &b.mu);
        pthread_mutex_unlock(&b.mu);
    }
    pthread_mutex_destroy(&b.mu);
    pthread_cond_destroy(&b.cv);
}
