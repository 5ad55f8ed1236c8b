/* qnnemu: The System library provider table.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMINTERFACE_H
#define QNNEMU_SYSTEM_QNNSYSTEMINTERFACE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnInterface.h"
#include "../QnnLog.h"
#include "../QnnTypes.h"
#include "QnnSystemCommon.h"
#include "QnnSystemContext.h"
#include "QnnSystemDlc.h"
#include "QnnSystemProfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#ifndef QNN_SYSTEM_INTERFACE
#define QNN_SYSTEM_INTERFACE
#endif
#define QNN_SYSTEM_INTERFACE_NAME_EVAL(prefix,body,suffix) QNN_PASTE_THREE(prefix, body, suffix)
#define QNN_SYSTEM_INTERFACE_VER_EVAL(major,minor) QNN_PASTE_THREE(major, _, minor)
#define QNN_SYSTEM_INTERFACE_VER_NAME QNN_SYSTEM_INTERFACE_VER_NAME_EVAL(QNN_SYSTEM_API_VERSION_MAJOR, QNN_SYSTEM_API_VERSION_MINOR)
#define QNN_SYSTEM_INTERFACE_VER_NAME_EVAL(ver_major,ver_minor) QNN_SYSTEM_INTERFACE_NAME_EVAL(v, QNN_SYSTEM_INTERFACE_VER_EVAL(ver_major, ver_minor), )
#define QNN_SYSTEM_INTERFACE_VER_TYPE QNN_SYSTEM_INTERFACE_VER_TYPE_EVAL(QNN_SYSTEM_API_VERSION_MAJOR, QNN_SYSTEM_API_VERSION_MINOR)
#define QNN_SYSTEM_INTERFACE_VER_TYPE_EVAL(ver_major,ver_minor) QNN_SYSTEM_INTERFACE_NAME_EVAL( QnnSystemInterface_ImplementationV, QNN_SYSTEM_INTERFACE_VER_EVAL(ver_major, ver_minor), _t)

typedef enum {
  QNN_SYSTEM_INTERFACE_NO_ERROR = 0,
  QNN_SYSTEM_INTERFACE_ERROR_NOT_SUPPORTED = 1000,
  QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER = 1004,
  QNN_SYSTEM_INTERFACE_MIN_ERROR = 30000,
  QNN_SYSTEM_INTERFACE_MAX_ERROR = 49999
} QnnSystemInterface_Error_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSystemInterface_ImplementationV1_14_t QnnSystemInterface_ImplementationV1_14_t;
typedef struct _QnnSystemInterface_t QnnSystemInterface_t;

/* Function pointer types. */
typedef Qnn_ErrorHandle_t (*QnnSystemContext_CreateFn_t)(QnnSystemContext_Handle_t *sysCtxHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemContext_FreeFn_t)(QnnSystemContext_Handle_t sysCtxHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemContext_GetBinaryInfoFn_t)(QnnSystemContext_Handle_t sysCtxHandle, void *binaryBuffer, uint64_t binaryBufferSize, const QnnSystemContext_BinaryInfo_t **binaryInfo, Qnn_ContextBinarySize_t *binaryInfoSize);
typedef Qnn_ErrorHandle_t (*QnnSystemContext_GetMetaDataFn_t)(QnnSystemContext_Handle_t sysCtxHandle, const void *binaryBuffer, uint64_t binaryBufferSize, const QnnSystemContext_BinaryInfo_t **binaryInfo);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_composeGraphsFn_t)(QnnSystemDlc_Handle_t dlcHandle, const QnnSystemDlc_GraphConfigInfo_t **graphConfigs, const uint32_t numGraphConfigs, Qnn_BackendHandle_t backend, Qnn_ContextHandle_t context, QnnInterface_t backendInterface, QnnSystemContext_GraphInfoVersion_t graphVersion, QnnSystemContext_GraphInfo_t **graphs, uint32_t *numGraphs);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_createFromBinaryFn_t)(Qnn_LogHandle_t logger, const uint8_t *buffer, const Qnn_ContextBinarySize_t bufferSize, QnnSystemDlc_Handle_t *dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_createFromBinaryWithDestinationDirFn_t)(Qnn_LogHandle_t logger, const uint8_t *buffer, const Qnn_ContextBinarySize_t bufferSize, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_createFromFileFn_t)(Qnn_LogHandle_t logger, const char *dlcPath, QnnSystemDlc_Handle_t *dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_createFromFileWithDestinationDirFn_t)(Qnn_LogHandle_t logger, const char *dlcPath, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_createWithDestinationDirFn_t)(Qnn_LogHandle_t logger, const char *destinationDirectoryHint, QnnSystemDlc_Handle_t *dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_freeFn_t)(QnnSystemDlc_Handle_t dlcHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_freeRecordFn_t)(QnnSystemDlc_RecordHandle_t recordHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_freeRecordRangeFn_t)(QnnSystemDlc_RecordHandle_t recordHandle, uint64_t offset, uint64_t size);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getBinaryFn_t)(QnnSystemDlc_Handle_t dlcHandle, uint8_t *binaryBuffer, Qnn_SystemDlcBinarySize_t binaryBufferSize, Qnn_SystemDlcBinarySize_t *writtenBufferSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getBinarySizeFn_t)(QnnSystemDlc_Handle_t dlcHandle, Qnn_SystemDlcBinarySize_t *binaryBufferSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getComposableGraphInfoFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, const QnnSystemDlc_ComposableGraphInfo_t **graphInfo);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getComposableGraphInfoGraphNameFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, const char **graphName);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getComposableGraphInfoHandlesFn_t)(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_GraphInfoHandle_t **graphInfoHandles, uint32_t *numGraphInfoHandles);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getComposableGraphInfoNumInputTensorsFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t *numInputTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getComposableGraphInfoNumOutputTensorsFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t *numOutputTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoBackendApiVersionFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *major, uint32_t *minor, uint32_t *patch);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoBackendIdFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *backendId);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoBuildIdFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, const char **buildId);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoContextBlobSizeFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint64_t *contextBlobSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoContextBlobVersionFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *major, uint32_t *minor, uint32_t *patch);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoContextMetadataFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, void **contextMetadata);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoContextMetadataSizeFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *contextMetadataSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoContextTensorInfoFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoCoreApiVersionFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *major, uint32_t *minor, uint32_t *patch);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t contextBinaryInfoHandle, const QnnSystemContext_BinaryInfo_t **binaryInfo);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoHandlesFn_t)(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_ContextBinaryInfoHandle_t **contextBinaryInfoHandles, uint32_t *numContextBinaryInfoHandles);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoHwInfoBlobFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, void **hwInfoBlob);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoHwInfoBlobSizeFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *hwInfoBlobSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoHwInfoBlobVersionFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *major, uint32_t *minor, uint32_t *patch);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoNumContextTensorsFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *numContextTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoNumGraphsFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *numGraphs);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoSocModelFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t *socModel);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextBinaryInfoSocVersionFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, const char **socVersion);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoEndOpIndexFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *endOpIndex);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoGraphBlobInfoFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, void **graphBlobInfo);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoGraphBlobInfoSizeFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *graphBlobInfoSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoGraphNameFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, const char **graphName);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoHandleFn_t)(QnnSystemDlc_ContextBinaryInfoHandle_t handle, uint32_t index, QnnSystemDlc_ContextGraphInfoHandle_t *contextGraphInfoHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoInputTensorInfoFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoNumInputTensorsFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *numInputTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoNumOutputTensorsFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *numOutputTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoNumUpdateableTensorsFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *numUpdateableTensors);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoOutputTensorInfoFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoStartOpIndexFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t *startOpIndex);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getContextGraphInfoUpdateableTensorInfoFn_t)(QnnSystemDlc_ContextGraphInfoHandle_t handle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorInfoHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getGraphInfoInputTensorInfoFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getGraphInfoOutputTensorInfoFn_t)(QnnSystemDlc_GraphInfoHandle_t graphInfoHandle, uint32_t index, QnnSystemDlc_TensorInfoHandle_t *tensorHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getOpMappingsFn_t)(QnnSystemDlc_Handle_t dlcHandle, const Qnn_OpMapping_t **opMappings, uint32_t *numOpMappings);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsAxisScaleOffsetAxisFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *axis);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsAxisScaleOffsetNumScaleOffsetsFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *numScaleOffsets);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsAxisScaleOffsetOffsetAtIndexFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, int32_t *offset);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsAxisScaleOffsetScaleAtIndexFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, float *scale);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwAxisScaleOffsetAxisFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *axis);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwAxisScaleOffsetBitwidthFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *bitwidth);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwAxisScaleOffsetNumElementsFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *numElements);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwAxisScaleOffsetOffsetAtIndexFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, int32_t *offset);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwAxisScaleOffsetScaleAtIndexFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t index, float *scale);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwScaleOffsetBitwidthFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, uint32_t *bitwidth);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwScaleOffsetOffsetFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *offset);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsBwScaleOffsetScaleFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, float *scale);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsEncodingDefinitionFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, Qnn_Definition_t *encodingDefinition);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsEncodingFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, Qnn_QuantizationEncoding_t *encoding);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsScaleOffsetOffsetFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, int32_t *offset);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getQuantParamsScaleOffsetScaleFn_t)(QnnSystemDlc_QuantParamsHandle_t quantParamsHandle, float *scale);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getRecordByNameFn_t)(QnnSystemDlc_Handle_t dlcHandle, const char *recordName, QnnSystemDlc_RecordHandle_t *recordHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getRecordDataSizeFn_t)(QnnSystemDlc_RecordHandle_t recordHandle, uint64_t *dataSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getRecordsByTypeFn_t)(QnnSystemDlc_Handle_t dlcHandle, QnnSystemDlc_RecordType_t recordType, uint8_t getMostOptimalContextBinary, QnnSystemDlc_RecordHandle_t **recordHandles, uint32_t *numRecordHandles);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoDataFormatFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_TensorDataFormat_t *dataFormat);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoDataTypeFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_DataType_t *dataType);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoDimensionsFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *dimensions);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoIdFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *id);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoNameFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, const char **name);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoQuantParamsFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, QnnSystemDlc_QuantParamsHandle_t *quantParamsHandle);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoRankFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, uint32_t *rank);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_getTensorInfoTypeFn_t)(QnnSystemDlc_TensorInfoHandle_t tensorHandle, Qnn_TensorType_t *type);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_readRecordDataMemoryMappedFn_t)(QnnSystemDlc_RecordHandle_t recordHandle, const uint8_t **data, uint64_t *dataSize);
typedef Qnn_ErrorHandle_t (*QnnSystemDlc_saveFn_t)(QnnSystemDlc_Handle_t dlcHandle, const char *path);
typedef Qnn_ErrorHandle_t (*QnnSystemLog_createFn_t)(QnnLog_Callback_t callback, QnnLog_Level_t maxLogLevel, Qnn_LogHandle_t *logger);
typedef Qnn_ErrorHandle_t (*QnnSystemLog_freeFn_t)(Qnn_LogHandle_t logger);
typedef Qnn_ErrorHandle_t (*QnnSystemLog_setLogLevelFn_t)(Qnn_LogHandle_t logger, QnnLog_Level_t maxLogLevel);
typedef Qnn_ErrorHandle_t (*QnnSystemProfile_createSerializationTargetFn_t)(QnnSystemProfile_SerializationTarget_t serializationTargetInfo, QnnSystemProfile_SerializationTargetConfig_t *configs, uint32_t numConfigs, QnnSystemProfile_SerializationTargetHandle_t *serializationTarget);
typedef Qnn_ErrorHandle_t (*QnnSystemProfile_freeSerializationTargetFn_t)(QnnSystemProfile_SerializationTargetHandle_t serializationTarget);
typedef Qnn_ErrorHandle_t (*QnnSystemProfile_serializeEventDataFn_t)(QnnSystemProfile_SerializationTargetHandle_t serializationTarget, const QnnSystemProfile_ProfileData_t **eventData, uint32_t numEvents);
typedef Qnn_ErrorHandle_t (*QnnSystemTensor_getMemoryFootprintFn_t)(Qnn_Tensor_t tensor, uint64_t *footprint);

struct _QnnSystemInterface_ImplementationV1_14_t {
  QnnSystemContext_CreateFn_t systemContextCreate;
  QnnSystemContext_GetBinaryInfoFn_t systemContextGetBinaryInfo;
  QnnSystemContext_GetMetaDataFn_t systemContextGetMetaData;
  QnnSystemContext_FreeFn_t systemContextFree;
  QnnSystemTensor_getMemoryFootprintFn_t systemTensorGetMemoryFootprint;
  QnnSystemLog_createFn_t systemLogCreate;
  QnnSystemLog_setLogLevelFn_t systemLogSetLogLevel;
  QnnSystemLog_freeFn_t systemLogFree;
  QnnSystemDlc_createFromFileFn_t systemDlcCreateFromFile;
  QnnSystemDlc_createFromBinaryFn_t systemDlcCreateFromBinary;
  QnnSystemDlc_composeGraphsFn_t systemDlcComposeGraphs;
  QnnSystemDlc_getOpMappingsFn_t systemDlcGetOpMappings;
  QnnSystemDlc_freeFn_t systemDlcFree;
  QnnSystemProfile_createSerializationTargetFn_t systemProfileCreateSerializationTarget;
  QnnSystemProfile_serializeEventDataFn_t systemProfileSerializeEventData;
  QnnSystemProfile_freeSerializationTargetFn_t systemProfileFreeSerializationTarget;
  QnnSystemDlc_getRecordByNameFn_t systemDlcGetRecordByName;
  QnnSystemDlc_getRecordsByTypeFn_t systemDlcGetRecordsByType;
  QnnSystemDlc_getRecordDataSizeFn_t systemDlcGetRecordDataSize;
  QnnSystemDlc_readRecordDataMemoryMappedFn_t systemDlcReadRecordDataMemoryMapped;
  QnnSystemDlc_freeRecordFn_t systemDlcFreeRecord;
  QnnSystemDlc_saveFn_t systemDlcSave;
  QnnSystemDlc_createFromFileWithDestinationDirFn_t systemDlcCreateFromFileWithDestinationDir;
  QnnSystemDlc_createFromBinaryWithDestinationDirFn_t systemDlcCreateFromBinaryWithDestinationDir;
  QnnSystemDlc_getBinarySizeFn_t systemDlcGetBinarySize;
  QnnSystemDlc_getBinaryFn_t systemDlcGetBinary;
  QnnSystemDlc_createWithDestinationDirFn_t systemDlcCreateWithDestinationDir;
  QnnSystemDlc_getComposableGraphInfoHandlesFn_t systemDlcGetComposableGraphInfoHandles;
  QnnSystemDlc_getContextBinaryInfoHandlesFn_t systemDlcGetContextBinaryInfoHandles;
  QnnSystemDlc_getComposableGraphInfoFn_t systemDlcGetComposableGraphInfo;
  QnnSystemDlc_getContextBinaryInfoFn_t systemDlcGetContextBinaryInfo;
  QnnSystemDlc_getComposableGraphInfoGraphNameFn_t systemDlcGetComposableGraphInfoGraphName;
  QnnSystemDlc_getComposableGraphInfoNumInputTensorsFn_t systemDlcGetComposableGraphInfoNumInputTensors;
  QnnSystemDlc_getComposableGraphInfoNumOutputTensorsFn_t systemDlcGetComposableGraphInfoNumOutputTensors;
  QnnSystemDlc_getGraphInfoInputTensorInfoFn_t systemDlcGetGraphInfoInputTensorInfo;
  QnnSystemDlc_getGraphInfoOutputTensorInfoFn_t systemDlcGetGraphInfoOutputTensorInfo;
  QnnSystemDlc_getTensorInfoNameFn_t systemDlcGetTensorInfoName;
  QnnSystemDlc_getTensorInfoIdFn_t systemDlcGetTensorInfoId;
  QnnSystemDlc_getTensorInfoTypeFn_t systemDlcGetTensorInfoType;
  QnnSystemDlc_getTensorInfoDataFormatFn_t systemDlcGetTensorInfoDataFormat;
  QnnSystemDlc_getTensorInfoDataTypeFn_t systemDlcGetTensorInfoDataType;
  QnnSystemDlc_getTensorInfoRankFn_t systemDlcGetTensorInfoRank;
  QnnSystemDlc_getTensorInfoDimensionsFn_t systemDlcGetTensorInfoDimensions;
  QnnSystemDlc_getTensorInfoQuantParamsFn_t systemDlcGetTensorInfoQuantParams;
  QnnSystemDlc_getQuantParamsEncodingDefinitionFn_t systemDlcGetQuantParamsEncodingDefinition;
  QnnSystemDlc_getQuantParamsEncodingFn_t systemDlcGetQuantParamsEncoding;
  QnnSystemDlc_getQuantParamsScaleOffsetScaleFn_t systemDlcGetQuantParamsScaleOffsetScale;
  QnnSystemDlc_getQuantParamsScaleOffsetOffsetFn_t systemDlcGetQuantParamsScaleOffsetOffset;
  QnnSystemDlc_getQuantParamsBwScaleOffsetBitwidthFn_t systemDlcGetQuantParamsBwScaleOffsetBitwidth;
  QnnSystemDlc_getQuantParamsBwScaleOffsetScaleFn_t systemDlcGetQuantParamsBwScaleOffsetScale;
  QnnSystemDlc_getQuantParamsBwScaleOffsetOffsetFn_t systemDlcGetQuantParamsBwScaleOffsetOffset;
  QnnSystemDlc_getQuantParamsAxisScaleOffsetAxisFn_t systemDlcGetQuantParamsAxisScaleOffsetAxis;
  QnnSystemDlc_getQuantParamsAxisScaleOffsetNumScaleOffsetsFn_t systemDlcGetQuantParamsAxisScaleOffsetNumScaleOffsets;
  QnnSystemDlc_getQuantParamsAxisScaleOffsetScaleAtIndexFn_t systemDlcGetQuantParamsAxisScaleOffsetScaleAtIndex;
  QnnSystemDlc_getQuantParamsAxisScaleOffsetOffsetAtIndexFn_t systemDlcGetQuantParamsAxisScaleOffsetOffsetAtIndex;
  QnnSystemDlc_getQuantParamsBwAxisScaleOffsetBitwidthFn_t systemDlcGetQuantParamsBwAxisScaleOffsetBitwidth;
  QnnSystemDlc_getQuantParamsBwAxisScaleOffsetAxisFn_t systemDlcGetQuantParamsBwAxisScaleOffsetAxis;
  QnnSystemDlc_getQuantParamsBwAxisScaleOffsetNumElementsFn_t systemDlcGetQuantParamsBwAxisScaleOffsetNumElements;
  QnnSystemDlc_getQuantParamsBwAxisScaleOffsetScaleAtIndexFn_t systemDlcGetQuantParamsBwAxisScaleOffsetScaleAtIndex;
  QnnSystemDlc_getQuantParamsBwAxisScaleOffsetOffsetAtIndexFn_t systemDlcGetQuantParamsBwAxisScaleOffsetOffsetAtIndex;
  QnnSystemDlc_getContextBinaryInfoBackendIdFn_t systemDlcGetContextBinaryInfoBackendId;
  QnnSystemDlc_getContextBinaryInfoBuildIdFn_t systemDlcGetContextBinaryInfoBuildId;
  QnnSystemDlc_getContextBinaryInfoCoreApiVersionFn_t systemDlcGetContextBinaryInfoCoreApiVersion;
  QnnSystemDlc_getContextBinaryInfoBackendApiVersionFn_t systemDlcGetContextBinaryInfoBackendApiVersion;
  QnnSystemDlc_getContextBinaryInfoSocVersionFn_t systemDlcGetContextBinaryInfoSocVersion;
  QnnSystemDlc_getContextBinaryInfoHwInfoBlobVersionFn_t systemDlcGetContextBinaryInfoHwInfoBlobVersion;
  QnnSystemDlc_getContextBinaryInfoContextBlobVersionFn_t systemDlcGetContextBinaryInfoContextBlobVersion;
  QnnSystemDlc_getContextBinaryInfoHwInfoBlobSizeFn_t systemDlcGetContextBinaryInfoHwInfoBlobSize;
  QnnSystemDlc_getContextBinaryInfoHwInfoBlobFn_t systemDlcGetContextBinaryInfoHwInfoBlob;
  QnnSystemDlc_getContextBinaryInfoContextBlobSizeFn_t systemDlcGetContextBinaryInfoContextBlobSize;
  QnnSystemDlc_getContextBinaryInfoNumContextTensorsFn_t systemDlcGetContextBinaryInfoNumContextTensors;
  QnnSystemDlc_getContextBinaryInfoContextTensorInfoFn_t systemDlcGetContextBinaryInfoContextTensorInfo;
  QnnSystemDlc_getContextBinaryInfoNumGraphsFn_t systemDlcGetContextBinaryInfoNumGraphs;
  QnnSystemDlc_getContextGraphInfoHandleFn_t systemDlcGetContextGraphInfoHandle;
  QnnSystemDlc_getContextBinaryInfoSocModelFn_t systemDlcGetContextBinaryInfoSocModel;
  QnnSystemDlc_getContextBinaryInfoContextMetadataSizeFn_t systemDlcGetContextBinaryInfoContextMetadataSize;
  QnnSystemDlc_getContextBinaryInfoContextMetadataFn_t systemDlcGetContextBinaryInfoContextMetadata;
  QnnSystemDlc_getContextGraphInfoGraphNameFn_t systemDlcGetContextGraphInfoGraphName;
  QnnSystemDlc_getContextGraphInfoNumInputTensorsFn_t systemDlcGetContextGraphInfoNumInputTensors;
  QnnSystemDlc_getContextGraphInfoNumOutputTensorsFn_t systemDlcGetContextGraphInfoNumOutputTensors;
  QnnSystemDlc_getContextGraphInfoNumUpdateableTensorsFn_t systemDlcGetContextGraphInfoNumUpdateableTensors;
  QnnSystemDlc_getContextGraphInfoGraphBlobInfoSizeFn_t systemDlcGetContextGraphInfoGraphBlobInfoSize;
  QnnSystemDlc_getContextGraphInfoGraphBlobInfoFn_t systemDlcGetContextGraphInfoGraphBlobInfo;
  QnnSystemDlc_getContextGraphInfoStartOpIndexFn_t systemDlcGetContextGraphInfoStartOpIndex;
  QnnSystemDlc_getContextGraphInfoEndOpIndexFn_t systemDlcGetContextGraphInfoEndOpIndex;
  QnnSystemDlc_getContextGraphInfoInputTensorInfoFn_t systemDlcGetContextGraphInfoInputTensorInfo;
  QnnSystemDlc_getContextGraphInfoOutputTensorInfoFn_t systemDlcGetContextGraphInfoOutputTensorInfo;
  QnnSystemDlc_getContextGraphInfoUpdateableTensorInfoFn_t systemDlcGetContextGraphInfoUpdateableTensorInfo;
  QnnSystemDlc_freeRecordRangeFn_t systemDlcFreeRecordRange;
};

struct _QnnSystemInterface_t {
  uint32_t backendId;
  const char *providerName;
  Qnn_Version_t systemApiVersion;
  union {
    QnnSystemInterface_ImplementationV1_14_t v1_14;
  };
};

/* Initializers. */
#define QNN_SYSTEM_INTERFACE_INIT { QNN_BACKEND_ID_NULL, NULL, QNN_VERSION_INIT, { QNN_SYSTEM_INTERFACE_VER_TYPE_INIT } }
#define QNN_SYSTEM_INTERFACE_VER_TYPE_INIT { NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, }

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemInterface_getProviders(const QnnSystemInterface_t ***providerList, uint32_t *numProviders);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMINTERFACE_H */
