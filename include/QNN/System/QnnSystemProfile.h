/* qnnemu: System library profile serialization.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_SYSTEM_QNNSYSTEMPROFILE_H
#define QNNEMU_SYSTEM_QNNSYSTEMPROFILE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "../QnnCommon.h"
#include "../QnnProfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Handles and scalar aliases. */
typedef struct QnnSystemProfile_ProfileEventV1_t QnnSystemProfile_ProfileEventV1_t;
typedef void *QnnSystemProfile_SerializationTargetHandle_t;

typedef enum {
  QNN_SYSTEM_PROFILE_NO_ERROR = 0,
  QNN_SYSTEM_PROFILE_ERROR_UNSUPPORTED_FEATURE = 1000,
  QNN_SYSTEM_PROFILE_ERROR_INVALID_HANDLE = 30000,
  QNN_SYSTEM_PROFILE_ERROR_INVALID_ARGUMENT = 30001,
  QNN_SYSTEM_PROFILE_ERROR_MEM_ALLOC = 31000
} QnnSystemProfile_Error_t;

typedef enum {
  QNN_SYSTEM_PROFILE_EVENT_DATA = 0,
  QNN_SYSTEM_PROFILE_EXTENDED_EVENT_DATA = 1,
  QNN_SYSTEM_PROFILE_EVENT_DATA_UNDEFINED = 2147483647
} QnnSystemProfile_EventDataType_t;

typedef enum {
  QNN_SYSTEM_PROFILE_METHOD_TYPE_NONE = 0,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_EXECUTE = 1,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_FINALIZE = 2,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_EXECUTE_ASYNC = 3,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_CREATE_FROM_BINARY = 4,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_DEINIT = 5,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_APP_CONTEXT_CREATE = 6,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_APP_COMPOSE_GRAPHS = 7,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_APP_EXECUTE_IPS = 8,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_GRAPH_COMPONENT = 9,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_APP_BACKEND_LIB_LOAD = 10,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_APPLY_BINARY_SECTION = 11,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_CONTEXT_FINALIZE = 12,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_CONTEXT_GET_BINARY_SIZE = 13,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_CONTEXT_GET_BINARY = 14,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_CONTEXT_GET_BINARY_SECTION_SIZE = 15,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_FINALIZE_TENSOR_UPDATES = 16,
  QNN_SYSTEM_PROFILE_METHOD_TYPE_BACKEND_UPDATE_BINARY_SECTION = 17
} QnnSystemProfile_MethodType_t;

typedef enum {
  QNN_SYSTEM_PROFILE_DATA_VERSION_1 = 1,
  QNN_SYSTEM_PROFILE_DATA_VERSION_UNDEFINED = 2147483647
} QnnSystemProfile_ProfileDataVersion_t;

typedef enum {
  QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_MAX_NUM_MESSAGES = 0,
  QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_SERIALIZATION_HEADER = 1,
  QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_CONFIG_UNDEFINED = 2147483647
} QnnSystemProfile_SerializationTargetConfigType_t;

typedef enum {
  QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_FILE = 1,
  QNN_SYSTEM_PROFILE_SERIALIZATION_TARGET_UNDEFINED = 2147483647
} QnnSystemProfile_SerializationTargetType_t;

typedef enum {
  QNN_SYSTEM_PROFILE_VISIBILITY_PUBLIC = 0,
  QNN_SYSTEM_PROFILE_VISIBILITY_PRIVATE = 1
} QnnSystemProfile_Visibility_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnSystemProfile_HeaderV1_t QnnSystemProfile_HeaderV1_t;
typedef struct _QnnSystemProfile_ProfileDataV1_t QnnSystemProfile_ProfileDataV1_t;
typedef struct _QnnSystemProfile_ProfileData_t QnnSystemProfile_ProfileData_t;
typedef struct _QnnSystemProfile_SerializationFileHeader_t QnnSystemProfile_SerializationFileHeader_t;
typedef struct _QnnSystemProfile_SerializationTargetConfig_t QnnSystemProfile_SerializationTargetConfig_t;
typedef struct _QnnSystemProfile_SerializationTargetFile_t QnnSystemProfile_SerializationTargetFile_t;
typedef struct _QnnSystemProfile_SerializationTarget_t QnnSystemProfile_SerializationTarget_t;

struct _QnnSystemProfile_HeaderV1_t {
  uint64_t startTime;
  uint64_t stopTime;
  uint64_t startMem;
  uint64_t stopMem;
  QnnSystemProfile_MethodType_t methodType;
  QnnSystemProfile_Visibility_t visibility;
  const char *graphName;
};

struct _QnnSystemProfile_ProfileDataV1_t {
  QnnSystemProfile_HeaderV1_t header;
  QnnSystemProfile_ProfileEventV1_t *profilingEvents;
  uint32_t numProfilingEvents;
};

struct _QnnSystemProfile_ProfileData_t {
  QnnSystemProfile_ProfileDataVersion_t version;
  union {
    QnnSystemProfile_ProfileDataV1_t v1;
  };
};

struct _QnnSystemProfile_SerializationFileHeader_t {
  const char *appName;
  const char *appVersion;
  const char *backendVersion;
};

struct _QnnSystemProfile_SerializationTargetConfig_t {
  QnnSystemProfile_SerializationTargetConfigType_t type;
  union {
    uint32_t maxNumMessages;
    QnnSystemProfile_SerializationFileHeader_t serializationHeader;
  };
};

struct _QnnSystemProfile_SerializationTargetFile_t {
  const char *fileName;
  const char *fileDirectory;
};

struct _QnnSystemProfile_SerializationTarget_t {
  QnnSystemProfile_SerializationTargetType_t type;
  union {
    QnnSystemProfile_SerializationTargetFile_t file;
  };
};

struct QnnSystemProfile_ProfileEventV1_t {
  QnnSystemProfile_EventDataType_t type;
  union {
    QnnProfile_EventData_t eventData;
    QnnProfile_ExtendedEventData_t extendedEventData;
  };
  QnnSystemProfile_ProfileEventV1_t *profileSubEventData;
  uint32_t numSubEvents;
};

/* Initializers. */
#define QNN_SYSTEM_PROFILE_DATA_INIT { QNN_SYSTEM_PROFILE_DATA_VERSION_UNDEFINED, { QNN_SYSTEM_PROFILE_DATA_V1_INIT }, }
#define QNN_SYSTEM_PROFILE_DATA_V1_INIT { QNN_SYSTEM_PROFILE_HEADER_V1_INIT, NULL, 0 }
#define QNN_SYSTEM_PROFILE_EVENT_V1_INIT { QNN_SYSTEM_PROFILE_EVENT_DATA_UNDEFINED, { QNN_PROFILE_EVENT_DATA_INIT }, NULL, 0 }
#define QNN_SYSTEM_PROFILE_HEADER_V1_INIT { 0, 0, 0, 0, QNN_SYSTEM_PROFILE_METHOD_TYPE_NONE, QNN_SYSTEM_PROFILE_VISIBILITY_PUBLIC, NULL, }

/* Entry points. */
Qnn_ErrorHandle_t QnnSystemProfile_createSerializationTarget(QnnSystemProfile_SerializationTarget_t serializationTargetInfo, QnnSystemProfile_SerializationTargetConfig_t *configs, uint32_t numConfigs, QnnSystemProfile_SerializationTargetHandle_t *serializationTarget);
Qnn_ErrorHandle_t QnnSystemProfile_freeSerializationTarget(QnnSystemProfile_SerializationTargetHandle_t serializationTarget);
Qnn_ErrorHandle_t QnnSystemProfile_serializeEventData(QnnSystemProfile_SerializationTargetHandle_t serializationTarget, const QnnSystemProfile_ProfileData_t **eventData, uint32_t numEvents);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_SYSTEM_QNNSYSTEMPROFILE_H */
