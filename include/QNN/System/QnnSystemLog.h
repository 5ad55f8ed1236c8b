/* qnnemu: System library logging.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMLOG_H
#define QNNEMU_SYSTEM_QNNSYSTEMLOG_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnLog.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemLog_create(QnnLog_Callback_t callback, QnnLog_Level_t maxLogLevel, Qnn_LogHandle_t *logger);
Qnn_ErrorHandle_t QnnSystemLog_free(Qnn_LogHandle_t logger);
Qnn_ErrorHandle_t QnnSystemLog_setLogLevel(Qnn_LogHandle_t logger, QnnLog_Level_t maxLogLevel);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMLOG_H */
