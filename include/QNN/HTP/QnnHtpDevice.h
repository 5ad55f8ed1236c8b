/* qnnemu: HTP custom device configurations, device-info extension, infrastructure.
 * ABI-compatible with the QNN C API (core 2.32); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPDEVICE_H
#define QNNEMU_HTP_QNNHTPDEVICE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnHtpPerfInfrastructure.h"
#include "../QnnDevice.h"

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
  QNN_HTP_DEVICE_ARCH_UNKNOWN = 2147483647
} QnnHtpDevice_Arch_t;

typedef enum {
  QNN_HTP_DEVICE_CONFIG_OPTION_SOC = 0,
  QNN_HTP_DEVICE_CONFIG_OPTION_ARCH = 1,
  QNN_HTP_DEVICE_CONFIG_OPTION_SIGNEDPD = 2,
  QNN_HTP_DEVICE_CONFIG_OPTION_SECUREPD = 3,
  QNN_HTP_DEVICE_CONFIG_OPTION_UNKNOWN = 2147483647
} QnnHtpDevice_ConfigOption_t;

typedef enum {
  QNN_HTP_CORE_TYPE_NSP = 0,
  QNN_HTP_CORE_TYPE_HPASS = 1,
  QNN_HTP_CORE_TYPE_MAX = 2,
  QNN_HTP_CORE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_CoreType_t;

typedef enum {
  QNN_HTP_DEVICE_TYPE_ON_CHIP = 0,
  QNN_HTP_DEVICE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_DeviceType_t;

typedef enum {
  QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_PERF = 0,
  QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_InfrastructureType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnHtpDevice_CustomConfig_t QnnHtpDevice_CustomConfig_t;
typedef struct _QnnDevice_DeviceInfoExtension_t QnnHtpDevice_DeviceInfoExtension_t;
typedef struct _QnnDevice_Infrastructure_t QnnHtpDevice_Infrastructure_t;
typedef struct _QnnHtpDevice_Minimum_Arch_t QnnHtpDevice_Minimum_Arch_t;
typedef struct _QnnHtpDevice_OnChipDeviceInfoExtension_t QnnHtpDevice_OnChipDeviceInfoExtension_t;
typedef struct _QnnHtpDevice_PerfInfrastructure_t QnnHtpDevice_PerfInfrastructure_t;
typedef struct _QnnHtpDevice_UseSecureProcessDomain_t QnnHtpDevice_UseSecureProcessDomain_t;
typedef struct _QnnHtpDevice_UseSignedProcessDomain_t QnnHtpDevice_UseSignedProcessDomain_t;

struct _QnnHtpDevice_Minimum_Arch_t {
  uint32_t deviceId;
  QnnHtpDevice_Arch_t arch;
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
  };
};

struct _QnnHtpDevice_OnChipDeviceInfoExtension_t {
  size_t vtcmSize;
  uint32_t socModel;
  bool signedPdSupport;
  bool dlbcSupport;
  QnnHtpDevice_Arch_t arch;
};

struct _QnnDevice_DeviceInfoExtension_t {
  QnnHtpDevice_DeviceType_t devType;
  union {
    QnnHtpDevice_OnChipDeviceInfoExtension_t onChipDevice;
  };
};

struct _QnnHtpDevice_PerfInfrastructure_t {
  QnnHtpPerfInfrastructure_CreatePowerConfigIdFn_t createPowerConfigId;
  QnnHtpPerfInfrastructure_DestroyPowerConfigIdFn_t destroyPowerConfigId;
  QnnHtpPerfInfrastructure_SetPowerConfigFn_t setPowerConfig;
  QnnHtpPerfInfrastructure_SetMemoryConfigFn_t setMemoryConfig;
};

struct _QnnDevice_Infrastructure_t {
  QnnHtpDevice_InfrastructureType_t infraType;
  union {
    QnnHtpDevice_PerfInfrastructure_t perfInfra;
  };
};

/* Initializers. */
#define QNN_HTP_DEVICE_PERF_INFRASTRUCTURE_INIT { NULL, NULL, NULL, NULL }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPDEVICE_H */
