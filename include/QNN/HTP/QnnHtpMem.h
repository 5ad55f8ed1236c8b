/* qnnemu: HTP shared-memory descriptors.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPMEM_H
#define QNNEMU_HTP_QNNHTPMEM_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef uint32_t QnnHtpMem_QurtAddress_t;

typedef enum {
  QNN_HTP_MEM_QURT = 0,
  QNN_HTP_MEM_SHARED_BUFFER = 1,
  QNN_HTP_MEM_WEIGHTS_BUFFER = 2,
  QNN_HTP_MEM_SHARED_SPILLFILL_BUFFER = 3,
  QNN_HTP_MEM_UNDEFINED = 2147483647
} QnnHtpMem_Type_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpMem_SharedBufferConfig_t QnnHtpMem_SharedBufferConfig_t;
typedef struct _QnnMemHtp_Descriptor_t QnnMemHtp_Descriptor_t;

struct _QnnHtpMem_SharedBufferConfig_t {
  int32_t fd;
  uint64_t offset;
};

struct _QnnMemHtp_Descriptor_t {
  QnnHtpMem_Type_t type;
  uint64_t size;
  union {
    QnnHtpMem_QurtAddress_t qurtAddress;
    QnnHtpMem_SharedBufferConfig_t sharedBufferConfig;
    QnnHtpMem_SharedBufferConfig_t weightsBufferConfig;
    QnnHtpMem_SharedBufferConfig_t sharedSpillfillBufferConfig;
  };
};

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPMEM_H */
