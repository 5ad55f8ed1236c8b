/* qnnemu: Data types, tensors, quantization encodings, op configs and parameters.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNTYPES_H
#define QNNEMU_QNNTYPES_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_TENSOR_DATA_FORMAT_BATCH_ALIGNED_256 37
#define QNN_TENSOR_DATA_FORMAT_CODEBOOK 2
#define QNN_TENSOR_DATA_FORMAT_DENSE 0
#define QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER 0
#define QNN_TENSOR_DATA_FORMAT_HMX_WEIGHT_LAYOUT 8
#define QNN_TENSOR_DATA_FORMAT_MX 3
#define QNN_TENSOR_DATA_FORMAT_SPARSE 1
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_10BPS_1X1 25
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_10BPS_2X2 26
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_10BPS_4X4 27
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_12BPS_1X1 28
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_12BPS_2X2 29
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_12BPS_4X4 30
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_14BPS_1X1 31
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_14BPS_2X2 32
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_14BPS_4X4 33
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_16BPS_1X1 34
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_16BPS_2X2 35
#define QNN_TENSOR_DATA_FORMAT_UBWC_BAYER16_16BPS_4X4 36
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV12 5
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV124R 9
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV124R_UV 11
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV124R_Y 10
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV12_UV 7
#define QNN_TENSOR_DATA_FORMAT_UBWC_NV12_Y 6
#define QNN_TENSOR_DATA_FORMAT_UBWC_P010 12
#define QNN_TENSOR_DATA_FORMAT_UBWC_P010_UV 14
#define QNN_TENSOR_DATA_FORMAT_UBWC_P010_Y 13
#define QNN_TENSOR_DATA_FORMAT_UBWC_P016 15
#define QNN_TENSOR_DATA_FORMAT_UBWC_P016_UV 17
#define QNN_TENSOR_DATA_FORMAT_UBWC_P016_Y 16
#define QNN_TENSOR_DATA_FORMAT_UBWC_RGBA8888 4
#define QNN_TENSOR_DATA_FORMAT_UBWC_TBAYER10_1X1 21
#define QNN_TENSOR_DATA_FORMAT_UBWC_TBAYER10_2X2 22
#define QNN_TENSOR_DATA_FORMAT_UBWC_TBAYER10_3X3 23
#define QNN_TENSOR_DATA_FORMAT_UBWC_TBAYER10_4X4 24
#define QNN_TENSOR_DATA_FORMAT_UBWC_TP10 18
#define QNN_TENSOR_DATA_FORMAT_UBWC_TP10_UV 20
#define QNN_TENSOR_DATA_FORMAT_UBWC_TP10_Y 19

/* Handles and scalar aliases. */
typedef struct Qnn_ArrayOf_t Qnn_ArrayOf_t;
typedef uint64_t Qnn_ContextBinarySize_t;
typedef uint32_t Qnn_TensorDataFormat_t;

typedef enum {
  QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_8 = 0,
  QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_16 = 1,
  QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_UNDEFINED = 2147483647
} Qnn_BlockwiseExpansionBlockScaleStorageType_t;

typedef enum {
  QNN_DATATYPE_INT_2 = 2,
  QNN_DATATYPE_INT_4 = 4,
  QNN_DATATYPE_INT_8 = 8,
  QNN_DATATYPE_INT_16 = 22,
  QNN_DATATYPE_INT_32 = 50,
  QNN_DATATYPE_INT_64 = 100,
  QNN_DATATYPE_UINT_2 = 258,
  QNN_DATATYPE_UINT_4 = 260,
  QNN_DATATYPE_UINT_8 = 264,
  QNN_DATATYPE_UINT_16 = 278,
  QNN_DATATYPE_UINT_32 = 306,
  QNN_DATATYPE_UINT_64 = 356,
  QNN_DATATYPE_FLOAT_4 = 516,
  QNN_DATATYPE_FLOAT_8 = 520,
  QNN_DATATYPE_FLOAT_16 = 534,
  QNN_DATATYPE_BFLOAT_16 = 550,
  QNN_DATATYPE_FLOAT_32 = 562,
  QNN_DATATYPE_FLOAT_64 = 612,
  QNN_DATATYPE_SFIXED_POINT_2 = 770,
  QNN_DATATYPE_SFIXED_POINT_4 = 772,
  QNN_DATATYPE_SFIXED_POINT_8 = 776,
  QNN_DATATYPE_SFIXED_POINT_16 = 790,
  QNN_DATATYPE_SFIXED_POINT_32 = 818,
  QNN_DATATYPE_UFIXED_POINT_2 = 1026,
  QNN_DATATYPE_UFIXED_POINT_4 = 1028,
  QNN_DATATYPE_UFIXED_POINT_8 = 1032,
  QNN_DATATYPE_UFIXED_POINT_16 = 1046,
  QNN_DATATYPE_UFIXED_POINT_32 = 1074,
  QNN_DATATYPE_BOOL_8 = 1288,
  QNN_DATATYPE_STRING = 1544,
  QNN_DATATYPE_UNDEFINED = 2147483647
} Qnn_DataType_t;

typedef enum {
  QNN_DEFINITION_IMPL_GENERATED = 0,
  QNN_DEFINITION_DEFINED = 1,
  QNN_DEFINITION_UNDEFINED = 2147483647
} Qnn_Definition_t;

typedef enum {
  QNN_ERROR_REPORTING_LEVEL_BRIEF = 0,
  QNN_ERROR_REPORTING_LEVEL_DETAILED = 1,
  QNN_ERROR_REPORTING_LEVEL_UNDEFINED = 2147483647
} Qnn_ErrorReportingLevel_t;

typedef enum {
  QNN_FLOAT_ENCODING_MXFP8_E5M2 = 0,
  QNN_FLOAT_ENCODING_MXFP8_E4M3 = 1,
  QNN_FLOAT_ENCODING_MXFP6_E3M2 = 2,
  QNN_FLOAT_ENCODING_MXFP6_E2M3 = 3,
  QNN_FLOAT_ENCODING_MXFP4_E2M1 = 4,
  QNN_FLOAT_ENCODING_UNDEFINED = 2147483647
} Qnn_FloatEncoding_t;

typedef enum {
  QNN_OP_MAPPING_TYPE_TENSOR = 0,
  QNN_OP_MAPPING_TYPE_OP = 1
} Qnn_MappingType_t;

typedef enum {
  QNN_OPCONFIG_VERSION_1 = 1,
  QNN_OPCONFIG_VERSION_UNDEFINED = 2147483647
} Qnn_OpConfigVersion_t;

typedef enum {
  QNN_OP_MAPPING_VERSION_1 = 1
} Qnn_OpMappingVersion_t;

typedef enum {
  QNN_PARAMTYPE_SCALAR = 0,
  QNN_PARAMTYPE_TENSOR = 1,
  QNN_PARAMTYPE_UNDEFINED = 2147483647
} Qnn_ParamType_t;

typedef enum {
  QNN_PRECISION_FLOAT32 = 0,
  QNN_PRECISION_FLOAT16 = 1,
  QNN_PRECISION_UNDEFINED = 2147483647
} Qnn_Precision_t;

typedef enum {
  QNN_PRIORITY_LOW = 0,
  QNN_PRIORITY_LOWEST = 0,
  QNN_PRIORITY_NORMAL_LOW = 50,
  QNN_PRIORITY_DEFAULT = 100,
  QNN_PRIORITY_NORMAL = 100,
  QNN_PRIORITY_NORMAL_HIGH = 150,
  QNN_PRIORITY_HIGH = 200,
  QNN_PRIORITY_HIGH_PLUS = 300,
  QNN_PRIORITY_CRITICAL = 400,
  QNN_PRIORITY_CRITICAL_PLUS = 500,
  QNN_PRIORITY_HIGHEST = 500,
  QNN_PRIORITY_UNDEFINED = 2147483647
} Qnn_Priority_t;

typedef enum {
  QNN_QUANTIZATION_ENCODING_MAPPING_STANDARD_SYMMETRIC = 0,
  QNN_QUANTIZATION_ENCODING_MAPPING_ASYMMETRIC_PLUS_ONE = 1,
  QNN_QUANTIZATION_ENCODING_MAPPING_LINEAR_SYMMETRIC_EXCLUDE_ZERO = 2,
  QNN_QUANTIZATION_ENCODING_MAPPING_UNDEFINED = 2147483647
} Qnn_QuantizationEncodingMapping_t;

typedef enum {
  QNN_QUANTIZATION_ENCODING_SCALE_OFFSET = 0,
  QNN_QUANTIZATION_ENCODING_AXIS_SCALE_OFFSET = 1,
  QNN_QUANTIZATION_ENCODING_BW_SCALE_OFFSET = 2,
  QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET = 3,
  QNN_QUANTIZATION_ENCODING_BLOCK = 4,
  QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION = 5,
  QNN_QUANTIZATION_ENCODING_VECTOR = 6,
  QNN_QUANTIZATION_ENCODING_FLOAT_BLOCK = 7,
  QNN_QUANTIZATION_ENCODING_BW_AXIS_SCALE_OFFSET_MAPPED = 8,
  QNN_QUANTIZATION_ENCODING_BW_BLOCK_MAPPED = 9,
  QNN_QUANTIZATION_ENCODING_BW_BLOCKWISE_EXPANSION_MAPPED = 10,
  QNN_QUANTIZATION_ENCODING_BW_FLOAT_BLOCK = 11,
  QNN_QUANTIZATION_ENCODING_MICROSCALING = 12,
  QNN_QUANTIZATION_ENCODING_ARRAY_OF = 13,
  QNN_QUANTIZATION_ENCODING_UNDEFINED = 2147483647
} Qnn_QuantizationEncoding_t;

typedef enum {
  QNN_SOC_MODEL_UNKNOWN = 0,
  QNN_SOC_MODEL_SDM845 = 1,
  QNN_SOC_MODEL_SDM835 = 2,
  QNN_SOC_MODEL_SDM821 = 3,
  QNN_SOC_MODEL_SDM820 = 4,
  QNN_SOC_MODEL_SDM801 = 5,
  QNN_SOC_MODEL_SDM670 = 6,
  QNN_SOC_MODEL_SDM660 = 7,
  QNN_SOC_MODEL_SDM652 = 8,
  QNN_SOC_MODEL_SDM636 = 9,
  QNN_SOC_MODEL_SDM630 = 10,
  QNN_SOC_MODEL_SDM625 = 11,
  QNN_SOC_MODEL_SDM855 = 12,
  QNN_SOC_MODEL_SDM710 = 13,
  QNN_SOC_MODEL_SDM632 = 15,
  QNN_SOC_MODEL_SM6150 = 16,
  QNN_SOC_MODEL_SM7150 = 17,
  QNN_SOC_MODEL_QCS405 = 18,
  QNN_SOC_MODEL_SM6125 = 19,
  QNN_SOC_MODEL_QCS403 = 20,
  QNN_SOC_MODEL_SDM865 = 21,
  QNN_SOC_MODEL_IPQ6018 = 23,
  QNN_SOC_MODEL_IPQ6028 = 24,
  QNN_SOC_MODEL_SM7250 = 25,
  QNN_SOC_MODEL_SA8195 = 26,
  QNN_SOC_MODEL_SM6250 = 27,
  QNN_SOC_MODEL_SM4250 = 28,
  QNN_SOC_MODEL_SM6350 = 29,
  QNN_SOC_MODEL_SM8350 = 30,
  QNN_SOC_MODEL_SM4350 = 31,
  QNN_SOC_MODEL_SM7350 = 32,
  QNN_SOC_MODEL_QCS410 = 33,
  QNN_SOC_MODEL_SM8325 = 34,
  QNN_SOC_MODEL_SM7325 = 35,
  QNN_SOC_MODEL_SM8450 = 36,
  QNN_SOC_MODEL_SC8280X = 37,
  QNN_SOC_MODEL_SM7315 = 38,
  QNN_SOC_MODEL_SA8295 = 39,
  QNN_SOC_MODEL_SM6225 = 40,
  QNN_SOC_MODEL_SM7450 = 41,
  QNN_SOC_MODEL_SM8475 = 42,
  QNN_SOC_MODEL_SM8550 = 43,
  QNN_SOC_MODEL_SXR1230P = 45,
  QNN_SOC_MODEL_SSG2115P = 46,
  QNN_SOC_MODEL_STP6225P = 47,
  QNN_SOC_MODEL_QCS6125 = 48,
  QNN_SOC_MODEL_QRB4210 = 49,
  QNN_SOC_MODEL_SM6450 = 50,
  QNN_SOC_MODEL_QCS7230 = 51,
  QNN_SOC_MODEL_SA8255 = 52,
  QNN_SOC_MODEL_SXR2230P = 53,
  QNN_SOC_MODEL_SM7475 = 54,
  QNN_SOC_MODEL_SM4375 = 55,
  QNN_SOC_MODEL_QCM4325 = 56,
  QNN_SOC_MODEL_SM8650 = 57,
  QNN_SOC_MODEL_SSG2125P = 58,
  QNN_SOC_MODEL_SM4450 = 59,
  QNN_SOC_MODEL_SC8380XP = 60,
  QNN_SOC_MODEL_SM7435 = 61,
  QNN_SOC_MODEL_SA8540 = 62,
  QNN_SOC_MODEL_AIC100 = 63,
  QNN_SOC_MODEL_SM7550 = 64,
  QNN_SOC_MODEL_SM6450Q = 65,
  QNN_SOC_MODEL_QCS8550 = 66,
  QNN_SOC_MODEL_SA8620P = 67,
  QNN_SOC_MODEL_SM8635 = 68,
  QNN_SOC_MODEL_SM8750 = 69,
  QNN_SOC_MODEL_SM7675 = 70,
  QNN_SOC_MODEL_SM4635 = 71,
  QNN_SOC_MODEL_SA8797 = 72,
  QNN_SOC_MODEL_SM7635 = 73,
  QNN_SOC_MODEL_SM6650 = 74,
  QNN_SOC_MODEL_SXR2330P = 75,
  QNN_SOC_MODEL_SM6475 = 76,
  QNN_SOC_MODEL_QCS9100 = 77,
  QNN_SOC_MODEL_QCM6690 = 78,
  QNN_SOC_MODEL_IPQ9574 = 79,
  QNN_SOC_MODEL_IPQ5404 = 80,
  QNN_SOC_MODEL_IPQ5424 = 81,
  QNN_SOC_MODEL_QCS8300 = 82,
  QNN_SOC_MODEL_QCS2290 = 83,
  QNN_SOC_MODEL_SA525M = 84,
  QNN_SOC_MODEL_SM8735 = 85,
  QNN_SOC_MODEL_SM7750 = 86,
  QNN_SOC_MODEL_SM8850 = 87,
  QNN_SOC_MODEL_DYNAMIC_SDM = 2147483647
} Qnn_SocModel_t;

typedef enum {
  QNN_SPARSE_LAYOUT_HYBRID_COO = 0,
  QNN_SPARSE_LAYOUT_UNDEFINED = 2147483647
} Qnn_SparseLayoutType_t;

typedef enum {
  QNN_TENSORMEMTYPE_RAW = 0,
  QNN_TENSORMEMTYPE_MEMHANDLE = 1,
  QNN_TENSORMEMTYPE_RETRIEVE_RAW = 2,
  QNN_TENSORMEMTYPE_UNDEFINED = 2147483647
} Qnn_TensorMemType_t;

typedef enum {
  QNN_TENSOR_SET_VERSION_1 = 1,
  QNN_TENSOR_SET_VERSION_UNDEFINED = 2147483647
} Qnn_TensorSetVersion_t;

typedef enum {
  QNN_TENSOR_TYPE_APP_WRITE = 0,
  QNN_TENSOR_TYPE_APP_READ = 1,
  QNN_TENSOR_TYPE_APP_READWRITE = 2,
  QNN_TENSOR_TYPE_NATIVE = 3,
  QNN_TENSOR_TYPE_STATIC = 4,
  QNN_TENSOR_TYPE_NULL = 5,
  QNN_TENSOR_TYPE_UPDATEABLE_STATIC = 6,
  QNN_TENSOR_TYPE_UPDATEABLE_NATIVE = 7,
  QNN_TENSOR_TYPE_UPDATEABLE_APP_WRITE = 8,
  QNN_TENSOR_TYPE_UPDATEABLE_APP_READ = 9,
  QNN_TENSOR_TYPE_UPDATEABLE_APP_READWRITE = 10,
  QNN_TENSOR_TYPE_OPTIONAL_APP_WRITE = 11,
  QNN_TENSOR_TYPE_OPTIONAL_APP_READ = 12,
  QNN_TENSOR_TYPE_OPTIONAL_APP_READWRITE = 13,
  QNN_TENSOR_TYPE_UNDEFINED = 2147483647
} Qnn_TensorType_t;

typedef enum {
  QNN_TENSOR_VERSION_1 = 1,
  QNN_TENSOR_VERSION_2 = 2,
  QNN_TENSOR_VERSION_UNDEFINED = 2147483647
} Qnn_TensorVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _Qnn_ApiVersion_t Qnn_ApiVersion_t;
typedef struct _Qnn_AxisScaleOffset_t Qnn_AxisScaleOffset_t;
typedef struct _Qnn_BlockEncoding_t Qnn_BlockEncoding_t;
typedef struct _Qnn_BlockwiseExpansion_t Qnn_BlockwiseExpansion_t;
typedef struct _Qnn_BwAxisScaleOffsetMapped_t Qnn_BwAxisScaleOffsetMapped_t;
typedef struct _Qnn_BwAxisScaleOffset_t Qnn_BwAxisScaleOffset_t;
typedef struct _Qnn_BwBlockMapped_t Qnn_BwBlockMapped_t;
typedef struct _Qnn_BwBlockwiseExpansionMapped_t Qnn_BwBlockwiseExpansionMapped_t;
typedef struct _Qnn_BwFloatBlockEncoding_t Qnn_BwFloatBlockEncoding_t;
typedef struct _Qnn_BwScaleOffset_t Qnn_BwScaleOffset_t;
typedef struct _Qnn_ClientBuffer_t Qnn_ClientBuffer_t;
typedef struct _Qnn_ErrorReportingConfig_t Qnn_ErrorReportingConfig_t;
typedef struct _Qnn_FloatBlockEncoding_t Qnn_FloatBlockEncoding_t;
typedef struct _Qnn_FloatScaleOffset_t Qnn_FloatScaleOffset_t;
typedef struct _Qnn_Mapping_t Qnn_Mapping_t;
typedef struct _Qnn_MicroscalingEncoding_t Qnn_MicroscalingEncoding_t;
typedef struct _Qnn_OpConfigV1_t Qnn_OpConfigV1_t;
typedef struct _Qnn_OpConfig_t Qnn_OpConfig_t;
typedef struct _Qnn_OpMappingPair_t Qnn_OpMappingPair_t;
typedef struct _Qnn_OpMappingV1_t Qnn_OpMappingV1_t;
typedef struct _Qnn_OpMapping_t Qnn_OpMapping_t;
typedef struct _Qnn_OpaqueObject_t Qnn_OpaqueObject_t;
typedef struct _Qnn_Param_t Qnn_Param_t;
typedef struct _Qnn_QuantizeParams_t Qnn_QuantizeParams_t;
typedef struct _Qnn_Scalar_t Qnn_Scalar_t;
typedef struct _Qnn_ScaleOffset_t Qnn_ScaleOffset_t;
typedef struct _Qnn_SparseLayoutHybridCoo_t Qnn_SparseLayoutHybridCoo_t;
typedef struct _Qnn_SparseParams_t Qnn_SparseParams_t;
typedef struct _Qnn_TensorRetrieveRaw_t Qnn_TensorRetrieveRaw_t;
typedef struct _Qnn_TensorSetV1_t Qnn_TensorSetV1_t;
typedef struct _Qnn_TensorSet_t Qnn_TensorSet_t;
typedef struct _Qnn_TensorV1_t Qnn_TensorV1_t;
typedef struct _Qnn_TensorV2_t Qnn_TensorV2_t;
typedef struct _Qnn_Tensor_t Qnn_Tensor_t;
typedef struct _Qnn_VectorEncoding_t Qnn_VectorEncoding_t;
typedef struct _Qnn_Version_t Qnn_Version_t;

/* Function pointer types. */
typedef Qnn_ErrorHandle_t (*Qnn_FreeTensorRawDataFn_t)(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, uint64_t id);
typedef Qnn_ErrorHandle_t (*Qnn_GetTensorRawDataFn_t)(Qnn_ContextHandle_t context, Qnn_GraphHandle_t graph, uint64_t id, Qnn_ClientBuffer_t *clientBuf);

struct _Qnn_Version_t {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
};

struct _Qnn_ApiVersion_t {
  Qnn_Version_t coreApiVersion;
  Qnn_Version_t backendApiVersion;
};

struct _Qnn_AxisScaleOffset_t {
  int32_t axis;
  uint32_t numScaleOffsets;
  Qnn_ScaleOffset_t *scaleOffset;
};

struct _Qnn_BlockEncoding_t {
  uint32_t *blockSize;
  Qnn_ScaleOffset_t *scaleOffset;
};

struct _Qnn_BlockwiseExpansion_t {
  int32_t axis;
  Qnn_ScaleOffset_t *scaleOffsets;
  uint32_t numBlocksPerAxis;
  uint32_t blockScaleBitwidth;
  Qnn_BlockwiseExpansionBlockScaleStorageType_t blockScaleStorageType;
  union {
    uint8_t *blocksScale8;
    uint16_t *blocksScale16;
  };
};

struct _Qnn_BwAxisScaleOffsetMapped_t {
  uint32_t bitwidth;
  int32_t axis;
  Qnn_QuantizationEncodingMapping_t mapping;
  uint32_t numElements;
  float *scales;
  int32_t *offsets;
};

struct _Qnn_BwAxisScaleOffset_t {
  uint32_t bitwidth;
  int32_t axis;
  uint32_t numElements;
  float *scales;
  int32_t *offsets;
};

struct _Qnn_BwBlockMapped_t {
  uint32_t bitwidth;
  Qnn_QuantizationEncodingMapping_t mapping;
  uint32_t *blockSize;
  Qnn_ScaleOffset_t *scaleOffset;
};

struct _Qnn_BwBlockwiseExpansionMapped_t {
  uint32_t bitwidth;
  Qnn_QuantizationEncodingMapping_t mapping;
  int32_t axis;
  Qnn_ScaleOffset_t *scaleOffsets;
  uint32_t numBlocksPerAxis;
  uint32_t blockScaleBitwidth;
  Qnn_BlockwiseExpansionBlockScaleStorageType_t blockScaleStorageType;
  union {
    uint8_t *blocksScale8;
    uint16_t *blocksScale16;
  };
};

struct _Qnn_BwFloatBlockEncoding_t {
  uint32_t bitwidth;
  uint32_t *blockSize;
  Qnn_FloatScaleOffset_t *floatScaleOffset;
};

struct _Qnn_BwScaleOffset_t {
  uint32_t bitwidth;
  float scale;
  int32_t offset;
};

struct _Qnn_ClientBuffer_t {
  void *data;
  uint32_t dataSize;
};

struct _Qnn_ErrorReportingConfig_t {
  Qnn_ErrorReportingLevel_t reportingLevel;
  uint32_t storageLimit;
};

struct _Qnn_FloatBlockEncoding_t {
  uint32_t *blockSize;
  Qnn_FloatScaleOffset_t *floatScaleOffset;
};

struct _Qnn_FloatScaleOffset_t {
  float scale;
  float offset;
};

struct _Qnn_Mapping_t {
  const char *name;
  Qnn_OpMappingPair_t *pair;
  uint32_t numPairs;
};

struct _Qnn_MicroscalingEncoding_t {
  Qnn_FloatEncoding_t valueEncoding;
  uint32_t blockRank;
  uint32_t *blockDimensions;
  uint32_t blockCount;
  Qnn_DataType_t scaleDataType;
  union {
    uint8_t *blockScales8;
    float *blockScalesFloat;
  };
};

struct _Qnn_OpConfigV1_t {
  const char *name;
  const char *packageName;
  const char *typeName;
  uint32_t numOfParams;
  Qnn_Param_t *params;
  uint32_t numOfInputs;
  Qnn_Tensor_t *inputTensors;
  uint32_t numOfOutputs;
  Qnn_Tensor_t *outputTensors;
};

struct _Qnn_OpConfig_t {
  Qnn_OpConfigVersion_t version;
  union {
    Qnn_OpConfigV1_t v1;
  };
};

struct _Qnn_OpMappingPair_t {
  const char *name;
  Qnn_MappingType_t type;
};

struct _Qnn_OpMappingV1_t {
  const char *graphName;
  Qnn_Mapping_t *opMappings;
  uint32_t numOpMappings;
  Qnn_Mapping_t *tensorMappings;
  uint32_t numTensorMappings;
};

struct _Qnn_OpMapping_t {
  Qnn_OpMappingVersion_t version;
  union {
    Qnn_OpMappingV1_t *v1;
  };
};

struct _Qnn_OpaqueObject_t {
  void *data;
  uint64_t len;
};

struct _Qnn_Scalar_t {
  Qnn_DataType_t dataType;
  union {
    float floatValue;
    double doubleValue;
    uint64_t uint64Value;
    int64_t int64Value;
    uint32_t uint32Value;
    int32_t int32Value;
    uint16_t uint16Value;
    int16_t int16Value;
    uint8_t uint8Value;
    int8_t int8Value;
    uint8_t bool8Value;
    int16_t bfloat16Value;
    const char *stringValue;
  };
};

struct _Qnn_ScaleOffset_t {
  float scale;
  int32_t offset;
};

struct _Qnn_QuantizeParams_t {
  Qnn_Definition_t encodingDefinition;
  Qnn_QuantizationEncoding_t quantizationEncoding;
  union {
    Qnn_ScaleOffset_t scaleOffsetEncoding;
    Qnn_AxisScaleOffset_t axisScaleOffsetEncoding;
    Qnn_BwScaleOffset_t bwScaleOffsetEncoding;
    Qnn_BwAxisScaleOffset_t bwAxisScaleOffsetEncoding;
    Qnn_BlockEncoding_t blockEncoding;
    Qnn_BlockwiseExpansion_t *blockwiseExpansion;
    Qnn_VectorEncoding_t *vectorEncoding;
    Qnn_FloatBlockEncoding_t floatBlockEncoding;
    Qnn_BwAxisScaleOffsetMapped_t *bwAxisScaleOffsetMappedEncoding;
    Qnn_BwBlockMapped_t *bwBlockMappedEncoding;
    Qnn_BwBlockwiseExpansionMapped_t *bwBlockwiseExpansionMappedEncoding;
    Qnn_BwFloatBlockEncoding_t bwFloatBlockEncoding;
    Qnn_MicroscalingEncoding_t *microScalingEncoding;
    Qnn_ArrayOf_t *arrayOfEncoding;
  };
};

struct _Qnn_TensorV1_t {
  uint32_t id;
  const char *name;
  Qnn_TensorType_t type;
  Qnn_TensorDataFormat_t dataFormat;
  Qnn_DataType_t dataType;
  Qnn_QuantizeParams_t quantizeParams;
  uint32_t rank;
  uint32_t *dimensions;
  Qnn_TensorMemType_t memType;
  union {
    Qnn_ClientBuffer_t clientBuf;
    Qnn_MemHandle_t memHandle;
  };
};

struct _Qnn_SparseLayoutHybridCoo_t {
  uint32_t numSpecifiedElements;
  uint32_t numSparseDimensions;
};

struct _Qnn_SparseParams_t {
  Qnn_SparseLayoutType_t type;
  union {
    Qnn_SparseLayoutHybridCoo_t hybridCoo;
  };
};

struct _Qnn_TensorV2_t {
  uint32_t id;
  const char *name;
  Qnn_TensorType_t type;
  Qnn_TensorDataFormat_t dataFormat;
  Qnn_DataType_t dataType;
  Qnn_QuantizeParams_t quantizeParams;
  uint32_t rank;
  uint32_t *dimensions;
  Qnn_TensorMemType_t memType;
  union {
    Qnn_ClientBuffer_t clientBuf;
    Qnn_MemHandle_t memHandle;
    Qnn_TensorRetrieveRaw_t *retrieveRaw;
  };
  uint8_t *isDynamicDimensions;
  Qnn_SparseParams_t sparseParams;
  uint8_t isProduced;
};

struct _Qnn_Tensor_t {
  Qnn_TensorVersion_t version;
  union {
    Qnn_TensorV1_t v1;
    Qnn_TensorV2_t v2;
  };
};

struct _Qnn_Param_t {
  Qnn_ParamType_t paramType;
  const char *name;
  union {
    Qnn_Scalar_t scalarParam;
    Qnn_Tensor_t tensorParam;
  };
};

struct _Qnn_TensorRetrieveRaw_t {
  Qnn_GetTensorRawDataFn_t getTensorData;
  Qnn_FreeTensorRawDataFn_t freeTensorData;
};

struct _Qnn_TensorSetV1_t {
  uint32_t numInputs;
  Qnn_Tensor_t *inputs;
  uint32_t numOutputs;
  Qnn_Tensor_t *outputs;
};

struct _Qnn_TensorSet_t {
  Qnn_TensorSetVersion_t version;
  union {
    Qnn_TensorSetV1_t v1;
  };
};

struct _Qnn_VectorEncoding_t {
  Qnn_BwAxisScaleOffset_t bwAxisScaleOffset;
  uint32_t rowsPerBlock;
  uint32_t columnsPerBlock;
  uint8_t vectorDimension;
  uint8_t vectorStride;
  uint8_t indexBitwidth;
};

struct Qnn_ArrayOf_t {
  Qnn_QuantizationEncoding_t quantizationEncoding;
  uint32_t numElements;
  Qnn_Tensor_t *indexTensor;
  Qnn_QuantizeParams_t **vectorElements;
};

/* Initializers. */
#define QNN_API_VERSION_INIT { { QNN_API_VERSION_MAJOR, QNN_API_VERSION_MINOR, QNN_API_VERSION_PATCH }, QNN_VERSION_INIT }
#define QNN_ARRAYOF_INIT { QNN_QUANTIZATION_ENCODING_UNDEFINED, 0u, NULL, NULL }
#define QNN_AXIS_SCALE_OFFSET_INIT { 0, 0u, NULL }
#define QNN_BLOCKWISE_EXPANSION_INIT { 0, NULL, 0u, 0u, QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_UNDEFINED, { NULL, } }
#define QNN_BLOCK_ENCODING_INIT { 0u, NULL }
#define QNN_BW_AXIS_SCALE_OFFSET_INIT { 0u, 0, 0u, NULL, NULL }
#define QNN_BW_AXIS_SCALE_OFFSET_MAPPED_INIT { 0u, 0, QNN_QUANTIZATION_ENCODING_MAPPING_STANDARD_SYMMETRIC, 0u, NULL, NULL }
#define QNN_BW_BLOCKWISE_EXPANSION_MAPPED_INIT { 0u, QNN_QUANTIZATION_ENCODING_MAPPING_STANDARD_SYMMETRIC, 0, NULL, 0u, 0u, QNN_BLOCKWISE_EXPANSION_BITWIDTH_SCALE_STORAGE_UNDEFINED, { NULL, } }
#define QNN_BW_BLOCK_MAPPED_ENCODING_INIT { 0u, QNN_QUANTIZATION_ENCODING_MAPPING_STANDARD_SYMMETRIC, NULL, NULL }
#define QNN_BW_FLOAT_BLOCK_ENCODING_INIT { 0u, 0u, NULL }
#define QNN_BW_SCALE_OFFSET_INIT { 0u, 0.0f, 0 }
#define QNN_CLIENT_BUFFER_INIT { NULL, 0u }
#define QNN_ERROR_REPORTING_CONFIG_INIT { QNN_ERROR_REPORTING_LEVEL_UNDEFINED, 0u }
#define QNN_FLOAT_BLOCK_ENCODING_INIT { 0u, NULL }
#define QNN_FLOAT_SCALE_OFFSET_INIT { 0.0f, 0.0f }
#define QNN_MICROSCALING_ENCODING_INIT { QNN_FLOAT_ENCODING_UNDEFINED, 0u, NULL, 0u, QNN_DATATYPE_UNDEFINED, { NULL } }
#define QNN_OPAQUE_OBJECT_INIT { NULL, 0u }
#define QNN_OPCONFIG_INIT { QNN_OPCONFIG_VERSION_1, { QNN_OPCONFIG_V1_INIT } }
#define QNN_OPCONFIG_V1_INIT { NULL, NULL, NULL, 0u, NULL, 0u, NULL, 0u, NULL }
#define QNN_OP_MAPPING_INIT { QNN_OP_MAPPING_VERSION_1, { NULL } }
#define QNN_OP_MAPPING_V1_INIT { NULL, NULL, 0, NULL, 0, }
#define QNN_PARAM_INIT { QNN_PARAMTYPE_UNDEFINED, NULL, { QNN_SCALAR_INIT } }
#define QNN_QUANTIZE_PARAMS_INIT { QNN_DEFINITION_UNDEFINED, QNN_QUANTIZATION_ENCODING_UNDEFINED, { QNN_SCALE_OFFSET_INIT } }
#define QNN_SCALAR_INIT { QNN_DATATYPE_UNDEFINED, { 0.0f } }
#define QNN_SCALE_OFFSET_INIT { 0.0f, 0 }
#define QNN_SPARSE_LAYOUT_HYBRID_COO_INIT { 0u, 0u }
#define QNN_SPARSE_PARAMS_INIT { QNN_SPARSE_LAYOUT_UNDEFINED, QNN_SPARSE_LAYOUT_HYBRID_COO_INIT }
#define QNN_TENSOR_INIT { QNN_TENSOR_VERSION_1, { QNN_TENSOR_V1_INIT } }
#define QNN_TENSOR_RETRIEVE_RAW_INIT { NULL, NULL }
#define QNN_TENSOR_SET_INIT { QNN_TENSOR_SET_VERSION_1, { QNN_TENSOR_SET_V1_INIT } }
#define QNN_TENSOR_SET_V1_INIT { 0u, NULL, 0u, NULL }
#define QNN_TENSOR_V1_INIT { 0u, NULL, QNN_TENSOR_TYPE_UNDEFINED, QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, QNN_DATATYPE_UNDEFINED, QNN_QUANTIZE_PARAMS_INIT, 0u, NULL, QNN_TENSORMEMTYPE_UNDEFINED, { QNN_CLIENT_BUFFER_INIT } }
#define QNN_TENSOR_V2_INIT { 0u, NULL, QNN_TENSOR_TYPE_UNDEFINED, QNN_TENSOR_DATA_FORMAT_FLAT_BUFFER, QNN_DATATYPE_UNDEFINED, QNN_QUANTIZE_PARAMS_INIT, 0u, NULL, QNN_TENSORMEMTYPE_UNDEFINED, { QNN_CLIENT_BUFFER_INIT }, NULL, QNN_SPARSE_PARAMS_INIT, 0u }
#define QNN_VECTOR_ENCODING_INIT { QNN_BW_AXIS_SCALE_OFFSET_INIT, 0u, 0u, 0u, 0u, 0u, }
#define QNN_VERSION_INIT { 0u, 0u, 0u }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNTYPES_H */
