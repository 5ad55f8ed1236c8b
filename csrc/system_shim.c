/* The C side of the cffi module _qnnemu_system_abi.so behind libQnnSystem.so
 * (System/QnnSystemInterface.h: QnnSystemInterface_getProviders).
 *
 * The same pattern as csrc/shim.c: libQnnSystem.so is csrc/loader.c built with
 * -DQNNEMU_LOADER_SYSTEM; it starts Python (or uses the one running: ONNX Runtime in Python, or
 * libQnnHtpEmu.so loaded first), loads this module and forwards to qnnemu_system_providers,
 * which calls the Python-side init (qnnemu/abi/system_entry.py) and hands out the table only
 * when it reported success with the package version baked in at build time.  Both cffi modules
 * (_qnnemu_htp_abi, _qnnemu_system_abi) live in one interpreter.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "System/QnnSystemInterface.h"
#include "qnnemu_system_entries.h"
#include "log_forward.h"
#include "fork_python.h"

#define QNNEMU_EXPORT __attribute__((visibility("default")))

/* Provided by the cffi embedding module (embedding_api). */
int qnnemu_sys_embed_init(const char *baked_version, uint32_t *system_api_version);

/* Clients built against newer headers copy a longer table by value; the slots past the 89 we
 * know (QnnSystemInterface_ImplementationV1_14_t) answer UNSUPPORTED_FEATURE (1000, the
 * value every System component uses).  Returning an integer is safe for any signature on
 * x86-64. */
#define QNNEMU_SYS_EXTRA_SLOTS 64

static Qnn_ErrorHandle_t qnnemu_sys_unsupported_entry(void) {
  return QNN_SYSTEM_COMMON_ERROR_UNSUPPORTED_FEATURE;
}

typedef struct {
  QnnSystemInterface_t iface;
  void *extra[QNNEMU_SYS_EXTRA_SLOTS];
} PaddedSystemInterface;

static PaddedSystemInterface g_provider;
static const QnnSystemInterface_t *g_provider_list[1];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t g_init_status = QNN_COMMON_ERROR_LOADING_BINARIES;

void qnnemu_sys_log_emit(void *callback, QnnLog_Level_t level, uint64_t timestamp,
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
  uint32_t version[3] = {0, 0, 0};
  install_fork_handlers(); /* a fork during a call leaves a usable child (fork_python.h) */
  int rc = qnnemu_sys_embed_init(QNNEMU_PACKAGE_VERSION, version);
  if (rc == 0) {
    /* cffi returns 0 when the embedded Python failed to initialise. */
    fprintf(stderr, "qnnemu: the embedded Python System library failed to initialise "
                    "(is the qnnemu package importable by this interpreter?)\n");
    return;
  }
  if (rc < 0) {
    /* The Python side refused (version mismatch, bad configuration) and recorded why. */
    g_init_status = QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES;
    report_init_failure("libQnnSystem.so", "qnnemu.abi.system_entry");
    return;
  }
  static const QNN_SYSTEM_INTERFACE_VER_TYPE table = QNNEMU_SYS_TABLE_INITIALIZER;
  QnnSystemInterface_t *iface = &g_provider.iface;
  iface->backendId = QNN_BACKEND_ID_NULL; /* as the vendor's System library: no backend */
  iface->providerName = "QNNEMU_SYSTEM";
  iface->systemApiVersion.major = version[0];
  iface->systemApiVersion.minor = version[1];
  iface->systemApiVersion.patch = version[2];
  iface->QNN_SYSTEM_INTERFACE_VER_NAME = table;
  for (int i = 0; i < QNNEMU_SYS_EXTRA_SLOTS; i++)
    g_provider.extra[i] = (void *)&qnnemu_sys_unsupported_entry;
  g_provider_list[0] = iface;
  g_init_status = QNN_SUCCESS;
}

/* QnnSystemInterface_getProviders, reached through the loader (the module's only export). */
QNNEMU_EXPORT Qnn_ErrorHandle_t qnnemu_system_providers(
    const QnnSystemInterface_t ***providerList, uint32_t *numProviders) {
  if (!providerList || !numProviders) return QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER;
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
