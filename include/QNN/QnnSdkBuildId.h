/* qnnemu: Build identifier of the SDK these facts come from.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNSDKBUILDID_H
#define QNNEMU_QNNSDKBUILDID_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_SDK_BUILD_ID "v2.50.40.260831140417"

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNSDKBUILDID_H */
