/* The C side of the cffi module _qnnemu_system_abi.so behind libQnnSystem.so
 * (System/QnnSystemInterface.h: QnnSystemInterface_getProviders): the shared shim body
 * (csrc/abi_shim.h) for the System table, QnnSystemInterface_ImplementationV1_14_t, implemented
 * in qnnemu/abi/system_entry.py.  libQnnSystem.so is csrc/loader.c built with
 * -DQNNEMU_LOADER_SYSTEM; both cffi modules (_qnnemu_htp_abi, _qnnemu_system_abi) may live in one
 * interpreter.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "System/QnnSystemInterface.h"
#include "qnnemu_system_entries.h"

#define ABI_LIBRARY "libQnnSystem.so"
#define ABI_EMBEDDED_WHAT "System library"
#define ABI_INIT_MODULE "qnnemu.abi.system_entry"
#define ABI_INTERFACE_T QnnSystemInterface_t
#define ABI_TABLE_T QNN_SYSTEM_INTERFACE_VER_TYPE
#define ABI_TABLE_MEMBER QNN_SYSTEM_INTERFACE_VER_NAME
#define ABI_TABLE_INITIALIZER QNNEMU_SYS_TABLE_INITIALIZER
/* UNSUPPORTED_FEATURE (1000): the value every System component uses. */
#define ABI_UNSUPPORTED_CODE QNN_SYSTEM_COMMON_ERROR_UNSUPPORTED_FEATURE
#define ABI_INVALID_PARAMETER QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER
#define ABI_EMBED_INIT qnnemu_sys_embed_init
#define ABI_LOG_EMIT qnnemu_sys_log_emit
#define ABI_PROVIDERS qnnemu_system_providers

/* The System provider: no backend (as the vendor's System library), the System API version the
 * Python side negotiated (QNNEMU_SYSTEM_API_VERSION). */
static void abi_describe_provider(QnnSystemInterface_t *iface, const uint32_t version[3]) {
  iface->backendId = QNN_BACKEND_ID_NULL;
  iface->providerName = "QNNEMU_SYSTEM";
  iface->systemApiVersion.major = version[0];
  iface->systemApiVersion.minor = version[1];
  iface->systemApiVersion.patch = version[2];
}

#include "abi_shim.h"
