/* qnnemu: HTP graph blob information reported by the System library.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPSYSTEMCONTEXT_H
#define QNNEMU_HTP_QNNHTPSYSTEMCONTEXT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_SYSTEM_CONTEXT_HTP_CONTEXT_INFO_BLOB_VERSION_V1 = 1,
  QNN_SYSTEM_CONTEXT_HTP_CONTEXT_INFO_BLOB_UNDEFINED = 2147483647
} QnnHtpSystemContext_ContextInfoBlobVersion_t;

typedef enum {
  QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V1 = 1,
  QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_VERSION_V2 = 2,
  QNN_SYSTEM_CONTEXT_HTP_GRAPH_INFO_BLOB_UNDEFINED = 2147483647
} QnnHtpSystemContext_GraphInfoBlobVersion_t;

typedef enum {
  QNN_SYSTEM_CONTEXT_HTP_HW_INFO_BLOB_VERSION_V1 = 1,
  QNN_SYSTEM_CONTEXT_HTP_HW_INFO_BLOB_UNDEFINED = 2147483647
} QnnHtpSystemContext_HwInfoBlobVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpSystemContext_ContextBlobInfoV1_t QnnHtpSystemContext_ContextBlobInfoV1_t;
typedef struct _QnnHtpSystemContext_ContextBlobInfo_t QnnHtpSystemContext_ContextBlobInfo_t;
typedef struct _QnnHtpSystemContext_GraphBlobInfoV1_t QnnHtpSystemContext_GraphBlobInfoV1_t;
typedef struct _QnnHtpSystemContext_GraphBlobInfoV2_t QnnHtpSystemContext_GraphBlobInfoV2_t;
typedef struct _QnnHtpSystemContext_GraphBlobInfo_t QnnHtpSystemContext_GraphBlobInfo_t;
typedef struct _QnnHtpSystemContext_HwBlobInfoV1_t QnnHtpSystemContext_HwBlobInfoV1_t;
typedef struct _QnnHtpSystemContext_HwBlobInfo_t QnnHtpSystemContext_HwBlobInfo_t;

struct _QnnHtpSystemContext_ContextBlobInfoV1_t {
  uint32_t dspArch;
};

struct _QnnHtpSystemContext_ContextBlobInfo_t {
  QnnHtpSystemContext_ContextInfoBlobVersion_t version;
  union {
    QnnHtpSystemContext_ContextBlobInfoV1_t contextBinaryContextBlobInfoV1;
  };
};

struct _QnnHtpSystemContext_GraphBlobInfoV1_t {
  uint64_t spillFillBufferSize;
  uint32_t vtcmSize;
  uint32_t optimizationLevel;
  uint8_t htpDlbc;
  uint64_t numHvxThreads;
};

struct _QnnHtpSystemContext_GraphBlobInfoV2_t {
  QnnHtpSystemContext_GraphInfoBlobVersion_t version;
  uint64_t nativeKChannelSize;
  uint64_t nativeVChannelSize;
  uint32_t isSafeShareIO;
  uint64_t ioTensorSize;
  uint64_t opDataSize;
  uint64_t constSize;
  uint64_t ddrTensorSize;
  uint64_t sharedWeightsSize;
};

struct _QnnHtpSystemContext_GraphBlobInfo_t {
  QnnHtpSystemContext_GraphInfoBlobVersion_t version;
  union {
    QnnHtpSystemContext_GraphBlobInfoV1_t contextBinaryGraphBlobInfoV1;
  };
};

struct _QnnHtpSystemContext_HwBlobInfoV1_t {
  uint32_t graphListIndex;
  uint64_t spillFillBufferSize;
};

struct _QnnHtpSystemContext_HwBlobInfo_t {
  QnnHtpSystemContext_HwInfoBlobVersion_t version;
  union {
    QnnHtpSystemContext_HwBlobInfoV1_t contextBinaryHwInfoBlobV1_t;
  };
};

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPSYSTEMCONTEXT_H */
