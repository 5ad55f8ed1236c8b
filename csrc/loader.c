/* The exported entry point of libQnnHtpEmu.so (QnnInterface.h: QnnInterface_getProviders) and,
 * built with -DQNNEMU_LOADER_SYSTEM, of libQnnSystem.so (System/QnnSystemInterface.h:
 * QnnSystemInterface_getProviders) and, built with -DQNNEMU_LOADER_LPAI, of libQnnLpaiEmu.so (the
 * LPAI backend: QnnInterface_getProviders answered by the backend module's LPAI provider).
 *
 * Plain C with no link to libpython or to anything but libc, so the file can be copied, renamed
 * (libQnnHtp.so, as apps load backends) or reached through a symlink.  On the first call it finds
 * and starts Python (csrc/embed_python.h), imports the qnnemu package, loads the cffi module
 * holding the table (_qnnemu_htp_abi.so / _qnnemu_system_abi.so: csrc/shim.c,
 * csrc/system_shim.c) from the package's lib directory and forwards to it.
 *
 * When that fails no logger can exist yet (QnnLog handles come from the table), so the reason is
 * written to stderr, once per library and process, as one line starting with "qnnemu: ", and
 * the call returns QNN_COMMON_ERROR_LOADING_BINARIES (QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES when
 * the package's version is not the library's).  Nothing is ever written to stdout.
 *
 * The backend also brings our FastRPC shared-memory library (libcdsprpc.so, csrc/rpcmem.c) into
 * the process, without a DT_NEEDED: the first call dlopens the libcdsprpc.so beside the library
 * (as in an SDK-shaped tree) or in the package, unless one is loaded already, so that an app's
 * later dlopen("libcdsprpc.so") finds it by its soname.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "embed_python.h"

#define QNNEMU_EXPORT __attribute__((visibility("default")))

#ifdef QNNEMU_LOADER_SYSTEM
#include "System/QnnSystemInterface.h"
#define ENTRY_POINT QnnSystemInterface_getProviders
#define PROVIDER_TYPE QnnSystemInterface_t
#define INVALID_PARAMETER QNN_SYSTEM_INTERFACE_ERROR_INVALID_PARAMETER
#define INNER_FILE "_qnnemu_system_abi.so"
#define INNER_ENTRY "qnnemu_system_providers"
#define ENTRY_MODULE "qnnemu.abi.system_entry"
#else
#include "QnnInterface.h"
#define ENTRY_POINT QnnInterface_getProviders
#define PROVIDER_TYPE QnnInterface_t
#define INVALID_PARAMETER QNN_INTERFACE_ERROR_INVALID_PARAMETER
#define INNER_FILE "_qnnemu_htp_abi.so"
#ifdef QNNEMU_LOADER_LPAI
/* libQnnLpaiEmu.so: the same module's second provider (QNN_BACKEND_ID_LPAI, csrc/shim.c). */
#define INNER_ENTRY "qnnemu_lpai_providers"
#else
#define INNER_ENTRY "qnnemu_htp_providers"
#endif
#define ENTRY_MODULE "qnnemu.abi.entry"
#define RPCMEM_SONAME "libcdsprpc.so"
#endif

typedef Qnn_ErrorHandle_t (*GetProvidersFn)(const PROVIDER_TYPE ***, uint32_t *);
static GetProvidersFn g_inner;

#if !defined(QNNEMU_LOADER_SYSTEM) && !defined(QNNEMU_LOADER_LPAI)
/* Library layout (QNN HTP backend documentation, "HTP Session & Artifact Usage Guidelines",
 * "Unsupported Library Use"): a second copy of the backend library, loaded from another path,
 * is detected there and registerOpPackage, validateOpConfig, contextCreate, deviceCreate and
 * graphCreate return QNN_COMMON_ERROR_LOADING_BINARIES.  The vendor's x86-64 libQnnHtp.so takes a
 * second copy (every call succeeds), so qnnemu accepts it too and warns (rule
 * QNNEMU-library-second-copy, qnnemu/abi/library_copies.py).
 *
 * Every copy of this loader shares one Python and, when it loads the package's cffi module, one
 * table.  The module records the first loader to register (qnnemu_htp_loader_register: by the
 * real path of the library, in the order of first getProviders); a later copy at another path
 * hands out its own copy of the provider whose five guarded entries mark the calling thread as
 * "through copy <path>" (qnnemu_htp_loader_enter) around the shared entry, which warns. */
#define LAYOUT_CHECK 1
typedef int (*LoaderRegisterFn)(const char *path);
typedef void (*LoaderEnterFn)(const char *path);
static LoaderEnterFn g_enter;
static int g_second_copy;
static char g_self_path[PATH_MAX];
/* The provider as the module lays it out: the interface, then the padding slots newer clients
 * may read (csrc/abi_shim.h ABI_EXTRA_SLOTS, 64). */
static struct {
  QnnInterface_t iface;
  void *extra[64];
} g_copy;
static const QnnInterface_t *g_copy_list[1];
static QNN_INTERFACE_VER_TYPE g_shared;   /* the shared table the trampolines forward to */

static Qnn_ErrorHandle_t copy_registerOpPackage(Qnn_BackendHandle_t b, const char *path, const char *provider,
                                                const char *target) {
  g_enter(g_self_path);
  Qnn_ErrorHandle_t rc = g_shared.backendRegisterOpPackage(b, path, provider, target);
  g_enter(NULL);
  return rc;
}
static Qnn_ErrorHandle_t copy_validateOpConfig(Qnn_BackendHandle_t b, Qnn_OpConfig_t op) {
  g_enter(g_self_path);
  Qnn_ErrorHandle_t rc = g_shared.backendValidateOpConfig(b, op);
  g_enter(NULL);
  return rc;
}
static Qnn_ErrorHandle_t copy_contextCreate(Qnn_BackendHandle_t b, Qnn_DeviceHandle_t d, const QnnContext_Config_t **c,
                                            Qnn_ContextHandle_t *out) {
  g_enter(g_self_path);
  Qnn_ErrorHandle_t rc = g_shared.contextCreate(b, d, c, out);
  g_enter(NULL);
  return rc;
}
static Qnn_ErrorHandle_t copy_deviceCreate(Qnn_LogHandle_t l, const QnnDevice_Config_t **c, Qnn_DeviceHandle_t *out) {
  g_enter(g_self_path);
  Qnn_ErrorHandle_t rc = g_shared.deviceCreate(l, c, out);
  g_enter(NULL);
  return rc;
}
static Qnn_ErrorHandle_t copy_graphCreate(Qnn_ContextHandle_t c, const char *name, const QnnGraph_Config_t **cfg,
                                          Qnn_GraphHandle_t *out) {
  g_enter(g_self_path);
  Qnn_ErrorHandle_t rc = g_shared.graphCreate(c, name, cfg, out);
  g_enter(NULL);
  return rc;
}

/* This copy's provider list: the shared provider with the five guarded entries wrapped (built
 * once; the shared list is static in the module, so later calls need only the status). */
static pthread_once_t g_copy_once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t g_copy_status;

static void build_copy(void) {
  const PROVIDER_TYPE **shared = NULL;
  uint32_t count = 0;
  g_copy_status = g_inner(&shared, &count);
  if (g_copy_status != QNN_SUCCESS || count < 1 || !shared) return;
  memcpy(&g_copy, shared[0], sizeof g_copy);
  g_shared = shared[0]->QNN_INTERFACE_VER_NAME;
  g_copy.iface.QNN_INTERFACE_VER_NAME.backendRegisterOpPackage = copy_registerOpPackage;
  g_copy.iface.QNN_INTERFACE_VER_NAME.backendValidateOpConfig = copy_validateOpConfig;
  g_copy.iface.QNN_INTERFACE_VER_NAME.contextCreate = copy_contextCreate;
  g_copy.iface.QNN_INTERFACE_VER_NAME.deviceCreate = copy_deviceCreate;
  g_copy.iface.QNN_INTERFACE_VER_NAME.graphCreate = copy_graphCreate;
  g_copy_list[0] = &g_copy.iface;
}

static Qnn_ErrorHandle_t second_copy_providers(const PROVIDER_TYPE ***providerList, uint32_t *numProviders) {
  pthread_once(&g_copy_once, build_copy);
  if (!g_copy_list[0]) {
    *providerList = NULL;
    *numProviders = 0;
    return g_copy_status != QNN_SUCCESS ? g_copy_status : QNN_COMMON_ERROR_LOADING_BINARIES;
  }
  *providerList = g_copy_list;
  *numProviders = 1;
  return QNN_SUCCESS;
}
#endif

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static Qnn_ErrorHandle_t g_status = QNN_COMMON_ERROR_LOADING_BINARIES;

QNNEMU_EXPORT Qnn_ErrorHandle_t ENTRY_POINT(const PROVIDER_TYPE ***providerList, uint32_t *numProviders);

#ifdef RPCMEM_SONAME
/* libcdsprpc.so beside this library, else in the package; not when one is loaded already. */
static void load_rpcmem(const char *library_path, const char *package_lib_dir) {
  if (dlopen(RPCMEM_SONAME, RTLD_NOW | RTLD_NOLOAD)) return;
  char dir[PATH_MAX], candidate[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", library_path);
  strip_last(dir);
  const char *dirs[2] = {dir, package_lib_dir};
  for (int i = 0; i < 2; i++) {
    if (join(candidate, sizeof candidate, dirs[i], RPCMEM_SONAME) && path_is_file(candidate) &&
        dlopen(candidate, RTLD_NOW | RTLD_LOCAL))
      return;
  }
}
#endif

static void load_once(void) {
  char library_path[PATH_MAX] = "", inner_dir[PATH_MAX] = "", inner_path[PATH_MAX], why[4096] = "";
  /* The anchor dladdr names this file by: a static function, never &ENTRY_POINT -- an exported
   * symbol may bind to another copy loaded RTLD_GLOBAL before (ONNX Runtime loads backends so),
   * which would make this copy take that copy's path for its own. */
  int rc = qnnemu_start_python((const void *)&load_once, INNER_FILE, ENTRY_MODULE, library_path,
                               inner_dir, why, sizeof why);
  if (rc == 0) {
    void *inner = NULL;
    if (!join(inner_path, sizeof inner_path, inner_dir, INNER_FILE) ||
        !(inner = dlopen(inner_path, RTLD_NOW | RTLD_LOCAL))) {
      set_why(why, sizeof why, "cannot load %s: %s", inner_path, dlerror());
    } else if (!(*(void **)&g_inner = dlsym(inner, INNER_ENTRY))) {
      set_why(why, sizeof why, "%s has no %s", inner_path, INNER_ENTRY);
    }
#ifdef RPCMEM_SONAME
    if (g_inner) load_rpcmem(library_path, inner_dir);
#endif
#ifdef LAYOUT_CHECK
    LoaderRegisterFn reg = NULL;
    if (g_inner && (*(void **)&reg = dlsym(inner, "qnnemu_htp_loader_register")) &&
        (*(void **)&g_enter = dlsym(inner, "qnnemu_htp_loader_enter"))) {
      snprintf(g_self_path, sizeof g_self_path, "%s", library_path);
      g_second_copy = !reg(g_self_path);
    }
#endif
  }
  if (!g_inner) {
    if (rc == QNNEMU_VERSION_MISMATCH) g_status = QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES;
    fprintf(stderr, "qnnemu: %s: %s\n", *library_path ? library_path : "library", why);
  }
}

QNNEMU_EXPORT Qnn_ErrorHandle_t ENTRY_POINT(const PROVIDER_TYPE ***providerList, uint32_t *numProviders) {
  if (!providerList || !numProviders) return INVALID_PARAMETER;
  pthread_once(&g_once, load_once);
  if (!g_inner) {
    *providerList = NULL;
    *numProviders = 0;
    return g_status;
  }
#ifdef LAYOUT_CHECK
  if (g_second_copy) return second_copy_providers(providerList, numProviders);
#endif
  return g_inner(providerList, numProviders);
}
