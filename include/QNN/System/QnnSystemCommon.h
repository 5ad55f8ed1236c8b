/* qnnemu: System library handles, versions and common error codes.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMCOMMON_H
#define QNNEMU_SYSTEM_QNNSYSTEMCOMMON_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_SYSTEM_API_VERSION_MAJOR 1
#define QNN_SYSTEM_API_VERSION_MINOR 14
#define QNN_SYSTEM_API_VERSION_PATCH 0
#define QNN_SYSTEM_COMMON_MAX_ERROR 30999
#define QNN_SYSTEM_COMMON_MIN_ERROR 30000
#define QNN_SYSTEM_CONTEXT_MAX_ERROR 30999
#define QNN_SYSTEM_CONTEXT_MIN_ERROR 30000
#define QNN_SYSTEM_PROFILE_MAX_ERROR 31999
#define QNN_SYSTEM_PROFILE_MIN_ERROR 31000
#define QNN_SYSTEM_INTERFACE_PROVIDER_NAME "SYSTEM_QTI_AISW"
#ifndef QNN_SYSTEM_API
#define QNN_SYSTEM_API
#endif

/* Handles and scalar aliases. */
typedef uint64_t Qnn_SystemDlcBinarySize_t;

typedef enum {
  QNN_SYSTEM_COMMON_NO_ERROR = 0,
  QNN_SYSTEM_COMMON_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_SYSTEM_COMMON_ERROR_INVALID_HANDLE = 30000,
  QNN_SYSTEM_COMMON_ERROR_INVALID_ARGUMENT = 30001
} QnnSystemCommon_Error_t;

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMCOMMON_H */
