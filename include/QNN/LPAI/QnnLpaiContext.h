/* qnnemu: LPAI custom context configurations.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAICONTEXT_H
#define QNNEMU_LPAI_QNNLPAICONTEXT_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_LPAI_CONTEXT_SET_CFG_MODEL_BUFFER_MEM_TYPE = 1,
  QNN_LPAI_CONTEXT_SET_CFG_ENABLE_ISLAND = 11,
  QNN_LPAI_CONTEXT_SET_CFG_UNDEFINED = 2147483647
} QnnLpaiContext_SetConfigOption_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnLpaiContext_CustomConfig_t QnnLpaiContext_CustomConfig_t;

struct _QnnLpaiContext_CustomConfig_t {
  uint32_t option;
  void *config;
};

/* Initializers. */
#define QNN_LPAI_CONTEXT_CUSTOM_CONFIG_INIT { QNN_LPAI_CONTEXT_SET_CFG_UNDEFINED, NULL }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAICONTEXT_H */
