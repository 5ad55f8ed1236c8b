/* qnnemu: System library tensor helpers.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMTENSOR_H
#define QNNEMU_SYSTEM_QNNSYSTEMTENSOR_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_SYSTEM_TENSOR_NO_ERROR = 0,
  QNN_SYSTEM_TENSOR_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_SYSTEM_TENSOR_MIN_ERROR = 30000,
  QNN_SYSTEM_TENSOR_ERROR_INVALID_ARGUMENT = 30001,
  QNN_SYSTEM_TENSOR_ERROR_INVALID_TENSOR = 30002,
  QNN_SYSTEM_TENSOR_MAX_ERROR = 49999
} QnnSystemTensor_Error_t;

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemTensor_getMemoryFootprint(Qnn_Tensor_t tensor, uint64_t *footprint);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMTENSOR_H */
