/* qnnemu: Handles, error-code layout, API version numbers and the common error codes.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNCOMMON_H
#define QNNEMU_QNNCOMMON_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_BACKEND_ID_NULL 0
#define QNN_MAX_ERROR_BACKEND 4999
#define QNN_MAX_ERROR_BACKEND_SAVER 4998
#define QNN_MAX_ERROR_COMMON 1999
#define QNN_MAX_ERROR_CONTEXT 5999
#define QNN_MAX_ERROR_DEVICE 14999
#define QNN_MAX_ERROR_ERROR 10999
#define QNN_MAX_ERROR_GLOBAL_CONFIG 15999
#define QNN_MAX_ERROR_GRAPH 6999
#define QNN_MAX_ERROR_INTERFACE 60999
#define QNN_MAX_ERROR_LOG 11999
#define QNN_MAX_ERROR_MEM 8999
#define QNN_MAX_ERROR_OP_PACKAGE 3999
#define QNN_MAX_ERROR_PERF_INFRASTRUCTURE 13999
#define QNN_MAX_ERROR_PROFILE 12999
#define QNN_MAX_ERROR_PROPERTY 2999
#define QNN_MAX_ERROR_SIGNAL 9999
#define QNN_MAX_ERROR_SYSTEM 49999
#define QNN_MAX_ERROR_TENSOR 7999
#define QNN_MIN_ERROR_BACKEND 4000
#define QNN_MIN_ERROR_BACKEND_SAVER 4950
#define QNN_MIN_ERROR_COMMON 1000
#define QNN_MIN_ERROR_CONTEXT 5000
#define QNN_MIN_ERROR_DEVICE 14000
#define QNN_MIN_ERROR_ERROR 10000
#define QNN_MIN_ERROR_GLOBAL_CONFIG 15000
#define QNN_MIN_ERROR_GRAPH 6000
#define QNN_MIN_ERROR_INTERFACE 60000
#define QNN_MIN_ERROR_LOG 11000
#define QNN_MIN_ERROR_MEM 8000
#define QNN_MIN_ERROR_OP_PACKAGE 3000
#define QNN_MIN_ERROR_PERF_INFRASTRUCTURE 13000
#define QNN_MIN_ERROR_PROFILE 12000
#define QNN_MIN_ERROR_PROPERTY 2000
#define QNN_MIN_ERROR_SIGNAL 9000
#define QNN_MIN_ERROR_SYSTEM 30000
#define QNN_MIN_ERROR_TENSOR 7000
#define QNN_SUCCESS 0
#ifndef QNN_API
#define QNN_API
#endif
#define QNN_GET_ERROR_CODE(errorHandle) ((errorHandle)&0xFFFF)
#define QNN_PASTE_THREE(a,b,c) a ##b ##c

/* Handles and scalar aliases. */
typedef void *Qnn_Handle_t;
typedef Qnn_Handle_t QnnSystemDlc_Handle_t;
typedef Qnn_Handle_t Qnn_BackendHandle_t;
typedef Qnn_Handle_t Qnn_ContextHandle_t;
typedef Qnn_Handle_t Qnn_DeviceHandle_t;
typedef uint64_t Qnn_ErrorHandle_t;
typedef Qnn_Handle_t Qnn_GraphHandle_t;
typedef Qnn_Handle_t Qnn_LogHandle_t;
typedef Qnn_Handle_t Qnn_MemHandle_t;
typedef Qnn_Handle_t Qnn_ProfileHandle_t;
typedef Qnn_Handle_t Qnn_SignalHandle_t;

typedef enum {
  QNN_COMMON_ERROR_NOT_SUPPORTED = 1000,
  QNN_COMMON_MIN_ERROR = 1000,
  QNN_COMMON_ERROR_MEM_ALLOC = 1002,
  QNN_COMMON_ERROR_SYSTEM = 1003,
  QNN_COMMON_ERROR_INVALID_ARGUMENT = 1004,
  QNN_COMMON_ERROR_OPERATION_NOT_PERMITTED = 1005,
  QNN_COMMON_ERROR_PLATFORM_NOT_SUPPORTED = 1006,
  QNN_COMMON_ERROR_SYSTEM_COMMUNICATION = 1007,
  QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES = 1008,
  QNN_COMMON_ERROR_LOADING_BINARIES = 1009,
  QNN_COMMON_ERROR_RESOURCE_UNAVAILABLE = 1010,
  QNN_COMMON_ERROR_SYSTEM_COMMUNICATION_FATAL = 1011,
  QNN_COMMON_ERROR_GENERAL = 1100,
  QNN_COMMON_MAX_ERROR = 1999,
  QNN_COMMON_ERROR_UNDEFINED = 2147483647
} QnnCommon_Error_t;

/* Initializers. */
#define QNN_API_VERSION_MAJOR 2
#define QNN_API_VERSION_MINOR 39
#define QNN_API_VERSION_PATCH 0

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNCOMMON_H */
