/* qnnemu: the Saver backend's own entry point, QnnSaver_initialize, and its configuration.
 *
 * The Saver backend (libQnnSaver.so) records every QNN call an application makes into a C
 * source file plus a data file, to be replayed later on another backend.  Applications that
 * support Saver include this header and call QnnSaver_initialize (found with dlsym) before any
 * other QNN call.  ABI-compatible with the vendor's Saver header; written for qnnemu from the
 * layout facts and the public documentation. */
#ifndef QNNEMU_SAVER_QNNSAVER_H
#define QNNEMU_SAVER_QNNSAVER_H

#include <stddef.h>
#include <stdint.h>
#include "../QnnCommon.h"
#include "../QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Build systems may define the visibility marker themselves. */
#ifndef QNN_SAVER_API
#define QNN_SAVER_API
#endif

/* Error codes of the Saver backend, in the range QnnCommon.h reserves for it. */
typedef enum {
  QNN_SAVER_MIN_ERROR = QNN_MIN_ERROR_BACKEND_SAVER,
  /* The call was recorded, but the value it returns is made up (Saver cannot answer queries
   * such as getSupportedOperations, getBinary or hasCapability). */
  QNN_SAVER_ERROR_DUMMY_RETVALUE = QNN_MIN_ERROR_BACKEND_SAVER + 0,
  /* QnnSaver_initialize came after the backend was already created. */
  QNN_SAVER_ERROR_ALREADY_INSTANTIATED = QNN_MIN_ERROR_BACKEND_SAVER + 1,
  QNN_SAVER_MAX_ERROR = QNN_MAX_ERROR_BACKEND_SAVER
} QnnSaver_Error_t;

/* Alternative names for the two output files (no slashes; defaults "saver_output.c" and
 * "params.bin"). */
typedef struct {
  const char *modelFileName;
  const char *dataFileName;
} QnnSaver_FileConfig_t;

typedef enum {
  QNN_SAVER_CONFIG_OPTION_OUTPUT_DIRECTORY = 0,  /* where the outputs go (default ./saver_output/) */
  QNN_SAVER_CONFIG_OPTION_APPEND_TIMESTAMP = 1,  /* non-zero: timestamped file names */
  QNN_SAVER_CONFIG_OPTION_BACKEND_ID = 2,        /* whose custom configs to record (QNN_BACKEND_ID_*) */
  QNN_SAVER_CONFIG_OPTION_FILE_CONFIG = 3,       /* switch output files at run time */
  QNN_SAVER_CONFIG_OPTION_UNDEFINED = 0x7FFFFFFF
} QnnSaver_ConfigOption_t;

typedef struct {
  QnnSaver_ConfigOption_t option;
  union {
    const char *outputDirectory;
    uint8_t appendTimestamp;
    uint32_t backendId;
    QnnSaver_FileConfig_t fileConfig;
  };
} QnnSaver_Config_t;

#define QNN_SAVER_CONFIG_INIT { QNN_SAVER_CONFIG_OPTION_UNDEFINED, { NULL } }

/* Hands configuration to the Saver backend.  ``config`` is a NULL-terminated list of pointers
 * (NULL for none); the last value of a repeated option wins.  Returns QNN_SUCCESS,
 * QNN_COMMON_ERROR_INVALID_ARGUMENT or QNN_SAVER_ERROR_ALREADY_INSTANTIATED. */
QNN_SAVER_API
Qnn_ErrorHandle_t QnnSaver_initialize(const QnnSaver_Config_t **config);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SAVER_QNNSAVER_H */
