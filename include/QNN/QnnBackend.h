/* qnnemu: Backend component: lifetime, configuration, op packages, supported ops.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNBACKEND_H
#define QNNEMU_QNNBACKEND_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"
#include "QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnBackend_CustomConfig_t;
typedef void *QnnBackend_CustomProperty_t;

typedef enum {
  QNN_BACKEND_CONFIG_OPTION_CUSTOM = 0,
  QNN_BACKEND_CONFIG_OPTION_ERROR_REPORTING = 1,
  QNN_BACKEND_CONFIG_OPTION_PLATFORM = 2,
  QNN_BACKEND_CONFIG_OPTION_UNDEFINED = 2147483647
} QnnBackend_ConfigOption_t;

typedef enum {
  QNN_BACKEND_NO_ERROR = 0,
  QNN_BACKEND_ERROR_MEM_ALLOC = 1002,
  QNN_BACKEND_ERROR_UNSUPPORTED_PLATFORM = 1006,
  QNN_BACKEND_ERROR_CANNOT_INITIALIZE = 4000,
  QNN_BACKEND_MIN_ERROR = 4000,
  QNN_BACKEND_ERROR_TERMINATE_FAILED = 4002,
  QNN_BACKEND_ERROR_NOT_SUPPORTED = 4003,
  QNN_BACKEND_ERROR_INVALID_ARGUMENT = 4004,
  QNN_BACKEND_ERROR_OP_PACKAGE_NOT_FOUND = 4005,
  QNN_BACKEND_ERROR_OP_PACKAGE_IF_PROVIDER_NOT_FOUND = 4006,
  QNN_BACKEND_ERROR_OP_PACKAGE_REGISTRATION_FAILED = 4007,
  QNN_BACKEND_ERROR_OP_PACKAGE_UNSUPPORTED_VERSION = 4008,
  QNN_BACKEND_ERROR_OP_PACKAGE_DUPLICATE = 4009,
  QNN_BACKEND_ERROR_INCONSISTENT_CONFIG = 4010,
  QNN_BACKEND_ERROR_INVALID_HANDLE = 4011,
  QNN_BACKEND_ERROR_INVALID_CONFIG = 4012,
  QNN_BACKEND_ERROR_OP_PACKAGE_LOAD_FROM_BUFFER_FAILED = 4013,
  QNN_BACKEND_MAX_ERROR = 4999,
  QNN_BACKEND_ERROR_UNDEFINED = 2147483647
} QnnBackend_Error_t;

typedef enum {
  QNN_BACKEND_PROPERTY_OPTION_CUSTOM = 0,
  QNN_BACKEND_PROPERTY_OPTION_UNDEFINED = 2147483647
} QnnBackend_PropertyOption_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnBackend_Config_t QnnBackend_Config_t;
typedef struct _QnnBackend_OperationName_t QnnBackend_OperationName_t;
typedef struct _QnnBackend_Property_t QnnBackend_Property_t;

struct _QnnBackend_Config_t {
  QnnBackend_ConfigOption_t option;
  union {
    QnnBackend_CustomConfig_t customConfig;
    Qnn_ErrorReportingConfig_t errorConfig;
    const char *platformOption;
  };
};

struct _QnnBackend_OperationName_t {
  const char *packageName;
  const char *name;
  const char *target;
};

struct _QnnBackend_Property_t {
  QnnBackend_PropertyOption_t option;
  union {
    QnnBackend_CustomProperty_t customProperty;
  };
};

/* Initializers. */
#define QNN_BACKEND_CONFIG_INIT { QNN_BACKEND_CONFIG_OPTION_UNDEFINED, { NULL } }
#define QNN_BACKEND_OPERATION_NAME_INIT { NULL, NULL, NULL }
#define QNN_BACKEND_PROPERTY_INIT { QNN_BACKEND_PROPERTY_OPTION_UNDEFINED, { NULL } }

/* Entry points. */
Qnn_ErrorHandle_t QnnBackend_create(Qnn_LogHandle_t logger, const QnnBackend_Config_t **config, Qnn_BackendHandle_t *backend);
Qnn_ErrorHandle_t QnnBackend_free(Qnn_BackendHandle_t backend);
Qnn_ErrorHandle_t QnnBackend_getApiVersion(Qnn_ApiVersion_t *pVersion);
Qnn_ErrorHandle_t QnnBackend_getBuildId(const char **id);
Qnn_ErrorHandle_t QnnBackend_getProperty(Qnn_BackendHandle_t backendHandle, QnnBackend_Property_t **properties);
Qnn_ErrorHandle_t QnnBackend_getSupportedOperations(Qnn_BackendHandle_t backend, uint32_t *numOperations, const QnnBackend_OperationName_t **operations);
Qnn_ErrorHandle_t QnnBackend_registerOpPackage(Qnn_BackendHandle_t backend, const char *packagePath, const char *interfaceProvider, const char *target);
Qnn_ErrorHandle_t QnnBackend_registerOpPackageFromBinary(Qnn_BackendHandle_t backend, const void *opPackageBuffer, uint64_t opPackageBufferSize, const char *interfaceProvider, const char *target);
Qnn_ErrorHandle_t QnnBackend_setConfig(Qnn_BackendHandle_t backend, const QnnBackend_Config_t **config);
Qnn_ErrorHandle_t QnnBackend_validateOpConfig(Qnn_BackendHandle_t backend, Qnn_OpConfig_t opConfig);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNBACKEND_H */
