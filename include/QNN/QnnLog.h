/* qnnemu: Log component: application callbacks and levels.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNLOG_H
#define QNNEMU_QNNLOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_LOG_NO_ERROR = 0,
  QNN_LOG_ERROR_MEM_ALLOC = 1002,
  QNN_LOG_MIN_ERROR = 11000,
  QNN_LOG_ERROR_INITIALIZATION = 11002,
  QNN_LOG_ERROR_INVALID_ARGUMENT = 11003,
  QNN_LOG_ERROR_INVALID_HANDLE = 11004,
  QNN_LOG_MAX_ERROR = 11999,
  QNN_LOG_ERROR_UNDEFINED = 2147483647
} QnnLog_Error_t;

typedef enum {
  QNN_LOG_LEVEL_ERROR = 1,
  QNN_LOG_LEVEL_WARN = 2,
  QNN_LOG_LEVEL_INFO = 3,
  QNN_LOG_LEVEL_VERBOSE = 4,
  QNN_LOG_LEVEL_DEBUG = 5,
  QNN_LOG_LEVEL_MAX = 2147483647
} QnnLog_Level_t;

/* Function pointer types. */
typedef void (*QnnLog_Callback_t)(const char *fmt, QnnLog_Level_t level, uint64_t timestamp, va_list args);

/* Entry points. */
Qnn_ErrorHandle_t QnnLog_create(QnnLog_Callback_t callback, QnnLog_Level_t maxLogLevel, Qnn_LogHandle_t *logger);
Qnn_ErrorHandle_t QnnLog_free(Qnn_LogHandle_t logger);
Qnn_ErrorHandle_t QnnLog_setLogLevel(Qnn_LogHandle_t logger, QnnLog_Level_t maxLogLevel);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNLOG_H */
