/* qnnemu: Device component: platform/hardware info and device infrastructure.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNDEVICE_H
#define QNNEMU_QNNDEVICE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_DEVICE_DEFAULT_CORE_ID 0xFFFFFFFFu
#define QNN_DEVICE_DEFAULT_DEVICE_ID 0xFFFFFFFFu

/* Handles and scalar aliases. */
typedef struct _QnnDevice_CoreInfoExtension_t *QnnDevice_CoreInfoExtension_t;
typedef void *QnnDevice_CustomConfig_t;
typedef struct _QnnDevice_DeviceInfoExtension_t *QnnDevice_DeviceInfoExtension_t;
typedef struct _QnnDevice_Infrastructure_t *QnnDevice_Infrastructure_t;

typedef enum {
  QNN_DEVICE_CONFIG_OPTION_CUSTOM = 0,
  QNN_DEVICE_CONFIG_OPTION_PLATFORM_INFO = 1,
  QNN_DEVICE_CONFIG_OPTION_UNDEFINED = 2147483647
} QnnDevice_ConfigOption_t;

typedef enum {
  QNN_DEVICE_CORE_INFO_VERSION_1 = 1,
  QNN_DEVICE_CORE_INFO_VERSION_UNDEFINED = 2147483647
} QnnDevice_CoreInfoVersion_t;

typedef enum {
  QNN_DEVICE_NO_ERROR = 0,
  QNN_DEVICE_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_DEVICE_ERROR_MEM_ALLOC = 1002,
  QNN_DEVICE_ERROR_INVALID_ARGUMENT = 1004,
  QNN_DEVICE_ERROR_INVALID_HANDLE = 14000,
  QNN_DEVICE_MIN_ERROR = 14000,
  QNN_DEVICE_ERROR_INVALID_CONFIG = 14001,
  QNN_DEVICE_ERROR_HARDWARE_UNAVAILABLE = 14002,
  QNN_DEVICE_ERROR_ASSOCIATED_TO_CONTEXT = 14003,
  QNN_DEVICE_ERROR_ACCESS_DENIED = 14004,
  QNN_DEVICE_MAX_ERROR = 14999,
  QNN_DEVICE_ERROR_UNDEFINED = 2147483647
} QnnDevice_Error_t;

typedef enum {
  QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1 = 1,
  QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_UNDEFINED = 2147483647
} QnnDevice_HardwareDeviceInfoVersion_t;

typedef enum {
  QNN_DEVICE_PLATFORM_INFO_VERSION_1 = 1,
  QNN_DEVICE_PLATFORM_INFO_VERSION_UNDEFINED = 2147483647
} QnnDevice_PlatformInfoVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnDevice_Config_t QnnDevice_Config_t;
typedef struct _QnnDevice_CoreInfoV1_t QnnDevice_CoreInfoV1_t;
typedef struct _QnnDevice_CoreInfo_t QnnDevice_CoreInfo_t;
typedef struct _QnnDevice_HardwareDeviceInfoV1_t QnnDevice_HardwareDeviceInfoV1_t;
typedef struct _QnnDevice_HardwareDeviceInfo_t QnnDevice_HardwareDeviceInfo_t;
typedef struct _QnnDevice_PlatformInfoV1_t QnnDevice_PlatformInfoV1_t;
typedef struct _QnnDevice_PlatformInfo_t QnnDevice_PlatformInfo_t;

struct _QnnDevice_Config_t {
  QnnDevice_ConfigOption_t option;
  union {
    QnnDevice_CustomConfig_t customConfig;
    QnnDevice_PlatformInfo_t *hardwareInfo;
  };
};

struct _QnnDevice_CoreInfoV1_t {
  uint32_t coreId;
  uint32_t coreType;
  QnnDevice_CoreInfoExtension_t coreInfoExtension;
};

struct _QnnDevice_CoreInfo_t {
  QnnDevice_CoreInfoVersion_t version;
  union {
    QnnDevice_CoreInfoV1_t v1;
  };
};

struct _QnnDevice_HardwareDeviceInfoV1_t {
  uint32_t deviceId;
  uint32_t deviceType;
  uint32_t numCores;
  QnnDevice_CoreInfo_t *cores;
  QnnDevice_DeviceInfoExtension_t deviceInfoExtension;
};

struct _QnnDevice_HardwareDeviceInfo_t {
  QnnDevice_HardwareDeviceInfoVersion_t version;
  union {
    QnnDevice_HardwareDeviceInfoV1_t v1;
  };
};

struct _QnnDevice_PlatformInfoV1_t {
  uint32_t numHwDevices;
  QnnDevice_HardwareDeviceInfo_t *hwDevices;
};

struct _QnnDevice_PlatformInfo_t {
  QnnDevice_PlatformInfoVersion_t version;
  union {
    QnnDevice_PlatformInfoV1_t v1;
  };
};

/* Initializers. */
#define QNN_DEVICE_CONFIG_INIT { QNN_DEVICE_CONFIG_OPTION_UNDEFINED, { NULL } }
#define QNN_DEVICE_CORE_INFO_INIT { QNN_DEVICE_CORE_INFO_VERSION_1, { QNN_DEVICE_CORE_INFO_V1_INIT } }
#define QNN_DEVICE_CORE_INFO_V1_INIT { QNN_DEVICE_DEFAULT_CORE_ID, 0u, NULL }
#define QNN_DEVICE_HARDWARE_DEVICE_INFO_INIT { QNN_DEVICE_HARDWARE_DEVICE_INFO_VERSION_1, { QNN_DEVICE_HARDWARE_DEVICE_INFO_V1_INIT } }
#define QNN_DEVICE_HARDWARE_DEVICE_INFO_V1_INIT { QNN_DEVICE_DEFAULT_DEVICE_ID, 0u, 0u, NULL, NULL }
#define QNN_DEVICE_PLATFORM_INFO_INIT { QNN_DEVICE_PLATFORM_INFO_VERSION_1, { QNN_DEVICE_PLATFORM_INFO_V1_INIT } }
#define QNN_DEVICE_PLATFORM_INFO_V1_INIT { 0u, NULL }

/* Entry points. */
Qnn_ErrorHandle_t QnnDevice_create(Qnn_LogHandle_t logger, const QnnDevice_Config_t **config, Qnn_DeviceHandle_t *device);
Qnn_ErrorHandle_t QnnDevice_free(Qnn_DeviceHandle_t device);
Qnn_ErrorHandle_t QnnDevice_freePlatformInfo(Qnn_LogHandle_t logger, const QnnDevice_PlatformInfo_t *platformInfo);
Qnn_ErrorHandle_t QnnDevice_getInfo(Qnn_DeviceHandle_t device, const QnnDevice_PlatformInfo_t **platformInfo);
Qnn_ErrorHandle_t QnnDevice_getInfrastructure(const QnnDevice_Infrastructure_t *deviceInfra);
Qnn_ErrorHandle_t QnnDevice_getPlatformInfo(Qnn_LogHandle_t logger, const QnnDevice_PlatformInfo_t **platformInfo);
Qnn_ErrorHandle_t QnnDevice_setConfig(Qnn_DeviceHandle_t device, const QnnDevice_Config_t **config);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNDEVICE_H */
