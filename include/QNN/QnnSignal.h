/* qnnemu: Signals that abort or time out long-running calls.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNSIGNAL_H
#define QNNEMU_QNNSIGNAL_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnSignal_CustomConfig_t;

typedef enum {
  QNN_SIGNAL_CONFIG_OPTION_CUSTOM = 0,
  QNN_SIGNAL_CONFIG_OPTION_ABORT = 1,
  QNN_SIGNAL_CONFIG_OPTION_TIMEOUT = 2,
  QNN_SIGNAL_CONFIG_UNDEFINED = 2147483647
} QnnSignal_ConfigOption_t;

typedef enum {
  QNN_SIGNAL_NO_ERROR = 0,
  QNN_SIGNAL_ERROR_UNSUPPORTED = 1000,
  QNN_SIGNAL_ERROR_MEM_ALLOC = 1002,
  QNN_SIGNAL_ERROR_SIGNAL_IN_USE = 9000,
  QNN_SIGNAL_MIN_ERROR = 9000,
  QNN_SIGNAL_ERROR_SIGNAL_IDLE = 9001,
  QNN_SIGNAL_ERROR_INVALID_ARGUMENT = 9002,
  QNN_SIGNAL_ERROR_INVALID_HANDLE = 9003,
  QNN_SIGNAL_ERROR_TIMEOUT = 9004,
  QNN_SIGNAL_ERROR_INCOMPATIBLE_SIGNAL_TYPE = 9005,
  QNN_SIGNAL_MAX_ERROR = 9999,
  QNN_SIGNAL_ERROR_UNDEFINED = 2147483647
} QnnSignal_Error_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSignal_Config_t QnnSignal_Config_t;

struct _QnnSignal_Config_t {
  QnnSignal_ConfigOption_t option;
  union {
    QnnSignal_CustomConfig_t customConfig;
    uint64_t timeoutDurationUs;
  };
};

/* Initializers. */
#define QNN_SIGNAL_CONFIG_INIT { QNN_SIGNAL_CONFIG_UNDEFINED, { NULL } }

/* Entry points. */
Qnn_ErrorHandle_t QnnSignal_create(Qnn_BackendHandle_t backend, const QnnSignal_Config_t **config, Qnn_SignalHandle_t *signal);
Qnn_ErrorHandle_t QnnSignal_free(Qnn_SignalHandle_t signal);
Qnn_ErrorHandle_t QnnSignal_setConfig(Qnn_SignalHandle_t signal, const QnnSignal_Config_t **config);
Qnn_ErrorHandle_t QnnSignal_trigger(Qnn_SignalHandle_t signal);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNSIGNAL_H */
