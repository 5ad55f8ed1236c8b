/* qnnemu: HTP-specific capability keys.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_HTP_QNNHTPPROPERTY_H
#define QNNEMU_HTP_QNNHTPPROPERTY_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_PROPERTY_CUSTOM_HTP_UNSIGNED_PD_SUPPORT 2002

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_HTP_QNNHTPPROPERTY_H */
