/* The C side of the cffi module _qnnemu_htp_abi.so behind libQnnHtpEmu.so (QnnInterface.h:
 * QnnInterface_getProviders): the shared shim body (csrc/abi_shim.h) for the backend's table,
 * QnnInterface_ImplementationV2_39_t, implemented in qnnemu/abi (installed by qnnemu/abi/entry.py).
 *
 * The same module also serves libQnnLpaiEmu.so (LPAI/QnnLpaiCommon.h): a second provider,
 * qnnemu_lpai_providers, whose table is the qnnemu_lpai_<slot> entries (qnnemu/abi/lpai_api.py)
 * on the same Python core, initialised by the same embedded init.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "QnnInterface.h"
#include "HTP/QnnHtpCommon.h"
#include "LPAI/QnnLpaiCommon.h"
#include "qnnemu_entries.h"

#define ABI_LIBRARY "libQnnHtpEmu.so"
#define ABI_EMBEDDED_WHAT "backend"
#define ABI_INIT_MODULE "qnnemu.abi.entry"
#define ABI_INTERFACE_T QnnInterface_t
#define ABI_TABLE_T QNN_INTERFACE_VER_TYPE
#define ABI_TABLE_MEMBER QNN_INTERFACE_VER_NAME
#define ABI_TABLE_INITIALIZER QNNEMU_TABLE_INITIALIZER
#define ABI_UNSUPPORTED_CODE QNN_COMMON_ERROR_NOT_SUPPORTED
#define ABI_INVALID_PARAMETER QNN_INTERFACE_ERROR_INVALID_PARAMETER
#define ABI_EMBED_INIT qnnemu_embed_init
#define ABI_LOG_EMIT qnnemu_log_emit
#define ABI_PROVIDERS qnnemu_htp_providers

/* The HTP backend's provider: the core API version the Python side negotiated
 * (QNNEMU_CORE_API_VERSION), the HTP backend API version of the headers. */
static void abi_describe_provider(QnnInterface_t *iface, const uint32_t version[3]) {
  iface->backendId = QNN_BACKEND_ID_HTP;
  iface->providerName = "QNNEMU_HTP";
  iface->apiVersion.coreApiVersion.major = version[0];
  iface->apiVersion.coreApiVersion.minor = version[1];
  iface->apiVersion.coreApiVersion.patch = version[2];
  iface->apiVersion.backendApiVersion.major = QNN_HTP_API_VERSION_MAJOR;
  iface->apiVersion.backendApiVersion.minor = QNN_HTP_API_VERSION_MINOR;
  iface->apiVersion.backendApiVersion.patch = QNN_HTP_API_VERSION_PATCH;
}

/* libQnnLpaiEmu.so's provider, served by the same module (abi_shim.h ABI_VARIANT_*): backend id
 * QNN_BACKEND_ID_LPAI, the LPAI provider name and backend API version of the headers, the same
 * core API version. */
#define ABI_VARIANT_PROVIDERS qnnemu_lpai_providers
#define ABI_VARIANT_TABLE_INITIALIZER QNNEMU_LPAI_TABLE_INITIALIZER

static void abi_describe_variant(QnnInterface_t *iface, const uint32_t version[3]) {
  iface->backendId = QNN_BACKEND_ID_LPAI;
  iface->providerName = QNN_LPAI_INTERFACE_PROVIDER_NAME;
  iface->apiVersion.coreApiVersion.major = version[0];
  iface->apiVersion.coreApiVersion.minor = version[1];
  iface->apiVersion.coreApiVersion.patch = version[2];
  iface->apiVersion.backendApiVersion.major = QNN_LPAI_API_VERSION_MAJOR;
  iface->apiVersion.backendApiVersion.minor = QNN_LPAI_API_VERSION_MINOR;
  iface->apiVersion.backendApiVersion.patch = QNN_LPAI_API_VERSION_PATCH;
}

#include "fast_execute.h"
#include "abi_shim.h"

/* Library layout (QNN HTP backend documentation, "HTP Session & Artifact Usage Guidelines"): the
 * backend loaders of the process register here (csrc/loader.c); the first one's path is the
 * backend's, a loader at another path is a second copy.  A second copy's guarded entries mark
 * the calling thread while they run; qnnemu/abi/library_copies.py reads both. */
#include <limits.h>
#include <string.h>

static pthread_mutex_t g_loaders_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_first_loader[PATH_MAX];
static __thread const char *g_via_loader;

QNNEMU_EXPORT int qnnemu_htp_loader_register(const char *path) {
  pthread_mutex_lock(&g_loaders_lock);
  if (!g_first_loader[0] && path) snprintf(g_first_loader, sizeof g_first_loader, "%s", path);
  int first = path && strcmp(g_first_loader, path) == 0;
  pthread_mutex_unlock(&g_loaders_lock);
  return first;
}

QNNEMU_EXPORT void qnnemu_htp_loader_enter(const char *path) { g_via_loader = path; }

const char *qnnemu_loader_first(void) { return g_first_loader; }

const char *qnnemu_loader_via(void) { return g_via_loader ? g_via_loader : ""; }
