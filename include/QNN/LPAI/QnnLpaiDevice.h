/* qnnemu: LPAI device-info extension.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAIDEVICE_H
#define QNNEMU_LPAI_QNNLPAIDEVICE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnDevice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnDevice_DeviceInfoExtension_t QnnLpaiDevice_DeviceInfoExtension_t;

struct _QnnDevice_DeviceInfoExtension_t {
  uint32_t socModel;
  uint32_t arch;
  uint32_t domainId;
  const char *domainName;
};

/* Initializers. */
#define QNN_LPAI_DEVICE_INFO_EXTENSION_INIT { 0u, 0u, 0u, "adsp" }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAIDEVICE_H */
