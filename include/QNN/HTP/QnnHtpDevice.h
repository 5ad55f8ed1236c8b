/* qnnemu: HTP device-info extension and the device infrastructure (perf votes).
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPDEVICE_H
#define QNNEMU_HTP_QNNHTPDEVICE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnHtpDeviceConfigShared.h"
#include "QnnHtpPerfInfrastructure.h"
#include "../QnnDevice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  QNN_HTP_CORE_TYPE_NSP = 0,
  QNN_HTP_CORE_TYPE_HPASS = 1,
  QNN_HTP_CORE_TYPE_MAX = 2,
  QNN_HTP_CORE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_CoreType_t;

typedef enum {
  QNN_HTP_DEVICE_TYPE_ON_CHIP = 0,
  QNN_HTP_DEVICE_TYPE_OFF_CHIP = 1,
  QNN_HTP_DEVICE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_DeviceType_t;

typedef enum {
  QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_PERF = 0,
  QNN_HTP_DEVICE_INFRASTRUCTURE_TYPE_UNKNOWN = 2147483647
} QnnHtpDevice_InfrastructureType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnDevice_DeviceInfoExtension_t QnnHtpDevice_DeviceInfoExtension_t;
typedef struct _QnnDevice_Infrastructure_t QnnHtpDevice_Infrastructure_t;
typedef struct _QnnHtpDevice_OnChipDeviceInfoExtension_t QnnHtpDevice_OnChipDeviceInfoExtension_t;
typedef struct _QnnHtpDevice_PerfInfrastructure_t QnnHtpDevice_PerfInfrastructure_t;

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
