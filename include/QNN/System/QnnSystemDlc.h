/* qnnemu: System library: DLC file handling.
 * ABI-compatible with the QNN C API (core 2.32); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMDLC_H
#define QNNEMU_SYSTEM_QNNSYSTEMDLC_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnGraph.h"
#include "../QnnInterface.h"
#include "../QnnTypes.h"
#include "QnnSystemContext.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnSystemDlc_Handle_t;

typedef enum {
  QNN_SYSTEM_DLC_GRAPH_CONFIG_INFO_VERSION_1 = 1,
  QNN_SYSTEM_DLC_GRAPH_CONFIG_INFO_UNDEFINED = 2147483647
} QnnSystemContext_GraphConfigInfoVersion_t;

typedef enum {
  QNN_SYSTEM_DLC_NO_ERROR = 0,
  QNN_SYSTEM_DLC_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_SYSTEM_DLC_ERROR_INVALID_HANDLE = 30000,
  QNN_SYSTEM_DLC_MINERROR = 30000,
  QNN_SYSTEM_DLC_ERROR_INVALID_ARGUMENT = 30001,
  QNN_SYSTEM_DLC_ERROR_OPERATION_FAILED = 30002,
  QNN_SYSTEM_DLC_ERROR_MALFORMED_BINARY = 30010,
  QNN_SYSTEM_DLC_MAXERROR = 49999
} QnnSystemDlc_Error_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSystemDlc_GraphConfigInfoV1_t QnnSystemDlc_GraphConfigInfoV1_t;
typedef struct _QnnSystemDlc_GraphConfigInfo_t QnnSystemDlc_GraphConfigInfo_t;

struct _QnnSystemDlc_GraphConfigInfoV1_t {
  const char *graphName;
  const QnnGraph_Config_t **graphConfigs;
  uint32_t numConfigs;
};

struct _QnnSystemDlc_GraphConfigInfo_t {
  QnnSystemContext_GraphConfigInfoVersion_t version;
  union {
    QnnSystemDlc_GraphConfigInfoV1_t v1;
  };
};

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemDlc_composeGraphs(QnnSystemDlc_Handle_t dlcHandle, const QnnSystemDlc_GraphConfigInfo_t **graphConfigs, const uint32_t numGraphConfigs, Qnn_BackendHandle_t backend, Qnn_ContextHandle_t context, QnnInterface_t interface, QnnSystemContext_GraphInfoVersion_t graphVersion, QnnSystemContext_GraphInfo_t **graphs, uint32_t *numGraphs);
Qnn_ErrorHandle_t QnnSystemDlc_createFromBinary(Qnn_LogHandle_t logger, const uint8_t *buffer, const Qnn_ContextBinarySize_t bufferSize, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_createFromFile(Qnn_LogHandle_t logger, const char *dlcPath, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_free(QnnSystemDlc_Handle_t dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getOpMappings(QnnSystemDlc_Handle_t dlcHandle, const Qnn_OpMapping_t **opMappings, uint32_t *numOpMappings);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMDLC_H */
