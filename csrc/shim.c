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

#include "fast_execute.h"
#include "abi_shim.h"

/* The LPAI backend's provider (libQnnLpaiEmu.so): backend id QNN_BACKEND_ID_LPAI, the LPAI
 * provider name and backend API version of the headers, the core API version the shared init
 * negotiated. */
static AbiPaddedInterface g_lpai_provider;
static const QnnInterface_t *g_lpai_provider_list[1];
static pthread_once_t g_lpai_once = PTHREAD_ONCE_INIT;

static void lpai_init_once(void) {
  static const QNN_INTERFACE_VER_TYPE table = QNNEMU_LPAI_TABLE_INITIALIZER;
  QnnInterface_t *iface = &g_lpai_provider.iface;
  iface->backendId = QNN_BACKEND_ID_LPAI;
  iface->providerName = QNN_LPAI_INTERFACE_PROVIDER_NAME;
  iface->apiVersion.coreApiVersion = g_provider.iface.apiVersion.coreApiVersion;
  iface->apiVersion.backendApiVersion.major = QNN_LPAI_API_VERSION_MAJOR;
  iface->apiVersion.backendApiVersion.minor = QNN_LPAI_API_VERSION_MINOR;
  iface->apiVersion.backendApiVersion.patch = QNN_LPAI_API_VERSION_PATCH;
  iface->QNN_INTERFACE_VER_NAME = table;
  for (int i = 0; i < ABI_EXTRA_SLOTS; i++) g_lpai_provider.extra[i] = (void *)&abi_unsupported_entry;
  g_lpai_provider_list[0] = iface;
}

QNNEMU_EXPORT Qnn_ErrorHandle_t qnnemu_lpai_providers(const QnnInterface_t ***providerList,
                                                      uint32_t *numProviders) {
  if (!providerList || !numProviders) return ABI_INVALID_PARAMETER;
  pthread_once(&g_once, init_once);   /* the shared embedded init (abi_shim.h) */
  if (g_init_status != QNN_SUCCESS) {
    *providerList = NULL;
    *numProviders = 0;
    return g_init_status;
  }
  pthread_once(&g_lpai_once, lpai_init_once);
  *providerList = g_lpai_provider_list;
  *numProviders = 1;
  return QNN_SUCCESS;
}
