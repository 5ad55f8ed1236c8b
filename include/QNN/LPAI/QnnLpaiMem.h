/* qnnemu: LPAI memory descriptors.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAIMEM_H
#define QNNEMU_LPAI_QNNLPAIMEM_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_LPAI_MEM_TYPE_DDR = 1,
  QNN_LPAI_MEM_TYPE_LLC = 2,
  QNN_LPAI_MEM_TYPE_TCM = 3,
  QNN_LPAI_MEM_TYPE_PSRAM = 4,
  QNN_LPAI_MEM_TYPE_UNDEFINED = 2147483647
} QnnLpaiMem_MemType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnLpaiMem_MemInfoCustom_t QnnLpaiMem_MemInfoCustom_t;

struct _QnnLpaiMem_MemInfoCustom_t {
  int32_t fd;
  uint32_t offset;
};

/* Initializers. */
#define QNN_LPAI_MEM_INFO_CUSTOM_INIT { 0, 0u }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAIMEM_H */
