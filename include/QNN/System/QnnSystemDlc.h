/* qnnemu: System library: DLC file handling.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
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
#include "QnnSystemCommon.h"
#include "QnnSystemContext.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef void *QnnSystemDlc_ContextBinaryInfoHandle_t;
typedef void *QnnSystemDlc_ContextGraphInfoHandle_t;
typedef void *QnnSystemDlc_GraphInfoHandle_t;
typedef void *QnnSystemDlc_QuantParamsHandle_t;
typedef void *QnnSystemDlc_RecordHandle_t;
typedef void *QnnSystemDlc_TensorInfoHandle_t;

typedef enum {
  QNN_SYSTEM_DLC_GRAPH_CONFIG_INFO_VERSION_1 = 1,
  QNN_SYSTEM_DLC_GRAPH_CONFIG_INFO_UNDEFINED = 2147483647
} QnnSystemContext_GraphConfigInfoVersion_t;

typedef enum {
  QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_VERSION_1 = 1,
  QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_UNDEFINED = 2147483647
} QnnSystemDlc_ComposableGraphInfoVersion_t;

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

typedef enum {
  QNN_SYSTEM_DLC_RECORD_TYPE_DLC_METADATA = 1,
  QNN_SYSTEM_DLC_RECORD_TYPE_MODEL_TOPOLOGY = 2,
  QNN_SYSTEM_DLC_RECORD_TYPE_MODEL_PARAMS = 3,
  QNN_SYSTEM_DLC_RECORD_TYPE_MODEL_RAW_WEIGHTS = 4,
  QNN_SYSTEM_DLC_RECORD_TYPE_MODEL_RAW_WIEGHTS = 4,
  QNN_SYSTEM_DLC_RECORD_TYPE_MODEL_ENCODINGS = 5,
  QNN_SYSTEM_DLC_RECORD_TYPE_LORA_CONVERTER_METADATA = 6,
  QNN_SYSTEM_DLC_RECORD_PREFIX_HTP_CACHE_RECORD = 7,
  QNN_SYSTEM_DLC_RECORD_PREFIX_AIP_CACHE_RECORD = 8,
  QNN_SYSTEM_DLC_RECORD_PREFIX_HTA_CACHE_RECORD = 9,
  QNN_SYSTEM_DLC_RECORD_PREFIX_AIX_CACHE_RECORD = 10,
  QNN_SYSTEM_DLC_RECORD_PREFIX_GPU_CACHE_RECORD = 11,
  QNN_SYSTEM_DLC_RECORD_PREFIX_HEXNNV2_CACHE_RECORD = 12,
  QNN_SYSTEM_DLC_RECORD_TYPE_SOURCE_MAPPING = 13,
  QNN_SYSTEM_DLC_RECORD_TYPE_SOURCE_TOPOLOGY = 14,
  QNN_SYSTEM_DLC_RECORD_TYPE_HTP_SCHEMATIC_BIN = 15,
  QNN_SYSTEM_DLC_RECORD_TYPE_HTP_GRAPH_MAPPING = 16,
  QNN_SYSTEM_DLC_RECORD_TYPE_GENAI_METADATA = 17,
  QNN_SYSTEM_DLC_RECORD_TYPE_GENAI_ARTIFACT = 18,
  QNN_SYSTEM_DLC_RECORD_TYPE_HTP_SHARED_WEIGHTS_RECORD = 19,
  QNN_SYSTEM_DLC_RECORD_TYPE_HTP_SHARED_WEIGHTS_METADATA_RECORD = 20,
  QNN_SYSTEM_DLC_RECORD_TYPE_DLC_METADATA_HISTORY = 21,
  QNN_SYSTEM_DLC_RECORD_NAME_UNKNOWN = 2147483647
} QnnSystemDlc_RecordType_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSystemDlc_ComposableGraphInfoV1_t QnnSystemDlc_ComposableGraphInfoV1_t;
typedef struct _QnnSystemDlc_ComposableGraphInfo_t QnnSystemDlc_ComposableGraphInfo_t;
typedef struct _QnnSystemDlc_GraphConfigInfoV1_t QnnSystemDlc_GraphConfigInfoV1_t;
typedef struct _QnnSystemDlc_GraphConfigInfo_t QnnSystemDlc_GraphConfigInfo_t;

struct _QnnSystemDlc_ComposableGraphInfoV1_t {
  const char *graphName;
  uint32_t numGraphInputs;
  Qnn_Tensor_t *graphInputs;
  uint32_t numGraphOutputs;
  Qnn_Tensor_t *graphOutputs;
};

struct _QnnSystemDlc_ComposableGraphInfo_t {
  QnnSystemDlc_ComposableGraphInfoVersion_t version;
  union {
    QnnSystemDlc_ComposableGraphInfoV1_t graphInfoV1;
  };
};

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

/* Initializers. */
#define QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_INIT { QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_UNDEFINED, { QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_V1_INIT } }
#define QNN_SYSTEM_DLC_COMPOSABLE_GRAPH_INFO_V1_INIT { NULL, 0, NULL, 0, NULL, }

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemDlc_composeGraphs(QnnSystemDlc_Handle_t dlcHandle, const QnnSystemDlc_GraphConfigInfo_t **graphConfigs, const uint32_t numGraphConfigs, Qnn_BackendHandle_t backend, Qnn_ContextHandle_t context, QnnInterface_t backendInterface, QnnSystemContext_GraphInfoVersion_t graphVersion, QnnSystemContext_GraphInfo_t **graphs, uint32_t *numGraphs);
Qnn_ErrorHandle_t QnnSystemDlc_createFromBinary(Qnn_LogHandle_t logger, const uint8_t *buffer, const Qnn_ContextBinarySize_t bufferSize, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_createFromBinaryWithDestinationDir(Qnn_LogHandle_t logger, const uint8_t *buffer, const Qnn_ContextBinarySize_t bufferSize, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_createFromFile(Qnn_LogHandle_t logger, const char *dlcPath, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_createFromFileWithDestinationDir(Qnn_LogHandle_t logger, const char *dlcPath, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_createWithDestinationDir(Qnn_LogHandle_t logger, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_free(QnnSystemDlc_Handle_t dlcHandle);
Qnn_ErrorHandle_t QnnSystemDlc_freeRecord(QnnSystemDlc_RecordHandle_t recordHandle);
Qnn_ErrorHandle_t QnnSystemDlc_freeRecordRange(QnnSystemDlc_RecordHandle_t recordHandle, uint64_t offset, uint64_t size);
Qnn_ErrorHandle_t QnnSystemDlc_getBinary(QnnSystemDlc_Handle_t dlcHandle, uint8_t *binaryBuffer, Qnn_SystemDlcBinarySize_t binaryBufferSize, Qnn_SystemDlcBinarySize_t *writtenBufferSize);
Qnn_ErrorHandle_t QnnSystemDlc_getBinarySize(QnnSystemDlc_Handle_t dlcHandle, Qnn_SystemDlcBinarySize_t *binaryBufferSize);
Qnn_ErrorHandle_t QnnSystemDlc_getComposableGraphInfo(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, const QnnSystemDlc_ComposableGraphInfo_t **graphInfo);
Qnn_ErrorHandle_t QnnSystemDlc_getComposableGraphInfoGraphName(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, const char **graphName);
Qnn_ErrorHandle_t QnnSystemDlc_getComposableGraphInfoHandles(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_GraphInfoHandle_t **graphInfoHandles, uint32_t *numGraphInfoHandles);
Qnn_ErrorHandle_t QnnSystemDlc_getComposableGraphInfoNumInputTensors(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t *numInputTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getComposableGraphInfoNumOutputTensors(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t *numOutputTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfo(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, const QnnSystemContext_BinaryInfo_t **binaryInfo);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoBackendApiVersion(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *major, uint32_t *minor, uint32_t *patch);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoBackendId(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *backendId);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoBuildId(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, const char **buildId);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoContextBlobSize(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint64_t *contextBlobSize);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoContextBlobVersion(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *major, uint32_t *minor, uint32_t *patch);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoContextMetadata(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, void **contextMetadata);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoContextMetadataSize(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *contextMetadataSize);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoContextTensorInfo(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoCoreApiVersion(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *major, uint32_t *minor, uint32_t *patch);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoHandles(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_ContextBinaryInfoHandle_t **contextBinaryInfoHandles, uint32_t *numContextBinaryInfoHandles);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoHwInfoBlob(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, void **hwInfoBlob);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoHwInfoBlobSize(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *hwInfoBlobSize);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoHwInfoBlobVersion(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *major, uint32_t *minor, uint32_t *patch);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoNumContextTensors(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *numContextTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoNumGraphs(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *numGraphs);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoSocModel(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t *socModel);
Qnn_ErrorHandle_t QnnSystemDlc_getContextBinaryInfoSocVersion(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, const char **socVersion);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoEndOpIndex(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *endOpIndex);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoGraphBlobInfo(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, void **graphBlobInfo);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoGraphBlobInfoSize(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *graphBlobInfoSize);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoGraphName(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, const char **graphName);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoHandle(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, uint32_t index, QnnSystemDlc_ContextGraphInfoHandle_t *contextGraphInfoHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoInputTensorInfo(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoNumInputTensors(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *numInputTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoNumOutputTensors(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *numOutputTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoNumUpdateableTensors(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *numUpdateableTensors);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoOutputTensorInfo(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoStartOpIndex(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t *startOpIndex);
Qnn_ErrorHandle_t QnnSystemDlc_getContextGraphInfoUpdateableTensorInfo(QnnSystemDlc_ContextGraphInfoHandle_t contextGraphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getGraphInfoInputTensorInfo(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getGraphInfoOutputTensorInfo(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getOpMappings(QnnSystemDlc_Handle_t dlcHandle, const Qnn_OpMapping_t **opMappings, uint32_t *numOpMappings);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsAxisScaleOffsetAxis(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *axis);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsAxisScaleOffsetNumScaleOffsets(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *numScaleOffsets);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsAxisScaleOffsetOffsetAtIndex(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, int32_t *offset);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsAxisScaleOffsetScaleAtIndex(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, float *scale);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwAxisScaleOffsetAxis(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *axis);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwAxisScaleOffsetBitwidth(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *bitwidth);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwAxisScaleOffsetNumElements(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *numElements);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwAxisScaleOffsetOffsetAtIndex(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, int32_t *offset);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwAxisScaleOffsetScaleAtIndex(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, float *scale);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwScaleOffsetBitwidth(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *bitwidth);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwScaleOffsetOffset(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *offset);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsBwScaleOffsetScale(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, float *scale);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsEncoding(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, Qnn_QuantizationEncoding_t *encoding);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsEncodingDefinition(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, Qnn_Definition_t *encodingDefinition);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsScaleOffsetOffset(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *offset);
Qnn_ErrorHandle_t QnnSystemDlc_getQuantParamsScaleOffsetScale(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, float *scale);
Qnn_ErrorHandle_t QnnSystemDlc_getRecordByName(QnnSystemDlc_Handle_t dlcHandle, const char *recordName, QnnSystemDlc_RecordHandle_t *recordHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getRecordDataSize(QnnSystemDlc_RecordHandle_t recordHandle, uint64_t *dataSize);
Qnn_ErrorHandle_t QnnSystemDlc_getRecordsByType(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_RecordType_t recordType, uint8_t getMostOptimalContextBinary, QnnSystemDlc_RecordHandle_t **recordHandles, uint32_t *numRecordHandles);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoDataFormat(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_TensorDataFormat_t *dataFormat);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoDataType(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_DataType_t *dataType);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoDimensions(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *dimensions);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoId(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *id);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoName(QnnSystemDlc_TensorInfoHandle_t tensorHandle, const char **name);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoQuantParams(QnnSystemDlc_TensorInfoHandle_t tensorHandle, QnnSystemDlc_QuantParamsHandle_t *quantParamsHandle);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoRank(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *rank);
Qnn_ErrorHandle_t QnnSystemDlc_getTensorInfoType(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_TensorType_t *type);
Qnn_ErrorHandle_t QnnSystemDlc_readRecordDataMemoryMapped(QnnSystemDlc_RecordHandle_t recordHandle, const uint8_t **data, uint64_t *dataSize);
Qnn_ErrorHandle_t QnnSystemDlc_save(QnnSystemDlc_Handle_t dlcHandle, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMDLC_H */
