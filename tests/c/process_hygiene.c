/* process_hygiene.c: how a QNN backend library behaves inside an application's process
 * (QnnInterface.h through dlopen, as any QNN application uses it).  Works on any backend .so
 * (ours, or the vendor's libQnnHtp.so with its directory on LD_LIBRARY_PATH).
 *
 *   process_hygiene fork    <backend.so> [forks] [system.so]
 *                                                          fork while another thread executes;
 *                                                          each child creates a backend and
 *                                                          executes (and executes the inherited
 *                                                          graph); exit 0 when every child did.
 *                                                          With system.so, the System library
 *                                                          is loaded (and its providers taken)
 *                                                          too: both libraries' fork handlers
 *   process_hygiene free    <backend.so> [rounds] [busy] [chain] [same]
 *                                                          contextFree / backendFree latency,
 *                                                          busy=1: while another thread executes
 *                                                          a small graph (FullyConnected and
 *                                                          <chain> adds) back to back; same=1:
 *                                                          and a third one executes the graph
 *                                                          of the context being freed
 *   process_hygiene gil     <backend.so> [calls]           latency of a trivial QNN call while
 *                                                          another thread is inside the long
 *                                                          GEMM of a large graph
 *   process_hygiene locale  <backend.so> [app-locale]      setlocale state and environ before
 *                                                          and after loading and using the
 *                                                          backend; exit 0 when unchanged
 *   process_hygiene scale   <backend.so> <threads> <seconds> <M> <K> <N>
 *                                                          executes/s of <threads> threads, each
 *                                                          executing its own FullyConnected
 *                                                          [M,K] x [N,K]^T graph
 *
 * Environment: PH_M rows of the small graph the other thread executes (default 8), PH_LOG an app
 * logger at that QnnLog level, PH_IDLE (fork) no executing thread, PH_CHILD_TIMEOUT (fork)
 * seconds a child may take (default 30).
 *
 * Output lines are "key value ..." for the tests and benchmarks to parse.  Exit status 0 on
 * success, 1 on a failed check, 2 on a QNN error.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "QnnInterface.h"
#include "QnnOpDef.h"

extern char **environ;

static QNN_INTERFACE_VER_TYPE qnn;

#define CHECK(call)                                                                    \
  do {                                                                                 \
    Qnn_ErrorHandle_t err_ = (call);                                                   \
    if (err_ != QNN_SUCCESS) {                                                         \
      fprintf(stderr, "QNN error %llu in %s (line %d)\n", (unsigned long long)err_, #call, \
              __LINE__);                                                               \
      return 2;                                                                        \
    }                                                                                  \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int load(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    return 2;
  }
  Qnn_ErrorHandle_t (*get)(const QnnInterface_t ***, uint32_t *);
  *(void **)&get = dlsym(lib, "QnnInterface_getProviders");
  const QnnInterface_t **providers = NULL;
  uint32_t n = 0;
  if (!get || get(&providers, &n) != QNN_SUCCESS || n == 0) {
    fprintf(stderr, "QnnInterface_getProviders failed\n");
    return 2;
  }
  qnn = providers[0]->QNN_INTERFACE_VER_NAME;
  return 0;
}

/* The System library next to a backend: loaded and initialised, nothing else. */
static int load_system(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    return 2;
  }
  int (*get)(const void ***, uint32_t *);
  *(void **)&get = dlsym(lib, "QnnSystemInterface_getProviders");
  const void **providers = NULL;
  uint32_t n = 0;
  if (!get || get(&providers, &n) != 0 || n == 0) {
    fprintf(stderr, "QnnSystemInterface_getProviders failed\n");
    return 2;
  }
  return 0;
}

static Qnn_Tensor_t make_tensor(const char *name, Qnn_TensorType_t type, uint32_t rank,
                                uint32_t *dims, void *data, uint32_t size) {
  Qnn_Tensor_t t;
  memset(&t, 0, sizeof t);
  t.version = QNN_TENSOR_VERSION_2;
  t.v2.name = name;
  t.v2.type = type;
  t.v2.dataFormat = QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER;
  t.v2.dataType = QNN_DATATYPE_FLOAT_32;
  t.v2.quantizeParams.encodingDefinition = QNN_DEFINITION_UNDEFINED;
  t.v2.quantizeParams.quantizationEncoding = QNN_QUANTIZATION_ENCODING_UNDEFINED;
  t.v2.rank = rank;
  t.v2.dimensions = dims;
  t.v2.memType = QNN_TENSORMEMTYPE_RAW;
  t.v2.clientBuf.data = data;
  t.v2.clientBuf.dataSize = size;
  return t;
}

/* One FullyConnected graph y[M,N] = x[M,K] w[N,K]^T + b with its buffers, followed by
 * ``chain`` ElementWiseAdd nodes adding the bias row again (y += b, chain times): a chain of
 * small ops is what makes an execute spend its time in the backend's per-op overhead. */
typedef struct {
  Qnn_GraphHandle_t graph;
  uint32_t x_dims[2], w_dims[2], b_dims[1], y_dims[2];
  float *x, *w, *b, *y;
  int M, K, N, chain;
  Qnn_Tensor_t in, out;
} FcGraph;

static float pattern(long i, int mul, int mod) { return (float)((i * mul) % mod - mod / 2) / (float)mod; }

static int fc_build_chain(FcGraph *g, Qnn_ContextHandle_t context, const char *name, int M, int K,
                          int N, int chain) {
  memset(g, 0, sizeof *g);
  g->M = M, g->K = K, g->N = N, g->chain = chain;
  g->x = malloc(sizeof(float) * M * K), g->w = malloc(sizeof(float) * N * K);
  g->b = malloc(sizeof(float) * N), g->y = malloc(sizeof(float) * M * N);
  for (long i = 0; i < (long)M * K; i++) g->x[i] = pattern(i, 7, 19);
  for (long i = 0; i < (long)N * K; i++) g->w[i] = pattern(i, 5, 13) * 0.125f;
  for (long i = 0; i < N; i++) g->b[i] = pattern(i, 3, 7);
  g->x_dims[0] = M, g->x_dims[1] = K, g->w_dims[0] = N, g->w_dims[1] = K;
  g->b_dims[0] = N, g->y_dims[0] = M, g->y_dims[1] = N;
  CHECK(qnn.graphCreate(context, name, NULL, &g->graph));
  Qnn_Tensor_t x = make_tensor("x", QNN_TENSOR_TYPE_APP_WRITE, 2, g->x_dims, NULL, 0);
  Qnn_Tensor_t w = make_tensor("w", QNN_TENSOR_TYPE_STATIC, 2, g->w_dims, g->w, sizeof(float) * N * K);
  Qnn_Tensor_t b = make_tensor("b", QNN_TENSOR_TYPE_STATIC, 1, g->b_dims, g->b, sizeof(float) * N);
  char names[2][32];
  Qnn_Tensor_t y = make_tensor(chain ? "y0" : "y", chain ? QNN_TENSOR_TYPE_NATIVE : QNN_TENSOR_TYPE_APP_READ,
                               2, g->y_dims, NULL, 0);
  CHECK(qnn.tensorCreateGraphTensor(g->graph, &x));
  CHECK(qnn.tensorCreateGraphTensor(g->graph, &w));
  CHECK(qnn.tensorCreateGraphTensor(g->graph, &b));
  CHECK(qnn.tensorCreateGraphTensor(g->graph, &y));
  Qnn_Tensor_t ins[3] = {x, w, b};
  Qnn_OpConfig_t op;
  memset(&op, 0, sizeof op);
  op.version = QNN_OPCONFIG_VERSION_1;
  op.v1.name = "fc";
  op.v1.packageName = QNN_OP_PACKAGE_NAME_QTI_AISW;
  op.v1.typeName = QNN_OP_FULLY_CONNECTED;
  op.v1.numOfInputs = 3;
  op.v1.inputTensors = ins;
  op.v1.numOfOutputs = 1;
  op.v1.outputTensors = &y;
  CHECK(qnn.graphAddNode(g->graph, op));
  for (int i = 1; i <= chain; i++) {
    snprintf(names[i % 2], sizeof names[0], i == chain ? "y" : "y%d", i);
    Qnn_Tensor_t next = make_tensor(names[i % 2], i == chain ? QNN_TENSOR_TYPE_APP_READ : QNN_TENSOR_TYPE_NATIVE,
                                    2, g->y_dims, NULL, 0);
    CHECK(qnn.tensorCreateGraphTensor(g->graph, &next));
    Qnn_Tensor_t add_in[2] = {y, b};
    char node[32];
    snprintf(node, sizeof node, "add%d", i);
    op.v1.name = node;
    op.v1.typeName = QNN_OP_ELEMENT_WISE_ADD;
    op.v1.numOfInputs = 2;
    op.v1.inputTensors = add_in;
    op.v1.outputTensors = &next;
    CHECK(qnn.graphAddNode(g->graph, op));
    y = next;
  }
  CHECK(qnn.graphFinalize(g->graph, NULL, NULL));
  g->in = x, g->out = y;
  g->in.v2.clientBuf.data = g->x, g->in.v2.clientBuf.dataSize = sizeof(float) * M * K;
  g->out.v2.clientBuf.data = g->y, g->out.v2.clientBuf.dataSize = sizeof(float) * M * N;
  return 0;
}

static int fc_build(FcGraph *g, Qnn_ContextHandle_t context, const char *name, int M, int K, int N) {
  return fc_build_chain(g, context, name, M, K, N, 0);
}

static Qnn_ErrorHandle_t fc_execute(FcGraph *g) {
  return qnn.graphExecute(g->graph, &g->in, 1, &g->out, 1, NULL, NULL);
}

/* 1 when y matches a double-precision reference (float16 math allowed for). */
static int fc_correct(const FcGraph *g) {
  for (int m = 0; m < g->M; m++)
    for (int n = 0; n < g->N; n++) {
      double acc = (1.0 + g->chain) * g->b[n];
      for (int k = 0; k < g->K; k++) acc += (double)g->x[(long)m * g->K + k] * g->w[(long)n * g->K + k];
      if (fabs(acc - g->y[(long)m * g->N + n]) > 1e-2 * (1 + fabs(acc))) return 0;
    }
  return 1;
}

static void fc_release(FcGraph *g) {
  free(g->x), free(g->w), free(g->b), free(g->y);
}

/* ------------------------------------------------------------------ a thread executing */
/* Rows of the graph the other thread executes (PH_M; default 8: a small graph). */
static int busy_rows(void) { return getenv("PH_M") ? atoi(getenv("PH_M")) : 8; }

typedef struct {
  FcGraph *g;
  volatile int stop;
  volatile int in_call;
  long executes;
  Qnn_ErrorHandle_t error;
} Executor;

static void *executor_main(void *arg) {
  Executor *e = arg;
  while (!e->stop) {
    __atomic_store_n(&e->in_call, 1, __ATOMIC_SEQ_CST);
    Qnn_ErrorHandle_t err = fc_execute(e->g);
    __atomic_store_n(&e->in_call, 0, __ATOMIC_SEQ_CST);
    if (err != QNN_SUCCESS) {
      e->error = err;
      break;
    }
    e->executes++;
  }
  return NULL;
}

/* An app logger formatting every message, as real applications do (PH_LOG=level). */
static void log_callback(const char *fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args) {
  char buf[1024];
  (void)level, (void)timestamp;
  vsnprintf(buf, sizeof buf, fmt, args);
}

static Qnn_LogHandle_t app_logger(void) {
  static Qnn_LogHandle_t logger;
  const char *level = getenv("PH_LOG");
  if (!logger && level && qnn.logCreate(log_callback, (QnnLog_Level_t)atoi(level), &logger) != QNN_SUCCESS)
    logger = NULL;
  return logger;
}

/* ----------------------------------------------------------------------------------- fork */
static int child_after_fork(FcGraph *inherited) {
  Qnn_BackendHandle_t backend = NULL;
  Qnn_ContextHandle_t context = NULL;
  FcGraph g;
  CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
  CHECK(qnn.contextCreate(backend, NULL, NULL, &context));
  if (fc_build(&g, context, "child", 4, 32, 8)) return 2;
  CHECK(fc_execute(&g));
  if (!fc_correct(&g)) return 1;
  /* The graph the other thread of the parent was executing is usable too. */
  CHECK(fc_execute(inherited));
  if (!fc_correct(inherited)) return 1;
  CHECK(qnn.contextFree(context, NULL));
  CHECK(qnn.backendFree(backend));
  fc_release(&g);
  return 0;
}

static int run_fork(int forks) {
  Qnn_BackendHandle_t backend = NULL;
  Qnn_ContextHandle_t context = NULL;
  FcGraph g;
  CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
  CHECK(qnn.contextCreate(backend, NULL, NULL, &context));
  if (fc_build(&g, context, "parent", busy_rows(), 256, 64)) return 2;
  Executor e = {.g = &g};
  pthread_t tid;
  int idle = getenv("PH_IDLE") != NULL; /* no executing thread: fork between calls */
  if (!idle) pthread_create(&tid, NULL, executor_main, &e);
  int ok = 0, inside = 0;
  for (int i = 0; i < forks; i++) {
    while (!idle && !__atomic_load_n(&e.in_call, __ATOMIC_SEQ_CST) && !e.error) usleep(50);
    usleep(200 + 300 * (i % 7));   /* different points inside the call */
    inside += __atomic_load_n(&e.in_call, __ATOMIC_SEQ_CST);
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
      alarm(60); /* a blocked child dies instead of hanging the test */
      int rc = child_after_fork(&g);
      fflush(stdout);
      _exit(rc);
    }
    double forked = now_ms() - t0;
    int status = 0;
    double wait_s = getenv("PH_CHILD_TIMEOUT") ? atof(getenv("PH_CHILD_TIMEOUT")) : 30;
    double deadline = now_ms() + wait_s * 1e3;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline) usleep(1000);
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      printf("fork %d child blocked (killed after %.0f s)\n", i, wait_s);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ok++;
      printf("fork %d child ok in %.1f ms (fork() took %.2f ms)\n", i, now_ms() - t0, forked);
    } else {
      printf("fork %d child failed: %s %d\n", i, WIFEXITED(status) ? "exit" : "signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    fflush(stdout);
  }
  e.stop = 1;
  if (!idle) pthread_join(tid, NULL);
  printf("forks %d ok %d inside_call %d parent_executes %ld parent_error %llu\n", forks, ok, inside,
         e.executes, (unsigned long long)e.error);
  CHECK(qnn.contextFree(context, NULL));
  CHECK(qnn.backendFree(backend));
  return ok == forks && e.error == QNN_SUCCESS ? 0 : 1;
}

/* ----------------------------------------------------------------------------------- free */
static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void summary(const char *what, double *v, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  qsort(v, n, sizeof *v, cmp_double);
  printf("%s n %d median_ms %.3f mean_ms %.3f max_ms %.3f\n", what, n, v[n / 2], sum / n, v[n - 1]);
}

static int run_free(int rounds, int busy, int chain, int same) {
  Qnn_BackendHandle_t backend = NULL;
  Qnn_ContextHandle_t context = NULL;
  FcGraph g;
  CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
  CHECK(qnn.contextCreate(backend, NULL, NULL, &context));
  if (fc_build_chain(&g, context, "busy", busy_rows(), 256, 64, chain)) return 2;
  Executor e = {.g = &g};
  pthread_t tid;
  if (busy) {
    pthread_create(&tid, NULL, executor_main, &e);
    while (e.executes < 3 && !e.error) usleep(100);
  }
  double *ctx_ms = calloc(rounds, sizeof(double)), *be_ms = calloc(rounds, sizeof(double));
  for (int i = 0; i < rounds; i++) {
    Qnn_BackendHandle_t b2 = NULL;
    Qnn_ContextHandle_t c2 = NULL;
    FcGraph g2;
    CHECK(qnn.backendCreate(app_logger(), NULL, &b2));
    CHECK(qnn.contextCreate(b2, NULL, NULL, &c2));
    if (fc_build(&g2, c2, "freed", 2, 16, 4)) return 2;
    CHECK(fc_execute(&g2));
    Executor e2 = {.g = &g2};
    pthread_t tid2;
    if (same) { /* another thread executes the graph of the context being freed */
      pthread_create(&tid2, NULL, executor_main, &e2);
      while (e2.executes < 2 && !e2.error) usleep(50);
    }
    usleep(2000); /* the executing threads run on alone for a while (no hot GIL in this thread) */
    double t0 = now_ms();
    CHECK(qnn.contextFree(c2, NULL));
    double t1 = now_ms();
    CHECK(qnn.backendFree(b2));
    double t2 = now_ms();
    ctx_ms[i] = t1 - t0, be_ms[i] = t2 - t1;
    if (same) {
      e2.stop = 1;
      pthread_join(tid2, NULL);
    }
    fc_release(&g2);
  }
  if (busy) {
    e.stop = 1;
    pthread_join(tid, NULL);
  }
  summary("contextFree", ctx_ms, rounds);
  summary("backendFree", be_ms, rounds);
  printf("busy %d executes %ld error %llu\n", busy, e.executes, (unsigned long long)e.error);
  CHECK(qnn.contextFree(context, NULL));
  CHECK(qnn.backendFree(backend));
  return e.error == QNN_SUCCESS ? 0 : 1;
}

/* ------------------------------------------------------------------------------------ gil */
/* A thread executing a large FullyConnected (hundreds of ms in one GEMM) must not keep the
 * other threads out of the backend: the GEMM runs without the GIL. */
static int run_gil(int calls) {
  Qnn_BackendHandle_t backend = NULL;
  Qnn_ContextHandle_t context = NULL;
  FcGraph g;
  CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
  CHECK(qnn.contextCreate(backend, NULL, NULL, &context));
  if (fc_build(&g, context, "large", 1024, 2048, 1024)) return 2;
  double t0 = now_ms();
  CHECK(fc_execute(&g));
  printf("large execute %.1f ms\n", now_ms() - t0);
  Executor e = {.g = &g};
  pthread_t tid;
  pthread_create(&tid, NULL, executor_main, &e);
  while (!__atomic_load_n(&e.in_call, __ATOMIC_SEQ_CST)) usleep(100);
  usleep(20000);
  double *ms = calloc(calls, sizeof(double));
  for (int i = 0; i < calls; i++) {
    const char *id = NULL;
    double t = now_ms();
    CHECK(qnn.backendGetBuildId(&id));
    ms[i] = now_ms() - t;
    usleep(1000);
  }
  e.stop = 1;
  pthread_join(tid, NULL);
  summary("backendGetBuildId", ms, calls);
  printf("large executes %ld error %llu\n", e.executes, (unsigned long long)e.error);
  CHECK(qnn.contextFree(context, NULL));
  CHECK(qnn.backendFree(backend));
  fc_release(&g);
  return e.error == QNN_SUCCESS ? 0 : 1;
}

/* --------------------------------------------------------------------------------- locale */
static char **snapshot_environ(int *n) {
  int count = 0;
  while (environ[count]) count++;
  char **copy = calloc(count + 1, sizeof(char *));
  for (int i = 0; i < count; i++) copy[i] = strdup(environ[i]);
  *n = count;
  return copy;
}

/* "locale": compares the state after the backend was loaded and used with the snapshot. */
static int compare_locale(const char *before, char **env_before, int n_before) {
  int changed = 0;
  const char *after = setlocale(LC_ALL, NULL);
  printf("locale before %s\nlocale after %s\n", before, after);
  if (strcmp(before, after) != 0) changed = 1;
  int n_after = 0;
  char **env_after = snapshot_environ(&n_after);
  for (int i = 0; i < n_after; i++) {
    int found = 0;
    for (int j = 0; j < n_before && !found; j++) found = strcmp(env_after[i], env_before[j]) == 0;
    if (!found) printf("environ added %s\n", env_after[i]), changed = 1;
  }
  for (int j = 0; j < n_before; j++) {
    int found = 0;
    for (int i = 0; i < n_after && !found; i++) found = strcmp(env_after[i], env_before[j]) == 0;
    if (!found) printf("environ removed %s\n", env_before[j]), changed = 1;
  }
  printf("environ before %d after %d\n", n_before, n_after);
  printf("locale %s\n", changed ? "changed" : "unchanged");
  return changed;
}

/* ---------------------------------------------------------------------------------- scale */
typedef struct {
  int M, K, N;
  double seconds;
  Qnn_BackendHandle_t backend;
  pthread_barrier_t *ready;
  long executes;
  double elapsed_ms;
  int rc;
} ScaleJob;

static int scale_setup(ScaleJob *j, FcGraph *g, Qnn_ContextHandle_t *context, int index) {
  char name[32];
  snprintf(name, sizeof name, "gemm%d", index);
  CHECK(qnn.contextCreate(j->backend, NULL, NULL, context));
  if (fc_build(g, *context, name, j->M, j->K, j->N)) return 2;
  CHECK(fc_execute(g)); /* warm: static weights packed, code paths imported */
  return fc_correct(g) ? 0 : 1;
}

static int scale_index;

static void *scale_main(void *arg) {
  ScaleJob *j = arg;
  FcGraph g;
  Qnn_ContextHandle_t context = NULL;
  j->rc = scale_setup(j, &g, &context, __atomic_fetch_add(&scale_index, 1, __ATOMIC_SEQ_CST));
  pthread_barrier_wait(j->ready);
  if (j->rc) return NULL;
  double t0 = now_ms(), end = t0 + j->seconds * 1e3, t = t0;
  while (t < end) {
    if (fc_execute(&g) != QNN_SUCCESS) {
      j->rc = 2;
      break;
    }
    j->executes++;
    t = now_ms();
  }
  j->elapsed_ms = t - t0;
  qnn.contextFree(context, NULL);
  fc_release(&g);
  return NULL;
}

static int run_scale(int threads, double seconds, int M, int K, int N) {
  Qnn_BackendHandle_t backend = NULL;
  CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
  pthread_barrier_t ready;
  pthread_barrier_init(&ready, NULL, threads);
  ScaleJob jobs[64];
  pthread_t tid[64];
  for (int i = 0; i < threads; i++) {
    jobs[i] = (ScaleJob){.M = M, .K = K, .N = N, .seconds = seconds, .backend = backend, .ready = &ready};
    pthread_create(&tid[i], NULL, scale_main, &jobs[i]);
  }
  double rate = 0;
  long total = 0;
  int rc = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(tid[i], NULL);
    rc |= jobs[i].rc;
    total += jobs[i].executes;
    if (jobs[i].elapsed_ms > 0) rate += jobs[i].executes / (jobs[i].elapsed_ms / 1e3);
  }
  printf("scale threads %d executes %ld rate %.2f per_s gemm %dx%dx%d\n", threads, total, rate, M, K, N);
  CHECK(qnn.backendFree(backend));
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s fork|free|locale|scale <backend.so> ...\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(mode, "locale") == 0) {
    const char *app_locale = argc > 3 ? argv[3] : NULL;
    if (app_locale && !setlocale(LC_ALL, app_locale)) {
      fprintf(stderr, "setlocale(LC_ALL, %s) failed\n", app_locale);
      return 2;
    }
    char *before = strdup(setlocale(LC_ALL, NULL));
    int n_before = 0;
    char **env_before = snapshot_environ(&n_before);
    if (load(argv[2])) return 2;
    Qnn_BackendHandle_t backend = NULL;
    Qnn_ContextHandle_t context = NULL;
    FcGraph g;
    CHECK(qnn.backendCreate(app_logger(), NULL, &backend));
    CHECK(qnn.contextCreate(backend, NULL, NULL, &context));
    if (fc_build(&g, context, "g", 2, 8, 4)) return 2;
    CHECK(fc_execute(&g));
    CHECK(qnn.contextFree(context, NULL));
    CHECK(qnn.backendFree(backend));
    return compare_locale(before, env_before, n_before);
  }
  if (load(argv[2])) return 2;
  if (strcmp(mode, "fork") == 0) {
    if (argc > 4 && load_system(argv[4])) return 2;
    return run_fork(argc > 3 ? atoi(argv[3]) : 10);
  }
  if (strcmp(mode, "free") == 0) return run_free(argc > 3 ? atoi(argv[3]) : 50, argc > 4 ? atoi(argv[4]) : 1, argc > 5 ? atoi(argv[5]) : 0,
                    argc > 6 ? atoi(argv[6]) : 0);
  if (strcmp(mode, "gil") == 0) return run_gil(argc > 3 ? atoi(argv[3]) : 100);
  if (strcmp(mode, "scale") == 0 && argc >= 8)
    return run_scale(atoi(argv[3]), atof(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
  fprintf(stderr, "unknown mode or missing arguments: %s\n", mode);
  return 2;
}
