/* lpai_binary_io.c: an offline-prepared LPAI context binary run with user-provided IO memory
 * (QNN LPAI Memory Management, "Querying IO Memory Requirements", "Allocating and Configuring IO
 * Memory", "Memory Lifetime and Allocation Requirements"), written only against the QNN C API
 * headers (QnnInterface.h, System/QnnSystemInterface.h, LPAI/QnnLpai*.h).
 *
 * It reads a context binary (argv[3], e.g. from `qnnemu-context-binary-generator --backend lpai`)
 * and:
 *   1. lists it with the System library (argv[2]): systemContextGetBinaryInfo, the first graph's
 *      inputs and outputs (the documents' snippet reads contextBinaryInfoV1 / graphInfoV1; this
 *      sample reads whichever struct version the library answers);
 *   2. loads it on the LPAI backend (argv[1]): contextCreateFromBinary from a buffer it keeps
 *      until after QnnContext_free (REQUIRE_PERSISTENT_BINARY), graphRetrieve;
 *   3. queries the alignment, the scratch and the persistent sizes, allocates aligned buffers,
 *      sets them with QnnGraph_setConfig and calls QnnGraph_finalize;
 *   4. allocates every input and output as the "Allocating and Configuring IO Memory" snippet
 *      does (QNN_TENSORMEMTYPE_RAW, calculate_tensor_size, allocate_aligned_memory);
 *   5. fills input k's byte i with (i + k) % 251, executes, and prints the first bytes of each
 *      output (`output <name>: b0 b1 ...`).
 *
 * Usage: lpai_binary_io <libQnnLpai.so> <libQnnSystem.so> <binary>
 * Exit status: 0 when every call succeeded with sizes > 0, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#define _ISOC11_SOURCE

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnInterface.h"
#include "LPAI/QnnLpaiBackend.h"
#include "LPAI/QnnLpaiCommon.h"
#include "LPAI/QnnLpaiGraph.h"
#include "System/QnnSystemInterface.h"

enum { MAX_IO = 16 };

static void *g_lib, *g_sys_lib;
static QNN_INTERFACE_VER_TYPE g_qnn;
static QNN_SYSTEM_INTERFACE_VER_TYPE g_sys;
static QnnSystemContext_Handle_t g_sys_context;
static Qnn_LogHandle_t g_log;
static Qnn_BackendHandle_t g_backend;
static Qnn_ContextHandle_t g_context;
static void *g_binary;                       /* the model binary: valid until after QnnContext_free */
static void *g_buffers[2 + 2 * MAX_IO];      /* scratch, persistent, IO */

static void cleanup(void) {
  if (g_context) g_qnn.contextFree(g_context, NULL);
  if (g_backend) g_qnn.backendFree(g_backend);
  if (g_log) g_qnn.logFree(g_log);
  if (g_sys_context) g_sys.systemContextFree(g_sys_context);
  g_context = NULL, g_backend = NULL, g_log = NULL, g_sys_context = NULL;
  for (size_t i = 0; i < sizeof g_buffers / sizeof g_buffers[0]; i++) free(g_buffers[i]), g_buffers[i] = NULL;
  free(g_binary);
  g_binary = NULL;
  if (g_lib) dlclose(g_lib);
  if (g_sys_lib) dlclose(g_sys_lib);
  g_lib = g_sys_lib = NULL;
}

static const char *error_text(Qnn_ErrorHandle_t err) {
  const char *msg = NULL;
  if (g_qnn.errorGetMessage && g_qnn.errorGetMessage(err, &msg) == QNN_SUCCESS && msg) return msg;
  return "(no message)";
}

#define CHECK(call, name)                                                                   \
  do {                                                                                      \
    Qnn_ErrorHandle_t err_ = (call);                                                        \
    if (err_ != QNN_SUCCESS) {                                                              \
      fprintf(stderr, "ERROR: %s failed with error %llu: %s\n", name,                      \
              (unsigned long long)err_, error_text(err_));                                  \
      cleanup();                                                                            \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, "ERROR: ");   \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");        \
    cleanup();                    \
    return 1;                     \
  } while (0)

static void log_callback(const char *fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args) {
  (void)timestamp;
  if (!fmt || level > QNN_LOG_LEVEL_WARN) return;
  char line[1024];
  vsnprintf(line, sizeof line, fmt, args);
  fprintf(stderr, "[qnn %d] %s\n", (int)level, line);
}

static size_t round_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

static void *allocate_aligned_memory(size_t start_alignment, size_t size_alignment, size_t size) {
  size_t a = size_alignment > start_alignment ? size_alignment : start_alignment;
  return aligned_alloc(start_alignment, round_up(size ? size : 1, a));
}

static size_t dtype_size(Qnn_DataType_t t) {
  switch (t) {
    case QNN_DATATYPE_INT_8: case QNN_DATATYPE_UINT_8: case QNN_DATATYPE_SFIXED_POINT_8:
    case QNN_DATATYPE_UFIXED_POINT_8: case QNN_DATATYPE_BOOL_8: return 1;
    case QNN_DATATYPE_INT_16: case QNN_DATATYPE_UINT_16: case QNN_DATATYPE_FLOAT_16:
    case QNN_DATATYPE_SFIXED_POINT_16: case QNN_DATATYPE_UFIXED_POINT_16: return 2;
    case QNN_DATATYPE_INT_32: case QNN_DATATYPE_UINT_32: case QNN_DATATYPE_FLOAT_32:
    case QNN_DATATYPE_SFIXED_POINT_32: case QNN_DATATYPE_UFIXED_POINT_32: return 4;
    default: return 0;
  }
}

/* The snippet's calculate_tensor_size: elements x bytes per element (v1 and v2 tensors). */
static size_t calculate_tensor_size(const Qnn_Tensor_t *t) {
  uint32_t rank = t->version == QNN_TENSOR_VERSION_1 ? t->v1.rank : t->v2.rank;
  const uint32_t *dims = t->version == QNN_TENSOR_VERSION_1 ? t->v1.dimensions : t->v2.dimensions;
  size_t n = dtype_size(t->version == QNN_TENSOR_VERSION_1 ? t->v1.dataType : t->v2.dataType);
  for (uint32_t d = 0; d < rank; d++) n *= dims[d];
  return n;
}

static const char *tensor_name(const Qnn_Tensor_t *t) {
  return t->version == QNN_TENSOR_VERSION_1 ? t->v1.name : t->v2.name;
}

static void set_client_buf(Qnn_Tensor_t *t, void *data, size_t size) {
  if (t->version == QNN_TENSOR_VERSION_1) {
    t->v1.memType = QNN_TENSORMEMTYPE_RAW;
    t->v1.clientBuf.data = data;
    t->v1.clientBuf.dataSize = (uint32_t)size;
  } else {
    t->v2.memType = QNN_TENSORMEMTYPE_RAW;
    t->v2.clientBuf.data = data;
    t->v2.clientBuf.dataSize = (uint32_t)size;
  }
}

static Qnn_ErrorHandle_t set_graph_mem(Qnn_GraphHandle_t graph, uint32_t option, void *addr, uint32_t size) {
  QnnLpaiGraph_Mem_t lpaiGraphMem = QNN_LPAI_GRAPH_MEM_INIT;
  lpaiGraphMem.memType = QNN_LPAI_MEM_TYPE_DDR;
  lpaiGraphMem.size = size;
  lpaiGraphMem.addr = addr;
  QnnLpaiGraph_CustomConfig_t customGraphCfg = QNN_LPAI_GRAPH_CUSTOM_CONFIG_INIT;
  customGraphCfg.option = option;
  customGraphCfg.config = &lpaiGraphMem;
  QnnGraph_Config_t graphConfig = QNN_GRAPH_CONFIG_INIT;
  graphConfig.option = QNN_GRAPH_CONFIG_OPTION_CUSTOM;
  graphConfig.customConfig = &customGraphCfg;
  const QnnGraph_Config_t *graphCfgPtrs[2] = {&graphConfig, NULL};
  return g_qnn.graphSetConfig(graph, graphCfgPtrs);
}

static Qnn_ErrorHandle_t graph_mem_size(Qnn_GraphHandle_t graph, uint32_t option, uint32_t *size) {
  QnnLpaiGraph_CustomProperty_t customGraphProp = QNN_LPAI_GRAPH_CUSTOM_PROPERTY_INIT;
  customGraphProp.option = option;
  customGraphProp.property = size;
  QnnGraph_Property_t graphProp = QNN_GRAPH_PROPERTY_INIT;
  graphProp.option = QNN_GRAPH_PROPERTY_OPTION_CUSTOM;
  graphProp.customProperty = &customGraphProp;
  QnnGraph_Property_t *graphPropPtrs[2] = {&graphProp, NULL};
  return g_qnn.graphGetProperty(graph, graphPropPtrs);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s <libQnnLpai.so> <libQnnSystem.so> <binary>\n", argv[0]);
    return 1;
  }
  /* The binary, in memory that stays valid until after QnnContext_free. */
  FILE *f = fopen(argv[3], "rb");
  if (!f) FAIL("cannot open %s", argv[3]);
  fseek(f, 0, SEEK_END);
  long binary_size = ftell(f);
  fseek(f, 0, SEEK_SET);
  g_binary = binary_size > 0 ? malloc((size_t)binary_size) : NULL;
  size_t got = g_binary ? fread(g_binary, 1, (size_t)binary_size, f) : 0;
  fclose(f);
  if (binary_size <= 0 || got != (size_t)binary_size) FAIL("cannot read %s", argv[3]);

  /* 1. The System library's listing. */
  g_sys_lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!g_sys_lib) FAIL("cannot load %s: %s", argv[2], dlerror());
  typedef Qnn_ErrorHandle_t (*SysProviders)(const QnnSystemInterface_t ***, uint32_t *);
  SysProviders sys_providers;
  *(void **)&sys_providers = dlsym(g_sys_lib, "QnnSystemInterface_getProviders");
  const QnnSystemInterface_t **sys_list = NULL;
  uint32_t sys_count = 0;
  if (!sys_providers || sys_providers(&sys_list, &sys_count) != QNN_SUCCESS || sys_count == 0)
    FAIL("%s has no System provider", argv[2]);
  g_sys = sys_list[0]->QNN_SYSTEM_INTERFACE_VER_NAME;
  if (g_sys.systemContextCreate(&g_sys_context) != QNN_SUCCESS) FAIL("systemContextCreate failed");
  const QnnSystemContext_BinaryInfo_t *binaryInfo = NULL;
  Qnn_ContextBinarySize_t binaryInfoSize = 0;
  if (g_sys.systemContextGetBinaryInfo(g_sys_context, g_binary, (uint64_t)binary_size, &binaryInfo,
                                       &binaryInfoSize) != QNN_SUCCESS || !binaryInfo)
    FAIL("systemContextGetBinaryInfo failed");
  uint32_t backend_id = 0, num_graphs = 0;
  const QnnSystemContext_GraphInfo_t *graphInfos = NULL;
  switch (binaryInfo->version) {
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_1:
      backend_id = binaryInfo->contextBinaryInfoV1.backendId;
      num_graphs = binaryInfo->contextBinaryInfoV1.numGraphs;
      graphInfos = binaryInfo->contextBinaryInfoV1.graphs;
      break;
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_2:
      backend_id = binaryInfo->contextBinaryInfoV2.backendId;
      num_graphs = binaryInfo->contextBinaryInfoV2.numGraphs;
      graphInfos = binaryInfo->contextBinaryInfoV2.graphs;
      break;
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3:
      backend_id = binaryInfo->contextBinaryInfoV3.backendId;
      num_graphs = binaryInfo->contextBinaryInfoV3.numGraphs;
      graphInfos = binaryInfo->contextBinaryInfoV3.graphs;
      break;
    default:
      FAIL("binary info version %d is not known to this sample", (int)binaryInfo->version);
  }
  if (num_graphs == 0 || !graphInfos) FAIL("the binary has no graphs");
  /* Assume only one graph in the context, as the snippet does. */
  const QnnSystemContext_GraphInfo_t *graphInfo = &graphInfos[0];
  const char *graph_name;
  Qnn_Tensor_t *inputs, *outputs;
  size_t numInputs, numOutputs;
#define VIEW_GRAPH(member)                                                                     \
  graph_name = graphInfo->member.graphName, inputs = graphInfo->member.graphInputs,            \
  outputs = graphInfo->member.graphOutputs, numInputs = graphInfo->member.numGraphInputs,      \
  numOutputs = graphInfo->member.numGraphOutputs
  switch (graphInfo->version) {
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_1: VIEW_GRAPH(graphInfoV1); break;
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_2: VIEW_GRAPH(graphInfoV2); break;
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3: VIEW_GRAPH(graphInfoV3); break;
    default: FAIL("graph info version %d is not known to this sample", (int)graphInfo->version);
  }
#undef VIEW_GRAPH
  if (numInputs > MAX_IO || numOutputs > MAX_IO) FAIL("more than %d inputs or outputs", MAX_IO);
  printf("1. binary info v%d: backend id %u, graph %s, %zu inputs, %zu outputs\n", (int)binaryInfo->version,
         backend_id, graph_name, numInputs, numOutputs);

  /* 2. The LPAI backend loads the binary. */
  g_lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) FAIL("cannot load %s: %s", argv[1], dlerror());
  typedef Qnn_ErrorHandle_t (*GetProviders)(const QnnInterface_t ***, uint32_t *);
  GetProviders get_providers;
  *(void **)&get_providers = dlsym(g_lib, "QnnInterface_getProviders");
  const QnnInterface_t **providers = NULL;
  uint32_t count = 0;
  if (!get_providers || get_providers(&providers, &count) != QNN_SUCCESS) FAIL("%s has no QNN provider", argv[1]);
  const QnnInterface_t *lpai = NULL;
  for (uint32_t i = 0; i < count; i++)
    if (providers[i]->backendId == QNN_BACKEND_ID_LPAI) lpai = providers[i];
  if (!lpai) FAIL("%s has no LPAI provider (backend id %d)", argv[1], QNN_BACKEND_ID_LPAI);
  g_qnn = lpai->QNN_INTERFACE_VER_NAME;
  CHECK(g_qnn.logCreate(log_callback, QNN_LOG_LEVEL_WARN, &g_log), "logCreate");
  CHECK(g_qnn.backendCreate(g_log, NULL, &g_backend), "backendCreate");
  CHECK(g_qnn.contextCreateFromBinary(g_backend, NULL, NULL, g_binary, (Qnn_ContextBinarySize_t)binary_size,
                                      &g_context, NULL), "contextCreateFromBinary");
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphRetrieve(g_context, graph_name, &graph), "graphRetrieve");
  printf("2. loaded %ld bytes, retrieved graph %s\n", binary_size, graph_name);

  /* 3. Alignment, sizes, buffers, finalize. */
  QnnLpaiBackend_BufferAlignmentReq_t bufferAlignmentReq = QNN_LPAI_BACKEND_ALIGNMENT_REQ_INIT;
  QnnLpaiBackend_CustomProperty_t customBackendProp = QNN_LPAI_BACKEND_CUSTOM_PROPERTY_INIT;
  customBackendProp.option = QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ;
  customBackendProp.property = &bufferAlignmentReq;
  QnnBackend_Property_t backendProp = QNN_BACKEND_PROPERTY_INIT;
  backendProp.option = QNN_BACKEND_PROPERTY_OPTION_CUSTOM;
  backendProp.customProperty = &customBackendProp;
  QnnBackend_Property_t *backendPropPtrs[2] = {&backendProp, NULL};
  CHECK(g_qnn.backendGetProperty(g_backend, backendPropPtrs), "backendGetProperty(ALIGNMENT_REQ)");
  size_t startAddrAlignment = bufferAlignmentReq.startAddrAlignment;
  size_t sizeAlignment = bufferAlignmentReq.sizeAlignment;
  uint32_t scratch_size = 0, persistent_size = 0;
  CHECK(graph_mem_size(graph, QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE, &scratch_size), "SCRATCH_MEM_SIZE");
  CHECK(graph_mem_size(graph, QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE, &persistent_size),
        "PERSISTENT_MEM_SIZE");
  if (startAddrAlignment == 0 || sizeAlignment == 0 || scratch_size == 0)
    FAIL("expected alignments and a scratch size > 0");
  g_buffers[0] = allocate_aligned_memory(startAddrAlignment, sizeAlignment, scratch_size);
  if (!g_buffers[0]) FAIL("out of memory");
  CHECK(set_graph_mem(graph, QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM, g_buffers[0],
                      (uint32_t)round_up(scratch_size, sizeAlignment)), "graphSetConfig(SCRATCH_MEM)");
  if (persistent_size) {
    g_buffers[1] = allocate_aligned_memory(startAddrAlignment, sizeAlignment, persistent_size);
    if (!g_buffers[1]) FAIL("out of memory");
    CHECK(set_graph_mem(graph, QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM, g_buffers[1],
                        (uint32_t)round_up(persistent_size, sizeAlignment)), "graphSetConfig(PERSISTENT_MEM)");
  }
  CHECK(g_qnn.graphFinalize(graph, NULL, NULL), "graphFinalize");
  printf("3. alignment start=%zu size=%zu, scratch %u, persistent %u, finalized\n", startAddrAlignment,
         sizeAlignment, scratch_size, persistent_size);

  /* 4. User-provided IO memory, as the snippet allocates it. */
  Qnn_Tensor_t tensors[2 * MAX_IO];
  size_t numTensors = numInputs + numOutputs;
  for (uint32_t i = 0; i < numTensors; i++) {
    Qnn_Tensor_t *tensor = &tensors[i];
    *tensor = i < numInputs ? inputs[i] : outputs[i - numInputs];
    size_t dataSize = calculate_tensor_size(tensor);
    if (dataSize == 0) FAIL("tensor %s: a data type this sample does not size", tensor_name(tensor));
    g_buffers[2 + i] = allocate_aligned_memory(startAddrAlignment, sizeAlignment, dataSize);
    if (!g_buffers[2 + i]) FAIL("out of memory");
    set_client_buf(tensor, g_buffers[2 + i], dataSize);
    if (i < numInputs)
      for (size_t b = 0; b < dataSize; b++) ((uint8_t *)g_buffers[2 + i])[b] = (uint8_t)((b + i) % 251);
    else
      memset(g_buffers[2 + i], 0, dataSize);
  }
  printf("4. %zu IO buffers allocated\n", numTensors);

  /* 5. Execute. */
  CHECK(g_qnn.graphExecute(graph, tensors, (uint32_t)numInputs, tensors + numInputs, (uint32_t)numOutputs, NULL,
                           NULL), "graphExecute");
  for (size_t o = 0; o < numOutputs; o++) {
    const Qnn_Tensor_t *t = &tensors[numInputs + o];
    size_t n = calculate_tensor_size(t);
    printf("output %s:", tensor_name(t));
    for (size_t b = 0; b < n && b < 8; b++) printf(" %u", ((const uint8_t *)g_buffers[2 + numInputs + o])[b]);
    printf("\n");
  }
  cleanup();
  printf("5. executed\nPASSED\n");
  return 0;
}
