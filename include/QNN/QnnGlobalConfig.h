/* qnnemu: Process-wide configuration.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNGLOBALCONFIG_H
#define QNNEMU_QNNGLOBALCONFIG_H

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
  QNN_GLOBAL_CONFIG_OPTION_SOC_MODEL = 0,
  QNN_GLOBAL_CONFIG_OPTION_UNDEFINED = 2147483647
} QnnGlobalConfig_ConfigOption_t;

typedef enum {
  QNN_GLOBAL_CONFIG_NO_ERROR = 0,
  QNN_GLOBAL_CONFIG_ERROR_INVALID_CONFIG = 15000,
  QNN_GLOBAL_CONFIG_MIN_ERROR = 15000,
  QNN_GLOBAL_CONFIG_MAX_ERROR = 15999,
  QNN_GLOBAL_CONFIG_ERROR_UNDEFINED = 2147483647
} QnnGlobalConfig_Error_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnGlobalConfig_t QnnGlobalConfig_t;

struct _QnnGlobalConfig_t {
  QnnGlobalConfig_ConfigOption_t option;
  union {
    Qnn_SocModel_t socModel;
  };
};

/* Initializers. */
#define QNN_GLOBAL_CONFIG_INIT { QNN_GLOBAL_CONFIG_OPTION_UNDEFINED, { QNN_SOC_MODEL_UNKNOWN } }

/* Entry points. */
Qnn_ErrorHandle_t QnnGlobalConfig_Set(const QnnGlobalConfig_t **config);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNGLOBALCONFIG_H */
