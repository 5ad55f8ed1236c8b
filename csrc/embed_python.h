/* The embedded interpreter's start-up, shared by libQnnHtpEmu.so (shim.c) and libQnnSystem.so
 * (system_shim.c).  Header-only (static functions): each library must stand alone, since either
 * may be the first one an application loads.  The includer defines QNNEMU_PYTHON_HOME and
 * QNNEMU_PYTHON_PATHS (generated headers) before including this file.
 */
#ifndef QNNEMU_EMBED_PYTHON_H
#define QNNEMU_EMBED_PYTHON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "QnnLog.h"

/* Log callbacks take a va_list; Python cannot build one, so it calls this with a finished
 * message and we forward it as "%s". */
static void forward_log(QnnLog_Callback_t cb, QnnLog_Level_t level, uint64_t ts, const char *fmt,
                        ...) {
  va_list args;
  va_start(args, fmt);
  cb(fmt, level, ts, args);
  va_end(args);
}

/* Directory of the shared object holding ``anchor``, e.g. <site-packages>/qnnemu/lib. */
static int library_dir(const void *anchor, char *out, size_t size) {
  Dl_info info;
  if (!dladdr(anchor, &info) || !info.dli_fname) return -1;
  snprintf(out, size, "%s", info.dli_fname);
  char *slash = strrchr(out, '/');
  if (!slash) return -1;
  *slash = '\0';
  return 0;
}

/* Starts the interpreter when no Python is running (a C application), with the package's
 * site directory on sys.path so that a venv install is found too.  In a Python process
 * (ctypes, ONNX Runtime inside Python) the running interpreter is used as is. */
static int ensure_python(const void *anchor) {
  /* Apps usually dlopen backends RTLD_LOCAL, which keeps libpython's symbols private to us;
   * extension modules (_cffi_backend, numpy) need them global, so promote libpython. */
  Dl_info py_info;
  if (dladdr((void *)&Py_IsInitialized, &py_info) && py_info.dli_fname)
    dlopen(py_info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  if (Py_IsInitialized()) return 0;
  /* The process is the application's: no setlocale() and no LC_CTYPE=C.UTF-8 coercion (which
   * would also put LC_CTYPE into the environment of its children).  UTF-8 mode gives the
   * interpreter a locale-independent file-system and stdio encoding instead. */
  PyPreConfig preconfig;
  PyPreConfig_InitPythonConfig(&preconfig);
  preconfig.parse_argv = 0;
  preconfig.configure_locale = 0;
  preconfig.coerce_c_locale = 0;
  preconfig.coerce_c_locale_warn = 0;
  preconfig.utf8_mode = 1;
  PyStatus status = Py_PreInitialize(&preconfig);
  if (PyStatus_Exception(status)) {
    fprintf(stderr, "qnnemu: cannot pre-initialize Python: %s\n",
            status.err_msg ? status.err_msg : "unknown error");
    return -1;
  }
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  config.configure_c_stdio = 0; /* the application's stdio buffering stays as it is */
  status = PyConfig_SetBytesString(&config, &config.home, QNNEMU_PYTHON_HOME);
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    fprintf(stderr, "qnnemu: cannot start Python (home %s): %s\n", QNNEMU_PYTHON_HOME,
            status.err_msg ? status.err_msg : "unknown error");
    return -1;
  }
  char dir[4096];
  PyObject *sys_path = PySys_GetObject("path"); /* borrowed */
  if (sys_path && library_dir(anchor, dir, sizeof dir) == 0) {
    /* <site>/qnnemu/lib -> <site>: where the package and its dependencies live. */
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    PyObject *p = PyUnicode_DecodeFSDefault(dir);
    if (p) {
      PyList_Insert(sys_path, 0, p);
      Py_DECREF(p);
    }
  }
  if (sys_path) {
    /* Baked build-time site directories, then QNNEMU_PYTHONPATH (':'-separated). */
    const char *lists[2] = {QNNEMU_PYTHON_PATHS, getenv("QNNEMU_PYTHONPATH")};
    for (int i = 0; i < 2; i++) {
      if (!lists[i] || !*lists[i]) continue;
      char *copy = strdup(lists[i]);
      for (char *tok = strtok(copy, ":"); tok; tok = strtok(NULL, ":")) {
        PyObject *p = PyUnicode_DecodeFSDefault(tok);
        if (p) {
          PyList_Append(sys_path, p);
          Py_DECREF(p);
        }
      }
      free(copy);
    }
  }
  /* Release the GIL: cffi takes it with PyGILState_Ensure on every call. */
  PyEval_SaveThread();
  return 0;
}

#endif /* QNNEMU_EMBED_PYTHON_H */
