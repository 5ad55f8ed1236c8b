/* qnnemu: LPAI backend custom configurations.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAIBACKEND_H
#define QNNEMU_LPAI_QNNLPAIBACKEND_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef uint32_t QnnLpaiBackend_eNPUCoreNum_t;

typedef enum {
  QNN_LPAI_BACKEND_CUSTOM_CFG_HW_INFO = 0,
  QNN_LPAI_BACKEND_CUSTOM_CFG_UNDEFINED = 2147483647
} QnnLpaiBackend_CustomConfigOption_t;

typedef enum {
  QNN_LPAI_BACKEND_GET_PROP_ALIGNMENT_REQ = 0,
  QNN_LPAI_BACKEND_GET_PROP_REQUIRE_PERSISTENT_BINARY = 1,
  QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_NUM = 200,
  QNN_LPAI_BACKEND_GET_PROP_ENPU_CORE_INFO = 300,
  QNN_LPAI_BACKEND_GET_PROP_UNDEFINED = 2147483647
} QnnLpaiBackend_GetPropertyOption_t;

typedef enum {
  QNN_LPAI_BACKEND_HW_VERSION_NA = 0,
  QNN_LPAI_BACKEND_HW_VERSION_V1 = 1,
  QNN_LPAI_BACKEND_HW_VERSION_V2 = 2,
  QNN_LPAI_BACKEND_HW_VERSION_V3 = 3,
  QNN_LPAI_BACKEND_HW_VERSION_V4 = 4,
  QNN_LPAI_BACKEND_HW_VERSION_V5 = 5,
  QNN_LPAI_BACKEND_HW_VERSION_DEFAULT = 6,
  QNN_LPAI_BACKEND_HW_VERSION_V6 = 6,
  QNN_LPAI_BACKEND_HW_VERSION_V7 = 7,
  QNN_LPAI_BACKEND_HW_VERSION_V5_1 = 65541,
  QNN_LPAI_BACKEND_HW_VERSION_UNKNOWN = 2147483647
} QnnLpaiBackend_HwVersion_t;

typedef enum {
  QNN_LPAI_BACKEND_TARGET_X86 = 0,
  QNN_LPAI_BACKEND_TARGET_ARM = 1,
  QNN_LPAI_BACKEND_TARGET_ADSP = 2,
  QNN_LPAI_BACKEND_TARGET_TENSILICA = 3,
  QNN_LPAI_BACKEND_TARGET_UNKNOWN = 2147483647
} QnnLpaiBackend_Target_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnLpaiBackend_BufferAlignmentReq_t QnnLpaiBackend_BufferAlignmentReq_t;
typedef struct _QnnLpaiBackend_CustomConfigHwInfo_t QnnLpaiBackend_CustomConfigHwInfo_t;
typedef struct _QnnLpaiBackend_CustomConfig_t QnnLpaiBackend_CustomConfig_t;
typedef struct _QnnLpaiBackend_CustomProperty_t QnnLpaiBackend_CustomProperty_t;
typedef struct _QnnLpaiBackend_eNPUCoreInfo_t QnnLpaiBackend_eNPUCoreInfo_t;

struct _QnnLpaiBackend_BufferAlignmentReq_t {
  uint32_t startAddrAlignment;
  uint32_t sizeAlignment;
};

struct _QnnLpaiBackend_CustomConfigHwInfo_t {
  QnnLpaiBackend_Target_t lpaiTarget;
  QnnLpaiBackend_HwVersion_t hwVersion;
};

struct _QnnLpaiBackend_CustomConfig_t {
  uint32_t option;
  void *config;
};

struct _QnnLpaiBackend_CustomProperty_t {
  uint32_t option;
  void *property;
};

struct _QnnLpaiBackend_eNPUCoreInfo_t {
  uint32_t coreIndex;
  uint32_t macCnt;
  uint32_t version;
};

/* Initializers. */
#define QNN_LPAI_BACKEND_ALIGNMENT_REQ_INIT { 0u, 0u }
#define QNN_LPAI_BACKEND_CUSTOM_CONFIG_HW_INFO_INIT { QNN_LPAI_BACKEND_TARGET_ADSP, QNN_LPAI_BACKEND_HW_VERSION_DEFAULT }
#define QNN_LPAI_BACKEND_CUSTOM_CONFIG_INIT { QNN_LPAI_BACKEND_CUSTOM_CFG_UNDEFINED, NULL }
#define QNN_LPAI_BACKEND_CUSTOM_PROPERTY_INIT { QNN_LPAI_BACKEND_GET_PROP_UNDEFINED, NULL }
#define QNN_LPAI_BACKEND_ENPU_CORE_INFO_INIT { 0u, 0u, 0u }
#define QNN_LPAI_BACKEND_ENPU_CORE_NUM_INIT 0

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAIBACKEND_H */
