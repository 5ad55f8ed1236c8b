/* qnnemu: HTP custom graph configurations (optimization, precision, VTCM, ...).
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPGRAPH_H
#define QNNEMU_HTP_QNNHTPGRAPH_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_HTP_GRAPH_CONFIG_OPTION_MAX 0

typedef enum {
  QNN_HTP_GRAPH_CONCURRENCY_OPTION_DEFAULT = 0,
  QNN_HTP_GRAPH_CONCURRENCY_OPTION_NONE = 0,
  QNN_HTP_GRAPH_CONCURRENCY_OPTION_ALL_SHARED = 1,
  QNN_HTP_GRAPH_CONCURRENCY_OPTION_UNKNOWN = 2147483647
} QnnHtpGraph_ConcurrencyOption_t;

typedef enum {
  QNN_HTP_GRAPH_CONFIG_OPTION_OPTIMIZATION = 1,
  QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION = 2,
  QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE = 3,
  QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB = 3,
  QNN_HTP_GRAPH_CONFIG_OPTION_FOLD_RELU_ACTIVATION_INTO_CONV_OFF = 4,
  QNN_HTP_GRAPH_CONFIG_OPTION_SHORT_DEPTH_CONV_ON_HMX_OFF = 5,
  QNN_HTP_GRAPH_CONFIG_OPTION_NUM_HVX_THREADS = 6,
  QNN_HTP_GRAPH_CONFIG_OPTION_FINALIZE_CONFIG = 7,
  QNN_HTP_GRAPH_CONFIG_OPTION_NUM_CORES = 8,
  QNN_HTP_GRAPH_CONFIG_OPTION_PARALLEL_GRAPH_EXECUTION_CONFIG = 9,
  QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_BYTES = 10,
  QNN_HTP_GRAPH_CONFIG_OPTION_HMX_BOUNDING = 11,
  QNN_HTP_GRAPH_CONFIG_OPTION_WEIGHTS_PACKING = 12,
  QNN_HTP_GRAPH_CONFIG_OPTION_ASSUME_SAME_QUANT = 13,
  QNN_HTP_GRAPH_CONFIG_OPTION_SHARE_IO_BUFFER = 14,
  QNN_HTP_GRAPH_CONFIG_OPTION_ADVANCED_ACTIVATION_FUSION = 15,
  QNN_HTP_GRAPH_CONFIG_OPTION_HIGH_PRECISION_SIGMOID = 16,
  QNN_HTP_GRAPH_CONFIG_OPTION_MONOLITHIC_LSTM = 17,
  QNN_HTP_GRAPH_CONFIG_OPTION_PRECISION_COMPENSATION = 18,
  QNN_HTP_GRAPH_CONFIG_OPTION_ENABLE_PREDICATION = 19,
  QNN_HTP_GRAPH_CONFIG_OPTION_FP16_CLAMP_OVERFLOW = 20,
  QNN_HTP_GRAPH_CONFIG_OPTION_RESERVED = 2147418112,
  QNN_HTP_GRAPH_CONFIG_OPTION_UNKNOWN = 2147483647
} QnnHtpGraph_ConfigOption_t;

typedef enum {
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_SCHEDULE_THRESHOLD = 1,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_RETRIES = 2,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_FINALIZE_OPTIMIZATION_FLAG = 3,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC = 4,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_DLBC_WEIGHTS = 5,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_SPARSE_WEIGHTS_COMPRESSION = 6,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_SLC_ALLOCATOR = 7,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_VTCM_RETENTION = 8,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_ENABLE_CACHED_WEIGHTS = 9,
  QNN_HTP_GRAPH_OPTIMIZATION_TYPE_UNKNOWN = 2147483647
} QnnHtpGraph_OptimizationType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpGraph_CustomConfig_t QnnHtpGraph_CustomConfig_t;
typedef struct _QnnHtpGraph_FinalizeConfig_t QnnHtpGraph_FinalizeConfig_t;
typedef struct _QnnHtpGraph_OptimizationOption_t QnnHtpGraph_OptimizationOption_t;
typedef struct _QnnHtpGraph_ParallelGraphExecutionConfig_t QnnHtpGraph_ParallelGraphExecutionConfig_t;
typedef struct _QnnHtpGraph_VtcmConfig_t QnnHtpGraph_VtcmConfig_t;
typedef struct _QnnHtp_HmxBoundingInfo_t QnnHtp_HmxBoundingInfo_t;

struct _QnnHtpGraph_FinalizeConfig_t {
  const char *key;
  Qnn_Scalar_t value;
};

struct _QnnHtpGraph_OptimizationOption_t {
  QnnHtpGraph_OptimizationType_t type;
  float floatValue;
};

struct _QnnHtpGraph_VtcmConfig_t {
  uint32_t sizeInBytes;
  uint32_t offsetInBytes;
  uint32_t sizeTotalInBytes;
  uint32_t reserved[3];
};

struct _QnnHtpGraph_ParallelGraphExecutionConfig_t {
  QnnHtpGraph_ConcurrencyOption_t concurrency;
  QnnHtpGraph_VtcmConfig_t vtcmConfig;
  uint32_t reserved[4];
};

struct _QnnHtp_HmxBoundingInfo_t {
  float targetHmxFreqHz;
  float targetDspCoreFreq;
};

struct _QnnHtpGraph_CustomConfig_t {
  QnnHtpGraph_ConfigOption_t option;
  union {
    QnnHtpGraph_OptimizationOption_t optimizationOption;
    Qnn_Precision_t precision;
    uint32_t vtcmSizeInMB;
    bool foldReluActivationIntoConvOff;
    bool shortDepthConvOnHmxOff;
    uint64_t numHvxThreads;
    void *reserved;
    QnnHtpGraph_FinalizeConfig_t finalizeConfig;
    uint32_t numCores;
    QnnHtpGraph_ParallelGraphExecutionConfig_t parallelGraphExecutionConfig;
    uint32_t vtcmSizeInBytes;
    QnnHtp_HmxBoundingInfo_t hmxBoundingInfo;
    bool weightsPacking;
    bool assumeSameQuant;
    bool shareIOBuffer;
    bool advancedActivationFusion;
    bool highPrecisionSigmoid;
    bool monolithicLstm;
    bool precisionCompensation;
    bool enablePredication;
    bool fp16ClampOverflow;
  };
};

/* Initializers. */
#define QNN_HTP_GRAPH_CUSTOM_CONFIG_INIT { QNN_HTP_GRAPH_CONFIG_OPTION_UNKNOWN, { QNN_HTP_GRAPH_OPTIMIZATION_OPTION_INIT } }
#define QNN_HTP_GRAPH_OPTIMIZATION_OPTION_INIT { QNN_HTP_GRAPH_OPTIMIZATION_TYPE_UNKNOWN, 0.0f }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPGRAPH_H */
