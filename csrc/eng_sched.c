/* The shared HTP's execute scheduler (csrc/eng_sched.h; QNN "HTP Yielding and Pre-Emption" and the
 * QNN HTP backend documentation, "Yielding and Pre-Emption", "Graph Priority").
 *
 * Per emulated device: the executes running and those waiting.  An execute may start when no
 * execute of ANOTHER priority runs and none of a HIGHER priority waits; a waiting execute of
 * higher priority asks every running one of lower priority to yield, which it does at its next
 * yield point -- a step boundary of its program (qe_run calls qe_sched_point between steps; the
 * Python path between its Python steps) -- and waits there until it may run again.  Equal or
 * lower priority waits for the running one to finish.  Executes of the SAME priority run side by
 * side on the host's cores unless strict mode (QNNEMU_HTP_STRICT=1: qe_sched_set_strict) makes
 * them take turns as two QNN graphs do on one device; the modelled HTP timeline serializes them
 * either way.
 *
 * The running execute of a thread is thread-local, so the yield point needs no argument and costs
 * one load when nothing is asked.  A forked child starts with empty devices (pthread_atfork). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eng_sched.h"

enum { S_IDLE = 0, S_WAITING = 1, S_RUNNING = 2, S_YIELDED = 3 };

typedef struct {
    qe_sched_exec *head;   /* every execute in flight on the device (running or waiting) */
    uint64_t tickets;
} device_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static device_t g_dev[QE_SCHED_DEVICES];
static _Thread_local qe_sched_exec *t_current;
static atomic_int g_strict;
static atomic_llong g_total_yields;
static pid_t g_pid;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A forked child: the parent's threads are gone, so are their executes; the lock may have been
 * held by one of them.  pthread_atfork's child handler runs in the child's only thread before
 * anything else can use the scheduler.  (Comparing getpid() at each call instead would let two
 * threads making their first calls at once both re-initialise the lock, one while the other
 * holds it, and would cost two system calls per execute.) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void reset_in_forked_child(void)
{
    pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    memcpy(&g_lock, &fresh_lock, sizeof g_lock);
    memcpy(&g_cond, &fresh_cond, sizeof g_cond);
    memset(g_dev, 0, sizeof g_dev);
    t_current = NULL;   /* (the forking thread's: the one the child runs) */
    g_pid = getpid();
}

static void init_once(void)
{
    g_pid = getpid();
    pthread_atfork(NULL, NULL, reset_in_forked_child);
}

static void reset_if_forked(void)
{
    pthread_once(&g_once, init_once);
}

/* Under g_lock: may ``e`` run now? */
static int may_run(const device_t *d, const qe_sched_exec *e)
{
    int strict = atomic_load(&g_strict);
    for (const qe_sched_exec *o = d->head; o; o = o->next) {
        if (o == e)
            continue;
        if (o->state == S_RUNNING && (strict || o->os_priority != e->os_priority))
            return 0;
        if ((o->state == S_WAITING || o->state == S_YIELDED) && o->os_priority < e->os_priority)
            return 0;   /* a higher priority is waiting: it goes first */
        if (strict && (o->state == S_WAITING || o->state == S_YIELDED) &&
            o->os_priority == e->os_priority && o->ticket < e->ticket)
            return 0;   /* strict: equal priorities in arrival order */
    }
    return 1;
}

/* Under g_lock: ask the running executes of lower priority than ``e`` to yield. */
static void request_yields(device_t *d, const qe_sched_exec *e)
{
    for (qe_sched_exec *o = d->head; o; o = o->next)
        if (o != e && o->state == S_RUNNING && o->os_priority > e->os_priority)
            atomic_store((atomic_int *)&o->yield_req, 1);
}

static void wait_until_runnable(device_t *d, qe_sched_exec *e)
{
    while (!may_run(d, e)) {
        request_yields(d, e);
        pthread_cond_wait(&g_cond, &g_lock);
    }
}

int qe_sched_begin(qe_sched_exec *e, int32_t device, int32_t os_priority)
{
    if (!e || device < 0 || device >= QE_SCHED_DEVICES)
        return 1;
    reset_if_forked();   /* the first call registers the fork handler */
    pthread_mutex_lock(&g_lock);
    device_t *d = &g_dev[device];
    memset(e, 0, sizeof *e);
    e->device = device;
    e->os_priority = os_priority;
    e->ticket = ++d->tickets;
    e->state = S_WAITING;
    e->next = d->head;
    d->head = e;
    int64_t t0 = now_ns();
    if (!may_run(d, e)) {
        e->waited_first = 1;
        wait_until_runnable(d, e);
    }
    e->state = S_RUNNING;
    e->start_ns = now_ns();
    e->wait_ns = e->start_ns - t0;
    t_current = e;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int qe_sched_end(qe_sched_exec *e)
{
    if (!e || e->state == S_IDLE)
        return 1;
    reset_if_forked();   /* the first call registers the fork handler */
    pthread_mutex_lock(&g_lock);
    device_t *d = &g_dev[e->device];
    for (qe_sched_exec **p = &d->head; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    e->state = S_IDLE;
    e->end_ns = now_ns();
    if (t_current == e)
        t_current = NULL;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int qe_sched_point(void)
{
    qe_sched_exec *e = t_current;
    if (!e || !atomic_load((atomic_int *)&e->yield_req))
        return 0;
    if (g_pid != getpid())
        return 0;   /* an execute of the parent, inherited by a forked child */
    pthread_mutex_lock(&g_lock);
    device_t *d = &g_dev[e->device];
    atomic_store((atomic_int *)&e->yield_req, 0);
    int yielded = 0;
    int64_t t0 = now_ns();
    e->state = S_YIELDED;
    pthread_cond_broadcast(&g_cond);
    if (!may_run(d, e)) {
        yielded = 1;
        wait_until_runnable(d, e);
    }
    e->state = S_RUNNING;
    if (yielded) {
        if (e->yields < 8) {
            e->yield_start_ns[e->yields] = t0;
            e->yield_end_ns[e->yields] = now_ns();
        }
        e->yields++;
        e->preempt_ns += now_ns() - t0;
        atomic_fetch_add(&g_total_yields, 1);
    }
    pthread_mutex_unlock(&g_lock);
    return yielded;
}

void qe_sched_set_strict(int strict)
{
    atomic_store(&g_strict, strict ? 1 : 0);
}

int qe_sched_strict(void)
{
    return atomic_load(&g_strict);
}

long qe_sched_total_yields(void)
{
    return atomic_load(&g_total_yields);
}
