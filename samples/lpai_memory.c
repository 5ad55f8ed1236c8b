/* lpai_memory.c: the LPAI memory workflow (QNN LPAI Memory Management, "Recommended Workflow"),
 * written only against the QNN C API headers (QnnInterface.h, LPAI/QnnLpai*.h).
 *
 * It dlopens an LPAI backend library (argv[1]), picks the QNN_BACKEND_ID_LPAI provider, builds a
 * small RNN-like uint8 graph -- y = x + state, state' = Relu(y), the state an APP_READWRITE
 * tensor the backend keeps in persistent memory -- and then follows the eight steps:
 *   1. query the backend's alignment requirements (QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ);
 *   2. query the scratch memory size (QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE);
 *   3. query the persistent memory size (QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE);
 *   4. allocate aligned scratch and persistent buffers;
 *   5. pass them with QnnGraph_setConfig (QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM / PERSISTENT_MEM);
 *   6. QnnGraph_finalize;
 *   7. provide aligned user IO buffers;
 *   8. execute: three executes with x = 1 must give y = 1, 2, 3 (the state carried over).
 *
 * Usage: lpai_memory <libQnnLpai.so>
 * Exit status: 0 when every step succeeded and the outputs are right, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#define _ISOC11_SOURCE

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnInterface.h"
#include "QnnOpDef.h"
#include "LPAI/QnnLpaiBackend.h"
#include "LPAI/QnnLpaiCommon.h"
#include "LPAI/QnnLpaiGraph.h"

#ifndef DEFAULT_BACKEND
#define DEFAULT_BACKEND "libQnnLpaiEmu.so"
#endif

enum { LEN = 8 };

static void *g_lib;
static QNN_INTERFACE_VER_TYPE g_qnn;
static Qnn_LogHandle_t g_log;
static Qnn_BackendHandle_t g_backend;
static Qnn_ContextHandle_t g_context;
static void *g_buffers[4];   /* scratch, persistent, x, y: alive until after QnnContext_free */

static void cleanup(void) {
  if (g_context) g_qnn.contextFree(g_context, NULL);
  if (g_backend) g_qnn.backendFree(g_backend);
  if (g_log) g_qnn.logFree(g_log);
  g_context = NULL, g_backend = NULL, g_log = NULL;
  for (int i = 0; i < 4; i++) free(g_buffers[i]), g_buffers[i] = NULL;
  if (g_lib) dlclose(g_lib);
  g_lib = NULL;
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

static void log_callback(const char *fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args) {
  (void)timestamp;
  if (!fmt || level > QNN_LOG_LEVEL_WARN) return;
  char line[1024];
  vsnprintf(line, sizeof line, fmt, args);
  fprintf(stderr, "[qnn %d] %s\n", (int)level, line);
}

static uint32_t g_dims[2] = {1, LEN};

static Qnn_Tensor_t make_tensor(const char *name, Qnn_TensorType_t type) {
  Qnn_Tensor_t t = QNN_TENSOR_INIT;
  t.version = QNN_TENSOR_VERSION_1;
  t.v1.name = name;
  t.v1.type = type;
  t.v1.dataFormat = QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER;
  t.v1.dataType = QNN_DATATYPE_UFIXED_POINT_8;
  t.v1.quantizeParams.encodingDefinition = QNN_DEFINITION_DEFINED;
  t.v1.quantizeParams.quantizationEncoding = QNN_QUANTIZATION_ENCODING_SCALE_OFFSET;
  t.v1.quantizeParams.scaleOffsetEncoding.scale = 1.0f;
  t.v1.quantizeParams.scaleOffsetEncoding.offset = 0;
  t.v1.rank = 2;
  t.v1.dimensions = g_dims;
  t.v1.memType = QNN_TENSORMEMTYPE_RAW;
  return t;
}

static Qnn_OpConfig_t make_op(const char *name, const char *type, Qnn_Tensor_t *ins, uint32_t n_in,
                              Qnn_Tensor_t *outs) {
  Qnn_OpConfig_t op = QNN_OPCONFIG_INIT;
  op.version = QNN_OPCONFIG_VERSION_1;
  op.v1.name = name;
  op.v1.packageName = QNN_OP_PACKAGE_NAME_QTI_AISW;
  op.v1.typeName = type;
  op.v1.numOfInputs = n_in;
  op.v1.inputTensors = ins;
  op.v1.numOfOutputs = 1;
  op.v1.outputTensors = outs;
  return op;
}

static size_t round_up(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

/* Step 4's allocator: an aligned start, a size rounded up to the size alignment. */
static void *allocate_aligned_memory(uint32_t start_alignment, uint32_t size_alignment, size_t size) {
  return aligned_alloc(start_alignment, round_up(size ? size : 1, size_alignment > start_alignment
                                                                      ? size_alignment : start_alignment));
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
  const char *path = argc > 1 ? argv[1] : DEFAULT_BACKEND;
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    fprintf(stderr, "ERROR: cannot load %s: %s\n", path, dlerror());
    return 1;
  }
  typedef Qnn_ErrorHandle_t (*GetProviders)(const QnnInterface_t ***, uint32_t *);
  GetProviders get_providers = (GetProviders)dlsym(g_lib, "QnnInterface_getProviders");
  const QnnInterface_t **providers = NULL;
  uint32_t count = 0;
  if (!get_providers || get_providers(&providers, &count) != QNN_SUCCESS || count == 0) {
    fprintf(stderr, "ERROR: %s has no QNN provider\n", path);
    cleanup();
    return 1;
  }
  const QnnInterface_t *lpai = NULL;
  for (uint32_t i = 0; i < count; i++)
    if (providers[i]->backendId == QNN_BACKEND_ID_LPAI) lpai = providers[i];
  if (!lpai) {
    fprintf(stderr, "ERROR: %s has no LPAI provider (backend id %d)\n", path, QNN_BACKEND_ID_LPAI);
    cleanup();
    return 1;
  }
  g_qnn = lpai->QNN_INTERFACE_VER_NAME;
  printf("provider %s, LPAI API %u.%u.%u\n", lpai->providerName, lpai->apiVersion.backendApiVersion.major,
         lpai->apiVersion.backendApiVersion.minor, lpai->apiVersion.backendApiVersion.patch);

  CHECK(g_qnn.logCreate(log_callback, QNN_LOG_LEVEL_WARN, &g_log), "logCreate");
  QnnLpaiBackend_CustomConfigHwInfo_t hwInfo = QNN_LPAI_BACKEND_CUSTOM_CONFIG_HW_INFO_INIT;
  hwInfo.lpaiTarget = QNN_LPAI_BACKEND_TARGET_X86;
  QnnLpaiBackend_CustomConfig_t hwCfg = QNN_LPAI_BACKEND_CUSTOM_CONFIG_INIT;
  hwCfg.option = QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO;
  hwCfg.config = &hwInfo;
  QnnBackend_Config_t backendConfig = QNN_BACKEND_CONFIG_INIT;
  backendConfig.option = QNN_BACKEND_CONFIG_OPTION_CUSTOM;
  backendConfig.customConfig = &hwCfg;
  const QnnBackend_Config_t *backendCfgPtrs[2] = {&backendConfig, NULL};
  CHECK(g_qnn.backendCreate(g_log, backendCfgPtrs, &g_backend), "backendCreate");
  CHECK(g_qnn.contextCreate(g_backend, NULL, NULL, &g_context), "contextCreate");
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphCreate(g_context, "rnn", NULL, &graph), "graphCreate");
  Qnn_Tensor_t x = make_tensor("x", QNN_TENSOR_TYPE_APP_WRITE);
  Qnn_Tensor_t state = make_tensor("state", QNN_TENSOR_TYPE_APP_READWRITE);
  Qnn_Tensor_t y = make_tensor("y", QNN_TENSOR_TYPE_APP_READ);
  CHECK(g_qnn.tensorCreateGraphTensor(graph, &x), "tensorCreateGraphTensor(x)");
  CHECK(g_qnn.tensorCreateGraphTensor(graph, &state), "tensorCreateGraphTensor(state)");
  CHECK(g_qnn.tensorCreateGraphTensor(graph, &y), "tensorCreateGraphTensor(y)");
  Qnn_Tensor_t add_in[2] = {x, state};
  CHECK(g_qnn.graphAddNode(graph, make_op("add", QNN_OP_ELEMENT_WISE_ADD, add_in, 2, &y)), "graphAddNode(add)");
  CHECK(g_qnn.graphAddNode(graph, make_op("keep", QNN_OP_RELU, &y, 1, &state)), "graphAddNode(keep)");

  /* 1. */
  QnnLpaiBackend_BufferAlignmentReq_t bufferAlignmentReq = QNN_LPAI_BACKEND_ALIGNMENT_REQ_INIT;
  QnnLpaiBackend_CustomProperty_t customBackendProp = QNN_LPAI_BACKEND_CUSTOM_PROPERTY_INIT;
  customBackendProp.option = QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ;
  customBackendProp.property = &bufferAlignmentReq;
  QnnBackend_Property_t backendProp = QNN_BACKEND_PROPERTY_INIT;
  backendProp.option = QNN_BACKEND_PROPERTY_OPTION_CUSTOM;
  backendProp.customProperty = &customBackendProp;
  QnnBackend_Property_t *backendPropPtrs[2] = {&backendProp, NULL};
  CHECK(g_qnn.backendGetProperty(g_backend, backendPropPtrs), "backendGetProperty(ALIGNMENT_REQ)");
  uint32_t start_alignment = bufferAlignmentReq.startAddrAlignment;
  uint32_t size_alignment = bufferAlignmentReq.sizeAlignment;
  printf("1. alignment start=%u size=%u\n", start_alignment, size_alignment);
  if (start_alignment == 0 || size_alignment == 0) {
    fprintf(stderr, "ERROR: no alignment requirement answered\n");
    cleanup();
    return 1;
  }
  /* 2. and 3. */
  uint32_t scratch_size = 0, persistent_size = 0;
  CHECK(graph_mem_size(graph, QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE, &scratch_size), "SCRATCH_MEM_SIZE");
  printf("2. scratch size %u\n", scratch_size);
  CHECK(graph_mem_size(graph, QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE, &persistent_size),
        "PERSISTENT_MEM_SIZE");
  printf("3. persistent size %u\n", persistent_size);
  if (scratch_size == 0 || persistent_size == 0) {
    fprintf(stderr, "ERROR: expected scratch and persistent sizes > 0\n");
    cleanup();
    return 1;
  }
  /* 4. */
  g_buffers[0] = allocate_aligned_memory(start_alignment, size_alignment, scratch_size);
  g_buffers[1] = allocate_aligned_memory(start_alignment, size_alignment, persistent_size);
  if (!g_buffers[0] || !g_buffers[1]) {
    fprintf(stderr, "ERROR: out of memory\n");
    cleanup();
    return 1;
  }
  printf("4. allocated scratch %p, persistent %p\n", g_buffers[0], g_buffers[1]);
  /* 5. */
  CHECK(set_graph_mem(graph, QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM, g_buffers[0],
                      (uint32_t)round_up(scratch_size, size_alignment)), "graphSetConfig(SCRATCH_MEM)");
  CHECK(set_graph_mem(graph, QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM, g_buffers[1],
                      (uint32_t)round_up(persistent_size, size_alignment)), "graphSetConfig(PERSISTENT_MEM)");
  printf("5. set scratch and persistent memory\n");
  /* 6. */
  CHECK(g_qnn.graphFinalize(graph, NULL, NULL), "graphFinalize");
  printf("6. finalized\n");
  /* 7. */
  g_buffers[2] = allocate_aligned_memory(start_alignment, size_alignment, LEN);
  g_buffers[3] = allocate_aligned_memory(start_alignment, size_alignment, LEN);
  if (!g_buffers[2] || !g_buffers[3]) {
    fprintf(stderr, "ERROR: out of memory\n");
    cleanup();
    return 1;
  }
  Qnn_Tensor_t in = x, out = y;
  in.v1.clientBuf.data = g_buffers[2];
  in.v1.clientBuf.dataSize = LEN;
  out.v1.clientBuf.data = g_buffers[3];
  out.v1.clientBuf.dataSize = LEN;
  printf("7. user IO buffers %p %p\n", g_buffers[2], g_buffers[3]);
  /* 8. */
  int ok = 1;
  for (int k = 1; k <= 3; k++) {
    memset(g_buffers[2], 1, LEN);
    memset(g_buffers[3], 0, LEN);
    CHECK(g_qnn.graphExecute(graph, &in, 1, &out, 1, NULL, NULL), "graphExecute");
    const uint8_t *result = g_buffers[3];
    for (int i = 0; i < LEN; i++) ok &= result[i] == k;
    printf("8. executed #%d: y[0] = %u\n", k, result[0]);
  }
  cleanup();
  printf(ok ? "result ok\nPASSED\n"
            : "result WRONG: expected 1, 2, 3 (the state carried in persistent memory)\nFAILED\n");
  return ok ? 0 : 1;
}
