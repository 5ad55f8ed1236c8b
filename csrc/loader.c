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

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static GetProvidersFn g_inner;
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
  int rc = qnnemu_start_python((const void *)&ENTRY_POINT, INNER_FILE, ENTRY_MODULE, library_path,
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
  return g_inner(providerList, numProviders);
}
