/* qnnemu: Memory registration of application buffers (ion / dma-buf / custom).
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNMEM_H
#define QNNEMU_QNNMEM_H

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

/* Constants. */
#define QNN_MEM_INVALID_FD (-1)

/* Handles and scalar aliases. */
typedef void *Qnn_MemInfoCustom_t;

typedef enum {
  QNN_MEM_NO_ERROR = 0,
  QNN_MEM_ERROR_NOT_SUPPORTED = 1000,
  QNN_MEM_ERROR_INVALID_ARGUMENT = 8000,
  QNN_MEM_MIN_ERROR = 8000,
  QNN_MEM_ERROR_INVALID_HANDLE = 8001,
  QNN_MEM_ERROR_ALREADY_REGISTERED = 8002,
  QNN_MEM_ERROR_MAPPING = 8003,
  QNN_MEM_ERROR_INVALID_SHAPE = 8004,
  QNN_MEM_ERROR_UNSUPPORTED_MEMTYPE = 8005,
  QNN_MEM_MAX_ERROR = 8999,
  QNN_MEM_ERROR_UNDEFINED = 2147483647
} QnnMem_Error_t;

typedef enum {
  QNN_MEM_TYPE_ION = 1,
  QNN_MEM_TYPE_CUSTOM = 2,
  QNN_MEM_TYPE_DMA_BUF = 3,
  QNN_MEM_TYPE_UNDEFINED = 2147483647
} Qnn_MemType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _Qnn_MemDescriptor_t Qnn_MemDescriptor_t;
typedef struct _Qnn_MemDmaBufInfo_t Qnn_MemDmaBufInfo_t;
typedef struct _Qnn_MemIonInfo_t Qnn_MemIonInfo_t;
typedef struct _Qnn_MemShape_t Qnn_MemShape_t;

struct _Qnn_MemDmaBufInfo_t {
  int32_t fd;
  void *data;
};

struct _Qnn_MemIonInfo_t {
  int32_t fd;
};

struct _Qnn_MemShape_t {
  uint32_t numDim;
  uint32_t *dimSize;
  const char *shapeConfig;
};

struct _Qnn_MemDescriptor_t {
  Qnn_MemShape_t memShape;
  Qnn_DataType_t dataType;
  Qnn_MemType_t memType;
  union {
    Qnn_MemIonInfo_t ionInfo;
    Qnn_MemInfoCustom_t customInfo;
    Qnn_MemDmaBufInfo_t dmaBufInfo;
  };
};

/* Initializers. */
#define QNN_MEM_DESCRIPTOR_INIT { QNN_MEM_SHAPE_INIT, QNN_DATATYPE_UNDEFINED, QNN_MEM_TYPE_UNDEFINED, { QNN_MEM_ION_INFO_INIT } }
#define QNN_MEM_DMA_BUF_INFO_INIT { QNN_MEM_INVALID_FD, NULL }
#define QNN_MEM_ION_INFO_INIT {QNN_MEM_INVALID_FD }
#define QNN_MEM_SHAPE_INIT { 0u, NULL, NULL }

/* Entry points. */
Qnn_ErrorHandle_t QnnMem_deRegister(const Qnn_MemHandle_t *memHandles, uint32_t numHandles);
Qnn_ErrorHandle_t QnnMem_register(Qnn_ContextHandle_t context, const Qnn_MemDescriptor_t *memDescriptors, uint32_t numDescriptors, Qnn_MemHandle_t *memHandles);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNMEM_H */
