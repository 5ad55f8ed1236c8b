/* qnnemu: System library: context binary inspection.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMCONTEXT_H
#define QNNEMU_SYSTEM_QNNSYSTEMCONTEXT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnDevice.h"
#include "../QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnSystemContext_Handle_t;

typedef enum {
  QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_1 = 1,
  QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_2 = 2,
  QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_3 = 3,
  QNN_SYSTEM_CONTEXT_BINARY_INFO_UNDEFINED = 2147483647
} QnnSystemContext_BinaryInfoVersion_t;

typedef enum {
  QNN_SYSTEM_CONTEXT_NO_ERROR = 0,
  QNN_SYSTEM_CONTEXT_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_SYSTEM_CONTEXT_ERROR_INVALID_HANDLE = 30000,
  QNN_SYSTEM_CONTEXT_MINERROR = 30000,
  QNN_SYSTEM_CONTEXT_ERROR_INVALID_ARGUMENT = 30001,
  QNN_SYSTEM_CONTEXT_ERROR_OPERATION_FAILED = 30002,
  QNN_SYSTEM_CONTEXT_ERROR_MALFORMED_BINARY = 30010,
  QNN_SYSTEM_CONTEXT_MAXERROR = 49999
} QnnSystemContext_Error_t;

typedef enum {
  QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_1 = 1,
  QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_2 = 2,
  QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_3 = 3,
  QNN_SYSTEM_CONTEXT_GRAPH_INFO_UNDEFINED = 2147483647
} QnnSystemContext_GraphInfoVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSystemContext_BinaryInfoV1_t QnnSystemContext_BinaryInfoV1_t;
typedef struct _QnnSystemContext_BinaryInfoV2_t QnnSystemContext_BinaryInfoV2_t;
typedef struct _QnnSystemContext_BinaryInfoV3_t QnnSystemContext_BinaryInfoV3_t;
typedef struct _QnnSystemContext_BinaryInfo_t QnnSystemContext_BinaryInfo_t;
typedef struct _QnnSystemContext_GraphInfoV1_t QnnSystemContext_GraphInfoV1_t;
typedef struct _QnnSystemContext_GraphInfoV2_t QnnSystemContext_GraphInfoV2_t;
typedef struct _QnnSystemContext_GraphInfoV3_t QnnSystemContext_GraphInfoV3_t;
typedef struct _QnnSystemContext_GraphInfo_t QnnSystemContext_GraphInfo_t;

struct _QnnSystemContext_BinaryInfoV1_t {
  uint32_t backendId;
  const char *buildId;
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
  const char *socVersion;
  Qnn_Version_t hwInfoBlobVersion;
  Qnn_Version_t contextBlobVersion;
  uint32_t hwInfoBlobSize;
  void *hwInfoBlob;
  uint64_t contextBlobSize;
  uint32_t numContextTensors;
  Qnn_Tensor_t *contextTensors;
  uint32_t numGraphs;
  QnnSystemContext_GraphInfo_t *graphs;
};

struct _QnnSystemContext_BinaryInfoV2_t {
  uint32_t backendId;
  const char *buildId;
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
  const char *socVersion;
  Qnn_Version_t hwInfoBlobVersion;
  Qnn_Version_t contextBlobVersion;
  uint32_t hwInfoBlobSize;
  void *hwInfoBlob;
  uint64_t contextBlobSize;
  uint32_t numContextTensors;
  Qnn_Tensor_t *contextTensors;
  uint32_t numGraphs;
  QnnSystemContext_GraphInfo_t *graphs;
  QnnDevice_PlatformInfo_t *platformInfo;
};

struct _QnnSystemContext_BinaryInfoV3_t {
  uint32_t backendId;
  const char *buildId;
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
  const char *socVersion;
  Qnn_Version_t contextBlobVersion;
  uint64_t contextBlobSize;
  uint32_t numContextTensors;
  Qnn_Tensor_t *contextTensors;
  uint32_t numGraphs;
  QnnSystemContext_GraphInfo_t *graphs;
  QnnDevice_PlatformInfo_t *platformInfo;
  uint32_t contextMetadataSize;
  void *contextMetadata;
  uint32_t socModel;
};

struct _QnnSystemContext_BinaryInfo_t {
  QnnSystemContext_BinaryInfoVersion_t version;
  union {
    QnnSystemContext_BinaryInfoV1_t contextBinaryInfoV1;
    QnnSystemContext_BinaryInfoV2_t contextBinaryInfoV2;
    QnnSystemContext_BinaryInfoV3_t contextBinaryInfoV3;
  };
};

struct _QnnSystemContext_GraphInfoV1_t {
  const char *graphName;
  uint32_t numGraphInputs;
  Qnn_Tensor_t *graphInputs;
  uint32_t numGraphOutputs;
  Qnn_Tensor_t *graphOutputs;
};

struct _QnnSystemContext_GraphInfoV2_t {
  const char *graphName;
  uint32_t numGraphInputs;
  Qnn_Tensor_t *graphInputs;
  uint32_t numGraphOutputs;
  Qnn_Tensor_t *graphOutputs;
  uint32_t numUpdateableTensors;
  Qnn_Tensor_t *updateableTensors;
};

struct _QnnSystemContext_GraphInfoV3_t {
  const char *graphName;
  uint32_t numGraphInputs;
  Qnn_Tensor_t *graphInputs;
  uint32_t numGraphOutputs;
  Qnn_Tensor_t *graphOutputs;
  uint32_t numUpdateableTensors;
  Qnn_Tensor_t *updateableTensors;
  uint32_t graphBlobInfoSize;
  void *graphBlobInfo;
  uint32_t startOpIndex;
  uint32_t endOpIndex;
};

struct _QnnSystemContext_GraphInfo_t {
  QnnSystemContext_GraphInfoVersion_t version;
  union {
    QnnSystemContext_GraphInfoV1_t graphInfoV1;
    QnnSystemContext_GraphInfoV2_t graphInfoV2;
    QnnSystemContext_GraphInfoV3_t graphInfoV3;
  };
};

/* Initializers. */
#define QNN_SYSTEM_CONTEXT_BINARYINFO_INIT { QNN_SYSTEM_CONTEXT_BINARY_INFO_UNDEFINED, { QNN_SYSTEM_CONTEXT_BINARY_INFO_V1_INIT } }
#define QNN_SYSTEM_CONTEXT_BINARY_INFO_V1_INIT { 0, NULL, QNN_VERSION_INIT, QNN_VERSION_INIT, NULL, QNN_VERSION_INIT, QNN_VERSION_INIT, 0, NULL, 0, 0, NULL, 0, NULL }
#define QNN_SYSTEM_CONTEXT_BINARY_INFO_V2_INIT { 0, NULL, QNN_VERSION_INIT, QNN_VERSION_INIT, NULL, QNN_VERSION_INIT, QNN_VERSION_INIT, 0, NULL, 0, 0, NULL, 0, NULL, NULL }
#define QNN_SYSTEM_CONTEXT_BINARY_INFO_V3_INIT { 0, NULL, QNN_VERSION_INIT, QNN_VERSION_INIT, NULL, QNN_VERSION_INIT, 0, 0, NULL, 0, NULL, NULL, 0, NULL, 0 }
#define QNN_SYSTEM_CONTEXT_GRAPH_INFO_INIT { QNN_SYSTEM_CONTEXT_GRAPH_INFO_UNDEFINED, { QNN_SYSTEM_CONTEXT_GRAPH_INFO_V1_INIT } }
#define QNN_SYSTEM_CONTEXT_GRAPH_INFO_V1_INIT { NULL, 0, NULL, 0, NULL, }
#define QNN_SYSTEM_CONTEXT_GRAPH_INFO_V2_INIT { NULL, 0, NULL, 0, NULL, 0, NULL, }
#define QNN_SYSTEM_CONTEXT_GRAPH_INFO_V3_INIT { NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, 0, }

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemContext_create(QnnSystemContext_Handle_t *sysCtxHandle);
Qnn_ErrorHandle_t QnnSystemContext_free(QnnSystemContext_Handle_t sysCtxHandle);
Qnn_ErrorHandle_t QnnSystemContext_getBinaryInfo(QnnSystemContext_Handle_t sysCtxHandle, void *binaryBuffer, uint64_t binaryBufferSize, const QnnSystemContext_BinaryInfo_t **binaryInfo, Qnn_ContextBinarySize_t *binaryInfoSize);
Qnn_ErrorHandle_t QnnSystemContext_getMetadata(QnnSystemContext_Handle_t sysCtxHandle, const void *binaryBuffer, Qnn_ContextBinarySize_t binaryBufferSize, const QnnSystemContext_BinaryInfo_t **binaryInfo);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMCONTEXT_H */
