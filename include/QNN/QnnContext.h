/* qnnemu: Context component: creation, binaries, binary sections, async loading.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNCONTEXT_H
#define QNNEMU_QNNCONTEXT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"
#include "QnnMem.h"
#include "QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnContext_CustomConfig_t;
typedef void *QnnContext_CustomProperty_t;

typedef enum {
  QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_NUMERIC = 0,
  QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_UNDEFINED = 134217727
} QnnContext_AsyncExecutionQueueDepthType_t;

typedef enum {
  QNN_CONTEXT_BINARY_COMPATIBILITY_PERMISSIVE = 0,
  QNN_CONTEXT_BINARY_COMPATIBILITY_STRICT = 1,
  QNN_CONTEXT_BINARY_COMPATIBILITY_TYPE_UNDEFINED = 134217727
} QnnContext_BinaryCompatibilityType_t;

typedef enum {
  QNN_CONTEXT_BUFFER_VERSION_1 = 1,
  QNN_CONTEXT_BUFFER_VERSION_UNDEFINED = 2147483647
} QnnContext_BufferVersion_t;

typedef enum {
  QNN_CONTEXT_CONFIG_OPTION_CUSTOM = 0,
  QNN_CONTEXT_CONFIG_OPTION_PRIORITY = 1,
  QNN_CONTEXT_CONFIG_OPTION_ERROR_REPORTING = 2,
  QNN_CONTEXT_CONFIG_OPTION_OEM_STRING = 3,
  QNN_CONTEXT_CONFIG_ASYNC_EXECUTION_QUEUE_DEPTH = 4,
  QNN_CONTEXT_CONFIG_ENABLE_GRAPHS = 5,
  QNN_CONTEXT_CONFIG_MEMORY_LIMIT_HINT = 6,
  QNN_CONTEXT_CONFIG_PERSISTENT_BINARY = 7,
  QNN_CONTEXT_CONFIG_BINARY_COMPATIBILITY = 8,
  QNN_CONTEXT_CONFIG_OPTION_DEFER_GRAPH_INIT = 9,
  QNN_CONTEXT_CONFIG_GRAPH_RETENTION_ORDER = 10,
  QNN_CONTEXT_CONFIG_UNDEFINED = 2147483647
} QnnContext_ConfigOption_t;

typedef enum {
  QNN_CONTEXT_NO_ERROR = 0,
  QNN_CONTEXT_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_CONTEXT_ERROR_MEM_ALLOC = 1002,
  QNN_CONTEXT_ERROR_INVALID_ARGUMENT = 5000,
  QNN_CONTEXT_MIN_ERROR = 5000,
  QNN_CONTEXT_ERROR_CTX_DOES_NOT_EXIST = 5001,
  QNN_CONTEXT_ERROR_INVALID_HANDLE = 5002,
  QNN_CONTEXT_ERROR_NOT_FINALIZED = 5003,
  QNN_CONTEXT_ERROR_BINARY_VERSION = 5004,
  QNN_CONTEXT_ERROR_CREATE_FROM_BINARY = 5005,
  QNN_CONTEXT_ERROR_GET_BINARY_SIZE_FAILED = 5006,
  QNN_CONTEXT_ERROR_GET_BINARY_FAILED = 5007,
  QNN_CONTEXT_ERROR_BINARY_CONFIGURATION = 5008,
  QNN_CONTEXT_ERROR_SET_PROFILE = 5009,
  QNN_CONTEXT_ERROR_INVALID_CONFIG = 5010,
  QNN_CONTEXT_ERROR_BINARY_SUBOPTIMAL = 5011,
  QNN_CONTEXT_ERROR_ABORTED = 5012,
  QNN_CONTEXT_ERROR_TIMED_OUT = 5013,
  QNN_CONTEXT_ERROR_INCREMENT_INVALID_BUFFER = 5014,
  QNN_CONTEXT_MAX_ERROR = 5999,
  QNN_CONTEXT_ERROR_UNDEFINED = 2147483647
} QnnContext_Error_t;

typedef enum {
  QNN_CONTEXTMEMTYPE_RAW = 0,
  QNN_CONTEXTMEMTYPE_MEMHANDLE = 1,
  QNN_CONTEXTMEMTYPE_UNDEFINED = 2147483647
} QnnContext_MemType_t;

typedef enum {
  QNN_CONTEXT_PARAMS_VERSION_1 = 1,
  QNN_CONTEXT_PARAMS_VERSION_2 = 2,
  QNN_CONTEXT_PARAMS_VERSION_UNDEFINED = 2147483647
} QnnContext_ParamsVersion_t;

typedef enum {
  QNN_CONTEXT_PROPERTY_OPTION_CUSTOM = 0,
  QNN_CONTEXT_PROPERTY_OPTION_UNDEFINED = 2147483647
} QnnContext_PropertyOption_t;

typedef enum {
  QNN_CONTEXT_SECTION_UPDATABLE = 1,
  QNN_CONTEXT_SECTION_UPDATABLE_WEIGHTS = 2,
  QNN_CONTEXT_SECTION_UPDATABLE_QUANT_PARAMS = 3,
  QNN_CONTEXT_SECTION_UNDEFINED = 2147483647
} QnnContext_SectionType_t;

typedef enum {
  QNN_CONTEXT_NOTIFY_TYPE_GRAPH_INIT = 0,
  QNN_CONTEXT_NOTIFY_TYPE_CONTEXT_INIT = 1,
  QNN_CONTEXT_NOTIFY_TYPE_UNDEFINED = 134217727
} QnnContext_createFromBinaryAsyncNotifyType_t;

typedef enum {
  QNN_CONTEXT_CALLBACK_RAW_BUFFER = 1,
  QNN_CONTEXT_CALLBACK_DMA_BUFFER = 2,
  QNN_CONTEXT_CALLBACK_UNDEFINED = 2147483647
} Qnn_ContextBinaryCallbackType_t;

typedef enum {
  QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_1 = 1,
  QNN_CONTEXT_CALLBACK_DMA_BUFFER_VERSION_UNDEFINED = 2147483647
} Qnn_ContextBinaryDmaBufferCallbackVersion_t;

typedef enum {
  QNN_CONTEXT_CALLBACK_RAW_BUFFER_VERSION_1 = 1,
  QNN_CONTEXT_CALLBACK_RAW_BUFFER_VERSION_UNDEFINED = 2147483647
} Qnn_ContextBinaryRawBufferCallbackVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnContext_AsyncExecutionQueueDepth_t QnnContext_AsyncExecutionQueueDepth_t;
typedef struct _QnnContext_BufferV1_t QnnContext_BufferV1_t;
typedef struct _QnnContext_Buffer_t QnnContext_Buffer_t;
typedef struct _QnnContext_Config_t QnnContext_Config_t;
typedef struct _QnnContext_ParamsV1_t QnnContext_ParamsV1_t;
typedef struct _QnnContext_ParamsV2_t QnnContext_ParamsV2_t;
typedef struct _QnnContext_Params_t QnnContext_Params_t;
typedef struct _QnnContext_Property_t QnnContext_Property_t;
typedef struct _Qnn_BinaryBuffer_t Qnn_BinaryBuffer_t;
typedef struct _Qnn_ContextBinaryCallback_t Qnn_ContextBinaryCallback_t;
typedef struct _Qnn_ContextBinaryDataRequest_t Qnn_ContextBinaryDataRequest_t;
typedef struct _Qnn_ContextBinaryDmaBufferCallbackV1_t Qnn_ContextBinaryDmaBufferCallbackV1_t;
typedef struct _Qnn_ContextBinaryDmaBufferCallback_t Qnn_ContextBinaryDmaBufferCallback_t;
typedef struct _Qnn_ContextBinaryDmaDataMem_t Qnn_ContextBinaryDmaDataMem_t;
typedef struct _Qnn_ContextBinaryDmaDataResponse_t Qnn_ContextBinaryDmaDataResponse_t;
typedef struct _Qnn_ContextBinaryRawBufferCallbackV1_t Qnn_ContextBinaryRawBufferCallbackV1_t;
typedef struct _Qnn_ContextBinaryRawBufferCallback_t Qnn_ContextBinaryRawBufferCallback_t;
typedef struct _Qnn_ContextBinaryRawDataMem_t Qnn_ContextBinaryRawDataMem_t;
typedef struct _Qnn_ContextBinaryRawDataResponse_t Qnn_ContextBinaryRawDataResponse_t;

/* Function pointer types. */
typedef void (*QnnContext_createFromBinaryNotifyFn_t)(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, const char *graphName, QnnContext_createFromBinaryAsyncNotifyType_t notifyType, void *notifyParam, Qnn_ErrorHandle_t status);
typedef Qnn_ErrorHandle_t (*Qnn_ContextBinaryDmaDataProviderFn_t)(Qnn_ContextBinaryDataRequest_t req, Qnn_ContextBinaryDmaDataResponse_t *dmaDataResponse, void *notifyParam);
typedef Qnn_ErrorHandle_t (*Qnn_ContextBinaryDmaDataReleaseFn_t)(Qnn_ContextBinaryDmaDataMem_t dmaDataMem, void *notifyParam);
typedef Qnn_ErrorHandle_t (*Qnn_ContextBinaryRawDataProviderFn_t)(Qnn_ContextBinaryDataRequest_t req, Qnn_ContextBinaryRawDataResponse_t *rawDataResponse, void *notifyParam);
typedef Qnn_ErrorHandle_t (*Qnn_ContextBinaryRawDataReleaseFn_t)(Qnn_ContextBinaryRawDataMem_t rawDataMem, void *notifyParam);

struct _QnnContext_AsyncExecutionQueueDepth_t {
  QnnContext_AsyncExecutionQueueDepthType_t type;
  union {
    uint32_t depth;
  };
};

struct _Qnn_BinaryBuffer_t {
  void *data;
  Qnn_ContextBinarySize_t dataSize;
};

struct _QnnContext_BufferV1_t {
  QnnContext_MemType_t memType;
  union {
    Qnn_BinaryBuffer_t binaryBuf;
    Qnn_MemHandle_t memHandle;
  };
};

struct _QnnContext_Buffer_t {
  QnnContext_BufferVersion_t version;
  union {
    QnnContext_BufferV1_t v1;
  };
};

struct _QnnContext_Config_t {
  QnnContext_ConfigOption_t option;
  union {
    QnnContext_CustomConfig_t customConfig;
    Qnn_Priority_t priority;
    Qnn_ErrorReportingConfig_t errorConfig;
    const char *oemString;
    QnnContext_AsyncExecutionQueueDepth_t asyncExeQueueDepth;
    const char * const *enableGraphs;
    uint64_t memoryLimitHint;
    uint8_t isPersistentBinary;
    QnnContext_BinaryCompatibilityType_t binaryCompatibilityType;
    uint8_t isGraphInitDeferred;
    const char * const *graphRetentionOrder;
  };
};

struct _QnnContext_ParamsV1_t {
  const QnnContext_Config_t **config;
  const void *binaryBuffer;
  const Qnn_ContextBinarySize_t binaryBufferSize;
  Qnn_ProfileHandle_t profile;
  QnnContext_createFromBinaryNotifyFn_t notifyFunc;
  void *notifyParam;
};

struct _QnnContext_ParamsV2_t {
  const QnnContext_Config_t **config;
  const void *binaryBuffer;
  const Qnn_ContextBinarySize_t binaryBufferSize;
  Qnn_ProfileHandle_t profile;
  QnnContext_createFromBinaryNotifyFn_t notifyFunc;
  void *notifyParam;
  const Qnn_ContextBinaryCallback_t *callback;
};

struct _QnnContext_Params_t {
  QnnContext_ParamsVersion_t version;
  union {
    QnnContext_ParamsV1_t v1;
    QnnContext_ParamsV2_t *v2;
  };
};

struct _QnnContext_Property_t {
  QnnContext_PropertyOption_t option;
  union {
    QnnContext_CustomProperty_t customProperty;
  };
};

struct _Qnn_ContextBinaryDmaBufferCallbackV1_t {
  Qnn_ContextBinaryDmaDataProviderFn_t dataProvide;
  Qnn_ContextBinaryDmaDataReleaseFn_t dataRelease;
  void *notifyParam;
};

struct _Qnn_ContextBinaryDmaBufferCallback_t {
  Qnn_ContextBinaryDmaBufferCallbackVersion_t version;
  union {
    Qnn_ContextBinaryDmaBufferCallbackV1_t v1;
  };
};

struct _Qnn_ContextBinaryRawBufferCallbackV1_t {
  Qnn_ContextBinaryRawDataProviderFn_t dataProvide;
  Qnn_ContextBinaryRawDataReleaseFn_t dataRelease;
  void *notifyParam;
};

struct _Qnn_ContextBinaryRawBufferCallback_t {
  Qnn_ContextBinaryRawBufferCallbackVersion_t version;
  union {
    Qnn_ContextBinaryRawBufferCallbackV1_t v1;
  };
};

struct _Qnn_ContextBinaryCallback_t {
  Qnn_ContextBinaryCallbackType_t type;
  union {
    Qnn_ContextBinaryRawBufferCallback_t rawBufferCallback;
    Qnn_ContextBinaryDmaBufferCallback_t dmaBufferCallback;
  };
};

struct _Qnn_ContextBinaryDataRequest_t {
  Qnn_ContextBinarySize_t offset;
  Qnn_ContextBinarySize_t size;
  uint8_t isBackendMappingNeeded;
};

struct _Qnn_ContextBinaryDmaDataMem_t {
  Qnn_MemDmaBufInfo_t dmaBuffer;
  Qnn_ContextBinarySize_t memSize;
};

struct _Qnn_ContextBinaryDmaDataResponse_t {
  Qnn_MemDmaBufInfo_t dmaBuffer;
  Qnn_ContextBinarySize_t dataStartOffset;
  Qnn_ContextBinarySize_t alignedSize;
};

struct _Qnn_ContextBinaryRawDataMem_t {
  void *memPtr;
  Qnn_ContextBinarySize_t memSize;
};

struct _Qnn_ContextBinaryRawDataResponse_t {
  void *memPtr;
  Qnn_ContextBinarySize_t dataStartOffset;
  Qnn_ContextBinarySize_t alignedSize;
};

/* Initializers. */
#define QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_INIT { QNN_CONTEXT_ASYNC_EXECUTION_QUEUE_DEPTH_TYPE_UNDEFINED, { 0 } }
#define QNN_CONTEXT_CONFIG_INIT { QNN_CONTEXT_CONFIG_UNDEFINED, { NULL } }
#define QNN_CONTEXT_PROPERTY_INIT { QNN_CONTEXT_PROPERTY_OPTION_UNDEFINED, { NULL } }

/* Entry points. */
Qnn_ErrorHandle_t QnnContext_addToDlc(Qnn_ContextHandle_t context, QnnSystemDlc_Handle_t dlcHandle);
Qnn_ErrorHandle_t QnnContext_applyBinarySection(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, QnnContext_SectionType_t section, const QnnContext_Buffer_t *binaryBuffer, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnContext_create(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Config_t **config, Qnn_ContextHandle_t *context);
Qnn_ErrorHandle_t QnnContext_createFromBinary(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Config_t **config, const void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize, Qnn_ContextHandle_t *context, Qnn_ProfileHandle_t profile);
Qnn_ErrorHandle_t QnnContext_createFromBinaryListAsync(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Params_t **contextParams, const QnnContext_Config_t **listConfig, Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnContext_createFromBinaryWithCallback(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Config_t **config, const Qnn_ContextBinaryCallback_t *callback, const void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize, Qnn_ContextHandle_t *context, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnContext_createFromBinaryWithSignal(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Config_t **config, const void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize, Qnn_ContextHandle_t *context, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnContext_finalize(Qnn_ContextHandle_t context, Qnn_ProfileHandle_t profile);
Qnn_ErrorHandle_t QnnContext_free(Qnn_ContextHandle_t context, Qnn_ProfileHandle_t profile);
Qnn_ErrorHandle_t QnnContext_freeBinarySectionUpdate(QnnContext_Buffer_t binarySectionUpdate, Qnn_LogHandle_t logger);
Qnn_ErrorHandle_t QnnContext_getBinary(Qnn_ContextHandle_t context, void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize, Qnn_ContextBinarySize_t *writtenBufferSize);
Qnn_ErrorHandle_t QnnContext_getBinarySection(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, QnnContext_SectionType_t section, const QnnContext_Buffer_t *binaryBuffer, Qnn_ContextBinarySize_t *writtenBufferSize, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnContext_getBinarySectionSize(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, QnnContext_SectionType_t section, Qnn_ContextBinarySize_t *binaryBufferSize);
Qnn_ErrorHandle_t QnnContext_getBinarySectionUpdate(const QnnContext_Buffer_t *binaryBuffer, const QnnContext_Buffer_t *auxiliaryBuffer, const Qnn_Tensor_t **tensors, uint64_t numTensors, uint8_t keepUpdatable, Qnn_LogHandle_t logger, Qnn_ProfileHandle_t profile, Qnn_SignalHandle_t signal, QnnContext_Buffer_t *binarySectionUpdate);
Qnn_ErrorHandle_t QnnContext_getBinarySize(Qnn_ContextHandle_t context, Qnn_ContextBinarySize_t *binaryBufferSize);
Qnn_ErrorHandle_t QnnContext_getIncrementalBinary(Qnn_ContextHandle_t context, const void **binaryBuffer, Qnn_ContextBinarySize_t *startOffset, Qnn_ContextBinarySize_t *writtenBufferSize);
Qnn_ErrorHandle_t QnnContext_getProperty(Qnn_ContextHandle_t contextHandle, QnnContext_Property_t **properties);
Qnn_ErrorHandle_t QnnContext_releaseIncrementalBinary(Qnn_ContextHandle_t context, const void *binaryBuffer, Qnn_ContextBinarySize_t startOffset);
Qnn_ErrorHandle_t QnnContext_setConfig(Qnn_ContextHandle_t context, const QnnContext_Config_t **config);
Qnn_ErrorHandle_t QnnContext_validateBinary(Qnn_BackendHandle_t backend, Qnn_DeviceHandle_t device, const QnnContext_Config_t **config, const void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNCONTEXT_H */
