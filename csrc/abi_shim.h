/* The C side of an embedded ABI library's cffi module (_qnnemu_htp_abi.so behind libQnnHtpEmu.so,
 * _qnnemu_system_abi.so behind libQnnSystem.so): one body, included by csrc/shim.c and
 * csrc/system_shim.c after they define what differs (the table type, the library name, the
 * Python module that installs the entries, the symbol names).
 *
 * The loader (csrc/loader.c) starts Python and loads the module, then forwards
 * <Provider>_getProviders to ABI_PROVIDERS here.  That is plain C on purpose: if the embedded init
 * fails, cffi's generated wrappers return 0, which is QNN_SUCCESS; here we call the Python-side
 * init (qnnemu/abi/framework.py Library.install) and only hand out the table when it reported
 * success with the package version baked in at build time.
 *
 * The includer defines:
 *   ABI_LIBRARY            "libQnnHtpEmu.so"       the library, for stderr lines
 *   ABI_EMBEDDED_WHAT      "backend"               what failed to initialise (stderr)
 *   ABI_INIT_MODULE        "qnnemu.abi.entry"      module whose ``init_failure`` says why
 *   ABI_INTERFACE_T        QnnInterface_t          the provider struct
 *   ABI_TABLE_T, ABI_TABLE_MEMBER                  the versioned table type and its member
 *   ABI_TABLE_INITIALIZER                          generated: the entry functions in order
 *   ABI_UNSUPPORTED_CODE                           what slots past the known table answer
 *   ABI_INVALID_PARAMETER                          NULL providerList / numProviders
 *   ABI_EMBED_INIT, ABI_LOG_EMIT, ABI_PROVIDERS    symbol names
 * and ``static void abi_describe_provider(ABI_INTERFACE_T *iface, const uint32_t version[3])``
 * filling the provider's id, name and API version.  Optionally, a second provider of the same
 * table type served by the same module (libQnnLpaiEmu.so): ABI_VARIANT_PROVIDERS (its exported
 * symbol), ABI_VARIANT_TABLE_INITIALIZER and ``abi_describe_variant`` (same signature).
 */
#ifndef QNNEMU_ABI_SHIM_H
#define QNNEMU_ABI_SHIM_H

#include <pthread.h>
#include <stdio.h>

#include "log_forward.h"
#include "fork_python.h"

#define QNNEMU_EXPORT __attribute__((visibility("default")))

/* Provided by the cffi embedding module (embedding_api). */
int ABI_EMBED_INIT(const char *baked_version, uint32_t *api_version);

/* Clients built against newer headers copy a longer table by value; the slots past the ones we
 * know answer ABI_UNSUPPORTED_CODE.  Returning an integer is safe for any signature on x86-64. */
#define ABI_EXTRA_SLOTS 64

static Qnn_ErrorHandle_t abi_unsupported_entry(void) { return ABI_UNSUPPORTED_CODE; }

typedef struct {
  ABI_INTERFACE_T iface;
  void *extra[ABI_EXTRA_SLOTS];
} AbiPaddedInterface;

static AbiPaddedInterface g_provider;
static const ABI_INTERFACE_T *g_provider_list[1];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t g_init_status = QNN_COMMON_ERROR_LOADING_BINARIES;

/* A QnnLog callback call for a Python logger (varargs cannot be made from cffi). */
void ABI_LOG_EMIT(void *callback, QnnLog_Level_t level, uint64_t timestamp, const char *message) {
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

#ifdef ABI_VARIANT_PROVIDERS
static AbiPaddedInterface g_variant;
static const ABI_INTERFACE_T *g_variant_list[1];
#endif

static void init_once(void) {
  uint32_t version[3] = {0, 0, 0};
  install_fork_handlers(); /* a fork during a call leaves a usable child (fork_python.h) */
  int rc = ABI_EMBED_INIT(QNNEMU_PACKAGE_VERSION, version);
  if (rc == 0) {
    /* cffi returns 0 when the embedded Python failed to initialise. */
    fprintf(stderr, "qnnemu: the embedded Python " ABI_EMBEDDED_WHAT " failed to initialise "
                    "(is the qnnemu package importable by this interpreter?)\n");
    return;
  }
  if (rc < 0) {
    /* The Python side refused (version mismatch, bad configuration) and recorded why. */
    g_init_status = QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES;
    report_init_failure(ABI_LIBRARY, ABI_INIT_MODULE);
    return;
  }
  static const ABI_TABLE_T table = ABI_TABLE_INITIALIZER;
  ABI_INTERFACE_T *iface = &g_provider.iface;
  abi_describe_provider(iface, version);
  iface->ABI_TABLE_MEMBER = table;
  for (int i = 0; i < ABI_EXTRA_SLOTS; i++) g_provider.extra[i] = (void *)&abi_unsupported_entry;
  g_provider_list[0] = iface;
#ifdef ABI_VARIANT_PROVIDERS
  static const ABI_TABLE_T variant_table = ABI_VARIANT_TABLE_INITIALIZER;
  abi_describe_variant(&g_variant.iface, version);
  g_variant.iface.ABI_TABLE_MEMBER = variant_table;
  for (int i = 0; i < ABI_EXTRA_SLOTS; i++) g_variant.extra[i] = (void *)&abi_unsupported_entry;
  g_variant_list[0] = &g_variant.iface;
#endif
  g_init_status = QNN_SUCCESS;
}

/* Both providers' getProviders: one init, then the list of the provider asked for. */
static Qnn_ErrorHandle_t abi_providers(const ABI_INTERFACE_T ***providerList, uint32_t *numProviders,
                                       const ABI_INTERFACE_T **list) {
  if (!providerList || !numProviders) return ABI_INVALID_PARAMETER;
  pthread_once(&g_once, init_once);
  if (g_init_status != QNN_SUCCESS) {
    *providerList = NULL;
    *numProviders = 0;
    return g_init_status;
  }
  *providerList = list;
  *numProviders = 1;
  return QNN_SUCCESS;
}

/* <Provider>_getProviders, reached through the loader (the only symbol this module exports). */
QNNEMU_EXPORT Qnn_ErrorHandle_t ABI_PROVIDERS(const ABI_INTERFACE_T ***providerList,
                                              uint32_t *numProviders) {
  return abi_providers(providerList, numProviders, g_provider_list);
}

#ifdef ABI_VARIANT_PROVIDERS
/* The second provider's getProviders (the LPAI loader's). */
QNNEMU_EXPORT Qnn_ErrorHandle_t ABI_VARIANT_PROVIDERS(const ABI_INTERFACE_T ***providerList,
                                                      uint32_t *numProviders) {
  return abi_providers(providerList, numProviders, g_variant_list);
}
#endif

#endif /* QNNEMU_ABI_SHIM_H */
