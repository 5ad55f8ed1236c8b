/* QnnLog.h: forwarding a finished message to an application's QnnLog_Callback_t, shared by the
 * cffi modules of libQnnHtpEmu.so (shim.c) and libQnnSystem.so (system_shim.c). */
#ifndef QNNEMU_LOG_FORWARD_H
#define QNNEMU_LOG_FORWARD_H

#include <stdarg.h>
#include <stdint.h>

#include "QnnLog.h"

/* Log callbacks take a va_list; Python cannot build one, so it calls this with a finished
 * message and we forward it as "%s". */
static void forward_log(QnnLog_Callback_t cb, QnnLog_Level_t level, uint64_t ts, const char *fmt,
                        ...) {
  va_list args;
  va_start(args, fmt);
  cb(fmt, level, ts, args);
  va_end(args);
}

#endif /* QNNEMU_LOG_FORWARD_H */
