/* qnnemu: Graph component: creation, nodes, finalize and execute.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNGRAPH_H
#define QNNEMU_QNNGRAPH_H

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
typedef void *QnnGraph_CustomConfig_t;
typedef void *QnnGraph_CustomProperty_t;
typedef void *QnnGraph_CustomValidateConfig_t;

typedef enum {
  QNN_GRAPH_CONFIG_OPTION_CUSTOM = 0,
  QNN_GRAPH_CONFIG_OPTION_PRIORITY = 3,
  QNN_GRAPH_CONFIG_OPTION_PROFILE_HANDLE = 4,
  QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_STATE = 5,
  QNN_GRAPH_CONFIG_OPTION_SET_PROFILING_NUM_EXECUTIONS = 6,
  QNN_GRAPH_CONFIG_OPTION_ENABLE_BINARY_SECTION_WEIGHTS_UPDATES = 7,
  QNN_GRAPH_CONFIG_OPTION_UNDEFINED = 2147483647
} QnnGraph_ConfigOption_t;

typedef enum {
  QNN_GRAPH_NO_ERROR = 0,
  QNN_GRAPH_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_GRAPH_ERROR_MEM_ALLOC = 1002,
  QNN_GRAPH_ERROR_GENERAL = 1100,
  QNN_GRAPH_ERROR_INVALID_ARGUMENT = 6000,
  QNN_GRAPH_MIN_ERROR = 6000,
  QNN_GRAPH_ERROR_INVALID_HANDLE = 6001,
  QNN_GRAPH_ERROR_GRAPH_DOES_NOT_EXIST = 6002,
  QNN_GRAPH_ERROR_INVALID_NAME = 6003,
  QNN_GRAPH_ERROR_INVALID_TENSOR = 6004,
  QNN_GRAPH_ERROR_INVALID_OP_CONFIG = 6005,
  QNN_GRAPH_ERROR_SET_PROFILE = 6006,
  QNN_GRAPH_ERROR_UNCONNECTED_NODE = 6007,
  QNN_GRAPH_ERROR_CREATE_FAILED = 6020,
  QNN_GRAPH_ERROR_OPTIMIZATION_FAILED = 6021,
  QNN_GRAPH_ERROR_FINALIZE_FAILED = 6022,
  QNN_GRAPH_ERROR_GRAPH_NOT_FINALIZED = 6023,
  QNN_GRAPH_ERROR_GRAPH_FINALIZED = 6024,
  QNN_GRAPH_ERROR_EXECUTION_ASYNC_FIFO_FULL = 6025,
  QNN_GRAPH_ERROR_SIGNAL_IN_USE = 6030,
  QNN_GRAPH_ERROR_ABORTED = 6031,
  QNN_GRAPH_ERROR_PROFILE_IN_USE = 6032,
  QNN_GRAPH_ERROR_TIMED_OUT = 6033,
  QNN_GRAPH_ERROR_SUBGRAPH = 6034,
  QNN_GRAPH_ERROR_DISABLED = 6035,
  QNN_GRAPH_ERROR_DYNAMIC_TENSOR_SHAPE = 6036,
  QNN_GRAPH_ERROR_TENSOR_SPARSITY = 6037,
  QNN_GRAPH_ERROR_EARLY_TERMINATION = 6038,
  QNN_GRAPH_ERROR_INVALID_CONTEXT = 6039,
  QNN_GRAPH_ERROR_CYCLE_DETECTED = 6040,
  QNN_GRAPH_MAX_ERROR = 6999,
  QNN_GRAPH_ERROR_UNDEFINED = 2147483647
} QnnGraph_Error_t;

typedef enum {
  QNN_GRAPH_EXECUTE_ENVIRONMENT_OPTION_BIND_MEM_HANDLES = 0,
  QNN_GRAPH_EXECUTE_ENVIRONMENT_OPTION_POPULATE_CLIENT_BUFS = 1,
  QNN_GRAPH_EXECUTE_ENVIRONMENT_OPTION_UNDEFINED = 2147483647
} QnnGraph_ExecuteEnvironmentOption_t;

typedef enum {
  QNN_GRAPH_NODE_VALIDATION_STATUS_SUPPORTED = 0,
  QNN_GRAPH_NODE_VALIDATION_STATUS_UNSUPPORTED = 1,
  QNN_GRAPH_NODE_VALIDATION_STATUS_UNDEFINED = 2147483647
} QnnGraph_NodeValidationStatus_t;

typedef enum {
  QNN_GRAPH_PROFILING_STATE_ENABLED = 1,
  QNN_GRAPH_PROFILING_STATE_DISABLED = 2,
  QNN_GRAPH_PROFILING_STATE_UNDEFINED = 2147483647
} QnnGraph_ProfilingState_t;

typedef enum {
  QNN_GRAPH_PROPERTY_OPTION_CUSTOM = 0,
  QNN_GRAPH_PROPERTY_OPTION_UNDEFINED = 2147483647
} QnnGraph_PropertyOption_t;

typedef enum {
  QNN_GRAPH_VALIDATE_OPTION_CUSTOM = 0,
  QNN_GRAPH_VALIDATE_OPTION_UNDEFINED = 2147483647
} QnnGraph_ValidateOption_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnGraph_Config_t QnnGraph_Config_t;
typedef struct _QnnGraph_ExecuteEnvironment_t QnnGraph_ExecuteEnvironment_t;
typedef struct _QnnGraph_NodeValidationResult_t QnnGraph_NodeValidationResult_t;
typedef struct _QnnGraph_Property_t QnnGraph_Property_t;
typedef struct _QnnGraph_ValidateConfig_t QnnGraph_ValidateConfig_t;
typedef struct _QnnGraph_ValidationResult_t QnnGraph_ValidationResult_t;
typedef struct _Qnn_NotifyStatus_t Qnn_NotifyStatus_t;

/* Function pointer types. */
typedef void (*Qnn_NotifyFn_t)(void *notifyParam, Qnn_NotifyStatus_t notifyStatus);

struct _QnnGraph_Config_t {
  QnnGraph_ConfigOption_t option;
  union {
    QnnGraph_CustomConfig_t customConfig;
    Qnn_Priority_t priority;
    Qnn_ProfileHandle_t profileHandle;
    QnnGraph_ProfilingState_t profilingState;
    uint32_t numProfilingExecutions;
    uint8_t enableBinarySectionWeightsUpdates;
  };
};

struct _QnnGraph_ExecuteEnvironment_t {
  QnnGraph_ExecuteEnvironmentOption_t option;
  union {
    Qnn_TensorSet_t tensorSet;
  };
};

struct _QnnGraph_NodeValidationResult_t {
  const char *nodeName;
  QnnGraph_NodeValidationStatus_t status;
  Qnn_ErrorHandle_t errorCode;
  const char *errorMessage;
};

struct _QnnGraph_Property_t {
  QnnGraph_PropertyOption_t option;
  union {
    QnnGraph_CustomProperty_t customProperty;
  };
};

struct _QnnGraph_ValidateConfig_t {
  QnnGraph_ValidateOption_t option;
  union {
    QnnGraph_CustomValidateConfig_t customConfig;
  };
};

struct _QnnGraph_ValidationResult_t {
  uint32_t numResults;
  const QnnGraph_NodeValidationResult_t *results;
  Qnn_ErrorHandle_t overallStatus;
};

struct _Qnn_NotifyStatus_t {
  Qnn_ErrorHandle_t error;
};

/* Initializers. */
#define QNN_GRAPH_CONFIG_INIT { QNN_GRAPH_CONFIG_OPTION_UNDEFINED, { NULL } }
#define QNN_GRAPH_PROPERTY_INIT { QNN_GRAPH_PROPERTY_OPTION_UNDEFINED, { NULL } }
#define QNN_GRAPH_VALIDATE_CONFIG_INIT { QNN_GRAPH_VALIDATE_OPTION_UNDEFINED, { NULL } }
#define QNN_NOTIFY_STATUS_INIT { 0u }

/* Entry points. */
Qnn_ErrorHandle_t QnnGraph_addNode(Qnn_GraphHandle_t graphHandle, Qnn_OpConfig_t opConfig);
Qnn_ErrorHandle_t QnnGraph_create(Qnn_ContextHandle_t contextHandle, const char *graphName, const QnnGraph_Config_t **config, Qnn_GraphHandle_t *graphHandle);
Qnn_ErrorHandle_t QnnGraph_createSubgraph(Qnn_GraphHandle_t graphHandle, const char *graphName, Qnn_GraphHandle_t *subgraphHandle);
Qnn_ErrorHandle_t QnnGraph_execute(Qnn_GraphHandle_t graphHandle, const Qnn_Tensor_t *inputs, uint32_t numInputs, Qnn_Tensor_t *outputs, uint32_t numOutputs, Qnn_ProfileHandle_t profileHandle, Qnn_SignalHandle_t signalHandle);
Qnn_ErrorHandle_t QnnGraph_executeAsync(Qnn_GraphHandle_t graphHandle, const Qnn_Tensor_t *inputs, uint32_t numInputs, Qnn_Tensor_t *outputs, uint32_t numOutputs, Qnn_ProfileHandle_t profileHandle, Qnn_SignalHandle_t signalHandle, Qnn_NotifyFn_t notifyFn, void *notifyParam);
Qnn_ErrorHandle_t QnnGraph_finalize(Qnn_GraphHandle_t graphHandle, Qnn_ProfileHandle_t profileHandle, Qnn_SignalHandle_t signalHandle);
Qnn_ErrorHandle_t QnnGraph_freeValidationResult(QnnGraph_ValidationResult_t *validationResult);
Qnn_ErrorHandle_t QnnGraph_getProperty(Qnn_GraphHandle_t graphHandle, QnnGraph_Property_t **properties);
Qnn_ErrorHandle_t QnnGraph_prepareExecutionEnvironment(Qnn_GraphHandle_t graphHandle, QnnGraph_ExecuteEnvironment_t **envs, uint32_t envSize);
Qnn_ErrorHandle_t QnnGraph_releaseExecutionEnvironment(Qnn_GraphHandle_t graphHandle, const QnnGraph_ExecuteEnvironment_t **envs, uint32_t envSize);
Qnn_ErrorHandle_t QnnGraph_retrieve(Qnn_ContextHandle_t contextHandle, const char *graphName, Qnn_GraphHandle_t *graphHandle);
Qnn_ErrorHandle_t QnnGraph_setConfig(Qnn_GraphHandle_t graphHandle, const QnnGraph_Config_t **config);
Qnn_ErrorHandle_t QnnGraph_validate(Qnn_GraphHandle_t graphHandle, const QnnGraph_ValidateConfig_t **config, QnnGraph_ValidationResult_t **validationResult);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNGRAPH_H */
