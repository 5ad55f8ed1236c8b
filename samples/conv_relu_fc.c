/* conv_relu_fc.c: a minimal QNN application, written only against the QNN C API headers.
 *
 * It dlopens a QNN backend library (argv[1]), picks a provider from QnnInterface_getProviders,
 * builds Conv2d(3x3, pad 1, 1x8x8x3 -> 4 channels) + Relu + Reshape + FullyConnected(-> 10)
 * with deterministic weights, finalizes and executes it, and compares the 10 outputs with a
 * plain C reference. It also checks that the backend refuses to execute an unfinalized graph
 * and refuses an unknown op type ("NoSuchOp").
 *
 * Usage: conv_relu_fc <backend.so> [fp16]
 *   fp16: ask an HTP backend for float16 precision (tolerance 1e-2 instead of 1e-4).
 * Exit status: 0 on success; 1 on a QNN error, a numeric mismatch or a wrongly accepted probe.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnInterface.h"
#include "QnnOpDef.h"
#include "HTP/QnnHtpGraph.h"

#ifndef DEFAULT_BACKEND
#define DEFAULT_BACKEND "libQnnHtpEmu.so"
#endif

enum { N = 1, H = 8, W = 8, CIN = 3, COUT = 4, KH = 3, KW = 3, FLAT = H * W * COUT, FC_OUT = 10 };

/* Everything that must be freed, so that any error path can clean up the same way. */
static void *g_lib;
static QNN_INTERFACE_VER_TYPE g_qnn;
static Qnn_LogHandle_t g_log;
static Qnn_BackendHandle_t g_backend;
static Qnn_DeviceHandle_t g_device;
static Qnn_ContextHandle_t g_context;

static void cleanup(void) {
  /* Reverse order of creation; the context frees its graphs. */
  if (g_context) g_qnn.contextFree(g_context, NULL);
  if (g_device) g_qnn.deviceFree(g_device);
  if (g_backend) g_qnn.backendFree(g_backend);
  if (g_log) g_qnn.logFree(g_log);
  g_context = NULL, g_device = NULL, g_backend = NULL, g_log = NULL;
  if (g_lib) dlclose(g_lib);
  g_lib = NULL;
}

static const char *error_text(Qnn_ErrorHandle_t err) {
  const char *msg = NULL;
  if (g_qnn.errorGetMessage && g_qnn.errorGetMessage(err, &msg) == QNN_SUCCESS && msg) return msg;
  return "(no message)";
}

/* Any QNN failure of the main flow is fatal: print the function and the code, then exit 1. */
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
  static const char *names[] = {"?", "ERROR", "WARN", "INFO", "VERBOSE", "DEBUG"};
  (void)timestamp;
  if (!fmt) return;
  /* One line per message, whether or not the backend ends its messages with a newline (the
   * format may be "%s" with the newline inside the argument). */
  char line[1024];
  vsnprintf(line, sizeof line, fmt, args);
  size_t len = strlen(line);
  while (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
  fprintf(stderr, "[qnn %s] %s\n", level <= QNN_LOG_LEVEL_DEBUG ? names[level] : "?", line);
}

/* A tensor description; v2 tensors with raw client buffers. */
static Qnn_Tensor_t make_tensor(const char *name, Qnn_TensorType_t type, uint32_t rank,
                                uint32_t *dims, Qnn_DataType_t dtype, void *data, uint32_t size) {
  Qnn_Tensor_t t;
  memset(&t, 0, sizeof t);
  t.version = QNN_TENSOR_VERSION_2;
  t.v2.id = 0;
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
  t.v2.isDynamicDimensions = NULL;
  t.v2.sparseParams.type = QNN_SPARSE_LAYOUT_UNDEFINED;
  t.v2.isProduced = 0;
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

/* The reference: the same network in nested loops, in double precision. */
static void reference(const float *x, const float *cw, const float *cb, const float *fw,
                      const float *fb, double *out) {
  double act[FLAT];
  for (int h = 0; h < H; ++h)
    for (int w = 0; w < W; ++w)
      for (int co = 0; co < COUT; ++co) {
        double acc = cb[co];
        for (int kh = 0; kh < KH; ++kh)
          for (int kw = 0; kw < KW; ++kw) {
            int ih = h + kh - 1, iw = w + kw - 1; /* pad 1 */
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            for (int ci = 0; ci < CIN; ++ci)
              acc += (double)x[(ih * W + iw) * CIN + ci] * cw[((kh * KW + kw) * CIN + ci) * COUT + co];
          }
        act[(h * W + w) * COUT + co] = acc > 0 ? acc : 0; /* Relu; NHWC flattening */
      }
  for (int m = 0; m < FC_OUT; ++m) {
    double acc = fb[m];
    for (int k = 0; k < FLAT; ++k) acc += act[k] * fw[m * FLAT + k];
    out[m] = acc;
  }
}

/* Returns 1 when the backend refused to execute an unfinalized graph. */
static int probe_execute_before_finalize(void) {
  Qnn_GraphHandle_t graph = NULL;
  Qnn_ErrorHandle_t err = g_qnn.graphCreate(g_context, "probe_unfinalized", NULL, &graph);
  if (err != QNN_SUCCESS) {
    printf("probe: graphCreate failed (%llu); cannot probe\n", (unsigned long long)err);
    return 0;
  }
  static uint32_t dims[2] = {1, 4};
  static float in[4] = {-1, 2, -3, 4}, out[4];
  Qnn_Tensor_t x = make_tensor("px", QNN_TENSOR_TYPE_APP_WRITE, 2, dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t y = make_tensor("py", QNN_TENSOR_TYPE_APP_READ, 2, dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  if (g_qnn.tensorCreateGraphTensor(graph, &x) != QNN_SUCCESS ||
      g_qnn.tensorCreateGraphTensor(graph, &y) != QNN_SUCCESS) {
    printf("probe: tensorCreateGraphTensor failed; cannot probe\n");
    return 0;
  }
  Qnn_OpConfig_t relu = make_op("probe_relu", QNN_OP_RELU, NULL, 0, &x, 1, &y, 1);
  if (g_qnn.graphAddNode(graph, relu) != QNN_SUCCESS) {
    printf("probe: graphAddNode(Relu) failed; cannot probe\n");
    return 0;
  }
  x.v2.clientBuf.data = in, x.v2.clientBuf.dataSize = sizeof in;
  y.v2.clientBuf.data = out, y.v2.clientBuf.dataSize = sizeof out;
  err = g_qnn.graphExecute(graph, &x, 1, &y, 1, NULL, NULL);
  if (err == QNN_SUCCESS) {
    printf("probe: graphExecute before graphFinalize was ACCEPTED\n");
    return 0;
  }
  printf("probe: graphExecute before graphFinalize refused: error %llu: %s\n",
         (unsigned long long)err, error_text(err));
  return 1;
}

/* Returns 1 when the backend refused the op type "NoSuchOp" at some point: backendValidateOpConfig,
 * graphAddNode or graphFinalize (some backends only find out when they prepare the graph). */
static int probe_unknown_op(void) {
  Qnn_GraphHandle_t graph = NULL;
  Qnn_ErrorHandle_t err = g_qnn.graphCreate(g_context, "probe_unknown_op", NULL, &graph);
  if (err != QNN_SUCCESS) {
    printf("probe: graphCreate failed (%llu); cannot probe\n", (unsigned long long)err);
    return 0;
  }
  static uint32_t dims[2] = {1, 4};
  Qnn_Tensor_t x = make_tensor("ux", QNN_TENSOR_TYPE_APP_WRITE, 2, dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t y = make_tensor("uy", QNN_TENSOR_TYPE_APP_READ, 2, dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  if (g_qnn.tensorCreateGraphTensor(graph, &x) != QNN_SUCCESS ||
      g_qnn.tensorCreateGraphTensor(graph, &y) != QNN_SUCCESS) {
    printf("probe: tensorCreateGraphTensor failed; cannot probe\n");
    return 0;
  }
  Qnn_OpConfig_t op = make_op("probe_nosuchop", "NoSuchOp", NULL, 0, &x, 1, &y, 1);
  int refused = 0;
  if (g_qnn.backendValidateOpConfig) {
    err = g_qnn.backendValidateOpConfig(g_backend, op);
    printf("probe: backendValidateOpConfig(NoSuchOp): %s (%llu: %s)\n",
           err == QNN_SUCCESS ? "accepted" : "refused", (unsigned long long)err,
           err == QNN_SUCCESS ? "success" : error_text(err));
    refused |= err != QNN_SUCCESS;
  }
  err = g_qnn.graphAddNode(graph, op);
  printf("probe: graphAddNode(NoSuchOp): %s (%llu: %s)\n",
         err == QNN_SUCCESS ? "accepted" : "refused", (unsigned long long)err,
         err == QNN_SUCCESS ? "success" : error_text(err));
  if (err == QNN_SUCCESS) {
    err = g_qnn.graphFinalize(graph, NULL, NULL);
    printf("probe: graphFinalize with NoSuchOp: %s (%llu: %s)\n",
           err == QNN_SUCCESS ? "accepted" : "refused", (unsigned long long)err,
           err == QNN_SUCCESS ? "success" : error_text(err));
    if (err != QNN_SUCCESS) refused = 1;
  } else {
    refused = 1;
  }
  if (!refused) printf("probe: the unknown op type NoSuchOp was ACCEPTED\n");
  return refused;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : DEFAULT_BACKEND;
  int fp16 = argc > 2 && strcmp(argv[2], "fp16") == 0;
  double tolerance = fp16 ? 1e-2 : 1e-4;

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
    cleanup();
    return 1;
  }
  const QnnInterface_t **providers = NULL;
  uint32_t num_providers = 0;
  Qnn_ErrorHandle_t gp = get_providers(&providers, &num_providers);
  if (gp != QNN_SUCCESS) {
    fprintf(stderr, "ERROR: QnnInterface_getProviders failed with error %llu\n", (unsigned long long)gp);
    cleanup();
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
    cleanup();
    return 1;
  }
  /* The table may be longer than ours (newer backends append entries); we read our prefix. */
  g_qnn = provider->QNN_INTERFACE_VER_NAME;
  printf("provider: %s (backend id %u, core API %u.%u.%u, backend API %u.%u.%u)\n",
         provider->providerName, provider->backendId, provider->apiVersion.coreApiVersion.major,
         provider->apiVersion.coreApiVersion.minor, provider->apiVersion.coreApiVersion.patch,
         provider->apiVersion.backendApiVersion.major, provider->apiVersion.backendApiVersion.minor,
         provider->apiVersion.backendApiVersion.patch);
  const char *build_id = NULL;
  if (g_qnn.backendGetBuildId && g_qnn.backendGetBuildId(&build_id) == QNN_SUCCESS && build_id)
    printf("build id: %s\n", build_id);

  CHECK(g_qnn.logCreate(log_callback, QNN_LOG_LEVEL_WARN, &g_log), "logCreate");
  CHECK(g_qnn.backendCreate(g_log, NULL, &g_backend), "backendCreate");
  if (g_qnn.propertyHasCapability &&
      g_qnn.propertyHasCapability(QNN_PROPERTY_GROUP_DEVICE) == QNN_PROPERTY_SUPPORTED) {
    CHECK(g_qnn.deviceCreate(g_log, NULL, &g_device), "deviceCreate");
  } else {
    printf("device: not supported by this backend, skipped\n");
  }
  CHECK(g_qnn.contextCreate(g_backend, g_device, NULL, &g_context), "contextCreate");

  /* Graph, with the HTP precision custom config when fp16 is asked for. */
  QnnHtpGraph_CustomConfig_t htp_precision;
  memset(&htp_precision, 0, sizeof htp_precision);
  htp_precision.option = QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION;
  htp_precision.precision = QNN_PRECISION_FLOAT16;
  QnnGraph_Config_t precision_config;
  memset(&precision_config, 0, sizeof precision_config);
  precision_config.option = QNN_GRAPH_CONFIG_OPTION_CUSTOM;
  precision_config.customConfig = &htp_precision;
  const QnnGraph_Config_t *graph_configs[] = {&precision_config, NULL};
  Qnn_GraphHandle_t graph = NULL;
  CHECK(g_qnn.graphCreate(g_context, "conv_relu_fc", fp16 ? graph_configs : NULL, &graph), "graphCreate");

  /* Data. */
  static float x[N * H * W * CIN], cw[KH * KW * CIN * COUT], cb[COUT], fw[FC_OUT * FLAT], fb[FC_OUT];
  static float out[FC_OUT];
  for (int i = 0; i < N * H * W * CIN; ++i) x[i] = pattern(i, 7, 19);
  for (int i = 0; i < KH * KW * CIN * COUT; ++i) cw[i] = pattern(i, 5, 13) * 0.5f;
  for (int i = 0; i < COUT; ++i) cb[i] = pattern(i, 3, 7) * 0.25f;
  for (int i = 0; i < FC_OUT * FLAT; ++i) fw[i] = pattern(i, 11, 23) * 0.125f;
  for (int i = 0; i < FC_OUT; ++i) fb[i] = pattern(i, 3, 11) * 0.5f;

  /* Tensors. Dimensions must outlive the graph, hence static. */
  static uint32_t x_dims[4] = {N, H, W, CIN}, cw_dims[4] = {KH, KW, CIN, COUT}, cb_dims[1] = {COUT};
  static uint32_t act_dims[4] = {N, H, W, COUT}, flat_dims[2] = {N, FLAT};
  static uint32_t fw_dims[2] = {FC_OUT, FLAT}, fb_dims[1] = {FC_OUT}, out_dims[2] = {N, FC_OUT};
  static uint32_t two[1] = {2}, two_by_two[2] = {2, 2};
  static uint32_t stride[2] = {1, 1}, dilation[2] = {1, 1}, pad[4] = {1, 1, 1, 1};

  Qnn_Tensor_t t_x = make_tensor("x", QNN_TENSOR_TYPE_APP_WRITE, 4, x_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_cw = make_tensor("conv_w", QNN_TENSOR_TYPE_STATIC, 4, cw_dims, QNN_DATATYPE_FLOAT_32, cw, sizeof cw);
  Qnn_Tensor_t t_cb = make_tensor("conv_b", QNN_TENSOR_TYPE_STATIC, 1, cb_dims, QNN_DATATYPE_FLOAT_32, cb, sizeof cb);
  Qnn_Tensor_t t_conv = make_tensor("conv_out", QNN_TENSOR_TYPE_NATIVE, 4, act_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_relu = make_tensor("relu_out", QNN_TENSOR_TYPE_NATIVE, 4, act_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_flat = make_tensor("flat", QNN_TENSOR_TYPE_NATIVE, 2, flat_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  Qnn_Tensor_t t_fw = make_tensor("fc_w", QNN_TENSOR_TYPE_STATIC, 2, fw_dims, QNN_DATATYPE_FLOAT_32, fw, sizeof fw);
  Qnn_Tensor_t t_fb = make_tensor("fc_b", QNN_TENSOR_TYPE_STATIC, 1, fb_dims, QNN_DATATYPE_FLOAT_32, fb, sizeof fb);
  Qnn_Tensor_t t_out = make_tensor("out", QNN_TENSOR_TYPE_APP_READ, 2, out_dims, QNN_DATATYPE_FLOAT_32, NULL, 0);
  /* Tensor parameters are STATIC graph tensors too. */
  Qnn_Tensor_t t_stride = make_tensor("conv_stride", QNN_TENSOR_TYPE_STATIC, 1, two, QNN_DATATYPE_UINT_32, stride, sizeof stride);
  Qnn_Tensor_t t_dil = make_tensor("conv_dilation", QNN_TENSOR_TYPE_STATIC, 1, two, QNN_DATATYPE_UINT_32, dilation, sizeof dilation);
  Qnn_Tensor_t t_pad = make_tensor("conv_pad", QNN_TENSOR_TYPE_STATIC, 2, two_by_two, QNN_DATATYPE_UINT_32, pad, sizeof pad);
  Qnn_Tensor_t *all[] = {&t_x, &t_cw, &t_cb, &t_conv, &t_relu, &t_flat, &t_fw, &t_fb, &t_out, &t_stride, &t_dil, &t_pad};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    CHECK(g_qnn.tensorCreateGraphTensor(graph, all[i]), "tensorCreateGraphTensor");

  /* Nodes. */
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
  CHECK(g_qnn.graphAddNode(graph, make_op("fc", QNN_OP_FULLY_CONNECTED, NULL, 0, fc_in, 3, &t_out, 1)),
        "graphAddNode(FullyConnected)");
  CHECK(g_qnn.graphFinalize(graph, NULL, NULL), "graphFinalize");

  /* Execute: the graph's tensors, with client buffers attached. */
  Qnn_Tensor_t in_t = t_x, out_t = t_out;
  in_t.v2.clientBuf.data = x, in_t.v2.clientBuf.dataSize = sizeof x;
  out_t.v2.clientBuf.data = out, out_t.v2.clientBuf.dataSize = sizeof out;
  CHECK(g_qnn.graphExecute(graph, &in_t, 1, &out_t, 1, NULL, NULL), "graphExecute");

  double ref[FC_OUT], max_ref = 0, max_err = 0;
  reference(x, cw, cb, fw, fb, ref);
  for (int m = 0; m < FC_OUT; ++m) max_ref = fmax(max_ref, fabs(ref[m]));
  printf("outputs (backend vs reference):\n");
  for (int m = 0; m < FC_OUT; ++m) {
    printf("  [%d] % .7f  % .7f\n", m, out[m], ref[m]);
    max_err = fmax(max_err, fabs(out[m] - ref[m]));
  }
  /* Relative to the largest reference magnitude, so near-zero outputs do not dominate. */
  double rel = max_err / (max_ref > 0 ? max_ref : 1.0);
  printf("max relative error: %.3e (tolerance %.0e)\n", rel, tolerance);

  int ok = rel <= tolerance;
  if (!ok) printf("FAILED: outputs differ from the reference\n");
  if (!probe_execute_before_finalize()) ok = 0;
  if (!probe_unknown_op()) ok = 0;

  cleanup();
  printf("%s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}
