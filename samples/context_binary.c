/* context_binary.c: prepare once, save, load many times — the QNN context binary round trip,
 * written only against the QNN C API headers (QnnInterface.h and System/QnnSystemInterface.h).
 *
 * 1. dlopens a QNN backend (argv[1]) and builds two graphs in one context:
 *      "conv_relu_fc": Conv2d(3x3, pad 1, 1x6x6x3 -> 4) + Relu + Reshape + FullyConnected(-> 8)
 *      "mul_add_relu": Relu(a * b + bias), two inputs of 1x4x4x2 and a static bias of 2
 *    with deterministic static weights; finalizes and executes both, keeping the outputs.
 * 2. contextGetBinarySize + contextGetBinary, writes the binary to a file (argv[3]), then frees
 *    the context, device, backend and log.
 * 3. Re-creates log, backend and device, reads the file back, dlopens the System library
 *    (argv[2]) and lists the binary's graphs and their input/output tensors with
 *    systemContextGetBinaryInfo (binary info v1/v2/v3, graph info v1/v2/v3, tensor v1/v2).
 * 4. contextValidateBinary, contextCreateFromBinary, graphRetrieve by name, executes both graphs
 *    with tensors taken from the System library's listing (ids, dims, data types as the binary
 *    reports them, matched to the client's data by name) and compares the outputs with step 1
 *    byte for byte (memcmp). Finally two damaged copies must be refused with an error code by
 *    contextValidateBinary (when the backend offers it) and contextCreateFromBinary: one truncated
 *    to half its size and one with a flipped byte in the middle.
 *
 * Usage: context_binary [backend.so] [libQnnSystem.so] [binary-file] [data_unchecked]
 *   Defaults: DEFAULT_BACKEND, DEFAULT_SYSTEM_LIBRARY, DEFAULT_BINARY (baked in by the Makefile).
 *   data_unchecked: the backend is known not to checksum its binaries (the vendor's libQnnHtp.so
 *   loads a copy with a flipped weight byte); that copy loading is then reported, not a failure.
 *   contextValidateBinary answering NOT_SUPPORTED (as the vendor's does) is reported, not a failure.
 * Exit status: 0 and "PASSED" when all of the above holds; 1 and "FAILED" (or "ERROR: ...")
 * otherwise.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnInterface.h"
#include "QnnOpDef.h"
#include "System/QnnSystemInterface.h"

#ifndef DEFAULT_BACKEND
#define DEFAULT_BACKEND "libQnnHtpEmu.so"
#endif
#ifndef DEFAULT_SYSTEM_LIBRARY
#define DEFAULT_SYSTEM_LIBRARY "libQnnSystem.so"
#endif
#ifndef DEFAULT_BINARY
#define DEFAULT_BINARY "context_binary.bin"
#endif

/* Graph 1 shapes (NHWC). */
enum { H = 6, W = 6, CIN = 3, COUT = 4, KH = 3, KW = 3, FLAT = H * W * COUT, FC_OUT = 8 };
/* Graph 2 shapes. */
enum { EH = 4, EW = 4, EC = 2, ECOUNT = EH * EW * EC };

/* Everything that must be freed, so that every exit path cleans up the same way. */
static void *g_lib, *g_sys_lib;
static QNN_INTERFACE_VER_TYPE g_qnn;
static QNN_SYSTEM_INTERFACE_VER_TYPE g_sys;
static int g_have_sys;
static Qnn_LogHandle_t g_log;
static Qnn_BackendHandle_t g_backend;
static Qnn_DeviceHandle_t g_device;
static Qnn_ContextHandle_t g_context;
static QnnSystemContext_Handle_t g_sys_context;
static unsigned char *g_binary, *g_corrupted;

/* Frees the QNN objects of one "session" (context, device, backend, log), in reverse order. */
static void free_runtime(void) {
  if (g_context) g_qnn.contextFree(g_context, NULL);
  if (g_device) g_qnn.deviceFree(g_device);
  if (g_backend) g_qnn.backendFree(g_backend);
  if (g_log) g_qnn.logFree(g_log);
  g_context = NULL, g_device = NULL, g_backend = NULL, g_log = NULL;
}

static void cleanup(void) {
  free_runtime();
  if (g_sys_context && g_have_sys) g_sys.systemContextFree(g_sys_context);
  g_sys_context = NULL;
  free(g_binary), free(g_corrupted);
  g_binary = NULL, g_corrupted = NULL;
  if (g_sys_lib) dlclose(g_sys_lib);
  if (g_lib) dlclose(g_lib);
  g_sys_lib = NULL, g_lib = NULL;
}

static const char *error_text(Qnn_ErrorHandle_t err) {
  const char *msg = NULL;
  if (g_qnn.errorGetMessage && g_qnn.errorGetMessage(err, &msg) == QNN_SUCCESS && msg) return msg;
  return "(no message)";
}

/* Any QNN failure of the main flow is fatal: print the function and the code, return 1; main()
 * cleans up. */
#define CHECK(call, name)                                                                   \
  do {                                                                                      \
    Qnn_ErrorHandle_t err_ = (call);                                                        \
    if (err_ != QNN_SUCCESS) {                                                              \
      fprintf(stderr, "ERROR: %s failed with error %llu: %s\n", name,                      \
              (unsigned long long)err_, error_text(err_));                                  \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

static void log_callback(const char *fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args) {
  static const char *names[] = {"?", "ERROR", "WARN", "INFO", "VERBOSE", "DEBUG"};
  (void)timestamp;
  if (!fmt) return;
  /* One line per message, whether or not the backend ends its messages with a newline. */
  char line[1024];
  vsnprintf(line, sizeof line, fmt, args);
  size_t len = strlen(line);
  while (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
  fprintf(stderr, "[qnn %s] %s\n", level <= QNN_LOG_LEVEL_DEBUG ? names[level] : "?", line);
}

/* ---------------------------------------------------------------------------------------------
 * Building blocks for graphs (v2 tensors with raw client buffers), as in conv_relu_fc.c.
 */
static Qnn_Tensor_t make_tensor(const char *name, Qnn_TensorType_t type, uint32_t rank,
                                uint32_t *dims, Qnn_DataType_t dtype, void *data, uint32_t size) {
  Qnn_Tensor_t t;
  memset(&t, 0, sizeof t);
  t.version = QNN_TENSOR_VERSION_2;
  t.v2.name = name;
  t.v2.type = type;
  t.v2.dataFormat = QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER;
  t.v2.dataType = dtype;
  t.v2.quantizeParams.encodingDefinition = QNN_DEFINITION_UNDEFINED;
  t.v2.quantizeParams.quantizationEncoding = QNN_QUANTIZATION_ENCODING_UNDEFINED;
  t.v2.rank = rank;
  t.v2.dimensions = dims;
  t.v2.memType = QNN_TENSORMEMTYPE_RAW;
  t.v2.clientBuf.data = data;
  t.v2.clientBuf.dataSize = size;
  t.v2.sparseParams.type = QNN_SPARSE_LAYOUT_UNDEFINED;
  return t;
}

static Qnn_OpConfig_t make_op(const char *name, const char *type, Qnn_Param_t *params,
                              uint32_t num_params, Qnn_Tensor_t *inputs, uint32_t num_inputs,
                              Qnn_Tensor_t *outputs, uint32_t num_outputs) {
  Qnn_OpConfig_t op;
  memset(&op, 0, sizeof op);
  op.version = QNN_OPCONFIG_VERSION_1;
  op.v1.name = name;
  op.v1.packageName = QNN_OP_PACKAGE_NAME_QTI_AISW;
  op.v1.typeName = type;
  op.v1.numOfParams = num_params;
  op.v1.params = params;
  op.v1.numOfInputs = num_inputs;
  op.v1.inputTensors = inputs;
  op.v1.numOfOutputs = num_outputs;
  op.v1.outputTensors = outputs;
  return op;
}

static Qnn_Param_t tensor_param(const char *name, Qnn_Tensor_t t) {
  Qnn_Param_t p;
  memset(&p, 0, sizeof p);
  p.paramType = QNN_PARAMTYPE_TENSOR;
  p.name = name;
  p.tensorParam = t;
  return p;
}

/* Deterministic, exactly representable data in [-1, 1). */
static float pattern(int i, int mul, int mod) { return (float)((i * mul) % mod - mod / 2) / (float)mod; }

/* The client's data: static weights, the inputs, and the outputs of both runs. Static because
 * the backend may keep pointers to static tensor data until the graph is finalized. */
static float conv_w[KH * KW * CIN * COUT], conv_b[COUT], fc_w[FC_OUT * FLAT], fc_b[FC_OUT];
static float in_x[H * W * CIN], out_y_built[FC_OUT], out_y_loaded[FC_OUT];
static float ew_bias[EC], in_a[ECOUNT], in_b[ECOUNT], out_z_built[ECOUNT], out_z_loaded[ECOUNT];

static void fill_data(void) {
  for (int i = 0; i < KH * KW * CIN * COUT; ++i) conv_w[i] = pattern(i, 5, 13) * 0.5f;
  for (int i = 0; i < COUT; ++i) conv_b[i] = pattern(i, 3, 7) * 0.25f;
  for (int i = 0; i < FC_OUT * FLAT; ++i) fc_w[i] = pattern(i, 11, 23) * 0.125f;
  for (int i = 0; i < FC_OUT; ++i) fc_b[i] = pattern(i, 3, 11) * 0.5f;
  for (int i = 0; i < H * W * CIN; ++i) in_x[i] = pattern(i, 7, 19);
  for (int i = 0; i < EC; ++i) ew_bias[i] = pattern(i + 1, 3, 5) * 0.5f;
  for (int i = 0; i < ECOUNT; ++i) in_a[i] = pattern(i, 5, 17), in_b[i] = pattern(i, 9, 29) * 2.0f;
}

/* The graph inputs and outputs, by the names given when building: how the client finds its
 * buffers for the tensors the System library lists. */
typedef struct {
  const char *graph, *tensor;
  void *data;
  uint32_t size;
} ClientBuffer;

static ClientBuffer g_buffers[] = {
    {"conv_relu_fc", "x", in_x, sizeof in_x},
    {"conv_relu_fc", "y", out_y_loaded, sizeof out_y_loaded},
    {"mul_add_relu", "a", in_a, sizeof in_a},
    {"mul_add_relu", "b", in_b, sizeof in_b},
    {"mul_add_relu", "z", out_z_loaded, sizeof out_z_loaded},
};

static const ClientBuffer *find_buffer(const char *graph, const char *tensor) {
  for (size_t i = 0; i < sizeof g_buffers / sizeof g_buffers[0]; ++i)
    if (strcmp(g_buffers[i].graph, graph) == 0 && tensor && strcmp(g_buffers[i].tensor, tensor) == 0)
      return &g_buffers[i];
  return NULL;
}

/* Graph 1: Conv2d + Relu + Reshape + FullyConnected; executes it into out_y_built. */
static int build_conv_relu_fc(void) {
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphCreate(g_context, "conv_relu_fc", NULL, &graph), "graphCreate(conv_relu_fc)");

  /* Dimensions must outlive the graph, hence static. */
  static uint32_t x_dims[4] = {1, H, W, CIN}, cw_dims[4] = {KH, KW, CIN, COUT}, cb_dims[1] = {COUT};
  static uint32_t act_dims[4] = {1, H, W, COUT}, flat_dims[2] = {1, FLAT};
  static uint32_t fw_dims[2] = {FC_OUT, FLAT}, fb_dims[1] = {FC_OUT}, y_dims[2] = {1, FC_OUT};
  static uint32_t two[1] = {2}, two_by_two[2] = {2, 2};
  static uint32_t stride[2] = {1, 1}, dilation[2] = {1, 1}, pad[4] = {1, 1, 1, 1};

  Qnn_Tensor_t t_x = make_tensor("x", QNN_TENSOR_TYPE_APP_WRITE, 4, x_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_cw = make_tensor("conv_w", QNN_TENSOR_TYPE_STATIC, 4, cw_dims, QNN_DATATYPE_FLOAT_32, conv_w, sizeof conv_w);
  Qnn_Tensor_t t_cb = make_tensor("conv_b", QNN_TENSOR_TYPE_STATIC, 1, cb_dims, QNN_DATATYPE_FLOAT_32, conv_b, sizeof conv_b);
  Qnn_Tensor_t t_conv = make_tensor("conv_out", QNN_TENSOR_TYPE_NATIVE, 4, act_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_relu = make_tensor("relu_out", QNN_TENSOR_TYPE_NATIVE, 4, act_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_flat = make_tensor("flat", QNN_TENSOR_TYPE_NATIVE, 2, flat_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_fw = make_tensor("fc_w", QNN_TENSOR_TYPE_STATIC, 2, fw_dims, QNN_DATATYPE_FLOAT_32, fc_w, sizeof fc_w);
  Qnn_Tensor_t t_fb = make_tensor("fc_b", QNN_TENSOR_TYPE_STATIC, 1, fb_dims, QNN_DATATYPE_FLOAT_32, fc_b, sizeof fc_b);
  Qnn_Tensor_t t_y = make_tensor("y", QNN_TENSOR_TYPE_APP_READ, 2, y_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_stride = make_tensor("conv_stride", QNN_TENSOR_TYPE_STATIC, 1, two, QNN_DATATYPE_UINT_32, stride, sizeof stride);
  Qnn_Tensor_t t_dil = make_tensor("conv_dilation", QNN_TENSOR_TYPE_STATIC, 1, two, QNN_DATATYPE_UINT_32, dilation, sizeof dilation);
  Qnn_Tensor_t t_pad = make_tensor("conv_pad", QNN_TENSOR_TYPE_STATIC, 2, two_by_two, QNN_DATATYPE_UINT_32, pad, sizeof pad);
  Qnn_Tensor_t *all[] = {&t_x, &t_cw, &t_cb, &t_conv, &t_relu, &t_flat, &t_fw, &t_fb, &t_y, &t_stride, &t_dil, &t_pad};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    CHECK(g_qnn.tensorCreateGraphTensor(graph, all[i]), "tensorCreateGraphTensor(conv_relu_fc)");

  Qnn_Param_t conv_params[4];
  conv_params[0] = tensor_param(QNN_OP_CONV_2D_PARAM_STRIDE, t_stride);
  conv_params[1] = tensor_param(QNN_OP_CONV_2D_PARAM_PAD_AMOUNT, t_pad);
  conv_params[2] = tensor_param(QNN_OP_CONV_2D_PARAM_DILATION, t_dil);
  memset(&conv_params[3], 0, sizeof conv_params[3]);
  conv_params[3].paramType = QNN_PARAMTYPE_SCALAR;
  conv_params[3].name = QNN_OP_CONV_2D_PARAM_GROUP;
  conv_params[3].scalarParam.dataType = QNN_DATATYPE_UINT_32;
  conv_params[3].scalarParam.uint32Value = 1;
  Qnn_Tensor_t conv_in[3] = {t_x, t_cw, t_cb};
  CHECK(g_qnn.graphAddNode(graph, make_op("conv", QNN_OP_CONV_2D, conv_params, 4, conv_in, 3, &t_conv, 1)),
        "graphAddNode(Conv2d)");
  CHECK(g_qnn.graphAddNode(graph, make_op("relu", QNN_OP_RELU, NULL, 0, &t_conv, 1, &t_relu, 1)),
        "graphAddNode(Relu)");
  CHECK(g_qnn.graphAddNode(graph, make_op("flatten", QNN_OP_RESHAPE, NULL, 0, &t_relu, 1, &t_flat, 1)),
        "graphAddNode(Reshape)");
  Qnn_Tensor_t fc_in[3] = {t_flat, t_fw, t_fb};
  CHECK(g_qnn.graphAddNode(graph, make_op("fc", QNN_OP_FULLY_CONNECTED, NULL, 0, fc_in, 3, &t_y, 1)),
        "graphAddNode(FullyConnected)");
  CHECK(g_qnn.graphFinalize(graph, NULL, NULL), "graphFinalize(conv_relu_fc)");

  Qnn_Tensor_t in = t_x, out = t_y;
  in.v2.clientBuf.data = in_x, in.v2.clientBuf.dataSize = sizeof in_x;
  out.v2.clientBuf.data = out_y_built, out.v2.clientBuf.dataSize = sizeof out_y_built;
  CHECK(g_qnn.graphExecute(graph, &in, 1, &out, 1, NULL, NULL), "graphExecute(conv_relu_fc)");
  return 0;
}

/* Graph 2: Relu(a * b + bias), bias broadcast over the channels; executes it into out_z_built. */
static int build_mul_add_relu(void) {
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphCreate(g_context, "mul_add_relu", NULL, &graph), "graphCreate(mul_add_relu)");

  static uint32_t e_dims[4] = {1, EH, EW, EC}, bias_dims[1] = {EC};
  Qnn_Tensor_t t_a = make_tensor("a", QNN_TENSOR_TYPE_APP_WRITE, 4, e_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_b = make_tensor("b", QNN_TENSOR_TYPE_APP_WRITE, 4, e_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_bias = make_tensor("bias", QNN_TENSOR_TYPE_STATIC, 1, bias_dims, QNN_DATATYPE_FLOAT_32, ew_bias, sizeof ew_bias);
  Qnn_Tensor_t t_prod = make_tensor("prod", QNN_TENSOR_TYPE_NATIVE, 4, e_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_sum = make_tensor("sum", QNN_TENSOR_TYPE_NATIVE, 4, e_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_z = make_tensor("z", QNN_TENSOR_TYPE_APP_READ, 4, e_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t *all[] = {&t_a, &t_b, &t_bias, &t_prod, &t_sum, &t_z};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    CHECK(g_qnn.tensorCreateGraphTensor(graph, all[i]), "tensorCreateGraphTensor(mul_add_relu)");

  Qnn_Tensor_t mul_in[2] = {t_a, t_b}, add_in[2] = {t_prod, t_bias};
  CHECK(g_qnn.graphAddNode(graph, make_op("mul", QNN_OP_ELEMENT_WISE_MULTIPLY, NULL, 0, mul_in, 2, &t_prod, 1)),
        "graphAddNode(ElementWiseMultiply)");
  CHECK(g_qnn.graphAddNode(graph, make_op("add", QNN_OP_ELEMENT_WISE_ADD, NULL, 0, add_in, 2, &t_sum, 1)),
        "graphAddNode(ElementWiseAdd)");
  CHECK(g_qnn.graphAddNode(graph, make_op("relu2", QNN_OP_RELU, NULL, 0, &t_sum, 1, &t_z, 1)),
        "graphAddNode(Relu)");
  CHECK(g_qnn.graphFinalize(graph, NULL, NULL), "graphFinalize(mul_add_relu)");

  Qnn_Tensor_t in[2] = {t_a, t_b}, out = t_z;
  in[0].v2.clientBuf.data = in_a, in[0].v2.clientBuf.dataSize = sizeof in_a;
  in[1].v2.clientBuf.data = in_b, in[1].v2.clientBuf.dataSize = sizeof in_b;
  out.v2.clientBuf.data = out_z_built, out.v2.clientBuf.dataSize = sizeof out_z_built;
  CHECK(g_qnn.graphExecute(graph, in, 2, &out, 1, NULL, NULL), "graphExecute(mul_add_relu)");
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Libraries and sessions.
 */
static int open_backend(const char *path) {
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    fprintf(stderr, "ERROR: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const QnnInterface_t ***, uint32_t *);
  GetProvidersFn get_providers;
  /* POSIX guarantees that a data pointer from dlsym converts to a function pointer. */
  *(void **)&get_providers = dlsym(g_lib, "QnnInterface_getProviders");
  if (!get_providers) {
    fprintf(stderr, "ERROR: %s has no QnnInterface_getProviders\n", path);
    return 1;
  }
  const QnnInterface_t **providers = NULL;
  uint32_t num_providers = 0;
  Qnn_ErrorHandle_t err = get_providers(&providers, &num_providers);
  if (err != QNN_SUCCESS) {
    fprintf(stderr, "ERROR: QnnInterface_getProviders failed with error %llu\n", (unsigned long long)err);
    return 1;
  }
  const QnnInterface_t *provider = NULL;
  for (uint32_t i = 0; i < num_providers && !provider; ++i) {
    const Qnn_Version_t *v = &providers[i]->apiVersion.coreApiVersion;
    if (v->major == QNN_API_VERSION_MAJOR && v->minor >= QNN_API_VERSION_MINOR) provider = providers[i];
  }
  if (!provider) {
    fprintf(stderr, "ERROR: no provider with core API %d.>=%d among %u\n", QNN_API_VERSION_MAJOR,
            QNN_API_VERSION_MINOR, num_providers);
    return 1;
  }
  /* The table may be longer than ours (newer backends append entries); we read our prefix. */
  g_qnn = provider->QNN_INTERFACE_VER_NAME;
  printf("backend: %s (backend id %u, core API %u.%u.%u)\n", provider->providerName,
         provider->backendId, provider->apiVersion.coreApiVersion.major,
         provider->apiVersion.coreApiVersion.minor, provider->apiVersion.coreApiVersion.patch);
  if (!g_qnn.contextGetBinarySize || !g_qnn.contextGetBinary || !g_qnn.contextCreateFromBinary ||
      !g_qnn.graphRetrieve) {
    fprintf(stderr, "ERROR: the backend's interface table lacks contextGetBinarySize/GetBinary/"
                    "CreateFromBinary or graphRetrieve\n");
    return 1;
  }
  return 0;
}

static int open_system_library(const char *path) {
  g_sys_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_sys_lib) {
    fprintf(stderr, "ERROR: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const QnnSystemInterface_t ***, uint32_t *);
  GetProvidersFn get_providers;
  *(void **)&get_providers = dlsym(g_sys_lib, "QnnSystemInterface_getProviders");
  if (!get_providers) {
    fprintf(stderr, "ERROR: %s has no QnnSystemInterface_getProviders\n", path);
    return 1;
  }
  const QnnSystemInterface_t **providers = NULL;
  uint32_t num_providers = 0;
  Qnn_ErrorHandle_t err = get_providers(&providers, &num_providers);
  if (err != QNN_SUCCESS) {
    fprintf(stderr, "ERROR: QnnSystemInterface_getProviders failed with error %llu\n", (unsigned long long)err);
    return 1;
  }
  const QnnSystemInterface_t *provider = NULL;
  for (uint32_t i = 0; i < num_providers && !provider; ++i) {
    const Qnn_Version_t *v = &providers[i]->systemApiVersion;
    if (v->major == QNN_SYSTEM_API_VERSION_MAJOR && v->minor >= QNN_SYSTEM_API_VERSION_MINOR)
      provider = providers[i];
  }
  if (!provider) {
    fprintf(stderr, "ERROR: no System provider with API %d.>=%d among %u\n", QNN_SYSTEM_API_VERSION_MAJOR,
            QNN_SYSTEM_API_VERSION_MINOR, num_providers);
    return 1;
  }
  g_sys = provider->QNN_SYSTEM_INTERFACE_VER_NAME;
  if (!g_sys.systemContextCreate || !g_sys.systemContextGetBinaryInfo || !g_sys.systemContextFree) {
    fprintf(stderr, "ERROR: the System interface table lacks systemContextCreate/GetBinaryInfo/Free\n");
    return 1;
  }
  g_have_sys = 1;
  printf("system library: %s (System API %u.%u.%u)\n", provider->providerName ? provider->providerName : "?",
         provider->systemApiVersion.major, provider->systemApiVersion.minor, provider->systemApiVersion.patch);
  return 0;
}

/* Log, backend and device (when the backend has devices); the context is made by the caller. */
static int create_runtime(void) {
  CHECK(g_qnn.logCreate(log_callback, QNN_LOG_LEVEL_WARN, &g_log), "logCreate");
  CHECK(g_qnn.backendCreate(g_log, NULL, &g_backend), "backendCreate");
  if (g_qnn.propertyHasCapability &&
      g_qnn.propertyHasCapability(QNN_PROPERTY_GROUP_DEVICE) == QNN_PROPERTY_SUPPORTED)
    CHECK(g_qnn.deviceCreate(g_log, NULL, &g_device), "deviceCreate");
  return 0;
}

static int write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    return 1;
  }
  size_t n = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || n != size) {
    fprintf(stderr, "ERROR: could not write %zu bytes to %s\n", size, path);
    return 1;
  }
  return 0;
}

static unsigned char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return NULL;
  }
  unsigned char *data = NULL;
  long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (end > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)end)) != NULL &&
      fread(data, 1, (size_t)end, f) != (size_t)end) {
    free(data);
    data = NULL;
  }
  fclose(f);
  if (!data) fprintf(stderr, "ERROR: could not read %s\n", path);
  *size = data ? (size_t)end : 0;
  return data;
}

/* ---------------------------------------------------------------------------------------------
 * Reading the System library's description of a binary: whatever the struct versions.
 */
static const char *dtype_name(Qnn_DataType_t t) {
  switch (t) {
    case QNN_DATATYPE_INT_8: return "INT_8";
    case QNN_DATATYPE_INT_16: return "INT_16";
    case QNN_DATATYPE_INT_32: return "INT_32";
    case QNN_DATATYPE_INT_64: return "INT_64";
    case QNN_DATATYPE_UINT_8: return "UINT_8";
    case QNN_DATATYPE_UINT_16: return "UINT_16";
    case QNN_DATATYPE_UINT_32: return "UINT_32";
    case QNN_DATATYPE_UINT_64: return "UINT_64";
    case QNN_DATATYPE_FLOAT_16: return "FLOAT_16";
    case QNN_DATATYPE_BFLOAT_16: return "BFLOAT_16";
    case QNN_DATATYPE_FLOAT_32: return "FLOAT_32";
    case QNN_DATATYPE_FLOAT_64: return "FLOAT_64";
    case QNN_DATATYPE_SFIXED_POINT_8: return "SFIXED_POINT_8";
    case QNN_DATATYPE_SFIXED_POINT_16: return "SFIXED_POINT_16";
    case QNN_DATATYPE_SFIXED_POINT_32: return "SFIXED_POINT_32";
    case QNN_DATATYPE_UFIXED_POINT_8: return "UFIXED_POINT_8";
    case QNN_DATATYPE_UFIXED_POINT_16: return "UFIXED_POINT_16";
    case QNN_DATATYPE_UFIXED_POINT_32: return "UFIXED_POINT_32";
    case QNN_DATATYPE_BOOL_8: return "BOOL_8";
    default: return "other";
  }
}

/* Bytes per element, 0 for types this sample does not size (sub-byte, strings). */
static size_t dtype_size(Qnn_DataType_t t) {
  switch (t) {
    case QNN_DATATYPE_INT_8: case QNN_DATATYPE_UINT_8: case QNN_DATATYPE_SFIXED_POINT_8:
    case QNN_DATATYPE_UFIXED_POINT_8: case QNN_DATATYPE_BOOL_8: return 1;
    case QNN_DATATYPE_INT_16: case QNN_DATATYPE_UINT_16: case QNN_DATATYPE_FLOAT_16:
    case QNN_DATATYPE_BFLOAT_16: case QNN_DATATYPE_SFIXED_POINT_16: case QNN_DATATYPE_UFIXED_POINT_16: return 2;
    case QNN_DATATYPE_INT_32: case QNN_DATATYPE_UINT_32: case QNN_DATATYPE_FLOAT_32:
    case QNN_DATATYPE_SFIXED_POINT_32: case QNN_DATATYPE_UFIXED_POINT_32: return 4;
    case QNN_DATATYPE_INT_64: case QNN_DATATYPE_UINT_64: case QNN_DATATYPE_FLOAT_64: return 8;
    default: return 0;
  }
}

static const char *tensor_type_name(Qnn_TensorType_t t) {
  switch (t) {
    case QNN_TENSOR_TYPE_APP_WRITE: return "APP_WRITE";
    case QNN_TENSOR_TYPE_APP_READ: return "APP_READ";
    case QNN_TENSOR_TYPE_APP_READWRITE: return "APP_READWRITE";
    case QNN_TENSOR_TYPE_NATIVE: return "NATIVE";
    case QNN_TENSOR_TYPE_STATIC: return "STATIC";
    case QNN_TENSOR_TYPE_NULL: return "NULL";
    case QNN_TENSOR_TYPE_UPDATEABLE_STATIC: return "UPDATEABLE_STATIC";
    case QNN_TENSOR_TYPE_UPDATEABLE_NATIVE: return "UPDATEABLE_NATIVE";
    case QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE: return "UPDATEABLE_APP_WRITE";
    case QNN_TENSOR_TYPE_UPDATEABLE_APP_READ: return "UPDATEABLE_APP_READ";
    case QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE: return "UPDATEABLE_APP_READWRITE";
    default: return "other";
  }
}

/* The fields this sample reads, from a v1 or v2 tensor. */
typedef struct {
  uint32_t id;
  const char *name;
  Qnn_TensorType_t type;
  Qnn_DataType_t dtype;
  const Qnn_QuantizeParams_t *quant;
  uint32_t rank;
  const uint32_t *dims;
} TensorView;

static int view_tensor(const Qnn_Tensor_t *t, TensorView *v) {
  if (t->version == QNN_TENSOR_VERSION_1) {
    *v = (TensorView){t->v1.id, t->v1.name, t->v1.type, t->v1.dataType, &t->v1.quantizeParams,
                      t->v1.rank, t->v1.dimensions};
  } else if (t->version == QNN_TENSOR_VERSION_2) {
    *v = (TensorView){t->v2.id, t->v2.name, t->v2.type, t->v2.dataType, &t->v2.quantizeParams,
                      t->v2.rank, t->v2.dimensions};
  } else {
    fprintf(stderr, "ERROR: tensor version %d is not known to this sample\n", (int)t->version);
    return 1;
  }
  return 0;
}

static void print_tensor(const char *role, const Qnn_Tensor_t *t) {
  TensorView v;
  if (view_tensor(t, &v)) return;
  printf("      %s \"%s\" id %u, tensor v%d, %s, %s, dims [", role, v.name ? v.name : "(null)", v.id,
         (int)t->version, tensor_type_name(v.type), dtype_name(v.dtype));
  for (uint32_t d = 0; d < v.rank && v.dims; ++d) printf("%s%u", d ? ", " : "", v.dims[d]);
  printf("], quant ");
  const Qnn_QuantizeParams_t *q = v.quant;
  if (q->encodingDefinition != QNN_DEFINITION_DEFINED) {
    printf("none\n");
  } else if (q->quantizationEncoding == QNN_QUANTIZATION_ENCODING_SCALE_OFFSET) {
    printf("scale %g offset %d\n", (double)q->scaleOffsetEncoding.scale, q->scaleOffsetEncoding.offset);
  } else if (q->quantizationEncoding == QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET) {
    printf("per-axis (axis %d, %u scale/offset pairs)\n", q->axisScaleOffsetEncoding.axis,
           q->axisScaleOffsetEncoding.numScaleOffsets);
  } else {
    printf("encoding %d\n", (int)q->quantizationEncoding);
  }
}

/* The fields this sample reads, from a v1, v2 or v3 graph info. */
typedef struct {
  const char *name;
  uint32_t num_inputs, num_outputs;
  const Qnn_Tensor_t *inputs, *outputs;
} GraphView;

static int view_graph(const QnnSystemContext_GraphInfo_t *g, GraphView *v) {
  switch (g->version) {
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_1:
      *v = (GraphView){g->graphInfoV1.graphName, g->graphInfoV1.numGraphInputs, g->graphInfoV1.numGraphOutputs,
                       g->graphInfoV1.graphInputs, g->graphInfoV1.graphOutputs};
      return 0;
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_2:
      *v = (GraphView){g->graphInfoV2.graphName, g->graphInfoV2.numGraphInputs, g->graphInfoV2.numGraphOutputs,
                       g->graphInfoV2.graphInputs, g->graphInfoV2.graphOutputs};
      return 0;
    case QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3:
      *v = (GraphView){g->graphInfoV3.graphName, g->graphInfoV3.numGraphInputs, g->graphInfoV3.numGraphOutputs,
                       g->graphInfoV3.graphInputs, g->graphInfoV3.graphOutputs};
      return 0;
    default:
      fprintf(stderr, "ERROR: graph info version %d is not known to this sample\n", (int)g->version);
      return 1;
  }
}

/* The fields this sample reads, from a v1, v2 or v3 binary info. */
typedef struct {
  uint32_t backend_id, num_graphs, num_context_tensors;
  const char *build_id, *soc_version;
  Qnn_Version_t core_api, backend_api, blob_version;
  uint64_t blob_size;
  const QnnSystemContext_GraphInfo_t *graphs;
} BinaryView;

static int view_binary(const QnnSystemContext_BinaryInfo_t *b, BinaryView *v) {
  /* Same field names in the three versions, different layouts: one macro, three expansions. */
#define VIEW_BINARY(member)                                                                          \
  *v = (BinaryView){b->member.backendId, b->member.numGraphs, b->member.numContextTensors,           \
                    b->member.buildId, b->member.socVersion, b->member.coreApiVersion,              \
                    b->member.backendApiVersion, b->member.contextBlobVersion,                      \
                    b->member.contextBlobSize, b->member.graphs}
  switch (b->version) {
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_1: VIEW_BINARY(contextBinaryInfoV1); return 0;
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_2: VIEW_BINARY(contextBinaryInfoV2); return 0;
    case QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3: VIEW_BINARY(contextBinaryInfoV3); return 0;
    default:
      fprintf(stderr, "ERROR: binary info version %d is not known to this sample\n", (int)b->version);
      return 1;
  }
#undef VIEW_BINARY
}

static int list_binary(const QnnSystemContext_BinaryInfo_t *info, BinaryView *bv) {
  if (view_binary(info, bv)) return 1;
  printf("binary info v%d: backend id %u, build id %s, core API %u.%u.%u, backend API %u.%u.%u, "
         "context blob v%u.%u.%u, %llu bytes\n",
         (int)info->version, bv->backend_id, bv->build_id ? bv->build_id : "(none)", bv->core_api.major,
         bv->core_api.minor, bv->core_api.patch, bv->backend_api.major, bv->backend_api.minor,
         bv->backend_api.patch, bv->blob_version.major, bv->blob_version.minor, bv->blob_version.patch,
         (unsigned long long)bv->blob_size);
  if (info->version == QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3)
    printf("  soc model %u\n", info->contextBinaryInfoV3.socModel);
  printf("  %u context tensors, %u graphs\n", bv->num_context_tensors, bv->num_graphs);
  if (bv->num_graphs > 0 && !bv->graphs) {
    fprintf(stderr, "ERROR: the binary info lists %u graphs but no graph array\n", bv->num_graphs);
    return 1;
  }
  for (uint32_t i = 0; i < bv->num_graphs; ++i) {
    const QnnSystemContext_GraphInfo_t *g = &bv->graphs[i];
    GraphView gv;
    if (view_graph(g, &gv)) return 1;
    printf("  graph %u: \"%s\" (graph info v%d), %u inputs, %u outputs\n", i, gv.name ? gv.name : "(null)",
           (int)g->version, gv.num_inputs, gv.num_outputs);
    if (g->version == QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_2)
      printf("    %u updateable tensors\n", g->graphInfoV2.numUpdateableTensors);
    if (g->version == QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3)
      printf("    %u updateable tensors, graph blob info %u bytes, ops [%u, %u]\n",
             g->graphInfoV3.numUpdateableTensors, g->graphInfoV3.graphBlobInfoSize,
             g->graphInfoV3.startOpIndex, g->graphInfoV3.endOpIndex);
    for (uint32_t k = 0; k < gv.num_inputs; ++k) print_tensor("input ", &gv.inputs[k]);
    for (uint32_t k = 0; k < gv.num_outputs; ++k) print_tensor("output", &gv.outputs[k]);
  }
  return 0;
}

/* Execute tensors for one graph, made from the System library's listing: each listed tensor is
 * copied (id, name, type, data type, dims, quantization as the binary holds them) and given the
 * client buffer registered under its name, after checking the sizes agree. */
enum { MAX_IO = 8 };
static int bind_tensors(const char *graph, const Qnn_Tensor_t *listed, uint32_t count, Qnn_Tensor_t *out) {
  if (count > MAX_IO) {
    fprintf(stderr, "ERROR: graph %s lists %u tensors, more than this sample handles (%d)\n", graph, count, MAX_IO);
    return 1;
  }
  for (uint32_t i = 0; i < count; ++i) {
    TensorView v;
    if (view_tensor(&listed[i], &v)) return 1;
    const ClientBuffer *buf = find_buffer(graph, v.name);
    if (!buf) {
      fprintf(stderr, "ERROR: graph %s: the binary lists tensor \"%s\", which this client did not build\n",
              graph, v.name ? v.name : "(null)");
      return 1;
    }
    if (v.rank > 0 && !v.dims) {
      fprintf(stderr, "ERROR: graph %s: tensor \"%s\" has rank %u but no dimensions\n", graph, v.name, v.rank);
      return 1;
    }
    size_t bytes = dtype_size(v.dtype);
    for (uint32_t d = 0; d < v.rank; ++d) bytes *= v.dims[d];
    if (bytes != buf->size) {
      fprintf(stderr, "ERROR: graph %s: tensor \"%s\" is %zu bytes per the binary (%s), the client has %u\n",
              graph, v.name, bytes, dtype_name(v.dtype), buf->size);
      return 1;
    }
    out[i] = listed[i];
    if (out[i].version == QNN_TENSOR_VERSION_1) {
      out[i].v1.memType = QNN_TENSORMEMTYPE_RAW;
      out[i].v1.clientBuf.data = buf->data, out[i].v1.clientBuf.dataSize = buf->size;
    } else {
      out[i].v2.memType = QNN_TENSORMEMTYPE_RAW;
      out[i].v2.clientBuf.data = buf->data, out[i].v2.clientBuf.dataSize = buf->size;
    }
  }
  return 0;
}

static int execute_loaded(const BinaryView *bv, const char *name) {
  GraphView gv;
  int found = 0;
  for (uint32_t i = 0; i < bv->num_graphs && !found; ++i) {
    if (view_graph(&bv->graphs[i], &gv)) return 1;
    found = gv.name && strcmp(gv.name, name) == 0;
  }
  if (!found) {
    fprintf(stderr, "ERROR: the System library does not list graph %s\n", name);
    return 1;
  }
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphRetrieve(g_context, name, &graph), "graphRetrieve");
  Qnn_Tensor_t inputs[MAX_IO], outputs[MAX_IO];
  if (bind_tensors(name, gv.inputs, gv.num_inputs, inputs)) return 1;
  if (bind_tensors(name, gv.outputs, gv.num_outputs, outputs)) return 1;
  CHECK(g_qnn.graphExecute(graph, inputs, gv.num_inputs, outputs, gv.num_outputs, NULL, NULL),
        "graphExecute (loaded)");
  printf("executed loaded graph %s (%u inputs, %u outputs)\n", name, gv.num_inputs, gv.num_outputs);
  return 0;
}

static int same_bytes(const char *what, const float *built, const float *loaded, size_t count) {
  int same = memcmp(built, loaded, count * sizeof *built) == 0;
  printf("%s: %zu outputs, built vs loaded: %s (first % .7f vs % .7f)\n", what, count,
         same ? "bit-identical" : "DIFFERENT", (double)built[0], (double)loaded[0]);
  return same;
}

/* contextValidateBinary's verdict, printed; NOT_SUPPORTED when the backend does not offer it. */
static Qnn_ErrorHandle_t validate(const char *what, const void *binary, size_t size) {
  if (!g_qnn.contextValidateBinary) {
    printf("%s: contextValidateBinary is not in this backend's interface table\n", what);
    return QNN_COMMON_ERROR_NOT_SUPPORTED;
  }
  Qnn_ErrorHandle_t err = g_qnn.contextValidateBinary(g_backend, g_device, NULL, binary, size);
  printf("%s: contextValidateBinary: %llu (%s)\n", what, (unsigned long long)err,
         err == QNN_SUCCESS ? "valid" : error_text(err));
  return err;
}

/* Returns 1 when a damaged binary is refused by contextValidateBinary (where the backend has
 * it) and by contextCreateFromBinary, or when it loads but must_refuse is 0 (reported only). */
static int refused(const char *what, const void *binary, size_t size, int must_refuse) {
  int ok = 1;
  Qnn_ErrorHandle_t err = validate(what, binary, size);
  if (err == QNN_SUCCESS && must_refuse) {
    printf("%s: contextValidateBinary ACCEPTED it\n", what);
    ok = 0;
  }
  Qnn_ContextHandle_t context = NULL;
  err = g_qnn.contextCreateFromBinary(g_backend, g_device, NULL, binary, size, &context, NULL);
  if (err == QNN_SUCCESS) {
    printf("%s: contextCreateFromBinary ACCEPTED it%s\n", what,
           must_refuse ? "" : " (allowed: data_unchecked, this backend does not checksum its binaries)");
    g_qnn.contextFree(context, NULL);
    if (must_refuse) ok = 0;
  } else {
    printf("%s: contextCreateFromBinary refused it: error %llu: %s\n", what, (unsigned long long)err,
           error_text(err));
  }
  return ok;
}

/* ---------------------------------------------------------------------------------------------
 * The four steps.
 */
static int step_build_and_save(const char *binary_path) {
  printf("== 1. build, finalize, execute\n");
  if (create_runtime()) return 1;
  CHECK(g_qnn.contextCreate(g_backend, g_device, NULL, &g_context), "contextCreate");
  if (build_conv_relu_fc() || build_mul_add_relu()) return 1;
  printf("conv_relu_fc y[0..3]: % .7f % .7f % .7f % .7f\n", (double)out_y_built[0], (double)out_y_built[1],
         (double)out_y_built[2], (double)out_y_built[3]);

  printf("== 2. save the context binary\n");
  Qnn_ContextBinarySize_t size = 0, written = 0;
  CHECK(g_qnn.contextGetBinarySize(g_context, &size), "contextGetBinarySize");
  if (size == 0) {
    fprintf(stderr, "ERROR: contextGetBinarySize reported 0 bytes\n");
    return 1;
  }
  unsigned char *binary = malloc(size);
  if (!binary) {
    fprintf(stderr, "ERROR: out of memory for %llu bytes\n", (unsigned long long)size);
    return 1;
  }
  g_binary = binary; /* so that cleanup() frees it on an error */
  CHECK(g_qnn.contextGetBinary(g_context, binary, size, &written), "contextGetBinary");
  if (written == 0 || written > size) {
    fprintf(stderr, "ERROR: contextGetBinary wrote %llu bytes into a buffer of %llu\n",
            (unsigned long long)written, (unsigned long long)size);
    return 1;
  }
  printf("binary: %llu bytes (size query said %llu) -> %s\n", (unsigned long long)written,
         (unsigned long long)size, binary_path);
  if (write_file(binary_path, binary, (size_t)written)) return 1;
  free(g_binary);
  g_binary = NULL;
  free_runtime();
  printf("freed context, device, backend and log\n");
  return 0;
}

static int step_load_and_compare(const char *binary_path, const char *system_path, int data_unchecked,
                                 int *ok) {
  printf("== 3. read the binary back and list it with the System library\n");
  if (create_runtime()) return 1;
  size_t size = 0;
  if (!(g_binary = read_file(binary_path, &size))) return 1;
  printf("read %zu bytes from %s\n", size, binary_path);
  if (open_system_library(system_path)) return 1;
  CHECK(g_sys.systemContextCreate(&g_sys_context), "systemContextCreate");
  const QnnSystemContext_BinaryInfo_t *info = NULL;
  Qnn_ContextBinarySize_t info_size = 0;
  CHECK(g_sys.systemContextGetBinaryInfo(g_sys_context, g_binary, size, &info, &info_size),
        "systemContextGetBinaryInfo");
  if (!info) {
    fprintf(stderr, "ERROR: systemContextGetBinaryInfo succeeded without binary info\n");
    return 1;
  }
  BinaryView bv;
  if (list_binary(info, &bv)) return 1;

  printf("== 4. load the binary and execute the retrieved graphs\n");
  Qnn_ErrorHandle_t valid = validate("intact binary", g_binary, size);
  if (valid != QNN_SUCCESS && QNN_GET_ERROR_CODE(valid) != QNN_COMMON_ERROR_NOT_SUPPORTED) *ok = 0;
  CHECK(g_qnn.contextCreateFromBinary(g_backend, g_device, NULL, g_binary, size, &g_context, NULL),
        "contextCreateFromBinary");
  /* Poison the output buffers, so that only what the loaded graphs write can match step 1. */
  memset(out_y_loaded, 0xFF, sizeof out_y_loaded);
  memset(out_z_loaded, 0xFF, sizeof out_z_loaded);
  if (execute_loaded(&bv, "conv_relu_fc") || execute_loaded(&bv, "mul_add_relu")) return 1;
  if (!same_bytes("conv_relu_fc", out_y_built, out_y_loaded, FC_OUT)) *ok = 0;
  if (!same_bytes("mul_add_relu", out_z_built, out_z_loaded, ECOUNT)) *ok = 0;

  /* Damaged copies: a loader must refuse them with an error code, never crash or load them.
   * Truncation is caught by any loader; a flipped byte in the middle (usually weight data) only
   * by one that checksums the whole binary, which QNN does not require: see data_unchecked. */
  if (!(g_corrupted = malloc(size))) {
    fprintf(stderr, "ERROR: out of memory for %zu bytes\n", size);
    return 1;
  }
  memcpy(g_corrupted, g_binary, size);
  g_corrupted[size / 2] ^= 0xFF;
  char label[128];
  snprintf(label, sizeof label, "corrupted binary (byte %zu of %zu flipped)", size / 2, size);
  if (!refused(label, g_corrupted, size, !data_unchecked)) *ok = 0;
  snprintf(label, sizeof label, "truncated binary (%zu of %zu bytes)", size / 2, size);
  if (!refused(label, g_binary, size / 2, 1)) *ok = 0;
  return 0;
}

int main(int argc, char **argv) {
  const char *backend_path = argc > 1 ? argv[1] : DEFAULT_BACKEND;
  const char *system_path = argc > 2 ? argv[2] : DEFAULT_SYSTEM_LIBRARY;
  const char *binary_path = argc > 3 ? argv[3] : DEFAULT_BINARY;
  int data_unchecked = argc > 4 && strcmp(argv[4], "data_unchecked") == 0;
  if (argc > 4 && !data_unchecked) {
    fprintf(stderr, "usage: %s [backend.so] [libQnnSystem.so] [binary-file] [data_unchecked]\n", argv[0]);
    return 1;
  }
  fill_data();
  int ok = 1;
  int failed = open_backend(backend_path) || step_build_and_save(binary_path) ||
               step_load_and_compare(binary_path, system_path, data_unchecked, &ok);
  cleanup();
  if (failed) ok = 0;
  printf("%s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
