/* qnnemu: Error component: messages for error handles.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNERROR_H
#define QNNEMU_QNNERROR_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_ERROR_NO_ERROR = 0,
  QNN_ERROR_INVALID_ARGUMENT = 10000,
  QNN_ERROR_MIN_ERROR = 10000,
  QNN_ERROR_INVALID_ERROR_HANDLE = 10001,
  QNN_ERROR_MAX_ERROR = 10999,
  QNN_ERROR_UNDEFINED = 2147483647
} QnnError_Error_t;

/* Entry points. */
Qnn_ErrorHandle_t QnnError_freeVerboseMessage(const char *errorMessage);
Qnn_ErrorHandle_t QnnError_getMessage(Qnn_ErrorHandle_t errorHandle, const char **errorMessage);
Qnn_ErrorHandle_t QnnError_getVerboseMessage(Qnn_ErrorHandle_t errorHandle, const char **errorMessage);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNERROR_H */
