/* qnnemu: Profiling component: levels, events and their data.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_QNNPROFILE_H
#define QNNEMU_QNNPROFILE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnCommon.h"
#include "QnnTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_PROFILE_EVENTTYPE_BACKEND 1000
#define QNN_PROFILE_EVENTTYPE_DEINIT 500
#define QNN_PROFILE_EVENTTYPE_EXECUTE 400
#define QNN_PROFILE_EVENTTYPE_EXECUTE_DEVICE 407
#define QNN_PROFILE_EVENTTYPE_EXECUTE_POSTPROCESS 408
#define QNN_PROFILE_EVENTTYPE_EXECUTE_PREPROCESS 406
#define QNN_PROFILE_EVENTTYPE_EXECUTE_QUEUE_WAIT 405
#define QNN_PROFILE_EVENTTYPE_FINALIZE 300
#define QNN_PROFILE_EVENTTYPE_NODE 404
#define QNN_PROFILE_EVENTTYPE_TRACE 600
#define QNN_PROFILE_EVENTUNIT_BACKEND 1000
#define QNN_PROFILE_EVENTUNIT_BYTES 2
#define QNN_PROFILE_EVENTUNIT_COUNT 4
#define QNN_PROFILE_EVENTUNIT_CYCLES 3
#define QNN_PROFILE_EVENTUNIT_MICROSEC 1
#define QNN_PROFILE_EVENTUNIT_NONE 6
#define QNN_PROFILE_EVENTUNIT_OBJECT 5
#define QNN_PROFILE_LEVEL_BACKEND 1000
#define QNN_PROFILE_LEVEL_BASIC 1
#define QNN_PROFILE_LEVEL_DETAILED 2

/* Handles and scalar aliases. */
typedef void *QnnProfile_CustomConfig_t;
typedef uint64_t QnnProfile_EventId_t;
typedef uint32_t QnnProfile_EventType_t;
typedef uint32_t QnnProfile_EventUnit_t;
typedef uint64_t QnnProfile_EventValue_t;
typedef uint32_t QnnProfile_Level_t;

typedef enum {
  QNN_PROFILE_CONFIG_OPTION_CUSTOM = 0,
  QNN_PROFILE_CONFIG_OPTION_MAX_EVENTS = 1,
  QNN_PROFILE_CONFIG_OPTION_ENABLE_OPTRACE = 2,
  QNN_PROFILE_CONFIG_OPTION_UNDEFINED = 2147483647
} QnnProfile_ConfigOption_t;

typedef enum {
  QNN_PROFILE_NO_ERROR = 0,
  QNN_PROFILE_ERROR_UNSUPPORTED = 1000,
  QNN_PROFILE_ERROR_MEM_ALLOC = 1002,
  QNN_PROFILE_ERROR_INVALID_ARGUMENT = 1004,
  QNN_PROFILE_ERROR_INVALID_HANDLE = 12000,
  QNN_PROFILE_MIN_ERROR = 12000,
  QNN_PROFILE_ERROR_HANDLE_IN_USE = 12001,
  QNN_PROFILE_ERROR_INCOMPATIBLE_EVENT = 12002,
  QNN_PROFILE_MAX_ERROR = 12999,
  QNN_PROFILE_ERROR_UNDEFINED = 2147483647
} QnnProfile_Error_t;

typedef enum {
  QNN_PROFILE_DATA_VERSION_1 = 1,
  QNN_PROFILE_DATA_VERSION_UNDEFINED = 2147483647
} QnnProfile_ExtendedEventDataVersion_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnProfile_BackendOpaqueObject_t QnnProfile_BackendOpaqueObject_t;
typedef struct _QnnProfile_Config_t QnnProfile_Config_t;
typedef struct _QnnProfile_EventData_t QnnProfile_EventData_t;
typedef struct _QnnProfile_ExtendedEventDataV1_t QnnProfile_ExtendedEventDataV1_t;
typedef struct _QnnProfile_ExtendedEventData_t QnnProfile_ExtendedEventData_t;

struct _QnnProfile_BackendOpaqueObject_t {
  Qnn_OpaqueObject_t opaqueObject;
  const char *fileName;
};

struct _QnnProfile_Config_t {
  QnnProfile_ConfigOption_t option;
  union {
    QnnProfile_CustomConfig_t customConfig;
    uint64_t numMaxEvents;
    uint8_t enableOptrace;
  };
};

struct _QnnProfile_EventData_t {
  QnnProfile_EventType_t type;
  QnnProfile_EventUnit_t unit;
  QnnProfile_EventValue_t value;
  const char *identifier;
};

struct _QnnProfile_ExtendedEventDataV1_t {
  QnnProfile_EventType_t type;
  QnnProfile_EventUnit_t unit;
  union {
    Qnn_Scalar_t value;
    QnnProfile_BackendOpaqueObject_t backendOpaqueObject;
  };
  uint64_t timestamp;
  const char *identifier;
};

struct _QnnProfile_ExtendedEventData_t {
  QnnProfile_ExtendedEventDataVersion_t version;
  union {
    QnnProfile_ExtendedEventDataV1_t v1;
  };
};

/* Initializers. */
#define QNN_PROFILE_BACKEND_OPAQUE_OBJECT_INIT { QNN_OPAQUE_OBJECT_INIT, NULL }
#define QNN_PROFILE_CONFIG_INIT { QNN_PROFILE_CONFIG_OPTION_UNDEFINED, { NULL } }
#define QNN_PROFILE_EVENTTYPE_INIT 100
#define QNN_PROFILE_EVENT_DATA_INIT { 0u, 0u, 0u, NULL }
#define QNN_PROFILE_EXTENDED_EVENT_DATA_INIT { QNN_PROFILE_DATA_VERSION_1, { QNN_PROFILE_EXTENDED_EVENT_DATA_V1_INIT } }
#define QNN_PROFILE_EXTENDED_EVENT_DATA_V1_INIT { 0u, 0u, { QNN_SCALAR_INIT }, 0u, NULL }

/* Entry points. */
Qnn_ErrorHandle_t QnnProfile_create(Qnn_BackendHandle_t backend, QnnProfile_Level_t level, Qnn_ProfileHandle_t *profile);
Qnn_ErrorHandle_t QnnProfile_free(Qnn_ProfileHandle_t profile);
Qnn_ErrorHandle_t QnnProfile_getEventData(QnnProfile_EventId_t eventId, QnnProfile_EventData_t *eventData);
Qnn_ErrorHandle_t QnnProfile_getEvents(Qnn_ProfileHandle_t profile, const QnnProfile_EventId_t **profileEventIds, uint32_t *numEvents);
Qnn_ErrorHandle_t QnnProfile_getExtendedEventData(QnnProfile_EventId_t eventId, QnnProfile_ExtendedEventData_t *eventData);
Qnn_ErrorHandle_t QnnProfile_getSubEvents(QnnProfile_EventId_t eventId, const QnnProfile_EventId_t **subEventIds, uint32_t *numSubEvents);
Qnn_ErrorHandle_t QnnProfile_setConfig(Qnn_ProfileHandle_t profileHandle, const QnnProfile_Config_t **config);

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_QNNPROFILE_H */
