/* qnnemu: HTP custom device configurations (SoC, arch, PD, async, partitioning).
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPDEVICECONFIGSHARED_H
#define QNNEMU_HTP_QNNHTPDEVICECONFIGSHARED_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_HTP_DEVICE_ARCH_NONE = 0,
  QNN_HTP_DEVICE_ARCH_V68 = 68,
  QNN_HTP_DEVICE_ARCH_V69 = 69,
  QNN_HTP_DEVICE_ARCH_V73 = 73,
  QNN_HTP_DEVICE_ARCH_V75 = 75,
  QNN_HTP_DEVICE_ARCH_V79 = 79,
  QNN_HTP_DEVICE_ARCH_V81 = 81,
  QNN_HTP_DEVICE_ARCH_V85 = 85,
  QNN_HTP_DEVICE_ARCH_V89 = 89,
  QNN_HTP_DEVICE_ARCH_UNKNOWN = 2147483647
} QnnHtpDevice_Arch_t;

typedef enum {
  QNN_HTP_DEVICE_CONFIG_OPTION_SOC = 0,
  QNN_HTP_DEVICE_CONFIG_OPTION_ARCH = 1,
  QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD = 2,
  QNN_HTP_DEVICE_CONFIG_OPTION_SECUREPD = 3,
  QNN_HTP_DEVICE_CONFIG_OPTION_ASYNC_EXECUTE = 4,
  QNN_HTP_DEVICE_CONFIG_OPTION_DYNAMIC_PARTITIONING = 5,
  QNN_HTP_DEVICE_CONFIG_OPTION_APP_UID = 6,
  QNN_HTP_DEVICE_CONFIG_OPTION_HTP_EXTENSION = 2147418112,
  QNN_HTP_DEVICE_CONFIG_OPTION_UNKNOWN = 2147483647
} QnnHtpDevice_ConfigOption_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpDevice_AsyncExecute_t QnnHtpDevice_AsyncExecute_t;
typedef struct _QnnHtpDevice_CustomConfig_t QnnHtpDevice_CustomConfig_t;
typedef struct _QnnHtpDevice_Minimum_Arch_t QnnHtpDevice_Minimum_Arch_t;
typedef struct _QnnHtpDevice_UseDynamicPartitioning_t QnnHtpDevice_UseDynamicPartitioning_t;
typedef struct _QnnHtpDevice_UseSecureProcessDomain_t QnnHtpDevice_UseSecureProcessDomain_t;
typedef struct _QnnHtpDevice_UseSignedProcessDomain_t QnnHtpDevice_UseSignedProcessDomain_t;

struct _QnnHtpDevice_AsyncExecute_t {
  uint32_t deviceId;
  bool enableAsyncExecute;
};

struct _QnnHtpDevice_Minimum_Arch_t {
  uint32_t deviceId;
  QnnHtpDevice_Arch_t arch;
};

struct _QnnHtpDevice_UseDynamicPartitioning_t {
  uint32_t deviceId;
  bool useDynamicPartitioning;
  void *rsmHandle;
};

struct _QnnHtpDevice_UseSecureProcessDomain_t {
  uint32_t deviceId;
  bool useSecureProcessDomain;
};

struct _QnnHtpDevice_UseSignedProcessDomain_t {
  uint32_t deviceId;
  bool useSignedProcessDomain;
};

struct _QnnHtpDevice_CustomConfig_t {
  QnnHtpDevice_ConfigOption_t option;
  union {
    uint32_t socModel;
    QnnHtpDevice_Minimum_Arch_t arch;
    QnnHtpDevice_UseSignedProcessDomain_t useSignedProcessDomain;
    QnnHtpDevice_UseSecureProcessDomain_t useSecureProcessDomain;
    QnnHtpDevice_AsyncExecute_t asyncExecute;
    QnnHtpDevice_UseDynamicPartitioning_t useDynamicPartitioning;
    uint32_t appUid;
  };
};

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPDEVICECONFIGSHARED_H */
