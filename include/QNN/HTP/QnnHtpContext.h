/* qnnemu: HTP custom context configurations and properties.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPCONTEXT_H
#define QNNEMU_HTP_QNNHTPCONTEXT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_HTP_CONTEXT_CONFIG_OPTION_WEIGHT_SHARING_ENABLED = 1,
  QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_MULTI_CONTEXTS = 2,
  QNN_HTP_CONTEXT_CONFIG_OPTION_FILE_READ_MEMORY_BUDGET = 3,
  QNN_HTP_CONTEXT_CONFIG_OPTION_DSP_MEMORY_PROFILING_ENABLED = 4,
  QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES = 5,
  QNN_HTP_CONTEXT_CONFIG_OPTION_IO_MEM_ESTIMATION = 6,
  QNN_HTP_CONTEXT_CONFIG_OPTION_PREPARE_ONLY = 7,
  QNN_HTP_CONTEXT_CONFIG_OPTION_INIT_ACCELERATION = 8,
  QNN_HTP_CONTEXT_CONFIG_OPTION_SKIP_VALIDATION_ON_BINARY_SECTION = 9,
  QNN_HTP_CONTEXT_CONFIG_OPTION_SHARE_RESOURCES_OPTIMIZATION_TYPE = 10,
  QNN_HTP_CONTEXT_CONFIG_OPTION_USE_EXTENDED_UDMA = 11,
  QNN_HTP_CONTEXT_CONFIG_OPTION_REGISTER_CONCURRENT_RESOURCE_SHARING = 12,
  QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_ENABLED = 13,
  QNN_HTP_CONTEXT_CONFIG_OPTION_RESERVED_14 = 14,
  QNN_HTP_CONTEXT_CONFIG_OPTION_RESERVED_15 = 15,
  QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_WEIGHT_SHARING_RAM_PRELOAD_ENABLED = 16,
  QNN_HTP_CONTEXT_CONFIG_OPTION_REUSED_IO_LIMIT = 17,
  QNN_HTP_CONTEXT_CONFIG_OPTION_REFERENCE_WEIGHT_SHARING_ENABLED = 18,
  QNN_HTP_CONTEXT_CONFIG_OPTION_CONCURRENT_DESERIALIZATION_EXTRA_SIZE = 19,
  QNN_HTP_CONTEXT_CONFIG_OPTION_GRAPH_SPLITTING_ENABLED = 20,
  QNN_HTP_CONTEXT_CONFIG_OPTION_CONCURRENT_DESERIALIZATION_PATCH = 21,
  QNN_HTP_CONTEXT_CONFIG_OPTION_GRAPH_SPLITTING_CONFIGS = 22,
  QNN_HTP_CONTEXT_CONFIG_OPTION_LORA_PRELOAD_BUFFER_GROUPS = 23,
  QNN_HTP_CONTEXT_CONFIG_OPTION_RESERVED_24 = 24,
  QNN_HTP_CONTEXT_CONFIG_OPTION_PARALLEL_WEIGHT_LOADING = 25,
  QNN_HTP_CONTEXT_CONFIG_OPTION_UNKNOWN = 2147483647
} QnnHtpContext_ConfigOption_t;

typedef enum {
  QNN_HTP_CONTEXT_GET_PROP_BUFFER_START_ALIGNMENT = 1,
  QNN_HTP_CONTEXT_GET_PROP_MAX_SPILLFILL_BUFFER_SIZE = 2,
  QNN_HTP_CONTEXT_GET_PROP_WEIGHTS_BUFFER_SIZE = 3,
  QNN_HTP_CONTEXT_GET_PROP_RESERVED_4 = 4,
  QNN_HTP_CONTEXT_GET_PROP_RESERVED_5 = 5,
  QNN_HTP_CONTEXT_GET_PROP_MAX_VTCMBACKUP_BUFFER_SIZE = 6,
  QNN_HTP_CONTEXT_GET_PROP_RESERVED_7 = 7,
  QNN_HTP_CONTEXT_GET_PROP_UNDEFINED = 2147483647
} QnnHtpContext_GetPropertyOption_t;

typedef enum {
  QNN_HTP_PARALLEL_WEIGHT_LOADING_MODE_ADAPTIVE = 0,
  QNN_HTP_PARALLEL_WEIGHT_LOADING_MODE_ON = 1,
  QNN_HTP_PARALLEL_WEIGHT_LOADING_MODE_OFF = 2
} QnnHtpContext_ParallelWeightLoadingMode_t;

typedef enum {
  SEQUENTIAL_WITH_VA_OPTIMIZATION = 0,
  SEQUENTIAL_WITHOUT_VA_OPTIMIZATION = 1,
  CONCURRENT_OPTIMIZATION = 2
} QnnHtpContext_ShareResourcesOptimizationType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpContext_CustomConfig_t QnnHtpContext_CustomConfig_t;
typedef struct _QnnHtpContext_CustomProperty_t QnnHtpContext_CustomProperty_t;
typedef struct _QnnHtpContext_GraphSplit_t QnnHtpContext_GraphSplit_t;
typedef struct _QnnHtpContext_GroupRegistration_t QnnHtpContext_GroupRegistration_t;
typedef struct _QnnHtpContext_LoraPreloadBufferGroups_t QnnHtpContext_LoraPreloadBufferGroups_t;
typedef struct _QnnHtpContext_LoraPreloadGroup_t QnnHtpContext_LoraPreloadGroup_t;
typedef struct _QnnHtpContext_ParallelWeightLoading_t QnnHtpContext_ParallelWeightLoading_t;

struct _QnnHtpContext_GraphSplit_t {
  bool graphSplittingEnabled;
};

struct _QnnHtpContext_GroupRegistration_t {
  Qnn_ContextHandle_t firstGroupHandle;
  uint64_t maxSpillFillBuffer;
};

struct _QnnHtpContext_ParallelWeightLoading_t {
  QnnHtpContext_ParallelWeightLoadingMode_t mode;
  uint64_t thresholdInMbOverride;
};

struct _QnnHtpContext_CustomConfig_t {
  QnnHtpContext_ConfigOption_t option;
  union {
    bool weightSharingEnabled;
    QnnHtpContext_GroupRegistration_t groupRegistration;
    uint64_t fileReadMemoryBudgetInMb;
    bool dspMemoryProfilingEnabled;
    bool shareResources;
    bool ioMemEstimation;
    bool isPrepareOnly;
    bool initAcceleration;
    bool skipValidationOnBinarySection;
    QnnHtpContext_ShareResourcesOptimizationType_t shareResOptType;
    bool useExtendedUdma;
    QnnHtpContext_GroupRegistration_t concurrentGroupRegistration;
    bool loraWeightSharingEnabled;
    bool loraWeightSharingRamPreloadEnabled;
    const QnnHtpContext_LoraPreloadBufferGroups_t *loraPreloadBufferGroups;
    uint64_t reusedIoLimitMb;
    bool referenceWeightSharingEnabled;
    uint32_t concurrentDeserializationExtraSizeKB;
    bool graphSplittingEnabled;
    int concurrentDeserializationPatchFd;
    QnnHtpContext_GraphSplit_t graphSplittingConfigs;
    QnnHtpContext_ParallelWeightLoading_t parallelWeightLoading;
  };
};

struct _QnnHtpContext_CustomProperty_t {
  QnnHtpContext_GetPropertyOption_t option;
  union {
    uint64_t bufferStartAlignment;
    uint64_t spillfillBufferSize;
    uint64_t weightsBufferSize;
    uint64_t vtcmBackupBufferSize;
  };
};

struct _QnnHtpContext_LoraPreloadBufferGroups_t {
  const QnnHtpContext_LoraPreloadGroup_t *groups;
  uint32_t numGroups;
};

struct _QnnHtpContext_LoraPreloadGroup_t {
  const char **graphNames;
  uint32_t numGraphs;
};

/* Initializers. */
#define QNN_HTP_CONTEXT_CUSTOM_CONFIG_INIT { QNN_HTP_CONTEXT_CONFIG_OPTION_UNKNOWN, { false } }
#define QNN_HTP_CONTEXT_CUSTOM_PROPERTY_INIT { QNN_HTP_CONTEXT_GET_PROP_UNDEFINED, 0 }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPCONTEXT_H */
