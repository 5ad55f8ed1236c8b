/* saver_client.c: records a tiny graph with the vendor's QNN Saver backend, as an application
 * that supports Saver does: dlopen libQnnSaver.so, QnnSaver_initialize (Saver/QnnSaver.h) with
 * OUTPUT_DIRECTORY and BACKEND_ID (HTP) configs, then the ordinary QNN calls through the Saver
 * provider: log, backend, device, context, graph x -> Relu -> y, finalize, execute, free.
 * Saver computes nothing: it writes saver_output.c and params.bin into the output directory.
 * Usage: saver_client <libQnnSaver.so> <output directory>
 * Prints "initialize=<code>" and one "<call>=<code>" line per QNN call; exit status 0 when every
 * call returned QNN_SUCCESS (Saver's DUMMY_RETVALUE counts as success for queries).
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "QnnInterface.h"
#include "HTP/QnnHtpCommon.h"
#include "Saver/QnnSaver.h"

static int failures;

static void report(const char *call, Qnn_ErrorHandle_t code) {
  printf("%s=%llu\n", call, (unsigned long long)code);
  if (code != QNN_SUCCESS && code != QNN_SAVER_ERROR_DUMMY_RETVALUE) ++failures;
}

static Qnn_Tensor_t tensor(const char *name, Qnn_TensorType_t type, uint32_t *dims, float *data) {
  Qnn_Tensor_t t = QNN_TENSOR_INIT;
  t.v1.name = name;
  t.v1.type = type;
  t.v1.dataType = QNN_DATATYPE_FLOAT_32;
  t.v1.rank = 2;
  t.v1.dimensions = dims;
  t.v1.memType = QNN_TENSORMEMTYPE_RAW;
  t.v1.clientBuf.data = data;
  t.v1.clientBuf.dataSize = data ? 4 * sizeof(float) : 0;
  return t;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <libQnnSaver.so> <output directory>\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  typedef Qnn_ErrorHandle_t (*InitializeFn)(const QnnSaver_Config_t **);
  typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const QnnInterface_t ***, uint32_t *);
  InitializeFn initialize = (InitializeFn)(size_t)dlsym(lib, "QnnSaver_initialize");
  GetProvidersFn get_providers = (GetProvidersFn)(size_t)dlsym(lib, "QnnInterface_getProviders");
  if (!initialize || !get_providers) {
    fprintf(stderr, "libQnnSaver.so lacks QnnSaver_initialize or QnnInterface_getProviders\n");
    return 2;
  }
  QnnSaver_Config_t out_dir = QNN_SAVER_CONFIG_INIT;
  out_dir.option = QNN_SAVER_CONFIG_OPTION_OUTPUT_DIRECTORY;
  out_dir.outputDirectory = argv[2];
  QnnSaver_Config_t backend_id = QNN_SAVER_CONFIG_INIT;
  backend_id.option = QNN_SAVER_CONFIG_OPTION_BACKEND_ID;
  backend_id.backendId = QNN_BACKEND_ID_HTP;
  const QnnSaver_Config_t *configs[] = {&out_dir, &backend_id, NULL};
  report("initialize", initialize(configs));

  const QnnInterface_t **providers = NULL;
  uint32_t count = 0;
  report("getProviders", get_providers(&providers, &count));
  if (failures || count == 0) return 1;
  QNN_INTERFACE_VER_TYPE qnn = providers[0]->QNN_INTERFACE_VER_NAME;
  printf("provider=%s core=%u.%u\n", providers[0]->providerName, providers[0]->apiVersion.coreApiVersion.major,
         providers[0]->apiVersion.coreApiVersion.minor);

  Qnn_BackendHandle_t backend = NULL;
  Qnn_DeviceHandle_t device = NULL;
  Qnn_ContextHandle_t context = NULL;
  Qnn_GraphHandle_t graph = NULL;
  report("backendCreate", qnn.backendCreate(NULL, NULL, &backend));
  report("deviceCreate", qnn.deviceCreate(NULL, NULL, &device));
  report("contextCreate", qnn.contextCreate(backend, device, NULL, &context));
  report("graphCreate", qnn.graphCreate(context, "relu_graph", NULL, &graph));
  uint32_t dims[2] = {1, 4};
  Qnn_Tensor_t x = tensor("x", QNN_TENSOR_TYPE_APP_WRITE, dims, NULL);
  Qnn_Tensor_t y = tensor("y", QNN_TENSOR_TYPE_APP_READ, dims, NULL);
  report("tensorCreateGraphTensor(x)", qnn.tensorCreateGraphTensor(graph, &x));
  report("tensorCreateGraphTensor(y)", qnn.tensorCreateGraphTensor(graph, &y));
  Qnn_OpConfig_t op = QNN_OPCONFIG_INIT;
  op.v1.name = "relu";
  op.v1.packageName = QNN_OP_PACKAGE_NAME_QTI_AISW;
  op.v1.typeName = QNN_OP_RELU;
  op.v1.numOfInputs = 1;
  op.v1.inputTensors = &x;
  op.v1.numOfOutputs = 1;
  op.v1.outputTensors = &y;
  report("graphAddNode", qnn.graphAddNode(graph, op));
  report("graphFinalize", qnn.graphFinalize(graph, NULL, NULL));
  float in[4] = {-1.0f, 2.0f, -3.0f, 4.0f}, out[4] = {0};
  Qnn_Tensor_t xin = tensor("x", QNN_TENSOR_TYPE_APP_WRITE, dims, in);
  Qnn_Tensor_t yout = tensor("y", QNN_TENSOR_TYPE_APP_READ, dims, out);
  xin.v1.id = x.v1.id;
  yout.v1.id = y.v1.id;
  report("graphExecute", qnn.graphExecute(graph, &xin, 1, &yout, 1, NULL, NULL));
  report("contextFree", qnn.contextFree(context, NULL));
  report("deviceFree", qnn.deviceFree(device));
  report("backendFree", qnn.backendFree(backend));
  dlclose(lib);
  return failures ? 1 : 0;
}
