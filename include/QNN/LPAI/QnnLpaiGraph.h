/* qnnemu: LPAI custom graph configurations and properties.
 * ABI-compatible with the QNN C API (core 2.39, QAIRT 2.50); written from layout facts for qnnemu. */
#ifndef QNNEMU_LPAI_QNNLPAIGRAPH_H
#define QNNEMU_LPAI_QNNLPAIGRAPH_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif
#include "QnnLpaiMem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Constants. */
#define QNN_LPAI_CORE_AFFINITY(core_id,affinity) { (affinity), (1U << (core_id)) }

typedef enum {
  QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_REAL_TIME = 1,
  QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_NON_REAL_TIME = 2,
  QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_UNDEFINED = 2147483647
} QnnLpaiGraph_ClientPerfType_t;

typedef enum {
  QNN_LPAI_GRAPH_CORE_AFFINITY_SOFT = 1,
  QNN_LPAI_GRAPH_CORE_AFFINITY_HARD = 2,
  QNN_LPAI_GRAPH_CORE_AFFINITY_UNDEFINED = 2147483647
} QnnLpaiGraph_CoreAffinityType_t;

typedef enum {
  QNN_LPAI_GRAPH_GET_PROP_SCRATCH_MEM_SIZE = 1,
  QNN_LPAI_GRAPH_GET_PROP_PERSISTENT_MEM_SIZE = 101,
  QNN_LPAI_GRAPH_GET_PROP_UNDEFINED = 2147483647
} QnnLpaiGraph_GetPropertyOption_t;

typedef enum {
  QNN_LPAI_GRAPH_SET_CFG_SCRATCH_MEM = 1,
  QNN_LPAI_GRAPH_SET_CFG_PERSISTENT_MEM = 101,
  QNN_LPAI_GRAPH_SET_CFG_PERF_CFG = 201,
  QNN_LPAI_GRAPH_SET_CFG_CORE_AFFINITY = 301,
  QNN_LPAI_GRAPH_SET_CFG_UNDEFINED = 2147483647
} QnnLpaiGraph_SetConfigOption_t;

/* Structures, declared first so that pointers to them can be used anywhere. */
typedef struct _QnnLpaiGraph_CoreAffinity_t QnnLpaiGraph_CoreAffinity_t;
typedef struct _QnnLpaiGraph_CustomConfig_t QnnLpaiGraph_CustomConfig_t;
typedef struct _QnnLpaiGraph_CustomProperty_t QnnLpaiGraph_CustomProperty_t;
typedef struct _QnnLpaiGraph_Mem_t QnnLpaiGraph_Mem_t;
typedef struct _QnnLpaiGraph_PerfCfg_t QnnLpaiGraph_PerfCfg_t;

struct _QnnLpaiGraph_CoreAffinity_t {
  QnnLpaiGraph_CoreAffinityType_t affinity;
  uint32_t coreSelection;
};

struct _QnnLpaiGraph_CustomConfig_t {
  uint32_t option;
  void *config;
};

struct _QnnLpaiGraph_CustomProperty_t {
  uint32_t option;
  void *property;
};

struct _QnnLpaiGraph_Mem_t {
  QnnLpaiMem_MemType_t memType;
  uint32_t size;
  void *addr;
};

struct _QnnLpaiGraph_PerfCfg_t {
  uint32_t fps;
  uint32_t ftrtRatio;
  QnnLpaiGraph_ClientPerfType_t clientType;
};

/* Initializers. */
#define QNN_LPAI_GRAPH_CORE_AFFINITY_INIT { QNN_LPAI_GRAPH_CORE_AFFINITY_SOFT, 0u }
#define QNN_LPAI_GRAPH_CUSTOM_CONFIG_INIT { QNN_LPAI_GRAPH_SET_CFG_UNDEFINED, NULL }
#define QNN_LPAI_GRAPH_CUSTOM_PROPERTY_INIT { QNN_LPAI_GRAPH_GET_PROP_UNDEFINED, NULL }
#define QNN_LPAI_GRAPH_MEM_INIT { QNN_LPAI_MEM_TYPE_UNDEFINED, 0u, NULL }
#define QNN_LPAI_GRAPH_PERF_CFG_INIT { 1u, 10u, QNN_LPAI_GRAPH_CLIENT_PERF_TYPE_REAL_TIME }

#ifdef __cplusplus
}
#endif

#endif /* QNNEMU_LPAI_QNNLPAIGRAPH_H */
