/* qnnemu: Op package interface implemented by op libraries.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNOPPACKAGE_H
#define QNNEMU_QNNOPPACKAGE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"
#include "QnnLog.h"
#include "QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_OP_PACKAGE_RESERVED_INFO_SIZE 12

/* Handles and scalar aliases. */
typedef struct _QnnOpPackage_GlobalInfrastructure_t *QnnOpPackage_GlobalInfrastructure_t;
typedef struct _QnnOpPackage_GraphInfrastructure_t *QnnOpPackage_GraphInfrastructure_t;
typedef struct _QnnOpPackage_Node_t *QnnOpPackage_Node_t;
typedef struct _QnnOpPackage_OpImpl_t *QnnOpPackage_OpImpl_t;
typedef struct _QnnOpPackage_OperationInfo_t *QnnOpPackage_OperationInfo_t;
typedef struct _QnnOpPackage_Optimization_t *QnnOpPackage_Optimization_t;
typedef struct _QnnOpPackage_PackageInfo_t QnnOpPackage_PackageInfo_t;
typedef Qnn_Handle_t Qnn_OpPackageHandle_t;

typedef enum {
  QNN_OP_PACKAGE_NO_ERROR = 0,
  QNN_OP_PACKAGE_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_OP_PACKAGE_ERROR_GENERAL = 1100,
  QNN_OP_PACKAGE_ERROR_LIBRARY_ALREADY_INITIALIZED = 3000,
  QNN_OP_PACKAGE_MIN_ERROR = 3000,
  QNN_OP_PACKAGE_ERROR_LIBRARY_NOT_INITIALIZED = 3001,
  QNN_OP_PACKAGE_ERROR_INVALID_HANDLE = 3002,
  QNN_OP_PACKAGE_ERROR_INVALID_INFRASTRUCTURE = 3100,
  QNN_OP_PACKAGE_ERROR_INVALID_INFO = 3101,
  QNN_OP_PACKAGE_ERROR_VALIDATION_FAILURE = 3110,
  QNN_OP_PACKAGE_ERROR_INVALID_ARGUMENT = 3200,
  QNN_OP_PACKAGE_MAX_ERROR = 3999,
  QNN_OP_PACKAGE_ERROR_UNDEFINED = 2147483647
} QnnOpPackage_Error_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnOpPackage_ImplementationV1_4_t QnnOpPackage_ImplementationV1_4_t;
typedef struct _QnnOpPackage_ImplementationV2_0_t QnnOpPackage_ImplementationV2_0_t;
typedef struct _QnnOpPackage_Info_t QnnOpPackage_Info_t;
typedef struct _QnnOpPackage_Interface_t QnnOpPackage_Interface_t;

/* Function pointer types. */
typedef Qnn_ErrorHandle_t (*QnnOpPackage_CreateFn_t)(QnnOpPackage_GlobalInfrastructure_t infrastructure, QnnLog_Callback_t callback, QnnLog_Level_t maxLogLevel, Qnn_OpPackageHandle_t *opPackage);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_CreateOpImplFn_t)(QnnOpPackage_GraphInfrastructure_t graphInfrastructure, QnnOpPackage_Node_t node, QnnOpPackage_OpImpl_t *opImpl);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_CreateOpImplHandleFn_t)(Qnn_OpPackageHandle_t opPackage, QnnOpPackage_GraphInfrastructure_t graphInfrastructure, QnnOpPackage_Node_t node, QnnOpPackage_OpImpl_t *opImpl);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_FreeFn_t)(Qnn_OpPackageHandle_t opPackage);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_FreeOpImplFn_t)(QnnOpPackage_OpImpl_t opImpl);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_FreeOpImplHandleFn_t)(Qnn_OpPackageHandle_t opPackage, QnnOpPackage_OpImpl_t opImpl);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_GetInfoFn_t)(const QnnOpPackage_Info_t **info);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_InitFn_t)(QnnOpPackage_GlobalInfrastructure_t infrastructure);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_InterfaceProvider_t)(QnnOpPackage_Interface_t *intface_);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_LogInitializeFn_t)(QnnLog_Callback_t callback, QnnLog_Level_t maxLogLevel);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_LogSetLevelFn_t)(QnnLog_Level_t maxLogLevel);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_LogSetLevelHandleFn_t)(Qnn_OpPackageHandle_t opPackage, QnnLog_Level_t maxLogLevel);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_LogTerminateFn_t)(void);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_TerminateFn_t)();
typedef Qnn_ErrorHandle_t (*QnnOpPackage_ValidateOpConfigFn_t)(Qnn_OpConfig_t opConfig);
typedef Qnn_ErrorHandle_t (*QnnOpPackage_ValidateOpConfigHandleFn_t)(Qnn_OpPackageHandle_t opPackage, Qnn_OpConfig_t opConfig);

struct _QnnOpPackage_ImplementationV1_4_t {
  QnnOpPackage_InitFn_t init;
  QnnOpPackage_TerminateFn_t terminate;
  QnnOpPackage_GetInfoFn_t getInfo;
  QnnOpPackage_ValidateOpConfigFn_t validateOpConfig;
  QnnOpPackage_CreateOpImplFn_t createOpImpl;
  QnnOpPackage_FreeOpImplFn_t freeOpImpl;
  QnnOpPackage_LogInitializeFn_t logInitialize;
  QnnOpPackage_LogSetLevelFn_t logSetLevel;
  QnnOpPackage_LogTerminateFn_t logTerminate;
};

struct _QnnOpPackage_ImplementationV2_0_t {
  QnnOpPackage_CreateFn_t create;
  QnnOpPackage_GetInfoFn_t getInfo;
  QnnOpPackage_ValidateOpConfigHandleFn_t validateOpConfig;
  QnnOpPackage_CreateOpImplHandleFn_t createOpImpl;
  QnnOpPackage_FreeOpImplHandleFn_t freeOpImpl;
  QnnOpPackage_LogSetLevelHandleFn_t logSetLevel;
  QnnOpPackage_FreeFn_t free;
};

struct _QnnOpPackage_Info_t {
  const char *packageName;
  const char **operationNames;
  const QnnOpPackage_OperationInfo_t *operationInfo;
  uint32_t numOperations;
  const QnnOpPackage_Optimization_t *optimizations;
  uint32_t numOptimizations;
  const char *sdkBuildId;
  const Qnn_ApiVersion_t *sdkApiVersion;
  const QnnOpPackage_PackageInfo_t *packageInfo;
  const Qnn_Version_t *opsetVersion;
  size_t reserved[12];
};

struct _QnnOpPackage_Interface_t {
  Qnn_Version_t interfaceVersion;
  union {
    QnnOpPackage_ImplementationV1_4_t v1_4;
    QnnOpPackage_ImplementationV2_0_t v2_0;
  };
};

/* Initializers. */
#define QNN_OP_PACKAGE_API_VERSION_1_4_0 { 1u, 4u, 0u }
#define QNN_OP_PACKAGE_API_VERSION_2_0_0 { 2u, 0u, 0u }
#define QNN_OP_PACKAGE_IMPLEMENTATION_V1_4_INIT { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }
#define QNN_OP_PACKAGE_IMPLEMENTATION_V2_0_INIT { NULL, NULL, NULL, NULL, NULL, NULL, NULL }
#define QNN_OP_PACKAGE_INFO_INIT { NULL, NULL, NULL, 0u, NULL, 0u, NULL, NULL, NULL, NULL, { 0u } }
#define QNN_OP_PACKAGE_INTERFACE_INIT { QNN_OP_PACKAGE_API_VERSION_1_4_0, { QNN_OP_PACKAGE_IMPLEMENTATION_V1_4_INIT } }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNOPPACKAGE_H */
