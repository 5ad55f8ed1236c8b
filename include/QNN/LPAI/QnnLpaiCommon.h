/* qnnemu: LPAI backend id, provider name and backend API version.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAICOMMON_H
#define QNNEMU_LPAI_QNNLPAICOMMON_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_BACKEND_ID_LPAI 12
#define QNN_BACKEND_ID_LPAI_ISLAND 16
#define QNN_LPAI_API_VERSION_MAJOR 2
#define QNN_LPAI_API_VERSION_MINOR 26
#define QNN_LPAI_API_VERSION_PATCH 0
#define QNN_LPAI_BINARY_VERSION_MAJOR 1
#define QNN_LPAI_BINARY_VERSION_MINOR 0
#define QNN_LPAI_BINARY_VERSION_PATCH 0
#define QNN_LPAI_CONTEXT_BLOB_VERSION_MAJOR 1
#define QNN_LPAI_CONTEXT_BLOB_VERSION_MINOR 0
#define QNN_LPAI_CONTEXT_BLOB_VERSION_PATCH 0
#define QNN_LPAI_INTERFACE_PROVIDER_NAME "LPAI_QTI_AISW"

/* Initializers. */
#define QNN_LPAI_API_VERSION_INIT { { QNN_API_VERSION_MAJOR, QNN_API_VERSION_MINOR, QNN_API_VERSION_PATCH }, { QNN_LPAI_API_VERSION_MAJOR, QNN_LPAI_API_VERSION_MINOR, QNN_LPAI_API_VERSION_PATCH } }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAICOMMON_H */
