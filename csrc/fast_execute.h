/* graphExecute's C fast path (QnnGraph.h QnnGraph_execute; issue 13), included by csrc/shim.c.
 *
 * A graph whose plan the C engine compiled entirely (qnnemu/core/engine: no Python fallback
 * step) is registered here after its first execute (qnnemu/abi/fast_execute.py) with a
 * descriptor: the program's tables, a private arena, and per graph input / output its tensor
 * id, byte size, prepared dimensions and arena offset.  The table's graphExecute slot is
 * qnnemu_fast_graphExecute: when the call is one the descriptor covers -- no profile, no signal,
 * raw client buffers of exactly the prepared sizes and dimensions, every input given once -- it
 * copies the inputs into the arena, runs the program (qe_run in qnnemu._kernels, through the
 * address registered) and copies the outputs out, without the interpreter: no GIL, so graphs
 * in several application threads run at once.  Anything else (and a graph already running in
 * another thread) takes the Python entry, which validates and reports as always.
 *
 * Every other ABI call clears the registry first (qnnemu/abi/framework.py), so a descriptor
 * never outlives the state it was built from (configs, updated tensors, freed handles).  The
 * registry's read-write lock makes a clear wait for the fast executes in flight.
 */
#ifndef QNNEMU_FAST_EXECUTE_H
#define QNNEMU_FAST_EXECUTE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef long (*qnnemu_qe_run_fn)(const int64_t *, long, long, const int64_t *, const int64_t *,
                                 const double *, const int64_t *, char *, void *const *);
typedef void (*qnnemu_set_threads_fn)(int);
typedef int (*qnnemu_threads_fn)(void);
/* The HTP scheduler of qnnemu._kernels (csrc/eng_sched.h): the fast path's executes obey it too.
 * Its exec record is opaque here; 512 bytes hold it (tests/test_htp_scheduling.py checks). */
typedef struct { _Alignas(16) char bytes[512]; } qnnemu_sched_exec;
typedef int (*qnnemu_sched_begin_fn)(void *, int32_t, int32_t);
typedef int (*qnnemu_sched_end_fn)(void *);

/* Descriptor header (int64 each), then FD_REC int64 per input, then per output. */
enum { FD_VERSION, FD_RUN, FD_STEPS, FD_NSTEPS, FD_PBUF, FD_INTS, FD_DBLS, FD_BUFS, FD_ARENA, FD_NIN,
       FD_NOUT, FD_SET_CALL_THREADS, FD_THREADS, FD_SCHED_BEGIN, FD_SCHED_END, FD_SCHED_WHO,
       FD_HEADER = 16 };
enum { FR_ID, FR_NBYTES, FR_RANK, FR_DIMS, FR_OFFSET, FD_REC = 6 };
#define FD_LAYOUT_VERSION 2
#define FAST_SLOTS 256

typedef struct {
  uint64_t handle;
  const int64_t *desc;
  atomic_flag busy;
} FastEntry;

static FastEntry g_fast[FAST_SLOTS];
static atomic_int g_fast_n;
static atomic_int g_fast_inflight;
static pthread_rwlock_t g_fast_lock = PTHREAD_RWLOCK_INITIALIZER;

/* A fork while another thread ran a fast execute would leave the child a lock held by a thread
 * it does not have: the child starts with a fresh, empty registry (its graphs register again). */
static void fast_after_fork_child(void) {
  pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;
  memcpy(&g_fast_lock, &fresh, sizeof fresh);
  atomic_store(&g_fast_n, 0);
  atomic_store(&g_fast_inflight, 0);
}

static pthread_once_t g_fast_once = PTHREAD_ONCE_INIT;
static void fast_install_fork_handler(void) { pthread_atfork(NULL, NULL, fast_after_fork_child); }

/* The process the registry belongs to.  Besides the atfork handler, every entry checks it: a
 * child forked while a fast execute held the lock (seen under load) must never wait for it. */
static atomic_int g_fast_pid;

static int fast_in_child(void) { return atomic_load(&g_fast_pid) != (int)getpid(); }

int qnnemu_fast_register(uint64_t handle, const int64_t *desc) {
  if (!desc || desc[FD_VERSION] != FD_LAYOUT_VERSION) return -1;
  pthread_once(&g_fast_once, fast_install_fork_handler);
  if (atomic_load(&g_fast_n) > 0 && fast_in_child()) fast_after_fork_child();
  atomic_store(&g_fast_pid, (int)getpid());
  pthread_rwlock_wrlock(&g_fast_lock);
  int n = atomic_load(&g_fast_n), k;
  for (k = 0; k < n && g_fast[k].handle != handle; k++) {
  }
  int rc = 0;
  if (k == n && n == FAST_SLOTS) {
    rc = -2;
  } else {
    g_fast[k].handle = handle;
    g_fast[k].desc = desc;
    atomic_flag_clear(&g_fast[k].busy);
    if (k == n) atomic_store(&g_fast_n, n + 1);
  }
  pthread_rwlock_unlock(&g_fast_lock);
  return rc;
}

void qnnemu_fast_clear(void) {
  if (atomic_load(&g_fast_n) == 0) return;
  if (fast_in_child()) {   /* inherited from the parent: drop it without its lock */
    fast_after_fork_child();
    return;
  }
  pthread_rwlock_wrlock(&g_fast_lock);
  atomic_store(&g_fast_n, 0);
  pthread_rwlock_unlock(&g_fast_lock);
}

int qnnemu_fast_count(void) { return atomic_load(&g_fast_n); }

typedef struct {
  uint32_t id, rank, mem_type;
  const uint32_t *dims;
  void *data;
  uint32_t size;
  int dynamic;
} FastArg;

static int fast_arg(const Qnn_Tensor_t *t, FastArg *a) {
  if (t->version == QNN_TENSOR_VERSION_1) {
    const Qnn_TensorV1_t *v = &t->v1;
    *a = (FastArg){v->id, v->rank, (uint32_t)v->memType, v->dimensions, v->clientBuf.data,
                   v->clientBuf.dataSize, 0};
    return 0;
  }
  if (t->version == QNN_TENSOR_VERSION_2) {
    const Qnn_TensorV2_t *v = &t->v2;
    *a = (FastArg){v->id, v->rank, (uint32_t)v->memType, v->dimensions, v->clientBuf.data,
                   v->clientBuf.dataSize, v->isDynamicDimensions != NULL};
    return 0;
  }
  return -1;
}

/* The record of ``a`` among ``n`` records, or NULL when the call does not match it exactly. */
static const int64_t *fast_match(const int64_t *recs, int64_t n, const FastArg *a) {
  if (a->mem_type != QNN_TENSORMEMTYPE_RAW || a->dynamic || !a->data) return NULL;
  for (int64_t k = 0; k < n; k++) {
    const int64_t *r = recs + k * FD_REC;
    if ((uint32_t)r[FR_ID] != a->id) continue;
    if ((int64_t)a->size != r[FR_NBYTES]) return NULL;
    if (a->dims) {
      if ((int64_t)a->rank != r[FR_RANK]) return NULL;
      const uint32_t *want = (const uint32_t *)(intptr_t)r[FR_DIMS];
      for (uint32_t d = 0; d < a->rank; d++)
        if (a->dims[d] != want[d]) return NULL;
    }
    return r;
  }
  return NULL;
}

/* 0: executed; 1: not a call the descriptor covers (nothing written). */
static int fast_run(const int64_t *desc, const Qnn_Tensor_t *inputs, uint32_t n_in, Qnn_Tensor_t *outputs,
                    uint32_t n_out) {
  int64_t want_in = desc[FD_NIN], have_out = desc[FD_NOUT];
  if ((int64_t)n_in != want_in || (int64_t)n_out > have_out || n_in > 64 || n_out > 64) return 1;
  if ((n_in && !inputs) || (n_out && !outputs)) return 1;
  const int64_t *in_recs = desc + FD_HEADER, *out_recs = in_recs + want_in * FD_REC;
  const int64_t *in_match[64], *out_match[64];
  FastArg in_args[64], out_args[64];
  uint64_t seen = 0;
  for (uint32_t i = 0; i < n_in; i++) {
    if (fast_arg(&inputs[i], &in_args[i])) return 1;
    in_match[i] = fast_match(in_recs, want_in, &in_args[i]);
    if (!in_match[i]) return 1;
    uint64_t bit = 1ull << ((in_match[i] - in_recs) / FD_REC);
    if (seen & bit) return 1;   /* an input given twice */
    seen |= bit;
  }
  for (uint32_t i = 0; i < n_out; i++) {
    if (fast_arg(&outputs[i], &out_args[i])) return 1;
    out_match[i] = fast_match(out_recs, have_out, &out_args[i]);
    if (!out_match[i]) return 1;
  }
  char *arena = (char *)(intptr_t)desc[FD_ARENA];
  for (uint32_t i = 0; i < n_in; i++)
    memcpy(arena + in_match[i][FR_OFFSET], in_args[i].data, (size_t)in_match[i][FR_NBYTES]);
  /* Executes in flight share the cores (as qnnemu/core/threads.py does for the Python path). */
  int inflight = atomic_fetch_add(&g_fast_inflight, 1) + 1;
  qnnemu_set_threads_fn set_threads = (qnnemu_set_threads_fn)(intptr_t)desc[FD_SET_CALL_THREADS];
  qnnemu_threads_fn threads = (qnnemu_threads_fn)(intptr_t)desc[FD_THREADS];
  if (set_threads && threads) {
    int per = threads() / inflight;
    set_threads(per < 1 ? 1 : per);
  }
  qnnemu_qe_run_fn run = (qnnemu_qe_run_fn)(intptr_t)desc[FD_RUN];
  void *no_io[1] = {NULL};
  qnnemu_sched_begin_fn sched_begin = (qnnemu_sched_begin_fn)(intptr_t)desc[FD_SCHED_BEGIN];
  qnnemu_sched_end_fn sched_end = (qnnemu_sched_end_fn)(intptr_t)desc[FD_SCHED_END];
  qnnemu_sched_exec sched;
  int scheduled = sched_begin && sched_end &&
                  sched_begin(&sched, (int32_t)(desc[FD_SCHED_WHO] >> 16), (int32_t)(desc[FD_SCHED_WHO] & 0xffff)) == 0;
  long rc = run((const int64_t *)(intptr_t)desc[FD_STEPS], 0, (long)desc[FD_NSTEPS],
                (const int64_t *)(intptr_t)desc[FD_PBUF], (const int64_t *)(intptr_t)desc[FD_INTS],
                (const double *)(intptr_t)desc[FD_DBLS], (const int64_t *)(intptr_t)desc[FD_BUFS], arena,
                no_io);
  if (scheduled) sched_end(&sched);
  if (set_threads) set_threads(0);
  atomic_fetch_sub(&g_fast_inflight, 1);
  if (rc != -1) return 1;   /* a kernel failed: the Python entry runs it again and reports */
  for (uint32_t i = 0; i < n_out; i++)
    memcpy(out_args[i].data, arena + out_match[i][FR_OFFSET], (size_t)out_match[i][FR_NBYTES]);
  return 0;
}

Qnn_ErrorHandle_t qnnemu_fast_graphExecute(Qnn_GraphHandle_t graphHandle, const Qnn_Tensor_t *inputs,
                                           uint32_t numInputs, Qnn_Tensor_t *outputs, uint32_t numOutputs,
                                           Qnn_ProfileHandle_t profileHandle, Qnn_SignalHandle_t signalHandle) {
  if (atomic_load_explicit(&g_fast_n, memory_order_relaxed) > 0 && !profileHandle && !signalHandle &&
      !fast_in_child() && pthread_rwlock_rdlock(&g_fast_lock) == 0) {
    int n = atomic_load(&g_fast_n), done = 1;
    for (int k = 0; k < n; k++) {
      if (g_fast[k].handle != (uint64_t)(uintptr_t)graphHandle) continue;
      if (!atomic_flag_test_and_set(&g_fast[k].busy)) {
        done = fast_run(g_fast[k].desc, inputs, numInputs, outputs, numOutputs);
        atomic_flag_clear(&g_fast[k].busy);
      }
      break;
    }
    pthread_rwlock_unlock(&g_fast_lock);
    if (done == 0) return QNN_SUCCESS;
  }
  return qnnemu_abi_graphExecute(graphHandle, inputs, numInputs, outputs, numOutputs, profileHandle,
                                 signalHandle);
}

#endif /* QNNEMU_FAST_EXECUTE_H */
