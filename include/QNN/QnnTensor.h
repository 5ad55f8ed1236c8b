/* qnnemu: Tensor creation and updates.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNTENSOR_H
#define QNNEMU_QNNTENSOR_H

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

typedef enum {
  QNN_TENSOR_NO_ERROR = 0,
  QNN_TENSOR_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_TENSOR_MIN_ERROR = 7000,
  QNN_TENSOR_ERROR_INVALID_HANDLE = 7001,
  QNN_TENSOR_ERROR_DOES_NOT_EXIST = 7002,
  QNN_TENSOR_ERROR_ALREADY_EXISTS = 7003,
  QNN_TENSOR_ERROR_INVALID_TENSOR_PARAM = 7004,
  QNN_TENSOR_ERROR_UNSUPPORTED_TENSOR_PARAM = 7005,
  QNN_TENSOR_ERROR_NAME_HASH_COLLISION = 7006,
  QNN_TENSOR_ERROR_INCOMPATIBLE_TENSOR_UPDATE = 7007,
  QNN_TENSOR_MAX_ERROR = 7999,
  QNN_TENSOR_ERROR_UNDEFINED = 2147483647
} QnnTensor_Error_t;

/* Entry points. */
Qnn_ErrorHandle_t QnnTensor_createContextTensor(Qnn_ContextHandle_t context, Qnn_Tensor_t *tensor);
Qnn_ErrorHandle_t QnnTensor_createGraphTensor(Qnn_GraphHandle_t graph, Qnn_Tensor_t *tensor);
Qnn_ErrorHandle_t QnnTensor_updateContextTensors(Qnn_ContextHandle_t context, const Qnn_Tensor_t **tensor, uint64_t numTensors);
Qnn_ErrorHandle_t QnnTensor_updateGraphTensors(Qnn_GraphHandle_t graph, const Qnn_Tensor_t **tensor, uint64_t numTensors);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNTENSOR_H */
