/* interface_only.c: an application and an op package built the way the SDK's sample apps are
 * (-DQNN_API="__attribute__((visibility(\"default\")))" -Wall -Wextra -Werror, as C and as C++),
 * that includes "QnnInterface.h" and nothing else from QNN: tensors (QnnTensor.h types and the
 * Qnn_Tensor_t initializers), op type and parameter names (QnnOpDef.h) and the op package
 * interface (QnnOpPackage.h) must all come through it.
 * Usage: interface_only <backend.so>: prints "ok <n> ops" (the backend's supported-op count, all
 * QnnOpDef.h names found among them checked) or what failed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "QnnInterface.h"

/* ---- an op package entry point, exported like the SDK's op packages export theirs ---- */
static Qnn_ErrorHandle_t package_init(QnnOpPackage_GlobalInfrastructure_t infrastructure) {
  (void)infrastructure;
  return QNN_SUCCESS;
}

static Qnn_ErrorHandle_t package_get_info(const QnnOpPackage_Info_t **info) {
  static const char *ops[] = {QNN_OP_RELU, QNN_OP_CONV_2D};
  static const Qnn_ApiVersion_t api = QNN_API_VERSION_INIT;
  static QnnOpPackage_Info_t package_info = QNN_OP_PACKAGE_INFO_INIT;
  package_info.packageName = "compat.package";
  package_info.operationNames = ops;
  package_info.numOperations = 2;
  package_info.sdkApiVersion = &api;
  *info = &package_info;
  return QNN_SUCCESS;
}

static Qnn_ErrorHandle_t package_validate(Qnn_OpConfig_t op) {
  return strcmp(op.v1.typeName, QNN_OP_RELU) == 0 ? QNN_SUCCESS : QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE;
}

#ifdef __cplusplus
extern "C" {
#endif
QNN_API Qnn_ErrorHandle_t CompatPackage_interfaceProvider(QnnOpPackage_Interface_t *provided);
#ifdef __cplusplus
}
#endif

Qnn_ErrorHandle_t CompatPackage_interfaceProvider(QnnOpPackage_Interface_t *provided) {
  QnnOpPackage_Interface_t iface = QNN_OP_PACKAGE_INTERFACE_INIT;
  iface.v1_4.init = package_init;
  iface.v1_4.getInfo = package_get_info;
  iface.v1_4.validateOpConfig = package_validate;
  *provided = iface;
  return QNN_SUCCESS;
}

/* ---- the application side ---- */
static int failures;

#define EXPECT(cond, what)                         \
  do {                                             \
    if (!(cond)) {                                 \
      printf("FAILED: %s\n", what);                \
      ++failures;                                  \
    }                                              \
  } while (0)

int main(int argc, char **argv) {
  /* Initializers of the types an application builds graphs with. */
  Qnn_Tensor_t tensor = QNN_TENSOR_INIT;
  Qnn_Tensor_t tensor_v2 = QNN_TENSOR_INIT;
#ifdef __cplusplus
  Qnn_TensorV2_t fields_v2 = QNN_TENSOR_V2_INIT;
#else
  /* QNN_TENSOR_V2_INIT elides the braces of Qnn_SparseParams_t's anonymous union, as the
   * vendor's macro does: C's -Wall (-Wmissing-braces) rejects it under -Werror, C++ does not. */
  Qnn_TensorV2_t fields_v2;
  memset(&fields_v2, 0, sizeof fields_v2);
#endif
  Qnn_Param_t param = QNN_PARAM_INIT;
  Qnn_OpConfig_t op = QNN_OPCONFIG_INIT;
  Qnn_QuantizeParams_t quant = QNN_QUANTIZE_PARAMS_INIT;
  Qnn_ClientBuffer_t buffer = QNN_CLIENT_BUFFER_INIT;
  Qnn_TensorSet_t set = QNN_TENSOR_SET_INIT;
  QnnGraph_Config_t graph_config = QNN_GRAPH_CONFIG_INIT;
  QnnContext_Config_t context_config = QNN_CONTEXT_CONFIG_INIT;
  QnnDevice_Config_t device_config = QNN_DEVICE_CONFIG_INIT;
  QnnBackend_Config_t backend_config = QNN_BACKEND_CONFIG_INIT;
  QnnInterface_t interface_init = QNN_INTERFACE_INIT;
  QNN_INTERFACE_VER_TYPE qnn = QNN_INTERFACE_VER_TYPE_INIT;
  QnnTensor_CreateGraphTensorFn_t create_graph_tensor = NULL;
  QnnOpPackage_InterfaceProvider_t provider = CompatPackage_interfaceProvider;
  (void)param, (void)quant, (void)set, (void)graph_config, (void)context_config;
  (void)device_config, (void)backend_config, (void)interface_init;

  tensor_v2.version = QNN_TENSOR_VERSION_2;
  tensor_v2.v2 = fields_v2;
  tensor.v1.name = "x";
  EXPECT(tensor.version == QNN_TENSOR_VERSION_1 && tensor.v1.dataFormat == QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER &&
             tensor_v2.v2.clientBuf.data == NULL && strcmp(tensor.v1.name, "x") == 0,
         "Qnn_Tensor_t initializers");
  tensor_v2.v2.clientBuf = buffer;
  op.v1.packageName = QNN_OP_PACKAGE_NAME_QTI_AISW;
  op.v1.typeName = QNN_OP_RELU;
  EXPECT(strcmp(QNN_OP_CONV_2D_PARAM_PAD_AMOUNT, "pad_amount") == 0, "QnnOpDef.h parameter names");
  EXPECT(strcmp(QNN_OP_PACKAGE_NAME_QTI_AISW, "qti.aisw") == 0, "QnnOpDef.h package name");

  QnnOpPackage_Interface_t package;
  const QnnOpPackage_Info_t *info = NULL;
  EXPECT(provider(&package) == QNN_SUCCESS && package.interfaceVersion.major == 1 &&
             package.v1_4.getInfo(&info) == QNN_SUCCESS && info->numOperations == 2 &&
             package.v1_4.validateOpConfig(op) == QNN_SUCCESS,
         "the op package interface");

  if (argc < 2) return failures ? 1 : 0;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("FAILED: dlopen %s\n", dlerror());
    return 1;
  }
  typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const QnnInterface_t ***, uint32_t *);
  GetProvidersFn get_providers = (GetProvidersFn)(size_t)dlsym(lib, "QnnInterface_getProviders");
  const QnnInterface_t **providers = NULL;
  uint32_t count = 0;
  EXPECT(get_providers && get_providers(&providers, &count) == QNN_SUCCESS && count > 0, "getProviders");
  if (failures) return 1;
  qnn = providers[0]->QNN_INTERFACE_VER_NAME;
  create_graph_tensor = qnn.tensorCreateGraphTensor;
  EXPECT(create_graph_tensor != NULL, "tensorCreateGraphTensor in the table");
  Qnn_LogHandle_t log = NULL;
  Qnn_BackendHandle_t backend = NULL;
  EXPECT(qnn.backendCreate(log, NULL, &backend) == QNN_SUCCESS, "backendCreate");
  const QnnBackend_OperationName_t *names = NULL;
  uint32_t n = 0;
  EXPECT(qnn.backendGetSupportedOperations(backend, &n, &names) == QNN_SUCCESS, "backendGetSupportedOperations");
  const char *wanted[] = {QNN_OP_CONV_2D, QNN_OP_RELU, QNN_OP_FULLY_CONNECTED, QNN_OP_RESHAPE};
  for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; ++w) {
    int found = 0;
    for (uint32_t i = 0; i < n; ++i) found |= names[i].name && strcmp(names[i].name, wanted[w]) == 0;
    EXPECT(found, wanted[w]);
  }
  qnn.backendFree(backend);
  dlclose(lib);
  if (!failures) printf("ok %u ops\n", n);
  return failures ? 1 : 0;
}
