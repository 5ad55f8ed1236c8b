/* The C side of the cffi module _qnnemu_htp_abi.so behind libQnnHtpEmu.so (QnnInterface.h:
 * QnnInterface_getProviders).
 *
 * libQnnHtpEmu.so itself is csrc/loader.c: it starts Python and loads this module, then forwards
 * QnnInterface_getProviders to qnnemu_htp_providers here.  That is plain C on purpose: if the
 * embedded init fails, cffi's generated wrappers return 0, which is QNN_SUCCESS; here we call the
 * Python-side init and only hand out the table when it reported success with the version baked
 * in at build time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnInterface.h"
#include "HTP/QnnHtpCommon.h"
#include "qnnemu_entries.h"
#include "log_forward.h"
#include "fork_python.h"

#define QNNEMU_EXPORT __attribute__((visibility("default")))

/* Provided by the cffi embedding module (embedding_api). */
int qnnemu_embed_init(const char *baked_version, uint32_t *core_api_version);

/* Clients built against newer headers copy a longer table by value; the slots past the 75 we
 * know (QnnInterface_ImplementationV2_39_t) answer NOT_SUPPORTED.  Returning an integer is safe for any signature on x86-64. */
#define QNNEMU_EXTRA_SLOTS 64

static Qnn_ErrorHandle_t qnnemu_unsupported_entry(void) { return QNN_COMMON_ERROR_NOT_SUPPORTED; }

typedef struct {
  QnnInterface_t iface;
  void *extra[QNNEMU_EXTRA_SLOTS];
} PaddedInterface;

static PaddedInterface g_provider;
static const QnnInterface_t *g_provider_list[1];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t g_init_status = QNN_COMMON_ERROR_LOADING_BINARIES;

void qnnemu_log_emit(void *callback, QnnLog_Level_t level, uint64_t timestamp,
                     const char *message) {
  if (callback) forward_log((QnnLog_Callback_t)callback, level, timestamp, "%s", message);
}

/* No QnnLog logger can exist before getProviders succeeds, so the reason the Python-side init
 * refused (``<module>.init_failure``) goes to stderr as one "qnnemu: <library>: <why>" line, the
 * loader's convention for a library that cannot start (csrc/loader.c). */
static void report_init_failure(const char *library, const char *module) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *mod = PyImport_ImportModule(module);
  PyObject *why = mod ? PyObject_GetAttrString(mod, "init_failure") : NULL;
  const char *text = why && PyUnicode_Check(why) ? PyUnicode_AsUTF8(why) : NULL;
  fprintf(stderr, "qnnemu: %s: %s\n", library,
          text ? text : "the Python-side initialisation failed without saying why");
  PyErr_Clear();
  Py_XDECREF(why);
  Py_XDECREF(mod);
  PyGILState_Release(gil);
}

static void init_once(void) {
  uint32_t core[3] = {0, 0, 0};
  install_fork_handlers(); /* a fork during a call leaves a usable child (fork_python.h) */
  int rc = qnnemu_embed_init(QNNEMU_PACKAGE_VERSION, core);
  if (rc == 0) {
    /* cffi returns 0 when the embedded Python failed to initialise. */
    fprintf(stderr, "qnnemu: the embedded Python backend failed to initialise "
                    "(is the qnnemu package importable by this interpreter?)\n");
    return;
  }
  if (rc < 0) {
    /* The Python side refused (version mismatch, bad configuration) and recorded why. */
    g_init_status = QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES;
    report_init_failure("libQnnHtpEmu.so", "qnnemu.abi.entry");
    return;
  }
  static const QNN_INTERFACE_VER_TYPE table = QNNEMU_TABLE_INITIALIZER;
  QnnInterface_t *iface = &g_provider.iface;
  iface->backendId = QNN_BACKEND_ID_HTP;
  iface->providerName = "QNNEMU_HTP";
  iface->apiVersion.coreApiVersion.major = core[0];
  iface->apiVersion.coreApiVersion.minor = core[1];
  iface->apiVersion.coreApiVersion.patch = core[2];
  iface->apiVersion.backendApiVersion.major = QNN_HTP_API_VERSION_MAJOR;
  iface->apiVersion.backendApiVersion.minor = QNN_HTP_API_VERSION_MINOR;
  iface->apiVersion.backendApiVersion.patch = QNN_HTP_API_VERSION_PATCH;
  iface->QNN_INTERFACE_VER_NAME = table;
  for (int i = 0; i < QNNEMU_EXTRA_SLOTS; i++) g_provider.extra[i] = (void *)&qnnemu_unsupported_entry;
  g_provider_list[0] = iface;
  g_init_status = QNN_SUCCESS;
}

/* QnnInterface_getProviders, reached through the loader (the only symbol this module exports). */
QNNEMU_EXPORT Qnn_ErrorHandle_t qnnemu_htp_providers(const QnnInterface_t ***providerList,
                                                     uint32_t *numProviders) {
  if (!providerList || !numProviders) return QNN_INTERFACE_ERROR_INVALID_PARAMETER;
  pthread_once(&g_once, init_once);
  if (g_init_status != QNN_SUCCESS) {
    *providerList = NULL;
    *numProviders = 0;
    return g_init_status;
  }
  *providerList = g_provider_list;
  *numProviders = 1;
  return QNN_SUCCESS;
}
